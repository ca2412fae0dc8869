//! One summary value: `<span data-metric="ttft_p50_ms" data-value="3915.16">3,915</span>`.
//!
//! `data-metric` is the scoring module's (or the seed's) field name, so tests and users' scripts read the page
//! by the same names as the CLI's JSON. `data-value` holds the exact number (Rust's shortest round-trip form);
//! the text is formatted for people unless `exact` is set (the seed model's values are already rounded by the
//! seed's rules and are shown exactly as the seed prints them).

use leptos::prelude::*;

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
    } else if field.ends_with("_ratio") || field.contains("share") {
        "ratio"
    } else {
        ""
    }
}

/// The text shown for a value of `field`.
pub fn display(field: &str, v: f64, exact: bool) -> String {
    if exact {
        return v.to_string();
    }
    if field.ends_with("_ratio") || field.contains("share") {
        return crate::fmt::pct(v);
    }
    crate::fmt::num(v)
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
