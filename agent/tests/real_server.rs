//! `loadshape replay` against a REAL OpenAI-compatible server: llama.cpp's `llama-server` with a tiny random-weight
//! model, built and made by `scripts/realserver/setup.sh` (outside the clone, once). The server runs on 127.0.0.1.
//!
//! The paths come from `LOADSHAPE_LLAMA_SERVER`, `LOADSHAPE_LLAMA_MODEL` and, for speculative decoding, the draft
//! model's `LOADSHAPE_LLAMA_DRAFT_MODEL` (`scripts/test.sh` sets them). Without them each test says so and passes,
//! unless `LOADSHAPE_REQUIRE_REAL_SERVER=1` (set by `scripts/test.sh`, so CI can never skip these silently), where a
//! missing server fails the test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shared::record::{RequestRecord, UsageSource};

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

/// A running `llama-server`, ended (by its PID) when dropped.
struct Llama {
    child: Child,
    base: String,
    port: u16,
    log: PathBuf,
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tests here time a server that computes on one thread of a 2-core machine: run beside each other (cargo's
/// default), one test's server and client take the core the other's calibrate probe is timing. So they run one at
/// a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// Starts `llama-server` with `slots` parallel slots, its log in `dir`, and waits until `/health` answers 200.
fn start(server: &str, model: &str, slots: u32, dir: &Path) -> Llama {
    start_with(server, model, slots, dir, None).unwrap_or_else(|e| panic!("{e}"))
}

/// [`start`], with a draft model for speculative decoding (`-md DRAFT --spec-type draft-simple`, `k` drafted tokens
/// per step) where given. A server that exits before it is healthy is an error that says why from its log: a
/// draft model it refused is named.
fn start_with(server: &str, model: &str, slots: u32, dir: &Path, draft: Option<(&str, u32)>) -> Result<Llama, String> {
    let port = free_port();
    let log = dir.join(format!("llama-{port}.log"));
    let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let err = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(server);
    cmd.args([
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
    .args(["--metrics", "--slots"]);
    if let Some((path, k)) = draft {
        // The draft computes on the same one thread as the target (`--spec-draft-threads` defaults to it).
        cmd.args([
            "-md",
            path,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            &k.to_string(),
        ]);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("start {server}: {e}"));
    let mut llama = Llama {
        child,
        base: format!("http://127.0.0.1:{port}/v1"),
        port,
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((200, _)) = get(port, "/health") {
            return Ok(llama);
        }
        if let Ok(Some(status)) = llama.child.try_wait() {
            let text = std::fs::read_to_string(&llama.log).unwrap_or_default();
            return Err(match draft {
                Some((path, _)) if text.contains("failed to load draft model") => format!(
                    "llama-server refused the draft model {path} (exited {status}): {}",
                    text.lines()
                        .filter(|l| l.contains(" E "))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                _ => format!("llama-server exited ({status}): {text}"),
            });
        }
        if Instant::now() >= deadline {
            return Err("llama-server did not become healthy in 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `loadshape replay` of 2 agent sessions × 3 steps through `endpoint` (its records in `dir`), then its records.
fn replay(llama: &Llama, dir: &Path, endpoint: &str) -> Vec<RequestRecord> {
    let out = dir.join(format!("{endpoint}.jsonl"));
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

/// Exact output lengths, usage-reported prompt and cached tokens, and prefix reuse across a session's steps; returns
/// the median of realized/designed prompt tokens.
fn check_sessions(records: &[RequestRecord], endpoint: &str) -> f64 {
    assert_eq!(records.len(), 6, "{endpoint}: 2 sessions × 3 steps");
    let mut unreported = 0;
    for r in records {
        assert!(r.ok, "{endpoint}: request failed: {:?}", r.error);
        // llama.cpp's Anthropic converter does not pass `ignore_eos` on: a reply on /v1/messages can end early
        // (docs/replay.md), never run long.
        if endpoint == "messages" {
            assert!(r.gen_tokens <= r.asked_tokens, "{endpoint}: longer than asked");
        } else {
            assert_eq!(
                r.gen_tokens, r.asked_tokens,
                "{endpoint}: the server must generate exactly the asked length"
            );
        }
        assert_ne!(
            r.usage_source,
            UsageSource::Missing,
            "{endpoint}: usage must come from the server"
        );
        // llama.cpp's Messages stream has no `message_start`, so no prompt usage, when its first token is part of a
        // UTF-8 character (about 2 % of requests on this random-weight model): the request completes, its prompt
        // tokens unknown (docs/replay.md). Every other record must carry them.
        if endpoint == "messages" && r.prompt_tokens.is_none() {
            unreported += 1;
            continue;
        }
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
    assert!(
        unreported <= 2,
        "{endpoint}: {unreported} of 6 records without prompt usage"
    );
    // Tokenizer matching (on by default): the filler was sized with the server's own /tokenize, so the prompts it
    // counted are the designed ones. Without it this BPE tokenizer counts about 1.5× (docs/replay.md).
    let mut ratios: Vec<f64> = records
        .iter()
        .filter_map(|r| Some(r.prompt_tokens? as f64 / r.designed_prompt_tokens? as f64))
        .collect();
    assert_eq!(
        ratios.len(),
        records.len() - unreported,
        "{endpoint}: every record with prompt usage carries designed and realized tokens"
    );
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    // The goal of issue #17: the median within 1 %. The filler is balanced (whole passes over the corpus, so a
    // prompt's count does not depend on the draw) and each tool output absorbs what the server added to the prompt
    // before it (chat template, tool header, the reply re-tokenized): docs/replay.md, "Tokenizer matching".
    // Unmatched, this tokenizer counts 1.2-1.5x.
    eprintln!("{endpoint}: realized/designed prompt tokens {ratios:.4?}, median {median:.4}");
    assert!(
        (median - 1.0).abs() <= 0.01,
        "{endpoint}: realized/designed prompt tokens median {median:.4} (goal: within 1 %; all: {ratios:.4?})"
    );
    for r in records.iter().filter(|r| r.step > 0 && r.prompt_tokens.is_some()) {
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
    median
}

#[test]
fn sessions_through_every_route_have_exact_lengths_designed_prompts_and_reuse_the_prefix() {
    let _one = one_at_a_time();
    let Some((server, model)) = paths() else { return };
    let dir = Scratch::new("real");
    let llama = start(&server, &model, 2, &dir);
    // Every dialect route llama.cpp speaks: its prompt as sent, its chat template, its Anthropic Messages converter,
    // its Responses API.
    let mut medians = Vec::new();
    for endpoint in ["completions", "chat", "messages", "responses"] {
        let records = replay(&llama, &dir, endpoint);
        medians.push((endpoint, check_sessions(&records, endpoint)));
    }
    eprintln!("realized/designed prompt tokens, median per route: {medians:.4?}");
}

/// A reasoning workload against a server whose model does not reason (the suite's tiny model: its chat template has
/// no thinking section): the controls each route sends (`chat_template_kwargs` on chat, `reasoning` on Responses)
/// are accepted, nothing is counted as reasoning (no TTFT-content, no reasoning tokens: the replies are content), and
/// the prefix is reused as in a plain session. A model that reasons is checked against sim-server
/// (`replay_shapes::reasoning_against_sim_server_breaks_reuse_unless_echoed`).
#[test]
fn a_reasoning_workload_on_a_model_that_does_not_reason_runs_as_plain_sessions() {
    let _one = one_at_a_time();
    let Some((server, model)) = paths() else { return };
    let dir = Scratch::new("real-reasoning");
    let llama = start(&server, &model, 2, &dir);
    let example = include_str!("../../examples/engine-sessions-10k.json");
    let mut sc: serde_json::Value = serde_json::from_str(example).unwrap_or_else(|e| panic!("{e}"));
    sc["workload"] = serde_json::json!({"kind": "sessions", "ladder": "2000:3,2000:3", "gen_tokens": 64,
        "tool_tokens": 200, "think_s": 0.2, "stagger_s": 0.2, "duration_s": 60.0,
        "reasoning": {"tokens": 32, "echo": true}});
    let path = dir.join("reasoning.json");
    std::fs::write(&path, sc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    for endpoint in ["chat", "responses"] {
        let out = dir.join(format!("reasoning-{endpoint}.jsonl"));
        let args = [
            "replay",
            "--url",
            &llama.base,
            "--endpoint",
            endpoint,
            "--scenario",
            &path.to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
            "--quiet",
            "--timeout",
            "120",
        ];
        run_ok(&llama, &args);
        let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let records: Vec<RequestRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("record {l}: {e}")))
            .collect();
        assert_eq!(records.len(), 6, "{endpoint}: 2 sessions × 3 steps");
        for r in &records {
            assert!(r.ok, "{endpoint}: {:?}", r.error);
            assert_eq!(
                r.gen_tokens, r.asked_tokens,
                "{endpoint}: the forced length, reply and budget"
            );
            assert!(
                r.reasoning_tokens.unwrap_or(0) == 0 && r.ttft_content_s.is_none(),
                "{endpoint}: a model without reasoning streamed reasoning: {r:?}"
            );
        }
        for r in records.iter().filter(|r| r.step > 0) {
            let prev = records
                .iter()
                .find(|p| p.session == r.session && p.step + 1 == r.step)
                .unwrap_or_else(|| panic!("{endpoint}: no previous step for {r:?}"));
            let (cached, prev_prompt) = (r.cached_tokens.unwrap_or(0), prev.prompt_tokens.unwrap_or(0));
            assert!(
                cached * 2 >= prev_prompt,
                "{endpoint}: {cached} cached after a {prev_prompt}-token prompt"
            );
        }
    }
}

/// Runs the binary; `Err(stderr)` when it fails.
fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("({}): {}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

/// Runs the binary; panics with its stderr (and the server's log) when it fails.
fn run_ok(llama: &Llama, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "loadshape {args:?} failed ({}): {}\nserver log tail: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&llama.log)
            .unwrap_or_default()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A short `calibrate --url` against llama.cpp (4 slots) is accepted with sane coefficients, and `predict` of a
/// held-out scenario (6 sessions on 4 slots, a shape the probe never sent) lands near a live run of it. The bounds
/// are loose on purpose: this machine is shared (2 cores; the server, the client and other builds compete), and
/// what the fit is worth is measured by `scripts/bench_fidelity.sh` (figures in docs/calibration.md), not here.
#[test]
fn calibrate_and_predict_against_the_real_server() {
    let _one = one_at_a_time();
    let Some((server, model)) = paths() else { return };
    let dir = Scratch::new("real");
    let llama = start(&server, &model, 4, &dir);
    let cal = dir.join("cal");
    let cal_s = cal.to_string_lossy().into_owned();
    // A loaded machine can garble a probe's timings (frames read in bunches, a descheduled server thread), and
    // then the fit refuses them ("the model explains too little"), as it should: one more probe is allowed.
    let args = [
        "calibrate",
        "--url",
        &llama.base,
        "--out",
        &cal_s,
        "--budget",
        "50",
        "--max-prompt-tokens",
        "2048",
        "--decode-tokens",
        "64",
    ];
    if let Err(first) = run(&args) {
        eprintln!("first calibrate refused, probing again: {first}");
        if let Err(second) = run(&args) {
            // Refused twice: it must be one of the documented refusals (never a crash or a bad profile), and no
            // profile is written. Where the machine is known to be quiet, LOADSHAPE_REQUIRE_FIT=1 makes it fatal.
            assert!(
                second.contains("cannot fit") && !cal.join("profile.json").exists(),
                "calibrate failed otherwise than by refusing the fit: {second}"
            );
            assert!(
                std::env::var("LOADSHAPE_REQUIRE_FIT").as_deref() != Ok("1"),
                "LOADSHAPE_REQUIRE_FIT=1 and calibrate refused twice: {second}"
            );
            eprintln!(
                "calibrate refused the probe twice (the machine is too loaded for its timings); held-out predict not \
                 checked: {second}"
            );
            return;
        }
    }
    let fit: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cal.join("fit.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("fit.json: {e}"));
    let text = std::fs::read_to_string(cal.join("profile.json")).unwrap_or_default();
    let profile = shared::engine::EngineProfile::from_json(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    eprintln!("fitted: {text}\nnotes: {}", fit["notes"]);
    // Limits from /props: 4 slots of 8,192 tokens.
    assert_eq!((profile.max_num_seqs, profile.max_model_len), (4, Some(8192)));
    // ... and llama-server's slot scheduler (decodes first, prompts in slot order up to n_batch).
    assert_eq!(
        profile.scheduler,
        shared::engine::profile::Scheduler::LlamaCpp,
        "{text}"
    );
    // `--from` the probe's own files, no flags: the limits come from their scrape sidecars, as /props gave them.
    let from: Vec<String> = std::fs::read_dir(cal.join("probe"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .flat_map(|p| ["--from".to_string(), p.display().to_string()])
        .collect();
    // llama-server closes every connection after a streamed response while its headers say keep-alive: a closed
    // loop without think time (the probe's phases) must not lose requests to it (a quarter to a third of them
    // failed with "connection closed before message completed" when the client reused those connections). Only
    // requests in flight when a phase's time ran out may fail (cut).
    let mut failed = Vec::new();
    for f in from.iter().filter(|f| !f.starts_with("--")) {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        failed.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<RequestRecord>(l).ok())
                .filter(|r| !r.ok && r.failure != Some(shared::record::FailureKind::Cut))
                .map(|r| format!("{f}: {:?}", r.error)),
        );
    }
    assert!(failed.is_empty(), "probe requests failed: {failed:#?}");
    let refit = dir.join("refit");
    let mut args = vec!["calibrate", "--out", refit.to_str().unwrap_or_default()];
    args.extend(from.iter().map(String::as_str));
    run_ok(&llama, &args);
    let text2 = std::fs::read_to_string(refit.join("profile.json")).unwrap_or_default();
    let refitted = shared::engine::EngineProfile::from_json(&text2).unwrap_or_else(|e| panic!("{e}: {text2}"));
    assert_eq!(
        (
            refitted.max_num_seqs,
            refitted.max_model_len,
            refitted.num_kv_blocks,
            refitted.max_num_batched_tokens,
            refitted.scheduler
        ),
        (
            profile.max_num_seqs,
            profile.max_model_len,
            profile.num_kv_blocks,
            profile.max_num_batched_tokens,
            profile.scheduler
        ),
        "{}",
        refitted.basis
    );
    assert!(refitted.basis.contains("llama.cpp /props (from "), "{}", refitted.basis);
    // Every coefficient finite and >= 0 (validate checks that too), with a finite standard error; the decode
    // step and the prefill rate positive.
    for (name, c) in fit["coefficients"].as_object().into_iter().flatten() {
        let (v, se) = (
            c["value"].as_f64().unwrap_or(-1.0),
            c["std_error"].as_f64().unwrap_or(-1.0),
        );
        assert!(v.is_finite() && v >= 0.0 && se.is_finite() && se >= 0.0, "{name}: {c}");
    }
    assert!(profile.step_fixed_ms + profile.per_seq_ms > 0.0 && profile.prefill_tokens_per_ms > 0.0);
    // Prefill cost grows with context on this server (REALSERVER.md): the fit finds it.
    assert!(profile.prefill_ctx_ms_per_ktok > 0.0, "{text}");
    // The fit explains the probe: decode on the better of its two R²s (with the probe's decode phases on a shared
    // prefix the bulk of gaps is narrow, so the robust one can swing below 0 while the plain one is 0.97; a loaded
    // machine's outliers pull the plain one down while the robust one stays 0.96), prefill on the robust one.
    // On a quiet machine both pass 0.8 (LOADSHAPE_REQUIRE_FIT=1 asks for that); elsewhere the floor is calibrate's
    // own (MIN_R2): CI's loaded runner gave decode 0.75 plain / 0.55 robust with prefill 0.94, and what such a fit
    // is worth is the held-out check below.
    let floor = if std::env::var("LOADSHAPE_REQUIRE_FIT").as_deref() == Ok("1") {
        0.8
    } else {
        shared::calibrate::MIN_R2
    };
    let r2 = |stage: &str, key: &str| fit[stage][key].as_f64().unwrap_or(0.0);
    // The probe's conversation: llama-server caches token ids and gets each reply back as text, which it tokenizes
    // again, so it finds only a part of the reply cached (≈ 0.2 with this model; docs/calibration.md).
    let notes = fit["notes"].to_string();
    assert!(
        notes.contains("reply_cached_share: ") && notes.contains("consecutive session steps of the previous reply"),
        "the conversation phase measured no reply share: {notes}"
    );
    assert!(
        profile.reply_cached_share < 0.6,
        "reply_cached_share {}: {notes}",
        profile.reply_cached_share
    );
    check_host_cache(&fit, &profile);
    assert!(
        r2("prefill", "r2_robust") > floor && r2("decode", "r2").max(r2("decode", "r2_robust")) > floor,
        "R² decode {} (robust {}) / prefill robust {} (floor {floor})",
        r2("decode", "r2"),
        r2("decode", "r2_robust"),
        r2("prefill", "r2_robust")
    );

    // The held-out scenario, live and predicted, on a fresh server: the simulation starts from one whose slots were
    // never used, and llama-server's slot choice (least recently used) and prompt order (by slot) depend on what
    // ran before (docs/calibration.md, "Like with like").
    drop(llama);
    let llama = start(&server, &model, 4, &dir);
    let scenario = dir.join("heldout.json");
    let sc = serde_json::json!({"model": "engine",
        "workload": {"kind": "sessions", "ladder": "1000:3,1000:3,1000:3,1000:3,1000:3,1000:3", "gen_tokens": 48,
                     "tool_tokens": 150, "think_s": 0.3, "stagger_s": 0.3, "duration_s": 120.0},
        "profile": serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default(),
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 3});
    std::fs::write(&scenario, sc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let (scenario_s, live) = (scenario.to_string_lossy().into_owned(), dir.join("heldout.jsonl"));
    let live_s = live.to_string_lossy().into_owned();
    run_ok(
        &llama,
        &[
            "replay",
            "--url",
            &llama.base,
            "--scenario",
            &scenario_s,
            "--out",
            &live_s,
            "--quiet",
        ],
    );
    let p = predict_json(&llama, &scenario_s, &cal, &live_s, &[]);
    eprintln!("held-out errors: {}", p["errors"]);
    for f in ["ttft_p50_ms", "tpot_p50_ms", "e2el_p50_ms"] {
        let e = p["errors"][f]
            .as_f64()
            .unwrap_or_else(|| panic!("no error for {f}: {}", p["errors"]));
        // HELDOUT_BOUND: see the constant.
        assert!(
            e.is_finite() && 1.0 + e > 1.0 / HELDOUT_BOUND && 1.0 + e < HELDOUT_BOUND,
            "{f}: predicted/live − 1 = {e:+.3} ({})",
            p["errors"]
        );
    }
}

/// `predict SCENARIO --profile CAL/profile.json --against LIVE --seeds 3 --json`, parsed.
fn predict_json(llama: &Llama, scenario: &str, cal: &Path, live: &str, extra: &[&str]) -> serde_json::Value {
    let profile = cal.join("profile.json").to_string_lossy().into_owned();
    let mut args = vec![
        "predict",
        scenario,
        "--profile",
        &profile,
        "--against",
        live,
        "--seeds",
        "3",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run_ok(llama, &args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("predict --json: {e}: {out}"))
}

/// With no cache flag, calibrate finds llama-server's host prompt cache (`--cache-ram`, on by default: 8192 MiB,
/// about 4M tokens of this model): the probe's returns phase brings sessions back after as many others as slots
/// and the server restores them. The probe parks far less than the cache holds, so the capacity is a lower bound
/// (said so); the restore, a copy within RAM, takes no measurable time beyond a warm hit, so its speed is a lower
/// bound too. Bounds: TIER_MIN_TOKENS, TIER_MIN_RESTORE_TOK_PER_MS.
fn check_host_cache(fit: &serde_json::Value, profile: &shared::engine::EngineProfile) {
    let t = &fit["tiers"];
    let host = profile
        .host_cache
        .unwrap_or_else(|| panic!("no host tier found with no cache flag: {t}"));
    let restored = t["returns"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["outcome"] == "restored").count());
    eprintln!(
        "host tier: {} tokens, {:.0} tokens/ms ({restored} returns restored; capacity by {}, speed by {})",
        host.capacity_tokens, host.restore_tokens_per_ms, t["capacity_found_by"], t["restore_found_by"]
    );
    assert_eq!(
        (t["capacity_found_by"].as_str(), t["restore_found_by"].as_str()),
        (Some("probe"), Some("probe")),
        "{t}"
    );
    // Every return restored: at least three (the speed needs them), and none recomputed (the cache is far larger
    // than what the probe parks).
    assert!(restored >= 3, "{restored} returns restored: {t}");
    assert!(
        t["returns"]
            .as_array()
            .is_some_and(|r| r.iter().all(|r| r["outcome"] != "recomputed")),
        "{t}"
    );
    assert!(t["capacity_lower_bound"] == true, "{t}");
    assert!(
        (TIER_MIN_TOKENS..=TIER_MAX_TOKENS).contains(&host.capacity_tokens),
        "capacity {}: {t}",
        host.capacity_tokens
    );
    // Restoring is timed at least as fast as a prefill on this machine. Not "faster than this calibration's
    // prefill": on some runs half the restores take about a recompute's time (see the constant), and the two rates
    // come out equal within noise (10.9 against 11.0 once); the simulator, which restores only where it beats
    // recomputing, prices such a return the same either way.
    assert!(
        host.restore_tokens_per_ms >= TIER_MIN_RESTORE_TOK_PER_MS,
        "restore {} tokens/ms (prefill {}): {t}",
        host.restore_tokens_per_ms,
        profile.prefill_tokens_per_ms
    );
    // What the server reports: llama.cpp's /props says nothing of the cache, and fit.json says so.
    assert!(t["server_report"].to_string().contains("--cache-ram"), "{t}");
}

/// Least capacity found for llama-server's host cache with `--budget 50` (a lower bound: what the returns phase
/// parks beyond the slots in its 10 s, 1,024-token sessions). Measured on the shared 2-core machine (2026-12-06,
/// load 5–11): 24,096, 29,248 and 32,432 tokens (14–17 returns, all restored); a sixth of that still shows the
/// cache beyond the slots.
const TIER_MIN_TOKENS: u64 = 4_096;
/// Most: the cache's own size, 8192 MiB at ≈ 2 KiB per token of this model.
const TIER_MAX_TOKENS: u64 = 4_200_000;
/// Least restore speed (a lower bound: restores took no measurable time beyond a warm hit, so the speed is their
/// tokens over two standard errors of the median excess). Measured (2026-12-06, load 5–11): 146, 218 and 584
/// tokens/ms with `--budget 50`, 35–164 with `--budget 180` (1,024-token restores; a noisier machine, a wider
/// bound); a prefill runs at 8–19 tokens/ms. Once (a clean CI-like run, 2026-12-06) 7 of 10 restores took ≈ 85 ms
/// beyond a warm hit, measured rather than bounded: 12.2 tokens/ms against that probe's prefill at 11.9; in a CI
/// run (2026-12-07) half the restores did, and the bound came out 10.9 against a prefill of 11.0. So the bound
/// is 10: a prefill's speed here, which a host tier that exists and is used always reaches.
const TIER_MIN_RESTORE_TOK_PER_MS: f64 = 10.0;

/// Largest factor between a held-out p50 predicted and live here (sim/live within [1/2, 2]). The goal (10 %) is
/// the benchmark's (`scripts/bench_fidelity.sh`, docs/calibration.md); this short probe on a 2-core machine, with
/// the live run on a fresh server, gave TTFT / TPOT / E2E p50 −6 / −17 / −15 % (2026-12-02). The bound was 4 while
/// the probe lost a quarter of its requests to llama-server's closed connections and the live run started on the
/// probe's server: then two live runs of one scenario minutes apart differed by up to 3× on a loaded machine.
const HELDOUT_BOUND: f64 = 2.0;

/// Draft tokens per step of the speculating server (`--spec-draft-n-max`).
const DRAFT_K: u32 = 4;

/// The draft model made by `scripts/realserver/setup.sh` (`LOADSHAPE_LLAMA_DRAFT_MODEL`); like [`paths`], missing it
/// skips unless `LOADSHAPE_REQUIRE_REAL_SERVER=1`.
fn draft_path() -> Option<String> {
    let draft = std::env::var("LOADSHAPE_LLAMA_DRAFT_MODEL")
        .ok()
        .filter(|s| !s.is_empty());
    if draft.is_none() {
        assert!(
            std::env::var("LOADSHAPE_REQUIRE_REAL_SERVER").as_deref() != Ok("1"),
            "LOADSHAPE_REQUIRE_REAL_SERVER=1 but LOADSHAPE_LLAMA_DRAFT_MODEL is not set (run scripts/realserver/setup.sh)"
        );
        eprintln!("skipped: no draft model (set LOADSHAPE_LLAMA_DRAFT_MODEL)");
    }
    draft
}

/// The server's own speculative counters (`/metrics`): drafted tokens, accepted tokens, verification steps.
fn spec_counters(llama: &Llama) -> (f64, f64, f64) {
    let (status, text) = get(llama.port, "/metrics").unwrap_or_else(|| panic!("no /metrics"));
    assert_eq!(status, 200, "/metrics: {text}");
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("/metrics has no {name}: {text}"))
    };
    (
        value("llamacpp:spec_decode_num_draft_tokens_total"),
        value("llamacpp:spec_decode_num_accepted_tokens_total"),
        value("llamacpp:spec_decode_num_drafts_total"),
    )
}

fn read_jsonl(path: &Path) -> Vec<RequestRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("record {l}: {e}")))
        .collect()
}

/// llama-server with a draft model (the suite's tiny model perturbed: `scripts/realserver/setup.sh`), greedy
/// (`--temp 0`: the random model's flat distribution accepts almost nothing when sampled). `calibrate --url` finds
/// the acceptance the server itself counts (its `/metrics` over the probe) within 5 points and writes the
/// `speculative` block; a held-out replay's records carry the server's draft counts (their sums are its counters'
/// deltas), and `predict` of that run with the calibrated profile at the run's own acceptance gives its TPOT within
/// [`HELDOUT_BOUND`] (with greedy decoding the acceptance is the prompt's: held-out runs accepted 0.14 to 0.43
/// where their probes counted about 0.5). How close the prediction comes, and with the probe's acceptance, is
/// `scripts/bench_spec.sh`'s to measure (docs/measurements.md), not this test's.
#[test]
fn a_draft_model_is_recorded_calibrated_and_predicted() {
    let _one = one_at_a_time();
    let Some((server, model)) = paths() else { return };
    let Some(draft) = draft_path() else { return };
    let dir = Scratch::new("real-spec");
    let llama = start_with(&server, &model, 4, &dir, Some((&draft, DRAFT_K))).unwrap_or_else(|e| panic!("{e}"));
    let cal = dir.join("cal");
    let cal_s = cal.to_string_lossy().into_owned();
    // Speculative steps on this CPU take 5-10× a plain one (the draft decodes 4 tokens one by one, then the target
    // verifies 5, at a cost that grows steeply with the context: 7 ms at 128 tokens, 27 ms at 1,024): a longer
    // budget than `calibrate_and_predict_against_the_real_server`'s gives the probe's decode phases requests.
    let args = [
        "calibrate",
        "--url",
        &llama.base,
        "--out",
        &cal_s,
        "--budget",
        "60",
        "--max-prompt-tokens",
        "2048",
        "--decode-tokens",
        "64",
        "--temp",
        "0",
    ];
    // As in `calibrate_and_predict_against_the_real_server`: a loaded machine can garble a probe's timings and the
    // fit refuses them; one more probe is allowed, and the server's counters are read around the one that counts.
    let mut outcome = Err(String::new());
    let (mut before, mut after) = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0));
    for attempt in 0..2 {
        before = spec_counters(&llama);
        outcome = run(&args);
        after = spec_counters(&llama);
        match &outcome {
            Ok(_) => break,
            Err(e) if attempt == 0 => eprintln!("first calibrate refused, probing again: {e}"),
            Err(_) => {}
        }
    }
    let (drafted, accepted) = (after.0 - before.0, after.1 - before.1);
    assert!(drafted > 0.0, "the server drafted nothing over the probe");
    let server_share = accepted / drafted;
    // Neither ~0 nor ~1: the draft model was made so (setup.sh's DRAFT_PERTURB).
    assert!(
        (0.1..0.9).contains(&server_share),
        "the server accepted {accepted} of {drafted} drafted tokens"
    );
    let out = match outcome {
        Ok(out) => Some(out),
        Err(second) => {
            assert!(
                second.contains("cannot fit") && !cal.join("profile.json").exists(),
                "calibrate failed otherwise than by refusing the fit: {second}"
            );
            assert!(
                std::env::var("LOADSHAPE_REQUIRE_FIT").as_deref() != Ok("1"),
                "LOADSHAPE_REQUIRE_FIT=1 and calibrate refused twice: {second}"
            );
            eprintln!(
                "calibrate refused the probe twice (the machine is too loaded for its timings); its acceptance and \
                 the held-out prediction not checked: {second}"
            );
            None
        }
    };
    let text = std::fs::read_to_string(cal.join("profile.json")).unwrap_or_default();
    if let Some(out) = &out {
        check_spec_fit(&cal, &text, out, server_share, after.2 - before.2);
    }
    // The held-out run on a fresh server (as in `calibrate_and_predict_against_the_real_server`).
    drop(llama);
    let llama = start_with(&server, &model, 4, &dir, Some((&draft, DRAFT_K))).unwrap_or_else(|e| panic!("{e}"));
    let scenario = dir.join("heldout.json");
    // Short prompts (a speculative step's cost grows steeply with the context on this CPU); the benchmark measures
    // what longer sessions make of it.
    let sc = serde_json::json!({"model": "engine",
        "workload": {"kind": "sessions", "ladder": "400:3,400:3,400:3", "gen_tokens": 64,
                     "tool_tokens": 100, "think_s": 0.3, "stagger_s": 0.3, "duration_s": 120.0},
        // The replay needs only the workload: a preset where the fit was refused.
        "profile": serde_json::from_str::<serde_json::Value>(&text)
            .or_else(|_| serde_json::to_value(shared::engine::presets::laptop_demo()))
            .unwrap_or_default(),
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 3});
    std::fs::write(&scenario, sc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let (scenario_s, live) = (scenario.to_string_lossy().into_owned(), dir.join("heldout.jsonl"));
    let live_s = live.to_string_lossy().into_owned();
    let before = spec_counters(&llama);
    run_ok(
        &llama,
        &[
            "replay",
            "--url",
            &llama.base,
            "--scenario",
            &scenario_s,
            "--out",
            &live_s,
            "--temp",
            "0",
            "--quiet",
        ],
    );
    let after = spec_counters(&llama);
    let records = read_jsonl(&live);
    assert_eq!(records.len(), 9, "3 sessions × 3 steps");
    let (mut rec_drafted, mut rec_accepted) = (0u64, 0u64);
    for r in &records {
        assert!(r.ok, "{:?}", r.error);
        // Exact lengths hold with speculation (a step's accepted drafts never run past `n_predict`).
        assert_eq!(r.gen_tokens, r.asked_tokens, "{r:?}");
        let c = r.spec.unwrap_or_else(|| panic!("no draft counts on a record: {r:?}"));
        assert!(c.draft_tokens > 0 && c.accepted_tokens <= c.draft_tokens, "{c:?}");
        rec_drafted += c.draft_tokens;
        rec_accepted += c.accepted_tokens;
    }
    // Every request's counts, and nothing else ran: the sums are the server's counters' deltas.
    assert_eq!(
        (rec_drafted as f64, rec_accepted as f64),
        (after.0 - before.0, after.1 - before.1),
        "the records' draft counts against the server's /metrics"
    );
    let live_share = rec_accepted as f64 / rec_drafted as f64;
    if out.is_none() {
        return;
    }
    let p = predict_json(&llama, &scenario_s, &cal, &live_s, &[]);
    let sim_share = p["simulated"]["spec_acceptance"].as_f64().unwrap_or(-1.0);
    eprintln!(
        "held-out: acceptance live {live_share:.4} (summary {}), simulated {sim_share:.4}; errors {}",
        p["live"]["spec_acceptance"], p["errors"]
    );
    // The live summary's acceptance is the records' share; the simulated one is the profile's (with greedy decoding
    // each request's acceptance depends on its own prompt: 0 to 1 over one probe, so a held-out run of 9 requests
    // is not held to the probe's).
    assert_eq!(p["live"]["spec_acceptance"].as_f64(), Some(live_share));
    assert!(
        (0.0..=1.0).contains(&sim_share),
        "no simulated acceptance: {}",
        p["simulated"]
    );
    // The step's cost, apart from the acceptance: the same profile at the held-out run's own share
    // (`predict --live-acceptance`, as `scripts/bench_spec.sh`'s second table). Held to HELDOUT_BOUND: one run of 9 requests accepted 0.14 where the
    // probe's accepted 0.50, which alone halves the predicted TPOT.
    let q = predict_json(&llama, &scenario_s, &cal, &live_s, &["--live-acceptance"]);
    assert_eq!(
        q["acceptance"]["share"].as_f64(),
        Some(live_share),
        "{}",
        q["acceptance"]
    );
    let sim_live_share = q["simulated"]["spec_acceptance"].as_f64().unwrap_or(-1.0);
    eprintln!(
        "held-out at the live share: simulated acceptance {sim_live_share:.4}; errors {}",
        q["errors"]
    );
    assert!(
        (sim_live_share - live_share).abs() < 0.1,
        "the profile accepts {live_share:.4}, the simulation {sim_live_share:.4}"
    );
    let e = q["errors"]["tpot_p50_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no TPOT error: {}", q["errors"]));
    assert!(
        e.is_finite() && 1.0 + e > 1.0 / HELDOUT_BOUND && 1.0 + e < HELDOUT_BOUND,
        "tpot_p50_ms at the live acceptance: predicted/live − 1 = {e:+.3} ({})",
        q["errors"]
    );
}

/// The speculative part of a calibration against the draft-model server: the `speculative` block, and the acceptance
/// against the server's own counters over the probe (`server_share` of the drafted tokens accepted, in `steps`).
fn check_spec_fit(cal: &Path, text: &str, out: &str, server_share: f64, steps: f64) {
    let fit: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cal.join("fit.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("fit.json: {e}"));
    let profile = shared::engine::EngineProfile::from_json(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    eprintln!(
        "calibrate: {out}\nserver: {server_share:.4} of the drafted tokens accepted over the probe, in {steps} steps"
    );
    let spec = profile
        .speculative
        .as_deref()
        .unwrap_or_else(|| panic!("no speculative block in the profile: {text}"));
    assert_eq!(
        (spec.method, spec.draft_tokens),
        (shared::engine::SpecMethod::Draft, DRAFT_K),
        "{text}"
    );
    // calibrate read the server's counters over its probe too (the records leave out the requests cut at a
    // phase's end, which accept least: their share runs high, 0.62 against the counters' 0.54 in one probe).
    let sv = &fit["speculative"]["server"];
    let calibrate_share = sv["accepted_tokens"].as_f64().unwrap_or(-1.0) / sv["drafted_tokens"].as_f64().unwrap_or(1.0);
    eprintln!(
        "records' share {}, calibrate's counters {calibrate_share:.4}, acceptance {:?}",
        fit["speculative"]["accepted_share"], spec.acceptance
    );
    assert!(
        (calibrate_share - server_share).abs() <= 0.01,
        "fit.json's server counts {sv}: {calibrate_share:.4}, the server's {server_share:.4}"
    );
    // The goal: what the profile says (the share of drafted tokens its requests, spread by `acceptance_spread`,
    // pool to when steps draft all k) within 5 points of the server's counts.
    assert!(
        (spec.pooled_acceptance_rate() - server_share).abs() <= 0.05,
        "the profile's acceptance means {:.4} of drafted tokens, the server counted {server_share:.4}",
        spec.pooled_acceptance_rate()
    );
    // llama.cpp counts accepted tokens per draft position: the profile has them (the share of steps accepting
    // each position, non-increasing).
    assert!(
        matches!(&spec.acceptance, shared::engine::Acceptance::PerPosition(u) if u.len() == DRAFT_K as usize),
        "{:?}",
        spec.acceptance
    );
}

/// A draft model the server refuses (here a file that is no GGUF): the server does not start, and the harness says
/// which draft model it refused instead of waiting for a server that never answers.
#[test]
fn a_draft_model_the_server_refuses_is_named() {
    let _one = one_at_a_time();
    let Some((server, model)) = paths() else { return };
    let dir = Scratch::new("real-spec-refused");
    let bad = dir.join("not-a-model.gguf");
    std::fs::write(&bad, "not a model\n").unwrap_or_else(|e| panic!("{e}"));
    let bad_s = bad.to_string_lossy().into_owned();
    let Err(e) = start_with(&server, &model, 1, &dir, Some((&bad_s, DRAFT_K))) else {
        panic!("llama-server started with {bad_s} as its draft model")
    };
    assert!(
        e.contains("refused the draft model") && e.contains(&bad_s),
        "the error does not name the draft model: {e}"
    );
}
