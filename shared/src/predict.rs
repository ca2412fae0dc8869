//! Simulated beside live: the table `loadshape predict` prints and the page shows under its live cards, computed
//! here once so both show the same numbers.
//!
//! The simulated side is the scenario run with its seed and the next ones ([`simulate_seeds`]), each scored by
//! [`crate::metrics::summarize`] over the live runs' window ([`window_of`]: a live run that was cut is compared
//! with the simulated requests of its own window, [`crate::window`]); the live side is each live run's summary.
//! [`compare`] lays them side by side, field by field ([`FIELDS`]): the first seed's value, the least, mean and
//! greatest over the seeds, the first live run's value (and the spread over the live runs) and the relative error
//! `simulated / live − 1`.

use serde::{Deserialize, Serialize};

use crate::engine::{self, EngineScenario, SimOptions};
use crate::metrics::{self, Summary};
use crate::record::RequestRecord;
use crate::window;

/// Seeds `predict` simulates unless told otherwise, and the page always.
pub const DEFAULT_SEEDS: u32 = 10;

/// The compared fields, by [`Summary`]'s names.
pub const FIELDS: [&str; 13] = [
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "e2el_p50_ms",
    "e2el_p90_ms",
    "e2el_p99_ms",
    "request_throughput_rps",
    "output_throughput_tok_s",
    "goodput_rps",
    "cached_share_achieved",
];

/// One summary's values of [`FIELDS`], in that order (`None`: absent or not finite, e.g. no cached share reported).
pub type Values = Vec<Option<f64>>;

/// A summary's values of [`FIELDS`].
pub fn values(s: &Summary) -> Values {
    let v = serde_json::to_value(s).unwrap_or_default();
    FIELDS
        .iter()
        .map(|f| v.get(f).and_then(serde_json::Value::as_f64).filter(|x| x.is_finite()))
        .collect()
}

/// The least, mean and greatest of a field over runs (seeds, or live runs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

/// The spread of field `i` over `runs` (`None` when no run has it).
fn spread_of(runs: &[Values], i: usize) -> Option<Spread> {
    let v: Vec<f64> = runs.iter().filter_map(|r| r.get(i).copied().flatten()).collect();
    if v.is_empty() {
        return None;
    }
    Some(Spread {
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// One field of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The [`Summary`] field.
    pub field: String,
    /// The first seed's value.
    pub simulated: Option<f64>,
    /// Over the seeds.
    pub simulated_spread: Option<Spread>,
    /// The first live run's value.
    pub live: Option<f64>,
    /// Over the live runs, when there are two or more.
    pub live_spread: Option<Spread>,
    /// `simulated / live − 1`, when both are known and live is not 0.
    pub error: Option<f64>,
}

/// The table: a row per [`FIELDS`] entry. `simulated` holds one [`Values`] per seed (the first is the scenario's
/// own seed), `live` one per live run (empty: the live columns are empty).
pub fn compare(simulated: &[Values], live: &[Values]) -> Vec<Row> {
    FIELDS
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let sim = simulated.first().and_then(|v| v.get(i).copied().flatten());
            let liv = live.first().and_then(|v| v.get(i).copied().flatten());
            Row {
                field: (*f).to_string(),
                simulated: sim,
                simulated_spread: spread_of(simulated, i),
                live: liv,
                live_spread: if live.len() >= 2 { spread_of(live, i) } else { None },
                error: match (sim, liv) {
                    (Some(s), Some(l)) if l != 0.0 => Some(s / l - 1.0),
                    _ => None,
                },
            }
        })
        .collect()
}

/// The window the simulated side is scored over: the end of the shortest live run that was cut (stopped early or
/// at its deadline: [`window::was_cut`]), seconds; `None` (the whole simulated run) when none was.
pub fn window_of<'a>(live_runs: impl IntoIterator<Item = &'a [RequestRecord]>) -> Option<f64> {
    live_runs
        .into_iter()
        .filter(|r| window::was_cut(r))
        .filter_map(window::covered_s)
        .reduce(f64::min)
}

/// The scenario simulated with its seed and the next `seeds − 1` (without counterfactual runs), each scored over
/// `window` (requests submitted before its end; those still running there cut, as a stopped live run's are):
/// `(seed, summary)` per seed.
pub fn simulate_seeds(sc: &EngineScenario, seeds: u32, window: Option<f64>) -> Result<Vec<(u64, Summary)>, String> {
    seeds_run(sc, seeds, window, false).map(|(runs, _)| runs)
}

/// Each seed's `(seed, summary)` and the scenario's own seed's fleet figures ([`simulate_seeds_with_fleet`]).
pub type SeedsAndFleet = (Vec<(u64, Summary)>, Option<metrics::replicas::FleetFigures>);

/// [`simulate_seeds`], and for a fleet (more than one replica, or prefill/decode disaggregation) the scenario's own
/// seed's fleet figures over the same window ([`metrics::replicas::fleet_figures`] of its records: per replica and
/// the KV transfers), the simulated side a live run of the fleet is laid over; `None` for one engine.
pub fn simulate_seeds_with_fleet(
    sc: &EngineScenario,
    seeds: u32,
    window: Option<f64>,
) -> Result<SeedsAndFleet, String> {
    seeds_run(sc, seeds, window, sc.is_fleet())
}

/// The seeds' summaries, and with `fleet` the first seed's fleet figures (its records kept for them).
fn seeds_run(sc: &EngineScenario, seeds: u32, window: Option<f64>, fleet: bool) -> Result<SeedsAndFleet, String> {
    let mut out = Vec::with_capacity(seeds as usize);
    let mut figures = None;
    for i in 0..seeds {
        let mut s = sc.clone();
        s.counterfactuals = false;
        s.seed = sc.seed.wrapping_add(u64::from(i));
        let options = SimOptions {
            keep_records: window.is_some() || (fleet && i == 0),
            ..SimOptions::SUMMARY
        };
        let mut report = engine::simulate_with(&s, options).map_err(|e| format!("seed {}: {e}", s.seed))?;
        let clipped = window.map(|end| window::clip(&report.records, end, window::InFlight::Cut));
        if let Some(recs) = &clipped {
            report.summary = metrics::summarize(recs, &s.slo);
        }
        if fleet && i == 0 {
            figures = metrics::replicas::fleet_figures(clipped.as_deref().unwrap_or(&report.records));
        }
        out.push((s.seed, report.summary));
    }
    Ok((out, figures))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(ttft: f64) -> Values {
        let mut v = vec![None; FIELDS.len()];
        v[0] = Some(ttft);
        v[9] = Some(2.0);
        v
    }

    #[test]
    fn rows_hold_the_first_seed_the_spread_and_the_error() {
        let rows = compare(&[vals(110.0), vals(90.0), vals(130.0)], &[vals(100.0)]);
        assert_eq!(rows.len(), FIELDS.len());
        let r = &rows[0];
        assert_eq!(r.field, "ttft_p50_ms");
        assert_eq!(r.simulated, Some(110.0));
        assert_eq!(
            r.simulated_spread,
            Some(Spread {
                min: 90.0,
                mean: 110.0,
                max: 130.0
            })
        );
        assert_eq!(r.live, Some(100.0));
        assert_eq!(r.live_spread, None, "one live run has no spread");
        assert!((r.error.unwrap() - 0.1).abs() < 1e-12);
        // A field neither side has: an empty row; one live is 0: no error.
        assert_eq!(rows[1].simulated, None);
        assert_eq!(rows[1].simulated_spread, None);
        assert_eq!(rows[1].error, None);
        let zero = compare(&[vals(1.0)], &[vals(0.0)]);
        assert_eq!(zero[0].error, None);
    }

    #[test]
    fn no_live_run_leaves_the_live_columns_empty_and_two_give_a_spread() {
        let rows = compare(&[vals(1.0)], &[]);
        assert!(rows.iter().all(|r| r.live.is_none() && r.error.is_none()));
        let rows = compare(&[vals(1.0)], &[vals(2.0), vals(4.0)]);
        assert_eq!(rows[0].live, Some(2.0));
        assert_eq!(rows[0].live_spread.map(|s| s.mean), Some(3.0));
    }

    #[test]
    fn values_follow_the_summary() {
        let s = Summary {
            ttft_p50_ms: 12.5,
            goodput_rps: 3.0,
            cached_share_achieved: None,
            ..Summary::default()
        };
        let v = values(&s);
        assert_eq!(v[0], Some(12.5));
        assert_eq!(v[FIELDS.iter().position(|f| *f == "goodput_rps").unwrap()], Some(3.0));
        assert_eq!(v[12], None);
    }

    #[test]
    fn seeds_run_from_the_scenarios_own() {
        let sc = crate::presets::default_engine_scenario();
        let runs = simulate_seeds(&sc, 3, None).expect("simulates");
        let seeds: Vec<u64> = runs.iter().map(|(s, _)| *s).collect();
        assert_eq!(seeds, vec![sc.seed, sc.seed + 1, sc.seed + 2]);
        let whole = engine::simulate_with(
            &EngineScenario {
                counterfactuals: false,
                ..sc.clone()
            },
            SimOptions::SUMMARY,
        )
        .unwrap();
        assert_eq!(runs[0].1, whole.summary);
        // A window keeps the requests submitted before its end.
        let early = simulate_seeds(&sc, 1, Some(5.0)).unwrap();
        assert!(early[0].1.completed + early[0].1.failed < whole.summary.completed + whole.summary.failed);
    }

    #[test]
    fn a_fleet_gets_its_own_seeds_figures_and_one_engine_none() {
        let sc = crate::presets::default_engine_scenario();
        assert_eq!(simulate_seeds_with_fleet(&sc, 1, None).expect("simulates").1, None);
        let mut fleet = sc.clone();
        fleet.fleet = Some(engine::FleetSpec {
            replicas: 2,
            router: engine::Router::RoundRobin,
            load_cap: 1.5,
            profiles: Vec::new(),
        });
        let (runs, figures) = simulate_seeds_with_fleet(&fleet, 2, None).expect("simulates");
        // The summaries are simulate_seeds' own; the figures are the first seed's records'.
        assert_eq!(runs, simulate_seeds(&fleet, 2, None).expect("simulates"));
        let whole = engine::simulate_with(
            &EngineScenario {
                counterfactuals: false,
                ..fleet.clone()
            },
            SimOptions::default(),
        )
        .expect("simulates");
        assert_eq!(figures, metrics::replicas::fleet_figures(&whole.records));
        let f = figures.expect("a fleet's figures");
        assert_eq!(f.replicas.len(), 2);
        assert_eq!(f.kv_transfer, None, "co-located: no transfers");
        // Over a window: the figures of the clipped records.
        let (_, early) = simulate_seeds_with_fleet(&fleet, 1, Some(5.0)).expect("simulates");
        let clipped = window::clip(&whole.records, 5.0, window::InFlight::Cut);
        assert_eq!(early, metrics::replicas::fleet_figures(&clipped));
    }
}
