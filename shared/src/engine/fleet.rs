//! Fleets: R replicas of one engine profile behind a router ([`FleetSpec`], [`Router`]), and what each replica
//! carried ([`FleetReport`], [`ReplicaLoad`]).
//!
//! Every replica is its own [`super::Engine`] with its own KV cache and prefix cache: content computed on one
//! replica is a miss on another. The simulation loop routes each request when it is sent, from the replicas'
//! state at that moment (see `sim.rs`). A scenario without `fleet` (or with one replica) is the single-engine
//! model, to the byte.
//!
//! **One place for routing decisions:** [`FleetSpec::pick`] is the policy. The simulator calls it with each
//! replica's outstanding requests and resident prefix (read from its engines); live `replay` over several URLs
//! calls it with the requests it has in flight at each URL and its own view of what it sent there
//! ([`PrefixView`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::profile::EngineProfile;
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

/// `"fleet": {"replicas": R, "router": "...", "load_cap": 1.5, "profiles": [...]}` in an engine scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// Replicas, each an engine with the scenario's `profile` (or its own, `profiles`).
    pub replicas: u32,
    pub router: Router,
    /// `prefix_aware` only: the most outstanding requests the cache-best replica may have, as a factor over the
    /// fleet's mean outstanding, before the request goes to the least outstanding replica instead. In `1..=100`.
    #[serde(default = "default_load_cap")]
    pub load_cap: f64,
    /// One engine profile per replica, in order (a fleet whose replicas differ: other GPUs, other settings);
    /// absent or empty: every replica runs the scenario's `profile`. Its length must equal `replicas`, and every
    /// profile's `block_size` the scenario profile's (the router compares prefixes in blocks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<EngineProfile>,
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
        if !self.profiles.is_empty() && self.profiles.len() != self.replicas as usize {
            return Err(f(
                "profiles",
                format!(
                    "must hold one profile per replica: {} (got {}; leave it out for every replica to run the \
                     scenario's profile)",
                    self.replicas,
                    self.profiles.len()
                ),
            ));
        }
        for (i, p) in self.profiles.iter().enumerate() {
            p.validate().map_err(|e| e.within(&format!("profiles[{i}]")))?;
        }
        Ok(())
    }

    /// [`Self::validate`], and each of `profiles` against the scenario's `profile` (same `block_size`).
    pub fn validate_with(&self, profile: &EngineProfile) -> Result<(), ScenarioError> {
        self.validate()?;
        for (i, p) in self.profiles.iter().enumerate() {
            if p.block_size != profile.block_size {
                return Err(ScenarioError::field(
                    format!("profiles[{i}].block_size"),
                    format!(
                        "must equal the scenario's profile.block_size {} (got {}): the router compares prefixes \
                         in blocks",
                        profile.block_size, p.block_size
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Replica `r`'s profile: its own in `profiles`, else `default` (the scenario's).
    pub fn profile_of<'a>(&'a self, r: usize, default: &'a EngineProfile) -> &'a EngineProfile {
        self.profiles.get(r).unwrap_or(default)
    }
}

/// A session's replica before its first request was routed (see [`FleetSpec::pick`]'s `affinity`).
pub const UNROUTED: u32 = u32::MAX;

impl FleetSpec {
    /// The replica a request goes to, by [`Self::router`]: `sent` is how many requests were routed before this
    /// one (round robin), `outstanding[r]` replica `r`'s requests in flight (running + waiting), `cached[r]` the
    /// leading prompt blocks replica `r` holds (only `prefix_aware` reads it), `affinity` the replica of the
    /// request's session ([`UNROUTED`] before its first request: then set to the choice; `None` for requests
    /// without a session). Ties go to the fewer outstanding, then the lowest index. `outstanding` and `cached`
    /// have one entry per replica (at least one).
    pub fn pick(&self, sent: u64, outstanding: &[u64], cached: &[u64], affinity: Option<&mut u32>) -> usize {
        let n = outstanding.len().max(1);
        let least = || (0..outstanding.len()).min_by_key(|&r| (outstanding[r], r)).unwrap_or(0);
        match self.router {
            Router::RoundRobin => (sent % n as u64) as usize,
            Router::LeastOutstanding => least(),
            Router::SessionAffinity => match affinity {
                Some(a) if *a != UNROUTED && (*a as usize) < outstanding.len() => *a as usize,
                Some(a) => {
                    let r = least();
                    *a = r as u32;
                    r
                }
                None => least(),
            },
            Router::PrefixAware => {
                let cached_at = |r: usize| cached.get(r).copied().unwrap_or(0);
                let best = (0..outstanding.len())
                    .min_by_key(|&r| (std::cmp::Reverse(cached_at(r)), outstanding[r], r))
                    .unwrap_or(0);
                let total: u64 = outstanding.iter().sum();
                let mean = total as f64 / n as f64;
                if cached_at(best) == 0 || outstanding[best] as f64 > self.load_cap * mean {
                    least()
                } else {
                    best
                }
            }
        }
    }
}

/// A client's view of the replicas' prefix caches, for `prefix_aware` routing where the replicas' own caches
/// cannot be read (live `replay` over several URLs): per replica, the chained block hashes of the prompts sent
/// to it, least recently sent first out once it holds `capacity_blocks`. It approximates the server's cache: it
/// does not see the server's own evictions (a busy replica may have dropped what the view still lists), and it
/// counts what was sent, not what the server computed (a request that failed early still counts).
#[derive(Debug, Clone)]
pub struct PrefixView {
    capacity_blocks: usize,
    replicas: Vec<LruSet>,
}

#[derive(Debug, Clone, Default)]
struct LruSet {
    tick: u64,
    /// Hash → the tick it was last sent at.
    last: HashMap<u64, u64>,
    /// Tick → hash, oldest first.
    order: BTreeMap<u64, u64>,
}

impl PrefixView {
    /// `replicas` empty caches of `capacity_blocks` blocks each (at least 1).
    pub fn new(replicas: usize, capacity_blocks: usize) -> Self {
        PrefixView {
            capacity_blocks: capacity_blocks.max(1),
            replicas: vec![LruSet::default(); replicas],
        }
    }

    /// Per replica, how many leading blocks of `hashes` (chained: hash `i` covers blocks `0..=i`) it holds.
    pub fn cached_blocks(&self, hashes: &[u64], out: &mut Vec<u64>) {
        out.clear();
        for set in &self.replicas {
            let n = hashes.iter().take_while(|h| set.last.contains_key(h)).count();
            out.push(n as u64);
        }
    }

    /// `hashes` were sent to `replica`: they become its most recently used blocks, and its oldest go past the
    /// capacity.
    pub fn sent(&mut self, replica: usize, hashes: &[u64]) {
        let cap = self.capacity_blocks;
        let Some(set) = self.replicas.get_mut(replica) else {
            return;
        };
        for &h in hashes {
            set.tick += 1;
            if let Some(old) = set.last.insert(h, set.tick) {
                set.order.remove(&old);
            }
            set.order.insert(set.tick, h);
        }
        while set.last.len() > cap {
            let Some((_, h)) = set.order.pop_first() else { break };
            set.last.remove(&h);
        }
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
    /// Its profile's name, when the fleet gives each replica its own (`fleet.profiles`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// The fleet part of an [`super::EngineReport`] (present only for scenarios with more than one replica).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub router: Router,
    pub load_cap: f64,
    pub replicas: Vec<ReplicaLoad>,
}
