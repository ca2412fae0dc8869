//! The trace panel: a production trace (Mooncake JSONL, agentic Mooncake) picked from a file, parsed here in wasm
//! (`shared::workload::mooncake`) and never uploaded, becomes the explorer's workload; its own statistics
//! (`TraceStats`: prompt median/p90, the reuse its hash ids imply under an infinite cache, arrival rate over time)
//! sit beside the simulated result. A link carries the trace's options and SHA-256, not its requests
//! (`shared::link::encode`); opening one asks for the file and refuses another one.

use leptos::prelude::*;
use serde_json::Value;
use shared::workload::mooncake::TraceStats;
use shared::workload::{TraceWorkload, Workload};

use crate::model::state::Explorer;
use crate::ui::metric::Metric;

/// The explorer's trace workload, if it has one.
fn trace_of(json: &Value) -> Option<TraceWorkload> {
    let w = json.get("workload")?;
    match serde_json::from_value::<Workload>(w.clone()).ok()? {
        Workload::Trace(t) => Some(*t),
        _ => None,
    }
}

/// A file's text as the explorer's trace workload (keeping the options and hash the scenario names), or why not.
fn load(json: &Value, name: &str, bytes: &[u8]) -> Result<TraceWorkload, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("{name} is not UTF-8 text: {e}"))?;
    let mut t = trace_of(json)
        .map(|t| t.without_requests())
        .unwrap_or_else(|| TraceWorkload::inline(Vec::new()));
    t.path = Some(name.to_string());
    t.load_text(text).map_err(|e| format!("{name}: {e}"))?;
    Ok(t)
}

/// An SVG polyline of the arrival rate over the trace's span.
fn rate_path(points: &[(f64, f64)]) -> String {
    let max = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9);
    let n = points.len().max(2) - 1;
    points
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{:.1},{:.1}", i as f64 * 300.0 / n as f64, 60.0 - p.1 / max * 56.0))
        .collect::<Vec<_>>()
        .join(" ")
}

#[component]
pub fn TracePanel(ex: Explorer) -> impl IntoView {
    let stats = RwSignal::new(None::<TraceStats>);
    let message = RwSignal::new(None::<String>);
    // A scenario (e.g. from a link) that names a trace file not given yet.
    let wanted = Memo::new(move |_| trace_of(&ex.json.get()).filter(TraceWorkload::needs_file));
    let stat = move |f: fn(&TraceStats) -> f64| Signal::derive(move || stats.get().map(|s| f(&s)));
    view! {
        <section class="card trace-panel" data-trace-panel="">
            <h3 class="section">"Production trace"</h3>
            <input
                type="file"
                accept=".jsonl,.json,.ndjson,text/plain"
                data-control="trace-file"
                aria-label="Trace file (Mooncake JSONL)"
                on:change=move |ev| {
                    use wasm_bindgen::JsCast;
                    let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) else { return };
                    let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
                    let name = file.name();
                    leptos::task::spawn_local(async move {
                        let bytes = match wasm_bindgen_futures::JsFuture::from(file.array_buffer()).await {
                            Ok(buf) => js_sys::Uint8Array::new(&buf).to_vec(),
                            Err(_) => {
                                message.set(Some(format!("cannot read {name}")));
                                return;
                            }
                        };
                        let mut json = ex.json.get_untracked();
                        if json.get("model").and_then(Value::as_str) != Some("engine") {
                            json = shared::scenario::Scenario::Engine(shared::presets::default_engine_scenario()).to_value();
                        }
                        match load(&json, &name, &bytes) {
                            Ok(t) => {
                                stats.set(Some(TraceStats::of(&t)));
                                message.set(None);
                                json["workload"] = serde_json::to_value(Workload::Trace(Box::new(t))).unwrap_or_default();
                                ex.json.set(json);
                            }
                            Err(e) => message.set(Some(e)),
                        }
                    });
                }
            />
            <p class="faint small" data-trace-local="">
                "Mooncake JSONL or agentic Mooncake. The file stays in this browser: it is parsed here and never uploaded; a link names it by its SHA-256, and whoever opens the link picks their own copy."
            </p>
            {move || wanted.get().map(|t| view! {
                <p class="callout" data-trace-wanted=t.sha256.clone().unwrap_or_default()>
                    {format!(
                        "This scenario replays the trace {} (sha256 {}): pick that file to simulate it.",
                        t.path.clone().unwrap_or_default(),
                        t.sha256.clone().unwrap_or_default()
                    )}
                </p>
            })}
            {move || message.get().map(|m| view! { <p class="callout bad" data-trace-error="">{m}</p> })}
            {move || stats.get().map(|s| view! {
                <dl class="trace-stats">
                    <dt>"requests"</dt><dd><Metric name="trace_requests" value=stat(|s| s.requests as f64) exact=true/></dd>
                    <dt>"prompt median"</dt><dd><Metric name="trace_prompt_median_tokens" value=stat(|s| s.prompt_median_tokens)/>" tokens"</dd>
                    <dt>"prompt p90"</dt><dd><Metric name="trace_prompt_p90_tokens" value=stat(|s| s.prompt_p90_tokens)/>" tokens"</dd>
                    <dt>"reuse the hash ids imply (infinite cache)"</dt><dd><Metric name="trace_reuse_share" value=stat(|s| s.reuse_share)/></dd>
                    <dt>"span"</dt><dd><Metric name="trace_span_s" value=stat(|s| s.span_s)/>" s"</dd>
                </dl>
                <svg class="trace-rate" viewBox="0 0 300 60" data-trace-rate=s.arrival_rate.len().to_string() role="img" aria-label="arrival rate over the trace">
                    <polyline fill="none" stroke="currentColor" points=rate_path(&s.arrival_rate)/>
                </svg>
                <p class="faint small">"arrivals per second over the trace (60 intervals)"</p>
            })}
        </section>
    }
}
