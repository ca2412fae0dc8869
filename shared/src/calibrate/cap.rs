//! The server's `max_num_seqs` (how many sequences it decodes at once) from the records of requests started
//! together: the probe's `cap` phase ([`super::plan_probe`], [`super::CAP_PROBE_REQUESTS`] requests), or a
//! `--from` run. How many decoded at once, and whether the others queued (their first token only after an earlier
//! one ended). See docs/calibration.md, "max_num_seqs".

use serde::{Deserialize, Serialize};

use crate::metrics::median;
use crate::record::{FailureKind, RequestRecord};

/// Each request is counted as decoding over its decode interval `[first token, end]` less this share of it at
/// either end: requests of one round overlap over their middle, while a request that ends and the one admitted in
/// its place (whose first token a loaded client may even time a millisecond before the other's end) do not.
pub const CORE_SHARE: f64 = 0.25;

/// What the records of requests started together say of the server's cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapReading {
    /// Requests started together.
    pub sent: u32,
    /// Requests that got their first token.
    pub started: u32,
    /// Most requests decoding at once (each over the middle of its decode interval, [`CORE_SHARE`]).
    pub decoding_together: u32,
    /// Requests submitted before any of them ended whose first token came only after one had ended (less
    /// [`CORE_SHARE`] of a decode), or that were still waiting for it when the phase ended: they queued.
    pub queued: u32,
    /// Requests that failed without a first token other than by the phase's end (an HTTP error, a refusal).
    pub failed: u32,
}

/// What a [`CapReading`] establishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapFinding {
    /// Fewer decoded together than were sent, and the others queued: the cap.
    Exact(u32),
    /// Every request sent decoded together: the cap is at least that many.
    AtLeast(u32),
    /// Neither (requests failed, or were sent too far apart to overlap): nothing to say.
    Unclear,
}

impl CapReading {
    pub fn finding(&self) -> CapFinding {
        if self.started == 0 {
            CapFinding::Unclear
        } else if self.decoding_together >= self.sent {
            CapFinding::AtLeast(self.sent)
        } else if self.queued > 0 {
            CapFinding::Exact(self.decoding_together)
        } else {
            CapFinding::Unclear
        }
    }
}

/// Reads `records`, the `sent` requests of one phase started together (see [`CapReading`]). Records without a
/// valid decode interval (no first token) count as started not; a record's end is its last byte, or when the
/// phase cut it.
pub fn read_cap(records: &[RequestRecord], sent: u32) -> CapReading {
    // Decode intervals of the requests that got a first token: (submit, first token, end).
    let spans: Vec<(f64, f64, f64)> = records
        .iter()
        .filter_map(|r| {
            let first = r.t_submit + r.ttft_s?;
            let end = r.t_submit + r.wall_s;
            (first.is_finite() && end.is_finite() && end >= first).then_some((r.t_submit, first, end))
        })
        .collect();
    let mut durations: Vec<f64> = spans.iter().map(|&(_, a, b)| b - a).collect();
    let tol = CORE_SHARE * median(&mut durations);
    let peak = peak_overlap(spans.iter().filter_map(|&(_, a, b)| {
        let m = CORE_SHARE * (b - a);
        (b - m > a + m).then_some((a + m, b - m))
    }));
    // The first end among them: a request waiting past it (less the tolerance) waited for a place.
    let first_end = spans.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
    let mut queued = spans
        .iter()
        .filter(|&&(submit, first, _)| submit < first_end - tol && first >= first_end - tol)
        .count();
    let mut failed = 0;
    for r in records.iter().filter(|r| r.ttft_s.is_none()) {
        let cut = r.failure == Some(FailureKind::Cut) || r.error.as_deref().is_some_and(|e| e.starts_with("cut:"));
        if cut && r.t_submit < first_end && r.t_submit + r.wall_s > first_end {
            queued += 1;
        } else if !cut {
            failed += 1;
        }
    }
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    CapReading {
        sent,
        started: n(spans.len()),
        decoding_together: n(peak),
        queued: n(queued),
        failed: n(failed),
    }
}

/// Most intervals `[start, end]` open at one instant; an interval that ends where another starts does not overlap it.
pub fn peak_overlap(intervals: impl Iterator<Item = (f64, f64)>) -> usize {
    let mut ev: Vec<(f64, i32)> = intervals.flat_map(|(a, b)| [(a, 1), (b, -1)]).collect();
    // Ends before starts at the same instant.
    ev.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in ev {
        now += d;
        peak = peak.max(now);
    }
    peak.max(0) as usize
}

/// `max_num_seqs` written when nothing says it: vLLM's default.
pub const DEFAULT_MAX_NUM_SEQS: u32 = 256;

/// `fit.json`'s `max_num_seqs`: the value written to the profile and how it was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapFit {
    pub value: u32,
    /// `flag` (`--max-num-seqs`), `server report` (llama.cpp's slots), `probe` (the `cap` phase, run now or read
    /// back with `--from`) or `default` (none of these: [`DEFAULT_MAX_NUM_SEQS`]).
    pub found_by: String,
    /// The probe saw every request it sent decode together: the cap is at least `probe.sent`, and `value` is the
    /// default (or that many, if more).
    #[serde(default)]
    pub lower_bound: bool,
    /// What the records showed, where they were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<CapReading>,
    /// In words.
    pub note: String,
}

impl CapFit {
    /// Given by a flag or reported by the server.
    pub fn known(value: u32, found_by: &str, said: &str) -> CapFit {
        CapFit {
            value,
            found_by: found_by.into(),
            lower_bound: false,
            probe: None,
            note: format!("max_num_seqs {value}: {said}"),
        }
    }

    /// From a reading of the probe's `cap` phase (`None`: there was none); the default where it establishes
    /// nothing.
    pub fn read(reading: Option<CapReading>) -> CapFit {
        let default = DEFAULT_MAX_NUM_SEQS;
        let finding = reading.map_or(CapFinding::Unclear, |r| r.finding());
        let (value, by, lower_bound, note) = match (finding, reading) {
            (CapFinding::Exact(n), Some(r)) => (
                n,
                "probe",
                false,
                format!(
                    "max_num_seqs {n}: measured, {n} of {} requests started together decoded at once and {} queued \
                     (their first token only after one of those ended)",
                    r.sent, r.queued
                ),
            ),
            (CapFinding::AtLeast(c), _) => {
                let v = default.max(c);
                (
                    v,
                    "probe",
                    true,
                    format!(
                        "max_num_seqs: at least {c} (all {c} requests started together decoded at once); written as \
                         {v} (vLLM's default): give --max-num-seqs where the server admits fewer"
                    ),
                )
            }
            (_, Some(r)) => (
                default,
                "default",
                false,
                format!(
                    "max_num_seqs: not measured ({} of {} requests started together got a first token, {} failed, \
                     at most {} decoded at once, no queue seen); written as {default} (vLLM's default): give \
                     --max-num-seqs where the server admits fewer",
                    r.started, r.sent, r.failed, r.decoding_together
                ),
            ),
            (_, None) => (
                default,
                "default",
                false,
                format!(
                    "max_num_seqs: the server does not report it and no cap phase measured it; written as \
                     {default} (vLLM's default): give --max-num-seqs where the server admits fewer at once"
                ),
            ),
        };
        CapFit {
            value,
            found_by: by.into(),
            lower_bound,
            probe: reading,
            note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request submitted at `submit`, its first token at `first`, its end at `end` (seconds); `None`: no first
    /// token, cut at `end`.
    fn rec(submit: f64, first: Option<f64>, end: f64) -> RequestRecord {
        let mut v = serde_json::json!({
            "schema": crate::record::RECORD_SCHEMA_VERSION, "session": 0, "inst": 0, "step": 0,
            "steps_asked": 1, "base_asked": 16, "ok": first.is_some(), "t_submit": submit,
            "ttft_s": first.map(|f| f - submit), "wall_s": end - submit, "gen_tokens": 32, "asked_tokens": 32,
            "prompt_tokens": 16, "cached_tokens": 0, "sse_frames": 32, "prompt_chars": 80,
        });
        if first.is_none() {
            v["failure"] = "cut".into();
            v["error"] = "cut: the phase ended".into();
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `sent` requests at t ≈ 0 on a server decoding `cap` at once, rounds of `d` seconds: round k's first
    /// tokens `jitter` after round k−1's ends (negative: timed before them, as a loaded client may); rounds that
    /// do not start before `cut` wait without a first token.
    fn rounds(sent: u32, cap: u32, d: f64, jitter: f64, cut: f64) -> Vec<RequestRecord> {
        (0..sent)
            .map(|i| {
                let submit = 0.0001 * f64::from(i);
                let round = f64::from(i / cap);
                let first = 0.02 + round * (d + jitter);
                if first >= cut {
                    rec(submit, None, cut)
                } else {
                    rec(submit, Some(first), (first + d).min(cut))
                }
            })
            .collect()
    }

    /// A queue: 12 of 40 decode at once, the rest queue; with the next round's first tokens timed in the same
    /// millisecond as the ends, or a millisecond before them, still 12 (intervals counted end to end give 24).
    #[test]
    fn a_queue_gives_the_cap_even_when_rounds_touch() {
        for jitter in [0.005, 0.0, -0.001] {
            let recs = rounds(40, 12, 0.5, jitter, 100.0);
            let r = read_cap(&recs, 40);
            assert_eq!(
                (r.started, r.decoding_together, r.queued, r.failed),
                (40, 12, 28, 0),
                "{jitter}: {r:?}"
            );
            assert_eq!(r.finding(), CapFinding::Exact(12));
            let f = CapFit::read(Some(r));
            assert_eq!((f.value, f.found_by.as_str(), f.lower_bound), (12, "probe", false));
        }
        // Counted end to end, the touching rounds overlap: what the cores avoid.
        let mut naive: Vec<(f64, i32)> = rounds(40, 12, 0.5, -0.001, 100.0)
            .iter()
            .filter_map(|r| r.ttft_s.map(|t| (r.t_submit + t, r.t_submit + r.wall_s)))
            .flat_map(|(a, b)| [(a, 1), (b, -1)])
            .collect();
        naive.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        let peak = naive.iter().scan(0, |n, e| {
            *n += e.1;
            Some(*n)
        });
        assert_eq!(peak.max(), Some(24));
    }

    /// The phase ended with rounds still waiting: those count as queued; the cap is what decoded together.
    #[test]
    fn requests_still_waiting_at_the_cut_are_queued() {
        let recs = rounds(40, 5, 0.5, 0.004, 1.3);
        let r = read_cap(&recs, 40);
        assert_eq!((r.started, r.decoding_together, r.queued), (15, 5, 35), "{r:?}");
        assert_eq!(r.finding(), CapFinding::Exact(5));
    }

    /// No queue: all decoded together, a lower bound and the default; a cap of exactly what was sent reads the same.
    #[test]
    fn no_queue_is_a_lower_bound() {
        for cap in [40, 64] {
            let r = read_cap(&rounds(40, cap, 0.5, 0.0, 100.0), 40);
            assert_eq!((r.decoding_together, r.queued), (40, 0), "{r:?}");
            assert_eq!(r.finding(), CapFinding::AtLeast(40));
            let f = CapFit::read(Some(r));
            assert_eq!((f.value, f.lower_bound), (DEFAULT_MAX_NUM_SEQS, true));
            assert!(f.note.contains("at least 40"), "{}", f.note);
        }
    }

    /// Requests that failed, or a client that sent them too far apart to overlap without any waiting: nothing
    /// established, the default (named as such).
    #[test]
    fn failures_or_no_overlap_say_nothing() {
        let mut recs = rounds(10, 64, 0.5, 0.0, 100.0);
        for r in recs.iter_mut().skip(4) {
            r.ttft_s = None;
            r.ok = false;
            r.failure = Some(FailureKind::HttpStatus);
            r.error = Some("HTTP 503".into());
        }
        let r = read_cap(&recs, 10);
        assert_eq!(
            (r.started, r.failed, r.decoding_together, r.queued),
            (4, 6, 4, 0),
            "{r:?}"
        );
        assert_eq!(r.finding(), CapFinding::Unclear);
        let f = CapFit::read(Some(r));
        assert_eq!((f.value, f.found_by.as_str()), (DEFAULT_MAX_NUM_SEQS, "default"));
        // One after another (each submitted as the previous ended): one at a time, yet nobody waited.
        let serial: Vec<RequestRecord> = (0..5)
            .map(|i| {
                let t = f64::from(i) * 0.6;
                rec(t, Some(t + 0.02), t + 0.52)
            })
            .collect();
        let r = read_cap(&serial, 5);
        assert_eq!((r.decoding_together, r.queued), (1, 0), "{r:?}");
        assert_eq!(r.finding(), CapFinding::Unclear);
        assert_eq!(read_cap(&[], 5).finding(), CapFinding::Unclear);
    }
}
