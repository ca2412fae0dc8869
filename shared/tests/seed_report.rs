//! The seed model's whole report equals the seed's printed output (`scenario_sim_output.json`, copied from
//! `../shared/seeds/` into `tests/data/`), parsed and byte for byte.

use shared::seed_model::{seed_report, seed_report_json};

const SEED_OUTPUT: &str = include_str!("data/seed_scenario_sim_output.json");

#[test]
fn seed_report_equals_seed_output_parsed() {
    let expected: serde_json::Value = serde_json::from_str(SEED_OUTPUT).expect("seed output is JSON");
    assert_eq!(seed_report(), expected);
}

#[test]
fn seed_report_json_equals_seed_output_bytes() {
    // `print(json.dumps(..., indent=2))` adds one newline.
    assert_eq!(format!("{}\n", seed_report_json()), SEED_OUTPUT);
}
