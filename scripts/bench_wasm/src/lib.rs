//! `simulate(scenario_json, full)` for node: the engine model as the page runs it, minus the page.

use wasm_bindgen::prelude::*;

/// Runs an engine-model scenario file's JSON; returns the number of request records. `full`: every record field,
/// as `loadshape simulate` computes it; otherwise as the page does (records without their own ITL quantiles,
/// `engine::SimOptions::record_itl_quantiles`).
#[wasm_bindgen]
pub fn simulate(json: &str, full: bool) -> Result<f64, JsError> {
    let mut v: serde_json::Value = serde_json::from_str(json)?;
    if let Some(m) = v.as_object_mut() {
        m.remove("model");
        m.remove("version");
    }
    let sc: shared::engine::EngineScenario = serde_json::from_value(v)?;
    let opts = shared::engine::SimOptions {
        record_itl_quantiles: full,
        // The page keeps its records (it draws their TTFT/TPOT distributions).
        keep_records: true,
    };
    let report = shared::engine::simulate_with(&sc, opts)?;
    Ok(report.records.len() as f64)
}
