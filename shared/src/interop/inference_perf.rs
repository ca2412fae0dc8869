//! kubernetes-sigs inference-perf: `per_request_lifecycle_metrics.json` (a JSON array, one object per request:
//! `start_time`, `end_time` in seconds of the client's monotonic clock, the `request` body as text, `info` with the
//! client's token counts, the server's `usage` and every content chunk's arrival time, `error`), written with
//! `report.request_lifecycle.per_request: true`; and the summaries `summary_lifecycle_metrics.json` /
//! `stage_N_lifecycle_metrics.json` (`successes.latency.time_to_first_token.{mean, median, p90, p99, ...}` in
//! seconds).
//!
//! Definitions (inference-perf 0.7): TTFT = first output token's time − `start_time`, as ours; ITL = gaps between
//! `output_token_times` (one per token: a chunk of several tokens gives gaps of 0); TPOT = (last token − first
//! token) / (output tokens − 1), ours ends at the last byte instead; `request_latency` = `end_time` −
//! `start_time`. Output tokens are the client's re-tokenisation of the text unless the report was made with
//! `use_server_output_tokens`; the per-request file keeps both, and the server's `usage` is taken here.

use serde_json::Value;

use super::types::{Cx, ImportError, Imported, Peer, PeerSummary, Tool, put, short, stat_of};
use crate::record::UsageSource;

/// An inference-perf file: a per-request array or a lifecycle summary.
pub(crate) fn looks_like(first: &Value) -> bool {
    match first {
        Value::Array(items) => items
            .first()
            .is_some_and(|r| r.get("start_time").is_some() && r.get("end_time").is_some() && r.get("info").is_some()),
        Value::Object(m) => {
            m.contains_key("load_summary") || (m.contains_key("successes") && m.contains_key("failures"))
        }
        _ => false,
    }
}

pub(crate) fn read(cx: &Cx, text: &str) -> Result<Imported, ImportError> {
    let v = cx.parse(text)?;
    let items = match &v {
        Value::Array(items) => items,
        Value::Object(_) => return read_summary(cx, &v),
        other => {
            return Err(cx.err(
                "(file)",
                format!("expected an array of requests, found {}", short(other)),
            ));
        }
    };
    let mut out = Imported::new(Tool::InferencePerf);
    let mut sessions: std::collections::HashMap<String, (u64, u32)> = Default::default();
    let mut client_counted = 0usize;
    for (i, r) in items.iter().enumerate() {
        let path = format!("[{i}]");
        let start = cx.num(r, &path, "start_time")?;
        let end = cx.num(r, &path, "end_time")?;
        let info = cx.get(r, &path, "info")?;
        let ipath = format!("{path}.info");
        let resp = info.get("response_metrics").filter(|x| !x.is_null());
        let rpath = format!("{ipath}.response_metrics");
        let error = r.get("error").filter(|e| !e.is_null());
        let usage = resp.and_then(|x| x.get("server_usage")).filter(|u| !u.is_null());
        let upath = format!("{rpath}.server_usage");
        let times = |key: &str| -> Result<Vec<f64>, ImportError> {
            match resp.and_then(|x| x.get(key)) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|t| t.as_f64().filter(|f| f.is_finite()))
                    .collect::<Option<Vec<f64>>>()
                    .ok_or_else(|| cx.err(format!("{rpath}.{key}"), "expected numbers (seconds)")),
                Some(x) => Err(cx.err(
                    format!("{rpath}.{key}"),
                    format!("expected an array, found {}", short(x)),
                )),
            }
        };
        let token_times = times("output_token_times")?;
        let chunk_times = times("chunk_times")?;
        let frames = if chunk_times.is_empty() {
            &token_times
        } else {
            &chunk_times
        };
        let first = token_times.first().or(chunk_times.first()).copied();
        let client_out = match resp {
            Some(x) => cx.opt_count(x, &rpath, "output_tokens")?,
            None => None,
        };
        let (server_out, prompt, cached) = match usage {
            Some(u) => (
                cx.opt_count(u, &upath, "completion_tokens")?,
                cx.opt_count(u, &upath, "prompt_tokens")?,
                match u.get("prompt_tokens_details").filter(|d| !d.is_null()) {
                    Some(d) => cx.opt_count(d, &format!("{upath}.prompt_tokens_details"), "cached_tokens")?,
                    None => None,
                },
            ),
            None => (None, None, None),
        };
        let (gen_tokens, usage_source) = match (server_out, client_out) {
            (Some(s), _) => (s, UsageSource::FinalFrame),
            (None, Some(c)) => {
                client_counted += 1;
                (c, UsageSource::Missing)
            }
            (None, None) => (0, UsageSource::Missing),
        };
        let designed = info
            .get("request_metrics")
            .and_then(|m| m.get("text"))
            .and_then(|t| t.get("input_tokens"))
            .and_then(Value::as_u64)
            .or_else(|| info.get("input_tokens").and_then(Value::as_u64));
        // The request body, as sent: the output length asked for and the prompt's characters.
        let body: Option<Value> = r
            .get("request")
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str(s).ok());
        let asked = body
            .as_ref()
            .and_then(|b| b.get("max_tokens").or(b.get("max_completion_tokens")))
            .and_then(Value::as_u64);
        let prompt_chars = body.as_ref().map_or(0, prompt_chars);
        let (session, step) = match r.get("session_id").and_then(Value::as_str) {
            Some(id) => {
                let next = sessions.len() as u64;
                let e = sessions.entry(id.to_string()).or_insert((next, 0));
                e.1 += 1;
                (e.0, e.1 - 1)
            }
            None => (1_000_000_000 + i as u64, 0),
        };
        let gaps: Vec<f32> = frames.windows(2).map(|w| ((w[1] - w[0]) * 1e3) as f32).collect();
        out.records.push(
            Peer {
                session,
                step,
                steps_asked: 0,
                ok: error.is_none(),
                t_submit: start,
                ttft_s: first.map(|t| t - start),
                wall_s: end - start,
                gen_tokens,
                asked_tokens: asked,
                usage_source,
                prompt_tokens: prompt.or(designed),
                designed_prompt_tokens: designed,
                cached_tokens: cached,
                frames: Some(frames.len() as u64),
                gaps_ms: gaps,
                prompt_chars,
                finish_reason: None,
                error: error.map(|e| {
                    let kind = e.get("error_type").and_then(Value::as_str).unwrap_or("error");
                    let msg = e.get("error_msg").and_then(Value::as_str).unwrap_or("");
                    format!("{kind}: {msg}")
                }),
            }
            .into_record(),
        );
    }
    if items.is_empty() {
        return Err(cx.err("(file)", "an empty array: no request"));
    }
    // Session ids that never repeat were one-request sessions: number them in order.
    if sessions.is_empty() {
        for (i, r) in out.records.iter_mut().enumerate() {
            r.session = i as u64;
        }
    } else {
        let steps: std::collections::HashMap<u64, u32> = sessions.values().map(|&(s, n)| (s, n)).collect();
        for r in &mut out.records {
            if let Some(&n) = steps.get(&r.session) {
                r.steps_asked = n;
            }
        }
    }
    if client_counted > 0 {
        out.note(format!(
            "{client_counted} request(s) without the server's usage: output tokens are inference-perf's re-tokenisation of the text"
        ));
    }
    if out.records.iter().any(|r| r.ok && r.cached_tokens.is_none()) {
        out.note("no prompt_tokens_details.cached_tokens in the server's usage: cached tokens unknown");
    }
    out.note("t_submit is start_time (the request was sent); the scheduled time is not in the per-request file");
    out.note(
        "TTFT is the first output token's time − start_time, as ours; ITL here is over chunk_times (content chunks), \
         inference-perf's own ITL is over output_token_times (one per token)",
    );
    out.note("E2E (wall_s) is end_time − start_time, as inference-perf's request_latency");
    out.rebase();
    Ok(out)
}

/// Characters of the prompt in a request body: `prompt`, or the text of `messages`.
fn prompt_chars(body: &Value) -> u64 {
    if let Some(p) = body.get("prompt").and_then(Value::as_str) {
        return p.chars().count() as u64;
    }
    body.get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .filter_map(|m| m.get("content").and_then(Value::as_str))
                .map(|c| c.chars().count() as u64)
                .sum()
        })
        .unwrap_or(0)
}

fn read_summary(cx: &Cx, v: &Value) -> Result<Imported, ImportError> {
    let mut out = Imported::new(Tool::InferencePerf);
    let ok = cx.get(v, "", "successes")?;
    let lat = cx.get(ok, "successes", "latency")?;
    let mut s = PeerSummary::default();
    let stat = |k: &str| lat.get(k).map(|x| stat_of(x, 1e3)).unwrap_or_default();
    if lat.get("time_to_first_token").is_none() && lat.get("request_latency").is_none() {
        return Err(cx.err(
            "successes.latency.request_latency",
            "missing (a different version of the tool's format?)",
        ));
    }
    put(&mut s, "ttft_ms", stat("time_to_first_token"));
    put(&mut s, "tpot_ms", stat("time_per_output_token"));
    put(&mut s, "itl_ms", stat("inter_token_latency"));
    put(&mut s, "e2e_ms", stat("request_latency"));
    if let Some(p) = ok.get("prompt_tokens") {
        put(&mut s, "prompt_tokens", stat_of(p, 1.0));
    }
    if let Some(p) = ok.get("output_tokens").or(ok.get("output_len")) {
        put(&mut s, "output_tokens", stat_of(p, 1.0));
    }
    let tp = ok.get("throughput");
    let rate = |k: &str| tp.and_then(|t| t.get(k)).and_then(Value::as_f64);
    if let Some(r) = rate("requests_per_sec") {
        put(
            &mut s,
            "request_throughput_rps",
            super::types::PeerStat {
                mean: Some(r),
                ..Default::default()
            },
        );
    }
    if let Some(r) = rate("output_tokens_per_sec") {
        put(
            &mut s,
            "output_throughput_tok_s",
            super::types::PeerStat {
                mean: Some(r),
                ..Default::default()
            },
        );
    }
    s.completed = ok.get("count").and_then(Value::as_u64);
    s.failed = v.get("failures").and_then(|f| f.get("count")).and_then(Value::as_u64);
    s.duration_s = v.get("benchmark_time_seconds").and_then(Value::as_f64);
    out.summary = Some(s);
    out.note(
        "summary only (lifecycle summary): no per-request data; run with report.request_lifecycle.per_request: true \
         for records",
    );
    out.note("tpot_ms is inference-perf's time_per_output_token ((last token − first token) / (output tokens − 1))");
    Ok(out)
}
