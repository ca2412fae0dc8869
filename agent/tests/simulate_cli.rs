//! Black-box tests of `loadshape simulate`: the built binary, run as a user runs it.

use std::process::Output;

mod common;
#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

const SEED_FORM: &str = include_str!("../../examples/seed-baseline.json");
const SEED_OUTPUT: &str = include_str!("../../shared/tests/data/seed_scenario_sim_output.json");

fn simulate(args: &[&str], stdin: Option<&str>) -> Output {
    let args: Vec<&str> = std::iter::once("simulate").chain(args.iter().copied()).collect();
    common::loadshape(&args, stdin)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn seed_report_equals_the_seed_output() {
    let o = simulate(&["--seed-report"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let want: serde_json::Value = serde_json::from_str(SEED_OUTPUT).expect("JSON");
    assert_eq!(got, want);
    assert_eq!(
        stdout(&o),
        SEED_OUTPUT,
        "byte for byte, as `print(json.dumps(report, indent=2))`"
    );
}

#[test]
fn json_output_has_exactly_the_seed_summary_fields() {
    let o = simulate(&["--json", "../examples/seed-baseline.json"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let want: serde_json::Value = serde_json::from_str(SEED_OUTPUT).expect("JSON");
    assert_eq!(got, want["scenario_comparisons"]["baseline"]);
    assert_eq!(got["total_requests"], serde_json::json!(80), "integers stay integers");
}

#[test]
fn reads_stdin_with_dash() {
    let o = simulate(&["-", "--json"], Some(SEED_FORM));
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(got["duration_s"], serde_json::json!(22.912));
}

#[test]
fn closed_loop_matches_the_seed_diagnostic() {
    let text = SEED_FORM
        .replace("\"closed_loop\": false", "\"closed_loop\": true")
        .replace("agent-shared-prefix", "closed-loop-illusion");
    let o = simulate(&["--json", "-"], Some(&text));
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let want: serde_json::Value = serde_json::from_str(SEED_OUTPUT).expect("JSON");
    assert_eq!(got, want["diagnostics"]["closed_loop_baseline"]);
}

#[test]
fn table_output_is_readable() {
    let o = simulate(&["../examples/seed-baseline.json"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("TTFT p50 / p99") && text.contains("3915.16 / 10235.3 ms"),
        "{text}"
    );
    assert!(text.contains("16.25 %"), "{text}");
}

#[test]
fn bad_input_fails_naming_the_field() {
    let cases = [
        (
            SEED_FORM.replace("\"mean_rps\": 8.5", "\"mean_rps\": 0"),
            "workload.mean_rps must be > 0 (got 0)",
        ),
        (
            SEED_FORM.replace("\"mean_rps\": 8.5", "\"mean_rps\": -3"),
            "workload.mean_rps must be > 0 (got -3)",
        ),
        (
            SEED_FORM.replace("\"max_batch_slots\": 16", "\"max_batch_slots\": 0"),
            "profile.max_batch_slots",
        ),
        (
            SEED_FORM.replace("\"prefill_tokens_per_ms\": 26.0", "\"prefill_tokens_per_ms\": 0"),
            "prefill_tokens_per_ms",
        ),
        (
            SEED_FORM.replace("\"num_requests\": 80", "\"num_requests\": 0"),
            "workload.num_requests",
        ),
        (SEED_FORM.replace("\"closed_loop\"", "\"closed_lop\""), "closed_lop"),
        ("not json".to_string(), "invalid scenario"),
    ];
    for (text, want) in cases {
        let o = simulate(&["-", "--json"], Some(&text));
        assert!(!o.status.success(), "accepted: {text}");
        assert!(stderr(&o).contains(want), "{want:?} not in {:?}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn missing_file_and_missing_argument_fail() {
    let o = simulate(&["/nonexistent/scenario.json"], None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent/scenario.json"), "{}", stderr(&o));
    let o = simulate(&[], None);
    assert!(!o.status.success());
}

/// A small engine-model scenario (the 10k example cut to 200 requests).
fn engine_small() -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../../examples/engine-10k.json")).expect("engine example is JSON");
    v["workload"]["num_requests"] = serde_json::json!(200);
    v.to_string()
}

#[test]
fn engine_model_json_has_summary_and_diagnostics() {
    let o = simulate(&["--json", "--timeline", "-"], Some(&engine_small()));
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(got["summary"]["completed"], serde_json::json!(200));
    assert!(got["summary"]["ttft_p99_ms"].as_f64().expect("ttft_p99_ms") > 0.0);
    assert!(got["diagnostics"]["cache_misses"].is_object());
    assert!(got["timeline"].as_array().is_some_and(|t| !t.is_empty()));
    // Deterministic: the same scenario gives the same bytes.
    let again = simulate(&["--json", "--timeline", "-"], Some(&engine_small()));
    assert_eq!(stdout(&o), stdout(&again));
}

#[test]
fn engine_model_table_and_records() {
    let dir = Scratch::new("simulate-cli");
    let records = dir.join("records.jsonl");
    let o = simulate(
        &["-", "--records", records.to_str().expect("utf-8 path")],
        Some(&engine_small()),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("TTFT") && text.contains("cache misses"), "{text}");
    let lines = std::fs::read_to_string(&records).expect("records written");
    assert_eq!(lines.lines().count(), 200);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().expect("a line")).expect("JSON line");
    assert!(first["ttft_s"].is_number());
    // Written records carry each request's own ITL quantiles and max (skipped only when no records are written),
    // and are written in submission order (as each completes, after every earlier one).
    let mut with_itl = 0;
    let mut last_submit = f64::NEG_INFINITY;
    for line in lines.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        if !r["itl"].is_null() {
            with_itl += 1;
            let (p50, p99, max) = (&r["itl"]["p50_ms"], &r["itl"]["p99_ms"], &r["itl"]["max_ms"]);
            assert!(
                [p50, p99, max].iter().all(|v| v.as_f64().is_some_and(|v| v > 0.0)),
                "{line}"
            );
        }
        let t = r["t_submit"].as_f64().expect("t_submit");
        assert!(t >= last_submit, "records out of submission order: {line}");
        last_submit = t;
    }
    assert!(with_itl > 100, "{with_itl} records with an ITL summary");
    // Writing records changes nothing in the report.
    let with = simulate(
        &["-", "--json", "--records", records.to_str().expect("utf-8 path")],
        Some(&engine_small()),
    );
    let without = simulate(&["-", "--json"], Some(&engine_small()));
    assert_eq!(stdout(&with), stdout(&without));
    // A records file that cannot be created fails before the run, naming it.
    let nowhere = dir.join("no-such-dir").join("records.jsonl");
    let o = simulate(
        &["-", "--records", nowhere.to_str().expect("utf-8 path")],
        Some(&engine_small()),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no-such-dir"), "{}", stderr(&o));
}

#[test]
fn engine_model_bad_field_is_named() {
    let text = engine_small().replace("\"block_size\":16", "\"block_size\":0");
    let o = simulate(&["-", "--json"], Some(&text));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("profile.block_size"), "{}", stderr(&o));
    let text = engine_small().replace("\"seed\":7", "\"seed\":7,\"sed\":1");
    let o = simulate(&["-", "--json"], Some(&text));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sed"), "{}", stderr(&o));
}

/// The 10k example with `workload` replaced.
fn engine_with_workload(workload: serde_json::Value) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../../examples/engine-10k.json")).expect("engine example is JSON");
    v["workload"] = workload;
    v.to_string()
}

#[test]
fn scenarios_too_large_for_memory_are_refused_with_the_estimate() {
    // Each of these used to abort with SIGABRT "memory allocation failed".
    let ladder = vec!["10000000:100000"; 4096].join(",");
    let cases = [
        (
            serde_json::json!({"kind": "poisson", "num_requests": 100_000_000u64, "rate_rps": 20.0}),
            "100,000,000",
        ),
        (
            serde_json::json!({"kind": "sessions", "sessions": 1_000_000, "steps": 100_000, "stagger_s": 0.0,
                "duration_s": 1e8}),
            "100,000,000,000",
        ),
        (
            serde_json::json!({"kind": "sessions", "ladder": ladder, "stagger_s": 0.0, "duration_s": 1e8}),
            "409,600,000",
        ),
    ];
    for (workload, estimate) in cases {
        let o = simulate(&["-"], Some(&engine_with_workload(workload.clone())));
        assert_eq!(o.status.code(), Some(1), "{workload}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("too large"), "{err}");
        assert!(
            err.contains(estimate),
            "{workload}: expected the estimate {estimate} in: {err}"
        );
        assert!(err.contains("limit of 2,000,000"), "{err}");
        assert!(err.contains("--max-requests"), "{err}");
    }
}

#[test]
fn the_size_limit_is_a_flag() {
    let small = engine_small();
    let o = simulate(&["--json", "-"], Some(&small));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = simulate(&["--json", "--max-requests", "100", "-"], Some(&small));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("about 200 requests or session steps, above the limit of 100"),
        "{}",
        stderr(&o)
    );
    // Memory is checked too: 4,096 plans of 100,000 steps hold ~4.9 GB.
    let ladder = vec!["10000:100000"; 4096].join(",");
    let big = engine_with_workload(serde_json::json!({"kind": "sessions", "ladder": ladder, "stagger_s": 0.0}));
    let o = simulate(&["--max-requests", "1000000000", "-"], Some(&big));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("of memory, above the limit of 4.0 GiB"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn replay_refuses_a_scenario_too_large_for_memory_before_sending() {
    // `replay --scenario` plans with the same size rule as `simulate`: the plan is never drawn. Port 9 (discard)
    // on loopback: nothing is sent, because the check comes before any connection.
    let dir = Scratch::new("replay-big");
    let scenario = dir.join("big.json");
    let workload = serde_json::json!({"kind": "poisson", "num_requests": 100_000_000u64, "rate_rps": 20.0});
    std::fs::write(&scenario, engine_with_workload(workload)).unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join("records.jsonl");
    let o = common::loadshape(
        &[
            "replay",
            "--url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--scenario",
            &scenario.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
        ],
        None,
    );
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("too large") && err.contains("100,000,000"), "{err}");
    assert!(!out.exists(), "nothing may be recorded for a refused run");
}

/// A recorded run's lines: 20 requests at uneven arrivals with their own prompt sizes, cache hits and outputs;
/// one failed (its asked output is simulated) and one whose server reported no prompt size (its designed one is).
fn recorded_run() -> Vec<shared::record::RequestRecord> {
    (0..20u64)
        .map(|i| {
            let line = serde_json::json!({
                "schema": 1, "session": i, "inst": 0, "step": 0, "steps_asked": 1, "base_asked": 900 + i,
                "ok": i != 7, "t_submit": 0.05 * (i * i) as f64 / 4.0, "ttft_s": 0.1, "wall_s": 1.0,
                "gen_tokens": if i == 7 { 3 } else { 10 + i }, "asked_tokens": 10 + i,
                "prompt_tokens": if i == 11 { None } else { Some(1000 + 37 * i) },
                "designed_prompt_tokens": 990 + 37 * i,
                "cached_tokens": if i % 3 == 0 { 0 } else { 256 }, "sse_frames": 10, "prompt_chars": 4000,
                "usage_source": "final_frame"
            });
            serde_json::from_value(line).expect("a record")
        })
        .collect()
}

#[test]
fn simulate_like_replays_a_runs_arrivals_and_lengths() {
    let dir = Scratch::new("like");
    let run = dir.join("run.jsonl");
    let live = recorded_run();
    let text: String = live
        .iter()
        .map(|r| serde_json::to_string(r).expect("json") + "\n")
        .collect();
    std::fs::write(&run, text).expect("write");
    let out = dir.join("sim.jsonl");
    let profile = shared::engine::presets::llama3_8b_h100().name;
    let (run_s, out_s) = (run.to_string_lossy(), out.to_string_lossy());
    let o = simulate(
        &["--like", &run_s, "--profile", &profile, "--json", "--records", &out_s],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(report["summary"]["completed"], 20, "{report}");
    let sim: Vec<shared::record::RequestRecord> = std::fs::read_to_string(&out)
        .expect("records")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect();
    assert_eq!(sim.len(), live.len());
    for (s, l) in sim.iter().zip(&live) {
        assert!((s.t_submit - l.t_submit).abs() < 1e-9, "arrival: {s:?} vs {l:?}");
        let prompt = l.prompt_tokens.or(l.designed_prompt_tokens);
        assert_eq!(s.prompt_tokens, prompt, "prompt: {s:?} vs {l:?}");
        let out = if l.ok { l.gen_tokens } else { l.asked_tokens };
        assert_eq!(s.gen_tokens, out, "output: {s:?} vs {l:?}");
    }
    // A scenario file gives the engine instead; a model other than the engine's is refused.
    let o = simulate(&["--like", &run_s, "../examples/seed-baseline.json"], None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--like needs an engine scenario"), "{}", stderr(&o));

    // A bad line is refused, naming it.
    let bad = dir.join("bad.jsonl");
    let first = serde_json::to_string(&live[0]).expect("json");
    std::fs::write(&bad, format!("{first}\n{{\"schema\": 1, \"nope\n{first}\n")).expect("write");
    let o = simulate(&["--like", &bad.to_string_lossy(), "--profile", &profile], None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("bad.jsonl line 2"), "{}", stderr(&o));
    let o = simulate(&["--like", &run_s], None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--profile"), "{}", stderr(&o));
}

#[test]
fn a_fleet_prints_each_replica_and_the_misses_routed_away() {
    let o = simulate(&["../examples/engine-fleet-sessions.json"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("4 replicas, router prefix_aware"), "{out}");
    for r in 0..4 {
        assert!(out.contains(&format!("replica {r}")), "{out}");
    }
    assert!(out.contains("routed to another replica"), "{out}");
    let o = simulate(&["--json", "../examples/engine-fleet-sessions.json"], None);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v["fleet"]["replicas"].as_array().map(Vec::len), Some(4));
    // A single engine's JSON has no fleet and no routed-away count.
    let o = simulate(&["--json", "-"], Some(&engine_small()));
    assert!(!stdout(&o).contains("fleet") && !stdout(&o).contains("routed_to_another"));
}

#[test]
fn compare_routers_shows_cached_share_and_ttft_per_router() {
    let o = simulate(
        &["--compare-routers", "--json", "../examples/engine-fleet-sessions.json"],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).expect("JSON");
    let share = |name: &str| {
        let row = rows.iter().find(|r| r["router"] == name).expect("a row per router");
        assert!(row["ttft_p50_ms"].as_f64().is_some() && row["ttft_p99_ms"].as_f64().is_some());
        row["cached_share"].as_f64().expect("a share")
    };
    assert_eq!(rows.len(), 4);
    assert!(share("session_affinity") > share("round_robin") + 0.3);
    assert!(share("prefix_aware") > share("round_robin") + 0.3);
    let o = simulate(
        &[
            "--compare-routers",
            "--replicas",
            "3",
            "../examples/engine-fleet-sessions.json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(
        table.starts_with("3 replicas") && table.contains("least_outstanding"),
        "{table}"
    );
}

#[test]
fn bad_fleet_flags_are_named() {
    let o = simulate(&["--router", "random", "../examples/engine-fleet-sessions.json"], None);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--router") && stderr(&o).contains("random"),
        "{}",
        stderr(&o)
    );
    let o = simulate(&["--replicas", "0", "../examples/engine-fleet-sessions.json"], None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("fleet.replicas"), "{}", stderr(&o));
    let o = simulate(&["--compare-routers", "-"], Some(&engine_small()));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--compare-routers"), "{}", stderr(&o));
}

/// A reader that goes away (`loadshape simulate … | head -1`) ends the command quietly with success: no panic
/// message, no exit 101. Standard output's read end is closed before the command writes anything.
#[test]
fn a_closed_standard_output_ends_the_command_quietly() {
    use std::process::{Command, Stdio};
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/engine-10k.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_loadshape"))
        .args(["simulate", example, "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run loadshape");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait for loadshape");
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert_eq!(stderr(&o), "");
}

/// A profile's `kv_tiers` reach the engine from a scenario file; a bad tier fails naming its field.
#[test]
fn engine_model_reads_kv_tiers() {
    let mut v: serde_json::Value = serde_json::from_str(&engine_small()).expect("JSON");
    v["profile"]["kv_tiers"] = serde_json::json!([
        {"name": "host", "capacity_tokens": 100000, "bytes_per_s": 25e9, "kv_bytes_per_token": 131072,
         "write": "always"},
        {"name": "disk", "capacity_tokens": 1000000, "restore_tokens_per_ms": 40, "evict": {"ttl_s": 60}}
    ]);
    let o = simulate(&["--json", "-"], Some(&v.to_string()));
    assert!(o.status.success(), "{}", stderr(&o));
    let got: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(got["summary"]["completed"], serde_json::json!(200));
    v["profile"]["kv_tiers"][1]["evict"]["ttl_s"] = serde_json::json!(0);
    let o = simulate(&["--json", "-"], Some(&v.to_string()));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("profile.kv_tiers[1].evict.ttl_s must be > 0"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn simulate_opens_with_a_one_line_header() {
    // The seed model: its profile, workload and SLOs, on stderr; stdout stays the table alone.
    let o = simulate(&["-"], Some(SEED_FORM));
    assert!(o.status.success(), "{}", stderr(&o));
    let first = stderr(&o).lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first,
        "profile baseline (seed model) · workload bursty: 80 requests at 8.5 req/s · SLOs TTFT 500 ms, TPOT 35 ms"
    );
    assert!(!stdout(&o).contains("SLOs TTFT"), "{}", stdout(&o));
    // `--json` carries it all: no header.
    let o = simulate(&["-", "--json"], Some(SEED_FORM));
    assert!(o.status.success() && stderr(&o).is_empty(), "{}", stderr(&o));

    // An engine scenario with a fleet from the flags and an E2E target.
    let sc = serde_json::json!({"model": "engine", "seed": 1, "counterfactuals": false,
        "workload": {"kind": "sessions", "sessions": 3, "steps": 4, "base_tokens": 2000, "gen_tokens": 32,
                     "tool_tokens": 200, "think_s": 0.0, "stagger_s": 0.0, "respawn": false, "duration_s": 30.0},
        "slo": {"ttft_ms": 800.0, "tpot_ms": 40.0, "e2e_ms": 9000.0}});
    let mut sc = sc;
    sc["profile"] = serde_json::from_str::<serde_json::Value>(&engine_small()).expect("JSON")["profile"].clone();
    let o = simulate(
        &["-", "--replicas", "2", "--router", "session_affinity"],
        Some(&sc.to_string()),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let first = stderr(&o).lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first,
        "profile llama-3-8b-1xh100 × 2 (session_affinity) · workload sessions: 3 sessions × ~4 steps · \
         SLOs TTFT 800 ms, TPOT 40 ms, E2E 9000 ms"
    );
}
