//! NVIDIA AIPerf: `profile_export.jsonl` (one JSON object per request: `metadata` with nanosecond wall-clock
//! timestamps, `metrics` with `{value, unit}` each, `error` when it failed) and the summary
//! `profile_export_aiperf.json` (aggregates `{unit, avg, p50, p90, p99, min, max, ...}` per metric).
//!
//! Definitions (AIPerf 0.13): `time_to_first_token` runs from `request_start_ns` (the request was sent; the
//! connection set-up of a fresh connection is inside) to the first response carrying content, as ours;
//! `inter_chunk_latency` is every gap between content responses (SSE messages), as our ITL over frames;
//! `inter_token_latency` is (latency − TTFT) / (output tokens − 1), our TPOT. `input_sequence_length` and
//! `output_sequence_length` are AIPerf's own tokenizer's counts; `usage_prompt_tokens`, `usage_completion_tokens`
//! and `usage_prompt_cache_read_tokens` are the server's `usage`, preferred where present.

use std::collections::HashMap;

use serde_json::Value;

use super::types::{Cx, ImportError, Imported, Peer, PeerSummary, Tool, put, stat_of};
use crate::record::UsageSource;

pub(crate) fn read(cx: &Cx, text: &str) -> Result<Imported, ImportError> {
    // The summary export is one JSON object; the records export is JSON lines.
    if let Ok(v) = serde_json::from_str::<Value>(text)
        && v.get("metadata").is_none()
    {
        return read_summary(cx, &v);
    }
    let mut out = Imported::new(Tool::Aiperf);
    let mut conversations: HashMap<String, u64> = HashMap::new();
    let mut warmup = 0usize;
    let mut peers = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let path = format!("line {}", i + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| {
            let last = lines[i + 1..].iter().all(|l| l.trim().is_empty());
            let why = if e.is_eof() && last {
                format!("the last line ends early (truncated file?): {e}")
            } else {
                format!("not a JSON object: {e}")
            };
            cx.err(&path, why)
        })?;
        let meta = cx.get(&v, &path, "metadata")?;
        let mpath = format!("{path}.metadata");
        let metrics = cx.get(&v, &path, "metrics")?;
        if let Some(phase) = meta.get("benchmark_phase").and_then(Value::as_str)
            && phase != "profiling"
        {
            warmup += 1;
            continue;
        }
        let start_ns = cx.num(meta, &mpath, "request_start_ns")?;
        let end_ns = cx.opt_num(meta, &mpath, "request_end_ns")?;
        let conv = meta.get("conversation_id").and_then(Value::as_str).map(str::to_string);
        let next = conversations.len() as u64;
        let session = match conv {
            Some(c) => *conversations.entry(c).or_insert(next),
            None => peers.len() as u64,
        };
        let turn = cx.opt_count(meta, &mpath, "turn_index")?.unwrap_or(0);
        let m = |key: &str| metric(cx, metrics, &format!("{path}.metrics"), key);
        let error = v.get("error").filter(|e| !e.is_null());
        let ttft_ms = m("time_to_first_token")?;
        let latency_ms = m("request_latency")?;
        let wall_s = match (latency_ms, end_ns) {
            (Some(l), _) => l / 1e3,
            (None, Some(e)) => (e - start_ns) / 1e9,
            (None, None) if error.is_some() => 0.0,
            (None, None) => {
                return Err(cx.err(
                    format!("{path}.metrics.request_latency"),
                    "missing (and no request_end_ns)",
                ));
            }
        };
        let usage_out = m("usage_completion_tokens")?;
        let client_out = m("output_sequence_length")?;
        let (gen_tokens, usage_source) = match (usage_out, client_out) {
            (Some(u), _) => (u, UsageSource::FinalFrame),
            (None, Some(c)) => (c, UsageSource::Missing),
            (None, None) => (0.0, UsageSource::Missing),
        };
        let gaps: Vec<f32> = match metrics.get("inter_chunk_latency") {
            None | Some(Value::Null) => Vec::new(),
            Some(x) => {
                let p = format!("{path}.metrics.inter_chunk_latency");
                let vals = x.get("value").ok_or_else(|| cx.err(&p, "no `value`"))?;
                unit_is(cx, x, &p, "ms")?;
                vals.as_array()
                    .ok_or_else(|| cx.err(format!("{p}.value"), "expected an array of gaps"))?
                    .iter()
                    .map(|g| g.as_f64().filter(|f| f.is_finite()).map(|f| f as f32))
                    .collect::<Option<Vec<f32>>>()
                    .ok_or_else(|| cx.err(format!("{p}.value"), "expected numbers"))?
            }
        };
        let count = |f: Option<f64>| f.map(|x| x.max(0.0).round() as u64);
        peers.push(Peer {
            session,
            step: turn as u32,
            steps_asked: 0,
            ok: error.is_none() && !meta.get("was_cancelled").and_then(Value::as_bool).unwrap_or(false),
            t_submit: start_ns / 1e9,
            ttft_s: ttft_ms.map(|t| t / 1e3),
            wall_s,
            gen_tokens: gen_tokens.max(0.0).round() as u64,
            asked_tokens: None,
            usage_source,
            prompt_tokens: count(m("usage_prompt_tokens")?.or(m("input_sequence_length")?)),
            designed_prompt_tokens: count(m("input_sequence_length")?),
            cached_tokens: count(m("usage_prompt_cache_read_tokens")?),
            frames: (!gaps.is_empty()).then(|| gaps.len() as u64 + 1),
            gaps_ms: gaps,
            prompt_chars: 0,
            finish_reason: None,
            error: error.map(|e| {
                let msg = e.get("message").and_then(Value::as_str).unwrap_or("error");
                match e.get("code").and_then(Value::as_u64) {
                    Some(c) => format!("HTTP {c}: {msg}"),
                    None => msg.to_string(),
                }
            }),
        });
    }
    if peers.is_empty() && warmup == 0 {
        return Err(cx.err("(file)", "no request line"));
    }
    // Steps asked per conversation: its last turn + 1.
    let mut turns: HashMap<u64, u32> = HashMap::new();
    for p in &peers {
        let t = turns.entry(p.session).or_default();
        *t = (*t).max(p.step + 1);
    }
    let multi = turns.values().any(|&t| t > 1);
    for mut p in peers {
        p.steps_asked = turns[&p.session];
        if p.ok && p.usage_source == UsageSource::Missing {
            out.note("no usage_completion_tokens: output tokens are AIPerf's own tokenizer's count of the text");
        }
        out.records.push(p.into_record());
    }
    if out.records.iter().any(|r| r.cached_tokens.is_none()) {
        out.note("usage_prompt_cache_read_tokens missing on some requests: their cached tokens are unknown");
    }
    if warmup > 0 {
        out.note(format!(
            "{warmup} warmup request(s) left out (benchmark_phase is not \"profiling\")"
        ));
    }
    if multi {
        out.note("conversation_id becomes the session and turn_index the step (multi-turn)");
    }
    out.note("t_submit is request_start_ns (when the request was sent; a fixed schedule's intended time is credit_issued_ns)");
    out.note(
        "TTFT from request_start_ns, so a fresh connection's set-up is inside it (as in ours); ITL over content \
         responses (inter_chunk_latency), 0 where two arrived in one read",
    );
    out.note("asked output length not in the record: asked_tokens = generated tokens; prompt_chars unknown (0)");
    out.rebase();
    Ok(out)
}

/// A `{value, unit}` metric as a number, or `None` when absent. Times must be in ms, counts in tokens.
fn metric(cx: &Cx, metrics: &Value, path: &str, key: &str) -> Result<Option<f64>, ImportError> {
    let Some(x) = metrics.get(key).filter(|x| !x.is_null()) else {
        return Ok(None);
    };
    let p = format!("{path}.{key}");
    let unit = if key.contains("tokens") || key.contains("length") {
        "tokens"
    } else {
        "ms"
    };
    unit_is(cx, x, &p, unit)?;
    cx.opt_num(x, &p, "value")
}

fn unit_is(cx: &Cx, x: &Value, path: &str, want: &str) -> Result<(), ImportError> {
    match x.get("unit").and_then(Value::as_str) {
        Some(u) if u == want => Ok(()),
        Some(u) => Err(cx.err(
            format!("{path}.unit"),
            format!("expected {want:?}, found {u:?} (the tool's schema changed?)"),
        )),
        None => Err(cx.err(format!("{path}.unit"), "missing (expected `{value, unit}`)")),
    }
}

fn read_summary(cx: &Cx, v: &Value) -> Result<Imported, ImportError> {
    let mut out = Imported::new(Tool::Aiperf);
    let Value::Object(map) = v else {
        return Err(cx.err("(file)", "not a JSON object"));
    };
    out.tool_version = v.get("aiperf_version").and_then(Value::as_str).map(str::to_string);
    let ttft = cx.get(v, "", "time_to_first_token")?;
    if !ttft.is_object() {
        return Err(cx.err(
            "time_to_first_token",
            format!("expected an object of statistics, found {}", super::types::short(ttft)),
        ));
    }
    let mut s = PeerSummary::default();
    let stat = |k: &str, scale: f64| map.get(k).map(|x| stat_of(x, scale)).unwrap_or_default();
    put(&mut s, "ttft_ms", stat("time_to_first_token", 1.0));
    put(&mut s, "tpot_ms", stat("inter_token_latency", 1.0));
    put(&mut s, "itl_ms", stat("inter_chunk_latency", 1.0));
    put(&mut s, "e2e_ms", stat("request_latency", 1.0));
    put(&mut s, "prompt_tokens", stat("input_sequence_length", 1.0));
    put(&mut s, "output_tokens", stat("output_sequence_length", 1.0));
    put(&mut s, "request_throughput_rps", stat("request_throughput", 1.0));
    put(&mut s, "output_throughput_tok_s", stat("output_token_throughput", 1.0));
    let avg = |k: &str| map.get(k).and_then(|x| x.get("avg")).and_then(Value::as_f64);
    s.completed = avg("request_count").map(|c| c.round() as u64);
    s.duration_s = avg("benchmark_duration");
    s.failed = map
        .get("error_summary")
        .and_then(Value::as_array)
        .map(|errs| errs.iter().filter_map(|e| e.get("count").and_then(Value::as_u64)).sum());
    out.summary = Some(s);
    out.note("summary only (profile_export_aiperf.json): no per-request data; read profile_export.jsonl for records");
    out.note("tpot_ms is AIPerf's inter_token_latency ((latency − TTFT) / (output tokens − 1)); itl_ms its inter_chunk_latency");
    Ok(out)
}
