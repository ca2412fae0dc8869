//! The seed band on the explorer's CDFs (issue #17, item 6): the engine scenario simulated with [`BAND_SEEDS`]
//! seeds (its own and the next ones), and at each share p the least and the greatest p-quantile over them
//! ([`shared::metrics::quantile_envelope`]), so the run-to-run spread of one scenario shows as a shaded band around
//! its CDF instead of one line. Run in the worker ([`crate::worker::wire::Job::SeedBand`]) after each explorer result.

use serde::{Deserialize, Serialize};
use shared::metrics::quantile_envelope;
use shared::scenario::Scenario;

/// Seeds simulated for the band.
pub const BAND_SEEDS: u64 = 5;
/// Shares at which the band is taken: p = 1/(N+1) … N/(N+1).
pub const BAND_LEVELS: usize = 99;
/// Above this many requests (or session steps) the band is not computed (5 runs of the whole scenario).
pub const MAX_BAND_RECORDS: f64 = 50_000.0;

/// Per share p: (p, least p-quantile, greatest p-quantile), ms.
pub type Envelope = Vec<(f64, f64, f64)>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedBand {
    pub seeds: Vec<u64>,
    pub ttft: Envelope,
    pub tpot: Envelope,
    /// Per summary metric: (name, least, greatest) over the seeds (Compare greys a change inside it).
    #[serde(default)]
    pub metrics: Vec<(String, f64, f64)>,
}

impl SeedBand {
    /// Whether `v` lies within the seeds' range of `name` (`None`: the band has no such metric).
    pub fn holds(&self, name: &str, v: f64) -> Option<bool> {
        self.metrics
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, lo, hi)| lo <= v && v <= hi)
    }
}

/// The band as a closed polygon for the chart: the least quantiles upwards, then the greatest downwards.
pub fn polygon(e: &Envelope) -> Vec<(f64, f64)> {
    e.iter()
        .map(|&(p, lo, _)| (lo, p))
        .chain(e.iter().rev().map(|&(p, _, hi)| (hi, p)))
        .collect()
}

/// Simulates the engine scenario with its seed and the next [`BAND_SEEDS`] − 1 (without counterfactual runs).
pub fn seed_band(sc: &Scenario) -> Result<SeedBand, String> {
    let Scenario::Engine(e) = sc else {
        return Err("the seed model has no seed band".into());
    };
    let mut seeds = Vec::new();
    let (mut ttft, mut tpot) = (Vec::new(), Vec::new());
    let mut metrics: Vec<(String, f64, f64)> = Vec::new();
    for i in 0..BAND_SEEDS {
        let mut one = e.clone();
        one.seed = e.seed.wrapping_add(i);
        one.counterfactuals = false;
        let o = crate::model::compute::compute(&Scenario::Engine(one.clone()))?;
        seeds.push(one.seed);
        for (name, v) in &o.metrics {
            match metrics.iter_mut().find(|(n, _, _)| n == name) {
                Some(m) => {
                    m.1 = m.1.min(*v);
                    m.2 = m.2.max(*v);
                }
                None if i == 0 => metrics.push((name.clone(), *v, *v)),
                None => {}
            }
        }
        ttft.push(o.ttft_cdf);
        tpot.push(o.tpot_cdf);
    }
    Ok(SeedBand {
        seeds,
        ttft: quantile_envelope(&ttft, BAND_LEVELS),
        tpot: quantile_envelope(&tpot, BAND_LEVELS),
        metrics,
    })
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn the_band_holds_every_seeds_quantiles_and_has_width() {
        let mut e = shared::presets::default_engine_scenario();
        e.counterfactuals = false;
        let sc = Scenario::Engine(e.clone());
        let b = seed_band(&sc).expect("a band");
        assert_eq!(b.seeds, vec![42, 43, 44, 45, 46]);
        assert_eq!(b.ttft.len(), BAND_LEVELS);
        assert_eq!(b.tpot.len(), BAND_LEVELS);
        // Each seed's own CDF lies inside the band (the third one, say), and seeds do differ somewhere.
        let mut third = e;
        third.seed = 44;
        let o = crate::model::compute::compute(&Scenario::Engine(third)).expect("computes");
        for &(p, lo, hi) in &b.ttft {
            let x = shared::metrics::cdf_quantile(&o.ttft_cdf, p).expect("a quantile");
            assert!(lo <= x && x <= hi, "p {p}: {lo} ≤ {x} ≤ {hi}");
        }
        assert!(
            b.ttft.iter().any(|&(_, lo, hi)| hi > lo),
            "no width: {:?}",
            &b.ttft[..3]
        );
        let poly = polygon(&b.ttft);
        assert_eq!(poly.len(), 2 * BAND_LEVELS);
        assert_eq!(poly[0].1, poly[poly.len() - 1].1);
        // Each seed's summary metrics lie within the band's ranges, and some range has width.
        for (name, v) in &o.metrics {
            assert_eq!(b.holds(name, *v), Some(true), "{name} {v}");
        }
        assert!(b.metrics.iter().any(|(_, lo, hi)| hi > lo));
        assert_eq!(b.holds("no_such_metric", 1.0), None);
        // The seed model has none.
        assert!(seed_band(&shared::presets::default_scenario()).is_err());
    }
}
