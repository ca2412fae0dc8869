//! `loadshape sim-server`: the built-in emulated engine as an OpenAI-compatible streaming server.
//!
//! Run with `loadshape sim-server --port 8000 [--profile llama-3-8b-1xh100]` and point any OpenAI client (or
//! `loadshape replay`) at `http://127.0.0.1:8000/v1`. See `docs/replay.md` for the tokenization rule, the engine
//! and the fault-injection flags.

use std::process::ExitCode;

use anyhow::Context as _;
use shared::engine::presets;

use crate::sim_server::{self, Config, EngineChoice, Faults, Template};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to bind (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 = any free port; the chosen address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Model id served on /v1/models.
    #[arg(long, default_value = "sim")]
    pub model: String,
    /// Engine preset to emulate (see `--profile list`).
    #[arg(long, default_value = "llama-3-8b-1xh100")]
    pub profile: String,
    /// Emulate the `EngineProfile` in this JSON file instead of a preset (e.g. `calibrate`'s `profile.json`: a
    /// digital twin of a measured server). The override flags below still apply.
    #[arg(long, value_name = "PATH")]
    pub profile_file: Option<std::path::PathBuf>,
    /// Emulate a fleet of the profile's engines behind this one endpoint: a fleet JSON as a scenario's `"fleet"`
    /// (`{"replicas": 4, "router": "least_outstanding", "disaggregation": {"prefill_instances": 2,
    /// "decode_instances": 2, "link_bytes_per_s": 5e10, "link_latency_ms": 0.5}}`). With `disaggregation`, a
    /// request prefills on a prefill instance, its KV crosses the link and it decodes on a decode instance, as
    /// `simulate` models it; the response's `x-kv-transfer-ms` header gives the transfer (docs/replay.md).
    #[arg(long, value_name = "FILE")]
    pub fleet: Option<std::path::PathBuf>,
    /// Override the preset's prefill speed, tokens per ms.
    #[arg(long)]
    pub prefill_tok_per_ms: Option<f64>,
    /// Override the preset's fixed step time, ms (the TPOT floor at batch 1).
    #[arg(long)]
    pub step_fixed_ms: Option<f64>,
    /// Override the preset's step time per running sequence, ms.
    #[arg(long)]
    pub per_seq_ms: Option<f64>,
    /// Override the preset's sequence limit (vLLM --max-num-seqs).
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Override the preset's KV cache size, blocks.
    #[arg(long)]
    pub num_kv_blocks: Option<u64>,
    /// Turn automatic prefix caching off.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Emulated time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Tokens packed into one SSE frame (MTP-like); usage still counts every token.
    #[arg(long, default_value_t = 1)]
    pub tokens_per_frame: u32,
    /// Output length of requests whose length is not forced (no ignore_eos / min_tokens): the emulated EOS.
    #[arg(long)]
    pub natural_len: Option<u32>,
    /// Fault injection: answer 503 to every request after the first N.
    #[arg(long)]
    pub fail_after: Option<u64>,
    /// Fault injection: answer 500 to this fraction of requests.
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Fault injection: pause each stream for --stall-ms once N tokens were sent.
    #[arg(long)]
    pub stall_after_tokens: Option<u32>,
    #[arg(long, default_value_t = 5000)]
    pub stall_ms: u64,
    /// Fault injection: close the connection mid-stream once N tokens were sent.
    #[arg(long)]
    pub drop_after_tokens: Option<u32>,
    /// Serve no `/tokenize` (a server without one: replay's tokenizer matching falls back to usage probes).
    #[arg(long)]
    pub no_tokenize: bool,
    /// Count every piece of the tokenization rule as N tokens (a tokenizer N times as dense, for testing
    /// `replay --match-tokenizer`).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub tokens_per_piece: u32,
    /// How chat and Messages message lists become the prompt: stable = each message's text, the same at every
    /// turn (a growing conversation keeps its prefix cached); rerender = earlier assistant turns are re-rendered at
    /// every request (a template that rewrites earlier turns: the prefix cache misses from the first assistant turn).
    #[arg(long, value_enum, default_value_t = Template::Stable)]
    pub template: Template,
    /// Seed for the injected error draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the server's own account of every generation request here, one JSON line each (arrival, first token
    /// and end times, prompt, cached and output tokens): to check what a load client measured.
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<std::path::PathBuf>,
}

impl Args {
    /// Validate and turn the flags into a server [`Config`].
    pub fn config(&self) -> anyhow::Result<Config> {
        let names = || {
            presets::all()
                .into_iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut profile = match &self.profile_file {
            Some(path) => sim_server::load_profile_file(path)?,
            None => presets::by_name(&self.profile)
                .with_context(|| format!("--profile {:?} is not a preset (one of: {})", self.profile, names()))?,
        };
        if let Some(v) = self.prefill_tok_per_ms {
            profile.prefill_tokens_per_ms = v;
        }
        if let Some(v) = self.step_fixed_ms {
            profile.step_fixed_ms = v;
        }
        if let Some(v) = self.per_seq_ms {
            profile.per_seq_ms = v;
        }
        if let Some(v) = self.max_num_seqs {
            profile.max_num_seqs = v;
        }
        if let Some(v) = self.num_kv_blocks {
            profile.num_kv_blocks = v;
        }
        if self.no_prefix_caching {
            profile.enable_prefix_caching = false;
        }
        profile.validate().map_err(|e| anyhow::anyhow!("profile: {e}"))?;
        anyhow::ensure!(
            self.speed.is_finite() && self.speed > 0.0,
            "--speed must be > 0 (got {})",
            self.speed
        );
        anyhow::ensure!(
            self.tokens_per_frame >= 1,
            "--tokens-per-frame must be >= 1 (got {})",
            self.tokens_per_frame
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.error_rate),
            "--error-rate must be in 0..=1 (got {})",
            self.error_rate
        );
        let engine = match &self.fleet {
            Some(path) => {
                let (fleet, disaggregation) = load_fleet_file(path)?;
                shared::engine::validate_fleet(&profile, Some(&fleet), disaggregation.as_ref())
                    .map_err(|e| anyhow::anyhow!("--fleet {}: {e}", path.display()))?;
                EngineChoice::Fleet {
                    profile: Box::new(profile),
                    fleet,
                    disaggregation,
                }
            }
            None => EngineChoice::Profile(Box::new(profile)),
        };
        Ok(Config {
            model: self.model.clone(),
            engine,
            speed: self.speed,
            tokens_per_frame: self.tokens_per_frame,
            natural_len: self.natural_len,
            faults: Faults {
                fail_after: self.fail_after,
                error_rate: self.error_rate,
                stall_after_tokens: self.stall_after_tokens,
                stall_ms: self.stall_ms,
                drop_after_tokens: self.drop_after_tokens,
                no_tokenize: self.no_tokenize,
            },
            seed: self.seed,
            tokens_per_piece: self.tokens_per_piece.max(1),
            template: self.template,
            request_log: self.request_log.clone(),
        })
    }
}

/// Read a fleet JSON file (`--fleet`, as a scenario's `"fleet"`); errors name the path (and the field, for JSON
/// that does not parse). The values are checked against the profile with [`shared::engine::validate_fleet`].
pub fn load_fleet_file(
    path: &std::path::Path,
) -> anyhow::Result<(shared::engine::FleetSpec, Option<shared::engine::Disaggregation>)> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading --fleet {}: {e}", path.display()))?;
    shared::engine::fleet_from_json(&text).map_err(|e| anyhow::anyhow!("--fleet {}: {e}", path.display()))
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.profile == "list" && args.profile_file.is_none() {
        for p in presets::all() {
            println!("{:<28} {}", p.name, p.basis);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let config = args.config()?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    let name = match (&config.engine, &args.profile_file) {
        (EngineChoice::Profile(p), Some(path)) => format!("{} from {}", p.name, path.display()),
        _ => args.profile.clone(),
    };
    let name = match (&config.engine, &args.fleet) {
        (
            EngineChoice::Fleet {
                fleet, disaggregation, ..
            },
            Some(path),
        ) => match disaggregation {
            Some(dg) => format!(
                "{name}, {} prefill + {} decode instances from {}",
                dg.prefill_instances,
                dg.decode_instances,
                path.display()
            ),
            None => format!("{name}, {} replicas from {}", fleet.replicas, path.display()),
        },
        _ => name,
    };
    println!("loadshape sim-server ({name}) listening on http://{local} (OpenAI base URL http://{local}/v1)");
    let shutdown = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    sim_server::serve(listener, config, shutdown).await.context("serving")?;
    Ok(ExitCode::SUCCESS)
}
