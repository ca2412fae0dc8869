//! The ladder panel: production targets (median, p90, cached share, growth, slots, ...) → `shared::ladder::solve`
//! → a ladder of session shapes with its exact statistics and margins; "use in scenario" puts it into the
//! explorer's session workload.

use std::time::Duration;

use leptos::prelude::*;
use serde_json::Value;
use shared::ladder::solve::{Solution, SolveOptions, solve};

use crate::explorer::controls::Controls;
use crate::model::state::Explorer;

/// The ladder view.
#[component]
pub fn LadderPanel(ex: Explorer) -> impl IntoView {
    let options = RwSignal::new(serde_json::to_value(SolveOptions::prod()).unwrap_or(Value::Null));
    let solution = RwSignal::new(None::<Result<Solution, String>>);
    let solving = RwSignal::new(false);
    let solve_ms = RwSignal::new(None::<f64>);
    let used = RwSignal::new(None::<String>);
    let run = move |_| {
        solving.set(true);
        used.set(None);
        let opts = options.get_untracked();
        // Paint "solving…" first; the solver is synchronous.
        set_timeout(
            move || {
                let t0 = crate::worker::offload::now_ms();
                let result = serde_json::from_value::<SolveOptions>(opts)
                    .map_err(|e| format!("invalid solver options: {e}"))
                    .and_then(|o| solve(&o).map_err(|e| e.to_string()));
                solve_ms.set(Some(crate::worker::offload::now_ms() - t0));
                solution.set(Some(result));
                solving.set(false);
            },
            Duration::from_millis(16),
        );
    };
    let use_in_scenario = move |_| {
        let Some(Ok(sol)) = solution.get_untracked() else {
            return;
        };
        let opts: Option<SolveOptions> = serde_json::from_value(options.get_untracked()).ok();
        match crate::model::compute::with_ladder(&ex.json.get_untracked(), &sol.ladder.to_string(), opts.as_ref()) {
            Ok(json) => {
                ex.json.set(json);
                used.set(Some(
                    "The explorer's session workload now uses this ladder.".to_string(),
                ));
            }
            Err(e) => used.set(Some(e)),
        }
    };
    view! {
        <div class="ladder-layout">
            <aside class="card controls">
                <div class="card-head">
                    <h2>"Targets"</h2>
                    <span class="spacer"></span>
                    <button
                        class="btn small"
                        on:click=move |_| options.set(serde_json::to_value(SolveOptions::prod()).unwrap_or(Value::Null))
                    >
                        "Production"
                    </button>
                </div>
                <p class="muted small">
                    "Defaults: the seed's production shape (9,926 requests over 7 h: median 26,032 and p90 64,648 prompt tokens, 97 % cached; one step adds 2,703 tokens)."
                </p>
                <Controls json=options/>
                <div class="actions">
                    <button class="btn primary" data-action="solve" on:click=run disabled=move || solving.get()>
                        {move || if solving.get() { "Solving…" } else { "Solve" }}
                    </button>
                </div>
            </aside>
            <div class="results" data-ladder="">
                {move || match solution.get() {
                    None => view! {
                        <div class="card empty">"Set the targets and press Solve to get a ladder of session shapes."</div>
                    }
                        .into_any(),
                    Some(Err(e)) => view! { <div class="banner bad" data-ladder-error="">{e}</div> }.into_any(),
                    Some(Ok(sol)) => view! {
                        <SolutionView sol=sol solve_ms=solve_ms.get()/>
                        <div class="actions">
                            <button class="btn primary" data-action="use-ladder" on:click=use_in_scenario>
                                "Use in scenario"
                            </button>
                            {move || used.get().map(|m| view! { <span class="muted">{m}</span> })}
                        </div>
                    }
                        .into_any(),
                }}
            </div>
        </div>
    }
}

/// The solved ladder, its statistics and margins.
#[component]
fn SolutionView(sol: Solution, solve_ms: Option<f64>) -> impl IntoView {
    let s = &sol.stats;
    let ladder_text = sol.ladder.to_string();
    let max_prompt = s.max_prompt_tokens.max(1) as f64;
    let rungs = sol
        .ladder
        .rungs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let width = (r.base_tokens as f64 / max_prompt * 100.0).clamp(0.5, 100.0);
            view! {
                <tr>
                    <td>{i}</td>
                    <td>{crate::ui::fmt::num(r.base_tokens as f64)}</td>
                    <td>{r.steps}</td>
                    <td class="bar-cell"><span class="hbar" style:width=format!("{width:.1}%")></span></td>
                </tr>
            }
        })
        .collect_view();
    let err = |e: f64| format!("{:+.2} %", e * 100.0);
    view! {
        <div class="card">
            <div class="card-head">
                <h2>"Ladder"</h2>
                <code data-metric="ladder">{ladder_text}</code>
                <span class="spacer"></span>
                <span class="faint small">
                    {format!("{} candidate pairs", sol.pairs_tried)}
                    {solve_ms.map(|ms| format!(" · solved in {ms:.0} ms"))}
                </span>
            </div>
            <div class="stat-grid">
                <div class="stat">
                    <div class="label">"Median prompt"</div>
                    <div class="value"><span class="metric-value" data-metric="median" data-value=s.median>{crate::ui::fmt::num(s.median as f64)}</span><span class="unit">"tok"</span></div>
                    <div class="sub">{format!("error {} · slack {:.3}", err(sol.median_error), s.median_margins.slack(0.5))}</div>
                </div>
                <div class="stat">
                    <div class="label">"p90 prompt"</div>
                    <div class="value"><span class="metric-value" data-metric="p90" data-value=s.p90>{crate::ui::fmt::num(s.p90 as f64)}</span><span class="unit">"tok"</span></div>
                    <div class="sub">{format!("error {} · slack {:.3}", err(sol.p90_error), s.p90_margins.slack(0.9))}</div>
                </div>
                <div class="stat" class:good=sol.cached_reached>
                    <div class="label">{format!("Cached share ({})", sol.cached_definition)}</div>
                    <div class="value"><span class="metric-value" data-metric="cached_share" data-value=sol.cached_share>{crate::ui::fmt::pct(sol.cached_share)}</span></div>
                    <div class="sub">{format!("tokens {} · requests {}", crate::ui::fmt::pct(s.cached_share_tokens), crate::ui::fmt::pct(s.cached_share_requests))}</div>
                </div>
                <div class="stat">
                    <div class="label">"Narrowest margin"</div>
                    <div class="value"><span class="metric-value" data-metric="min_margin" data-value=sol.min_margin>{format!("{:.4}", sol.min_margin)}</span></div>
                    <div class="sub">"share the percentile can move"</div>
                </div>
                <div class="stat">
                    <div class="label">"Requests / pass"</div>
                    <div class="value"><span class="metric-value" data-metric="requests" data-value=s.requests>{s.requests}</span></div>
                    <div class="sub">{format!("{} slots, {} weighting", s.slots, s.weighting)}</div>
                </div>
                <div class="stat">
                    <div class="label">"Prompt range"</div>
                    <div class="value">{crate::ui::fmt::num(s.mean_prompt_tokens)}<span class="unit">"mean"</span></div>
                    <div class="sub">{format!("{} – {} tok", crate::ui::fmt::num(s.min_prompt_tokens as f64), crate::ui::fmt::num(s.max_prompt_tokens as f64))}</div>
                </div>
            </div>
            <table class="data rungs">
                <thead><tr><th>"slot"</th><th>"base tokens"</th><th>"steps"</th><th class="bar-head">"base"</th></tr></thead>
                <tbody>{rungs}</tbody>
            </table>
            {(!sol.notes.is_empty()).then(|| {
                view! {
                    <div class="notes">
                        {sol.notes.iter().map(|n| view! { <p class="callout warn">{page_words(n)}</p> }).collect_view()}
                    </div>
                }
            })}
            <p class="faint small">
                {format!(
                    "Median margins: {:.3}–{:.3} of requests at or below {}; p90: {:.3}–{:.3} at or below {}.",
                    s.median_margins.share_below,
                    s.median_margins.share_at_or_below,
                    s.median_margins.value,
                    s.p90_margins.share_below,
                    s.p90_margins.share_at_or_below,
                    s.p90_margins.value,
                )}
            </p>
        </div>
    }
}

/// A solver note in the page's words: the command line's flag becomes the control that sets the same thing.
pub fn page_words(note: &str) -> String {
    note.replace("try --prefer-margins", "try Priority: margins")
}
