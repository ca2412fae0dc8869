//! "Fit profile to this run" (issue #17, item 6): the live panel's records → `shared::calibrate::fit` (the same fit
//! as `loadshape calibrate --from RUN.jsonl`) → the fitted coefficients with their standard errors, each stage's
//! R², the residual scatter (predicted vs live per request), and the CDFs of the run's scenario simulated with the
//! fitted profile against the live ones. "Use in explorer" makes the explorer's scenario the engine model with the
//! fitted profile (and the run's workload when the run's scenario is an engine scenario), so the share link
//! carries it.
//!
//! The fit runs on the main thread, on click: two small robust regressions over the records, whose batch and
//! context reconstruction costs O(records × concurrency) (a binary search per request); 0.9–1.4 ms for the browser
//! test's 30 records, shown in `[data-fit-ms]`. A worker round trip (the records serialized to it) would cost
//! about as much as the fit for a page-sized run. The prediction is a simulation and runs
//! in the worker ([`Lane::Fit`]).

use std::sync::Arc;

use leptos::prelude::*;
use serde_json::Value;
use shared::calibrate::{Fit, FitOptions, fit};
use shared::metrics::{tpot_cdf, ttft_cdf};
use shared::presets::default_engine_scenario;
use shared::record::RequestRecord;
use shared::scenario::Scenario;

use crate::model::compute::Outcome;
use crate::model::state::Explorer;
use crate::ui::charts::{LineChart, PALETTE, Series};
use crate::ui::fmt::sig4;
use crate::worker::offload::{self, Lane};
use crate::worker::wire::{Done, Job};

/// Fits an engine profile to `records` as `loadshape calibrate --from` does (`batch_kv` decided by the data). The
/// limits (KV blocks, slots, batch budget) are those of the run's scenario when it is an engine scenario (what
/// the server was configured as), else calibrate's defaults. A refusal is calibrate's own text.
pub fn fit_run(records: &[RequestRecord], scenario: Option<&Value>) -> Result<Fit, String> {
    let limits = match scenario.and_then(|v| Scenario::from_value(v.clone()).ok()) {
        Some(Scenario::Engine(e)) => {
            let mut p = e.profile;
            p.basis = format!("limits of the run's scenario (profile {})", p.name);
            p.name = "fitted".into();
            Some(p)
        }
        _ => None,
    };
    fit(
        records,
        &FitOptions {
            limits,
            ..Default::default()
        },
    )
    .map_err(|e| format!("{e} ({} records)", records.len()))
}

/// The explorer's scenario for a fit: the run's engine scenario with the fitted profile, or (the run's scenario is
/// not an engine one) the default engine scenario with it. The flag says whether the run's workload was kept.
pub fn explorer_scenario(f: &Fit, run_scenario: Option<&Value>) -> (Scenario, bool) {
    match run_scenario.and_then(|v| Scenario::from_value(v.clone()).ok()) {
        Some(Scenario::Engine(mut e)) => {
            e.profile = f.profile.clone();
            (Scenario::Engine(e), true)
        }
        _ => {
            let mut e = default_engine_scenario();
            e.profile = f.profile.clone();
            (Scenario::Engine(e), false)
        }
    }
}

/// The unit of a profile coefficient, by name.
fn unit(name: &str) -> &'static str {
    match name {
        "prefill_tokens_per_ms" => "tok/ms",
        n if n.ends_with("_per_ktok") => "ms/ktok",
        n if n.ends_with("_ms") => "ms",
        _ => "",
    }
}

/// (predicted, observed) pairs of the residuals, TTFT or TPOT.
fn scatter(f: &Fit, ttft: bool) -> Vec<(f64, f64)> {
    f.residuals
        .iter()
        .filter_map(|r| {
            if ttft {
                Some((r.ttft_predicted_ms?, r.ttft_ms?))
            } else {
                Some((r.tpot_predicted_ms?, r.tpot_ms?))
            }
        })
        .collect()
}

/// The scatter with its `y = x` line.
fn scatter_series(pts: Vec<(f64, f64)>) -> Vec<Series> {
    if pts.is_empty() {
        return Vec::new();
    }
    let lo = pts.iter().fold(f64::INFINITY, |m, &(x, y)| m.min(x).min(y));
    let hi = pts.iter().fold(f64::NEG_INFINITY, |m, &(x, y)| m.max(x).max(y));
    vec![
        Series::line("predicted = live", PALETTE[3], vec![(lo, lo), (hi, hi)]).dashed(),
        Series::dots("requests", PALETTE[0], pts),
    ]
}

/// The fit card under the live charts: the live panel's records, the scenario they ran, what is shown (a run id or
/// a file name; a change clears the fit) and the live window (`live::overlay_window`) the prediction covers.
#[component]
pub fn FitCard(
    records: RwSignal<Vec<RequestRecord>>,
    scenario: RwSignal<Option<Value>>,
    #[prop(into)] source: Signal<Option<String>>,
    #[prop(into)] window: Signal<Option<(f64, bool)>>,
    ex: Explorer,
    /// The live panel's chosen target (what "Calibrate … instead" probes).
    #[prop(into)]
    target: Signal<String>,
) -> impl IntoView {
    let fitted = RwSignal::new(None::<Result<Arc<Fit>, String>>);
    let fit_ms = RwSignal::new(None::<f64>);
    // The scenario the fit's run had (for the prediction and "Use in explorer").
    let fit_scenario = StoredValue::new(None::<Value>);
    let predicted = RwSignal::new(None::<Arc<Outcome>>);
    let predict_note = RwSignal::new(None::<String>);
    let used = RwSignal::new(None::<String>);
    let generation = StoredValue::new(0u64);
    let view_sig = use_context::<RwSignal<crate::View>>();

    // Another run (or file) shown: the fit was of the old one.
    Effect::new(move |_| {
        source.track();
        fitted.set(None);
        predicted.set(None);
        predict_note.set(None);
        used.set(None);
    });

    let do_fit = move |_| {
        let scenario = scenario.get_untracked();
        let t0 = offload::now_ms();
        let result = records.with_untracked(|r| fit_run(r, scenario.as_ref()));
        fit_ms.set(Some(offload::now_ms() - t0));
        used.set(None);
        predicted.set(None);
        predict_note.set(None);
        fit_scenario.set_value(scenario.clone());
        let g = offload::new_generation();
        generation.set_value(g);
        offload::supersede(Lane::Fit, g);
        if let Ok(f) = &result {
            let (sc, kept) = explorer_scenario(f, scenario.as_ref());
            if !kept {
                predict_note.set(Some(
                    "No prediction: the run's scenario is not an engine-model scenario.".into(),
                ));
            } else {
                let job = match window.get_untracked() {
                    Some((end_s, cut)) => Job::ComputeWindow(sc.to_value(), end_s, cut),
                    None => Job::Compute(sc.to_value()),
                };
                let size = crate::model::compute::size_of(&sc);
                offload::submit(Lane::Fit, g, size, job, move |done| {
                    if generation.try_get_value() != Some(g) {
                        return;
                    }
                    match done.done {
                        Done::Outcome(Ok(o)) => predicted.set(Some(Arc::new(o))),
                        Done::Outcome(Err(e)) => predict_note.set(Some(format!("No prediction: {e}"))),
                        Done::Point(_) | Done::Band(_) | Done::Bytes(_) => {}
                    }
                });
            }
        }
        fitted.set(Some(result.map(Arc::new)));
    };

    let use_fit = move |_| {
        let Some(Ok(f)) = fitted.get_untracked() else { return };
        let (sc, kept) = explorer_scenario(&f, fit_scenario.with_value(|s| s.clone()).as_ref());
        ex.set_scenario(&sc);
        used.set(Some(if kept {
            "The explorer now runs the run's scenario with the fitted profile.".into()
        } else {
            "The explorer now runs the default engine scenario with the fitted profile.".into()
        }));
        if let Some(v) = view_sig {
            v.set(crate::View::Explorer);
        }
    };

    let has_records = move || records.with(|r| !r.is_empty());
    let ttft_cdfs = Signal::derive(move || {
        let mut s = Vec::new();
        if fitted.with(|f| matches!(f, Some(Ok(_)))) {
            let pts = records.with(|r| ttft_cdf(r, 400));
            if !pts.is_empty() {
                s.push(Series::steps("live", PALETTE[0], pts));
            }
            if let Some(o) = predicted.get().filter(|o| !o.ttft_cdf.is_empty()) {
                s.push(Series::steps("predicted (fitted profile)", PALETTE[2], o.ttft_cdf.clone()).dashed());
            }
        }
        s
    });
    let tpot_cdfs = Signal::derive(move || {
        let mut s = Vec::new();
        if fitted.with(|f| matches!(f, Some(Ok(_)))) {
            let pts = records.with(|r| tpot_cdf(r, 400));
            if !pts.is_empty() {
                s.push(Series::steps("live", PALETTE[0], pts));
            }
            if let Some(o) = predicted.get().filter(|o| !o.tpot_cdf.is_empty()) {
                s.push(Series::steps("predicted (fitted profile)", PALETTE[2], o.tpot_cdf.clone()).dashed());
            }
        }
        s
    });
    let ttft_scatter = Signal::derive(move || match fitted.get() {
        Some(Ok(f)) => scatter_series(scatter(&f, true)),
        _ => Vec::new(),
    });
    let tpot_scatter = Signal::derive(move || match fitted.get() {
        Some(Ok(f)) => scatter_series(scatter(&f, false)),
        _ => Vec::new(),
    });

    view! {
        <div class="card fit-card" data-fit="" class:hidden=move || !has_records()>
            <div class="card-head">
                <h3 class="section">"Calibrate"</h3>
                <span class="spacer"></span>
                <button class="btn primary" data-action="fit" on:click=do_fit>"Fit profile to this run"</button>
                <button class="btn" data-action="use-fit" disabled=move || !matches!(fitted.get(), Some(Ok(_))) on:click=use_fit>
                    "Use in explorer"
                </button>
            </div>
            <p class="faint small">
                "Fits the engine model's step-time coefficients to these records, as the command line's calibration \
                 from a run does (a robust fit; docs/calibration.md). Nothing leaves the page."
            </p>
            {move || used.get().map(|m| view! { <p class="callout good" data-fit-used="">{m}</p> })}
            {move || match fitted.get() {
                None => None,
                Some(Err(e)) => {
                    let advice = refusal_advice(&e);
                    Some(view! {
                        <p class="callout bad" data-fit-error="">
                            <strong>"No fit: "</strong>{e}
                        </p>
                        <p class="callout" data-fit-advice="">{advice}</p>
                        <div class="actions">
                            <button
                                class="btn"
                                data-action="calibration-run"
                                on:click=move |_| {
                                    let base = ex.scenario().and_then(|s| match s {
                                        Scenario::Engine(e) => Some(e),
                                        Scenario::Seed(_) => None,
                                    });
                                    if let Ok(sc) = Scenario::from_value(calibration_run(base)) {
                                        ex.set_scenario(&sc);
                                        used.set(Some(
                                            "The explorer now holds a calibration run (one user at a time, varied prompt lengths): launch it, then fit it.".to_string(),
                                        ));
                                    }
                                }
                            >
                                "Set up a calibration run"
                            </button>
                            <CalibrateInstead target=target/>
                        </div>
                    }.into_any())
                }
                Some(Ok(f)) => Some(view! { <FitTables f=f ms=fit_ms.get_untracked()/> }.into_any()),
            }}
            {move || predict_note.get().map(|m| view! { <p class="muted" data-fit-predict-note="">{m}</p> })}
            <div class="charts" class:hidden=move || !matches!(fitted.get(), Some(Ok(_)))>
                <LineChart id="fit-ttft-scatter" title="TTFT per request: predicted vs live" x_label="predicted TTFT (ms)" y_label="live TTFT (ms)" series=ttft_scatter zoom=true empty="no lone prefills"/>
                <LineChart id="fit-tpot-scatter" title="TPOT per request: predicted vs live" x_label="predicted TPOT (ms)" y_label="live TPOT (ms)" series=tpot_scatter zoom=true empty="no decode observations"/>
                <LineChart id="fit-ttft-cdf" title="TTFT: live vs predicted" x_label="TTFT (ms)" y_label="share ≤ x" series=ttft_cdfs y_max=1.0 empty="predicting…"/>
                <LineChart id="fit-tpot-cdf" title="TPOT: live vs predicted" x_label="TPOT (ms)" y_label="share ≤ x" series=tpot_cdfs y_max=1.0 empty="predicting…"/>
            </div>
        </div>
    }
}

/// The refusal's other way out: calibrate the chosen target itself (the live panel's "Calibrate this target"),
/// when the page is connected to an agent.
#[component]
fn CalibrateInstead(target: Signal<String>) -> impl IntoView {
    let (Some(cal), Some(conn)) = (
        use_context::<crate::live::calibrate::Calibration>(),
        use_context::<crate::agent::ws::AgentConn>(),
    ) else {
        return None;
    };
    let connected = move || conn.status.get() == crate::agent::ws::Status::Connected;
    Some(view! {
        <button
            class="btn"
            data-action="calibrate-instead"
            disabled=move || !connected() || cal.running()
            title="Probe the chosen target with designed requests and fit its profile (the live panel's Calibrate this target)"
            on:click=move |_| cal.start(conn, &target.get_untracked())
        >
            {move || format!("Calibrate {} instead", target.get())}
        </button>
    })
}

/// The coefficients and the stages' quality.
#[component]
fn FitTables(f: Arc<Fit>, ms: Option<f64>) -> impl IntoView {
    let rows = f
        .coefficients
        .iter()
        .map(|(name, c)| {
            let shown = if c.identified {
                format!("{} ± {}", sig4(c.value), sig4(c.std_error))
            } else {
                format!("{} (fixed)", sig4(c.value))
            };
            view! {
                <tr data-coef=name.clone() data-value=c.value.to_string() data-std-error=c.std_error.to_string() data-identified=c.identified.to_string()>
                    <td class="mono">{name.clone()}</td>
                    <td class="num">{shown}</td>
                    <td class="muted">{unit(name)}</td>
                </tr>
            }
        })
        .collect_view();
    let stage = |label: &'static str, key: &'static str, s: &shared::calibrate::StageFit| {
        view! {
            <tr data-stage=key data-n=s.n data-r2=s.r2.to_string() data-r2-robust=s.r2_robust.to_string()>
                <td>{label}</td>
                <td class="num">{s.n}</td>
                <td class="num">{format!("{:.3}", s.r2)}</td>
                <td class="num">{format!("{:.3}", s.r2_robust)}</td>
                <td class="num">{format!("{:.1} %", s.relative_mad * 100.0)}</td>
            </tr>
        }
    };
    let decode = stage("decode (TPOT)", "decode", &f.decode);
    let prefill = stage("prefill (TTFT)", "prefill", &f.prefill);
    let notes = f.notes.clone();
    let unused = f.unused.len();
    view! {
        <div class="fit-tables">
            <table class="data fit-coefs" data-fit-coefficients="">
                <thead><tr><th>"coefficient"</th><th class="num">"value ± std error"</th><th>"unit"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
            <table class="data fit-stages">
                <thead><tr><th>"stage"</th><th class="num">"requests"</th><th class="num">"R²"</th><th class="num">"robust R²"</th><th class="num">"resid. spread"</th></tr></thead>
                <tbody>{decode}{prefill}</tbody>
            </table>
        </div>
        <p class="faint small" data-fit-unused=unused data-fit-ms=ms.map(|m| format!("{m:.1}"))>
            {format!(
                "{unused} requests used by neither stage · fitted in {} ms on the main thread",
                ms.map_or("?".into(), |m| format!("{m:.1}"))
            )}
        </p>
        {(!notes.is_empty()).then(|| view! {
            <ul class="fit-notes small muted">{notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
        })}
    }
}

/// What a run needs for the fit, after its refusal `error` (calibrate's own words), or why no run will do.
pub fn refusal_advice(error: &str) -> String {
    const RUN: &str = "A run the fit can always use: one user at a time (a closed loop of 1 user, no think time), \
        prompts of varied lengths, 30 requests or more — \"Set up a calibration run\" puts one in the explorer. Or \
        calibrate the target itself: a designed probe of about a minute that fits its profile and keeps it with the \
        target.";
    if error.contains("does not describe this server") {
        format!(
            "This is a genuine misfit, not a run too small: the server's timings do not follow the engine model's \
             step costs. A designed probe of the server (the command line's calibration against its URL) measures \
             each cost on its own. {RUN}"
        )
    } else if error.contains("alone on the server") {
        format!(
            "The prefill cost is measured on requests that ran alone on the server; with several sessions or users \
             at once almost none do. {RUN}"
        )
    } else if error.contains("distinct prompt lengths") {
        format!("The prefill cost needs prompts of several lengths; this run's were nearly all alike. {RUN}")
    } else {
        RUN.to_string()
    }
}

/// The run the fit can always use: `base`'s profile, SLOs and seed (else the default engine scenario's) with a
/// closed loop of one user, no think time, 40 requests of uniform prompt (200–4,000 tokens) and output (16–128)
/// lengths.
pub fn calibration_run(base: Option<shared::engine::EngineScenario>) -> Value {
    let base = base.unwrap_or_else(default_engine_scenario);
    let mut v = Scenario::Engine(base).to_value();
    v["workload"] = serde_json::json!({
        "kind": "closed_loop", "users": 1, "num_requests": 40, "think_s": 0.0,
        "prompt": {"dist": "uniform", "min": 200, "max": 4000},
        "output": {"dist": "uniform", "min": 16, "max": 128}
    });
    if let Some(m) = v.as_object_mut() {
        m.remove("fleet");
    }
    v
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn a_refusal_says_what_a_run_needs() {
        let alone = refusal_advice("7 requests were alone on the server during their prefill (need 8)");
        assert!(
            alone.contains("alone on the server") && alone.contains("one user at a time"),
            "{alone}"
        );
        let lengths = refusal_advice("3 distinct prompt lengths (need 4)");
        assert!(lengths.contains("several lengths"), "{lengths}");
        let misfit =
            refusal_advice("ms_per_new_token came out negative (-0.2): the model does not describe this server");
        assert!(misfit.starts_with("This is a genuine misfit"), "{misfit}");
        for text in [&alone, &lengths, &misfit] {
            assert!(!text.contains("--") && !text.contains('`'), "page words: {text}");
            assert!(
                text.contains("calibrate the target itself"),
                "offers the calibration: {text}"
            );
        }
        // The calibration run is a valid scenario: one user, no think time, varied prompts, the base's profile.
        let mut base = default_engine_scenario();
        base.profile.name = "mine".into();
        base.slo.ttft_ms = 777.0;
        let sc = Scenario::from_value(calibration_run(Some(base))).expect("a valid scenario");
        let Scenario::Engine(e) = &sc else {
            panic!("an engine scenario")
        };
        let shared::workload::Workload::ClosedLoop(w) = &e.workload else {
            panic!("a closed loop: {:?}", e.workload)
        };
        assert_eq!((w.users, w.think_s), (1, 0.0));
        assert!(w.num_requests >= 30);
        assert_eq!((e.profile.name.as_str(), e.slo.ttft_ms), ("mine", 777.0));
    }
    use shared::engine::{EngineScenario, SimOptions, simulate_with};
    use shared::workload::{ClosedLoopWorkload, LengthDist, Workload};

    /// One stream (closed loop, one user) on the default engine profile, varied prompts: every prefill is alone.
    fn run_scenario() -> EngineScenario {
        let mut e = default_engine_scenario();
        e.workload = Workload::ClosedLoop(ClosedLoopWorkload {
            users: 1,
            num_requests: 40,
            think_s: 0.0,
            prompt: LengthDist::Uniform { min: 100, max: 3000 },
            output: LengthDist::Fixed { tokens: 32 },
            shared_prefix_tokens: 0,
        });
        e.counterfactuals = false;
        e
    }

    fn records(sc: &EngineScenario) -> Vec<RequestRecord> {
        let opts = SimOptions {
            record_itl_quantiles: true,
            keep_records: true,
        };
        simulate_with(sc, opts).expect("valid").records
    }

    #[test]
    fn fits_a_run_and_the_explorer_gets_the_fitted_profile() {
        let sc = run_scenario();
        let v = Scenario::Engine(sc.clone()).to_value();
        let recs = records(&sc);
        let f = fit_run(&recs, Some(&v)).expect("a fit");
        // The engine made these records: the fit gives its coefficients back (per_seq is not identified with
        // one stream: fixed at 0 and folded into step_fixed).
        let truth = &sc.profile;
        let rel = |a: f64, b: f64| (a / b - 1.0).abs();
        assert!(
            rel(f.profile.prefill_tokens_per_ms, truth.prefill_tokens_per_ms) < 0.01,
            "{:?}",
            f.coefficients
        );
        assert!(
            rel(f.profile.step_fixed_ms, truth.step_fixed_ms + truth.per_seq_ms) < 0.02,
            "{:?}",
            f.coefficients
        );
        assert!(!f.coefficients["per_seq_ms"].identified);
        // The limits are the run's scenario's.
        assert_eq!(f.profile.num_kv_blocks, truth.num_kv_blocks);
        assert_eq!(f.profile.name, "fitted");
        let (ex, kept) = explorer_scenario(&f, Some(&v));
        assert!(kept);
        let Scenario::Engine(e) = &ex else { panic!("engine") };
        assert_eq!(e.profile, f.profile);
        assert_eq!(e.workload, sc.workload);
        // The share link carries the fitted profile.
        let link = shared::link::encode(&ex);
        let Scenario::Engine(back) = shared::link::decode(&link).expect("decodes") else {
            panic!("engine")
        };
        assert_eq!(back.workload, sc.workload);
        assert_eq!(back.profile.name, "fitted");
        // serde_json's default float parser may be one unit in the last place off for 17-digit numbers.
        for (a, b) in [
            (back.profile.step_fixed_ms, f.profile.step_fixed_ms),
            (back.profile.per_ctx_token_ms, f.profile.per_ctx_token_ms),
            (back.profile.prefill_tokens_per_ms, f.profile.prefill_tokens_per_ms),
            (back.profile.prefill_fixed_ms, f.profile.prefill_fixed_ms),
        ] {
            assert!((a - b).abs() <= 1e-15 * b.abs(), "{a} vs {b}");
        }
        // A seed-model run: the default engine scenario with the fitted profile.
        let seed = shared::presets::default_scenario().to_value();
        let (ex, kept) = explorer_scenario(&f, Some(&seed));
        assert!(!kept);
        assert!(matches!(ex, Scenario::Engine(e) if e.profile == f.profile));
    }

    #[test]
    fn too_few_records_give_calibrates_refusal() {
        let sc = run_scenario();
        let recs = records(&sc);
        let e = fit_run(&recs[..3], None).expect_err("refused");
        assert!(e.starts_with("cannot fit"), "{e}");
        assert!(e.contains("need 6") || e.contains("need 8"), "{e}");
        assert!(e.ends_with("(3 records)"), "{e}");
        let e = fit_run(&[], None).expect_err("refused");
        assert!(e.starts_with("cannot fit"), "{e}");
    }

    #[test]
    fn numbers_have_four_significant_digits() {
        assert_eq!(sig4(16.04321), "16.04");
        assert_eq!(sig4(0.0015), "0.001500");
        assert_eq!(sig4(6.0), "6.000");
        assert_eq!(sig4(12345.6), "12346");
        assert_eq!(sig4(0.0), "0");
        assert_eq!(unit("prefill_tokens_per_ms"), "tok/ms");
        assert_eq!(unit("batch_kv_ms_per_ktok"), "ms/ktok");
        assert_eq!(unit("per_ctx_token_ms"), "ms");
    }
}
