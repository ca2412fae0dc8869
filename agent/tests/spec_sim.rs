//! Speculative decoding live: `sim-server` with a known speculative profile streams several tokens per frame and
//! reports llama.cpp's `timings` (`draft_n`, `draft_n_accepted`) and vLLM's `spec_decode_*` counters; `replay` records
//! tokens, frames and the counts; `calibrate --from … --spec-base …` recovers the acceptance and the draft's cost
//! within 5 %.

use clap::Parser as _;
use loadshape::cmd::calibrate;
use loadshape::replay::records::read_records;
use loadshape::sim_server::{Config, EngineChoice};
use loadshape::{Cli, Command as LsCommand};
use shared::engine::{Acceptance, EngineProfile, SpecMethod, Speculative};

#[path = "common/sim_server.rs"]
mod sim_server_helper;

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/run_bin.rs"]
mod run_bin;
use scratch::Scratch;

const RATE: f64 = 0.6;
const DRAFT_COST_MS: f64 = 1.2;

fn base() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        max_model_len: Some(16_384),
        ..EngineProfile::linear("base", 20_000, 8, 8192, [6.0, 0.5, 0.0005, 20.0, 2.0])
    }
}

fn truth() -> EngineProfile {
    EngineProfile {
        speculative: Some(Box::new(Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: 3,
            acceptance: Acceptance::Rate(RATE),
            draft_cost_ms: DRAFT_COST_MS,
            acceptance_by_kind: None,
            acceptance_spread: 0.0,
        })),
        ..base()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_recovers_acceptance_and_draft_cost_from_sim_server() {
    let dir = Scratch::new("spec-sim");
    let s = sim_server_helper::start(Config {
        engine: EngineChoice::Profile(Box::new(truth())),
        speed: 1.0,
        ..Config::default()
    })
    .await;
    let out = dir.join("run.jsonl");
    let out_s = out.to_string_lossy().to_string();
    // One session: every request runs alone on the server. The same scenario is simulated below.
    let scenario = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "sessions", "sessions": 1, "steps": 16, "base_tokens": 400, "gen_tokens": 160,
                     "tool_tokens": 100, "think_s": 0.0, "spread": 0.0, "stagger_s": 0.0, "duration_s": 600.0},
        "profile": truth(),
        "seed": 3,
        "counterfactuals": false
    });
    let scenario_path = dir.join("scenario.json");
    std::fs::write(&scenario_path, scenario.to_string()).unwrap_or_else(|e| panic!("{e}"));
    run_bin::loadshape_ok(
        &[
            "replay",
            "--url",
            &s.base,
            "--model",
            "sim",
            "--out",
            &out_s,
            "--scenario",
            &scenario_path.to_string_lossy(),
            "--quiet",
            "--metrics-url",
            &format!("{}/metrics", s.origin),
            "--scrape-interval",
            "0.5",
        ],
        120,
    )
    .await;
    let (recs, bad) = read_records(&out).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty());
    assert_eq!(recs.len(), 16);
    // Tokens and frames apart: several tokens per frame, and the counts from the final frame's `timings`.
    for r in &recs {
        assert!(r.ok, "{r:?}");
        let c = r.spec.unwrap_or_else(|| panic!("timings with draft counts: {r:?}"));
        assert!(r.sse_frames < r.gen_tokens, "{r:?}");
        assert!(c.accepted_tokens <= c.draft_tokens && c.draft_tokens > 0, "{r:?}");
        // Every token after the first came from a frame's step: frames − 1 steps emitted gen − 1 tokens.
        assert_eq!(r.gen_tokens - 1, r.sse_frames - 1 + c.accepted_tokens, "{r:?}");
        assert!(r.tpot_ms().expect("tpot") < r.itl.expect("itl").mean_ms, "{r:?}");
    }
    // The server's own counters agree with the records' counts.
    let server: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run.jsonl.server.json")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let drafted: u64 = recs.iter().filter_map(|r| r.spec).map(|c| c.draft_tokens).sum();
    let accepted: u64 = recs.iter().filter_map(|r| r.spec).map(|c| c.accepted_tokens).sum();
    let report = &server["report"];
    assert_eq!(report["spec_draft_tokens"].as_f64(), Some(drafted as f64), "{server}");
    assert_eq!(
        report["spec_accepted_tokens"].as_f64(),
        Some(accepted as f64),
        "{server}"
    );

    // calibrate: the acceptance rate and the draft's cost, against the profile without speculation.
    let base_path = dir.join("base.json");
    std::fs::write(&base_path, serde_json::to_string(&base()).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    let cal = dir.join("cal");
    let argv = [
        "loadshape",
        "calibrate",
        "--from",
        &out_s,
        "--out",
        &cal.to_string_lossy(),
        "--spec-base",
        &base_path.to_string_lossy(),
        "--spec-method",
        "mtp",
    ];
    let a = match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
        LsCommand::Calibrate(a) => a,
        other => panic!("{other:?}"),
    };
    let fit = calibrate::calibrate(&a).await.unwrap_or_else(|e| panic!("{e:#}"));
    let sf = fit.speculative.clone().unwrap_or_else(|| panic!("{:?}", fit.notes));
    let p = fit.profile.speculative.clone().unwrap_or_else(|| panic!("profile"));
    assert_eq!(p.draft_tokens, 3, "{sf:?}");
    assert_eq!(p.method, SpecMethod::Mtp);
    let Acceptance::Rate(a) = p.acceptance else {
        panic!("a rate")
    };
    let cost = p.draft_cost_ms;
    eprintln!(
        "acceptance {a:.4} (true {RATE}), draft cost {cost:.4} ms (true {DRAFT_COST_MS}), {} lone requests, spread {:?}",
        sf.draft_cost_requests, sf.draft_cost_spread_ms
    );
    assert!((a / RATE - 1.0).abs() <= 0.05, "acceptance {a} vs {RATE}: {sf:?}");
    // Every request of this server accepts at the one rate: no spread beyond what counting their drafts makes.
    assert_eq!(p.acceptance_spread, 0.0, "{:?}", sf.notes);
    assert!(
        sf.notes.iter().any(|n| n.starts_with("acceptance_spread 0:")),
        "{:?}",
        sf.notes
    );
    assert!(
        (cost / DRAFT_COST_MS - 1.0).abs() <= 0.05,
        "draft cost {cost} vs {DRAFT_COST_MS}: {sf:?}"
    );
    // The written profile reads back and carries it.
    let written = EngineProfile::from_json(&std::fs::read_to_string(cal.join("profile.json")).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(written.speculative, Some(p));
    assert_eq!(written.step_fixed_ms, base().step_fixed_ms);

    // The simulator with the calibrated profile predicts the live TPOT (its own draws of acceptance, not the
    // server's): p50 within 10 %, p99 within 20 %.
    let sc = shared::scenario::Scenario::from_json(&scenario.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let shared::scenario::Scenario::Engine(mut sc) = sc else {
        panic!("an engine scenario")
    };
    sc.profile = written;
    let sim = shared::engine::simulate(&sc).unwrap_or_else(|e| panic!("{e}"));
    let live = shared::metrics::summarize(&recs, &sc.slo);
    assert_eq!(sim.summary.completed, live.completed);
    let (p50, p99) = (
        sim.summary.tpot_p50_ms / live.tpot_p50_ms - 1.0,
        sim.summary.tpot_p99_ms / live.tpot_p99_ms - 1.0,
    );
    eprintln!(
        "TPOT p50 simulated {:.3} vs live {:.3} ms ({:+.1} %), p99 {:.3} vs {:.3} ms ({:+.1} %)",
        sim.summary.tpot_p50_ms,
        live.tpot_p50_ms,
        p50 * 100.0,
        sim.summary.tpot_p99_ms,
        live.tpot_p99_ms,
        p99 * 100.0
    );
    assert!(p50.abs() <= 0.10, "TPOT p50: {p50}");
    assert!(p99.abs() <= 0.20, "TPOT p99: {p99}");
}
