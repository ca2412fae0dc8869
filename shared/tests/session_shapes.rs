//! Session shapes beyond one linear conversation (issue #44) in the engine simulator: think times from a chosen
//! distribution, checked against the records' own timing.

use shared::engine::{EngineProfile, EngineScenario, simulate};
use shared::metrics::Slo;
use shared::record::RequestRecord;
use shared::workload::{SessionWorkload, ThinkDist, Workload};

fn profile() -> EngineProfile {
    EngineProfile {
        name: "p".into(),
        basis: "test".into(),
        block_size: 16,
        num_kv_blocks: 100_000,
        max_num_seqs: 64,
        max_num_batched_tokens: 8192,
        step_fixed_ms: 5.0,
        per_seq_ms: 0.1,
        per_ctx_token_ms: 0.0001,
        prefill_tokens_per_ms: 20.0,
        prefill_fixed_ms: 1.0,
        enable_prefix_caching: true,
        max_model_len: None,
        prefill_ctx_ms_per_ktok: 0.1,
        batch_kv_ms_per_ktok: 0.0,
        prefill_batch_kv_ms_per_ktok: 0.0,
        host_cache: None,
        kv_tiers: Vec::new(),
        reply_cached_share: 1.0,
        scheduler: Default::default(),
        roofline: None,
    }
}

fn scenario(w: SessionWorkload) -> EngineScenario {
    EngineScenario {
        workload: Workload::Sessions(w),
        profile: profile(),
        slo: Slo::default(),
        seed: 11,
        counterfactuals: false,
        fleet: None,
        deployment: None,
    }
}

fn sessions() -> SessionWorkload {
    SessionWorkload {
        sessions: 3,
        steps: 5,
        base_tokens: 4000,
        gen_tokens: 64,
        tool_tokens: 200,
        spread: 0.0,
        stagger_s: 0.5,
        duration_s: 600.0,
        ..Default::default()
    }
}

fn records(w: SessionWorkload) -> Vec<RequestRecord> {
    let r = simulate(&scenario(w)).expect("valid scenario");
    assert!(r.records.iter().all(|r| r.ok), "every step completes");
    r.records
}

/// The gaps between a session's steps (next submit − previous end), in step order, per session.
fn gaps(recs: &[RequestRecord]) -> Vec<Vec<f64>> {
    let n = recs.iter().map(|r| r.session).max().map_or(0, |m| m + 1);
    (0..n)
        .map(|s| {
            let mut steps: Vec<&RequestRecord> = recs.iter().filter(|r| r.session == s).collect();
            steps.sort_by_key(|r| r.step);
            steps.windows(2).map(|w| w[1].t_submit - (w[0].t_submit + w[0].wall_s)).collect()
        })
        .collect()
}

#[test]
fn think_times_follow_the_chosen_distribution() {
    let w = SessionWorkload {
        think: Some(ThinkDist::Fixed { value_s: 2.5 }),
        ..sessions()
    };
    let recs = records(w.clone());
    for g in gaps(&recs).into_iter().flatten() {
        assert!((g - 2.5).abs() < 1e-6, "fixed gap {g}");
    }
    // The simulator waits exactly the plan's draws (the plan live replay sleeps too).
    let gaps_s = vec![0.25, 7.0, 40.0];
    let w = SessionWorkload {
        think: Some(ThinkDist::Empirical { gaps_s: gaps_s.clone() }),
        ..sessions()
    };
    let recs = records(w.clone());
    for (s, g) in gaps(&recs).into_iter().enumerate() {
        let plan = w.plan(s as u32, 0, 11);
        assert_eq!(g.len() + 1, plan.steps as usize);
        for (k, gap) in g.iter().enumerate() {
            assert!((gap - plan.think_s[k]).abs() < 1e-6, "session {s} gap {k}: {gap} vs {}", plan.think_s[k]);
            assert!(gaps_s.contains(&plan.think_s[k]));
        }
    }
    // Absent, the seed's Gaussian; `normal` with only the mean is the same run.
    let a = simulate(&scenario(sessions())).expect("default");
    let b = simulate(&scenario(SessionWorkload {
        think: Some(ThinkDist::Normal {
            mean_s: 6.0,
            sd_s: None,
        }),
        ..sessions()
    }))
    .expect("normal");
    assert_eq!(format!("{:?}", a.records), format!("{:?}", b.records));
}
