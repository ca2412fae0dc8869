//! How each server family is told to produce exactly N output tokens, and how to tell which family a server is.
//!
//! | dialect    | length fields sent                                            | detected from                         |
//! |------------|---------------------------------------------------------------|---------------------------------------|
//! | `vllm`     | `max_tokens`, `min_tokens`, `ignore_eos: true`                | `/v1/models` `owned_by: "vllm"`, `/version` |
//! | `sglang`   | `max_tokens`, `min_tokens`, `ignore_eos: true`                | `owned_by: "sglang"`                  |
//! | `tabbyapi` | `max_tokens`, `min_tokens`, `ban_eos_token: true`             | `owned_by: "tabbyAPI"`                |
//! | `llamacpp` | `max_tokens`, `n_predict`, `ignore_eos: true`                 | `owned_by: "llamacpp"`, `/props`      |
//! | `openai`   | `max_tokens` only (the output may end early at EOS)           | anything else                         |
//!
//! TabbyAPI has no `ignore_eos`; its `ban_eos_token` is the same thing, and it reads `min_tokens` (alias
//! `min_length`). llama.cpp's native length field is `n_predict`; its OpenAI layer maps `max_tokens` onto it, so both
//! are sent. Plain OpenAI-compatible servers get `max_tokens` only, and a record whose `gen_tokens` falls short of
//! `asked_tokens` shows that the length was not forced.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// The request header naming the session a request belongs to, sent with every session step
/// ([`super::client::Client::complete_in_session`]; the value is `<session>-<instance>`, a sub-agent's its
/// parent's): a router that keeps a session on one replica reads it (vLLM production-stack's session router with
/// `--session-key x-session-id`; the sim-server's fleet under `session_affinity`,
/// [`crate::sim_server::SESSION_HEADER`]).
pub const SESSION_HEADER: &str = "x-session-id";

/// The server family, deciding the length-forcing fields of each request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// Ask the server (`/v1/models` `owned_by`, then `/props`, then `/version`); `openai` when it does not say.
    #[default]
    Auto,
    Vllm,
    Sglang,
    Tabbyapi,
    Llamacpp,
    Openai,
}

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Auto => "auto",
            Dialect::Vllm => "vllm",
            Dialect::Sglang => "sglang",
            Dialect::Tabbyapi => "tabbyapi",
            Dialect::Llamacpp => "llamacpp",
            Dialect::Openai => "openai",
        }
    }

    /// The dialect named by an `/v1/models` entry's `owned_by`, if it names one we know.
    pub fn from_owned_by(owned_by: &str) -> Option<Dialect> {
        let o = owned_by.to_ascii_lowercase();
        if o.contains("vllm") {
            Some(Dialect::Vllm)
        } else if o.contains("sglang") {
            Some(Dialect::Sglang)
        } else if o.contains("tabby") {
            Some(Dialect::Tabbyapi)
        } else if o.contains("llamacpp") || o.contains("llama.cpp") || o.contains("llama-cpp") {
            Some(Dialect::Llamacpp)
        } else {
            None
        }
    }

    /// Whether the dialect can force an exact output length (everything but plain `openai`).
    pub fn forces_length(self) -> bool {
        !matches!(self, Dialect::Openai | Dialect::Auto)
    }

    /// Add the length-forcing fields for `tokens` output tokens to a request body as a JSON map: the reference
    /// the tests hold [`Dialect::write_length`] to (requests are built as bytes).
    #[cfg(test)]
    pub fn apply_length(self, body: &mut serde_json::Map<String, Value>, tokens: u32) {
        body.insert("max_tokens".into(), tokens.into());
        match self {
            Dialect::Vllm | Dialect::Sglang => {
                body.insert("min_tokens".into(), tokens.into());
                body.insert("ignore_eos".into(), true.into());
            }
            Dialect::Tabbyapi => {
                body.insert("min_tokens".into(), tokens.into());
                body.insert("ban_eos_token".into(), true.into());
            }
            Dialect::Llamacpp => {
                body.insert("n_predict".into(), tokens.into());
                body.insert("ignore_eos".into(), true.into());
            }
            Dialect::Openai | Dialect::Auto => {}
        }
    }

    /// Add the length-forcing fields for `tokens` output tokens (`max_tokens`, plus the dialect's way of forcing
    /// the length: see the module docs), written as JSON object members (each with its leading comma) straight into
    /// a request body being built as bytes.
    pub fn write_length(self, out: &mut Vec<u8>, tokens: u32) {
        use std::io::Write as _;
        // Writing into a Vec cannot fail.
        let _ = write!(out, ",\"max_tokens\":{tokens}");
        self.write_forcing(out, tokens);
    }

    /// The dialect's fields that force the length, beside the length field itself (the Responses API's is
    /// `max_output_tokens`, issue #44).
    pub fn write_forcing(self, out: &mut Vec<u8>, tokens: u32) {
        use std::io::Write as _;
        let _ = match self {
            Dialect::Vllm | Dialect::Sglang => write!(out, ",\"min_tokens\":{tokens},\"ignore_eos\":true"),
            Dialect::Tabbyapi => write!(out, ",\"min_tokens\":{tokens},\"ban_eos_token\":true"),
            Dialect::Llamacpp => write!(out, ",\"n_predict\":{tokens},\"ignore_eos\":true"),
            Dialect::Openai | Dialect::Auto => Ok(()),
        };
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        <Dialect as clap::ValueEnum>::from_str(s, true)
            .map_err(|_| format!("unknown dialect {s:?} (expected auto, vllm, sglang, tabbyapi, llamacpp or openai)"))
    }
}

/// Decide the dialect from what the server answered. Each argument is a response body when the server gave one:
/// `/v1/models`, then `/props` (llama.cpp), then `/version` (vLLM). Returns the dialect and how it was decided.
pub fn detect_from(models: Option<&Value>, props: Option<&Value>, version: Option<&Value>) -> (Dialect, String) {
    if let Some(models) = models
        && let Some(data) = models.get("data").and_then(Value::as_array)
    {
        for entry in data {
            if let Some(owner) = entry.get("owned_by").and_then(Value::as_str)
                && let Some(d) = Dialect::from_owned_by(owner)
            {
                return (d, format!("/v1/models owned_by {owner:?}"));
            }
        }
    }
    if let Some(props) = props
        && (props.get("default_generation_settings").is_some() || props.get("total_slots").is_some())
    {
        return (Dialect::Llamacpp, "/props answered like llama.cpp".into());
    }
    if let Some(version) = version
        && version.get("version").and_then(Value::as_str).is_some()
    {
        return (Dialect::Vllm, "/version answered like vLLM".into());
    }
    (
        Dialect::Openai,
        "the server did not say; max_tokens only, output length not forced".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owned_by_names_the_family() {
        let m = |o: &str| json!({"object": "list", "data": [{"id": "m", "owned_by": o}]});
        assert_eq!(detect_from(Some(&m("vllm")), None, None).0, Dialect::Vllm);
        assert_eq!(detect_from(Some(&m("sglang")), None, None).0, Dialect::Sglang);
        assert_eq!(detect_from(Some(&m("tabbyAPI")), None, None).0, Dialect::Tabbyapi);
        assert_eq!(detect_from(Some(&m("llamacpp")), None, None).0, Dialect::Llamacpp);
        assert_eq!(
            detect_from(Some(&m("organization-owner")), None, None).0,
            Dialect::Openai
        );
    }

    #[test]
    fn props_and_version_are_fallbacks() {
        let props = json!({"default_generation_settings": {}, "total_slots": 1});
        assert_eq!(detect_from(None, Some(&props), None).0, Dialect::Llamacpp);
        assert_eq!(
            detect_from(None, None, Some(&json!({"version": "0.11.0"}))).0,
            Dialect::Vllm
        );
        assert_eq!(detect_from(None, None, None).0, Dialect::Openai);
    }

    #[test]
    fn length_fields_per_dialect() {
        let fields = |d: Dialect| {
            let mut b = serde_json::Map::new();
            d.apply_length(&mut b, 7);
            let mut k: Vec<String> = b.keys().cloned().collect();
            k.sort();
            k.join(",")
        };
        assert_eq!(fields(Dialect::Vllm), "ignore_eos,max_tokens,min_tokens");
        assert_eq!(fields(Dialect::Sglang), "ignore_eos,max_tokens,min_tokens");
        assert_eq!(fields(Dialect::Tabbyapi), "ban_eos_token,max_tokens,min_tokens");
        assert_eq!(fields(Dialect::Llamacpp), "ignore_eos,max_tokens,n_predict");
        assert_eq!(fields(Dialect::Openai), "max_tokens");
        assert_eq!("LlamaCpp".parse::<Dialect>(), Ok(Dialect::Llamacpp));
        assert!("bogus".parse::<Dialect>().is_err());
    }
}
