//! [`ReplaySettings`]: everything one live run needs, resolved and checked before a request is sent, whoever asks
//! for the run: `loadshape replay` resolves it from its flags (`cmd/replay.rs`), `loadshape serve` from a configured
//! target and a submitted scenario (`serve/driver.rs`). [`crate::replay::run()`] takes it as it is.
//!
//! The traffic is planned here: a scenario's workload becomes the same requests or sessions the simulator draws
//! (`shared::workload`), with its seed, SLO and duration. Only what needs the server (the model when none is given,
//! the dialect when `auto`) is left to the run.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::CertificateDer;
use shared::metrics::Slo;
use shared::scenario::Scenario;
use shared::workload::{SessionWorkload, Shard, ShardError, ShardUnit, Workload};

use super::client::{self, Endpoint, HttpClient};
use super::conversation::ToolResults;
use super::dialect::Dialect;
use super::fleet::LiveFleet;
use super::runner::PlannedRequest;
use super::rxstamp::RxClock;
use super::tokenizer::MatchTokenizer;

/// Defaults shared by `loadshape replay`'s flags and by runs `loadshape serve` starts.
pub mod defaults {
    /// Sampling temperature.
    pub const TEMPERATURE: f64 = 0.6;
    /// Per-request limit, seconds.
    pub const TIMEOUT_S: f64 = 1800.0;
    /// Longest gap between two frames (and before the first), seconds.
    pub const STALL_TIMEOUT_S: f64 = 300.0;
    /// Seconds between `/metrics` scrapes during a run.
    pub const SCRAPE_INTERVAL_S: f64 = 5.0;
    /// Cap on a drain (and on waiting for in-flight requests at the deadline), seconds.
    pub const DRAIN_GRACE_S: f64 = 420.0;
    /// Consecutive no-progress sessions on one slot before the run aborts (request-level traffic: 10×).
    pub const MAX_FAIL_STREAK: u32 = 3;
    /// Runtime threads driving the streams (1: one thread of its own; 0: the caller's runtime).
    pub const THREADS: usize = 1;
    /// Run length of flag-described sessions, seconds.
    pub const MAX_SECONDS: f64 = 900.0;
}

/// Where the requests go.
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// OpenAI base URL including the API prefix, e.g. `http://127.0.0.1:8000/v1`.
    pub url: String,
    /// Model name to send; `None`: the first id on `/v1/models`.
    pub model: Option<String>,
    /// How output lengths are forced; `Auto`: ask the server.
    pub dialect: Dialect,
    /// Bearer token for the server.
    pub api_key: Option<String>,
    /// Extra roots to trust for `https://`, beside the platform's.
    pub ca_certs: Vec<CertificateDer<'static>>,
}

impl TargetSettings {
    /// `url` with every other field unset (model and dialect asked from the server).
    pub fn new(url: impl Into<String>) -> Self {
        TargetSettings {
            url: url.into(),
            model: None,
            dialect: Dialect::Auto,
            api_key: None,
            ca_certs: Vec::new(),
        }
    }
}

/// What a run sends.
#[derive(Debug, Clone)]
pub enum Traffic {
    /// Agent sessions (growing conversations); the workload carries its own drain and grace.
    Sessions(SessionWorkload),
    /// Each request sent at its arrival time.
    Open(Vec<PlannedRequest>),
    /// A trace with hash ids or dependencies (`replay::trace_run`): content from the hash ids, dependents sent on
    /// completion.
    Trace(std::sync::Arc<shared::workload::TraceWorkload>),
    /// `users` workers, each sending the next request when its previous one ends, after `think_s`.
    Closed {
        requests: Vec<PlannedRequest>,
        users: u32,
        think_s: f64,
    },
}

/// Most requests of a trace that can be in flight at once, bounded from its dependencies: each request without
/// one starts a branch, and each request that `k` others wait for adds `k − 1` (a chain of requests, each sent when
/// the previous ends, is one stream). Opening more connections than that only holds a server's connection threads
/// idle: llama-server, whose few HTTP threads each keep an idle connection, then starts the first request only
/// when the warm-up's connections time out.
fn trace_width(t: &shared::workload::TraceWorkload) -> usize {
    let mut waiting = vec![0usize; t.requests.len()];
    let mut roots = 0usize;
    for r in &t.requests {
        if r.after.is_empty() {
            roots += 1;
        }
        for &d in &r.after {
            if let Some(w) = waiting.get_mut(d as usize) {
                *w += 1;
            }
        }
    }
    let forks: usize = waiting.iter().map(|&k| k.saturating_sub(1)).sum();
    (roots + forks).clamp(1, t.requests.len().max(1))
}

impl Traffic {
    /// Streams the run holds open at once (the connections worth opening before the first request).
    pub fn expected_streams(&self) -> usize {
        match self {
            Traffic::Sessions(w) => w.slot_count() as usize,
            Traffic::Closed { users, .. } => *users as usize,
            Traffic::Open(reqs) => reqs.len().min(64),
            Traffic::Trace(t) => trace_width(t).min(64),
        }
    }

    /// The requests this process plans to send (shard `shard` of the plan drawn with `seed`), for the progress
    /// line's done/planned and ETA: every planned open- and closed-loop request, a trace's requests, the steps of
    /// each slot's one session without `respawn`. `None` when the count is not known before the run: sessions that
    /// respawn (they run until the clock stops them), or more than [`MAX_PLANNED_SLOTS`] slots to draw.
    pub fn planned_requests(&self, seed: u64, shard: Shard) -> Option<u64> {
        let owned = |n: usize| (0..n as u64).filter(|i| shard.owns(*i)).count() as u64;
        match self {
            Traffic::Open(reqs) => Some(owned(reqs.len())),
            Traffic::Trace(t) => Some(t.requests.len() as u64),
            Traffic::Closed { requests, users, .. } => {
                let all_users = Shard::closed_loop_users(*users, requests.len() as u64);
                Some(
                    (0..requests.len() as u64)
                        .filter(|i| shard.owns_closed_request(*i, all_users))
                        .count() as u64,
                )
            }
            Traffic::Sessions(w) if w.respawn || w.slot_count() > MAX_PLANNED_SLOTS => None,
            Traffic::Sessions(w) => Some(
                shard
                    .slots(w.slot_count())
                    .map(|slot| u64::from(w.plan(slot, 0, seed).steps))
                    .sum(),
            ),
        }
    }

    /// Refuses a shard of this traffic that would have nothing to run (fewer slots, requests or users than
    /// shards; `shared::workload::shard`).
    pub fn check_shard(&self, shard: Shard) -> Result<(), ShardError> {
        let (unit, units) = match self {
            Traffic::Trace(_) if shard.is_whole() => return Ok(()),
            Traffic::Trace(_) => return Err(ShardError::TraceNotShardable),
            Traffic::Sessions(w) => (ShardUnit::Slots, u64::from(w.slot_count())),
            Traffic::Open(reqs) => (ShardUnit::Requests, reqs.len() as u64),
            Traffic::Closed { requests, users, .. } => (
                ShardUnit::Users,
                u64::from(Shard::closed_loop_users(*users, requests.len() as u64)),
            ),
        };
        shard.check(units, unit)
    }
}

/// The most session slots [`Traffic::planned_requests`] draws to count their steps (drawing is cheap, but a run of
/// millions of slots should not wait on it).
pub const MAX_PLANNED_SLOTS: u32 = 200_000;

/// One live run, resolved. Build it with [`ReplaySettings::new`] or [`ReplaySettings::for_scenario`] (every field
/// at the command line's default), then set what differs.
#[derive(Debug, Clone)]
pub struct ReplaySettings {
    pub target: TargetSettings,
    /// Which route carries the prompt.
    pub endpoint: Endpoint,
    /// How sessions send tool outputs on `chat` and `messages` (`--tool-results`).
    pub tool_results: ToolResults,
    pub temperature: f64,
    /// Whole-request limit.
    pub timeout: Duration,
    /// Longest gap between frames (and before the first); `None`: only the whole-request limit.
    pub stall_timeout: Option<Duration>,
    /// Times a request answered 429/503 with `Retry-After` is sent again after the asked wait, within `timeout`.
    pub max_retries: u32,
    /// Most open-loop requests in flight at once (`--max-concurrency`); `None`: as many as the arrivals make.
    pub max_concurrency: Option<u32>,
    pub http_client: HttpClient,
    /// Which clock times frames on the hyper path.
    pub rx_clock: RxClock,
    /// The JSONL record file.
    pub out: PathBuf,
    /// Append to `out` instead of replacing it.
    pub append: bool,
    pub traffic: Traffic,
    /// One line describing the traffic (`summary.json`'s `shape`).
    pub shape: String,
    /// Structure seed (the traffic was planned with it; the filler text uses it too).
    pub seed: u64,
    /// Content nonce: makes the text unique per run.
    pub nonce: u64,
    /// Goodput targets of the summary.
    pub slo: Slo,
    /// No new session or request starts after this; `None`: when the traffic ends.
    pub max_duration: Option<Duration>,
    /// Open/closed-loop traffic: at `max_duration` let in-flight requests finish rather than stop steps (sessions
    /// carry their own `drain`).
    pub drain: bool,
    /// Open/closed-loop traffic: cap on the drain (sessions carry their own `drain_grace_s`).
    pub drain_grace: Duration,
    /// Consecutive no-progress sessions on one slot (request-level traffic: 10× as many failed requests) before
    /// the run aborts.
    pub max_fail_streak: u32,
    /// Prometheus endpoint to scrape; `None`: none.
    pub metrics_url: Option<String>,
    pub scrape_interval: Duration,
    /// Runtime threads driving the streams: 1 = one thread of its own, N = a pool of N, 0 = the caller's runtime.
    pub threads: usize,
    /// Draw the progress line (when stderr is a terminal).
    pub progress: bool,
    /// Log a line per step, not only failures.
    pub verbose: bool,
    /// Measure the target's tokenizer before the run and size the filler for it (`--match-tokenizer`; default
    /// `auto`).
    pub match_tokenizer: MatchTokenizer,
    /// Which shard of the plan this process runs (`--shard I/N`; [`Shard::WHOLE`]: all of it). Units keep their
    /// global numbers (slots, request indices), so the shards' records together are the single plan's.
    pub shard: Shard,
    /// Wall-clock start, Unix seconds (`--start-at`): the run waits for it after its warm-up, and its origin (the
    /// records' `t_submit` 0) is that instant, so every shard's records share one time line.
    pub start_at_unix_s: Option<f64>,
    /// Several target URLs behind a router (`--url A --url B … --router NAME`); `None`: every request goes to
    /// `target.url`, as always.
    pub fleet: Option<LiveFleet>,
    /// Write `<out>.summary.json` ([`crate::replay::summary::RunSummary`]). `loadshape serve` keeps its own
    /// `summary.json` in the run's folder and turns this off.
    pub write_summary: bool,
}

/// What a scenario run may override (`loadshape replay --scenario` with `--seed` / `--max-seconds`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScenarioOptions {
    /// Replaces the scenario's seed (the seed model's trace has none: 0).
    pub seed: Option<u64>,
    /// Caps the run's length, seconds (> 0).
    pub max_seconds: Option<f64>,
}

/// A content nonce from the clock: differs on every run (`--nonce` pins one).
pub fn clock_nonce() -> u64 {
    now_nanos() % 1_000_000_007
}

/// A structure seed from the clock (epoch seconds), for flag-described sessions without `--seed`.
pub fn clock_seed() -> u64 {
    now_nanos() / 1_000_000_000
}

/// The wall clock, Unix seconds.
pub fn unix_now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `secs` as a duration; `name` says which setting is wrong when it is negative, not finite or too large.
pub fn seconds(name: &str, secs: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("{name} must be a number of seconds >= 0 (got {secs})"))
}

impl ReplaySettings {
    /// `traffic` against `target`, written to `out`, for at most `max_duration`; everything else at the command
    /// line's defaults (the SLO: `Slo::default()`; `/metrics` at the URL's origin; a nonce from the clock).
    pub fn new(
        target: TargetSettings,
        out: PathBuf,
        traffic: Traffic,
        shape: String,
        seed: u64,
        max_duration: Option<Duration>,
    ) -> anyhow::Result<Self> {
        let metrics_url = Some(format!("{}/metrics", client::origin_of(&target.url)?));
        Ok(ReplaySettings {
            target,
            endpoint: Endpoint::default(),
            tool_results: ToolResults::default(),
            temperature: defaults::TEMPERATURE,
            timeout: Duration::from_secs_f64(defaults::TIMEOUT_S),
            stall_timeout: Some(Duration::from_secs_f64(defaults::STALL_TIMEOUT_S)),
            max_retries: client::DEFAULT_MAX_RETRIES,
            max_concurrency: None,
            http_client: HttpClient::default(),
            rx_clock: RxClock::default(),
            out,
            append: false,
            traffic,
            shape,
            seed,
            nonce: clock_nonce(),
            slo: Slo::default(),
            max_duration,
            drain: false,
            drain_grace: Duration::from_secs_f64(defaults::DRAIN_GRACE_S),
            max_fail_streak: defaults::MAX_FAIL_STREAK,
            metrics_url,
            scrape_interval: Duration::from_secs_f64(defaults::SCRAPE_INTERVAL_S),
            threads: defaults::THREADS,
            progress: true,
            verbose: false,
            match_tokenizer: MatchTokenizer::default(),
            shard: Shard::WHOLE,
            start_at_unix_s: None,
            fleet: None,
            write_summary: true,
        })
    }

    /// A scenario's workload live: the seed model's bursty trace (one request at a time with `closed_loop`), or
    /// the engine model's `poisson`, `gamma`, `closed_loop` and `sessions` workloads, drawn by the code the
    /// simulator runs, with the scenario's seed, SLO and (sessions) duration. `source` names the scenario in
    /// `shape` (e.g. its file).
    pub fn for_scenario(
        target: TargetSettings,
        out: PathBuf,
        scenario: &Scenario,
        source: &str,
        opts: ScenarioOptions,
    ) -> anyhow::Result<Self> {
        if let Some(m) = opts.max_seconds {
            anyhow::ensure!(m.is_finite() && m > 0.0, "the run length must be > 0 s (got {m})");
        }
        // The one size rule the simulator and the page use: a plan too large for memory is refused before it
        // is drawn (records are streamed to disk, not kept, so the streamed estimate applies).
        scenario
            .check_size(false, &shared::budget::Budget::DEFAULT)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        #[allow(unreachable_patterns)]
        let (workload, seed, slo, closed_seed) = match scenario {
            Scenario::Seed(s) => {
                let shared::seed_model::SeedWorkload::Bursty(b) = &s.workload;
                (
                    Workload::Bursty(b.clone()),
                    opts.seed.unwrap_or(0),
                    s.slo,
                    s.closed_loop,
                )
            }
            Scenario::Engine(e) => (e.workload.clone(), opts.seed.unwrap_or(e.seed), e.slo, false),
            _ => anyhow::bail!("{source}: this scenario model cannot be replayed live"),
        };
        let traffic = match &workload {
            Workload::Sessions(w) => Traffic::Sessions(w.clone()),
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
            Workload::Trace(t) if t.is_structured() => Traffic::Trace(std::sync::Arc::new((**t).clone())),
            _ => Traffic::Open(planned(&workload, seed)),
        };
        let own = match &workload {
            Workload::Sessions(w) => w.duration_s,
            _ => f64::INFINITY,
        };
        let max_s = opts.max_seconds.map_or(own, |m| m.min(own));
        let max_duration = if max_s.is_finite() {
            Some(seconds("the scenario's duration_s", max_s)?)
        } else {
            None
        };
        let shape = format!("scenario {source} ({})", workload.kind());
        let mut s = ReplaySettings::new(target, out, traffic, shape, seed, max_duration)?;
        s.slo = slo;
        Ok(s)
    }

    /// Whether the run drains at its deadline, and the cap on it (sessions: the workload's own).
    pub fn drain_and_grace(&self) -> (bool, Duration) {
        match &self.traffic {
            Traffic::Sessions(w) => (
                w.drain,
                Duration::try_from_secs_f64(w.drain_grace_s).unwrap_or(self.drain_grace),
            ),
            _ => (self.drain, self.drain_grace),
        }
    }
}

/// Requests of an open-loop or closed-loop workload (none for sessions): the workload's own plan.
fn planned(w: &Workload, seed: u64) -> Vec<PlannedRequest> {
    w.requests(seed).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::workload::TraceWorkload;
    use std::sync::Arc;

    /// A chain (each request sent when the previous ends, like calibrate's returns phase) is one stream; requests
    /// without dependencies are one each; a request two others wait for forks a second stream.
    #[test]
    fn a_trace_warms_up_as_many_streams_as_it_can_have_in_flight() {
        let returns = shared::calibrate::plan_returns(2048, 32_768, Some(4)).expect("a phase");
        assert!(returns.requests.len() > 100);
        assert_eq!(Traffic::Trace(Arc::new(returns.clone())).expected_streams(), 1);
        let open: Vec<_> = returns
            .requests
            .iter()
            .take(100)
            .map(|r| shared::workload::TraceRequest {
                after: Vec::new(),
                ..r.clone()
            })
            .collect();
        assert_eq!(
            Traffic::Trace(Arc::new(TraceWorkload::inline(open.clone()))).expected_streams(),
            64
        );
        let mut fork = open[..3].to_vec();
        fork[1].after = vec![0];
        fork[2].after = vec![0];
        assert_eq!(trace_width(&TraceWorkload::inline(fork)), 2);
    }
}
