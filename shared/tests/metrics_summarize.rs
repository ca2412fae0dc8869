//! `shared::metrics` on small hand-built record sets whose every figure is computed by hand in the comments.

use shared::metrics::{
    Slo, StepAttainment, failures, nearest_rank_index, never_sent_text, percentile_sorted, summarize, timeline,
};
use shared::record::{ItlSummary, RequestRecord, UsageSource};

/// A completed request: submitted at `t`, first token after `ttft` s, done after `wall` s, `gen` tokens.
fn rec(session: u64, step: u32, t: f64, ttft: f64, wall: f64, gen_tokens: u64) -> RequestRecord {
    RequestRecord {
        schema: 1,
        session,
        inst: 0,
        step,
        steps_asked: 2,
        base_asked: 1000,
        ok: true,
        t_submit: t,
        ttft_s: Some(ttft),
        wall_s: wall,
        gen_tokens,
        asked_tokens: gen_tokens,
        prompt_tokens: None,
        cached_tokens: None,
        designed_cached_tokens: None,
        designed_prompt_tokens: None,
        sse_frames: gen_tokens,
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

fn failed(session: u64, step: u32, t: f64, wall: f64) -> RequestRecord {
    RequestRecord {
        ok: false,
        ttft_s: None,
        gen_tokens: 0,
        error: Some("reset".to_string()),
        prompt_block_hashes: Vec::new(),
        replica: None,
        reasoning_tokens: None,
        ttft_content_s: None,
        parent: None,
        ..rec(session, step, t, 0.0, wall, 0)
    }
}

const SLO: Slo = Slo {
    ttft_ms: 500.0,
    tpot_ms: 50.0,
    e2e_ms: None,
};

#[test]
fn nearest_rank_is_the_seeds_definition() {
    // ceil(q·n) − 1, clamped.
    assert_eq!(nearest_rank_index(1, 0.99), 0);
    assert_eq!(nearest_rank_index(4, 0.5), 1);
    assert_eq!(nearest_rank_index(5, 0.5), 2);
    assert_eq!(nearest_rank_index(80, 0.99), 79);
    assert_eq!(nearest_rank_index(100, 0.99), 98);
    assert_eq!(nearest_rank_index(10, 0.0), 0);
    let v = [1.0, 2.0, 3.0, 4.0];
    assert_eq!(percentile_sorted(&v, 0.5), 2.0);
    assert_eq!(percentile_sorted(&v, 0.9), 4.0);
    assert_eq!(percentile_sorted(&[], 0.5), 0.0);
}

#[test]
fn latency_throughput_and_goodput_by_hand() {
    // Session 0: step 0 at t=0: TTFT 0.1 s, E2E 1.1 s, 11 tokens → TPOT (1.1−0.1)/10 = 100 ms (misses TPOT 50).
    //            step 1 at t=2: TTFT 0.2 s, E2E 0.7 s, 11 tokens → TPOT 50 ms (meets: <=).
    // Session 1: step 0 at t=1: TTFT 0.6 s (misses TTFT), E2E 1.0, 5 tokens → TPOT 100 ms.
    //            step 1 at t=3: TTFT 0.3 s, E2E 0.3 s, 1 token → no TPOT sample; counts as 0 for goodput → meets.
    // Session 2: step 0 at t=0.5: failed after 0.5 s.
    let records = vec![
        rec(0, 0, 0.0, 0.1, 1.1, 11),
        rec(0, 1, 2.0, 0.2, 0.7, 11),
        rec(1, 0, 1.0, 0.6, 1.0, 5),
        rec(1, 1, 3.0, 0.3, 0.3, 1),
        failed(2, 0, 0.5, 0.5),
    ];
    let s = summarize(&records, &SLO);
    assert_eq!((s.completed, s.failed), (4, 1));
    // Duration: first submit 0 → last completion max(1.1, 2.7, 2.0, 3.3, 1.0) = 3.3 s.
    assert!((s.duration_s - 3.3).abs() < 1e-12);
    assert_eq!(s.total_output_tokens, 28);
    assert!((s.request_throughput_rps - 4.0 / 3.3).abs() < 1e-12);
    assert!((s.output_throughput_tok_s - 28.0 / 3.3).abs() < 1e-12);
    // TTFT samples (ms) sorted: 100, 200, 300, 600 → mean 300, p50 index 1 = 200, p90/p95/p99 index 3 = 600.
    assert!((s.ttft_mean_ms - 300.0).abs() < 1e-9);
    assert!((s.ttft_p50_ms - 200.0).abs() < 1e-9);
    assert!((s.ttft_p90_ms - 600.0).abs() < 1e-9);
    assert!((s.ttft_p99_ms - 600.0).abs() < 1e-9);
    // TPOT samples: 100, 50, 100 (the 1-token request has none) → sorted 50, 100, 100; mean 250/3; p50 index 1.
    assert!((s.tpot_mean_ms - 250.0 / 3.0).abs() < 1e-9);
    assert!((s.tpot_p50_ms - 100.0).abs() < 1e-9);
    // E2E: 300, 700, 1000, 1100 → p50 = 700, p99 = 1100.
    assert!((s.e2el_p50_ms - 700.0).abs() < 1e-9);
    assert!((s.e2el_p99_ms - 1100.0).abs() < 1e-9);
    assert_eq!(s.queue_p50_ms, None);
    assert_eq!(s.itl_mean_ms, None);
    // Good requests: (0,1) and (1,1) → goodput 2 / 3.3; attainment 2 of 5 records.
    assert!((s.goodput_rps - 2.0 / 3.3).abs() < 1e-12);
    assert!((s.slo_attainment_ratio - 0.4).abs() < 1e-12);
    // Sessions: 0 (step 0 missed), 1 (step 0 missed), 2 (failed) → none good.
    assert_eq!(s.sessions, 3);
    assert_eq!(s.session_goodput_sps, 0.0);
    assert_eq!(s.session_attainment_ratio, 0.0);
    assert_eq!(
        s.attainment_by_step,
        vec![
            StepAttainment {
                step: 0,
                requests: 3,
                met: 0,
                ratio: 0.0
            },
            StepAttainment {
                step: 1,
                requests: 2,
                met: 2,
                ratio: 1.0
            },
        ]
    );
}

#[test]
fn a_session_is_good_only_if_every_step_is() {
    // Session 0: both steps meet the SLOs. Session 1: step 1 misses TTFT. Session 0 inst 1 (respawn): good.
    let mut respawn = rec(0, 0, 5.0, 0.1, 0.2, 3);
    respawn.inst = 1;
    // TPOT (0.5 − 0.1) / 10 = 40 ms; the respawn's (0.2 − 0.1) / 2 = 50 ms (meets: <=).
    let records = vec![
        rec(0, 0, 0.0, 0.1, 0.5, 11),
        rec(0, 1, 1.0, 0.1, 0.5, 11),
        rec(1, 0, 0.0, 0.1, 0.5, 11),
        rec(1, 1, 1.0, 0.9, 1.0, 11),
        respawn,
    ];
    let s = summarize(&records, &SLO);
    // Duration 0 → 5.2 s. Good sessions: (0,0) and (0,1) → 2 of 3.
    assert_eq!(s.sessions, 3);
    assert!((s.session_attainment_ratio - 2.0 / 3.0).abs() < 1e-12);
    assert!((s.session_goodput_sps - 2.0 / 5.2).abs() < 1e-12);
    // An E2E target of 400 ms fails every 500 ms request: only the respawned one (200 ms) stays good.
    let strict = Slo {
        e2e_ms: Some(400.0),
        ..SLO
    };
    let s = summarize(&records, &strict);
    assert!((s.session_attainment_ratio - 1.0 / 3.0).abs() < 1e-12);
    assert!((s.slo_attainment_ratio - 0.2).abs() < 1e-12);
}

#[test]
fn cached_shares_designed_achieved_and_step0() {
    let mut a = rec(0, 0, 0.0, 0.1, 0.5, 5);
    (a.prompt_tokens, a.cached_tokens, a.designed_cached_tokens) = (Some(1000), Some(0), Some(0));
    let mut b = rec(0, 1, 1.0, 0.1, 0.5, 5);
    (b.prompt_tokens, b.cached_tokens, b.designed_cached_tokens) = (Some(2000), Some(1500), Some(1900));
    let mut c = rec(1, 0, 0.0, 0.1, 0.5, 5);
    (c.prompt_tokens, c.cached_tokens, c.designed_cached_tokens) = (Some(1000), Some(512), None);
    // No usage detail: ignored by the shares.
    let d = rec(1, 1, 1.0, 0.1, 0.5, 5);
    let s = summarize(&[a, b, c, d], &SLO);
    // Achieved: (0 + 1500 + 512) / (1000 + 2000 + 1000) = 2012 / 4000.
    assert_eq!(s.cached_share_achieved, Some(2012.0 / 4000.0));
    // Designed: (0 + 1900) / (1000 + 2000).
    assert_eq!(s.cached_share_designed, Some(1900.0 / 3000.0));
    // Step 0: (0 + 512) / (1000 + 1000).
    assert_eq!(s.step0_cached_share, Some(512.0 / 2000.0));
    assert_eq!(s.total_input_tokens, 4000);
}

#[test]
fn queue_and_itl() {
    let mut a = rec(0, 0, 0.0, 0.1, 0.5, 11);
    a.queue_s = Some(0.02);
    a.itl = Some(ItlSummary {
        mean_ms: 40.0,
        p50_ms: 40.0,
        p99_ms: 45.0,
        max_ms: 50.0,
    });
    let mut b = rec(1, 0, 0.0, 0.1, 0.5, 31);
    b.queue_s = Some(0.0);
    b.itl = Some(ItlSummary {
        mean_ms: 10.0,
        p50_ms: 10.0,
        p99_ms: 12.0,
        max_ms: 15.0,
    });
    let s = summarize(&[a, b], &SLO);
    // Queue samples 0, 20 ms → mean 10, p50 index 0 = 0, p99 = 20.
    assert_eq!(s.queue_mean_ms, Some(10.0));
    assert_eq!(s.queue_p50_ms, Some(0.0));
    assert_eq!(s.queue_p99_ms, Some(20.0));
    // ITL: 10 gaps at 40 ms and 30 gaps at 10 ms → mean (400 + 300) / 40 = 17.5; weighted p50 (20 of 40) = 10,
    // p90 (36 of 40: cumulative 30 at 10 ms, 40 at 40 ms) = 40.
    assert_eq!(s.itl_mean_ms, Some(17.5));
    assert_eq!(s.itl_p50_ms, Some(10.0));
    assert_eq!(s.itl_p90_ms, Some(40.0));
}

#[test]
fn empty_input_is_all_zero() {
    let s = summarize(&[], &SLO);
    assert_eq!((s.completed, s.failed, s.sessions), (0, 0, 0));
    assert_eq!(s.duration_s, 0.0);
    assert!(timeline(&[], 1.0).is_empty());
}

#[test]
fn timeline_time_averages_by_hand() {
    // A: submit 0.0, queued 0.5 s, running 0.5 → 2.5 (wall 2.5). B: submit 1.0, no queue, running 1.0 → 1.5.
    let mut a = rec(0, 0, 0.0, 0.6, 2.5, 10);
    a.queue_s = Some(0.5);
    let b = rec(1, 0, 1.0, 0.1, 0.5, 4);
    let bins = timeline(&[a, b], 1.0);
    // Span 0 → 2.5: bins [0,1), [1,2), [2,3).
    assert_eq!(bins.len(), 3);
    assert_eq!(bins.iter().map(|b| b.t_s).collect::<Vec<_>>(), vec![0.0, 1.0, 2.0]);
    // Queued: A for 0.5 of bin 0.
    assert_eq!(bins.iter().map(|b| b.queued).collect::<Vec<_>>(), vec![0.5, 0.0, 0.0]);
    // Running: bin 0: A 0.5; bin 1: A 1.0 + B 0.5; bin 2: A 0.5.
    assert_eq!(bins.iter().map(|b| b.running).collect::<Vec<_>>(), vec![0.5, 1.5, 0.5]);
    assert_eq!(bins.iter().map(|b| b.submitted).collect::<Vec<_>>(), vec![1, 1, 0]);
    assert_eq!(bins.iter().map(|b| b.completed).collect::<Vec<_>>(), vec![0, 1, 1]);
    assert_eq!(bins.iter().map(|b| b.output_tokens).collect::<Vec<_>>(), vec![0, 4, 10]);
}

#[test]
fn timeline_long_interval_and_bin_cap() {
    // One request running 0 → 10 s with 1 s bins: 1.0 in every bin of the span.
    let a = rec(0, 0, 0.0, 0.1, 10.0, 10);
    let bins = timeline(std::slice::from_ref(&a), 1.0);
    assert_eq!(bins.len(), 11);
    for b in &bins[..10] {
        assert!((b.running - 1.0).abs() < 1e-12, "{b:?}");
    }
    assert_eq!(bins[10].running, 0.0);
    assert!(timeline(std::slice::from_ref(&a), 0.0).is_empty());
    assert!(timeline(std::slice::from_ref(&a), f64::NAN).is_empty());
    assert!(timeline(&[a], 1e-9).len() <= shared::metrics::MAX_TIMELINE_BINS);
}

/// Attainment by step counts every step a record names, small or absurd (a live record can say anything), in
/// step order, and lists no step that no record has.
#[test]
fn attainment_by_step_any_step_number() {
    // (step, met): a request meets the SLO with TTFT 0.1 s and TPOT 10 ms, misses it with TTFT 0.9 s.
    let good = |step| rec(0, step, 0.0, 0.1, 1.09, 100);
    let bad = |step| rec(1, step, 0.0, 0.9, 1.89, 100);
    let records = vec![
        good(u32::MAX),
        bad(7),
        good(4095),
        good(4096),
        bad(u32::MAX),
        good(7),
        good(0),
        bad(100_000),
    ];
    let s = summarize(&records, &SLO);
    let got: Vec<(u32, u64, u64)> = s
        .attainment_by_step
        .iter()
        .map(|a| (a.step, a.requests, a.met))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 1, 1),
            (7, 2, 1),
            (4095, 1, 1),
            (4096, 1, 1),
            (100_000, 1, 0),
            (u32::MAX, 2, 1)
        ]
    );
}

/// Cut or failed is read from the record's typed `failure`; a record written before the field existed is cut when
/// its error text says `cut:`. The checks count by that, and tally the clocks and the usage/length checks.
#[test]
fn checks_classify_by_the_typed_failure_and_read_old_records_by_their_text() {
    use shared::metrics::{Checks, RecordOutcome, outcome_of};
    use shared::record::{FailureKind, FrameClock};
    let done = RequestRecord {
        prompt_tokens: Some(100),
        ..rec(0, 0, 0.0, 0.1, 1.0, 8)
    };
    let typed_cut = RequestRecord {
        failure: Some(FailureKind::Cut),
        error: Some("cut: the run stopped before this request finished".to_string()),
        ..failed(1, 0, 0.0, 1.0)
    };
    let old_cut = RequestRecord {
        error: Some("cut: the run stopped before this request finished".to_string()),
        ..failed(2, 0, 0.0, 1.0)
    };
    // The kind decides, not the text: a timeout whose message happens to start with "cut:" is not a cut.
    let typed_timeout = RequestRecord {
        failure: Some(FailureKind::Timeout),
        error: Some("cut: off by the server".to_string()),
        ..failed(3, 0, 0.0, 1.0)
    };
    let old_failure = failed(4, 0, 0.0, 1.0);
    assert_eq!(outcome_of(&done), RecordOutcome::Completed);
    assert_eq!(outcome_of(&typed_cut), RecordOutcome::Cut);
    assert_eq!(outcome_of(&old_cut), RecordOutcome::Cut);
    assert_eq!(outcome_of(&typed_timeout), RecordOutcome::Failed);
    assert_eq!(outcome_of(&old_failure), RecordOutcome::Failed);

    let short_missing = RequestRecord {
        gen_tokens: 5,
        usage_source: UsageSource::Missing,
        rx_clock: Some(FrameClock::User),
        ..rec(5, 0, 0.0, 0.1, 1.0, 8)
    };
    let kernel = RequestRecord {
        rx_clock: Some(FrameClock::Kernel),
        cached_tokens: Some(0),
        ..done.clone()
    };
    let c = Checks::of(&[
        done,
        typed_cut,
        old_cut,
        typed_timeout,
        old_failure,
        short_missing,
        kernel,
    ]);
    assert_eq!((c.cut, c.usage_missing, c.short_outputs, c.step0_records), (2, 1, 1, 1));
    // Of the completed records only `short_missing` lacks its prompt tokens (failed ones are not counted).
    assert_eq!(c.prompt_usage_missing, 1);
    assert_eq!((c.rx_clock_kernel, c.rx_clock_user, c.rx_clock()), (1, 1, "mixed"));
}

/// Session 0 (4 steps) fails at step 1: steps 2 and 3 were never sent. Session 1 (4 steps) completes step 0 and is
/// cut at step 1 by the run's end: cut, not failed, and nothing counted as never sent. Session 2 fails at its last
/// step: nothing after it was planned.
#[test]
fn failures_count_failed_cut_and_never_sent_steps() {
    let four = |r: RequestRecord| RequestRecord { steps_asked: 4, ..r };
    let mut refused = four(failed(0, 1, 2.0, 0.01));
    refused.failure = Some(shared::record::FailureKind::HttpStatus);
    refused.error = Some("HTTP 400: prompt too long".into());
    let mut cut = four(failed(1, 1, 3.0, 0.5));
    cut.failure = Some(shared::record::FailureKind::Cut);
    cut.error = Some("cut: stopped".into());
    let records = vec![
        four(rec(0, 0, 0.0, 0.1, 1.0, 10)),
        four(rec(1, 0, 0.5, 0.1, 1.0, 10)),
        refused,
        cut,
        rec(2, 0, 0.0, 0.1, 1.0, 10),
        failed(2, 1, 4.0, 0.1),
    ];
    let f = failures(&records);
    assert_eq!((f.failed, f.cut, f.never_sent, f.planned), (2, 1, 2, 8));
    assert_eq!(f.first_error.as_deref(), Some("HTTP 400: prompt too long"));
    assert_eq!(
        never_sent_text(&f).as_deref(),
        Some("2 of 8 planned requests never sent (the session ended on an error)")
    );
    // A run with no failure has nothing to explain.
    let ok = failures(&records[..2]);
    assert_eq!(never_sent_text(&ok), None);
    assert_eq!((ok.failed, ok.never_sent, ok.planned, ok.first_error), (0, 0, 2, None));
}
