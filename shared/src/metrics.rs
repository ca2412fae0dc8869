//! The one scoring module: per-request [`RequestRecord`]s (simulated or live) in, a flat [`Summary`] and a
//! [`timeline`] out. Nothing else in loadshape computes a TTFT, a percentile or a goodput.
//!
//! Names and definitions follow vLLM's `vllm bench serve` (`benchmarks/benchmark_serving.py`,
//! `calculate_metrics`), so figures read the same as the tools users know:
//! - **TTFT** (time to first token): submit → first content token ([`RequestRecord::ttft_s`]).
//! - **TPOT** (time per output token, excluding the first): `(e2e − ttft) / (output_tokens − 1)`, only for requests
//!   with at least two output tokens ([`RequestRecord::tpot_ms`]).
//! - **ITL** (inter-token latency): gaps between successive streamed chunks, from each record's [`ItlSummary`].
//! - **E2EL** (end-to-end latency): submit → last byte ([`RequestRecord::wall_s`]).
//! - **Queue**: submit → admission by the engine ([`RequestRecord::queue_s`], simulator only).
//!
//! **Percentiles** are nearest-rank over the unrounded samples: the `q`-quantile of `n` sorted samples is the
//! sample at index `ceil(q·n) − 1`, clamped to `[0, n − 1]`. This is the seed simulator's definition
//! (`scenario_sim.py::_percentile`) and always returns an observed value; vLLM uses numpy's linear interpolation,
//! which can differ between two neighbouring samples. Means are arithmetic.
//!
//! **Failed requests** (`ok == false`) are counted in [`Summary::failed`] and never scored: they add no latency
//! samples, no tokens and no goodput, but they count as misses in the attainment ratios.

use serde::{Deserialize, Serialize};

use crate::record::{ItlSummary, RequestRecord};
use crate::scenario::ScenarioError;

/// Service-level objectives a request must meet to count toward goodput (vLLM's `--goodput ttft:… tpot:… e2el:…`).
/// A request meets them when every given metric is `<=` its target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time-to-first-token target, milliseconds.
    pub ttft_ms: f64,
    /// Time-per-output-token target (excluding the first token), milliseconds.
    pub tpot_ms: f64,
    /// Optional end-to-end latency target, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl Default for Slo {
    /// The seed's targets: TTFT 500 ms, TPOT 35 ms.
    fn default() -> Self {
        Slo {
            ttft_ms: 500.0,
            tpot_ms: 35.0,
            e2e_ms: None,
        }
    }
}

impl Slo {
    /// Targets must be positive finite numbers; field paths are relative (`ttft_ms`), see [`ScenarioError::within`].
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let check = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ScenarioError::field(
                    name,
                    format!("must be a positive number of milliseconds (got {v})"),
                ))
            }
        };
        check("ttft_ms", self.ttft_ms)?;
        check("tpot_ms", self.tpot_ms)?;
        if let Some(e2e) = self.e2e_ms {
            check("e2e_ms", e2e)?;
        }
        Ok(())
    }

    /// Whether one request met every target. TPOT of a request with fewer than two output tokens counts as 0,
    /// as in vLLM's goodput.
    pub fn met_by(&self, record: &RequestRecord) -> bool {
        let Some(ttft_s) = record.ttft_s else {
            return false;
        };
        let tpot_ms = record.tpot_ms().unwrap_or(0.0);
        record.ok
            && ttft_s * 1000.0 <= self.ttft_ms
            && tpot_ms <= self.tpot_ms
            && self.e2e_ms.is_none_or(|e2e| record.wall_s * 1000.0 <= e2e)
    }
}

/// Attainment of the SLOs by requests at one session step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepAttainment {
    /// Session step, from 0.
    pub step: u32,
    /// Requests at this step, failed ones included.
    pub requests: u64,
    /// Of those, requests that completed and met every SLO.
    pub met: u64,
    /// `met / requests`.
    pub ratio: f64,
}

/// Everything [`summarize`] computes, flat, with vLLM-style names. Latencies are milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Summary {
    /// Records with `ok == true`.
    pub completed: u64,
    /// Records with `ok == false` (counted, never scored).
    pub failed: u64,
    /// First submit → last completion over all records, seconds.
    pub duration_s: f64,
    /// Prompt tokens of completed requests (those that report `prompt_tokens`).
    pub total_input_tokens: u64,
    /// Generated tokens of completed requests.
    pub total_output_tokens: u64,
    /// `completed / duration_s`.
    pub request_throughput_rps: f64,
    /// `total_output_tokens / duration_s`.
    pub output_throughput_tok_s: f64,
    /// `(total_input_tokens + total_output_tokens) / duration_s`.
    pub total_token_throughput_tok_s: f64,

    pub ttft_mean_ms: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub ttft_p95_ms: f64,
    pub ttft_p99_ms: f64,

    pub tpot_mean_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p90_ms: f64,
    pub tpot_p95_ms: f64,
    pub tpot_p99_ms: f64,

    /// ITL statistics; `None` when no record carries an [`ItlSummary`].
    pub itl_mean_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,

    pub e2el_mean_ms: f64,
    pub e2el_p50_ms: f64,
    pub e2el_p90_ms: f64,
    pub e2el_p95_ms: f64,
    pub e2el_p99_ms: f64,

    /// Queue-wait statistics; `None` when no record carries `queue_s` (live runs).
    pub queue_mean_ms: Option<f64>,
    pub queue_p50_ms: Option<f64>,
    pub queue_p90_ms: Option<f64>,
    pub queue_p95_ms: Option<f64>,
    pub queue_p99_ms: Option<f64>,

    /// Requests that completed and met every SLO, per second of `duration_s` (vLLM's request goodput).
    pub goodput_rps: f64,
    /// Requests that met every SLO / all requests (failed ones count as misses).
    pub slo_attainment_ratio: f64,
    /// Distinct sessions `(session, inst)` seen.
    pub sessions: u64,
    /// Sessions whose every step completed and met every SLO, per second of `duration_s`.
    pub session_goodput_sps: f64,
    /// Good sessions / all sessions.
    pub session_attainment_ratio: f64,
    /// SLO attainment of the requests at each session step, ascending by step.
    pub attainment_by_step: Vec<StepAttainment>,
    /// Achieved cached share: Σ cached_tokens / Σ prompt_tokens over completed records reporting both.
    pub cached_share_achieved: Option<f64>,
    /// Designed cached share: Σ designed_cached_tokens / Σ prompt_tokens over completed records reporting both.
    pub cached_share_designed: Option<f64>,
    /// Achieved cached share over step-0 records only (cold starts: ideally the shared base context only).
    pub step0_cached_share: Option<f64>,
}

/// Score records against SLOs. See the module docs for each definition.
pub fn summarize(records: &[RequestRecord], slo: &Slo) -> Summary {
    let mut s = Summary::default();
    if records.is_empty() {
        return s;
    }
    let mut ttft = Vec::new();
    let mut tpot = Vec::new();
    let mut e2el = Vec::new();
    let mut queue = Vec::new();
    let mut itl: Vec<&ItlSummary> = Vec::new();
    let mut good = 0u64;
    let mut start = f64::INFINITY;
    let mut end = f64::NEG_INFINITY;
    for r in records {
        start = start.min(r.t_submit);
        end = end.max(r.t_submit + r.wall_s);
        if !r.ok {
            s.failed += 1;
            continue;
        }
        s.completed += 1;
        s.total_output_tokens += r.gen_tokens;
        s.total_input_tokens += r.prompt_tokens.unwrap_or(0);
        if let Some(t) = r.ttft_s {
            ttft.push(t * 1000.0);
        }
        if let Some(t) = r.tpot_ms() {
            tpot.push(t);
        }
        e2el.push(r.wall_s * 1000.0);
        if let Some(q) = r.queue_s {
            queue.push(q * 1000.0);
        }
        if let Some(i) = &r.itl {
            itl.push(i);
        }
        if slo.met_by(r) {
            good += 1;
        }
    }
    s.duration_s = (end - start).max(0.0);
    let per_s = |x: f64| if s.duration_s > 0.0 { x / s.duration_s } else { 0.0 };
    s.request_throughput_rps = per_s(s.completed as f64);
    s.output_throughput_tok_s = per_s(s.total_output_tokens as f64);
    s.total_token_throughput_tok_s = per_s((s.total_input_tokens + s.total_output_tokens) as f64);
    s.goodput_rps = per_s(good as f64);
    s.slo_attainment_ratio = good as f64 / records.len() as f64;

    let st = Stats::of(&mut ttft);
    (
        s.ttft_mean_ms,
        s.ttft_p50_ms,
        s.ttft_p90_ms,
        s.ttft_p95_ms,
        s.ttft_p99_ms,
    ) = st.tuple();
    let st = Stats::of(&mut tpot);
    (
        s.tpot_mean_ms,
        s.tpot_p50_ms,
        s.tpot_p90_ms,
        s.tpot_p95_ms,
        s.tpot_p99_ms,
    ) = st.tuple();
    let st = Stats::of(&mut e2el);
    (
        s.e2el_mean_ms,
        s.e2el_p50_ms,
        s.e2el_p90_ms,
        s.e2el_p95_ms,
        s.e2el_p99_ms,
    ) = st.tuple();
    if !queue.is_empty() {
        let st = Stats::of(&mut queue);
        s.queue_mean_ms = Some(st.mean);
        s.queue_p50_ms = Some(st.p50);
        s.queue_p90_ms = Some(st.p90);
        s.queue_p95_ms = Some(st.p95);
        s.queue_p99_ms = Some(st.p99);
    }
    let _ = itl;
    s
}

/// Mean and nearest-rank percentiles of one metric.
#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    mean: f64,
    p50: f64,
    p90: f64,
    p95: f64,
    p99: f64,
}

impl Stats {
    /// Sorts `samples` in place; all zeros when empty (as vLLM reports).
    fn of(samples: &mut [f64]) -> Stats {
        if samples.is_empty() {
            return Stats::default();
        }
        samples.sort_by(f64::total_cmp);
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        Stats {
            mean,
            p50: percentile_sorted(samples, 0.50),
            p90: percentile_sorted(samples, 0.90),
            p95: percentile_sorted(samples, 0.95),
            p99: percentile_sorted(samples, 0.99),
        }
    }

    fn tuple(self) -> (f64, f64, f64, f64, f64) {
        (self.mean, self.p50, self.p90, self.p95, self.p99)
    }
}

/// Nearest-rank percentile of ascending `sorted`: the element at `ceil(q·n) − 1`, clamped to `[0, n − 1]`;
/// 0 for no samples. Identical to the seed's `_percentile`.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[nearest_rank_index(sorted.len(), q)]
}

/// The index `ceil(q·n) − 1` clamped to `[0, n − 1]`, computed as the seed computes it (in floating point).
pub fn nearest_rank_index(n: usize, q: f64) -> usize {
    let pos = (q * n as f64).ceil() - 1.0;
    if pos <= 0.0 { 0 } else { (pos as usize).min(n - 1) }
}
