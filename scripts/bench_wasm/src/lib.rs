//! `simulate(scenario_json)` for node: the engine model as the page runs it, minus the page.

use wasm_bindgen::prelude::*;

/// Runs an engine-model scenario file's JSON; returns the number of request records.
#[wasm_bindgen]
pub fn simulate(json: &str) -> Result<f64, JsError> {
    let mut v: serde_json::Value = serde_json::from_str(json)?;
    if let Some(m) = v.as_object_mut() {
        m.remove("model");
        m.remove("version");
    }
    let sc: shared::engine::EngineScenario = serde_json::from_value(v)?;
    let report = shared::engine::simulate(&sc)?;
    Ok(report.records.len() as f64)
}
