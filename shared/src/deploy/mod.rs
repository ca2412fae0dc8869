//! Deployments: a model on a GPU at a tensor-parallel degree, resolved into an [`EngineProfile`] whose step time is
//! priced by a [`RooflineCost`] (docs/simulator.md, "Deployments").
//!
//! An engine scenario may give `"deployment"` instead of `"profile"`. [`Deployment::resolve`] turns it into the
//! profile in short stages: the model ([`catalog`] name or `config.json` object, read by [`model`]), the GPU (name
//! or numbers), the checks (TP divides the heads; the weights fit), the per-GPU bytes and FLOPs, the KV capacity,
//! and the roofline. [`Derived`] carries the numbers the CLI shows beside the result.

pub mod catalog;
pub mod model;
pub mod roofline;
pub mod transfer;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::catalog::GpuSpec;
use self::model::{Attention, ModelSpec};
use self::roofline::{RooflineCost, StepCost, StepShape};
use crate::engine::profile::{EngineProfile, MAX_BLOCK_SIZE, MAX_KV_BLOCKS, MAX_NUM_SEQS, MAX_TOKENS};
use crate::error::ScenarioError;

/// A number format for weights or KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    Bf16,
    Fp16,
    Fp8,
    /// 4-bit floats with one 8-bit scale per 32 values (MXFP4): 4.25 bits a value.
    Fp4,
}

impl Dtype {
    /// Bytes per value.
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Bf16 | Dtype::Fp16 => 2.0,
            Dtype::Fp8 => 1.0,
            Dtype::Fp4 => 4.25 / 8.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp4 => "fp4",
        }
    }

    fn from_name(name: &str) -> Dtype {
        match name {
            "fp16" => Dtype::Fp16,
            "fp8" => Dtype::Fp8,
            "fp4" => Dtype::Fp4,
            _ => Dtype::Bf16,
        }
    }
}

/// The efficiency factors of the roofline; each absent one takes its default ([`Efficiency::DEFAULTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Share of the dense tensor peak that matrix work sustains (MFU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// Share of the memory bandwidth peak that weight and KV reads sustain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_utilization: Option<f64>,
    /// Share of the scale-up link's bandwidth that TP all-reduces sustain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_utilization: Option<f64>,
    /// Fixed cost of every step, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_overhead_ms: Option<f64>,
    /// Latency of one TP all-reduce, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_latency_us: Option<f64>,
    /// How far a step's compute and memory time overlap, in [0, 1]: the step takes the larger plus (1 − overlap)
    /// × the smaller (1: a GPU's `max`; 0: their sum, a CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<f64>,
    /// Share of the dense tensor peak that the decoders' attention (one query against its context) sustains
    /// (default: `mfu`, the matrix work's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_attention_mfu: Option<f64>,
}

/// The default efficiencies, each with its basis (docs/simulator.md, "Deployments").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EfficiencyDefaults {
    pub mfu: f64,
    pub bandwidth_utilization: f64,
    pub link_utilization: f64,
    pub step_overhead_ms: f64,
    pub allreduce_latency_us: f64,
    pub overlap: f64,
    /// `None`: `mfu`.
    pub decode_attention_mfu: Option<f64>,
}

impl Efficiency {
    pub const DEFAULTS: EfficiencyDefaults = EfficiencyDefaults {
        // The llama-3-8b-1xh100 preset's prefill, 30 tok/ms × 16 GFLOP/token = 48.5 % of H100 dense BF16 (itself
        // between a 45 % MFU roofline and Vidur's measured H100 linear-op profile).
        mfu: 0.5,
        // With the 1 ms overhead, Llama-3.1-8B bf16 on one H100 decodes at batch 1 in 1 + 16.06 GB / (0.8 × 3.35
        // TB/s) = 7.0 ms: the llama-3-8b-1xh100 preset's step floor (Vidur: 5.6 ms flat to 64 tokens; 5.5-9).
        bandwidth_utilization: 0.8,
        // Estimate: NCCL all-reduce of decode-sized messages (tens of KB to a few MB) reaches well under the
        // link's peak; half of it.
        link_utilization: 0.5,
        // See bandwidth_utilization: scheduling, sampling and launch gaps, fitted with it to the 7 ms floor.
        step_overhead_ms: 1.0,
        // Estimate: a small-message all-reduce over NVLink (NCCL, vLLM's custom all-reduce) takes of order 10 µs.
        allreduce_latency_us: 10.0,
        // A GPU streams the weights while its tensor cores work (the roofline model: the step takes the larger of
        // compute and memory time); a CPU server's calibration identifies its own (docs/calibration.md).
        overlap: 1.0,
        // The decoders' attention runs at the matrix work's MFU unless a calibration measured otherwise.
        decode_attention_mfu: None,
    };
}

/// Default `gpu_memory_utilization` (vLLM's default).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
/// Default memory kept back from the KV cache for activations, CUDA graphs and the communication buffers, bytes
/// (estimate: vLLM's profiling run measures this; ≈ 1-3 GB for the models of the catalog at 8192 batched tokens).
pub const DEFAULT_RESERVE_BYTES: f64 = 2e9;
/// Default `max_num_seqs` and `max_num_batched_tokens` (the engine presets' vLLM values).
pub const DEFAULT_MAX_NUM_SEQS: u32 = 256;
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: u32 = 8192;

/// A model on a GPU at a TP degree, with the engine's limits; every field but `model` and `gpu` may be left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// A catalog name (`llama-3.1-8b`) or a Hugging Face `config.json` object.
    pub model: Value,
    /// A catalog name (`h100-sxm`) or the GPU's numbers (`{"name", "flops": {"bf16", "fp8"}, "hbm_bytes",
    /// "hbm_bytes_per_s", "link_bytes_per_s"}`).
    pub gpu: Value,
    /// Tensor-parallel degree (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u32>,
    /// Weight precision (default: the model's published one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_dtype: Option<Dtype>,
    /// KV cache precision (default bf16, vLLM's `auto` for these models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_dtype: Option<Dtype>,
    /// Share of GPU memory the engine may use (default 0.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<f64>,
    /// Memory kept back from the KV cache, bytes per GPU (default 2e9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_bytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Longest request, tokens (default: the model's `max_position_embeddings`, at most the KV capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// KV blocks the server reports (vLLM's `num_gpu_blocks`, its `--num-gpu-blocks-override`), in place of the
    /// estimate from memory; the weights must still fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_gpu_blocks_override: Option<u64>,
    #[serde(default, skip_serializing_if = "is_default_efficiency")]
    pub efficiency: Efficiency,
}

fn is_default_efficiency(e: &Efficiency) -> bool {
    *e == Efficiency::default()
}

/// One step priced at a given shape, for display.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// `decode` or `prefill`.
    pub kind: &'static str,
    /// Sequences in the step.
    pub seqs: u32,
    /// Context per sequence, tokens.
    pub context: u64,
    /// New tokens in the step.
    pub tokens: u64,
    #[serde(flatten)]
    pub cost: StepCost,
}

/// The numbers a deployment resolves to, shown with the result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Derived {
    pub model: String,
    pub gpu: String,
    pub tp: u32,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
    /// Precision the matrix work runs at (the weights' where the GPU has that tensor path, else bf16).
    pub compute_dtype: Dtype,
    pub attention: &'static str,
    pub total_params: f64,
    pub active_params: f64,
    pub weight_bytes_per_gpu: f64,
    /// GPU memory × `gpu_memory_utilization`, bytes per GPU.
    pub usable_bytes_per_gpu: f64,
    pub reserve_bytes_per_gpu: f64,
    /// KV bytes per token of context per GPU (full-attention layers).
    pub kv_bytes_per_token: f64,
    pub kv_blocks: u64,
    pub kv_tokens: u64,
    pub block_size: u32,
    /// Per-step costs at a few batch shapes.
    pub samples: Vec<Sample>,
    pub roofline: RooflineCost,
}

/// A resolved deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub profile: EngineProfile,
    pub derived: Derived,
}

/// What a deployment's model and GPU are, after lookup.
struct Parts {
    model_name: String,
    model_source: String,
    model: ModelSpec,
    gpu: GpuSpec,
}

/// Per-GPU bytes and FLOPs of the model at the deployment's precisions and TP.
struct PerGpu {
    weight_bytes: f64,
    dense_read_bytes: f64,
    expert_bytes: f64,
    flops_per_token: f64,
    head_flops_per_row: f64,
    attn_flops_per_ctx: (f64, f64),
    kv_bytes_per_token: f64,
    window_bytes_per_token: f64,
}

fn err(path: &str, message: impl Into<String>) -> ScenarioError {
    ScenarioError::field(path, message)
}

impl Deployment {
    /// A deployment of catalog names with every default.
    pub fn named(model: &str, gpu: &str, tp: u32) -> Deployment {
        Deployment {
            model: Value::from(model),
            gpu: Value::from(gpu),
            tp: (tp != 1).then_some(tp),
            weight_dtype: None,
            kv_dtype: None,
            gpu_memory_utilization: None,
            reserve_bytes: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            block_size: None,
            max_model_len: None,
            num_gpu_blocks_override: None,
            efficiency: Efficiency::default(),
        }
    }

    /// Read a deployment from JSON text (a `deployment.json`, or a scenario's `"deployment"`) and check that it
    /// resolves. Errors name the field (`efficiency.mfu: …`, `gpu names no known GPU …`).
    pub fn from_json(text: &str) -> Result<Deployment, ScenarioError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let d: Deployment = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            if path == "." {
                ScenarioError::Parse(inner)
            } else {
                ScenarioError::Parse(format!("{path}: {inner}"))
            }
        })?;
        d.resolve()?;
        Ok(d)
    }

    /// Resolve into a profile and its derived numbers. Error paths are relative (`gpu`, `tp`).
    pub fn resolve(&self) -> Result<Resolved, ScenarioError> {
        let parts = self.parts()?;
        let tp = self.tp.unwrap_or(1);
        check_tp(&parts.model, &parts.gpu, tp)?;
        let weight_dtype = self
            .weight_dtype
            .unwrap_or_else(|| Dtype::from_name(parts.model.published_dtype));
        let kv_dtype = self.kv_dtype.unwrap_or(Dtype::Bf16);
        let (compute_dtype, peak) = compute_rate(&parts.gpu, weight_dtype);
        let per_gpu = per_gpu(&parts.model, weight_dtype, kv_dtype, tp);
        let eff = self.efficiency()?;
        let limits = self.limits()?;
        let (kv_blocks, usable, reserve) = self.kv_capacity(&parts, &per_gpu, &limits)?;
        let roofline = roofline(&parts, &per_gpu, peak, &eff, tp);
        roofline
            .validate()
            .map_err(|(f, m)| err("efficiency", format!("gives a roofline whose {f} {m}")))?;
        let profile = self.profile(&parts, &roofline, &limits, kv_blocks, weight_dtype, tp)?;
        let derived = Derived {
            model: parts.model_name.clone(),
            gpu: parts.gpu.name.clone(),
            tp,
            weight_dtype,
            kv_dtype,
            compute_dtype,
            attention: attention_name(&parts.model),
            total_params: parts.model.total_params() as f64,
            active_params: parts.model.active_params() as f64,
            weight_bytes_per_gpu: per_gpu.weight_bytes,
            usable_bytes_per_gpu: usable,
            reserve_bytes_per_gpu: reserve,
            kv_bytes_per_token: per_gpu.kv_bytes_per_token,
            kv_blocks,
            kv_tokens: kv_blocks * u64::from(limits.block_size),
            block_size: limits.block_size,
            samples: samples(&roofline),
            roofline,
        };
        Ok(Resolved { profile, derived })
    }

    /// The model and the GPU, looked up or read.
    fn parts(&self) -> Result<Parts, ScenarioError> {
        let (model_name, model_source, config) = match &self.model {
            Value::String(name) => {
                let entry = catalog::model_named(name).ok_or_else(|| {
                    err(
                        "model",
                        format!(
                            "names no known model (got \"{name}\"; known: {})",
                            catalog::model_names()
                        ),
                    )
                })?;
                // The catalog's configs are valid JSON objects (a unit test reads them all).
                let config: serde_json::Map<String, Value> =
                    serde_json::from_str(entry.config).map_err(|e| err("model", e.to_string()))?;
                (name.clone(), entry.source.to_string(), config)
            }
            Value::Object(config) => {
                let name = config
                    .get("_name_or_path")
                    .and_then(Value::as_str)
                    .unwrap_or("config.json")
                    .to_string();
                (name, "a config.json given in the scenario".to_string(), config.clone())
            }
            other => {
                return Err(err(
                    "model",
                    format!("must be a model name or a config.json object (got {other})"),
                ));
            }
        };
        let model = ModelSpec::from_config(&config).map_err(|m| err("model", m))?;
        let gpu = match &self.gpu {
            Value::String(name) => catalog::gpu_named(name).ok_or_else(|| {
                err(
                    "gpu",
                    format!("names no known GPU (got \"{name}\"; known: {})", catalog::gpu_names()),
                )
            })?,
            Value::Object(_) => {
                let g: GpuSpec = serde_path_to_error::deserialize(self.gpu.clone()).map_err(|e| {
                    let path = e.path().to_string();
                    let inner = e.into_inner().to_string();
                    if path == "." {
                        err("gpu", inner)
                    } else {
                        err(&format!("gpu.{path}"), inner)
                    }
                })?;
                check_gpu(&g)?;
                g
            }
            other => {
                return Err(err(
                    "gpu",
                    format!("must be a GPU name or the GPU's numbers as an object (got {other})"),
                ));
            }
        };
        Ok(Parts {
            model_name,
            model_source,
            model,
            gpu,
        })
    }

    /// The efficiency factors, defaults filled in and checked.
    fn efficiency(&self) -> Result<EfficiencyDefaults, ScenarioError> {
        let d = Efficiency::DEFAULTS;
        let e = &self.efficiency;
        let out = EfficiencyDefaults {
            mfu: e.mfu.unwrap_or(d.mfu),
            bandwidth_utilization: e.bandwidth_utilization.unwrap_or(d.bandwidth_utilization),
            link_utilization: e.link_utilization.unwrap_or(d.link_utilization),
            step_overhead_ms: e.step_overhead_ms.unwrap_or(d.step_overhead_ms),
            allreduce_latency_us: e.allreduce_latency_us.unwrap_or(d.allreduce_latency_us),
            overlap: e.overlap.unwrap_or(d.overlap),
            decode_attention_mfu: e.decode_attention_mfu.or(d.decode_attention_mfu),
        };
        if let Some(v) = out.decode_attention_mfu
            && !(v > 0.0 && v <= 1.0)
        {
            return Err(err(
                "efficiency.decode_attention_mfu",
                format!("must be a share in (0, 1] (got {v})"),
            ));
        }
        if !(0.0..=1.0).contains(&out.overlap) {
            return Err(err(
                "efficiency.overlap",
                format!("must be a share in [0, 1] (got {})", out.overlap),
            ));
        }
        for (name, v) in [
            ("mfu", out.mfu),
            ("bandwidth_utilization", out.bandwidth_utilization),
            ("link_utilization", out.link_utilization),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(err(
                    &format!("efficiency.{name}"),
                    format!("must be a share in (0, 1] (got {v})"),
                ));
            }
        }
        for (name, v) in [
            ("step_overhead_ms", out.step_overhead_ms),
            ("allreduce_latency_us", out.allreduce_latency_us),
        ] {
            if !(v.is_finite() && (0.0..=1e6).contains(&v)) {
                return Err(err(
                    &format!("efficiency.{name}"),
                    format!("must be a finite number in 0..=1e6 (got {v})"),
                ));
            }
        }
        Ok(out)
    }

    /// The engine limits, defaults filled in and checked.
    fn limits(&self) -> Result<Limits, ScenarioError> {
        let max_num_seqs = self.max_num_seqs.unwrap_or(DEFAULT_MAX_NUM_SEQS);
        if max_num_seqs == 0 || max_num_seqs > MAX_NUM_SEQS {
            return Err(err(
                "max_num_seqs",
                format!("must be in 1..={MAX_NUM_SEQS} (got {max_num_seqs})"),
            ));
        }
        let max_num_batched_tokens = self
            .max_num_batched_tokens
            .unwrap_or(DEFAULT_MAX_NUM_BATCHED_TOKENS.max(max_num_seqs));
        let block_size = self.block_size.unwrap_or(16);
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(err(
                "block_size",
                format!("must be in 1..={MAX_BLOCK_SIZE} (got {block_size})"),
            ));
        }
        let util = self.gpu_memory_utilization.unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION);
        if !(util > 0.0 && util <= 1.0) {
            return Err(err(
                "gpu_memory_utilization",
                format!("must be a share in (0, 1] (got {util})"),
            ));
        }
        let reserve = self.reserve_bytes.unwrap_or(DEFAULT_RESERVE_BYTES);
        if !(reserve.is_finite() && reserve >= 0.0) {
            return Err(err(
                "reserve_bytes",
                format!("must be a finite number >= 0 (got {reserve})"),
            ));
        }
        Ok(Limits {
            max_num_seqs,
            max_num_batched_tokens,
            block_size,
            util,
            reserve,
        })
    }

    /// KV blocks that fit beside the weights: (blocks, usable bytes, reserve bytes), or an error saying by how much
    /// the model misses.
    fn kv_capacity(&self, parts: &Parts, g: &PerGpu, l: &Limits) -> Result<(u64, f64, f64), ScenarioError> {
        let usable = parts.gpu.hbm_bytes * l.util;
        // Sliding-window layers hold at most a window (and a block) per running sequence.
        let window_tokens = if parts.model.sliding_layers > 0 {
            parts.model.sliding_window + u64::from(l.block_size)
        } else {
            0
        };
        let window_reserve = g.window_bytes_per_token * (window_tokens * u64::from(l.max_num_seqs)) as f64;
        let left = usable - g.weight_bytes - l.reserve - window_reserve;
        let block_bytes = g.kv_bytes_per_token * f64::from(l.block_size);
        if left < block_bytes {
            let tp = self.tp.unwrap_or(1);
            return Err(err(
                "model",
                format!(
                    "{} does not fit on {} at tp {tp}: weights {:.2} GB per GPU + reserve {:.2} GB + sliding-window \
                     KV {:.2} GB leave no room for the KV cache in {:.2} GB ({:.0} GB x gpu_memory_utilization \
                     {}); short by {:.2} GB per GPU (raise tp, lower the weight precision, or pick a larger GPU)",
                    parts.model_name,
                    parts.gpu.name,
                    g.weight_bytes / 1e9,
                    l.reserve / 1e9,
                    window_reserve / 1e9,
                    usable / 1e9,
                    parts.gpu.hbm_bytes / 1e9,
                    l.util,
                    (block_bytes - left) / 1e9,
                ),
            ));
        }
        let blocks = match self.num_gpu_blocks_override {
            Some(n) if n == 0 || n > MAX_KV_BLOCKS => {
                return Err(err(
                    "num_gpu_blocks_override",
                    format!("must be in 1..={MAX_KV_BLOCKS} (got {n})"),
                ));
            }
            Some(n) => n as f64,
            None if block_bytes > 0.0 => (left / block_bytes).floor(),
            None => f64::INFINITY,
        };
        Ok((
            blocks.min(MAX_KV_BLOCKS as f64) as u64,
            usable,
            l.reserve + window_reserve,
        ))
    }

    /// The engine profile: limits, the roofline, and the linear terms as the roofline's memory-bound view (a step
    /// floor that no step undercuts, KV reads per context token, prefill at the sustained FLOP rate).
    fn profile(
        &self,
        parts: &Parts,
        r: &RooflineCost,
        l: &Limits,
        kv_blocks: u64,
        weight_dtype: Dtype,
        tp: u32,
    ) -> Result<EngineProfile, ScenarioError> {
        let cap_tokens = kv_blocks * u64::from(l.block_size);
        let max_model_len = match self.max_model_len {
            Some(len) => Some(len),
            None => parts
                .model
                .max_position_embeddings
                .filter(|&m| m >= 2 && m < cap_tokens.min(MAX_TOKENS)),
        };
        // The linear terms nearest the roofline (which prices every step): a step reads at least the weights, each
        // token of context its KV, and a prompt token costs its FLOPs.
        let linear = [
            r.min_step_ms(),
            0.0,
            r.kv_bytes_per_token / r.bytes_per_ms,
            r.flops_per_ms / r.flops_per_token.max(1.0),
            0.0,
        ];
        let name = format!("{}-{}x{}", parts.model_name, tp, parts.gpu.name);
        let profile = EngineProfile {
            basis: format!(
                "roofline of a deployment: {} ({}) in {} on {} x {} ({}); efficiencies and formulas: \
                 docs/simulator.md, Deployments",
                parts.model_name,
                parts.model_source,
                weight_dtype.name(),
                tp,
                parts.gpu.name,
                if parts.gpu.source.is_empty() {
                    "numbers given in the scenario"
                } else {
                    &parts.gpu.source
                },
            ),
            block_size: l.block_size,
            max_model_len,
            roofline: Some(Box::new(r.clone())),
            ..EngineProfile::linear(&name, kv_blocks, l.max_num_seqs, l.max_num_batched_tokens, linear)
        };
        profile.validate()?;
        Ok(profile)
    }
}

/// The engine limits of a deployment.
struct Limits {
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    block_size: u32,
    util: f64,
    reserve: f64,
}

fn check_gpu(g: &GpuSpec) -> Result<(), ScenarioError> {
    let positive = |path: &str, v: f64| {
        if v.is_finite() && v > 0.0 && v <= 1e30 {
            Ok(())
        } else {
            Err(err(path, format!("must be a finite number > 0 (got {v})")))
        }
    };
    positive("gpu.flops.bf16", g.flops.bf16)?;
    if let Some(v) = g.flops.fp8 {
        positive("gpu.flops.fp8", v)?;
    }
    if let Some(v) = g.flops.fp4 {
        positive("gpu.flops.fp4", v)?;
    }
    positive("gpu.hbm_bytes", g.hbm_bytes)?;
    positive("gpu.hbm_bytes_per_s", g.hbm_bytes_per_s)?;
    if let Some(v) = g.link_bytes_per_s {
        positive("gpu.link_bytes_per_s", v)?;
    }
    Ok(())
}

/// TP must split the attention heads evenly (and the KV heads, or be a multiple of them: vLLM then replicates
/// each KV head), and needs a link.
fn check_tp(m: &ModelSpec, g: &GpuSpec, tp: u32) -> Result<(), ScenarioError> {
    if tp == 0 || tp > 64 {
        return Err(err("tp", format!("must be in 1..=64 (got {tp})")));
    }
    let t = u64::from(tp);
    if !m.heads.is_multiple_of(t) {
        return Err(err(
            "tp",
            format!("{tp} does not divide the model's {} attention heads", m.heads),
        ));
    }
    if matches!(m.attention, Attention::Gqa) && !m.kv_heads.is_multiple_of(t) && !t.is_multiple_of(m.kv_heads) {
        return Err(err(
            "tp",
            format!(
                "{tp} neither divides the model's {} KV heads nor is a multiple of them",
                m.kv_heads
            ),
        ));
    }
    if tp > 1 && g.link_bytes_per_s.is_none() {
        return Err(err(
            "gpu.link_bytes_per_s",
            format!("is needed for tp {tp} (the all-reduces cross it)"),
        ));
    }
    Ok(())
}

/// The precision the matrix work runs at and its dense peak: the weights' own where the GPU has that tensor path,
/// else bf16 (weight-only quantization widens the weights to bf16 in the kernel).
fn compute_rate(g: &GpuSpec, w: Dtype) -> (Dtype, f64) {
    match w {
        Dtype::Fp8 if g.flops.fp8.is_some() => (Dtype::Fp8, g.flops.fp8.unwrap_or(g.flops.bf16)),
        Dtype::Fp4 if g.flops.fp4.is_some() => (Dtype::Fp4, g.flops.fp4.unwrap_or(g.flops.bf16)),
        Dtype::Fp16 => (Dtype::Fp16, g.flops.bf16),
        _ => (Dtype::Bf16, g.flops.bf16),
    }
}

fn attention_name(m: &ModelSpec) -> &'static str {
    match (m.attention, m.sliding_layers > 0) {
        (Attention::Mla { .. }, _) => "mla",
        (Attention::Gqa, true) => "gqa+sliding_window",
        (Attention::Gqa, false) if m.kv_heads == m.heads => "mha",
        (Attention::Gqa, false) => "gqa",
    }
}

/// Per-GPU bytes and FLOPs. Weights split evenly over the TP ranks; GQA's KV heads split too (a rank holds at
/// least one); MLA's latent is cached whole on every rank.
fn per_gpu(m: &ModelSpec, w: Dtype, kv: Dtype, tp: u32) -> PerGpu {
    let t = f64::from(tp);
    let wb = w.bytes();
    let kv_elems = match m.attention {
        Attention::Gqa => (m.kv_elems_per_layer() as f64 / t).max(2.0 * m.head_dim as f64),
        Attention::Mla { .. } => m.kv_elems_per_layer() as f64,
    };
    let full_layers = (m.layers - m.sliding_layers) as f64;
    let sliding_layers = m.sliding_layers as f64;
    let (attn_decode, attn_prefill) = m.attn_flops_per_ctx_layer();
    // Sliding-window layers attend to (at most) the window: a cost per token, not per context token.
    let window_flops = sliding_layers * attn_decode * m.sliding_window as f64 / t;
    PerGpu {
        weight_bytes: m.total_params() as f64 * wb / t,
        dense_read_bytes: m.dense_params() as f64 * wb / t,
        expert_bytes: m.expert_params() as f64 * wb / t,
        flops_per_token: 2.0 * (m.active_params() - m.head_params()) as f64 / t + window_flops,
        head_flops_per_row: 2.0 * m.head_params() as f64 / t,
        attn_flops_per_ctx: (full_layers * attn_decode / t, full_layers * attn_prefill / t),
        kv_bytes_per_token: full_layers * kv_elems * kv.bytes(),
        window_bytes_per_token: sliding_layers * kv_elems * kv.bytes(),
    }
}

/// The roofline's coefficients, per millisecond.
fn roofline(parts: &Parts, g: &PerGpu, peak: f64, e: &EfficiencyDefaults, tp: u32) -> RooflineCost {
    let m = &parts.model;
    let (comm_ms_per_token, comm_fixed_ms) = match parts.gpu.link_bytes_per_s {
        Some(link) if tp > 1 => {
            // Two all-reduces a layer (after attention, after the MLP) of the bf16 hidden state; a ring moves
            // 2(tp − 1)/tp of it through each GPU's link.
            let t = f64::from(tp);
            let allreduces = 2.0 * m.layers as f64;
            let bytes_per_token = allreduces * m.hidden as f64 * 2.0 * 2.0 * (t - 1.0) / t;
            (
                bytes_per_token / (link * e.link_utilization) * 1e3,
                allreduces * e.allreduce_latency_us / 1e3,
            )
        }
        _ => (0.0, 0.0),
    };
    RooflineCost {
        overhead_ms: e.step_overhead_ms,
        flops_per_ms: peak * e.mfu / 1e3,
        bytes_per_ms: parts.gpu.hbm_bytes_per_s * e.bandwidth_utilization / 1e3,
        flops_per_token: g.flops_per_token,
        head_flops_per_row: g.head_flops_per_row,
        attn_flops_per_ctx: g.attn_flops_per_ctx.0,
        prefill_attn_flops_per_ctx: g.attn_flops_per_ctx.1,
        weight_bytes: g.dense_read_bytes,
        expert_bytes: g.expert_bytes,
        moe_layers: m.moe_layers() as u32,
        experts: m.experts as u32,
        active_experts: m.active_experts as u32,
        kv_bytes_per_token: g.kv_bytes_per_token,
        window_bytes_per_seq: g.window_bytes_per_token * m.sliding_window as f64,
        comm_ms_per_token,
        comm_fixed_ms,
        overlap: e.overlap,
        decode_attn_flops_per_ms: e.decode_attention_mfu.map(|a| peak * a / 1e3),
    }
}

/// Decode at batch 1, 8 and 64 with 4,096 tokens of context each, and a cold 2,048-token prefill.
fn samples(r: &RooflineCost) -> Vec<Sample> {
    let mut out: Vec<Sample> = [1u32, 8, 64]
        .iter()
        .map(|&n| {
            let ctx = 4096u64;
            Sample {
                kind: "decode",
                seqs: n,
                context: ctx,
                tokens: u64::from(n),
                cost: r.cost(&StepShape::decode(f64::from(n), (u64::from(n) * ctx) as f64)),
            }
        })
        .collect();
    out.push(Sample {
        kind: "prefill",
        seqs: 1,
        context: 0,
        tokens: 2048,
        cost: r.cost(&StepShape::prefill(2048.0)),
    });
    out
}

#[cfg(test)]
mod tests;
