//! Retention across tool calls on the page: the curve of the summary's `retention` bands, and the what-if "how
//! much host memory keeps 95 % of prefixes alive across a 60 s tool call" ([`search`], run in the worker as a job
//! loaded on demand, [`crate::worker::wire::OnDemand::HostTier`]).
//!
//! The what-if's definition (docs/simulator.md, "Retention what-if"): the *band* is the summary's retention band
//! that holds the think time asked for (60 s: the 60–120 s band, `shared::metrics::RETENTION_EDGES_S`), and its
//! *cached share* is that band's (Σ cached / Σ prompt tokens of the steps in it). The *host tier* is the profile's
//! first `kv_tiers` entry (a `host_cache` counts as that one tier), its capacity searched; a profile without tiers
//! gets one added: `host`, written on eviction, LRU, restored at 25 GB/s (a PCIe host-to-device copy, the tier
//! presets' estimate) with the deployment's KV bytes per token, or at 190.7 tokens/ms (25 GB/s for Llama-3-8B's
//! 131,072 B per token) for a profile given by coefficients. The search doubles the capacity, then bisects down
//! to 1 % (or a block); the answer is the least capacity simulated whose band reached the share. A tier that
//! holds every prompt token of the run plus the GPU's own cache ("a huge tier": no prefix can be evicted from it)
//! is the most tried: when even it misses, the share is not reachable with a host tier (the misses are new
//! content or the GPU's own, not eviction).

use serde::{Deserialize, Serialize};
use shared::engine::profile::KvTier;
use shared::engine::{EngineScenario, SimOptions};
use shared::metrics::{RETENTION_EDGES_S, Retention};
use shared::scenario::Scenario;

/// PCIe host-to-device restore bandwidth of an added tier, bytes per second (the tier presets' estimate).
pub const HOST_BYTES_PER_S: f64 = 25e9;
/// KV bytes per token assumed for an added tier's speed when the profile has no deployment (Llama-3-8B, bf16).
pub const ASSUMED_KV_BYTES_PER_TOKEN: f64 = 131_072.0;

/// One point of the curve: x the band's middle think time (s; the open last band at its lower edge), y its cached
/// share. Bands without a completed step have no share and no point.
pub fn curve(bands: &[Retention]) -> Vec<(f64, f64)> {
    bands
        .iter()
        .filter_map(|b| {
            let last = b.think_s_min >= RETENTION_EDGES_S[RETENTION_EDGES_S.len() - 1];
            let x = if last {
                b.think_s_min
            } else {
                (b.think_s_min + b.think_s_max) / 2.0
            };
            b.cached_share.map(|y| (x, y))
        })
        .collect()
}

/// The lower edge of the band that holds `think_s` (`None` for a negative or non-finite time).
pub fn band_edge(think_s: f64) -> Option<f64> {
    if !(think_s.is_finite() && think_s >= 0.0) {
        return None;
    }
    RETENTION_EDGES_S.iter().rev().find(|&&e| e <= think_s).copied()
}

/// The band of `bands` that holds `think_s`, if any step fell in it.
pub fn band_at(bands: &[Retention], think_s: f64) -> Option<&Retention> {
    let edge = band_edge(think_s)?;
    bands.iter().find(|b| b.think_s_min == edge)
}

/// `think_s_min–think_s_max s` (`3600+ s` for the open last band).
pub fn band_label(min: f64, max: f64) -> String {
    if min >= RETENTION_EDGES_S[RETENTION_EDGES_S.len() - 1] {
        format!("{min}+ s")
    } else {
        format!("{min}–{max} s")
    }
}

/// One capacity tried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub capacity_tokens: u64,
    /// The band's cached share there (`None`: no step of the band completed).
    pub share: Option<f64>,
}

/// The what-if's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTierAnswer {
    pub think_s: f64,
    pub target: f64,
    /// The band searched (`think_s_min`, `think_s_max` in the scenario as it is).
    pub band_min_s: f64,
    pub band_max_s: f64,
    /// Steps in that band.
    pub steps: u64,
    /// The band's share as the scenario is, and its host tier's capacity then (0: none).
    pub share_now: Option<f64>,
    pub capacity_now: u64,
    /// The tier's name, and whether the search added it (else it resized the profile's first tier).
    pub tier: String,
    pub added: bool,
    /// KV bytes per token (the deployment's, or the tier's own); `None`: the answer is in tokens only.
    pub kv_bytes_per_token: Option<f64>,
    /// The huge tier's capacity (every prompt token of the run plus the GPU's cache) and its share.
    pub ceiling_tokens: u64,
    pub ceiling_share: Option<f64>,
    /// The least capacity found whose share reached the target (`capacity_now` when it already does); `None`:
    /// not reachable.
    pub answer_tokens: Option<u64>,
    /// In the order run.
    pub probes: Vec<Probe>,
}

impl HostTierAnswer {
    /// The answer in bytes, where the KV bytes per token are known.
    pub fn answer_bytes(&self) -> Option<f64> {
        Some(self.answer_tokens? as f64 * self.kv_bytes_per_token?)
    }
}

/// The scenario with its host tier at `capacity_tokens` (see the module docs: the first tier resized, or one
/// added). 0 removes an added tier (the scenario as it was).
pub fn with_host_tier(e: &EngineScenario, capacity_tokens: u64) -> EngineScenario {
    let mut e = e.clone();
    let p = &mut e.profile;
    if p.kv_tiers.is_empty()
        && let Some(h) = p.host_cache.take()
    {
        p.kv_tiers = vec![KvTier::on_evict("host", h.capacity_tokens, h.restore_tokens_per_ms)];
    }
    let kv_bytes = p.roofline.as_ref().map(|r| r.kv_bytes_per_token);
    match p.kv_tiers.first_mut() {
        Some(t) => t.capacity_tokens = capacity_tokens,
        None if capacity_tokens > 0 => p.kv_tiers.push(match kv_bytes {
            Some(k) => KvTier {
                bytes_per_s: Some(HOST_BYTES_PER_S),
                kv_bytes_per_token: Some(k),
                restore_tokens_per_ms: None,
                ..KvTier::on_evict("host", capacity_tokens, 0.0)
            },
            None => KvTier::on_evict(
                "host",
                capacity_tokens,
                HOST_BYTES_PER_S / ASSUMED_KV_BYTES_PER_TOKEN / 1000.0,
            ),
        }),
        None => {}
    }
    e
}

fn round_up(tokens: u64, block: u64) -> u64 {
    tokens.div_ceil(block) * block
}

/// Search the host tier's capacity that brings the cached share of the band holding `think_s` to `target` (see
/// the module docs). Errors (never a panic) name what is wrong: the seed model, prefix caching off, a time or
/// share out of range, no step in the band.
pub fn search(sc: &Scenario, think_s: f64, target: f64) -> Result<HostTierAnswer, String> {
    let Scenario::Engine(e) = sc else {
        return Err("the host-tier what-if needs the engine model (the seed model has no prefix cache)".to_string());
    };
    if !(think_s.is_finite() && think_s >= 0.0) {
        return Err(format!("think time must be a number of seconds >= 0 (got {think_s})"));
    }
    if !(target.is_finite() && target > 0.0 && target <= 1.0) {
        return Err(format!(
            "cached share must be above 0 % and at most 100 % (got {} %)",
            target * 100.0
        ));
    }
    if !e.profile.enable_prefix_caching {
        return Err("profile.enable_prefix_caching is off: no tier keeps a prefix".to_string());
    }
    let mut base = e.clone();
    base.counterfactuals = false;
    let run = |cap: Option<u64>| -> Result<(Vec<Retention>, u64), String> {
        let s = match cap {
            None => base.clone(),
            Some(c) => with_host_tier(&base, c),
        };
        let r = shared::engine::simulate_with(&s, SimOptions::SUMMARY).map_err(|err| err.to_string())?;
        Ok((r.summary.retention, r.summary.total_input_tokens))
    };
    let (bands, prompt_tokens) = run(None)?;
    let edge = band_edge(think_s).unwrap_or(0.0);
    let Some(band) = band_at(&bands, think_s).cloned() else {
        return Err(format!(
            "no session step comes after a think time in the band holding {think_s} s ({edge} s and up to the next \
             edge): the what-if needs steps after tool calls that long (bands with steps: {})",
            if bands.is_empty() {
                "none".to_string()
            } else {
                shared::metrics::retention_text(&bands)
            }
        ));
    };
    let tiers = e.profile.tiers();
    let first = tiers.first();
    let block = u64::from(e.profile.block_size.max(1));
    let kv_bytes_per_token = e
        .profile
        .roofline
        .as_ref()
        .map(|r| r.kv_bytes_per_token)
        .or_else(|| first.and_then(|t| t.kv_bytes_per_token));
    let capacity_now = first.map_or(0, |t| t.capacity_tokens);
    let gpu_tokens = e.profile.num_kv_blocks * block;
    let ceiling_tokens = round_up(prompt_tokens + gpu_tokens, block).max(capacity_now);
    let share_of = |bands: &[Retention]| band_at(bands, think_s).and_then(|b| b.cached_share);
    let meets = |s: Option<f64>| s.is_some_and(|s| s >= target);
    let mut out = HostTierAnswer {
        think_s,
        target,
        band_min_s: band.think_s_min,
        band_max_s: band.think_s_max,
        steps: band.steps,
        share_now: band.cached_share,
        capacity_now,
        tier: first.map_or_else(|| "host".to_string(), |t| t.name.clone()),
        added: first.is_none(),
        kv_bytes_per_token,
        ceiling_tokens,
        ceiling_share: None,
        answer_tokens: None,
        probes: Vec::new(),
    };
    if meets(band.cached_share) {
        out.answer_tokens = Some(capacity_now);
        out.ceiling_share = band.cached_share;
        return Ok(out);
    }
    let probe = |out: &mut HostTierAnswer, cap: u64| -> Result<bool, String> {
        let share = share_of(&run(Some(cap))?.0);
        out.probes.push(Probe {
            capacity_tokens: cap,
            share,
        });
        Ok(meets(share))
    };
    // Doubling from the GPU's own cache (or the tier as it is), up to the huge tier.
    let mut lo = capacity_now;
    let mut hi = round_up(capacity_now.max(gpu_tokens).max(block), block);
    loop {
        if hi >= ceiling_tokens {
            hi = ceiling_tokens;
            let met = probe(&mut out, hi)?;
            out.ceiling_share = out.probes.last().and_then(|p| p.share);
            if !met {
                return Ok(out);
            }
            break;
        }
        if probe(&mut out, hi)? {
            break;
        }
        lo = hi;
        hi *= 2;
    }
    // Bisection down to 1 % of the answer (or one block).
    while hi - lo > block.max(hi / 100) {
        let mid = round_up(lo + (hi - lo) / 2, block);
        if mid >= hi || mid <= lo {
            break;
        }
        if probe(&mut out, mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    out.answer_tokens = Some(hi);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// Twelve agent sessions on a GPU cache far smaller than their contexts, each step after a 70 s tool call
    /// (the 60–120 s band): without a host tier their prefixes are gone when they come back.
    fn pressured() -> Scenario {
        Scenario::from_value(serde_json::json!({
            "model": "engine",
            "workload": {"kind": "sessions", "sessions": 12, "steps": 4, "base_tokens": 6000, "gen_tokens": 40,
                         "tool_tokens": 300, "think_s": 70.0, "spread": 0.0, "stagger_s": 1.0},
            "profile": {"name": "small", "basis": "test", "block_size": 16, "num_kv_blocks": 1000,
                        "max_num_seqs": 8, "max_num_batched_tokens": 8192, "step_fixed_ms": 10.0,
                        "per_seq_ms": 0.2, "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 20.0,
                        "prefill_fixed_ms": 2.0},
            "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 5, "counterfactuals": false
        }))
        .expect("a valid scenario")
    }

    fn band_share(sc: &EngineScenario, think_s: f64) -> Option<f64> {
        let r = shared::engine::simulate(sc).expect("runs");
        band_at(&r.summary.retention, think_s).and_then(|b| b.cached_share)
    }

    #[test]
    fn the_curve_has_a_point_per_band_with_a_share() {
        let bands = vec![
            Retention {
                think_s_min: 0.0,
                think_s_max: 1.0,
                steps: 3,
                cached_share: Some(0.9),
            },
            Retention {
                think_s_min: 60.0,
                think_s_max: 120.0,
                steps: 2,
                cached_share: None,
            },
            Retention {
                think_s_min: 3600.0,
                think_s_max: 4000.0,
                steps: 1,
                cached_share: Some(0.1),
            },
        ];
        assert_eq!(curve(&bands), vec![(0.5, 0.9), (3600.0, 0.1)]);
        assert_eq!(band_edge(60.0), Some(60.0));
        assert_eq!(band_edge(59.9), Some(30.0));
        assert_eq!(band_edge(1e9), Some(3600.0));
        assert_eq!(band_edge(-1.0), None);
        assert_eq!(band_at(&bands, 90.0).map(|b| b.steps), Some(2));
        assert_eq!(band_label(60.0, 120.0), "60–120 s");
        assert_eq!(band_label(3600.0, 4000.0), "3600+ s");
    }

    #[test]
    fn the_answer_applied_brings_the_band_to_the_target_and_a_smaller_tier_does_not() {
        let sc = pressured();
        let Scenario::Engine(e) = &sc else { panic!("engine") };
        let before = band_share(e, 60.0).expect("the band has steps");
        assert!(before < 0.95, "without a host tier the prefixes are evicted: {before}");
        let w = search(&sc, 60.0, 0.95).expect("searches");
        assert_eq!(
            (w.band_min_s, w.band_max_s, w.tier.as_str(), w.added),
            (60.0, 120.0, "host", true)
        );
        assert_eq!(w.capacity_now, 0);
        let cap = w.answer_tokens.expect("reachable");
        assert!(cap > 0 && cap.is_multiple_of(16), "{cap}");
        let applied = with_host_tier(e, cap);
        applied.validate().expect("a valid profile");
        assert!(band_share(&applied, 60.0).expect("a share") >= 0.95);
        // Just below the answer (the bisection's last failing probe) the share is short of it.
        let below = w
            .probes
            .iter()
            .filter(|p| p.capacity_tokens < cap)
            .map(|p| p.capacity_tokens)
            .max()
            .expect("a smaller probe");
        assert!(band_share(&with_host_tier(e, below), 60.0).is_none_or(|s| s < 0.95));
        assert!(cap - below <= 16.max(cap / 100), "{below}..{cap}");
        // No deployment: the answer is in tokens only.
        assert_eq!(w.answer_bytes(), None);
        // With the answer's tier in the profile the target is met as it is: nothing more to search.
        let again = search(&Scenario::Engine(applied), 60.0, 0.95).expect("searches");
        assert_eq!(
            (again.answer_tokens, again.capacity_now, again.added),
            (Some(cap), cap, false)
        );
        assert!(again.probes.is_empty());
    }

    #[test]
    fn an_unreachable_share_says_so_and_bad_input_is_an_error() {
        let sc = pressured();
        // Each step adds tool output no cache holds beforehand: 100 % is out of reach even with a huge tier.
        let w = search(&sc, 60.0, 1.0).expect("searches");
        assert_eq!(w.answer_tokens, None);
        assert!(w.ceiling_share.is_some_and(|s| s < 1.0), "{:?}", w.ceiling_share);
        assert_eq!(w.probes.last().map(|p| p.capacity_tokens), Some(w.ceiling_tokens));
        for (t, s, want) in [
            (4000.0, 0.95, "no session step"),
            (-1.0, 0.95, "think time"),
            (60.0, 0.0, "cached share"),
            (60.0, 1.5, "cached share"),
        ] {
            let e = search(&sc, t, s).expect_err("an error");
            assert!(e.contains(want), "{t} {s}: {e}");
        }
        let seed = search(&shared::presets::default_scenario(), 60.0, 0.95).expect_err("the seed model");
        assert!(seed.contains("engine model"), "{seed}");
        let mut v = sc.to_value();
        v["profile"]["enable_prefix_caching"] = serde_json::json!(false);
        let off = search(&Scenario::from_value(v).expect("valid"), 60.0, 0.95).expect_err("no caching");
        assert!(off.contains("enable_prefix_caching"), "{off}");
    }

    #[test]
    fn a_deployment_answers_in_bytes_too_and_an_existing_tier_is_resized() {
        let mut v = pressured().to_value();
        v.as_object_mut().expect("an object").remove("profile");
        v["deployment"] = serde_json::json!({"model": "llama-3.1-8b", "gpu": "l40s", "tp": 1, "max_num_seqs": 8,
                                             "gpu_memory_utilization": 0.5});
        let sc = Scenario::from_value(v).expect("a valid deployment scenario");
        let Scenario::Engine(e) = &sc else { panic!("engine") };
        let k = e.profile.roofline.as_ref().expect("a roofline").kv_bytes_per_token;
        let applied = with_host_tier(e, 1 << 20);
        let t = &applied.profile.kv_tiers[0];
        assert_eq!((t.bytes_per_s, t.kv_bytes_per_token), (Some(HOST_BYTES_PER_S), Some(k)));
        applied.validate().expect("valid");
        let mut with_tier = e.clone();
        with_tier.profile.host_cache = Some(shared::engine::profile::HostCache {
            capacity_tokens: 4096,
            restore_tokens_per_ms: 50.0,
        });
        let resized = with_host_tier(&with_tier, 8192);
        assert_eq!(resized.profile.kv_tiers.len(), 1);
        assert_eq!(resized.profile.kv_tiers[0].capacity_tokens, 8192);
        assert_eq!(resized.profile.kv_tiers[0].restore_tokens_per_ms, Some(50.0));
        assert!(resized.profile.host_cache.is_none());
        let w = search(&sc, 60.0, 0.95).expect("searches");
        if let Some(cap) = w.answer_tokens {
            assert_eq!(w.answer_bytes(), Some(cap as f64 * k));
        }
        assert_eq!(w.kv_bytes_per_token, Some(k));
    }
}
