//! Canned SSE streams, one per failure mode, served by a tiny axum server on 127.0.0.1:0 and read by the replay
//! client. The streams live in `tests/data/*.sse` and are cut into 7-byte chunks so every frame crosses chunk
//! boundaries.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use loadshape::replay::client::{self, Client, ClientConfig, Endpoint, LiveCounters, Outcome};
use loadshape::replay::dialect::Dialect;
use shared::record::UsageSource;
use tokio_util::sync::CancellationToken;

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
        .route("/v1/chat/completions", post(canned));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

fn client(base: &str, case: &str, endpoint: Endpoint, dialect: Dialect) -> Client {
    Client::new(
        client::http_client().unwrap_or_else(|e| panic!("{e}")),
        ClientConfig {
            base_url: base.to_string(),
            model: case.to_string(),
            api_key: Some("k".into()),
            endpoint,
            dialect,
            temperature: 0.0,
            timeout: Duration::from_millis(1500),
            stall_timeout: Some(Duration::from_millis(300)),
        },
    )
}

async fn run(case: &str) -> Outcome {
    run_with(case, Endpoint::Completions).await
}

async fn run_with(case: &str, endpoint: Endpoint) -> Outcome {
    let base = server().await;
    let c = client(&base, case, endpoint, Dialect::Vllm);
    c.complete("prompt", 3, true, &LiveCounters::default(), &CancellationToken::new())
        .await
}

#[tokio::test]
async fn usage_in_a_final_frame() {
    let o = run("ok_final_usage").await;
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

#[tokio::test]
async fn malformed_json_fails_the_request_but_keeps_counts() {
    let o = run("malformed_json").await;
    assert!(!o.ok);
    let err = o.error.unwrap_or_default();
    assert!(err.starts_with("malformed SSE frame"), "{err}");
    assert_eq!((o.frames, o.gen_tokens), (2, 3));
}

#[tokio::test]
async fn error_frame_fails_with_the_servers_message() {
    let o = run("error_frame").await;
    assert!(!o.ok);
    assert_eq!(o.error.as_deref(), Some("error frame: CUDA out of memory"));
    assert_eq!(o.frames, 1);
}

#[tokio::test]
async fn missing_usage_counts_frames_and_says_so() {
    let o = run("missing_usage").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.gen_tokens, o.usage_source), (3, UsageSource::Missing));
    assert_eq!(o.usage.prompt_tokens, None);
}

#[tokio::test]
async fn usage_on_the_finish_frame_like_llama_cpp() {
    let o = run("usage_on_finish_frame").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(
        (o.frames, o.gen_tokens, o.usage_source),
        (2, 2, UsageSource::FinishFrame)
    );
    assert_eq!(o.usage.cached_tokens, Some(0));
}

#[tokio::test]
async fn multi_token_frames_count_tokens_from_usage() {
    let o = run("multi_token_frames").await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.frames, o.gen_tokens), (3, 8));
}

#[tokio::test]
async fn chat_deltas_with_crlf_comments_and_reasoning() {
    let o = run_with("chat_crlf", Endpoint::Chat).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.frames, o.gen_tokens), (3, 3));
    assert_eq!(o.text, "Hihmm there\n");
}

#[tokio::test]
async fn stall_between_frames_times_out() {
    let o = run("stall").await;
    assert!(!o.ok);
    assert!(
        o.error.as_deref().unwrap_or_default().starts_with("stall:"),
        "{:?}",
        o.error
    );
    assert_eq!(o.frames, 1);
    assert!(o.wall < Duration::from_millis(1200), "{:?}", o.wall);
}

#[tokio::test]
async fn connection_reset_mid_stream_fails() {
    let o = run("reset").await;
    assert!(!o.ok);
    assert!(
        o.error.as_deref().unwrap_or_default().starts_with("stream error"),
        "{:?}",
        o.error
    );
    assert_eq!(o.frames, 1);
}

#[tokio::test]
async fn eof_without_finish_or_done_fails() {
    let o = run("no_done_eof").await;
    assert!(!o.ok);
    assert!(o.error.unwrap_or_default().contains("without finish_reason"));
}

#[tokio::test]
async fn http_error_status_is_reported() {
    let o = run("http500").await;
    assert!(!o.ok);
    let err = o.error.unwrap_or_default();
    assert!(err.starts_with("HTTP 500") && err.contains("boom"), "{err}");
}

#[tokio::test]
async fn whole_request_timeout() {
    let o = run("slow_headers").await;
    assert!(!o.ok);
    assert!(o.error.unwrap_or_default().starts_with("timeout"));
}

#[tokio::test]
async fn cut_returns_promptly_with_a_cut_record() {
    let base = server().await;
    let c = client(&base, "stall", Endpoint::Completions, Dialect::Vllm);
    let cut = CancellationToken::new();
    let c2 = cut.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let o = c.complete("p", 3, false, &LiveCounters::default(), &cut).await;
    assert_eq!(o.error.as_deref(), Some(client::CUT_ERROR));
    assert_eq!(o.frames, 1);
}

#[tokio::test]
async fn request_body_per_dialect() {
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
        let c = client(&base, "echo", Endpoint::Completions, dialect);
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
