//! Like with like: a live run laid over its simulation must be compared over the same window of time.
//!
//! A live run that is still going, was stopped early, or was cut at its deadline covers only the start of its
//! scenario: stopped after 45 s of a 1,200 s scenario, its records are the requests of the first 45 s, and laying
//! them over the whole simulated run compares a warming-up server with a steady state (TTFT p50 539 ms live vs
//! ≈ 100 ms simulated, on a target running the very same engine model). [`clip`] makes the simulated records of
//! the same window, recorded as the live run would have recorded them:
//!
//! - requests submitted at or after the window's end were never sent: dropped;
//! - requests still running at the window's end are, for a run that has ended ([`InFlight::Cut`]), cut records
//!   (as a stopped live run writes them: `ok` false, [`FailureKind::Cut`], the TTFT kept if the first token came
//!   inside the window, no ITL); for a run still going ([`InFlight::Drop`]) they have no record yet: dropped;
//! - the rest are unchanged.
//!
//! The window's end is where the live records reach ([`covered_s`]): the latest `t_submit + wall_s` (a cut
//! record's `wall_s` runs to the moment it was cut, so for a stopped run this is the stop).

use crate::metrics::{RecordOutcome, outcome_of};
use crate::record::{FailureKind, RequestRecord};

/// What becomes of a simulated request still running at the window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// The live run has ended (stopped, cut at its deadline, failed): the request is a cut record.
    Cut,
    /// The live run is still going: the request has no record yet.
    Drop,
}

/// The window a live run's records cover: from its origin to the latest `t_submit + wall_s` (seconds). `None`
/// for no records (or none with finite times).
pub fn covered_s(records: &[RequestRecord]) -> Option<f64> {
    records
        .iter()
        .map(|r| r.t_submit + r.wall_s.max(0.0))
        .filter(|t| t.is_finite())
        .reduce(f64::max)
}

/// Whether a finished live run ended before its scenario did: some of its records were cut.
pub fn was_cut(records: &[RequestRecord]) -> bool {
    records.iter().any(|r| outcome_of(r) == RecordOutcome::Cut)
}

/// The simulated `records` of the window `[0, end_s)`, as a live run of that window records them (module docs).
/// In submission order as given.
pub fn clip(records: &[RequestRecord], end_s: f64, in_flight: InFlight) -> Vec<RequestRecord> {
    records
        .iter()
        .filter(|r| r.t_submit < end_s)
        .filter_map(|r| {
            if r.t_submit + r.wall_s <= end_s {
                return Some(r.clone());
            }
            match in_flight {
                InFlight::Drop => None,
                InFlight::Cut => {
                    let mut c = r.clone();
                    c.ok = false;
                    c.failure = Some(FailureKind::Cut);
                    c.error = Some(format!(
                        "cut: still running at the end of the live run's window ({end_s:.3} s)"
                    ));
                    c.wall_s = end_s - r.t_submit;
                    c.ttft_s = r.ttft_s.filter(|t| r.t_submit + t <= end_s);
                    c.itl = None;
                    c.finish_reason = None;
                    Some(c)
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::metrics::{Slo, summarize};

    fn rec(t_submit: f64, ttft_s: f64, wall_s: f64) -> RequestRecord {
        let line = format!(
            r#"{{"schema":1,"session":0,"inst":0,"step":0,"steps_asked":1,"base_asked":100,"ok":true,
                "t_submit":{t_submit},"ttft_s":{ttft_s},"wall_s":{wall_s},"gen_tokens":10,"asked_tokens":10,
                "prompt_tokens":100,"cached_tokens":0,"sse_frames":10,"prompt_chars":400,"finish_reason":"length"}}"#
        );
        serde_json::from_str(&line).expect("a record")
    }

    #[test]
    fn drops_unsent_and_cuts_or_drops_the_running() {
        let recs = vec![
            rec(0.0, 0.1, 1.0), // done inside the window
            rec(4.0, 0.5, 3.0), // first token at 4.5, running at 5
            rec(4.8, 0.5, 1.0), // running at 5, first token after it
            rec(5.0, 0.1, 0.2), // submitted at the end: never sent
            rec(9.0, 0.1, 0.2), // after the window
        ];
        let cut = clip(&recs, 5.0, InFlight::Cut);
        assert_eq!(cut.len(), 3);
        assert!(cut[0].ok && cut[0] == recs[0]);
        assert_eq!(outcome_of(&cut[1]), RecordOutcome::Cut);
        assert_eq!(cut[1].ttft_s, Some(0.5), "its first token came inside the window");
        assert!((cut[1].wall_s - 1.0).abs() < 1e-12, "cut at the window's end");
        assert_eq!(cut[2].ttft_s, None, "its first token would have come after the window");
        let dropped = clip(&recs, 5.0, InFlight::Drop);
        assert_eq!(dropped, vec![recs[0].clone()]);
        // Scored as a live run stopped at 5 s is: one completed, two not (the summary's `failed` counts every
        // record that did not complete; the report's checks tell the cut ones apart).
        let s = summarize(&cut, &Slo::default());
        assert_eq!((s.completed, s.failed), (1, 2));
        assert_eq!(crate::metrics::Checks::of(&cut).cut, 2);
        assert!(was_cut(&cut) && !was_cut(&recs));
    }

    #[test]
    fn covered_is_the_latest_end() {
        let recs = vec![rec(0.0, 0.1, 1.0), rec(2.0, 0.1, 0.5), rec(1.0, 0.1, 3.5)];
        assert_eq!(covered_s(&recs), Some(4.5));
        assert_eq!(covered_s(&[]), None);
        // A window past every record keeps them all.
        assert_eq!(clip(&recs, 100.0, InFlight::Cut), recs);
    }
}
