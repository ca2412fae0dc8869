//! `loadshape import`: read other load tools' results (and configs) into loadshape's records (and scenarios).
//!
//! Run with `loadshape import benchmarks.json [--from guidellm] --out run.jsonl`: each request of a
//! `vllm bench serve --save-result --save-detailed` file, a GuideLLM `benchmarks.json`, an AIPerf
//! `profile_export.jsonl` or an inference-perf `per_request_lifecycle_metrics.json` becomes a `RequestRecord`
//! (`shared::interop`), so `report`, `predict --against` and `calibrate --from` read it as they read our runs.
//! Beside `run.jsonl` goes `run.jsonl.import.json`: the tool, its version, the files, and the notes (fields the
//! source lacks, definitions that differ). Without `--out` the import's summary is printed. A summary-only file
//! (AIPerf's `profile_export_aiperf.json`, inference-perf's lifecycle summary, vllm bench without
//! `--save-detailed`) is read into its summary and says so. Several files: each run follows the previous one in
//! time, sessions numbered apart.
//!
//! `loadshape import --config FILE [--from TOOL] [--out scenario.json]` reads a peer's workload config (GuideLLM
//! scenario or `benchmarks.json`, AIPerf `profile_export_aiperf.json`, inference-perf YAML, or a file holding a
//! `guidellm run` / `aiperf profile` / `vllm bench serve` command line; a command line may also be given in place of
//! FILE) and writes the nearest scenario, listing what could not be carried over. Mapping: `docs/interop.md`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};
use shared::interop::config::{self, ConfigInput};
use shared::interop::{self, Imported, Tool};
use shared::metrics::{self, Slo};
use shared::record::RequestRecord;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Result files of another tool (with `--config`: one config file, or a command line in quotes).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The tool that wrote the files: vllm-bench, guidellm, aiperf or inference-perf (detected when not given).
    #[arg(long, value_name = "TOOL", value_parser = parse_tool)]
    pub from: Option<Tool>,
    /// Write the records here as JSONL (with `--config`: the scenario, as JSON), and the import's notes beside it
    /// (`RUN.jsonl.import.json`).
    #[arg(long, value_name = "RUN.jsonl")]
    pub out: Option<PathBuf>,
    /// Read a workload config or command line into the nearest scenario instead of results.
    #[arg(long)]
    pub config: bool,
}

pub fn parse_tool(s: &str) -> Result<Tool, String> {
    s.parse()
}

/// The notes file written beside an import's records (`report` shows it).
pub fn sidecar(out: &Path) -> PathBuf {
    crate::replay::summary::sidecar(out, "import.json")
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.config {
        return run_config(&a);
    }
    let mut runs: Vec<(PathBuf, Imported)> = Vec::new();
    for path in &a.files {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        let tool = match a.from {
            Some(t) => t,
            None => interop::detect(&name, &text).map_err(|e| anyhow::anyhow!("{e}"))?,
        };
        let imported = interop::import(tool, &name, &text).map_err(|e| anyhow::anyhow!("{e}"))?;
        runs.push((path.clone(), imported));
    }
    let records = merge(&runs);
    let notes: Vec<Value> = runs
        .iter()
        .map(|(p, i)| {
            json!({"file": p, "tool": i.tool, "tool_version": i.tool_version, "requests": i.records.len(),
                   "summary_only": i.summary.is_some(), "summary": i.summary, "notes": i.notes})
        })
        .collect();
    let about = json!({"imported_from": notes, "records": records.len()});
    for (p, i) in &runs {
        for n in &i.notes {
            eprintln!("{}: {}: {n}", p.display(), i.tool);
        }
    }
    match &a.out {
        Some(out) => {
            if records.is_empty() {
                std::fs::write(sidecar(out), serde_json::to_string_pretty(&about)? + "\n")
                    .with_context(|| format!("writing {}", sidecar(out).display()))?;
                eprintln!(
                    "summary only: no per-request data in the file(s), so no records were written; the summary is in {}",
                    sidecar(out).display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            write_records(out, &records)?;
            std::fs::write(sidecar(out), serde_json::to_string_pretty(&about)? + "\n")
                .with_context(|| format!("writing {}", sidecar(out).display()))?;
            let tools: Vec<&str> = runs.iter().map(|(_, i)| i.tool.name()).collect();
            eprintln!(
                "wrote {} records from {} to {} (notes in {})",
                records.len(),
                tools.join(", "),
                out.display(),
                sidecar(out).display()
            );
        }
        None => {
            let mut out = about;
            if !records.is_empty() {
                out["summary"] = serde_json::to_value(metrics::summarize(&records, &Slo::default()))?;
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The runs' records on one time axis: each run after the previous one's last end, its sessions numbered after
/// the previous run's.
pub fn merge(runs: &[(PathBuf, Imported)]) -> Vec<RequestRecord> {
    let mut out: Vec<RequestRecord> = Vec::new();
    let (mut t0, mut s0) = (0.0f64, 0u64);
    for (_, run) in runs {
        let (mut end, mut smax) = (t0, s0);
        for r in &run.records {
            let mut r = r.clone();
            r.t_submit += t0;
            r.session += s0;
            end = end.max(r.t_submit + r.wall_s);
            smax = smax.max(r.session + 1);
            out.push(r);
        }
        // A second apart, so that no request of one run seems to overlap the next's.
        t0 = if run.records.is_empty() { t0 } else { end + 1.0 };
        s0 = smax;
    }
    out
}

fn write_records(path: &Path, records: &[RequestRecord]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for r in records {
        serde_json::to_writer(&mut w, r).context("serializing a record")?;
        w.write_all(b"\n")?;
    }
    w.flush().with_context(|| format!("writing {}", path.display()))
}

/// A config file's text as structured data (JSON, else YAML) or a command line.
pub fn config_input(name: &str, text: &str) -> anyhow::Result<ConfigInput> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: Value = serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{name}: not valid JSON: {e}"))?;
        return Ok(ConfigInput::Value(v));
    }
    let first = trimmed.split_whitespace().next().unwrap_or("");
    let is_command = [
        "guidellm",
        "aiperf",
        "vllm",
        "inference-perf",
        "python",
        "python3",
        "genai-perf",
    ]
    .iter()
    .any(|c| first == *c || first.ends_with(&format!("/{c}")));
    if !is_command
        && let Ok(v) = serde_norway::from_str::<Value>(text)
        && v.is_object()
    {
        return Ok(ConfigInput::Value(v));
    }
    let words = config::split_command_line(text).map_err(|e| anyhow::anyhow!("{name}: not a command line: {e}"))?;
    Ok(ConfigInput::Args(words))
}

/// The tool a config names: a command line's program, or a structured config's keys.
pub fn config_tool(name: &str, input: &ConfigInput) -> anyhow::Result<Tool> {
    let found = match input {
        ConfigInput::Args(words) => words.iter().take(3).find_map(|w| {
            let base = w.rsplit('/').next().unwrap_or(w);
            match base {
                "guidellm" => Some(Tool::Guidellm),
                "aiperf" | "genai-perf" => Some(Tool::Aiperf),
                "vllm" | "benchmark_serving.py" => Some(Tool::VllmBench),
                "inference-perf" => Some(Tool::InferencePerf),
                _ => None,
            }
        }),
        ConfigInput::Value(v) => {
            let has = |k: &str| v.get(k).is_some();
            if has("benchmarks") || has("profile") || (has("data") && has("constraints")) {
                Some(Tool::Guidellm)
            } else if has("input_config") || has("phases") || has("aiperf_version") {
                Some(Tool::Aiperf)
            } else if has("load") && (has("server") || has("data")) {
                Some(Tool::InferencePerf)
            } else if has("backend") && (has("request_rate") || has("num_prompts")) {
                Some(Tool::VllmBench)
            } else {
                None
            }
        }
    };
    found.ok_or_else(|| anyhow::anyhow!("{name}: cannot tell which tool this config is for; name it with --from"))
}

fn run_config(a: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.files.len() == 1,
        "--config reads one config (got {} files)",
        a.files.len()
    );
    let path = &a.files[0];
    let name = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        // A command line given in place of a file.
        Err(_) if name.contains(char::is_whitespace) => name.clone(),
        Err(e) => return Err(anyhow::anyhow!("reading {name}: {e}")),
    };
    let input = config_input(&name, &text)?;
    let tool = match a.from {
        Some(t) => t,
        None => config_tool(&name, &input)?,
    };
    let imported = config::import_config(tool, &name, &input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let scenario = serde_json::to_string_pretty(&imported.scenario)? + "\n";
    match &a.out {
        Some(out) => {
            std::fs::write(out, &scenario).with_context(|| format!("writing {}", out.display()))?;
            eprintln!("wrote the nearest scenario to {}", out.display());
        }
        None => print!("{scenario}"),
    }
    if !imported.lost.is_empty() {
        eprintln!("not carried over from the {tool} config:");
        for l in &imported.lost {
            eprintln!("  - {l}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
