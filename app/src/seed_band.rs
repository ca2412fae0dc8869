//! The seed band on the explorer's CDFs (issue #17, item 6): the engine scenario simulated with [`BAND_SEEDS`]
//! seeds (its own and the next ones), and at each share p the least and the greatest p-quantile over them, so the
//! run-to-run spread of one scenario shows as a shaded band around its CDF instead of one line. Run in the worker
//! ([`crate::wire::Job::SeedBand`]) after each explorer result.

use serde::{Deserialize, Serialize};
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
}

/// The p-quantile of CDF step points (x ascending, share ≤ x ascending): the first x whose share reaches p.
pub fn quantile(cdf: &[(f64, f64)], p: f64) -> Option<f64> {
    cdf.iter().find(|&&(_, y)| y >= p - 1e-12).map(|&(x, _)| x)
}

/// Least and greatest quantile over the CDFs at each level; empty when one of them has no points.
pub fn envelope(cdfs: &[Vec<(f64, f64)>]) -> Envelope {
    if cdfs.is_empty() || cdfs.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    (1..=BAND_LEVELS)
        .filter_map(|i| {
            let p = i as f64 / (BAND_LEVELS + 1) as f64;
            let xs: Option<Vec<f64>> = cdfs.iter().map(|c| quantile(c, p)).collect();
            let xs = xs?;
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            Some((p, lo, hi))
        })
        .collect()
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
    for i in 0..BAND_SEEDS {
        let mut one = e.clone();
        one.seed = e.seed.wrapping_add(i);
        one.counterfactuals = false;
        let o = crate::compute::compute(&Scenario::Engine(one.clone()))?;
        seeds.push(one.seed);
        ttft.push(o.ttft_cdf);
        tpot.push(o.tpot_cdf);
    }
    Ok(SeedBand {
        seeds,
        ttft: envelope(&ttft),
        tpot: envelope(&tpot),
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
        let o = crate::compute::compute(&Scenario::Engine(third)).expect("computes");
        for &(p, lo, hi) in &b.ttft {
            let x = quantile(&o.ttft_cdf, p).expect("a quantile");
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
        // The seed model has none.
        assert!(seed_band(&shared::presets::default_scenario()).is_err());
    }

    #[test]
    fn quantiles_of_step_points() {
        let cdf = vec![(1.0, 0.25), (2.0, 0.5), (4.0, 1.0)];
        assert_eq!(quantile(&cdf, 0.1), Some(1.0));
        assert_eq!(quantile(&cdf, 0.5), Some(2.0));
        assert_eq!(quantile(&cdf, 0.51), Some(4.0));
        assert!(envelope(&[cdf, Vec::new()]).is_empty());
    }
}
