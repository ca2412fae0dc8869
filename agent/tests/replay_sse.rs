//! Canned SSE streams, one per failure mode, served by a tiny axum server on 127.0.0.1:0 and read by the replay
//! client. The streams live in `tests/data/*.sse` and are cut into 7-byte chunks so every frame crosses chunk
//! boundaries. Every case runs through both HTTP clients (`--http-client hyper` and `reqwest`): `both!` makes a
//! `hyper` and a `reqwest` test of each case function.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use loadshape::replay::client::{self, Client, ClientConfig, Endpoint, HttpClient, LiveCounters, RequestOutcome};
use loadshape::replay::dialect::Dialect;
use loadshape::replay::rxstamp::RxClock;
use shared::record::{FailureKind, UsageSource};
use tokio_util::sync::CancellationToken;

#[macro_use]
#[path = "common/both_clients.rs"]
mod both_clients;

both!(
    usage_in_a_final_frame,
    malformed_json_fails_the_request_but_keeps_counts,
    error_frame_fails_with_the_servers_message,
    missing_usage_counts_frames_and_says_so,
    usage_on_the_finish_frame_like_llama_cpp,
    multi_token_frames_count_tokens_from_usage,
    chat_deltas_with_crlf_comments_and_reasoning,
    chat_reasoning_then_content_maps_usage,
    anthropic_thinking_then_text,
    plain_streams_carry_no_reasoning,
    responses_stream_maps_usage_text_and_reasoning,
    responses_error_event_fails_with_its_code_and_message,
    responses_failed_event_fails,
    responses_stream_without_usage_fails,
    responses_truncated_stream_fails,
    responses_request_body,
    stall_between_frames_times_out,
    connection_reset_mid_stream_fails,
    eof_without_finish_or_done_fails,
    http_error_status_is_reported,
    whole_request_timeout,
    cut_returns_promptly_with_a_cut_record,
    request_body_per_dialect,
    anthropic_stream_maps_usage_and_text,
    anthropic_error_event_fails_with_its_type_and_message,
    anthropic_stream_without_usage_fails,
    anthropic_stream_without_input_usage_completes,
    anthropic_stream_without_message_stop_fails,
    anthropic_request_body_and_headers,
);

fn data(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}.sse", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn chunked(bytes: Vec<u8>) -> Vec<Result<Bytes, std::io::Error>> {
    bytes.chunks(7).map(|c| Ok(Bytes::copy_from_slice(c))).collect()
}

fn sse(items: Vec<Result<Bytes, std::io::Error>>) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures_util::stream::iter(items)))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The `model` field of the request names the canned case.
async fn canned(headers: axum::http::HeaderMap, body: Bytes) -> Response {
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let case = v["model"].as_str().unwrap_or_default().to_string();
    match case.as_str() {
        "http500" => (StatusCode::INTERNAL_SERVER_ERROR, r#"{"error":{"message":"boom"}}"#).into_response(),
        "slow_headers" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            sse(chunked(data("ok_final_usage")))
        }
        "stall" => {
            let first = Bytes::from_static(b"data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n");
            let stream = async_stream_like(first, Duration::from_secs(3));
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap_or_else(|e| panic!("{e}"))
        }
        "reset" => {
            // One frame, a pause (so the headers and the frame are on the wire), then the connection dies.
            let stream = futures_util::stream::unfold(0u8, |state| async move {
                match state {
                    0 => Some((
                        Ok(Bytes::from_static(
                            b"data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n",
                        )),
                        1,
                    )),
                    1 => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Some((Err(std::io::Error::other("connection reset by the test server")), 2))
                    }
                    _ => None,
                }
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap_or_else(|e| panic!("{e}"))
        }
        "echo" => {
            // One frame whose text is the request body, so a test can read what the client sent.
            let mut sent: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            sent["_authorization"] = auth.into();
            let text = serde_json::to_string(&sent.to_string()).unwrap_or_default();
            let frame = format!(
                "data: {{\"choices\":[{{\"index\":0,\"text\":{text},\"finish_reason\":\"length\"}}]}}\n\ndata: [DONE]\n\n"
            );
            sse(vec![Ok(Bytes::from(frame))])
        }
        "echo_messages" => {
            // The request body and its headers, as the text of one Anthropic stream.
            let mut sent: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            for h in ["authorization", "x-api-key", "anthropic-version"] {
                let v = headers.get(h).and_then(|v| v.to_str().ok()).unwrap_or_default();
                sent[format!("_{h}")] = v.into();
            }
            let text = serde_json::to_string(&sent.to_string()).unwrap_or_default();
            let events = format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":3}}}}}}\n\n\
                 event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}}\n\n\
                 event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"max_tokens\"}},\"usage\":{{\"output_tokens\":1}}}}\n\n\
                 event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
            );
            sse(vec![Ok(Bytes::from(events))])
        }
        "echo_responses" => {
            // The request body as the text of one Responses stream.
            let sent: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let text = serde_json::to_string(&sent.to_string()).unwrap_or_default();
            let events = format!(
                "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":{text}}}\n\n\
                 event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}}}\n\n"
            );
            sse(vec![Ok(Bytes::from(events))])
        }
        name => sse(chunked(data(name))),
    }
}

/// One frame now, then silence for `hold`, then the end.
fn async_stream_like(
    first: Bytes,
    hold: Duration,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(0u8, move |state| {
        let first = first.clone();
        async move {
            match state {
                0 => Some((Ok(first), 1)),
                1 => {
                    tokio::time::sleep(hold).await;
                    Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), 2))
                }
                _ => None,
            }
        }
    })
}

async fn server() -> String {
    let app = Router::new()
        .route("/v1/completions", post(canned))
        .route("/v1/chat/completions", post(canned))
        .route("/v1/messages", post(canned))
        .route("/v1/responses", post(canned));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

fn client(hc: HttpClient, base: &str, case: &str, endpoint: Endpoint, dialect: Dialect) -> Client {
    Client::new(
        client::http_client(&[]).unwrap_or_else(|e| panic!("{e}")),
        ClientConfig {
            base_url: base.to_string(),
            model: case.to_string(),
            api_key: Some("k".into()),
            endpoint,
            dialect,
            temperature: 0.0,
            timeout: Duration::from_millis(1500),
            stall_timeout: Some(Duration::from_millis(300)),
            http_client: hc,
            rx_clock: RxClock::Kernel,
            ca_certs: Vec::new(),
            max_retries: 0,
        },
    )
}

async fn run(hc: HttpClient, case: &str) -> RequestOutcome {
    run_with(hc, case, Endpoint::Completions).await
}

async fn run_with(hc: HttpClient, case: &str, endpoint: Endpoint) -> RequestOutcome {
    let base = server().await;
    let c = client(hc, &base, case, endpoint, Dialect::Vllm);
    c.complete("prompt", 3, true, &LiveCounters::default(), &CancellationToken::new())
        .await
}

async fn usage_in_a_final_frame(hc: HttpClient) {
    let o = run(hc, "ok_final_usage").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(
        (o.frames, o.gen_tokens, o.usage_source),
        (3, 3, UsageSource::FinalFrame)
    );
    assert_eq!((o.usage.prompt_tokens, o.usage.cached_tokens), (Some(10), Some(8)));
    assert_eq!(o.text, " a b c");
    assert_eq!(o.finish_reason.as_deref(), Some("length"));
    assert!(o.ttft.is_some() && o.itl.is_some());
}

async fn malformed_json_fails_the_request_but_keeps_counts(hc: HttpClient) {
    let o = run(hc, "malformed_json").await;
    assert!(!o.ok);
    let err = o.error.unwrap_or_default();
    assert!(err.starts_with("malformed SSE frame"), "{err}");
    assert_eq!(o.failure, Some(FailureKind::Protocol));
    assert_eq!((o.frames, o.gen_tokens), (2, 3));
}

async fn error_frame_fails_with_the_servers_message(hc: HttpClient) {
    let o = run(hc, "error_frame").await;
    assert!(!o.ok);
    assert_eq!(o.error.as_deref(), Some("error frame: CUDA out of memory"));
    assert_eq!(o.failure, Some(FailureKind::ErrorFrame));
    assert_eq!(o.frames, 1);
}

async fn missing_usage_counts_frames_and_says_so(hc: HttpClient) {
    let o = run(hc, "missing_usage").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.gen_tokens, o.usage_source), (3, UsageSource::Missing));
    assert_eq!(o.usage.prompt_tokens, None);
}

async fn usage_on_the_finish_frame_like_llama_cpp(hc: HttpClient) {
    let o = run(hc, "usage_on_finish_frame").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(
        (o.frames, o.gen_tokens, o.usage_source),
        (2, 2, UsageSource::FinishFrame)
    );
    assert_eq!(o.usage.cached_tokens, Some(0));
}

async fn multi_token_frames_count_tokens_from_usage(hc: HttpClient) {
    let o = run(hc, "multi_token_frames").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.frames, o.gen_tokens), (3, 8));
}

async fn chat_deltas_with_crlf_comments_and_reasoning(hc: HttpClient) {
    let o = run_with(hc, "chat_crlf", Endpoint::Chat).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.frames, o.gen_tokens), (3, 3));
    // Reasoning is a frame of the stream, kept apart from the reply's text; without usage it counts by frames.
    assert_eq!(o.text, "Hi there\n");
    assert_eq!(o.reasoning_text, "hmm");
    assert_eq!(o.reasoning_tokens, Some(1));
    // The content came first here: TTFT-content is TTFT.
    assert_eq!(o.ttft_content, o.ttft);
}

async fn chat_reasoning_then_content_maps_usage(hc: HttpClient) {
    let o = run_with(hc, "chat_reasoning", Endpoint::Chat).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.frames, o.gen_tokens), (4, 5));
    assert_eq!((o.text.as_str(), o.reasoning_text.as_str()), ("Fix it", "let me think"));
    // `usage.completion_tokens_details.reasoning_tokens` wins over the two reasoning frames.
    assert_eq!(o.reasoning_tokens, Some(3));
    assert_eq!(o.usage.reasoning_tokens, Some(3));
    let (any, content) = (o.ttft.expect("ttft"), o.ttft_content.expect("ttft_content"));
    assert!(content >= any, "{content:?} < {any:?}");
}

async fn anthropic_thinking_then_text(hc: HttpClient) {
    let o = run_with(hc, "anthropic_thinking", Endpoint::Messages).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.text.as_str(), o.reasoning_text.as_str()), (" done", "hmm ok"));
    assert_eq!((o.frames, o.gen_tokens, o.reasoning_tokens), (3, 3, Some(2)));
    assert!(o.ttft_content.expect("ttft_content") >= o.ttft.expect("ttft"));
}

async fn plain_streams_carry_no_reasoning(hc: HttpClient) {
    let o = run_with(hc, "anthropic_ok", Endpoint::Messages).await;
    assert_eq!((o.reasoning_tokens, o.ttft_content), (None, None));
    let o = run(hc, "ok_final_usage").await;
    assert!(o.ok);
    assert_eq!(
        (o.reasoning_tokens, o.ttft_content, o.reasoning_text.as_str()),
        (None, None, "")
    );
}

async fn stall_between_frames_times_out(hc: HttpClient) {
    let o = run(hc, "stall").await;
    assert!(!o.ok);
    assert!(
        o.error.as_deref().unwrap_or_default().starts_with("stall:"),
        "{:?}",
        o.error
    );
    assert_eq!(o.failure, Some(FailureKind::Stall));
    assert_eq!(o.frames, 1);
    assert!(o.wall < Duration::from_millis(1200), "{:?}", o.wall);
}

async fn connection_reset_mid_stream_fails(hc: HttpClient) {
    let o = run(hc, "reset").await;
    assert!(!o.ok);
    assert!(
        o.error.as_deref().unwrap_or_default().starts_with("stream error"),
        "{:?}",
        o.error
    );
    assert_eq!(o.failure, Some(FailureKind::Stream));
    assert_eq!(o.frames, 1);
}

async fn eof_without_finish_or_done_fails(hc: HttpClient) {
    let o = run(hc, "no_done_eof").await;
    assert!(!o.ok);
    assert!(o.error.unwrap_or_default().contains("without finish_reason"));
    assert_eq!(o.failure, Some(FailureKind::Protocol));
}

async fn http_error_status_is_reported(hc: HttpClient) {
    let o = run(hc, "http500").await;
    assert!(!o.ok);
    let err = o.error.unwrap_or_default();
    assert!(err.starts_with("HTTP 500") && err.contains("boom"), "{err}");
    assert_eq!(o.failure, Some(FailureKind::HttpStatus));
}

/// Headers slower than `--timeout`, no stall limit: the whole-request timeout ends it. (With a stall limit shorter
/// than the wait, the stall ends it first: `replay_client_http`'s `no_response_headers_fail_at_the_stall_timeout`.)
async fn whole_request_timeout(hc: HttpClient) {
    let base = server().await;
    let mut c = client(hc, &base, "slow_headers", Endpoint::Completions, Dialect::Vllm)
        .config()
        .clone();
    c.stall_timeout = None;
    let c = Client::new(client::http_client(&[]).unwrap_or_else(|e| panic!("{e}")), c);
    let o = c
        .complete("prompt", 3, true, &LiveCounters::default(), &CancellationToken::new())
        .await;
    assert!(!o.ok);
    assert_eq!(o.failure, Some(FailureKind::Timeout));
    let err = o.error.unwrap_or_default();
    assert!(err.starts_with("timeout: no response headers"), "{err}");
}

async fn cut_returns_promptly_with_a_cut_record(hc: HttpClient) {
    let base = server().await;
    let c = client(hc, &base, "stall", Endpoint::Completions, Dialect::Vllm);
    let cut = CancellationToken::new();
    let c2 = cut.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let o = c.complete("p", 3, false, &LiveCounters::default(), &cut).await;
    assert_eq!(o.error.as_deref(), Some(client::CUT_ERROR));
    assert_eq!(o.failure, Some(FailureKind::Cut));
    assert_eq!(o.frames, 1);
}

async fn request_body_per_dialect(hc: HttpClient) {
    let base = server().await;
    for (dialect, want, absent) in [
        (Dialect::Vllm, vec!["min_tokens", "ignore_eos"], vec!["n_predict"]),
        (Dialect::Llamacpp, vec!["n_predict", "ignore_eos"], vec!["min_tokens"]),
        (
            Dialect::Tabbyapi,
            vec!["min_tokens", "ban_eos_token"],
            vec!["ignore_eos"],
        ),
        (Dialect::Openai, vec![], vec!["min_tokens", "ignore_eos"]),
    ] {
        let c = client(hc, &base, "echo", Endpoint::Completions, dialect);
        let o = c
            .complete("hello", 5, true, &LiveCounters::default(), &CancellationToken::new())
            .await;
        assert!(o.ok, "{dialect}: {:?}", o.error);
        let sent: serde_json::Value = serde_json::from_str(&o.text).unwrap_or_else(|e| panic!("{e}: {}", o.text));
        assert_eq!(
            sent["_authorization"], "Bearer k",
            "--api-key is sent as a bearer token"
        );
        assert_eq!(sent["max_tokens"], 5, "{dialect}");
        assert_eq!(sent["stream"], true);
        assert_eq!(sent["stream_options"]["include_usage"], true);
        assert_eq!(sent["prompt"], "hello");
        for k in want {
            assert!(sent.get(k).is_some(), "{dialect} should send {k}: {sent}");
        }
        for k in absent {
            assert!(sent.get(k).is_none(), "{dialect} should not send {k}: {sent}");
        }
    }
}

// ---- the Anthropic Messages API (`--endpoint messages`) ----

async fn anthropic_stream_maps_usage_and_text(hc: HttpClient) {
    let o = run_with(hc, "anthropic_ok", Endpoint::Messages).await;
    assert!(o.ok, "{:?}", o.error);
    // prompt = input (uncached) + cache_read + cache_creation; cached = cache_read; output from message_delta.
    assert_eq!(
        (o.usage.prompt_tokens, o.usage.cached_tokens, o.usage.completion_tokens),
        (Some(12 + 90 + 5), Some(90), Some(3))
    );
    assert_eq!(
        (o.frames, o.gen_tokens, o.usage_source),
        (3, 3, UsageSource::FinalFrame)
    );
    assert_eq!(o.text, " a b\n c");
    assert_eq!(o.finish_reason.as_deref(), Some("max_tokens"));
    // TTFT at the first text delta (the message_start, block start and ping before it are not content).
    assert!(o.ttft.is_some() && o.itl.is_some());
}

async fn anthropic_error_event_fails_with_its_type_and_message(hc: HttpClient) {
    let o = run_with(hc, "anthropic_error_event", Endpoint::Messages).await;
    assert!(!o.ok);
    assert_eq!(o.error.as_deref(), Some("error event: overloaded_error: Overloaded"));
    assert_eq!(o.failure, Some(FailureKind::ErrorFrame));
    assert_eq!(o.frames, 1);
}

async fn anthropic_stream_without_usage_fails(hc: HttpClient) {
    let o = run_with(hc, "anthropic_missing_usage", Endpoint::Messages).await;
    assert!(!o.ok);
    assert_eq!(
        o.error.as_deref(),
        Some("missing usage: no message_delta carried usage.output_tokens")
    );
    assert_eq!(o.failure, Some(FailureKind::Protocol));
    // What arrived is kept: the frames, and the tokens counted from them.
    assert_eq!((o.frames, o.gen_tokens, o.usage_source), (2, 2, UsageSource::Missing));
}

/// A stream whose server did not report its prompt tokens is a completed request with `prompt_tokens` unknown, not
/// a failure (which would end the session): `message_start` without `usage.input_tokens`, and llama.cpp's stream
/// when its first token is part of a UTF-8 character (captured from the llama-server the real-server suite builds,
/// llama-cpp-python 0.3.36's llama.cpp: no `message_start` at all; the first delta carries two tokens).
async fn anthropic_stream_without_input_usage_completes(hc: HttpClient) {
    let o = run_with(hc, "anthropic_no_start_usage", Endpoint::Messages).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(
        (o.usage.prompt_tokens, o.usage.cached_tokens, o.usage.completion_tokens),
        (None, None, Some(1))
    );
    let o = run_with(hc, "anthropic_llamacpp_no_message_start", Endpoint::Messages).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(
        (o.usage.prompt_tokens, o.usage.completion_tokens, o.frames, o.gen_tokens),
        (None, Some(4), 3, 4)
    );
    assert_eq!(o.usage_source, UsageSource::FinalFrame);
    assert_eq!(o.finish_reason.as_deref(), Some("max_tokens"));
    assert_eq!(o.text, "ۉorpor PDF");
    assert!(o.ttft.is_some());
}

async fn anthropic_stream_without_message_stop_fails(hc: HttpClient) {
    let o = run_with(hc, "anthropic_truncated", Endpoint::Messages).await;
    assert!(!o.ok);
    assert_eq!(
        o.error.as_deref(),
        Some("stream ended without message_stop (truncated Anthropic stream)")
    );
    assert_eq!(o.failure, Some(FailureKind::Protocol));
    assert_eq!(o.frames, 2);
    // An OpenAI stream is not an Anthropic one: read as Messages it has no message_stop.
    let o = run_with(hc, "ok_final_usage", Endpoint::Messages).await;
    assert!(!o.ok && o.failure == Some(FailureKind::Protocol), "{:?}", o.error);
}

async fn anthropic_request_body_and_headers(hc: HttpClient) {
    let base = server().await;
    for (dialect, want) in [(Dialect::Vllm, Some("min_tokens")), (Dialect::Openai, None)] {
        let c = client(hc, &base, "echo_messages", Endpoint::Messages, dialect);
        let o = c
            .complete("hello", 5, true, &LiveCounters::default(), &CancellationToken::new())
            .await;
        assert!(o.ok, "{:?}", o.error);
        let sent: serde_json::Value = serde_json::from_str(&o.text).unwrap_or_else(|e| panic!("{e}: {}", o.text));
        assert_eq!(sent["_anthropic-version"], client::ANTHROPIC_VERSION);
        assert_eq!(sent["_x-api-key"], "k", "--api-key as Anthropic's header");
        assert_eq!(
            sent["_authorization"], "Bearer k",
            "and as a bearer token (vLLM, llama.cpp)"
        );
        assert_eq!(sent["max_tokens"], 5);
        assert_eq!(sent["stream"], true);
        assert!(sent.get("stream_options").is_none(), "{sent}");
        assert_eq!(
            sent["messages"],
            serde_json::json!([{"role": "user", "content": "hello"}])
        );
        if let Some(k) = want {
            assert!(sent.get(k).is_some(), "{dialect}: {sent}");
        }
    }
}

// ---- a raw HTTP/1.1 server that misbehaves at the connection level (hyper path) ----

/// How the raw server treats each connection.
#[derive(Clone, Copy, PartialEq)]
enum ConnMode {
    /// Answer one request, then close the connection without saying so (no `Connection: close`).
    CloseSilently,
    /// Answer one request with `Connection: close`, then close.
    CloseWithHeader,
    /// Answer the first request; read the second and close without answering (the keep-alive race: the server
    /// closed an idle connection just as the client reused it).
    DropSecond,
    /// Send the headers and one frame, then reset the connection (RST).
    ResetMidStream,
    /// Answer every request on the connection (keep-alive, as vLLM's and most servers do).
    KeepAlive,
}

const ONE_TOKEN: &[u8] = b"data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";

/// Whether `buf` holds a whole request: its head and its `content-length` body.
fn whole_request(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    buf.len() >= end + 4 + len
}

/// A streamed response's head, with `connection: close` when `close` says so.
fn sse_head(close: bool) -> Vec<u8> {
    let close = if close { "connection: close\r\n" } else { "" };
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n{close}\r\n")
        .into_bytes()
}

/// `data` as one chunk of a chunked body, appended to `out`.
fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// A response of one token, chunked, with `connection: close` in its head when `close` says so.
fn one_token_response(close: bool) -> Vec<u8> {
    let mut out = sse_head(close);
    push_chunk(&mut out, ONE_TOKEN);
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Read one request (head and `content-length` body); false at EOF.
async fn read_request(sock: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if whole_request(&buf) {
            return true;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A server on 127.0.0.1:0; returns the base URL and the count of connections it accepted.
async fn raw_server(mode: ConnMode) -> (String, Arc<AtomicUsize>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            count.fetch_add(1, SeqCst);
            tokio::spawn(async move {
                if !read_request(&mut sock).await {
                    return;
                }
                if mode == ConnMode::ResetMidStream {
                    let frame = b"data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n";
                    let mut out = sse_head(false);
                    push_chunk(&mut out, frame);
                    let _ = sock.write_all(&out).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let _ = sock.set_zero_linger();
                    return; // dropped with linger 0: RST
                }
                let out = one_token_response(mode == ConnMode::CloseWithHeader);
                let _ = sock.write_all(&out).await;
                if mode == ConnMode::KeepAlive {
                    while read_request(&mut sock).await {
                        if sock.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                }
                if mode == ConnMode::DropSecond {
                    // Keep the connection; read the next request and close without an answer.
                    let _ = read_request(&mut sock).await;
                }
            });
        }
    });
    (format!("http://{addr}/v1"), accepted)
}

/// A server that answers one request per connection with keep-alive in its headers, then closes the connection
/// 100 µs later without reading more: llama.cpp's `llama-server` after a streamed response (it closes 6–23 µs after
/// the last chunk). On an OS thread of its own with blocking I/O, so that no timer of the client's runtime stands
/// between a response and its close. Returns the base URL, the count of connections it accepted, and the count it
/// closed late: [`loadshape::replay::h1::CONFIRM_AFTER`] or more after their response, when the machine held the
/// thread that long.
fn closing_server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (accepted, late) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (count, late_closes) = (accepted.clone(), late.clone());
    // Blocked in accept once the test has ended; it ends with the test binary.
    std::thread::spawn(move || {
        let response = one_token_response(false);
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { return };
            count.fetch_add(1, SeqCst);
            let _ = sock.set_nodelay(true);
            let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
            while !whole_request(&buf) {
                match sock.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            if !whole_request(&buf) || sock.write_all(&response).is_err() {
                continue;
            }
            let written = std::time::Instant::now();
            std::thread::sleep(Duration::from_micros(100));
            if written.elapsed() >= loadshape::replay::h1::CONFIRM_AFTER {
                late_closes.fetch_add(1, SeqCst);
            }
        }
    });
    (format!("http://{addr}/v1"), accepted, late)
}

/// One one-token request on `c`.
async fn one(c: &Client) -> RequestOutcome {
    c.complete("p", 1, false, &LiveCounters::default(), &CancellationToken::new())
        .await
}

/// `n` requests one after another on one client; their outcomes.
async fn sequential(hc: HttpClient, base: &str, n: usize) -> (Client, Vec<RequestOutcome>) {
    let c = client(hc, base, "m", Endpoint::Completions, Dialect::Vllm);
    let mut outs = Vec::new();
    for _ in 0..n {
        outs.push(one(&c).await);
    }
    (c, outs)
}

#[tokio::test]
async fn hyper_reconnects_when_the_server_closes_after_each_response() {
    for mode in [ConnMode::CloseSilently, ConnMode::CloseWithHeader] {
        let (base, accepted) = raw_server(mode).await;
        let (c, outs) = sequential(HttpClient::Hyper, &base, 6).await;
        for o in &outs {
            assert!(o.ok, "{:?}", o.error);
            assert_eq!(o.gen_tokens, 1);
        }
        // One connection per request, none failed.
        assert_eq!(c.connections_opened(), Some(6));
        assert_eq!(accepted.load(SeqCst), 6);
    }
}

/// Each connection answers one request, then reads the next one and closes without an answer. That second request
/// fails: its bytes were written, so the server may have started it, and sending it again would double the load
/// (issue #16, item 10; the hyper path used to resend it on a new connection). No connection is opened for a
/// resend. The hyper path then stops reusing connections to this server, so the later requests succeed, each on
/// its own connection; reqwest's pool keeps reusing them, and its requests alternate ok/failed.
async fn a_request_the_server_read_and_dropped_is_not_resent(hc: HttpClient) {
    let (base, accepted) = raw_server(ConnMode::DropSecond).await;
    // A pause before each request: the hyper path reuses the first connection only once it sat idle a moment.
    let c = client(hc, &base, "m", Endpoint::Completions, Dialect::Vllm);
    let mut outs = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        outs.push(one(&c).await);
    }
    let ok: Vec<bool> = outs.iter().map(|o| o.ok).collect();
    for o in outs.iter().filter(|o| !o.ok) {
        let e = o.error.as_deref().unwrap_or_default();
        assert!(e.starts_with("request failed:"), "{e}");
    }
    let accepted = accepted.load(SeqCst);
    if hc == HttpClient::Hyper {
        assert_eq!(ok, [true, false, true, true], "{outs:?}");
        assert_eq!((accepted, c.connections_opened()), (3, Some(3)));
    } else {
        assert_eq!(ok, [true, false, true, false], "{outs:?}");
        assert_eq!(accepted, 2);
    }
}

/// A server that closes each connection shortly after its response, with keep-alive in its headers (llama.cpp's
/// `llama-server` after a streamed response): back to back, a request put on the previous one's connection would
/// go out before the close arrives and fail (a quarter to a third of a closed-loop probe against llama-server
/// did). Until the server has kept a connection, the hyper path reuses one only after it sat idle a while; then it
/// finds it closed and stops reusing. No request fails; each has its own connection.
///
/// That holds while the server's close comes within [`loadshape::replay::h1::CONFIRM_AFTER`]: a round in which
/// the machine held the server's thread longer proves nothing, and runs again.
#[tokio::test]
async fn hyper_never_puts_a_request_on_a_connection_the_server_is_closing() {
    const ROUNDS: usize = 5;
    for round in 1..=ROUNDS {
        let (base, accepted, late) = closing_server();
        let c = client(HttpClient::Hyper, &base, "m", Endpoint::Completions, Dialect::Vllm);
        let mut outs = Vec::new();
        for i in 0..12 {
            outs.push(one(&c).await);
            if i % 4 == 3 {
                // Now and then a pause, so that idle connections age past the check.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let late = late.load(SeqCst);
        if late > 0 {
            eprintln!("round {round}: {late} of the server's closes came late; again");
            continue;
        }
        for o in &outs {
            assert!(o.ok, "{:?}", o.error);
        }
        assert_eq!(accepted.load(SeqCst), 12);
        assert_eq!(c.connections_opened(), Some(12));
        return;
    }
    panic!("in each of {ROUNDS} rounds the machine held the test server's thread past CONFIRM_AFTER");
}

/// A server that keeps its connections: after the first one has been reused (which waits until it sat idle a
/// moment), back-to-back requests share one connection again.
#[tokio::test]
async fn hyper_reuses_connections_the_server_keeps() {
    // Requests 1 and 2 on connections of their own (the first one was too fresh to trust), the rest on one.
    assert_eq!(to_a_keep_alive_server(Dialect::Vllm, 20).await, (2, Some(2)));
}

/// `n` requests one after another on the hyper path to a server that keeps its connections, with a pause past
/// [`loadshape::replay::h1::CONFIRM_AFTER`] after the second; each must succeed. Returns the connections the
/// server accepted and those the client says it opened.
async fn to_a_keep_alive_server(dialect: Dialect, n: usize) -> (usize, Option<u64>) {
    let (base, accepted) = raw_server(ConnMode::KeepAlive).await;
    let c = client(HttpClient::Hyper, &base, "m", Endpoint::Completions, dialect);
    for i in 0..n {
        let o = one(&c).await;
        assert!(o.ok, "{:?}", o.error);
        if i == 1 {
            tokio::time::sleep(loadshape::replay::h1::CONFIRM_AFTER + Duration::from_millis(5)).await;
        }
    }
    (accepted.load(SeqCst), c.connections_opened())
}

/// llama.cpp's dialect: a connection per request from the start (its server closes each one after a streamed
/// response), even against a server that would keep them, and even after idle pauses.
#[tokio::test]
async fn hyper_opens_a_connection_per_request_to_llama_cpp() {
    assert_eq!(to_a_keep_alive_server(Dialect::Llamacpp, 6).await, (6, Some(6)));
}

both!(a_request_the_server_read_and_dropped_is_not_resent);

async fn connection_reset_by_the_peer_is_a_stream_error(hc: HttpClient) {
    let (base, _) = raw_server(ConnMode::ResetMidStream).await;
    let (_, outs) = sequential(hc, &base, 2).await;
    for o in outs {
        assert!(!o.ok);
        let e = o.error.unwrap_or_default();
        assert!(e.starts_with("stream error"), "{e}");
        assert_eq!(o.frames, 1);
    }
}

both!(connection_reset_by_the_peer_is_a_stream_error);

async fn responses_stream_maps_usage_text_and_reasoning(hc: HttpClient) {
    let o = run_with(hc, "responses_ok", Endpoint::Responses).await;
    assert!(o.ok, "{:?}", o.error);
    // usage: input_tokens (with the cached part in input_tokens_details), output_tokens, reasoning_tokens.
    assert_eq!(
        (o.usage.prompt_tokens, o.usage.cached_tokens, o.usage.completion_tokens),
        (Some(40), Some(32), Some(3))
    );
    assert_eq!(
        (o.frames, o.gen_tokens, o.usage_source),
        (3, 3, UsageSource::FinalFrame)
    );
    assert_eq!((o.text.as_str(), o.reasoning_text.as_str()), (" a b\n", "think"));
    assert_eq!(o.reasoning_tokens, Some(1));
    // `response.incomplete` for `max_output_tokens`: the forced length was reached.
    assert_eq!(o.finish_reason.as_deref(), Some("length"));
    assert!(o.ttft_content.expect("ttft_content") >= o.ttft.expect("ttft"));
}

async fn responses_error_event_fails_with_its_code_and_message(hc: HttpClient) {
    let o = run_with(hc, "responses_error_event", Endpoint::Responses).await;
    assert!(!o.ok);
    assert_eq!(o.failure, Some(FailureKind::ErrorFrame));
    let e = o.error.unwrap_or_default();
    assert!(
        e.contains("server_error") && e.contains("the engine ran out of KV cache"),
        "{e}"
    );
    assert_eq!(o.frames, 1);
}

async fn responses_failed_event_fails(hc: HttpClient) {
    let o = run_with(hc, "responses_failed", Endpoint::Responses).await;
    assert!(!o.ok);
    assert_eq!(o.failure, Some(FailureKind::ErrorFrame));
    let e = o.error.unwrap_or_default();
    assert!(e.starts_with("response.failed: rate_limit_exceeded: slow down"), "{e}");
}

async fn responses_stream_without_usage_fails(hc: HttpClient) {
    let o = run_with(hc, "responses_no_usage", Endpoint::Responses).await;
    assert!(!o.ok);
    assert_eq!(o.failure, Some(FailureKind::Protocol));
    assert!(
        o.error.unwrap_or_default().starts_with("missing usage"),
        "no usage must fail"
    );
    assert_eq!(o.frames, 1);
}

async fn responses_truncated_stream_fails(hc: HttpClient) {
    let o = run_with(hc, "responses_truncated", Endpoint::Responses).await;
    assert!(!o.ok);
    assert_eq!(o.failure, Some(FailureKind::Protocol));
    let e = o.error.unwrap_or_default();
    assert!(e.contains("truncated Responses stream"), "{e}");
    assert_eq!(o.frames, 2);
}

/// The Responses body: `input`, `max_output_tokens` and the dialect's forcing fields, `stream`, no
/// `stream_options`, no `max_tokens`.
async fn responses_request_body(hc: HttpClient) {
    let base = server().await;
    let c = client(hc, &base, "echo_responses", Endpoint::Responses, Dialect::Vllm);
    let o = c
        .complete("hello", 9, true, &LiveCounters::default(), &CancellationToken::new())
        .await;
    assert!(o.ok, "{:?}", o.error);
    let sent: serde_json::Value = serde_json::from_str(&o.text).unwrap_or_else(|e| panic!("{e}: {}", o.text));
    assert_eq!(sent["input"], "hello");
    assert_eq!(sent["model"], "echo_responses");
    assert_eq!(
        (sent["max_output_tokens"].as_u64(), sent["min_tokens"].as_u64()),
        (Some(9), Some(9))
    );
    assert_eq!(sent["ignore_eos"], true);
    assert_eq!(sent["stream"], true);
    assert!(
        sent.get("max_tokens").is_none() && sent.get("stream_options").is_none(),
        "{sent}"
    );
}
