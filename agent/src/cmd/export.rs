//! `loadshape export --to guidellm|aiperf|inference-perf SCENARIO`: write a scenario's workload as the other tool's
//! command line (GuideLLM, AIPerf) or config file (inference-perf YAML), the closest equivalent, so a team can run
//! the same load in both tools; what could not be carried over is listed on standard error (and, for the YAML, as
//! comments). `shared::interop::config::export`; mapping in `docs/interop.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use shared::interop::Tool;
use shared::scenario::Scenario;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tool to write for: guidellm, aiperf, inference-perf (or vllm-bench).
    #[arg(long, value_name = "TOOL", value_parser = super::import::parse_tool)]
    pub to: Tool,
    /// A scenario file (JSON).
    pub scenario: PathBuf,
    /// The server the tool should load (its OpenAI base URL).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// The model name to send.
    #[arg(long, default_value = "sim")]
    pub model: String,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {}", a.scenario.display()))?;
    let scenario = Scenario::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", a.scenario.display()))?;
    let out = shared::interop::config::export(a.to, &scenario, &a.url, &a.model)
        .map_err(|e| anyhow::anyhow!("{}: cannot write it for {}: {e}", a.scenario.display(), a.to))?;
    let mut body = out.text.clone();
    if a.to == Tool::InferencePerf && !out.lost.is_empty() {
        body.push_str("# not carried over from the loadshape scenario:\n");
        for l in &out.lost {
            body.push_str(&format!("#   - {l}\n"));
        }
    }
    match &a.out {
        Some(p) => {
            std::fs::write(p, &body).with_context(|| format!("writing {}", p.display()))?;
            eprintln!("wrote the {} equivalent to {}", a.to, p.display());
        }
        None => print!("{body}"),
    }
    if !out.lost.is_empty() {
        eprintln!("not carried over to {}:", a.to);
        for l in &out.lost {
            eprintln!("  - {l}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
