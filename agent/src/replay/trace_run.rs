//! Replaying a production trace live ([`run_trace`]): the `trace` workload's requests, each without dependencies
//! sent at its arrival time, each with dependencies (a session's previous turn, agentic `wait_for`) sent its
//! `delay_ms` after the last of them completes (never before its own arrival); the prompts come from the hash ids
//! ([`TracePrompts`]).
//!
//! **Content.** Trace block `i` of a request is filler (whole shuffled passes over the prose corpus,
//! `shared::filler::balanced_words`, so its token count does not depend on the draw) from a stream of its own, seeded by the run's seed and
//! nonce and the identity of the hash-id prefix up to `i` (`shared::workload::mooncake::prefix_keys`): two requests
//! whose hash ids agree up to block `i` send the same words up to the end of that block, and differ from the first
//! word of the first block where they disagree. Block `i` holds the words for tokens `i·bs .. (i+1)·bs` of the
//! cumulative word count `w(t)` (the filler's words for `t` designed prose tokens under the run's tokenizer
//! match), so a request of `input_length` tokens sends exactly `w(input_length)` words, and a request that ends
//! inside a block sends that block's first words. Prompt tokens past the hash ids' blocks (a trace that gives fewer
//! ids than the input holds) are filler of the request's own.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use shared::filler::{self, Filler, FillerKind, TokenScale};
use shared::workload::TraceWorkload;
use shared::workload::mooncake::{direct_reuse, prefix_keys};
use tokio::task::JoinSet;

use super::runner::{Ctx, FailStreak, Slot};

/// Prompt text of trace requests (see the module docs).
#[derive(Debug, Clone)]
pub struct TracePrompts {
    filler: Filler,
    block_tokens: u64,
}

impl TracePrompts {
    pub fn new(seed: u64, nonce: u64, block_tokens: u32, scale: TokenScale) -> Self {
        TracePrompts {
            filler: Filler::new(seed, nonce).with_scale(scale),
            block_tokens: u64::from(block_tokens.max(1)),
        }
    }

    /// Words for `tokens` designed prose tokens.
    fn w(&self, tokens: u64) -> usize {
        self.filler.scale.words(tokens, FillerKind::Prose)
    }

    /// The prompt of request `index`: `tokens` tokens whose blocks are named by `hash_ids`.
    pub fn prompt(&self, index: u64, hash_ids: &[u64], tokens: u64) -> String {
        let bs = self.block_tokens;
        let mut p = String::with_capacity(self.w(tokens) * 8);
        for (i, key) in prefix_keys(hash_ids).into_iter().enumerate() {
            let lo = i as u64 * bs;
            let hi = ((i as u64 + 1) * bs).min(tokens);
            let mut stream = self.filler.stream(key as u32, (key >> 32) as u32);
            p.push_str(&filler::balanced_words(
                self.w(hi) - self.w(lo),
                FillerKind::Prose,
                stream.rng(),
            ));
        }
        let covered = (hash_ids.len() as u64 * bs).min(tokens);
        if covered < tokens {
            let mut own = self.filler.stream(u32::MAX - 1, index as u32);
            p.push_str(&filler::balanced_words(
                self.w(tokens) - self.w(covered),
                FillerKind::Prose,
                own.rng(),
            ));
        }
        p
    }
}

/// Send the trace's requests (see the module docs). `fail_limit` consecutive failures abort the run;
/// `max_in_flight` bounds the requests in flight as for an open loop.
pub async fn run_trace(
    ctx: Arc<Ctx>,
    trace: Arc<TraceWorkload>,
    prompts: Arc<TracePrompts>,
    fail_limit: u64,
    max_in_flight: Option<u32>,
) {
    let reqs = &trace.requests;
    let n = reqs.len();
    let streak = Arc::new(FailStreak::new(fail_limit));
    let permits = max_in_flight.map(|m| Arc::new(tokio::sync::Semaphore::new(m.max(1) as usize)));
    // What the hash ids let a cache reuse, token-exact: each record's designed cached tokens.
    let designed = Arc::new(direct_reuse(reqs, trace.hash_block_size(), 1));
    let mut pending: Vec<usize> = reqs.iter().map(|r| r.after.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, r) in reqs.iter().enumerate() {
        for &d in &r.after {
            dependents[d as usize].push(i);
        }
    }
    let sessions = reqs
        .iter()
        .filter_map(|r| r.session)
        .max()
        .map_or(0, |s| s as usize + 1);
    let mut turns = vec![0u32; sessions];
    // Due requests: (send time after the origin in ms as bits, index); non-negative f64s order as their bits.
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = reqs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.after.is_empty())
        .map(|(i, r)| Reverse((r.arrival_ms.max(0.0).to_bits(), i)))
        .collect();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let mut tasks = JoinSet::new();
    let mut sent = 0usize;
    let mut finished = 0usize;
    while finished < n {
        let next_at = due
            .peek()
            .map(|Reverse((t, _))| ctx.origin + Duration::from_secs_f64(f64::from_bits(*t) / 1000.0));
        tokio::select! {
            () = async {
                match next_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(Reverse((_, i))) = due.pop() else { continue };
                if ctx.stops.no_new_steps.is_cancelled() {
                    break;
                }
                let permit = match &permits {
                    Some(p) => tokio::select! {
                        permit = p.clone().acquire_owned() => permit.ok(),
                        () = ctx.stops.no_new_steps.cancelled() => break,
                    },
                    None => None,
                };
                let r = &reqs[i];
                let step = r.session.map_or(0, |s| {
                    let k = turns[s as usize];
                    turns[s as usize] += 1;
                    k
                });
                let slot = Slot {
                    session: r.session.map_or(i as u64, u64::from),
                    inst: 0,
                    step,
                    steps_asked: 1,
                    base_asked: r.prompt_tokens(),
                    designed_cached_tokens: Some(designed[i]),
                    designed_prompt_tokens: Some(r.prompt_tokens()),
                    affinity: r.session.map(|x| (u64::from(x), 0)),
                    parent: None,
                };
                let (ctx, trace, prompts, streak, tx) =
                    (ctx.clone(), trace.clone(), prompts.clone(), streak.clone(), done_tx.clone());
                sent += 1;
                tasks.spawn(async move {
                    let _permit = permit;
                    let r = &trace.requests[i];
                    let prompt = prompts.prompt(i as u64, &r.hash_ids, r.prompt_tokens());
                    let o = ctx.request(slot, &prompt, r.output_tokens, false).await;
                    streak.note(&ctx, o.ok);
                    let _ = tx.send(i);
                });
                while tasks.try_join_next().is_some() {}
            }
            Some(i) = done_rx.recv() => {
                finished += 1;
                // Failed or not, a completion releases the requests waiting for it.
                let now_ms = ctx.origin.elapsed().as_secs_f64() * 1000.0;
                for &j in &dependents[i] {
                    pending[j] -= 1;
                    if pending[j] == 0 {
                        let r = &reqs[j];
                        let t = (now_ms + r.delay_ms).max(r.arrival_ms);
                        due.push(Reverse((t.to_bits(), j)));
                    }
                }
                if due.is_empty() && finished == sent {
                    // Nothing due and nothing in flight: the rest wait for requests that were never sent.
                    break;
                }
            }
            () = ctx.stops.no_new_steps.cancelled() => break,
        }
    }
    drop(done_tx);
    while tasks.join_next().await.is_some() {}
}
