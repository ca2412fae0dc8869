//! `loadshape serve`: the page, the websocket API at `/ws`, and (as it grows) the run store.
//!
//! Security follows Jupyter's model for a local agent driven from a browser: bind loopback unless told
//! otherwise, require a random token (printed in the URL) on the websocket and every API call, and refuse
//! upgrades whose `Host` is not the agent's own (DNS rebinding) or whose `Origin` is foreign (cross-site).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use shared::protocol::{ClientMsg, ErrorCode, ServerMsg};
use tower_http::services::{ServeDir, ServeFile};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port to listen on.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to bind. Anything but loopback exposes the agent to the network; a token is then mandatory.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub listen: IpAddr,
    /// Access token required on `/ws` and the API. Random when not given.
    #[arg(long, env = "LOADSHAPE_TOKEN")]
    pub token: Option<String>,
    /// Folder holding the Trunk-built page (`index.html` and its assets).
    #[arg(long, env = "LOADSHAPE_DIST", default_value = default_dist())]
    pub dist: PathBuf,
}

fn default_dist() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../dist")
}

/// Shared state of one running agent.
#[derive(Debug)]
pub struct AppState {
    pub token: String,
    /// `host:port` values a request's Host (and Origin) may carry: the agent's own addresses.
    pub allowed_hosts: Vec<String>,
}

/// The agent's routes over `state`, serving the page from `dist`.
pub fn app(state: Arc<AppState>, dist: &std::path::Path) -> Router {
    let page = ServeDir::new(dist).fallback(ServeFile::new(dist.join("index.html")));
    Router::new()
        .route("/ws", get(ws_handler))
        .fallback_service(page)
        .with_state(state)
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let token = args.token.clone().unwrap_or_else(random_token);
    if !args.listen.is_loopback() && args.token.is_none() {
        anyhow::bail!(
            "--listen {} is not loopback: give --token (or LOADSHAPE_TOKEN) explicitly",
            args.listen
        );
    }
    if !args.dist.join("index.html").exists() {
        eprintln!(
            "warning: no page at {} (run `trunk build --release`); serving the API only",
            args.dist.display()
        );
    }
    let addr = SocketAddr::new(args.listen, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    let state = Arc::new(AppState {
        token: token.clone(),
        allowed_hosts: allowed_hosts(local),
    });
    println!(
        "loadshape {} serving on http://{local}/#token={token}",
        shared::version::LOADSHAPE_VERSION
    );
    axum::serve(listener, app(state, &args.dist))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(ExitCode::SUCCESS)
}

fn allowed_hosts(local: SocketAddr) -> Vec<String> {
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

/// 128 bits from the OS, hex.
pub fn random_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom_fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn getrandom_fill(buf: &mut [u8]) {
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open("/dev/urandom")
        && f.read_exact(buf).is_ok()
    {
        return;
    }
    // Not reached on Linux; a weak fallback still differs per process and per call.
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (seed.rotate_left(i as u32 * 7) >> 8) as u8;
    }
}

#[derive(Debug, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// Refuses an upgrade with a status and a plain-text reason, before any websocket exists.
fn check_access(state: &AppState, headers: &HeaderMap, token: Option<&str>) -> Result<(), Response> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !state.allowed_hosts.iter().any(|h| h == host) {
        return Err((
            StatusCode::FORBIDDEN,
            format!("Host `{host}` is not this agent's address (DNS rebinding guard)"),
        )
            .into_response());
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
            )
                .into_response());
        }
    }
    match token {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => Ok(()),
        Some(_) => Err((StatusCode::UNAUTHORIZED, "wrong token").into_response()),
        None => Err((
            StatusCode::UNAUTHORIZED,
            "missing token: open the URL the agent printed",
        )
            .into_response()),
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
        return refusal;
    }
    ws.max_message_size(1 << 20)
        .on_upgrade(move |socket| session(socket, state))
}

async fn session(mut socket: WebSocket, _state: Arc<AppState>) {
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Text(text) = msg else { continue };
        let reply = match serde_json::from_str::<ClientMsg>(&text) {
            Ok(ClientMsg::Hello { id, protocol, .. }) => ServerMsg::answer_hello(id, protocol),
            Err(e) => ServerMsg::Error {
                id: 0,
                code: ErrorCode::BadMessage,
                message: format!("cannot parse message: {e}"),
            },
        };
        let Ok(json) = serde_json::to_string(&reply) else { break };
        if socket.send(Message::Text(json.into())).await.is_err() {
            break;
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
