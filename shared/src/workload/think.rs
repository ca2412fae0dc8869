//! Think time between a session's steps, drawn from a chosen distribution (`workload.think`).
//!
//! Without `think` a session draws `max(0, N(think_s, 0.4·think_s))`, the seed's Gaussian. With it:
//! - `{"dist": "fixed", "value_s": v}`: always `v`;
//! - `{"dist": "normal", "mean_s": m, "sd_s": s}`: `max(0, N(m, s))` (`sd_s` defaults to `0.4·m`, so
//!   `{"dist": "normal", "mean_s": think_s}` is the default draw exactly);
//! - `{"dist": "lognormal", "median_s": m, "sigma": σ}`: `m·exp(N(0, σ))`, heavy-tailed as tool-call gaps are;
//! - `{"dist": "empirical", "gaps_s": [...]}`: one of the listed gaps, uniformly, with replacement.
//!
//! Every draw but the empirical one takes the session's standard normal of that step (one `gauss` of the plan's
//! stream, as the default draw), so changing the think distribution never changes a session's other draws; the
//! empirical pick comes from a stream of its own per session instance.

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;
use crate::pyrand::PyRandom;

/// Largest accepted think time, seconds (as the other time knobs).
const MAX_SECONDS: f64 = super::limits::MAX_SECONDS;
/// Largest accepted `gaps_s` list.
pub const MAX_GAPS: usize = 1_000_000;
/// Largest accepted log-normal σ.
pub const MAX_SIGMA: f64 = 5.0;

/// A think-time distribution, tagged on `"dist"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum ThinkDist {
    /// Always `value_s` seconds.
    Fixed { value_s: f64 },
    /// `max(0, N(mean_s, sd_s))`; `sd_s` defaults to `0.4 · mean_s` (the seed's).
    Normal {
        mean_s: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sd_s: Option<f64>,
    },
    /// `median_s · exp(N(0, sigma))`, at most 1e8 s.
    Lognormal { median_s: f64, sigma: f64 },
    /// One of `gaps_s`, uniformly.
    Empirical { gaps_s: Vec<f64> },
}

fn seconds(name: &str, v: f64) -> Result<(), ScenarioError> {
    if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
        Ok(())
    } else {
        Err(ScenarioError::field(
            name,
            format!("must be finite, >= 0 and <= {MAX_SECONDS} (got {v})"),
        ))
    }
}

impl ThinkDist {
    /// Checks the parameters; errors name the field relative to the distribution (`sigma`, `gaps_s[3]`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        match self {
            ThinkDist::Fixed { value_s } => seconds("value_s", *value_s),
            ThinkDist::Normal { mean_s, sd_s } => {
                seconds("mean_s", *mean_s)?;
                match sd_s {
                    Some(sd) => seconds("sd_s", *sd),
                    None => Ok(()),
                }
            }
            ThinkDist::Lognormal { median_s, sigma } => {
                if !(median_s.is_finite() && *median_s > 0.0 && *median_s <= MAX_SECONDS) {
                    return Err(ScenarioError::field(
                        "median_s",
                        format!("must be finite, > 0 and <= {MAX_SECONDS} (got {median_s})"),
                    ));
                }
                if !(sigma.is_finite() && *sigma > 0.0 && *sigma <= MAX_SIGMA) {
                    return Err(ScenarioError::field(
                        "sigma",
                        format!("must be > 0 and <= {MAX_SIGMA} (got {sigma}); for a constant gap use dist fixed"),
                    ));
                }
                Ok(())
            }
            ThinkDist::Empirical { gaps_s } => {
                if gaps_s.is_empty() || gaps_s.len() > MAX_GAPS {
                    return Err(ScenarioError::field(
                        "gaps_s",
                        format!("must hold 1..={MAX_GAPS} gaps (got {})", gaps_s.len()),
                    ));
                }
                for (i, g) in gaps_s.iter().enumerate() {
                    seconds(&format!("gaps_s[{i}]"), *g)?;
                }
                Ok(())
            }
        }
    }

    /// The distribution's mean, seconds (the clamped normal's mean approximated by its parameter): what the size
    /// estimates take as a step's think time.
    pub fn mean_s(&self) -> f64 {
        match self {
            ThinkDist::Fixed { value_s } => *value_s,
            ThinkDist::Normal { mean_s, .. } => *mean_s,
            ThinkDist::Lognormal { median_s, sigma } => (median_s * (sigma * sigma / 2.0).exp()).min(MAX_SECONDS),
            ThinkDist::Empirical { gaps_s } => gaps_s.iter().sum::<f64>() / gaps_s.len().max(1) as f64,
        }
    }

    /// Needs a uniform stream of its own (see the module docs).
    pub(crate) fn needs_pick(&self) -> bool {
        matches!(self, ThinkDist::Empirical { .. })
    }

    /// One think time from the step's standard normal `z` (and, for the empirical list, `pick`).
    pub(crate) fn sample(&self, z: f64, pick: Option<&mut PyRandom>) -> f64 {
        match self {
            ThinkDist::Fixed { value_s } => *value_s,
            ThinkDist::Normal { mean_s, sd_s } => {
                let sd = sd_s.unwrap_or(mean_s * 0.4);
                (mean_s + z * sd).max(0.0)
            }
            ThinkDist::Lognormal { median_s, sigma } => (median_s * (sigma * z).exp()).min(MAX_SECONDS),
            ThinkDist::Empirical { gaps_s } => match pick {
                Some(rng) => gaps_s[rng.randbelow(gaps_s.len() as u64) as usize],
                None => gaps_s[0],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> ThinkDist {
        serde_json::from_str(json).expect(json)
    }

    #[test]
    fn parses_each_dist_and_rejects_unknown_keys() {
        assert_eq!(
            parse(r#"{"dist": "fixed", "value_s": 2.5}"#),
            ThinkDist::Fixed { value_s: 2.5 }
        );
        assert_eq!(
            parse(r#"{"dist": "normal", "mean_s": 6}"#),
            ThinkDist::Normal {
                mean_s: 6.0,
                sd_s: None
            }
        );
        assert_eq!(
            parse(r#"{"dist": "lognormal", "median_s": 3, "sigma": 1.2}"#),
            ThinkDist::Lognormal {
                median_s: 3.0,
                sigma: 1.2
            }
        );
        assert_eq!(
            parse(r#"{"dist": "empirical", "gaps_s": [0.5, 7]}"#),
            ThinkDist::Empirical { gaps_s: vec![0.5, 7.0] }
        );
        assert!(serde_json::from_str::<ThinkDist>(r#"{"dist": "fixed", "value_s": 1, "x": 2}"#).is_err());
        assert!(serde_json::from_str::<ThinkDist>(r#"{"dist": "weibull", "k": 2}"#).is_err());
    }

    #[test]
    fn bad_parameters_name_the_field() {
        for (json, field) in [
            (r#"{"dist": "fixed", "value_s": -1}"#, "value_s"),
            (r#"{"dist": "normal", "mean_s": 1, "sd_s": -0.5}"#, "sd_s"),
            (r#"{"dist": "lognormal", "median_s": 2, "sigma": 0}"#, "sigma"),
            (r#"{"dist": "lognormal", "median_s": 2, "sigma": -1}"#, "sigma"),
            (r#"{"dist": "lognormal", "median_s": 0, "sigma": 1}"#, "median_s"),
            (r#"{"dist": "empirical", "gaps_s": []}"#, "gaps_s"),
            (r#"{"dist": "empirical", "gaps_s": [1, -2]}"#, "gaps_s[1]"),
        ] {
            let e = parse(json).validate().expect_err(json).to_string();
            assert!(e.starts_with(field), "{json}: {e}");
        }
    }

    #[test]
    fn samples_follow_the_formulas() {
        assert_eq!(ThinkDist::Fixed { value_s: 4.0 }.sample(1.7, None), 4.0);
        let n = ThinkDist::Normal {
            mean_s: 6.0,
            sd_s: None,
        };
        assert_eq!(n.sample(1.0, None), 6.0 + 2.4);
        assert_eq!(n.sample(-10.0, None), 0.0);
        let l = ThinkDist::Lognormal {
            median_s: 2.0,
            sigma: 0.5,
        };
        assert_eq!(l.sample(0.0, None), 2.0);
        assert!((l.sample(2.0, None) - 2.0 * 1f64.exp()).abs() < 1e-12);
        assert!((l.mean_s() - 2.0 * 0.125f64.exp()).abs() < 1e-12);
        let e = ThinkDist::Empirical {
            gaps_s: vec![1.0, 2.0, 30.0],
        };
        let mut rng = PyRandom::from_u64(9);
        let mut seen = [0u32; 3];
        for _ in 0..3000 {
            let g = e.sample(0.0, Some(&mut rng));
            seen[[1.0, 2.0, 30.0].iter().position(|&x| x == g).expect("a listed gap")] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
        assert_eq!(e.mean_s(), 11.0);
    }
}
