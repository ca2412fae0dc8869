//! The ladder solver: find a [`Ladder`] whose prompt distribution has a target median, p90 and cached share.
//!
//! # Problem
//! Choose `slots` rungs `(b_i, n_i)` with `b_i = min_base + j·base_step`, `min_steps ≤ n_i ≤ max_steps` and every
//! prompt `b_i + T + k·G ≤ max_prompt_tokens`, so that (under the chosen [`Weighting`], definitions in
//! [`super::stats`](mod@super::stats)) the weighted nearest-rank median and p90 are as close as possible to the targets, then the
//! cached share as close as possible to its target, then the margins as wide as possible.
//!
//! # Method
//! 1. **Achievable values.** A percentile is always a prompt length that occurs, i.e. some `b + T + k·G`. The
//!    solver lists the achievable values nearest each target and orders the (median, p90) candidate pairs by
//!    (larger relative error, sum of relative errors).
//! 2. **Exact placement.** For a pair `(v_m, v_p)` the percentiles equal those values exactly iff four inequalities
//!    on cumulative shares hold: `F(v_m − 1) < ½ ≤ F(v_m)` and `F(v_p − 1) < 0.9 ≤ F(v_p)`. Each rung contributes
//!    an O(1)-computable amount to those four shares and to the cached-token sums, so a candidate ladder is scored
//!    in O(1) from running sums — no sorting.
//! 3. **Local search.** Coordinate descent over the slots — each pass replaces one slot by the best option given
//!    the others — with a lexicographic objective: constraint violation, then the cached-share gap, then the
//!    narrowest margin (or margins, capped at 0.5 percentage points, before cached share with
//!    [`Priority::Margins`]). Descents first run with a penalty (gap + λ·violation, λ growing) so they can pass
//!    through infeasible ladders, then strictly. Passes scan a neighbourhood of each slot's option; a full pass
//!    over every option confirms a local optimum. The search starts from three structured ladders, is perturbed
//!    by a fixed-seed generator (two slots reassigned) and re-descended a fixed number of times, and ends with
//!    *pair moves* — one slot takes another step count, a second slot answers — because moving weight across a
//!    percentile in one slot usually needs another slot to compensate. Everything is deterministic.
//! 4. **Verification.** The winner's statistics are recomputed with the exact [`stats`] (integer weights); only a
//!    ladder whose exact percentiles equal the pair counts as a hit.
//!
//! In [`Priority::Exact`] mode the first pair (closest values) that admits a ladder wins. In
//! [`Priority::Margins`] mode the 8 closest pairs within `margin_tolerance` of the targets are solved, and the
//! widest margins win (capped as above; ties: cached-share gap, then error).
//!
//! A cached-share target that no ladder found reaches is reported in [`Solution::notes`], with the best value
//! reached (the best this search found: it is a heuristic, not a proof of optimality).
//!
//! (Under `respawn` each slot pays one full prefill per pass plus the tool output of every later step, which
//! bounds the token share well below 97 % for production's median and p90 and a 128k context.)
//!
//! Cost: `benches/ladder_solve.rs` (`cargo bench -p loadshape-shared --bench ladder_solve`) times it; one pair is
//! tens of milliseconds natively. The grid is thinned evenly to at most 12,000 (base, steps) options per slot.
//! Pair moves score each distinct (option, option) pair of slots once, so they cost (distinct pairs) × moves, not
//! slots² × moves; the single-slot descents still cost O(slots²) a pass, so at most [`MAX_SOLVE_SLOTS`] slots.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::rungs::{Ladder, LadderError, MAX_BASE_TOKENS, MAX_RUNGS, MAX_STEPS, Rung};
use super::stats::{LadderStats, Shape, StatsError, Weighting, stats};

/// Which cached share the target means (see [`super::stats`](mod@super::stats)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachedDefinition {
    /// Share of prompt tokens that are cacheable (previous prompt + reply).
    #[default]
    Tokens,
    /// Share of requests that are not a session's first step.
    Requests,
}

impl fmt::Display for CachedDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tokens => "tokens",
            Self::Requests => "requests",
        })
    }
}

impl FromStr for CachedDefinition {
    type Err = SolveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "tokens" => Ok(Self::Tokens),
            "requests" => Ok(Self::Requests),
            other => Err(SolveError::Invalid(format!(
                "cached definition must be `tokens` or `requests` (got `{other}`)"
            ))),
        }
    }
}

/// What the solver gives up first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Closest median and p90, then cached share, then margins.
    #[default]
    Exact,
    /// Widest margins among median/p90 values within `margin_tolerance`, then cached share, then closeness.
    Margins,
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exact => "exact",
            Self::Margins => "margins",
        })
    }
}

impl FromStr for Priority {
    type Err = SolveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "exact" => Ok(Self::Exact),
            "margins" => Ok(Self::Margins),
            other => Err(SolveError::Invalid(format!(
                "priority must be `exact` or `margins` (got `{other}`)"
            ))),
        }
    }
}

/// Solver inputs. [`SolveOptions::prod`] gives the seed's production problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolveOptions {
    /// Target weighted median prompt length, tokens.
    pub median_tokens: u64,
    /// Target weighted p90 prompt length, tokens.
    pub p90_tokens: u64,
    /// Target cached share, 0..=1.
    pub cached_share: f64,
    #[serde(default)]
    pub cached_definition: CachedDefinition,
    pub shape: Shape,
    #[serde(default)]
    pub weighting: Weighting,
    /// Number of rungs (session slots).
    pub slots: usize,
    /// Bases are `min_base_tokens + j · base_step_tokens`.
    pub base_step_tokens: u64,
    pub min_base_tokens: u64,
    pub min_steps: u32,
    pub max_steps: u32,
    /// No prompt may exceed this (the model's context). `None`: max(131,072, 2 × p90 target).
    #[serde(default)]
    pub max_prompt_tokens: Option<u64>,
    #[serde(default)]
    pub priority: Priority,
    /// With [`Priority::Margins`]: largest relative error of median and p90 that may be traded for margins.
    #[serde(default = "default_margin_tolerance")]
    pub margin_tolerance: f64,
}

fn default_margin_tolerance() -> f64 {
    0.01
}

impl SolveOptions {
    /// The seed's problem: production targets (median 26,032, p90 64,648, 97 % of tokens cached), G = 2,703,
    /// reply 700, 10 slots, bases multiples of 500 from 3,500, 2–40 steps, respawn.
    pub fn prod() -> Self {
        Self {
            median_tokens: 26_032,
            p90_tokens: 64_648,
            cached_share: 0.97,
            cached_definition: CachedDefinition::Tokens,
            shape: Shape::PROD,
            weighting: Weighting::Respawn,
            slots: 10,
            base_step_tokens: 500,
            min_base_tokens: 3_500,
            min_steps: 2,
            max_steps: 40,
            max_prompt_tokens: None,
            priority: Priority::Exact,
            margin_tolerance: default_margin_tolerance(),
        }
    }

    /// The prompt ceiling in effect.
    pub fn max_prompt(&self) -> u64 {
        self.max_prompt_tokens
            .unwrap_or_else(|| (2 * self.p90_tokens).max(131_072))
    }

    pub fn validate(&self) -> Result<(), SolveError> {
        self.shape.validate()?;
        let bad = |m: String| Err(SolveError::Invalid(m));
        if self.median_tokens == 0 {
            return bad("median must be > 0 (got 0)".into());
        }
        if self.p90_tokens < self.median_tokens {
            return bad(format!(
                "p90 must be ≥ median (got p90 {} < median {})",
                self.p90_tokens, self.median_tokens
            ));
        }
        if !(0.0..=1.0).contains(&self.cached_share) {
            return bad(format!("cached share must be within 0..=1 (got {})", self.cached_share));
        }
        if self.slots == 0 || self.slots > MAX_SOLVE_SLOTS {
            return bad(format!(
                "slots must be within 1..={MAX_SOLVE_SLOTS} (got {}): the solver's time grows faster than the slot \
                 count (docs/simulator.md, \"Solver cost\"); a ladder written by hand may have up to {MAX_RUNGS} rungs",
                self.slots
            ));
        }
        if self.base_step_tokens == 0 {
            return bad("base step must be ≥ 1 (got 0)".into());
        }
        if self.min_base_tokens == 0 || self.min_base_tokens > MAX_BASE_TOKENS {
            return bad(format!(
                "min base must be within 1..={MAX_BASE_TOKENS} (got {})",
                self.min_base_tokens
            ));
        }
        if self.min_steps == 0 || self.max_steps < self.min_steps || self.max_steps > MAX_STEPS {
            return bad(format!(
                "steps range must satisfy 1 ≤ min_steps ≤ max_steps ≤ {MAX_STEPS} (got {}..={})",
                self.min_steps, self.max_steps
            ));
        }
        if !(self.margin_tolerance >= 0.0 && self.margin_tolerance.is_finite()) {
            return bad(format!("margin tolerance must be ≥ 0 (got {})", self.margin_tolerance));
        }
        let first = self.min_base_tokens + self.shape.task_tokens;
        let shortest = first + u64::from(self.min_steps - 1) * self.shape.growth_tokens;
        if shortest > self.max_prompt() {
            return bad(format!(
                "no rung fits: the smallest session (base {} + task {} + {} steps) reaches {} tokens, above the \
                 prompt ceiling {}",
                self.min_base_tokens,
                self.shape.task_tokens,
                self.min_steps,
                shortest,
                self.max_prompt()
            ));
        }
        if self.p90_tokens > MAX_BASE_TOKENS {
            return bad(format!("p90 must be ≤ {MAX_BASE_TOKENS} (got {})", self.p90_tokens));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SolveError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Stats(#[from] StatsError),
    #[error(transparent)]
    Ladder(#[from] LadderError),
}

/// The solver's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    pub ladder: Ladder,
    /// Exact statistics of `ladder` (recomputed, not the search's running sums).
    pub stats: LadderStats,
    /// The cached share under the target's definition.
    pub cached_share: f64,
    pub cached_definition: CachedDefinition,
    /// Relative errors `(achieved − target) / target`.
    pub median_error: f64,
    pub p90_error: f64,
    /// Narrowest distance from 0.5 / 0.9 to the ends of the percentile's share interval.
    pub min_margin: f64,
    /// Whether the cached target was reached (within 0.05 percentage points).
    pub cached_reached: bool,
    /// Plain statements about targets out of reach and the best values reached instead.
    pub notes: Vec<String>,
    /// (median, p90) candidate pairs examined.
    pub pairs_tried: usize,
}

/// Most slots [`solve`] accepts. Its descents cost O(slots²) per pass (each slot's rest is re-summed in slot order,
/// which keeps the results exact and reproducible): 512 slots take ≈ 0.7 s natively (≈ 7 s with
/// [`Priority::Margins`]), 4,096 ≈ 28 s (docs/simulator.md, "Solver cost").
pub const MAX_SOLVE_SLOTS: usize = 512;

const EPS: f64 = 1e-9;
/// Cached-share differences below this are ties (so margins decide).
const GAP_QUANTUM: f64 = 1e-4;
/// Margin differences below this are ties in margins mode.
const MARGIN_QUANTUM: f64 = 1e-4;
/// In margins mode, margins wider than this (0.5 percentage points of weight) are all "wide".
const MARGIN_CAP: f64 = 0.005;
/// Most (base, steps) options scanned per slot; a finer grid is thinned evenly.
const MAX_OPTIONS: usize = 12_000;
/// Candidate values examined per target.
const CANDIDATES_PER_TARGET: usize = 6;
/// (median, p90) pairs solved in margins mode.
const MARGIN_PAIRS: usize = 8;
/// Neighbourhood moves reach this many grid bases either way (full passes reach every base).
const NEIGHBOUR_BASES: usize = 24;
/// Most pair-move passes at the end of a pair's search.
const PAIR_PASSES: usize = 8;
/// In a pair move the moving slot changes its step count by at most this many grid steps.
const PAIR_STEPS: usize = 8;
/// In a pair move the answering slot may move this many grid bases either way.
const PAIR_BASES: usize = 8;
/// Perturb-and-descend rounds per pair.
const ROUNDS: usize = 8;

/// One rung's contribution to the running sums.
#[derive(Debug, Clone, Copy, Default)]
struct Contrib {
    /// Weight at or below each of the four points (v_m − 1, v_m, v_p − 1, v_p).
    sh: [f64; 4],
    wt: f64,
    /// Weighted prompt tokens, cached tokens, later-step weight.
    y: f64,
    x: f64,
    xr: f64,
}

impl std::ops::Add for Contrib {
    type Output = Contrib;
    fn add(self, o: Contrib) -> Contrib {
        Contrib {
            sh: [
                self.sh[0] + o.sh[0],
                self.sh[1] + o.sh[1],
                self.sh[2] + o.sh[2],
                self.sh[3] + o.sh[3],
            ],
            wt: self.wt + o.wt,
            y: self.y + o.y,
            x: self.x + o.x,
            xr: self.xr + o.xr,
        }
    }
}

/// Lexicographic score; smaller is better.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct Key([f64; 4]);

/// How a descent scores a ladder.
#[derive(Debug, Clone, Copy)]
enum Score {
    /// Violations first, then the priority's order (the real objective).
    Strict,
    /// Cached-share gap plus `λ ·` violation: lets the search pass through infeasible ladders.
    Penalty(f64),
}

/// The (base, steps) options as a grid: option `bi * steps.len() + ni`, `None` where a prompt would exceed the
/// ceiling.
struct Problem<'a> {
    o: &'a SolveOptions,
    bases: Vec<u64>,
    steps: Vec<u32>,
    opts: Vec<Option<Contrib>>,
    /// Indices of the valid options, in grid order.
    valid: Vec<usize>,
}

impl Problem<'_> {
    fn key(&self, a: &Contrib, score: Score) -> Key {
        self.key_below(a, score, f64::INFINITY)
            .unwrap_or(Key([f64::INFINITY; 4]))
    }

    /// The key of `a`, or `None` early when its violation alone exceeds `viol_bound` (strict scores only;
    /// such a ladder cannot beat a key whose violation is `viol_bound`).
    fn key_below(&self, a: &Contrib, score: Score, viol_bound: f64) -> Option<Key> {
        let inv = 1.0 / a.wt;
        let s = [a.sh[0] * inv, a.sh[1] * inv, a.sh[2] * inv, a.sh[3] * inv];
        let pos = |x: f64| x.max(0.0);
        let viol = pos(s[0] - 0.5 + EPS) + pos(0.5 + EPS - s[1]) + pos(s[2] - 0.9 + EPS) + pos(0.9 + EPS - s[3]);
        if matches!(score, Score::Strict) && viol > viol_bound {
            return None;
        }
        let w = a.wt;
        let margin = (0.5 - s[0]).min(s[1] - 0.5).min(0.9 - s[2]).min(s[3] - 0.9);
        let cached = match self.o.cached_definition {
            CachedDefinition::Tokens => a.x / a.y,
            CachedDefinition::Requests => a.xr / w,
        };
        let gap = (cached - self.o.cached_share).abs();
        let capped = margin.min(MARGIN_CAP);
        Some(match (score, self.o.priority) {
            (Score::Penalty(l), Priority::Exact) => Key([gap + l * viol, -margin, 0.0, 0.0]),
            (Score::Penalty(l), Priority::Margins) => Key([-capped + gap * 0.1 + l * viol, gap, 0.0, 0.0]),
            (Score::Strict, Priority::Exact) => Key([viol, (gap / GAP_QUANTUM).floor(), -margin, gap]),
            (Score::Strict, Priority::Margins) => Key([viol, -(capped / MARGIN_QUANTUM).floor(), gap, -margin]),
        })
    }

    fn contrib(&self, j: usize) -> Contrib {
        self.opts[j].unwrap_or_default()
    }

    fn total(&self, sel: &[usize], skip: Option<usize>) -> Contrib {
        sel.iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .fold(Contrib::default(), |acc, (_, &j)| acc + self.contrib(j))
    }

    /// Options near `j`: the same steps at nearby bases, the same base at every step count, and a small window.
    fn neighbours(&self, j: usize, out: &mut Vec<usize>) {
        out.clear();
        let ns = self.steps.len();
        let (bi, ni) = (j / ns, j % ns);
        for b in bi.saturating_sub(NEIGHBOUR_BASES)..(bi + NEIGHBOUR_BASES + 1).min(self.bases.len()) {
            out.push(b * ns + ni);
        }
        for n in 0..ns {
            out.push(bi * ns + n);
        }
        for b in bi.saturating_sub(3)..(bi + 4).min(self.bases.len()) {
            for n in ni.saturating_sub(3)..(ni + 4).min(ns) {
                out.push(b * ns + n);
            }
        }
        out.retain(|&k| self.opts[k].is_some());
    }

    /// One pass of coordinate descent; `full` scans every option, otherwise only neighbours. Returns whether
    /// anything improved.
    fn sweep(&self, sel: &mut [usize], score: Score, full: bool, best_key: &mut Key, buf: &mut Vec<usize>) -> bool {
        let mut improved = false;
        for i in 0..sel.len() {
            let rest = self.total(sel, Some(i));
            let mut best = sel[i];
            let cands: &[usize] = if full {
                &self.valid
            } else {
                self.neighbours(sel[i], buf);
                buf
            };
            for &j in cands {
                if let Some(c) = self.opts[j]
                    && let Some(k) = self.key_below(&(rest + c), score, best_key.0[0])
                    && k < *best_key
                {
                    *best_key = k;
                    best = j;
                }
            }
            if best != sel[i] {
                sel[i] = best;
                improved = true;
            }
        }
        improved
    }

    /// Coordinate descent until no single-slot change improves the key: neighbourhood passes, then a full pass
    /// to confirm (and resume if the full pass found something).
    fn descend(&self, sel: &mut [usize], score: Score, confirm: bool) -> Key {
        let mut best_key = self.key(&self.total(sel, None), score);
        let mut buf = Vec::new();
        loop {
            while self.sweep(sel, score, false, &mut best_key, &mut buf) {}
            if !confirm || !self.sweep(sel, score, true, &mut best_key, &mut buf) {
                return best_key;
            }
        }
    }

    /// Pair moves under the strict score: slot `i` takes a nearby step count on its base and slot `j` answers
    /// with the best option of its neighbourhood. Moving weight across a percentile in one slot usually needs
    /// another slot to compensate, which single-slot descent cannot do. Applies the best improving pair.
    fn pair_sweep(&self, sel: &mut [usize], best_key: &mut Key, buf: &mut Vec<usize>) -> bool {
        let ns = self.steps.len();
        let mut found: Option<(usize, usize, usize, usize)> = None;
        // Slots holding the same option are interchangeable: a pair of slots whose (option, option) was already
        // tried offers the same moves (its `rest` holds the same rungs), so only the first such pair is scored.
        // This keeps the pass at (distinct pairs) × (moves) instead of slots² × (moves).
        let mut tried = std::collections::HashSet::new();
        for j in 0..sel.len() {
            if sel[..j].contains(&sel[j]) {
                continue;
            }
            // The answering slot: any step count on its base, or its step count on a nearby base.
            buf.clear();
            let (bj, nj) = (sel[j] / ns, sel[j] % ns);
            buf.extend((0..ns).map(|n| bj * ns + n));
            let near = bj.saturating_sub(PAIR_BASES)..(bj + PAIR_BASES + 1).min(self.bases.len());
            buf.extend(near.filter(|&b| b != bj).map(|b| b * ns + nj));
            buf.retain(|&k| self.opts[k].is_some());
            for i in (0..sel.len()).filter(|&i| i != j) {
                if !tried.insert((sel[i], sel[j])) {
                    continue;
                }
                let rest = sel
                    .iter()
                    .enumerate()
                    .filter(|&(k, _)| k != i && k != j)
                    .fold(Contrib::default(), |acc, (_, &o)| acc + self.contrib(o));
                let (row, ni) = (sel[i] / ns * ns, sel[i] % ns);
                let steps = ni.saturating_sub(PAIR_STEPS)..(ni + PAIR_STEPS + 1).min(ns);
                for oi in steps.map(|n| row + n).filter(|&oi| oi != sel[i]) {
                    let Some(ci) = self.opts[oi] else { continue };
                    let ri = rest + ci;
                    for &oj in buf.iter() {
                        if let Some(cj) = self.opts[oj]
                            && let Some(k) = self.key_below(&(ri + cj), Score::Strict, best_key.0[0])
                            && k < *best_key
                        {
                            *best_key = k;
                            found = Some((i, oi, j, oj));
                        }
                    }
                }
            }
        }
        match found {
            Some((i, oi, j, oj)) => {
                sel[i] = oi;
                sel[j] = oj;
                true
            }
            None => false,
        }
    }

    /// Penalty continuation (λ growing, neighbourhood moves only) and then the strict objective (confirmed by
    /// full passes).
    fn optimize(&self, sel: &mut [usize], full: bool) -> Key {
        for l in [0.25, 2.0, 16.0] {
            self.descend(sel, Score::Penalty(l), false);
        }
        self.descend(sel, Score::Strict, full)
    }
}

/// A tiny deterministic generator for perturbations (SplitMix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((u128::from(z) * n as u128) >> 64) as usize
    }
}

fn contrib(o: &SolveOptions, rung: Rung, points: &[u64; 4]) -> Contrib {
    let g = o.shape.growth_tokens;
    let first = rung.base_tokens + o.shape.task_tokens;
    let n = u64::from(rung.steps);
    let w = match o.weighting {
        Weighting::Respawn => 1.0 / n as f64,
        Weighting::Single => 1.0,
    };
    let count = |x: u64| -> f64 {
        if x < first {
            0.0
        } else {
            (x - first).checked_div(g).map_or(n, |k| (k + 1).min(n)) as f64
        }
    };
    let (nf, ff, gf, rf) = (n as f64, first as f64, g as f64, o.shape.reply_tokens as f64);
    Contrib {
        sh: [
            w * count(points[0]),
            w * count(points[1]),
            w * count(points[2]),
            w * count(points[3]),
        ],
        wt: w * nf,
        y: w * (nf * ff + gf * nf * (nf - 1.0) / 2.0),
        x: w * ((nf - 1.0) * (ff + rf) + gf * (nf - 1.0) * (nf - 2.0).max(0.0) / 2.0),
        xr: w * (nf - 1.0),
    }
}

/// The (base, steps) grid, thinned evenly to at most [`MAX_OPTIONS`] entries, always keeping the `must` bases.
fn build_problem<'a>(o: &'a SolveOptions, points: &[u64; 4], must: &[u64]) -> Problem<'a> {
    let max_prompt = o.max_prompt();
    let g = o.shape.growth_tokens;
    let t = o.shape.task_tokens;
    let max_base = max_prompt.saturating_sub(t).min(MAX_BASE_TOKENS);
    let n_bases = if max_base < o.min_base_tokens {
        0
    } else {
        (max_base - o.min_base_tokens) / o.base_step_tokens + 1
    };
    let n_steps = u64::from(o.max_steps - o.min_steps + 1);
    // Thin steps to at most 64 values when the grid is too large, then bases.
    let step_stride = if n_bases.saturating_mul(n_steps) > MAX_OPTIONS as u64 {
        n_steps.div_ceil(64)
    } else {
        1
    };
    let mut steps: Vec<u32> = (o.min_steps..=o.max_steps)
        .step_by(step_stride.max(1) as usize)
        .collect();
    if steps.last() != Some(&o.max_steps) {
        steps.push(o.max_steps);
    }
    let base_stride = n_bases
        .saturating_mul(steps.len() as u64)
        .div_ceil(MAX_OPTIONS as u64)
        .max(1);
    let mut bases: Vec<u64> = (0..n_bases)
        .step_by(base_stride as usize)
        .map(|j| o.min_base_tokens + j * o.base_step_tokens)
        .collect();
    for &b in must {
        if !bases.contains(&b) {
            bases.push(b);
        }
    }
    bases.sort_unstable();
    let mut opts = Vec::with_capacity(bases.len() * steps.len());
    for &b in &bases {
        for &n in &steps {
            let fits = b + t + u64::from(n - 1) * g <= max_prompt;
            opts.push(fits.then(|| contrib(o, Rung::new(b, n), points)));
        }
    }
    let valid = (0..opts.len()).filter(|&j| opts[j].is_some()).collect();
    Problem {
        o,
        bases,
        steps,
        opts,
        valid,
    }
}

/// Achievable prompt values `b + T + k·G` nearest `target`, as (value, base) sorted by distance then value.
fn candidates(o: &SolveOptions, target: u64) -> Vec<(u64, u64)> {
    let g = o.shape.growth_tokens;
    let t = o.shape.task_tokens;
    let max_prompt = o.max_prompt();
    let step = o.base_step_tokens;
    let max_k = if g == 0 { 0 } else { u64::from(o.max_steps - 1) };
    let mut c: Vec<(u64, u64)> = Vec::new();
    for k in 0..=max_k {
        let off = t + k * g;
        if o.min_base_tokens + off > max_prompt {
            break;
        }
        // Bases just below and just above target − off.
        let ideal = target.saturating_sub(off);
        let j = ideal.saturating_sub(o.min_base_tokens) / step;
        for jj in [j.saturating_sub(1), j, j + 1] {
            let b = o.min_base_tokens + jj * step;
            let v = b + off;
            if v <= max_prompt && b <= MAX_BASE_TOKENS {
                c.push((v, b));
            }
        }
    }
    // By (distance to target, v, b): stable passes from the last key to the first, through `order`'s one sort.
    crate::order::sort_by_u64_key(&mut c, |&(_, b)| b);
    crate::order::sort_by_u64_key(&mut c, |&(v, _)| v);
    crate::order::sort_by_u64_key(&mut c, |&(v, _)| v.abs_diff(target));
    c.dedup_by_key(|p| p.0);
    c.truncate(CANDIDATES_PER_TARGET);
    c
}

fn rel(a: u64, t: u64) -> f64 {
    (a as f64 - t as f64) / t as f64
}

/// Solve for one (median, p90) pair `(vm from base bm, vp from base bp)`; returns the best ladder found.
fn solve_pair(o: &SolveOptions, vm: u64, vp: u64, bm: u64, bp: u64) -> Vec<Rung> {
    let points = [vm.saturating_sub(1), vm, vp.saturating_sub(1), vp];
    let p = build_problem(o, &points, &[bm, bp]);
    if p.valid.is_empty() {
        return Vec::new();
    }
    let r = o.slots;
    let ns = p.steps.len();
    // The smallest valid option on base `b` with at least `n` steps (or the largest that fits).
    let find = |b: u64, n: u32| -> usize {
        let bi = p.bases.iter().position(|&x| x == b).unwrap_or(0);
        let row: Vec<usize> = (0..ns)
            .map(|ni| bi * ns + ni)
            .filter(|&j| p.opts[j].is_some())
            .collect();
        row.iter()
            .copied()
            .find(|&j| p.steps[j % ns] >= n)
            .or(row.last().copied())
            .unwrap_or(p.valid[0])
    };
    let g = o.shape.growth_tokens.max(1);
    let km = ((vm - (bm + o.shape.task_tokens)) / g) as u32;
    let kp = ((vp - (bp + o.shape.task_tokens)) / g) as u32;
    let (om, op) = (find(bm, 2 * km + 1), find(bp, kp + 1));
    // Structured starts: the median rung repeated with the p90 rung on top; the two alternating; bases spread
    // evenly over the grid.
    let mut starts: Vec<Vec<usize>> = vec![
        (0..r).map(|i| if i + 1 == r { op } else { om }).collect(),
        (0..r).map(|i| if i % 2 == 0 { om } else { op }).collect(),
        (0..r).map(|i| p.valid[(i * p.valid.len()) / r]).collect(),
    ];
    let mut best: Option<(Vec<usize>, Key)> = None;
    for sel in &mut starts {
        let k = p.optimize(sel, false);
        if best.as_ref().is_none_or(|(_, bk)| k < *bk) {
            best = Some((sel.clone(), k));
        }
    }
    let Some((mut best_sel, mut best_key)) = best else {
        return Vec::new();
    };
    let mut rng = Rng(0x5eed ^ vm.rotate_left(17) ^ vp);
    for round in 0..ROUNDS {
        let mut sel = best_sel.clone();
        for _ in 0..r.min(2) {
            let i = rng.below(r);
            sel[i] = if round % 2 == 0 {
                p.valid[rng.below(p.valid.len())]
            } else {
                // Same base, other steps: moves weight across the percentiles without moving the base.
                let row = sel[i] / ns * ns;
                row + rng.below(ns)
            };
            if p.opts[sel[i]].is_none() {
                sel[i] = p.valid[rng.below(p.valid.len())];
            }
        }
        let k = p.optimize(&mut sel, false);
        if k < best_key {
            best_key = k;
            best_sel = sel;
        }
    }
    // The perturbation rounds move within neighbourhoods only; a final full descent confirms the winner, then
    // pair moves and descents alternate while they improve.
    let mut key = p.descend(&mut best_sel, Score::Strict, true);
    let mut buf = Vec::new();
    for _ in 0..PAIR_PASSES {
        if !p.pair_sweep(&mut best_sel, &mut key, &mut buf) {
            break;
        }
        key = p.descend(&mut best_sel, Score::Strict, false);
    }
    p.descend(&mut best_sel, Score::Strict, true);
    let ns = p.steps.len();
    let mut rungs: Vec<Rung> = best_sel
        .iter()
        .map(|&j| Rung::new(p.bases[j / ns], p.steps[j % ns]))
        .collect();
    // By base, then steps (`Rung`'s order), through `order`'s one sort instance rather than one for `Rung`.
    crate::order::sort_by_u64_key(&mut rungs, |r| u64::from(r.steps));
    crate::order::sort_by_u64_key(&mut rungs, |r| r.base_tokens);
    rungs
}

/// Find a ladder for the targets in `o` (see the module docs).
pub fn solve(o: &SolveOptions) -> Result<Solution, SolveError> {
    o.validate()?;
    let cm = candidates(o, o.median_tokens);
    let cp = candidates(o, o.p90_tokens);
    let mut pairs: Vec<((u64, u64), (u64, u64))> = Vec::new();
    for &m in &cm {
        for &p in &cp {
            if m.0 <= p.0 {
                pairs.push((m, p));
            }
        }
    }
    let err = |pair: &((u64, u64), (u64, u64))| {
        let (em, ep) = (rel(pair.0.0, o.median_tokens).abs(), rel(pair.1.0, o.p90_tokens).abs());
        (em.max(ep), em + ep)
    };
    pairs.sort_by(|a, b| {
        err(a)
            .partial_cmp(&err(b))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(b))
    });
    if o.priority == Priority::Margins {
        let within: Vec<_> = pairs
            .iter()
            .copied()
            .filter(|p| err(p).0 <= o.margin_tolerance)
            .take(MARGIN_PAIRS)
            .collect();
        if !within.is_empty() {
            pairs = within;
        }
    }
    let mut best: Option<(Solution, (bool, f64, f64, f64))> = None;
    let mut tried = 0;
    for &((vm, bm), (vp, bp)) in &pairs {
        tried += 1;
        let rungs = solve_pair(o, vm, vp, bm, bp);
        if rungs.is_empty() {
            continue;
        }
        let sol = finish(o, Ladder { rungs }, tried)?;
        let hit = sol.stats.median == vm && sol.stats.p90 == vp;
        let gap = (sol.cached_share - o.cached_share).abs();
        let e = sol.median_error.abs().max(sol.p90_error.abs());
        let score = match o.priority {
            Priority::Exact => (!hit, e, gap, -sol.min_margin),
            Priority::Margins => (!hit, -(sol.min_margin / MARGIN_QUANTUM).floor(), gap, e),
        };
        if best
            .as_ref()
            .is_none_or(|(_, s)| score.partial_cmp(s) == Some(std::cmp::Ordering::Less))
        {
            best = Some((sol, score));
        }
        if o.priority == Priority::Exact && hit {
            break;
        }
    }
    let (mut sol, _) =
        best.ok_or_else(|| SolveError::Invalid("no (median, p90) candidate values fit the constraints".into()))?;
    sol.pairs_tried = tried;
    add_notes(o, &mut sol);
    Ok(sol)
}

fn finish(o: &SolveOptions, ladder: Ladder, tried: usize) -> Result<Solution, SolveError> {
    let s = stats(&ladder, &o.shape, o.weighting)?;
    let cached_share = match o.cached_definition {
        CachedDefinition::Tokens => s.cached_share_tokens,
        CachedDefinition::Requests => s.cached_share_requests,
    };
    let min_margin = s.median_margins.slack(0.5).min(s.p90_margins.slack(0.9));
    Ok(Solution {
        median_error: rel(s.median, o.median_tokens),
        p90_error: rel(s.p90, o.p90_tokens),
        cached_reached: (cached_share - o.cached_share).abs() <= 0.0005,
        cached_share,
        cached_definition: o.cached_definition,
        min_margin,
        ladder,
        stats: s,
        notes: Vec::new(),
        pairs_tried: tried,
    })
}

fn add_notes(o: &SolveOptions, sol: &mut Solution) {
    let pct = |x: f64| format!("{:.2} %", x * 100.0);
    if !sol.cached_reached {
        let dir = if sol.cached_share < o.cached_share {
            "highest"
        } else {
            "lowest"
        };
        sol.notes.push(format!(
            "cached share {} ({}) is out of reach under these constraints: the {dir} reached is {} (with median {} \
             and p90 {})",
            pct(o.cached_share),
            o.cached_definition,
            pct(sol.cached_share),
            sol.stats.median,
            sol.stats.p90
        ));
    }
    for (name, target, got, e) in [
        ("median", o.median_tokens, sol.stats.median, sol.median_error),
        ("p90", o.p90_tokens, sol.stats.p90, sol.p90_error),
    ] {
        if e.abs() > 0.01 {
            sol.notes.push(format!(
                "{name} {target} is out of reach within 1 %: the closest reached is {got} ({:+.3} %)",
                e * 100.0
            ));
        }
    }
    if sol.min_margin < 0.001 {
        sol.notes.push(format!(
            "the fit is fragile: a percentile moves if the cumulative share shifts by {:.3} percentage points \
             (try --prefer-margins)",
            sol.min_margin * 100.0
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_nearest_achievable_values() {
        let o = SolveOptions::prod();
        // 26,015 = 12,500 + 5·2,703 and 64,654 = 16,000 + 18·2,703: the only values within 0.07 % / 0.01 %.
        assert_eq!(candidates(&o, 26_032)[0], (26_015, 12_500));
        assert_eq!(candidates(&o, 64_648)[0], (64_654, 16_000));
        assert_eq!(candidates(&o, 64_648)[1], (64_639, 29_500));
        assert_eq!(candidates(&o, 64_648).len(), CANDIDATES_PER_TARGET);
    }

    #[test]
    fn parse_enums() {
        assert_eq!("requests".parse::<CachedDefinition>(), Ok(CachedDefinition::Requests));
        assert_eq!("margins".parse::<Priority>(), Ok(Priority::Margins));
        assert!("fast".parse::<Priority>().is_err());
    }
}
