//! Fit ladder targets from a production request log (JSONL or CSV), then hand them to the solver.
//!
//! [`parse_log`] takes the log's text (the agent reads the file) and returns every row it understood plus every
//! row it did not, with its 1-based line number and the reason. [`fit_targets`] refuses a log with bad rows
//! unless told to skip them — nothing is dropped silently, and [`FitTargets`] always reports how many rows were
//! used, skipped as malformed, or excluded as failed requests.
//!
//! # Columns / keys
//! | field | required | accepted names | notes |
//! |---|---|---|---|
//! | prompt tokens | yes | `prompt_tokens`, `usage.prompt_tokens` | whole number |
//! | cached tokens | no | `cached_tokens`, `usage.prompt_tokens_details.cached_tokens` | ≤ prompt tokens |
//! | completion tokens | no | `completion_tokens`, `gen_tokens`, `usage.completion_tokens` | estimates the reply |
//! | timestamp | no | `timestamp`, `t_submit`, `ts`, `time` | submission time: seconds (number) or RFC 3339 |
//! | session | no | `session`, `session_id` | string or number; estimates the growth per step |
//! | duration | no | `duration_s`, `wall_s`, `latency_s`, `e2e_s`; `duration_ms`, `latency_ms` | for concurrency |
//! | ok | no | `ok` | rows with `ok: false` are failed requests, excluded and counted |
//!
//! JSONL: one object per line (blank lines ignored). CSV: a header row naming the columns (the flat names
//! above), then one row per request; fields may be double-quoted. The format is detected from the first
//! non-blank character (`{` → JSONL).
//!
//! # Derived targets
//! - `median_tokens`, `p90_tokens`: nearest-rank percentiles of prompt tokens, each request once (the log IS the
//!   request stream).
//! - `cached_share_tokens` = Σ cached / Σ prompt, and `cached_share_requests` = share of requests with any cached
//!   tokens, over the rows that report cached tokens.
//! - `mean_concurrency` = Σ duration / (last end − first start), when timestamps and durations are given
//!   (Little's law over the log's window).
//! - `growth_tokens`: median positive difference between consecutive prompts of the same session (ordered by
//!   timestamp when given, else file order); `reply_tokens`: median completion tokens.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::solve::{CachedDefinition, SolveOptions};
use super::stats::Shape;
use crate::metrics::nearest_rank;

/// One request of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRow {
    /// 1-based line number in the input.
    pub line: usize,
    pub prompt_tokens: u64,
    pub cached_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Submission time, seconds.
    pub timestamp_s: Option<f64>,
    pub session: Option<String>,
    pub duration_s: Option<f64>,
}

/// A row that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    pub line: usize,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Jsonl,
    Csv,
}

/// Everything [`parse_log`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedLog {
    pub format: LogFormat,
    pub rows: Vec<LogRow>,
    pub bad: Vec<BadLine>,
    /// Rows with `ok: false` (failed requests), excluded from the statistics.
    pub failed: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("{} malformed row(s) in the log (use --skip-bad to fit without them): {}", .bad.len(), list(.bad))]
    BadRows { bad: Vec<BadLine> },
    #[error("the log has no usable rows ({skipped} malformed, {failed} failed requests)")]
    NoRows { skipped: usize, failed: usize },
    #[error("CSV header has no `prompt_tokens` column (got: {0})")]
    NoPromptColumn(String),
}

fn list(bad: &[BadLine]) -> String {
    let mut s: Vec<String> = bad
        .iter()
        .take(20)
        .map(|b| format!("line {}: {}", b.line, b.reason))
        .collect();
    if bad.len() > 20 {
        s.push(format!("… and {} more", bad.len() - 20));
    }
    s.join("; ")
}

/// Targets derived from a log, with the counts that say what was used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitTargets {
    /// Rows used.
    pub requests: usize,
    /// Malformed rows skipped (only with `skip_bad`).
    pub skipped_rows: usize,
    /// Failed requests (`ok: false`) excluded.
    pub failed_rows: usize,
    pub median_tokens: u64,
    pub p90_tokens: u64,
    pub mean_prompt_tokens: f64,
    /// Σ cached / Σ prompt over rows reporting cached tokens.
    pub cached_share_tokens: Option<f64>,
    /// Share of rows (reporting cached tokens) with any cached tokens.
    pub cached_share_requests: Option<f64>,
    /// Rows that reported cached tokens.
    pub rows_with_cached: usize,
    /// Σ duration / window, when timestamps and durations are given.
    pub mean_concurrency: Option<f64>,
    /// Window covered by the timestamps (and durations), seconds.
    pub window_s: Option<f64>,
    pub sessions: Option<usize>,
    /// Median growth between consecutive prompts of a session, tokens.
    pub growth_tokens: Option<u64>,
    /// Consecutive same-session pairs behind `growth_tokens`.
    pub growth_pairs: usize,
    /// Median completion tokens.
    pub reply_tokens: Option<u64>,
}

impl FitTargets {
    /// Solver options for these targets, starting from `base` (constraints, slots, weighting). Median, p90 and
    /// cached share are replaced; the shape's growth and reply are replaced where the log gave them. Without
    /// cached tokens in the log the cached target is left as in `base`.
    pub fn solve_options(&self, base: &SolveOptions) -> SolveOptions {
        let mut o = base.clone();
        o.median_tokens = self.median_tokens;
        o.p90_tokens = self.p90_tokens;
        let cached = match o.cached_definition {
            CachedDefinition::Tokens => self.cached_share_tokens,
            CachedDefinition::Requests => self.cached_share_requests,
        };
        if let Some(c) = cached {
            o.cached_share = c;
        }
        let growth = self.growth_tokens.unwrap_or(o.shape.growth_tokens);
        let reply = self.reply_tokens.unwrap_or(o.shape.reply_tokens).min(growth);
        o.shape = Shape {
            growth_tokens: growth,
            reply_tokens: reply,
            ..o.shape
        };
        o
    }
}

/// Derive targets from a parsed log. With bad rows present this fails (listing them) unless `skip_bad`.
pub fn fit_targets(log: &ParsedLog, skip_bad: bool) -> Result<FitTargets, FitError> {
    if !log.bad.is_empty() && !skip_bad {
        return Err(FitError::BadRows { bad: log.bad.clone() });
    }
    let rows = &log.rows;
    if rows.is_empty() {
        return Err(FitError::NoRows {
            skipped: log.bad.len(),
            failed: log.failed.len(),
        });
    }
    let mut prompts: Vec<u64> = rows.iter().map(|r| r.prompt_tokens).collect();
    prompts.sort_unstable();
    let with_cached: Vec<&LogRow> = rows.iter().filter(|r| r.cached_tokens.is_some()).collect();
    let (cached_share_tokens, cached_share_requests) = if with_cached.is_empty() {
        (None, None)
    } else {
        let p: u64 = with_cached.iter().map(|r| r.prompt_tokens).sum();
        let c: u64 = with_cached.iter().filter_map(|r| r.cached_tokens).sum();
        let hits = with_cached.iter().filter(|r| r.cached_tokens.unwrap_or(0) > 0).count();
        (
            Some(if p == 0 { 0.0 } else { c as f64 / p as f64 }),
            Some(hits as f64 / with_cached.len() as f64),
        )
    };
    // Concurrency: Little's law over the window.
    let timed: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.timestamp_s?, r.duration_s?)))
        .collect();
    let (mean_concurrency, window_s) = if timed.len() == rows.len() && !timed.is_empty() {
        let start = timed.iter().map(|t| t.0).fold(f64::INFINITY, f64::min);
        let end = timed.iter().map(|t| t.0 + t.1).fold(f64::NEG_INFINITY, f64::max);
        let busy: f64 = timed.iter().map(|t| t.1).sum();
        let window = end - start;
        (if window > 0.0 { Some(busy / window) } else { None }, Some(window))
    } else {
        let ts: Vec<f64> = rows.iter().filter_map(|r| r.timestamp_s).collect();
        let window = (ts.len() == rows.len() && ts.len() > 1).then(|| {
            ts.iter().copied().fold(f64::NEG_INFINITY, f64::max) - ts.iter().copied().fold(f64::INFINITY, f64::min)
        });
        (None, window)
    };
    // Growth: consecutive prompts of a session.
    let mut by_session: std::collections::BTreeMap<&str, Vec<(f64, usize, u64)>> = Default::default();
    for (i, r) in rows.iter().enumerate() {
        if let Some(s) = &r.session {
            by_session
                .entry(s.as_str())
                .or_default()
                .push((r.timestamp_s.unwrap_or(0.0), i, r.prompt_tokens));
        }
    }
    let mut diffs: Vec<u64> = Vec::new();
    for v in by_session.values_mut() {
        // Pushed in row order, so ties by time stay in row order.
        crate::order::sort_by_f64_key(v, |e| e.0);
        diffs.extend(v.windows(2).filter(|w| w[1].2 > w[0].2).map(|w| w[1].2 - w[0].2));
    }
    diffs.sort_unstable();
    let mut replies: Vec<u64> = rows.iter().filter_map(|r| r.completion_tokens).collect();
    replies.sort_unstable();
    Ok(FitTargets {
        requests: rows.len(),
        skipped_rows: log.bad.len(),
        failed_rows: log.failed.len(),
        median_tokens: nearest_rank(&prompts, 0.5).unwrap_or(0),
        p90_tokens: nearest_rank(&prompts, 0.9).unwrap_or(0),
        mean_prompt_tokens: prompts.iter().sum::<u64>() as f64 / prompts.len() as f64,
        cached_share_tokens,
        cached_share_requests,
        rows_with_cached: with_cached.len(),
        mean_concurrency,
        window_s,
        sessions: (!by_session.is_empty()).then_some(by_session.len()),
        growth_tokens: nearest_rank(&diffs, 0.5),
        growth_pairs: diffs.len(),
        reply_tokens: nearest_rank(&replies, 0.5),
    })
}

/// Parse a JSONL or CSV request log (see the module docs). Never fails: problems are listed in `bad`. A leading
/// UTF-8 byte order mark is skipped (it is not part of the first column's name nor a sign of CSV).
pub fn parse_log(text: &str) -> ParsedLog {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.trim_start().chars().next();
    let mut log = if first == Some('{') {
        parse_jsonl(text)
    } else {
        parse_csv(text)
    };
    // A reason may quote the field it refuses: a 10 MB field must not make a 10 MB message.
    for b in &mut log.bad {
        b.reason = crate::error::bounded(&b.reason);
    }
    log
}

/// [`parse_log`] of a log's raw bytes: a line that is not valid UTF-8 is a bad row naming its line and the byte
/// where the text breaks (the other lines are still read), instead of the whole file being refused without a
/// line number. A CSV header that is not UTF-8 leaves nothing to read the rows by, so it is the only bad line.
pub fn parse_log_bytes(bytes: &[u8]) -> ParsedLog {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return parse_log(text);
    }
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let mut text = String::with_capacity(bytes.len());
    let mut broken = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            text.push('\n');
        }
        match std::str::from_utf8(line) {
            Ok(l) => text.push_str(l),
            // Left blank (blank lines are skipped), so the line numbers of the others stay.
            Err(e) => broken.push(BadLine {
                line: i + 1,
                reason: format!("not valid UTF-8 text (at byte {} of the line)", e.valid_up_to() + 1),
            }),
        }
    }
    let mut log = parse_log(&text);
    let first_line = text
        .lines()
        .position(|l| !l.trim().is_empty())
        .map_or(usize::MAX, |i| i + 1);
    if log.format == LogFormat::Csv && broken.first().is_some_and(|b| b.line < first_line) {
        let header = broken.swap_remove(0);
        return ParsedLog {
            format: LogFormat::Csv,
            rows: Vec::new(),
            bad: vec![BadLine {
                line: header.line,
                reason: format!("header: {}", header.reason),
            }],
            failed: Vec::new(),
        };
    }
    log.bad.extend(broken);
    crate::order::sort_by_u64_key(&mut log.bad, |b| b.line as u64);
    log
}

/// A field value before interpretation.
enum Raw<'a> {
    Json(&'a Value),
    Text(&'a str),
}

impl Raw<'_> {
    /// The text of a JSON string or a CSV field.
    fn as_str(&self) -> Option<&str> {
        match self {
            Raw::Json(Value::String(s)) => Some(s.as_str()),
            Raw::Text(t) => Some(t),
            Raw::Json(_) => None,
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Raw::Json(v) => v.is_null(),
            Raw::Text(t) => t.trim().is_empty(),
        }
    }

    fn text(&self) -> String {
        match self {
            Raw::Json(Value::String(s)) => s.clone(),
            Raw::Json(v) => v.to_string(),
            Raw::Text(t) => t.trim().to_string(),
        }
    }

    fn tokens(&self, field: &str) -> Result<u64, String> {
        let bad = |shown: String| format!("{field} must be a whole number ≥ 0 (got {shown})");
        if let Some(s) = self.as_str() {
            let t = s.trim();
            return t.parse::<u64>().map_err(|_| bad(format!("`{t}`")));
        }
        match self {
            Raw::Json(Value::Number(n)) => n
                .as_u64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1e15)
                        .map(|f| f as u64)
                })
                .ok_or_else(|| bad(n.to_string())),
            other => Err(bad(other.text())),
        }
    }

    fn seconds(&self, field: &str, scale: f64) -> Result<f64, String> {
        let bad = |shown: String| format!("{field} must be a number of seconds ≥ 0 (got {shown})");
        let v = if let Some(s) = self.as_str() {
            let t = s.trim();
            t.parse::<f64>().map_err(|_| bad(format!("`{t}`")))?
        } else if let Raw::Json(Value::Number(n)) = self {
            n.as_f64().ok_or_else(|| bad(n.to_string()))?
        } else {
            return Err(bad(self.text()));
        };
        if v.is_finite() && v >= 0.0 {
            Ok(v * scale)
        } else {
            Err(bad(v.to_string()))
        }
    }

    fn timestamp(&self, field: &str) -> Result<f64, String> {
        if let Some(s) = self.as_str() {
            let t = s.trim();
            return t
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .or_else(|| rfc3339_seconds(t))
                .ok_or_else(|| format!("{field} must be seconds or an RFC 3339 time (got `{t}`)"));
        }
        match self {
            Raw::Json(Value::Number(n)) => n
                .as_f64()
                .filter(|f| f.is_finite())
                .ok_or_else(|| format!("{field} is not a finite number")),
            other => Err(format!(
                "{field} must be seconds or an RFC 3339 time (got {})",
                other.text()
            )),
        }
    }

    fn boolean(&self, field: &str) -> Result<bool, String> {
        if let Some(s) = self.as_str() {
            return match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                other => Err(format!("{field} must be true or false (got `{other}`)")),
            };
        }
        match self {
            Raw::Json(Value::Bool(b)) => Ok(*b),
            other => Err(format!("{field} must be true or false (got {})", other.text())),
        }
    }
}

/// The first of `names` that is present and non-empty, with the name it was found under.
fn pick<'a>(get: &impl Fn(&str) -> Option<Raw<'a>>, names: &[&'static str]) -> Option<(&'static str, Raw<'a>)> {
    names
        .iter()
        .find_map(|n| get(n).filter(|r| !r.is_empty()).map(|r| (*n, r)))
}

/// Build a row from a field lookup. `Ok(None)` means a failed request (`ok: false`).
fn build_row<'a>(line: usize, get: impl Fn(&str) -> Option<Raw<'a>>) -> Result<Option<LogRow>, String> {
    let pick = |names: &[&'static str]| pick(&get, names);
    if let Some((n, ok)) = pick(&["ok"])
        && !ok.boolean(n)?
    {
        return Ok(None);
    }
    let (n, p) = pick(&["prompt_tokens", "usage.prompt_tokens"]).ok_or("prompt_tokens is missing")?;
    let prompt_tokens = p.tokens(n)?;
    let cached_tokens = match pick(&["cached_tokens", "usage.prompt_tokens_details.cached_tokens"]) {
        Some((n, v)) => Some(v.tokens(n)?),
        None => None,
    };
    if let Some(c) = cached_tokens
        && c > prompt_tokens
    {
        return Err(format!("cached_tokens {c} exceeds prompt_tokens {prompt_tokens}"));
    }
    let completion_tokens = match pick(&["completion_tokens", "gen_tokens", "usage.completion_tokens"]) {
        Some((n, v)) => Some(v.tokens(n)?),
        None => None,
    };
    let timestamp_s = match pick(&["timestamp", "t_submit", "ts", "time"]) {
        Some((n, v)) => Some(v.timestamp(n)?),
        None => None,
    };
    let duration_s = match pick(&["duration_s", "wall_s", "latency_s", "e2e_s"]) {
        Some((n, v)) => Some(v.seconds(n, 1.0)?),
        None => match pick(&["duration_ms", "latency_ms"]) {
            Some((n, v)) => Some(v.seconds(n, 1e-3)?),
            None => None,
        },
    };
    let session = pick(&["session", "session_id"]).map(|(_, v)| v.text());
    Ok(Some(LogRow {
        line,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
        timestamp_s,
        session,
        duration_s,
    }))
}

fn lookup<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, k| v.get(k))
}

fn parse_jsonl(text: &str) -> ParsedLog {
    let mut out = ParsedLog {
        format: LogFormat::Jsonl,
        rows: Vec::new(),
        bad: Vec::new(),
        failed: Vec::new(),
    };
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let v: Value = match serde_json::from_str(l) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                out.bad.push(BadLine {
                    line,
                    reason: "not a JSON object".into(),
                });
                continue;
            }
            Err(e) => {
                out.bad.push(BadLine {
                    line,
                    reason: format!("invalid JSON: {e}"),
                });
                continue;
            }
        };
        match build_row(line, |k| lookup(&v, k).map(Raw::Json)) {
            Ok(Some(r)) => out.rows.push(r),
            Ok(None) => out.failed.push(line),
            Err(reason) => out.bad.push(BadLine { line, reason }),
        }
    }
    out
}

/// Split one CSV record: commas separate fields, double quotes enclose fields, `""` inside quotes is a quote.
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => cur.push(c),
            (false, '"') if cur.trim().is_empty() => {
                cur.clear();
                quoted = true;
            }
            (false, ',') => fields.push(std::mem::take(&mut cur)),
            (false, c) => cur.push(c),
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    fields.push(cur);
    Ok(fields)
}

fn parse_csv(text: &str) -> ParsedLog {
    let mut out = ParsedLog {
        format: LogFormat::Csv,
        rows: Vec::new(),
        bad: Vec::new(),
        failed: Vec::new(),
    };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((hi, header)) = lines.next() else { return out };
    let header: Vec<String> = match csv_fields(header.trim_end_matches('\r')) {
        Ok(h) => h.into_iter().map(|h| h.trim().to_ascii_lowercase()).collect(),
        Err(e) => {
            out.bad.push(BadLine {
                line: hi + 1,
                reason: format!("header: {e}"),
            });
            return out;
        }
    };
    if !header.iter().any(|h| h == "prompt_tokens") {
        out.bad.push(BadLine {
            line: hi + 1,
            reason: FitError::NoPromptColumn(header.join(",")).to_string(),
        });
        return out;
    }
    for (i, l) in lines {
        let line = i + 1;
        let fields = match csv_fields(l.trim_end_matches('\r')) {
            Ok(f) => f,
            Err(e) => {
                out.bad.push(BadLine { line, reason: e });
                continue;
            }
        };
        if fields.len() != header.len() {
            out.bad.push(BadLine {
                line,
                reason: format!(
                    "expected {} fields as in the header, got {}",
                    header.len(),
                    fields.len()
                ),
            });
            continue;
        }
        let get = |k: &str| {
            header
                .iter()
                .position(|h| h == k)
                .map(|j| Raw::Text(fields[j].as_str()))
        };
        match build_row(line, get) {
            Ok(Some(r)) => out.rows.push(r),
            Ok(None) => out.failed.push(line),
            Err(reason) => out.bad.push(BadLine { line, reason }),
        }
    }
    out
}

/// Seconds since the Unix epoch of an RFC 3339 / ISO 8601 time `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`
/// (a space may replace the `T`; a missing offset means UTC).
pub fn rfc3339_seconds(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        frac = format!("0.{}", &r[..digits]).parse().ok()?;
        rest = &r[digits..];
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        // By bytes and `get`: the offset may hold any text, and slicing inside a character panics.
        o if o.len() == 6 && matches!(o.as_bytes()[0], b'+' | b'-') && o.as_bytes()[3] == b':' => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (oh, om) = (o.get(1..3)?.parse::<i64>().ok()?, o.get(4..6)?.parse::<i64>().ok()?);
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset) as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(rfc3339_seconds("2026-11-30T10:44:44Z"), Some(1_796_035_484.0));
        assert_eq!(rfc3339_seconds("2026-11-30T12:44:44.5+02:00"), Some(1_796_035_484.5));
        assert_eq!(rfc3339_seconds("2000-02-29 00:00:00"), Some(951_782_400.0));
        assert_eq!(rfc3339_seconds("2026-13-01T00:00:00Z"), None);
        assert_eq!(rfc3339_seconds("yesterday"), None);
        // Found by tests/fuzz_inputs.rs: a 6-byte offset that is not ASCII used to panic on a char boundary.
        assert_eq!(rfc3339_seconds("2026-11-30T10:44:44\u{feff}71Z"), None);
        assert_eq!(rfc3339_seconds("2026-11-30T10:44:44+0é:0"), None);
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(
            csv_fields(r#"a,"b,c","d""e",,"#).expect("ok"),
            vec!["a", "b,c", "d\"e", "", ""]
        );
        assert!(csv_fields(r#"a,"b"#).is_err());
    }
}
