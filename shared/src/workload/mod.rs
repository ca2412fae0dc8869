//! Workloads shared by the simulator and the live replay, as one [`Workload`] enum tagged on `"kind"`.
//!
//! - `bursty`: the seed's trace ([`bursty::BurstyWorkload`], `build_agent_trace`): a 2,048/3,072-token
//!   prefix of ONE common system prompt plus a unique part per request;
//! - `poisson` / `gamma`: open-loop arrivals with length distributions ([`open_loop`]);
//! - `sessions`: agent sessions as the seed's `agent_replay.py` ([`session::SessionWorkload`]);
//! - `closed_loop`: N users, each sending the next request when the previous finishes ([`open_loop`]).
//!
//! The request plan is made here only (`plan.rs`): [`Workload::requests`] (one request type, [`PlannedRequest`]),
//! [`Workload::expected_requests`] and [`Workload::concurrency`].

pub mod bursty;
pub mod open_loop;
mod plan;
pub mod session;

use serde::{Deserialize, Serialize};

use crate::scenario::ScenarioError;

pub use bursty::{BurstyTrace, BurstyWorkload};
pub use open_loop::{ClosedLoopWorkload, GammaWorkload, LengthDist, PoissonWorkload, RequestStream};
pub use plan::{PlannedRequest, Requests};
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
