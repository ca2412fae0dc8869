//! `loadshape import` and `export` on files the real tools wrote (agent/tests/fixtures/interop/, made by
//! `scripts/bench_interop.sh` against `sim-server --request-log`; versions and commands in the folder's README):
//! the records agree with the server's own log, `report`, `predict --against` and `calibrate --from` read them,
//! summary-only files become a summary, bad input names the file, the tool and the field, and configs go both ways.

mod common;
#[path = "common/fit_check.rs"]
mod fit_check;
#[path = "common/scratch.rs"]
mod scratch;

use std::path::{Path, PathBuf};

use common::loadshape;
use scratch::Scratch;
use serde_json::{Value, json};
use shared::record::RequestRecord;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/interop")
        .join(rel)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// `loadshape ARGS`, which must succeed: its stdout and stderr.
fn ok(args: &[&str]) -> (String, String) {
    let out = loadshape(args, None);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "loadshape {args:?} failed:\n{e}");
    (o, e)
}

/// `loadshape ARGS`, which must fail: its stderr.
fn fails(args: &[&str]) -> String {
    let out = loadshape(args, None);
    assert!(!out.status.success(), "loadshape {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn records(path: &Path) -> Vec<RequestRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn server_log(path: &Path) -> Vec<loadshape::sim_server::RequestLogLine> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Each tool's per-request file, its format detected, gives the requests, prompt and output tokens the server
/// logged, and every TTFT at least the server's own (arrival → first token) and within 50 ms of it: the tools time
/// from their send, the server from the body's arrival.
#[test]
fn each_tools_records_match_the_servers_own_log() {
    let d = Scratch::new("interop-match");
    for (tool, file) in [
        ("aiperf", "aiperf/profile_export.jsonl"),
        ("guidellm", "guidellm/benchmarks.json"),
        ("inference-perf", "inference-perf/per_request_lifecycle_metrics.json"),
    ] {
        let out = d.join(format!("{tool}.jsonl"));
        let (_, err) = ok(&["import", s(&fixture(file)), "--out", s(&out)]);
        assert!(err.contains(&format!("from {tool}")), "{tool} not detected: {err}");
        let mut recs = records(&out);
        let mut log = server_log(&fixture(&format!("{tool}/server.jsonl")));
        assert!(!recs.is_empty());
        assert_eq!(recs.len(), log.len(), "{tool}: requests");
        assert!(recs.iter().all(|r| r.ok) && log.iter().all(|l| l.completed), "{tool}");
        let sum = |f: &dyn Fn(&RequestRecord) -> u64| recs.iter().map(f).sum::<u64>();
        assert_eq!(
            sum(&|r| r.prompt_tokens.unwrap_or(0)),
            log.iter().map(|l| u64::from(l.prompt_tokens)).sum::<u64>(),
            "{tool}: prompt tokens"
        );
        assert_eq!(
            sum(&|r| r.gen_tokens),
            log.iter().map(|l| u64::from(l.output_tokens)).sum::<u64>(),
            "{tool}: output tokens"
        );
        assert_eq!(
            sum(&|r| r.sse_frames),
            log.iter().map(|l| u64::from(l.frames)).sum::<u64>(),
            "{tool}: frames"
        );
        // Paired by send order, up to two places apart (two streams send at once), and prompt length.
        recs.sort_by(|a, b| a.t_submit.total_cmp(&b.t_submit));
        log.sort_by(|a, b| a.t_arrival_s.total_cmp(&b.t_arrival_s));
        let mut used = vec![false; log.len()];
        let mut paired = 0;
        for (i, r) in recs.iter().enumerate() {
            let Some(j) = (i.saturating_sub(2)..(i + 3).min(log.len()))
                .find(|&j| !used[j] && r.prompt_tokens == Some(u64::from(log[j].prompt_tokens)))
            else {
                continue;
            };
            used[j] = true;
            let l = &log[j];
            paired += 1;
            let server = l.t_first_token_s.unwrap_or(f64::NAN) - l.t_arrival_s;
            let client = r.ttft_s.unwrap_or(f64::NAN);
            assert!(
                client >= server - 0.001 && client <= server + 0.05,
                "{tool}: TTFT {client} vs the server's {server}"
            );
            assert!(
                r.wall_s >= l.t_end_s - l.t_arrival_s - 0.001,
                "{tool}: E2E {} shorter than the server's",
                r.wall_s
            );
        }
        assert_eq!(
            paired,
            recs.len(),
            "{tool}: requests without a server line of their prompt length near their send order"
        );
        // The notes beside the records name the tool and its version.
        let about: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(format!("{tool}.jsonl.import.json"))).unwrap())
                .unwrap();
        assert_eq!(about["imported_from"][0]["tool"], tool);
        assert!(!about["imported_from"][0]["notes"].as_array().unwrap().is_empty());
    }
}

/// vllm bench's `--save-result --save-detailed` (written from vLLM's serve.py, see the README): per-request arrays
/// into records, the failed request kept as failed, the aggregates of the file agree with `report`'s.
#[test]
fn a_vllm_bench_detailed_result_becomes_records() {
    let d = Scratch::new("interop-vllm");
    let out = d.join("v.jsonl");
    ok(&["import", s(&fixture("vllm-bench/detailed.json")), "--out", s(&out)]);
    let recs = records(&out);
    let src: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("vllm-bench/detailed.json")).unwrap()).unwrap();
    assert_eq!(recs.len(), 4);
    assert_eq!(
        recs.iter().filter(|r| r.ok).count() as u64,
        src["completed"].as_u64().unwrap()
    );
    let failed = recs.iter().find(|r| !r.ok).expect("a failed record");
    assert!(failed.error.as_deref().unwrap_or("").contains("503"), "{failed:?}");
    let (report, _) = ok(&["report", s(&out), "--json"]);
    let report: Value = serde_json::from_str(&report).unwrap();
    // TTFT, TPOT ((latency − TTFT) / (tokens − 1)) and ITL mean as vLLM computed them over the same requests.
    for (ours, theirs) in [
        ("ttft_mean_ms", "mean_ttft_ms"),
        ("tpot_mean_ms", "mean_tpot_ms"),
        ("e2el_mean_ms", "mean_e2el_ms"),
    ] {
        let got = report["summary"][ours].as_f64().unwrap_or(f64::NAN);
        let want = src[theirs].as_f64().unwrap();
        assert!((got - want).abs() < 1e-3, "{ours} {got} vs vLLM's {theirs} {want}");
    }
}

/// Files without per-request data are read into a summary, say so, and write no records.
#[test]
fn summary_only_files_become_a_summary_and_say_so() {
    let d = Scratch::new("interop-summary");
    for (file, ttft_mean_ms) in [
        ("aiperf/profile_export_aiperf.json", None),
        ("inference-perf/summary_lifecycle_metrics.json", None),
        ("vllm-bench/summary.json", Some("mean_ttft_ms")),
    ] {
        let out = d.join("s.jsonl");
        let (_, err) = ok(&["import", s(&fixture(file)), "--out", s(&out)]);
        assert!(err.contains("summary only"), "{file}: {err}");
        assert!(!out.exists(), "{file}: records written");
        let about: Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("s.jsonl.import.json")).unwrap()).unwrap();
        let sum = &about["imported_from"][0]["summary"];
        let got = sum["metrics"]["ttft_ms"]["mean"].as_f64().unwrap_or(f64::NAN);
        assert!(got > 0.0, "{file}: {sum}");
        if let Some(key) = ttft_mean_ms {
            let src: Value = serde_json::from_str(&std::fs::read_to_string(fixture(file)).unwrap()).unwrap();
            assert_eq!(got, src[key].as_f64().unwrap());
        }
        std::fs::remove_file(d.join("s.jsonl.import.json")).unwrap();
    }
    // Without --out: the notes and the records' summary, as JSON.
    let (stdout, _) = ok(&["import", s(&fixture("guidellm/benchmarks.json"))]);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (v["records"].as_u64(), v["summary"]["completed"].as_u64()),
        (Some(8), Some(8)),
        "{v}"
    );
    assert_eq!(v["imported_from"][0]["tool_version"], "0.8.1");
    // The same run's per-request and summary files agree on the mean TTFT (AIPerf: both in ms).
    let recs = d.join("a.jsonl");
    ok(&["import", s(&fixture("aiperf/profile_export.jsonl")), "--out", s(&recs)]);
    let mean = records(&recs).iter().map(|r| r.ttft_s.unwrap_or(0.0)).sum::<f64>() * 1e3 / records(&recs).len() as f64;
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("aiperf/profile_export_aiperf.json")).unwrap()).unwrap();
    let theirs = summary["time_to_first_token"]["avg"].as_f64().unwrap();
    assert!((mean / theirs - 1.0).abs() < 1e-6, "{mean} vs AIPerf's {theirs}");
}

/// Another tool's file, a truncated file and a changed schema: an error naming the file, the tool and the field.
#[test]
fn bad_input_names_the_file_the_tool_and_the_field() {
    let d = Scratch::new("interop-bad");
    let gl = fixture("guidellm/benchmarks.json");
    // Another tool's file, read as AIPerf.
    let e = fails(&["import", s(&gl), "--from", "aiperf"]);
    assert!(
        e.contains("benchmarks.json") && e.contains("read as aiperf") && e.contains("field `"),
        "{e}"
    );
    assert!(e.contains("looks like guidellm's"), "{e}");
    // Truncated JSON.
    let text = std::fs::read_to_string(&gl).unwrap();
    let cut = d.join("cut.json");
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let e = fails(&["import", s(&cut), "--from", "guidellm"]);
    assert!(
        e.contains("cut.json") && e.contains("read as guidellm") && e.contains("truncated"),
        "{e}"
    );
    // A truncated JSON-lines file: the last line.
    let ap = std::fs::read_to_string(fixture("aiperf/profile_export.jsonl")).unwrap();
    let cut = d.join("cut.jsonl");
    std::fs::write(&cut, &ap[..ap.len() - 40]).unwrap();
    let e = fails(&["import", s(&cut)]);
    assert!(e.contains("read as aiperf") && e.contains("truncated"), "{e}");
    // A schema that changed: a renamed field, a unit that changed.
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let req = &mut v["benchmarks"][0]["requests"]["successful"][0];
    let start = req["request_start_time"].take();
    req.as_object_mut().unwrap().remove("request_start_time");
    req["request_started_at"] = start;
    let changed = d.join("changed.json");
    std::fs::write(&changed, v.to_string()).unwrap();
    let e = fails(&["import", s(&changed)]);
    assert!(
        e.contains("field `benchmarks[0].requests.successful[0].request_start_time`") && e.contains("missing"),
        "{e}"
    );
    let changed = d.join("unit.jsonl");
    let at = ap.find("\"time_to_first_token\":{").expect("a TTFT metric");
    let unit = at + ap[at..].find("\"unit\":\"ms\"").expect("its unit");
    std::fs::write(
        &changed,
        format!("{}\"unit\":\"s\"{}", &ap[..unit], &ap[unit + "\"unit\":\"ms\"".len()..]),
    )
    .unwrap();
    let e = fails(&["import", s(&changed)]);
    assert!(
        e.contains("read as aiperf") && e.contains(".unit`") && e.contains("expected \"ms\""),
        "{e}"
    );
    // Not any tool's file.
    let other = d.join("other.json");
    std::fs::write(&other, json!({"hello": 1}).to_string()).unwrap();
    let e = fails(&["import", s(&other)]);
    assert!(e.contains("other.json") && e.contains("--from"), "{e}");
}

/// `report`, `predict --against` and `calibrate --from` read imported records as they read our own.
#[test]
fn report_and_predict_read_imported_records() {
    let d = Scratch::new("interop-predict");
    let run = d.join("ip.jsonl");
    ok(&[
        "import",
        s(&fixture("inference-perf/per_request_lifecycle_metrics.json")),
        "--out",
        s(&run),
    ]);
    let (report, _) = ok(&["report", s(&run), "--json"]);
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["records"], 8);
    assert_eq!(report["imported_from"][0]["tool"], "inference-perf");
    assert_eq!(report["imported_from"][0]["tool_version"], Value::Null);
    let (text, _) = ok(&["report", s(&run)]);
    assert!(
        text.contains("imported from inference-perf (version not in the file)"),
        "{text}"
    );
    // The run's own config, read into the nearest scenario, is what `predict` simulates against the run.
    let sc = d.join("sc.json");
    let (_, err) = ok(&[
        "import",
        "--config",
        s(&fixture("inference-perf/config.yaml")),
        "--out",
        s(&sc),
    ]);
    assert!(err.contains("not carried over"), "{err}");
    let scenario: Value = serde_json::from_str(&std::fs::read_to_string(&sc).unwrap()).unwrap();
    assert_eq!(scenario["workload"]["kind"], "closed_loop");
    assert_eq!(scenario["workload"]["users"], 2);
    assert_eq!(scenario["workload"]["num_requests"], 8);
    let (pred, _) = ok(&["predict", s(&sc), "--against", s(&run), "--json", "--seeds", "2"]);
    let pred: Value = serde_json::from_str(&pred).unwrap();
    assert!(pred.to_string().contains("ttft"), "{pred}");
}

/// The end to end path: AIPerf runs against sim-server emulating a known profile (one stream of many prompt
/// lengths, then 4 and 8 streams), imported, and `calibrate --from` the records recovers the profile within the
/// tolerances `calibrate_sim::calibrate_recovers_a_known_profile` holds our own probe to.
#[test]
fn calibrate_from_imported_aiperf_runs_recovers_the_known_profile() {
    let d = Scratch::new("interop-calibrate");
    let run = d.join("runs.jsonl");
    let files: Vec<PathBuf> = ["c1", "c4", "c8"]
        .iter()
        .map(|c| fixture(&format!("calibrate/{c}.profile_export.jsonl")))
        .collect();
    let mut args = vec!["import"];
    args.extend(files.iter().map(|f| s(f)));
    args.extend(["--out", s(&run)]);
    ok(&args);
    let cal = d.join("cal");
    ok(&[
        "calibrate",
        "--from",
        s(&run),
        "--out",
        s(&cal),
        "--max-num-seqs",
        "8",
        "--batch-kv",
        "off",
        "--prefill-kv",
        "off",
        "--reply-share",
        "off",
        "--tiers",
        "off",
        "--scheduler",
        "vllm",
    ]);
    let fit: Value = serde_json::from_str(&std::fs::read_to_string(cal.join("fit.json")).unwrap()).unwrap();
    let truth: shared::engine::EngineProfile =
        serde_json::from_str(&std::fs::read_to_string(fixture("calibrate/truth.json")).unwrap()).unwrap();
    let c = |name: &str| fit["coefficients"][name]["value"].as_f64().unwrap_or(f64::NAN);
    let rel = |got: f64, want: f64| (got - want) / want;
    let errors = [
        ("step_fixed_ms", rel(c("step_fixed_ms"), truth.step_fixed_ms), 0.05),
        ("per_seq_ms", rel(c("per_seq_ms"), truth.per_seq_ms), 0.15),
        (
            "per_ctx_token_ms",
            rel(c("per_ctx_token_ms"), truth.per_ctx_token_ms),
            0.15,
        ),
        (
            "prefill_tokens_per_ms",
            rel(c("prefill_tokens_per_ms"), truth.prefill_tokens_per_ms),
            0.10,
        ),
        (
            "prefill_ctx_ms_per_ktok",
            rel(c("prefill_ctx_ms_per_ktok"), truth.prefill_ctx_ms_per_ktok),
            0.15,
        ),
    ];
    eprintln!("relative errors: {errors:?}");
    for (name, e, tol) in errors {
        assert!(e.abs() <= tol, "{name}: relative error {e:.4} > {tol} ({errors:?})");
    }
    let what = format!("{errors:?}");
    // A term the fit does not have is 0 in the profile it writes.
    let term = |name: &str| fit["coefficients"][name]["value"].as_f64().unwrap_or(0.0);
    fit_check::assert_decode_steps_within(&truth, &term, 0.05, &[1.0, 2.0, 4.0, 8.0], &[128.0, 1024.0], &what);
    let (rate, ctx) = (c("prefill_tokens_per_ms"), c("prefill_ctx_ms_per_ktok"));
    fit_check::assert_prefills_within(&truth, rate, ctx, 0.05, &[128.0, 512.0, 1024.0, 2048.0], &what);
    assert!(
        (c("prefill_fixed_ms") - truth.prefill_fixed_ms).abs() <= 10.0,
        "prefill_fixed_ms {}",
        c("prefill_fixed_ms")
    );
}

/// `export --to` writes each peer's equivalent of a scenario, and `import --config` reads it back to the same
/// workload; what cannot be carried is listed.
#[test]
fn export_and_import_config_round_trip() {
    let d = Scratch::new("interop-export");
    let sc = d.join("sc.json");
    let profile = serde_json::to_value(shared::engine::presets::llama3_8b_h100()).unwrap();
    std::fs::write(
        &sc,
        json!({"model": "engine", "profile": profile,
               "workload": {"kind": "closed_loop", "users": 6, "num_requests": 120, "think_s": 0.5,
                            "prompt": {"dist": "fixed", "tokens": 900}, "output": {"dist": "fixed", "tokens": 70}}})
        .to_string(),
    )
    .unwrap();
    for tool in ["guidellm", "aiperf", "inference-perf", "vllm-bench"] {
        let out = d.join(format!("{tool}.cfg"));
        let (_, err) = ok(&["export", "--to", tool, s(&sc), "--out", s(&out)]);
        assert!(
            err.contains("think_s"),
            "{tool}: the think time must be listed as lost: {err}"
        );
        let back = d.join(format!("{tool}.json"));
        ok(&["import", "--config", s(&out), "--from", tool, "--out", s(&back)]);
        let w: Value = serde_json::from_str(&std::fs::read_to_string(&back).unwrap()).unwrap();
        let w = &w["workload"];
        assert_eq!(w["kind"], "closed_loop", "{tool}: {w}");
        assert_eq!(w["users"], 6, "{tool}");
        assert_eq!(w["num_requests"], 120, "{tool}");
        assert_eq!(w["prompt"]["tokens"], 900, "{tool}");
        assert_eq!(w["output"]["tokens"], 70, "{tool}");
    }
    // The tool is detected from a command line given in place of a file.
    let (stdout, _) = ok(&[
        "import",
        "--config",
        "aiperf profile --request-rate 3 --request-count 30 --isl 200 --osl 20",
    ]);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["workload"]["kind"], "poisson");
    assert_eq!(v["workload"]["rate_rps"], 3.0);
    // A GuideLLM result file keeps its config: read back to the run's load (2 streams, 8 requests).
    let (stdout, _) = ok(&["import", "--config", s(&fixture("guidellm/benchmarks.json"))]);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["workload"]["users"], 2);
    assert_eq!(v["workload"]["num_requests"], 8);
    // A workload the peers cannot express is refused with the way out.
    let bursty = d.join("bursty.json");
    std::fs::write(
        &bursty,
        json!({"model": "engine", "profile": serde_json::to_value(shared::engine::presets::llama3_8b_h100()).unwrap(),
        "workload": {"kind": "bursty", "num_requests": 50, "seed": 1, "mean_rps": 2.0}})
        .to_string(),
    )
    .unwrap();
    let e = fails(&["export", "--to", "guidellm", s(&bursty)]);
    assert!(e.contains("bursty") && e.contains("report --export mooncake"), "{e}");
}

/// `sim-server --request-log`: one line per generation request, streamed or not, with the server's own times and
/// counts (what `scripts/bench_interop.sh` checks the tools against).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_server_logs_every_request_it_served() {
    use loadshape::sim_server::{self, Config};
    let d = Scratch::new("interop-simlog");
    let log = d.join("log.jsonl");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        request_log: Some(log.clone()),
        speed: 4.0,
        ..Config::default()
    };
    let server = tokio::spawn(sim_server::serve(listener, config, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    for stream in [true, false] {
        let body = json!({"model": "sim", "prompt": "one two three four", "max_tokens": 5, "ignore_eos": true, "stream": stream,
                          "stream_options": {"include_usage": true}});
        let resp = client
            .post(format!("http://{addr}/v1/completions"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(resp.status().is_success());
        let _ = resp.text().await.unwrap_or_else(|e| panic!("{e}"));
    }
    let _ = stop.send(());
    let _ = server.await;
    let lines = server_log(&log);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (l, stream) in lines.iter().zip([true, false]) {
        assert_eq!(
            (l.prompt_tokens, l.output_tokens, l.completed, l.stream),
            (4, 5, true, stream),
            "{l:?}"
        );
        let first = l.t_first_token_s.unwrap_or(f64::NAN);
        assert!(l.t_arrival_s <= first && first <= l.t_end_s, "{l:?}");
    }
    assert_eq!(lines[0].frames, 5);
    assert!(lines[0].req < lines[1].req);
}

/// AIPerf's multi-turn conversations (chat, each turn resending the history): `conversation_id` becomes the
/// session and `turn_index` the step, and the cached tokens are the server's.
#[test]
fn aiperf_conversations_become_sessions_with_the_servers_cached_tokens() {
    let d = Scratch::new("interop-multiturn");
    let out = d.join("mt.jsonl");
    let (_, err) = ok(&[
        "import",
        s(&fixture("aiperf-multiturn/profile_export.jsonl")),
        "--out",
        s(&out),
    ]);
    assert!(err.contains("multi-turn"), "{err}");
    let recs = records(&out);
    let log = server_log(&fixture("aiperf-multiturn/server.jsonl"));
    assert_eq!(recs.len(), log.len());
    let mut sessions: std::collections::BTreeMap<u64, Vec<&RequestRecord>> = Default::default();
    for r in &recs {
        sessions.entry(r.session).or_default().push(r);
    }
    assert_eq!(sessions.len(), 3, "{recs:?}");
    for steps in sessions.values() {
        let mut steps = steps.clone();
        steps.sort_by_key(|r| r.step);
        assert_eq!(
            steps.iter().map(|r| (r.step, r.steps_asked)).collect::<Vec<_>>(),
            [(0, 3), (1, 3), (2, 3)]
        );
        for w in steps.windows(2) {
            // The next turn resends this one's prompt and reply: it is longer, and the server found a cached prefix.
            let (a, b) = (w[0], w[1]);
            assert!(
                b.prompt_tokens.unwrap_or(0) >= a.prompt_tokens.unwrap_or(0) + a.gen_tokens,
                "{a:?} {b:?}"
            );
            assert!(b.cached_tokens.unwrap_or(0) > 0, "{b:?}");
        }
    }
    assert_eq!(
        recs.iter().map(|r| r.cached_tokens.unwrap_or(0)).sum::<u64>(),
        log.iter().map(|l| l.cached_tokens).sum::<u64>()
    );
    assert_eq!(
        recs.iter().map(|r| r.prompt_tokens.unwrap_or(0)).sum::<u64>(),
        log.iter().map(|l| u64::from(l.prompt_tokens)).sum::<u64>()
    );
}
