//! The agent behind the page: HTTP routes, access checks, the websocket API and live runs.
//!
//! Security follows Jupyter's model for a local agent driven from a browser: bind loopback unless told
//! otherwise, require a random token (printed in the URL) on the websocket and every API call, and refuse
//! requests whose `Host` is not the agent's own (DNS rebinding) or whose `Origin` is foreign (cross-site).
//! Live runs go only to targets the operator configured; the page picks a target by name.

pub mod driver;
pub mod page;
pub mod runs;
pub mod store;
pub mod ws;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;

pub use runs::{Runs, Target};

/// Shared state of one running agent.
pub struct AppState {
    pub token: String,
    /// `host:port` values a request's Host (and Origin) may carry: the agent's own addresses and the names the
    /// operator allowed (`--allowed-host`).
    pub allowed_hosts: Vec<String>,
    pub runs: Arc<Runs>,
    /// How long one websocket write may wait for a peer that does not read before the connection is dropped.
    pub ws_write_timeout: std::time::Duration,
}

/// The default of [`AppState::ws_write_timeout`] (`--ws-write-timeout`).
pub const WS_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The agent's routes over `state`, serving `page`.
pub fn app(state: Arc<AppState>, page: &page::Page) -> Router {
    Router::new()
        .route("/ws", get(ws_handler))
        .route("/api/runs/{run_id}/records.jsonl", get(export_records))
        .fallback_service(page.router())
        // Host and Origin on every request, the page's files too: a rebinding name gets nothing from the agent,
        // not even its page (the token stays required where it was: the websocket and the API).
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// The Host and Origin checks of [`check_origin`] in front of every route.
async fn guard(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match check_origin(&state, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// `Host` values the agent answers to when bound at `local`: the loopback names, the bound address, and
/// `extra` (names or addresses the operator allowed with `--allowed-host`, checked by [`allowed_host`]). Bound
/// to an unspecified address (`0.0.0.0`, `::`), the agent answers on every interface, so each interface's own
/// address is allowed too. A browser omits the port from `Host` when it is 80, so then the bare names count.
pub fn allowed_hosts(local: std::net::SocketAddr, extra: &[String]) -> Vec<String> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let port = local.port();
    let mut names: Vec<String> = vec!["127.0.0.1".into(), "localhost".into(), "[::1]".into()];
    let mut ips: Vec<IpAddr> = Vec::new();
    if local.ip().is_unspecified() {
        ips.extend(local_addresses());
    } else {
        ips.push(local.ip());
    }
    for ip in ips {
        if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST) {
            continue;
        }
        names.push(match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    let mut hosts = Vec::new();
    // An operator's name with its own port (a tunnel or proxy in front: `--allowed-host localhost:9000`) is
    // allowed at that port only.
    let (with_port, bare): (Vec<&String>, Vec<&String>) = extra.iter().partition(|h| has_port(h));
    hosts.extend(with_port.into_iter().cloned());
    names.extend(bare.into_iter().cloned());
    for name in names {
        let with_port = format!("{name}:{port}");
        if !hosts.contains(&with_port) {
            hosts.push(with_port);
        }
        if port == 80 && !hosts.contains(&name) {
            hosts.push(name);
        }
    }
    hosts
}

/// Whether an [`allowed_host`] value carries its own port (`name:port`, `[v6]:port`).
fn has_port(host: &str) -> bool {
    match host.strip_prefix('[') {
        Some(rest) => rest.contains("]:"),
        None => host.contains(':'),
    }
}

/// Checks one `--allowed-host` value and returns it as [`allowed_hosts`] compares it: a DNS name (lowercase) or
/// an IP address (IPv6 in brackets), without scheme or path, and optionally with a port (`localhost:9000` for an
/// `ssh -L 9000:127.0.0.1:8080` tunnel): then the name is allowed at that port instead of the agent's own.
pub fn allowed_host(value: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "--allowed-host `{value}`: expected a host name or an IP address, optionally with a port, without \
             scheme or path (e.g. `lab-box.local`, `192.168.1.20` or `localhost:9000`)"
        )
    };
    let v = value.trim();
    // A port: after `]` for a bracketed IPv6 address, else after the only `:` (a bare IPv6 address has several).
    let (host, port) = match v.strip_prefix('[').and_then(|x| x.split_once(']')) {
        Some((inside, "")) => (inside, None),
        Some((inside, rest)) => (inside, Some(rest.strip_prefix(':').ok_or_else(bad)?)),
        None => match v.split_once(':') {
            Some((name, port)) if !port.contains(':') => (name, Some(port)),
            _ => (v, None),
        },
    };
    let port = match port {
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => format!(":{n}"),
            _ => return Err(bad()),
        },
        None => String::new(),
    };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(match ip {
            std::net::IpAddr::V4(v4) => format!("{v4}{port}"),
            std::net::IpAddr::V6(v6) => format!("[{v6}]{port}"),
        });
    }
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !name_ok {
        return Err(bad());
    }
    Ok(format!("{}{port}", host.to_ascii_lowercase()))
}

/// This machine's interface addresses (what an unspecified bind answers on); empty where they cannot be listed.
pub fn local_addresses() -> Vec<std::net::IpAddr> {
    #[cfg(target_os = "linux")]
    {
        let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for a in addrs {
            let Some(addr) = a.address else { continue };
            let ip = if let Some(v4) = addr.as_sockaddr_in() {
                std::net::IpAddr::V4(v4.ip())
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                // Link-local IPv6 needs a zone in a URL, which browsers do not put in `Host`.
                let ip = v6.ip();
                if (ip.segments()[0] & 0xffc0) == 0xfe80 {
                    continue;
                }
                std::net::IpAddr::V6(ip)
            } else {
                continue;
            };
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
        out
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// The least estimated entropy an access token must carry, bits.
pub const MIN_TOKEN_BITS: f64 = 128.0;

/// Checks an operator-given access token: URL-safe characters only (it travels in `#token=` and `?token=`
/// unencoded) and at least [`MIN_TOKEN_BITS`] by [`token_bits`]. `Err` says what is wrong and how to fix it.
pub fn check_token(token: &str) -> Result<(), String> {
    const HOW: &str = "use e.g. `openssl rand -hex 32`, or leave --token out for a random one";
    if token.is_empty() {
        return Err(format!(
            "the access token is empty: an empty token would let anyone in; {HOW}"
        ));
    }
    if let Some(c) = token
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')))
    {
        return Err(format!(
            "the access token contains {c:?}: only letters, digits and - . _ ~ are allowed (it travels \
             unencoded in the page URL); {HOW}"
        ));
    }
    let bits = token_bits(token);
    if bits < MIN_TOKEN_BITS {
        return Err(format!(
            "the access token is too weak: {} characters carry about {bits:.0} bits by their variety, at least \
             {MIN_TOKEN_BITS:.0} are needed; {HOW}",
            token.chars().count()
        ));
    }
    Ok(())
}

/// An estimate of a token's entropy, bits: its length times the Shannon entropy of its own character
/// frequencies. It cannot know how a token was made: it catches the short and the low-variety (`aaaa…`, a few
/// characters repeated), not a long pattern of many characters. A random hex token needs about 40 characters to
/// pass (64, as `openssl rand -hex 32` prints, passes with a wide margin).
pub fn token_bits(token: &str) -> f64 {
    let mut counts = std::collections::HashMap::<char, usize>::new();
    for c in token.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let n = token.chars().count() as f64;
    let per_char: f64 = counts
        .values()
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum();
    // One kind of character sums to -0.0 (−1·log2 1): the message said "about -0 bits".
    (n * per_char).abs()
}

/// A fresh access token: 256 bits from the operating system's generator, hex. An error when the generator
/// cannot be read: the agent then refuses to start rather than fall back to anything guessable.
pub fn random_token() -> anyhow::Result<String> {
    token_from(getrandom::fill)
}

/// [`random_token`] over a given generator (tests make it fail).
pub fn token_from<E: std::fmt::Display>(fill: impl FnOnce(&mut [u8]) -> Result<(), E>) -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    fill(&mut bytes).map_err(|e| {
        anyhow::anyhow!("cannot read the operating system's random generator for the access token: {e}")
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// A refused request: its status and a plain-text reason.
pub type Refusal = (StatusCode, String);

/// Checks Host and Origin: the Host must be one of the agent's own addresses (DNS rebinding) and an Origin, when
/// sent, the agent's page (cross-site). A request with two `Host` or two `Origin` headers is refused whole:
/// checking only the first would let the second reach whatever reads the last one.
pub fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
    for name in [header::HOST, header::ORIGIN] {
        if headers.get_all(&name).iter().count() > 1 {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("more than one `{name}` header: refused"),
            ));
        }
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !state.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        let reason = format!(
            "Host `{host}` is not this agent's address (DNS rebinding guard; the operator can allow a name with \
             --allowed-host)"
        );
        return Err((StatusCode::FORBIDDEN, reason));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if !state.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(origin_host)) {
            return Err((
                StatusCode::FORBIDDEN,
                format!("Origin `{origin}` is not this agent's page"),
            ));
        }
    }
    Ok(())
}

/// Checks the token, from `?token=` or an `Authorization: Bearer` header, in constant time: what the websocket and
/// the API ask beyond [`check_origin`], which [`guard`] has run on every request before a handler sees it.
fn check_request_token(state: &AppState, headers: &HeaderMap, query_token: Option<&str>) -> Result<(), Refusal> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    match query_token.or(bearer) {
        Some(t) if !state.token.is_empty() && constant_time_eq(t.as_bytes(), state.token.as_bytes()) => Ok(()),
        Some(_) => Err((StatusCode::UNAUTHORIZED, "wrong token".into())),
        None => Err((
            StatusCode::UNAUTHORIZED,
            "missing token: open the URL the agent printed".into(),
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn ws_handler(
    State(state): State<Arc<AppState>>,
    Query(q): Query<TokenQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if let Err(refusal) = check_request_token(&state, &headers, q.token.as_deref()) {
        return refusal.into_response();
    }
    // Frames above 4× the protocol limit are refused by the socket layer; between the two limits the session
    // answers with a `limit_exceeded` error naming the sizes.
    let hard_cap = state.runs.limits.max_message_bytes.saturating_mul(4) as usize;
    let runs = state.runs.clone();
    let write_timeout = state.ws_write_timeout;
    ws.max_message_size(hard_cap).on_upgrade(move |socket| {
        let (sink, stream) = socket.split();
        let incoming = stream
            .take_while(|m| std::future::ready(matches!(m, Ok(m) if !matches!(m, Message::Close(_)))))
            .filter_map(|m| {
                std::future::ready(match m {
                    Ok(Message::Text(t)) => Some(t.to_string()),
                    _ => None,
                })
            });
        let outgoing = sink.with(|s: String| std::future::ready(Ok::<_, axum::Error>(Message::Text(s.into()))));
        ws::session(Box::pin(incoming), Box::pin(outgoing), runs, write_timeout)
    })
}

async fn export_records(
    State(state): State<Arc<AppState>>,
    Query(q): Query<TokenQuery>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = check_request_token(&state, &headers, q.token.as_deref()) {
        return refusal.into_response();
    }
    let path = match state
        .runs
        .store
        .load(&run_id)
        .and_then(|_| state.runs.store.records_path(&run_id))
    {
        Ok(p) => p,
        _ => return (StatusCode::NOT_FOUND, format!("no run `{run_id}`")).into_response(),
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{run_id}.jsonl\""),
                ),
            ],
            Body::from(bytes),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("reading records: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_short_repetitive_and_unsafe_tokens_are_refused() {
        for weak in [
            "",
            "a",
            "secret-token",
            &"a".repeat(200),
            &"ab".repeat(60),
            "0123456789abcdef0123456789abcde",
        ] {
            assert!(check_token(weak).is_err(), "{weak:?} accepted");
        }
        let e = check_token("").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = check_token("a").unwrap_err();
        assert!(e.contains("too weak") && e.contains("128"), "{e}");
        let e = check_token(&"a".repeat(200)).unwrap_err();
        assert!(e.contains("about 0 bits"), "{e}");
        let e = check_token(&format!("{}+x", "Zq8".repeat(30))).unwrap_err();
        assert!(e.contains("'+'"), "{e}");
        assert!(check_token("3f9a1c0e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f").is_ok());
    }

    #[test]
    fn generated_tokens_pass_the_check_and_a_failing_generator_is_an_error() {
        for _ in 0..1000 {
            let t = random_token().unwrap();
            assert_eq!(t.len(), 64);
            check_token(&t).unwrap();
        }
        let failing = |_: &mut [u8]| Err::<(), _>("no entropy source");
        let e = format!("{:#}", token_from(failing).unwrap_err());
        assert!(e.contains("random generator") && e.contains("no entropy source"), "{e}");
    }

    #[test]
    fn allowed_hosts_add_the_bound_address_and_the_operators_names() {
        let lan: std::net::SocketAddr = "192.168.7.20:8080".parse().unwrap();
        let hosts = allowed_hosts(lan, &["lab-box.local".into()]);
        for h in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "192.168.7.20:8080",
            "lab-box.local:8080",
        ] {
            assert!(hosts.iter().any(|x| x == h), "{h} missing from {hosts:?}");
        }
        assert!(
            !hosts.iter().any(|x| x == "lab-box.local"),
            "bare names only on port 80"
        );
        let on_80 = allowed_hosts("10.1.2.3:80".parse().unwrap(), &["box".into()]);
        assert!(on_80.iter().any(|x| x == "box") && on_80.iter().any(|x| x == "10.1.2.3"));
        // Bound to every interface: each interface's own address answers.
        let any = allowed_hosts("0.0.0.0:9000".parse().unwrap(), &[]);
        for ip in local_addresses() {
            let shown = match ip {
                std::net::IpAddr::V4(v4) => format!("{v4}:9000"),
                std::net::IpAddr::V6(v6) => format!("[{v6}]:9000"),
            };
            assert!(any.contains(&shown), "{shown} missing from {any:?}");
        }
        assert!(!any.iter().any(|h| h.starts_with("0.0.0.0")));
    }

    #[test]
    fn allowed_host_values_are_checked() {
        assert_eq!(allowed_host("Lab-Box.local").unwrap(), "lab-box.local");
        assert_eq!(allowed_host("fe80::1").unwrap(), "[fe80::1]");
        assert_eq!(allowed_host("[2001:db8::2]").unwrap(), "[2001:db8::2]");
        // With a port (a tunnel or proxy in front of the agent).
        assert_eq!(allowed_host("LocalHost:9000").unwrap(), "localhost:9000");
        assert_eq!(allowed_host("10.0.0.5:443").unwrap(), "10.0.0.5:443");
        assert_eq!(allowed_host("[::1]:9000").unwrap(), "[::1]:9000");
        for bad in [
            "",
            "http://box",
            "box/x",
            "a b",
            "-box",
            "box..local",
            "box:",
            "box:0",
            "box:65536",
            "box:+80",
            "box:80x",
            "[::1]x",
            "[::1]:",
            ":9000",
        ] {
            let e = allowed_host(bad).unwrap_err();
            assert!(e.contains("--allowed-host"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn an_allowed_host_with_a_port_is_allowed_at_that_port_only() {
        let extra = [
            allowed_host("localhost:9000").unwrap(),
            allowed_host("lab-box").unwrap(),
        ];
        let hosts = allowed_hosts("127.0.0.1:8080".parse().unwrap(), &extra);
        for h in ["localhost:9000", "localhost:8080", "lab-box:8080"] {
            assert!(hosts.iter().any(|x| x == h), "{h} missing from {hosts:?}");
        }
        assert!(
            !hosts
                .iter()
                .any(|x| x.starts_with("localhost:9000:") || x == "lab-box:9000"),
            "{hosts:?}"
        );
    }
}
