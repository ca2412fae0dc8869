//! The per-request record: one line of a live run's JSONL file, and one simulated request.
//!
//! Simulated and live runs produce the same type so that ONE scoring module turns either into percentiles,
//! goodput and time series. Field names follow the seed's `agent_replay.py` records (`session inst step
//! steps_asked base_asked ok t_submit ttft_s wall_s gen_tokens asked_tokens prompt_tokens sse_frames
//! prompt_chars`) plus what a demanding user needs: cached tokens, per-token timing, finish reason and error.

use serde::{Deserialize, Serialize};

/// Bumped whenever a field changes meaning or is removed. Readers accept older schemas they know.
pub const RECORD_SCHEMA_VERSION: u32 = 1;

/// Where the generated-token count of a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// `usage` arrived in its own final frame (OpenAI `stream_options.include_usage`).
    FinalFrame,
    /// `usage` arrived on the frame that carried `finish_reason` (llama.cpp).
    FinishFrame,
    /// No `usage` at all: `gen_tokens` counts content frames, which undercounts with MTP. Flagged.
    Missing,
    /// Produced by the simulator, which knows every count exactly.
    #[default]
    Simulated,
}

/// Which clock timed a live request's frames. TTFT, ITL and E2E end at a frame's arrival time; this says whether
/// that was the kernel's receive timestamp of the frame's bytes or the moment the client read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameClock {
    /// The socket's receive timestamp (`SO_TIMESTAMPNS`): when the bytes reached the machine.
    Kernel,
    /// `Instant::now()` when the client's task took the bytes: adds whatever the task waited for its thread.
    User,
}

/// One request, simulated or live. Times are seconds; `t_submit` is seconds since the run's origin
/// (the simulator's t = 0, or the live run's start), so records of both kinds lay over each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// [`RECORD_SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    /// Session slot id (for open-loop traffic: the request index, one "session" per request).
    pub session: u64,
    /// Instance of the slot (respawn count).
    pub inst: u32,
    /// Step within the session, from 0.
    pub step: u32,
    /// Steps the session was asked to run.
    pub steps_asked: u32,
    /// Base context the session was asked to start with, tokens.
    pub base_asked: u64,
    /// The request completed with a streamed response and no error.
    pub ok: bool,
    /// Submission time, seconds since the run's origin.
    pub t_submit: f64,
    /// Time to first token, seconds (vLLM's TTFT: submit → first content token). `None` if none arrived.
    pub ttft_s: Option<f64>,
    /// Submit → last byte, seconds (vLLM's E2E latency).
    pub wall_s: f64,
    /// Generated tokens (from `usage.completion_tokens` when the server reports it).
    pub gen_tokens: u64,
    /// Output length that was forced (`max_tokens` = `min_tokens`).
    pub asked_tokens: u64,
    /// Prompt tokens as the server counted them (`usage.prompt_tokens`), if reported: the realized prompt.
    pub prompt_tokens: Option<u64>,
    /// Live records: prompt tokens the workload designed for this request (the plan's size the filler was made
    /// for); `prompt_tokens` is what the server counted of it. Absent in simulated records (there the two agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub designed_prompt_tokens: Option<u64>,
    /// Prefix-cached prompt tokens (`usage.prompt_tokens_details.cached_tokens`), if reported.
    pub cached_tokens: Option<u64>,
    /// Prompt tokens the workload designed to be cacheable (previous prompt + reply), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub designed_cached_tokens: Option<u64>,
    /// SSE frames that carried content.
    pub sse_frames: u64,
    /// Prompt length in characters.
    pub prompt_chars: u64,
    /// Time spent queued before the engine admitted the request, seconds (simulator only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_s: Option<f64>,
    /// Inter-token latency summary over content frames, milliseconds (vLLM's ITL: gaps between
    /// successive streamed chunks). `None` with fewer than two frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl: Option<ItlSummary>,
    /// `finish_reason` of the last choice (`length`, `stop`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Where `gen_tokens` came from.
    #[serde(default)]
    pub usage_source: UsageSource,
    /// Live records: the clock that timed this request's first content frame (and so its TTFT). Absent in simulated
    /// records and when no content frame arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_clock: Option<FrameClock>,
    /// Live records: attempts that the server answered 429 or 503 with `Retry-After` and that were sent again after
    /// the wait it asked for (`--max-retries`); absent (0) when the first attempt was the only one. `t_submit`,
    /// `ttft_s` and `wall_s` start at the first attempt (what the user waited), so they include the waits.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// The status of each retried attempt, in order (e.g. `[503, 429]`); the last attempt's outcome is the record's
    /// own. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_statuses: Vec<u16>,
    /// Live records: what kind of failure `error` describes, when `ok` is false. Absent in completed and simulated
    /// records, and in records written before the field existed ([`crate::metrics::outcome_of`] reads those by
    /// their `error` text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// Error text when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Live runs: chained hashes of the prompt text sent, in blocks of
    /// [`crate::workload::mooncake::EXPORT_BLOCK_TOKENS`] designed prose tokens (whitespace-separated words, as
    /// many as the run's filler uses for that many tokens), the last block partial
    /// ([`crate::workload::mooncake::text_block_hashes`]): what `loadshape report --export` writes as hash ids.
    /// Empty (and absent from the JSON) where not recorded: simulated runs, older records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_block_hashes: Vec<u64>,
    /// Which replica served the request, counted from 0: the simulator's fleet (`"fleet"` with more than one
    /// replica), or live `replay` over several `--url`s (the index of the URL). Absent for one engine or one URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    /// Hidden reasoning tokens of the reply (part of `gen_tokens`): live, the server's
    /// `usage.completion_tokens_details.reasoning_tokens`, else the reasoning frames counted; simulated, the
    /// workload's `reasoning.tokens`. Absent when the reply had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Submit → first content token (after the reasoning), seconds; `ttft_s` is to the first token of any kind.
    /// Absent when the reply had no reasoning (the two are the same) or no content arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_content_s: Option<f64>,
    /// A sub-agent's request (issue #44): the session it was forked from (its `session`; the fan-out is this
    /// record's `inst`). Its step 0 starts from that session's cached prefix, so it is no cold start. Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// Speculative decoding's counts for this request ([`SpecCounts`]): simulated with `"speculative"` in the
    /// profile, or live where the server reports them (llama.cpp's `timings`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<SpecCounts>,
    /// Simulated prefill/decode disaggregation: the time its prompt's KV took to cross the link from the prefill
    /// instance to the decode instance, milliseconds (part of `ttft_s`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_ms: Option<f64>,
}

/// One request's speculative decoding: drafted and accepted tokens, and the steps that verified them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecCounts {
    /// Draft tokens proposed (llama.cpp `timings.draft_n`).
    pub draft_tokens: u64,
    /// Draft tokens the target model accepted (llama.cpp `timings.draft_n_accepted`).
    pub accepted_tokens: u64,
    /// Decode steps that verified drafts, where known (the simulator; not llama.cpp's `timings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
}

/// Why a live request failed: [`RequestRecord::failure`], set where the error is made (`error` keeps the text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The run stopped before the request finished (a signal, a stop, or the drain grace ran out); `error` starts
    /// with `cut:`.
    Cut,
    /// The whole-request limit (`--timeout`) passed.
    Timeout,
    /// No frame (or no response headers) within `--stall-timeout`.
    Stall,
    /// The server answered with a status that is not a success (a redirect, a 4xx/5xx, a 429/503 not retried).
    HttpStatus,
    /// The request could not be sent or its response not begun (connect, TLS, write, or a bad request setting).
    Connect,
    /// The response body broke off mid-stream (a reset, a read error).
    Stream,
    /// The server sent an error frame inside the stream.
    ErrorFrame,
    /// The stream was not well-formed SSE/JSON, or ended without `finish_reason` or `[DONE]`.
    Protocol,
}

/// Per-request inter-token latency summary, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ItlSummary {
    pub mean_ms: f64,
    /// p50, p99 and max are `NaN` in simulated records when the run skipped them
    /// (`engine::SimOptions::record_itl_quantiles`: the page's runs, and runs that keep no records).
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Most tokens a record may count in any one field: beyond any model's context (100,000,000).
pub const MAX_RECORD_TOKENS: u64 = 100_000_000;
/// Largest `|t_submit|` a record may carry, seconds from its run's origin (about 31 years).
pub const MAX_RECORD_T_SUBMIT_S: f64 = 1e9;

impl RequestRecord {
    /// Why this record cannot describe a real request, or `Ok` when it can: a duration (`ttft_s`, `wall_s`,
    /// `queue_s`, an ITL figure) that is negative or not finite, a first token after the request's end, a
    /// `t_submit` that is not finite or beyond [`MAX_RECORD_T_SUBMIT_S`], or a token count beyond
    /// [`MAX_RECORD_TOKENS`]. Readers of record files skip such a record with a note that counts it (scoring it
    /// would print negative latencies, and a fit would take it as a measurement). A simulated record's ITL p50, p99
    /// and max may be `NaN` (not computed): those pass.
    pub fn check(&self) -> Result<(), String> {
        let duration = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "impossible value: {name} is {v:?} (a duration must be finite and >= 0)"
                ))
            }
        };
        if !(self.t_submit.is_finite() && self.t_submit.abs() <= MAX_RECORD_T_SUBMIT_S) {
            return Err(format!(
                "impossible value: t_submit is {:?} (must be finite, within {MAX_RECORD_T_SUBMIT_S:e} s of the run's \
                 origin)",
                self.t_submit
            ));
        }
        duration("wall_s", self.wall_s)?;
        if let Some(t) = self.ttft_s {
            duration("ttft_s", t)?;
            // The first token comes before the end (a little slack for the last bit of the subtraction).
            if t > self.wall_s * (1.0 + 1e-9) + 1e-9 {
                return Err(format!(
                    "impossible value: ttft_s {t:?} is after the request's end (wall_s {:?})",
                    self.wall_s
                ));
            }
        }
        if let Some(q) = self.queue_s {
            duration("queue_s", q)?;
        }
        if let Some(t) = self.ttft_content_s {
            duration("ttft_content_s", t)?;
        }
        if let Some(itl) = &self.itl {
            duration("itl.mean_ms", itl.mean_ms)?;
            for (name, v) in [
                ("itl.p50_ms", itl.p50_ms),
                ("itl.p99_ms", itl.p99_ms),
                ("itl.max_ms", itl.max_ms),
            ] {
                if !v.is_nan() {
                    duration(name, v)?;
                }
            }
        }
        let tokens = [
            ("gen_tokens", Some(self.gen_tokens)),
            ("asked_tokens", Some(self.asked_tokens)),
            ("base_asked", Some(self.base_asked)),
            ("prompt_tokens", self.prompt_tokens),
            ("designed_prompt_tokens", self.designed_prompt_tokens),
            ("cached_tokens", self.cached_tokens),
            ("designed_cached_tokens", self.designed_cached_tokens),
            ("reasoning_tokens", self.reasoning_tokens),
        ];
        for (name, v) in tokens {
            if let Some(v) = v.filter(|&v| v > MAX_RECORD_TOKENS) {
                return Err(format!(
                    "impossible value: {name} is {v} (beyond any context: at most {MAX_RECORD_TOKENS})"
                ));
            }
        }
        Ok(())
    }

    /// vLLM's TPOT for one request: (E2E − TTFT) / (output tokens − 1), milliseconds; `None` below 2 tokens.
    pub fn tpot_ms(&self) -> Option<f64> {
        let ttft = self.ttft_s?;
        (self.gen_tokens > 1).then(|| (self.wall_s - ttft) * 1000.0 / (self.gen_tokens - 1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> RequestRecord {
        RequestRecord {
            schema: RECORD_SCHEMA_VERSION,
            session: 1,
            inst: 0,
            step: 2,
            steps_asked: 3,
            base_asked: 4000,
            ok: true,
            t_submit: 1.5,
            ttft_s: Some(0.25),
            wall_s: 2.0,
            gen_tokens: 64,
            asked_tokens: 64,
            prompt_tokens: Some(4000),
            designed_prompt_tokens: None,
            cached_tokens: Some(0),
            designed_cached_tokens: None,
            sse_frames: 64,
            prompt_chars: 16000,
            queue_s: None,
            itl: None,
            finish_reason: Some("length".into()),
            usage_source: UsageSource::FinalFrame,
            rx_clock: Some(FrameClock::Kernel),
            retries: 0,
            retry_statuses: Vec::new(),
            failure: None,
            error: None,
            prompt_block_hashes: Vec::new(),
            replica: None,
            spec: None,
            kv_transfer_ms: None,
            reasoning_tokens: None,
            ttft_content_s: None,
            parent: None,
        }
    }

    /// Impossible values are named; a real record, a failed one without a first token and a simulated one whose
    /// ITL quantiles were not computed pass.
    #[test]
    fn check_names_impossible_values() {
        assert_eq!(live().check(), Ok(()));
        let failed = RequestRecord {
            ok: false,
            ttft_s: None,
            ..live()
        };
        assert_eq!(failed.check(), Ok(()));
        let sim = RequestRecord {
            itl: Some(ItlSummary {
                mean_ms: 10.0,
                p50_ms: f64::NAN,
                p99_ms: f64::NAN,
                max_ms: f64::NAN,
            }),
            ..live()
        };
        assert_eq!(sim.check(), Ok(()));
        let cases: Vec<(RequestRecord, &str)> = vec![
            (
                RequestRecord {
                    ttft_s: Some(-5.0),
                    ..live()
                },
                "ttft_s is -5",
            ),
            (
                RequestRecord {
                    ttft_s: Some(f64::NAN),
                    ..live()
                },
                "ttft_s is NaN",
            ),
            (
                RequestRecord {
                    ttft_s: Some(3.0),
                    ..live()
                },
                "after the request's end",
            ),
            (
                RequestRecord {
                    wall_s: -1.0,
                    ttft_s: None,
                    ..live()
                },
                "wall_s is -1",
            ),
            (
                RequestRecord {
                    wall_s: f64::INFINITY,
                    ..live()
                },
                "wall_s is inf",
            ),
            (
                RequestRecord {
                    t_submit: -1e300,
                    ..live()
                },
                "t_submit",
            ),
            (
                RequestRecord {
                    queue_s: Some(-0.5),
                    ..live()
                },
                "queue_s",
            ),
            (
                RequestRecord {
                    prompt_tokens: Some(u64::MAX),
                    ..live()
                },
                "prompt_tokens",
            ),
            (
                RequestRecord {
                    gen_tokens: 1 << 40,
                    ..live()
                },
                "gen_tokens",
            ),
            (
                RequestRecord {
                    itl: Some(ItlSummary {
                        mean_ms: 1.0,
                        p50_ms: -1.0,
                        p99_ms: 1.0,
                        max_ms: 1.0,
                    }),
                    ..live()
                },
                "itl.p50_ms",
            ),
        ];
        for (rec, says) in cases {
            let e = rec.check().expect_err(says);
            assert!(
                e.starts_with("impossible value: ") && e.contains(says),
                "{e} should say {says}"
            );
        }
    }

    /// A request that was not retried writes the same line as before the retry fields existed (users' scripts and
    /// older readers see no change); a retried one names its retries, and both read back.
    #[test]
    fn retry_fields_are_written_only_when_there_were_retries() {
        let plain = serde_json::to_string(&live()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!plain.contains("retr"), "{plain}");
        let old_line = r#"{"schema":1,"session":1,"inst":0,"step":2,"steps_asked":3,"base_asked":4000,"ok":true,"t_submit":1.5,"ttft_s":0.25,"wall_s":2.0,"gen_tokens":64,"asked_tokens":64,"prompt_tokens":4000,"cached_tokens":0,"sse_frames":64,"prompt_chars":16000,"finish_reason":"length","usage_source":"final_frame","rx_clock":"kernel"}"#;
        assert_eq!(plain, old_line);
        let read: RequestRecord = serde_json::from_str(old_line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, live());

        let retried = RequestRecord {
            retries: 2,
            retry_statuses: vec![503, 429],
            ..live()
        };
        let line = serde_json::to_string(&retried).unwrap_or_else(|e| panic!("{e}"));
        assert!(line.contains(r#""retries":2,"retry_statuses":[503,429]"#), "{line}");
        let back: RequestRecord = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, retried);
    }

    /// A failed live record names its failure kind in snake case beside the error text, and reads back; a record
    /// without the field (every completed one, and those written before it existed) reads as `None`.
    #[test]
    fn failure_kind_is_written_only_when_set() {
        let cut = RequestRecord {
            ok: false,
            failure: Some(FailureKind::HttpStatus),
            error: Some("HTTP 503 Service Unavailable: busy".into()),
            ..live()
        };
        let line = serde_json::to_string(&cut).unwrap_or_else(|e| panic!("{e}"));
        assert!(line.contains(r#""failure":"http_status","error":"HTTP 503"#), "{line}");
        let back: RequestRecord = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, cut);
        let plain = serde_json::to_string(&live()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!plain.contains("failure"), "{plain}");
    }
}
