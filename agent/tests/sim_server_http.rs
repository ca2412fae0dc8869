//! `loadshape sim-server`'s HTTP surface through `router()` with `tower::ServiceExt::oneshot`: routes, streaming
//! frames and usage, MTP-like packing, length control, the prefix cache, metrics, and each injected fault.

use std::time::{Duration, Instant};

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use loadshape::sim_server::{Config, Faults, tokenize};
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// The sim-server's routes (its engine thread started).
fn router(config: Config) -> axum::Router {
    loadshape::sim_server::router(config).expect("the emulated engine's thread starts")
}

fn fast() -> Config {
    Config {
        speed: 50.0,
        ..Config::default()
    }
}

async fn call(app: &axum::Router, path: &str, body: Value) -> (StatusCode, Result<String, String>) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|e| panic!("{e}"));
    let resp = app.clone().oneshot(req).await.unwrap_or_else(|e| match e {});
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), 1 << 24).await;
    (
        status,
        bytes
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| e.to_string()),
    )
}

async fn get(app: &axum::Router, path: &str) -> (StatusCode, String) {
    let req = Request::get(path).body(Body::empty()).unwrap_or_else(|e| panic!("{e}"));
    let resp = app.clone().oneshot(req).await.unwrap_or_else(|e| match e {});
    let status = resp.status();
    let b = to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
    (status, String::from_utf8_lossy(&b).into_owned())
}

/// The JSON payloads of an SSE body, and whether it ended with [DONE].
fn frames(body: &str) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut done = false;
    for line in body.lines() {
        if let Some(d) = line.strip_prefix("data: ") {
            if d == "[DONE]" {
                done = true;
            } else {
                out.push(serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")));
            }
        }
    }
    (out, done)
}

fn stream_req(prompt: &str, max: u32) -> Value {
    json!({"model": "sim", "prompt": prompt, "max_tokens": max, "min_tokens": max, "stream": true,
           "stream_options": {"include_usage": true}})
}

#[tokio::test]
async fn routes_answer() {
    let app = router(fast());
    let (s, models) = get(&app, "/v1/models").await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&models).unwrap_or_default();
    assert_eq!(v["data"][0]["id"], "sim");
    assert_eq!(get(&app, "/health").await.0, StatusCode::OK);
    assert!(get(&app, "/version").await.1.contains("loadshape-sim"));
    let (_, metrics) = get(&app, "/metrics").await;
    for name in [
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test]
async fn stream_frames_usage_and_packing() {
    let app = router(Config {
        tokens_per_frame: 4,
        ..fast()
    });
    let prompt = "def resolve(self, name): return entry.load()";
    let (s, body) = call(&app, "/v1/completions", stream_req(prompt, 10)).await;
    assert_eq!(s, StatusCode::OK);
    let (fr, done) = frames(&body.unwrap_or_else(|e| panic!("{e}")));
    assert!(done);
    let texts: Vec<&str> = fr.iter().filter_map(|f| f["choices"][0]["text"].as_str()).collect();
    assert_eq!(texts.len(), 3, "10 tokens packed 4 per frame: {texts:?}");
    assert_eq!(tokenize::count_tokens(&texts.concat()), 10);
    assert_eq!(fr[2]["choices"][0]["finish_reason"], "length");
    let usage = &fr[3]["usage"];
    assert_eq!(usage["completion_tokens"], 10);
    assert_eq!(usage["prompt_tokens"], tokenize::count_tokens(prompt) as u64);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test]
async fn chat_stream_and_non_stream() {
    let app = router(fast());
    let req = json!({"model": "sim", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3,
                     "ignore_eos": true, "stream": true});
    let (_, body) = call(&app, "/v1/chat/completions", req).await;
    let (fr, done) = frames(&body.unwrap_or_default());
    assert!(done);
    assert_eq!(fr[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        fr.iter()
            .filter(|f| f["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty()))
            .count(),
        3
    );
    assert!(
        fr.iter().all(|f| f.get("usage").is_none_or(Value::is_null)),
        "no usage without include_usage"
    );
    let (s, body) = call(&app, "/v1/completions", json!({"prompt": "a b c", "max_tokens": 4})).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&body.unwrap_or_default()).unwrap_or_default();
    assert_eq!(v["usage"]["completion_tokens"], 4);
    assert_eq!(v["usage"]["prompt_tokens"], 3);
}

#[tokio::test]
async fn length_is_forced_only_when_asked() {
    let app = router(Config {
        natural_len: Some(5),
        ..fast()
    });
    let unforced = json!({"prompt": "x", "max_tokens": 20, "stream": false});
    let v: Value =
        serde_json::from_str(&call(&app, "/v1/completions", unforced).await.1.unwrap_or_default()).unwrap_or_default();
    assert_eq!(
        (
            v["usage"]["completion_tokens"].as_u64(),
            v["choices"][0]["finish_reason"].as_str()
        ),
        (Some(5), Some("stop"))
    );
    for forced in [
        json!({"prompt": "x", "max_tokens": 20, "ignore_eos": true}),
        json!({"prompt": "x", "max_tokens": 20, "min_tokens": 20}),
        json!({"prompt": "x", "n_predict": 20, "ignore_eos": true}),
        json!({"prompt": "x", "max_tokens": 20, "ban_eos_token": true}),
    ] {
        let v: Value = serde_json::from_str(
            &call(&app, "/v1/completions", forced.clone())
                .await
                .1
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        assert_eq!(v["usage"]["completion_tokens"], 20, "{forced}");
    }
}

#[tokio::test]
async fn resent_prompt_and_reply_hit_the_prefix_cache() {
    let app = router(fast());
    let prompt = "the loader should verify every shard before the model is placed ".repeat(20);
    let (_, body) = call(
        &app,
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": 32, "ignore_eos": true}),
    )
    .await;
    let first: Value = serde_json::from_str(&body.unwrap_or_default()).unwrap_or_default();
    let reply = first["choices"][0]["text"].as_str().unwrap_or_default().to_string();
    let next = format!("{prompt}{reply} tool output here");
    let (_, body) = call(
        &app,
        "/v1/completions",
        json!({"prompt": next, "max_tokens": 8, "ignore_eos": true}),
    )
    .await;
    let second: Value = serde_json::from_str(&body.unwrap_or_default()).unwrap_or_default();
    let pt = second["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let designed = first["usage"]["prompt_tokens"].as_u64().unwrap_or(0) + 32;
    assert!(
        cached + 16 > designed && cached <= pt,
        "prompt+reply cached: {cached} of {pt}, designed {designed}"
    );
    let (_, metrics) = get(&app, "/metrics").await;
    assert!(
        metrics.contains(&format!("vllm:prefix_cache_hits_total{{model_name=\"sim\"}} {cached}")),
        "{metrics}"
    );
}

#[tokio::test]
async fn bad_requests_are_400() {
    let app = router(fast());
    let req = Request::post("/v1/completions")
        .body(Body::from("{nope"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        app.clone().oneshot(req).await.unwrap_or_else(|e| match e {}).status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&app, "/v1/completions", json!({"prompt": "x", "max_tokens": 0}))
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&app, "/v1/completions", json!({"max_tokens": 3})).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&app, "/v1/chat/completions", json!({"prompt": "x"})).await.0,
        StatusCode::BAD_REQUEST
    );
}

/// A request beyond the profile's context (`max_model_len`: prompt + output) is refused before it starts, with
/// HTTP 400 and vLLM's message, as vLLM refuses it; one that fits is served.
#[tokio::test]
async fn a_request_beyond_the_context_is_400() {
    let mut profile = loadshape::sim_server::default_profile();
    profile.max_model_len = Some(100);
    let app = router(Config {
        engine: loadshape::sim_server::EngineChoice::Profile(Box::new(profile)),
        ..fast()
    });
    let long = "word ".repeat(120);
    let (status, body) = call(&app, "/v1/completions", stream_req(&long, 8)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
    let body = body.unwrap_or_default();
    assert!(body.contains("maximum context length is 100 tokens"), "{body}");
    let (status, _) = call(&app, "/v1/completions", stream_req("a few words", 8)).await;
    assert_eq!(status, StatusCode::OK);
    // At the default profile's context (432,000 tokens): a body far past axum's 2 MB default is read, and refused
    // for its context.
    let app = router(fast());
    let (status, body) = call(&app, "/v1/completions", stream_req(&"word ".repeat(440_000), 8)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
    assert!(
        body.unwrap_or_default()
            .contains("maximum context length is 432000 tokens"),
        "refused for its context"
    );
}

/// Sampling fields a real server checks are checked here too, each named in the 400 (before, `n` and `best_of`
/// of 1e9 and a temperature of -1 were accepted silently); ordinary values pass.
#[tokio::test]
async fn sampling_fields_are_checked_as_vllm_checks_them() {
    let app = router(fast());
    for (field, value, says) in [
        ("n", json!(1e9), "n must be 1"),
        ("n", json!(2), "n must be 1"),
        ("best_of", json!(1_000_000_000u64), "best_of must be 1"),
        (
            "temperature",
            json!(-1),
            "temperature must be a non-negative number (got -1)",
        ),
        ("temperature", json!("hot"), "temperature must be"),
    ] {
        let mut body = json!({"prompt": "x", "max_tokens": 2});
        body[field] = value;
        let (status, text) = call(&app, "/v1/completions", body).await;
        let text = text.unwrap_or_default();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {text}");
        assert!(text.contains(says), "{field}: {text}");
    }
    let body = json!({"prompt": "x", "max_tokens": 2, "n": 1, "best_of": 1, "temperature": 0.7});
    assert_eq!(call(&app, "/v1/completions", body).await.0, StatusCode::OK);
}

/// A client that never finishes its request headers loses its connection after the header read timeout (before,
/// such sockets were held as long as the client liked).
#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(loadshape::sim_server::serve(listener, fast(), async {
        let _ = rx.await;
    }));
    let mut sock = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sock.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    let limit = loadshape::sim_server::HEADER_READ_TIMEOUT + Duration::from_secs(20);
    let mut buf = [0u8; 256];
    // The server closes the socket (a read of 0 bytes, a reset, or a 408 and then the close).
    loop {
        match tokio::time::timeout(limit, sock.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(_)) => {}
            Err(_) => panic!("the connection was still open after {:?}", t0.elapsed()),
        }
    }
    assert!(t0.elapsed() >= loadshape::sim_server::HEADER_READ_TIMEOUT - Duration::from_secs(1));
    let _ = tx.send(());
}

#[tokio::test]
async fn fault_fail_after_and_error_rate() {
    let app = router(Config {
        faults: Faults {
            fail_after: Some(1),
            ..Faults::default()
        },
        ..fast()
    });
    assert_eq!(
        call(&app, "/v1/completions", stream_req("x", 2)).await.0,
        StatusCode::OK
    );
    let (s, body) = call(&app, "/v1/completions", stream_req("x", 2)).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.unwrap_or_default().contains("--fail-after"));
    let app = router(Config {
        faults: Faults {
            error_rate: 1.0,
            ..Faults::default()
        },
        ..fast()
    });
    assert_eq!(
        call(&app, "/v1/completions", stream_req("x", 2)).await.0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // A rate of 0.5 fails some and passes some, deterministically.
    let app = router(Config {
        faults: Faults {
            error_rate: 0.5,
            ..Faults::default()
        },
        ..fast()
    });
    let mut codes = Vec::new();
    for _ in 0..20 {
        codes.push(
            call(&app, "/v1/completions", json!({"prompt": "x", "max_tokens": 1}))
                .await
                .0,
        );
    }
    assert!(codes.contains(&StatusCode::OK) && codes.contains(&StatusCode::INTERNAL_SERVER_ERROR));
}

#[tokio::test]
async fn fault_stall_and_drop() {
    let app = router(Config {
        faults: Faults {
            stall_after_tokens: Some(2),
            stall_ms: 400,
            ..Faults::default()
        },
        ..fast()
    });
    let t0 = Instant::now();
    let (_, body) = call(&app, "/v1/completions", stream_req("x", 4)).await;
    assert!(t0.elapsed() >= Duration::from_millis(400));
    assert!(frames(&body.unwrap_or_default()).1, "a stalled stream still completes");
    let app = router(Config {
        faults: Faults {
            drop_after_tokens: Some(2),
            ..Faults::default()
        },
        ..fast()
    });
    let (s, body) = call(&app, "/v1/completions", stream_req("x", 6)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(body.is_err(), "the body must end in an error, not a clean [DONE]");
}

/// `/tokenize` answers llama.cpp's and vLLM's bodies with the count `usage.prompt_tokens` reports, scaled by
/// `tokens_per_piece` (vLLM's with the engine's `max_model_len`); `no_tokenize` leaves the route out (404), like a server without one.
#[tokio::test]
async fn tokenize_route_in_both_shapes() {
    let text = "def resolve(self, name): return entry.load()";
    let n = tokenize::count_tokens(text);
    let app = router(fast());
    let (s, body) = call(&app, "/tokenize", json!({"content": text})).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&body.unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["tokens"].as_array().map(Vec::len), Some(n), "{v}");
    let dense = router(Config {
        tokens_per_piece: 3,
        ..fast()
    });
    let (s, body) = call(&dense, "/tokenize", json!({"model": "sim", "prompt": text})).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&body.unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["count"], 3 * n as u64, "{v}");
    // vLLM's shape says the context the engine refuses requests beyond (the default profile's KV capacity).
    assert_eq!(v["max_model_len"], 27_000 * 16, "{v}");
    let (s, body) = call(
        &dense,
        "/v1/completions",
        json!({"model": "sim", "prompt": text, "max_tokens": 1}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_str(&body.unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["usage"]["prompt_tokens"], 3 * n as u64, "{v}");
    let (s, _) = call(&app, "/tokenize", json!({"text": text})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let none = router(Config {
        faults: Faults {
            no_tokenize: true,
            ..Faults::default()
        },
        ..fast()
    });
    let (s, _) = call(&none, "/tokenize", json!({"content": text})).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// `POST /v1/messages` with the `anthropic-version` header.
async fn call_messages(app: &axum::Router, body: Value, version: bool) -> (StatusCode, String) {
    let mut req = Request::post("/v1/messages").header("content-type", "application/json");
    if version {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let req = req.body(Body::from(body.to_string())).unwrap_or_else(|e| panic!("{e}"));
    let resp = app.clone().oneshot(req).await.unwrap_or_else(|e| match e {});
    let status = resp.status();
    let b = to_bytes(resp.into_body(), 1 << 24).await.unwrap_or_default();
    (status, String::from_utf8_lossy(&b).into_owned())
}

/// The Anthropic Messages API: its stream events in order, usage split into the uncached `input_tokens` and
/// `cache_read_input_tokens` (a resent conversation reads the cache), the non-streaming answer's shape, and the
/// header and field the API requires.
#[tokio::test]
async fn messages_stream_events_and_usage() {
    let app = router(fast());
    let convo = json!([{"role": "user", "content": "find why the loader refuses the shard ".repeat(20)}]);
    let body = |messages: &Value, stream: bool| {
        json!({"model": "sim", "system": "you are a coding agent", "messages": messages, "max_tokens": 5,
               "stream": stream, "ignore_eos": true})
    };
    let (s, text) = call_messages(&app, body(&convo, true), true).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(
        events,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let (data, done) = frames(&text);
    assert!(!done, "no [DONE] in an Anthropic stream");
    let start = &data[0]["message"]["usage"];
    let prompt = start["input_tokens"].as_u64().unwrap_or(0);
    assert!(prompt > 100, "{start}");
    assert_eq!(start["cache_read_input_tokens"], 0);
    let reply: String = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .map(|d| d["delta"]["text"].as_str().unwrap_or_default().to_string())
        .collect();
    let delta = data
        .iter()
        .find(|d| d["type"] == "message_delta")
        .cloned()
        .unwrap_or_default();
    assert_eq!(delta["usage"]["output_tokens"], 5);
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    // The conversation resent with the reply and a user turn: the cache serves the previous prompt and reply.
    let next = json!([convo[0], {"role": "assistant", "content": reply}, {"role": "user", "content": "go on"}]);
    let (s, text) = call_messages(&app, body(&next, false), true).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(
        (v["type"].as_str(), v["content"][0]["type"].as_str()),
        (Some("message"), Some("text"))
    );
    let u = &v["usage"];
    let cached = u["cache_read_input_tokens"].as_u64().unwrap_or(0);
    assert!(cached >= (prompt + 5) / 16 * 16 - 16 && cached > 0, "{u}");
    assert_eq!(u["output_tokens"], 5);
    // What the API requires.
    let (s, text) = call_messages(&app, body(&convo, true), false).await;
    assert!(
        s == StatusCode::BAD_REQUEST && text.contains("anthropic-version"),
        "{text}"
    );
    let (s, text) = call_messages(&app, json!({"model": "sim", "messages": convo}), true).await;
    assert!(s == StatusCode::BAD_REQUEST && text.contains("max_tokens"), "{text}");
}

/// `--template rerender` changes the rendering of earlier assistant turns at every request, so a resent
/// conversation hits the cache only before its first assistant turn; `stable` hits through the reply.
#[tokio::test]
async fn rerender_template_misses_from_the_first_assistant_turn() {
    use loadshape::sim_server::Template;
    let system = "system prompt words ".repeat(40);
    for (template, expect_through_reply) in [(Template::Stable, true), (Template::Rerender, false)] {
        let app = router(Config { template, ..fast() });
        let first = json!([{"role": "system", "content": system}, {"role": "user", "content": "task"}]);
        let req =
            |m: &Value| json!({"model": "sim", "messages": m, "max_tokens": 64, "ignore_eos": true, "stream": false});
        let (_, a) = call(&app, "/v1/chat/completions", req(&first)).await;
        let a: Value = serde_json::from_str(&a.unwrap_or_default()).unwrap_or_default();
        let reply = a["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let p0 = a["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        let second =
            json!([first[0], first[1], {"role": "assistant", "content": reply}, {"role": "tool", "content": "x"}]);
        let (_, b) = call(&app, "/v1/chat/completions", req(&second)).await;
        let b: Value = serde_json::from_str(&b.unwrap_or_default()).unwrap_or_default();
        let cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        if expect_through_reply {
            assert!(cached >= p0 + 64 - 16, "{template:?}: {cached} of {p0} + 64");
        } else {
            assert!(cached <= p0 && cached + 16 > p0, "{template:?}: {cached} vs {p0}");
        }
    }
}

/// KV-cache use and preemptions under vLLM's names (`vllm:kv_cache_usage_perc`, `vllm:num_preemptions_total`),
/// read back by the replay's scraper: four requests that cannot all hold their KV blocks at once fill the cache
/// and make the engine preempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_use_and_preemptions_are_exported_under_vllms_names() {
    use loadshape::replay::prom::{ServerReport, Snapshot};
    let profile: shared::engine::EngineProfile = serde_json::from_value(json!({
        "name": "tiny-kv", "basis": "test", "block_size": 16, "num_kv_blocks": 24, "max_num_seqs": 8,
        "max_num_batched_tokens": 2048, "step_fixed_ms": 5.0, "per_seq_ms": 0.1,
        "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 50.0, "prefill_fixed_ms": 1.0
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let app = router(Config {
        engine: loadshape::sim_server::EngineChoice::Profile(Box::new(profile)),
        ..Config::default()
    });
    let (_, before) = get(&app, "/metrics").await;
    let first = Snapshot::from_text(0.0, &before);
    assert_eq!(first.kv_cache_usage, Some(0.0), "idle: nothing held\n{before}");
    assert_eq!(first.preemptions_total, Some(0.0));
    // 4 × (≈ 100 prompt + 150 output tokens) ≈ 64 blocks of 16 against 24: they cannot all run at once.
    let words: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
    let reqs: Vec<_> = (0..4)
        .map(|i| {
            let app = app.clone();
            let prompt = format!("{i} {}", words.join(" "));
            tokio::spawn(async move { call(&app, "/v1/completions", stream_req(&prompt, 150)).await })
        })
        .collect();
    let mut snaps = vec![first];
    while !reqs.iter().all(|r| r.is_finished()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (_, text) = get(&app, "/metrics").await;
        snaps.push(Snapshot::from_text(snaps.len() as f64, &text));
    }
    for r in reqs {
        let (status, body) = r.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, StatusCode::OK);
        assert!(
            frames(&body.unwrap_or_else(|e| panic!("{e}"))).1,
            "each request completes"
        );
    }
    let (_, after) = get(&app, "/metrics").await;
    snaps.push(Snapshot::from_text(snaps.len() as f64, &after));
    let report = ServerReport::from_snapshots(&snaps);
    let peak = report
        .kv_cache_usage_max
        .unwrap_or_else(|| panic!("no KV use in {after}"));
    assert!(peak > 0.5 && peak <= 1.0, "the cache filled: peak {peak}");
    let preempted = report
        .preemptions
        .unwrap_or_else(|| panic!("no preemptions in {after}"));
    assert!(preempted >= 1.0, "the engine preempted: {preempted}");
    assert!(after.contains("# TYPE vllm:num_preemptions_total counter"), "{after}");
}

/// A request that asks for reasoning (chat: `chat_template_kwargs`, Messages: `thinking`) streams that many
/// reasoning tokens first (`reasoning_content` deltas; a `thinking` block), counted in the output and in
/// `completion_tokens_details.reasoning_tokens`; without the ask, no reasoning and the usage as before.
#[tokio::test]
async fn reasoning_tokens_stream_before_the_content() {
    let app = router(Config {
        tokens_per_frame: 4,
        ..fast()
    });
    let chat = |kwargs: Value| {
        json!({"model": "sim", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 10,
               "min_tokens": 10, "stream": true, "stream_options": {"include_usage": true},
               "chat_template_kwargs": kwargs})
    };
    let (s, body) = call(
        &app,
        "/v1/chat/completions",
        chat(json!({"enable_thinking": true, "thinking_budget": 6})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body:?}");
    let (f, done) = frames(&body.expect("body"));
    assert!(done);
    let count = |key: &str| -> usize {
        f.iter()
            .filter_map(|v| v["choices"][0]["delta"][key].as_str())
            .map(|t| t.split_whitespace().count().max(usize::from(!t.is_empty())))
            .sum()
    };
    let (reasoning, content) = (count("reasoning_content"), count("content"));
    assert!(reasoning > 0 && content > 0, "{f:?}");
    // Every reasoning frame comes before the first content frame.
    let first_content = f.iter().position(|v| {
        v["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    });
    let last_reasoning = f
        .iter()
        .rposition(|v| v["choices"][0]["delta"]["reasoning_content"].is_string());
    assert!(last_reasoning < first_content, "{f:?}");
    let usage = &f.last().expect("usage")["usage"];
    assert_eq!(usage["completion_tokens"], 10);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 6);
    // Not asked: no reasoning, no details.
    let (_, body) = call(
        &app,
        "/v1/chat/completions",
        chat(json!({"enable_thinking": false, "thinking_budget": 6})),
    )
    .await;
    let body = body.expect("body");
    assert!(
        !body.contains("reasoning_content") && !body.contains("completion_tokens_details"),
        "{body}"
    );
    // Messages: a thinking block at index 0, the text at index 1.
    let (s, body) = call_messages(
        &app,
        json!({"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": true,
               "thinking": {"type": "enabled", "budget_tokens": 5}}),
        true,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (ev, _) = frames(&body);
    let kinds: Vec<String> = ev
        .iter()
        .map(|v| format!("{}:{}", v["type"].as_str().unwrap_or(""), v["index"]))
        .collect();
    assert_eq!(ev[1]["content_block"]["type"], "thinking", "{kinds:?}");
    let thinking_at = kinds
        .iter()
        .rposition(|k| k == "content_block_delta:0")
        .expect("thinking deltas");
    let text_start = kinds
        .iter()
        .position(|k| k == "content_block_start:1")
        .expect("text block");
    assert!(thinking_at < text_start, "{kinds:?}");
    assert!(ev.iter().any(|v| v["delta"]["type"] == "thinking_delta"));
    assert!(ev.iter().any(|v| v["delta"]["type"] == "text_delta" && v["index"] == 1));
    assert!(kinds.contains(&"content_block_stop:1".to_string()), "{kinds:?}");
}

/// `POST /v1/responses`: `response.created`, an output item, a `response.output_text.delta` per frame, then
/// `response.incomplete` (the forced length reached) with the usage; no `[DONE]`. A resent input hits the cache;
/// `input` is required.
#[tokio::test]
async fn responses_stream_events_and_usage() {
    let app = router(fast());
    let input = json!([
        {"role": "system", "content": "find why the loader refuses the shard ".repeat(20)},
        {"role": "user", "content": "Task: fix it."}
    ]);
    let body = |input: &Value| {
        json!({"model": "sim", "input": input, "max_output_tokens": 6, "min_tokens": 6, "ignore_eos": true,
               "stream": true})
    };
    let (s, text) = call(&app, "/v1/responses", body(&input)).await;
    assert_eq!(s, StatusCode::OK);
    let text = text.expect("body");
    let (ev, done) = frames(&text);
    assert!(!done, "no [DONE] on the Responses stream");
    let kinds: Vec<&str> = ev.iter().map(|v| v["type"].as_str().unwrap_or("")).collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.incomplete"), "{kinds:?}");
    let deltas: String = ev
        .iter()
        .filter(|v| v["type"] == "response.output_text.delta")
        .map(|v| v["delta"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(deltas.split_whitespace().count(), 6, "{deltas}");
    let last = ev.last().expect("terminal event");
    assert_eq!(last["response"]["incomplete_details"]["reason"], "max_output_tokens");
    let usage = &last["response"]["usage"];
    assert_eq!(usage["output_tokens"], 6);
    let prompt = usage["input_tokens"].as_u64().expect("input_tokens");
    assert!(prompt > 100, "{usage}");
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
    // The same input again: its prefix is cached.
    let (_, again) = call(&app, "/v1/responses", body(&input)).await;
    let (ev, _) = frames(&again.expect("body"));
    let cached = ev.last().expect("terminal")["response"]["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(cached >= prompt - 16, "{cached} of {prompt}");
    // A function call and its output render like chat's tool call and tool message.
    let with_call = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"type": "function_call", "call_id": "c1", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"}
    ]);
    let (s, _) = call(&app, "/v1/responses", body(&with_call)).await;
    assert_eq!(s, StatusCode::OK);
    let (s, text) = call(
        &app,
        "/v1/responses",
        json!({"model": "sim", "max_output_tokens": 4, "stream": true}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(text.expect("body").contains("input is required"));
}

/// A client that goes away mid-stream: the engine cancels its request and `/metrics` says the engine is idle again
/// (benchmarks wait for an idle server before a measured run; before, the gauges kept the cancelled request as
/// running until some other request's step).
#[tokio::test]
async fn a_request_whose_client_left_leaves_the_gauges_idle() {
    use http_body_util::BodyExt as _;
    use loadshape::replay::prom::Snapshot;
    let app = router(Config::default());
    let req = Request::post("/v1/completions")
        .header("content-type", "application/json")
        .body(Body::from(
            stream_req("a prompt the client will not wait for", 2000).to_string(),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    let resp = app.clone().oneshot(req).await.unwrap_or_else(|e| match e {});
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap_or_else(|| panic!("no first frame"));
    assert!(first.is_ok(), "{first:?}");
    let (_, text) = get(&app, "/metrics").await;
    assert_eq!(Snapshot::from_text(0.0, &text).running, Some(1.0), "{text}");
    drop(body);
    let t0 = Instant::now();
    loop {
        let (_, text) = get(&app, "/metrics").await;
        let s = Snapshot::from_text(0.0, &text);
        if (s.running, s.waiting) == (Some(0.0), Some(0.0)) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "still running {:?}, waiting {:?} 5 s after the client left",
            s.running,
            s.waiting
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
