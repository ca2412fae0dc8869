//! A model's shape read from its Hugging Face `config.json` ([`ModelSpec::from_config`]), and what follows from it:
//! parameter counts, KV bytes per token and FLOPs per token (docs/simulator.md, "Deployments").

use serde::Serialize;
use serde_json::{Map, Value};

/// Attention kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Attention {
    /// Grouped-query (or multi-head, `kv_heads == heads`) attention.
    Gqa,
    /// DeepSeek's multi-head latent attention: one compressed latent of `kv_lora_rank + qk_rope_head_dim` per token
    /// and layer is cached.
    Mla {
        q_lora_rank: u64,
        kv_lora_rank: u64,
        qk_rope_head_dim: u64,
        qk_nope_head_dim: u64,
        v_head_dim: u64,
    },
}

/// A model's shape (the fields of its `config.json` the roofline needs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// Dense MLP width (SwiGLU: gate, up, down).
    pub intermediate: u64,
    pub vocab: u64,
    pub tie_embeddings: bool,
    /// Routed experts per MoE layer (0: dense).
    pub experts: u64,
    /// Routed experts per token.
    pub active_experts: u64,
    /// One expert's MLP width.
    pub expert_intermediate: u64,
    /// Shared experts' total MLP width per MoE layer (0: none).
    pub shared_intermediate: u64,
    /// Layers with a dense MLP instead of experts (DeepSeek's `first_k_dense_replace`, Qwen's `mlp_only_layers`).
    pub dense_layers: u64,
    pub attention: Attention,
    /// Sliding-window layers and their window (gpt-oss alternates them with full-attention layers).
    pub sliding_layers: u64,
    pub sliding_window: u64,
    /// Longest context the model was trained for (`max_position_embeddings`), if given.
    pub max_position_embeddings: Option<u64>,
    /// The published weights' precision (`torch_dtype`, or the `quantization_config`'s method).
    pub published_dtype: &'static str,
}

fn get<'a>(c: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    c.get(key).filter(|v| !v.is_null())
}

fn uint(c: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match get(c, key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= 1 << 40 => Ok(Some(n)),
            _ => Err(format!("`{key}` must be a non-negative integer (got {v})")),
        },
    }
}

fn need(c: &Map<String, Value>, key: &str) -> Result<u64, String> {
    match uint(c, key)? {
        Some(n) if n > 0 => Ok(n),
        Some(_) => Err(format!("`{key}` must be > 0 (got 0)")),
        None => Err(format!("config.json has no `{key}`")),
    }
}

/// The first of `keys` present.
fn first_uint(c: &Map<String, Value>, keys: &[&str]) -> Result<Option<u64>, String> {
    for k in keys {
        if let Some(n) = uint(c, k)? {
            return Ok(Some(n));
        }
    }
    Ok(None)
}

impl ModelSpec {
    /// Read a model from its `config.json` object. Errors name the missing or bad field.
    pub fn from_config(c: &Map<String, Value>) -> Result<ModelSpec, String> {
        let layers = need(c, "num_hidden_layers")?;
        let hidden = need(c, "hidden_size")?;
        let heads = need(c, "num_attention_heads")?;
        let vocab = need(c, "vocab_size")?;
        let kv_heads = uint(c, "num_key_value_heads")?.unwrap_or(heads).max(1);
        let head_dim = uint(c, "head_dim")?.filter(|&d| d > 0).unwrap_or(hidden / heads);
        let (experts, active_experts, expert_intermediate, shared_intermediate, dense_layers) = moe(c, layers)?;
        let intermediate = match uint(c, "intermediate_size")? {
            Some(n) => n,
            None if experts > 0 && dense_layers == 0 => 0,
            None => return Err("config.json has no `intermediate_size`".to_string()),
        };
        let attention = attention(c)?;
        let (sliding_layers, sliding_window) = sliding(c, layers)?;
        let tie_embeddings = get(c, "tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
        Ok(ModelSpec {
            layers,
            hidden,
            heads,
            kv_heads,
            head_dim,
            intermediate,
            vocab,
            tie_embeddings,
            experts,
            active_experts,
            expert_intermediate,
            shared_intermediate,
            dense_layers,
            attention,
            sliding_layers,
            sliding_window,
            max_position_embeddings: uint(c, "max_position_embeddings")?,
            published_dtype: published_dtype(c),
        })
    }

    /// Layers with routed experts.
    pub fn moe_layers(&self) -> u64 {
        if self.experts == 0 {
            0
        } else {
            self.layers - self.dense_layers
        }
    }

    /// Attention parameters of one layer.
    pub fn attention_params(&self) -> u64 {
        let (h, n) = (self.hidden, self.heads);
        match self.attention {
            Attention::Gqa => h * n * self.head_dim * 2 + h * self.kv_heads * self.head_dim * 2,
            Attention::Mla {
                q_lora_rank,
                kv_lora_rank,
                qk_rope_head_dim,
                qk_nope_head_dim,
                v_head_dim,
            } => {
                let qk = qk_rope_head_dim + qk_nope_head_dim;
                let q = if q_lora_rank > 0 {
                    h * q_lora_rank + q_lora_rank * n * qk
                } else {
                    h * n * qk
                };
                q + h * (kv_lora_rank + qk_rope_head_dim)
                    + kv_lora_rank * n * (qk_nope_head_dim + v_head_dim)
                    + n * v_head_dim * h
            }
        }
    }

    /// Parameters of one routed expert in one layer.
    pub fn expert_params(&self) -> u64 {
        3 * self.hidden * self.expert_intermediate
    }

    /// Parameters every token uses, bar the embedding lookup: attention, dense MLPs, shared experts, routers and the
    /// output head.
    pub fn dense_params(&self) -> u64 {
        let moe = self.moe_layers();
        let dense_mlp = (self.layers - moe) * 3 * self.hidden * self.intermediate;
        let shared = moe * 3 * self.hidden * self.shared_intermediate;
        let routers = moe * self.hidden * self.experts;
        self.layers * self.attention_params() + dense_mlp + shared + routers + self.head_params()
    }

    /// Every parameter: dense, all routed experts, and the input embedding (unless tied to the head).
    pub fn total_params(&self) -> u64 {
        let embed = if self.tie_embeddings {
            0
        } else {
            self.vocab * self.hidden
        };
        self.dense_params() + self.moe_layers() * self.experts * self.expert_params() + embed
    }

    /// Parameters of the output head (vocabulary × hidden size), which runs only where a step computes logits.
    pub fn head_params(&self) -> u64 {
        self.vocab * self.hidden
    }

    /// Parameters one token uses (its routed experts included, the embedding lookup not).
    pub fn active_params(&self) -> u64 {
        self.dense_params() + self.moe_layers() * self.active_experts * self.expert_params()
    }

    /// KV elements cached per token per full-attention layer, over all KV heads (MLA: the latent and the rope key).
    pub fn kv_elems_per_layer(&self) -> u64 {
        match self.attention {
            Attention::Gqa => 2 * self.kv_heads * self.head_dim,
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => kv_lora_rank + qk_rope_head_dim,
        }
    }

    /// Attention FLOPs per new token per context token in one layer, over all heads: decode (MLA in its absorbed
    /// form, attending in the latent space) and prefill (MLA expanded to per-head keys and values).
    pub fn attn_flops_per_ctx_layer(&self) -> (f64, f64) {
        let n = self.heads as f64;
        match self.attention {
            Attention::Gqa => {
                let f = 4.0 * n * self.head_dim as f64;
                (f, f)
            }
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                qk_nope_head_dim,
                v_head_dim,
                ..
            } => {
                let decode = 2.0 * n * (2 * kv_lora_rank + qk_rope_head_dim) as f64;
                let prefill = 2.0 * n * (qk_nope_head_dim + qk_rope_head_dim + v_head_dim) as f64;
                (decode, prefill)
            }
        }
    }
}

/// (experts, active, expert width, shared width, dense layers) from the MoE fields of the several families.
fn moe(c: &Map<String, Value>, layers: u64) -> Result<(u64, u64, u64, u64, u64), String> {
    let Some(experts) = first_uint(c, &["num_experts", "num_local_experts", "n_routed_experts"])?.filter(|&e| e > 0)
    else {
        return Ok((0, 0, 0, 0, 0));
    };
    let active = first_uint(c, &["num_experts_per_tok", "experts_per_token"])?
        .ok_or("config.json has experts but no `num_experts_per_tok`")?;
    if active == 0 || active > experts {
        return Err(format!("`num_experts_per_tok` must be in 1..={experts} (got {active})"));
    }
    let width = first_uint(c, &["moe_intermediate_size", "intermediate_size"])?
        .ok_or("config.json has experts but no `moe_intermediate_size` (or `intermediate_size`)")?;
    let shared = match (
        uint(c, "n_shared_experts")?,
        uint(c, "shared_expert_intermediate_size")?,
    ) {
        (Some(n), _) => n * width,
        (None, Some(w)) => w,
        (None, None) => 0,
    };
    let mut dense = uint(c, "first_k_dense_replace")?.unwrap_or(0);
    if let Some(list) = get(c, "mlp_only_layers").and_then(Value::as_array) {
        dense += list.len() as u64;
    }
    if dense > layers {
        return Err(format!(
            "{dense} dense layers (`first_k_dense_replace`, `mlp_only_layers`) but only {layers} layers"
        ));
    }
    Ok((experts, active, width, shared, dense))
}

fn attention(c: &Map<String, Value>) -> Result<Attention, String> {
    let Some(kv_lora_rank) = uint(c, "kv_lora_rank")? else {
        return Ok(Attention::Gqa);
    };
    let need_mla = |k: &str| need(c, k).map_err(|e| format!("{e} (an MLA model: it has `kv_lora_rank`)"));
    Ok(Attention::Mla {
        q_lora_rank: uint(c, "q_lora_rank")?.unwrap_or(0),
        kv_lora_rank,
        qk_rope_head_dim: need_mla("qk_rope_head_dim")?,
        qk_nope_head_dim: need_mla("qk_nope_head_dim")?,
        v_head_dim: need_mla("v_head_dim")?,
    })
}

/// (sliding layers, window): `layer_types` when given (gpt-oss), else every layer when `sliding_window` is set and
/// `use_sliding_window` is not false (Mistral), else none (Qwen3 ships `use_sliding_window: false`).
fn sliding(c: &Map<String, Value>, layers: u64) -> Result<(u64, u64), String> {
    let Some(window) = uint(c, "sliding_window")?.filter(|&w| w > 0) else {
        return Ok((0, 0));
    };
    if let Some(types) = get(c, "layer_types").and_then(Value::as_array) {
        let n = types.iter().filter(|t| t.as_str() == Some("sliding_attention")).count() as u64;
        return Ok((n.min(layers), window));
    }
    if get(c, "use_sliding_window").and_then(Value::as_bool) == Some(false) {
        return Ok((0, 0));
    }
    Ok((layers, window))
}

fn published_dtype(c: &Map<String, Value>) -> &'static str {
    let method = c
        .get("quantization_config")
        .and_then(|q| q.get("quant_method"))
        .and_then(Value::as_str);
    match method {
        Some("fp8") => return "fp8",
        Some("mxfp4") => return "fp4",
        _ => {}
    }
    let dtype = get(c, "torch_dtype")
        .or_else(|| get(c, "dtype"))
        .and_then(Value::as_str);
    match dtype {
        Some("float16") => "fp16",
        _ => "bf16",
    }
}
