//! The what-if explorer: scenario controls on the left; summary, charts and diagnostics on the right.

pub mod controls;
pub mod deployment;
pub mod fields;
pub mod retention;
pub mod seed_band;
pub mod seed_panel;
pub mod session_timeline;
pub mod target_profile;
pub mod trace_panel;

use leptos::prelude::*;

use crate::explorer::controls::Controls;
use crate::model::compute::{self, Outcome, Severity};
use crate::model::state::Explorer;
use crate::ui::charts::{LineChart, PALETTE, Series, Threshold};
use crate::ui::metric::{Metric, unit_of};

use crate::ui::metric::HEADLINE;

/// The explorer view.
#[component]
pub fn ExplorerView(ex: Explorer) -> impl IntoView {
    view! {
        <div class="explorer">
            <aside class="card controls">
                <ScenarioHeader ex=ex/>
                {crate::later(ex.settled(), move || crate::target_profile_switch(ex))}
                <Controls json=ex.json/>
                {crate::later(ex.settled(), move || crate::scenario_json(ex))}
            </aside>
            <div
                class="results"
                data-summary="explorer"
                data-first-result-ms=move || ex.first_result_ms.get().map(|v| format!("{v:.0}")).unwrap_or_default()
            >
                {crate::later(ex.settled(), move || crate::action_bar(ex))}
                <StatusLine ex=ex/>
                <SummaryCards ex=ex/>
                {crate::later(ex.settled(), move || crate::deployment_card(ex))}
                <ChartsGrid ex=ex/>
                {crate::later(ex.settled(), move || crate::retention_card(ex))}
                {crate::later(ex.settled(), move || crate::capacity_card(ex))}
                {crate::later(ex.settled(), move || crate::explorer_details(ex))}
            </div>
        </div>
    }
}

/// Model switch and presets.
#[component]
fn ScenarioHeader(ex: Explorer) -> impl IntoView {
    let model = Memo::new(move |_| {
        ex.json
            .with(|j| j.get("model").and_then(|m| m.as_str()).unwrap_or("seed").to_string())
    });
    let presets = shared::presets::all();
    let basis = RwSignal::new(None::<String>);
    // The preset applied last and the scenario it gave: it stays shown, "(modified)" once the scenario differs.
    let applied = RwSignal::new(None::<(String, serde_json::Value)>);
    let modified = Memo::new(move |_| applied.with(|a| a.as_ref().map(|(_, j)| ex.json.with(|now| now != j))));
    view! {
        <div class="card-head">
            <h2>"Scenario"</h2>
            <span class="spacer"></span>
            <div class="segmented" role="group" aria-label="model">
                {compute::MODELS
                    .into_iter()
                    .map(|(id, label)| {
                        view! {
                            <button
                                data-model=id
                                class:active=move || model.get() == id
                                on:click=move |_| {
                                    if model.get_untracked() != id
                                        && let Some(sc) = shared::presets::default_for_model(id)
                                    {
                                        ex.set_scenario(&sc);
                                        basis.set(None);
                                        applied.set(None);
                                    }
                                }
                            >
                                {label}
                            </button>
                        }
                    })
                    .collect_view()}
            </div>
        </div>
        <div class="preset-row">
            <label for="preset">"Preset"</label>
            <select
                id="preset"
                data-control="preset"
                data-preset-state=move || match (applied.get(), modified.get()) {
                    (Some((id, _)), Some(true)) => format!("{id} modified"),
                    (Some((id, _)), _) => id,
                    _ => String::new(),
                }
                prop:value=move || applied.with(|a| a.as_ref().map(|(id, _)| id.clone()).unwrap_or_default())
                on:change=move |ev| {
                    let name = event_target_value(&ev);
                    // A preset applies to the scenario shown, or to the default one while that is invalid.
                    let current = ex.scenario().unwrap_or_else(shared::presets::default_scenario);
                    if let Some(p) = shared::presets::Preset::by_id(&name)
                        && let Ok(sc) = p.apply(&current)
                    {
                        basis.set(Some(format!("{}: {}", p.label, p.basis)));
                        ex.set_scenario(&sc);
                        applied.set(Some((p.id.clone(), ex.json.get_untracked())));
                    }
                }
            >
                <option value="">"choose a preset…"</option>
                {presets
                    .into_iter()
                    .map(|p| {
                        let id = p.id.clone();
                        let label = p.label.clone();
                        let text = move || {
                            let this = applied.with(|a| a.as_ref().is_some_and(|(a, _)| *a == id));
                            if this && modified.get() == Some(true) { format!("{label} (modified)") } else { label.clone() }
                        };
                        view! { <option value=p.id.clone()>{text}</option> }
                    })
                    .collect_view()}
            </select>
        </div>
        <Show when=move || model.get() == "engine">
            <div class="preset-row">
                <label for="workload-kind">"Workload"</label>
                <select
                    id="workload-kind"
                    data-control="workload-kind"
                    prop:value=move || {
                        ex.json.with(|j| j.pointer("/workload/kind").and_then(|k| k.as_str()).unwrap_or("").to_string())
                    }
                    on:change=move |ev| {
                        if let Some(w) = compute::default_workload(&event_target_value(&ev)) {
                            ex.set_at("/workload", w);
                        }
                    }
                >
                    {shared::presets::WORKLOAD_KINDS
                        .into_iter()
                        .map(|id| view! { <option value=id>{compute::workload_label(id)}</option> })
                        .collect_view()}
                </select>
            </div>
        </Show>
        {move || basis.get().map(|b| view! { <p class="basis" data-basis=""><strong>"Basis: "</strong>{b}</p> })}
    }
}

/// The explorer's actions, in a bar that stays in view above the results: copy link, pin as A, compare, reset,
/// and launch (the live view, where the target is chosen).
#[component]
pub fn ActionBar(ex: Explorer) -> impl IntoView {
    let view_tab = use_context::<RwSignal<crate::View>>();
    let copied = RwSignal::new(None::<String>);
    let copy = move |_| {
        let Some(sc) = ex.scenario() else {
            copied.set(Some("fix the scenario first".to_string()));
            return;
        };
        let link = shared::link::link_url(&crate::model::url::page_base(), &sc);
        if let Some(w) = web_sys::window() {
            let _ = w.navigator().clipboard().write_text(&link);
        }
        copied.set(Some(link));
    };
    let pin = move |_| {
        if let Some(o) = ex.outcome.get_untracked() {
            ex.pinned.set(Some(crate::model::state::Pinned {
                json: ex.json.get_untracked(),
                outcome: o,
                band: ex.band.get_untracked(),
            }));
        }
    };
    let go = move |v: crate::View| {
        if let Some(t) = view_tab {
            t.set(v);
            if let Some(w) = web_sys::window() {
                w.scroll_to_with_x_and_y(0.0, 0.0);
            }
        }
    };
    let pinned = move || ex.pinned.with(Option::is_some);
    view! {
        <div class="action-bar" role="toolbar" aria-label="Scenario actions" data-action-bar="">
            <button class="btn primary" data-action="copy-link" on:click=copy>"Copy link"</button>
            <button
                class="btn"
                data-action="pin"
                on:click=pin
                title="Keep this result as A: the charts overlay it and Compare sets it beside the current one"
            >
                {move || if pinned() { "Pin again as A" } else { "Pin as A" }}
            </button>
            <button
                class="btn"
                data-action="go-compare"
                on:click=move |_| go(crate::View::Compare)
                title=move || if pinned() { "A (pinned) beside the current scenario" } else { "Pin a result as A first" }
            >
                "Compare"
            </button>
            <button
                class="btn"
                data-action="reset"
                on:click=move |_| ex.json.set(compute::default_scenario())
            >
                "Reset"
            </button>
            <span class="spacer"></span>
            <button
                class="btn"
                data-action="go-live"
                on:click=move |_| go(crate::View::Live)
                title="Run this scenario against a real server (the Live view)"
            >
                "Launch live…"
            </button>
        </div>
        {move || {
            copied
                .get()
                .map(|l| {
                    view! {
                        <div class="copied">
                            <span class="muted">"Link copied:"</span>
                            <input type="text" readonly aria-label="Share link" data-share-link="" prop:value=l/>
                        </div>
                    }
                })
        }}
    }
}

/// The scenario as JSON, to read or paste.
#[component]
pub fn ScenarioJson(ex: Explorer) -> impl IntoView {
    let json_text = RwSignal::new(String::new());
    let json_error = RwSignal::new(None::<String>);
    view! {
        <details
            class="json-box"
            on:toggle=move |_| json_text.set(serde_json::to_string_pretty(&ex.json.get_untracked()).unwrap_or_default())
        >
            <summary>"Scenario JSON"</summary>
            <textarea rows="14" aria-label="Scenario JSON" data-control="scenario-json" prop:value=move || json_text.get() on:input=move |ev| json_text.set(event_target_value(&ev))></textarea>
            <div class="actions">
                <button
                    class="btn small"
                    data-action="apply-json"
                    on:click=move |_| {
                        match shared::scenario::Scenario::from_json(&json_text.get_untracked()) {
                            Ok(sc) => {
                                json_error.set(None);
                                ex.set_scenario(&sc);
                            }
                            Err(e) => json_error.set(Some(e.to_string())),
                        }
                    }
                >
                    "Apply"
                </button>
                <span class="faint">"the same format the command line reads"</span>
            </div>
            {move || json_error.get().map(|e| view! { <p class="callout bad">{e}</p> })}
        </details>
    }
}

/// Link problems, validation errors, computing state and timing.
#[component]
fn StatusLine(ex: Explorer) -> impl IntoView {
    // Seconds since the running computation was asked for, refreshed while it runs (the page stays live).
    let elapsed = RwSignal::new(None::<f64>);
    if let Ok(handle) = set_interval_with_handle(
        move || {
            let since = ex.computing_since.get_untracked();
            let shown = since
                .map(|t0| (crate::worker::offload::now_ms() - t0) / 1000.0)
                .filter(|s| *s >= 0.5);
            if shown.is_some() || elapsed.get_untracked().is_some() {
                elapsed.set(shown);
            }
        },
        std::time::Duration::from_millis(100),
    ) {
        on_cleanup(move || handle.clear());
    }
    view! {
        {move || {
            ex.link_message
                .get()
                .map(|m| {
                    view! {
                        <div class="banner warn" data-link-error="">
                            <span>{m}</span>
                            <button class="btn small close" aria-label="Dismiss the link message" on:click=move |_| ex.link_message.set(None)>"Dismiss"</button>
                        </div>
                    }
                })
        }}
        {move || {
            ex.error.get().map(|e| {
                // Name the box the value was typed in: serde's message may name only the enclosing object.
                let at = ex.error_at.get();
                let text = match &at {
                    Some(p) => format!("{e} (the value just set at {p})"),
                    None => e,
                };
                view! { <div class="banner bad" data-scenario-error="" data-error-at=at.unwrap_or_default()>{text}</div> }
            })
        }}
        {move || {
            ex.compute_error
                .get()
                .map(|e| view! { <div class="banner bad" data-compute-error="">{e}</div> })
        }}
        <div class="status-line">
            <span class="computing" class:hidden=move || !ex.computing.get() data-computing="">
                <span class="spinner"></span>
                "computing…"
                {move || elapsed.get().map(|s| format!(" {s:.1} s"))}
                // Re-read whenever "computing" changes: where the next run goes is known only then.
                {move || (ex.computing.get() && crate::worker::offload::mode() == "worker").then_some(" (in the background: the page stays usable)")}
            </span>
            {move || {
                ex.needs_run
                    .get()
                    .then(|| {
                        view! {
                            <span class="muted" data-needs-run="">
                                "Large scenario, and no background worker here: computing it freezes the page, so it is not recomputed on every edit. "
                            </span>
                            <button class="btn small primary" data-action="run" on:click=move |_| ex.run_now()>"Run"</button>
                        }
                    })
            }}
            <span
                class="faint"
                data-compute-ms=move || ex.compute_ms.get().map(|v| format!("{v:.2}")).unwrap_or_default()
                data-computed-in=move || ex.computed_in.get().unwrap_or_default()
                data-memory-mb=move || ex.memory_bytes.get().map(|b| format!("{:.0}", b / 1_048_576.0)).unwrap_or_default()
            >
                {move || {
                    let o = ex.outcome.get()?;
                    let ms = ex.compute_ms.get()?;
                    let place = if ex.computed_in.get() == Some("worker") { " (background worker)" } else { "" };
                    Some(format!("{} · computed in your browser{place} in {ms:.1} ms", o.describe))
                }}
            </span>
        </div>
    }
}

/// The headline metric cards.
#[component]
fn SummaryCards(ex: Explorer) -> impl IntoView {
    let outcome = move || ex.outcome.get();
    view! {
        <div class="stat-grid summary" class:stale=move || ex.computing.get() || ex.error.get().is_some() || ex.compute_error.get().is_some()>
            {move || {
                let Some(o) = outcome() else {
                    // Never a bare "computing" when nothing is: say what the page waits for.
                    let text = if ex.needs_run.get() {
                        "Not computed yet: press Run above (a large scenario, computed on the main thread here)."
                    } else if ex.compute_error.get().is_some() || ex.error.get().is_some() {
                        "No result: see the message above."
                    } else {
                        "computing the first result…"
                    };
                    return view! { <div class="muted" data-no-result="">{text}</div> }.into_any();
                };
                // Session cards belong to session workloads only.
                let sessions = ex.json.with(|j| j.pointer("/workload/kind").and_then(|k| k.as_str()) == Some("sessions"));
                HEADLINE
                    .iter()
                    .filter(|(name, _)| o.get(name).is_some())
                    .filter(|(name, _)| sessions || !name.starts_with("session_"))
                    .map(|&(name, label)| stat_card(ex, o.clone(), name, label))
                    .collect_view()
                    .into_any()
            }}
        </div>
    }
}

fn stat_card(ex: Explorer, o: std::sync::Arc<Outcome>, name: &'static str, label: &'static str) -> impl IntoView {
    let exact = o.exact;
    let value = Signal::derive(move || ex.outcome.get().and_then(|o| o.get(name)));
    let class = move || {
        let Some(o) = ex.outcome.get() else { return "" };
        match o.verdict(name) {
            Some(true) => "good",
            Some(false) => "bad",
            None => "",
        }
    };
    let unit = if crate::ui::metric::is_ratio(name) {
        ""
    } else {
        unit_of(name)
    };
    let _ = o;
    view! {
        <div class=move || format!("stat {}", class())>
            <div class="label">{label}</div>
            <div class="value"><Metric name=name value=value exact=exact/><span class="unit">{unit}</span></div>
        </div>
    }
}

/// Every numeric summary field not in the headline, as a table.
#[component]
pub fn AllMetrics(ex: Explorer) -> impl IntoView {
    view! {
        <details class="card all-metrics">
            <summary>"All summary fields"</summary>
            {move || {
                let o = ex.outcome.get()?;
                let rows = o
                    .metrics
                    .iter()
                    .filter(|(k, _)| !HEADLINE.iter().any(|(h, _)| h == k))
                    .map(|(k, v)| {
                        let shown = crate::ui::metric::display(k, *v, o.exact);
                        view! {
                            <tr>
                                <td class="mono">{k.clone()}</td>
                                <td><span class="metric-value" data-metric=k.clone() data-value=v.to_string()>{shown}</span></td>
                                <td class="faint">{unit_of(k)}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                let labels = o
                    .labels
                    .iter()
                    .map(|(k, v)| view! { <tr><td class="mono">{k.clone()}</td><td data-metric=k.clone()>{v.clone()}</td><td></td></tr> })
                    .collect_view();
                Some(view! { <table class="data"><tbody>{labels}{rows}</tbody></table> })
            }}
        </details>
    }
}

/// The seed band of the explorer's current result, computed in the worker after each result (engine scenarios up
/// to [`crate::explorer::seed_band::MAX_BAND_RECORDS`] requests); `None` until it arrives, and for the seed model.
fn seed_band_of(ex: Explorer) -> RwSignal<Option<std::sync::Arc<crate::explorer::seed_band::SeedBand>>> {
    use crate::worker::offload::{self, Lane};
    use crate::worker::wire::{Done, Job};
    use shared::scenario::Scenario;
    let band = ex.band;
    let generation = StoredValue::new(0u64);
    Effect::new(move |_| {
        band.set(None);
        if ex.outcome.with(Option::is_none) {
            return;
        }
        let Ok(sc) = Scenario::from_value(ex.json.get_untracked()) else {
            return;
        };
        if !matches!(sc, Scenario::Engine(_)) || compute::records_of(&sc) > crate::explorer::seed_band::MAX_BAND_RECORDS
        {
            return;
        }
        let g = offload::new_generation();
        generation.set_value(g);
        let size = compute::size_of(&sc) * crate::explorer::seed_band::BAND_SEEDS as f64;
        offload::submit(Lane::Explorer, g, size, Job::SeedBand(sc.to_value()), move |f| {
            if generation.try_get_value() != Some(g) {
                return;
            }
            if let (None, Done::Band(Ok(b))) = (f.failure, f.done) {
                band.set(Some(std::sync::Arc::new(b)));
            }
        });
    });
    band
}

/// CDFs, the sweep and the timelines.
#[component]
fn ChartsGrid(ex: Explorer) -> impl IntoView {
    let band = seed_band_of(ex);
    let band_name = move |b: &crate::explorer::seed_band::SeedBand| format!("{} seeds: min–max", b.seeds.len());
    let ttft = Signal::derive(move || {
        ex.outcome.get().map_or_else(Vec::new, |o| {
            let mut s = Vec::new();
            if let Some(b) = band.get().filter(|b| !b.ttft.is_empty()) {
                s.push(Series::band(
                    band_name(&b),
                    PALETTE[0],
                    crate::explorer::seed_band::polygon(&b.ttft),
                ));
            }
            s.push(Series::steps("this scenario", PALETTE[0], o.ttft_cdf.clone()));
            if let Some(p) = ex.pinned.get() {
                s.push(Series::steps("pinned A", PALETTE[1], p.outcome.ttft_cdf.clone()).dashed());
            }
            s
        })
    });
    let tpot = Signal::derive(move || {
        ex.outcome.get().map_or_else(Vec::new, |o| {
            let mut s = Vec::new();
            if let Some(b) = band.get().filter(|b| !b.tpot.is_empty()) {
                s.push(Series::band(
                    band_name(&b),
                    PALETTE[0],
                    crate::explorer::seed_band::polygon(&b.tpot),
                ));
            }
            s.push(Series::steps("this scenario", PALETTE[0], o.tpot_cdf.clone()));
            if let Some(p) = ex.pinned.get() {
                s.push(Series::steps("pinned A", PALETTE[1], p.outcome.tpot_cdf.clone()).dashed());
            }
            s
        })
    });
    let slo_ttft = Signal::derive(move || {
        ex.outcome.get().map_or_else(Vec::new, |o| {
            vec![Threshold {
                label: format!("SLO {} ms", o.slo_ttft_ms),
                value: o.slo_ttft_ms,
                vertical: true,
            }]
        })
    });
    let slo_tpot = Signal::derive(move || {
        ex.outcome.get().map_or_else(Vec::new, |o| {
            vec![Threshold {
                label: format!("SLO {} ms", o.slo_tpot_ms),
                value: o.slo_tpot_ms,
                vertical: true,
            }]
        })
    });
    let sweep = Signal::derive(move || {
        let pts = ex.sweep.get();
        let mut pts: Vec<_> = pts.into_iter().collect();
        shared::order::sort_by_f64_key(&mut pts, |p| p.x);
        vec![
            Series::line(
                "goodput",
                PALETTE[2],
                pts.iter().map(|p| (p.x, p.goodput_rps)).collect(),
            ),
            Series::line(
                "throughput",
                PALETTE[0],
                pts.iter().map(|p| (p.x, p.throughput_rps)).collect(),
            )
            .dashed(),
        ]
    });
    let sweep_x = Signal::derive(move || ex.outcome.get().map(|o| o.sweep_label.clone()).unwrap_or_default());
    let current_x = Signal::derive(move || {
        ex.outcome
            .get()
            .and_then(|o| o.sweep_current)
            .map_or_else(Vec::new, |x| {
                vec![Threshold {
                    label: "now".to_string(),
                    value: x,
                    vertical: true,
                }]
            })
    });
    let running = Signal::derive(move || {
        ex.outcome.get().map_or_else(Vec::new, |o| {
            let t = &o.timeline;
            vec![
                Series::line("running", PALETTE[0], t.iter().map(|p| (p.t_s, p.running)).collect()),
                Series::line("queued", PALETTE[1], t.iter().map(|p| (p.t_s, p.queued)).collect()),
            ]
        })
    });
    let kv = Signal::derive(move || {
        ex.outcome.get().map_or_else(Vec::new, |o| {
            let t = &o.timeline;
            let mut s = Vec::new();
            if t.iter().any(|p| p.kv_use.is_some()) {
                s.push(Series::line(
                    "KV use",
                    PALETTE[3],
                    t.iter().filter_map(|p| Some((p.t_s, p.kv_use? * 100.0))).collect(),
                ));
            }
            if t.iter().any(|p| p.cache_hit.is_some()) {
                s.push(Series::line(
                    "cache hits",
                    PALETTE[2],
                    t.iter().filter_map(|p| Some((p.t_s, p.cache_hit? * 100.0))).collect(),
                ));
            }
            s
        })
    });
    let has_samples = move || ex.outcome.with(|o| o.as_ref().is_some_and(|o| !o.ttft_cdf.is_empty()));
    let has_timeline = move || ex.outcome.with(|o| o.as_ref().is_some_and(|o| !o.timeline.is_empty()));
    let progress = move || {
        let (done, total) = ex.sweep_progress.get();
        (total > 0 && done < total).then(|| {
            view! {
                <div class="progress" data-sweep-progress=format!("{done}/{total}")>
                    <div class="bar" style:width=format!("{}%", done * 100 / total.max(1))></div>
                    <span>{format!("sweep {done}/{total}")}</span>
                </div>
            }
        })
    };
    view! {
        <div class="charts">
            <div class="chart-wrap" class:hidden=move || !has_samples()>
                <LineChart id="ttft-cdf" title="TTFT distribution" x_label="TTFT (ms)" y_label="share of requests ≤ x" series=ttft thresholds=slo_ttft y_max=1.0 empty="no per-request samples"/>
            </div>
            <div class="chart-wrap" class:hidden=move || !has_samples()>
                <LineChart id="tpot-cdf" title="TPOT distribution" x_label="TPOT (ms)" y_label="share of requests ≤ x" series=tpot thresholds=slo_tpot y_max=1.0 empty="no per-request samples"/>
            </div>
            // Nothing to sweep around before a first result (or when there is none: too large, failed).
            <div class="chart-wrap" class:hidden=move || ex.outcome.with(Option::is_none)>
                <LineChart id="goodput-sweep" title="Goodput vs load" x_label="" y_label="req/s" series=sweep thresholds=current_x empty="sweeping…"/>
                <div class="chart-foot faint">{move || sweep_x.get()} {progress}</div>
            </div>
            <div class="card model-note" class:hidden=move || ex.outcome.with(|o| o.as_ref().is_none_or(|o| !o.ttft_cdf.is_empty()))>
                <h2>"The seed model reports percentiles only"</h2>
                <p class="muted">
                    "It has no per-request records, KV cache or timeline. Switch to the "
                    <strong>"Engine model"</strong>
                    " for TTFT/TPOT distributions, running/queued and KV timelines, and cache diagnostics."
                </p>
            </div>
            <div class="chart-wrap" class:hidden=move || !has_timeline()>
                <LineChart id="timeline-queue" title="Running and queued" x_label="time (s)" y_label="requests" series=running empty="this model reports no timeline"/>
            </div>
            <div class="chart-wrap" class:hidden=move || !has_timeline()>
                <LineChart id="timeline-kv" title="KV cache use and hits" x_label="time (s)" y_label="%" series=kv y_max=100.0 empty="this model has no KV cache"/>
            </div>
            {crate::later(ex.settled(), move || crate::session_timeline(ex))}
        </div>
    }
}

/// The diagnostics as call-outs.
#[component]
pub fn Diagnostics(ex: Explorer) -> impl IntoView {
    view! {
        <div class="card diagnostics">
            <h2>"Diagnostics"</h2>
            {move || {
                let o = ex.outcome.get()?;
                if o.diagnostics.is_empty() {
                    return Some(view! { <p class="muted">"Nothing unusual in this scenario."</p> }.into_any());
                }
                Some(
                    o.diagnostics
                        .iter()
                        .map(|d| {
                            let class = match d.severity {
                                Severity::Good => "callout good",
                                Severity::Info => "callout",
                                Severity::Warn => "callout warn",
                                Severity::Bad => "callout bad",
                            };
                            view! {
                                <div class=class data-diagnostic=d.id.clone()>
                                    <strong>{d.title.clone()}</strong>
                                    <span>{d.body.clone()}</span>
                                </div>
                            }
                        })
                        .collect_view()
                        .into_any(),
                )
            }}
        </div>
    }
}
