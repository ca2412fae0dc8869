//! The seed model's three profile comparisons, computed in wasm through `shared::seed_model`.
//!
//! Each profile is a card `data-profile="<name>"` holding every `SeedSummary` field as `data-metric="<field>"`,
//! shown exactly as the seed prints it (`scenario_sim_output.json`, `scenario_comparisons`).

use leptos::prelude::*;

use crate::model::seed;

/// Fields shown in each card, with labels and units (the rest of the summary is present, smaller).
const ROWS: [(&str, &str, &str); 10] = [
    ("ttft_p50_ms", "TTFT p50", "ms"),
    ("ttft_p99_ms", "TTFT p99", "ms"),
    ("tpot_p50_ms", "TPOT p50", "ms"),
    ("tpot_p99_ms", "TPOT p99", "ms"),
    ("raw_output_tokens_per_s", "Output", "tok/s"),
    ("request_throughput_rps", "Throughput", "req/s"),
    ("slo_goodput_rps", "Goodput", "req/s"),
    ("slo_attainment_ratio", "SLO attainment", ""),
    ("duration_s", "Duration", "s"),
    ("total_requests", "Requests", ""),
];

/// The three seed profiles on the seed's trace, one card each.
#[component]
pub fn SeedPanel() -> impl IntoView {
    let results = seed::seed_comparisons();
    let best = results
        .iter()
        .filter_map(|(name, r)| Some((name.clone(), r.as_ref().ok()?.get("slo_goodput_rps")?.as_f64()?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(n, _)| n);
    let cards = results
        .into_iter()
        .map(|(name, result)| {
            let is_best = best.as_deref() == Some(name.as_str());
            let body = match result {
                Ok(summary) => {
                    let rows = ROWS
                        .iter()
                        .filter_map(|&(field, label, unit)| {
                            let v = summary.get(field)?;
                            let text = v.to_string();
                            let shown = text.clone();
                            Some(view! {
                                <dt>{label}</dt>
                                <dd>
                                    <span class="metric-value" data-metric=field data-value=text>{shown}</span>
                                    <span class="faint">" " {unit}</span>
                                </dd>
                            })
                        })
                        .collect_view();
                    let tags = ["engine", "workload"]
                        .into_iter()
                        .filter_map(|field| {
                            let v = summary.get(field)?.as_str()?.to_string();
                            Some(view! { <span class="tag" data-metric=field>{v}</span> })
                        })
                        .collect_view();
                    view! {
                        <dl class="kv">{rows}</dl>
                        <div class="tags">{tags}</div>
                    }
                    .into_any()
                }
                Err(e) => view! { <p class="callout bad">{e}</p> }.into_any(),
            };
            view! {
                <div class="profile-card" class:best=is_best data-profile=name.clone()>
                    <h3>{name.clone()} {is_best.then(|| view! { <span class="badge">"best goodput"</span> })}</h3>
                    {body}
                </div>
            }
        })
        .collect_view();
    view! {
        <div class="card seed-panel">
            <div class="card-head">
                <h2>"The seed's three profiles"</h2>
                <span class="muted">"80 bursty requests at 8.5 req/s (seed 42), SLO TTFT ≤ 500 ms and TPOT ≤ 35 ms"</span>
            </div>
            <div class="profiles">{cards}</div>
            <p class="faint small">
                "Computed in your browser by the seed's exact model; equal, field for field, to the seed's own report."
            </p>
        </div>
    }
}
