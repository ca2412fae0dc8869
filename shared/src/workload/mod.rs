//! Workloads shared by the simulator and the live replay, as one [`Workload`] enum tagged on `"kind"`.
//!
//! - `bursty`: the seed's trace ([`bursty::BurstyWorkload`], `build_agent_trace`): a 2,048/3,072-token
//!   prefix of ONE common system prompt plus a unique part per request;
//! - `poisson` / `gamma`: open-loop arrivals with length distributions ([`open_loop`]);
//! - `sessions`: agent sessions as the seed's `agent_replay.py` ([`session::SessionWorkload`]);
//! - `closed_loop`: N users, each sending the next request when the previous finishes ([`open_loop`]);
//! - `trace`: explicit requests with their arrivals and lengths ([`trace::TraceWorkload`]), e.g. a live run's
//!   records (`loadshape simulate --like RUN.jsonl`), or a production trace file (Mooncake JSONL, agentic
//!   Mooncake) read by [`mooncake`], whose hash ids key the content and whose sessions and `wait_for` order it.
//!
//! The request plan is made here only (`plan.rs`): [`Workload::requests`] (one request type, [`PlannedRequest`]),
//! [`Workload::expected_requests`] and [`Workload::concurrency`]; its deterministic shards (`replay --shard I/N`)
//! in `shard.rs` ([`Workload::shard`]).

pub mod bursty;
pub mod compaction;
mod kind;
pub mod limits;
pub mod mooncake;
pub mod open_loop;
mod plan;
pub mod reasoning;
pub(crate) mod request;
pub mod session;
pub mod shard;
pub mod subagents;
pub mod think;
pub mod trace;

pub use bursty::{BurstyTrace, BurstyWorkload};
pub use compaction::Compaction;
pub use kind::{Workload, WorkloadSize};
pub use open_loop::{ClosedLoopWorkload, GammaWorkload, LengthDist, PoissonWorkload, RequestStream};
pub use plan::Requests;
pub use reasoning::Reasoning;
pub use request::PlannedRequest;
pub use session::{SessionDist, SessionPlan, SessionWorkload};
pub use shard::{Shard, ShardError, ShardPlan, ShardUnit};
pub use subagents::Subagents;
pub use think::ThinkDist;
pub use trace::{TraceFormat, TraceRequest, TraceWorkload};

#[cfg(test)]
mod peak_tests {
    use super::*;

    fn poisson(num_requests: u64, rate_rps: f64) -> Workload {
        Workload::Poisson(PoissonWorkload {
            num_requests,
            rate_rps,
            prompt: LengthDist::Fixed { tokens: 100 },
            output: LengthDist::Fixed { tokens: 100 },
            shared_prefix_tokens: 0,
        })
    }

    #[test]
    fn open_loop_peak_follows_rate_times_duration() {
        // 10 rps for 1 s per request: about 10 in flight, far fewer than the 1000 requests.
        let peak = poisson(1000, 10.0).peak_in_flight(1, |_| 1000.0, 10_000);
        assert!((5..=30).contains(&peak), "{peak}");
        // Everything at once: every request is in flight together; counting stops past the bound.
        assert_eq!(poisson(20_000, 1e7).peak_in_flight(1, |_| 1000.0, 100_000), 20_000);
        assert_eq!(poisson(20_000, 1e7).peak_in_flight(1, |_| 1000.0, 256), 257);
        // Requests that end before the next arrives never overlap.
        assert_eq!(poisson(100, 0.001).peak_in_flight(1, |_| 0.0, 10), 1);
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
