//! Property tests on seeded engine runs: every admitted request finishes, KV use never exceeds capacity, event
//! times are monotone, the same seed gives the same report; bad input is an error naming the field, never a panic.

use proptest::prelude::*;
use shared::engine::{Engine, EngineProfile, EngineScenario, PromptBlocks, StepEvent, simulate};
use shared::metrics::Slo;
use shared::workload::{ClosedLoopWorkload, LengthDist, PoissonWorkload, SessionWorkload, Workload};

fn profile(kv: u64, seqs: u32, budget: u32, caching: bool) -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        enable_prefix_caching: caching,
        ..EngineProfile::linear("p", kv, seqs, budget.max(seqs), [5.0, 0.1, 0.0001, 20.0, 1.0])
    }
}

fn workload_strategy() -> impl Strategy<Value = Workload> {
    prop_oneof![
        (1u64..300, 0.5f64..50.0, 1u32..3000, 1u32..400, 0u32..2000).prop_map(|(n, rate, p, o, sh)| {
            Workload::Poisson(PoissonWorkload {
                num_requests: n,
                rate_rps: rate,
                prompt: LengthDist::Uniform { min: 1, max: p },
                output: LengthDist::Uniform { min: 1, max: o },
                shared_prefix_tokens: sh,
            })
        }),
        (
            1u32..6,
            2u32..8,
            1000u64..8000,
            0.0f64..20.0,
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(sessions, steps, base, think, respawn, drain)| {
                Workload::Sessions(SessionWorkload {
                    sessions,
                    steps,
                    base_tokens: base,
                    gen_tokens: 200,
                    tool_tokens: 300,
                    think_s: think,
                    respawn,
                    drain,
                    duration_s: 120.0,
                    drain_grace_s: 30.0,
                    stagger_s: 2.0,
                    ..Default::default()
                })
            }),
        (1u32..20, 1u64..200, 0.0f64..2.0).prop_map(|(users, n, think)| {
            Workload::ClosedLoop(ClosedLoopWorkload {
                users,
                num_requests: n,
                think_s: think,
                prompt: LengthDist::Lognormal {
                    median: 500,
                    sigma: 1.0,
                    max: Some(4000),
                },
                output: LengthDist::Fixed { tokens: 50 },
                shared_prefix_tokens: 512,
            })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn seeded_runs_are_sound_and_deterministic(
        w in workload_strategy(),
        kv in 300u64..5000,
        seqs in 1u32..64,
        budget in 16u32..4096,
        caching in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let sc = EngineScenario {
            workload: w,
            profile: profile(kv, seqs, budget, caching),
            slo: Slo::default(),
            seed,
            counterfactuals: true,
            fleet: None,
            deployment: None,
            disaggregation: None,
        };
        let a = simulate(&sc).expect("valid");
        let b = simulate(&sc).expect("valid");
        prop_assert_eq!(&a, &b, "same seed, same report");
        let cap = sc.profile.num_kv_blocks;
        let model_len = sc.profile.model_len();
        for r in &a.records {
            let prompt = r.prompt_tokens.unwrap_or(0);
            if prompt + r.asked_tokens <= model_len {
                prop_assert!(r.ok, "a request that fits must finish: {r:?}");
                prop_assert_eq!(r.gen_tokens, r.asked_tokens);
                let ttft = r.ttft_s.unwrap_or(f64::NAN);
                let q = r.queue_s.unwrap_or(f64::NAN);
                prop_assert!(0.0 <= q && q <= ttft && ttft <= r.wall_s + 1e-12, "{r:?}");
                prop_assert!(r.cached_tokens.unwrap_or(0) < prompt.max(1));
            } else {
                prop_assert!(!r.ok && r.error.is_some());
            }
        }
        prop_assert!(a.diagnostics.kv_thrash.peak_kv_blocks_used <= cap);
        for w in a.timeline.windows(2) {
            prop_assert!(w[0].t_s <= w[1].t_s);
        }
        for p in &a.timeline {
            prop_assert!(p.kv_blocks_used <= p.kv_capacity);
        }
        let m = &a.diagnostics.cache_misses;
        prop_assert_eq!(m.missed_tokens, m.cold_first_step_tokens + m.new_content_tokens + m.evicted_think_tokens
            + m.capacity_tokens + m.other_tokens);
    }

    /// The step API: random submissions of shared-prefix prompts; every request finishes exactly once with all
    /// its tokens, steps never overlap, and KV use stays within capacity.
    #[test]
    fn step_api_finishes_everything(
        reqs in proptest::collection::vec((0u32..4, 1usize..900, 1u32..60, 0.0f64..50.0), 1..40),
        kv in 64u64..400,
    ) {
        let mut eng = Engine::new(profile(kv, 8, 256, true));
        let mut t = 0.0;
        let mut expected = std::collections::HashMap::new();
        let mut pending = reqs.into_iter();
        let mut last_end = 0.0f64;
        let mut finished = std::collections::HashMap::new();
        let mut tokens = std::collections::HashMap::new();
        for _ in 0..1_000_000 {
            if let Some((prefix, len, out, gap)) = pending.next() {
                t += gap;
                let toks: Vec<u32> = (0..len as u32).map(|i| if (i as usize) < 256 { prefix * 1000 + i } else { i * 7 + len as u32 }).collect();
                if len + out as usize <= (kv * 16) as usize {
                    let id = eng.submit(t, PromptBlocks::from_tokens(&toks, 16), out);
                    expected.insert(id, out);
                }
            }
            match eng.step(t) {
                Some(step) => {
                    prop_assert!(step.start_ms >= last_end - 1e-9);
                    last_end = step.start_ms + step.duration_ms;
                    t = t.max(last_end);
                    prop_assert!(eng.kv_blocks_resident() <= eng.kv_capacity());
                    for e in step.events {
                        match e {
                            StepEvent::Tokens { id, tokens: n } => *tokens.entry(id).or_insert(0u32) += n,
                            StepEvent::Finished { id, generated } => {
                                prop_assert!(finished.insert(id, generated).is_none());
                            }
                            _ => {}
                        }
                    }
                }
                None => {
                    if pending.len() == 0 {
                        break;
                    }
                }
            }
        }
        prop_assert_eq!(finished.len(), expected.len());
        for (id, out) in &expected {
            prop_assert_eq!(finished.get(id), Some(out));
            prop_assert_eq!(tokens.get(id), Some(out));
        }
    }

    /// Arbitrary numbers in the profile and workload never panic: either valid, or an error naming a field.
    #[test]
    fn bad_numbers_are_errors_not_panics(
        rate in prop_oneof![Just(f64::NAN), Just(-1.0), Just(0.0), Just(f64::INFINITY), 0.001f64..1e9],
        fixed in prop_oneof![Just(f64::NAN), Just(-3.0), 0.0f64..100.0],
        blocks in prop_oneof![Just(0u64), 1u64..10, Just(u64::MAX)],
        bs in prop_oneof![Just(0u32), 1u32..64, Just(u32::MAX)],
        seqs in 0u32..5,
        n in prop_oneof![Just(0u64), 1u64..50, Just(u64::MAX)],
    ) {
        let mut p = profile(blocks, seqs, 64, true);
        p.block_size = bs;
        p.step_fixed_ms = fixed;
        let sc = EngineScenario {
            workload: Workload::Poisson(PoissonWorkload {
                num_requests: n,
                rate_rps: rate,
                prompt: LengthDist::Fixed { tokens: 20 },
                output: LengthDist::Fixed { tokens: 5 },
                shared_prefix_tokens: 0,
            }),
            profile: p,
            slo: Slo::default(),
            seed: 1,
            counterfactuals: false,
            fleet: None,
            deployment: None,
            disaggregation: None,
        };
        match simulate(&sc) {
            Ok(r) => prop_assert!(!r.records.is_empty()),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("workload.") || msg.starts_with("profile."), "{msg}");
            }
        }
    }
}

#[test]
fn bad_input_names_the_field() {
    let good = EngineScenario {
        workload: Workload::Poisson(PoissonWorkload {
            num_requests: 10,
            rate_rps: 1.0,
            prompt: LengthDist::Fixed { tokens: 20 },
            output: LengthDist::Fixed { tokens: 5 },
            shared_prefix_tokens: 0,
        }),
        profile: profile(100, 4, 64, true),
        slo: Slo::default(),
        seed: 1,
        counterfactuals: false,
        fleet: None,
        deployment: None,
        disaggregation: None,
    };
    simulate(&good).expect("valid");
    type Mutation = Box<dyn Fn(&mut EngineScenario)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|s| {
                if let Workload::Poisson(p) = &mut s.workload {
                    p.rate_rps = f64::NAN
                }
            }),
            "workload.rate_rps",
        ),
        (
            Box::new(|s| {
                if let Workload::Poisson(p) = &mut s.workload {
                    p.rate_rps = -3.0
                }
            }),
            "workload.rate_rps",
        ),
        (
            Box::new(|s| {
                if let Workload::Poisson(p) = &mut s.workload {
                    p.num_requests = 0
                }
            }),
            "workload.num_requests",
        ),
        (
            Box::new(|s| {
                if let Workload::Poisson(p) = &mut s.workload {
                    p.prompt = LengthDist::Fixed { tokens: 0 }
                }
            }),
            "workload.prompt.tokens",
        ),
        (Box::new(|s| s.profile.num_kv_blocks = 0), "profile.num_kv_blocks"),
        (Box::new(|s| s.profile.block_size = 0), "profile.block_size"),
        (Box::new(|s| s.profile.max_num_seqs = 0), "profile.max_num_seqs"),
        (
            Box::new(|s| s.profile.prefill_tokens_per_ms = 0.0),
            "profile.prefill_tokens_per_ms",
        ),
        (
            Box::new(|s| s.profile.per_ctx_token_ms = -1.0),
            "profile.per_ctx_token_ms",
        ),
        (
            Box::new(|s| s.profile.num_kv_blocks = u64::MAX),
            "profile.num_kv_blocks",
        ),
        (
            Box::new(|s| s.profile.prefill_tile_rows = 5000),
            "profile.prefill_tile_rows",
        ),
        (
            Box::new(|s| s.profile.ubatch_tokens = s.profile.max_num_batched_tokens + 1),
            "profile.ubatch_tokens",
        ),
        (Box::new(|s| s.slo.ttft_ms = f64::NAN), "slo.ttft_ms"),
        (
            Box::new(|s| {
                s.workload = Workload::Sessions(SessionWorkload {
                    sessions: 0,
                    ..Default::default()
                })
            }),
            "workload.sessions",
        ),
    ];
    for (mutate, field) in cases {
        let mut sc = good.clone();
        mutate(&mut sc);
        let e = simulate(&sc).expect_err(field).to_string();
        assert!(e.starts_with(field), "expected {field}: {e}");
    }
    let unknown = r#"{"workload": {"kind": "poisson", "num_requests": 1, "rate_rps": 1, "bogus": 2},
        "profile": {"name": "x", "block_size": 16, "num_kv_blocks": 10, "max_num_seqs": 1, "max_num_batched_tokens": 8,
        "step_fixed_ms": 1, "per_seq_ms": 0, "per_ctx_token_ms": 0, "prefill_tokens_per_ms": 1}}"#;
    assert!(serde_json::from_str::<EngineScenario>(unknown).is_err());
}

/// The step API's prefix cache: a prompt that resends a previous prompt plus the output hashes it declared hits.
#[test]
fn step_api_prefix_hits_across_requests() {
    let mut eng = Engine::new(profile(1000, 8, 512, true));
    let first: Vec<u32> = (0..1000).collect();
    let with_reply: Vec<u32> = (0..1100).collect();
    // First request: prompt of 1000 tokens; its hashes cover the 100-token reply it will stream.
    let mut pb = PromptBlocks::from_tokens(&with_reply, 16);
    pb.tokens = 1000;
    let a = eng.submit(0.0, pb, 100);
    let mut t = 0.0;
    let mut cached = Vec::new();
    let mut b_sent = false;
    while let Some(step) = eng.step(t) {
        t = step.start_ms + step.duration_ms;
        for e in &step.events {
            if let StepEvent::Admitted { cached_tokens, .. } = e {
                cached.push(*cached_tokens);
            }
            if let StepEvent::Finished { id, .. } = e
                && *id == a
                && !b_sent
            {
                let second: Vec<u32> = (0..1100).chain(5000..5300).collect();
                eng.submit(t, PromptBlocks::from_tokens(&second, 16), 10);
                b_sent = true;
            }
        }
    }
    let _ = first;
    // Reply tokens 1000..1099 were computed as KV up to token 1098: blocks 0..68 (1088 tokens) are cached.
    assert_eq!(cached, vec![0, 1088]);
}
