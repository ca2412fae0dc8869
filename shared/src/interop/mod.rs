//! Other load tools' results and configs: read into loadshape's records and scenarios, and written back.
//!
//! [`import`] turns one file of `vllm bench serve` (`--save-result --save-detailed`), GuideLLM (`benchmarks.json`),
//! AIPerf (`profile_export.jsonl`, or the summary `profile_export_aiperf.json`) or inference-perf (per-request
//! `per_request_lifecycle_metrics.json`, or a `summary_lifecycle_metrics.json`) into [`RequestRecord`](crate::record::RequestRecord)s, with a
//! note of every field the file lacks and every definition that differs from ours; a file with no per-request
//! data becomes a [`PeerSummary`] and says so. [`detect`] names the tool from the file's shape. [`config`] reads
//! their workload configs into the nearest scenario and writes theirs from ours. Field-by-field mapping:
//! `docs/interop.md`.
//!
//! Pure: the caller reads the file and passes its name (for the errors) and text.

pub mod aiperf;
pub mod config;
pub mod guidellm;
pub mod inference_perf;
mod types;
pub mod vllm_bench;

pub(crate) use types::{Cx, short};
pub use types::{ImportError, Imported, PeerStat, PeerSummary, Tool};

use serde_json::Value;

/// Which tool wrote this file, from its shape: an error naming what was found when no tool's shape fits.
pub fn detect(file: &str, text: &str) -> Result<Tool, ImportError> {
    let err = |m: String| ImportError {
        file: file.into(),
        tool: None,
        field: "(file)".into(),
        message: m,
    };
    let first = first_json(text).map_err(|e| err(format!("not JSON or JSON lines: {e}")))?;
    if inference_perf::looks_like(&first) {
        return Ok(Tool::InferencePerf);
    }
    let Value::Object(map) = &first else {
        return Err(err(format!(
            "not a JSON object, nor inference-perf's array of requests (found {})",
            short(&first)
        )));
    };
    let has = |k: &str| map.contains_key(k);
    if has("metadata") && has("metrics") && map.get("metadata").is_some_and(|m| m.get("request_start_ns").is_some()) {
        return Ok(Tool::Aiperf);
    }
    if has("aiperf_version") || (has("time_to_first_token") && has("request_throughput") && has("input_config")) {
        return Ok(Tool::Aiperf);
    }
    if has("benchmarks") && map.get("benchmarks").is_some_and(Value::is_array) {
        return Ok(Tool::Guidellm);
    }
    if has("backend") && (has("ttfts") || has("mean_ttft_ms") || has("completed")) {
        return Ok(Tool::VllmBench);
    }
    let mut keys: Vec<&str> = map.keys().map(String::as_str).take(8).collect();
    keys.sort_unstable();
    Err(err(format!(
        "not a file of vllm-bench, guidellm, aiperf or inference-perf that loadshape knows (top-level keys: {}); \
         name the tool with --from if it is one",
        keys.join(", ")
    )))
}

/// The first JSON value of a file: the whole file when it parses as one value, else its first non-blank line
/// (JSON lines).
fn first_json(text: &str) -> Result<Value, serde_json::Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok(v),
        Err(whole) => match text.lines().find(|l| !l.trim().is_empty()) {
            Some(line) if line.len() < text.trim_end().len() => serde_json::from_str(line),
            _ => Err(whole),
        },
    }
}

/// Read one file as `tool` wrote it.
pub fn import(tool: Tool, file: &str, text: &str) -> Result<Imported, ImportError> {
    let cx = Cx { file, tool };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let read = match tool {
        Tool::VllmBench => vllm_bench::read(&cx, text),
        Tool::Guidellm => guidellm::read(&cx, text),
        Tool::Aiperf => aiperf::read(&cx, text),
        Tool::InferencePerf => inference_perf::read(&cx, text),
    };
    // A file of another tool read as this one: say whose it looks like.
    let mut out = read.map_err(|mut e| {
        if let Ok(other) = detect(file, text)
            && other != tool
        {
            e.message = format!("{} (the file looks like {other}'s: --from {other})", e.message);
        }
        e
    })?;
    out.check_records();
    if out.records.is_empty() && out.summary.is_none() {
        return Err(cx.err("(file)", "no request in the file"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_names_round_trip() {
        for t in Tool::ALL {
            assert_eq!(t.name().parse::<Tool>(), Ok(t));
        }
        assert!("genai-perf".parse::<Tool>().unwrap_err().contains("one of: vllm-bench"));
    }

    #[test]
    fn vllm_bench_arrays_must_be_parallel() {
        let text = json!({"backend": "vllm", "ttfts": [0.1, 0.2], "latencies": [0.3], "input_lens": [5, 5],
                          "output_lens": [2, 2], "itls": [[0.01], [0.01]], "errors": ["", ""]})
        .to_string();
        assert_eq!(detect("v.json", &text), Ok(Tool::VllmBench));
        let e = import(Tool::VllmBench, "v.json", &text).unwrap_err();
        assert_eq!((e.field.as_str(), e.tool), ("latencies", Some(Tool::VllmBench)), "{e}");
        assert!(e.message.contains("1 entries where ttfts has 2"), "{e}");
    }

    fn aiperf_line(phase: &str, error: Option<Value>) -> String {
        let mut v = json!({"metadata": {"conversation_id": "c", "turn_index": 0, "benchmark_phase": phase,
                                        "request_start_ns": 1_000_000_000u64, "request_end_ns": 1_100_000_000u64},
                           "metrics": {"request_latency": {"value": 100.0, "unit": "ms"}}});
        if let Some(e) = error {
            v["error"] = e;
        } else {
            v["metrics"]["time_to_first_token"] = json!({"value": 20.0, "unit": "ms"});
            v["metrics"]["usage_completion_tokens"] = json!({"value": 9, "unit": "tokens"});
            v["metrics"]["usage_prompt_tokens"] = json!({"value": 50, "unit": "tokens"});
            v["metrics"]["inter_chunk_latency"] = json!({"value": vec![10.0; 8], "unit": "ms"});
        }
        v.to_string()
    }

    #[test]
    fn aiperf_errors_fail_and_warmups_are_left_out() {
        let text = [
            aiperf_line("warmup", None),
            aiperf_line("profiling", None),
            aiperf_line(
                "profiling",
                Some(json!({"code": 500, "type": "Internal", "message": "boom"})),
            ),
        ]
        .join("\n");
        let out = import(Tool::Aiperf, "p.jsonl", &text).unwrap();
        assert_eq!(out.records.len(), 2);
        let (ok, bad) = (&out.records[0], &out.records[1]);
        assert!(
            ok.ok && ok.ttft_s == Some(0.02) && ok.gen_tokens == 9 && ok.sse_frames == 9,
            "{ok:?}"
        );
        assert_eq!(ok.itl.map(|i| i.p50_ms), Some(10.0));
        assert!(!bad.ok && bad.error.as_deref() == Some("HTTP 500: boom"), "{bad:?}");
        assert!(
            out.notes.iter().any(|n| n.contains("1 warmup request")),
            "{:?}",
            out.notes
        );
    }

    #[test]
    fn guidellm_errored_and_incomplete_requests_are_failures() {
        let req = |start: f64| {
            json!({"request_start_time": start, "request_end_time": start + 0.5, "prompt_tokens": 10,
                   "output_tokens": 4, "time_to_first_token_ms": 50.0,
                   "info": {"conversation_id": format!("c{start}"), "turn_index": 0, "error": "reset",
                            "timings": {"first_token_iteration": start + 0.05, "last_token_iteration": start + 0.35,
                                        "token_iterations": 4}}})
        };
        let text = json!({"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": [{"requests": {
            "successful": [req(100.0)], "errored": [req(101.0)], "incomplete": [req(102.0)]}}]})
        .to_string();
        assert_eq!(detect("b.json", &text), Ok(Tool::Guidellm));
        let out = import(Tool::Guidellm, "b.json", &text).unwrap();
        assert_eq!(out.tool_version.as_deref(), Some("0.8.1"));
        let r = &out.records;
        assert_eq!(r.len(), 3);
        assert!(
            r[0].ok && (r[0].itl.map_or(0.0, |i| i.mean_ms) - 100.0).abs() < 1e-3,
            "{:?}",
            r[0]
        );
        assert_eq!((r[1].ok, r[1].error.as_deref()), (false, Some("reset")));
        assert_eq!(r[2].failure, Some(crate::record::FailureKind::Cut));
        assert_eq!(r[2].t_submit, 2.0);
    }

    #[test]
    fn an_unknown_file_is_named_with_its_keys() {
        let e = detect("x.json", r#"{"foo": 1, "bar": 2}"#).unwrap_err();
        assert_eq!(e.file, "x.json");
        assert!(e.message.contains("bar, foo"), "{e}");
        let e = detect("x.json", "{\"benchmarks\": [").unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
