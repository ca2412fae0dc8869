//! What the page knows about scenario fields: a label, a unit and a slider range per field name.
//!
//! The explorer builds its controls by walking the scenario's JSON, so every numeric field of every model and
//! workload gets a slider and a number input, including fields added later. Known names get a good label and
//! range from [`spec`]; unknown ones a range derived from their value ([`fallback`]).

/// How a field is edited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldSpec {
    pub label: &'static str,
    pub unit: &'static str,
    pub min: f64,
    pub max: f64,
    pub step: f64,
    /// A seed or an id: a number input only, no slider.
    pub no_slider: bool,
    pub help: &'static str,
}

const fn f(label: &'static str, unit: &'static str, min: f64, max: f64, step: f64, help: &'static str) -> FieldSpec {
    FieldSpec {
        label,
        unit,
        min,
        max,
        step,
        no_slider: false,
        help,
    }
}

/// The spec of a known field name (the last segment of its path).
pub fn spec(name: &str) -> Option<FieldSpec> {
    Some(match name {
        // seed profile / engine profile
        "prefill_tokens_per_ms" => f(
            "Prefill speed",
            "tok/ms",
            1.0,
            100.0,
            0.5,
            "prompt tokens processed per millisecond",
        ),
        "prefix_cache_hit_efficiency" => f(
            "Prefix-cache efficiency",
            "0–1",
            0.0,
            1.0,
            0.01,
            "share of the shared prefix served from cache",
        ),
        "base_tpot_ms" => f(
            "Base TPOT",
            "ms",
            1.0,
            80.0,
            0.1,
            "decode time per token with an empty batch",
        ),
        "batch_tpot_slope_ms" | "tpot_slope_ms" | "decode_per_seq_ms" => f(
            "TPOT slope",
            "ms/seq",
            0.0,
            3.0,
            0.01,
            "extra decode time per token per running sequence",
        ),
        "max_batch_slots" => f(
            "Batch slots",
            "seqs",
            1.0,
            128.0,
            1.0,
            "admission limit: sequences decoding at once",
        ),
        "max_num_seqs" | "max_running" => f("Max running seqs", "seqs", 1.0, 1024.0, 1.0, "vLLM max_num_seqs"),
        "max_num_batched_tokens" | "token_budget" | "chunk_tokens" => f(
            "Token budget / step",
            "tok",
            256.0,
            32768.0,
            256.0,
            "chunked-prefill budget (vLLM max_num_batched_tokens)",
        ),
        "block_size" | "block_tokens" => f("KV block size", "tok", 1.0, 128.0, 1.0, "tokens per KV-cache block"),
        "kv_blocks" | "kv_capacity_blocks" | "num_gpu_blocks" | "kv_capacity" => f(
            "KV capacity",
            "blocks",
            16.0,
            100_000.0,
            16.0,
            "KV-cache blocks on the GPU",
        ),
        "max_model_len" => f(
            "Max model length",
            "tok",
            1024.0,
            1_048_576.0,
            1024.0,
            "longest prompt + output accepted",
        ),
        "step_fixed_ms" => f(
            "Step floor",
            "ms",
            0.0,
            60.0,
            0.1,
            "fixed time of every engine step (decode floor)",
        ),
        "per_seq_ms" => f(
            "Per-sequence cost",
            "ms/seq",
            0.0,
            2.0,
            0.005,
            "step time added per running sequence",
        ),
        "per_ctx_token_ms" => f(
            "Context cost",
            "ms/tok",
            0.0,
            0.001,
            0.000001,
            "step time per context token in the batch",
        ),
        "num_kv_blocks" => f(
            "KV capacity",
            "blocks",
            16.0,
            200_000.0,
            16.0,
            "KV-cache blocks on the GPU(s)",
        ),
        "fixed_prefill_ms" | "prefill_fixed_ms" => f("Fixed prefill cost", "ms", 0.0, 50.0, 0.5, "per prefill step"),
        "reply_cached_share" => f(
            "Reply found cached",
            "share",
            0.0,
            1.0,
            0.01,
            "of a session's previous reply, the share the server finds cached next step (llama-server re-tokenizes the \
             reply it gets back as text: ≈ 0.2)",
        ),
        "step_overhead_ms" => f("Step overhead", "ms", 0.0, 5.0, 0.01, "fixed cost of every engine step"),
        "per_context_token_ms" | "decode_per_context_token_ms" => f(
            "Context cost",
            "ms/tok",
            0.0,
            0.01,
            0.00001,
            "decode time per context token in the batch",
        ),
        "prefix_caching" | "prefix_cache" => return None,
        // SLOs
        "ttft_ms" => f("TTFT SLO", "ms", 50.0, 10_000.0, 10.0, "time to first token target"),
        "tpot_ms" => f("TPOT SLO", "ms", 5.0, 200.0, 1.0, "time per output token target"),
        "e2e_ms" => f("E2E SLO", "ms", 100.0, 600_000.0, 100.0, "end-to-end latency target"),
        // workloads
        "num_requests" => f("Requests", "req", 1.0, 2000.0, 1.0, "requests in the trace"),
        "mean_rps" | "rate_rps" => f("Arrival rate", "req/s", 0.1, 50.0, 0.1, "mean arrival rate"),
        "cv" | "burstiness" => f(
            "Burstiness",
            "cv",
            0.1,
            5.0,
            0.05,
            "coefficient of variation of inter-arrivals",
        ),
        "prompt_tokens" | "input_tokens" => f("Prompt length", "tok", 1.0, 32_768.0, 1.0, "prompt tokens per request"),
        "output_tokens" => f("Output length", "tok", 1.0, 4096.0, 1.0, "generated tokens per request"),
        "sessions" => f(
            "Sessions",
            "slots",
            1.0,
            256.0,
            1.0,
            "concurrent agent sessions (slots)",
        ),
        "users" | "concurrency" => f("Users", "users", 1.0, 256.0, 1.0, "closed-loop users"),
        "steps" => f("Steps / session", "steps", 1.0, 200.0, 1.0, "requests per session"),
        "base_tokens" => f(
            "Base context",
            "tok",
            0.0,
            128_000.0,
            256.0,
            "context a session starts with",
        ),
        "gen_tokens" => f(
            "Reply length",
            "tok",
            1.0,
            4096.0,
            1.0,
            "generated tokens per step (forced)",
        ),
        "tool_tokens" => f("Tool output", "tok", 0.0, 16_000.0, 10.0, "tool output added per step"),
        "task_tokens" => f("Task prompt", "tok", 0.0, 8192.0, 8.0, "unique task text at step 0"),
        "think_s" => f("Think time", "s", 0.0, 60.0, 0.1, "mean pause between steps"),
        "spread" => f("Spread", "σ", 0.0, 2.0, 0.01, "spread of the per-session draws"),
        "stagger_s" => f("Stagger", "s", 0.0, 120.0, 0.5, "start offset between sessions"),
        "duration_s" => f("Run length", "s", 0.0, 3600.0, 5.0, "0 = until every session ends"),
        // a deployment (docs/simulator.md, "Deployments")
        "model" => f(
            "Model",
            "",
            0.0,
            1.0,
            1.0,
            "the model, from the catalog (loadshape catalog models)",
        ),
        "gpu" => f(
            "GPU",
            "",
            0.0,
            1.0,
            1.0,
            "the GPU, from the catalog (loadshape catalog gpus)",
        ),
        "tp" => f(
            "Tensor parallel",
            "GPUs",
            1.0,
            8.0,
            1.0,
            "GPUs one replica's model is split over",
        ),
        "weight_dtype" => f("Weights", "", 0.0, 1.0, 1.0, "the weights' precision"),
        "kv_dtype" => f("KV cache", "", 0.0, 1.0, 1.0, "the KV cache's precision"),
        // the agent shapes of a session workload (issue #44)
        "think" => f(
            "Think times",
            "",
            0.0,
            1.0,
            1.0,
            "think times drawn from a distribution (log-normal, …)",
        ),
        "median_s" => f(
            "Think median",
            "s",
            0.0,
            120.0,
            0.1,
            "median think time of the log-normal",
        ),
        "sigma" => f(
            "Think σ",
            "σ",
            0.05,
            3.0,
            0.05,
            "log-normal σ: the tail of the think times",
        ),
        "compaction" => f(
            "Compaction",
            "",
            0.0,
            1.0,
            1.0,
            "the agent summarizes its context near a limit",
        ),
        "at_tokens" => f(
            "Compact at",
            "tok",
            1000.0,
            1_000_000.0,
            1000.0,
            "context that triggers compaction",
        ),
        "summary_tokens" => f(
            "Summary",
            "tok",
            1.0,
            32_000.0,
            10.0,
            "the summary the context is replaced by",
        ),
        "reasoning" => f("Reasoning", "", 0.0, 1.0, 1.0, "hidden reasoning tokens in every reply"),
        "tokens" => f(
            "Reasoning tokens",
            "tok",
            0.0,
            32_000.0,
            10.0,
            "hidden reasoning tokens per reply",
        ),
        "echo" => f(
            "Echo reasoning",
            "",
            0.0,
            1.0,
            1.0,
            "whether the next prompt carries the reasoning back",
        ),
        "subagents" => f(
            "Sub-agents",
            "",
            0.0,
            1.0,
            1.0,
            "steps that fork child sessions from the prefix",
        ),
        "every_steps" => f(
            "Spawn every",
            "steps",
            1.0,
            100.0,
            1.0,
            "a fan-out every this many steps",
        ),
        "count" => f("Children", "sessions", 1.0, 64.0, 1.0, "child sessions per fan-out"),
        "wait" => f(
            "Wait for children",
            "",
            0.0,
            1.0,
            1.0,
            "the parent's next step waits and carries their results",
        ),
        "drain_grace_s" => f(
            "Drain grace",
            "s",
            0.0,
            600.0,
            1.0,
            "time allowed to finish at the deadline",
        ),
        // ladder solver
        "median_tokens" => f(
            "Median prompt",
            "tok",
            1000.0,
            200_000.0,
            100.0,
            "target weighted median prompt length",
        ),
        "p90_tokens" => f(
            "p90 prompt",
            "tok",
            1000.0,
            400_000.0,
            100.0,
            "target weighted p90 prompt length",
        ),
        "cached_share" => f(
            "Cached share",
            "0–1",
            0.0,
            1.0,
            0.005,
            "target share of cached prompt tokens/requests",
        ),
        "growth_tokens" => f(
            "Growth / step",
            "tok",
            1.0,
            20_000.0,
            1.0,
            "reply + tool output added per step",
        ),
        "reply_tokens" => f(
            "Reply / step",
            "tok",
            0.0,
            8192.0,
            1.0,
            "reply tokens per step (part of the growth)",
        ),
        "slots" => f("Slots", "rungs", 1.0, 64.0, 1.0, "session slots = rungs of the ladder"),
        "base_step_tokens" => f("Base step", "tok", 1.0, 10_000.0, 50.0, "bases are multiples of this"),
        "min_base_tokens" => f("Min base", "tok", 1.0, 100_000.0, 100.0, "smallest base context"),
        "min_steps" => f("Min steps", "steps", 1.0, 200.0, 1.0, "fewest steps of a rung"),
        "max_steps" => f("Max steps", "steps", 1.0, 500.0, 1.0, "most steps of a rung"),
        "max_prompt_tokens" => f(
            "Prompt ceiling",
            "tok",
            1000.0,
            1_000_000.0,
            1000.0,
            "the model's context",
        ),
        "margin_tolerance" => f(
            "Margin tolerance",
            "rel",
            0.0,
            0.2,
            0.001,
            "error that may be traded for margins",
        ),
        // fleet
        "replicas" => f(
            "Replicas",
            "engines",
            1.0,
            64.0,
            1.0,
            "engines behind the router, each with its own prefix cache",
        ),
        "load_cap" => f(
            "Load cap",
            "× mean",
            1.0,
            10.0,
            0.1,
            "prefix_aware: most outstanding requests of the cache-best replica, over the fleet mean",
        ),
        // speculative decoding (the profile's `speculative`, docs/simulator.md)
        "speculative" => f(
            "Speculative decoding",
            "",
            0.0,
            1.0,
            1.0,
            "off until set: a draft proposes tokens the model verifies in one step",
        ),
        "draft_tokens" => f(
            "Draft tokens",
            "tok/step",
            1.0,
            16.0,
            1.0,
            "k: tokens drafted per decoding sequence per step",
        ),
        "acceptance" => f(
            "Acceptance",
            "0–1",
            0.0,
            1.0,
            0.01,
            "rate a: draft position i is accepted in a share a^i of steps",
        ),
        "draft_cost_ms" => f(
            "Draft cost",
            "ms/tok",
            0.0,
            5.0,
            0.01,
            "time the draft takes per drafted token",
        ),
        // prefill/decode disaggregation (a fleet's `disaggregation`, docs/simulator.md)
        "disaggregation" => f(
            "Prefill/decode disaggregation",
            "",
            0.0,
            1.0,
            1.0,
            "off until set: prefill instances hand each prompt's KV over a link to decode instances",
        ),
        "prefill_instances" => f(
            "Prefill instances",
            "engines",
            1.0,
            32.0,
            1.0,
            "replicas that only prefill; prefill + decode instances = replicas",
        ),
        "decode_instances" => f(
            "Decode instances",
            "engines",
            1.0,
            32.0,
            1.0,
            "replicas that only decode; prefill + decode instances = replicas",
        ),
        // Stored in bytes per second; the box reads and takes GB/s ([`unit_power`]).
        "link_bytes_per_s" => f(
            "Link bandwidth",
            "GB/s",
            1e9,
            4e11,
            1e9,
            "the KV transfer link between prefill and decode instances",
        ),
        "link_latency_ms" => f("Link latency", "ms", 0.0, 10.0, 0.1, "latency per KV transfer"),
        "kv_bytes_per_token" => f(
            "KV per token",
            "B",
            1024.0,
            2e6,
            1024.0,
            "the model's KV bytes per token (a deployment's own when absent)",
        ),
        "seed" => FieldSpec {
            no_slider: true,
            ..f("Seed", "", 0.0, 1e9, 1.0, "random seed")
        },
        _ => return None,
    })
}

/// The value an absent optional field gets when the user sets it.
pub fn unset_default(name: &str) -> f64 {
    match name {
        "e2e_ms" => 30_000.0,
        "max_model_len" | "max_prompt_tokens" => 131_072.0,
        _ => spec(name).map_or(1.0, |s| s.min.max(s.step)),
    }
}

/// A range for a field the page does not know: around its current value.
pub fn fallback(name: &str, value: f64, integer: bool) -> FieldSpec {
    let max = if value > 0.0 { value * 4.0 } else { 1.0 };
    let step = if integer { 1.0 } else { (max / 200.0).max(1e-6) };
    FieldSpec {
        label: "",
        unit: crate::ui::metric::unit_of(name),
        min: 0.0,
        max,
        step,
        no_slider: false,
        help: "",
    }
}

/// A readable label from a field name: `drain_grace_s` → `Drain grace s`.
pub fn humanize(name: &str) -> String {
    let mut s = name.replace('_', " ");
    if let Some(first) = s.get(0..1) {
        let upper = first.to_uppercase();
        s.replace_range(0..1, &upper);
    }
    s
}

/// The values a string field may take, when it is an enum the page knows. A deployment's `model` and `gpu` are the
/// catalog's names, read from `shared::deploy::catalog` (what `loadshape catalog` lists).
pub fn choices(name: &str) -> Option<Vec<String>> {
    let fixed: &[&str] = match name {
        "dist" => &["lognormal", "uniform"],
        "cached_definition" => &["tokens", "requests"],
        "weighting" => &["respawn", "single"],
        "priority" => &["exact", "margins"],
        "method" => &["mtp", "eagle", "draft", "ngram"],
        "router" => &["round_robin", "least_outstanding", "session_affinity", "prefix_aware"],
        "gpu" => return Some(shared::deploy::catalog::gpus().into_iter().map(|g| g.name).collect()),
        "model" => {
            return Some(
                shared::deploy::catalog::MODELS
                    .iter()
                    .map(|m| m.name.to_string())
                    .collect(),
            );
        }
        "weight_dtype" | "kv_dtype" => &["bf16", "fp16", "fp8", "fp4"],
        _ => return None,
    };
    Some(fixed.iter().map(|s| s.to_string()).collect())
}

/// The power of ten a unit stands for where the box shows a field in a larger unit than the scenario stores
/// (`GB/s` for a field in bytes per second): the box holds the value ÷ 10^power. 0 for every other unit.
pub fn unit_power(unit: &str) -> i32 {
    if unit == "GB/s" { 9 } else { 0 }
}

/// `v` × 10^`by` written out in plain decimal from the shortest digits that read back as `v` (the decimal point
/// moved, no arithmetic), so [`parse_shifted`] of it with `−by` is exactly `v` again: a bandwidth shown in GB/s
/// reads back as the same bytes per second.
pub fn shift_decimal(v: f64, by: i32) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let s = format!("{v:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let (sign, m) = m.strip_prefix('-').map_or(("", m), |m| ("-", m));
    let digits = m.replace('.', "");
    let n = digits.len() as i32;
    // How many of the digits stand before the point.
    let point = e.parse::<i32>().unwrap_or(0) + by + 1;
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(-point as usize))
    } else if point >= n {
        format!("{digits}{}", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

/// The number typed as `text` × 10^`by`, rounded once from the exact decimal (`12.5` GB/s is 12,500,000,000 B/s;
/// `1.001` is 1,001,000,000, where `1.001 * 1e9` gives 1,000,999,999.9999999); `None` when it is no number.
pub fn parse_shifted(text: &str, by: i32) -> Option<f64> {
    let (m, e) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
    format!("{m}e{}", e.parse::<i32>().ok()? + by).parse().ok()
}

/// Group titles for top-level scenario keys.
pub fn group_title(key: &str) -> String {
    match key {
        "workload" => "Workload".to_string(),
        "profile" | "engine" => "Engine profile".to_string(),
        "slo" => "SLOs".to_string(),
        "shape" => "Session shape".to_string(),
        "fleet" => "Fleet".to_string(),
        "speculative" => "Speculative decoding".to_string(),
        "disaggregation" => "Prefill/decode disaggregation".to_string(),
        "deployment" => "Deployment: model and GPU".to_string(),
        other => humanize(other),
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn known_fields_have_sane_ranges() {
        for name in [
            "prefill_tokens_per_ms",
            "max_batch_slots",
            "ttft_ms",
            "mean_rps",
            "sessions",
            "think_s",
        ] {
            let s = spec(name).expect(name);
            assert!(s.min < s.max && s.step > 0.0, "{name}");
            assert!(!s.label.is_empty() && !s.unit.is_empty(), "{name}");
        }
        assert!(spec("seed").is_some_and(|s| s.no_slider));
    }

    /// The model and GPU menus show the catalog: every built-in name, and a name only the catalog knows (no hand
    /// list to fall behind it).
    #[test]
    fn the_deployment_menus_show_the_catalog() {
        let gpus = choices("gpu").expect("a GPU menu");
        let models = choices("model").expect("a model menu");
        for g in shared::deploy::catalog::gpus() {
            assert!(gpus.contains(&g.name), "{} in the GPU menu", g.name);
            assert!(shared::deploy::catalog::gpu_named(&g.name).is_some());
        }
        for m in shared::deploy::catalog::MODELS {
            assert!(models.iter().any(|n| n == m.name), "{} in the model menu", m.name);
        }
        assert_eq!(gpus.len(), shared::deploy::catalog::gpus().len());
        assert_eq!(models.len(), shared::deploy::catalog::MODELS.len());
        // Every entry of either menu resolves as a deployment's model or GPU.
        for m in &models {
            assert!(shared::deploy::catalog::model_named(m).is_some(), "{m}");
        }
        assert!(choices("router").is_some_and(|r| r.len() == 4) && choices("nope").is_none());
    }

    /// A bandwidth shown in GB/s: the box's text is the stored bytes per second with the point moved, and reads back
    /// as exactly the same number, for whole, fractional and odd values alike.
    #[test]
    fn a_field_shown_in_a_larger_unit_reads_back_exactly() {
        assert_eq!(spec("link_bytes_per_s").map(|s| s.unit), Some("GB/s"));
        assert_eq!((unit_power("GB/s"), unit_power("B")), (9, 0));
        for (v, shown) in [
            (5e10, "50"),
            (12.5e9, "12.5"),
            (1.001e9, "1.001"),
            (5e8, "0.5"),
            (4_197_530.826, "0.004197530826"),
            (1_234_567_890.123_456_7, "1.2345678901234567"),
            (4e11, "400"),
            (0.0, "0"),
            (-2.5e9, "-2.5"),
        ] {
            assert_eq!(shift_decimal(v, -9), shown, "{v}");
            assert_eq!(parse_shifted(shown, 9), Some(v), "{shown}");
        }
        assert_eq!(parse_shifted("1.001", 9), Some(1_001_000_000.0));
        assert_eq!(parse_shifted("5e-1", 9), Some(5e8));
        assert_eq!(parse_shifted("", 9), None);
        assert_eq!(parse_shifted("fast", 9), None);
        // Every step of a fine grid comes back as itself.
        for i in 1..20_000u32 {
            let v = f64::from(i) * 123_456.789;
            assert_eq!(parse_shifted(&shift_decimal(v, -9), 9), Some(v), "{v}");
        }
    }

    #[test]
    fn fallback_covers_the_value() {
        let s = fallback("weird_ms", 12.5, false);
        assert!(s.max >= 12.5 && s.unit == "ms");
        assert_eq!(humanize("drain_grace_s"), "Drain grace s");
    }
}

/// Positions of a log-scaled slider: `0..=LOG_STEPS`.
pub const LOG_STEPS: f64 = 1000.0;

/// Whether a field's slider is log-scaled: counts and token sizes over a wide range (sessions 1–256: a linear track
/// gives the useful 1–32 an eighth of its length).
pub fn log_scale(spec: &FieldSpec) -> bool {
    matches!(
        spec.unit,
        "tok" | "seqs" | "slots" | "sessions" | "users" | "req" | "steps" | "blocks" | "rungs" | "replicas"
    ) && spec.max >= 30.0 * spec.min.max(1.0)
}

/// The log of a slider's scale: `ln(v)` for ranges from 1 up, `ln(1 + v)` for ranges from 0 (so 0 has a place).
fn log_of(v: f64, min: f64) -> f64 {
    if min >= 1.0 {
        v.max(1.0).ln()
    } else {
        v.max(0.0).ln_1p()
    }
}

/// A value's position on a log-scaled slider over `min..=max`: `0..=LOG_STEPS`.
pub fn log_position(v: f64, min: f64, max: f64) -> f64 {
    let (lo, hi) = (log_of(min, min), log_of(max.max(min), min));
    if hi <= lo {
        return 0.0;
    }
    ((log_of(v.clamp(min, max.max(min)), min) - lo) / (hi - lo) * LOG_STEPS).clamp(0.0, LOG_STEPS)
}

/// The value at a log-scaled slider's position, rounded to `step` (at least 1 for integers) and kept in
/// `min..=max`.
pub fn log_value(pos: f64, min: f64, max: f64, step: f64, integer: bool) -> f64 {
    let (lo, hi) = (log_of(min, min), log_of(max.max(min), min));
    let x = lo + (pos / LOG_STEPS).clamp(0.0, 1.0) * (hi - lo);
    let raw = if min >= 1.0 { x.exp() } else { x.exp_m1() };
    let step = if integer { step.max(1.0).round() } else { step };
    let v = if step > 0.0 { (raw / step).round() * step } else { raw };
    v.clamp(min, max.max(min))
}

#[cfg(test)]
mod log_tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn counts_and_token_sizes_slide_on_a_log_scale() {
        for name in [
            "sessions",
            "users",
            "steps",
            "base_tokens",
            "tool_tokens",
            "gen_tokens",
            "max_num_seqs",
        ] {
            assert!(log_scale(&spec(name).expect("known")), "{name}");
        }
        for name in ["think_s", "ttft_ms", "spread", "mean_rps"] {
            assert!(!log_scale(&spec(name).expect("known")), "{name}");
        }
        // Sessions 1–256: the useful 1–32 takes more than half of the track (a linear one gave it 12 %).
        let s = spec("sessions").expect("known");
        assert!(log_position(32.0, s.min, s.max) > 0.6 * LOG_STEPS);
        // Every count is reachable and comes back as itself.
        for v in 1..=256u32 {
            let pos = log_position(f64::from(v), s.min, s.max).round();
            let back = log_value(pos, s.min, s.max, s.step, true);
            assert!(
                (back - f64::from(v)).abs() <= (f64::from(v) * 0.01).max(0.0),
                "{v} -> {pos} -> {back}"
            );
        }
        // Zero has a place (tool output may be 0) and the ends are the range's ends.
        let t = spec("tool_tokens").expect("known");
        assert_eq!(log_value(0.0, t.min, t.max, t.step, true), 0.0);
        assert_eq!(log_value(LOG_STEPS, t.min, t.max, t.step, true), t.max);
    }
}
