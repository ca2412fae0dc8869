//! GPUs and money at an SLO: the fewest replicas of a deployment that keep a goodput [`Goal`] at a scenario's own
//! load, and what that fleet costs per agent session and per million tokens (docs/capacity.md, "Replicas for an
//! SLO").
//!
//! Stages, per seed (the scenario's seed, then the next ones):
//! 1. `search`: from a start (1 for the first seed, the previous seed's answer after), step the replica count by
//!    1, 2, 4, … (up while the goal fails, down while it passes) until the answer changes, then bisect between the
//!    most failing and the fewest passing counts: from 1 this is doubling then bisection;
//! 2. [`run_level`]: each count is the scenario with `"fleet": {"replicas": R, "router": …}`, simulated and scored
//!    by [`crate::capacity::score_level`] (the steady-state window, the one scorer);
//! 3. [`cost()`]: the passing fleet's whole run priced at `gpu_hour_price` per GPU-hour, GPUs = replicas × TP.
//!
//! The seed band is the answer's uncertainty: [`Band`] gives the minimum, nearest-rank median and maximum of every
//! figure over the seeds.

use serde::{Deserialize, Serialize};

use crate::capacity::{self, EngineSide, Goal, Window};
use crate::engine::{self, EngineScenario, FleetSpec, Router, SimOptions};
use crate::error::ScenarioError;
use crate::metrics::{self, Summary};
use crate::scenario::Scenario;

/// Largest `max_replicas` accepted (the fleet's own limit).
pub const MAX_REPLICAS: u32 = crate::engine::fleet::MAX_REPLICAS;
/// Most seeds a search runs.
pub const MAX_SEEDS: u32 = 100;

/// What a replicas search is asked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSpec {
    pub goal: Goal,
    pub window: Window,
    pub router: Router,
    /// `prefix_aware`'s `load_cap`.
    pub load_cap: f64,
    /// Most replicas tried; a goal not met there is reported as not met.
    pub max_replicas: u32,
    /// Seeds run (the scenario's, then the next ones).
    pub seeds: u32,
    /// Price of one GPU for one hour; `None`: no cost figures.
    pub gpu_hour_price: Option<f64>,
}

/// One count tried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tried {
    pub replicas: u32,
    pub pass: bool,
    pub attainment: f64,
}

/// What the passing fleet's whole run costs (`gpu_hour_price` given).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// GPUs × price × the run's hours.
    pub run_cost: f64,
    /// `run_cost / sessions` (`None` without sessions).
    pub per_session: Option<f64>,
    /// `run_cost / completed requests`.
    pub per_request: Option<f64>,
    /// `run_cost / (prompt + output tokens) × 1e6`.
    pub per_million_tokens: Option<f64>,
    /// `run_cost / output tokens × 1e6`.
    pub per_million_output_tokens: Option<f64>,
}

/// One seed's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedAnswer {
    pub seed: u64,
    /// The fewest replicas that meet the goal; `None`: not met with `max_replicas`.
    pub replicas: Option<u32>,
    /// `replicas × tp`.
    pub gpus: Option<u32>,
    /// Every count run, in order.
    pub tried: Vec<Tried>,
    /// The passing fleet's whole run: first submission to last completion, seconds.
    pub run_s: Option<f64>,
    pub sessions: Option<u64>,
    pub requests: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
}

/// Minimum, nearest-rank median and maximum over the seeds that have the figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Band {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Band {
    /// `None` when no value.
    pub fn of(values: impl Iterator<Item = f64>) -> Option<Band> {
        let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Some(Band {
            min: *v.first()?,
            median: metrics::nearest_rank(&v, 0.5)?,
            max: *v.last()?,
        })
    }
}

/// Everything the search reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaReport {
    pub goal: Goal,
    pub router: Router,
    /// GPUs per replica (the deployment's TP degree).
    pub tp: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_hour_price: Option<f64>,
    pub seeds: Vec<SeedAnswer>,
    /// Over the seeds whose goal was met.
    pub replicas: Option<Band>,
    pub gpus: Option<Band>,
    pub cost_per_session: Option<Band>,
    pub cost_per_million_tokens: Option<Band>,
    pub cost_per_million_output_tokens: Option<Band>,
    /// Simulations run over all seeds.
    pub levels_run: usize,
    pub notes: Vec<String>,
}

impl ReplicaSpec {
    /// Field paths are relative (`gpu_hour_price`, `goal.attainment`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.goal.validate().map_err(|e| e.within("goal"))?;
        self.window.validate().map_err(|e| e.within("window"))?;
        if self.max_replicas == 0 || self.max_replicas > MAX_REPLICAS {
            return Err(ScenarioError::field(
                "max_replicas",
                format!("must be in 1..={MAX_REPLICAS} (got {})", self.max_replicas),
            ));
        }
        if self.seeds == 0 || self.seeds > MAX_SEEDS {
            return Err(ScenarioError::field(
                "seeds",
                format!("must be in 1..={MAX_SEEDS} (got {})", self.seeds),
            ));
        }
        if let Some(p) = self.gpu_hour_price
            && !(p.is_finite() && p > 0.0)
        {
            return Err(ScenarioError::field(
                "gpu_hour_price",
                format!("must be a positive amount per GPU-hour (got {p})"),
            ));
        }
        Ok(())
    }
}

/// The GPUs of one replica: the deployment's TP degree. A scenario given by `profile` has no GPU count.
pub fn gpus_per_replica(s: &EngineScenario) -> Result<u32, ScenarioError> {
    match &s.deployment {
        Some(d) => Ok(d.tp.unwrap_or(1)),
        None => Err(ScenarioError::field(
            "deployment",
            "is needed to count GPUs (GPUs = replicas x tp): give the scenario a \"deployment\" (a model on a GPU at \
             a TP degree, docs/simulator.md \"Deployments\") instead of a \"profile\"",
        )),
    }
}

/// The whole search over `spec.seeds` seeds (see the module docs).
pub fn fewest_replicas(s: &EngineScenario, spec: &ReplicaSpec) -> Result<ReplicaReport, ScenarioError> {
    spec.validate()?;
    s.validate()?;
    let tp = gpus_per_replica(s)?;
    if let Some(f) = &s.fleet
        && !f.profiles.is_empty()
    {
        return Err(ScenarioError::field(
            "fleet.profiles",
            "a fleet whose replicas differ cannot be scaled: leave `profiles` out",
        ));
    }
    let mut seeds = Vec::new();
    let mut start = 1u32;
    let mut levels_run = 0;
    for i in 0..spec.seeds {
        let mut sc = s.clone();
        sc.seed = s.seed.wrapping_add(u64::from(i));
        let (answer, runs) = search(&sc, spec, tp, start)?;
        levels_run += runs;
        if let Some(r) = answer.replicas {
            start = r;
        }
        seeds.push(answer);
    }
    Ok(report(spec, tp, seeds, levels_run))
}

/// One seed: the fewest passing replicas by stepping from `start` (1, 2, 4, … away from it) and bisection;
/// returns the answer and how many counts it simulated.
fn search(s: &EngineScenario, spec: &ReplicaSpec, tp: u32, start: u32) -> Result<(SeedAnswer, usize), ScenarioError> {
    let max = spec.max_replicas;
    let mut tried: Vec<Tried> = Vec::new();
    let mut pass_run: Option<Summary> = None;
    // `fail`: the most replicas known to fail; `pass`: the fewest known to pass.
    let (mut fail, mut pass): (u32, Option<u32>) = (0, None);
    let mut next = start.clamp(1, max);
    let mut step = 1u32;
    loop {
        let (level, whole) = run_level(s, spec, next)?;
        tried.push(Tried {
            replicas: next,
            pass: level.pass,
            attainment: level.attainment,
        });
        if level.pass {
            pass = Some(next);
            pass_run = Some(whole);
        } else {
            fail = fail.max(next);
        }
        next = match pass {
            // Bisect once both sides are known.
            Some(p) if fail > 0 || p == 1 => {
                if p - fail <= 1 {
                    break;
                }
                fail + (p - fail) / 2
            }
            // Passing: step down.
            Some(p) => {
                let n = p.saturating_sub(step).max(1);
                step = step.saturating_mul(2);
                n
            }
            // Failing: step up.
            None => {
                if fail >= max {
                    break;
                }
                let n = fail.saturating_add(step).min(max);
                step = step.saturating_mul(2);
                n
            }
        };
    }
    let runs = tried.len();
    let whole = pass_run.filter(|_| pass.is_some());
    let gpus = pass.map(|r| r.saturating_mul(tp));
    let cost = match (&whole, gpus, spec.gpu_hour_price) {
        (Some(w), Some(g), Some(price)) => Some(cost(w, g, price)),
        _ => None,
    };
    Ok((
        SeedAnswer {
            seed: s.seed,
            replicas: pass,
            gpus,
            tried,
            run_s: whole.as_ref().map(|w| w.duration_s),
            sessions: whole.as_ref().map(|w| w.sessions),
            requests: whole.as_ref().map(|w| w.completed),
            prompt_tokens: whole.as_ref().map(|w| w.total_input_tokens),
            output_tokens: whole.as_ref().map(|w| w.total_output_tokens),
            cost,
        },
        runs,
    ))
}

/// The scenario on `replicas` replicas, simulated: the steady-state level (is the goal met?) and the whole run's
/// summary (what it cost).
pub fn run_level(
    s: &EngineScenario,
    spec: &ReplicaSpec,
    replicas: u32,
) -> Result<(capacity::Level, Summary), ScenarioError> {
    let sc = EngineScenario {
        fleet: Some(FleetSpec {
            replicas,
            router: spec.router,
            load_cap: spec.load_cap,
            profiles: Vec::new(),
        }),
        counterfactuals: false,
        ..s.clone()
    };
    Scenario::Engine(sc.clone())
        .check_size(true, &crate::budget::Budget::DEFAULT)
        .map_err(|e| ScenarioError::field("scenario", format!("is too large to simulate: {e}")))?;
    let report = engine::simulate_with(
        &sc,
        SimOptions {
            record_itl_quantiles: false,
            keep_records: true,
        },
    )?;
    let kv = &report.diagnostics.kv_thrash;
    let side = EngineSide {
        kv_peak_use: (kv.kv_capacity_blocks > 0).then(|| kv.peak_kv_blocks_used as f64 / kv.kv_capacity_blocks as f64),
        preemptions: Some(kv.preemptions),
    };
    let level = capacity::score_level(
        f64::from(replicas),
        &report.records,
        &spec.goal,
        &spec.window,
        capacity::ramp_s(&sc.workload),
        side,
    );
    Ok((level, report.summary))
}

/// A whole run's cost on `gpus` GPUs at `price` per GPU-hour (see [`Cost`]).
pub fn cost(whole: &Summary, gpus: u32, price: f64) -> Cost {
    let run_cost = f64::from(gpus) * price * whole.duration_s / 3600.0;
    let per = |n: u64, scale: f64| (n > 0).then(|| run_cost / n as f64 * scale);
    Cost {
        run_cost,
        per_session: per(whole.sessions, 1.0),
        per_request: per(whole.completed, 1.0),
        per_million_tokens: per(whole.total_input_tokens + whole.total_output_tokens, 1e6),
        per_million_output_tokens: per(whole.total_output_tokens, 1e6),
    }
}

fn report(spec: &ReplicaSpec, tp: u32, seeds: Vec<SeedAnswer>, levels_run: usize) -> ReplicaReport {
    let mut notes = Vec::new();
    let unmet: Vec<String> = seeds
        .iter()
        .filter(|a| a.replicas.is_none())
        .map(|a| a.seed.to_string())
        .collect();
    if !unmet.is_empty() {
        notes.push(format!(
            "the goal is not met with {} replicas at seed(s) {}: the bands are over the other seeds (raise \
             --max-replicas, or the load is beyond what replicas fix: a single request misses the goal)",
            spec.max_replicas,
            unmet.join(", ")
        ));
    }
    let band = |f: &dyn Fn(&SeedAnswer) -> Option<f64>| Band::of(seeds.iter().filter_map(f));
    ReplicaReport {
        goal: spec.goal,
        router: spec.router,
        tp,
        gpu_hour_price: spec.gpu_hour_price,
        replicas: band(&|a| a.replicas.map(f64::from)),
        gpus: band(&|a| a.gpus.map(f64::from)),
        cost_per_session: band(&|a| a.cost.and_then(|c| c.per_session)),
        cost_per_million_tokens: band(&|a| a.cost.and_then(|c| c.per_million_tokens)),
        cost_per_million_output_tokens: band(&|a| a.cost.and_then(|c| c.per_million_output_tokens)),
        seeds,
        levels_run,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_gpus_times_price_times_hours_over_the_work() {
        let s = Summary {
            duration_s: 1800.0,
            sessions: 10,
            completed: 200,
            total_input_tokens: 900_000,
            total_output_tokens: 100_000,
            ..Summary::default()
        };
        // 4 GPUs × 2.5 / h × 0.5 h = 5.
        let c = cost(&s, 4, 2.5);
        assert_eq!(c.run_cost, 5.0);
        assert_eq!(c.per_session, Some(0.5));
        assert_eq!(c.per_request, Some(0.025));
        assert_eq!(c.per_million_tokens, Some(5.0));
        assert_eq!(c.per_million_output_tokens, Some(50.0));
    }

    #[test]
    fn band_is_min_nearest_rank_median_max() {
        let b = Band::of([3.0, 1.0, 2.0, 4.0].into_iter()).unwrap_or_else(|| panic!("band"));
        assert_eq!((b.min, b.median, b.max), (1.0, 2.0, 4.0));
        assert!(Band::of(std::iter::empty()).is_none());
    }
}
