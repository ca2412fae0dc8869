//! A production trace end to end: `loadshape simulate` and `loadshape replay --scenario` of a `trace` workload
//! naming the public Mooncake conversation trace (a time-scaled slice live, against `loadshape sim-server`
//! in-process on 127.0.0.1:0), prompts sized to the trace's `input_length`, then `loadshape report --export` and the
//! export simulated back.
//!
//! The trace is read from `$LOADSHAPE_TRACE_DIR` or, by default, `../shared/traces/` beside the repository.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use loadshape::replay::records::read_records;
use loadshape::sim_server::{self, Config};

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/sim_server.rs"]
mod sim_server_helper;
use scratch::Scratch;
use shared::record::RequestRecord;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");
/// The sim-server's emulated time runs this many times faster than wall time.
const SPEED: f64 = 20.0;

fn trace_path() -> PathBuf {
    let dir = std::env::var_os("LOADSHAPE_TRACE_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces"),
        PathBuf::from,
    );
    let p = dir.join("mooncake_conversation_trace.jsonl");
    assert!(
        p.is_file(),
        "{}: the public Mooncake trace is not there; set LOADSHAPE_TRACE_DIR to its folder",
        p.display()
    );
    p.canonicalize().unwrap_or(p)
}

fn scenario(workload: serde_json::Value) -> String {
    serde_json::json!({
        "model": "engine", "seed": 5, "counterfactuals": false, "workload": workload,
        "profile": sim_server::default_profile(),
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}
    })
    .to_string()
}

async fn loadshape(args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(BIN).args(args).stdin(Stdio::null()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("loadshape {args:?} did not finish in 120 s"))
    .unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn simulate_json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `path` relative to the scenario file: a scenario beside a copy of the trace's name finds it; a bad trace names
/// its line.
#[tokio::test]
async fn simulate_reads_the_trace_beside_the_scenario_and_names_bad_lines() {
    let trace = trace_path();
    let dir = Scratch::new("trace-rel");
    let head: String = std::fs::read_to_string(&trace)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .take(300)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("head.jsonl"), &head).unwrap_or_else(|e| panic!("{e}"));
    let scen = dir.join("scenario.json");
    std::fs::write(
        &scen,
        scenario(serde_json::json!({"kind": "trace", "path": "head.jsonl"})),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, out, err) = loadshape(&["simulate", &scen.to_string_lossy(), "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v = simulate_json(&out);
    assert_eq!(
        v["summary"]["completed"].as_u64().unwrap_or(0) + v["summary"]["failed"].as_u64().unwrap_or(0),
        300
    );
    // Line 3 with a hash id too many for its input.
    let mut lines: Vec<String> = head.lines().map(str::to_owned).collect();
    lines[2] = r#"{"timestamp": 5000, "input_length": 1000, "output_length": 9, "hash_ids": [0, 1, 2]}"#.into();
    std::fs::write(dir.join("head.jsonl"), lines.join("\n")).unwrap_or_else(|e| panic!("{e}"));
    let (code, _, err) = loadshape(&["simulate", &scen.to_string_lossy()]).await;
    assert_ne!(code, 0);
    assert!(err.contains("trace line 3") && err.contains("3 hash_ids"), "{err}");
    std::fs::remove_file(dir.join("head.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let (code, _, err) = loadshape(&["simulate", &scen.to_string_lossy()]).await;
    assert_ne!(code, 0);
    assert!(err.contains("head.jsonl"), "{err}");
}

/// The first two minutes of the public trace at 20× speed (its 3.4 req/s become 68 req/s of wall time, real pace
/// in the sim-server's emulated time) replayed live: every request completes, the server counts each prompt within
/// 1 % of the trace's `input_length`, conversation turns hit the cache, and the run exported as a Mooncake trace and
/// simulated back (at the emulated pace, `time_scale` 20) gives the run's cached share within 1 point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_slice_replays_against_sim_server_and_its_export_round_trips() {
    let dir = Scratch::new("trace");
    let sim = sim_server_helper::start(Config {
        speed: SPEED,
        ..Config::default()
    })
    .await;
    let trace = trace_path();
    let scen = dir.join("slice.json");
    std::fs::write(
        &scen,
        scenario(
            serde_json::json!({"kind": "trace", "path": trace.to_string_lossy(), "end_s": 120.0,
            "time_scale": 1.0 / SPEED}),
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join("slice.jsonl");
    let (out_s, scen_s) = (out.to_string_lossy().to_string(), scen.to_string_lossy().to_string());
    let base = sim.base.clone();
    let (code, stdout, stderr) = loadshape(&[
        "replay",
        "--url",
        &base,
        "--out",
        &out_s,
        "--scenario",
        &scen_s,
        "--nonce",
        "3",
        "--quiet",
        "--metrics-url",
        "none",
    ])
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (recs, bad) = read_records(&out).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty());
    let text = std::fs::read_to_string(&trace).unwrap_or_else(|e| panic!("{e}"));
    let want: Vec<u64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_default())
        .filter(|v| v["timestamp"].as_f64().unwrap_or(f64::MAX) < 120_000.0)
        .map(|v| v["input_length"].as_u64().unwrap_or(0))
        .collect();
    assert!(want.len() > 200, "{}", want.len());
    assert_eq!(recs.len(), want.len());
    assert!(recs.iter().all(|r| r.ok), "{:?}", recs.iter().find(|r| !r.ok));
    // Each record's designed prompt is its trace line's input_length; the server counted it within 1 %.
    let mut designed: Vec<u64> = recs.iter().map(|r| r.designed_prompt_tokens.unwrap_or(0)).collect();
    let mut sorted_want = want.clone();
    designed.sort_unstable();
    sorted_want.sort_unstable();
    assert_eq!(designed, sorted_want);
    let worst = recs
        .iter()
        .map(|r: &RequestRecord| {
            (r.prompt_tokens.unwrap_or(0) as f64 / r.designed_prompt_tokens.unwrap_or(1) as f64 - 1.0).abs()
        })
        .fold(0.0, f64::max);
    assert!(worst < 0.01, "a prompt is {:.2} % off its input_length", worst * 100.0);
    let (code, rep, err) = loadshape(&["report", &out_s, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let live_share = simulate_json(&rep)["summary"]["cached_share_achieved"]
        .as_f64()
        .unwrap_or(0.0);
    // The hash ids let a never-evicting cache reuse about 11 % of this slice's prompt tokens; the server's cache
    // (27,000 blocks of 16 tokens under a backlog of 7k-token prompts) keeps part of it.
    let implied = shared::workload::mooncake::direct_reuse(
        &shared::workload::mooncake::parse(
            &text,
            &shared::workload::mooncake::TraceOptions {
                end_s: Some(120.0),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}")),
        512,
        16,
    );
    let implied_share = implied.iter().sum::<u64>() as f64 / want.iter().sum::<u64>() as f64;
    assert!(
        live_share > 0.01 && live_share <= implied_share + 0.005,
        "the trace's shared prefixes hit the cache: {live_share} (the hash ids imply at most {implied_share})"
    );

    // Export, import, simulate.
    for format in ["mooncake", "agentic-mooncake"] {
        let (code, exported, err) = loadshape(&["report", &out_s, "--export", format]).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(exported.lines().count(), recs.len());
        let first: serde_json::Value =
            serde_json::from_str(exported.lines().next().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            first.get("request_id").is_some(),
            format == "agentic-mooncake",
            "{first}"
        );
        let file = dir.join(format!("export-{format}.jsonl"));
        std::fs::write(&file, &exported).unwrap_or_else(|e| panic!("{e}"));
        let back = dir.join(format!("back-{format}.json"));
        std::fs::write(
            &back,
            scenario(serde_json::json!({"kind": "trace", "path": file.to_string_lossy(), "time_scale": SPEED})),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (code, sim, err) = loadshape(&["simulate", &back.to_string_lossy(), "--json"]).await;
        assert_eq!(code, 0, "{err}");
        let sim_share = simulate_json(&sim)["summary"]["cached_share_achieved"]
            .as_f64()
            .unwrap_or(-1.0);
        assert!(
            (sim_share - live_share).abs() < 0.01,
            "{format}: export simulated {sim_share:.4} vs run {live_share:.4}"
        );
    }
    drop(sim);
}

/// An export of records without prompt block hashes (a simulated run) is refused, saying why.
#[tokio::test]
async fn export_of_a_simulated_run_says_it_has_no_block_hashes() {
    let dir = Scratch::new("trace");
    let trace = trace_path();
    let text: String = std::fs::read_to_string(&trace)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .take(20)
        .map(|l| format!("{l}\n"))
        .collect();
    let t = dir.join("twenty.jsonl");
    std::fs::write(&t, text).unwrap_or_else(|e| panic!("{e}"));
    let scen = dir.join("twenty.json");
    std::fs::write(
        &scen,
        scenario(serde_json::json!({"kind": "trace", "path": "twenty.jsonl"})),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let recs = dir.join("twenty-sim.jsonl");
    let (code, _, err) = loadshape(&[
        "simulate",
        &scen.to_string_lossy(),
        "--records",
        &recs.to_string_lossy(),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = loadshape(&["report", &recs.to_string_lossy(), "--export", "mooncake"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("prompt_block_hashes"), "{err}");
}
