//! The seed simulator's model (`scenario_sim.py`), reproduced exactly: for every input the seed accepts, every
//! summary field is equal to the seed's.
//!
//! - [`build_agent_trace`]: the bursty trace, bit-identical to Python's `random.Random(seed)` draws
//!   (see [`crate::pyrand`]); the trace itself is the workload's ([`crate::workload::bursty`]), shared with the
//!   engine simulator and live replay.
//! - [`evaluate`]: the admission limit (`max_batch_slots`), the single prefill lane, nearest-rank percentiles over
//!   samples rounded with Python's [`py_round`], SLO goodput and attainment, and the closed-loop path.
//! - [`seed_report`]: the seed's whole printed report.
//!
//! Its scoring (the percentiles of [`evaluate`]) is the one documented exception to [`crate::metrics`] being the
//! only scorer: it must repeat the seed's Python operations exactly (samples rounded with `round(·, 2)`, TPOT per
//! batch size), so it keeps its own.
//!
//! Principal types: [`SeedScenario`], [`BurstyWorkload`], [`SeedProfile`], [`SeedSummary`].

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::error::ScenarioError;
use crate::metrics::{Slo, nearest_rank_index};
use crate::pyrand::{PySeed, py_round};
pub use crate::workload::bursty::{BurstyWorkload, MAX_REQUESTS};
use crate::workload::request::PlannedRequest;

/// The seed's `EngineProfile`: assumed coefficients of a serving engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedProfile {
    /// Shown as the summary's `engine`.
    pub name: Cow<'static, str>,
    /// Prefill speed, tokens per millisecond; `> 0`.
    pub prefill_tokens_per_ms: f64,
    /// Fraction of the shared prefix served from cache (the seed accepts any number; 0–1 is meaningful).
    pub prefix_cache_hit_efficiency: f64,
    /// Decode time per token at batch size 0, milliseconds.
    pub base_tpot_ms: f64,
    /// Extra decode time per token per running request, milliseconds.
    pub batch_tpot_slope_ms: f64,
    /// Admission limit: requests decoding at once; `>= 1`.
    pub max_batch_slots: u64,
}

impl SeedProfile {
    /// Field paths are relative (`max_batch_slots`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.max_batch_slots < 1 {
            return Err(ScenarioError::field(
                "max_batch_slots",
                format!("must be >= 1 (got {})", self.max_batch_slots),
            ));
        }
        if !(self.prefill_tokens_per_ms.is_finite() && self.prefill_tokens_per_ms > 0.0) {
            return Err(ScenarioError::field(
                "prefill_tokens_per_ms",
                format!("must be > 0 (got {})", self.prefill_tokens_per_ms),
            ));
        }
        for (name, v) in [
            ("prefix_cache_hit_efficiency", self.prefix_cache_hit_efficiency),
            ("base_tpot_ms", self.base_tpot_ms),
            ("batch_tpot_slope_ms", self.batch_tpot_slope_ms),
        ] {
            if !v.is_finite() {
                return Err(ScenarioError::field(name, format!("must be a finite number (got {v})")));
            }
        }
        Ok(())
    }
}

/// The seed-model scenario, exactly the fields of the seed's `evaluate_engine_benchmark` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedScenario {
    pub workload: SeedWorkload,
    pub profile: SeedProfile,
    /// `ttft_slo_ms` / `tpot_slo_ms`; the seed model has no E2E target.
    #[serde(default)]
    pub slo: Slo,
    /// Closed loop: one request at a time, each starting at the previous completion.
    #[serde(default)]
    pub closed_loop: bool,
    /// Shown as the summary's `workload`.
    #[serde(default = "default_workload_name")]
    pub workload_name: String,
}

fn default_workload_name() -> String {
    "agent-shared-prefix".to_string()
}

/// The seed model's workloads: only the bursty trace (`{"kind": "bursty", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", from = "SeedWorkloadRepr")]
pub enum SeedWorkload {
    Bursty(BurstyWorkload),
}

/// The JSON form of [`SeedWorkload`], read as a plain struct so that errors carry the field path
/// (`workload.num_requests`), which serde loses inside internally tagged enums.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedWorkloadRepr {
    kind: SeedWorkloadKind,
    num_requests: u64,
    seed: PySeed,
    mean_rps: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum SeedWorkloadKind {
    Bursty,
}

impl From<SeedWorkloadRepr> for SeedWorkload {
    fn from(r: SeedWorkloadRepr) -> Self {
        match r.kind {
            SeedWorkloadKind::Bursty => SeedWorkload::Bursty(BurstyWorkload {
                num_requests: r.num_requests,
                seed: r.seed,
                mean_rps: r.mean_rps,
            }),
        }
    }
}

impl SeedScenario {
    /// Full field paths (`workload.mean_rps`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let SeedWorkload::Bursty(w) = &self.workload;
        w.validate().map_err(|e| e.within("workload"))?;
        self.profile.validate().map_err(|e| e.within("profile"))?;
        // The seed accepts any SLO numbers (a target of 0 simply fails every request); only NaN/inf are rejected.
        for (name, v) in [("slo.ttft_ms", self.slo.ttft_ms), ("slo.tpot_ms", self.slo.tpot_ms)] {
            if !v.is_finite() {
                return Err(ScenarioError::field(name, format!("must be a finite number (got {v})")));
            }
        }
        if let Some(e2e) = self.slo.e2e_ms {
            return Err(ScenarioError::field(
                "slo.e2e_ms",
                format!("is not part of the seed model (got {e2e}); use \"model\": \"engine\""),
            ));
        }
        Ok(())
    }
}

/// The seed's three engine profiles (`SCENARIO_PROFILES`), in the seed's order.
pub const SEED_PROFILES: [SeedProfile; 3] = [
    SeedProfile {
        name: Cow::Borrowed("baseline"),
        prefill_tokens_per_ms: 26.0,
        prefix_cache_hit_efficiency: 0.45,
        base_tpot_ms: 17.5,
        batch_tpot_slope_ms: 0.62,
        max_batch_slots: 16,
    },
    SeedProfile {
        name: Cow::Borrowed("prefix_reuse"),
        prefill_tokens_per_ms: 27.0,
        prefix_cache_hit_efficiency: 0.92,
        base_tpot_ms: 16.8,
        batch_tpot_slope_ms: 0.58,
        max_batch_slots: 16,
    },
    SeedProfile {
        name: Cow::Borrowed("faster_decode"),
        prefill_tokens_per_ms: 34.0,
        prefix_cache_hit_efficiency: 0.50,
        base_tpot_ms: 12.4,
        batch_tpot_slope_ms: 0.44,
        max_batch_slots: 16,
    },
];

/// The seed's over-batched diagnostic profile (48 slots, run at 15 rps).
pub const OVERBATCHED_PROFILE: SeedProfile = SeedProfile {
    name: Cow::Borrowed("overbatched_unbounded"),
    prefill_tokens_per_ms: 42.0,
    prefix_cache_hit_efficiency: 0.50,
    base_tpot_ms: 22.0,
    batch_tpot_slope_ms: 0.45,
    max_batch_slots: 48,
};

/// One seed profile by name (`baseline`, `prefix_reuse`, `faster_decode`).
pub fn seed_profile(name: &str) -> Option<SeedProfile> {
    SEED_PROFILES.iter().find(|p| p.name == name).cloned()
}

/// The seed's `build_agent_trace(num_requests, seed, mean_rps)`, bit-identical (request `i` is the seed's
/// `req-00i`). Does not validate `w`. The trace itself lives in [`crate::workload::bursty`].
pub fn build_agent_trace(w: &BurstyWorkload) -> Vec<PlannedRequest> {
    w.trace().collect()
}

/// The seed's `BenchmarkSummary`, field for field and in the seed's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedSummary {
    pub engine: String,
    pub workload: String,
    pub total_requests: u64,
    pub duration_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p99_ms: f64,
    pub raw_output_tokens_per_s: f64,
    pub request_throughput_rps: f64,
    pub slo_goodput_rps: f64,
    pub slo_attainment_ratio: f64,
}

/// Validate `scenario`, then run the seed's `evaluate_engine_benchmark` on its bursty trace.
pub fn evaluate(scenario: &SeedScenario) -> Result<SeedSummary, ScenarioError> {
    scenario.validate()?;
    let SeedWorkload::Bursty(w) = &scenario.workload;
    let summary = evaluate_items(
        w.trace(),
        &scenario.profile,
        &scenario.workload_name,
        scenario.slo.ttft_ms,
        scenario.slo.tpot_ms,
        scenario.closed_loop,
    )?;
    check_finite(&summary)?;
    Ok(summary)
}

/// The seed's `evaluate_engine_benchmark` over an explicit trace (e.g. from [`build_agent_trace`]).
pub fn evaluate_trace(
    trace: &[PlannedRequest],
    profile: &SeedProfile,
    workload_name: &str,
    slo: &Slo,
    closed_loop: bool,
) -> Result<SeedSummary, ScenarioError> {
    profile.validate().map_err(|e| e.within("profile"))?;
    let summary = evaluate_items(
        trace.iter().copied(),
        profile,
        workload_name,
        slo.ttft_ms,
        slo.tpot_ms,
        closed_loop,
    )?;
    check_finite(&summary)?;
    Ok(summary)
}

/// Python's `max(a, b)`: `b` only if `b > a`.
#[inline]
fn py_max(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// The seed's algorithm, request by request, with the same floating-point operations in the same order.
///
/// The seed keeps a list of completion times and, per request, sorts the ones after the arrival (`occupied`), admits
/// at `occupied[len - slots]` when full, and drops the ones at or before admission. That list never holds more than
/// `max_batch_slots` entries (after the drop at most `slots - 1` are left, then one is added), so "full" means
/// exactly `slots` entries and the admission time is the earliest of them. Here the list is kept sorted in a deque:
/// drops come off the front, and a new completion, usually among the latest, is placed by scanning from the back.
///
/// TPOT takes one value per batch size, so its samples are kept as counts per batch size; the percentiles over
/// those counts are the same samples the seed's sorted list holds at the nearest-rank index. TTFT samples are kept
/// unrounded and only the two selected ones are rounded: `round(·, 2)` is monotone, so that is the same value.
fn evaluate_items(
    trace: impl Iterator<Item = PlannedRequest>,
    profile: &SeedProfile,
    workload_name: &str,
    ttft_slo_ms: f64,
    tpot_slo_ms: f64,
    closed_loop: bool,
) -> Result<SeedSummary, ScenarioError> {
    let (n_hint, _) = trace.size_hint();
    let slots = usize::try_from(profile.max_batch_slots).unwrap_or(usize::MAX);
    // The batch size never exceeds the number of requests.
    let max_batch = slots.min(n_hint.max(1));
    let mut active = SortedTimes::with_capacity(max_batch + 1);
    let mut ttft_samples: Vec<f64> = Vec::with_capacity(n_hint);
    let mut batch_counts: Vec<u64> = vec![0; max_batch + 1];
    let mut prefill_free_at_ms = 0.0f64;
    let mut slo_passed: u64 = 0;
    let mut total_output_tokens: u64 = 0;
    let mut first_arrival_ms: Option<f64> = None;
    let mut last_completion_ms = 0.0f64;
    let mut total: u64 = 0;
    let uncached_fraction = 1.0 - profile.prefix_cache_hit_efficiency;
    let tpot_of = |active_batch: usize| profile.base_tpot_ms + profile.batch_tpot_slope_ms * active_batch as f64;

    for req in trace {
        total += 1;
        first_arrival_ms.get_or_insert(req.arrival_ms);
        let effective_arrival_ms = if closed_loop {
            last_completion_ms
        } else {
            req.arrival_ms
        };
        // occupied = completions after the arrival.
        active.drop_until(effective_arrival_ms);
        let mut admitted_at_ms = effective_arrival_ms;
        if active.len() >= slots
            && let Some(earliest) = active.front()
        {
            admitted_at_ms = earliest;
            active.drop_until(admitted_at_ms);
        }
        let active_batch = slots.min(active.len() + 1);
        let queue_wait_ms = py_max(admitted_at_ms, prefill_free_at_ms) - effective_arrival_ms;

        let uncached_shared = f64::from(req.shared_prefix_tokens) * uncached_fraction;
        let effective_prefill_tokens = uncached_shared + f64::from(req.unique_prompt_tokens);
        let prefill_ms = 3.0 + (effective_prefill_tokens / profile.prefill_tokens_per_ms);
        let ttft_ms = queue_wait_ms + prefill_ms;
        prefill_free_at_ms = effective_arrival_ms + ttft_ms;

        let tpot_ms = tpot_of(active_batch);
        let decode_ms = (f64::from(req.output_tokens) - 1.0) * tpot_ms;
        let completion_ms = effective_arrival_ms + ttft_ms + decode_ms;
        active.insert(completion_ms);
        last_completion_ms = py_max(last_completion_ms, completion_ms);

        // The seed stores round(ttft, 2); rounding is monotone, so the nearest-rank sample of the rounded list is
        // the rounded nearest-rank sample of this one (rounded below), one rounding per percentile, not per request.
        ttft_samples.push(ttft_ms);
        if let Some(count) = batch_counts.get_mut(active_batch) {
            *count += 1;
        }
        total_output_tokens += u64::from(req.output_tokens);
        if ttft_ms <= ttft_slo_ms && tpot_ms <= tpot_slo_ms {
            slo_passed += 1;
        }
    }
    let Some(first_arrival_ms) = first_arrival_ms else {
        return Err(ScenarioError::field(
            "workload.num_requests",
            "must be >= 1 (the trace is empty)",
        ));
    };

    let duration_s = py_max(
        0.001,
        (last_completion_ms - if closed_loop { 0.0 } else { first_arrival_ms }) / 1000.0,
    );
    let (ttft_p50, ttft_p99) = p50_p99(&mut ttft_samples);
    let (ttft_p50, ttft_p99) = (py_round(ttft_p50, 2), py_round(ttft_p99, 2));
    let mut tpot_counts: Vec<(f64, u64)> = batch_counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(b, c)| (py_round(tpot_of(b), 2), *c))
        .collect();
    crate::order::sort_by_f64_key(&mut tpot_counts, |c| c.0);
    let n = total as f64;
    let tpot_at = |q: f64| {
        let index = nearest_rank_index(usize::try_from(total).unwrap_or(usize::MAX), q) as u64;
        let mut seen = 0u64;
        for &(v, c) in &tpot_counts {
            seen += c;
            if seen > index {
                return v;
            }
        }
        0.0
    };
    let (tpot_p50, tpot_p99) = (tpot_at(0.50), tpot_at(0.99));
    Ok(SeedSummary {
        engine: profile.name.to_string(),
        workload: workload_name.to_string(),
        total_requests: total,
        duration_s: py_round(duration_s, 3),
        ttft_p50_ms: py_round(ttft_p50, 2),
        ttft_p99_ms: py_round(ttft_p99, 2),
        tpot_p50_ms: py_round(tpot_p50, 2),
        tpot_p99_ms: py_round(tpot_p99, 2),
        raw_output_tokens_per_s: py_round(total_output_tokens as f64 / duration_s, 2),
        request_throughput_rps: py_round(n / duration_s, 3),
        slo_goodput_rps: py_round(slo_passed as f64 / duration_s, 3),
        slo_attainment_ratio: py_round(slo_passed as f64 / n, 4),
    })
}

/// How many later times [`SortedTimes::insert`] moves one by one before it binary-searches the rest. A full batch
/// of 16 slots places most completions 0–5 from the back; the search and its `memmove` call cost more than the
/// moves they save up to about this many (docs/measurements.md, "seed model vs the Python seed").
const SCAN_FROM_BACK: usize = 16;

/// The seed's list of completion times, kept sorted: `buf[head..]`, ascending. Dropping from the front moves
/// `head`; the dropped front is cut off once it is as long as the live part, so the buffer stays small.
struct SortedTimes {
    buf: Vec<f64>,
    head: usize,
}

impl SortedTimes {
    fn with_capacity(n: usize) -> Self {
        SortedTimes {
            buf: Vec::with_capacity(2 * n + 64),
            head: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    #[inline]
    fn front(&self) -> Option<f64> {
        self.buf.get(self.head).copied()
    }

    /// Drop the times at or before `t` (the seed keeps the completions after it).
    #[inline]
    fn drop_until(&mut self, t: f64) {
        while self.buf.get(self.head).is_some_and(|&x| x <= t) {
            self.head += 1;
        }
    }

    /// Insert `t` after any equal values. New completions are usually among the latest, so the place is found by
    /// moving the later ones up one by one from the back, else (more than [`SCAN_FROM_BACK`]) by binary search.
    #[inline]
    fn insert(&mut self, t: f64) {
        if self.head >= 32 && 2 * self.head >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
        }
        let end = self.buf.len();
        self.buf.push(t);
        let mut j = end;
        while j > self.head && self.buf[j - 1] > t {
            if end - j == SCAN_FROM_BACK {
                let at = self.head + self.buf[self.head..j].partition_point(|&x| x <= t);
                self.buf.copy_within(at..j, at + 1);
                j = at;
                break;
            }
            self.buf[j] = self.buf[j - 1];
            j -= 1;
        }
        self.buf[j] = t;
    }
}

/// The seed's nearest-rank p50 and p99 of `samples` (reordered in place): selection instead of a full sort, which
/// picks the same values.
fn p50_p99(samples: &mut [f64]) -> (f64, f64) {
    let n = samples.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let i50 = nearest_rank_index(n, 0.50);
    let i99 = nearest_rank_index(n, 0.99);
    let (_, p50, upper) = samples.select_nth_unstable_by(i50, f64::total_cmp);
    let p50 = *p50;
    let p99 = if i99 == i50 {
        p50
    } else {
        // i99 > i50: the element at i99 is the (i99 - i50 - 1)-th of the part above i50.
        let (_, p99, _) = upper.select_nth_unstable_by(i99 - i50 - 1, f64::total_cmp);
        *p99
    };
    (p50, p99)
}

/// Finite inputs can still overflow (a 1e300 ms TPOT); say which result did rather than print `inf`.
fn check_finite(s: &SeedSummary) -> Result<(), ScenarioError> {
    for (name, v) in [
        ("duration_s", s.duration_s),
        ("ttft_p50_ms", s.ttft_p50_ms),
        ("ttft_p99_ms", s.ttft_p99_ms),
        ("tpot_p50_ms", s.tpot_p50_ms),
        ("tpot_p99_ms", s.tpot_p99_ms),
        ("raw_output_tokens_per_s", s.raw_output_tokens_per_s),
        ("request_throughput_rps", s.request_throughput_rps),
        ("slo_goodput_rps", s.slo_goodput_rps),
        ("slo_attainment_ratio", s.slo_attainment_ratio),
    ] {
        if !v.is_finite() {
            return Err(ScenarioError::field(
                "profile",
                format!("coefficients overflow: the result {name} is not finite (got {v}); use realistic magnitudes"),
            ));
        }
    }
    Ok(())
}

/// A JSON object whose keys keep the order they were given (the seed prints dicts in insertion order).
#[derive(Debug, Clone, PartialEq)]
struct Ordered<V>(Vec<(String, V)>);

impl<V: Serialize> Serialize for Ordered<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct SloTargets {
    ttft_slo_ms: f64,
    tpot_slo_ms: f64,
}

#[derive(Serialize)]
struct Diagnostics {
    overbatched_unbounded: SeedSummary,
    closed_loop_baseline: SeedSummary,
}

/// The seed's printed report, keys in the seed's order.
#[derive(Serialize)]
struct SeedReport {
    execution_mode: &'static str,
    experiment: &'static str,
    scenario_assumptions: Ordered<SeedProfile>,
    slo_targets: SloTargets,
    trace_requests: u64,
    scenario_comparisons: Ordered<SeedSummary>,
    diagnostics: Diagnostics,
}

fn build_seed_report() -> SeedReport {
    let slo = Slo::default();
    let trace = build_agent_trace(&BurstyWorkload {
        num_requests: 80,
        seed: PySeed::new(42),
        mean_rps: 8.5,
    });
    let run = |trace: &[PlannedRequest], profile: &SeedProfile, workload: &str, closed: bool| {
        // The seed's own inputs are valid and small: evaluation cannot fail.
        evaluate_trace(trace, profile, workload, &slo, closed).unwrap_or_else(|e| unreachable!("seed inputs: {e}"))
    };
    let summaries = SEED_PROFILES
        .iter()
        .map(|p| (p.name.to_string(), run(&trace, p, "agent-shared-prefix", false)))
        .collect();
    let overbatched_trace = build_agent_trace(&BurstyWorkload {
        num_requests: 80,
        seed: PySeed::new(42),
        mean_rps: 15.0,
    });
    SeedReport {
        // The seed's dict literal has `execution_mode` twice: the first position keeps the second value.
        execution_mode: "CPU simulation; arbitrary scenario coefficients, no serving engine executed",
        experiment: "synthetic-arrival-and-goodput-scenarios",
        scenario_assumptions: Ordered(SEED_PROFILES.iter().map(|p| (p.name.to_string(), p.clone())).collect()),
        slo_targets: SloTargets {
            ttft_slo_ms: slo.ttft_ms,
            tpot_slo_ms: slo.tpot_ms,
        },
        trace_requests: trace.len() as u64,
        scenario_comparisons: Ordered(summaries),
        diagnostics: Diagnostics {
            overbatched_unbounded: run(
                &overbatched_trace,
                &OVERBATCHED_PROFILE,
                "overbatched-tail-violation",
                false,
            ),
            closed_loop_baseline: run(&trace, &SEED_PROFILES[0], "closed-loop-illusion", true),
        },
    }
}

/// The seed's whole report (`python3 scenario_sim.py`), as a JSON value.
// `#[inline]` on this file's cold serde entry points (not for speed): their code, with the serde code they
// instantiate, is compiled in the calling crate, so the page builds it at its size-optimized opt-level while
// the engine stays at `shared`'s opt-level 3 (docs/page.md, "Budget": -39 KB gzip).
#[inline]
pub fn seed_report() -> serde_json::Value {
    serde_json::to_value(build_seed_report()).unwrap_or_default()
}

/// The seed's whole report as the seed prints it: two-space indented JSON, keys in the seed's order.
#[inline]
pub fn seed_report_json() -> String {
    serde_json::to_string_pretty(&build_seed_report()).unwrap_or_default()
}
