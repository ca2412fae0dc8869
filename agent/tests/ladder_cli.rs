//! Black-box tests of `loadshape ladder`: run the binary, read its output, and recompute what it claims.

use std::process::Output;

use serde_json::Value;
use shared::ladder::{Ladder, Shape, Weighting, stats};

mod common;
#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

fn loadshape(args: &[&str]) -> Output {
    common::loadshape(args, None)
}

fn json_of(args: &[&str]) -> Value {
    let out = loadshape(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn stats_of_the_seed_ladder() {
    let v = json_of(&[
        "ladder", "stats", "prod", "--growth", "2703", "--reply", "700", "--json",
    ]);
    assert_eq!(v["median"], 26_015);
    assert_eq!(v["p90"], 64_560);
    assert_eq!(
        format!("{:.4}", v["cached_share_tokens"].as_f64().expect("f64")),
        "0.9280"
    );
    assert_eq!(
        format!("{:.4}", v["cached_share_requests"].as_f64().expect("f64")),
        "0.9328"
    );
    assert_eq!(v["requests"], 192);
    for key in ["median_margins", "p90_margins"] {
        let m = &v[key];
        assert!(m["share_below"].as_f64().expect("share") < m["share_at_or_below"].as_f64().expect("share"));
    }
    let single = json_of(&[
        "ladder",
        "stats",
        "3500:9,4000:9,5000:28,6000:23,7000:16,9000:28,9500:7,10500:23,12500:30,20500:19",
        "--growth",
        "2703",
        "--reply",
        "700",
        "--weighting",
        "single",
        "--json",
    ]);
    assert_eq!(
        (single["median"].as_u64(), single["p90"].as_u64()),
        (Some(36_030), Some(69_154))
    );
}

#[test]
fn stats_human_output_and_errors() {
    let out = loadshape(&["ladder", "stats", "prod", "--growth", "2703", "--reply", "700"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("26,015") && text.contains("64,560") && text.contains("92.80 %"),
        "{text}"
    );
    let bad = loadshape(&["ladder", "stats", "3500:9,4000:0", "--growth", "2703", "--reply", "700"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("ladder rung 2: steps must be ≥ 1 (got 0)"));
    let bad = loadshape(&["ladder", "stats", "prod", "--growth", "100", "--reply", "700"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("reply_tokens must be ≤ growth_tokens"));
}

#[test]
fn solve_production_targets_and_recompute() {
    let args = [
        "ladder",
        "solve",
        "--median",
        "26032",
        "--p90",
        "64648",
        "--cached",
        "0.97",
        "--growth",
        "2703",
        "--reply",
        "700",
        "--slots",
        "10",
        "--base-step",
        "500",
        "--min-base",
        "3500",
        "--min-steps",
        "2",
        "--max-steps",
        "40",
        "--json",
    ];
    let v = json_of(&args);
    let ladder: Ladder = v["ladder"]
        .as_str()
        .expect("ladder string")
        .parse()
        .expect("printed ladder parses");
    let s = stats(&ladder, &Shape::new(2703, 700, 0), Weighting::Respawn).expect("stats");
    assert_eq!(v["median"], s.median);
    assert_eq!(v["p90"], s.p90);
    assert!((s.median as f64 - 26_032.0).abs() / 26_032.0 <= 0.0007);
    assert!((s.p90 as f64 - 64_648.0).abs() / 64_648.0 <= 0.0001);
    assert!(s.cached_share_tokens >= 0.935);
    assert_eq!(ladder.slots(), 10);
    assert!(
        ladder
            .rungs
            .iter()
            .all(|r| r.base_tokens >= 3500 && r.base_tokens % 500 == 0)
    );
    assert!(ladder.rungs.iter().all(|r| (2..=40).contains(&r.steps)));
    assert_eq!(v["cached_reached"], false);
    let notes = v["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| {
        n.as_str()
            .is_some_and(|n| n.contains("97.00 %") && n.contains("out of reach"))
    }));
    // Human-readable form says the same.
    let human: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let out = loadshape(&human);
    assert!(String::from_utf8_lossy(&out.stdout).contains("out of reach"));
}

#[test]
fn solve_other_targets() {
    let v = json_of(&[
        "ladder",
        "solve",
        "--median",
        "12000",
        "--p90",
        "30000",
        "--cached",
        "85%",
        "--growth",
        "1800",
        "--reply",
        "400",
        "--task",
        "150",
        "--slots",
        "8",
        "--base-step",
        "100",
        "--min-base",
        "1000",
        "--weighting",
        "single",
        "--json",
    ]);
    let ladder: Ladder = v["ladder"].as_str().expect("ladder").parse().expect("parses");
    let s = stats(&ladder, &Shape::new(1800, 400, 150), Weighting::Single).expect("stats");
    assert_eq!((v["median"].as_u64(), v["p90"].as_u64()), (Some(s.median), Some(s.p90)));
    assert!((s.median as f64 - 12_000.0).abs() / 12_000.0 < 0.005, "{}", s.median);
    assert!((s.p90 as f64 - 30_000.0).abs() / 30_000.0 < 0.005, "{}", s.p90);
    assert_eq!(ladder.slots(), 8);
}

#[test]
fn fit_example_logs() {
    for name in ["prod-log.jsonl", "prod-log.csv"] {
        let v = json_of(&["ladder", "fit", &example(name), "--json"]);
        assert_eq!(v["targets"]["requests"], 192, "{name}");
        let median = v["targets"]["median_tokens"].as_u64().expect("median");
        let got = v["solution"]["median"].as_u64().expect("solved median");
        assert!(
            (got as f64 - median as f64).abs() / (median as f64) < 0.01,
            "{name}: {got} vs {median}"
        );
        assert!(v["ladder"].as_str().is_some_and(|l| l.parse::<Ladder>().is_ok()));
        assert!(v["targets"]["mean_concurrency"].as_f64().is_some());
    }
}

#[test]
fn fit_reports_bad_lines() {
    let dir = Scratch::new("ladder-cli");
    let path = dir.join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"prompt_tokens\": 20000}\n{\"prompt_tokens\": -1}\n{\"prompt_tokens\": 60000}\nnope\n",
    )
    .expect("write");
    let p = path.to_string_lossy().to_string();
    let out = loadshape(&["ladder", "fit", &p]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2 malformed row(s)") && err.contains("line 2") && err.contains("line 4"),
        "{err}"
    );
    let v = json_of(&["ladder", "fit", &p, "--skip-bad", "--json"]);
    assert_eq!(v["targets"]["skipped_rows"], 2);
    assert_eq!(v["targets"]["requests"], 2);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("skipped 2 malformed row(s)") && notes.contains("growth per step assumed"),
        "{notes}"
    );
}

#[test]
fn fit_names_the_line_that_is_not_utf8() {
    let dir = Scratch::new("ladder-cli-utf8");
    let path = dir.join("latin1.csv");
    // A BOM, then a Latin-1 `é` on line 3: the BOM is skipped, line 3 is reported (it used to refuse the whole
    // file with "stream did not contain valid UTF-8").
    std::fs::write(
        &path,
        b"\xef\xbb\xbfprompt_tokens,session\n20000,a\n30000,caf\xe9\n40000,b\n",
    )
    .expect("write");
    let p = path.to_string_lossy().to_string();
    let out = loadshape(&["ladder", "fit", &p]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3: not valid UTF-8"), "{err}");
    let v = json_of(&["ladder", "fit", &p, "--skip-bad", "--json"]);
    assert_eq!(v["targets"]["requests"], 2);
}
