//! KV memory tiers below the GPU (`kv_tiers`): each write and eviction policy, the restore-or-recompute choice and
//! the cascade from one tier to the next, against hand-computed cases; `host_cache` read as one tier; bad input
//! refused naming the field (docs/simulator.md, "KV tiers").
//!
//! The hand-computed cases share one setup: a GPU cache of 300 blocks of 16 tokens, and three prompts of 4,000
//! tokens (250 blocks) with 2 output tokens each: A, then B (different content), then A again. A ends holding 251
//! blocks (4,001 tokens), 250 of them cached; B's admission takes 250 blocks of which only 50 are free, so the GPU
//! evicts A's last 200 blocks, and B's decode one more: A keeps its first 49 blocks in the GPU and the blocks
//! `[49, 250)` (201) leave it. A again can hit at most 249 blocks (3,984 tokens: the last token is computed).

use shared::engine::profile::{HostCache, KvTier, TierEvict, TierWrite};
use shared::engine::{Engine, EngineProfile, EngineScenario, PromptBlocks, StepEvent, simulate};
use shared::workload::{SessionWorkload, Workload};

fn profile(kv: u64) -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        ..EngineProfile::linear("p", kv, 8, 8192, [5.0, 0.1, 0.0001, 20.0, 1.0])
    }
}

fn tier(name: &str, blocks: u64, rate: f64) -> KvTier {
    KvTier::on_evict(name, blocks * 16, rate)
}

/// A's cached tokens and admitting step's duration the second time, after B, with A submitted `gap_ms` after B
/// finished.
fn a_b_a(p: EngineProfile, gap_ms: f64) -> (u32, f64) {
    let mut e = Engine::new(p);
    let a: Vec<u32> = (0..4000).collect();
    let b: Vec<u32> = (100_000..104_000).collect();
    let mut t = 0.0;
    let mut last = (0, 0.0);
    for (i, prompt) in [&a, &b, &a].into_iter().enumerate() {
        if i == 2 {
            t += gap_ms;
        }
        e.submit(t, PromptBlocks::from_tokens(prompt, 16), 2);
        while let Some(s) = e.step(t) {
            t = s.start_ms + s.duration_ms;
            for ev in &s.events {
                if let StepEvent::Admitted { cached_tokens, .. } = ev {
                    last = (*cached_tokens, s.duration_ms);
                }
            }
        }
    }
    last
}

/// The admitting step of A the second time: `hit` tokens cached, a 16-token prefill, `restore_ms` of restores.
fn admit_ms(hit: u32, restore_ms: f64) -> f64 {
    5.0 + 0.1 + 0.0001 * f64::from(hit) + 1.0 + 16.0 / 20.0 + restore_ms
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Without tiers A finds its first 49 blocks; with an `on_evict` tier the 200 more it can hit are restored.
#[test]
fn on_evict_tier_keeps_what_the_gpu_evicted() {
    let (hit, ms) = a_b_a(profile(300), 0.0);
    assert_eq!(hit, 49 * 16);
    assert!(close(ms, 5.0 + 0.1 + 0.0001 * 784.0 + 1.0 + 3216.0 / 20.0), "{ms}");
    let mut p = profile(300);
    p.kv_tiers = vec![tier("host", 250, 400.0)];
    let (hit, ms) = a_b_a(p, 0.0);
    assert_eq!(hit, 249 * 16);
    assert!(close(ms, admit_ms(3984, 200.0 * 16.0 / 400.0)), "{ms}");
}

/// Same capacity, written `always`: A (250 blocks) is written when A ends, B when B ends; 500 > 250, so the
/// tier drops its least recently used chain, A, whole. A finds only what the GPU kept. With room for both, A's
/// 200 blocks past the GPU's 49 come back from the tier.
#[test]
fn always_tier_is_written_when_a_request_ends_and_trims_lru() {
    let mut p = profile(300);
    p.kv_tiers = vec![KvTier {
        write: TierWrite::Always,
        ..tier("host", 250, 400.0)
    }];
    assert_eq!(a_b_a(p.clone(), 0.0).0, 49 * 16);
    p.kv_tiers[0].capacity_tokens = 500 * 16;
    let (hit, ms) = a_b_a(p, 0.0);
    assert_eq!(hit, 249 * 16);
    assert!(close(ms, admit_ms(3984, 3200.0 / 400.0)), "{ms}");
}

/// A TTL tier drops what it holds `ttl_s` after the last write: A's blocks went in during B's steps, which end
/// when B finishes, so A back 0.5 s later hits and 1.5 s later does not. An LRU tier keeps them.
#[test]
fn ttl_tier_drops_blocks_after_their_time() {
    let mut p = profile(300);
    p.kv_tiers = vec![KvTier {
        evict: TierEvict::Ttl { ttl_s: 1.0 },
        ..tier("host", 1000, 400.0)
    }];
    assert_eq!(a_b_a(p.clone(), 500.0).0, 249 * 16);
    assert_eq!(a_b_a(p.clone(), 1500.0).0, 49 * 16);
    p.kv_tiers[0].evict = TierEvict::Lru;
    assert_eq!(a_b_a(p, 1500.0).0, 249 * 16);
}

/// A restore is chosen only when it beats recomputing: a tier slower than prefill (10 < 20 tokens/ms) is not used;
/// the same tier is worth it when prefill pays for attention over a long context.
#[test]
fn restore_only_when_faster_than_recompute() {
    let mut p = profile(300);
    p.kv_tiers = vec![tier("slow", 1000, 10.0)];
    let (hit, ms) = a_b_a(p.clone(), 0.0);
    assert_eq!(hit, 49 * 16);
    assert!(close(ms, 5.0 + 0.1 + 0.0001 * 784.0 + 1.0 + 3216.0 / 20.0), "{ms}");
    // With 0.1 ms per token per 1,000 of context, recomputing blocks [49, 249) costs Σ 0.1·c/1000 ≈ 0.24 ms more
    // per token than at 20 tokens/ms: restoring at 10 tokens/ms (0.05 ms more per token) wins.
    p.prefill_ctx_ms_per_ktok = 0.1;
    let (hit, ms) = a_b_a(p, 0.0);
    assert_eq!(hit, 249 * 16);
    let (n, c) = (16.0, 3984.0);
    let want = admit_ms(3984, 3200.0 / 10.0) + 0.1 * (n * c + n * (n - 1.0) / 2.0) / 1000.0;
    assert!(close(ms, want), "{ms} vs {want}");
}

/// What tier 0 drops goes to tier 1. Tier 0 holds 100 blocks: the GPU's first eviction `[50, 250)` leaves
/// `[50, 150)` there and sends `[150, 250)` down; the second, block 49, pushes block 149 down. A hits 249 blocks:
/// 100 from tier 0 (`[49, 149)`) and 100 from tier 1 (`[149, 249)`), each at its own speed.
#[test]
fn tier_cascade_sends_what_tier_0_drops_to_tier_1() {
    let mut p = profile(300);
    p.kv_tiers = vec![tier("host", 100, 400.0)];
    let (hit, ms) = a_b_a(p.clone(), 0.0);
    assert_eq!(hit, 149 * 16);
    // 1,616 tokens left to prefill, not 16.
    let want = admit_ms(149 * 16, 1600.0 / 400.0) + 1600.0 / 20.0;
    assert!(close(ms, want), "{ms} vs {want}");
    p.kv_tiers.push(tier("disk", 1000, 100.0));
    let (hit, ms) = a_b_a(p.clone(), 0.0);
    assert_eq!(hit, 249 * 16);
    assert!(close(ms, admit_ms(3984, 1600.0 / 400.0 + 1600.0 / 100.0)), "{ms}");
    // A TTL on tier 0 sends what expires down too: 1.5 s later everything A lost is in tier 1.
    p.kv_tiers[0].evict = TierEvict::Ttl { ttl_s: 1.0 };
    let (hit, ms) = a_b_a(p.clone(), 1500.0);
    assert_eq!(hit, 249 * 16);
    assert!(close(ms, admit_ms(3984, 3200.0 / 100.0)), "{ms}");
    // A tier 1 written `always` does not take what tier 0 drops (it takes requests' lineages as they end).
    p.kv_tiers[0].evict = TierEvict::Lru;
    p.kv_tiers[1].write = TierWrite::Always;
    let (hit, ms) = a_b_a(p, 0.0);
    assert_eq!(hit, 249 * 16);
    // Blocks [49, 149) are in both tiers (restored from the faster), [149, 249) only in tier 1.
    assert!(close(ms, admit_ms(3984, 1600.0 / 400.0 + 1600.0 / 100.0)), "{ms}");
}

/// `bytes_per_s` over `kv_bytes_per_token` is a speed in tokens per millisecond.
#[test]
fn bandwidth_in_bytes_per_second() {
    let mut t = tier("host", 1000, 1.0);
    t.restore_tokens_per_ms = None;
    t.bytes_per_s = Some(25.6e9);
    t.kv_bytes_per_token = Some(131_072.0);
    assert_eq!(t.tokens_per_ms(), 25.6e9 / 131_072.0 / 1000.0);
    let mut p = profile(300);
    p.kv_tiers = vec![t];
    p.validate().expect("valid");
    let (hit, ms) = a_b_a(p, 0.0);
    assert_eq!(hit, 249 * 16);
    assert!(close(ms, admit_ms(3984, 3200.0 / 195.3125)), "{ms}");
}

fn sessions(p: EngineProfile, seed: u64) -> EngineScenario {
    EngineScenario::new(
        Workload::Sessions(SessionWorkload {
            sessions: 8,
            steps: 6,
            base_tokens: 3000,
            gen_tokens: 150,
            tool_tokens: 400,
            think_s: 2.0,
            respawn: false,
            duration_s: 120.0,
            stagger_s: 0.5,
            ..Default::default()
        }),
        p,
        seed,
    )
}

fn report(sc: &EngineScenario) -> String {
    serde_json::to_string(&simulate(sc).expect("valid")).expect("json")
}

/// `host_cache` is the one-tier list it stands for, to the byte; and tiers raise the cached share of sessions
/// that outgrow the GPU cache.
#[test]
fn host_cache_is_one_on_evict_lru_tier() {
    for seed in [1, 7, 42] {
        let mut a = profile(400);
        a.host_cache = Some(HostCache {
            capacity_tokens: 50_000,
            restore_tokens_per_ms: 200.0,
        });
        let mut b = profile(400);
        b.kv_tiers = vec![KvTier::on_evict("host", 50_000, 200.0)];
        assert_eq!(a.tiers(), b.tiers());
        assert_eq!(report(&sessions(a, seed)), report(&sessions(b, seed)));
    }
    let share = |p: EngineProfile| simulate(&sessions(p, 7)).expect("valid").summary.cached_share_achieved;
    let none = share(profile(400)).expect("a share");
    let mut p = profile(400);
    p.kv_tiers = vec![
        tier("host", 2_000, 400.0),
        KvTier {
            evict: TierEvict::Ttl { ttl_s: 60.0 },
            ..tier("disk", 100_000, 50.0)
        },
    ];
    let tiers = share(p).expect("a share");
    assert!(tiers > none + 0.1, "tiers {tiers} vs none {none}");
}

fn err(p: &EngineProfile) -> String {
    p.validate().expect_err("invalid").to_string()
}

#[test]
fn bad_tiers_name_the_field() {
    let mut p = profile(300);
    p.kv_tiers = vec![tier("host", 10, 400.0), tier("disk", 10, 100.0)];
    p.validate().expect("valid");
    let mut q = p.clone();
    q.kv_tiers[1].capacity_tokens = 0;
    assert!(
        err(&q).starts_with("kv_tiers[1].capacity_tokens must be at least one block (16 tokens)"),
        "{}",
        err(&q)
    );
    q.kv_tiers[1].capacity_tokens = 15;
    assert!(err(&q).contains("(got 15)"), "{}", err(&q));
    let mut q = p.clone();
    q.kv_tiers[1].restore_tokens_per_ms = Some(0.0);
    assert_eq!(
        err(&q),
        "kv_tiers[1].restore_tokens_per_ms must be > 0 and at most 1e9 (got 0)"
    );
    q.kv_tiers[1].restore_tokens_per_ms = None;
    q.kv_tiers[1].bytes_per_s = Some(0.0);
    assert!(
        err(&q).starts_with("kv_tiers[1].bytes_per_s must be > 0"),
        "{}",
        err(&q)
    );
    q.kv_tiers[1].bytes_per_s = Some(1e9);
    assert!(
        err(&q).starts_with("kv_tiers[1].kv_bytes_per_token required"),
        "{}",
        err(&q)
    );
    q.kv_tiers[1].kv_bytes_per_token = Some(0.0);
    assert!(
        err(&q).starts_with("kv_tiers[1].kv_bytes_per_token must be > 0"),
        "{}",
        err(&q)
    );
    q.kv_tiers[1].restore_tokens_per_ms = Some(1.0);
    assert!(err(&q).contains("not both"), "{}", err(&q));
    let mut q = p.clone();
    q.kv_tiers[1].restore_tokens_per_ms = None;
    assert!(
        err(&q).starts_with("kv_tiers[1].restore_tokens_per_ms a tier needs its speed"),
        "{}",
        err(&q)
    );
    q.kv_tiers[1].restore_tokens_per_ms = Some(1.0);
    q.kv_tiers[1].kv_bytes_per_token = Some(131_072.0);
    assert!(
        err(&q).starts_with("kv_tiers[1].kv_bytes_per_token goes with bytes_per_s"),
        "{}",
        err(&q)
    );
    // Faster first.
    let mut q = p.clone();
    q.kv_tiers[1].restore_tokens_per_ms = Some(500.0);
    assert!(
        err(&q).starts_with("kv_tiers[1].restore_tokens_per_ms tiers go faster first"),
        "{}",
        err(&q)
    );
    for ttl_s in [0.0, -1.0, f64::NAN] {
        let mut q = p.clone();
        q.kv_tiers[1].evict = TierEvict::Ttl { ttl_s };
        assert_eq!(
            err(&q),
            format!("kv_tiers[1].evict.ttl_s must be > 0 and at most 1e9 seconds (got {ttl_s})")
        );
    }
    let mut q = p.clone();
    q.kv_tiers[0].name = String::new();
    assert!(err(&q).starts_with("kv_tiers[0].name"), "{}", err(&q));
    let mut q = p.clone();
    q.host_cache = Some(HostCache {
        capacity_tokens: 16,
        restore_tokens_per_ms: 1.0,
    });
    assert!(
        err(&q).starts_with("kv_tiers give host_cache (one tier) or kv_tiers, not both"),
        "{}",
        err(&q)
    );
    let mut q = p;
    q.kv_tiers = vec![tier("t", 10, 1.0); 5];
    assert!(err(&q).starts_with("kv_tiers at most 4 tiers"), "{}", err(&q));
}

#[test]
fn tiers_read_and_write_as_json() {
    let text = r#"{"name": "x", "block_size": 16, "num_kv_blocks": 10, "max_num_seqs": 1,
        "max_num_batched_tokens": 8, "step_fixed_ms": 1, "per_seq_ms": 0, "per_ctx_token_ms": 0,
        "prefill_tokens_per_ms": 1, "kv_tiers": [
          {"name": "host", "capacity_tokens": 1600, "restore_tokens_per_ms": 200, "write": "always"},
          {"name": "disk", "capacity_tokens": 16000, "bytes_per_s": 5e9, "kv_bytes_per_token": 131072,
           "evict": {"ttl_s": 300}}]}"#;
    let p = EngineProfile::from_json(text).expect("valid");
    assert_eq!(p.kv_tiers[0].write, TierWrite::Always);
    assert_eq!(p.kv_tiers[1].evict, TierEvict::Ttl { ttl_s: 300.0 });
    let back = serde_json::to_string(&p).expect("json");
    assert!(
        back.contains(r#""evict":{"ttl_s":300.0}"#) && back.contains(r#""write":"always""#),
        "{back}"
    );
    assert!(
        !back.contains("on_evict") && !back.contains("lru"),
        "defaults are not written: {back}"
    );
    assert_eq!(EngineProfile::from_json(&back).expect("round trip"), p);
    // Errors name the field.
    let bad = text.replace(r#"{"ttl_s": 300}"#, r#""fifo""#);
    let e = EngineProfile::from_json(&bad).expect_err("bad evict").to_string();
    assert!(e.contains("kv_tiers[1].evict") && e.contains("fifo"), "{e}");
    let bad = text.replace(r#"{"ttl_s": 300}"#, r#"{"ttl": 300}"#);
    let e = EngineProfile::from_json(&bad).expect_err("bad ttl").to_string();
    assert!(e.contains("kv_tiers[1].evict") && e.contains("ttl"), "{e}");
    let bad = text.replace(r#""always""#, r#""sometimes""#);
    let e = EngineProfile::from_json(&bad).expect_err("bad write").to_string();
    assert!(e.contains("kv_tiers[0].write"), "{e}");
    let bad = text.replace(r#""capacity_tokens": 16000"#, r#""capacity_tokens": 0"#);
    let e = EngineProfile::from_json(&bad).expect_err("zero capacity").to_string();
    assert!(
        e.contains("kv_tiers[1].capacity_tokens must be at least one block"),
        "{e}"
    );
}

/// A scenario link carries a profile's tiers and gives them back equal.
#[test]
fn a_link_round_trips_a_profile_with_tiers() {
    let mut p = profile(400);
    let mut disk = tier("disk", 100_000, 0.0);
    disk.restore_tokens_per_ms = None;
    disk.bytes_per_s = Some(2.5e9);
    disk.kv_bytes_per_token = Some(131_072.0);
    disk.evict = TierEvict::Ttl { ttl_s: 0.125 };
    p.kv_tiers = vec![
        KvTier {
            write: TierWrite::Always,
            ..tier("host", 2_000, 400.0)
        },
        disk,
    ];
    let sc = shared::scenario::Scenario::Engine(sessions(p, 3));
    sc.validate().expect("valid");
    let back = shared::link::decode(&shared::link::encode(&sc)).expect("decodes");
    assert_eq!(back, sc);
}

/// The A, B, A case as a trace (A again at `a2_ms`): the simulated run's cache-miss causes.
fn a_b_a_misses(p: EngineProfile, a2_ms: f64) -> shared::engine::diagnostics::CacheMisses {
    let req = |at: f64, first_id: u64| {
        serde_json::json!({"arrival_ms": at, "unique_prompt_tokens": 4000, "output_tokens": 2,
            "hash_ids": (first_id..first_id + 250).collect::<Vec<u64>>()})
    };
    let workload = serde_json::json!({"kind": "trace", "block_size": 16,
        "requests": [req(0.0, 0), req(1000.0, 1000), req(a2_ms, 0)]});
    let mut sc = sessions(p, 1);
    sc.workload = serde_json::from_value(workload).expect("a trace");
    simulate(&sc).expect("valid").diagnostics.cache_misses
}

/// Misses split by cause: what a tier dropped counts as "evicted from tier N", N the deepest tier that held it.
#[test]
fn misses_evicted_from_a_tier_name_the_tier() {
    // No tiers: A's 200 blocks past the GPU's 49 were evicted while idle; no tier entry in the JSON.
    let m = a_b_a_misses(profile(300), 3000.0);
    assert_eq!((m.evicted_think_tokens, m.missed_tokens), (3200, 3216 + 8000));
    assert!(m.evicted_from_tier_tokens.is_empty());
    // A TTL of 1 s: the tier dropped them before A came back at 3 s.
    let mut p = profile(300);
    p.kv_tiers = vec![KvTier {
        evict: TierEvict::Ttl { ttl_s: 1.0 },
        ..tier("host", 1000, 400.0)
    }];
    let m = a_b_a_misses(p, 3000.0);
    assert_eq!(
        (m.evicted_think_tokens, m.evicted_from_tier_tokens.clone()),
        (0, vec![3200])
    );
    assert_eq!(m.cached_tokens, 784);
    // Tier 0 keeps 100 blocks, tier 1 50: A restores [49, 199) and misses [199, 249), which tier 0 sent to tier 1
    // and tier 1 dropped.
    let mut p = profile(300);
    p.kv_tiers = vec![tier("host", 100, 400.0), tier("disk", 50, 100.0)];
    let m = a_b_a_misses(p, 3000.0);
    assert_eq!(m.cached_tokens, 199 * 16);
    assert_eq!(
        (m.evicted_think_tokens, m.evicted_from_tier_tokens.clone()),
        (0, vec![0, 800])
    );
    let serialized = serde_json::to_string(&m).expect("json");
    assert!(
        serialized.contains(r#""evicted_from_tier_tokens":[0,800]"#),
        "{serialized}"
    );
}
