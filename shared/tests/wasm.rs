//! Runs in headless Chromium (`cargo test -p loadshape-shared --target wasm32-unknown-unknown --test wasm`):
//! the core computes in wasm exactly what it computes natively. The expected values are the same golden files
//! the native tests check, so native == golden == wasm.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
fn seed_report_in_wasm_equals_the_python_seed_output() {
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("data/seed_scenario_sim_output.json")).expect("golden seed output");
    assert_eq!(shared::seed_model::seed_report(), golden);
}

#[wasm_bindgen_test]
fn ladder_statistics_in_wasm_match_the_seed_readme() {
    use shared::ladder::stats::{Shape, Weighting, stats};
    let ladder: shared::ladder::Ladder = shared::ladder::LADDER_PROD.parse().expect("LADDER_PROD parses");
    let shape = Shape::new(2703, 700, 0);
    let respawn = stats(&ladder, &shape, Weighting::Respawn).expect("respawn stats");
    assert_eq!((respawn.median, respawn.p90), (26_015, 64_560));
    assert_eq!(format!("{:.4}", respawn.cached_share_tokens), "0.9280");
    let single = stats(&ladder, &shape, Weighting::Single).expect("single stats");
    assert_eq!((single.median, single.p90), (36_030, 69_154));
}

#[path = "common/golden.rs"]
mod golden_common;

#[wasm_bindgen_test]
fn engine_report_in_wasm_is_identical_to_native() {
    assert_eq!(golden_common::engine_golden(), include_str!("data/engine_golden.json"));
}

#[wasm_bindgen_test]
fn cdf_points_and_scaled_workloads_in_wasm_equal_native() {
    // The same points the native unit test expects: the k-th smallest sample at k / n.
    let pts = shared::metrics::cdf_points([5.0, 1.0, 3.0, f64::NAN, 3.0, 9.0, 2.0, 7.0], 100);
    let want = [1.0, 2.0, 3.0, 3.0, 5.0, 7.0, 9.0];
    assert_eq!(pts[0], (1.0, 0.0));
    for (k, (p, x)) in pts[1..].iter().zip(want).enumerate() {
        assert_eq!(*p, (x, (k + 1) as f64 / 7.0));
    }
    let shared::scenario::Scenario::Engine(e) = shared::presets::default_for_model("engine").expect("engine") else {
        panic!("the engine default is an engine scenario")
    };
    assert_eq!(e.workload.scaled(1.5).load(), 12.0);
}
