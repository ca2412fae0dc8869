//! Under the live cards: the numbers beside the curves, and the failures in plain sight (issue #41, items 2-3).
//!
//! The numbers table is `loadshape predict`'s: the scenario simulated with its seed and the next ones
//! ([`shared::predict::simulate_seeds`], in the worker: [`crate::worker::wire::OnDemand::Predict`]) over the live run's window,
//! laid beside the live records' summary by [`shared::predict::compare`], the function `predict` calls. The
//! failures line counts failed, cut and never-sent requests and shows the first error
//! ([`shared::metrics::failures`]).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use shared::metrics::{Failures, Summary, never_sent_text};
use shared::predict::{DEFAULT_SEEDS, FIELDS, Row, Values, compare, simulate_seeds, values};
use shared::scenario::Scenario;

/// Engine scenarios up to this many requests (or session steps) get the table (ten simulations each time the
/// window moves).
pub const MAX_TABLE_RECORDS: f64 = 50_000.0;

/// The simulated side of the table: each seed's values of [`FIELDS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    pub seeds: Vec<u64>,
    pub values: Vec<Values>,
    /// The window the seeds were scored over (s), `None` for the whole run.
    pub window_s: Option<f64>,
}

/// The scenario simulated with [`DEFAULT_SEEDS`] seeds over `window_s` (what `predict` computes).
pub fn predicted(sc: &Scenario, window_s: Option<f64>) -> Result<Predicted, String> {
    let Scenario::Engine(e) = sc else {
        return Err("the seed model is simulated once, without seeds".into());
    };
    let runs = simulate_seeds(e, DEFAULT_SEEDS, window_s)?;
    Ok(Predicted {
        seeds: runs.iter().map(|(s, _)| *s).collect(),
        values: runs.iter().map(|(_, s)| values(s)).collect(),
        window_s,
    })
}

/// A row's name as the table shows it.
pub fn label(field: &str) -> &'static str {
    match field {
        "ttft_p50_ms" => "TTFT p50",
        "ttft_p90_ms" => "TTFT p90",
        "ttft_p99_ms" => "TTFT p99",
        "tpot_p50_ms" => "TPOT p50",
        "tpot_p90_ms" => "TPOT p90",
        "tpot_p99_ms" => "TPOT p99",
        "e2el_p50_ms" => "E2E p50",
        "e2el_p90_ms" => "E2E p90",
        "e2el_p99_ms" => "E2E p99",
        "request_throughput_rps" => "Throughput",
        "output_throughput_tok_s" => "Output tokens",
        "goodput_rps" => "Goodput",
        "cached_share_achieved" => "Cached share",
        _ => "",
    }
}

fn unit(field: &str) -> &'static str {
    if field.contains("share") {
        ""
    } else {
        crate::ui::metric::unit_of(field)
    }
}

fn cell(field: &str, v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| crate::ui::metric::display(field, x, false))
}

fn num_attr(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// The table's rows: the simulated seeds beside the live summary (no live column without records).
pub fn rows(p: &Predicted, live: Option<&Summary>) -> Vec<Row> {
    let live: Vec<Values> = live.map(values).into_iter().collect();
    compare(&p.values, &live)
}

/// The numbers table (`table[data-numbers]`, a `tr[data-row=<field>]` per field with `td[data-col=simulated|min|
/// max|live|error]` holding the exact number in `data-value`).
#[component]
pub fn NumbersTable(
    predicted: Signal<Option<Predicted>>,
    live: Memo<Option<Summary>>,
    note: Signal<Option<String>>,
) -> impl IntoView {
    view! {
        <div class="card numbers" data-numbers-card="">
            <div class="card-head">
                <h3 class="section">"Simulated beside live"</h3>
                <span class="spacer"></span>
                <span class="faint small" data-numbers-seeds=move || predicted.with(|p| p.as_ref().map(|p| p.seeds.len()).unwrap_or(0))>
                    {move || predicted.with(|p| match p {
                        Some(p) => {
                            let window = p.window_s.map_or("the whole run".to_string(), |w| format!("the first {w:.1} s"));
                            format!("{} seeds from {} · over {window}", p.seeds.len(), p.seeds.first().copied().unwrap_or(0))
                        }
                        None => "simulating…".to_string(),
                    })}
                </span>
            </div>
            {move || note.get().map(|n| view! { <p class="muted small" data-numbers-note="">{n}</p> })}
            {move || predicted.get().map(|p| {
                let rows = live.with(|l| rows(&p, l.as_ref()));
                view! {
                    <table class="data numbers-table" data-numbers="">
                        <thead>
                            <tr>
                                <th></th>
                                <th class="num">"simulated"</th>
                                <th class="num">"seed range"</th>
                                <th class="num">"live"</th>
                                <th class="num">"error"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {rows.into_iter().map(|r| {
                                let f = r.field.clone();
                                let name = FIELDS.iter().copied().find(|x| *x == f).unwrap_or("");
                                let (min, max) = (r.simulated_spread.map(|s| s.min), r.simulated_spread.map(|s| s.max));
                                let range = match (min, max) {
                                    (Some(a), Some(b)) => format!("{} – {}", cell(name, Some(a)), cell(name, Some(b))),
                                    _ => "—".to_string(),
                                };
                                let err_class = match r.error {
                                    Some(e) if e.abs() > 0.25 => "num err bad",
                                    Some(e) if e.abs() > 0.10 => "num err warn",
                                    _ => "num err",
                                };
                                view! {
                                    <tr data-row=f.clone()>
                                        <th scope="row">{label(name)} <span class="unit">{unit(name)}</span></th>
                                        <td class="num" data-col="simulated" data-value=num_attr(r.simulated)>{cell(name, r.simulated)}</td>
                                        <td class="num faint" data-col="range" data-min=num_attr(min) data-max=num_attr(max)>{range}</td>
                                        <td class="num" data-col="live" data-value=num_attr(r.live)>{cell(name, r.live)}</td>
                                        <td class=err_class data-col="error" data-value=num_attr(r.error)>
                                            {r.error.map_or("—".to_string(), |e| format!("{:+.1} %", e * 100.0))}
                                        </td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }
            })}
            <p class="faint small">"Simulated: the scenario's own seed; seed range: the least and greatest over the seeds; live: the records shown, scored alike; error: simulated ÷ live − 1."</p>
        </div>
    }
}

/// Failed, cut and never-sent requests and the first error, when there are any (`[data-failures]`).
#[component]
pub fn FailureLine(failures: Memo<Failures>) -> impl IntoView {
    view! {
        {move || {
            let f = failures.get();
            (f.failed > 0 || f.never_sent > 0).then(|| {
                let never = never_sent_text(&f);
                view! {
                    <div class="callout bad failures" data-failures="" data-failed=f.failed data-never-sent=f.never_sent data-planned=f.planned data-cut=f.cut>
                        <strong>{format!("{} failed request{}", f.failed, if f.failed == 1 { "" } else { "s" })}</strong>
                        {(f.cut > 0).then(|| format!(" · {} cut at the end of the run", f.cut))}
                        {never.map(|t| view! { <div data-never-sent-text="">{t}</div> })}
                        {f.first_error.map(|e| view! {
                            <div class="small">"First error: " <span class="mono" data-first-error="">{e}</span></div>
                        })}
                    </div>
                }
            })
        }}
    }
}
