//! The profile's `scheduler: "llama_cpp"` (llama-server's `update_slots`): slots, one token of every decoding slot
//! first, then prompt tokens of the prefilling slots in slot order up to `max_num_batched_tokens` (`n_batch`).
//! Off (the default, `"vllm"`) nothing changes: the golden files of the other suites hold that.

use std::collections::HashMap;

use proptest::prelude::*;
use shared::engine::profile::Scheduler;
use shared::engine::{Engine, EngineProfile, EngineScenario, PromptBlocks, ReqId, StepEvent, simulate};
use shared::workload::{SessionWorkload, Workload};

fn profile(scheduler: Scheduler, slots: u32, budget: u32) -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        prefill_ctx_ms_per_ktok: 0.1,
        scheduler,
        ..EngineProfile::linear("p", 100_000, slots, budget, [5.0, 0.1, 0.0001, 20.0, 1.0])
    }
}

/// Distinct content for request `k`: `n` tokens.
fn prompt(k: u32, n: u32) -> PromptBlocks {
    let toks: Vec<u32> = (0..n).map(|i| k * 1_000_000 + i).collect();
    PromptBlocks::from_tokens(&toks, 16)
}

/// Every step of an engine run to idle: (start, prefill tokens, batch, first tokens: request → step index).
struct Trace {
    steps: Vec<shared::engine::Step>,
    first: HashMap<ReqId, usize>,
    finished: HashMap<ReqId, u32>,
}

fn drain(e: &mut Engine, mut t: f64) -> Trace {
    let mut tr = Trace {
        steps: Vec::new(),
        first: HashMap::new(),
        finished: HashMap::new(),
    };
    while let Some(s) = e.step(t) {
        t = s.start_ms + s.duration_ms;
        for ev in &s.events {
            match ev {
                StepEvent::Tokens { id, .. } => {
                    tr.first.entry(*id).or_insert(tr.steps.len());
                }
                StepEvent::Finished { id, generated } => {
                    tr.finished.insert(*id, *generated);
                }
                _ => {}
            }
        }
        tr.steps.push(s);
    }
    tr
}

/// Three 1,500-token prompts arriving together on a fresh 4-slot server with `n_batch` 2,048: llama-server gives
/// them slots 3, 2, 1 (least recently used, ties to the last) and fills each batch in slot order, so the LAST to
/// arrive is served first, and the prompts share every step's budget: 1,500 + 548, then 952 + 1,095 (+ 1 decode),
/// then 405 (+ 2 decodes). vLLM's FCFS serves them in arrival order.
#[test]
fn prompts_that_arrive_together_are_served_in_slot_order_and_share_the_budget() {
    let mut e = Engine::new(profile(Scheduler::LlamaCpp, 4, 2048));
    let ids: Vec<ReqId> = (0..3).map(|k| e.submit(0.0, prompt(k, 1500), 8)).collect();
    let tr = drain(&mut e, 0.0);
    let first: Vec<usize> = ids.iter().map(|id| tr.first[id]).collect();
    assert_eq!(
        first,
        vec![2, 1, 0],
        "first-token step of each request, in arrival order"
    );
    let head: Vec<(u32, u32)> = tr.steps[..3].iter().map(|s| (s.prefill_tokens, s.batch)).collect();
    assert_eq!(head, vec![(2048, 2), (952 + 1095, 3), (405, 3)]);
    assert!(ids.iter().all(|id| tr.finished[id] == 8));

    // vLLM's schedule: arrival order.
    let mut v = Engine::new(profile(Scheduler::Vllm, 4, 2048));
    let vids: Vec<ReqId> = (0..3).map(|k| v.submit(0.0, prompt(k, 1500), 8)).collect();
    let vt = drain(&mut v, 0.0);
    let vfirst: Vec<usize> = vids.iter().map(|id| vt.first[id]).collect();
    assert_eq!(vfirst, vec![0, 1, 2]);
}

/// A short prompt arriving while a long one is being prefilled: llama-server gives it a free slot at once and, its
/// slot id being lower on a fresh server, its prompt goes first in the next batch (first token after one step);
/// vLLM's running-first schedule lets the long prefill take every step's whole budget until it is done.
#[test]
fn a_short_prompt_is_not_stuck_behind_a_long_prefill() {
    let run = |scheduler| {
        let mut e = Engine::new(profile(scheduler, 4, 2048));
        let long = e.submit(0.0, prompt(0, 8000), 4);
        let s0 = e.step(0.0).expect("the long prompt's first chunk");
        assert_eq!(s0.prefill_tokens, 2048);
        let t = s0.start_ms + s0.duration_ms;
        let short = e.submit(t, prompt(1, 100), 4);
        let tr = drain(&mut e, t);
        (tr.first[&short], tr.first[&long])
    };
    // llama.cpp: the short prompt (slot 2) and 1,948 tokens of the long one (slot 3) share the next step.
    assert_eq!(run(Scheduler::LlamaCpp), (0, 2));
    // vLLM: 8,000 = 2,048 × 3 + 1,856; the short one is admitted beside the long one's last chunk.
    assert_eq!(run(Scheduler::Vllm), (2, 2));
}

/// Decoding slots always get their token: a step that carries prompt tokens carries one token of every decoding
/// slot too, and never more than `n_batch` tokens in all.
#[test]
fn decodes_are_never_starved_and_the_budget_holds() {
    let mut e = Engine::new(profile(Scheduler::LlamaCpp, 4, 512));
    let a = e.submit(0.0, prompt(0, 64), 200);
    let s = e.step(0.0).expect("a's prefill");
    let mut t = s.start_ms + s.duration_ms;
    let b = e.submit(t, prompt(1, 3000), 4);
    let mut a_tokens_while_b_prefills = 0;
    let mut b_started = false;
    while let Some(s) = e.step(t) {
        t = s.start_ms + s.duration_ms;
        let tok = |id: ReqId| {
            s.events
                .iter()
                .any(|ev| matches!(ev, StepEvent::Tokens { id: x, .. } if *x == id))
        };
        assert!(
            s.prefill_tokens + (s.batch - u32::from(s.prefill_tokens > 0)) <= 512,
            "{s:?}"
        );
        if s.prefill_tokens > 0 {
            assert!(tok(a), "a decoding slot was left out of a prompt step: {s:?}");
            a_tokens_while_b_prefills += 1;
        }
        b_started |= tok(b);
    }
    assert!(b_started);
    // 3,000 prompt tokens in chunks of 511 (one token of the batch is a's): 6 steps.
    assert_eq!(a_tokens_while_b_prefills, 6);
}

fn sessions(scheduler: Scheduler, slots: u32, n: u32, seed: u64) -> EngineScenario {
    EngineScenario::new(
        Workload::Sessions(SessionWorkload {
            sessions: n,
            steps: 4,
            base_tokens: 3000,
            gen_tokens: 64,
            tool_tokens: 200,
            think_s: 0.5,
            respawn: false,
            duration_s: 120.0,
            stagger_s: 0.5,
            ..Default::default()
        }),
        profile(scheduler, slots, 2048),
        seed,
    )
}

fn report(sc: &EngineScenario) -> String {
    let r = simulate(sc).expect("valid scenario");
    format!("{:?}\n{:?}", r.records, r.summary)
}

/// With one slot there is nothing to order: the llama.cpp schedule gives exactly vLLM's records, where llama-server
/// keeps its host prompt cache (`--cache-ram`, on by default: a tier below the slots) so that a conversation finds
/// its last state again after another took the slot. Without it, that conversation recomputes its prompt.
#[test]
fn one_slot_is_the_vllm_schedule() {
    let with_tier = |mut sc: EngineScenario| {
        sc.profile.kv_tiers = vec![shared::engine::profile::KvTier::on_evict("host", 1_000_000, 1000.0)];
        sc
    };
    for n in [1, 3] {
        let a = report(&with_tier(sessions(Scheduler::LlamaCpp, 1, n, 7)));
        let b = report(&with_tier(sessions(Scheduler::Vllm, 1, n, 7)));
        assert_eq!(a, b, "{n} sessions on one slot");
    }
    let lone = simulate(&sessions(Scheduler::LlamaCpp, 1, 1, 7)).expect("valid");
    let vllm = simulate(&sessions(Scheduler::Vllm, 1, 1, 7)).expect("valid");
    assert_eq!(
        format!("{:?}", lone.records),
        format!("{:?}", vllm.records),
        "one conversation keeps its slot"
    );
    let shared_slot = simulate(&sessions(Scheduler::LlamaCpp, 1, 3, 7)).expect("valid");
    let cached: u64 = shared_slot.records.iter().filter_map(|r| r.cached_tokens).sum();
    let vllm_cached: u64 = simulate(&sessions(Scheduler::Vllm, 1, 3, 7))
        .expect("valid")
        .records
        .iter()
        .filter_map(|r| r.cached_tokens)
        .sum();
    assert!(
        vllm_cached > 0 && cached < vllm_cached / 2,
        "no prompt cache: {cached} vs {vllm_cached} cached"
    );
}

/// The option round-trips through JSON as `"scheduler": "llama_cpp"` and is absent when it is the default, so
/// profiles written before it read and write the same bytes.
#[test]
fn the_option_is_serialized_only_when_set() {
    let v = profile(Scheduler::Vllm, 4, 2048);
    let text = serde_json::to_string(&v).expect("json");
    assert!(!text.contains("scheduler"), "{text}");
    let l = profile(Scheduler::LlamaCpp, 4, 2048);
    let text = serde_json::to_string(&l).expect("json");
    assert!(text.contains("\"scheduler\":\"llama_cpp\""), "{text}");
    assert_eq!(EngineProfile::from_json(&text).expect("reads back"), l);
    let bad = text.replace("llama_cpp", "sglang");
    let err = EngineProfile::from_json(&bad)
        .expect_err("unknown scheduler")
        .to_string();
    assert!(err.contains("scheduler"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Any session workload on any slot count: every request completes with its tokens, and sessions differ from
    /// vLLM's schedule only in order (the same requests, prompt and cached tokens need not match: order changes
    /// what the cache holds).
    #[test]
    fn every_request_completes(slots in 1u32..6, n in 1u32..10, seed in 0u64..1000) {
        let r = simulate(&sessions(Scheduler::LlamaCpp, slots, n, seed)).expect("valid");
        let v = simulate(&sessions(Scheduler::Vllm, slots, n, seed)).expect("valid");
        prop_assert_eq!(r.records.len(), v.records.len());
        prop_assert!(r.records.iter().all(|x| x.ok));
        prop_assert_eq!(
            r.records.iter().map(|x| x.gen_tokens).sum::<u64>(),
            v.records.iter().map(|x| x.gen_tokens).sum::<u64>()
        );
    }
}
