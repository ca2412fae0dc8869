//! The explorer's retention card: the cached share of session steps by the think time (tool call) before them,
//! drawn from the summary's `retention` bands ([`RetentionChart`], also in the live view), and the what-if "how
//! much host memory keeps 95 % of prefixes alive across a 60 s tool call" ([`crate::model::retention::search`],
//! in the worker as a job loaded on demand), whose answer a button applies to the explorer's profile.
//!
//! Read by tests: the chart `figure[data-chart=retention]` (series `cached share` or `live`, and `one dot per
//! band`, each with one point per band with a share); one `tr[data-band=<think_s_min>]` per band with `data-steps` and `data-share` (`""`: none); the what-if's
//! inputs `input[data-control=retention-think-s]` and `input[data-control=retention-target-pct]`, its button
//! `button[data-action=host-tier-search]`, `[data-host-tier-pending]` while it runs, the answer
//! `[data-host-tier-answer]` with `data-tokens` (`""`: not reachable), `data-bytes` (`""`: unknown),
//! `data-band-min` and `data-reachable`; `[data-host-tier-error]`; `button[data-action=apply-host-tier]`.

use leptos::prelude::*;
use serde_json::Value;
use shared::metrics::Retention;
use shared::scenario::Scenario;

use crate::model::retention::{HostTierAnswer, band_at, band_label, curve, with_host_tier};
use crate::model::state::Explorer;
use crate::ui::charts::{LineChart, PALETTE, Series, Threshold};
use crate::worker::offload::{self, Lane};
use crate::worker::wire::{Done, Job, OnDemand, from_bytes};

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{:.1} %", v * 100.0))
}

/// `1,234,567` tokens.
fn tokens(n: u64) -> String {
    crate::ui::fmt::num(n as f64)
}

/// The curve of one run's bands (`primary`), another run's as a dashed line (`other`, e.g. the simulation beside a
/// live run), and reference lines (`marks`).
#[component]
pub fn RetentionChart(
    #[prop(into)] primary: Signal<Vec<Retention>>,
    primary_name: &'static str,
    #[prop(into, optional)] other: Signal<Vec<Retention>>,
    #[prop(optional)] other_name: &'static str,
    #[prop(into, optional)] marks: Signal<Vec<Threshold>>,
) -> impl IntoView {
    let series = Signal::derive(move || {
        let mut out = Vec::new();
        let p = curve(&primary.get());
        if !p.is_empty() {
            out.push(Series::line(primary_name, PALETTE[0], p.clone()));
            out.push(Series::dots("one dot per band", PALETTE[0], p));
        }
        let o = curve(&other.get());
        if !o.is_empty() {
            out.push(Series::line(other_name, PALETTE[1], o).dashed());
        }
        out
    });
    view! {
        <LineChart
            id="retention"
            title="Cached share of a step vs the think time (tool call) before it"
            x_label="think time before the step, s (each point: a band's middle)"
            y_label="cached share of its prompt"
            series=series
            thresholds=marks
            y_max=1.0
            empty="no session step after a think time"
        />
    }
}

/// The bands as a table: think time, steps, cached share.
#[component]
pub fn RetentionTable(#[prop(into)] bands: Signal<Vec<Retention>>) -> impl IntoView {
    view! {
        <div class="table-scroll">
            <table class="data retention-bands">
                <thead><tr><th>"think time before the step"</th><th>"steps"</th><th>"cached share"</th></tr></thead>
                <tbody>
                    {move || bands.get().into_iter().map(|b| view! {
                        <tr
                            data-band=b.think_s_min.to_string()
                            data-steps=b.steps.to_string()
                            data-share=b.cached_share.map(|s| s.to_string()).unwrap_or_default()
                        >
                            <td>{band_label(b.think_s_min, b.think_s_max)}</td>
                            <td>{b.steps.to_string()}</td>
                            <td>{pct(b.cached_share)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// The card (nothing for a result without session steps after a think time).
#[component]
pub fn RetentionCard(ex: Explorer) -> impl IntoView {
    let bands = Signal::derive(move || {
        ex.outcome
            .with(|o| o.as_ref().map(|o| o.retention.clone()).unwrap_or_default())
    });
    let think_s = RwSignal::new(60.0_f64);
    let target_pct = RwSignal::new(95.0_f64);
    let input_error = RwSignal::new(None::<String>);
    // The what-if's answer, with the scenario it was computed for (shown only while the explorer still has it).
    let answer = RwSignal::new(None::<(Value, Result<HostTierAnswer, String>)>);
    let pending = RwSignal::new(false);
    let generation = StoredValue::new(0u64);
    let current = move || {
        answer.with(|a| match a {
            Some((v, r)) if ex.json.with(|j| j == v) => Some(r.clone()),
            _ => None,
        })
    };
    let marks = Signal::derive(move || {
        vec![
            Threshold {
                label: format!("{} s tool call", think_s.get()),
                value: think_s.get(),
                vertical: true,
            },
            Threshold {
                label: format!("{} %", target_pct.get()),
                value: target_pct.get() / 100.0,
                vertical: false,
            },
        ]
    });
    let search = move |_| {
        let (t, p) = (think_s.get_untracked(), target_pct.get_untracked());
        let json = ex.json.get_untracked();
        let sc = match Scenario::from_value(json.clone()) {
            Ok(sc) => sc,
            Err(e) => {
                answer.set(Some((json, Err(e.to_string()))));
                return;
            }
        };
        let g = offload::new_generation();
        generation.set_value(g);
        pending.set(true);
        let size = crate::model::compute::size_of(&sc) * 20.0;
        let job = Job::OnDemand(OnDemand::HostTier, sc.to_value(), vec![t, p / 100.0]);
        offload::submit(Lane::Explorer, g, size, job, move |f| {
            if generation.try_get_value() != Some(g) {
                return;
            }
            pending.set(false);
            let r = match (f.failure, f.done) {
                (Some(why), _) => Err(format!("the search stopped: {why}")),
                (None, Done::Bytes(Ok(b))) => from_bytes::<HostTierAnswer>(&b).map_err(|e| e.to_string()),
                (None, Done::Bytes(Err(e))) => Err(e),
                (None, other) => Err(format!("unexpected answer {other:?}")),
            };
            answer.set(Some((json, r)));
        });
    };
    let number_input = move |id: &'static str, sig: RwSignal<f64>, lo: f64, hi: f64, what: &'static str| {
        view! {
            <input
                type="number"
                data-control=id
                min=lo
                max=hi
                step="any"
                value=sig.get_untracked().to_string()
                on:change=move |ev| set_number(&event_target_value(&ev), sig, input_error, (lo, hi), what)
            />
        }
    };
    let result = move || {
        current().map(|r| match r {
            Err(e) => {
                view! { <p class="callout warn" data-host-tier-error="">{format!("No answer: {e}")}</p> }.into_any()
            }
            Ok(w) => answer_view(ex, w).into_any(),
        })
    };
    view! {
        <Show when=move || bands.with(|b| !b.is_empty())>
            <div class="card retention" data-retention-card="">
                <h2>"Retention across tool calls"</h2>
                <p class="faint">
                    "While an agent runs a tool, its conversation's prefix waits in the KV cache; the longer the wait, the "
                    "likelier it is evicted and recomputed. Each point is one band of think time (the time from a step's end "
                    "to the session's next request): the share of those steps' prompt tokens found cached."
                </p>
                <RetentionChart primary=bands primary_name="cached share" marks=marks/>
                <RetentionTable bands=bands/>
                <h3>"What-if: host memory for the prefixes"</h3>
                <p class="faint">
                    "How much host memory (a KV tier below the GPU's) keeps the prefixes alive across a tool call? The search "
                    "runs this scenario in your browser with the profile's host tier at growing sizes, then bisects, until the "
                    "cached share of the steps in the think-time band that holds the tool call's length (60 s: the 60–120 s "
                    "band above) reaches the target. The profile's first KV tier is resized; a profile without one gets a host "
                    "tier written on eviction, LRU, restored at 25 GB/s."
                </p>
                <div class="preset-row">
                    <label>"tool call (s)" {number_input("retention-think-s", think_s, 0.0, 86_400.0, "the tool call's length")}</label>
                    <label>"cached share (%)" {number_input("retention-target-pct", target_pct, 1.0, 100.0, "the cached share")}</label>
                    <button
                        class="btn small"
                        data-action="host-tier-search"
                        disabled=move || pending.get() || input_error.with(Option::is_some)
                        on:click=search
                    >
                        "Find the host memory"
                    </button>
                    <span class="faint" data-host-tier-pending="" class:hidden=move || !pending.get()>"searching…"</span>
                </div>
                {move || input_error.get().map(|e| view! { <p class="callout warn">{e}</p> })}
                <p class="muted" data-host-tier-now="">{move || bands.with(|b| {
                    let t = think_s.get();
                    match band_at(b, t) {
                        Some(x) => format!(
                            "Now: the {} band holds {} steps, {} of their prompt tokens cached.",
                            band_label(x.think_s_min, x.think_s_max),
                            x.steps,
                            pct(x.cached_share)
                        ),
                        None => format!("No step of this run comes after a think time in the band that holds {t} s."),
                    }
                })}</p>
                {result}
            </div>
        </Show>
    }
}

/// A number typed into one of the what-if's inputs: kept when within `lo..=hi`, else an error naming it.
fn set_number(text: &str, sig: RwSignal<f64>, error: RwSignal<Option<String>>, (lo, hi): (f64, f64), what: &str) {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (lo..=hi).contains(&v) => {
            error.set(None);
            sig.set(v);
        }
        _ => error.set(Some(format!("{what} must be a number from {lo} to {hi}"))),
    }
}

fn answer_view(ex: Explorer, w: HostTierAnswer) -> impl IntoView {
    let band = band_label(w.band_min_s, w.band_max_s);
    let gb = |b: f64| format!("{:.2} GB", b / 1e9);
    let (headline, reachable) = match w.answer_tokens {
        Some(0) => (
            format!(
                "No host tier needed: the {band} band is already at {} (target {}).",
                pct(w.share_now),
                pct(Some(w.target))
            ),
            true,
        ),
        Some(t) if t == w.capacity_now => (
            format!(
                "The {} tier as it is ({} tokens) already gives {}.",
                w.tier,
                tokens(t),
                pct(w.share_now)
            ),
            true,
        ),
        Some(t) => (
            format!(
                "{} tokens of host memory{} keep {} of the {band} band's prompt tokens cached (now {}).",
                tokens(t),
                w.answer_bytes().map(|b| format!(" ({})", gb(b))).unwrap_or_default(),
                pct(Some(w.target)),
                pct(w.share_now)
            ),
            true,
        ),
        None => (
            format!(
                "Not reachable: even a huge tier ({} tokens{}: every prompt token of the run) gives the {band} band only {}. \
                 The misses left are not evictions (new tool output, first steps, or the GPU's own cache).",
                tokens(w.ceiling_tokens),
                w.kv_bytes_per_token
                    .map(|k| format!(", {}", gb(w.ceiling_tokens as f64 * k)))
                    .unwrap_or_default(),
                pct(w.ceiling_share)
            ),
            false,
        ),
    };
    let bytes_note = match w.kv_bytes_per_token {
        Some(k) => format!("{} B of KV per token (the deployment's).", tokens(k as u64)),
        None => "No deployment: the bytes per token are unknown, so the answer is in tokens.".to_string(),
    };
    let how = format!(
        "{} simulations; {} tier {}; answer within 1 % (or a block). {bytes_note}",
        w.probes.len() + 1,
        w.tier,
        if w.added { "added" } else { "resized" },
    );
    let apply = w.answer_tokens.filter(|&t| t > 0 && t != w.capacity_now).map(|t| {
        view! {
            <button
                class="btn small"
                data-action="apply-host-tier"
                title="Set this host tier in the explorer's profile (a deployment's scenario becomes its profile with the tier)"
                on:click=move |_| {
                    if let Some(Scenario::Engine(e)) = ex.scenario() {
                        ex.set_scenario(&Scenario::Engine(with_host_tier(&e, t)));
                    }
                }
            >
                {format!("Apply a {} tier of {} tokens to the profile", w.tier, tokens(t))}
            </button>
        }
    });
    let probes = w
        .probes
        .iter()
        .map(|p| format!("{} → {}", tokens(p.capacity_tokens), pct(p.share)))
        .collect::<Vec<_>>()
        .join(", ");
    view! {
        <div class="host-tier-answer">
            <p
                data-host-tier-answer=""
                data-tokens=w.answer_tokens.map(|t| t.to_string()).unwrap_or_default()
                data-bytes=w.answer_bytes().map(|b| b.to_string()).unwrap_or_default()
                data-band-min=w.band_min_s.to_string()
                data-reachable=reachable.to_string()
                class:callout=true
                class:good=reachable
                class:warn=!reachable
            >
                <strong>{headline}</strong>
            </p>
            {apply}
            <p class="faint">{how}</p>
            <p class="faint">{format!("Capacities tried (tokens → the band's cached share): {probes}.")}</p>
        </div>
    }
}
