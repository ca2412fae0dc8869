//! The capacity card's "GPUs at this load" section, for a scenario with a deployment: the fewest replicas (GPUs =
//! replicas × TP) that keep its SLOs at its own load over five seeds, as `loadshape capacity --simulate
//! --replicas-for-slo` answers ([`crate::capacity::view::gpus_view`]), and with a GPU-hour price typed in, the cost
//! per agent session and per million tokens with the seeds' range. The search runs in the worker as a job loaded on
//! demand ([`crate::worker::wire::OnDemand::Gpus`]): its code is in none of the page's modules until a deployment
//! asks for it.
//!
//! Read by tests: `[data-gpus-card]` with `[data-gpus]` (the median GPUs over the seeds in `data-gpus`),
//! `input[data-control=gpu-hour-price]`, `[data-cost-per-session]` and `[data-cost-per-million-tokens]` (the
//! medians at that price), `[data-gpus-error]`, `[data-gpus-pending]` while it searches.

use leptos::prelude::*;
use shared::replicas::Band;
use shared::scenario::Scenario;

use crate::capacity::view::GpuView;
use crate::model::state::Explorer;
use crate::worker::offload::{self, Lane};
use crate::worker::wire::{Done, Job, OnDemand, from_bytes};

/// `median (seeds: min – max)`, or the one value when every seed agrees.
fn band_text(b: &Band, f: impl Fn(f64) -> String) -> String {
    if b.min == b.max {
        f(b.median)
    } else {
        format!("{} (seeds: {} – {})", f(b.median), f(b.min), f(b.max))
    }
}

/// The section (nothing for a scenario without a deployment).
#[component]
pub fn GpuSection(ex: Explorer) -> impl IntoView {
    let result = RwSignal::new(None::<Result<GpuView, String>>);
    let pending = RwSignal::new(false);
    let generation = StoredValue::new(0u64);
    // The GPU-hour price typed in (the costs are proportional to it).
    let price = RwSignal::new(None::<f64>);
    Effect::new(move |_| {
        if ex.outcome.with(Option::is_none) {
            return;
        }
        let sc = match Scenario::from_value(ex.json.get_untracked()) {
            Ok(Scenario::Engine(e)) if e.deployment.is_some() => Scenario::Engine(e),
            _ => {
                result.set(None);
                pending.set(false);
                return;
            }
        };
        let g = offload::new_generation();
        generation.set_value(g);
        pending.set(true);
        // Up to five seeds, each a search over replica counts.
        let size = crate::model::compute::size_of(&sc) * 40.0;
        offload::submit(
            Lane::Explorer,
            g,
            size,
            Job::OnDemand(OnDemand::Gpus, sc.to_value(), Vec::new()),
            move |f| {
                if generation.try_get_value() != Some(g) {
                    return;
                }
                pending.set(false);
                result.set(Some(match (f.failure, f.done) {
                    (Some(why), _) => Err(format!("the search stopped: {why}")),
                    (None, Done::Bytes(Ok(b))) => from_bytes::<GpuView>(&b).map_err(|e| e.to_string()),
                    (None, Done::Bytes(Err(e))) => Err(e),
                    (None, other) => Err(format!("unexpected answer {other:?}")),
                }));
            },
        );
    });
    let body = move || {
        result.get().map(|r| match r {
            Err(e) => view! { <p class="muted" data-gpus-error="">{format!("GPUs at this load: {e}")}</p> }.into_any(),
            Ok(g) => gpu_view(g, price).into_any(),
        })
    };
    view! {
        <Show when=move || pending.get() || result.with(Option::is_some)>
            <div class="gpus-at-slo" data-gpus-card="">
                <h3>"GPUs at this load"</h3>
                <p class="faint" data-gpus-pending="" class:hidden=move || !pending.get()>
                    "counting the GPUs this deployment needs (five seeds, in the background)…"
                </p>
                {body}
            </div>
        </Show>
    }
}

fn gpu_view(g: GpuView, price: RwSignal<Option<f64>>) -> impl IntoView {
    let count = |v: f64| format!("{v:.0}");
    let gpus = g.gpus.map(|b| b.median.to_string()).unwrap_or_default();
    let answer = match (g.gpus, g.replicas) {
        (Some(gb), Some(rb)) => format!(
            "{} GPU{} = {} replica{} × TP{}",
            band_text(&gb, count),
            if gb.max == 1.0 { "" } else { "s" },
            band_text(&rb, count),
            if rb.max == 1.0 { "" } else { "s" },
            g.tp
        ),
        _ => format!("not met with up to 256 replicas at any of {} seeds", g.seeds),
    };
    let detail = format!(
        " ({} router; {} seeds{}; {} simulations)",
        g.router,
        g.seeds,
        if g.unmet_seeds > 0 {
            format!(", {} not met", g.unmet_seeds)
        } else {
            String::new()
        },
        g.levels_run
    );
    let (per_session, per_mtok) = (g.cost_per_session, g.cost_per_million_tokens);
    let costs = move || {
        let p = price.get()?;
        let money = |v: f64| format!("{:.4}", v * p);
        let exact = |b: Option<Band>| b.map(|b| (b.median * p).to_string()).unwrap_or_default();
        let text = |b: Option<Band>| b.map_or_else(|| "–".to_string(), |b| band_text(&b, money));
        Some(view! {
            <p data-costs="">
                "Cost per agent session: " <strong data-cost-per-session=exact(per_session)>{text(per_session)}</strong>
                " · per million tokens: " <strong data-cost-per-million-tokens=exact(per_mtok)>{text(per_mtok)}</strong>
                <span class="faint">" (in the price's currency; the range is over the seeds)"</span>
            </p>
        })
    };
    let notes = g
        .notes
        .into_iter()
        .map(|n| view! { <p class="faint">{n}</p> })
        .collect_view();
    view! {
        <p>
            "The fewest GPUs of this deployment that keep the SLOs for 95 % of requests at the scenario's own load: "
            <strong data-gpus=gpus>{answer}</strong>
            <span class="faint">{detail}</span>
        </p>
        <div class="preset-row">
            <label for="gpu-hour-price">"GPU-hour price"</label>
            <input
                type="number"
                id="gpu-hour-price"
                data-control="gpu-hour-price"
                min="0"
                step="0.01"
                placeholder="e.g. 2.50"
                value=price.get_untracked().map(|p| p.to_string()).unwrap_or_default()
                on:input=move |ev| {
                    let v = event_target_value(&ev).trim().parse::<f64>().ok().filter(|p| p.is_finite() && *p > 0.0);
                    price.set(v);
                }
            />
        </div>
        {costs}
        {notes}
    }
}
