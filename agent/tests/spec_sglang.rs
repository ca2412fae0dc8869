//! Speculative decoding measured on SGLang: a small axum server speaking SGLang's OpenAI-compatible stream (each
//! verification step one frame, the request's accepted and rejected drafts in `usage.completion_tokens_details`) and
//! its Prometheus text (`sglang:spec_accept_length` and `sglang:spec_accept_rate` gauges, the
//! `sglang:spec_verify_calls_total`, `…generation_tokens_total` and `…num_requests_total` counters). `replay` records
//! the per-request counts and derives the server's over the run; `calibrate --from` fits the acceptance the mock's
//! numbers imply; `calibrate --url` derives the same counts from its scrapes over the probe.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use clap::Parser as _;
use loadshape::cmd::calibrate;
use loadshape::replay::records::read_records;
use loadshape::{Cli, Command as LsCommand};
use shared::calibrate::Fit;
use shared::calibrate::spec::{ServerSpecCounts, SpecFit};
use shared::engine::Acceptance;
use shared::engine::spec::rate_for_share;

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/run_bin.rs"]
mod run_bin;
use scratch::Scratch;

/// Output tokens a request asks for when it does not say.
const GEN: u64 = 101;

/// What the mock server has counted, as SGLang's collector would.
#[derive(Default)]
struct Counters {
    /// Requests under way (each one's decode step is longer by 0.3 ms per request under way when it started, as a
    /// batch's is).
    running: u64,
    requests: u64,
    prompt_tokens: u64,
    generation_tokens: u64,
    verify_calls: u64,
    /// The gauges of the last request (SGLang's are of its last logging window).
    accept_rate: f64,
    accept_length: f64,
}

type Shared = Arc<Mutex<Counters>>;

/// One request's frames: the first token, then each step's `1 + accepted` tokens, its steps accepting 1 and 2
/// drafts in turn (the last one what is left); its steps and accepted drafts. As many drafts are rejected as
/// accepted: 0.5 of them accepted, about 3 drafted per step.
fn plan(n: u64) -> (Vec<u64>, u64, u64) {
    let mut frames = vec![1];
    let (mut left, mut steps, mut accepted) = (n - 1, 0u64, 0u64);
    while left > 0 {
        let acc = (1 + steps % 2).min(left - 1);
        frames.push(1 + acc);
        left -= 1 + acc;
        steps += 1;
        accepted += acc;
    }
    (frames, steps, accepted)
}

/// `/v1/chat/completions` and `/v1/completions` (a `prompt` instead of `messages`, `text` instead of `delta`).
async fn chat(State(c): State<Shared>, Json(body): Json<serde_json::Value>) -> Response {
    let n = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| body[*k].as_u64())
        .unwrap_or(GEN)
        .max(1);
    // About 4 characters a token; a prefill of 5 ms and 10 µs per token, a step of 2 ms and 1 µs per token of
    // context.
    let completions = body.get("prompt").is_some();
    let chars: usize = (body["messages"].as_array().into_iter().flatten())
        .filter_map(|m| m["content"].as_str())
        .map(str::len)
        .sum::<usize>()
        + body["prompt"].as_str().map_or(0, str::len);
    let prompt = (chars / 4).max(1) as u64;
    let prefill_us = 5000 + 10 * prompt;
    let batch_us = {
        let mut g = c.lock().unwrap_or_else(|e| e.into_inner());
        g.running += 1;
        300 * g.running
    };
    let (frames, steps, accepted) = plan(n);
    let mut out: Vec<String> = vec![
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#.into(),
    ];
    for f in &frames {
        let text = "w ".repeat(*f as usize);
        let choice = if completions {
            serde_json::json!({"index": 0, "text": text, "finish_reason": null})
        } else {
            serde_json::json!({"index": 0, "delta": {"content": text}, "finish_reason": null})
        };
        out.push(serde_json::json!({"id": "x", "object": "chat.completion.chunk", "choices": [choice]}).to_string());
    }
    out.push(if completions {
        r#"{"id":"x","object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"length"}]}"#.into()
    } else {
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#
            .into()
    });
    out.push(
        serde_json::json!({"id": "x", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n,
                "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": accepted,
                    "rejected_prediction_tokens": accepted}}})
        .to_string(),
    );
    out.push("[DONE]".into());
    let stream = futures_util::stream::unfold((out, 0usize, c), move |(out, i, c)| async move {
        if i == out.len() {
            return None;
        }
        // A prefill, then a decode step per frame.
        let us = if i == 0 { prefill_us } else { 2000 + prompt + batch_us };
        tokio::time::sleep(Duration::from_micros(us)).await;
        if i + 1 == out.len() {
            // Counted when the request finishes, as SGLang's tokenizer manager does.
            let mut g = c.lock().unwrap_or_else(|e| e.into_inner());
            g.running = g.running.saturating_sub(1);
            g.requests += 1;
            g.prompt_tokens += prompt;
            g.generation_tokens += n;
            g.verify_calls += steps;
            if steps > 0 {
                g.accept_rate = accepted as f64 / (2 * accepted) as f64;
                g.accept_length = n as f64 / steps as f64;
            }
        }
        let frame = format!("data: {}\n\n", out[i]);
        Some((Ok::<_, std::io::Error>(frame), (out, i + 1, c)))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

async fn metrics(State(c): State<Shared>) -> String {
    let g = c.lock().unwrap_or_else(|e| e.into_inner());
    let l = r#"{model_name="mock",engine_type="unified",tp_rank="0",pp_rank="0"}"#;
    format!(
        "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n\
         sglang:num_running_reqs{l} 0.0\n\
         # HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n\
         # TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{l} {}\n\
         # HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.\n\
         # TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{l} {}\n\
         # HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n\
         # TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{l} {}\n\
         # HELP sglang:generation_tokens_total Number of generation tokens processed.\n\
         # TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{l} {}\n\
         # HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.\n\
         # TYPE sglang:spec_verify_calls_total counter\nsglang:spec_verify_calls_total{l} {}\n\
         # HELP sglang:num_requests_total Number of requests processed.\n\
         # TYPE sglang:num_requests_total counter\nsglang:num_requests_total{l} {}\n",
        g.accept_length,
        g.accept_rate,
        g.prompt_tokens as f64,
        g.generation_tokens as f64,
        g.verify_calls as f64,
        g.requests as f64
    )
}

/// The tests time a real-time server: one at a time, or they would time each other.
static LIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The mock SGLang on 127.0.0.1: its origin and its counters.
async fn start() -> (String, Shared) {
    let counters: Shared = Arc::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(chat))
        .route("/metrics", get(metrics))
        .with_state(counters.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let origin = format!("http://{}", listener.local_addr().unwrap_or_else(|e| panic!("{e}")));
    // Each frame goes out as it is written (no Nagle delay behind the client's delayed ACK), as SGLang's do.
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (origin, counters)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_calibrate_read_sglangs_acceptance() {
    let _one = LIVE.lock().await;
    let dir = Scratch::new("spec-sglang");
    let (origin, _) = start().await;

    let scenario = serde_json::json!({
        "model": "engine",
        // One user (every request alone), prompts of 200–3,000 tokens without a shared prefix (the mock has no
        // prefix cache).
        "workload": {"kind": "closed_loop", "users": 1, "num_requests": 12, "think_s": 0.0,
                     "prompt": {"dist": "uniform", "min": 200, "max": 3000},
                     "output": {"dist": "fixed", "tokens": GEN}, "shared_prefix_tokens": 0},
        "profile": shared::engine::presets::laptop_demo(),
        "seed": 3,
        "counterfactuals": false
    });
    let scenario_path = dir.join("scenario.json");
    std::fs::write(&scenario_path, scenario.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join("run.jsonl");
    let out_s = out.to_string_lossy().to_string();
    run_bin::loadshape_ok(
        &[
            "replay",
            "--url",
            &format!("{origin}/v1"),
            "--model",
            "mock",
            "--endpoint",
            "chat",
            "--out",
            &out_s,
            "--scenario",
            &scenario_path.to_string_lossy(),
            "--quiet",
            "--metrics-url",
            &format!("{origin}/metrics"),
            "--scrape-interval",
            "0.2",
        ],
        120,
    )
    .await;
    let (recs, bad) = read_records(&out).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty());
    assert_eq!(recs.len(), 12);
    // Each record carries the request's counts from `usage`: what `plan` streamed.
    let (mut steps, mut accepted) = (0u64, 0u64);
    for r in &recs {
        assert!(r.ok, "{r:?}");
        let (_, s, a) = plan(r.gen_tokens);
        let c = r.spec.unwrap_or_else(|| panic!("usage with prediction tokens: {r:?}"));
        assert_eq!((c.draft_tokens, c.accepted_tokens, c.steps), (2 * a, a, None), "{r:?}");
        assert_eq!(r.sse_frames, 1 + s, "{r:?}");
        (steps, accepted) = (steps + s, accepted + a);
    }
    // The summary's keys, as for llama.cpp's per-request counts: half the drafts accepted; `usage` says no steps,
    // so no accepted tokens per step (as llama.cpp's `timings`).
    let live = shared::metrics::summarize(&recs, &shared::metrics::Slo::default());
    assert_eq!(live.spec_acceptance, Some(0.5));
    assert_eq!(live.spec_accepted_per_step, None);

    // The server's side, from its counters and gauges: the report's keys as vLLM's counters give them.
    let server: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run.jsonl.server.json")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let report = &server["report"];
    assert_eq!(report["family"], "sglang", "{server}");
    assert_eq!(report["spec_drafts"].as_f64(), Some(steps as f64), "{server}");
    assert_eq!(
        report["spec_accepted_tokens"].as_f64(),
        Some(accepted as f64),
        "{server}"
    );
    assert_eq!(
        report["spec_draft_tokens"].as_f64(),
        Some(2.0 * accepted as f64),
        "{server}"
    );

    // calibrate --from: the acceptance from the server's counts (0.5 of the drafts; k = 3, the most the records
    // drafted per step).
    let cal = dir.join("cal").to_string_lossy().to_string();
    let argv = [
        "loadshape",
        "calibrate",
        "--from",
        &out_s,
        "--out",
        &cal,
        "--spec-method",
        "eagle",
    ];
    let (fit, sf) = calibrated(&argv).await;
    let server_counts = server_counts(&sf);
    assert_eq!(
        (
            server_counts.drafted_tokens,
            server_counts.accepted_tokens,
            server_counts.steps
        ),
        (2.0 * accepted as f64, accepted as f64, steps as f64)
    );
    let p = fit.profile.speculative.clone().unwrap_or_else(|| panic!("profile"));
    assert_eq!(p.draft_tokens, 3, "{sf:?}");
    assert_eq!(p.acceptance, Acceptance::Rate(rate_for_share(0.5, 3)), "{sf:?}");
}

/// `calibrate --url` against SGLang: the server's counts over the probe come from its scrapes (before, after each
/// phase, after the end), as a replay run's report does, and they match what the mock counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_url_reads_sglangs_counts_over_its_probe() {
    let _one = LIVE.lock().await;
    let dir = Scratch::new("spec-sglang-url");
    let (origin, counters) = start().await;
    let base = format!("{origin}/v1");
    let out = dir.join("cal").to_string_lossy().to_string();
    let argv = [
        "loadshape",
        "calibrate",
        "--url",
        &base,
        "--model",
        "mock",
        "--out",
        &out,
        "--budget",
        "20",
        "--max-prompt-tokens",
        "2048",
        "--decode-tokens",
        "64",
        "--max-num-seqs",
        "4",
        "--spec-method",
        "eagle",
    ];
    let (fit, sf) = calibrated(&argv).await;
    let c = server_counts(&sf);
    // Everything the mock counted happened during the probe: its steps, and the accepted tokens its counters imply
    // (tokens after each request's first, less the steps), half of the drafted.
    let g = counters.lock().unwrap_or_else(|e| e.into_inner());
    let accepted = (g.generation_tokens - g.requests - g.verify_calls) as f64;
    assert_eq!(
        (c.steps, c.accepted_tokens),
        (g.verify_calls as f64, accepted),
        "{sf:?}"
    );
    assert_eq!(c.drafted_tokens, 2.0 * accepted, "{sf:?}");
    assert!(c.accepted_per_position.is_empty());
    let p = fit.profile.speculative.clone().unwrap_or_else(|| panic!("profile"));
    assert_eq!(
        p.acceptance,
        Acceptance::Rate(rate_for_share(0.5, p.draft_tokens)),
        "{sf:?}"
    );
}

/// `loadshape calibrate ARGV` in process: its fit and the speculation in it.
async fn calibrated(argv: &[&str]) -> (Fit, SpecFit) {
    let a = match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
        LsCommand::Calibrate(a) => a,
        other => panic!("{other:?}"),
    };
    let fit = calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"));
    let sf = fit.speculative.clone().unwrap_or_else(|| panic!("{:?}", fit.notes));
    (fit, sf)
}

/// The server's own speculative counts over the probe, as calibrate read them.
fn server_counts(sf: &SpecFit) -> ServerSpecCounts {
    sf.server
        .clone()
        .unwrap_or_else(|| panic!("the server's counts: {sf:?}"))
}
