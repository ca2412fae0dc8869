//! The roofline's arithmetic against hand-computed cases (one dense, one MoE, one MLA model) and the errors of bad
//! deployments.

use super::roofline::{Bound, StepShape};
use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-30)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        assert!(close(a, b), "{} = {a}, want {b}", stringify!($a));
    }};
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn resolve(d: &Deployment) -> Resolved {
    d.resolve().unwrap_or_else(|e| panic!("{e}"))
}

fn error(d: &Deployment) -> String {
    d.resolve().expect_err("must fail").to_string()
}

#[test]
fn every_catalog_entry_resolves_to_a_valid_profile() {
    for m in catalog::MODELS {
        let config: serde_json::Map<String, Value> = serde_json::from_str(m.config).expect(m.name);
        ModelSpec::from_config(&config).expect(m.name);
        assert!(m.source.starts_with("https://huggingface.co/"), "{}", m.name);
    }
    for g in catalog::gpus() {
        assert!(g.source.contains("https://"), "{}", g.name);
        // Memory is the total the driver reports, a whole number of MiB, cited in the source.
        let mib = g.hbm_bytes / 1_048_576.0;
        assert_eq!(mib, mib.round(), "{}: {} bytes", g.name, g.hbm_bytes);
        let cited = format!("{},{:03} MiB", mib as u64 / 1000, mib as u64 % 1000);
        let cited_bytes = format!("{} B", thousands(g.hbm_bytes as u64));
        assert!(
            g.source.contains(&cited) || g.source.contains(&cited_bytes),
            "{}: {cited} or {cited_bytes} in {}",
            g.name,
            g.source
        );
        let r = resolve(&Deployment::named("llama-3.1-8b", &g.name, 1));
        r.profile.validate().expect("valid profile");
    }
}

/// Llama-3.1-8B, bf16, one H100 SXM, default efficiencies (MFU 0.5, bandwidth 0.8, overhead 1 ms).
#[test]
fn dense_llama_8b_on_h100() {
    let r = resolve(&Deployment::named("llama-3.1-8b", "h100-sxm", 1));
    let d = &r.derived;
    // Per layer: attention 4096·4096·2 + 4096·1024·2 = 41,943,040; SwiGLU 3·4096·14336 = 176,160,768.
    // 32 layers = 6,979,321,856; head 128,256·4096 = 525,336,576; untied embedding as much again.
    let (body, head) = (6_979_321_856.0, 525_336_576.0);
    let dense = body + head;
    let total = dense + head;
    assert_eq!(d.total_params, total);
    assert_eq!(d.active_params, dense);
    assert_eq!(d.weight_bytes_per_gpu, 2.0 * total);
    // KV: 32 layers · 2 (K, V) · 8 heads · 128 · 2 bytes = 128 KiB a token.
    assert_eq!(d.kv_bytes_per_token, 131_072.0);
    // 85,520,809,984 (81,559 MiB) · 0.9 − 16,059,990,016 − 2e9 = 58,908,738,969.6 bytes; / (16 · 131,072) =
    // 28,089.9 blocks.
    assert_eq!(d.kv_blocks, 28_089);
    assert_eq!(d.kv_tokens, 28_089 * 16);
    assert_eq!(r.profile.num_kv_blocks, 28_089);
    // The model's 131,072 positions fit in the 411,520 tokens of KV.
    assert_eq!(r.profile.max_model_len, Some(131_072));
    let rf = &d.roofline;
    assert_close!(rf.bytes_per_ms, 3.35e12 * 0.8 / 1e3);
    assert_close!(rf.flops_per_ms, 989.5e12 * 0.5 / 1e3);
    // Every new token runs the body; the head runs only where the step computes logits.
    assert_close!(rf.flops_per_token, 2.0 * body);
    assert_close!(rf.head_flops_per_row, 2.0 * head);
    // Attention: 4 · 32 heads · 128 per layer per context token, 32 layers.
    assert_close!(rf.attn_flops_per_ctx, 524_288.0);
    // Decode, batch 1 at 4,096 tokens: memory (2·dense + 131,072·4,096) / 2.68e9 = 5.80082 ms; compute
    // (2·dense + 524,288·4,097) / 4.9475e11 = 0.03468 ms; step 1 + 5.80082.
    let s = &d.samples[0];
    assert_eq!((s.kind, s.seqs, s.context), ("decode", 1, 4096));
    assert_close!(s.cost.memory_ms, (2.0 * dense + 131_072.0 * 4096.0) / 2.68e9);
    assert_close!(s.cost.compute_ms, (2.0 * dense + 524_288.0 * 4097.0) / 4.9475e11);
    assert_close!(s.cost.step_ms, 1.0 + s.cost.memory_ms);
    assert_eq!(s.cost.bound, Bound::Memory);
    assert!((s.cost.step_ms - 6.8008).abs() < 1e-3, "{}", s.cost.step_ms);
    // Cold prefill of 2,048, logits for its last token only: compute (2·body·2,048 + 2·head +
    // 524,288·2,048·2,047/2) / 4.9475e11 = (28,587,302,322,176 + 1,050,673,152 + 1,098,974,756,864) / 4.9475e11
    // = 60.0047 ms (64.35 with the head on every token).
    let p = &d.samples[3];
    assert_eq!((p.kind, p.tokens), ("prefill", 2048));
    assert_close!(
        p.cost.compute_ms,
        (2.0 * body * 2048.0 + 2.0 * head + 524_288.0 * 2048.0 * 2047.0 / 2.0) / 4.9475e11
    );
    assert_eq!(p.cost.bound, Bound::Compute);
    assert!((p.cost.step_ms - 61.0047).abs() < 1e-3, "{}", p.cost.step_ms);
    // One GPU: no all-reduce.
    assert_eq!((rf.comm_ms_per_token, rf.comm_fixed_ms), (0.0, 0.0));
    // The profile's floor undercuts no step.
    assert_close!(r.profile.step_fixed_ms, 1.0 + 2.0 * dense / 2.68e9);
}

/// Qwen3-30B-A3B (128 experts, 8 active), bf16, one H100 SXM.
#[test]
fn moe_qwen3_30b_a3b_on_h100() {
    let r = resolve(&Deployment::named("qwen3-30b-a3b", "h100-sxm", 1));
    let d = &r.derived;
    // Per layer: attention 2048·4096·2 + 2048·512·2 = 18,874,368; router 2048·128 = 262,144; an expert
    // 3·2048·768 = 4,718,592. Dense: 48·(18,874,368 + 262,144) + head 151,936·2048 (311,164,928).
    let dense = 1_229_717_504.0;
    let expert = 4_718_592.0;
    assert_eq!(d.total_params, dense + 48.0 * 128.0 * expert + 311_164_928.0);
    assert_eq!(d.total_params, 30_531_911_680.0);
    assert_eq!(d.active_params, 3_041_656_832.0);
    let rf = &d.roofline;
    assert_close!(rf.flops_per_token, 2.0 * (3_041_656_832.0 - 311_164_928.0));
    assert_close!(rf.head_flops_per_row, 2.0 * 311_164_928.0);
    // KV: 48 · 2 · 4 · 128 · 2 = 98,304 bytes a token.
    assert_eq!(d.kv_bytes_per_token, 98_304.0);
    assert_eq!((rf.moe_layers, rf.experts, rf.active_experts), (48, 128, 8));
    assert_close!(rf.weight_bytes, 2.0 * dense);
    assert_close!(rf.expert_bytes, 2.0 * expert);
    // Batch 8 at 4,096 each: 8 tokens touch 128·(1 − (120/128)^8) = 51.6199 experts a layer.
    let touched = 51.619_907_349_348_07;
    let s = &d.samples[1];
    assert_eq!(s.seqs, 8);
    let memory = (2.0 * dense + 2.0 * expert * 48.0 * touched + 98_304.0 * 8.0 * 4096.0) / 2.68e9;
    assert_close!(s.cost.memory_ms, memory);
    assert_close!(
        s.cost.compute_ms,
        (8.0 * 2.0 * 3_041_656_832.0 + 48.0 * 4.0 * 32.0 * 128.0 * (8.0 * 4097.0)) / 4.9475e11
    );
    assert_eq!(s.cost.bound, Bound::Memory);
    assert_close!(s.cost.step_ms, 1.0 + memory);
    // Batch 1 reads 8 experts a layer, batch 64 nearly all 128: the expert reads grow with the batch.
    assert_close!(rf.experts_touched(1.0), 8.0);
    // 128·(1 − (15/16)^64) = 125.9.
    assert!(
        (rf.experts_touched(64.0) - 125.94).abs() < 0.01,
        "{}",
        rf.experts_touched(64.0)
    );
}

/// DeepSeek-V3 (MLA, 256 experts + 1 shared, 3 dense layers), fp8 weights, eight H200s.
#[test]
fn mla_deepseek_v3_on_8xh200() {
    let r = resolve(&Deployment::named("deepseek-v3", "h200", 8));
    let d = &r.derived;
    assert_eq!(d.attention, "mla");
    assert_eq!(d.weight_dtype, Dtype::Fp8, "the published fp8 checkpoint");
    assert_eq!(d.compute_dtype, Dtype::Fp8);
    // Attention per layer: q_a 7168·1536 + q_b 1536·128·192 + kv_a 7168·576 + kv_b 512·128·256 + o 128·128·7168
    // = 187,105,280. Total 671,025,397,760 parameters, 36,624,596,992 active.
    assert_eq!(d.total_params, 671_025_397_760.0);
    assert_eq!(d.active_params, 36_624_596_992.0);
    assert_close!(d.weight_bytes_per_gpu, 671_025_397_760.0 / 8.0);
    // KV: the latent (512) and the rope key (64) per layer, bf16, whole on every rank: 61·576·2 = 70,272.
    assert_eq!(d.kv_bytes_per_token, 70_272.0);
    let rf = &d.roofline;
    // The head, 129,280·7,168 = 926,679,040, split over the 8 ranks and out of the per-token FLOPs.
    assert_close!(rf.head_flops_per_row, 2.0 * 926_679_040.0 / 8.0);
    assert_close!(rf.flops_per_token, 2.0 * 35_697_917_952.0 / 8.0);
    // Decode attends in the latent space: 2·128·(2·512 + 64) per layer; prefill per head 2·128·(128 + 64 + 128).
    assert_close!(rf.attn_flops_per_ctx, 61.0 * 2.0 * 128.0 * 1088.0 / 8.0);
    assert_close!(rf.prefill_attn_flops_per_ctx, 61.0 * 2.0 * 128.0 * 320.0 / 8.0);
    assert_close!(rf.flops_per_ms, 1979e12 * 0.5 / 1e3);
    assert_close!(rf.bytes_per_ms, 4.8e12 * 0.8 / 1e3);
    // TP all-reduce: 2·61 per step of 7168 bf16 values a token, ring share 2·7/8, over 450 GB/s × 0.5.
    assert_close!(
        rf.comm_ms_per_token,
        122.0 * 7168.0 * 2.0 * 2.0 * 7.0 / 8.0 / 225e9 * 1e3
    );
    assert_close!(rf.comm_fixed_ms, 122.0 * 10.0 / 1e3);
    // KV capacity: 150,754,820,096 (143,771 MiB) · 0.9 − 83,878,174,720 − 2e9 = 49,801,163,366.4 bytes
    // / (16 · 70,272) = 44,293.2 blocks.
    assert_eq!(d.kv_blocks, 44_293);
    // The context term per decoded token: memory 70,272 / 3.84e9 ms vs compute 2,123,776 / 9.895e11 ms: MLA's
    // reads are light enough that long contexts turn decoding compute-bound.
    let (b, held) = rf.decode_stretch(64.0, 64.0 * 4096.0);
    let s = StepShape::decode(64.0, 64.0 * 4096.0);
    let bound_is_compute = rf.compute_ms(&s) > rf.memory_ms(&s);
    assert_eq!(bound_is_compute, b == 64.0 * rf.attn_flops_per_ctx / rf.flops_per_ms);
    assert!(held >= 1);
}

#[test]
fn bad_deployments_are_named() {
    let mut d = Deployment::named("llama-3.1-9b", "h100-sxm", 1);
    let e = error(&d);
    assert!(
        e.starts_with("model names no known model (got \"llama-3.1-9b\"; known: llama-3.1-8b,"),
        "{e}"
    );
    d.model = Value::from("llama-3.1-8b");
    d.gpu = Value::from("h300");
    let e = error(&d);
    assert!(
        e.contains("gpu names no known GPU") && e.contains("a100-80gb, h100-sxm"),
        "{e}"
    );
    let e = error(&Deployment::named("llama-3.1-70b", "h100-sxm", 1));
    assert!(
        e.contains("does not fit on h100-sxm at tp 1") && e.contains("short by 66.14"),
        "{e}"
    );
    let e = error(&Deployment::named("deepseek-v3", "h100-sxm", 8));
    assert!(
        e.contains("does not fit on h100-sxm at tp 8") && e.contains("short by"),
        "{e}"
    );
    let e = error(&Deployment::named("qwen3-8b", "h100-sxm", 3));
    assert_eq!(e, "tp 3 does not divide the model's 32 attention heads");
    // 16 divides 64 heads, and is a multiple of 8 KV heads: allowed; 128 is past the limit.
    resolve(&Deployment::named("llama-3.1-70b", "h100-sxm", 16));
    let mut cfg: serde_json::Map<String, Value> =
        serde_json::from_str(catalog::model_named("qwen3-8b").expect("known").config).expect("json");
    cfg.remove("hidden_size");
    let mut d = Deployment::named("x", "h100-sxm", 1);
    d.model = Value::Object(cfg);
    assert_eq!(error(&d), "model config.json has no `hidden_size`");
    d.model = Value::from(3);
    assert!(error(&d).starts_with("model must be a model name or a config.json object"));
    let mut d = Deployment::named("llama-3.1-8b", "x", 2);
    d.gpu = serde_json::json!({"name": "mine", "flops": {"bf16": 1e15}, "hbm_bytes": 8e10, "hbm_bytes_per_s": 3e12});
    assert_eq!(
        error(&d),
        "gpu.link_bytes_per_s is needed for tp 2 (the all-reduces cross it)"
    );
    d.gpu = serde_json::json!({"name": "mine", "flops": {"bf16": -1}, "hbm_bytes": 8e10, "hbm_bytes_per_s": 3e12});
    assert!(error(&d).starts_with("gpu.flops.bf16 must be a finite number > 0"));
    d.gpu = serde_json::json!({"name": "mine", "flops": {"bf16": 1e15}, "hbm": 8e10});
    assert!(error(&d).starts_with("gpu.hbm unknown field `hbm`"), "{}", error(&d));
    let mut d = Deployment::named("llama-3.1-8b", "h100-sxm", 1);
    d.efficiency.mfu = Some(1.5);
    assert_eq!(error(&d), "efficiency.mfu must be a share in (0, 1] (got 1.5)");
}

#[test]
fn a_user_gpu_and_config_resolve_like_the_catalog() {
    let named = resolve(&Deployment::named("qwen3-8b", "h100-sxm", 2));
    let mut d = Deployment::named("qwen3-8b", "h100-sxm", 2);
    d.model = serde_json::from_str(catalog::model_named("qwen3-8b").expect("known").config).expect("json");
    d.gpu = serde_json::to_value(catalog::gpu_named("h100-sxm").expect("known")).expect("json");
    let given = resolve(&d);
    assert_eq!(given.derived.roofline, named.derived.roofline);
    assert_eq!(given.profile.num_kv_blocks, named.profile.num_kv_blocks);
}

#[test]
fn sliding_window_layers_read_a_window_per_sequence() {
    let r = resolve(&Deployment::named("gpt-oss-20b", "h100-sxm", 1));
    let d = &r.derived;
    assert_eq!(d.attention, "gqa+sliding_window");
    assert_eq!(d.weight_dtype, Dtype::Fp4);
    assert_eq!(d.compute_dtype, Dtype::Bf16, "no fp4 tensor path on H100: weight-only");
    // 12 full-attention layers · 2 · 8 · 64 · 2 bytes; 12 sliding layers read 128 tokens a sequence.
    assert_eq!(d.kv_bytes_per_token, 12.0 * 2.0 * 8.0 * 64.0 * 2.0);
    assert_eq!(d.roofline.window_bytes_per_seq, 12.0 * 2.0 * 8.0 * 64.0 * 2.0 * 128.0);
}

/// `num_gpu_blocks_override` takes the server's reported KV blocks in place of the estimate from memory (vLLM's
/// log for CodeLlama-34B on an 80 GB card: 2,537); the weights must still fit, and 0 is refused by name.
#[test]
fn the_servers_gpu_blocks_replace_the_estimate() {
    let mut d = Deployment::named("codellama-34b", "h100-sxm", 1);
    let estimated = resolve(&d).derived.kv_blocks;
    assert_ne!(estimated, 2537);
    d.num_gpu_blocks_override = Some(2537);
    let r = resolve(&d);
    assert_eq!((r.derived.kv_blocks, r.derived.kv_tokens), (2537, 2537 * 16));
    assert_eq!(r.profile.num_kv_blocks, 2537);
    d.num_gpu_blocks_override = Some(0);
    assert!(
        error(&d).contains("num_gpu_blocks_override must be in 1..="),
        "{}",
        error(&d)
    );
    let mut big = Deployment::named("llama-3.1-70b", "h100-sxm", 1);
    big.num_gpu_blocks_override = Some(1000);
    assert!(error(&big).contains("does not fit"), "{}", error(&big));
}
