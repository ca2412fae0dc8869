//! Engine profiles for the hardware rows of `PRESETS.md`, each naming its basis.
//!
//! The context term is derived from KV bytes per token over HBM bandwidth (a decoding sequence reads its whole KV
//! cache every step): Llama-3-8B 128 KiB/token on one H100 (3.35 TB/s) ≈ 3.9e-5 ms per context token; Llama-3-70B
//! 320 KiB/token split over 4 GPUs ≈ 2.4e-5 ms. The per-sequence term is the table's slope at ~1k context minus
//! that context share.

use super::profile::{EngineProfile, KvTier, TierEvict, TierWrite};

/// Llama-3-8B (bf16) on one H100.
pub fn llama3_8b_h100() -> EngineProfile {
    EngineProfile {
        basis: "derived/estimate: prefill 30 tok/ms between roofline at 45 % MFU (27.7) and Vidur's H100 linear-op \
             profile (49 tok/ms at 4k tokens); 7 ms step floor (Vidur: flat 5.6 ms up to 64 tokens; range 5.5-9); \
             slope 0.08 ms/seq at 1k context = 0.04 per seq + 3.9e-5 per context token (128 KiB KV/token over \
             3.35 TB/s); ~27k blocks x 16 tokens of KV; ~17 ms/token measured at 60-70 concurrent sequences on vLLM \
             0.15 (inference-sim training data)"
            .into(),
        ..EngineProfile::linear(
            "llama-3-8b-1xh100",
            27_000,
            256,
            8192,
            [7.0, 0.04, 0.000_039, 30.0, 3.0],
        )
    }
}

/// Llama-3-70B (bf16) on four H100s, tensor parallel 4.
pub fn llama3_70b_4xh100() -> EngineProfile {
    EngineProfile {
        basis: "derived/estimate: Splitwise measured 8.6 tok/ms prefill and TPOT 29.4 ms @bs1, 36.9 @bs32, 52.4 @bs64 \
             (2023 engine, pessimistic); Vidur linear floor 14.5 ms; ~21 ms/token under load on vLLM 0.15; chosen: \
             prefill 12 tok/ms, 20 ms floor, slope 0.25 ms/seq at 1k context = 0.226 per seq + 2.4e-5 per context \
             token (320 KiB KV/token over 4 x 3.35 TB/s); ~29k blocks of KV"
            .into(),
        ..EngineProfile::linear(
            "llama-3-70b-4xh100-tp4",
            29_000,
            256,
            8192,
            [20.0, 0.226, 0.000_024, 12.0, 5.0],
        )
    }
}

/// Llama-3.3-70B FP8 on two H100s, tensor parallel 2.
pub fn llama33_70b_fp8_2xh100() -> EngineProfile {
    EngineProfile {
        basis: "derived: NVIDIA NIM 1.8 table, ITL 18.6 ms @1, 21.8 @5, 38.8 @25, 59.7 @50 concurrent (5k in / \
             500 out): slope ~0.84 ms/seq at ~5.2k context = 0.71 per seq + 2.4e-5 per context token (fp8 KV \
             160 KiB/token over 2 x 3.35 TB/s), floor 17.8 ms; prefill 12 tok/ms (estimate); KV capacity not \
             published: ~20k blocks is an estimate (2 x 80 GB minus ~70 GB of fp8 weights)"
            .into(),
        ..EngineProfile::linear(
            "llama-3.3-70b-fp8-2xh100-tp2",
            20_000,
            256,
            8192,
            [17.8, 0.71, 0.000_024, 12.0, 5.0],
        )
    }
}

/// A small engine that saturates with few requests, for demos on a laptop.
pub fn laptop_demo() -> EngineProfile {
    EngineProfile {
        basis: "estimate: a toy that keeps saturation visible with small request counts (prefill 10 tok/ms, 20 ms \
             floor, slope 0.3 ms/seq at 1k context, 2k blocks of KV)"
            .into(),
        ..EngineProfile::linear("laptop-demo", 2_000, 64, 2048, [20.0, 0.2, 0.000_1, 10.0, 3.0])
    }
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

/// A named list of KV tiers (`kv_tiers`) standing for one serving stack's offloading, with its basis.
#[derive(Debug, Clone, PartialEq)]
pub struct TierPreset {
    pub name: &'static str,
    pub basis: &'static str,
    pub tiers: Vec<KvTier>,
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn bw_tier(name: &str, bytes: f64, bytes_per_s: f64, kv_bytes_per_token: f64, write: TierWrite) -> KvTier {
    KvTier {
        name: name.to_string(),
        capacity_tokens: (bytes / kv_bytes_per_token) as u64,
        restore_tokens_per_ms: None,
        bytes_per_s: Some(bytes_per_s),
        kv_bytes_per_token: Some(kv_bytes_per_token),
        write,
        evict: TierEvict::Lru,
    }
}

/// The tier presets for a model of `kv_bytes_per_token` (Llama-3-8B in bf16: 131,072) whose GPU KV cache holds
/// `gpu_kv_tokens`. Capacities and speeds are estimates (each basis says which); where a stack's policy is not a
/// plain LRU written on eviction or write-through, the basis says what is modelled.
pub fn tier_presets(kv_bytes_per_token: f64, gpu_kv_tokens: u64) -> Vec<TierPreset> {
    let k = kv_bytes_per_token;
    let pcie = 25e9;
    vec![
        TierPreset {
            name: "vllm-cpu-offload",
            basis: "vLLM's native KV offloading (--kv-offloading-backend native --kv-offloading-size 64): blocks are \
                    copied to a pinned CPU pool as they are produced (write: always), LRU; 64 GiB; restore over \
                    PCIe at 25 GB/s (estimate: pinned host-to-device copies on PCIe 4.0/5.0 x16)",
            tiers: vec![bw_tier("cpu", 64.0 * GIB, pcie, k, TierWrite::Always)],
        },
        TierPreset {
            name: "lmcache-cpu-disk",
            basis: "LMCache with a local CPU backend and a local disk backend: 64 GiB of CPU memory written as KV \
                    is stored (write: always), LRU, at 25 GB/s (estimate); 1 TiB of local NVMe taking what the CPU \
                    tier drops (modelled as on_evict), at 5 GB/s (estimate: one PCIe 4.0 NVMe drive's reads)",
            tiers: vec![
                bw_tier("cpu", 64.0 * GIB, pcie, k, TierWrite::Always),
                bw_tier("disk", 1024.0 * GIB, 5e9, k, TierWrite::OnEvict),
            ],
        },
        TierPreset {
            name: "sglang-hicache",
            basis: "SGLang HiCache (--enable-hierarchical-cache --hicache-ratio 2 --hicache-write-policy \
                    write_through): an L2 host pool twice the GPU's KV pool written through (write: always), LRU, \
                    at 25 GB/s (estimate); an L3 store (Mooncake, 3FS) of 4 TiB taking what L2 drops (modelled as \
                    on_evict) at 10 GB/s (estimate: RDMA at about 100 Gb/s)",
            tiers: vec![
                bw_tier("host", 2.0 * gpu_kv_tokens as f64 * k, pcie, k, TierWrite::Always),
                bw_tier("remote", 4096.0 * GIB, 10e9, k, TierWrite::OnEvict),
            ],
        },
        TierPreset {
            name: "llama-cpp-cache-ram",
            basis: "llama-server --cache-ram 8192 (its default, MiB): a slot's prompt cache is saved to RAM when \
                    the slot takes another prompt (write: on_evict), oldest dropped first; restore at 25 GB/s \
                    (estimate, a host-to-device copy; a CPU-only build copies within RAM, faster)",
            tiers: vec![bw_tier("ram", 8.0 * GIB, pcie, k, TierWrite::OnEvict)],
        },
    ]
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

    #[test]
    fn tier_presets_are_valid_faster_first() {
        for mut p in super::all() {
            for t in super::tier_presets(131_072.0, p.num_kv_blocks * u64::from(p.block_size)) {
                assert!(!t.basis.is_empty() && !t.tiers.is_empty());
                p.kv_tiers = t.tiers;
                p.validate()
                    .unwrap_or_else(|e| panic!("{} with {}: {e}", p.name, t.name));
            }
        }
        let t = super::tier_presets(131_072.0, 432_000);
        assert_eq!(t[0].tiers[0].capacity_tokens, 524_288);
        assert_eq!(t[3].tiers[0].capacity_tokens, 65_536);
        assert_eq!(t[2].tiers[0].capacity_tokens, 864_000);
    }
}
