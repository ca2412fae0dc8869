//! The built-in GPUs and models a deployment may name, each citing its source. GPU numbers are the vendors'
//! datasheet figures **without sparsity** (the datasheets' headline tensor figures with sparsity are halved);
//! model shapes are the fields of each model's published `config.json`, kept verbatim and read by the same
//! [`super::model::ModelSpec::from_config`] as a user's file.

use serde::{Deserialize, Serialize};

/// Dense tensor throughput by precision, FLOP/s (absent: the GPU has no such tensor path).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flops {
    pub bf16: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp4: Option<f64>,
}

/// One GPU: what the roofline needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub name: String,
    /// Dense tensor FLOP/s per precision.
    pub flops: Flops,
    /// Device memory, bytes.
    pub hbm_bytes: f64,
    /// Device memory bandwidth, bytes per second.
    pub hbm_bytes_per_s: f64,
    /// Scale-up link bandwidth per GPU, one direction, bytes per second (NVLink, Infinity Fabric, or PCIe where
    /// the card has no such link). Absent in a user's GPU: tensor parallelism is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bytes_per_s: Option<f64>,
    /// Where the numbers come from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

/// A built-in model: its name, its source and the fields of its `config.json`.
#[derive(Debug, Clone, Copy)]
pub struct ModelEntry {
    pub name: &'static str,
    pub source: &'static str,
    /// The `config.json` fields the roofline reads, verbatim.
    pub config: &'static str,
}

const T: f64 = 1e12;
const G: f64 = 1e9;

fn gpu(name: &str, flops: [f64; 3], hbm_gb: f64, hbm_gb_s: f64, link_gb_s: f64, source: &str) -> GpuSpec {
    let opt = |v: f64| (v > 0.0).then_some(v * T);
    GpuSpec {
        name: name.to_string(),
        flops: Flops {
            bf16: flops[0] * T,
            fp8: opt(flops[1]),
            fp4: opt(flops[2]),
        },
        hbm_bytes: hbm_gb * G,
        hbm_bytes_per_s: hbm_gb_s * G,
        link_bytes_per_s: Some(link_gb_s * G),
        source: source.to_string(),
    }
}

/// The built-in GPUs (dense TFLOPS bf16/fp8/fp4; memory GB and GB/s; link GB/s one direction). Memory is the total
/// the driver reports (nvidia-smi, rocm-smi), from public records of it, for every GPU: that, not the datasheet's
/// decimal GB, is what vLLM's `gpu_memory_utilization` multiplies (an "80 GB" card holds about 80 GiB, 7 % more
/// than 80e9 bytes, which at a 34B model's weights is a third of the KV cache).
pub fn gpus() -> Vec<GpuSpec> {
    vec![
        gpu(
            "a100-80gb",
            [312.0, 0.0, 0.0],
            // 81,920 MiB, the total the driver reports (nvidia-smi): the datasheet's "80 GB" is 80 GiB.
            85.899_345_92,
            2039.0,
            300.0,
            "NVIDIA A100 datasheet (SXM4 80GB): BF16 312 TFLOPS dense (624 sparse), no FP8; 80 GB HBM2e at \
             2,039 GB/s (the driver reports 81,920 MiB = 85.90 GB of it: nvidia-smi totals listed in \
             https://github.com/modal-labs/modal-client/pull/2797); NVLink 600 GB/s (both directions). \
             https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        ),
        gpu(
            "h100-sxm",
            [989.5, 1979.0, 0.0],
            // 81,559 MiB, the total the driver reports (nvidia-smi), above the datasheet's decimal "80 GB".
            85.520_809_984,
            3350.0,
            450.0,
            "NVIDIA H100 datasheet (SXM): BF16 1,979 and FP8 3,958 TFLOPS with sparsity (halved); 80 GB HBM3 at \
             3.35 TB/s (the driver reports 81,559 MiB = 85.52 GB: nvidia-smi totals listed in \
             https://github.com/modal-labs/modal-client/pull/2797); NVLink 900 GB/s (both directions). https://www.nvidia.com/en-us/data-center/h100/",
        ),
        gpu(
            "h200",
            [989.5, 1979.0, 0.0],
            // 143,771 MiB, the total the driver reports (nvidia-smi), above the datasheet's decimal "141 GB".
            150.754_820_096,
            4800.0,
            450.0,
            "NVIDIA H200 datasheet (SXM): BF16 1,979 and FP8 3,958 TFLOPS with sparsity (halved); 141 GB HBM3e at \
             4.8 TB/s (the driver reports 143,771 MiB = 150.75 GB: nvidia-smi of 8 x H200 in \
             https://github.com/sgl-project/sglang/issues/3196); NVLink 900 GB/s (both directions). \
             https://www.nvidia.com/en-us/data-center/h200/",
        ),
        gpu(
            "b200",
            [2250.0, 4500.0, 9000.0],
            // 183,359 MiB, the total the driver reports (nvidia-smi), above the datasheet's decimal "180 GB".
            192.265_846_784,
            8000.0,
            900.0,
            "NVIDIA HGX B200 datasheet, per GPU (8 per board): FP16/BF16 36, FP8 72, FP4 144 PFLOPS per board with \
             sparsity (halved, /8); 1,440 GB HBM3e per board (180 GB per GPU) at 8 TB/s per GPU (the driver reports \
             183,359 MiB = 192.27 GB: nvidia-smi of 8 x B200 in https://github.com/NVIDIA/TensorRT-LLM/issues/10278); \
             NVLink 5 1.8 TB/s (both directions). https://www.nvidia.com/en-us/data-center/hgx/",
        ),
        gpu(
            "l40s",
            [362.05, 733.0, 0.0],
            // 46,068 MiB, the total the driver reports (nvidia-smi).
            48.305_799_168,
            864.0,
            32.0,
            "NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse), FP8 733 dense (1,466 sparse); 48 GB \
             GDDR6 at 864 GB/s (the driver reports 46,068 MiB = 48.31 GB: nvidia-smi totals listed in \
             https://github.com/modal-labs/modal-client/pull/2797); no NVLink: PCIe Gen4 x16, 64 GB/s (both directions). \
             https://www.nvidia.com/en-us/data-center/l40s/",
        ),
        gpu(
            "mi300x",
            [1307.4, 2614.9, 0.0],
            // 206,141,652,992 bytes (196,592 MiB), the total the driver reports (rocm-smi): the datasheet's "192 GB"
            // is 192 GiB less 16 MiB.
            206.141_652_992,
            5300.0,
            448.0,
            "AMD Instinct MI300X datasheet: BF16 1,307.4 and FP8 2,614.9 TFLOPS dense; 192 GB HBM3 at 5.3 TB/s (the \
             driver reports 206,141,652,992 B = 206.14 GB: rocm-smi --showmeminfo vram of 8 x MI300X in \
             https://github.com/ROCm/legacy-rocm-build/issues/4750); Infinity Fabric 7 links x 128 GB/s (both \
             directions), 896 GB/s aggregate. https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
        ),
        gpu(
            "rtx-pro-6000",
            [500.0, 1000.0, 2000.0],
            // 97,887 MiB, the total the driver reports (nvidia-smi), above the datasheet's decimal "96 GB".
            102.641_958_912,
            1792.0,
            64.0,
            "NVIDIA RTX PRO 6000 Blackwell datasheet: 4,000 AI TOPS FP4 with sparsity (dense FP4 half of it; FP8 and \
             BF16 at one half and one quarter of dense FP4, Blackwell's tensor-core ratios: derived); 96 GB GDDR7 at \
             1,792 GB/s (the driver reports 97,887 MiB = 102.64 GB: nvidia-smi in \
             https://github.com/vllm-project/vllm/issues/27542 and https://github.com/vllm-project/vllm/issues/15081); \
             no NVLink: PCIe Gen5 x16, 128 GB/s (both directions). \
             https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/",
        ),
    ]
}

/// The built-in models.
pub const MODELS: &[ModelEntry] = &[
    ModelEntry {
        name: "llama-3.1-8b",
        source: "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
        config: r#"{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}"#,
    },
    ModelEntry {
        name: "llama-3.1-70b",
        source: "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
        config: r#"{"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 28672, "vocab_size": 128256,
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}"#,
    },
    ModelEntry {
        name: "qwen3-8b",
        source: "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
        config: r#"{"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
            "max_position_embeddings": 40960, "tie_word_embeddings": false, "sliding_window": null,
            "use_sliding_window": false, "torch_dtype": "bfloat16"}"#,
    },
    ModelEntry {
        name: "qwen3-32b",
        source: "https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json",
        config: r#"{"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936,
            "max_position_embeddings": 40960, "tie_word_embeddings": false, "sliding_window": null,
            "use_sliding_window": false, "torch_dtype": "bfloat16"}"#,
    },
    ModelEntry {
        name: "qwen3-30b-a3b",
        source: "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
        config: r#"{"num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
            "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": false,
            "sliding_window": null, "use_sliding_window": false, "torch_dtype": "bfloat16"}"#,
    },
    ModelEntry {
        name: "qwen3-coder-480b-a35b",
        source: "https://huggingface.co/Qwen/Qwen3-Coder-480B-A35B-Instruct/blob/main/config.json",
        config: r#"{"num_hidden_layers": 62, "hidden_size": 6144, "num_attention_heads": 96,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "moe_intermediate_size": 2560,
            "num_experts": 160, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "vocab_size": 151936, "max_position_embeddings": 262144, "tie_word_embeddings": false,
            "sliding_window": null, "use_sliding_window": false, "torch_dtype": "bfloat16"}"#,
    },
    ModelEntry {
        name: "gpt-oss-20b",
        source: "https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json",
        config: r#"{"num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
            "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088, "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "mxfp4"}}"#,
    },
    ModelEntry {
        name: "gpt-oss-120b",
        source: "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json",
        config: r#"{"num_hidden_layers": 36, "hidden_size": 2880, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
            "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088, "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention",
              "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "max_position_embeddings": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "mxfp4"}}"#,
    },
    ModelEntry {
        name: "deepseek-v3",
        source: "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        config: r#"{"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
            "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
            "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
            "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
            "tie_word_embeddings": false, "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}}"#,
    },
    ModelEntry {
        name: "codellama-34b",
        source: "https://huggingface.co/codellama/CodeLlama-34b-hf/blob/main/config.json",
        config: r#"{"num_hidden_layers": 48, "hidden_size": 8192, "num_attention_heads": 64,
            "num_key_value_heads": 8, "intermediate_size": 22016, "vocab_size": 32000,
            "max_position_embeddings": 16384, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}"#,
    },
];

/// A built-in GPU by name.
pub fn gpu_named(name: &str) -> Option<GpuSpec> {
    gpus().into_iter().find(|g| g.name == name)
}

/// A built-in model by name.
pub fn model_named(name: &str) -> Option<&'static ModelEntry> {
    MODELS.iter().find(|m| m.name == name)
}

/// The built-in GPUs' names, comma-separated.
pub fn gpu_names() -> String {
    gpus().iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// The built-in models' names, comma-separated.
pub fn model_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}
