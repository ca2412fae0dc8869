//! Fleets of replicas behind a router (`"fleet"` in an engine scenario): one replica is the single-engine model
//! to the byte, every router is deterministic, routing by session or by cached prefix keeps an agent session's
//! cache where round-robin scatters it, and bad fleet fields are refused by name.
#![cfg(not(target_arch = "wasm32"))]

use shared::engine::{EngineReport, EngineScenario, FleetSpec, Router, simulate};
use shared::scenario::Scenario;

fn engine(text: &str) -> EngineScenario {
    match Scenario::from_json(text).expect("valid scenario") {
        Scenario::Engine(e) => e,
        Scenario::Seed(_) => panic!("an engine scenario"),
    }
}

fn golden() -> EngineScenario {
    engine(include_str!("data/engine_golden_scenario.json"))
}

/// Agent sessions: 24 concurrent conversations of 6 steps that resend their whole history, on replicas whose KV
/// holds a few of them each.
fn agent_sessions() -> EngineScenario {
    engine(
        r#"{"model": "engine", "seed": 5, "counterfactuals": false,
        "workload": {"kind": "sessions", "sessions": 24, "steps": 6, "base_tokens": 4000, "gen_tokens": 300,
                     "tool_tokens": 500, "think_s": 3.0, "stagger_s": 0.25, "respawn": true, "duration_s": 240.0},
        "profile": {"name": "toy", "block_size": 16, "num_kv_blocks": 6000, "max_num_seqs": 16,
                    "max_num_batched_tokens": 4096, "step_fixed_ms": 8.0, "per_seq_ms": 0.3,
                    "per_ctx_token_ms": 0.00005, "prefill_tokens_per_ms": 12.0, "prefill_fixed_ms": 3.0},
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}}"#,
    )
}

fn poisson_shared_prefix() -> EngineScenario {
    engine(
        r#"{"model": "engine", "seed": 9,
        "workload": {"kind": "poisson", "num_requests": 300, "rate_rps": 6.0, "shared_prefix_tokens": 1024,
                     "prompt": {"dist": "uniform", "min": 100, "max": 900},
                     "output": {"dist": "uniform", "min": 20, "max": 200}},
        "profile": {"name": "toy", "block_size": 16, "num_kv_blocks": 4000, "max_num_seqs": 16,
                    "max_num_batched_tokens": 2048, "step_fixed_ms": 8.0, "per_seq_ms": 0.3,
                    "per_ctx_token_ms": 0.00005, "prefill_tokens_per_ms": 10.0, "prefill_fixed_ms": 3.0},
        "slo": {"ttft_ms": 1000.0, "tpot_ms": 30.0}}"#,
    )
}

fn closed_loop_users() -> EngineScenario {
    engine(
        r#"{"model": "engine", "seed": 3,
        "workload": {"kind": "closed_loop", "users": 12, "num_requests": 240, "think_s": 0.5,
                     "shared_prefix_tokens": 512, "prompt": {"dist": "uniform", "min": 50, "max": 2000},
                     "output": {"dist": "fixed", "tokens": 120}},
        "profile": {"name": "toy", "block_size": 16, "num_kv_blocks": 2500, "max_num_seqs": 8,
                    "max_num_batched_tokens": 2048, "step_fixed_ms": 8.0, "per_seq_ms": 0.3,
                    "per_ctx_token_ms": 0.00005, "prefill_tokens_per_ms": 10.0, "prefill_fixed_ms": 3.0},
        "slo": {"ttft_ms": 1000.0, "tpot_ms": 30.0}}"#,
    )
}

fn with_fleet(sc: &EngineScenario, replicas: u32, router: Router) -> EngineScenario {
    EngineScenario {
        fleet: Some(FleetSpec {
            replicas,
            router,
            load_cap: 1.5,
            profiles: Vec::new(),
        }),
        ..sc.clone()
    }
}

fn json(r: &EngineReport) -> String {
    serde_json::to_string(r).expect("serializes")
}

fn cached_share(r: &EngineReport) -> f64 {
    let m = &r.diagnostics.cache_misses;
    m.cached_tokens as f64 / m.prompt_tokens as f64
}

#[test]
fn one_replica_is_the_single_engine_model_byte_for_byte() {
    for sc in [golden(), agent_sessions(), poisson_shared_prefix(), closed_loop_users()] {
        let single = json(&simulate(&sc).expect("simulates"));
        for router in Router::ALL {
            let one = json(&simulate(&with_fleet(&sc, 1, router)).expect("simulates"));
            assert!(one == single, "{router:?}: one replica differs from the single engine");
        }
    }
}

#[test]
fn every_router_is_deterministic_and_reports_each_replica() {
    for sc in [agent_sessions(), poisson_shared_prefix(), golden(), closed_loop_users()] {
        for router in Router::ALL {
            let f = with_fleet(&sc, 3, router);
            let a = simulate(&f).expect("simulates");
            let b = simulate(&f).expect("simulates");
            assert_eq!(json(&a), json(&b), "{router:?} is not deterministic");
            let fleet = a.fleet.as_ref().expect("a fleet report");
            assert_eq!(fleet.router, router);
            assert_eq!(fleet.replicas.len(), 3);
            let completed: u64 = fleet.replicas.iter().map(|r| r.requests).sum();
            assert_eq!(
                completed, a.summary.completed,
                "{router:?}: per-replica requests sum to the completed"
            );
            let cached: u64 = fleet.replicas.iter().map(|r| r.cached_tokens).sum();
            assert_eq!(cached, a.diagnostics.cache_misses.cached_tokens);
            // The miss causes still sum to the missed tokens, routed-away ones included.
            let m = &a.diagnostics.cache_misses;
            let parts = m.cold_first_step_tokens
                + m.new_content_tokens
                + m.evicted_think_tokens
                + m.capacity_tokens
                + m.other_tokens
                + m.routed_to_another_replica_tokens;
            assert_eq!(parts, m.missed_tokens, "{router:?}: miss causes do not sum");
        }
    }
}

#[test]
fn session_affinity_and_prefix_aware_keep_the_cache_that_round_robin_scatters() {
    let sc = agent_sessions();
    let rr = simulate(&with_fleet(&sc, 4, Router::RoundRobin)).expect("simulates");
    let aff = simulate(&with_fleet(&sc, 4, Router::SessionAffinity)).expect("simulates");
    let pa = simulate(&with_fleet(&sc, 4, Router::PrefixAware)).expect("simulates");
    let (s_rr, s_aff, s_pa) = (cached_share(&rr), cached_share(&aff), cached_share(&pa));
    assert!(s_aff > s_rr + 0.2, "affinity {s_aff} vs round robin {s_rr}");
    assert!(s_pa > s_rr + 0.2, "prefix aware {s_pa} vs round robin {s_rr}");
    // Round robin's lost hits are named: cached on another replica.
    let away = rr.diagnostics.cache_misses.routed_to_another_replica_tokens;
    assert!(away > 0, "round robin routes sessions away from their cache");
    assert!(away > aff.diagnostics.cache_misses.routed_to_another_replica_tokens);
    // And the cache is worth TTFT.
    assert!(aff.summary.ttft_p50_ms < rr.summary.ttft_p50_ms);
}

#[test]
fn routed_away_tokens_are_absent_from_a_single_engine_report() {
    let text = json(&simulate(&golden()).expect("simulates"));
    assert!(!text.contains("routed_to_another_replica"));
    assert!(!text.contains("\"fleet\""));
}

fn error_of(fleet: &str) -> String {
    let text = include_str!("data/engine_golden_scenario.json");
    let mut v: serde_json::Value = serde_json::from_str(text).expect("json");
    v["fleet"] = serde_json::from_str(fleet).expect("json");
    Scenario::from_json(&v.to_string()).expect_err("refused").to_string()
}

#[test]
fn bad_fleet_fields_are_refused_by_name() {
    let e = error_of(r#"{"replicas": 0, "router": "round_robin"}"#);
    assert!(e.contains("fleet.replicas"), "{e}");
    let e = error_of(r#"{"replicas": 2, "router": "random"}"#);
    assert!(e.contains("fleet.router") && e.contains("random"), "{e}");
    let e = error_of(r#"{"replicas": 2, "router": "prefix_aware", "load_cap": 0.5}"#);
    assert!(e.contains("fleet.load_cap") && e.contains("0.5"), "{e}");
    let e = error_of(r#"{"replicas": 2, "router": "prefix_aware", "cap": 2}"#);
    assert!(e.contains("cap"), "{e}");
    // And a good one parses, round trips and keeps its default cap.
    let text = include_str!("data/engine_golden_scenario.json");
    let mut v: serde_json::Value = serde_json::from_str(text).expect("json");
    v["fleet"] = serde_json::json!({"replicas": 3, "router": "session_affinity"});
    let Scenario::Engine(e) = Scenario::from_json(&v.to_string()).expect("valid") else {
        panic!("engine")
    };
    assert_eq!(
        e.fleet,
        Some(FleetSpec {
            replicas: 3,
            router: Router::SessionAffinity,
            load_cap: 1.5,
            profiles: Vec::new(),
        })
    );
}

/// A trace with hash ids: 7 conversations of 6 turns, turn `k` resending its conversation's first `2 + 2k` blocks
/// of 64 tokens (block hashes shared by nothing else), interleaved in time.
fn hashed_conversations() -> EngineScenario {
    let mut requests = Vec::new();
    for k in 0..6u64 {
        for s in 0..7u64 {
            let blocks = 2 + 2 * k;
            let hash_ids: Vec<u64> = (0..blocks).map(|b| s * 1000 + b).collect();
            requests.push(serde_json::json!({
                "arrival_ms": (k * 7 + s) as f64 * 400.0,
                "unique_prompt_tokens": blocks * 64,
                "output_tokens": 32,
                "hash_ids": hash_ids,
                "session": s,
            }));
        }
    }
    let text = serde_json::json!({
        "model": "engine", "seed": 1, "counterfactuals": false,
        "workload": {"kind": "trace", "block_size": 64, "requests": requests},
        "profile": {"name": "toy", "block_size": 16, "num_kv_blocks": 4000, "max_num_seqs": 8,
                    "max_num_batched_tokens": 2048, "step_fixed_ms": 8.0, "per_seq_ms": 0.3,
                    "per_ctx_token_ms": 0.00005, "prefill_tokens_per_ms": 10.0, "prefill_fixed_ms": 3.0},
        "slo": {"ttft_ms": 1000.0, "tpot_ms": 30.0}
    });
    engine(&text.to_string())
}

#[test]
fn a_hashed_trace_keeps_its_conversations_with_prefix_aware_and_affinity_routing() {
    let sc = hashed_conversations();
    let single = json(&simulate(&sc).expect("simulates"));
    assert_eq!(
        json(&simulate(&with_fleet(&sc, 1, Router::PrefixAware)).expect("simulates")),
        single
    );
    let share = |router| cached_share(&simulate(&with_fleet(&sc, 4, router)).expect("simulates"));
    let (rr, aff, pa) = (
        share(Router::RoundRobin),
        share(Router::SessionAffinity),
        share(Router::PrefixAware),
    );
    // Round robin sends turn k of conversation s to replica (7k + s) mod 4: a different one each turn.
    assert!(
        aff > rr + 0.2 && pa > rr + 0.2,
        "affinity {aff}, prefix aware {pa}, round robin {rr}"
    );
}

/// Per-replica profiles (`fleet.profiles`): giving every replica the scenario's own profile is the default to the
/// byte; a fleet of one fast and one slow replica under `least_outstanding` sends more to the fast one (it empties
/// its queue sooner); the records name their replica and agree with the fleet report.
#[test]
fn per_replica_profiles_send_more_to_the_fast_replica() {
    let base = poisson_shared_prefix();
    let plain = with_fleet(&base, 2, Router::LeastOutstanding);
    let mut same = plain.clone();
    if let Some(f) = &mut same.fleet {
        f.profiles = vec![base.profile.clone(), base.profile.clone()];
    }
    let (a, mut b) = (
        simulate(&plain).expect("simulates"),
        simulate(&same).expect("simulates"),
    );
    // The same run; the report only names each replica's profile.
    for x in &mut b.fleet.as_mut().expect("a fleet report").replicas {
        assert_eq!(x.profile.take().as_deref(), Some("toy"));
    }
    assert!(
        json(&a) == json(&b),
        "every replica on the scenario's profile is the default"
    );

    let mut slow = base.profile.clone();
    slow.name = "slow".into();
    slow.step_fixed_ms *= 4.0;
    slow.per_seq_ms *= 4.0;
    slow.prefill_tokens_per_ms /= 4.0;
    let mut mixed = plain.clone();
    if let Some(f) = &mut mixed.fleet {
        f.profiles = vec![slow, base.profile.clone()];
    }
    let r = simulate(&mixed).expect("simulates");
    let f = r.fleet.as_ref().expect("a fleet report");
    let (to_slow, to_fast) = (f.replicas[0].requests, f.replicas[1].requests);
    assert!(
        to_fast > to_slow + to_slow / 4,
        "least_outstanding: fast replica 1 got {to_fast}, slow replica 0 got {to_slow}"
    );
    // Round robin does not look: an even split whatever the speeds.
    let mut rr = mixed.clone();
    if let Some(f) = &mut rr.fleet {
        f.router = Router::RoundRobin;
    }
    let r2 = simulate(&rr).expect("simulates");
    let f2 = r2.fleet.as_ref().expect("a fleet report");
    assert!(f2.replicas[0].requests.abs_diff(f2.replicas[1].requests) <= 1);
    // The records' replica agrees with the report.
    let split = shared::metrics::replicas::replica_split(&r.records);
    assert_eq!(split.len(), 2);
    for (s, x) in split.iter().zip(&f.replicas) {
        assert_eq!((s.replica, s.completed), (x.replica, x.requests));
    }
}

#[test]
fn bad_per_replica_profiles_are_refused_by_name() {
    let text = include_str!("data/engine_golden_scenario.json");
    let v: serde_json::Value = serde_json::from_str(text).expect("json");
    let profile = v["profile"].clone();
    let mut w = v.clone();
    w["fleet"] = serde_json::json!({"replicas": 3, "router": "least_outstanding", "profiles": [profile, profile]});
    let e = Scenario::from_json(&w.to_string()).expect_err("refused").to_string();
    assert!(
        e.contains("fleet.profiles") && e.contains("one profile per replica: 3 (got 2"),
        "{e}"
    );
    let mut bad = profile.clone();
    bad["block_size"] = serde_json::json!(32);
    w["fleet"] = serde_json::json!({"replicas": 2, "router": "least_outstanding", "profiles": [profile, bad]});
    let e = Scenario::from_json(&w.to_string()).expect_err("refused").to_string();
    assert!(
        e.contains("fleet.profiles[1].block_size") && e.contains("got 32"),
        "{e}"
    );
    let mut bad = profile.clone();
    bad["max_num_seqs"] = serde_json::json!(0);
    w["fleet"] = serde_json::json!({"replicas": 2, "router": "least_outstanding", "profiles": [bad, profile]});
    let e = Scenario::from_json(&w.to_string()).expect_err("refused").to_string();
    assert!(e.contains("fleet.profiles[0].max_num_seqs"), "{e}");
}
