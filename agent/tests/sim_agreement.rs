//! The `sim` target and `simulate` agree (issue #17 item 5): one agent-sessions scenario, simulated, and replayed
//! live against `loadshape sim-server` emulating the scenario's own profile, must give the same latencies — TTFT,
//! TPOT and E2E within 5 % at p50 and 10 % at p99 — because the server runs the very engine the simulator runs.
//! What may differ is what the live path adds: HTTP, the real-time loop's timer wake-ups, the realized prompt
//! tokens. The profile is slow on purpose (25 ms decode steps, 6 tokens per ms of prefill), so that a wake-up a
//! millisecond late on a busy machine is a small share of every latency, and each step's tool output is long (1,200
//! tokens: TTFT p50 ≈ 0.9 s), so that where an arrival falls inside a 25 ms step (fixed in the simulation, jittered
//! live) is a small share of its TTFT: with 300 tokens (TTFT p50 ≈ 0.2 s) that half-step moved the live p50 by up
//! to −6.5 % in 3 of 6 runs. The run takes about 26 s of wall time.
//! Runs the real binary, as a user does; the server is on 127.0.0.1.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

const PROFILE: &str = r#"{"name": "slow-twin", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 16,
  "max_num_batched_tokens": 4096, "step_fixed_ms": 25.0, "per_seq_ms": 0.5, "per_ctx_token_ms": 0.00005,
  "prefill_tokens_per_ms": 6.0, "prefill_fixed_ms": 5.0}"#;

fn scenario() -> String {
    format!(
        r#"{{"model": "engine", "seed": 11,
  "workload": {{"kind": "sessions", "ladder": "1500:5,2000:5,2500:5,3000:5,3500:5,4000:5", "gen_tokens": 30, "tool_tokens": 1200,
    "think_s": 0.3, "stagger_s": 0.3, "respawn": true, "duration_s": 26.0}},
  "profile": {PROFILE}}}"#
    )
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `loadshape sim-server --port 0 --profile-file P`, and its OpenAI base URL from the line it prints.
fn sim_server(profile: &std::path::Path) -> (Server, String) {
    let mut child = Command::new(BIN)
        .args(["sim-server", "--port", "0", "--profile-file"])
        .arg(profile)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sim-server");
    let stdout = child.stdout.take().expect("stdout");
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the listening line");
    let base = line
        .split("OpenAI base URL ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no base URL in {line:?}"))
        .to_string();
    (server, base)
}

fn json_of(args: &[&str]) -> Value {
    let out = Command::new(BIN).args(args).output().expect("run loadshape");
    assert!(
        out.status.success(),
        "loadshape {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("loadshape {args:?}: not JSON ({e})"))
}

#[test]
fn sim_server_and_simulate_agree_on_the_same_scenario() {
    let dir = Scratch::new("agree");
    let (sc, prof, out) = (
        dir.join("scenario.json"),
        dir.join("profile.json"),
        dir.join("live.jsonl"),
    );
    std::fs::write(&sc, scenario()).expect("write scenario");
    std::fs::write(&prof, PROFILE).expect("write profile");
    let (sc_s, out_s) = (sc.to_str().expect("utf-8 path"), out.to_str().expect("utf-8 path"));

    let simulated = json_of(&["simulate", "--json", sc_s]);
    let (_server, base) = sim_server(&prof);
    let replay = Command::new(BIN)
        .args([
            "replay",
            "--url",
            &base,
            "--model",
            "sim",
            "--quiet",
            "--metrics-url",
            "none",
        ])
        .args(["--scenario", sc_s, "--out", out_s, "--nonce", "7"])
        .output()
        .expect("run replay");
    assert!(
        replay.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let live = json_of(&["report", "--json", out_s]);
    let (sim, live) = (&simulated["summary"], &live["summary"]);

    assert_eq!(live["failed"], 0, "every live request completed: {live}");
    eprintln!("completed: simulated {}, live {}", sim["completed"], live["completed"]);
    let count = |v: &Value| v["completed"].as_f64().expect("completed");
    assert!(
        count(sim) >= 40.0,
        "enough requests for the percentiles to mean something: {}",
        count(sim)
    );
    assert!(
        (count(live) - count(sim)).abs() <= 0.05 * count(sim),
        "completed: live {} vs simulated {}",
        count(live),
        count(sim)
    );
    let mut misses = Vec::new();
    for (metric, bound) in [
        ("ttft_p50_ms", 0.05),
        ("tpot_p50_ms", 0.05),
        ("e2el_p50_ms", 0.05),
        ("ttft_p99_ms", 0.10),
        ("tpot_p99_ms", 0.10),
        ("e2el_p99_ms", 0.10),
    ] {
        let (s, l) = (
            sim[metric].as_f64().expect(metric),
            live[metric].as_f64().expect(metric),
        );
        let err = l / s - 1.0;
        eprintln!("{metric}: simulated {s:.2}, live {l:.2} ({:+.1} %)", 100.0 * err);
        if err.abs() > bound {
            misses.push(format!(
                "{metric}: live {l:.2} vs simulated {s:.2} ({:+.1} %, bound {bound})",
                100.0 * err
            ));
        }
    }
    assert!(misses.is_empty(), "the sim target and simulate disagree: {misses:?}");
}
