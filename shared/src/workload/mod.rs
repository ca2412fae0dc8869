//! Workloads shared by the simulator and the live replay, as one [`Workload`] enum tagged on `"kind"`.
//!
//! - `bursty`: the seed's trace ([`crate::seed_model::BurstyWorkload`], `build_agent_trace`): a 2,048/3,072-token
//!   prefix of ONE common system prompt plus a unique part per request;
//! - `poisson` / `gamma`: open-loop arrivals with length distributions ([`open_loop`]);
//! - `sessions`: agent sessions as the seed's `agent_replay.py` ([`session::SessionWorkload`]);
//! - `closed_loop`: N users, each sending the next request when the previous finishes ([`open_loop`]).

pub mod open_loop;
pub mod session;

use serde::{Deserialize, Serialize};

use crate::scenario::ScenarioError;
use crate::seed_model::BurstyWorkload;

pub use open_loop::{ClosedLoopWorkload, GammaWorkload, GenRequest, LengthDist, PoissonWorkload, RequestStream};
pub use session::{SessionDist, SessionPlan, SessionWorkload};

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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Workload {
        let w: Workload = serde_json::from_str(json).expect("workload");
        w.validate().expect("valid");
        w
    }

    #[test]
    fn scaled_multiplies_the_load_and_nothing_else() {
        let lengths = r#""prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 64},
            "shared_prefix_tokens": 0"#;
        let cases = [
            (
                r#"{"kind": "bursty", "num_requests": 80, "seed": 42, "mean_rps": 8.5}"#.to_string(),
                8.5,
            ),
            (
                format!(r#"{{"kind": "poisson", "num_requests": 100, "rate_rps": 4.0, {lengths}}}"#),
                4.0,
            ),
            (
                format!(r#"{{"kind": "gamma", "num_requests": 100, "rate_rps": 0.3, "cv": 2.0, {lengths}}}"#),
                0.3,
            ),
            (
                format!(r#"{{"kind": "closed_loop", "users": 8, "num_requests": 100, "think_s": 0.0, {lengths}}}"#),
                8.0,
            ),
            (sessions_of(10), 10.0),
        ];
        for (json, load) in cases {
            let w = parse(&json);
            assert_eq!(w.load(), load, "{json}");
            assert_eq!(w.scaled(1.0), w);
            let kind = w.kind();
            let counts = matches!(kind, "sessions" | "closed_loop");
            for factor in [0.25, 0.75, 1.5, 4.0] {
                let s = w.scaled(factor);
                s.validate().unwrap_or_else(|e| panic!("{kind} × {factor}: {e}"));
                let want = if counts {
                    (load * factor).round().max(1.0)
                } else {
                    load * factor
                };
                assert_eq!(s.load().to_bits(), want.to_bits(), "{kind} × {factor}");
                // Only the load field differs.
                let (mut a, b) = (serde_json::to_value(&s).unwrap(), serde_json::to_value(&w).unwrap());
                let field = ["mean_rps", "rate_rps", "sessions", "users"]
                    .into_iter()
                    .find(|f| b.get(*f).is_some())
                    .unwrap();
                a[field] = b[field].clone();
                assert_eq!(a, b, "{kind} × {factor}");
            }
        }
        // Counts never drop to zero.
        let one = parse(&sessions_of(1));
        assert_eq!(one.scaled(0.25).load(), 1.0);
    }

    fn sessions_of(n: u32) -> String {
        format!(
            r#"{{"kind": "sessions", "sessions": {n}, "steps": 3, "base_tokens": 2000, "gen_tokens": 100,
            "tool_tokens": 50, "think_s": 1.0, "dist": "uniform", "spread": 0.0, "respawn": false,
            "stagger_s": 0.0, "duration_s": 60.0, "drain": false, "drain_grace_s": 10.0, "task_tokens": 16}}"#
        )
    }
}
