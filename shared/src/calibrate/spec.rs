//! Speculative decoding from a live run's records ([`fit_speculative`]): the acceptance from the drafted and accepted
//! tokens the server reported per request (llama.cpp's `timings`, or the simulator's counts), and the draft's cost
//! from the decode steps of requests that ran alone, against the profile of the same server without speculation.
//!
//! - Acceptance: the share `s = Σ accepted / Σ drafted`; for `k` draft tokens the one rate `a` with
//!   `(a + a² + … + a^k) / k = s` ([`crate::engine::spec::rate_for_share`]).
//! - Steps: a decode step emits one token plus the drafts it accepted, so a request's decode steps number
//!   `gen_tokens − 1 − accepted` whatever the server streams per frame, and it drafted `drafted / steps` tokens
//!   per step on average.
//! - Draft cost: a lone request's mean decode step is `(wall − ttft) / steps`; the base profile prices the same
//!   step without the draft (one sequence at the request's mean context, verifying `1 + drafted / steps`
//!   positions, as the engine does), and the rest over the drafted tokens per step is the draft's cost per token.
//!   The fitted value is the median over the lone requests, with its spread.
//! - `k` when not given: the largest `⌈drafted / steps⌉` over the records (a request drafts `k` per step except
//!   near its end).
//! - Spread ([`fit_spread`]): each request's own share, as the one rate that gives it, in log-odds; their robust
//!   spread less what counting a request's few drafted tokens adds is `acceptance_spread`, and the acceptance is
//!   then centered so that the spread requests pool to the share counted
//!   ([`crate::engine::spec::Speculative::centered_on`]).

use serde::{Deserialize, Serialize};

use crate::deploy::roofline::StepShape;
use crate::engine::EngineProfile;
use crate::engine::spec::{Acceptance, MAX_SPREAD, SpecMethod, Speculative, rate_for_share};
use crate::metrics::{mad, median};
use crate::record::RequestRecord;

/// Least lone requests for a draft cost.
pub const MIN_DRAFT_COST_REQUESTS: usize = 4;
/// Least requests, each with at least [`MIN_SPREAD_DRAFTED`] drafted tokens, for `acceptance_spread`.
pub const MIN_SPREAD_REQUESTS: usize = 8;
/// Least drafted tokens of a request whose share counts toward `acceptance_spread`.
pub const MIN_SPREAD_DRAFTED: u64 = 16;

/// What [`fit_speculative`] found (`fit.json`'s `speculative`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecFit {
    /// The profile's `speculative` it gives.
    pub speculative: Speculative,
    /// Records that carried counts, and their sums.
    pub requests: usize,
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// `accepted_tokens / drafted_tokens`.
    pub accepted_share: f64,
    /// Mean drafted tokens per decode step.
    pub drafted_per_step: f64,
    /// Lone requests the draft cost came from (0: not fitted).
    pub draft_cost_requests: usize,
    /// Robust spread of the per-request draft costs (`1.4826·MAD`), ms; absent when not fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_cost_spread_ms: Option<f64>,
    /// Requests whose own shares gave `acceptance_spread` (0: not measured, the spread left at 0).
    #[serde(default)]
    pub spread_requests: usize,
    /// The server's own counters over the same time, where it has them ([`SpecFit::use_server_counts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSpecCounts>,
    pub notes: Vec<String>,
}

/// A server's speculative counters over a run (deltas of its `/metrics`: llama.cpp's and vLLM's
/// `spec_decode_num_draft_tokens`, `…_num_accepted_tokens`, `…_num_drafts`, `…_num_accepted_tokens_per_pos`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSpecCounts {
    pub drafted_tokens: f64,
    pub accepted_tokens: f64,
    /// Verification steps (drafts); 0 when not reported.
    pub steps: f64,
    /// Accepted tokens per draft position (empty when not reported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_per_position: Vec<f64>,
}

impl SpecFit {
    /// Takes the acceptance from the server's own counters over the same time instead of the records' sums: they
    /// count every request, the ones cut when a probe phase's time ran out too, which the records leave out, and
    /// those are the ones that accepted least (a request that accepts less takes more steps, so it is more likely
    /// still running when the time runs out: over one probe of llama-server with a draft model the records said
    /// 0.479 of the drafted tokens accepted, its counters 0.419). Per position where the server counts accepted
    /// tokens per draft position and verification steps for all `k` positions (`u_i = accepted at i / steps`,
    /// made non-increasing), else the one rate for the counters' share. Counters that drafted nothing change
    /// nothing.
    pub fn use_server_counts(&mut self, c: ServerSpecCounts) {
        let usable = c.drafted_tokens > 0.0 && c.accepted_tokens >= 0.0;
        if !usable {
            return;
        }
        let k = self.speculative.draft_tokens;
        let share = (c.accepted_tokens / c.drafted_tokens).clamp(0.0, 1.0);
        let per_position = c.accepted_per_position.len() == k as usize && c.steps > 0.0;
        self.speculative.acceptance = if per_position {
            let mut u: Vec<f64> = c
                .accepted_per_position
                .iter()
                .map(|a| (a / c.steps).clamp(0.0, 1.0))
                .collect();
            for i in 1..u.len() {
                u[i] = u[i].min(u[i - 1]);
            }
            Acceptance::PerPosition(u)
        } else {
            Acceptance::Rate(rate_for_share(share, k))
        };
        self.speculative.acceptance = self.speculative.centered_on(share);
        self.notes.push(format!(
            "acceptance from the server's counters ({:.0} of {:.0} drafted tokens accepted, {share:.4}{}) rather \
             than the records' ({} of {}, {:.4}: requests cut at a phase's end carry no counts)",
            c.accepted_tokens,
            c.drafted_tokens,
            if per_position {
                format!(", per position over {:.0} steps", c.steps)
            } else {
                String::new()
            },
            self.accepted_tokens,
            self.drafted_tokens,
            self.accepted_share
        ));
        self.server = Some(c);
    }
}

/// One step of one sequence at context `ctx` verifying `1 + drafted` positions, without the draft's cost, as the
/// engine prices it under `p` (docs/simulator.md, "Speculative decoding").
pub fn verify_step_ms(p: &EngineProfile, ctx: f64, drafted: f64) -> f64 {
    if let Some(r) = &p.roofline {
        let shape =
            StepShape::decode(1.0, ctx).verifying(drafted, drafted * (ctx + 1.0) + drafted * (drafted + 1.0) / 2.0);
        return r.step_ms(&shape);
    }
    p.decode_step_ms(1.0, ctx) + drafted / p.prefill_tokens_per_ms
}

/// Without a base profile, the decode terms were fitted to whole speculative steps (the draft, the verification
/// and the step itself: [`decode_steps`] in the decode fit), while the engine adds the verified tokens to each
/// step (`drafted / prefill_tokens_per_ms` per sequence on a linear profile). That verification cost, at
/// `drafted_per_step` per sequence, is taken back out of the per-sequence term (what is left of it from the fixed
/// one), so that the engine's step for any batch is again the fitted one; the draft's own cost stays folded in
/// (`draft_cost_ms` 0). Returns what it did, for the notes; nothing for a roofline profile (it prices the
/// verification in the step's shape) or when nothing is drafted.
pub fn take_out_verification(p: &mut EngineProfile, drafted_per_step: f64) -> Option<String> {
    let linear = p.roofline.is_none() && drafted_per_step > 0.0 && p.prefill_tokens_per_ms > 0.0;
    if !linear {
        return None;
    }
    let verify = drafted_per_step / p.prefill_tokens_per_ms;
    let from_seq = verify.min(p.per_seq_ms);
    let from_fixed = (verify - from_seq).min(p.step_fixed_ms);
    p.per_seq_ms -= from_seq;
    p.step_fixed_ms -= from_fixed;
    let short = verify - from_seq - from_fixed;
    let mut note = format!(
        "the decode terms were fitted to whole speculative steps: the verification of {drafted_per_step:.2} drafted \
         tokens per step ({verify:.4} ms at the prefill rate, which the engine adds to each sequence's step) was \
         taken out of per_seq_ms ({from_seq:.4}) and step_fixed_ms ({from_fixed:.4}); the draft's cost stays in the \
         decode terms (draft_cost_ms 0; --spec-base separates it)"
    );
    if short > 0.0 {
        note.push_str(&format!(
            "; {short:.4} ms of it was more than both terms held (the engine's step is that much longer than fitted)"
        ));
    }
    Some(note)
}

/// Speculative decoding from `records`: `None` when no record carries counts. `draft_tokens` is `k` if known;
/// `base` the profile of the server without speculation (its step terms), needed for the draft's cost.
pub fn fit_speculative(
    records: &[RequestRecord],
    method: SpecMethod,
    draft_tokens: Option<u32>,
    base: Option<&EngineProfile>,
) -> Option<SpecFit> {
    let mut notes = Vec::new();
    let counted: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.ok && r.spec.is_some() && r.check().is_ok())
        .collect();
    if counted.is_empty() {
        return None;
    }
    let (mut drafted, mut accepted, mut steps) = (0u64, 0u64, 0u64);
    let mut k_seen = 0u32;
    for r in &counted {
        let Some(c) = r.spec else { continue };
        drafted += c.draft_tokens;
        accepted += c.accepted_tokens;
        let st = decode_steps(r);
        steps += st;
        if st > 0 {
            k_seen = k_seen.max(c.draft_tokens.div_ceil(st).min(u64::from(u32::MAX)) as u32);
        }
    }
    let share = if drafted > 0 {
        accepted as f64 / drafted as f64
    } else {
        0.0
    };
    let k = match draft_tokens {
        Some(k) => k,
        None => {
            notes.push(format!(
                "draft_tokens {} taken from the records (the most drafted per step); give --draft-tokens to set it",
                k_seen.max(1)
            ));
            k_seen.max(1)
        }
    }
    .clamp(1, crate::engine::spec::MAX_DRAFT_TOKENS);
    let rate = rate_for_share(share, k);
    let drafted_per_step = if steps > 0 { drafted as f64 / steps as f64 } else { 0.0 };
    // The draft's cost from lone requests.
    let mut costs = Vec::new();
    if let Some(base) = base {
        let spans: Vec<(f64, f64)> = records
            .iter()
            .filter(|r| r.check().is_ok())
            .map(|r| (r.t_submit, r.t_submit + r.wall_s))
            .collect();
        let mut order: Vec<usize> = (0..spans.len()).collect();
        crate::order::sort_by_f64_key(&mut order, |&i| spans[i].0);
        for r in &counted {
            let (Some(c), Some(ttft)) = (r.spec, r.ttft_s) else {
                continue;
            };
            let st = decode_steps(r);
            if st < 4 || c.draft_tokens == 0 || r.gen_tokens < 8 {
                continue;
            }
            let (a, b) = (r.t_submit, r.t_submit + r.wall_s);
            // Alone: no other request overlaps it (a linear pass: records are few where this matters).
            let others = order.iter().filter(|&&i| spans[i].0 < b && spans[i].1 > a).count();
            if others > 1 {
                continue;
            }
            let step_ms = (r.wall_s - ttft) * 1000.0 / st as f64;
            let d = c.draft_tokens as f64 / st as f64;
            let ctx = r.prompt_tokens.unwrap_or(0) as f64 + r.gen_tokens as f64 / 2.0;
            costs.push((step_ms - verify_step_ms(base, ctx, d)) / d);
        }
    } else {
        notes.push("no base profile (--spec-base): draft_cost_ms not fitted, left at 0".into());
    }
    let (draft_cost_ms, spread) = if costs.len() >= MIN_DRAFT_COST_REQUESTS {
        let spread = 1.4826 * mad(&costs);
        let m = median(&mut costs);
        if m < 0.0 {
            notes.push(format!(
                "the lone requests' steps are shorter than the base profile's without a draft (median {m:.4} ms per \
                 drafted token): draft_cost_ms set to 0"
            ));
        }
        (m.max(0.0), Some(spread))
    } else {
        if base.is_some() {
            notes.push(format!(
                "draft_cost_ms not fitted: {} lone requests with counts and at least 8 tokens (need \
                 {MIN_DRAFT_COST_REQUESTS})",
                costs.len()
            ));
        }
        (0.0, None)
    };
    let n_cost = if spread.is_some() { costs.len() } else { 0 };
    let mut speculative = Speculative {
        method,
        draft_tokens: k,
        acceptance: Acceptance::Rate(rate),
        draft_cost_ms,
        acceptance_by_kind: None,
        acceptance_spread: 0.0,
    };
    let spread_requests = match fit_spread(&counted, k) {
        Ok(f) if f.tau == 0.0 => {
            notes.push(format!(
                "acceptance_spread 0: {} requests' own shares ({:.2} to {:.2} accepted) spread {:.3} in log-odds \
                 (1.4826·MAD), within two standard errors of what counting their drafted tokens makes ({:.3})",
                f.requests, f.lowest, f.highest, f.raw, f.noise
            ));
            f.requests
        }
        Ok(f) => {
            notes.push(format!(
                "acceptance_spread {:.3}: {} requests' own shares ({:.2} to {:.2} accepted) spread {:.3} in log-odds \
                 (1.4826·MAD), of which counting their drafted tokens makes {:.3}; the acceptance is centered so that \
                 requests spread so pool to the {share:.4} counted",
                f.tau, f.requests, f.lowest, f.highest, f.raw, f.noise
            ));
            speculative.acceptance_spread = f.tau;
            speculative.acceptance = speculative.centered_on(share);
            f.requests
        }
        Err(why) => {
            notes.push(format!("acceptance_spread not measured: {why}; left at 0"));
            0
        }
    };
    Some(SpecFit {
        speculative,
        requests: counted.len(),
        drafted_tokens: drafted,
        accepted_tokens: accepted,
        accepted_share: share,
        drafted_per_step,
        draft_cost_requests: n_cost,
        draft_cost_spread_ms: spread,
        spread_requests,
        server: None,
        notes,
    })
}

/// What [`fit_spread`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpreadFit {
    /// `acceptance_spread` (log-odds).
    pub tau: f64,
    pub requests: usize,
    /// The requests' spread in log-odds (1.4826·MAD), and the part of its square counting noise makes, as an sd.
    pub raw: f64,
    pub noise: f64,
    /// The lowest and highest share among them.
    pub lowest: f64,
    pub highest: f64,
}

/// `acceptance_spread` from the requests' own counts (`k` draft tokens): each request with at least
/// [`MIN_SPREAD_DRAFTED`] drafted tokens gives its share `s = (accepted + ½) / (drafted + 1)`, as the one rate `a`
/// for it ([`rate_for_share`]) in log-odds `x`; `τ² = (1.4826·MAD(x))² − median(noise)`, the noise of one request's
/// `x` from its few steps (the accepted count of a step at rate `a` varies by `Σ(2i − 1)aⁱ − (Σaⁱ)²`, over `k²`
/// per step for its share, through `dx/ds`). A spread within two standard errors of that noise (the MAD's
/// variance over `n` requests, ≈ 5.4 σ⁴ / n) is taken as none. An error says why it was not measured.
pub fn fit_spread(records: &[&RequestRecord], k: u32) -> Result<SpreadFit, String> {
    let logit = |a: f64| {
        let a = a.clamp(1e-6, 1.0 - 1e-6);
        (a / (1.0 - a)).ln()
    };
    let x_of = |s: f64| logit(rate_for_share(s, k));
    let (mut xs, mut noise, mut shares) = (Vec::new(), Vec::new(), Vec::new());
    for r in records {
        let Some(c) = r.spec else { continue };
        if c.draft_tokens < MIN_SPREAD_DRAFTED {
            continue;
        }
        let d = c.draft_tokens as f64;
        let s = (c.accepted_tokens as f64 + 0.5) / (d + 1.0);
        let h = 1e-4f64.min(s / 2.0).min((1.0 - s) / 2.0);
        let slope = (x_of(s + h) - x_of(s - h)) / (2.0 * h);
        let a = rate_for_share(s, k);
        let u: Vec<f64> = (1..=k).map(|i| a.powi(i as i32)).collect();
        let mean: f64 = u.iter().sum();
        let var_step: f64 = u.iter().enumerate().map(|(i, ui)| (2 * i + 1) as f64 * ui).sum::<f64>() - mean * mean;
        let steps = (decode_steps(r) as f64).max(d / f64::from(k.max(1)));
        let var_s = var_step.max(0.0) / (f64::from(k) * f64::from(k) * steps);
        xs.push(x_of(s));
        noise.push(var_s * slope * slope);
        shares.push(c.accepted_tokens as f64 / d);
    }
    if xs.len() < MIN_SPREAD_REQUESTS {
        return Err(format!(
            "{} requests drafted at least {MIN_SPREAD_DRAFTED} tokens (need {MIN_SPREAD_REQUESTS})",
            xs.len()
        ));
    }
    let raw = 1.4826 * mad(&xs);
    let noise_var = median(&mut noise);
    let excess = raw * raw - noise_var;
    let se = raw * raw * (5.4 / xs.len() as f64).sqrt();
    let tau = if excess > 2.0 * se {
        excess.sqrt().min(MAX_SPREAD)
    } else {
        0.0
    };
    Ok(SpreadFit {
        tau,
        requests: xs.len(),
        raw,
        noise: noise_var.sqrt(),
        lowest: shares.iter().copied().fold(f64::INFINITY, f64::min),
        highest: shares.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// A record's decode steps: each emits one token plus the drafts it accepted.
pub fn decode_steps(r: &RequestRecord) -> u64 {
    let accepted = r.spec.map_or(0, |c| c.accepted_tokens);
    r.gen_tokens.saturating_sub(1).saturating_sub(accepted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{EngineScenario, SimOptions, simulate_with};
    use crate::workload::{ClosedLoopWorkload, LengthDist, Workload};

    fn base() -> EngineProfile {
        crate::engine::presets::laptop_demo()
    }

    /// `users` users sending `n` requests back to back (prompts from `prompt`, `output` tokens each) to `profile`.
    fn closed_loop(
        profile: EngineProfile,
        users: u32,
        n: u64,
        prompt: LengthDist,
        output: u32,
        seed: u64,
    ) -> EngineScenario {
        EngineScenario::new(
            Workload::ClosedLoop(ClosedLoopWorkload {
                users,
                num_requests: n,
                think_s: 0.0,
                prompt,
                output: LengthDist::Fixed { tokens: output },
                shared_prefix_tokens: 0,
            }),
            profile,
            seed,
        )
    }

    fn keep_records() -> SimOptions {
        SimOptions {
            keep_records: true,
            ..SimOptions::default()
        }
    }

    /// From simulated records of a known profile (one user, so every request runs alone), the fit recovers the
    /// acceptance rate and the draft cost.
    #[test]
    fn recovers_a_simulated_profile() {
        let mut p = base();
        p.speculative = Some(Box::new(Speculative {
            method: SpecMethod::Eagle,
            draft_tokens: 3,
            acceptance: Acceptance::Rate(0.65),
            draft_cost_ms: 1.7,
            acceptance_by_kind: None,
            acceptance_spread: 0.0,
        }));
        let sc = closed_loop(p, 1, 60, LengthDist::Uniform { min: 100, max: 1500 }, 200, 9);
        let r = simulate_with(&sc, keep_records()).expect("valid");
        let f = fit_speculative(&r.records, SpecMethod::Eagle, None, Some(&base())).expect("counts");
        assert_eq!(f.speculative.draft_tokens, 3);
        let Acceptance::Rate(a) = f.speculative.acceptance else {
            panic!("a rate")
        };
        assert!((a / 0.65 - 1.0).abs() < 0.05, "{a} {f:?}");
        assert!(
            (f.speculative.draft_cost_ms / 1.7 - 1.0).abs() < 0.05,
            "{} {f:?}",
            f.speculative.draft_cost_ms
        );
        // Without the base profile: the acceptance alone, and a note.
        let f = fit_speculative(&r.records, SpecMethod::Eagle, Some(3), None).expect("counts");
        assert_eq!(f.speculative.draft_cost_ms, 0.0);
        assert!(f.notes.iter().any(|n| n.contains("--spec-base")), "{:?}", f.notes);
        // The server's counters take over the acceptance: per position where it counts them for all k.
        let mut g = f.clone();
        g.use_server_counts(ServerSpecCounts {
            drafted_tokens: 1000.0,
            accepted_tokens: 400.0,
            steps: 260.0,
            accepted_per_position: vec![130.0, 104.0, 110.0],
        });
        let Acceptance::PerPosition(u) = &g.speculative.acceptance else {
            panic!("per position: {g:?}")
        };
        assert_eq!(u, &vec![0.5, 0.4, 0.4], "non-increasing");
        assert!(g.notes.iter().any(|n| n.contains("server's counters")), "{:?}", g.notes);
        // Without positions (or for another k): the one rate of their share.
        let mut g = f.clone();
        g.use_server_counts(ServerSpecCounts {
            drafted_tokens: 1000.0,
            accepted_tokens: 400.0,
            steps: 0.0,
            accepted_per_position: Vec::new(),
        });
        assert_eq!(g.speculative.acceptance, Acceptance::Rate(rate_for_share(0.4, 3)));
        assert!((g.speculative.acceptance_rate() - 0.4).abs() < 1e-9);
        // Counters that drafted nothing leave the fit as it was.
        let mut g = f.clone();
        g.use_server_counts(ServerSpecCounts {
            drafted_tokens: 0.0,
            accepted_tokens: 0.0,
            steps: 0.0,
            accepted_per_position: Vec::new(),
        });
        assert_eq!(g, f);
        // No counts: nothing.
        let off = simulate_with(&EngineScenario { profile: base(), ..sc }, keep_records()).expect("valid");
        assert!(fit_speculative(&off.records, SpecMethod::Eagle, None, Some(&base())).is_none());
    }

    /// Records of a profile whose requests spread (τ = 1.2 in log-odds around a rate of 0.6, k = 3): the fit finds
    /// the spread within 20 % and centers the acceptance so that requests spread so pool to the share counted;
    /// without a spread it finds none.
    #[test]
    fn recovers_the_spread_of_requests_acceptance() {
        let run = |tau: f64| {
            let mut p = base();
            p.speculative = Some(Box::new(Speculative {
                method: SpecMethod::Draft,
                draft_tokens: 3,
                acceptance: Acceptance::Rate(0.6),
                draft_cost_ms: 0.0,
                acceptance_by_kind: None,
                acceptance_spread: tau,
            }));
            let sc = closed_loop(p, 4, 240, LengthDist::Fixed { tokens: 200 }, 160, 4);
            let r = simulate_with(&sc, keep_records()).expect("valid");
            fit_speculative(&r.records, SpecMethod::Draft, Some(3), None).expect("counts")
        };
        let f = run(1.2);
        let tau = f.speculative.acceptance_spread;
        assert!((tau / 1.2 - 1.0).abs() < 0.2, "{tau}: {:?}", f.notes);
        assert!(f.spread_requests >= 200, "{}", f.spread_requests);
        assert!(
            (f.speculative.pooled_acceptance_rate() - f.accepted_share).abs() < 1e-6,
            "{} vs {}",
            f.speculative.pooled_acceptance_rate(),
            f.accepted_share
        );
        let Acceptance::Rate(a) = f.speculative.acceptance else {
            panic!("a rate")
        };
        assert!((a - 0.6).abs() < 0.05, "the middle request's rate {a}");
        let flat = run(0.0);
        assert_eq!(flat.speculative.acceptance_spread, 0.0, "{:?}", flat.notes);
        assert!(
            flat.notes.iter().any(|n| n.starts_with("acceptance_spread 0:")),
            "{:?}",
            flat.notes
        );
    }
}
