//! `loadshape replay`: replay agent sessions (or a scenario's open/closed-loop traffic) against an
//! OpenAI-compatible server, write one JSONL record per request, scrape the server's `/metrics`, and print the
//! summary computed by `shared::metrics` (the simulator's scoring module).
//!
//! Run with e.g. `loadshape replay --url http://127.0.0.1:8000/v1 --model m --out run.jsonl --prod-ladder --respawn
//! --drain`. The session flags keep the names and meanings of the seed's `agent_replay.py`; see `docs/replay.md`.
//! This module parses the flags into [`ReplaySettings`], turns SIGINT and SIGTERM into [`replay::Interrupt`]s, calls
//! [`replay::run()`] and prints its outcome; the run itself lives in `crate::replay`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use shared::ladder::{LADDER_PROD, Ladder};
use shared::scenario::Scenario;
use shared::workload::{SessionDist, SessionWorkload, Shard};

use super::signals::Signals;
use crate::replay::client::{self, Endpoint, HttpClient};
use crate::replay::conversation::ToolResults;
use crate::replay::dialect::Dialect;
use crate::replay::fleet::LiveFleet;
use crate::replay::render::render;
use crate::replay::rxstamp::RxClock;
use crate::replay::settings::{self, defaults, seconds};
use crate::replay::tokenizer::MatchTokenizer;
use crate::replay::{self, Hooks, ReplaySettings, ScenarioOptions, TargetSettings, Traffic, Verdict};

/// The tool-output size `LADDER_PROD` was solved for (G = 700 + 2,020 ≈ 2,703 tokens per step).
pub const PROD_LADDER_TOOL_TOKENS: u32 = 2020;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DistArg {
    Lognormal,
    Uniform,
}

/// `replay --help` opens with these, before the flags.
const HELP_EXAMPLES: &str = "\
Examples:
  # 6 agent sessions of ~12 steps against a local server for 5 minutes
  loadshape replay --url http://127.0.0.1:8000/v1 --out run.jsonl --max-seconds 300

  # a scenario file's workload (e.g. examples/engine-10k.json), with its SLOs and duration
  loadshape replay --url http://127.0.0.1:8000/v1 --scenario scenario.json --out run.jsonl

  # the solved production ladder, sessions restarting as they finish, draining at the end
  loadshape replay --url http://127.0.0.1:8000/v1 --out run.jsonl --prod-ladder --respawn --drain

  # then score the records (the SLOs of a scenario.json beside them, else 500/35 ms)
  loadshape report run.jsonl";

#[derive(Debug, clap::Args)]
#[command(
    help_template = "{about-with-newline}\n{before-help}{usage-heading} {usage}\n\n{all-args}{after-help}",
    before_help = HELP_EXAMPLES,
    after_help = "The essential flags come first; the rest are grouped by what they set. docs/replay.md has the whole story."
)]
pub struct Args {
    /// OpenAI base URL including the API prefix, e.g. http://127.0.0.1:8000/v1. Give it more than once for a
    /// fleet without a router: requests are spread over the URLs by --router (docs/replay.md, "Fleets").
    #[arg(long, required = true)]
    pub url: Vec<String>,
    /// Model name to send (default: the first id on /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// Run a scenario file's workload live instead of the session flags (bursty, poisson, gamma, closed loop,
    /// sessions), with the same workload code the simulator uses.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// JSONL record file, one line per request, written as each request ends.
    #[arg(long)]
    pub out: PathBuf,
    /// Run length, seconds: no new session starts after it (default 900; a scenario's own duration otherwise).
    #[arg(long)]
    pub max_seconds: Option<f64>,
    /// Structure seed: session shapes and filler word choice (default: the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Concurrent session slots (a ladder's length wins).
    #[arg(long, default_value_t = 6)]
    pub sessions: u32,
    /// Mean steps per session.
    #[arg(long, default_value_t = 12)]
    pub steps: u32,
    /// No progress display.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print a line per step, as the seed does.
    #[arg(long, short)]
    pub verbose: bool,
    /// Mean starting context per session, tokens.
    #[arg(long, default_value_t = 22000)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub base: u64,
    /// Mean forced generation length per step, tokens.
    #[arg(long = "gen", default_value_t = 700)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub gen_tokens: u32,
    /// Synthetic tool output appended per step, tokens (default 900; 2020 with --prod-ladder).
    #[arg(long)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub tool: Option<u32>,
    /// Mean seconds between a session's steps.
    #[arg(long, default_value_t = 6.0)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub think: f64,
    /// Shape of the per-session draw.
    #[arg(long, value_enum, default_value_t = DistArg::Lognormal)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub dist: DistArg,
    /// Per-session variation in base size and step count, as a fraction.
    #[arg(long, default_value_t = 0.5)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub spread: f64,
    /// Fixed session shapes 'base:steps,base:steps,...'; overrides --sessions/--steps/--base/--dist/--spread.
    #[arg(long, default_value = "")]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub ladder: String,
    /// Use the solved production ladder (and the --tool 2020 it was solved for).
    #[arg(long)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub prod_ladder: bool,
    /// Restart a session slot when it finishes.
    #[arg(long)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub respawn: bool,
    /// Seconds between session starts.
    #[arg(long, default_value_t = 4.0)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub stagger: f64,
    /// At --max-seconds, stop STARTING sessions and let in-flight ones finish.
    #[arg(long)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub drain: bool,
    /// Hard cap on the drain (and on waiting for in-flight requests without --drain), seconds.
    #[arg(long, default_value_t = defaults::DRAIN_GRACE_S)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub drain_grace: f64,
    /// Consecutive no-progress sessions on one slot before the whole run aborts (exit 2).
    #[arg(long, default_value_t = defaults::MAX_FAIL_STREAK)]
    #[arg(help_heading = "Sessions (without --scenario)")]
    pub max_fail_streak: u32,
    /// Which route carries the prompt: completions (one prompt text, the seed's), chat (/v1/chat/completions with
    /// the session's message list), messages (the Anthropic Messages API, /v1/messages), responses (the Responses
    /// API, /v1/responses, with the session's input items).
    #[arg(long, value_enum, default_value_t = Endpoint::Completions)]
    #[arg(help_heading = "Requests")]
    pub endpoint: Endpoint,
    /// How sessions send each tool output on chat and messages: tool = a `tool` message (Anthropic: a
    /// `tool_result` block) answering the assistant's tool call; user = a user message after a plain reply.
    #[arg(long, value_enum, default_value_t = ToolResults::Tool)]
    #[arg(help_heading = "Requests")]
    pub tool_results: ToolResults,
    /// How to force the output length; auto asks the server.
    #[arg(long, value_enum, default_value_t = Dialect::Auto)]
    #[arg(help_heading = "Requests")]
    pub dialect: Dialect,
    /// Bearer token for the server.
    #[arg(long, env = "LOADSHAPE_API_KEY")]
    #[arg(help_heading = "Requests")]
    pub api_key: Option<String>,
    /// PEM file of CA certificates to trust for https:// (beside the system's), e.g. a private CA. Certificates
    /// are always verified.
    #[arg(long, value_name = "FILE")]
    #[arg(help_heading = "Requests")]
    pub ca_cert: Option<PathBuf>,
    /// Sampling temperature.
    #[arg(long, default_value_t = defaults::TEMPERATURE)]
    #[arg(help_heading = "Requests")]
    pub temp: f64,
    /// Per-request timeout, seconds.
    #[arg(long, default_value_t = defaults::TIMEOUT_S)]
    #[arg(help_heading = "Requests")]
    pub timeout: f64,
    /// Longest gap allowed between two frames of a stream (and before the first), seconds; 0 = no limit.
    #[arg(long, default_value_t = defaults::STALL_TIMEOUT_S)]
    #[arg(help_heading = "Requests")]
    pub stall_timeout: f64,
    /// Times a request answered 429 or 503 with `Retry-After` is sent again after the wait it asks for, within
    /// --timeout; 0 = fail at once.
    #[arg(long, default_value_t = client::DEFAULT_MAX_RETRIES)]
    #[arg(help_heading = "Requests")]
    pub max_retries: u32,
    /// Most requests in flight at once for open-loop arrivals (vLLM's `--max-concurrency`): a request due while
    /// that many run is sent when one ends (its clock starts then). Sessions and closed loops are bounded by their
    /// slots and users.
    #[arg(long)]
    #[arg(help_heading = "Requests")]
    pub max_concurrency: Option<u32>,
    /// Size the filler for the target's tokenizer, measured before the run (`POST /tokenize`, else
    /// `usage.prompt_tokens` of 12 probe requests): auto = measure and scale, unscaled when neither answers;
    /// on = refuse the run when neither answers; off = the seed's word counts unscaled (docs/replay.md).
    #[arg(long, value_enum, default_value_t = MatchTokenizer::Auto)]
    #[arg(help_heading = "Requests")]
    pub match_tokenizer: MatchTokenizer,
    /// TTFT target for goodput, ms (default: the scenario's, else 500).
    #[arg(long)]
    #[arg(help_heading = "Scoring and server metrics")]
    pub ttft_slo_ms: Option<f64>,
    /// TPOT target for goodput, ms (default: the scenario's, else 35).
    #[arg(long)]
    #[arg(help_heading = "Scoring and server metrics")]
    pub tpot_slo_ms: Option<f64>,
    /// Prometheus endpoint to scrape (default: the URL's origin + /metrics); "none" to skip. With several --url,
    /// every replica is scraped at its own origin's /metrics by default; give --metrics-url once per --url (in
    /// the same order) to name them, or "none" once to scrape none.
    #[arg(long)]
    #[arg(help_heading = "Scoring and server metrics")]
    pub metrics_url: Vec<String>,
    /// Seconds between scrapes during the run.
    #[arg(long, default_value_t = defaults::SCRAPE_INTERVAL_S)]
    #[arg(help_heading = "Scoring and server metrics")]
    pub scrape_interval: f64,
    /// With several --url: how requests are spread (round_robin, least_outstanding, session_affinity,
    /// prefix_aware), as the simulator's fleets; default: the scenario's fleet.router, else round_robin.
    #[arg(long, value_parser = parse_router)]
    #[arg(help_heading = "Fleets (--url given more than once)")]
    pub router: Option<shared::engine::Router>,
    /// With several --url and prefix_aware: the most in flight the cache-best replica may have, as a factor over
    /// the mean (default: the scenario's fleet.load_cap, else 1.5).
    #[arg(long)]
    #[arg(help_heading = "Fleets (--url given more than once)")]
    pub load_cap: Option<f64>,
    /// With several --url and prefix_aware: the tokens per replica the client's own view of what it sent keeps
    /// (default: the scenario profile's KV cache, num_kv_blocks x block_size, else llama-3-8b-1xh100's).
    #[arg(long)]
    #[arg(help_heading = "Fleets (--url given more than once)")]
    pub router_cache_tokens: Option<u64>,
    /// Append to --out instead of replacing it (the seed always appended).
    #[arg(long)]
    #[arg(help_heading = "Records and scale-out")]
    pub append: bool,
    /// Content nonce: pin it to reproduce a run's exact text (default: differs every run, even with --seed).
    #[arg(long)]
    #[arg(help_heading = "Records and scale-out")]
    pub nonce: Option<u64>,
    /// Run shard I of N of the plan: session slots, open-loop requests or closed-loop users `u` with
    /// `u mod N == I`, each under its global number, so the N shards together send the single plan (docs/scale.md).
    /// `N` (or `/N`) alone takes I from $JOB_COMPLETION_INDEX, as a Kubernetes Indexed Job sets it. The records go
    /// to `<out stem>.shard-I-of-N.<ext>`.
    #[arg(long, value_name = "I/N")]
    #[arg(help_heading = "Records and scale-out")]
    pub shard: Option<String>,
    /// Start the traffic at this wall-clock time, Unix seconds (give every shard the same): the run connects and
    /// warms up, waits for it, and takes it as its origin (`t_submit` 0). A shard more than 5 s late refuses to run.
    #[arg(long, value_name = "UNIX_TIME")]
    #[arg(help_heading = "Records and scale-out")]
    pub start_at: Option<f64>,
    /// Runtime threads that drive the streams: 1 = one thread (cheapest per token), N = a pool of N,
    /// 0 = the process's shared runtime.
    #[arg(long, default_value_t = defaults::THREADS)]
    #[arg(help_heading = "Records and scale-out")]
    pub threads: usize,
    /// HTTP client for the streams: hyper (HTTP/1.1 connection API, one connection per stream, kernel receive
    /// times; http:// and https://), reqwest (pooled, user-space times), or auto = hyper.
    #[arg(long, value_enum, default_value_t = HttpClient::Auto)]
    #[arg(help_heading = "Records and scale-out")]
    pub http_client: HttpClient,
    /// Which clock times the frames on the hyper path: kernel = when the bytes reached this machine (the socket's
    /// receive timestamp; Linux, else user), user = when the client's task read them. reqwest's path is always user.
    #[arg(long, value_enum, default_value_t = RxClock::Kernel)]
    #[arg(help_heading = "Records and scale-out")]
    pub rx_clock: RxClock,
}

fn check_positive(name: &str, v: f64) -> anyhow::Result<()> {
    anyhow::ensure!(v.is_finite() && v > 0.0, "--{name} must be > 0 (got {v})");
    Ok(())
}

fn check_nonneg(name: &str, v: f64) -> anyhow::Result<()> {
    anyhow::ensure!(v.is_finite() && v >= 0.0, "--{name} must be >= 0 (got {v})");
    Ok(())
}

/// The session workload the flags describe (the seed's semantics, with its `--prod-ladder` bug fixed).
pub fn session_workload(a: &Args, warn: &dyn Fn(&str)) -> anyhow::Result<SessionWorkload> {
    let mut ladder_text = a.ladder.trim().to_string();
    if a.prod_ladder && ladder_text.is_empty() {
        ladder_text = LADDER_PROD.to_string();
    }
    let ladder: Option<Ladder> = if ladder_text.is_empty() {
        None
    } else {
        Some(
            ladder_text
                .parse()
                .map_err(|e| anyhow::anyhow!("--ladder {ladder_text:?}: {e}"))?,
        )
    };
    let tool = match (a.tool, a.prod_ladder) {
        (Some(t), true) if t != PROD_LADDER_TOOL_TOKENS => {
            warn(&format!(
                "note: --prod-ladder was solved for --tool {PROD_LADDER_TOOL_TOKENS}; with --tool {t} its median/p90 will not match"
            ));
            t
        }
        (Some(t), _) => t,
        (None, true) => PROD_LADDER_TOOL_TOKENS,
        (None, false) => 900,
    };
    check_nonneg("think", a.think)?;
    check_nonneg("stagger", a.stagger)?;
    check_nonneg("drain-grace", a.drain_grace)?;
    let w = SessionWorkload {
        sessions: a.sessions,
        steps: a.steps,
        base_tokens: a.base,
        gen_tokens: a.gen_tokens,
        tool_tokens: tool,
        think_s: a.think,
        dist: match a.dist {
            DistArg::Lognormal => SessionDist::Lognormal,
            DistArg::Uniform => SessionDist::Uniform,
        },
        spread: a.spread,
        ladder,
        respawn: a.respawn,
        stagger_s: a.stagger,
        duration_s: a.max_seconds.unwrap_or(defaults::MAX_SECONDS),
        drain: a.drain,
        drain_grace_s: a.drain_grace,
        ..SessionWorkload::default()
    };
    w.validate_at("replay").map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(w)
}

impl Args {
    /// The run these flags describe, resolved and checked (nothing is sent yet). `warn` hears notes about
    /// flags that are accepted but odd.
    pub fn settings(&self, warn: &dyn Fn(&str)) -> anyhow::Result<ReplaySettings> {
        let a = self;
        check_positive("timeout", a.timeout)?;
        check_nonneg("stall-timeout", a.stall_timeout)?;
        check_positive("scrape-interval", a.scrape_interval)?;
        if let Some(m) = a.max_seconds {
            check_positive("max-seconds", m)?;
        }
        let ca_certs = match &a.ca_cert {
            Some(path) => crate::replay::tls::load_ca_certs(path)?,
            None => Vec::new(),
        };
        let target = TargetSettings {
            url: a.url.first().cloned().context("--url is required")?,
            model: a.model.clone(),
            dialect: a.dialect,
            api_key: a.api_key.clone(),
            ca_certs,
        };
        // A scenario's own fleet and KV cache: the defaults of a run over several URLs.
        let mut scenario_fleet: Option<(shared::engine::FleetSpec, u64)> = None;
        let mut scenario_kv: Option<u64> = None;
        let mut s = match &a.scenario {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the scenario {}", path.display()))?;
                let mut scenario =
                    Scenario::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                crate::tracefile::load_traces(&mut scenario, Some(path))
                    .with_context(|| format!("{}", path.display()))?;
                if let Scenario::Engine(e) = &scenario {
                    let kv = e.profile.num_kv_blocks.saturating_mul(u64::from(e.profile.block_size));
                    scenario_kv = Some(kv);
                    scenario_fleet = e.fleet.clone().map(|f| (f, kv));
                }
                let opts = ScenarioOptions {
                    seed: a.seed,
                    max_seconds: a.max_seconds,
                };
                ReplaySettings::for_scenario(target, a.out.clone(), &scenario, &path.display().to_string(), opts)?
            }
            None => {
                let w = session_workload(a, warn)?;
                let seed = a.seed.unwrap_or_else(settings::clock_seed);
                let shape = match &w.ladder {
                    Some(l) => format!("ladder {l}"),
                    None => format!(
                        "{} sessions x {} steps, base {}, {:?} spread {}",
                        w.sessions, w.steps, w.base_tokens, w.dist, w.spread
                    ),
                };
                let shape = format!(
                    "{shape}, gen ~{}, tool {}, think ~{}s, stagger {}s",
                    w.gen_tokens, w.tool_tokens, w.think_s, w.stagger_s
                );
                let max_s = seconds("--max-seconds", a.max_seconds.unwrap_or(defaults::MAX_SECONDS))?;
                ReplaySettings::new(target, a.out.clone(), Traffic::Sessions(w), shape, seed, Some(max_s))?
            }
        };
        s.fleet = live_fleet(a, scenario_fleet.map(|(f, _)| f), scenario_kv, warn)?;
        if let Some(t) = a.ttft_slo_ms {
            s.slo.ttft_ms = t;
        }
        if let Some(t) = a.tpot_slo_ms {
            s.slo.tpot_ms = t;
        }
        s.slo.validate().map_err(|e| anyhow::anyhow!("SLO: {e}"))?;
        if let Some(n) = a.nonce {
            s.nonce = n;
        }
        s.append = a.append;
        s.endpoint = a.endpoint;
        s.tool_results = a.tool_results;
        s.temperature = a.temp;
        s.timeout = seconds("--timeout", a.timeout)?;
        s.stall_timeout = (a.stall_timeout > 0.0)
            .then(|| seconds("--stall-timeout", a.stall_timeout))
            .transpose()?;
        s.max_retries = a.max_retries;
        if a.max_concurrency == Some(0) {
            anyhow::bail!("--max-concurrency must be at least 1 (got 0)");
        }
        s.max_concurrency = a.max_concurrency;
        s.match_tokenizer = a.match_tokenizer;
        s.http_client = a.http_client;
        s.rx_clock = a.rx_clock;
        s.drain = a.drain;
        s.drain_grace = seconds("--drain-grace", a.drain_grace)?;
        s.max_fail_streak = a.max_fail_streak;
        match a.metrics_url.as_slice() {
            [] => {}
            [none] if none == "none" => s.metrics_url = None,
            [u] if a.url.len() < 2 => s.metrics_url = Some(u.clone()),
            many => anyhow::ensure!(
                many.len() == a.url.len() && a.url.len() >= 2 && !many.iter().any(|u| u == "none"),
                "--metrics-url is given {} times for {} --url: give it once per --url (in the same order), or \"none\" once",
                many.len(),
                a.url.len()
            ),
        }
        // A fleet scrapes every replica: the given URLs, else each URL's origin + /metrics (none: none).
        if let Some(f) = &mut s.fleet {
            f.metrics_urls = match (s.metrics_url.is_some(), a.metrics_url.len() == a.url.len()) {
                (false, _) => Vec::new(),
                (true, true) => a.metrics_url.clone(),
                (true, false) => crate::replay::fleet::default_metrics_urls(&f.urls)?,
            };
            s.metrics_url = f.metrics_urls.first().cloned();
        }
        s.scrape_interval = seconds("--scrape-interval", a.scrape_interval)?;
        s.threads = a.threads;
        s.progress = !a.quiet;
        s.verbose = a.verbose;
        if let Some(t) = a.start_at {
            let now = settings::unix_now_s();
            anyhow::ensure!(
                t.is_finite() && t > 0.0,
                "--start-at must be a Unix time in seconds (got {t})"
            );
            anyhow::ensure!(
                t - now <= MAX_START_AHEAD_S,
                "--start-at {t} is {:.0} s from now, more than a day: is it in milliseconds? (it takes seconds)",
                t - now
            );
            s.start_at_unix_s = Some(t);
        }
        let shard = resolve_shard(
            a.shard.as_deref(),
            std::env::var("JOB_COMPLETION_INDEX").ok().as_deref(),
        )?;
        if !shard.is_whole() {
            s.traffic
                .check_shard(shard)
                .map_err(|e| anyhow::anyhow!("--shard {shard}: {e}"))?;
            // Every shard must plan with the same seed and write with the same nonce: pinned, the scenario's, or
            // derived from the common --start-at.
            let start = a.start_at.map(|t| t.floor() as u64);
            if a.scenario.is_none() && a.seed.is_none() {
                s.seed = start.context(
                    "--shard needs the same structure seed in every shard: give --seed, or --start-at (the seed is then derived from it)",
                )?;
            }
            if a.nonce.is_none() {
                s.nonce = start.map(Shard::nonce_for_start).context(
                    "--shard needs the same content nonce in every shard: give --nonce, or --start-at (the nonce is then derived from it)",
                )?;
            }
            s.out = shard_out(&s.out, shard);
            s.shape = format!("{}, shard {shard}", s.shape);
        }
        s.shard = shard;
        Ok(s)
    }
}

/// `--router NAME`: one of the simulator's routers, by its scenario name.
fn parse_router(name: &str) -> Result<shared::engine::Router, String> {
    use shared::engine::Router;
    Router::ALL.into_iter().find(|r| r.name() == name).ok_or_else(|| {
        let names: Vec<&str> = Router::ALL.iter().map(|r| r.name()).collect();
        format!("--router must be one of {} (got {name:?})", names.join(", "))
    })
}

/// The fleet several `--url`s make (`None` for one URL: every request to it, as always), its router from
/// `--router`, else the scenario's `fleet.router`, else round robin.
fn live_fleet(
    a: &Args,
    scenario: Option<shared::engine::FleetSpec>,
    scenario_kv_tokens: Option<u64>,
    warn: &dyn Fn(&str),
) -> anyhow::Result<Option<LiveFleet>> {
    use shared::engine::{FleetSpec, Router};
    if a.url.len() < 2 {
        for (given, flag) in [
            (a.router.is_some(), "--router"),
            (a.load_cap.is_some(), "--load-cap"),
            (a.router_cache_tokens.is_some(), "--router-cache-tokens"),
        ] {
            anyhow::ensure!(
                !given,
                "{flag} spreads requests over several targets: give --url two or more times (got one --url)"
            );
        }
        return Ok(None);
    }
    for (i, u) in a.url.iter().enumerate() {
        client::origin_of(u).with_context(|| format!("--url {u:?}"))?;
        anyhow::ensure!(
            !a.url[..i].contains(u),
            "--url {u} is given twice: each replica is one URL"
        );
    }
    let router = a
        .router
        .unwrap_or_else(|| scenario.as_ref().map_or(Router::RoundRobin, |f| f.router));
    if let Some(f) = &scenario
        && f.replicas as usize != a.url.len()
    {
        warn(&format!(
            "note: the scenario's fleet has {} replicas; this run spreads over the {} --url given",
            f.replicas,
            a.url.len()
        ));
    }
    let spec = FleetSpec {
        replicas: a.url.len() as u32,
        router,
        load_cap: a.load_cap.or(scenario.as_ref().map(|f| f.load_cap)).unwrap_or(1.5),
        profiles: Vec::new(),
    };
    spec.validate().map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string()
                .replace("replicas", "--url (replicas)")
                .replace("load_cap", "--load-cap")
        )
    })?;
    let cache_tokens = a.router_cache_tokens.or(scenario_kv_tokens).unwrap_or_else(|| {
        let p = shared::engine::presets::llama3_8b_h100();
        p.num_kv_blocks.saturating_mul(u64::from(p.block_size))
    });
    anyhow::ensure!(cache_tokens > 0, "--router-cache-tokens must be at least 1 (got 0)");
    Ok(Some(LiveFleet {
        urls: a.url.clone(),
        spec,
        cache_tokens,
        // Set with the other scrape settings (`--metrics-url`).
        metrics_urls: Vec::new(),
    }))
}

/// The most `--start-at` may lie ahead, seconds (a larger value is likely milliseconds).
const MAX_START_AHEAD_S: f64 = 86_400.0;

/// The shard `--shard` names, its index from `job_index` (`$JOB_COMPLETION_INDEX`) when the flag gives only a
/// count; [`Shard::WHOLE`] without the flag.
pub fn resolve_shard(flag: Option<&str>, job_index: Option<&str>) -> anyhow::Result<Shard> {
    let Some(text) = flag else {
        return Ok(Shard::WHOLE);
    };
    let (index, count) = Shard::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let index = match index {
        Some(i) => i,
        None => {
            let env = job_index.with_context(|| {
                format!("--shard {text} gives no index and JOB_COMPLETION_INDEX is not set (give --shard I/{count})")
            })?;
            env.trim().parse::<u32>().map_err(|_| {
                anyhow::anyhow!("JOB_COMPLETION_INDEX must be a whole number 0 <= I < {count} (got {env:?})")
            })?
        }
    };
    Shard::new(index, count).map_err(|e| anyhow::anyhow!("--shard {text}: {e}"))
}

/// A shard's record file: `run.jsonl` → `run.shard-3-of-8.jsonl` (its sidecars follow it).
pub fn shard_out(out: &std::path::Path, shard: Shard) -> PathBuf {
    let tag = format!("shard-{}-of-{}", shard.index, shard.count);
    let name = match (out.file_stem(), out.extension()) {
        (Some(stem), Some(ext)) => format!("{}.{tag}.{}", stem.to_string_lossy(), ext.to_string_lossy()),
        _ => format!(
            "{}.{tag}",
            out.file_name().map_or("run".into(), |n| n.to_string_lossy())
        ),
    };
    out.with_file_name(name)
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    let settings = a.settings(&|m: &str| eprintln!("{m}"))?;
    let signals = Signals::new()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let forward = tokio::spawn(async move {
        let mut signals = signals;
        loop {
            let sig = signals.recv().await;
            if tx.send(sig).is_err() {
                return;
            }
        }
    });
    let hooks = Hooks {
        interrupts: Some(rx),
        ..Hooks::default()
    };
    let outcome = replay::run(settings, hooks).await;
    forward.abort();
    let outcome = outcome?;
    let summary = &outcome.summary;
    println!(
        "{}",
        render(
            &outcome.records,
            &summary.summary,
            &summary.slo,
            summary.server.as_ref(),
            &outcome
                .server
                .as_ref()
                .map(crate::replay::summary::ServerScrape::replica_reports)
                .unwrap_or_default()
        )
    );
    eprintln!(
        "loadshape replay: {:.0} s wall, {} requests started, {} records in {}",
        summary.wall_s,
        summary.requests_started,
        summary.records_written,
        outcome.out.display()
    );
    Ok(match outcome.verdict() {
        Verdict::Aborted => {
            eprintln!("loadshape replay: ABORTED -- the server stopped answering; this run did not measure anything");
            ExitCode::from(2)
        }
        Verdict::NothingCompleted => {
            eprintln!("loadshape replay: no request completed; this run did not measure anything");
            ExitCode::from(2)
        }
        Verdict::Measured => match outcome.interrupted {
            Some(i) => ExitCode::from(i.exit_code),
            None => ExitCode::SUCCESS,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::*;

    fn settings_of(flags: &[&str]) -> anyhow::Result<ReplaySettings> {
        let argv = [
            "loadshape",
            "replay",
            "--url",
            "http://127.0.0.1:9/v1",
            "--out",
            "run.jsonl",
        ];
        let cli = crate::Cli::try_parse_from(argv.iter().chain(flags)).map_err(|e| anyhow::anyhow!("{e}"))?;
        let crate::Command::Replay(a) = cli.command else {
            anyhow::bail!("not a replay command line");
        };
        a.settings(&|_: &str| {})
    }

    #[test]
    fn a_fleet_scrapes_every_replica_unless_told_otherwise() {
        let two = ["--url", "http://127.0.0.1:10/v1"];
        let s = settings_of(&two).unwrap_or_else(|e| panic!("{e:#}"));
        let f = s.fleet.as_ref().unwrap_or_else(|| panic!("a fleet"));
        assert_eq!(
            f.metrics_urls,
            ["http://127.0.0.1:9/metrics", "http://127.0.0.1:10/metrics"]
        );
        assert_eq!(s.metrics_url.as_deref(), Some("http://127.0.0.1:9/metrics"));
        let s = settings_of(&[two[0], two[1], "--metrics-url", "none"]).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(s.metrics_url.is_none() && s.fleet.as_ref().is_some_and(|f| f.metrics_urls.is_empty()));
        let named = [
            two[0],
            two[1],
            "--metrics-url",
            "http://127.0.0.1:19/m",
            "--metrics-url",
            "http://127.0.0.1:20/m",
        ];
        let s = settings_of(&named).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(
            s.fleet.map(|f| f.metrics_urls).unwrap_or_default(),
            ["http://127.0.0.1:19/m", "http://127.0.0.1:20/m"]
        );
        assert_eq!(s.metrics_url.as_deref(), Some("http://127.0.0.1:19/m"));
        for bad in [
            &["--metrics-url", "http://127.0.0.1:19/m"][..],
            &["--metrics-url", "none", "--metrics-url", "none"][..],
        ] {
            let mut flags = two.to_vec();
            flags.extend_from_slice(bad);
            let e = format!("{:#}", settings_of(&flags).unwrap_err());
            assert!(e.contains("--metrics-url is given"), "{e}");
        }
        // One URL: one --metrics-url, as always; two are refused.
        let e = format!(
            "{:#}",
            settings_of(&["--metrics-url", "http://a/m", "--metrics-url", "http://b/m"]).unwrap_err()
        );
        assert!(e.contains("--metrics-url is given 2 times for 1 --url"), "{e}");
    }

    #[test]
    fn flags_resolve_to_settings_with_the_library_defaults() {
        let s = settings_of(&[]).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(matches!(&s.traffic, Traffic::Sessions(w) if w.sessions == 6 && w.steps == 12 && w.tool_tokens == 900));
        assert_eq!(s.max_duration, Some(Duration::from_secs(900)));
        assert_eq!(s.timeout, Duration::from_secs_f64(defaults::TIMEOUT_S));
        assert_eq!(
            s.stall_timeout,
            Some(Duration::from_secs_f64(defaults::STALL_TIMEOUT_S))
        );
        assert_eq!(s.metrics_url.as_deref(), Some("http://127.0.0.1:9/metrics"));
        assert_eq!((s.threads, s.progress, s.write_summary), (1, true, true));
        assert_eq!(s.target.model, None);
        assert_eq!(s.target.dialect, Dialect::Auto);

        let s = settings_of(&[
            "--metrics-url",
            "none",
            "--stall-timeout",
            "0",
            "--quiet",
            "--nonce",
            "5",
            "--seed",
            "7",
            "--max-seconds",
            "3",
            "--ttft-slo-ms",
            "800",
            "--prod-ladder",
        ])
        .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!((s.metrics_url, s.stall_timeout, s.progress), (None, None, false));
        assert_eq!((s.nonce, s.seed, s.slo.ttft_ms), (5, 7, 800.0));
        assert_eq!(s.max_duration, Some(Duration::from_secs(3)));
        assert!(matches!(&s.traffic, Traffic::Sessions(w) if w.ladder.is_some() && w.tool_tokens == 2020));
    }

    #[test]
    fn a_scenario_file_resolves_to_its_planned_traffic() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/engine-10k.json");
        let s =
            settings_of(&["--scenario", path, "--max-seconds", "3", "--seed", "7"]).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(matches!(&s.traffic, Traffic::Open(reqs) if reqs.len() == 10_000));
        assert_eq!(s.max_duration, Some(Duration::from_secs(3)));
        assert_eq!(s.seed, 7);
        assert_eq!(s.shape, format!("scenario {path} (poisson)"));
    }

    #[test]
    fn help_opens_with_examples_and_the_essential_flags() {
        use clap::CommandFactory as _;
        let mut cli = crate::Cli::command();
        let replay = cli
            .find_subcommand_mut("replay")
            .unwrap_or_else(|| panic!("a replay subcommand"));
        let help = replay.render_long_help().to_string();
        let at = |what: &str| help.find(what).unwrap_or_else(|| panic!("{what:?} in:\n{help}"));
        assert!(at("Examples:") < at("Usage:"), "{help}");
        assert!(at("loadshape replay --url") < at("Usage:"), "{help}");
        // The essential flags, in this order, before any group.
        let essential = ["--url", "--model", "--scenario", "--out", "--max-seconds", "--seed"];
        let options = at("\nOptions:");
        let mut last = options;
        for flag in essential {
            let i = at(&format!("      {flag} <"));
            assert!(i > last, "{flag} after the one before it:\n{help}");
            last = i;
        }
        // The rest grouped, each group after the essential flags; every flag still listed once.
        let groups = [
            "Sessions (without --scenario):",
            "Requests:",
            "Scoring and server metrics:",
            "Fleets (--url given more than once):",
            "Records and scale-out:",
        ];
        for g in groups {
            assert!(at(g) > last, "{g}:\n{help}");
        }
        assert!(at("--router <") > at("Fleets (--url given more than once):"), "{help}");
        assert!(at("--shard <") > at("Records and scale-out:"), "{help}");
        for arg in replay.get_arguments() {
            if let Some(long) = arg.get_long() {
                let n = help.matches(&format!("--{long} ")).count() + help.matches(&format!("--{long}\n")).count();
                assert!(n >= 1, "--{long} is listed:\n{help}");
            }
        }
    }

    #[test]
    fn the_progress_line_knows_the_planned_requests() {
        // A ladder fixes each slot's steps: 3 + 5 + 2, one session per slot without --respawn.
        let s = settings_of(&["--ladder", "1000:3,2000:5,1500:2", "--seed", "1"]).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(s.traffic.planned_requests(s.seed, s.shard), Some(10));
        let half = Shard::new(1, 2).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.traffic.planned_requests(s.seed, half), Some(5), "slot 1 alone");
        // Respawning sessions run until the clock stops them: no count.
        let s = settings_of(&["--ladder", "1000:3", "--respawn"]).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(s.traffic.planned_requests(s.seed, s.shard), None);
        // A scenario's open-loop plan: every request, or a shard's share.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/engine-10k.json");
        let s = settings_of(&["--scenario", path, "--seed", "7"]).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(s.traffic.planned_requests(s.seed, s.shard), Some(10_000));
        let third = Shard::new(0, 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.traffic.planned_requests(s.seed, third), Some(3334));
    }

    #[test]
    fn bad_flags_are_named() {
        let e = format!("{:#}", settings_of(&["--timeout", "0"]).unwrap_err());
        assert!(e.contains("--timeout must be > 0 (got 0)"), "{e}");
        let e = format!("{:#}", settings_of(&["--drain-grace=-1"]).unwrap_err());
        assert!(e.contains("--drain-grace must be >= 0 (got -1)"), "{e}");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/engine-10k.json");
        let e = format!(
            "{:#}",
            settings_of(&["--scenario", path, "--drain-grace=-1"]).unwrap_err()
        );
        assert!(e.contains("--drain-grace"), "{e}");
    }
}
