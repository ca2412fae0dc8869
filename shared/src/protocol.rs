//! The websocket protocol between the page and the agent, defined once for both sides.
//!
//! Every message is JSON `{"type": "...", "data": {...}}` (serde `tag`/`content`). The page sends [`ClientMsg`]s,
//! each with a request id `id` that the agent echoes in its reply; the agent sends [`ServerMsg`]s. The first
//! exchange is `hello`: a page whose [`PROTOCOL_VERSION`] differs from the agent's gets a `version_mismatch` error.
//!
//! Live runs stream their records as [`ServerMsg::Record`] events numbered by `seq`: the index of the record in the
//! run's `records.jsonl`, from 0, so a page that reconnects subscribes again `from_seq` = the last seq it saw + 1
//! and receives every record exactly once. A page too slow to keep up is sent [`ServerMsg::Resync`] and
//! resubscribes from its last seq; the run itself never waits for a viewer.
//!
//! A stored run is read in pages: `fetch_run` answers with the run's metadata, scenario and summary, and
//! `fetch_records` with at most [`PAGE_RECORDS`] records (and about [`PAGE_BYTES`] of JSON) from a seq on, plus the
//! seq to ask for next, so neither side ever holds a whole large run in one message.
//!
//! A live capacity search (`start_capacity`) is a run of kind [`RunKind::Capacity`]: the reply carries the
//! simulated search that guides it, each finished level arrives as a [`ServerMsg::CapacityLevel`] event and the
//! report as [`ServerMsg::CapacityResult`] (then the final `run_state`) to the run's subscribers; `stop_run` ends
//! it. See `docs/protocol.md`.
//!
//! A calibration (`start_calibration`) is a run of kind [`RunKind::Calibration`]: the agent probes the configured
//! target as `loadshape calibrate --url` does, each step arrives as a [`ServerMsg::CalibrationProgress`] event, the
//! fitted profile as [`ServerMsg::CalibrationResult`] (then the final `run_state`); the agent keeps the profile with
//! the target ([`TargetInfo::profile`]). A target runs one calibration, or other runs, at a time.

use serde::{Deserialize, Serialize};

use crate::capacity::{CapacityReport, Goal, Knob, LiveLevel};
use crate::record::RequestRecord;
pub use crate::version::{LOADSHAPE_VERSION, PROTOCOL_VERSION};

/// Messages from the page to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMsg {
    /// First message on a socket: the page's protocol version and a free-form client name.
    Hello { id: u64, protocol: u32, client: String },
    /// The targets the operator configured (the page can pick among them, never supply a URL).
    ListTargets { id: u64 },
    /// Check a scenario without running it.
    ValidateScenario { id: u64, scenario: serde_json::Value },
    /// Start a live run of `scenario` against the configured target named `target`.
    StartRun {
        id: u64,
        scenario: serde_json::Value,
        target: String,
        /// What the user calls this run (shown in the history); at most [`MAX_RUN_NAME_CHARS`] characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Stop a running run: no new sessions start, in-flight requests are cut, records are kept.
    StopRun { id: u64, run_id: String },
    /// All runs in the store, newest first.
    ListRuns { id: u64 },
    /// One run: its metadata, scenario and summary; its records come page by page with `fetch_records`.
    FetchRun { id: u64, run_id: String },
    /// One page of a run's records, from seq `from_seq` on (0 for the first page).
    FetchRecords { id: u64, run_id: String, from_seq: u64 },
    /// Delete a finished run from the store.
    DeleteRun { id: u64, run_id: String },
    /// Stream a run's records from `from_seq` on (0 for all), then live as they arrive.
    Subscribe { id: u64, run_id: String, from_seq: u64 },
    /// Stop streaming a run to this socket.
    Unsubscribe { id: u64, run_id: String },
    /// Start a live capacity search of `scenario` (an engine scenario: its workload's knob is scaled, its profile
    /// guides the search) against the configured target `target`. Stop it with `stop_run`.
    StartCapacity {
        id: u64,
        scenario: serde_json::Value,
        target: String,
        #[serde(default)]
        options: CapacityOptions,
        /// As `start_run`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Calibrate the configured target `target`: probe it for about `budget_s` seconds (default
    /// [`DEFAULT_CALIBRATION_BUDGET_S`]) and fit its profile, as `loadshape calibrate --url` does. Stop it with
    /// `stop_run`.
    StartCalibration {
        id: u64,
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_s: Option<f64>,
    },
}

/// The longest run name (`start_run`'s `name`), characters.
pub const MAX_RUN_NAME_CHARS: usize = 100;

/// The probe budget of a calibration started without one, seconds.
pub const DEFAULT_CALIBRATION_BUDGET_S: f64 = 120.0;

/// The least probe budget a calibration takes, seconds (as `loadshape calibrate --budget`).
pub const MIN_CALIBRATION_BUDGET_S: f64 = 5.0;

/// What a live capacity search started from the page asks for; every field is optional, as are the flags of
/// `loadshape capacity` they stand for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityOptions {
    /// `--knob`; default: the workload's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knob: Option<Knob>,
    /// `--goal`, `--attainment`, `--per`; default: the scenario's SLOs for 95 % of requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    /// `--resolution`; default: 1 for counts, 2 % of the scenario's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<f64>,
    /// `--max-levels`; default 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_levels: Option<u32>,
    /// `--no-guide`: plain doubling + bisection, not a bracket around the simulated capacity.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_guide: bool,
    /// `--duration`: each level runs at most this many seconds (and at most the agent's `max_run_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// `--repeat`; default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
}

/// Messages from the agent to the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum ServerMsg {
    /// Reply to `hello`: the agent's protocol, release and limits.
    Hello {
        id: u64,
        protocol: u32,
        agent_version: String,
        limits: Limits,
    },
    /// Reply to `list_targets`.
    Targets { id: u64, targets: Vec<TargetInfo> },
    /// Reply to `validate_scenario`: `error` names what is wrong, `None` when valid.
    Validated {
        id: u64,
        valid: bool,
        error: Option<String>,
    },
    /// Reply to `start_run`.
    RunStarted { id: u64, run: RunInfo },
    /// Reply to `stop_run`; the run's final state arrives as a `run_state` event.
    StopRequested { id: u64, run_id: String },
    /// Reply to `list_runs`.
    Runs { id: u64, runs: Vec<RunInfo> },
    /// Reply to `fetch_run`; the records follow on request (`fetch_records` from seq 0).
    Run {
        id: u64,
        run: RunInfo,
        scenario: serde_json::Value,
        summary: Option<serde_json::Value>,
    },
    /// Reply to `fetch_records`: the records with seqs `from_seq..from_seq + records.len()`, and `next_seq`, the seq
    /// to ask for next, or `None` when this page holds the last record the run has now.
    RunRecords {
        id: u64,
        run_id: String,
        from_seq: u64,
        records: Vec<RequestRecord>,
        next_seq: Option<u64>,
    },
    /// Reply to `delete_run`.
    RunDeleted { id: u64, run_id: String },
    /// Reply to `subscribe`: records `from_seq..` follow as `record` events.
    Subscribed { id: u64, run_id: String, from_seq: u64 },
    /// Reply to `unsubscribe`.
    Unsubscribed { id: u64, run_id: String },
    /// Event: one finished request of a run, `seq` = its index in the run's records.
    Record {
        run_id: String,
        seq: u64,
        record: RequestRecord,
    },
    /// Event: a run changed state (sent to its subscribers); `summary` is set once it ended.
    RunState {
        run_id: String,
        run: RunInfo,
        summary: Option<serde_json::Value>,
    },
    /// Event: this socket fell behind a run's stream; subscribe again from `next_seq` (nothing was skipped
    /// in the store, only in this socket's buffer).
    Resync { run_id: String, next_seq: u64 },
    /// A request could not be served; `id` is the request's id (0 when the message could not be parsed).
    Error { id: u64, code: ErrorCode, message: String },
    /// Reply to `start_capacity`: the search's run (kind `capacity`; subscribe to it for its levels) and the
    /// simulated search that guides it (`guided`: the live search starts at the simulated capacity).
    CapacityStarted {
        id: u64,
        run: RunInfo,
        simulated: CapacityReport,
        guided: bool,
    },
    /// Event: a capacity search finished its level number `index` (from 0, in the order run).
    CapacityLevel {
        run_id: String,
        index: u32,
        level: Box<LiveLevel>,
    },
    /// Event: a capacity search ended; `report` is its `capacity.json` (what `loadshape capacity --json` prints
    /// for a live search). The final `run_state` follows.
    CapacityResult { run_id: String, report: serde_json::Value },
    /// Reply to `start_calibration`: the calibration's run (kind `calibration`; subscribe to it for its progress)
    /// and the probe budget it runs with.
    CalibrationStarted { id: u64, run: RunInfo, budget_s: f64 },
    /// Event: a calibration started a phase or ended one of its requests. `phase` is the probe phase's name, or
    /// `fit` once the probe is done; `phase_index` counts from 1 to `phases` (the fit is the last).
    CalibrationProgress {
        run_id: String,
        phase: String,
        phase_index: u32,
        phases: u32,
        /// Probe requests ended so far.
        requests: u64,
        /// Seconds since the probe began.
        elapsed_s: f64,
        budget_s: f64,
    },
    /// Event: a calibration ended with a fitted profile, now kept with its target. The final `run_state` follows.
    CalibrationResult {
        run_id: String,
        calibration: Box<TargetProfile>,
    },
}

/// A target's calibrated profile, as the agent keeps it (`profiles.json` in its data folder) and sends it: in
/// [`TargetInfo::profile`] and [`ServerMsg::CalibrationResult`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetProfile {
    pub target: String,
    /// The calibration run that fitted it.
    pub run_id: String,
    /// When the fit ended, Unix milliseconds.
    pub calibrated_ms: u64,
    /// The probe's budget, seconds.
    pub budget_s: f64,
    /// The fitted profile (what `loadshape calibrate` writes as `profile.json`).
    pub profile: crate::engine::EngineProfile,
    pub fit: FitSummary,
}

/// How well a calibration's fit describes the measurements (the figures `loadshape calibrate` prints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitSummary {
    pub decode_r2: f64,
    /// Requests the decode stage was fitted on.
    pub decode_requests: u64,
    pub prefill_r2: f64,
    pub prefill_requests: u64,
    /// Each stage's robust relative spread of the residuals (`1.4826·MAD / median`, a fraction): how closely the
    /// profile predicts a request, meaningful where R² is not (a server whose step barely varies).
    pub decode_spread: f64,
    pub prefill_spread: f64,
    /// Probe requests neither stage used.
    pub unused: u64,
    /// What the fit assumed or fixed.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Limits the agent enforces, told to the page at `hello` so it can say so before the agent refuses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_message_bytes: u64,
    pub max_concurrent_runs: u32,
    pub max_sessions_per_run: u32,
    /// Most requests in flight at once by the workload's plan (open loop: if each request met the SLO).
    pub max_concurrent_requests_per_run: u32,
    /// Highest arrival rate an open-loop workload may ask for, requests per second.
    pub max_rate_per_run: f64,
    pub max_run_seconds: f64,
}

/// Most records in one `run_records` page.
pub const PAGE_RECORDS: usize = 1000;

/// A `run_records` page ends after the record that takes its JSON past this many bytes.
pub const PAGE_BYTES: usize = 512 * 1024;

/// A live target as the page sees it: a name to pick and what it is. The URL is shown for information only;
/// a run names the target, never a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    pub name: String,
    /// `sim` for the built-in emulated engine, `openai` for a configured OpenAI-compatible server.
    pub kind: String,
    pub url: String,
    pub model: String,
    pub dialect: String,
    /// A fleet target (several URLs the agent spreads a run's requests over, as `replay --url A --url B
    /// --router ...`): its replicas and router; absent for a one-URL target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<TargetFleetInfo>,
    /// The profile the last calibration of this target fitted (`start_calibration`); absent when never calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Box<TargetProfile>>,
    /// What the target says of its limits, asked when the agent starts (absent until it answered, or when it says
    /// nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TargetLimits>,
}

/// `TargetInfo::limits`: a target's own word on what one request may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetLimits {
    /// Prompt + output tokens of one request (llama.cpp's per-slot `n_ctx` from `/props`, vLLM's `max_model_len`
    /// from `/v1/models`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// Requests the server runs at once (llama.cpp's slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u32>,
    /// Where each figure came from (`llama.cpp /props n_ctx per slot`, …).
    pub sources: Vec<String>,
}

/// `TargetInfo::fleet`: a fleet target's replicas (replica `i` is `urls[i]`; `url` is `urls[0]`), its router and
/// load cap as configured (`None`: the scenario's `fleet`, else `round_robin` and 1.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetFleetInfo {
    pub urls: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<crate::engine::Router>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_cap: Option<f64>,
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    /// Ran to its end.
    Finished,
    /// Stopped by a user.
    Stopped,
    /// Ended by an error (e.g. the target stopped answering); records so far are kept.
    Failed,
    /// The agent died while it ran; found so at the next start, with what it recorded.
    Interrupted,
    /// Its `run.json` is missing or unreadable; `error` says why. Its records are still read and it can be deleted.
    Damaged,
}

/// What a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A replay of one scenario (`start_run`): its records are the run's `records.jsonl`.
    #[default]
    Replay,
    /// A live capacity search (`start_capacity`): a record file per level and `capacity.json` in its folder.
    Capacity,
    /// A calibration (`start_calibration`): the probe's record files, `profile.json`, `fit.json` and
    /// `calibration.json` in its folder.
    Calibration,
}

impl RunKind {
    pub fn is_replay(&self) -> bool {
        *self == RunKind::Replay
    }
}

/// A run's metadata, as stored in its folder's `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    /// Absent for a replay.
    #[serde(default, skip_serializing_if = "RunKind::is_replay")]
    pub kind: RunKind,
    pub target: String,
    pub state: RunState,
    /// Unix milliseconds.
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    /// Records written so far.
    pub records: u64,
    /// Why the run failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the user called the run at launch; absent when unnamed (and in stores written before names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the run sends, in a few words ([`scenario_about`]: `8 sessions × ~12 steps`), set at launch; absent in
    /// stores written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<String>,
}

/// A scenario's workload in a few words, as run histories show it: `8 sessions × ~12 steps`, `4 users`,
/// `200 requests at 2 req/s`, `a trace of 500 requests`.
pub fn scenario_about(sc: &crate::scenario::Scenario) -> String {
    use crate::scenario::Scenario;
    use crate::workload::Workload;
    match sc {
        Scenario::Seed(s) => {
            let crate::seed_model::SeedWorkload::Bursty(w) = &s.workload;
            format!("{} requests at {} req/s", w.num_requests, w.mean_rps)
        }
        Scenario::Engine(e) => match &e.workload {
            Workload::Sessions(w) => match &w.ladder {
                Some(l) => format!("{} sessions on a ladder", l.rungs.len()),
                None => format!("{} sessions × ~{} steps", w.sessions, w.steps),
            },
            Workload::ClosedLoop(w) => format!("{} users", w.users),
            Workload::Poisson(w) => format!("{} requests at {} req/s", w.num_requests, w.rate_rps),
            Workload::Gamma(w) => format!("{} requests at {} req/s", w.num_requests, w.rate_rps),
            Workload::Bursty(w) => format!("{} requests at {} req/s", w.num_requests, w.mean_rps),
            Workload::Trace(w) => format!("a trace of {} requests", w.requests.len()),
        },
    }
}

/// A run name as the user typed it: trimmed, `None` when empty; `Err` names the field when too long.
pub fn run_name(name: Option<&str>) -> Result<Option<String>, String> {
    let Some(n) = name.map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let chars = n.chars().count();
    if chars > MAX_RUN_NAME_CHARS {
        return Err(format!(
            "name is {chars} characters; a run name has at most {MAX_RUN_NAME_CHARS}"
        ));
    }
    Ok(Some(n.to_string()))
}

/// Machine-readable error kinds; the `message` says what exactly was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadMessage,
    VersionMismatch,
    HelloFirst,
    UnknownTarget,
    UnknownRun,
    InvalidScenario,
    LimitExceeded,
    RunActive,
    Internal,
}

impl ServerMsg {
    /// The reply to a `hello` with protocol `client_protocol`: a hello, or a version-mismatch error.
    pub fn answer_hello(id: u64, client_protocol: u32, limits: Limits) -> ServerMsg {
        if client_protocol == PROTOCOL_VERSION {
            ServerMsg::Hello {
                id,
                protocol: PROTOCOL_VERSION,
                agent_version: LOADSHAPE_VERSION.to_string(),
                limits,
            }
        } else {
            ServerMsg::error(
                id,
                ErrorCode::VersionMismatch,
                format!(
                    "protocol version mismatch: page speaks {client_protocol}, agent speaks {PROTOCOL_VERSION}; \
                     reload the page the agent serves"
                ),
            )
        }
    }

    /// The message's `type` tag as serde writes it (`run_started`). No catch-all: a new kind fails to compile
    /// here until it is named.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMsg::Hello { .. } => "hello",
            ServerMsg::Targets { .. } => "targets",
            ServerMsg::Validated { .. } => "validated",
            ServerMsg::RunStarted { .. } => "run_started",
            ServerMsg::StopRequested { .. } => "stop_requested",
            ServerMsg::Runs { .. } => "runs",
            ServerMsg::Run { .. } => "run",
            ServerMsg::RunRecords { .. } => "run_records",
            ServerMsg::RunDeleted { .. } => "run_deleted",
            ServerMsg::Subscribed { .. } => "subscribed",
            ServerMsg::Unsubscribed { .. } => "unsubscribed",
            ServerMsg::Record { .. } => "record",
            ServerMsg::RunState { .. } => "run_state",
            ServerMsg::Resync { .. } => "resync",
            ServerMsg::Error { .. } => "error",
            ServerMsg::CapacityStarted { .. } => "capacity_started",
            ServerMsg::CapacityLevel { .. } => "capacity_level",
            ServerMsg::CapacityResult { .. } => "capacity_result",
            ServerMsg::CalibrationStarted { .. } => "calibration_started",
            ServerMsg::CalibrationProgress { .. } => "calibration_progress",
            ServerMsg::CalibrationResult { .. } => "calibration_result",
        }
    }

    pub fn error(id: u64, code: ErrorCode, message: impl Into<String>) -> ServerMsg {
        ServerMsg::Error {
            id,
            code,
            message: message.into(),
        }
    }
}

impl ClientMsg {
    /// The request id every client message carries.
    pub fn id(&self) -> u64 {
        match self {
            ClientMsg::Hello { id, .. }
            | ClientMsg::ListTargets { id }
            | ClientMsg::ValidateScenario { id, .. }
            | ClientMsg::StartRun { id, .. }
            | ClientMsg::StopRun { id, .. }
            | ClientMsg::ListRuns { id }
            | ClientMsg::FetchRun { id, .. }
            | ClientMsg::FetchRecords { id, .. }
            | ClientMsg::DeleteRun { id, .. }
            | ClientMsg::Subscribe { id, .. }
            | ClientMsg::Unsubscribe { id, .. }
            | ClientMsg::StartCapacity { id, .. }
            | ClientMsg::StartCalibration { id, .. } => *id,
        }
    }
}
