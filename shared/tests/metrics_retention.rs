//! `Summary::retention`: the cached share of session steps by the think time before them, on hand-built records
//! whose every figure is computed in the comments; and on a simulated run, where a tier with a TTL shows up as a
//! drop in the bands past it.

use shared::engine::profile::{KvTier, TierEvict};
use shared::engine::{EngineScenario, presets, simulate};
use shared::metrics::{Retention, Slo, Summarizer, summarize};
use shared::record::{RequestRecord, UsageSource};
use shared::workload::{SessionWorkload, Workload};

/// A completed step of `session`: submitted at `t`, done after `wall` s, `prompt` tokens of which `cached` hit.
fn step(session: u64, step: u32, t: f64, wall: f64, prompt: u64, cached: u64) -> RequestRecord {
    RequestRecord {
        schema: 1,
        session,
        inst: 0,
        step,
        steps_asked: 4,
        base_asked: 1000,
        ok: true,
        t_submit: t,
        ttft_s: Some(0.1),
        wall_s: wall,
        gen_tokens: 10,
        asked_tokens: 10,
        prompt_tokens: Some(prompt),
        cached_tokens: Some(cached),
        designed_cached_tokens: None,
        designed_prompt_tokens: None,
        sse_frames: 10,
        prompt_chars: 0,
        queue_s: None,
        itl: None,
        finish_reason: Some("length".to_string()),
        usage_source: UsageSource::Simulated,
        rx_clock: None,
        retries: 0,
        retry_statuses: Vec::new(),
        failure: None,
        error: None,
        prompt_block_hashes: Vec::new(),
        replica: None,
        spec: None,
        kv_transfer_ms: None,
        reasoning_tokens: None,
        ttft_content_s: None,
        parent: None,
    }
}

const SLO: Slo = Slo {
    ttft_ms: 500.0,
    tpot_ms: 50.0,
    e2e_ms: None,
};

fn band(min: f64, max: f64, steps: u64, share: Option<f64>) -> Retention {
    Retention {
        think_s_min: min,
        think_s_max: max,
        steps,
        cached_share: share,
    }
}

#[test]
fn steps_fall_in_bands_by_the_think_time_before_them() {
    let records = vec![
        // Session 1: step 0 ends at 0 + 2 = 2; step 1 sent at 2.5 (think 0.5 s), ends at 4; step 2 sent at 7
        // (think 3 s), ends at 8; step 3 sent at 4000 (think 3992 s: the open band).
        step(1, 0, 0.0, 2.0, 1000, 0),
        step(1, 1, 2.5, 1.5, 1200, 1000),
        step(1, 2, 7.0, 1.0, 1400, 700),
        step(1, 3, 4000.0, 1.0, 1600, 0),
        // Session 2: step 0 ends at 11; step 1 sent at 10.5, before it ended (think −0.5 s counts as 0), ends at
        // 12; step 2 sent at 16 (think 4 s) and failed.
        step(2, 0, 10.0, 1.0, 500, 0),
        step(2, 1, 10.5, 1.5, 600, 300),
        RequestRecord {
            ok: false,
            prompt_tokens: None,
            cached_tokens: None,
            ..step(2, 2, 16.0, 0.5, 0, 0)
        },
        // An open-loop request (its own session, step 0): no think time.
        step(9, 0, 1.0, 1.0, 100, 50),
    ];
    let s = summarize(&records, &SLO);
    assert_eq!(
        s.retention,
        vec![
            // 0.5 s and 0 s: (1000 + 300) / (1200 + 600).
            band(0.0, 1.0, 2, Some(1300.0 / 1800.0)),
            // 3 s and the failed step's 4 s: only the completed one has a share, 700 / 1400.
            band(2.0, 5.0, 2, Some(0.5)),
            // 3992 s, open band: its max is the longest think time in it.
            band(3600.0, 3992.0, 1, Some(0.0)),
        ]
    );
    // Pushed one by one, the same; a step whose previous step was not seen has no think time.
    let mut sum = Summarizer::new(SLO, 0);
    for r in records.iter().filter(|r| !(r.session == 1 && r.step == 1)) {
        sum.push(r);
    }
    let s = sum.finish();
    assert_eq!(
        s.retention,
        vec![
            band(0.0, 1.0, 1, Some(0.5)),
            band(2.0, 5.0, 1, None),
            band(3600.0, 3992.0, 1, Some(0.0))
        ]
    );
    // No session steps: no key.
    let s = summarize(&records[7..], &SLO);
    assert!(s.retention.is_empty());
    assert!(!serde_json::to_string(&s).expect("json").contains("retention"));
}

/// Sessions on a small GPU cache with think times of 2 to 60 s: a tier with a 10 s TTL keeps the cached share of
/// steps after short think times high and loses it after long ones, where an LRU tier of the same size keeps it.
#[test]
fn a_ttl_tier_shows_in_retention() {
    let mut p = presets::laptop_demo();
    p.num_kv_blocks = 600;
    let run = |evict: TierEvict| {
        let mut p = p.clone();
        p.kv_tiers = vec![KvTier {
            evict,
            ..KvTier::on_evict("host", 2_000_000, 200.0)
        }];
        let sc = EngineScenario::new(
            Workload::Sessions(SessionWorkload {
                sessions: 24,
                steps: 8,
                base_tokens: 4000,
                gen_tokens: 100,
                tool_tokens: 300,
                think_s: 20.0,
                respawn: false,
                duration_s: 600.0,
                stagger_s: 2.0,
                ..Default::default()
            }),
            p,
            5,
        );
        simulate(&sc).expect("valid").summary.retention
    };
    let share_past = |r: &[Retention], s: f64| {
        let (c, n) = r.iter().filter(|b| b.think_s_min >= s).fold((0.0, 0u64), |(c, n), b| {
            (c + b.cached_share.unwrap_or(0.0) * b.steps as f64, n + b.steps)
        });
        c / n as f64
    };
    let (lru, ttl) = (run(TierEvict::Lru), run(TierEvict::Ttl { ttl_s: 10.0 }));
    assert!(!lru.is_empty() && lru.iter().any(|b| b.think_s_min >= 30.0), "{lru:?}");
    assert!(
        share_past(&ttl, 30.0) + 0.1 < share_past(&lru, 30.0),
        "ttl {ttl:?} vs lru {lru:?}"
    );
}

#[test]
fn retention_reads_on_one_line() {
    let bands = [
        band(0.0, 1.0, 10, Some(0.699)),
        band(2.0, 5.0, 3, None),
        band(3600.0, 4000.0, 1, Some(0.0)),
    ];
    assert_eq!(
        shared::metrics::retention_text(&bands),
        "0-1 s 69.9 % (10), 2-5 s - (3), 3600+ s 0.0 % (1)"
    );
}
