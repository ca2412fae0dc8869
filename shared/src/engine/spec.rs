//! Speculative decoding ([`Speculative`], the profile's `"speculative"`): a draft (an MTP head, an EAGLE head, a
//! small draft model, or n-gram lookup) proposes `draft_tokens` tokens after each decoding sequence's next one; the
//! target model verifies all `k + 1` positions in one step and keeps the next token plus the drafted ones up to the
//! first it rejects.
//!
//! In the engine (docs/simulator.md, "Speculative decoding"):
//! - every decoding sequence of a step verifies `v = min(k + 1, tokens it still has to generate, the step's token
//!   budget left)` positions (`v − 1` drafted tokens), each taking one token of `max_num_batched_tokens`;
//! - of its drafted tokens it accepts a prefix: `max{i ≤ v − 1 : x < u_i}` for a 16-bit draw `x` of its own stream
//!   (`SpecState`), `u_i` the share of steps that accept position `i`, so position `i` is accepted with
//!   probability `u_i / u_{i−1}` given that the positions before it were (`u_0 = 1`); `acceptance` gives `u_i` as a
//!   list, or as one rate `a` meaning `u_i = a^i`, and `acceptance_by_kind` per content kind; with
//!   `acceptance_spread` τ every request accepts at rates of its own, the conditional rates `u_i / u_{i−1}` moved
//!   in log-odds by `τ·z`, `z` one of [`SPREAD_CLASSES`] equally likely classes of a standard normal, drawn per
//!   request from its stream;
//! - it emits `1 + accepted` tokens at the end of the step (one stream frame), its KV grows by as many;
//! - the step pays for the verified tokens: linear profiles add the drafted tokens at the prefill rate
//!   (`Σ drafted / prefill_tokens_per_ms`), a roofline counts them as computed tokens attending to their context;
//!   and the draft's cost, `draft_cost_ms` per drafted token (`Σ drafted · draft_cost_ms`).
//!
//! A request's draws depend on nothing but its own stream, so a lazy decoder's whole path is drawn when it becomes
//! lazy and the engine keeps its closed-form stretches (`core::Lazy`; the cost is measured in
//! docs/measurements.md).

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
    /// Acceptance by the kind of content a request generates (see [`AcceptanceByKind`]); absent: `acceptance` for
    /// all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_by_kind: Option<AcceptanceByKind>,
    /// How far requests' own acceptance spreads around the profile's (τ, log-odds; see the module docs): with
    /// greedy decoding each request accepts at a rate set by its content. 0 (the default): every request at the
    /// profile's rates.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub acceptance_spread: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Classes of a request's own acceptance under `acceptance_spread`.
pub const SPREAD_CLASSES: usize = 8;
/// Most `acceptance_spread` (log-odds): beyond it nearly every request accepts all or nothing.
pub const MAX_SPREAD: f64 = 8.0;
/// The standard normal's quantiles at `(c + ½) / 8`: the classes' offsets in units of τ.
const SPREAD_Z: [f64; SPREAD_CLASSES] = [
    -1.534_120_544,
    -0.887_146_559,
    -0.488_776_411,
    -0.157_310_685,
    0.157_310_685,
    0.488_776_411,
    0.887_146_559,
    1.534_120_544,
];

/// `"acceptance_by_kind": {"code": …, "prose": …}`: the acceptance of requests that generate code and of those
/// that generate prose, each written as `acceptance` is (one rate, or a list per position). A kind left out, and
/// every request whose kind the workload does not say, take `acceptance`. In a session workload a session's kind is
/// its base context's (`FillerKind::for_slot`: code for odd slots, prose for even ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AcceptanceByKind {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Acceptance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prose: Option<Acceptance>,
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
        self.check_acceptance("acceptance", &self.acceptance)?;
        if let Some(b) = &self.acceptance_by_kind {
            for (name, a) in [("code", &b.code), ("prose", &b.prose)] {
                if let Some(a) = a {
                    self.check_acceptance(&format!("acceptance_by_kind.{name}"), a)?;
                }
            }
        }
        if !(self.acceptance_spread.is_finite() && (0.0..=MAX_SPREAD).contains(&self.acceptance_spread)) {
            return Err(f(
                "acceptance_spread",
                format!(
                    "must be a finite number in 0..={MAX_SPREAD} (log-odds; got {})",
                    self.acceptance_spread
                ),
            ));
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

    /// One acceptance (`acceptance`, or a kind's under `acceptance_by_kind`) at field path `path`.
    fn check_acceptance(&self, path: &str, acceptance: &Acceptance) -> Result<(), ScenarioError> {
        fn f(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
            ScenarioError::field(path, message)
        }
        let share = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
        match acceptance {
            Acceptance::Rate(a) if !share(*a) => {
                return Err(f(path, format!("must be a rate in 0..=1 (got {a})")));
            }
            Acceptance::Rate(_) => {}
            Acceptance::PerPosition(v) => {
                if v.len() != self.draft_tokens as usize {
                    return Err(f(
                        path,
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
                        return Err(f(format!("{path}[{i}]"), format!("must be a rate in 0..=1 (got {a})")));
                    }
                    if i > 0 && a > v[i - 1] {
                        return Err(f(
                            format!("{path}[{i}]"),
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
        Ok(())
    }

    /// The share of steps accepting each position 1..=k (`u_i`).
    pub fn per_position(&self) -> Vec<f64> {
        self.shares(&self.acceptance)
    }

    /// The share of steps accepting each position 1..=k under `acceptance` (one of this profile's).
    pub fn shares(&self, acceptance: &Acceptance) -> Vec<f64> {
        match acceptance {
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

    /// The shares `u_i` of the requests of spread class `class` (0..[`SPREAD_CLASSES`]) under `acceptance_spread`:
    /// each conditional rate `u_i / u_{i−1}` moved in log-odds by `τ·z_class` (rates of 0 and 1 stay).
    pub fn shares_in_class(&self, u: &[f64], class: usize) -> Vec<f64> {
        shift_log_odds(u, self.acceptance_spread * SPREAD_Z[class.min(SPREAD_CLASSES - 1)])
    }

    /// The acceptance moved in log-odds (every conditional rate by one offset) so that the requests, spread by
    /// `acceptance_spread`, pool to `share` of their drafted tokens accepted ([`Self::pooled_acceptance_rate`]); a
    /// rate stays a rate. Without a spread, or where the rates are all 0 or 1, the acceptance unchanged.
    pub fn centered_on(&self, share: f64) -> Acceptance {
        let u = self.per_position();
        if self.acceptance_spread == 0.0 || u.iter().all(|&x| x <= 0.0 || x >= 1.0) {
            return self.acceptance.clone();
        }
        let pooled_at = |d: f64| {
            let mut s = self.clone();
            s.acceptance = Acceptance::PerPosition(shift_log_odds(&u, d));
            s.pooled_acceptance_rate()
        };
        let (mut lo, mut hi) = (-40.0f64, 40.0f64);
        for _ in 0..80 {
            let mid = 0.5 * (lo + hi);
            if pooled_at(mid) < share {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let moved = shift_log_odds(&u, 0.5 * (lo + hi));
        match self.acceptance {
            Acceptance::Rate(_) => Acceptance::Rate(moved.first().copied().unwrap_or(0.0)),
            Acceptance::PerPosition(_) => Acceptance::PerPosition(moved),
        }
    }

    /// The share of drafted tokens accepted over all requests, as a server's counters pool it (Σ accepted / Σ
    /// drafted), for requests of equal length spread over the classes alike: a class accepting `a_c = Σ u_i` per
    /// step takes `1 / (1 + a_c)` steps per token, so `Σ_c a_c / (1 + a_c) / Σ_c k / (1 + a_c)` (a request that
    /// accepts less drafts more, and weighs more). With `acceptance_spread` 0, [`Self::acceptance_rate`].
    pub fn pooled_acceptance_rate(&self) -> f64 {
        if self.acceptance_spread == 0.0 {
            return self.acceptance_rate();
        }
        let u = self.per_position();
        let k = f64::from(self.draft_tokens.max(1));
        let (mut acc, mut drafted) = (0.0, 0.0);
        for c in 0..SPREAD_CLASSES {
            let a: f64 = self.shares_in_class(&u, c).iter().sum();
            acc += a / (1.0 + a);
            drafted += k / (1.0 + a);
        }
        acc / drafted
    }
}

/// The shares `u_i` with every conditional rate `u_i / u_{i−1}` moved by `dz` in log-odds (rates of 0 and 1 stay).
fn shift_log_odds(u: &[f64], dz: f64) -> Vec<f64> {
    let mut prev = 1.0f64;
    let mut out = 1.0f64;
    u.iter()
        .map(|&ui| {
            let c = if prev > 0.0 { (ui / prev).clamp(0.0, 1.0) } else { 0.0 };
            prev = ui;
            let moved = if c <= 0.0 || c >= 1.0 {
                c
            } else {
                1.0 / (1.0 + (-((c / (1.0 - c)).ln() + dz)).exp())
            };
            out *= moved;
            out
        })
        .collect()
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

/// Resolution of an acceptance draw: each decode step of a sequence reads 16 bits of its stream, so the shares
/// `u_i` act as multiples of 2⁻¹⁶ (0 and 1 exactly).
const DRAW_ONE: u32 = 1 << 16;

/// The engine's speculation: `k`, each position's share of steps as a threshold of a 16-bit draw, the draft cost,
/// and the seed of the sequences' streams.
///
/// **Draws.** Every request has a stream of its own, keyed by the seed and its submission number; its `n`-th decode
/// step that drafts reads the `n`-th 16-bit draw `x` of that stream and accepts the first `max{i ≤ drafted : x <
/// u_i·2¹⁶}` drafted positions (`u_i` the share of steps accepting position `i`, non-increasing, so this is the
/// same law as accepting position by position with `u_i / u_{i−1}`). A request's emissions therefore depend on
/// nothing but its own stream, its tokens left and the step's token budget: the engine can draw a decoder's whole
/// path ahead (see `core::Lazy`) and get exactly what drawing step by step gives.
#[derive(Debug, Clone)]
pub(crate) struct SpecState {
    pub k: u32,
    /// Per content kind ([`KIND_ANY`], [`KIND_CODE`], [`KIND_PROSE`]) and, under `acceptance_spread`, per spread
    /// class (index `kind·classes + class`): `u_i·2¹⁶` rounded, positions 1..=k.
    thr: Vec<Vec<u32>>,
    /// Per content kind: the tokens a step drafting all `k` positions emits (`1 + accepted`) for every draw whose
    /// high byte is the index, or 0 where draws with that high byte emit different counts (a threshold falls
    /// inside): a step's emission from one table read, the thresholds only for those few bytes.
    /// (Boxed: the engine moves its `SpecState` in and out of place around every stretch.)
    e8: Box<[[u8; 256]]>,
    /// Spread classes per kind: 1 without `acceptance_spread`, else [`SPREAD_CLASSES`].
    classes: u8,
    pub draft_cost_ms: f64,
    seed: u64,
}

/// A request's content kind for `acceptance_by_kind`: unknown (the profile's `acceptance`), code, prose.
pub(crate) const KIND_ANY: u8 = 0;
pub(crate) const KIND_CODE: u8 = 1;
pub(crate) const KIND_PROSE: u8 = 2;

impl SpecState {
    pub fn new(s: &Speculative) -> Self {
        let table = |u: Vec<f64>| -> Vec<u32> {
            u.iter()
                .map(|&x| (x.clamp(0.0, 1.0) * f64::from(DRAW_ONE)).round() as u32)
                .collect()
        };
        let any = s.per_position();
        let of = |kind: Option<&Acceptance>| kind.map_or_else(|| any.clone(), |a| s.shares(a));
        let (code, prose) = match &s.acceptance_by_kind {
            Some(b) => (of(b.code.as_ref()), of(b.prose.as_ref())),
            None => (any.clone(), any.clone()),
        };
        let k = s.draft_tokens.max(1);
        let classes = if s.acceptance_spread > 0.0 { SPREAD_CLASSES } else { 1 };
        let thr: Vec<Vec<u32>> = [any, code, prose]
            .iter()
            .flat_map(|u| {
                (0..classes).map(move |c| {
                    if classes == 1 {
                        u.clone()
                    } else {
                        s.shares_in_class(u, c)
                    }
                })
            })
            .map(table)
            .collect();
        let mut e8 = vec![[0u8; 256]; thr.len()].into_boxed_slice();
        for (table, th) in e8.iter_mut().zip(&thr) {
            // Accepted counts fall as the draw rises (the thresholds do not rise): a byte's draws all emit the
            // same when its first and last do.
            let emit = |x: u32| 1 + th.iter().take(k as usize).filter(|&&t| x < t).count();
            for (b, e) in table.iter_mut().enumerate() {
                let (lo, hi) = (emit(b as u32 * 256), emit(b as u32 * 256 + 255));
                *e = if lo == hi { u8::try_from(lo).unwrap_or(0) } else { 0 };
            }
        }
        SpecState {
            k,
            thr,
            e8,
            classes: classes as u8,
            draft_cost_ms: s.draft_cost_ms,
            seed: SEED_MIX,
        }
    }

    /// Restart the draws from `seed`.
    pub fn seed(&mut self, seed: u64) {
        self.seed = seed ^ SEED_MIX;
    }

    /// The table index of a request of content kind `kind` ([`KIND_ANY`] …) and submission number `id`: the kind,
    /// and under `acceptance_spread` the request's spread class, drawn from its stream (apart from its draws).
    #[inline]
    pub fn class_kind(&self, kind: u8, id: u64) -> u8 {
        if self.classes <= 1 {
            return kind;
        }
        let class = (mix(self.stream(id) ^ CLASS_SALT) >> 61) as u8;
        kind.min(2) * self.classes + class
    }

    /// The content kind of table index `index` ([`Self::class_kind`]'s inverse, without the class).
    #[inline]
    pub fn base_kind(&self, index: u8) -> u8 {
        index / self.classes.max(1)
    }

    /// The key of request number `id`'s stream.
    #[inline]
    pub fn stream(&self, id: u64) -> u64 {
        mix(self.seed ^ mix(id.wrapping_add(SEED_MIX)))
    }

    /// The 64-bit word holding draws `4·w .. 4·w + 3` of stream `key`.
    #[inline]
    pub fn word(key: u64, w: u64) -> u64 {
        mix(key.wrapping_add(w.wrapping_add(1).wrapping_mul(GAMMA)))
    }

    /// Draw `n` of a stream from its word ([`Self::word`] of `n / 4`).
    #[inline]
    pub fn bits(word: u64, n: u32) -> u32 {
        ((word >> (16 * (n & 3))) & 0xffff) as u32
    }

    /// The thresholds of kind `kind`, one per draft position: a draw `x` accepts as many positions as there are
    /// thresholds above it.
    #[inline]
    pub fn thresholds(&self, kind: u8) -> &[u32] {
        &self.thr[usize::from(kind).min(self.thr.len() - 1)]
    }

    /// Kind `kind`'s table of emissions by a draw's high byte for steps that draft all `k` positions (0: look at
    /// the thresholds).
    #[inline]
    pub fn emit_table(&self, kind: u8) -> &[u8; 256] {
        &self.e8[usize::from(kind).min(self.e8.len() - 1)]
    }

    /// Tokens a step that drafts all `k` positions emits for a draw `x` of kind `kind`: `1 + accepted(kind, x, k)`,
    /// from the table where it answers. (A step drafting `v < k` accepts the least of that less one and `v`: the
    /// positions accepted are a prefix.)
    #[inline]
    pub fn full_emit(&self, kind: u8, x: u32) -> u32 {
        let e = self.emit_table(kind)[((x >> 8) & 0xff) as usize];
        if e != 0 {
            u32::from(e)
        } else {
            1 + self.accepted(kind, x, self.k)
        }
    }

    /// Accepted tokens of `drafted` (≤ k) for a draw `x` of kind `kind`.
    #[inline]
    pub fn accepted(&self, kind: u8, x: u32, drafted: u32) -> u32 {
        let thr = self.thresholds(kind);
        let mut a = 0;
        while a < drafted && x < thr[a as usize] {
            a += 1;
        }
        a
    }

    /// Accepted tokens of `drafted` at draw `n` of stream `key` (a request's `n`-th step that drafts).
    pub fn draw(&self, key: u64, n: u32, kind: u8, drafted: u32) -> u32 {
        if drafted == 0 {
            return 0;
        }
        let x = Self::bits(Self::word(key, u64::from(n >> 2)), n);
        self.accepted(kind, x, drafted)
    }
}

/// SplitMix64's increment and finalizer.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixed into the seed so that speculation's draws differ from the workload's even at the same seed.
const SEED_MIX: u64 = 0x5bec_0ded_0ecd_0de5;
/// Salt of a request's spread class, so that it is drawn apart from the stream's acceptance draws.
const CLASS_SALT: u64 = 0xc1a5_5e5d_a7e5_9a1d;

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(k: u32, a: Acceptance) -> Speculative {
        Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: k,
            acceptance: a,
            draft_cost_ms: 0.0,
            acceptance_by_kind: None,
            acceptance_spread: 0.0,
        }
    }

    /// A rate `a` accepts position `i` in a share `a^i` of draws, and the accepted count averages `Σ a^i`.
    #[test]
    fn draws_follow_the_per_position_shares() {
        let s = spec(3, Acceptance::Rate(0.6));
        let mut st = SpecState::new(&s);
        st.seed(7);
        let key = st.stream(11);
        let n = 200_000;
        let mut at_least = [0u64; 4];
        for i in 0..n {
            let a = st.draw(key, i, KIND_ANY, 3);
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
        let st = SpecState::new(&spec(2, Acceptance::PerPosition(vec![0.9, 0.3])));
        let (mut one, mut two) = (0u64, 0u64);
        for i in 0..n {
            match st.draw(st.stream(3), i, KIND_ANY, 2) {
                1 => one += 1,
                2 => two += 1,
                _ => {}
            }
        }
        assert!(((one + two) as f64 / n as f64 - 0.9).abs() < 0.005);
        assert!((two as f64 / n as f64 - 0.3).abs() < 0.005);
    }

    /// The table of a full step's tokens by the draw's high byte agrees with the thresholds on every draw it
    /// answers, and leaves unanswered only the bytes a threshold falls inside (at most one per position).
    #[test]
    fn emit_table_agrees_with_the_thresholds() {
        let mut by_kind = spec(6, Acceptance::Rate(0.8));
        by_kind.acceptance_by_kind = Some(AcceptanceByKind {
            code: Some(Acceptance::Rate(1.0)),
            prose: Some(Acceptance::PerPosition(vec![0.9, 0.9, 0.5, 0.25, 0.001, 0.0])),
        });
        for s in [spec(3, Acceptance::Rate(0.7)), spec(1, Acceptance::Rate(0.0)), by_kind] {
            let st = SpecState::new(&s);
            for kind in [KIND_ANY, KIND_CODE, KIND_PROSE] {
                let table = st.emit_table(kind);
                let mut open = 0;
                for x in 0..DRAW_ONE {
                    let e = table[(x >> 8) as usize];
                    if e == 0 {
                        continue;
                    }
                    assert_eq!(u32::from(e), 1 + st.accepted(kind, x, st.k), "kind {kind} draw {x}");
                }
                for x in 0..DRAW_ONE {
                    let full = st.full_emit(kind, x);
                    assert_eq!(full, 1 + st.accepted(kind, x, st.k), "kind {kind} draw {x}");
                    for v in 0..=st.k {
                        assert_eq!(
                            (full - 1).min(v),
                            st.accepted(kind, x, v),
                            "kind {kind} draw {x}, {v} drafted"
                        );
                    }
                }
                for (b, &e) in table.iter().enumerate() {
                    if e == 0 {
                        open += 1;
                        let (lo, hi) = (b as u32 * 256, b as u32 * 256 + 255);
                        assert_ne!(st.accepted(kind, lo, st.k), st.accepted(kind, hi, st.k), "byte {b}");
                    }
                }
                assert!(open <= st.k as usize, "{open} bytes left to the thresholds");
            }
        }
    }

    /// Rates 0 and 1 are exact, and fewer drafted positions than `k` cap the draw.
    #[test]
    fn certain_rates_and_short_drafts() {
        let all = SpecState::new(&spec(4, Acceptance::Rate(1.0)));
        let none = SpecState::new(&spec(4, Acceptance::Rate(0.0)));
        for n in 0..1000 {
            for d in 0..=4 {
                assert_eq!(all.draw(all.stream(n.into()), n, KIND_ANY, d), d);
                assert_eq!(none.draw(none.stream(n.into()), n, KIND_ANY, d), 0);
            }
        }
    }

    /// Streams are independent of each other and of the order they are read in: draw `n` of a stream is a function
    /// of the seed, the stream and `n` alone, and two streams do not move together.
    #[test]
    fn streams_are_random_access_and_apart() {
        let mut st = SpecState::new(&spec(1, Acceptance::Rate(0.5)));
        st.seed(9);
        let (a, b) = (st.stream(1), st.stream(2));
        let fwd: Vec<u32> = (0..64).map(|n| st.draw(a, n, KIND_ANY, 1)).collect();
        let back: Vec<u32> = (0..64).rev().map(|n| st.draw(a, n, KIND_ANY, 1)).collect();
        assert_eq!(fwd, back.into_iter().rev().collect::<Vec<_>>());
        let n = 100_000;
        let same = (0..n)
            .filter(|&i| st.draw(a, i, KIND_ANY, 1) == st.draw(b, i, KIND_ANY, 1))
            .count();
        // Independent fair draws agree half the time.
        assert!((same as f64 / f64::from(n) - 0.5).abs() < 0.01, "{same}");
        // Another seed, other draws.
        let mut other = st.clone();
        other.seed(10);
        let diff = (0..64)
            .filter(|&i| other.draw(other.stream(1), i, KIND_ANY, 1) != fwd[i as usize])
            .count();
        assert!(diff > 10, "{diff}");
    }

    /// `acceptance_by_kind` gives code and prose requests their own shares; a kind left out takes `acceptance`.
    #[test]
    fn acceptance_by_kind_sets_each_kinds_shares() {
        let mut s = spec(2, Acceptance::Rate(0.5));
        s.acceptance_by_kind = Some(AcceptanceByKind {
            code: Some(Acceptance::Rate(0.9)),
            prose: None,
        });
        let st = SpecState::new(&s);
        let n = 100_000u32;
        let share = |kind: u8| {
            let key = st.stream(u64::from(kind) + 5);
            let acc: u32 = (0..n).map(|i| st.draw(key, i, kind, 2)).sum();
            f64::from(acc) / f64::from(2 * n)
        };
        // Rate a with k = 2 accepts (a + a²)/2 of the drafted tokens: 0.855 for code, 0.375 otherwise.
        assert!((share(KIND_CODE) - 0.855).abs() < 0.005, "{}", share(KIND_CODE));
        assert!((share(KIND_PROSE) - 0.375).abs() < 0.005, "{}", share(KIND_PROSE));
        assert!((share(KIND_ANY) - 0.375).abs() < 0.005, "{}", share(KIND_ANY));
    }

    /// `acceptance_spread` τ: requests fall into 8 classes about equally, each accepting at its own share (a class
    /// by hand: rate 0.5 moved by τ·z in log-odds), the shares spreading more with τ and averaging
    /// `mean_acceptance_rate`; τ = 0 keeps one table per kind, as before.
    #[test]
    fn a_spread_gives_each_request_a_class_of_its_own_acceptance() {
        let share_of = |st: &SpecState, kind: u8| {
            let key = st.stream(3);
            let acc: u32 = (0..20_000).map(|i| st.draw(key, i, kind, 1)).sum();
            f64::from(acc) / 20_000.0
        };
        let flat = spec(1, Acceptance::Rate(0.5));
        let st0 = SpecState::new(&flat);
        assert_eq!((st0.thr.len(), st0.class_kind(KIND_CODE, 12)), (3, KIND_CODE));
        let mut s = spec(1, Acceptance::Rate(0.5));
        s.acceptance_spread = 1.0;
        let st = SpecState::new(&s);
        assert_eq!(st.thr.len(), 3 * SPREAD_CLASSES);
        // Class 7 (z = +1.534): 1 / (1 + e^−1.534) = 0.8226.
        let top = s.shares_in_class(&[0.5], 7)[0];
        assert!((top - 0.822_6).abs() < 1e-4, "{top}");
        assert!((share_of(&st, 7) - top).abs() < 0.01, "{}", share_of(&st, 7));
        let mut counts = [0u32; SPREAD_CLASSES];
        let shares: Vec<f64> = (0..4000u64)
            .map(|id| {
                let k = st.class_kind(KIND_ANY, id);
                assert_eq!(st.base_kind(k), KIND_ANY);
                counts[usize::from(k)] += 1;
                s.shares_in_class(&[0.5], usize::from(k))[0]
            })
            .collect();
        assert!(counts.iter().all(|&c| (400..600).contains(&c)), "{counts:?}");
        // Symmetric classes around 0.5: the requests' mean share stays 0.5, the pooled share falls below it (a
        // request that accepts less drafts more); a code request keeps its kind's tables.
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        let pooled = s.pooled_acceptance_rate();
        assert!(
            pooled < 0.49 && (flat.pooled_acceptance_rate() - 0.5).abs() < 1e-12,
            "{pooled}"
        );
        let code = st.class_kind(KIND_CODE, 9);
        assert_eq!(st.base_kind(code), KIND_CODE);
        let sd = |tau: f64| {
            let mut s = spec(1, Acceptance::Rate(0.5));
            s.acceptance_spread = tau;
            let v: Vec<f64> = (0..SPREAD_CLASSES).map(|c| s.shares_in_class(&[0.5], c)[0]).collect();
            (v.iter().map(|x| (x - 0.5).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        assert!(
            sd(0.5) < sd(1.0) && sd(1.0) < sd(2.0),
            "{} {} {}",
            sd(0.5),
            sd(1.0),
            sd(2.0)
        );
        s.acceptance_spread = MAX_SPREAD + 1.0;
        assert!(s.validate().unwrap_err().to_string().contains("acceptance_spread"));
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
        let by_kind = |code: Option<Acceptance>, prose: Option<Acceptance>| {
            let mut s = spec(2, Acceptance::Rate(0.5));
            s.acceptance_by_kind = Some(AcceptanceByKind { code, prose });
            s
        };
        assert!(err(by_kind(Some(Acceptance::Rate(1.5)), None)).contains("acceptance_by_kind.code"));
        assert!(err(by_kind(None, Some(Acceptance::PerPosition(vec![0.5])))).contains("acceptance_by_kind.prose"));
        assert!(
            err(by_kind(None, Some(Acceptance::PerPosition(vec![0.4, 0.6])))).contains("acceptance_by_kind.prose[1]")
        );
        assert!(
            by_kind(Some(Acceptance::Rate(0.9)), Some(Acceptance::Rate(0.4)))
                .validate()
                .is_ok()
        );
    }
}
