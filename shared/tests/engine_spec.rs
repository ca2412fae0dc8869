//! Speculative decoding in the engine (`"speculative"` in the profile): steps verify `k + 1` positions per decoding
//! sequence, emit `1 + accepted` tokens drawn from the seeded generator, and pay for the verified tokens and the
//! draft; records keep tokens, frames and acceptance apart; off, nothing changes. Hand-computed cases first.

use shared::deploy::roofline::{RooflineCost, StepShape};
use shared::engine::{
    Acceptance, Engine, EngineProfile, EngineScenario, PromptBlocks, SpecMethod, Speculative, StepEvent, simulate,
};
use shared::workload::{LengthDist, PoissonWorkload, Workload};

fn profile() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        ..EngineProfile::linear("p", 10_000, 8, 8192, [10.0, 1.0, 0.01, 16.0, 0.0])
    }
}

fn spec(k: u32, acceptance: Acceptance, draft_cost_ms: f64) -> Option<Box<Speculative>> {
    Some(Box::new(Speculative {
        method: SpecMethod::Mtp,
        draft_tokens: k,
        acceptance,
        draft_cost_ms,
        acceptance_by_kind: None,
        acceptance_spread: 0.0,
    }))
}

/// Runs one request of `prompt` tokens and `output` tokens alone; returns each step's (duration, tokens emitted).
fn lone(p: EngineProfile, prompt: u32, output: u32) -> Vec<(f64, u32)> {
    let mut e = Engine::new(p);
    let tokens: Vec<u32> = (0..prompt).collect();
    e.submit(0.0, PromptBlocks::from_tokens(&tokens, 16), output);
    let mut out = Vec::new();
    let mut t = 0.0;
    while let Some(s) = e.step(t) {
        let emitted = s
            .events
            .iter()
            .map(|ev| match ev {
                StepEvent::Tokens { tokens, .. } => *tokens,
                _ => 0,
            })
            .sum();
        out.push((s.duration_ms, emitted));
        t = s.start_ms + s.duration_ms;
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Acceptance 1, k = 3: a 32-token prompt, 9 output tokens. Step 1 prefills (10 + 1 + 32/16 = 13 ms) and emits the
/// first token; each decode step verifies 4 positions and emits 4 tokens, paying 3 drafted tokens at the prefill
/// rate (3/16 ms) and 3 × 0.5 ms of draft: 10 + 1 + 0.01·ctx + 0.1875 + 1.5, at contexts 32 and 36.
#[test]
fn full_acceptance_emits_k_plus_one_per_step() {
    let mut p = profile();
    p.speculative = spec(3, Acceptance::Rate(1.0), 0.5);
    let steps = lone(p, 32, 9);
    assert_eq!(steps.iter().map(|s| s.1).collect::<Vec<_>>(), vec![1, 4, 4]);
    let want = [13.0, 11.0 + 0.32 + 0.1875 + 1.5, 11.0 + 0.36 + 0.1875 + 1.5];
    for (s, w) in steps.iter().zip(want) {
        assert!(close(s.0, w), "{steps:?} vs {want:?}");
    }
}

/// llama.cpp's slot schedule drafts and verifies alike: the same lone request, the same steps.
#[test]
fn the_slot_schedule_speculates_too() {
    let mut p = profile();
    p.speculative = spec(3, Acceptance::Rate(1.0), 0.5);
    let vllm = lone(p.clone(), 32, 9);
    p.scheduler = shared::engine::profile::Scheduler::LlamaCpp;
    assert_eq!(lone(p, 32, 9), vllm);
}

/// Acceptance 0, k = 2, 3 output tokens: the first decode step drafts 1 (only 2 tokens are left, so it verifies 2
/// positions) and emits 1; the last drafts nothing (one token left) and pays no draft.
#[test]
fn no_acceptance_emits_one_and_drafts_only_what_can_be_used() {
    let mut p = profile();
    p.speculative = spec(2, Acceptance::Rate(0.0), 0.5);
    let steps = lone(p, 32, 3);
    assert_eq!(steps.iter().map(|s| s.1).collect::<Vec<_>>(), vec![1, 1, 1]);
    let want = [13.0, 11.0 + 0.32 + 1.0 / 16.0 + 0.5, 11.0 + 0.33];
    for (s, w) in steps.iter().zip(want) {
        assert!(close(s.0, w), "{steps:?} vs {want:?}");
    }
}

/// A deployment's roofline prices the verified tokens too: a decode step of one sequence at context c verifying
/// k + 1 positions is the roofline's step of k + 1 tokens attending to c + 1, …, c + k + 1, each with its logits
/// (k + 1 rows of the output head), plus the draft.
#[test]
fn the_roofline_pays_for_verified_tokens() {
    let r = RooflineCost {
        overhead_ms: 0.5,
        flops_per_ms: 1e9,
        bytes_per_ms: 1e9,
        flops_per_token: 1.6e10,
        head_flops_per_row: 2e9,
        attn_flops_per_ctx: 1e6,
        prefill_attn_flops_per_ctx: 1e6,
        weight_bytes: 1.6e10,
        expert_bytes: 0.0,
        moe_layers: 0,
        experts: 0,
        active_experts: 0,
        kv_bytes_per_token: 131072.0,
        window_bytes_per_seq: 0.0,
        comm_ms_per_token: 0.0,
        comm_fixed_ms: 0.0,
        overlap: 1.0,
        decode_attn_flops_per_ms: None,
    };
    let mut p = profile();
    p.roofline = Some(Box::new(r.clone()));
    let off = lone(p.clone(), 32, 3);
    p.speculative = spec(2, Acceptance::Rate(1.0), 0.25);
    let on = lone(p, 32, 3);
    // Off: the second step decodes one token at context 32.
    assert!(close(off[1].0, r.step_ms(&StepShape::decode(1.0, 32.0))), "{off:?}");
    // On: 2 tokens are left, so it drafts 1 and verifies 2 positions, attending to 33 and 34 tokens.
    let shape = StepShape {
        seqs: 1.0,
        tokens: 2.0,
        ctx: 32.0,
        decode_attended: 33.0 + 34.0,
        prefill_attended: 0.0,
        logit_rows: 2.0,
    };
    assert_eq!(on.iter().map(|s| s.1).collect::<Vec<_>>(), vec![1, 2]);
    assert!(
        close(on[1].0, r.step_ms(&shape) + 0.25),
        "{on:?} vs {}",
        r.step_ms(&shape) + 0.25
    );
    assert!(on[1].0 > off[1].0);
}

fn scenario(speculative: Option<Box<Speculative>>, seed: u64) -> EngineScenario {
    let mut p = profile();
    p.speculative = speculative;
    EngineScenario::new(
        Workload::Poisson(PoissonWorkload {
            rate_rps: 4.0,
            num_requests: 400,
            prompt: LengthDist::Fixed { tokens: 400 },
            output: LengthDist::Fixed { tokens: 200 },
            shared_prefix_tokens: 0,
        }),
        p,
        seed,
    )
}

/// Over many steps the accepted share and the accepted tokens per step are the profile's (rate 0.7, k = 2:
/// positions accepted in 70 % and 49 % of steps, so 1.19 tokens per step and a share of 0.595; the last steps of a
/// request draft fewer, which changes little over 200 tokens). Tokens and frames stay apart: TPOT (per token) is
/// below ITL (per frame).
#[test]
fn simulated_acceptance_matches_the_profile() {
    let r = simulate(&scenario(spec(2, Acceptance::Rate(0.7), 0.2), 1)).expect("valid");
    let s = &r.summary;
    let acc = s.spec_acceptance.expect("speculation on");
    let per_step = s.spec_accepted_per_step.expect("steps known");
    assert!((acc - 0.595).abs() < 0.01, "{acc}");
    assert!((per_step - 1.19).abs() < 0.02, "{per_step}");
    let rec = &r.records[0];
    let c = rec.spec.expect("counts");
    assert!(rec.sse_frames < rec.gen_tokens, "{rec:?}");
    // Frames: the first token, then one per decode step (the steps that drafted, and a last one with one token
    // left, which drafts nothing).
    let steps = c.steps.expect("steps");
    assert!(rec.sse_frames == 1 + steps || rec.sse_frames == 2 + steps, "{rec:?}");
    assert_eq!(rec.gen_tokens, rec.sse_frames + c.accepted_tokens);
    assert!(
        s.tpot_mean_ms < s.itl_mean_ms.expect("itl"),
        "{} {:?}",
        s.tpot_mean_ms,
        s.itl_mean_ms
    );
    // The same seed gives the same run; another seed other draws.
    let again = simulate(&scenario(spec(2, Acceptance::Rate(0.7), 0.2), 1)).expect("valid");
    assert_eq!(format!("{:?}", r.records), format!("{:?}", again.records));
    let other = simulate(&scenario(spec(2, Acceptance::Rate(0.7), 0.2), 2)).expect("valid");
    assert_ne!(other.summary.spec_acceptance, s.spec_acceptance);
}

/// Speculation shortens TPOT when drafts are accepted and cheap; at acceptance 0 with a costly draft it lengthens
/// it.
#[test]
fn speculation_moves_tpot_the_way_acceptance_says() {
    let off = simulate(&scenario(None, 3)).expect("valid").summary;
    let good = simulate(&scenario(spec(3, Acceptance::Rate(0.8), 0.1), 3))
        .expect("valid")
        .summary;
    let bad = simulate(&scenario(spec(3, Acceptance::Rate(0.0), 1.0), 3))
        .expect("valid")
        .summary;
    assert!(
        good.tpot_p50_ms < 0.7 * off.tpot_p50_ms,
        "{} vs {}",
        good.tpot_p50_ms,
        off.tpot_p50_ms
    );
    assert!(
        bad.tpot_p50_ms > off.tpot_p50_ms,
        "{} vs {}",
        bad.tpot_p50_ms,
        off.tpot_p50_ms
    );
    assert_eq!(off.spec_acceptance, None);
    assert_eq!(off.spec_accepted_per_step, None);
    let json = serde_json::to_string(&off).expect("json");
    assert!(!json.contains("spec_"), "{json}");
}

/// A per-position list is read as the share of steps accepting each position.
#[test]
fn per_position_acceptance() {
    let r = simulate(&scenario(spec(3, Acceptance::PerPosition(vec![0.9, 0.6, 0.3]), 0.0), 4)).expect("valid");
    let per_step = r.summary.spec_accepted_per_step.expect("on");
    assert!((per_step - 1.8).abs() < 0.03, "{per_step}");
}

/// Bad input names the field.
#[test]
fn bad_speculative_fields_are_named() {
    let base = serde_json::to_value(profile()).expect("json");
    let with = |s: serde_json::Value| {
        let mut v = base.clone();
        v["speculative"] = s;
        EngineProfile::from_json(&v.to_string())
            .expect_err("refused")
            .to_string()
    };
    let e = with(serde_json::json!({"method": "mtp", "draft_tokens": 0, "acceptance": 0.5}));
    assert!(e.contains("speculative.draft_tokens"), "{e}");
    let e = with(serde_json::json!({"method": "eagle", "draft_tokens": 2, "acceptance": 1.2}));
    assert!(e.contains("speculative.acceptance"), "{e}");
    let e = with(serde_json::json!({"method": "draft", "draft_tokens": 2, "acceptance": [0.8, 0.9]}));
    assert!(e.contains("speculative.acceptance[1]"), "{e}");
    let e = with(serde_json::json!({"method": "ngram", "draft_tokens": 2, "acceptance": [0.8]}));
    assert!(e.contains("speculative.acceptance"), "{e}");
    let e = with(serde_json::json!({"method": "medusa", "draft_tokens": 2, "acceptance": 0.5}));
    assert!(e.contains("speculative.method"), "{e}");
    let e = with(serde_json::json!({"method": "mtp", "draft_tokens": 2, "acceptance": 0.5, "draft_cost_ms": -1}));
    assert!(e.contains("speculative.draft_cost_ms"), "{e}");
    // A good one reads back as written.
    let mut v = base.clone();
    v["speculative"] =
        serde_json::json!({"method": "mtp", "draft_tokens": 2, "acceptance": [0.8, 0.5], "draft_cost_ms": 0.3});
    let p = EngineProfile::from_json(&v.to_string()).expect("valid");
    assert_eq!(p.speculative, spec(2, Acceptance::PerPosition(vec![0.8, 0.5]), 0.3));
    let back = serde_json::to_value(&p).expect("json");
    assert_eq!(back["speculative"], v["speculative"]);
}

/// A KV cache too small for the load preempts and recomputes under speculation too: every request still ends with
/// its exact length, and a record's frames and accepted tokens add up to its tokens.
#[test]
fn preemption_under_speculation_keeps_the_counts() {
    let mut p = profile();
    // Two 4,016-token prompts fit (8,032 of 8,160 tokens); their replies do not.
    p.num_kv_blocks = 510;
    p.speculative = spec(4, Acceptance::Rate(0.75), 0.1);
    let sc = EngineScenario::new(
        Workload::Sessions(shared::workload::SessionWorkload {
            sessions: 4,
            steps: 2,
            base_tokens: 4000,
            gen_tokens: 160,
            tool_tokens: 50,
            think_s: 0.2,
            spread: 0.0,
            respawn: false,
            duration_s: 60.0,
            stagger_s: 0.1,
            ..Default::default()
        }),
        p,
        5,
    );
    let r = simulate(&sc).expect("valid");
    assert!(r.diagnostics.kv_thrash.preemptions > 0, "{:?}", r.diagnostics.kv_thrash);
    for rec in r.records.iter().filter(|x| x.ok) {
        assert_eq!(rec.gen_tokens, rec.asked_tokens, "{rec:?}");
        let c = rec.spec.expect("counts");
        assert!(rec.sse_frames + c.accepted_tokens >= rec.gen_tokens, "{rec:?}");
    }
    assert!(r.summary.completed > 0);
}

/// `acceptance_by_kind`: a session's requests draw from their kind's acceptance (odd slots code, even slots prose,
/// as live replay fills them). With code at 1 and prose at 0 every count is computed by hand from a request's
/// tokens: after the first token (from the prefill), `L = gen − 1` tokens come `k + 1` at a time for code (⌈L/4⌉
/// steps, each drafting all it can use and accepting it) and one at a time for prose (`L` steps, drafting
/// `min(3, left − 1)`: `3L − 6` tokens for `L ≥ 3`, all rejected, the last step drafting nothing).
#[test]
fn acceptance_by_kind_follows_the_sessions_content() {
    let mut p = profile();
    let mut s = spec(3, Acceptance::Rate(0.5), 0.0).expect("on");
    s.acceptance_by_kind = Some(shared::engine::AcceptanceByKind {
        code: Some(Acceptance::Rate(1.0)),
        prose: Some(Acceptance::Rate(0.0)),
    });
    p.speculative = Some(s);
    let sc = EngineScenario::new(
        Workload::Sessions(shared::workload::SessionWorkload {
            sessions: 4,
            steps: 3,
            base_tokens: 1000,
            gen_tokens: 120,
            tool_tokens: 50,
            think_s: 0.5,
            respawn: false,
            duration_s: 60.0,
            stagger_s: 0.3,
            ..Default::default()
        }),
        p,
        8,
    );
    let r = simulate(&sc).expect("valid");
    let mut kinds = [0, 0];
    for rec in r.records.iter().filter(|x| x.ok) {
        let c = rec.spec.expect("counts");
        let l = rec.gen_tokens - 1;
        assert!(l >= 3, "{rec:?}");
        if rec.session % 2 == 1 {
            kinds[0] += 1;
            let steps = l.div_ceil(4);
            assert_eq!(c.accepted_tokens, l - steps, "{rec:?}");
            assert_eq!(c.draft_tokens, c.accepted_tokens, "{rec:?}");
            assert_eq!(rec.sse_frames, 1 + steps, "{rec:?}");
        } else {
            kinds[1] += 1;
            assert_eq!(c.accepted_tokens, 0, "{rec:?}");
            assert_eq!(c.draft_tokens, 3 * l - 6, "{rec:?}");
            assert_eq!(c.steps, Some(l - 1), "{rec:?}");
            assert_eq!(rec.sse_frames, 1 + l, "{rec:?}");
        }
    }
    assert!(kinds[0] >= 4 && kinds[1] >= 4, "{kinds:?}");
    // The summary's share: code's accepted over both kinds' drafted.
    let ok = r.records.iter().filter(|x| x.ok);
    let (acc, drafted) = ok.fold((0, 0), |(a, d), x| {
        let c = x.spec.expect("counts");
        (a + c.accepted_tokens, d + c.draft_tokens)
    });
    assert_eq!(r.summary.spec_acceptance, Some(acc as f64 / drafted as f64));
    // Without `acceptance_by_kind` both kinds draw from `acceptance`, and a kind left out does too.
    let mut one = sc.clone();
    if let Some(s) = one.profile.speculative.as_mut() {
        s.acceptance = Acceptance::Rate(0.0);
        s.acceptance_by_kind = Some(shared::engine::AcceptanceByKind {
            code: None,
            prose: Some(Acceptance::Rate(1.0)),
        });
    }
    let r = simulate(&one).expect("valid");
    for rec in r.records.iter().filter(|x| x.ok) {
        let c = rec.spec.expect("counts");
        let accepted_all = c.accepted_tokens == c.draft_tokens;
        assert_eq!(accepted_all, rec.session % 2 == 0, "{rec:?}");
    }
}

/// `acceptance_spread`: each request accepts at a rate of its own, so the requests' shares spread (rate 0.6, k = 1:
/// at τ = 0 a request of 200 tokens accepts 0.6 ± ≈ 0.04; at τ = 1.5 its class moves it to 0.17 … 0.93), the pooled
/// share is `pooled_acceptance_rate` (0.525: a request that accepts less drafts more), and TPOT spreads with it: the
/// p99 request is one that accepts little.
#[test]
fn a_spread_gives_requests_acceptance_and_tpot_of_their_own() {
    let run = |tau: f64| {
        let mut s = spec(1, Acceptance::Rate(0.6), 0.0);
        if let Some(s) = s.as_mut() {
            s.acceptance_spread = tau;
        }
        simulate(&scenario(s, 5)).expect("valid")
    };
    let shares = |r: &shared::engine::EngineReport| -> Vec<f64> {
        r.records
            .iter()
            .filter_map(|x| x.spec)
            .filter(|c| c.draft_tokens > 50)
            .map(|c| c.accepted_tokens as f64 / c.draft_tokens as f64)
            .collect()
    };
    let sd = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
    };
    let (flat, wide) = (run(0.0), run(1.5));
    let (a, b) = (shares(&flat), shares(&wide));
    assert!(a.len() > 300 && b.len() > 300, "{} {}", a.len(), b.len());
    assert!(sd(&a) < 0.06 && sd(&b) > 0.2, "{} {}", sd(&a), sd(&b));
    let mut tau = spec(1, Acceptance::Rate(0.6), 0.0).expect("spec");
    tau.acceptance_spread = 1.5;
    let pooled = wide.summary.spec_acceptance.expect("on");
    assert!(
        (pooled - tau.pooled_acceptance_rate()).abs() < 0.02,
        "{pooled} vs {}",
        tau.pooled_acceptance_rate()
    );
    assert!(
        wide.summary.tpot_p99_ms > 1.1 * flat.summary.tpot_p99_ms,
        "{} vs {}",
        wide.summary.tpot_p99_ms,
        flat.summary.tpot_p99_ms
    );
    // 0 is the field left out: the same run, bit for bit.
    let none = simulate(&scenario(spec(1, Acceptance::Rate(0.6), 0.0), 5)).expect("valid");
    assert_eq!(format!("{:?}", none.records), format!("{:?}", flat.records));
}
