//! The live panel's capacity search ("find capacity live"): the state of a search the agent runs
//! ([`LiveCapacity`], filled from `capacity_started`, `capacity_level` and `capacity_result`) and its card: the
//! simulated and the live level tables side by side, goodput against load for both with each capacity marked.
//! The live panel (`live.rs`) sends `start_capacity` and feeds the messages in.
//!
//! Read by tests: `[data-live-capacity-card]`; `[data-live-capacity]` (`data-value`: the live capacity once the
//! search ended, `""` before or when none), `[data-sim-capacity]` (`data-value`: the simulated capacity),
//! `[data-live-capacity-levels]` (live levels in so far), `[data-live-capacity-state]` (`running`, `done`); one
//! `tr[data-live-level]` per live level and one `tr[data-sim-level]` per simulated level, each with `data-load`,
//! `data-pass` and `data-saturation`; a live level's KV and preemption cells carry `data-kv` / `data-preemptions`
//! (`""` when the server does not report them).

use leptos::prelude::*;
use serde_json::Value;
use shared::capacity::{CapacityReport, Level, LiveLevel};

use crate::capacity::view::{LevelRow, row_of};
use crate::ui::charts::{LineChart, PALETTE, Series, Threshold};

/// A capacity search the agent runs (or ran), as far as the page has heard.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveCapacity {
    pub run_id: String,
    pub knob: String,
    pub simulated_capacity: Option<f64>,
    pub simulated_levels: Vec<Level>,
    pub guided: bool,
    /// Live levels in the order run.
    pub levels: Vec<LiveLevel>,
    /// Set once the search ended (`capacity_result`).
    pub result: Option<Outcome>,
}

/// How a search ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub capacity: Option<f64>,
    pub levels_run: u64,
    pub unguided_levels_simulated: Option<u64>,
    pub notes: Vec<String>,
    /// The search's highest load when a limit, not the engine, sets it (`max_load` in the report), and why
    /// (`max_load_reason`: e.g. the agent's per-run limit).
    pub max_load: Option<(f64, String)>,
}

impl Outcome {
    /// The capacity as the card says it: `96`, `≥ 256 (the agent's per-run limit)` when the search ended at a
    /// limit with every level up to it passing, or why there is none.
    pub fn text(&self) -> String {
        match (self.capacity, &self.max_load) {
            (None, _) => "none: even the lowest load run fails".to_string(),
            (Some(c), Some((max, why))) if c >= *max => format!("≥ {} ({why})", num(c)),
            (Some(c), _) => num(c),
        }
    }
}

impl LiveCapacity {
    /// A search just started (`capacity_started`).
    pub fn started(run_id: String, simulated: &CapacityReport, guided: bool) -> LiveCapacity {
        LiveCapacity {
            run_id,
            knob: simulated.knob.name().to_string(),
            simulated_capacity: simulated.capacity,
            simulated_levels: simulated.levels.clone(),
            guided,
            levels: Vec::new(),
            result: None,
        }
    }

    /// A search whose start this page did not see (reopened while it runs): its simulated side is known at its
    /// end, from its report.
    pub fn joined(run_id: String) -> LiveCapacity {
        LiveCapacity {
            run_id,
            knob: "load".to_string(),
            simulated_capacity: None,
            simulated_levels: Vec::new(),
            guided: false,
            levels: Vec::new(),
            result: None,
        }
    }

    /// A search known only by its report (`capacity_result` of a search reopened after it ended, or one whose
    /// start this page did not see).
    pub fn from_report(run_id: String, report: &Value) -> LiveCapacity {
        let mut c = LiveCapacity {
            run_id,
            knob: report["knob"].as_str().unwrap_or("?").to_string(),
            simulated_capacity: report["simulated_capacity"].as_f64(),
            simulated_levels: serde_json::from_value(report["simulated_levels"].clone()).unwrap_or_default(),
            guided: report["guided"].as_bool().unwrap_or(false),
            levels: Vec::new(),
            result: None,
        };
        c.finish(report);
        c
    }

    /// A level arrived; one already held (a resubscription resends them) is ignored.
    pub fn push(&mut self, index: u32, level: &LiveLevel) {
        if index as usize == self.levels.len() {
            self.levels.push(level.clone());
        }
    }

    /// The search ended with `report` (`capacity.json`): its levels replace what streamed in.
    pub fn finish(&mut self, report: &Value) {
        if let Ok(levels) = serde_json::from_value::<Vec<LiveLevel>>(report["levels"].clone()) {
            self.levels = levels;
        }
        self.result = Some(Outcome {
            capacity: report["capacity"].as_f64(),
            levels_run: report["levels_run"].as_u64().unwrap_or(self.levels.len() as u64),
            unguided_levels_simulated: report["unguided_levels_simulated"].as_u64(),
            notes: report["notes"]
                .as_array()
                .map(|n| n.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default(),
            max_load: report["max_load"].as_f64().map(|m| {
                let why = report["max_load_reason"].as_str().unwrap_or("the search's upper bound");
                (m, why.to_string())
            }),
        });
    }
}

/// While a search runs: which level runs, how long the search has run and the records written so far:
/// `level 3 running (the last finished at 16) · 2 min 10 s · 354 records so far`.
pub fn progress_text(finished: usize, last_load: Option<f64>, elapsed_s: f64, records: u64) -> String {
    let last = last_load.map_or_else(String::new, |l| format!(" (the last finished at {})", num(l)));
    let secs = elapsed_s.max(0.0).round() as u64;
    let took = if secs < 60 {
        format!("{secs} s")
    } else {
        format!("{} min {} s", secs / 60, secs % 60)
    };
    format!(
        "level {} running{last} · {took} · {records} records so far",
        finished + 1
    )
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |u| format!("{:.1} %", u * 100.0))
}

/// One level table; `live` rows say "not reported" where the server's `/metrics` did not give KV use or
/// preemptions (simulated rows always have them).
fn table(rows: Vec<LevelRow>, live: bool) -> impl IntoView {
    let body = rows
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let kv = l.kv_peak_use.map(|u| u.to_string()).unwrap_or_default();
            let pre = l.preemptions.map(|p| p.to_string()).unwrap_or_default();
            let missing = || view! { <span class="faint" title="not reported by the server">"not reported"</span> }.into_any();
            let kv_cell = match (live, l.kv_peak_use) {
                (true, None) => missing(),
                (_, u) => percent(u).into_any(),
            };
            let pre_cell = match (live, l.preemptions) {
                (true, None) => missing(),
                (_, p) => p.map_or_else(|| "–".to_string(), |p| p.to_string()).into_any(),
            };
            let row = view! {
                <td>{(i + 1).to_string()}</td>
                <td>{num(l.load)}</td>
                <td class=if l.pass { "good" } else { "bad" }>{if l.pass { "yes" } else { "no" }}</td>
                <td>{format!("{:.3}", l.attainment)}</td>
                <td>{format!("{:.2}", l.goodput_rps)}</td>
                <td>{format!("{:.0}", l.ttft_p50_ms)}</td>
                <td>{format!("{:.0}", l.ttft_p99_ms)}</td>
                <td>{format!("{:.1}", l.tpot_p99_ms)}</td>
                <td data-kv=kv>{kv_cell}</td>
                <td data-preemptions=pre>{pre_cell}</td>
                <td>{percent(l.cached_share)}</td>
                <td>{l.saturation.clone()}</td>
            };
            if live {
                view! { <tr data-live-level=(i + 1).to_string() data-load=l.load.to_string() data-pass=l.pass.to_string() data-saturation=l.saturation.clone()>{row}</tr> }.into_any()
            } else {
                view! { <tr data-sim-level=(i + 1).to_string() data-load=l.load.to_string() data-pass=l.pass.to_string() data-saturation=l.saturation.clone()>{row}</tr> }.into_any()
            }
        })
        .collect_view();
    view! {
        <div class="table-scroll">
            <table class="data levels">
                <thead><tr><th>"#"</th><th>"load"</th><th>"pass"</th><th>"attain"</th><th>"goodput/s"</th><th>"TTFT p50"</th><th>"TTFT p99"</th><th>"TPOT p99"</th><th>"KV peak"</th><th>"preempt"</th><th>"cached"</th><th>"class"</th></tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

/// Goodput against load, sorted by load (the last run of a load counts).
fn curve(levels: &[&Level]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for l in levels {
        match pts.iter_mut().find(|p| p.0 == l.load) {
            Some(p) => p.1 = l.summary.goodput_rps,
            None => pts.push((l.load, l.summary.goodput_rps)),
        }
    }
    shared::order::sort_by_f64_key(&mut pts, |p| p.0);
    pts
}

/// The card of the search in `capacity` (nothing when there is none).
#[component]
pub fn LiveCapacityCard(
    capacity: RwSignal<Option<LiveCapacity>>,
    /// The search's run as the agent last reported it (its start and records so far), for the progress line.
    #[prop(into)]
    run: Signal<Option<shared::protocol::RunInfo>>,
) -> impl IntoView {
    // Seconds since the search started, ticking while it runs.
    let now = RwSignal::new(js_sys::Date::now());
    if let Ok(h) = set_interval_with_handle(move || now.set(js_sys::Date::now()), std::time::Duration::from_secs(1)) {
        on_cleanup(move || h.clear());
    }
    let progress = move || {
        let c = capacity.get()?;
        if c.result.is_some() {
            return None;
        }
        let r = run.get().filter(|r| r.run_id == c.run_id)?;
        let elapsed = (now.get() - r.started_ms as f64).max(0.0) / 1000.0;
        Some(progress_text(
            c.levels.len(),
            c.levels.last().map(|l| l.level.load),
            elapsed,
            r.records,
        ))
    };
    let chart = Signal::derive(move || {
        capacity.with(|c| {
            let Some(c) = c else { return Vec::new() };
            let live: Vec<&Level> = c.levels.iter().map(|l| &l.level).collect();
            let sim: Vec<&Level> = c.simulated_levels.iter().collect();
            let mut s = Vec::new();
            let live = curve(&live);
            if !live.is_empty() {
                s.push(Series::line("live goodput", PALETTE[0], live));
            }
            let sim = curve(&sim);
            if !sim.is_empty() {
                s.push(Series::line("simulated goodput", PALETTE[1], sim).dashed());
            }
            s
        })
    });
    let marks = Signal::derive(move || {
        capacity.with(|c| {
            let Some(c) = c else { return Vec::new() };
            let mut t = Vec::new();
            let live = c.result.as_ref().and_then(|r| r.capacity);
            if let Some(v) = c.simulated_capacity {
                // One mark when they agree: two labels at one x would print over each other.
                let label = if live == Some(v) {
                    format!("live = simulated {}", num(v))
                } else {
                    format!("simulated {}", num(v))
                };
                t.push(Threshold {
                    label,
                    value: v,
                    vertical: true,
                });
            }
            if let Some(v) = live.filter(|v| c.simulated_capacity != Some(*v)) {
                t.push(Threshold {
                    label: format!("live {}", num(v)),
                    value: v,
                    vertical: true,
                });
            }
            t
        })
    });
    move || {
        capacity.get().map(|c| {
            let done = c.result.is_some();
            let live_value = c
                .result
                .as_ref()
                .and_then(|r| r.capacity)
                .map(|v| v.to_string())
                .unwrap_or_default();
            let live_shown = match &c.result {
                None => "searching…".to_string(),
                Some(r) => r.text(),
            };
            let sim_value = c.simulated_capacity.map(|v| v.to_string()).unwrap_or_default();
            let sim_shown = c.simulated_capacity.map_or_else(|| "none".to_string(), num);
            let live_rows: Vec<LevelRow> = c.levels.iter().map(|l| row_of(&l.level)).collect();
            let sim_rows: Vec<LevelRow> = c.simulated_levels.iter().map(row_of).collect();
            let unreported = !c.levels.is_empty()
                && c.levels
                    .iter()
                    .all(|l| l.level.engine.kv_peak_use.is_none() && l.level.engine.preemptions.is_none());
            let strategy = if c.guided {
                "guided by the simulated capacity (a bracket around it, then bisection)"
            } else {
                "unguided: doubling, then bisection"
            };
            let count = match &c.result {
                Some(r) => match r.unguided_levels_simulated {
                    Some(u) => format!("{} live levels; plain doubling + bisection takes {u} in the simulator", r.levels_run),
                    None => format!("{} live levels", r.levels_run),
                },
                None => format!("{} live levels so far", c.levels.len()),
            };
            let notes = c
                .result
                .as_ref()
                .map(|r| r.notes.iter().map(|n| view! { <p class="faint">{n.clone()}</p> }).collect_view());
            view! {
                <div class="card capacity" data-live-capacity-card="" data-live-capacity-state=if done { "done" } else { "running" }>
                    <h2>"Capacity, live"</h2>
                    <p>
                        "Live: " <strong data-live-capacity=live_value>{format!("{} = {live_shown}", c.knob)}</strong>
                        " · simulated: " <strong data-sim-capacity=sim_value>{format!("{} = {sim_shown}", c.knob)}</strong>
                    </p>
                    <p class="faint">
                        <span data-live-capacity-levels=c.levels.len().to_string()>{count}</span>
                        {format!(" · {strategy} · run {}", c.run_id)}
                    </p>
                    {move || progress().map(|f| view! { <p class="muted" data-live-capacity-progress="">{f}</p> })}
                    <LineChart id="live-capacity" title="Goodput vs load: live vs simulated" x_label="load" y_label="req/s" series=chart thresholds=marks empty="waiting for the first level"/>
                    <div class="capacity-sides">
                        <div>
                            <h3 class="section">"Live levels"</h3>
                            {table(live_rows, true)}
                            {unreported.then(|| view! { <p class="faint" data-kv-unreported="">"KV use and preemptions: not reported by the server's /metrics."</p> })}
                        </div>
                        <div>
                            <h3 class="section">"Simulated levels"</h3>
                            {table(sim_rows, false)}
                        </div>
                    </div>
                    {notes}
                </div>
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use shared::capacity::{Goal, Knob, LevelRun, Per, Saturation, Strategy};
    use shared::metrics::Summary;

    use super::*;

    #[test]
    fn a_capacity_at_the_agents_limit_reads_as_at_least() {
        let mut o = Outcome {
            capacity: Some(256.0),
            levels_run: 6,
            unguided_levels_simulated: None,
            notes: Vec::new(),
            max_load: Some((256.0, "the agent's per-run limit".to_string())),
        };
        assert_eq!(o.text(), "≥ 256 (the agent's per-run limit)");
        o.capacity = Some(96.0);
        assert_eq!(o.text(), "96");
        o.max_load = None;
        o.capacity = Some(256.0);
        assert_eq!(o.text(), "256");
        o.capacity = None;
        assert!(o.text().starts_with("none"));
    }

    #[test]
    fn a_running_search_says_its_level_time_and_records() {
        assert_eq!(
            progress_text(0, None, 4.2, 0),
            "level 1 running · 4 s · 0 records so far"
        );
        assert_eq!(
            progress_text(2, Some(16.0), 130.0, 354),
            "level 3 running (the last finished at 16) · 2 min 10 s · 354 records so far"
        );
    }

    fn level(load: f64, pass: bool) -> LiveLevel {
        let level = Level {
            load,
            pass,
            attainment: if pass { 1.0 } else { 0.4 },
            summary: Summary {
                completed: 30,
                goodput_rps: load,
                ..Summary::default()
            },
            saturation: Saturation::Stable,
            engine: shared::capacity::EngineSide {
                kv_peak_use: Some(0.1),
                preemptions: None,
            },
            scored: 30,
            excluded: 10,
            window_s: (1.0, 9.0),
            stopped_early: false,
        };
        LiveLevel {
            runs: vec![LevelRun::of("level-01-4.jsonl", &level)],
            records: vec!["level-01-4.jsonl".into()],
            level,
        }
    }

    #[test]
    fn levels_stream_in_once_each_and_the_report_ends_the_search() {
        let goal = Goal {
            ttft_ms: Some(300.0),
            tpot_ms: None,
            e2e_ms: None,
            attainment: 0.95,
            per: Per::Request,
        };
        let simulated = CapacityReport {
            knob: Knob::Users,
            capacity: Some(4.0),
            resolution: 1.0,
            goal,
            strategy: Strategy::Doubling { start: 2.0 },
            levels: vec![level(2.0, true).level, level(4.0, true).level, level(8.0, false).level],
            notes: Vec::new(),
        };
        let mut c = LiveCapacity::started("r1".into(), &simulated, true);
        assert_eq!((c.knob.as_str(), c.simulated_capacity), ("users", Some(4.0)));
        c.push(0, &level(4.0, true));
        // A resubscription resends level 0; a level out of order is not taken.
        c.push(0, &level(4.0, true));
        c.push(2, &level(6.0, false));
        c.push(1, &level(5.0, false));
        assert_eq!(
            c.levels.iter().map(|l| l.level.load).collect::<Vec<_>>(),
            vec![4.0, 5.0]
        );
        assert!(c.result.is_none());
        let report = serde_json::json!({
            "capacity": 4.0, "knob": "users", "levels_run": 2, "guided": true, "simulated_capacity": 4.0,
            "simulated_levels": serde_json::to_value(&simulated.levels).unwrap_or_default(),
            "levels": serde_json::to_value(vec![level(4.0, true), level(5.0, false)]).unwrap_or_default(),
            "unguided_levels_simulated": 5, "notes": ["a note"]
        });
        c.finish(&report);
        let r = c.result.clone().unwrap_or_else(|| panic!("finished"));
        assert_eq!(
            (r.capacity, r.levels_run, r.unguided_levels_simulated),
            (Some(4.0), 2, Some(5))
        );
        assert_eq!(r.notes, vec!["a note".to_string()]);
        // Reopened after the end: the report alone gives both sides.
        let again = LiveCapacity::from_report("r1".into(), &report);
        assert_eq!(again.levels, c.levels);
        assert_eq!(again.simulated_levels, simulated.levels);
        assert_eq!((again.simulated_capacity, again.guided), (Some(4.0), true));
    }
}
