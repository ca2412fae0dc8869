//! Under the live cards: the numbers beside the curves, and the failures in plain sight (issue #41, items 2-3).
//!
//! A fleet's run (several replicas, or prefill/decode disaggregation) adds [`FleetTable`]: per replica and the KV
//! transfers, the scenario's own seed beside the live records, both from `shared::metrics::replicas::fleet_figures`.
//!
//! The numbers table is `loadshape predict`'s: the scenario simulated with its seed and the next ones
//! ([`shared::predict::simulate_seeds`], in the worker: [`crate::worker::wire::OnDemand::Predict`]) over the live run's window,
//! laid beside the live records' summary by [`shared::predict::compare`], the function `predict` calls. The
//! failures line counts failed, cut and never-sent requests and shows the first error
//! ([`shared::metrics::failures`]).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use shared::metrics::replicas::{FleetFigures, ReplicaSplit, TransferSummary};
use shared::metrics::{Failures, Summary, never_sent_text};
use shared::predict::{DEFAULT_SEEDS, FIELDS, Row, Values, compare, simulate_seeds_with_fleet, values};
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
    /// A fleet: the scenario's own seed's figures per replica and of the KV transfers, over the same window.
    pub fleet: Option<FleetFigures>,
}

/// The scenario simulated with [`DEFAULT_SEEDS`] seeds over `window_s` (what `predict` computes).
pub fn predicted(sc: &Scenario, window_s: Option<f64>) -> Result<Predicted, String> {
    let Scenario::Engine(e) = sc else {
        return Err("the seed model is simulated once, without seeds".into());
    };
    let (runs, fleet) = simulate_seeds_with_fleet(e, DEFAULT_SEEDS, window_s)?;
    Ok(Predicted {
        seeds: runs.iter().map(|(s, _)| *s).collect(),
        values: runs.iter().map(|(_, s)| values(s)).collect(),
        window_s,
        fleet,
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
                // No live request has completed (yet, or none ever did): the summary's zeros are no measurement, so
                // the live and error cells say "—", as the live cards do (`data-value` keeps the summary's number).
                let none_completed = live.with(|l| l.as_ref().is_some_and(|s| s.completed == 0));
                view! {
                    <table class="data numbers-table stack" data-numbers="">
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
                                        <td class="num" data-col="simulated" data-label="simulated" data-value=num_attr(r.simulated)>{cell(name, r.simulated)}</td>
                                        <td class="num faint" data-col="range" data-label="seed range" data-min=num_attr(min) data-max=num_attr(max)>{range}</td>
                                        <td class="num" data-col="live" data-label="live" data-value=num_attr(r.live)>{cell(name, r.live.filter(|_| !none_completed))}</td>
                                        <td class=err_class data-col="error" data-label="error" data-value=num_attr(r.error)>
                                            {r.error.filter(|_| !none_completed).map_or("—".to_string(), |e| format!("{:+.1} %", e * 100.0))}
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

/// One replica's row of [`FleetTable`]: the simulated and the live split (`None`: that side sent it nothing).
pub fn replica_rows<'a>(
    sim: &'a [ReplicaSplit],
    live: &'a [ReplicaSplit],
) -> Vec<(u32, Option<&'a ReplicaSplit>, Option<&'a ReplicaSplit>)> {
    let mut ids: Vec<u32> = sim.iter().chain(live).map(|r| r.replica).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|i| {
            (
                i,
                sim.iter().find(|r| r.replica == i),
                live.iter().find(|r| r.replica == i),
            )
        })
        .collect()
}

/// The KV transfer figures `(key, label, simulated, live)`: mean, p50, p99 (ms) and the count.
pub fn transfer_rows(
    sim: Option<&TransferSummary>,
    live: Option<&TransferSummary>,
) -> Vec<(&'static str, &'static str, Option<f64>, Option<f64>)> {
    type Get = fn(&TransferSummary) -> f64;
    let rows: [(&str, &str, Get); 4] = [
        ("mean_ms", "KV transfer mean", |t| t.mean_ms),
        ("p50_ms", "KV transfer p50", |t| t.p50_ms),
        ("p99_ms", "KV transfer p99", |t| t.p99_ms),
        ("transfers", "Transfers (requests)", |t| t.transfers as f64),
    ];
    rows.into_iter()
        .map(|(k, l, f)| (k, l, sim.map(f), live.map(f)))
        .collect()
}

/// A replica with a completed request: one none of whose requests completed has no cached share or TTFT, so those
/// cells say "—" (their `data-value` keeps the figure's zero, as the live cards do).
fn done(r: Option<&ReplicaSplit>) -> Option<&ReplicaSplit> {
    r.filter(|r| r.completed > 0)
}

fn opt_cell(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "—".to_string(), f)
}

/// A fleet's figures, simulated (the scenario's own seed, over the numbers table's window) beside live
/// (`[data-fleet-card]`: `table[data-fleet-replicas]` with a `tr[data-replica=<i>]` per replica and
/// `table[data-fleet-transfer]` with a `tr[data-row=<mean_ms|p50_ms|p99_ms|transfers>]`; each `td[data-col=...]`
/// holds its exact number in `data-value`). Nothing for a run that is no fleet on either side.
#[component]
pub fn FleetTable(predicted: Signal<Option<Predicted>>, live: Memo<Option<FleetFigures>>) -> impl IntoView {
    move || {
        let sim = predicted.with(|p| p.as_ref().and_then(|p| p.fleet.clone()));
        let live = live.get();
        if sim.is_none() && live.is_none() {
            return None;
        }
        let empty = Vec::new();
        let sim_reps = sim.as_ref().map_or(&empty, |f| &f.replicas);
        let live_reps = live.as_ref().map_or(&empty, |f| &f.replicas);
        let rows = replica_rows(sim_reps, live_reps);
        let (sim_t, live_t) = (
            sim.as_ref().and_then(|f| f.kv_transfer),
            live.as_ref().and_then(|f| f.kv_transfer),
        );
        let disaggregated = sim_t.is_some() || live_t.is_some();
        let v = |x: Option<f64>| num_attr(x);
        Some(view! {
            <div class="card numbers" data-fleet-card="">
                <div class="card-head">
                    <h3 class="section">"Fleet: simulated beside live"</h3>
                    <span class="spacer"></span>
                    <span class="faint small">{if sim.is_some() { "simulated: the scenario's own seed, over the table's window" } else { "simulating…" }}</span>
                </div>
                {(!rows.is_empty()).then(|| view! {
                    <table class="data numbers-table stack" data-fleet-replicas="">
                        <thead>
                            <tr>
                                <th rowspan="2">{if disaggregated { "prefill instance" } else { "replica" }}</th>
                                <th class="num" colspan="2">"requests"</th>
                                <th class="num" colspan="2">"cached share"</th>
                                <th class="num" colspan="2">"TTFT p50 " <span class="unit">"ms"</span></th>
                            </tr>
                            <tr>
                                <th class="num faint">"simulated"</th><th class="num faint">"live"</th>
                                <th class="num faint">"simulated"</th><th class="num faint">"live"</th>
                                <th class="num faint">"simulated"</th><th class="num faint">"live"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {rows.into_iter().map(|(i, s, l)| {
                                let req = |r: Option<&ReplicaSplit>| r.map(|r| r.requests as f64);
                                let cached = |r: Option<&ReplicaSplit>| r.map(|r| r.cached_share);
                                let ttft = |r: Option<&ReplicaSplit>| r.map(|r| r.ttft_p50_ms);
                                view! {
                                    <tr data-replica=i>
                                        <th scope="row" data-label=if disaggregated { "prefill instance" } else { "replica" }>{format!("#{i}")}</th>
                                        <td class="num" data-col="sim-requests" data-label="requests, simulated" data-value=v(req(s))>{opt_cell(req(s), crate::ui::fmt::count)}</td>
                                        <td class="num" data-col="live-requests" data-label="requests, live" data-value=v(req(l))>{opt_cell(req(l), crate::ui::fmt::count)}</td>
                                        <td class="num" data-col="sim-cached" data-label="cached, simulated" data-value=v(cached(s))>{opt_cell(cached(done(s)), crate::ui::fmt::pct)}</td>
                                        <td class="num" data-col="live-cached" data-label="cached, live" data-value=v(cached(l))>{opt_cell(cached(done(l)), crate::ui::fmt::pct)}</td>
                                        <td class="num" data-col="sim-ttft-p50" data-label="TTFT p50 ms, simulated" data-value=v(ttft(s))>{opt_cell(ttft(done(s)), crate::ui::fmt::num)}</td>
                                        <td class="num" data-col="live-ttft-p50" data-label="TTFT p50 ms, live" data-value=v(ttft(l))>{opt_cell(ttft(done(l)), crate::ui::fmt::num)}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                    <p class="faint small">{format!(
                        "Per {}: requests routed to it (completed or not); cached share = cached ÷ prompt tokens the server reported over its completed requests; TTFT p50 = nearest-rank median of submit → first token over its completed requests.{}",
                        if disaggregated { "prefill instance (where the router sent the request; a decode instance is picked by fewest outstanding)" } else { "replica" },
                        if disaggregated { "" } else { " Live: the replica the server or the client's router named." }
                    )}</p>
                })}
                {disaggregated.then(|| view! {
                    <table class="data numbers-table stack" data-fleet-transfer="">
                        <thead>
                            <tr>
                                <th></th>
                                <th class="num">"simulated"</th>
                                <th class="num">"live"</th>
                                <th class="num">"error"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {transfer_rows(sim_t.as_ref(), live_t.as_ref()).into_iter().map(|(k, label, s, l)| {
                                let fmt: fn(f64) -> String = if k == "transfers" { crate::ui::fmt::count } else { crate::ui::fmt::num };
                                let err = match (s, l) {
                                    (Some(s), Some(l)) if l != 0.0 && k != "transfers" => Some(s / l - 1.0),
                                    _ => None,
                                };
                                let err_class = match err {
                                    Some(e) if e.abs() > 0.25 => "num err bad",
                                    Some(e) if e.abs() > 0.10 => "num err warn",
                                    _ => "num err",
                                };
                                view! {
                                    <tr data-row=k>
                                        <th scope="row">{label} {(k != "transfers").then(|| view! { <span class="unit">"ms"</span> })}</th>
                                        <td class="num" data-col="simulated" data-label="simulated" data-value=v(s)>{opt_cell(s, fmt)}</td>
                                        <td class="num" data-col="live" data-label="live" data-value=v(l)>{opt_cell(l, fmt)}</td>
                                        <td class=err_class data-col="error" data-label="error" data-value=v(err)>{err.map_or("—".to_string(), |e| format!("{:+.1} %", e * 100.0))}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                    <p class="faint small">"KV transfer: the link's time for a completed request's prompt KV from its prefill to its decode instance (the record's kv_transfer_ms; live: the server's x-kv-transfer-ms header), part of its TTFT; mean, and nearest-rank p50 and p99."</p>
                })}
            </div>
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn split(replica: u32, requests: u64) -> ReplicaSplit {
        ReplicaSplit {
            replica,
            requests,
            completed: requests,
            request_share: 0.5,
            prompt_tokens: 100,
            cached_tokens: 50,
            cached_share: 0.5,
            ttft_p50_ms: 10.0,
            mean_in_flight: 1.0,
        }
    }

    /// A replica sent requests none of which completed has no cached share or TTFT to show (the card says "—").
    #[test]
    fn a_replica_without_a_completed_request_shows_no_cached_share_or_ttft() {
        let mut none = split(0, 3);
        none.completed = 0;
        assert!(done(Some(&none)).is_none());
        assert_eq!(done(Some(&split(1, 3))).map(|r| r.replica), Some(1));
        assert!(done(None).is_none());
    }

    #[test]
    fn replicas_of_either_side_get_a_row_and_transfers_their_figures() {
        let (sim, live) = (vec![split(0, 6), split(1, 6)], vec![split(1, 5), split(2, 1)]);
        let rows = replica_rows(&sim, &live);
        let shape: Vec<(u32, Option<u64>, Option<u64>)> = rows
            .iter()
            .map(|(i, s, l)| (*i, s.map(|s| s.requests), l.map(|l| l.requests)))
            .collect();
        assert_eq!(
            shape,
            vec![(0, Some(6), None), (1, Some(6), Some(5)), (2, None, Some(1))]
        );
        let t = TransferSummary {
            transfers: 12,
            mean_ms: 25.0,
            p50_ms: 20.0,
            p99_ms: 40.0,
        };
        let rows = transfer_rows(Some(&t), None);
        assert_eq!(
            rows.iter().map(|r| (r.0, r.2, r.3)).collect::<Vec<_>>(),
            vec![
                ("mean_ms", Some(25.0), None),
                ("p50_ms", Some(20.0), None),
                ("p99_ms", Some(40.0), None),
                ("transfers", Some(12.0), None)
            ]
        );
    }
}
