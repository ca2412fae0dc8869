//! The capacity card's view model: `shared::capacity::search_simulated` on a scenario, reshaped flat for display
//! ([`CapacityView`]). In a file of its own so that the worker messages (`wire.rs`) name it without importing the
//! card's component.

use serde::{Deserialize, Serialize};
use shared::capacity::{self, CapacitySpec, Level};
use shared::replicas::Band;
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

/// The fewest replicas of the scenario's deployment (GPUs = replicas × TP) that keep its SLOs for 95 % of requests
/// at its own load, over five seeds, and what that costs at a GPU-hour price of 1: `loadshape capacity --simulate
/// --replicas-for-slo --gpu-hour-price 1 --json` (`shared::replicas::fewest_replicas`, its defaults). The card
/// scales the costs by the price typed in (they are proportional to it). Computed by a job loaded on demand
/// ([`crate::worker::wire::OnDemand::Gpus`]), so neither the search nor this type is in the page's first module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    pub tp: u32,
    pub router: String,
    pub seeds: u32,
    /// Over the seeds whose goal was met (minimum, median, maximum).
    pub replicas: Option<Band>,
    pub gpus: Option<Band>,
    /// At a GPU-hour price of 1.
    pub cost_per_session: Option<Band>,
    pub cost_per_million_tokens: Option<Band>,
    /// Seeds whose goal was not met within the most replicas tried.
    pub unmet_seeds: u32,
    pub levels_run: u64,
    pub notes: Vec<String>,
}

/// The replicas search of a scenario with a deployment, as the CLI runs it by default (see [`GpuView`]).
pub fn gpus_view(e: &shared::engine::EngineScenario) -> Result<GpuView, String> {
    use shared::replicas::{self, ReplicaSpec};
    if e.deployment.is_none() {
        return Err("GPUs are counted for a scenario with a deployment (model, GPU, TP)".to_string());
    }
    let spec = ReplicaSpec {
        goal: capacity::Goal::from_slo(&e.slo),
        window: capacity::Window::default(),
        router: e
            .fleet
            .as_ref()
            .map_or(shared::engine::Router::LeastOutstanding, |f| f.router),
        load_cap: e.fleet.as_ref().map_or(1.5, |f| f.load_cap),
        max_replicas: 256,
        seeds: 5,
        gpu_hour_price: Some(1.0),
    };
    let r = replicas::fewest_replicas(e, &spec).map_err(|e| e.to_string())?;
    Ok(GpuView {
        tp: r.tp,
        router: r.router.name().to_string(),
        seeds: spec.seeds,
        replicas: r.replicas,
        gpus: r.gpus,
        cost_per_session: r.cost_per_session,
        cost_per_million_tokens: r.cost_per_million_tokens,
        unmet_seeds: r.seeds.iter().filter(|s| s.replicas.is_none()).count() as u32,
        levels_run: r.levels_run as u64,
        notes: r.notes,
    })
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
    use crate::worker::wire::{Done, Job, OnDemand, decode_done, encode_done, from_bytes};

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

    /// A job loaded on demand, run here as the worker runs it (unsplit, its module is already here).
    fn on_demand(kind: OnDemand, sc: &Scenario) -> Done {
        use futures_util::FutureExt;
        Job::OnDemand(kind, sc.to_value(), Vec::new())
            .run_async()
            .now_or_never()
            .expect("unsplit, the job runs at once")
    }

    #[test]
    fn the_card_shows_the_shared_search_and_crosses_the_worker_exactly() {
        let sc = knee();
        let done = on_demand(OnDemand::Capacity, &sc);
        let Done::Bytes(Ok(bytes)) = &done else {
            panic!("a capacity view: {done:?}")
        };
        let view: CapacityView = from_bytes(bytes).expect("a capacity view");
        assert_eq!(view, capacity_view(&sc).expect("searches"));
        assert_eq!((view.knob.as_str(), view.capacity), ("users", Some(4.0)));
        let loads: Vec<f64> = view.levels.iter().map(|l| l.load).collect();
        assert_eq!(loads, vec![2.0, 4.0, 8.0, 6.0, 5.0]);
        assert!(view.levels.iter().all(|l| l.pass == (l.load <= 4.0)));
        assert_eq!(
            decode_done(&encode_done(4, 1.5, 0.0, &done)),
            Ok((4, 1.5, 0.0, done.clone()))
        );
        // A profile has no GPUs to count: a message, not a panic.
        let Scenario::Engine(e) = &sc else { panic!("engine") };
        assert!(gpus_view(e).is_err_and(|m| m.contains("deployment")));
        // The seed model has no knob: a message, not a panic.
        let seed = on_demand(OnDemand::Capacity, &shared::presets::default_scenario());
        assert!(
            matches!(seed, Done::Bytes(Err(ref e)) if e.contains("engine model")),
            "{seed:?}"
        );
    }

    /// A deployment's GPUs at the scenario's load: `fewest_replicas` with the CLI's defaults (`loadshape capacity
    /// --simulate --replicas-for-slo --gpu-hour-price 1`), through the job loaded on demand and its bytes exactly.
    #[test]
    fn a_deployment_counts_its_gpus_as_the_cli_does() {
        let mut v = knee().to_value();
        v.as_object_mut().unwrap().remove("profile");
        v["deployment"] = serde_json::json!({"model": "llama-3.1-8b", "gpu": "l40s", "tp": 2, "max_num_seqs": 4});
        v["workload"] = serde_json::json!({"kind": "sessions", "sessions": 6, "steps": 3, "base_tokens": 2000,
            "gen_tokens": 40, "tool_tokens": 200, "think_s": 1.0, "spread": 0.0, "stagger_s": 0.5});
        v["slo"] = serde_json::json!({"ttft_ms": 2000.0, "tpot_ms": 100.0});
        let sc = Scenario::from_value(v).expect("a valid deployment scenario");
        let done = on_demand(OnDemand::Gpus, &sc);
        let Done::Bytes(Ok(bytes)) = &done else {
            panic!("bytes: {done:?}")
        };
        let g: GpuView = from_bytes(bytes).expect("a GPU view");
        let Scenario::Engine(e) = &sc else { panic!("engine") };
        let spec = shared::replicas::ReplicaSpec {
            goal: capacity::Goal::from_slo(&e.slo),
            window: capacity::Window::default(),
            router: shared::engine::Router::LeastOutstanding,
            load_cap: 1.5,
            max_replicas: 256,
            seeds: 5,
            gpu_hour_price: Some(1.0),
        };
        let r = shared::replicas::fewest_replicas(e, &spec).expect("searches");
        assert_eq!((g.tp, g.gpus, g.replicas), (2, r.gpus, r.replicas));
        assert_eq!(g.cost_per_session, r.cost_per_session);
        let gpus = g.gpus.expect("met");
        assert_eq!(
            gpus.median,
            2.0 * g.replicas.expect("met").median,
            "GPUs = replicas x TP"
        );
        assert!(g.cost_per_session.is_some_and(|c| c.median > 0.0));
        assert_eq!(
            decode_done(&encode_done(5, 2.0, 0.0, &done)),
            Ok((5, 2.0, 0.0, done.clone()))
        );
    }
}
