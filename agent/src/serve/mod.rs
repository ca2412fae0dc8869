//! The agent behind the page: HTTP routes, access checks, the websocket API and live runs.
//!
//! Security follows Jupyter's model for a local agent driven from a browser: bind loopback unless told
//! otherwise, require a random token (printed in the URL) on the websocket and every API call, and refuse
//! requests whose `Host` is not the agent's own (DNS rebinding) or whose `Origin` is foreign (cross-site).
//! Live runs go only to targets the operator configured; the page picks a target by name.

pub mod driver;
pub mod runs;
pub mod store;
pub mod ws;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use tower_http::services::{ServeDir, ServeFile};

pub use runs::{Runs, Target};

/// Shared state of one running agent.
pub struct AppState {
    pub token: String,
    /// `host:port` values a request's Host (and Origin) may carry: the agent's own addresses.
    pub allowed_hosts: Vec<String>,
    pub runs: Arc<Runs>,
}

/// The agent's routes over `state`, serving the page from `dist`.
pub fn app(state: Arc<AppState>, dist: &std::path::Path) -> Router {
    let page = ServeDir::new(dist).fallback(ServeFile::new(dist.join("index.html")));
    Router::new()
        .route("/ws", get(ws_handler))
        .route("/api/runs/{run_id}/records.jsonl", get(export_records))
        .fallback_service(page)
        .with_state(state)
}

/// `Host` values the agent answers to when bound at `local`.
pub fn allowed_hosts(local: std::net::SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    if !local.ip().is_loopback() && !local.ip().is_unspecified() {
        hosts.push(local.to_string());
    }
    hosts
}

/// A process-unique counter mixed with the clock, for ids and temp names.
pub(crate) fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (NEXT.fetch_add(1, Ordering::Relaxed) << 32) ^ u64::from(nanos) ^ u64::from(std::process::id())
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// A refused request: its status and a plain-text reason.
pub type Refusal = (StatusCode, String);

/// Checks Host, Origin and token; refuses with a status and a plain-text reason before anything else happens.
pub fn check_access(state: &AppState, headers: &HeaderMap, query_token: Option<&str>) -> Result<(), Refusal> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !state.allowed_hosts.iter().any(|h| h == host) {
        let reason = format!("Host `{host}` is not this agent's address (DNS rebinding guard)");
        return Err((StatusCode::FORBIDDEN, reason));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if !state.allowed_hosts.iter().any(|h| h == origin_host) {
            return Err((
                StatusCode::FORBIDDEN,
                format!("Origin `{origin}` is not this agent's page"),
            ));
        }
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    match query_token.or(bearer) {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => Ok(()),
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
    if let Err(refusal) = check_access(&state, &headers, q.token.as_deref()) {
        return refusal.into_response();
    }
    // Frames above 4× the protocol limit are refused by the socket layer; between the two limits the session
    // answers with a `limit_exceeded` error naming the sizes.
    let hard_cap = state.runs.limits.max_message_bytes.saturating_mul(4) as usize;
    let runs = state.runs.clone();
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
        ws::session(Box::pin(incoming), Box::pin(outgoing), runs)
    })
}

async fn export_records(
    State(state): State<Arc<AppState>>,
    Query(q): Query<TokenQuery>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = check_access(&state, &headers, q.token.as_deref()) {
        return refusal.into_response();
    }
    let path = match state.runs.store.records_path(&run_id) {
        Ok(p) if p.parent().is_some_and(|d| d.join("run.json").exists()) => p,
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
