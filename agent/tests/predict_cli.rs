//! `loadshape predict` as a user runs it: simulated vs live side by side (live here: the simulator's own records,
//! so the errors of the matching seed are exactly 0), the seeds' spread, the live runs' spread, and refusals.

mod common;
#[path = "common/scratch.rs"]
mod scratch;

use std::path::PathBuf;

use common::loadshape;
use scratch::Scratch;
use serde_json::{Value, json};

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("predict-{name}"))
}

fn profile() -> Value {
    json!({"name": "twin", "block_size": 16, "num_kv_blocks": 4000, "max_num_seqs": 16,
           "max_num_batched_tokens": 4096, "step_fixed_ms": 12.0, "per_seq_ms": 0.5, "per_ctx_token_ms": 0.0005,
           "prefill_tokens_per_ms": 8.0, "prefill_fixed_ms": 3.0, "prefill_ctx_ms_per_ktok": 0.05,
           "host_cache": {"capacity_tokens": 100000, "restore_tokens_per_ms": 200.0}})
}

fn scenario(seed: u64, profile: Value) -> Value {
    json!({"model": "engine", "seed": seed, "counterfactuals": false,
           "workload": {"kind": "poisson", "num_requests": 60, "rate_rps": 4.0,
                        "prompt": {"dist": "uniform", "min": 100, "max": 1500},
                        "output": {"dist": "uniform", "min": 16, "max": 64}, "shared_prefix_tokens": 512},
           "profile": profile, "slo": {"ttft_ms": 500.0, "tpot_ms": 50.0}})
}

fn write(path: &PathBuf, v: &Value) {
    std::fs::write(path, v.to_string()).unwrap_or_else(|e| panic!("{e}"));
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[test]
fn predict_sets_simulated_beside_live() {
    let d = dir("side");
    let (sc, pf) = (d.join("sc.json"), d.join("profile.json"));
    write(
        &sc,
        &scenario(
            7,
            json!({"name": "other", "block_size": 16, "num_kv_blocks": 100, "max_num_seqs": 1,
        "max_num_batched_tokens": 64, "step_fixed_ms": 1, "per_seq_ms": 0, "per_ctx_token_ms": 0,
        "prefill_tokens_per_ms": 1}),
        ),
    );
    write(&pf, &profile());
    // Two "live" runs: the simulator's records of the scenario with the profile, seeds 7 and 8.
    let mut runs = Vec::new();
    for seed in [7, 8] {
        let one = d.join(format!("sc{seed}.json"));
        write(&one, &scenario(seed, profile()));
        let rec = d.join(format!("run{seed}.jsonl"));
        let o = loadshape(&["simulate", s(&one), "--records", s(&rec)], None);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        runs.push(rec);
    }
    let o = loadshape(
        &[
            "predict",
            s(&sc),
            "--profile",
            s(&pf),
            "--against",
            s(&runs[0]),
            "--against",
            s(&runs[1]),
            "--seeds",
            "4",
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["seeds"], json!([7, 8, 9, 10]));
    // Seed 7 with the profile IS run 7: every error is 0 (to the last bits the JSONL records' decimals keep),
    // under the scoring module's names.
    let errors = v["errors"].as_object().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(errors.len(), shared::predict::FIELDS.len(), "{v}");
    for (f, e) in errors {
        assert!(e.as_f64().is_some_and(|e| e.abs() < 1e-12), "{f}: {e}");
    }
    assert_eq!(v["simulated"]["completed"], v["live"]["completed"]);
    assert_eq!(v["live_runs"].as_array().map(Vec::len), Some(2));
    // Spreads: the seeds' and the two live runs' (which differ: different seeds).
    let ss = &v["simulated_spread"]["ttft_p50_ms"];
    assert!(
        ss["min"].as_f64() <= ss["mean"].as_f64() && ss["mean"].as_f64() <= ss["max"].as_f64(),
        "{ss}"
    );
    let ls = &v["live_spread"]["ttft_p50_ms"];
    assert!(ls["min"].as_f64() < ls["max"].as_f64(), "{ls}");
    // The text table names each compared field.
    let o = loadshape(
        &[
            "predict",
            s(&sc),
            "--profile",
            s(&pf),
            "--against",
            s(&runs[1]),
            "--seeds",
            "2",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for f in [
        "ttft_p90_ms",
        "tpot_p99_ms",
        "e2el_p99_ms",
        "cached_share_achieved",
        "request_throughput_rps",
    ] {
        assert!(text.contains(f), "{text}");
    }
    assert!(text.contains('%'), "{text}");
}

#[test]
fn predict_refuses_what_it_cannot_compare() {
    let d = dir("refuse");
    let (sc, pf) = (d.join("sc.json"), d.join("profile.json"));
    write(&sc, &scenario(1, profile()));
    // A profile whose max_model_len no request fits.
    let mut small = profile();
    small["max_model_len"] = json!(64);
    write(&pf, &small);
    let o = loadshape(&["predict", s(&sc), "--profile", s(&pf)], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("does not fit the scenario"),
        "{err}"
    );
    // A bad profile file names the path and the field.
    let mut bad = profile();
    bad["prefill_ctx_ms_per_ktok"] = json!(-2);
    write(&pf, &bad);
    let o = loadshape(&["predict", s(&sc), "--profile", s(&pf)], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("profile.json") && err.contains("prefill_ctx_ms_per_ktok"),
        "{err}"
    );
    // Live records that are all unreadable: the first bad line is named.
    write(&pf, &profile());
    let junk = d.join("junk.jsonl");
    std::fs::write(&junk, "not json\n").unwrap_or_else(|e| panic!("{e}"));
    let o = loadshape(&["predict", s(&sc), "--profile", s(&pf), "--against", s(&junk)], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("junk.jsonl: no records (1 unreadable line(s); line 1: expected ident"),
        "{err}"
    );
    // The seed model has no engine profile.
    let seed = d.join("seed.json");
    std::fs::write(
        &seed,
        std::fs::read_to_string("../examples/seed-baseline.json").unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    write(&pf, &profile());
    let o = loadshape(&["predict", s(&seed), "--profile", s(&pf)], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("engine-model scenario"), "{err}");
}

/// Like with like (issue #17 item 5): a live run stopped early is compared with the simulated requests of its own
/// window. "Live" here is the simulator's own run of the same seed, stopped at a third of its span (its records cut
/// as a stopped replay writes them), so the windowed prediction matches it exactly, while the whole simulated run
/// (what predict compared before) does not.
#[test]
fn a_stopped_run_is_compared_with_the_simulated_requests_of_its_window() {
    use loadshape::replay::records::read_records;
    use shared::window::{InFlight, clip};
    let d = dir("window");
    let (sc, pf, rec, cut) = (
        d.join("sc.json"),
        d.join("profile.json"),
        d.join("all.jsonl"),
        d.join("cut.jsonl"),
    );
    let mut heavy = scenario(7, profile());
    heavy["workload"]["num_requests"] = json!(300);
    heavy["workload"]["rate_rps"] = json!(12.0);
    write(&sc, &heavy);
    write(&pf, &profile());
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (all, bad) = read_records(&rec).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty());
    let span = all.iter().map(|r| r.t_submit + r.wall_s).fold(0.0, f64::max);
    let stopped = clip(&all, span / 3.0, InFlight::Cut);
    assert!(stopped.iter().any(|r| !r.ok), "the stop cut requests that were running");
    let lines: Vec<String> = stopped
        .iter()
        .map(|r| serde_json::to_string(r).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    std::fs::write(&cut, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));

    let predict = |against: &PathBuf| -> Value {
        let o = loadshape(
            &[
                "predict",
                s(&sc),
                "--profile",
                s(&pf),
                "--against",
                s(against),
                "--seeds",
                "1",
                "--json",
            ],
            None,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"))
    };
    let v = predict(&cut);
    let end = v["window_s"].as_f64().unwrap_or_else(|| panic!("a window: {v}"));
    assert!(
        (end - span / 3.0).abs() < 1e-3,
        "the window ends where the stopped run's records do: {end}"
    );
    assert_eq!(v["simulated"]["completed"], v["live"]["completed"], "{v}");
    assert_eq!(v["simulated"]["failed"], v["live"]["failed"], "{v}");
    for (f, e) in v["errors"].as_object().unwrap_or_else(|| panic!("{v}")) {
        assert!(e.as_f64().is_some_and(|e| e.abs() < 1e-6), "{f}: {e}");
    }
    assert!(v["notes"].to_string().contains("window"), "{v}");
    // The whole run is not windowed, and the whole simulated run differs from the stopped one.
    let whole = predict(&rec);
    assert!(whole["window_s"].is_null(), "{whole}");
    assert_ne!(whole["simulated"]["completed"], v["simulated"]["completed"]);
}

/// Records with impossible values are skipped with a note that counts them, by every reader: `report` printed a
/// mean TTFT of −1.25e298 ms for one `ttft_s` of −1e300, `predict --against` printed negative live latencies for
/// negative `wall_s`, and `calibrate --from` fitted a profile from records whose every `wall_s` was negative.
#[test]
fn impossible_values_are_skipped_and_counted() {
    let d = dir("impossible");
    let (sc, pf, rec, bad) = (
        d.join("sc.json"),
        d.join("profile.json"),
        d.join("run.jsonl"),
        d.join("bad.jsonl"),
    );
    write(&sc, &scenario(7, profile()));
    write(&pf, &profile());
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&rec).unwrap_or_else(|e| panic!("{e}"));
    let edit = |f: &dyn Fn(usize, &mut Value)| -> String {
        text.lines()
            .enumerate()
            .map(|(i, l)| {
                let mut v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}"));
                f(i, &mut v);
                v.to_string() + "\n"
            })
            .collect()
    };
    std::fs::write(
        &bad,
        edit(&|i, v| {
            if i == 0 {
                v["ttft_s"] = json!(-1e300);
            } else if i % 10 == 0 {
                v["wall_s"] = json!(-3.0);
            }
        }),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = loadshape(&["report", s(&bad), "--json"], None);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    assert!(err.contains("impossible value: ttft_s is -1e300"), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    let mean = v["summary"]["ttft_mean_ms"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert!(mean > 0.0 && mean < 1e6, "{mean}");
    assert_eq!(
        v["summary"]["completed"].as_u64(),
        Some(54),
        "60 less the 6 skipped: {v}"
    );

    let o = loadshape(
        &[
            "predict",
            s(&sc),
            "--profile",
            s(&pf),
            "--against",
            s(&bad),
            "--seeds",
            "1",
            "--json",
        ],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("6 unreadable line(s) skipped"), "{out}");
    assert!(!out.contains("\"-"), "no negative figure: {out}");

    let all_negative = d.join("negative.jsonl");
    std::fs::write(&all_negative, edit(&|_, v| v["wall_s"] = json!(-1.0))).unwrap_or_else(|e| panic!("{e}"));
    let o = loadshape(
        &["calibrate", "--from", s(&all_negative), "--out", s(&d.join("fit"))],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no records in") && err.contains("impossible value: wall_s is -1"),
        "{err}"
    );
}

/// `predict --deployment FILE` (what `calibrate --deployment` writes, edited for a what-if): the deployment's
/// roofline replaces the scenario's profile; the same efficiencies on a faster GPU decode faster.
#[test]
fn predict_with_a_deployment_and_a_what_if() {
    let d = dir("deployment");
    let sc = d.join("sc.json");
    write(&sc, &scenario(5, profile()));
    let dep = |gpu: &str| {
        json!({"model": "llama-3.1-8b", "gpu": gpu, "max_num_seqs": 16,
               "efficiency": {"mfu": 0.42, "bandwidth_utilization": 0.71, "step_overhead_ms": 2.3,
                              "link_utilization": 0.5, "allreduce_latency_us": 10.0}})
    };
    let run = |gpu: &str| {
        let path = d.join(format!("{gpu}.json"));
        write(&path, &dep(gpu));
        let o = loadshape(
            &["predict", s(&sc), "--deployment", s(&path), "--seeds", "2", "--json"],
            None,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap_or_else(|e| panic!("{e}"))
    };
    let h100 = run("h100-sxm");
    assert!(
        h100["deployment"]
            .as_str()
            .is_some_and(|p| p.ends_with("h100-sxm.json")),
        "{h100}"
    );
    assert!(h100["profile"].is_null());
    let tpot = |v: &Value| v["simulated"]["tpot_p50_ms"].as_f64().unwrap_or_else(|| panic!("{v}"));
    // Batch-1 floor on an H100: 2.3 ms + 16.06 GB / (0.71 × 3.35 TB/s) ≈ 9.1 ms.
    assert!(tpot(&h100) > 9.0, "{}", tpot(&h100));
    let b200 = run("b200");
    assert!(
        tpot(&b200) < tpot(&h100),
        "b200 {} vs h100 {}",
        tpot(&b200),
        tpot(&h100)
    );
    // Both --profile and --deployment: the profile's server (its 12 ms step floor, its host cache) running the
    // deployment's model: steps priced by the deployment's roofline, so TPOT is the deployment's, not the
    // profile's (neither: the scenario's own profile); a bad deployment names the field.
    let pf = d.join("profile.json");
    write(&pf, &profile());
    let path = d.join("h100-sxm.json");
    let o = loadshape(
        &[
            "predict",
            s(&sc),
            "--profile",
            s(&pf),
            "--deployment",
            s(&path),
            "--seeds",
            "2",
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let both: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        both["profile"].as_str().is_some_and(|p| p.ends_with("profile.json")),
        "{both}"
    );
    assert!(
        both["deployment"]
            .as_str()
            .is_some_and(|p| p.ends_with("h100-sxm.json")),
        "{both}"
    );
    assert!(tpot(&both) < 12.0, "{}", tpot(&both));
    assert!(
        (tpot(&both) / tpot(&h100) - 1.0).abs() < 0.1,
        "{} vs {}",
        tpot(&both),
        tpot(&h100)
    );
    let o = loadshape(&["predict", s(&sc), "--seeds", "1"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut bad = dep("h100-sxm");
    bad["efficiency"]["mfu"] = json!(1.5);
    write(&path, &bad);
    let o = loadshape(&["predict", s(&sc), "--deployment", s(&path)], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("h100-sxm.json") && err.contains("efficiency.mfu"),
        "{err}"
    );
}

/// Without `--profile` or `--deployment`, predict takes the scenario's own profile: the scenario's run of its own
/// seed compares with an error of 0 in every field.
#[test]
fn predict_without_a_profile_uses_the_scenarios_own() {
    let d = dir("own");
    let (sc, rec) = (d.join("sc.json"), d.join("run.jsonl"));
    write(&sc, &scenario(7, profile()));
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = loadshape(
        &["predict", s(&sc), "--against", s(&rec), "--seeds", "2", "--json"],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["profile"], Value::Null);
    let errors = v["errors"].as_object().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(errors.len(), shared::predict::FIELDS.len(), "{v}");
    for (f, e) in errors {
        assert!(e.as_f64().is_some_and(|e| e.abs() < 1e-12), "{f}: {e}");
    }
    // The table rows are the errors' fields, in order, with the same numbers.
    let table = v["table"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(table.len(), shared::predict::FIELDS.len());
    assert_eq!(table[0]["field"], "ttft_p50_ms");
    assert_eq!(table[0]["error"], errors["ttft_p50_ms"]);
    assert_eq!(table[0]["simulated"], v["simulated"]["ttft_p50_ms"]);
    // A profile given as the deployment: refused, naming the file.
    let pf = d.join("profile.json");
    write(&pf, &profile());
    let o = loadshape(&["predict", s(&sc), "--profile", s(&pf), "--deployment", s(&pf)], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--deployment"), "{err}");
}

/// Sessions whose context outgrows `max_model_len` (4,000 prompt tokens, 564 more a step, 64 out, 6,000 at most):
/// each fails at step 4 of 6, and its step 5 is never sent. `report` counts both and shows the first error, in text and JSON.
#[test]
fn report_shows_failed_and_never_sent_requests_and_the_first_error() {
    let d = dir("fail");
    let (sc, rec) = (d.join("sc.json"), d.join("run.jsonl"));
    let mut p = profile();
    p["max_model_len"] = json!(6000);
    write(
        &sc,
        &json!({"model": "engine", "seed": 3, "counterfactuals": false,
                "workload": {"kind": "sessions", "sessions": 2, "steps": 6, "base_tokens": 4000, "gen_tokens": 64,
                             "tool_tokens": 500, "think_s": 0.0, "stagger_s": 0.0, "respawn": false,
                             "dist": "uniform", "spread": 0.0, "duration_s": 60.0, "task_tokens": 0},
                "profile": p, "slo": {"ttft_ms": 500.0, "tpot_ms": 50.0}}),
    );
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = loadshape(&["report", s(&rec), "--json"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    let f = &v["failures"];
    assert_eq!(f["failed"], 2, "{v}");
    assert_eq!(f["never_sent"], 2, "{v}");
    assert_eq!(f["planned"], 12, "{v}");
    let first = f["first_error"].as_str().unwrap_or_default().to_string();
    assert!(first.contains("exceed max_model_len 6000"), "{first}");
    let o = loadshape(&["report", s(&rec)], None);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("Failed requests:") && text.contains("First error:"),
        "{text}"
    );
    assert!(text.contains(&first), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("Never sent (session ended on an error):") && l.ends_with(" 2 of 12 planned")),
        "{text}"
    );
}

#[test]
fn report_takes_the_slos_of_the_scenario_beside_the_records() {
    let d = dir("report-slo");
    let (sc, rec) = (d.join("scenario.json"), d.join("records.jsonl"));
    let mut v = scenario(4, profile());
    v["slo"] = json!({"ttft_ms": 120.0, "tpot_ms": 14.0, "e2e_ms": 2500.0});
    write(&sc, &v);
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec), "--json"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sim: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));

    // No flag: the scenario's SLOs, named; scored exactly as the simulator scored them.
    let o = loadshape(&["report", s(&rec), "--json"], None);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r["slo"],
        json!({"ttft_ms": 120.0, "tpot_ms": 14.0, "e2e_ms": 2500.0}),
        "{r}"
    );
    let from = r["slo_from"].as_str().unwrap_or_default();
    assert!(from.starts_with("from ") && from.ends_with("scenario.json"), "{from}");
    assert!(
        err.contains("SLOs: TTFT 120 ms, TPOT 14 ms, E2E 2500 ms (from "),
        "{err}"
    );
    for key in ["slo_attainment_ratio", "slo_goodput_rps"] {
        assert_eq!(r["summary"][key], sim["summary"][key], "{key}");
    }

    // A flag wins for its own target; the rest still come from the file.
    let o = loadshape(&["report", s(&rec), "--json", "--tpot-slo-ms", "35"], None);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r["slo"]["ttft_ms"].as_f64(), r["slo"]["tpot_ms"].as_f64()),
        (Some(120.0), Some(35.0))
    );
    let from = r["slo_from"].as_str().unwrap_or_default();
    assert!(from.starts_with("from --tpot-slo-ms, the rest from "), "{from}");

    // The same records elsewhere: the defaults, said as such.
    let other = dir("report-slo-none");
    let copy = other.join("run.jsonl");
    std::fs::copy(&rec, &copy).unwrap_or_else(|e| panic!("{e}"));
    let o = loadshape(&["report", s(&copy), "--json"], None);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r["slo"], json!({"ttft_ms": 500.0, "tpot_ms": 35.0}), "{r}");
    assert!(
        r["slo_from"].as_str().unwrap_or_default().contains("the defaults"),
        "{r}"
    );

    // A scenario.json that does not parse is named, and the defaults are used.
    std::fs::write(other.join("scenario.json"), "{\"model\": \"engine\", \"slo\": 3}")
        .unwrap_or_else(|e| panic!("{e}"));
    let o = loadshape(&["report", s(&copy)], None);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("scenario.json does not parse") && err.contains("SLOs: TTFT 500 ms, TPOT 35 ms"),
        "{err}"
    );
}

fn with_spec(acceptance: f64) -> Value {
    let mut p = profile();
    p["speculative"] = json!({"method": "mtp", "draft_tokens": 3, "acceptance": acceptance, "draft_cost_ms": 0.3});
    p
}

/// `--live-acceptance` takes the runs' spread of acceptance over their requests too: records of a profile whose
/// requests spread by τ = 1.5 around a rate of 0.5 give back about that τ (`acceptance.spread`), and a profile with
/// no spread then predicts their TPOT p99 (a request that accepted little) as the spread profile itself does.
#[test]
fn live_acceptance_takes_the_runs_spread_too() {
    let d = dir("live-spread");
    let (sc, pf, truth) = (d.join("sc.json"), d.join("profile.json"), d.join("truth.json"));
    let mut spread = with_spec(0.5);
    spread["speculative"]["acceptance_spread"] = json!(1.5);
    let mut sc_v = scenario(11, spread.clone());
    sc_v["workload"]["num_requests"] = json!(120);
    sc_v["workload"]["output"] = json!({"dist": "fixed", "tokens": 96});
    write(&sc, &sc_v);
    write(&pf, &with_spec(0.9));
    write(&truth, &spread);
    let rec = d.join("run.jsonl");
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let predict = |profile: &PathBuf| -> Value {
        let o = loadshape(
            &[
                "predict",
                s(&sc),
                "--profile",
                s(profile),
                "--against",
                s(&rec),
                "--seeds",
                "3",
                "--live-acceptance",
                "--json",
            ],
            None,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"))
    };
    let (p, t) = (predict(&pf), predict(&truth));
    let acc = &p["acceptance"];
    let tau = acc["spread"].as_f64().unwrap_or(-1.0);
    assert!((tau - 1.5).abs() < 0.45, "{acc}");
    assert!(acc["spread_requests"].as_u64().unwrap_or(0) >= 100, "{acc}");
    assert_eq!(acc["profile_spread"].as_f64(), Some(0.0), "{acc}");
    assert!(p["notes"].to_string().contains("acceptance_spread"), "{}", p["notes"]);
    let p99 = |v: &Value| v["simulated"]["tpot_p99_ms"].as_f64().unwrap_or(f64::NAN);
    assert!((p99(&p) / p99(&t) - 1.0).abs() < 0.1, "{} vs {}", p99(&p), p99(&t));
    let err = p["errors"]["tpot_p99_ms"].as_f64().unwrap_or(f64::NAN);
    assert!(err.abs() < 0.15, "{}", p["errors"]);
}

/// `--live-acceptance`: a profile that accepts 0.9 a position predicts a run that accepted 0.3 a position (the
/// simulator's records of the same scenario) far too fast; at the live runs' share the prediction is that run's.
#[test]
fn live_acceptance_takes_the_runs_share_in_place_of_the_profiles() {
    let d = dir("live-acc");
    let (sc, pf, plain) = (d.join("sc.json"), d.join("profile.json"), d.join("plain.json"));
    write(&sc, &scenario(7, with_spec(0.3)));
    write(&pf, &with_spec(0.9));
    write(&plain, &profile());
    let rec = d.join("run.jsonl");
    let o = loadshape(&["simulate", s(&sc), "--records", s(&rec)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let predict = |extra: &[&str], profile: &PathBuf| {
        let mut args = vec![
            "predict",
            s(&sc),
            "--profile",
            s(profile),
            "--against",
            s(&rec),
            "--seeds",
            "2",
        ];
        args.extend_from_slice(extra);
        loadshape(&args, None)
    };
    let json_of = |o: std::process::Output| -> Value {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"))
    };
    let at_profile = json_of(predict(&["--json"], &pf));
    let at_live = json_of(predict(&["--json", "--live-acceptance"], &pf));
    let share = at_profile["live"]["spec_acceptance"].as_f64().unwrap_or(-1.0);
    // (0.3 + 0.3² + 0.3³) / 3 drafted tokens accepted, within the draws' noise.
    assert!((share - 0.139).abs() < 0.03, "live share {share}");
    assert!(at_profile.get("acceptance").is_none(), "{at_profile}");
    let acc = &at_live["acceptance"];
    assert_eq!(acc["from"], "live");
    assert_eq!(acc["share"].as_f64(), Some(share));
    let rate = acc["rate"].as_f64().unwrap_or(-1.0);
    assert!((rate - 0.3).abs() < 0.03, "{acc}");
    assert!(
        (acc["profile_share"].as_f64().unwrap_or(-1.0) - (0.9 + 0.81 + 0.729) / 3.0).abs() < 1e-9,
        "{acc}"
    );
    let sim = at_live["simulated"]["spec_acceptance"].as_f64().unwrap_or(-1.0);
    assert!((sim - share).abs() < 0.03, "simulated {sim}, live {share}");
    let err = |v: &Value| v["errors"]["tpot_p50_ms"].as_f64().unwrap_or(f64::NAN);
    assert!(
        err(&at_profile) < -0.2,
        "at the profile's 0.9: {}",
        at_profile["errors"]
    );
    assert!(err(&at_live).abs() < 0.05, "at the live share: {}", at_live["errors"]);
    let notes = at_live["notes"].to_string();
    assert!(
        notes.contains("the live runs'")
            && notes.contains("per position for 3 drafted a step) in place of the profile's 0.8"),
        "{notes}"
    );

    // Refusals, each naming what is missing.
    let o = loadshape(&["predict", s(&sc), "--profile", s(&pf), "--live-acceptance"], None);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--against"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = predict(&["--live-acceptance"], &plain);
    let err_text = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err_text.contains("no `speculative` block"),
        "{err_text}"
    );
    let (sc_plain, rec_plain) = (d.join("sc-plain.json"), d.join("plain.jsonl"));
    write(&sc_plain, &scenario(7, profile()));
    let o = loadshape(&["simulate", s(&sc_plain), "--records", s(&rec_plain)], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = loadshape(
        &[
            "predict",
            s(&sc),
            "--profile",
            s(&pf),
            "--against",
            s(&rec_plain),
            "--live-acceptance",
        ],
        None,
    );
    let err_text = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err_text.contains("carries draft counts"),
        "{err_text}"
    );
}
