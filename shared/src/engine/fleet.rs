//! Fleets: R replicas of one engine profile behind a router ([`FleetSpec`], [`Router`]), and what each replica
//! carried ([`FleetReport`], [`ReplicaLoad`]).
//!
//! Every replica is its own [`super::Engine`] with its own KV cache and prefix cache: content computed on one
//! replica is a miss on another. The simulation loop routes each request when it is sent, from the replicas'
//! state at that moment (see `sim.rs`). A scenario without `fleet` (or with one replica) is the single-engine
//! model, to the byte.

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;

/// Most replicas a scenario may ask for.
pub const MAX_REPLICAS: u32 = 1024;

fn default_load_cap() -> f64 {
    1.5
}

/// How requests are spread over the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    /// Request `i` goes to replica `i mod R`, in the order requests are sent.
    RoundRobin,
    /// The replica with the fewest outstanding requests (running + waiting); ties go to the lowest index.
    LeastOutstanding,
    /// A session's steps all go to the replica its first step went to (chosen by least outstanding); requests
    /// without a session (open-loop, closed-loop users) are routed by least outstanding.
    SessionAffinity,
    /// The replica whose prefix cache holds the longest prefix of the prompt (resident blocks of its content);
    /// when none holds any, or the best one's outstanding requests exceed `load_cap` × the fleet's mean
    /// outstanding, the least outstanding replica. Ties go to the fewer outstanding, then the lowest index.
    PrefixAware,
}

impl Router {
    pub const ALL: [Router; 4] = [
        Router::RoundRobin,
        Router::LeastOutstanding,
        Router::SessionAffinity,
        Router::PrefixAware,
    ];

    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Router::RoundRobin => "round_robin",
            Router::LeastOutstanding => "least_outstanding",
            Router::SessionAffinity => "session_affinity",
            Router::PrefixAware => "prefix_aware",
        }
    }
}

/// `"fleet": {"replicas": R, "router": "...", "load_cap": 1.5}` in an engine scenario.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// Replicas, each an engine with the scenario's `profile`.
    pub replicas: u32,
    pub router: Router,
    /// `prefix_aware` only: the most outstanding requests the cache-best replica may have, as a factor over the
    /// fleet's mean outstanding, before the request goes to the least outstanding replica instead. In `1..=100`.
    #[serde(default = "default_load_cap")]
    pub load_cap: f64,
}

impl FleetSpec {
    /// Checks every field; paths are relative to the fleet (`replicas`, `load_cap`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let f = ScenarioError::field;
        if self.replicas == 0 || self.replicas > MAX_REPLICAS {
            return Err(f(
                "replicas",
                format!("must be in 1..={MAX_REPLICAS} (got {})", self.replicas),
            ));
        }
        if !(self.load_cap.is_finite() && (1.0..=100.0).contains(&self.load_cap)) {
            return Err(f("load_cap", format!("must be in 1..=100 (got {})", self.load_cap)));
        }
        Ok(())
    }
}

/// What one replica carried over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaLoad {
    pub replica: u32,
    /// Requests routed to it that completed.
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens` (0 without prompt tokens).
    pub cached_share: f64,
    /// Time-weighted mean of decoding sequences over the run (Σ batch × step time / run time).
    pub mean_running: f64,
    /// Share of the run's time it was stepping.
    pub busy_share: f64,
    pub max_running: u32,
    pub preemptions: u64,
}

/// The fleet part of an [`super::EngineReport`] (present only for scenarios with more than one replica).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub router: Router,
    pub load_cap: f64,
    pub replicas: Vec<ReplicaLoad>,
}
