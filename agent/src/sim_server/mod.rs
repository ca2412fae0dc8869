//! `loadshape sim-server`: the built-in emulated engine as an OpenAI-compatible streaming server.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `POST /v1/messages` (the Anthropic Messages API:
//! its stream events and usage fields; streaming SSE or one JSON answer each), `GET /v1/models`,
//! `GET /health`, `GET /version`, `GET /metrics` (vLLM's metric names), `POST /tokenize` (llama.cpp's and vLLM's shapes). One tokio task steps the emulated engine in
//! real time ([`engine`]): each step's duration is slept (divided by `speed`) and the step's tokens are fanned out to
//! the requests' streams. Prompts are tokenized by a documented deterministic rule ([`tokenize`]) and their full
//! blocks hashed, so the prefix cache is real: a resent conversation hits it, a new nonce does not.
//!
//! Length control as vLLM: `max_tokens` (or `max_completion_tokens`, or llama.cpp's `n_predict`), `min_tokens`,
//! `ignore_eos` (TabbyAPI's `ban_eos_token` too). A request whose length is not forced stops at `natural_len` tokens
//! when one is configured (the emulated EOS), else at `max_tokens`.
//!
//! Chat templates ([`Template`], `--template`): a message list becomes prompt text by one rule, each message's text
//! and a line break (a system prompt first on `/v1/messages`); `stable` renders every message the same way at every
//! turn (the prefix of a growing conversation stays byte-stable), `rerender` emulates a template that re-renders
//! earlier assistant turns (see [`Template::Rerender`]).
//!
//! Embedding: [`router`] starts the engine's thread ([`engine`]) and builds the axum `Router`, and [`serve`] runs it
//! on a listener; `loadshape serve` mounts it as target `sim`.

pub mod engine;
pub mod fleet_engine;
pub mod shared_engine;
pub mod tokenize;

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use engine::{EngineHandle, ReqEvent, StepEngine};
use shared::engine::EngineProfile;
use shared_engine::SharedEngine;

/// Fault injection, for tests of clients.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Answer 503 to every request after the first N.
    pub fail_after: Option<u64>,
    /// Answer 500 to this fraction of requests (deterministic in the request number and `seed`).
    pub error_rate: f64,
    /// Pause the stream for `stall_ms` once N tokens have been sent.
    pub stall_after_tokens: Option<u32>,
    pub stall_ms: u64,
    /// Close the connection mid-stream once N tokens have been sent.
    pub drop_after_tokens: Option<u32>,
    /// Serve no `/tokenize` (404), like a server without one: clients fall back to `usage` probes.
    pub no_tokenize: bool,
}

/// How a message list becomes the prompt (`sim-server --template`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Template {
    /// Each message rendered as its text and a line break, the same at every turn: a resent conversation's earlier
    /// turns tokenize as they did, so its prefix (the generated replies included) hits the cache.
    #[default]
    Stable,
    /// Every earlier assistant turn is rendered with a marker naming how far back it lies (`[past turn 3] `), as a
    /// template that renders earlier turns relative to the latest one does (one that rewrites or drops earlier
    /// reasoning or tool calls): the text of the first assistant turn changes at every request, so the prefix cache
    /// matches only what comes before it (the system prompt and the task).
    Rerender,
}

/// Which engine model the server emulates.
pub enum EngineChoice {
    /// `shared::engine::Engine` with this profile (the simulator's engine).
    Profile(Box<EngineProfile>),
    /// A fleet of the simulator's engines behind one endpoint ([`fleet_engine::FleetEngine`], `--fleet FILE`):
    /// replicas of `profile` behind the fleet's router, with prefill/decode disaggregation when given.
    Fleet {
        profile: Box<EngineProfile>,
        fleet: shared::engine::FleetSpec,
        disaggregation: Option<shared::engine::Disaggregation>,
    },
    /// Any step-able engine, built when the router starts (tests use this to script an engine).
    Custom(Box<dyn Fn() -> Box<dyn StepEngine> + Send + Sync>),
}

impl std::fmt::Debug for EngineChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineChoice::Profile(p) => f.debug_tuple("Profile").field(&p.name).finish(),
            EngineChoice::Fleet {
                profile,
                fleet,
                disaggregation,
            } => f
                .debug_struct("Fleet")
                .field("profile", &profile.name)
                .field("fleet", fleet)
                .field("disaggregation", disaggregation)
                .finish(),
            EngineChoice::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// The default emulated engine: the Llama-3-8B on one H100 preset.
pub fn default_profile() -> EngineProfile {
    shared::engine::presets::llama3_8b_h100()
}

/// Read an [`EngineProfile`] JSON file (`sim-server --profile-file`, `predict --profile`): errors name the path
/// and the field.
pub fn load_profile_file(path: &std::path::Path) -> anyhow::Result<EngineProfile> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading profile {}: {e}", path.display()))?;
    EngineProfile::from_json(&text).map_err(|e| anyhow::anyhow!("profile {}: {e}", path.display()))
}

/// Everything the server needs.
#[derive(Debug)]
pub struct Config {
    /// The model id served on `/v1/models` (requests may name any model).
    pub model: String,
    pub engine: EngineChoice,
    /// Emulated time runs this many times faster than wall time.
    pub speed: f64,
    /// Tokens packed into one SSE frame (MTP-like); 1 = one token per frame.
    pub tokens_per_frame: u32,
    /// Output length of a request whose length is not forced; `None` = `max_tokens`.
    pub natural_len: Option<u32>,
    pub faults: Faults,
    pub seed: u64,
    /// Tokens each piece of the tokenization rule counts as ([`tokenize::tokenize_with`]); 1 = the rule itself.
    pub tokens_per_piece: u32,
    /// How chat and Messages message lists are rendered into the prompt.
    pub template: Template,
    /// Write one JSON line per finished generation request here ([`RequestLogLine`]): the server's own account of
    /// each request, to check a load client's measurements against.
    pub request_log: Option<std::path::PathBuf>,
}

/// One line of the sim-server's request log (`--request-log`): what the server itself saw of a generation request.
/// Times are wall seconds since the server started, taken when the server handed the bytes to the connection.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RequestLogLine {
    /// The request's number (`cmpl-N`), from 1 in arrival order.
    pub req: u64,
    /// When its body was read.
    pub t_arrival_s: f64,
    /// When the first content frame was handed over (`None`: no token was sent).
    pub t_first_token_s: Option<f64>,
    /// When the last frame (usage, `[DONE]`) or the whole answer was handed over, or the stream was dropped.
    pub t_end_s: f64,
    pub prompt_tokens: u32,
    pub cached_tokens: u64,
    /// Tokens sent.
    pub output_tokens: u32,
    /// Content frames sent.
    pub frames: u32,
    /// Every token asked for was sent and the stream ended normally.
    pub completed: bool,
    pub stream: bool,
    /// A disaggregated fleet (`--fleet` with `disaggregation`): the time its prompt's KV took across the link from
    /// the prefill instance to the decode instance, milliseconds (the `x-kv-transfer-ms` header); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_ms: Option<f64>,
}

/// The request log's file and clock.
struct RequestLog {
    origin: std::time::Instant,
    file: std::sync::Mutex<std::fs::File>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: "sim".into(),
            engine: EngineChoice::Profile(Box::new(default_profile())),
            speed: 1.0,
            tokens_per_frame: 1,
            natural_len: None,
            faults: Faults::default(),
            seed: 0,
            tokens_per_piece: 1,
            template: Template::Stable,
            request_log: None,
        }
    }
}

struct AppState {
    model: String,
    model_json: String,
    tokens_per_frame: u32,
    natural_len: Option<u32>,
    faults: Faults,
    seed: u64,
    tokens_per_piece: u32,
    template: Template,
    engine: EngineHandle,
    requests: AtomicU64,
    rejected: AtomicU64,
    /// (block size, KV blocks, prefix caching) of a profile engine, for `vllm:cache_config_info`.
    cache_config: Option<(u32, u64, bool)>,
    /// A profile engine's context limit (prompt + output, tokens), served as vLLM serves it on `/v1/models`.
    max_model_len: Option<u64>,
    log: Option<RequestLog>,
}

/// The server's routes, and the emulated engine's thread started; an error only when no thread can start.
pub fn router(config: Config) -> std::io::Result<Router> {
    let mut cache_config = None;
    let mut max_model_len = None;
    let engine: Box<dyn StepEngine> = match config.engine {
        EngineChoice::Profile(p) => {
            cache_config = Some((p.block_size, p.num_kv_blocks, p.enable_prefix_caching));
            max_model_len = Some(p.model_len());
            Box::new(SharedEngine::new(*p))
        }
        EngineChoice::Fleet {
            profile,
            fleet,
            disaggregation,
        } => {
            cache_config = Some((profile.block_size, profile.num_kv_blocks, profile.enable_prefix_caching));
            let engine = fleet_engine::FleetEngine::new(*profile, fleet, disaggregation)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
            max_model_len = engine.max_model_len();
            Box::new(engine)
        }
        EngineChoice::Custom(make) => make(),
    };
    let log = match &config.request_log {
        Some(path) => Some(RequestLog {
            origin: std::time::Instant::now(),
            file: std::sync::Mutex::new(
                std::fs::File::create(path)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("--request-log {}: {e}", path.display())))?,
            ),
        }),
        None => None,
    };
    let state = Arc::new(AppState {
        model_json: serde_json::to_string(&config.model).unwrap_or_else(|_| "\"sim\"".into()),
        model: config.model,
        tokens_per_frame: config.tokens_per_frame.max(1),
        natural_len: config.natural_len,
        faults: config.faults,
        seed: config.seed,
        tokens_per_piece: config.tokens_per_piece.max(1),
        template: config.template,
        engine: EngineHandle::spawn(engine, config.speed)?,
        requests: AtomicU64::new(0),
        rejected: AtomicU64::new(0),
        cache_config,
        max_model_len,
        log,
    });
    let no_tokenize = state.faults.no_tokenize;
    let router = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/v1/responses", post(responses))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route(
            "/version",
            get(|| async { axum::Json(json!({"version": concat!("loadshape-sim ", env!("CARGO_PKG_VERSION"))})) }),
        )
        .route("/metrics", get(metrics));
    let router = if no_tokenize {
        router
    } else {
        router.route("/tokenize", post(tokenize_route))
    };
    Ok(router
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(BODY_READ_TIMEOUT))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state))
}

/// `POST /tokenize` in llama.cpp's shape (`{"content": TEXT}` → `{"tokens": [...]}`) or vLLM's (`{"model": M,
/// "prompt": TEXT}` → `{"count": N, "max_model_len": ..., "tokens": [...]}`), with [`tokenize`]'s rule: the count
/// is exactly what `usage.prompt_tokens` reports for the same text. Not counted as a request.
async fn tokenize_route(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &format!("body is not JSON: {e}")),
    };
    if let Some(text) = v.get("content").and_then(serde_json::Value::as_str) {
        return axum::Json(json!({"tokens": tokenize::tokenize_with(text, st.tokens_per_piece)})).into_response();
    }
    if let Some(text) = v.get("prompt").and_then(serde_json::Value::as_str) {
        let tokens = tokenize::tokenize_with(text, st.tokens_per_piece);
        // The context the engine refuses requests beyond (`u32::MAX` for an engine without one).
        let max_model_len = st.engine.max_model_len.unwrap_or(u64::from(u32::MAX));
        return axum::Json(json!({"count": tokens.len(), "max_model_len": max_model_len, "tokens": tokens}))
            .into_response();
    }
    error_response(
        StatusCode::BAD_REQUEST,
        "need \"content\" (llama.cpp) or \"prompt\" (vLLM), a string",
    )
}

/// Serve [`router`] on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, router(config)?, shutdown).await;
    Ok(())
}

/// Longest a client may take to send a request's headers; then the connection is closed. A server answers
/// clients it does not know: a socket that never finishes its headers must not hold a connection forever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a client may take to send a request's body once its headers are in; then the request fails with 400.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request body read (axum's default, 2 MB, is shorter than a prompt at the default profile's context,
/// 432,000 tokens: such a request was refused as too large a body instead of for its context, as vLLM refuses it).
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// `axum::serve` with [`HEADER_READ_TIMEOUT`]: axum's own loop sets no timer on hyper's HTTP/1 connections, so a
/// client that sends half a header held its connection for as long as it liked (400 such sockets stayed open for
/// 20 s). Each connection is served by hyper-util's builder with a timer; `shutdown` stops accepting and waits for
/// the connections open then to finish, as `with_graceful_shutdown` does.
async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin (as axum does).
                    tracing::debug!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // TCP_NODELAY: without it a stream's small frames wait for the client's delayed ACK (up to 40 ms), which
        // put a 40 ms floor under every short request's TTFT (found by `calibrate`: a 60-token prompt took 43 ms
        // instead of 18).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY on an accepted connection: {e}");
        }
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tcp), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("a connection ended with an error: {e}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GenBody {
    prompt: Option<Value>,
    messages: Option<Vec<Value>>,
    /// Anthropic's top-level system prompt (a string or text blocks).
    system: Option<Value>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    n_predict: Option<i64>,
    min_tokens: Option<u64>,
    ignore_eos: Option<bool>,
    ban_eos_token: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    /// OpenAI's sampling fields: checked as vLLM checks them (one choice is generated; sampling is not modelled).
    n: Option<Value>,
    best_of: Option<Value>,
    temperature: Option<Value>,
    /// Chat: `{"enable_thinking": true, "thinking_budget": R}` asks for `R` reasoning tokens (issue #44).
    chat_template_kwargs: Option<Value>,
    /// Messages: `{"type": "enabled", "budget_tokens": R}` asks for `R` reasoning tokens.
    thinking: Option<Value>,
    /// Responses: `{"effort": E, "max_tokens": R}` asks for `R` reasoning tokens unless `E` is `"none"`.
    reasoning: Option<Value>,
    /// Responses: `input` (a string, or message and function-call items), `instructions`, `max_output_tokens`.
    input: Option<Value>,
    instructions: Option<Value>,
    max_output_tokens: Option<u64>,
}

/// Reasoning tokens a request asks for (see [`GenBody`]): streamed before its content, counted in its output.
fn reasoning_asked(kind: Kind, body: &GenBody) -> u64 {
    let budget = match kind {
        Kind::Chat => body
            .chat_template_kwargs
            .as_ref()
            .filter(|k| k["enable_thinking"] == Value::Bool(true))
            .and_then(|k| k["thinking_budget"].as_u64()),
        Kind::Messages => body
            .thinking
            .as_ref()
            .filter(|t| t["type"] == "enabled")
            .and_then(|t| t["budget_tokens"].as_u64()),
        Kind::Responses => body
            .reasoning
            .as_ref()
            .filter(|r| r["effort"] != "none")
            .and_then(|r| r["max_tokens"].as_u64()),
        Kind::Completions => None,
    };
    budget.unwrap_or(0)
}

/// `n` and `best_of` must be absent or 1 (sim-server streams one choice), `temperature` a number >= 0 (vLLM:
/// "temperature must be non-negative"); the message names the field and the value, as vLLM's 400 does.
fn check_sampling(body: &GenBody) -> Result<(), String> {
    for (name, v) in [("n", &body.n), ("best_of", &body.best_of)] {
        match v {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64() == Some(1) => {}
            Some(v) => {
                return Err(format!(
                    "{name} must be 1: sim-server generates one choice per request (got {v})"
                ));
            }
        }
    }
    match &body.temperature {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_f64().is_some_and(|t| t >= 0.0) => Ok(()),
        Some(v) => Err(format!("temperature must be a non-negative number (got {v})")),
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completions,
    Chat,
    /// The Anthropic Messages API.
    Messages,
    /// The Responses API (issue #44).
    Responses,
}

/// Largest output length accepted.
const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

async fn completions(State(st): State<Arc<AppState>>, headers: axum::http::HeaderMap, body: Bytes) -> Response {
    generate(st, Kind::Completions, session_of(&headers), body).await
}

async fn chat_completions(State(st): State<Arc<AppState>>, headers: axum::http::HeaderMap, body: Bytes) -> Response {
    generate(st, Kind::Chat, session_of(&headers), body).await
}

/// `POST /v1/messages`: Anthropic's API requires the `anthropic-version` header (and `max_tokens`); so does this.
async fn messages(State(st): State<Arc<AppState>>, headers: axum::http::HeaderMap, body: Bytes) -> Response {
    if !headers.contains_key("anthropic-version") {
        return error_response(StatusCode::BAD_REQUEST, "anthropic-version: header is required");
    }
    generate(st, Kind::Messages, session_of(&headers), body).await
}

async fn responses(State(st): State<Arc<AppState>>, headers: axum::http::HeaderMap, body: Bytes) -> Response {
    generate(st, Kind::Responses, session_of(&headers), body).await
}

/// The session a request belongs to, from its [`SESSION_HEADER`] (trimmed, non-empty, at most 256 bytes of
/// visible ASCII); a fleet's `session_affinity` router keeps a session on one replica by it.
fn session_of(headers: &axum::http::HeaderMap) -> Option<String> {
    let v = headers.get(SESSION_HEADER)?.to_str().ok()?.trim();
    (!v.is_empty() && v.len() <= 256).then(|| v.to_string())
}

/// The Responses API's `input` as a chat message list: a string is one user message; message items stay (their
/// content a string or `input_text`/`output_text` parts); a `function_call_output` is a tool message with its
/// `output`; a `function_call` renders nothing (as `tool_calls` on chat). `instructions` come first, as a system
/// message.
fn responses_messages(body: &GenBody) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    if let Some(i) = &body.instructions {
        out.push(json!({"role": "system", "content": i}));
    }
    match &body.input {
        Some(Value::String(t)) => out.push(json!({"role": "user", "content": t})),
        Some(Value::Array(items)) => {
            let mut pending_reasoning = String::new();
            for it in items {
                match it.get("type").and_then(Value::as_str) {
                    Some("function_call_output") => {
                        out.push(json!({"role": "tool", "content": it.get("output").cloned().unwrap_or_default()}));
                    }
                    // Echoed reasoning: the next assistant message's, rendered before its reply (as chat's
                    // `reasoning_content`).
                    Some("reasoning") => {
                        let text: String = it
                            .get("content")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect();
                        pending_reasoning.push_str(&text);
                    }
                    Some("function_call") => {}
                    _ if !pending_reasoning.is_empty() && it.get("role") == Some(&json!("assistant")) => {
                        let mut m = it.clone();
                        m["reasoning_content"] = Value::String(std::mem::take(&mut pending_reasoning));
                        out.push(m);
                    }
                    _ => out.push(it.clone()),
                }
            }
        }
        Some(_) => return Err("input must be a string or a list of items".into()),
        None => return Err("input is required".into()),
    }
    Ok(out)
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body =
        json!({"object": "error", "error": {"message": message, "type": "sim_server_error", "code": status.as_u16()}});
    (status, axum::Json(body)).into_response()
}

fn prompt_text(kind: Kind, body: &GenBody, template: Template) -> Result<String, String> {
    match kind {
        Kind::Completions => match &body.prompt {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
                Ok(items[0].as_str().unwrap_or_default().to_string())
            }
            Some(_) => Err("prompt must be a string (or a one-element array of strings)".into()),
            None => Err("prompt is required".into()),
        },
        Kind::Chat | Kind::Messages | Kind::Responses => {
            let converted;
            let msgs = if kind == Kind::Responses {
                converted = responses_messages(body)?;
                &converted
            } else {
                body.messages.as_ref().ok_or("messages is required")?
            };
            let mut text = String::new();
            if kind == Kind::Messages
                && let Some(system) = &body.system
            {
                push_content(&mut text, system);
                text.push('\n');
            }
            let assistants = msgs
                .iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                .count();
            let mut seen = 0;
            for m in msgs {
                if m.get("role").and_then(Value::as_str) == Some("assistant") {
                    if template == Template::Rerender {
                        let _ = write!(text, "[past turn {}] ", assistants - seen);
                    }
                    seen += 1;
                }
                // Echoed reasoning is rendered before the reply, where it was generated.
                if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
                    text.push_str(r);
                }
                if let Some(content) = m.get("content") {
                    push_content(&mut text, content);
                }
                text.push('\n');
            }
            Ok(text)
        }
    }
}

/// A message's content as text: a string, or the text of its parts (OpenAI `text` parts; Anthropic `text` and
/// `thinking` blocks and `tool_result` blocks, whose content is a string or text blocks; `tool_use` blocks carry no text).
fn push_content(text: &mut String, content: &Value) {
    match content {
        Value::String(s) => text.push_str(s),
        Value::Array(parts) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    text.push_str(t);
                } else if let Some(t) = p.get("thinking").and_then(Value::as_str) {
                    text.push_str(t);
                } else if p.get("type").and_then(Value::as_str) == Some("tool_result")
                    && let Some(c) = p.get("content")
                {
                    push_content(text, c);
                }
            }
        }
        _ => {}
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

async fn generate(st: Arc<AppState>, kind: Kind, session: Option<String>, raw: Bytes) -> Response {
    let n = st.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some(limit) = st.faults.fail_after
        && n > limit
    {
        st.rejected.fetch_add(1, Ordering::Relaxed);
        return error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("sim-server is failing every request after {limit} (--fail-after)"),
        );
    }
    if st.faults.error_rate > 0.0 {
        let u = (splitmix(st.seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d)) >> 11) as f64 / (1u64 << 53) as f64;
        if u < st.faults.error_rate {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "sim-server injected error (--error-rate)",
            );
        }
    }
    let body: GenBody = match serde_json::from_slice(&raw) {
        Ok(b) => b,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &format!("invalid JSON body: {e}")),
    };
    if kind == Kind::Messages && body.max_tokens.is_none() {
        return error_response(StatusCode::BAD_REQUEST, "max_tokens: field required");
    }
    if let Err(e) = check_sampling(&body) {
        return error_response(StatusCode::BAD_REQUEST, &e);
    }
    let text = match prompt_text(kind, &body, st.template) {
        Ok(t) => t,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &e),
    };
    let default_max = if kind == Kind::Completions { 16 } else { 256 };
    let n_predict = body.n_predict.filter(|&v| v > 0).map(|v| v as u64);
    let max = body
        .max_tokens
        .or(body.max_output_tokens)
        .or(body.max_completion_tokens)
        .or(n_predict)
        .unwrap_or(default_max);
    if max == 0 || max > MAX_OUTPUT_TOKENS {
        return error_response(
            StatusCode::BAD_REQUEST,
            &format!("max_tokens must be in 1..={MAX_OUTPUT_TOKENS} (got {max})"),
        );
    }
    let min = body.min_tokens.unwrap_or(0).min(max);
    let forced = body.ignore_eos.unwrap_or(false) || body.ban_eos_token.unwrap_or(false) || min >= max;
    let out_tokens = if forced {
        max
    } else {
        st.natural_len.map_or(max, |nl| u64::from(nl).clamp(min.max(1), max))
    };
    let finish_reason = if out_tokens == max { "length" } else { "stop" };
    let out_tokens = out_tokens as u32;
    // The reasoning leaves at least one content token.
    let reasoning = reasoning_asked(kind, &body).min(u64::from(out_tokens.saturating_sub(1))) as u32;

    // Prompt tokens, then the output's tokens (known in advance), hashed into blocks: a later prompt that resends
    // this prompt and its reply hits the cache for both, as in vLLM.
    let mut tokens = tokenize::tokenize_with(&text, st.tokens_per_piece);
    let prompt_tokens = tokens.len().min(u32::MAX as usize) as u32;
    (0..out_tokens).for_each(|i| tokenize::gen_token_ids(n, i, st.tokens_per_piece, &mut tokens));
    let blocks = shared::engine::PromptBlocks::from_tokens(&tokens, st.engine.block_size as u32).block_hashes;
    drop(tokens);
    // Beyond the context: refused before it starts, as vLLM refuses it (HTTP 400, its message).
    if let Some(len) = st.engine.max_model_len
        && u64::from(prompt_tokens) + u64::from(out_tokens) > len
    {
        return error_response(
            StatusCode::BAD_REQUEST,
            &format!(
                "This model's maximum context length is {len} tokens. However, you requested {} tokens ({prompt_tokens} \
                 in the messages, {out_tokens} in the completion). Please reduce the length of the messages or \
                 completion.",
                u64::from(prompt_tokens) + u64::from(out_tokens)
            ),
        );
    }
    let kv_transfer_ms = st.engine.kv_transfer_ms(prompt_tokens);
    let arrival = std::time::Instant::now();
    let Some(mut rx) = st.engine.submit(prompt_tokens, blocks, out_tokens, session) else {
        return error_response(StatusCode::SERVICE_UNAVAILABLE, "the emulated engine stopped");
    };
    // A fleet of several replicas says where it routed the request (its first event, when the engine takes it).
    let replica = if st.engine.routes {
        match rx.recv().await {
            Some(ReqEvent::Routed(r)) => Some(r),
            _ => return error_response(StatusCode::SERVICE_UNAVAILABLE, "the emulated engine stopped"),
        }
    } else {
        None
    };
    // The Messages API always streams its usage (in `message_start` and `message_delta`).
    let include_usage = matches!(kind, Kind::Messages | Kind::Responses)
        || body
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
    let g = Gen {
        st: st.clone(),
        rx,
        kind,
        req: n,
        prompt_tokens,
        cached: 0,
        out_tokens,
        sent: 0,
        pending: 0,
        finish_reason,
        include_usage,
        stalled: false,
        phase: Phase::Tokens,
        arrival,
        first_frame: None,
        frames: 0,
        stream: body.stream.unwrap_or(false),
        spec: None,
        reasoning,
        kv_transfer_ms,
    };
    let mut resp = if body.stream.unwrap_or(false) {
        let stream = futures_util::stream::unfold(g, |mut g| async move {
            let item = g.next_frame().await?;
            Some((item, g))
        });
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(stream))
            .unwrap_or_else(|_| error_response(StatusCode::INTERNAL_SERVER_ERROR, "response build failed"))
    } else {
        g.whole().await
    };
    // A disaggregated fleet says what the link cost this request (known from its prompt when it arrives).
    if let Some(ms) = kv_transfer_ms
        && let Ok(v) = axum::http::HeaderValue::from_str(&format!("{ms}"))
    {
        resp.headers_mut().insert(KV_TRANSFER_HEADER, v);
    }
    if let Some(r) = replica {
        resp.headers_mut()
            .insert(REPLICA_HEADER, axum::http::HeaderValue::from(r));
    }
    resp
}

/// The response header in which a fleet of several replicas (`sim-server --fleet`) names the replica it routed the
/// request to, from 0 (a disaggregated fleet's prefill instance); `replay` records it as the record's `replica`.
pub const REPLICA_HEADER: &str = "x-replica";

/// The request header naming the session a request belongs to (`replay` sends it for every session step): a
/// fleet (`--fleet`, `serve`'s `sim` target running a fleet scenario) under `session_affinity` routes a session's
/// requests to the replica of its first, as the simulator does; requests without it go by least outstanding. The
/// name is the one vLLM production-stack's session router is commonly given (`--session-key x-session-id`).
pub const SESSION_HEADER: &str = "x-session-id";

/// The response header in which a disaggregated fleet (`sim-server --fleet` with `disaggregation`) gives the
/// request's KV transfer, milliseconds; `replay` records it as the record's `kv_transfer_ms`.
pub const KV_TRANSFER_HEADER: &str = "x-kv-transfer-ms";

#[derive(PartialEq)]
enum Phase {
    Tokens,
    /// `--drop-after-tokens`: what was owed is out; the connection goes next.
    Drop,
    Usage,
    Done,
    End,
}

/// One response being produced from the engine's events.
struct Gen {
    st: Arc<AppState>,
    rx: mpsc::UnboundedReceiver<ReqEvent>,
    kind: Kind,
    req: u64,
    prompt_tokens: u32,
    cached: u64,
    out_tokens: u32,
    sent: u32,
    pending: u32,
    finish_reason: &'static str,
    include_usage: bool,
    stalled: bool,
    phase: Phase,
    /// For the request log: when the body was read, when the first content frame went out, frames sent.
    arrival: std::time::Instant,
    first_frame: Option<std::time::Instant>,
    frames: u32,
    stream: bool,
    /// Speculative decoding: tokens drafted and accepted so far (`None` until the engine reports a draft).
    spec: Option<(u64, u64)>,
    /// The first this many output tokens are reasoning (`reasoning_content` deltas on chat, a `thinking` block on
    /// Messages).
    reasoning: u32,
    /// A disaggregated fleet: the KV transfer of its prompt, ms ([`EngineHandle::kv_transfer_ms`]).
    kv_transfer_ms: Option<f64>,
}

impl Drop for Gen {
    /// The request log's line, written when the response is over (finished, failed or dropped by the client).
    fn drop(&mut self) {
        let Some(log) = &self.st.log else { return };
        let since = |t: std::time::Instant| t.saturating_duration_since(log.origin).as_secs_f64();
        let line = RequestLogLine {
            req: self.req,
            t_arrival_s: since(self.arrival),
            t_first_token_s: self.first_frame.map(since),
            t_end_s: since(std::time::Instant::now()),
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached,
            output_tokens: self.sent,
            frames: self.frames,
            completed: self.sent == self.out_tokens && self.phase == Phase::End,
            stream: self.stream,
            kv_transfer_ms: self.kv_transfer_ms,
        };
        if let Ok(mut text) = serde_json::to_string(&line) {
            text.push('\n');
            if let Ok(mut f) = log.file.lock() {
                use std::io::Write as _;
                if let Err(e) = f.write_all(text.as_bytes()) {
                    tracing::warn!("--request-log: {e}");
                }
            }
        }
    }
}

impl Gen {
    fn object(&self) -> &'static str {
        match self.kind {
            Kind::Completions => "text_completion",
            Kind::Chat => "chat.completion.chunk",
            Kind::Messages => "message",
            Kind::Responses => "response",
        }
    }

    /// Anthropic's stop reason for the OpenAI one: `length` → `max_tokens`, `stop` → `end_turn`.
    fn stop_reason(&self) -> &'static str {
        if self.finish_reason == "length" {
            "max_tokens"
        } else {
            "end_turn"
        }
    }

    /// Anthropic's `usage`: `input_tokens` is the uncached part; the cached part is `cache_read_input_tokens`
    /// (this engine caches automatically: nothing is counted as `cache_creation_input_tokens`).
    fn anthropic_usage_json(&self, output_tokens: u32) -> String {
        format!(
            r#"{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":{},"output_tokens":{}}}"#,
            u64::from(self.prompt_tokens).saturating_sub(self.cached),
            self.cached,
            output_tokens
        )
    }

    /// The Responses API's final response object: its status (`incomplete` for `max_output_tokens` when the
    /// length limit ended it) and usage.
    fn responses_json(&self, status: &str) -> String {
        let incomplete = if status == "incomplete" {
            r#"{"reason":"max_output_tokens"}"#
        } else {
            "null"
        };
        format!(
            r#"{{"id":"resp_{}","object":"response","model":{},"status":"{status}","incomplete_details":{incomplete},"usage":{{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens":{},"output_tokens_details":{{"reasoning_tokens":{}}},"total_tokens":{}}}}}"#,
            self.req,
            self.st.model_json,
            self.prompt_tokens,
            self.cached,
            self.sent,
            self.reasoning.min(self.sent),
            u64::from(self.prompt_tokens) + u64::from(self.sent)
        )
    }

    /// One Anthropic SSE event: `event: NAME` and its data.
    fn event(name: &str, data: &str) -> Bytes {
        Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
    }

    fn usage_json(&self) -> String {
        let details = if self.reasoning > 0 {
            format!(
                r#","completion_tokens_details":{{"reasoning_tokens":{}}}"#,
                self.reasoning.min(self.sent)
            )
        } else {
            String::new()
        };
        format!(
            r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}{details}}}"#,
            self.prompt_tokens,
            self.sent,
            u64::from(self.prompt_tokens) + u64::from(self.sent),
            self.cached
        )
    }

    /// llama.cpp's `timings` with its speculative counts (`draft_n`, `draft_n_accepted`), as `,"timings":{…}` to
    /// append to a JSON object; empty without speculative decoding.
    fn timings_field(&self) -> String {
        match self.spec {
            Some((drafted, accepted)) => {
                format!(r#","timings":{{"draft_n":{drafted},"draft_n_accepted":{accepted}}}"#)
            }
            None => String::new(),
        }
    }

    /// The Messages content block the text goes in: 1 after a `thinking` block, else 0.
    fn text_index(&self) -> u32 {
        u32::from(self.reasoning > 0)
    }

    /// The frame for the pending tokens, which count as sent from here.
    fn send_pending(&mut self, last: bool) -> Bytes {
        let frame = self.token_frame(self.pending, last);
        self.first_frame.get_or_insert_with(std::time::Instant::now);
        self.frames += 1;
        self.sent += self.pending;
        self.pending = 0;
        frame
    }

    /// The SSE frame carrying tokens `sent..sent+n`: two frames where the reasoning ends inside them.
    fn token_frame(&self, n: u32, last: bool) -> Bytes {
        let (a, b) = (self.sent, self.sent + n);
        let r = self.reasoning;
        if a < r && r < b {
            let mut out = self.frame_of(a, r, false, true).to_vec();
            out.extend_from_slice(&self.frame_of(r, b, last, false));
            Bytes::from(out)
        } else {
            self.frame_of(a, b, last, a < r)
        }
    }

    /// One SSE frame carrying tokens `a..b`, all reasoning or all content. On Messages, the first content frame
    /// after reasoning closes the `thinking` block and opens the text block.
    fn frame_of(&self, a: u32, b: u32, last: bool, reasoning: bool) -> Bytes {
        let mut text = String::with_capacity((b - a) as usize * 8);
        for i in a..b {
            text.push_str(tokenize::gen_token(self.req, i));
        }
        let finish = if last {
            format!("\"{}\"", self.finish_reason)
        } else {
            "null".into()
        };
        // llama.cpp sends `timings` on its last frame.
        let timings = if last { self.timings_field() } else { String::new() };
        let mut out = String::with_capacity(text.len() + 200);
        if reasoning {
            let _ = match self.kind {
                Kind::Messages => write!(
                    out,
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"thinking_delta\",\"thinking\":\"{text}\"}}}}"
                ),
                Kind::Responses => write!(
                    out,
                    "event: response.reasoning_text.delta\ndata: {{\"type\":\"response.reasoning_text.delta\",\"item_id\":\"rs_{}\",\"output_index\":0,\"content_index\":0,\"delta\":\"{text}\"}}",
                    self.req
                ),
                _ => write!(
                    out,
                    r#"data: {{"id":"chatcmpl-{}","object":"chat.completion.chunk","created":0,"model":{},"choices":[{{"index":0,"delta":{{"reasoning_content":"{}"}},"logprobs":null,"finish_reason":{}}}],"usage":null}}"#,
                    self.req, self.st.model_json, text, finish
                ),
            };
            out.push_str("\n\n");
            return Bytes::from(out);
        }
        if self.kind == Kind::Messages && self.reasoning > 0 && a == self.reasoning {
            out.push_str(
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            );
        }
        let _ = match self.kind {
            Kind::Completions => write!(
                out,
                r#"data: {{"id":"cmpl-{}","object":"text_completion","created":0,"model":{},"choices":[{{"index":0,"text":"{}","logprobs":null,"finish_reason":{}}}],"usage":null{}}}"#,
                self.req, self.st.model_json, text, finish, timings
            ),
            Kind::Chat => write!(
                out,
                r#"data: {{"id":"chatcmpl-{}","object":"chat.completion.chunk","created":0,"model":{},"choices":[{{"index":0,"delta":{{"content":"{}"}},"logprobs":null,"finish_reason":{}}}],"usage":null{}}}"#,
                self.req, self.st.model_json, text, finish, timings
            ),
            Kind::Messages => write!(
                out,
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{},\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}",
                self.text_index()
            ),
            Kind::Responses => write!(
                out,
                "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_{}\",\"output_index\":0,\"content_index\":0,\"delta\":\"{text}\"}}",
                self.req
            ),
        };
        out.push_str("\n\n");
        Bytes::from(out)
    }

    /// The next piece of the SSE body; `None` at the end.
    async fn next_frame(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            match self.phase {
                Phase::End => return None,
                Phase::Done if self.kind == Kind::Responses => {
                    // The Responses stream ends with its terminal event; no `[DONE]`.
                    self.phase = Phase::End;
                }
                Phase::Usage if self.kind == Kind::Responses => {
                    self.phase = Phase::Done;
                    let (event, status) = if self.finish_reason == "length" {
                        ("response.incomplete", "incomplete")
                    } else {
                        ("response.completed", "completed")
                    };
                    let data = format!(r#"{{"type":"{event}","response":{}}}"#, self.responses_json(status));
                    return Some(Ok(Self::event(event, &data)));
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    if self.kind == Kind::Messages {
                        return Some(Ok(Self::event("message_stop", r#"{"type":"message_stop"}"#)));
                    }
                    return Some(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
                }
                Phase::Usage if self.kind == Kind::Messages => {
                    self.phase = Phase::Done;
                    let mut out = Self::event(
                        "content_block_stop",
                        &format!(r#"{{"type":"content_block_stop","index":{}}}"#, self.text_index()),
                    )
                    .to_vec();
                    out.extend_from_slice(&Self::event(
                        "message_delta",
                        &format!(
                            r#"{{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
                            self.stop_reason(),
                            self.sent
                        ),
                    ));
                    return Some(Ok(Bytes::from(out)));
                }
                Phase::Usage => {
                    self.phase = Phase::Done;
                    if self.include_usage {
                        let frame = format!(
                            "data: {{\"id\":\"cmpl-{}\",\"object\":\"{}\",\"created\":0,\"model\":{},\"choices\":[],\"usage\":{}}}\n\n",
                            self.req,
                            self.object(),
                            self.st.model_json,
                            self.usage_json()
                        );
                        return Some(Ok(Bytes::from(frame)));
                    }
                }
                Phase::Drop => {
                    // hyper writes what the body yields into a buffer and flushes it when the body is pending; a
                    // body error closes the connection without that flush. So pend once first: the head and the
                    // tokens sent so far reach the client, as they would from a server that fails mid-stream,
                    // rather than the connection closing before any response (a connect failure, not a stream one).
                    tokio::task::yield_now().await;
                    self.phase = Phase::End;
                    return Some(Err(std::io::Error::other(
                        "sim-server dropped the connection (--drop-after-tokens)",
                    )));
                }
                Phase::Tokens => {
                    let ev = self.rx.recv().await;
                    match ev {
                        None => {
                            self.phase = Phase::End;
                            return Some(Err(std::io::Error::other("engine dropped the request")));
                        }
                        Some(ReqEvent::Admitted { cached_tokens }) => {
                            self.cached = cached_tokens;
                            if self.kind == Kind::Messages {
                                let start = format!(
                                    r#"{{"type":"message_start","message":{{"id":"msg_{}","type":"message","role":"assistant","content":[],"model":{},"stop_reason":null,"stop_sequence":null,"usage":{}}}}}"#,
                                    self.req,
                                    self.st.model_json,
                                    self.anthropic_usage_json(0)
                                );
                                let mut out = Self::event("message_start", &start).to_vec();
                                out.extend_from_slice(&Self::event(
                                    "content_block_start",
                                    if self.reasoning > 0 {
                                        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#
                                    } else {
                                        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
                                    },
                                ));
                                out.extend_from_slice(&Self::event("ping", r#"{"type":"ping"}"#));
                                return Some(Ok(Bytes::from(out)));
                            }
                            if self.kind == Kind::Responses {
                                let created = format!(
                                    r#"{{"type":"response.created","response":{{"id":"resp_{}","object":"response","model":{},"status":"in_progress","usage":null}}}}"#,
                                    self.req, self.st.model_json
                                );
                                let mut out = Self::event("response.created", &created).to_vec();
                                out.extend_from_slice(&Self::event(
                                    "response.output_item.added",
                                    &format!(
                                        r#"{{"type":"response.output_item.added","output_index":0,"item":{{"id":"msg_{}","type":"message","role":"assistant","content":[]}}}}"#,
                                        self.req
                                    ),
                                ));
                                return Some(Ok(Bytes::from(out)));
                            }
                            if self.kind == Kind::Chat {
                                let frame = format!(
                                    "data: {{\"id\":\"chatcmpl-{}\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                                    self.req, self.st.model_json
                                );
                                return Some(Ok(Bytes::from(frame)));
                            }
                        }
                        Some(ReqEvent::Finished) => {
                            if self.sent + self.pending == 0 && self.out_tokens > 0 {
                                if self.kind == Kind::Responses {
                                    self.phase = Phase::End;
                                    return Some(Ok(Self::event(
                                        "error",
                                        r#"{"type":"error","code":"invalid_request_error","message":"the request does not fit the emulated engine (prompt + output exceed max_model_len or the KV cache)","param":null}"#,
                                    )));
                                }
                                if self.kind == Kind::Messages {
                                    // Anthropic ends a failed stream with the error event: no message_stop.
                                    self.phase = Phase::End;
                                    return Some(Ok(Self::event(
                                        "error",
                                        r#"{"type":"error","error":{"type":"invalid_request_error","message":"the request does not fit the emulated engine (prompt + output exceed max_model_len or the KV cache)"}}"#,
                                    )));
                                }
                                self.phase = Phase::Done;
                                let frame = "data: {\"object\":\"error\",\"error\":{\"message\":\"the request does not fit the emulated engine (prompt + output exceed max_model_len or the KV cache)\",\"type\":\"BadRequestError\",\"code\":400}}\n\n";
                                return Some(Ok(Bytes::from_static(frame.as_bytes())));
                            }
                            if self.pending > 0 {
                                self.phase = Phase::Usage;
                                return Some(Ok(self.send_pending(true)));
                            }
                            self.phase = Phase::Usage;
                        }
                        Some(ReqEvent::Routed(_)) => {}
                        Some(ReqEvent::Spec { drafted, accepted }) => {
                            let (d, a) = self.spec.unwrap_or((0, 0));
                            self.spec = Some((d + u64::from(drafted), a + u64::from(accepted)));
                        }
                        Some(ReqEvent::Tokens(n)) => {
                            self.pending += n;
                            let last = self.sent + self.pending >= self.out_tokens;
                            if self.pending < self.st.tokens_per_frame && !last {
                                continue;
                            }
                            let f = &self.st.faults;
                            let after = self.sent + self.pending;
                            if let Some(d) = f.drop_after_tokens
                                && after > d
                            {
                                // The client gets exactly `d` tokens, then the drop.
                                self.phase = Phase::Drop;
                                self.pending = d.saturating_sub(self.sent);
                                if self.pending == 0 {
                                    continue;
                                }
                                return Some(Ok(self.send_pending(false)));
                            }
                            if let Some(s) = f.stall_after_tokens
                                && after > s
                                && !self.stalled
                            {
                                self.stalled = true;
                                tokio::time::sleep(Duration::from_millis(f.stall_ms)).await;
                            }
                            return Some(Ok(self.send_pending(last)));
                        }
                    }
                }
            }
        }
    }

    /// A non-streaming answer: wait for the whole output.
    async fn whole(mut self) -> Response {
        while let Some(ev) = self.rx.recv().await {
            match ev {
                ReqEvent::Admitted { cached_tokens } => self.cached = cached_tokens,
                ReqEvent::Tokens(n) => self.pending += n,
                ReqEvent::Spec { drafted, accepted } => {
                    let (d, a) = self.spec.unwrap_or((0, 0));
                    self.spec = Some((d + u64::from(drafted), a + u64::from(accepted)));
                }
                ReqEvent::Finished => break,
                ReqEvent::Routed(_) => {}
            }
        }
        let text: String = (0..self.pending).map(|i| tokenize::gen_token(self.req, i)).collect();
        self.sent = self.pending;
        self.first_frame = (self.sent > 0).then(std::time::Instant::now);
        self.phase = Phase::End;
        let usage: Value = serde_json::from_str(&self.usage_json()).unwrap_or(Value::Null);
        let mut body = match self.kind {
            Kind::Completions => json!({
                "id": format!("cmpl-{}", self.req), "object": "text_completion", "created": 0, "model": self.st.model,
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": self.finish_reason}],
                "usage": usage,
            }),
            Kind::Chat => json!({
                "id": format!("chatcmpl-{}", self.req), "object": "chat.completion", "created": 0, "model": self.st.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": self.finish_reason}],
                "usage": usage,
            }),
            Kind::Responses => {
                let status = if self.finish_reason == "length" {
                    "incomplete"
                } else {
                    "completed"
                };
                let mut v: Value = serde_json::from_str(&self.responses_json(status)).unwrap_or(Value::Null);
                v["output"] = json!([{"type": "message", "id": format!("msg_{}", self.req), "role": "assistant",
                    "content": [{"type": "output_text", "text": text}]}]);
                v
            }
            Kind::Messages => json!({
                "id": format!("msg_{}", self.req), "type": "message", "role": "assistant", "model": self.st.model,
                "content": [{"type": "text", "text": text}], "stop_reason": self.stop_reason(), "stop_sequence": null,
                "usage": serde_json::from_str::<Value>(&self.anthropic_usage_json(self.sent)).unwrap_or(Value::Null),
            }),
        };
        if let (Some((drafted, accepted)), Some(o)) = (self.spec, body.as_object_mut()) {
            o.insert(
                "timings".into(),
                json!({"draft_n": drafted, "draft_n_accepted": accepted}),
            );
        }
        axum::Json(body).into_response()
    }
}

async fn models(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let mut model =
        json!({"id": st.model, "object": "model", "created": 0, "owned_by": "loadshape-sim (vllm-compatible)"});
    if let Some(len) = st.max_model_len {
        model["max_model_len"] = json!(len);
    }
    axum::Json(json!({"object": "list", "data": [model]}))
}

async fn metrics(State(st): State<Arc<AppState>>) -> Result<impl IntoResponse, Infallible> {
    let m = &st.engine.metrics;
    let label = format!("model_name={}", st.model_json);
    let mut out = String::with_capacity(2048);
    let mut put = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{label}}} {v}");
    };
    let r = Ordering::Relaxed;
    put(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        m.prompt_tokens_total.load(r),
    );
    put(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        m.generation_tokens_total.load(r),
    );
    put(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        m.requests_running.load(r),
    );
    put(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        m.requests_waiting.load(r),
    );
    put(
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in tokens.",
        m.prefix_cache_queries_total.load(r),
    );
    put(
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in tokens.",
        m.prefix_cache_hits_total.load(r),
    );
    put(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        m.request_success_total.load(r),
    );
    put(
        "loadshape_sim:requests_received_total",
        "counter",
        "Generation requests received (including rejected ones).",
        st.requests.load(r),
    );
    put(
        "loadshape_sim:requests_rejected_total",
        "counter",
        "Requests answered with an injected error.",
        st.rejected.load(r),
    );
    put(
        "loadshape_sim:engine_steps_total",
        "counter",
        "Engine iterations run.",
        m.steps_total.load(r),
    );
    // Speculative decoding under vLLM's names, once the engine has drafted.
    let drafts = m.spec_drafts_total.load(r);
    if drafts > 0 {
        put(
            "vllm:spec_decode_num_drafts_total",
            "counter",
            "Number of spec decoding drafts.",
            drafts,
        );
        put(
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "Number of draft tokens.",
            m.spec_draft_tokens_total.load(r),
        );
        put(
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "Number of accepted tokens.",
            m.spec_accepted_tokens_total.load(r),
        );
    }
    // KV-cache use and preemptions under vLLM's names, when the engine models them (the built-in engine does).
    if let Some(p) = m.preemptions() {
        put(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            p,
        );
    }
    if let Some(u) = m.kv_usage() {
        let _ = writeln!(
            out,
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n# TYPE \
             vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{label}}} {u}"
        );
    }
    if let Some((bs, blocks, caching)) = st.cache_config {
        // vLLM's info gauge (a subset of its labels): `loadshape calibrate` reads the KV geometry from it.
        let caching = if caching { "True" } else { "False" };
        let _ = writeln!(
            out,
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info \
             gauge\nvllm:cache_config_info{{block_size=\"{bs}\",enable_prefix_caching=\"{caching}\",\
             num_gpu_blocks=\"{blocks}\"}} 1"
        );
    }
    // Prefill/decode disaggregation: the link's transfers (vLLM's P/D connectors have no common name for them).
    if st.engine.kv_link.is_some() {
        let n = m.kv_transfers_total.load(r);
        let secs = m.kv_transfer_us_total.load(r) as f64 / 1e6;
        let _ = writeln!(
            out,
            "# HELP loadshape_sim:kv_transfers_total Prompts whose KV crossed the link from a prefill to a decode \
             instance.\n# TYPE loadshape_sim:kv_transfers_total counter\nloadshape_sim:kv_transfers_total{{{label}}} \
             {n}\n# HELP loadshape_sim:kv_transfer_seconds_total Time the KV transfers took on the link, in all.\n\
             # TYPE loadshape_sim:kv_transfer_seconds_total counter\n\
             loadshape_sim:kv_transfer_seconds_total{{{label}}} {secs}"
        );
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out))
}
