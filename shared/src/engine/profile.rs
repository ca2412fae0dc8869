//! [`EngineProfile`]: the coefficients and limits of one vLLM-like serving engine.
//!
//! Step time (DistServe's fitted form, plus a prefill term):
//! `step_ms = step_fixed_ms + per_seq_ms·seqs + per_ctx_token_ms·Σcontext + [prefill_fixed_ms + prefill_tokens /
//! prefill_tokens_per_ms if the step carries prefill]`, where `seqs` counts every sequence scheduled in the step and
//! `Σcontext` sums their KV context (tokens already computed) at the start of the step.
//!
//! Optional terms, off by default (so profiles written before them give the same results to the bit):
//! - `prefill_ctx_ms_per_ktok`: attention makes a prefilled token cost more the more context it attends to. A
//!   chunk of `n` new tokens after `c` tokens of context adds `prefill_ctx_ms_per_ktok · Σ_{i<n} (c + i) / 1000`
//!   ms = `prefill_ctx_ms_per_ktok · (n·c + n(n−1)/2) / 1000` (a cold prefill of `n` grows as `n²/2000`).
//! - `batch_kv_ms_per_ktok`: a step whose sequences each attend over more than their own KV (llama.cpp: one view
//!   per sequence sized to the batch's largest, or with `--kv-unified` every cell in use, masked). A step of
//!   `seqs` sequences holding `Σcontext` tokens of KV adds `batch_kv_ms_per_ktok · seqs · Σcontext / 1000` ms, so
//!   at equal contexts a decode step grows with the square of the batch. vLLM's paged attention reads only each
//!   sequence's own blocks (the linear `per_ctx_token_ms` term); leave this 0 for such engines.
//! - `prefill_batch_kv_ms_per_ktok`: the same across-the-batch KV read for **prompt** tokens. With llama.cpp's
//!   unified KV cache (`--kv-unified`, llama-server's default when `--parallel` is not given) a ubatch is one
//!   stream and every token in it, prompt or decode, attends over all `n_kv` cells in use (every slot's, masked),
//!   so a prefill beside slots holding long contexts pays for their KV too. A step whose prefill chunks carry
//!   `n_s` new tokens each adds `prefill_batch_kv_ms_per_ktok · Σ_s n_s·(Σcontext − t_s) / 1000` ms, where
//!   `Σcontext` is the step's KV context (as above) and `t_s` the chunk's own context: the KV of the *other*
//!   sequences (its own is `prefill_ctx_ms_per_ktok`'s). A prefill alone on the server pays nothing here. With
//!   one KV stream per slot (an explicit `--parallel N`, `kv_unified = false`) a prompt attends only to its own
//!   slot's cells: leave it 0 (docs/calibration.md, "Prefill beside other slots' KV").
//! - `prefill_tile_rows` (with `ubatch_tokens`): prompt rows that attend to their context one row at a time.
//!   llama.cpp cuts a step's prompts into ubatches of at most `ubatch_tokens` (its `--ubatch-size`, 512), each
//!   with the same number of tokens of each of a run of adjacent slots (`split_equal`, one KV stream per slot);
//!   its CPU backend's flash attention computes a sequence's query rows in tiles of 64 (`GGML_FA_TILE_Q`), and a
//!   ubatch holding fewer rows of a sequence runs them one at a time over the whole context, as decoding tokens:
//!   a warm prompt of 20 new tokens after 5,000 cached took 157 ms, one of 64 took 43 ms, two of 300 at once 1.2 s
//!   (256 + 256, then 44 + 44 row by row) where two of 330 took 0.62 s (docs/measurements.md). Rows in a ubatch
//!   fewer than `prefill_tile_rows` are priced at `per_ctx_token_ms` per token attended instead of
//!   `prefill_ctx_ms_per_ktok / 1000`. 0: off; `loadshape calibrate` leaves it 0 (docs/calibration.md, "Prompts
//!   of a few tokens").
//! - `reply_cached_share`: how much of a session's previous reply the server finds in its prefix cache when the
//!   conversation comes back (default 1: all of it, the KV the decode wrote). A server that caches token ids and
//!   re-tokenizes the reply it receives as text finds only the tokens that round-trip: llama-server with a
//!   random-weight model ≈ 0.2 (docs/calibration.md, "The reply comes back as text"). A session's next prompt then
//!   leaves the cached conversation after `previous prompt + ⌊reply_cached_share · reply⌋` tokens (whole blocks).
//! - `host_cache`: a second, host-memory tier of prefix cache (llama.cpp `--cache-ram`, vLLM CPU offload /
//!   LMCache). Blocks the GPU prefix cache evicts are kept there (LRU, its own capacity); a prefix hit there is
//!   restored at `restore_tokens_per_ms` (charged to the admitting step, like prefill) instead of recomputed,
//!   where that is faster.
//!   It is read as the one-tier list `kv_tiers: [{"name": "host", "capacity_tokens", "restore_tokens_per_ms"}]`
//!   (see [`EngineProfile::tiers`]).
//! - `kv_tiers`: an ordered list of prefix-cache tiers below the GPU's, faster first ([`KvTier`]: host DRAM,
//!   local disk, a remote store). A tier is written when the level above evicts a block (`"write": "on_evict"`,
//!   the level above tier 0 being the GPU) or whenever a request that computed or used the block ends
//!   (`"always"`, write-through); it drops blocks least recently written-or-hit first (`"evict": "lru"`) and, with
//!   `{"ttl_s": s}`, also `s` seconds of simulated time after they were last written or hit. What a tier drops goes
//!   to the next tier when that one is `on_evict`. A hit in a tier is restored at the tier's speed only when that
//!   beats recomputing it (docs/simulator.md, "KV tiers").
//!
//! One scheduling option, vLLM's by default:
//! - `scheduler`: `"vllm"` (default; vLLM v1: running requests in admission order, each prefill chunk taking what
//!   the step's token budget has left, then waiting requests admitted FCFS while the budget, `max_num_seqs` and
//!   the KV cache allow) or `"llama_cpp"` (llama-server's `update_slots`: `max_num_seqs` slots; a request gets a
//!   free slot as soon as one is free (the free slot whose last prompt shares the largest part of the new one,
//!   above 10 %, else the least recently used one, ties to the highest slot id); each step (server iteration)
//!   first takes one token of every decoding slot, then fills the rest of `max_num_batched_tokens` (llama.cpp's
//!   `n_batch`) with prompt tokens of the prefilling slots **in slot order**, a long prompt spread over several
//!   steps). See docs/simulator.md, "Scheduler".

use serde::{Deserialize, Serialize};

use super::spec::Speculative;
use crate::deploy::roofline::{RooflineCost, StepShape};
use crate::error::ScenarioError;

/// Largest accepted KV capacity, blocks.
pub const MAX_KV_BLOCKS: u64 = 100_000_000;
/// Largest accepted block size, tokens.
pub const MAX_BLOCK_SIZE: u32 = 4096;
/// Largest accepted `max_num_seqs`.
pub const MAX_NUM_SEQS: u32 = 65_536;
/// Largest `prefill_tile_rows` accepted.
pub const MAX_TILE_ROWS: u32 = 4096;
/// Largest accepted `max_num_batched_tokens` and `max_model_len`, tokens.
pub const MAX_TOKENS: u64 = 100_000_000;

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// Largest accepted host-tier capacity, tokens.
pub const MAX_HOST_CACHE_TOKENS: u64 = 100_000_000_000;

/// A host-memory tier of prefix cache under the GPU's (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCache {
    /// Capacity, tokens (rounded down to whole blocks). 0 behaves as no host tier.
    pub capacity_tokens: u64,
    /// Restore speed of a host hit into GPU memory, tokens per millisecond.
    pub restore_tokens_per_ms: f64,
}

/// Most tiers in `kv_tiers`.
pub const MAX_KV_TIERS: usize = 4;

/// When a tier is written (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TierWrite {
    /// When the level above evicts the block (write-back).
    #[default]
    OnEvict,
    /// When a request that computed or used the block ends, whether or not the level above keeps it
    /// (write-through).
    Always,
}

impl TierWrite {
    fn is_default(&self) -> bool {
        *self == TierWrite::OnEvict
    }
}

/// What a tier drops: the least recently written-or-hit blocks when full (`"lru"`), and with `{"ttl_s": s}` also
/// every block `s` seconds (simulated time) after it was last written or hit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum TierEvict {
    #[default]
    Lru,
    Ttl {
        ttl_s: f64,
    },
}

impl TierEvict {
    fn is_lru(&self) -> bool {
        *self == TierEvict::Lru
    }

    /// Time to live, milliseconds (infinite for `lru`).
    pub fn ttl_ms(&self) -> f64 {
        match self {
            TierEvict::Lru => f64::INFINITY,
            TierEvict::Ttl { ttl_s } => ttl_s * 1000.0,
        }
    }
}

impl Serialize for TierEvict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            TierEvict::Lru => s.serialize_str("lru"),
            TierEvict::Ttl { ttl_s } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("ttl_s", ttl_s)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for TierEvict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Ttl {
            ttl_s: f64,
        }
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TierEvict;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#""lru" or {"ttl_s": seconds}"#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TierEvict, E> {
                match v {
                    "lru" => Ok(TierEvict::Lru),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<TierEvict, A::Error> {
                let t = Ttl::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(TierEvict::Ttl { ttl_s: t.ttl_s })
            }
        }
        d.deserialize_any(V)
    }
}

/// One prefix-cache tier below the GPU's (see the module docs). Its speed is `restore_tokens_per_ms`, or
/// `bytes_per_s` over `kv_bytes_per_token` (the model's KV bytes per token: `2 · layers · kv_heads · head_dim ·
/// bytes per element`, 128 KiB for Llama-3-8B in bf16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvTier {
    /// Label (`host`, `disk`, `remote`).
    pub name: String,
    /// Capacity, tokens (rounded down to whole blocks; at least one block).
    pub capacity_tokens: u64,
    /// Restore speed into GPU memory, tokens per millisecond (or give `bytes_per_s` and `kv_bytes_per_token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_tokens_per_ms: Option<f64>,
    /// Restore bandwidth, bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_s: Option<f64>,
    /// KV bytes per token, to turn `bytes_per_s` into tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<f64>,
    /// When it is written: `on_evict` (default) or `always`.
    #[serde(default, skip_serializing_if = "TierWrite::is_default")]
    pub write: TierWrite,
    /// What it drops: `"lru"` (default) or `{"ttl_s": s}`.
    #[serde(default, skip_serializing_if = "TierEvict::is_lru")]
    pub evict: TierEvict,
}

impl KvTier {
    /// An LRU tier written on eviction, its speed in tokens per millisecond (what `host_cache` stands for).
    pub fn on_evict(name: &str, capacity_tokens: u64, restore_tokens_per_ms: f64) -> Self {
        KvTier {
            name: name.to_string(),
            capacity_tokens,
            restore_tokens_per_ms: Some(restore_tokens_per_ms),
            bytes_per_s: None,
            kv_bytes_per_token: None,
            write: TierWrite::OnEvict,
            evict: TierEvict::Lru,
        }
    }

    /// Restore speed, tokens per millisecond (0 when neither form is given; validation refuses that).
    pub fn tokens_per_ms(&self) -> f64 {
        match (self.restore_tokens_per_ms, self.bytes_per_s, self.kv_bytes_per_token) {
            (Some(r), _, _) => r,
            (None, Some(b), Some(k)) if k > 0.0 => b / k / 1000.0,
            _ => 0.0,
        }
    }

    /// Field paths are relative (`capacity_tokens`); `block_size` sets the smallest capacity.
    fn validate(&self, block_size: u32) -> Result<(), ScenarioError> {
        fn f(path: &str, message: impl Into<String>) -> ScenarioError {
            ScenarioError::field(path, message)
        }
        if self.name.is_empty() || self.name.chars().count() > 64 {
            return Err(f("name", format!("must be 1 to 64 characters (got {:?})", self.name)));
        }
        if self.capacity_tokens < u64::from(block_size) || self.capacity_tokens > MAX_HOST_CACHE_TOKENS {
            return Err(f(
                "capacity_tokens",
                format!(
                    "must be at least one block ({block_size} tokens) and at most {MAX_HOST_CACHE_TOKENS} (got {})",
                    self.capacity_tokens
                ),
            ));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        match (self.restore_tokens_per_ms, self.bytes_per_s, self.kv_bytes_per_token) {
            (Some(_), Some(_), _) => {
                return Err(f(
                    "bytes_per_s",
                    "give restore_tokens_per_ms or bytes_per_s (with kv_bytes_per_token), not both",
                ));
            }
            (Some(r), None, _) if !(positive(r) && r <= 1e9) => {
                return Err(f(
                    "restore_tokens_per_ms",
                    format!("must be > 0 and at most 1e9 (got {r})"),
                ));
            }
            (None, None, _) => {
                return Err(f(
                    "restore_tokens_per_ms",
                    "a tier needs its speed: restore_tokens_per_ms, or bytes_per_s with kv_bytes_per_token",
                ));
            }
            (None, Some(b), _) if !(positive(b) && b <= 1e15) => {
                return Err(f("bytes_per_s", format!("must be > 0 and at most 1e15 (got {b})")));
            }
            (None, Some(_), None) => {
                return Err(f(
                    "kv_bytes_per_token",
                    "required with bytes_per_s (the model's KV bytes per token)",
                ));
            }
            (None, Some(_), Some(k)) if !(positive(k) && k <= 1e9) => {
                return Err(f(
                    "kv_bytes_per_token",
                    format!("must be > 0 and at most 1e9 (got {k})"),
                ));
            }
            _ => {}
        }
        if self.bytes_per_s.is_none() && self.kv_bytes_per_token.is_some() {
            return Err(f(
                "kv_bytes_per_token",
                "goes with bytes_per_s (with restore_tokens_per_ms, leave it out)",
            ));
        }
        let r = self.tokens_per_ms();
        if !(r > 0.0 && r <= 1e9) {
            return Err(f(
                "bytes_per_s",
                format!("bytes_per_s / kv_bytes_per_token must give > 0 and at most 1e9 tokens per ms (got {r})"),
            ));
        }
        if let TierEvict::Ttl { ttl_s } = self.evict
            && !(ttl_s.is_finite() && ttl_s > 0.0 && ttl_s <= 1e9)
        {
            return Err(f(
                "evict.ttl_s",
                format!("must be > 0 and at most 1e9 seconds (got {ttl_s})"),
            ));
        }
        Ok(())
    }
}

/// How a step is filled (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    /// vLLM v1: running requests first in admission order, prefill chunks take what the budget leaves, FCFS
    /// admission within the budget.
    #[default]
    Vllm,
    /// llama-server: slots, decodes first, then prompt tokens of the slots in slot order up to `n_batch`.
    LlamaCpp,
}

impl Scheduler {
    fn is_default(&self) -> bool {
        *self == Scheduler::Vllm
    }
}

/// One engine: limits (vLLM's names) and step-time coefficients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineProfile {
    /// Short name (`llama-3-8b-h100`).
    pub name: String,
    /// Where the numbers come from (measured, derived or estimated; with sources).
    #[serde(default)]
    pub basis: String,
    /// KV cache block size, tokens (vLLM `--block-size`, default 16).
    pub block_size: u32,
    /// KV cache capacity, blocks.
    pub num_kv_blocks: u64,
    /// Most sequences running at once (vLLM `--max-num-seqs`).
    pub max_num_seqs: u32,
    /// Token budget per step, prefill chunks plus one per decoding sequence (vLLM `--max-num-batched-tokens`).
    pub max_num_batched_tokens: u32,
    /// Longest prompt + output accepted, tokens; longer requests fail at submission. Default: the whole KV cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// Fixed cost of every step, milliseconds (the TPOT floor at batch 1).
    pub step_fixed_ms: f64,
    /// Cost per scheduled sequence per step, milliseconds.
    pub per_seq_ms: f64,
    /// Cost per context token of every scheduled sequence per step, milliseconds (KV reads).
    pub per_ctx_token_ms: f64,
    /// Prefill throughput, tokens per millisecond.
    pub prefill_tokens_per_ms: f64,
    /// Extra fixed cost of a step that carries prefill tokens, milliseconds.
    #[serde(default)]
    pub prefill_fixed_ms: f64,
    /// Automatic prefix caching (vLLM `--enable-prefix-caching`, on by default in v1).
    #[serde(default = "yes")]
    pub enable_prefix_caching: bool,
    /// Extra prefill cost per new token per 1,000 tokens of context it attends to, milliseconds (see the module
    /// docs). Default 0: prefill cost independent of context.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefill_ctx_ms_per_ktok: f64,
    /// Extra cost per step per scheduled sequence per 1,000 tokens of KV context the whole step holds
    /// (`Σcontext`), milliseconds (see the module docs). Default 0: each sequence reads only its own KV.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch_kv_ms_per_ktok: f64,
    /// Extra prefill cost per new prompt token per 1,000 tokens of KV context the step's *other* sequences hold,
    /// milliseconds (see the module docs). Default 0: a prompt attends only to its own context.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefill_batch_kv_ms_per_ktok: f64,
    /// A sequence's prompt rows in one ubatch fewer than this attend to their context one row at a time, each
    /// priced as a decoding token's (`per_ctx_token_ms` per token attended) instead of at the prefill's context
    /// term: llama.cpp's CPU backend, whose flash attention takes its tiled kernel only for at least 64 query rows
    /// of a sequence (`GGML_FA_TILE_Q`). The step is cut into ubatches as llama.cpp's `split_equal` does (the
    /// same number of tokens of each of a run of adjacent slots, at most `ubatch_tokens` in all). Default 0: off
    /// (see the module docs).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub prefill_tile_rows: u32,
    /// Tokens per ubatch (llama.cpp `--ubatch-size`, default 512) for `prefill_tile_rows`. Default 0: the step's
    /// whole token budget, `max_num_batched_tokens`.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub ubatch_tokens: u32,
    /// Share of a session's previous reply found cached when the conversation comes back, 0..=1 (see the module
    /// docs). Default 1: all of it.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub reply_cached_share: f64,
    /// Host-memory prefix-cache tier; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cache: Option<HostCache>,
    /// Prefix-cache tiers below the GPU's, faster first; absent: none (or `host_cache`'s one tier).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_tiers: Vec<KvTier>,
    /// How each step is filled: `vllm` (default) or `llama_cpp` (see the module docs).
    #[serde(default, skip_serializing_if = "Scheduler::is_default")]
    pub scheduler: Scheduler,
    /// Step time priced from a deployment (model, GPU, TP: [`crate::deploy`]); when present it replaces the linear
    /// step-time terms above, which then only describe it (docs/simulator.md, "Deployments"). Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roofline: Option<Box<RooflineCost>>,
    /// Speculative decoding (MTP, EAGLE, a draft model, n-grams: [`Speculative`]); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Box<Speculative>>,
}

impl EngineProfile {
    /// A profile whose step time is the linear cost alone. `coeffs` are `[step_fixed_ms, per_seq_ms,
    /// per_ctx_token_ms, prefill_tokens_per_ms, prefill_fixed_ms]`, in that order. The rest is what a profile file
    /// giving only these fields and `"block_size": 16` reads as (`block_size` has no default): blocks of 16 tokens,
    /// prefix caching on, an empty `basis`, and every optional term off: no `max_model_len` (the whole KV cache),
    /// `prefill_ctx_ms_per_ktok`, `batch_kv_ms_per_ktok` and `prefill_batch_kv_ms_per_ktok` 0, no tile rows or
    /// ubatch size, the whole reply cached (`reply_cached_share` 1), no host cache or KV tiers, the vLLM scheduler,
    /// no roofline and no speculation. The result is not validated (see [`EngineProfile::validate`]).
    pub fn linear(
        name: &str,
        num_kv_blocks: u64,
        max_num_seqs: u32,
        max_num_batched_tokens: u32,
        coeffs: [f64; 5],
    ) -> EngineProfile {
        let [
            step_fixed_ms,
            per_seq_ms,
            per_ctx_token_ms,
            prefill_tokens_per_ms,
            prefill_fixed_ms,
        ] = coeffs;
        EngineProfile {
            name: name.to_string(),
            basis: String::new(),
            block_size: 16,
            num_kv_blocks,
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len: None,
            step_fixed_ms,
            per_seq_ms,
            per_ctx_token_ms,
            prefill_tokens_per_ms,
            prefill_fixed_ms,
            enable_prefix_caching: true,
            prefill_ctx_ms_per_ktok: 0.0,
            batch_kv_ms_per_ktok: 0.0,
            prefill_batch_kv_ms_per_ktok: 0.0,
            prefill_tile_rows: 0,
            ubatch_tokens: 0,
            reply_cached_share: 1.0,
            host_cache: None,
            kv_tiers: Vec::new(),
            scheduler: Scheduler::Vllm,
            roofline: None,
            speculative: None,
        }
    }

    /// Read and validate a profile from JSON text (what `sim-server --profile-file`, `predict --profile` and
    /// `calibrate` write and read). Errors name the field: `host_cache.capacity_tokens: invalid type: …` for a
    /// bad type or unknown field, `per_seq_ms must be …` for a bad value.
    pub fn from_json(text: &str) -> Result<Self, ScenarioError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let p: EngineProfile = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            if path == "." {
                ScenarioError::Parse(inner)
            } else {
                ScenarioError::Parse(format!("{path}: {inner}"))
            }
        })?;
        p.validate()?;
        Ok(p)
    }

    /// `max_model_len`, or the KV capacity in tokens.
    pub fn model_len(&self) -> u64 {
        self.max_model_len
            .unwrap_or(self.num_kv_blocks * u64::from(self.block_size))
    }

    /// Take `from`'s step pricing: its roofline and every linear step-time term (the limits, the cache, the
    /// scheduler and speculation stay this profile's).
    pub fn take_step_terms(&mut self, from: &EngineProfile) {
        self.step_fixed_ms = from.step_fixed_ms;
        self.per_seq_ms = from.per_seq_ms;
        self.per_ctx_token_ms = from.per_ctx_token_ms;
        self.prefill_tokens_per_ms = from.prefill_tokens_per_ms;
        self.prefill_fixed_ms = from.prefill_fixed_ms;
        self.prefill_ctx_ms_per_ktok = from.prefill_ctx_ms_per_ktok;
        self.batch_kv_ms_per_ktok = from.batch_kv_ms_per_ktok;
        self.prefill_batch_kv_ms_per_ktok = from.prefill_batch_kv_ms_per_ktok;
        self.prefill_tile_rows = from.prefill_tile_rows;
        self.ubatch_tokens = from.ubatch_tokens;
        self.roofline = from.roofline.clone();
    }

    /// Step time of a pure-decode step with `batch` sequences of `mean_context` tokens each, milliseconds.
    pub fn decode_step_ms(&self, batch: f64, mean_context: f64) -> f64 {
        if let Some(r) = &self.roofline {
            return r.step_ms(&StepShape::decode(batch, batch * mean_context));
        }
        self.step_fixed_ms
            + self.per_seq_ms * batch
            + self.per_ctx_token_ms * batch * mean_context
            + self.batch_kv_ms_per_ktok * batch * batch * mean_context / 1000.0
    }

    /// Field paths are relative (`block_size`); see [`ScenarioError::within`].
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let f = ScenarioError::field;
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(f(
                "block_size",
                format!("must be in 1..={MAX_BLOCK_SIZE} (got {})", self.block_size),
            ));
        }
        if self.num_kv_blocks == 0 || self.num_kv_blocks > MAX_KV_BLOCKS {
            return Err(f(
                "num_kv_blocks",
                format!("must be in 1..={MAX_KV_BLOCKS} (got {})", self.num_kv_blocks),
            ));
        }
        if self.max_num_seqs == 0 || self.max_num_seqs > MAX_NUM_SEQS {
            return Err(f(
                "max_num_seqs",
                format!("must be in 1..={MAX_NUM_SEQS} (got {})", self.max_num_seqs),
            ));
        }
        if self.max_num_batched_tokens < self.max_num_seqs || u64::from(self.max_num_batched_tokens) > MAX_TOKENS {
            return Err(f(
                "max_num_batched_tokens",
                format!(
                    "must be >= max_num_seqs ({}) and <= {MAX_TOKENS} (got {})",
                    self.max_num_seqs, self.max_num_batched_tokens
                ),
            ));
        }
        let cap_tokens = self.num_kv_blocks * u64::from(self.block_size);
        if cap_tokens > MAX_TOKENS * 100 {
            return Err(f(
                "num_kv_blocks",
                format!("KV capacity of {cap_tokens} tokens is absurd"),
            ));
        }
        if let Some(len) = self.max_model_len
            && (len < 2 || len > cap_tokens.min(MAX_TOKENS))
        {
            return Err(f(
                "max_model_len",
                format!(
                    "must be in 2..={} (the KV capacity in tokens) (got {len})",
                    cap_tokens.min(MAX_TOKENS)
                ),
            ));
        }
        if self.max_model_len.is_none() && cap_tokens < 2 {
            return Err(f(
                "num_kv_blocks",
                format!("KV capacity of {cap_tokens} tokens cannot hold a request"),
            ));
        }
        for (name, v) in [
            ("step_fixed_ms", self.step_fixed_ms),
            ("per_seq_ms", self.per_seq_ms),
            ("per_ctx_token_ms", self.per_ctx_token_ms),
            ("prefill_fixed_ms", self.prefill_fixed_ms),
            ("prefill_ctx_ms_per_ktok", self.prefill_ctx_ms_per_ktok),
            ("batch_kv_ms_per_ktok", self.batch_kv_ms_per_ktok),
            ("prefill_batch_kv_ms_per_ktok", self.prefill_batch_kv_ms_per_ktok),
        ] {
            if !(v.is_finite() && (0.0..=1e6).contains(&v)) {
                return Err(f(
                    name,
                    format!("must be a finite number in 0..=1e6 milliseconds (got {v})"),
                ));
            }
        }
        if self.prefill_tile_rows > MAX_TILE_ROWS {
            return Err(f(
                "prefill_tile_rows",
                format!("must be in 0..={MAX_TILE_ROWS} (got {})", self.prefill_tile_rows),
            ));
        }
        if self.ubatch_tokens > self.max_num_batched_tokens {
            return Err(f(
                "ubatch_tokens",
                format!(
                    "must be at most max_num_batched_tokens ({}), as llama.cpp's ubatch is at most its batch (got {})",
                    self.max_num_batched_tokens, self.ubatch_tokens
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.reply_cached_share) {
            return Err(f(
                "reply_cached_share",
                format!("must be a share in 0..=1 (got {})", self.reply_cached_share),
            ));
        }
        if self.step_fixed_ms + self.per_seq_ms <= 0.0 {
            return Err(f(
                "step_fixed_ms",
                format!(
                    "step_fixed_ms + per_seq_ms must be > 0 so that a step takes time (got {} + {})",
                    self.step_fixed_ms, self.per_seq_ms
                ),
            ));
        }
        if !(self.prefill_tokens_per_ms.is_finite()
            && self.prefill_tokens_per_ms > 0.0
            && self.prefill_tokens_per_ms <= 1e9)
        {
            return Err(f(
                "prefill_tokens_per_ms",
                format!("must be > 0 and at most 1e9 (got {})", self.prefill_tokens_per_ms),
            ));
        }
        if let Some(r) = &self.roofline {
            r.validate()
                .map_err(|(name, message)| ScenarioError::field(format!("roofline.{name}"), message))?;
        }
        if let Some(s) = &self.speculative {
            s.validate().map_err(|e| e.within("speculative"))?;
        }
        if let Some(h) = &self.host_cache {
            if h.capacity_tokens > MAX_HOST_CACHE_TOKENS {
                return Err(f(
                    "host_cache.capacity_tokens",
                    format!("must be at most {MAX_HOST_CACHE_TOKENS} (got {})", h.capacity_tokens),
                ));
            }
            if !(h.restore_tokens_per_ms.is_finite() && h.restore_tokens_per_ms > 0.0 && h.restore_tokens_per_ms <= 1e9)
            {
                return Err(f(
                    "host_cache.restore_tokens_per_ms",
                    format!("must be > 0 and at most 1e9 (got {})", h.restore_tokens_per_ms),
                ));
            }
        }
        if !self.kv_tiers.is_empty() && self.host_cache.is_some() {
            return Err(f(
                "kv_tiers",
                "give host_cache (one tier) or kv_tiers, not both".to_string(),
            ));
        }
        if self.kv_tiers.len() > MAX_KV_TIERS {
            return Err(f(
                "kv_tiers",
                format!("at most {MAX_KV_TIERS} tiers (got {})", self.kv_tiers.len()),
            ));
        }
        for (i, t) in self.kv_tiers.iter().enumerate() {
            t.validate(self.block_size)
                .map_err(|e| e.within(&format!("kv_tiers[{i}]")))?;
            if i > 0 {
                let (above, this) = (self.kv_tiers[i - 1].tokens_per_ms(), t.tokens_per_ms());
                if this > above {
                    let field = if t.restore_tokens_per_ms.is_some() {
                        "restore_tokens_per_ms"
                    } else {
                        "bytes_per_s"
                    };
                    return Err(ScenarioError::field(
                        format!("kv_tiers[{i}].{field}"),
                        format!(
                            "tiers go faster first: {this} tokens/ms is faster than kv_tiers[{}] above it ({above} \
                             tokens/ms)",
                            i - 1
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The prefix-cache tiers below the GPU's as the engine runs them: `kv_tiers`, or `host_cache` as one tier
    /// named `host` (written on eviction, LRU); none without prefix caching or when `host_cache` holds less than a
    /// block.
    pub fn tiers(&self) -> Vec<KvTier> {
        if !self.enable_prefix_caching {
            return Vec::new();
        }
        if !self.kv_tiers.is_empty() {
            return self.kv_tiers.clone();
        }
        match &self.host_cache {
            Some(h) if self.host_cache_blocks() > 0 => {
                vec![KvTier::on_evict("host", h.capacity_tokens, h.restore_tokens_per_ms)]
            }
            _ => Vec::new(),
        }
    }

    /// Host-tier capacity in blocks (0 without a host tier or without prefix caching).
    pub fn host_cache_blocks(&self) -> u64 {
        match &self.host_cache {
            Some(h) if self.enable_prefix_caching => h.capacity_tokens / u64::from(self.block_size.max(1)),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EngineProfile;

    /// `linear` is the profile a file naming only its fields reads as, each coefficient in its place.
    #[test]
    fn linear_is_a_file_of_only_its_fields() {
        let p = EngineProfile::linear("p", 1000, 8, 2048, [5.0, 0.1, 0.001, 20.0, 1.5]);
        let text = r#"{"name": "p", "block_size": 16, "num_kv_blocks": 1000, "max_num_seqs": 8,
            "max_num_batched_tokens": 2048, "step_fixed_ms": 5.0, "per_seq_ms": 0.1, "per_ctx_token_ms": 0.001,
            "prefill_tokens_per_ms": 20.0, "prefill_fixed_ms": 1.5}"#;
        assert_eq!(EngineProfile::from_json(text), Ok(p));
        // Without `block_size` a file is refused: it has no default.
        let e = EngineProfile::from_json(&text.replace(r#""block_size": 16, "#, ""));
        assert!(e.is_err_and(|e| e.to_string().contains("block_size")));
        // `prefill_fixed_ms` 0 may be left out.
        let p0 = EngineProfile::linear("p", 1000, 8, 2048, [5.0, 0.1, 0.001, 20.0, 0.0]);
        assert_eq!(
            EngineProfile::from_json(&text.replace(r#", "prefill_fixed_ms": 1.5"#, "")),
            Ok(p0)
        );
    }
}
