//! Diagnostics of a seed-model scenario, with their numbers (the engine model's are [`crate::engine::diagnostics`]):
//!
//! - [`SeedClosedLoop`]: the same trace run the other way round (open ↔ closed loop): a closed-loop client sends
//!   one request at a time, so it never queues and its TTFT hides the queueing that agent traffic meets.
//! - [`SeedOverbatched`]: where the seed's decode model `TPOT = base_tpot_ms + batch_tpot_slope_ms · batch` crosses
//!   the TPOT SLO, against the batch `max_batch_slots` admits.
//! - `prefill_queueing`: half the requests wait longer than the TTFT SLO for their first token.

use serde::{Deserialize, Serialize};

use crate::seed_model::{self, SeedScenario, SeedSummary};

/// All diagnostics of one seed-model scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedDiagnostics {
    /// `None` only when the flipped run fails (it cannot for a scenario that evaluated).
    pub closed_loop_illusion: Option<SeedClosedLoop>,
    /// `None` when TPOT does not grow with the batch (`batch_tpot_slope_ms <= 0`).
    pub overbatched: Option<SeedOverbatched>,
    /// `ttft_p50_ms` is above the TTFT SLO: requests queue for the one prefill lane.
    pub prefill_queueing: bool,
}

/// The scenario open loop and closed loop on the same trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedClosedLoop {
    /// Requests arrive on the trace's own schedule.
    pub open: SeedSummary,
    /// One request at a time, each sent when the previous completes.
    pub closed: SeedSummary,
    /// `closed.slo_attainment_ratio − open.slo_attainment_ratio`: how much better the closed-loop benchmark looks.
    pub attainment_gap: f64,
}

/// Where the seed's linear TPOT model crosses the SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedOverbatched {
    pub tpot_slo_ms: f64,
    pub base_tpot_ms: f64,
    pub batch_tpot_slope_ms: f64,
    /// The batch at which modelled TPOT equals the SLO, `(tpot_slo_ms − base_tpot_ms) / batch_tpot_slope_ms`,
    /// at least 0 (0: even an empty batch misses it).
    pub slo_batch_limit: f64,
    pub max_batch_slots: u64,
    /// Modelled TPOT with all `max_batch_slots` decoding, ms.
    pub tpot_at_max_batch_ms: f64,
    /// `max_batch_slots` admits batches past the limit.
    pub overbatched: bool,
}

/// The diagnostics of `scenario`, whose own result is `summary` ([`seed_model::evaluate`]). Runs the seed model
/// once more (the flipped loop).
pub fn diagnose(scenario: &SeedScenario, summary: &SeedSummary) -> SeedDiagnostics {
    let flipped = SeedScenario {
        closed_loop: !scenario.closed_loop,
        ..scenario.clone()
    };
    let closed_loop_illusion = seed_model::evaluate(&flipped).ok().map(|other| {
        let (open, closed) = if scenario.closed_loop {
            (other, summary.clone())
        } else {
            (summary.clone(), other)
        };
        SeedClosedLoop {
            attainment_gap: closed.slo_attainment_ratio - open.slo_attainment_ratio,
            open,
            closed,
        }
    });
    let p = &scenario.profile;
    let tpot_slo_ms = scenario.slo.tpot_ms;
    let overbatched = (p.batch_tpot_slope_ms > 0.0).then(|| {
        let limit = (tpot_slo_ms - p.base_tpot_ms) / p.batch_tpot_slope_ms;
        SeedOverbatched {
            tpot_slo_ms,
            base_tpot_ms: p.base_tpot_ms,
            batch_tpot_slope_ms: p.batch_tpot_slope_ms,
            slo_batch_limit: limit.max(0.0),
            max_batch_slots: p.max_batch_slots,
            tpot_at_max_batch_ms: p.base_tpot_ms + p.batch_tpot_slope_ms * p.max_batch_slots as f64,
            overbatched: (p.max_batch_slots as f64) > limit,
        }
    });
    SeedDiagnostics {
        closed_loop_illusion,
        overbatched,
        prefill_queueing: summary.ttft_p50_ms > scenario.slo.ttft_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;
    use crate::seed_model::{OVERBATCHED_PROFILE, SEED_PROFILES};

    fn run(s: &SeedScenario) -> (SeedSummary, SeedDiagnostics) {
        let summary = seed_model::evaluate(s).expect("evaluates");
        let d = diagnose(s, &summary);
        (summary, d)
    }

    #[test]
    fn the_baseline_queues_and_looks_better_closed_loop() {
        let s = presets::seed_scenario(SEED_PROFILES[0].clone());
        let (summary, d) = run(&s);
        let c = d.closed_loop_illusion.expect("flipped run");
        assert_eq!(c.open, summary);
        let closed = seed_model::evaluate(&SeedScenario {
            closed_loop: true,
            ..s.clone()
        })
        .unwrap();
        assert_eq!(c.closed, closed);
        assert_eq!(
            c.attainment_gap,
            closed.slo_attainment_ratio - summary.slo_attainment_ratio
        );
        assert!(c.closed.ttft_p50_ms < c.open.ttft_p50_ms);
        // TTFT p50 3,915 ms against a 500 ms SLO.
        assert!(d.prefill_queueing);
        // 16 slots: TPOT 17.5 + 0.62 × 16 = 27.42 ms, under the 35 ms SLO, which it crosses at a batch of 29.8.
        let o = d.overbatched.expect("a TPOT slope");
        assert!(!o.overbatched);
        assert_eq!(o.tpot_at_max_batch_ms, 17.5 + 0.62 * 16.0);
        assert_eq!(o.slo_batch_limit, (35.0 - 17.5) / 0.62);
    }

    #[test]
    fn the_closed_loop_run_is_compared_with_its_open_loop_twin() {
        let s = SeedScenario {
            closed_loop: true,
            ..presets::seed_scenario(SEED_PROFILES[0].clone())
        };
        let (summary, d) = run(&s);
        let c = d.closed_loop_illusion.expect("flipped run");
        assert_eq!(c.closed, summary);
        assert_eq!(
            c.open,
            seed_model::evaluate(&SeedScenario {
                closed_loop: false,
                ..s
            })
            .unwrap()
        );
    }

    #[test]
    fn forty_eight_slots_are_overbatched_and_a_flat_tpot_never_is() {
        let s = presets::seed_scenario(OVERBATCHED_PROFILE.clone());
        let o = run(&s).1.overbatched.expect("a TPOT slope");
        assert!(o.overbatched);
        assert_eq!(o.max_batch_slots, 48);
        let mut flat = s.clone();
        flat.profile.batch_tpot_slope_ms = 0.0;
        assert_eq!(run(&flat).1.overbatched, None);
        // An SLO below the empty batch's TPOT: the limit is 0, and any slot is too many.
        let mut tight = s;
        tight.slo.tpot_ms = 1.0;
        let o = run(&tight).1.overbatched.expect("a TPOT slope");
        assert_eq!(o.slo_batch_limit, 0.0);
        assert!(o.overbatched);
        // A loose TTFT SLO: no queueing diagnostic.
        let mut loose = presets::seed_scenario(SEED_PROFILES[0].clone());
        loose.slo.ttft_ms = 1e9;
        assert!(!run(&loose).1.prefill_queueing);
    }
}
