//! The engine model against queueing theory, and its prefix cache against what sessions should hit.

use shared::engine::{EngineProfile, EngineScenario, simulate};
use shared::metrics::Slo;
use shared::workload::{LengthDist, PoissonWorkload, SessionWorkload, Workload};

/// A profile where a request's service time is deterministic and nothing overlaps: one sequence at a time,
/// no context term, no cache. Prefill step = 10 + 100 / 10 = 20 ms; each decode step 10 ms.
fn single_server() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        enable_prefix_caching: false,
        ..EngineProfile::linear("md1", 1000, 1, 8192, [10.0, 0.0, 0.0, 10.0, 0.0])
    }
}

/// Poisson arrivals of fixed 100-token prompts into [`single_server`].
fn single_server_poisson(num_requests: u64, rate_rps: f64, output: LengthDist, seed: u64) -> EngineScenario {
    EngineScenario::new(
        Workload::Poisson(PoissonWorkload {
            num_requests,
            rate_rps,
            prompt: LengthDist::Fixed { tokens: 100 },
            output,
            shared_prefix_tokens: 0,
        }),
        single_server(),
        seed,
    )
}

fn mean_queue_ms(sc: &EngineScenario) -> (f64, usize) {
    let r = simulate(sc).expect("valid scenario");
    let q: Vec<f64> = r
        .records
        .iter()
        .map(|x| x.queue_s.expect("simulated") * 1000.0)
        .collect();
    (q.iter().sum::<f64>() / q.len() as f64, q.len())
}

/// M/D/1: Poisson arrivals at λ = 7/s, deterministic service S = 20 + 8·10 = 100 ms (ρ = 0.7). Pollaczek–Khinchine:
/// Wq = λS² / (2(1 − ρ)) = 116.7 ms. Tolerance 5 % over 200,000 requests.
#[test]
fn md1_mean_wait_matches_pollaczek_khinchine() {
    let sc = single_server_poisson(200_000, 7.0, LengthDist::Fixed { tokens: 9 }, 11);
    let (lambda, s) = (7.0 / 1000.0, 100.0);
    let rho = lambda * s;
    let expected = lambda * s * s / (2.0 * (1.0 - rho));
    let (got, n) = mean_queue_ms(&sc);
    eprintln!("M/D/1: simulated mean wait {got:.2} ms, Pollaczek-Khinchine {expected:.2} ms");
    assert_eq!(n, 200_000);
    assert!(
        (got / expected - 1.0).abs() < 0.05,
        "M/D/1 mean wait {got:.2} ms, P-K {expected:.2} ms"
    );
}

/// M/G/1: output uniform in 1..=17, so S = 20 + 10·(O − 1) ms, E[S] = 100, E[S²] = 12,400. P-K:
/// Wq = λE[S²] / (2(1 − ρ)) = 144.7 ms. Tolerance 5 % over 200,000 requests.
#[test]
fn mg1_mean_wait_matches_pollaczek_khinchine() {
    let sc = single_server_poisson(200_000, 7.0, LengthDist::Uniform { min: 1, max: 17 }, 5);
    let lambda = 7.0 / 1000.0;
    let expected = lambda * 12_400.0 / (2.0 * (1.0 - lambda * 100.0));
    let (got, _) = mean_queue_ms(&sc);
    eprintln!("M/G/1: simulated mean wait {got:.2} ms, Pollaczek-Khinchine {expected:.2} ms");
    assert!(
        (got / expected - 1.0).abs() < 0.05,
        "M/G/1 mean wait {got:.2} ms, P-K {expected:.2} ms"
    );
}

fn session_scenario(num_kv_blocks: u64, sessions: u32, think_s: f64) -> EngineScenario {
    EngineScenario {
        workload: Workload::Sessions(SessionWorkload {
            sessions,
            steps: 8,
            base_tokens: 6000,
            gen_tokens: 300,
            tool_tokens: 500,
            think_s,
            spread: 0.0,
            stagger_s: 1.0,
            duration_s: 3600.0,
            ..Default::default()
        }),
        profile: EngineProfile {
            basis: "test".into(),
            max_model_len: Some(40_000),
            ..EngineProfile::linear("t", num_kv_blocks, 64, 4096, [8.0, 0.05, 0.00004, 20.0, 2.0])
        },
        slo: Slo::default(),
        seed: 3,
        counterfactuals: false,
        fleet: None,
        deployment: None,
        disaggregation: None,
    }
}

/// With ample KV, step k ≥ 1 hits all of step k−1's prompt + reply, in whole blocks: the KV computed by step k−1
/// is prompt + reply − 1 tokens (the last sampled token is never fed back), and a hit never covers the last
/// prompt token.
#[test]
fn sessions_hit_previous_prompt_and_reply_with_ample_kv() {
    let r = simulate(&session_scenario(100_000, 4, 5.0)).expect("valid");
    let bs = 16;
    let mut later = 0;
    for rec in &r.records {
        assert!(rec.ok);
        let cached = rec.cached_tokens.expect("simulated");
        let designed = rec.designed_cached_tokens.expect("designed");
        let prompt = rec.prompt_tokens.expect("prompt");
        if rec.step == 0 {
            assert_eq!(cached, 0, "cold first step");
            continue;
        }
        later += 1;
        let expect = ((designed - 1) / bs).min((prompt - 1) / bs) * bs;
        assert_eq!(cached, expect, "step {} of session {}", rec.step, rec.session);
    }
    assert!(later > 10);
    let m = &r.diagnostics.cache_misses;
    assert_eq!(m.evicted_think_tokens, 0);
    assert_eq!(m.capacity_tokens, 0);
    assert_eq!(
        m.missed_tokens,
        m.cold_first_step_tokens + m.new_content_tokens + m.evicted_think_tokens + m.capacity_tokens + m.other_tokens
    );
    assert!(m.cached_tokens as f64 / m.prompt_tokens as f64 > 0.8);
}

/// With a KV cache barely larger than one session and long think times, the other sessions' work evicts a
/// thinking session's blocks: hits drop and the "evicted during think time" reason grows.
#[test]
fn tiny_kv_and_long_think_evicts_during_think() {
    let ample = simulate(&session_scenario(100_000, 6, 30.0)).expect("valid");
    let tiny = simulate(&session_scenario(2_600, 6, 30.0)).expect("valid");
    let share = |r: &shared::engine::EngineReport| {
        let m = &r.diagnostics.cache_misses;
        m.cached_tokens as f64 / m.prompt_tokens as f64
    };
    assert!(
        share(&tiny) < share(&ample) - 0.1,
        "tiny {} ample {}",
        share(&tiny),
        share(&ample)
    );
    let mt = &tiny.diagnostics.cache_misses;
    assert!(mt.evicted_think_tokens > 0, "{mt:?}");
    assert!(mt.evicted_think_tokens > ample.diagnostics.cache_misses.evicted_think_tokens);
    assert!(tiny.diagnostics.kv_thrash.evicted_blocks > 0);
    assert_eq!(
        mt.missed_tokens,
        mt.cold_first_step_tokens
            + mt.new_content_tokens
            + mt.evicted_think_tokens
            + mt.capacity_tokens
            + mt.other_tokens
    );
}

/// Turning the cache off makes every later step a full prefill: TTFT goes up.
#[test]
fn cache_off_counterfactual_is_slower() {
    let mut sc = session_scenario(100_000, 4, 5.0);
    sc.counterfactuals = true;
    let r = simulate(&sc).expect("valid");
    let off = r.diagnostics.cache_off.expect("counterfactual");
    assert!(off.ttft_p50_ms > 2.0 * off.cache_on_ttft_p50_ms, "{off:?}");
}

/// One request alone: TTFT is the prefill step (10 + 100/10 = 20 ms), every later token one 10 ms decode step.
#[test]
fn lone_request_timing_is_the_step_model() {
    let sc = single_server_poisson(1, 1.0, LengthDist::Fixed { tokens: 9 }, 1);
    let r = simulate(&sc).expect("valid");
    let rec = &r.records[0];
    assert!((rec.ttft_s.expect("ttft") - 0.020).abs() < 1e-9);
    assert!((rec.wall_s - 0.100).abs() < 1e-9);
    assert!((rec.tpot_ms().expect("tpot") - 10.0).abs() < 1e-9);
    let itl = rec.itl.expect("itl");
    for v in [itl.mean_ms, itl.p50_ms, itl.p99_ms, itl.max_ms] {
        assert!((v - 10.0).abs() < 1e-9, "{itl:?}");
    }
    assert_eq!(rec.queue_s, Some(0.0));
}
