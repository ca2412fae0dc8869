//! `Workload::shard` (`loadshape replay --shard I/N`): the union of the N shards' planned requests is exactly the
//! single process's plan — the same requests, arrivals and lengths for request-level workloads, the same slots and
//! per-slot session plans for sessions — with no unit in two shards (so no two shards share a content stream).

use std::collections::BTreeSet;

use shared::workload::{PlannedRequest, Shard, ShardPlan, Workload};

fn workload(json: &str) -> Workload {
    let w: Workload = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    w.validate().unwrap_or_else(|e| panic!("{json}: {e}"));
    w
}

const LENGTHS: &str = r#""prompt": {"dist": "uniform", "min": 10, "max": 900}, "output": {"dist": "uniform", "min": 2, "max": 300}, "shared_prefix_tokens": 128"#;

fn request_workloads() -> Vec<Workload> {
    vec![
        workload(r#"{"kind": "bursty", "num_requests": 211, "seed": 42, "mean_rps": 8.5}"#),
        workload(&format!(
            r#"{{"kind": "poisson", "num_requests": 307, "rate_rps": 40.0, {LENGTHS}}}"#
        )),
        workload(&format!(
            r#"{{"kind": "gamma", "num_requests": 150, "rate_rps": 3.0, "cv": 2.5, {LENGTHS}}}"#
        )),
        workload(&format!(
            r#"{{"kind": "closed_loop", "users": 7, "num_requests": 101, "think_s": 0.5, {LENGTHS}}}"#
        )),
        workload(
            r#"{"kind": "trace", "requests": [
                {"arrival_ms": 0, "unique_prompt_tokens": 10, "output_tokens": 3},
                {"arrival_ms": 5, "shared_prefix_tokens": 64, "unique_prompt_tokens": 11, "output_tokens": 4},
                {"arrival_ms": 9, "unique_prompt_tokens": 12, "output_tokens": 5},
                {"arrival_ms": 30, "unique_prompt_tokens": 13, "output_tokens": 6}]}"#,
        ),
    ]
}

/// Request-level workloads: for every shard count up to the plan's units, the shards' (index, request) pairs are
/// disjoint, each shard's are in plan order, and their union sorted by index is the single plan itself (compared
/// with `==` on every field, arrival times bit for bit).
#[test]
fn union_of_request_shards_is_the_single_plan() {
    for seed in [1u64, 7, 1 << 40] {
        for w in request_workloads() {
            let single: Vec<(u64, PlannedRequest)> = (0u64..).zip(w.requests(seed)).collect();
            let whole = w.shard(seed, Shard::WHOLE).unwrap_or_else(|e| panic!("{e}"));
            let (_, units) = w.shard_units();
            for count in [1u32, 2, 3, 4, 5, 8] {
                if u64::from(count) > units {
                    assert!(w.shard(seed, Shard::new(0, count).unwrap()).is_err(), "{}", w.kind());
                    continue;
                }
                let mut union = Vec::new();
                let mut users = 0;
                for index in 0..count {
                    let plan = w.shard(seed, Shard::new(index, count).unwrap()).unwrap();
                    let reqs = match plan {
                        ShardPlan::Open(r) => r,
                        ShardPlan::Closed { users: u, requests } => {
                            assert!(u >= 1, "every closed-loop shard has a user");
                            users += u;
                            requests
                        }
                        ShardPlan::Sessions { .. } => panic!("{} planned as sessions", w.kind()),
                    };
                    assert!(!reqs.is_empty(), "{} shard {index}/{count} is empty", w.kind());
                    assert!(reqs.windows(2).all(|p| p[0].0 < p[1].0), "plan order");
                    union.extend(reqs);
                }
                let indices: BTreeSet<u64> = union.iter().map(|r| r.0).collect();
                assert_eq!(indices.len(), union.len(), "{}: a request in two shards", w.kind());
                union.sort_by_key(|r| r.0);
                assert_eq!(union, single, "{} seed {seed} in {count} shards", w.kind());
                if let Workload::ClosedLoop(c) = &w {
                    assert_eq!(users, c.users, "the users are split, not copied");
                }
            }
            match whole {
                ShardPlan::Open(r) | ShardPlan::Closed { requests: r, .. } => assert_eq!(r, single),
                ShardPlan::Sessions { .. } => panic!(),
            }
        }
    }
}

/// Closed loop: request `i` goes with user `i mod users`, so each shard's share of the requests follows its share
/// of the users.
#[test]
fn closed_loop_requests_follow_their_users() {
    let w = workload(&format!(
        r#"{{"kind": "closed_loop", "users": 5, "num_requests": 100, {LENGTHS}}}"#
    ));
    let sizes: Vec<(u32, usize)> = (0..2)
        .map(|i| match w.shard(3, Shard::new(i, 2).unwrap()).unwrap() {
            ShardPlan::Closed { users, requests } => (users, requests.len()),
            p => panic!("{p:?}"),
        })
        .collect();
    assert_eq!(sizes, vec![(3, 60), (2, 40)]);
}

/// Sessions: the shards' slots partition `0..slots` (round robin), drawn and ladder sessions alike; the runner plans
/// each slot's instances by the slot's global number, as the single process does (`shard_cli.rs` checks the records).
#[test]
fn session_shards_partition_the_slots_with_the_single_plans() {
    let drawn = workload(
        r#"{"kind": "sessions", "sessions": 13, "steps": 6, "base_tokens": 3000, "gen_tokens": 200,
        "tool_tokens": 300, "think_s": 2.0, "dist": "lognormal", "spread": 0.5, "respawn": true,
        "stagger_s": 1.0, "duration_s": 120.0}"#,
    );
    let ladder = workload(
        r#"{"kind": "sessions", "sessions": 1, "steps": 1, "duration_s": 60.0,
        "ladder": "1000:3,5000:2,9000:4,20000:1"}"#,
    );
    for w in [drawn, ladder] {
        let Workload::Sessions(s) = &w else { panic!() };
        let slots = s.slot_count();
        for count in 1..=slots {
            let mut seen = Vec::new();
            for index in 0..count {
                let ShardPlan::Sessions { slots: mine } = w.shard(9, Shard::new(index, count).unwrap()).unwrap() else {
                    panic!()
                };
                assert!(!mine.is_empty());
                assert!(mine.iter().all(|&slot| slot % count == index));
                seen.extend(mine);
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..slots).collect::<Vec<_>>(), "{count} shards");
        }
        assert!(w.shard(9, Shard::new(0, slots + 1).unwrap()).is_err());
    }
}
