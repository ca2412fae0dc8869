//! Deterministic filler text for live replay, with calibrated tokens per word.
//!
//! A replayed session needs a base context of about `base_tokens` tokens and a tool output of about `tool_tokens`
//! per step. The text is whitespace-separated words drawn from two small corpora, [`PROSE`] and [`CODE`] (the
//! seed's `agent_replay.py` corpora), and the word count is `floor(tokens / tokens_per_word)` with the ratios the
//! seed MEASURED on a real tokenizer: prose 1.125 and code 1.80 tokens per word ([`FillerKind::tokens_per_word`]).
//! (The seed's first guess, 1/1.6 for both, was off by 30 % in opposite directions for the two kinds.)
//!
//! # Two seeds, deliberately
//! The *structure* seed fixes the shape of a run (which rung, how many steps, gen lengths: see
//! `workload::session`); the *content nonce* makes the words unique per run, so a re-run is not served from the
//! previous run's prefix-cache pages. The seed's `--seed` set both to the same value, so two arms with the same
//! seed sent identical content; here they are separate inputs and neither is derived from the other. The word
//! COUNT depends only on `tokens` and the kind, so changing the nonce changes the words, never the length.
//!
//! # API
//! ```
//! use shared::filler::{Filler, FillerKind};
//! let filler = Filler::new(42, 7); // structure seed, content nonce (e.g. the run's start time)
//! let mut stream = filler.stream(3, 0); // one independent stream per (slot, instance)
//! let base = stream.text(4000, FillerKind::for_slot(3)); // ≈ 4000 tokens of base context
//! let tool = stream.text(900, FillerKind::Code); // ≈ 900 tokens of tool output
//! assert_eq!(base.split_whitespace().count(), FillerKind::Code.words_for_tokens(4000));
//! # let _ = tool;
//! ```
//! - [`Filler::new`]`(structure_seed, nonce)` and [`Filler::stream`]`(slot, inst)` → a [`FillerStream`], an
//!   independent deterministic stream per (slot, instance), so concurrent sessions never share a generator and
//!   the text of one session does not depend on how the others interleave.
//! - [`FillerStream::text`]`(tokens, kind)`, or the free function [`text`]`(tokens, kind, &mut rng)` for a caller
//!   that owns its generator (anything implementing [`WordRng`]: [`FillerRng`], `rand_mt::Mt`, `rand_mt::Mt64`).
//! - Text ends with a single space when non-empty (like the seed), so pieces concatenate into separate words.

use std::fmt;

/// The seed's prose corpus (words are drawn from its whitespace split).
pub const PROSE: &str = "The maintainers agreed that the loader should verify every shard before the model is placed, \
because a silent mismatch costs more than a refused boot. The change touches the manifest reader, the placement \
planner and the two tests that cover them. ";

/// The seed's code corpus (words are drawn from its whitespace split, so indentation does not matter).
pub const CODE: &str = "def resolve(self, name, *, strict=True):\n    entry = self._index.get(name)\n    if entry is None:\n        \
if strict:\n            raise KeyError(name)\n        return None\n    return entry.load()\n\n";

/// Which corpus a piece of filler is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FillerKind {
    /// Ordinary English: 1.125 tokens per word.
    Prose,
    /// Punctuation-dense Python: 1.80 tokens per word.
    Code,
}

impl FillerKind {
    /// Tokens per whitespace-separated word, measured by the seed (R597's records).
    pub const fn tokens_per_word(self) -> f64 {
        match self {
            Self::Prose => 1.125,
            Self::Code => 1.80,
        }
    }

    /// Words to emit for `tokens` tokens: `floor(tokens / tokens_per_word)`, computed exactly in integers
    /// (1.125 = 9/8, 1.80 = 9/5).
    pub const fn words_for_tokens(self, tokens: u64) -> usize {
        let words = match self {
            Self::Prose => tokens as u128 * 8 / 9,
            Self::Code => tokens as u128 * 5 / 9,
        };
        words as usize
    }

    /// Words to emit for `tokens` designed tokens when the target's tokenizer counts `scale` of its tokens per
    /// designed token of this kind ([`TokenScale`]): `floor(tokens / (tokens_per_word · scale))`. With a scale of
    /// exactly 1 this is [`Self::words_for_tokens`] to the word (so unscaled runs send the seed's text).
    pub fn words_for_scaled_tokens(self, tokens: u64, scale: f64) -> usize {
        if scale == 1.0 || !scale.is_finite() || scale <= 0.0 {
            return self.words_for_tokens(tokens);
        }
        // The nudge keeps an exact quotient (9000 / (1.8 · 0.8) = 6250) from flooring one below on rounding.
        (tokens as f64 / (self.tokens_per_word() * scale) + 1e-9).floor() as usize
    }

    /// The seed's choice for a session's base context: code for odd slots, prose for even ones.
    pub const fn for_slot(slot: u32) -> Self {
        if slot % 2 == 1 { Self::Code } else { Self::Prose }
    }
}

impl fmt::Display for FillerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prose => "prose",
            Self::Code => "code",
        })
    }
}

/// Server tokens per designed token, per filler kind: what the target's tokenizer makes of text sized with
/// [`FillerKind::tokens_per_word`] (measured before a live run; see docs/replay.md "Tokenizer matching"). Filler of
/// `tokens` designed tokens gets `1 / ratio` times the words, so the server counts about `tokens`. The default,
/// [`TokenScale::ONE`], changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenScale {
    pub prose: f64,
    pub code: f64,
}

impl Default for TokenScale {
    fn default() -> Self {
        Self::ONE
    }
}

impl TokenScale {
    /// No scaling: the seed's word counts.
    pub const ONE: TokenScale = TokenScale { prose: 1.0, code: 1.0 };

    /// A scale from measured ratios; each must be finite and > 0.
    pub fn new(prose: f64, code: f64) -> Result<TokenScale, String> {
        for (name, r) in [("prose", prose), ("code", code)] {
            if !(r.is_finite() && r > 0.0) {
                return Err(format!("the {name} token ratio must be a number > 0 (got {r})"));
            }
        }
        Ok(TokenScale { prose, code })
    }

    /// The ratio of `kind`.
    pub const fn of(&self, kind: FillerKind) -> f64 {
        match kind {
            FillerKind::Prose => self.prose,
            FillerKind::Code => self.code,
        }
    }

    /// Words for `tokens` designed tokens of `kind` under this scale.
    pub fn words(&self, tokens: u64, kind: FillerKind) -> usize {
        kind.words_for_scaled_tokens(tokens, self.of(kind))
    }
}

/// A source of 64-bit random words for [`text`].
pub trait WordRng {
    fn next_word_u64(&mut self) -> u64;
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, deterministic on every target. Used for filler only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillerRng {
    state: u64,
}

impl FillerRng {
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }
}

const fn splitmix_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl WordRng for FillerRng {
    fn next_word_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix_mix(self.state)
    }
}

impl WordRng for rand_mt::Mt64 {
    fn next_word_u64(&mut self) -> u64 {
        self.next_u64()
    }
}

impl WordRng for rand_mt::Mt {
    fn next_word_u64(&mut self) -> u64 {
        self.next_u64()
    }
}

/// The corpus as the seed used it: `corpus.split()`, split once per process (replay draws filler for every
/// request).
fn corpus_vec(kind: FillerKind) -> &'static [&'static str] {
    static PROSE_WORDS: std::sync::LazyLock<Vec<&'static str>> =
        std::sync::LazyLock::new(|| PROSE.split_whitespace().collect());
    static CODE_WORDS: std::sync::LazyLock<Vec<&'static str>> =
        std::sync::LazyLock::new(|| CODE.split_whitespace().collect());
    match kind {
        FillerKind::Prose => &PROSE_WORDS,
        FillerKind::Code => &CODE_WORDS,
    }
}

/// About `tokens` tokens of `kind` filler: [`FillerKind::words_for_tokens`] words drawn uniformly (with
/// replacement) from the corpus, joined by single spaces, with a trailing space. Empty for `tokens == 0`.
pub fn text<R: WordRng + ?Sized>(tokens: u64, kind: FillerKind, rng: &mut R) -> String {
    words(kind.words_for_tokens(tokens), kind, rng)
}

/// [`text`] with `n` words exactly.
pub fn words<R: WordRng + ?Sized>(n: usize, kind: FillerKind, rng: &mut R) -> String {
    if n == 0 {
        return String::new();
    }
    let words = corpus_vec(kind);
    let len = words.len() as u128;
    let mut out = String::with_capacity(n * 8);
    for _ in 0..n {
        // Multiply-shift maps a 64-bit word onto 0..len (bias < len / 2^64, irrelevant for filler).
        let idx = ((u128::from(rng.next_word_u64()) * len) >> 64) as usize;
        out.push_str(words[idx]);
        out.push(' ');
    }
    out
}

/// `n` words of `kind` in whole shuffled passes over the corpus: each pass is a fresh random order of every corpus
/// word once (Fisher–Yates from `rng`), the last pass cut short. Any tokenizer that counts words one by one counts
/// the same tokens for every whole pass, so the count of such text varies only by the words of its last pass, not
/// by the luck of the draw: what trace replay's blocks and tokenizer matching's samples use. The first `k` words
/// of a stream are the same whatever `n ≥ k` is asked.
pub fn balanced_words<R: WordRng + ?Sized>(n: usize, kind: FillerKind, rng: &mut R) -> String {
    let words = corpus_vec(kind);
    let mut out = String::with_capacity(n * 8);
    let mut order: Vec<usize> = (0..words.len()).collect();
    let mut left = n;
    while left > 0 {
        for i in (1..order.len()).rev() {
            let j = ((u128::from(rng.next_word_u64()) * (i as u128 + 1)) >> 64) as usize;
            order.swap(i, j);
        }
        for &k in order.iter().take(left) {
            out.push_str(words[k]);
            out.push(' ');
        }
        left = left.saturating_sub(order.len());
    }
    out
}

/// A run's filler generator: a structure seed, a content nonce and a [`TokenScale`]. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Filler {
    pub structure_seed: u64,
    pub nonce: u64,
    /// Sizes every piece for the target's tokenizer; [`TokenScale::ONE`] from [`Filler::new`].
    pub scale: TokenScale,
}

impl Filler {
    pub const fn new(structure_seed: u64, nonce: u64) -> Self {
        Self {
            structure_seed,
            nonce,
            scale: TokenScale::ONE,
        }
    }

    /// The same generator with its pieces sized by `scale` (the words drawn are the same stream, fewer or more).
    pub const fn with_scale(self, scale: TokenScale) -> Self {
        Self { scale, ..self }
    }

    /// The independent stream of session `(slot, inst)`. Its seed mixes all four inputs through SplitMix64, so
    /// neighbouring slots, instances or nonces give unrelated streams.
    pub fn stream(&self, slot: u32, inst: u32) -> FillerStream {
        let mut h = splitmix_mix(self.structure_seed ^ 0x6c6f_6164_7368_6170); // "loadshap"
        h = splitmix_mix(h ^ self.nonce.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        h = splitmix_mix(h ^ (u64::from(slot) << 32 | u64::from(inst)));
        FillerStream {
            rng: FillerRng::new(h),
            scale: self.scale,
        }
    }
}

/// One session's filler stream (see [`Filler::stream`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FillerStream {
    rng: FillerRng,
    scale: TokenScale,
}

impl FillerStream {
    /// The next `tokens` designed tokens of `kind` filler from this stream (sized by the filler's scale).
    pub fn text(&mut self, tokens: u64, kind: FillerKind) -> String {
        words(self.scale.words(tokens, kind), kind, &mut self.rng)
    }

    /// [`Self::text`] in whole shuffled passes over the corpus ([`balanced_words`]): a tokenizer counts the same
    /// tokens of it whatever the draw, up to the words of its last pass (what tokenizer-matched sessions send).
    pub fn balanced_text(&mut self, tokens: u64, kind: FillerKind) -> String {
        balanced_words(self.scale.words(tokens, kind), kind, &mut self.rng)
    }

    /// The underlying generator, for a caller that wants to draw other content from the same stream.
    pub fn rng(&mut self) -> &mut FillerRng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpora_are_the_seeds() {
        assert_eq!(corpus_vec(FillerKind::Prose).len(), 41);
        assert_eq!(corpus_vec(FillerKind::Code).len(), 20);
    }

    #[test]
    fn word_counts_follow_the_calibration() {
        // The seed: int(tokens / TOK_PER_WORD[kind]).
        for tokens in [0u64, 1, 2, 8, 9, 100, 2020, 3500, 20_500, 1_000_003] {
            assert_eq!(
                FillerKind::Prose.words_for_tokens(tokens),
                (tokens as f64 / 1.125) as usize
            );
            assert_eq!(
                FillerKind::Code.words_for_tokens(tokens),
                (tokens as f64 / 1.80) as usize
            );
        }
        let mut rng = FillerRng::new(1);
        let t = text(4500, FillerKind::Prose, &mut rng);
        assert_eq!(t.split_whitespace().count(), 4000);
        assert!(t.ends_with(' ') && !t.ends_with("  "));
        assert_eq!(text(0, FillerKind::Code, &mut rng), "");
        assert_eq!(text(1, FillerKind::Code, &mut rng), "");
    }

    #[test]
    fn same_seed_and_nonce_same_text_different_nonce_different_text() {
        let a = Filler::new(42, 1).stream(3, 0).text(5000, FillerKind::Code);
        let b = Filler::new(42, 1).stream(3, 0).text(5000, FillerKind::Code);
        let c = Filler::new(42, 2).stream(3, 0).text(5000, FillerKind::Code);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.split_whitespace().count(), c.split_whitespace().count());
        // Other slots, instances and structure seeds are different streams too.
        assert_ne!(a, Filler::new(42, 1).stream(4, 0).text(5000, FillerKind::Code));
        assert_ne!(a, Filler::new(42, 1).stream(3, 1).text(5000, FillerKind::Code));
        assert_ne!(a, Filler::new(43, 1).stream(3, 0).text(5000, FillerKind::Code));
    }

    #[test]
    fn every_word_is_drawn_roughly_uniformly() {
        let mut rng = FillerRng::new(9);
        let t = text(90_000, FillerKind::Code, &mut rng);
        let n = t.split_whitespace().count() as f64;
        let returns = t.split_whitespace().filter(|w| *w == "return").count() as f64;
        // "return" is 2 of the 20 code words.
        assert!((returns / n - 0.1).abs() < 0.01, "{}", returns / n);
    }

    /// A scale of exactly 1 sends the seed's words; a measured ratio r sends 1/r as many (the same stream's
    /// first words).
    #[test]
    fn token_scale_resizes_and_one_changes_nothing() {
        for tokens in [0u64, 1, 9, 2020, 20_500] {
            for kind in [FillerKind::Prose, FillerKind::Code] {
                assert_eq!(TokenScale::ONE.words(tokens, kind), kind.words_for_tokens(tokens));
            }
        }
        let plain = Filler::new(4, 5).stream(1, 0).text(9000, FillerKind::Prose);
        let one = Filler::new(4, 5)
            .with_scale(TokenScale::ONE)
            .stream(1, 0)
            .text(9000, FillerKind::Prose);
        assert_eq!(plain, one);
        let scale = TokenScale::new(1.6, 0.8).unwrap_or_else(|e| panic!("{e}"));
        let prose = Filler::new(4, 5)
            .with_scale(scale)
            .stream(1, 0)
            .text(9000, FillerKind::Prose);
        assert_eq!(prose.split_whitespace().count(), 5000); // 9000 / (1.125 · 1.6)
        assert!(plain.starts_with(&prose));
        let code = Filler::new(4, 5)
            .with_scale(scale)
            .stream(1, 0)
            .text(9000, FillerKind::Code);
        assert_eq!(code.split_whitespace().count(), 6250); // 9000 / (1.8 · 0.8)
        assert!(TokenScale::new(0.0, 1.0).is_err());
        assert!(TokenScale::new(1.0, f64::NAN).is_err());
    }

    #[test]
    fn external_generators_work() {
        let mut mt = rand_mt::Mt64::new(5);
        let a = text(100, FillerKind::Prose, &mut mt);
        let mut mt = rand_mt::Mt64::new(5);
        assert_eq!(a, text(100, FillerKind::Prose, &mut mt));
        assert_eq!(FillerKind::for_slot(0), FillerKind::Prose);
        assert_eq!(FillerKind::for_slot(1), FillerKind::Code);
    }
}
