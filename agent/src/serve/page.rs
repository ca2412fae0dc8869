//! The page's files: embedded in the binary (release builds, see `agent/build.rs`) or read from a folder
//! (`--dist DIR`, `LOADSHAPE_DIST`; what debug builds use).
//!
//! Both are served with the same cache headers: `no-cache` on `index.html` (the browser revalidates it, so it never
//! names the modules of an older build, which the page loads on demand) and a year with `immutable` on Trunk's
//! content-hashed files (`name-<16 hex digits>.ext`: a new build is a new name). The embedded files carry their
//! content type, an `ETag` (their SHA-256) that answers `If-None-Match` with 304, and a gzip -9 copy made at build
//! time, sent to browsers that accept gzip.

use std::path::PathBuf;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;

/// Where the page comes from.
#[derive(Clone, Debug)]
pub enum Page {
    /// A folder holding Trunk's build (`index.html` and its assets).
    Dir(PathBuf),
    /// The copy embedded at build time (only in a binary built with the page: [`Page::embedded`]).
    Embedded,
}

impl Page {
    /// The embedded page, if this binary was built with one.
    pub fn embedded() -> Option<Page> {
        cfg!(embedded_page).then_some(Page::Embedded)
    }

    /// How the page is served, for the startup banner.
    pub fn describe(&self) -> String {
        match self {
            Page::Dir(dir) => format!("page from {}", dir.display()),
            Page::Embedded => format!("embedded page ({} files)", embedded::count()),
        }
    }

    /// The routes serving the page, for a router's fallback.
    pub fn router(&self) -> Router {
        let files = match self {
            Page::Dir(dir) => {
                Router::new().fallback_service(ServeDir::new(dir).fallback(ServeFile::new(dir.join("index.html"))))
            }
            Page::Embedded => Router::new().fallback(embedded::serve),
        };
        files
            .layer(axum::middleware::map_response(cache_control))
            .layer(SetResponseHeaderLayer::if_not_present(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ))
    }
}

/// `Cache-Control` by the requested file: a content-hashed asset is immutable; everything else (`index.html`, the
/// page's routes, errors) revalidates.
async fn cache_control(uri: axum::http::Uri, mut response: Response) -> Response {
    let value = if is_content_hashed(uri.path()) && response.status().is_success() {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(value));
    response
}

/// Whether `path`'s file name carries Trunk's content hash: `stem-<hex>.ext`, the hash a 64-bit value written in
/// lower-case hex without leading zeros (Trunk's `format!("{hash:x}")`): 16 digits, 15 one build in 16, fewer
/// rarely. 8 to 16 are taken (shorter has odds of 2^-32 per build; a word like `-abc` is not a hash).
pub fn is_content_hashed(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((stem, _ext)) = name.rsplit_once('.') else {
        return false;
    };
    let Some((_, hash)) = stem.rsplit_once('-') else {
        return false;
    };
    // wasm-bindgen's module is `name-<hash>_bg.wasm`.
    let hash = hash.strip_suffix("_bg").unwrap_or(hash);
    (8..=16).contains(&hash.len()) && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `Accept-Encoding` lists gzip (or `*`) with a non-zero weight.
pub fn accepts_gzip(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let weight = parts
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (name.eq_ignore_ascii_case("gzip") || name == "*") && weight > 0.0
        })
}

#[cfg(embedded_page)]
mod embedded {
    use axum::body::Body;
    use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
    use axum::response::{IntoResponse, Response};
    use rust_embed::Embed;

    #[derive(Embed)]
    // dist/ as agent/build.rs copied it, with the gzip copies.
    #[folder = "$OUT_DIR/page"]
    struct Assets;

    /// The page's files (not counting their gzip copies).
    pub fn count() -> usize {
        Assets::iter().filter(|p| !p.ends_with(".gz")).count()
    }

    /// One embedded file, or `index.html` for a path that names no file and has no extension (the page's own
    /// routes); a missing file with an extension is a 404, not the page under a wrong content type.
    pub async fn serve(uri: Uri, headers: HeaderMap) -> Response {
        let path = uri.path().trim_start_matches('/');
        let path = if path.is_empty() { "index.html" } else { path };
        let path = match Assets::get(path) {
            Some(_) if !path.ends_with(".gz") => path,
            None if !path.rsplit('/').next().unwrap_or(path).contains('.') => "index.html",
            _ => return StatusCode::NOT_FOUND.into_response(),
        };
        let file = Assets::get(path).expect("looked up above");
        let mime = HeaderValue::from_str(file.metadata.mimetype())
            .unwrap_or(HeaderValue::from_static("application/octet-stream"));
        let gzip = crate::serve::page::accepts_gzip(&headers)
            .then(|| Assets::get(&format!("{path}.gz")))
            .flatten();
        let file = gzip.clone().unwrap_or(file);
        let hash = file.metadata.sha256_hash();
        let etag = format!("\"{}\"", hex(&hash[..16]));
        let matches = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
        let etag = HeaderValue::from_str(&etag).expect("hex digits in quotes are a header value");
        let vary = (header::VARY, HeaderValue::from_static("accept-encoding"));
        if matches {
            return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag), vary]).into_response();
        }
        let mut response = (
            [(header::CONTENT_TYPE, mime), (header::ETAG, etag), vary],
            Body::from(file.data.into_owned()),
        )
            .into_response();
        if gzip.is_some() {
            response
                .headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(not(embedded_page))]
mod embedded {
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};

    pub fn count() -> usize {
        0
    }

    pub async fn serve() -> Response {
        (
            StatusCode::NOT_FOUND,
            "this loadshape was built without its page; serve it with --dist DIR",
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::{accepts_gzip, is_content_hashed};
    use axum::http::{HeaderMap, HeaderValue, header};

    #[test]
    fn gzip_is_sent_only_where_accepted() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(v));
            accepts_gzip(&h)
        };
        assert!(with("gzip, deflate, br, zstd"));
        assert!(with("br;q=1.0, GZIP;q=0.5"));
        assert!(with("*"));
        assert!(!with("gzip;q=0"));
        assert!(!with("br, identity"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn trunk_hashed_names_are_recognised() {
        assert!(is_content_hashed("/loadshape-app-4ce19fd2419af1a1_bg.wasm"));
        assert!(is_content_hashed("/loadshape-app-4ce19fd2419af1a1.js"));
        assert!(is_content_hashed("/main-fba0dce2277fc822.css"));
        assert!(is_content_hashed("/chunk_4-ccd6d10cab6678d9.wasm"));
        // A hash whose top digit is 0, as Trunk writes it (a build of 2026-12-07 named its module so).
        assert!(is_content_hashed("/loadshape-app-15e5abac5e510c3_bg.wasm"));
        assert!(!is_content_hashed("/loadshape-app-abc_bg.wasm"));
        assert!(!is_content_hashed("/main-fba0dce2277fc8220.css"));
        assert!(!is_content_hashed("/index.html"));
        assert!(!is_content_hashed("/"));
        assert!(!is_content_hashed("/app-XYZ0dce2277fc822.css"));
    }
}
