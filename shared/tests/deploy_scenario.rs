//! Deployments in scenarios: `"deployment"` instead of `"profile"` (never both), written back as given, through a
//! link and back; the roofline's closed-form decode stretches equal one step at a time, also where the bound
//! switches from memory to compute within a stretch.

use proptest::prelude::*;
use shared::deploy::roofline::RooflineCost;
use shared::engine::{Engine, EngineProfile, EngineScenario, PromptBlocks, SimOptions, StepEvent, simulate_with};
use shared::scenario::Scenario;
use shared::workload::{TraceRequest, TraceWorkload, Workload};

const WORKLOAD: &str = r#""workload": {"kind": "poisson", "num_requests": 40, "rate_rps": 4,
    "prompt": {"dist": "fixed", "tokens": 2000}, "output": {"dist": "fixed", "tokens": 100}}"#;

fn scenario(body: &str) -> Result<Scenario, String> {
    Scenario::from_json(&format!(r#"{{"model": "engine", {WORKLOAD}, {body}}}"#)).map_err(|e| e.to_string())
}

#[test]
fn a_deployment_resolves_and_round_trips() {
    let sc =
        scenario(r#""deployment": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_num_seqs": 64}"#).expect("valid");
    let Scenario::Engine(e) = &sc else { panic!("engine") };
    assert!(e.profile.roofline.is_some());
    assert_eq!(e.profile.max_num_seqs, 64);
    assert_eq!(e.profile.num_kv_blocks, 28_089);
    // Written back as the deployment, not the profile it resolved to.
    let v = sc.to_value();
    assert!(
        v.get("profile").is_none() && v["deployment"]["model"] == "llama-3.1-8b",
        "{v}"
    );
    assert_eq!(Scenario::from_value(v).expect("reads back"), sc);
    // Through a link and back.
    let link = shared::link::encode(&sc);
    assert_eq!(shared::link::decode(&link).expect("decodes"), sc);
    // A profile changed after resolving is written as the profile.
    let Scenario::Engine(mut changed) = sc.clone() else {
        unreachable!()
    };
    changed.profile.max_num_seqs = 32;
    let v = Scenario::Engine(changed.clone()).to_value();
    assert!(
        v.get("deployment").is_none() && v["profile"]["max_num_seqs"] == 32,
        "{v}"
    );
    let back = Scenario::from_value(v).expect("reads back");
    let Scenario::Engine(back) = back else { unreachable!() };
    assert_eq!((back.profile, back.deployment), (changed.profile, None));
}

#[test]
fn profile_and_deployment_exclude_each_other() {
    let profile = serde_json::to_string(&shared::engine::presets::llama3_8b_h100()).expect("json");
    let e = scenario(&format!(
        r#""deployment": {{"model": "llama-3.1-8b", "gpu": "h100-sxm"}}, "profile": {profile}"#
    ))
    .unwrap_err();
    assert!(e.contains("give either `profile` or `deployment`, not both"), "{e}");
    let e = scenario(r#""seed": 1"#).unwrap_err();
    assert!(e.contains("missing field `profile` (or `deployment`)"), "{e}");
    let e = scenario(r#""deployment": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tp": 3}"#).unwrap_err();
    assert!(
        e.contains("deployment.tp 3 does not divide the model's 32 attention heads"),
        "{e}"
    );
    let e = scenario(r#""deployment": {"model": "llama-3.1-8b", "gpu": "h100-sxm", "speed": 3}"#).unwrap_err();
    assert!(
        e.contains("deployment.speed") || e.contains("unknown field `speed`"),
        "{e}"
    );
    let e = scenario(r#""deployment": {"model": "qwen3-32b", "gpu": "l40s"}"#).unwrap_err();
    assert!(
        e.contains("qwen3-32b does not fit on l40s at tp 1") && e.contains("short by"),
        "{e}"
    );
}

/// A roofline whose decode turns compute-bound as contexts grow: attention FLOPs per context token cost more than
/// the KV bytes, so stretches must end where the bound switches.
fn switching_profile(flops_per_token: f64, attn: f64, kv_bytes: f64, seqs: u32) -> EngineProfile {
    let r = RooflineCost {
        overhead_ms: 0.5,
        flops_per_ms: 1e9,
        bytes_per_ms: 1e9,
        flops_per_token,
        head_flops_per_row: 0.0,
        attn_flops_per_ctx: attn,
        prefill_attn_flops_per_ctx: attn,
        weight_bytes: 4e9,
        expert_bytes: 1e6,
        moe_layers: 4,
        experts: 16,
        active_experts: 2,
        kv_bytes_per_token: kv_bytes,
        window_bytes_per_seq: 100.0,
        comm_ms_per_token: 0.001,
        comm_fixed_ms: 0.1,
        overlap: 1.0,
        decode_attn_flops_per_ms: None,
    };
    let linear = EngineProfile::linear("roofline", 20_000, seqs, 4096, [r.min_step_ms(), 0.0, 0.0, 100.0, 0.0]);
    EngineProfile {
        basis: "test".into(),
        roofline: Some(Box::new(r)),
        ..linear
    }
}

/// Finish times (ms) of `reqs` (prompt, output) all sent at 0: with the step API one step at a time, and with
/// `simulate` (closed-form stretches).
fn finish_times(p: &EngineProfile, reqs: &[(u32, u32)]) -> (Vec<f64>, Vec<f64>, u64) {
    let mut e = Engine::new(p.clone());
    for (i, &(prompt, out)) in reqs.iter().enumerate() {
        let tokens: Vec<u32> = (i as u32 * 100_000..i as u32 * 100_000 + prompt).collect();
        e.submit(0.0, PromptBlocks::from_tokens(&tokens, 16), out);
    }
    let (mut t, mut ends, mut steps) = (0.0, Vec::new(), 0u64);
    while let Some(s) = e.step(t) {
        t = s.start_ms + s.duration_ms;
        steps += 1;
        for ev in &s.events {
            if let StepEvent::Finished { .. } = ev {
                ends.push(t);
            }
        }
    }
    let sc = EngineScenario::new(
        Workload::Trace(Box::new(TraceWorkload::inline(
            reqs.iter()
                .map(|&(prompt, out)| TraceRequest {
                    arrival_ms: 0.0,
                    shared_prefix_tokens: 0,
                    unique_prompt_tokens: prompt,
                    output_tokens: out,
                    hash_ids: Vec::new(),
                    after: Vec::new(),
                    delay_ms: 0.0,
                    session: None,
                    prefix_reset: false,
                })
                .collect(),
        ))),
        p.clone(),
        1,
    );
    let opts = SimOptions {
        record_itl_quantiles: false,
        keep_records: true,
    };
    let mut sim: Vec<f64> = simulate_with(&sc, opts)
        .expect("valid")
        .records
        .iter()
        .map(|r| r.wall_s * 1000.0)
        .collect();
    ends.sort_by(f64::total_cmp);
    sim.sort_by(f64::total_cmp);
    (ends, sim, steps)
}

#[test]
fn roofline_stretches_agree_with_single_steps_across_a_bound_switch() {
    // Per context token memory 50 bytes / 1e9 and compute 40,000 FLOPs / 1e9: at batch 8 compute (3.68 ms of
    // weights' FLOPs) overtakes memory (4.04 ms, weights and experts) once contexts are long enough: ≈ 800 steps
    // into the first stretch of 1,499.
    let p = switching_profile(4.6e8, 40_000.0, 50.0, 16);
    let r = p.roofline.as_ref().expect("roofline");
    let (b0, held) = r.decode_stretch(8.0, 8.0 * 100.0);
    assert_eq!(b0, 8.0 * 50.0 / 1e9, "memory-bound at short contexts");
    assert!(held < 20_000, "and the bound switches within reach ({held} steps)");
    let reqs: Vec<(u32, u32)> = (0..8).map(|i| (100 + 37 * i, 1500 + 400 * i)).collect();
    let (ends, sim, steps) = finish_times(&p, &reqs);
    assert_eq!(ends.len(), reqs.len());
    assert!(steps > 1000);
    for (a, b) in ends.iter().zip(&sim) {
        assert!((a - b).abs() < 1e-6 * a, "step API {ends:?} vs simulate {sim:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Closed-form stretches equal one step at a time for rooflines on either side of the bound, and ones that
    /// switch within a stretch, whether compute and memory overlap fully (a GPU) or partly (a CPU).
    #[test]
    fn roofline_stretches_equal_single_steps(
        fpt in 1e8f64..1e9,
        attn in 0.0f64..50_000.0,
        kv in 0.0f64..50_000.0,
        seqs in 1u32..12,
        reqs in proptest::collection::vec((1u32..3000, 1u32..600), 1..12),
        overlap in prop_oneof![Just(1.0f64), 0.0f64..1.0],
    ) {
        let mut p = switching_profile(fpt, attn, kv, seqs);
        if let Some(r) = p.roofline.as_mut() {
            r.overlap = overlap;
        }
        let (ends, sim, _) = finish_times(&p, &reqs);
        prop_assert_eq!(ends.len(), sim.len());
        for (a, b) in ends.iter().zip(&sim) {
            prop_assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "step API {:?} vs simulate {:?}", ends, sim);
        }
    }
}
