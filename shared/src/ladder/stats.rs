//! Exact statistics of the prompt-length distribution a [`Ladder`] produces.
//!
//! # Model
//! Slot `i` has rung `(b_i, n_i)`. Its step `k` (`0 ≤ k < n_i`) sends a prompt of
//! `prompt(i, k) = b_i + T + k·G` tokens, where `T` is the constant task suffix and `G` the growth per step (the
//! reply plus the tool output appended after it; [`Shape`]). Step `k ≥ 1` can be served from the prefix cache up
//! to the previous prompt plus its reply: `cached(i, k) = prompt(i, k−1) + R` (R = reply tokens); step 0 is fully
//! uncached (`cached(i, 0) = 0`).
//!
//! # Weightings ([`Weighting`])
//! - `respawn`: every slot restarts when it finishes, so over a long run every slot delivers requests at about the
//!   same rate and each request of slot `i` weighs `1/n_i` (each slot weighs 1 in total). This is what the seed's
//!   `--respawn` replays, and what its `LADDER_PROD` was solved for.
//! - `single`: each slot runs once; each request weighs 1, so deep sessions dominate.
//!
//! # Definitions
//! - **Percentiles** (`median` = q 0.5, `p90` = q 0.9) are *nearest-rank on the weighted distribution*: the
//!   smallest prompt length `v` whose cumulative weight share `W(≤ v) / W` is ≥ q. With equal weights this is the
//!   textbook nearest rank, index `ceil(q·n) − 1` of the sorted list (the seed's definition), and it is always a
//!   prompt length that actually occurs.
//! - **Margins** ([`Margins`]): for each percentile value `v`, the cumulative share strictly below it
//!   (`W(< v) / W`) and at or below it (`W(≤ v) / W`). The percentile is `v` exactly while q lies in
//!   `(share_below, share_at_or_below]`: the distances from q to either end say how fragile a fit is. The
//!   neighbouring prompt lengths (`prev_value`, `next_value`) say where the percentile jumps when it moves.
//! - **Cached share by tokens**: `Σ w·cached / Σ w·prompt` over all requests.
//! - **Cached share by requests**: the weighted share of non-first steps, `Σ w·[k ≥ 1] / Σ w`.
//! - **Requests**: requests in one pass over every slot, `Σ n_i`.
//!
//! # Exactness
//! Weights are integers: 1 under `single`, `L / n_i` under `respawn` where `L = lcm(n_i)`, so cumulative shares
//! are compared to q in exact integer arithmetic and ties (e.g. exactly half the weight at or below a value)
//! resolve as the definition says. Only if `L` exceeds 2^48 (many large, coprime step counts) are the weights
//! rounded to `round(2^40 / n_i)`, a relative error below 1e-12; [`LadderStats::exact`] says which was used.
//! Percentiles are found by bisection on the cumulative weight function, which is O(slots) to evaluate, so the
//! cost does not depend on the number of steps.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::rungs::{Ladder, LadderError, MAX_BASE_TOKENS};

/// Per-step token accounting of a replayed session (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// `G`: tokens a step adds to the next prompt (reply + tool output). The seed measured 2,703.
    pub growth_tokens: u64,
    /// `R`: reply tokens per step (part of `G`); cached along with the previous prompt.
    pub reply_tokens: u64,
    /// `T`: constant task suffix after the base context, tokens.
    #[serde(default)]
    pub task_tokens: u64,
}

impl Shape {
    pub const fn new(growth_tokens: u64, reply_tokens: u64, task_tokens: u64) -> Self {
        Self {
            growth_tokens,
            reply_tokens,
            task_tokens,
        }
    }

    /// The seed's production shape: G = 2,703, reply 700, no task suffix.
    pub const PROD: Shape = Shape::new(2703, 700, 0);

    pub fn validate(&self) -> Result<(), StatsError> {
        if self.growth_tokens > MAX_BASE_TOKENS {
            return Err(StatsError::TooLarge {
                field: "growth_tokens",
                value: self.growth_tokens,
            });
        }
        if self.task_tokens > MAX_BASE_TOKENS {
            return Err(StatsError::TooLarge {
                field: "task_tokens",
                value: self.task_tokens,
            });
        }
        if self.reply_tokens > self.growth_tokens {
            return Err(StatsError::ReplyExceedsGrowth {
                reply: self.reply_tokens,
                growth: self.growth_tokens,
            });
        }
        Ok(())
    }

    /// Tool-output tokens per step, `G − R`: the part of each later step that is never cached.
    pub const fn tool_tokens(&self) -> u64 {
        self.growth_tokens.saturating_sub(self.reply_tokens)
    }
}

/// How the requests of different slots are weighted (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// Slots restart on completion: each request of slot i weighs 1/n_i.
    #[default]
    Respawn,
    /// Each slot runs once: each request weighs 1.
    Single,
}

impl fmt::Display for Weighting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Respawn => "respawn",
            Self::Single => "single",
        })
    }
}

impl FromStr for Weighting {
    type Err = StatsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "respawn" => Ok(Self::Respawn),
            "single" => Ok(Self::Single),
            other => Err(StatsError::Weighting(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    #[error(transparent)]
    Ladder(#[from] LadderError),
    #[error(
        "reply_tokens must be ≤ growth_tokens (the growth is reply + tool output) (got reply {reply}, growth {growth})"
    )]
    ReplyExceedsGrowth { reply: u64, growth: u64 },
    #[error("{field} must be ≤ 10000000 (got {value})")]
    TooLarge { field: &'static str, value: u64 },
    #[error("weighting must be `respawn` or `single` (got `{0}`)")]
    Weighting(String),
}

/// Where a percentile sits in the weighted distribution (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Margins {
    /// The percentile's prompt length, tokens.
    pub value: u64,
    /// Cumulative weight share strictly below `value`.
    pub share_below: f64,
    /// Cumulative weight share at or below `value`.
    pub share_at_or_below: f64,
    /// The next smaller prompt length that occurs, if any.
    pub prev_value: Option<u64>,
    /// The next larger prompt length that occurs, if any.
    pub next_value: Option<u64>,
}

impl Margins {
    /// How far q may move before the percentile changes: `min(q − share_below, share_at_or_below − q)`.
    pub fn slack(&self, q: f64) -> f64 {
        (q - self.share_below).min(self.share_at_or_below - q)
    }
}

/// Statistics of a ladder's prompt distribution under one weighting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LadderStats {
    pub weighting: Weighting,
    /// Nearest-rank weighted median prompt length, tokens.
    pub median: u64,
    /// Nearest-rank weighted 90th-percentile prompt length, tokens.
    pub p90: u64,
    pub median_margins: Margins,
    pub p90_margins: Margins,
    /// Weighted share of prompt tokens that are cacheable (previous prompt + reply).
    pub cached_share_tokens: f64,
    /// Weighted share of requests that are not a session's first step.
    pub cached_share_requests: f64,
    /// Requests in one pass over every slot (Σ steps).
    pub requests: u64,
    pub slots: usize,
    /// Weighted mean prompt length, tokens.
    pub mean_prompt_tokens: f64,
    pub min_prompt_tokens: u64,
    pub max_prompt_tokens: u64,
    /// Whether the weights were exact integers (see the module docs); false only for pathological ladders.
    pub exact: bool,
}

/// The ladder and shape in the form the evaluation uses: one entry per slot.
struct Slots {
    /// (first prompt = b + T, steps, integer weight per request)
    slots: Vec<(u64, u64, u128)>,
    growth: u64,
    total_weight: u128,
    exact: bool,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Largest lcm for which respawn weights stay exact integers.
const EXACT_LCM_LIMIT: u128 = 1 << 48;

impl Slots {
    fn new(ladder: &Ladder, shape: &Shape, weighting: Weighting) -> Result<Self, StatsError> {
        ladder.validate()?;
        shape.validate()?;
        let (weights, exact): (Vec<u128>, bool) = match weighting {
            Weighting::Single => (vec![1; ladder.rungs.len()], true),
            Weighting::Respawn => {
                let mut l: u128 = 1;
                let mut fits = true;
                for r in &ladder.rungs {
                    let n = u128::from(r.steps);
                    l = l / gcd(l, n) * n;
                    if l > EXACT_LCM_LIMIT {
                        fits = false;
                        break;
                    }
                }
                if fits {
                    (ladder.rungs.iter().map(|r| l / u128::from(r.steps)).collect(), true)
                } else {
                    let scale = (1u128 << 40) as f64;
                    (
                        ladder
                            .rungs
                            .iter()
                            .map(|r| (scale / f64::from(r.steps)).round() as u128)
                            .collect(),
                        false,
                    )
                }
            }
        };
        let slots: Vec<(u64, u64, u128)> = ladder
            .rungs
            .iter()
            .zip(weights)
            .map(|(r, w)| (r.base_tokens + shape.task_tokens, u64::from(r.steps), w))
            .collect();
        let total_weight = slots.iter().map(|&(_, n, w)| w * u128::from(n)).sum();
        Ok(Self {
            slots,
            growth: shape.growth_tokens,
            total_weight,
            exact,
        })
    }

    /// Steps of a slot with prompt ≤ x.
    fn count_le(&self, first: u64, n: u64, x: u64) -> u64 {
        if x < first {
            0
        } else {
            (x - first).checked_div(self.growth).map_or(n, |k| (k + 1).min(n))
        }
    }

    /// Cumulative weight of prompts ≤ x.
    fn weight_le(&self, x: u64) -> u128 {
        self.slots
            .iter()
            .map(|&(first, n, w)| w * u128::from(self.count_le(first, n, x)))
            .sum()
    }

    fn last(&self, first: u64, n: u64) -> u64 {
        first + (n - 1) * self.growth
    }

    fn min_prompt(&self) -> u64 {
        self.slots.iter().map(|&(first, _, _)| first).min().unwrap_or(0)
    }

    fn max_prompt(&self) -> u64 {
        self.slots
            .iter()
            .map(|&(first, n, _)| self.last(first, n))
            .max()
            .unwrap_or(0)
    }

    /// Smallest prompt length v with `W(≤ v) · den ≥ num · W` (the nearest-rank rule of `metrics`).
    fn quantile(&self, num: u128, den: u128) -> u64 {
        crate::metrics::weighted_nearest_rank(self.min_prompt(), self.max_prompt(), self.total_weight, num, den, |v| {
            self.weight_le(v)
        })
    }

    fn prev_value(&self, v: u64) -> Option<u64> {
        let x = v.checked_sub(1)?;
        self.slots
            .iter()
            .filter(|&&(first, _, _)| first <= x)
            .map(|&(first, n, _)| first + (self.count_le(first, n, x) - 1) * self.growth)
            .max()
    }

    fn next_value(&self, v: u64) -> Option<u64> {
        self.slots
            .iter()
            .filter_map(|&(first, n, _)| {
                if first > v {
                    Some(first)
                } else {
                    let k = (v - first).checked_div(self.growth)? + 1;
                    (k < n).then(|| first + k * self.growth)
                }
            })
            .min()
    }

    fn margins(&self, v: u64) -> Margins {
        let w = self.total_weight as f64;
        Margins {
            value: v,
            share_below: v.checked_sub(1).map_or(0.0, |x| self.weight_le(x) as f64 / w),
            share_at_or_below: self.weight_le(v) as f64 / w,
            prev_value: self.prev_value(v),
            next_value: self.next_value(v),
        }
    }
}

/// Exact statistics of `ladder`'s prompt distribution (see the module docs for every definition).
pub fn stats(ladder: &Ladder, shape: &Shape, weighting: Weighting) -> Result<LadderStats, StatsError> {
    let s = Slots::new(ladder, shape, weighting)?;
    let (g, r) = (u128::from(shape.growth_tokens), u128::from(shape.reply_tokens));
    let (mut prompt_sum, mut cached_sum, mut later_weight) = (0u128, 0u128, 0u128);
    for &(first, n, w) in &s.slots {
        let (first, n) = (u128::from(first), u128::from(n));
        // Σ_{k<n} (first + kG) and Σ_{1≤k<n} (first + (k−1)G + R).
        prompt_sum += w * (n * first + g * n * (n - 1) / 2);
        cached_sum += w * ((n - 1) * (first + r) + g * (n - 1) * n.saturating_sub(2) / 2);
        later_weight += w * (n - 1);
    }
    let median = s.quantile(1, 2);
    let p90 = s.quantile(9, 10);
    let total = s.total_weight as f64;
    Ok(LadderStats {
        weighting,
        median,
        p90,
        median_margins: s.margins(median),
        p90_margins: s.margins(p90),
        cached_share_tokens: if prompt_sum == 0 {
            0.0
        } else {
            cached_sum as f64 / prompt_sum as f64
        },
        cached_share_requests: later_weight as f64 / total,
        requests: ladder.requests_per_pass(),
        slots: ladder.slots(),
        mean_prompt_tokens: prompt_sum as f64 / total,
        min_prompt_tokens: s.min_prompt(),
        max_prompt_tokens: s.max_prompt(),
        exact: s.exact,
    })
}

/// The weighted nearest-rank percentile `num/den` (e.g. `(99, 100)` for p99) of the ladder's prompt lengths.
pub fn percentile(ladder: &Ladder, shape: &Shape, weighting: Weighting, num: u32, den: u32) -> Result<u64, StatsError> {
    let s = Slots::new(ladder, shape, weighting)?;
    let den = u128::from(den.max(1));
    Ok(s.quantile(u128::from(num).min(den), den))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ladder::{LADDER_PROD, Rung};

    fn prod() -> Ladder {
        LADDER_PROD.parse().expect("prod ladder")
    }

    /// Brute force: enumerate every request, sort, walk the cumulative weights in f64 rationals.
    fn brute(ladder: &Ladder, shape: &Shape, weighting: Weighting, q: f64) -> u64 {
        let mut v: Vec<(u64, f64)> = Vec::new();
        for r in &ladder.rungs {
            let w = match weighting {
                Weighting::Respawn => 1.0 / f64::from(r.steps),
                Weighting::Single => 1.0,
            };
            for k in 0..u64::from(r.steps) {
                v.push((r.base_tokens + shape.task_tokens + k * shape.growth_tokens, w));
            }
        }
        v.sort_by_key(|p| p.0);
        let total: f64 = v.iter().map(|p| p.1).sum();
        let mut cum = 0.0;
        for (i, &(x, w)) in v.iter().enumerate() {
            cum += w;
            let last_of_value = v.get(i + 1).is_none_or(|n| n.0 != x);
            if last_of_value && cum / total >= q - 1e-12 {
                return x;
            }
        }
        v.last().map_or(0, |p| p.0)
    }

    #[test]
    fn prod_ladder_respawn_matches_the_seed() {
        let s = stats(&prod(), &Shape::PROD, Weighting::Respawn).expect("stats");
        assert_eq!(s.median, 26_015);
        assert_eq!(s.p90, 64_560);
        assert_eq!(format!("{:.2}", s.cached_share_tokens * 100.0), "92.80");
        assert_eq!(format!("{:.2}", s.cached_share_requests * 100.0), "93.28");
        assert_eq!(s.requests, 192);
        assert!(s.exact);
        // The median and p90 really lie inside their margins.
        assert!(s.median_margins.share_below < 0.5 && 0.5 <= s.median_margins.share_at_or_below);
        assert!(s.p90_margins.share_below < 0.9 && 0.9 <= s.p90_margins.share_at_or_below);
        assert!(s.median_margins.prev_value.is_some_and(|p| p < 26_015));
        assert!(s.p90_margins.next_value.is_some_and(|n| n > 64_560));
    }

    #[test]
    fn prod_ladder_single_matches_the_seed() {
        let s = stats(&prod(), &Shape::PROD, Weighting::Single).expect("stats");
        assert_eq!(s.median, 36_030);
        assert_eq!(s.p90, 69_154);
        assert_eq!(s.requests, 192);
        // Single pass: 182 of 192 requests are later steps.
        assert!((s.cached_share_requests - 182.0 / 192.0).abs() < 1e-12);
    }

    #[test]
    fn agrees_with_brute_force_on_many_ladders() {
        let mut seed = 12345u64;
        let mut next = |m: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..300 {
            let n = 1 + next(12) as usize;
            let rungs = (0..n)
                .map(|_| Rung::new(1 + next(20) * 500, 1 + next(30) as u32))
                .collect();
            let ladder = Ladder::new(rungs).expect("valid");
            let g = next(4000);
            let shape = Shape::new(g, g / 3, next(3) * 100);
            for w in [Weighting::Respawn, Weighting::Single] {
                let s = stats(&ladder, &shape, w).expect("stats");
                assert_eq!(s.median, brute(&ladder, &shape, w, 0.5), "{ladder} {shape:?} {w}");
                assert_eq!(s.p90, brute(&ladder, &shape, w, 0.9), "{ladder} {shape:?} {w}");
                assert!(s.median_margins.share_below < 0.5 && 0.5 <= s.median_margins.share_at_or_below + 1e-12);
            }
        }
    }

    #[test]
    fn exact_ties_resolve_by_the_definition() {
        // Two equal-weight slots: exactly half the weight is at or below the first value, so the median is it.
        let l: Ladder = "1000:1,2000:1".parse().expect("ladder");
        let s = stats(&l, &Shape::new(0, 0, 0), Weighting::Single).expect("stats");
        assert_eq!(s.median, 1000);
        assert_eq!(s.median_margins.share_at_or_below, 0.5);
        assert_eq!(s.median_margins.next_value, Some(2000));
        assert_eq!(s.p90, 2000);
        // Respawn with steps 3 and 6: weights 1/3 and 1/6; exactly 0.5 at 1000 + 2G... checked in integers.
        let l: Ladder = "1000:3,1000:6".parse().expect("ladder");
        let s = stats(&l, &Shape::new(100, 10, 0), Weighting::Respawn).expect("stats");
        // shares at 1000,1100,1200: (1/3+1/6)/2 = 0.25, 0.5 → median 1100 exactly on the tie.
        assert_eq!(s.median, 1100);
        assert_eq!(s.median_margins.share_at_or_below, 0.5);
    }

    #[test]
    fn cached_share_formula_by_hand() {
        // One slot 1000:3, G 100, R 40: prompts 1000, 1100, 1200; cached 0, 1040, 1140.
        let l: Ladder = "1000:3".parse().expect("ladder");
        let s = stats(&l, &Shape::new(100, 40, 0), Weighting::Respawn).expect("stats");
        assert!((s.cached_share_tokens - 2180.0 / 3300.0).abs() < 1e-12);
        assert!((s.cached_share_requests - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.mean_prompt_tokens, 1100.0);
        // The task suffix shifts every prompt and is cached too.
        let s = stats(&l, &Shape::new(100, 40, 50), Weighting::Respawn).expect("stats");
        assert_eq!(s.median, 1150);
        assert!((s.cached_share_tokens - 2280.0 / 3450.0).abs() < 1e-12);
    }

    #[test]
    fn bad_shapes_are_rejected() {
        let e = stats(&prod(), &Shape::new(100, 700, 0), Weighting::Respawn).expect_err("reply > growth");
        assert!(e.to_string().contains("reply_tokens must be ≤ growth_tokens"));
        let e = "both".parse::<Weighting>().expect_err("bad weighting");
        assert_eq!(e.to_string(), "weighting must be `respawn` or `single` (got `both`)");
        assert_eq!(percentile(&prod(), &Shape::PROD, Weighting::Respawn, 1, 2), Ok(26_015));
    }
}
