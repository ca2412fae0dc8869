//! The streaming client: one forced-length completion over `/v1/completions`, `/v1/chat/completions` or the
//! Anthropic Messages API (`/v1/messages`), read as SSE.
//!
//! [`Client::complete`] sends one request and returns an [`RequestOutcome`]: TTFT, E2E, content frames, the server's
//! `usage` (and where it came from: a final frame, the `finish_reason` frame, or missing), cached prompt tokens,
//! the finish reason, an inter-token-latency summary and the error text if it failed.
//!
//! Definitions (vLLM's `vllm bench serve`): TTFT = submit → first content frame; E2E = submit → end of stream;
//! ITL = gaps between successive content frames (a frame carrying several tokens, as with MTP, is one gap);
//! output tokens = `usage.completion_tokens`, falling back to the content-frame count only when the server sent no
//! usage (flagged `usage_source: missing`).
//!
//! Neither client follows redirects; a 429/503 with `Retry-After` is sent again after the wait, within the request's
//! timeout and `max_retries` ([`Client::complete`]).
//!
//! Two HTTP clients carry the requests ([`HttpClient`]): for `http://` URLs hyper's HTTP/1.1 connection API
//! directly, one connection per stream, driven by the stream itself ([`super::h1`]); for `https://` (or
//! `--http-client reqwest`) reqwest. Everything after the response head is the same code for both (`ChunkBody`).
//!
//! Cost per token is kept low (measured with `scripts/bench_replay.sh`, see docs/replay.md): the body's chunks are
//! read straight from the response (hyper's frames, or [`reqwest::Response::chunk`]; no stream adapters), SSE
//! events are cut out of each chunk in place by [`super::sse::SseDecoder`] (no copy, no allocation per event),
//! each event is parsed from those bytes into a borrowed struct that reads only the fields needed (the first
//! choice's text, `finish_reason`, `usage`, an error marker; strings are borrowed unless they hold escapes), and a
//! chunk has one time (events that arrive in one read arrive at the same time): on the hyper path the kernel's
//! receive time of its bytes where the socket gives it ([`super::rxstamp`], `--rx-clock`), else [`Instant::now`]
//! when the chunk is taken. The stall timeout does not re-arm a timer per frame: one sleep is checked against the
//! last frame's time when it fires; and neither it nor the cut token is polled on a frame's wake-up, only after one
//! of them woke the task.

use std::borrow::Cow;
use std::fmt;
use std::future::Future as _;
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use serde::Deserialize;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;
use shared::record::{FailureKind, ItlSummary, UsageSource};

use tokio_util::sync::CancellationToken;

use super::conversation::{Conversation, ToolResults};
use super::dialect::{self, Dialect};
use super::h1::{Conn, H1Pool};
use super::rxstamp::RxClock;
use super::sse::SseDecoder;

/// The error text of a request cancelled because the run stopped (a signal, or the drain grace ran out).
pub const CUT_ERROR: &str = "cut: the run stopped before this request finished";

/// Which OpenAI route carries the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// `/v1/completions` with `prompt` (the seed's route: the prompt is sent byte for byte, no chat template).
    #[default]
    Completions,
    /// `/v1/chat/completions`: a session's message list (system, the task, then per step the assistant reply and
    /// the tool output: [`Conversation::write_chat_messages`]); open/closed-loop prompts as one user message.
    Chat,
    /// The Anthropic Messages API, `/v1/messages` (`system`, `messages`, `max_tokens`, `stream: true`; headers
    /// `anthropic-version` and, with an API key, `x-api-key`): the same session model
    /// ([`Conversation::write_anthropic`]); its stream events parsed as Anthropic defines them.
    Messages,
    /// The Responses API, `/v1/responses` (`input` items, `max_output_tokens`, `stream: true`; issue #44): the same
    /// session model ([`Conversation::write_responses_input`]); its stream events (`response.output_text.delta`,
    /// `response.completed`, …) parsed as the API defines them.
    Responses,
}

impl Endpoint {
    /// The route under the base URL: `/completions`, `/chat/completions`, `/messages` or `/responses`.
    pub fn route(self) -> &'static str {
        match self {
            Endpoint::Completions => "/completions",
            Endpoint::Chat => "/chat/completions",
            Endpoint::Messages => "/messages",
            Endpoint::Responses => "/responses",
        }
    }
}

/// Which stream format a response is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// OpenAI completions and chat chunks, ending with `[DONE]`.
    OpenAi,
    /// The Anthropic Messages events.
    Anthropic,
    /// The Responses API's events, ending with `response.completed` (or `.incomplete`, `.failed`).
    Responses,
}

/// The `anthropic-version` header sent with `--endpoint messages` (the Messages API's current version).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// What one request sends: a plain prompt (open/closed loop, tokenizer probes), or a session's conversation with
/// how its tool outputs go back. Each endpoint writes either ([`Client::body_bytes`]): `/v1/completions` sends a
/// conversation as its flat text (the seed's bytes), chat and Messages as their message lists.
#[derive(Debug, Clone, Copy)]
pub enum Prompt<'a> {
    Text(&'a str),
    Conversation(&'a Conversation, ToolResults),
}

impl<'a> From<&'a str> for Prompt<'a> {
    fn from(text: &'a str) -> Self {
        Prompt::Text(text)
    }
}

impl<'a> From<&'a String> for Prompt<'a> {
    fn from(text: &'a String) -> Self {
        Prompt::Text(text)
    }
}

impl Prompt<'_> {
    /// Characters of prompt text (the record's `prompt_chars`).
    pub fn chars(&self) -> u64 {
        match self {
            Prompt::Text(t) => t.len() as u64,
            Prompt::Conversation(c, _) => c.chars(),
        }
    }
}

/// Which HTTP client carries the streams (`--http-client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpClient {
    /// The default: hyper.
    #[default]
    Auto,
    /// hyper's HTTP/1.1 connection API directly, one connection per stream (`http://`, and `https://` via rustls).
    Hyper,
    /// reqwest (pooled hyper-util client).
    Reqwest,
}

impl HttpClient {
    /// The client the streams are sent with: `Auto` is hyper, for `http://` and `https://` alike.
    pub fn resolve(self) -> HttpClient {
        match self {
            HttpClient::Auto => HttpClient::Hyper,
            other => other,
        }
    }
}

impl fmt::Display for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HttpClient::Auto => "auto",
            HttpClient::Hyper => "hyper",
            HttpClient::Reqwest => "reqwest",
        })
    }
}

/// Where and how to send requests.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL including the API prefix, e.g. `http://127.0.0.1:8000/v1` (as the seed's `--url`).
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub endpoint: Endpoint,
    /// Resolved dialect (not `Auto`; see [`detect_dialect`]).
    pub dialect: Dialect,
    pub temperature: f64,
    /// Whole-request limit.
    pub timeout: Duration,
    /// Longest allowed gap between frames (and before the first one); `None` = only the whole-request limit.
    pub stall_timeout: Option<Duration>,
    /// Which HTTP client carries the streams (`Auto`: hyper, for `http://` and `https://`).
    pub http_client: HttpClient,
    /// Which clock times the arrival of frames on the hyper path (reqwest's are always user-space).
    pub rx_clock: RxClock,
    /// Extra roots to trust for `https://` (`--ca-cert`), beside the platform's.
    pub ca_certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// How many times a request answered 429 or 503 with `Retry-After` is sent again after the wait it asks for
    /// (`--max-retries`, default [`DEFAULT_MAX_RETRIES`]; 0 = fail at once). Each wait must end inside `timeout`.
    pub max_retries: u32,
}

/// `--max-retries`' default: a few waits, as a production client makes under overload, not an endless queue.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// Counters shared with the progress display; bumped as frames arrive.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub in_flight: AtomicU64,
    pub content_frames: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub gen_tokens: AtomicU64,
}

/// What the server reported in `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageCounts {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// `usage.completion_tokens_details.reasoning_tokens` (part of `completion_tokens`), where the server says.
    pub reasoning_tokens: Option<u64>,
}

impl UsageCounts {
    /// The Anthropic usage fields as the record counts them: prompt tokens = `input_tokens` (the uncached part) +
    /// `cache_read_input_tokens` + `cache_creation_input_tokens`; cached = `cache_read_input_tokens`.
    fn anthropic(u: &AnthropicUsage) -> UsageCounts {
        UsageCounts {
            prompt_tokens: u
                .input_tokens
                .map(|i| i + u.cache_read_input_tokens.unwrap_or(0) + u.cache_creation_input_tokens.unwrap_or(0)),
            completion_tokens: u.output_tokens,
            cached_tokens: u.cache_read_input_tokens,
            reasoning_tokens: None,
        }
    }
}

/// The result of one request.
#[derive(Debug, Clone)]
pub struct RequestOutcome {
    pub ok: bool,
    /// When the request was handed to the connection.
    pub submitted: Instant,
    /// Submit → the first token of any kind (reasoning or content).
    pub ttft: Option<Duration>,
    /// Submit → the first content token, when reasoning frames came before it (else `None`: it is `ttft`).
    pub ttft_content: Option<Duration>,
    /// Reasoning tokens of the reply: `usage.completion_tokens_details.reasoning_tokens`, else the reasoning frames
    /// counted; `None` when the reply had none.
    pub reasoning_tokens: Option<u64>,
    /// The reply's reasoning text (only when asked for the text), apart from `text`.
    pub reasoning_text: String,
    /// Submit → end of stream (or failure).
    pub wall: Duration,
    /// Frames that carried content or reasoning.
    pub frames: u64,
    pub usage: UsageCounts,
    pub usage_source: UsageSource,
    /// `usage.completion_tokens`, else the frame count.
    pub gen_tokens: u64,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    /// What kind of failure `error` is (`None` when `ok`): the record's `failure`.
    pub failure: Option<FailureKind>,
    pub itl: Option<ItlSummary>,
    /// The generated text (only when asked for: sessions append it to the conversation).
    pub text: String,
    /// The first content frame was timed by the kernel's receive time (else by `Instant::now()` when taken).
    pub first_frame_kernel: bool,
    /// The status of each attempt that was answered 429/503 with `Retry-After` and sent again, in order (the
    /// record's `retries` and `retry_statuses`). `submitted`, `ttft` and `wall` count from the first attempt.
    pub retry_statuses: Vec<u16>,
    /// Speculative decoding's counts where the server reports them per request (llama.cpp's `timings.draft_n`,
    /// `timings.draft_n_accepted`): the record's `spec`.
    pub spec: Option<shared::record::SpecCounts>,
    /// The KV transfer of a prefill/decode-disaggregated server, where the server says it per request
    /// ([`KV_TRANSFER_HEADER`], the sim-server's `--fleet`): the record's `kv_transfer_ms`. vLLM's P/D proxy does
    /// not say it: absent there.
    pub kv_transfer_ms: Option<f64>,
    /// The replica a fleet behind one endpoint routed the request to, where the server says it
    /// ([`REPLICA_HEADER`], the sim-server's `--fleet`): the record's `replica` when the client did not route.
    pub server_replica: Option<u32>,
}

/// The response header a disaggregated server gives a request's KV transfer in, milliseconds (the sim-server's
/// `--fleet` with `disaggregation`).
pub const KV_TRANSFER_HEADER: &str = "x-kv-transfer-ms";

/// The response header a fleet behind one endpoint (the sim-server's `--fleet`) names the replica it routed the
/// request to in, counted from 0 (a disaggregated fleet's prefill instance, as the simulator's records name it).
pub const REPLICA_HEADER: &str = "x-replica";

pub use super::dialect::SESSION_HEADER;

/// [`REPLICA_HEADER`]'s value, else nothing.
fn replica_of(headers: &hyper::HeaderMap) -> Option<u32> {
    headers.get(REPLICA_HEADER)?.to_str().ok()?.trim().parse().ok()
}

/// [`KV_TRANSFER_HEADER`]'s value: a finite number of milliseconds ≥ 0, else nothing.
fn kv_transfer_of(headers: &hyper::HeaderMap) -> Option<f64> {
    headers
        .get(KV_TRANSFER_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// The HTTP client, one per run; connections are pooled and reused.
///
/// Everything about a request that does not change from one request to the next is prepared once here: the parsed
/// URL, the headers (content type, the API key) and the constant parts of the JSON body, so that a request costs
/// the prompt's escaping and reqwest's own work only (measured: the URL parse, the `serde_json::Value` body and its
/// drop were a quarter of the client's per-request CPU, which is spent on the thread that reads the streams).
#[derive(Debug, Clone)]
pub struct Client {
    transport: Transport,
    /// The body up to the prompt: `{"model":…`.
    body_head: Vec<u8>,
    /// After the length fields: temperature, `stream`, `stream_options` (not for Messages) and the closing brace.
    body_tail: Vec<u8>,
    cfg: Arc<ClientConfig>,
    /// Hyper path: the send → the return of the request's last `write`, µs, one per attempt that got a response head
    /// (the client-side part of TTFT that kernel receive stamps do not remove; the send is `t_submit` except for a
    /// retry after `Retry-After`).
    send_delays_us: Arc<std::sync::Mutex<Vec<f32>>>,
}

/// What carries the requests (see [`HttpClient`]).
#[derive(Debug, Clone)]
enum Transport {
    Reqwest {
        http: reqwest::Client,
        /// The endpoint's URL, or why it is not one (the request then fails with that text).
        url: Result<reqwest::Url, String>,
        /// Content type and authorization, or why the API key is not a valid header value.
        headers: Result<reqwest::header::HeaderMap, String>,
    },
    /// The direct HTTP/1.1 path, or why it cannot be used (every request then fails with that text).
    Hyper(Result<Arc<H1Pool>, String>),
}

/// A reqwest client set up for many long-lived local streams: HTTP/1.1, no Nagle, no proxy, unbounded idle pool.
/// reqwest's client: the streams with `--http-client reqwest`, and the few side requests of every run (`/models`,
/// dialect detection, `/metrics`). `https://` trusts the platform's roots plus `ca_certs` (`--ca-cert`).
pub fn http_client(ca_certs: &[rustls::pki_types::CertificateDer<'static>]) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder();
    for c in ca_certs {
        builder = builder.add_root_certificate(
            reqwest::Certificate::from_der(c.as_ref()).context("--ca-cert: a certificate reqwest cannot read")?,
        );
    }
    builder
        .http1_only()
        .tcp_nodelay(true)
        .no_proxy()
        .pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(Duration::from_secs(90))
        // No redirects, as on the hyper path: a 307/308 would re-send the POST body, possibly to another host (load
        // only to the configured target); the request fails with the status and the `Location` it named.
        .redirect(reqwest::redirect::Policy::none())
        // No retries: a retried request would be timed as one, and its first attempt would be lost. reqwest's
        // default retries HTTP/2 protocol NACKs only (HTTP/1 here) but clones every request to be able to; with a
        // budget of 0 retries it clones nothing.
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .build()
        .context("building the HTTP client")
}

/// The headers every request carries: `content-type: application/json` and, with an API key, `authorization:
/// Bearer …` (marked sensitive, so it is never printed). The Messages endpoint adds `anthropic-version` and, with
/// a key, `x-api-key` (Anthropic's header; vLLM and llama.cpp read the bearer token, so both are sent).
fn request_headers(api_key: Option<&str>, endpoint: Endpoint) -> Result<reqwest::header::HeaderMap, String> {
    use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
    let mut h = HeaderMap::with_capacity(4);
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let bad_key = || "the API key holds characters an HTTP header cannot carry".to_string();
    if let Some(key) = api_key {
        let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| bad_key())?;
        v.set_sensitive(true);
        h.insert(AUTHORIZATION, v);
    }
    if endpoint == Endpoint::Messages {
        h.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = api_key {
            let mut v = HeaderValue::from_str(key).map_err(|_| bad_key())?;
            v.set_sensitive(true);
            h.insert(HeaderName::from_static("x-api-key"), v);
        }
    }
    Ok(h)
}

/// `scheme://host:port` of a URL (where `/metrics`, `/props`, `/version` and `/health` live).
pub fn origin_of(url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("--url {url:?} is not a URL"))?;
    let host = parsed
        .host_str()
        .with_context(|| format!("--url {url:?} has no host"))?;
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Ok(match parsed.port() {
        Some(port) => format!("{}://{host}:{port}", parsed.scheme()),
        None => format!("{}://{host}", parsed.scheme()),
    })
}

/// Ask the server which family it is (`/v1/models`, then `/props`, then `/version`).
pub async fn detect_dialect(
    http: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
) -> anyhow::Result<(Dialect, String)> {
    let origin = origin_of(base_url)?;
    let get = |url: String| async move {
        let mut req = http.get(&url).timeout(Duration::from_secs(5));
        if let Some(key) = api_key {
            req = req.bearer_auth(key);
        }
        match req.send().await {
            Ok(resp) if resp.status().is_success() => resp.json::<Value>().await.ok(),
            _ => None,
        }
    };
    let models = get(format!("{}/models", base_url.trim_end_matches('/'))).await;
    let (d, why) = dialect::detect_from(models.as_ref(), None, None);
    if d != Dialect::Openai {
        return Ok((d, why));
    }
    let props = get(format!("{origin}/props")).await;
    let version = get(format!("{origin}/version")).await;
    Ok(dialect::detect_from(models.as_ref(), props.as_ref(), version.as_ref()))
}

impl Client {
    pub fn new(http: reqwest::Client, cfg: ClientConfig) -> Self {
        let url_text = format!("{}{}", cfg.base_url.trim_end_matches('/'), cfg.endpoint.route());
        let transport = match cfg.http_client.resolve() {
            HttpClient::Hyper => Transport::Hyper(
                request_headers(cfg.api_key.as_deref(), cfg.endpoint)
                    .and_then(|headers| H1Pool::new(&url_text, headers, cfg.rx_clock, &cfg.ca_certs))
                    .map(|pool| {
                        // llama.cpp's server closes every connection after a streamed response (its headers say
                        // keep-alive): a connection per request from the start, rather than finding out from the
                        // first closed one. On a loaded machine its close can come later than the pool's
                        // probation (`h1::CONFIRM_AFTER`), and the request put on it then fails (docs/replay.md).
                        if cfg.dialect == Dialect::Llamacpp {
                            pool.stop_reuse();
                        }
                        Arc::new(pool)
                    }),
            ),
            _ => Transport::Reqwest {
                http,
                url: reqwest::Url::parse(&url_text).map_err(|e| format!("invalid URL {url_text:?}: {e}")),
                headers: request_headers(cfg.api_key.as_deref(), cfg.endpoint),
            },
        };
        let mut body_head = Vec::with_capacity(64 + cfg.model.len());
        body_head.extend_from_slice(b"{\"model\":");
        // Serializing a `&str` or an `f64` into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut body_head, cfg.model.as_str());
        let mut body_tail = b",\"temperature\":".to_vec();
        let _ = serde_json::to_writer(&mut body_tail, &cfg.temperature);
        body_tail.extend_from_slice(match cfg.endpoint {
            // The Messages API streams its usage in `message_start` and `message_delta`, the Responses API in
            // `response.completed`; neither has stream_options.
            Endpoint::Messages | Endpoint::Responses => b",\"stream\":true}",
            _ => b",\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        });
        Client {
            transport,
            body_head,
            body_tail,
            cfg: Arc::new(cfg),
            send_delays_us: Arc::default(),
        }
    }

    /// Ask the server for hidden reasoning (a session workload's `reasoning`), with its own controls: on chat,
    /// `"chat_template_kwargs": {"enable_thinking": true, "thinking_budget": R}` (vLLM, SGLang and llama.cpp pass
    /// them to the chat template of a reasoning model, which ignores a variable it does not use; sim-server streams
    /// `R` reasoning tokens); on Messages, `"thinking": {"type": "enabled", "budget_tokens": R}`; on Responses,
    /// `"reasoning": {"effort": "medium", "max_tokens": R}` (vLLM and SGLang turn the effort into
    /// `enable_thinking`; the API has no budget, `max_tokens` is OpenRouter's spelling of one, which sim-server
    /// streams); `/v1/completions` has no control (the prompt is raw text). `None`: the body as before.
    pub fn with_reasoning(mut self, reasoning: Option<shared::workload::Reasoning>) -> Self {
        let Some(r) = reasoning else { return self };
        let fields = match self.cfg.endpoint {
            Endpoint::Chat => format!(
                ",\"chat_template_kwargs\":{{\"enable_thinking\":true,\"thinking_budget\":{}}}",
                r.per_reply()
            ),
            Endpoint::Messages => format!(
                ",\"thinking\":{{\"type\":\"enabled\",\"budget_tokens\":{}}}",
                r.per_reply()
            ),
            Endpoint::Responses => format!(
                ",\"reasoning\":{{\"effort\":\"medium\",\"max_tokens\":{}}}",
                r.per_reply()
            ),
            Endpoint::Completions => String::new(),
        };
        // Before `,"temperature":…`, so the body still ends with the stream fields.
        let mut tail = fields.into_bytes();
        tail.extend_from_slice(&self.body_tail);
        self.body_tail = tail;
        self
    }

    /// Hyper path: `t_submit` → the return of each request's last `write`, µs, one per attempt that was written
    /// (scored by `shared::metrics::send_delay`); empty on the reqwest path or before any response.
    pub fn send_delays_us(&self) -> Vec<f32> {
        self.send_delays_us.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// The stream format of the endpoint.
    fn wire(&self) -> Wire {
        match self.cfg.endpoint {
            Endpoint::Messages => Wire::Anthropic,
            Endpoint::Responses => Wire::Responses,
            Endpoint::Completions | Endpoint::Chat => Wire::OpenAi,
        }
    }

    /// The HTTP client the requests go through (`Auto` resolved).
    pub fn http_client(&self) -> HttpClient {
        match self.transport {
            Transport::Reqwest { .. } => HttpClient::Reqwest,
            Transport::Hyper(_) => HttpClient::Hyper,
        }
    }

    /// Connections the hyper path opened so far (`None` on the reqwest path, whose pool does not say).
    pub fn connections_opened(&self) -> Option<u64> {
        match &self.transport {
            Transport::Hyper(Ok(pool)) => Some(pool.opened()),
            _ => None,
        }
    }

    /// Open `n` connections before the first request, so the first wave's TTFT does not include hundreds of
    /// simultaneous TCP connects: hyper opens them directly; reqwest's pool is filled by `n` concurrent
    /// `GET /models`. Either way they start [`super::h1::WARM_GAP`] apart (a burst can leave some unserved by the
    /// server's HTTP threads, see there). Failures are ignored (the requests will report them).
    pub async fn warm(&self, n: usize) {
        match &self.transport {
            Transport::Hyper(Ok(pool)) => {
                if !pool.warm(n).await {
                    eprintln!(
                        "note: the kernel did not stamp received packets within 200 ms; frames are timed in user \
                         space until it does (summary.json: rx_clock)"
                    );
                }
            }
            Transport::Hyper(Err(_)) => {}
            Transport::Reqwest { http, .. } => {
                let url = format!("{}/models", self.cfg.base_url.trim_end_matches('/'));
                let key = self.cfg.api_key.as_deref();
                super::h1::paced(n, || {
                    let mut req = http.get(&url).timeout(Duration::from_secs(5));
                    if let Some(k) = key {
                        req = req.bearer_auth(k);
                    }
                    async move {
                        if let Ok(resp) = req.send().await {
                            let _ = resp.bytes().await;
                        }
                    }
                })
                .await;
            }
        }
    }

    /// The JSON body of one forced-length streaming request, as sent: the prepared constant parts around the
    /// prompt (its JSON string, or the conversation's messages) and the dialect's length fields. The same object as
    /// the tests' reference `Client::body`.
    pub fn body_bytes<'p>(&self, prompt: impl Into<Prompt<'p>>, max_tokens: u32) -> Vec<u8> {
        let prompt = prompt.into();
        let chars = prompt.chars() as usize;
        let mut out = Vec::with_capacity(self.body_head.len() + chars + chars / 16 + 400);
        out.extend_from_slice(&self.body_head);
        // Serializing a `&str` into a Vec cannot fail.
        let json_str = |out: &mut Vec<u8>, s: &str| {
            let _ = serde_json::to_writer(&mut *out, s);
        };
        match (self.cfg.endpoint, prompt) {
            (Endpoint::Completions, p) => {
                out.extend_from_slice(b",\"prompt\":");
                json_str(
                    &mut out,
                    match p {
                        Prompt::Text(t) => t,
                        Prompt::Conversation(c, _) => c.flat(),
                    },
                );
            }
            (Endpoint::Chat, Prompt::Text(t)) => {
                out.extend_from_slice(b",\"messages\":[{\"role\":\"user\",\"content\":");
                json_str(&mut out, t);
                out.extend_from_slice(b"}]");
            }
            (Endpoint::Chat, Prompt::Conversation(c, tr)) => {
                out.extend_from_slice(b",\"messages\":");
                c.write_chat_messages(&mut out, tr);
            }
            (Endpoint::Messages, Prompt::Text(t)) => {
                out.extend_from_slice(b",\"messages\":[{\"role\":\"user\",\"content\":");
                json_str(&mut out, t);
                out.extend_from_slice(b"}]");
            }
            (Endpoint::Messages, Prompt::Conversation(c, tr)) => c.write_anthropic(&mut out, tr),
            (Endpoint::Responses, Prompt::Text(t)) => {
                out.extend_from_slice(b",\"input\":");
                json_str(&mut out, t);
            }
            (Endpoint::Responses, Prompt::Conversation(c, tr)) => c.write_responses_input(&mut out, tr),
        }
        if self.cfg.endpoint == Endpoint::Responses {
            use std::io::Write as _;
            let _ = write!(out, ",\"max_output_tokens\":{max_tokens}");
            self.cfg.dialect.write_forcing(&mut out, max_tokens);
        } else {
            self.cfg.dialect.write_length(&mut out, max_tokens);
        }
        out.extend_from_slice(&self.body_tail);
        out
    }

    /// One reqwest request, ready to send (or why it cannot be: a bad URL or API key, or the hyper path
    /// configured, reported as the request's error).
    fn request(
        &self,
        prompt: Prompt<'_>,
        max_tokens: u32,
        session: Option<&hyper::header::HeaderValue>,
    ) -> Result<reqwest::Request, String> {
        let Transport::Reqwest { url, headers, .. } = &self.transport else {
            return Err("this client sends through hyper, not reqwest".to_string());
        };
        let url = url.as_ref().map_err(Clone::clone)?.clone();
        let headers = headers.as_ref().map_err(Clone::clone)?.clone();
        let mut req = reqwest::Request::new(reqwest::Method::POST, url);
        *req.headers_mut() = headers;
        if let Some(v) = session {
            req.headers_mut().insert(SESSION_HEADER, v.clone());
        }
        *req.body_mut() = Some(reqwest::Body::from(self.body_bytes(prompt, max_tokens)));
        Ok(req)
    }

    /// The JSON body for one forced-length streaming request, as a `Value`: the reference the tests hold
    /// [`Client::body_bytes`] to (only the bytes are ever sent).
    #[cfg(test)]
    pub fn body(&self, prompt: &str, max_tokens: u32) -> Value {
        let mut body = serde_json::Map::new();
        body.insert("model".into(), self.cfg.model.clone().into());
        match self.cfg.endpoint {
            Endpoint::Completions => {
                body.insert("prompt".into(), prompt.into());
            }
            Endpoint::Chat | Endpoint::Messages => {
                body.insert(
                    "messages".into(),
                    serde_json::json!([{"role": "user", "content": prompt}]),
                );
            }
            Endpoint::Responses => {
                body.insert("input".into(), prompt.into());
            }
        }
        self.cfg.dialect.apply_length(&mut body, max_tokens);
        if self.cfg.endpoint == Endpoint::Responses {
            let max = body.remove("max_tokens").unwrap_or_default();
            body.insert("max_output_tokens".into(), max);
        }
        body.insert("temperature".into(), self.cfg.temperature.into());
        body.insert("stream".into(), true.into());
        if !matches!(self.cfg.endpoint, Endpoint::Messages | Endpoint::Responses) {
            body.insert("stream_options".into(), serde_json::json!({"include_usage": true}));
        }
        Value::Object(body)
    }

    /// Send one request and read its stream to the end, or until `cut` is cancelled (then the outcome is a failure
    /// with `error: "cut: …"` that keeps what arrived so far). Never panics on what the server sends.
    ///
    /// A 429 or 503 answer with `Retry-After` is waited out and the request sent again, at most
    /// [`ClientConfig::max_retries`] times and only while the wait ends inside `timeout` (else it fails at once,
    /// naming the `Retry-After`); the statuses of the retried attempts are [`RequestOutcome::retry_statuses`]. The clock
    /// starts at the first attempt: `submitted`, TTFT and E2E are what the user waited, the waits included.
    pub async fn complete<'p>(
        &self,
        prompt: impl Into<Prompt<'p>>,
        max_tokens: u32,
        collect_text: bool,
        live: &LiveCounters,
        cut: &CancellationToken,
    ) -> RequestOutcome {
        self.complete_in_session(prompt, max_tokens, collect_text, live, cut, None)
            .await
    }

    /// [`Client::complete`] for a request of `session`: it carries the [`SESSION_HEADER`] with that value (a
    /// value an HTTP header cannot carry is left out).
    pub async fn complete_in_session<'p>(
        &self,
        prompt: impl Into<Prompt<'p>>,
        max_tokens: u32,
        collect_text: bool,
        live: &LiveCounters,
        cut: &CancellationToken,
        session: Option<&str>,
    ) -> RequestOutcome {
        let mut retry_statuses = Vec::new();
        let session = session.and_then(|s| hyper::header::HeaderValue::from_str(s).ok());
        let mut ask = Ask {
            prompt: prompt.into(),
            max_tokens,
            collect_text,
            live,
            cut,
            first_submit: None,
            session: session.as_ref(),
        };
        let mut outcome = loop {
            let attempt = match &self.transport {
                Transport::Hyper(pool) => self.complete_hyper(pool, &ask).await,
                Transport::Reqwest { http, .. } => self.complete_reqwest(http, &ask).await,
            };
            let (st, status, wait, error) = match attempt {
                Attempt::Done(o) => break o,
                Attempt::RetryAfter {
                    st,
                    status,
                    wait,
                    error,
                } => (st, status, wait, error),
            };
            let made = retry_statuses.len() as u32;
            if made >= self.cfg.max_retries {
                let max = self.cfg.max_retries;
                break st.fail(
                    FailureKind::HttpStatus,
                    format!("{error} (Retry-After {wait:?}; not retried: {made} retries made, --max-retries {max})"),
                );
            }
            let left = (st.submitted + self.cfg.timeout).saturating_duration_since(Instant::now());
            if wait >= left {
                let left = Duration::from_millis(left.as_millis() as u64);
                let timeout = self.cfg.timeout;
                break st.fail(
                    FailureKind::HttpStatus,
                    format!(
                        "{error} (Retry-After {wait:?} is beyond the {left:?} left of --timeout {timeout:?}; not retried)"
                    ),
                );
            }
            retry_statuses.push(status.as_u16());
            ask.first_submit = Some(st.submitted);
            let waited = tokio::select! {
                () = tokio::time::sleep(wait) => true,
                () = cut.cancelled() => false,
            };
            if !waited {
                break st.fail(FailureKind::Cut, CUT_ERROR.to_string());
            }
        };
        outcome.retry_statuses = retry_statuses;
        live.in_flight.fetch_sub(1, Ordering::Relaxed);
        if outcome.ok {
            live.completed.fetch_add(1, Ordering::Relaxed);
            live.gen_tokens.fetch_add(outcome.gen_tokens, Ordering::Relaxed);
        } else {
            live.failed.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    /// One attempt on the direct HTTP/1.1 path ([`H1Pool`]): one connection per stream, taken from the idle stack
    /// (or opened) for this request and put back once its response was read to the end.
    async fn complete_hyper(&self, pool: &Result<Arc<H1Pool>, String>, ask: &Ask<'_>) -> Attempt {
        let Ask {
            prompt,
            max_tokens,
            collect_text,
            live,
            cut,
            first_submit,
            session,
        } = *ask;
        // The body is built before the clock starts, as the floor client builds its request before its clock.
        let body = Bytes::from(self.body_bytes(prompt, max_tokens));
        let pool = match pool {
            Ok(p) => p,
            Err(e) => {
                live.in_flight.fetch_add(1, Ordering::Relaxed);
                let st = StreamState::new(Instant::now(), collect_text, max_tokens, self.wire());
                return Attempt::Done(st.fail(FailureKind::Connect, format!("request failed: {e}")));
            }
        };
        // An idle connection, made ready before the clock starts (`ready` waits only for the connection's own state
        // to take in the end of its previous response, as the floor client starts its clock after `ready()`).
        // Opening a new connection (none idle, or the server closed it) happens after the clock: that is time the
        // request really waits.
        pool.pace_start().await;
        let idle = pool.take_idle().await;
        // The request itself (its head and headers) is built before the clock too: after it only the hand-over to
        // the connection and hyper's encoding of the head precede the `write`.
        let req = pool.request(body.clone(), session);
        let start = Instant::now();
        if first_submit.is_none() {
            live.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        let st = StreamState::new(first_submit.unwrap_or(start), collect_text, max_tokens, self.wire());
        let deadline = st.submitted + self.cfg.timeout;
        let head_by = self.head_deadline(start, deadline);
        let sent = tokio::select! {
            biased;
            r = tokio::time::timeout_at(head_by.into(), send_h1(pool, idle, req, body, session)) => Some(r),
            () = cut.cancelled() => None,
        };
        let (resp, mut conn) = match sent {
            None => return Attempt::Done(st.fail(FailureKind::Cut, CUT_ERROR.to_string())),
            Some(Err(_)) => {
                let (kind, e) = self.no_head_error(head_by, deadline);
                return Attempt::Done(st.fail(kind, e));
            }
            Some(Ok(Err(e))) => return Attempt::Done(st.fail(FailureKind::Connect, format!("request failed: {e}"))),
            Some(Ok(Ok(sent))) => sent,
        };
        if let Some(w) = conn.last_write().filter(|&w| w >= start) {
            let us = w.duration_since(start).as_secs_f32() * 1e6;
            self.send_delays_us.lock().unwrap_or_else(|p| p.into_inner()).push(us);
        }
        let (parts, body) = resp.into_parts();
        let mut body = Driven { body, conn: &mut conn };
        if !parts.status.is_success() {
            let text = tokio::time::timeout_at(self.body_deadline(deadline).into(), read_to_end(&mut body)).await;
            let detail = match text {
                Ok(Ok(b)) => {
                    pool.put_back(conn, &parts.headers, parts.version);
                    truncate(&String::from_utf8_lossy(&b), 300)
                }
                _ => String::new(),
            };
            return Attempt::refused(st, parts.status, &parts.headers, &detail);
        }
        let mut st = st;
        st.kv_transfer_ms = kv_transfer_of(&parts.headers);
        st.server_replica = replica_of(&parts.headers);
        let (outcome, ended) = self.read_stream(&mut body, st, start, deadline, live, cut).await;
        if ended {
            pool.put_back(conn, &parts.headers, parts.version);
        }
        Attempt::Done(outcome)
    }

    /// One attempt on the reqwest path (pooled; TLS).
    async fn complete_reqwest(&self, http: &reqwest::Client, ask: &Ask<'_>) -> Attempt {
        let Ask {
            prompt,
            max_tokens,
            collect_text,
            live,
            cut,
            first_submit,
            session,
        } = *ask;
        // The request is built (body, headers, reqwest's layers) before the clock starts, as the floor client
        // builds its request before its clock: `execute` only prepares a future; the clock starts just before its
        // first poll, which takes a pooled connection and hands the request to it. Everything from there to the
        // first content frame — the write, the server, the read and the wait for this task's turn — is TTFT.
        // Building it before the scheduler pass below also means that when many requests start at once (a closed
        // loop's first wave), their hand-offs to the connections follow each other closely instead of each one
        // waiting for the next one's building.
        let pending = self.request(prompt, max_tokens, session).map(|req| http.execute(req));
        // One pass of the scheduler before the clock starts: a connection whose previous response just ended is
        // handed back to the pool by a task of its own; letting it run first means this request finds it idle
        // instead of waiting for it (or dialing a new one) after `submitted`. The floor client, which owns one
        // connection per worker, likewise starts its clock once its connection is ready.
        tokio::task::yield_now().await;
        let start = Instant::now();
        if first_submit.is_none() {
            live.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        let st = StreamState::new(first_submit.unwrap_or(start), collect_text, max_tokens, self.wire());
        let deadline = st.submitted + self.cfg.timeout;
        let head_by = self.head_deadline(start, deadline);
        let result = match pending {
            Ok(pending) => tokio::select! {
                biased;
                r = tokio::time::timeout_at(head_by.into(), pending) => Some(r),
                () = cut.cancelled() => None,
            },
            Err(e) => return Attempt::Done(st.fail(FailureKind::Connect, format!("request failed: {e}"))),
        };
        Attempt::Done(match result {
            None => st.fail(FailureKind::Cut, CUT_ERROR.to_string()),
            Some(Err(_)) => {
                let (kind, e) = self.no_head_error(head_by, deadline);
                st.fail(kind, e)
            }
            Some(Ok(Err(e))) => st.fail(FailureKind::Connect, format!("request failed: {}", error_chain(&e))),
            Some(Ok(Ok(resp))) if !resp.status().is_success() => {
                let (status, headers) = (resp.status(), resp.headers().clone());
                let text = tokio::time::timeout_at(self.body_deadline(deadline).into(), resp.bytes()).await;
                let detail = match text {
                    Ok(Ok(b)) => truncate(&String::from_utf8_lossy(&b), 300),
                    _ => String::new(),
                };
                return Attempt::refused(st, status, &headers, &detail);
            }
            Some(Ok(Ok(mut resp))) => {
                let mut st = st;
                st.kv_transfer_ms = kv_transfer_of(resp.headers());
                st.server_replica = replica_of(resp.headers());
                self.read_stream(&mut resp, st, start, deadline, live, cut).await.0
            }
        })
    }

    /// By when a response head must have come: the whole-request `deadline`, or sooner the stall limit counted from
    /// `start`, the send (`--stall-timeout` is the longest gap between frames "and before the first one", and no
    /// frame comes before the head: issue #16, item 11).
    fn head_deadline(&self, start: Instant, deadline: Instant) -> Instant {
        self.cfg.stall_timeout.map_or(deadline, |s| (start + s).min(deadline))
    }

    /// The error of a request whose head did not come by `head_by` ([`Client::head_deadline`]).
    fn no_head_error(&self, head_by: Instant, deadline: Instant) -> (FailureKind, String) {
        match self.cfg.stall_timeout {
            Some(limit) if head_by < deadline => (
                FailureKind::Stall,
                format!("stall: no response headers within {limit:?}"),
            ),
            _ => (
                FailureKind::Timeout,
                format!("timeout: no response headers within {:?}", self.cfg.timeout),
            ),
        }
    }

    /// By when an error answer's body must have been read (its text goes into the error): the stall limit from now,
    /// within the whole-request deadline.
    fn body_deadline(&self, deadline: Instant) -> Instant {
        self.head_deadline(Instant::now(), deadline)
    }

    /// Read a response body as SSE to `[DONE]` or its end. Returns the outcome and whether the body was read to its
    /// end (then its connection can carry another request). `start`: when this attempt was sent (the gap before the
    /// first frame counts from it).
    async fn read_stream<B: ChunkBody>(
        &self,
        resp: &mut B,
        mut st: StreamState,
        start: Instant,
        deadline: Instant,
        live: &LiveCounters,
        cut: &CancellationToken,
    ) -> (RequestOutcome, bool) {
        let mut sse = SseDecoder::new();
        let stall = self.cfg.stall_timeout;
        let mut last = start;
        // ONE timer for both limits, armed at the earlier of (last frame + stall) and the whole-request deadline.
        // It is not re-armed per frame: when it fires early (frames kept coming), it is moved to the new
        // last + stall. Each wake-up of this loop therefore polls a single timer.
        let next_check = |last: Instant| stall.map_or(deadline, |s| (last + s).min(deadline));
        let timer = tokio::time::sleep_until(next_check(last).into());
        let cut = cut.cancelled();
        tokio::pin!(timer, cut);
        // The cut token and the timer are polled only after one of them woke the task (`Alarm`), not on every
        // wake-up a frame causes: most wake-ups then poll the body alone.
        let alarm = Arc::new(Alarm::default());
        let alarm_waker = Waker::from(alarm.clone());
        // The task waker last handed to the alarm (it is stable for a task, so it is rarely handed over again).
        let mut registered: Option<Waker> = None;
        loop {
            let step = std::future::poll_fn(|cx| {
                if let Poll::Ready(chunk) = resp.poll_chunk(cx) {
                    return Poll::Ready(Step::Chunk(chunk));
                }
                if registered.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
                    alarm.task.register(cx.waker());
                    registered = Some(cx.waker().clone());
                }
                if alarm.fired.load(Ordering::Acquire) && alarm.fired.swap(false, Ordering::AcqRel) {
                    // Waking took the waker out of the alarm: hand it over again before polling the two.
                    alarm.task.register(cx.waker());
                    let mut acx = Context::from_waker(&alarm_waker);
                    if cut.as_mut().poll(&mut acx).is_ready() {
                        return Poll::Ready(Step::Cut);
                    }
                    if timer.as_mut().poll(&mut acx).is_ready() {
                        return Poll::Ready(Step::Timer);
                    }
                }
                Poll::Pending
            })
            .await;
            match step {
                Step::Chunk(Ok(Some(bytes))) => {
                    // The chunk's time: when its bytes reached this machine if the kernel said (never before the
                    // submit or the previous chunk), else now.
                    let (now, kernel) = match resp.rx_time() {
                        Some((at, kernel)) => (at.max(last), kernel),
                        None => (Instant::now(), false),
                    };
                    last = now;
                    let frames_before = st.frames;
                    let flow = sse.feed(&bytes, |data| st.on_data(data, now));
                    if frames_before == 0 && st.frames > 0 {
                        st.first_frame_kernel = kernel;
                    }
                    live.content_frames
                        .fetch_add(st.frames - frames_before, Ordering::Relaxed);
                    let flow = match flow {
                        Ok(flow) => flow,
                        Err(e) => {
                            return (
                                st.fail(FailureKind::Protocol, format!("malformed SSE stream: {e}")),
                                false,
                            );
                        }
                    };
                    if flow.is_break() {
                        let outcome = st.finish_done();
                        // Read on to the end of the body (normally only the chunked terminator, already on its way)
                        // so the connection can carry the next request: dropping a body early closes its
                        // connection, and the next request would wait for a new one (a TTFT outlier the client
                        // made). Bounded, so a server that keeps the stream open after [DONE] costs at most a moment.
                        let rest = async {
                            loop {
                                match std::future::poll_fn(|cx| resp.poll_chunk(cx)).await {
                                    Ok(Some(_)) => {}
                                    Ok(None) => return true,
                                    Err(_) => return false,
                                }
                            }
                        };
                        let ended = tokio::time::timeout(Duration::from_millis(200), rest)
                            .await
                            .unwrap_or(false);
                        return (outcome, ended);
                    }
                }
                Step::Chunk(Ok(None)) => return (st.finish_eof(), true),
                Step::Chunk(Err(e)) => return (st.fail(FailureKind::Stream, format!("stream error: {e}")), false),
                Step::Cut => return (st.fail(FailureKind::Cut, CUT_ERROR.to_string()), false),
                Step::Timer => {
                    let now = Instant::now();
                    if now >= deadline {
                        let e = format!("timeout: stream not finished within {:?}", self.cfg.timeout);
                        return (st.fail(FailureKind::Timeout, e), false);
                    }
                    if let Some(limit) = stall
                        && now.duration_since(last) >= limit
                    {
                        let frames = st.frames;
                        let e = format!("stall: no frame for {limit:?} (after {frames} content frames)");
                        return (st.fail(FailureKind::Stall, e), false);
                    }
                    timer.as_mut().reset(next_check(last).into());
                    // Poll the re-armed timer once so it is registered with the alarm's waker again.
                    alarm.fired.store(true, Ordering::Release);
                }
            }
        }
    }
}

/// One request as [`Client::complete`] was asked for it, handed to each of its attempts.
#[derive(Clone, Copy)]
struct Ask<'a> {
    prompt: Prompt<'a>,
    max_tokens: u32,
    collect_text: bool,
    live: &'a LiveCounters,
    cut: &'a CancellationToken,
    /// When the first attempt started (a retry keeps that clock); `None` for the first attempt.
    first_submit: Option<Instant>,
    /// The value of its [`SESSION_HEADER`], when it belongs to a session.
    session: Option<&'a hyper::header::HeaderValue>,
}

/// How one attempt of a request ended.
enum Attempt {
    Done(RequestOutcome),
    /// A 429 or 503 whose `Retry-After` asks to come back after `wait`: the caller waits and sends again, or fails
    /// the request with `error` (and why it did not wait) — [`Client::complete`] decides.
    RetryAfter {
        st: StreamState,
        status: hyper::StatusCode,
        wait: Duration,
        error: String,
    },
}

impl Attempt {
    /// An answer that is not a success: a retry where it asks for one, else the request's failure.
    fn refused(st: StreamState, status: hyper::StatusCode, headers: &hyper::HeaderMap, detail: &str) -> Attempt {
        let error = http_error(status, headers, detail);
        match retry_after(status, headers, std::time::SystemTime::now()) {
            Some(wait) => Attempt::RetryAfter {
                st,
                status,
                wait,
                error,
            },
            None => Attempt::Done(st.fail(FailureKind::HttpStatus, error)),
        }
    }
}

/// How long a 429 (Too Many Requests) or 503 (Service Unavailable) answer asks the client to wait before it
/// comes back: its `Retry-After`, delta-seconds or an HTTP-date (RFC 9110, section 10.2.3; a date in the past is
/// no wait), `now` being the wall clock. `None` for any other status, without the header, or with a value that is
/// neither form (the request then fails at once, as before).
fn retry_after(status: hyper::StatusCode, headers: &hyper::HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    use hyper::StatusCode;
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let value = headers.get(hyper::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still a wait, a very long one (beyond any timeout).
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// Send `req` (whose body is `body`) on `idle` (or on a new connection); returns the response head and the
/// connection (to drive while the body is read, and to put back once it has been).
///
/// The keep-alive race every HTTP/1.1 client meets: a server may close an idle connection just as a request is put
/// on it. Such a request is sent once more, rebuilt from `body`, on a new connection — but only when not one of its
/// bytes was written (the socket's write count did not move: hyper gave the request back unsent, or the close was
/// noticed before the write). A request whose bytes left may have reached the server, which may run it; sending it
/// again would double the load the run reports (issue #16, item 10: a server that read each request and closed the
/// connection saw every POST twice), so it fails with the connection's error instead, and the pool stops reusing
/// connections ([`H1Pool::stop_reuse`]): a server that dropped one kept connection drops the next ones too.
async fn send_h1(
    pool: &H1Pool,
    idle: Option<Conn>,
    req: hyper::Request<http_body_util::Full<Bytes>>,
    body: Bytes,
    session: Option<&hyper::header::HeaderValue>,
) -> Result<(hyper::Response<hyper::body::Incoming>, Conn), String> {
    let mut conn = match idle {
        Some(c) => c,
        None => pool.connect().await?,
    };
    let mut req = Some(req);
    loop {
        let req = req.take().unwrap_or_else(|| pool.request(body.clone(), session));
        let written_before = conn.bytes_written();
        let sent = std::pin::pin!(conn.tx.try_send_request(req));
        match conn.drive(sent).await {
            Ok(resp) => return Ok((resp, conn)),
            Err(e) => {
                if !(conn.reused && conn.bytes_written() == written_before) {
                    if conn.reused {
                        // The server dropped a connection it had kept after a response: it will do it again.
                        pool.stop_reuse();
                    }
                    return Err(error_chain(e.error()));
                }
                conn = pool.connect().await?;
            }
        }
    }
}

/// A hyper response body together with the connection it arrives on, which this drives (see [`h1`]): one poll
/// reads the socket and takes the chunk.
struct Driven<'a> {
    body: hyper::body::Incoming,
    conn: &'a mut Conn,
}

impl ChunkBody for Driven<'_> {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, String>> {
        if let Poll::Ready(r) = self.body.poll_chunk(cx) {
            return Poll::Ready(r);
        }
        self.conn.poll_io(cx);
        self.body.poll_chunk(cx)
    }

    fn rx_time(&self) -> Option<(Instant, bool)> {
        self.conn.rx_time()
    }
}

/// The whole body (an error answer's text).
async fn read_to_end<B: ChunkBody>(body: &mut B) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = std::future::poll_fn(|cx| body.poll_chunk(cx)).await? {
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A response body read chunk by chunk: reqwest's, or hyper's own.
trait ChunkBody {
    /// The next data chunk, `None` at the end, or the error's text (with its causes).
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, String>>;

    /// When the bytes of the latest read on the connection arrived and whether the kernel said so (see
    /// [`super::rxstamp`]): never earlier than the read that brought the last chunk. `None`: the caller reads its
    /// own clock (reqwest's path, or reads not stamped).
    fn rx_time(&self) -> Option<(Instant, bool)> {
        None
    }
}

impl ChunkBody for reqwest::Response {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, String>> {
        std::pin::pin!(self.chunk())
            .poll(cx)
            .map(|r| r.map_err(|e| error_chain(&e)))
    }
}

impl ChunkBody for hyper::body::Incoming {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, String>> {
        use hyper::body::Body as _;
        loop {
            return match std::pin::Pin::new(&mut *self).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => Poll::Ready(Ok(Some(data))),
                    // Trailers carry no content.
                    Err(_) => continue,
                },
                Poll::Ready(Some(Err(e))) => Poll::Ready(Err(error_chain(&e))),
                Poll::Ready(None) => Poll::Ready(Ok(None)),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

/// What woke a stream's loop.
enum Step {
    Chunk(Result<Option<Bytes>, String>),
    Cut,
    Timer,
}

/// The waker given to a stream's cut token and timer: it notes that one of them fired, then wakes the task.
struct Alarm {
    fired: AtomicBool,
    task: AtomicWaker,
}

impl Default for Alarm {
    fn default() -> Self {
        // Fired at first, so the first poll registers the cut token and the timer.
        Alarm {
            fired: AtomicBool::new(true),
            task: AtomicWaker::new(),
        }
    }
}

impl Wake for Alarm {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// Per-request bookkeeping while a stream is read.
struct StreamState {
    submitted: Instant,
    first: Option<Instant>,
    last_content: Option<Instant>,
    frames: u64,
    usage: Option<UsageCounts>,
    usage_source: UsageSource,
    finish_reason: Option<String>,
    malformed: Option<String>,
    stream_error: Option<String>,
    gaps_ms: Vec<f32>,
    text: Option<String>,
    /// The first content (not reasoning) frame's arrival.
    first_content: Option<Instant>,
    /// Frames that carried reasoning, and their text (when the text is collected).
    reasoning_frames: u64,
    reasoning_text: Option<String>,
    first_frame_kernel: bool,
    /// The stream is the Anthropic Messages API's (its events: [`StreamState::on_anthropic`]).
    anthropic: bool,
    /// The stream is the Responses API's (its events: [`StreamState::on_responses`]).
    responses: bool,
    /// Responses: a terminal event (`response.completed`, `.incomplete`, `.failed`, `error`) arrived.
    responses_ended: bool,
    /// Anthropic: the usage of `message_start` (input side), updated by `message_delta`'s.
    anthropic_usage: Option<AnthropicUsage>,
    /// Anthropic: `message_delta` carried `usage.output_tokens`.
    anthropic_output: bool,
    /// The last `timings` with draft counts (llama.cpp).
    spec: Option<shared::record::SpecCounts>,
    /// [`RequestOutcome::kv_transfer_ms`], from the response's head.
    kv_transfer_ms: Option<f64>,
    /// [`RequestOutcome::server_replica`], from the response's head.
    server_replica: Option<u32>,
}

impl StreamState {
    fn new(submitted: Instant, collect_text: bool, max_tokens: u32, wire: Wire) -> Self {
        StreamState {
            anthropic: wire == Wire::Anthropic,
            responses: wire == Wire::Responses,
            responses_ended: false,
            anthropic_usage: None,
            anthropic_output: false,
            submitted,
            first: None,
            last_content: None,
            frames: 0,
            usage: None,
            usage_source: UsageSource::Missing,
            finish_reason: None,
            malformed: None,
            stream_error: None,
            gaps_ms: Vec::with_capacity((max_tokens as usize).min(1 << 16)),
            text: collect_text.then(|| String::with_capacity((max_tokens as usize * 5).min(1 << 20))),
            first_content: None,
            reasoning_frames: 0,
            reasoning_text: collect_text.then(String::new),
            first_frame_kernel: false,
            spec: None,
            kv_transfer_ms: None,
            server_replica: None,
        }
    }

    /// One SSE event's data. Breaks on `[DONE]`.
    fn on_data(&mut self, data: &[u8], now: Instant) -> ControlFlow<()> {
        let data = data.trim_ascii();
        if data.is_empty() {
            return ControlFlow::Continue(());
        }
        if self.anthropic {
            return self.on_anthropic(data, now);
        }
        if self.responses {
            return self.on_responses(data, now);
        }
        if data == b"[DONE]" {
            return ControlFlow::Break(());
        }
        let Some(chunk) = self.parse::<Chunk<'_>>(data) else {
            return ControlFlow::Continue(());
        };
        if chunk.error.is_some() || chunk.object.as_ref().is_some_and(|o| o.0 == "error") {
            if self.stream_error.is_none() {
                self.stream_error = Some(error_frame_text(data));
            }
            return ControlFlow::Continue(());
        }
        let mut finish_here = false;
        if let Some(choice) = chunk.choices.0 {
            // Content (`text`, `delta.content`) first; else reasoning (`delta.reasoning_content`, vLLM's and
            // llama.cpp's, or `delta.reasoning`).
            let delta = choice.delta.as_ref();
            let content = piece(&choice.text).or_else(|| delta.and_then(|d| piece(&d.content)));
            if let Some(text) = content {
                self.on_content(text, now, false);
            } else if let Some(text) = delta.and_then(|d| piece(&d.reasoning_content).or_else(|| piece(&d.reasoning))) {
                self.on_content(text, now, true);
            }
            if let Some(reason) = choice.finish_reason {
                finish_here = true;
                self.finish_reason = Some(reason.0.into_owned());
            }
        }
        self.on_timings(chunk.timings);
        if let Some(ext) = chunk.sglext {
            self.on_sglang_spec(ext.spec_tokens_details);
        }
        if let Some(u) = chunk.usage {
            if self.spec.is_none() {
                self.on_prediction_tokens(u.completion_tokens_details.as_ref());
            }
            self.usage = Some(UsageCounts {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
                cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
                reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
            });
            self.usage_source = if finish_here {
                UsageSource::FinishFrame
            } else {
                UsageSource::FinalFrame
            };
        }
        ControlFlow::Continue(())
    }

    /// One frame's JSON as `T`, borrowing from `data`; a frame that is not UTF-8 or not `T` is noted as malformed
    /// (the first one's text becomes the error if nothing worse happens) and gives `None`. One UTF-8 check of the
    /// whole frame, then the `&str` parser (which does not check each string again): cheaper than `from_slice`,
    /// which validates every string it borrows one by one.
    fn parse<'d, T: Deserialize<'d>>(&mut self, data: &'d [u8]) -> Option<T> {
        let parsed = std::str::from_utf8(data)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<T>(text).map_err(|e| e.to_string()));
        match parsed {
            Ok(v) => Some(v),
            Err(e) => {
                if self.malformed.is_none() {
                    let text = String::from_utf8_lossy(data);
                    self.malformed = Some(format!("malformed SSE frame ({e}): {}", truncate(&text, 120)));
                }
                None
            }
        }
    }

    /// One piece of content (text) or of reasoning arrived at `now`. Both are frames of the stream (TTFT, ITL);
    /// the content's first arrival is TTFT-content, and the reasoning's text is kept apart.
    fn on_content(&mut self, piece: &str, now: Instant, reasoning: bool) {
        self.frames += 1;
        match self.last_content {
            None => self.first = Some(now),
            Some(prev) => self.gaps_ms.push(now.duration_since(prev).as_secs_f32() * 1000.0),
        }
        self.last_content = Some(now);
        if reasoning {
            self.reasoning_frames += 1;
            if let Some(text) = &mut self.reasoning_text {
                text.push_str(piece);
            }
        } else {
            self.first_content.get_or_insert(now);
            if let Some(text) = &mut self.text {
                text.push_str(piece);
            }
        }
    }

    /// One event of the Anthropic Messages stream (by its data's `type`; the `event:` line says the same):
    /// `message_start` brings the input side of `usage`; `content_block_delta` with a `text_delta` (or a
    /// `thinking_delta`, as reasoning counts in the chat stream) is content; `message_delta` brings `stop_reason`
    /// and the output side of `usage`; `message_stop` ends the stream (as `[DONE]` does); `error` is an error event.
    /// `ping`, block starts and stops and tool-input deltas carry nothing to record.
    fn on_anthropic(&mut self, data: &[u8], now: Instant) -> ControlFlow<()> {
        let Some(ev) = self.parse::<AnthropicEvent<'_>>(data) else {
            return ControlFlow::Continue(());
        };
        let kind = ev.kind.as_ref().map_or("", |k| &*k.0);
        match kind {
            "message_start" => {
                if let Some(u) = ev.message.and_then(|m| m.usage) {
                    self.anthropic_usage = Some(u);
                }
            }
            "content_block_delta" => {
                if let Some(d) = &ev.delta {
                    if let Some(text) = piece(&d.text) {
                        self.on_content(text, now, false);
                    } else if let Some(thinking) = piece(&d.thinking) {
                        self.on_content(thinking, now, true);
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = ev.delta.and_then(|d| d.stop_reason) {
                    self.finish_reason = Some(reason.0.into_owned());
                }
                if let Some(u) = ev.usage {
                    self.anthropic_output |= u.output_tokens.is_some();
                    let merged = match self.anthropic_usage.take() {
                        Some(start) => start.updated_by(&u),
                        None => u,
                    };
                    self.anthropic_usage = Some(merged);
                }
            }
            "message_stop" => return ControlFlow::Break(()),
            "error" if self.stream_error.is_none() => self.stream_error = Some(anthropic_error_text(data)),
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// llama.cpp's per-request `timings` (on the frame that finishes a completions or chat stream, at the top of
    /// a Responses stream's `response.completed`; its Messages stream has none): the draft counts, when it drafted.
    fn on_timings(&mut self, timings: Option<Timings>) {
        if let Some(Timings {
            draft_n: Some(drafted),
            draft_n_accepted,
        }) = timings
        {
            self.spec = Some(shared::record::SpecCounts {
                draft_tokens: drafted,
                accepted_tokens: draft_n_accepted.unwrap_or(0),
                steps: None,
            });
        }
    }

    /// SGLang's per-request speculative counts on the usage frame of a chat or completions stream:
    /// `usage.completion_tokens_details.accepted_prediction_tokens` and `…rejected_prediction_tokens` (SGLang's
    /// `UsageProcessor` fills them from a request's `spec_num_correct_drafts` and `spec_num_proposed_drafts`; see
    /// python/sglang/srt/entrypoints/openai/usage_processor.py in sgl-project/sglang). Drafted = accepted + rejected;
    /// the verification steps are not in `usage`. Both 0 (a server that did not draft, or OpenAI's own API without
    /// a predicted output) is no count.
    fn on_prediction_tokens(&mut self, details: Option<&CompletionDetails>) {
        let Some(d) = details else { return };
        let (accepted, rejected) = (d.accepted_prediction_tokens, d.rejected_prediction_tokens);
        if accepted.is_none() && rejected.is_none() {
            return;
        }
        let (accepted, rejected) = (accepted.unwrap_or(0), rejected.unwrap_or(0));
        if accepted + rejected == 0 {
            return;
        }
        self.spec = Some(shared::record::SpecCounts {
            draft_tokens: accepted + rejected,
            accepted_tokens: accepted,
            steps: None,
        });
    }

    /// SGLang's `sglext.spec_tokens_details` (asked for per request with `return_spec_tokens_details` on builds that
    /// have it): proposed and correct drafts and the verification steps (`spec_verify_ct`). It carries the steps,
    /// so it is preferred to `usage`'s prediction tokens.
    fn on_sglang_spec(&mut self, details: Option<SglangSpecDetails>) {
        let Some(d) = details else { return };
        let (Some(proposed), Some(correct)) = (d.spec_num_proposed_drafts, d.spec_num_correct_drafts) else {
            return;
        };
        if proposed == 0 {
            return;
        }
        self.spec = Some(shared::record::SpecCounts {
            draft_tokens: proposed,
            accepted_tokens: correct.min(proposed),
            steps: d.spec_verify_ct,
        });
    }

    /// One event of the Responses API stream (by its data's `type`): `response.output_text.delta` is content,
    /// `response.reasoning_text.delta` (vLLM's) or `response.reasoning_summary_text.delta` reasoning;
    /// `response.completed` (finish `stop`) or `response.incomplete` (finish `length` when its reason is
    /// `max_output_tokens`) bring the usage and end the stream; `response.failed` and `error` end it with their
    /// message. Other events (created, in progress, items and parts added and done) carry nothing to record.
    fn on_responses(&mut self, data: &[u8], now: Instant) -> ControlFlow<()> {
        let Some(ev) = self.parse::<ResponsesEvent<'_>>(data) else {
            return ControlFlow::Continue(());
        };
        let kind = ev.kind.as_ref().map_or("", |k| &*k.0);
        match kind {
            "response.output_text.delta" => {
                if let Some(text) = piece(&ev.delta) {
                    self.on_content(text, now, false);
                }
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                if let Some(text) = piece(&ev.delta) {
                    self.on_content(text, now, true);
                }
            }
            "response.completed" | "response.incomplete" => {
                self.responses_ended = true;
                self.on_timings(ev.timings);
                let r = ev.response.unwrap_or_default();
                let limit = r
                    .incomplete_details
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .is_some_and(|why| why == "max_output_tokens");
                self.finish_reason = Some(if kind == "response.completed" {
                    "stop".to_string()
                } else if limit {
                    "length".to_string()
                } else {
                    "incomplete".to_string()
                });
                if let Some(u) = r.usage {
                    self.usage = Some(UsageCounts {
                        prompt_tokens: u.input_tokens,
                        completion_tokens: u.output_tokens,
                        cached_tokens: u.input_tokens_details.and_then(|d| d.cached_tokens),
                        reasoning_tokens: u.output_tokens_details.and_then(|d| d.reasoning_tokens),
                    });
                    self.usage_source = UsageSource::FinalFrame;
                }
                return ControlFlow::Break(());
            }
            "response.failed" | "error" => {
                self.responses_ended = true;
                if self.stream_error.is_none() {
                    self.stream_error = Some(responses_error_text(data));
                }
                return ControlFlow::Break(());
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn finish_done(self) -> RequestOutcome {
        self.finish(None)
    }

    fn finish_eof(self) -> RequestOutcome {
        if self.responses {
            let err = (!self.responses_ended && self.stream_error.is_none()).then(|| {
                (
                    FailureKind::Protocol,
                    "stream ended without response.completed (truncated Responses stream)".to_string(),
                )
            });
            return self.finish(err);
        }
        if self.anthropic {
            // A stream that ends without `message_stop` was cut short, unless an error event already said why.
            let err = self.stream_error.is_none().then(|| {
                (
                    FailureKind::Protocol,
                    "stream ended without message_stop (truncated Anthropic stream)".to_string(),
                )
            });
            return self.finish(err);
        }
        let err = if self.finish_reason.is_none() {
            Some((
                FailureKind::Protocol,
                "stream ended without finish_reason or [DONE]".to_string(),
            ))
        } else {
            None
        };
        self.finish(err)
    }

    fn fail(self, kind: FailureKind, error: String) -> RequestOutcome {
        self.finish(Some((kind, error)))
    }

    /// The outcome; `error` (with its kind) wins over an error frame, which wins over a malformed frame.
    fn finish(mut self, error: Option<(FailureKind, String)>) -> RequestOutcome {
        let wall = self.submitted.elapsed();
        if self.anthropic {
            self.usage = self.anthropic_usage.as_ref().map(UsageCounts::anthropic).map(|mut u| {
                // `message_start`'s `output_tokens` (0 or 1) is not the count: only a `message_delta`'s is.
                if !self.anthropic_output {
                    u.completion_tokens = None;
                }
                u
            });
            self.usage_source = UsageSource::FinalFrame;
        }
        let missing_usage = if self.anthropic {
            self.anthropic_missing_usage()
        } else if self.responses && self.responses_ended && self.usage.is_none() {
            Some("missing usage: the Responses stream's last event carried no response.usage".to_string())
        } else {
            None
        };
        let error = error
            .or_else(|| self.stream_error.take().map(|e| (FailureKind::ErrorFrame, e)))
            .or_else(|| self.malformed.take().map(|e| (FailureKind::Protocol, e)))
            .or_else(|| missing_usage.map(|e| (FailureKind::Protocol, e)));
        let (failure, error) = error.unzip();
        let usage = self.usage.unwrap_or_default();
        let gen_tokens = usage.completion_tokens.unwrap_or(self.frames);
        let reasoning_tokens = usage
            .reasoning_tokens
            .filter(|&n| n > 0)
            .or((self.reasoning_frames > 0).then_some(self.reasoning_frames));
        RequestOutcome {
            ok: error.is_none(),
            submitted: self.submitted,
            ttft: self.first.map(|f| f.duration_since(self.submitted)),
            ttft_content: self
                .first_content
                .filter(|_| reasoning_tokens.is_some())
                .map(|f| f.duration_since(self.submitted)),
            reasoning_tokens,
            reasoning_text: self.reasoning_text.unwrap_or_default(),
            wall,
            frames: self.frames,
            usage,
            usage_source: if usage.completion_tokens.is_some() {
                self.usage_source
            } else {
                UsageSource::Missing
            },
            gen_tokens,
            finish_reason: self.finish_reason,
            error,
            failure,
            itl: shared::metrics::itl_summary(&mut self.gaps_ms),
            text: self.text.unwrap_or_default(),
            first_frame_kernel: self.first_frame_kernel,
            retry_statuses: Vec::new(),
            spec: self.spec,
            kv_transfer_ms: self.kv_transfer_ms,
            server_replica: self.server_replica,
        }
    }

    /// Anthropic: why the stream's usage is not enough for a record (no `message_delta` with
    /// `usage.output_tokens`), if it is not. A stream without `usage.input_tokens` is a completed request whose
    /// prompt tokens the server did not report (`prompt_tokens: null`, counted by `Checks::prompt_usage_missing`):
    /// llama.cpp's converter leaves out `message_start` whenever its first token is part of a UTF-8 character
    /// (4 of 200 one-line prompts on the tiny test model), and failing the request would end the session.
    fn anthropic_missing_usage(&self) -> Option<String> {
        (!self.anthropic_output).then(|| "missing usage: no message_delta carried usage.output_tokens".into())
    }
}

/// The error of an answer that is not a success: `HTTP 503 Service Unavailable: <body>`. Redirects are never
/// followed (neither client: a 307/308 re-sends the POST body, perhaps to another host): a 3xx names its `Location`.
fn http_error(status: hyper::StatusCode, headers: &hyper::HeaderMap, detail: &str) -> String {
    if status.is_redirection() {
        let location = headers
            .get(hyper::header::LOCATION)
            .map_or_else(|| "none".into(), |v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        format!("HTTP {status} (redirect not followed; Location: {location}): {detail}")
    } else {
        format!("HTTP {status}: {detail}")
    }
}

/// The text of a Responses `error` event (`code`, `message` at the top) or `response.failed` (`response.error`).
fn responses_error_text(data: &[u8]) -> String {
    let v: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    let e = if v["type"] == "response.failed" {
        &v["response"]["error"]
    } else {
        &v
    };
    let code = e["code"].as_str().or_else(|| e["type"].as_str()).unwrap_or("error");
    let msg = e["message"].as_str().unwrap_or("(no message)");
    format!(
        "{}: {code}: {}",
        v["type"].as_str().unwrap_or("error"),
        truncate(msg, 300)
    )
}

fn error_frame_text(data: &[u8]) -> String {
    let v: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    let msg = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .or_else(|| v.get("error").and_then(Value::as_str))
        .or_else(|| v.get("message").and_then(Value::as_str))
        .map(str::to_owned)
        .unwrap_or_else(|| truncate(&String::from_utf8_lossy(data), 200));
    format!("error frame: {msg}")
}

/// An Anthropic `error` event (`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`):
/// `error event: overloaded_error: Overloaded`.
fn anthropic_error_text(data: &[u8]) -> String {
    let v: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    let kind = v.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
    let msg = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| truncate(&String::from_utf8_lossy(data), 200));
    format!("error event: {kind}: {msg}")
}

/// `err: cause: cause`, the whole source chain on one line.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut src = err.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        src = s.source();
    }
    out
}

fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

// ---- the borrowed view of one frame: only the fields we read ----

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: FirstOf<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    /// llama.cpp's per-request timings; only the speculative counts are read.
    #[serde(default)]
    timings: Option<Timings>,
    /// SGLang's response-level extension; only its speculative counts are read.
    #[serde(default)]
    sglext: Option<SglExt>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(borrow, default)]
    object: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
    /// SGLang's accepted and rejected draft tokens of the request (OpenAI's names for predicted outputs).
    #[serde(default)]
    accepted_prediction_tokens: Option<u64>,
    #[serde(default)]
    rejected_prediction_tokens: Option<u64>,
}

/// SGLang's `sglext` (response-level extension of its OpenAI-compatible API).
#[derive(Deserialize)]
struct SglExt {
    #[serde(default)]
    spec_tokens_details: Option<SglangSpecDetails>,
}

/// SGLang's `sglext.spec_tokens_details`: the request's speculative counts.
#[derive(Deserialize)]
struct SglangSpecDetails {
    #[serde(default)]
    spec_num_correct_drafts: Option<u64>,
    #[serde(default)]
    spec_num_proposed_drafts: Option<u64>,
    #[serde(default)]
    spec_verify_ct: Option<u64>,
}

/// llama.cpp's `timings`: draft tokens proposed and accepted (present when speculative decoding drafted).
#[derive(Deserialize)]
struct Timings {
    #[serde(default)]
    draft_n: Option<u64>,
    #[serde(default)]
    draft_n_accepted: Option<u64>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

// ---- the borrowed view of one Responses API event ----

#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Text<'a>>,
    /// The text of a `*.delta` event.
    #[serde(borrow, default)]
    delta: Option<Text<'a>>,
    /// The response of `response.completed` / `.incomplete` / `.failed`.
    #[serde(default)]
    response: Option<ResponsesResponse>,
    /// llama.cpp's per-request timings, beside `response` on `response.completed`.
    #[serde(default)]
    timings: Option<Timings>,
}

#[derive(Deserialize, Default)]
struct ResponsesResponse {
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(default)]
    incomplete_details: Option<Value>,
}

#[derive(Deserialize)]
struct ResponsesUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<Details>,
    #[serde(default)]
    output_tokens_details: Option<CompletionDetails>,
}

// ---- the borrowed view of one Anthropic Messages event ----

#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Text<'a>>,
    /// `message_start`'s message (its `usage`).
    #[serde(default)]
    message: Option<AnthropicMessage>,
    /// `content_block_delta`'s delta (`text`, `thinking`) or `message_delta`'s (`stop_reason`).
    #[serde(borrow, default)]
    delta: Option<AnthropicDelta<'a>>,
    /// `message_delta`'s usage.
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

#[derive(Deserialize)]
struct AnthropicMessage {
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

#[derive(Deserialize)]
struct AnthropicDelta<'a> {
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Text<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Text<'a>>,
}

/// Anthropic's `usage`: `input_tokens` is the uncached part of the prompt; the cache fields are the rest.
#[derive(Deserialize, Debug, Clone, Copy, Default)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl AnthropicUsage {
    /// `message_start`'s usage with the fields a later `message_delta` carries (Anthropic's are cumulative).
    fn updated_by(self, later: &AnthropicUsage) -> AnthropicUsage {
        AnthropicUsage {
            input_tokens: later.input_tokens.or(self.input_tokens),
            output_tokens: later.output_tokens.or(self.output_tokens),
            cache_read_input_tokens: later.cache_read_input_tokens.or(self.cache_read_input_tokens),
            cache_creation_input_tokens: later.cache_creation_input_tokens.or(self.cache_creation_input_tokens),
        }
    }
}

/// A JSON string borrowed from the frame unless it holds escapes. (`Option<Cow<'a, str>>` with `#[serde(borrow)]`
/// does not borrow: serde only borrows a bare `Cow`, so every text piece would be a fresh `String`.)
struct Text<'a>(Cow<'a, str>);

/// A frame's text field, when present and not empty.
fn piece<'t>(p: &'t Option<Text<'_>>) -> Option<&'t str> {
    p.as_ref().map(|t| &*t.0).filter(|t| !t.is_empty())
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// The first element of a JSON array (or nothing for `null`/`[]`), without allocating a `Vec`.
struct FirstOf<T>(Option<T>);

impl<T> Default for FirstOf<T> {
    fn default() -> Self {
        FirstOf(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for FirstOf<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = FirstOf<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices or null")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(FirstOf(None))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(FirstOf(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<T>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstOf(first))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config for `url` through `http_client`, the rest plain (tests change what they need).
    fn test_config(url: &str, http_client: HttpClient) -> ClientConfig {
        ClientConfig {
            base_url: url.into(),
            model: "m".into(),
            api_key: None,
            endpoint: Endpoint::Completions,
            dialect: Dialect::Vllm,
            temperature: 0.0,
            timeout: Duration::from_secs(1),
            stall_timeout: None,
            http_client,
            rx_clock: RxClock::Kernel,
            ca_certs: Vec::new(),
            max_retries: 0,
        }
    }

    fn feed(frames: &[&str]) -> RequestOutcome {
        let mut st = StreamState::new(Instant::now(), true, 8, Wire::OpenAi);
        for f in frames {
            if st.on_data(f.as_bytes(), Instant::now()).is_break() {
                return st.finish_done();
            }
        }
        st.finish_eof()
    }

    #[test]
    fn usage_in_final_frame() {
        let o = feed(&[
            r#"{"choices":[{"text":"a","finish_reason":null}],"usage":null}"#,
            r#"{"choices":[{"text":" b","finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}"#,
            "[DONE]",
        ]);
        assert!(o.ok, "{:?}", o.error);
        assert_eq!(
            (o.frames, o.gen_tokens, o.usage_source),
            (2, 2, UsageSource::FinalFrame)
        );
        assert_eq!(o.usage.cached_tokens, Some(3));
        assert_eq!(o.text, "a b");
        assert_eq!(o.finish_reason.as_deref(), Some("length"));
        assert!(o.itl.is_some());
    }

    /// llama.cpp's `timings` as llama-server streams them with a draft model: on the frame that finishes a
    /// completions stream, at the top of a Responses stream's `response.completed` (beside `response`).
    #[test]
    fn llama_cpp_draft_counts_on_completions_and_responses() {
        let o = feed(&[
            r#"{"choices":[{"text":"a","finish_reason":null}]}"#,
            r#"{"choices":[{"text":" b","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2},"timings":{"cache_n":0,"predicted_n":2,"draft_n":4,"draft_n_accepted":1}}"#,
            "[DONE]",
        ]);
        let want = shared::record::SpecCounts {
            draft_tokens: 4,
            accepted_tokens: 1,
            steps: None,
        };
        assert_eq!(o.spec, Some(want));
        // Without drafts llama.cpp leaves the counts out: no `spec`.
        let o = feed(&[
            r#"{"choices":[{"text":"a","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1},"timings":{"predicted_n":1}}"#,
            "[DONE]",
        ]);
        assert_eq!(o.spec, None);
        let mut st = StreamState::new(Instant::now(), false, 8, Wire::Responses);
        for ev in [
            r#"{"type":"response.output_text.delta","delta":"a"}"#,
            r#"{"type":"response.output_text.delta","delta":" b"}"#,
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":2}},"timings":{"draft_n":4,"draft_n_accepted":1}}"#,
        ] {
            if st.on_data(ev.as_bytes(), Instant::now()).is_break() {
                break;
            }
        }
        let o = st.finish_done();
        assert!(o.ok, "{:?}", o.error);
        assert_eq!(o.spec, Some(want));
    }

    /// SGLang's per-request counts on a chat stream: `usage.completion_tokens_details`'s accepted and rejected
    /// prediction tokens, or `sglext.spec_tokens_details` (with the steps) where the server sends it.
    #[test]
    fn sglang_draft_counts_on_the_usage_frame() {
        let o = feed(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a b c"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,"completion_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":5,"rejected_prediction_tokens":7}}}"#,
            "[DONE]",
        ]);
        assert!(o.ok, "{:?}", o.error);
        assert_eq!(o.gen_tokens, 9);
        let want = shared::record::SpecCounts {
            draft_tokens: 12,
            accepted_tokens: 5,
            steps: None,
        };
        assert_eq!(o.spec, Some(want));
        // OpenAI's own API reports 0 and 0 without a predicted output: no `spec`.
        let o = feed(&[
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"completion_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#,
            "[DONE]",
        ]);
        assert_eq!(o.spec, None);
        // `sglext.spec_tokens_details` brings the steps too, and wins over `usage`'s counts whatever the order.
        let o = feed(&[
            r#"{"choices":[{"index":0,"delta":{"content":"a b c"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"sglext":{"spec_tokens_details":{"spec_num_correct_drafts":5,"spec_num_proposed_drafts":12,"spec_verify_ct":3,"spec_accept_length":2.67}}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"completion_tokens_details":{"accepted_prediction_tokens":4,"rejected_prediction_tokens":8}}}"#,
            "[DONE]",
        ]);
        assert_eq!(
            o.spec,
            Some(shared::record::SpecCounts {
                draft_tokens: 12,
                accepted_tokens: 5,
                steps: Some(3),
            })
        );
    }

    #[test]
    fn chat_delta_and_escapes() {
        let o = feed(&[
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"x\ny"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
            "[DONE]",
        ]);
        assert!(o.ok);
        assert_eq!(o.text, "x\ny");
        assert_eq!(o.usage_source, UsageSource::FinishFrame);
        assert_eq!(o.frames, 1);
    }

    #[test]
    fn a_frame_that_is_not_utf8_is_malformed() {
        let mut st = StreamState::new(Instant::now(), false, 4, Wire::OpenAi);
        let flow = st.on_data(b"{\"choices\":[{\"text\":\"\xff\"}]}", Instant::now());
        assert!(flow.is_continue());
        let o = st.finish_done();
        assert!(!o.ok);
        assert!(
            o.error.as_deref().is_some_and(|e| e.contains("malformed SSE frame")),
            "{:?}",
            o.error
        );
        assert_eq!(o.frames, 0);
    }

    #[test]
    fn body_bytes_is_the_reference_body() {
        let prompts = [
            "",
            "plain words",
            "quotes \" and \\ backslashes, tabs\t, newlines\n\r, control \u{1} \u{1f}, unicode é 漢字 🦀, </script>",
        ];
        for endpoint in [
            Endpoint::Completions,
            Endpoint::Chat,
            Endpoint::Messages,
            Endpoint::Responses,
        ] {
            for dialect in [
                Dialect::Vllm,
                Dialect::Sglang,
                Dialect::Tabbyapi,
                Dialect::Llamacpp,
                Dialect::Openai,
            ] {
                for (model, temperature) in [("m", 0.6), ("org/\"odd\" model", 0.0), ("x", 1e-7)] {
                    let http = http_client(&[]).unwrap_or_else(|e| panic!("{e}"));
                    let c = Client::new(
                        http,
                        ClientConfig {
                            model: model.into(),
                            api_key: Some("sk-1".into()),
                            endpoint,
                            dialect,
                            temperature,
                            ..test_config("http://127.0.0.1:9/v1/", HttpClient::Reqwest)
                        },
                    );
                    for p in prompts {
                        for n in [1, 700, u32::MAX] {
                            let bytes = c.body_bytes(p, n);
                            let parsed: Value = serde_json::from_slice(&bytes)
                                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
                            assert_eq!(parsed, c.body(p, n), "{endpoint:?} {dialect:?} {model:?} {p:?} {n}");
                        }
                    }
                    let req = c.request("p".into(), 3, None).unwrap_or_else(|e| panic!("{e}"));
                    assert!(req.headers().get(SESSION_HEADER).is_none());
                    let s = hyper::header::HeaderValue::from_static("4-1");
                    let req_s = c.request("p".into(), 3, Some(&s)).unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(req_s.headers()[SESSION_HEADER], "4-1");
                    assert_eq!(
                        req.url().as_str(),
                        match endpoint {
                            Endpoint::Completions => "http://127.0.0.1:9/v1/completions",
                            Endpoint::Chat => "http://127.0.0.1:9/v1/chat/completions",
                            Endpoint::Messages => "http://127.0.0.1:9/v1/messages",
                            Endpoint::Responses => "http://127.0.0.1:9/v1/responses",
                        }
                    );
                    assert_eq!(req.headers()["content-type"], "application/json");
                    assert_eq!(req.headers()["authorization"], "Bearer sk-1");
                    assert!(req.headers()["authorization"].is_sensitive());
                    if endpoint == Endpoint::Messages {
                        assert_eq!(req.headers()["anthropic-version"], ANTHROPIC_VERSION);
                        assert_eq!(req.headers()["x-api-key"], "sk-1");
                        assert!(req.headers()["x-api-key"].is_sensitive());
                    } else {
                        assert!(req.headers().get("x-api-key").is_none());
                    }
                }
            }
        }
        // A key that cannot be a header value fails the request with a message, not a panic.
        let c = Client::new(
            http_client(&[]).unwrap_or_else(|e| panic!("{e}")),
            ClientConfig {
                api_key: Some("bad\nkey".into()),
                ..test_config("http://127.0.0.1:9/v1", HttpClient::Reqwest)
            },
        );
        assert!(c.request("p".into(), 1, None).is_err_and(|e| e.contains("API key")));
    }

    /// A session's conversation: completions sends its flat text (the seed's bytes), chat and Messages their
    /// message lists, each with the dialect's length fields and the same tail.
    #[test]
    fn conversation_bodies_per_endpoint() {
        use crate::replay::conversation::{Conversation, ToolResults};
        let mut convo = Conversation::new("base".into(), "\n\nTask: t.\n");
        convo.push_turn(" r", "out");
        let http = http_client(&[]).unwrap_or_else(|e| panic!("{e}"));
        for endpoint in [
            Endpoint::Completions,
            Endpoint::Chat,
            Endpoint::Messages,
            Endpoint::Responses,
        ] {
            for tr in [ToolResults::Tool, ToolResults::User] {
                let c = Client::new(
                    http.clone(),
                    ClientConfig {
                        endpoint,
                        ..test_config("http://127.0.0.1:9/v1", HttpClient::Reqwest)
                    },
                );
                let bytes = c.body_bytes(Prompt::Conversation(&convo, tr), 7);
                let v: Value = serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
                let length = if endpoint == Endpoint::Responses {
                    "max_output_tokens"
                } else {
                    "max_tokens"
                };
                assert_eq!((v[length].as_u64(), v["min_tokens"].as_u64()), (Some(7), Some(7)));
                assert_eq!(v["stream"], true);
                match endpoint {
                    Endpoint::Completions => assert_eq!(v["prompt"], convo.flat()),
                    Endpoint::Chat => {
                        let mut m = Vec::new();
                        convo.write_chat_messages(&mut m, tr);
                        let m: Value = serde_json::from_slice(&m).unwrap_or_else(|e| panic!("{e}"));
                        assert_eq!(v["messages"], m);
                        assert_eq!(v["stream_options"]["include_usage"], true);
                    }
                    Endpoint::Messages => {
                        assert_eq!(v["system"], "base");
                        assert_eq!(v["messages"][0]["content"], "Task: t.");
                        assert_eq!(v.get("tools").is_some(), tr == ToolResults::Tool);
                        assert!(v.get("stream_options").is_none());
                    }
                    Endpoint::Responses => {
                        let mut m = b"{\"x\":0".to_vec();
                        convo.write_responses_input(&mut m, tr);
                        m.push(b'}');
                        let m: Value = serde_json::from_slice(&m).unwrap_or_else(|e| panic!("{e}"));
                        assert_eq!(v["input"], m["input"]);
                        assert!(v.get("max_tokens").is_none() && v.get("stream_options").is_none());
                    }
                }
            }
        }
    }

    /// The API key's header is made here and handed to the hyper pool ([`H1Pool::new`] takes headers): a key that
    /// cannot be a header value fails every hyper request with that reason too.
    #[tokio::test]
    async fn a_bad_api_key_fails_hyper_requests_by_name() {
        let c = Client::new(
            http_client(&[]).unwrap_or_else(|e| panic!("{e}")),
            ClientConfig {
                api_key: Some("bad\nkey".into()),
                ..test_config("http://127.0.0.1:9/v1", HttpClient::Hyper)
            },
        );
        assert_eq!(c.connections_opened(), None);
        let o = c
            .complete("p", 1, false, &LiveCounters::default(), &CancellationToken::new())
            .await;
        assert!(
            !o.ok && o.error.as_deref().is_some_and(|e| e.contains("API key")),
            "{:?}",
            o.error
        );
    }

    #[test]
    fn auto_picks_hyper_for_http_and_https() {
        assert_eq!(HttpClient::Auto.resolve(), HttpClient::Hyper);
        assert_eq!(HttpClient::Reqwest.resolve(), HttpClient::Reqwest);
        assert_eq!(HttpClient::Hyper.resolve(), HttpClient::Hyper);
        let ca = crate::replay::tls::test_ca_certs();
        let cfg = |url: &str, http_client| ClientConfig {
            ca_certs: ca.clone(),
            ..test_config(url, http_client)
        };
        let http = http_client(&[]).unwrap_or_else(|e| panic!("{e}"));
        for url in [
            "http://127.0.0.1:9/v1",
            "https://127.0.0.1:9/v1",
            "HTTPS://localhost/v1",
        ] {
            let c = Client::new(http.clone(), cfg(url, HttpClient::Auto));
            assert_eq!(
                (c.http_client(), c.connections_opened()),
                (HttpClient::Hyper, Some(0)),
                "{url}"
            );
        }
        let c = Client::new(http.clone(), cfg("https://127.0.0.1:9/v1", HttpClient::Reqwest));
        assert_eq!((c.http_client(), c.connections_opened()), (HttpClient::Reqwest, None));
        // A scheme neither client speaks: every request fails with the reason.
        let c = Client::new(http, cfg("ftp://127.0.0.1:9/v1", HttpClient::Hyper));
        assert_eq!(c.http_client(), HttpClient::Hyper);
        assert_eq!(c.connections_opened(), None);
    }

    #[test]
    fn kv_transfer_header_is_read_when_it_is_a_time() {
        let with = |v: &str| {
            let mut h = hyper::HeaderMap::new();
            h.insert(
                KV_TRANSFER_HEADER,
                hyper::header::HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}")),
            );
            kv_transfer_of(&h)
        };
        assert_eq!(with("85.536"), Some(85.536));
        assert_eq!(with(" 0 "), Some(0.0));
        for bad in ["-1", "NaN", "inf", "soon", ""] {
            assert_eq!(with(bad), None, "{bad:?}");
        }
        assert_eq!(kv_transfer_of(&hyper::HeaderMap::new()), None);
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        use hyper::StatusCode;
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let with = |v: &str| {
            let mut h = hyper::HeaderMap::new();
            h.insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}")),
            );
            h
        };
        let wait = |status, v: &str| retry_after(status, &with(v), now);
        let busy = StatusCode::SERVICE_UNAVAILABLE;
        assert_eq!(wait(busy, "0"), Some(Duration::ZERO));
        assert_eq!(wait(busy, " 7 "), Some(Duration::from_secs(7)));
        assert_eq!(
            wait(StatusCode::TOO_MANY_REQUESTS, "120"),
            Some(Duration::from_secs(120))
        );
        // More digits than a u64 holds: a wait longer than any timeout, not an error.
        assert_eq!(
            wait(busy, "99999999999999999999999"),
            Some(Duration::from_secs(u64::MAX))
        );
        // HTTP-date: 90 s after `now`; a date already past is no wait.
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(wait(busy, &later), Some(Duration::from_secs(90)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(wait(busy, &earlier), Some(Duration::ZERO));
        // Neither form, a negative or fractional number, or another status: no retry.
        for bad in ["", "-1", "1.5", "soon", "Tue, 32 Foo 2026 99:00:00 GMT"] {
            assert_eq!(wait(busy, bad), None, "{bad:?}");
        }
        assert_eq!(wait(StatusCode::INTERNAL_SERVER_ERROR, "1"), None);
        assert_eq!(wait(StatusCode::BAD_GATEWAY, "1"), None);
        assert_eq!(retry_after(busy, &hyper::HeaderMap::new(), now), None);
    }
}
