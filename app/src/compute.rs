//! The page's only door into the models: turns a `shared::scenario::Scenario` into what the page draws.
//!
//! Every number comes from `shared` (`seed_model::evaluate`, `engine::simulate`, `metrics::summarize`); this
//! module only reshapes results for display (flat metric lists, CDF samples, call-outs) and builds derived
//! scenarios (the rate sweep, the closed-loop counterfactual) that it hands back to `shared`.

use serde_json::{Value, json};
use shared::engine::{self, EngineReport, EngineScenario};
use shared::scenario::Scenario;
use shared::seed_model::{self, SeedScenario};

use crate::charts::cdf;

/// Points of the TTFT and TPOT CDFs a result carries (the charts draw them as they are).
pub const CDF_POINTS: usize = 400;

/// The models the page offers: (`model` tag, label).
pub const MODELS: [(&str, &str); 2] = [("seed", "Seed model"), ("engine", "Engine model")];

/// The workload kinds of the engine model, with labels.
pub const WORKLOAD_KINDS: [(&str, &str); 5] = [
    ("sessions", "Agent sessions"),
    ("bursty", "Bursty trace (seed)"),
    ("poisson", "Poisson arrivals"),
    ("gamma", "Gamma arrivals"),
    ("closed_loop", "Closed-loop users"),
];

/// A default workload of each kind (the session defaults are the seed replay's, shortened to 20 minutes).
pub fn default_workload(kind: &str) -> Option<Value> {
    Some(lit(match kind {
        "sessions" => {
            r#"{"kind": "sessions", "sessions": 8, "steps": 12, "base_tokens": 22000, "gen_tokens": 700,
            "tool_tokens": 2020, "think_s": 6.0, "dist": "lognormal", "spread": 0.5, "respawn": false,
            "stagger_s": 4.0, "duration_s": 1200.0, "drain": false, "drain_grace_s": 420.0, "task_tokens": 16}"#
        }
        "bursty" => r#"{"kind": "bursty", "num_requests": 80, "seed": 42, "mean_rps": 8.5}"#,
        "poisson" => {
            r#"{"kind": "poisson", "num_requests": 500, "rate_rps": 4.0,
            "prompt": {"dist": "lognormal", "median": 2048, "sigma": 0.6}, "output": {"dist": "fixed", "tokens": 256},
            "shared_prefix_tokens": 1024}"#
        }
        "gamma" => {
            r#"{"kind": "gamma", "num_requests": 500, "rate_rps": 4.0, "cv": 2.0,
            "prompt": {"dist": "lognormal", "median": 2048, "sigma": 0.6}, "output": {"dist": "fixed", "tokens": 256},
            "shared_prefix_tokens": 1024}"#
        }
        "closed_loop" => {
            r#"{"kind": "closed_loop", "users": 8, "num_requests": 400, "think_s": 0.0,
            "prompt": {"dist": "fixed", "tokens": 2048}, "output": {"dist": "fixed", "tokens": 256},
            "shared_prefix_tokens": 1024}"#
        }
        _ => return None,
    }))
}

/// A JSON constant written as text. `json!` compiles every key and value into code: the page's presets and
/// defaults as text take 1.7 KB less of its gzip'd wasm (same values). The tests apply every constant (a typo
/// would be `Null`, which no scenario accepts).
fn lit(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// A default length distribution of each shape, centred on `typical` tokens.
pub fn default_length(dist: &str, typical: f64) -> Option<Value> {
    let t = typical.round().max(1.0) as u64;
    Some(match dist {
        "fixed" => json!({"dist": "fixed", "tokens": t}),
        "uniform" => json!({"dist": "uniform", "min": (t / 2).max(1), "max": t + t / 2}),
        "lognormal" => json!({"dist": "lognormal", "median": t, "sigma": 0.5}),
        _ => return None,
    })
}

/// The engine model's default scenario: agent sessions on a Llama-3-8B / H100 profile.
pub fn default_engine_scenario() -> Option<Scenario> {
    let profile = serde_json::to_value(engine::presets::llama3_8b_h100()).ok()?;
    let mut sc =
        lit(r#"{"model": "engine", "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 42, "counterfactuals": true}"#);
    sc["workload"] = default_workload("sessions")?;
    sc["profile"] = profile;
    Scenario::from_value(sc).ok()
}

/// How loud a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Good,
    Info,
    Warn,
    Bad,
}

/// A diagnostic call-out with its numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Callout {
    /// `data-diagnostic` id (`overbatched`, `closed_loop_illusion`, ...).
    pub id: String,
    pub severity: Severity,
    pub title: String,
    pub body: String,
}

/// One point of the time series charts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelineRow {
    pub t_s: f64,
    pub running: f64,
    pub queued: f64,
    /// KV-cache use, 0–1.
    pub kv_use: Option<f64>,
    /// Share of prompt tokens served from the prefix cache in this interval, 0–1.
    pub cache_hit: Option<f64>,
}

/// One point of the goodput-vs-load sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepPoint {
    pub x: f64,
    pub goodput_rps: f64,
    pub throughput_rps: f64,
}

/// Everything the explorer shows for one scenario.
#[derive(Debug, Clone, PartialEq)]
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

/// The seed's default scenario: its bursty trace (80 requests, seed 42, 8.5 rps) on `profile`.
pub fn seed_scenario_with(profile: seed_model::SeedProfile) -> Option<Scenario> {
    let mut sc = lit(
        r#"{"model": "seed", "workload": {"kind": "bursty", "num_requests": 80, "seed": 42, "mean_rps": 8.5},
        "slo": {"ttft_ms": 500.0, "tpot_ms": 35.0}, "closed_loop": false, "workload_name": "agent-shared-prefix"}"#,
    );
    sc["profile"] = serde_json::to_value(profile).ok()?;
    Scenario::from_value(sc).ok()
}

/// The scenario a fresh page opens with.
pub fn default_scenario() -> Value {
    seed_scenario_with(seed_model::SEED_PROFILES[0].clone()).map_or(Value::Null, |s| s.to_value())
}

/// The default scenario of a model (`seed`, `engine`).
pub fn default_for_model(model: &str) -> Option<Scenario> {
    match model {
        "seed" => seed_scenario_with(seed_model::SEED_PROFILES[0].clone()),
        "engine" => default_engine_scenario(),
        _ => None,
    }
}

/// What a preset changes.
#[derive(Debug, Clone)]
pub enum PresetKind {
    /// Replaces the whole scenario.
    Scenario(Box<Scenario>),
    /// Replaces the engine profile (switching to the engine model if needed).
    EngineProfile(Value),
    /// Replaces the workload of an engine-model scenario (switching to the engine model if needed).
    Workload(Value),
    /// Replaces the SLOs.
    Slo(Value),
}

/// A named preset with where its numbers come from.
#[derive(Debug, Clone)]
pub struct Preset {
    pub id: String,
    pub label: String,
    pub basis: String,
    pub kind: PresetKind,
}

impl Preset {
    /// The scenario after applying this preset to `current`.
    pub fn apply(&self, current: &Value) -> Option<Scenario> {
        let engine_base = || {
            if current.get("model").and_then(Value::as_str) == Some("engine") {
                Some(current.clone())
            } else {
                default_engine_scenario().map(|s| s.to_value())
            }
        };
        let replace = |mut base: Value, key: &str, v: &Value| {
            base[key] = v.clone();
            Scenario::from_value(base).ok()
        };
        match &self.kind {
            PresetKind::Scenario(s) => Some((**s).clone()),
            PresetKind::EngineProfile(p) => replace(engine_base()?, "profile", p),
            PresetKind::Workload(w) => replace(engine_base()?, "workload", w),
            PresetKind::Slo(slo) => replace(current.clone(), "slo", slo),
        }
    }
}

/// All presets: the seed's profiles and diagnostics, then the engine presets.
pub fn presets() -> Vec<Preset> {
    let mut out = Vec::new();
    for p in seed_model::SEED_PROFILES.iter() {
        if let Some(sc) = seed_scenario_with(p.clone()) {
            out.push(Preset {
                id: format!("seed:{}", p.name),
                label: format!("Seed · {}", p.name),
                basis: "the seed's profile (scenario_sim.py): assumed coefficients, not measurements; \
                        trace of 80 bursty requests at 8.5 rps, seed 42"
                    .to_string(),
                kind: PresetKind::Scenario(Box::new(sc)),
            });
        }
    }
    if let Some(Scenario::Seed(mut s)) = seed_scenario_with(seed_model::OVERBATCHED_PROFILE.clone()) {
        set_seed_rate(&mut s, 15.0);
        s.workload_name = "overbatched-tail-violation".to_string();
        out.push(Preset {
            id: "seed:overbatched_unbounded".to_string(),
            label: "Seed · overbatched (48 slots, 15 rps)".to_string(),
            basis: "the seed's over-batched diagnostic: 48 slots keep TTFT low but push TPOT past its SLO".to_string(),
            kind: PresetKind::Scenario(Box::new(Scenario::Seed(s))),
        });
    }
    for p in engine::presets::all() {
        if let Ok(v) = serde_json::to_value(&p) {
            out.push(Preset {
                id: format!("engine:{}", p.name),
                label: format!("Engine · {}", p.name),
                basis: p.basis.clone(),
                kind: PresetKind::EngineProfile(v),
            });
        }
    }
    let workloads = [
        (
            "prod-ladder",
            "Workload · production ladder (seed 002)",
            "the seed's LADDER_PROD, solved for production (median 26,032 / p90 64,648 prompt tokens, 97 % cached): \
             10 respawning slots, reply 700 + tool output 2,020 tokens per step",
            r#"{"kind": "sessions", "sessions": 10, "steps": 12, "base_tokens": 22000, "gen_tokens": 700,
                "tool_tokens": 2020, "think_s": 6.0, "dist": "lognormal", "spread": 0.5,
                "respawn": true, "stagger_s": 4.0, "duration_s": 1800.0,
                "drain": true, "drain_grace_s": 420.0, "task_tokens": 16}"#,
        ),
        (
            "agentic-coding",
            "Workload · agentic coding (SWE-bench-like)",
            "PRESETS.md: sessions of 8–15 calls, 1–3k-token inputs, 50–300 ms tool gaps",
            r#"{"kind": "sessions", "sessions": 16, "steps": 12, "base_tokens": 2000, "gen_tokens": 300,
                "tool_tokens": 1200, "think_s": 0.175, "dist": "uniform", "spread": 0.25, "respawn": false,
                "stagger_s": 0.5, "duration_s": 1800.0, "drain": false, "drain_grace_s": 60.0, "task_tokens": 16}"#,
        ),
        (
            "chat",
            "Workload · chat 256/256",
            "PRESETS.md: the classic benchmark shape, 256 prompt / 256 output tokens, Poisson arrivals",
            r#"{"kind": "poisson", "num_requests": 1000, "rate_rps": 10.0,
                "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 256},
                "shared_prefix_tokens": 0}"#,
        ),
        (
            "summarization",
            "Workload · summarization 4,096/512",
            "PRESETS.md: long prompts, medium outputs, Poisson arrivals",
            r#"{"kind": "poisson", "num_requests": 500, "rate_rps": 2.0,
                "prompt": {"dist": "fixed", "tokens": 4096}, "output": {"dist": "fixed", "tokens": 512},
                "shared_prefix_tokens": 0}"#,
        ),
        (
            "long-prefix",
            "Workload · long shared prefix",
            "PRESETS.md: 5 turns on a 6.5–10k-token prefix, 128-token turns and outputs",
            r#"{"kind": "sessions", "sessions": 16, "steps": 5, "base_tokens": 8000, "gen_tokens": 128,
                "tool_tokens": 128, "think_s": 2.0, "dist": "uniform", "spread": 0.2, "respawn": false,
                "stagger_s": 1.0, "duration_s": 1800.0, "drain": false, "drain_grace_s": 60.0, "task_tokens": 16}"#,
        ),
    ];
    for (id, label, basis, w) in workloads {
        let mut w = lit(w);
        if id == "prod-ladder" {
            w["ladder"] = Value::from(shared::ladder::LADDER_PROD);
        }
        out.push(Preset {
            id: format!("workload:{id}"),
            label: label.to_string(),
            basis: basis.to_string(),
            kind: PresetKind::Workload(w),
        });
    }
    for (id, label, basis, slo) in [
        (
            "seed",
            "SLO · seed (TTFT 500 ms, TPOT 35 ms)",
            "the seed's SLOs",
            r#"{"ttft_ms": 500.0, "tpot_ms": 35.0}"#,
        ),
        (
            "distserve",
            "SLO · DistServe (TTFT 200 ms, TPOT 100 ms)",
            "DistServe's example SLOs (judged at 90 % attainment)",
            r#"{"ttft_ms": 200.0, "tpot_ms": 100.0}"#,
        ),
        (
            "vidur",
            "SLO · Vidur search (TTFT 2 s, TPOT 200 ms)",
            "Vidur's search constraints (TTFT p90 < 2 s, TBT p99 < 200 ms)",
            r#"{"ttft_ms": 2000.0, "tpot_ms": 200.0}"#,
        ),
    ] {
        out.push(Preset {
            id: format!("slo:{id}"),
            label: label.to_string(),
            basis: basis.to_string(),
            kind: PresetKind::Slo(lit(slo)),
        });
    }
    out
}

fn set_seed_rate(s: &mut SeedScenario, rps: f64) {
    let seed_model::SeedWorkload::Bursty(w) = &mut s.workload;
    w.mean_rps = rps;
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

/// Compute everything the explorer shows.
pub fn compute(sc: &Scenario) -> Result<Outcome, String> {
    match sc {
        Scenario::Seed(s) => compute_seed(s),
        Scenario::Engine(e) => compute_engine(e),
    }
}

fn compute_engine(e: &EngineScenario) -> Result<Outcome, String> {
    let report = engine::simulate_with(e, SUMMARY_ONLY).map_err(|err| err.to_string())?;
    let value = serde_json::to_value(&report.summary).map_err(|err| err.to_string())?;
    let (metrics, labels) = flatten(&value);
    let ttft_ms: Vec<f64> = report
        .records
        .iter()
        .filter_map(|r| r.ttft_s.map(|t| t * 1000.0))
        .collect();
    let tpot_ms: Vec<f64> = report.records.iter().filter_map(|r| r.tpot_ms()).collect();
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
    let (sweep_label, sweep_current) = load_field(&e.workload).map_or((String::new(), None), |(name, v)| {
        (format!("x: {name} (0.25×–4× the current value)"), Some(v))
    });
    Ok(Outcome {
        metrics,
        labels,
        exact: false,
        ttft_cdf: cdf(&ttft_ms, CDF_POINTS),
        tpot_cdf: cdf(&tpot_ms, CDF_POINTS),
        timeline,
        diagnostics: engine_callouts(e, &report),
        slo_ttft_ms: e.slo.ttft_ms,
        slo_tpot_ms: e.slo.tpot_ms,
        sweep_label,
        sweep_current,
        describe: format!(
            "{} requests · engine model · {} workload",
            report.summary.completed + report.summary.failed,
            e.workload.kind()
        ),
    })
}

/// The workload field that sets its load, for the sweep's axis: (label, value).
fn load_field(w: &shared::workload::Workload) -> Option<(&'static str, f64)> {
    use shared::workload::Workload;
    Some(match w {
        Workload::Bursty(w) => ("mean arrival rate (req/s)", w.mean_rps),
        Workload::Poisson(w) => ("arrival rate (req/s)", w.rate_rps),
        Workload::Gamma(w) => ("arrival rate (req/s)", w.rate_rps),
        Workload::Sessions(w) => ("concurrent sessions", f64::from(w.sessions)),
        Workload::ClosedLoop(w) => ("closed-loop users", f64::from(w.users)),
    })
}

fn tokens(n: u64) -> String {
    crate::fmt::num(n as f64)
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
    out.push(Callout {
        id: "overbatched".to_string(),
        severity: if o.overbatched { Severity::Bad } else { Severity::Good },
        title: if o.overbatched {
            "Over-batched".to_string()
        } else {
            "Batch size within the TPOT SLO".to_string()
        },
        body: format!(
            "TPOT SLO {} ms: at the run's mean decode context of {} tokens {limit}; max_num_seqs {} would give \
             {:.1} ms per token. Mean decode batch {:.1}, peak running {}.",
            o.tpot_slo_ms,
            crate::fmt::num(o.mean_decode_context_tokens),
            o.max_num_seqs,
            o.tpot_at_max_num_seqs_ms,
            o.mean_decode_batch,
            o.max_running
        ),
    });
    let m = &d.cache_misses;
    if m.prompt_tokens > 0 {
        let share = |n: u64| crate::fmt::pct(n as f64 / m.prompt_tokens as f64);
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
                 new content (tool output, task) {}, evicted during think time {}, evicted for capacity {}, other {}.",
                tokens(m.cached_tokens),
                tokens(m.prompt_tokens),
                share(m.cached_tokens),
                share(m.designed_cached_tokens),
                tokens(m.missed_tokens),
                tokens(m.cold_first_step_tokens),
                tokens(m.new_content_tokens),
                tokens(m.evicted_think_tokens),
                tokens(m.capacity_tokens),
                tokens(m.other_tokens)
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
                crate::fmt::pct(k.peak_kv_blocks_used as f64 / k.kv_capacity_blocks.max(1) as f64)
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
                crate::fmt::num(c.open_ttft_p50_ms),
                crate::fmt::num(c.open_ttft_p99_ms),
                crate::fmt::num(c.open_request_throughput_rps),
                crate::fmt::num(c.closed_ttft_p50_ms),
                crate::fmt::num(c.closed_ttft_p99_ms),
                crate::fmt::num(c.closed_request_throughput_rps),
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
                crate::fmt::num(c.cache_on_ttft_p50_ms),
                crate::fmt::num(c.ttft_p50_ms),
                crate::fmt::num(c.cache_on_ttft_p99_ms),
                crate::fmt::num(c.ttft_p99_ms),
                crate::fmt::num(c.cache_on_output_throughput_tok_s),
                crate::fmt::num(c.output_throughput_tok_s)
            ),
        });
    }
    let _ = e;
    out
}

fn compute_seed(s: &SeedScenario) -> Result<Outcome, String> {
    let summary = seed_model::evaluate(s).map_err(|e| e.to_string())?;
    let value = serde_json::to_value(&summary).map_err(|e| e.to_string())?;
    let (metrics, labels) = flatten(&value);
    let seed_model::SeedWorkload::Bursty(w) = &s.workload;
    let mut diagnostics = Vec::new();
    // Closed-loop illusion: the same trace, one request at a time.
    let mut flipped = s.clone();
    flipped.closed_loop = !s.closed_loop;
    if let Ok(other) = seed_model::evaluate(&flipped) {
        let (open, closed) = if s.closed_loop {
            (&other, &summary)
        } else {
            (&summary, &other)
        };
        let gap = closed.slo_attainment_ratio - open.slo_attainment_ratio;
        diagnostics.push(Callout {
            id: "closed_loop_illusion".to_string(),
            severity: if gap > 0.2 { Severity::Warn } else { Severity::Info },
            title: "Closed-loop illusion".to_string(),
            body: format!(
                "Open loop (requests arrive on their own schedule): TTFT p50 {} ms, attainment {}. \
                 Closed loop on the same trace (one request at a time): TTFT p50 {} ms, attainment {}, \
                 but only {} req/s. A closed-loop benchmark hides the queueing that agent traffic meets.",
                open.ttft_p50_ms,
                crate::fmt::pct(open.slo_attainment_ratio),
                closed.ttft_p50_ms,
                crate::fmt::pct(closed.slo_attainment_ratio),
                closed.request_throughput_rps
            ),
        });
    }
    // Over-batching: TPOT grows with the batch; say where it crosses the SLO.
    let p = &s.profile;
    if p.batch_tpot_slope_ms > 0.0 {
        let cross = (s.slo.tpot_ms - p.base_tpot_ms) / p.batch_tpot_slope_ms;
        let at_full = p.base_tpot_ms + p.batch_tpot_slope_ms * p.max_batch_slots as f64;
        let over = (p.max_batch_slots as f64) > cross;
        diagnostics.push(Callout {
            id: "overbatched".to_string(),
            severity: if over { Severity::Bad } else { Severity::Good },
            title: if over {
                "Over-batched".to_string()
            } else {
                "Batch size within the TPOT SLO".to_string()
            },
            body: format!(
                "TPOT = {} + {} × batch ms: it crosses the {} ms SLO at a batch of {:.1}; with all {} slots busy \
                 it is {:.2} ms.{}",
                p.base_tpot_ms,
                p.batch_tpot_slope_ms,
                s.slo.tpot_ms,
                cross.max(0.0),
                p.max_batch_slots,
                at_full,
                if over {
                    " Fewer slots would trade queueing (TTFT) for per-token speed."
                } else {
                    ""
                }
            ),
        });
    }
    if summary.ttft_p50_ms > s.slo.ttft_ms {
        diagnostics.push(Callout {
            id: "queueing".to_string(),
            severity: Severity::Bad,
            title: "Requests queue for the prefill lane".to_string(),
            body: format!(
                "Half the requests wait more than {} ms for their first token (SLO {} ms): the arrival rate \
                 ({} req/s mean, bursty) exceeds what one prefill lane at {} tok/ms with {} of the shared prefix \
                 cached can serve ({} req/s achieved).",
                summary.ttft_p50_ms,
                s.slo.ttft_ms,
                w.mean_rps,
                p.prefill_tokens_per_ms,
                crate::fmt::pct(p.prefix_cache_hit_efficiency),
                summary.request_throughput_rps
            ),
        });
    }
    Ok(Outcome {
        metrics,
        labels,
        exact: true,
        ttft_cdf: Vec::new(),
        tpot_cdf: Vec::new(),
        timeline: Vec::new(),
        diagnostics,
        slo_ttft_ms: s.slo.ttft_ms,
        slo_tpot_ms: s.slo.tpot_ms,
        sweep_label: "x: mean arrival rate (req/s) of the bursty trace".to_string(),
        sweep_current: Some(w.mean_rps),
        describe: format!(
            "{} requests · seed model{}",
            w.num_requests,
            if s.closed_loop { " · closed loop" } else { "" }
        ),
    })
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

/// The engine model's default agent-session scenario.
pub fn default_sessions_scenario() -> Option<Scenario> {
    default_engine_scenario()
}

/// Multipliers of the current load for the sweep.
const SWEEP: [f64; 10] = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0];

/// The fields that set a workload's load, in order of preference, and whether they are integers.
const LOAD_FIELDS: [(&str, bool); 5] = [
    ("mean_rps", false),
    ("rate_rps", false),
    ("sessions", true),
    ("users", true),
    ("concurrency", true),
];

/// The scenarios of the goodput-vs-load sweep: the current one with its load scaled.
pub fn sweep_plan(sc: &Scenario) -> Vec<Scenario> {
    let json = sc.to_value();
    let Some(workload) = json.get("workload") else {
        return Vec::new();
    };
    let Some((field, integer, current)) = LOAD_FIELDS
        .iter()
        .find_map(|(f, i)| workload.get(*f).and_then(Value::as_f64).map(|v| (*f, *i, v)))
    else {
        return Vec::new();
    };
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for m in SWEEP {
        let x = if integer {
            (current * m).round().max(1.0)
        } else {
            current * m
        };
        if seen.contains(&x.to_bits()) {
            continue;
        }
        seen.push(x.to_bits());
        let mut j = json.clone();
        if let Some(slot) = j.pointer_mut(&format!("/workload/{field}")) {
            *slot = if integer { Value::from(x as u64) } else { Value::from(x) };
        }
        // Sweep points skip the counterfactual runs: only goodput and throughput are drawn.
        if j.get("counterfactuals").is_some() {
            j["counterfactuals"] = Value::Bool(false);
        }
        if let Ok(s) = Scenario::from_value(j) {
            out.push(s);
        }
    }
    out
}

/// One sweep point: the scenario's load and its goodput and throughput.
pub fn sweep_point(sc: &Scenario) -> Option<SweepPoint> {
    let json = sc.to_value();
    let x = LOAD_FIELDS
        .iter()
        .find_map(|(f, _)| json.get("workload")?.get(*f)?.as_f64())?;
    match sc {
        Scenario::Seed(s) => {
            let r = seed_model::evaluate(s).ok()?;
            Some(SweepPoint {
                x,
                goodput_rps: r.slo_goodput_rps,
                throughput_rps: r.request_throughput_rps,
            })
        }
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

/// The seed's three profile comparisons, exactly as the seed reports them: (profile name, summary JSON).
pub fn seed_comparisons() -> Vec<(String, Result<Value, String>)> {
    seed_model::SEED_PROFILES
        .iter()
        .map(|p| {
            let result = match seed_scenario_with(p.clone()) {
                Some(Scenario::Seed(s)) => seed_model::evaluate(&s)
                    .map_err(|e| e.to_string())
                    .and_then(|r| serde_json::to_value(r).map_err(|e| e.to_string())),
                _ => Err("the seed scenario did not validate".to_string()),
            };
            (p.name.to_string(), result)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn seed_comparisons_equal_the_seed_report() {
        let report = seed_model::seed_report();
        for (name, result) in seed_comparisons() {
            let got = result.expect("seed profile evaluates");
            assert_eq!(got, report["scenario_comparisons"][&name], "{name}");
        }
    }

    #[test]
    fn default_scenario_computes() {
        let sc = Scenario::from_value(default_scenario()).expect("default is valid");
        let o = compute(&sc).expect("computes");
        assert_eq!(o.get("ttft_p50_ms"), Some(3915.16));
        assert!(o.diagnostics.iter().any(|d| d.id == "closed_loop_illusion"));
    }

    #[test]
    fn every_default_and_preset_is_valid() {
        for (kind, _) in WORKLOAD_KINDS {
            let mut j = default_engine_scenario().expect("engine default").to_value();
            j["workload"] = default_workload(kind).expect(kind);
            Scenario::from_value(j).unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
        let current = default_scenario();
        for p in presets() {
            assert!(p.apply(&current).is_some(), "preset {} does not apply", p.id);
            assert!(!p.basis.is_empty(), "{}", p.id);
        }
    }

    #[test]
    fn engine_default_computes_with_samples_and_callouts() {
        let sc = default_engine_scenario().unwrap();
        let o = compute(&sc).expect("computes");
        assert!(o.get("ttft_p50_ms").is_some() && o.get("goodput_rps").is_some());
        assert!(!o.ttft_cdf.is_empty() && !o.tpot_cdf.is_empty() && !o.timeline.is_empty());
        assert!(o.ttft_cdf.len() <= CDF_POINTS + 2);
        assert!(o.diagnostics.iter().any(|d| d.id == "overbatched"));
    }

    #[test]
    fn sweep_scales_the_load() {
        let sc = Scenario::from_value(default_scenario()).unwrap();
        let plan = sweep_plan(&sc);
        assert_eq!(plan.len(), SWEEP.len());
        let pts: Vec<SweepPoint> = plan.iter().filter_map(sweep_point).collect();
        assert_eq!(pts.len(), plan.len());
        assert!((pts[3].x - 8.5).abs() < 1e-12);
    }
}
