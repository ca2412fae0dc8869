//! `loadshape predict`: simulate a scenario with an engine profile (e.g. `calibrate`'s `profile.json`) over several
//! seeds and, given live runs of the same scenario, set simulated and live figures side by side.
//!
//! Run with `loadshape predict scenario.json --profile cal/profile.json [--fleet fleet.json] [--against run.jsonl
//! ...] [--seeds 10] [--json]`, or with `--deployment cal/deployment.json` (a deployment with calibrated
//! efficiencies, its model or GPU edited for a what-if) in place of `--profile`, or both (the measured server
//! running the deployment's model); with neither, the scenario's own profile (or deployment).
//! Every figure comes from `shared::metrics::summarize` (simulated and live alike), laid side by side by
//! `shared::predict::compare`, the function the page's live view calls for its table. `--json` prints
//! `{"simulated": Summary, "simulated_spread": {field: {min, mean, max}}, "live": Summary, "live_runs": [...],
//! "live_spread": {...}, "errors": {field: sim/live − 1}, "live_failures": Failures, "table": [Row], "seeds":
//! [...], "notes": [...]}`, and with `--live-acceptance` `"acceptance": {"from": "live", "share", "drafted",
//! "rate", "profile_share"}`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};
use shared::deploy::Deployment;
use shared::engine::EngineProfile;
use shared::engine::spec::Acceptance;
use shared::metrics::{self, Summary};
use shared::predict::{FIELDS, Row, Spread};
use shared::record::RequestRecord;
use shared::scenario::Scenario;

use crate::replay::records::{read_records, skipped_note};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (JSON, `"model": "engine"`).
    pub scenario: PathBuf,
    /// Engine profile JSON (replaces the scenario's `profile`). Without it or `--deployment`, the scenario's own
    /// profile (or deployment). With `--deployment` too: the measured server running the deployment's model (see
    /// `--deployment`).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Deployment JSON (a model on a GPU with its efficiencies, e.g. `calibrate --deployment`'s
    /// `deployment.json`, edited): its roofline replaces the scenario's `profile`. With `--profile` (the
    /// calibration's `profile.json`), the deployment prices each step and the profile keeps the server's
    /// scheduling, limits and cache: the same server with another model.
    #[arg(long, value_name = "FILE")]
    pub deployment: Option<PathBuf>,
    /// Fleet JSON (as a scenario's `"fleet"`, e.g. `sim-server --fleet`'s file): replaces the scenario's fleet.
    /// With `"disaggregation"`, a prefill/decode-disaggregated fleet (docs/simulator.md).
    #[arg(long, value_name = "FILE")]
    pub fleet: Option<PathBuf>,
    /// Live runs of the scenario (record JSONL files) to compare with.
    #[arg(long, value_name = "RUN.jsonl")]
    pub against: Vec<PathBuf>,
    /// Seeds to simulate (the scenario's seed, then the next ones): the simulated figures' spread.
    #[arg(long, default_value_t = shared::predict::DEFAULT_SEEDS)]
    pub seeds: u32,
    /// Speculative decoding: simulate at the acceptance the `--against` runs had (Σ accepted / Σ drafted tokens
    /// of their completed requests, as their summaries' `spec_acceptance`) instead of the profile's, written as the
    /// one per-position rate that gives that share. The errors are then the step cost's alone: with greedy
    /// decoding, or content unlike the calibration probe's, acceptance is the workload's, not the server's.
    #[arg(long, requires = "against")]
    pub live_acceptance: bool,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// The live runs' acceptance (`--live-acceptance`): Σ accepted / Σ drafted over the completed records that carry
/// draft counts, pooled over the runs.
fn live_share(runs: &[Vec<RequestRecord>]) -> Option<(f64, u64)> {
    let (drafted, accepted) = runs
        .iter()
        .flatten()
        .filter(|r| r.ok)
        .filter_map(|r| r.spec)
        .fold((0u64, 0u64), |(d, a), c| (d + c.draft_tokens, a + c.accepted_tokens));
    (drafted > 0).then(|| (accepted as f64 / drafted as f64, drafted))
}

/// Puts the live runs' acceptance into the profile's `speculative` (`--live-acceptance`); returns the JSON
/// `predict` reports of it and a note.
fn use_live_acceptance(
    profile: &mut EngineProfile,
    runs: &[Vec<RequestRecord>],
    against: &[PathBuf],
) -> anyhow::Result<(Value, String)> {
    let Some(spec) = profile.speculative.as_mut() else {
        anyhow::bail!("--live-acceptance: the profile has no `speculative` block (speculative decoding is off)");
    };
    let Some((share, drafted)) = live_share(runs) else {
        anyhow::bail!(
            "--live-acceptance: no completed request in {} carries draft counts (the server did not report them)",
            against
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let before = spec.pooled_acceptance_rate();
    let profile_spread = spec.acceptance_spread;
    // The runs' own spread of acceptance over their requests, where they show one (else the profile's).
    let counted: Vec<&RequestRecord> = runs
        .iter()
        .flatten()
        .filter(|r| r.ok && r.spec.is_some() && r.check().is_ok())
        .collect();
    let spread = shared::calibrate::spec::fit_spread(&counted, spec.draft_tokens).ok();
    if let Some(f) = spread {
        spec.acceptance_spread = f.tau;
    }
    spec.acceptance = Acceptance::Rate(shared::engine::spec::rate_for_share(share, spec.draft_tokens));
    // With `acceptance_spread`, the middle request's rate for which requests spread so pool to the runs' share.
    spec.acceptance = spec.centered_on(share);
    let rate = match spec.acceptance {
        Acceptance::Rate(a) => a,
        Acceptance::PerPosition(_) => spec.acceptance_rate(),
    };
    let by_kind = spec.acceptance_by_kind.take().is_some();
    let note = format!(
        "acceptance: the live runs' {share:.4} of {drafted} drafted tokens (one rate {rate:.4} per position for \
         {} drafted a step{}) in place of the profile's {before:.4}{}",
        spec.draft_tokens,
        if spec.acceptance_spread > 0.0 {
            format!(
                ", the middle request's under acceptance_spread {:.3}",
                spec.acceptance_spread
            )
        } else {
            String::new()
        },
        if by_kind {
            ", and its acceptance_by_kind dropped"
        } else {
            ""
        }
    );
    let note = match spread {
        Some(f) => format!(
            "{note}; acceptance_spread {:.3} from {} of their requests' own shares ({:.2} to {:.2}; the profile's {:.3})",
            f.tau, f.requests, f.lowest, f.highest, profile_spread
        ),
        None => note,
    };
    let json = json!({"from": "live", "share": share, "drafted": drafted, "rate": rate, "profile_share": before,
        "spread": spread.map(|f| f.tau), "spread_requests": spread.map_or(0, |f| f.requests),
        "profile_spread": profile_spread});
    Ok((json, note))
}

fn field(s: &Value, name: &str) -> Option<f64> {
    s.get(name).and_then(Value::as_f64).filter(|v| v.is_finite())
}

/// Rows' spreads as `{field: {min, mean, max}}`, the field absent where no run has it.
fn spread_json(rows: &[Row], of: impl Fn(&Row) -> Option<Spread>) -> Value {
    let mut out = serde_json::Map::new();
    for r in rows {
        if let Some(sp) = of(r) {
            out.insert(r.field.clone(), json!(sp));
        }
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
    let read_deployment = |path: &PathBuf| -> anyhow::Result<(Deployment, EngineProfile)> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading --deployment {}", path.display()))?;
        let d = Deployment::from_json(&text).map_err(|e| anyhow::anyhow!("--deployment {}: {e}", path.display()))?;
        let resolved = d
            .resolve()
            .map_err(|e| anyhow::anyhow!("--deployment {}: {e}", path.display()))?;
        Ok((d, resolved.profile))
    };
    let source = match (&a.profile, &a.deployment) {
        (Some(p), None) => {
            sc.profile = crate::sim_server::load_profile_file(p)?;
            sc.deployment = None;
            format!("profile {}", p.display())
        }
        (Some(p), Some(path)) => {
            let server = crate::sim_server::load_profile_file(p)?;
            let (_, priced) = read_deployment(path)?;
            sc.profile = shared::deploy::transfer::on_server(&server, &priced);
            sc.deployment = None;
            format!("deployment {} on the server of profile {}", path.display(), p.display())
        }
        (None, Some(path)) => {
            let (d, profile) = read_deployment(path)?;
            sc.profile = profile;
            sc.deployment = Some(d);
            format!("deployment {}", path.display())
        }
        (None, None) if sc.deployment.is_some() => "the scenario's own deployment".to_string(),
        (None, None) => "the scenario's own profile".to_string(),
    };
    let source = match &a.fleet {
        Some(path) => {
            let (fleet, disaggregation) = crate::cmd::sim_server::load_fleet_file(path)?;
            sc.fleet = Some(fleet);
            sc.disaggregation = disaggregation;
            format!("{source} and fleet {}", path.display())
        }
        None => source,
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
    let acceptance = if a.live_acceptance {
        let (json, note) = use_live_acceptance(&mut sc.profile, &live_records, &a.against)?;
        notes.push(note);
        Some(json)
    } else {
        None
    };
    let window = shared::predict::window_of(live_records.iter().map(Vec::as_slice));
    if let Some(end) = window {
        notes.push(format!(
            "a live run was cut (stopped early or at its deadline): the simulated figures are those of its window, \
             the requests submitted in the first {end:.1} s (running ones cut there, as the live run's were)"
        ));
    }
    let runs = shared::predict::simulate_seeds(&sc, a.seeds, window)
        .map_err(|e| anyhow::anyhow!("simulating {}: {e}", a.scenario.display()))?;
    let (seeds, summaries): (Vec<u64>, Vec<Summary>) = runs.into_iter().unzip();
    let first = &summaries[0];
    if first.completed == 0 {
        anyhow::bail!(
            "the profile does not fit the scenario: none of its {} requests completes (prompt + output above \
             the profile's max_model_len {}?)",
            first.failed,
            sc.profile.model_len()
        );
    }
    if first.failed > 0 {
        notes.push(format!(
            "{} of {} simulated requests do not fit the profile (prompt + output > max_model_len {}): failed",
            first.failed,
            first.failed + first.completed,
            sc.profile.model_len()
        ));
    }
    let lives: Vec<Summary> = live_records.iter().map(|r| metrics::summarize(r, &sc.slo)).collect();
    let rows = shared::predict::compare(
        &summaries.iter().map(shared::predict::values).collect::<Vec<_>>(),
        &lives.iter().map(shared::predict::values).collect::<Vec<_>>(),
    );
    let mut out = json!({
        "scenario": a.scenario.display().to_string(),
        "profile": a.profile.as_ref().map(|p| p.display().to_string()),
        "deployment": a.deployment.as_ref().map(|p| p.display().to_string()),
        "fleet": a.fleet.as_ref().map(|p| p.display().to_string()),
        "seeds": seeds,
        "simulated": first,
        "simulated_spread": spread_json(&rows, |r| r.simulated_spread),
        "window_s": window,
    });
    if let Some(acc) = acceptance {
        out["acceptance"] = acc;
    }
    if let Some(live) = lives.first() {
        let mut errors = serde_json::Map::new();
        for r in &rows {
            if let Some(e) = r.error {
                errors.insert(r.field.clone(), json!(e));
            }
        }
        out["live"] = serde_json::to_value(live)?;
        out["errors"] = Value::Object(errors);
        if lives.len() >= 2 {
            out["live_spread"] = spread_json(&rows, |r| r.live_spread);
        }
        out["live_runs"] = serde_json::to_value(&lives)?;
        // The failures of the first live run (failed, cut, never sent, the first error).
        out["live_failures"] = serde_json::to_value(metrics::failures(&live_records[0]))?;
    }
    out["table"] = serde_json::to_value(&rows)?;
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
    if let Some(f) = out
        .get("live_failures")
        .and_then(|f| serde_json::from_value::<metrics::Failures>(f.clone()).ok())
        && f.failed > 0
    {
        let _ = writeln!(
            s,
            "live: {} failed request(s); first error: {}",
            f.failed,
            f.first_error.as_deref().unwrap_or("-")
        );
        if let Some(t) = metrics::never_sent_text(&f) {
            let _ = writeln!(s, "live: {t}");
        }
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
