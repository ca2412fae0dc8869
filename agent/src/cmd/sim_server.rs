//! `loadshape sim-server`: the built-in emulated engine as an OpenAI-compatible streaming server.
//!
//! Run with `loadshape sim-server --port 8000` and point any OpenAI client (or `loadshape replay`) at
//! `http://127.0.0.1:8000/v1`. See `docs/replay.md` for the tokenization rule and the fault-injection flags.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::sim_server::lite::LiteProfile;
use crate::sim_server::{self, Config, EngineChoice, Faults};

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
    /// Emulated time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Tokens packed into one SSE frame (MTP-like); usage still counts every token.
    #[arg(long, default_value_t = 1)]
    pub tokens_per_frame: u32,
    /// Output length of requests whose length is not forced (no ignore_eos / min_tokens): the emulated EOS.
    #[arg(long)]
    pub natural_len: Option<u32>,
    /// Prefill speed of the emulated engine, tokens per ms.
    #[arg(long, default_value_t = LiteProfile::default().prefill_tokens_per_ms)]
    pub prefill_tok_per_ms: f64,
    /// Decode step time with an empty batch, ms.
    #[arg(long, default_value_t = LiteProfile::default().base_tpot_ms)]
    pub base_tpot_ms: f64,
    /// Added step time per running sequence, ms.
    #[arg(long, default_value_t = LiteProfile::default().batch_tpot_slope_ms)]
    pub tpot_slope_ms: f64,
    /// Most sequences decoding at once.
    #[arg(long, default_value_t = LiteProfile::default().max_batch_slots)]
    pub max_batch_slots: usize,
    /// Tokens per prefix-cache block.
    #[arg(long, default_value_t = LiteProfile::default().block_size)]
    pub block_size: usize,
    /// Prefix-cache capacity, blocks.
    #[arg(long, default_value_t = LiteProfile::default().cache_blocks)]
    pub cache_blocks: usize,
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
    /// Seed for the injected error draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl Args {
    /// Validate and turn the flags into a server [`Config`].
    pub fn config(&self) -> anyhow::Result<Config> {
        let positive = |name: &str, v: f64| {
            anyhow::ensure!(v.is_finite() && v > 0.0, "--{name} must be > 0 (got {v})");
            Ok(())
        };
        positive("speed", self.speed)?;
        positive("prefill-tok-per-ms", self.prefill_tok_per_ms)?;
        anyhow::ensure!(
            self.base_tpot_ms.is_finite() && self.base_tpot_ms >= 0.0,
            "--base-tpot-ms must be >= 0 (got {})",
            self.base_tpot_ms
        );
        anyhow::ensure!(
            self.tpot_slope_ms.is_finite() && self.tpot_slope_ms >= 0.0,
            "--tpot-slope-ms must be >= 0 (got {})",
            self.tpot_slope_ms
        );
        anyhow::ensure!(
            self.max_batch_slots >= 1,
            "--max-batch-slots must be >= 1 (got {})",
            self.max_batch_slots
        );
        anyhow::ensure!(
            self.block_size >= 1,
            "--block-size must be >= 1 (got {})",
            self.block_size
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
        Ok(Config {
            model: self.model.clone(),
            engine: EngineChoice::Lite(LiteProfile {
                prefill_tokens_per_ms: self.prefill_tok_per_ms,
                base_tpot_ms: self.base_tpot_ms,
                batch_tpot_slope_ms: self.tpot_slope_ms,
                max_batch_slots: self.max_batch_slots,
                block_size: self.block_size,
                cache_blocks: self.cache_blocks,
            }),
            speed: self.speed,
            tokens_per_frame: self.tokens_per_frame,
            natural_len: self.natural_len,
            faults: Faults {
                fail_after: self.fail_after,
                error_rate: self.error_rate,
                stall_after_tokens: self.stall_after_tokens,
                stall_ms: self.stall_ms,
                drop_after_tokens: self.drop_after_tokens,
            },
            seed: self.seed,
        })
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    println!("loadshape sim-server listening on http://{local} (OpenAI base URL http://{local}/v1)");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    sim_server::serve(listener, config, shutdown).await.context("serving")?;
    Ok(ExitCode::SUCCESS)
}
