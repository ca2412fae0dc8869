//! GuideLLM `benchmarks.json` (`--output kind=json`): `metadata.guidellm_version`, the run's `config`, and
//! `benchmarks[]`, each with its strategy, aggregate `metrics` and `requests.{successful, errored, incomplete}`:
//! one object per request with `request_start_time`, `request_end_time` (epoch seconds), `prompt_tokens`,
//! `output_tokens`, `cached_tokens`, `time_to_first_token_ms`, `inter_token_latency_ms` and `info.timings`
//! (`request_start`, `first_token_iteration`, `last_token_iteration`, `token_iterations`, `request_end`).
//!
//! Definitions (GuideLLM 0.8): TTFT = first token iteration − request start, as ours; `inter_token_latency_ms` =
//! (last token − first token) / (output tokens − 1), a per-request mean: GuideLLM keeps no per-frame times, so
//! the record's ITL mean, p50, p99 and max are all that mean gap per frame; E2E = request end − request start, as
//! ours. `output_tokens` is the server's `usage` when the stream reported it (GuideLLM asks for it). With a
//! `sample_size` a benchmark keeps only a sample of its requests (noted).

use serde_json::Value;

use super::types::{Cx, ImportError, Imported, Peer, PeerStat, Tool, short};
use crate::record::{FailureKind, UsageSource};

pub(crate) fn read(cx: &Cx, text: &str) -> Result<Imported, ImportError> {
    let v = cx.parse(text)?;
    let mut out = Imported::new(Tool::Guidellm);
    out.tool_version = v
        .get("metadata")
        .and_then(|m| m.get("guidellm_version"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let benchmarks = cx.arr(&v, "", "benchmarks")?;
    if benchmarks.is_empty() {
        return Err(cx.err("benchmarks", "empty: no benchmark in the file"));
    }
    let mut conversations: std::collections::HashMap<String, u64> = Default::default();
    let mut steps: std::collections::HashMap<u64, u32> = Default::default();
    let mut summary_only = true;
    for (b, bench) in benchmarks.iter().enumerate() {
        let bpath = format!("benchmarks[{b}]");
        let reqs = cx.get(bench, &bpath, "requests")?;
        let rpath = format!("{bpath}.requests");
        if !reqs.is_object() {
            return Err(cx.err(
                &rpath,
                format!("expected {{successful, errored, incomplete}}, found {}", short(reqs)),
            ));
        }
        let mut kept = 0u64;
        for (kind, ok) in [("successful", true), ("errored", false), ("incomplete", false)] {
            let list = match reqs.get(kind) {
                None | Some(Value::Null) => continue,
                Some(Value::Array(l)) => l,
                Some(x) => {
                    return Err(cx.err(
                        format!("{rpath}.{kind}"),
                        format!("expected an array, found {}", short(x)),
                    ));
                }
            };
            for (i, r) in list.iter().enumerate() {
                let path = format!("{rpath}.{kind}[{i}]");
                let peer = request(cx, r, &path, ok, kind == "incomplete", &mut conversations)?;
                let s = steps.entry(peer.session).or_default();
                *s = (*s).max(peer.step + 1);
                let mut rec = peer.into_record();
                if kind == "incomplete" {
                    rec.failure = Some(FailureKind::Cut);
                }
                out.records.push(rec);
                kept += 1;
            }
        }
        summary_only &= kept == 0;
        // A sampled benchmark keeps fewer requests than it ran.
        if let Some(total) = bench
            .get("metrics")
            .and_then(|m| m.get("request_totals"))
            .and_then(|t| t.get("total"))
            .and_then(Value::as_u64)
            && total > kept
        {
            out.note(format!(
                "{bpath}: the file keeps {kept} of the benchmark's {total} requests (GuideLLM's sample_size): scores are of the sample"
            ));
        }
        if let Some(strategy) = bench
            .get("config")
            .and_then(|c| c.get("strategy"))
            .and_then(|s| s.get("type_"))
            .and_then(Value::as_str)
        {
            out.note(format!("{bpath}: strategy {strategy}"));
        }
    }
    if summary_only {
        return read_summary(cx, benchmarks, out);
    }
    for r in &mut out.records {
        r.steps_asked = steps.get(&r.session).copied().unwrap_or(1);
    }
    if benchmarks.len() > 1 {
        out.note("several benchmarks (a sweep): their requests are laid on one time axis, as they ran");
    }
    out.note(
        "GuideLLM keeps no per-frame times: each record's ITL (mean, p50, p99, max) is its mean gap per frame, \
         (last token − first token) / (frames − 1)",
    );
    out.note("t_submit is request_start_time (the request was sent; GuideLLM's scheduled time is info.timings.targeted_start)");
    out.rebase();
    Ok(out)
}

fn request(
    cx: &Cx,
    r: &Value,
    path: &str,
    ok: bool,
    incomplete: bool,
    conversations: &mut std::collections::HashMap<String, u64>,
) -> Result<Peer, ImportError> {
    let start = cx.num(r, path, "request_start_time")?;
    let end = match cx.opt_num(r, path, "request_end_time")? {
        Some(e) => e,
        None if !ok => start,
        None => return Err(cx.err(format!("{path}.request_end_time"), "missing")),
    };
    let info = r.get("info").filter(|i| i.is_object());
    let timings = info.and_then(|i| i.get("timings")).filter(|t| t.is_object());
    let tpath = format!("{path}.info.timings");
    let t = |k: &str| -> Result<Option<f64>, ImportError> {
        match timings {
            Some(t) => cx.opt_num(t, &tpath, k),
            None => Ok(None),
        }
    };
    let ttft_ms = cx.opt_num(r, path, "time_to_first_token_ms")?;
    let first = t("first_token_iteration")?;
    let last = t("last_token_iteration")?;
    let frames = t("token_iterations")?.map(|f| f.max(0.0).round() as u64);
    let gen_tokens = cx.opt_count(r, path, "output_tokens")?.unwrap_or(0);
    if ok && ttft_ms.is_none() && first.is_none() {
        return Err(cx.err(
            format!("{path}.time_to_first_token_ms"),
            "missing (and no info.timings.first_token_iteration)",
        ));
    }
    let ttft_s = ttft_ms.map(|m| m / 1e3).or(first.map(|f| f - start));
    // One mean gap per frame: GuideLLM keeps the first and last token's times only.
    let gaps_ms = match (first, last, frames) {
        (Some(f), Some(l), Some(n)) if n >= 2 && l >= f => {
            let g = ((l - f) * 1e3 / (n - 1) as f64) as f32;
            vec![g; (n - 1) as usize]
        }
        _ => match (cx.opt_num(r, path, "inter_token_latency_ms")?, gen_tokens) {
            (Some(itl), n) if n >= 2 => vec![itl as f32; (n - 1) as usize],
            _ => Vec::new(),
        },
    };
    let session = match info.and_then(|i| i.get("conversation_id")).and_then(Value::as_str) {
        Some(c) => {
            let next = conversations.len() as u64;
            *conversations.entry(c.to_string()).or_insert(next)
        }
        None => {
            let next = conversations.len() as u64;
            conversations.insert(format!("(request {path})"), next);
            next
        }
    };
    let step = info
        .and_then(|i| i.get("turn_index"))
        .and_then(Value::as_u64)
        .unwrap_or(0) as u32;
    let body: Option<Value> = r
        .get("request_args")
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|a| a.get("body").cloned());
    let asked = body
        .as_ref()
        .and_then(|b| b.get("max_tokens").or(b.get("max_completion_tokens")))
        .and_then(Value::as_u64);
    let chars = r
        .get("input_metrics")
        .and_then(|m| m.get("text_characters"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let error = info
        .and_then(|i| i.get("error"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Peer {
        session,
        step,
        steps_asked: 0,
        ok,
        t_submit: start,
        ttft_s,
        wall_s: (end - start).max(0.0),
        gen_tokens,
        asked_tokens: asked,
        usage_source: UsageSource::FinalFrame,
        prompt_tokens: cx.opt_count(r, path, "prompt_tokens")?,
        designed_prompt_tokens: None,
        cached_tokens: cx.opt_count(r, path, "cached_tokens")?,
        frames: frames.or((!gaps_ms.is_empty()).then(|| gaps_ms.len() as u64 + 1)),
        gaps_ms,
        prompt_chars: chars,
        finish_reason: None,
        error: if ok {
            None
        } else if incomplete {
            Some(format!(
                "cut: incomplete (GuideLLM stopped the benchmark before it finished){}",
                error.map(|e| format!(": {e}")).unwrap_or_default()
            ))
        } else {
            Some(error.unwrap_or_else(|| "errored (no error text)".into()))
        },
    })
}

/// Benchmarks without request objects: their aggregate metrics (`metrics.time_to_first_token_ms.successful`).
fn read_summary(cx: &Cx, benchmarks: &[Value], mut out: Imported) -> Result<Imported, ImportError> {
    let bench = &benchmarks[0];
    let metrics = cx.get(bench, "benchmarks[0]", "metrics")?;
    let mut s = super::types::PeerSummary::default();
    let stat = |k: &str| -> PeerStat {
        metrics
            .get(k)
            .and_then(|m| m.get("successful"))
            .map(|x| super::types::stat_of(x, 1.0))
            .unwrap_or_default()
    };
    if metrics.get("time_to_first_token_ms").is_none() {
        return Err(cx.err(
            "benchmarks[0].metrics.time_to_first_token_ms",
            "missing (a different version of the tool's format?)",
        ));
    }
    super::types::put(&mut s, "ttft_ms", stat("time_to_first_token_ms"));
    super::types::put(&mut s, "tpot_ms", stat("time_per_output_token_ms"));
    super::types::put(&mut s, "itl_ms", stat("inter_token_latency_ms"));
    let e2e = stat("request_latency");
    super::types::put(
        &mut s,
        "e2e_ms",
        PeerStat {
            mean: e2e.mean.map(|x| x * 1e3),
            p50: e2e.p50.map(|x| x * 1e3),
            p90: e2e.p90.map(|x| x * 1e3),
            p99: e2e.p99.map(|x| x * 1e3),
            min: e2e.min.map(|x| x * 1e3),
            max: e2e.max.map(|x| x * 1e3),
        },
    );
    super::types::put(&mut s, "prompt_tokens", stat("prompt_token_count"));
    super::types::put(&mut s, "output_tokens", stat("output_token_count"));
    super::types::put(&mut s, "request_throughput_rps", stat("requests_per_second"));
    super::types::put(&mut s, "output_throughput_tok_s", stat("output_tokens_per_second"));
    let totals = metrics.get("request_totals");
    s.completed = totals.and_then(|t| t.get("successful")).and_then(Value::as_u64);
    s.failed = totals.and_then(|t| t.get("errored")).and_then(Value::as_u64);
    s.duration_s = bench.get("duration").and_then(Value::as_f64);
    out.summary = Some(s);
    out.note("summary only: the benchmarks keep no request objects; the first benchmark's aggregates are read");
    Ok(out)
}
