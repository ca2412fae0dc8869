//! A small built-in iteration-level engine, used when no `shared::engine` profile is given.
//!
//! Each step admits waiting requests (FIFO) up to `max_batch_slots`, looks their prompts up in a prefix cache of
//! chained block hashes (FIFO eviction at `cache_blocks`), prefills the uncached part, and every running request
//! produces one token. Step duration = `base_tpot_ms + batch_tpot_slope_ms × running + uncached prefill tokens /
//! prefill_tokens_per_ms`. A newly admitted request's first token comes at the end of its prefill step.

use std::collections::{HashSet, VecDeque};

use super::engine::{StepEngine, StepEvent};

/// The lite engine's coefficients.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiteProfile {
    pub prefill_tokens_per_ms: f64,
    pub base_tpot_ms: f64,
    pub batch_tpot_slope_ms: f64,
    pub max_batch_slots: usize,
    pub block_size: usize,
    pub cache_blocks: usize,
}

impl Default for LiteProfile {
    /// Roughly Llama-3-8B on one H100 (PRESETS.md): 30 tok/ms prefill, 7 ms base TPOT, 0.08 ms per sequence.
    fn default() -> Self {
        LiteProfile {
            prefill_tokens_per_ms: 30.0,
            base_tpot_ms: 7.0,
            batch_tpot_slope_ms: 0.08,
            max_batch_slots: 256,
            block_size: 16,
            cache_blocks: 27_000,
        }
    }
}

struct Req {
    id: u64,
    prompt_tokens: u32,
    blocks: Vec<u64>,
    remaining: u32,
}

pub struct LiteEngine {
    p: LiteProfile,
    next_id: u64,
    waiting: VecDeque<Req>,
    running: Vec<Req>,
    cache: HashSet<u64>,
    order: VecDeque<u64>,
}

impl LiteEngine {
    pub fn new(p: LiteProfile) -> Self {
        LiteEngine {
            p,
            next_id: 0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    fn cached_prefix_blocks(&self, blocks: &[u64]) -> usize {
        blocks.iter().take_while(|h| self.cache.contains(h)).count()
    }

    fn insert_blocks(&mut self, blocks: &[u64]) {
        for &h in blocks {
            if self.cache.insert(h) {
                self.order.push_back(h);
            }
        }
        while self.order.len() > self.p.cache_blocks {
            if let Some(old) = self.order.pop_front() {
                self.cache.remove(&old);
            }
        }
    }
}

impl StepEngine for LiteEngine {
    fn submit(&mut self, _now_ms: f64, prompt_tokens: u32, block_hashes: Vec<u64>, output_tokens: u32) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Req {
            id,
            prompt_tokens,
            blocks: block_hashes,
            remaining: output_tokens.max(1),
        });
        id
    }

    fn cancel(&mut self, id: u64) {
        self.waiting.retain(|r| r.id != id);
        self.running.retain(|r| r.id != id);
    }

    fn step(&mut self, _now_ms: f64) -> Option<(f64, Vec<StepEvent>)> {
        if self.running.is_empty() && self.waiting.is_empty() {
            return None;
        }
        let mut events = Vec::with_capacity(self.running.len() + 4);
        let mut prefill = 0u64;
        while self.running.len() < self.p.max_batch_slots.max(1) {
            let Some(mut req) = self.waiting.pop_front() else { break };
            let hit_blocks = self.cached_prefix_blocks(&req.blocks);
            // vLLM never serves the whole prompt from cache: the last token is always computed.
            let cached = ((hit_blocks * self.p.block_size) as u64).min(u64::from(req.prompt_tokens.saturating_sub(1)));
            prefill += u64::from(req.prompt_tokens) - cached;
            let blocks = std::mem::take(&mut req.blocks);
            self.insert_blocks(&blocks);
            events.push(StepEvent::Admitted {
                id: req.id,
                cached_tokens: cached,
            });
            self.running.push(req);
        }
        let batch = self.running.len() as f64;
        let duration = self.p.base_tpot_ms
            + self.p.batch_tpot_slope_ms * batch
            + prefill as f64 / self.p.prefill_tokens_per_ms.max(1e-9);
        for r in &mut self.running {
            r.remaining -= 1;
            events.push(StepEvent::Tokens { id: r.id, n: 1 });
            if r.remaining == 0 {
                events.push(StepEvent::Finished { id: r.id });
            }
        }
        self.running.retain(|r| r.remaining > 0);
        Some((duration, events))
    }

    fn load(&self) -> (usize, usize) {
        (self.running.len(), self.waiting.len())
    }

    fn block_size(&self) -> usize {
        self.p.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_prompt_with_same_prefix_hits_the_cache() {
        let mut e = LiteEngine::new(LiteProfile::default());
        let a = e.submit(0.0, 64, vec![1, 2, 3, 4], 2);
        let (_, ev) = e.step(0.0).unwrap_or_else(|| panic!("busy"));
        assert!(ev.contains(&StepEvent::Admitted {
            id: a,
            cached_tokens: 0
        }));
        let b = e.submit(0.0, 70, vec![1, 2, 3, 4], 1);
        let (_, ev) = e.step(0.0).unwrap_or_else(|| panic!("busy"));
        assert!(ev.contains(&StepEvent::Admitted {
            id: b,
            cached_tokens: 64
        }));
        assert!(ev.contains(&StepEvent::Finished { id: a }) && ev.contains(&StepEvent::Finished { id: b }));
        assert!(e.step(0.0).is_none());
    }
}
