//! Engine profiles for the hardware rows of `PRESETS.md`, each naming its basis.
//!
//! The context term is derived from KV bytes per token over HBM bandwidth (a decoding sequence reads its whole KV
//! cache every step): Llama-3-8B 128 KiB/token on one H100 (3.35 TB/s) ≈ 3.9e-5 ms per context token; Llama-3-70B
//! 320 KiB/token split over 4 GPUs ≈ 2.4e-5 ms. The per-sequence term is the table's slope at ~1k context minus
//! that context share.

use super::profile::EngineProfile;

fn profile(
    name: &str,
    basis: &str,
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
        basis: basis.to_string(),
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
        host_cache: None,
        kv_tiers: Vec::new(),
        reply_cached_share: 1.0,
        scheduler: Default::default(),
    }
}

/// Llama-3-8B (bf16) on one H100.
pub fn llama3_8b_h100() -> EngineProfile {
    profile(
        "llama-3-8b-1xh100",
        "derived/estimate: prefill 30 tok/ms between roofline at 45 % MFU (27.7) and Vidur's H100 linear-op profile \
         (49 tok/ms at 4k tokens); 7 ms step floor (Vidur: flat 5.6 ms up to 64 tokens; range 5.5-9); slope \
         0.08 ms/seq at 1k context = 0.04 per seq + 3.9e-5 per context token (128 KiB KV/token over 3.35 TB/s); \
         ~27k blocks x 16 tokens of KV; ~17 ms/token measured at 60-70 concurrent sequences on vLLM 0.15 \
         (inference-sim training data)",
        27_000,
        256,
        8192,
        [7.0, 0.04, 0.000_039, 30.0, 3.0],
    )
}

/// Llama-3-70B (bf16) on four H100s, tensor parallel 4.
pub fn llama3_70b_4xh100() -> EngineProfile {
    profile(
        "llama-3-70b-4xh100-tp4",
        "derived/estimate: Splitwise measured 8.6 tok/ms prefill and TPOT 29.4 ms @bs1, 36.9 @bs32, 52.4 @bs64 \
         (2023 engine, pessimistic); Vidur linear floor 14.5 ms; ~21 ms/token under load on vLLM 0.15; chosen: \
         prefill 12 tok/ms, 20 ms floor, slope 0.25 ms/seq at 1k context = 0.226 per seq + 2.4e-5 per context \
         token (320 KiB KV/token over 4 x 3.35 TB/s); ~29k blocks of KV",
        29_000,
        256,
        8192,
        [20.0, 0.226, 0.000_024, 12.0, 5.0],
    )
}

/// Llama-3.3-70B FP8 on two H100s, tensor parallel 2.
pub fn llama33_70b_fp8_2xh100() -> EngineProfile {
    profile(
        "llama-3.3-70b-fp8-2xh100-tp2",
        "derived: NVIDIA NIM 1.8 table, ITL 18.6 ms @1, 21.8 @5, 38.8 @25, 59.7 @50 concurrent (5k in / 500 out): \
         slope ~0.84 ms/seq at ~5.2k context = 0.71 per seq + 2.4e-5 per context token (fp8 KV 160 KiB/token \
         over 2 x 3.35 TB/s), floor 17.8 ms; prefill 12 tok/ms (estimate); KV capacity not published: ~20k blocks \
         is an estimate (2 x 80 GB minus ~70 GB of fp8 weights)",
        20_000,
        256,
        8192,
        [17.8, 0.71, 0.000_024, 12.0, 5.0],
    )
}

/// A small engine that saturates with few requests, for demos on a laptop.
pub fn laptop_demo() -> EngineProfile {
    profile(
        "laptop-demo",
        "estimate: a toy that keeps saturation visible with small request counts (prefill 10 tok/ms, 20 ms floor, \
         slope 0.3 ms/seq at 1k context, 2k blocks of KV)",
        2_000,
        64,
        2048,
        [20.0, 0.2, 0.000_1, 10.0, 3.0],
    )
}

/// Every preset, in menu order.
pub fn all() -> Vec<EngineProfile> {
    vec![
        llama3_8b_h100(),
        llama3_70b_4xh100(),
        llama33_70b_fp8_2xh100(),
        laptop_demo(),
    ]
}

/// The preset called `name`.
pub fn by_name(name: &str) -> Option<EngineProfile> {
    all().into_iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn presets_are_valid_and_named() {
        for p in super::all() {
            p.validate().unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert!(!p.basis.is_empty());
            assert_eq!(super::by_name(&p.name).as_ref(), Some(&p));
        }
    }
}
