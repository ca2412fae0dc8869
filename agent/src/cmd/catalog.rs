//! `loadshape catalog [gpus|models] [--json]`: the GPUs and models a scenario's `"deployment"` may name, with their
//! numbers and sources (`shared::deploy::catalog`). Also the text of a deployment's derived numbers that
//! `simulate` prints beside its result ([`derived_text`]).
//!
//! ```text
//! loadshape catalog               # both tables
//! loadshape catalog gpus --json   # the GPUs as JSON
//! ```

use std::fmt::Write;
use std::process::ExitCode;

use serde_json::{Value, json};
use shared::deploy::catalog::{self, GpuSpec};
use shared::deploy::model::ModelSpec;
use shared::deploy::{Derived, Dtype};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Gpus,
    Models,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only the GPUs or only the models (default: both).
    #[arg(value_enum)]
    pub which: Option<Which>,
    /// Print JSON: `{"gpus": [...], "models": [...]}` (only the one asked for).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let gpus = args.which != Some(Which::Models);
    let models = args.which != Some(Which::Gpus);
    if args.json {
        let mut out = serde_json::Map::new();
        if gpus {
            out.insert("gpus".into(), serde_json::to_value(catalog::gpus())?);
        }
        if models {
            out.insert("models".into(), Value::Array(model_rows()?));
        }
        println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    if gpus {
        text += &gpu_table(&catalog::gpus());
    }
    if models {
        if gpus {
            text.push('\n');
        }
        text += &model_table()?;
    }
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// Each model as JSON: name, source, the shape read from its `config.json`, and its parameter counts.
fn model_rows() -> anyhow::Result<Vec<Value>> {
    catalog::MODELS
        .iter()
        .map(|m| {
            let spec = spec(m)?;
            Ok(json!({
                "name": m.name,
                "source": m.source,
                "total_params": spec.total_params(),
                "active_params": spec.active_params(),
                "shape": spec,
                "config": serde_json::from_str::<Value>(m.config)?,
            }))
        })
        .collect()
}

fn spec(m: &catalog::ModelEntry) -> anyhow::Result<ModelSpec> {
    let config: serde_json::Map<String, Value> = serde_json::from_str(m.config)?;
    ModelSpec::from_config(&config).map_err(|e| anyhow::anyhow!("{}: {e}", m.name))
}

fn tflops(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{:.0}", v / 1e12))
}

fn gpu_table(gpus: &[GpuSpec]) -> String {
    let mut s = String::from("GPUs (dense TFLOPS; memory GB, GB/s; link GB/s one direction)\n");
    let _ = writeln!(
        s,
        "{:<14} {:>6} {:>6} {:>6} {:>7} {:>8} {:>6}",
        "name", "bf16", "fp8", "fp4", "mem GB", "mem GB/s", "link"
    );
    for g in gpus {
        let _ = writeln!(
            s,
            "{:<14} {:>6} {:>6} {:>6} {:>7.0} {:>8.0} {:>6}",
            g.name,
            tflops(Some(g.flops.bf16)),
            tflops(g.flops.fp8),
            tflops(g.flops.fp4),
            g.hbm_bytes / 1e9,
            g.hbm_bytes_per_s / 1e9,
            g.link_bytes_per_s
                .map_or_else(|| "-".to_string(), |v| format!("{:.0}", v / 1e9)),
        );
    }
    s += "sources:\n";
    for g in gpus {
        let _ = writeln!(s, "  {}: {}", g.name, g.source);
    }
    s
}

fn model_table() -> anyhow::Result<String> {
    let mut s = String::from("Models (from their config.json)\n");
    let _ = writeln!(
        s,
        "{:<22} {:>6} {:>6} {:>6} {:>5} {:>4} {:>6} {:>8} {:>11} {:>16}",
        "name", "layers", "hidden", "heads", "kv", "hdim", "inter", "vocab", "experts", "params total/act"
    );
    for m in catalog::MODELS {
        let spec = spec(m)?;
        let experts = if spec.experts > 0 {
            format!("{}/{}x{}", spec.active_experts, spec.experts, spec.expert_intermediate)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            s,
            "{:<22} {:>6} {:>6} {:>6} {:>5} {:>4} {:>6} {:>8} {:>11} {:>16}",
            m.name,
            spec.layers,
            spec.hidden,
            spec.heads,
            spec.kv_heads,
            spec.head_dim,
            spec.intermediate,
            spec.vocab,
            experts,
            format!(
                "{:.1}B/{:.1}B",
                spec.total_params() as f64 / 1e9,
                spec.active_params() as f64 / 1e9
            ),
        );
    }
    s += "attention: GQA unless noted; deepseek-v3 MLA (kv_lora_rank 512, rope 64); gpt-oss half the layers a \
          128-token sliding window\nsources:\n";
    for m in catalog::MODELS {
        let _ = writeln!(s, "  {}: {}", m.name, m.source);
    }
    Ok(s)
}

fn dtype(d: Dtype) -> &'static str {
    d.name()
}

/// A deployment's derived numbers as `simulate` prints them: memory, KV capacity, and the step at a few shapes with
/// its bound.
pub fn derived_text(d: &Derived) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "deployment: {} on {} x {} (weights {}, KV {}, compute {}; attention {})",
        d.model,
        d.tp,
        d.gpu,
        dtype(d.weight_dtype),
        dtype(d.kv_dtype),
        dtype(d.compute_dtype),
        d.attention
    );
    let _ = writeln!(
        s,
        "  params {:.2}B total, {:.2}B active a token; weights {:.2} GB per GPU of {:.2} GB usable (reserve {:.2} GB)",
        d.total_params / 1e9,
        d.active_params / 1e9,
        d.weight_bytes_per_gpu / 1e9,
        d.usable_bytes_per_gpu / 1e9,
        d.reserve_bytes_per_gpu / 1e9
    );
    let _ = writeln!(
        s,
        "  KV cache {} blocks x {} = {} tokens ({:.0} bytes a token per GPU)",
        d.kv_blocks, d.block_size, d.kv_tokens, d.kv_bytes_per_token
    );
    let _ = writeln!(
        s,
        "  {:<28} {:>9} {:>10} {:>9} {:>8} {:>8}",
        "step", "step ms", "compute", "memory", "comm", "bound"
    );
    for x in &d.samples {
        let label = if x.kind == "decode" {
            format!("decode batch {} at {} ctx", x.seqs, x.context)
        } else {
            format!("prefill {} tokens", x.tokens)
        };
        let bound = match x.cost.bound {
            shared::deploy::roofline::Bound::Compute => "compute",
            shared::deploy::roofline::Bound::Memory => "memory",
        };
        let _ = writeln!(
            s,
            "  {:<28} {:>9.2} {:>10.2} {:>9.2} {:>8.2} {:>8}",
            label, x.cost.step_ms, x.cost.compute_ms, x.cost.memory_ms, x.cost.comm_ms, bound
        );
    }
    s
}
