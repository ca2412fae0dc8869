//! The seed simulator's model (`scenario_sim.py`), reproduced exactly: for every input the seed accepts, every
//! summary field is equal to the seed's.
//!
//! - [`build_agent_trace`]: the bursty trace, bit-identical to Python's `random.Random(seed)` draws
//!   (see [`crate::pyrand`]).
//! - [`evaluate`]: the admission limit (`max_batch_slots`), the single prefill lane, nearest-rank percentiles over
//!   samples rounded with Python's [`py_round`], SLO goodput and attainment, and the closed-loop path.
//! - [`seed_report`]: the seed's whole printed report.
//!
//! Principal types: [`SeedScenario`], [`BurstyWorkload`], [`SeedProfile`], [`TraceRequest`], [`SeedSummary`].

use serde::{Deserialize, Serialize};

use crate::metrics::Slo;
use crate::scenario::ScenarioError;

/// The largest trace accepted (the seed has no limit; beyond this a run would take minutes and gigabytes).
pub const MAX_REQUESTS: u64 = 10_000_000;

/// The seed's bursty agent workload: `build_agent_trace(num_requests, seed, mean_rps)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstyWorkload {
    /// Requests in the trace, `1..=`[`MAX_REQUESTS`].
    pub num_requests: u64,
    /// `random.Random(seed)`; see [`crate::pyrand::PySeed`] for the accepted range.
    pub seed: crate::pyrand::PySeed,
    /// Mean arrival rate before the burst factors, requests per second; `> 0`.
    pub mean_rps: f64,
}

impl BurstyWorkload {
    /// Field paths are relative (`mean_rps`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.num_requests == 0 || self.num_requests > MAX_REQUESTS {
            return Err(ScenarioError::field(
                "num_requests",
                format!("must be in 1..={MAX_REQUESTS} (got {})", self.num_requests),
            ));
        }
        if !(self.mean_rps.is_finite() && self.mean_rps > 0.0) {
            return Err(ScenarioError::field(
                "mean_rps",
                format!("must be > 0 (got {})", self.mean_rps),
            ));
        }
        Ok(())
    }
}

/// The seed's `EngineProfile`: assumed coefficients of a serving engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedProfile {
    /// Shown as the summary's `engine`.
    pub name: String,
    /// Prefill speed, tokens per millisecond; `> 0`.
    pub prefill_tokens_per_ms: f64,
    /// Fraction of the shared prefix served from cache (the seed accepts any number; 0–1 is meaningful).
    pub prefix_cache_hit_efficiency: f64,
    /// Decode time per token at batch size 0, milliseconds.
    pub base_tpot_ms: f64,
    /// Extra decode time per token per running request, milliseconds.
    pub batch_tpot_slope_ms: f64,
    /// Admission limit: requests decoding at once; `>= 1`.
    pub max_batch_slots: u64,
}

impl SeedProfile {
    /// Field paths are relative (`max_batch_slots`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.max_batch_slots < 1 {
            return Err(ScenarioError::field(
                "max_batch_slots",
                format!("must be >= 1 (got {})", self.max_batch_slots),
            ));
        }
        if !(self.prefill_tokens_per_ms.is_finite() && self.prefill_tokens_per_ms > 0.0) {
            return Err(ScenarioError::field(
                "prefill_tokens_per_ms",
                format!("must be > 0 (got {})", self.prefill_tokens_per_ms),
            ));
        }
        for (name, v) in [
            ("prefix_cache_hit_efficiency", self.prefix_cache_hit_efficiency),
            ("base_tpot_ms", self.base_tpot_ms),
            ("batch_tpot_slope_ms", self.batch_tpot_slope_ms),
        ] {
            if !v.is_finite() {
                return Err(ScenarioError::field(name, format!("must be a finite number (got {v})")));
            }
        }
        Ok(())
    }
}

/// The seed-model scenario, exactly the fields of the seed's `evaluate_engine_benchmark` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedScenario {
    pub workload: SeedWorkload,
    pub profile: SeedProfile,
    /// `ttft_slo_ms` / `tpot_slo_ms`; the seed model has no E2E target.
    #[serde(default)]
    pub slo: Slo,
    /// Closed loop: one request at a time, each starting at the previous completion.
    #[serde(default)]
    pub closed_loop: bool,
    /// Shown as the summary's `workload`.
    #[serde(default = "default_workload_name")]
    pub workload_name: String,
}

fn default_workload_name() -> String {
    "agent-shared-prefix".to_string()
}

/// The seed model's workloads: only the bursty trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SeedWorkload {
    Bursty(BurstyWorkload),
}

impl SeedScenario {
    /// Full field paths (`workload.mean_rps`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let SeedWorkload::Bursty(w) = &self.workload;
        w.validate().map_err(|e| e.within("workload"))?;
        self.profile.validate().map_err(|e| e.within("profile"))?;
        self.slo.validate().map_err(|e| e.within("slo"))?;
        if let Some(e2e) = self.slo.e2e_ms {
            return Err(ScenarioError::field(
                "slo.e2e_ms",
                format!("is not part of the seed model (got {e2e}); use \"model\": \"engine\""),
            ));
        }
        Ok(())
    }
}
