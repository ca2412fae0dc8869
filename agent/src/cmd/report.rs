//! `loadshape report FILE.jsonl`: score any record file (live or simulated) with `shared::metrics::summarize`, the
//! same module the simulator and `loadshape replay` use, and print the summary (or JSON with `--json`).
//!
//! Run with `loadshape report run.jsonl [--json] [--ttft-slo-ms 500 --tpot-slo-ms 35]`. The SLOs are the flags',
//! else those of the `scenario.json` beside the records (a run `loadshape serve` stored), else 500/35 ms; which
//! ones were used is said (stderr, and `slo_from` in the JSON). Lines that do not parse are
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
    /// TTFT target for goodput, ms (default: the `scenario.json` beside the file, else 500).
    #[arg(long)]
    pub ttft_slo_ms: Option<f64>,
    /// TPOT target for goodput, ms (default: the `scenario.json` beside the file, else 35).
    #[arg(long)]
    pub tpot_slo_ms: Option<f64>,
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
    let (slo, slo_from) = resolve_slo(&a.file, a.ttft_slo_ms, a.tpot_slo_ms, &|m: &str| eprintln!("{m}"));
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
    eprintln!("SLOs: {} ({slo_from})", slo_text(&slo));
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
            "slo": slo, "slo_from": slo_from, "summary": summary, "checks": checks,
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
        // A prefill/decode-disaggregated run: its KV transfers (absent without).
        if let Some(t) = metrics::replicas::kv_transfer_summary(&recs) {
            out["kv_transfer"] = serde_json::to_value(t).context("serializing the transfers")?;
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

/// The SLOs a record file is scored against, and where they came from: each flag given wins; the rest come from
/// the `scenario.json` beside the file (the folder of a run `loadshape serve` stored), else the defaults (500/35 ms,
/// no E2E target). A `scenario.json` that does not parse is named through `warn` and the defaults are used.
pub fn resolve_slo(
    file: &std::path::Path,
    ttft_flag: Option<f64>,
    tpot_flag: Option<f64>,
    warn: &dyn Fn(&str),
) -> (Slo, String) {
    let beside = file.with_file_name("scenario.json");
    let from_file = match std::fs::read_to_string(&beside) {
        Err(_) => None,
        Ok(text) => match shared::scenario::Scenario::from_json(&text) {
            Ok(sc) => Some(sc.slo()),
            Err(e) => {
                warn(&format!(
                    "note: {} does not parse ({e}); its SLOs are not used",
                    beside.display()
                ));
                None
            }
        },
    };
    let mut slo = from_file.unwrap_or_default();
    let mut flags = Vec::new();
    if let Some(t) = ttft_flag {
        slo.ttft_ms = t;
        flags.push("--ttft-slo-ms");
    }
    if let Some(t) = tpot_flag {
        slo.tpot_ms = t;
        flags.push("--tpot-slo-ms");
    }
    let rest = if from_file.is_some() {
        beside.display().to_string()
    } else {
        "the defaults (no scenario.json beside the records)".to_string()
    };
    let from = match flags.len() {
        0 => format!("from {rest}"),
        1 => format!("from {}, the rest from {rest}", flags[0]),
        _ => format!("from {}", flags.join(" and ")),
    };
    (slo, from)
}

/// The SLOs in a line: `TTFT 500 ms, TPOT 35 ms` (and `, E2E 8000 ms` when set).
pub fn slo_text(slo: &Slo) -> String {
    let mut t = format!("TTFT {} ms, TPOT {} ms", slo.ttft_ms, slo.tpot_ms);
    if let Some(e) = slo.e2e_ms {
        t.push_str(&format!(", E2E {e} ms"));
    }
    t
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
