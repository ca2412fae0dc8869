//! [`run`]: one live run from [`ReplaySettings`] to a [`ReplayOutcome`], for `loadshape replay` and
//! `loadshape serve` alike.
//!
//! The run asks the server what the settings leave open (model, dialect), opens the connections it will hold,
//! scrapes `/metrics` before, during and after, sends the traffic until it ends, the deadline passes (then drain
//! or stop, bounded by the grace), [`Hooks::stop`] turns true (cut) or an [`Interrupt`] arrives (first: drain or
//! cut; second: cut). Every started request gets one record line. It writes `<out>.server.json` when it scraped and
//! `<out>.summary.json` when the settings say so, and prints nothing: its notes go to [`Hooks::log`], and the
//! caller prints (or not) the outcome.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use shared::filler::TokenScale;
use shared::metrics;
use shared::record::RequestRecord;
use tokio::sync::{mpsc, watch};

use super::client::{self, Client, ClientConfig, HttpClient, LiveCounters};
use super::dialect::Dialect;
use super::fleet::{LiveRouter, ROUTE_BLOCK_TOKENS};
use super::limits::{self, ServerLimits};
use super::progress::Progress;
use super::prom::{Scraper, ServerReport};
use super::records::{Finished, RecordObserver, RecordSink};
use super::runner::{self, Ctx, PlannedRequest, PromptMaker, SessionRun, Stops};
use super::settings::{ReplaySettings, Traffic, unix_now_s};
use super::summary::{self, Checks, RunSummary, ServerScrape};
use super::tokenizer::{self, TokenizerReport};

pub use super::progress::LogFn;

/// A request to end the run early, as a signal asks (`loadshape replay` turns SIGINT and SIGTERM into these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupt {
    /// `summary.json`'s `interrupted`: e.g. `SIGINT`.
    pub name: &'static str,
    /// The exit code `loadshape replay` ends with (130, 143).
    pub exit_code: u8,
}

impl Interrupt {
    /// [`Hooks::stop`] turned true.
    pub const STOP: Interrupt = Interrupt {
        name: "stop requested",
        exit_code: 0,
    };
}

/// How a caller watches and ends a run. Everything is optional.
#[derive(Default)]
pub struct Hooks {
    /// Called with each record right after its line is written (on the record writer's thread).
    pub on_record: Option<RecordObserver>,
    /// Turning true stops the run now: nothing new starts, in-flight requests are cut (and recorded).
    pub stop: Option<watch::Receiver<bool>>,
    /// The first interrupt drains (with a draining workload, bounded by its grace) or cuts; a second one cuts.
    pub interrupts: Option<mpsc::UnboundedReceiver<Interrupt>>,
    /// Where notes go; `None`: standard error.
    pub log: Option<LogFn>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("on_record", &self.on_record.is_some())
            .field("stop", &self.stop)
            .field("interrupts", &self.interrupts.is_some())
            .field("log", &self.log.is_some())
            .finish()
    }
}

/// What a finished run hands back.
#[derive(Debug)]
pub struct ReplayOutcome {
    /// What `<out>.summary.json` holds (written only with [`ReplaySettings::write_summary`]).
    pub summary: RunSummary,
    /// What `<out>.server.json` holds; `None` when `/metrics` was not scraped.
    pub server: Option<ServerScrape>,
    /// Every record of the run, in the order written.
    pub records: Vec<RequestRecord>,
    /// What ended the run early, if anything did.
    pub interrupted: Option<Interrupt>,
    /// The record file.
    pub out: PathBuf,
}

/// Whether a run measured anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Measured,
    /// The fail streak aborted the run: the server stopped answering.
    Aborted,
    /// No request completed, and nothing interrupted the run.
    NothingCompleted,
}

impl ReplayOutcome {
    pub fn verdict(&self) -> Verdict {
        if self.summary.aborted {
            Verdict::Aborted
        } else if self.summary.summary.completed == 0 && self.interrupted.is_none() {
            Verdict::NothingCompleted
        } else {
            Verdict::Measured
        }
    }
}

/// Runs `settings` to its end. With `threads` ≥ 1 the streams are driven by a runtime of the run's own on
/// dedicated threads; with 0, on the caller's.
pub async fn run(settings: ReplaySettings, hooks: Hooks) -> anyhow::Result<ReplayOutcome> {
    if settings.threads == 0 {
        return run_here(settings, hooks).await;
    }
    // With one thread (the default) every stream is polled on one core with no cross-thread wake-ups, the
    // cheapest way to read many slow streams.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let threads = settings.threads;
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
                Ok(rt) => rt.block_on(run_here(settings, hooks)),
                Err(e) => Err(anyhow::anyhow!("building the replay runtime: {e}")),
            };
            let _ = tx.send(result);
        })
        .context("starting the replay thread")?;
    rx.await.context("the replay thread ended without a result")?
}

/// Waits until `stop` turns true; never resolves without a receiver (or after its sender is gone).
async fn stop_requested(stop: &mut Option<watch::Receiver<bool>>) {
    match stop {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// The next interrupt; never resolves without a channel (or after its sender is gone).
async fn next_interrupt(rx: &mut Option<mpsc::UnboundedReceiver<Interrupt>>) -> Interrupt {
    if let Some(r) = rx
        && let Some(i) = r.recv().await
    {
        return i;
    }
    std::future::pending().await
}

/// [`run`] on the runtime it is called on, in its stages: the target and its clients, the tokenizer, the warm-up,
/// the first scrape, the origin, the traffic until something ends it, the last scrape, the records and the summary.
async fn run_here(s: ReplaySettings, hooks: Hooks) -> anyhow::Result<ReplayOutcome> {
    let note: LogFn = hooks
        .log
        .clone()
        .unwrap_or_else(|| Arc::new(|m: &str| eprintln!("{m}")));
    let http = client::http_client(&s.target.ca_certs)?;
    let target = Target::resolve(&s, &http, &note).await?;
    let clients = Clients::new(&s, &http, &target, &note);
    let tokenizer = measure_tokenizer(&s, &http, &target.model, &clients.client, &note).await?;
    let scale = tokenizer.scale();
    let match_prompts = matches!(tokenizer.source, "tokenize" | "usage");
    clients.warm(&s).await;
    let mut outside = Outside {
        stop: hooks.stop,
        interrupts: hooks.interrupts,
    };
    let live = Arc::new(LiveCounters::default());
    let progress = start_progress(&s, live.clone(), &note);
    let mut server = ServerWatch::before(&s, &http, &note).await?;
    let (run_origin, origin_unix_s) = outside.origin(s.start_at_unix_s, &note).await?;
    // Records are written by a thread of their own (and kept there for the summary): the thread that reads the
    // streams only hands each one over. Made after the wait, so a shard refused at its --start-at leaves no file.
    let sink = Arc::new(RecordSink::create(&s.out, s.append, true, hooks.on_record.clone())?);
    server.during(run_origin, s.scrape_interval);
    let stops = Stops::default();
    let (client, router) = clients.into_router(&s, scale);
    let ctx = Arc::new(Ctx {
        router,
        client,
        sink: sink.clone(),
        live: live.clone(),
        origin: run_origin,
        stops: stops.clone(),
        aborted: AtomicBool::new(false),
        log: progress.printer(),
        verbose: s.verbose,
        started: AtomicU64::new(0),
        prompt_block_words: scale.words(
            u64::from(shared::workload::mooncake::EXPORT_BLOCK_TOKENS),
            shared::filler::FillerKind::Prose,
        ),
    });
    let task = spawn_traffic(&s, ctx.clone(), run_origin, scale, match_prompts);
    let interrupted = outside.watch(task, &s, &stops, progress.printer()).await;
    progress.finish();
    let wall_s = run_origin.elapsed().as_secs_f64();
    let scraped = server.after(&s, &note).await;
    let finished = sink.finish()?;
    if let Some(e) = &finished.error {
        note(&format!("loadshape replay: {e}"));
    }
    let ended = Ended {
        origin_unix_s,
        wall_s,
        interrupted,
    };
    let run_summary = run_summary(&s, target, tokenizer, &ctx, &finished, &scraped, &ended);
    if s.write_summary {
        write_summaries(&s, &run_summary, &finished.records, &note);
    }
    Ok(ReplayOutcome {
        summary: run_summary,
        server: scraped.server,
        records: finished.records,
        interrupted,
        out: s.out,
    })
}

/// The model and dialect the run sends with.
struct Target {
    model: String,
    dialect: Dialect,
}

impl Target {
    /// The settings' model and dialect, asking the server for what they leave open, and the note that opens the
    /// run's log.
    async fn resolve(s: &ReplaySettings, http: &reqwest::Client, note: &LogFn) -> anyhow::Result<Target> {
        let model = match &s.target.model {
            Some(m) => m.clone(),
            None => first_model(http, &s.target.url, s.target.api_key.as_deref())
                .await
                .context("--model not given and /v1/models did not name one")?,
        };
        let (dialect, why) = match s.target.dialect {
            Dialect::Auto => client::detect_dialect(http, &s.target.url, s.target.api_key.as_deref()).await?,
            d => (d, "--dialect".to_string()),
        };

        let http_client = s.http_client.resolve();
        note(&format!(
            "loadshape replay: {}; {} {} model {model}, dialect {dialect} ({why}), temp {}, seed {}, content nonce {}, http client {http_client}{}",
            s.shape,
            s.target.url,
            s.endpoint.route(),
            s.temperature,
            s.seed,
            s.nonce,
            if s.http_client == HttpClient::Auto {
                " (auto)"
            } else {
                ""
            },
        ));
        if !dialect.forces_length() {
            note("note: dialect openai cannot force the output length; gen_tokens may fall short of asked_tokens");
        }
        Ok(Target { model, dialect })
    }
}

/// The clients the run sends with: `client` for `target.url`, and with a fleet one per URL (replica 0's is
/// `client`), every one with the same model, dialect and options (the replicas serve one model).
struct Clients {
    client: Client,
    /// Empty without a fleet.
    fleet: Vec<Client>,
}

impl Clients {
    fn new(s: &ReplaySettings, http: &reqwest::Client, target: &Target, note: &LogFn) -> Clients {
        let config = ClientConfig {
            base_url: s.target.url.clone(),
            model: target.model.clone(),
            api_key: s.target.api_key.clone(),
            endpoint: s.endpoint,
            dialect: target.dialect,
            temperature: s.temperature,
            timeout: s.timeout,
            stall_timeout: s.stall_timeout,
            max_retries: s.max_retries,
            http_client: s.http_client,
            rx_clock: s.rx_clock,
            ca_certs: s.target.ca_certs.clone(),
        };
        // Sessions with hidden reasoning ask the server for it (its own controls: docs/replay.md).
        let reasoning = match &s.traffic {
            Traffic::Sessions(w) => w.reasoning,
            _ => None,
        };
        let client = Client::new(http.clone(), config.clone()).with_reasoning(reasoning);
        let fleet: Vec<Client> = match &s.fleet {
            Some(f) => {
                note(&format!(
                    "fleet: {} replicas, router {}{}: {}",
                    f.urls.len(),
                    f.router().name(),
                    if f.router() == shared::engine::Router::PrefixAware {
                        format!(
                            " (load cap {}, client-side prefix view of {} tokens per replica)",
                            f.spec.load_cap, f.cache_tokens
                        )
                    } else {
                        String::new()
                    },
                    f.urls.join(", ")
                ));
                f.urls
                    .iter()
                    .enumerate()
                    .map(|(i, u)| {
                        if i == 0 {
                            client.clone()
                        } else {
                            Client::new(
                                http.clone(),
                                ClientConfig {
                                    base_url: u.clone(),
                                    ..config.clone()
                                },
                            )
                            .with_reasoning(reasoning)
                        }
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        Clients { client, fleet }
    }

    /// Opens the connections the run will hold before its first request, so the first wave's TTFT is not inflated
    /// by hundreds of simultaneous TCP connects (a client-side artefact, not server latency).
    async fn warm(&self, s: &ReplaySettings) {
        // A shard holds about its share of the plan's streams.
        let streams = s
            .traffic
            .expected_streams()
            .div_ceil(s.shard.count.max(1) as usize)
            .min(2048);
        if self.fleet.is_empty() {
            self.client.warm(streams).await;
        } else {
            // Each replica gets about its share of the streams.
            let each = streams.div_ceil(self.fleet.len());
            futures_util::future::join_all(self.fleet.iter().map(|c| c.warm(each))).await;
        }
    }

    /// The client, and with a fleet the router over every replica's client.
    fn into_router(self, s: &ReplaySettings, scale: TokenScale) -> (Client, Option<LiveRouter>) {
        let Clients { client, fleet } = self;
        let router = s.fleet.as_ref().map(|f| {
            LiveRouter::new(
                fleet,
                f,
                scale.words(ROUTE_BLOCK_TOKENS, shared::filler::FillerKind::Prose),
            )
        });
        (client, router)
    }
}

/// The progress display (shown when the settings ask and standard error is a terminal), told the plan's size and
/// length.
fn start_progress(s: &ReplaySettings, live: Arc<LiveCounters>, note: &LogFn) -> Progress {
    let plan = super::progress::Plan {
        planned: s.traffic.planned_requests(s.seed, s.shard),
        run_length_s: s.max_duration.map(|d| d.as_secs_f64()),
    };
    Progress::start(live, s.progress, note.clone(), plan)
}

/// The target's tokenizer, before anything is sent: the filler is sized for it.
async fn measure_tokenizer(
    s: &ReplaySettings,
    http: &reqwest::Client,
    model: &str,
    client: &Client,
    note: &LogFn,
) -> anyhow::Result<TokenizerReport> {
    let probe_url = format!("{}{}", s.target.url.trim_end_matches('/'), s.endpoint.route());
    let (tokenizer, tok_note) = tokenizer::measure(
        s.match_tokenizer,
        http,
        &client::origin_of(&s.target.url)?,
        model,
        s.target.api_key.as_deref(),
        client,
        &probe_url,
        s.nonce,
    )
    .await?;
    if let Some(n) = tok_note {
        note(&n);
    }
    if tokenizer.source != "off" {
        note(&format!(
            "tokenizer ({}): {:.4} server tokens per designed token of prose, {:.4} of code; filler sized to match",
            tokenizer.source, tokenizer.prose_ratio, tokenizer.code_ratio
        ));
    }
    Ok(tokenizer)
}

/// Server side: scrape before, every few seconds during, and after. A fleet scrapes every replica (its own
/// `/metrics`, replica i at `scrapers[i]`); one URL, or a fleet scraped nowhere, as always.
struct ServerWatch {
    scrapers: Vec<Scraper>,
    /// Each replica's scrapes are reported on their own (a fleet with its own `/metrics` per replica).
    fleet_scraped: bool,
    /// The limits the server states (`None`: none, or nothing scraped).
    limits: Option<ServerLimits>,
    /// The scrapes during the run.
    periodic: Vec<tokio::task::JoinHandle<()>>,
}

/// What the scrapes came to, once the run is over.
struct Scraped {
    /// What `<out>.server.json` holds (already written); `None` when `/metrics` was not scraped.
    server: Option<ServerScrape>,
    /// Each replica's report when a fleet scraped every replica; otherwise empty.
    replicas: Vec<Option<ServerReport>>,
}

impl ServerWatch {
    /// The first scrape (noting each URL that does not answer) and the server's limits.
    async fn before(s: &ReplaySettings, http: &reqwest::Client, note: &LogFn) -> anyhow::Result<ServerWatch> {
        let scrape_urls: Vec<String> = match (&s.fleet, &s.metrics_url) {
            (Some(f), Some(_)) if !f.metrics_urls.is_empty() => f.metrics_urls.clone(),
            (_, u) => u.iter().cloned().collect(),
        };
        let fleet_scraped = s.fleet.is_some() && scrape_urls.len() > 1;
        let scrapers: Vec<Scraper> = scrape_urls
            .into_iter()
            .map(|u| Scraper::new(http.clone(), u, Instant::now()))
            .collect();
        let firsts = futures_util::future::join_all(scrapers.iter().map(Scraper::scrape)).await;
        for (sc, first) in scrapers.iter().zip(&firsts) {
            if let Some(e) = &first.error {
                note(&format!(
                    "note: server metrics unavailable at {} ({e}); client-side numbers only",
                    sc.url()
                ));
            }
        }
        let mut server_limits = None;
        if let Some(sc) = scrapers.first() {
            // What the server says of its limits, kept beside the scrapes for `calibrate --from`.
            let l = limits::fetch(
                http,
                &client::origin_of(&s.target.url)?,
                sc.url(),
                s.target.api_key.as_deref(),
            )
            .await;
            server_limits = (!l.is_empty()).then_some(l);
        }
        Ok(ServerWatch {
            scrapers,
            fleet_scraped,
            limits: server_limits,
            periodic: Vec::new(),
        })
    }

    /// Starts the scrapes during the run, every `every`, timed from the run's origin.
    fn during(&mut self, run_origin: Instant, every: Duration) {
        self.periodic = Vec::with_capacity(self.scrapers.len());
        for sc in &mut self.scrapers {
            sc.set_origin(run_origin);
            self.periodic.push(sc.spawn_periodic(every));
        }
    }

    /// Stops the scrapes during the run, scrapes once more and writes `<out>.server.json`.
    async fn after(self, s: &ReplaySettings, note: &LogFn) -> Scraped {
        for p in self.periodic {
            p.abort();
        }
        futures_util::future::join_all(self.scrapers.iter().map(Scraper::scrape)).await;
        // Each replica's scrapes and report (one URL: the one).
        let scraped: Vec<(String, ServerReport, Vec<super::prom::Snapshot>)> = self
            .scrapers
            .iter()
            .map(|sc| {
                let snapshots = sc.snapshots();
                (
                    sc.url().to_string(),
                    ServerReport::from_snapshots(&snapshots),
                    snapshots,
                )
            })
            .collect();
        let fleet_scraped = self.fleet_scraped;
        let server = scraped.first().map(|(url, report, snapshots)| {
            let scrape = ServerScrape {
                metrics_url: url.clone(),
                interval_s: s.scrape_interval.as_secs_f64(),
                report: report.clone(),
                snapshots: snapshots.clone(),
                limits: self.limits,
                replicas: fleet_scraped.then(|| {
                    scraped
                        .iter()
                        .enumerate()
                        .map(|(i, (url, report, snapshots))| summary::ReplicaScrape {
                            replica: i as u32,
                            metrics_url: url.clone(),
                            report: report.clone(),
                            snapshots: snapshots.clone(),
                        })
                        .collect()
                }),
            };
            write_sidecar(&summary::sidecar(&s.out, "server.json"), &scrape, note);
            scrape
        });
        let replicas: Vec<Option<ServerReport>> = if fleet_scraped {
            scraped.iter().map(|(_, r, _)| Some(r.clone())).collect()
        } else {
            Vec::new()
        };
        Scraped { server, replicas }
    }
}

/// What can end the run from outside it: the stop hook and the interrupts.
struct Outside {
    stop: Option<watch::Receiver<bool>>,
    interrupts: Option<mpsc::UnboundedReceiver<Interrupt>>,
}

impl Outside {
    /// The run's origin (t_submit 0, the simulator's t = 0), as an `Instant` and in Unix seconds.
    async fn origin(&mut self, start_at: Option<f64>, note: &LogFn) -> anyhow::Result<(Instant, f64)> {
        // Taken after the preparation (dialect, tokenizer probes, connection warm-up, the first scrape), so that
        // a plan's first arrivals and session starts are sent at their times instead of late in a burst, and a
        // live run lays over its simulation from the same instant: now, or the common `--start-at` instant every
        // shard waits for (a signal or a stop while waiting ends the run before it sends anything).
        Ok(match start_at {
            Some(t) => tokio::select! {
                r = wait_for_start(t, note) => r?,
                i = next_interrupt(&mut self.interrupts) => anyhow::bail!("{} while waiting for --start-at {t}: nothing was sent", i.name),
                () = stop_requested(&mut self.stop) => anyhow::bail!("stop requested while waiting for --start-at {t}: nothing was sent"),
            },
            None => (Instant::now(), unix_now_s()),
        })
    }

    /// Waits for the traffic `task` to end, meanwhile ending it early at the deadline (then drain or stop, bounded
    /// by the grace), at a stop (cut) or at an interrupt (first: drain or cut; second: cut). Returns what
    /// interrupted the run, if anything did.
    async fn watch(
        &mut self,
        mut task: tokio::task::JoinHandle<()>,
        s: &ReplaySettings,
        stops: &Stops,
        log: Box<dyn Fn(&str) + Send + Sync>,
    ) -> Option<Interrupt> {
        let (drain, grace) = s.drain_and_grace();
        let deadline = tokio::time::sleep(s.max_duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
        tokio::pin!(deadline);
        let mut deadline_hit = false;
        let mut grace_at: Option<tokio::time::Instant> = None;
        let mut interrupted: Option<Interrupt> = None;
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
                () = stop_requested(&mut self.stop), if interrupted.is_none() => {
                    interrupted = Some(Interrupt::STOP);
                    log("stop requested: in-flight requests are cut and recorded");
                    stops.cut();
                }
                sig = next_interrupt(&mut self.interrupts) => {
                    if interrupted.is_some() {
                        log(&format!("second {}: cutting in-flight requests", sig.name));
                        stops.cut();
                    } else {
                        interrupted = Some(sig);
                        if drain {
                            log(&format!("{}: no new sessions; draining (grace {:.0}s; again to cut)", sig.name, grace.as_secs_f64()));
                            stops.stop_sessions();
                            grace_at.get_or_insert(tokio::time::Instant::now() + grace);
                        } else {
                            log(&format!("{}: stopping; in-flight requests are cut and recorded", sig.name));
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
        interrupted
    }
}

/// Starts sending the settings' traffic (sessions, open loop, trace or closed loop) through `ctx`.
fn spawn_traffic(
    s: &ReplaySettings,
    ctx: Arc<Ctx>,
    run_origin: Instant,
    scale: TokenScale,
    match_prompts: bool,
) -> tokio::task::JoinHandle<()> {
    let fail_limit = u64::from(s.max_fail_streak.max(1)) * 10;
    let (seed, nonce, max_concurrency, shard) = (s.seed, s.nonce, s.max_concurrency, s.shard);
    let traffic = s.traffic.clone();
    let session_deadline = run_origin + s.max_duration.unwrap_or(Duration::from_secs(86_400 * 365 * 100));
    let max_fail_streak = s.max_fail_streak;
    let tool_results = s.tool_results;
    tokio::spawn(async move {
        match traffic {
            Traffic::Sessions(workload) => {
                let run = SessionRun {
                    workload,
                    seed,
                    nonce,
                    max_fail_streak,
                    scale,
                    match_prompts,
                    deadline: session_deadline,
                    tool_results,
                    shard,
                };
                runner::run_sessions(ctx, Arc::new(run)).await;
            }
            Traffic::Open(reqs) => {
                let maker = Arc::new(prompt_maker(&reqs, seed, nonce, scale));
                runner::run_open_loop(ctx, reqs, maker, fail_limit, max_concurrency, shard).await;
            }
            Traffic::Trace(trace) => {
                let prompts = Arc::new(super::trace_run::TracePrompts::new(
                    seed,
                    nonce,
                    trace.hash_block_size(),
                    scale,
                ));
                super::trace_run::run_trace(ctx, trace, prompts, fail_limit, max_concurrency).await;
            }
            Traffic::Closed {
                requests,
                users,
                think_s,
            } => {
                let maker = Arc::new(prompt_maker(&requests, seed, nonce, scale));
                runner::run_closed_loop(ctx, requests, maker, users, think_s, fail_limit, shard).await;
            }
        }
    })
}

/// When the run started and how it ended, for its summary.
struct Ended {
    /// The run's origin, Unix seconds.
    origin_unix_s: f64,
    /// From the origin to the end of the traffic, seconds.
    wall_s: f64,
    interrupted: Option<Interrupt>,
}

/// What `<out>.summary.json` holds.
fn run_summary(
    s: &ReplaySettings,
    target: Target,
    tokenizer: TokenizerReport,
    ctx: &Ctx,
    finished: &Finished,
    scraped: &Scraped,
    ended: &Ended,
) -> RunSummary {
    let records = &finished.records;
    let checks = Checks::of(records);
    let scored = metrics::summarize(records, &s.slo);
    RunSummary {
        url: s.target.url.clone(),
        model: target.model,
        dialect: target.dialect,
        endpoint: s.endpoint,
        tool_results: s.tool_results,
        seed: s.seed,
        nonce: s.nonce,
        http_client: ctx.client.http_client(),
        connections_opened: match &ctx.router {
            Some(r) => r.clients().iter().map(Client::connections_opened).sum(),
            None => ctx.client.connections_opened(),
        },
        rx_clock: checks.rx_clock(),
        rx_clock_requests: checks.rx_clock_requests(),
        send_delay_us: metrics::send_delay(&mut match &ctx.router {
            Some(r) => r.clients().iter().flat_map(Client::send_delays_us).collect(),
            None => ctx.client.send_delays_us(),
        }),
        shape: s.shape.clone(),
        wall_s: ended.wall_s,
        requests_started: ctx.started.load(Ordering::Relaxed),
        records_written: finished.written,
        records_digest: format!("{:016x}", finished.digest),
        interrupted: ended.interrupted.map(|i| i.name.to_string()),
        aborted: ctx.aborted.load(Ordering::Relaxed),
        slo: s.slo,
        prefix_reuse: summary::prefix_reuse(&scored),
        summary: scored,
        server: scraped.server.as_ref().map(|sc| sc.report.clone()),
        tokenizer,
        origin_unix_s: ended.origin_unix_s,
        start_at_unix_s: s.start_at_unix_s,
        shard: (!s.shard.is_whole()).then_some(s.shard),
        fleet: s
            .fleet
            .as_ref()
            .map(|f| summary::FleetRun::of(f, records, &scraped.replicas)),
        replicas: if s.fleet.is_none() {
            shared::metrics::replicas::replica_split(records)
        } else {
            Vec::new()
        },
        sessions_on_several_replicas: (s.fleet.is_none() && records.iter().any(|r| r.replica.is_some()))
            .then(|| shared::metrics::replicas::sessions_on_several_replicas(records)),
        kv_transfer: shared::metrics::replicas::kv_transfer_summary(records),
        loadshape_version: shared::version::LOADSHAPE_VERSION,
    }
}

/// Writes `<out>.summary.json` and beside it the mergeable statistics (`loadshape merge`): exact counters and an
/// HDR histogram per metric.
fn write_summaries(s: &ReplaySettings, run_summary: &RunSummary, records: &[RequestRecord], note: &LogFn) {
    write_sidecar(&summary::sidecar(&s.out, "summary.json"), run_summary, note);
    let stats = shared::metrics::hist::Mergeable::of(records, &s.slo);
    write_sidecar(&summary::sidecar(&s.out, "counters.json"), &stats.counters, note);
    for (metric, h) in stats.histograms() {
        let path = summary::sidecar(&s.out, &format!("{}.hdr", metric.name()));
        if let Err(e) = shared::metrics::hist::encode(h)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&path, b))
        {
            note(&format!("could not write {}: {e}", path.display()));
        }
    }
}

/// The latest a shard may reach its `--start-at` and still run the plan's timing, seconds.
pub const MAX_START_LATE_S: f64 = 5.0;

/// Waits for the wall-clock instant `start_at` (Unix seconds) and returns it as the run's origin: an `Instant`
/// (taken back by however late this process woke) and the same instant in Unix seconds. A process that reaches it
/// more than [`MAX_START_LATE_S`] late refuses to run (its units would start late against the other shards').
async fn wait_for_start(start_at: f64, note: &LogFn) -> anyhow::Result<(Instant, f64)> {
    let ahead = start_at - unix_now_s();
    if ahead > 0.0 {
        note(&format!("waiting {ahead:.1} s for --start-at {start_at}"));
        tokio::time::sleep(Duration::from_secs_f64(ahead)).await;
    }
    let (now, wall) = (Instant::now(), unix_now_s());
    let late = (wall - start_at).max(0.0);
    anyhow::ensure!(
        late <= MAX_START_LATE_S,
        "--start-at {start_at} passed {late:.1} s ago (more than {MAX_START_LATE_S} s): this shard would start late \
         against the others, so it does not run (choose a start time after every shard is up)"
    );
    Ok((now.checked_sub(Duration::from_secs_f64(late)).unwrap_or(now), start_at))
}

/// Writes a sidecar file; a failure is noted, not fatal (the records are already on disk).
fn write_sidecar<T: serde::Serialize>(path: &std::path::Path, value: &T, note: &LogFn) {
    let written = summary::to_sorted_json(value)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(path, bytes));
    if let Err(e) = written {
        note(&format!("could not write {}: {e}", path.display()));
    }
}

fn prompt_maker(reqs: &[PlannedRequest], seed: u64, nonce: u64, scale: shared::filler::TokenScale) -> PromptMaker {
    let max_shared = reqs.iter().map(|r| r.shared_prefix_tokens).max().unwrap_or(0);
    PromptMaker::new(seed, nonce, max_shared, scale)
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
