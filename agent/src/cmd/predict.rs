//! `loadshape predict`: simulate a scenario with an engine profile (e.g. `calibrate`'s `profile.json`) over several
//! seeds and, given live runs of the same scenario, set simulated and live figures side by side.
//!
//! Run with `loadshape predict scenario.json --profile cal/profile.json [--against run.jsonl ...] [--seeds 10]
//! [--json]`, or with `--deployment cal/deployment.json` (a deployment with calibrated efficiencies, its model or
//! GPU edited for a what-if) in place of `--profile`. Every figure comes from `shared::metrics::summarize` (simulated and live alike). `--json` prints
//! `{"simulated": Summary, "simulated_spread": {field: {min, mean, max}}, "live": Summary, "live_runs": [...],
//! "live_spread": {...}, "errors": {field: sim/live − 1}, "seeds": [...], "notes": [...]}`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};
use shared::deploy::Deployment;
use shared::engine::{self, SimOptions};
use shared::metrics::{self, Summary};
use shared::scenario::Scenario;
use shared::window;

use crate::replay::records::{read_records, skipped_note};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (JSON, `"model": "engine"`).
    pub scenario: PathBuf,
    /// Engine profile JSON (replaces the scenario's `profile`).
    #[arg(long, required_unless_present = "deployment", conflicts_with = "deployment")]
    pub profile: Option<PathBuf>,
    /// Deployment JSON (a model on a GPU with its efficiencies, e.g. `calibrate --deployment`'s
    /// `deployment.json`, edited): its roofline replaces the scenario's `profile`.
    #[arg(long, value_name = "FILE")]
    pub deployment: Option<PathBuf>,
    /// Live runs of the scenario (record JSONL files) to compare with.
    #[arg(long, value_name = "RUN.jsonl")]
    pub against: Vec<PathBuf>,
    /// Seeds to simulate (the scenario's seed, then the next ones): the simulated figures' spread.
    #[arg(long, default_value_t = 10)]
    pub seeds: u32,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// The compared fields, by `Summary`'s names.
pub const FIELDS: [&str; 12] = [
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "e2el_p50_ms",
    "e2el_p90_ms",
    "e2el_p99_ms",
    "cached_share_achieved",
    "output_throughput_tok_s",
    "request_throughput_rps",
];

fn field(s: &Value, name: &str) -> Option<f64> {
    s.get(name).and_then(Value::as_f64).filter(|v| v.is_finite())
}

/// Per field: min, mean and max over `summaries`.
fn spread(summaries: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    for f in FIELDS {
        let v: Vec<f64> = summaries.iter().filter_map(|s| field(s, f)).collect();
        if v.is_empty() {
            continue;
        }
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        out.insert(f.into(), json!({"min": min, "mean": mean, "max": max}));
    }
    Value::Object(out)
}

/// Everything `predict` prints with `--json` (tests call this).
pub fn predict(a: &Args) -> anyhow::Result<Value> {
    anyhow::ensure!(
        (1..=1000).contains(&a.seeds),
        "--seeds must be in 1..=1000 (got {})",
        a.seeds
    );
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading scenario file {}", a.scenario.display()))?;
    let scenario = Scenario::from_json(&text).with_context(|| a.scenario.display().to_string())?;
    let Scenario::Engine(mut sc) = scenario else {
        anyhow::bail!(
            "{}: predict needs an engine-model scenario (\"model\": \"engine\"); a profile is an engine profile",
            a.scenario.display()
        );
    };
    let source = match (&a.profile, &a.deployment) {
        (Some(p), _) => {
            sc.profile = crate::sim_server::load_profile_file(p)?;
            sc.deployment = None;
            format!("profile {}", p.display())
        }
        (None, Some(path)) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading --deployment {}", path.display()))?;
            let d =
                Deployment::from_json(&text).map_err(|e| anyhow::anyhow!("--deployment {}: {e}", path.display()))?;
            let resolved = d
                .resolve()
                .map_err(|e| anyhow::anyhow!("--deployment {}: {e}", path.display()))?;
            sc.profile = resolved.profile;
            sc.deployment = Some(d);
            format!("deployment {}", path.display())
        }
        (None, None) => anyhow::bail!("predict needs --profile FILE or --deployment FILE"),
    };
    sc.counterfactuals = false;
    sc.validate()
        .map_err(|e| anyhow::anyhow!("{} with {source}: {e}", a.scenario.display()))?;
    let mut notes = Vec::new();
    // The live runs first: one that stopped early or was cut at its deadline is compared with the simulated
    // requests of its own window (`shared::window`), not with the whole simulated run.
    let mut live_records = Vec::new();
    for p in &a.against {
        let (records, bad) = read_records(p).with_context(|| format!("reading {}", p.display()))?;
        if records.is_empty() {
            let why = match bad.first() {
                Some(b) => format!("{} unreadable line(s); line {}: {}", bad.len(), b.line, b.error),
                None => "it holds no line".to_string(),
            };
            anyhow::bail!("{}: no records ({why})", p.display());
        }
        notes.extend(skipped_note(p, &bad));
        live_records.push(records);
    }
    let window = live_records
        .iter()
        .filter(|r| window::was_cut(r))
        .filter_map(|r| window::covered_s(r))
        .reduce(f64::min);
    if let Some(end) = window {
        notes.push(format!(
            "a live run was cut (stopped early or at its deadline): the simulated figures are those of its window, \
             the requests submitted in the first {end:.1} s (running ones cut there, as the live run's were)"
        ));
    }
    let options = SimOptions {
        keep_records: window.is_some(),
        ..SimOptions::SUMMARY
    };
    let mut sims = Vec::new();
    let mut seeds = Vec::new();
    let mut first: Option<Summary> = None;
    for i in 0..a.seeds {
        let mut s = sc.clone();
        s.seed = sc.seed.wrapping_add(u64::from(i));
        let mut report = engine::simulate_with(&s, options)
            .with_context(|| format!("simulating {} with seed {}", a.scenario.display(), s.seed))?;
        if let Some(end) = window {
            report.summary = metrics::summarize(&window::clip(&report.records, end, window::InFlight::Cut), &s.slo);
        }
        if report.summary.completed == 0 {
            anyhow::bail!(
                "the profile does not fit the scenario: none of its {} requests completes (prompt + output above \
                 the profile's max_model_len {}?)",
                report.summary.failed,
                sc.profile.model_len()
            );
        }
        if i == 0 && report.summary.failed > 0 {
            notes.push(format!(
                "{} of {} simulated requests do not fit the profile (prompt + output > max_model_len {}): failed",
                report.summary.failed,
                report.summary.failed + report.summary.completed,
                sc.profile.model_len()
            ));
        }
        seeds.push(s.seed);
        sims.push(serde_json::to_value(&report.summary)?);
        first.get_or_insert(report.summary);
    }
    let mut out = json!({
        "scenario": a.scenario.display().to_string(),
        "profile": a.profile.as_ref().map(|p| p.display().to_string()),
        "deployment": a.deployment.as_ref().map(|p| p.display().to_string()),
        "seeds": seeds,
        "simulated": first,
        "simulated_spread": spread(&sims),
        "window_s": window,
    });
    if !a.against.is_empty() {
        let mut lives = Vec::new();
        for records in &live_records {
            lives.push(serde_json::to_value(metrics::summarize(records, &sc.slo))?);
        }
        let live = lives[0].clone();
        let sim = &out["simulated"];
        let mut errors = serde_json::Map::new();
        for f in FIELDS {
            if let (Some(s), Some(l)) = (field(sim, f), field(&live, f))
                && l != 0.0
            {
                errors.insert(f.into(), json!(s / l - 1.0));
            }
        }
        out["live"] = live;
        out["errors"] = Value::Object(errors);
        if lives.len() >= 2 {
            out["live_spread"] = spread(&lives);
        }
        out["live_runs"] = Value::Array(lives);
    }
    out["notes"] = json!(notes);
    Ok(out)
}

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 1.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.3}"),
        None => "-".into(),
    }
}

/// The side-by-side table.
pub fn render(out: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let n = out["seeds"].as_array().map_or(0, Vec::len);
    let _ = writeln!(
        s,
        "{:<24} {:>10} {:>21} {:>10} {:>21} {:>8}",
        "",
        "simulated",
        format!("over {n} seeds"),
        "live",
        "live runs",
        "error"
    );
    for f in FIELDS {
        let range = |spread: &Value| {
            spread
                .get(f)
                .map(|r| format!("{}..{}", fmt(r["min"].as_f64()), fmt(r["max"].as_f64())))
                .unwrap_or_default()
        };
        let err = out
            .get("errors")
            .and_then(|e| e.get(f))
            .and_then(Value::as_f64)
            .map(|e| format!("{:+.1} %", e * 100.0))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "{:<24} {:>10} {:>21} {:>10} {:>21} {:>8}",
            f,
            fmt(field(&out["simulated"], f)),
            range(&out["simulated_spread"]),
            out.get("live").map_or(String::new(), |l| fmt(field(l, f))),
            out.get("live_spread").map_or(String::new(), range),
            err
        );
    }
    for n in out["notes"].as_array().into_iter().flatten() {
        let _ = writeln!(s, "note: {}", n.as_str().unwrap_or_default());
    }
    s
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let out = predict(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&out));
    }
    Ok(ExitCode::SUCCESS)
}
