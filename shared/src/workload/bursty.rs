//! The seed's bursty agent trace (`scenario_sim.py::build_agent_trace`), bit-identical to Python's
//! `random.Random(seed)` draws (see [`crate::pyrand`]): a 2,048/3,072-token prefix of ONE common system prompt plus
//! a unique part per request, arriving in bursts (short gaps for indices 2..=6 of every 10, lulls otherwise).
//!
//! [`BurstyWorkload`] is the JSON form; [`BurstyTrace`] yields its [`PlannedRequest`]s lazily, for the seed model,
//! the engine simulator and live replay alike (through [`super::Workload::requests`]).

use serde::{Deserialize, Serialize};

use super::request::PlannedRequest;
use crate::error::ScenarioError;
use crate::pyrand::{PyRandom, PySeed, py_round};

/// The largest trace accepted (the seed has no limit; beyond this a run would take minutes and gigabytes).
pub const MAX_REQUESTS: u64 = 10_000_000;

/// The seed's bursty agent workload: `build_agent_trace(num_requests, seed, mean_rps)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstyWorkload {
    /// Requests in the trace, `1..=`[`MAX_REQUESTS`].
    pub num_requests: u64,
    /// `random.Random(seed)`; see [`crate::pyrand::PySeed`] for the accepted range.
    pub seed: PySeed,
    /// Mean arrival rate before the burst factors, requests per second; `> 0`.
    pub mean_rps: f64,
}

impl BurstyWorkload {
    /// Field paths are relative (`mean_rps`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.num_requests == 0 || self.num_requests > MAX_REQUESTS {
            return Err(ScenarioError::field(
                "num_requests",
                format!("must be in 1..={MAX_REQUESTS} (got {})", self.num_requests),
            ));
        }
        if !(self.mean_rps.is_finite() && self.mean_rps > 0.0) {
            return Err(ScenarioError::field(
                "mean_rps",
                format!("must be > 0 (got {})", self.mean_rps),
            ));
        }
        Ok(())
    }

    /// The trace, lazily (does not validate `self`).
    pub fn trace(&self) -> BurstyTrace {
        BurstyTrace::new(self)
    }
}

/// Arrivals are drawn this many at a time, in a loop of their own: the draws (a `log` each) do not depend on one
/// another, so apart from the consumer's own dependency chain they pipeline well.
const ARRIVAL_CHUNK: usize = 256;

/// The seed's burst factor by request index modulo 10.
const BURST_FACTORS: [f64; 10] = [1.55, 1.55, 0.32, 0.32, 0.32, 0.32, 0.32, 1.55, 1.55, 1.55];

/// The seed's trace, generated lazily: `build_agent_trace` step by step. Arrivals are rounded to 2 decimals of a
/// millisecond, as the seed rounds them.
#[derive(Debug, Clone)]
pub struct BurstyTrace {
    rng: PyRandom,
    lambd: f64,
    /// Index of the next request to yield.
    idx: u64,
    n: u64,
    current_ms: f64,
    /// Rounded arrivals of requests `idx - pos .. idx - pos + arrivals.len()`.
    arrivals: Vec<f64>,
    pos: usize,
}

impl BurstyTrace {
    fn new(w: &BurstyWorkload) -> Self {
        BurstyTrace {
            rng: PyRandom::new(w.seed),
            lambd: w.mean_rps / 1000.0,
            idx: 0,
            n: w.num_requests,
            current_ms: 0.0,
            arrivals: Vec::with_capacity(ARRIVAL_CHUNK),
            pos: 0,
        }
    }

    /// Draw the arrivals of the next chunk of requests, starting at `self.idx`: the chunk's `random()` draws at
    /// once ([`PyRandom::fill_random`]), then per request the seed's
    /// `current_ms += rng.expovariate(lambd) * burst_factor` with the same operations in the same order.
    fn refill(&mut self) {
        self.pos = 0;
        let count = (self.n - self.idx).min(ARRIVAL_CHUNK as u64) as usize;
        self.arrivals.clear();
        self.arrivals.resize(count, 0.0);
        self.rng.fill_random(&mut self.arrivals);
        // `expovariate(lambd)` of each draw, in a loop of its own: the `ln` calls do not depend on one another.
        let lambd = self.lambd;
        for slot in self.arrivals.iter_mut() {
            *slot = -(1.0 - *slot).ln() / lambd;
        }
        let mut current_ms = self.current_ms;
        // Bursty gamma-like arrivals: short inter-arrival gaps for indices 2..=6 of every 10, lulls otherwise.
        let mut phase = (self.idx % 10) as usize;
        for slot in self.arrivals.iter_mut() {
            current_ms += *slot * BURST_FACTORS[phase];
            *slot = py_round(current_ms, 2);
            phase = if phase == 9 { 0 } else { phase + 1 };
        }
        self.current_ms = current_ms;
    }
}

impl Iterator for BurstyTrace {
    type Item = PlannedRequest;

    #[inline]
    fn next(&mut self) -> Option<PlannedRequest> {
        if self.idx >= self.n {
            return None;
        }
        if self.pos == self.arrivals.len() {
            self.refill();
        }
        let idx = self.idx;
        let arrival_ms = *self.arrivals.get(self.pos)?;
        self.idx += 1;
        self.pos += 1;
        Some(PlannedRequest {
            arrival_ms,
            shared_prefix_tokens: if !idx.is_multiple_of(4) { 3072 } else { 2048 },
            unique_prompt_tokens: 256 + (idx % 5) as u32 * 64,
            output_tokens: 96 + (idx % 4) as u32 * 32,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.n - self.idx).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}
