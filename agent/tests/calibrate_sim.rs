//! `loadshape calibrate` against the built-in sim-server (in-process, 127.0.0.1) emulating a known profile: the fit
//! recovers it. Also `sim-server --profile-file` and calibrate's refusals.
//!
//! The sim-server runs `SPEED` times faster than wall time, so a server of profile P looks, from the client, like
//! one whose millisecond coefficients are P's divided by `SPEED` and whose prefill rate is multiplied by it: the
//! test scales back before comparing.

use std::path::PathBuf;

use clap::Parser as _;
use loadshape::cmd::calibrate;
use loadshape::sim_server::{self, Config, EngineChoice};
use loadshape::{Cli, Command};
use shared::engine::EngineProfile;

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/sim_server.rs"]
mod sim_server_helper;
use scratch::Scratch;

#[path = "common/fit_check.rs"]
mod fit_check;

const SPEED: f64 = 2.0;

fn truth() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        max_model_len: Some(8192),
        prefill_ctx_ms_per_ktok: 0.08,
        ..EngineProfile::linear("truth", 20_000, 8, 8192, [16.0, 1.5, 0.0015, 6.0, 8.0])
    }
}

fn tmp(name: &str) -> Scratch {
    Scratch::new(&format!("calib-{name}"))
}

fn calibrate_args(args: &[&str]) -> calibrate::Args {
    let mut argv = vec!["loadshape", "calibrate"];
    argv.extend_from_slice(args);
    match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
        Command::Calibrate(a) => a,
        other => panic!("{other:?}"),
    }
}

/// The live calibrations time a real-time server: one at a time, or they would time each other.
static LIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn start(profile: EngineProfile) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let config = Config {
        engine: EngineChoice::Profile(Box::new(profile)),
        speed: SPEED,
        ..Config::default()
    };
    tokio::spawn(sim_server::serve(listener, config, async {
        let _ = rx.await;
    }));
    (format!("http://{addr}/v1"), tx)
}

/// The decode step the fitted terms add up to (scaled back by `SPEED`) is `truth`'s within `tol` at every batch
/// size and context the probe ran.
fn assert_decode_steps_within(
    truth: &EngineProfile,
    fit: &shared::calibrate::Fit,
    tol: f64,
    errors: &[(&str, f64, f64)],
) {
    let c = |name: &str| fit.coefficients.get(name).map_or(0.0, |co| co.value) * SPEED;
    let what = format!("{errors:?}");
    fit_check::assert_decode_steps_within(truth, &c, tol, &[1.0, 2.0, 4.0, 8.0], &[128.0, 1024.0], &what);
}

/// The time a cold prefill's tokens take beyond the fixed part (`n / prefill_tokens_per_ms` + the context term, scaled
/// back by `SPEED`) is `truth`'s within `tol` at every length the probe ran (to `--max-prompt-tokens 2048`).
fn assert_prefills_within(truth: &EngineProfile, fit: &shared::calibrate::Fit, tol: f64, errors: &[(&str, f64, f64)]) {
    let c = |name: &str| fit.coefficients.get(name).map_or(0.0, |co| co.value);
    let (rate, ctx) = (c("prefill_tokens_per_ms") / SPEED, c("prefill_ctx_ms_per_ktok") * SPEED);
    let what = format!("{errors:?}");
    fit_check::assert_prefills_within(truth, rate, ctx, tol, &[128.0, 512.0, 1024.0, 2048.0], &what);
}

/// The probe recovers the profile the sim-server emulates. Tolerances (relative error of the fitted value,
/// scaled back by `SPEED`) are what real-time jitter allows at this budget; the measured errors are in
/// docs/calibration.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_recovers_a_known_profile() {
    let _one = LIVE.lock().await;
    let p = truth();
    let (url, _stop) = start(p.clone()).await;
    let out = tmp("recover");
    let a = calibrate_args(&[
        "--url",
        &url,
        "--out",
        out.to_str().unwrap_or_default(),
        "--budget",
        "60",
        "--max-prompt-tokens",
        "2048",
        "--decode-tokens",
        "64",
        "--max-num-seqs",
        "8",
        // A vLLM-like engine: told so. Left to `auto`, real-time noise at batch 8 moved 6 s.e. of cost into
        // batch_kv_ms_per_ktok in 2 of 3 runs (per_ctx_token_ms −14 … −18 %; docs/calibration.md).
        "--batch-kv",
        "off",
        // ... and no prefill over the other sequences' KV: the probe of before, phase for phase (its prefill-kv
        // phase takes 15 % of the budget from the others; at load ≈ 10 that cost per_seq_ms −12 % once).
        "--prefill-kv",
        "off",
        // ... nor a conversation (reply_cached_share: its own test below).
        "--reply-share",
        "off",
        // ... nor sessions brought back after eviction (the tiers: their own tests below).
        "--tiers",
        "off",
    ]);
    let fit = calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"));
    let c = |name: &str| fit.coefficients[name].value;
    let rel = |got: f64, want: f64| (got - want) / want;
    let errors = [
        ("step_fixed_ms", rel(c("step_fixed_ms") * SPEED, p.step_fixed_ms), 0.05),
        // The two smallest shares of a step (per_seq 12 of ≈ 45 ms at batch 8): on a loaded machine the
        // sim-server's catch-up clock biases short steps' median gap low by up to 2 %, which moved per_seq_ms
        // −10.2 % and −12 % in two CI-like runs (docs/calibration.md). What the fit must get right is the step
        // they add up to, asserted per probed cell below within 5 %.
        ("per_seq_ms", rel(c("per_seq_ms") * SPEED, p.per_seq_ms), 0.15),
        (
            "per_ctx_token_ms",
            rel(c("per_ctx_token_ms") * SPEED, p.per_ctx_token_ms),
            0.15,
        ),
        (
            "prefill_tokens_per_ms",
            rel(c("prefill_tokens_per_ms") / SPEED, p.prefill_tokens_per_ms),
            0.10,
        ),
        // A third of a 2,048-token prefill, and traded against the rate: +12.7 / +7.7 % in two runs at load 8-13
        // (docs/calibration.md). The prefill time they add up to is asserted within 5 % below.
        (
            "prefill_ctx_ms_per_ktok",
            rel(c("prefill_ctx_ms_per_ktok") * SPEED, p.prefill_ctx_ms_per_ktok),
            0.15,
        ),
    ];
    eprintln!("relative errors: {errors:?}");
    eprintln!(
        "prefill_fixed_ms {} (truth {}), notes {:?}",
        c("prefill_fixed_ms") * SPEED,
        p.prefill_fixed_ms,
        fit.notes
    );
    for (name, e, tol) in errors {
        assert!(e.abs() <= tol, "{name}: relative error {e:.4} > {tol} ({errors:?})");
    }
    assert_decode_steps_within(&p, &fit, 0.05, &errors);
    assert_prefills_within(&p, &fit, 0.05, &errors);
    // The fixed part of a prefill step also holds the client's and server's per-request overhead (HTTP, the
    // engine task's wake-up): within 5 wall milliseconds (10 emulated).
    assert!((c("prefill_fixed_ms") * SPEED - p.prefill_fixed_ms).abs() <= 10.0);
    assert!(
        fit.decode.r2 > 0.7 && fit.prefill.r2 > 0.7,
        "{:?} {:?}",
        fit.decode,
        fit.prefill
    );
    // The files: a profile that reads back and is ready for a scenario, and the report.
    let text = std::fs::read_to_string(out.join("profile.json")).unwrap_or_else(|e| panic!("{e}"));
    let back = EngineProfile::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    // Equal up to the last bit of a float (serde_json's parser is not correctly rounded).
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    assert!(close(back.prefill_tokens_per_ms, fit.profile.prefill_tokens_per_ms));
    assert!(close(back.per_ctx_token_ms, fit.profile.per_ctx_token_ms));
    assert_eq!(back.basis, fit.profile.basis);
    assert!(
        back.basis.starts_with("measured: loadshape calibrate"),
        "{}",
        back.basis
    );
    // Limits: the sim-server's cache_config_info gives the KV geometry; --max-num-seqs was given.
    assert_eq!(
        (back.block_size, back.num_kv_blocks, back.max_num_seqs),
        (16, 20_000, 8)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fit.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    for key in [
        "coefficients",
        "decode",
        "prefill",
        "residuals",
        "unused",
        "notes",
        "method",
    ] {
        assert!(report.get(key).is_some(), "fit.json lacks {key}");
    }
    assert!(report["coefficients"]["per_seq_ms"]["std_error"].as_f64().is_some());
    // `--from` the probe's own record files fits the same coefficients (to the decimals the JSONL keeps).
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("probe"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 9, "{files:?}");
    // --max-num-seqs given: no cap phase, and fit.json says the flag gave it.
    assert!(
        !files.iter().any(|f| f.to_string_lossy().contains("-cap.jsonl")),
        "{files:?}"
    );
    let cap = cap_of(&fit);
    assert_eq!((cap.value, cap.found_by.as_str(), cap.probe), (8, "flag", None));
    assert_eq!(report["max_num_seqs"]["found_by"], "flag");
    assert_eq!(fit.profile.prefill_batch_kv_ms_per_ktok, 0.0, "{:?}", fit.notes);
    let again = tmp("again");
    let mut argv: Vec<String> = vec![
        "--out".into(),
        again.display().to_string(),
        "--max-num-seqs".into(),
        "8".into(),
        "--batch-kv".into(),
        "off".into(),
        "--prefill-kv".into(),
        "off".into(),
        "--reply-share".into(),
        "off".into(),
    ];
    for f in &files {
        argv.push("--from".into());
        argv.push(f.display().to_string());
    }
    // ... told the deployment it measured, it also writes that deployment with the fit's efficiencies.
    let dep = again.join("measured.json");
    std::fs::write(&dep, r#"{"model": "llama-3.1-8b", "gpu": "h100-sxm"}"#).unwrap_or_else(|e| panic!("{e}"));
    argv.push("--deployment".into());
    argv.push(dep.display().to_string());
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let refit = calibrate::calibrate(&calibrate_args(&argv))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let carried = refit
        .deployment_fit
        .as_ref()
        .unwrap_or_else(|| panic!("no deployment_fit"));
    let written = std::fs::read_to_string(again.join("deployment.json")).unwrap_or_else(|e| panic!("{e}"));
    let written = shared::deploy::Deployment::from_json(&written).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(written, carried.deployment);
    assert_eq!(written.max_num_seqs, Some(8), "{:?}", carried.filled);
    assert!(
        carried
            .filled
            .iter()
            .any(|f| f == "max_num_seqs = 8 (flag --max-num-seqs)"),
        "{:?}",
        carried.filled
    );
    // The truth is no deployment's roofline: a factor may end at the edge of its range (an overhead of 0), saying so.
    for (name, f) in &carried.factors {
        assert!(f.value >= 0.0 && !f.why.is_empty(), "{name}: {f:?}");
        if f.why.contains("held at the edge") {
            assert!(
                carried.notes.iter().any(|n| n.contains("held at")),
                "{:?}",
                carried.notes
            );
        }
    }
    assert_eq!(
        carried.factors["mfu"].identified,
        refit.coefficients["prefill_tokens_per_ms"].identified
    );
    assert!(!carried.factors["link_utilization"].identified);
    assert!(
        carried.max_error.is_finite() && carried.shapes.len() >= 10,
        "{carried:?}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("fit.json")).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(report["deployment_fit"]["factors"]["bandwidth_utilization"]["identified"].is_boolean());
    for (name, co) in &fit.coefficients {
        let v = refit.coefficients[name].value;
        assert!(
            (v - co.value).abs() <= 1e-6 * co.value.abs().max(1e-9),
            "{name}: {v} vs {}",
            co.value
        );
    }
    // ... and the same limits: the KV geometry `--url` read from the live `/metrics` comes from the probe's scrape
    // sidecars (`NN-PHASE.jsonl.server.json`'s `limits`), named in the notes; no flag gives it.
    let limits = |p: &EngineProfile| {
        (
            p.block_size,
            p.num_kv_blocks,
            p.max_num_seqs,
            p.max_model_len,
            p.max_num_batched_tokens,
        )
    };
    assert_eq!(limits(&refit.profile), limits(&fit.profile));
    assert!(
        refit
            .notes
            .iter()
            .any(|n| n.contains("vLLM /metrics cache_config_info (from 00-prefill.jsonl.server.json)")),
        "{:?}",
        refit.notes
    );
    assert!(
        !refit.notes.iter().any(|n| n.contains("sidecar")),
        "every probe file has its sidecar: {:?}",
        refit.notes
    );
}

/// A llama.cpp-like engine whose decode step reads the whole batch's KV (`batch_kv_ms_per_ktok`): the probe's
/// batch sizes 1, 2, 4, 8 at two contexts separate it from `per_ctx_token_ms`, and the fit recovers both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_recovers_a_unified_kv_profile() {
    let _one = LIVE.lock().await;
    let p = EngineProfile {
        batch_kv_ms_per_ktok: 0.15,
        ..truth()
    };
    let (url, _stop) = start(p.clone()).await;
    let out = tmp("unified");
    let a = calibrate_args(&[
        "--url",
        &url,
        "--tiers",
        "off",
        "--out",
        out.to_str().unwrap_or_default(),
        "--budget",
        "60",
        "--max-prompt-tokens",
        "2048",
        "--decode-tokens",
        "64",
        "--max-num-seqs",
        "8",
        // The term is known to be there: this test checks that the fit recovers it, not `auto`'s choice to keep
        // it (one run at load ≈ 3 fitted it at 0.082 ± 0.003 but auto dropped it, as it narrowed the residuals by
        // < 2 %, and step_fixed_ms absorbed it: −6.1 %).
        "--batch-kv",
        "on",
    ]);
    let fit = calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"));
    let c = |name: &str| fit.coefficients[name].value;
    let rel = |got: f64, want: f64| (got - want) / want;
    let errors = [
        ("step_fixed_ms", rel(c("step_fixed_ms") * SPEED, p.step_fixed_ms), 0.05),
        ("per_seq_ms", rel(c("per_seq_ms") * SPEED, p.per_seq_ms), 0.15),
        (
            "prefill_tokens_per_ms",
            rel(c("prefill_tokens_per_ms") / SPEED, p.prefill_tokens_per_ms),
            0.10,
        ),
        // A third of a 2,048-token prefill, and traded against the rate: +12.7 / +7.7 % in two runs at load 8-13
        // (docs/calibration.md). The prefill time they add up to is asserted within 5 % below.
        (
            "prefill_ctx_ms_per_ktok",
            rel(c("prefill_ctx_ms_per_ktok") * SPEED, p.prefill_ctx_ms_per_ktok),
            0.15,
        ),
    ];
    eprintln!("relative errors (unified KV): {errors:?}\nnotes {:?}", fit.notes);
    for (name, e, tol) in errors {
        assert!(e.abs() <= tol, "{name}: relative error {e:.4} > {tol} ({errors:?})");
    }
    assert_prefills_within(&p, &fit, 0.05, &errors);
    // The two context terms grow together over the probe's grid (per_ctx with batch × context, batch_kv with
    // batch² × context), and batch_kv is at most 20 % of the largest step probed, so a 1 % bias of one cell's
    // median gap moves it by 5-10 %. On a loaded machine the sim-server's catch-up clock can bias the median gap of
    // short steps low (the mean stays exact; docs/calibration.md, "Why batch_kv_ms_per_ktok misses the 5 % goal
    // live", and "The sim-server's engine paced to the microsecond" for what that did). Each is
    // recovered to 0.2 % from the engine's own records (shared/tests/calibrate_fit.rs); what the live fit must
    // get right is the step time they add up to, at every batch size and context the probe ran: within 5 %
    // (worst cell 1.5-1.7 % in those runs).
    assert_decode_steps_within(&p, &fit, 0.05, &errors);
    let kv = c("batch_kv_ms_per_ktok") * SPEED;
    let kv_error = kv / p.batch_kv_ms_per_ktok - 1.0;
    eprintln!("batch_kv_ms_per_ktok: relative error {kv_error:+.4}");
    assert!(
        fit.coefficients["batch_kv_ms_per_ktok"].identified && kv_error.abs() <= 0.5,
        "batch_kv_ms_per_ktok {kv} vs {} (identified, within 50 %)",
        p.batch_kv_ms_per_ktok
    );
    let text = std::fs::read_to_string(out.join("profile.json")).unwrap_or_else(|e| panic!("{e}"));
    let back = EngineProfile::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert!(back.batch_kv_ms_per_ktok > 0.0, "{text}");
    // The engine has no prefill term over the other sequences' KV: the probe's prefill-kv phase (`--prefill-kv
    // auto`) finds none, or too little to keep, and says so.
    assert_eq!(back.prefill_batch_kv_ms_per_ktok, 0.0, "{:?}", fit.notes);
    assert!(
        fit.notes
            .iter()
            .any(|n| n.starts_with("prefill_batch_kv_ms_per_ktok: fitted")),
        "{:?}",
        fit.notes
    );
}

/// A unified-KV engine whose prompt tokens also attend to the other sequences' KV (`prefill_batch_kv_ms_per_ktok`,
/// llama.cpp's `--kv-unified`): the probe's prefill-kv phase (warm prefills of 256 new tokens beside a request
/// decoding at 256 … 1,536 tokens of context) and the fit's third stage recover it, `--prefill-kv auto`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_recovers_a_unified_prefill_kv_profile() {
    let _one = LIVE.lock().await;
    let p = EngineProfile {
        prefill_batch_kv_ms_per_ktok: 0.1,
        prefill_tile_rows: 0,
        ubatch_tokens: 0,
        ..truth()
    };
    let (url, _stop) = start(p.clone()).await;
    let out = tmp("prefill-kv");
    let a = calibrate_args(&[
        "--url",
        &url,
        "--tiers",
        "off",
        "--out",
        out.to_str().unwrap_or_default(),
        "--budget",
        "80",
        "--max-prompt-tokens",
        "2048",
        // Holders of 4 × 32 = 128 tokens: about as long as the 16 prefills beside each.
        "--decode-tokens",
        "32",
        "--max-num-seqs",
        "8",
        "--batch-kv",
        "off",
    ]);
    let fit = calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"));
    let c = |name: &str| fit.coefficients[name].value;
    let rel = |got: f64, want: f64| (got - want) / want;
    let e = rel(
        c("prefill_batch_kv_ms_per_ktok") * SPEED,
        p.prefill_batch_kv_ms_per_ktok,
    );
    eprintln!(
        "prefill_batch_kv_ms_per_ktok: relative error {e:+.4}; stage {:?}; prefill_ctx {:+.4}, rate {:+.4}\nnotes {:?}",
        fit.prefill_kv,
        rel(c("prefill_ctx_ms_per_ktok") * SPEED, p.prefill_ctx_ms_per_ktok),
        rel(c("prefill_tokens_per_ms") / SPEED, p.prefill_tokens_per_ms),
        fit.notes
    );
    assert!(
        fit.coefficients["prefill_batch_kv_ms_per_ktok"].identified,
        "{:?}",
        fit.notes
    );
    assert!(
        e.abs() <= 0.2,
        "prefill_batch_kv_ms_per_ktok: relative error {e:.4} > 0.2"
    );
    let text = std::fs::read_to_string(out.join("profile.json")).unwrap_or_else(|e| panic!("{e}"));
    let back = EngineProfile::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert!(back.prefill_batch_kv_ms_per_ktok > 0.0, "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fit.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report["prefill_kv"]["n"].as_u64().is_some_and(|n| n >= 8),
        "{}",
        report["prefill_kv"]
    );
}

/// `calibrate --from FROM --out OUT`'s error, which it must give (`what` names the case).
async fn refusal(from: &std::path::Path, out: &std::path::Path, what: &str) -> String {
    let a = calibrate_args(&[
        "--from",
        from.to_str().unwrap_or_default(),
        "--out",
        out.to_str().unwrap_or_default(),
    ]);
    format!("{:#}", calibrate::calibrate(&a).await.expect_err(what))
}

/// `--from` on a run without usage, or with too few usable requests, is refused naming what is missing.
#[tokio::test]
async fn calibrate_refuses_runs_it_cannot_fit() {
    let dir = tmp("refuse");
    let rec = |i: u64, prompt: Option<u64>| {
        let gap = 10.0 + 0.001 * prompt.unwrap_or(0) as f64;
        let mut r = serde_json::json!({"schema": 1, "session": i, "inst": 0, "step": 0, "steps_asked": 1,
            "base_asked": 100, "ok": true, "t_submit": i as f64 * 2.0, "ttft_s": 0.05, "wall_s": 0.5,
            "gen_tokens": 20, "asked_tokens": 20, "prompt_tokens": prompt, "cached_tokens": 0, "sse_frames": 20,
            "prompt_chars": 400, "itl": {"mean_ms": gap, "p50_ms": gap, "p99_ms": gap, "max_ms": gap},
            "usage_source": "final_frame"});
        if prompt.is_none() {
            r["usage_source"] = "missing".into();
        }
        r.to_string()
    };
    let no_usage = dir.join("no_usage.jsonl");
    let lines: Vec<String> = (0..20).map(|i| rec(i, None)).collect();
    std::fs::write(&no_usage, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    let e = refusal(&no_usage, &dir, "no usage").await;
    assert!(e.contains("usable requests") && e.contains("usage"), "{e}");
    let few = dir.join("few.jsonl");
    let lines: Vec<String> = (0..3).map(|i| rec(i, Some(100))).collect();
    std::fs::write(&few, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    let e = refusal(&few, &dir, "too few").await;
    assert!(e.contains("3 usable requests (need 6"), "{e}");
    // Three prompt lengths only: decode fits (one batch size: per_seq_ms fixed at 0), prefill refuses.
    let same = dir.join("same.jsonl");
    let lines: Vec<String> = (0..30)
        .map(|i| rec(i, Some([100, 2000, 4000][i as usize % 3])))
        .collect();
    std::fs::write(&same, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    let e = refusal(&same, &dir, "one length").await;
    assert!(e.contains("prefill") && e.contains("distinct prompt lengths"), "{e}");
    // A file of nothing but unreadable lines names the first one and why.
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, "not json\n{\"schema\": 1}\n").unwrap_or_else(|e| panic!("{e}"));
    let e = refusal(&junk, &dir, "no records").await;
    assert!(
        e.contains("no records in") && e.contains("2 unreadable line(s)") && e.contains("line 1: expected ident"),
        "{e}"
    );
    assert!(!dir.join("profile.json").exists(), "a refused fit writes no profile");
    // A bad --deployment is refused before anything is read or sent, naming the file and the field.
    let dep = dir.join("dep.json");
    std::fs::write(&dep, r#"{"model": "llama-3.1-8b", "gpu": "h300"}"#).unwrap_or_else(|e| panic!("{e}"));
    let a = calibrate_args(&[
        "--from",
        junk.to_str().unwrap_or_default(),
        "--out",
        dir.to_str().unwrap_or_default(),
        "--deployment",
        dep.to_str().unwrap_or_default(),
    ]);
    let e = format!("{:#}", calibrate::calibrate(&a).await.expect_err("bad deployment"));
    assert!(e.contains("dep.json") && e.contains("gpu names no known GPU"), "{e}");
}

/// `--from` a session run with hidden reasoning: the reasoning tokens are decode steps like the reply's (the fit
/// counts every output token and times from the first frame of any kind), so one user's sessions with reasoning
/// recover the decode step at batch 1. (Their prefill terms are weakly identified, with or without reasoning: the
/// prefills are a few hundred new tokens each, so the rate trades against the fixed part from run to run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_from_a_session_run_with_hidden_reasoning() {
    let _one = LIVE.lock().await;
    let dir = tmp("reasoning");
    let truth = truth();
    let (url, stop) = start(truth.clone()).await;
    let sc = serde_json::json!({"model": "engine",
        // Four sessions one after another (each ~4 s), so every prefill is alone and the cold first steps give the
        // fit four prompt lengths (a session's later steps all add about the same).
        "workload": {"kind": "sessions", "ladder": "600:3,1500:3,3000:3,5000:3", "gen_tokens": 48,
                     "tool_tokens": 250, "think_s": 0.0, "stagger_s": 8.0, "duration_s": 600.0,
                     "reasoning": {"tokens": 96, "echo": false}},
        "profile": truth, "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 3});
    let path = dir.join("scenario.json");
    std::fs::write(&path, sc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let run = dir.join("run.jsonl");
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadshape"))
        .args([
            "replay",
            "--url",
            &url,
            "--model",
            "sim",
            "--endpoint",
            "chat",
            "--quiet",
            "--metrics-url",
            "none",
        ])
        .arg("--scenario")
        .arg(&path)
        .arg("--out")
        .arg(&run)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = stop.send(());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (recs, _) = loadshape::replay::records::read_records(&run).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(recs.len(), 12, "4 sessions × 3 steps");
    assert!(
        recs.iter().all(|r| r.reasoning_tokens == Some(96)),
        "every reply reasoned"
    );
    let out = dir.join("fit");
    let a = calibrate_args(&[
        "--from",
        run.to_str().unwrap_or_default(),
        "--out",
        out.to_str().unwrap_or_default(),
    ]);
    let fit = calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"));
    let c = |name: &str| fit.coefficients.get(name).map_or(0.0, |co| co.value) * SPEED;
    // One user at a time: batch 1 only, at the contexts the sessions reached.
    let what = format!("{:?}", fit.coefficients);
    fit_check::assert_decode_steps_within(&truth, &c, 0.08, &[1.0], &[700.0, 2000.0, 5000.0], &what);
}

/// What llama.cpp's `/props` says fills the limits a deployment file leaves out (slots → `max_num_seqs`, per-slot
/// `n_ctx` → `max_model_len`, `n_batch` → `max_num_batched_tokens`), each named; what the file gives stays, and
/// llama.cpp's assumed block size is not taken for the server's.
#[test]
fn llama_cpp_props_fill_what_the_deployment_leaves_out() {
    let mut d = calibrate::Discovered::default();
    calibrate::parse_props(
        &serde_json::json!({"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}}),
        &mut d,
    );
    let mut dep = shared::deploy::Deployment::named("llama-3.1-8b", "h100-sxm", 1);
    dep.max_model_len = Some(4096);
    let a = calibrate_args(&["--from", "x.jsonl", "--out", "out"]);
    let filled = calibrate::fill_deployment(&mut dep, &a, &d);
    assert_eq!(dep.max_num_seqs, Some(4));
    assert_eq!(dep.max_model_len, Some(4096), "the file's own value stays");
    assert_eq!(dep.max_num_batched_tokens, Some(calibrate::LLAMA_CPP_DEFAULT_N_BATCH));
    assert_eq!(dep.block_size, None);
    assert_eq!(filled.len(), 2, "{filled:?}");
    assert!(
        filled[0].starts_with("max_num_seqs = 4 (llama.cpp /props"),
        "{filled:?}"
    );
}

/// `sim-server --profile-file` serves the profile in the file; a bad file names the path and the field.
#[test]
fn sim_server_serves_a_profile_file() {
    let dir = tmp("twin");
    let path = dir.join("p.json");
    let mut p = truth();
    p.name = "twin".into();
    std::fs::write(&path, serde_json::to_string(&p).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    let args = |file: &PathBuf| match Cli::try_parse_from([
        "loadshape",
        "sim-server",
        "--profile-file",
        file.to_str().unwrap_or(""),
    ])
    .unwrap_or_else(|e| panic!("{e}"))
    .command
    {
        Command::SimServer(a) => a,
        other => panic!("{other:?}"),
    };
    let config = args(&path).config().unwrap_or_else(|e| panic!("{e:#}"));
    match config.engine {
        EngineChoice::Profile(got) => assert_eq!(*got, p),
        other => panic!("{other:?}"),
    }
    let bad = dir.join("bad.json");
    let mut v = serde_json::to_value(&p).unwrap_or_default();
    v["host_cache"] = serde_json::json!({"capacity_tokens": "many", "restore_tokens_per_ms": 1.0});
    std::fs::write(&bad, v.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let e = format!("{:#}", args(&bad).config().expect_err("bad type"));
    assert!(
        e.contains("bad.json") && e.contains("host_cache.capacity_tokens"),
        "{e}"
    );
    v["host_cache"] = serde_json::Value::Null;
    v["per_seq_ms"] = (-1.0).into();
    std::fs::write(&bad, v.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let e = format!("{:#}", args(&bad).config().expect_err("bad value"));
    assert!(e.contains("bad.json") && e.contains("per_seq_ms"), "{e}");
    let e = format!("{:#}", args(&dir.join("missing.json")).config().expect_err("missing"));
    assert!(e.contains("missing.json"), "{e}");
}

/// A profile whose GPU KV (16,000 tokens) the returns phase outgrows, with or without a host tier below it.
fn tiered(host: Option<(u64, f64)>) -> EngineProfile {
    EngineProfile {
        name: "tiered".into(),
        num_kv_blocks: 1_000,
        prefill_tokens_per_ms: 20.0,
        host_cache: host.map(
            |(capacity_tokens, restore_tokens_per_ms)| shared::engine::profile::HostCache {
                capacity_tokens,
                restore_tokens_per_ms,
            },
        ),
        ..truth()
    }
}

async fn calibrate_tiers(p: &EngineProfile, name: &str) -> shared::calibrate::Fit {
    let (url, _stop) = start(p.clone()).await;
    let out = tmp(name);
    let a = calibrate_args(&[
        "--url",
        &url,
        "--out",
        out.to_str().unwrap_or_default(),
        "--budget",
        "90",
        "--max-prompt-tokens",
        "6000",
        "--decode-tokens",
        "32",
        "--max-num-seqs",
        "8",
        "--batch-kv",
        "off",
        "--prefill-kv",
        "off",
        "--reply-share",
        "off",
    ]);
    calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// With no flag, the probe's returns phase finds a host tier of 60,000 tokens at 50 tokens/ms below a GPU cache of
/// 16,000 tokens: its capacity and restore speed (scaled back by `SPEED`) within 10 %, written as `host_cache`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_finds_a_host_tier() {
    let _one = LIVE.lock().await;
    let p = tiered(Some((60_000, 50.0)));
    let fit = calibrate_tiers(&p, "tier").await;
    let t = fit.tiers.clone().unwrap_or_else(|| panic!("no tiers section"));
    let report = serde_json::to_string(&t).unwrap_or_default();
    let host = fit
        .profile
        .host_cache
        .unwrap_or_else(|| panic!("no host tier written: {report}"));
    let (cap, rate) = (host.capacity_tokens as f64, host.restore_tokens_per_ms / SPEED);
    eprintln!(
        "host tier: {cap} tokens (true 60000), {rate:.2} tokens/ms (true 50); {:?}",
        t.notes
    );
    assert_eq!(t.source, "probe", "{report}");
    assert!(!t.capacity_lower_bound, "the returns never stopped restoring: {report}");
    assert!((cap / 60_000.0 - 1.0).abs() <= 0.10, "capacity {cap}: {report}");
    assert!((rate / 50.0 - 1.0).abs() <= 0.10, "restore speed {rate}: {report}");
}

/// Without a tier, the returns are recomputed and none is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_finds_no_tier_where_there_is_none() {
    let _one = LIVE.lock().await;
    let p = tiered(None);
    let fit = calibrate_tiers(&p, "no-tier").await;
    let t = fit.tiers.clone().unwrap_or_else(|| panic!("no tiers section"));
    let report = serde_json::to_string(&t).unwrap_or_default();
    assert!(fit.profile.host_cache.is_none(), "{report}");
    assert!(fit.profile.kv_tiers.is_empty(), "{report}");
    assert_eq!(t.source, "none", "{report}");
    assert!(
        t.returns.iter().filter(|r| r.outcome == "recomputed").count() >= 3,
        "the probe brought back too few sessions to tell: {report}"
    );
}

/// How fit.json says `max_num_seqs` was found (calibrate always writes it).
fn cap_of(fit: &shared::calibrate::Fit) -> shared::calibrate::cap::CapFit {
    fit.max_num_seqs
        .clone()
        .unwrap_or_else(|| panic!("no max_num_seqs in fit.json"))
}

/// `calibrate --url` with no `--max-num-seqs` against a server that does not report its cap (sim-server, like
/// vLLM): the `cap` phase's reading, and the profile and `fit.json` it gives.
async fn calibrate_cap(
    p: &EngineProfile,
    name: &str,
    extra: &[&str],
) -> (shared::calibrate::Fit, Vec<String>, Scratch) {
    let (url, _stop) = start(p.clone()).await;
    let out = tmp(name);
    let mut argv = vec![
        "--url",
        &url,
        "--out",
        out.to_str().unwrap_or_default(),
        "--budget",
        "30",
        "--max-prompt-tokens",
        "1024",
        "--decode-tokens",
        "32",
        "--batch-kv",
        "off",
        "--prefill-kv",
        "off",
        "--reply-share",
        "off",
        "--tiers",
        "off",
    ];
    argv.extend_from_slice(extra);
    let fit = calibrate::calibrate(&calibrate_args(&argv))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let back = EngineProfile::from_json(&std::fs::read_to_string(out.join("profile.json")).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.max_num_seqs, fit.profile.max_num_seqs);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fit.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        report["max_num_seqs"]["value"].as_u64(),
        Some(u64::from(back.max_num_seqs)),
        "{}",
        report["max_num_seqs"]
    );
    let mut files: Vec<String> = std::fs::read_dir(out.join("probe"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|f| f.ends_with(".jsonl"))
        .collect();
    files.sort();
    (fit, files, out)
}

/// A hidden cap of 12 (below the 160 requests the cap phase starts, not a power of two, not the probe's usual
/// largest batch of 8) is found exactly, written to `profile.json`, said in `fit.json`; the decode phases after it
/// probe batches up to 12, as if `--max-num-seqs 12` had been given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_measures_a_cap_the_server_does_not_report() {
    let _one = LIVE.lock().await;
    let p = EngineProfile {
        max_num_seqs: 12,
        ..truth()
    };
    let (fit, files, out) = calibrate_cap(&p, "cap-12", &[]).await;
    let cap = cap_of(&fit);
    let r = cap.probe.unwrap_or_else(|| panic!("no reading: {cap:?}"));
    assert_eq!(
        (cap.value, cap.found_by.as_str(), cap.lower_bound),
        (12, "probe", false),
        "{cap:?}"
    );
    assert_eq!(fit.profile.max_num_seqs, 12);
    assert_eq!(
        (r.sent, r.decoding_together, r.failed),
        (shared::calibrate::CAP_PROBE_REQUESTS, 12, 0),
        "{r:?}"
    );
    assert!(r.queued > 0 && r.started >= 24, "a second round seen: {r:?}");
    assert!(
        fit.notes.iter().any(|n| n.starts_with("max_num_seqs 12: measured")),
        "{:?}",
        fit.notes
    );
    assert!(
        fit.profile.basis.contains("probe max_num_seqs 12"),
        "{}",
        fit.profile.basis
    );
    assert_eq!(files.first().map(String::as_str), Some("00-cap.jsonl"), "{files:?}");
    assert!(files.iter().any(|f| f.contains("decode-b12-")), "{files:?}");
    // `--from` the probe's files reads the cap phase back (by its summary's shape) and fits the rest alone: the
    // same cap, the same coefficients.
    let again = tmp("cap-12-again");
    let mut argv: Vec<String> = [
        "--out",
        &again.display().to_string(),
        "--batch-kv",
        "off",
        "--prefill-kv",
        "off",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(["--reply-share", "off", "--tiers", "off"].iter().map(|s| s.to_string()))
    .collect();
    for f in &files {
        argv.push("--from".into());
        argv.push(out.join("probe").join(f).display().to_string());
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let refit = calibrate::calibrate(&calibrate_args(&argv))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(refit.max_num_seqs, fit.max_num_seqs);
    assert_eq!(refit.profile.max_num_seqs, 12);
    for (name, co) in &fit.coefficients {
        let v = refit.coefficients[name].value;
        assert!(
            (v - co.value).abs() <= 1e-6 * co.value.abs().max(1e-9),
            "{name}: {v} vs {}",
            co.value
        );
    }
}

/// A cap above the 160 requests (200 here): all decoded together, so the cap is at least 160: `fit.json` says
/// so, the profile keeps the default 256; `--max-num-seqs` given instead overrides, with no cap phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_above_the_probe_is_a_lower_bound_and_the_flag_overrides() {
    let _one = LIVE.lock().await;
    // A small per-sequence cost: 160 decoding together keep a short step.
    let p = EngineProfile {
        max_num_seqs: 200,
        per_seq_ms: 0.2,
        ..truth()
    };
    let (fit, files, _) = calibrate_cap(&p, "cap-200", &[]).await;
    let cap = cap_of(&fit);
    let r = cap.probe.unwrap_or_else(|| panic!("no reading: {cap:?}"));
    assert_eq!(
        (cap.value, cap.found_by.as_str(), cap.lower_bound),
        (256, "probe", true),
        "{cap:?}"
    );
    assert_eq!(fit.profile.max_num_seqs, 256);
    assert_eq!(
        (r.decoding_together, r.queued),
        (shared::calibrate::CAP_PROBE_REQUESTS, 0),
        "{r:?}"
    );
    assert!(fit.notes.iter().any(|n| n.contains("at least 160")), "{:?}", fit.notes);
    assert_eq!(files.first().map(String::as_str), Some("00-cap.jsonl"), "{files:?}");
    assert!(!files.iter().any(|f| f.contains("decode-b16-")), "{files:?}");
    // The flag wins over what the probe would find (here 200): no cap phase, written as given.
    let (fit, files, _) = calibrate_cap(&p, "cap-flag", &["--max-num-seqs", "24"]).await;
    let cap = cap_of(&fit);
    assert_eq!(
        (cap.value, cap.found_by.as_str(), cap.probe),
        (24, "flag", None),
        "{cap:?}"
    );
    assert_eq!(fit.profile.max_num_seqs, 24);
    assert!(!files.iter().any(|f| f.contains("-cap.jsonl")), "{files:?}");
}

/// `calibrate` leaves the server idle: a request cut while the server prefills it (here a 6,000-token prompt at 2
/// tokens/ms: 1.5 s of wall time at this suite's speed, long enough that a loaded machine still cuts it mid-step)
/// stays in the engine until its step ends; `wait_idle`, which the probe calls at its end, returns only once
/// `/metrics` says nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_waits_for_the_server_to_drop_its_cut_requests() {
    let _one = LIVE.lock().await;
    let slow_prefill = EngineProfile {
        prefill_tokens_per_ms: 2.0,
        ..truth()
    };
    let (url, _stop) = start(slow_prefill).await;
    let origin = url.trim_end_matches("/v1").to_string();
    let gauges = || async {
        let text = sim_server_helper::metrics_text(&origin).await;
        let s = loadshape::replay::prom::Snapshot::from_text(0.0, &text);
        s.running.unwrap_or(0.0) + s.waiting.unwrap_or(0.0)
    };
    let prompt: Vec<String> = (0..6000).map(|i| format!("w{i}")).collect();
    let body = serde_json::json!({"model": "sim", "prompt": prompt.join(" "), "max_tokens": 8, "stream": true});
    // Sent, then dropped before its first token (the prefill takes far longer than this wait).
    let sent = tokio::spawn(async move {
        let _ = reqwest::Client::new()
            .post(format!("{url}/completions"))
            .json(&body)
            .send()
            .await;
    });
    let t0 = std::time::Instant::now();
    while gauges().await == 0.0 {
        // Generous: the wait is for the request's arrival, not a timing (a CI machine's background builds can stall
        // a debug test binary for seconds).
        assert!(
            t0.elapsed().as_secs_f64() < 30.0,
            "the request never reached the engine"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    sent.abort();
    let _ = sent.await;
    assert!(
        gauges().await > 0.0,
        "cut mid-prefill, the request is still in its step"
    );
    let left = calibrate::wait_idle(&format!("{origin}/v1"), None, calibrate::IDLE_WAIT).await;
    assert_eq!(left, Some(0.0));
    assert_eq!(gauges().await, 0.0, "idle once wait_idle returns");
}
