//! The request plan: the ONE place a [`Workload`] becomes requests ([`Workload::requests`]), a request count
//! ([`Workload::expected_requests`]) and a concurrency ([`Workload::concurrency`]). The seed model, the engine
//! simulator, live replay and `serve`'s limits all ask these; none turns a workload into requests on its own.

use super::bursty::BurstyTrace;
use super::kind::Workload;
use super::open_loop::RequestStream;
use super::request::PlannedRequest;

/// The requests of a workload, in arrival order ([`Workload::requests`]).
#[derive(Debug, Clone)]
pub enum Requests {
    /// The seed's bursty trace.
    Bursty(BurstyTrace),
    /// Poisson, gamma or closed-loop draws.
    Stream(RequestStream),
    /// Explicit requests (a trace).
    Listed(std::vec::IntoIter<PlannedRequest>),
    /// Agent sessions: no request plan (each step's prompt grows by the replies; see [`super::SessionWorkload::plan`]).
    Sessions,
}

impl Iterator for Requests {
    type Item = PlannedRequest;

    #[inline]
    fn next(&mut self) -> Option<PlannedRequest> {
        match self {
            Requests::Bursty(t) => t.next(),
            Requests::Stream(s) => s.next(),
            Requests::Listed(l) => l.next(),
            Requests::Sessions => None,
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Requests::Bursty(t) => t.size_hint(),
            Requests::Stream(s) => s.size_hint(),
            Requests::Listed(l) => l.size_hint(),
            Requests::Sessions => (0, Some(0)),
        }
    }
}

impl Workload {
    /// The workload's requests, deterministic in `seed` (the bursty trace ignores it: it carries its own
    /// `random.Random` seed, as the seed's trace does). Sessions yield none: their requests are planned per session
    /// step ([`super::SessionWorkload::plan`]).
    pub fn requests(&self, seed: u64) -> Requests {
        match self {
            Workload::Bursty(b) => Requests::Bursty(b.trace()),
            Workload::Poisson(p) => Requests::Stream(RequestStream::poisson(p, seed)),
            Workload::Gamma(g) => Requests::Stream(RequestStream::gamma(g, seed)),
            Workload::ClosedLoop(c) => Requests::Stream(RequestStream::closed(c, seed)),
            Workload::Trace(t) => Requests::Listed(t.planned()),
            Workload::Sessions(_) => Requests::Sessions,
        }
    }

    /// Requests the workload sends: exactly `num_requests` for request-level workloads; for sessions an estimate,
    /// `slots · (duration_s / step_s + 1)` with a step taking its think time plus its generation (assumed ≥ 10 ms
    /// per token) plus 0.5 s, and without respawn at most `3 · slots · steps`. A sizing hint, never a limit.
    pub fn expected_requests(&self) -> u64 {
        match self {
            Workload::Bursty(b) => b.num_requests,
            Workload::Poisson(p) => p.num_requests,
            Workload::Gamma(g) => g.num_requests,
            Workload::ClosedLoop(c) => c.num_requests,
            Workload::Trace(t) => t.requests.len() as u64,
            Workload::Sessions(s) => {
                let step_s = s.mean_think_s() + f64::from(s.gen_tokens) * 0.01 + 0.5;
                let by_time = f64::from(s.slot_count()) * (s.duration_s / step_s + 1.0);
                let n = if s.respawn {
                    by_time
                } else {
                    by_time.min(f64::from(s.slot_count()) * f64::from(s.steps) * 3.0)
                };
                // Sub-agents: `count · steps` requests more per `every_steps` parent steps.
                let n = n * s.subagents.map_or(1.0, |a| {
                    1.0 + f64::from(a.count) * f64::from(a.steps) / f64::from(a.every_steps.max(1))
                });
                // `as` saturates (and maps NaN to 0).
                n.max(0.0) as u64
            }
        }
    }

    /// The most requests the workload itself keeps in flight at once, where the workload fixes it: sessions, one
    /// per session slot ([`super::SessionWorkload::slot_count`]) and one per sub-agent of each; closed loop, one per user, `min(users,
    /// num_requests)`. `None` for open-loop arrivals (bursty, Poisson, gamma): they never wait for an answer, so how
    /// many are in flight is set by how fast the server answers, bounded only by [`Workload::expected_requests`].
    pub fn concurrency(&self) -> Option<u32> {
        match self {
            // Each slot's children run beside it.
            Workload::Sessions(s) => Some(s.slot_count().saturating_mul(1 + s.subagents.map_or(0, |a| a.count))),
            Workload::ClosedLoop(c) => Some(c.users.min(u32::try_from(c.num_requests).unwrap_or(u32::MAX))),
            Workload::Bursty(_) | Workload::Poisson(_) | Workload::Gamma(_) | Workload::Trace(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(json: &str) -> Workload {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    /// Every request-level workload plans exactly `num_requests` requests, in arrival order, deterministic in the
    /// seed (the bursty trace in its own seed only); sessions plan none here.
    #[test]
    fn requests_are_the_workloads_count_in_arrival_order() {
        for (json, n) in [
            (
                r#"{"kind": "bursty", "num_requests": 37, "seed": 42, "mean_rps": 8.5}"#,
                37,
            ),
            (r#"{"kind": "poisson", "num_requests": 50, "rate_rps": 4.0}"#, 50),
            (
                r#"{"kind": "gamma", "num_requests": 20, "rate_rps": 4.0, "cv": 2.0}"#,
                20,
            ),
            (r#"{"kind": "closed_loop", "users": 3, "num_requests": 9}"#, 9),
        ] {
            let w = workload(json);
            let reqs: Vec<PlannedRequest> = w.requests(7).collect();
            assert_eq!((reqs.len() as u64, w.expected_requests()), (n, n), "{json}");
            assert_eq!(w.requests(7).size_hint(), (n as usize, Some(n as usize)), "{json}");
            assert!(reqs.windows(2).all(|p| p[0].arrival_ms <= p[1].arrival_ms), "{json}");
            assert_eq!(reqs, w.requests(7).collect::<Vec<_>>(), "{json}");
        }
        let bursty = workload(r#"{"kind": "bursty", "num_requests": 12, "seed": 42, "mean_rps": 8.5}"#);
        assert_eq!(
            bursty.requests(1).collect::<Vec<_>>(),
            bursty.requests(2).collect::<Vec<_>>()
        );
        let sessions = workload(r#"{"kind": "sessions", "sessions": 4, "steps": 3, "duration_s": 60.0}"#);
        assert_eq!(sessions.requests(1).count(), 0);
        assert!(sessions.expected_requests() > 0);
    }

    /// Concurrency: session slots, closed-loop users (never more than its requests), none for open loop.
    #[test]
    fn concurrency_is_fixed_by_sessions_and_users_only() {
        let c = |json: &str| workload(json).concurrency();
        assert_eq!(
            c(r#"{"kind": "sessions", "sessions": 6, "steps": 3, "duration_s": 60.0}"#),
            Some(6)
        );
        assert_eq!(
            c(r#"{"kind": "closed_loop", "users": 8, "num_requests": 400}"#),
            Some(8)
        );
        assert_eq!(c(r#"{"kind": "closed_loop", "users": 8, "num_requests": 3}"#), Some(3));
        assert_eq!(c(r#"{"kind": "poisson", "num_requests": 50, "rate_rps": 4.0}"#), None);
        assert_eq!(
            c(r#"{"kind": "bursty", "num_requests": 5, "seed": 1, "mean_rps": 1.0}"#),
            None
        );
    }
}
