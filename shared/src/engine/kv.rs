//! The KV cache and its prefix cache, counted in blocks.
//!
//! Prompt content is a tree of **chains**. A chain is a run of blocks whose identity is fixed (block `i` of chain
//! `c` always holds the same tokens, like a chained block hash in vLLM); a chain may hang off a prefix of a parent
//! chain (a shared system prompt, or a conversation that forked). Because eviction in vLLM's automatic prefix
//! caching frees a request's blocks tail first (the free queue receives them in reverse order) and a block can only
//! be hit if every block before it is hit, the resident blocks of a chain are always a PREFIX: one counter `r` per
//! chain says everything. This keeps every operation O(1) per chain instead of O(blocks):
//!
//! - lookup: [`Kv::reach`], the number of leading blocks of a lineage that are resident;
//! - pin / unpin: the blocks a running request uses are pinned (not evictable): all of its own chain, and the prefix
//!   of each ancestor up to where the lineage forks. A chain's unpinned tail blocks are evictable; a chain enters
//!   the tail of the LRU list when blocks of it become evictable (child before parent, as vLLM frees blocks in
//!   reverse) and keeps its place while only its head is in use;
//! - eviction: [`Kv::evict`] takes blocks from the tail end of the least recently used chain;
//! - fill: a request that computes the block right after a chain's resident prefix extends it ([`Kv::fill`]);
//!   any other computed block (a duplicate of content another request is writing, or content without identity)
//!   stays private to its request and is freed when the request ends.
//!
//! Blocks in use = Σ chain `r` (cached, pinned or not) + Σ private blocks of running requests ≤ capacity.
//!
//! Optional tiers below the GPU ([`super::profile::KvTier`], faster first; `host_cache` is one such tier) keep
//! blocks too: each chain holds one range `[lo, hi)` of its local blocks in each tier (evicted blocks are its
//! tail, so successive evictions of a chain extend the range downward), chains in an LRU list per tier ordered by
//! the time they were last written or hit (the engine's simulated `now_ms`), trimmed from the least recently used
//! chain's deepest block, and with a TTL also dropped whole once `ttl` has passed since. A tier written
//! `on_evict` takes what the level above drops (the GPU for tier 0); one written `always` takes a request's
//! lineage when the request releases it. Tiers are inclusive: a restore copies blocks back and the tier keeps
//! them, so a tier's state changes only at eviction, trimming, expiry and release, never when a request computes
//! (which `core::Lazy` defers).

pub(crate) const NONE: u32 = u32::MAX;

#[cfg(test)]
thread_local! {
    /// Tests read it: chains tier 0 holds in part that [`Kv::evict_timed`] took in a run, and those it stopped at.
    pub(crate) static PARTLY_HELD: std::cell::Cell<[usize; 2]> = const { std::cell::Cell::new([0; 2]) };
}

/// In [`Kv::tier_runs`]: blocks the GPU holds.
pub(crate) const NO_TIER: usize = usize::MAX;

/// [`Kv::walk_clear`]'s place along the eviction order: the next chain and the evictable blocks before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LruWalk {
    next: u32,
    /// Evictable blocks, from the least recently used on, that no waiting request reads.
    pub clear: u64,
}

/// One chain of content blocks.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    /// Parent chain, or [`NONE`].
    pub parent: u32,
    /// Global block index of this chain's block 0 (the parent blocks that precede it).
    pub offset: u32,
    /// Resident blocks (a prefix of the chain).
    pub r: u32,
    /// Blocks with a known identity; computed blocks at or past it stay private. `u32::MAX` for synthetic content.
    pub limit: u32,
    /// High-water mark of blocks ever computed, local.
    pub ever: u32,
    /// Running requests that use this chain (directly or as an ancestor).
    pub pins: u32,
    /// Running requests whose own chain this is (they use, and grow, all of it).
    pub pin_full: u32,
    /// Requests that use only a prefix of this chain (through a child): (local blocks, count).
    pub partial: Vec<(u32, u32)>,
    /// Blocks of this chain currently counted as evictable.
    pub ev: u32,
    pub lru_prev: u32,
    pub lru_next: u32,
    pub in_lru: bool,
    /// Still referenced by the caller (a released chain is recycled once empty and unpinned).
    pub alive: bool,
    /// Child chains hanging off this one (a chain with children is never recycled).
    pub children: u32,
    /// Back on the free list.
    pub freed: bool,
    /// Kept by the engine: its own running request is lazy (see `core::Lazy`), so its blocks are not filled yet.
    pub lazy: bool,
    /// Kept by the engine: waiting requests whose lineage holds this chain.
    pub waiting: u32,
    /// Tokens of the parent's block at `offset` that this chain's content shares too (a conversation forked
    /// mid-block: 0 to block size − 1). Only a llama.cpp slot's token-level prefix reads it.
    pub extra: u32,
    /// How many chains this index has held before (it grows when a recycled index is reused): a reference
    /// kept across steps (a llama.cpp prompt-cache entry) is valid while it matches.
    pub life: u32,
}

/// A chain's blocks in one tier: local blocks `[lo, hi)` (empty when equal) and its place in the tier's list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub lo: u32,
    pub hi: u32,
    prev: u32,
    next: u32,
    listed: bool,
    /// When last written or hit, milliseconds of simulated time.
    pub stamp: f64,
    /// The hull of every range it has held (`ever_lo > ever_hi`: none), for the misses it caused.
    pub ever_lo: u32,
    pub ever_hi: u32,
}

const EMPTY_SLOT: Slot = Slot {
    lo: 0,
    hi: 0,
    prev: NONE,
    next: NONE,
    listed: false,
    stamp: 0.0,
    ever_lo: u32::MAX,
    ever_hi: 0,
};

/// One tier below the GPU.
#[derive(Debug, Clone)]
pub(crate) struct Tier {
    /// Capacity, blocks (> 0).
    pub capacity: u64,
    /// Σ blocks held over all chains.
    pub used: u64,
    /// Written when a request releases its lineage (`always`), not when the level above evicts (`on_evict`).
    pub always: bool,
    /// Time to live after the last write or hit, milliseconds (infinite: LRU only).
    pub ttl_ms: f64,
    /// Restore speed, tokens per millisecond.
    pub rate: f64,
    head: u32,
    tail: u32,
    /// By chain id (grown on demand).
    slots: Vec<Slot>,
    /// Blocks dropped so far (trimmed or expired).
    pub dropped_blocks: u64,
}

impl Tier {
    #[inline]
    pub fn slot(&self, c: u32) -> Slot {
        self.slots.get(c as usize).copied().unwrap_or(EMPTY_SLOT)
    }

    fn slot_mut(&mut self, c: u32) -> &mut Slot {
        let i = c as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, EMPTY_SLOT);
        }
        &mut self.slots[i]
    }

    fn unlink(&mut self, c: u32) {
        let Slot { prev, next, .. } = self.slot(c);
        if prev == NONE {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        let s = &mut self.slots[c as usize];
        s.listed = false;
        s.prev = NONE;
        s.next = NONE;
    }

    /// Chain `c` was written or hit at `stamp`: it moves to the most recently used end (a TTL tier keeps its list
    /// in stamp order, so a write stamped earlier than the tail, a cascade from an expiry, goes before it).
    fn touch(&mut self, c: u32, stamp: f64) {
        // Already the most recent (a chain written again, as an evicting stretch does piece by piece), and not
        // stamped before the chain ahead of it: where the moves below would put it back, only restamped (3.3 % of
        // the two-tier 1M example's instructions).
        if c == self.tail && c != NONE {
            let prev = self.slots[c as usize].prev;
            if !self.ttl_ms.is_finite() || prev == NONE || self.slots[prev as usize].stamp <= stamp {
                self.slots[c as usize].stamp = stamp;
                return;
            }
        }
        if self.slot(c).listed {
            self.unlink(c);
        }
        let mut after = self.tail;
        if self.ttl_ms.is_finite() {
            while after != NONE && self.slots[after as usize].stamp > stamp {
                after = self.slots[after as usize].prev;
            }
        }
        let next = if after == NONE {
            self.head
        } else {
            self.slots[after as usize].next
        };
        {
            let s = self.slot_mut(c);
            s.listed = true;
            s.prev = after;
            s.next = next;
            s.stamp = stamp;
        }
        if after == NONE {
            self.head = c;
        } else {
            self.slots[after as usize].next = c;
        }
        if next == NONE {
            self.tail = c;
        } else {
            self.slots[next as usize].prev = c;
        }
    }
}

fn max_partial(partial: &[(u32, u32)]) -> u32 {
    partial.iter().map(|e| e.0).max().unwrap_or(0)
}

/// Blocks and chains.
#[derive(Debug, Clone)]
pub(crate) struct Kv {
    pub capacity: u64,
    pub caching: bool,
    pub chains: Vec<Chain>,
    free_chains: Vec<u32>,
    lru_head: u32,
    lru_tail: u32,
    /// Σ r over all chains.
    pub resident: u64,
    /// Σ r over unpinned chains (those in the LRU list).
    pub evictable: u64,
    /// Σ private blocks of running requests.
    pub private: u64,
    /// Blocks evicted so far.
    pub evicted_blocks: u64,
    /// Tiers below the GPU, faster first (empty: none).
    pub tiers: Vec<Tier>,
    /// Some tier is written `always` / has a TTL.
    pub write_through: bool,
    pub any_ttl: bool,
    /// Simulated time of tier writes, hits and expiry (set by the engine).
    pub now_ms: f64,
    /// While set, writes do not trim or expire the tiers (an admission restoring tier blocks holds them until they
    /// are back in the GPU, so that evictions it causes cannot drop them first).
    pub hold_tier_trim: bool,
}

impl Kv {
    pub fn new(capacity: u64, caching: bool) -> Self {
        Kv {
            capacity,
            caching,
            chains: Vec::new(),
            free_chains: Vec::new(),
            lru_head: NONE,
            lru_tail: NONE,
            resident: 0,
            evictable: 0,
            private: 0,
            evicted_blocks: 0,
            tiers: Vec::new(),
            write_through: false,
            any_ttl: false,
            now_ms: 0.0,
            hold_tier_trim: false,
        }
    }

    /// Add a tier below the last one: `capacity` blocks (> 0), written `always` or on eviction, `ttl_ms` (infinite:
    /// none), restored at `rate` tokens per millisecond.
    pub fn add_tier(&mut self, capacity: u64, always: bool, ttl_ms: f64, rate: f64) {
        self.write_through |= always;
        self.any_ttl |= ttl_ms.is_finite();
        self.tiers.push(Tier {
            capacity,
            used: 0,
            always,
            ttl_ms,
            rate,
            head: NONE,
            tail: NONE,
            slots: Vec::new(),
            dropped_blocks: 0,
        });
    }

    /// Blocks neither resident nor private.
    #[inline]
    pub fn free(&self) -> u64 {
        self.capacity - self.resident - self.private
    }

    /// Blocks an allocation could get (free + evictable).
    #[inline]
    pub fn available(&self) -> u64 {
        self.free() + self.evictable
    }

    /// Blocks referenced by running requests (pinned chain blocks + private): vLLM's KV cache usage.
    #[inline]
    pub fn used_by_running(&self) -> u64 {
        self.resident - self.evictable + self.private
    }

    /// A new chain hanging off the first `parent_blocks` blocks of `parent` (or a root chain for [`NONE`]).
    pub fn new_chain(&mut self, parent: u32, parent_blocks: u32, limit: u32) -> u32 {
        let offset = if parent == NONE {
            0
        } else {
            self.chains[parent as usize].children += 1;
            self.chains[parent as usize].offset.saturating_add(parent_blocks)
        };
        let c = Chain {
            parent,
            offset,
            r: 0,
            limit,
            ever: 0,
            pins: 0,
            pin_full: 0,
            partial: Vec::new(),
            ev: 0,
            lru_prev: NONE,
            lru_next: NONE,
            in_lru: false,
            alive: true,
            children: 0,
            freed: false,
            lazy: false,
            waiting: 0,
            extra: 0,
            life: 0,
        };
        if let Some(id) = self.free_chains.pop() {
            let life = self.chains[id as usize].life.wrapping_add(1);
            self.chains[id as usize] = Chain { life, ..c };
            for t in &mut self.tiers {
                if let Some(s) = t.slots.get_mut(id as usize) {
                    *s = EMPTY_SLOT;
                }
            }
            id
        } else {
            self.chains.push(c);
            (self.chains.len() - 1) as u32
        }
    }

    /// The caller will not reference `c` again (it may still be hit through nothing: its blocks linger in the LRU
    /// list like any freed blocks until evicted).
    pub fn release(&mut self, c: u32) {
        self.chains[c as usize].alive = false;
        self.maybe_recycle(c);
    }

    fn maybe_recycle(&mut self, c: u32) {
        if self.chains[c as usize].alive {
            return;
        }
        let ch = &self.chains[c as usize];
        if !ch.freed
            && ch.r == 0
            && ch.pins == 0
            && ch.children == 0
            && !ch.in_lru
            && !self.tiers.iter().any(|t| t.slot(c).listed)
        {
            let parent = ch.parent;
            self.chains[c as usize].freed = true;
            self.free_chains.push(c);
            if parent != NONE {
                self.chains[parent as usize].children -= 1;
                self.maybe_recycle(parent);
            }
        }
    }

    /// Leading global blocks of `c`'s lineage that are resident.
    pub fn reach(&self, c: u32) -> u32 {
        self.lineage_max(c, |_, ch| ch.r)
    }

    /// Walk the lineage from the root: the furthest global block reached by `f(chain)` local blocks per chain,
    /// stopping where a chain does not cover the offset of the next.
    #[inline]
    fn lineage_max(&self, c: u32, f: impl Fn(u32, &Chain) -> u32) -> u32 {
        // Fast paths: a root chain (a session) or a child of a root (a request after a shared prefix).
        let ch = &self.chains[c as usize];
        if ch.parent == NONE {
            return if ch.offset > 0 { 0 } else { f(c, ch) };
        }
        let parent = &self.chains[ch.parent as usize];
        if parent.parent == NONE {
            let reach = if parent.offset > 0 { 0 } else { f(ch.parent, parent) };
            return if reach < ch.offset {
                reach
            } else {
                ch.offset.saturating_add(f(c, ch))
            };
        }
        self.lineage_max_deep(c, f)
    }

    fn lineage_max_deep(&self, c: u32, f: impl Fn(u32, &Chain) -> u32) -> u32 {
        // Find the deepest ancestor whose coverage reaches the offset of its child, walking up iteratively:
        // the answer for c is offset(c) + f(c) if every ancestor covers its child's offset, else the first gap.
        let mut stack: [u32; 64] = [NONE; 64];
        let mut depth = 0usize;
        let mut x = c;
        let mut truncated = false;
        while x != NONE {
            if depth == stack.len() {
                truncated = true;
                break;
            }
            stack[depth] = x;
            depth += 1;
            x = self.chains[x as usize].parent;
        }
        if truncated {
            // Very deep lineages (more than 64 forks) fall back to recursion-free slow walk.
            return self.lineage_max_slow(c, &f);
        }
        let mut reach = 0u32;
        for i in (0..depth).rev() {
            let ch = &self.chains[stack[i] as usize];
            if reach < ch.offset {
                return reach;
            }
            reach = ch.offset.saturating_add(f(stack[i], ch));
        }
        reach
    }

    fn lineage_max_slow(&self, c: u32, f: &impl Fn(u32, &Chain) -> u32) -> u32 {
        let mut lineage = Vec::new();
        let mut x = c;
        while x != NONE {
            lineage.push(x);
            x = self.chains[x as usize].parent;
        }
        let mut reach = 0u32;
        for &y in lineage.iter().rev() {
            let ch = &self.chains[y as usize];
            if reach < ch.offset {
                return reach;
            }
            reach = ch.offset.saturating_add(f(y, ch));
        }
        reach
    }

    /// Leading local blocks of chain `id` held in the GPU (its `r`) or, right after them, in any tier.
    #[inline]
    fn reach_tiers_local(&self, id: u32, r: u32) -> u32 {
        let mut x = r;
        loop {
            let mut moved = false;
            for t in &self.tiers {
                let s = t.slot(id);
                if s.lo <= x && x < s.hi {
                    x = s.hi;
                    moved = true;
                }
            }
            if !moved {
                return x;
            }
        }
    }

    /// Leading global blocks of `c`'s lineage held in the GPU or, right after them, in the tiers.
    pub fn reach_tiers(&self, c: u32) -> u32 {
        self.lineage_max(c, |id, ch| self.reach_tiers_local(id, ch.r))
    }

    /// The global blocks `[from, to)` of `c`'s lineage (all held in the GPU or the tiers, `to` ≤
    /// [`Self::reach_tiers`]) as runs `(tier, blocks)` in order, each block in the fastest tier holding it, or
    /// tier [`NO_TIER`] for blocks the GPU holds. Stops early at a block nothing holds.
    pub fn tier_runs(&self, c: u32, from: u32, to: u32, out: &mut Vec<(usize, u32)>) {
        out.clear();
        let mut lineage = Vec::new();
        let mut x = c;
        while x != NONE {
            lineage.push(x);
            x = self.chains[x as usize].parent;
        }
        let mut end = u32::MAX;
        let mut spans = Vec::with_capacity(lineage.len());
        for &y in &lineage {
            let off = self.chains[y as usize].offset;
            spans.push((y, off, end));
            end = off;
        }
        for &(y, off, end) in spans.iter().rev() {
            let (g0, g1) = (from.max(off), to.min(end));
            if g0 >= g1 {
                continue;
            }
            let r = self.chains[y as usize].r;
            let (mut p, b) = (g0 - off, g1 - off);
            while p < b {
                let (tier, upto) = if p < r {
                    (NO_TIER, r.min(b))
                } else {
                    let mut best: Option<(usize, u32)> = None;
                    for (i, t) in self.tiers.iter().enumerate() {
                        let s = t.slot(y);
                        if s.lo <= p && p < s.hi {
                            best = Some((i, s.hi.min(b)));
                            break;
                        }
                    }
                    let Some((i, mut upto)) = best else { return };
                    // A faster tier starting inside the run takes over there.
                    for t in &self.tiers[..i] {
                        let s = t.slot(y);
                        if s.lo > p && s.lo < upto && s.hi > s.lo {
                            upto = s.lo;
                        }
                    }
                    (i, upto)
                };
                match out.last_mut() {
                    Some(last) if last.0 == tier => last.1 += upto - p,
                    _ => out.push((tier, upto - p)),
                }
                p = upto;
            }
        }
    }

    /// Of the global blocks `[from, to)` of `c`'s lineage, those no tier holds now that some tier held once, each
    /// counted in `out` for the deepest tier that held it (the last to drop it: the misses it caused). A chain's
    /// blocks held once in a tier are taken as the hull of the ranges it held there.
    pub fn tier_lost(&self, c: u32, from: u32, to: u32, out: &mut [u64]) {
        if from >= to {
            return;
        }
        let mut x = c;
        let mut end = u32::MAX;
        while x != NONE {
            let off = self.chains[x as usize].offset;
            let (g0, g1) = (from.max(off), to.min(end));
            if g0 < g1 {
                let (a, b) = (g0 - off, g1 - off);
                // Cut [a, b) at every edge of the tiers' ranges, then classify each piece.
                let mut cuts: Vec<u32> = vec![a, b];
                for t in &self.tiers {
                    let s = t.slot(x);
                    for e in [s.lo, s.hi, s.ever_lo, s.ever_hi] {
                        if e > a && e < b {
                            cuts.push(e);
                        }
                    }
                }
                cuts.sort_unstable();
                cuts.dedup();
                for w in cuts.windows(2) {
                    let p = w[0];
                    let held = self.tiers.iter().any(|t| {
                        let s = t.slot(x);
                        s.lo <= p && p < s.hi
                    });
                    if held {
                        continue;
                    }
                    if let Some(i) = (0..self.tiers.len()).rev().find(|&i| {
                        let s = self.tiers[i].slot(x);
                        s.ever_lo <= p && p < s.ever_hi
                    }) && let Some(o) = out.get_mut(i)
                    {
                        *o += u64::from(w[1] - p);
                    }
                }
            }
            if from >= off {
                break;
            }
            end = off;
            x = self.chains[x as usize].parent;
        }
    }

    /// High-water mark of global blocks ever computed along `c`'s lineage (contiguous from 0).
    pub fn ever(&self, c: u32) -> u32 {
        self.lineage_max(c, |_, ch| ch.ever)
    }

    /// Blocks that would stop being evictable if a request on chain `c` were admitted (see [`Self::pin`]).
    pub fn lineage_evictable(&self, c: u32) -> u64 {
        let mut n = 0u64;
        let mut x = c;
        let mut need = u32::MAX;
        while x != NONE {
            let ch = &self.chains[x as usize];
            let after = if need == u32::MAX || ch.pin_full > 0 {
                0
            } else {
                ch.r.saturating_sub(need.max(max_partial(&ch.partial)))
            };
            n += u64::from(ch.ev.saturating_sub(after));
            if ch.parent == NONE {
                break;
            }
            need = ch.offset - self.chains[ch.parent as usize].offset;
            x = ch.parent;
        }
        n
    }

    /// A request on chain `c` starts using it: all of `c`, and of each ancestor the prefix its lineage uses.
    pub fn pin(&mut self, c: u32) {
        self.pin_walk(c, true);
    }

    /// The reverse of [`Self::pin`].
    pub fn unpin(&mut self, c: u32) {
        self.pin_walk(c, false);
    }

    fn pin_walk(&mut self, c: u32, add: bool) {
        let mut x = c;
        let mut need = u32::MAX;
        while x != NONE {
            let parent = {
                let ch = &mut self.chains[x as usize];
                if add {
                    ch.pins += 1;
                } else {
                    ch.pins -= 1;
                }
                if need == u32::MAX {
                    if add {
                        ch.pin_full += 1;
                    } else {
                        ch.pin_full -= 1;
                    }
                } else if add {
                    match ch.partial.iter_mut().find(|e| e.0 == need) {
                        Some(e) => e.1 += 1,
                        None => ch.partial.push((need, 1)),
                    }
                } else if let Some(i) = ch.partial.iter().position(|e| e.0 == need) {
                    ch.partial[i].1 -= 1;
                    if ch.partial[i].1 == 0 {
                        ch.partial.swap_remove(i);
                    }
                }
                ch.parent
            };
            if parent != NONE {
                need = self.chains[x as usize].offset - self.chains[parent as usize].offset;
            }
            self.refresh(x);
            x = parent;
        }
    }

    /// Recount chain `x`'s evictable blocks and its place in the LRU list (after its `r` or pins changed).
    #[inline]
    fn refresh(&mut self, x: u32) {
        let ch = &self.chains[x as usize];
        if ch.pin_full > 0 && ch.ev == 0 && !ch.in_lru && ch.alive {
            // Pinned whole by its own running request (the hot case: a request computing its chain): not
            // evictable before or after, nothing to recount.
            return;
        }
        self.recount(x);
    }

    fn recount(&mut self, x: u32) {
        let (e, old, in_lru) = {
            let ch = &self.chains[x as usize];
            let e = if ch.pin_full > 0 {
                0
            } else {
                ch.r.saturating_sub(max_partial(&ch.partial))
            };
            (e, ch.ev, ch.in_lru)
        };
        if e == old && in_lru == (e > 0) && self.chains[x as usize].alive {
            // Nothing to recount (a pinned chain growing as its request computes): the common case.
            return;
        }
        self.evictable = self.evictable + u64::from(e) - u64::from(old);
        self.chains[x as usize].ev = e;
        if e > 0 && !in_lru {
            self.lru_push_tail(x);
        } else if e == 0 && in_lru {
            self.lru_remove(x);
        }
        self.maybe_recycle(x);
    }

    fn lru_remove(&mut self, c: u32) {
        let (prev, next) = {
            let ch = &self.chains[c as usize];
            (ch.lru_prev, ch.lru_next)
        };
        if prev == NONE {
            self.lru_head = next;
        } else {
            self.chains[prev as usize].lru_next = next;
        }
        if next == NONE {
            self.lru_tail = prev;
        } else {
            self.chains[next as usize].lru_prev = prev;
        }
        let ch = &mut self.chains[c as usize];
        ch.in_lru = false;
        ch.lru_prev = NONE;
        ch.lru_next = NONE;
    }

    fn lru_push_tail(&mut self, c: u32) {
        let tail = self.lru_tail;
        {
            let ch = &mut self.chains[c as usize];
            ch.in_lru = true;
            ch.lru_prev = tail;
            ch.lru_next = NONE;
        }
        if tail == NONE {
            self.lru_head = c;
        } else {
            self.chains[tail as usize].lru_next = c;
        }
        self.lru_tail = c;
    }

    /// A walk along the eviction order (least recently used chain first), covering nothing yet.
    pub fn lru_walk(&self) -> LruWalk {
        LruWalk {
            next: self.lru_head,
            clear: 0,
        }
    }

    /// Extends `w` until the blocks it covers reach `blocks`: `false` when a chain that a waiting request's lineage
    /// holds (or the list's end) comes first. What `w.clear` counts, [`Self::evict`] can take without changing what
    /// any waiting request finds cached.
    pub fn walk_clear(&self, w: &mut LruWalk, blocks: u64) -> bool {
        while w.clear < blocks {
            if w.next == NONE {
                return false;
            }
            let ch = &self.chains[w.next as usize];
            if ch.waiting > 0 {
                return false;
            }
            w.clear += u64::from(ch.ev);
            w.next = ch.lru_next;
        }
        true
    }

    /// Evict `n` unpinned blocks, least recently used chain first, each chain from its tail. Returns the number
    /// actually evicted (less than `n` only if fewer are evictable).
    pub fn evict(&mut self, mut n: u64) -> u64 {
        let mut done = 0;
        while n > 0 && self.lru_head != NONE {
            let h = self.lru_head;
            let take = n.min(u64::from(self.chains[h as usize].ev));
            let r_old = self.chains[h as usize].r;
            self.chains[h as usize].r -= take as u32;
            self.resident -= take;
            self.evicted_blocks += take;
            n -= take;
            done += take;
            if take > 0 && self.tiers.first().is_some_and(|t| !t.always) {
                self.tier_push(0, h, r_old - take as u32, r_old, self.now_ms);
            }
            self.refresh(h);
        }
        done
    }

    /// The evictions of a run of steps taken at once (what [`Self::alloc`] would evict step by step, `n` blocks in
    /// all): block `p` (1-based) of them is evicted by the step `at(p)`, which starts at `at(p).0` and by which
    /// `at(p).1` of them are evicted. Each chain's blocks go into tier 0 as the piece its first step took, stamped
    /// then, and the rest stamped by its last step; what tier 0 trims meanwhile goes down the same way, each piece
    /// stamped by the step whose write overflowed the tier (a chain that grows tier 0 by one block per block evicted
    /// overflows it at its `room + i`-th block for the `i`-th block dropped). This is what the steps one by one
    /// would leave provided no tier expires anything and no tier below tier 0 trims meanwhile (the caller's
    /// bounds). Stops before a chain whose write would not grow tier 0 by its size (tier 0 holds some of those
    /// blocks already, or a range apart from them) if that write overflows tier 0; returns the blocks evicted.
    pub fn evict_timed(&mut self, n: u64, at: impl Fn(u64) -> (f64, u64)) -> u64 {
        let write = self.tiers.first().is_some_and(|t| !t.always);
        let down = write && self.tiers.get(1).is_some_and(|t| !t.always);
        let mut done = 0u64;
        while done < n && self.lru_head != NONE {
            let h = self.lru_head;
            let r_old = self.chains[h as usize].r;
            let take = (n - done).min(u64::from(self.chains[h as usize].ev));
            if take == 0 {
                // Not reached (the LRU list holds chains with evictable blocks), as `evict` would.
                self.refresh(h);
                continue;
            }
            let r_new = r_old - take as u32;
            // The piece the chain's first step evicts: [r_old − first, r_old).
            let (t_first, through) = at(done + 1);
            let first = (through.min(done + take) - done) as u32;
            let room = if write {
                let tier = &self.tiers[0];
                let s = tier.slot(h);
                if s.hi != s.lo && s.lo != r_old {
                    // Tier 0's growth as the steps would write the pieces: the first merged with what it holds (or
                    // replacing a range apart from it), then the rest below it.
                    let a = r_old - first;
                    let (mut lo, hi) = if s.lo > r_old || s.hi < a {
                        (a, r_old)
                    } else {
                        (s.lo.min(a), s.hi.max(r_old))
                    };
                    lo = lo.min(r_new);
                    let overflows = tier.used - u64::from(s.hi - s.lo) + u64::from(hi - lo) > tier.capacity;
                    #[cfg(test)]
                    PARTLY_HELD.with(|c| {
                        let [taken, stopped] = c.get();
                        c.set([taken + usize::from(!overflows), stopped + usize::from(overflows)]);
                    });
                    if overflows {
                        break;
                    }
                }
                tier.capacity.saturating_sub(tier.used)
            } else {
                0
            };
            self.chains[h as usize].r = r_new;
            self.resident -= take;
            self.evicted_blocks += take;
            if write {
                self.tier_write(0, h, r_old - first, r_old, t_first);
                if u64::from(first) < take {
                    let (t_last, _) = at(done + take);
                    self.tier_write(0, h, r_new, r_old - first, t_last);
                }
                // What overflows tier 0, from its least recently used chain's deepest block: only a chain that grew
                // it by `take` gets here over capacity, its `room + i`-th block overflowing it for the `i`-th drop.
                let mut dropped = 0u64;
                while self.tiers[0].used > self.tiers[0].capacity {
                    let tier = &mut self.tiers[0];
                    let over = tier.used - tier.capacity;
                    let c = tier.head;
                    let sl = &mut tier.slots[c as usize];
                    let amount = over.min(u64::from(sl.hi - sl.lo)) as u32;
                    let hi = sl.hi;
                    sl.hi -= amount;
                    let emptied = sl.hi == sl.lo;
                    if emptied {
                        sl.lo = 0;
                        sl.hi = 0;
                    }
                    tier.used -= u64::from(amount);
                    tier.dropped_blocks += u64::from(amount);
                    if emptied {
                        tier.unlink(c);
                    }
                    if down {
                        let base = done + room;
                        let (t_first, through) = at(base + dropped + 1);
                        let first = ((through - base).min(dropped + u64::from(amount)) - dropped) as u32;
                        self.tier_write(1, c, hi - first, hi, t_first);
                        if first < amount {
                            let (t_last, _) = at(base + dropped + u64::from(amount));
                            self.tier_write(1, c, hi - amount, hi - first, t_last);
                        }
                    }
                    if emptied {
                        self.maybe_recycle(c);
                    }
                    dropped += u64::from(amount);
                }
            }
            done += take;
            self.refresh(h);
        }
        done
    }

    /// When the first block of some TTL tier expires (its least recently used chain's stamp plus the TTL; infinite
    /// when none can).
    pub fn next_expiry(&self) -> f64 {
        let mut t = f64::INFINITY;
        for tier in &self.tiers {
            if tier.ttl_ms.is_finite() && tier.head != NONE {
                t = t.min(tier.slots[tier.head as usize].stamp + tier.ttl_ms);
            }
        }
        t
    }

    /// Chain `c`'s local blocks `[lo, hi)` go into tier `t`, written or dropped by the level above at `stamp`:
    /// merged with the chain's range there when they touch or overlap it (else they replace it: a range with a gap
    /// below it is never hit, one below `lo` is still held above), the chain becomes the most recently used, and
    /// the tier is expired and trimmed to capacity (what it drops going on down).
    fn tier_push(&mut self, t: usize, c: u32, lo: u32, hi: u32, stamp: f64) {
        if !self.hold_tier_trim && self.tiers[t].ttl_ms.is_finite() {
            self.expire(t);
        }
        self.tier_write(t, c, lo, hi, stamp);
        if !self.hold_tier_trim {
            self.trim(t);
        }
    }

    /// [`Self::tier_push`] without its expiry and trimming.
    fn tier_write(&mut self, t: usize, c: u32, lo: u32, hi: u32, stamp: f64) {
        let tier = &mut self.tiers[t];
        let s = tier.slot_mut(c);
        let old = u64::from(s.hi - s.lo);
        if old == 0 || s.lo > hi || s.hi < lo {
            (s.lo, s.hi) = (lo, hi);
        } else {
            (s.lo, s.hi) = (s.lo.min(lo), s.hi.max(hi));
        }
        let new = u64::from(s.hi - s.lo);
        s.ever_lo = s.ever_lo.min(s.lo);
        s.ever_hi = s.ever_hi.max(s.hi);
        tier.used = tier.used + new - old;
        tier.touch(c, stamp);
    }

    /// What tier `t` drops goes to the next tier when that one is written on eviction.
    fn cascade(&mut self, t: usize, c: u32, lo: u32, hi: u32, stamp: f64) {
        if self.tiers.get(t + 1).is_some_and(|n| !n.always) {
            self.tier_push(t + 1, c, lo, hi, stamp);
        }
    }

    /// Drop tier `t`'s blocks, least recently used chain first and each from its deepest block, down to capacity.
    fn trim(&mut self, t: usize) {
        while self.tiers[t].used > self.tiers[t].capacity && self.tiers[t].head != NONE {
            let tier = &mut self.tiers[t];
            let c = tier.head;
            let over = tier.used - tier.capacity;
            let s = &mut tier.slots[c as usize];
            let take = over.min(u64::from(s.hi - s.lo)) as u32;
            let (lo, hi) = (s.hi - take, s.hi);
            s.hi -= take;
            let emptied = s.hi == s.lo;
            if emptied {
                s.lo = 0;
                s.hi = 0;
            }
            tier.used -= u64::from(take);
            tier.dropped_blocks += u64::from(take);
            if emptied {
                tier.unlink(c);
            }
            let now = self.now_ms;
            self.cascade(t, c, lo, hi, now);
            if emptied {
                self.maybe_recycle(c);
            }
        }
    }

    /// Drop tier `t`'s chains whose time to live has passed by `now_ms`, each going down stamped with the moment
    /// it expired.
    fn expire(&mut self, t: usize) {
        let (ttl, now) = (self.tiers[t].ttl_ms, self.now_ms);
        loop {
            let tier = &mut self.tiers[t];
            let c = tier.head;
            if c == NONE || tier.slots[c as usize].stamp + ttl > now {
                return;
            }
            let s = tier.slots[c as usize];
            tier.slots[c as usize].lo = 0;
            tier.slots[c as usize].hi = 0;
            tier.used -= u64::from(s.hi - s.lo);
            tier.dropped_blocks += u64::from(s.hi - s.lo);
            tier.unlink(c);
            self.cascade(t, c, s.lo, s.hi, s.stamp + ttl);
            self.maybe_recycle(c);
        }
    }

    /// Expire every TTL tier at `now_ms`, faster tier first (what one drops can expire below in turn).
    pub fn expire_tiers(&mut self) {
        for t in 0..self.tiers.len() {
            if self.tiers[t].ttl_ms.is_finite() {
                self.expire(t);
            }
        }
    }

    /// Trim every tier to capacity, faster first (after [`Self::hold_tier_trim`]).
    pub fn trim_tiers(&mut self) {
        for t in 0..self.tiers.len() {
            self.trim(t);
        }
    }

    /// Tier `t` served a hit for `c`: every chain of `c`'s lineage it holds becomes its most recently used.
    pub fn tier_touch_lineage(&mut self, t: usize, c: u32) {
        let now = self.now_ms;
        let mut x = c;
        while x != NONE {
            if self.tiers[t].slot(x).listed {
                self.tiers[t].touch(x, now);
            }
            x = self.chains[x as usize].parent;
        }
    }

    /// A request on chain `c` releases its lineage: every tier written `always` takes the blocks of it the GPU
    /// holds (all of `c`'s resident prefix, of each ancestor up to where the lineage leaves it), own chain first so
    /// that a shared ancestor is the more recently used.
    pub fn write_lineage(&mut self, c: u32) {
        let now = self.now_ms;
        let mut x = c;
        let mut need = u32::MAX;
        while x != NONE {
            let (n, parent, off) = {
                let ch = &self.chains[x as usize];
                (ch.r.min(need), ch.parent, ch.offset)
            };
            if n > 0 {
                for t in 0..self.tiers.len() {
                    if self.tiers[t].always {
                        self.tier_push(t, x, 0, n, now);
                    }
                }
            }
            if parent != NONE {
                need = off - self.chains[parent as usize].offset;
            }
            x = parent;
        }
    }

    /// Make `n` blocks free, evicting if needed; `false` (and nothing changed) if impossible.
    pub fn alloc(&mut self, n: u64) -> bool {
        if n > self.available() {
            return false;
        }
        let free = self.free();
        if free < n {
            self.evict(n - free);
        }
        self.private += n;
        true
    }

    /// A request on chain `c` computed the global blocks `[g0, g1)` (already allocated as private). Blocks that
    /// extend the resident prefix of their chain become cached; returns how many (they leave `private`).
    pub fn fill(&mut self, c: u32, g0: u32, g1: u32) -> u64 {
        if g0 >= g1 {
            return 0;
        }
        let mut converted = 0u64;
        let mut x = c;
        let mut hi = g1;
        while x != NONE {
            let mut touched = false;
            let caching = self.caching;
            let ch = &mut self.chains[x as usize];
            let off = ch.offset;
            let lo = g0.max(off);
            if lo < hi {
                let (a, b) = (lo - off, hi - off);
                ch.ever = ch.ever.max(b);
                let b2 = b.min(ch.limit);
                if caching && a <= ch.r && ch.r < b2 {
                    converted += u64::from(b2 - ch.r);
                    ch.r = b2;
                    touched = true;
                }
            }
            let (done, parent) = (g0 >= off, ch.parent);
            if touched {
                self.refresh(x);
            }
            if done {
                break;
            }
            hi = hi.min(off);
            x = parent;
        }
        self.resident += converted;
        self.private -= converted;
        converted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_reach_evict_tail_first() {
        let mut kv = Kv::new(100, true);
        let s = kv.new_chain(NONE, 0, u32::MAX);
        let a = kv.new_chain(s, 4, u32::MAX);
        kv.pin(a);
        assert!(kv.alloc(10));
        assert_eq!(kv.fill(a, 0, 10), 10);
        assert_eq!((kv.chains[s as usize].r, kv.chains[a as usize].r), (4, 6));
        assert_eq!(kv.reach(a), 10);
        kv.unpin(a);
        assert_eq!(kv.evictable, 10);
        // The child was freed first, so it is evicted first, from its tail.
        assert_eq!(kv.evict(3), 3);
        assert_eq!(kv.reach(a), 7);
        assert_eq!(kv.evict(4), 4);
        assert_eq!(kv.reach(a), 3);
        assert_eq!(kv.chains[a as usize].r, 0);
        assert_eq!(kv.ever(a), 10);
        assert_eq!(kv.resident, 3);
    }

    #[test]
    fn alloc_fails_without_change_when_full() {
        let mut kv = Kv::new(8, true);
        let c = kv.new_chain(NONE, 0, u32::MAX);
        kv.pin(c);
        assert!(kv.alloc(8));
        assert!(!kv.alloc(1));
        assert_eq!(kv.free(), 0);
        assert_eq!(kv.fill(c, 0, 8), 8);
        assert_eq!(kv.private, 0);
        kv.unpin(c);
        assert!(kv.alloc(5));
        assert_eq!(kv.reach(c), 3);
    }
}
