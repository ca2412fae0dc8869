//! `loadshape replay` end to end against `loadshape sim-server` (in-process, 127.0.0.1:0), running the real binary:
//! counts and records, the summary and `report`, a server that dies mid-run (abort, exit 2, records kept), and
//! SIGTERM mid-run (every started request has a record line). Each test is bounded to a few seconds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use loadshape::replay::records::read_records;
use loadshape::sim_server::{self, Config, Faults};
use shared::record::RequestRecord;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

struct Sim {
    base: String,
    origin: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn sim(config: Config) -> Sim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(sim_server::serve(listener, config, async {
        let _ = rx.await;
    }));
    Sim {
        base: format!("http://{addr}/v1"),
        origin: format!("http://{addr}"),
        stop: Some(tx),
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loadshape-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir.join(name)
}

/// A metric's value from the sim-server's /metrics.
async fn metric(origin: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("{origin}/metrics"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

fn records(path: &Path) -> Vec<RequestRecord> {
    let (recs, bad) = read_records(path).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty(), "malformed lines: {bad:?}");
    recs
}

async fn replay(args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        Command::new(BIN).arg("replay").args(args).stdin(Stdio::null()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("replay did not finish in 30 s"))
    .unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fast() -> Config {
    Config {
        speed: 20.0,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_against_sim_server_counts_records_and_summary() {
    let s = sim(fast()).await;
    let out = tmp("sessions.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, stdout, stderr) = replay(&[
        "--url",
        &s.base,
        "--model",
        "sim",
        "--out",
        &out_s,
        "--sessions",
        "3",
        "--steps",
        "3",
        "--spread",
        "0",
        "--base",
        "4000",
        "--gen",
        "64",
        "--tool",
        "50",
        "--think",
        "0.05",
        "--stagger",
        "0.05",
        "--max-seconds",
        "20",
        "--seed",
        "7",
        "--quiet",
        "--scrape-interval",
        "0.2",
    ])
    .await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let recs = records(&out);
    assert_eq!(recs.len(), 9, "3 sessions x 3 steps");
    for r in &recs {
        assert!(r.ok, "{r:?}");
        assert_eq!(r.gen_tokens, r.asked_tokens, "forced length honoured: {r:?}");
        assert!(r.asked_tokens >= 64);
        assert_eq!(r.sse_frames, r.gen_tokens);
        let cached = r.cached_tokens.unwrap_or_else(|| panic!("sim reports cached tokens"));
        if r.step == 0 {
            assert_eq!(cached, 0, "cold start must not hit: {r:?}");
        } else {
            let prompt = r.prompt_tokens.unwrap_or(0);
            assert!(cached * 10 > prompt * 8, "a resent conversation hits the cache: {r:?}");
        }
        assert!(r.designed_cached_tokens.is_some());
    }
    assert!(
        stdout.contains("Successful requests:") && stdout.contains("Server side (/metrics: vllm)"),
        "{stdout}"
    );
    assert_eq!(
        metric(&s.origin, "loadshape_sim:requests_received_total").await as usize,
        recs.len()
    );
    // Sidecars beside --out.
    let server: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{out_s}.server.json")).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(server["report"]["family"], "vllm");
    assert!(server["snapshots"].as_array().map_or(0, Vec::len) >= 2);
    // `report` reads the same file and scores it with the same module.
    let rep = Command::new(BIN)
        .args(["report", &out_s, "--json"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(rep.status.success());
    let v: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["summary"]["completed"], 9);
    assert_eq!(v["records"], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_nonce_differs_per_run_unless_pinned() {
    let s = sim(fast()).await;
    let mut step0_cached = Vec::new();
    for (i, nonce) in [Some("5"), Some("5"), None].into_iter().enumerate() {
        let out = tmp(&format!("nonce{i}.jsonl"));
        let out_s = out.to_string_lossy().to_string();
        let mut args = vec![
            "--url",
            &s.base,
            "--model",
            "sim",
            "--out",
            &out_s,
            "--sessions",
            "1",
            "--steps",
            "2",
            "--spread",
            "0",
            "--base",
            "4000",
            "--gen",
            "64",
            "--tool",
            "20",
            "--think",
            "0",
            "--stagger",
            "0",
            "--seed",
            "3",
            "--quiet",
            "--metrics-url",
            "none",
        ];
        if let Some(n) = nonce {
            args.extend(["--nonce", n]);
        }
        let (code, _, stderr) = replay(&args).await;
        assert_eq!(code, 0, "{stderr}");
        let recs = records(&out);
        let r0 = recs
            .iter()
            .find(|r| r.step == 0)
            .unwrap_or_else(|| panic!("step 0 record"));
        step0_cached.push(r0.cached_tokens.unwrap_or(0));
    }
    // Run 2 repeats run 1's pinned nonce: its step 0 is served from the cache. Run 3 has a fresh nonce: cold.
    assert_eq!(step0_cached[0], 0);
    assert!(
        step0_cached[1] > 3000,
        "same --seed and --nonce resend the same text: {step0_cached:?}"
    );
    assert_eq!(
        step0_cached[2], 0,
        "a new run's content is unique even with the same --seed: {step0_cached:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_server_aborts_with_exit_2_and_keeps_records() {
    let s = sim(Config {
        faults: Faults {
            fail_after: Some(2),
            ..Faults::default()
        },
        ..fast()
    })
    .await;
    let out = tmp("dead.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let t0 = Instant::now();
    let (code, _stdout, stderr) = replay(&[
        "--url",
        &s.base,
        "--model",
        "sim",
        "--out",
        &out_s,
        "--sessions",
        "2",
        "--steps",
        "3",
        "--spread",
        "0",
        "--base",
        "4000",
        "--gen",
        "64",
        "--tool",
        "20",
        "--think",
        "0",
        "--stagger",
        "0",
        "--respawn",
        "--max-fail-streak",
        "2",
        "--max-seconds",
        "20",
        "--quiet",
        "--metrics-url",
        "none",
    ])
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("did not measure anything"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(15));
    let recs = records(&out);
    let received = metric(&s.origin, "loadshape_sim:requests_received_total").await as usize;
    assert_eq!(recs.iter().filter(|r| r.ok).count(), 2);
    // Failures are the server's 503s, or requests the abort cut (some before they reached the server).
    let cut = recs
        .iter()
        .filter(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:")))
        .count();
    for r in recs.iter().filter(|r| !r.ok) {
        let e = r.error.as_deref().unwrap_or_default();
        assert!(e.starts_with("HTTP 503") || e.starts_with("cut:"), "{e}");
    }
    assert!(
        recs.len() >= received && recs.len() - received <= cut,
        "{} records, {received} seen by the server",
        recs.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_at_all_exits_2() {
    let out = tmp("refused.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, _, stderr) = replay(&[
        "--url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--out",
        &out_s,
        "--sessions",
        "2",
        "--steps",
        "2",
        "--stagger",
        "0",
        "--quiet",
        "--metrics-url",
        "none",
    ])
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(records(&out).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_keeps_a_record_for_every_started_request() {
    // Real time, long outputs: requests are in flight when the signal lands.
    let s = sim(Config::default()).await;
    let out = tmp("sigterm.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let mut child = Command::new(BIN)
        .args([
            "replay",
            "--url",
            &s.base,
            "--model",
            "sim",
            "--out",
            &out_s,
            "--sessions",
            "4",
            "--steps",
            "50",
            "--spread",
            "0",
            "--base",
            "4000",
            "--gen",
            "150",
            "--tool",
            "20",
            "--think",
            "0",
            "--stagger",
            "0.1",
            "--quiet",
            "--metrics-url",
            "none",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id().unwrap_or_else(|| panic!("child has a pid"));
    // Wait for at least one finished request, then signal this child only.
    let t0 = Instant::now();
    while std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < 2 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let done = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| panic!("replay did not exit within 10 s of SIGTERM"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.code(), Some(143));
    let recs = records(&out);
    let received = metric(&s.origin, "loadshape_sim:requests_received_total").await as usize;
    let cut = recs
        .iter()
        .filter(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:")))
        .count();
    // One record per request the server saw, plus cut requests that had not reached it yet.
    assert!(
        recs.len() >= received && recs.len() - received <= cut,
        "{} records, {received} seen by the server",
        recs.len()
    );
    assert!(recs.iter().any(|r| r.ok), "some requests finished before the signal");
    assert!(
        recs.iter()
            .any(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:"))),
        "in-flight requests were cut and recorded"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{out_s}.summary.json")).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(meta["requests_started"], meta["records_written"]);
    assert_eq!(meta["interrupted"], "SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_names_malformed_lines() {
    let s = sim(fast()).await;
    let out = tmp("bad.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, _, stderr) = replay(&[
        "--url",
        &s.base,
        "--model",
        "sim",
        "--out",
        &out_s,
        "--sessions",
        "1",
        "--steps",
        "2",
        "--spread",
        "0",
        "--base",
        "4000",
        "--gen",
        "64",
        "--tool",
        "20",
        "--think",
        "0",
        "--quiet",
        "--metrics-url",
        "none",
        "--endpoint",
        "chat",
    ])
    .await;
    assert_eq!(code, 0, "{stderr}");
    let mut text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    text.push_str("{\"schema\": 1, \"truncated\n");
    std::fs::write(&out, text).unwrap_or_else(|e| panic!("{e}"));
    let rep = Command::new(BIN)
        .args(["report", &out_s])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(rep.status.success());
    let err = String::from_utf8_lossy(&rep.stderr);
    assert!(err.contains("bad.jsonl:3: malformed record"), "{err}");
    assert!(String::from_utf8_lossy(&rep.stdout).contains("Successful requests:                        2"));
}

fn engine_scenario(workload: serde_json::Value) -> String {
    serde_json::json!({
        "model": "engine", "seed": 11, "counterfactuals": false, "workload": workload,
        "profile": {"name": "p", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 64,
                    "max_num_batched_tokens": 8192, "step_fixed_ms": 5.0, "per_seq_ms": 0.01,
                    "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 30.0},
        "slo": {"ttft_ms": 800.0, "tpot_ms": 50.0}
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_open_and_closed_loop_run_live() {
    let s = sim(fast()).await;
    let cases = [
        (
            "poisson",
            serde_json::json!({"kind": "poisson", "num_requests": 12, "rate_rps": 20.0,
                "prompt": {"dist": "fixed", "tokens": 300}, "output": {"dist": "uniform", "min": 8, "max": 24},
                "shared_prefix_tokens": 256}),
        ),
        (
            "closed",
            serde_json::json!({"kind": "closed_loop", "users": 3, "num_requests": 9, "think_s": 0.01,
                "prompt": {"dist": "fixed", "tokens": 100}, "output": {"dist": "fixed", "tokens": 16},
                "shared_prefix_tokens": 0}),
        ),
    ];
    for (name, workload) in cases {
        let scen = tmp(&format!("{name}.json"));
        std::fs::write(&scen, engine_scenario(workload)).unwrap_or_else(|e| panic!("{e}"));
        let out = tmp(&format!("{name}.jsonl"));
        let out_s = out.to_string_lossy().to_string();
        let scen_s = scen.to_string_lossy().to_string();
        let (code, stdout, stderr) = replay(&[
            "--url",
            &s.base,
            "--out",
            &out_s,
            "--scenario",
            &scen_s,
            "--quiet",
            "--metrics-url",
            "none",
        ])
        .await;
        assert_eq!(code, 0, "{name}: {stderr}");
        let recs = records(&out);
        let n = if name == "poisson" { 12 } else { 9 };
        assert_eq!(recs.len(), n, "{name}");
        assert!(recs.iter().all(|r| r.ok && r.gen_tokens == r.asked_tokens), "{name}");
        assert!(
            stdout.contains("TTFT <= 800 ms"),
            "the scenario's SLO is used: {stdout}"
        );
        if name == "poisson" {
            // Requests share the run's 256-token prefix: after the first, they hit the cache.
            let hits = recs.iter().filter(|r| r.cached_tokens.unwrap_or(0) >= 200).count();
            assert!(hits >= n - 2, "shared prefix cached: {hits} of {n}");
            assert!(recs.windows(2).any(|w| w[0].t_submit != w[1].t_submit));
        }
    }
}
