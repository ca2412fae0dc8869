//! One summary value: `<span data-metric="ttft_p50_ms" data-value="3915.16">3,915</span>`.
//!
//! `data-metric` is the scoring module's (or the seed's) field name, so tests and users' scripts read the page
//! by the same names as the CLI's JSON. `data-value` holds the exact number (Rust's shortest round-trip form);
//! the text is formatted for people unless `exact` is set (the seed model's values are already rounded by the
//! seed's rules and are shown exactly as the seed prints them).

use leptos::prelude::*;

/// Headline metrics, in display order, with their labels. A field absent from a model's summary is skipped.
pub const HEADLINE: [(&str, &str); 20] = [
    ("ttft_p50_ms", "TTFT p50"),
    ("ttft_p99_ms", "TTFT p99"),
    // Present only with hidden reasoning (TTFT to the first content token) and with speculative decoding.
    ("ttft_content_p50_ms", "TTFT-content p50"),
    ("ttft_content_p99_ms", "TTFT-content p99"),
    ("reasoning_share", "Reasoning share"),
    ("spec_acceptance", "Draft acceptance"),
    ("tpot_p50_ms", "TPOT p50"),
    ("tpot_p99_ms", "TPOT p99"),
    ("e2el_p50_ms", "E2E p50"),
    ("e2el_p99_ms", "E2E p99"),
    ("request_throughput_rps", "Throughput"),
    ("output_throughput_tok_s", "Output tokens"),
    ("raw_output_tokens_per_s", "Output tokens"),
    ("goodput_rps", "Goodput"),
    ("slo_goodput_rps", "Goodput"),
    ("slo_attainment_ratio", "SLO attainment"),
    ("session_goodput_sps", "Session goodput"),
    ("session_attainment_ratio", "Session attainment"),
    ("cached_share_achieved", "Cached share"),
    ("duration_s", "Duration"),
];

/// A share of one (shown as a percentage): `…_ratio`, `…share…`, `spec_acceptance`.
pub fn is_ratio(field: &str) -> bool {
    field.ends_with("_ratio") || field.contains("share") || field == "spec_acceptance"
}

/// The unit suffix a field name implies, for display next to the value.
pub fn unit_of(field: &str) -> &'static str {
    if field.ends_with("_ms") {
        "ms"
    } else if field.ends_with("_rps") {
        "req/s"
    } else if field.ends_with("_sps") {
        "sessions/s"
    } else if field.ends_with("_tok_s") || field.ends_with("tokens_per_s") {
        "tok/s"
    } else if field.ends_with("_s") {
        "s"
    } else if is_ratio(field) {
        "ratio"
    } else {
        ""
    }
}

/// The label the page shows for a summary field: the explorer's headline label (`TTFT p50`), else the name in
/// words with its unit dropped (`ttft_mean_ms` → `TTFT mean`, `kv_peak_use_ratio` → `KV peak use`).
pub fn label(field: &str) -> String {
    if let Some((_, l)) = HEADLINE.iter().find(|(n, _)| *n == field) {
        return (*l).to_string();
    }
    let mut words: Vec<String> = field
        .split('_')
        .map(|w| match w {
            "ttft" => "TTFT".to_string(),
            "tpot" => "TPOT".to_string(),
            "e2el" | "e2e" => "E2E".to_string(),
            "itl" => "ITL".to_string(),
            "kv" => "KV".to_string(),
            "slo" => "SLO".to_string(),
            other => other.to_string(),
        })
        .collect();
    // The unit goes beside the value (`tok_s` is two words).
    while words.len() > 1
        && matches!(
            words[words.len() - 1].as_str(),
            "ms" | "s" | "rps" | "sps" | "ratio" | "tok"
        )
    {
        words.pop();
    }
    let mut out = words.join(" ");
    if let Some(first) = out.get(0..1) {
        let upper = first.to_uppercase();
        out.replace_range(0..1, &upper);
    }
    if out.is_empty() { field.to_string() } else { out }
}

/// The text shown for a value of `field`.
pub fn display(field: &str, v: f64, exact: bool) -> String {
    if exact {
        return v.to_string();
    }
    if is_ratio(field) {
        return crate::ui::fmt::pct(v);
    }
    // Counts (completed, failed, tokens) read as whole numbers.
    if !field.ends_with("_ms") && !field.ends_with("_s") && v.fract() == 0.0 && v.abs() < 1e15 {
        return crate::ui::fmt::num(v).split('.').next().unwrap_or_default().to_string();
    }
    crate::ui::fmt::num(v)
}

/// A metric value element. `value` is reactive; `None` renders a dash.
#[component]
pub fn Metric(
    /// The field name, becomes `data-metric`.
    name: &'static str,
    /// The value.
    #[prop(into)]
    value: Signal<Option<f64>>,
    /// Show the exact number instead of a rounded one.
    #[prop(optional)]
    exact: bool,
) -> impl IntoView {
    view! {
        <span
            class="metric-value"
            data-metric=name
            data-value=move || value.get().map(|v| v.to_string()).unwrap_or_default()
        >
            {move || value.get().map(|v| display(name, v, exact)).unwrap_or_else(|| "—".to_string())}
        </span>
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn labels_read_as_the_explorer_reads_them() {
        assert_eq!(label("ttft_p50_ms"), "TTFT p50");
        assert_eq!(label("goodput_rps"), "Goodput");
        assert_eq!(label("ttft_mean_ms"), "TTFT mean");
        assert_eq!(label("kv_peak_use_ratio"), "KV peak use");
        assert_eq!(label("output_throughput_tok_s"), "Output tokens");
        assert_eq!(label("prefill_tokens"), "Prefill tokens");
        assert_eq!(label("ttft_content_p99_ms"), "TTFT-content p99");
        assert!(!label("e2el_mean_ms").contains('_'));
    }
}
