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
//!
//! **Duration** is first submit → last completion over all records (`max(t_submit + wall_s) − min(t_submit)`),
//! the span vLLM's `benchmark_duration` measures; every rate is per second of it.
//!
//! **Sessions** are `(session, inst)` pairs: an agent session, or one request of open-loop traffic. A session is
//! *good* when every one of its records completed and met every SLO.
//!
//! [`timeline`] bins the same records into time series (running and queued requests, submissions, completions,
//! output tokens) for charts.
//!
//! Records carry measurements and every conclusion drawn from them is computed here, for simulated and live
//! records alike: a record's own [`ItlSummary`] ([`itl_summary`] from a live request's frame gaps,
//! [`itl_from_stretches`] from the engine's stretches of identical decode steps), the hyper path's [`send_delay`],
//! the CDF points the page draws ([`cdf_points`], [`ttft_cdf`], [`tpot_cdf`], [`completion_curve`]), and the report's [`Checks`], with cut vs
//! failed read from the record's typed failure ([`outcome_of`]). The seed model's bit-exact Python scoring
//! (`seed_model::evaluate`) is the one documented exception.

pub mod hist;
pub mod replicas;

use rustc_hash::FxHashMap;

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;
use crate::record::{FailureKind, FrameClock, ItlSummary, RequestRecord, UsageSource};

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

    /// TTFT (submit → first token, vLLM `ttft`) over completed requests that saw a token: mean and nearest-rank
    /// p50/p90/p95/p99, ms; 0 without samples.
    pub ttft_mean_ms: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub ttft_p95_ms: f64,
    pub ttft_p99_ms: f64,

    /// TPOT = (E2E − TTFT) / (output tokens − 1) per completed request with ≥ 2 output tokens (vLLM `tpot`,
    /// excluding the first token): mean and nearest-rank percentiles across requests, ms; 0 without samples.
    pub tpot_mean_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p90_ms: f64,
    pub tpot_p95_ms: f64,
    pub tpot_p99_ms: f64,

    /// ITL (gap between successive streamed chunks, vLLM `itl`). Records carry a per-request summary, not every
    /// gap, so: mean = Σ(mean_i · gaps_i) / Σ gaps_i (exactly the mean over all gaps), and the percentiles are the
    /// gap-weighted nearest-rank percentiles of the per-request means (vLLM pools individual gaps; the two agree
    /// when decoding is steady within a request). `gaps_i = sse_frames − 1`. `None` when no record has ITL.
    pub itl_mean_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,

    /// E2E latency (submit → last byte, vLLM `e2el`) over completed requests: mean and percentiles, ms.
    pub e2el_mean_ms: f64,
    pub e2el_p50_ms: f64,
    pub e2el_p90_ms: f64,
    pub e2el_p95_ms: f64,
    pub e2el_p99_ms: f64,

    /// Queue wait (submit → admission by the engine) over completed requests that carry `queue_s`: mean and
    /// percentiles, ms. `None` when none does (live runs cannot see it).
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
    /// Live runs: nearest-rank median of the prompt tokens the workload designed (`designed_prompt_tokens`) over
    /// completed records that carry it and the server's count (`prompt_tokens`). Absent otherwise (simulated
    /// records carry no designed size: there the two agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub designed_prompt_tokens_p50: Option<f64>,
    /// The same records' median server-counted prompt tokens (`prompt_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realized_prompt_tokens_p50: Option<f64>,
    /// The same records' median of `prompt_tokens / designed_prompt_tokens` per request (1 = the server saw the
    /// designed sizes; tokenizer matching aims within 1 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realized_to_designed_prompt_ratio_p50: Option<f64>,
    /// Retention across tool calls: the achieved cached share of session steps after the first, by the think time
    /// before them (see [`Retention`]); only bands that hold a step. Absent when no record follows its session's
    /// previous step (open-loop traffic, single-step sessions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retention: Vec<Retention>,
    /// Replies with hidden reasoning (records carrying `ttft_content_s`): TTFT to the first content token, ms —
    /// `ttft_*` is to the first token of any kind. Absent without such records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_content_mean_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_content_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_content_p90_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_content_p99_ms: Option<f64>,
    /// Σ `reasoning_tokens` / Σ `gen_tokens` over completed records: the share of the output that was hidden
    /// reasoning. Absent when no completed record carries `reasoning_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_share: Option<f64>,
    /// Speculative decoding: Σ accepted / Σ drafted tokens over completed records that carry the counts
    /// (`RequestRecord::spec`), vLLM's acceptance rate. Absent when none does (speculation off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_acceptance: Option<f64>,
    /// Speculative decoding: accepted draft tokens per verification step, Σ accepted / Σ steps over completed
    /// records that carry their steps (a step emits `1 +` this many tokens on average). Absent when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_per_step: Option<f64>,
}

/// Running sums of speculative decoding's counts (see [`Summary::spec_acceptance`]); [`hist::Counters`] keeps them
/// too, so merged runs give the same figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SpecSums {
    pub any: bool,
    pub drafted: u64,
    pub accepted: u64,
    /// Records with steps: their accepted tokens and steps.
    pub stepped: bool,
    pub accepted_stepped: u64,
    pub steps: u64,
}

impl SpecSums {
    pub(crate) fn add(&mut self, c: &crate::record::SpecCounts) {
        self.any = true;
        self.drafted += c.draft_tokens;
        self.accepted += c.accepted_tokens;
        if let Some(st) = c.steps {
            self.stepped = true;
            self.accepted_stepped += c.accepted_tokens;
            self.steps += st;
        }
    }

    pub(crate) fn write(&self, s: &mut Summary) {
        if self.any {
            s.spec_acceptance = Some(if self.drafted > 0 {
                self.accepted as f64 / self.drafted as f64
            } else {
                0.0
            });
        }
        if self.stepped {
            s.spec_accepted_per_step = Some(if self.steps > 0 {
                self.accepted_stepped as f64 / self.steps as f64
            } else {
                0.0
            });
        }
    }
}

/// One band of think time in [`Summary::retention`]: session steps whose think time (their submission less the
/// end of the same session's previous step, `t_submit + wall_s`; 0 if negative) falls in
/// `[think_s_min, think_s_max)`, and Σ cached / Σ prompt tokens over those that completed reporting both. The bands'
/// edges are [`RETENTION_EDGES_S`]; the last band is open and its `think_s_max` is the longest think time in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retention {
    pub think_s_min: f64,
    pub think_s_max: f64,
    /// Steps in the band (every step counted, failed ones too).
    pub steps: u64,
    /// `None` when no step in the band completed reporting prompt and cached tokens.
    pub cached_share: Option<f64>,
}

/// [`Summary::retention`] on one line for the text reports: `0-1 s 69.9 % (10), 1-2 s 44.0 % (26), 3600+ s -
/// (1)`, each band's cached share and its steps.
pub fn retention_text(bands: &[Retention]) -> String {
    bands
        .iter()
        .map(|b| {
            let share = b
                .cached_share
                .map_or_else(|| "-".to_string(), |v| format!("{:.1} %", v * 100.0));
            let last = b.think_s_min >= RETENTION_EDGES_S[RETENTION_EDGES_S.len() - 1];
            if last {
                format!("{}+ s {share} ({})", b.think_s_min, b.steps)
            } else {
                format!("{}-{} s {share} ({})", b.think_s_min, b.think_s_max, b.steps)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Lower edges of the think-time bands of [`Summary::retention`], seconds.
pub const RETENTION_EDGES_S: [f64; 12] = [
    0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Per think-time band: steps, cached and prompt tokens, the longest think time.
#[derive(Debug, Clone, Copy, Default)]
struct Band {
    steps: u64,
    share: CachedShare,
    max_s: f64,
}

/// The last step seen of a session `(session, inst)`: all steps good so far, its step, its end (seconds).
#[derive(Debug, Clone, Copy)]
struct SessionSeen {
    good: bool,
    step: u32,
    end_s: f64,
}

/// Steps up to which [`summarize`] counts attainment by step in a vector rather than a map.
const DENSE_STEPS: usize = 4096;

/// Score records against SLOs. See the module docs and each [`Summary`] field for the definitions.
pub fn summarize(records: &[RequestRecord], slo: &Slo) -> Summary {
    let mut sum = Summarizer::new(*slo, records.len());
    for r in records {
        sum.push(r);
    }
    sum.finish()
}

/// [`summarize`], one record at a time: records pushed in the same order give the same [`Summary`], to the bit
/// (means are summed in push order). Memory grows with the records pushed (a few numbers each, not the records),
/// so a simulation nobody reads the records of scores them as they complete and drops them.
#[derive(Debug, Clone)]
pub struct Summarizer {
    slo: Slo,
    s: Summary,
    records: u64,
    ttft: Vec<f64>,
    tpot: Vec<f64>,
    e2el: Vec<f64>,
    queue: Vec<f64>,
    /// Per-request mean ITL and its weight (the number of gaps).
    itl: Vec<(f64, u64)>,
    good: u64,
    start: f64,
    end: f64,
    sessions: FxHashMap<(u64, u32), SessionSeen>,
    bands: [Band; RETENTION_EDGES_S.len()],
    by_step: FxHashMap<u32, (u64, u64)>,
    by_step_dense: Vec<(u64, u64)>,
    achieved: CachedShare,
    designed: CachedShare,
    step0: CachedShare,
    /// (designed, realized) prompt tokens of completed records carrying both.
    prompt_sizes: Vec<(u64, u64)>,
    spec: SpecSums,
    /// TTFT to the first content token of completed records carrying it, ms.
    ttft_content: Vec<f64>,
    /// Σ reasoning tokens of completed records, and whether any carried the field.
    reasoning_tokens: Option<u64>,
}

impl Summarizer {
    /// A summarizer against `slo`, with room for `expected` records (a hint).
    pub fn new(slo: Slo, expected: usize) -> Summarizer {
        Summarizer {
            slo,
            s: Summary::default(),
            records: 0,
            ttft: Vec::with_capacity(expected),
            tpot: Vec::with_capacity(expected),
            e2el: Vec::with_capacity(expected),
            queue: Vec::with_capacity(expected),
            itl: Vec::with_capacity(expected),
            good: 0,
            start: f64::INFINITY,
            end: f64::NEG_INFINITY,
            sessions: FxHashMap::default(),
            bands: [Band::default(); RETENTION_EDGES_S.len()],
            by_step: FxHashMap::default(),
            by_step_dense: Vec::new(),
            achieved: CachedShare::default(),
            designed: CachedShare::default(),
            step0: CachedShare::default(),
            prompt_sizes: Vec::new(),
            spec: SpecSums::default(),
            ttft_content: Vec::new(),
            reasoning_tokens: None,
        }
    }

    /// Score one more record.
    pub fn push(&mut self, r: &RequestRecord) {
        let s = &mut self.s;
        self.records += 1;
        // Comparisons, not `f64::min`/`max` (libm calls in wasm); NaN is skipped either way.
        if r.t_submit < self.start {
            self.start = r.t_submit;
        }
        if r.t_submit + r.wall_s > self.end {
            self.end = r.t_submit + r.wall_s;
        }
        let met = r.ok && self.slo.met_by(r);
        let end_s = r.t_submit + r.wall_s;
        let seen = self.sessions.entry((r.session, r.inst)).or_insert(SessionSeen {
            good: true,
            step: r.step,
            end_s,
        });
        seen.good &= met;
        // A step right after the session's previous one: its think time is the gap between them.
        let mut band = None;
        if r.step > 0 && seen.step == r.step - 1 {
            let think = r.t_submit - seen.end_s;
            let think = if think > 0.0 { think } else { 0.0 };
            let i = RETENTION_EDGES_S.iter().rposition(|&e| think >= e).unwrap_or(0);
            let b = &mut self.bands[i];
            b.steps += 1;
            if think > b.max_s {
                b.max_s = think;
            }
            band = Some(i);
        }
        if r.step >= seen.step {
            seen.step = r.step;
            seen.end_s = end_s;
        }
        // Steps are small numbers: counted in a vector, in a map past `DENSE_STEPS` (a live record can say anything).
        let step = match self.by_step_dense.get_mut(r.step as usize) {
            Some(e) => e,
            None if (r.step as usize) < DENSE_STEPS => {
                self.by_step_dense.resize(r.step as usize + 1, (0, 0));
                &mut self.by_step_dense[r.step as usize]
            }
            None => self.by_step.entry(r.step).or_insert((0, 0)),
        };
        step.0 += 1;
        step.1 += u64::from(met);
        if !r.ok {
            s.failed += 1;
            return;
        }
        s.completed += 1;
        self.good += u64::from(met);
        s.total_output_tokens += r.gen_tokens;
        s.total_input_tokens += r.prompt_tokens.unwrap_or(0);
        if let Some(t) = r.ttft_s {
            self.ttft.push(t * 1000.0);
        }
        if let Some(t) = r.ttft_content_s {
            self.ttft_content.push(t * 1000.0);
        }
        if let Some(n) = r.reasoning_tokens {
            *self.reasoning_tokens.get_or_insert(0) += n;
        }
        if let Some(t) = r.tpot_ms() {
            self.tpot.push(t);
        }
        self.e2el.push(r.wall_s * 1000.0);
        if let Some(q) = r.queue_s {
            self.queue.push(q * 1000.0);
        }
        if let Some(i) = &r.itl {
            self.itl.push((i.mean_ms, r.sse_frames.saturating_sub(1).max(1)));
        }
        if let Some(c) = &r.spec {
            self.spec.add(c);
        }
        if let Some(prompt) = r.prompt_tokens {
            if let Some(cached) = r.cached_tokens {
                self.achieved.add(cached, prompt);
                // A sub-agent's first step forks its parent's cached prefix: no cold start.
                if r.step == 0 && r.parent.is_none() {
                    self.step0.add(cached, prompt);
                }
                if let Some(i) = band {
                    self.bands[i].share.add(cached, prompt);
                }
            }
            if let Some(d) = r.designed_cached_tokens {
                self.designed.add(d, prompt);
            }
            if let Some(d) = r.designed_prompt_tokens {
                self.prompt_sizes.push((d, prompt));
            }
        }
    }

    /// The summary of every record pushed.
    pub fn finish(self) -> Summary {
        let Summarizer {
            mut s,
            records,
            mut ttft,
            mut tpot,
            mut e2el,
            mut queue,
            mut itl,
            good,
            start,
            end,
            sessions,
            bands,
            by_step,
            by_step_dense,
            achieved,
            designed,
            step0,
            prompt_sizes,
            spec,
            mut ttft_content,
            reasoning_tokens,
            ..
        } = self;
        if records == 0 {
            return s;
        }
        spec.write(&mut s);
        s.duration_s = (end - start).max(0.0);
        let per_s = |x: f64| if s.duration_s > 0.0 { x / s.duration_s } else { 0.0 };
        s.request_throughput_rps = per_s(s.completed as f64);
        s.output_throughput_tok_s = per_s(s.total_output_tokens as f64);
        s.total_token_throughput_tok_s = per_s((s.total_input_tokens + s.total_output_tokens) as f64);
        s.goodput_rps = per_s(good as f64);
        s.slo_attainment_ratio = good as f64 / records as f64;

        s.sessions = sessions.len() as u64;
        let good_sessions = sessions.values().filter(|g| g.good).count() as f64;
        s.session_goodput_sps = per_s(good_sessions);
        s.session_attainment_ratio = good_sessions / sessions.len() as f64;
        let mut by_step: Vec<(u32, (u64, u64))> = by_step.into_iter().collect();
        by_step.extend(
            by_step_dense
                .into_iter()
                .enumerate()
                .filter(|e| e.1.0 > 0)
                .map(|(step, e)| (step as u32, e)),
        );
        crate::order::sort_by_u64_key(&mut by_step, |e| u64::from(e.0));
        s.attainment_by_step = by_step
            .into_iter()
            .map(|(step, (requests, met))| StepAttainment {
                step,
                requests,
                met,
                ratio: met as f64 / requests as f64,
            })
            .collect();
        s.cached_share_achieved = achieved.share();
        s.cached_share_designed = designed.share();
        s.step0_cached_share = step0.share();
        s.retention = bands
            .iter()
            .enumerate()
            .filter(|(_, b)| b.steps > 0)
            .map(|(i, b)| Retention {
                think_s_min: RETENTION_EDGES_S[i],
                think_s_max: RETENTION_EDGES_S.get(i + 1).copied().unwrap_or(b.max_s),
                steps: b.steps,
                cached_share: b.share.share(),
            })
            .collect();
        if !prompt_sizes.is_empty() {
            let mut designed: Vec<f64> = prompt_sizes.iter().map(|p| p.0 as f64).collect();
            let mut realized: Vec<f64> = prompt_sizes.iter().map(|p| p.1 as f64).collect();
            let mut ratio: Vec<f64> = prompt_sizes
                .iter()
                .filter(|p| p.0 > 0)
                .map(|p| p.1 as f64 / p.0 as f64)
                .collect();
            s.designed_prompt_tokens_p50 = Some(Stats::of(&mut designed).p50);
            s.realized_prompt_tokens_p50 = Some(Stats::of(&mut realized).p50);
            s.realized_to_designed_prompt_ratio_p50 = (!ratio.is_empty()).then(|| Stats::of(&mut ratio).p50);
        }

        if !ttft_content.is_empty() {
            let st = Stats::of(&mut ttft_content);
            s.ttft_content_mean_ms = Some(st.mean);
            s.ttft_content_p50_ms = Some(st.p50);
            s.ttft_content_p90_ms = Some(st.p90);
            s.ttft_content_p99_ms = Some(st.p99);
        }
        s.reasoning_share = reasoning_tokens.map(|n| {
            if s.total_output_tokens > 0 {
                n as f64 / s.total_output_tokens as f64
            } else {
                0.0
            }
        });
        (
            s.ttft_mean_ms,
            s.ttft_p50_ms,
            s.ttft_p90_ms,
            s.ttft_p95_ms,
            s.ttft_p99_ms,
        ) = Stats::of(&mut ttft).tuple();
        (
            s.tpot_mean_ms,
            s.tpot_p50_ms,
            s.tpot_p90_ms,
            s.tpot_p95_ms,
            s.tpot_p99_ms,
        ) = Stats::of(&mut tpot).tuple();
        (
            s.e2el_mean_ms,
            s.e2el_p50_ms,
            s.e2el_p90_ms,
            s.e2el_p95_ms,
            s.e2el_p99_ms,
        ) = Stats::of(&mut e2el).tuple();
        if !queue.is_empty() {
            let st = Stats::of(&mut queue);
            (
                s.queue_mean_ms,
                s.queue_p50_ms,
                s.queue_p90_ms,
                s.queue_p95_ms,
                s.queue_p99_ms,
            ) = (Some(st.mean), Some(st.p50), Some(st.p90), Some(st.p95), Some(st.p99));
        }
        if !itl.is_empty() {
            let st = Stats::weighted(&mut itl);
            (s.itl_mean_ms, s.itl_p50_ms, s.itl_p90_ms, s.itl_p95_ms, s.itl_p99_ms) =
                (Some(st.mean), Some(st.p50), Some(st.p90), Some(st.p95), Some(st.p99));
        }
        s
    }
}

/// Running sums for a cached share: Σ cached / Σ prompt.
#[derive(Debug, Default, Clone, Copy)]
struct CachedShare {
    cached: u64,
    prompt: u64,
}

impl CachedShare {
    fn add(&mut self, cached: u64, prompt: u64) {
        self.cached += cached;
        self.prompt += prompt;
    }

    fn share(self) -> Option<f64> {
        (self.prompt > 0).then(|| self.cached as f64 / self.prompt as f64)
    }
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
    /// Mean (summed in the given order) and nearest-rank percentiles by selection: O(n), not a sort. Reorders
    /// `samples`; all zeros when empty (as vLLM reports).
    fn of(samples: &mut [f64]) -> Stats {
        if samples.is_empty() {
            return Stats::default();
        }
        let n = samples.len();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let [p50, p90, p95, p99] = select_ranks(samples, QUANTILES.map(|q| nearest_rank_index(n, q)));
        Stats {
            mean,
            p50,
            p90,
            p95,
            p99,
        }
    }

    /// Weighted mean and weighted nearest-rank percentiles of `(value, weight)` pairs (weights ≥ 1): the
    /// `q`-quantile is the smallest value whose cumulative weight (in ascending order of value) reaches
    /// `q · Σ weight` — with unit weights the same sample as [`percentile_sorted`]. Found by selection, not a sort:
    /// with integer weights (exact in `f64` below 2^53) "cumulative weight reaches the target" is "the weight unit
    /// numbered ⌈target⌉ lies in this sample", a weighted rank. Reorders `samples`.
    fn weighted(samples: &mut [(f64, u64)]) -> Stats {
        if samples.is_empty() {
            return Stats::default();
        }
        let total: u64 = samples.iter().map(|&(_, w)| w).sum();
        let total_f = total as f64;
        let mean = samples.iter().map(|&(v, w)| v * w as f64).sum::<f64>() / total_f;
        let rank = |q: f64| ((q * total_f).ceil().max(1.0) as u64).min(total) - 1;
        let Some(picks) = weighted_ranks_by(samples, QUANTILES.map(rank), |s| s.0, |s| s.1) else {
            return Stats::default();
        };
        let [p50, p90, p95, p99] = picks.map(|(s, _)| s.0);
        Stats {
            mean,
            p50,
            p90,
            p95,
            p99,
        }
    }

    fn tuple(self) -> (f64, f64, f64, f64, f64) {
        (self.mean, self.p50, self.p90, self.p95, self.p99)
    }
}

/// The quantiles every [`Summary`] metric reports.
const QUANTILES: [f64; 4] = [0.50, 0.90, 0.95, 0.99];

/// The values at ascending 0-based ranks `ranks` (each `< samples.len()`), as if `samples` were sorted: successive
/// `select_nth_unstable` calls, each on what lies above the previous rank. Reorders `samples`.
fn select_ranks<const K: usize>(samples: &mut [f64], ranks: [usize; K]) -> [f64; K] {
    let mut out = [0.0; K];
    let mut base = 0;
    let mut rest = samples;
    let mut last: Option<(usize, f64)> = None;
    for (slot, &rank) in out.iter_mut().zip(&ranks) {
        if let Some((r, v)) = last
            && rank <= r
        {
            debug_assert_eq!(rank, r, "ranks must ascend");
            *slot = v;
            continue;
        }
        let (_, v, above) = rest.select_nth_unstable_by(rank - base, f64::total_cmp);
        *slot = *v;
        last = Some((rank, *v));
        base = rank + 1;
        rest = above;
    }
    out
}

/// For 0-based weighted ranks `ranks` (ascending; each below Σ weight) among `samples` ordered by `key`, as if each
/// sample were `weight` consecutive units: the sample holding each rank and the rank's offset inside it. One
/// partition per level, each side entered only for the ranks it holds (expected O(n) for all of them). `None` for
/// no samples; a rank past the total weight gets the largest sample's last unit. Ties in `key` are taken in any
/// order. Reorders `samples`. Also the engine's fallback for a request's ITL over very many stretches.
pub(crate) fn weighted_ranks_by<T: Copy, const K: usize>(
    samples: &mut [T],
    ranks: [u64; K],
    key: impl Fn(&T) -> f64,
    weight: impl Fn(&T) -> u64,
) -> Option<[(T, u64); K]> {
    let mut out = [(*samples.first()?, 0); K];
    let cmp = |a: &T, b: &T| key(a).total_cmp(&key(b));
    // A part still to search: its samples, the index of its first weight unit, and the ranks [lo, hi) it holds.
    type Part<'a, T> = (&'a mut [T], u64, usize, usize);
    let mut todo: Vec<Part<T>> = vec![(samples, 0, 0, K)];
    while let Some((v, base, lo, hi)) = todo.pop() {
        if v.len() <= 32 {
            v.sort_unstable_by(cmp);
            let mut acc = base;
            let mut i = lo;
            for &x in v.iter() {
                let w = weight(&x);
                while i < hi && ranks[i] < acc + w {
                    out[i] = (x, ranks[i] - acc);
                    i += 1;
                }
                acc += w;
            }
            if let Some(&last) = v.last() {
                for o in &mut out[i..hi] {
                    *o = (last, weight(&last).saturating_sub(1));
                }
            }
            continue;
        }
        let mid = v.len() / 2;
        let (left, pivot, right) = v.select_nth_unstable_by(mid, cmp);
        let wl: u64 = left.iter().map(&weight).sum();
        let (p_lo, p_hi) = (base + wl, base + wl + weight(pivot));
        let split_l = lo + ranks[lo..hi].iter().take_while(|&&r| r < p_lo).count();
        let split_r = split_l + ranks[split_l..hi].iter().take_while(|&&r| r < p_hi).count();
        for (o, &r) in out[split_l..split_r].iter_mut().zip(&ranks[split_l..split_r]) {
            *o = (*pivot, r - p_lo);
        }
        if split_l > lo {
            todo.push((left, base, lo, split_l));
        }
        if hi > split_r {
            todo.push((right, p_hi, split_r, hi));
        }
    }
    Some(out)
}

/// One request's [`ItlSummary`] from its measured inter-frame gaps (milliseconds, in arrival order; live records):
/// the mean over all gaps (summed as `f64`), the nearest-rank p50 and p99 and the max; `None` with no gap. Two
/// linear-time selections instead of a sort (this runs once per request over every gap). Reorders `gaps_ms`.
pub fn itl_summary(gaps_ms: &mut [f32]) -> Option<ItlSummary> {
    if gaps_ms.is_empty() {
        return None;
    }
    let n = gaps_ms.len();
    let (i50, i99) = (nearest_rank_index(n, 0.5), nearest_rank_index(n, 0.99));
    let mean = gaps_ms.iter().map(|&g| g as f64).sum::<f64>() / n as f64;
    let max = gaps_ms.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (below, &mut p99, _) = gaps_ms.select_nth_unstable_by(i99, f32::total_cmp);
    // Everything left of the p99 rank is <= it, so the p50 rank is selected there.
    let p50 = if i50 < i99 {
        *below.select_nth_unstable_by(i50, f32::total_cmp).1
    } else {
        p99
    };
    Some(ItlSummary {
        mean_ms: mean,
        p50_ms: p50 as f64,
        p99_ms: p99 as f64,
        max_ms: max as f64,
    })
}

/// One simulated request's [`ItlSummary`] from the engine's stretches `(lo, hi, k)`: `k` successive gaps growing
/// evenly from `lo` to `hi` ms (a stretch of identical decode steps). `mean_ms` is given (the engine knows it
/// exactly: (finish − first token) / (tokens − 1)); p50 and p99 are the nearest-rank gaps among all `Σ k` gaps,
/// ordering stretches by `lo` and interpolating inside one; max is the largest `hi`. `None` for no gap. `keys` is
/// scratch space kept between calls.
pub fn itl_from_stretches(mean_ms: f64, stretches: &[(f64, f64, u64)], keys: &mut Vec<u64>) -> Option<ItlSummary> {
    let (mut count, mut max_ms) = (0u64, f64::MIN);
    for e in stretches {
        count += e.2;
        // A comparison, not `f64::max` (a libm call in wasm).
        if e.1 > max_ms {
            max_ms = e.1;
        }
    }
    if count == 0 {
        return None;
    }
    let rank = |q: f64| nearest_rank_index(count as usize, q) as u64;
    let ranks = [rank(0.5), rank(0.99)];
    let (p50_ms, p99_ms) = if stretches.len() <= PACKED_ITL_MAX {
        packed_quantiles(stretches, keys, count, ranks)
    } else {
        let mut v = stretches.to_vec();
        weighted_select(&mut v, ranks)
    };
    Some(ItlSummary {
        mean_ms,
        p50_ms,
        p99_ms,
        max_ms,
    })
}

/// Stretches per request up to which [`itl_from_stretches`] sorts packed keys (the position takes at most 16 of
/// the 52 mantissa bits); longer lives use the exact weighted selection.
const PACKED_ITL_MAX: usize = 1 << 16;

/// Values at ascending ranks `ranks` among stretches `(lo, hi, k)` (ordered by `lo`, interpolated inside one), by
/// one sort of u64 keys and one scan. A key is `lo`'s bits (lo ≥ 0, so they order like it) with the lowest
/// `pos_bits` replaced by the stretch's position: stretches whose first durations differ by less than
/// 2^(pos_bits − 52) relative (≤ 1.5e-11) are taken in log order. Integer keys keep the order identical natively
/// and in wasm, and sort several times faster than tuples (a request that ran beside 60 others has hundreds of
/// stretches). `v.len()` must be at most [`PACKED_ITL_MAX`]; `count` is Σ k. The lower rank is found scanning up
/// from the smallest key, the upper one scanning down from the largest (a p99 is a few stretches from the top).
fn packed_quantiles(v: &[(f64, f64, u64)], keys: &mut Vec<u64>, count: u64, ranks: [u64; 2]) -> (f64, f64) {
    let pos_bits = usize::BITS - v.len().saturating_sub(1).leading_zeros();
    let pos_mask = (1u64 << pos_bits) - 1;
    keys.clear();
    keys.extend(
        v.iter()
            .enumerate()
            .map(|(i, e)| (e.0.to_bits() & !pos_mask) | i as u64),
    );
    keys.sort_unstable();
    let at = |k: u64| v[(k & pos_mask) as usize];
    let mut out = (f64::NAN, f64::NAN);
    let mut acc = 0;
    for &k in keys.iter() {
        let e = at(k);
        if ranks[0] < acc + e.2 {
            out.0 = value_in(e, ranks[0] - acc);
            break;
        }
        acc += e.2;
    }
    // From the top: `below` is the weight of everything before the stretch in ascending order.
    let mut above = 0;
    for &k in keys.iter().rev() {
        let e = at(k);
        let below = count - above - e.2;
        if ranks[1] >= below {
            out.1 = value_in(e, ranks[1] - below);
            break;
        }
        above += e.2;
    }
    out
}

/// Value `i` (0-based) of a stretch `(lo, hi, k)` of `k` evenly spaced values from `lo` to `hi`.
#[inline]
fn value_in(e: (f64, f64, u64), i: u64) -> f64 {
    if e.2 > 1 {
        e.0 + (e.1 - e.0) * i as f64 / (e.2 - 1) as f64
    } else {
        e.0
    }
}

/// The values at ascending 0-based ranks `ranks` among stretches `(lo, hi, k)` of `k` evenly spaced values from
/// `lo` to `hi`, ordering stretches by `lo` and interpolating inside one (the weighted selection of
/// [`weighted_ranks_by`]). Reorders `v`.
fn weighted_select(v: &mut [(f64, f64, u64)], ranks: [u64; 2]) -> (f64, f64) {
    match crate::metrics::weighted_ranks_by(v, ranks, |e| e.0, |e| e.2) {
        Some([(a, i), (b, j)]) => (value_in(a, i), value_in(b, j)),
        None => (0.0, 0.0),
    }
}

/// `summary.json`'s `send_delay_us` (hyper path): how long after `t_submit` each request's last `write` returned,
/// microseconds: count, nearest-rank median and p99, and max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SendDelay {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// [`SendDelay`] of the measured delays (µs, any order); `None` for none. Reorders `delays_us`.
pub fn send_delay(delays_us: &mut [f32]) -> Option<SendDelay> {
    if delays_us.is_empty() {
        return None;
    }
    delays_us.sort_unstable_by(f32::total_cmp);
    let n = delays_us.len();
    let at = |q: f64| delays_us[nearest_rank_index(n, q)] as f64;
    Some(SendDelay {
        n,
        p50: at(0.5),
        p99: at(0.99),
        max: delays_us[n - 1] as f64,
    })
}

/// How a record ended, for scoring and the report's checks: completed, cut by the end of the run, or failed
/// otherwise. By the record's typed [`RequestRecord::failure`]; records written before that field existed
/// (without it) are cut when their `error` starts with `"cut:"`, the text every cut record has carried.
pub fn outcome_of(r: &RequestRecord) -> RecordOutcome {
    if r.ok {
        return RecordOutcome::Completed;
    }
    match r.failure {
        Some(FailureKind::Cut) => RecordOutcome::Cut,
        Some(_) => RecordOutcome::Failed,
        None if r.error.as_deref().is_some_and(|e| e.starts_with("cut:")) => RecordOutcome::Cut,
        None => RecordOutcome::Failed,
    }
}

/// [`outcome_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// `ok`: scored.
    Completed,
    /// Cancelled because the run stopped (a signal, a stop, or the drain grace ran out).
    Cut,
    /// Any other failure.
    Failed,
}

/// What failed in a run, for the cards and the report: requests that failed (not cut by the run's end), cut ones,
/// and the session steps that were never sent because their session ended on a failed request (a session's
/// next step is sent only after its request completes, live and simulated alike: one refused request, e.g. a
/// prompt beyond the server's context, ends the session).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Failures {
    /// Records that failed ([`RecordOutcome::Failed`]).
    pub failed: u64,
    /// Records cut by the end of the run ([`RecordOutcome::Cut`]).
    pub cut: u64,
    /// Planned steps of the sessions that ended on a failed request, after it: never sent.
    pub never_sent: u64,
    /// The requests the started sessions planned: the records plus `never_sent`.
    pub planned: u64,
    /// The earliest submitted failed request's error text.
    pub first_error: Option<String>,
}

/// [`Failures`] of a run's records. A session instance (`session`, `inst`) whose last record (by `step`) failed
/// planned `steps_asked` steps: those after the failed one were never sent.
pub fn failures(records: &[RequestRecord]) -> Failures {
    let mut f = Failures::default();
    let mut last: FxHashMap<(u64, u32), &RequestRecord> = FxHashMap::default();
    let mut first: Option<&RequestRecord> = None;
    for r in records {
        match outcome_of(r) {
            RecordOutcome::Completed => {}
            RecordOutcome::Cut => f.cut += 1,
            RecordOutcome::Failed => {
                f.failed += 1;
                if first.is_none_or(|e| r.t_submit < e.t_submit) {
                    first = Some(r);
                }
            }
        }
        let e = last.entry((r.session, r.inst)).or_insert(r);
        if r.step > e.step {
            *e = r;
        }
    }
    f.never_sent = last
        .values()
        .filter(|r| outcome_of(r) == RecordOutcome::Failed)
        .map(|r| u64::from(r.steps_asked.saturating_sub(r.step + 1)))
        .sum();
    f.planned = records.len() as u64 + f.never_sent;
    f.first_error = first.map(|r| r.error.clone().unwrap_or_else(|| "failed (no error text)".to_string()));
    f
}

/// The sentence that explains the gap between planned and sent requests, when there is one.
pub fn never_sent_text(f: &Failures) -> Option<String> {
    (f.never_sent > 0).then(|| {
        format!(
            "{} of {} planned requests never sent (the session ended on an error)",
            f.never_sent, f.planned
        )
    })
}

/// Counts a reader of a record file should know about (shown by `summary.json`, `loadshape report` and the text
/// report).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Checks {
    /// Completed records whose `usage` was missing (tokens counted from frames).
    pub usage_missing: u64,
    /// Completed records whose server reported no prompt tokens (`prompt_tokens` null): e.g. llama.cpp's Messages
    /// stream, which leaves out `message_start` when its first token is part of a UTF-8 character.
    pub prompt_usage_missing: u64,
    /// Completed records that produced fewer tokens than asked (length not forced).
    pub short_outputs: u64,
    /// Records cut by the end of the run ([`outcome_of`]).
    pub cut: u64,
    /// Step-0 records reporting cached tokens.
    pub step0_records: u64,
    /// Live records whose first content frame (so their TTFT) was timed by the kernel's receive timestamp.
    pub rx_clock_kernel: u64,
    /// Live records whose first content frame was timed when the client read it.
    pub rx_clock_user: u64,
}

/// `summary.json`'s `rx_clock_requests`: how many records had their first frame timed by each clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RxClockRequests {
    pub kernel: u64,
    pub user: u64,
}

impl Checks {
    pub fn of(recs: &[RequestRecord]) -> Checks {
        let mut c = Checks::default();
        for r in recs {
            if r.ok && r.usage_source == UsageSource::Missing {
                c.usage_missing += 1;
            }
            if r.ok && r.prompt_tokens.is_none() {
                c.prompt_usage_missing += 1;
            }
            if r.ok && r.gen_tokens < r.asked_tokens {
                c.short_outputs += 1;
            }
            if outcome_of(r) == RecordOutcome::Cut {
                c.cut += 1;
            }
            if r.step == 0 && r.parent.is_none() && r.cached_tokens.is_some() {
                c.step0_records += 1;
            }
            match r.rx_clock {
                Some(FrameClock::Kernel) => c.rx_clock_kernel += 1,
                Some(FrameClock::User) => c.rx_clock_user += 1,
                None => {}
            }
        }
        c
    }

    /// Which clock timed the records' first frames: `"kernel"` (every record with a content frame had its first one
    /// stamped by the kernel), `"user"` (none had), or `"mixed"` (`summary.json`'s `rx_clock`).
    pub fn rx_clock(&self) -> &'static str {
        match (self.rx_clock_kernel, self.rx_clock_user) {
            (k, 0) if k > 0 => "kernel",
            (0, _) => "user",
            _ => "mixed",
        }
    }

    /// `summary.json`'s `rx_clock_requests`.
    pub fn rx_clock_requests(&self) -> RxClockRequests {
        RxClockRequests {
            kernel: self.rx_clock_kernel,
            user: self.rx_clock_user,
        }
    }
}

/// [`cdf_points`] of the TTFT (ms) of every record that saw a first token, simulated or live.
pub fn ttft_cdf(records: &[RequestRecord], max_points: usize) -> Vec<(f64, f64)> {
    let ms: Vec<f64> = records.iter().filter_map(|r| r.ttft_s.map(|t| t * 1000.0)).collect();
    cdf_points(ms, max_points)
}

/// [`cdf_points`] of the TPOT (ms, [`RequestRecord::tpot_ms`]) of every record that has one, simulated or live.
pub fn tpot_cdf(records: &[RequestRecord], max_points: usize) -> Vec<(f64, f64)> {
    let ms: Vec<f64> = records.iter().filter_map(RequestRecord::tpot_ms).collect();
    cdf_points(ms, max_points)
}

/// Completions over time, for the live page's progress chart: every record's finish time (`t_submit + wall_s`,
/// finite ones), sorted, as points `(finish time s, requests finished by then)`, every
/// `max(⌈n / max_points⌉, 1)`-th one from the first.
pub fn completion_curve(records: &[RequestRecord], max_points: usize) -> Vec<(f64, f64)> {
    let mut done: Vec<f64> = records
        .iter()
        .map(|x| x.t_submit + x.wall_s)
        .filter(|t| t.is_finite())
        .collect();
    done.sort_by(f64::total_cmp);
    let stride = done.len().div_ceil(max_points).max(1);
    done.iter()
        .enumerate()
        .step_by(stride)
        .map(|(i, t)| (*t, (i + 1) as f64))
        .collect()
}

/// Nearest-rank percentile of ascending `sorted`: the element at `ceil(q·n) − 1`, clamped to `[0, n − 1]`;
/// 0 for no samples. Identical to the seed's `_percentile`.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    nearest_rank(sorted, q).unwrap_or(0.0)
}

/// The nearest-rank `q`-quantile of ascending `sorted` (the element at [`nearest_rank_index`]), of any element
/// type: token counts, lengths; `None` for no samples.
#[inline]
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    (!sorted.is_empty()).then(|| sorted[nearest_rank_index(sorted.len(), q)])
}

/// The nearest-rank `num/den`-quantile of a weighted distribution over the integers `lo..=hi`, given its
/// cumulative weight `weight_le(v)` (the weight of values `<= v`, non-decreasing, `total` at `hi`): the smallest
/// `v` with `weight_le(v) · den >= num · total`, found by bisection. With unit weights on sorted samples this is
/// [`nearest_rank`] exactly (the smallest sample whose share of samples at or below it reaches the level), so a
/// ladder's exact prompt-length percentiles (`ladder::stats`) follow the same rule as a run's.
#[inline]
pub fn weighted_nearest_rank(
    lo: u64,
    hi: u64,
    total: u128,
    num: u128,
    den: u128,
    weight_le: impl Fn(u64) -> u128,
) -> u64 {
    let target = num * total;
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if weight_le(mid) * den >= target {
            hi = mid
        } else {
            lo = mid + 1
        }
    }
    lo
}

/// The sample median as robust statistics define it (the mean of the two middle values for an even count; not
/// the nearest-rank p50 of the summaries): the centre and scale of `calibrate`'s Huber fits. Sorts `v`; 0 for no
/// samples.
#[inline]
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median absolute deviation from the [`median`] (unscaled: multiply by 1.4826 for a normal σ).
#[inline]
pub fn mad(r: &[f64]) -> f64 {
    let mut v = r.to_vec();
    let m = median(&mut v);
    let mut d: Vec<f64> = r.iter().map(|x| (x - m).abs()).collect();
    median(&mut d)
}

/// The index `ceil(q·n) − 1` clamped to `[0, n − 1]`, computed as the seed computes it (in floating point).
pub fn nearest_rank_index(n: usize, q: f64) -> usize {
    let pos = (q * n as f64).ceil() - 1.0;
    if pos <= 0.0 { 0 } else { (pos as usize).min(n - 1) }
}

/// The empirical CDF of `samples` as the points a step chart draws: `F(x)` = the share of samples `<= x`.
///
/// With the `n` finite samples sorted (`x_1 <= … <= x_n`; NaN and infinities are dropped), the points are
/// `(x_1, 0)`, then `(x_k, k / n)` for `k = 1, 1 + s, 1 + 2s, …` and finally `(x_n, 1)`, where the stride
/// `s = ceil(n / max(max_points, 2))` keeps them to at most `max_points + 2`; with `n <= max_points` every sample
/// is a point. So each point `(x, k / n)` is the `k`-th smallest sample, which is the nearest-rank `k / n`-quantile of
/// this module's percentiles (index `ceil(q·n) − 1`): a chart read at `y = 0.9` shows the `ttft_p90_ms` of the
/// summary, up to the stride. Ties give several points at one `x` (a vertical step). Deterministic: the same
/// samples in any order give the same points. No samples give no points.
pub fn cdf_points(samples: impl IntoIterator<Item = f64>, max_points: usize) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = samples.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Vec::new();
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let stride = n.div_ceil(max_points.max(2));
    let mut out = Vec::with_capacity(n / stride + 2);
    out.push((v[0], 0.0));
    let mut i = 0;
    while i < n {
        out.push((v[i], (i + 1) as f64 / n as f64));
        i += stride;
    }
    if out.last().is_some_and(|&(_, y)| y < 1.0) {
        out.push((v[n - 1], 1.0));
    }
    out
}

/// The `p`-quantile read off [`cdf_points`]-style step points (x ascending, share ascending): the first `x` whose
/// share reaches `p` (within 1e-12, so that a share computed as `k / n` meets a `p` computed as `k / n` elsewhere).
/// `None` when no point reaches it (an empty CDF, or `p` above the last share).
pub fn cdf_quantile(cdf: &[(f64, f64)], p: f64) -> Option<f64> {
    cdf.iter().find(|&&(_, y)| y >= p - 1e-12).map(|&(x, _)| x)
}

/// Per share `p = i / (levels + 1)`, `i = 1..=levels`: `(p, least, greatest)` [`cdf_quantile`] over `cdfs` (the
/// same metric from several runs: the page's seed band). Empty when there are no CDFs or one of them has no
/// points; a level some CDF does not reach is left out.
pub fn quantile_envelope(cdfs: &[Vec<(f64, f64)>], levels: usize) -> Vec<(f64, f64, f64)> {
    if cdfs.is_empty() || cdfs.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    (1..=levels)
        .filter_map(|i| {
            let p = i as f64 / (levels + 1) as f64;
            let xs: Option<Vec<f64>> = cdfs.iter().map(|c| cdf_quantile(c, p)).collect();
            let xs = xs?;
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Some((p, lo, hi))
        })
        .collect()
}

/// The most bins [`timeline`] returns; a finer `bin_s` is widened to fit.
pub const MAX_TIMELINE_BINS: usize = 100_000;

/// One time bin of [`timeline`]: what happened in `[t_s, t_s + bin_s)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TimelineBin {
    /// Bin start, seconds since the run's origin.
    pub t_s: f64,
    /// Time-averaged number of requests running in the bin (admitted and not finished; for records without
    /// `queue_s`, i.e. live runs, from submit to finish: in flight).
    pub running: f64,
    /// Time-averaged number of requests queued (submitted, not yet admitted: `t_submit .. t_submit + queue_s`).
    pub queued: f64,
    /// Requests submitted in the bin.
    pub submitted: u64,
    /// Requests that completed (`ok`) in the bin.
    pub completed: u64,
    /// Requests that failed in the bin.
    pub failed: u64,
    /// Output tokens of the requests that completed in the bin.
    pub output_tokens: u64,
}

/// Bin records into a time series for charts: bins of `bin_s` seconds from `min(0, first submit)` to the last
/// completion. Occupancy (`running`, `queued`) is the exact time average over each bin (the integral of the count
/// divided by `bin_s`), so it is independent of where events fall inside a bin. Returns no bins for no records or a
/// `bin_s` that is not a positive number; widens `bin_s` so that at most [`MAX_TIMELINE_BINS`] bins come back.
pub fn timeline(records: &[RequestRecord], bin_s: f64) -> Vec<TimelineBin> {
    if records.is_empty() || !(bin_s.is_finite() && bin_s > 0.0) {
        return Vec::new();
    }
    let t0 = records.iter().map(|r| r.t_submit).fold(0.0f64, f64::min);
    let t_end = records
        .iter()
        .map(|r| r.t_submit + r.wall_s.max(0.0))
        .fold(t0, f64::max);
    if !(t0.is_finite() && t_end.is_finite()) {
        return Vec::new();
    }
    let span = t_end - t0;
    let mut bin_s = bin_s;
    if span / bin_s >= MAX_TIMELINE_BINS as f64 {
        bin_s = span / (MAX_TIMELINE_BINS - 1) as f64;
    }
    let n_bins = ((span / bin_s).floor() as usize + 1).min(MAX_TIMELINE_BINS);
    let index = |t: f64| (((t - t0) / bin_s).floor().max(0.0) as usize).min(n_bins - 1);

    let mut bins: Vec<TimelineBin> = (0..n_bins)
        .map(|i| TimelineBin {
            t_s: t0 + i as f64 * bin_s,
            ..TimelineBin::default()
        })
        .collect();
    // Occupancy: partial overlaps added directly, whole bins through a difference array.
    let mut running_full = vec![0.0f64; n_bins + 1];
    let mut queued_full = vec![0.0f64; n_bins + 1];
    let mut running_part = vec![0.0f64; n_bins];
    let mut queued_part = vec![0.0f64; n_bins];
    let add_interval = |a: f64, b: f64, full: &mut [f64], part: &mut [f64]| {
        if b <= a {
            return;
        }
        let (i0, i1) = (index(a), index(b));
        if i0 == i1 {
            part[i0] += b - a;
        } else {
            part[i0] += t0 + (i0 + 1) as f64 * bin_s - a;
            part[i1] += b - (t0 + i1 as f64 * bin_s);
            full[i0 + 1] += 1.0;
            full[i1] -= 1.0;
        }
    };
    for r in records {
        let submit = r.t_submit;
        let end = r.t_submit + r.wall_s.max(0.0);
        let admit = (submit + r.queue_s.unwrap_or(0.0).max(0.0)).min(end);
        add_interval(submit, admit, &mut queued_full, &mut queued_part);
        add_interval(admit, end, &mut running_full, &mut running_part);
        bins[index(submit)].submitted += 1;
        let done = &mut bins[index(end)];
        if r.ok {
            done.completed += 1;
            done.output_tokens += r.gen_tokens;
        } else {
            done.failed += 1;
        }
    }
    let (mut running_count, mut queued_count) = (0.0, 0.0);
    for (i, bin) in bins.iter_mut().enumerate() {
        running_count += running_full[i];
        queued_count += queued_full[i];
        bin.running = running_count + running_part[i] / bin_s;
        bin.queued = queued_count + queued_part[i] / bin_s;
    }
    bins
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rank_rule_for_samples_counts_and_weighted_distributions() {
        // The seed's rule on token counts ...
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(5));
        assert_eq!(nearest_rank(&v, 0.9), Some(9));
        assert_eq!(nearest_rank(&[7u64], 0.9), Some(7));
        assert_eq!(nearest_rank::<u64>(&[], 0.5), None);
        // ... and the weighted bisection is the same rule: unit weights on sorted samples (with ties and gaps)
        // give the sample the rank rule picks, at every level.
        let samples: Vec<u64> = vec![3, 3, 4, 9, 9, 9, 12, 20, 21, 40, 41];
        for (num, den) in [(1, 100), (1, 2), (9, 10), (99, 100), (1, 1), (0, 1), (1, 3), (2, 3)] {
            let weight_le = |x: u64| samples.iter().filter(|&&s| s <= x).count() as u128;
            let got = weighted_nearest_rank(3, 41, samples.len() as u128, num, den, weight_le);
            let q = num as f64 / den as f64;
            assert_eq!(Some(got), nearest_rank(&samples, q), "level {num}/{den}");
        }
        // Weights: value 10 holds 3/4 of the mass, so it is the median and 11 the p90.
        let w = |x: u64| {
            if x < 10 {
                0
            } else if x < 11 {
                3
            } else {
                4
            }
        };
        assert_eq!(weighted_nearest_rank(10, 11, 4, 1, 2, w), 10);
        assert_eq!(weighted_nearest_rank(10, 11, 4, 9, 10, w), 11);
    }

    #[test]
    fn robust_median_and_mad() {
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
        // |x − 3| = 2, 1, 0, 1, 97 → 1.
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), 1.0);
    }

    #[test]
    fn cdf_points_are_the_sorted_samples_at_their_ranks() {
        // 7 samples, out of order, with a tie and a NaN that is dropped.
        let pts = cdf_points([5.0, 1.0, 3.0, f64::NAN, 3.0, 9.0, 2.0, 7.0], 100);
        let want = [1.0, 2.0, 3.0, 3.0, 5.0, 7.0, 9.0];
        assert_eq!(pts.len(), want.len() + 1);
        assert_eq!(pts[0], (1.0, 0.0));
        for (k, (p, x)) in pts[1..].iter().zip(want).enumerate() {
            assert_eq!(*p, (x, (k + 1) as f64 / 7.0));
        }
        assert!(cdf_points([], 10).is_empty());
        assert!(cdf_points([f64::INFINITY, f64::NAN], 10).is_empty());
        assert_eq!(cdf_points([4.0], 10), vec![(4.0, 0.0), (4.0, 1.0)]);
    }

    #[test]
    fn quantiles_of_step_points_and_their_envelope() {
        let cdf = vec![(1.0, 0.25), (2.0, 0.5), (4.0, 1.0)];
        assert_eq!(cdf_quantile(&cdf, 0.1), Some(1.0));
        assert_eq!(cdf_quantile(&cdf, 0.5), Some(2.0));
        assert_eq!(cdf_quantile(&cdf, 0.51), Some(4.0));
        assert_eq!(cdf_quantile(&cdf, 1.5), None);
        assert_eq!(cdf_quantile(&[], 0.5), None);
        // A CDF of cdf_points reads back the nearest-rank percentile at k / n.
        let samples = [5.0, 1.0, 3.0, 9.0, 2.0, 7.0, 4.0, 8.0];
        let pts = cdf_points(samples, 100);
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        for k in 1..=8 {
            let q = k as f64 / 8.0;
            assert_eq!(cdf_quantile(&pts, q), Some(percentile_sorted(&sorted, q)), "q {q}");
        }
        // Two runs: at each level the least and the greatest of their quantiles.
        let other = vec![(3.0, 0.5), (5.0, 1.0)];
        let e = quantile_envelope(&[cdf.clone(), other], 3);
        assert_eq!(e, vec![(0.25, 1.0, 3.0), (0.5, 2.0, 3.0), (0.75, 4.0, 5.0)]);
        assert!(quantile_envelope(&[cdf, Vec::new()], 3).is_empty());
        assert!(quantile_envelope(&[], 3).is_empty());
    }

    #[test]
    fn cdf_points_are_bounded_monotone_and_meet_the_percentiles() {
        // 10,007 samples in a scrambled order (a prime count, so the stride does not divide it).
        let n = 10_007usize;
        let samples: Vec<f64> = (0..n).map(|i| ((i * 7_919) % n) as f64 * 0.5).collect();
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        for max_points in [0, 1, 2, 400, 10_007, 20_000] {
            let pts = cdf_points(samples.iter().copied(), max_points);
            assert!(pts.len() <= max_points.max(2) + 2, "{max_points}: {} points", pts.len());
            assert_eq!(pts.first(), Some(&(0.0, 0.0)));
            assert_eq!(pts.last(), Some(&(sorted[n - 1], 1.0)));
            assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
            for &(x, y) in &pts[1..] {
                let k = (y * n as f64).round() as usize;
                assert_eq!(x, sorted[k - 1], "the k-th smallest sample at k / n");
            }
        }
        // Every sample is a point when they fit; the order of the samples does not matter.
        let all = cdf_points(samples.iter().copied(), n);
        assert_eq!(all.len(), n + 1);
        assert_eq!(all, cdf_points(sorted.iter().copied(), n));
        // Read at 0.9, the chart shows the summary's p90 (nearest rank).
        let k90 = all.iter().find(|p| p.1 >= 0.9).map(|p| p.0);
        assert_eq!(k90, Some(percentile_sorted(&sorted, 0.9)));
    }

    /// A xorshift64 generator for test inputs.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The weighted percentiles by selection equal the definition computed by sorting and accumulating `f64`
    /// weights (the former implementation), for every size, with ties and weights from 1 to thousands.
    #[test]
    fn weighted_selection_equals_sorted_accumulation() {
        fn by_sort(samples: &[(f64, u64)], q: f64) -> f64 {
            let mut v: Vec<(f64, f64)> = samples.iter().map(|&(x, w)| (x, w as f64)).collect();
            let total: f64 = v.iter().map(|e| e.1).sum();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let target = q * total;
            let mut cum = 0.0;
            for (x, w) in &v {
                cum += w;
                if cum >= target {
                    return *x;
                }
            }
            v[v.len() - 1].0
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in (1..200usize).chain([1000, 5000]) {
            let heavy = n % 3 == 0;
            let samples: Vec<(f64, u64)> = (0..n)
                .map(|_| {
                    let v = (next() % 23) as f64 * 0.25 + 1.0;
                    let w = if heavy { 1 + next() % 3000 } else { 1 + next() % 4 };
                    (v, w)
                })
                .collect();
            let st = Stats::weighted(&mut samples.clone());
            let want = QUANTILES.map(|q| by_sort(&samples, q));
            assert_eq!([st.p50, st.p90, st.p95, st.p99], want, "n = {n}");
        }
    }

    /// The weighted selection finds, for every rank, the sample and offset that expanding each sample into its
    /// weight's units and sorting finds (distinct keys, so the sample is determined).
    #[test]
    fn weighted_ranks_by_equals_expanded_units() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in [1usize, 5, 33, 100, 257] {
            let samples: Vec<(f64, u64)> = (0..n)
                .map(|i| (i as f64 * 0.5 + (next() % 1000) as f64 * 1e-6, 1 + next() % 9))
                .collect();
            let mut units: Vec<((f64, u64), u64)> =
                samples.iter().flat_map(|&s| (0..s.1).map(move |o| (s, o))).collect();
            units.sort_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.1.cmp(&b.1)));
            for r in 0..units.len() as u64 {
                let lo = r.saturating_sub(1);
                let got = weighted_ranks_by(&mut samples.clone(), [lo, r], |s| s.0, |s| s.1).expect("non-empty");
                assert_eq!(got, [units[lo as usize], units[r as usize]], "n = {n}, rank {r}");
            }
        }
    }

    /// The packed-key sort picks what the exact weighted selection picks (distinct first durations).
    #[test]
    fn packed_quantiles_equal_weighted_select() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut keys = Vec::new();
        for n in [1usize, 2, 5, 17, 64, 65, 300, 2000] {
            let v: Vec<(f64, f64, u64)> = (0..n)
                .map(|i| {
                    let lo = 5.0 + (next() % 100_000) as f64 * 1e-3 + i as f64 * 1e-7;
                    let k = 1 + next() % 50;
                    (lo, lo + (next() % 100) as f64 * 1e-4, k)
                })
                .collect();
            let count: u64 = v.iter().map(|e| e.2).sum();
            let ranks = [0.5, 0.99].map(|q| nearest_rank_index(count as usize, q) as u64);
            let got = packed_quantiles(&v, &mut keys, count, ranks);
            let want = weighted_select(&mut v.clone(), ranks);
            assert_eq!(got, want, "n = {n}");
        }
    }

    /// Live ITL: nearest rank by selection equals a sort, for every length up to 300.
    #[test]
    fn itl_nearest_rank() {
        let mut g = vec![4.0, 1.0, 3.0, 2.0];
        let s = itl_summary(&mut g).unwrap_or_else(|| panic!("gaps given"));
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms, s.mean_ms), (2.0, 4.0, 4.0, 2.5));
        assert!(itl_summary(&mut []).is_none());
        let one = itl_summary(&mut [7.0]).unwrap_or_else(|| panic!("one gap"));
        assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (7.0, 7.0, 7.0));
        let mut state = 12345u32;
        for n in 1..=300usize {
            let mut g: Vec<f32> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 20) as f32 / 7.0
                })
                .collect();
            let mut sorted = g.clone();
            sorted.sort_unstable_by(f32::total_cmp);
            let at = |q: f64| sorted[((q * n as f64).ceil() as usize).saturating_sub(1).min(n - 1)] as f64;
            let s = itl_summary(&mut g).unwrap_or_else(|| panic!("gaps given"));
            assert_eq!(
                (s.p50_ms, s.p99_ms, s.max_ms),
                (at(0.5), at(0.99), sorted[n - 1] as f64),
                "n={n}"
            );
        }
    }

    /// Stretches of one gap each are plain gaps: the stretch scorer and the gap scorer agree (nearest rank), and
    /// a stretch's gaps are interpolated evenly.
    #[test]
    fn itl_from_stretches_equals_gaps_expanded() {
        let mut keys = Vec::new();
        let gaps = [5.0f64, 9.0, 7.0, 6.0, 8.0];
        let single: Vec<(f64, f64, u64)> = gaps.iter().map(|&g| (g, g, 1)).collect();
        let s = itl_from_stretches(7.0, &single, &mut keys).unwrap_or_else(|| panic!("gaps given"));
        let mut g32: Vec<f32> = gaps.iter().map(|&g| g as f32).collect();
        let l = itl_summary(&mut g32).unwrap_or_else(|| panic!("gaps given"));
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (l.p50_ms, l.p99_ms, l.max_ms));
        // One stretch of 5 gaps 10, 11, ..., 14: median 12, p99 14.
        let s = itl_from_stretches(12.0, &[(10.0, 14.0, 5)], &mut keys).unwrap_or_else(|| panic!("one stretch"));
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms, s.mean_ms), (12.0, 14.0, 14.0, 12.0));
        assert!(itl_from_stretches(1.0, &[], &mut keys).is_none());
    }

    /// Send delays: nearest rank over the measured delays.
    #[test]
    fn send_delay_is_nearest_rank() {
        assert_eq!(send_delay(&mut []), None);
        let mut d: Vec<f32> = (1..=100).rev().map(|x| x as f32).collect();
        assert_eq!(
            send_delay(&mut d),
            Some(SendDelay {
                n: 100,
                p50: 50.0,
                p99: 99.0,
                max: 100.0
            })
        );
    }

    /// The CDF starts at share 0, ends at share 1, never falls, skips non-finite values, and keeps its size bound.
    #[test]
    fn cdf_ends_at_one_and_is_monotone() {
        let v: Vec<f64> = (0..1000)
            .map(|i| f64::from((i * 7919) % 1000))
            .chain([f64::NAN])
            .collect();
        let c = cdf_points(v.iter().copied(), 100);
        assert_eq!(c.first().map(|p| p.1), Some(0.0));
        assert_eq!(c.last().copied(), Some((999.0, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{c:?}");
        assert!(c.len() <= 102, "{}", c.len());
        assert!(cdf_points([], 10).is_empty());
        assert_eq!(cdf_points([3.0, 1.0], 10), vec![(1.0, 0.0), (1.0, 0.5), (3.0, 1.0)]);
    }

    /// The completion curve counts finished requests in finish order, thinned to the asked size.
    #[test]
    fn completion_curve_counts_in_finish_order() {
        let rec = |t: f64, wall: f64| RequestRecord {
            schema: 1,
            session: 0,
            inst: 0,
            step: 0,
            steps_asked: 1,
            base_asked: 0,
            ok: true,
            t_submit: t,
            ttft_s: None,
            wall_s: wall,
            gen_tokens: 0,
            asked_tokens: 0,
            prompt_tokens: None,
            cached_tokens: None,
            designed_cached_tokens: None,
            designed_prompt_tokens: None,
            sse_frames: 0,
            prompt_chars: 0,
            queue_s: None,
            itl: None,
            finish_reason: None,
            usage_source: UsageSource::Simulated,
            rx_clock: None,
            retries: 0,
            retry_statuses: Vec::new(),
            failure: None,
            error: None,
            prompt_block_hashes: Vec::new(),
            replica: None,
            spec: None,
            kv_transfer_ms: None,
            reasoning_tokens: None,
            ttft_content_s: None,
            parent: None,
        };
        let recs = [rec(0.0, 3.0), rec(1.0, 0.5), rec(0.0, f64::NAN), rec(2.0, 2.0)];
        assert_eq!(completion_curve(&recs, 300), vec![(1.5, 1.0), (3.0, 2.0), (4.0, 3.0)]);
        assert_eq!(completion_curve(&recs, 2), vec![(1.5, 1.0), (4.0, 3.0)]);
        assert!(completion_curve(&[], 10).is_empty());
    }

    /// Selection gives exactly what sorting gives, for every size and with ties and repeated ranks.
    #[test]
    fn select_ranks_equals_sorted_indexing() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 1..300usize {
            let samples: Vec<f64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Few distinct values, so ties are common.
                    (x % 17) as f64 * 0.5 - 3.0
                })
                .collect();
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            let ranks = QUANTILES.map(|q| nearest_rank_index(n, q));
            let mut work = samples.clone();
            let got = select_ranks(&mut work, ranks);
            let want = ranks.map(|r| sorted[r]);
            assert_eq!(got, want, "n = {n}");
            let st = Stats::of(&mut samples.clone());
            assert_eq!(
                [st.p50, st.p90, st.p95, st.p99],
                QUANTILES.map(|q| percentile_sorted(&sorted, q))
            );
        }
    }
}
