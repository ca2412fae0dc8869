//! Mergeable statistics beside `metrics` (`loadshape merge`, docs/scale.md): a run's exact [`Counters`] and one
//! HDR histogram per latency metric ([`Mergeable`]), which shards of one plan sum into the whole run's.
//!
//! - **Counters are exact**: requests, completions, failures, tokens, SLO hits, sessions, per-step attainment,
//!   cached-share sums and the first submit / last completion. Summed over shards they are what
//!   [`crate::metrics::summarize`] counts over all their records (sessions are distinct across shards because a
//!   shard owns whole slots or requests: `workload::shard`).
//! - **Latencies are HDR histograms** (the `hdrhistogram` crate, a port of Gil Tene's HdrHistogram) of TTFT, TPOT,
//!   ITL and E2E latency in **nanoseconds** with [`SIGNIFICANT_DIGITS`] = 3: a value is kept in a bucket whose
//!   width is at most 1/1024 of it (values below 2,048 ns exactly). A quantile is HdrHistogram's
//!   `value_at_quantile`: the bucket holding the sample of rank `ceil(q·n)` — the sample `metrics` reports
//!   (nearest rank) — and the highest value of that bucket. So for every percentile `p` of the exact summary the
//!   histogram's `h` satisfies **`p − 0.5 ns ≤ h < p · (1 + 1/1024) + 0.5 ns`** ([`RELATIVE_BOUND`]; the 0.5 ns is
//!   the rounding of a value to whole nanoseconds). Means are the histogram's (each value at its bucket's
//!   middle): within the same relative bound. ITL is weighted as in `metrics`: each request's mean ITL counts
//!   once per gap (`sse_frames − 1`).
//! - Files: each histogram as HdrHistogram's V2 format, deflate-compressed ([`encode`] / [`decode`]): the
//!   format every HdrHistogram implementation (Java, Go, Python's `hdrhistogram`) reads; the counters as JSON.

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::metrics::{Slo, StepAttainment, Summary};
use crate::record::RequestRecord;

/// Significant decimal digits the histograms keep (HdrHistogram's precision setting).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The largest relative amount a histogram percentile lies above the exact one: one bucket's width, 1/1024 (with
/// 3 significant digits HdrHistogram uses 2,048 sub-buckets, the upper half of them per power of two).
pub const RELATIVE_BOUND: f64 = 1.0 / 1024.0;

/// The absolute slack on top of [`RELATIVE_BOUND`], milliseconds: values are rounded to whole nanoseconds.
pub const ABSOLUTE_BOUND_MS: f64 = 0.5e-6;

/// Version of the counters file ([`Counters::version`]).
pub const COUNTERS_VERSION: u32 = 1;

/// The latency metrics kept as histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    Tpot,
    Itl,
    E2el,
}

impl Metric {
    pub const ALL: [Metric; 4] = [Metric::Ttft, Metric::Tpot, Metric::Itl, Metric::E2el];

    /// The file and field stem: `ttft`, `tpot`, `itl`, `e2el` (as in [`Summary`]'s `ttft_p50_ms`…).
    pub const fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Tpot => "tpot",
            Metric::Itl => "itl",
            Metric::E2el => "e2el",
        }
    }
}

/// Requests and SLO hits at one session step (exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepCount {
    pub step: u32,
    pub requests: u64,
    pub met: u64,
}

/// Σ cached and Σ prompt tokens (exact), for a cached share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenSums {
    pub cached: u64,
    pub prompt: u64,
}

impl TokenSums {
    fn add(&mut self, other: TokenSums) {
        self.cached += other.cached;
        self.prompt += other.prompt;
    }

    fn share(self) -> Option<f64> {
        (self.prompt > 0).then(|| self.cached as f64 / self.prompt as f64)
    }
}

/// The exact, summable part of a run's summary (the file `<out>.counters.json`). Definitions: `metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// [`COUNTERS_VERSION`].
    pub version: u32,
    /// The targets `good` and `met` were counted against.
    pub slo: Slo,
    pub records: u64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// Records that completed and met every SLO.
    pub good: u64,
    /// Distinct `(session, inst)` pairs.
    pub sessions: u64,
    /// Sessions whose every record completed and met every SLO.
    pub good_sessions: u64,
    /// Earliest `t_submit`, seconds since the run's origin; `None` for no record.
    pub first_submit_s: Option<f64>,
    /// Latest `t_submit + wall_s`.
    pub last_end_s: Option<f64>,
    /// Ascending by step.
    pub by_step: Vec<StepCount>,
    pub cached_achieved: TokenSums,
    pub cached_designed: TokenSums,
    pub cached_step0: TokenSums,
    /// Speculative decoding's counts over the completed records that carry them (absent when none does, as
    /// `spec_acceptance` is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<SpecTotals>,
}

/// Σ drafted and Σ accepted draft tokens, and over the records that carry their steps (absent when none does) Σ
/// accepted tokens and Σ steps: what `spec_acceptance` and `spec_accepted_per_step` are computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpecTotals {
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stepped_accepted_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
}

impl SpecTotals {
    fn of(s: &crate::metrics::SpecSums) -> Option<SpecTotals> {
        s.any.then(|| SpecTotals {
            draft_tokens: s.drafted,
            accepted_tokens: s.accepted,
            stepped_accepted_tokens: s.stepped.then_some(s.accepted_stepped),
            steps: s.stepped.then_some(s.steps),
        })
    }

    fn sums(&self) -> crate::metrics::SpecSums {
        crate::metrics::SpecSums {
            any: true,
            drafted: self.draft_tokens,
            accepted: self.accepted_tokens,
            stepped: self.steps.is_some(),
            accepted_stepped: self.stepped_accepted_tokens.unwrap_or(0),
            steps: self.steps.unwrap_or(0),
        }
    }

    fn add(a: Option<SpecTotals>, b: Option<SpecTotals>) -> Option<SpecTotals> {
        let (a, b) = match (a, b) {
            (None, x) | (x, None) => return x,
            (Some(a), Some(b)) => (a, b),
        };
        let opt = |x: Option<u64>, y: Option<u64>| match (x, y) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
        };
        Some(SpecTotals {
            draft_tokens: a.draft_tokens + b.draft_tokens,
            accepted_tokens: a.accepted_tokens + b.accepted_tokens,
            stepped_accepted_tokens: opt(a.stepped_accepted_tokens, b.stepped_accepted_tokens),
            steps: opt(a.steps, b.steps),
        })
    }
}

/// Why statistics cannot be read or merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistError {
    #[error("counters file version {found} is not known (this build reads {COUNTERS_VERSION})")]
    Version { found: u32 },
    #[error("the runs were scored against different SLOs ({a} vs {b})")]
    SloMismatch { a: String, b: String },
    #[error("histogram: {0}")]
    Histogram(String),
}

/// A run's mergeable statistics: exact [`Counters`] and a histogram per [`Metric`].
#[derive(Debug, Clone)]
pub struct Mergeable {
    pub counters: Counters,
    hists: [Histogram<u64>; 4],
}

fn new_hist() -> Histogram<u64> {
    // 3 digits is always a valid precision; auto-resizing covers any range.
    Histogram::new(SIGNIFICANT_DIGITS).unwrap_or_else(|_| unreachable!("3 significant digits is valid"))
}

/// Records `count` values `v` (the histograms auto-resize, so only a count overflowing u64 is refused, and such
/// a count is kept at the maximum).
fn record(h: &mut Histogram<u64>, v: u64, count: u64) {
    if h.record_n(v, count).is_err() {
        let _ = h.record_n(v, u64::MAX - h.len());
    }
}

/// Milliseconds as whole nanoseconds (negative and non-finite values, which no record should carry, as 0).
fn ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

impl Mergeable {
    /// The statistics of `records` against `slo` (the counts [`crate::metrics::summarize`] makes).
    pub fn of(records: &[RequestRecord], slo: &Slo) -> Mergeable {
        let mut c = Counters {
            version: COUNTERS_VERSION,
            slo: *slo,
            records: 0,
            completed: 0,
            failed: 0,
            total_input_tokens: 0,
            total_output_tokens: 0,
            good: 0,
            sessions: 0,
            good_sessions: 0,
            first_submit_s: None,
            last_end_s: None,
            by_step: Vec::new(),
            cached_achieved: TokenSums::default(),
            cached_designed: TokenSums::default(),
            cached_step0: TokenSums::default(),
            spec: None,
        };
        let mut spec = crate::metrics::SpecSums::default();
        let mut hists = [new_hist(), new_hist(), new_hist(), new_hist()];
        let mut sessions: FxHashMap<(u64, u32), bool> = FxHashMap::default();
        let mut steps: FxHashMap<u32, (u64, u64)> = FxHashMap::default();
        for r in records {
            c.records += 1;
            if c.first_submit_s.is_none_or(|f| r.t_submit < f) {
                c.first_submit_s = Some(r.t_submit);
            }
            let end = r.t_submit + r.wall_s;
            if c.last_end_s.is_none_or(|l| end > l) {
                c.last_end_s = Some(end);
            }
            let met = r.ok && slo.met_by(r);
            *sessions.entry((r.session, r.inst)).or_insert(true) &= met;
            let st = steps.entry(r.step).or_insert((0, 0));
            st.0 += 1;
            st.1 += u64::from(met);
            if !r.ok {
                c.failed += 1;
                continue;
            }
            c.completed += 1;
            c.good += u64::from(met);
            c.total_output_tokens += r.gen_tokens;
            c.total_input_tokens += r.prompt_tokens.unwrap_or(0);
            if let Some(t) = r.ttft_s {
                record(&mut hists[0], ns(t * 1000.0), 1);
            }
            if let Some(t) = r.tpot_ms() {
                record(&mut hists[1], ns(t), 1);
            }
            if let Some(i) = &r.itl {
                let weight = r.sse_frames.saturating_sub(1).max(1);
                record(&mut hists[2], ns(i.mean_ms), weight);
            }
            record(&mut hists[3], ns(r.wall_s * 1000.0), 1);
            if let Some(sc) = &r.spec {
                spec.add(sc);
            }
            if let Some(prompt) = r.prompt_tokens {
                if let Some(cached) = r.cached_tokens {
                    c.cached_achieved.add(TokenSums { cached, prompt });
                    if r.step == 0 && r.parent.is_none() {
                        c.cached_step0.add(TokenSums { cached, prompt });
                    }
                }
                if let Some(d) = r.designed_cached_tokens {
                    c.cached_designed.add(TokenSums { cached: d, prompt });
                }
            }
        }
        c.sessions = sessions.len() as u64;
        c.good_sessions = sessions.values().filter(|g| **g).count() as u64;
        let mut by_step: Vec<StepCount> = steps
            .into_iter()
            .map(|(step, (requests, met))| StepCount { step, requests, met })
            .collect();
        crate::order::sort_by_u64_key(&mut by_step, |s| u64::from(s.step));
        c.by_step = by_step;
        c.spec = SpecTotals::of(&spec);
        Mergeable { counters: c, hists }
    }

    /// Statistics read back from their files: the counters and the histograms in [`Metric::ALL`] order.
    pub fn from_parts(counters: Counters, hists: [Histogram<u64>; 4]) -> Result<Mergeable, HistError> {
        if counters.version != COUNTERS_VERSION {
            return Err(HistError::Version {
                found: counters.version,
            });
        }
        Ok(Mergeable { counters, hists })
    }

    /// The exact counts.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Each metric's histogram.
    pub fn histograms(&self) -> impl Iterator<Item = (Metric, &Histogram<u64>)> {
        Metric::ALL.into_iter().zip(self.hists.iter())
    }

    /// Adds `other`'s statistics, its times shifted by `offset_s` (its origin minus this one's, seconds) onto
    /// this run's time line. Both must have been scored against the same SLO.
    pub fn merge(&mut self, other: &Mergeable, offset_s: f64) -> Result<(), HistError> {
        let (a, b) = (&mut self.counters, &other.counters);
        if a.slo != b.slo {
            return Err(HistError::SloMismatch {
                a: format!("{:?}", a.slo),
                b: format!("{:?}", b.slo),
            });
        }
        a.records += b.records;
        a.completed += b.completed;
        a.failed += b.failed;
        a.total_input_tokens += b.total_input_tokens;
        a.total_output_tokens += b.total_output_tokens;
        a.good += b.good;
        a.sessions += b.sessions;
        a.good_sessions += b.good_sessions;
        if let Some(f) = b.first_submit_s.map(|f| f + offset_s) {
            a.first_submit_s = Some(a.first_submit_s.map_or(f, |x| if f < x { f } else { x }));
        }
        if let Some(l) = b.last_end_s.map(|l| l + offset_s) {
            a.last_end_s = Some(a.last_end_s.map_or(l, |x| if l > x { l } else { x }));
        }
        for s in &b.by_step {
            match a.by_step.binary_search_by_key(&s.step, |x| x.step) {
                Ok(i) => {
                    a.by_step[i].requests += s.requests;
                    a.by_step[i].met += s.met;
                }
                Err(i) => a.by_step.insert(i, *s),
            }
        }
        a.cached_achieved.add(b.cached_achieved);
        a.cached_designed.add(b.cached_designed);
        a.cached_step0.add(b.cached_step0);
        a.spec = SpecTotals::add(a.spec, b.spec);
        for (h, o) in self.hists.iter_mut().zip(other.hists.iter()) {
            h.add(o).map_err(|e| HistError::Histogram(format!("{e:?}")))?;
        }
        Ok(())
    }

    /// The summary these statistics give: every count, sum, rate and ratio exact (as [`crate::metrics::summarize`]
    /// computes it from the records), the latency means and percentiles from the histograms (within
    /// [`RELATIVE_BOUND`]). Queue waits and the designed/realized prompt medians need the records: absent here.
    pub fn summary(&self) -> Summary {
        let c = &self.counters;
        let mut s = Summary {
            completed: c.completed,
            failed: c.failed,
            total_input_tokens: c.total_input_tokens,
            total_output_tokens: c.total_output_tokens,
            sessions: c.sessions,
            ..Summary::default()
        };
        if c.records == 0 {
            return s;
        }
        s.duration_s = match (c.first_submit_s, c.last_end_s) {
            (Some(f), Some(l)) => (l - f).max(0.0),
            _ => 0.0,
        };
        let per_s = |x: f64| if s.duration_s > 0.0 { x / s.duration_s } else { 0.0 };
        s.request_throughput_rps = per_s(c.completed as f64);
        s.output_throughput_tok_s = per_s(c.total_output_tokens as f64);
        s.total_token_throughput_tok_s = per_s((c.total_input_tokens + c.total_output_tokens) as f64);
        s.goodput_rps = per_s(c.good as f64);
        s.slo_attainment_ratio = c.good as f64 / c.records as f64;
        s.session_goodput_sps = per_s(c.good_sessions as f64);
        if c.sessions > 0 {
            s.session_attainment_ratio = c.good_sessions as f64 / c.sessions as f64;
        }
        s.attainment_by_step = c
            .by_step
            .iter()
            .map(|x| StepAttainment {
                step: x.step,
                requests: x.requests,
                met: x.met,
                ratio: x.met as f64 / x.requests as f64,
            })
            .collect();
        s.cached_share_achieved = c.cached_achieved.share();
        s.cached_share_designed = c.cached_designed.share();
        s.step0_cached_share = c.cached_step0.share();
        if let Some(t) = &c.spec {
            t.sums().write(&mut s);
        }
        let stats = |h: &Histogram<u64>| {
            let q = |q: f64| h.value_at_quantile(q) as f64 / 1e6;
            (h.mean() / 1e6, q(0.50), q(0.90), q(0.95), q(0.99))
        };
        let [ttft, tpot, itl, e2el] = &self.hists;
        if !ttft.is_empty() {
            (
                s.ttft_mean_ms,
                s.ttft_p50_ms,
                s.ttft_p90_ms,
                s.ttft_p95_ms,
                s.ttft_p99_ms,
            ) = stats(ttft);
        }
        if !tpot.is_empty() {
            (
                s.tpot_mean_ms,
                s.tpot_p50_ms,
                s.tpot_p90_ms,
                s.tpot_p95_ms,
                s.tpot_p99_ms,
            ) = stats(tpot);
        }
        if !e2el.is_empty() {
            (
                s.e2el_mean_ms,
                s.e2el_p50_ms,
                s.e2el_p90_ms,
                s.e2el_p95_ms,
                s.e2el_p99_ms,
            ) = stats(e2el);
        }
        if !itl.is_empty() {
            let (m, p50, p90, p95, p99) = stats(itl);
            (s.itl_mean_ms, s.itl_p50_ms, s.itl_p90_ms, s.itl_p95_ms, s.itl_p99_ms) =
                (Some(m), Some(p50), Some(p90), Some(p95), Some(p99));
        }
        s
    }
}

/// A histogram in HdrHistogram's V2 format, deflate-compressed.
pub fn encode(h: &Histogram<u64>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| format!("encoding a histogram: {e:?}"))?;
    Ok(out)
}

/// A histogram from [`encode`]'s bytes (or any HdrHistogram V2 / V2-deflate encoding).
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, HistError> {
    let mut cursor = bytes;
    Deserializer::new()
        .deserialize(&mut cursor)
        .map_err(|e| HistError::Histogram(format!("not an HdrHistogram V2 encoding: {e:?}")))
}

/// Whether histogram figure `h` lies within the stated bound of exact figure `exact` (milliseconds):
/// `exact − 0.5 ns ≤ h < exact · (1 + 1/1024) + 0.5 ns`, for percentiles; means may also lie below by the same
/// relative amount (each value at its bucket's middle).
pub fn within_bound(exact: f64, h: f64, is_mean: bool) -> bool {
    let slack = exact.abs() * RELATIVE_BOUND + ABSOLUTE_BOUND_MS;
    let low = if is_mean {
        exact - slack
    } else {
        exact - ABSOLUTE_BOUND_MS
    };
    h >= low - 1e-12 && h <= exact + slack + 1e-12
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::summarize;
    use crate::record::{ItlSummary, RECORD_SCHEMA_VERSION, UsageSource};

    fn rec(i: u64, ok: bool) -> RequestRecord {
        // Spread over several orders of magnitude so every bucket size is exercised.
        let x = ((i * 7919) % 1000) as f64 + 1.0;
        RequestRecord {
            schema: RECORD_SCHEMA_VERSION,
            session: i % 37,
            inst: (i / 37) as u32,
            step: (i % 5) as u32,
            steps_asked: 5,
            base_asked: 100,
            ok,
            t_submit: i as f64 * 0.01,
            ttft_s: Some(x.powf(1.7) * 1e-5),
            wall_s: x.powf(1.9) * 1e-4 + 0.01,
            gen_tokens: 1 + i % 300,
            asked_tokens: 300,
            prompt_tokens: Some(1000 + i),
            designed_prompt_tokens: None,
            cached_tokens: Some(i % 900),
            designed_cached_tokens: Some(800),
            sse_frames: 1 + i % 300,
            prompt_chars: 4000,
            queue_s: None,
            itl: (!i.is_multiple_of(300)).then_some(ItlSummary {
                mean_ms: x * 0.37,
                p50_ms: 0.0,
                p99_ms: 0.0,
                max_ms: 0.0,
            }),
            finish_reason: None,
            usage_source: UsageSource::FinalFrame,
            rx_clock: None,
            retries: 0,
            retry_statuses: Vec::new(),
            prompt_block_hashes: Vec::new(),
            failure: None,
            error: None,
            replica: None,
            spec: None,
            kv_transfer_ms: None,
            reasoning_tokens: None,
            ttft_content_s: None,
            parent: None,
        }
    }

    /// Speculative decoding's counts travel in the counters: parts written out, read back and merged give
    /// `spec_acceptance` and `spec_accepted_per_step` exactly as the exact summary of all the records does (failed
    /// records and records without steps counted as it counts them); without speculation the counters file has no
    /// `spec` and the summary neither key.
    #[test]
    fn speculative_counts_merge_exactly() {
        let slo = Slo {
            ttft_ms: 40.0,
            tpot_ms: 1.0,
            e2e_ms: None,
        };
        let all: Vec<RequestRecord> = (0..3000)
            .map(|i| {
                let mut r = rec(i, i % 17 != 0);
                r.spec = Some(crate::record::SpecCounts {
                    draft_tokens: 3 * (1 + i % 40),
                    accepted_tokens: (i * 7) % (3 * (1 + i % 40) + 1),
                    // Some sources count no steps (a server's totals only).
                    steps: (i % 5 != 0).then_some(1 + i % 40),
                });
                r
            })
            .collect();
        let round_trip = |m: &Mergeable| {
            let counters = serde_json::from_str(&serde_json::to_string(&m.counters).unwrap()).unwrap();
            let hists: Vec<_> = m
                .histograms()
                .map(|(_, h)| decode(&encode(h).unwrap()).unwrap())
                .collect();
            Mergeable::from_parts(counters, hists.try_into().unwrap()).unwrap()
        };
        let mut parts = all.chunks(1100).map(|c| round_trip(&Mergeable::of(c, &slo)));
        let mut merged = parts.next().unwrap();
        for p in parts {
            merged.merge(&p, 0.0).unwrap();
        }
        let exact = summarize(&all, &slo);
        let h = merged.summary();
        assert!(exact.spec_acceptance.is_some() && exact.spec_accepted_per_step.is_some());
        assert_eq!(h.spec_acceptance, exact.spec_acceptance);
        assert_eq!(h.spec_accepted_per_step, exact.spec_accepted_per_step);
        // By hand over the completed records.
        let ok = all.iter().filter(|r| r.ok);
        let (mut d, mut a, mut sa, mut st) = (0u64, 0u64, 0u64, 0u64);
        for r in ok {
            let c = r.spec.unwrap();
            d += c.draft_tokens;
            a += c.accepted_tokens;
            if let Some(n) = c.steps {
                sa += c.accepted_tokens;
                st += n;
            }
        }
        assert_eq!(h.spec_acceptance, Some(a as f64 / d as f64));
        assert_eq!(h.spec_accepted_per_step, Some(sa as f64 / st as f64));
        // Off: nothing written, nothing summarized.
        let plain: Vec<RequestRecord> = (0..50).map(|i| rec(i, true)).collect();
        let m = Mergeable::of(&plain, &slo);
        assert!(!serde_json::to_string(&m.counters).unwrap().contains("spec"));
        let s = round_trip(&m).summary();
        assert_eq!((s.spec_acceptance, s.spec_accepted_per_step), (None, None));
    }

    /// Three parts merged give the whole's counters exactly, the exact summary's counts, rates and ratios exactly,
    /// and every latency figure within the stated bound; the files round-trip.
    #[test]
    fn merged_parts_equal_the_whole() {
        let slo = Slo {
            ttft_ms: 40.0,
            tpot_ms: 1.0,
            e2e_ms: None,
        };
        let all: Vec<RequestRecord> = (0..5000).map(|i| rec(i, i % 23 != 0)).collect();
        let whole = Mergeable::of(&all, &slo);
        let mut parts = all.chunks(1700).map(|c| Mergeable::of(c, &slo));
        let mut merged = parts.next().unwrap();
        for p in parts {
            let (counters, hists) = (
                serde_json::from_str(&serde_json::to_string(&p.counters).unwrap()).unwrap(),
                p.histograms()
                    .map(|(_, h)| decode(&encode(h).unwrap()).unwrap())
                    .collect::<Vec<_>>(),
            );
            let p = Mergeable::from_parts(counters, hists.try_into().unwrap()).unwrap();
            merged.merge(&p, 0.0).unwrap();
        }
        // Sessions here span the chunks, so only the record-level counters are compared for those.
        let (mut a, mut b) = (merged.counters.clone(), whole.counters.clone());
        (a.sessions, a.good_sessions, b.sessions, b.good_sessions) = (0, 0, 0, 0);
        assert_eq!(a, b);
        let exact = summarize(&all, &slo);
        let h = whole.summary();
        assert_eq!(
            (
                h.completed,
                h.failed,
                h.total_input_tokens,
                h.total_output_tokens,
                h.sessions
            ),
            (
                exact.completed,
                exact.failed,
                exact.total_input_tokens,
                exact.total_output_tokens,
                exact.sessions
            )
        );
        assert_eq!(h.duration_s, exact.duration_s);
        assert_eq!(h.goodput_rps, exact.goodput_rps);
        assert_eq!(h.attainment_by_step, exact.attainment_by_step);
        assert_eq!(h.cached_share_achieved, exact.cached_share_achieved);
        assert_eq!(h.session_attainment_ratio, exact.session_attainment_ratio);
        let pairs = [
            (exact.ttft_p50_ms, h.ttft_p50_ms),
            (exact.ttft_p99_ms, h.ttft_p99_ms),
            (exact.tpot_p90_ms, h.tpot_p90_ms),
            (exact.e2el_p95_ms, h.e2el_p95_ms),
            (exact.itl_p50_ms.unwrap(), h.itl_p50_ms.unwrap()),
            (exact.itl_p99_ms.unwrap(), h.itl_p99_ms.unwrap()),
        ];
        for (e, x) in pairs {
            assert!(within_bound(e, x, false), "exact {e} vs histogram {x}");
        }
        for (e, x) in [
            (exact.ttft_mean_ms, h.ttft_mean_ms),
            (exact.itl_mean_ms.unwrap(), h.itl_mean_ms.unwrap()),
        ] {
            assert!(within_bound(e, x, true), "mean {e} vs {x}");
        }
        // The merged histograms are the whole's.
        assert_eq!(merged.summary().ttft_p99_ms, h.ttft_p99_ms);
        // The bound is tight enough to fail: 0.2 % off is outside it.
        assert!(!within_bound(100.0, 100.2, false));
        assert!(!within_bound(100.0, 99.99, false));
    }

    #[test]
    fn different_slos_do_not_merge_and_bad_bytes_are_named() {
        let a = Mergeable::of(&[rec(1, true)], &Slo::default());
        let mut b = Mergeable::of(
            &[rec(2, true)],
            &Slo {
                ttft_ms: 1.0,
                ..Slo::default()
            },
        );
        assert!(matches!(b.merge(&a, 0.0), Err(HistError::SloMismatch { .. })));
        assert!(
            decode(b"not a histogram")
                .unwrap_err()
                .to_string()
                .contains("HdrHistogram")
        );
    }
}
