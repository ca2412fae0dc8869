//! Share links: a whole [`Scenario`] in a URL fragment, compact and versioned.
//!
//! Format (version 1): the fragment key `s` holds `1.` followed by the unpadded base64url encoding of the
//! zlib-compressed (deflate + Adler-32) compact JSON of the scenario:
//!
//! ```text
//! http://127.0.0.1:8080/#s=1.eNqrVspOrVSyUkpKzFHSUcpMUbIyNDA...
//! ```
//!
//! The Adler-32 checksum makes a truncated or edited link fail loudly instead of decoding to something else.
//! The leading version number lets a later encoding coexist: a link from a newer loadshape is reported as such.
//! Decoding parses and validates with [`Scenario::from_json`], so a link can never smuggle in a scenario the
//! CLI would reject. The fragment may carry other keys (`#token=...&s=1....`); [`decode`] finds `s`.
//!
//! Principal functions: [`encode`], [`decode`], [`link_url`], and the byte-level [`pack`]/[`unpack`].

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use thiserror::Error;

use crate::scenario::{Scenario, ScenarioError};

/// The encoding version this build writes. It reads every version up to and including this one.
pub const LINK_VERSION: u32 = 1;

/// The URL fragment key that holds the scenario.
pub const FRAGMENT_KEY: &str = "s";

/// The base URL `loadshape link` uses when none is given (the agent's default address).
pub const DEFAULT_BASE: &str = "http://127.0.0.1:8080/";

/// A decompressed scenario larger than this is refused (a link is a few hundred bytes; this stops a zip bomb).
pub const MAX_JSON_BYTES: usize = 1 << 20;

/// Why a link could not be turned back into a scenario. Each message says what to do about it.
#[derive(Debug, Error, PartialEq)]
pub enum LinkError {
    /// No `s=` payload in the text.
    #[error("the link holds no scenario (expected `#s=1.…` in the URL)")]
    Missing,
    /// The payload has no `VERSION.` prefix, or the version is not a number.
    #[error("the scenario link is malformed: expected `VERSION.DATA`, got `{0}`")]
    Malformed(String),
    /// The link was written by a newer loadshape.
    #[error(
        "the scenario link uses encoding version {found}, newer than this page understands (up to {supported}); open it with a newer loadshape"
    )]
    FutureVersion { found: u32, supported: u32 },
    /// Version 0 or another version this build never wrote.
    #[error("the scenario link uses unknown encoding version {0}")]
    UnknownVersion(u32),
    /// The data part is not base64url.
    #[error("the scenario link is truncated or corrupted (not valid base64url: {0}); copy the whole link again")]
    Base64(String),
    /// The compressed data is truncated or fails its checksum.
    #[error("the scenario link is truncated or corrupted (decompression failed: {0}); copy the whole link again")]
    Corrupt(String),
    /// Bytes follow the end of the compressed data (two payloads pasted together, or junk appended).
    #[error(
        "the scenario link is corrupted ({extra} bytes follow the end of its compressed data: two links pasted \
         together?); copy one whole link again"
    )]
    Trailing { extra: usize },
    /// The decompressed data is not UTF-8.
    #[error("the scenario link is corrupted (its content is not UTF-8 text)")]
    NotText,
    /// The scenario itself is invalid. (Not a `#[source]`: the message already holds it, and a chain printer such
    /// as anyhow's `{:#}` would print it twice.)
    #[error("the scenario in the link is invalid: {0}")]
    Scenario(ScenarioError),
}

impl From<ScenarioError> for LinkError {
    fn from(e: ScenarioError) -> Self {
        LinkError::Scenario(e)
    }
}

/// Encode a scenario as a fragment payload `1.<base64url(zlib(json))>`. A trace workload read from a file (it has
/// a `sha256`) is encoded without its requests: the link names the trace by its content hash and the file stays
/// with whoever has it (the page asks for it when the link is opened).
// `#[inline]` on this file's cold serde entry points (not for speed): their code, with the serde code they
// instantiate, is compiled in the calling crate, so the page builds it at its size-optimized opt-level while
// the engine stays at `shared`'s opt-level 3 (docs/page.md, "Budget": -39 KB gzip).
#[inline]
pub fn encode(scenario: &Scenario) -> String {
    if let Scenario::Engine(e) = scenario
        && let crate::workload::Workload::Trace(t) = &e.workload
        && t.sha256.is_some()
    {
        let mut e = e.clone();
        e.workload = crate::workload::Workload::Trace(Box::new(t.without_requests()));
        return pack(&Scenario::Engine(e).to_value().to_string());
    }
    pack(&scenario.to_value().to_string())
}

/// Decode a link back into a validated scenario. Accepts a whole URL, a fragment (`#s=...`, possibly with other
/// keys such as `token`), `s=...`, or the bare payload `1....`.
#[inline]
pub fn decode(text: &str) -> Result<Scenario, LinkError> {
    let payload = find_payload(text).ok_or(LinkError::Missing)?;
    let json = unpack(payload)?;
    Ok(Scenario::from_json(&json)?)
}

/// The full share URL for `scenario`: `base` (its own fragment dropped) + `#s=<payload>`.
#[inline]
pub fn link_url(base: &str, scenario: &Scenario) -> String {
    let base = base.split('#').next().unwrap_or(base);
    format!("{base}#{FRAGMENT_KEY}={}", encode(scenario))
}

/// Byte level: compress JSON text into a versioned payload.
#[inline]
pub fn pack(json: &str) -> String {
    let compressed = miniz_oxide::deflate::compress_to_vec_zlib(json.as_bytes(), 9);
    format!("{LINK_VERSION}.{}", URL_SAFE_NO_PAD.encode(compressed))
}

/// Byte level: a versioned payload back to JSON text. Checks version, base64url, checksum and size.
#[inline]
pub fn unpack(payload: &str) -> Result<String, LinkError> {
    let payload = payload.trim();
    let Some((version, data)) = payload.split_once('.') else {
        return Err(LinkError::Malformed(shorten(payload)));
    };
    let version: u32 = version.parse().map_err(|_| LinkError::Malformed(shorten(payload)))?;
    if version > LINK_VERSION {
        return Err(LinkError::FutureVersion {
            found: version,
            supported: LINK_VERSION,
        });
    }
    if version != 1 {
        return Err(LinkError::UnknownVersion(version));
    }
    // Tolerate padding a mail client or a user may have added.
    let data = data.trim_end_matches('=');
    let compressed = URL_SAFE_NO_PAD
        .decode(data)
        .map_err(|e| LinkError::Base64(e.to_string()))?;
    let bytes = inflate_exact(&compressed, MAX_JSON_BYTES)?;
    String::from_utf8(bytes).map_err(|_| LinkError::NotText)
}

/// zlib-decompress `input` into at most `limit` bytes, refusing input left over after the end of the stream
/// (miniz_oxide's `decompress_to_vec_zlib` stops at the end and ignores the rest, so a doubled payload decoded).
fn inflate_exact(mut input: &[u8], limit: usize) -> Result<Vec<u8>, LinkError> {
    use miniz_oxide::inflate::TINFLStatus;
    use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
    let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let mut out = vec![0u8; input.len().saturating_mul(2).clamp(64, limit.max(64))];
    let mut state = Box::<DecompressorOxide>::default();
    let mut written = 0;
    loop {
        let (status, consumed, produced) = decompress(&mut state, input, &mut out, written, flags);
        written += produced;
        input = input.get(consumed..).unwrap_or_default();
        match status {
            TINFLStatus::Done if input.is_empty() => {
                out.truncate(written);
                return Ok(out);
            }
            TINFLStatus::Done => return Err(LinkError::Trailing { extra: input.len() }),
            TINFLStatus::HasMoreOutput if out.len() < limit => {
                let grown = out.len().saturating_mul(2).min(limit);
                out.resize(grown, 0);
            }
            TINFLStatus::HasMoreOutput => {
                return Err(LinkError::Corrupt(format!("it holds more than {limit} bytes")));
            }
            other => return Err(LinkError::Corrupt(format!("{other:?}"))),
        }
    }
}

/// The `s` value inside a URL, fragment or query, or the text itself when it already looks like a payload.
pub fn find_payload(text: &str) -> Option<&str> {
    let text = text.trim();
    let tail = match text.find('#') {
        Some(i) => &text[i + 1..],
        None => match text.find('?') {
            Some(i) => &text[i + 1..],
            None => text,
        },
    };
    for part in tail.split(['&', '?', '#']) {
        if let Some(value) = part.strip_prefix("s=") {
            return Some(value);
        }
    }
    // A bare payload (`1.xxxx`, or garbage to be reported as malformed): text that is not a URL or a fragment.
    // `=` at the end is base64 padding a mail client or a user added, not a `key=value`.
    let is_url =
        text.contains("://") || text.contains('#') || text.contains('?') || text.trim_end_matches('=').contains('=');
    (!is_url && !text.is_empty()).then_some(text)
}

fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(24).collect();
    if text.chars().count() > 24 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_FORM: &str = include_str!("../../examples/seed-baseline.json");

    fn seed_scenario() -> Scenario {
        Scenario::from_json(SEED_FORM).expect("the seed form is a valid scenario")
    }

    #[test]
    fn scenario_round_trips_through_a_link() {
        let sc = seed_scenario();
        let payload = encode(&sc);
        assert!(payload.starts_with("1."), "{payload}");
        assert!(
            payload.len() < 400,
            "link payload is {} chars: {payload}",
            payload.len()
        );
        assert_eq!(decode(&payload).unwrap(), sc);
        let url = link_url("http://127.0.0.1:8080/#token=secret", &sc);
        assert!(url.starts_with("http://127.0.0.1:8080/#s=1."), "{url}");
        assert!(!url.contains("secret"), "a share link never carries the token: {url}");
        assert_eq!(decode(&url).unwrap(), sc);
        assert_eq!(decode(&format!("http://h/#token=abc&s={payload}")).unwrap(), sc);
    }

    #[test]
    fn extreme_values_round_trip_exactly() {
        let json = SEED_FORM
            .replace("\"seed\": 42", "\"seed\": 18446744073709551615")
            .replace("0.45", "0.1234567890123456789")
            .replace("8.5", "0.000001");
        let sc = Scenario::from_json(&json).unwrap();
        assert_eq!(decode(&encode(&sc)).unwrap(), sc);
    }

    #[test]
    fn bad_links_give_clear_errors() {
        let sc = seed_scenario();
        let payload = encode(&sc);
        assert_eq!(decode("http://127.0.0.1:8080/"), Err(LinkError::Missing));
        let truncated = &payload[..payload.len() - 5];
        let err = decode(truncated).unwrap_err();
        assert!(matches!(err, LinkError::Corrupt(_) | LinkError::Base64(_)), "{err:?}");
        assert!(
            err.to_string().contains("truncated") || err.to_string().contains("corrupted"),
            "{err}"
        );
        let future = format!("2{}", &payload[1..]);
        let err = decode(&future).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
        assert!(matches!(decode("#s=garbage"), Err(LinkError::Malformed(_))));
    }

    #[test]
    fn a_link_to_an_invalid_scenario_names_the_field() {
        let bad = SEED_FORM.replace("\"mean_rps\": 8.5", "\"mean_rps\": 0");
        let err = decode(&pack(&bad)).unwrap_err();
        assert!(matches!(err, LinkError::Scenario(_)), "{err:?}");
        assert!(err.to_string().contains("mean_rps"), "{err}");
        let unknown = SEED_FORM.replace("\"closed_loop\"", "\"surprise\": 1, \"closed_loop\"");
        assert!(decode(&pack(&unknown)).unwrap_err().to_string().contains("surprise"));
    }

    /// A trace read from a file travels as its options and content hash, never its requests.
    #[test]
    fn a_trace_file_travels_by_its_hash() {
        let mut e = crate::presets::default_engine_scenario();
        let mut t = crate::workload::TraceWorkload::inline(Vec::new());
        t.path = Some("t.jsonl".into());
        t.load_text(r#"{"timestamp": 0, "input_length": 900, "output_length": 5, "hash_ids": [1, 2]}"#)
            .unwrap_or_else(|err| panic!("{err}"));
        let hash = t.sha256.clone();
        assert!(!t.requests.is_empty());
        e.workload = crate::workload::Workload::Trace(Box::new(t));
        let back = decode(&encode(&Scenario::Engine(e))).unwrap_or_else(|err| panic!("{err}"));
        let Scenario::Engine(b) = back else { panic!("engine") };
        let crate::workload::Workload::Trace(bt) = &b.workload else {
            panic!("trace")
        };
        assert!(bt.requests.is_empty() && bt.needs_file());
        assert_eq!(bt.sha256, hash);
        // Another file is refused by the hash.
        let mut other = (**bt).clone();
        let e = other.load_text(r#"{"timestamp": 0, "input_length": 901, "output_length": 5, "hash_ids": [1, 2]}"#);
        assert!(e.is_err_and(|e| e.to_string().contains("sha256")));
    }

    #[test]
    fn pack_round_trips_text() {
        let json = r#"{"model":"seed","x":[1,2,3],"name":"ünï"}"#;
        let payload = pack(json);
        assert!(payload.starts_with("1."));
        assert_eq!(unpack(&payload).unwrap(), json);
    }

    #[test]
    fn payload_is_url_safe_and_compact() {
        let json = "{\"a\":\"".to_string() + &"agent ".repeat(200) + "\"}";
        let payload = pack(&json);
        assert!(payload.len() < json.len() / 4, "{} vs {}", payload.len(), json.len());
        assert!(
            payload
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        );
    }

    #[test]
    fn finds_payload_in_urls_and_fragments() {
        assert_eq!(find_payload("http://h:1/#s=1.abc"), Some("1.abc"));
        assert_eq!(find_payload("http://h:1/#token=xyz&s=1.abc"), Some("1.abc"));
        assert_eq!(find_payload("http://h:1/?s=1.abc"), Some("1.abc"));
        assert_eq!(find_payload("#s=1.abc&token=q"), Some("1.abc"));
        assert_eq!(find_payload("1.abc"), Some("1.abc"));
        assert_eq!(find_payload("not-a-link"), Some("not-a-link"));
        assert_eq!(find_payload("http://h:1/#token=xyz"), None);
        assert_eq!(find_payload(""), None);
    }

    #[test]
    fn truncated_payload_is_an_error_not_a_panic() {
        let payload = pack(r#"{"model":"seed","workload":{"kind":"bursty","num_requests":80}}"#);
        for cut in 2..payload.len() {
            let err = unpack(&payload[..cut]).expect_err("a cut payload must not decode");
            assert!(
                matches!(err, LinkError::Corrupt(_) | LinkError::Base64(_)),
                "cut at {cut}: unexpected {err:?}"
            );
        }
    }

    #[test]
    fn flipped_character_fails_the_checksum() {
        let payload = pack(r#"{"model":"seed","workload":{"kind":"bursty","num_requests":80}}"#);
        let mut bytes = payload.into_bytes();
        let i = bytes.len() - 3;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(bytes).unwrap();
        assert!(unpack(&edited).is_err());
    }

    #[test]
    fn future_and_unknown_versions_are_named() {
        assert_eq!(
            unpack("2.eJyrVgIAAAH_AAE"),
            Err(LinkError::FutureVersion {
                found: 2,
                supported: LINK_VERSION
            })
        );
        assert_eq!(unpack("0.xyz"), Err(LinkError::UnknownVersion(0)));
        assert!(matches!(unpack("abc"), Err(LinkError::Malformed(_))));
        assert!(matches!(unpack("x.abc"), Err(LinkError::Malformed(_))));
        assert!(matches!(unpack("1.!!!"), Err(LinkError::Base64(_))));
        let msg = unpack("9.abc").unwrap_err().to_string();
        assert!(msg.contains("version 9"), "{msg}");
    }

    #[test]
    fn non_utf8_content_is_refused() {
        let compressed = miniz_oxide::deflate::compress_to_vec_zlib(&[0xff, 0xfe, 0x00], 9);
        let payload = format!("1.{}", URL_SAFE_NO_PAD.encode(compressed));
        assert_eq!(unpack(&payload), Err(LinkError::NotText));
    }

    #[test]
    fn oversized_content_is_refused() {
        let big = vec![b' '; MAX_JSON_BYTES + 10];
        let compressed = miniz_oxide::deflate::compress_to_vec_zlib(&big, 9);
        let payload = format!("1.{}", URL_SAFE_NO_PAD.encode(compressed));
        assert!(matches!(unpack(&payload), Err(LinkError::Corrupt(_))));
    }

    #[test]
    fn bytes_after_the_compressed_stream_are_refused() {
        // A doubled payload (two links pasted together) used to decode as the first one.
        let one = pack(SEED_FORM);
        let compressed = URL_SAFE_NO_PAD.decode(&one[2..]).unwrap();
        let doubled = format!(
            "1.{}",
            URL_SAFE_NO_PAD.encode([compressed.clone(), compressed.clone()].concat())
        );
        let err = unpack(&doubled).unwrap_err();
        assert_eq!(
            err,
            LinkError::Trailing {
                extra: compressed.len()
            }
        );
        assert!(err.to_string().contains("follow the end"), "{err}");
        let junk = format!("1.{}", URL_SAFE_NO_PAD.encode([compressed, vec![0]].concat()));
        assert_eq!(unpack(&junk), Err(LinkError::Trailing { extra: 1 }));
        assert!(unpack(&one).is_ok());
    }

    #[test]
    fn a_bare_payload_with_padding_decodes() {
        let sc = seed_scenario();
        let payload = encode(&sc);
        for pad in ["=", "==", "==\n"] {
            let padded = format!("{payload}{pad}");
            assert_eq!(find_payload(&padded), Some(padded.trim()), "{pad:?}");
            assert_eq!(decode(&padded).unwrap(), sc, "{pad:?}");
        }
        // `key=value` text is still not a bare payload.
        assert_eq!(find_payload("token=abc"), None);
    }

    #[test]
    fn a_scenario_error_is_not_also_the_source() {
        // anyhow's `{:#}` prints a message and then each source: the scenario error must appear once.
        let err = decode(&pack(&SEED_FORM.replace("\"mean_rps\": 8.5", "\"mean_rps\": 0"))).unwrap_err();
        assert!(std::error::Error::source(&err).is_none());
        assert_eq!(err.to_string().matches("mean_rps").count(), 1, "{err}");
    }
}

#[cfg(test)]
mod session_shape_tests {
    use super::*;

    const SESSIONS: &str = include_str!("../../examples/engine-sessions-10k.json");

    /// The session shapes of issue #44 travel in a link as the scenario file holds them.
    #[test]
    fn session_shapes_round_trip_through_a_link() {
        let shapes = r#""think": {"dist": "empirical", "gaps_s": [0.5, 3.25, 40.0]},
            "compaction": {"at_tokens": 60000, "summary_tokens": 2000},
            "reasoning": {"tokens": 400, "echo": true},
            "subagents": {"every_steps": 4, "count": 2, "steps": 3, "gen_tokens": 300, "tool_tokens": 800, "wait": false},"#;
        let json = SESSIONS.replace(r#""think_s": 6.0,"#, shapes);
        assert_ne!(json, SESSIONS);
        let sc = Scenario::from_json(&json).expect("valid");
        let back = decode(&encode(&sc)).expect("decodes");
        assert_eq!(back, sc);
        let text = serde_json::to_string(&back).expect("json");
        for field in [
            r#""think":{"dist":"empirical","gaps_s":[0.5,3.25,40.0]}"#,
            r#""compaction":{"at_tokens":60000,"summary_tokens":2000}"#,
            r#""reasoning":{"tokens":400,"echo":true}"#,
            r#""subagents":{"every_steps":4,"count":2,"steps":3,"gen_tokens":300,"tool_tokens":800,"wait":false}"#,
        ] {
            assert!(text.contains(field), "{field} in {text}");
        }
        // Absent, the fields stay absent: older links and files keep their bytes.
        let plain = serde_json::to_string(&Scenario::from_json(SESSIONS).expect("valid")).expect("json");
        for key in ["think", "compaction", "reasoning", "subagents"] {
            assert!(!plain.contains(&format!("\"{key}\"")), "{plain}");
        }
    }

    /// A deployment travels as the deployment (names and the fields given), never as the profile it resolves to:
    /// the link round-trips to the same scenario and stays short (hundreds of characters fewer than the same
    /// scenario as raw coefficients).
    #[test]
    fn a_deployment_link_round_trips_and_stays_short() {
        const DEPLOYMENT: &str = include_str!("../../examples/deployment-h100-llama8b.json");
        let sc = Scenario::from_json(DEPLOYMENT).expect("the deployment example is valid");
        let payload = encode(&sc);
        assert!(
            payload.len() < 450,
            "link payload is {} chars: {payload}",
            payload.len()
        );
        let back = decode(&payload).expect("decodes");
        assert_eq!(back, sc);
        let json = unpack(&payload).expect("unpacks");
        assert!(
            json.contains(r#""deployment":{"#) && !json.contains(r#""profile""#),
            "{json}"
        );
        assert!(
            !json.contains("roofline"),
            "the roofline is derived, not carried: {json}"
        );
        // The same scenario as raw coefficients (the profile the deployment resolves to, its roofline included)
        // would be a longer link.
        let Scenario::Engine(mut e) = sc else {
            panic!("an engine scenario")
        };
        e.deployment = None;
        let raw = encode(&Scenario::Engine(e));
        assert!(raw.len() > payload.len() + 200, "{} vs {}", raw.len(), payload.len());
        // A deployment with only its model and GPU (every other field defaulted) is shorter still.
        let Scenario::Engine(mut e) = back else {
            panic!("an engine scenario")
        };
        let d = crate::deploy::Deployment::named("qwen3-30b-a3b", "h200", 2);
        e.profile = d.resolve().expect("resolves").profile;
        e.deployment = Some(d);
        let small = Scenario::Engine(e);
        let p = encode(&small);
        assert!(p.len() < payload.len(), "{} vs {}", p.len(), payload.len());
        assert_eq!(decode(&p).expect("decodes"), small);
    }
}
