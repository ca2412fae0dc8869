//! Python's `random.Random(seed)`, bit-exact, for integer seeds (CPython 3.x, `Modules/_randommodule.c` and
//! `Lib/random.py`).
//!
//! - Seeding: MT19937 `init_by_array` over the little-endian 32-bit words of `abs(seed)` (`[0]` for 0).
//!   The generator is `Mt19937` below, not `rand_mt::Mt` (kept as the reference it is tested against): session
//!   plans seed a fresh generator per session and draw only a few dozen words from it, so seeding dominates.
//!   Here `init_genrand(19650218)`, the fixed start of every `init_by_array`, is computed once per process, and
//!   the first block's twist is applied one word at a time as words are drawn instead of 624 at once (the same
//!   sequence: word `i` of a new block depends only on words already twisted in place, or not yet touched). This
//!   made the 1M-request session benchmark's seeding about half as expensive. Later blocks are twisted whole, as
//!   the reference does, which is faster for long draws ([`PyRandom::fill_random`], the bursty trace).
//! - [`PyRandom::random`]: `(a >> 5, b >> 6)` → `(a·2^26 + b) / 2^53`, a 53-bit float in `[0, 1)`.
//! - [`PyRandom::expovariate`]: `-ln(1 − random()) / lambd`.
//! - [`PyRandom::uniform`], [`PyRandom::gauss`] (Box–Muller with the cached second value),
//!   [`PyRandom::normalvariate`] (Kinderman–Monahan), [`PyRandom::lognormvariate`], [`PyRandom::getrandbits`],
//!   [`PyRandom::randbelow`] / [`PyRandom::choice`] / [`PyRandom::randint`] (rejection sampling on `getrandbits`).
//!
//! Draws that only use `random()` and `getrandbits` are bit-exact everywhere. Those that apply `ln`, `exp`, `sin`,
//! `cos` or `sqrt` are exact wherever Rust's and Python's math library agree, which is always for `sqrt` and the
//! case natively on glibc (both call the same `libm`); on wasm Rust uses its own `libm`, which may rarely differ
//! in the last bit.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// 2^64 as the magnitude of the largest accepted seed.
const TWO_POW_64: u128 = 1 << 64;

/// An integer seed as Python's `random.Random(n)` takes it: the generator depends only on `abs(n)`.
///
/// Accepted in JSON as an integer in `-2^64..=2^64`, or as a float with an integral value in that range (JSON
/// readers turn integers above `u64::MAX` into floats; `2^64` survives exactly, larger ones would not). Stored as
/// the magnitude `abs(n)`; written back as an integer (as `1.8446744073709552e19` for exactly `2^64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct PySeed(u128);

impl PySeed {
    /// The seed `n` (any `u64`).
    pub const fn new(n: u64) -> Self {
        PySeed(n as u128)
    }

    /// The seed whose magnitude is `magnitude`, if it is at most 2^64.
    pub fn from_magnitude(magnitude: u128) -> Option<Self> {
        (magnitude <= TWO_POW_64).then_some(PySeed(magnitude))
    }

    /// `abs(n)`.
    pub fn magnitude(self) -> u128 {
        self.0
    }

    /// The `init_by_array` key: little-endian 32-bit words of `abs(n)`, `[0]` for zero.
    pub fn key(self) -> Vec<u32> {
        let (words, len) = key_words(self.0);
        words[..len].to_vec()
    }
}

impl From<u64> for PySeed {
    fn from(n: u64) -> Self {
        PySeed::new(n)
    }
}

impl fmt::Display for PySeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for PySeed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match u64::try_from(self.0) {
            Ok(v) => s.serialize_u64(v),
            // Only 2^64 itself: exactly representable as a float.
            Err(_) => s.serialize_f64(self.0 as f64),
        }
    }
}

impl<'de> Deserialize<'de> for PySeed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SeedVisitor)
    }
}

struct SeedVisitor;

const SEED_EXPECTED: &str = "an integer seed in -2^64..=2^64";

impl<'de> Visitor<'de> for SeedVisitor {
    type Value = PySeed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SEED_EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<PySeed, E> {
        Ok(PySeed::new(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<PySeed, E> {
        Ok(PySeed(u128::from(v.unsigned_abs())))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<PySeed, E> {
        PySeed::from_magnitude(v).ok_or_else(|| E::custom(format!("seed must be {SEED_EXPECTED} (got {v})")))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<PySeed, E> {
        PySeed::from_magnitude(v.unsigned_abs())
            .ok_or_else(|| E::custom(format!("seed must be {SEED_EXPECTED} (got {v})")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<PySeed, E> {
        let magnitude = v.abs();
        if v.is_finite() && v.fract() == 0.0 && magnitude <= TWO_POW_64 as f64 {
            // Integral and at most 2^64: the conversion is exact.
            Ok(PySeed(magnitude as u128))
        } else {
            Err(E::custom(format!("seed must be {SEED_EXPECTED} (got {v})")))
        }
    }
}

/// The `init_by_array` key of `n`: its little-endian 32-bit words (`[0]` for 0), and how many.
fn key_words(n: u128) -> ([u32; 4], usize) {
    let mut key = [0u32; 4];
    let mut len = 0;
    let mut v = n;
    while v > 0 {
        key[len] = v as u32;
        len += 1;
        v >>= 32;
    }
    (key, len.max(1))
}

const N: usize = 624;
const M: usize = 397;

/// `init_genrand(19650218)`: the state every `init_by_array` starts from. Computed once per process on first use
/// rather than at compile time: as a constant it would put 2.5 KB of incompressible words into the page's wasm.
static INIT_19650218: std::sync::LazyLock<[u32; N]> = std::sync::LazyLock::new(|| {
    let mut s = [0u32; N];
    s[0] = 19_650_218;
    for i in 1..N {
        s[i] = 1_812_433_253u32
            .wrapping_mul(s[i - 1] ^ (s[i - 1] >> 30))
            .wrapping_add(i as u32);
    }
    s
});

/// MT19937 (Matsumoto & Nishimura's reference `genrand_int32`), seeded by `init_by_array`. The first block is
/// twisted lazily, word by word as it is drawn (most generators are session plans that draw a few dozen words);
/// every later block is twisted whole when its first word is drawn, as the reference does (a long draw, like the
/// bursty trace's 200,000 words, then pays a vectorized twist instead of a word-by-word one).
#[derive(Clone)]
struct Mt19937 {
    state: [u32; N],
    /// Next word to output; `N` right after seeding and at the end of every block (a new block starts at 0).
    idx: usize,
    /// How `state` relates to the block being drawn.
    mode: Twist,
}

/// The twisting mode of a [`Mt19937`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Twist {
    /// Just seeded: nothing twisted yet.
    Seeded,
    /// The first block: words `..idx` are twisted, words `idx..` are the seeded state.
    Lazy,
    /// A later block: all of `state` is the twisted block.
    Whole,
}

/// MT19937's tempering of a twisted word.
#[inline]
fn temper(v: u32) -> u32 {
    let mut x = v;
    x ^= x >> 11;
    x ^= (x << 7) & 0x9d2c_5680;
    x ^= (x << 15) & 0xefc6_0000;
    x ^ (x >> 18)
}

/// One step of the twist: the new word from the word itself, the next one and the one `M` ahead.
#[inline]
fn twist(cur: u32, next: u32, far: u32) -> u32 {
    let y = (cur & 0x8000_0000) | (next & 0x7fff_ffff);
    // `MATRIX_A` when y is odd, branch-free (the reference's `mag01[y & 1]`).
    far ^ (y >> 1) ^ (0u32.wrapping_sub(y & 1) & 0x9908_b0df)
}

/// `random()` from two raw words: `(a >> 5, b >> 6)` → `(a·67108864 + b) / 2^53`.
#[inline]
fn random_of(a: u32, b: u32) -> f64 {
    (f64::from(a >> 5) * 67_108_864.0 + f64::from(b >> 6)) * INV_2_POW_53
}

impl Mt19937 {
    /// `init_by_array(key)` for a key of 1 to 4 words (a `u128`).
    fn from_key(key: &[u32]) -> Self {
        let [mt] = Self::from_keys([key]);
        mt
    }

    /// `init_by_array` for `L` keys of the same length (1 to 4 words) at once. Seeding is one long chain of
    /// dependent multiplies per generator (1,246 steps); running `L` chains interleaved lets the CPU overlap them,
    /// so seeding four costs little more than seeding one. Written as straight passes over the state: the
    /// reference's index `i` runs 1..N, wraps to 1 (word 0 taking the last word), and does one more step, in
    /// each of its two loops.
    ///
    /// Each lane keeps its own state array and its chain in scalar registers, on purpose not as one vector of
    /// lanes: the chain's speed is the latency of one step, and a scalar 32-bit multiply has about a third of a
    /// vector one's (x86-64's baseline has no 32-bit lane multiply: two `pmuludq` and shuffles; wasm's
    /// `i32x4.mul` is a vector multiply too). Four scalar chains seed 1.6–2× as fast as the four lanes as one
    /// vector did, natively and as wasm in node alike, for twice the instructions (docs/measurements.md, "engine
    /// model with KV tiers, 1M sessions: the whole command").
    fn from_keys<const L: usize>(keys: [&[u32]; L]) -> [Self; L] {
        let len = keys[0].len();
        debug_assert!((1..=4).contains(&len) && keys.iter().all(|k| k.len() == len));
        // The reference's step `mt[i] = (mt[i] ^ ((mt[i-1] ^ (mt[i-1] >> 30)) · C)) + a`, for every lane: `a` is
        // `key[j] + j` in the first loop and `−i` in the second.
        let step = |mts: &mut [[u32; N]; L], i: usize, prev: &mut [u32; L], mul: u32, add: [u32; L]| {
            for l in 0..L {
                prev[l] = (mts[l][i] ^ (prev[l] ^ (prev[l] >> 30)).wrapping_mul(mul)).wrapping_add(add[l]);
                mts[l][i] = prev[l];
            }
        };
        const MUL1: u32 = 1_664_525;
        const MUL2: u32 = 1_566_083_941;
        // `key[j] + j`, per lane, for j in 0..len.
        let add: [[u32; L]; 4] =
            std::array::from_fn(|j| std::array::from_fn(|l| keys[l].get(j).map_or(0, |&k| k.wrapping_add(j as u32))));
        let init = &*INIT_19650218;
        let mut mts: [[u32; N]; L] = [*init; L];
        let mut prev = [init[0]; L];
        // The key word used at step i is `(i − 1) mod len`; a one-word key (every seed below 2^32) needs no cycling.
        if len == 1 {
            for i in 1..N {
                step(&mut mts, i, &mut prev, MUL1, add[0]);
            }
        } else {
            let mut j = 0usize;
            for i in 1..N {
                step(&mut mts, i, &mut prev, MUL1, add[j]);
                j = if j + 1 == len { 0 } else { j + 1 };
            }
        }
        // At each wrap word 0 takes the last word, which is `prev` already (word 0 is only read as the step's
        // previous word, and ends as 0x80000000).
        step(&mut mts, 1, &mut prev, MUL1, add[(N - 1) % len]);
        for i in 2..N {
            step(&mut mts, i, &mut prev, MUL2, [(i as u32).wrapping_neg(); L]);
        }
        step(&mut mts, 1, &mut prev, MUL2, [1u32.wrapping_neg(); L]);
        mts.map(|mut state| {
            state[0] = 0x8000_0000;
            Mt19937 {
                state,
                idx: N,
                mode: Twist::Seeded,
            }
        })
    }

    /// `genrand_int32`.
    #[inline]
    fn next_u32(&mut self) -> u32 {
        if self.idx >= N {
            self.next_block();
        }
        let i = self.idx;
        self.idx = i + 1;
        let v = if self.mode == Twist::Whole {
            self.state[i]
        } else {
            self.twist_word(i)
        };
        temper(v)
    }

    /// Start the next block: the first one lazily, later ones twisted whole.
    fn next_block(&mut self) {
        if self.mode == Twist::Seeded {
            self.mode = Twist::Lazy;
        } else {
            // Lazy or whole, every word of the last block is twisted: twist the next block from it.
            self.twist_block();
            self.mode = Twist::Whole;
        }
        self.idx = 0;
    }

    /// Twist word `i` of the first block in place. It reads word `i + 1` (not yet twisted; for the last word, word
    /// 0, already twisted) and word `i + M` (not yet twisted below `N − M`, twisted above): exactly what the
    /// reference's block twist reads.
    #[inline]
    fn twist_word(&mut self, i: usize) -> u32 {
        let next = if i + 1 < N { i + 1 } else { 0 };
        let far = if i < N - M { i + M } else { i + M - N };
        let v = twist(self.state[i], self.state[next], self.state[far]);
        self.state[i] = v;
        v
    }

    /// The reference's block twist (`genrand_int32` when `mti >= N`), in its three loops.
    fn twist_block(&mut self) {
        let mt = &mut self.state;
        for i in 0..N - M {
            mt[i] = twist(mt[i], mt[i + 1], mt[i + M]);
        }
        for i in N - M..N - 1 {
            mt[i] = twist(mt[i], mt[i + 1], mt[i + M - N]);
        }
        mt[N - 1] = twist(mt[N - 1], mt[0], mt[M - 1]);
    }

    /// `random()` `out.len()` times, in order. Within a whole-twisted block the words are read in a plain loop.
    fn fill_random(&mut self, out: &mut [f64]) {
        let mut k = 0;
        while k < out.len() {
            if self.mode == Twist::Whole && self.idx + 2 <= N {
                let pairs = ((N - self.idx) / 2).min(out.len() - k);
                let words = &self.state[self.idx..self.idx + 2 * pairs];
                for (o, w) in out[k..k + pairs].iter_mut().zip(words.chunks_exact(2)) {
                    *o = random_of(temper(w[0]), temper(w[1]));
                }
                self.idx += 2 * pairs;
                k += pairs;
            } else {
                // The first block, a block's end, or a pair across two blocks: word by word.
                let a = self.next_u32();
                let b = self.next_u32();
                out[k] = random_of(a, b);
                k += 1;
            }
        }
    }
}

/// `random.Random(seed)`: a Mersenne Twister seeded and read exactly as CPython does.
#[derive(Clone)]
pub struct PyRandom {
    mt: Mt19937,
    gauss_next: Option<f64>,
}

impl fmt::Debug for PyRandom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyRandom")
            .field("gauss_next", &self.gauss_next)
            .finish_non_exhaustive()
    }
}

/// 2^-53.
const INV_2_POW_53: f64 = 1.0 / 9_007_199_254_740_992.0;

impl PyRandom {
    /// `random.Random(seed)`.
    pub fn new(seed: PySeed) -> Self {
        PyRandom::from_u128(seed.magnitude())
    }

    /// `random.Random(n)` for any non-negative `n` below 2^128 (Python accepts any int; loadshape's session
    /// plans seed with `seed + slot·7919 + inst·104729`, which may pass 2^64). Seeding allocates nothing.
    pub fn from_u128(n: u128) -> Self {
        let (key, len) = key_words(n);
        PyRandom {
            mt: Mt19937::from_key(&key[..len]),
            gauss_next: None,
        }
    }

    /// `[random.Random(n) for n in ns]`, seeded side by side where the keys have the same length (see
    /// `Mt19937::from_keys`): the same generators as [`Self::from_u128`] one by one, faster.
    pub fn from_u128s(ns: [u128; 4]) -> [Self; 4] {
        let keys = ns.map(key_words);
        let lens = keys.map(|(_, len)| len);
        if lens.iter().all(|&l| l == lens[0]) {
            let [a, b, c, d] = &keys;
            let mts = Mt19937::from_keys([&a.0[..a.1], &b.0[..b.1], &c.0[..c.1], &d.0[..d.1]]);
            mts.map(|mt| PyRandom { mt, gauss_next: None })
        } else {
            ns.map(PyRandom::from_u128)
        }
    }

    /// `random.Random(n)` for a `u64`.
    pub fn from_u64(n: u64) -> Self {
        PyRandom::new(PySeed::new(n))
    }

    /// One raw 32-bit output (`genrand_uint32`).
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        self.mt.next_u32()
    }

    /// `random()`: `(a >> 5, b >> 6)` → `(a·67108864 + b) / 2^53`, in `[0, 1)`.
    #[inline]
    pub fn random(&mut self) -> f64 {
        let a = self.mt.next_u32();
        let b = self.mt.next_u32();
        random_of(a, b)
    }

    /// `[random() for _ in out]`: the same draws as calling [`Self::random`] `out.len()` times, faster for long runs.
    pub fn fill_random(&mut self, out: &mut [f64]) {
        self.mt.fill_random(out);
    }

    /// `expovariate(lambd)` = `-log(1.0 - random()) / lambd` (mean `1 / lambd`).
    #[inline]
    pub fn expovariate(&mut self, lambd: f64) -> f64 {
        -(1.0 - self.random()).ln() / lambd
    }

    /// `uniform(a, b)` = `a + (b - a) * random()`.
    pub fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.random()
    }

    /// `gauss(mu, sigma)`: Box–Muller; the second value of each pair is cached for the next call, as CPython does.
    pub fn gauss(&mut self, mu: f64, sigma: f64) -> f64 {
        let z = match self.gauss_next.take() {
            Some(z) => z,
            None => {
                let x2pi = self.random() * std::f64::consts::TAU;
                let g2rad = (-2.0 * (1.0 - self.random()).ln()).sqrt();
                self.gauss_next = Some(x2pi.sin() * g2rad);
                x2pi.cos() * g2rad
            }
        };
        mu + z * sigma
    }

    /// `normalvariate(mu, sigma)`: Kinderman–Monahan ratio of uniforms, as CPython.
    pub fn normalvariate(&mut self, mu: f64, sigma: f64) -> f64 {
        // NV_MAGICCONST = 4 * exp(-0.5) / sqrt(2.0)
        let magic = 4.0 * (-0.5f64).exp() / 2.0f64.sqrt();
        loop {
            let u1 = self.random();
            let u2 = 1.0 - self.random();
            let z = magic * (u1 - 0.5) / u2;
            let zz = z * z / 4.0;
            if zz <= -u2.ln() {
                return mu + z * sigma;
            }
        }
    }

    /// `lognormvariate(mu, sigma)` = `exp(normalvariate(mu, sigma))`.
    pub fn lognormvariate(&mut self, mu: f64, sigma: f64) -> f64 {
        self.normalvariate(mu, sigma).exp()
    }

    /// `getrandbits(k)` for `k <= 64`: 32-bit words filled least significant first, the last one shifted down.
    pub fn getrandbits(&mut self, k: u32) -> u64 {
        debug_assert!(k <= 64);
        if k == 0 {
            return 0;
        }
        if k <= 32 {
            return u64::from(self.mt.next_u32() >> (32 - k));
        }
        let low = u64::from(self.mt.next_u32());
        let high = u64::from(self.mt.next_u32() >> (64 - k));
        low | (high << 32)
    }

    /// `_randbelow(n)`: uniform in `0..n` by rejection on `getrandbits(n.bit_length())`; 0 for `n == 0`.
    pub fn randbelow(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let k = 64 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `randint(a, b)`: uniform in `a..=b` (`a <= b`), = `a + _randbelow(b - a + 1)`.
    pub fn randint(&mut self, a: i64, b: i64) -> i64 {
        let span = (b as i128 - a as i128 + 1).clamp(0, u64::MAX as i128) as u64;
        (a as i128 + self.randbelow(span) as i128) as i64
    }

    /// `choice(seq)`: `seq[_randbelow(len(seq))]`; `None` for an empty slice (Python raises `IndexError`).
    pub fn choice<'a, T>(&mut self, seq: &'a [T]) -> Option<&'a T> {
        if seq.is_empty() {
            return None;
        }
        let i = self.randbelow(seq.len() as u64) as usize;
        seq.get(i)
    }
}

/// Python's `round(x, ndigits)` for a float: the decimal with `ndigits` places nearest to the exact binary value of
/// `x`, ties to even (`py_round(7.625, 2) == 7.62`, `py_round(2.675, 2) == 2.67` because 2.675 is stored as
/// 2.67499999…), read back as the nearest float. Non-finite `x` is returned as is.
///
/// Fast path: with `y = fl(x·10^n)` and `|y| < 2^40`, `|y − x·10^n| <= ulp(y)/2 <= 2^-13`, so when `y` is farther
/// than `2^-11` from a half-integer the exact product rounds the same way as `y`, and `round(y) / 10^n` is the
/// correctly rounded quotient of two exact integers — the float nearest the decimal, as Python's `strtod` gives.
/// Otherwise (near a tie, or large values) the exact value is formatted with Rust's correctly rounded, ties-to-even
/// decimal formatting and parsed back.
pub fn py_round(x: f64, ndigits: u32) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let scale = match ndigits {
        0 => 1.0,
        1 => 10.0,
        2 => 100.0,
        3 => 1_000.0,
        4 => 10_000.0,
        5 => 100_000.0,
        6 => 1_000_000.0,
        _ => return py_round_exact(x, ndigits),
    };
    let y = x * scale;
    let ay = y.abs();
    if ay < 1_099_511_627_776.0 {
        // The nearest integer by adding and taking away 2^52 (round/floor are library calls on baseline x86-64):
        // exact for |y| < 2^52; a tie, where the sum's rounding to even would decide, fails the check below.
        // `|y| − r` is exact too (both below 2^40, within 1 of each other).
        const TWO_52: f64 = 4_503_599_627_370_496.0;
        let r = (ay + TWO_52) - TWO_52;
        if (ay - r).abs() < 0.5 - 1.0 / 2048.0 {
            // copysign keeps round(-0.001, 2) == -0.0.
            return r.copysign(y) / scale;
        }
    }
    py_round_exact(x, ndigits)
}

/// The slow, always-exact path of [`py_round`]: correctly rounded decimal formatting, then parsing.
fn py_round_exact(x: f64, ndigits: u32) -> f64 {
    let text = format!("{:.*}", ndigits as usize, x);
    // Rust's formatting of a finite float always parses back.
    text.parse::<f64>().unwrap_or(x)
}

#[cfg(test)]
mod mt_tests {
    use super::*;

    /// The lazy-twist generator equals `rand_mt` (the maintained reference) word for word, across several blocks,
    /// for keys of every length the seeds produce.
    #[test]
    fn equals_rand_mt() {
        for key in [
            &[0u32][..],
            &[42],
            &[u32::MAX],
            &[5489, 1],
            &[1, 2, 3],
            &[0xdead_beef, 0, 7, 0x8000_0000],
        ] {
            let mut ours = Mt19937::from_key(key);
            let mut reference = rand_mt::Mt::new_with_key(key.iter().copied());
            for n in 0..3 * N + 5 {
                assert_eq!(ours.next_u32(), reference.next_u32(), "key {key:?}, word {n}");
            }
        }
    }

    /// `fill_random` draws what `random()` one by one draws, from a fresh generator, across block ends, and after an
    /// odd number of raw words (a pair that straddles two blocks).
    #[test]
    fn fill_random_equals_random() {
        for (seed, skip_words) in [(0u128, 0usize), (42, 1), (7, 623), (1 << 40, 624), (3, 1000), (9, 1249)] {
            let mut one = PyRandom::from_u128(seed);
            let mut bulk = PyRandom::from_u128(seed);
            for _ in 0..skip_words {
                assert_eq!(one.next_u32(), bulk.next_u32());
            }
            for len in [1usize, 5, 256, 311, 312, 313, 1000, 0, 2] {
                let mut out = vec![0.0; len];
                bulk.fill_random(&mut out);
                for (k, v) in out.iter().enumerate() {
                    assert_eq!(
                        v.to_bits(),
                        one.random().to_bits(),
                        "seed {seed}, skip {skip_words}, len {len}, {k}"
                    );
                }
            }
            assert_eq!(one.next_u32(), bulk.next_u32());
        }
    }

    /// Seeding side by side gives the generators seeding one by one gives, with equal and mixed key lengths.
    #[test]
    fn batch_seeding_equals_single() {
        for ns in [
            [0u128, 1, 2, 3],
            [42, 7961, 112_690, 1 << 40],
            [u128::from(u64::MAX), 1 << 64, (1 << 64) + 7919, u128::MAX],
        ] {
            let mut batch = PyRandom::from_u128s(ns);
            for (rng, n) in batch.iter_mut().zip(ns) {
                let mut one = PyRandom::from_u128(n);
                for _ in 0..700 {
                    assert_eq!(rng.next_u32(), one.next_u32(), "seed {n}");
                }
            }
        }
    }

    /// The fast path of `py_round` agrees bit for bit with the exact one (formatting and parsing back) for values
    /// of every magnitude, both signs and each `ndigits` it serves, and on values within a few ulps of a tie.
    #[test]
    fn py_round_fast_path_equals_the_exact_one() {
        let mut rng = PyRandom::from_u64(2026);
        let mut checked = 0u64;
        for n in 0..=6u32 {
            let scale = 10f64.powi(n as i32);
            for _ in 0..40_000 {
                // Magnitudes from 1e-9 to 1e13, so some products pass 2^40 and take the exact path.
                let mag = 10f64.powf(rng.uniform(-9.0, 13.0));
                let sign = if rng.random() < 0.5 { -1.0 } else { 1.0 };
                let x = sign * mag * rng.random();
                assert_eq!(
                    py_round(x, n).to_bits(),
                    py_round_exact(x, n).to_bits(),
                    "round({x:?}, {n})"
                );
                // Near a tie: a half-integer over the scale, nudged by a few ulps either way.
                let tie = ((rng.random() * 1e6).floor() + 0.5) / scale * sign;
                let mut t = tie;
                for _ in 0..4 {
                    t = f64::from_bits(t.to_bits() - 1);
                }
                for _ in 0..9 {
                    assert_eq!(
                        py_round(t, n).to_bits(),
                        py_round_exact(t, n).to_bits(),
                        "round({t:?}, {n})"
                    );
                    t = f64::from_bits(t.to_bits() + 1);
                    checked += 1;
                }
            }
        }
        assert!(checked > 2_000_000);
        for (x, n) in [
            (0.0, 2),
            (-0.0, 2),
            (-0.001, 2),
            (0.004_999, 2),
            (-0.005_001, 2),
            (1e-300, 3),
        ] {
            assert_eq!(
                py_round(x, n).to_bits(),
                py_round_exact(x, n).to_bits(),
                "round({x:?}, {n})"
            );
        }
    }
}
