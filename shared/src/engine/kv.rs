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
//! An optional host tier ([`super::profile::HostCache`]) keeps what the GPU evicts: each chain holds one range
//! `[hlo, hhi)` of its local blocks in host memory (evicted blocks are its tail, so successive evictions of a
//! chain extend the range downward), chains in an LRU list of their own, trimmed from the least recently used
//! chain's deepest block. The tier is inclusive: a restore copies blocks back and the host keeps them, so the
//! host state changes only at eviction and trimming, never when a request computes (which `core::Lazy` defers).

pub(crate) const NONE: u32 = u32::MAX;

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
    /// Local blocks `[hlo, hhi)` held by the host tier (empty when equal).
    pub hlo: u32,
    pub hhi: u32,
    host_prev: u32,
    host_next: u32,
    in_host: bool,
}

impl Chain {
    /// Leading local blocks resident in the GPU or, right after them, in the host tier.
    #[inline]
    fn reach_any(&self) -> u32 {
        if self.hhi > self.hlo && self.hlo <= self.r {
            self.r.max(self.hhi)
        } else {
            self.r
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
    /// Host tier capacity, blocks (0: no host tier).
    pub host_capacity: u64,
    /// Σ host blocks over all chains.
    pub host_used: u64,
    host_head: u32,
    host_tail: u32,
    /// While set, evictions do not trim the host tier (an admission restoring host blocks holds it until they are
    /// back in the GPU, so that evictions it causes cannot drop them first).
    pub hold_host_trim: bool,
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
            host_capacity: 0,
            host_used: 0,
            host_head: NONE,
            host_tail: NONE,
            hold_host_trim: false,
        }
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
            hlo: 0,
            hhi: 0,
            host_prev: NONE,
            host_next: NONE,
            in_host: false,
        };
        if let Some(id) = self.free_chains.pop() {
            self.chains[id as usize] = c;
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
        if !ch.freed && ch.r == 0 && ch.pins == 0 && ch.children == 0 && !ch.in_lru && !ch.in_host {
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
        self.lineage_max(c, |ch| ch.r)
    }

    /// Leading blocks that content `a` (its first `a_blocks` global blocks) and content `b` (its first `b_blocks`)
    /// have in common: where their lineages meet, the shorter of the two spans of the meeting chain. O(depth²) over
    /// the two lineages (a llama.cpp slot's prompt similarity; lineages are a conversation's steps deep).
    pub fn common_prefix_blocks(&self, a: u32, a_blocks: u32, b: u32, b_blocks: u32) -> u32 {
        let walk = |c: u32, blocks: u32| {
            let mut out: Vec<(u32, u32)> = Vec::new();
            let (mut x, mut end) = (c, blocks);
            while x != NONE && (x as usize) < self.chains.len() {
                let ch = &self.chains[x as usize];
                out.push((x, end));
                end = end.min(ch.offset);
                x = ch.parent;
            }
            out
        };
        let la = walk(a, a_blocks);
        for (y, end_b) in walk(b, b_blocks) {
            if let Some(&(_, end_a)) = la.iter().find(|e| e.0 == y) {
                return end_a.min(end_b);
            }
        }
        0
    }

    /// Walk the lineage from the root: the furthest global block reached by `f(chain)` local blocks per chain,
    /// stopping where a chain does not cover the offset of the next.
    #[inline]
    fn lineage_max(&self, c: u32, f: impl Fn(&Chain) -> u32) -> u32 {
        // Fast paths: a root chain (a session) or a child of a root (a request after a shared prefix).
        let ch = &self.chains[c as usize];
        if ch.parent == NONE {
            return if ch.offset > 0 { 0 } else { f(ch) };
        }
        let parent = &self.chains[ch.parent as usize];
        if parent.parent == NONE {
            let reach = if parent.offset > 0 { 0 } else { f(parent) };
            return if reach < ch.offset {
                reach
            } else {
                ch.offset.saturating_add(f(ch))
            };
        }
        self.lineage_max_deep(c, f)
    }

    fn lineage_max_deep(&self, c: u32, f: impl Fn(&Chain) -> u32) -> u32 {
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
            reach = ch.offset.saturating_add(f(ch));
        }
        reach
    }

    fn lineage_max_slow(&self, c: u32, f: &impl Fn(&Chain) -> u32) -> u32 {
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
            reach = ch.offset.saturating_add(f(ch));
        }
        reach
    }

    /// Leading global blocks of `c`'s lineage resident in the GPU or the host tier (see [`Chain::reach_any`]).
    pub fn reach_host(&self, c: u32) -> u32 {
        self.lineage_max(c, Chain::reach_any)
    }

    /// High-water mark of global blocks ever computed along `c`'s lineage (contiguous from 0).
    pub fn ever(&self, c: u32) -> u32 {
        self.lineage_max(c, |ch| ch.ever)
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
            if self.host_capacity > 0 && take > 0 {
                self.host_push(h, r_old - take as u32, r_old);
            }
            self.refresh(h);
        }
        done
    }

    /// Chain `c`'s local blocks `[lo, hi)` leave the GPU for the host tier: merged with the chain's host range
    /// when they touch or overlap it (else they replace it: a range with a gap below it is never hit, one below
    /// `lo` is still in the GPU), the chain becomes the most recently used, and the tier is trimmed to capacity.
    fn host_push(&mut self, c: u32, lo: u32, hi: u32) {
        let ch = &mut self.chains[c as usize];
        let old = u64::from(ch.hhi - ch.hlo);
        if old == 0 || ch.hlo > hi || ch.hhi < lo {
            (ch.hlo, ch.hhi) = (lo, hi);
        } else {
            (ch.hlo, ch.hhi) = (ch.hlo.min(lo), ch.hhi.max(hi));
        }
        let new = u64::from(ch.hhi - ch.hlo);
        self.host_used = self.host_used + new - old;
        self.host_touch(c);
        if !self.hold_host_trim {
            self.trim_host();
        }
    }

    /// Move chain `c` to the most recently used end of the host list (adding it if absent).
    pub fn host_touch(&mut self, c: u32) {
        if self.chains[c as usize].in_host {
            self.host_unlink(c);
        }
        let tail = self.host_tail;
        {
            let ch = &mut self.chains[c as usize];
            ch.in_host = true;
            ch.host_prev = tail;
            ch.host_next = NONE;
        }
        if tail == NONE {
            self.host_head = c;
        } else {
            self.chains[tail as usize].host_next = c;
        }
        self.host_tail = c;
    }

    fn host_unlink(&mut self, c: u32) {
        let (prev, next) = {
            let ch = &self.chains[c as usize];
            (ch.host_prev, ch.host_next)
        };
        if prev == NONE {
            self.host_head = next;
        } else {
            self.chains[prev as usize].host_next = next;
        }
        if next == NONE {
            self.host_tail = prev;
        } else {
            self.chains[next as usize].host_prev = prev;
        }
        let ch = &mut self.chains[c as usize];
        ch.in_host = false;
        ch.host_prev = NONE;
        ch.host_next = NONE;
    }

    /// Drop host blocks, least recently used chain first and each from its deepest block, down to capacity.
    pub fn trim_host(&mut self) {
        while self.host_used > self.host_capacity && self.host_head != NONE {
            let c = self.host_head;
            let ch = &mut self.chains[c as usize];
            let take = (self.host_used - self.host_capacity).min(u64::from(ch.hhi - ch.hlo));
            ch.hhi -= take as u32;
            self.host_used -= take;
            if ch.hhi == ch.hlo {
                ch.hlo = 0;
                ch.hhi = 0;
                self.host_unlink(c);
                self.maybe_recycle(c);
            }
        }
    }

    /// Touch every chain of `c`'s lineage that holds host blocks (a host hit: they become most recently used).
    pub fn host_touch_lineage(&mut self, c: u32) {
        let mut x = c;
        while x != NONE {
            if self.chains[x as usize].in_host {
                self.host_touch(x);
            }
            x = self.chains[x as usize].parent;
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
