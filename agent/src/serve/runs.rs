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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::capacity::{CapacityReport, CapacitySpec, Knob, LiveLevel, MAX_LEVELS};
use shared::protocol::{
    CapacityOptions, DEFAULT_CALIBRATION_BUDGET_S, ErrorCode, FitSummary, Limits, MIN_CALIBRATION_BUDGET_S, PAGE_BYTES,
    PAGE_RECORDS, RunInfo, RunKind, RunState, ServerMsg, TargetFleetInfo, TargetInfo, TargetLimits, TargetProfile,
};
use shared::record::RequestRecord;
use shared::scenario::Scenario;
use tokio::sync::{broadcast, watch};

use super::store::{RecordCursor, RunStore, StoredRun};
use crate::capacity::{AdmitFn, Ask, BoundsOverride, LiveOptions, Plan};

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
    /// A fleet: several URLs a run's requests are spread over (`replay --url A --url B --router ...`); `None`:
    /// every request to `url`.
    pub fleet: Option<TargetFleet>,
}

/// A fleet target's replicas and router, as the operator configured them (`--target
/// NAME=URL0,url=URL1,router=R,load_cap=X`, or `urls = [...]` in `--config`).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetFleet {
    /// Every replica's base URL including `/v1`; `urls[0]` is the target's `url`.
    pub urls: Vec<String>,
    /// `None`: the scenario's `fleet.router`, else `round_robin` (as `replay` picks).
    pub router: Option<shared::engine::Router>,
    /// `None`: the scenario's `fleet.load_cap`, else 1.5.
    pub load_cap: Option<f64>,
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
            fleet: None,
        }
    }

    pub fn info(&self) -> TargetInfo {
        TargetInfo {
            name: self.name.clone(),
            kind: if self.builtin { "sim" } else { "openai" }.into(),
            url: self.url.clone(),
            model: self.model.clone(),
            dialect: self.dialect.clone(),
            fleet: self.fleet.as_ref().map(|f| TargetFleetInfo {
                urls: f.urls.clone(),
                router: f.router,
                load_cap: f.load_cap,
            }),
            profile: None,
            limits: None,
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

    /// Runs a live capacity search (`crate::capacity::run`) in the sink's run folder: each finished level goes to
    /// [`RunSink::level`], each record is counted with [`RunSink::count_record`]; returns the report
    /// (`capacity.json`). Ends soon after `stop` turns true (the running level cut, its records kept).
    fn capacity(
        &self,
        target: Target,
        job: CapacityJob,
        sink: RunSink,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<serde_json::Value>> {
        let _ = (target, job, sink, stop);
        Box::pin(async { anyhow::bail!("this agent cannot run capacity searches") })
    }

    /// Calibrates `target` as `loadshape calibrate --url` does, with a probe budget of `budget_s` seconds, writing
    /// its files under the sink's run folder; each step of the probe goes to [`RunSink::calibration_progress`].
    /// Returns the fit. The run stops it by dropping the future.
    fn calibrate(
        &self,
        target: Target,
        budget_s: f64,
        sink: RunSink,
    ) -> BoxFuture<anyhow::Result<shared::calibrate::Fit>> {
        let _ = (target, budget_s, sink);
        Box::pin(async { anyhow::bail!("this agent cannot calibrate targets") })
    }
}

/// A live capacity search, checked and planned: what [`Driver::capacity`] runs.
pub struct CapacityJob {
    pub plan: Plan,
    pub options: LiveOptions,
    /// The agent's limits on each level's workload ([`check_workload_limits`] and the driver's own checks).
    pub admit: AdmitFn,
}

struct RunLog {
    records: Vec<RequestRecord>,
    /// `None` when the driver writes the file itself.
    file: Option<BufWriter<File>>,
    /// A capacity search's events so far (`capacity_level`), a calibration's last `calibration_progress` and its
    /// result: sent to a viewer that subscribes late.
    events: Vec<Arc<ServerMsg>>,
}

/// One active run.
pub struct LiveRun {
    info: Mutex<RunInfo>,
    log: Mutex<RunLog>,
    events: broadcast::Sender<Arc<ServerMsg>>,
    stop: watch::Sender<bool>,
    /// The run was stopped at the agent's `max_run_seconds` (a capacity search's levels together).
    over_limit: AtomicBool,
    /// When a capacity search last told its viewers its record count ([`RunSink::count_record`]).
    last_count: Mutex<Option<std::time::Instant>>,
}

/// How often a capacity search tells its viewers how many records it has so far (a `run_state` while running).
pub const RECORD_COUNT_EVERY: Duration = Duration::from_millis(500);

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

    /// Counts one record of a capacity search (its records are in the level files, not in the run's log), and
    /// tells the viewers the count so far (a `run_state`, still running) at most every [`RECORD_COUNT_EVERY`].
    pub fn count_record(&self) {
        let info = {
            let mut info = self.run.info.lock().expect("run info lock");
            info.records += 1;
            info.clone()
        };
        let mut last = self.run.last_count.lock().expect("record count lock");
        if last.is_none_or(|t| t.elapsed() >= RECORD_COUNT_EVERY) {
            *last = Some(std::time::Instant::now());
            let _ = self.run.events.send(Arc::new(ServerMsg::RunState {
                run_id: info.run_id.clone(),
                run: info,
                summary: None,
            }));
        }
    }

    /// A calibration's step: broadcast live, the latest kept for late viewers (in place of the one before), its
    /// requests counted as the run's records.
    pub fn calibration_progress(&self, status: &crate::cmd::calibrate::ProbeStatus, budget_s: f64) {
        let run_id = {
            let mut info = self.run.info.lock().expect("run info lock");
            info.records = status.requests;
            info.run_id.clone()
        };
        let msg = Arc::new(ServerMsg::CalibrationProgress {
            run_id,
            phase: status.phase.clone(),
            phase_index: status.phase_index as u32,
            phases: status.phases as u32,
            requests: status.requests,
            elapsed_s: status.elapsed_s,
            budget_s,
        });
        let mut log = self.run.log.lock().expect("run log lock");
        if matches!(
            log.events.last().map(|m| &**m),
            Some(ServerMsg::CalibrationProgress { .. })
        ) {
            log.events.pop();
        }
        log.events.push(msg.clone());
        let _ = self.run.events.send(msg);
    }

    /// A capacity search finished its level number `index`: kept for late viewers and broadcast live.
    pub fn level(&self, index: usize, level: &LiveLevel) {
        let run_id = self.run.info.lock().expect("run info lock").run_id.clone();
        let msg = Arc::new(ServerMsg::CapacityLevel {
            run_id,
            index: index as u32,
            level: Box::new(level.clone()),
        });
        let mut log = self.run.log.lock().expect("run log lock");
        log.events.push(msg.clone());
        let _ = self.run.events.send(msg);
    }
}

/// Where a subscriber starts: the backlog to send first, then live events; or a stored run read from disk.
pub enum Subscription {
    Live {
        backlog: Vec<(u64, RequestRecord)>,
        /// A capacity search's level events so far, sent after the records' backlog.
        backlog_events: Vec<Arc<ServerMsg>>,
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
    /// What each target said of its limits ([`Runs::discover_limits`]).
    found_limits: Mutex<HashMap<String, TargetLimits>>,
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
            found_limits: Mutex::new(HashMap::new()),
        }
    }

    /// Asks each target, in the background, what it says of its limits (llama.cpp `/props`, vLLM `/v1/models`:
    /// the requests `calibrate --url` starts with, sent only to the configured URLs); [`Runs::target_infos`]
    /// carries the answers from then on.
    pub fn discover_limits(self: &Arc<Self>) {
        for t in &self.targets {
            let (runs, t) = (self.clone(), t.clone());
            tokio::spawn(async move {
                let key = t.api_key_env.as_ref().and_then(|v| std::env::var(v).ok());
                let d = crate::cmd::calibrate::discover(&t.url, key.as_deref()).await;
                if d.max_model_len.is_none() && d.max_num_seqs.is_none() {
                    return;
                }
                let limits = TargetLimits {
                    max_model_len: d.max_model_len,
                    max_num_seqs: d.max_num_seqs,
                    sources: d.sources,
                };
                runs.found_limits
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(t.name.clone(), limits);
            });
        }
    }

    /// The targets as the page sees them, each with its calibrated profile when it has one and the limits it
    /// reported.
    pub fn target_infos(&self) -> Vec<TargetInfo> {
        let mut profiles = self.store.target_profiles();
        let found = self.found_limits.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.targets
            .iter()
            .map(|t| TargetInfo {
                profile: profiles.remove(&t.name).map(Box::new),
                limits: found.get(&t.name).cloned(),
                ..t.info()
            })
            .collect()
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

    /// Starts a run of `scenario` against the configured target `target_name`, named `name` in the history.
    pub fn start(
        self: &Arc<Self>,
        target_name: &str,
        scenario: serde_json::Value,
        name: Option<&str>,
    ) -> Result<RunInfo, Refusal> {
        let target = self.target(target_name)?;
        let name = shared::protocol::run_name(name).map_err(|e| (ErrorCode::InvalidScenario, e))?;
        self.validate(&scenario).map_err(|e| (ErrorCode::InvalidScenario, e))?;
        let about = Scenario::from_value(scenario.clone())
            .ok()
            .map(|s| shared::protocol::scenario_about(&s));
        let (info, run, records_path, stop_rx) = self.open_run(&target, &scenario, RunKind::Replay, name, about)?;
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

    /// Starts a live capacity search of `scenario` against the configured target `target_name`: the same
    /// target, limit and scenario checks as [`Runs::start`], the search's loads capped by the agent's limits
    /// (sessions/users by `max_sessions_per_run` and `max_concurrent_requests_per_run`, rates by
    /// `max_rate_per_run`), each level at most `max_run_seconds` long and checked against the limits before it
    /// runs. Runs the simulated search first (CPU-bound: call it off the async threads); returns the run, the
    /// simulated search and whether the live search is guided by it.
    pub fn start_capacity(
        self: &Arc<Self>,
        target_name: &str,
        scenario: serde_json::Value,
        options: &CapacityOptions,
    ) -> Result<(RunInfo, CapacityReport, bool), Refusal> {
        self.start_capacity_named(target_name, scenario, options, None)
    }

    /// [`Runs::start_capacity`], the run named `name` in the history.
    pub fn start_capacity_named(
        self: &Arc<Self>,
        target_name: &str,
        scenario: serde_json::Value,
        options: &CapacityOptions,
        name: Option<&str>,
    ) -> Result<(RunInfo, CapacityReport, bool), Refusal> {
        let target = self.target(target_name)?;
        let name = shared::protocol::run_name(name).map_err(|e| (ErrorCode::InvalidScenario, e))?;
        self.validate(&scenario).map_err(|e| (ErrorCode::InvalidScenario, e))?;
        let bad = |e: String| (ErrorCode::InvalidScenario, e);
        if let Some(f) = &target.fleet {
            return Err(bad(format!(
                "target `{target_name}` is a fleet of {} replicas: a live capacity search measures one server; pick \
                 a target of one URL, or search a fleet's capacity in the simulator (the scenario's `fleet`)",
                f.urls.len()
            )));
        }
        let Ok(Scenario::Engine(engine)) = Scenario::from_value(scenario.clone()) else {
            return Err(bad(
                "model must be \"engine\" for a capacity search (the seed model has no knob to scale)".to_string(),
            ));
        };
        let repeat = options.repeat.unwrap_or(1);
        if !(1..=100).contains(&repeat) {
            return Err(bad(format!("options.repeat must be in 1..=100 (got {repeat})")));
        }
        if let Some(d) = options.duration_s
            && !(d.is_finite() && d > 0.0)
        {
            return Err(bad(format!(
                "options.duration_s must be a positive number of seconds (got {d})"
            )));
        }
        let max_levels = options.max_levels.unwrap_or(MAX_LEVELS);
        if !(1..=MAX_LEVELS).contains(&max_levels) {
            return Err(bad(format!(
                "options.max_levels must be in 1..={MAX_LEVELS} (got {max_levels})"
            )));
        }
        let goal = options
            .goal
            .unwrap_or_else(|| shared::capacity::Goal::from_slo(&engine.slo));
        // The highest load the agent's limits allow for the knob.
        let spec = CapacitySpec {
            knob: options.knob,
            goal,
            bounds: None,
            window: shared::capacity::Window::default(),
        };
        let (knob, current, defaults) = spec.resolve(&engine).map_err(|e| bad(e.to_string()))?;
        let limit = match knob {
            Knob::Sessions | Knob::Users => f64::from(
                self.limits
                    .max_sessions_per_run
                    .min(self.limits.max_concurrent_requests_per_run),
            ),
            Knob::RateRps => self.limits.max_rate_per_run,
            Knob::Speedup => match &engine.workload {
                shared::workload::Workload::Trace(t) if t.rate_rps() > 0.0 => {
                    current * self.limits.max_rate_per_run / t.rate_rps()
                }
                _ => defaults.max,
            },
        };
        // Each level lasts at most the agent's run limit: a sessions workload's own length is cut to it (and
        // with it the steady-state window); other plans are cut by it only if they run that long.
        let max_s = self.limits.max_run_seconds;
        let own = match &engine.workload {
            shared::workload::Workload::Sessions(w) => Some(w.duration_s),
            _ => None,
        };
        let duration = match (options.duration_s, own) {
            (Some(d), _) => Some(d.min(max_s)),
            (None, Some(o)) if o > max_s => Some(max_s),
            _ => None,
        };
        let ask = Ask {
            knob: Some(knob),
            goal,
            warmup_fraction: spec.window.warmup_fraction,
            bounds: BoundsOverride {
                resolution: options.resolution,
                min: None,
                max: Some(defaults.max.min(limit)),
                max_levels: Some(max_levels),
            },
            duration,
        };
        let engine_about = engine.clone();
        let plan = crate::capacity::plan(engine, &ask).map_err(|e| bad(format!("{e:#}")))?;
        let simulated = plan.simulated.clone();
        let guided = !options.no_guide && simulated.capacity.is_some();
        let live = LiveOptions {
            guided: !options.no_guide,
            duration,
            repeat,
            max_level_seconds: Some(max_s),
            upper_limit: (limit < defaults.max).then(|| "the agent's per-run limit".to_string()),
            ..LiveOptions::default()
        };
        let admit: AdmitFn = {
            let this = self.clone();
            Arc::new(move |level| this.validate(&Scenario::Engine(level.clone()).to_value()))
        };
        let about = format!(
            "capacity search of {}",
            shared::protocol::scenario_about(&Scenario::Engine(engine_about))
        );
        let (info, run, records_path, stop_rx) =
            self.open_run(&target, &scenario, RunKind::Capacity, name, Some(about))?;
        let this = self.clone();
        let fut = self.driver.capacity(
            target,
            CapacityJob {
                plan,
                options: live,
                admit,
            },
            RunSink {
                run: run.clone(),
                records_path,
            },
            stop_rx,
        );
        // The whole search, every level and repeat, is one run: bounded by the agent's run limit like any other.
        let limit = Duration::from_secs_f64(self.limits.max_run_seconds);
        tokio::spawn(async move {
            tokio::pin!(fut);
            let outcome = match tokio::time::timeout(limit, &mut fut).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    run.over_limit.store(true, Ordering::Relaxed);
                    let _ = run.stop.send(true);
                    fut.await
                }
            };
            this.finish_capacity(&run, outcome);
        });
        Ok((info, simulated, guided))
    }

    /// Starts a calibration of the configured target `target_name`: its probe of `budget_s` seconds (default
    /// [`DEFAULT_CALIBRATION_BUDGET_S`], at least [`MIN_CALIBRATION_BUDGET_S`], at most the agent's
    /// `max_run_seconds`), then the fit, kept with the target. A calibration needs the server to itself: refused
    /// while the target runs anything else (and other runs are refused while it calibrates). The whole
    /// calibration is bounded by `max_run_seconds` like any run.
    pub fn start_calibration(
        self: &Arc<Self>,
        target_name: &str,
        budget_s: Option<f64>,
    ) -> Result<(RunInfo, f64), Refusal> {
        let target = self.target(target_name)?;
        let bad = |e: String| (ErrorCode::InvalidScenario, e);
        if let Some(f) = &target.fleet {
            return Err(bad(format!(
                "target `{target_name}` is a fleet of {} replicas: a calibration measures one server; configure one                  replica as its own target and calibrate that",
                f.urls.len()
            )));
        }
        if target.ca_cert.is_some() {
            return Err(bad(format!(
                "target `{target_name}` has its own CA certificate, which a calibration does not use yet; calibrate                  it with `loadshape calibrate --url`"
            )));
        }
        let budget = budget_s.unwrap_or(DEFAULT_CALIBRATION_BUDGET_S.min(self.limits.max_run_seconds));
        if !(budget.is_finite() && budget >= MIN_CALIBRATION_BUDGET_S) {
            return Err(bad(format!(
                "budget_s must be at least {MIN_CALIBRATION_BUDGET_S} seconds (got {budget})"
            )));
        }
        if budget > self.limits.max_run_seconds {
            return Err((
                ErrorCode::LimitExceeded,
                format!(
                    "budget_s is {budget} s; this agent allows runs of at most {} s (--max-run-seconds)",
                    self.limits.max_run_seconds
                ),
            ));
        }
        let ask = serde_json::json!({"calibrate": {"target": target_name, "budget_s": budget}});
        let about = format!("calibration, a {budget} s probe");
        let (info, run, records_path, stop_rx) =
            self.open_run(&target, &ask, RunKind::Calibration, None, Some(about))?;
        let sink = RunSink {
            run: run.clone(),
            records_path,
        };
        let fut = self.driver.calibrate(target, budget, sink);
        let this = self.clone();
        let limit = Duration::from_secs_f64(self.limits.max_run_seconds);
        tokio::spawn(async move {
            let mut stop = stop_rx;
            let outcome = tokio::select! {
                r = tokio::time::timeout(limit, fut) => match r {
                    Ok(outcome) => outcome,
                    Err(_) => Err(anyhow::anyhow!(
                        "stopped at this agent's limit of {} s for a run (--max-run-seconds)",
                        limit.as_secs_f64()
                    )),
                },
                // Stopped: the probe's requests are cut by dropping it; what it wrote stays in the run's folder.
                () = async {
                    while !*stop.borrow_and_update() {
                        if stop.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                } => {
                    Err(anyhow::anyhow!("stopped before the fit"))
                }
            };
            this.finish_calibration(&run, budget, outcome);
        });
        Ok((info, budget))
    }

    fn finish_calibration(&self, run: &Arc<LiveRun>, budget_s: f64, outcome: anyhow::Result<shared::calibrate::Fit>) {
        let stopped = *run.stop.borrow();
        let mut info = run.info.lock().expect("run info lock").clone();
        info.ended_ms = Some(now_ms());
        let mut calibration = None;
        match outcome {
            Ok(fit) => {
                let c = TargetProfile {
                    target: info.target.clone(),
                    run_id: info.run_id.clone(),
                    calibrated_ms: now_ms(),
                    budget_s,
                    profile: fit.profile,
                    fit: FitSummary {
                        decode_r2: fit.decode.r2,
                        decode_requests: fit.decode.n as u64,
                        prefill_r2: fit.prefill.r2,
                        prefill_requests: fit.prefill.n as u64,
                        decode_spread: fit.decode.relative_mad,
                        prefill_spread: fit.prefill.relative_mad,
                        unused: fit.unused.len() as u64,
                        notes: fit.notes,
                    },
                };
                match self.store.save_calibration(&c) {
                    Ok(()) => {
                        info.state = RunState::Finished;
                        calibration = Some(c);
                    }
                    Err(e) => {
                        info.state = RunState::Failed;
                        info.error = Some(format!("keeping the fitted profile: {e:#}"));
                    }
                }
            }
            Err(_) if stopped => info.state = RunState::Stopped,
            Err(e) => {
                info.state = RunState::Failed;
                info.error = Some(format!("{e:#}"));
            }
        }
        *run.info.lock().expect("run info lock") = info.clone();
        let result = calibration.map(|c| ServerMsg::CalibrationResult {
            run_id: info.run_id.clone(),
            calibration: Box::new(c),
        });
        self.end_with_result(run, info, result);
    }

    /// A calibration's or capacity search's end, once its `info` holds the final state: `run.json` written, its
    /// result (if any) logged for late viewers and sent, the run no longer active, the final `run_state` sent.
    fn end_with_result(&self, run: &Arc<LiveRun>, info: RunInfo, result: Option<ServerMsg>) {
        if let Err(e) = self.store.write_info(&info) {
            tracing::error!("run {}: writing run.json: {e:#}", info.run_id);
        }
        if let Some(msg) = result {
            let msg = Arc::new(msg);
            run.log.lock().expect("run log lock").events.push(msg.clone());
            let _ = run.events.send(msg);
        }
        self.active.lock().expect("active runs lock").remove(&info.run_id);
        let _ = run.events.send(Arc::new(ServerMsg::RunState {
            run_id: info.run_id.clone(),
            run: info,
            summary: None,
        }));
    }

    fn target(&self, target_name: &str) -> Result<Target, Refusal> {
        self.targets
            .iter()
            .find(|t| t.name == target_name)
            .cloned()
            .ok_or_else(|| {
                let known: Vec<_> = self.targets.iter().map(|t| t.name.as_str()).collect();
                (
                    ErrorCode::UnknownTarget,
                    format!("unknown target `{target_name}`; the agent offers: {}", known.join(", ")),
                )
            })
    }

    /// A new active run of `kind` in the store (the limit on concurrent runs checked), before its driver starts.
    fn open_run(
        &self,
        target: &Target,
        scenario: &serde_json::Value,
        kind: RunKind,
        name: Option<String>,
        about: Option<String>,
    ) -> Result<(RunInfo, Arc<LiveRun>, std::path::PathBuf, watch::Receiver<bool>), Refusal> {
        let mut active = self.active.lock().expect("active runs lock");
        // A calibration times the server: it runs alone on its target.
        for other in active.values() {
            let o = other.info.lock().expect("run info lock");
            if o.target == target.name && (kind == RunKind::Calibration || o.kind == RunKind::Calibration) {
                let what = if o.kind == RunKind::Calibration {
                    "is being calibrated"
                } else {
                    "is busy"
                };
                return Err((
                    ErrorCode::RunActive,
                    format!(
                        "target `{}` {what} (run `{}`): a calibration needs the server to itself; wait for it to end                          or stop it",
                        target.name, o.run_id
                    ),
                ));
            }
        }
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
            kind,
            target: target.name.clone(),
            state: RunState::Running,
            started_ms: now_ms(),
            ended_ms: None,
            records: 0,
            error: None,
            name,
            about,
        };
        let file = self
            .store
            .create(&info, scenario)
            .map_err(|e| (ErrorCode::Internal, format!("{e:#}")))?;
        let file = (kind == RunKind::Replay && !self.driver.writes_records()).then(|| BufWriter::new(file));
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
                events: Vec::new(),
            }),
            events,
            stop,
            over_limit: AtomicBool::new(false),
            last_count: Mutex::new(None),
        });
        active.insert(info.run_id.clone(), run.clone());
        Ok((info, run, records_path, stop_rx))
    }

    fn finish_capacity(&self, run: &Arc<LiveRun>, outcome: anyhow::Result<serde_json::Value>) {
        let stopped = *run.stop.borrow();
        let (info, report) = {
            let mut info = run.info.lock().expect("run info lock");
            info.ended_ms = Some(now_ms());
            let report = match outcome {
                Ok(report) => {
                    info.state = if stopped { RunState::Stopped } else { RunState::Finished };
                    if run.over_limit.load(Ordering::Relaxed) {
                        info.error = Some(format!(
                            "stopped at this agent's limit of {} s for a whole run, every level and repeat together \
                             (--max-run-seconds); the levels measured are kept",
                            self.limits.max_run_seconds
                        ));
                    }
                    Some(report)
                }
                Err(e) => {
                    info.state = RunState::Failed;
                    info.error = Some(format!("{e:#}"));
                    None
                }
            };
            (info.clone(), report)
        };
        let result = report.map(|report| ServerMsg::CapacityResult {
            run_id: info.run_id.clone(),
            report,
        });
        self.end_with_result(run, info, result);
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
            let backlog_events = log.events.clone();
            let events = run.events.subscribe();
            return Ok(Subscription::Live {
                backlog,
                backlog_events,
                events,
            });
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
    if let Workload::Trace(t) = &workload
        && t.needs_file()
    {
        return Err(format!(
            "workload.path names a trace file ({:?}), which the agent does not read for a page: load the trace \
             into the page (its requests go with the scenario) and start the run again",
            t.path.as_deref().unwrap_or_default()
        ));
    }
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
