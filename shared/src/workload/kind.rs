//! The [`Workload`] enum and what it answers about itself (validation, load, scaling, size, peak in flight); its
//! request plan is `plan.rs`. In a file of its own so that the workload modules depend on it and on each other
//! without a loop through `workload/mod.rs`.

use serde::{Deserialize, Serialize};

use super::bursty::BurstyWorkload;
use super::open_loop::{ClosedLoopWorkload, GammaWorkload, PoissonWorkload, RequestStream};
use super::session::SessionWorkload;
use super::trace::TraceWorkload;
use crate::error::ScenarioError;

/// What traffic to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    /// The seed's bursty agent trace.
    Bursty(BurstyWorkload),
    /// Poisson arrivals.
    Poisson(PoissonWorkload),
    /// Gamma arrivals (burstiness).
    Gamma(GammaWorkload),
    /// Agent sessions.
    Sessions(SessionWorkload),
    /// Closed-loop users.
    ClosedLoop(ClosedLoopWorkload),
    /// Explicit requests (open loop).
    Trace(Box<TraceWorkload>),
}

impl Workload {
    /// Checks every field; paths are relative (`mean_rps`, `prompt.median`), see [`ScenarioError::within`].
    pub fn validate(&self) -> Result<(), ScenarioError> {
        match self {
            Workload::Bursty(w) => w.validate(),
            Workload::Poisson(w) => w.validate(),
            Workload::Gamma(w) => w.validate(),
            Workload::Sessions(w) => w.validate_fields(),
            Workload::ClosedLoop(w) => w.validate(),
            Workload::Trace(w) => w.validate(),
        }
    }

    /// The number that sets how much load the workload offers: the arrival rate (`mean_rps`, `rate_rps`, requests
    /// per second) of an open-loop trace, the concurrent `sessions`, or the closed-loop `users`.
    pub fn load(&self) -> f64 {
        match self {
            Workload::Bursty(w) => w.mean_rps,
            Workload::Poisson(w) => w.rate_rps,
            Workload::Gamma(w) => w.rate_rps,
            Workload::Sessions(w) => f64::from(w.sessions),
            Workload::ClosedLoop(w) => f64::from(w.users),
            Workload::Trace(w) => w.rate_rps(),
        }
    }

    /// The same workload with its [`load`](Workload::load) multiplied by `factor` (a load sweep): a rate exactly
    /// `rate × factor`; a count (`sessions`, `users`) rounded to the nearest integer and at least 1. Everything
    /// else (requests, lengths, seeds) stays, so the points of a sweep differ only in their load. A `factor` that
    /// is not a positive number gives a workload that [`validate`](Workload::validate) rejects (rates) or 1
    /// session or user (counts).
    pub fn scaled(&self, factor: f64) -> Workload {
        let count = |n: u32| (f64::from(n) * factor).round().clamp(1.0, f64::from(u32::MAX)) as u32;
        let mut out = self.clone();
        match &mut out {
            Workload::Bursty(w) => w.mean_rps *= factor,
            Workload::Poisson(w) => w.rate_rps *= factor,
            Workload::Gamma(w) => w.rate_rps *= factor,
            Workload::Sessions(w) => w.sessions = count(w.sessions),
            Workload::ClosedLoop(w) => w.users = count(w.users),
            // Arrivals `factor` times as dense: the rate times `factor`.
            Workload::Trace(w) => w.requests.iter_mut().for_each(|r| r.arrival_ms /= factor),
        }
        out
    }

    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Bursty(_) => "bursty",
            Workload::Poisson(_) => "poisson",
            Workload::Gamma(_) => "gamma",
            Workload::Sessions(_) => "sessions",
            Workload::ClosedLoop(_) => "closed_loop",
            Workload::Trace(_) => "trace",
        }
    }

    /// The most requests this workload has in flight at once by its plan, counted up to `stop_above + 1` (then
    /// counting stops: the caller only asks whether a bound holds). Sessions: one per session slot; closed loop:
    /// one per user. Open loop (`bursty`, `poisson`, `gamma`, drawn from `seed` as the replay draws them): a
    /// request is in flight from its arrival for `request_ms(output_tokens)` milliseconds (e.g. as long as a
    /// request meeting an SLO takes), so the peak is the most of those intervals that overlap.
    pub fn peak_in_flight(&self, seed: u64, request_ms: impl Fn(u32) -> f64, stop_above: u64) -> u64 {
        let cap = stop_above.saturating_add(1);
        match self {
            Workload::Sessions(w) => u64::from(w.slot_count()).min(cap),
            Workload::ClosedLoop(w) => u64::from(w.users).min(w.num_requests).min(cap),
            Workload::Poisson(w) => peak_overlap(
                RequestStream::poisson(w, seed).map(|r| (r.arrival_ms, r.output_tokens)),
                request_ms,
                cap,
            ),
            Workload::Gamma(w) => peak_overlap(
                RequestStream::gamma(w, seed).map(|r| (r.arrival_ms, r.output_tokens)),
                request_ms,
                cap,
            ),
            Workload::Trace(w) => peak_overlap(
                w.requests.iter().map(|r| (r.arrival_ms, r.output_tokens)),
                request_ms,
                cap,
            ),
            Workload::Bursty(w) => peak_overlap(
                crate::seed_model::build_agent_trace(w)
                    .into_iter()
                    .map(|r| (r.arrival_ms, r.output_tokens)),
                request_ms,
                cap,
            ),
        }
    }
}

/// The most intervals `[arrival, arrival + request_ms(output))` open at once, over arrivals in non-decreasing
/// order, counted up to `cap`. Holds at most `cap` end times.
fn peak_overlap(arrivals: impl Iterator<Item = (f64, u32)>, request_ms: impl Fn(u32) -> f64, cap: u64) -> u64 {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // End times as their bits: non-negative finite f64s order as their bit patterns do.
    let mut ends: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut peak = 0u64;
    for (arrival_ms, output) in arrivals {
        while ends
            .peek()
            .is_some_and(|Reverse(end)| f64::from_bits(*end) <= arrival_ms)
        {
            ends.pop();
        }
        let end = (arrival_ms + request_ms(output).max(0.0)).max(0.0);
        ends.push(Reverse(if end.is_finite() { end } else { f64::MAX }.to_bits()));
        peak = peak.max(ends.len() as u64);
        if peak >= cap {
            return cap;
        }
    }
    peak
}

/// What a workload sends and holds at most, for [`crate::budget::Estimate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadSize {
    /// Requests or session steps.
    pub requests: f64,
    /// Requests that can be in flight at once (open-loop arrivals: all of them; sessions: slots; users).
    pub held_prompts: f64,
    /// Tokens of a held prompt (the mean for open-loop arrivals, the longest for sessions and users).
    pub held_prompt_tokens: f64,
    /// Session-plan steps held at once.
    pub plan_steps: f64,
}

impl Workload {
    /// See [`WorkloadSize`]; the formula is in [`crate::budget`]'s docs.
    pub fn size(&self) -> WorkloadSize {
        let open = |n: u64, prompt: f64| WorkloadSize {
            requests: n as f64,
            held_prompts: n as f64,
            held_prompt_tokens: prompt,
            plan_steps: 0.0,
        };
        match self {
            // The seed's trace: a 2,048/3,072-token shared prefix plus a unique part of up to about as much.
            Workload::Bursty(w) => open(w.num_requests, 6_144.0),
            Workload::Trace(w) => open(
                w.requests.len() as u64,
                w.requests
                    .iter()
                    .map(|r| f64::from(r.shared_prefix_tokens) + f64::from(r.unique_prompt_tokens))
                    .sum::<f64>()
                    / (w.requests.len().max(1)) as f64,
            ),
            Workload::Poisson(w) => open(w.num_requests, w.prompt.mean() + f64::from(w.shared_prefix_tokens)),
            Workload::Gamma(w) => open(w.num_requests, w.prompt.mean() + f64::from(w.shared_prefix_tokens)),
            Workload::ClosedLoop(w) => WorkloadSize {
                requests: w.num_requests as f64,
                held_prompts: f64::from(w.users).min(w.num_requests as f64),
                held_prompt_tokens: f64::from(w.prompt.max_value()) + f64::from(w.shared_prefix_tokens),
                plan_steps: 0.0,
            },
            Workload::Sessions(w) => {
                let slots = f64::from(w.slot_count());
                let growth = f64::from(w.gen_tokens) + f64::from(w.tool_tokens);
                let task = f64::from(w.task_tokens);
                // A step takes its think time plus its generation (assumed >= 10 ms a token) plus 0.5 s, as the
                // engine sizes its record vector (`engine::sim`); no step is sent after the run's end.
                let step_s = w.mean_think_s() + f64::from(w.gen_tokens) * 0.01 + 0.5;
                let run_s = w.duration_s + if w.drain { w.drain_grace_s } else { 0.0 };
                let by_time = (run_s / step_s).floor() + 1.0;
                // Slot i starts at i · stagger_s, and none after duration_s.
                let started = if w.stagger_s > 0.0 {
                    slots.min((w.duration_s / w.stagger_s).floor() + 1.0)
                } else {
                    slots
                };
                // (steps a started slot's plans hold, steps it sends, its longest prompt), summed or maximized
                // over the started slots.
                let slot = |steps: f64, base: f64| {
                    let sent = if w.respawn { by_time } else { steps.min(by_time) };
                    (steps, sent, base + task + steps.min(by_time) * growth)
                };
                // Ladder: each started slot's rung; drawn sessions: one mean slot, `started` times.
                let (per_slot, times): (Vec<(f64, f64, f64)>, f64) = match &w.ladder {
                    Some(l) if !l.rungs.is_empty() => (
                        (0..started as usize)
                            .map(|i| {
                                let r = l.rungs[i % l.rungs.len()];
                                slot(f64::from(r.steps), r.base_tokens as f64)
                            })
                            .collect(),
                        1.0,
                    ),
                    _ => (vec![slot(f64::from(w.steps), w.base_tokens as f64)], started),
                };
                // Sub-agents: each fan-out (one per `every_steps` parent steps) sends `count · steps` requests more,
                // and holds `count` prompts more.
                let (kid_requests, kid_prompts) = w.subagents.map_or((0.0, 0.0), |a| {
                    (
                        f64::from(a.count) * f64::from(a.steps) / f64::from(a.every_steps.max(1)),
                        f64::from(a.count),
                    )
                });
                WorkloadSize {
                    requests: per_slot.iter().map(|p| p.1).sum::<f64>() * times * (1.0 + kid_requests),
                    held_prompts: started * (1.0 + kid_prompts),
                    held_prompt_tokens: per_slot.iter().map(|p| p.2).fold(0.0, f64::max),
                    plan_steps: per_slot.iter().map(|p| p.0).sum::<f64>() * times,
                }
            }
        }
    }
}
