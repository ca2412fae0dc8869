//! `vllm bench serve --save-result --save-detailed`: one JSON object with the run's settings (`backend`,
//! `model_id`, `request_rate`, `max_concurrency`, ...), its aggregates (`mean_ttft_ms`, `p99_itl_ms`, ...) and,
//! with `--save-detailed`, parallel per-request arrays: `input_lens`, `output_lens`, `ttfts` (s), `itls` (a list
//! of gaps per request, s), `latencies` (s), `start_times` (s, the client's `perf_counter`; recent versions),
//! `errors` (`""` when the request succeeded). Without `--save-detailed` the file is summary-only.
//!
//! Definitions (vllm/benchmarks/serve.py and lib/endpoint_request_func.py): TTFT runs from the request's send to
//! the first chunk with content, as ours; ITL is every gap between content chunks, as ours; `latency` ends at the
//! last content chunk (ours at the last byte, after the usage frame and `[DONE]`); `input_lens` is the prompt's
//! length by the benchmark's tokenizer (the dataset's designed length), not the server's count; `output_lens` is
//! the server's `usage.completion_tokens` where the stream reported it, else the tokenizer's count of the text.

use serde_json::Value;

use super::types::{Cx, ImportError, Imported, Peer, PeerStat, PeerSummary, Tool, put, short};
use crate::record::UsageSource;

pub(crate) fn read(cx: &Cx, text: &str) -> Result<Imported, ImportError> {
    let v = cx.parse(text)?;
    if !v.is_object() {
        return Err(cx.err("(file)", format!("expected a JSON object, found {}", short(&v))));
    }
    let mut out = Imported::new(Tool::VllmBench);
    if v.get("ttfts").is_none() {
        return read_summary(cx, &v, out);
    }
    let ttfts = nums(cx, &v, "ttfts")?;
    let n = ttfts.len();
    let latencies = nums(cx, &v, "latencies")?;
    let input_lens = nums(cx, &v, "input_lens")?;
    let output_lens = match v.get("output_lens") {
        Some(Value::Array(_)) => nums(cx, &v, "output_lens")?,
        _ => {
            return Err(cx.err(
                "output_lens",
                "missing or not an array (a different version of the tool's format?)",
            ));
        }
    };
    let itls = cx.arr(&v, "", "itls")?;
    let errors = v.get("errors").and_then(Value::as_array);
    let starts = match v.get("start_times") {
        Some(Value::Array(_)) => Some(nums(cx, &v, "start_times")?),
        _ => None,
    };
    for (key, len) in [
        ("latencies", latencies.len()),
        ("input_lens", input_lens.len()),
        ("output_lens", output_lens.len()),
        ("itls", itls.len()),
    ] {
        if len != n {
            return Err(cx.err(
                key,
                format!("{len} entries where ttfts has {n} (the per-request arrays must be parallel)"),
            ));
        }
    }
    if let Some(s) = &starts
        && s.len() != n
    {
        return Err(cx.err("start_times", format!("{} entries where ttfts has {n}", s.len())));
    }
    let asked = v
        .get("output_len")
        .or(v.get("random_output_len"))
        .and_then(Value::as_u64);
    for i in 0..n {
        let gaps = match &itls[i] {
            Value::Array(g) => g
                .iter()
                .map(|x| x.as_f64().filter(|f| f.is_finite()).map(|f| (f * 1e3) as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| cx.err(format!("itls[{i}]"), "expected numbers (seconds)"))?,
            other => {
                return Err(cx.err(
                    format!("itls[{i}]"),
                    format!("expected an array of gaps, found {}", short(other)),
                ));
            }
        };
        let error = errors
            .and_then(|e| e.get(i))
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty());
        let ok = error.is_none();
        let count = |x: f64| x.max(0.0).round() as u64;
        out.records.push(
            Peer {
                session: i as u64,
                ok,
                t_submit: starts.as_ref().map_or(0.0, |s| s[i]),
                ttft_s: (ok && ttfts[i] > 0.0).then_some(ttfts[i]),
                wall_s: latencies[i].max(0.0),
                gen_tokens: count(output_lens[i]),
                asked_tokens: asked,
                usage_source: UsageSource::FinalFrame,
                prompt_tokens: Some(count(input_lens[i])),
                designed_prompt_tokens: Some(count(input_lens[i])),
                frames: ok.then(|| gaps.len() as u64 + 1),
                gaps_ms: gaps,
                error: error.map(str::to_string),
                ..Peer::default()
            }
            .into_record(),
        );
    }
    if n == 0 {
        return Err(cx.err("ttfts", "empty: no request"));
    }
    if starts.is_none() {
        out.note("no start_times (an older vllm bench): every request's t_submit is 0, so time series and concurrency are unknown");
    } else {
        out.note("t_submit is start_times (the client's perf_counter when the request was sent)");
    }
    out.note("prompt_tokens is input_lens, the benchmark's tokenizer's length of the prompt, not the server's usage");
    out.note("no cached tokens in the file (cached_tokens unknown); no prompt characters (prompt_chars 0)");
    out.note("wall_s is vLLM's latency: it ends at the last content chunk (ours at the last byte)");
    if asked.is_none() {
        out.note("asked output length not in the file: asked_tokens = generated tokens");
    }
    out.tool_version = v.get("vllm_version").and_then(Value::as_str).map(str::to_string);
    out.rebase();
    Ok(out)
}

fn nums(cx: &Cx, v: &Value, key: &str) -> Result<Vec<f64>, ImportError> {
    cx.arr(v, "", key)?
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_f64()
                .filter(|f| f.is_finite())
                .ok_or_else(|| cx.err(format!("{key}[{i}]"), format!("expected a number, found {}", short(x))))
        })
        .collect()
}

fn read_summary(cx: &Cx, v: &Value, mut out: Imported) -> Result<Imported, ImportError> {
    let f = |k: &str| v.get(k).and_then(Value::as_f64).filter(|x| x.is_finite());
    if f("mean_ttft_ms").is_none() && f("mean_e2el_ms").is_none() {
        return Err(cx.err(
            "mean_ttft_ms",
            "missing, and no per-request `ttfts` either (a different version of the tool's format?)",
        ));
    }
    let mut s = PeerSummary::default();
    for (ours, theirs) in [
        ("ttft_ms", "ttft"),
        ("tpot_ms", "tpot"),
        ("itl_ms", "itl"),
        ("e2e_ms", "e2el"),
    ] {
        put(
            &mut s,
            ours,
            PeerStat {
                mean: f(&format!("mean_{theirs}_ms")),
                p50: f(&format!("median_{theirs}_ms")).or(f(&format!("p50_{theirs}_ms"))),
                p90: f(&format!("p90_{theirs}_ms")),
                p99: f(&format!("p99_{theirs}_ms")),
                ..Default::default()
            },
        );
    }
    let one = |x: Option<f64>| PeerStat {
        mean: x,
        ..Default::default()
    };
    put(&mut s, "request_throughput_rps", one(f("request_throughput")));
    put(&mut s, "output_throughput_tok_s", one(f("output_throughput")));
    s.completed = v.get("completed").and_then(Value::as_u64);
    s.failed = v.get("failed").and_then(Value::as_u64);
    s.duration_s = f("duration");
    out.summary = Some(s);
    out.note("summary only (saved without --save-detailed): no per-request data");
    out.note("tpot_ms is vLLM's TPOT ((latency − TTFT) / (output tokens − 1), latency to the last content chunk)");
    Ok(out)
}
