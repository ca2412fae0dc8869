//! The prefix-cache tiers below the GPU's, from sessions that came back after their KV was evicted (the probe's
//! `returns` phase, or any sessions run given with `--from`). See docs/calibration.md, "KV tiers".

use serde::{Deserialize, Serialize};

use crate::metrics::median;
use crate::record::RequestRecord;

/// A return counts as restored when the server reported at least this share of its previous prompt cached.
pub const RESTORED_SHARE: f64 = 0.8;
/// ... and as recomputed below this share.
pub const RECOMPUTED_SHARE: f64 = 0.5;
/// Least restored returns, alone on the server, for a measured restore speed.
pub const MIN_RATE_RETURNS: usize = 3;

/// A session step that came back after what was sent since its previous step outgrew the GPU's KV.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierReturn {
    /// Index of the record among all records given.
    pub index: usize,
    pub session: u64,
    /// The previous step's prompt tokens (what a tier could hold).
    pub prefix_tokens: u64,
    pub cached_tokens: u64,
    /// Tokens of distinct prompts sent from the previous step (its own included) up to this one: what the
    /// caches held newer than the session's prefix.
    pub footprint_tokens: u64,
    /// `restored`, `recomputed` or `partial`.
    pub outcome: String,
    /// With a restore measured: its TTFT and what the fit predicts for the same prompt served from GPU KV, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_predicted_ms: Option<f64>,
}

/// `fit.json`'s `tiers`: how the tiers below the GPU's were found.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TierFit {
    /// `probe` (returns measured), `flags` (given), or `none` (no tier found, or none could be told).
    pub source: String,
    /// The tier's capacity written to the profile, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_tokens: Option<u64>,
    /// The capacity is a lower bound: every return checked was restored.
    #[serde(default)]
    pub capacity_lower_bound: bool,
    /// The largest footprint that still restored and the smallest that did not, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_up_to_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_from_tokens: Option<u64>,
    /// The GPU's KV, tokens, taken off the bracket (`num_kv_blocks · block_size`; on a slot engine what its slots
    /// hold of the parked sessions: slots × the returns' median prefix).
    #[serde(default)]
    pub gpu_kv_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_tokens_per_ms: Option<f64>,
    /// The speed is a lower bound: restores took no measurable time beyond a warm hit.
    #[serde(default)]
    pub rate_lower_bound: bool,
    pub returns: Vec<TierReturn>,
    pub notes: Vec<String>,
    /// How the written tier's capacity was found: `probe` (returns measured), `server report` (what the server
    /// says about its tiers) or `flag` (given, or a flag's default); absent when no tier is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_found_by: Option<String>,
    /// ... and its restore speed, the same three ways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_found_by: Option<String>,
    /// What the server reports about tiers below the GPU's (llama.cpp's `/props`, vLLM's `cache_config_info`,
    /// SGLang's HiCache gauges), or that it reports none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_report: Vec<String>,
}

/// What the GPU holds: its KV tokens, and for slot engines (llama.cpp) how many other sessions reuse every slot.
#[derive(Debug, Clone, Copy)]
pub struct Gpu {
    pub kv_tokens: u64,
    pub slots: Option<u64>,
}

/// The returns among `records` (step ≥ 1 of a session whose previous step was followed by more distinct prompt
/// tokens than the GPU holds, or, with slots, by requests of at least as many other sessions as slots).
pub fn find_returns(records: &[RequestRecord], gpu: Gpu) -> Vec<TierReturn> {
    let mut order: Vec<usize> = (0..records.len())
        .filter(|&i| {
            let r = &records[i];
            r.ok && r.prompt_tokens.is_some() && r.cached_tokens.is_some() && r.check().is_ok()
        })
        .collect();
    crate::order::sort_by_f64_key(&mut order, |&i| records[i].t_submit);
    let mut out = Vec::new();
    for (pos, &i) in order.iter().enumerate() {
        let r = &records[i];
        if r.step == 0 {
            continue;
        }
        // The session's previous step: the latest earlier record of the same session with a lower step.
        let Some(qpos) = order[..pos]
            .iter()
            .rposition(|&j| records[j].session == r.session && records[j].step < r.step)
        else {
            continue;
        };
        let q = &records[order[qpos]];
        let prefix = q.prompt_tokens.unwrap_or(0);
        if prefix == 0 {
            continue;
        }
        // Distinct sessions' latest prompts sent after the previous step (its own counted as the prefix).
        let mut latest: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for &j in &order[qpos + 1..pos] {
            let o = &records[j];
            if o.session != r.session {
                latest.insert(o.session, o.prompt_tokens.unwrap_or(0));
            }
        }
        let others: u64 = latest.values().sum();
        let evicted = others >= gpu.kv_tokens || gpu.slots.is_some_and(|s| latest.len() as u64 >= s);
        if !evicted {
            continue;
        }
        let cached = r.cached_tokens.unwrap_or(0);
        let share = cached as f64 / prefix as f64;
        let outcome = if share >= RESTORED_SHARE {
            "restored"
        } else if share < RECOMPUTED_SHARE {
            "recomputed"
        } else {
            "partial"
        };
        out.push(TierReturn {
            index: i,
            session: r.session,
            prefix_tokens: prefix,
            cached_tokens: cached,
            footprint_tokens: prefix + others,
            outcome: outcome.into(),
            ttft_ms: None,
            warm_predicted_ms: None,
        });
    }
    out
}

/// The tier from the returns: capacity from the footprints that restored and did not, less the GPU's KV; speed
/// from the restored returns' TTFT beyond a warm hit's (`warm` predicts it from the fitted prefill; `None` where
/// the return was not alone on the server); where the median excess is within two standard errors of its own
/// (from the excesses' MAD), the restore is too fast to time and the speed written is a lower bound: the median
/// restore over that bound. `block_size` rounds the capacity down.
pub fn fit_tier(
    mut returns: Vec<TierReturn>,
    records: &[RequestRecord],
    gpu: Gpu,
    block_size: u32,
    warm: impl Fn(usize) -> Option<f64>,
) -> TierFit {
    // What the GPU holds of the parked sessions: its KV, or on a slot engine the slots' last prompts (a slot keeps
    // only its last one, so the rest of its context holds nothing of the others).
    let held = match gpu.slots {
        Some(s) if !returns.is_empty() => {
            let mut prefixes: Vec<f64> = returns.iter().map(|r| r.prefix_tokens as f64).collect();
            ((s as f64 * median(&mut prefixes)) as u64).min(gpu.kv_tokens)
        }
        _ => gpu.kv_tokens,
    };
    let gpu = Gpu { kv_tokens: held, ..gpu };
    let mut t = TierFit {
        source: "none".into(),
        gpu_kv_tokens: gpu.kv_tokens,
        ..TierFit::default()
    };
    if returns.is_empty() {
        t.notes.push(
            "no session came back after its KV was evicted from the GPU (a sessions run with more distinct prompt \
             tokens between a session's steps than the GPU holds shows it; the probe's returns phase sends such)"
                .into(),
        );
        t.returns = returns;
        return t;
    }
    let restored = |r: &TierReturn| r.outcome == "restored";
    let lo = returns.iter().filter(|r| restored(r)).map(|r| r.footprint_tokens).max();
    let Some(lo) = lo else {
        t.notes.push(format!(
            "none of {} returns after eviction was restored: no tier below the GPU's",
            returns.len()
        ));
        t.returns = returns;
        return t;
    };
    let hi = returns
        .iter()
        .filter(|r| r.outcome == "recomputed" && r.footprint_tokens > lo)
        .map(|r| r.footprint_tokens)
        .min();
    let total = match hi {
        Some(h) => (lo + h) / 2,
        None => lo,
    };
    t.restored_up_to_tokens = Some(lo);
    t.recomputed_from_tokens = hi;
    t.capacity_lower_bound = hi.is_none();
    let bs = u64::from(block_size.max(1));
    let cap = total.saturating_sub(gpu.kv_tokens) / bs * bs;
    if cap < bs {
        t.notes.push(format!(
            "returns restored up to {lo} tokens parked, within the GPU's {} tokens of KV: no tier below it",
            gpu.kv_tokens
        ));
        t.returns = returns;
        return t;
    }
    t.capacity_tokens = Some(cap);
    t.notes.push(match hi {
        Some(h) => format!(
            "capacity: returns restored with up to {lo} tokens parked and were recomputed from {h}: midpoint less \
             the GPU's {} tokens of KV",
            gpu.kv_tokens
        ),
        None => format!(
            "capacity: at least {cap} tokens (every return was restored, up to {lo} tokens parked, less the GPU's {} \
             tokens of KV): the tier may be larger (a longer --budget parks more; --host-cache-tokens sets it)",
            gpu.kv_tokens
        ),
    });
    // Speed: the restore's time beyond a warm hit of the same prompt.
    let mut rates = Vec::new();
    let mut excess_all = Vec::new();
    let mut tokens = Vec::new();
    for r in returns.iter_mut().filter(|r| r.outcome == "restored") {
        let Some(pred) = warm(r.index) else { continue };
        let rec = &records[r.index];
        let Some(ttft) = rec.ttft_s.map(|s| s * 1000.0) else {
            continue;
        };
        r.ttft_ms = Some(ttft);
        r.warm_predicted_ms = Some(pred);
        let excess = ttft - pred;
        excess_all.push(excess);
        tokens.push(r.cached_tokens as f64);
        if excess > 0.0 {
            rates.push(r.cached_tokens as f64 / excess);
        }
    }
    t.source = "probe".into();
    if excess_all.len() < MIN_RATE_RETURNS {
        t.notes.push(format!(
            "restore speed: {} restored returns alone on the server (need {MIN_RATE_RETURNS}): not measured; \
             --host-restore-tok-per-ms sets it",
            excess_all.len()
        ));
        t.returns = returns;
        return t;
    }
    let ex = median(&mut excess_all.clone());
    // The median's standard error (1.253 σ / √n, σ from the MAD): restores are timed only where the median excess
    // stands out of it.
    let mut dev: Vec<f64> = excess_all.iter().map(|e| (e - ex).abs()).collect();
    let se = 1.253 * 1.4826 * median(&mut dev) / (excess_all.len() as f64).sqrt();
    let floor = (ex.max(0.0) + 2.0 * se).max(0.5);
    if ex <= 2.0 * se {
        let rate = median(&mut tokens) / floor;
        t.restore_tokens_per_ms = Some(rate);
        t.rate_lower_bound = true;
        t.notes.push(format!(
            "restore speed: restores took {ex:.2} ms (median of {}) beyond a warm hit, within two standard errors \
             ({:.2} ms): at most {floor:.2} ms for {:.0} tokens, at least {rate:.0} tokens/ms written",
            excess_all.len(),
            2.0 * se,
            median(&mut tokens.clone())
        ));
    } else {
        // The median restore over the median excess of all of them (restores on a busy server can split into a
        // fast and a slow mode; the rates of the positive excesses alone would take only the slow one).
        let rate = median(&mut tokens.clone()) / ex;
        t.restore_tokens_per_ms = Some(rate);
        t.notes.push(format!(
            "restore speed: the median restore ({:.0} tokens) over the median TTFT beyond a warm hit's of {} restores \
             ({ex:.2} ms; {} of them beyond it)",
            median(&mut tokens.clone()),
            excess_all.len(),
            rates.len()
        ));
    }
    t.returns = returns;
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of `session` (step `step`) alone on the server at `t` s: `prompt` tokens, `cached` of them cached,
    /// first token after `ttft_ms`.
    fn rec(session: u64, step: u32, t: f64, prompt: u64, cached: u64, ttft_ms: f64) -> RequestRecord {
        serde_json::from_value(serde_json::json!({
            "schema": crate::record::RECORD_SCHEMA_VERSION, "session": session, "inst": 0, "step": step,
            "steps_asked": 2, "base_asked": prompt, "ok": true, "t_submit": t, "ttft_s": ttft_ms / 1000.0,
            "wall_s": ttft_ms / 1000.0 + 0.01, "gen_tokens": 2, "asked_tokens": 2, "prompt_tokens": prompt,
            "cached_tokens": cached, "sse_frames": 2, "prompt_chars": 0, "usage_source": "final_frame"}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// On a slot engine (llama.cpp, 4 slots of 8,192 tokens) a session is back after 4 others, whatever their size;
    /// the GPU's part of the footprint is what the slots hold (4 prompts), not their whole context.
    #[test]
    fn a_slot_engine_holds_its_slots_last_prompts() {
        let mut records = Vec::new();
        let mut t = 0.0;
        let (mut parked, mut back) = (0u64, 0u64);
        while parked < 12 {
            records.push(rec(parked, 0, t, 1024, 0, 150.0));
            t += 1.0;
            parked += 1;
            if parked >= 5 && back + 5 <= parked {
                // Restored: all but the last token of its prompt cached, 2 ms beyond a warm hit.
                records.push(rec(back, 1, t, 1088, 1023, 32.0));
                t += 1.0;
                back += 1;
            }
        }
        let gpu = Gpu {
            kv_tokens: 32_768,
            slots: Some(4),
        };
        let returns = find_returns(&records, gpu);
        assert_eq!(returns.len(), 8);
        assert!(returns.iter().all(|r| r.outcome == "restored"), "{returns:?}");
        // Session 0's return follows 4 other sessions: 5 × 1,024 tokens parked.
        assert_eq!(returns[0].footprint_tokens, 5 * 1024);
        let n = records.len();
        let fit = fit_tier(returns, &records, gpu, 16, |i| (i < n).then_some(30.0));
        assert_eq!(fit.gpu_kv_tokens, 4 * 1024);
        let lo = fit.restored_up_to_tokens.unwrap_or(0);
        assert_eq!(fit.capacity_tokens, Some((lo - 4 * 1024) / 16 * 16), "{fit:?}");
        assert!(fit.capacity_lower_bound && lo > 5 * 1024);
        // 1,023 tokens over 2 ms.
        let rate = fit.restore_tokens_per_ms.unwrap_or(0.0);
        assert!(
            (rate - 511.5).abs() < 1e-6 && !fit.rate_lower_bound,
            "{rate}: {:?}",
            fit.notes
        );
        // Restores that take no time beyond a warm hit: a lower bound, the median restore over 0.5 ms.
        let fast = fit_tier(find_returns(&records, gpu), &records, gpu, 16, |_| Some(32.0));
        assert!(fast.rate_lower_bound && (fast.restore_tokens_per_ms.unwrap_or(0.0) - 2046.0).abs() < 1e-6);
        // Without slots, 32,768 tokens of KV would hold every session parked here: no tier below it.
        let kv = Gpu {
            kv_tokens: 32_768,
            slots: None,
        };
        let none = fit_tier(find_returns(&records, kv), &records, kv, 16, |_| Some(30.0));
        assert_eq!((none.capacity_tokens, none.gpu_kv_tokens), (None, 32_768));
    }
}
