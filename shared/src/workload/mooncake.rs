//! Production trace files: Mooncake JSONL and Dynamo's agentic Mooncake, read into a [`TraceWorkload`]
//! ([`TraceWorkload::load_text`], [`parse`]) and written back ([`export`]); what the hash ids imply by themselves
//! ([`TraceStats`], [`direct_reuse`]); and a request's content as engine blocks ([`engine_block_hashes`]), so the
//! simulator's prefix cache shares exactly the hash-id prefix two requests have in common.
//!
//! **Mooncake** (FAST'25; read by SGLang, GuideLLM, AIPerf, Dynamo, vLLM's `timed_trace`): one JSON object a line,
//! `timestamp` (ms since the trace's start), `input_length`, `output_length`, `hash_ids` (chained block hashes: two
//! requests share block `i` exactly when their lists agree up to `i`; `block_size` tokens a block, 512 unless
//! stated); optional `session_id` (a row of a session that had an earlier row waits for that row to complete, then
//! `delay` ms) and `delay`. **Agentic Mooncake** (Dynamo's `AgenticMooncakeRow`): `request_id` names the row,
//! `wait_for` names rows whose completions it waits for, then `delay` + `tool_wait_ms`; a row without dependencies
//! is sent at its `timestamp`. `branches` names rows that branch off this one (sub-agents forked from its
//! conversation): each of them waits for this row too, as if its `wait_for` named it (issue #44). `prefix_reset:
//! true` marks a row that starts a new context (a compaction): nothing of it was designed to be cached
//! ([`TraceRequest::prefix_reset`]); its content is still its `hash_ids`.
//!
//! Errors name the line: a missing field, a timestamp before the previous one, more hash ids than `input_length`
//! holds at `block_size`, a `wait_for` id no earlier line defines.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::trace::{TraceFormat, TraceRequest, TraceWorkload};

/// Why a trace file was refused: the 1-based line and what is wrong there.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("trace line {line}: {message}")]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> TraceError {
    TraceError {
        line,
        message: crate::error::bounded(&message.into()),
    }
}

/// How to read a trace ([`TraceWorkload`]'s options).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceOptions {
    /// `None`: detected from the first row (`request_id` → agentic Mooncake).
    pub format: Option<TraceFormat>,
    pub block_size: u32,
    pub time_scale: f64,
    pub max_requests: Option<u64>,
    pub start_s: Option<f64>,
    pub end_s: Option<f64>,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            format: None,
            block_size: 512,
            time_scale: 1.0,
            max_requests: None,
            start_s: None,
            end_s: None,
        }
    }
}

/// One row as written; every field optional here so a missing one is named with its line.
#[derive(Debug, Deserialize)]
struct Row {
    timestamp: Option<f64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    session_id: Option<Value>,
    delay: Option<f64>,
    request_id: Option<Value>,
    #[serde(default)]
    wait_for: Vec<Value>,
    tool_wait_ms: Option<f64>,
    /// Agentic: ids of later rows that branch off this one.
    #[serde(default)]
    branches: Vec<Value>,
    /// Agentic: this row starts a new context.
    prefix_reset: Option<bool>,
}

/// A JSON string or number as an id.
fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A row before the window: trace time in ms, dependencies as row indices.
struct Parsed {
    line: usize,
    ts_ms: Option<f64>,
    input: u64,
    output: u64,
    hash_ids: Vec<u64>,
    after: Vec<usize>,
    delay_ms: f64,
    session: Option<u32>,
    prefix_reset: bool,
    /// Agentic `branches`: the ids this row names.
    branches: Vec<String>,
}

/// Read a trace's text into requests (see the module docs for the formats and their checks). The window keeps the
/// rows whose timestamp (a dependent row: its first dependency's) is in `[start_s, end_s)` and whose dependencies
/// are kept, then the first `max_requests`; arrivals count from `start_s`, and every time (timestamps, delays) is
/// multiplied by `time_scale`.
// `#[inline]` on this file's cold serde entry points (not for speed): their code, with the serde code they
// instantiate, is compiled in the calling crate, so the page builds it at its size-optimized opt-level while
// the engine stays at `shared`'s opt-level 3 (docs/page.md, "Budget": -39 KB gzip).
#[inline]
pub fn parse(text: &str, opts: &TraceOptions) -> Result<Vec<TraceRequest>, TraceError> {
    let bs = u64::from(opts.block_size.max(1));
    let mut rows: Vec<Parsed> = Vec::new();
    let mut format = opts.format;
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut sessions: HashMap<String, (u32, usize)> = HashMap::new();
    let mut last_ts: Option<(f64, usize)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(raw).map_err(|e| err(line, format!("not a trace row: {e}")))?;
        let format = *format.get_or_insert(if row.request_id.is_some() {
            TraceFormat::AgenticMooncake
        } else {
            TraceFormat::Mooncake
        });
        let missing = |name: &str| err(line, format!("missing field `{name}`"));
        let input = row.input_length.ok_or_else(|| missing("input_length"))?;
        let output = row.output_length.ok_or_else(|| missing("output_length"))?;
        let hash_ids = row.hash_ids.ok_or_else(|| missing("hash_ids"))?;
        if input == 0 || input > u64::from(u32::MAX) {
            return Err(err(
                line,
                format!("input_length must be 1..={} (got {input})", u32::MAX),
            ));
        }
        if output == 0 || output > u64::from(u32::MAX) {
            return Err(err(
                line,
                format!("output_length must be 1..={} (got {output})", u32::MAX),
            ));
        }
        if (hash_ids.len() as u64).saturating_sub(1) * bs >= input {
            return Err(err(
                line,
                format!(
                    "{} hash_ids of {bs} tokens need input_length > {} (got {input}); is block_size right?",
                    hash_ids.len(),
                    (hash_ids.len() as u64 - 1) * bs
                ),
            ));
        }
        for (name, v) in [
            ("timestamp", row.timestamp),
            ("delay", row.delay),
            ("tool_wait_ms", row.tool_wait_ms),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(err(line, format!("{name} must be a number >= 0 (got {v})")));
            }
        }
        let session = match &row.session_id {
            None | Some(Value::Null) => None,
            Some(v) => {
                Some(id_of(v).ok_or_else(|| err(line, format!("session_id must be a string or number (got {v})")))?)
            }
        };
        let idx = rows.len();
        let mut after = Vec::new();
        let mut branches = Vec::new();
        let session_no = session.as_ref().map(|s| {
            let n = sessions.len() as u32;
            let e = sessions.entry(s.clone()).or_insert((n, usize::MAX));
            let prev = e.1;
            e.1 = idx;
            (e.0, prev)
        });
        match format {
            TraceFormat::Mooncake => {
                // A later turn of a session waits for the previous one.
                if let Some((_, prev)) = session_no
                    && prev != usize::MAX
                {
                    after.push(prev);
                }
            }
            TraceFormat::AgenticMooncake => {
                let id = row
                    .request_id
                    .as_ref()
                    .and_then(id_of)
                    .ok_or_else(|| missing("request_id"))?;
                for w in &row.wait_for {
                    let wid = id_of(w).ok_or_else(|| err(line, format!("wait_for holds {w}, not an id")))?;
                    let &d = ids
                        .get(&wid)
                        .ok_or_else(|| err(line, format!("wait_for names {wid:?}, which no earlier line defines")))?;
                    after.push(d);
                }
                if ids.insert(id.clone(), idx).is_some() {
                    return Err(err(line, format!("request_id {id:?} is defined twice")));
                }
                for b in &row.branches {
                    let bid = id_of(b).ok_or_else(|| err(line, format!("branches holds {b}, not an id")))?;
                    branches.push(bid);
                }
            }
        }
        if after.is_empty() {
            let ts = row.timestamp.ok_or_else(|| missing("timestamp"))?;
            if let Some((prev, prev_line)) = last_ts
                && ts < prev
            {
                return Err(err(
                    line,
                    format!("timestamp {ts} is before line {prev_line}'s {prev}: timestamps must not decrease"),
                ));
            }
            last_ts = Some((ts, line));
        }
        rows.push(Parsed {
            line,
            ts_ms: row.timestamp,
            input,
            output,
            hash_ids,
            after,
            delay_ms: row.delay.unwrap_or(0.0) + row.tool_wait_ms.unwrap_or(0.0),
            session: session_no.map(|s| s.0),
            prefix_reset: row.prefix_reset.unwrap_or(false),
            branches,
        });
    }
    if rows.is_empty() {
        return Err(err(0, "the trace holds no request"));
    }
    // A branch waits for the row it branches off (once, whether or not its own `wait_for` names it).
    for i in 0..rows.len() {
        for bid in std::mem::take(&mut rows[i].branches) {
            let line = rows[i].line;
            let &j = ids
                .get(&bid)
                .ok_or_else(|| err(line, format!("branches names {bid:?}, which no line defines")))?;
            if j <= i {
                return Err(err(
                    line,
                    format!(
                        "branches names {bid:?} (line {}), which is not a later line",
                        rows[j].line
                    ),
                ));
            }
            if !rows[j].after.contains(&i) {
                rows[j].after.push(i);
            }
        }
    }
    window(rows, opts)
}

fn window(rows: Vec<Parsed>, opts: &TraceOptions) -> Result<Vec<TraceRequest>, TraceError> {
    let start_ms = opts.start_s.unwrap_or(0.0) * 1000.0;
    let end_ms = opts.end_s.map_or(f64::INFINITY, |e| e * 1000.0);
    let max = opts.max_requests.unwrap_or(u64::MAX);
    // Row index → kept index.
    let mut kept: Vec<Option<u32>> = vec![None; rows.len()];
    // The trace time that places a row in the window (a dependent row without timestamp: its first dependency's).
    let mut when: Vec<f64> = vec![0.0; rows.len()];
    let mut out: Vec<TraceRequest> = Vec::new();
    for (i, r) in rows.into_iter().enumerate() {
        when[i] = match (r.ts_ms, r.after.first()) {
            (Some(t), _) => t,
            (None, Some(&d)) => when[d],
            (None, None) => 0.0,
        };
        let in_window = when[i] >= start_ms && when[i] < end_ms;
        let deps: Option<Vec<u32>> = r.after.iter().map(|&d| kept[d]).collect();
        let Some(after) = deps else { continue };
        if !in_window || out.len() as u64 >= max {
            continue;
        }
        let arrival_ms = r.ts_ms.map_or(0.0, |t| ((t - start_ms) * opts.time_scale).max(0.0));
        if !arrival_ms.is_finite() {
            return Err(err(r.line, "timestamp × time_scale is not a finite number"));
        }
        kept[i] = Some(out.len() as u32);
        out.push(TraceRequest {
            arrival_ms,
            shared_prefix_tokens: 0,
            unique_prompt_tokens: r.input as u32,
            output_tokens: r.output as u32,
            hash_ids: r.hash_ids,
            after,
            delay_ms: r.delay_ms * opts.time_scale,
            session: r.session,
            prefix_reset: r.prefix_reset,
        });
    }
    if out.is_empty() {
        return Err(err(0, "no request of the trace is inside the window (start_s, end_s)"));
    }
    Ok(out)
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

impl TraceWorkload {
    /// The reading options this workload gives ([`TraceOptions`]).
    pub fn options(&self) -> TraceOptions {
        TraceOptions {
            format: self.format,
            block_size: self.hash_block_size(),
            time_scale: self.time_scale.unwrap_or(1.0),
            max_requests: self.max_requests,
            start_s: self.start_s,
            end_s: self.end_s,
        }
    }

    /// Fill `requests` from the trace file's text (read by the caller: the agent reads `path`, the page the file it
    /// is given) and set `sha256`. A workload that names a `sha256` refuses a file with another one.
    #[inline]
    pub fn load_text(&mut self, text: &str) -> Result<(), TraceError> {
        let hash = sha256_hex(text.as_bytes());
        if let Some(want) = &self.sha256
            && !want.eq_ignore_ascii_case(&hash)
        {
            return Err(err(
                0,
                format!("this file's sha256 is {hash}, but the scenario names the trace {want}"),
            ));
        }
        // A byte-order mark (some editors write one) is not part of the first line.
        self.requests = parse(text.strip_prefix('\u{feff}').unwrap_or(text), &self.options())?;
        self.sha256 = Some(hash);
        Ok(())
    }

    /// The same workload without its requests (they stay in the file): what a link carries.
    pub fn without_requests(&self) -> TraceWorkload {
        TraceWorkload {
            requests: Vec::new(),
            ..self.clone()
        }
    }
}

/// A well-mixed 64-bit hash step (splitmix64's finalizer).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Chained identities of a request's hash-id prefixes: entry `i` identifies `hash_ids[..=i]` (so equal entries mean
/// equal lists up to there, whether or not the trace's own ids are chained).
pub fn prefix_keys(hash_ids: &[u64]) -> Vec<u64> {
    let mut h = 0x6c6f_6164_7368_6170u64;
    hash_ids
        .iter()
        .map(|&id| {
            h = mix(h ^ mix(id));
            h
        })
        .collect()
}

/// The engine blocks of a request's prompt that have an identity, as chained hashes for
/// [`crate::engine::PromptBlocks`]: engine block `j` (tokens `j·engine_bs .. (j+1)·engine_bs`) is full in the
/// prompt and lies inside the trace blocks the hash ids name, and its hash is the identity of the hash-id prefix up
/// to the trace block holding its last token, with `j`. Two requests then share engine block `j` exactly when their
/// hash ids agree up to that trace block: the content of a trace block is fixed by its hash-id prefix (a request
/// that ends inside it holds its first tokens).
pub fn engine_block_hashes(r: &TraceRequest, trace_bs: u32, engine_bs: u32) -> Vec<u64> {
    let (tb, eb) = (u64::from(trace_bs.max(1)), u64::from(engine_bs.max(1)));
    let covered = (r.hash_ids.len() as u64 * tb).min(r.prompt_tokens());
    let keys = prefix_keys(&r.hash_ids);
    (0..covered / eb)
        .map(|j| {
            let last = (j + 1) * eb - 1;
            mix(keys[(last / tb) as usize] ^ mix(j))
        })
        .collect()
}

/// Prompt tokens each request finds cached, computed from the hash ids alone: the requests in order, each after
/// every earlier one has completed, with a cache that never evicts. A trace block's content is fixed by its hash-id
/// prefix, and an earlier request that held its first `m` tokens makes those available; a request reuses the
/// longest run of available tokens from its start, counted in whole `engine_bs` blocks and never its whole prompt
/// (the engine computes at least its last token: at most `⌊(prompt − 1) / engine_bs⌋` blocks).
pub fn direct_reuse(requests: &[TraceRequest], trace_bs: u32, engine_bs: u32) -> Vec<u64> {
    let (tb, eb) = (u64::from(trace_bs.max(1)), u64::from(engine_bs.max(1)));
    // Hash-id prefix identity → tokens of that trace block some earlier request held.
    let mut held: HashMap<u64, u64> = HashMap::new();
    requests
        .iter()
        .map(|r| {
            let len = r.prompt_tokens();
            let keys = prefix_keys(&r.hash_ids);
            let mut shared = 0u64;
            for (i, k) in keys.iter().enumerate() {
                let mine = (len - i as u64 * tb).min(tb);
                let have = held.get(k).copied().unwrap_or(0);
                shared += have.min(mine);
                if have < mine {
                    break;
                }
            }
            for (i, k) in keys.iter().enumerate() {
                let mine = (len - i as u64 * tb).min(tb);
                let e = held.entry(*k).or_insert(0);
                *e = (*e).max(mine);
            }
            if r.prefix_reset {
                0
            } else {
                (shared / eb).min((len - 1) / eb) * eb
            }
        })
        .collect()
}

/// Tokens of a hash block in what `loadshape report --export` writes (Mooncake's 512).
pub const EXPORT_BLOCK_TOKENS: u32 = 512;

/// FNV-1a of a word.
fn word_hash(w: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in w.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Chained hashes of `text`'s whitespace-separated words in blocks of `block_words` words, the last block partial
/// (hash `i` identifies the words `0 .. (i+1)·block_words`, so two texts agree on a hash exactly when they agree on
/// every word up to there). What a live run records of each prompt ([`crate::record::RequestRecord`]'s
/// `prompt_block_hashes`).
pub fn text_block_hashes(text: &str, block_words: usize) -> Vec<u64> {
    let bw = block_words.max(1);
    let mut out = Vec::new();
    let mut h = 0x7472_6163_6562_6c6bu64;
    let mut n = 0usize;
    for w in text.split_whitespace() {
        h = mix(h ^ word_hash(w));
        n += 1;
        if n == bw {
            out.push(h);
            h = mix(h);
            n = 0;
        }
    }
    if n > 0 {
        out.push(h);
    }
    out
}

/// A trace's own statistics (what the page shows beside a simulated result).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceStats {
    pub requests: u64,
    /// Requests that wait for another (session turns, `wait_for`).
    pub dependent_requests: u64,
    pub sessions: u64,
    pub prompt_median_tokens: f64,
    pub prompt_p90_tokens: f64,
    pub output_median_tokens: f64,
    pub prompt_tokens: u64,
    /// Prompt tokens the hash ids let a never-evicting cache reuse ([`direct_reuse`] at the trace's block size).
    pub reusable_tokens: u64,
    /// `reusable_tokens / prompt_tokens`.
    pub reuse_share: f64,
    /// Span of the open-loop arrivals, seconds.
    pub span_s: f64,
    /// Arrivals per second in each of up to 60 equal intervals of the span: (interval start s, rate).
    pub arrival_rate: Vec<(f64, f64)>,
}

impl TraceStats {
    pub fn of(w: &TraceWorkload) -> TraceStats {
        let reqs = &w.requests;
        let mut prompts: Vec<u64> = reqs.iter().map(TraceRequest::prompt_tokens).collect();
        prompts.sort_unstable();
        let mut outputs: Vec<u64> = reqs.iter().map(|r| u64::from(r.output_tokens)).collect();
        outputs.sort_unstable();
        let bs = w.hash_block_size();
        let reusable: u64 = direct_reuse(reqs, bs, bs).iter().sum();
        let prompt_tokens: u64 = prompts.iter().sum();
        let roots: Vec<f64> = reqs
            .iter()
            .filter(|r| r.after.is_empty())
            .map(|r| r.arrival_ms)
            .collect();
        let span_ms = roots.iter().copied().fold(0.0, f64::max);
        let bins = if span_ms > 0.0 { 60 } else { 1 };
        let width_ms = (span_ms / bins as f64).max(1.0);
        let mut counts = vec![0u64; bins];
        for t in &roots {
            counts[((t / width_ms) as usize).min(bins - 1)] += 1;
        }
        // As `u64`, so this sort is the `u64` instance the token counts above already use.
        let mut sessions: Vec<u64> = reqs.iter().filter_map(|r| r.session.map(u64::from)).collect();
        sessions.sort_unstable();
        sessions.dedup();
        TraceStats {
            requests: reqs.len() as u64,
            dependent_requests: reqs.iter().filter(|r| !r.after.is_empty()).count() as u64,
            sessions: sessions.len() as u64,
            prompt_median_tokens: crate::metrics::nearest_rank(&prompts, 0.5).map_or(0.0, |v| v as f64),
            prompt_p90_tokens: crate::metrics::nearest_rank(&prompts, 0.9).map_or(0.0, |v| v as f64),
            output_median_tokens: crate::metrics::nearest_rank(&outputs, 0.5).map_or(0.0, |v| v as f64),
            prompt_tokens,
            reusable_tokens: reusable,
            reuse_share: if prompt_tokens > 0 {
                reusable as f64 / prompt_tokens as f64
            } else {
                0.0
            },
            span_s: span_ms / 1000.0,
            arrival_rate: counts
                .iter()
                .enumerate()
                .map(|(i, &c)| (i as f64 * width_ms / 1000.0, c as f64 / (width_ms / 1000.0)))
                .collect(),
        }
    }
}

/// One exported row: what [`export`] writes for each request.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportRow {
    pub request_id: String,
    pub session_id: Option<String>,
    pub timestamp_ms: u64,
    pub input_length: u64,
    pub output_length: u64,
    pub hash_ids: Vec<u64>,
    /// The request it follows (agentic `wait_for`), and the delay after that one's completion.
    pub wait_for: Option<(String, u64)>,
}

/// A run's records as trace rows, in submission order: `timestamp` = `t_submit` (ms from the first), `input_length`
/// = the server's `prompt_tokens` (else the designed size), `output_length` = the tokens generated (a failed
/// request: those asked), `hash_ids` = the record's `prompt_block_hashes` numbered 0, 1, 2, … in order of first
/// appearance (Mooncake's convention), at most as many as `input_length` holds at [`EXPORT_BLOCK_TOKENS`]. Records
/// of one `(session, inst)` with more than one step are a session: each later step waits for the previous one, with
/// the gap between that one's end and its own submission as `delay`. Records without block hashes (simulated runs,
/// older records) are refused, naming the first.
pub fn export_records(records: &[crate::record::RequestRecord]) -> Result<Vec<ExportRow>, String> {
    let mut order: Vec<usize> = (0..records.len()).collect();
    crate::order::sort_by_f64_key(&mut order, |&i| records[i].t_submit);
    let t0 = order.first().map_or(0.0, |&i| records[i].t_submit);
    let mut group_size: HashMap<(u64, u32), u32> = HashMap::new();
    for r in records {
        *group_size.entry((r.session, r.inst)).or_insert(0) += 1;
    }
    let mut ids: HashMap<u64, u64> = HashMap::new();
    let mut last_of_group: HashMap<(u64, u32), usize> = HashMap::new();
    let bs = u64::from(EXPORT_BLOCK_TOKENS);
    let mut rows = Vec::with_capacity(records.len());
    for (n, &i) in order.iter().enumerate() {
        let r = &records[i];
        if r.prompt_block_hashes.is_empty() {
            return Err(format!(
                "record {} (session {}, step {}) carries no prompt_block_hashes: only live runs of this loadshape \
                 record the prompt blocks they sent",
                i + 1,
                r.session,
                r.step
            ));
        }
        let input = r
            .prompt_tokens
            .or(r.designed_prompt_tokens)
            .unwrap_or(r.base_asked)
            .max(1);
        let output = if r.ok && r.gen_tokens > 0 {
            r.gen_tokens
        } else {
            r.asked_tokens.max(1)
        };
        let keep = input.div_ceil(bs) as usize;
        let hash_ids = r
            .prompt_block_hashes
            .iter()
            .take(keep)
            .map(|h| {
                let next = ids.len() as u64;
                *ids.entry(*h).or_insert(next)
            })
            .collect();
        let key = (r.session, r.inst);
        let session = group_size.get(&key).copied().unwrap_or(1) > 1;
        let wait_for = if session {
            last_of_group.insert(key, n).map(|prev| {
                let p = &records[order[prev]];
                let gap = ((r.t_submit - (p.t_submit + p.wall_s)) * 1000.0).max(0.0).round() as u64;
                (format!("r{prev}"), gap)
            })
        } else {
            None
        };
        rows.push(ExportRow {
            request_id: format!("r{n}"),
            session_id: session.then(|| format!("{}.{}", r.session, r.inst)),
            timestamp_ms: ((r.t_submit - t0) * 1000.0).max(0.0).round() as u64,
            input_length: input,
            output_length: output,
            hash_ids,
            wait_for,
        });
    }
    Ok(rows)
}

/// Rows as Mooncake JSONL (`agentic`: Dynamo's agentic Mooncake, with `request_id`, `session_id`, `wait_for`,
/// `delay`; plain Mooncake writes a session's later turns with `session_id` and `delay`, which Mooncake readers
/// take as "after the previous turn").
pub fn export(rows: &[ExportRow], agentic: bool) -> String {
    let mut out = String::new();
    for r in rows {
        let mut m = serde_json::Map::new();
        if agentic {
            m.insert("request_id".into(), r.request_id.clone().into());
        }
        if let Some(s) = &r.session_id {
            m.insert("session_id".into(), s.clone().into());
        }
        match (&r.wait_for, agentic) {
            (Some((id, delay)), true) => {
                m.insert("wait_for".into(), Value::Array(vec![id.clone().into()]));
                m.insert("delay".into(), (*delay).into());
            }
            (Some((_, delay)), false) if r.session_id.is_some() => {
                m.insert("delay".into(), (*delay).into());
            }
            _ => {}
        }
        m.insert("timestamp".into(), r.timestamp_ms.into());
        m.insert("input_length".into(), r.input_length.into());
        m.insert("output_length".into(), r.output_length.into());
        m.insert("hash_ids".into(), r.hash_ids.clone().into());
        out.push_str(&Value::Object(m).to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> TraceOptions {
        TraceOptions {
            block_size: 4,
            ..TraceOptions::default()
        }
    }

    fn line_of(text: &str) -> String {
        parse(text, &opts()).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn bad_rows_are_named_by_line() {
        let ok = r#"{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1, 2]}"#;
        let e = line_of(&format!(
            "{ok}\n{{\"timestamp\": 5, \"output_length\": 2, \"hash_ids\": []}}\n"
        ));
        assert!(e.contains("line 2") && e.contains("input_length"), "{e}");
        let e = line_of(&format!(
            "{ok}\n\n{}\n",
            r#"{"timestamp": 9, "input_length": 8, "output_length": 2, "hash_ids": [1, 2, 3]}"#
        ));
        assert!(e.contains("line 3") && e.contains("3 hash_ids"), "{e}");
        let e = line_of(&format!(
            "{}\n{ok}\n",
            r#"{"timestamp": 9, "input_length": 8, "output_length": 2, "hash_ids": [1]}"#
        ));
        assert!(e.contains("line 2") && e.contains("must not decrease"), "{e}");
        let e = line_of("{\"timestamp\": 0, \"input_length\": 8");
        assert!(e.contains("line 1"), "{e}");
        let agentic = r#"{"request_id": "a", "timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}
{"request_id": "b", "wait_for": ["zz"], "input_length": 8, "output_length": 2, "hash_ids": [1]}"#;
        let e = line_of(agentic);
        assert!(e.contains("line 2") && e.contains("zz"), "{e}");
    }

    /// Agentic `branches`: each named later row waits for the row it branches off; `prefix_reset` is kept and makes
    /// the row's designed reuse 0. Bad names are refused with their line.
    #[test]
    fn branches_become_dependencies_and_prefix_reset_is_kept() {
        let text = r#"{"request_id": "p", "timestamp": 0, "input_length": 1100, "output_length": 2, "hash_ids": [1, 2, 3], "branches": ["k1", "k2"]}
{"request_id": "k1", "timestamp": 0, "input_length": 1200, "output_length": 2, "hash_ids": [1, 2, 4]}
{"request_id": "k2", "wait_for": ["p"], "input_length": 1200, "output_length": 2, "hash_ids": [1, 2, 5]}
{"request_id": "n", "wait_for": ["k1", "k2"], "prefix_reset": true, "input_length": 1100, "output_length": 2, "hash_ids": [1, 2, 6]}"#;
        let r = parse(text, &opts()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r[1].after, vec![0], "k1 waits for p, which it branches off");
        assert_eq!(r[2].after, vec![0], "named once though wait_for names p too");
        assert_eq!(r[3].after, vec![1, 2]);
        assert_eq!(
            r.iter().map(|q| q.prefix_reset).collect::<Vec<_>>(),
            [false, false, false, true]
        );
        // The reset row shares blocks 1, 2 with the others, yet was designed to reuse nothing.
        let d = direct_reuse(&r, 512, 16);
        assert_eq!(d, vec![0, 1024, 1024, 0]);
        let unknown = text.replace(r#""branches": ["k1", "k2"]"#, r#""branches": ["k1", "zz"]"#);
        let e = parse(&unknown, &opts()).expect_err("unknown").to_string();
        assert!(e.contains("line 1") && e.contains("branches names \"zz\""), "{e}");
        let earlier = text.replace(
            r#""hash_ids": [1, 2, 4]}"#,
            r#""hash_ids": [1, 2, 4], "branches": ["p"]}"#,
        );
        let e = parse(&earlier, &opts()).expect_err("earlier").to_string();
        assert!(e.contains("line 2") && e.contains("not a later line"), "{e}");
    }

    #[test]
    fn sessions_and_wait_for_become_dependencies() {
        let text = r#"{"timestamp": 0, "session_id": "s", "input_length": 8, "output_length": 2, "hash_ids": [1, 2]}
{"timestamp": 10, "input_length": 8, "output_length": 2, "hash_ids": [7]}
{"session_id": "s", "delay": 500, "input_length": 12, "output_length": 2, "hash_ids": [1, 2, 3]}"#;
        let r = parse(text, &opts()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r[2].after, vec![0]);
        assert_eq!(r[2].delay_ms, 500.0);
        assert_eq!((r[0].session, r[1].session, r[2].session), (Some(0), None, Some(0)));
        let agentic = r#"{"request_id": "a", "timestamp": 100, "input_length": 8, "output_length": 2, "hash_ids": [1]}
{"request_id": "b", "timestamp": 100, "input_length": 8, "output_length": 2, "hash_ids": [2]}
{"request_id": "c", "wait_for": ["a", "b"], "delay": 5, "tool_wait_ms": 20, "input_length": 8, "output_length": 2, "hash_ids": [1, 9]}"#;
        let half = TraceOptions {
            time_scale: 0.5,
            ..opts()
        };
        let r = parse(agentic, &half).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (r[2].after.clone(), r[2].delay_ms, r[0].arrival_ms),
            (vec![0, 1], 12.5, 50.0)
        );
        // A window that drops a dependency drops its dependents; max_requests keeps the first N.
        let late = TraceOptions {
            start_s: Some(0.001),
            ..opts()
        };
        let r = parse(text, &late).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].arrival_ms, 9.0);
        let two = TraceOptions {
            max_requests: Some(2),
            ..opts()
        };
        assert_eq!(parse(text, &two).map(|r| r.len()), Ok(2));
    }

    #[test]
    fn direct_reuse_counts_shared_hash_prefixes() {
        let req = |len: u32, ids: &[u64]| TraceRequest {
            arrival_ms: 0.0,
            shared_prefix_tokens: 0,
            unique_prompt_tokens: len,
            output_tokens: 1,
            hash_ids: ids.to_vec(),
            after: Vec::new(),
            delay_ms: 0.0,
            session: None,
            prefix_reset: false,
        };
        // Blocks of 4: the second request shares 2 blocks (8 tokens), the third shares the first block and 2 tokens
        // of the second (the first request held all 4 of it, the third has only 2), then at engine block size 2
        // that is 6 tokens; the fourth repeats the first exactly: all but its last block.
        let reqs = [
            req(12, &[1, 2, 3]),
            req(10, &[1, 2, 9]),
            req(6, &[1, 2]),
            req(12, &[1, 2, 3]),
        ];
        assert_eq!(direct_reuse(&reqs, 4, 4), vec![0, 8, 4, 8]);
        assert_eq!(direct_reuse(&reqs, 4, 2), vec![0, 8, 4, 10]);
        assert_eq!(direct_reuse(&reqs, 4, 1), vec![0, 8, 5, 11]);
        // Engine blocks: equal hashes exactly where the hash-id prefixes agree.
        let a = engine_block_hashes(&reqs[0], 4, 2);
        let b = engine_block_hashes(&reqs[1], 4, 2);
        assert_eq!((a.len(), b.len()), (6, 5));
        assert_eq!(a[..4], b[..4]);
        assert_ne!(a[4], b[4]);
    }
}
