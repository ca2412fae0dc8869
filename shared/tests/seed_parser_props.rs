//! Property tests over the scenario parser and the seed model: arbitrary edits of the seed form never panic; they
//! are either a valid scenario or an error that names a field or says what is wrong. Valid seed scenarios always
//! evaluate to finite numbers (or a clear overflow error), and evaluation is deterministic.
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use serde_json::{Value, json};
use shared::scenario::Scenario;
use shared::seed_model::evaluate;

const SEED_FORM: &str = include_str!("../../examples/seed-baseline.json");

const PATHS: [&str; 14] = [
    "model",
    "version",
    "workload",
    "workload.kind",
    "workload.num_requests",
    "workload.seed",
    "workload.mean_rps",
    "profile.name",
    "profile.prefill_tokens_per_ms",
    "profile.prefix_cache_hit_efficiency",
    "profile.max_batch_slots",
    "slo.ttft_ms",
    "closed_loop",
    "workload_name",
];

fn any_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|v| json!(v)),
        any::<u64>().prop_map(|v| json!(v)),
        (-1e12f64..1e12).prop_map(|v| json!(v)),
        prop::sample::select(vec![0.0, -0.0, 1e308, -1e308, 5e-324, 0.5, 2.0]).prop_map(|v| json!(v)),
        "[a-z_]{0,8}".prop_map(Value::String),
        Just(json!([])),
        Just(json!({})),
    ]
}

fn set(v: &mut Value, path: &str, value: Value) {
    let mut target = v;
    let parts: Vec<&str> = path.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        if !target.is_object() {
            return;
        }
        target = &mut target[*p];
    }
    if target.is_object() {
        target[parts[parts.len() - 1]] = value;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn edits_never_panic(edits in prop::collection::vec((prop::sample::select(PATHS.to_vec()), any_json()), 1..4)) {
        let mut v: Value = serde_json::from_str(SEED_FORM).unwrap();
        for (path, value) in edits {
            set(&mut v, path, value);
        }
        match Scenario::from_json(&v.to_string()) {
            Ok(Scenario::Seed(s)) => {
                // Keep the run small; the parser already accepted the size.
                let shared::seed_model::SeedWorkload::Bursty(w) = &s.workload;
                prop_assume!(w.num_requests <= 5000);
                if let Ok(summary) = evaluate(&s) {
                    prop_assert!(summary.duration_s.is_finite());
                }
            }
            Ok(_) => {}
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        let _ = Scenario::from_json(&text);
    }

    #[test]
    fn valid_seed_scenarios_evaluate_deterministically(
        n in 1u64..600,
        seed in any::<u64>(),
        rps in 0.01f64..500.0,
        slots in 1u64..64,
        eff in 0.0f64..=1.0,
        prefill in 0.5f64..100.0,
        base in 1.0f64..50.0,
        slope in 0.0f64..3.0,
        closed in any::<bool>(),
    ) {
        let text = json!({
            "model": "seed",
            "workload": {"kind": "bursty", "num_requests": n, "seed": seed, "mean_rps": rps},
            "profile": {"name": "p", "prefill_tokens_per_ms": prefill, "prefix_cache_hit_efficiency": eff,
                        "base_tpot_ms": base, "batch_tpot_slope_ms": slope, "max_batch_slots": slots},
            "closed_loop": closed,
        }).to_string();
        let Ok(Scenario::Seed(s)) = Scenario::from_json(&text) else { return Err(TestCaseError::fail("rejected")) };
        let a = evaluate(&s).unwrap();
        let b = evaluate(&s).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a.total_requests, n);
        prop_assert!(a.ttft_p50_ms <= a.ttft_p99_ms && a.tpot_p50_ms <= a.tpot_p99_ms);
        prop_assert!((0.0..=1.0).contains(&a.slo_attainment_ratio));
        prop_assert!(a.duration_s >= 0.001);
    }
}
