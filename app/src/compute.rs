//! The page's only door into the models: turns a `shared::scenario::Scenario` into what the page draws.
//!
//! Every number comes from `shared` (`seed_model::evaluate`, `engine::simulate`, `metrics::summarize`); this
//! module only reshapes results for display (flat metric lists, CDF samples, call-outs) and builds derived
//! scenarios (the rate sweep, the closed-loop counterfactual) that it hands back to `shared`.

use serde_json::Value;
use shared::scenario::Scenario;
use shared::seed_model::{self, SeedScenario};

/// The models the page offers: (`model` tag, label).
pub const MODELS: [(&str, &str); 1] = [("seed", "Seed model")];

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
    pub ttft_ms: Vec<f64>,
    pub tpot_ms: Vec<f64>,
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

/// Numeric and text fields of a flat serde summary, in order (arrays and nested objects skipped).
pub fn flatten(summary: &Value) -> (Vec<(String, f64)>, Vec<(String, String)>) {
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
    let json = serde_json::json!({
        "model": "seed",
        "workload": {"kind": "bursty", "num_requests": 80, "seed": 42, "mean_rps": 8.5},
        "profile": profile,
        "slo": {"ttft_ms": 500.0, "tpot_ms": 35.0},
        "closed_loop": false,
        "workload_name": "agent-shared-prefix",
    });
    Scenario::from_value(json).ok()
}

/// The scenario a fresh page opens with.
pub fn default_scenario() -> Value {
    seed_scenario_with(seed_model::SEED_PROFILES[0].clone()).map_or(Value::Null, |s| s.to_value())
}

/// The default scenario of a model (`seed`, `engine`).
pub fn default_for_model(model: &str) -> Option<Scenario> {
    match model {
        "seed" => seed_scenario_with(seed_model::SEED_PROFILES[0].clone()),
        _ => None,
    }
}

/// A named preset with where its numbers come from.
#[derive(Debug, Clone)]
pub struct Preset {
    pub id: String,
    pub label: String,
    pub basis: String,
    pub scenario: Scenario,
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
                scenario: sc,
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
            scenario: Scenario::Seed(s),
        });
    }
    out
}

fn set_seed_rate(s: &mut SeedScenario, rps: f64) {
    let seed_model::SeedWorkload::Bursty(w) = &mut s.workload;
    w.mean_rps = rps;
}

/// The work a scenario represents (requests or session steps), to decide whether to compute on every edit.
pub fn size_of(sc: &Scenario) -> f64 {
    match sc {
        Scenario::Seed(s) => {
            let seed_model::SeedWorkload::Bursty(w) = &s.workload;
            w.num_requests as f64
        }
    }
}

/// Compute everything the explorer shows.
pub fn compute(sc: &Scenario) -> Result<Outcome, String> {
    match sc {
        Scenario::Seed(s) => compute_seed(s),
    }
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
        ttft_ms: Vec::new(),
        tpot_ms: Vec::new(),
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

/// The engine model's default agent-session scenario, when the engine model is available.
pub fn default_sessions_scenario() -> Option<Scenario> {
    None
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
    fn sweep_scales_the_load() {
        let sc = Scenario::from_value(default_scenario()).unwrap();
        let plan = sweep_plan(&sc);
        assert_eq!(plan.len(), SWEEP.len());
        let pts: Vec<SweepPoint> = plan.iter().filter_map(sweep_point).collect();
        assert_eq!(pts.len(), plan.len());
        assert!((pts[3].x - 8.5).abs() < 1e-12);
    }
}
