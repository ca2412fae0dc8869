//! The live capacity search as a library: [`plan`] resolves the search and runs it in the simulator, [`run`] runs
//! it live, each level one [`replay::run()`] against the target, with no command line built or parsed.
//! `loadshape capacity` (`cmd/capacity.rs`) and `loadshape serve` (`serve/driver.rs`, the page's "find capacity
//! live") both call it.
//!
//! The search, the steady-state window, the goal and the saturation classes are `shared::capacity`'s
//! (docs/capacity.md); levels are scored by `shared::metrics`, the one scorer. Every level's records are kept in
//! the run folder (`level-NN-LOAD[-rR].jsonl`, one file per run of a level, each with the `.summary.json` and
//! `.server.json` a replay writes) with `capacity.json`, the report [`run`] returns. Around each level the
//! target's Prometheus `/metrics` is scraped (the replay's own scrapes): the peak KV-cache use and the
//! preemptions it reports fill the level's `kv_peak_use` and `preemptions` (`null` when the server does not
//! report them).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use serde_json::{Value, json};
use shared::capacity::{
    self, Bounds, CapacityReport, CapacitySpec, EngineSide, Goal, Knob, LevelRun, LiveLevel, Search, Strategy, Window,
};
use shared::engine::EngineScenario;
use shared::metrics::{self, RecordOutcome};
use shared::record::RequestRecord;
use shared::scenario::Scenario;
use shared::workload::Workload;
use tokio::sync::watch;

use crate::replay::progress::LogFn;
use crate::replay::prom::ServerReport;
use crate::replay::records::RecordObserver;
use crate::replay::{self, Hooks, ReplaySettings, ScenarioOptions, TargetSettings};

/// Limits given instead of the knob's defaults ([`Bounds::default_for`]); `None` keeps the default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BoundsOverride {
    pub resolution: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub max_levels: Option<u32>,
}

/// What a search is asked, before it is checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// `None`: the workload's own.
    pub knob: Option<Knob>,
    pub goal: Goal,
    pub warmup_fraction: f64,
    pub bounds: BoundsOverride,
    /// Each live level runs at most this many seconds; a sessions workload's simulated levels last as long.
    pub duration: Option<f64>,
}

/// A checked search and its simulated answer.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The scenario as searched (a sessions workload's `duration_s` cut to the live levels' duration).
    pub scenario: EngineScenario,
    pub spec: CapacitySpec,
    pub knob: Knob,
    /// The knob's value in the scenario.
    pub current: f64,
    pub bounds: Bounds,
    /// The search in the simulator (doubling from the scenario's load).
    pub simulated: CapacityReport,
}

impl Plan {
    /// A bracket around the simulated capacity when `guided` and the simulator found one, else doubling from the
    /// scenario's load.
    pub fn strategy(&self, guided: bool) -> Strategy {
        match (guided, self.simulated.capacity) {
            (true, Some(guess)) => Strategy::Bracket { guess },
            _ => Strategy::Doubling { start: self.current },
        }
    }
}

/// Checks the ask against the scenario (errors name the field: `goal.attainment`, `knob`, `bounds.max`, …) and
/// runs the search in the simulator (errors start `simulated search:`).
pub fn plan(mut scenario: EngineScenario, ask: &Ask) -> anyhow::Result<Plan> {
    // A sessions level lasts `duration` live: the simulated levels last as long (open- and closed-loop plans are
    // sized by requests, which the simulator runs whole).
    if let (Some(d), Workload::Sessions(w)) = (ask.duration, &mut scenario.workload)
        && d.is_finite()
        && d > 0.0
    {
        w.duration_s = w.duration_s.min(d);
    }
    let mut spec = CapacitySpec {
        knob: ask.knob,
        goal: ask.goal,
        bounds: None,
        window: Window {
            warmup_fraction: ask.warmup_fraction,
            end_s: None,
        },
    };
    let (_, _, mut bounds) = spec.resolve(&scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
    let o = ask.bounds;
    bounds.resolution = o.resolution.unwrap_or(bounds.resolution);
    bounds.min = o.min.unwrap_or(bounds.min);
    bounds.max = o.max.unwrap_or(bounds.max);
    bounds.max_levels = o.max_levels.unwrap_or(bounds.max_levels);
    spec.bounds = Some(bounds);
    let (knob, current, bounds) = spec.resolve(&scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
    let simulated =
        capacity::search_simulated(&scenario, &spec, None).map_err(|e| anyhow::anyhow!("simulated search: {e}"))?;
    Ok(Plan {
        scenario,
        spec,
        knob,
        current,
        bounds,
        simulated,
    })
}

/// How the live levels run.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveOptions {
    /// Start from the simulated capacity (a bracket around it), not plain doubling from the scenario's load.
    pub guided: bool,
    /// Each level runs at most this many seconds (then drains); `None`: the scenario's own length.
    pub duration: Option<f64>,
    /// Cap on a level's drain, seconds.
    pub drain_grace: f64,
    /// Runs per level (1..=100); the level's figures are the median-attainment run's.
    pub repeat: u32,
    /// Stop a level once it is clearly failing ([`Goal::clearly_failing`]).
    pub early_stop: bool,
    /// Most requests in flight at once in a level (an agent's `--max-concurrent-requests-per-run`).
    pub max_concurrency: Option<u32>,
    /// A level is cut after this many seconds whatever its plan (an agent's `--max-run-seconds`); unlike
    /// `duration` it does not set the steady-state window's end.
    pub max_level_seconds: Option<f64>,
    /// Why the search's highest load is what it is, when a limit rather than the engine sets it (an agent's per-run
    /// limit): the report then carries `max_load` (the bound) and `max_load_reason` (this text), so a capacity at
    /// the bound reads "≥ max (reason)". `None` (the CLI): neither key.
    pub upper_limit: Option<String>,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            guided: true,
            duration: None,
            drain_grace: 30.0,
            repeat: 1,
            early_stop: true,
            max_concurrency: None,
            max_level_seconds: None,
            upper_limit: None,
        }
    }
}

/// Everything a live search needs.
#[derive(Debug)]
pub struct Settings {
    pub plan: Plan,
    /// The server (URL, model, dialect, key); the model the first level finds is reused by the others.
    pub target: TargetSettings,
    /// The run folder (created): a record file per level run, and `capacity.json`.
    pub dir: PathBuf,
    /// What the scenario is called in each level's `shape` (e.g. its file).
    pub source: String,
    pub options: LiveOptions,
}

/// Called with each finished level: its index (from 0, in the order run) and the level.
pub type LevelFn = Arc<dyn Fn(usize, &LiveLevel) + Send + Sync>;
/// Checks a level's scenario before it runs; `Err` says why it may not (e.g. an agent's limits), and the search
/// ends there.
pub type AdmitFn = Arc<dyn Fn(&EngineScenario) -> Result<(), String> + Send + Sync>;

/// How a caller watches and ends a search. Everything is optional.
#[derive(Default)]
pub struct CapacityHooks {
    pub on_level: Option<LevelFn>,
    /// Called with each record of every level right after its line is written.
    pub on_record: Option<RecordObserver>,
    /// Turning true ends the search: the running level is cut (its records kept, the level listed but not
    /// counted), no further level starts, and the report's notes say `interrupted`.
    pub interrupt: Option<watch::Receiver<bool>>,
    pub admit: Option<AdmitFn>,
    /// Where each level's replay notes go; `None`: nowhere.
    pub log: Option<LogFn>,
}

/// Runs the search live and returns its report (also written to `dir/capacity.json`): `capacity`, `knob`,
/// `levels` (each a [`LiveLevel`]), `levels_run`, `resolution`, `goal`, `strategy`, `guided`, `notes`,
/// `simulated_capacity`, `simulated_levels`, `unguided_levels_simulated`, `repeat`, `run_dir`.
pub async fn run(s: Settings, hooks: CapacityHooks) -> anyhow::Result<Value> {
    let o = &s.options;
    anyhow::ensure!(
        (1..=100).contains(&o.repeat),
        "repeat must be in 1..=100 (got {})",
        o.repeat
    );
    if let Some(d) = o.duration {
        anyhow::ensure!(
            d.is_finite() && d > 0.0,
            "the level duration must be a positive number of seconds (got {d})"
        );
    }
    anyhow::ensure!(
        o.drain_grace.is_finite() && o.drain_grace >= 0.0,
        "the drain grace must be a number of seconds >= 0 (got {})",
        o.drain_grace
    );
    let dir = s.dir.clone();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let plan = &s.plan;
    let strategy = plan.strategy(o.guided);
    let mut search = Search::new(strategy, plan.bounds, plan.knob.is_count());
    let mut live = LiveRun {
        s: &s,
        model: s.target.model.clone(),
        hooks: &hooks,
    };
    let mut levels: Vec<LiveLevel> = Vec::new();
    let mut interrupted = false;
    let mut refused = None;
    while let Some(load) = search.next_level() {
        if let Some(admit) = &hooks.admit {
            let level =
                capacity::level_scenario(&plan.scenario, plan.knob, load).map_err(|e| anyhow::anyhow!("{e}"))?;
            if let Err(why) = admit(&level) {
                refused = Some(format!(
                    "level {} = {} not run: {why}",
                    plan.knob.name(),
                    fmt_load(load)
                ));
                break;
            }
        }
        let level = live.level(levels.len(), load).await?;
        if live.interrupted() {
            // A cut level says nothing about the load: kept in the table, not in the search.
            interrupted = true;
            levels.push(level);
            break;
        }
        search.record(load, level.level.pass);
        levels.push(level);
    }
    let mut notes = search.notes();
    notes.extend(refused);
    if interrupted {
        notes.push("interrupted: the last level was cut and does not count".to_string());
    }
    let unguided = unguided_levels(plan);
    let mut report = json!({
        "capacity": search.capacity(),
        "knob": plan.knob,
        "levels": levels,
        "levels_run": search.levels_run(),
        "resolution": search.resolution(),
        "goal": plan.spec.goal,
        "strategy": strategy,
        "guided": matches!(strategy, Strategy::Bracket { .. }),
        "notes": notes,
        "simulated_capacity": plan.simulated.capacity,
        "simulated_levels": plan.simulated.levels,
        "unguided_levels_simulated": unguided,
        "repeat": o.repeat,
        "run_dir": dir.display().to_string(),
    });
    if let Some(reason) = &o.upper_limit {
        report["max_load"] = json!(plan.bounds.max);
        report["max_load_reason"] = json!(reason);
    }
    std::fs::write(dir.join("capacity.json"), serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", dir.join("capacity.json").display()))?;
    Ok(report)
}

/// Levels plain doubling from the scenario's load takes in the simulator (what an unguided search costs if the
/// simulator is right).
fn unguided_levels(p: &Plan) -> Option<usize> {
    let mut search = Search::new(Strategy::Doubling { start: p.current }, p.bounds, p.knob.is_count());
    while let Some(load) = search.next_level() {
        let l = capacity::simulate_level(&p.scenario, p.knob, load, &p.spec.goal, &p.spec.window).ok()?;
        search.record(load, l.pass);
    }
    Some(search.levels_run())
}

/// What the server's `/metrics` said about a level: the peak KV-cache use its scrapes saw and the preemptions
/// counted between the first and the last scrape (`None` each when the server does not report it).
pub fn engine_side(server: Option<&ServerReport>) -> EngineSide {
    EngineSide {
        kv_peak_use: server.and_then(|s| s.kv_cache_usage_max),
        preemptions: server.and_then(|s| s.preemptions).map(|p| p.max(0.0).round() as u64),
    }
}

struct LiveRun<'a> {
    s: &'a Settings,
    model: Option<String>,
    hooks: &'a CapacityHooks,
}

impl LiveRun<'_> {
    fn interrupted(&self) -> bool {
        self.hooks.interrupt.as_ref().is_some_and(|r| *r.borrow())
    }

    async fn level(&mut self, index: usize, load: f64) -> anyhow::Result<LiveLevel> {
        let plan = &self.s.plan;
        let o = &self.s.options;
        let level = capacity::level_scenario(&plan.scenario, plan.knob, load).map_err(|e| anyhow::anyhow!("{e}"))?;
        let ramp = capacity::ramp_s(&level.workload);
        // A live level's span is known before it runs: its duration, else the plan's own length.
        let planned = match &level.workload {
            Workload::Sessions(w) => Some(w.duration_s),
            w @ (Workload::Poisson(_) | Workload::Gamma(_) | Workload::Bursty(_)) => {
                w.requests(level.seed).map(|r| r.arrival_ms / 1000.0).last()
            }
            _ => None,
        };
        let end_s = match (o.duration, planned) {
            (Some(d), Some(p)) => Some(d.min(p)),
            (d, p) => d.or(p),
        };
        let window = Window {
            end_s,
            ..plan.spec.window
        };
        let mut runs = Vec::new();
        for rep in 0..o.repeat {
            if rep > 0 && self.interrupted() {
                break;
            }
            let name = if o.repeat > 1 {
                format!("level-{:02}-{}-r{}.jsonl", index + 1, fmt_load(load), rep + 1)
            } else {
                format!("level-{:02}-{}.jsonl", index + 1, fmt_load(load))
            };
            let out = self.s.dir.join(&name);
            let (records, stopped, server) = self.run_once(&level, &out, &window, ramp).await?;
            let mut l = capacity::score_level(
                load,
                &records,
                &plan.spec.goal,
                &window,
                ramp,
                engine_side(server.as_ref()),
            );
            l.stopped_early = stopped;
            runs.push((name, l));
        }
        // The representative run: the median attainment (the lower middle for an even count).
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&i, &j| runs[i].1.attainment.total_cmp(&runs[j].1.attainment));
        let mid = order[metrics::nearest_rank_index(order.len(), 0.5)];
        let spread = runs.iter().map(|(name, l)| LevelRun::of(name, l)).collect();
        let records = runs.iter().map(|r| r.0.clone()).collect();
        let level = LiveLevel {
            level: runs.swap_remove(mid).1,
            records,
            runs: spread,
        };
        if let Some(f) = &self.hooks.on_level {
            f(index, &level);
        }
        Ok(level)
    }

    async fn run_once(
        &mut self,
        level: &EngineScenario,
        out: &Path,
        window: &Window,
        ramp: f64,
    ) -> anyhow::Result<(Vec<RequestRecord>, bool, Option<ServerReport>)> {
        let o = &self.s.options;
        let mut target = self.s.target.clone();
        target.model = self.model.clone();
        let mut s = ReplaySettings::for_scenario(
            target,
            out.to_path_buf(),
            &Scenario::Engine(level.clone()),
            &self.s.source,
            ScenarioOptions {
                seed: None,
                max_seconds: match (o.duration, o.max_level_seconds) {
                    (Some(d), Some(m)) => Some(d.min(m)),
                    (d, m) => d.or(m),
                },
            },
        )?;
        s.progress = false;
        s.drain = true;
        s.drain_grace = replay::settings::seconds("--drain-grace", o.drain_grace)?;
        s.write_summary = true;
        if o.max_concurrency.is_some() {
            s.max_concurrency = o.max_concurrency;
        }
        // The early stop: scored (past the warm-up, not cut) and missed requests as they are written.
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let warm = window.end_s.map_or(ramp, |end| window.span(0.0, end, ramp).0);
        let goal = self.s.plan.spec.goal;
        let slo = goal.slo();
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let early = o.early_stop;
        let forward_record = self.hooks.on_record.clone();
        let observer: RecordObserver = {
            let counts = counts.clone();
            let stop_tx = stop_tx.clone();
            Arc::new(move |r: &RequestRecord| {
                if let Some(f) = &forward_record {
                    f(r);
                }
                if !early || r.t_submit < warm || metrics::outcome_of(r) == RecordOutcome::Cut {
                    return;
                }
                let scored = counts.0.fetch_add(1, Ordering::Relaxed) + 1;
                let missed =
                    counts.1.fetch_add(u64::from(!slo.met_by(r)), Ordering::Relaxed) + u64::from(!slo.met_by(r));
                if goal.clearly_failing(scored, missed) {
                    let _ = stop_tx.send(true);
                }
            })
        };
        // An interrupt of the whole search cuts this level too.
        let forward = self.hooks.interrupt.clone().map(|mut rx| {
            let stop_tx = stop_tx.clone();
            tokio::spawn(async move {
                while rx.changed().await.is_ok() {
                    if *rx.borrow() {
                        let _ = stop_tx.send(true);
                        return;
                    }
                }
            })
        });
        if self.interrupted() {
            let _ = stop_tx.send(true);
        }
        let log: LogFn = self.hooks.log.clone().unwrap_or_else(|| Arc::new(|_line: &str| {}));
        let outcome = replay::run(
            s,
            Hooks {
                on_record: Some(observer),
                stop: Some(stop_rx),
                log: Some(log),
                ..Hooks::default()
            },
        )
        .await
        .with_context(|| format!("live level {}", out.display()))?;
        if let Some(task) = forward {
            task.abort();
        }
        anyhow::ensure!(
            !outcome.summary.aborted,
            "the server stopped answering (fail streak) during {}; records kept there",
            out.display()
        );
        // Later levels reuse the model the first one found.
        self.model = Some(outcome.summary.model.clone());
        let stopped = *stop_tx.borrow() && !self.interrupted();
        let server = outcome.server.map(|sc| sc.report);
        Ok((outcome.records, stopped, server))
    }
}

/// A load as a file name and a table show it: whole numbers without decimals, others to at most 3 decimals.
pub fn fmt_load(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}
