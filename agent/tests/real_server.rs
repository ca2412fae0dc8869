//! `loadshape replay` against a REAL OpenAI-compatible server: llama.cpp's `llama-server` with a tiny random-weight
//! model, built and made by `scripts/realserver/setup.sh` (outside the clone, once). The server runs on 127.0.0.1.
//!
//! The paths come from `LOADSHAPE_LLAMA_SERVER` and `LOADSHAPE_LLAMA_MODEL` (`scripts/test.sh` sets them). Without
//! them each test says so and passes, unless `LOADSHAPE_REQUIRE_REAL_SERVER=1` (set by `scripts/test.sh`, so CI can
//! never skip these silently), where a missing server fails the test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shared::record::{RequestRecord, UsageSource};

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

/// A running `llama-server`, ended (by its PID) when dropped.
struct Llama {
    child: Child,
    base: String,
    log: PathBuf,
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn paths() -> Option<(String, String)> {
    let server = std::env::var("LOADSHAPE_LLAMA_SERVER").ok().filter(|s| !s.is_empty());
    let model = std::env::var("LOADSHAPE_LLAMA_MODEL").ok().filter(|s| !s.is_empty());
    match (server, model) {
        (Some(s), Some(m)) => Some((s, m)),
        _ => {
            assert!(
                std::env::var("LOADSHAPE_REQUIRE_REAL_SERVER").as_deref() != Ok("1"),
                "LOADSHAPE_REQUIRE_REAL_SERVER=1 but LOADSHAPE_LLAMA_SERVER / LOADSHAPE_LLAMA_MODEL are not set \
                 (run scripts/realserver/setup.sh)"
            );
            eprintln!("skipped: no real server (set LOADSHAPE_LLAMA_SERVER and LOADSHAPE_LLAMA_MODEL)");
            None
        }
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
}

/// A plain HTTP/1.0 GET on 127.0.0.1: the status and the body (no client crate needed for a health probe).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    Some((status, body))
}

/// Starts `llama-server` with `slots` parallel slots and waits until `/health` answers 200.
fn start(server: &str, model: &str, slots: u32) -> Llama {
    let port = free_port();
    let log = std::env::temp_dir().join(format!("loadshape-llama-{}-{port}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let err = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let child = Command::new(server)
        .args([
            "-m",
            model,
            "--alias",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "-c",
            "32768",
            "--parallel",
            &slots.to_string(),
            "--threads",
            "1",
            "--threads-batch",
            "1",
        ])
        .args(["--metrics", "--slots"])
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("start {server}: {e}"));
    let mut llama = Llama {
        child,
        base: format!("http://127.0.0.1:{port}/v1"),
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((200, _)) = get(port, "/health") {
            return llama;
        }
        if let Ok(Some(status)) = llama.child.try_wait() {
            panic!(
                "llama-server exited ({status}): {}",
                std::fs::read_to_string(&llama.log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "llama-server did not become healthy in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loadshape-real-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir.join(name)
}

/// `loadshape replay` of 2 agent sessions × 3 steps through `endpoint`, then its records.
fn replay(llama: &Llama, endpoint: &str) -> Vec<RequestRecord> {
    let out = tmp(&format!("{endpoint}.jsonl"));
    let out_s = out.to_string_lossy().into_owned();
    let run = Command::new(BIN)
        .args(["replay", "--url", &llama.base, "--out", &out_s, "--endpoint", endpoint])
        .args([
            "--sessions",
            "2",
            "--steps",
            "3",
            "--base",
            "4000",
            "--gen",
            "64",
            "--tool",
            "200",
        ])
        .args([
            "--think",
            "0.2",
            "--spread",
            "0",
            "--stagger",
            "0.2",
            "--seed",
            "7",
            "--quiet",
        ])
        .args(["--timeout", "120", "--stall-timeout", "60"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "replay --endpoint {endpoint} failed ({}): {stderr}\nserver log: {}",
        run.status,
        std::fs::read_to_string(&llama.log).unwrap_or_default()
    );
    assert!(
        stderr.contains("dialect llamacpp"),
        "the dialect was not detected as llama.cpp: {stderr}"
    );
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("record {l}: {e}")))
        .collect()
}

/// Exact output lengths, usage-reported prompt and cached tokens, and prefix reuse across a session's steps.
fn check_sessions(records: &[RequestRecord], endpoint: &str) {
    assert_eq!(records.len(), 6, "{endpoint}: 2 sessions × 3 steps");
    for r in records {
        assert!(r.ok, "{endpoint}: request failed: {:?}", r.error);
        assert_eq!(
            r.gen_tokens, r.asked_tokens,
            "{endpoint}: the server must generate exactly the asked length"
        );
        assert_ne!(
            r.usage_source,
            UsageSource::Missing,
            "{endpoint}: usage must come from the server"
        );
        let prompt = r
            .prompt_tokens
            .unwrap_or_else(|| panic!("{endpoint}: no usage.prompt_tokens"));
        assert!(
            prompt > 1000,
            "{endpoint}: a 4000-token designed prompt came out as {prompt} tokens"
        );
        assert!(
            r.ttft_s.is_some_and(|t| t > 0.0 && t <= r.wall_s),
            "{endpoint}: TTFT within E2E"
        );
    }
    // Tokenizer matching (on by default): the filler was sized with the server's own /tokenize, so the prompts it
    // counted are the designed ones. Without it this BPE tokenizer counts about 1.5× (docs/replay.md).
    let mut ratios: Vec<f64> = records
        .iter()
        .filter_map(|r| Some(r.prompt_tokens? as f64 / r.designed_prompt_tokens? as f64))
        .collect();
    assert_eq!(
        ratios.len(),
        records.len(),
        "{endpoint}: every record carries designed and realized tokens"
    );
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    // Measured here over runs: 1.004 to 1.066 (the nonce changes the filler; 6 records per route). The goal is 1 %
    // (issue #17, open): the samples /tokenize counts are not the sessions' exact text (task line, tool output, the
    // chat template). 15 % still fails by far without matching: unmatched, this tokenizer counts 1.2-1.5x.
    let tolerance = 0.15;
    eprintln!("{endpoint}: realized/designed prompt tokens, median {median:.4}");
    assert!(
        (median - 1.0).abs() < tolerance,
        "{endpoint}: realized/designed prompt tokens median {median:.3}"
    );
    for r in records.iter().filter(|r| r.step > 0) {
        let prev = records
            .iter()
            .find(|p| p.session == r.session && p.inst == r.inst && p.step + 1 == r.step)
            .unwrap_or_else(|| panic!("{endpoint}: no previous step for {r:?}"));
        let cached = r
            .cached_tokens
            .unwrap_or_else(|| panic!("{endpoint}: no cached_tokens on a warm step"));
        let prev_prompt = prev.prompt_tokens.unwrap_or(0);
        // The previous prompt is a prefix of this one: llama.cpp reuses (nearly) all of it from the slot or its
        // host-RAM prompt cache. Half is a loose floor that a client breaking the prefix would still miss by far.
        assert!(
            cached * 2 >= prev_prompt,
            "{endpoint}: step {} of session {} had {cached} cached tokens after a {prev_prompt}-token prompt",
            r.step,
            r.session
        );
        assert!(
            r.prompt_tokens.unwrap_or(0) > prev_prompt,
            "{endpoint}: the conversation grows"
        );
    }
}

#[test]
fn sessions_through_completions_and_chat_have_exact_lengths_and_reuse_the_prefix() {
    let Some((server, model)) = paths() else { return };
    let llama = start(&server, &model, 2);
    for endpoint in ["completions", "chat"] {
        let records = replay(&llama, endpoint);
        check_sessions(&records, endpoint);
    }
}
