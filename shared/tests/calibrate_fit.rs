//! The fit of `shared::calibrate` on records the engine model itself produced (no clock, no jitter): what it
//! recovers is limited only by the model's own approximations (batch and context reconstructed from the records).

use shared::calibrate::{FitOptions, fit};
use shared::engine::{EngineProfile, EngineScenario, SimOptions, simulate_with};
use shared::record::RequestRecord;
use shared::workload::{ClosedLoopWorkload, LengthDist, Workload};

fn truth() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        prefill_ctx_ms_per_ktok: 0.08,
        ..EngineProfile::linear("truth", 50_000, 8, 8192, [16.0, 1.5, 0.0015, 6.0, 8.0])
    }
}

/// Records of `workload` on `profile` (each with its own ITL quantiles), shifted to start at `offset` seconds.
fn simulated(profile: &EngineProfile, workload: Workload, seed: u64, offset: f64) -> Vec<RequestRecord> {
    let sc = EngineScenario::new(workload, profile.clone(), seed);
    let opts = SimOptions {
        record_itl_quantiles: true,
        keep_records: true,
    };
    let mut recs = simulate_with(&sc, opts).expect("valid").records;
    for r in &mut recs {
        r.t_submit += offset;
    }
    recs
}

/// Records of one closed-loop phase, shifted to start at `offset` seconds.
fn phase(
    profile: &EngineProfile,
    users: u32,
    n: u64,
    prompt: LengthDist,
    output: u32,
    shared: u32,
    offset: f64,
) -> Vec<RequestRecord> {
    let workload = Workload::ClosedLoop(ClosedLoopWorkload {
        users,
        num_requests: n,
        think_s: 0.0,
        prompt,
        output: LengthDist::Fixed { tokens: output },
        shared_prefix_tokens: shared,
    });
    simulated(profile, workload, u64::from(users) * 31 + u64::from(shared), offset)
}

fn probe_records() -> Vec<RequestRecord> {
    records_of(&truth(), &[1, 2, 4, 8], true)
}

/// Decode phases at these batch sizes, after the lone-prefill phases when `prefills`.
fn records_of(prof: &EngineProfile, batches: &[u32], prefills: bool) -> Vec<RequestRecord> {
    let mut all: Vec<RequestRecord> = Vec::new();
    let mut push = |mut recs: Vec<RequestRecord>| {
        let end = all.iter().map(|r| r.t_submit + r.wall_s).fold(0.0, f64::max) + 1.0;
        for r in &mut recs {
            r.t_submit += end;
        }
        all.extend(recs);
    };
    if prefills {
        // Lone prefills: cold, and warm after a 1,024-token shared prefix.
        push(phase(
            prof,
            1,
            60,
            LengthDist::Uniform { min: 32, max: 3000 },
            2,
            0,
            0.0,
        ));
        push(phase(
            prof,
            1,
            40,
            LengthDist::Uniform { min: 32, max: 600 },
            2,
            1024,
            0.0,
        ));
    }
    // Decode at several batch sizes and contexts.
    for &b in batches {
        for p in [128, 1024] {
            push(phase(
                prof,
                b,
                u64::from(b) * 4,
                LengthDist::Fixed { tokens: p },
                96,
                0,
                0.0,
            ));
        }
    }
    all
}

/// Moves the TTFT of every lone-prefill record (the probe's 2-token answers) to `ttft(seconds, prompt tokens)`.
fn reshape_lone_prefills(recs: &mut [RequestRecord], ttft: impl Fn(f64, f64) -> f64) {
    for r in recs {
        if r.gen_tokens <= 2
            && let (Some(t), Some(p)) = (r.ttft_s, r.prompt_tokens)
        {
            r.ttft_s = Some(ttft(t, p as f64));
        }
    }
}

#[test]
fn fit_recovers_the_engine_that_made_the_records() {
    let p = truth();
    let f = fit(&probe_records(), &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let c = |n: &str| f.coefficients[n].value;
    let rel = |got: f64, want: f64| (got - want) / want;
    let errors = [
        ("step_fixed_ms", rel(c("step_fixed_ms"), p.step_fixed_ms)),
        ("per_seq_ms", rel(c("per_seq_ms"), p.per_seq_ms)),
        ("per_ctx_token_ms", rel(c("per_ctx_token_ms"), p.per_ctx_token_ms)),
        (
            "prefill_tokens_per_ms",
            rel(c("prefill_tokens_per_ms"), p.prefill_tokens_per_ms),
        ),
        ("prefill_fixed_ms", rel(c("prefill_fixed_ms"), p.prefill_fixed_ms)),
        (
            "prefill_ctx_ms_per_ktok",
            rel(c("prefill_ctx_ms_per_ktok"), p.prefill_ctx_ms_per_ktok),
        ),
    ];
    eprintln!("relative errors {errors:?}\nnotes {:?}", f.notes);
    for (n, e) in errors {
        assert!(e.abs() < 0.005, "{n}: {e} ({errors:?})");
    }
    // An engine without the across-the-batch KV term gets none.
    assert_eq!(c("batch_kv_ms_per_ktok"), 0.0, "{:?}", f.notes);
    assert!(!f.coefficients["batch_kv_ms_per_ktok"].identified);
    assert!(
        f.decode.r2 > 0.99 && f.prefill.r2 > 0.999,
        "{:?} {:?}",
        f.decode,
        f.prefill
    );
    // Standard errors are finite, and the truth is within a few of them for the prefill terms (the decode terms'
    // error is the reconstruction's bias, not noise).
    for (n, co) in &f.coefficients {
        assert!(co.std_error.is_finite() && co.std_error >= 0.0, "{n}: {co:?}");
    }
    // Every record is either used or listed with a reason.
    let used: std::collections::BTreeSet<usize> = f.residuals.iter().map(|r| r.index).collect();
    for u in &f.unused {
        assert!(!used.contains(&u.index) && !u.reason.is_empty());
    }
}

#[test]
fn a_fit_never_returns_nonsense() {
    let mut recs = probe_records();
    // A server that reports no usage.
    for r in &mut recs {
        r.prompt_tokens = None;
    }
    let e = fit(&recs, &FitOptions::default()).unwrap_err().to_string();
    assert!(e.contains("decode") && e.contains("usage"), "{e}");
    // TTFTs that fall as prompts grow: a negative cost per token is refused, not written.
    let mut recs = probe_records();
    reshape_lone_prefills(&mut recs, |t, p| (t - p * 0.0004).max(0.001));
    let e = fit(&recs, &FitOptions::default()).unwrap_err().to_string();
    assert!(e.contains("prefill"), "{e}");
    // No lone prefills at all: only batches of 2 and more, whose users send together.
    let recs = records_of(&truth(), &[2, 4, 8], false);
    let e = fit(&recs, &FitOptions::default()).unwrap_err().to_string();
    assert!(e.contains("alone on the server"), "{e}");
}

/// An engine whose prefill cost per token does not grow with context (the emulated engine's presets have
/// `prefill_ctx_ms_per_ktok` 0) can fit the term below 0 by more than 2 standard errors: on a loaded CI runner
/// against the sim-server, −0.0009 ± 0.0004. That is no refusal: the term is fixed at 0, noted, and the rest fitted.
#[test]
fn a_negative_prefill_context_term_is_fixed_at_0_not_refused() {
    let mut p = truth();
    p.prefill_ctx_ms_per_ktok = 0.0;
    let mut recs = records_of(&p, &[1, 2, 4, 8], true);
    // Lone prefills a little cheaper per token the longer they are (concave, still rising with the prompt).
    reshape_lone_prefills(&mut recs, |t, n| t - 1e-8 * n.powi(2));
    let f = fit(&recs, &FitOptions::default()).unwrap_or_else(|e| panic!("refused: {e}"));
    let c = &f.coefficients["prefill_ctx_ms_per_ktok"];
    assert_eq!((c.value, c.identified), (0.0, false), "{c:?}");
    assert!(
        f.notes
            .iter()
            .any(|n| n.starts_with("prefill_ctx_ms_per_ktok: fitted -") && n.contains("fixed at 0")),
        "{:?}",
        f.notes
    );
    let rate = f.coefficients["prefill_tokens_per_ms"].value;
    assert!(
        rate > p.prefill_tokens_per_ms,
        "a concave prefill fitted linearly is faster per token: {rate}"
    );
    assert!(f.prefill.r2 > 0.95, "{:?}", f.prefill);
}

/// llama.cpp-like: every sequence of a step reads the KV of the whole batch (`batch_kv_ms_per_ktok`), so a decode
/// step grows with batch × Σcontext. The fit finds the term and the rest as before.
#[test]
fn fit_recovers_a_unified_kv_engine() {
    let p = EngineProfile {
        batch_kv_ms_per_ktok: 0.1,
        ..truth()
    };
    let recs = records_of(&p, &[1, 2, 4, 8], true);
    let f = fit(&recs, &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let c = |n: &str| f.coefficients[n].value;
    let rel = |got: f64, want: f64| (got - want) / want;
    let errors = [
        ("step_fixed_ms", rel(c("step_fixed_ms"), p.step_fixed_ms)),
        ("per_seq_ms", rel(c("per_seq_ms"), p.per_seq_ms)),
        ("per_ctx_token_ms", rel(c("per_ctx_token_ms"), p.per_ctx_token_ms)),
        (
            "batch_kv_ms_per_ktok",
            rel(c("batch_kv_ms_per_ktok"), p.batch_kv_ms_per_ktok),
        ),
        (
            "prefill_tokens_per_ms",
            rel(c("prefill_tokens_per_ms"), p.prefill_tokens_per_ms),
        ),
        ("prefill_fixed_ms", rel(c("prefill_fixed_ms"), p.prefill_fixed_ms)),
        (
            "prefill_ctx_ms_per_ktok",
            rel(c("prefill_ctx_ms_per_ktok"), p.prefill_ctx_ms_per_ktok),
        ),
    ];
    eprintln!("relative errors {errors:?}\nnotes {:?}", f.notes);
    for (n, e) in errors {
        assert!(e.abs() < 0.01, "{n}: {e} ({errors:?})");
    }
    assert!(f.coefficients["batch_kv_ms_per_ktok"].identified);
    assert_eq!(f.profile.batch_kv_ms_per_ktok, c("batch_kv_ms_per_ktok"));
    // Without the term the same records need a negative fixed cost: the old, linear fit is refused or far off,
    // which is what the real llama.cpp server showed.
    assert!(f.decode.r2 > 0.99, "{:?}", f.decode);
}

/// With two batch sizes only the term is not identified: fixed at 0, and the notes say so.
#[test]
fn two_batch_sizes_do_not_identify_the_batch_kv_term() {
    let recs = records_of(&truth(), &[1, 4], true);
    let f = fit(&recs, &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.profile.batch_kv_ms_per_ktok, 0.0);
    assert!(
        f.notes.iter().any(|n| n.contains("batch_kv_ms_per_ktok")),
        "{:?}",
        f.notes
    );
}

/// The stage checks judge the bulk: a heavy tail (what a loaded machine adds) does not refuse a fit that describes
/// every other request, while gaps that no longer follow the batch and context at all are refused.
#[test]
fn checks_judge_the_bulk_not_the_tail() {
    let p = truth();
    // One decode observation in 6 is 6 times too slow (a descheduled server thread, frames read in bunches).
    let mut recs = probe_records();
    let mut k = 0;
    for r in recs.iter_mut().filter(|r| r.gen_tokens >= 8) {
        k += 1;
        if k % 6 == 0
            && let Some(itl) = r.itl.as_mut()
        {
            itl.p50_ms *= 6.0;
        }
    }
    let f = fit(&recs, &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(f.decode.r2 < 0.5, "the tail makes the plain R² low: {:?}", f.decode);
    assert!(f.decode.r2_robust > 0.9, "{:?}", f.decode);
    let rel = (f.coefficients["step_fixed_ms"].value - p.step_fixed_ms) / p.step_fixed_ms;
    assert!(rel.abs() < 0.1, "step_fixed_ms {rel}");
    // Gaps scrambled across requests: nothing left to explain.
    let mut recs = probe_records();
    let mut gaps: Vec<f64> = recs.iter().filter_map(|r| r.itl.as_ref().map(|i| i.p50_ms)).collect();
    gaps.reverse();
    let third = gaps.len() / 3;
    gaps.rotate_left(third);
    let mut it = gaps.into_iter();
    for r in recs.iter_mut() {
        if let Some(itl) = r.itl.as_mut() {
            itl.p50_ms = it.next().unwrap_or(itl.p50_ms);
        }
    }
    let e = fit(&recs, &FitOptions::default()).unwrap_err().to_string();
    assert!(e.contains("decode"), "{e}");
}

/// Prompts longer than the step budget run as several steps (llama.cpp's `n_batch`, vLLM's chunked prefill),
/// each paying the fixed part and the decode part of the context so far. Told the budget (the profile's limits,
/// as `calibrate` passes them), the fit counts those chunks and recovers the engine, here llama-server's slot
/// scheduler with an `n_batch` of 1,024 and cold prompts up to 3,000 tokens (up to 3 chunks); not told, it
/// takes every prefill as one step and is further off.
#[test]
fn fit_counts_the_chunks_of_long_prefills() {
    let p = EngineProfile {
        max_num_batched_tokens: 1024,
        max_num_seqs: 4,
        scheduler: shared::engine::profile::Scheduler::LlamaCpp,
        ..truth()
    };
    let recs = records_of(&p, &[1, 2, 4], true);
    let errors_of = |f: &shared::calibrate::Fit| -> Vec<(&'static str, f64)> {
        let c = |n: &str| f.coefficients[n].value;
        let rel = |got: f64, want: f64| (got - want) / want;
        vec![
            (
                "prefill_tokens_per_ms",
                rel(c("prefill_tokens_per_ms"), p.prefill_tokens_per_ms),
            ),
            ("prefill_fixed_ms", rel(c("prefill_fixed_ms"), p.prefill_fixed_ms)),
            (
                "prefill_ctx_ms_per_ktok",
                rel(c("prefill_ctx_ms_per_ktok"), p.prefill_ctx_ms_per_ktok),
            ),
            ("step_fixed_ms", rel(c("step_fixed_ms"), p.step_fixed_ms)),
            ("per_ctx_token_ms", rel(c("per_ctx_token_ms"), p.per_ctx_token_ms)),
        ]
    };
    let told = fit(
        &recs,
        &FitOptions {
            limits: Some(p.clone()),
            batch_kv: Some(false),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let e_told = errors_of(&told);
    eprintln!("told the budget: {e_told:?}\nnotes {:?}", told.notes);
    for (n, e) in &e_told {
        assert!(e.abs() < 0.01, "{n}: {e} ({e_told:?})");
    }
    assert!(
        told.notes.iter().any(|n| n.contains("longer than the step budget")),
        "{:?}",
        told.notes
    );
    assert_eq!(told.profile.scheduler, shared::engine::profile::Scheduler::LlamaCpp);
    let blind = fit(
        &recs,
        &FitOptions {
            limits: None,
            batch_kv: Some(false),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let worst = |es: &[(&str, f64)]| es[..3].iter().map(|e| e.1.abs()).fold(0.0, f64::max);
    let e_blind = errors_of(&blind);
    eprintln!("not told: {e_blind:?}");
    assert!(worst(&e_blind) > 2.0 * worst(&e_told), "{e_blind:?} vs {e_told:?}");
}

/// Records of the probe's `prefill-kv` phase, made by the engine itself (one simulation, so the requests share its
/// steps): a chain of long-output requests holding `holds` tokens of context in turn, and beside it a chain of warm
/// prefills of 256 new tokens after a 512-token cached prefix, each sent a few pseudo-random milliseconds after the
/// previous one ends (so it lands at a random point of the step in progress, as a real client's requests do).
fn beside_records(prof: &EngineProfile, offset: f64) -> Vec<RequestRecord> {
    use shared::workload::{TraceRequest, TraceWorkload};
    let mut reqs = Vec::new();
    let req = |shared: u32, unique: u32, out: u32, after: Vec<u32>, delay_ms: f64| TraceRequest {
        arrival_ms: 0.0,
        shared_prefix_tokens: shared,
        unique_prompt_tokens: unique,
        output_tokens: out,
        hash_ids: Vec::new(),
        after,
        delay_ms,
        session: None,
        prefix_reset: false,
    };
    // The holders: one after another, 300 output tokens each.
    let holds = [256u32, 512, 1024, 1536, 256, 512, 1024, 1536];
    for (j, &c) in holds.iter().enumerate() {
        let after = if j == 0 { vec![] } else { vec![reqs.len() as u32 - 1] };
        reqs.push(req(c, 16, 300, after, 0.0));
    }
    // The prefills: a chain of 2-token requests for as long as the holders run (≈ 8 × 300 steps).
    let mut x: u64 = 12345;
    let first = reqs.len();
    for i in 0..400 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = 1.0 + (x >> 40) as f64 / (1u64 << 24) as f64 * 30.0;
        let after = if i == 0 { vec![] } else { vec![(first + i - 1) as u32] };
        let mut r = req(512, 256, 2, after, delay);
        if i == 0 {
            r.arrival_ms = 50.0;
        }
        reqs.push(r);
    }
    simulated(prof, Workload::Trace(Box::new(TraceWorkload::inline(reqs))), 5, offset)
}

/// A unified-KV engine whose prompt tokens also attend to the other sequences' KV (`prefill_batch_kv_ms_per_ktok`):
/// the fit's third stage recovers it from prefills beside a decoding request, and the first two stages are as
/// before. On an engine without it the same records give 0.
#[test]
fn fit_recovers_the_prefill_kv_of_a_unified_cache() {
    for scheduler in [
        shared::engine::profile::Scheduler::Vllm,
        shared::engine::profile::Scheduler::LlamaCpp,
    ] {
        let p = EngineProfile {
            prefill_batch_kv_ms_per_ktok: 0.05,
            prefill_tile_rows: 0,
            ubatch_tokens: 0,
            scheduler,
            ..truth()
        };
        let mut recs = records_of(&p, &[1, 2, 4, 8], true);
        let end = recs.iter().map(|r| r.t_submit + r.wall_s).fold(0.0, f64::max) + 1.0;
        recs.extend(beside_records(&p, end));
        let opts = FitOptions {
            limits: Some(p.clone()),
            batch_kv: Some(false),
            ..Default::default()
        };
        let f = fit(&recs, &opts).unwrap_or_else(|e| panic!("{e}"));
        let c = |n: &str| f.coefficients[n].value;
        let rel = |got: f64, want: f64| (got - want) / want;
        let e = rel(c("prefill_batch_kv_ms_per_ktok"), p.prefill_batch_kv_ms_per_ktok);
        eprintln!(
            "{scheduler:?}: prefill_batch_kv_ms_per_ktok {e:+.4} relative; stage {:?}\nnotes {:?}",
            f.prefill_kv, f.notes
        );
        assert!(e.abs() < 0.01, "{scheduler:?}: {e} ({:?})", f.notes);
        assert!(f.coefficients["prefill_batch_kv_ms_per_ktok"].identified);
        assert_eq!(
            f.profile.prefill_batch_kv_ms_per_ktok,
            c("prefill_batch_kv_ms_per_ktok")
        );
        for n in ["step_fixed_ms", "prefill_tokens_per_ms", "prefill_ctx_ms_per_ktok"] {
            let want = match n {
                "step_fixed_ms" => p.step_fixed_ms,
                "prefill_tokens_per_ms" => p.prefill_tokens_per_ms,
                _ => p.prefill_ctx_ms_per_ktok,
            };
            assert!(rel(c(n), want).abs() < 0.01, "{n}: {} vs {want}", c(n));
        }
        // The same probe on an engine without the term: fixed at 0, and the notes say why.
        let q = EngineProfile {
            prefill_batch_kv_ms_per_ktok: 0.0,
            prefill_tile_rows: 0,
            ubatch_tokens: 0,
            ..p.clone()
        };
        let mut recs = records_of(&q, &[1, 2, 4, 8], true);
        let end = recs.iter().map(|r| r.t_submit + r.wall_s).fold(0.0, f64::max) + 1.0;
        recs.extend(beside_records(&q, end));
        let f = fit(&recs, &opts).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{scheduler:?} without the term: notes {:?}", f.notes);
        assert_eq!(f.profile.prefill_batch_kv_ms_per_ktok, 0.0);
        assert!(!f.coefficients["prefill_batch_kv_ms_per_ktok"].identified);
        assert!(f.notes.iter().any(|n| n.contains("prefill_batch_kv_ms_per_ktok")));
    }
}

/// Without prefills beside other requests the term is not identified: 0, with a note naming the probe phase.
#[test]
fn no_prefills_beside_others_leave_the_prefill_kv_term_at_0() {
    let f = fit(&probe_records(), &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.profile.prefill_batch_kv_ms_per_ktok, 0.0);
    assert!(
        f.notes
            .iter()
            .any(|n| n.contains("prefill_batch_kv_ms_per_ktok") && n.contains("prefill-kv")),
        "{:?}",
        f.notes
    );
}

/// `reply_cached_share` is measured from consecutive steps of the same session (a sessions run given to the fit):
/// an engine that finds a quarter of each reply cached gives ≈ 0.25 (blocks of 16 round the cached tokens down),
/// one that finds all of it gives 1; without session steps the limits' value stays, with a note.
#[test]
fn fit_measures_the_share_of_the_reply_found_cached() {
    use shared::workload::SessionWorkload;
    for share in [0.25, 1.0] {
        let p = EngineProfile {
            reply_cached_share: share,
            ..truth()
        };
        let mut recs = probe_records();
        let end = recs.iter().map(|r| r.t_submit + r.wall_s).fold(0.0, f64::max) + 1.0;
        let sessions = Workload::Sessions(SessionWorkload {
            sessions: 4,
            steps: 5,
            base_tokens: 1500,
            gen_tokens: 128,
            tool_tokens: 200,
            think_s: 0.5,
            respawn: false,
            duration_s: 600.0,
            stagger_s: 0.5,
            ..Default::default()
        });
        let mut sess = simulated(&p, sessions, 3, end);
        for r in &mut sess {
            r.session += 1_000_000;
        }
        recs.extend(sess);
        let opts = FitOptions {
            limits: Some(truth()),
            batch_kv: Some(false),
            ..Default::default()
        };
        let f = fit(&recs, &opts).unwrap_or_else(|e| panic!("{e}"));
        let got = f.profile.reply_cached_share;
        assert!(
            (got - share).abs() < 0.1,
            "share {share}: fitted {got}; notes {:?}",
            f.notes
        );
        if share == 1.0 {
            assert_eq!(got, 1.0, "{:?}", f.notes);
        }
        assert!(
            f.notes.iter().any(|n| n.starts_with("reply_cached_share: ")),
            "{:?}",
            f.notes
        );
    }
    let f = fit(&probe_records(), &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.profile.reply_cached_share, 1.0);
    assert!(
        f.notes
            .iter()
            .any(|n| n.contains("reply_cached_share") && n.contains("left as it was")),
        "{:?}",
        f.notes
    );
}

/// Records with impossible values (a negative TTFT on every fourth one, as an edited file has) are set aside as
/// unused with the reason named, and the fit neither panics nor takes them as measurements: it recovers the same
/// engine from the rest.
#[test]
fn records_with_impossible_values_are_set_aside_not_a_panic() {
    let mut recs = probe_records();
    let mut edited = 0;
    for r in recs.iter_mut().step_by(4) {
        r.ttft_s = Some(-5.0);
        edited += 1;
    }
    let f = fit(&recs, &FitOptions::default()).expect("the rest still fits");
    let impossible = f
        .unused
        .iter()
        .filter(|u| u.reason.contains("impossible value: ttft_s is -5"))
        .count();
    assert_eq!(impossible, edited, "{:?}", f.unused);
    let rel = |a: f64, b: f64| (a / b - 1.0).abs();
    assert!(
        rel(f.profile.step_fixed_ms, truth().step_fixed_ms) < 0.1,
        "{:?}",
        f.profile
    );
    // Every TTFT negative: a clean refusal, no panic.
    for r in &mut recs {
        r.ttft_s = Some(-5.0);
    }
    assert!(fit(&recs, &FitOptions::default()).is_err());
}

/// A server that speculates, calibrated without a base profile (the probe is all it has): the decode fit takes each
/// speculative record's mean step (not its median frame gap), the verification the engine adds is taken back out
/// of the fitted terms, and the calibrated profile predicts a held-out run's TPOT and acceptance as the server
/// that made the records gives them.
#[test]
fn a_speculating_server_calibrated_without_a_base_predicts_its_own_tpot() {
    use shared::calibrate::spec::{fit_speculative, take_out_verification};
    use shared::engine::{Acceptance, SpecMethod, Speculative};
    let mut t = truth();
    t.speculative = Some(Box::new(Speculative {
        method: SpecMethod::Draft,
        draft_tokens: 4,
        acceptance: Acceptance::Rate(0.7),
        draft_cost_ms: 2.0,
        acceptance_by_kind: None,
        acceptance_spread: 0.0,
    }));
    let recs = records_of(&t, &[1, 2, 4, 8], true);
    let mut f = fit(&recs, &FitOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let sf = fit_speculative(&recs, SpecMethod::Draft, None, None).expect("counts");
    assert_eq!(sf.speculative.draft_tokens, 4);
    let note = take_out_verification(&mut f.profile, sf.drafted_per_step).expect("a linear profile");
    assert!(note.contains("per_seq_ms"), "{note}");
    f.profile.speculative = Some(Box::new(sf.speculative.clone()));
    let held_out = |p: &EngineProfile| {
        let w = Workload::ClosedLoop(ClosedLoopWorkload {
            users: 3,
            num_requests: 60,
            think_s: 0.5,
            prompt: LengthDist::Uniform { min: 200, max: 2000 },
            output: LengthDist::Fixed { tokens: 200 },
            shared_prefix_tokens: 0,
        });
        let sc = EngineScenario::new(w, p.clone(), 77);
        simulate_with(&sc, SimOptions::default()).expect("valid").summary
    };
    let (want, got) = (held_out(&t), held_out(&f.profile));
    let err = got.tpot_p50_ms / want.tpot_p50_ms - 1.0;
    eprintln!(
        "TPOT p50 {:.3} predicted vs {:.3}; acceptance {:?} vs {:?}; {note}",
        got.tpot_p50_ms, want.tpot_p50_ms, got.spec_acceptance, want.spec_acceptance
    );
    // +5.6 % here: a record's mean step still holds the steps it shared with other requests' prefills (all but the
    // longest), which a median gap would leave out; the goal against a live server is 10 %.
    assert!(err.abs() < 0.1, "TPOT p50 off by {err:+.3}");
    let (a, b) = (got.spec_acceptance.expect("on"), want.spec_acceptance.expect("on"));
    assert!((a - b).abs() < 0.05, "acceptance {a} vs {b}");
    // Left in, the verification would be paid twice: the same profile without taking it out predicts slower.
    let mut twice = fit(&recs, &FitOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .profile;
    twice.speculative = Some(Box::new(sf.speculative.clone()));
    assert!(held_out(&twice).tpot_p50_ms > got.tpot_p50_ms * 1.02);
}
