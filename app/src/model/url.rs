//! The page's URL: the agent token (`#token=` or `?token=`) and the scenario (`#s=1....`, see `shared::link`).
//!
//! The fragment is a `&`-separated list of `key=value` pairs. The page keeps the scenario there as the user
//! edits it (with `history.replaceState`, so the back button is not flooded) and keeps the token beside it.
//! A share link never carries the token.

/// Split a fragment or query string (without its leading `#`/`?`) into key/value pairs.
pub fn pairs(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

/// The value of `key` in the fragment, else in the query string.
pub fn param(hash: &str, search: &str, key: &str) -> Option<String> {
    let from = |s: &str| {
        pairs(s.trim_start_matches(['#', '?']))
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    };
    from(hash).or_else(|| from(search)).filter(|v| !v.is_empty())
}

/// The fragment with `key` set to `value` (or removed when `None`), other keys kept in order.
pub fn with_param(hash: &str, key: &str, value: Option<&str>) -> String {
    let mut out: Vec<(String, String)> = pairs(hash.trim_start_matches('#'))
        .into_iter()
        .filter(|(k, _)| k != key)
        .collect();
    if let Some(v) = value {
        out.push((key.to_string(), v.to_string()));
    }
    let body: Vec<String> = out
        .into_iter()
        .map(|(k, v)| if v.is_empty() { k } else { format!("{k}={v}") })
        .collect();
    if body.is_empty() {
        String::new()
    } else {
        format!("#{}", body.join("&"))
    }
}

/// The current `location.hash` and `location.search` (empty strings outside a browser).
pub fn location_parts() -> (String, String) {
    let Some(window) = web_sys::window() else {
        return (String::new(), String::new());
    };
    let loc = window.location();
    (loc.hash().unwrap_or_default(), loc.search().unwrap_or_default())
}

/// The agent token from the page URL, if any.
pub fn token() -> Option<String> {
    let (hash, search) = location_parts();
    param(&hash, &search, "token")
}

/// The websocket URL of the agent that served this page: `ws(s)://<same host>/ws?token=...`.
pub fn ws_url(token: &str) -> Option<String> {
    let loc = web_sys::window()?.location();
    let host = loc.host().ok()?;
    let scheme = if loc.protocol().ok()? == "https:" { "wss" } else { "ws" };
    Some(format!("{scheme}://{host}/ws?token={token}"))
}

/// This page's address without query or fragment (the base of share links).
pub fn page_base() -> String {
    let Some(window) = web_sys::window() else {
        return shared::link::DEFAULT_BASE.to_string();
    };
    let loc = window.location();
    let origin = loc.origin().unwrap_or_default();
    let path = loc.pathname().unwrap_or_else(|_| "/".to_string());
    format!("{origin}{path}")
}

/// A parameter of the page URL's fragment or query (`view`, `target`, `run`: what a reload restores).
pub fn page_param(key: &str) -> Option<String> {
    let (hash, search) = location_parts();
    param(&hash, &search, key)
}

/// Set (or with `None` remove) a parameter of the page URL's fragment, keeping the others.
pub fn set_page_param(key: &str, value: Option<&str>) {
    let (hash, _) = location_parts();
    replace_hash(&with_param(&hash, key, value));
}

/// Replace the fragment without adding a history entry or triggering navigation.
pub fn replace_hash(hash: &str) {
    let Some(window) = web_sys::window() else { return };
    let (old, _) = location_parts();
    if old == hash {
        return;
    }
    let Ok(history) = window.history() else { return };
    let loc = window.location();
    let path = loc.pathname().unwrap_or_default();
    let search = loc.search().unwrap_or_default();
    let url = format!("{path}{search}{hash}");
    let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn reads_token_from_fragment_or_query() {
        assert_eq!(param("#token=abc", "", "token").as_deref(), Some("abc"));
        assert_eq!(param("#s=1.x&token=abc", "", "token").as_deref(), Some("abc"));
        assert_eq!(param("", "?token=q1", "token").as_deref(), Some("q1"));
        assert_eq!(param("#s=1.x", "?a=b", "token"), None);
        assert_eq!(param("#token=", "", "token"), None);
    }

    #[test]
    fn sets_and_removes_keys() {
        assert_eq!(with_param("#token=abc", "s", Some("1.x")), "#token=abc&s=1.x");
        assert_eq!(with_param("#token=abc&s=1.x", "s", Some("1.y")), "#token=abc&s=1.y");
        assert_eq!(with_param("#s=1.x", "s", None), "");
        assert_eq!(with_param("", "s", Some("1.z")), "#s=1.z");
    }
}
