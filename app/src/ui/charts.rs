//! Small SVG charts: a line/step chart with nice axes, a legend and optional threshold lines.
//!
//! Hand-built rather than `leptos-chartistry`: the page needs four chart shapes (CDFs as steps, a sweep, two
//! timelines, live-vs-simulated overlays) with thresholds, and chartistry 0.2 brings `leptos-use`, `chrono` and
//! tens of MB of dependencies into a wasm bundle budgeted at 500 KB gzip, on a build machine shared by six.
//! This module is ~250 lines, renders with plain `<path>`s, and exposes `data-chart`/`data-series` attributes
//! so browser tests can check what is drawn. CDF points come from `shared::metrics::cdf_points`. See docs/page.md.

use leptos::prelude::*;

/// One line on a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// A CSS colour, normally one of the `--series-*` variables.
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
    /// Draw as a step function (for CDFs).
    pub step: bool,
    pub dashed: bool,
    /// Draw each point as a dot, unjoined (a scatter).
    pub dots: bool,
    /// A closed polygon, filled and unstroked (a band).
    pub fill: bool,
}

impl Series {
    pub fn line(name: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            color,
            points,
            step: false,
            dashed: false,
            dots: false,
            fill: false,
        }
    }

    pub fn steps(name: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            color,
            points,
            step: true,
            dashed: false,
            dots: false,
            fill: false,
        }
    }

    /// A scatter: one dot per point (a zero-length round-capped stroke each).
    pub fn dots(name: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Series {
        Series {
            dots: true,
            ..Series::line(name, color, points)
        }
    }

    /// A shaded area: the points are a closed polygon.
    pub fn band(name: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Series {
        Series {
            fill: true,
            ..Series::line(name, color, points)
        }
    }

    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }
}

/// A vertical or horizontal reference line (an SLO, a capacity).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub label: String,
    pub value: f64,
    /// Vertical (an x value) or horizontal (a y value).
    pub vertical: bool,
}

/// The colours of series in order.
pub const PALETTE: [&str; 4] = [
    "var(--series-a)",
    "var(--series-b)",
    "var(--series-c)",
    "var(--series-d)",
];

/// "Nice" tick values covering `lo..=hi` (1, 2, 5 × 10^k steps), about `count` of them.
pub fn ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / count.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).ceil() * step;
    let mut out = Vec::new();
    let mut t = start;
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// A tick label: `12000` → `12k`, `0.25` → `0.25`.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// The labels of a row of ticks: [`tick_label`]'s, with as many more decimals as it takes (up to 6) for
/// neighbouring ticks to read differently (a run's first 6.3 s ticks at 6.3, 6.305, 6.31, not "6.3" thrice).
pub fn tick_labels(ts: &[f64]) -> Vec<String> {
    let distinct = |labels: &[String]| labels.windows(2).all(|w| w[0] != w[1]);
    let mut labels: Vec<String> = ts.iter().map(|&t| tick_label(t)).collect();
    for decimals in 3..=6 {
        if distinct(&labels) {
            break;
        }
        labels = ts
            .iter()
            .map(|&t| {
                if t.abs() >= 1e4 {
                    tick_label(t)
                } else {
                    trim_to(t, decimals)
                }
            })
            .collect();
    }
    labels
}

/// Where a vertical mark at `x` puts its label: beside it on the right in the plot's left half, on its left
/// (anchored at its end) in the right half, so that the label stays inside the plot.
fn vertical_label_at(x: f64) -> (f64, &'static str) {
    if x > (ML + W - MR) / 2.0 {
        (x - 4.0, "end")
    } else {
        (x + 4.0, "start")
    }
}

fn trim(v: f64) -> String {
    trim_to(v, 2)
}

fn trim_to(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

const W: f64 = 560.0;
const H: f64 = 250.0;
const ML: f64 = 48.0;
const MR: f64 = 14.0;
const MT: f64 = 10.0;
const MB: f64 = 34.0;

/// A line chart. `y_max` pins the top (e.g. 1 for CDFs); otherwise it fits the data.
#[component]
pub fn LineChart(
    /// `data-chart` id, for tests.
    id: &'static str,
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    #[prop(into)] series: Signal<Vec<Series>>,
    #[prop(into, optional)] thresholds: Signal<Vec<Threshold>>,
    #[prop(optional)] y_max: Option<f64>,
    /// Shown instead of the plot when there are no points.
    #[prop(optional)]
    empty: &'static str,
    /// Fit both axes to the data (a scatter) instead of starting them at 0.
    #[prop(optional)]
    zoom: bool,
) -> impl IntoView {
    let plot = move || {
        let all = series.get();
        let th = thresholds.get();
        let pts = all.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
        let mut ymin = f64::INFINITY;
        for &(x, y) in pts {
            if x.is_finite() && y.is_finite() {
                x0 = x0.min(x);
                x1 = x1.max(x);
                y1 = y1.max(y);
                ymin = ymin.min(y);
            }
        }
        if !x0.is_finite() {
            let msg = if empty.is_empty() { "no data" } else { empty };
            return view! {
                <text x=W / 2.0 y=H / 2.0 text-anchor="middle" class="chart-empty">{msg}</text>
            }
            .into_any();
        }
        for t in &th {
            if t.vertical {
                x0 = x0.min(t.value);
                x1 = x1.max(t.value);
            } else {
                y1 = y1.max(t.value);
            }
        }
        let (x0, x1, y0, y1) = if zoom {
            // Both axes over the data's own span, padded by 5 % of it (a scatter of values near each other).
            let lo = x0.min(ymin);
            let hi = x1.max(y1);
            let pad = ((hi - lo) * 0.05).max(hi.abs() * 1e-3).max(1e-9);
            (lo - pad, hi + pad, lo - pad, hi + pad)
        } else {
            let x0 = if x0 > 0.0 && x0 < (x1 - x0) * 0.5 { 0.0 } else { x0 };
            let x1 = if x1 <= x0 { x0 + 1.0 } else { x1 };
            (x0, x1, 0.0, y_max.unwrap_or(if y1 <= 0.0 { 1.0 } else { y1 * 1.08 }))
        };
        let sx = move |x: f64| ML + (x - x0) / (x1 - x0) * (W - ML - MR);
        let sy = move |y: f64| H - MB - (y - y0) / (y1 - y0) * (H - MT - MB);
        let xt = ticks(x0, x1, 6);
        let yt = ticks(y0, y1, 4);
        let grid = yt
            .iter()
            .zip(tick_labels(&yt))
            .map(|(&t, label)| {
                view! {
                    <line x1=ML x2=W - MR y1=sy(t) y2=sy(t) class="grid"/>
                    <text x=ML - 6.0 y=sy(t) + 3.5 text-anchor="end" class="tick">{label}</text>
                }
            })
            .collect_view();
        let xgrid = xt
            .iter()
            .zip(tick_labels(&xt))
            .map(|(&t, label)| {
                view! {
                    <line x1=sx(t) x2=sx(t) y1=H - MB y2=H - MB + 4.0 class="axis"/>
                    <text x=sx(t) y=H - MB + 16.0 text-anchor="middle" class="tick">{label}</text>
                }
            })
            .collect_view();
        let lines = all
            .iter()
            .map(|s| {
                let mut d = String::new();
                let mut prev: Option<(f64, f64)> = None;
                for &(x, y) in &s.points {
                    if !(x.is_finite() && y.is_finite()) {
                        continue;
                    }
                    let (px, py) = (sx(x), sy(y.min(y1)));
                    match prev {
                        _ if s.dots => d.push_str(&format!("M{px:.1},{py:.1}h0")),
                        None => d.push_str(&format!("M{px:.1},{py:.1}")),
                        Some(_) if s.step => d.push_str(&format!("H{px:.1}V{py:.1}")),
                        Some(_) => d.push_str(&format!("L{px:.1},{py:.1}")),
                    }
                    prev = Some((px, py));
                }
                if s.fill && prev.is_some() {
                    d.push('Z');
                }
                view! {
                    <path
                        d=d
                        class="series"
                        class:dashed=s.dashed
                        class:dots=s.dots
                        class:band=s.fill
                        fill=s.fill.then_some(s.color)
                        stroke=s.color
                        data-series=s.name.clone()
                        data-points=s.points.len()
                    />
                }
            })
            .collect_view();
        let refs = th
            .iter()
            .map(|t| {
                if t.vertical {
                    let x = sx(t.value);
                    // A mark in the plot's right half is labelled on its left, so the label stays in the plot; at the
                    // foot of the line, clear of a horizontal mark's label (top right) and of a CDF's plateau.
                    let (lx, anchor) = vertical_label_at(x);
                    view! {
                        <line x1=x x2=x y1=MT y2=H - MB class="threshold"/>
                        <text x=lx y=H - MB - 6.0 text-anchor=anchor class="threshold-label">{t.label.clone()}</text>
                    }
                    .into_any()
                } else {
                    let y = sy(t.value);
                    view! {
                        <line x1=ML x2=W - MR y1=y y2=y class="threshold"/>
                        <text x=W - MR - 4.0 y=y - 4.0 text-anchor="end" class="threshold-label">{t.label.clone()}</text>
                    }
                    .into_any()
                }
            })
            .collect_view();
        view! {
            <g>
                {grid}
                <line x1=ML x2=W - MR y1=H - MB y2=H - MB class="axis"/>
                {xgrid}
                {refs}
                {lines}
                <text x=(ML + W - MR) / 2.0 y=H - 3.0 text-anchor="middle" class="axis-label">{x_label}</text>
            </g>
        }
        .into_any()
    };
    let legend = move || {
        series
            .get()
            .into_iter()
            .map(|s| {
                view! {
                    <span class="legend-item">
                        <span class="swatch" class:dashed=s.dashed class:band=s.fill style:background=s.color></span>
                        {s.name}
                    </span>
                }
            })
            .collect_view()
    };
    view! {
        <figure class="chart" data-chart=id>
            <figcaption>
                <span class="chart-title">{title}</span>
                <span class="chart-y">{y_label}</span>
                <span class="legend">{legend}</span>
            </figcaption>
            <svg viewBox=format!("0 0 {W} {H}") role="img" aria-label=title>
                {plot}
            </svg>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn ticks_are_nice() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 1.0, 4), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        let t = ticks(0.0, 10235.0, 6);
        assert_eq!(t.first(), Some(&0.0));
        assert!(t.len() >= 4 && t.len() <= 8, "{t:?}");
    }

    #[test]
    fn neighbouring_tick_labels_differ() {
        let t = ticks(6.3, 6.32, 6);
        let labels = tick_labels(&t);
        assert!(labels.windows(2).all(|w| w[0] != w[1]), "{labels:?}");
        assert_eq!(labels.first().map(String::as_str), Some("6.3"));
        // Ticks that already read differently keep the short labels.
        assert_eq!(tick_labels(&[0.0, 500.0, 1000.0, 12000.0]), ["0", "500", "1000", "12k"]);
    }

    #[test]
    fn a_vertical_mark_near_the_right_edge_is_labelled_on_its_left() {
        assert_eq!(vertical_label_at(W - MR), (W - MR - 4.0, "end"));
        assert_eq!(vertical_label_at(ML + 10.0), (ML + 14.0, "start"));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(12000.0), "12k");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(2_500_000.0), "2.5M");
        assert_eq!(tick_label(5.0), "5");
    }
}
