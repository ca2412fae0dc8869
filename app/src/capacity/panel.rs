//! The explorer's "capacity" card: [`crate::capacity::view::capacity_view`] of the explorer's scenario (in the
//! worker, as [`crate::worker::wire::OnDemand::Capacity`], a job loaded on demand), the goodput-vs-load curve of its levels with the knee (the capacity) marked,
//! and the level table. Recomputed after each explorer result; a newer edit supersedes a running search.
//!
//! Read by tests: `[data-capacity]` (`data-value`: the capacity, `""` when none), `[data-capacity-knob]`,
//! `[data-capacity-levels]` (levels run), `[data-capacity-ms]` (the search's own time), one `tr[data-level]` per
//! level with `data-load`, `data-pass` and `data-saturation`; the chart is `figure[data-chart=capacity-knee]`.

use leptos::prelude::*;
use shared::scenario::Scenario;

use crate::capacity::view::{CapacityView, LevelRow, capacity_view};
use crate::model::state::Explorer;
use crate::ui::charts::{LineChart, PALETTE, Series, Threshold};
use crate::worker::offload::{self, Lane};
use crate::worker::wire::{Done, Job, OnDemand, from_bytes};

fn num(v: f64, digits: usize) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The card.
#[component]
pub fn CapacityCard(ex: Explorer) -> impl IntoView {
    let result = RwSignal::new(None::<Result<CapacityView, String>>);
    let ms = RwSignal::new(None::<f64>);
    let running = RwSignal::new(false);
    let generation = StoredValue::new(0u64);
    // After each explorer result: search its scenario (the explorer's next edit supersedes a queued search).
    Effect::new(move |_| {
        if ex.outcome.with(Option::is_none) {
            return;
        }
        let Ok(sc) = Scenario::from_value(ex.json.get_untracked()) else {
            return;
        };
        if !matches!(sc, Scenario::Engine(_)) {
            result.set(Some(capacity_view(&sc)));
            return;
        }
        let g = offload::new_generation();
        generation.set_value(g);
        running.set(true);
        let size = crate::model::compute::size_of(&sc) * 8.0;
        offload::submit(
            Lane::Explorer,
            g,
            size,
            Job::OnDemand(OnDemand::Capacity, sc.to_value(), Vec::new()),
            move |f| {
                if generation.try_get_value() != Some(g) {
                    return;
                }
                running.set(false);
                ms.set(Some(f.ms));
                match (f.failure, f.done) {
                    (Some(why), _) => result.set(Some(Err(format!("The capacity search stopped: {why}")))),
                    (None, Done::Bytes(r)) => {
                        result.set(Some(r.and_then(|b| from_bytes(&b).map_err(|e| e.to_string()))))
                    }
                    _ => {}
                }
            },
        );
    });
    let chart = Signal::derive(move || {
        result.with(|r| match r {
            Some(Ok(v)) => {
                let mut pts: Vec<&LevelRow> = v.levels.iter().collect();
                shared::order::sort_by_f64_key(&mut pts, |l| l.load);
                vec![
                    Series::line(
                        "goodput",
                        PALETTE[2],
                        pts.iter().map(|l| (l.load, l.goodput_rps)).collect(),
                    ),
                    Series::line(
                        "throughput",
                        PALETTE[0],
                        pts.iter().map(|l| (l.load, l.throughput_rps)).collect(),
                    )
                    .dashed(),
                ]
            }
            _ => Vec::new(),
        })
    });
    let knee = Signal::derive(move || {
        result.with(|r| match r {
            Some(Ok(CapacityView { capacity: Some(c), .. })) => vec![Threshold {
                label: format!("capacity {}", num(*c, 3)),
                value: *c,
                vertical: true,
            }],
            _ => Vec::new(),
        })
    });
    let body = move || {
        result.get().map(|r| match r {
            Err(e) => view! { <p class="muted" data-capacity-error="">{e}</p> }.into_any(),
            Ok(v) => {
                let value = v.capacity.map(|c| c.to_string()).unwrap_or_default();
                let shown = v
                    .capacity
                    .map_or_else(|| "none: even the lowest load fails".to_string(), |c| num(c, 3));
                let rows = v
                    .levels
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        let opt = |x: Option<f64>, f: fn(f64) -> String| x.map_or_else(|| "–".to_string(), f);
                        view! {
                            <tr data-level=(i + 1).to_string() data-load=l.load.to_string() data-pass=l.pass.to_string() data-saturation=l.saturation.clone()>
                                <td>{(i + 1).to_string()}</td>
                                <td>{num(l.load, 3)}</td>
                                <td class=if l.pass { "good" } else { "bad" }>{if l.pass { "yes" } else { "no" }}</td>
                                <td>{format!("{:.3}", l.attainment)}</td>
                                <td>{format!("{:.2}", l.goodput_rps)}</td>
                                <td>{format!("{:.0}", l.ttft_p50_ms)}</td>
                                <td>{format!("{:.0}", l.ttft_p99_ms)}</td>
                                <td>{format!("{:.1}", l.tpot_p50_ms)}</td>
                                <td>{format!("{:.1}", l.tpot_p99_ms)}</td>
                                <td>{opt(l.kv_peak_use, |u| format!("{:.1} %", u * 100.0))}</td>
                                <td>{l.preemptions.map_or_else(|| "–".to_string(), |p| p.to_string())}</td>
                                <td>{opt(l.cached_share, |u| format!("{:.1} %", u * 100.0))}</td>
                                <td>{l.saturation.clone()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                let notes = v.notes.iter().map(|n| view! { <p class="faint">{n.clone()}</p> }).collect_view();
                view! {
                    <p>
                        "Capacity: " <strong data-capacity=value>{format!("{} = {shown}", v.knob)}</strong>
                        <span class="faint" data-capacity-knob=v.knob.clone() data-capacity-levels=v.levels.len().to_string()>
                            {format!(" ({} levels, resolution {}; goal: the scenario's SLOs for 95 % of requests)", v.levels.len(), num(v.resolution, 3))}
                        </span>
                    </p>
                    // Thirteen columns: scrolls sideways on a phone instead of widening the page.
                    <div class="table-scroll">
                    <table class="data levels">
                        <thead><tr><th>"#"</th><th>"load"</th><th>"pass"</th><th>"attain"</th><th>"goodput/s"</th><th>"TTFT p50"</th><th>"TTFT p99"</th><th>"TPOT p50"</th><th>"TPOT p99"</th><th>"KV peak"</th><th>"preempt"</th><th>"cached"</th><th>"class"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                    </div>
                    {notes}
                }
                .into_any()
            }
        })
    };
    view! {
        <div class="card capacity" data-capacity-card="">
            <h2>"Capacity"</h2>
            <p class="faint">
                "The most load this scenario's engine serves within its SLOs: doubling, then bisection, in the simulator. "
                "Each level is scored on its steady state: the first 20 % of its run (the warm-up, at least the time all "
                "sessions take to start) is left out, so a level's numbers differ from the cards above at the same load. "
                <span data-capacity-ms=move || ms.get().map(|m| m.to_string()).unwrap_or_default()>
                    {move || ms.get().map(|m| format!("Searched in {m:.0} ms.")).unwrap_or_default()}
                </span>
                {move || running.get().then_some(" searching…")}
            </p>
            <LineChart id="capacity-knee" title="Goodput vs load (search levels)" x_label="load" y_label="req/s" series=chart thresholds=knee empty="searching…"/>
            {body}
            <crate::capacity::gpus::GpuSection ex=ex/>
        </div>
    }
}
