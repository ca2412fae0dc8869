//! The human-readable summary of a record file, laid out like `vllm bench serve`'s result block: what
//! `loadshape replay` prints at the end of a run and `loadshape report` prints for any record file.

use std::fmt::Write as _;

use shared::metrics::{Slo, Summary};
use shared::record::RequestRecord;

use super::prom::ServerReport;
use super::summary::{Checks, REUSE_FLAG_RATIO, prefix_reuse};

fn pct(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{:.2} %", v * 100.0))
}

fn opt(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.2}"))
}

/// The human-readable summary, laid out like `vllm bench serve`'s result block. `server` is the run's `/metrics`
/// report (replica 0's in a fleet); `replica_servers[i]` is replica `i`'s in a run over several URLs (empty
/// otherwise), shown as a table of its own.
pub fn render(
    recs: &[RequestRecord],
    s: &Summary,
    slo: &Slo,
    server: Option<&ServerReport>,
    replica_servers: &[Option<ServerReport>],
) -> String {
    let mut o = String::new();
    let line = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(o, "{k:<44}{v}");
    };
    let head = |o: &mut String, t: &str| {
        let _ = writeln!(o, "{:-^60}", t);
    };
    let _ = writeln!(o, "{:=^60}", " loadshape replay result ");
    line(&mut o, "Successful requests:", s.completed.to_string());
    // `s.failed` counts every record that did not complete; the run's end cut some of them, the rest failed.
    let f = shared::metrics::failures(recs);
    line(&mut o, "Failed requests:", s.failed.to_string());
    if f.cut > 0 && f.failed > 0 {
        line(&mut o, "  of which cut at the end of the run:", f.cut.to_string());
    }
    if f.never_sent > 0 {
        line(
            &mut o,
            "Never sent (session ended on an error):",
            format!("{} of {} planned", f.never_sent, f.planned),
        );
    }
    if let Some(e) = &f.first_error {
        let e: String = e.chars().take(200).collect();
        line(&mut o, "First error:", e);
    }
    line(&mut o, "Benchmark duration (s):", format!("{:.2}", s.duration_s));
    line(&mut o, "Total input tokens:", s.total_input_tokens.to_string());
    line(&mut o, "Total generated tokens:", s.total_output_tokens.to_string());
    line(
        &mut o,
        "Request throughput (req/s):",
        format!("{:.2}", s.request_throughput_rps),
    );
    line(
        &mut o,
        "Output token throughput (tok/s):",
        format!("{:.2}", s.output_throughput_tok_s),
    );
    line(
        &mut o,
        "Total token throughput (tok/s):",
        format!("{:.2}", s.total_token_throughput_tok_s),
    );
    for (name, title, v) in [
        (
            "TTFT",
            " Time to First Token ",
            [s.ttft_mean_ms, s.ttft_p50_ms, s.ttft_p90_ms, s.ttft_p99_ms],
        ),
        (
            "TPOT",
            " Time per Output Token (excl. 1st token) ",
            [s.tpot_mean_ms, s.tpot_p50_ms, s.tpot_p90_ms, s.tpot_p99_ms],
        ),
        (
            "E2EL",
            " End-to-end Latency ",
            [s.e2el_mean_ms, s.e2el_p50_ms, s.e2el_p90_ms, s.e2el_p99_ms],
        ),
    ] {
        head(&mut o, title);
        line(&mut o, &format!("Mean {name} (ms):"), format!("{:.2}", v[0]));
        line(&mut o, &format!("Median {name} (ms):"), format!("{:.2}", v[1]));
        line(&mut o, &format!("P90 {name} (ms):"), format!("{:.2}", v[2]));
        line(&mut o, &format!("P99 {name} (ms):"), format!("{:.2}", v[3]));
    }
    if s.ttft_content_p50_ms.is_some() || s.reasoning_share.is_some() {
        head(&mut o, " Hidden reasoning ");
        line(&mut o, "Reasoning share of output:", pct(s.reasoning_share));
        line(&mut o, "Mean TTFT-content (ms):", opt(s.ttft_content_mean_ms));
        line(&mut o, "Median TTFT-content (ms):", opt(s.ttft_content_p50_ms));
        line(&mut o, "P99 TTFT-content (ms):", opt(s.ttft_content_p99_ms));
    }
    if s.itl_mean_ms.is_some() {
        head(&mut o, " Inter-token Latency ");
        line(&mut o, "Mean ITL (ms):", opt(s.itl_mean_ms));
        line(&mut o, "Median ITL (ms):", opt(s.itl_p50_ms));
        line(&mut o, "P99 ITL (ms):", opt(s.itl_p99_ms));
    }
    if s.spec_acceptance.is_some() {
        head(&mut o, " Speculative Decoding ");
        let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        line(&mut o, "Accepted share of drafts:", f(s.spec_acceptance));
        line(&mut o, "Accepted tokens per step:", f(s.spec_accepted_per_step));
    }
    head(
        &mut o,
        &format!(" Goodput (TTFT <= {} ms, TPOT <= {} ms) ", slo.ttft_ms, slo.tpot_ms),
    );
    line(&mut o, "Request goodput (req/s):", format!("{:.2}", s.goodput_rps));
    line(&mut o, "SLO attainment:", pct(Some(s.slo_attainment_ratio)));
    line(&mut o, "Sessions:", s.sessions.to_string());
    line(
        &mut o,
        "Session goodput (sessions/s):",
        format!("{:.4}", s.session_goodput_sps),
    );
    line(&mut o, "Session attainment:", pct(Some(s.session_attainment_ratio)));
    head(&mut o, " Prefix cache ");
    line(&mut o, "Designed cached share:", pct(s.cached_share_designed));
    line(
        &mut o,
        "Achieved cached share (server usage):",
        pct(s.cached_share_achieved),
    );
    let step0 = match s.step0_cached_share {
        Some(v) if v > 0.05 => format!(
            "{} -- WARNING: cold starts hit the cache; content is not unique",
            pct(Some(v))
        ),
        Some(v) => format!("{} (ok: ~0 expected)", pct(Some(v))),
        None => "n/a (server reports no cached_tokens)".into(),
    };
    line(&mut o, "Step-0 cached share:", step0);
    if !s.retention.is_empty() {
        line(
            &mut o,
            "Cached share by think time (steps):",
            shared::metrics::retention_text(&s.retention),
        );
    }
    if let Some(r) = prefix_reuse(s) {
        let v = if r.below_design {
            format!(
                "{:.1} % of designed -- WARNING: below {:.0} %: the server recomputed prefixes the sessions resent \
                 unchanged (a chat template that re-renders earlier turns, or cache eviction)",
                r.ratio * 100.0,
                REUSE_FLAG_RATIO * 100.0
            )
        } else {
            format!("{:.1} % of designed (ok)", r.ratio * 100.0)
        };
        line(&mut o, "Reuse vs design:", v);
    }
    let c = Checks::of(recs);
    if c.rx_clock_kernel + c.rx_clock_user > 0 {
        line(
            &mut o,
            "TTFT clock, kernel / user (requests):",
            format!("{} / {}", c.rx_clock_kernel, c.rx_clock_user),
        );
    }
    if c.usage_missing + c.prompt_usage_missing + c.short_outputs + c.cut > 0 {
        head(&mut o, " Checks ");
        if c.usage_missing > 0 {
            line(&mut o, "Usage missing (frames counted):", c.usage_missing.to_string());
        }
        if c.prompt_usage_missing > 0 {
            line(
                &mut o,
                "Prompt tokens not reported:",
                c.prompt_usage_missing.to_string(),
            );
        }
        if c.short_outputs > 0 {
            line(
                &mut o,
                "Shorter than asked (length not forced):",
                c.short_outputs.to_string(),
            );
        }
        if c.cut > 0 {
            line(&mut o, "Cut at the end of the run:", c.cut.to_string());
        }
    }
    let split = shared::metrics::replicas::replica_split(recs);
    if !split.is_empty() {
        head(&mut o, " Replicas ");
        let _ = writeln!(
            o,
            "{:<10}{:>10}{:>10}{:>14}{:>14}{:>12}",
            "replica", "requests", "share", "cached share", "TTFT p50 ms", "in flight"
        );
        for x in &split {
            let _ = writeln!(
                o,
                "{:<10}{:>10}{:>10}{:>14}{:>14.2}{:>12.2}",
                x.replica,
                x.requests,
                pct(Some(x.request_share)),
                pct(Some(x.cached_share)),
                x.ttft_p50_ms,
                x.mean_in_flight
            );
        }
        line(
            &mut o,
            "Sessions on more than one replica:",
            shared::metrics::replicas::sessions_on_several_replicas(recs).to_string(),
        );
    }
    if replica_servers.iter().any(Option::is_some) {
        head(&mut o, " Server side per replica (/metrics) ");
        let _ = writeln!(
            o,
            "{:<10}{:>10}{:>10}{:>13}{:>14}{:>13}",
            "replica", "scrapes", "KV max", "preemptions", "prefix hits", "running max"
        );
        for (i, r) in replica_servers.iter().enumerate() {
            let Some(r) = r else { continue };
            let _ = writeln!(
                o,
                "{:<10}{:>10}{:>10}{:>13}{:>14}{:>13}",
                i,
                format!("{} ({})", r.scrapes, r.failed_scrapes),
                pct(r.kv_cache_usage_max),
                r.preemptions.map_or("n/a".into(), |p| format!("{p:.0}")),
                pct(r.prefix_cache_hit_rate),
                opt(r.running_max)
            );
        }
    }
    if let Some(r) = server {
        let whose = if replica_servers.is_empty() { "" } else { ", replica 0" };
        head(
            &mut o,
            &format!(
                " Server side (/metrics: {}{whose}) ",
                r.family.as_deref().unwrap_or("unknown")
            ),
        );
        line(
            &mut o,
            "Scrapes (failed):",
            format!("{} ({})", r.scrapes, r.failed_scrapes),
        );
        line(&mut o, "Prompt throughput (tok/s):", opt(r.prompt_throughput_tok_s));
        line(
            &mut o,
            "Generation throughput (tok/s):",
            opt(r.generation_throughput_tok_s),
        );
        line(&mut o, "Prefix cache hit rate:", pct(r.prefix_cache_hit_rate));
        line(
            &mut o,
            "Running requests (mean / max):",
            format!("{} / {}", opt(r.running_mean), opt(r.running_max)),
        );
        line(
            &mut o,
            "Waiting requests (mean / max):",
            format!("{} / {}", opt(r.waiting_mean), opt(r.waiting_max)),
        );
    }
    let _ = write!(o, "{}", "=".repeat(60));
    o
}
