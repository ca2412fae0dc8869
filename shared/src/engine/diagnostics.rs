//! Diagnostics with numbers: what limits this scenario, and why.
//!
//! - [`Overbatched`]: the batch size at which the step-time model's TPOT crosses the TPOT SLO, at the scenario's
//!   mean decode context, against the batch the engine actually ran.
//! - [`ClosedLoopIllusion`]: the same open-loop trace replayed closed-loop (one request at a time, each sent when
//!   the previous completes, as the seed does): a closed-loop client never queues, so its TTFT hides the queueing.
//! - [`KvThrash`]: preemptions (recompute) and evictions.
//! - [`CacheMisses`]: why prompt tokens missed the prefix cache.
//! - [`CacheOff`]: the same scenario with prefix caching disabled.

use serde::{Deserialize, Serialize};

/// All diagnostics of one simulated scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    pub overbatched: Overbatched,
    /// Only for open-loop workloads (bursty, poisson, gamma) and when counterfactuals are on.
    pub closed_loop_illusion: Option<ClosedLoopIllusion>,
    pub kv_thrash: KvThrash,
    pub cache_misses: CacheMisses,
    /// Only when counterfactuals are on and the profile has prefix caching enabled.
    pub cache_off: Option<CacheOff>,
}

/// Where TPOT crosses the SLO. Model: TPOT(b) ≈ `step_fixed_ms + b·(per_seq_ms + per_ctx_token_ms·C) +
/// b²·batch_kv_ms_per_ktok·C/1000` for `b` decoding sequences of mean context `C` (prefill interleaving only adds
/// to it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overbatched {
    pub tpot_slo_ms: f64,
    /// Mean context of a decoding sequence over the run (time-weighted), tokens.
    pub mean_decode_context_tokens: f64,
    /// Largest batch whose modelled TPOT meets the SLO (0: even one sequence misses it; `None`: never crosses).
    pub slo_batch_limit: Option<u32>,
    /// Modelled TPOT at `max_num_seqs` decoding sequences, milliseconds.
    pub tpot_at_max_num_seqs_ms: f64,
    pub max_num_seqs: u32,
    /// Time-weighted mean number of decoding sequences while any decoded.
    pub mean_decode_batch: f64,
    /// Most sequences running at once.
    pub max_running: u32,
    /// `max_num_seqs` admits batches above the SLO limit.
    pub overbatched: bool,
}

/// Open loop vs closed loop on the same requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedLoopIllusion {
    pub open_ttft_p50_ms: f64,
    pub open_ttft_p99_ms: f64,
    pub closed_ttft_p50_ms: f64,
    pub closed_ttft_p99_ms: f64,
    pub open_request_throughput_rps: f64,
    pub closed_request_throughput_rps: f64,
    /// `open_ttft_p99_ms / closed_ttft_p99_ms`.
    pub ttft_p99_ratio: f64,
}

/// Preemption and eviction counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvThrash {
    /// Running requests preempted for lack of KV space (vLLM `num_preemptions`).
    pub preemptions: u64,
    /// Tokens computed again after preemptions (what a preempted request recomputes beyond its cache hit).
    pub recomputed_tokens: u64,
    /// Cached blocks evicted to make room.
    pub evicted_blocks: u64,
    /// Peak KV blocks referenced by running requests, and the capacity.
    pub peak_kv_blocks_used: u64,
    pub kv_capacity_blocks: u64,
}

/// Prompt tokens that missed the prefix cache, split by cause (tokens; the parts sum to `missed_tokens`).
/// Counted at each request's first admission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheMisses {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Tokens the workload designed to be cacheable (previous prompt + reply; a shared prefix).
    pub designed_cached_tokens: u64,
    pub missed_tokens: u64,
    /// Never computed before, in a session's first step (or an open-loop request): unavoidable cold prefill.
    pub cold_first_step_tokens: u64,
    /// Never computed before, in later steps: tool output, and a reply's last partial block.
    pub new_content_tokens: u64,
    /// Computed before but evicted while idle (during a session's think time, or between uses of a shared prefix).
    pub evicted_think_tokens: u64,
    /// Computed before and evicted after the request arrived, while it queued for admission (capacity pressure).
    pub capacity_tokens: u64,
    /// The rest: block alignment (a hit is whole blocks, and never the prompt's last token) and content another
    /// request was still computing.
    pub other_tokens: u64,
    /// Sessions with `compaction`: never computed, in the first step after a compaction (a new conversation that
    /// starts with a summary). Absent from the JSON when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compacted_tokens: u64,
    /// Sessions with `reasoning` not echoed: the previous reply, new content because its reasoning was cut out of
    /// the prompt before it (taken out of `new_content_tokens`). Absent from the JSON when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_not_echoed_tokens: u64,
    /// Fleets only: cached on another replica when the request was routed (its best replica's resident prefix
    /// beyond the chosen one's), taken out of the causes above. Absent from the JSON when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub routed_to_another_replica_tokens: u64,
    /// With `kv_tiers`: computed before, evicted from the GPU, and dropped by tier N too (the deepest tier that
    /// held them), taken out of `evicted_think_tokens` and `capacity_tokens`; one entry per tier. Absent without
    /// tiers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evicted_from_tier_tokens: Vec<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The same scenario with prefix caching disabled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheOff {
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub output_throughput_tok_s: f64,
    pub request_throughput_rps: f64,
    pub completed: u64,
    /// The same figures with caching on, for comparison.
    pub cache_on_ttft_p50_ms: f64,
    pub cache_on_ttft_p99_ms: f64,
    pub cache_on_output_throughput_tok_s: f64,
}
