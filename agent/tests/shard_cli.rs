//! `loadshape replay --shard` and `loadshape merge`, end to end against `loadshape sim-server` (in-process,
//! 127.0.0.1:0), running the real binary: N processes with `JOB_COMPLETION_INDEX` set (as a Kubernetes Indexed Job
//! sets it) and one `--start-at` send, between them, exactly the requests one process sends for the same plan, and
//! `merge` gives the single run's counts, the exact summary of the union of their records, and histogram figures
//! within the stated bound; a missing or cut-short shard makes the merge "partial".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use loadshape::sim_server::Config;
use shared::metrics::hist;
use shared::metrics::{self, Slo, Summary};
use shared::record::RequestRecord;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

#[path = "common/files.rs"]
mod files;
#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/sim_server.rs"]
mod sim_server_helper;

use files::{json_file, records};
use scratch::Scratch;
use sim_server_helper::Sim;

async fn sim() -> Sim {
    sim_server_helper::start(Config {
        speed: 20.0,
        ..Config::default()
    })
    .await
}

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("shard-{name}"))
}

fn side(out: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}.{suffix}", out.display()))
}

/// `loadshape replay ARGS` with `JOB_COMPLETION_INDEX=index` when given; (exit code, stderr).
async fn replay(args: &[String], job_index: Option<u32>) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("replay").args(args).stdin(Stdio::null());
    cmd.env_remove("JOB_COMPLETION_INDEX");
    if let Some(i) = job_index {
        cmd.env("JOB_COMPLETION_INDEX", i.to_string());
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("replay did not finish in 60 s"))
        .unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `loadshape merge ARGS --json`: (exit code, the JSON).
async fn merge(args: &[&Path], extra: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(BIN)
        .arg("merge")
        .args(args)
        .args(extra)
        .arg("--json")
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let v =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

/// What a request is, apart from when it ran and what the server's cache made of it: its place in the plan, its
/// shape and its text's size as the server counted it (and in characters for a session's first step: later prompts
/// carry the server's replies, whose words — not their token counts — depend on the server's request order).
type Identity = (
    u64,
    u32,
    u32,
    u32,
    u64,
    u64,
    u64,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    bool,
);

fn identity(r: &RequestRecord) -> Identity {
    (
        r.session,
        r.inst,
        r.step,
        r.steps_asked,
        r.base_asked,
        r.asked_tokens,
        r.gen_tokens,
        r.prompt_tokens,
        r.designed_prompt_tokens,
        r.designed_cached_tokens,
        (r.step == 0).then_some(r.prompt_chars),
        r.ok,
    )
}

fn multiset(recs: &[RequestRecord]) -> BTreeMap<Identity, usize> {
    let mut m = BTreeMap::new();
    for r in recs {
        *m.entry(identity(r)).or_insert(0) += 1;
    }
    m
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `replay`'s arguments for `plan` against `s`, writing `out`.
fn replay_args(s: &Sim, plan: &[&str], out: &Path) -> Vec<String> {
    let common = |out: &Path| -> Vec<String> {
        let mut a: Vec<String> = [
            "--url",
            &s.base,
            "--model",
            "sim",
            "--quiet",
            "--match-tokenizer",
            "off",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        a.extend(["--out".to_string(), out.display().to_string()]);
        a.extend(plan.iter().map(|x| x.to_string()));
        a
    };
    common(out)
}

/// Runs `plan` once whole and as `n` shards (indices from `JOB_COMPLETION_INDEX`, one `--start-at`) in `d`; returns
/// the single run's record file and the shards' folder.
async fn single_and_shards(s: &Sim, d: &Path, plan: &[&str], n: u32) -> (PathBuf, PathBuf) {
    let single = d.join("single.jsonl");
    let (code, err) = replay(&replay_args(s, plan, &single), None).await;
    assert_eq!(code, 0, "single run: {err}");
    let shards = d.join("shards");
    run_shards(s, &shards, plan, n).await;
    (single, shards)
}

/// Runs `plan` as `n` shards into the folder `shards` (`run.shard-I-of-N.jsonl`), all started at one `--start-at`.
async fn run_shards(s: &Sim, shards: &Path, plan: &[&str], n: u32) {
    std::fs::create_dir_all(shards).unwrap_or_else(|e| panic!("{e}"));
    let start = (unix_now() + 2.0).floor();
    let mut args = replay_args(s, plan, &shards.join("run.jsonl"));
    args.extend(["--shard".into(), n.to_string(), "--start-at".into(), start.to_string()]);
    let runs: Vec<_> = (0..n).map(|i| replay(&args, Some(i))).collect();
    for (i, (code, err)) in futures_util::future::join_all(runs).await.into_iter().enumerate() {
        assert_eq!(code, 0, "shard {i}: {err}");
    }
    for i in 0..n {
        let out = shards.join(format!("run.shard-{i}-of-{n}.jsonl"));
        let sum = json_file(&side(&out, "summary.json"));
        assert_eq!(sum["shard"], serde_json::json!({"index": i, "count": n}));
        assert_eq!(sum["start_at_unix_s"].as_f64(), Some(start));
        assert_eq!(
            sum["origin_unix_s"].as_f64(),
            Some(start),
            "the origin is the common start"
        );
        for m in ["ttft", "tpot", "itl", "e2el"] {
            assert!(
                side(&out, &format!("{m}.hdr")).is_file(),
                "shard {i} wrote its {m} histogram"
            );
        }
    }
}

fn summary_of(v: &serde_json::Value, key: &str) -> Summary {
    serde_json::from_value(v[key].clone()).unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// The merged exact summary is the single run's in every count, and the histogram summary is the exact one's in
/// every count and within the bound in every latency figure.
fn check_merged(v: &serde_json::Value, single: &[RequestRecord], union: &[RequestRecord], slo: &Slo) {
    let exact = summary_of(v, "summary");
    let h = summary_of(v, "histogram_summary");
    let one = metrics::summarize(single, slo);
    let counts = |s: &Summary| {
        (
            s.completed,
            s.failed,
            s.sessions,
            s.total_input_tokens,
            s.total_output_tokens,
            s.attainment_by_step
                .iter()
                .map(|a| (a.step, a.requests))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        counts(&exact),
        counts(&one),
        "the shards sent the single run's requests"
    );
    assert_eq!(counts(&h), counts(&exact));
    assert_eq!(h.duration_s, exact.duration_s);
    assert_eq!(h.goodput_rps, exact.goodput_rps);
    assert_eq!(h.cached_share_achieved, exact.cached_share_achieved);
    assert_eq!(h.cached_share_designed, exact.cached_share_designed);
    // Exact: the union's records, scored as one process scores its own (nothing moved: one --start-at).
    let mut sorted = union.to_vec();
    sorted.sort_by(|a, b| {
        a.t_submit
            .total_cmp(&b.t_submit)
            .then(a.session.cmp(&b.session))
            .then(a.inst.cmp(&b.inst))
            .then(a.step.cmp(&b.step))
    });
    // Compared as JSON text read back (the merge's output went through the same printing and parsing).
    let mine: serde_json::Value =
        serde_json::from_str(&serde_json::to_string(&metrics::summarize(&sorted, slo)).unwrap_or_default())
            .unwrap_or_default();
    assert_eq!(v["summary"], mine);
    assert_eq!(v["records"].as_u64(), Some(union.len() as u64));
    for (e, x) in [
        (exact.ttft_p50_ms, h.ttft_p50_ms),
        (exact.ttft_p99_ms, h.ttft_p99_ms),
        (exact.tpot_p50_ms, h.tpot_p50_ms),
        (exact.tpot_p99_ms, h.tpot_p99_ms),
        (exact.e2el_p90_ms, h.e2el_p90_ms),
        (exact.e2el_p99_ms, h.e2el_p99_ms),
        (exact.itl_p50_ms.unwrap_or(0.0), h.itl_p50_ms.unwrap_or(0.0)),
    ] {
        assert!(hist::within_bound(e, x, false), "exact {e} vs histogram {x}");
    }
    assert!(hist::within_bound(exact.ttft_mean_ms, h.ttft_mean_ms, true));
    assert_eq!(v["bound"]["relative"].as_f64(), Some(1.0 / 1024.0));
}

/// Agent sessions (drawn shapes, respawn off) in 3 shards: each shard runs its slots `s mod 3 == I`, the union of
/// their records is the single run's requests (shape, size, designed cache and the server's prompt count: the
/// same text), and merge agrees with one process; then a missing and a cut-short shard make it partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_sessions_merge_to_the_single_run() {
    let s = sim().await;
    let plan = [
        "--sessions",
        "7",
        "--steps",
        "3",
        "--spread",
        "0.5",
        "--base",
        "1500",
        "--gen",
        "24",
        "--tool",
        "40",
        "--think",
        "0.05",
        "--stagger",
        "0.05",
        "--max-seconds",
        "30",
        "--seed",
        "7",
        "--nonce",
        "11",
        "--scrape-interval",
        "0.5",
    ];
    let d = dir("sessions");
    let (single_file, shards) = single_and_shards(&s, &d, &plan, 3).await;
    let single = records(&single_file);
    let mut union = Vec::new();
    for i in 0..3u64 {
        let recs = records(&shards.join(format!("run.shard-{i}-of-3.jsonl")));
        assert!(!recs.is_empty());
        assert!(recs.iter().all(|r| r.session % 3 == i), "shard {i} ran only its slots");
        union.extend(recs);
    }
    assert!(single.iter().all(|r| r.ok), "the plan runs clean");
    assert_eq!(
        multiset(&union),
        multiset(&single),
        "the shards' requests are the single run's"
    );
    let (code, v) = merge(&[&shards], &[]).await;
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["partial"], false, "{v}");
    assert_eq!(v["shards"], 3);
    check_merged(&v, &single, &union, &Slo::default());

    // --fast reads no record and gives the same histogram summary.
    let (code, fast) = merge(&[&shards], &["--fast"]).await;
    assert_eq!(code, 0);
    assert_eq!(fast["histogram_summary"], v["histogram_summary"]);
    assert!(fast["summary"].is_null());

    // A missing shard: partial, naming it (exit 3).
    let files: Vec<PathBuf> = [0, 2]
        .iter()
        .map(|i| shards.join(format!("run.shard-{i}-of-3.jsonl")))
        .collect();
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (code, v) = merge(&refs, &[]).await;
    assert_eq!((code, &v["partial"]), (3, &serde_json::json!(true)), "{v}");
    assert!(
        v["missing"][0].as_str().is_some_and(|m| m == "missing shard(s) 1 of 3"),
        "{v}"
    );
    // A shard cut short (its summary says SIGTERM): partial, naming the file and why.
    let cut = shards.join("run.shard-1-of-3.jsonl.summary.json");
    let mut sum = json_file(&cut);
    sum["interrupted"] = "SIGTERM".into();
    std::fs::write(&cut, serde_json::to_vec(&sum).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    let (code, v) = merge(&[&shards], &[]).await;
    assert_eq!(code, 3, "{v}");
    let missing = v["missing"].to_string();
    assert!(
        missing.contains("run.shard-1-of-3.jsonl: cut short (SIGTERM)"),
        "{missing}"
    );
    // A shard whose histogram file is gone: partial, named, and still in the exact summary.
    let hdr = shards.join("run.shard-2-of-3.jsonl.ttft.hdr");
    let kept = std::fs::read(&hdr).unwrap_or_default();
    std::fs::remove_file(&hdr).unwrap_or_else(|e| panic!("{e}"));
    let (code, v) = merge(&[&shards], &[]).await;
    assert_eq!(code, 3, "{v}");
    assert!(
        v["missing"]
            .to_string()
            .contains("run.shard-2-of-3.jsonl: no histogram statistics"),
        "{v}"
    );
    assert_eq!(v["records"].as_u64(), Some(union.len() as u64));
    std::fs::write(&hdr, kept).unwrap_or_else(|e| panic!("{e}"));
    // A shard that left no summary (it did not finish): partial too.
    std::fs::remove_file(&cut).unwrap_or_else(|e| panic!("{e}"));
    let (code, v) = merge(&[&shards], &[]).await;
    assert_eq!(code, 3);
    assert!(v["missing"].to_string().contains("no summary.json"), "{v}");
}

/// An open-loop scenario (Poisson arrivals, a shared system prompt) in 2 shards: request `i` runs in shard
/// `i mod 2` at its planned arrival, with the single run's lengths and text sizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_open_loop_merges_to_the_single_run() {
    let s = sim().await;
    let d = dir("open");
    let scen = d.join("poisson.json");
    let scenario = serde_json::json!({
        "model": "engine", "seed": 11, "counterfactuals": false,
        "workload": {"kind": "poisson", "num_requests": 15, "rate_rps": 20.0,
            "prompt": {"dist": "uniform", "min": 50, "max": 400}, "output": {"dist": "uniform", "min": 8, "max": 24},
            "shared_prefix_tokens": 128},
        "profile": {"name": "p", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 64,
                    "max_num_batched_tokens": 8192, "step_fixed_ms": 5.0, "per_seq_ms": 0.01,
                    "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 30.0},
        "slo": {"ttft_ms": 800.0, "tpot_ms": 50.0}
    });
    std::fs::write(&scen, scenario.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let scen_s = scen.display().to_string();
    let plan = ["--scenario", &scen_s, "--metrics-url", "none", "--nonce", "5"];
    let (single_file, shards) = single_and_shards(&s, &d, &plan, 2).await;
    let single = records(&single_file);
    assert_eq!(single.len(), 15);
    let mut union = Vec::new();
    for i in 0..2u64 {
        let recs = records(&shards.join(format!("run.shard-{i}-of-2.jsonl")));
        assert!(
            recs.iter().all(|r| r.session % 2 == i),
            "shard {i} ran only its requests"
        );
        union.extend(recs);
    }
    assert_eq!(multiset(&union), multiset(&single));
    let (code, v) = merge(&[&shards], &[]).await;
    assert_eq!(code, 0, "{v}");
    let slo = Slo {
        ttft_ms: 800.0,
        tpot_ms: 50.0,
        e2e_ms: None,
    };
    check_merged(&v, &single, &union, &slo);
}

/// Bad shard flags are refused before anything is sent, each naming what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_shard_flags_are_refused_by_name() {
    let d = dir("bad");
    let out = d.join("x.jsonl").display().to_string();
    let base = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--url",
            "http://127.0.0.1:9/v1",
            "--out",
            &out,
            "--quiet",
            "--seed",
            "1",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let cases: [(&[&str], Option<u32>, &str); 6] = [
        (&["--shard", "4"], None, "JOB_COMPLETION_INDEX is not set"),
        (&["--shard", "4/4"], None, "shard index 4 is out of range for 4 shards"),
        (&["--shard", "4"], Some(9), "shard index 9 is out of range"),
        (&["--shard", "two/4"], None, "--shard must be I/N"),
        (
            &["--shard", "1/8", "--sessions", "3", "--nonce", "1"],
            None,
            "the plan has 3 session slots, fewer than the 8 shards",
        ),
        (
            &["--shard", "1/2", "--start-at", "1764633600000"],
            None,
            "is it in milliseconds?",
        ),
    ];
    for (extra, env, want) in cases {
        let (code, err) = replay(&base(extra), env).await;
        assert_ne!(code, 0, "{extra:?}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let (code, err) = replay(&base(&["--shard", "0/2"]), None).await;
    assert_ne!(code, 0);
    assert!(err.contains("needs the same content nonce in every shard"), "{err}");
}

/// `--start-at`: a shard that reaches it more than 5 s late refuses to run and writes nothing; one signalled while
/// it waits ends at once, having sent nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_late_is_refused_and_a_signal_ends_the_wait() {
    let s = sim().await;
    let d = dir("start-at");
    let out = d.join("run.jsonl");
    let args = |start: f64| -> Vec<String> {
        [
            "--url",
            &s.base,
            "--model",
            "sim",
            "--quiet",
            "--match-tokenizer",
            "off",
            "--metrics-url",
            "none",
            "--sessions",
            "2",
            "--steps",
            "1",
            "--base",
            "500",
            "--gen",
            "8",
            "--max-seconds",
            "10",
            "--seed",
            "1",
            "--nonce",
            "1",
            "--out",
            &out.display().to_string(),
            "--start-at",
            &start.to_string(),
        ]
        .into_iter()
        .map(String::from)
        .collect()
    };
    let (code, err) = replay(&args(unix_now() - 60.0), None).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("passed 60") && err.contains("this shard would start late"),
        "{err}"
    );
    assert!(!out.exists(), "a refused shard writes no record file");

    let child = Command::new(BIN)
        .arg("replay")
        .args(args(unix_now() + 60.0))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id().unwrap_or_else(|| panic!("child has a pid"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let done = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("replay did not end within 10 s of SIGTERM while waiting"))
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    assert!(err.contains("SIGTERM while waiting for --start-at"), "{err}");
    assert!(!out.exists(), "nothing was sent");
}

/// Copies every file of the folder `from` into a new folder `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{e}"));
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{e}")) {
        let p = e.unwrap_or_else(|e| panic!("{e}")).path();
        let name = p.file_name().unwrap_or_default();
        std::fs::copy(&p, to.join(name)).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A merge that cannot vouch for its counts says so: every kind of damage to a shard's files (a record file
/// appended to itself, edited counters, the same shard of another run swapped in, a record duplicated and one lost,
/// damaged sidecars, a line with an impossible value) makes the merge partial (exit 3) with a note naming the file,
/// in the exact merge and, where it can see it, in `--fast`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_shards_make_the_merge_partial_naming_the_file() {
    let s = sim().await;
    let d = dir("tampered");
    let plan = |nonce: &'static str| {
        [
            "--sessions",
            "4",
            "--steps",
            "3",
            "--base",
            "800",
            "--gen",
            "12",
            "--tool",
            "30",
            "--think",
            "0.02",
            "--stagger",
            "0.02",
            "--max-seconds",
            "30",
            "--seed",
            "7",
            "--nonce",
            nonce,
            "--metrics-url",
            "none",
        ]
    };
    let (a, b) = (d.join("a"), d.join("b"));
    run_shards(&s, &a, &plan("11"), 2).await;
    run_shards(&s, &b, &plan("12"), 2).await;
    let (code, v) = merge(&[&a], &[]).await;
    assert_eq!(
        (code, &v["partial"]),
        (0, &serde_json::json!(false)),
        "the untouched run: {v}"
    );
    let shard0 = "run.shard-0-of-2.jsonl";
    let shard1 = "run.shard-1-of-2.jsonl";
    // Each case: a fresh copy of run a, one change, and what the partial note must say.
    type Change = Box<dyn Fn(&Path)>;
    let write = |p: PathBuf, bytes: Vec<u8>| std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{e}"));
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{e}"));
    let b1 = b.join(shard1);
    let cases: Vec<(&str, Change, &str, bool)> = vec![
        (
            "appended to itself",
            Box::new(move |c: &Path| {
                let mut bytes = read(c.join(shard0));
                bytes.extend(bytes.clone());
                write(c.join(shard0), bytes);
            }),
            "request(s) appear twice",
            false,
        ),
        (
            "edited counters",
            Box::new(move |c: &Path| {
                let p = c.join(format!("{shard0}.counters.json"));
                let mut v: serde_json::Value = serde_json::from_slice(&read(p.clone())).unwrap_or_default();
                v["completed"] = 4000.into();
                write(p, v.to_string().into_bytes());
            }),
            "counters.json: completed 4000",
            true,
        ),
        (
            "another run's shard swapped in",
            Box::new(move |c: &Path| write(c.join(shard1), read(b1.clone()))),
            "not the ones its summary.json says were written",
            false,
        ),
        (
            "one record duplicated, one lost",
            Box::new(move |c: &Path| {
                let text = String::from_utf8(read(c.join(shard0))).unwrap_or_default();
                let mut lines: Vec<&str> = text.lines().collect();
                let last = lines.len() - 1;
                lines[last] = lines[0];
                write(c.join(shard0), format!("{}\n", lines.join("\n")).into_bytes());
            }),
            "request(s) appear twice",
            false,
        ),
        (
            "zero-byte summary.json",
            Box::new(move |c: &Path| write(c.join(format!("{shard1}.summary.json")), Vec::new())),
            "summary.json is damaged",
            true,
        ),
        (
            "garbled server.json",
            Box::new(move |c: &Path| write(c.join(format!("{shard1}.server.json")), b"{\"sam".to_vec())),
            "server.json is damaged",
            true,
        ),
        (
            "records_written edited",
            Box::new(move |c: &Path| {
                let p = c.join(format!("{shard0}.summary.json"));
                let mut v: serde_json::Value = serde_json::from_slice(&read(p.clone())).unwrap_or_default();
                v["records_written"] = 4000.into();
                write(p, v.to_string().into_bytes());
            }),
            "its summary says 4000 were written",
            true,
        ),
        (
            "a negative TTFT",
            Box::new(move |c: &Path| {
                let text = String::from_utf8(read(c.join(shard0))).unwrap_or_default();
                let mut lines: Vec<String> = text.lines().map(String::from).collect();
                let mut r: serde_json::Value = serde_json::from_str(&lines[0]).unwrap_or_default();
                r["ttft_s"] = (-5.0).into();
                lines[0] = r.to_string();
                write(c.join(shard0), format!("{}\n", lines.join("\n")).into_bytes());
            }),
            "1 line(s) unreadable or with impossible values",
            false,
        ),
    ];
    for (i, (what, change, says, in_fast)) in cases.into_iter().enumerate() {
        let c = d.join(format!("case-{i}"));
        copy_dir(&a, &c);
        change(&c);
        let modes: &[&[&str]] = if in_fast { &[&[], &["--fast"]] } else { &[&[]] };
        for extra in modes {
            let (code, v) = merge(&[&c], extra).await;
            let missing = v["missing"].to_string();
            assert_eq!(code, 3, "{what} {extra:?}: {v}");
            assert!(
                missing.contains(says),
                "{what} {extra:?}: {missing} should say {says:?}"
            );
        }
    }

    // Seeded random damage, each changing the files' bytes: a line duplicated, dropped or exchanged between the
    // two shards, a digit changed in a record or in counters.json. merge never takes the result for a whole run
    // (exit 0) and never panics: partial (exit 3), or an error (exit 1) that names a file.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n.max(1) as u64) as usize
    };
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{e}"));
    for k in 0..24 {
        let c = d.join(format!("fuzz-{k}"));
        copy_dir(&a, &c);
        let files = [c.join(shard0), c.join(shard1)];
        let mut lines: Vec<Vec<String>> = files
            .iter()
            .map(|f| {
                let text = String::from_utf8(read(f.clone())).unwrap_or_default();
                text.lines().map(String::from).collect()
            })
            .collect();
        let f = next(2);
        let i = next(lines[f].len());
        let what = match next(5) {
            0 => {
                let line = lines[f][i].clone();
                let at = next(lines[f].len() + 1);
                lines[f].insert(at, line);
                "a line duplicated"
            }
            1 => {
                lines[f].remove(i);
                "a line dropped"
            }
            2 => {
                let j = next(lines[1 - f].len());
                let moved = std::mem::take(&mut lines[f][i]);
                lines[f][i] = std::mem::replace(&mut lines[1 - f][j], moved);
                "lines exchanged between the shards"
            }
            3 => {
                lines[f][i] = change_a_digit(&lines[f][i], next(1000), next(9));
                "a digit of a record changed"
            }
            _ => {
                let p = c.join(format!("run.shard-{f}-of-2.jsonl.counters.json"));
                let text = String::from_utf8(read(p.clone())).unwrap_or_default();
                std::fs::write(&p, change_a_digit(&text, next(1000), next(9))).unwrap_or_else(|e| panic!("{e}"));
                "a digit of counters.json changed"
            }
        };
        for (file, l) in files.iter().zip(&lines) {
            std::fs::write(file, format!("{}\n", l.join("\n"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let out = Command::new(BIN)
            .arg("merge")
            .arg(&c)
            .arg("--json")
            .output()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        match out.status.code() {
            Some(3) => assert!(stdout.contains("\"partial\": true"), "{what}: {stdout}"),
            Some(1) => assert!(stderr.contains(".jsonl"), "{what}: {stderr}"),
            other => panic!("{what} (case {k}): exit {other:?}\n{stdout}\n{stderr}"),
        }
    }
}

/// `text` with its `pick`-th ASCII digit (counted cyclically) replaced by another digit (`by` in 0..9 picks which).
fn change_a_digit(text: &str, pick: usize, by: usize) -> String {
    let digits: Vec<usize> = text
        .char_indices()
        .filter(|(_, c)| c.is_ascii_digit())
        .map(|(i, _)| i)
        .collect();
    let Some(&at) = digits.get(pick % digits.len().max(1)) else {
        return format!("{text}0");
    };
    let old = text.as_bytes()[at] - b'0';
    let new = (old + 1 + (by % 9) as u8) % 10;
    format!("{}{}{}", &text[..at], char::from(b'0' + new), &text[at + 1..])
}

/// Speculative decoding's figures survive `merge --fast`: shards of a run against a speculative sim-server carry
/// their drafted and accepted counts in their counters, so the histogram summary (from the counters alone) gives
/// `spec_acceptance` exactly as the exact merge of the records does (`spec_accepted_per_step` too where records
/// count steps: `shared::metrics::hist`'s `speculative_counts_merge_exactly`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_fast_carries_speculative_figures() {
    let profile = shared::engine::EngineProfile::from_json(
        &serde_json::json!({"name": "spec", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 64,
            "max_num_batched_tokens": 8192, "step_fixed_ms": 5.0, "per_seq_ms": 0.01, "per_ctx_token_ms": 0.0,
            "prefill_tokens_per_ms": 30.0,
            "speculative": {"method": "mtp", "draft_tokens": 3, "acceptance": 0.6, "draft_cost_ms": 0.1}})
        .to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = sim_server_helper::start(Config {
        engine: loadshape::sim_server::EngineChoice::Profile(Box::new(profile)),
        speed: 20.0,
        ..Config::default()
    })
    .await;
    let d = dir("spec");
    let scen = d.join("poisson.json");
    let scenario = serde_json::json!({
        "model": "engine", "seed": 12, "counterfactuals": false,
        "workload": {"kind": "poisson", "num_requests": 12, "rate_rps": 20.0,
            "prompt": {"dist": "uniform", "min": 50, "max": 300}, "output": {"dist": "uniform", "min": 20, "max": 40},
            "shared_prefix_tokens": 0},
        "profile": {"name": "p", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 64,
                    "max_num_batched_tokens": 8192, "step_fixed_ms": 5.0, "per_seq_ms": 0.01,
                    "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 30.0},
        "slo": {"ttft_ms": 800.0, "tpot_ms": 50.0}
    });
    std::fs::write(&scen, scenario.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let scen_s = scen.display().to_string();
    let plan = ["--scenario", &scen_s, "--metrics-url", "none", "--nonce", "6"];
    let shards = d.join("shards");
    run_shards(&s, &shards, &plan, 2).await;
    let (code, exact) = merge(&[&shards], &[]).await;
    assert_eq!(code, 0, "{exact}");
    let (code, fast) = merge(&[&shards], &["--fast"]).await;
    assert_eq!(code, 0, "{fast}");
    let h = &fast["histogram_summary"];
    let want = exact["summary"]["spec_acceptance"]
        .as_f64()
        .unwrap_or_else(|| panic!("spec_acceptance in {exact}"));
    assert!(want > 0.0 && want < 1.0, "{want}");
    assert_eq!(h["spec_acceptance"].as_f64(), Some(want), "{h}");
    // Replay's records count drafted and accepted tokens but not the server's steps, so neither summary has
    // accepted tokens per step; the two agree on that too.
    assert_eq!(
        h["spec_accepted_per_step"], exact["summary"]["spec_accepted_per_step"],
        "{h}"
    );
    assert_eq!(exact["histogram_summary"], fast["histogram_summary"]);
}
