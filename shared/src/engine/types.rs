//! What a simulation takes and gives: the [`EngineScenario`], a request's prompt as [`PromptBlocks`], the
//! [`SimOptions`], and the [`EngineReport`] with its [`TimelinePoint`]s. In a file of their own so that the engine's
//! modules (`core`, `sim`) and `engine/mod.rs` all depend on them and none on another in a loop.

use serde::{Deserialize, Serialize};

use super::diagnostics::Diagnostics;
use super::disagg::Disaggregation;
use super::fleet::{FleetReport, FleetSpec};
use super::profile::EngineProfile;
use crate::deploy::Deployment;
use crate::error::ScenarioError;
use crate::metrics::{Slo, Summary};
use crate::record::RequestRecord;
use crate::workload::Workload;

fn yes() -> bool {
    true
}

/// One engine-model experiment: workload + engine profile + SLOs + seed.
///
/// Its JSON gives either `"profile"` or `"deployment"` (a model on a GPU, [`Deployment`]), never both: a deployment
/// is resolved into `profile` as it is read and kept in `deployment`, and written back as the deployment while the
/// profile is still what it resolves to (docs/simulator.md, "Deployments").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "EngineScenarioJson", into = "EngineScenarioJson")]
pub struct EngineScenario {
    pub workload: Workload,
    pub profile: EngineProfile,
    #[serde(default)]
    pub slo: Slo,
    /// Seed of every random draw (arrivals, lengths, session shapes), except the `bursty` trace, which keeps the
    /// seed's own `workload.seed`.
    #[serde(default)]
    pub seed: u64,
    /// Also run the counterfactuals (cache off; closed loop for open-loop workloads). Each costs one more run.
    #[serde(default = "yes")]
    pub counterfactuals: bool,
    /// Replicas behind a router ([`FleetSpec`]); absent: one engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSpec>,
    /// The deployment `profile` was resolved from; absent: the profile was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<Deployment>,
    /// Prefill/decode disaggregation of the fleet ([`Disaggregation`]); in JSON the fleet's `"disaggregation"`.
    /// Absent: every replica prefills and decodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<Disaggregation>,
}

/// [`EngineScenario`] as JSON: `profile` or `deployment`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EngineScenarioJson {
    workload: Workload,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    profile: Option<EngineProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deployment: Option<Deployment>,
    #[serde(default)]
    slo: Slo,
    #[serde(default)]
    seed: u64,
    #[serde(default = "yes")]
    counterfactuals: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetJson>,
}

/// [`FleetSpec`] as a scenario's JSON holds it: its fields and `disaggregation`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetJson {
    replicas: u32,
    router: super::fleet::Router,
    #[serde(default = "default_load_cap")]
    load_cap: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    profiles: Vec<EngineProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disaggregation: Option<Disaggregation>,
}

fn default_load_cap() -> f64 {
    1.5
}

impl TryFrom<EngineScenarioJson> for EngineScenario {
    type Error = String;

    fn try_from(j: EngineScenarioJson) -> Result<Self, String> {
        let (profile, deployment) = match (j.profile, j.deployment) {
            (Some(_), Some(_)) => {
                return Err("give either `profile` or `deployment`, not both".to_string());
            }
            (None, None) => return Err("missing field `profile` (or `deployment`)".to_string()),
            (Some(p), None) => (p, None),
            (None, Some(d)) => {
                let resolved = d.resolve().map_err(|e| e.within("deployment").to_string())?;
                (resolved.profile, Some(d))
            }
        };
        let (fleet, disaggregation) = match j.fleet {
            Some(f) => (
                Some(FleetSpec {
                    replicas: f.replicas,
                    router: f.router,
                    load_cap: f.load_cap,
                    profiles: f.profiles,
                }),
                f.disaggregation,
            ),
            None => (None, None),
        };
        Ok(EngineScenario {
            workload: j.workload,
            profile,
            slo: j.slo,
            seed: j.seed,
            counterfactuals: j.counterfactuals,
            fleet,
            deployment,
            disaggregation,
        })
    }
}

impl From<EngineScenario> for EngineScenarioJson {
    fn from(s: EngineScenario) -> Self {
        // The deployment stands for the profile only while the profile is what it resolves to.
        let deployment = s
            .deployment
            .filter(|d| d.resolve().is_ok_and(|r| r.profile == s.profile));
        let profile = if deployment.is_some() { None } else { Some(s.profile) };
        EngineScenarioJson {
            workload: s.workload,
            profile,
            deployment,
            slo: s.slo,
            seed: s.seed,
            counterfactuals: s.counterfactuals,
            fleet: s.fleet.map(|f| FleetJson {
                replicas: f.replicas,
                router: f.router,
                load_cap: f.load_cap,
                profiles: f.profiles,
                disaggregation: s.disaggregation,
            }),
        }
    }
}

impl EngineScenario {
    /// `workload` on one engine of `profile`, drawn from `seed`: the default SLO and no fleet, deployment or
    /// disaggregation, as a scenario file that leaves them out; no counterfactual runs (a file's default is to
    /// run them).
    pub fn new(workload: Workload, profile: EngineProfile, seed: u64) -> Self {
        EngineScenario {
            workload,
            profile,
            slo: Slo::default(),
            seed,
            counterfactuals: false,
            fleet: None,
            deployment: None,
            disaggregation: None,
        }
    }

    /// Checks every field; paths are relative to the scenario (`workload.rate_rps`, `profile.block_size`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.workload.validate().map_err(|e| e.within("workload"))?;
        self.profile.validate().map_err(|e| e.within("profile"))?;
        self.slo.validate().map_err(|e| e.within("slo"))?;
        validate_fleet(&self.profile, self.fleet.as_ref(), self.disaggregation.as_ref())
    }

    /// Replicas the scenario runs (1 without a fleet).
    pub fn replicas(&self) -> u32 {
        self.fleet.as_ref().map_or(1, |f| f.replicas)
    }

    /// Whether the scenario runs a fleet: more than one replica, or prefill/decode disaggregation.
    pub fn is_fleet(&self) -> bool {
        self.replicas() > 1 || self.disaggregation.is_some()
    }
}

/// A fleet and its disaggregation against the engine profile every replica runs (unless the fleet gives each its
/// own); paths are the scenario's (`fleet.replicas`, `fleet.disaggregation.decode_instances`). What
/// [`EngineScenario::validate`] checks of its fleet, and the sim-server's and `predict`'s `--fleet`.
pub fn validate_fleet(
    profile: &EngineProfile,
    fleet: Option<&FleetSpec>,
    disaggregation: Option<&Disaggregation>,
) -> Result<(), ScenarioError> {
    if let Some(f) = fleet {
        f.validate_with(profile).map_err(|e| e.within("fleet"))?;
    }
    if let Some(dg) = disaggregation {
        let replicas = fleet.map_or(1, |f| f.replicas);
        dg.validate(replicas)
            .and_then(|()| dg.validate_with(profile))
            .map_err(|e| e.within("fleet.disaggregation"))?;
    }
    Ok(())
}

/// A fleet as a scenario's JSON holds it (`{"replicas": …, "router": …, "disaggregation": {…}}`, the value of
/// `"fleet"`), read on its own: a `--fleet FILE`. Unknown fields are refused; [`validate_fleet`] checks the values.
pub fn fleet_from_json(text: &str) -> Result<(FleetSpec, Option<Disaggregation>), String> {
    let f: FleetJson = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok((
        FleetSpec {
            replicas: f.replicas,
            router: f.router,
            load_cap: f.load_cap,
            profiles: f.profiles,
        },
        f.disaggregation,
    ))
}

/// A prompt as the engine sees it: its token count and the chained hashes of its full blocks
/// (hash `i` covers tokens `0..(i+1)·block_size`, so equal hashes mean equal prefixes). Hashes past the prompt may
/// describe output the caller will stream, so that a later prompt which resends it can hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptBlocks {
    pub tokens: u32,
    pub block_hashes: Vec<u64>,
}

impl PromptBlocks {
    /// Chained hashes of `tokens`' full blocks of `block_size` (a trailing partial block has no hash).
    pub fn from_tokens(tokens: &[u32], block_size: u32) -> Self {
        let bs = block_size.max(1) as usize;
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        let block_hashes = tokens
            .chunks_exact(bs)
            .map(|block| {
                for &t in block {
                    h = (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3);
                }
                h = splitmix64(h);
                h
            })
            .collect();
        PromptBlocks {
            tokens: tokens.len().min(u32::MAX as usize) as u32,
            block_hashes,
        }
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One point of the time series for charts. Counters are per interval (since the previous point).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Seconds since the run's origin.
    pub t_s: f64,
    pub running: u32,
    pub queued: u32,
    /// KV blocks referenced by running requests.
    pub kv_blocks_used: u64,
    pub kv_capacity: u64,
    /// Prompt tokens that hit the prefix cache at admissions in this interval.
    pub cache_hit_tokens: u64,
    /// Prompt tokens admitted in this interval.
    pub prompt_tokens: u64,
}

/// Everything [`simulate`](super::simulate) produces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineReport {
    pub records: Vec<RequestRecord>,
    pub summary: Summary,
    pub timeline: Vec<TimelinePoint>,
    pub diagnostics: Diagnostics,
    /// Per-replica load, for a fleet of more than one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetReport>,
}

/// What [`simulate_with`](super::simulate_with) computes beyond the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Each record's own ITL p50, p99 and max (`RequestRecord::itl`). They read every stretch of the request (and
    /// the quantiles sort them); nothing in the summary uses them (its ITL figures weigh each request's mean), so a
    /// caller that only shows the summary (the page) can skip them: its records then hold `NaN` there.
    pub record_itl_quantiles: bool,
    /// Keep every record in [`EngineReport::records`]. Without them the records are scored as they complete and
    /// dropped (the summary is the same to the bit), and `records` is empty: a million-request run then holds a
    /// few numbers per request instead of the whole record.
    pub keep_records: bool,
}

impl SimOptions {
    /// Only the summary: no records and none of their own ITL figures (what counterfactual runs need).
    pub const SUMMARY: SimOptions = SimOptions {
        record_itl_quantiles: false,
        keep_records: false,
    };
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            record_itl_quantiles: true,
            keep_records: true,
        }
    }
}
