//! The iteration-level engine model (`"model": "engine"`): a vLLM-like serving engine whose prefix-cache hit rate
//! is an OUTPUT, emerging from the content the workload sends.
//!
//! - [`EngineProfile`] ([`profile`]): limits (block size, KV blocks, `max_num_seqs`, `max_num_batched_tokens`) and
//!   the step-time coefficients (DistServe's form: fixed + per sequence + per context token, plus prefill).
//! - [`Engine`] ([`core`]): continuous batching with chunked prefill, KV blocks with preemption (recompute), and
//!   automatic prefix caching over chained block content with LRU eviction (`kv`). Step-able in real time
//!   ([`Engine::submit`], [`Engine::step`], [`Engine::cancel`]) for the emulated server.
//! - [`simulate`]: runs an [`EngineScenario`]'s workload through the engine in virtual time and returns per-request
//!   [`RequestRecord`]s scored by [`crate::metrics::summarize`], a [`TimelinePoint`] series and [`Diagnostics`].
//! - [`presets`]: engine profiles for the hardware rows of `PRESETS.md`, each with its basis.
//!
//! Cost: O(running) per event (an arrival, an admission or prefill chunk, a finish, the KV cache filling up), not
//! per token: stretches of identical pure-decode steps run in closed form. A request's ITL summary costs
//! O(events during its life). Measured with `cargo bench -p loadshape-shared --bench engine_sessions`.
//!
//! Known simplifications: a chain that is in use is pinned as a whole (an ancestor only up to the fork); evicting a
//! chain takes its tail first, so resident blocks are always a prefix (vLLM frees a request's blocks in reverse
//! order, so this is its usual state too); content that a concurrent request is still computing is recomputed,
//! not shared; requests already sent always complete (no client timeout). The hash index behind
//! [`Engine::submit`] grows with the distinct content seen (fine for a live emulation, not for days of traffic).

pub mod core;
pub mod diagnostics;
pub mod disagg;
pub mod fleet;
pub(crate) mod kv;
pub mod presets;
pub mod profile;
mod sim;
pub mod spec;
mod types;

use crate::error::ScenarioError;

use crate::record::RequestRecord;
use crate::workload::Workload;

pub use self::core::{Engine, ReqId, Step, StepEvent};
pub use diagnostics::Diagnostics;
pub use disagg::Disaggregation;
pub use fleet::{FleetReport, FleetSpec, PrefixView, ReplicaLoad, Router, UNROUTED};
pub use profile::EngineProfile;
pub use spec::{Acceptance, AcceptanceByKind, SpecMethod, Speculative};
pub use types::{
    EngineReport, EngineScenario, PromptBlocks, SimOptions, TimelinePoint, fleet_from_json, validate_fleet,
};

/// Validate `scenario`, run it through the engine in virtual time, score it, and diagnose it.
pub fn simulate(scenario: &EngineScenario) -> Result<EngineReport, ScenarioError> {
    simulate_with(scenario, SimOptions::default())
}

/// [`simulate`] with options. The summary, timeline and diagnostics never depend on them.
pub fn simulate_with(scenario: &EngineScenario, opts: SimOptions) -> Result<EngineReport, ScenarioError> {
    simulate_streaming(scenario, opts, None)
}

/// [`simulate_with`], handing every record of the scenario's own run to `on_record`, in submission order, as soon
/// as it and every earlier record are final (with `keep_records` off; with it on, all at the end). A caller that
/// only writes the records (`loadshape simulate --records`) then never holds them all: with `keep_records` off the
/// report's `records` is empty and memory stays at the summary's few numbers per request. Each record's own ITL
/// p50/p99/max follow `record_itl_quantiles`, as for kept records.
pub fn simulate_streaming(
    scenario: &EngineScenario,
    opts: SimOptions,
    on_record: Option<&mut dyn FnMut(&RequestRecord)>,
) -> Result<EngineReport, ScenarioError> {
    scenario.validate()?;
    let mut main = sim::run(scenario, &scenario.profile, sim::Mode::AsGiven, opts, on_record);
    let summary = std::mem::take(&mut main.summary);
    let closed_loop_illusion = if scenario.counterfactuals
        && matches!(
            scenario.workload,
            Workload::Bursty(_) | Workload::Poisson(_) | Workload::Gamma(_) | Workload::Trace(_)
        ) {
        // Counterfactual runs are only summarized.
        let cs = sim::run(
            scenario,
            &scenario.profile,
            sim::Mode::OneAtATime,
            SimOptions::SUMMARY,
            None,
        )
        .summary;
        Some(diagnostics::ClosedLoopIllusion {
            open_ttft_p50_ms: summary.ttft_p50_ms,
            open_ttft_p99_ms: summary.ttft_p99_ms,
            closed_ttft_p50_ms: cs.ttft_p50_ms,
            closed_ttft_p99_ms: cs.ttft_p99_ms,
            open_request_throughput_rps: summary.request_throughput_rps,
            closed_request_throughput_rps: cs.request_throughput_rps,
            ttft_p99_ratio: if cs.ttft_p99_ms > 0.0 {
                summary.ttft_p99_ms / cs.ttft_p99_ms
            } else {
                0.0
            },
        })
    } else {
        None
    };
    let cache_off = if scenario.counterfactuals && scenario.profile.enable_prefix_caching {
        let off = EngineProfile {
            enable_prefix_caching: false,
            ..scenario.profile.clone()
        };
        let s = sim::run(scenario, &off, sim::Mode::AsGiven, SimOptions::SUMMARY, None).summary;
        Some(diagnostics::CacheOff {
            ttft_p50_ms: s.ttft_p50_ms,
            ttft_p99_ms: s.ttft_p99_ms,
            output_throughput_tok_s: s.output_throughput_tok_s,
            request_throughput_rps: s.request_throughput_rps,
            completed: s.completed,
            cache_on_ttft_p50_ms: summary.ttft_p50_ms,
            cache_on_ttft_p99_ms: summary.ttft_p99_ms,
            cache_on_output_throughput_tok_s: summary.output_throughput_tok_s,
        })
    } else {
        None
    };
    let diagnostics = Diagnostics {
        overbatched: sim::overbatched(scenario, &main),
        closed_loop_illusion,
        kv_thrash: main.kv_thrash.clone(),
        cache_misses: main.misses.clone(),
        cache_off,
    };
    Ok(EngineReport {
        records: main.records,
        summary,
        timeline: main.timeline,
        diagnostics,
        fleet: main.fleet,
    })
}
