//! `trace`: explicit requests, each with its arrival and lengths ([`TraceWorkload`]): what `loadshape simulate
//! --like RUN.jsonl` builds from a live run's records ([`TraceWorkload::from_records`]), so the simulator sees the
//! live run's own arrivals, prompt sizes, cache hits and outputs; or a production trace file (Mooncake JSONL or
//! Dynamo's agentic Mooncake, `path`), whose requests carry their block `hash_ids` (content identity) and their
//! dependencies (`after`: a session's previous turn, `wait_for`). The file is parsed by
//! [`super::mooncake`] from text the caller read (this crate does no I/O). A request with no dependency arrives at
//! its `arrival_ms`, whatever the engine's speed; one with dependencies is sent `delay_ms` after the last of them
//! completes (and not before its `arrival_ms`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;
use crate::record::RequestRecord;

use super::request::PlannedRequest;

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// Arrival after the run's origin, milliseconds (a request with dependencies: the earliest it is sent).
    pub arrival_ms: f64,
    /// Tokens of the one shared system prompt this request starts with (what the prefix cache can hit).
    #[serde(default)]
    pub shared_prefix_tokens: u32,
    /// Tokens after the shared prefix (with `hash_ids`: the whole prompt, the trace's `input_length`).
    pub unique_prompt_tokens: u32,
    /// Output tokens (forced).
    pub output_tokens: u32,
    /// The trace's block hash ids: block `i` covers prompt tokens `i·block_size .. (i+1)·block_size` (the last one
    /// may be partial), and two requests whose lists start alike share exactly those blocks of content. Empty: the
    /// content is described by `shared_prefix_tokens` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hash_ids: Vec<u64>,
    /// Indices of earlier requests this one waits for (a session's previous turn, agentic `wait_for`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<u32>,
    /// With `after`: milliseconds between the last dependency completing and this request being sent (the trace's
    /// `delay` plus `tool_wait_ms`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: f64,
    /// The trace's session (`session_id`, numbered in order of first appearance), if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u32>,
    /// Agentic Mooncake `prefix_reset`: the request starts a new context (a compaction), so none of its prompt was
    /// designed to be cached (`designed_cached_tokens` 0; the simulator counts its misses as `compacted_tokens`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub prefix_reset: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl TraceRequest {
    /// Prompt tokens.
    pub fn prompt_tokens(&self) -> u64 {
        u64::from(self.shared_prefix_tokens) + u64::from(self.unique_prompt_tokens)
    }
}

/// Which trace file format `path` holds ([`super::mooncake`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`; optional `session_id`,
    /// `delay`.
    Mooncake,
    /// Dynamo's agentic Mooncake: Mooncake's fields plus `request_id`, `wait_for`, `tool_wait_ms`, `branches`,
    /// `prefix_reset`.
    #[serde(alias = "agentic-mooncake")]
    AgenticMooncake,
}

/// Explicit requests, in arrival order, given inline (`requests`) or read from a trace file (`path` and the
/// options after it; the agent or the page reads the file and [`TraceWorkload::load_text`] fills `requests`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceWorkload {
    #[serde(default)]
    pub requests: Vec<TraceRequest>,
    /// The trace file, relative to the scenario file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The file's format; absent: detected from its first line (`request_id` means agentic Mooncake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<TraceFormat>,
    /// Tokens per hash block of the trace (default 512, Mooncake's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Multiplies every time of the trace (timestamps and delays): 0.5 replays it twice as fast (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// Keep only the first N requests of the window (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Window: only requests whose timestamp is at or after this many seconds of trace time; arrivals then count
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
    /// Window: only requests whose timestamp is before this many seconds of trace time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
    /// SHA-256 of the trace file's bytes (hex), set when it is loaded: a link names the trace by it, and a file
    /// given for the link must match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl TraceWorkload {
    /// Inline requests.
    pub fn inline(requests: Vec<TraceRequest>) -> TraceWorkload {
        TraceWorkload {
            requests,
            path: None,
            format: None,
            block_size: None,
            time_scale: None,
            max_requests: None,
            start_s: None,
            end_s: None,
            sha256: None,
        }
    }

    /// Tokens per hash block (`block_size`, default 512).
    pub fn hash_block_size(&self) -> u32 {
        self.block_size.unwrap_or(512)
    }

    /// Whether the requests still have to be read from `path` (no request given or loaded yet).
    pub fn needs_file(&self) -> bool {
        self.requests.is_empty() && (self.path.is_some() || self.sha256.is_some())
    }

    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.block_size == Some(0) {
            return Err(ScenarioError::field("block_size", "must be >= 1 (got 0)"));
        }
        if let Some(t) = self.time_scale
            && !(t.is_finite() && t > 0.0)
        {
            return Err(ScenarioError::field("time_scale", format!("must be > 0 (got {t})")));
        }
        if self.max_requests == Some(0) {
            return Err(ScenarioError::field("max_requests", "must be >= 1 (got 0)"));
        }
        for (name, v) in [("start_s", self.start_s), ("end_s", self.end_s)] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(ScenarioError::field(name, format!("must be >= 0 (got {v})")));
            }
        }
        if let (Some(a), Some(b)) = (self.start_s, self.end_s)
            && b <= a
        {
            return Err(ScenarioError::field(
                "end_s",
                format!("must be > start_s {a} (got {b})"),
            ));
        }
        if self.needs_file() {
            // Read later: `loadshape simulate`/`replay` read `path`, the page the file it is given.
            return Ok(());
        }
        if self.requests.is_empty() {
            return Err(ScenarioError::field(
                "requests",
                "must hold at least one request (or give a trace `path`)",
            ));
        }
        let mut last = 0.0;
        for (i, r) in self.requests.iter().enumerate() {
            if let Some(&d) = r.after.iter().find(|&&d| d as usize >= i) {
                return Err(ScenarioError::field(
                    format!("requests[{i}].after"),
                    format!("must name earlier requests only (got {d})"),
                ));
            }
            if !(r.delay_ms.is_finite() && r.delay_ms >= 0.0) {
                return Err(ScenarioError::field(
                    format!("requests[{i}].delay_ms"),
                    format!("must be >= 0 (got {})", r.delay_ms),
                ));
            }
            if !r.after.is_empty() {
                if !(r.arrival_ms.is_finite() && r.arrival_ms >= 0.0) {
                    return Err(ScenarioError::field(
                        format!("requests[{i}].arrival_ms"),
                        format!("must be >= 0 (got {})", r.arrival_ms),
                    ));
                }
            } else if !(r.arrival_ms.is_finite() && r.arrival_ms >= last) {
                return Err(ScenarioError::field(
                    format!("requests[{i}].arrival_ms"),
                    format!(
                        "must be >= 0 and not before the previous request's (got {})",
                        r.arrival_ms
                    ),
                ));
            } else {
                last = r.arrival_ms;
            }
            if r.output_tokens == 0 {
                return Err(ScenarioError::field(
                    format!("requests[{i}].output_tokens"),
                    "must be >= 1 (got 0)",
                ));
            }
            if r.prompt_tokens() == 0 {
                return Err(ScenarioError::field(
                    format!("requests[{i}]"),
                    "the prompt must be >= 1 token",
                ));
            }
            let bs = u64::from(self.hash_block_size());
            if (r.hash_ids.len() as u64).saturating_sub(1) * bs >= r.prompt_tokens() {
                return Err(ScenarioError::field(
                    format!("requests[{i}].hash_ids"),
                    format!(
                        "{} hash ids of {bs} tokens need more than {} prompt tokens (got {})",
                        r.hash_ids.len(),
                        (r.hash_ids.len() as u64 - 1) * bs,
                        r.prompt_tokens()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether any request carries hash ids or dependencies (the simulator then keys content by hash id and
    /// schedules dependents on completion).
    pub fn is_structured(&self) -> bool {
        self.requests
            .iter()
            .any(|r| !r.hash_ids.is_empty() || !r.after.is_empty())
    }

    /// Requests per second over the span of the arrivals (all the requests when they arrive at once).
    pub fn rate_rps(&self) -> f64 {
        let span_s = self.requests.iter().map(|r| r.arrival_ms).fold(0.0, f64::max) / 1000.0;
        if span_s > 0.0 {
            self.requests.len() as f64 / span_s
        } else {
            self.requests.len() as f64
        }
    }

    /// The planned requests: every request in order (one with dependencies at its `arrival_ms`; the simulator and
    /// replay send those on completion instead, see [`TraceWorkload::is_structured`]).
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
    /// server's count) or, when the server reported none, `designed_prompt_tokens`, else `base_asked`; output =
    /// `gen_tokens` of completed records and `asked_tokens` of failed ones (what they would have generated).
    ///
    /// Content, in [`LIKE_BLOCK_TOKENS`]-token hash blocks, so that a request's `cached_tokens` are hit where the live
    /// server found them: a session's step (records of one `session` and `inst`) starts with the blocks of its own
    /// previous prompt, as many whole blocks of it as it had cached; a first step starts with that many blocks of one
    /// common system prompt; the rest of every prompt is its own. The simulator then hits a step's cached tokens
    /// only while its previous prompt is still in the simulated cache, as the server did. Two things are not
    /// carried: the part of a hit that lies beyond the previous prompt (the reply's tokens the server found cached:
    /// the simulator prefills them) and the last partial block of a hit. `None`: no record.
    pub fn from_records(records: &[RequestRecord]) -> Option<TraceWorkload> {
        let mut recs: Vec<&RequestRecord> = records.iter().collect();
        crate::order::sort_by_f64_key(&mut recs, |r| r.t_submit);
        let t0 = recs.first()?.t_submit.min(0.0);
        let clamp = |n: u64| n.min(u64::from(u32::MAX)) as u32;
        let bs = u64::from(LIKE_BLOCK_TOKENS);
        // Per (session, inst): its steps, its trace session id (numbered in order of first appearance, among those
        // of more than one step) and its last prompt's whole-block hash ids.
        #[derive(Default)]
        struct Chain {
            steps: u32,
            id: Option<u32>,
            prev: Vec<u64>,
        }
        let mut chains: HashMap<(u64, u32), Chain> = HashMap::new();
        for r in &recs {
            chains.entry((r.session, r.inst)).or_default().steps += 1;
        }
        let mut next_id = 0u32;
        // Ids below 2^62 are the common system prompt's block i (id i); fresh ids count up from 2^62.
        let mut fresh = 1u64 << 62;
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
                let chain = chains.entry((r.session, r.inst)).or_default();
                if chain.steps > 1 && chain.id.is_none() {
                    chain.id = Some(next_id);
                    next_id += 1;
                }
                let hit = (cached / bs) as usize;
                let mut ids: Vec<u64> = if chain.prev.is_empty() {
                    (0..hit as u64).collect()
                } else {
                    chain.prev[..hit.min(chain.prev.len())].to_vec()
                };
                while (ids.len() as u64) * bs < prompt {
                    ids.push(fresh);
                    fresh += 1;
                }
                // Only whole blocks of a prompt can be hit by the next step.
                chain.prev = ids[..(prompt / bs) as usize].to_vec();
                let session = chain.id;
                TraceRequest {
                    arrival_ms: ((r.t_submit - t0) * 1000.0).max(0.0),
                    shared_prefix_tokens: clamp(cached),
                    unique_prompt_tokens: clamp(prompt - cached),
                    output_tokens: clamp(output).max(1),
                    hash_ids: ids,
                    after: Vec::new(),
                    delay_ms: 0.0,
                    session,
                    prefix_reset: false,
                }
            })
            .collect();
        Some(TraceWorkload {
            block_size: Some(LIKE_BLOCK_TOKENS),
            ..TraceWorkload::inline(requests)
        })
    }
}

/// Tokens per hash block of [`TraceWorkload::from_records`] (vLLM's and the engine presets' KV block).
pub const LIKE_BLOCK_TOKENS: u32 = 16;

#[cfg(test)]
mod tests {
    use super::super::Workload;
    use super::{LIKE_BLOCK_TOKENS, RequestRecord, TraceWorkload};

    /// A sessions run's records: each step starts with its own session's previous prompt, as many whole blocks of
    /// it as the live server had cached; a first step's hit is the common system prompt; nothing else is shared.
    #[test]
    fn like_a_run_each_step_hits_its_own_sessions_previous_prompt() {
        let rec = |session: u64, step: u32, t: f64, prompt: u64, cached: u64| {
            serde_json::from_value::<RequestRecord>(serde_json::json!({
                "schema": 1, "session": session, "inst": 0, "step": step, "steps_asked": 3, "base_asked": 1000,
                "ok": true, "t_submit": t, "ttft_s": 0.1, "wall_s": 0.5, "gen_tokens": 8, "asked_tokens": 8,
                "prompt_tokens": prompt, "cached_tokens": cached, "sse_frames": 8, "prompt_chars": 4000,
                "usage_source": "final_frame"
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        // Interleaved: session 0 starts with 40 cached tokens of the system prompt, session 1 with none; step 2 of
        // session 0 found less than its previous prompt cached (100 of 1,300).
        let records = vec![
            rec(1, 0, 0.1, 900, 0),
            rec(0, 0, 0.0, 1000, 40),
            rec(0, 1, 1.0, 1300, 1010),
            rec(1, 1, 1.1, 1200, 905),
            rec(0, 2, 2.0, 1500, 100),
        ];
        let w = TraceWorkload::from_records(&records).unwrap_or_else(|| panic!("records"));
        assert!(w.validate().is_ok() && w.is_structured());
        assert_eq!(w.hash_block_size(), LIKE_BLOCK_TOKENS);
        let r = &w.requests;
        // Sorted by submission: s0 st0, s1 st0, s0 st1, s1 st1, s0 st2.
        assert_eq!(
            r.iter().map(|q| q.prompt_tokens()).collect::<Vec<_>>(),
            [1000, 900, 1300, 1200, 1500]
        );
        assert_eq!((r[0].session, r[1].session, r[2].session), (Some(0), Some(1), Some(0)));
        for q in r {
            assert_eq!(q.hash_ids.len() as u64, q.prompt_tokens().div_ceil(16), "{q:?}");
        }
        // 40 cached tokens of the system prompt: its first 2 whole blocks; the second session's first step shares nothing.
        assert_eq!(&r[0].hash_ids[..2], &[0, 1]);
        assert!(r[0].hash_ids[2] >= 1 << 62);
        assert!(r[1].hash_ids.iter().all(|id| !r[0].hash_ids.contains(id)));
        // Each next step: the previous prompt's blocks up to its hit, then its own; a hit past the previous prompt's
        // whole blocks (1,010 of 1,000: the reply's tokens) takes all of them (62), 905 of 900 too (56).
        assert_eq!(&r[2].hash_ids[..62], &r[0].hash_ids[..62]);
        assert!(!r[0].hash_ids.contains(&r[2].hash_ids[62]));
        assert_eq!(&r[3].hash_ids[..56], &r[1].hash_ids[..56]);
        assert_eq!(&r[4].hash_ids[..6], &r[2].hash_ids[..6]);
        assert!(!r[2].hash_ids.contains(&r[4].hash_ids[6]));
        // The live hit is the designed one of each request.
        assert_eq!(
            r.iter().map(|q| q.shared_prefix_tokens).collect::<Vec<_>>(),
            [40, 0, 1010, 905, 100]
        );
    }

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
