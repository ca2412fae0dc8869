//! Compare: the pinned scenario A against the explorer's current scenario B, side by side with deltas, and their
//! CDFs overlaid. A is pinned from the explorer ("Pin as A"); B follows every slider.

pub mod pd;

use leptos::prelude::*;
use serde_json::Value;

use crate::model::state::Explorer;
use crate::ui::charts::{LineChart, PALETTE, Series};

/// Metrics where a smaller value is better (latencies); for the rest larger is better.
fn lower_is_better(name: &str) -> bool {
    name.ends_with("_ms") || name == "duration_s" || name == "failed"
}

/// Summary fields in the order Compare lists them: the explorer's headline metrics first, in its order, then the
/// rest by label.
pub fn ordered(mut names: Vec<String>) -> Vec<String> {
    let head = |n: &str| crate::ui::metric::HEADLINE.iter().position(|(h, _)| *h == n);
    names.sort_by(|x, y| match (head(x), head(y)) {
        (Some(i), Some(j)) => i.cmp(&j),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => crate::ui::metric::label(x).cmp(&crate::ui::metric::label(y)),
    });
    names
}

/// The scenario fields that differ between A and B, as `path: a → b`.
pub fn changed_fields(a: &Value, b: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    diff(a, b, "", &mut out);
    out
}

fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            for (k, va) in ma {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match mb.get(k) {
                    Some(vb) => diff(va, vb, &p, out),
                    None => out.push((p, va.to_string(), "—".to_string())),
                }
            }
            for (k, vb) in mb {
                if !ma.contains_key(k) {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    out.push((p, "—".to_string(), vb.to_string()));
                }
            }
        }
        _ if a != b => out.push((path.to_string(), a.to_string(), b.to_string())),
        _ => {}
    }
}

/// What a side's changed fields are, for the header: `Sessions 4 sessions · Batch slots 16 seqs`, each field in the
/// explorer's label and unit (a bandwidth in GB/s), an object "set" or "not set"; at most three, then how many more.
/// `side` picks A's value (0) or B's (1) of each [`changed_fields`] entry.
pub fn side_summary(changes: &[(String, String, String)], side: usize) -> String {
    use crate::explorer::fields;
    let mut parts: Vec<String> = changes
        .iter()
        .take(3)
        .map(|(path, a, b)| {
            let name = path.rsplit('.').next().unwrap_or(path);
            let spec = fields::spec(name);
            let label = spec
                .map(|s| s.label.to_string())
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| fields::humanize(name));
            let v = if side == 0 { a } else { b };
            // No unit that repeats the label ("Users 4 users").
            let unit = spec.map_or("", |s| s.unit);
            let unit = if unit == label.to_lowercase() { "" } else { unit };
            let power = fields::unit_power(unit);
            match v.as_str() {
                "—" => format!("{label} not set"),
                v if v.starts_with('{') || v.starts_with('[') => format!("{label} set"),
                v => {
                    let v = match v.parse::<f64>() {
                        Ok(x) if power != 0 => fields::shift_decimal(x, -power),
                        _ => v.trim_matches('"').to_string(),
                    };
                    format!("{label} {v} {unit}").trim_end().to_string()
                }
            }
        })
        .collect();
    if changes.len() > 3 {
        parts.push(format!("{} more", changes.len() - 3));
    }
    parts.join(" · ")
}

/// The compare view.
#[component]
pub fn CompareView(ex: Explorer) -> impl IntoView {
    let table = move || {
        let a = ex.pinned.get()?;
        let b = ex.outcome.get()?;
        let band = a.band.clone();
        let rows = ordered(a.outcome.metrics.iter().map(|(n, _)| n.clone()).collect())
            .into_iter()
            .filter_map(|name| {
                let va = a.outcome.get(&name)?;
                let vb = b.get(&name)?;
                let delta = crate::ui::fmt::delta_pct(va, vb);
                // A change inside A's seed band (the spread of A over seeds) is noise, not an effect: greyed.
                let within = band.as_ref().and_then(|band| band.holds(&name, vb)) == Some(true);
                let better = if within || (vb - va).abs() < 1e-12 || delta == "±0 %" {
                    ""
                } else if (vb < va) == lower_is_better(&name) {
                    "delta-good"
                } else {
                    "delta-bad"
                };
                let exact = a.outcome.exact && b.exact;
                let headline = crate::ui::metric::HEADLINE.iter().any(|(h, _)| *h == name);
                let note = within.then_some(" (noise)");
                Some(view! {
                    <tr data-compare=name.clone() class:within-band=within class:headline=headline>
                        <td title=name.clone()>{crate::ui::metric::label(&name)}<span class="faint small">{match crate::ui::metric::unit_of(&name) { "ratio" => String::new(), u => format!(" {u}") }}</span></td>
                        <td data-side="a"><span data-metric=name.clone() data-value=va.to_string()>{crate::ui::metric::display(&name, va, exact)}</span></td>
                        <td data-side="b"><span data-metric=name.clone() data-value=vb.to_string()>{crate::ui::metric::display(&name, vb, exact)}</span></td>
                        <td class=better data-delta="" data-within-band=within.to_string() title=within.then_some("within A's spread over 5 seeds")><span class="pct">{delta}</span><span class="noise">{note}</span></td>
                    </tr>
                })
            })
            .collect_view();
        let changes = changed_fields(&a.json, &ex.json.get());
        // What A and B are: each side's values of the fields that differ (the same scenario: said so), then what
        // each computed.
        let (head_a, head_b) = if changes.is_empty() {
            (
                "the same scenario as B".to_string(),
                "the same scenario as A: move a slider in the explorer".to_string(),
            )
        } else {
            (side_summary(&changes, 0), side_summary(&changes, 1))
        };
        let runs = if a.outcome.describe == b.describe {
            format!("both: {}", b.describe)
        } else {
            format!("A: {} · B: {}", a.outcome.describe, b.describe)
        };
        let change_list = if changes.is_empty() {
            view! { <p class="muted">"B equals A: move a slider in the explorer to vary B."</p> }.into_any()
        } else {
            view! {
                <ul class="changes">
                    {changes
                        .into_iter()
                        .map(|(p, va, vb)| view! { <li><code>{p}</code>" " {va} " → " <strong>{vb}</strong></li> })
                        .collect_view()}
                </ul>
            }
            .into_any()
        };
        Some(view! {
            <div class="card">
                <div class="card-head">
                    <h2>"A vs B"</h2>
                    <span class="spacer"></span>
                    <button class="btn small" data-action="unpin" on:click=move |_| ex.pinned.set(None)>"Unpin A"</button>
                    <button
                        class="btn small"
                        data-action="restore-a"
                        on:click=move |_| {
                            if let Some(p) = ex.pinned.get_untracked() {
                                ex.json.set(p.json);
                            }
                        }
                    >
                        "Restore A into the explorer"
                    </button>
                </div>
                <dl class="kv compare-sides">
                    <dt>"A (pinned)"</dt>
                    <dd data-compare-head="a">{head_a}</dd>
                    <dt>"B (the explorer)"</dt>
                    <dd data-compare-head="b">{head_b}</dd>
                </dl>
                <p class="faint small" data-compare-runs="">{runs}</p>
                <h3>"What changed"</h3>
                {change_list}
                {band.is_some().then(|| view! {
                    <p class="faint small">"Greyed, \"(noise)\": a change that stays within A's spread over 5 seeds, not an effect."</p>
                })}
                <div class="table-scroll">
                <table class="data compare-table">
                    <thead><tr><th>"Metric"</th><th>"A (pinned)"</th><th>"B (explorer)"</th><th>"Change"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
                </div>
            </div>
        })
    };
    let ttft = Signal::derive(move || overlay(ex, |o| &o.ttft_cdf));
    let tpot = Signal::derive(move || overlay(ex, |o| &o.tpot_cdf));
    view! {
        <Show
            when=move || ex.pinned.get().is_some()
            fallback=|| view! {
                <div class="card empty">
                    <h2>"Compare two scenarios"</h2>
                    <p>"In the explorer, press " <strong>"Pin as A"</strong> ", then move any slider: B follows the explorer, and this view shows A and B side by side with the change of every metric."</p>
                </div>
            }
        >
            <div class="compare-layout">
                {table}
                <div class="charts" class:hidden=move || ttft.get().is_empty() && tpot.get().is_empty()>
                    <LineChart id="compare-ttft" title="TTFT distribution, A vs B" x_label="TTFT (ms)" y_label="share ≤ x" series=ttft y_max=1.0 empty="no per-request samples for this model"/>
                    <LineChart id="compare-tpot" title="TPOT distribution, A vs B" x_label="TPOT (ms)" y_label="share ≤ x" series=tpot y_max=1.0 empty="no per-request samples for this model"/>
                </div>
            </div>
        </Show>
    }
}

fn overlay(ex: Explorer, pick: fn(&crate::model::compute::Outcome) -> &Vec<(f64, f64)>) -> Vec<Series> {
    let mut s = Vec::new();
    if let Some(a) = ex.pinned.get() {
        s.push(Series::steps("A (pinned)", PALETTE[1], pick(&a.outcome).clone()).dashed());
    }
    if let Some(b) = ex.outcome.get() {
        s.push(Series::steps("B (explorer)", PALETTE[0], pick(&b).clone()));
    }
    if s.iter().all(|x| x.points.is_empty()) {
        return Vec::new();
    }
    s
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn lists_changed_fields() {
        let a = serde_json::json!({"profile": {"slots": 16, "tpot": 17.5}, "x": true});
        let b = serde_json::json!({"profile": {"slots": 32, "tpot": 17.5}, "x": true, "y": 1});
        let d = changed_fields(&a, &b);
        assert_eq!(
            d,
            vec![
                ("profile.slots".to_string(), "16".to_string(), "32".to_string()),
                ("y".to_string(), "—".to_string(), "1".to_string()),
            ]
        );
        assert!(lower_is_better("ttft_p99_ms") && !lower_is_better("goodput_rps"));
    }

    /// The header says what each side is: its values of the fields that differ, in the explorer's labels and units.
    #[test]
    fn each_side_is_named_by_its_values_of_what_changed() {
        let a = serde_json::json!({"workload": {"sessions": 4, "users": 2}, "fleet": {"disaggregation": {"link_bytes_per_s": 5e10}}});
        let b = serde_json::json!({"workload": {"sessions": 8, "users": 3}, "fleet": {"disaggregation": {"link_bytes_per_s": 1.25e10}}});
        let d = changed_fields(&a, &b);
        assert_eq!(
            side_summary(&d, 0),
            "Link bandwidth 50 GB/s · Sessions 4 slots · Users 2"
        );
        assert_eq!(
            side_summary(&d, 1),
            "Link bandwidth 12.5 GB/s · Sessions 8 slots · Users 3"
        );
        let spec = serde_json::json!({"profile": {"speculative": {"draft_tokens": 1}}, "x": 1, "y": "a", "z": 1});
        let none = serde_json::json!({"profile": {}, "x": 2, "y": "b", "z": 2});
        let d = changed_fields(&spec, &none);
        assert_eq!(side_summary(&d, 0), "Speculative decoding set · X 1 · Y a · 1 more");
        assert_eq!(side_summary(&d, 1), "Speculative decoding not set · X 2 · Y b · 1 more");
    }

    #[test]
    fn headline_metrics_come_first() {
        let names = [
            "zeta_ms",
            "duration_s",
            "cached_share_achieved",
            "ttft_p50_ms",
            "alpha_ratio",
            "goodput_rps",
        ];
        let got = ordered(names.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            got,
            [
                "ttft_p50_ms",
                "goodput_rps",
                "cached_share_achieved",
                "duration_s",
                "alpha_ratio",
                "zeta_ms"
            ]
        );
    }
}
