//! Prefill/decode disaggregation ([`Disaggregation`], a fleet's `"disaggregation"`): the fleet's first
//! `prefill_instances` replicas only prefill, the other `decode_instances` only decode. A request is routed to a
//! prefill instance (by the fleet's router, over the prefill instances; their prefix caches are the fleet's), which
//! computes its prompt's KV; the KV then crosses a link to a decode instance (the least outstanding one), taking
//! `link_latency_ms + prompt tokens · kv_bytes_per_token / link_bytes_per_s`; the decode instance admits it with its
//! whole prompt in KV and decodes, its first decode step emitting the first token. So TTFT = queue + prefill +
//! transfer + (decode queue +) first decode step, and the record's `kv_transfer_ms` is the transfer.

use serde::{Deserialize, Serialize};

use super::profile::{EngineProfile, Scheduler};
use crate::error::ScenarioError;

/// `"disaggregation"` in a fleet (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disaggregation {
    /// Replicas `0..prefill_instances` prefill.
    pub prefill_instances: u32,
    /// The next `decode_instances` replicas decode; `prefill_instances + decode_instances` is the fleet's
    /// `replicas`.
    pub decode_instances: u32,
    /// The link's bandwidth, bytes per second.
    pub link_bytes_per_s: f64,
    /// The link's latency per transfer, milliseconds (default 0).
    #[serde(default)]
    pub link_latency_ms: f64,
    /// The model's KV bytes per token (`2 · layers · kv_heads · head_dim · bytes per element`); default: the
    /// profile's roofline's (a deployment's), required otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<f64>,
}

impl Disaggregation {
    /// Field paths are relative (`decode_instances`); `replicas` is the fleet's.
    pub fn validate(&self, replicas: u32) -> Result<(), ScenarioError> {
        let f = ScenarioError::field;
        if self.prefill_instances == 0 {
            return Err(f(
                "prefill_instances",
                "a disaggregated fleet needs at least one prefill instance (got 0)".to_string(),
            ));
        }
        if self.decode_instances == 0 {
            return Err(f(
                "decode_instances",
                "a disaggregated fleet needs at least one decode instance (got 0)".to_string(),
            ));
        }
        if u64::from(self.prefill_instances) + u64::from(self.decode_instances) != u64::from(replicas) {
            return Err(f(
                "decode_instances",
                format!(
                    "prefill_instances + decode_instances must equal the fleet's replicas {replicas} (got {} + {})",
                    self.prefill_instances, self.decode_instances
                ),
            ));
        }
        if !(self.link_bytes_per_s.is_finite() && self.link_bytes_per_s > 0.0 && self.link_bytes_per_s <= 1e15) {
            return Err(f(
                "link_bytes_per_s",
                format!("must be > 0 and at most 1e15 (got {})", self.link_bytes_per_s),
            ));
        }
        if !(self.link_latency_ms.is_finite() && (0.0..=1e6).contains(&self.link_latency_ms)) {
            return Err(f(
                "link_latency_ms",
                format!("must be in 0..=1e6 milliseconds (got {})", self.link_latency_ms),
            ));
        }
        if let Some(k) = self.kv_bytes_per_token
            && !(k.is_finite() && k > 0.0 && k <= 1e9)
        {
            return Err(f(
                "kv_bytes_per_token",
                format!("must be > 0 and at most 1e9 (got {k})"),
            ));
        }
        Ok(())
    }

    /// [`Self::validate`]'s checks that need the scenario's profile: the KV size is known, and the engine
    /// schedules as vLLM does (the llama.cpp slot schedule is not modelled with disaggregation).
    pub fn validate_with(&self, profile: &EngineProfile) -> Result<(), ScenarioError> {
        if self.kv_bytes_per_token(profile).is_none() {
            return Err(ScenarioError::field(
                "kv_bytes_per_token",
                "required: the profile has no roofline (a deployment's) to take the model's KV bytes per token from",
            ));
        }
        if profile.scheduler != Scheduler::Vllm {
            return Err(ScenarioError::field(
                "prefill_instances",
                "disaggregation is modelled with the vllm scheduler only (the profile's scheduler is llama_cpp)",
            ));
        }
        Ok(())
    }

    /// KV bytes per token: the field, else the profile's roofline's.
    pub fn kv_bytes_per_token(&self, profile: &EngineProfile) -> Option<f64> {
        self.kv_bytes_per_token
            .or_else(|| profile.roofline.as_ref().map(|r| r.kv_bytes_per_token))
            .filter(|&k| k > 0.0)
    }

    /// Milliseconds to move the KV of `prompt` tokens over the link.
    pub fn transfer_ms(&self, prompt: u64, kv_bytes_per_token: f64) -> f64 {
        self.link_latency_ms + prompt as f64 * kv_bytes_per_token / self.link_bytes_per_s * 1000.0
    }

    /// Whether replica `r` prefills.
    pub fn prefills(&self, r: usize) -> bool {
        r < self.prefill_instances as usize
    }
}
