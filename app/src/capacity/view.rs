//! The capacity card's view model: `shared::capacity::search_simulated` on a scenario, reshaped flat for display
//! ([`CapacityView`]). In a file of its own so that the worker messages (`wire.rs`) name it without importing the
//! card's component.

use serde::{Deserialize, Serialize};
use shared::capacity::{self, CapacitySpec, Level};
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

/// One level of a search, flat for display.
pub fn row_of(l: &Level) -> LevelRow {
    LevelRow {
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
    }
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
        levels: r.levels.iter().map(row_of).collect(),
        notes: r.notes,
    })
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::worker::wire::{Done, Job, decode_done, encode_done};

    fn knee() -> Scenario {
        let v = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "closed_loop", "users": 2, "num_requests": 200,
                         "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 20}},
            "profile": {"name": "knee", "basis": "test", "block_size": 16, "num_kv_blocks": 20000,
                        "max_num_seqs": 4, "max_num_batched_tokens": 8192, "step_fixed_ms": 15.0,
                        "per_seq_ms": 0.5, "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 20.0,
                        "prefill_fixed_ms": 5.0},
            "slo": {"ttft_ms": 150.0, "tpot_ms": 35.0}, "seed": 3, "counterfactuals": false
        });
        Scenario::from_value(v).expect("a valid scenario")
    }

    #[test]
    fn the_card_shows_the_shared_search_and_crosses_the_worker_exactly() {
        let sc = knee();
        let done = Job::Capacity(sc.to_value()).run();
        let Done::Capacity(Ok(view)) = &done else {
            panic!("a capacity view: {done:?}")
        };
        assert_eq!((view.knob.as_str(), view.capacity), ("users", Some(4.0)));
        let loads: Vec<f64> = view.levels.iter().map(|l| l.load).collect();
        assert_eq!(loads, vec![2.0, 4.0, 8.0, 6.0, 5.0]);
        assert!(view.levels.iter().all(|l| l.pass == (l.load <= 4.0)));
        assert_eq!(
            decode_done(&encode_done(4, 1.5, 0.0, &done)),
            Ok((4, 1.5, 0.0, done.clone()))
        );
        // The seed model has no knob: a message, not a panic.
        let seed = Job::Capacity(shared::presets::default_scenario().to_value()).run();
        assert!(
            matches!(seed, Done::Capacity(Err(ref e)) if e.contains("engine model")),
            "{seed:?}"
        );
    }
}
