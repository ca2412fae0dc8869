//! The example engine scenarios parse as `Scenario`s and run; a session run reports what the page shows.

use shared::engine::{EngineScenario, presets, simulate};
use shared::scenario::Scenario;
use shared::workload::{SessionWorkload, Workload};

#[test]
fn example_scenarios_parse_and_the_small_one_runs() {
    for name in ["engine-sessions-10k.json", "engine-10k.json", "engine-sessions-1m.json"] {
        let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("example exists");
        let sc = Scenario::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Scenario::Engine(engine) = sc else {
            panic!("{name} is not an engine scenario")
        };
        if name == "engine-10k.json" {
            let r = simulate(&engine).expect("runs");
            assert_eq!(r.records.len(), 10_000);
            assert!(r.records.iter().all(|x| x.ok));
            assert!(r.summary.completed == 10_000);
        }
    }
}

#[test]
fn default_sessions_on_a_preset() {
    let sc = EngineScenario {
        workload: Workload::Sessions(SessionWorkload::default()),
        profile: presets::llama3_8b_h100(),
        slo: Default::default(),
        seed: 1,
        counterfactuals: true,
        fleet: None,
        deployment: None,
        disaggregation: None,
    };
    let r = simulate(&sc).expect("ok");
    // Six sessions, each of its drawn number of steps, all completed (no respawn).
    let expected: u64 = (0..6)
        .map(|s| u64::from(SessionWorkload::default().plan(s, 0, 1).steps))
        .sum();
    assert_eq!(r.records.len() as u64, expected);
    assert!(r.records.iter().all(|x| x.ok && x.itl.is_some()));
    let m = &r.diagnostics.cache_misses;
    // Sessions resend their conversation: most prompt tokens hit.
    assert!(m.cached_tokens as f64 / m.prompt_tokens as f64 > 0.85, "{m:?}");
    assert!(r.diagnostics.cache_off.is_some());
    assert!(r.diagnostics.closed_loop_illusion.is_none());
    assert!(!r.timeline.is_empty());
}

/// The seed's bursty trace through the engine: the common system prompt is computed once and then hit by every
/// request that follows (the hit rate is an output), and the closed-loop replay of the same trace hides queueing.
#[test]
fn bursty_trace_hits_the_shared_prefix_and_closed_loop_hides_queueing() {
    let w: shared::seed_model::BurstyWorkload =
        serde_json::from_str(r#"{"num_requests": 400, "seed": 42, "mean_rps": 40.0}"#).expect("bursty");
    let sc = EngineScenario {
        workload: Workload::Bursty(w),
        profile: presets::laptop_demo(),
        slo: Default::default(),
        seed: 0,
        counterfactuals: true,
        fleet: None,
        deployment: None,
        disaggregation: None,
    };
    let r = simulate(&sc).expect("ok");
    let m = &r.diagnostics.cache_misses;
    assert!(
        m.cached_tokens > 0 && m.cached_tokens <= m.designed_cached_tokens,
        "{m:?}"
    );
    assert!(r.records[1..].iter().any(|x| x.cached_tokens.unwrap_or(0) >= 2048));
    let cl = r.diagnostics.closed_loop_illusion.expect("open-loop workload");
    assert!(cl.open_ttft_p99_ms > cl.closed_ttft_p99_ms, "{cl:?}");
    let off = r.diagnostics.cache_off.expect("counterfactual");
    assert!(off.ttft_p50_ms > off.cache_on_ttft_p50_ms, "{off:?}");
}

/// The engine scenario in `examples/{file}`.
fn engine_example(file: &str) -> shared::engine::EngineScenario {
    let path = format!("{}/../examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    match Scenario::from_json(&text) {
        Ok(Scenario::Engine(sc)) => sc,
        other => panic!("{file}: not an engine scenario: {other:?}"),
    }
}

/// Skipping the records' own ITL quantiles (what the page does) changes nothing else: the summary, timeline,
/// diagnostics and every other record field are the same, the mean ITL included.
#[test]
fn summary_only_runs_differ_only_in_record_itl_quantiles() {
    use shared::engine::{SimOptions, simulate_with};
    let mut sc = engine_example("engine-sessions-10k.json");
    sc.counterfactuals = true;
    let full = simulate(&sc).expect("runs");
    let lean = simulate_with(
        &sc,
        SimOptions {
            record_itl_quantiles: false,
            keep_records: true,
        },
    )
    .expect("runs");
    assert_eq!(full.summary, lean.summary);
    assert_eq!(full.timeline, lean.timeline);
    assert_eq!(full.diagnostics, lean.diagnostics);
    assert_eq!(full.records.len(), lean.records.len());
    let mut with_itl = 0;
    for (a, b) in full.records.iter().zip(&lean.records) {
        let (mut a, mut b) = (a.clone(), b.clone());
        if let (Some(x), Some(y)) = (a.itl.take(), b.itl.take()) {
            assert!(x.p50_ms.is_finite() && x.p99_ms.is_finite());
            assert!(x.max_ms.is_finite() && x.max_ms >= x.p99_ms);
            assert!(y.p50_ms.is_nan() && y.p99_ms.is_nan() && y.max_ms.is_nan());
            assert_eq!(x.mean_ms, y.mean_ms);
            with_itl += 1;
        }
        assert_eq!(a, b);
    }
    assert!(with_itl > 9000, "{with_itl} records with ITL");
}

/// Without records kept, records are scored as they complete and dropped: the report is the same but for the empty
/// record list, on a session workload (records close out of submission order) and on overloaded open-loop traffic
/// with counterfactual runs (long queues, so many records are open at once).
#[test]
fn runs_without_records_report_the_same() {
    use shared::engine::{SimOptions, simulate_with};
    for (file, tweak) in [("engine-sessions-10k.json", None), ("engine-10k.json", Some(3000u64))] {
        let mut sc = engine_example(file);
        sc.counterfactuals = true;
        if let Some(blocks) = tweak {
            sc.profile.num_kv_blocks = blocks;
        }
        let full = simulate(&sc).expect("runs");
        let lean = simulate_with(
            &sc,
            SimOptions {
                record_itl_quantiles: true,
                keep_records: false,
            },
        )
        .expect("runs");
        assert!(lean.records.is_empty(), "{file}");
        assert!(full.records.len() > 3000, "{file}: {} records", full.records.len());
        // Bit for bit: Debug prints each f64 exactly.
        assert_eq!(format!("{:?}", full.summary), format!("{:?}", lean.summary), "{file}");
        assert_eq!(full.timeline, lean.timeline, "{file}");
        assert_eq!(full.diagnostics, lean.diagnostics, "{file}");
    }
}
