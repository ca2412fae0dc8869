//! `loadshape simulate`: run a scenario file through the simulator, or print the seed's report.
//!
//! - `loadshape simulate --seed-report` prints the seed simulator's whole report (`scenario_sim.py`'s output).
//! - `loadshape simulate FILE` (`-` for stdin) prints a readable summary; `--json` prints machine output: for
//!   `"model": "seed"` exactly the seed's summary fields (`engine`, `workload`, `total_requests`, `duration_s`, …).
//!
//! Bad input exits non-zero with a message naming the field (`workload.mean_rps must be > 0 (got 0)`).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use shared::scenario::Scenario;
use shared::seed_model::{self, SeedSummary};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (JSON); `-` reads standard input.
    #[arg(required_unless_present = "seed_report", conflicts_with = "seed_report")]
    pub file: Option<PathBuf>,
    /// Print the seed simulator's whole report (equal to the seed's `scenario_sim_output.json`).
    #[arg(long)]
    pub seed_report: bool,
    /// Machine-readable JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.seed_report {
        println!("{}", seed_model::seed_report_json());
        return Ok(ExitCode::SUCCESS);
    }
    let Some(path) = args.file else {
        anyhow::bail!("give a scenario FILE (or `-` for stdin), or --seed-report");
    };
    let (text, source) = read_input(&path)?;
    let scenario = Scenario::from_json(&text).with_context(|| format!("invalid scenario in {source}"))?;
    match scenario {
        Scenario::Seed(s) => {
            let summary = seed_model::evaluate(&s).with_context(|| format!("cannot simulate {source}"))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", seed_table(&summary, s.closed_loop));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The scenario text and a name for messages.
fn read_input(path: &PathBuf) -> anyhow::Result<(String, String)> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the scenario from standard input")?;
        Ok((text, "standard input".to_string()))
    } else {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading scenario file {}", path.display()))?;
        Ok((text, path.display().to_string()))
    }
}

/// A readable two-column table of a seed-model summary.
fn seed_table(s: &SeedSummary, closed_loop: bool) -> String {
    let rows: [(&str, String); 11] = [
        (
            "model",
            format!("seed ({} loop)", if closed_loop { "closed" } else { "open" }),
        ),
        ("engine", s.engine.clone()),
        ("workload", s.workload.clone()),
        ("requests", s.total_requests.to_string()),
        ("duration", format!("{} s", s.duration_s)),
        ("TTFT p50 / p99", format!("{} / {} ms", s.ttft_p50_ms, s.ttft_p99_ms)),
        ("TPOT p50 / p99", format!("{} / {} ms", s.tpot_p50_ms, s.tpot_p99_ms)),
        ("output tokens/s", s.raw_output_tokens_per_s.to_string()),
        ("requests/s", s.request_throughput_rps.to_string()),
        ("SLO goodput", format!("{} req/s", s.slo_goodput_rps)),
        ("SLO attainment", format!("{:.2} %", s.slo_attainment_ratio * 100.0)),
    ];
    let mut out = String::new();
    for (k, v) in &rows {
        out.push_str(&format!("{k:<18}{v}\n"));
    }
    out
}
