//! [`StepEngine`] over `shared::engine::Engine`, the iteration-level engine the simulator runs: continuous
//! batching with chunked prefill, KV blocks with preemption, and automatic prefix caching with LRU eviction.

use shared::engine::{Engine, EngineProfile, PromptBlocks, ReqId};

use super::engine::{ServerEvent, StepEngine};

/// The simulator's engine, stepped in real time by the sim-server.
pub struct SharedEngine {
    engine: Engine,
    preemptions: u64,
}

impl SharedEngine {
    pub fn new(profile: EngineProfile) -> Self {
        SharedEngine {
            engine: Engine::new(profile),
            preemptions: 0,
        }
    }
}

impl StepEngine for SharedEngine {
    fn submit(&mut self, now_ms: f64, prompt_tokens: u32, block_hashes: Vec<u64>, output_tokens: u32) -> u64 {
        self.engine
            .submit(
                now_ms,
                PromptBlocks {
                    tokens: prompt_tokens,
                    block_hashes,
                },
                output_tokens,
            )
            .0
    }

    fn cancel(&mut self, id: u64) {
        self.engine.cancel(ReqId(id));
    }

    fn step(&mut self, now_ms: f64) -> Option<(f64, Vec<ServerEvent>)> {
        let step = self.engine.step(now_ms)?;
        let mut preempted = 0u64;
        let events = step
            .events
            .into_iter()
            .filter_map(|e| match e {
                shared::engine::StepEvent::Admitted { id, cached_tokens, .. } => Some(ServerEvent::Admitted {
                    id: id.0,
                    cached_tokens: u64::from(cached_tokens),
                }),
                shared::engine::StepEvent::Tokens { id, tokens } => Some(ServerEvent::Tokens { id: id.0, n: tokens }),
                shared::engine::StepEvent::Speculated {
                    id,
                    draft_tokens,
                    accepted_tokens,
                } => Some(ServerEvent::Spec {
                    id: id.0,
                    drafted: draft_tokens,
                    accepted: accepted_tokens,
                }),
                shared::engine::StepEvent::Finished { id, .. } => Some(ServerEvent::Finished { id: id.0 }),
                shared::engine::StepEvent::Preempted { .. } => {
                    preempted += 1;
                    None
                }
            })
            .collect();
        self.preemptions += preempted;
        // The engine starts a step at max(now, end of the previous step); report the time to the step's end.
        let end = step.start_ms + step.duration_ms;
        Some(((end - now_ms).max(0.0), events))
    }

    fn load(&self) -> (usize, usize) {
        (self.engine.running(), self.engine.waiting())
    }

    fn block_size(&self) -> usize {
        self.engine.profile().block_size.max(1) as usize
    }

    fn max_model_len(&self) -> Option<u64> {
        Some(self.engine.profile().model_len())
    }

    fn kv_usage(&self) -> Option<f64> {
        let cap = self.engine.kv_capacity();
        (cap > 0).then(|| self.engine.kv_blocks_used() as f64 / cap as f64)
    }

    fn preemptions(&self) -> Option<u64> {
        Some(self.preemptions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resent_prefix_hits_the_shared_engine_cache() {
        let mut e = SharedEngine::new(shared::engine::presets::laptop_demo());
        let blocks: Vec<u64> = (1..=8).collect();
        let a = e.submit(0.0, 128, blocks.clone(), 2);
        let mut now = 0.0;
        let mut admitted = Vec::new();
        while let Some((d, ev)) = e.step(now) {
            now += d;
            admitted.extend(ev.into_iter().filter(|x| matches!(x, ServerEvent::Admitted { .. })));
        }
        let b = e.submit(now, 130, blocks, 1);
        while let Some((d, ev)) = e.step(now) {
            now += d;
            admitted.extend(ev.into_iter().filter(|x| matches!(x, ServerEvent::Admitted { .. })));
        }
        assert_eq!(
            admitted[0],
            ServerEvent::Admitted {
                id: a,
                cached_tokens: 0
            }
        );
        match admitted[1] {
            ServerEvent::Admitted { id, cached_tokens } => {
                assert_eq!(id, b);
                assert!(cached_tokens >= 112, "{cached_tokens}");
            }
            ref other => panic!("{other:?}"),
        }
    }
}
