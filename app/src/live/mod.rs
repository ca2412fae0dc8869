//! The live panel: pick one of the agent's targets, launch the explorer's scenario live, watch records stream in,
//! stop, and overlay live against simulated CDFs; browse, reopen, export and delete past runs; import a JSONL
//! record file. Scored with the same module as the simulator (`shared::metrics::summarize`).
//!
//! Records arrive as `record` events numbered by `seq`. The panel keeps the last seq it holds; after a reconnect
//! (or a `resync`) it subscribes again from the next one, and drops any seq it already has, so nothing is lost
//! or counted twice. A reopened run's records come page by page (`fetch_records` until `next_seq` is `None`, the
//! pages gathered and shown at once); a reconnect mid-way asks again from the first record it lacks, and a run
//! still running is then subscribed from there.

pub mod calibrate;
pub mod fit_panel;
pub mod numbers;

use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use serde_json::Value;
use shared::metrics::{Slo, Summary, completion_curve, summarize, tpot_cdf, ttft_cdf};
use shared::protocol::{CapacityOptions, ClientMsg, RunInfo, RunKind, RunState, ServerMsg, TargetInfo};
use shared::record::RequestRecord;
use shared::scenario::Scenario;

use crate::agent::ws::{AgentConn, Status};
use crate::capacity::live::{LiveCapacity, LiveCapacityCard};
use crate::model::compute::Outcome;
use crate::model::state::Explorer;
use crate::ui::charts::{LineChart, PALETTE, Series};
use crate::worker::offload::{self, Lane};
use crate::worker::wire::{Done, Job, OnDemand, from_bytes};

/// How often buffered records are moved into the charts, milliseconds.
const FLUSH_MS: u64 = 250;

/// What the panel is showing.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A run of the agent (live or past).
    Run(RunInfo),
    /// A record file imported from disk: our JSONL, or another tool's results (`from`).
    File {
        name: String,
        lines: usize,
        skipped: Vec<String>,
        /// The tool that wrote it, with its version where the file says it ("AIPerf 0.13.0"); `None`: ours.
        from: Option<String>,
        /// What the other tool's file lacks or defines differently (`shared::interop`'s notes).
        notes: Vec<String>,
        /// A file with no per-request data: its own summary, metric by metric (mean, p50, p90, p99).
        summary: Vec<(String, [Option<f64>; 4])>,
    },
}

/// The live panel's signals.
#[derive(Clone, Copy)]
pub struct Live {
    pub targets: RwSignal<Vec<TargetInfo>>,
    pub target: RwSignal<String>,
    pub runs: RwSignal<Vec<RunInfo>>,
    pub source: RwSignal<Option<Source>>,
    pub records: RwSignal<Vec<RequestRecord>>,
    /// The scenario of what is shown (for the SLO and the simulated overlay).
    pub scenario: RwSignal<Option<Value>>,
    /// Why Launch, Find capacity live or Stop did nothing, or the agent's refusal: shown under those buttons.
    pub message: RwSignal<Option<String>>,
    /// Why an import read nothing: shown under the import.
    pub import_message: RwSignal<Option<String>>,
    /// Resumes after reconnects, for tests and the curious.
    pub resumes: RwSignal<u32>,
    /// The capacity search shown (a run of kind `capacity`): its simulated and live levels.
    pub capacity: RwSignal<Option<LiveCapacity>>,
    /// The name the next launched run gets (shown in the history); empty: none.
    pub run_name: RwSignal<String>,
    /// Seq of the last record held for the watched run.
    last_seq: StoredValue<Option<u64>>,
    buffer: StoredValue<Vec<(u64, RequestRecord)>>,
    flush_pending: StoredValue<bool>,
    /// A reopened run whose pages are still arriving: the run and the records gathered so far.
    paging: StoredValue<Option<(RunInfo, Vec<RequestRecord>)>>,
    /// Whether this page has re-attached to a running run (or decided there was none), once per page.
    attached: StoredValue<bool>,
    /// The calibration card's state: its refusals are shown on the card, not in the panel's message.
    calibration: Option<crate::live::calibrate::Calibration>,
}

impl Live {
    fn new() -> Live {
        Live {
            targets: RwSignal::new(Vec::new()),
            target: RwSignal::new(String::new()),
            runs: RwSignal::new(Vec::new()),
            source: RwSignal::new(None),
            records: RwSignal::new(Vec::new()),
            scenario: RwSignal::new(None),
            message: RwSignal::new(None),
            import_message: RwSignal::new(None),
            resumes: RwSignal::new(0),
            capacity: RwSignal::new(None),
            run_name: RwSignal::new(String::new()),
            last_seq: StoredValue::new(None),
            buffer: StoredValue::new(Vec::new()),
            flush_pending: StoredValue::new(false),
            paging: StoredValue::new(None),
            attached: StoredValue::new(false),
            calibration: use_context::<crate::live::calibrate::Calibration>(),
        }
    }

    fn watched_run(&self) -> Option<String> {
        match self.source.get_untracked() {
            Some(Source::Run(r)) => Some(r.run_id),
            _ => None,
        }
    }

    fn watch(&self, run: RunInfo, scenario: Option<Value>, records: Vec<RequestRecord>) {
        self.paging.set_value(None);
        if self
            .capacity
            .with_untracked(|c| c.as_ref().is_some_and(|c| c.run_id != run.run_id))
        {
            self.capacity.set(None);
        }
        self.last_seq.set_value(records.len().checked_sub(1).map(|n| n as u64));
        self.buffer.set_value(Vec::new());
        self.records.set(records);
        self.scenario.set(scenario);
        self.source.set(Some(Source::Run(run)));
    }

    /// Asks for the next page of the run being reopened (from the first record not yet gathered).
    fn fetch_page(&self, conn: AgentConn) {
        let next = self.paging.with_value(|p| {
            p.as_ref()
                .map(|(run, gathered)| (run.run_id.clone(), gathered.len() as u64))
        });
        if let Some((run_id, from_seq)) = next {
            conn.send(&ClientMsg::FetchRecords {
                id: conn.next_id(),
                run_id,
                from_seq,
            });
        }
    }

    /// One page of the run being reopened: gathered (in place, never copied); after the last one the run is shown
    /// (and a running run subscribed from the next seq).
    fn on_page(&self, conn: AgentConn, run_id: &str, from_seq: u64, records: &[RequestRecord], next_seq: Option<u64>) {
        let mut accepted = false;
        let mut complete = None;
        self.paging.update_value(|p| {
            if let Some((run, gathered)) = p.as_mut()
                && run.run_id == run_id
                && from_seq == gathered.len() as u64
            {
                gathered.extend_from_slice(records);
                accepted = true;
            }
            if accepted && next_seq.is_none() {
                complete = p.take();
            }
        });
        if !accepted {
            return; // a page of a run no longer shown, or one already gathered
        }
        match complete {
            None => self.fetch_page(conn),
            Some((run, gathered)) => {
                // A capacity search's levels and report come by subscribing, whether it runs or ended.
                let running = run.state == RunState::Running || run.kind == RunKind::Capacity;
                let scenario = self.scenario.get_untracked();
                self.watch(run, scenario, gathered);
                if running {
                    self.subscribe(conn);
                }
            }
        }
    }

    fn subscribe(&self, conn: AgentConn) {
        let Some(run_id) = self.watched_run() else { return };
        let from_seq = self.last_seq.get_value().map_or(0, |s| s + 1);
        conn.send(&ClientMsg::Subscribe {
            id: conn.next_id(),
            run_id,
            from_seq,
        });
    }

    fn on_record(&self, seq: u64, record: RequestRecord) {
        let expected = self.last_seq.get_value().map_or(0, |s| s + 1);
        if seq < expected {
            return; // already held (a resume overlapped)
        }
        self.last_seq.set_value(Some(seq));
        self.buffer.update_value(|b| b.push((seq, record)));
        if !self.flush_pending.get_value() {
            self.flush_pending.set_value(true);
            let me = *self;
            set_timeout(move || me.flush(), Duration::from_millis(FLUSH_MS));
        }
    }

    fn flush(&self) {
        self.flush_pending.set_value(false);
        let mut batch = Vec::new();
        self.buffer.update_value(|b| std::mem::swap(b, &mut batch));
        if !batch.is_empty() {
            self.records.update(|r| r.extend(batch.into_iter().map(|(_, rec)| rec)));
        }
    }

    fn handle(&self, conn: AgentConn, msg: &ServerMsg) {
        match msg {
            ServerMsg::Targets { targets, .. } => {
                // The target chosen before a reload (`target=` in the URL), else the first.
                let kept = crate::model::url::page_param("target").filter(|k| targets.iter().any(|t| &t.name == k));
                if self.target.get_untracked().is_empty()
                    && let Some(t) = kept.or_else(|| targets.first().map(|t| t.name.clone()))
                {
                    self.target.set(t);
                }
                self.targets.set(targets.clone());
            }
            ServerMsg::Runs { runs, .. } => {
                self.runs.set(runs.clone());
                // A page (re)loaded while a run goes on re-attaches to it: the one the URL names (`run=`), else
                // the newest running one. Once per page, and never over something already shown.
                if !self.attached.get_value() && self.source.with_untracked(Option::is_none) {
                    self.attached.set_value(true);
                    let named = crate::model::url::page_param("run");
                    let pick = runs
                        .iter()
                        // A calibration is followed by its own card (`calibrate`), not shown as a run.
                        .filter(|r| r.state == RunState::Running && r.kind != RunKind::Calibration)
                        .max_by_key(|r| (named.as_deref() == Some(r.run_id.as_str()), r.started_ms));
                    if let Some(r) = pick {
                        conn.send(&ClientMsg::FetchRun {
                            id: conn.next_id(),
                            run_id: r.run_id.clone(),
                        });
                    }
                }
            }
            ServerMsg::RunStarted { run, .. } => {
                self.message.set(None);
                // The name went with this run; the next one starts unnamed.
                self.run_name.set(String::new());
                self.upsert_run(run.clone());
                self.watch(run.clone(), self.scenario.get_untracked(), Vec::new());
                self.subscribe(conn);
            }
            ServerMsg::Record { run_id, seq, record } if Some(run_id) == self.watched_run().as_ref() => {
                self.on_record(*seq, record.clone());
            }
            ServerMsg::RunState { run, .. } => {
                self.upsert_run(run.clone());
                if Some(&run.run_id) == self.watched_run().as_ref() {
                    self.source.set(Some(Source::Run(run.clone())));
                }
            }
            ServerMsg::CapacityStarted {
                run, simulated, guided, ..
            } => {
                self.message.set(None);
                self.run_name.set(String::new());
                self.upsert_run(run.clone());
                self.watch(run.clone(), self.scenario.get_untracked(), Vec::new());
                self.capacity
                    .set(Some(LiveCapacity::started(run.run_id.clone(), simulated, *guided)));
                self.subscribe(conn);
            }
            ServerMsg::CapacityLevel { run_id, index, level } if Some(run_id) == self.watched_run().as_ref() => {
                self.capacity.update(|c| {
                    if c.as_ref().is_none_or(|c| &c.run_id != run_id) {
                        *c = Some(LiveCapacity::joined(run_id.clone()));
                    }
                    if let Some(c) = c.as_mut() {
                        c.push(*index, level);
                    }
                });
            }
            ServerMsg::CapacityResult { run_id, report } if Some(run_id) == self.watched_run().as_ref() => {
                self.capacity.update(|c| match c.as_mut() {
                    Some(c) if &c.run_id == run_id && !c.simulated_levels.is_empty() => c.finish(report),
                    _ => *c = Some(LiveCapacity::from_report(run_id.clone(), report)),
                });
            }
            ServerMsg::Resync { run_id, .. } if Some(run_id) == self.watched_run().as_ref() => {
                self.flush();
                self.resumes.update(|n| *n += 1);
                self.subscribe(conn);
            }
            ServerMsg::Run { run, scenario, .. } => {
                self.watch(run.clone(), Some(scenario.clone()), Vec::new());
                self.paging.set_value(Some((run.clone(), Vec::new())));
                self.fetch_page(conn);
            }
            ServerMsg::RunRecords {
                run_id,
                from_seq,
                records,
                next_seq,
                ..
            } => self.on_page(conn, run_id, *from_seq, records, *next_seq),
            ServerMsg::RunDeleted { run_id, .. } => {
                self.runs.update(|rs| rs.retain(|r| &r.run_id != run_id));
                if Some(run_id) == self.watched_run().as_ref() {
                    self.source.set(None);
                    self.records.set(Vec::new());
                }
            }
            ServerMsg::Error { id, .. } if self.calibration.is_some_and(|c| c.owns(*id)) => {}
            ServerMsg::Error { message, .. } => self.message.set(Some(message.clone())),
            _ => {}
        }
    }

    fn upsert_run(&self, run: RunInfo) {
        self.runs
            .update(|rs| match rs.iter_mut().find(|r| r.run_id == run.run_id) {
                Some(r) => *r = run,
                None => rs.insert(0, run),
            });
    }

    /// Show imported files, scored against the explorer's SLO: our JSONL record files (several: the shards of one
    /// run), or the results of vllm bench, GuideLLM, AIPerf or inference-perf, read by `shared::interop` (the same
    /// reader as `loadshape import`). A file that is another tool's but does not read says why, naming the field.
    pub fn import(&self, files: Vec<(String, Vec<u8>)>, scenario: Option<Value>) {
        let mut records = Vec::new();
        let (mut skipped, mut notes, mut summary, mut from) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let many = files.len() > 1;
        for (name, bytes) in &files {
            match read_file(name, bytes) {
                Ok(Read::Ours(mut rs, bad)) => {
                    records.append(&mut rs);
                    skipped.extend(bad.into_iter().map(|b| if many { format!("{name}: {b}") } else { b }));
                }
                Ok(Read::Peer(imported)) => {
                    let label = peer_label(&imported);
                    notes.extend(
                        imported
                            .notes
                            .iter()
                            .map(|n| if many { format!("{name}: {n}") } else { n.clone() }),
                    );
                    if let Some(sum) = &imported.summary {
                        summary.extend(
                            sum.metrics
                                .iter()
                                .map(|(k, v)| (k.clone(), [v.mean, v.p50, v.p90, v.p99])),
                        );
                    }
                    records.extend(imported.records);
                    if !from.contains(&label) {
                        from.push(label);
                    }
                }
                Err(e) => {
                    self.import_message.set(Some(e));
                    return;
                }
            }
        }
        // Several files are scored as one run (the shards of one run: one time line, as `loadshape merge` scores them).
        let lines = records.len();
        let name = match files.as_slice() {
            [(one, _)] => one.clone(),
            many => format!(
                "{} files (merged): {}",
                many.len(),
                many.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            ),
        };
        self.message.set(None);
        self.import_message.set(None);
        self.paging.set_value(None);
        self.last_seq.set_value(None);
        self.records.set(records);
        self.scenario.set(scenario);
        let from = (!from.is_empty()).then(|| from.join(", "));
        self.source.set(Some(Source::File {
            name,
            lines,
            skipped,
            from,
            notes,
            summary,
        }));
    }
}

/// One imported file, read.
enum Read {
    /// Our record file: its records and its bad lines.
    Ours(Vec<RequestRecord>, Vec<String>),
    /// Another tool's results.
    Peer(shared::interop::Imported),
}

/// Reads one file: another tool's results when its shape is one (`shared::interop::detect`), else our JSONL.
fn read_file(name: &str, bytes: &[u8]) -> Result<Read, String> {
    if let Ok(text) = std::str::from_utf8(bytes)
        && let Ok(tool) = shared::interop::detect(name, text)
    {
        return shared::interop::import(tool, name, text)
            .map(Read::Peer)
            .map_err(|e| e.to_string());
    }
    let (records, skipped) = parse_jsonl(bytes);
    Ok(Read::Ours(records, skipped))
}

/// "AIPerf 0.13.0": the tool's own name and the version its file gives.
fn peer_label(imported: &shared::interop::Imported) -> String {
    let tool = match imported.tool {
        shared::interop::Tool::VllmBench => "vllm bench serve",
        shared::interop::Tool::Guidellm => "GuideLLM",
        shared::interop::Tool::Aiperf => "AIPerf",
        shared::interop::Tool::InferencePerf => "inference-perf",
    };
    match &imported.tool_version {
        Some(v) => format!("{tool} {v}"),
        None => tool.to_string(),
    }
}

/// Parse JSONL records from the file's bytes; blank lines are ignored, bad lines (unreadable, or a record with
/// impossible values: `RequestRecord::check`) reported by number (at most 5 reported). Each line is parsed on its own bytes, so a line that is not valid UTF-8 (a crash that cut the last
/// line inside a multi-byte character) costs that line only, and is never read with a replacement character.
pub fn parse_jsonl(bytes: &[u8]) -> (Vec<RequestRecord>, Vec<String>) {
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let mut bad = 0usize;
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<RequestRecord>(line)
            .map_err(|e| e.to_string())
            .and_then(|r| r.check().map(|()| r))
        {
            Ok(r) => records.push(r),
            Err(e) => {
                bad += 1;
                if skipped.len() < 5 {
                    skipped.push(format!("line {}: {e}", i + 1));
                }
            }
        }
    }
    if bad > skipped.len() {
        skipped.push(format!("… {} bad lines in all", bad));
    }
    (records, skipped)
}

/// The SLO of a scenario JSON (`/slo`), or the default.
pub fn slo_of(scenario: Option<&Value>) -> Slo {
    scenario
        .and_then(|s| s.get("slo"))
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// Download a run's records exactly as the agent stored them (its export API, same origin, token in the query).
///
/// Not re-serialized from the page's copy: serde_json's default float parser can be one unit in the last place
/// off for 17-digit numbers, so a page-made file would not be byte-identical to the agent's.
fn export_run(run_id: &str) {
    use wasm_bindgen::JsCast;
    let Some(token) = crate::model::url::token() else {
        return;
    };
    let href = format!(
        "/api/runs/{}/records.jsonl?token={}",
        js_sys::encode_uri_component(run_id),
        js_sys::encode_uri_component(&token)
    );
    if let Some(doc) = web_sys::window().and_then(|w| w.document())
        && let Ok(el) = doc.create_element("a")
        && let Ok(a) = el.dyn_into::<web_sys::HtmlAnchorElement>()
    {
        a.set_href(&href);
        a.set_download(&format!("{run_id}.jsonl"));
        a.click();
    }
}

/// The live view.
#[component]
pub fn LivePanel(ex: Explorer, conn: AgentConn) -> impl IntoView {
    let live = Live::new();
    provide_context(live);
    conn.on_message(move |msg| live.handle(conn, msg));
    conn.on_connect(move || {
        conn.send(&ClientMsg::ListTargets { id: conn.next_id() });
        conn.send(&ClientMsg::ListRuns { id: conn.next_id() });
        if live.paging.with_value(Option::is_some) {
            // The reconnect lost the page in flight: ask again from the first record not yet gathered.
            live.fetch_page(conn);
        } else if live.watched_run().is_some() {
            live.resumes.update(|n| *n += 1);
            live.subscribe(conn);
        }
    });
    let connected = move || conn.status.get() == Status::Connected;
    // The target and the run shown are kept in the URL (`target=`, `run=`): a reload comes back to them.
    Effect::new(move |_| {
        let t = live.target.get();
        if !t.is_empty() {
            crate::model::url::set_page_param("target", Some(&t));
        }
    });
    Effect::new(move |_| {
        let run = live.source.with(|s| match s {
            Some(Source::Run(r)) => Some(r.run_id.clone()),
            _ => None,
        });
        crate::model::url::set_page_param("run", run.as_deref());
    });
    let running = move || matches!(live.source.get(), Some(Source::Run(r)) if r.state == RunState::Running);

    // What Launch and "Find capacity live" both send: the explorer's scenario (shown as what the view now holds) and
    // the chosen target, and the message that says what is missing or that the message did not go out.
    let send_with = move |msg: fn(u64, Value, String, Option<String>) -> ClientMsg| {
        let Some(sc) = ex.scenario() else {
            // Say what is wrong, not only where: the explorer's own error.
            let why = ex
                .error
                .get_untracked()
                .unwrap_or_else(|| "invalid scenario".to_string());
            live.message.set(Some(format!(
                "Nothing sent: fix the scenario in the explorer first ({why})."
            )));
            return;
        };
        let target = live.target.get_untracked();
        if target.is_empty() {
            live.message.set(Some("pick a target".to_string()));
            return;
        }
        let scenario = sc.to_value();
        live.scenario.set(Some(scenario.clone()));
        let name = Some(live.run_name.get_untracked()).filter(|n| !n.trim().is_empty());
        if !conn.send(&msg(conn.next_id(), scenario, target, name)) {
            live.message.set(Some("not connected to the agent".to_string()));
        }
    };
    let launch = move |_| {
        send_with(|id, scenario, target, name| ClientMsg::StartRun {
            id,
            scenario,
            target,
            name,
        });
    };
    let find_capacity = move |_| {
        send_with(|id, scenario, target, name| ClientMsg::StartCapacity {
            id,
            scenario,
            target,
            name,
            options: CapacityOptions::default(),
        });
    };
    let stop = move |_| {
        if let Some(run_id) = live.watched_run() {
            conn.send(&ClientMsg::StopRun {
                id: conn.next_id(),
                run_id,
            });
        }
    };

    // Scored with the one scoring module, throttled by the record flush.
    let summary = Memo::new(move |_| {
        let slo = slo_of(live.scenario.get().as_ref());
        live.records.with(|r| (!r.is_empty()).then(|| summarize(r, &slo)))
    });
    // The simulated counterpart of what is shown, computed off the main thread like the explorer's.
    let simulated = RwSignal::new(None::<Arc<Outcome>>);
    // Why the simulated overlay is missing (the worker failed, the model refused the scenario).
    let sim_error = RwSignal::new(None::<String>);
    let sim_generation = StoredValue::new(0u64);
    // Like with like (`shared::window`): the simulated requests of the window the live records cover.
    let window = Memo::new(move |_| {
        let state = match live.source.get() {
            Some(Source::Run(r)) => Some(r.state),
            Some(Source::File { .. }) => None,
            None => return None,
        };
        live.records.with(|r| overlay_window(state, r))
    });
    let shown_scenario = StoredValue::new(None::<Value>);
    Effect::new(move |_| {
        let generation = offload::new_generation();
        sim_generation.set_value(generation);
        offload::supersede(Lane::Live, generation);
        let json = live.scenario.get();
        let window = window.get();
        // A new scenario clears the overlay; a wider window keeps the old one until the new one arrives.
        if shown_scenario.with_value(|s| *s != json) {
            shown_scenario.set_value(json.clone());
            simulated.set(None);
        }
        sim_error.set(None);
        let Some(sc) = json.and_then(|v| Scenario::from_value(v).ok()) else {
            simulated.set(None);
            return;
        };
        let size = crate::model::compute::size_of(&sc);
        // Too large for a tab: say so instead of trying.
        let records = crate::model::compute::records_of(&sc);
        if records > crate::model::state::MAX_RECORDS {
            sim_error.set(Some(format!(
                "No simulated overlay: {}",
                crate::model::state::too_large(records)
            )));
            return;
        }
        let job = match window {
            Some((end_s, cut)) => Job::ComputeWindow(sc.to_value(), end_s, cut),
            None => Job::Compute(sc.to_value()),
        };
        offload::submit(Lane::Live, generation, size, job, move |f| {
            if sim_generation.try_get_value() != Some(generation) {
                return;
            }
            match f.done {
                Done::Outcome(Ok(o)) => simulated.set(Some(Arc::new(o))),
                Done::Outcome(Err(e)) => sim_error.set(Some(format!("No simulated overlay: {e}"))),
                Done::Point(_) | Done::Band(_) | Done::Bytes(_) => {}
            }
        });
    });

    // The numbers table's simulated side (`predict`'s: the scenario over its seeds), over the live run's window:
    // `predict`'s for a run that has ended or a file (the shortest cut window, else the whole run), the overlay's
    // while the run is going.
    let predicted = RwSignal::new(None::<crate::live::numbers::Predicted>);
    let numbers_note = RwSignal::new(None::<String>);
    let numbers_generation = StoredValue::new(0u64);
    let table_window = Memo::new(move |_| {
        let running = matches!(live.source.get(), Some(Source::Run(r)) if r.state == RunState::Running);
        live.records.with(|r| {
            if running {
                overlay_window(Some(RunState::Running), r).map(|(end, _)| end)
            } else {
                shared::predict::window_of([r.as_slice()])
            }
        })
    });
    let has_records = Memo::new(move |_| live.records.with(|r| !r.is_empty()));
    Effect::new(move |_| {
        let generation = offload::new_generation();
        numbers_generation.set_value(generation);
        offload::supersede(Lane::Numbers, generation);
        let json = live.scenario.get();
        let window = table_window.get();
        numbers_note.set(None);
        if !has_records.get() {
            predicted.set(None);
            return;
        }
        let Some(sc) = json.and_then(|v| Scenario::from_value(v).ok()) else {
            predicted.set(None);
            numbers_note.set(Some("No simulated side: the run's scenario is not known.".into()));
            return;
        };
        if !matches!(sc, Scenario::Engine(_)) {
            predicted.set(None);
            numbers_note.set(Some(
                "No simulated side: the seed model is simulated once, without seeds.".into(),
            ));
            return;
        }
        if crate::model::compute::records_of(&sc) > crate::live::numbers::MAX_TABLE_RECORDS {
            predicted.set(None);
            numbers_note.set(Some(format!(
                "No simulated side: above {} requests the page does not simulate {} seeds.",
                crate::live::numbers::MAX_TABLE_RECORDS,
                shared::predict::DEFAULT_SEEDS
            )));
            return;
        }
        let size = crate::model::compute::size_of(&sc) * f64::from(shared::predict::DEFAULT_SEEDS);
        offload::submit(
            Lane::Numbers,
            generation,
            size,
            Job::OnDemand(OnDemand::Predict, sc.to_value(), window.into_iter().collect()),
            move |f| {
                if numbers_generation.try_get_value() != Some(generation) {
                    return;
                }
                match f.done {
                    Done::Bytes(Ok(b)) => match from_bytes(&b) {
                        Ok(p) => predicted.set(Some(p)),
                        Err(e) => numbers_note.set(Some(format!("No simulated side: {e}"))),
                    },
                    Done::Bytes(Err(e)) => numbers_note.set(Some(format!("No simulated side: {e}"))),
                    _ => {}
                }
            },
        );
    });
    let failures = Memo::new(move |_| live.records.with(|r| shared::metrics::failures(r)));
    // A fleet's live figures (per replica, the KV transfers), scored by the same function as the simulated side.
    let live_fleet = Memo::new(move |_| live.records.with(|r| shared::metrics::replicas::fleet_figures(r)));

    // Before launch: the plan against the target's context, as the scenario's profile gives it (`max_model_len`,
    // which a calibrated profile carries; else its KV capacity). The explorer's simulation of the same scenario
    // refuses the requests beyond it, as the server will.
    let plan_warning = Memo::new(move |_| {
        let Some(Scenario::Engine(e)) = Scenario::from_value(ex.json.get()).ok() else {
            return None;
        };
        let o = ex.outcome.get()?;
        let failed = o.get("failed")? as u64;
        let sent = failed + o.get("completed")? as u64;
        (failed > 0).then(|| {
            format!(
                "{failed} of {sent} simulated requests exceed the context the profile gives the target ({} tokens, \
                 prompt + output): a server refuses them, and a refused request ends its session (its later steps \
                 are never sent).",
                e.profile.model_len()
            )
        })
    });

    // The chosen target's own word on its context, where it is tighter than the scenario's profile: the simulation
    // refuses only what exceeds the profile's, so offer to take the target's.
    let target_limit = Memo::new(move |_| {
        let Some(Scenario::Engine(e)) = Scenario::from_value(ex.json.get()).ok() else {
            return None;
        };
        let name = live.target.get();
        let limits = live
            .targets
            .with(|ts| ts.iter().find(|t| t.name == name)?.limits.clone())?;
        let len = limits.max_model_len?;
        (len < e.profile.model_len()).then(|| (name, len, e.profile.model_len(), limits.sources.join("; ")))
    });
    let can_take_limit = Memo::new(move |_| ex.json.with(|j| j.pointer("/profile").is_some_and(Value::is_object)));

    // What Launch will send and for how long, from the explorer's simulation of the same scenario.
    let launch_plan = Memo::new(move |_| {
        let sc = Scenario::from_value(ex.json.get()).ok()?;
        let o = ex.outcome.get()?;
        let requests = o
            .get("completed")
            .map(|c| c + o.get("failed").unwrap_or(0.0) + o.get("never_sent").unwrap_or(0.0))
            .or_else(|| o.get("total_requests"))?;
        let duration = o.get("duration_s")?;
        Some(launch_plan_text(&sc, requests, duration, &live.target.get()))
    });

    let launch_error = move || {
        live.message
            .get()
            .map(|m| view! { <p class="callout bad" data-live-error="" data-launch-error="">{m}</p> })
    };

    view! {
        <div class="live-layout">
            <aside class="card controls live-controls">
                <div class="card-head"><h2>"Live run"</h2></div>
                <Show
                    when=connected
                    fallback=move || view! {
                        <p class="muted">
                            {move || if conn.status.get() == Status::NoToken {
                                "Open the link the agent printed when it started (it carries #token=…) to launch live runs. You can still import a JSONL record file below."
                            } else {
                                "Waiting for the agent…"
                            }}
                        </p>
                    }
                >
                    <label class="stack">
                        <span class="field-label">"Target"</span>
                        <select
                            data-control="target"
                            prop:value=move || live.target.get()
                            on:change=move |ev| live.target.set(event_target_value(&ev))
                        >
                            {move || live.targets.get().into_iter().map(|t| {
                                let label = target_label(&t);
                                view! { <option value=t.name.clone()>{label}</option> }
                            }).collect_view()}
                        </select>
                    </label>
                    <p class="faint small">"Runs the explorer's current scenario. Targets are the ones the agent's operator configured."</p>
                    <label class="stack">
                        <span class="field-label">"Run name (optional)"</span>
                        <input
                            type="text"
                            maxlength="100"
                            data-control="run-name"
                            aria-label="Run name, shown in the run history"
                            placeholder="e.g. baseline before the upgrade"
                            prop:value=move || live.run_name.get()
                            on:input=move |ev| live.run_name.set(event_target_value(&ev))
                        />
                    </label>
                    {move || launch_plan.get().map(|t| view! { <p class="launch-plan" data-launch-plan="">{t}</p> })}
                    {move || ex.error.get().map(|e| view! {
                        <p class="callout warn small" data-scenario-invalid="">{format!("The explorer's scenario is invalid, so there is nothing to launch: {e}")}</p>
                    })}
                    {move || plan_warning.get().map(|w| view! { <p class="callout warn small" data-plan-warning="">{w}</p> })}
                    {move || target_limit.get().map(|(name, len, profile_len, sources)| view! {
                        <div class="callout warn small" data-target-limit=len.to_string()>
                            <p>{format!(
                                "{name} takes {len} tokens per request (prompt + output; {sources}), fewer than the \
                                 scenario's profile ({profile_len}): the simulation does not refuse what {name} will."
                            )}</p>
                            <Show when=move || can_take_limit.get()>
                                <button
                                    class="btn small"
                                    data-action="take-target-limit"
                                    on:click=move |_| ex.set_at("/profile/max_model_len", serde_json::json!(len))
                                >
                                    {format!("Use {name}'s limit in the explorer")}
                                </button>
                            </Show>
                        </div>
                    })}
                    <div class="actions">
                        <button class="btn primary" data-action="launch" on:click=launch disabled=running>"Launch"</button>
                        <button class="btn danger" data-action="stop" on:click=stop disabled=move || !running()>"Stop"</button>
                    </div>
                    // Right under the buttons that caused it (not below the calibration card, where it read as its own).
                    {launch_error}
                    <div class="actions">
                        <button class="btn" data-action="find-capacity" on:click=find_capacity disabled=running>"Find capacity live"</button>
                    </div>
                    <p class="faint small">"Searches the most load (the workload's knob: sessions, users, rate) the target serves within the scenario's SLOs for 95 % of requests: the simulator's capacity first, then live levels around it. Stop ends it."</p>
                    <crate::live::calibrate::CalibrateCard target=live.target conn=conn ex=ex/>
                </Show>
                <h3 class="section">"Import records"</h3>
                <input
                    type="file"
                    multiple=true
                    accept=".jsonl,.json,.ndjson,text/plain"
                    data-control="import"
                    aria-label="Import record files (ours, or vllm bench, GuideLLM, AIPerf, inference-perf results)"
                    on:change=move |ev| {
                        use wasm_bindgen::JsCast;
                        let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) else { return };
                        let Some(list) = input.files() else { return };
                        let files: Vec<web_sys::File> = (0..list.length()).filter_map(|i| list.get(i)).collect();
                        if files.is_empty() {
                            return;
                        }
                        let scenario = ex.scenario().map(|s| s.to_value());
                        leptos::task::spawn_local(async move {
                            // Several files are the shards of one run (`replay --shard I/N` with one --start-at:
                            // one time line), scored together as `loadshape merge` scores them.
                            let mut read = Vec::new();
                            for file in &files {
                                // The bytes, not `text()`: that would replace a torn UTF-8 sequence and hide it.
                                match wasm_bindgen_futures::JsFuture::from(file.array_buffer()).await {
                                    Ok(buf) => read.push((file.name(), js_sys::Uint8Array::new(&buf).to_vec())),
                                    Err(_) => {
                                        live.import_message.set(Some(format!("cannot read {}", file.name())));
                                        return;
                                    }
                                }
                            }
                            live.import(read, scenario);
                        });
                    }
                />
                <p class="faint small">"A run's records.jsonl, or the results of vllm bench serve (--save-detailed), GuideLLM (benchmarks.json), AIPerf (profile_export.jsonl) or inference-perf, scored against the explorer's SLOs; several files (the shards of one run) are scored as one run."</p>
                {move || live.import_message.get().map(|m| view! { <p class="callout bad" data-live-error="" data-import-error="">{m}</p> })}
                <RunHistory live=live conn=conn/>
            </aside>
            <div class="results" data-summary="live">
                <SourceLine live=live/>
                <LiveCapacityCard
                    capacity=live.capacity
                    run=Signal::derive(move || match live.source.get() {
                        Some(Source::Run(r)) => Some(r),
                        _ => None,
                    })
                />
                // A capacity search keeps its records per level: the replay's summary, overlay and fit do not apply.
                <Show when=move || !live.source.with(|s| matches!(s, Some(Source::Run(r)) if r.kind == RunKind::Capacity))>
                    <LiveSummary summary=summary failures=failures/>
                    <crate::live::numbers::FailureLine failures=failures/>
                    <Show when=move || has_records.get()>
                        <crate::live::numbers::NumbersTable predicted=predicted.into() live=summary note=numbers_note.into()/>
                        <crate::live::numbers::FleetTable predicted=predicted.into() live=live_fleet/>
                    </Show>
                    {move || sim_error.get().map(|e| view! { <p class="callout bad" data-live-sim-error="">{e}</p> })}
                    {move || simulated.get().map(|o| view! {
                        <p class="muted" data-live-sim-describe="">{format!("Simulated overlay: {}", o.describe)}</p>
                    })}
                    <LiveCharts live=live simulated=simulated/>
                    <LiveRetention summary=summary simulated=simulated/>
                    <crate::live::fit_panel::FitCard
                        records=live.records
                        scenario=live.scenario
                        source=Signal::derive(move || live.source.get().map(|s| match s {
                            Source::Run(r) => r.run_id,
                            Source::File { name, .. } => name,
                        }))
                        window=window
                        ex=ex
                        target=live.target
                    />
                </Show>
            </div>
        </div>
    }
}

/// The workload in a few words: `8 sessions × ~12 steps`, `4 users`, `200 requests at 2 req/s`.
pub fn workload_summary(sc: &Scenario) -> String {
    shared::protocol::scenario_about(sc)
}

/// About how long, in the unit that reads best: `45 s`, `6 min`, `1.5 h`.
pub fn about(seconds: f64) -> String {
    if seconds < 90.0 {
        format!("{:.0} s", seconds.max(0.0))
    } else if seconds < 5400.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// What Launch sends: `Launch sends 8 sessions × ~12 steps, ≈ 111 requests, ≈ 6 min on tiny` (requests and time as
/// the explorer simulates them).
pub fn launch_plan_text(sc: &Scenario, requests: f64, duration_s: f64, target: &str) -> String {
    let on = if target.is_empty() {
        String::new()
    } else {
        format!(" on {target}")
    };
    format!(
        "Launch sends {}, ≈ {:.0} requests, ≈ {}{on} (as simulated).",
        workload_summary(sc),
        requests,
        about(duration_s)
    )
}

#[component]
fn SourceLine(live: Live) -> impl IntoView {
    view! {
        {move || match live.source.get() {
            None => view! { <div class="card empty" data-no-run="">"No run yet: launch one, reopen one from the history, or import a record file."</div> }.into_any(),
            Some(Source::Run(r)) => {
                let state = format!("{:?}", r.state).to_lowercase();
                view! {
                    <div class="status-line">
                        <span class="pill" data-run-state=state.clone()>{state.clone()}</span>
                        <span class="mono">{r.run_id.clone()}</span>
                        <span class="muted">"on " {r.target.clone()}</span>
                        <span
                            class="muted"
                            data-records=move || live.records.with(Vec::len)
                            data-resumes=move || live.resumes.get()
                        >
                            {move || format!("{} records", live.records.with(Vec::len))}
                        </span>
                        {r.error.clone().map(|e| view! { <span class="callout bad">{e}</span> })}
                    </div>
                }
                .into_any()
            }
            Some(Source::File { name, lines, skipped, from, notes, summary }) => {
                let n_notes = notes.len();
                view! {
                <div class="status-line">
                    <span class="pill">"file"</span>
                    <span class="mono">{name}</span>
                    <span class="muted" data-records=lines>{format!("{lines} records")}</span>
                    {from.clone().map(|f| view! { <span class="pill" data-import-from=f.clone()>{format!("from {f}")}</span> })}
                </div>
                {(!notes.is_empty()).then(|| view! {
                    <div class="callout info" data-import-notes=n_notes>
                        <strong>{format!("Read from {}'s results: what differs from a loadshape record", from.clone().unwrap_or_default())}</strong>
                        {notes.into_iter().map(|n| view! { <div class="small">{n}</div> }).collect_view()}
                    </div>
                })}
                {(!summary.is_empty()).then(|| view! {
                    <div class="card" data-import-summary="">
                        <strong>"The file holds a summary only (no per-request data): its own figures"</strong>
                        <div class="table-scroll">
                        <table class="table small">
                            <thead><tr><th>"metric"</th><th>"mean"</th><th>"p50"</th><th>"p90"</th><th>"p99"</th></tr></thead>
                            <tbody>
                                {summary.into_iter().map(|(k, v)| view! {
                                    <tr>
                                        <td class="mono">{k}</td>
                                        {v.into_iter().map(|x| view! { <td>{x.map_or_else(|| "–".to_string(), |x| format!("{x:.4}"))}</td> }).collect_view()}
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                    </div>
                })}
                {(!skipped.is_empty()).then(|| view! {
                    <div class="callout warn" data-import-skipped="">
                        <strong>"Some lines were not records and were skipped"</strong>
                        {skipped.into_iter().map(|s| view! { <div class="mono small">{s}</div> }).collect_view()}
                    </div>
                })}
            }
            .into_any()
            }
        }}
    }
}

const LIVE_HEADLINE: [(&str, &str); 10] = [
    ("ttft_p50_ms", "TTFT p50"),
    ("ttft_p99_ms", "TTFT p99"),
    ("tpot_p50_ms", "TPOT p50"),
    ("tpot_p99_ms", "TPOT p99"),
    ("e2el_p50_ms", "E2E p50"),
    ("request_throughput_rps", "Throughput"),
    ("goodput_rps", "Goodput"),
    ("slo_attainment_ratio", "SLO attainment"),
    ("session_goodput_sps", "Session goodput"),
    ("cached_share_achieved", "Cached share"),
];

#[component]
fn LiveSummary(summary: Memo<Option<Summary>>, failures: Memo<shared::metrics::Failures>) -> impl IntoView {
    view! {
        {move || {
            let s = summary.get()?;
            let v = serde_json::to_value(&s).ok()?;
            let (metrics, _) = crate::model::compute::flatten(&v);
            // No request completed (yet, or a run stopped or refused before any did): the summary's zeros are no
            // measurement, so the cards say "—" and why (`data-value` keeps the summary's number).
            let none_completed = s.completed == 0;
            Some(view! {
                {none_completed.then(|| view! {
                    <p class="callout warn small" data-no-completed="">"No request has completed in this run yet: latency, throughput and SLO figures need at least one."</p>
                })}
                <div class="stat-grid">
                    {LIVE_HEADLINE
                        .iter()
                        .filter_map(|&(name, label)| {
                            let value = metrics.iter().find(|(k, _)| k == name)?.1;
                            let unit = if name.ends_with("_ratio") || name.contains("share") || none_completed { "" } else { crate::ui::metric::unit_of(name) };
                            let text = if none_completed { "—".to_string() } else { crate::ui::metric::display(name, value, false) };
                            Some(view! {
                                <div class="stat">
                                    <div class="label">{label}</div>
                                    <div class="value">
                                        <span class="metric-value" data-metric=name data-value=value.to_string()>{text}</span>
                                        <span class="unit">{unit}</span>
                                    </div>
                                </div>
                            })
                        })
                        .collect_view()}
                    {move || {
                        let f = failures.get();
                        let bad = f.failed > 0;
                        let unsent = f.never_sent > 0;
                        view! {
                            <div class="stat" class:bad=bad>
                                <div class="label">"Failed"</div>
                                <div class="value">
                                    <span class="metric-value" data-metric="failed_requests" data-value=f.failed.to_string()>{f.failed.to_string()}</span>
                                    <span class="unit">{if f.cut > 0 { format!("+ {} cut", f.cut) } else { String::new() }}</span>
                                </div>
                            </div>
                            <div class="stat" class:bad=unsent>
                                <div class="label">"Never sent"</div>
                                <div class="value">
                                    <span class="metric-value" data-metric="never_sent" data-value=f.never_sent.to_string()>{f.never_sent.to_string()}</span>
                                    <span class="unit">{format!("of {} planned", f.planned)}</span>
                                </div>
                            </div>
                        }
                    }}
                </div>
            })
        }}
    }
}

/// The window of the simulated overlay (`shared::window`): `Some((end s, running requests are cut))`, or `None`
/// for the whole simulated run. A run still going covers up to where its records reach (rounded down, so the
/// overlay is recomputed every few seconds, not at every record); a stopped, failed or interrupted run, or a
/// finished one with cut records (its deadline cut it), up to its end; a run (or an imported file) that ran to its
/// end uncut, everything.
pub fn overlay_window(state: Option<RunState>, records: &[RequestRecord]) -> Option<(f64, bool)> {
    let covered = shared::window::covered_s(records)?;
    match state {
        Some(RunState::Running) => {
            let step = if covered < 30.0 {
                1.0
            } else if covered < 300.0 {
                5.0
            } else {
                30.0
            };
            Some(((covered / step).floor() * step, false))
        }
        Some(RunState::Finished) | None => shared::window::was_cut(records).then_some((covered, true)),
        Some(RunState::Stopped | RunState::Failed | RunState::Interrupted | RunState::Damaged) => Some((covered, true)),
    }
}

#[component]
fn LiveCharts(live: Live, simulated: RwSignal<Option<Arc<Outcome>>>) -> impl IntoView {
    let ttft = Signal::derive(move || {
        let live_pts = live.records.with(|r| ttft_cdf(r, 400));
        overlay(live_pts, simulated.get().map(|o| o.ttft_cdf.clone()))
    });
    let tpot = Signal::derive(move || {
        let live_pts = live.records.with(|r| tpot_cdf(r, 400));
        overlay(live_pts, simulated.get().map(|o| o.tpot_cdf.clone()))
    });
    let progress = Signal::derive(move || {
        let pts = live.records.with(|r| completion_curve(r, 300));
        if pts.is_empty() {
            Vec::new()
        } else {
            vec![Series::line("completed", PALETTE[2], pts)]
        }
    });
    view! {
        <div class="charts">
            <LineChart id="live-ttft" title="TTFT: live vs simulated" x_label="TTFT (ms)" y_label="share ≤ x" series=ttft y_max=1.0 empty="waiting for records"/>
            <LineChart id="live-tpot" title="TPOT: live vs simulated" x_label="TPOT (ms)" y_label="share ≤ x" series=tpot y_max=1.0 empty="waiting for records"/>
            <LineChart id="live-progress" title="Completed requests" x_label="time since start (s)" y_label="requests" series=progress empty="waiting for records"/>
        </div>
    }
}

/// Retention across tool calls in the run shown: the live records' cached share by the think time before each
/// step (the summary's `retention`), the simulation of the same window dashed beside it; nothing for a run without
/// session steps after a think time.
#[component]
fn LiveRetention(summary: Memo<Option<Summary>>, simulated: RwSignal<Option<Arc<Outcome>>>) -> impl IntoView {
    use crate::explorer::retention::{RetentionChart, RetentionTable};
    let live_bands =
        Signal::derive(move || summary.with(|s| s.as_ref().map(|s| s.retention.clone()).unwrap_or_default()));
    let sim_bands =
        Signal::derive(move || simulated.with(|o| o.as_ref().map(|o| o.retention.clone()).unwrap_or_default()));
    view! {
        <Show when=move || live_bands.with(|b| !b.is_empty())>
            <div class="card retention" data-retention-card="live">
                <h2>"Retention across tool calls (live)"</h2>
                <p class="faint">
                    "The share of each step's prompt tokens the server reported cached, by the think time (tool call) "
                    "before the step, from this run's records; dashed: the simulation of the same window."
                </p>
                <RetentionChart primary=live_bands primary_name="live" other=sim_bands other_name="simulated"/>
                <RetentionTable bands=live_bands/>
            </div>
        </Show>
    }
}

fn overlay(live: Vec<(f64, f64)>, sim: Option<Vec<(f64, f64)>>) -> Vec<Series> {
    let mut s = Vec::new();
    if !live.is_empty() {
        s.push(Series::steps("live", PALETTE[0], live));
    }
    if let Some(sim) = sim.filter(|p| !p.is_empty()) {
        s.push(Series::steps("simulated", PALETTE[1], sim).dashed());
    }
    s
}

#[component]
fn RunHistory(live: Live, conn: AgentConn) -> impl IntoView {
    view! {
        <div class="history" class:hidden=move || conn.status.get() != Status::Connected>
            <div class="card-head">
                <h3 class="section">"Run history"</h3>
                <span class="spacer"></span>
                <button class="btn small" data-action="refresh-runs" on:click=move |_| { conn.send(&ClientMsg::ListRuns { id: conn.next_id() }); }>"Refresh"</button>
            </div>
            <ul class="runs" data-runs=move || live.runs.with(Vec::len)>
                {move || live.runs.get().into_iter().map(|r| {
                    let id_open = r.run_id.clone();
                    let id_export = r.run_id.clone();
                    let id_delete = r.run_id.clone();
                    let state = format!("{:?}", r.state).to_lowercase();
                    let deletable = r.state != RunState::Running;
                    let state_attr = state.clone();
                    view! {
                        <li data-run=r.run_id.clone()>
                            <div class="run-line">
                                <span class="pill" data-run-state=state_attr>{state}</span>
                                {r.name.clone().map(|n| view! { <strong class="run-name" data-run-name="">{n}</strong> })}
                                <span class="mono small faint">{r.run_id.clone()}</span>
                            </div>
                            <div class="run-line faint small" data-run-detail="">{run_detail(&r, now_ms())}</div>
                            <div class="run-actions">
                                <button class="btn small" data-action="open-run" on:click=move |_| { conn.send(&ClientMsg::FetchRun { id: conn.next_id(), run_id: id_open.clone() }); }>"Open"</button>
                                <button class="btn small" data-action="export-run" on:click=move |_| export_run(&id_export)>"Export"</button>
                                <button class="btn small danger" data-action="delete-run" disabled=!deletable on:click=move |_| { conn.send(&ClientMsg::DeleteRun { id: conn.next_id(), run_id: id_delete.clone() }); }>"Delete"</button>
                            </div>
                        </li>
                    }
                }).collect_view()}
            </ul>
        </div>
    }
}

/// Now, Unix milliseconds (the browser's clock).
fn now_ms() -> u64 {
    js_sys::Date::now() as u64
}

/// A history entry's line: what ran, where, when it started, how long it took (or has run), what it wrote:
/// `capacity search · sim · started 14:02 · 6 min · 1,234 records`.
pub fn run_detail(r: &RunInfo, now_ms: u64) -> String {
    // What the run sent, as the agent wrote it at launch; a run stored before that: its kind only.
    let kind = match (&r.about, r.kind) {
        (Some(a), _) => format!("{a} · "),
        (None, RunKind::Capacity) => "capacity search · ".to_string(),
        (None, RunKind::Calibration) => "calibration · ".to_string(),
        (None, RunKind::Replay) => String::new(),
    };
    let started = crate::ui::fmt::local_clock(r.started_ms);
    let took = r.ended_ms.unwrap_or(now_ms).saturating_sub(r.started_ms) as f64 / 1000.0;
    let so_far = if r.ended_ms.is_none() { " so far" } else { "" };
    format!(
        "{kind}{} · started {started} · {}{so_far} · {} records",
        r.target,
        about(took),
        crate::ui::fmt::num(r.records as f64)
            .split('.')
            .next()
            .unwrap_or_default()
    )
}

/// A target as the menu shows it: what it is, not its fields (`sim — sim sim` said nothing).
fn target_label(t: &TargetInfo) -> String {
    match (&t.fleet, t.kind.as_str()) {
        (_, "sim") => format!("{} — the built-in emulated engine", t.name),
        (Some(f), _) => format!("{} — {} on {} replicas", t.name, t.model, f.urls.len()),
        (None, _) => format!("{} — {} at {}", t.name, t.model, t.url),
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn history_entries_say_when_how_long_and_what() {
        let r = RunInfo {
            run_id: "r1".into(),
            kind: RunKind::Capacity,
            target: "sim".into(),
            state: RunState::Finished,
            started_ms: 1_796_551_740_000,
            ended_ms: Some(1_796_551_740_000 + 372_000),
            records: 1234,
            error: None,
            name: None,
            about: None,
        };
        let line = run_detail(&r, 0);
        assert!(line.starts_with("capacity search · sim · started "), "{line}");
        assert!(line.ends_with(" · 6 min · 1,234 records"), "{line}");
        let running = RunInfo {
            kind: RunKind::Replay,
            state: RunState::Running,
            ended_ms: None,
            ..r
        };
        let line = run_detail(&running, 1_796_551_740_000 + 45_000);
        assert!(
            line.starts_with("sim · started ") && line.contains(" · 45 s so far · "),
            "{line}"
        );
        // A run launched with the scenario's words: they lead.
        let about = workload_summary(&shared::presets::default_scenario());
        let described = RunInfo {
            about: Some(about.clone()),
            name: Some("baseline".into()),
            ..running
        };
        let line = run_detail(&described, 1_796_551_740_000 + 45_000);
        assert!(line.starts_with(&format!("{about} · sim · started ")), "{line}");
    }

    #[test]
    fn launch_says_what_it_sends_and_for_how_long() {
        let sc = shared::presets::default_scenario();
        let text = launch_plan_text(&sc, 110.6, 372.0, "tiny");
        assert!(text.starts_with("Launch sends "), "{text}");
        assert!(
            text.ends_with(", ≈ 111 requests, ≈ 6 min on tiny (as simulated)."),
            "{text}"
        );
        assert_eq!(about(44.6), "45 s");
        assert_eq!(about(7200.0), "2.0 h");
    }

    #[test]
    fn a_target_is_labelled_by_what_it_is() {
        use shared::protocol::TargetFleetInfo;
        let t = |name: &str, kind: &str, fleet: Option<usize>| TargetInfo {
            name: name.into(),
            kind: kind.into(),
            url: "http://127.0.0.1:8000/v1".into(),
            model: "llama".into(),
            dialect: "vllm".into(),
            fleet: fleet.map(|n| TargetFleetInfo {
                urls: vec!["http://127.0.0.1:8000/v1".into(); n],
                router: None,
                load_cap: None,
            }),
            profile: None,
            limits: None,
        };
        assert_eq!(
            target_label(&t("sim", "sim", None)),
            "sim — the built-in emulated engine"
        );
        assert_eq!(
            target_label(&t("gpu", "openai", None)),
            "gpu — llama at http://127.0.0.1:8000/v1"
        );
        assert_eq!(
            target_label(&t("pair", "openai", Some(2))),
            "pair — llama on 2 replicas"
        );
    }

    #[test]
    fn parses_jsonl_and_reports_bad_lines() {
        let rec = r#"{"schema":1,"session":0,"inst":0,"step":0,"steps_asked":3,"base_asked":1000,"ok":true,"t_submit":0.5,"ttft_s":0.2,"wall_s":1.2,"gen_tokens":11,"asked_tokens":11,"prompt_tokens":1000,"cached_tokens":0,"sse_frames":11,"prompt_chars":4000}"#;
        let text = format!("{rec}\n\nnot json\n{rec}\n");
        let (records, skipped) = parse_jsonl(text.as_bytes());
        assert_eq!(records.len(), 2);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].starts_with("line 3:"), "{skipped:?}");
        let s = summarize(&records, &Slo::default());
        assert_eq!(s.completed, 2);
    }

    /// A file whose last line was cut inside a multi-byte character (`caf\xc3`), or with a bad byte inside an
    /// otherwise whole line, loses that line only, named by number; no record is read with a replaced character.
    #[test]
    fn a_torn_utf8_line_costs_that_line_only() {
        let rec = r#"{"schema":1,"session":0,"inst":0,"step":0,"steps_asked":3,"base_asked":1000,"ok":false,"t_submit":0.5,"ttft_s":0.2,"wall_s":1.2,"gen_tokens":11,"asked_tokens":11,"prompt_tokens":1000,"cached_tokens":0,"sse_frames":11,"prompt_chars":4000,"error":"caf"#;
        let mut bytes = Vec::new();
        for _ in 0..3 {
            bytes.extend_from_slice(rec.as_bytes());
            bytes.extend_from_slice("é\"}\n".as_bytes());
        }
        // Line 2: a stray byte inside the string, the line otherwise whole.
        let second = 2 * rec.len() + 5;
        bytes[second] = 0xff;
        bytes.extend_from_slice(rec.as_bytes());
        bytes.push(0xc3);
        let (records, skipped) = parse_jsonl(&bytes);
        assert_eq!(records.len(), 2, "{skipped:?}");
        assert!(records.iter().all(|r| r.error.as_deref() == Some("café")));
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(
            skipped[0].starts_with("line 2:") && skipped[1].starts_with("line 4:"),
            "{skipped:?}"
        );
    }

    #[test]
    fn slo_comes_from_the_scenario() {
        let sc = serde_json::json!({"slo": {"ttft_ms": 300.0, "tpot_ms": 20.0}});
        let slo = slo_of(Some(&sc));
        assert_eq!((slo.ttft_ms, slo.tpot_ms), (300.0, 20.0));
        assert_eq!(slo_of(None).ttft_ms, Slo::default().ttft_ms);
    }

    #[test]
    fn the_overlay_covers_the_live_window() {
        let line = |t: f64, wall: f64, ok: bool| {
            let cut = if ok {
                ""
            } else {
                r#","failure":"cut","error":"cut: stopped""#
            };
            format!(
                r#"{{"schema":1,"session":0,"inst":0,"step":0,"steps_asked":1,"base_asked":100,"ok":{ok},"t_submit":{t},"ttft_s":0.1,"wall_s":{wall},"gen_tokens":5,"asked_tokens":5,"prompt_tokens":100,"cached_tokens":0,"sse_frames":5,"prompt_chars":400{cut}}}"#
            )
        };
        let (done, _) = parse_jsonl(format!("{}\n{}\n", line(0.0, 1.0, true), line(40.0, 7.5, true)).as_bytes());
        let (cut, _) = parse_jsonl(format!("{}\n{}\n", line(0.0, 1.0, true), line(40.0, 5.0, false)).as_bytes());
        // Still running: up to where the records reach, rounded down to 5 s past 30 s.
        assert_eq!(overlay_window(Some(RunState::Running), &done), Some((45.0, false)));
        // Stopped: up to its end, running requests cut.
        assert_eq!(overlay_window(Some(RunState::Stopped), &done), Some((47.5, true)));
        // Ran to its end: the whole run, unless its deadline cut requests.
        assert_eq!(overlay_window(Some(RunState::Finished), &done), None);
        assert_eq!(overlay_window(Some(RunState::Finished), &cut), Some((45.0, true)));
        assert_eq!(overlay_window(None, &done), None);
        assert_eq!(overlay_window(None, &cut), Some((45.0, true)));
        assert_eq!(overlay_window(Some(RunState::Running), &[]), None);
    }
}
