//! `loadshape capacity`: the most sessions, users or rate a deployment serves within its SLOs.
//!
//! Run with `loadshape capacity --scenario FILE --simulate` (the search in the simulator) or
//! `loadshape capacity --scenario FILE --url URL --out DIR` (live: each level a `replay::run` against the server,
//! guided by the simulated capacity unless `--no-guide`). The search, the steady-state window, the goal and the
//! saturation classes are `shared::capacity`'s (docs/capacity.md); levels are scored by `shared::metrics`, the one
//! scorer. Live, every level's records are kept in `DIR` (`level-NN-LOAD[-rR].jsonl`, one file per run of a level)
//! with `capacity.json` (what `--json` prints).
//!
//! `--json` prints `{"capacity", "knob", "levels": [{"load", "pass", "attainment", "summary", "saturation", …}],
//! "resolution", "goal", "strategy", "notes"}`; live also `"simulated_capacity"`, `"simulated_levels"`,
//! `"levels_run"`, `"unguided_levels_simulated"`, `"repeat"` and `"run_dir"`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::{Value, json};
use shared::capacity::{self, Bounds, CapacitySpec, Goal, Knob, Level, Per, Search, Strategy, Window};
use shared::engine::EngineScenario;
use shared::metrics::{self, RecordOutcome};
use shared::record::RequestRecord;
use shared::scenario::Scenario;

use crate::replay::{self, Hooks, ReplaySettings, ScenarioOptions, TargetSettings};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (JSON, `"model": "engine"`): the workload to scale, the engine profile the simulator uses,
    /// the SLOs and the seed.
    #[arg(long)]
    pub scenario: PathBuf,
    /// Search live against this OpenAI-compatible server (e.g. `http://127.0.0.1:8000/v1`).
    #[arg(long, conflicts_with = "simulate", required_unless_present = "simulate")]
    pub url: Option<String>,
    /// Search in the simulator only.
    #[arg(long)]
    pub simulate: bool,
    /// Live: the model to send (default: the first on `/v1/models`).
    #[arg(long)]
    pub model: Option<String>,
    /// Live: bearer token for the server.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Live: the run folder (created; one record file per level run, and `capacity.json`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// What to scale: `sessions`, `users` or `rate_rps` (default: the workload's own).
    #[arg(long)]
    pub knob: Option<String>,
    /// Goodput constraints replacing the scenario's SLOs, milliseconds: `ttft_ms=500,tpot_ms=35,e2e_ms=20000`
    /// (vLLM's `ttft:500,tpot:35,e2el:20000` too). Omitted ones are not checked; at least one is needed.
    #[arg(long, value_name = "KEY=MS,...")]
    pub goal: Option<String>,
    /// Share of requests (or sessions, `--per session`) that must meet every constraint, in (0, 1].
    #[arg(long, default_value_t = 0.95)]
    pub attainment: f64,
    /// `request` or `session`.
    #[arg(long, default_value = "request")]
    pub per: String,
    /// Stop when the highest passing and the lowest failing load are this close (default: 1 for counts, 2 % of
    /// the scenario's rate).
    #[arg(long)]
    pub resolution: Option<f64>,
    /// Lowest load tried (default: 1 for counts, the rate / 1024).
    #[arg(long)]
    pub min: Option<f64>,
    /// Highest load tried (default: 4096 for counts, the rate × 1024).
    #[arg(long)]
    pub max: Option<f64>,
    /// Most levels run.
    #[arg(long, default_value_t = capacity::MAX_LEVELS)]
    pub max_levels: u32,
    /// Share of a level's span left out at its start (warm-up), in [0, 0.9].
    #[arg(long, default_value_t = 0.2)]
    pub warmup_fraction: f64,
    /// Live: each level runs at most this many seconds (then drains); default: the scenario's own length.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Live: cap on a level's drain, seconds.
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    pub drain_grace: f64,
    /// Live: plain doubling + bisection from the scenario's load, not a bracket around the simulated capacity.
    #[arg(long)]
    pub no_guide: bool,
    /// Live: run each level N times; the level passes when the median attainment does, and the spread is shown.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Live: run every level to its end, even when it is clearly failing.
    #[arg(long)]
    pub no_early_stop: bool,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_goal(a: &Args, slo: &metrics::Slo) -> anyhow::Result<Goal> {
    let mut goal = Goal::from_slo(slo);
    goal.attainment = a.attainment;
    goal.per = match a.per.as_str() {
        "request" => Per::Request,
        "session" => Per::Session,
        other => anyhow::bail!("--per must be \"request\" or \"session\" (got \"{other}\")"),
    };
    if let Some(text) = &a.goal {
        goal.ttft_ms = None;
        goal.tpot_ms = None;
        goal.e2e_ms = None;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once(['=', ':'])
                .with_context(|| format!("--goal: `{part}` is not KEY=MS (e.g. ttft_ms=500)"))?;
            let ms: f64 = value
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("--goal: {key} must be a number of milliseconds (got `{value}`)"))?;
            match key.trim() {
                "ttft_ms" | "ttft" => goal.ttft_ms = Some(ms),
                "tpot_ms" | "tpot" => goal.tpot_ms = Some(ms),
                "e2e_ms" | "e2el" | "e2e" => goal.e2e_ms = Some(ms),
                other => anyhow::bail!("--goal: unknown constraint `{other}` (ttft_ms, tpot_ms, e2e_ms)"),
            }
        }
    }
    Ok(goal)
}

/// The scenario and the search spec, checked: errors name the field (`goal.attainment`, `knob`, …).
fn resolve(a: &Args) -> anyhow::Result<(EngineScenario, CapacitySpec, Knob, f64, Bounds)> {
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {}", a.scenario.display()))?;
    let scenario = Scenario::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", a.scenario.display()))?;
    let Scenario::Engine(mut e) = scenario else {
        anyhow::bail!(
            "{}: model must be \"engine\" for a capacity search (the seed model has no knob to scale)",
            a.scenario.display()
        );
    };
    // A sessions level lasts `--duration` live: the simulated levels last as long (open- and closed-loop plans
    // are sized by requests, which the simulator runs whole).
    if let (Some(d), shared::workload::Workload::Sessions(w)) = (a.duration, &mut e.workload)
        && d.is_finite()
        && d > 0.0
    {
        w.duration_s = w.duration_s.min(d);
    }
    let knob = a
        .knob
        .as_deref()
        .map(Knob::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut spec = CapacitySpec {
        knob,
        goal: parse_goal(a, &e.slo)?,
        bounds: None,
        window: Window {
            warmup_fraction: a.warmup_fraction,
            end_s: None,
        },
    };
    let (knob, current, mut bounds) = spec.resolve(&e).map_err(|e| anyhow::anyhow!("{e}"))?;
    bounds.resolution = a.resolution.unwrap_or(bounds.resolution);
    bounds.min = a.min.unwrap_or(bounds.min);
    bounds.max = a.max.unwrap_or(bounds.max);
    bounds.max_levels = a.max_levels;
    spec.bounds = Some(bounds);
    let (_, _, bounds) = spec.resolve(&e).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((e, spec, knob, current, bounds))
}

/// Everything `capacity` prints with `--json` (tests call this).
pub async fn capacity(a: &Args) -> anyhow::Result<Value> {
    capacity_until(a, None).await
}

/// [`capacity()`], ended early when `interrupt` turns true: the running level is cut (its records kept), no further
/// level starts, and the report says so in `notes`.
pub async fn capacity_until(a: &Args, interrupt: Option<tokio::sync::watch::Receiver<bool>>) -> anyhow::Result<Value> {
    let (scenario, spec, knob, current, bounds) = resolve(a)?;
    let simulated =
        capacity::search_simulated(&scenario, &spec, None).map_err(|e| anyhow::anyhow!("simulated search: {e}"))?;
    let Some(url) = &a.url else {
        return Ok(serde_json::to_value(&simulated)?);
    };
    anyhow::ensure!(
        a.repeat >= 1 && a.repeat <= 100,
        "--repeat must be in 1..=100 (got {})",
        a.repeat
    );
    if let Some(d) = a.duration {
        anyhow::ensure!(
            d.is_finite() && d > 0.0,
            "--duration must be a positive number of seconds (got {d})"
        );
    }
    anyhow::ensure!(
        a.drain_grace.is_finite() && a.drain_grace >= 0.0,
        "--drain-grace must be a number of seconds >= 0 (got {})",
        a.drain_grace
    );
    let dir = a
        .out
        .clone()
        .context("a live search needs --out DIR (the run folder for every level's records)")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let strategy = match (a.no_guide, simulated.capacity) {
        (false, Some(guess)) => Strategy::Bracket { guess },
        _ => Strategy::Doubling { start: current },
    };
    let mut search = Search::new(strategy, bounds, knob.is_count());
    let mut live = LiveRun {
        a,
        url,
        scenario: &scenario,
        spec: &spec,
        knob,
        dir: &dir,
        model: a.model.clone(),
        interrupt,
    };
    let mut levels: Vec<LiveLevel> = Vec::new();
    let mut interrupted = false;
    while let Some(load) = search.next_level() {
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
    if interrupted {
        notes.push("interrupted: the last level was cut and does not count".to_string());
    }
    let unguided = unguided_levels(&scenario, &spec, knob, current, bounds);
    let report = json!({
        "capacity": search.capacity(),
        "knob": knob,
        "levels": levels,
        "levels_run": search.levels_run(),
        "resolution": search.resolution(),
        "goal": spec.goal,
        "strategy": strategy,
        "guided": matches!(strategy, Strategy::Bracket { .. }),
        "notes": notes,
        "simulated_capacity": simulated.capacity,
        "simulated_levels": simulated.levels,
        "unguided_levels_simulated": unguided,
        "repeat": a.repeat,
        "run_dir": dir.display().to_string(),
    });
    std::fs::write(dir.join("capacity.json"), serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", dir.join("capacity.json").display()))?;
    Ok(report)
}

/// Levels plain doubling from the scenario's load takes in the simulator (what `--no-guide` costs if the
/// simulator is right).
fn unguided_levels(s: &EngineScenario, spec: &CapacitySpec, knob: Knob, current: f64, bounds: Bounds) -> Option<usize> {
    let mut search = Search::new(Strategy::Doubling { start: current }, bounds, knob.is_count());
    while let Some(load) = search.next_level() {
        let l = capacity::simulate_level(s, knob, load, &spec.goal, &spec.window).ok()?;
        search.record(load, l.pass);
    }
    Some(search.levels_run())
}

/// A live level: the representative run (median attainment) and every run of it.
#[derive(Debug, Serialize)]
struct LiveLevel {
    #[serde(flatten)]
    level: Level,
    /// Record files of this level's runs, in the run folder.
    records: Vec<String>,
    /// Per run: attainment, goodput and TTFT/TPOT p99 (the spread of `--repeat`).
    runs: Vec<Value>,
}

struct LiveRun<'a> {
    a: &'a Args,
    url: &'a str,
    scenario: &'a EngineScenario,
    spec: &'a CapacitySpec,
    knob: Knob,
    dir: &'a Path,
    model: Option<String>,
    interrupt: Option<tokio::sync::watch::Receiver<bool>>,
}

impl LiveRun<'_> {
    fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|r| *r.borrow())
    }

    async fn level(&mut self, index: usize, load: f64) -> anyhow::Result<LiveLevel> {
        let level = capacity::level_scenario(self.scenario, self.knob, load).map_err(|e| anyhow::anyhow!("{e}"))?;
        let ramp = capacity::ramp_s(&level.workload);
        // A live level's span is known before it runs: its duration, else the plan's own length.
        let planned = match &level.workload {
            shared::workload::Workload::Sessions(w) => Some(w.duration_s),
            w @ (shared::workload::Workload::Poisson(_)
            | shared::workload::Workload::Gamma(_)
            | shared::workload::Workload::Bursty(_)) => w.requests(level.seed).map(|r| r.arrival_ms / 1000.0).last(),
            _ => None,
        };
        let end_s = match (self.a.duration, planned) {
            (Some(d), Some(p)) => Some(d.min(p)),
            (d, p) => d.or(p),
        };
        let window = Window {
            end_s,
            ..self.spec.window
        };
        let mut runs = Vec::new();
        for rep in 0..self.a.repeat {
            if rep > 0 && self.interrupted() {
                break;
            }
            let name = if self.a.repeat > 1 {
                format!("level-{:02}-{}-r{}.jsonl", index + 1, fmt_load(load), rep + 1)
            } else {
                format!("level-{:02}-{}.jsonl", index + 1, fmt_load(load))
            };
            let out = self.dir.join(&name);
            let (records, stopped) = self.run_once(&level, &out, &window, ramp).await?;
            let mut l = capacity::score_level(
                load,
                &records,
                &self.spec.goal,
                &window,
                ramp,
                capacity::EngineSide::default(),
            );
            l.stopped_early = stopped;
            runs.push((name, l));
        }
        // The representative run: the median attainment (the lower middle for an even count).
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&i, &j| runs[i].1.attainment.total_cmp(&runs[j].1.attainment));
        let mid = order[(order.len() - 1) / 2];
        let spread = runs
            .iter()
            .map(|(name, l)| {
                json!({"records": name, "attainment": l.attainment, "pass": l.pass,
                       "goodput_rps": l.summary.goodput_rps, "ttft_p99_ms": l.summary.ttft_p99_ms,
                       "tpot_p99_ms": l.summary.tpot_p99_ms, "stopped_early": l.stopped_early})
            })
            .collect();
        let records = runs.iter().map(|r| r.0.clone()).collect();
        let level = runs.swap_remove(mid).1;
        if !self.a.json {
            eprintln!(
                "level {}: {} = {} {} (attainment {:.3}, {}{})",
                index + 1,
                self.knob.name(),
                fmt_load(load),
                if level.pass { "passes" } else { "fails" },
                level.attainment,
                level.saturation.name(),
                if level.stopped_early { ", stopped early" } else { "" }
            );
        }
        Ok(LiveLevel {
            level,
            records,
            runs: spread,
        })
    }

    async fn run_once(
        &mut self,
        level: &EngineScenario,
        out: &Path,
        window: &Window,
        ramp: f64,
    ) -> anyhow::Result<(Vec<RequestRecord>, bool)> {
        let mut target = TargetSettings::new(self.url);
        target.model = self.model.clone();
        target.api_key = self.a.api_key.clone();
        let source = self.a.scenario.display().to_string();
        let mut s = ReplaySettings::for_scenario(
            target,
            out.to_path_buf(),
            &Scenario::Engine(level.clone()),
            &source,
            ScenarioOptions {
                seed: None,
                max_seconds: self.a.duration,
            },
        )?;
        s.progress = false;
        s.drain = true;
        s.drain_grace = replay::settings::seconds("--drain-grace", self.a.drain_grace)?;
        s.write_summary = true;
        // The early stop: scored (past the warm-up, not cut) and missed requests as they are written.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let warm = window.end_s.map_or(ramp, |end| window.span(0.0, end, ramp).0);
        let goal = self.spec.goal;
        let slo = goal.slo();
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let early = !self.a.no_early_stop;
        let observer: replay::records::RecordObserver = {
            let counts = counts.clone();
            let stop_tx = stop_tx.clone();
            Arc::new(move |r: &RequestRecord| {
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
        let forward = self.interrupt.clone().map(|mut rx| {
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
        let log: replay::run::LogFn = Arc::new(|_line: &str| {});
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
        Ok((outcome.records, stopped))
    }
}

fn fmt_load(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The level table (one row per level, in the order run).
fn table(levels: &[Value]) -> String {
    let mut out = String::from(
        "  #  load        pass  attain  goodput/s  ttft p50  ttft p99  tpot p50  tpot p99   kv peak  preempt  cached  class\n",
    );
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    for (i, l) in levels.iter().enumerate() {
        let s = l.get("summary").cloned().unwrap_or(Value::Null);
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "-".to_string(), f);
        out.push_str(&format!(
            "{:>3}  {:<10}  {:<4}  {:>6}  {:>9}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>7}  {:>6}  {}{}\n",
            i + 1,
            fmt_load(num(l, "load").unwrap_or(0.0)),
            if l.get("pass").and_then(Value::as_bool) == Some(true) {
                "yes"
            } else {
                "no"
            },
            opt(num(l, "attainment"), &|v| format!("{v:.3}")),
            opt(num(&s, "goodput_rps"), &|v| format!("{v:.2}")),
            opt(num(&s, "ttft_p50_ms"), &|v| format!("{v:.0}")),
            opt(num(&s, "ttft_p99_ms"), &|v| format!("{v:.0}")),
            opt(num(&s, "tpot_p50_ms"), &|v| format!("{v:.1}")),
            opt(num(&s, "tpot_p99_ms"), &|v| format!("{v:.1}")),
            opt(num(l, "kv_peak_use"), &|v| format!("{:.1} %", v * 100.0)),
            opt(num(l, "preemptions"), &|v| format!("{v:.0}")),
            opt(num(&s, "cached_share_achieved"), &|v| format!("{:.1} %", v * 100.0)),
            l.get("saturation").and_then(Value::as_str).unwrap_or("-"),
            if l.get("stopped_early").and_then(Value::as_bool) == Some(true) {
                " (stopped early)"
            } else {
                ""
            },
        ));
    }
    out
}

/// The text report.
pub fn render(r: &Value) -> String {
    let knob = r.get("knob").and_then(Value::as_str).unwrap_or("?");
    let cap = |v: Option<&Value>| match v.and_then(Value::as_f64) {
        Some(c) => format!("{knob} = {}", fmt_load(c)),
        None => "none (see the notes)".to_string(),
    };
    let levels = |k: &str| r.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = String::new();
    let goal = r.get("goal").cloned().unwrap_or(Value::Null);
    out.push_str(&format!(
        "goal: {} of {}s meet {}\n",
        goal.get("attainment")
            .and_then(Value::as_f64)
            .map_or("?".into(), |a| format!("{:.1} %", a * 100.0)),
        goal.get("per").and_then(Value::as_str).unwrap_or("request"),
        ["ttft_ms", "tpot_ms", "e2e_ms"]
            .iter()
            .filter_map(|k| goal.get(*k).and_then(Value::as_f64).map(|v| format!("{k} <= {v}")))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if r.get("simulated_levels").is_some() {
        out.push_str(&format!(
            "\nsimulated ({} levels): capacity {}\n",
            levels("simulated_levels").len(),
            cap(r.get("simulated_capacity"))
        ));
        out.push_str(&table(&levels("simulated_levels")));
        out.push_str(&format!(
            "\nlive ({} levels, {}): capacity {}\n",
            levels("levels").len(),
            if r.get("guided").and_then(Value::as_bool) == Some(true) {
                "guided by the simulated capacity"
            } else {
                "unguided doubling + bisection"
            },
            cap(r.get("capacity"))
        ));
        out.push_str(&table(&levels("levels")));
        if let Some(n) = r.get("unguided_levels_simulated").and_then(Value::as_u64) {
            out.push_str(&format!(
                "\nlive levels run: {}; unguided doubling + bisection takes {n} levels in the simulator\n",
                levels("levels").len()
            ));
        }
        if let Some(d) = r.get("run_dir").and_then(Value::as_str) {
            out.push_str(&format!("records: {d}/level-*.jsonl, report: {d}/capacity.json\n"));
        }
    } else {
        out.push_str(&format!(
            "\nsimulated ({} levels): capacity {}\n",
            levels("levels").len(),
            cap(r.get("capacity"))
        ));
        out.push_str(&table(&levels("levels")));
    }
    for n in levels("notes") {
        if let Some(n) = n.as_str() {
            out.push_str(&format!("note: {n}\n"));
        }
    }
    out
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.url.is_none() {
        let out = capacity(&a).await?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            print!("{}", render(&out));
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Live: SIGINT/SIGTERM end the search after cutting the running level (records and capacity.json are written).
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut signals = super::signals::Signals::new()?;
    let watcher = tokio::spawn(async move {
        let sig = signals.recv().await;
        let _ = tx.send(true);
        sig
    });
    let out = capacity_until(&a, Some(rx)).await;
    let code = if watcher.is_finished() {
        watcher.await.ok().map(|sig| ExitCode::from(sig.exit_code))
    } else {
        watcher.abort();
        None
    };
    let out = out?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&out));
    }
    Ok(code.unwrap_or(ExitCode::SUCCESS))
}
