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
pub(crate) mod kv;
pub mod presets;
pub mod profile;
mod sim;

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;
use crate::metrics::{Slo, Summary};
use crate::record::RequestRecord;
use crate::workload::Workload;

pub use self::core::{Engine, ReqId, Step, StepEvent};
pub use diagnostics::Diagnostics;
pub use profile::EngineProfile;

fn yes() -> bool {
    true
}

/// One engine-model experiment: workload + engine profile + SLOs + seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineScenario {
    pub workload: Workload,
    pub profile: EngineProfile,
    #[serde(default)]
    pub slo: Slo,
    /// Seed of every random draw (arrivals, lengths, session shapes), except the `bursty` trace, which keeps the
    /// seed's own `workload.seed`.
    #[serde(default)]
    pub seed: u64,
    /// Also run the counterfactuals (cache off; closed loop for open-loop workloads). Each costs one more run.
    #[serde(default = "yes")]
    pub counterfactuals: bool,
}

impl EngineScenario {
    /// Checks every field; paths are relative to the scenario (`workload.rate_rps`, `profile.block_size`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.workload.validate().map_err(|e| e.within("workload"))?;
        self.profile.validate().map_err(|e| e.within("profile"))?;
        self.slo.validate().map_err(|e| e.within("slo"))?;
        Ok(())
    }
}

/// A prompt as the engine sees it: its token count and the chained hashes of its full blocks
/// (hash `i` covers tokens `0..(i+1)·block_size`, so equal hashes mean equal prefixes). Hashes past the prompt may
/// describe output the caller will stream, so that a later prompt which resends it can hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptBlocks {
    pub tokens: u32,
    pub block_hashes: Vec<u64>,
}

impl PromptBlocks {
    /// Chained hashes of `tokens`' full blocks of `block_size` (a trailing partial block has no hash).
    pub fn from_tokens(tokens: &[u32], block_size: u32) -> Self {
        let bs = block_size.max(1) as usize;
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        let block_hashes = tokens
            .chunks_exact(bs)
            .map(|block| {
                for &t in block {
                    h = (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3);
                }
                h = splitmix64(h);
                h
            })
            .collect();
        PromptBlocks {
            tokens: tokens.len().min(u32::MAX as usize) as u32,
            block_hashes,
        }
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One point of the time series for charts. Counters are per interval (since the previous point).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Seconds since the run's origin.
    pub t_s: f64,
    pub running: u32,
    pub queued: u32,
    /// KV blocks referenced by running requests.
    pub kv_blocks_used: u64,
    pub kv_capacity: u64,
    /// Prompt tokens that hit the prefix cache at admissions in this interval.
    pub cache_hit_tokens: u64,
    /// Prompt tokens admitted in this interval.
    pub prompt_tokens: u64,
}

/// Everything [`simulate`] produces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineReport {
    pub records: Vec<RequestRecord>,
    pub summary: Summary,
    pub timeline: Vec<TimelinePoint>,
    pub diagnostics: Diagnostics,
}

/// What [`simulate_with`] computes beyond the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Each record's own ITL p50, p99 and max (`RequestRecord::itl`). They read every stretch of the request (and
    /// the quantiles sort them); nothing in the summary uses them (its ITL figures weigh each request's mean), so a
    /// caller that only shows the summary (the page) can skip them: its records then hold `NaN` there.
    pub record_itl_quantiles: bool,
    /// Keep every record in [`EngineReport::records`]. Without them the records are scored as they complete and
    /// dropped (the summary is the same to the bit), and `records` is empty: a million-request run then holds a
    /// few numbers per request instead of the whole record.
    pub keep_records: bool,
}

impl SimOptions {
    /// Only the summary: no records and none of their own ITL figures (what counterfactual runs need).
    pub const SUMMARY: SimOptions = SimOptions {
        record_itl_quantiles: false,
        keep_records: false,
    };
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            record_itl_quantiles: true,
            keep_records: true,
        }
    }
}

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
    })
}
