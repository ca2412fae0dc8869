//! The session timeline: one agent session's requests on a time axis, with its sub-agents on rows below it
//! ([`crate::model::compute::session_bars`]). Each request is a bar from its submit to its end, the part before its
//! first token lighter; the gaps between bars are the session's think time (and, for a parent, its wait for the
//! children).

use leptos::prelude::*;

use crate::model::compute::SessionBar;
use crate::model::state::Explorer;
use crate::ui::charts::{tick_label, ticks};

const W: f64 = 1000.0;
const ROW: f64 = 20.0;
const ML: f64 = 96.0;
const MR: f64 = 14.0;
const MT: f64 = 6.0;
const MB: f64 = 30.0;

/// The label of a timeline row: the session, or a sub-agent by the parent step it forked after.
fn row_label(bars: &[SessionBar], row: u32) -> String {
    let Some(first) = bars.iter().find(|b| b.row == row) else {
        return String::new();
    };
    if row == 0 {
        return format!("session {}", first.session);
    }
    let fork = bars
        .iter()
        .filter(|b| b.row == 0 && b.end_s <= first.start_s)
        .map(|b| b.step)
        .max();
    match fork {
        Some(step) => format!("after step {step}"),
        None => format!("sub-agent {row}"),
    }
}

/// A bar's tooltip: its step, TTFT, duration and cached share.
fn bar_title(b: &SessionBar) -> String {
    let mut t = format!(
        "step {}: TTFT {:.0} ms, {:.2} s",
        b.step,
        (b.first_token_s - b.start_s) * 1000.0,
        b.end_s - b.start_s
    );
    if let Some(c) = b.cached_share {
        t.push_str(&format!(", {:.0} % of its prompt cached", c * 100.0));
    }
    if !b.ok {
        t.push_str(", failed");
    }
    t
}

#[component]
pub fn SessionTimeline(ex: Explorer) -> impl IntoView {
    let bars = move || {
        ex.outcome
            .with(|o| o.as_ref().map(|o| o.session_view.clone()).unwrap_or_default())
    };
    let plot = move || {
        let bars = bars();
        let rows = bars.iter().map(|b| b.row).max().map_or(0, |r| r + 1);
        let t0 = bars.iter().map(|b| b.start_s).fold(f64::INFINITY, f64::min);
        let t1 = bars.iter().map(|b| b.end_s).fold(f64::NEG_INFINITY, f64::max);
        let (t0, t1) = if t1 > t0 { (t0, t1) } else { (0.0, 1.0) };
        let h = MT + f64::from(rows) * ROW + MB;
        let sx = move |t: f64| ML + (t - t0) / (t1 - t0) * (W - ML - MR);
        let xt = ticks(t0, t1, 8);
        let axis = xt
            .into_iter()
            .map(|t| {
                view! {
                    <line x1=sx(t) x2=sx(t) y1=MT y2=h - MB + 4.0 class="grid"/>
                    <text x=sx(t) y=h - MB + 16.0 text-anchor="middle" class="tick">{tick_label(t)}</text>
                }
            })
            .collect_view();
        let labels = (0..rows)
            .map(|row| {
                let y = MT + f64::from(row) * ROW + ROW * 0.68;
                view! { <text x=ML - 8.0 y=y text-anchor="end" class="tick tl-row" data-row=row>{row_label(&bars, row)}</text> }
            })
            .collect_view();
        let rects = bars
            .iter()
            .map(|b| {
                let y = MT + f64::from(b.row) * ROW + 3.0;
                let (x0, xf, x1) = (sx(b.start_s), sx(b.first_token_s), sx(b.end_s));
                view! {
                    <g class="tl-bar" class:failed=!b.ok data-row=b.row data-step=b.step>
                        <title>{bar_title(b)}</title>
                        <rect x=x0 y=y width=(xf - x0).max(0.5) height=ROW - 6.0 class="tl-wait"/>
                        <rect x=xf y=y width=(x1 - xf).max(0.5) height=ROW - 6.0 class="tl-gen"/>
                    </g>
                }
            })
            .collect_view();
        view! {
            <svg viewBox=format!("0 0 {W} {h}") role="img" aria-label="Session timeline">
                {axis}
                <line x1=ML x2=W - MR y1=h - MB y2=h - MB class="axis"/>
                {labels}
                {rects}
                <text x=(ML + W - MR) / 2.0 y=h - 3.0 text-anchor="middle" class="axis-label">"time (s)"</text>
            </svg>
        }
    };
    view! {
        <figure class="chart session-timeline" data-chart="session-timeline" class:hidden=move || bars().is_empty()>
            <figcaption>
                <span class="chart-title">"A session's timeline"</span>
                <span class="chart-y">
                    {move || {
                        let b = bars();
                        let kids = b.iter().map(|b| b.row).max().unwrap_or(0);
                        let steps = b.iter().filter(|b| b.row == 0).count();
                        if kids > 0 {
                            format!("its first run: {steps} steps and {kids} sub-agents (rows below it)")
                        } else {
                            format!("its first run: {steps} steps; the gaps are think time")
                        }
                    }}
                </span>
                <span class="legend">
                    <span class="legend-item"><span class="swatch tl-wait"></span>"waiting for the first token"</span>
                    <span class="legend-item"><span class="swatch tl-gen"></span>"generating"</span>
                </span>
            </figcaption>
            {plot}
        </figure>
    }
}
