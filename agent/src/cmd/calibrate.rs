//! `loadshape calibrate`: fit an `EngineProfile` to a real server.
//!
//! Run with `loadshape calibrate --url http://127.0.0.1:8080/v1 --out cal/ [--budget 600]` (sends the designed
//! probe of `shared::calibrate::plan_probe` through `replay::run`, one closed-loop run per phase, scraping
//! `/metrics` throughout) or `loadshape calibrate --from run.jsonl [--from other.jsonl] --out cal/` (fits from
//! records already measured). Writes `cal/profile.json` (paste it as a scenario's `profile`, or serve it with
//! `sim-server --profile-file`) and `cal/fit.json` (coefficients with standard errors, R², residuals per request,
//! unused requests). Method and checks: `docs/calibration.md`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use shared::calibrate::{self, FitOptions, ProbeLimits};
use shared::deploy::Deployment;
use shared::deploy::transfer;
use shared::engine::EngineProfile;
use shared::engine::profile::{HostCache, Scheduler};
use shared::record::RequestRecord;

use crate::replay::dialect::Dialect;
use crate::replay::limits::ServerLimits;
use crate::replay::prom::ServerReport;
use crate::replay::records::{read_records, skipped_note};
use crate::replay::runner::PlannedRequest;
use crate::replay::{self, Hooks, ReplaySettings, TargetSettings, Traffic};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// OpenAI base URL of the server to probe (e.g. `http://127.0.0.1:8080/v1`).
    #[arg(long, required_unless_present = "from", conflicts_with = "from")]
    pub url: Option<String>,
    /// Model name to send; default: the first id on `/v1/models`.
    #[arg(long)]
    pub model: Option<String>,
    /// Fit from these live runs' record files (JSONL) instead of probing.
    #[arg(long, value_name = "RUN.jsonl")]
    pub from: Vec<PathBuf>,
    /// Folder for `profile.json`, `fit.json` and (with `--url`) the probe's records.
    #[arg(long)]
    pub out: PathBuf,
    /// Wall-clock budget of the probe, seconds.
    #[arg(long, default_value_t = 600.0)]
    pub budget: f64,
    /// How output lengths are forced; `auto` asks the server.
    #[arg(long, value_enum, default_value_t = Dialect::Auto)]
    pub dialect: Dialect,
    /// Bearer token for the server.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Sampling temperature of the probe's requests (as `replay --temp`). It matters where the server speculates:
    /// how many drafted tokens it accepts depends on how it samples (0: greedy).
    #[arg(long, default_value_t = replay::settings::defaults::TEMPERATURE)]
    pub temp: f64,
    /// Name of the fitted profile.
    #[arg(long, default_value = "calibrated")]
    pub name: String,
    /// Longest probe prompt, tokens (default: 85 % of the server's per-request context less `--decode-tokens`
    /// when it says, at most 8,192, so that long-context prefill is measured, not extrapolated; else 4096).
    #[arg(long)]
    pub max_prompt_tokens: Option<u32>,
    /// Output tokens of the decode probes.
    #[arg(long, default_value_t = 96)]
    pub decode_tokens: u32,
    /// The server's `max_num_seqs` (else discovered: llama.cpp `/props` `total_slots`; else measured by the probe's
    /// `cap` phase, 160 requests started together; else 256 written).
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// KV block size, tokens (else vLLM's `cache_config_info`, else 16).
    #[arg(long)]
    pub block_size: Option<u32>,
    /// KV capacity, blocks (else vLLM's `cache_config_info` `num_gpu_blocks`, else llama.cpp `n_ctx`·slots).
    #[arg(long)]
    pub num_kv_blocks: Option<u64>,
    /// Longest prompt + output, tokens (else llama.cpp's per-slot `n_ctx`, else vLLM's `/v1/models` `max_model_len`).
    #[arg(long)]
    pub max_model_len: Option<u64>,
    /// Token budget per step (vLLM `--max-num-batched-tokens`; llama.cpp `n_batch`), default 8192.
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Host-memory prefix-cache tier, tokens (llama.cpp `--cache-ram`, vLLM CPU offload): written as given.
    #[arg(long)]
    pub host_cache_tokens: Option<u64>,
    /// The `batch_kv_ms_per_ktok` term (each sequence pays for the batch's KV, as in llama.cpp): `auto` keeps it
    /// where the data need it, `off` fixes it at 0 (vLLM-like engines), `on` keeps it wherever identified.
    #[arg(long, value_enum, default_value_t = Choice::Auto)]
    pub batch_kv: Choice,
    /// The `prefill_batch_kv_ms_per_ktok` term (a prompt token attends to the other slots' KV too, as in
    /// llama.cpp's unified KV cache): `auto` probes it and keeps it where the data need it, `off` neither probes
    /// nor fits it (the probe of before), `on` keeps it wherever identified.
    #[arg(long, value_enum, default_value_t = Choice::Auto)]
    pub prefill_kv: Choice,
    /// Restore speed of the host tier, tokens/ms: with `--host-cache-tokens` (default 100), or for a tier the
    /// probe found whose speed it could not measure.
    #[arg(long)]
    pub host_restore_tok_per_ms: Option<f64>,
    /// Prefix-cache tiers below the GPU's (llama.cpp `--cache-ram`, vLLM CPU offload, LMCache, SGLang HiCache):
    /// `auto` probes sessions brought back after their KV was evicted (the `returns` phase) and writes the tier
    /// found as `host_cache`, and looks for such returns in `--from` records; `off` neither probes nor writes one.
    /// `--host-cache-tokens` overrides.
    #[arg(long, value_enum, default_value_t = TiersChoice::Auto)]
    pub tiers: TiersChoice,
    /// How the server fills a step, written as the profile's `scheduler`: `auto` takes `llama-cpp` when the
    /// server answers llama.cpp's `/props`, else `vllm`.
    #[arg(long, value_enum, default_value_t = SchedulerChoice::Auto)]
    pub scheduler: SchedulerChoice,
    /// `reply_cached_share` (how much of a session's previous reply the server finds cached when the conversation
    /// comes back as text): `auto` probes a short conversation and measures it (and measures it in `--from`
    /// records that hold session steps), `off` neither probes nor measures it (1, the whole reply).
    #[arg(long, value_enum, default_value_t = ReplyChoice::Auto)]
    pub reply_share: ReplyChoice,
    /// The deployment measured (JSON, a scenario's `"deployment"`: model, GPU, TP, …): also write
    /// `OUT/deployment.json`, that deployment with the efficiency factors that make its roofline match the fit
    /// (what the server said fills the limits the file leaves out; `fit.json`'s `deployment_fit` says which).
    #[arg(long, value_name = "FILE")]
    pub deployment: Option<PathBuf>,
    /// Speculative decoding (records that carry drafted and accepted tokens, e.g. llama.cpp's `timings`): the
    /// draft tokens per step (`k`) of the measured server; default: the most the records drafted per step.
    #[arg(long)]
    pub draft_tokens: Option<u32>,
    /// Speculative decoding: the profile of the same server without speculation (JSON, e.g. an earlier
    /// `calibrate`'s `profile.json`): its step terms price a decode step without the draft, so the rest is the
    /// draft's cost (`draft_cost_ms`); the written profile takes its step terms. Without it only the acceptance is
    /// fitted.
    #[arg(long, value_name = "PROFILE.json")]
    pub spec_base: Option<PathBuf>,
    /// Speculative decoding: the `method` written into the profile.
    #[arg(long, default_value = "draft", value_parser = ["mtp", "eagle", "draft", "ngram"])]
    pub spec_method: String,
    /// Where the probe says how far it got (a calibration run started from the page); the command line leaves it
    /// unset and prints what it always printed.
    #[arg(skip)]
    pub progress: Option<ProbeProgress>,
}

/// A calibration's progress hook: called when a probe phase starts, when one of its requests ends, and when the
/// fit begins.
#[derive(Clone)]
pub struct ProbeProgress(pub std::sync::Arc<dyn Fn(&ProbeStatus) + Send + Sync>);

impl std::fmt::Debug for ProbeProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeProgress")
    }
}

/// Where a calibration stands: the phase (a probe phase's name, or `fit`), its number from 1 of `phases` (the
/// fit is numbered after the last probe phase), the probe's requests ended so far and the seconds since it began.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeStatus {
    pub phase: String,
    pub phase_index: usize,
    pub phases: usize,
    pub requests: u64,
    pub elapsed_s: f64,
}

/// `--tiers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TiersChoice {
    Auto,
    Off,
}

/// `--reply-share`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplyChoice {
    Auto,
    Off,
}

/// `--scheduler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchedulerChoice {
    Auto,
    Vllm,
    LlamaCpp,
}

/// `--batch-kv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Choice {
    Auto,
    On,
    Off,
}

/// Server limits found by asking it; `None` where it does not say.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Discovered {
    pub max_num_seqs: Option<u32>,
    pub block_size: Option<u32>,
    pub num_kv_blocks: Option<u64>,
    pub max_model_len: Option<u64>,
    pub max_num_batched_tokens: Option<u32>,
    /// The server's scheduler, where it shows (llama.cpp's `/props`: slots).
    pub scheduler: Option<Scheduler>,
    pub sources: Vec<String>,
    /// A prefix-cache tier below the GPU's that the server reports ([`ReportedTier`]).
    pub tier: Option<ReportedTier>,
    /// What the server's reports say, or do not say, about such tiers (`fit.json`'s `tiers.server_report`).
    pub tier_notes: Vec<String>,
}

/// A prefix-cache tier below the GPU's as the server reports it: vLLM's KV offloading (`kv_offloading_size`, GiB,
/// and `kv_offloading_backend` in `vllm:cache_config_info`), SGLang's HiCache host pool
/// (`sglang:hicache_host_total_tokens`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ReportedTier {
    /// Capacity, tokens, where the server gives it in tokens.
    pub capacity_tokens: Option<u64>,
    /// Capacity, GiB, where the server gives only bytes (tokens need the KV bytes per token, which it does not
    /// report: the probe measures the capacity then).
    pub capacity_gib: Option<f64>,
    /// What said it, in the server's words.
    pub said: String,
}

/// llama-server's default `--batch-size` (logical batch: tokens per server iteration).
pub const LLAMA_CPP_DEFAULT_N_BATCH: u32 = 2048;

/// llama.cpp's `/props`: `total_slots`, `default_generation_settings.n_ctx` (per slot), `n_batch` when given.
pub fn parse_props(v: &serde_json::Value, d: &mut Discovered) {
    let slots = v.get("total_slots").and_then(serde_json::Value::as_u64);
    let gs = v.get("default_generation_settings");
    let n_ctx = gs
        .and_then(|g| g.get("n_ctx"))
        .or_else(|| v.get("n_ctx"))
        .and_then(serde_json::Value::as_u64);
    if let Some(s) = slots {
        d.max_num_seqs = u32::try_from(s).ok().filter(|&s| s > 0);
    }
    if let Some(c) = n_ctx.filter(|&c| c > 0) {
        d.max_model_len = Some(c);
        d.num_kv_blocks = Some(c * slots.unwrap_or(1).max(1) / 16);
        d.block_size.get_or_insert(16);
    }
    if let Some(b) = gs
        .and_then(|g| g.get("n_batch"))
        .or_else(|| v.get("n_batch"))
        .and_then(serde_json::Value::as_u64)
    {
        d.max_num_batched_tokens = u32::try_from(b).ok();
    }
    if slots.is_some() || n_ctx.is_some() {
        d.sources.push("llama.cpp /props".into());
        d.scheduler = Some(Scheduler::LlamaCpp);
        // llama-server's host prompt cache (`--cache-ram`, 8192 MiB by default) is not in its `/props` (nor in its
        // `/metrics`): the probe's returns phase measures it.
        let build = v
            .get("build_info")
            .and_then(serde_json::Value::as_str)
            .map_or(String::new(), |b| format!(" (build {b})"));
        d.tier_notes.push(format!(
            "llama.cpp /props{build} does not report its host prompt cache (--cache-ram): the tier comes from the \
             probe"
        ));
        if d.max_num_batched_tokens.is_none() {
            // `/props` does not say; llama-server's `-b`/`--batch-size` default: prompt tokens + one per decoding
            // slot per server iteration.
            d.max_num_batched_tokens = Some(LLAMA_CPP_DEFAULT_N_BATCH);
            d.sources.push(format!(
                "llama.cpp's default n_batch {LLAMA_CPP_DEFAULT_N_BATCH} (not in /props; flag to change)"
            ));
        }
    }
}

/// vLLM's `vllm:cache_config_info{block_size="16",num_gpu_blocks="27000",...} 1` from `/metrics` text.
pub fn parse_cache_config(metrics: &str, d: &mut Discovered) {
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("vllm:cache_config_info{") else {
            continue;
        };
        let Some(end) = rest.find('}') else { continue };
        let (mut offload_gib, mut backend) = (None, None);
        for kv in rest[..end].split(',') {
            let Some((k, v)) = kv.split_once('=') else { continue };
            let v = v.trim_matches('"');
            match k.trim() {
                "block_size" => d.block_size = v.parse().ok(),
                "num_gpu_blocks" => d.num_kv_blocks = v.parse().ok(),
                "kv_offloading_size" => offload_gib = v.parse::<f64>().ok().filter(|g| g.is_finite() && *g > 0.0),
                "kv_offloading_backend" => backend = Some(v.to_string()).filter(|b| b != "None" && !b.is_empty()),
                _ => {}
            }
        }
        d.sources.push("vLLM /metrics cache_config_info".into());
        match offload_gib {
            Some(g) => {
                let said = format!(
                    "vLLM /metrics cache_config_info: kv_offloading_size {g} GiB{} (KV offloading below the GPU's \
                     cache; bytes only: the capacity in tokens comes from the probe)",
                    backend.map_or(String::new(), |b| format!(", kv_offloading_backend {b}"))
                );
                d.tier = Some(ReportedTier {
                    capacity_tokens: None,
                    capacity_gib: Some(g),
                    said,
                });
            }
            None => d.tier_notes.push(
                "vLLM /metrics cache_config_info: no kv_offloading_size (no KV offloading configured by that \
                 option; an OffloadingConnector or LMCache given through --kv-transfer-config is not in it)"
                    .into(),
            ),
        }
        return;
    }
}

/// vLLM's `/v1/models`: the served model's `max_model_len` (prompt + output, tokens), when the server did not say
/// otherwise already (llama.cpp's per-slot `n_ctx` from `/props` comes first).
pub fn parse_models(v: &serde_json::Value, d: &mut Discovered) {
    if d.max_model_len.is_some() {
        return;
    }
    if let Some(l) = replay::limits::ServerLimits::max_model_len_of(v) {
        d.max_model_len = Some(l);
        d.sources.push("vLLM /v1/models max_model_len".into());
    }
}

/// SGLang's HiCache host pool from `/metrics` text: `sglang:hicache_host_total_tokens{...} N` (one line per rank;
/// the largest is taken, tensor-parallel ranks repeating the same pool).
pub fn parse_sglang_metrics(metrics: &str, d: &mut Discovered) {
    let mut total: Option<f64> = None;
    let mut seen = false;
    for line in metrics.lines() {
        if !line.starts_with("sglang:") {
            continue;
        }
        seen = true;
        let Some(rest) = line.strip_prefix("sglang:hicache_host_total_tokens") else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if v.is_finite() && v > 0.0 {
            total = Some(total.map_or(v, |t: f64| t.max(v)));
        }
    }
    match total {
        Some(t) => {
            d.tier = Some(ReportedTier {
                capacity_tokens: Some(t as u64),
                capacity_gib: None,
                said: format!("SGLang /metrics sglang:hicache_host_total_tokens {t:.0} (HiCache host pool)"),
            });
        }
        None if seen => d
            .tier_notes
            .push("SGLang /metrics: no sglang:hicache_host_total_tokens (HiCache off: no host tier reported)".into()),
        None => {}
    }
}

/// What the server at `url` says of its limits and tiers (llama.cpp `/props`, `/metrics`, vLLM `/v1/models`); what it
/// does not answer stays `None`.
pub async fn discover(url: &str, api_key: Option<&str>) -> Discovered {
    let mut d = Discovered::default();
    let Ok(origin) = replay::client::origin_of(url) else {
        return d;
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default();
    let get = |path: &str| {
        let mut req = client.get(format!("{origin}{path}"));
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    if let Ok(resp) = get("/props").await
        && resp.status().is_success()
        && let Ok(v) = resp.json::<serde_json::Value>().await
    {
        parse_props(&v, &mut d);
    }
    if let Ok(resp) = get("/metrics").await
        && resp.status().is_success()
        && let Ok(text) = resp.text().await
    {
        parse_cache_config(&text, &mut d);
        parse_sglang_metrics(&text, &mut d);
    }
    if let Ok(resp) = get("/v1/models").await
        && resp.status().is_success()
        && let Ok(v) = resp.json::<serde_json::Value>().await
    {
        parse_models(&v, &mut d);
    }
    d
}

/// What the server reports about its tiers, into `fit.json`'s `tiers` (`server_report`); a capacity it gives in
/// tokens replaces the probe's (written as found by `server report`), with the probe's restore speed where it
/// measured one, else `--host-restore-tok-per-ms` (default 100, found by `flag`). Flags (`--host-cache-tokens`) and
/// `--tiers off` win.
pub fn apply_reported_tier(a: &Args, d: &Discovered, fit: &mut calibrate::Fit) {
    let Some(t) = fit.tiers.as_mut() else { return };
    t.server_report.extend(d.tier_notes.iter().cloned());
    let Some(rep) = &d.tier else { return };
    t.server_report.push(rep.said.clone());
    if a.host_cache_tokens.is_some() || a.tiers == TiersChoice::Off {
        return;
    }
    let Some(cap) = rep.capacity_tokens else { return };
    let recomputed = t.returns.iter().filter(|r| r.outcome == "recomputed").count();
    if t.returns.iter().all(|r| r.outcome != "restored") && recomputed > 0 {
        t.notes.push(format!(
            "the server reports a tier of {cap} tokens, yet all {recomputed} returns after eviction were recomputed: \
             not written (--host-cache-tokens sets it)"
        ));
        return;
    }
    let bs = u64::from(fit.profile.block_size.max(1));
    let cap = cap / bs * bs;
    if cap < bs {
        return;
    }
    let (rate, by) = match (t.restore_tokens_per_ms, t.restore_found_by.as_deref()) {
        (Some(r), Some("probe")) => (r, "probe"),
        _ => (a.host_restore_tok_per_ms.unwrap_or(100.0), "flag"),
    };
    if let Some(probed) = t
        .capacity_tokens
        .filter(|_| t.capacity_found_by.as_deref() == Some("probe"))
    {
        t.notes.push(format!(
            "capacity: {cap} tokens as the server reports, instead of the probe's {probed}{}",
            if t.capacity_lower_bound { " (a lower bound)" } else { "" }
        ));
    }
    if by == "flag" {
        t.notes.push(format!(
            "restore speed: {rate} tokens/ms (--host-restore-tok-per-ms{}; not measured)",
            if a.host_restore_tok_per_ms.is_some() {
                ""
            } else {
                "'s default"
            }
        ));
    }
    t.capacity_tokens = Some(cap);
    t.restore_tokens_per_ms = Some(rate);
    t.capacity_found_by = Some("server report".into());
    t.restore_found_by = Some(by.into());
    fit.profile.host_cache = Some(HostCache {
        capacity_tokens: cap,
        restore_tokens_per_ms: rate,
    });
}

/// The limits part of the profile: flags first, then what the server said, then what the probe measured
/// (`probed`: `max_num_seqs` from the `cap` phase), then defaults (named in `basis`).
fn limits(a: &Args, d: &Discovered, probed: Option<u32>) -> anyhow::Result<EngineProfile> {
    let block_size = a.block_size.or(d.block_size).unwrap_or(16);
    let max_model_len = a.max_model_len.or(d.max_model_len);
    let num_kv_blocks = a.num_kv_blocks.or(d.num_kv_blocks).unwrap_or_else(|| {
        max_model_len.map_or(1_000_000, |l| {
            (l * u64::from(a.max_num_seqs.or(d.max_num_seqs).unwrap_or(1))).div_ceil(u64::from(block_size.max(1)))
        })
    });
    let known = a.max_num_seqs.or(d.max_num_seqs);
    let max_num_seqs = known.or(probed).unwrap_or(calibrate::cap::DEFAULT_MAX_NUM_SEQS);
    let mut srcs = d.sources.clone();
    if let (None, Some(n)) = (known, probed) {
        srcs.push(format!("probe max_num_seqs {n}"));
    }
    let given: Vec<&str> = [
        ("--max-num-seqs", a.max_num_seqs.is_some()),
        ("--block-size", a.block_size.is_some()),
        ("--num-kv-blocks", a.num_kv_blocks.is_some()),
        ("--max-model-len", a.max_model_len.is_some()),
        ("--max-num-batched-tokens", a.max_num_batched_tokens.is_some()),
        ("--host-cache-tokens", a.host_cache_tokens.is_some()),
        ("--scheduler", a.scheduler != SchedulerChoice::Auto),
    ]
    .into_iter()
    .filter_map(|(n, g)| g.then_some(n))
    .collect();
    if !given.is_empty() {
        srcs.push(format!("flags {}", given.join(" ")));
    }
    if srcs.is_empty() {
        srcs.push("defaults (the server said nothing; pass --max-num-seqs etc.)".into());
    }
    let max_num_batched_tokens = a
        .max_num_batched_tokens
        .or(d.max_num_batched_tokens)
        .unwrap_or(8192)
        .max(max_num_seqs);
    let p = EngineProfile {
        basis: srcs.join(", "),
        block_size,
        max_model_len: max_model_len.map(|l| l.min(num_kv_blocks * u64::from(block_size))),
        host_cache: a.host_cache_tokens.map(|capacity_tokens| HostCache {
            capacity_tokens,
            restore_tokens_per_ms: a.host_restore_tok_per_ms.unwrap_or(100.0),
        }),
        scheduler: match a.scheduler {
            SchedulerChoice::Auto => d.scheduler.unwrap_or_default(),
            SchedulerChoice::Vllm => Scheduler::Vllm,
            SchedulerChoice::LlamaCpp => Scheduler::LlamaCpp,
        },
        ..EngineProfile::linear(
            &a.name,
            num_kv_blocks,
            max_num_seqs,
            max_num_batched_tokens,
            [1.0, 0.0, 0.0, 1.0, 0.0],
        )
    };
    p.validate()
        .map_err(|e| anyhow::anyhow!("the server's limits: profile {e}"))?;
    Ok(p)
}

/// How `max_num_seqs` is found (`fit.json`'s `max_num_seqs`): `--max-num-seqs`, else what the server reports
/// (llama.cpp's slots), else the probe's `cap` phase (`reading`: run now, or a `--from` file of one), else vLLM's
/// default 256, said in its note (a held-out run with more sessions than the server admits is
/// then predicted without its queue: against a sim-server admitting 8, 16 sessions missed TTFT by −94 %;
/// docs/measurements.md).
fn cap_fit(a: &Args, d: &Discovered, reading: Option<calibrate::cap::CapReading>) -> calibrate::cap::CapFit {
    use calibrate::cap::CapFit;
    match (a.max_num_seqs, d.max_num_seqs) {
        (Some(v), _) => CapFit::known(v, "flag", "given (--max-num-seqs)"),
        (None, Some(v)) => CapFit::known(v, "server report", &format!("reported ({})", d.sources.join(", "))),
        (None, None) => CapFit::read(reading),
    }
}

/// The cap the probe measured, where it did (not a lower bound): it sizes the profile.
fn measured_cap(c: &calibrate::cap::CapFit) -> Option<u32> {
    (c.found_by == "probe" && !c.lower_bound).then_some(c.value)
}

/// The longest probe prompt `calibrate` sends by default, tokens, however long the server's context.
pub const DEFAULT_MAX_PROBE_PROMPT: u64 = 8_192;

/// Send the probe; returns every record (in phase order) and the record files written.
/// The speculative counters in a `/metrics` exposition (llama.cpp's or vLLM's names), if it has them.
pub fn spec_counters_of(text: &str) -> Option<calibrate::spec::ServerSpecCounts> {
    let (samples, _) = replay::prom::parse_text(text);
    let family = ["llamacpp:", "vllm:"].into_iter().find(|f| {
        samples
            .iter()
            .any(|s| s.name == format!("{f}spec_decode_num_draft_tokens_total"))
    })?;
    let sum = |name: &str| -> f64 {
        samples
            .iter()
            .filter(|s| s.name == format!("{family}{name}"))
            .map(|s| s.value)
            .sum()
    };
    let mut per_position: Vec<(usize, f64)> = samples
        .iter()
        .filter(|s| s.name == format!("{family}spec_decode_num_accepted_tokens_per_pos_total"))
        .filter_map(|s| {
            let pos = s.labels.iter().find(|(k, _)| k == "position")?.1.parse().ok()?;
            Some((pos, s.value))
        })
        .collect();
    per_position.sort_by_key(|&(p, _)| p);
    // Positions 0, 1, … each once (another shape is not read as a per-position count).
    let whole = per_position.iter().enumerate().all(|(i, &(p, _))| i == p);
    Some(calibrate::spec::ServerSpecCounts {
        drafted_tokens: sum("spec_decode_num_draft_tokens_total"),
        accepted_tokens: sum("spec_decode_num_accepted_tokens_total"),
        steps: sum("spec_decode_num_drafts_total"),
        accepted_per_position: if whole {
            per_position.into_iter().map(|(_, v)| v).collect()
        } else {
            Vec::new()
        },
    })
}

/// `after − before`, counter by counter; a position `before` does not have yet counts from 0 (llama-server lists
/// none before its first draft), one `after` lacks leaves no per-position counts.
fn spec_delta(
    before: &calibrate::spec::ServerSpecCounts,
    after: &calibrate::spec::ServerSpecCounts,
) -> calibrate::spec::ServerSpecCounts {
    let fits = before.accepted_per_position.len() <= after.accepted_per_position.len();
    calibrate::spec::ServerSpecCounts {
        drafted_tokens: after.drafted_tokens - before.drafted_tokens,
        accepted_tokens: after.accepted_tokens - before.accepted_tokens,
        steps: after.steps - before.steps,
        accepted_per_position: if fits {
            (after.accepted_per_position.iter().enumerate())
                .map(|(i, a)| a - before.accepted_per_position.get(i).copied().unwrap_or(0.0))
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// The server's speculative counters now (`ORIGIN/metrics`), if it has them.
/// One scrape of the server's speculative figures: counters (llama.cpp's, vLLM's), or SGLang's exposition, whose
/// counts come from several scrapes together ([`replay::prom::sglang_spec_counts`]: its gauges are of the last
/// logging window, so they are sampled after each probe phase).
#[derive(Debug, Clone, PartialEq)]
pub enum SpecScrape {
    Counters(calibrate::spec::ServerSpecCounts),
    Sglang(Box<replay::prom::Snapshot>),
}

/// [`SpecScrape`] of one exposition taken `t_s` seconds into the probe: the counters where it has them, else SGLang's
/// figures where it is SGLang's.
pub fn spec_scrape_of(t_s: f64, text: &str) -> Option<SpecScrape> {
    if let Some(c) = spec_counters_of(text) {
        return Some(SpecScrape::Counters(c));
    }
    let snap = replay::prom::Snapshot::from_text(t_s, text);
    (snap.family == Some("sglang")).then(|| SpecScrape::Sglang(Box::new(snap)))
}

/// SGLang's speculative counts over the probe from its scrapes (the first before it): those of `server.json`'s
/// `report` over a replay run, so `--url` and `--from` read SGLang alike. `None` when it did not speculate.
pub fn sglang_spec_over(snaps: &[replay::prom::Snapshot]) -> Option<calibrate::spec::ServerSpecCounts> {
    let r = replay::prom::ServerReport::from_snapshots(snaps);
    Some(calibrate::spec::ServerSpecCounts {
        drafted_tokens: r.spec_draft_tokens?,
        accepted_tokens: r.spec_accepted_tokens?,
        steps: r.spec_drafts.unwrap_or(0.0),
        accepted_per_position: Vec::new(),
    })
}

/// The server's `/metrics` exposition (`origin` without `/v1`), or `None` where it has none or does not answer.
async fn metrics_text(client: &reqwest::Client, origin: &str, api_key: Option<&str>) -> Option<String> {
    let mut req = client.get(format!("{origin}/metrics"));
    if let Some(k) = api_key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.ok().filter(|r| r.status().is_success())?;
    resp.text().await.ok()
}

async fn scrape_spec(url: &str, api_key: Option<&str>, t_s: f64) -> Option<SpecScrape> {
    let origin = replay::client::origin_of(url).ok()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .ok()?;
    spec_scrape_of(t_s, &metrics_text(&client, &origin, api_key).await?)
}

/// How long [`wait_idle`] waits at most.
pub const IDLE_WAIT: Duration = Duration::from_secs(30);

/// Waits until the server's `/metrics` gauges (vLLM's and SGLang's running and waiting requests, llama.cpp's
/// processing and deferred ones) say nothing is left, at most `at_most`: the probe cuts its phases' last requests,
/// and a server drops a cut request only when the step it is in ends (a long prefill: seconds), so a run started
/// right after `calibrate` would share the server with it. Returns what it saw: `None` where the server has no such gauges,
/// else the requests still there when it stopped waiting (0: idle).
pub async fn wait_idle(url: &str, api_key: Option<&str>, at_most: Duration) -> Option<f64> {
    let origin = replay::client::origin_of(url).ok()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    let began = std::time::Instant::now();
    let mut said = false;
    loop {
        let snap = replay::prom::Snapshot::from_text(0.0, &metrics_text(&client, &origin, api_key).await?);
        let busy = match (snap.running, snap.waiting) {
            (None, None) => return None,
            (r, w) => r.unwrap_or(0.0) + w.unwrap_or(0.0),
        };
        if busy <= 0.0 || began.elapsed() >= at_most {
            if busy > 0.0 {
                eprintln!(
                    "calibrate: the server still holds {busy} request(s) after {:.0} s (other clients?): going on",
                    at_most.as_secs_f64()
                );
            }
            return Some(busy);
        }
        if !said {
            eprintln!("calibrate: waiting for the server to drop the probe's cut requests ({busy} left)");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the probe measured: the records the fit takes (every phase's but the `cap` phase's), the server's
/// speculative counters over it (where it has them and drafted), and the `cap` phase's reading (where it ran).
pub struct Probed {
    pub records: Vec<RequestRecord>,
    pub spec: Option<calibrate::spec::ServerSpecCounts>,
    pub cap: Option<calibrate::cap::CapReading>,
}

/// What bounds the probe (`max_prompt` its longest prompt): the decode batches up to the cap given or reported
/// (at most 16; 8 where unknown, until the `cap` phase finds it), and that phase only where the cap is neither given
/// nor reported (vLLM, SGLang: llama.cpp's slots leave its probe as it was).
fn probe_limits(a: &Args, d: &Discovered, limits_p: &EngineProfile, max_prompt: u32) -> ProbeLimits {
    ProbeLimits {
        max_prompt_tokens: max_prompt,
        max_batch: a.max_num_seqs.or(d.max_num_seqs).unwrap_or(8).min(16),
        decode_output_tokens: a.decode_tokens,
        prefill_kv: a.prefill_kv != Choice::Off,
        conversation: a.reply_share == ReplyChoice::Auto,
        // The parked sessions must outgrow the GPU's KV (llama.cpp: every slot's context).
        returns: (a.tiers == TiersChoice::Auto && a.host_cache_tokens.is_none())
            .then(|| limits_p.num_kv_blocks.saturating_mul(u64::from(limits_p.block_size))),
        // llama.cpp: a slot keeps only its last prompt.
        returns_slots: (limits_p.scheduler == Scheduler::LlamaCpp).then_some(limits_p.max_num_seqs),
        // Neither given nor reported (vLLM, SGLang): measured first.
        cap: (a.max_num_seqs.is_none() && d.max_num_seqs.is_none()).then_some(calibrate::CAP_PROBE_REQUESTS),
    }
}

/// The probe (see [`Probed`]).
async fn probe(a: &Args, url: &str, d: &Discovered, limits_p: &EngineProfile) -> anyhow::Result<Probed> {
    anyhow::ensure!(
        a.budget.is_finite() && a.budget >= 5.0,
        "--budget must be at least 5 seconds (got {})",
        a.budget
    );
    // Default: up to the per-request context (85 % of it, less the decode probes' output: room for a tokenizer
    // that counts a few % more than the filler is sized for), so that the prefill of long contexts is measured,
    // not extrapolated (a prefill longer than the step budget is fitted as its chunks), but at most
    // [`DEFAULT_MAX_PROBE_PROMPT`]: a server that takes 128k or more per request (vLLM's `max_model_len`) would
    // spend a short budget on a few prompts; `--max-prompt-tokens` is taken as given.
    let max_prompt = a.max_prompt_tokens.unwrap_or_else(|| {
        limits_p
            .max_model_len
            .map(|l| {
                (l.saturating_mul(85) / 100)
                    .saturating_sub(u64::from(a.decode_tokens))
                    .clamp(256, DEFAULT_MAX_PROBE_PROMPT) as u32
            })
            .unwrap_or(4096)
    });
    anyhow::ensure!(
        a.temp.is_finite() && a.temp >= 0.0,
        "--temp must be a finite number >= 0 (got {})",
        a.temp
    );
    let mut pl = probe_limits(a, d, limits_p, max_prompt);
    let mut phases = calibrate::plan_probe(&pl).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cap_reading = None;
    let scraped = std::time::Instant::now();
    let spec_before = scrape_spec(url, a.api_key.as_deref(), 0.0).await;
    let mut sglang_snaps: Vec<replay::prom::Snapshot> = match &spec_before {
        Some(SpecScrape::Sglang(s)) => vec![(**s).clone()],
        _ => Vec::new(),
    };
    let dir = a.out.join("probe");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut all = Vec::new();
    let mut model = a.model.clone();
    let mut dialect = a.dialect;
    let began = std::time::Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    // The probe phases, then the fit (numbered after them); a cap found plans the phases after it again.
    let n_phases = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(phases.len() + 1));
    let status = {
        let (done, n) = (done.clone(), n_phases.clone());
        move |phase: &str, i: usize| ProbeStatus {
            phase: phase.to_string(),
            phase_index: i + 1,
            phases: n.load(std::sync::atomic::Ordering::Relaxed),
            requests: done.load(std::sync::atomic::Ordering::Relaxed),
            elapsed_s: began.elapsed().as_secs_f64(),
        }
    };
    let mut i = 0;
    while i < phases.len() {
        let ph = phases[i].clone();
        let share = calibrate::phase_seconds(&phases, i, a.budget, began.elapsed().as_secs_f64());
        let (start, drain) = ph.start_and_drain(share, a.budget);
        if let Some(p) = &a.progress {
            (p.0)(&status(&ph.name, i));
        }
        eprintln!(
            "calibrate: probe phase {}/{} {} ({} at a time, up to {share:.0} s)",
            i + 1,
            phases.len(),
            ph.name,
            ph.users
        );
        let requests: Vec<PlannedRequest> = ph
            .requests
            .iter()
            .map(|r| PlannedRequest {
                arrival_ms: 0.0,
                shared_prefix_tokens: r.shared_prefix_tokens,
                unique_prompt_tokens: r.unique_prompt_tokens,
                output_tokens: r.output_tokens,
            })
            .collect();
        let mut target = TargetSettings::new(url);
        target.model = model.clone();
        target.dialect = dialect;
        target.api_key = a.api_key.clone();
        let out = dir.join(format!("{i:02}-{}.jsonl", ph.name));
        let traffic = match (&ph.conversation, &ph.trace) {
            (None, Some(t)) => Traffic::Trace(std::sync::Arc::new(t.clone())),
            (c, _) => match c {
                // Sessions keep starting for the phase's time, then the ones in flight finish within its grace.
                Some(w) => Traffic::Sessions(shared::workload::SessionWorkload {
                    duration_s: start,
                    drain: true,
                    drain_grace_s: drain,
                    ..w.clone()
                }),
                None => Traffic::Closed {
                    requests,
                    users: ph.users,
                    think_s: 0.0,
                },
            },
        };
        let mut s = ReplaySettings::new(
            target,
            out.clone(),
            traffic,
            format!("calibrate probe {}", ph.name),
            i as u64,
            Some(replay::settings::seconds("the probe phase", start)?),
        )?;
        s.drain = true;
        s.temperature = a.temp;
        s.drain_grace = replay::settings::seconds("the probe phase's drain", drain)?;
        s.scrape_interval = Duration::from_secs_f64((share / 4.0).clamp(0.5, 5.0));
        s.progress = false;
        // The cap phase cuts the requests a server that queues them has not served by its end: no failure streak.
        s.max_fail_streak = if ph.name == "cap" {
            ph.users.saturating_add(1)
        } else {
            3
        };
        let log: replay::run::LogFn = std::sync::Arc::new(|_line: &str| {});
        let on_record: Option<replay::records::RecordObserver> = a.progress.clone().map(|p| {
            let (status, name, done) = (status.clone(), ph.name.clone(), done.clone());
            std::sync::Arc::new(move |_r: &RequestRecord| {
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (p.0)(&status(&name, i));
            }) as replay::records::RecordObserver
        });
        let outcome = replay::run(
            s,
            Hooks {
                log: Some(log),
                on_record,
                ..Hooks::default()
            },
        )
        .await
        .with_context(|| format!("probe phase {}", ph.name))?;
        match outcome.verdict() {
            replay::Verdict::Measured => {
                // Later phases reuse what the first one found out.
                model = Some(outcome.summary.model.clone());
                dialect = outcome.summary.dialect;
            }
            // A slow server (or a loaded machine) can use a phase's whole share on its first requests; the
            // phase adds no observations and the fit says what it lacks.
            replay::Verdict::NothingCompleted if i > 0 || ph.name == "cap" => eprintln!(
                "calibrate: probe phase {}: no request completed within its {:.0} s (a longer --budget gives it \
                 time); going on without it",
                ph.name,
                start + drain
            ),
            v => anyhow::bail!("probe phase {}: {v:?} (records in {})", ph.name, out.display()),
        }
        if ph.name == "cap" {
            // Not for the fit (a batch of up to 160 tiny requests is no decode cell the model is fitted over): it
            // says how many the server decodes at once, which sizes the decode phases after it.
            let r = calibrate::cap::read_cap(&outcome.records, ph.users);
            eprintln!(
                "calibrate: {} of {} requests decoded at once, {} queued, {} failed",
                r.decoding_together, r.sent, r.queued, r.failed
            );
            if let calibrate::cap::CapFinding::Exact(n) = r.finding() {
                pl.max_batch = n.min(16);
                phases = calibrate::plan_probe(&pl).map_err(|e| anyhow::anyhow!("{e}"))?;
                n_phases.store(phases.len() + 1, std::sync::atomic::Ordering::Relaxed);
            }
            cap_reading = Some(r);
            i += 1;
            continue;
        }
        // Each phase's clock starts at its own origin: shift so that runs do not overlap in time.
        let offset = all
            .iter()
            .map(|r: &RequestRecord| r.t_submit + r.wall_s)
            .fold(0.0, f64::max)
            + 1.0;
        let sessions = session_base(&all);
        all.extend(outcome.records.into_iter().map(|mut r| {
            r.t_submit += offset;
            apart(&mut r, sessions);
            r
        }));
        if !sglang_snaps.is_empty()
            && let Some(SpecScrape::Sglang(s)) =
                scrape_spec(url, a.api_key.as_deref(), scraped.elapsed().as_secs_f64()).await
        {
            sglang_snaps.push(*s);
        }
        i += 1;
    }
    let took = began.elapsed().as_secs_f64();
    if took > a.budget * 1.05 {
        // A phase ran over (a decode round that outlasted its share) and the later ones kept half their time.
        eprintln!(
            "calibrate: the probe took {took:.0} s of a {:.0} s budget (its slowest phases waited for their \
             requests in flight)",
            a.budget
        );
    }
    // A request cut at a phase's end is counted when the server lets its slot go (llama.cpp: within about a second
    // of the client's disconnect), so a server that drafted is asked again after a second.
    let mut spec = None;
    let key = a.api_key.as_deref();
    if let Some(SpecScrape::Counters(b)) = &spec_before
        && let Some(SpecScrape::Counters(now)) = scrape_spec(url, key, scraped.elapsed().as_secs_f64()).await
        && now.drafted_tokens > b.drafted_tokens
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = match scrape_spec(url, key, scraped.elapsed().as_secs_f64()).await {
            Some(SpecScrape::Counters(c)) => c,
            _ => now,
        };
        spec = Some(spec_delta(b, &after));
    }
    // SGLang counts a request when it finishes: its last phase's cut requests a second later too.
    if sglang_snaps.len() > 1 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(SpecScrape::Sglang(s)) = scrape_spec(url, key, scraped.elapsed().as_secs_f64()).await {
            sglang_snaps.push(*s);
        }
        spec = sglang_spec_over(&sglang_snaps);
    }
    // Leave the server as the probe found it: idle.
    wait_idle(url, key, IDLE_WAIT).await;
    if let Some(p) = &a.progress {
        (p.0)(&status("fit", phases.len()));
    }
    Ok(Probed {
        records: all,
        spec,
        cap: cap_reading,
    })
}

/// What `--from` read: every run's records (each file shifted after the previous one in time: they were separate
/// runs), notes, the limits their scrape sidecars told, and each run's facts for [`check_runs`].
#[derive(Debug, Default)]
pub struct Runs {
    pub records: Vec<RequestRecord>,
    pub notes: Vec<String>,
    /// The limits of the first sidecar that holds any (`RUN.jsonl.server.json`'s `limits`).
    pub discovered: Discovered,
    pub facts: Vec<RunFacts>,
    /// The reading of a probe's `cap` phase among the runs (its summary sidecar's `shape` is [`CAP_SHAPE`]); its
    /// records are not fitted, as with `--url`.
    pub cap: Option<calibrate::cap::CapReading>,
}

/// The `shape` a probe phase's run is labelled with in its summary sidecar (`calibrate probe NAME`), for the cap phase.
pub const CAP_SHAPE: &str = "calibrate probe cap";

/// Whether `run` is a probe's `cap` phase: its summary sidecar (`RUN.jsonl.summary.json`) says so. A run without
/// one, or another run, is not.
fn is_cap_run(run: &Path) -> bool {
    std::fs::read_to_string(replay::summary::sidecar(run, "summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get("shape").and_then(serde_json::Value::as_str) == Some(CAP_SHAPE))
}

/// One `--from` run, as [`check_runs`] compares it with the limits and the server's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFacts {
    pub path: PathBuf,
    /// Most requests between their first token and their end at one instant (decoding together).
    pub peak_decoding: usize,
    /// Σ generated tokens of every record (cut ones included), Σ prompt and Σ cached tokens of the ok ones.
    pub gen_tokens: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// The sidecar's server-side report (`/metrics` over the run), when there is one.
    pub server: Option<ServerReport>,
}

/// What a run's scrape sidecar says ([`read_sidecar`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sidecar {
    /// Its `limits`, read as `--url` reads the live server's (sources name the file).
    pub discovered: Discovered,
    /// Its `report`: the server's `/metrics` over the run.
    pub report: Option<ServerReport>,
}

/// The scrape sidecar of `run` (`RUN.jsonl.server.json`): its limits and server report. `Ok(None)` with a note
/// when it is missing or unreadable; `Err` naming the file when it is not a sidecar's JSON.
pub fn read_sidecar(run: &Path, notes: &mut Vec<String>) -> anyhow::Result<Option<Sidecar>> {
    let path = replay::summary::sidecar(run, "server.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            notes.push(if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{}: no scrape sidecar {} (the server's limits and counters unknown)",
                    run.display(),
                    path.display()
                )
            } else {
                format!(
                    "{}: scrape sidecar {} unreadable ({e}): not used",
                    run.display(),
                    path.display()
                )
            });
            return Ok(None);
        }
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("scrape sidecar {}: not JSON", path.display()))?;
    anyhow::ensure!(v.is_object(), "scrape sidecar {}: not a JSON object", path.display());
    let report = match v.get("report") {
        None | Some(serde_json::Value::Null) => None,
        Some(r) => Some(
            serde_json::from_value::<ServerReport>(r.clone())
                .with_context(|| format!("scrape sidecar {}: field `report`", path.display()))?,
        ),
    };
    let limits: ServerLimits = match v.get("limits") {
        None | Some(serde_json::Value::Null) => ServerLimits::default(),
        Some(l) => serde_json::from_value(l.clone())
            .with_context(|| format!("scrape sidecar {}: field `limits`", path.display()))?,
    };
    let mut d = Discovered::default();
    if let Some(props) = &limits.props {
        parse_props(props, &mut d);
    }
    if let Some(line) = &limits.cache_config_info {
        parse_cache_config(line, &mut d);
    }
    if let Some(len) = limits.max_model_len {
        parse_models(&serde_json::json!({"data": [{"max_model_len": len}]}), &mut d);
    }
    if d.sources.is_empty() {
        notes.push(format!(
            "{}: the scrape sidecar holds no limits (the server said none, or the run predates them)",
            path.display()
        ));
    }
    let name = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    for src in &mut d.sources {
        *src = format!("{src} (from {name})");
    }
    Ok(Some(Sidecar { discovered: d, report }))
}

/// Most intervals `[first token, end]` open at one instant.
fn peak_decoding(records: &[RequestRecord]) -> usize {
    // Back-to-back requests do not overlap.
    calibrate::cap::peak_overlap(
        records
            .iter()
            .filter(|r| r.ok)
            .filter_map(|r| r.ttft_s.map(|t| (r.t_submit + t, r.t_submit + r.wall_s))),
    )
}

/// Reads the `--from` runs and their scrape sidecars.
pub fn read_runs(paths: &[PathBuf]) -> anyhow::Result<Runs> {
    let mut out = Runs::default();
    for p in paths {
        let (recs, bad) = read_records(p).with_context(|| format!("reading {}", p.display()))?;
        out.notes.extend(skipped_note(p, &bad));
        if is_cap_run(p) {
            let sent = u32::try_from(recs.len()).unwrap_or(u32::MAX);
            out.cap = Some(calibrate::cap::read_cap(&recs, sent));
            out.notes.push(format!(
                "{}: the probe's cap phase, read for max_num_seqs (not fitted)",
                p.display()
            ));
            continue;
        }
        let server = match read_sidecar(p, &mut out.notes)? {
            Some(Sidecar { discovered: d, report }) => {
                if out.discovered.sources.is_empty() {
                    out.discovered = d;
                } else if !d.sources.is_empty() && !same_limits(&d, &out.discovered) {
                    out.notes.push(format!(
                        "{}: its sidecar's limits differ from the first run's ({d:?}); the first run's are used",
                        p.display()
                    ));
                }
                report
            }
            None => None,
        };
        let ok = || recs.iter().filter(|r| r.ok);
        out.facts.push(RunFacts {
            path: p.clone(),
            peak_decoding: peak_decoding(&recs),
            // Every record counts what it received, a cut one too (the server counted those tokens).
            gen_tokens: recs.iter().map(|r| r.gen_tokens).sum(),
            prompt_tokens: ok().filter_map(|r| r.prompt_tokens).sum(),
            cached_tokens: ok().filter_map(|r| r.cached_tokens).sum(),
            server,
        });
        let offset = out
            .records
            .iter()
            .map(|r: &RequestRecord| r.t_submit + r.wall_s)
            .fold(0.0, f64::max)
            + 1.0;
        let sessions = session_base(&out.records);
        out.records.extend(recs.into_iter().map(|mut r| {
            r.t_submit += offset;
            apart(&mut r, sessions);
            r
        }));
    }
    Ok(out)
}

/// The first session id after every one of `records`: separate runs (the probe's phases, `--from` files) number
/// their sessions from 0, and the same id in two runs is two sessions (else a returns phase's session 0 reads as
/// the next step of a conversation phase's session 0).
fn session_base(records: &[RequestRecord]) -> u64 {
    records
        .iter()
        .map(|r| r.session.max(r.parent.unwrap_or(0)).saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// Renumber a record's session (and the session it was forked from) after `base`.
fn apart(r: &mut RequestRecord, base: u64) {
    r.session = r.session.saturating_add(base);
    r.parent = r.parent.map(|p| p.saturating_add(base));
}

fn same_limits(a: &Discovered, b: &Discovered) -> bool {
    (
        a.max_num_seqs,
        a.block_size,
        a.num_kv_blocks,
        a.max_model_len,
        a.max_num_batched_tokens,
    ) == (
        b.max_num_seqs,
        b.block_size,
        b.num_kv_blocks,
        b.max_model_len,
        b.max_num_batched_tokens,
    )
}

/// Below / above these shares of the records' generated tokens, a sidecar's counters did not see this run alone.
const COUNTER_LOW: f64 = 0.9;
const COUNTER_HIGH: f64 = 1.1;
/// A server-side prefix-cache hit rate further than this from the records' cached share is noted.
const HIT_RATE_GAP: f64 = 0.10;

/// What the runs' records and sidecars say against the profile's limits: notes for `fit.json`, one per finding.
/// - more requests decoding at once than `max_num_seqs` (the limits are not this server's, or the flag is wrong);
/// - the server's own `running` gauge above `max_num_seqs`;
/// - the server's generated-token counter off the records' sum by more than 10 % (other traffic shared the server,
///   whose timings are then in the fit, or the sidecar is not this run's);
/// - the server's prefix-cache hit rate more than 10 points from the records' cached share.
pub fn check_runs(facts: &[RunFacts], p: &EngineProfile) -> Vec<String> {
    let mut notes = Vec::new();
    for f in facts {
        let name = f.path.display();
        if f.peak_decoding > p.max_num_seqs as usize {
            notes.push(format!(
                "{name}: {} requests decoded at once, more than max_num_seqs {}: the limits are not this server's",
                f.peak_decoding, p.max_num_seqs
            ));
        }
        let Some(s) = &f.server else { continue };
        if let Some(m) = s.running_max
            && m > f64::from(p.max_num_seqs)
        {
            notes.push(format!(
                "{name}: the server reported {m} requests running, more than max_num_seqs {}",
                p.max_num_seqs
            ));
        }
        if let Some(g) = s.generation_tokens
            && f.gen_tokens > 0
        {
            let share = g / f.gen_tokens as f64;
            if share > COUNTER_HIGH {
                notes.push(format!(
                    "{name}: the server generated {share:.2}x the records' tokens during the run: other traffic shared it, and its timings are in the fit"
                ));
            } else if share < COUNTER_LOW {
                notes.push(format!(
                    "{name}: the server's counters saw {share:.2}x the records' generated tokens: the sidecar may not be this run's"
                ));
            }
        }
        if let Some(h) = s.prefix_cache_hit_rate
            && f.prompt_tokens > 0
        {
            let share = f.cached_tokens as f64 / f.prompt_tokens as f64;
            if (h - share).abs() > HIT_RATE_GAP {
                notes.push(format!(
                    "{name}: the server's prefix-cache hit rate {h:.3} differs from the records' cached share {share:.3}"
                ));
            }
        }
    }
    notes
}

fn write_json(path: &Path, v: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v).context("encoding JSON")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The `--deployment` file, read and checked (before any probe is sent).
fn read_deployment(path: &Path) -> anyhow::Result<Deployment> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading --deployment {}", path.display()))?;
    Deployment::from_json(&text).map_err(|e| anyhow::anyhow!("--deployment {}: {e}", path.display()))
}

/// The limits the deployment file leaves out, filled from the flags and what the server said (llama.cpp's
/// `/props`: slots → `max_num_seqs`, per-slot `n_ctx` → `max_model_len`, `n_batch` → `max_num_batched_tokens`;
/// vLLM's `cache_config_info` → `block_size`); one line per field filled.
pub fn fill_deployment(dep: &mut Deployment, a: &Args, d: &Discovered) -> Vec<String> {
    let server = if d.sources.is_empty() {
        "the server".to_string()
    } else {
        d.sources.join(", ")
    };
    let from = |flag: bool, name: &str| {
        if flag { format!("flag --{name}") } else { server.clone() }
    };
    let mut filled = Vec::new();
    if dep.max_num_seqs.is_none()
        && let Some(v) = a.max_num_seqs.or(d.max_num_seqs)
    {
        dep.max_num_seqs = Some(v);
        filled.push(format!(
            "max_num_seqs = {v} ({})",
            from(a.max_num_seqs.is_some(), "max-num-seqs")
        ));
    }
    if dep.max_model_len.is_none()
        && let Some(v) = a.max_model_len.or(d.max_model_len)
    {
        dep.max_model_len = Some(v);
        filled.push(format!(
            "max_model_len = {v} ({})",
            from(a.max_model_len.is_some(), "max-model-len")
        ));
    }
    if dep.max_num_batched_tokens.is_none()
        && let Some(v) = a.max_num_batched_tokens.or(d.max_num_batched_tokens)
    {
        dep.max_num_batched_tokens = Some(v);
        filled.push(format!(
            "max_num_batched_tokens = {v} ({})",
            from(a.max_num_batched_tokens.is_some(), "max-num-batched-tokens")
        ));
    }
    // llama.cpp has no KV blocks (`parse_props` assumes 16 for the profile): only a flag or vLLM's own says.
    let block = a
        .block_size
        .or(d.block_size.filter(|_| d.scheduler != Some(Scheduler::LlamaCpp)));
    if dep.block_size.is_none()
        && let Some(v) = block
    {
        dep.block_size = Some(v);
        filled.push(format!(
            "block_size = {v} ({})",
            from(a.block_size.is_some(), "block-size")
        ));
    }
    filled
}

/// The fit carried over to the deployment (`deployment_fit`; `deployment.json` is its `deployment`).
fn carry_over(dep: &Deployment, a: &Args, d: &Discovered, fit: &calibrate::Fit) -> anyhow::Result<transfer::Transfer> {
    let mut dep = dep.clone();
    let mut filled = fill_deployment(&mut dep, a, d);
    if dep.max_num_seqs.is_none()
        && let Some(n) = fit.max_num_seqs.as_ref().and_then(measured_cap)
    {
        dep.max_num_seqs = Some(n);
        filled.push(format!("max_num_seqs = {n} (measured by the probe)"));
    }
    let known = |name: &str| fit.coefficients.get(name).is_some_and(|c| c.identified);
    let mut t = transfer::transfer(
        &fit.profile,
        &dep,
        transfer::Identified {
            step_fixed: known("step_fixed_ms"),
            ctx_slope: known("per_ctx_token_ms"),
            prefill_rate: known("prefill_tokens_per_ms"),
        },
    )
    .map_err(|e| anyhow::anyhow!("--deployment (with the limits the server gave): {e}"))?;
    t.filled = filled;
    if fit.profile.scheduler == Scheduler::LlamaCpp {
        t.notes.push(
            "the measured server schedules as llama.cpp does (slots, n_batch); a deployment's profile schedules as \
             vLLM does, with a KV capacity from the GPU's memory: predict --deployment simulates that engine, \
             predict --profile profile.json --deployment FILE this server with the deployment's steps"
                .to_string(),
        );
    }
    Ok(t)
}

/// Speculative decoding from the records that carry its counts (`shared::calibrate::spec`): into the profile and
/// `fit.json`'s `speculative`. With `--spec-base`, the profile's step terms are the base profile's (the records'
/// decode gaps include the draft and the verified tokens, so the decode fit would fold them into its terms).
/// `--from`: the server's speculative counters summed over the runs' scrape sidecars (`report`'s `spec_drafts`,
/// `spec_draft_tokens`, `spec_accepted_tokens`: deltas between each run's first and last scrape), where every run
/// has them.
fn sidecar_spec(facts: &[RunFacts]) -> Option<calibrate::spec::ServerSpecCounts> {
    let mut c = calibrate::spec::ServerSpecCounts {
        drafted_tokens: 0.0,
        accepted_tokens: 0.0,
        steps: 0.0,
        accepted_per_position: Vec::new(),
    };
    for f in facts {
        let r = f.server.as_ref()?;
        c.drafted_tokens += r.spec_draft_tokens?;
        c.accepted_tokens += r.spec_accepted_tokens?;
        c.steps += r.spec_drafts.unwrap_or(0.0);
    }
    (!facts.is_empty()).then_some(c)
}

fn add_speculative(
    a: &Args,
    records: &[RequestRecord],
    server: Option<calibrate::spec::ServerSpecCounts>,
    fit: &mut calibrate::Fit,
) -> anyhow::Result<()> {
    let base = match &a.spec_base {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading --spec-base {}", path.display()))?;
            let p =
                EngineProfile::from_json(&text).map_err(|e| anyhow::anyhow!("--spec-base {}: {e}", path.display()))?;
            Some(p)
        }
        None => None,
    };
    if let Some(k) = a.draft_tokens
        && !(1..=shared::engine::spec::MAX_DRAFT_TOKENS).contains(&k)
    {
        anyhow::bail!(
            "--draft-tokens must be in 1..={} (got {k})",
            shared::engine::spec::MAX_DRAFT_TOKENS
        );
    }
    let method: shared::engine::SpecMethod = serde_json::from_value(serde_json::Value::String(a.spec_method.clone()))
        .map_err(|e| anyhow::anyhow!("--spec-method: {e}"))?;
    let Some(mut sf) = calibrate::spec::fit_speculative(records, method, a.draft_tokens, base.as_ref()) else {
        if base.is_some() {
            fit.notes
                .push("--spec-base given but no record carries speculative counts: ignored".into());
        }
        return Ok(());
    };
    if let Some(c) = server {
        sf.use_server_counts(c);
    }
    if let Some(b) = &base {
        fit.profile.take_step_terms(b);
        fit.notes.push(
            "speculative decoding: step terms from --spec-base, draft cost and acceptance from the records".into(),
        );
    } else if let Some(note) = calibrate::spec::take_out_verification(&mut fit.profile, sf.drafted_per_step) {
        fit.notes.push(format!("speculative decoding: {note}"));
    } else {
        fit.notes.push(
            "speculative decoding: the decode terms were fitted to steps that include the draft; give --spec-base \
             (the server without speculation) to separate them"
                .into(),
        );
    }
    fit.profile.speculative = Some(Box::new(sf.speculative.clone()));
    fit.notes
        .extend(sf.notes.iter().map(|n| format!("speculative decoding: {n}")));
    fit.speculative = Some(sf);
    Ok(())
}

/// A prefill/decode-disaggregated target whose records say each request's KV transfer (`kv_transfer_ms`, the
/// sim-server's `x-kv-transfer-ms`): the transfer is taken out of each TTFT before the fit, so the prefill terms are
/// the prefill instance's own and `predict --fleet` with the same link adds it back (docs/calibration.md,
/// "Prefill/decode-disaggregated targets"). Records without it are left as they are: a target that does not say
/// its transfers (vLLM's P/D proxy) is fitted as a whole, its link inside the prefill terms.
fn without_link(
    mut records: Vec<shared::record::RequestRecord>,
) -> (Vec<shared::record::RequestRecord>, Option<String>) {
    let mut n = 0usize;
    let mut total_ms = 0.0;
    for r in &mut records {
        if let (Some(ms), Some(ttft)) = (r.kv_transfer_ms, r.ttft_s.as_mut())
            && ms.is_finite()
            && ms >= 0.0
        {
            *ttft = (*ttft - ms / 1000.0).max(0.0);
            n += 1;
            total_ms += ms;
        }
    }
    let note = (n > 0).then(|| {
        format!(
            "prefill/decode disaggregation: {n} records carry the server's KV transfer (mean {:.1} ms), taken out \
             of their TTFT before the fit: the prefill terms are the prefill instance's; predict with the same \
             fleet (`--fleet`) to add the link back",
            total_ms / n as f64
        )
    });
    (records, note)
}

/// Everything `calibrate` does, returning the fit (tests call this).
pub async fn calibrate(a: &Args) -> anyhow::Result<calibrate::Fit> {
    let deployment = a.deployment.as_deref().map(read_deployment).transpose()?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut facts = Vec::new();
    let server_spec;
    let cap;
    let (records, mut notes, d) = match &a.url {
        Some(url) => {
            let d = discover(url, a.api_key.as_deref()).await;
            let lp = limits(a, &d, None)?;
            let p = probe(a, url, &d, &lp).await?;
            server_spec = p.spec;
            cap = cap_fit(a, &d, p.cap);
            (p.records, Vec::new(), d)
        }
        None => {
            let runs = read_runs(&a.from)?;
            if runs.records.is_empty() {
                let files: Vec<String> = a.from.iter().map(|p| p.display().to_string()).collect();
                let why = if runs.notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", runs.notes.join("; "))
                };
                anyhow::bail!("--from: no records in {}{why}", files.join(", "));
            }
            server_spec = sidecar_spec(&runs.facts);
            cap = cap_fit(a, &runs.discovered, runs.cap);
            facts = runs.facts;
            (runs.records, runs.notes, runs.discovered)
        }
    };
    let lp = limits(a, &d, measured_cap(&cap))?;
    notes.extend(check_runs(&facts, &lp));
    let (records, link_note) = without_link(records);
    notes.extend(link_note);
    let batch_kv = match a.batch_kv {
        Choice::Auto => None,
        Choice::On => Some(true),
        Choice::Off => Some(false),
    };
    let prefill_kv = match a.prefill_kv {
        Choice::Auto => None,
        Choice::On => Some(true),
        Choice::Off => Some(false),
    };
    let mut fit = calibrate::fit(
        &records,
        &FitOptions {
            limits: Some(lp),
            batch_kv,
            prefill_kv,
            reply_share_off: a.reply_share == ReplyChoice::Off,
            tier_restore_tokens_per_ms: a.host_restore_tok_per_ms,
            tiers_off: a.tiers == TiersChoice::Off,
        },
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "{e} ({} records{})",
            records.len(),
            match &a.url {
                Some(_) => format!("; the probe's records are in {}", a.out.join("probe").display()),
                None => String::new(),
            }
        )
    })?;
    fit.notes.append(&mut notes);
    apply_reported_tier(a, &d, &mut fit);
    add_speculative(a, &records, server_spec, &mut fit)?;
    if !d.sources.is_empty() {
        fit.notes.push(format!("limits discovered: {}", d.sources.join(", ")));
    }
    if !matches!(cap.found_by.as_str(), "flag" | "server report") {
        fit.notes.push(cap.note.clone());
    }
    fit.max_num_seqs = Some(cap);
    if let Some(dep) = &deployment {
        let t = carry_over(dep, a, &d, &fit)?;
        write_json(&a.out.join("deployment.json"), &t.deployment)?;
        fit.deployment_fit = Some(t);
    }
    write_json(&a.out.join("profile.json"), &fit.profile)?;
    write_json(&a.out.join("fit.json"), &fit)?;
    Ok(fit)
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    let fit = calibrate(&a).await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&fit.coefficients).unwrap_or_default()
    );
    println!(
        "decode R² {:.3} over {} requests, prefill R² {:.3} over {}; {} unused",
        fit.decode.r2,
        fit.decode.n,
        fit.prefill.r2,
        fit.prefill.n,
        fit.unused.len()
    );
    if let Some(sf) = &fit.speculative {
        let p = &sf.speculative;
        let rate = match &p.acceptance {
            shared::engine::Acceptance::Rate(a) => format!("{a:.4}"),
            shared::engine::Acceptance::PerPosition(v) => {
                let v: Vec<String> = v.iter().map(|u| format!("{u:.4}")).collect();
                format!("[{}]", v.join(", "))
            }
        };
        // Where the acceptance came from: the server's counters if it has them, else the records' sums.
        let counted = match &sf.server {
            Some(c) => format!(
                "the server counted {:.0} of {:.0} drafted tokens accepted, {:.3}",
                c.accepted_tokens,
                c.drafted_tokens,
                c.accepted_tokens / c.drafted_tokens
            ),
            None => format!(
                "{} of {} drafted tokens accepted, {:.3}, over {} requests",
                sf.accepted_tokens, sf.drafted_tokens, sf.accepted_share, sf.requests
            ),
        };
        let spread = if p.acceptance_spread > 0.0 {
            format!(
                " at the middle request, acceptance_spread {:.3} over {} requests (pooled {:.4})",
                p.acceptance_spread,
                sf.spread_requests,
                p.pooled_acceptance_rate()
            )
        } else {
            String::new()
        };
        println!(
            "speculative decoding: acceptance {rate}{spread} for draft_tokens {} ({counted}), draft_cost_ms {:.4} \
             (from {} lone requests)",
            p.draft_tokens, p.draft_cost_ms, sf.draft_cost_requests
        );
    }
    for n in &fit.notes {
        println!("note: {n}");
    }
    if let Some(t) = &fit.deployment_fit {
        let f = |name: &str| {
            t.factors.get(name).map_or_else(String::new, |f| {
                format!("{name} {:.4}{}", f.value, if f.identified { "" } else { " (kept)" })
            })
        };
        // The CPU-like factors only where the fit wrote them (a GPU's calibration prints as it always has).
        let e = &t.deployment.efficiency;
        let cpu: String = [
            ("overlap", e.overlap.is_some()),
            ("decode_attention_mfu", e.decode_attention_mfu.is_some()),
        ]
        .iter()
        .filter(|(_, written)| *written)
        .map(|(name, _)| format!(", {}", f(name)))
        .collect();
        println!(
            "deployment: {}, {}, {}, {}, {}{cpu}; its roofline matches the fit within {:.1} % (largest), {:.1} % \
             (RMS) over {} step shapes",
            f("mfu"),
            f("bandwidth_utilization"),
            f("step_overhead_ms"),
            f("link_utilization"),
            f("allreduce_latency_us"),
            t.max_error * 100.0,
            t.rms_error * 100.0,
            t.shapes.len()
        );
        for n in t
            .filled
            .iter()
            .map(|f| format!("filled {f}"))
            .chain(t.notes.iter().cloned())
        {
            println!("note: {n}");
        }
        println!("wrote {}", a.out.join("deployment.json").display());
    }
    println!(
        "wrote {} and {}",
        a.out.join("profile.json").display(),
        a.out.join("fit.json").display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[&str]) -> Args {
        let argv = [
            "loadshape",
            "calibrate",
            "--url",
            "http://127.0.0.1:9/v1",
            "--out",
            "unused",
        ]
        .iter()
        .chain(flags);
        match <crate::Cli as clap::Parser>::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{e}"))
            .command
        {
            crate::Command::Calibrate(a) => a,
            _ => panic!("not calibrate"),
        }
    }

    /// `max_num_seqs`: a flag wins, then the server's report (llama.cpp's slots), then the probe's reading (a
    /// queue: the cap, written to the profile; none: at least what was sent, the default written), else the
    /// default, said in the note.
    #[test]
    fn max_num_seqs_is_given_reported_measured_or_defaulted() {
        use calibrate::cap::CapReading;
        let d = Discovered::default();
        let queue = CapReading {
            sent: 160,
            started: 40,
            decoding_together: 12,
            queued: 148,
            failed: 0,
        };
        let all = CapReading {
            decoding_together: 160,
            started: 160,
            queued: 0,
            ..queue
        };
        let c = cap_fit(&args(&["--max-num-seqs", "8"]), &d, Some(queue));
        assert_eq!((c.value, c.found_by.as_str(), measured_cap(&c)), (8, "flag", None));
        let slots = Discovered {
            max_num_seqs: Some(4),
            sources: vec!["llama.cpp /props".into()],
            ..Discovered::default()
        };
        let c = cap_fit(&args(&[]), &slots, None);
        assert_eq!((c.value, c.found_by.as_str()), (4, "server report"));
        assert!(c.note.contains("llama.cpp /props"), "{}", c.note);
        let c = cap_fit(&args(&[]), &d, Some(queue));
        assert_eq!((c.value, c.found_by.as_str(), c.lower_bound), (12, "probe", false));
        assert_eq!(measured_cap(&c), Some(12));
        let p = limits(&args(&[]), &d, measured_cap(&c)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.max_num_seqs, 12);
        assert!(p.basis.contains("probe max_num_seqs 12"), "{}", p.basis);
        let c = cap_fit(&args(&[]), &d, Some(all));
        assert_eq!((c.value, c.found_by.as_str(), c.lower_bound), (256, "probe", true));
        assert_eq!(measured_cap(&c), None);
        assert!(
            c.note.contains("at least 160") && c.note.contains("--max-num-seqs"),
            "{}",
            c.note
        );
        let c = cap_fit(&args(&[]), &d, None);
        assert_eq!((c.value, c.found_by.as_str()), (256, "default"));
        assert!(
            c.note.contains("written as 256") && c.note.contains("--max-num-seqs"),
            "{}",
            c.note
        );
        assert_eq!(limits(&args(&[]), &d, None).map(|p| p.max_num_seqs).ok(), Some(256));
    }

    /// The cap phase runs only where the cap is unknown: llama.cpp's `/props` slots (the real-server suite's
    /// server) and `--max-num-seqs` leave it out (the rest of the plan is the same with or without it:
    /// `shared::calibrate`'s `the_cap_phase_comes_first_and_changes_nothing_else`); vLLM-like servers get it first.
    #[test]
    fn the_cap_phase_runs_only_where_the_cap_is_unknown() {
        let plan = |a: &Args, d: &Discovered| {
            let lp = limits(a, d, None).unwrap_or_else(|e| panic!("{e}"));
            calibrate::plan_probe(&probe_limits(a, d, &lp, 4096)).unwrap_or_else(|e| panic!("{e}"))
        };
        let mut llama = Discovered::default();
        parse_props(
            &serde_json::json!({"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}}),
            &mut llama,
        );
        let phases = plan(&args(&[]), &llama);
        assert!(
            phases.iter().all(|p| p.name != "cap"),
            "{:?}",
            phases.iter().map(|p| &p.name).collect::<Vec<_>>()
        );
        assert!(
            plan(&args(&["--max-num-seqs", "8"]), &Discovered::default())
                .iter()
                .all(|p| p.name != "cap")
        );
        let vllm = plan(&args(&[]), &Discovered::default());
        assert_eq!(
            (vllm[0].name.as_str(), vllm[0].users),
            ("cap", calibrate::CAP_PROBE_REQUESTS)
        );
    }

    /// llama-server's speculative counters as it exposes them with a draft model (4 positions), and their deltas.
    #[test]
    fn speculative_counters_from_metrics() {
        let text = "# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated\n\
                    # TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n\
                    llamacpp:spec_decode_num_draft_tokens_total 1025\n\
                    llamacpp:spec_decode_num_accepted_tokens_total 502\n\
                    llamacpp:spec_decode_num_drafts_total 260\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 123\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 166\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"} 103\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"} 110\n";
        let after = spec_counters_of(text).expect("counters");
        assert_eq!(
            (after.drafted_tokens, after.accepted_tokens, after.steps),
            (1025.0, 502.0, 260.0)
        );
        assert_eq!(after.accepted_per_position, vec![166.0, 123.0, 110.0, 103.0]);
        let before = spec_counters_of(
            "llamacpp:spec_decode_num_draft_tokens_total 25\nllamacpp:spec_decode_num_accepted_tokens_total 2\n\
             llamacpp:spec_decode_num_drafts_total 10\n\
             llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 1\n\
             llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 1\n\
             llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"} 0\n\
             llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"3\"} 0\n",
        )
        .expect("counters");
        let d = spec_delta(&before, &after);
        assert_eq!((d.drafted_tokens, d.accepted_tokens, d.steps), (1000.0, 500.0, 250.0));
        assert_eq!(d.accepted_per_position, vec![165.0, 122.0, 110.0, 103.0]);
        // Before its first draft llama-server lists no positions: they count from 0.
        let fresh = spec_counters_of(
            "llamacpp:spec_decode_num_draft_tokens_total 0\nllamacpp:spec_decode_num_accepted_tokens_total 0\n\
             llamacpp:spec_decode_num_drafts_total 0\n",
        )
        .expect("counters");
        assert_eq!(spec_delta(&fresh, &after), after);
        assert_eq!(spec_delta(&after, &fresh).accepted_per_position, Vec::<f64>::new());
        // A server without speculative counters (or a plain llama.cpp one's other metrics): none.
        assert_eq!(spec_counters_of("llamacpp:tokens_predicted_total 7\n"), None);
        // Positions with a gap are not read as a per-position count.
        let gap = "vllm:spec_decode_num_draft_tokens_total 10\n\
                   vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 3\n";
        assert_eq!(spec_counters_of(gap).map(|c| c.accepted_per_position), Some(Vec::new()));
    }

    /// SGLang's exposition is no counter set: its scrapes over the probe give the counts, as a replay run's report.
    #[test]
    fn sglang_speculative_counts_over_the_probe() {
        let expo = |requests: u32, generated: u32, steps: u32, rate: f64| {
            format!(
                "# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{{model_name=\"m\"}} {rate}\n\
                 sglang:spec_accept_length{{model_name=\"m\"}} 2.5\n\
                 sglang:generation_tokens_total{{model_name=\"m\"}} {generated}\n\
                 sglang:num_requests_total{{model_name=\"m\"}} {requests}\n\
                 sglang:spec_verify_calls_total{{model_name=\"m\"}} {steps}\n"
            )
        };
        let snap = |t: f64, text: &str| match spec_scrape_of(t, text) {
            Some(SpecScrape::Sglang(s)) => *s,
            other => panic!("{other:?}"),
        };
        // A server that had served 2 requests before the probe; 20 more: 2,020 tokens in 800 steps.
        let snaps = [
            snap(0.0, &expo(2, 102, 40, 0.3)),
            snap(5.0, &expo(12, 1112, 440, 0.6)),
            snap(9.0, &expo(22, 2122, 840, 0.6)),
        ];
        let c = sglang_spec_over(&snaps).expect("counts");
        // (2020 − 20) − 800 = 1,200 accepted at the probe's rate 0.6: 2,000 drafted.
        assert_eq!((c.steps, c.accepted_tokens), (800.0, 1200.0));
        assert!((c.drafted_tokens - 2000.0).abs() < 1e-9, "{c:?}");
        assert!(c.accepted_per_position.is_empty());
        // A vLLM exposition stays counters; a plain SGLang one is SGLang's without counts.
        assert!(matches!(
            spec_scrape_of(0.0, "vllm:spec_decode_num_draft_tokens_total 4\n"),
            Some(SpecScrape::Counters(_))
        ));
        let plain = snap(0.0, "sglang:generation_tokens_total 10\nsglang:num_requests_total 1\n");
        assert_eq!(sglang_spec_over(&[plain.clone(), plain]), None);
        assert_eq!(spec_scrape_of(0.0, "other_metric 1\n"), None);
    }
}
