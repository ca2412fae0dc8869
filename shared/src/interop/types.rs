//! The types and helpers every reader shares (kept apart from the dispatch in `interop`, which uses the readers).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{ItlSummary, RECORD_SCHEMA_VERSION, RequestRecord, UsageSource};

/// A load tool whose files loadshape reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tool {
    /// `vllm bench serve` (and `benchmarks/benchmark_serving.py` before it).
    VllmBench,
    /// GuideLLM (vllm-project/guidellm).
    Guidellm,
    /// NVIDIA AIPerf (successor of GenAI-Perf).
    Aiperf,
    /// kubernetes-sigs inference-perf.
    InferencePerf,
}

impl Tool {
    pub const ALL: [Tool; 4] = [Tool::VllmBench, Tool::Guidellm, Tool::Aiperf, Tool::InferencePerf];

    /// The name the command line uses (`--from vllm-bench`).
    pub fn name(self) -> &'static str {
        match self {
            Tool::VllmBench => "vllm-bench",
            Tool::Guidellm => "guidellm",
            Tool::Aiperf => "aiperf",
            Tool::InferencePerf => "inference-perf",
        }
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Tool {
    type Err = String;
    fn from_str(s: &str) -> Result<Tool, String> {
        Tool::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
            format!("unknown tool {s:?} (one of: {})", names.join(", "))
        })
    }
}

/// Why a file could not be read: the file, the tool it was read as (`None` while detecting) and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ImportError {
    pub file: String,
    pub tool: Option<Tool>,
    /// JSON path of the field (`benchmarks[0].requests.successful[3].first_token_time`), or `(file)` for the whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tool {
            Some(t) => write!(
                f,
                "{}: read as {t}: field `{}`: {}",
                self.file, self.field, self.message
            ),
            None => write!(f, "{}: field `{}`: {}", self.file, self.field, self.message),
        }
    }
}

/// One statistic of a summary-only file, in our units (ms for latencies).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerStat {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

impl PeerStat {
    pub(crate) fn is_empty(&self) -> bool {
        *self == PeerStat::default()
    }
}

/// What a file without per-request data says about its run, under our metric names (`ttft_ms`, `tpot_ms`,
/// `itl_ms`, `e2e_ms`, `prompt_tokens`, `output_tokens`, `request_throughput_rps`, `output_throughput_tok_s`),
/// each with the tool's definition where it differs (in [`Imported::notes`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerSummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    pub metrics: BTreeMap<String, PeerStat>,
}

/// One file read: its records (empty for a summary-only file), its summary (summary-only files), and notes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imported {
    pub tool: Tool,
    /// The tool's version where the file says it.
    pub tool_version: Option<String>,
    pub records: Vec<RequestRecord>,
    /// Set for a file without per-request data.
    pub summary: Option<PeerSummary>,
    /// Fields the source lacks, definitions that differ, records left out and why.
    pub notes: Vec<String>,
}

impl Imported {
    pub(crate) fn new(tool: Tool) -> Imported {
        Imported {
            tool,
            tool_version: None,
            records: Vec::new(),
            summary: None,
            notes: Vec::new(),
        }
    }

    pub(crate) fn note(&mut self, s: impl Into<String>) {
        let s = s.into();
        if !self.notes.contains(&s) {
            self.notes.push(s);
        }
    }

    /// Shift `t_submit` so that the first request is sent at 0 (each tool keeps its own clock origin).
    pub(crate) fn rebase(&mut self) {
        let t0 = self.records.iter().map(|r| r.t_submit).fold(f64::INFINITY, f64::min);
        if t0.is_finite() {
            self.records.iter_mut().for_each(|r| r.t_submit -= t0);
        }
        self.records.sort_by(|a, b| a.t_submit.total_cmp(&b.t_submit));
    }

    /// Drop the records [`RequestRecord::check`] refuses, with a note counting them.
    pub(crate) fn check_records(&mut self) {
        let before = self.records.len();
        let mut first = None;
        self.records.retain(|r| match r.check() {
            Ok(()) => true,
            Err(e) => {
                first.get_or_insert(e);
                false
            }
        });
        if let Some(e) = first {
            let n = before - self.records.len();
            self.note(format!(
                "{n} request(s) left out: they cannot describe a real request (first: {e})"
            ));
        }
    }
}

/// The file and tool being read, for errors.
pub(crate) struct Cx<'a> {
    pub file: &'a str,
    pub tool: Tool,
}

impl Cx<'_> {
    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ImportError {
        ImportError {
            file: self.file.into(),
            tool: Some(self.tool),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Parse the whole text as one JSON value; a truncated file is named as such.
    pub fn parse(&self, text: &str) -> Result<Value, ImportError> {
        serde_json::from_str(text).map_err(|e| {
            let why = if e.is_eof() {
                format!("the JSON ends early (truncated file?): {e}")
            } else {
                format!("not valid JSON: {e}")
            };
            self.err("(file)", why)
        })
    }

    /// `v[key]`, which must be present and not null.
    pub fn get<'v>(&self, v: &'v Value, path: &str, key: &str) -> Result<&'v Value, ImportError> {
        match v.get(key) {
            Some(Value::Null) | None => {
                Err(self.err(join(path, key), "missing (a different version of the tool's format?)"))
            }
            Some(x) => Ok(x),
        }
    }

    /// `v[key]` as a finite number, required.
    pub fn num(&self, v: &Value, path: &str, key: &str) -> Result<f64, ImportError> {
        let x = self.get(v, path, key)?;
        x.as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| self.err(join(path, key), format!("expected a number, found {}", short(x))))
    }

    /// `v[key]` as a finite number when present and not null; an error when present with another type.
    pub fn opt_num(&self, v: &Value, path: &str, key: &str) -> Result<Option<f64>, ImportError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .filter(|f| f.is_finite())
                .map(Some)
                .ok_or_else(|| self.err(join(path, key), format!("expected a number, found {}", short(x)))),
        }
    }

    /// `v[key]` as a token count (a non-negative integer, or a float with no fraction), when present.
    pub fn opt_count(&self, v: &Value, path: &str, key: &str) -> Result<Option<u64>, ImportError> {
        match self.opt_num(v, path, key)? {
            None => Ok(None),
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= 1e15 => Ok(Some(f as u64)),
            Some(f) => Err(self.err(join(path, key), format!("expected a token count, found {f}"))),
        }
    }

    /// `v[key]` as an array, required.
    pub fn arr<'v>(&self, v: &'v Value, path: &str, key: &str) -> Result<&'v Vec<Value>, ImportError> {
        let x = self.get(v, path, key)?;
        x.as_array()
            .ok_or_else(|| self.err(join(path, key), format!("expected an array, found {}", short(x))))
    }
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A JSON value for an error message, cut to 60 characters.
pub(crate) fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// What a tool knows of one request, in seconds and tokens, before it becomes a [`RequestRecord`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Peer {
    pub session: u64,
    pub step: u32,
    pub steps_asked: u32,
    pub ok: bool,
    pub t_submit: f64,
    pub ttft_s: Option<f64>,
    pub wall_s: f64,
    pub gen_tokens: u64,
    /// The output length asked for, when the file says.
    pub asked_tokens: Option<u64>,
    /// Where `gen_tokens` came from.
    pub usage_source: UsageSource,
    pub prompt_tokens: Option<u64>,
    pub designed_prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// Content frames, when the file says (else the gaps + 1, else the output tokens).
    pub frames: Option<u64>,
    /// Gaps between content frames, ms.
    pub gaps_ms: Vec<f32>,
    pub prompt_chars: u64,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
}

impl Peer {
    pub fn into_record(mut self) -> RequestRecord {
        let frames = self.frames.unwrap_or(if self.gaps_ms.is_empty() {
            u64::from(self.ttft_s.is_some()).max(if self.ok { self.gen_tokens.min(1) } else { 0 })
        } else {
            self.gaps_ms.len() as u64 + 1
        });
        let itl: Option<ItlSummary> = crate::metrics::itl_summary(&mut self.gaps_ms);
        RequestRecord {
            schema: RECORD_SCHEMA_VERSION,
            session: self.session,
            inst: 0,
            step: self.step,
            steps_asked: self.steps_asked.max(self.step + 1),
            base_asked: 0,
            ok: self.ok,
            t_submit: self.t_submit,
            ttft_s: self.ttft_s,
            wall_s: self.wall_s,
            gen_tokens: self.gen_tokens,
            asked_tokens: self.asked_tokens.unwrap_or(self.gen_tokens),
            prompt_tokens: self.prompt_tokens,
            designed_prompt_tokens: self.designed_prompt_tokens,
            cached_tokens: self.cached_tokens,
            designed_cached_tokens: None,
            sse_frames: frames,
            prompt_chars: self.prompt_chars,
            queue_s: None,
            itl,
            finish_reason: self.finish_reason,
            usage_source: self.usage_source,
            rx_clock: None,
            retries: 0,
            retry_statuses: Vec::new(),
            failure: None,
            error: if self.ok {
                None
            } else {
                Some(
                    self.error
                        .unwrap_or_else(|| "failed (no error text in the file)".into()),
                )
            },
            prompt_block_hashes: Vec::new(),
            replica: None,
            spec: None,
            kv_transfer_ms: None,
            reasoning_tokens: None,
            ttft_content_s: None,
            parent: None,
        }
    }
}

/// A distribution-summary object `{"mean": .., "median": .., "p99": ..}` or AIPerf's `{"avg", "p50", "p99"}`, or
/// GuideLLM's `{"mean", "median", "percentiles": {"p99": ..}}`, times `scale`.
pub(crate) fn stat_of(v: &Value, scale: f64) -> PeerStat {
    let pick = |keys: &[&str]| {
        keys.iter().find_map(|k| {
            v.get(*k)
                .or_else(|| v.get("percentiles").and_then(|p| p.get(*k)))
                .and_then(Value::as_f64)
                .filter(|f| f.is_finite())
                .map(|f| f * scale)
        })
    };
    PeerStat {
        mean: pick(&["mean", "avg"]),
        p50: pick(&["median", "p50"]),
        p90: pick(&["p90"]),
        p99: pick(&["p99"]),
        min: pick(&["min", "min_value"]),
        max: pick(&["max", "max_value"]),
    }
}

/// Insert `stat` under `name` unless it holds nothing.
pub(crate) fn put(summary: &mut PeerSummary, name: &str, stat: PeerStat) {
    if !stat.is_empty() {
        summary.metrics.insert(name.to_string(), stat);
    }
}
