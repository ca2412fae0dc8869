//! Speculative decoding ([`Speculative`], the profile's `"speculative"`): a draft (an MTP head, an EAGLE head, a
//! small draft model, or n-gram lookup) proposes `draft_tokens` tokens after each decoding sequence's next one; the
//! target model verifies all `k + 1` positions in one step and keeps the next token plus the drafted ones up to the
//! first it rejects.
//!
//! In the engine (docs/simulator.md, "Speculative decoding"):
//! - every decoding sequence of a step verifies `v = min(k + 1, tokens it still has to generate, the step's token
//!   budget left)` positions (`v − 1` drafted tokens), each taking one token of `max_num_batched_tokens`;
//! - of its drafted tokens it accepts a prefix, drawn from the seeded generator position by position: position `i`
//!   (from 1) is accepted with probability `u_i / u_{i−1}` given that the positions before it were, so that `u_i` is
//!   the share of steps that accept position `i` (`u_0 = 1`); `acceptance` gives `u_i` as a list, or as one rate
//!   `a` meaning `u_i = a^i` (each position accepted with probability `a`, independently of the others);
//! - it emits `1 + accepted` tokens at the end of the step (one stream frame), its KV grows by as many;
//! - the step pays for the verified tokens: linear profiles add the drafted tokens at the prefill rate
//!   (`Σ drafted / prefill_tokens_per_ms`), a roofline counts them as computed tokens attending to their context;
//!   and the draft's cost, `draft_cost_ms` per drafted token (`Σ drafted · draft_cost_ms`).
//!
//! Speculation makes each step's tokens random, so an engine with it runs step by step: no closed-form stretches
//! and no lazy decoders (the cost is measured in docs/measurements.md).

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;

/// Most draft tokens per step.
pub const MAX_DRAFT_TOKENS: u32 = 64;

/// Where the draft comes from (a label: the engine treats all alike; `draft_cost_ms` and `acceptance` carry the
/// difference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecMethod {
    /// Multi-token prediction heads of the target model (DeepSeek-V3, GLM-4.5, Qwen3-Next).
    Mtp,
    /// An EAGLE draft head.
    Eagle,
    /// A separate small draft model (llama-server `--model-draft`, vLLM `draft_model`).
    Draft,
    /// Prompt lookup / n-gram drafting (no model).
    Ngram,
}

/// `acceptance`: one rate `a` (position `i` accepted in a share `a^i` of steps) or the share of steps that accept
/// each position, non-increasing, one per draft token.
#[derive(Debug, Clone, PartialEq)]
pub enum Acceptance {
    Rate(f64),
    PerPosition(Vec<f64>),
}

impl Serialize for Acceptance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Acceptance::Rate(a) => s.serialize_f64(*a),
            Acceptance::PerPosition(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Acceptance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Acceptance;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a rate in 0..=1 or a list of rates, one per draft position")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Acceptance, E> {
                Ok(Acceptance::Rate(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Acceptance, E> {
                Ok(Acceptance::Rate(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Acceptance, E> {
                Ok(Acceptance::Rate(v as f64))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Acceptance, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element::<f64>()? {
                    out.push(x);
                }
                Ok(Acceptance::PerPosition(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// The profile's `"speculative"` (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    /// `mtp`, `eagle`, `draft` or `ngram`.
    pub method: SpecMethod,
    /// Tokens drafted per decoding sequence per step (`k`, 1..=[`MAX_DRAFT_TOKENS`]).
    pub draft_tokens: u32,
    /// One rate, or the share of steps accepting each position (see [`Acceptance`]).
    pub acceptance: Acceptance,
    /// Cost of drafting one token for one sequence, milliseconds (default 0).
    #[serde(default)]
    pub draft_cost_ms: f64,
}

impl Speculative {
    /// Field paths are relative (`draft_tokens`); the profile puts them under `speculative`.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        fn f(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
            ScenarioError::field(path, message)
        }
        if self.draft_tokens == 0 || self.draft_tokens > MAX_DRAFT_TOKENS {
            return Err(f(
                "draft_tokens",
                format!("must be in 1..={MAX_DRAFT_TOKENS} (got {})", self.draft_tokens),
            ));
        }
        let share = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
        match &self.acceptance {
            Acceptance::Rate(a) if !share(*a) => {
                return Err(f("acceptance", format!("must be a rate in 0..=1 (got {a})")));
            }
            Acceptance::Rate(_) => {}
            Acceptance::PerPosition(v) => {
                if v.len() != self.draft_tokens as usize {
                    return Err(f(
                        "acceptance",
                        format!(
                            "a list gives one rate per draft position: {} of them for draft_tokens {} (got {})",
                            self.draft_tokens,
                            self.draft_tokens,
                            v.len()
                        ),
                    ));
                }
                for (i, &a) in v.iter().enumerate() {
                    if !share(a) {
                        return Err(f(
                            format!("acceptance[{i}]"),
                            format!("must be a rate in 0..=1 (got {a})"),
                        ));
                    }
                    if i > 0 && a > v[i - 1] {
                        return Err(f(
                            format!("acceptance[{i}]"),
                            format!(
                                "a position is accepted only after the ones before it, so the rates cannot rise \
                                 ({a} after {})",
                                v[i - 1]
                            ),
                        ));
                    }
                }
            }
        }
        if !(self.draft_cost_ms.is_finite() && (0.0..=1e6).contains(&self.draft_cost_ms)) {
            return Err(f(
                "draft_cost_ms",
                format!(
                    "must be a finite number in 0..=1e6 milliseconds (got {})",
                    self.draft_cost_ms
                ),
            ));
        }
        Ok(())
    }

    /// The share of steps accepting each position 1..=k (`u_i`).
    pub fn per_position(&self) -> Vec<f64> {
        match &self.acceptance {
            Acceptance::Rate(a) => (1..=self.draft_tokens).map(|i| a.powi(i as i32)).collect(),
            Acceptance::PerPosition(v) => v.clone(),
        }
    }

    /// Expected accepted draft tokens per step when all `k` positions are drafted: `Σ u_i`.
    pub fn expected_accepted(&self) -> f64 {
        self.per_position().iter().sum()
    }

    /// Expected share of drafted tokens accepted (vLLM's acceptance rate): `Σ u_i / k`.
    pub fn acceptance_rate(&self) -> f64 {
        self.expected_accepted() / f64::from(self.draft_tokens.max(1))
    }
}

/// The one rate `a` whose `(a + a² + … + a^k) / k` is `share` (the drafted tokens accepted): what a server's
/// counts of drafted and accepted tokens say of `acceptance` for `k` draft tokens. `share` is clamped to 0..=1.
pub fn rate_for_share(share: f64, k: u32) -> f64 {
    let share = if share.is_nan() { 0.0 } else { share.clamp(0.0, 1.0) };
    let k = k.max(1);
    let mean = |a: f64| (1..=k).map(|i| a.powi(i as i32)).sum::<f64>() / f64::from(k);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if mean(mid) < share {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The engine's speculation: `k`, each position's acceptance given the ones before it, the draft cost, and the
/// generator of the draws.
#[derive(Debug, Clone)]
pub(crate) struct SpecState {
    pub k: u32,
    /// `u_i / u_{i−1}`, positions 1..=k.
    cond: Vec<f64>,
    pub draft_cost_ms: f64,
    rng: u64,
}

impl SpecState {
    pub fn new(s: &Speculative) -> Self {
        let u = s.per_position();
        let mut prev = 1.0;
        let cond = u
            .iter()
            .map(|&x| {
                let c = if prev > 0.0 { (x / prev).clamp(0.0, 1.0) } else { 0.0 };
                prev = x;
                c
            })
            .collect();
        SpecState {
            k: s.draft_tokens.max(1),
            cond,
            draft_cost_ms: s.draft_cost_ms,
            rng: SEED_MIX,
        }
    }

    /// Restart the draws from `seed`.
    pub fn seed(&mut self, seed: u64) {
        self.rng = seed ^ SEED_MIX;
    }

    /// A uniform draw in [0, 1) (SplitMix64).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Accepted tokens of `drafted` (≤ k): positions accepted in turn until the first rejection.
    pub fn draw(&mut self, drafted: u32) -> u32 {
        let mut accepted = 0;
        while accepted < drafted {
            let c = self.cond[accepted as usize];
            if c <= 0.0 || (c < 1.0 && self.uniform() >= c) {
                break;
            }
            accepted += 1;
        }
        accepted
    }
}

/// Mixed into the seed so that speculation's draws differ from the workload's even at the same seed.
const SEED_MIX: u64 = 0x5bec_0ded_0ecd_0de5;

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(k: u32, a: Acceptance) -> Speculative {
        Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: k,
            acceptance: a,
            draft_cost_ms: 0.0,
        }
    }

    /// A rate `a` accepts position `i` in a share `a^i` of draws, and the accepted count averages `Σ a^i`.
    #[test]
    fn draws_follow_the_per_position_shares() {
        let s = spec(3, Acceptance::Rate(0.6));
        let mut st = SpecState::new(&s);
        st.seed(7);
        let n = 200_000;
        let mut at_least = [0u64; 4];
        for _ in 0..n {
            let a = st.draw(3);
            for (i, c) in at_least.iter_mut().enumerate() {
                if a as usize >= i {
                    *c += 1;
                }
            }
        }
        for (i, &count) in at_least.iter().enumerate().skip(1) {
            let share = count as f64 / n as f64;
            let want = 0.6f64.powi(i as i32);
            assert!((share - want).abs() < 0.005, "position {i}: {share} vs {want}");
        }
        // A list is read as the shares themselves.
        let mut st = SpecState::new(&spec(2, Acceptance::PerPosition(vec![0.9, 0.3])));
        let (mut one, mut two) = (0u64, 0u64);
        for _ in 0..n {
            match st.draw(2) {
                1 => one += 1,
                2 => two += 1,
                _ => {}
            }
        }
        assert!(((one + two) as f64 / n as f64 - 0.9).abs() < 0.005);
        assert!((two as f64 / n as f64 - 0.3).abs() < 0.005);
    }

    /// Rates 0 and 1 are exact, and fewer drafted positions than `k` cap the draw.
    #[test]
    fn certain_rates_and_short_drafts() {
        let mut all = SpecState::new(&spec(4, Acceptance::Rate(1.0)));
        let mut none = SpecState::new(&spec(4, Acceptance::Rate(0.0)));
        for d in 0..=4 {
            assert_eq!(all.draw(d), d);
            assert_eq!(none.draw(d), 0);
        }
    }

    #[test]
    fn rate_for_share_inverts_the_mean() {
        for k in [1u32, 2, 4, 8] {
            for a in [0.0, 0.2, 0.5, 0.72, 0.91, 1.0] {
                let s = spec(k, Acceptance::Rate(a));
                let back = rate_for_share(s.acceptance_rate(), k);
                assert!((back - a).abs() < 1e-9, "k {k} a {a}: {back}");
            }
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |s: Speculative| s.validate().unwrap_err().to_string();
        assert!(err(spec(0, Acceptance::Rate(0.5))).contains("draft_tokens"));
        assert!(err(spec(2, Acceptance::Rate(1.5))).contains("acceptance"));
        assert!(err(spec(2, Acceptance::Rate(-0.1))).contains("acceptance"));
        assert!(err(spec(2, Acceptance::PerPosition(vec![0.5]))).contains("acceptance"));
        assert!(err(spec(2, Acceptance::PerPosition(vec![0.5, 0.7]))).contains("acceptance[1]"));
        assert!(err(spec(2, Acceptance::PerPosition(vec![0.5, f64::NAN]))).contains("acceptance[1]"));
        let mut s = spec(2, Acceptance::Rate(0.5));
        s.draft_cost_ms = -1.0;
        assert!(err(s).contains("draft_cost_ms"));
    }
}
