//! A deployment whose efficiencies come from a calibration reproduces that calibration's profile within 2 %
//! (`shared::deploy::transfer`): the step costs of the roofline with the fitted efficiencies match the calibrated
//! profile's over the shapes that matter (`transfer::grid`: decode at batch 1..=64 and 512..32,768 tokens of
//! context each, cold prefills of 256..8,192 tokens, within the profile's limits).
//!
//! The calibrated profiles are synthetic: one resolved from a known deployment with known efficiencies (the roofline
//! can express it exactly: the efficiencies are recovered within 2 %), and linear profiles the roofline cannot
//! express exactly (llama.cpp's batch-wide KV read; a prefill that adds the weights' read to the compute), whose
//! error is reported as it is.

use shared::deploy::transfer::{self, Identified, ShapeKind};
use shared::deploy::{Deployment, Efficiency};
use shared::engine::EngineProfile;
use shared::engine::presets::llama3_8b_h100;

fn with_efficiency(model: &str, gpu: &str, tp: u32, mfu: f64, bw: f64, overhead: f64) -> Deployment {
    let mut d = Deployment::named(model, gpu, tp);
    d.efficiency = Efficiency {
        mfu: Some(mfu),
        bandwidth_utilization: Some(bw),
        step_overhead_ms: Some(overhead),
        ..Efficiency::default()
    };
    d
}

fn calibrated(d: &Deployment) -> EngineProfile {
    d.resolve().unwrap_or_else(|e| panic!("{e}")).profile
}

fn within(a: f64, b: f64, tol: f64) -> bool {
    (a / b - 1.0).abs() <= tol
}

#[test]
fn a_deployment_whose_efficiencies_come_from_a_calibration_reproduces_it_within_2_percent() {
    for (model, gpu, tp, mfu, bw, overhead) in [
        ("llama-3.1-8b", "h100-sxm", 1, 0.42, 0.71, 2.3),
        ("qwen3-30b-a3b", "h200", 1, 0.35, 0.62, 0.8),
        ("llama-3.1-70b", "h100-sxm", 4, 0.55, 0.85, 1.5),
    ] {
        let truth = with_efficiency(model, gpu, tp, mfu, bw, overhead);
        let profile = calibrated(&truth);
        // The calibration was told the model and GPU; the efficiencies start from the defaults.
        let t = transfer::transfer(&profile, &Deployment::named(model, gpu, tp), Identified::ALL)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let e = &t.deployment.efficiency;
        let case = format!("{model} on {gpu} x{tp}: {e:?}, notes {:?}", t.notes);
        assert!(within(e.mfu.unwrap_or(0.0), mfu, 0.02), "{case}");
        assert!(within(e.bandwidth_utilization.unwrap_or(0.0), bw, 0.02), "{case}");
        assert!(within(e.step_overhead_ms.unwrap_or(0.0), overhead, 0.02), "{case}");
        assert!(t.max_error <= 0.02, "{case}: max error {}", t.max_error);
        assert!(t.notes.is_empty(), "{case}");
        // Both kinds of step are among the shapes, and every factor says where it comes from.
        assert!(t.shapes.iter().any(|s| s.shape.kind == ShapeKind::Decode));
        assert!(t.shapes.iter().any(|s| s.shape.kind == ShapeKind::Prefill));
        assert!(t.shapes.len() >= 24, "{case}: {} shapes", t.shapes.len());
        for f in ["mfu", "bandwidth_utilization", "step_overhead_ms"] {
            assert!(t.factors[f].identified, "{case}: {f}");
        }
        let link = &t.factors["link_utilization"];
        assert!(
            !link.identified && link.why.contains(if tp == 1 { "tp 1" } else { "one TP degree" }),
            "{link:?}"
        );
        // The written deployment resolves, and its roofline gives what the report says.
        let again = calibrated(&t.deployment);
        let r = again.roofline.as_ref().unwrap_or_else(|| panic!("roofline"));
        for s in &t.shapes {
            assert_eq!(r.step_ms(&s.shape.step()), s.roofline_ms);
            assert!(
                within(s.roofline_ms, transfer::calibrated_ms(&profile, &s.shape), 0.02),
                "{case}: {s:?}"
            );
        }
    }
}

#[test]
fn a_profile_the_roofline_cannot_express_is_reported_with_its_error() {
    // llama.cpp-like: each sequence pays for the batch's KV (quadratic in the batch), which no roofline term does.
    let mut p = llama3_8b_h100();
    p.batch_kv_ms_per_ktok = 0.02;
    let t = transfer::transfer(&p, &Deployment::named("llama-3.1-8b", "h100-sxm", 1), Identified::ALL)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(t.max_error > 0.02, "max error {}", t.max_error);
    let worst = t.shapes.iter().map(|s| s.error.abs()).fold(0.0, f64::max);
    assert_eq!(worst, t.max_error);
    let rms = (t.shapes.iter().map(|s| s.error * s.error).sum::<f64>() / t.shapes.len() as f64).sqrt();
    assert!((rms - t.rms_error).abs() < 1e-12);
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("cannot express the calibrated profile exactly")),
        "{:?}",
        t.notes
    );
    // Every error is the resolved deployment's roofline against the profile, as stated.
    for s in &t.shapes {
        let want = s.roofline_ms / transfer::calibrated_ms(&p, &s.shape) - 1.0;
        assert!((s.error - want).abs() < 1e-12);
    }

    // The preset's plain linear profile: a cost per sequence (no roofline term grows with the batch at fixed
    // Σcontext while memory-bound) and a prefill linear in its tokens (the roofline's attention grows as n²): the
    // fit is the best the roofline does, and the error says how far that is.
    let p = llama3_8b_h100();
    let t = transfer::transfer(&p, &Deployment::named("llama-3.1-8b", "h100-sxm", 1), Identified::ALL)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(t.max_error > 0.02 && t.max_error.is_finite(), "{}", t.max_error);
    assert!(t.rms_error < t.max_error);
    let e = t.deployment.efficiency;
    assert!(e.mfu.is_some_and(|v| v > 0.0 && v <= 1.0), "{e:?}");
    assert!(e.bandwidth_utilization.is_some_and(|v| v > 0.0 && v <= 1.0), "{e:?}");
}

#[test]
fn a_factor_the_data_did_not_identify_keeps_its_value_and_says_why() {
    let truth = with_efficiency("llama-3.1-8b", "h100-sxm", 1, 0.42, 0.71, 2.3);
    let profile = calibrated(&truth);
    let mut given = Deployment::named("llama-3.1-8b", "h100-sxm", 1);
    given.efficiency.mfu = Some(0.6);
    let known = Identified {
        prefill_rate: false,
        ..Identified::ALL
    };
    let t = transfer::transfer(&profile, &given, known).unwrap_or_else(|e| panic!("{e}"));
    let mfu = &t.factors["mfu"];
    assert_eq!(mfu.value, 0.6);
    assert!(
        !mfu.identified && mfu.why.contains("the deployment's own value"),
        "{mfu:?}"
    );
    // Decode (memory-bound) steps still match: bandwidth and overhead were identified.
    assert!(within(
        t.deployment.efficiency.bandwidth_utilization.unwrap_or(0.0),
        0.71,
        0.02
    ));
    for s in t
        .shapes
        .iter()
        .filter(|s| s.shape.kind == ShapeKind::Decode && s.shape.seqs <= 16)
    {
        assert!(s.error.abs() <= 0.02, "{s:?}");
    }
}

#[test]
fn a_gpu_slower_than_the_measured_server_is_held_at_full_efficiency_with_a_note() {
    // Measured on an H200 (4.8 TB/s), told it was an A100 (2 TB/s): the data ask for bandwidth above 1.
    let truth = with_efficiency("llama-3.1-8b", "h200", 1, 0.5, 0.8, 1.0);
    let profile = calibrated(&truth);
    let t = transfer::transfer(
        &profile,
        &Deployment::named("llama-3.1-8b", "a100-80gb", 1),
        Identified::ALL,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.deployment.efficiency.bandwidth_utilization, Some(1.0));
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("bandwidth_utilization") && n.contains("held at 1.000")),
        "{:?}",
        t.notes
    );
    assert!(
        t.factors["bandwidth_utilization"].why.contains("held at the edge"),
        "{:?}",
        t.factors
    );
    assert!(t.max_error > 0.02);
}

#[test]
fn on_server_prices_steps_by_the_deployment_and_keeps_the_servers_scheduling_and_cache() {
    use shared::engine::profile::Scheduler;
    let other = calibrated(&with_efficiency("qwen3-8b", "h100-sxm", 1, 0.4, 0.7, 2.0));
    // A llama.cpp server: slots and a context set in tokens, a host cache, replies re-tokenized.
    let mut server = llama3_8b_h100();
    server.scheduler = Scheduler::LlamaCpp;
    server.max_num_seqs = 4;
    server.num_kv_blocks = 2048;
    server.reply_cached_share = 0.2;
    server.batch_kv_ms_per_ktok = 0.05;
    let p = transfer::on_server(&server, &other);
    // Steps: the deployment's, every linear term too (the server's batch-wide KV term was its model's).
    for (batch, ctx) in [(1.0, 512.0), (4.0, 6000.0)] {
        assert_eq!(p.decode_step_ms(batch, ctx), other.decode_step_ms(batch, ctx));
        assert_ne!(p.decode_step_ms(batch, ctx), server.decode_step_ms(batch, ctx));
    }
    assert_eq!(p.batch_kv_ms_per_ktok, 0.0);
    assert_eq!(p.prefill_tokens_per_ms, other.prefill_tokens_per_ms);
    // The server's: scheduling, limits, the cache's size in tokens and what it keeps.
    assert_eq!(p.scheduler, Scheduler::LlamaCpp);
    assert_eq!((p.max_num_seqs, p.num_kv_blocks), (4, 2048));
    assert_eq!(p.reply_cached_share, 0.2);
    p.validate().unwrap_or_else(|e| panic!("{e}"));
    // A vLLM-like server sizes its KV cache from the memory the other model's weights leave.
    let vllm = transfer::on_server(&llama3_8b_h100(), &other);
    assert_eq!(vllm.num_kv_blocks, other.num_kv_blocks);
    assert_ne!(vllm.num_kv_blocks, llama3_8b_h100().num_kv_blocks);
}

#[test]
fn a_server_whose_compute_and_memory_add_up_gets_its_overlap_fitted() {
    // A CPU-like server: every step takes compute plus memory (overlap 0), which max(compute, memory) cannot
    // express (the decode step grows with the batch beside the weights' read).
    let mut truth = with_efficiency("llama-3.1-8b", "h100-sxm", 1, 0.42, 0.71, 2.3);
    truth.efficiency.overlap = Some(0.0);
    let profile = calibrated(&truth);
    let given = Deployment::named("llama-3.1-8b", "h100-sxm", 1);
    let t = transfer::transfer(&profile, &given, Identified::ALL).unwrap_or_else(|e| panic!("{e}"));
    let e = &t.deployment.efficiency;
    let case = format!("{e:?}, notes {:?}", t.notes);
    assert_eq!(e.overlap, Some(0.0), "{case}");
    assert!(within(e.mfu.unwrap_or(0.0), 0.42, 0.02), "{case}");
    assert!(within(e.bandwidth_utilization.unwrap_or(0.0), 0.71, 0.02), "{case}");
    assert!(within(e.step_overhead_ms.unwrap_or(0.0), 2.3, 0.02), "{case}");
    assert!(t.max_error <= 0.02, "{case}: max error {}", t.max_error);
    let f = &t.factors["overlap"];
    assert!(f.identified && f.value == 0.0 && f.why.starts_with("fitted"), "{f:?}");
    // At full overlap (a GPU's roofline) the same data miss by far more: that is what asked for the fit.
    let mut gpu = t.deployment.clone();
    gpu.efficiency.overlap = None;
    let r = calibrated(&gpu).roofline.unwrap_or_else(|| panic!("roofline"));
    let worst = t
        .shapes
        .iter()
        .map(|s| (r.step_ms(&s.shape.step()) / s.calibrated_ms - 1.0).abs())
        .fold(0.0, f64::max);
    assert!(worst > 0.1, "full overlap misses by {worst}");

    // A GPU's calibration (overlap 1) keeps overlap out of the written deployment, and says why.
    let gpu_truth = with_efficiency("llama-3.1-8b", "h100-sxm", 1, 0.42, 0.71, 2.3);
    let t = transfer::transfer(&calibrated(&gpu_truth), &given, Identified::ALL).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.deployment.efficiency.overlap, None);
    let f = &t.factors["overlap"];
    assert!(f.value == 1.0 && f.why.contains("within 2 %"), "{f:?}");
    // Without the prefill rate, compute cannot be told from memory: the overlap is not identified.
    let known = Identified {
        prefill_rate: false,
        ..Identified::ALL
    };
    let t = transfer::transfer(&profile, &given, known).unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.factors["overlap"].identified, "{:?}", t.factors["overlap"]);
    assert_eq!(t.deployment.efficiency.overlap, None);
}

#[test]
fn decode_attention_slower_than_the_matrix_work_gets_a_rate_of_its_own() {
    // A CPU-like server whose decoders' attention runs at a tenth of its matmul rate, compute and memory adding
    // up: the decode step grows with context faster than the KV read allows, which only that attention at its own
    // rate expresses.
    let mut truth = with_efficiency("llama-3.1-8b", "h100-sxm", 1, 0.5, 0.8, 1.0);
    truth.efficiency.overlap = Some(0.0);
    truth.efficiency.decode_attention_mfu = Some(0.05);
    let profile = calibrated(&truth);
    let given = Deployment::named("llama-3.1-8b", "h100-sxm", 1);
    let t = transfer::transfer(&profile, &given, Identified::ALL).unwrap_or_else(|e| panic!("{e}"));
    let e = &t.deployment.efficiency;
    let case = format!("{e:?}, notes {:?}", t.notes);
    assert!(within(e.decode_attention_mfu.unwrap_or(0.0), 0.05, 0.02), "{case}");
    assert!(within(e.mfu.unwrap_or(0.0), 0.5, 0.02), "{case}");
    assert!(within(e.bandwidth_utilization.unwrap_or(0.0), 0.8, 0.02), "{case}");
    assert_eq!(e.overlap, Some(0.0), "{case}");
    assert!(t.max_error <= 0.02, "{case}: max error {}", t.max_error);
    let f = &t.factors["decode_attention_mfu"];
    assert!(f.identified && f.why.starts_with("fitted"), "{f:?}");
    // A GPU's calibration leaves attention at the matrix work's rate, out of the written deployment.
    let gpu = with_efficiency("llama-3.1-8b", "h100-sxm", 1, 0.42, 0.71, 2.3);
    let t = transfer::transfer(&calibrated(&gpu), &given, Identified::ALL).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.deployment.efficiency.decode_attention_mfu, None);
    assert!(!t.factors["decode_attention_mfu"].identified);
}
