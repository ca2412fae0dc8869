//! `loadshape capacity`: the simulated search, its refusals, and the live search against the built-in sim-server
//! (in-process, 127.0.0.1, real time) emulating the scenario's own profile: live capacity = simulated capacity
//! within one resolution step, and the guided search runs fewer levels than plain doubling + bisection.
//!
//! The workload has a sharp knee: the engine runs at most 4 sequences, a request takes ≈ 0.65 s, and the TTFT
//! target is 300 ms, so a 5th concurrent user (or session) waits about a whole request for a slot, while 4 see a
//! TTFT of one prefill step plus the HTTP path (≈ 20–100 ms live on a busy 2-core machine).

use std::path::{Path, PathBuf};

use clap::Parser as _;
use loadshape::cmd::capacity;
use loadshape::sim_server::{Config, EngineChoice};

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/sim_server.rs"]
mod sim_server_helper;
use loadshape::{Cli, Command};
use scratch::Scratch;
use serde_json::{Value, json};
use shared::engine::EngineProfile;

fn profile() -> EngineProfile {
    serde_json::from_value(json!({
        "name": "knee", "basis": "test", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 4,
        "max_num_batched_tokens": 8192, "step_fixed_ms": 15.0, "per_seq_ms": 0.5,
        "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 20.0, "prefill_fixed_ms": 5.0
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn tmp(name: &str) -> Scratch {
    Scratch::new(&format!("capacity-{name}"))
}

fn write_scenario(dir: &Path, workload: Value) -> PathBuf {
    let v = json!({
        "model": "engine",
        "workload": workload,
        "profile": serde_json::to_value(profile()).unwrap_or_else(|e| panic!("{e}")),
        "slo": {"ttft_ms": 300.0, "tpot_ms": 35.0},
        "seed": 3,
        "counterfactuals": false
    });
    let path = dir.join("scenario.json");
    std::fs::write(&path, v.to_string()).unwrap_or_else(|e| panic!("{e}"));
    path
}

fn closed_loop(dir: &Path, requests: u64) -> PathBuf {
    write_scenario(
        dir,
        json!({"kind": "closed_loop", "users": 2, "num_requests": requests,
               "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 40}}),
    )
}

fn args(extra: &[&str]) -> capacity::Args {
    let mut argv = vec!["loadshape", "capacity"];
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
        Command::Capacity(a) => a,
        other => panic!("{other:?}"),
    }
}

async fn start() -> sim_server_helper::Sim {
    sim_server_helper::start(Config {
        engine: EngineChoice::Profile(Box::new(profile())),
        ..Config::default()
    })
    .await
}

/// `capacity --scenario S --url URL --out OUT --json EXTRA...`, run in-process.
async fn live(scenario: &Path, url: &str, out: &Path, extra: &[&str]) -> Value {
    let mut argv = vec![
        "--scenario",
        scenario.to_str().unwrap_or(""),
        "--url",
        url,
        "--out",
        out.to_str().unwrap_or(""),
        "--json",
    ];
    argv.extend_from_slice(extra);
    capacity::capacity(&args(&argv))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn loads(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: {v}"))
        .iter()
        .map(|l| l["load"].as_f64().unwrap_or(f64::NAN))
        .collect()
}

#[tokio::test]
async fn simulate_prints_the_search_as_json() {
    let dir = tmp("sim");
    let s = closed_loop(&dir, 200);
    let v = capacity::capacity(&args(&["--scenario", s.to_str().unwrap_or(""), "--simulate", "--json"]))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(v["knob"], "users");
    assert_eq!(v["capacity"], 4.0);
    assert_eq!(loads(&v, "levels"), vec![2.0, 4.0, 8.0, 6.0, 5.0]);
    for l in v["levels"].as_array().into_iter().flatten() {
        assert!(l["summary"]["completed"].as_u64().is_some_and(|n| n > 0), "{l}");
        assert_eq!(l["saturation"], "stable");
    }
    let text = capacity::render(&v);
    assert!(text.contains("capacity users = 4"), "{text}");
    // A goal of its own: attainment 0.5 lets 5 users pass (4 of 5 requests start at once).
    let v = capacity::capacity(&args(&[
        "--scenario",
        s.to_str().unwrap_or(""),
        "--simulate",
        "--goal",
        "ttft:300",
        "--attainment",
        "0.5",
    ]))
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(v["capacity"].as_f64().is_some_and(|c| c >= 5.0), "{}", v["capacity"]);
    assert!(v["goal"].get("tpot_ms").is_none(), "{}", v["goal"]);
}

#[tokio::test]
async fn bad_goals_and_knobs_are_refused_naming_the_field() {
    let dir = tmp("bad");
    let s = closed_loop(&dir, 50);
    let s = s.to_str().unwrap_or("");
    let err = |extra: &[&str]| {
        let mut a = vec!["--scenario", s, "--simulate"];
        a.extend_from_slice(extra);
        let a = args(&a);
        async move {
            capacity::capacity(&a)
                .await
                .err()
                .map(|e| format!("{e:#}"))
                .unwrap_or_else(|| panic!("accepted"))
        }
    };
    let e = err(&["--goal", ""]).await;
    assert!(e.contains("goal.constraints") && e.contains("ttft_ms"), "{e}");
    for a in ["--attainment=0", "--attainment=1.5", "--attainment=-1"] {
        let e = err(&[a]).await;
        assert!(e.contains("goal.attainment must be in (0, 1]"), "{e}");
    }
    let e = err(&["--knob", "sessions"]).await;
    assert!(e.contains("knob") && e.contains("closed_loop"), "{e}");
    let e = err(&["--knob", "speed"]).await;
    assert!(e.contains("knob must be one of"), "{e}");
    let e = err(&["--goal", "ttft_ms=fast"]).await;
    assert!(e.contains("--goal") && e.contains("ttft_ms"), "{e}");
    let e = err(&["--min", "9", "--max", "3"]).await;
    assert!(e.contains("bounds.max"), "{e}");
    // Live without a run folder.
    let a = args(&["--scenario", s, "--url", "http://127.0.0.1:9/v1"]);
    let e = capacity::capacity(&a)
        .await
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("--out"), "{e}");
}

fn record_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with("level-") && n.ends_with(".jsonl")
                })
                .count()
        })
        .unwrap_or(0)
}

/// The live search, guided and not, against the sim-server: same capacity as the simulator within one step,
/// two levels guided (the predicted capacity passes, one more fails) against five unguided (2, 4, 8, 6, 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_search_matches_the_simulator_and_the_guide_saves_levels() {
    let sim = start().await;
    let url = sim.base.as_str();
    let dir = tmp("live");
    let s = closed_loop(&dir, 40);
    let guided_dir = dir.join("guided");
    let plain_dir = dir.join("plain");
    let guided = live(&s, url, &guided_dir, &[]).await;
    let plain = live(&s, url, &plain_dir, &["--no-guide"]).await;
    let sim = guided["simulated_capacity"]
        .as_f64()
        .unwrap_or_else(|| panic!("{guided}"));
    assert_eq!(sim, 4.0);
    for v in [&guided, &plain] {
        let live = v["capacity"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}", loads(v, "levels").len()));
        assert!(
            (live - sim).abs() <= 1.0,
            "live {live} vs simulated {sim}: {:?}",
            loads(v, "levels")
        );
        assert_eq!(v["levels_run"].as_u64(), Some(loads(v, "levels").len() as u64));
        assert_eq!(v["knob"], "users");
        assert!(v["levels"][0]["summary"]["completed"].as_u64().is_some_and(|n| n > 0));
    }
    assert_eq!(guided["guided"], true);
    assert_eq!(plain["guided"], false);
    let (g, p) = (
        guided["levels_run"].as_u64().unwrap_or(0),
        plain["levels_run"].as_u64().unwrap_or(0),
    );
    assert_eq!(g, 2, "guided: {:?}", loads(&guided, "levels"));
    assert!(g < p, "guided {g} levels, unguided {p}: {:?}", loads(&plain, "levels"));
    assert_eq!(plain["unguided_levels_simulated"].as_u64(), Some(5));
    // 8 users: every 2nd request waits a whole request for a slot, so the level is clearly failing and stops
    // before its 40 requests are done (in-flight ones are cut and recorded).
    let eight = plain["levels"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["load"] == 8.0);
    let eight = eight.unwrap_or_else(|| panic!("no level of 8: {:?}", loads(&plain, "levels")));
    assert_eq!(eight["stopped_early"], true, "{eight}");
    assert_eq!(eight["pass"], false);
    assert!(
        eight["summary"]["completed"].as_u64().is_some_and(|n| n < 40),
        "{eight}"
    );
    // One record file per level run, and the report, in each run folder.
    assert_eq!(record_files(&guided_dir) as u64, g);
    assert_eq!(record_files(&plain_dir) as u64, p);
    assert!(guided_dir.join("capacity.json").is_file());
    let text = capacity::render(&guided);
    assert!(
        text.contains("simulated (5 levels)") && text.contains("live (2 levels, guided"),
        "{text}"
    );
}

/// Sessions live, each level capped at 8 s by `--duration` (the scenario says 30 s) and run twice (`--repeat 2`): a record file per run, the
/// spread per level, and the capacity of the simulator within one step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_sessions_search_with_repeats_keeps_every_run() {
    let sim = start().await;
    let url = sim.base.as_str();
    let dir = tmp("sessions");
    let s = write_scenario(
        &dir,
        json!({"kind": "sessions", "sessions": 2, "steps": 40, "base_tokens": 200, "gen_tokens": 40,
               "tool_tokens": 20, "think_s": 0.0, "spread": 0.0, "stagger_s": 0.1, "duration_s": 30.0,
               "drain": true, "drain_grace_s": 5.0, "task_tokens": 16}),
    );
    let out = dir.join("run");
    let v = live(
        &s,
        url,
        &out,
        &["--repeat", "2", "--goal", "ttft_ms=300", "--duration", "8"],
    )
    .await;
    let sim = v["simulated_capacity"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(sim, 4.0, "{:?}", loads(&v, "simulated_levels"));
    let live = v["capacity"]
        .as_f64()
        .unwrap_or_else(|| panic!("{:?}", loads(&v, "levels")));
    assert!((live - sim).abs() <= 1.0, "live {live}: {:?}", loads(&v, "levels"));
    assert_eq!(v["knob"], "sessions");
    let n = v["levels_run"].as_u64().unwrap_or(0);
    assert_eq!(record_files(&out) as u64, 2 * n);
    for l in v["levels"].as_array().into_iter().flatten() {
        assert_eq!(l["runs"].as_array().map(Vec::len), Some(2), "{l}");
        assert_eq!(l["records"].as_array().map(Vec::len), Some(2), "{l}");
    }
}

/// An open-loop rate live, guided: the knob is `rate_rps` and the live capacity is the simulator's within one
/// resolution step (1 rps here: the knee of Poisson arrivals is soft, near 5 rps for 4 slots of 0.65 s requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_rate_search_matches_the_simulator_within_a_step() {
    let sim = start().await;
    let url = sim.base.as_str();
    let dir = tmp("rate");
    let s = write_scenario(
        &dir,
        json!({"kind": "poisson", "num_requests": 60, "rate_rps": 3.0,
               "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 40}}),
    );
    let out = dir.join("run");
    let v = live(&s, url, &out, &["--resolution", "1", "--min", "0.5", "--max", "20"]).await;
    assert_eq!(v["knob"], "rate_rps");
    let sim = v["simulated_capacity"].as_f64().unwrap_or_else(|| panic!("{v}"));
    let live = v["capacity"]
        .as_f64()
        .unwrap_or_else(|| panic!("{:?}", loads(&v, "levels")));
    assert!(
        (live - sim).abs() <= 1.0 + 1e-9,
        "live {live} vs simulated {sim}: {:?}",
        loads(&v, "levels")
    );
    assert_eq!(record_files(&out) as u64, v["levels_run"].as_u64().unwrap_or(0));
}

/// A trace workload read from its file (`path`, Mooncake JSONL) is searched by its speed-up, 1 / `time_scale`.
#[tokio::test]
async fn a_trace_file_is_searched_by_its_speedup() {
    let dir = tmp("trace");
    let rows: Vec<String> = (0..200)
        .map(|i| {
            format!(
                r#"{{"timestamp": {}, "input_length": 256, "output_length": 20, "hash_ids": [{i}]}}"#,
                i * 250
            )
        })
        .collect();
    std::fs::write(dir.join("trace.jsonl"), rows.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    let s = write_scenario(&dir, json!({"kind": "trace", "path": "trace.jsonl"}));
    let s = s.to_str().unwrap_or("");
    let v = capacity::capacity(&args(&[
        "--scenario",
        s,
        "--simulate",
        "--json",
        "--goal",
        "ttft_ms=300",
    ]))
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(v["knob"], "speedup");
    let cap = v["capacity"].as_f64().unwrap_or_else(|| panic!("{v:#}"));
    // 4 requests/s at the trace's own speed; 4 slots of ≈ 0.33 s requests serve at most ≈ 12 rps.
    assert!(cap * 4.0 > 2.0 && cap * 4.0 < 13.0, "speed-up capacity {cap}");
    let text = capacity::render(&v);
    assert!(text.contains("capacity speedup = "), "{text}");
    let e = capacity::capacity(&args(&["--scenario", s, "--simulate", "--knob", "rate_rps"]))
        .await
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.starts_with("knob") && e.contains("\"speedup\""), "{e}");
    let e = capacity::capacity(&args(&["--scenario", s, "--simulate", "--knob", "time_scale"]))
        .await
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("speedup") && e.contains("1 / time_scale"), "{e}");
}
