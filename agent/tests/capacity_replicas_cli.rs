//! `loadshape capacity --simulate --replicas-for-slo`: the fewest replicas of a deployment that keep the goal at
//! the scenario's own load, GPUs and cost, over seeds.
//!
//! The deployment runs at most 4 sequences a replica (`max_num_seqs` 4): agent sessions beyond 4 a replica wait for
//! a slot about a whole request (64 tokens of decode, ≈ 0.45 s on an H100), past the 300 ms TTFT target. So 4
//! sessions need 1 replica, and 4× the sessions need more; a faster GPU (B200) shortens the wait and needs no more.

#[path = "common/scratch.rs"]
mod scratch;

use std::path::{Path, PathBuf};

use clap::Parser as _;
use loadshape::cmd::capacity;
use loadshape::{Cli, Command};
use scratch::Scratch;
use serde_json::{Value, json};

fn scenario(dir: &Path, name: &str, sessions: u32, gpu: &str, tp: Option<u32>) -> PathBuf {
    let mut deployment = json!({"model": "llama-3.1-8b", "gpu": gpu, "max_num_seqs": 4});
    if let Some(tp) = tp {
        deployment["tp"] = json!(tp);
    }
    let v = json!({
        "model": "engine", "seed": 3, "counterfactuals": false,
        "workload": {"kind": "sessions", "sessions": sessions, "steps": 6, "base_tokens": 1000, "gen_tokens": 64,
                     "tool_tokens": 100, "think_s": 0.5, "spread": 0.0, "stagger_s": 0.05, "duration_s": 60.0,
                     "drain": true, "drain_grace_s": 30.0, "task_tokens": 16},
        "deployment": deployment,
        "slo": {"ttft_ms": 300.0, "tpot_ms": 50.0}
    });
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, v.to_string()).unwrap_or_else(|e| panic!("{e}"));
    path
}

fn args(scenario: &Path, extra: &[&str]) -> capacity::Args {
    let mut argv = vec![
        "loadshape",
        "capacity",
        "--scenario",
        scenario.to_str().unwrap_or_default(),
        "--simulate",
        "--replicas-for-slo",
    ];
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
        Command::Capacity(a) => a,
        other => panic!("{other:?}"),
    }
}

async fn answer(scenario: &Path, extra: &[&str]) -> Value {
    capacity::capacity(&args(scenario, extra))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

async fn error(scenario: &Path, extra: &[&str]) -> String {
    format!(
        "{:#}",
        capacity::capacity(&args(scenario, extra))
            .await
            .expect_err("must be refused")
    )
}

fn band(v: &Value, key: &str) -> (f64, f64, f64) {
    let b = &v[key];
    let f = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("{key}.{k} in {v}"));
    (f("min"), f("median"), f("max"))
}

#[tokio::test]
async fn more_load_needs_more_replicas_and_a_faster_gpu_no_more() {
    let dir = Scratch::new("replicas-load");
    let light = answer(&scenario(&dir, "light", 4, "h100-sxm", None), &["--seeds", "3"]).await;
    assert_eq!(band(&light, "replicas"), (1.0, 1.0, 1.0), "{light}");
    let heavy = answer(&scenario(&dir, "heavy", 16, "h100-sxm", None), &["--seeds", "3"]).await;
    let (lo, med, hi) = band(&heavy, "replicas");
    assert!(lo > 1.0 && lo <= med && med <= hi, "{heavy}");
    // Every seed's answer is the fewest passing count: it passed, and one fewer failed (or it is 1).
    for s in heavy["seeds"].as_array().into_iter().flatten() {
        let r = s["replicas"].as_u64().unwrap_or_else(|| panic!("{s}"));
        let tried = s["tried"].as_array().cloned().unwrap_or_default();
        let outcome = |n: u64| tried.iter().find(|t| t["replicas"] == n).map(|t| t["pass"] == true);
        assert_eq!(outcome(r), Some(true), "{s}");
        assert_eq!(outcome(r - 1), Some(false), "{s}");
    }
    let heavier = answer(&scenario(&dir, "heavier", 32, "h100-sxm", None), &["--seeds", "3"]).await;
    assert!(band(&heavier, "replicas").1 > med, "{heavier}");
    // A faster GPU: fewer or equal replicas, seed for seed.
    let faster = answer(&scenario(&dir, "b200", 16, "b200", None), &["--seeds", "3"]).await;
    for (a, b) in heavy["seeds"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(faster["seeds"].as_array().into_iter().flatten())
    {
        assert!(b["replicas"].as_u64() <= a["replicas"].as_u64(), "h100 {a}\nb200 {b}");
    }
    // GPUs = replicas × tp.
    let tp2 = answer(&scenario(&dir, "tp2", 4, "h100-sxm", Some(2)), &["--seeds", "1"]).await;
    let s = &tp2["seeds"][0];
    assert_eq!(tp2["tp"], 2);
    assert_eq!(s["gpus"].as_u64(), s["replicas"].as_u64().map(|r| 2 * r), "{tp2}");
}

#[tokio::test]
async fn cost_is_gpus_times_the_price_times_the_run_over_its_work() {
    let dir = Scratch::new("replicas-cost");
    let path = scenario(&dir, "cost", 16, "h100-sxm", Some(2));
    let v = answer(&path, &["--seeds", "3", "--gpu-hour-price", "2.5"]).await;
    assert_eq!(v["gpu_hour_price"], 2.5);
    let mut per_session = Vec::new();
    for s in v["seeds"].as_array().into_iter().flatten() {
        let num = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k} in {s}"));
        let gpus = num("gpus");
        assert_eq!(gpus, 2.0 * num("replicas"));
        // By hand: the fleet's GPUs at 2.5 an hour for the run's seconds, over its sessions and tokens.
        let run_cost = gpus * 2.5 * num("run_s") / 3600.0;
        let c = &s["cost"];
        let close = |got: &Value, want: f64| {
            let g = got.as_f64().unwrap_or_else(|| panic!("{got} in {s}"));
            assert!((g - want).abs() <= 1e-12 * want.abs().max(1.0), "{g} vs {want} in {s}");
        };
        close(&c["run_cost"], run_cost);
        close(&c["per_session"], run_cost / num("sessions"));
        close(&c["per_request"], run_cost / num("requests"));
        close(
            &c["per_million_tokens"],
            run_cost / (num("prompt_tokens") + num("output_tokens")) * 1e6,
        );
        close(&c["per_million_output_tokens"], run_cost / num("output_tokens") * 1e6);
        per_session.push(run_cost / num("sessions"));
    }
    per_session.sort_by(f64::total_cmp);
    assert_eq!(
        band(&v, "cost_per_session"),
        (per_session[0], per_session[1], per_session[2])
    );
    // The text report says it too.
    let text = capacity::render_replicas(&serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}")));
    assert!(text.contains("per agent session") && text.contains("GPUs:"), "{text}");
}

#[tokio::test]
async fn bad_asks_are_refused_with_what_is_needed() {
    let dir = Scratch::new("replicas-bad");
    let path = scenario(&dir, "ok", 4, "h100-sxm", None);
    let e = error(&path, &["--gpu-hour-price", "-2"]).await;
    assert!(
        e.contains("--gpu-hour-price must be a positive amount per GPU-hour (got -2)"),
        "{e}"
    );
    let e = error(&path, &["--gpu-hour-price", "0"]).await;
    assert!(e.contains("--gpu-hour-price must be a positive"), "{e}");
    let e = error(&path, &["--seeds", "0"]).await;
    assert!(e.contains("--seeds must be in 1..="), "{e}");
    let e = error(&path, &["--router", "random"]).await;
    assert!(e.contains("--router must be one of round_robin"), "{e}");
    // A scenario with a profile and no deployment has no GPU count: say what is needed.
    let profile_only = dir.join("profile.json");
    std::fs::write(
        &profile_only,
        json!({"model": "engine", "seed": 1,
               "workload": {"kind": "closed_loop", "users": 2, "num_requests": 20,
                            "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 40}},
               "profile": {"name": "p", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 4,
                           "max_num_batched_tokens": 8192, "step_fixed_ms": 15.0, "per_seq_ms": 0.5,
                           "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 20.0},
               "slo": {"ttft_ms": 300.0, "tpot_ms": 35.0}})
        .to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let e = error(&profile_only, &[]).await;
    assert!(
        e.contains("deployment is needed to count GPUs (GPUs = replicas x tp)") && e.contains("\"deployment\""),
        "{e}"
    );
    // Flags that belong to the load search, or no --simulate, are refused by the parser.
    for bad in [vec!["--knob", "sessions"], vec!["--url", "http://127.0.0.1:1/v1"]] {
        let mut argv = vec![
            "loadshape",
            "capacity",
            "--scenario",
            "s.json",
            "--simulate",
            "--replicas-for-slo",
        ];
        argv.extend_from_slice(&bad);
        assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
    }
    assert!(Cli::try_parse_from(["loadshape", "capacity", "--scenario", "s.json", "--gpu-hour-price", "2"]).is_err());
    // A goal not met even by the most replicas: no answer for that seed, and a note saying why.
    let v = answer(&path, &["--seeds", "1", "--goal", "ttft_ms=1", "--max-replicas", "4"]).await;
    assert!(v["seeds"][0]["replicas"].is_null() && v["replicas"].is_null(), "{v}");
    assert!(
        v["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("not met with 4 replicas")),
        "{v}"
    );
}
