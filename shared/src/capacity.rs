//! Capacity search: the most load — agent sessions, closed-loop users, or an open-loop rate — a deployment serves
//! while meeting a goodput [`Goal`], found by doubling then bisection to a stated resolution.
//!
//! Principal types:
//! - [`Knob`]: which number of the workload is scaled ([`Knob::of`] picks the workload's own when none is asked).
//! - [`Goal`]: vLLM-style goodput constraints (`ttft_ms`, `tpot_ms`, `e2e_ms`; each optional, at least one) and an
//!   attainment target per request or per session (default: ≥ 95 % of requests meet every constraint).
//! - [`Search`]: the search as a state machine — [`Search::next_level`] says which load to run, [`Search::record`]
//!   takes whether it met the goal. The simulated search ([`search_simulated`]) and the agent's live search drive
//!   the same machine, so they take the same steps for the same answers.
//! - [`score_level`]: one level's records → a [`Level`] (the steady-state window, the summary from
//!   [`crate::metrics::summarize`] — the one scorer —, the goal check, the [`Saturation`] class).
//! - [`CapacityReport`]: the capacity, the knob, and every level in the order run.
//!
//! **Strategies.** [`Strategy::Doubling`] (no guide; GuideLLM's SLO search does the same): run the start load,
//! then double while levels pass (halve while they fail) until one passes and one fails, then bisect between the
//! highest passing and the lowest failing load until they are at most `resolution` apart. [`Strategy::Bracket`]
//! (guided by a predicted capacity `g`): run `g`, then step away from it by `resolution`, `2·resolution`,
//! `4·resolution`, … (up while passing, down while failing) until the answer changes, then bisect. When the
//! prediction is right the guided search needs two levels: `g` passes and `g + resolution` fails.
//!
//! **Capacity** is the highest passing load below the lowest failing one (`None` when even the lowest load run
//! fails). Attainment is assumed to fall as load rises; a passing level above a failing one is reported in
//! [`CapacityReport::notes`] and does not move the answer.
//!
//! Everything here is deterministic: the same scenario and spec give the same report on native and wasm.

use serde::{Deserialize, Serialize};

use crate::engine::{self, EngineScenario, SimOptions};
use crate::error::ScenarioError;
use crate::metrics::{self, RecordOutcome, Slo, Summary};
use crate::record::RequestRecord;
use crate::scenario::Scenario;
use crate::workload::Workload;

/// The number of a workload a capacity search scales.
///
/// Adding a knob is a variant here, its name in [`Knob::name`] and [`Knob::ALL`], and one arm in `Knob::slot`;
/// reading, writing, rounding, the default knob and the error for a workload without it all go through `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// Concurrent agent sessions (`sessions` workload: `sessions`, or the ladder's rungs cycled to that many slots).
    Sessions,
    /// Closed-loop users (`closed_loop` workload: `users`).
    Users,
    /// Open-loop arrival rate, requests per second (`poisson`/`gamma`: `rate_rps`; `bursty`: `mean_rps`).
    RateRps,
    /// A trace's speed-up, `1 / time_scale` (`trace` workload): 2 replays the trace twice as fast (its arrival
    /// times and dependency delays halved). Inverted so that load grows with the knob, as with every other knob:
    /// a larger `time_scale` stretches the trace and lowers the load.
    Speedup,
}

/// Where a knob's value lives in a workload.
enum Slot<'a> {
    /// A whole number of at least 1.
    Count(&'a mut u32),
    /// A positive real number.
    Real(&'a mut f64),
    /// Session slots: `sessions`, or with a ladder its rungs, cycled (slot `i` runs rung `i % len`, as a replay
    /// does).
    Sessions(&'a mut crate::workload::SessionWorkload),
    /// A trace's speed-up (`1 / time_scale`): setting it rescales the requests' times.
    Trace(&'a mut crate::workload::trace::TraceWorkload),
}

impl Knob {
    /// Every knob, for error messages and menus.
    pub const ALL: [Knob; 4] = [Knob::Sessions, Knob::Users, Knob::RateRps, Knob::Speedup];

    /// The name used in JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Sessions => "sessions",
            Knob::Users => "users",
            Knob::RateRps => "rate_rps",
            Knob::Speedup => "speedup",
        }
    }

    /// Parse a knob name (`sessions`, `users`, `rate_rps`, `speedup`); the error names the field `knob`.
    pub fn parse(name: &str) -> Result<Knob, ScenarioError> {
        Knob::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let hint = if name == "time_scale" {
                " (a trace's time_scale is searched as \"speedup\" = 1 / time_scale, so that load grows with it)"
            } else {
                ""
            };
            ScenarioError::field(
                "knob",
                format!(
                    "must be one of {} (got \"{name}\"){hint}",
                    Knob::ALL.map(|k| format!("\"{}\"", k.name())).join(", ")
                ),
            )
        })
    }

    fn slot(self, w: &mut Workload) -> Option<Slot<'_>> {
        match (self, w) {
            (Knob::Sessions, Workload::Sessions(s)) => Some(Slot::Sessions(s)),
            (Knob::Users, Workload::ClosedLoop(c)) => Some(Slot::Count(&mut c.users)),
            (Knob::RateRps, Workload::Poisson(p)) => Some(Slot::Real(&mut p.rate_rps)),
            (Knob::RateRps, Workload::Gamma(g)) => Some(Slot::Real(&mut g.rate_rps)),
            (Knob::RateRps, Workload::Bursty(b)) => Some(Slot::Real(&mut b.mean_rps)),
            (Knob::Speedup, Workload::Trace(t)) => Some(Slot::Trace(t)),
            _ => None,
        }
    }

    /// The knob a workload scales by default: `sessions`, `users`, `rate_rps` or (a trace) `speedup`.
    pub fn of(w: &Workload) -> Option<Knob> {
        let mut w = w.clone();
        Knob::ALL.into_iter().find(|k| k.slot(&mut w).is_some())
    }

    /// Whether loads of this knob are whole numbers.
    pub fn is_count(self) -> bool {
        matches!(self, Knob::Sessions | Knob::Users)
    }

    fn missing(self, w: &Workload) -> ScenarioError {
        let has = Knob::of(w).map_or_else(|| "none".to_string(), |k| format!("\"{}\"", k.name()));
        ScenarioError::field(
            "knob",
            format!(
                "\"{}\" is not a knob of a {} workload (its knob: {has})",
                self.name(),
                w.kind()
            ),
        )
    }

    /// The knob's value in `w`; an error naming `knob` when `w` has no such number.
    pub fn get(self, w: &Workload) -> Result<f64, ScenarioError> {
        let mut c = w.clone();
        match self.slot(&mut c) {
            Some(Slot::Count(n)) => Ok(f64::from(*n)),
            Some(Slot::Real(x)) => Ok(*x),
            Some(Slot::Sessions(s)) => Ok(f64::from(s.slot_count())),
            Some(Slot::Trace(t)) => Ok(1.0 / t.time_scale.unwrap_or(1.0)),
            None => Err(self.missing(w)),
        }
    }

    /// `w` with the knob set to `level` (counts rounded to the nearest whole number, at least 1); everything else
    /// unchanged. With a ladder, `sessions = n` keeps the first `n` slots of the cycled ladder. A trace's
    /// `speedup = s` sets `time_scale = 1 / s` and multiplies its requests' `arrival_ms` and `delay_ms` by
    /// `old time_scale / new time_scale` (the requests hold times already scaled when a trace file was read), so
    /// the scenario's own speed-up leaves it unchanged.
    pub fn set(self, w: &Workload, level: f64) -> Result<Workload, ScenarioError> {
        let mut out = w.clone();
        let count = level.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        match self.slot(&mut out) {
            Some(Slot::Count(n)) => *n = count,
            Some(Slot::Real(x)) => *x = level,
            Some(Slot::Sessions(s)) => {
                if let Some(l) = s.ladder.as_mut().filter(|l| !l.rungs.is_empty()) {
                    let rungs = l.rungs.clone();
                    l.rungs = rungs.iter().cycle().take(count as usize).copied().collect();
                }
                s.sessions = count;
            }
            Some(Slot::Trace(t)) => {
                if !(level.is_finite() && level > 0.0) {
                    return Err(ScenarioError::field(
                        "knob",
                        format!("speedup must be a positive number (got {level})"),
                    ));
                }
                let old = t.time_scale.unwrap_or(1.0);
                let new = 1.0 / level;
                let factor = new / old;
                if factor != 1.0 {
                    for r in &mut t.requests {
                        r.arrival_ms *= factor;
                        r.delay_ms *= factor;
                    }
                }
                t.time_scale = Some(new);
            }
            None => return Err(self.missing(w)),
        }
        Ok(out)
    }
}

/// Whether the attainment target is over requests or over sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// [`Summary::slo_attainment_ratio`]: requests that met every constraint / all requests.
    #[default]
    Request,
    /// [`Summary::session_attainment_ratio`]: sessions whose every step met every constraint / all sessions.
    Session,
}

fn default_attainment() -> f64 {
    0.95
}

/// What "served within its SLOs" means: vLLM's goodput constraints (`--goodput ttft:… tpot:… e2el:…`, each a
/// `<=` bound in milliseconds; a missing one is not checked) and the share of requests (or sessions) that must
/// meet all of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
    /// In (0, 1]; default 0.95.
    #[serde(default = "default_attainment")]
    pub attainment: f64,
    #[serde(default)]
    pub per: Per,
}

impl Goal {
    /// A scenario's SLOs as a goal: every target it states, 95 % of requests.
    pub fn from_slo(slo: &Slo) -> Goal {
        Goal {
            ttft_ms: Some(slo.ttft_ms),
            tpot_ms: Some(slo.tpot_ms),
            e2e_ms: slo.e2e_ms,
            attainment: default_attainment(),
            per: Per::Request,
        }
    }

    /// At least one constraint, each a positive number of milliseconds; attainment in (0, 1]. Paths are relative
    /// (`attainment`, `ttft_ms`); see [`ScenarioError::within`].
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.ttft_ms.is_none() && self.tpot_ms.is_none() && self.e2e_ms.is_none() {
            return Err(ScenarioError::field(
                "constraints",
                "must name at least one of ttft_ms, tpot_ms, e2e_ms (got none)",
            ));
        }
        for (name, v) in [
            ("ttft_ms", self.ttft_ms),
            ("tpot_ms", self.tpot_ms),
            ("e2e_ms", self.e2e_ms),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(ScenarioError::field(
                    name,
                    format!("must be a positive number of milliseconds (got {v})"),
                ));
            }
        }
        if !(self.attainment > 0.0 && self.attainment <= 1.0) {
            return Err(ScenarioError::field(
                "attainment",
                format!("must be in (0, 1] (got {})", self.attainment),
            ));
        }
        Ok(())
    }

    /// The constraints as the scorer's [`Slo`] (a constraint not given is `+∞`: always met).
    pub fn slo(&self) -> Slo {
        Slo {
            ttft_ms: self.ttft_ms.unwrap_or(f64::INFINITY),
            tpot_ms: self.tpot_ms.unwrap_or(f64::INFINITY),
            e2e_ms: self.e2e_ms,
        }
    }

    /// The attainment the goal is judged on.
    pub fn attained(&self, s: &Summary) -> f64 {
        match self.per {
            Per::Request => s.slo_attainment_ratio,
            Per::Session => s.session_attainment_ratio,
        }
    }

    /// Whether a level's summary meets the goal: something completed and attainment ≥ the target.
    pub fn met(&self, s: &Summary) -> bool {
        s.completed > 0 && self.attained(s) >= self.attainment
    }

    /// A level is *clearly failing* — a live level may stop early — once at least [`EARLY_STOP_MIN_SCORED`]
    /// scored requests are in and the share that missed is at least `max(0.5, 2 · (1 − attainment))`: ten
    /// times the misses a 95 % goal allows, so noise in the first requests does not end a passing level.
    pub fn clearly_failing(&self, scored: u64, missed: u64) -> bool {
        scored >= EARLY_STOP_MIN_SCORED && missed as f64 >= scored as f64 * (2.0 * (1.0 - self.attainment)).max(0.5)
    }
}

/// Scored requests a level needs before [`Goal::clearly_failing`] may stop it.
pub const EARLY_STOP_MIN_SCORED: u64 = 20;

/// The steady-state window: which of a level's records are scored.
///
/// With `t0` the level's first submission and `t1` its end (`end_s` after `t0` when given — a live level's
/// duration —, else its last submission): a record is scored when it was submitted in `[t0 + warm-up, t1]` and
/// was not cut by the end of the run. The warm-up is `max(warmup_fraction · (t1 − t0), ramp)` capped at half the
/// span, where the ramp is the time a sessions workload takes to start all its slots (`stagger_s · (slots − 1)`):
/// requests of the warm-up saw an engine still filling up. The drain is excluded twice over: nothing submitted
/// after `t1` is scored, and requests cut at the end are neither goodput nor misses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Window {
    pub warmup_fraction: f64,
    /// The level's end, seconds after its first submission; `None`: its last submission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            warmup_fraction: 0.2,
            end_s: None,
        }
    }
}

impl Window {
    /// `warmup_fraction` in [0, 0.9]; `end_s` positive.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !(0.0..=0.9).contains(&self.warmup_fraction) {
            return Err(ScenarioError::field(
                "warmup_fraction",
                format!("must be in [0, 0.9] (got {})", self.warmup_fraction),
            ));
        }
        if let Some(e) = self.end_s
            && !(e.is_finite() && e > 0.0)
        {
            return Err(ScenarioError::field(
                "end_s",
                format!("must be a positive number of seconds (got {e})"),
            ));
        }
        Ok(())
    }

    /// The scored span `[from, to]` in the records' own clock, for records whose first submission is `t0` and
    /// last `t_last`, of a workload that ramps up over `ramp_s`.
    pub fn span(&self, t0: f64, t_last: f64, ramp_s: f64) -> (f64, f64) {
        let t1 = self.end_s.map_or(t_last, |e| t0 + e);
        let span = (t1 - t0).max(0.0);
        let warm = (self.warmup_fraction * span).max(ramp_s).min(0.5 * span);
        (t0 + warm, t1)
    }
}

/// Seconds a workload takes to start all its load (sessions: `stagger_s` per slot; others: 0).
pub fn ramp_s(w: &Workload) -> f64 {
    match w {
        Workload::Sessions(s) => s.stagger_s * f64::from(s.slot_count().saturating_sub(1)),
        _ => 0.0,
    }
}

/// How a level behaved, from its scored records.
///
/// - **overloaded**: the server shed or redid work — a request in the window failed (not cut by the end), or the
///   engine preempted running requests (simulated; live when the server's `/metrics` reports preemptions).
/// - **backlogged**: no work lost, but a queue builds: the median TTFT of the window's last third of submissions
///   exceeds 1.5 × the first third's plus 50 ms. Open-loop traffic above the service rate shows it; closed
///   systems (sessions, users) wait for their own replies and so cannot backlog without bound.
/// - **stable**: neither. Stable says the level reached a steady state, not that it met the goal: a closed
///   system past its capacity is stable with a slow TTFT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Saturation {
    Stable,
    Backlogged,
    Overloaded,
}

impl Saturation {
    pub fn name(self) -> &'static str {
        match self {
            Saturation::Stable => "stable",
            Saturation::Backlogged => "backlogged",
            Saturation::Overloaded => "overloaded",
        }
    }
}

/// What the server (or the engine) reports about a level beyond the records.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EngineSide {
    /// Peak KV blocks in use / capacity, in [0, 1].
    pub kv_peak_use: Option<f64>,
    /// Running requests preempted during the level.
    pub preemptions: Option<u64>,
}

/// One load level: what ran and how it scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "LevelFields")]
pub struct Level {
    /// The knob's value.
    pub load: f64,
    /// Whether the level met the goal.
    pub pass: bool,
    /// The goal's attainment at this level (per request or per session).
    pub attainment: f64,
    /// The scored records' summary ([`crate::metrics::summarize`] against the goal's constraints).
    pub summary: Summary,
    pub saturation: Saturation,
    #[serde(flatten)]
    pub engine: EngineSide,
    /// Records scored (in the steady-state window) and left out (warm-up, drain, cut).
    pub scored: u64,
    pub excluded: u64,
    /// The scored span, seconds from the level's first submission.
    pub window_s: (f64, f64),
    /// A live level stopped once it was clearly failing ([`Goal::clearly_failing`]).
    #[serde(default)]
    pub stopped_early: bool,
}

/// [`Level`] and [`LiveLevel`] as they read: every field at the top (what their `#[serde(flatten)]` writes). Read
/// through this derived struct rather than through serde's flatten, whose buffering deserializer was 17.6 KB of
/// the page's wasm (docs/page.md, "Where the bytes are"); unknown fields are ignored and missing ones named, as
/// before.
#[derive(Deserialize)]
struct LevelFields {
    load: f64,
    pass: bool,
    attainment: f64,
    summary: Summary,
    saturation: Saturation,
    kv_peak_use: Option<f64>,
    preemptions: Option<u64>,
    scored: u64,
    excluded: u64,
    window_s: (f64, f64),
    #[serde(default)]
    stopped_early: bool,
    /// [`LiveLevel`]'s own fields.
    records: Option<Vec<String>>,
    runs: Option<Vec<LevelRun>>,
}

impl From<LevelFields> for Level {
    fn from(f: LevelFields) -> Level {
        Level {
            load: f.load,
            pass: f.pass,
            attainment: f.attainment,
            summary: f.summary,
            saturation: f.saturation,
            engine: EngineSide {
                kv_peak_use: f.kv_peak_use,
                preemptions: f.preemptions,
            },
            scored: f.scored,
            excluded: f.excluded,
            window_s: f.window_s,
            stopped_early: f.stopped_early,
        }
    }
}

impl TryFrom<LevelFields> for LiveLevel {
    type Error = &'static str;

    fn try_from(mut f: LevelFields) -> Result<LiveLevel, &'static str> {
        let records = f.records.take().ok_or("missing field `records`")?;
        let runs = f.runs.take().ok_or("missing field `runs`")?;
        Ok(LiveLevel {
            level: f.into(),
            records,
            runs,
        })
    }
}

/// Score one level's records: the steady-state window, the summary, the goal, the saturation class.
pub fn score_level(
    load: f64,
    records: &[RequestRecord],
    goal: &Goal,
    window: &Window,
    ramp_s: f64,
    engine: EngineSide,
) -> Level {
    let t0 = records.iter().map(|r| r.t_submit).fold(f64::INFINITY, f64::min);
    let t_last = records.iter().map(|r| r.t_submit).fold(f64::NEG_INFINITY, f64::max);
    let (from, to) = if records.is_empty() {
        (0.0, 0.0)
    } else {
        window.span(t0, t_last, ramp_s)
    };
    let scored: Vec<RequestRecord> = records
        .iter()
        .filter(|r| r.t_submit >= from && r.t_submit <= to && metrics::outcome_of(r) != RecordOutcome::Cut)
        .cloned()
        .collect();
    let summary = metrics::summarize(&scored, &goal.slo());
    let failed = scored.iter().any(|r| metrics::outcome_of(r) == RecordOutcome::Failed);
    let saturation = if failed || engine.preemptions.is_some_and(|p| p > 0) {
        Saturation::Overloaded
    } else if ttft_grows(&scored) {
        Saturation::Backlogged
    } else {
        Saturation::Stable
    };
    let origin = if records.is_empty() { 0.0 } else { t0 };
    Level {
        load,
        pass: goal.met(&summary),
        attainment: goal.attained(&summary),
        summary,
        saturation,
        engine,
        scored: scored.len() as u64,
        excluded: (records.len() - scored.len()) as u64,
        window_s: (from - origin, to - origin),
        stopped_early: false,
    }
}

/// The queue test of [`Saturation::Backlogged`]: median TTFT of the last third of submissions > 1.5 × the first
/// third's + 50 ms (needs at least 9 records with a TTFT).
fn ttft_grows(scored: &[RequestRecord]) -> bool {
    let mut by_submit: Vec<(f64, f64)> = scored
        .iter()
        .filter_map(|r| r.ttft_s.map(|t| (r.t_submit, t * 1000.0)))
        .collect();
    if by_submit.len() < 9 {
        return false;
    }
    crate::order::sort_by_f64_key(&mut by_submit, |p| p.0);
    let third = by_submit.len() / 3;
    let median = |part: &[(f64, f64)]| {
        let mut v: Vec<f64> = part.iter().map(|p| p.1).collect();
        v.sort_by(f64::total_cmp);
        metrics::percentile_sorted(&v, 0.5)
    };
    let first = median(&by_submit[..third]);
    let last = median(&by_submit[by_submit.len() - third..]);
    last > 1.5 * first + 50.0
}

/// How the search picks its levels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// Double (or halve) from `start` until the goal's answer changes, then bisect.
    Doubling { start: f64 },
    /// Start at a predicted capacity `guess`, step away by `resolution`, doubling the step, then bisect.
    Bracket { guess: f64 },
}

/// The search's limits: loads are kept in `[min, max]` and stepped to `resolution`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    pub min: f64,
    pub max: f64,
    /// The search ends when the highest passing and the lowest failing load are at most this far apart
    /// (counts: at least 1).
    pub resolution: f64,
    /// Most levels run; the search reports what it has when it runs out.
    pub max_levels: u32,
}

/// Default [`Bounds::max_levels`].
pub const MAX_LEVELS: u32 = 32;

impl Bounds {
    /// Defaults for a knob whose scenario runs at `current`: counts `[1, 4096]` to 1; rates and speed-ups
    /// `[current / 1024, current · 1024]` to 2 % of `current`.
    pub fn default_for(knob: Knob, current: f64) -> Bounds {
        if knob.is_count() {
            Bounds {
                min: 1.0,
                max: 4096.0,
                resolution: 1.0,
                max_levels: MAX_LEVELS,
            }
        } else {
            Bounds {
                min: current / 1024.0,
                max: current * 1024.0,
                resolution: current * 0.02,
                max_levels: MAX_LEVELS,
            }
        }
    }

    /// `0 < min <= max`, finite, positive resolution, `max_levels` ≥ 1. Paths: `min`, `max`, `resolution`,
    /// `max_levels`.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let pos = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ScenarioError::field(
                    name,
                    format!("must be a positive number (got {v})"),
                ))
            }
        };
        pos("min", self.min)?;
        pos("max", self.max)?;
        pos("resolution", self.resolution)?;
        if self.min > self.max {
            return Err(ScenarioError::field(
                "max",
                format!("must be >= min {} (got {})", self.min, self.max),
            ));
        }
        if self.max_levels == 0 {
            return Err(ScenarioError::field("max_levels", "must be >= 1 (got 0)"));
        }
        Ok(())
    }
}

/// The search as a state machine: ask [`Search::next_level`], run that load, tell [`Search::record`] whether it
/// met the goal; `None` from `next_level` ends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    strategy: Strategy,
    bounds: Bounds,
    count: bool,
    /// (load, passed) in the order run.
    tried: Vec<(f64, bool)>,
    /// The step of the next bracket move (guided).
    step: f64,
}

impl Search {
    /// A search over a knob (`count`: whole-number loads) with these bounds; the bounds must be valid.
    pub fn new(strategy: Strategy, bounds: Bounds, count: bool) -> Search {
        let mut bounds = bounds;
        if count {
            bounds.resolution = bounds.resolution.max(1.0).round();
            bounds.min = bounds.min.ceil().max(1.0);
            bounds.max = bounds.max.floor().max(bounds.min);
        }
        Search {
            strategy,
            bounds,
            count,
            tried: Vec::new(),
            step: bounds.resolution,
        }
    }

    fn clamp(&self, x: f64) -> f64 {
        let x = if self.count { x.round() } else { x };
        x.clamp(self.bounds.min, self.bounds.max)
    }

    /// The lowest failing load, and the highest passing load below it.
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        let fail = self
            .tried
            .iter()
            .filter(|t| !t.1)
            .map(|t| t.0)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        let pass = self
            .tried
            .iter()
            .filter(|t| t.1 && fail.is_none_or(|f| t.0 < f))
            .map(|t| t.0)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        (pass, fail)
    }

    /// The load to run next; `None` when the search is done.
    pub fn next_level(&self) -> Option<f64> {
        if self.tried.len() >= self.bounds.max_levels as usize {
            return None;
        }
        let b = &self.bounds;
        let next = match self.bracket() {
            (None, None) => match self.strategy {
                Strategy::Doubling { start } => self.clamp(start),
                Strategy::Bracket { guess } => self.clamp(guess),
            },
            (Some(lo), Some(hi)) => {
                if hi - lo <= b.resolution * (1.0 + 1e-9) {
                    return None;
                }
                if self.count {
                    ((lo + hi) / 2.0).floor()
                } else {
                    (lo + hi) / 2.0
                }
            }
            (Some(lo), None) => {
                if lo >= b.max {
                    return None;
                }
                let up = match self.strategy {
                    Strategy::Doubling { .. } => lo * 2.0,
                    Strategy::Bracket { .. } => lo + self.step,
                };
                self.clamp(up.max(if self.count { lo + 1.0 } else { up }))
            }
            (None, Some(hi)) => {
                if hi <= b.min {
                    return None;
                }
                let down = match self.strategy {
                    Strategy::Doubling { .. } => hi / 2.0,
                    Strategy::Bracket { .. } => hi - self.step,
                };
                let down = if self.count { down.floor().min(hi - 1.0) } else { down };
                self.clamp(down)
            }
        };
        // A load already run is not run again (bounds clamped it): the search is done.
        if self.tried.iter().any(|t| t.0 == next) {
            return None;
        }
        Some(next)
    }

    /// The outcome of a level run at `load`.
    pub fn record(&mut self, load: f64, passed: bool) {
        let before = self.bracket();
        self.tried.push((load, passed));
        // Bracket moves double their step while the answer stays the same.
        if let (Strategy::Bracket { .. }, (p, f)) = (self.strategy, before)
            && (p.is_none() || f.is_none())
            && self.tried.len() > 1
        {
            self.step *= 2.0;
        }
    }

    /// The capacity so far: the highest passing load below the lowest failing one.
    pub fn capacity(&self) -> Option<f64> {
        self.bracket().0
    }

    /// Levels run.
    pub fn levels_run(&self) -> usize {
        self.tried.len()
    }

    /// The stated resolution (counts: whole).
    pub fn resolution(&self) -> f64 {
        self.bounds.resolution
    }

    /// What a reader should know about how the search ended.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let (pass, fail) = self.bracket();
        if let Some(f) = fail
            && let Some(above) = self.tried.iter().find(|t| t.1 && t.0 > f)
        {
            notes.push(format!(
                "not monotone: load {} passed above the failing load {f}; the capacity is the highest pass below it",
                above.0
            ));
        }
        match (pass, fail) {
            (None, Some(f)) => notes.push(format!("even the lowest load run ({f}) fails the goal")),
            (Some(p), None) => notes.push(format!(
                "no failing load up to {p} (the bound): the capacity is at least that"
            )),
            (Some(p), Some(f)) if f - p > self.bounds.resolution * (1.0 + 1e-9) => notes.push(format!(
                "stopped after {} levels with {p} passing and {f} failing (wider than the resolution {})",
                self.tried.len(),
                self.bounds.resolution
            )),
            _ => {}
        }
        notes
    }
}

/// What a capacity search is asked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CapacitySpec {
    /// `None`: the workload's own ([`Knob::of`]).
    pub knob: Option<Knob>,
    pub goal: Goal,
    /// `None`: [`Bounds::default_for`] the knob at the scenario's value.
    pub bounds: Option<Bounds>,
    pub window: Window,
}

impl CapacitySpec {
    /// The scenario's SLOs at 95 % of requests, the workload's own knob, default bounds and window.
    pub fn for_scenario(s: &EngineScenario) -> CapacitySpec {
        CapacitySpec {
            knob: None,
            goal: Goal::from_slo(&s.slo),
            bounds: None,
            window: Window::default(),
        }
    }

    /// The knob, its value in the scenario and the bounds, after checking the goal, the window, the bounds and
    /// that the workload has the knob. Errors name the field: `goal.attainment`, `knob`, `bounds.min`, …
    pub fn resolve(&self, s: &EngineScenario) -> Result<(Knob, f64, Bounds), ScenarioError> {
        self.goal.validate().map_err(|e| e.within("goal"))?;
        self.window.validate().map_err(|e| e.within("window"))?;
        let knob = match self.knob {
            Some(k) => k,
            None => Knob::of(&s.workload).ok_or_else(|| {
                ScenarioError::field("knob", format!("a {} workload has no capacity knob", s.workload.kind()))
            })?,
        };
        let current = knob.get(&s.workload)?;
        let bounds = self.bounds.unwrap_or_else(|| Bounds::default_for(knob, current));
        bounds.validate().map_err(|e| e.within("bounds"))?;
        Ok((knob, current, bounds))
    }
}

/// Everything a search reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityReport {
    pub knob: Knob,
    /// The highest passing load below the lowest failing one; `None`: even the lowest load run failed.
    pub capacity: Option<f64>,
    pub resolution: f64,
    pub goal: Goal,
    pub strategy: Strategy,
    /// Every level, in the order run.
    pub levels: Vec<Level>,
    pub notes: Vec<String>,
}

/// The scenario with its knob at `load`, ready to simulate (counterfactuals off: a level needs one run).
pub fn level_scenario(s: &EngineScenario, knob: Knob, load: f64) -> Result<EngineScenario, ScenarioError> {
    let workload = knob.set(&s.workload, load)?;
    Ok(EngineScenario {
        workload,
        counterfactuals: false,
        fleet: None,
        ..s.clone()
    })
}

/// Simulate one level: the scenario at `load`, scored by [`score_level`] with the engine's peak KV use and
/// preemptions. Refuses a level above the size budget ([`crate::budget::Budget::DEFAULT`]) with its estimate.
pub fn simulate_level(
    s: &EngineScenario,
    knob: Knob,
    load: f64,
    goal: &Goal,
    window: &Window,
) -> Result<Level, ScenarioError> {
    let level = level_scenario(s, knob, load)?;
    Scenario::Engine(level.clone())
        .check_size(true, &crate::budget::Budget::DEFAULT)
        .map_err(|e| ScenarioError::field("load", format!("{load} is too large to simulate: {e}")))?;
    let report = engine::simulate_with(
        &level,
        SimOptions {
            record_itl_quantiles: false,
            keep_records: true,
        },
    )?;
    let kv = &report.diagnostics.kv_thrash;
    let engine_side = EngineSide {
        kv_peak_use: (kv.kv_capacity_blocks > 0).then(|| kv.peak_kv_blocks_used as f64 / kv.kv_capacity_blocks as f64),
        preemptions: Some(kv.preemptions),
    };
    Ok(score_level(
        load,
        &report.records,
        goal,
        window,
        ramp_s(&level.workload),
        engine_side,
    ))
}

/// The whole search in the simulator. `strategy` `None`: doubling from the scenario's own load.
pub fn search_simulated(
    s: &EngineScenario,
    spec: &CapacitySpec,
    strategy: Option<Strategy>,
) -> Result<CapacityReport, ScenarioError> {
    s.validate()?;
    let (knob, current, bounds) = spec.resolve(s)?;
    let strategy = strategy.unwrap_or(Strategy::Doubling { start: current });
    let mut search = Search::new(strategy, bounds, knob.is_count());
    let mut levels = Vec::new();
    while let Some(load) = search.next_level() {
        let level = simulate_level(s, knob, load, &spec.goal, &spec.window)?;
        search.record(load, level.pass);
        levels.push(level);
    }
    Ok(CapacityReport {
        knob,
        capacity: search.capacity(),
        resolution: search.resolution(),
        goal: spec.goal,
        strategy,
        levels,
        notes: search.notes(),
    })
}

/// The levels of a report sorted by load (one per load: the last run of it), for a goodput-vs-load chart.
pub fn by_load(levels: &[Level]) -> Vec<&Level> {
    let mut v: Vec<&Level> = Vec::with_capacity(levels.len());
    for l in levels {
        if let Some(i) = v.iter().position(|x| x.load == l.load) {
            v[i] = l;
        } else {
            v.push(l);
        }
    }
    crate::order::sort_by_f64_key(&mut v, |l| l.load);
    v
}

/// One run of a live level (with `--repeat`, one of several): what the level table's spread shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelRun {
    /// The run's record file, in the search's run folder.
    pub records: String,
    pub attainment: f64,
    pub pass: bool,
    pub goodput_rps: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p99_ms: f64,
    pub stopped_early: bool,
}

impl LevelRun {
    /// The spread entry of a run scored as `level`, whose records are in `records`.
    pub fn of(records: &str, level: &Level) -> LevelRun {
        LevelRun {
            records: records.to_string(),
            attainment: level.attainment,
            pass: level.pass,
            goodput_rps: level.summary.goodput_rps,
            ttft_p99_ms: level.summary.ttft_p99_ms,
            tpot_p99_ms: level.summary.tpot_p99_ms,
            stopped_early: level.stopped_early,
        }
    }
}

/// A live level: the representative run (the median attainment of its runs) and every run of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "LevelFields")]
pub struct LiveLevel {
    #[serde(flatten)]
    pub level: Level,
    /// Record files of this level's runs, in the search's run folder.
    pub records: Vec<String>,
    /// Per run: attainment, goodput and TTFT/TPOT p99 (the spread of `--repeat`).
    pub runs: Vec<LevelRun>,
}
