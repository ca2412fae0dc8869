//! `loadshape replay`: replay agent sessions (or a scenario's open/closed-loop traffic) against an
//! OpenAI-compatible server, write one JSONL record per request, scrape the server's `/metrics`, and print the
//! summary computed by `shared::metrics` (the simulator's scoring module).
//!
//! Run with e.g. `loadshape replay --url http://127.0.0.1:8000/v1 --model m --out run.jsonl --prod-ladder --respawn
//! --drain`. The session flags keep the names and meanings of the seed's `agent_replay.py`; see `docs/replay.md`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::json;
use shared::ladder::{LADDER_PROD, Ladder};
use shared::metrics::{self, Slo};
use shared::scenario::Scenario;
use shared::workload::{RequestStream, SessionDist, SessionWorkload, Workload};

use crate::replay::client::{self, Client, ClientConfig, Endpoint, HttpClient, LiveCounters};
use crate::replay::dialect::Dialect;
use crate::replay::progress::Progress;
use crate::replay::prom::{Scraper, ServerReport};
use crate::replay::records::RecordSink;
use crate::replay::runner::{self, Ctx, PlannedRequest, PromptMaker, SessionRun, Stops};
use crate::replay::rxstamp::RxClock;

/// The tool-output size `LADDER_PROD` was solved for (G = 700 + 2,020 ≈ 2,703 tokens per step).
pub const PROD_LADDER_TOOL_TOKENS: u32 = 2020;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DistArg {
    Lognormal,
    Uniform,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// OpenAI base URL including the API prefix, e.g. http://127.0.0.1:8000/v1.
    #[arg(long)]
    pub url: String,
    /// Model name to send (default: the first id on /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// JSONL record file, one line per request, written as each request ends.
    #[arg(long)]
    pub out: PathBuf,
    /// Append to --out instead of replacing it (the seed always appended).
    #[arg(long)]
    pub append: bool,
    /// Concurrent session slots (a ladder's length wins).
    #[arg(long, default_value_t = 6)]
    pub sessions: u32,
    /// Mean steps per session.
    #[arg(long, default_value_t = 12)]
    pub steps: u32,
    /// Mean starting context per session, tokens.
    #[arg(long, default_value_t = 22000)]
    pub base: u64,
    /// Mean forced generation length per step, tokens.
    #[arg(long = "gen", default_value_t = 700)]
    pub gen_tokens: u32,
    /// Synthetic tool output appended per step, tokens (default 900; 2020 with --prod-ladder).
    #[arg(long)]
    pub tool: Option<u32>,
    /// Mean seconds between a session's steps.
    #[arg(long, default_value_t = 6.0)]
    pub think: f64,
    /// Shape of the per-session draw.
    #[arg(long, value_enum, default_value_t = DistArg::Lognormal)]
    pub dist: DistArg,
    /// Per-session variation in base size and step count, as a fraction.
    #[arg(long, default_value_t = 0.5)]
    pub spread: f64,
    /// Fixed session shapes 'base:steps,base:steps,...'; overrides --sessions/--steps/--base/--dist/--spread.
    #[arg(long, default_value = "")]
    pub ladder: String,
    /// Use the solved production ladder (and the --tool 2020 it was solved for).
    #[arg(long)]
    pub prod_ladder: bool,
    /// Consecutive no-progress sessions on one slot before the whole run aborts (exit 2).
    #[arg(long, default_value_t = 3)]
    pub max_fail_streak: u32,
    /// At --max-seconds, stop STARTING sessions and let in-flight ones finish.
    #[arg(long)]
    pub drain: bool,
    /// Hard cap on the drain (and on waiting for in-flight requests without --drain), seconds.
    #[arg(long, default_value_t = 420.0)]
    pub drain_grace: f64,
    /// Restart a session slot when it finishes.
    #[arg(long)]
    pub respawn: bool,
    /// Seconds between session starts.
    #[arg(long, default_value_t = 4.0)]
    pub stagger: f64,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.6)]
    pub temp: f64,
    /// Per-request timeout, seconds.
    #[arg(long, default_value_t = 1800.0)]
    pub timeout: f64,
    /// Longest gap allowed between two frames of a stream (and before the first), seconds; 0 = no limit.
    #[arg(long, default_value_t = 300.0)]
    pub stall_timeout: f64,
    /// Structure seed: session shapes and filler word choice (default: the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Content nonce: pin it to reproduce a run's exact text (default: differs every run, even with --seed).
    #[arg(long)]
    pub nonce: Option<u64>,
    /// Run length, seconds: no new session starts after it (default 900; a scenario's own duration otherwise).
    #[arg(long)]
    pub max_seconds: Option<f64>,
    /// Run a scenario file's workload live instead of the session flags (bursty, poisson, gamma, closed loop,
    /// sessions), with the same workload code the simulator uses.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Which route carries the prompt.
    #[arg(long, value_enum, default_value_t = Endpoint::Completions)]
    pub endpoint: Endpoint,
    /// How to force the output length; auto asks the server.
    #[arg(long, value_enum, default_value_t = Dialect::Auto)]
    pub dialect: Dialect,
    /// Bearer token for the server.
    #[arg(long, env = "LOADSHAPE_API_KEY")]
    pub api_key: Option<String>,
    /// Prometheus endpoint to scrape (default: the URL's origin + /metrics); "none" to skip.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Seconds between scrapes during the run.
    #[arg(long, default_value_t = 5.0)]
    pub scrape_interval: f64,
    /// TTFT target for goodput, ms (default: the scenario's, else 500).
    #[arg(long)]
    pub ttft_slo_ms: Option<f64>,
    /// TPOT target for goodput, ms (default: the scenario's, else 35).
    #[arg(long)]
    pub tpot_slo_ms: Option<f64>,
    /// Runtime threads that drive the streams: 1 = one thread (cheapest per token), N = a pool of N,
    /// 0 = the process's shared runtime.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// HTTP client for the streams: hyper (HTTP/1.1 connection API, one connection per stream, kernel receive
    /// times; http:// and https://), reqwest (pooled, user-space times), or auto = hyper.
    #[arg(long, value_enum, default_value_t = HttpClient::Auto)]
    pub http_client: HttpClient,
    /// PEM file of CA certificates to trust for https:// (beside the system's), e.g. a private CA. Certificates
    /// are always verified.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Which clock times the frames on the hyper path: kernel = when the bytes reached this machine (the socket's
    /// receive timestamp; Linux, else user), user = when the client's task read them. reqwest's path is always user.
    #[arg(long, value_enum, default_value_t = RxClock::Kernel)]
    pub rx_clock: RxClock,
    /// No progress display.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print a line per step, as the seed does.
    #[arg(long, short)]
    pub verbose: bool,
    /// Set by an embedding program (`loadshape serve`), never on the command line.
    #[arg(skip)]
    pub hooks: Hooks,
}

/// How a program that embeds a replay (`loadshape serve`) watches and stops it.
#[derive(Clone, Default)]
pub struct Hooks {
    /// Called with each record right after its line is written.
    pub on_record: Option<crate::replay::records::RecordObserver>,
    /// Turning true acts like a first SIGINT: stop starting work, cut in-flight requests (records are kept).
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("on_record", &self.on_record.is_some())
            .field("stop", &self.stop)
            .finish()
    }
}

/// Waits until `stop` turns true; never resolves without a receiver (or after its sender is gone).
async fn stop_requested(stop: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match stop {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// What the run sends, resolved from flags or a scenario.
enum Traffic {
    Sessions(SessionRun),
    Open(Vec<PlannedRequest>),
    Closed {
        requests: Vec<PlannedRequest>,
        users: u32,
        think_s: f64,
    },
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
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
        duration_s: a.max_seconds.unwrap_or(900.0),
        drain: a.drain,
        drain_grace_s: a.drain_grace,
        ..SessionWorkload::default()
    };
    w.validate_at("replay").map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(w)
}

/// Requests of an open-loop or closed-loop workload.
fn planned(w: &Workload, seed: u64) -> Vec<PlannedRequest> {
    let conv = |g: shared::workload::GenRequest| PlannedRequest {
        arrival_ms: g.arrival_ms,
        shared_prefix_tokens: g.shared_prefix_tokens,
        unique_prompt_tokens: g.unique_prompt_tokens,
        output_tokens: g.output_tokens,
    };
    match w {
        Workload::Bursty(b) => shared::seed_model::build_agent_trace(b)
            .into_iter()
            .map(|t| PlannedRequest {
                arrival_ms: t.arrival_ms,
                shared_prefix_tokens: t.shared_prefix_tokens,
                unique_prompt_tokens: t.unique_prompt_tokens,
                output_tokens: t.output_tokens,
            })
            .collect(),
        Workload::Poisson(p) => RequestStream::poisson(p, seed).map(conv).collect(),
        Workload::Gamma(g) => RequestStream::gamma(g, seed).map(conv).collect(),
        Workload::ClosedLoop(c) => RequestStream::closed(c, seed).map(conv).collect(),
        Workload::Sessions(_) => Vec::new(),
    }
}

/// Traffic, seed, SLO and run length from a scenario file.
fn from_scenario(path: &Path, a: &Args, nonce: u64) -> anyhow::Result<(Traffic, u64, Slo, f64, Workload)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the scenario {}", path.display()))?;
    let scenario = Scenario::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    #[allow(unreachable_patterns)]
    let (workload, seed, slo, closed_seed) = match &scenario {
        Scenario::Seed(s) => {
            let shared::seed_model::SeedWorkload::Bursty(b) = &s.workload;
            (Workload::Bursty(b.clone()), a.seed.unwrap_or(0), s.slo, s.closed_loop)
        }
        Scenario::Engine(e) => (e.workload.clone(), a.seed.unwrap_or(e.seed), e.slo, false),
        _ => anyhow::bail!("{}: this scenario model cannot be replayed live", path.display()),
    };
    let traffic = match &workload {
        Workload::Sessions(w) => {
            let duration = a.max_seconds.map_or(w.duration_s, |m| m.min(w.duration_s));
            Traffic::Sessions(SessionRun {
                workload: w.clone(),
                seed,
                nonce,
                max_fail_streak: a.max_fail_streak,
                deadline: Instant::now() + Duration::from_secs_f64(duration),
            })
        }
        Workload::ClosedLoop(c) => Traffic::Closed {
            requests: planned(&workload, seed),
            users: c.users,
            think_s: c.think_s,
        },
        _ if closed_seed => Traffic::Closed {
            requests: planned(&workload, seed),
            users: 1,
            think_s: 0.0,
        },
        _ => Traffic::Open(planned(&workload, seed)),
    };
    let max_s = match &workload {
        Workload::Sessions(w) => w.duration_s,
        _ => f64::INFINITY,
    };
    let max_s = a.max_seconds.map_or(max_s, |m| m.min(max_s));
    Ok((traffic, seed, slo, max_s, workload))
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.threads == 0 {
        return run_here(a).await;
    }
    // A runtime of our own on dedicated threads: with one thread (the default) every stream is polled on one
    // core with no cross-thread wake-ups, the cheapest way to read many slow streams.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let threads = a.threads;
    std::thread::Builder::new()
        .name("loadshape-replay".into())
        .spawn(move || {
            let rt = if threads == 1 {
                tokio::runtime::Builder::new_current_thread().enable_all().build()
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .enable_all()
                    .build()
            };
            let result = match rt {
                Ok(rt) => rt.block_on(run_here(a)),
                Err(e) => Err(anyhow::anyhow!("building the replay runtime: {e}")),
            };
            let _ = tx.send(result);
        })
        .context("starting the replay thread")?;
    rx.await.context("the replay thread ended without a result")?
}

async fn run_here(a: Args) -> anyhow::Result<ExitCode> {
    let warn = |m: &str| eprintln!("{m}");
    check_positive("timeout", a.timeout)?;
    check_nonneg("stall-timeout", a.stall_timeout)?;
    check_positive("scrape-interval", a.scrape_interval)?;
    if let Some(m) = a.max_seconds {
        check_positive("max-seconds", m)?;
    }
    let nonce = a.nonce.unwrap_or_else(|| now_nanos() % 1_000_000_007);
    let ca_certs = match &a.ca_cert {
        Some(path) => crate::replay::tls::load_ca_certs(path)?,
        None => Vec::new(),
    };
    let http = client::http_client(&ca_certs)?;
    let origin_url = client::origin_of(&a.url)?;

    // Model and dialect: ask the server when not told.
    let model = match &a.model {
        Some(m) => m.clone(),
        None => first_model(&http, &a.url, a.api_key.as_deref())
            .await
            .context("--model not given and /v1/models did not name one")?,
    };
    let (dialect, why) = match a.dialect {
        Dialect::Auto => client::detect_dialect(&http, &a.url, a.api_key.as_deref()).await?,
        d => (d, "--dialect".to_string()),
    };

    let run_origin = Instant::now();
    let (traffic, seed, mut slo, max_seconds, shape) = match &a.scenario {
        Some(path) => {
            let (t, seed, slo, max_s, w) = from_scenario(path, &a, nonce)?;
            (
                t,
                seed,
                slo,
                max_s,
                format!("scenario {} ({})", path.display(), w.kind()),
            )
        }
        None => {
            let w = session_workload(&a, &warn)?;
            let seed = a.seed.unwrap_or_else(|| now_nanos() / 1_000_000_000);
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
            let max_s = a.max_seconds.unwrap_or(900.0);
            let run = SessionRun {
                deadline: run_origin + Duration::from_secs_f64(max_s),
                workload: w,
                seed,
                nonce,
                max_fail_streak: a.max_fail_streak,
            };
            (Traffic::Sessions(run), seed, Slo::default(), max_s, shape)
        }
    };
    if let Some(t) = a.ttft_slo_ms {
        slo.ttft_ms = t;
    }
    if let Some(t) = a.tpot_slo_ms {
        slo.tpot_ms = t;
    }
    slo.validate().map_err(|e| anyhow::anyhow!("SLO: {e}"))?;
    let http_client = a.http_client.resolve();
    eprintln!(
        "loadshape replay: {shape}; {} {} model {model}, dialect {dialect} ({why}), temp {}, seed {seed}, content nonce {nonce}, http client {http_client}{}",
        a.url,
        match a.endpoint {
            Endpoint::Completions => "/completions",
            Endpoint::Chat => "/chat/completions",
        },
        a.temp,
        if a.http_client == HttpClient::Auto {
            " (auto)"
        } else {
            ""
        },
    );
    if !dialect.forces_length() {
        eprintln!("note: dialect openai cannot force the output length; gen_tokens may fall short of asked_tokens");
    }

    let client = Client::new(
        http.clone(),
        ClientConfig {
            base_url: a.url.clone(),
            model: model.clone(),
            api_key: a.api_key.clone(),
            endpoint: a.endpoint,
            dialect,
            temperature: a.temp,
            timeout: Duration::from_secs_f64(a.timeout),
            stall_timeout: (a.stall_timeout > 0.0).then(|| Duration::from_secs_f64(a.stall_timeout)),
            http_client: a.http_client,
            rx_clock: a.rx_clock,
            ca_certs,
            max_retries: client::DEFAULT_MAX_RETRIES,
        },
    );
    // Open the connections the run will hold before its first request, so the first wave's TTFT is not inflated
    // by hundreds of simultaneous TCP connects (a client-side artefact, not server latency).
    let expected_streams = match &traffic {
        Traffic::Sessions(r) => r.workload.slot_count() as usize,
        Traffic::Closed { users, .. } => *users as usize,
        Traffic::Open(reqs) => reqs.len().min(64),
    };
    client.warm(expected_streams.min(2048)).await;
    // Records are written by a thread of their own (and kept there for the summary): the thread that reads the
    // streams only hands each one over.
    let sink = Arc::new(RecordSink::create(&a.out, a.append, true, a.hooks.on_record.clone())?);
    let mut external_stop = a.hooks.stop.clone();
    let live = Arc::new(LiveCounters::default());
    let progress = Progress::start(live.clone(), a.quiet);
    let stops = Stops::default();
    let ctx = Arc::new(Ctx {
        client,
        sink: sink.clone(),
        live: live.clone(),
        origin: run_origin,
        stops: stops.clone(),
        aborted: AtomicBool::new(false),
        log: progress.printer(),
        verbose: a.verbose,
        started: AtomicU64::new(0),
    });

    // Server side: scrape before, every few seconds during, and after.
    let metrics_url = match a.metrics_url.as_deref() {
        Some("none") => None,
        Some(u) => Some(u.to_string()),
        None => Some(format!("{origin_url}/metrics")),
    };
    let scraper = metrics_url.map(|u| Scraper::new(http.clone(), u, run_origin));
    let mut periodic = None;
    if let Some(s) = &scraper {
        let first = s.scrape().await;
        if let Some(e) = &first.error {
            eprintln!(
                "note: server metrics unavailable at {} ({e}); client-side numbers only",
                s.url()
            );
        }
        periodic = Some(s.spawn_periodic(Duration::from_secs_f64(a.scrape_interval)));
    }

    // The traffic, the deadline, the drain grace and the signals.
    let drain = match &traffic {
        Traffic::Sessions(r) => r.workload.drain,
        _ => a.drain,
    };
    let grace = Duration::from_secs_f64(match &traffic {
        Traffic::Sessions(r) => r.workload.drain_grace_s,
        _ => a.drain_grace,
    });
    let fail_limit = u64::from(a.max_fail_streak.max(1)) * 10;
    let c2 = ctx.clone();
    let mut task = tokio::spawn(async move {
        match traffic {
            Traffic::Sessions(run) => runner::run_sessions(c2, Arc::new(run)).await,
            Traffic::Open(reqs) => {
                let maker = Arc::new(prompt_maker(&reqs, seed, nonce));
                runner::run_open_loop(c2, reqs, maker, fail_limit).await;
            }
            Traffic::Closed {
                requests,
                users,
                think_s,
            } => {
                let maker = Arc::new(prompt_maker(&requests, seed, nonce));
                runner::run_closed_loop(c2, requests, maker, users, think_s, fail_limit).await;
            }
        }
    });
    let mut signals = Signals::new()?;
    let deadline = tokio::time::sleep(if max_seconds.is_finite() {
        Duration::from_secs_f64(max_seconds)
    } else {
        Duration::from_secs(u64::MAX / 4)
    });
    tokio::pin!(deadline);
    let mut deadline_hit = false;
    let mut grace_at: Option<tokio::time::Instant> = None;
    let mut interrupted: Option<(&'static str, u8)> = None;
    let log = progress.printer();
    loop {
        let grace_sleep = tokio::time::sleep_until(
            grace_at.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)),
        );
        tokio::select! {
            r = &mut task => {
                if let Err(e) = r {
                    log(&format!("traffic task failed: {e}"));
                }
                break;
            }
            () = &mut deadline, if !deadline_hit => {
                deadline_hit = true;
                if drain {
                    log(&format!("max-seconds reached, draining in-flight sessions (grace {:.0}s)", grace.as_secs_f64()));
                    stops.stop_sessions();
                } else {
                    log(&format!("max-seconds reached, stopping sessions (in-flight requests get {:.0}s)", grace.as_secs_f64()));
                    stops.stop_steps();
                }
                grace_at.get_or_insert(tokio::time::Instant::now() + grace);
            }
            () = stop_requested(&mut external_stop), if interrupted.is_none() => {
                interrupted = Some(("stop requested", 0));
                log("stop requested: in-flight requests are cut and recorded");
                stops.cut();
            }
            sig = signals.recv() => {
                if interrupted.is_some() {
                    log(&format!("second {}: cutting in-flight requests", sig.0));
                    stops.cut();
                } else {
                    interrupted = Some(sig);
                    if drain {
                        log(&format!("{}: no new sessions; draining (grace {:.0}s; again to cut)", sig.0, grace.as_secs_f64()));
                        stops.stop_sessions();
                        grace_at.get_or_insert(tokio::time::Instant::now() + grace);
                    } else {
                        log(&format!("{}: stopping; in-flight requests are cut and recorded", sig.0));
                        stops.cut();
                    }
                }
            }
            () = grace_sleep, if grace_at.is_some() => {
                log("drain grace expired, cutting what is left");
                stops.cut();
                grace_at = None;
            }
        }
    }
    progress.finish();
    let wall = run_origin.elapsed().as_secs_f64();
    if let Some(p) = periodic {
        p.abort();
    }
    let server = match &scraper {
        Some(s) => {
            s.scrape().await;
            let snaps = s.snapshots();
            let report = ServerReport::from_snapshots(&snaps);
            let side = sidecar(&a.out, "server.json");
            let body =
                json!({"metrics_url": s.url(), "interval_s": a.scrape_interval, "report": report, "snapshots": snaps});
            if let Err(e) = std::fs::write(&side, serde_json::to_vec_pretty(&body).unwrap_or_default()) {
                eprintln!("could not write {}: {e}", side.display());
            }
            Some(report)
        }
        None => None,
    };
    let finished = sink.finish()?;
    if let Some(e) = &finished.error {
        eprintln!("loadshape replay: {e}");
    }
    let records = finished.records;
    let summary = metrics::summarize(&records, &slo);
    println!("{}", super::report::render(&records, &summary, &slo, server.as_ref()));
    let started = ctx.started.load(Ordering::Relaxed);
    let checks = super::report::Checks::of(&records);
    let send_delay = ctx
        .client
        .send_delay_us()
        .map(|(n, p50, p99, max)| json!({"n": n, "p50": p50, "p99": p99, "max": max}));
    let meta = json!({
        "url": a.url, "model": model, "dialect": dialect, "endpoint": a.endpoint, "seed": seed, "nonce": nonce,
        "http_client": ctx.client.http_client(), "connections_opened": ctx.client.connections_opened(),
        "rx_clock": checks.rx_clock(),
        "rx_clock_requests": {"kernel": checks.rx_clock_kernel, "user": checks.rx_clock_user},
        "send_delay_us": send_delay,
        "shape": shape, "wall_s": wall, "requests_started": started, "records_written": finished.written,
        "interrupted": interrupted.map(|s| s.0), "aborted": ctx.aborted.load(Ordering::Relaxed),
        "slo": slo, "summary": summary, "server": server,
        "loadshape_version": shared::version::LOADSHAPE_VERSION,
    });
    let side = sidecar(&a.out, "summary.json");
    if let Err(e) = std::fs::write(&side, serde_json::to_vec_pretty(&meta).unwrap_or_default()) {
        eprintln!("could not write {}: {e}", side.display());
    }
    eprintln!(
        "loadshape replay: {wall:.0} s wall, {started} requests started, {} records in {}",
        finished.written,
        sink.path().display()
    );
    if ctx.aborted.load(Ordering::Relaxed) {
        eprintln!("loadshape replay: ABORTED -- the server stopped answering; this run did not measure anything");
        return Ok(ExitCode::from(2));
    }
    if summary.completed == 0 && interrupted.is_none() {
        eprintln!("loadshape replay: no request completed; this run did not measure anything");
        return Ok(ExitCode::from(2));
    }
    Ok(match interrupted {
        Some((_, code)) => ExitCode::from(code),
        None => ExitCode::SUCCESS,
    })
}

fn prompt_maker(reqs: &[PlannedRequest], seed: u64, nonce: u64) -> PromptMaker {
    let max_shared = reqs.iter().map(|r| r.shared_prefix_tokens).max().unwrap_or(0);
    PromptMaker::new(seed, nonce, max_shared)
}

/// `<out>.<suffix>` beside the record file.
pub fn sidecar(out: &Path, suffix: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".");
    s.push(suffix);
    PathBuf::from(s)
}

async fn first_model(http: &reqwest::Client, base: &str, key: Option<&str>) -> anyhow::Result<String> {
    let mut req = http
        .get(format!("{}/models", base.trim_end_matches('/')))
        .timeout(Duration::from_secs(10));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let v: serde_json::Value = req.send().await?.error_for_status()?.json().await?;
    v.pointer("/data/0/id")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .context("no model id in the answer")
}

/// SIGINT and SIGTERM as one stream: (name, exit code).
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    async fn recv(&mut self) -> (&'static str, u8) {
        tokio::select! {
            _ = self.int.recv() => ("SIGINT", 130),
            _ = self.term.recv() => ("SIGTERM", 143),
        }
    }
}
