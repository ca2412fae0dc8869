//! `loadshape capacity`: the most sessions, users or rate a deployment serves within its SLOs.
//!
//! Run with `loadshape capacity --scenario FILE --simulate` (the search in the simulator) or
//! `loadshape capacity --scenario FILE --url URL --out DIR` (live: each level a `replay::run` against the server,
//! guided by the simulated capacity unless `--no-guide`; the search itself is the library `crate::capacity`, which
//! `loadshape serve` calls too). The search, the steady-state window, the goal and the
//! saturation classes are `shared::capacity`'s (docs/capacity.md); levels are scored by `shared::metrics`, the one
//! scorer. Live, every level's records are kept in `DIR` (`level-NN-LOAD[-rR].jsonl`, one file per run of a level)
//! with `capacity.json` (what `--json` prints).
//!
//! `--replicas-for-slo` (simulated) answers the other question: the fewest replicas of the scenario's deployment
//! that keep the goal at its own load, GPUs and (`--gpu-hour-price`) money, over `--seeds` seeds
//! (`shared::replicas`).
//!
//! `--json` prints `{"capacity", "knob", "levels": [{"load", "pass", "attainment", "summary", "saturation", …}],
//! "resolution", "goal", "strategy", "notes"}`; live also `"simulated_capacity"`, `"simulated_levels"`,
//! `"levels_run"`, `"unguided_levels_simulated"`, `"repeat"` and `"run_dir"`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use serde_json::Value;
use shared::capacity::{self, Goal, Knob, LiveLevel, Per};
use shared::engine::Router;
use shared::metrics;
use shared::replicas;
use shared::scenario::Scenario;

use crate::capacity::{self as lib, fmt_load};
use crate::replay::TargetSettings;

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
    /// What to scale: `sessions`, `users`, `rate_rps` or `speedup` (a trace: 1 / time_scale; default: the
    /// workload's own).
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
    /// Simulated: instead of the most load, the fewest replicas (GPUs = replicas x the deployment's `tp`) that
    /// keep the goal at the scenario's own load, over `--seeds` seeds (docs/capacity.md, "Replicas for an SLO").
    #[arg(long, requires = "simulate", conflicts_with_all = ["url", "knob", "min", "max", "resolution"])]
    pub replicas_for_slo: bool,
    /// With `--replicas-for-slo`: seeds run (the scenario's, then the next ones); the answer's band.
    #[arg(long, default_value_t = 5, requires = "replicas_for_slo")]
    pub seeds: u32,
    /// With `--replicas-for-slo`: the price of one GPU for one hour; adds the cost per agent session and per
    /// million tokens.
    #[arg(
        long,
        value_name = "PRICE",
        allow_hyphen_values = true,
        requires = "replicas_for_slo"
    )]
    pub gpu_hour_price: Option<f64>,
    /// With `--replicas-for-slo`: the router (`round_robin`, `least_outstanding`, `session_affinity`,
    /// `prefix_aware`; default: the scenario's fleet's, else `least_outstanding`).
    #[arg(long, requires = "replicas_for_slo")]
    pub router: Option<String>,
    /// With `--replicas-for-slo`: most replicas tried.
    #[arg(long, default_value_t = 256, requires = "replicas_for_slo")]
    pub max_replicas: u32,
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

/// The scenario and the search, checked (errors name the field: `goal.attainment`, `knob`, …) and run in the
/// simulator.
fn resolve(a: &Args) -> anyhow::Result<lib::Plan> {
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {}", a.scenario.display()))?;
    let mut scenario = Scenario::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", a.scenario.display()))?;
    // A trace workload's file (`path`) is read now, relative to the scenario file.
    crate::tracefile::load_traces(&mut scenario, Some(&a.scenario))
        .with_context(|| a.scenario.display().to_string())?;
    let Scenario::Engine(e) = scenario else {
        anyhow::bail!(
            "{}: model must be \"engine\" for a capacity search (the seed model has no knob to scale)",
            a.scenario.display()
        );
    };
    let knob = a
        .knob
        .as_deref()
        .map(Knob::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ask = lib::Ask {
        knob,
        goal: parse_goal(a, &e.slo)?,
        warmup_fraction: a.warmup_fraction,
        bounds: lib::BoundsOverride {
            resolution: a.resolution,
            min: a.min,
            max: a.max,
            max_levels: Some(a.max_levels),
        },
        duration: a.duration,
    };
    lib::plan(e, &ask)
}

/// Everything `capacity` prints with `--json` (tests call this).
pub async fn capacity(a: &Args) -> anyhow::Result<Value> {
    if a.replicas_for_slo {
        return Ok(serde_json::to_value(replicas_for_slo(a)?)?);
    }
    capacity_until(a, None).await
}

/// `--replicas-for-slo`: the scenario read, the ask checked (each flag named), the search run in the simulator.
pub fn replicas_for_slo(a: &Args) -> anyhow::Result<replicas::ReplicaReport> {
    if let Some(p) = a.gpu_hour_price {
        anyhow::ensure!(
            p.is_finite() && p > 0.0,
            "--gpu-hour-price must be a positive amount per GPU-hour (got {p})"
        );
    }
    anyhow::ensure!(
        (1..=replicas::MAX_SEEDS).contains(&a.seeds),
        "--seeds must be in 1..={} (got {})",
        replicas::MAX_SEEDS,
        a.seeds
    );
    anyhow::ensure!(
        (1..=replicas::MAX_REPLICAS).contains(&a.max_replicas),
        "--max-replicas must be in 1..={} (got {})",
        replicas::MAX_REPLICAS,
        a.max_replicas
    );
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {}", a.scenario.display()))?;
    let mut scenario = Scenario::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", a.scenario.display()))?;
    crate::tracefile::load_traces(&mut scenario, Some(&a.scenario))
        .with_context(|| a.scenario.display().to_string())?;
    let Scenario::Engine(e) = scenario else {
        anyhow::bail!(
            "{}: model must be \"engine\" with a \"deployment\" for --replicas-for-slo (GPUs = replicas x tp)",
            a.scenario.display()
        );
    };
    replicas::gpus_per_replica(&e)
        .map_err(|err| anyhow::anyhow!("{}: --replicas-for-slo: {err}", a.scenario.display()))?;
    let router = match (&a.router, &e.fleet) {
        (Some(name), _) => Router::ALL.into_iter().find(|r| r.name() == name).with_context(|| {
            let names: Vec<&str> = Router::ALL.iter().map(|r| r.name()).collect();
            format!("--router must be one of {} (got {name:?})", names.join(", "))
        })?,
        (None, Some(f)) => f.router,
        (None, None) => Router::LeastOutstanding,
    };
    let spec = replicas::ReplicaSpec {
        goal: parse_goal(a, &e.slo)?,
        window: capacity::Window {
            warmup_fraction: a.warmup_fraction,
            ..capacity::Window::default()
        },
        router,
        load_cap: e.fleet.as_ref().map_or(1.5, |f| f.load_cap),
        max_replicas: a.max_replicas,
        seeds: a.seeds,
        gpu_hour_price: a.gpu_hour_price,
    };
    replicas::fewest_replicas(&e, &spec).map_err(|err| anyhow::anyhow!("{}: {err}", a.scenario.display()))
}

/// The `--replicas-for-slo` text report.
pub fn render_replicas(r: &replicas::ReplicaReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let band = |b: &Option<replicas::Band>, f: &dyn Fn(f64) -> String| match b {
        Some(b) if b.min == b.max => f(b.median),
        Some(b) => format!("{} (seeds: {} .. {})", f(b.median), f(b.min), f(b.max)),
        None => "-".to_string(),
    };
    let count = |v: f64| format!("{v:.0}");
    let money = |v: f64| format!("{v:.4}");
    let g = &r.goal;
    let _ = writeln!(
        out,
        "goal: {:.1} % of {}s meet {}; router {}; {} GPU(s) per replica",
        g.attainment * 100.0,
        match g.per {
            capacity::Per::Request => "request",
            capacity::Per::Session => "session",
        },
        [("ttft_ms", g.ttft_ms), ("tpot_ms", g.tpot_ms), ("e2e_ms", g.e2e_ms)]
            .iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k} <= {v}")))
            .collect::<Vec<_>>()
            .join(", "),
        r.router.name(),
        r.tp
    );
    let _ = writeln!(out, "replicas: {}", band(&r.replicas, &count));
    let _ = writeln!(out, "GPUs:     {}", band(&r.gpus, &count));
    if let Some(p) = r.gpu_hour_price {
        let _ = writeln!(out, "at {p} per GPU-hour:");
        let _ = writeln!(
            out,
            "  per agent session:         {}",
            band(&r.cost_per_session, &money)
        );
        let _ = writeln!(
            out,
            "  per million tokens:        {}",
            band(&r.cost_per_million_tokens, &money)
        );
        let _ = writeln!(
            out,
            "  per million output tokens: {}",
            band(&r.cost_per_million_output_tokens, &money)
        );
    }
    let _ = writeln!(out, "  seed  replicas  GPUs  tried (replicas: attainment)");
    for s in &r.seeds {
        let _ = writeln!(
            out,
            "  {:>4}  {:>8}  {:>4}  {}",
            s.seed,
            s.replicas.map_or("-".into(), |v| v.to_string()),
            s.gpus.map_or("-".into(), |v| v.to_string()),
            s.tried
                .iter()
                .map(|t| format!("{}: {:.3}{}", t.replicas, t.attainment, if t.pass { "" } else { " x" }))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// [`capacity()`], ended early when `interrupt` turns true: the running level is cut (its records kept), no further
/// level starts, and the report says so in `notes`.
pub async fn capacity_until(a: &Args, interrupt: Option<tokio::sync::watch::Receiver<bool>>) -> anyhow::Result<Value> {
    let plan = resolve(a)?;
    let Some(url) = &a.url else {
        return Ok(serde_json::to_value(&plan.simulated)?);
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
    let mut target = TargetSettings::new(url);
    target.model = a.model.clone();
    target.api_key = a.api_key.clone();
    let knob = plan.knob;
    let on_level: Option<lib::LevelFn> = (!a.json).then(|| {
        Arc::new(move |index: usize, l: &LiveLevel| {
            let level = &l.level;
            eprintln!(
                "level {}: {} = {} {} (attainment {:.3}, {}{})",
                index + 1,
                knob.name(),
                fmt_load(level.load),
                if level.pass { "passes" } else { "fails" },
                level.attainment,
                level.saturation.name(),
                if level.stopped_early { ", stopped early" } else { "" }
            );
        }) as lib::LevelFn
    });
    let settings = lib::Settings {
        plan,
        target,
        dir,
        source: a.scenario.display().to_string(),
        options: lib::LiveOptions {
            guided: !a.no_guide,
            duration: a.duration,
            drain_grace: a.drain_grace,
            repeat: a.repeat,
            early_stop: !a.no_early_stop,
            max_concurrency: None,
            max_level_seconds: None,
            upper_limit: None,
        },
    };
    lib::run(
        settings,
        lib::CapacityHooks {
            on_level,
            interrupt,
            ..lib::CapacityHooks::default()
        },
    )
    .await
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
    if a.replicas_for_slo {
        let r = replicas_for_slo(&a)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            print!("{}", render_replicas(&r));
        }
        return Ok(ExitCode::SUCCESS);
    }
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
