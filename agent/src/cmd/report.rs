//! `loadshape report FILE.jsonl`: score any record file (live or simulated) with `shared::metrics::summarize`, the
//! same module the simulator and `loadshape replay` use, and print the summary (or JSON with `--json`).
//!
//! Run with `loadshape report run.jsonl [--json] [--ttft-slo-ms 500 --tpot-slo-ms 35]`. Lines that do not parse are
//! reported with their line numbers and skipped (a torn last line, cut before its newline by a crash, is named as
//! such), and how many were skipped is said. A `<FILE>.server.json` written by `replay` beside the file is shown
//! too. `--export mooncake|agentic-mooncake` writes the run as a trace instead (`shared::workload::mooncake`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use shared::metrics::{self, Slo};

use crate::replay::prom::ServerReport;
use crate::replay::records::{self, BadLine};
use crate::replay::render::render;
use crate::replay::summary::{Checks, prefix_reuse, replica_reports_in, replica_rows, sidecar};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A JSONL record file (one RequestRecord per line).
    pub file: PathBuf,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// TTFT target for goodput, ms.
    #[arg(long, default_value_t = Slo::default().ttft_ms)]
    pub ttft_slo_ms: f64,
    /// TPOT target for goodput, ms.
    #[arg(long, default_value_t = Slo::default().tpot_ms)]
    pub tpot_slo_ms: f64,
    /// Instead of the report, write the run to standard output as a trace that Mooncake readers (AIPerf, Dynamo,
    /// SGLang, loadshape's `trace` workload) replay: hash ids over the prompt blocks the run sent (512 tokens).
    #[arg(long, value_name = "FORMAT")]
    pub export: Option<ExportFormat>,
}

/// `--export` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Mooncake JSONL: timestamp, input_length, output_length, hash_ids (and session_id, delay for sessions).
    Mooncake,
    /// Dynamo's agentic Mooncake: request_id, session_id, wait_for and delay besides Mooncake's fields.
    AgenticMooncake,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let slo = Slo {
        ttft_ms: a.ttft_slo_ms,
        tpot_ms: a.tpot_slo_ms,
        e2e_ms: None,
    };
    slo.validate().map_err(|e| anyhow::anyhow!("SLO: {e}"))?;
    let (recs, bad) = records::read_records(&a.file)?;
    for line in skipped_lines(&a.file.display().to_string(), &bad) {
        eprintln!("{line}");
    }
    anyhow::ensure!(!recs.is_empty(), "{} holds no record", a.file.display());
    if let Some(format) = a.export {
        let rows = shared::workload::mooncake::export_records(&recs)
            .map_err(|e| anyhow::anyhow!("{}: cannot export: {e}", a.file.display()))?;
        print!(
            "{}",
            shared::workload::mooncake::export(&rows, format == ExportFormat::AgenticMooncake)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let summary = metrics::summarize(&recs, &slo);
    let side = sidecar(&a.file, "server.json");
    let server_json = std::fs::read(&side)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let server: Option<ServerReport> = server_json
        .as_ref()
        .and_then(|v| v.get("report"))
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    // A run over several URLs: each replica's own `/metrics` report (server.json's `replicas`).
    let replica_servers = server_json.as_ref().map(replica_reports_in).unwrap_or_default();
    // Records `loadshape import` read from another tool's files: which tool, and the notes on what differs.
    let imported = std::fs::read(sidecar(&a.file, "import.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("imported_from").cloned());
    if a.json {
        let checks = Checks::of(&recs);
        let mut out = serde_json::json!({
            "file": a.file, "records": recs.len(), "malformed_lines": bad.iter().map(|b| b.line).collect::<Vec<_>>(),
            "torn_last_line": bad.iter().find(|b| b.torn).map(|b| b.line),
            "slo": slo, "summary": summary, "checks": checks,
            // Failed and cut requests, the session steps never sent after a failure, the first error.
            "failures": metrics::failures(&recs),
            // Achieved vs designed cached share, flagged below 80 % (as in summary.json; null when not judged).
            "prefix_reuse": prefix_reuse(&summary),
            "server": server_json.as_ref().and_then(|v| v.get("report")),
        });
        // Records that name their replica (a fleet: `simulate` with one, `replay` over several URLs): each one's
        // share, with its own `/metrics` report (`server`) when the replay scraped each replica. Absent otherwise.
        if let Some(from) = &imported {
            out["imported_from"] = from.clone();
        }
        let rows = replica_rows(&recs, &replica_servers);
        if !rows.is_empty() {
            out["replicas"] = serde_json::to_value(&rows).context("serializing the replicas")?;
            out["sessions_on_several_replicas"] = metrics::replicas::sessions_on_several_replicas(&recs).into();
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the report")?
        );
    } else {
        println!("{}", render(&recs, &summary, &slo, server.as_ref(), &replica_servers));
        for from in imported.iter().flat_map(|v| v.as_array().into_iter().flatten()) {
            let field = |k: &str| from.get(k).and_then(serde_json::Value::as_str).unwrap_or("?");
            println!(
                "imported from {} {} ({}): {} notes on what differs from loadshape's records in {}",
                field("tool"),
                from.get("tool_version")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("(version not in the file)"),
                field("file"),
                from.get("notes")
                    .and_then(serde_json::Value::as_array)
                    .map_or(0, Vec::len),
                sidecar(&a.file, "import.json").display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `report` says on stderr about the lines it skipped: the first 20 by line number and why, then a count.
fn skipped_lines(file: &str, bad: &[BadLine]) -> Vec<String> {
    let mut out = Vec::new();
    for b in bad.iter().take(20) {
        out.push(if b.torn {
            format!(
                "{file}:{}: skipped a torn last line (cut before its newline, e.g. by a crash): {}",
                b.line, b.error
            )
        } else if b.error.starts_with("impossible value") {
            format!("{file}:{}: record skipped: {}", b.line, b.error)
        } else {
            format!("{file}:{}: malformed record: {}", b.line, b.error)
        });
    }
    if bad.len() > 20 {
        out.push(format!("... and {} more malformed lines", bad.len() - 20));
    }
    if !bad.is_empty() {
        let torn = bad.iter().filter(|b| b.torn).count();
        let malformed = bad.len() - torn;
        let mut why = Vec::new();
        if malformed > 0 {
            why.push(format!("{malformed} malformed"));
        }
        if torn > 0 {
            why.push("1 torn last line".to_string());
        }
        out.push(format!(
            "{file}: skipped {} line(s) ({}); every other line was scored",
            bad.len(),
            why.join(", ")
        ));
    }
    out
}
