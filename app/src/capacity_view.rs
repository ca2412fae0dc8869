//! The capacity card's view model: `shared::capacity::search_simulated` on a scenario, reshaped flat for display
//! ([`CapacityView`]). In a file of its own so that the worker messages (`wire.rs`) name it without importing the
//! card's component.

use serde::{Deserialize, Serialize};
use shared::capacity::{self, CapacitySpec};
use shared::scenario::Scenario;

/// One level as the card shows it (flat: it crosses the worker boundary in postcard, which needs no skipped
/// fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelRow {
    pub load: f64,
    pub pass: bool,
    pub attainment: f64,
    pub goodput_rps: f64,
    pub throughput_rps: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p99_ms: f64,
    pub kv_peak_use: Option<f64>,
    pub preemptions: Option<u64>,
    pub cached_share: Option<f64>,
    pub saturation: String,
}

/// The simulated search, reshaped for the card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityView {
    pub knob: String,
    pub capacity: Option<f64>,
    pub resolution: f64,
    /// In the order run.
    pub levels: Vec<LevelRow>,
    pub notes: Vec<String>,
}

/// The search for the scenario's own SLOs at 95 % of requests, its workload's knob, default bounds and window
/// (what `loadshape capacity --simulate` prints for the same scenario).
pub fn capacity_view(sc: &Scenario) -> Result<CapacityView, String> {
    let Scenario::Engine(e) = sc else {
        return Err("The capacity search needs the engine model (the seed model has no load knob).".to_string());
    };
    let spec = CapacitySpec::for_scenario(e);
    let r = capacity::search_simulated(e, &spec, None).map_err(|e| e.to_string())?;
    Ok(CapacityView {
        knob: r.knob.name().to_string(),
        capacity: r.capacity,
        resolution: r.resolution,
        levels: r
            .levels
            .iter()
            .map(|l| LevelRow {
                load: l.load,
                pass: l.pass,
                attainment: l.attainment,
                goodput_rps: l.summary.goodput_rps,
                throughput_rps: l.summary.request_throughput_rps,
                ttft_p50_ms: l.summary.ttft_p50_ms,
                ttft_p99_ms: l.summary.ttft_p99_ms,
                tpot_p50_ms: l.summary.tpot_p50_ms,
                tpot_p99_ms: l.summary.tpot_p99_ms,
                kv_peak_use: l.engine.kv_peak_use,
                preemptions: l.engine.preemptions,
                cached_share: l.summary.cached_share_achieved,
                saturation: l.saturation.name().to_string(),
            })
            .collect(),
        notes: r.notes,
    })
}
