//! `trace`: explicit requests, each with its arrival and lengths ([`TraceWorkload`]): what `loadshape simulate
//! --like RUN.jsonl` builds from a live run's records ([`TraceWorkload::from_records`]), so the simulator sees the
//! live run's own arrivals, prompt sizes, cache hits and outputs. An open-loop trace: each request arrives at its
//! `arrival_ms`, whatever the engine's speed.

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;
use crate::record::RequestRecord;

use super::request::PlannedRequest;

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// Arrival after the run's origin, milliseconds.
    pub arrival_ms: f64,
    /// Tokens of the one shared system prompt this request starts with (what the prefix cache can hit).
    #[serde(default)]
    pub shared_prefix_tokens: u32,
    /// Tokens after the shared prefix.
    pub unique_prompt_tokens: u32,
    /// Output tokens (forced).
    pub output_tokens: u32,
}

/// Explicit requests, in arrival order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceWorkload {
    pub requests: Vec<TraceRequest>,
}

impl TraceWorkload {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.requests.is_empty() {
            return Err(ScenarioError::field("requests", "must hold at least one request"));
        }
        let mut last = 0.0;
        for (i, r) in self.requests.iter().enumerate() {
            if !(r.arrival_ms.is_finite() && r.arrival_ms >= last) {
                return Err(ScenarioError::field(
                    format!("requests[{i}].arrival_ms"),
                    format!(
                        "must be >= 0 and not before the previous request's (got {})",
                        r.arrival_ms
                    ),
                ));
            }
            last = r.arrival_ms;
            if r.output_tokens == 0 {
                return Err(ScenarioError::field(
                    format!("requests[{i}].output_tokens"),
                    "must be >= 1 (got 0)",
                ));
            }
            if u64::from(r.shared_prefix_tokens) + u64::from(r.unique_prompt_tokens) == 0 {
                return Err(ScenarioError::field(
                    format!("requests[{i}]"),
                    "the prompt must be >= 1 token",
                ));
            }
        }
        Ok(())
    }

    /// Requests per second over the span of the arrivals (all the requests when they arrive at once).
    pub fn rate_rps(&self) -> f64 {
        let span_s = self.requests.last().map_or(0.0, |r| r.arrival_ms) / 1000.0;
        if span_s > 0.0 {
            self.requests.len() as f64 / span_s
        } else {
            self.requests.len() as f64
        }
    }

    /// The planned requests.
    pub fn planned(&self) -> std::vec::IntoIter<PlannedRequest> {
        self.requests
            .iter()
            .map(|r| PlannedRequest {
                arrival_ms: r.arrival_ms,
                shared_prefix_tokens: r.shared_prefix_tokens,
                unique_prompt_tokens: r.unique_prompt_tokens,
                output_tokens: r.output_tokens,
            })
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// A live run's records as a trace, sorted by submission: arrival = `t_submit`; prompt = `prompt_tokens` (the
    /// server's count) or, when the server reported none, `designed_prompt_tokens`, else `base_asked`; shared
    /// prefix = `cached_tokens` as the live cache reported them (the simulator hits those tokens of one common
    /// system prompt, so a request's hit is kept, not which earlier request it reused); output = `gen_tokens` of
    /// completed records and `asked_tokens` of failed ones (what they would have generated). `None`: no record.
    pub fn from_records(records: &[RequestRecord]) -> Option<TraceWorkload> {
        let mut recs: Vec<&RequestRecord> = records.iter().collect();
        recs.sort_by(|a, b| a.t_submit.total_cmp(&b.t_submit));
        let t0 = recs.first()?.t_submit.min(0.0);
        let clamp = |n: u64| n.min(u64::from(u32::MAX)) as u32;
        let requests = recs
            .into_iter()
            .map(|r| {
                let prompt = r
                    .prompt_tokens
                    .or(r.designed_prompt_tokens)
                    .unwrap_or(r.base_asked)
                    .max(1);
                let cached = r.cached_tokens.unwrap_or(0).min(prompt - 1);
                let output = if r.ok && r.gen_tokens > 0 {
                    r.gen_tokens
                } else {
                    r.asked_tokens.max(1)
                };
                TraceRequest {
                    arrival_ms: ((r.t_submit - t0) * 1000.0).max(0.0),
                    shared_prefix_tokens: clamp(cached),
                    unique_prompt_tokens: clamp(prompt - cached),
                    output_tokens: clamp(output).max(1),
                }
            })
            .collect();
        Some(TraceWorkload { requests })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Workload;

    /// A trace reads as `"kind": "trace"`, plans its own requests, and names a bad one by its index.
    #[test]
    fn trace_plans_its_requests_and_names_bad_ones() {
        let w: Workload = serde_json::from_str(
            r#"{"kind": "trace", "requests": [
                {"arrival_ms": 0, "unique_prompt_tokens": 100, "output_tokens": 5},
                {"arrival_ms": 250, "shared_prefix_tokens": 64, "unique_prompt_tokens": 10, "output_tokens": 2}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(w.validate().is_ok());
        assert_eq!(w.kind(), "trace");
        let reqs: Vec<_> = w.requests(9).collect();
        assert_eq!(reqs.len(), 2);
        assert_eq!(
            (reqs[1].arrival_ms, reqs[1].shared_prefix_tokens, reqs[1].output_tokens),
            (250.0, 64, 2)
        );
        assert_eq!(w.expected_requests(), 2);
        let bad: Workload = serde_json::from_str(
            r#"{"kind": "trace", "requests": [{"arrival_ms": 5, "unique_prompt_tokens": 1, "output_tokens": 1},
                {"arrival_ms": 1, "unique_prompt_tokens": 1, "output_tokens": 1}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let e = bad.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("requests[1].arrival_ms"), "{e}");
    }
}
