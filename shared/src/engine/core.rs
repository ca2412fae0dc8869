//! The iteration-level engine: vLLM v1's scheduler over the block-counted KV cache of `kv`.
//!
//! Each step: running requests first, in admission order (a decoding sequence takes 1 token of the budget, a
//! prefilling one a chunk of up to the remaining budget); if the KV cache cannot hold a running request's new
//! tokens, the most recently admitted running request is preempted (its blocks freed, cached ones kept in the
//! prefix cache; it goes back to the front of the queue and recomputes). Then, if nothing was preempted, waiting
//! requests are admitted FCFS while `max_num_seqs`, the token budget and the KV cache allow; each admission looks up
//! the prefix cache (hits are capped at `prompt − 1` tokens, as vLLM always computes the last token). A prefill that
//! completes samples the first token in the same step; a decoding sequence computes one token and samples the next.
//!
//! Between events (an admission, a prefill chunk, a finish, an arrival, the KV cache filling up) every step is a
//! pure-decode step of the same batch whose duration grows linearly with context, so `Engine::advance` executes
//! such a stretch in closed form, not token by token. Decoders that nothing else depends on are advanced as a group
//! (`Lazy`), so a stretch costs O(1) plus the requests that finish or need attention, not O(running).

use std::collections::{HashMap, VecDeque};

use super::kv::{Kv, NO_TIER, NONE};
use super::profile::{EngineProfile, MAX_KV_TIERS, Scheduler, TierWrite};
use super::spec::{KIND_ANY, SpecState};
use crate::deploy::roofline::{RooflineCost, StepShape};

/// Tokens restored from each tier (by tier index).
pub(crate) type PerTier = [u64; MAX_KV_TIERS];

/// A request's id, stable while it is known to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ReqId(pub u64);

impl ReqId {
    fn new(idx: u32, generation: u32) -> Self {
        ReqId((u64::from(generation) << 32) | u64::from(idx))
    }
    fn idx(self) -> u32 {
        self.0 as u32
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Free,
    Waiting,
    Running,
    Done,
}

/// Why a request's prompt tokens missed the prefix cache, tokens (see [`super::diagnostics::CacheMisses`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct MissSplit {
    pub cold: u64,
    pub evicted_idle: u64,
    pub evicted_queued: u64,
    pub other: u64,
    /// Evicted from tier N: computed before, then dropped by the deepest tier that held it.
    pub tier: PerTier,
}

#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub generation: u32,
    pub state: State,
    pub chain: u32,
    pub prompt: u32,
    pub output: u32,
    /// Tokens to prefill before the next token (prompt, plus generated tokens after a preemption).
    pub p_eff: u32,
    /// Tokens with KV computed.
    pub t: u32,
    pub generated: u32,
    /// Blocks held that are not part of a chain's cached prefix.
    pub private: u64,
    pub arrival_ms: f64,
    pub admit_ms: f64,
    pub first_token_ms: f64,
    pub last_token_ms: f64,
    pub finish_ms: f64,
    pub cached_tokens: u32,
    pub reach_at_arrival: u32,
    pub miss: MissSplit,
    pub preemptions: u32,
    pub recomputed_tokens: u64,
    /// Global step-log index of the first step after the current decode run began.
    pub itl_from: u64,
    /// End of the last decode run (set at finish).
    pub itl_to: u64,
    /// Closed decode runs `[from, to)` and the long gaps across preemptions (rare; empty otherwise).
    pub itl_runs: Vec<(u64, u64)>,
    pub itl_gaps: Vec<f64>,
    /// Caller's cookie.
    pub tag: u64,
    pub release_chain: bool,
    /// Tokens emitted in the last step this request was scheduled in.
    pub last_emit: u32,
    /// Admission order among running requests (the order of `Engine::running`).
    pub seq: u64,
    /// Advanced lazily (see [`Lazy`]): `t`, `generated`, `private` and `last_token_ms` hold their values at decode
    /// step `lz_d0` of the lazy clock.
    pub lazy: bool,
    pub lz_d0: u64,
    /// The slot it runs in ([`Scheduler::LlamaCpp`] only; 0 otherwise).
    pub slot: u32,
    /// Speculative decoding only: steps that emitted tokens (stream frames), decode steps that drafted, drafted and
    /// accepted draft tokens.
    pub frames: u32,
    pub spec_steps: u32,
    pub spec_drafted: u32,
    pub spec_accepted: u32,
    /// Its prompt's KV came from another instance (prefill/decode disaggregation): admitted, it decodes at once.
    pub imported: bool,
    /// Speculative decoding: the request's number (its stream of acceptance draws) and its table index: its
    /// content kind (`spec::KIND_*`) and, under `acceptance_spread`, its spread class (`SpecState::class_kind`).
    pub spec_id: u64,
    pub kind: u8,
    /// Lazy only: the lazy step at which it finishes, and under speculative decoding its tally from `lz_d0` to then.
    pub lz_fin: u64,
    pub lz_tally: SpecTally,
}

/// A lazy decoder's path under speculative decoding, over some of its steps: tokens emitted, frames (steps), steps
/// that drafted, drafted and accepted tokens, and the last step's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SpecTally {
    pub tokens: u32,
    pub frames: u32,
    pub steps: u32,
    pub drafted: u32,
    pub accepted: u32,
    pub last: u32,
}

/// What the lazy decoders do in one lazy step under speculative decoding (see [`Lazy::ring`]): tokens emitted,
/// blocks they newly need, drafted positions short of `k` (sequences near their end draft fewer), and the
/// attention those missing positions would have had (`(k − v)(c + 1) + (k(k+1) − v(v+1))/2` for `v` drafted at
/// context `c`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SpecSlot {
    emit: u32,
    blocks: u32,
    short: u32,
    acorr: u64,
}

/// Tokens emitted and blocks newly needed as one word (`emit` in the low 32 bits, `blocks` in the high ones), so
/// that a step of a path adds both with one addition: neither sum reaches 2³² (a slot sums one step of each lazy
/// decoder, at most `k + 1` tokens each), so no carry crosses between them.
#[inline]
fn emit_blocks(emit: u32, blocks: u32) -> u64 {
    u64::from(emit) | (u64::from(blocks) << 32)
}

/// The ring of [`Lazy`], a [`SpecSlot`] per lazy step stored by field: the word of [`emit_blocks`] that every step of
/// every path adds to, and `short` and `acorr`, which only the last steps of paths touch (`acorr` is 0 wherever
/// `short` is 0, so emptying a slot clears them only where `short` is not).
#[derive(Debug, Clone, Default, PartialEq)]
struct SpecRing {
    eb: Vec<u64>,
    short: Vec<u32>,
    acorr: Vec<u64>,
}

impl SpecRing {
    fn new(len: usize) -> Self {
        SpecRing {
            eb: vec![0; len],
            short: vec![0; len],
            acorr: vec![0; len],
        }
    }
    #[inline]
    fn len(&self) -> usize {
        self.eb.len()
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.eb.is_empty()
    }
    #[inline]
    fn mask(&self) -> u64 {
        self.eb.len() as u64 - 1
    }
    /// The slot at index `i`.
    #[inline]
    fn get(&self, i: usize) -> SpecSlot {
        let eb = self.eb[i];
        SpecSlot {
            emit: eb as u32,
            blocks: (eb >> 32) as u32,
            short: self.short[i],
            acorr: self.acorr[i],
        }
    }
    /// The slot at index `i`, emptied (the step is done): its tokens.
    #[inline]
    fn take_emit(&mut self, i: usize) -> u32 {
        let emit = self.eb[i] as u32;
        self.eb[i] = 0;
        if self.short[i] != 0 {
            self.short[i] = 0;
            self.acorr[i] = 0;
        }
        emit
    }
    #[inline]
    fn set(&mut self, i: usize, s: SpecSlot) {
        self.eb[i] = emit_blocks(s.emit, s.blocks);
        self.short[i] = s.short;
        self.acorr[i] = s.acorr;
    }
}

/// One stretch of identical pure-decode steps (or a single step): `k` durations evenly spaced from `lo` to `hi`
/// (`a, a + b, …, a + b·(k−1)`), as the tuple `(lo, hi, k)` the ITL quantiles read.
pub(crate) type LogEntry = (f64, f64, u64);

/// A scheduled entry of the current step.
#[derive(Debug, Clone, Copy)]
struct Sched {
    idx: u32,
    tokens: u32,
    prefill: bool,
    /// The request's computed tokens, chain and output tokens still to generate, as scheduled (copied here so the
    /// passes over the batch read one small array, not the request table).
    t: u32,
    chain: u32,
    left: u32,
    /// Speculative decoding: tokens drafted and accepted (0 otherwise, and for prefill chunks).
    drafted: u32,
    accepted: u32,
}

/// What happened to one request in one step (see [`Step`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StepEvent {
    /// Admitted for the first time; `cached_tokens` of its prompt hit the prefix cache.
    Admitted {
        id: ReqId,
        cached_tokens: u32,
        queue_ms: f64,
    },
    /// Speculative decoding: the request drafted `draft_tokens` in the step and the target accepted
    /// `accepted_tokens` of them (reported before the step's `Tokens`).
    Speculated {
        id: ReqId,
        draft_tokens: u32,
        accepted_tokens: u32,
    },
    /// `tokens` output tokens were emitted at the end of the step.
    Tokens { id: ReqId, tokens: u32 },
    /// Preempted for lack of KV space; it will recompute.
    Preempted { id: ReqId },
    /// Generated all its output tokens.
    Finished { id: ReqId, generated: u32 },
}

/// One engine iteration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    pub start_ms: f64,
    pub duration_ms: f64,
    /// Sequences in the batch.
    pub batch: u32,
    /// Prefill tokens in the batch.
    pub prefill_tokens: u32,
    pub events: Vec<StepEvent>,
}

/// Decoders advanced together in O(1) per step instead of one by one.
///
/// A running request that is decoding, and whose chain no other running request uses, takes exactly one token in
/// every step for as long as every running request is served in full (the token budget covers the batch) and the
/// KV cache has room: then its context grows by one per step, and nothing else about it matters to the batch
/// until it finishes. Such a request is *lazy*: it keeps its state as of lazy decode step `lz_d0`, and the batch
/// is summarized here: how many, Σ context, how many sit at each position inside a block (to count the blocks a
/// stretch of steps needs), and a min-heap of the lazy step at which each finishes. Its blocks are filled into its
/// chain when it is brought up to date ([`Engine::materialize`]): at its finish, or for everyone when a step cannot
/// serve the batch in full (a token budget or KV shortfall, which may preempt), when a request is cancelled, when
/// a request whose lineage holds a lazy request's chain arrives or is admitted, and in [`Engine::step`]. Until
/// then only the split of blocks between cached and private differs, which nothing reads (the KV cache reports
/// their sum), so the engine's results are exactly those of advancing every request in every step.
#[derive(Debug, Clone, Default)]
struct Lazy {
    /// Lazy decode steps so far (steps in which every lazy request took one token).
    d: u64,
    /// Lazy requests.
    n: u64,
    /// Σ (t at anchor − anchor step), wrapping: Σ context now is `sum_off + n·d`.
    sum_off: u64,
    /// Lazy requests by `(t at anchor − anchor step) mod block_size`: at step `d` their context sits at
    /// `(class + d) mod block_size` inside its last block.
    cnt: Vec<u64>,
    /// (lazy step at which it finishes, request); stale entries are skipped.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>>,
    /// Upper bound of the admission order of lazy requests.
    max_seq: u64,
    /// End and length of the last stretch lazy requests took part in.
    last_end: f64,
    last_k: u64,
    /// Speculative decoding only (where `cnt` and `sum_off` are unused): Σ context of the lazy requests now, and
    /// per lazy step `j` (at `j mod len`, a power of two covering every lazy request's remaining steps) the sum of
    /// what their paths, drawn ahead from their own streams when they became lazy, do in that step. A step of the
    /// lazy batch then costs O(1) whatever each sequence accepts, and a stretch runs until the first finish.
    ctx: u64,
    ring: SpecRing,
}

/// Block sizes up to which decoders may be lazy (a stretch's block count is O(block size)).
const LAZY_MAX_BS: u32 = 64;

/// Outcome of one [`Engine::advance`] call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Advance {
    pub steps: u64,
    pub end_ms: f64,
}

#[cfg(test)]
thread_local! {
    /// Tests set it to take a stretch's blocks one step at a time (see [`Engine::alloc_step_by_step`]), the
    /// accounting its runs must reproduce.
    pub(crate) static TIER_STEPS_ONE_BY_ONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
fn tier_steps_one_by_one() -> bool {
    TIER_STEPS_ONE_BY_ONE.with(std::cell::Cell::get)
}

#[cfg(not(test))]
#[inline]
fn tier_steps_one_by_one() -> bool {
    false
}

/// The blocks the steps of a decode stretch take, by the residue of the step's index: step `j` (2 ≤ j) takes
/// `inc[(j − 1) mod bs]`, so steps 2..=j take `need(j)` in O(1).
#[derive(Debug, Clone)]
struct StepBlocks {
    bs: u64,
    inc: [u64; LAZY_MAX_BS as usize],
    /// `pre[ρ]` = Σ inc[1..=ρ].
    pre: [u64; LAZY_MAX_BS as usize],
    /// Σ inc: the blocks of any `bs` consecutive steps.
    period: u64,
}

impl Default for StepBlocks {
    fn default() -> Self {
        StepBlocks {
            bs: 1,
            inc: [0; LAZY_MAX_BS as usize],
            pre: [0; LAZY_MAX_BS as usize],
            period: 0,
        }
    }
}

impl StepBlocks {
    /// Blocks steps 2..=`j` take (`Engine::extra_blocks(j)`).
    #[inline]
    fn need(&self, j: u64) -> u64 {
        let m = j - 1;
        let (q, rho) = if self.bs.is_power_of_two() {
            (m >> self.bs.trailing_zeros(), m & (self.bs - 1))
        } else {
            (m / self.bs, m % self.bs)
        };
        q * self.period + self.pre[rho as usize]
    }

    /// The first step in `[lo, hi]` by which `x` (≥ 1) blocks are taken (`need(hi)` ≥ `x`).
    fn step_reaching(&self, x: u64, lo: u64, hi: u64) -> u64 {
        debug_assert!(x >= 1 && self.need(hi) >= x);
        // Steps j = 1 + q·bs + ρ: whole periods before `x`, then the first residue of the next that reaches it
        // (none: the next period's first step, residue 0, which completes the period).
        let q = (x - 1) / self.period;
        let rest = x - q * self.period;
        let rho = self.pre[..self.bs as usize].partition_point(|&p| p < rest) as u64;
        let j = 1 + q * self.bs + rho;
        j.clamp(lo, hi)
    }
}

/// The blocks each step of a stretch needs, by the residue of its index (see [`StepBlocks`]).
fn fill_step_blocks(sb: &mut StepBlocks, bs: u32, lz: &Lazy, sched: &[Sched]) {
    let bs = bs as usize;
    sb.bs = bs as u64;
    let inc = &mut sb.inc[..bs];
    if lz.n > 0 {
        // A lazy request at position `pos` of its last block is counted in class (pos − d) mod bs, and takes a
        // block at the steps with residue (bs − pos) mod bs: residue r reads class (−r − d) mod bs, so the
        // residues read the classes backwards from class (−d) mod bs.
        let cnt = &lz.cnt[..bs];
        let mut c = (bs - (lz.d % bs as u64) as usize) % bs;
        for x in inc.iter_mut() {
            *x = cnt[c];
            c = if c == 0 { bs - 1 } else { c - 1 };
        }
    } else {
        inc.fill(0);
    }
    // Step j takes a block for a context `t` after its first step when t + j − 1 is a multiple of the block size.
    for s in sched {
        let r = (bs - s.t as usize % bs) % bs;
        inc[r] += 1;
    }
    let mut acc = 0;
    sb.pre[0] = 0;
    for (p, &i) in sb.pre[1..bs].iter_mut().zip(&sb.inc[1..bs]) {
        acc += i;
        *p = acc;
    }
    sb.period = acc + sb.inc[0];
}

/// What stays fixed over the steps of a speculative stretch of lazy decoders under a linear profile (see
/// [`linear_spec_steps`]): its first lazy step, its bounds, and [`Engine::spec_cost`]'s parts that do not change.
struct LinearSteps {
    d: u64,
    kmax: u64,
    until_ms: f64,
    full: u64,
    /// The tokens a step may take: at most the budget, and while requests wait for a slot exactly what the
    /// stretch's first step took (see [`Engine::spec_stretch`]).
    tokens_min: u64,
    tokens_max: u64,
    base: f64,
    per_ctx: f64,
    bkv_n: Option<f64>,
    full_drafts: u64,
    full_term: f64,
    prefill_tokens_per_ms: f64,
    draft_cost_ms: f64,
    batch: f64,
    nf: f64,
    keep_log: bool,
}

impl LinearSteps {
    /// [`Engine::spec_cost`] of a lazy step whose decoders hold `lazy_ctx` tokens and draft `short` fewer than `k`
    /// each in all.
    #[inline]
    fn step_ms(&self, lazy_ctx: u64, short: u32) -> f64 {
        let cf = lazy_ctx as f64;
        let mut x = self.base + self.per_ctx * cf;
        if let Some(bkv_n) = self.bkv_n {
            x += bkv_n * cf / 1000.0;
        }
        x + if short == 0 {
            self.full_term
        } else {
            let drafted = (self.full_drafts - u64::from(short)) as f64;
            drafted / self.prefill_tokens_per_ms + self.draft_cost_ms * drafted
        }
    }
}

/// What a speculative stretch has summed so far: steps, clock, counters, the lazy decoders' Σ context, the KV
/// blocks left and taken, and the blocks taken before its last step (`None` before its second).
struct StepSums {
    k: u64,
    end: f64,
    busy: f64,
    batch_time: f64,
    decode_time: f64,
    ctx_time: f64,
    lazy_ctx: u64,
    avail_left: u64,
    taken: u64,
    peak: Option<u64>,
}

impl StepSums {
    /// One more step of `dj` ms, its decoders holding `ctx_per_seq` tokens each on average: the clock and the
    /// counters (each summed in step order, as one step at a time sums it).
    #[inline]
    fn add_step(&mut self, dj: f64, batch: f64, ctx_per_seq: f64) {
        self.end += dj;
        self.busy += dj;
        self.batch_time += batch * dj;
        self.decode_time += dj;
        self.ctx_time += ctx_per_seq * dj;
        self.k += 1;
    }
}

/// [`Engine::spec_stretch`]'s steps after its first under a linear profile without KV tiers (blocks counted, not
/// taken, until the stretch ends): the same stopping rules, costs and sums in the same order, with everything the
/// loop changes in locals. Dispatches to [`linear_spec_loop`] compiled for whether the step log is kept and
/// whether the profile has `batch_kv_ms_per_ktok` (no branch on either inside the loop).
#[inline(never)]
#[cfg(not(target_arch = "wasm32"))]
fn linear_spec_steps(ring: &mut SpecRing, log: &mut Vec<LogEntry>, c: &LinearSteps, st: &mut StepSums) {
    match (c.keep_log, c.bkv_n.is_some()) {
        (false, false) => linear_spec_loop::<false, false>(ring, log, c, st),
        (false, true) => linear_spec_loop::<false, true>(ring, log, c, st),
        (true, false) => linear_spec_loop::<true, false>(ring, log, c, st),
        (true, true) => linear_spec_loop::<true, true>(ring, log, c, st),
    }
}

/// In the page one copy of the loop, which tests both at each step (the page's first module has a size budget;
/// the results are the same: with `bkv_n` absent its term adds exactly 0, and the log is kept only when asked).
#[inline(never)]
#[cfg(target_arch = "wasm32")]
fn linear_spec_steps(ring: &mut SpecRing, log: &mut Vec<LogEntry>, c: &LinearSteps, st: &mut StepSums) {
    linear_spec_loop::<true, true>(ring, log, c, st)
}

/// [`linear_spec_steps`]'s loop: `LOG` whether the step log is kept, `BKV` whether `c.bkv_n` is set. Each step's
/// cost is [`LinearSteps::step_ms`]'s, to the bit.
#[inline(always)]
fn linear_spec_loop<const LOG: bool, const BKV: bool>(
    ring: &mut SpecRing,
    log: &mut Vec<LogEntry>,
    c: &LinearSteps,
    st: &mut StepSums,
) {
    let mask = ring.mask();
    let bkv_n = c.bkv_n.unwrap_or(0.0);
    let StepSums {
        mut k,
        mut end,
        mut busy,
        mut batch_time,
        mut decode_time,
        mut ctx_time,
        mut lazy_ctx,
        mut avail_left,
        mut taken,
        mut peak,
    } = *st;
    let (eb, short) = (&mut ring.eb[..], &mut ring.short[..]);
    while k < c.kmax && end < c.until_ms {
        let i = ((c.d + k) & mask) as usize;
        let (word, sh) = (eb[i], short[i]);
        let need = word >> 32;
        let tokens = c.full - u64::from(sh);
        if tokens > c.tokens_max || tokens < c.tokens_min || need > avail_left {
            break;
        }
        peak = Some(taken);
        avail_left -= need;
        taken += need;
        // Σ context stays far below 2⁶³: converted as a signed integer (one instruction), the same value.
        debug_assert!(lazy_ctx < 1 << 53);
        let cf = lazy_ctx as i64 as f64;
        let mut x = c.base + c.per_ctx * cf;
        if BKV {
            x += bkv_n * cf / 1000.0;
        }
        let dj = x + if sh == 0 {
            c.full_term
        } else {
            let drafted = (c.full_drafts - u64::from(sh)) as f64;
            drafted / c.prefill_tokens_per_ms + c.draft_cost_ms * drafted
        };
        end += dj;
        if LOG && c.keep_log {
            log.push((dj, dj, 1));
        }
        busy += dj;
        batch_time += c.batch * dj;
        decode_time += dj;
        ctx_time += (cf / c.nf + 0.0) * dj;
        lazy_ctx += word & 0xffff_ffff;
        eb[i] = 0;
        if sh != 0 {
            short[i] = 0;
            ring.acorr[i] = 0;
        }
        k += 1;
    }
    *st = StepSums {
        k,
        end,
        busy,
        batch_time,
        decode_time,
        ctx_time,
        lazy_ctx,
        avail_left,
        taken,
        peak,
    };
}

/// Where a lazy decoder's walk over its path stands (see [`walk_words`]): context, tokens left, its next draw,
/// steps taken, blocks its context fills, and the last step's tokens.
struct WordWalk {
    t: u32,
    left: u32,
    n: u32,
    m: u64,
    cb: u32,
    last: u32,
}

/// [`Engine::spec_join_walk`]'s steps four at a time, one 64-bit word of draws each (`w.n` a multiple of 4), while
/// four steps of `k + 1` tokens leave it more than `k` (so that every one drafts `k`): each step's tokens and new
/// blocks (`ceil` is ⌈x / block size⌉) added to its ring slot, lazy step `d0 + w.m`, as one [`emit_blocks`] word.
/// A step's tokens come from `e8` (see [`SpecState::emit_table`]), or from the thresholds `th` (one per position:
/// `k` of them) for the few draws whose high byte holds one. Draws and sums are those of the step-by-step walk:
/// the four steps' contexts are summed from the word's start (not one after the other), which gives the same
/// integers.
#[inline(never)]
fn walk_words(
    eb: &mut [u64],
    d0: u64,
    e8: &[u8; 256],
    th: &[u32],
    key: u64,
    ceil: impl Fn(u32) -> u32,
    w: &mut WordWalk,
) {
    debug_assert!(w.n & 3 == 0 && eb.len().is_power_of_two());
    // Every position has a threshold: `k` is their count.
    let k = th.len() as u32;
    let mask = eb.len() as u64 - 1;
    #[cold]
    fn by_thresholds(x: u64, th: &[u32]) -> u32 {
        let x = (x & 0xffff) as u32;
        1 + th.iter().map(|&t| u32::from(x < t)).sum::<u32>()
    }
    let e = |x: u64| {
        let e = u32::from(e8[((x >> 8) & 0xff) as usize]);
        if e != 0 { e } else { by_thresholds(x, th) }
    };
    let (t0, left0, m0) = (w.t, w.left, w.m);
    if left0 <= 4 * k + 3 {
        return;
    }
    // `left > 4k + 3` while `t < t_lim`.
    let t_lim = t0 + (left0 - (4 * k + 3));
    let (mut t, mut cb, mut last, mut m) = (w.t, w.cb, w.last, w.m);
    let mut wi = u64::from(w.n >> 2);
    // One word's four steps: their slots' additions, the context and blocks after them.
    let four = |word: u64, t: u32, cb: u32| {
        let es = [e(word), e(word >> 16), e(word >> 32), e(word >> 48)];
        let t1 = t + es[0];
        let t2 = t1 + es[1];
        let t3 = t2 + es[2];
        let t4 = t2 + (es[2] + es[3]);
        let (c1, c2, c3, c4) = (ceil(t1), ceil(t2), ceil(t3), ceil(t4));
        let adds = [
            emit_blocks(es[0], c1 - cb),
            emit_blocks(es[1], c2 - c1),
            emit_blocks(es[2], c3 - c2),
            emit_blocks(es[3], c4 - c3),
        ];
        (adds, t4, c4, es[3])
    };
    while t < t_lim {
        let base = ((d0 + m) & mask) as usize;
        if base + 4 <= eb.len() {
            // Up to the ring's end without wrapping.
            for chunk in eb[base..].chunks_exact_mut(4) {
                if t >= t_lim {
                    break;
                }
                let (adds, t4, c4, e3) = four(SpecState::word(key, wi), t, cb);
                for (slot, &a) in chunk.iter_mut().zip(&adds) {
                    *slot += a;
                }
                (t, cb, last) = (t4, c4, e3);
                wi += 1;
                m += 4;
            }
        } else {
            let (adds, t4, c4, e3) = four(SpecState::word(key, wi), t, cb);
            for (i, &a) in adds.iter().enumerate() {
                eb[((d0 + m + i as u64) & mask) as usize] += a;
            }
            (t, cb, last) = (t4, c4, e3);
            wi += 1;
            m += 4;
        }
    }
    *w = WordWalk {
        t,
        left: left0 - (t - t0),
        n: w.n + (m - m0) as u32,
        m,
        cb,
        last,
    };
}

/// The engine. Create with [`Engine::new`]; drive with [`Engine::submit`] and [`Engine::step`].
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) p: EngineProfile,
    pub(crate) kv: Kv,
    bs: u32,
    /// `log2(bs)` when the block size is a power of two (divisions become shifts), else `u32::MAX`.
    bs_shift: u32,
    model_len: u64,
    pub(crate) reqs: Vec<Req>,
    free_reqs: Vec<u32>,
    pub(crate) waiting: VecDeque<u32>,
    pub(crate) running: Vec<u32>,
    /// The running requests that are not lazy, in the same order.
    eager: Vec<u32>,
    lz: Lazy,
    /// Whether decoders may become lazy (tests turn it off to compare against step-by-step accounting).
    pub(crate) lazy_ok: bool,
    next_seq: u64,
    /// Scratch for the lazy schedule: (request, tokens, blocks needed, drafted, accepted).
    plan: Vec<(u32, u32, u64, u32, u32)>,
    pub(crate) now_ms: f64,
    sched: Vec<Sched>,
    pub(crate) admitted: Vec<u32>,
    pub(crate) preempted: Vec<u32>,
    pub(crate) finished: Vec<u32>,
    /// Step log from global index `log_base` on; trimmed when it has doubled since the last trim.
    pub(crate) log: Vec<LogEntry>,
    /// Whether steps are logged at all: only the records' own ITL quantiles read the log (see
    /// [`Self::itl_summary`]), so a run that computes none turns it off (the indices into it are then never read).
    pub(crate) keep_log: bool,
    pub(crate) log_base: u64,
    log_trim_at: usize,
    /// Hash → (chain, local block) for callers that pass content as block hashes ([`super::types::PromptBlocks`]).
    hashes: std::collections::HashMap<u64, (u32, u32), BuildIdHasher>,
    pub(crate) stats: EngineStats,
    /// [`Scheduler::LlamaCpp`]: slots instead of vLLM's scheduler (never lazy).
    llama: bool,
    /// Per slot ([`Scheduler::LlamaCpp`]; empty otherwise): what it holds and when it was last released.
    slots: Vec<SlotMem>,
    /// Releases so far (the slots' least-recently-used clock).
    slot_clock: i64,
    /// [`Scheduler::LlamaCpp`] with a tier below the slots: llama-server's host prompt cache (`--cache-ram`).
    prompt_cache: Option<PromptCache>,
    /// Speculative decoding (`EngineProfile::speculative`); `None`: off.
    pub(crate) spec: Option<SpecState>,
    /// Requests submitted so far (a request's `spec_id`).
    next_spec_id: u64,
    /// The most KV blocks running requests held at the end of a step inside the last speculative stretch, before
    /// its last (0 when none): what a caller sampling after every step would have seen (see
    /// [`Self::take_inner_peak`]).
    inner_peak: u64,
    /// Scratch for [`Self::alloc_step_by_step`]: blocks each step needs, by residue of its index.
    step_blocks: StepBlocks,
}

/// A llama.cpp slot: busy, or the content its last request left in it (for prompt similarity) and when it was
/// released (for least recently used).
#[derive(Debug, Clone, Copy)]
struct SlotMem {
    busy: bool,
    /// Chain and tokens of its last request ([`NONE`]: never used).
    chain: u32,
    tokens: u32,
    /// The chain's `life` when it was recorded (the content is gone once the index holds another chain).
    life: u32,
    /// The root of the chain's lineage: content with another root shares nothing with it.
    root: u32,
    /// An entry of the prompt cache holds all of this content (saving it again changes nothing).
    saved: bool,
    /// −1 until first released, as llama-server's `t_last_used`.
    last_used: i64,
}

/// An entry of lineage `root` left the prompt cache (loaded or pushed out): an idle slot of that lineage, marked
/// saved, may be saved again. Only the slots `saved` lists under `root` can be such a slot (a slot is listed under
/// its root when marked saved; a listed slot since released or loaded is skipped), so a server with many slots pays
/// for the few of that lineage, not for every slot (a loop over all of them was 40 % of the instructions of a
/// 256-slot run).
fn entry_left(saved: &mut HashMap<u32, Vec<u32>, BuildIdHasher>, slots: &mut [SlotMem], root: u32) {
    for s in saved.remove(&root).into_iter().flatten() {
        let m = &mut slots[s as usize];
        m.saved &= m.root != root;
    }
}

/// Slot `slot` is marked saved: an entry holds all of its content, of lineage `root` (listed for [`entry_left`]).
fn mark_saved(saved: &mut HashMap<u32, Vec<u32>, BuildIdHasher>, slots: &mut [SlotMem], slot: u32) {
    let m = &mut slots[slot as usize];
    m.saved = true;
    saved.entry(m.root).or_default().push(slot);
}

/// Σ over a chunk of `n` prompt tokens after `t` computed ones of the context each attends to: `n·t + n(n−1)/2`.
#[inline]
fn attended_by(n: u32, t: u32) -> f64 {
    let (n, t) = (f64::from(n), f64::from(t));
    n * t + n * (n - 1.0) / 2.0
}

/// llama-server's host prompt cache (`server_prompt_cache`, on with `--cache-ram`, its default): whole slot states,
/// oldest first. A slot's content is saved when the slot is given to a prompt it does not continue (chosen as the
/// least recently used, or by similarity keeping under half of its content) and, as `--cache-idle-slots` (on by
/// default) does, every idle slot whenever a task starts; an entry another entry contains is not saved twice, one
/// a new save contains is dropped, the oldest go first past the size limit. A prompt given such a slot loads the
/// first entry, oldest first, that keeps a larger share of itself (`f_keep`, at least 1/4) **and** of the prompt
/// (`f_sim`) than the slot's content and any entry before it; the entry leaves the cache. So an older, shorter state
/// of a conversation can win over its newest one (its `f_keep` is higher when the newer state holds a longer
/// reply that the resent text does not reuse), and the request recomputes what the newer one held.
#[derive(Debug, Clone)]
struct PromptCache {
    /// The entries by the root of their lineage, oldest first (the server scans them all, but an entry of another
    /// lineage shares nothing with a prompt: it keeps none of itself, below the 1/4 the rule asks).
    by_root: std::collections::HashMap<u32, Vec<(u64, SlotMem)>, BuildIdHasher>,
    /// `(order, root)` of every entry saved, oldest first, for the oldest to leave past the limit; an entry that
    /// left otherwise is skipped there.
    fifo: VecDeque<(u64, u32)>,
    next: u64,
    /// Entries in `by_root`.
    live: usize,
    /// Σ tokens of the entries.
    tokens: u64,
    /// The tier's capacity in tokens (llama-server sizes it in MiB).
    limit_tokens: u64,
    /// The slots marked saved, by the root of the content they held then ([`entry_left`]).
    saved: HashMap<u32, Vec<u32>, BuildIdHasher>,
}

impl PromptCache {
    /// Entry `i` of lineage `root` leaves (`None` if there is no such entry).
    fn remove(&mut self, root: u32, i: usize) -> Option<SlotMem> {
        let list = self.by_root.get_mut(&root)?;
        if i >= list.len() {
            return None;
        }
        let (_, e) = list.remove(i);
        if list.is_empty() {
            self.by_root.remove(&root);
        }
        self.tokens -= u64::from(e.tokens);
        self.live -= 1;
        Some(e)
    }

    /// The oldest entry still in the cache leaves; `None` when none is left.
    fn evict_oldest(&mut self) -> Option<SlotMem> {
        while let Some((order, root)) = self.fifo.pop_front() {
            let at = self
                .by_root
                .get(&root)
                .and_then(|l| l.iter().position(|(o, _)| *o == order));
            if let Some(i) = at {
                return self.remove(root, i);
            }
        }
        None
    }

    /// Drop the `fifo` pairs of entries that left otherwise once they outnumber the entries.
    fn compact(&mut self) {
        if self.fifo.len() > 2 * self.live + 64 {
            let by_root = &self.by_root;
            self.fifo
                .retain(|(o, r)| by_root.get(r).is_some_and(|l| l.iter().any(|(x, _)| x == o)));
        }
    }
}

/// llama-server's `--slot-prompt-similarity` default: a free slot whose last prompt shares more than this share of
/// a new prompt is preferred to the least recently used one.
const SLOT_PROMPT_SIMILARITY: f32 = 0.1;

/// Counters over the engine's life.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct EngineStats {
    pub steps: u64,
    pub preemptions: u64,
    pub recomputed_tokens: u64,
    /// Σ over steps of decoding sequences × duration (for the time-weighted mean batch).
    pub batch_time_ms: f64,
    pub busy_ms: f64,
    pub max_running: u32,
    /// Σ over decode steps of (Σcontext / batch) × duration, for the mean decode context.
    pub ctx_time: f64,
    pub decode_time_ms: f64,
    /// Prompt tokens restored from the tiers below the GPU (counted in `cached_tokens` too).
    pub host_hit_tokens: u64,
    /// The same by tier.
    pub tier_hit_tokens: PerTier,
}

/// Identity hasher for keys that are already hashes.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct IdHasher(u64);
impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
pub(crate) type BuildIdHasher = std::hash::BuildHasherDefault<IdHasher>;

impl Engine {
    /// An idle engine at time 0. The profile should be validated ([`EngineProfile::validate`]); `new` clamps
    /// degenerate values instead of panicking.
    pub fn new(profile: EngineProfile) -> Self {
        let bs = profile.block_size.max(1);
        let model_len = profile.model_len().max(2);
        let caching = profile.enable_prefix_caching;
        let mut kv = Kv::new(profile.num_kv_blocks.max(1), caching);
        for t in profile.tiers() {
            kv.add_tier(
                t.capacity_tokens / u64::from(bs),
                t.write == TierWrite::Always,
                t.evict.ttl_ms(),
                t.tokens_per_ms(),
            );
        }
        Engine {
            kv,
            p: profile,
            bs,
            bs_shift: if bs.is_power_of_two() {
                bs.trailing_zeros()
            } else {
                u32::MAX
            },
            model_len,
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            eager: Vec::new(),
            lz: Lazy {
                cnt: if bs <= LAZY_MAX_BS {
                    vec![0; bs as usize]
                } else {
                    Vec::new()
                },
                ..Lazy::default()
            },
            lazy_ok: true,
            next_seq: 0,
            plan: Vec::new(),
            now_ms: 0.0,
            sched: Vec::new(),
            admitted: Vec::new(),
            preempted: Vec::new(),
            finished: Vec::new(),
            log: Vec::new(),
            keep_log: true,
            log_base: 0,
            log_trim_at: LOG_TRIM_MIN,
            hashes: Default::default(),
            stats: EngineStats::default(),
            llama: false,
            slots: Vec::new(),
            slot_clock: 0,
            prompt_cache: None,
            spec: None,
            next_spec_id: 0,
            inner_peak: 0,
            step_blocks: StepBlocks::default(),
        }
        .with_scheduler()
    }

    /// Set up the slots of [`Scheduler::LlamaCpp`].
    fn with_scheduler(mut self) -> Self {
        self.spec = self.p.speculative.as_deref().map(SpecState::new);
        if self.p.scheduler == Scheduler::LlamaCpp {
            self.llama = true;
            self.slots = vec![
                SlotMem {
                    busy: false,
                    chain: NONE,
                    tokens: 0,
                    life: 0,
                    root: NONE,
                    saved: false,
                    last_used: -1,
                };
                self.p.max_num_seqs.max(1) as usize
            ];
            if let Some(t) = self.kv.tiers.first() {
                self.prompt_cache = Some(PromptCache {
                    by_root: Default::default(),
                    fifo: VecDeque::new(),
                    next: 0,
                    live: 0,
                    tokens: 0,
                    limit_tokens: t.capacity.saturating_mul(u64::from(self.bs)),
                    saved: Default::default(),
                });
            }
        }
        self
    }

    pub fn profile(&self) -> &EngineProfile {
        &self.p
    }

    /// Seed speculative decoding's acceptance draws (no effect without `speculative`): the same seed and the same
    /// submissions give the same tokens per step.
    pub fn seed_speculation(&mut self, seed: u64) {
        if let Some(s) = &mut self.spec {
            s.seed(seed);
            // A request's spread class comes from its stream: drawn again under the new seed.
            for r in &mut self.reqs {
                r.kind = s.class_kind(s.base_kind(r.kind), r.spec_id);
            }
        }
    }

    /// Running request `idx`'s part of a step under speculative decoding, with `left` tokens still to generate
    /// and `budget` tokens of the step's budget left (≥ 1): `(positions verified, drafted, accepted)`, drawn from
    /// its own stream (its draw number is the steps it drafted in so far).
    fn spec_decode(&self, idx: u32, left: u32, budget: u32) -> (u32, u32, u32) {
        let Some(s) = &self.spec else { return (1, 0, 0) };
        let verify = (1 + s.k).min(left.max(1)).min(budget.max(1));
        let drafted = verify - 1;
        let r = &self.reqs[idx as usize];
        let accepted = s.draw(s.stream(r.spec_id), r.spec_steps, r.kind, drafted);
        (verify, drafted, accepted)
    }

    /// Mark the step's last scheduled entry as having drafted and accepted these tokens.
    fn note_spec(&mut self, drafted: u32, accepted: u32) {
        if let Some(s) = self.sched.last_mut() {
            s.drafted = drafted;
            s.accepted = accepted;
        }
    }

    /// Engine time, milliseconds: the end of the last step (or the last idle jump).
    pub fn now_ms(&self) -> f64 {
        self.now_ms
    }

    /// Requests running / waiting.
    pub fn running(&self) -> usize {
        self.running.len()
    }
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The most KV blocks running requests held at the end of a step before the last of the last
    /// [`Self::advance`] (0 when it ran one step, or a stretch without speculative decoding, where blocks are
    /// counted at the stretch's end only), and reset it.
    pub(crate) fn take_inner_peak(&mut self) -> u64 {
        std::mem::take(&mut self.inner_peak)
    }

    /// KV blocks referenced by running requests, and the capacity.
    pub fn kv_blocks_used(&self) -> u64 {
        self.kv.used_by_running()
    }
    pub fn kv_capacity(&self) -> u64 {
        self.kv.capacity
    }
    /// KV blocks holding anything (running requests' blocks plus cached unreferenced ones).
    pub fn kv_blocks_resident(&self) -> u64 {
        self.kv.resident + self.kv.private
    }

    pub(crate) fn new_chain(&mut self, parent: u32, parent_blocks: u32) -> u32 {
        self.kv.new_chain(parent, parent_blocks, u32::MAX)
    }

    /// A conversation's chain after its reply came back as text: a new chain that shares the first `tokens` of
    /// `chain` (whole blocks) and goes on with content of its own; `chain` is released (its tail stays cached,
    /// evictable, as a server keeps what it computed). See `EngineProfile::reply_cached_share`.
    pub(crate) fn fork_conversation(&mut self, chain: u32, tokens: u64) -> u32 {
        let fork = self.share_conversation(chain, tokens);
        self.kv.release(chain);
        fork
    }

    /// A sub-agent's chain: a new chain that shares the first `tokens` of `chain` (whole blocks, at most the
    /// chain's own) and goes on with content of its own; `chain` stays as it is (issue #44).
    pub(crate) fn share_conversation(&mut self, chain: u32, tokens: u64) -> u32 {
        let blocks = u32::try_from(tokens / u64::from(self.bs)).unwrap_or(u32::MAX);
        let offset = self.kv.chains[chain as usize].offset;
        let local = blocks.saturating_sub(offset);
        let c = self.kv.new_chain(chain, local, u32::MAX);
        if blocks >= offset {
            self.kv.chains[c as usize].extra = (tokens % u64::from(self.bs)) as u32;
        }
        c
    }

    /// Does a request of this size fit the engine at all?
    pub(crate) fn fits(&self, prompt: u32, output: u32) -> bool {
        prompt >= 1 && output >= 1 && u64::from(prompt) + u64::from(output) <= self.model_len
    }

    /// Queue a request whose content is chain `chain` (already created), arriving at `now_ms`.
    /// The caller guarantees [`Self::fits`].
    pub(crate) fn submit_chain(
        &mut self,
        now_ms: f64,
        chain: u32,
        prompt: u32,
        output: u32,
        tag: u64,
        release_chain: bool,
    ) -> ReqId {
        self.wait_on(chain, true);
        let reach = self.kv.reach(chain);
        let req = Req {
            generation: 0,
            state: State::Waiting,
            chain,
            prompt,
            output,
            p_eff: prompt,
            t: 0,
            generated: 0,
            private: 0,
            arrival_ms: now_ms,
            admit_ms: f64::NAN,
            first_token_ms: f64::NAN,
            last_token_ms: f64::NAN,
            finish_ms: f64::NAN,
            cached_tokens: 0,
            reach_at_arrival: reach,
            miss: MissSplit::default(),
            preemptions: 0,
            recomputed_tokens: 0,
            itl_from: 0,
            itl_to: 0,
            itl_runs: Vec::new(),
            itl_gaps: Vec::new(),
            tag,
            release_chain,
            last_emit: 0,
            seq: 0,
            lazy: false,
            lz_d0: 0,
            slot: 0,
            frames: 0,
            spec_steps: 0,
            spec_drafted: 0,
            spec_accepted: 0,
            imported: false,
            spec_id: self.next_spec_id,
            kind: self
                .spec
                .as_ref()
                .map_or(KIND_ANY, |s| s.class_kind(KIND_ANY, self.next_spec_id)),
            lz_fin: 0,
            lz_tally: SpecTally::default(),
        };
        self.next_spec_id += 1;
        let idx = if let Some(i) = self.free_reqs.pop() {
            let generation = self.reqs[i as usize].generation.wrapping_add(1);
            self.reqs[i as usize] = Req { generation, ..req };
            i
        } else {
            self.reqs.push(req);
            (self.reqs.len() - 1) as u32
        };
        self.waiting.push_back(idx);
        ReqId::new(idx, self.reqs[idx as usize].generation)
    }

    /// Queue a request whose prompt's KV was computed elsewhere and arrives with it (a disaggregated fleet's
    /// decode instance): when admitted it takes blocks for its whole prompt and decodes in the same step, that first
    /// decode step emitting its first token. Its KV stays its own (never the prefix cache's). The caller guarantees
    /// [`Self::fits`].
    pub(crate) fn submit_prefilled(&mut self, now_ms: f64, chain: u32, prompt: u32, output: u32, tag: u64) -> ReqId {
        let id = self.submit_chain(now_ms, chain, prompt, output, tag, true);
        self.reqs[id.idx() as usize].imported = true;
        id
    }

    /// Set a queued request's content kind (`spec::KIND_*`: which of `acceptance_by_kind` it draws from).
    pub(crate) fn set_kind(&mut self, id: ReqId, kind: u8) {
        if let Some(idx) = self.lookup(id) {
            let r = &mut self.reqs[idx as usize];
            r.kind = self.spec.as_ref().map_or(kind, |s| s.class_kind(kind, r.spec_id));
        }
    }

    /// The chain a prompt given as chained block hashes uses (see [`super::types::PromptBlocks`]): the known chain
    /// its hashes end on, a child of it for new content, or a new root; hashes seen for the first time are
    /// remembered. What [`Self::submit`] queues a request on, and the simulator's trace requests too.
    pub(crate) fn chain_for_blocks(&mut self, block_hashes: &[u64]) -> u32 {
        let n = block_hashes.len();
        // Longest known prefix of the hash chain.
        let mut known = 0usize;
        let mut at: Option<(u32, u32)> = None;
        while known < n {
            match self.hashes.get(&block_hashes[known]) {
                Some(&(c, j)) if (self.kv.chains[c as usize].offset + j) as usize == known => {
                    at = Some((c, j));
                    known += 1;
                }
                _ => break,
            }
        }
        match at {
            Some((c, j)) if known == n => {
                if j + 1 == self.kv.chains[c as usize].limit {
                    c
                } else {
                    // The prompt ends inside a longer known chain: what this request generates has no identity.
                    self.kv.new_chain(c, j + 1, 0)
                }
            }
            Some((c, j)) => {
                // New content after a known prefix: a child chain (chains are never extended in place, so a
                // request's own output can never be mistaken for someone else's content).
                let nc = self.kv.new_chain(c, j + 1, (n - known) as u32);
                for (i, h) in block_hashes[known..].iter().enumerate() {
                    self.hashes.entry(*h).or_insert((nc, i as u32));
                }
                nc
            }
            None => {
                let nc = self.kv.new_chain(NONE, 0, n as u32);
                for (i, h) in block_hashes.iter().enumerate() {
                    self.hashes.entry(*h).or_insert((nc, i as u32));
                }
                nc
            }
        }
    }

    /// Leading blocks of `block_hashes` resident in this engine's GPU cache, without remembering anything (what a
    /// prefix-aware router asks each replica).
    pub(crate) fn cached_blocks_for_hashes(&self, block_hashes: &[u64]) -> u32 {
        let mut known = 0usize;
        let mut at: Option<(u32, u32)> = None;
        while known < block_hashes.len() {
            match self.hashes.get(&block_hashes[known]) {
                Some(&(c, j)) if (self.kv.chains[c as usize].offset + j) as usize == known => {
                    at = Some((c, j));
                    known += 1;
                }
                _ => break,
            }
        }
        at.map_or(0, |(c, _)| self.kv.reach(c).min(known as u32))
    }

    /// Queue a request given as chained block hashes (see [`super::types::PromptBlocks`]). Hashes past the prompt's
    /// full blocks may describe the output the caller will stream, so that a later prompt resending it hits.
    /// A request that can never fit (`prompt + output > max_model_len`, or empty) is returned as finished with
    /// zero tokens at the next [`Self::step`].
    pub fn submit(&mut self, now_ms: f64, prompt: super::types::PromptBlocks, output_tokens: u32) -> ReqId {
        let chain = self.chain_for_blocks(&prompt.block_hashes);
        if !self.fits(prompt.tokens, output_tokens) {
            return self.reject(now_ms, chain, prompt.tokens, output_tokens);
        }
        self.submit_chain(now_ms, chain, prompt.tokens, output_tokens, 0, false)
    }

    /// Queue a request whose prompt's KV was computed on another engine and arrives with it, as a disaggregated
    /// fleet's decode instance takes it in the simulator (`sim.rs`): admitted, it takes blocks for its whole prompt
    /// and decodes in the same step, that step emitting its first token; its KV is never the prefix cache's. What
    /// the sim-server's prefill/decode fleet calls on its decode instances. A request that can never fit is
    /// returned as finished with zero tokens at the next [`Self::step`], as [`Self::submit`] does.
    pub fn submit_prefilled_request(&mut self, now_ms: f64, prompt_tokens: u32, output_tokens: u32) -> ReqId {
        let chain = self.new_chain(NONE, 0);
        if !self.fits(prompt_tokens, output_tokens) {
            return self.reject(now_ms, chain, prompt_tokens, output_tokens);
        }
        self.submit_prefilled(now_ms, chain, prompt_tokens, output_tokens, 0)
    }

    /// Leading blocks of a prompt given as chained block hashes that this engine's GPU cache holds, remembering
    /// nothing: what a prefix-aware router reads from each replica (see [`super::FleetSpec::pick`]).
    pub fn cached_prefix_blocks(&self, block_hashes: &[u64]) -> u32 {
        self.cached_blocks_for_hashes(block_hashes)
    }

    /// A request that can never fit: finished with zero tokens, reported at the next [`Self::step`].
    fn reject(&mut self, now_ms: f64, chain: u32, prompt: u32, output: u32) -> ReqId {
        let id = self.submit_chain(now_ms, chain, prompt.max(1), output.max(1), 0, false);
        self.waiting.pop_back();
        let r = &mut self.reqs[id.idx() as usize];
        r.state = State::Done;
        r.output = 0;
        r.finish_ms = now_ms;
        self.finished.push(id.idx());
        id
    }

    fn lookup(&self, id: ReqId) -> Option<u32> {
        let r = self.reqs.get(id.idx() as usize)?;
        (r.generation == id.generation() && r.state != State::Free).then_some(id.idx())
    }

    /// Drop a request (waiting or running); its blocks are freed, cached ones stay cached. Returns whether it was
    /// known and unfinished.
    pub fn cancel(&mut self, id: ReqId) -> bool {
        let Some(idx) = self.lookup(id) else { return false };
        match self.reqs[idx as usize].state {
            State::Waiting => {
                self.waiting.retain(|&q| q != idx);
                let chain = self.reqs[idx as usize].chain;
                self.wait_on(chain, false);
            }
            State::Running => {
                self.materialize_all();
                self.running.retain(|&q| q != idx);
                self.eager.retain(|&q| q != idx);
                self.kv.now_ms = self.now_ms;
                self.release_blocks(idx);
            }
            _ => return false,
        }
        self.reqs[idx as usize].state = State::Done;
        self.forget(idx);
        true
    }

    /// Free a finished request's slot (the simulator calls this after reading it).
    pub(crate) fn forget(&mut self, idx: u32) {
        let r = &mut self.reqs[idx as usize];
        if r.state == State::Free {
            return;
        }
        r.state = State::Free;
        r.itl_runs.clear();
        r.itl_gaps.clear();
        if r.release_chain {
            let c = r.chain;
            self.kv.release(c);
        }
        self.free_reqs.push(idx);
    }

    fn release_blocks(&mut self, idx: u32) {
        let (chain, private) = {
            let r = &mut self.reqs[idx as usize];
            let p = r.private;
            r.private = 0;
            (r.chain, p)
        };
        self.kv.private -= private;
        if self.kv.write_through {
            self.kv.write_lineage(chain);
        }
        self.kv.unpin(chain);
        if self.llama {
            let r = &self.reqs[idx as usize];
            let clock = self.slot_clock;
            self.slot_clock += 1;
            let (tokens, slot) = (r.t, r.slot as usize);
            let life = self.kv.chains[chain as usize].life;
            let root = self.root_of(chain);
            if let Some(m) = self.slots.get_mut(slot) {
                *m = SlotMem {
                    busy: false,
                    chain,
                    tokens,
                    life,
                    root,
                    saved: false,
                    last_used: clock,
                };
            }
        }
    }

    /// The free slot llama-server gives a new prompt (`get_available_slot`): the one whose last content shares the
    /// largest part of the prompt, above [`SLOT_PROMPT_SIMILARITY`] (the first such on a tie), else the least
    /// recently released (on a tie the last, as its `<=` does: a fresh server fills its slots from the highest id).
    /// `root` is [`Self::root_of`] `chain`, walked once per admission for this and [`Self::load_slot`].
    fn choose_slot(&self, chain: u32, root: u32, prompt: u32) -> u32 {
        let mut best: Option<(usize, f32)> = None;
        for (s, m) in self.slots.iter().enumerate() {
            if m.busy || m.root != root {
                continue;
            }
            let sim = self.lcp_tokens(m, chain, prompt) as f32 / prompt.max(1) as f32;
            if sim > SLOT_PROMPT_SIMILARITY && best.is_none_or(|(_, b)| sim > b) {
                best = Some((s, sim));
            }
        }
        if let Some((s, _)) = best {
            return s as u32;
        }
        let mut ret: Option<usize> = None;
        let mut t_last = -1i64;
        for (s, m) in self.slots.iter().enumerate() {
            if m.busy {
                continue;
            }
            if ret.is_none() || m.last_used <= t_last {
                t_last = m.last_used;
                ret = Some(s);
            }
        }
        ret.unwrap_or(0) as u32
    }

    /// Leading tokens that the content `m` (a slot's, or a prompt-cache entry's) and a prompt of `prompt` tokens on
    /// `chain` have in common, to the token: where their lineages meet, the shorter of the two spans there (a fork
    /// shares its parent's whole blocks and the `extra` tokens of the next). 0 when `m` is empty or its chain was
    /// recycled. O(depth²) over the two lineages, which are a conversation's steps deep.
    fn lcp_tokens(&self, m: &SlotMem, chain: u32, prompt: u32) -> u32 {
        let valid = |c: u32, life: u32| {
            self.kv
                .chains
                .get(c as usize)
                .is_some_and(|ch| !ch.freed && ch.life == life)
        };
        if m.chain == NONE || m.tokens == 0 || !valid(m.chain, m.life) {
            return 0;
        }
        let walk = |c: u32, tokens: u32| {
            let mut out: Vec<(u32, u32)> = Vec::new();
            let (mut x, mut end) = (c, tokens);
            while x != NONE && (x as usize) < self.kv.chains.len() {
                let ch = &self.kv.chains[x as usize];
                out.push((x, end));
                end = end.min(ch.offset.saturating_mul(self.bs).saturating_add(ch.extra));
                x = ch.parent;
            }
            out
        };
        let la = walk(m.chain, m.tokens);
        for (y, end_b) in walk(chain, prompt) {
            if let Some(&(_, end_a)) = la.iter().find(|e| e.0 == y) {
                return end_a.min(end_b);
            }
        }
        0
    }

    /// The first chain of `c`'s lineage.
    fn root_of(&self, mut c: u32) -> u32 {
        while let Some(ch) = self.kv.chains.get(c as usize) {
            if ch.parent == NONE {
                break;
            }
            c = ch.parent;
        }
        c
    }

    /// What slot `slot`, just given a prompt of `prompt` tokens on `chain`, holds of it once llama-server's
    /// prompt cache has had its say ([`PromptCache`]): with no cache, the slot's own content; with one, when the
    /// slot was not chosen as the prompt's continuation (its content is another conversation's, or less than half
    /// of it is kept), that content is saved and the entry the cache's rule picks, if any, is loaded into it.
    /// Returns the prompt's tokens the slot then holds: the most of it the request can find cached.
    fn load_slot(&mut self, slot: u32, chain: u32, root: u32, prompt: u32) -> u32 {
        let m = self.slots[slot as usize];
        let lcp = self.lcp_tokens(&m, chain, prompt);
        if self.prompt_cache.is_none() {
            return lcp;
        }
        let n = prompt.max(1) as f32;
        let kept = if m.tokens > 0 {
            lcp as f32 / m.tokens as f32
        } else {
            -1.0
        };
        let continues = lcp as f32 / n > SLOT_PROMPT_SIMILARITY && kept >= 0.5;
        if continues {
            return lcp;
        }
        self.save_slot(slot);
        let Some(pc) = &self.prompt_cache else { return lcp };
        let (mut f_keep, mut f_sim) = (kept, lcp as f32 / n);
        let mut best: Option<(usize, u32)> = None;
        for (i, (_, e)) in pc.by_root.get(&root).into_iter().flatten().enumerate() {
            let l = self.lcp_tokens(e, chain, prompt);
            let keep = l as f32 / e.tokens.max(1) as f32;
            let sim = l as f32 / n;
            if keep >= 0.25 && f_keep < keep && f_sim < sim {
                (f_keep, f_sim) = (keep, sim);
                best = Some((i, l));
            }
        }
        let Some((i, l)) = best else { return lcp };
        let Some(pc) = &mut self.prompt_cache else { return lcp };
        let Some(e) = pc.remove(root, i) else { return lcp };
        let s = &mut self.slots[slot as usize];
        (s.chain, s.tokens, s.life, s.root, s.saved) = (e.chain, e.tokens, e.life, e.root, false);
        entry_left(&mut pc.saved, &mut self.slots, e.root);
        l
    }

    /// llama-server's `prompt_save`: slot `slot`'s content into the prompt cache, unless it is empty or an entry
    /// already holds all of it; entries it holds all of leave; then the oldest leave while the cache is over its
    /// size.
    fn save_slot(&mut self, slot: u32) {
        let m = self.slots[slot as usize];
        let Some(pc) = &self.prompt_cache else { return };
        if m.chain == NONE || m.tokens == 0 || m.saved {
            return;
        }
        let same = pc.by_root.get(&m.root).map_or(&[][..], Vec::as_slice);
        let lcp: Vec<u32> = same
            .iter()
            .map(|(_, e)| self.lcp_tokens(e, m.chain, m.tokens))
            .collect();
        if lcp.contains(&m.tokens) {
            if let Some(pc) = &mut self.prompt_cache {
                mark_saved(&mut pc.saved, &mut self.slots, slot);
            }
            return;
        }
        let contained: Vec<bool> = same.iter().zip(&lcp).map(|((_, e), &l)| l == e.tokens).collect();
        let Some(pc) = &mut self.prompt_cache else { return };
        for i in (0..contained.len()).rev() {
            if contained[i] {
                pc.remove(m.root, i);
            }
        }
        let order = pc.next;
        pc.next += 1;
        pc.by_root
            .entry(m.root)
            .or_default()
            .push((order, SlotMem { busy: false, ..m }));
        pc.fifo.push_back((order, m.root));
        pc.tokens += u64::from(m.tokens);
        pc.live += 1;
        mark_saved(&mut pc.saved, &mut self.slots, slot);
        while pc.tokens > pc.limit_tokens {
            let Some(e) = pc.evict_oldest() else { break };
            entry_left(&mut pc.saved, &mut self.slots, e.root);
        }
        pc.compact();
    }

    fn preempt(&mut self, idx: u32) {
        // Only the full schedule preempts, and it runs with no lazy requests: `eager` is `running`.
        if self.eager.last() == Some(&idx) {
            self.eager.pop();
        } else {
            self.eager.retain(|&q| q != idx);
        }
        self.release_blocks(idx);
        let log_end = self.log_end();
        let now = self.now_ms;
        let r = &mut self.reqs[idx as usize];
        r.state = State::Waiting;
        r.preemptions += 1;
        r.recomputed_tokens += u64::from(r.t);
        if r.generated > 0 {
            r.itl_runs.push((r.itl_from, log_end));
            r.p_eff = r.prompt + r.generated;
            let _ = now;
        }
        let lost = u64::from(r.t);
        r.t = 0;
        let chain = r.chain;
        self.stats.preemptions += 1;
        self.stats.recomputed_tokens += lost;
        self.waiting.push_front(idx);
        self.preempted.push(idx);
        self.wait_on(chain, true);
    }

    #[inline]
    fn log_end(&self) -> u64 {
        self.log_base + self.log.len() as u64
    }

    /// A waiting request's cached prefix, in blocks: `(the GPU's reach, its hit, the hit with the tiers, blocks
    /// restored per tier)`. At most all but the last prompt token hit, and at most `cap` blocks (what a llama.cpp
    /// slot holds: [`Self::load_slot`]); blocks right after the GPU hit that the tiers hold are restored instead of
    /// recomputed as far as that saves time (see [`Self::restore_plan`]).
    fn cached_blocks(&self, chain: u32, p_eff: u32, cap: u32) -> (u32, u32, u32, [u32; MAX_KV_TIERS]) {
        let reach = if self.kv.caching { self.kv.reach(chain) } else { 0 };
        let max_hit = ((p_eff - 1) / self.bs).min(cap);
        let gpu_hit_blocks = reach.min(max_hit);
        let mut per_tier = [0u32; MAX_KV_TIERS];
        let hit_blocks = if !self.kv.tiers.is_empty() && gpu_hit_blocks < max_hit {
            let to = self.kv.reach_tiers(chain).clamp(gpu_hit_blocks, max_hit);
            if to > gpu_hit_blocks {
                self.restore_plan(chain, gpu_hit_blocks, to, &mut per_tier)
            } else {
                gpu_hit_blocks
            }
        } else {
            gpu_hit_blocks
        };
        (reach, gpu_hit_blocks, hit_blocks, per_tier)
    }

    /// Of the blocks `[from, to)` that the tiers hold after the GPU's hit, the prefix worth restoring: the one
    /// whose restore (its tokens over each tier's speed) saves the most time against prefilling the same tokens
    /// (`tokens / prefill_tokens_per_ms` plus their `prefill_ctx_ms_per_ktok` term), restored only if that saving
    /// is positive. Returns the hit in blocks and writes the blocks taken from each tier.
    fn restore_plan(&self, chain: u32, from: u32, to: u32, per_tier: &mut [u32; MAX_KV_TIERS]) -> u32 {
        let mut runs = Vec::new();
        self.kv.tier_runs(chain, from, to, &mut runs);
        let bs = f64::from(self.bs);
        let (mut at, mut saving) = (from, 0.0f64);
        let (mut best_at, mut best) = (from, 0.0f64);
        let mut taken = [0u32; MAX_KV_TIERS];
        let mut best_taken = taken;
        for &(tier, blocks) in &runs {
            let n = f64::from(blocks) * bs;
            if tier != NO_TIER {
                let c = f64::from(at) * bs;
                let recompute = n / self.p.prefill_tokens_per_ms
                    + self.p.prefill_ctx_ms_per_ktok * (n * c + n * (n - 1.0) / 2.0) / 1000.0;
                saving += recompute - n / self.kv.tiers[tier].rate;
                taken[tier] += blocks;
            }
            at += blocks;
            if saving > best {
                (best_at, best, best_taken) = (at, saving, taken);
            }
        }
        *per_tier = best_taken;
        best_at
    }

    /// Takes `need` new blocks for a request whose prefix `chain` holds `gpu_hit_blocks` on the GPU and up to
    /// `hit_blocks` with the tiers (`per_tier` blocks from each), restoring the tier blocks; `None` (nothing
    /// changed) when they do not fit. Returns the `fill` result and the tokens restored from each tier.
    fn admit_blocks(
        &mut self,
        chain: u32,
        need: u64,
        gpu_hit_blocks: u32,
        hit_blocks: u32,
        per_tier: [u32; MAX_KV_TIERS],
    ) -> Option<(u64, PerTier)> {
        let pinned_loss = self.kv.lineage_evictable(chain);
        if need > self.kv.available() - pinned_loss {
            return None;
        }
        self.kv.pin(chain);
        let restored = hit_blocks - gpu_hit_blocks;
        self.kv.hold_tier_trim = restored > 0;
        if !self.kv.alloc(need) {
            self.kv.hold_tier_trim = false;
            self.kv.unpin(chain);
            return None;
        }
        let mut conv = 0;
        let mut restored_tokens = [0u64; MAX_KV_TIERS];
        if restored > 0 {
            conv = self.kv.fill(chain, gpu_hit_blocks, hit_blocks);
            for (t, &blocks) in per_tier.iter().enumerate() {
                if blocks > 0 {
                    self.kv.tier_touch_lineage(t, chain);
                    let tokens = u64::from(blocks * self.bs);
                    restored_tokens[t] = tokens;
                    self.stats.tier_hit_tokens[t] += tokens;
                    self.stats.host_hit_tokens += tokens;
                }
            }
            self.kv.hold_tier_trim = false;
            self.kv.trim_tiers();
        }
        Some((conv, restored_tokens))
    }

    /// Blocks needed to hold `t` tokens.
    #[inline]
    fn blocks(&self, t: u32) -> u64 {
        self.ceil_bs(u64::from(t))
    }

    /// `x / block_size`.
    #[inline]
    fn div_bs(&self, x: u64) -> u64 {
        if self.bs_shift != u32::MAX {
            x >> self.bs_shift
        } else {
            x / u64::from(self.bs)
        }
    }

    /// `t mod block_size`.
    #[inline]
    fn rem_bs(&self, t: u32) -> u32 {
        if self.bs_shift != u32::MAX {
            t & (self.bs - 1)
        } else {
            t % self.bs
        }
    }

    /// `x mod block_size`.
    #[inline]
    fn mod_bs(&self, x: u64) -> u64 {
        if self.bs_shift != u32::MAX {
            x & u64::from(self.bs - 1)
        } else {
            x % u64::from(self.bs)
        }
    }

    /// `ceil(x / block_size)`.
    #[inline]
    fn ceil_bs(&self, x: u64) -> u64 {
        self.div_bs(x + u64::from(self.bs) - 1)
    }

    /// Schedule one step at `self.now_ms`. Returns (duration, Σcontext, prefill tokens, decoders).
    fn schedule(&mut self) -> (f64, f64, u32, u32) {
        self.sched.clear();
        self.admitted.clear();
        self.preempted.clear();
        if !self.kv.tiers.is_empty() {
            self.kv.now_ms = self.now_ms;
            if self.kv.any_ttl {
                self.kv.expire_tiers();
            }
        }
        if self.llama {
            return self.schedule_slots();
        }
        let mut budget = self.p.max_num_batched_tokens;
        let mut sums = BatchSums::default();
        if self.lz.n > 0 {
            match self.schedule_lazy(budget) {
                Some((b, lazy_sums)) => (budget, sums) = (b, lazy_sums),
                None => self.materialize_all(),
            }
        }
        let mut i = 0;
        while self.lz.n == 0 && i < self.running.len() {
            let idx = self.running[i];
            let (t, p_eff, left) = {
                let r = &self.reqs[idx as usize];
                (r.t, r.p_eff, r.output - r.generated)
            };
            let mut tokens = wanted(t, p_eff).min(budget);
            if tokens == 0 {
                i += 1;
                continue;
            }
            // Speculative decoding: a decoder verifies `tokens` positions and emits `emit` tokens.
            let (mut emit, mut drafted, mut accepted) = (tokens, 0, 0);
            if self.spec.is_some() && t >= p_eff {
                (tokens, drafted, accepted) = self.spec_decode(idx, left, budget);
                emit = 1 + accepted;
            }
            let need = self.new_blocks(t, p_eff, emit);
            let mut self_preempted = false;
            while need > 0 && !self.kv.alloc(need) {
                let Some(victim) = self.running.pop() else { break };
                self.preempt(victim);
                if victim == idx {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            self.schedule_running(idx, emit, need, &mut sums);
            if drafted > 0 {
                self.note_spec(drafted, accepted);
            }
            budget -= tokens;
            i += 1;
        }
        let BatchSums {
            mut ctx,
            mut prefill_tokens,
            mut decoders,
        } = sums;
        let mut restored_tokens = [0u64; MAX_KV_TIERS];
        if self.preempted.is_empty() {
            while let Some(&idx) = self.waiting.front() {
                if self.running.len() >= self.p.max_num_seqs as usize || budget == 0 {
                    break;
                }
                let (chain, p_eff, first) = {
                    let r = &self.reqs[idx as usize];
                    (r.chain, r.p_eff, r.admit_ms.is_nan())
                };
                if self.reqs[idx as usize].imported && first {
                    // Its prompt's KV arrived over the link: blocks for it and the next token, and it decodes now.
                    let need = self.blocks(p_eff + 1);
                    let Some((conv, _)) = self.admit_blocks(chain, need, 0, 0, [0; MAX_KV_TIERS]) else {
                        break;
                    };
                    self.start_request(idx, chain, first, (0, 0), need - conv);
                    let r = &mut self.reqs[idx as usize];
                    r.t = p_eff;
                    let left = r.output - r.generated;
                    ctx += u64::from(p_eff);
                    decoders += 1;
                    self.sched.push(Sched {
                        idx,
                        tokens: 1,
                        prefill: false,
                        t: p_eff,
                        chain,
                        left,
                        drafted: 0,
                        accepted: 0,
                    });
                    budget -= 1;
                    continue;
                }
                let (reach, gpu_hit_blocks, hit_blocks, per_tier) = self.cached_blocks(chain, p_eff, u32::MAX);
                let hit = hit_blocks * self.bs;
                let tokens = (p_eff - hit).min(budget);
                let need = self.blocks(hit + tokens) - u64::from(gpu_hit_blocks);
                let Some((conv, restored)) = self.admit_blocks(chain, need, gpu_hit_blocks, hit_blocks, per_tier)
                else {
                    break;
                };
                add_tiers(&mut restored_tokens, &restored);
                self.start_request(idx, chain, first, (reach, hit_blocks), need - conv);
                let left = {
                    let r = &self.reqs[idx as usize];
                    r.output - r.generated
                };
                ctx += u64::from(hit);
                prefill_tokens += tokens;
                self.sched.push(Sched {
                    idx,
                    tokens,
                    prefill: true,
                    t: hit,
                    chain,
                    left,
                    drafted: 0,
                    accepted: 0,
                });
                budget -= tokens;
            }
        }
        let d = self.step_ms(ctx, prefill_tokens, restored_tokens);
        (d, ctx as f64, prefill_tokens, decoders)
    }

    /// The duration of the step just scheduled (`sched` plus the lazy requests).
    fn step_ms(&self, ctx: u64, prefill_tokens: u32, restored_tokens: PerTier) -> f64 {
        let n = (self.sched.len() as u64 + self.lz.n) as f64;
        if let Some(s) = &self.spec {
            return self.spec_step_ms(s, n, ctx, prefill_tokens, restored_tokens);
        }
        if let Some(r) = &self.p.roofline {
            return self.with_restores(self.roofline_step_ms(r, n, ctx, prefill_tokens), restored_tokens);
        }
        let mut d = self.p.step_fixed_ms + self.p.per_seq_ms * n + self.p.per_ctx_token_ms * ctx as f64;
        if self.p.batch_kv_ms_per_ktok > 0.0 {
            d += self.p.batch_kv_ms_per_ktok * n * ctx as f64 / 1000.0;
        }
        if prefill_tokens > 0 {
            d = self.with_prefill(d, prefill_tokens, ctx);
        }
        self.with_restores(d, restored_tokens)
    }

    /// [`Self::step_ms`] under speculative decoding: the step without speculation, plus the drafted tokens its
    /// decoders verify (at the prefill rate, or in a roofline's shape) and the draft's cost per drafted token. Out of
    /// line: the step without speculation stays small.
    #[inline(never)]
    fn spec_step_ms(&self, s: &SpecState, n: f64, ctx: u64, prefill_tokens: u32, restored: PerTier) -> f64 {
        let (mut drafted, mut attended) = (0u64, 0.0f64);
        for e in self.sched.iter().filter(|e| e.drafted > 0) {
            let (v, c) = (f64::from(e.drafted), f64::from(e.t));
            drafted += u64::from(e.drafted);
            // Position j (1..=drafted) after the next token attends to its context, the next token and the drafts
            // before it: c + 1 + j.
            attended += v * (c + 1.0) + v * (v + 1.0) / 2.0;
        }
        if self.lz.n > 0 {
            let (ld, la) = self.lazy_drafts(s, self.lz.d, self.lz.ctx);
            drafted += ld;
            attended += la;
        }
        self.spec_cost(s, n, ctx, prefill_tokens, drafted, attended, restored)
    }

    /// The lazy decoders' drafted tokens and their attention in lazy step `at`, their Σ context being `ctx`: every
    /// one drafts `k` at context `c` (`k(c + 1) + k(k+1)/2`), less what the ones near their end do not draft.
    #[inline]
    fn lazy_drafts(&self, s: &SpecState, at: u64, ctx: u64) -> (u64, f64) {
        let slot = self.lz.ring.get((at & self.lz.ring.mask()) as usize);
        let (n, k) = (self.lz.n, u64::from(s.k));
        let drafted = n * k - u64::from(slot.short);
        let attended = k * (ctx + n) + n * k * (k + 1) / 2 - slot.acorr;
        (drafted, attended as f64)
    }

    /// A speculative step's duration: `n` sequences holding `ctx` tokens, `prefill_tokens` of prefill chunks (the
    /// scheduled ones), `drafted` drafted tokens attending to `attended` tokens of context in all.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn spec_cost(
        &self,
        s: &SpecState,
        n: f64,
        ctx: u64,
        prefill_tokens: u32,
        drafted: u64,
        attended: f64,
        restored: PerTier,
    ) -> f64 {
        let draft_ms = s.draft_cost_ms * drafted as f64;
        if let Some(r) = &self.p.roofline {
            let shape = self
                .roofline_shape(n, ctx, prefill_tokens)
                .verifying(drafted as f64, attended);
            return self.with_restores(r.step_ms(&shape) + draft_ms, restored);
        }
        let mut d = self.p.step_fixed_ms + self.p.per_seq_ms * n + self.p.per_ctx_token_ms * ctx as f64;
        if self.p.batch_kv_ms_per_ktok > 0.0 {
            d += self.p.batch_kv_ms_per_ktok * n * ctx as f64 / 1000.0;
        }
        if prefill_tokens > 0 {
            d = self.with_prefill(d, prefill_tokens, ctx);
        }
        d += drafted as f64 / self.p.prefill_tokens_per_ms + draft_ms;
        self.with_restores(d, restored)
    }

    /// Step time `d` plus the time to restore `restored_tokens` from each tier, milliseconds (added tier by tier).
    fn with_restores(&self, mut d: f64, restored_tokens: PerTier) -> f64 {
        for (t, tier) in self.kv.tiers.iter().enumerate() {
            if restored_tokens[t] > 0 {
                d += restored_tokens[t] as f64 / tier.rate;
            }
        }
        d
    }

    /// The step just scheduled priced by a deployment's roofline: `n` sequences holding `ctx` tokens of KV, of
    /// which the prefill chunks compute `prefill_tokens` and every other sequence one token.
    fn roofline_step_ms(&self, r: &RooflineCost, n: f64, ctx: u64, prefill_tokens: u32) -> f64 {
        r.step_ms(&self.roofline_shape(n, ctx, prefill_tokens))
    }

    /// The shape [`Self::roofline_step_ms`] prices.
    fn roofline_shape(&self, n: f64, ctx: u64, prefill_tokens: u32) -> StepShape {
        let (mut chunks, mut chunk_ctx) = (0u64, 0u64);
        if prefill_tokens > 0 {
            for s in self.sched.iter().filter(|s| s.prefill) {
                chunks += 1;
                chunk_ctx += u64::from(s.t);
            }
        }
        let decoders = n - chunks as f64;
        StepShape {
            seqs: n,
            tokens: decoders + f64::from(prefill_tokens),
            ctx: ctx as f64,
            decode_attended: (ctx - chunk_ctx) as f64 + decoders,
            prefill_attended: if prefill_tokens > 0 {
                self.prefill_attended()
            } else {
                0.0
            },
            logit_rows: n,
        }
    }

    /// [`Scheduler::LlamaCpp`]'s step, as llama-server's `update_slots` builds one batch: one token of every
    /// decoding slot (in admission order; a decoder the KV cache cannot hold preempts the most recently admitted
    /// request, as the vLLM schedule does, which a server whose slots each own `max_model_len` never needs); then,
    /// with nothing preempted, waiting requests take free slots FCFS (each holding its whole prompt's KV from the
    /// start, as a slot owns its context); then prompt tokens of the prefilling slots **in slot order**, each as
    /// many as the token budget (`n_batch`) has left. A prompt that completes in the step samples its first token
    /// at the step's end. Returns what [`Self::schedule`] does.
    fn schedule_slots(&mut self) -> (f64, f64, u32, u32) {
        let mut budget = self.p.max_num_batched_tokens;
        let mut sums = BatchSums::default();
        // Decodes first.
        let mut i = 0;
        while i < self.running.len() {
            let idx = self.running[i];
            let (t, p_eff) = {
                let r = &self.reqs[idx as usize];
                (r.t, r.p_eff)
            };
            if t < p_eff || budget == 0 {
                i += 1;
                continue;
            }
            let left = self.reqs[idx as usize].output - self.reqs[idx as usize].generated;
            let (verify, drafted, accepted) = self.spec_decode(idx, left, budget);
            let need = self.new_blocks(t, p_eff, 1 + accepted);
            let mut self_preempted = false;
            while need > 0 && !self.kv.alloc(need) {
                let Some(victim) = self.running.pop() else { break };
                self.preempt(victim);
                if victim == idx {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            self.schedule_running(idx, 1 + accepted, need, &mut sums);
            if drafted > 0 {
                self.note_spec(drafted, accepted);
            }
            budget -= verify;
            i += 1;
        }
        // Free slots take waiting requests.
        let mut restored_tokens = [0u64; MAX_KV_TIERS];
        if self.preempted.is_empty() {
            while let Some(&idx) = self.waiting.front() {
                if self.running.len() >= self.p.max_num_seqs as usize {
                    break;
                }
                let (chain, p_eff, first, prompt) = {
                    let r = &self.reqs[idx as usize];
                    (r.chain, r.p_eff, r.admit_ms.is_nan(), r.prompt)
                };
                // What the slot holds of the prompt bounds the hit: the pool may still hold blocks that the slot
                // llama-server gives the prompt (or the prompt-cache entry it loads) does not.
                let root = self.root_of(chain);
                let slot = self.choose_slot(chain, root, prompt);
                let held = self.load_slot(slot, chain, root, prompt);
                let (reach, gpu_hit_blocks, hit_blocks, per_tier) = self.cached_blocks(chain, p_eff, held / self.bs);
                let need = self.blocks(p_eff) - u64::from(gpu_hit_blocks);
                let Some((conv, restored)) = self.admit_blocks(chain, need, gpu_hit_blocks, hit_blocks, per_tier)
                else {
                    break;
                };
                add_tiers(&mut restored_tokens, &restored);
                self.start_request(idx, chain, first, (reach, hit_blocks), need - conv);
                self.slots[slot as usize].busy = true;
                self.reqs[idx as usize].slot = slot;
                // `--cache-idle-slots`: every idle slot's content is saved as a task starts.
                if self.prompt_cache.is_some() {
                    for s in 0..self.slots.len() as u32 {
                        if !self.slots[s as usize].busy {
                            self.save_slot(s);
                        }
                    }
                }
            }
        }
        // Then prompt tokens, slot by slot, up to the budget (their blocks were taken at admission).
        let mut prefilling: Vec<(u32, u32)> = self
            .running
            .iter()
            .filter(|&&q| {
                let r = &self.reqs[q as usize];
                r.t < r.p_eff
            })
            .map(|&q| (self.reqs[q as usize].slot, q))
            .collect();
        prefilling.sort_unstable();
        for (_, idx) in prefilling {
            if budget == 0 {
                break;
            }
            let r = &self.reqs[idx as usize];
            let tokens = (r.p_eff - r.t).min(budget);
            self.schedule_running(idx, tokens, 0, &mut sums);
            budget -= tokens;
        }
        let d = self.step_ms(sums.ctx, sums.prefill_tokens, restored_tokens);
        (d, sums.ctx as f64, sums.prefill_tokens, sums.decoders)
    }

    /// Step time `d` plus what its prefill of `prefill_tokens` costs under a linear profile (the fixed part and the
    /// rate, then each optional term in turn, added in that order), the step's KV context `ctx`.
    fn with_prefill(&self, mut d: f64, prefill_tokens: u32, ctx: u64) -> f64 {
        d += self.p.prefill_fixed_ms + f64::from(prefill_tokens) / self.p.prefill_tokens_per_ms;
        if self.p.prefill_ctx_ms_per_ktok > 0.0 {
            d += self.p.prefill_ctx_ms_per_ktok * self.prefill_attended() / 1000.0;
        }
        if self.p.prefill_batch_kv_ms_per_ktok > 0.0 {
            d += self.p.prefill_batch_kv_ms_per_ktok * self.prefill_others_kv(ctx) / 1000.0;
        }
        if self.p.prefill_tile_rows > 0 {
            d += self.row_by_row_ms();
        }
        d
    }

    /// What the step's prompt rows that attend one row at a time cost beyond the prefill's context term
    /// (`prefill_tile_rows`). The step's tokens are cut into ubatches as llama.cpp's `split_equal` cuts a batch
    /// with one KV stream per slot: the batch holds each decoding sequence's token, then each prompt's, slot by
    /// slot; a ubatch takes, from the first sequence with tokens left, the run of sequences with tokens left whose
    /// slots follow one another in that order, and the same number of tokens of each (the least left among them,
    /// at most `ubatch_tokens` in all). A prompt's rows in a ubatch fewer than `prefill_tile_rows` are priced at
    /// `per_ctx_token_ms` per token attended, as a decoding token's, instead of at `prefill_ctx_ms_per_ktok`
    /// (a decoding token is priced as before). Out of line: most steps carry no prompt.
    #[inline(never)]
    fn row_by_row_ms(&self) -> f64 {
        let tile = self.p.prefill_tile_rows;
        let ubatch = match self.p.ubatch_tokens {
            0 => self.p.max_num_batched_tokens,
            u => u,
        };
        // (slot, tokens left, tokens computed, prompt) in batch order.
        let mut seqs: Vec<(u32, u32, u32, bool)> = self
            .sched
            .iter()
            .map(|s| (self.reqs[s.idx as usize].slot, s.tokens, s.t, s.prefill))
            .collect();
        crate::order::sort_by_u64_key(&mut seqs, |&(slot, _, _, prompt)| {
            u64::from(prompt) << 32 | u64::from(slot)
        });
        let mut attended = 0.0;
        let mut run: Vec<usize> = Vec::with_capacity(seqs.len());
        while let Some(first) = seqs.iter().position(|x| x.1 > 0) {
            run.clear();
            run.push(first);
            for (i, x) in seqs.iter().enumerate().skip(first + 1) {
                if x.1 > 0 && x.0 == seqs[run[run.len() - 1]].0 + 1 {
                    run.push(i);
                }
            }
            let k = run.len() as u32;
            let least = run.iter().map(|&i| seqs[i].1).min().unwrap_or(1);
            let each = least.min(ubatch / k).max(1);
            for &i in &run {
                let (_, rows, t, prompt) = &mut seqs[i];
                if *prompt && each < tile {
                    attended += attended_by(each, *t);
                }
                *rows -= each;
                *t += each;
            }
        }
        (self.p.per_ctx_token_ms - self.p.prefill_ctx_ms_per_ktok / 1000.0).max(0.0) * attended
    }

    /// Σ over the step's prefill tokens of the context each attends to: a chunk of `n` after `t` computed tokens
    /// contributes `n·t + n(n−1)/2`.
    fn prefill_attended(&self) -> f64 {
        self.sched
            .iter()
            .filter(|s| s.prefill)
            .map(|s| attended_by(s.tokens, s.t))
            .sum()
    }

    /// The bookkeeping of admitting `idx`, the front of `waiting`, with `hit_blocks` of its prompt cached (`reach`:
    /// the blocks the cache held of its chain, for the miss classification) and `private` blocks of its own: it
    /// leaves the queue and runs from its hit; a first admission records its admission time, cached tokens and miss
    /// class, a resumed one (after preemption) takes what it gets from the cache off its recomputed tokens. Both
    /// schedulers call it; what goes into the step is theirs.
    fn start_request(&mut self, idx: u32, chain: u32, first: bool, (reach, hit_blocks): (u32, u32), private: u64) {
        self.waiting.pop_front();
        self.wait_on(chain, false);
        let hit = hit_blocks * self.bs;
        let now = self.now_ms;
        let ever = self.kv.ever(chain);
        let seq = self.next_seq;
        self.next_seq += 1;
        let r = &mut self.reqs[idx as usize];
        r.state = State::Running;
        r.seq = seq;
        r.t = hit;
        r.private = private;
        if first {
            r.admit_ms = now;
            r.cached_tokens = hit;
            r.miss = classify(r, hit_blocks, reach, ever, self.bs);
            if !self.kv.tiers.is_empty() {
                self.split_tier_misses(idx, chain, hit_blocks, reach, ever);
            }
        } else {
            // A resumed request: what it recomputes beyond its hit was computed before.
            r.recomputed_tokens = r.recomputed_tokens.saturating_sub(u64::from(hit));
            self.stats.recomputed_tokens = self.stats.recomputed_tokens.saturating_sub(u64::from(hit));
        }
        self.running.push(idx);
        self.eager.push(idx);
        self.admitted.push(idx);
    }

    /// Of the blocks a request's first admission found evicted (while idle or while it queued: see [`classify`]),
    /// those a tier held once and dropped move to "evicted from tier N", N the deepest tier that held them.
    fn split_tier_misses(&mut self, idx: u32, chain: u32, hit_blocks: u32, reach: u32, ever: u32) {
        let r = &self.reqs[idx as usize];
        let ever_c = ever.min((r.p_eff - 1) / self.bs);
        let arrival_c = r.reach_at_arrival.min(ever_c);
        let reach_c = reach.min(ever_c);
        let (mut idle, mut queued) = ([0u64; MAX_KV_TIERS], [0u64; MAX_KV_TIERS]);
        self.kv.tier_lost(chain, arrival_c.max(hit_blocks), ever_c, &mut idle);
        self.kv
            .tier_lost(chain, reach_c.max(hit_blocks), arrival_c, &mut queued);
        let bs = u64::from(self.bs);
        let m = &mut self.reqs[idx as usize].miss;
        for t in 0..MAX_KV_TIERS {
            let i = (idle[t] * bs).min(m.evicted_idle);
            let q = (queued[t] * bs).min(m.evicted_queued);
            m.evicted_idle -= i;
            m.evicted_queued -= q;
            m.tier[t] += i + q;
        }
    }

    /// Σ over the step's prefill chunks of their new tokens × the KV context of the step's other sequences
    /// (`ctx`, the step's Σcontext, less the chunk's own): what a unified KV cache makes a prompt token attend to
    /// beyond its own context (`prefill_batch_kv_ms_per_ktok`).
    fn prefill_others_kv(&self, ctx: u64) -> f64 {
        self.sched
            .iter()
            .filter(|s| s.prefill)
            .map(|s| f64::from(s.tokens) * ctx.saturating_sub(u64::from(s.t)) as f64)
            .sum()
    }

    /// Blocks needed by the scheduled decoders for steps 2..=k (step 1 is already allocated).
    fn extra_blocks(&self, k: u64) -> u64 {
        let eager: u64 = self
            .sched
            .iter()
            .map(|s| {
                let t = u64::from(s.t);
                self.ceil_bs(t + k) - self.ceil_bs(t + 1)
            })
            .sum();
        eager + self.lazy_extra_blocks(k)
    }

    /// A stretch's blocks for steps 2..=`k` taken step by step, each at its step's start (`start` plus the stretch's
    /// first `j − 1` steps) after the TTL tiers expire at that moment, as a step scheduled on its own would: a
    /// block evicted into a tier is stamped with the step that needed its space, wherever the stretch is cut (an
    /// arrival, a fleet's other replicas, sim-server's real-time loop). Only with a TTL tier and evictions: other
    /// tiers keep no time, and free blocks hold no stamp.
    ///
    /// The result is that of the step-by-step loop, computed in segments: a run of steps in which no tier can
    /// expire anything (every step starts before the earliest expiry, and before any block the run writes could
    /// expire) and tier 0 has room for every block the run evicts (so nothing is trimmed) takes its blocks in one
    /// pass, each evicted chain written into tier 0 as its first step's piece, then the rest stamped with the last
    /// step that took from it (what the steps in between write is merged into the same range, and no one reads the
    /// stamps in between). Steps where something expires or tier 0 is full run one by one, as before.
    fn alloc_step_by_step(&mut self, k: u64, start: f64, d1: f64, b: f64) {
        let tau = |j: u64| start + stretch_ms(d1, b, j - 1);
        if self.bs > LAZY_MAX_BS || !(b >= 0.0 && d1 > 0.0) || tier_steps_one_by_one() {
            // Large blocks, or a step time that could shrink: one step at a time.
            let mut taken = 0;
            for j in 2..=k {
                let need = self.extra_blocks(j);
                if need > taken {
                    self.kv.now_ms = tau(j);
                    self.kv.expire_tiers();
                    // Cannot fail: the whole stretch's blocks were checked.
                    let _ = self.kv.alloc(need - taken);
                    taken = need;
                }
            }
            return;
        }
        fill_step_blocks(&mut self.step_blocks, self.bs, &self.lz, &self.sched);
        let sb = &self.step_blocks;
        let total = sb.need(k);
        debug_assert_eq!(total, self.extra_blocks(k), "a stretch's blocks by residue");
        // Tiers a run writes: tier 0 when written on eviction, and below it the next one when that is too.
        let writes0 = self.kv.tiers.first().is_some_and(|t| !t.always);
        let writes1 = writes0 && self.kv.tiers.get(1).is_some_and(|t| !t.always);
        let written_ttl = self
            .kv
            .tiers
            .iter()
            .take(usize::from(writes0) + usize::from(writes1))
            .map(|t| t.ttl_ms)
            .fold(f64::INFINITY, f64::min);
        let mut taken = 0;
        let mut j = 2;
        while taken < total {
            // The next step that takes blocks.
            let j1 = sb.step_reaching(taken + 1, j, k);
            let t1 = tau(j1);
            // No expiry before the barrier: the tiers' earliest, and any block the run writes (stamped t1 or later).
            let barrier = self.kv.next_expiry().min(t1 + written_ttl);
            // Blocks the run may take: the free ones, then evictions as long as the tier below tier 0 (which takes
            // what tier 0 drops) has room for them.
            let free = self.kv.free();
            let max_need = if writes1 {
                let (t0, t1r) = (&self.kv.tiers[0], &self.kv.tiers[1]);
                let room = t0.capacity.saturating_sub(t0.used) + t1r.capacity.saturating_sub(t1r.used);
                taken.saturating_add(free).saturating_add(room)
            } else {
                u64::MAX
            };
            let mut j2 = if max_need >= total {
                k
            } else {
                sb.step_reaching(max_need + 1, j1, k) - 1
            };
            if t1 >= barrier {
                j2 = j1 - 1;
            } else if j2 >= j1 && tau(j2) >= barrier {
                // The last step before the barrier (tau grows with j).
                let (mut lo, mut hi) = (j1, j2 - 1);
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if tau(mid) < barrier { lo = mid } else { hi = mid - 1 }
                }
                j2 = lo;
            }
            if j2 < j1 {
                // Something expires at this step, or the tier below would trim: the step on its own.
                let need = sb.need(j1);
                self.kv.now_ms = t1;
                self.kv.expire_tiers();
                let _ = self.kv.alloc(need - taken);
                taken = need;
                j = j1 + 1;
                continue;
            }
            let need = sb.need(j2);
            // Block `p` (1-based) of those the run evicts is taken by the first step whose need reaches it.
            let base = taken + free;
            let evict = (need - taken).saturating_sub(free);
            let at = |p: u64| {
                let i = sb.step_reaching(base + p, j1, j2);
                (tau(i), sb.need(i) - base)
            };
            let done = if evict > 0 { self.kv.evict_timed(evict, at) } else { 0 };
            let upto = if done < evict {
                // Stopped before a chain whose blocks tier 0 holds in part: the rest of that step one by one.
                let i = sb.step_reaching(base + done + 1, j1, j2);
                let upto = sb.need(i);
                self.kv.now_ms = tau(i);
                self.kv.evict(upto - base - done);
                j = i + 1;
                upto
            } else {
                j = j2 + 1;
                need
            };
            self.kv.private += upto - taken;
            // As the last step that took blocks left it.
            self.kv.now_ms = tau(sb.step_reaching(upto, j1, j2));
            taken = upto;
        }
    }

    /// [`Self::extra_blocks`] of the lazy requests: the count depends only on where each context sits in its
    /// last block, so it is summed over block positions, not requests.
    fn lazy_extra_blocks(&self, k: u64) -> u64 {
        if self.lz.n == 0 {
            return 0;
        }
        // A context at position `pos` in its last block (0 ≤ pos < bs) needs ceil((pos + k)/bs) − 1 =
        // ⌊(pos + k − 1)/bs⌋ more blocks; with k − 1 = q·bs + ρ that is q, plus one where pos ≥ bs − ρ.
        let bs = u64::from(self.bs);
        let q = self.div_bs(k - 1);
        let rho = self.mod_bs(k - 1);
        // Classes whose position is in [bs − ρ, bs): ρ consecutive classes (cyclically) from the one at bs − ρ.
        let first = self.mod_bs(2 * bs - rho - self.mod_bs(self.lz.d));
        let mut over = 0;
        for i in 0..rho {
            over += self.lz.cnt[self.mod_bs(first + i) as usize];
        }
        q * self.lz.n + over
    }

    /// The class of a lazy request anchored with context `t0` at lazy step `d0` (see [`Lazy::cnt`]).
    fn lazy_class(&self, t0: u32, d0: u64) -> usize {
        let bs = u64::from(self.bs);
        self.mod_bs(self.mod_bs(u64::from(t0)) + bs - self.mod_bs(d0)) as usize
    }

    /// The running part of a step while some requests are lazy: eager requests one by one (as the full schedule
    /// does), lazy ones as a whole. `None`, with nothing changed, when the step might not serve every lazy request
    /// in full (an eager request before one of them would be cut short by the token budget) or the KV cache cannot
    /// hold the batch's new blocks (the full schedule would preempt): the caller then brings every request up to
    /// date and schedules them one by one. When every allocation fits, allocating their sum at once leaves the KV
    /// cache exactly as allocating them in turn would.
    fn schedule_lazy(&mut self, budget: u32) -> Option<(u32, BatchSums)> {
        let n = u32::try_from(self.lz.n).ok()?;
        let d = self.lz.d;
        // Lazy requests whose last block is full need a new one; under speculative decoding each verifies up to
        // `k + 1` positions and their blocks are summed in the ring.
        let (lazy_tokens, mut need_total, ctx) = match &self.spec {
            None => (
                n,
                self.lz.cnt[self.mod_bs(u64::from(self.bs) - self.mod_bs(d)) as usize],
                self.lz.sum_off.wrapping_add(self.lz.n.wrapping_mul(d)),
            ),
            Some(s) => {
                let slot = self.lz.ring.get((d & self.lz.ring.mask()) as usize);
                let verify = u64::from(n) * u64::from(s.k + 1) - u64::from(slot.short);
                (u32::try_from(verify).ok()?, u64::from(slot.blocks), self.lz.ctx)
            }
        };
        let mut budget = budget.checked_sub(lazy_tokens)?;
        self.plan.clear();
        for i in 0..self.eager.len() {
            let idx = self.eager[i];
            let r = &self.reqs[idx as usize];
            let (t, p_eff, left, seq) = (r.t, r.p_eff, r.output - r.generated, r.seq);
            let mut want = wanted(t, p_eff);
            let spec_k = self.spec.as_ref().map(|s| s.k).filter(|_| t >= p_eff);
            if let Some(k) = spec_k {
                want = (k + 1).min(left.max(1));
            }
            let tokens = want.min(budget);
            if tokens < want && seq < self.lz.max_seq {
                return None;
            }
            if tokens == 0 {
                continue;
            }
            let (mut emit, mut drafted, mut accepted) = (tokens, 0, 0);
            if spec_k.is_some() {
                let verify;
                (verify, drafted, accepted) = self.spec_decode(idx, left, budget);
                debug_assert_eq!(verify, tokens);
                emit = 1 + accepted;
            }
            let need = self.new_blocks(t, p_eff, emit);
            need_total += need;
            self.plan.push((idx, emit, need, drafted, accepted));
            budget -= tokens;
        }
        if need_total > self.kv.available() {
            return None;
        }
        // Cannot fail: checked just above.
        let _ = self.kv.alloc(need_total);
        let mut sums = BatchSums {
            ctx,
            prefill_tokens: 0,
            decoders: n,
        };
        for pi in 0..self.plan.len() {
            let (idx, tokens, need, drafted, accepted) = self.plan[pi];
            self.schedule_running(idx, tokens, need, &mut sums);
            if drafted > 0 {
                self.note_spec(drafted, accepted);
            }
        }
        Some((budget, sums))
    }

    /// Blocks running request with context `t` (prefilling up to `p_eff`) needs for `tokens` more: a prefill chunk
    /// its new blocks, a decoded token a new block exactly when the last one is full.
    fn new_blocks(&self, t: u32, p_eff: u32, tokens: u32) -> u64 {
        if t < p_eff || tokens > 1 {
            self.blocks(t + tokens) - self.blocks(t)
        } else {
            u64::from(self.rem_bs(t) == 0)
        }
    }

    /// Put running request `idx` in the batch with `tokens` tokens, holding `need` newly allocated blocks.
    fn schedule_running(&mut self, idx: u32, tokens: u32, need: u64, sums: &mut BatchSums) {
        let r = &mut self.reqs[idx as usize];
        r.private += need;
        let prefill = r.t < r.p_eff;
        sums.ctx += u64::from(r.t);
        if prefill {
            sums.prefill_tokens += tokens;
        } else {
            sums.decoders += 1;
        }
        self.sched.push(Sched {
            idx,
            tokens,
            prefill,
            t: r.t,
            chain: r.chain,
            left: r.output - r.generated,
            drafted: 0,
            accepted: 0,
        });
    }

    /// Can running request `idx` become lazy? A decoder with tokens still to generate whose chain no other running
    /// or waiting request uses.
    fn lazy_eligible(&self, idx: u32) -> bool {
        let r = &self.reqs[idx as usize];
        if r.state != State::Running || r.t < r.p_eff || r.generated == 0 || r.generated >= r.output {
            return false;
        }
        let ch = &self.kv.chains[r.chain as usize];
        ch.pin_full == 1 && ch.pins == 1 && ch.waiting == 0
    }

    fn join_lazy(&mut self, idx: u32) {
        let d = self.lz.d;
        if self.spec.is_some() {
            let r = &mut self.reqs[idx as usize];
            r.lazy = true;
            r.lz_d0 = d;
            let (t, left, seq, chain) = (r.t, r.output - r.generated, r.seq, r.chain);
            self.lz.n += 1;
            self.lz.ctx += u64::from(t);
            self.lz.max_seq = self.lz.max_seq.max(seq);
            self.kv.chains[chain as usize].lazy = true;
            // Every step emits at least one token: its path fits `left` steps of the ring.
            self.ensure_ring(u64::from(left));
            #[cfg(debug_assertions)]
            let ring_before = self.lz.ring.clone();
            let (steps, tally) = self.spec_join_walk(idx);
            debug_assert_eq!((steps, tally), self.spec_walk_dry(idx));
            #[cfg(debug_assertions)]
            {
                // The fast walk put into the ring exactly what the step-by-step walk takes back out.
                let ring_after = self.lz.ring.clone();
                let _ = self.spec_walk(idx, 0, false, 0);
                let same = self.lz.ring == ring_before;
                debug_assert!(same, "the ring sums of request {idx}'s path");
                self.lz.ring = ring_after;
            }
            let r = &mut self.reqs[idx as usize];
            r.lz_fin = d + steps;
            r.lz_tally = tally;
            self.lz.heap.push(std::cmp::Reverse((d + steps, idx)));
            return;
        }
        let class = self.lazy_class(self.reqs[idx as usize].t, d);
        let r = &mut self.reqs[idx as usize];
        r.lazy = true;
        r.lz_d0 = d;
        let lz = &mut self.lz;
        lz.n += 1;
        lz.sum_off = lz.sum_off.wrapping_add(u64::from(r.t).wrapping_sub(d));
        lz.cnt[class] += 1;
        r.lz_fin = d + u64::from(r.output - r.generated);
        lz.heap.push(std::cmp::Reverse((r.lz_fin, idx)));
        lz.max_seq = lz.max_seq.max(r.seq);
        self.kv.chains[r.chain as usize].lazy = true;
    }

    /// Whether heap entry `(at, idx)` is a lazy request that finishes at lazy step `at`.
    fn lazy_entry_live(&self, at: u64, idx: u32) -> bool {
        let r = &self.reqs[idx as usize];
        r.lazy && r.state == State::Running && r.lz_fin == at
    }

    /// Make the ring of [`Lazy`] cover `steps` lazy steps from now.
    fn ensure_ring(&mut self, steps: u64) {
        let cap = self.lz.ring.len() as u64;
        if steps <= cap {
            return;
        }
        let new_cap = steps.next_power_of_two().max(2 * cap).max(64);
        let mut ring = SpecRing::new(new_cap as usize);
        // The live steps are `d .. d + cap`.
        for j in self.lz.d..self.lz.d + cap {
            ring.set((j & (new_cap - 1)) as usize, self.lz.ring.get((j & (cap - 1)) as usize));
        }
        self.lz.ring = ring;
    }

    /// [`Self::spec_walk`] when request `idx` becomes lazy (its whole path added to the ring, its tally over all of
    /// it), in two phases: while it has more than `k` tokens left every step drafts `k` (its tokens read from the
    /// kind's [`SpecState::emit_table`], the tally summed at the end; [`walk_words`] four steps at a time), then its
    /// last steps one by one. The hot loop of speculative decoding.
    fn spec_join_walk(&mut self, idx: u32) -> (u64, SpecTally) {
        let Some(s) = &self.spec else {
            return (0, SpecTally::default());
        };
        let r = &self.reqs[idx as usize];
        let (t0, mut left, d0, mut n) = (r.t, r.output - r.generated, r.lz_d0, r.spec_steps);
        let key = s.stream(r.spec_id);
        let (thr, kind) = (s.thresholds(r.kind), r.kind);
        let k = s.k;
        let ring = &mut self.lz.ring;
        let mask = ring.len() as u64 - 1;
        let (bs1, shift, bs) = (self.bs - 1, self.bs_shift, self.bs);
        let ceil = |x: u32| {
            if shift != u32::MAX {
                (x + bs1) >> shift
            } else {
                x.div_ceil(bs)
            }
        };
        let mut word = SpecState::word(key, u64::from(n >> 2));
        let mut t = t0;
        let mut m = 0u64;
        let mut last = 0;
        let mut cb = ceil(t);
        // Whole words of four draws while even four steps of `k + 1` tokens leave more than `k` (every one of them
        // drafts `k`): from the first word boundary on, four at a time.
        while left > k {
            if n & 3 == 0 {
                if left > 4 * k + 3 {
                    let mut w = WordWalk {
                        t,
                        left,
                        n,
                        m,
                        cb,
                        last,
                    };
                    let (eb, e8) = (&mut ring.eb[..], s.emit_table(kind));
                    // The usual block size with its constants in the code; other powers of two by a shift; others
                    // by a division. The page keeps one copy, the division (the same integers; its first module
                    // has a size budget).
                    #[cfg(not(target_arch = "wasm32"))]
                    match (bs, shift) {
                        (16, _) => walk_words(eb, d0, e8, thr, key, |x| (x + 15) >> 4, &mut w),
                        (_, u32::MAX) => walk_words(eb, d0, e8, thr, key, |x| x.div_ceil(bs), &mut w),
                        _ => walk_words(eb, d0, e8, thr, key, |x| (x + bs1) >> shift, &mut w),
                    }
                    #[cfg(target_arch = "wasm32")]
                    {
                        let _ = (shift, bs1);
                        walk_words(eb, d0, e8, thr, key, |x| x.div_ceil(bs), &mut w);
                    }
                    WordWalk {
                        t,
                        left,
                        n,
                        m,
                        cb,
                        last,
                    } = w;
                    if left <= k {
                        break;
                    }
                }
                word = SpecState::word(key, u64::from(n >> 2));
            }
            let x = SpecState::bits(word, n);
            n += 1;
            let e = s.full_emit(kind, x);
            t += e;
            let cb1 = ceil(t);
            ring.eb[((d0 + m) & mask) as usize] += emit_blocks(e, cb1 - cb);
            cb = cb1;
            left -= e;
            m += 1;
            last = e;
        }
        let full = m as u32;
        let mut tally = SpecTally {
            tokens: t - t0,
            frames: full,
            steps: full,
            drafted: k * full,
            accepted: t - t0 - full,
            last,
        };
        // Its last steps: `v = left − 1 < k` drafted.
        while left > 0 {
            let v = left - 1;
            let mut a = 0;
            if v > 0 {
                if n & 3 == 0 {
                    word = SpecState::word(key, u64::from(n >> 2));
                }
                let x = SpecState::bits(word, n);
                n += 1;
                a = (s.full_emit(kind, x) - 1).min(v);
                tally.steps += 1;
                tally.drafted += v;
                tally.accepted += a;
            }
            let e = 1 + a;
            let i = ((d0 + m) & mask) as usize;
            ring.eb[i] += emit_blocks(e, ceil(t + e) - ceil(t));
            ring.short[i] += k - v;
            let missing = u64::from(k) * u64::from(k + 1) - u64::from(v) * u64::from(v + 1);
            ring.acorr[i] += u64::from(k - v) * (u64::from(t) + 1) + missing / 2;
            tally.tokens += e;
            tally.frames += 1;
            tally.last = e;
            t += e;
            left -= e;
            m += 1;
        }
        (m, tally)
    }

    /// The steps running decoder `idx` takes to finish from now under speculative decoding if every step serves it
    /// in full (its path's length, as [`Self::spec_walk`] draws it).
    fn spec_path_steps(&self, idx: u32) -> u64 {
        let Some(s) = &self.spec else { return 0 };
        let r = &self.reqs[idx as usize];
        let (mut left, mut n) = (r.output - r.generated, r.spec_steps);
        let key = s.stream(r.spec_id);
        let mut m = 0;
        while left > 0 {
            let v = s.k.min(left - 1);
            let a = s.draw(key, n, r.kind, v);
            n += u32::from(v > 0);
            left -= 1 + a;
            m += 1;
        }
        m
    }

    /// [`Self::spec_walk`]'s steps and tally without touching the ring (debug builds check the fast walk by it).
    fn spec_walk_dry(&mut self, idx: u32) -> (u64, SpecTally) {
        let ring = std::mem::take(&mut self.lz.ring);
        self.lz.ring = SpecRing::new(1);
        let out = self.spec_walk(idx, u64::MAX, true, u64::MAX);
        self.lz.ring = ring;
        out
    }

    /// Walk lazy request `idx`'s path under speculative decoding from where it became lazy (context `t`,
    /// `output − generated` tokens left, its stream's draws from number `spec_steps` on), one lazy step `lz_d0 + m`
    /// at a time, each serving it in full (`min(k, left − 1)` drafted): adds (`add`) or takes back its part of the
    /// ring's sums for its steps `m ≥ from`. Returns the steps it takes to finish and its tally over steps
    /// `m < upto`. Its draws are exactly those the step-by-step schedule makes.
    #[inline(never)]
    fn spec_walk(&mut self, idx: u32, from: u64, add: bool, upto: u64) -> (u64, SpecTally) {
        let Some(s) = &self.spec else {
            return (0, SpecTally::default());
        };
        let r = &self.reqs[idx as usize];
        let (mut t, mut left, d0, kind, mut n) = (r.t, r.output - r.generated, r.lz_d0, r.kind, r.spec_steps);
        let key = s.stream(r.spec_id);
        let k = s.k;
        let ring = &mut self.lz.ring;
        let mask = ring.len() as u64 - 1;
        let (bs, shift) = (u64::from(self.bs), self.bs_shift);
        let ceil = |x: u64| {
            if shift != u32::MAX {
                (x + bs - 1) >> shift
            } else {
                x.div_ceil(bs)
            }
        };
        let mut word = if n & 3 != 0 {
            SpecState::word(key, u64::from(n >> 2))
        } else {
            0
        };
        let mut tally = SpecTally::default();
        let mut m = 0u64;
        while left > 0 {
            let v = k.min(left - 1);
            let a = if v > 0 {
                if n & 3 == 0 {
                    word = SpecState::word(key, u64::from(n >> 2));
                }
                let x = SpecState::bits(word, n);
                n += 1;
                s.accepted(kind, x, v)
            } else {
                0
            };
            let e = 1 + a;
            if m >= from {
                let i = ((d0 + m) & mask) as usize;
                let blocks = (ceil(u64::from(t + e)) - ceil(u64::from(t))) as u32;
                let (short, acorr) = if v < k {
                    let full = u64::from(k) * u64::from(k + 1) - u64::from(v) * u64::from(v + 1);
                    (k - v, u64::from(k - v) * (u64::from(t) + 1) + full / 2)
                } else {
                    (0, 0)
                };
                // Every part of the slot holds at least this path's share of it: no borrow crosses the word.
                if add {
                    ring.eb[i] += emit_blocks(e, blocks);
                    ring.short[i] += short;
                    ring.acorr[i] += acorr;
                } else {
                    ring.eb[i] -= emit_blocks(e, blocks);
                    ring.short[i] -= short;
                    ring.acorr[i] -= acorr;
                }
            }
            if m < upto {
                tally.tokens += e;
                tally.frames += 1;
                if v > 0 {
                    tally.steps += 1;
                    tally.drafted += v;
                    tally.accepted += a;
                }
                tally.last = e;
            }
            t += e;
            left -= e;
            m += 1;
        }
        (m, tally)
    }

    /// The lazy step at which the next lazy request finishes (stale heap entries are dropped on the way).
    fn lazy_next_finish(&mut self) -> u64 {
        while let Some(&std::cmp::Reverse((at, idx))) = self.lz.heap.peek() {
            if self.lazy_entry_live(at, idx) {
                return at;
            }
            self.lz.heap.pop();
        }
        u64::MAX
    }

    /// Bring lazy request `idx` up to date (it leaves the lazy set): its context, tokens and blocks as if it had
    /// been advanced step by step, and the blocks it completed filled into its chain.
    #[inline(never)]
    fn materialize(&mut self, idx: u32) {
        if self.spec.is_some() {
            self.materialize_spec(idx);
            return;
        }
        let (t0, d0, chain) = {
            let r = &self.reqs[idx as usize];
            (r.t, r.lz_d0, r.chain)
        };
        let class = self.lazy_class(t0, d0);
        let lz = &mut self.lz;
        lz.n -= 1;
        lz.sum_off = lz.sum_off.wrapping_sub(u64::from(t0).wrapping_sub(d0));
        lz.cnt[class] -= 1;
        self.kv.chains[chain as usize].lazy = false;
        let delta = (self.lz.d - d0) as u32;
        self.reqs[idx as usize].lazy = false;
        if delta == 0 {
            return;
        }
        let new_t = t0 + delta;
        let grown = self.blocks(new_t) - self.blocks(t0);
        let (g0, g1) = (self.div_bs(u64::from(t0)) as u32, self.div_bs(u64::from(new_t)) as u32);
        let conv = if g0 < g1 { self.kv.fill(chain, g0, g1) } else { 0 };
        let r = &mut self.reqs[idx as usize];
        r.private = r.private + grown - conv;
        r.t = new_t;
        r.generated += delta;
        r.last_token_ms = self.lz.last_end;
        r.last_emit = self.lz.last_k as u32;
    }

    /// [`Self::materialize`] under speculative decoding: its tally since it became lazy (known at its finish, else
    /// walked again, its remaining steps taken out of the ring), then as without speculation.
    fn materialize_spec(&mut self, idx: u32) {
        let (t0, d0, chain, fin, tally) = {
            let r = &self.reqs[idx as usize];
            (r.t, r.lz_d0, r.chain, r.lz_fin, r.lz_tally)
        };
        let delta = self.lz.d - d0;
        let tally = if d0 + delta == fin {
            tally
        } else {
            self.spec_walk(idx, delta, false, delta).1
        };
        let new_t = t0 + tally.tokens;
        self.lz.n -= 1;
        self.lz.ctx -= u64::from(new_t);
        self.kv.chains[chain as usize].lazy = false;
        let r = &mut self.reqs[idx as usize];
        r.lazy = false;
        if delta == 0 {
            return;
        }
        let grown = self.blocks(new_t) - self.blocks(t0);
        let (g0, g1) = (self.div_bs(u64::from(t0)) as u32, self.div_bs(u64::from(new_t)) as u32);
        let conv = if g0 < g1 { self.kv.fill(chain, g0, g1) } else { 0 };
        let r = &mut self.reqs[idx as usize];
        r.private = r.private + grown - conv;
        r.t = new_t;
        r.generated += tally.tokens;
        r.frames += tally.frames;
        r.spec_steps += tally.steps;
        r.spec_drafted += tally.drafted;
        r.spec_accepted += tally.accepted;
        r.last_token_ms = self.lz.last_end;
        r.last_emit = tally.last;
    }

    /// Bring every lazy request up to date: afterwards every running request is eager.
    #[inline]
    fn materialize_all(&mut self) {
        if self.lz.n > 0 {
            self.materialize_all_now();
        }
    }

    /// [`Self::materialize_all`]'s work: rare, and reached from several places, so kept out of line.
    #[cold]
    #[inline(never)]
    fn materialize_all_now(&mut self) {
        for i in 0..self.running.len() {
            let idx = self.running[i];
            if self.reqs[idx as usize].lazy {
                self.materialize(idx);
            }
        }
        self.lz.heap.clear();
        self.lz.max_seq = 0;
        self.eager.clone_from(&self.running);
    }

    /// A request on `chain` starts (`add`) or stops waiting: counted on each chain of its lineage, so that no
    /// request it could read becomes lazy while it waits. One that starts waiting and finds a lazy chain in its
    /// lineage (whose blocks it will look up) has every request brought up to date first.
    #[inline(never)]
    fn wait_on(&mut self, chain: u32, add: bool) {
        let mut x = chain;
        let mut lazy = false;
        while x != NONE {
            let ch = &mut self.kv.chains[x as usize];
            if add {
                ch.waiting += 1;
            } else {
                ch.waiting -= 1;
            }
            lazy |= ch.lazy;
            x = ch.parent;
        }
        if lazy && add {
            self.materialize_all();
        }
    }

    /// Run one step, or a closed-form stretch of up to `max_steps` identical pure-decode steps that ends with the
    /// first step ending at or after `until_ms` (pass `f64::INFINITY` for no bound). `None` when idle.
    pub(crate) fn advance(&mut self, max_steps: u64, until_ms: f64) -> Option<Advance> {
        if self.running.is_empty() && self.waiting.is_empty() {
            return None;
        }
        if max_steps <= 1 {
            self.materialize_all();
        }
        let (d1, ctx, prefill_tokens, decoders) = self.schedule();
        if self.sched.is_empty() && self.lz.n == 0 {
            return None;
        }
        let pure = prefill_tokens == 0 && self.admitted.is_empty() && self.preempted.is_empty();
        // A speculative stretch consumes the ring's slots of its steps itself.
        let spec_stretch = pure && max_steps > 1 && self.spec.is_some() && self.sched.is_empty() && self.lz.n > 0;
        let (k, end) = if spec_stretch {
            // A tier's expiry can make a waiting request admissible (its prefix is recomputed, not restored, and
            // needs fewer blocks at once), and a step by step run tries to admit it at the first step after the
            // expiry: the stretch ends there too.
            let until_ms = if self.kv.any_ttl && !self.waiting.is_empty() {
                until_ms.min(self.kv.next_expiry())
            } else {
                until_ms
            };
            self.spec_stretch(d1, ctx, decoders, max_steps, until_ms)
        } else {
            self.stretch(d1, ctx, decoders, pure, max_steps, until_ms)
        };
        let log_end = self.log_end();
        self.finished.clear();
        let spec = self.spec.is_some();
        for si in 0..self.sched.len() {
            let Sched {
                idx,
                tokens,
                prefill,
                t: old_t,
                chain,
                drafted,
                accepted,
                ..
            } = self.sched[si];
            // Under speculative decoding a decoder's `tokens` are what it emits (and `k` is 1).
            let adv = if prefill || spec { tokens } else { k as u32 };
            let new_t = old_t + adv;
            if !prefill && k > 1 {
                let extra = self.ceil_bs(u64::from(new_t)) - self.ceil_bs(u64::from(old_t) + 1);
                self.reqs[idx as usize].private += extra;
            }
            let (g0, g1) = (
                self.div_bs(u64::from(old_t)) as u32,
                self.div_bs(u64::from(new_t)) as u32,
            );
            // Only a step that completes a block can extend the chain's cached prefix.
            let conv = if g0 < g1 { self.kv.fill(chain, g0, g1) } else { 0 };
            let r = &mut self.reqs[idx as usize];
            r.private -= conv;
            r.t = new_t;
            let emitted = if prefill {
                u32::from(new_t == r.p_eff)
            } else if spec {
                tokens
            } else {
                k as u32
            };
            r.last_emit = emitted;
            if spec {
                r.frames += u32::from(emitted > 0);
                if drafted > 0 {
                    r.spec_steps += 1;
                    r.spec_drafted += drafted;
                    r.spec_accepted += accepted;
                }
            }
            if emitted > 0 {
                if r.generated == 0 {
                    r.first_token_ms = end;
                    r.itl_from = log_end;
                } else if prefill {
                    // Resumed after a preemption: one long gap.
                    r.itl_gaps.push(end - r.last_token_ms);
                    r.itl_from = log_end;
                }
                r.generated += emitted;
                r.last_token_ms = end;
                if r.generated >= r.output {
                    r.state = State::Done;
                    r.finish_ms = end;
                    r.itl_to = log_end;
                    self.finished.push(idx);
                }
            }
        }
        if self.llama && self.finished.len() > 1 {
            // The slot schedule puts decodes before prompts: back to admission order, as `running` is.
            in_admission_order(&mut self.finished, &self.reqs);
        }
        // What finished so far was scheduled one by one: eager requests, in admission order.
        let eager_done = self.finished.len();
        if eager_done > 0 {
            remove_ordered(&mut self.eager, &self.finished);
        }
        if self.lz.n > 0 {
            if !self.lz.ring.is_empty() && !spec_stretch {
                let mask = self.lz.ring.mask();
                for j in self.lz.d..self.lz.d + k {
                    self.lz.ctx += u64::from(self.lz.ring.take_emit((j & mask) as usize));
                }
            }
            self.lz.d += k;
            self.lz.last_end = end;
            self.lz.last_k = k;
            while let Some(&std::cmp::Reverse((at, idx))) = self.lz.heap.peek() {
                if at > self.lz.d {
                    break;
                }
                self.lz.heap.pop();
                if !self.lazy_entry_live(at, idx) {
                    continue;
                }
                self.materialize(idx);
                let r = &mut self.reqs[idx as usize];
                r.state = State::Done;
                r.finish_ms = end;
                r.itl_to = log_end;
                self.finished.push(idx);
            }
            if self.finished.len() > eager_done && self.finished.len() > 1 {
                // In admission order, as a step-by-step pass over the batch finds them.
                in_admission_order(&mut self.finished, &self.reqs);
            }
        }
        if !self.finished.is_empty() {
            self.kv.now_ms = end;
            for fi in 0..self.finished.len() {
                let idx = self.finished[fi];
                self.release_blocks(idx);
            }
            // `finished` is in admission order, as `running` is: removed in one pass, without looking requests up.
            remove_ordered(&mut self.running, &self.finished);
        }
        if max_steps > 1 && self.lazy_ok && !self.llama && (!self.lz.cnt.is_empty() || self.spec.is_some()) {
            let mut eager = std::mem::take(&mut self.eager);
            eager.retain(|&idx| {
                let join = self.lazy_eligible(idx);
                if join {
                    self.join_lazy(idx);
                }
                !join
            });
            self.eager = eager;
        }
        self.now_ms = end;
        self.stats.max_running = self.stats.max_running.max(self.running.len() as u32);
        self.trim_log();
        Some(Advance { steps: k, end_ms: end })
    }

    /// [`Self::advance`]'s stretch after its first step was scheduled (duration `d1`, Σ context `ctx`, `decoders`
    /// decoding): how many identical pure-decode steps it runs in closed form, their blocks, log and counters.
    /// Returns the steps and the end.
    fn stretch(&mut self, d1: f64, ctx: f64, decoders: u32, pure: bool, max_steps: u64, until_ms: f64) -> (u64, f64) {
        let n = self.sched.len() as u64 + self.lz.n;
        // Σcontext grows by n per pure-decode step: the step time grows by `b` per step.
        // A roofline's bound may switch within the stretch: it ends where the bound at its first step stops holding.
        let mut bound_holds = u64::MAX;
        let b = if !pure {
            0.0
        } else if let Some(r) = &self.p.roofline {
            let (b, held) = r.decode_stretch(n as f64, ctx);
            bound_holds = held;
            b
        } else if self.p.batch_kv_ms_per_ktok > 0.0 {
            let nf = n as f64;
            nf * (self.p.per_ctx_token_ms + self.p.batch_kv_ms_per_ktok * nf / 1000.0)
        } else {
            self.p.per_ctx_token_ms * n as f64
        };
        let mut k = 1u64;
        let mut extra_at_k: Option<(u64, u64)> = None;
        if pure && max_steps > 1 && self.spec.is_none() {
            // Steps until the first finish.
            let mut kmax = max_steps.min(bound_holds);
            for s in &self.sched {
                kmax = kmax.min(u64::from(s.left));
            }
            if self.lz.n > 0 {
                kmax = kmax.min(self.lazy_next_finish() - self.lz.d);
            }
            // Steps until the step that contains `until_ms` ends.
            let span = until_ms - self.now_ms;
            // Only when the first `kmax − 1` steps already reach `until_ms` can the bound cut the stretch shorter.
            if span.is_finite() && kmax > 1 && stretch_ms(d1, b, kmax - 1) >= span {
                let ks = steps_to_cover(d1, b, span);
                kmax = kmax.min(ks.max(1));
            }
            // Steps the KV cache can hold.
            if kmax > 1 {
                let avail = self.kv.available();
                let at_max = self.extra_blocks(kmax);
                extra_at_k = Some((kmax, at_max));
                if at_max > avail {
                    let (mut lo, mut hi) = (1u64, kmax);
                    while lo < hi {
                        let mid = lo + (hi - lo).div_ceil(2);
                        if self.extra_blocks(mid) <= avail {
                            lo = mid
                        } else {
                            hi = mid - 1
                        }
                    }
                    kmax = lo;
                }
            }
            k = kmax.max(1);
        }
        let kf = k as f64;
        let duration = stretch_ms(d1, b, k);
        let start = self.now_ms;
        let end = start + duration;
        if k > 1 {
            let extra = match extra_at_k {
                Some((kk, e)) if kk == k => e,
                _ => self.extra_blocks(k),
            };
            if self.kv.any_ttl && extra > self.kv.free() {
                self.alloc_step_by_step(k, start, d1, b);
            } else {
                // Cannot fail: checked above.
                let _ = self.kv.alloc(extra);
            }
        }
        if self.keep_log {
            self.log.push((d1, d1 + b * (kf - 1.0), k));
        }
        self.stats.steps += k;
        self.stats.busy_ms += duration;
        if decoders > 0 {
            self.stats.batch_time_ms += f64::from(decoders) * duration;
            self.stats.decode_time_ms += duration;
            // Mean context per decoding sequence over the stretch (context grows by 1 per step).
            self.stats.ctx_time += (ctx / n as f64 + (kf - 1.0) / 2.0) * duration;
        }
        (k, end)
    }

    /// The stretch of a pure-decode step of lazy decoders only under speculative decoding: step after step, each
    /// costing what the step-by-step schedule would make it cost (Σ context and drafted tokens come from the ring in
    /// O(1)), until the first lazy decoder finishes, the step that ends at or after `until_ms`, `max_steps`, or a
    /// step the schedule could not serve in full (the token budget or the KV cache short: the next call then
    /// schedules it request by request). It consumes the ring's slots of its steps (their tokens added to the lazy
    /// Σ context). Returns the steps and the end.
    ///
    /// The hot loop of speculative decoding: the step's cost is [`Self::spec_cost`]'s, with the parts that do not
    /// change inside the stretch computed once, in the same order of operations (so the same bits); the counters
    /// and the clock are summed in registers in step order, as one step at a time sums them; without KV tiers the
    /// stretch's blocks are allocated at its end in one piece (allocating the sum leaves the cache as allocating
    /// each step's in turn would, and no step of the stretch reads it).
    fn spec_stretch(&mut self, d1: f64, ctx: f64, decoders: u32, max_steps: u64, until_ms: f64) -> (u64, f64) {
        let Some(s) = self.spec.take() else {
            return (0, self.now_ms);
        };
        let n = self.lz.n;
        let nf = n as f64;
        let d = self.lz.d;
        let kmax = max_steps.min(self.lazy_next_finish() - d).max(1);
        let mask = self.lz.ring.mask();
        let full = n * u64::from(s.k + 1);
        let budget = u64::from(self.p.max_num_batched_tokens);
        // A step whose decoders leave another share of the budget than the first step's (one near its end drafts
        // fewer) may let a waiting request in with a chunk of it, where the first step's share could not: while
        // requests wait and a slot is free, the stretch keeps the first step's share.
        let first_tokens = full - u64::from(self.lz.ring.get((d & mask) as usize).short);
        let admits = !self.waiting.is_empty() && self.running.len() < self.p.max_num_seqs as usize;
        let (tokens_min, tokens_max) = if admits {
            (first_tokens, first_tokens)
        } else {
            (0, budget)
        };
        // Without tiers nothing but the count of blocks matters inside the stretch (see above).
        let at_end = self.kv.tiers.is_empty();
        let used0 = self.kv.used_by_running();
        // While requests wait, the stretch takes free blocks only: an eviction can let one in (a prefix it held
        // on the GPU, or one a tier drops on the way down, is then recomputed chunk by chunk and needs fewer
        // blocks at once), and a step by step run tries to admit it at that step.
        let evict_ok = self.waiting.is_empty();
        let blocks_left = |kv: &Kv| if evict_ok { kv.available() } else { kv.free() };
        // The linear profile's step cost (`spec_cost`), its constant parts computed once.
        let linear = self.p.roofline.is_none();
        let bkv = self.p.batch_kv_ms_per_ktok;
        let full_drafts = n * u64::from(s.k);
        let batch = f64::from(decoders);
        let c = LinearSteps {
            d,
            kmax,
            until_ms,
            full,
            tokens_min,
            tokens_max,
            base: self.p.step_fixed_ms + self.p.per_seq_ms * nf,
            per_ctx: self.p.per_ctx_token_ms,
            bkv_n: (bkv > 0.0).then_some(bkv * nf),
            full_drafts,
            full_term: full_drafts as f64 / self.p.prefill_tokens_per_ms + s.draft_cost_ms * full_drafts as f64,
            prefill_tokens_per_ms: self.p.prefill_tokens_per_ms,
            draft_cost_ms: s.draft_cost_ms,
            batch,
            nf,
            keep_log: self.keep_log,
        };
        let mut st = StepSums {
            k: 0,
            end: self.now_ms,
            busy: self.stats.busy_ms,
            batch_time: self.stats.batch_time_ms,
            decode_time: self.stats.decode_time_ms,
            ctx_time: self.stats.ctx_time,
            lazy_ctx: self.lz.ctx,
            avail_left: blocks_left(&self.kv),
            taken: 0,
            peak: None,
        };
        // Its first step, scheduled already.
        st.add_step(d1, batch, ctx / nf + 0.0);
        if self.keep_log {
            self.log.push((d1, d1, 1));
        }
        st.lazy_ctx += u64::from(self.lz.ring.take_emit((d & mask) as usize));
        // While requests wait and there are no tiers, the stretch takes evictable blocks up to the first chain a
        // waiting request reads (the stretch's evictions are made at its end, least recently used first).
        let mut walk = self.kv.lru_walk();
        let free0 = self.kv.free();
        'stretch: loop {
            if linear && at_end {
                st.peak = None;
                linear_spec_steps(&mut self.lz.ring, &mut self.log, &c, &mut st);
                if let Some(p) = st.peak {
                    self.inner_peak = used0 + p;
                }
                // It stopped where the steps below would: they add nothing.
            }
            while st.k < kmax && st.end < until_ms {
                let slot = self.lz.ring.get(((d + st.k) & mask) as usize);
                let need = u64::from(slot.blocks);
                let avail = if at_end { st.avail_left } else { blocks_left(&self.kv) };
                let tokens = full - u64::from(slot.short);
                if tokens > tokens_max || tokens < tokens_min {
                    break 'stretch;
                }
                if need > avail {
                    if at_end && !evict_ok && self.kv.walk_clear(&mut walk, st.taken + need - free0) {
                        st.avail_left = (free0 + walk.clear).min(self.kv.available()) - st.taken;
                        continue 'stretch;
                    }
                    break 'stretch;
                }
                // Blocks only grow inside the stretch: the last step before this one ended holding the most.
                self.inner_peak = used0 + st.taken;
                if need > 0 {
                    if at_end {
                        st.avail_left -= need;
                    } else {
                        if self.kv.any_ttl {
                            self.kv.now_ms = st.end;
                            self.kv.expire_tiers();
                        }
                        // Cannot fail: checked just above.
                        let _ = self.kv.alloc(need);
                    }
                    st.taken += need;
                }
                let at = d + st.k;
                let dj = if linear {
                    c.step_ms(st.lazy_ctx, slot.short)
                } else {
                    let (drafted, attended) = self.lazy_drafts(&s, at, st.lazy_ctx);
                    self.spec_cost(&s, nf, st.lazy_ctx, 0, drafted, attended, [0; MAX_KV_TIERS])
                };
                st.add_step(dj, batch, st.lazy_ctx as f64 / nf + 0.0);
                if self.keep_log {
                    self.log.push((dj, dj, 1));
                }
                st.lazy_ctx += u64::from(self.lz.ring.take_emit((at & mask) as usize));
            }
            break;
        }
        if at_end && st.taken > 0 {
            // Cannot fail: each step's blocks were checked against what the ones before left.
            let _ = self.kv.alloc(st.taken);
        }
        self.stats.steps += st.k;
        self.stats.busy_ms = st.busy;
        self.stats.batch_time_ms = st.batch_time;
        self.stats.decode_time_ms = st.decode_time;
        self.stats.ctx_time = st.ctx_time;
        self.lz.ctx = st.lazy_ctx;
        self.spec = Some(s);
        (st.k, st.end)
    }

    /// Drop step-log entries no running request still needs. Runs when the log has doubled since the last trim
    /// (amortized O(1) per step even while a long request holds the log's head).
    fn trim_log(&mut self) {
        if self.log.len() < self.log_trim_at {
            return;
        }
        let mut keep = self.log_end();
        for &q in self
            .running
            .iter()
            .chain(self.waiting.iter())
            .chain(self.finished.iter())
        {
            let r = &self.reqs[q as usize];
            if r.generated > 0 || r.state == State::Done {
                keep = keep.min(r.itl_from);
                if let Some(&(a, _)) = r.itl_runs.first() {
                    keep = keep.min(a);
                }
            }
        }
        let drop = (keep.saturating_sub(self.log_base) as usize).min(self.log.len());
        self.log.drain(..drop);
        self.log_base += drop as u64;
        self.log_trim_at = (2 * self.log.len()).max(LOG_TRIM_MIN);
    }

    /// Inter-token latency summary of a finished request (`None` below two output tokens).
    /// Within a stretch of identical decode steps the gaps grow linearly; quantiles interpolate inside a stretch.
    /// Without `quantiles`, p50, p99 and max are `NaN` (not computed: only the mean, which needs no stretch).
    pub(crate) fn itl_summary(
        &self,
        idx: u32,
        scratch: &mut Vec<(f64, f64, u64)>,
        keys: &mut Vec<u64>,
        quantiles: bool,
    ) -> Option<crate::record::ItlSummary> {
        let r = &self.reqs[idx as usize];
        // Gaps are between frames: one per token, or under speculative decoding one per step that emitted.
        let frames = if self.spec.is_some() { r.frames } else { r.generated };
        if frames < 2 {
            return None;
        }
        let mean_ms = (r.finish_ms - r.first_token_ms) / f64::from(frames - 1);
        if !quantiles {
            // The mean needs no stretch; p50, p99 and max would read every one of the request's stretches.
            return Some(crate::record::ItlSummary {
                mean_ms,
                p50_ms: f64::NAN,
                p99_ms: f64::NAN,
                max_ms: f64::NAN,
            });
        }
        let last = (r.itl_from, r.itl_to);
        let span = |(from, to): (u64, u64)| {
            let lo = (from.max(self.log_base) - self.log_base) as usize;
            let hi = (to.max(self.log_base) - self.log_base) as usize;
            &self.log[lo.min(hi)..hi]
        };
        // The usual life (never preempted) is one slice of the log, read in place; otherwise gather the pieces.
        let stretches: &[LogEntry] = if r.itl_runs.is_empty() && r.itl_gaps.is_empty() {
            span(last)
        } else {
            scratch.clear();
            for &run in r.itl_runs.iter().chain(std::iter::once(&last)) {
                scratch.extend_from_slice(span(run));
            }
            scratch.extend(r.itl_gaps.iter().map(|&g| (g, g, 1)));
            scratch
        };
        // Every token after the first closed at least one gap (a preempted request's count can be higher), so the
        // count is never 0 here: the lean path above, which never counts, returns `Some` exactly when this does.
        debug_assert!(
            stretches.iter().map(|e| e.2).sum::<u64>() >= u64::from(frames - 1),
            "ITL gaps of request {idx}"
        );
        crate::metrics::itl_from_stretches(mean_ms, stretches, keys)
    }

    /// One engine iteration at `now_ms` (the engine never runs ahead of the caller's clock: a step starts at
    /// `max(now_ms, end of the previous step)`). `None` when there is nothing to do.
    pub fn step(&mut self, now_ms: f64) -> Option<Step> {
        self.materialize_all();
        if now_ms > self.now_ms {
            self.now_ms = now_ms;
        }
        let mut events = Vec::new();
        // Requests rejected at submission.
        let rejected: Vec<u32> = self.finished.drain(..).collect();
        for idx in rejected {
            let id = ReqId::new(idx, self.reqs[idx as usize].generation);
            events.push(StepEvent::Finished { id, generated: 0 });
            self.forget(idx);
        }
        let start = self.now_ms;
        let Some(adv) = self.advance(1, f64::INFINITY) else {
            return (!events.is_empty()).then_some(Step {
                start_ms: start,
                duration_ms: 0.0,
                batch: 0,
                prefill_tokens: 0,
                events,
            });
        };
        let prefill_tokens: u32 = self.sched.iter().filter(|s| s.prefill).map(|s| s.tokens).sum();
        for &q in &self.admitted {
            let r = &self.reqs[q as usize];
            if r.admit_ms == start && r.preemptions == 0 {
                events.push(StepEvent::Admitted {
                    id: ReqId::new(q, r.generation),
                    cached_tokens: r.cached_tokens,
                    queue_ms: r.admit_ms - r.arrival_ms,
                });
            }
        }
        for &q in &self.preempted {
            events.push(StepEvent::Preempted {
                id: ReqId::new(q, self.reqs[q as usize].generation),
            });
        }
        for s in &self.sched {
            let r = &self.reqs[s.idx as usize];
            if s.drafted > 0 {
                events.push(StepEvent::Speculated {
                    id: ReqId::new(s.idx, r.generation),
                    draft_tokens: s.drafted,
                    accepted_tokens: s.accepted,
                });
            }
            if r.last_emit > 0 {
                events.push(StepEvent::Tokens {
                    id: ReqId::new(s.idx, r.generation),
                    tokens: r.last_emit,
                });
            }
        }
        let finished: Vec<u32> = self.finished.drain(..).collect();
        for idx in finished {
            let r = &self.reqs[idx as usize];
            events.push(StepEvent::Finished {
                id: ReqId::new(idx, r.generation),
                generated: r.generated,
            });
            self.forget(idx);
        }
        Some(Step {
            start_ms: start,
            duration_ms: adv.end_ms - start,
            batch: self.sched.len() as u32,
            prefill_tokens,
            events,
        })
    }

    /// Jump an idle engine's clock forward.
    pub(crate) fn idle_until(&mut self, t_ms: f64) {
        if t_ms > self.now_ms {
            self.now_ms = t_ms;
        }
    }

    /// A lower bound of when a request queued now can next finish (infinite when none is): every step takes at
    /// least `step_fixed_ms`, starts at or after the clock, and gives a request at most one token (under
    /// speculative decoding `1 + draft_tokens`), so the request with the fewest tokens left needs that many steps
    /// (that many over `1 + draft_tokens`). A fleet steps each replica no further than the others'
    /// bounds (see `sim.rs`). O(eager running + waiting).
    pub(crate) fn earliest_finish_ms(&mut self) -> f64 {
        let left = |r: &Req| u64::from(r.output.saturating_sub(r.generated)).max(1);
        let mut k = u64::MAX;
        for &q in self.eager.iter().chain(self.waiting.iter()) {
            let r = &self.reqs[q as usize];
            // Under speculative decoding a decoder's path, served in full, finishes in the fewest steps its draws
            // allow (the same bound whether it is lazy or not).
            let steps = if self.spec.is_some() && r.state == State::Running && r.t >= r.p_eff && r.generated > 0 {
                self.spec_path_steps(q).max(1)
            } else {
                self.fewest_steps(left(r))
            };
            k = k.min(steps);
        }
        if self.lz.n > 0 {
            // A lazy decoder's finish is its path's (later if a step cannot serve it in full).
            k = k.min(self.lazy_next_finish().saturating_sub(self.lz.d).max(1));
        }
        if k == u64::MAX {
            f64::INFINITY
        } else {
            self.now_ms + k as f64 * self.min_step_ms()
        }
    }

    /// A lower bound of when a request of `output` tokens submitted now can finish, as [`Self::earliest_finish_ms`]
    /// bounds a waiting one: at least one step per token (under speculative decoding per `1 + draft_tokens`).
    pub(crate) fn earliest_finish_of_new(&self, output: u32) -> f64 {
        self.now_ms + self.fewest_steps(u64::from(output.max(1))) as f64 * self.min_step_ms()
    }

    /// The fewest steps that can emit `left` tokens to one request: one token a step, under speculative decoding up
    /// to `1 + draft_tokens`.
    fn fewest_steps(&self, left: u64) -> u64 {
        self.spec.as_ref().map_or(left, |s| left.div_ceil(u64::from(s.k) + 1))
    }

    /// A lower bound of any step's duration: `step_fixed_ms` (every other term adds), or with a roofline what a
    /// step reads at least (a hand-made profile may pair a roofline with another `step_fixed_ms`).
    fn min_step_ms(&self) -> f64 {
        self.p
            .roofline
            .as_ref()
            .map_or(self.p.step_fixed_ms, |r| r.min_step_ms())
    }

    /// [`Self::idle_until`] when nothing is running or waiting.
    pub(crate) fn idle_until_if_idle(&mut self, t_ms: f64) {
        if self.running.is_empty() && self.waiting.is_empty() {
            self.idle_until(t_ms);
        }
    }
}

/// Σ context, prefill tokens and decoders of a batch, summed as it is built.
#[derive(Debug, Clone, Copy, Default)]
struct BatchSums {
    ctx: u64,
    prefill_tokens: u32,
    decoders: u32,
}

/// The tokens a running request with context `t` wants in a step: the rest of its prefill (to `p_eff`), or one.
fn wanted(t: u32, p_eff: u32) -> u32 {
    if t < p_eff { p_eff - t } else { 1 }
}

/// Sorts request indices by admission (`seq`); one sort instance for both callers in a step.
fn in_admission_order(list: &mut [u32], reqs: &[Req]) {
    list.sort_unstable_by_key(|&q| reqs[q as usize].seq);
}

/// Remove from `list` the elements of `gone`, all of which appear in `list`, in the same relative order.
fn remove_ordered(list: &mut Vec<u32>, gone: &[u32]) {
    let mut g = 0;
    list.retain(|&q| {
        if g < gone.len() && gone[g] == q {
            g += 1;
            false
        } else {
            true
        }
    });
    debug_assert_eq!(g, gone.len(), "remove_ordered: not a subsequence");
}

/// Split a first admission's missed prompt tokens by cause. `reach` is the lineage's resident prefix at admission,
/// `r.reach_at_arrival` at submission, `ever` the blocks ever computed along it.
/// `a += b`, tier by tier.
fn add_tiers(a: &mut PerTier, b: &PerTier) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

fn classify(r: &Req, hit_blocks: u32, reach: u32, ever: u32, bs: u32) -> MissSplit {
    let p = u64::from(r.p_eff);
    let hit = u64::from(hit_blocks) * u64::from(bs);
    let max_hit_blocks = (r.p_eff - 1) / bs;
    let ever_c = ever.min(max_hit_blocks);
    let arrival_c = r.reach_at_arrival.min(ever_c);
    let reach_c = reach.min(ever_c);
    let mut m = MissSplit::default();
    if ever_c > hit_blocks {
        // Blocks computed once and lost: before the request arrived (idle) or while it queued.
        let idle_lost = ever_c.saturating_sub(arrival_c.max(hit_blocks));
        let queued_lost = arrival_c.saturating_sub(reach_c.max(hit_blocks));
        m.evicted_idle = u64::from(idle_lost) * u64::from(bs);
        m.evicted_queued = u64::from(queued_lost) * u64::from(bs);
    }
    // Tokens past everything ever computed (as full blocks, or the partial tail) are new content.
    let ever_tokens = u64::from(ever) * u64::from(bs);
    m.cold = p.saturating_sub(ever_tokens.max(hit));
    let missed = p - hit;
    m.other = missed.saturating_sub(m.cold + m.evicted_idle + m.evicted_queued);
    m
}

/// Log length below which [`Engine::trim_log`] does nothing.
const LOG_TRIM_MIN: usize = 4096;

/// Milliseconds that `k` steps of durations `a, a + b, a + 2b, …` take: one expression for the stretch's length,
/// the until-time check and [`steps_to_cover`], so that they agree to the bit.
#[inline]
fn stretch_ms(a: f64, b: f64, k: u64) -> f64 {
    let kf = k as f64;
    kf * a + b * kf * (kf - 1.0) / 2.0
}

/// Smallest k ≥ 1 such that k steps of durations `a, a + b, …` cover `span` milliseconds.
fn steps_to_cover(a: f64, b: f64, span: f64) -> u64 {
    if span <= a {
        return 1;
    }
    // The real root of the covering condition, truncated (not `ceil`, a library call on baseline x86-64): the
    // loops below step to the exact smallest k either way.
    let k = if b <= 0.0 {
        span / a
    } else {
        // k·a + b·k(k−1)/2 ≥ span  ⇔  (b/2)k² + (a − b/2)k − span ≥ 0
        let (qa, qb) = (b / 2.0, a - b / 2.0);
        (-qb + (qb * qb + 4.0 * qa * span).sqrt()) / (2.0 * qa)
    };
    let mut k = if k.is_finite() && k >= 1.0 {
        if k < 1e15 { k as u64 } else { 1_000_000_000_000_000 }
    } else {
        1
    };
    // Exact at the boundary (`covers` is monotone in k).
    let covers = |k: u64| stretch_ms(a, b, k) >= span;
    while k > 1 && covers(k - 1) {
        k -= 1;
    }
    while !covers(k) {
        k += 1;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile these tests start from (each says what it changes): blocks of 16, 10,000 of them, a step of
    /// 5 ms + 0.1 ms a sequence + 0.001 ms a context token, prefill at 20 tokens/ms after 1 ms, 2,048 tokens a step.
    fn test_profile() -> EngineProfile {
        EngineProfile {
            basis: "test".into(),
            ..EngineProfile::linear("p", 10_000, 8, 2048, [5.0, 0.1, 0.001, 20.0, 1.0])
        }
    }

    /// A xorshift64 generator for test inputs.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Removing an ordered subsequence equals filtering it out, for any subsequence (none, all, runs, ends).
    #[test]
    fn remove_ordered_equals_filter() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for n in 0..40u32 {
            for _ in 0..25 {
                let list: Vec<u32> = (0..n).map(|i| i * 3 + 1).collect();
                let keep_every = 1 + next() % 4;
                let gone: Vec<u32> = list
                    .iter()
                    .copied()
                    .filter(|_| next().is_multiple_of(keep_every))
                    .collect();
                let want: Vec<u32> = list.iter().copied().filter(|q| !gone.contains(q)).collect();
                let mut got = list.clone();
                remove_ordered(&mut got, &gone);
                assert_eq!(got, want, "list {list:?} gone {gone:?}");
            }
        }
    }

    /// A decode stretch's blocks taken in runs (see [`Engine::alloc_step_by_step`]) leave the KV cache and every
    /// tier exactly as taking them one step at a time does: every chain's range, stamp and place in each tier's
    /// list, compared after every advance, for tiers that trim at every step, TTLs shorter than a stretch, tiers
    /// written always, two and three deep, large ones that keep what they restore; conversations go on after their
    /// replies (forked chains, recycled ones).
    #[test]
    fn tier_runs_leave_the_tiers_as_steps_do() {
        use crate::engine::profile::{KvTier, TierEvict, TierWrite};
        // A tier of `blocks` blocks restored at `rate` tokens/ms, written on eviction; `timed` adds a TTL of `s`.
        let lru = |name: &str, blocks: u64, rate: f64| KvTier::on_evict(name, blocks * 16, rate);
        let timed = |name: &str, blocks: u64, rate: f64, s: f64| KvTier {
            evict: TierEvict::Ttl { ttl_s: s },
            ..lru(name, blocks, rate)
        };
        let shapes: Vec<Vec<KvTier>> = vec![
            vec![timed("host", 40, 50.0, 0.3)],
            vec![timed("host", 4000, 50.0, 5.0)],
            vec![timed("host", 4000, 50.0, 0.02)],
            vec![timed("host", 60, 50.0, 0.7), lru("disk", 300, 25.0)],
            vec![lru("host", 1500, 50.0), timed("disk", 2000, 25.0, 1.0)],
            vec![timed("host", 1200, 50.0, 2.0), lru("disk", 1000, 25.0)],
            vec![lru("host", 30, 50.0), timed("disk", 2000, 25.0, 1.5)],
            vec![
                timed("host", 50, 50.0, 0.4),
                timed("disk", 120, 25.0, 0.9),
                lru("remote", 400, 5.0),
            ],
            vec![
                KvTier {
                    write: TierWrite::Always,
                    ..timed("host", 200, 50.0, 0.5)
                },
                timed("disk", 500, 25.0, 2.0),
            ],
        ];
        crate::engine::kv::PARTLY_HELD.with(|c| c.set([0; 2]));
        for (shape, tiers) in shapes.into_iter().enumerate() {
            for seed in 1..3u64 {
                let profile = EngineProfile {
                    num_kv_blocks: 700,
                    max_num_seqs: 8,
                    kv_tiers: tiers.clone(),
                    ..test_profile()
                };
                let mut engs = [Engine::new(profile.clone()), Engine::new(profile)];
                let mut rng = xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                // Conversations: (chain, tokens so far, next arrival), 12 of them, staggered.
                let mut convs: Vec<(u32, u32, f64)> = (0..12)
                    .map(|i| {
                        let c = engs[0].new_chain(NONE, 0);
                        assert_eq!(c, engs[1].new_chain(NONE, 0));
                        (c, 600 + (rng() % 1200) as u32, f64::from(i) * 150.0)
                    })
                    .collect();
                let mut tags: Vec<usize> = Vec::new();
                let mut until = 0.0;
                let mut advances = 0;
                for _ in 0..4000 {
                    let now = engs[0].now_ms().max(until);
                    for (i, conv) in convs.iter_mut().enumerate() {
                        if conv.2 <= now {
                            let out = 50 + (rng() % 450) as u32;
                            for e in &mut engs {
                                e.submit_chain(conv.2, conv.0, conv.1, out, tags.len() as u64, false);
                            }
                            tags.push(i);
                            conv.1 += out;
                            conv.2 = f64::INFINITY;
                        }
                    }
                    let next = convs.iter().map(|c| c.2).fold(f64::INFINITY, f64::min);
                    let mut advs = [None, None];
                    for (k, e) in engs.iter_mut().enumerate() {
                        TIER_STEPS_ONE_BY_ONE.with(|c| c.set(k == 1));
                        advs[k] = e.advance(u64::MAX, next);
                    }
                    TIER_STEPS_ONE_BY_ONE.with(|c| c.set(false));
                    assert_eq!(advs[0], advs[1], "shape {shape} seed {seed}");
                    assert_eq!(
                        format!("{:?}", engs[0].kv),
                        format!("{:?}", engs[1].kv),
                        "shape {shape} seed {seed}"
                    );
                    let Some(adv) = advs[0] else {
                        if next.is_infinite() {
                            break;
                        }
                        until = next;
                        continue;
                    };
                    advances += 1;
                    until = adv.end_ms;
                    let fin: Vec<u32> = engs[0].finished.clone();
                    assert_eq!(fin, engs[1].finished);
                    for q in fin {
                        let conv = &mut convs[tags[engs[0].reqs[q as usize].tag as usize]];
                        // The next turn: the reply and a tool result, after a think time.
                        let tokens = u64::from(conv.1);
                        let mut fork = NONE;
                        for e in &mut engs {
                            e.forget(q);
                            let f = e.fork_conversation(conv.0, tokens);
                            assert!(fork == NONE || fork == f);
                            fork = f;
                        }
                        conv.0 = fork;
                        conv.1 += 100 + (rng() % 300) as u32;
                        conv.2 = adv.end_ms + (rng() % 3000) as f64;
                        if conv.1 > 6000 {
                            conv.2 = f64::INFINITY;
                        }
                    }
                    for e in &mut engs {
                        e.finished.clear();
                    }
                }
                assert!(advances > 100, "shape {shape} seed {seed}: {advances} advances");
                assert!(
                    engs[0].kv.evicted_blocks > 1000,
                    "shape {shape}: {} evicted",
                    engs[0].kv.evicted_blocks
                );
            }
        }
        // Chains whose blocks tier 0 held in part (restored ones) were taken in runs too.
        assert!(crate::engine::kv::PARTLY_HELD.with(|c| c.get())[0] > 0);
    }

    /// A request that arrives on the chain of a running lazy request (here: a fork of its conversation that
    /// includes part of the reply being generated) must see that reply's blocks as cached, exactly as with
    /// step-by-step accounting, and that request must not become lazy again while the fork waits.
    #[test]
    fn a_fork_of_a_lazy_request_sees_its_blocks() {
        fn drive(lazy: bool) -> Vec<(u32, f64, f64, u32)> {
            let mut e = Engine::new(EngineProfile {
                // Two slots: the fork waits until `other` finishes, while `a` decodes on.
                max_num_seqs: 2,
                ..test_profile()
            });
            e.lazy_ok = lazy;
            let a = e.new_chain(NONE, 0);
            let other = e.new_chain(NONE, 0);
            e.submit_chain(0.0, a, 160, 400, 0, false);
            e.submit_chain(0.0, other, 64, 300, 1, false);
            let mut done = Vec::new();
            let mut until = 50.0;
            let mut forked = false;
            while let Some(adv) = e.advance(u64::MAX, until) {
                if !forked && e.now_ms() >= 600.0 {
                    // `a` holds 160 prompt tokens and ≥ 100 of its 400 reply tokens. The fork resends 30 blocks of
                    // it (the sim-server's clients may know a reply's content ahead, as its block hashes): by the
                    // time `other` finishes and the fork is admitted, `a` has computed them.
                    let fork = e.new_chain(a, 30);
                    e.submit_chain(e.now_ms(), fork, 30 * 16 + 40, 50, 2, false);
                    forked = true;
                }
                for &q in &e.finished {
                    let r = &e.reqs[q as usize];
                    done.push((r.cached_tokens, r.first_token_ms, r.finish_ms, r.generated));
                }
                let fin: Vec<u32> = e.finished.drain(..).collect();
                for q in fin {
                    e.forget(q);
                }
                until = adv.end_ms + 37.0;
            }
            done
        }
        let lazy = drive(true);
        assert_eq!(lazy.len(), 3);
        // The fork hit the prompt's 10 blocks and the reply's blocks computed by its admission.
        let fork = lazy.iter().find(|d| d.3 == 50).expect("the fork finished");
        assert!(fork.0 > 10 * 16, "{lazy:?}");
        assert_eq!(lazy, drive(false));
    }

    /// llama-server's slot choice: a fresh server fills its slots from the highest id (least recently used, ties
    /// to the last); a prompt that continues a slot's last content goes back to that slot (prompt similarity above
    /// 10 %); an unrelated one takes the least recently used free slot.
    #[test]
    fn llama_cpp_slots_follow_similarity_then_lru() {
        let mut e = Engine::new(EngineProfile {
            max_num_seqs: 4,
            scheduler: Scheduler::LlamaCpp,
            ..test_profile()
        });
        let tokens = |lo: u32, n: u32| -> Vec<u32> { (lo..lo + n).collect() };
        let blocks = |t: &[u32]| super::super::types::PromptBlocks::from_tokens(t, 16);
        // Runs one request to its end; returns the slot it was given.
        let run = |e: &mut Engine, prompt: Vec<u32>| -> u32 {
            let t0 = e.now_ms();
            let id = e.submit(t0, blocks(&prompt), 2);
            let first = e.step(t0).expect("admitted");
            let slot = e.reqs[id.idx() as usize].slot;
            let mut t = first.start_ms + first.duration_ms;
            while let Some(s) = e.step(t) {
                t = s.start_ms + s.duration_ms;
            }
            slot
        };
        let p1 = tokens(0, 1600);
        assert_eq!(run(&mut e, p1.clone()), 3, "a fresh server starts at the highest slot");
        assert_eq!(
            run(&mut e, tokens(50_000, 1600)),
            2,
            "unrelated: least recently used (never used, last)"
        );
        let mut p1_more = p1;
        p1_more.extend(tokens(90_000, 200));
        assert_eq!(run(&mut e, p1_more), 3, "a continuation goes back to its slot");
        assert_eq!(run(&mut e, tokens(70_000, 1600)), 1);
        assert_eq!(run(&mut e, tokens(80_000, 1600)), 0);
        // Every slot used once: the least recently released (slot 2, released before 3's second use, 1 and 0).
        assert_eq!(run(&mut e, tokens(60_000, 1600)), 2);
    }

    /// `prefill_tile_rows`, by hand: two conversations of 1,600 tokens come back at once with 300 new tokens each.
    /// llama.cpp cuts the two prompts into a ubatch of 256 + 256 and one of 44 + 44; those 44 rows of each attend
    /// row by row, at `per_ctx_token_ms` per token attended: 2 · (44 · (1,600 + 256) + 44 · 43 / 2) · 0.001 ms
    /// more than without the tile. One coming back alone with 20 new tokens: 20 · 1,600 + 20 · 19 / 2 tokens
    /// attended, 32.19 ms more; one with 64 (a whole tile), nothing more.
    #[test]
    fn prompt_rows_under_the_tile_attend_row_by_row() {
        let tokens = |lo: u32, n: u32| -> Vec<u32> { (lo..lo + n).collect() };
        let blocks = |t: &[u32]| super::super::types::PromptBlocks::from_tokens(t, 16);
        // `conversations` run alone first (slots 3, 2, 1, … in turn), then `back` (conversation, new tokens) come
        // back at once: the duration of their first step and the tokens each found cached.
        let first_step_of = |tile: u32, conversations: u32, back: &[(u32, u32)]| -> (f64, Vec<u32>) {
            let mut e = Engine::new(EngineProfile {
                max_num_seqs: 4,
                scheduler: Scheduler::LlamaCpp,
                prefill_tile_rows: tile,
                ubatch_tokens: 512,
                ..test_profile()
            });
            let mut t = 0.0;
            for c in 0..conversations {
                e.submit(t, blocks(&tokens(c * 100_000, 1600)), 2);
                while let Some(s) = e.step(t) {
                    t = s.start_ms + s.duration_ms;
                }
            }
            let ids: Vec<_> = back
                .iter()
                .map(|&(c, n)| {
                    let mut p = tokens(c * 100_000, 1600);
                    p.extend(tokens(c * 100_000 + 50_000, n));
                    e.submit(t, blocks(&p), 2)
                })
                .collect();
            let s = e.step(t).expect("both admitted");
            (
                s.duration_ms,
                ids.iter().map(|id| e.reqs[id.idx() as usize].cached_tokens).collect(),
            )
        };
        let first_step = |tile: u32, new: &[u32]| {
            first_step_of(
                tile,
                new.len() as u32,
                &new.iter()
                    .copied()
                    .enumerate()
                    .map(|(c, n)| (c as u32, n))
                    .collect::<Vec<_>>(),
            )
        };
        let (plain, hit) = first_step(0, &[300, 300]);
        assert_eq!(hit, [1600, 1600]);
        let (tiled, _) = first_step(64, &[300, 300]);
        let rows = 2.0 * (44.0 * (1600.0 + 256.0) + 44.0 * 43.0 / 2.0);
        assert!((tiled - plain - rows * 0.001).abs() < 1e-9, "{tiled} - {plain}");
        let (plain, _) = first_step(0, &[20]);
        let (tiled, _) = first_step(64, &[20]);
        assert!((tiled - plain - 32.19).abs() < 1e-9, "{tiled} - {plain}");
        assert_eq!(first_step(64, &[64]).0, first_step(0, &[64]).0);
        // Slots 3 and 1 are not adjacent: each prompt is a ubatch of its own, 300 rows, none row by row.
        let apart = [(0, 300), (2, 300)];
        assert_eq!(first_step_of(64, 3, &apart).0, first_step_of(0, 3, &apart).0);
        assert_eq!(first_step_of(64, 3, &apart).1, [1600, 1600]);
    }

    /// llama-server's host prompt cache ([`PromptCache`]), by hand: two slots, conversations A, B, C, D. A's first
    /// state is saved while its slot is idle (`--cache-idle-slots`), A comes back to its slot and writes a long
    /// reply, that state is saved too, and D takes A's slot. When A returns to a slot that is not its own, the
    /// cache holds both of A's states, oldest first: the first keeps 1,600 of its 1,664 tokens for A's prompt
    /// (`f_keep` 0.96), the newer 1,864 of 2,264 (0.82), so the older one is loaded and A recomputes what the newer
    /// held, as llama-server does. The pool still holds those blocks: without the rule the request would find 1,856
    /// tokens cached. With no tier below the slots (no prompt cache, `--cache-ram 0`) it finds what the slot holds.
    #[test]
    fn llama_cpp_prompt_cache_loads_the_first_entry_that_keeps_more_of_both() {
        let engine = |tier: bool| {
            Engine::new(EngineProfile {
                max_num_seqs: 2,
                max_num_batched_tokens: 4096,
                per_ctx_token_ms: 0.0,
                kv_tiers: if tier {
                    vec![super::super::profile::KvTier::on_evict("host", 1_000_000, 1000.0)]
                } else {
                    Vec::new()
                },
                reply_cached_share: 0.0,
                scheduler: Scheduler::LlamaCpp,
                ..test_profile()
            })
        };
        // Runs requests to idle; returns the cached tokens of each.
        fn run(e: &mut Engine, reqs: &[(u32, u32, u32)]) -> Vec<u32> {
            let t0 = e.now_ms() + 1.0;
            let ids: Vec<ReqId> = reqs
                .iter()
                .map(|&(chain, prompt, output)| e.submit_chain(t0, chain, prompt, output, 0, false))
                .collect();
            let mut t = t0;
            let mut cached = vec![0; ids.len()];
            while let Some(s) = e.step(t) {
                t = s.start_ms + s.duration_ms;
                for (i, id) in ids.iter().enumerate() {
                    if let Some(r) = e.lookup(*id) {
                        cached[i] = e.reqs[r as usize].cached_tokens;
                    }
                }
            }
            cached
        }
        let a_returns = |tier: bool| {
            let mut e = engine(tier);
            let chains: Vec<u32> = (0..4).map(|_| e.new_chain(NONE, 0)).collect();
            let (a, b, c, d) = (chains[0], chains[1], chains[2], chains[3]);
            assert_eq!(run(&mut e, &[(a, 1600, 64)]), [0], "A's first prompt, cold, on slot 1");
            run(&mut e, &[(b, 1600, 64)]); // slot 0; A's idle slot is saved as B starts
            let a1 = e.fork_conversation(a, 1600);
            let got = run(&mut e, &[(a1, 1864, 400)]);
            assert_eq!(got, [1600], "A continues in its own slot: nothing loaded");
            // C takes slot 0 (A's idle slot is saved again, its second state); D, arriving with C still running,
            // takes A's slot.
            let t = e.now_ms() + 1.0;
            e.submit_chain(t, c, 1600, 64, 0, false);
            e.submit_chain(t, d, 1600, 64, 0, false);
            run(&mut e, &[]);
            let a2 = e.fork_conversation(a1, 1864);
            run(&mut e, &[(a2, 2100, 16)])[0]
        };
        assert_eq!(
            a_returns(true),
            1600,
            "the older state of A, not the newer 1,856 tokens"
        );
        assert_eq!(
            a_returns(false),
            0,
            "no prompt cache: the slot holds another conversation"
        );
    }

    #[test]
    fn steps_to_cover_is_exact() {
        assert_eq!(steps_to_cover(10.0, 0.0, 5.0), 1);
        assert_eq!(steps_to_cover(10.0, 0.0, 10.0), 1);
        assert_eq!(steps_to_cover(10.0, 0.0, 10.5), 2);
        assert_eq!(steps_to_cover(10.0, 1.0, 21.0), 2);
        assert_eq!(steps_to_cover(10.0, 1.0, 21.5), 3);
        // Against the definition, by scanning k, over step times like the engine's (ms) and spans up to ~2,000
        // steps, including spans that land exactly on a covering sum.
        let mut bits = xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = || (bits() >> 11) as f64 / (1u64 << 53) as f64;
        for case in 0..3000 {
            let a = 1.0 + 200.0 * next();
            let b = if case % 3 == 0 { 0.0 } else { 0.05 * next() };
            let covered = |k: u64| {
                let kf = k as f64;
                kf * a + b * kf * (kf - 1.0) / 2.0
            };
            let span = if case % 5 == 0 {
                covered(1 + (next() * 2000.0) as u64)
            } else {
                a * 2000.0 * next()
            };
            let want = (1u64..).find(|&k| covered(k) >= span).expect("some k covers");
            assert_eq!(steps_to_cover(a, b, span), want, "a {a} b {b} span {span}");
        }
    }
}
