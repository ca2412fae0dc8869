//! Live runs: start, stop, stream records to any number of viewers, finish into the store.
//!
//! Each active run has an in-memory log of its records (seq = index) behind a mutex, the append-only
//! `records.jsonl` on disk, and a bounded `broadcast` channel of events. Appending a record writes and flushes
//! the file line, pushes it to the log and broadcasts it under one lock; a subscriber takes the backlog and
//! subscribes to the channel under the same lock, so it sees every record exactly once. The channel never
//! blocks the run: a viewer that falls behind gets `Lagged` and is told to resync from its last seq.

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::io::{BufWriter, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use shared::protocol::{ErrorCode, Limits, PAGE_BYTES, PAGE_RECORDS, RunInfo, RunState, ServerMsg, TargetInfo};
use shared::record::RequestRecord;
use shared::scenario::Scenario;
use tokio::sync::{broadcast, watch};

use super::store::{RecordCursor, RunStore, StoredRun};

/// A live target the operator configured. The page picks one by name; it can never supply a URL.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    /// Base URL including `/v1`, e.g. `http://127.0.0.1:8000/v1`.
    pub url: String,
    pub model: String,
    pub dialect: String,
    /// Name of the environment variable holding the API key (the key itself is read when a run starts).
    pub api_key_env: Option<String>,
    /// PEM file of extra CA certificates to trust for an `https://` target (`replay --ca-cert`).
    pub ca_cert: Option<String>,
    /// The built-in emulated engine.
    pub builtin: bool,
}

impl Target {
    /// The built-in emulated engine, target `sim`, served at `url` (its `/v1` base).
    pub fn sim(url: impl Into<String>) -> Target {
        Target {
            name: "sim".into(),
            url: url.into(),
            model: "sim".into(),
            dialect: "vllm".into(),
            api_key_env: None,
            ca_cert: None,
            builtin: true,
        }
    }

    pub fn info(&self) -> TargetInfo {
        TargetInfo {
            name: self.name.clone(),
            kind: if self.builtin { "sim" } else { "openai" }.into(),
            url: self.url.clone(),
            model: self.model.clone(),
            dialect: self.dialect.clone(),
        }
    }
}

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What executes a run: the replay client in production, a scripted fake in tests (hyperfine's
/// `Executor`/`MockExecutor` pattern). It pushes each finished request into `sink` and returns when the run
/// ends, or soon after `stop` turns true.
pub trait Driver: Send + Sync + 'static {
    fn run(
        &self,
        target: Target,
        scenario: serde_json::Value,
        sink: RunSink,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<()>>;

    /// Checks a scenario before a run starts; `Err` names what is wrong.
    fn validate(&self, scenario: &serde_json::Value, limits: &Limits) -> Result<(), String>;

    /// Scores a finished run's records (the shared scoring module); `None` when nothing can be scored.
    fn summarize(&self, scenario: &serde_json::Value, records: &[RequestRecord]) -> Option<serde_json::Value>;

    /// True when the driver writes `records.jsonl` itself (the replay client writes and flushes each line as a
    /// request ends); the sink then only keeps and broadcasts records.
    fn writes_records(&self) -> bool {
        false
    }
}

struct RunLog {
    records: Vec<RequestRecord>,
    /// `None` when the driver writes the file itself.
    file: Option<BufWriter<File>>,
}

/// One active run.
pub struct LiveRun {
    info: Mutex<RunInfo>,
    log: Mutex<RunLog>,
    events: broadcast::Sender<Arc<ServerMsg>>,
    stop: watch::Sender<bool>,
}

/// The handle a driver pushes records into.
#[derive(Clone)]
pub struct RunSink {
    run: Arc<LiveRun>,
    records_path: std::path::PathBuf,
}

impl RunSink {
    /// The run's `records.jsonl` (for drivers that write it themselves).
    pub fn records_path(&self) -> &std::path::Path {
        &self.records_path
    }

    /// The run's folder in the store.
    pub fn run_dir(&self) -> &std::path::Path {
        self.records_path.parent().unwrap_or(&self.records_path)
    }

    /// Appends one record: written and flushed to `records.jsonl`, kept for resuming viewers, broadcast live.
    pub fn push(&self, record: RequestRecord) {
        let run_id = self.run.info.lock().expect("run info lock").run_id.clone();
        let mut log = self.run.log.lock().expect("run log lock");
        let seq = log.records.len() as u64;
        if let Some(file) = &mut log.file
            && let Ok(line) = serde_json::to_string(&record)
        {
            // A failed disk write is logged, not fatal: the record still reaches viewers and the summary.
            if let Err(e) = writeln!(file, "{line}").and_then(|_| file.flush()) {
                tracing::error!("run {run_id}: writing record {seq}: {e}");
            }
        }
        log.records.push(record.clone());
        let _ = self
            .run
            .events
            .send(Arc::new(ServerMsg::Record { run_id, seq, record }));
        drop(log);
        self.run.info.lock().expect("run info lock").records = seq + 1;
    }
}

/// Where a subscriber starts: the backlog to send first, then live events; or a stored run read from disk.
pub enum Subscription {
    Live {
        backlog: Vec<(u64, RequestRecord)>,
        events: broadcast::Receiver<Arc<ServerMsg>>,
    },
    Stored {
        run: Box<StoredRun>,
        records: RecordCursor,
    },
}

/// One page of a run's records (`run_records`).
#[derive(Debug)]
pub struct Page {
    pub from_seq: u64,
    pub records: Vec<RequestRecord>,
    /// The seq to ask for next; `None` when the page holds the last record the run has now.
    pub next_seq: Option<u64>,
}

pub struct Runs {
    pub store: RunStore,
    pub targets: Vec<Target>,
    pub limits: Limits,
    driver: Arc<dyn Driver>,
    active: Mutex<HashMap<String, Arc<LiveRun>>>,
}

type Refusal = (ErrorCode, String);

impl Runs {
    pub fn new(store: RunStore, targets: Vec<Target>, limits: Limits, driver: Arc<dyn Driver>) -> Runs {
        Runs {
            store,
            targets,
            limits,
            driver,
            active: Mutex::new(HashMap::new()),
        }
    }

    pub fn target_infos(&self) -> Vec<TargetInfo> {
        self.targets.iter().map(Target::info).collect()
    }

    /// The driver's checks, then the agent's limits on what a workload may ask for ([`check_workload_limits`]).
    pub fn validate(&self, scenario: &serde_json::Value) -> Result<(), String> {
        self.driver.validate(scenario, &self.limits)?;
        match Scenario::from_value(scenario.clone()) {
            Ok(parsed) => check_workload_limits(&parsed, &self.limits),
            // The driver accepted a scenario that is not a `Scenario` (a test double): nothing to bound here.
            Err(_) => Ok(()),
        }
    }

    /// Starts a run of `scenario` against the configured target `target_name`.
    pub fn start(self: &Arc<Self>, target_name: &str, scenario: serde_json::Value) -> Result<RunInfo, Refusal> {
        let Some(target) = self.targets.iter().find(|t| t.name == target_name).cloned() else {
            let known: Vec<_> = self.targets.iter().map(|t| t.name.as_str()).collect();
            return Err((
                ErrorCode::UnknownTarget,
                format!("unknown target `{target_name}`; the agent offers: {}", known.join(", ")),
            ));
        };
        self.validate(&scenario).map_err(|e| (ErrorCode::InvalidScenario, e))?;
        let mut active = self.active.lock().expect("active runs lock");
        if active.len() >= self.limits.max_concurrent_runs as usize {
            return Err((
                ErrorCode::LimitExceeded,
                format!(
                    "{} run(s) already active; the limit is {}",
                    active.len(),
                    self.limits.max_concurrent_runs
                ),
            ));
        }
        let info = RunInfo {
            run_id: new_run_id(),
            target: target.name.clone(),
            state: RunState::Running,
            started_ms: now_ms(),
            ended_ms: None,
            records: 0,
            error: None,
        };
        let file = self
            .store
            .create(&info, &scenario)
            .map_err(|e| (ErrorCode::Internal, format!("{e:#}")))?;
        let file = (!self.driver.writes_records()).then(|| BufWriter::new(file));
        let records_path = self
            .store
            .records_path(&info.run_id)
            .map_err(|e| (ErrorCode::Internal, format!("{e:#}")))?;
        let (events, _) = broadcast::channel(256);
        let (stop, stop_rx) = watch::channel(false);
        let run = Arc::new(LiveRun {
            info: Mutex::new(info.clone()),
            log: Mutex::new(RunLog {
                records: Vec::new(),
                file,
            }),
            events,
            stop,
        });
        active.insert(info.run_id.clone(), run.clone());
        drop(active);

        let this = self.clone();
        let fut = self.driver.run(
            target,
            scenario.clone(),
            RunSink {
                run: run.clone(),
                records_path,
            },
            stop_rx,
        );
        tokio::spawn(async move {
            let outcome = fut.await;
            this.finish(&run, &scenario, outcome);
        });
        Ok(info)
    }

    fn finish(&self, run: &Arc<LiveRun>, scenario: &serde_json::Value, outcome: anyhow::Result<()>) {
        let stopped = *run.stop.borrow();
        let records = run.log.lock().expect("run log lock").records.clone();
        let summary = self.driver.summarize(scenario, &records);
        let info = {
            let mut info = run.info.lock().expect("run info lock");
            info.ended_ms = Some(now_ms());
            info.records = records.len() as u64;
            match outcome {
                Ok(()) if stopped => info.state = RunState::Stopped,
                Ok(()) => info.state = RunState::Finished,
                Err(e) => {
                    info.state = RunState::Failed;
                    info.error = Some(format!("{e:#}"));
                }
            }
            info.clone()
        };
        if let Some(summary) = &summary
            && let Err(e) = self.store.write_summary(&info.run_id, summary)
        {
            tracing::error!("run {}: writing summary: {e:#}", info.run_id);
        }
        if let Err(e) = self.store.write_info(&info) {
            tracing::error!("run {}: writing run.json: {e:#}", info.run_id);
        }
        self.active.lock().expect("active runs lock").remove(&info.run_id);
        let _ = run.events.send(Arc::new(ServerMsg::RunState {
            run_id: info.run_id.clone(),
            run: info,
            summary,
        }));
    }

    pub fn stop(&self, run_id: &str) -> Result<(), Refusal> {
        let active = self.active.lock().expect("active runs lock");
        let run = active
            .get(run_id)
            .ok_or_else(|| (ErrorCode::UnknownRun, format!("no active run `{run_id}`")))?;
        let _ = run.stop.send(true);
        Ok(())
    }

    pub fn list(&self) -> Result<Vec<RunInfo>, Refusal> {
        let mut runs = self.store.list().map_err(|e| (ErrorCode::Internal, format!("{e:#}")))?;
        let active = self.active.lock().expect("active runs lock");
        for info in &mut runs {
            if let Some(run) = active.get(&info.run_id) {
                *info = run.info.lock().expect("run info lock").clone();
            }
        }
        Ok(runs)
    }

    /// A run's metadata, scenario and summary (its records: [`Runs::records_page`]).
    pub fn fetch(&self, run_id: &str) -> Result<StoredRun, Refusal> {
        let mut stored = self
            .store
            .load(run_id)
            .map_err(|e| (ErrorCode::UnknownRun, format!("{e:#}")))?;
        if let Some(run) = self.active.lock().expect("active runs lock").get(run_id) {
            stored.info = run.info.lock().expect("run info lock").clone();
        }
        Ok(stored)
    }

    /// One page of a run's records from `from_seq`: an active run's from memory, a stored run's from disk through
    /// `cursor` when it stands at `from_seq` (the page asks for pages in order), else through a new one. Returns
    /// the cursor to keep for the next page. Blocking file I/O: call it off the async threads.
    pub fn records_page(
        &self,
        run_id: &str,
        from_seq: u64,
        cursor: Option<RecordCursor>,
    ) -> Result<(Page, Option<RecordCursor>), Refusal> {
        let active = self.active.lock().expect("active runs lock").get(run_id).cloned();
        if let Some(run) = active {
            let log = run.log.lock().expect("run log lock");
            let mut records = Vec::new();
            let mut bytes = 0;
            for r in log.records.iter().skip(from_seq as usize) {
                if records.len() >= PAGE_RECORDS || bytes >= PAGE_BYTES {
                    break;
                }
                bytes += json_len(r);
                records.push(r.clone());
            }
            let end = from_seq + records.len() as u64;
            let next_seq = (end < log.records.len() as u64).then_some(end);
            return Ok((
                Page {
                    from_seq,
                    records,
                    next_seq,
                },
                None,
            ));
        }
        let mut cursor = match cursor {
            Some(c) if c.run_id() == run_id && c.next_seq() == from_seq => c,
            _ => self
                .store
                .records(run_id, from_seq)
                .map_err(|e| (ErrorCode::UnknownRun, format!("{e:#}")))?,
        };
        let from_seq = cursor.next_seq();
        let (records, at_end) = cursor
            .page(PAGE_RECORDS, PAGE_BYTES)
            .map_err(|e| (ErrorCode::Internal, format!("{e:#}")))?;
        let next_seq = (!at_end).then(|| cursor.next_seq());
        Ok((
            Page {
                from_seq,
                records,
                next_seq,
            },
            next_seq.map(|_| cursor),
        ))
    }

    pub fn delete(&self, run_id: &str) -> Result<(), Refusal> {
        if self.active.lock().expect("active runs lock").contains_key(run_id) {
            return Err((
                ErrorCode::RunActive,
                format!("run `{run_id}` is still running; stop it first"),
            ));
        }
        self.store
            .delete(run_id)
            .map_err(|e| (ErrorCode::UnknownRun, format!("{e:#}")))
    }

    pub fn subscribe(&self, run_id: &str, from_seq: u64) -> Result<Subscription, Refusal> {
        if let Some(run) = self.active.lock().expect("active runs lock").get(run_id).cloned() {
            let log = run.log.lock().expect("run log lock");
            let backlog = log
                .records
                .iter()
                .enumerate()
                .skip(from_seq as usize)
                .map(|(i, r)| (i as u64, r.clone()))
                .collect();
            let events = run.events.subscribe();
            return Ok(Subscription::Live { backlog, events });
        }
        let run = self.fetch(run_id)?;
        let records = self
            .store
            .records(run_id, from_seq)
            .map_err(|e| (ErrorCode::UnknownRun, format!("{e:#}")))?;
        Ok(Subscription::Stored {
            run: Box::new(run),
            records,
        })
    }

    /// Stops every active run (agent shutdown) so their records are flushed and states written.
    pub fn stop_all(&self) {
        for run in self.active.lock().expect("active runs lock").values() {
            let _ = run.stop.send(true);
        }
    }

    pub fn active_count(&self) -> usize {
        self.active.lock().expect("active runs lock").len()
    }
}

/// Bytes of a record's JSON, for page sizes.
fn json_len(r: &RequestRecord) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, r);
    count.0
}

/// The agent's bounds on what one run's workload may ask for, checked before it starts: `Err` names the workload
/// field, the value, the limit and the flag that sets it.
///
/// - The arrival rate of an open-loop workload (`rate_rps`, `mean_rps`) ≤ `max_rate_per_run`.
/// - The requests in flight at once by the plan ≤ `max_concurrent_requests_per_run`: sessions and closed-loop
///   users have one each; an open-loop request is counted in flight from its arrival for as long as a request
///   meeting the scenario's SLO would take ([`shared::workload::Workload::peak_in_flight`]). A target slower
///   than its SLO holds more; `--max-run-seconds` still ends the run.
pub fn check_workload_limits(scenario: &Scenario, limits: &Limits) -> Result<(), String> {
    use shared::workload::Workload;
    let (workload, seed, slo) = match scenario {
        Scenario::Seed(s) => {
            let shared::seed_model::SeedWorkload::Bursty(b) = &s.workload;
            (Workload::Bursty(b.clone()), 0, s.slo)
        }
        Scenario::Engine(e) => (e.workload.clone(), e.seed, e.slo),
    };
    let rate = match &workload {
        Workload::Poisson(w) => Some(("rate_rps", w.rate_rps)),
        Workload::Gamma(w) => Some(("rate_rps", w.rate_rps)),
        Workload::Bursty(w) => Some(("mean_rps", w.mean_rps)),
        // A trace's rate: its requests over the span of their arrivals.
        Workload::Trace(w) => Some(("requests", w.rate_rps())),
        Workload::Sessions(_) | Workload::ClosedLoop(_) => None,
    };
    let closed_seed = matches!(scenario, Scenario::Seed(s) if s.closed_loop);
    if let Some((field, rps)) = rate
        && !closed_seed
        && rps > limits.max_rate_per_run
    {
        return Err(format!(
            "workload.{field} is {rps} requests/s; this agent allows at most {} per run (--max-rate-per-run)",
            limits.max_rate_per_run
        ));
    }
    let max = u64::from(limits.max_concurrent_requests_per_run);
    let request_ms = |output_tokens: u32| {
        let streamed = slo.ttft_ms + slo.tpot_ms * f64::from(output_tokens.saturating_sub(1));
        slo.e2e_ms.map_or(streamed, |e2e| streamed.min(e2e))
    };
    let peak = if closed_seed {
        1
    } else {
        workload.peak_in_flight(seed, request_ms, max)
    };
    if peak > max {
        let what = match &workload {
            Workload::Sessions(w) => match &w.ladder {
                Some(_) => format!("workload.ladder runs {} sessions at once", w.slot_count()),
                None => format!("workload.sessions is {}", w.sessions),
            },
            Workload::ClosedLoop(w) => format!("workload.users is {}", w.users),
            Workload::Poisson(_) | Workload::Gamma(_) | Workload::Bursty(_) | Workload::Trace(_) => {
                let (field, rps) = rate.unwrap_or(("rate_rps", 0.0));
                format!(
                    "workload.{field} = {rps} requests/s would hold more than {max} requests in flight at once \
                     (each counted for as long as a request meeting the scenario's SLO takes)"
                )
            }
        };
        return Err(format!(
            "{what}; this agent allows at most {max} requests in flight per run (--max-concurrent-requests-per-run)"
        ));
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn new_run_id() -> String {
    format!("r{}-{:04x}", now_ms(), super::store::unique() & 0xffff)
}
