//! The seed model's side of the explorer: its result, its sweep points and its three profiles, from
//! `shared::seed_model::evaluate` and `shared::seed_diagnostics::diagnose`. The page opens on the engine model, so
//! this code loads on demand (`crate::seed_job`, docs/page.md "Modules loaded on demand"): the first seed job
//! fetches it, in the worker or on the main thread.

use serde_json::Value;
use shared::scenario::Scenario;
use shared::seed_diagnostics::{self, SeedDiagnostics};
use shared::seed_model::{self, SeedScenario, SeedWorkload};

use crate::model::compute::{Callout, Outcome, Severity, SweepPoint, flatten};
use crate::worker::wire::{Done, Job};

/// Run a job of the seed model ([`Job::is_seed`]); any other job runs as [`Job::run`] runs it.
pub fn run(job: &Job) -> Done {
    if !job.is_seed() {
        return job.run();
    }
    let seed = |v: &Value| match Scenario::from_value(v.clone()) {
        Ok(Scenario::Seed(s)) => Ok(s),
        Ok(Scenario::Engine(_)) => Err("not a seed model scenario".to_string()),
        Err(e) => Err(e.to_string()),
    };
    match job {
        Job::Compute(v) => Done::Outcome(seed(v).and_then(|s| compute(&s))),
        // The seed model has no per-request times to clip to a live run's window: it is computed whole.
        Job::ComputeWindow(v, ..) => Done::Outcome(seed(v).and_then(|s| compute(&s)).map(|mut o| {
            o.describe = format!("{} · whole run (the seed model has no per-request times)", o.describe);
            o
        })),
        Job::SweepPoint(v) => Done::Point(seed(v).ok().and_then(|s| sweep_point(&s))),
        Job::SeedBand(_) | Job::OnDemand(..) => job.run(),
    }
}

/// One point of the goodput-vs-load sweep ([`crate::model::compute::sweep_plan`]) for the seed model.
pub fn sweep_point(s: &SeedScenario) -> Option<SweepPoint> {
    let r = seed_model::evaluate(s).ok()?;
    let SeedWorkload::Bursty(w) = &s.workload;
    Some(SweepPoint {
        x: w.mean_rps,
        goodput_rps: r.slo_goodput_rps,
        throughput_rps: r.request_throughput_rps,
    })
}

/// Compute everything the explorer shows for a seed model scenario.
pub fn compute(s: &SeedScenario) -> Result<Outcome, String> {
    let summary = seed_model::evaluate(s).map_err(|e| e.to_string())?;
    let value = serde_json::to_value(&summary).map_err(|e| e.to_string())?;
    let (metrics, labels) = flatten(&value);
    let SeedWorkload::Bursty(w) = &s.workload;
    let diagnostics = seed_callouts(s, &summary, &seed_diagnostics::diagnose(s, &summary));
    Ok(Outcome {
        metrics,
        labels,
        exact: true,
        ttft_cdf: Vec::new(),
        tpot_cdf: Vec::new(),
        timeline: Vec::new(),
        session_view: Vec::new(),
        retention: Vec::new(),
        diagnostics,
        slo_ttft_ms: s.slo.ttft_ms,
        slo_tpot_ms: s.slo.tpot_ms,
        sweep_label: "x: mean arrival rate (req/s) of the bursty trace".to_string(),
        sweep_current: Some(w.mean_rps),
        describe: format!(
            "{} requests · seed model{}",
            w.num_requests,
            if s.closed_loop { " · closed loop" } else { "" }
        ),
    })
}

/// The seed model's diagnostics as call-outs with their numbers (the seed's own values, printed exactly).
fn seed_callouts(s: &SeedScenario, summary: &seed_model::SeedSummary, d: &SeedDiagnostics) -> Vec<Callout> {
    let mut out = Vec::new();
    if let Some(c) = &d.closed_loop_illusion {
        let (open, closed) = (&c.open, &c.closed);
        out.push(Callout {
            id: "closed_loop_illusion".to_string(),
            severity: if c.attainment_gap > 0.2 {
                Severity::Warn
            } else {
                Severity::Info
            },
            title: "Closed-loop illusion".to_string(),
            body: format!(
                "Open loop (requests arrive on their own schedule): TTFT p50 {} ms, attainment {}. \
                 Closed loop on the same trace (one request at a time): TTFT p50 {} ms, attainment {}, \
                 but only {} req/s. A closed-loop benchmark hides the queueing that agent traffic meets.",
                open.ttft_p50_ms,
                crate::ui::fmt::pct(open.slo_attainment_ratio),
                closed.ttft_p50_ms,
                crate::ui::fmt::pct(closed.slo_attainment_ratio),
                closed.request_throughput_rps
            ),
        });
    }
    if let Some(o) = &d.overbatched {
        out.push(Callout {
            id: "overbatched".to_string(),
            severity: if o.overbatched { Severity::Bad } else { Severity::Good },
            title: if o.overbatched {
                "Over-batched".to_string()
            } else {
                "Batch size within the TPOT SLO".to_string()
            },
            body: format!(
                "TPOT = {} + {} × batch ms: it crosses the {} ms SLO at a batch of {:.1}; with all {} slots busy \
                 it is {:.2} ms.{}",
                o.base_tpot_ms,
                o.batch_tpot_slope_ms,
                o.tpot_slo_ms,
                o.slo_batch_limit,
                o.max_batch_slots,
                o.tpot_at_max_batch_ms,
                if o.overbatched {
                    " Fewer slots would trade queueing (TTFT) for per-token speed."
                } else {
                    ""
                }
            ),
        });
    }
    if d.prefill_queueing {
        let SeedWorkload::Bursty(w) = &s.workload;
        let p = &s.profile;
        out.push(Callout {
            id: "queueing".to_string(),
            severity: Severity::Bad,
            title: "Requests queue for the prefill lane".to_string(),
            body: format!(
                "Half the requests wait more than {} ms for their first token (SLO {} ms): the arrival rate \
                 ({} req/s mean, bursty) exceeds what one prefill lane at {} tok/ms with {} of the shared prefix \
                 cached can serve ({} req/s achieved).",
                summary.ttft_p50_ms,
                s.slo.ttft_ms,
                w.mean_rps,
                p.prefill_tokens_per_ms,
                crate::ui::fmt::pct(p.prefix_cache_hit_efficiency),
                summary.request_throughput_rps
            ),
        });
    }
    out
}

/// The seed's three profile comparisons, exactly as the seed reports them: (profile name, summary JSON).
pub fn seed_comparisons() -> Vec<(String, Result<Value, String>)> {
    seed_model::SEED_PROFILES
        .iter()
        .map(|p| {
            let result = seed_model::evaluate(&shared::presets::seed_scenario(p.clone()))
                .map_err(|e| e.to_string())
                .and_then(|r| serde_json::to_value(r).map_err(|e| e.to_string()));
            (p.name.to_string(), result)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn seed_comparisons_equal_the_seed_report() {
        let report = seed_model::seed_report();
        for (name, result) in seed_comparisons() {
            let got = result.expect("seed profile evaluates");
            assert_eq!(got, report["scenario_comparisons"][&name], "{name}");
        }
    }
}
