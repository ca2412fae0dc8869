//! The page's view model: turns a `shared::scenario::Scenario` into what the page draws.
//!
//! Every number comes from `shared` (`seed_model::evaluate` and `seed_diagnostics::diagnose`, `engine::simulate`,
//! `metrics::summarize` and `metrics::cdf_points`), and so does every scenario the page derives (the defaults and
//! presets of `shared::presets`, the sweep's `Workload::scaled`); this module only reshapes results for display:
//! flat metric lists, chart points, call-outs with their text. [`Outcome`] is what crosses from the compute worker
//! ([`crate::worker::wire`]), so it derives serde.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shared::engine::{self, EngineReport, EngineScenario};
use shared::metrics::{tpot_cdf, ttft_cdf};
use shared::scenario::Scenario;
use shared::seed_model::SeedWorkload;
use shared::window::InFlight;
use shared::workload::Workload;

/// Points of the TTFT and TPOT CDFs a result carries (the charts draw them as they are).
pub const CDF_POINTS: usize = 400;

/// The models the page offers: (`model` tag, label).
pub const MODELS: [(&str, &str); 2] = [("seed", "Seed model"), ("engine", "Engine model")];

/// The label of a workload kind of the engine model ([`shared::presets::WORKLOAD_KINDS`]).
pub fn workload_label(kind: &str) -> &'static str {
    match kind {
        "sessions" => "Agent sessions",
        "bursty" => "Bursty trace (seed)",
        "poisson" => "Poisson arrivals",
        "gamma" => "Gamma arrivals",
        "closed_loop" => "Closed-loop users",
        _ => "Workload",
    }
}

/// [`shared::presets::default_workload`] as the JSON the form edits.
pub fn default_workload(kind: &str) -> Option<Value> {
    serde_json::to_value(shared::presets::default_workload(kind)?).ok()
}

/// [`shared::presets::default_length`] as the JSON the form edits.
pub fn default_length(dist: &str, typical: f64) -> Option<Value> {
    serde_json::to_value(shared::presets::default_length(dist, typical)?).ok()
}

/// How loud a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Severity {
    Good,
    Info,
    Warn,
    Bad,
}

/// A diagnostic call-out with its numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Callout {
    /// `data-diagnostic` id (`overbatched`, `closed_loop_illusion`, ...).
    pub id: String,
    pub severity: Severity,
    pub title: String,
    pub body: String,
}

/// One point of the time series charts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    pub t_s: f64,
    pub running: f64,
    pub queued: f64,
    /// KV-cache use, 0–1.
    pub kv_use: Option<f64>,
    /// Share of prompt tokens served from the prefix cache in this interval, 0–1.
    pub cache_hit: Option<f64>,
}

/// One request of the session the explorer draws on its timeline ([`session_bars`]): times in s from the run's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionBar {
    /// 0: the session itself; 1, 2, …: its sub-agents, by fan-out and then session number.
    pub row: u32,
    /// The record's session number (a sub-agent's own).
    pub session: u64,
    pub step: u32,
    pub start_s: f64,
    /// When its first token came (`start_s` + TTFT); `end_s` when it produced none.
    pub first_token_s: f64,
    pub end_s: f64,
    /// Share of its prompt served from the prefix cache, where the record says.
    pub cached_share: Option<f64>,
    pub ok: bool,
}

/// Most sub-agent rows the session timeline draws.
pub const TIMELINE_CHILD_ROWS: usize = 12;

/// A session's requests for the explorer's session timeline: the first instance of the first session that fanned
/// out sub-agents (else of session 0), its steps on row 0 and each child's on a row below, by fan-out (at most
/// [`TIMELINE_CHILD_ROWS`] of them, those that started during that instance). Empty without session records.
pub fn session_bars(records: &[shared::record::RequestRecord]) -> Vec<SessionBar> {
    let parent = records.iter().filter_map(|r| r.parent).min().unwrap_or(0);
    let own = |r: &&shared::record::RequestRecord| r.session == parent && r.parent.is_none() && r.inst == 0;
    let mine: Vec<&shared::record::RequestRecord> = records.iter().filter(own).collect();
    if mine.is_empty() {
        return Vec::new();
    }
    let t0 = mine.iter().map(|r| r.t_submit).fold(f64::INFINITY, f64::min);
    let t1 = mine
        .iter()
        .map(|r| r.t_submit + r.wall_s)
        .fold(f64::NEG_INFINITY, f64::max);
    // A child is its session number and its fan-out (`inst`): each fan-out reuses the numbers.
    let mut kids: Vec<(u32, u64)> = records
        .iter()
        .filter(|r| r.parent == Some(parent) && r.t_submit >= t0 && r.t_submit <= t1)
        .map(|r| (r.inst, r.session))
        .collect();
    // One sort instance for the page (`shared::order`): by fan-out, then session number.
    shared::order::sort_by_u64_key(&mut kids, |&(inst, session)| {
        (u64::from(inst) << 32) | (session & 0xffff_ffff)
    });
    kids.dedup();
    kids.truncate(TIMELINE_CHILD_ROWS);
    let bar = |row: u32, r: &shared::record::RequestRecord| SessionBar {
        row,
        session: r.session,
        step: r.step,
        start_s: r.t_submit,
        first_token_s: r.ttft_s.map_or(r.t_submit + r.wall_s, |t| r.t_submit + t),
        end_s: r.t_submit + r.wall_s,
        cached_share: match (r.cached_tokens, r.prompt_tokens) {
            (Some(c), Some(p)) if p > 0 => Some(c as f64 / p as f64),
            _ => None,
        },
        ok: r.ok,
    };
    let mut out: Vec<SessionBar> = mine.iter().map(|r| bar(0, r)).collect();
    for r in records
        .iter()
        .filter(|r| r.parent == Some(parent) && r.t_submit >= t0 && r.t_submit <= t1)
    {
        if let Some(i) = kids.iter().position(|&k| k == (r.inst, r.session)) {
            out.push(bar(i as u32 + 1, r));
        }
    }
    shared::order::sort_by_u64_key(&mut out, |b| (u64::from(b.row) << 32) | u64::from(b.step));
    out
}

/// One point of the goodput-vs-load sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub x: f64,
    pub goodput_rps: f64,
    pub throughput_rps: f64,
}

/// Everything the explorer shows for one scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Numeric summary fields by their scoring-module (or seed) names, in the summary's order.
    pub metrics: Vec<(String, f64)>,
    /// Text summary fields (`engine`, `workload`).
    pub labels: Vec<(String, String)>,
    /// Values are already rounded by the model (the seed's rules): show them exactly.
    pub exact: bool,
    /// The TTFT distribution as CDF step points (ms, share ≤ x), at most [`CDF_POINTS`] + 2 of them. Computed
    /// where the run is (the worker), so the main thread never sorts a large run's samples.
    pub ttft_cdf: Vec<(f64, f64)>,
    /// The TPOT distribution, as `ttft_cdf`.
    pub tpot_cdf: Vec<(f64, f64)>,
    pub timeline: Vec<TimelineRow>,
    /// One session's requests and its sub-agents' ([`session_bars`]); empty for other workloads.
    pub session_view: Vec<SessionBar>,
    /// The summary's `retention` bands (the cached share by think time before a step); empty for the seed model
    /// and for runs without session steps after their first.
    pub retention: Vec<shared::metrics::Retention>,
    pub diagnostics: Vec<Callout>,
    pub slo_ttft_ms: f64,
    pub slo_tpot_ms: f64,
    /// What the sweep's x axis is.
    pub sweep_label: String,
    /// The current scenario's x on the sweep.
    pub sweep_current: Option<f64>,
    /// One line about the run (`80 requests · seed model`).
    pub describe: String,
}

impl Outcome {
    /// A numeric summary field by name.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// Whether a headline value meets its target: `Some(true)` good, `Some(false)` bad, `None` no judgement.
    pub fn verdict(&self, name: &str) -> Option<bool> {
        let v = self.get(name)?;
        if name.starts_with("ttft_p") {
            Some(v <= self.slo_ttft_ms)
        } else if name.starts_with("tpot_p") {
            Some(v <= self.slo_tpot_ms)
        } else if name.ends_with("attainment_ratio") {
            if v >= 0.9 {
                Some(true)
            } else if v < 0.5 {
                Some(false)
            } else {
                None
            }
        } else {
            None
        }
    }
}

/// Named numbers of a summary, in order.
pub type NumericFields = Vec<(String, f64)>;
/// Named texts of a summary, in order.
pub type TextFields = Vec<(String, String)>;

/// Numeric and text fields of a flat serde summary, in order (arrays and nested objects skipped).
pub fn flatten(summary: &Value) -> (NumericFields, TextFields) {
    let mut nums = Vec::new();
    let mut texts = Vec::new();
    if let Value::Object(map) = summary {
        for (k, v) in map {
            match v {
                Value::Number(n) => {
                    if let Some(x) = n.as_f64() {
                        nums.push((k.clone(), x));
                    }
                }
                Value::String(s) => texts.push((k.clone(), s.clone())),
                _ => {}
            }
        }
    }
    (nums, texts)
}

/// The scenario a fresh page opens with, as the JSON the form edits: agent sessions on the engine model
/// ([`shared::presets::default_engine_scenario`]), what users come for (issue #17). The seed model's scenario
/// ([`shared::presets::default_scenario`]) is one click away, on the model switch.
pub fn default_scenario() -> Value {
    Scenario::Engine(shared::presets::default_engine_scenario()).to_value()
}

/// The work a scenario represents (requests or session steps, counterfactual runs included), to decide whether
/// to compute on every edit.
pub fn size_of(sc: &Scenario) -> f64 {
    let runs = match sc {
        Scenario::Engine(e) if e.counterfactuals => 2.0,
        _ => 1.0,
    };
    runs * records_of(sc)
}

/// The requests (or session steps) of the scenario's own run: the records a result keeps in memory (the
/// counterfactual runs keep none).
pub fn records_of(sc: &Scenario) -> f64 {
    // The one estimate the CLI and live replay apply too (`shared::budget`).
    sc.estimate(true).requests
}

/// The page shows summaries, distributions of TTFT and TPOT and the timeline, never a record's own ITL p50/p99:
/// it skips them (a sort per request, about a fifth of the engine's time in wasm).
const SUMMARY_ONLY: engine::SimOptions = engine::SimOptions {
    record_itl_quantiles: false,
    keep_records: true,
};

/// What [`compute`], [`compute_window`] and [`sweep_point`] answer for the seed model, whose code loads on demand
/// ([`crate::model::seed`], run by [`crate::worker::wire::Job::run_async`]).
pub const SEED_ON_DEMAND: &str = "the seed model's code loads on demand: run its jobs through Job::run_async";

/// Compute everything the explorer shows for an engine scenario (the seed model's: [`crate::model::seed::compute`]).
pub fn compute(sc: &Scenario) -> Result<Outcome, String> {
    match sc {
        Scenario::Seed(_) => Err(SEED_ON_DEMAND.to_string()),
        Scenario::Engine(e) => compute_engine(e, None),
    }
}

/// [`compute`] over a live run's window (`shared::window`, like with like): the simulated requests of
/// `[0, end_s)`, recorded as a live run of that window records them, scored with the one scoring module. The seed
/// model has no per-request times to clip: it is computed whole, and `describe` says so.
pub fn compute_window(sc: &Scenario, end_s: f64, in_flight: InFlight) -> Result<Outcome, String> {
    if !(end_s.is_finite() && end_s >= 0.0) {
        return Err(format!("the live run's window must end at a time >= 0 s (got {end_s})"));
    }
    match sc {
        Scenario::Seed(_) => Err(SEED_ON_DEMAND.to_string()),
        Scenario::Engine(e) => compute_engine(e, Some((end_s, in_flight))),
    }
}

fn compute_engine(e: &EngineScenario, window: Option<(f64, InFlight)>) -> Result<Outcome, String> {
    let mut report = engine::simulate_with(e, SUMMARY_ONLY).map_err(|err| err.to_string())?;
    let simulated = report.summary.completed + report.summary.failed;
    if let Some((end_s, in_flight)) = window {
        report.records = shared::window::clip(&report.records, end_s, in_flight);
        report.summary = shared::metrics::summarize(&report.records, &e.slo);
        report.timeline.retain(|p| p.t_s < end_s);
    }
    let value = serde_json::to_value(&report.summary).map_err(|err| err.to_string())?;
    let (metrics, labels) = flatten(&value);
    let timeline = report
        .timeline
        .iter()
        .map(|p| TimelineRow {
            t_s: p.t_s,
            running: f64::from(p.running),
            queued: f64::from(p.queued),
            kv_use: (p.kv_capacity > 0).then(|| p.kv_blocks_used as f64 / p.kv_capacity as f64),
            cache_hit: (p.prompt_tokens > 0).then(|| p.cache_hit_tokens as f64 / p.prompt_tokens as f64),
        })
        .collect();
    let sweep_label = format!("x: {} (0.25×–4× the current value)", load_label(&e.workload));
    let sweep_current = Some(e.workload.load());
    Ok(Outcome {
        metrics,
        labels,
        exact: false,
        ttft_cdf: ttft_cdf(&report.records, CDF_POINTS),
        tpot_cdf: tpot_cdf(&report.records, CDF_POINTS),
        timeline,
        session_view: if e.workload.kind() == "sessions" {
            session_bars(&report.records)
        } else {
            Vec::new()
        },
        retention: report.summary.retention.clone(),
        diagnostics: engine_callouts(e, &report),
        slo_ttft_ms: e.slo.ttft_ms,
        slo_tpot_ms: e.slo.tpot_ms,
        sweep_label,
        sweep_current,
        describe: match window {
            None => format!("{simulated} requests · engine model · {} workload", e.workload.kind()),
            Some((end_s, _)) => format!(
                "{} of {simulated} requests: the live run's first {end_s:.1} s · engine model · {} workload",
                report.records.len(),
                e.workload.kind()
            ),
        },
    })
}

/// What the sweep's x axis is: the name of [`Workload::load`] for `w`'s kind.
fn load_label(w: &Workload) -> &'static str {
    match w {
        Workload::Bursty(_) => "mean arrival rate (req/s)",
        Workload::Poisson(_) | Workload::Gamma(_) | Workload::Trace(_) => "arrival rate (req/s)",
        Workload::Sessions(_) => "concurrent sessions",
        Workload::ClosedLoop(_) => "closed-loop users",
    }
}

fn tokens(n: u64) -> String {
    crate::ui::fmt::num(n as f64)
}

/// The engine model's diagnostics as call-outs with their numbers.
fn engine_callouts(e: &EngineScenario, r: &EngineReport) -> Vec<Callout> {
    let d = &r.diagnostics;
    let mut out = Vec::new();
    let o = &d.overbatched;
    let limit = match o.slo_batch_limit {
        Some(0) => "even one decoding sequence misses it".to_string(),
        Some(b) => format!("it allows at most {b} decoding sequences"),
        None => "no batch size crosses it".to_string(),
    };
    // A what-if: max_num_seqs would allow batches that miss the TPOT SLO. An alarm only when this run's batch
    // went past the limit; advice otherwise.
    let hit = o.overbatched && o.slo_batch_limit.is_none_or(|b| o.max_running > b);
    out.push(Callout {
        id: "overbatched".to_string(),
        severity: match (o.overbatched, hit) {
            (true, true) => Severity::Bad,
            (true, false) => Severity::Info,
            _ => Severity::Good,
        },
        title: match (o.overbatched, hit) {
            (true, true) => "Over-batched".to_string(),
            (true, false) => "Advice: the batch limit allows batches that miss the TPOT SLO".to_string(),
            _ => "Batch size within the TPOT SLO".to_string(),
        },
        body: format!(
            "TPOT SLO {} ms: at the run's mean decode context of {} tokens {limit}; a full batch (max running \
             sequences {}) would give {:.1} ms per token. Mean decode batch {:.1}, peak running {}{}.",
            o.tpot_slo_ms,
            crate::ui::fmt::num(o.mean_decode_context_tokens),
            o.max_num_seqs,
            o.tpot_at_max_num_seqs_ms,
            o.mean_decode_batch,
            o.max_running,
            if o.overbatched && !hit {
                ": this run stayed within the limit, so this is advice for heavier load, not a problem here"
            } else {
                ""
            }
        ),
    });
    let m = &d.cache_misses;
    if m.prompt_tokens > 0 {
        let share = |n: u64| crate::ui::fmt::pct(n as f64 / m.prompt_tokens as f64);
        out.push(Callout {
            id: "cache_misses".to_string(),
            severity: if m.missed_tokens > m.designed_cached_tokens.saturating_sub(m.cached_tokens).max(1) * 2 {
                Severity::Warn
            } else {
                Severity::Info
            },
            title: "Why prompt tokens missed the prefix cache".to_string(),
            body: format!(
                "{} of {} prompt tokens were cached ({}; designed cacheable: {}). Missed {}: cold first steps {}, \
                 new content (tool output, task) {}, evicted during think time {}, evicted for capacity {}, other {}{}.",
                tokens(m.cached_tokens),
                tokens(m.prompt_tokens),
                share(m.cached_tokens),
                share(m.designed_cached_tokens),
                tokens(m.missed_tokens),
                tokens(m.cold_first_step_tokens),
                tokens(m.new_content_tokens),
                tokens(m.evicted_think_tokens),
                tokens(m.capacity_tokens),
                tokens(m.other_tokens),
                if r.fleet.is_some() {
                    format!(", routed to another replica {}", tokens(m.routed_to_another_replica_tokens))
                } else {
                    String::new()
                } + &m
                    .evicted_from_tier_tokens
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| format!(", evicted from KV tier {i} {}", tokens(t)))
                    .collect::<String>()
            ),
        });
    }
    if !r.summary.retention.is_empty() {
        out.push(Callout {
            id: "retention".to_string(),
            severity: Severity::Info,
            title: "Retention across tool calls".to_string(),
            body: format!(
                "Cached share of session steps by the think time before them (steps): {}.",
                shared::metrics::retention_text(&r.summary.retention)
            ),
        });
    }
    if let Some(f) = &r.fleet {
        let rows: Vec<String> = f
            .replicas
            .iter()
            .map(|x| {
                format!(
                    "replica {}{}: {} requests, cached {}, mean running {:.1}, busy {}",
                    x.replica,
                    x.profile.as_ref().map_or(String::new(), |p| format!(" ({p})")),
                    x.requests,
                    crate::ui::fmt::pct(x.cached_share),
                    x.mean_running,
                    crate::ui::fmt::pct(x.busy_share)
                )
            })
            .collect();
        out.push(Callout {
            id: "fleet".to_string(),
            severity: if m.routed_to_another_replica_tokens * 10 > m.prompt_tokens {
                Severity::Warn
            } else {
                Severity::Info
            },
            title: format!("Fleet: {} replicas, router {}", f.replicas.len(), f.router.name()),
            body: format!(
                "Cached share {}; {} prompt tokens were cached on another replica than the one routed to. {}.",
                crate::ui::fmt::pct(if m.prompt_tokens > 0 {
                    m.cached_tokens as f64 / m.prompt_tokens as f64
                } else {
                    0.0
                }),
                tokens(m.routed_to_another_replica_tokens),
                rows.join("; ")
            ),
        });
    }
    let k = &d.kv_thrash;
    if k.preemptions > 0 || k.evicted_blocks > 0 {
        out.push(Callout {
            id: "kv_thrash".to_string(),
            severity: if k.preemptions > 0 {
                Severity::Bad
            } else {
                Severity::Info
            },
            title: if k.preemptions > 0 {
                "KV thrash: preemptions".to_string()
            } else {
                "KV evictions".to_string()
            },
            body: format!(
                "{} preemptions recomputed {} tokens; {} cached blocks were evicted to make room. Peak KV use {} of \
                 {} blocks ({}).",
                k.preemptions,
                tokens(k.recomputed_tokens),
                tokens(k.evicted_blocks),
                tokens(k.peak_kv_blocks_used),
                tokens(k.kv_capacity_blocks),
                crate::ui::fmt::pct(k.peak_kv_blocks_used as f64 / k.kv_capacity_blocks.max(1) as f64)
            ),
        });
    }
    if let Some(c) = &d.closed_loop_illusion {
        out.push(Callout {
            id: "closed_loop_illusion".to_string(),
            severity: if c.ttft_p99_ratio > 2.0 {
                Severity::Warn
            } else {
                Severity::Info
            },
            title: "Closed-loop illusion".to_string(),
            body: format!(
                "Open loop: TTFT p50 {} ms, p99 {} ms at {} req/s. The same requests one at a time (closed loop): \
                 TTFT p50 {} ms, p99 {} ms at {} req/s — the tail is {:.1}× worse once requests arrive on their own.",
                crate::ui::fmt::num(c.open_ttft_p50_ms),
                crate::ui::fmt::num(c.open_ttft_p99_ms),
                crate::ui::fmt::num(c.open_request_throughput_rps),
                crate::ui::fmt::num(c.closed_ttft_p50_ms),
                crate::ui::fmt::num(c.closed_ttft_p99_ms),
                crate::ui::fmt::num(c.closed_request_throughput_rps),
                c.ttft_p99_ratio
            ),
        });
    }
    if let Some(c) = &d.cache_off {
        out.push(Callout {
            id: "cache_off".to_string(),
            severity: Severity::Info,
            title: "Without prefix caching".to_string(),
            body: format!(
                "Turning the prefix cache off: TTFT p50 {} → {} ms, p99 {} → {} ms; output {} → {} tok/s.",
                crate::ui::fmt::num(c.cache_on_ttft_p50_ms),
                crate::ui::fmt::num(c.ttft_p50_ms),
                crate::ui::fmt::num(c.cache_on_ttft_p99_ms),
                crate::ui::fmt::num(c.ttft_p99_ms),
                crate::ui::fmt::num(c.cache_on_output_throughput_tok_s),
                crate::ui::fmt::num(c.output_throughput_tok_s)
            ),
        });
    }
    let _ = e;
    out
}

/// The explorer's scenario with its session workload using `ladder` (and the solver's shape: reply, tool output
/// and task tokens per step). A scenario without a session workload is switched to the engine model's default
/// session scenario first.
pub fn with_ladder(
    json: &Value,
    ladder: &str,
    options: Option<&shared::ladder::solve::SolveOptions>,
) -> Result<Value, String> {
    let is_sessions = json.pointer("/workload/kind").and_then(Value::as_str) == Some("sessions");
    let mut json = if is_sessions {
        json.clone()
    } else {
        default_sessions_scenario()
            .ok_or("a ladder needs a session workload, which this build's models do not offer yet")?
            .to_value()
    };
    let Some(Value::Object(w)) = json.pointer_mut("/workload") else {
        return Err("the scenario has no workload".to_string());
    };
    w.insert("ladder".to_string(), Value::from(ladder));
    if let Some(o) = options {
        w.insert("gen_tokens".to_string(), Value::from(o.shape.reply_tokens));
        w.insert("tool_tokens".to_string(), Value::from(o.shape.tool_tokens()));
        w.insert("task_tokens".to_string(), Value::from(o.shape.task_tokens));
        w.insert("sessions".to_string(), Value::from(o.slots as u64));
        w.insert(
            "respawn".to_string(),
            Value::from(o.weighting == shared::ladder::stats::Weighting::Respawn),
        );
    }
    Scenario::from_value(json.clone()).map_err(|e| format!("the ladder does not fit the scenario: {e}"))?;
    Ok(json)
}

/// What "set" on an engine scenario's absent `fleet` puts there: two replicas behind a round-robin router.
pub fn default_fleet() -> Value {
    serde_json::json!({"replicas": 2, "router": "round_robin", "load_cap": 1.5})
}

/// The engine model's default agent-session scenario.
pub fn default_sessions_scenario() -> Option<Scenario> {
    Some(Scenario::Engine(shared::presets::default_engine_scenario()))
}

/// Multipliers of the current load for the sweep.
pub const SWEEP: [f64; 10] = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0];

/// The scenario's workload with its load scaled by `factor` ([`Workload::scaled`]), without the counterfactual runs
/// (a sweep point draws only goodput and throughput).
fn with_load(sc: &Scenario, factor: f64) -> Scenario {
    match sc {
        Scenario::Seed(s) => {
            let mut s = s.clone();
            let SeedWorkload::Bursty(w) = &mut s.workload;
            if let Workload::Bursty(scaled) = Workload::Bursty(w.clone()).scaled(factor) {
                *w = scaled;
            }
            Scenario::Seed(s)
        }
        Scenario::Engine(e) => Scenario::Engine(EngineScenario {
            workload: e.workload.scaled(factor),
            counterfactuals: false,
            ..e.clone()
        }),
    }
}

/// The load of a scenario's workload ([`Workload::load`]; the seed's bursty trace: its `mean_rps`): the sweep's x.
fn load_of(sc: &Scenario) -> f64 {
    match sc {
        Scenario::Seed(s) => {
            let SeedWorkload::Bursty(w) = &s.workload;
            w.mean_rps
        }
        Scenario::Engine(e) => e.workload.load(),
    }
}

/// The scenarios of the goodput-vs-load sweep: the current one with its load scaled by each of [`SWEEP`] (a count
/// that rounds to the same value as an earlier point is not run twice), each valid.
pub fn sweep_plan(sc: &Scenario) -> Vec<Scenario> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for m in SWEEP {
        let s = with_load(sc, m);
        let x = load_of(&s).to_bits();
        if seen.contains(&x) {
            continue;
        }
        seen.push(x);
        if s.validate().is_ok() {
            out.push(s);
        }
    }
    out
}

/// One sweep point: the scenario's load and its goodput and throughput.
pub fn sweep_point(sc: &Scenario) -> Option<SweepPoint> {
    let x = load_of(sc);
    match sc {
        Scenario::Seed(_) => None,
        Scenario::Engine(e) => {
            // The sweep reads only each run's summary: no records are kept.
            let r = engine::simulate_with(e, engine::SimOptions::SUMMARY).ok()?;
            Some(SweepPoint {
                x,
                goodput_rps: r.summary.goodput_rps,
                throughput_rps: r.summary.request_throughput_rps,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// The over-batching what-if is an alarm only when the run's own batch went past the SLO's batch limit.
    #[test]
    fn over_batching_is_advice_unless_the_run_hit_it() {
        let Some(Scenario::Engine(mut e)) = default_sessions_scenario() else {
            panic!("the sessions default is an engine scenario")
        };
        e.counterfactuals = false;
        let o = compute(&Scenario::Engine(e.clone())).expect("computes");
        let r = shared::engine::simulate_with(&e, shared::engine::SimOptions::SUMMARY).expect("simulates");
        let d = &r.diagnostics.overbatched;
        let c = o
            .diagnostics
            .iter()
            .find(|c| c.id == "overbatched")
            .expect("an over-batching call-out");
        let hit = d.overbatched && d.slo_batch_limit.is_none_or(|b| d.max_running > b);
        assert_eq!(c.severity == Severity::Bad, hit, "{c:?} {d:?}");
        if d.overbatched && !hit {
            assert_eq!(c.severity, Severity::Info);
            assert!(c.title.starts_with("Advice"), "{c:?}");
        }
        // A tight TPOT SLO the run's batch does cross: an alarm.
        e.slo.tpot_ms = 1.0;
        let o = compute(&Scenario::Engine(e)).expect("computes");
        let c = o
            .diagnostics
            .iter()
            .find(|c| c.id == "overbatched")
            .expect("an over-batching call-out");
        assert_eq!((c.severity, c.title.as_str()), (Severity::Bad, "Over-batched"));
    }

    #[test]
    fn a_fleet_scenario_shows_each_replica_and_the_misses_routed_away() {
        let Some(Scenario::Engine(mut e)) = default_sessions_scenario() else {
            panic!("the sessions default is an engine scenario")
        };
        e.counterfactuals = false;
        e.fleet = Some(shared::engine::FleetSpec {
            replicas: 3,
            router: shared::engine::Router::RoundRobin,
            load_cap: 1.5,
            profiles: Vec::new(),
        });
        let o = compute(&Scenario::Engine(e)).expect("computes");
        let f = o
            .diagnostics
            .iter()
            .find(|d| d.id == "fleet")
            .expect("a fleet call-out");
        assert!(
            f.title.contains("3 replicas") && f.title.contains("round_robin"),
            "{}",
            f.title
        );
        assert!(
            f.body.contains("replica 0") && f.body.contains("replica 2"),
            "{}",
            f.body
        );
        let m = o.diagnostics.iter().find(|d| d.id == "cache_misses").expect("misses");
        assert!(m.body.contains("routed to another replica"), "{}", m.body);
    }

    #[test]
    fn default_scenario_computes() {
        let sc = Scenario::from_value(default_scenario()).expect("default is valid");
        let Scenario::Engine(e) = &sc else {
            panic!("the page opens on the engine model")
        };
        assert!(
            matches!(e.workload, shared::workload::Workload::Sessions(_)),
            "agent sessions"
        );
        let o = compute(&sc).expect("computes");
        assert!(o.get("ttft_p50_ms").is_some_and(|v| v > 0.0));
        // The seed model's scenario, one click away.
        let Scenario::Seed(seed) = shared::presets::default_scenario() else {
            panic!("the seed model's default")
        };
        assert_eq!(
            compute(&Scenario::Seed(seed.clone())),
            Err(SEED_ON_DEMAND.to_string()),
            "its code loads on demand"
        );
        let o = crate::model::seed::compute(&seed).expect("computes");
        assert_eq!(o.get("ttft_p50_ms"), Some(3915.16));
        assert!(o.diagnostics.iter().any(|d| d.id == "closed_loop_illusion"));
    }

    #[test]
    fn the_form_defaults_are_the_shared_ones_and_every_kind_has_a_label() {
        for kind in shared::presets::WORKLOAD_KINDS {
            let w = default_workload(kind).expect(kind);
            assert_eq!(w["kind"], kind);
            assert_ne!(workload_label(kind), "Workload", "{kind}");
        }
        assert_eq!(
            default_length("fixed", 300.0),
            Some(serde_json::json!({"dist": "fixed", "tokens": 300}))
        );
    }

    #[test]
    fn engine_default_computes_with_samples_and_callouts() {
        let sc = default_sessions_scenario().unwrap();
        let o = compute(&sc).expect("computes");
        assert!(o.get("ttft_p50_ms").is_some() && o.get("goodput_rps").is_some());
        assert!(!o.ttft_cdf.is_empty() && !o.tpot_cdf.is_empty() && !o.timeline.is_empty());
        assert!(o.ttft_cdf.len() <= CDF_POINTS + 2);
        assert!(o.diagnostics.iter().any(|d| d.id == "overbatched"));
    }

    /// The session timeline draws one session's first run and its sub-agents: the session's steps in order on row
    /// 0, back to back with think gaps; each child's steps on its own row, started after the parent's fan-out step
    /// ended and before the parent's next step (the parent waits for them).
    #[test]
    fn the_session_timeline_shows_a_session_and_its_children() {
        let mut v = default_sessions_scenario().unwrap().to_value();
        v["workload"]["subagents"] =
            serde_json::json!({"every_steps": 3, "count": 2, "steps": 2, "gen_tokens": 100, "tool_tokens": 200});
        let sc = Scenario::from_value(v).expect("a scenario with sub-agents");
        let o = compute(&sc).expect("computes");
        let bars = &o.session_view;
        let parent: Vec<&SessionBar> = bars.iter().filter(|b| b.row == 0).collect();
        assert!(parent.len() >= 4, "{bars:?}");
        assert!(
            parent
                .windows(2)
                .all(|w| w[0].step + 1 == w[1].step && w[0].end_s <= w[1].start_s)
        );
        let rows = bars.iter().map(|b| b.row).max().unwrap_or(0);
        assert!(rows >= 2 && rows as usize <= TIMELINE_CHILD_ROWS, "{rows}");
        for row in 1..=rows {
            let kid: Vec<&SessionBar> = bars.iter().filter(|b| b.row == row).collect();
            assert_eq!(kid.iter().map(|b| b.step).collect::<Vec<_>>(), vec![0, 1], "row {row}");
            // Forked after a parent step (every 3rd), waited for before the parent's next one.
            let fork = parent
                .iter()
                .rposition(|p| p.end_s <= kid[0].start_s)
                .expect("after a parent step");
            assert_eq!(parent[fork].step % 3, 2, "row {row}");
            if let Some(next) = parent.get(fork + 1) {
                assert!(
                    kid[1].end_s <= next.start_s,
                    "row {row}: the parent waits for its children"
                );
            }
            assert!(
                kid.iter()
                    .all(|b| b.start_s <= b.first_token_s && b.first_token_s <= b.end_s)
            );
        }
        // Other workloads draw no session.
        let mut v = default_sessions_scenario().unwrap().to_value();
        v["workload"] = serde_json::json!({"kind": "closed_loop", "users": 4, "requests": 40,
            "prompt": {"dist": "fixed", "tokens": 500}, "output": {"dist": "fixed", "tokens": 50}});
        if let Ok(sc) = Scenario::from_value(v) {
            assert!(compute(&sc).expect("computes").session_view.is_empty());
        }
    }

    #[test]
    fn a_window_scores_only_the_requests_of_that_window() {
        let sc = default_sessions_scenario().unwrap();
        let whole = compute(&sc).expect("computes");
        let Scenario::Engine(e) = &sc else {
            panic!("engine default")
        };
        let report = engine::simulate_with(e, SUMMARY_ONLY).unwrap();
        let end = report.records.iter().map(|r| r.t_submit).fold(0.0, f64::max) / 4.0;
        let early = compute_window(&sc, end, InFlight::Cut).expect("computes");
        let sent = report.records.iter().filter(|r| r.t_submit < end).count() as f64;
        let done = report.records.iter().filter(|r| r.t_submit + r.wall_s <= end).count() as f64;
        assert_eq!(early.get("completed"), Some(done));
        assert_eq!(early.get("completed").unwrap() + early.get("failed").unwrap(), sent);
        assert!(early.get("completed") < whole.get("completed"));
        assert!(early.describe.contains("first"), "{}", early.describe);
        // A window past the run's end changes no number.
        let all = compute_window(&sc, 1e9, InFlight::Cut).expect("computes");
        assert_eq!(all.metrics, whole.metrics);
        assert_eq!(all.ttft_cdf, whole.ttft_cdf);
        assert!(compute_window(&sc, f64::NAN, InFlight::Cut).is_err());
    }

    #[test]
    fn sweep_scales_the_load() {
        let sc = shared::presets::default_scenario();
        let plan = sweep_plan(&sc);
        assert_eq!(plan.len(), SWEEP.len());
        let pts: Vec<SweepPoint> = plan
            .iter()
            .filter_map(|sc| match sc {
                Scenario::Seed(s) => crate::model::seed::sweep_point(s),
                Scenario::Engine(_) => sweep_point(sc),
            })
            .collect();
        assert_eq!(pts.len(), plan.len());
        assert_eq!(pts[3].x, 8.5);
        assert_eq!(pts[0].x, 8.5 * 0.25);
        // Engine sessions: counts are rounded and never repeated; the counterfactual runs are off.
        let Some(Scenario::Engine(mut e)) = default_sessions_scenario() else {
            panic!("engine default")
        };
        let Workload::Sessions(w) = &mut e.workload else {
            panic!("sessions")
        };
        w.sessions = 2;
        let plan = sweep_plan(&Scenario::Engine(e));
        let xs: Vec<f64> = plan.iter().map(load_of).collect();
        assert_eq!(xs, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0]);
        assert!(
            plan.iter()
                .all(|s| matches!(s, Scenario::Engine(e) if !e.counterfactuals))
        );
    }
}
