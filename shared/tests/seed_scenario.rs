//! Parsing and validating seed-model scenarios: the issue's seed form exactly, versions, unknown fields, bad values.

use shared::scenario::{Scenario, ScenarioError};
use shared::seed_model::{SeedWorkload, evaluate};

const SEED_FORM: &str = include_str!("../../examples/seed-baseline.json");

fn with(patch: &str, value: serde_json::Value) -> String {
    let mut v: serde_json::Value = serde_json::from_str(SEED_FORM).unwrap();
    let mut target = &mut v;
    let parts: Vec<&str> = patch.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        target = &mut target[*p];
    }
    target[parts[parts.len() - 1]] = value;
    v.to_string()
}

fn err(text: &str) -> String {
    match Scenario::from_json(text) {
        Ok(s) => panic!("accepted {text}: {s:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_issue_seed_form_parses_and_evaluates_like_the_seed() {
    let Scenario::Seed(s) = Scenario::from_json(SEED_FORM).unwrap() else {
        panic!("not a seed scenario")
    };
    let SeedWorkload::Bursty(w) = &s.workload;
    assert_eq!((w.num_requests, w.seed.magnitude(), w.mean_rps), (80, 42, 8.5));
    let summary = evaluate(&s).unwrap();
    // The seed's scenario_comparisons.baseline.
    assert_eq!(summary.engine, "baseline");
    assert_eq!(summary.workload, "agent-shared-prefix");
    assert_eq!(summary.duration_s, 22.912);
    assert_eq!(summary.ttft_p50_ms, 3915.16);
    assert_eq!(summary.ttft_p99_ms, 10235.3);
    assert_eq!(summary.tpot_p50_ms, 27.42);
    assert_eq!(summary.raw_output_tokens_per_s, 502.8);
    assert_eq!(summary.request_throughput_rps, 3.492);
    assert_eq!(summary.slo_goodput_rps, 0.567);
    assert_eq!(summary.slo_attainment_ratio, 0.1625);
}

#[test]
fn defaults_match_the_seed_signature() {
    let text = r#"{"model":"seed","workload":{"kind":"bursty","num_requests":80,"seed":42,"mean_rps":8.5},
        "profile":{"name":"baseline","prefill_tokens_per_ms":26.0,"prefix_cache_hit_efficiency":0.45,
        "base_tpot_ms":17.5,"batch_tpot_slope_ms":0.62,"max_batch_slots":16}}"#;
    let a = Scenario::from_json(text).unwrap();
    let b = Scenario::from_json(SEED_FORM).unwrap();
    assert_eq!(a, b);
}

#[test]
fn version_is_optional_and_future_versions_are_refused() {
    let v1 = with("version", 1.into());
    assert_eq!(
        Scenario::from_json(&v1).unwrap(),
        Scenario::from_json(SEED_FORM).unwrap()
    );
    let msg = err(&with("version", 2.into()));
    assert!(msg.contains("version 2") && msg.contains("upgrade"), "{msg}");
    let msg = err(&with("version", 0.into()));
    assert!(msg.contains("version"), "{msg}");
    let msg = err(&with("version", "one".into()));
    assert!(msg.contains("version"), "{msg}");
}

#[test]
fn round_trips_through_pretty_json() {
    let s = Scenario::from_json(SEED_FORM).unwrap();
    let text = s.to_json_pretty();
    assert!(text.contains("\"version\": 1"), "{text}");
    assert_eq!(Scenario::from_json(&text).unwrap(), s);
}

#[test]
fn unknown_fields_are_named() {
    let cases = [
        ("colour", "colour"),
        ("workload.burst", "burst"),
        ("profile.max_slots", "max_slots"),
        ("slo.e2el_ms", "e2el_ms"),
    ];
    for (path, field) in cases {
        let msg = err(&with(path, 1.into()));
        assert!(msg.contains(field), "{path}: {msg}");
    }
}

#[test]
fn bad_values_name_the_field_and_value() {
    let cases: [(&str, serde_json::Value, &str); 14] = [
        ("workload.mean_rps", 0.into(), "workload.mean_rps must be > 0 (got 0)"),
        (
            "workload.mean_rps",
            (-3.0).into(),
            "workload.mean_rps must be > 0 (got -3)",
        ),
        ("workload.num_requests", 0.into(), "workload.num_requests"),
        ("workload.num_requests", 20_000_000.into(), "workload.num_requests"),
        ("workload.num_requests", 80.5.into(), "workload.num_requests"),
        ("workload.num_requests", (-1).into(), "workload.num_requests"),
        ("workload.seed", 1.5.into(), "workload.seed"),
        ("workload.seed", "42".into(), "workload.seed"),
        ("workload.kind", "poisson".into(), "poisson"),
        (
            "profile.max_batch_slots",
            0.into(),
            "profile.max_batch_slots must be >= 1 (got 0)",
        ),
        ("profile.max_batch_slots", (-4).into(), "profile.max_batch_slots"),
        (
            "profile.prefill_tokens_per_ms",
            0.into(),
            "profile.prefill_tokens_per_ms must be > 0 (got 0)",
        ),
        (
            "profile.prefill_tokens_per_ms",
            (-1.0).into(),
            "profile.prefill_tokens_per_ms",
        ),
        ("slo.ttft_ms", "fast".into(), "slo.ttft_ms"),
    ];
    for (path, value, want) in cases {
        let msg = err(&with(path, value.clone()));
        assert!(msg.contains(want), "{path} = {value}: {msg}");
    }
}

#[test]
fn not_json_or_no_model_is_a_clear_error() {
    assert!(matches!(Scenario::from_json("{"), Err(ScenarioError::Parse(_))));
    assert!(err("[]").contains("object"));
    assert!(err(r#"{"workload": {}}"#).contains("model"));
    assert!(err(r#"{"model": "quantum"}"#).contains("quantum"));
}

#[test]
fn the_seed_accepts_any_finite_efficiency_and_slo() {
    for eff in [0.0, 1.0, 1.5, -0.5] {
        let s = Scenario::from_json(&with("profile.prefix_cache_hit_efficiency", eff.into())).unwrap();
        let Scenario::Seed(s) = s else { unreachable!() };
        assert!(evaluate(&s).is_ok(), "efficiency {eff}");
    }
    assert!(Scenario::from_json(&with("slo.ttft_ms", 0.into())).is_ok());
}

#[test]
fn overflowing_coefficients_are_an_error_not_infinity() {
    let s = Scenario::from_json(&with("profile.base_tpot_ms", 1e307.into())).unwrap();
    let Scenario::Seed(s) = s else { unreachable!() };
    let msg = evaluate(&s).unwrap_err().to_string();
    assert!(msg.contains("not finite"), "{msg}");
}

#[test]
fn engine_scenarios_round_trip_too() {
    let text = include_str!("../../examples/engine-10k.json");
    let s = Scenario::from_json(text).unwrap();
    assert!(matches!(s, Scenario::Engine(_)));
    assert_eq!(Scenario::from_json(&s.to_json_pretty()).unwrap(), s);
    // Field paths reach into the engine model's structs as well.
    let bad = text.replace("\"block_size\": 16", "\"block_size\": 16.5");
    let msg = err(&bad);
    assert!(msg.contains("profile.block_size"), "{msg}");
}

#[test]
fn duplicate_keys_are_refused_naming_the_key_and_a_bom_is_skipped() {
    let text = include_str!("../../examples/seed-baseline.json");
    let dup = text.replacen(
        "\"num_requests\": 80,",
        "\"num_requests\": 80, \"num_requests\": 90,",
        1,
    );
    let err = Scenario::from_json(&dup).expect_err("last-wins is refused").to_string();
    assert!(err.contains("duplicate key `workload.num_requests`"), "{err}");
    assert!(err.contains("line 2 column"), "{err}");
    assert_eq!(
        Scenario::from_json(&format!("\u{feff}{text}")),
        Scenario::from_json(text)
    );
}
