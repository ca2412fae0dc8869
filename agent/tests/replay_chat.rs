//! Conversations as agents send them (issue #18, item 3), end to end against `loadshape sim-server` (in-process,
//! 127.0.0.1:0), running the real binary: `--endpoint chat` sessions send a growing message list whose prefix the
//! server's cache reuses; against a server whose chat template re-renders earlier turns (`sim-server --template
//! rerender`) the reuse collapses and the report flags it; `--endpoint messages` (the Anthropic Messages API) runs
//! the same sessions. Each run is a few seconds.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use loadshape::sim_server::{Config, Template};
use shared::record::RequestRecord;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

#[path = "common/sim_server.rs"]
mod sim_server_helper;

use sim_server_helper::Sim;

#[path = "common/files.rs"]
mod files;
#[path = "common/scratch.rs"]
mod scratch;
use files::records;
use scratch::Scratch;

async fn sim(template: Template) -> Sim {
    sim_server_helper::start(Config {
        speed: 20.0,
        template,
        ..Config::default()
    })
    .await
}

fn summary(out: &Path) -> serde_json::Value {
    let path = format!("{}.summary.json", out.display());
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Two sessions of six steps whose growth (reply + tool output, ≈ 3,064 tokens a step) is large beside their
/// base (4,000, the least a session draws), against `base`;
/// returns the stdout (the report) after checking the run succeeded.
async fn sessions(base: &str, out: &Path, extra: &[&str]) -> String {
    let out_s = out.to_string_lossy().to_string();
    let mut args = vec![
        "replay",
        "--url",
        base,
        "--model",
        "sim",
        "--out",
        &out_s,
        "--sessions",
        "2",
        "--steps",
        "6",
        "--spread",
        "0",
        "--base",
        "4000",
        "--gen",
        "64",
        "--tool",
        "3000",
        "--think",
        "0.02",
        "--stagger",
        "0.02",
        "--max-seconds",
        "20",
        "--seed",
        "5",
        "--match-tokenizer",
        "off",
        "--metrics-url",
        "none",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let o = tokio::time::timeout(
        Duration::from_secs(40),
        Command::new(BIN).args(&args).stdin(Stdio::null()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("replay did not finish in 40 s"))
    .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Σ cached / Σ designed cached over the warm steps (step ≥ 1).
fn reuse(recs: &[RequestRecord]) -> f64 {
    let warm = recs.iter().filter(|r| r.step > 0);
    let cached: u64 = warm.clone().map(|r| r.cached_tokens.unwrap_or(0)).sum();
    let designed: u64 = warm.map(|r| r.designed_cached_tokens.unwrap_or(0)).sum();
    assert!(designed > 0, "{recs:?}");
    cached as f64 / designed as f64
}

fn check_records(recs: &[RequestRecord]) {
    assert_eq!(recs.len(), 12, "2 sessions x 6 steps: {recs:?}");
    for r in recs {
        assert!(r.ok, "{r:?}");
        assert_eq!(r.gen_tokens, r.asked_tokens, "forced length: {r:?}");
        assert!(r.cached_tokens.is_some() && r.prompt_tokens.is_some(), "{r:?}");
        if r.step == 0 {
            assert_eq!(r.cached_tokens, Some(0), "cold start: {r:?}");
        }
    }
}

/// Chat message lists keep their prefix: each warm step reuses (nearly) all of the previous prompt and reply, in
/// both ways of sending tool outputs; the report says the reuse is as designed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_message_sessions_reuse_their_prefix() {
    let dir = Scratch::new("chat");
    let s = sim(Template::Stable).await;
    for tr in ["tool", "user"] {
        let out = dir.join(format!("chat-stable-{tr}.jsonl"));
        let stdout = sessions(&s.base, &out, &["--endpoint", "chat", "--tool-results", tr]).await;
        let recs = records(&out);
        check_records(&recs);
        for r in recs.iter().filter(|r| r.step > 0) {
            let (c, d) = (r.cached_tokens.unwrap_or(0), r.designed_cached_tokens.unwrap_or(0));
            // The engine caches whole 16-token blocks: all but the last partial block of the designed prefix.
            assert!(c + 16 >= d && c <= d, "{tr}: cached {c} of designed {d}: {r:?}");
        }
        let meta = summary(&out);
        assert_eq!(
            (meta["endpoint"].as_str(), meta["tool_results"].as_str()),
            (Some("chat"), Some(tr))
        );
        assert_eq!(meta["prefix_reuse"]["below_design"], false, "{meta}");
        assert!(stdout.contains("% of designed (ok)"), "{stdout}");
    }
}

/// Against a template that re-renders earlier assistant turns the cache hits only the system prompt and the task:
/// the reuse collapses, and both the live report and `loadshape report` flag it (summary.json too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_rerenders_earlier_turns_collapses_reuse_and_is_flagged() {
    let dir = Scratch::new("chat");
    let stable = sim(Template::Stable).await;
    let rerender = sim(Template::Rerender).await;
    let (out_a, out_b) = (dir.join("chat-a.jsonl"), dir.join("chat-b.jsonl"));
    let args = ["--endpoint", "chat", "--nonce", "11"];
    sessions(&stable.base, &out_a, &args).await;
    let stdout = sessions(&rerender.base, &out_b, &args).await;
    let (a, b) = (records(&out_a), records(&out_b));
    check_records(&b);
    let (ra, rb) = (reuse(&a), reuse(&b));
    eprintln!("warm-step reuse of the designed prefix: stable {ra:.3}, rerender {rb:.3}");
    assert!(ra > 0.95, "stable template: {ra}");
    assert!(rb < 0.6, "re-rendering template: {rb}");
    // What is left is the part before the first assistant turn (system + task), the same at every warm step.
    for y in b.iter().filter(|r| r.step > 0) {
        let first_warm = b.iter().find(|r| r.session == y.session && r.step == 1);
        assert_eq!(y.cached_tokens, first_warm.and_then(|r| r.cached_tokens), "{y:?}");
        assert!(y.cached_tokens.unwrap_or(0) > 0, "system + task still hit: {y:?}");
    }
    let meta = summary(&out_b);
    eprintln!(
        "reuse vs design (summary.json): stable {}, rerender {}",
        summary(&out_a)["prefix_reuse"]["ratio"],
        meta["prefix_reuse"]["ratio"]
    );
    assert_eq!(meta["prefix_reuse"]["below_design"], true, "{meta}");
    assert!(stdout.contains("WARNING: below 80 %"), "{stdout}");
    let rep = Command::new(BIN)
        .arg("report")
        .arg(&out_b)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&rep.stdout);
    assert!(
        rep.status.success() && text.contains("Reuse vs design:") && text.contains("WARNING"),
        "{text}"
    );
    // `report --json` flags it too, with the summary.json figures.
    let rep = Command::new(BIN)
        .args(["report", "--json"])
        .arg(&out_b)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let v: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["prefix_reuse"]["below_design"], true, "{v}");
    assert_eq!(v["prefix_reuse"]["ratio"], meta["prefix_reuse"]["ratio"], "{v}");
}

/// The Anthropic Messages API end to end: sessions with `tool_use`/`tool_result` blocks and with plain user
/// messages, usage mapped to the records (prompt = input + cache reads; cached = cache reads), prefix reuse as on
/// chat; against the re-rendering template it collapses too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sessions_run_against_sim_server() {
    let dir = Scratch::new("chat");
    let s = sim(Template::Stable).await;
    for tr in ["tool", "user"] {
        let out = dir.join(format!("messages-{tr}.jsonl"));
        let stdout = sessions(&s.base, &out, &["--endpoint", "messages", "--tool-results", tr]).await;
        let recs = records(&out);
        check_records(&recs);
        assert!(reuse(&recs) > 0.95, "{tr}: {recs:?}");
        let meta = summary(&out);
        assert_eq!(meta["endpoint"], "messages");
        assert_eq!(meta["prefix_reuse"]["below_design"], false, "{meta}");
        assert!(stdout.contains("Successful requests:"), "{stdout}");
    }
    let r = sim(Template::Rerender).await;
    let out = dir.join("messages-rerender.jsonl");
    sessions(&r.base, &out, &["--endpoint", "messages"]).await;
    let recs = records(&out);
    check_records(&recs);
    assert!(reuse(&recs) < 0.6, "{recs:?}");
    assert_eq!(summary(&out)["prefix_reuse"]["below_design"], true);
}
