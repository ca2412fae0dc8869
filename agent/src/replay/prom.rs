//! Scraping the server's Prometheus `/metrics`, so each run is measured from both sides.
//!
//! The parser is a small one written here rather than `prometheus-parse`: we need only the sum of each metric over
//! its label sets, for about a dozen names, and a parser that skips what it does not understand line by line (label
//! values with escaped quotes and braces, `NaN`/`+Inf`, timestamps, exemplars after `#`) instead of rejecting a whole
//! exposition, which is what a benchmark wants when a server adds an odd line; it also keeps the agent free of the
//! regex and chrono dependencies that crate pulls in.
//!
//! Names read (whichever the server exposes):
//! - vLLM: `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, `vllm:num_requests_running`,
//!   `vllm:num_requests_waiting`, `vllm:prefix_cache_queries[_total]`, `vllm:prefix_cache_hits[_total]`, and the
//!   older gauge `vllm:gpu_prefix_cache_hit_rate`; KV-cache use `vllm:kv_cache_usage_perc` (older
//!   `vllm:gpu_cache_usage_perc`; both a fraction, 1 = full) and preemptions `vllm:num_preemptions_total`
//!   (older `vllm:num_preemptions`);
//! - SGLang: `sglang:prompt_tokens_total`, `sglang:generation_tokens_total`, `sglang:num_running_reqs`,
//!   `sglang:num_queue_reqs`, `sglang:cache_hit_rate`; KV use `sglang:token_usage` (a fraction) and preemptions
//!   (SGLang calls them retractions) `sglang:num_retracted_requests_total` — not `sglang:num_retracted_reqs`, a
//!   gauge of the last batch; speculative decoding `sglang:spec_accept_length`, `sglang:spec_accept_rate`
//!   (gauges), `sglang:spec_verify_calls_total` and `sglang:num_requests_total` ([`sglang_spec_counts`]);
//! - llama.cpp: `llamacpp:prompt_tokens_total`, `llamacpp:tokens_predicted_total`, `llamacpp:requests_processing`,
//!   `llamacpp:requests_deferred`; KV use `llamacpp:kv_cache_usage_ratio` (older builds only; llama.cpp has no
//!   preemption counter); speculative decoding `llamacpp:spec_decode_num_drafts_total` (verification steps),
//!   `…_num_draft_tokens_total` and `…_num_accepted_tokens_total`.
//!
//! [`ServerReport::from_snapshots`] turns the scrapes taken before, during and after a run into server-side prompt
//! and generation throughput (counter deltas over the scrape interval), the prefix-cache hit rate (hits / queries
//! over the run, or the mean of a hit-rate gauge) and running/waiting requests (mean and max over the scrapes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Parse a Prometheus text exposition. Lines that do not parse are skipped (and counted in the second value).
pub fn parse_text(text: &str) -> (Vec<Sample>, usize) {
    let mut out = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Some(s) => out.push(s),
            None => skipped += 1,
        }
    }
    (out, skipped)
}

fn parse_line(line: &str) -> Option<Sample> {
    let bytes = line.as_bytes();
    let name_end = bytes
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b':'))
        .unwrap_or(bytes.len());
    if name_end == 0 || bytes[0].is_ascii_digit() {
        return None;
    }
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = parse_value(fields.next()?)?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Labels after the `{`; returns them and the text after the closing `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(tail) = s.strip_prefix('}') {
            return Some((labels, tail));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key, value));
        s = &s[end + 1..];
    }
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => v.parse().ok(),
    }
}

/// Sum of each metric over its label sets.
pub fn sums(samples: &[Sample]) -> HashMap<&str, f64> {
    let mut m: HashMap<&str, f64> = HashMap::new();
    for s in samples {
        if s.value.is_finite() {
            *m.entry(s.name.as_str()).or_default() += s.value;
        }
    }
    m
}

/// The serving-engine numbers of one scrape, whatever the engine calls them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Seconds since the run's origin.
    pub t_s: f64,
    /// Which family's names were found (`vllm`, `sglang`, `llamacpp`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_tokens_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_queries_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hits_total: Option<f64>,
    /// A hit-rate gauge (SGLang `cache_hit_rate`, old vLLM `gpu_prefix_cache_hit_rate`), 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<f64>,
    /// KV-cache use, a fraction (1 = full).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    /// Requests preempted (SGLang: retracted) since the server started, a counter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions_total: Option<f64>,
    /// Speculative decoding (vLLM's and llama.cpp's `spec_decode_num_drafts`, `…_num_draft_tokens`,
    /// `…_num_accepted_tokens`): drafts (verification steps per request), draft tokens and accepted tokens since
    /// the server started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_drafts_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_accepted_tokens_total: Option<f64>,
    /// SGLang's speculative decoding, which has no draft or accepted token counters: requests finished
    /// (`sglang:num_requests_total`, a counter) and its two gauges of the last logging window,
    /// `sglang:spec_accept_length` (tokens a verification step emits, the bonus token included) and
    /// `sglang:spec_accept_rate` (accepted / drafted tokens). The verification steps
    /// (`sglang:spec_verify_calls_total`, a counter of newer builds) are `spec_drafts_total`. See
    /// [`sglang_spec_counts`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_accept_length: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_accept_rate: Option<f64>,
}

impl Snapshot {
    /// Pick the known names out of one exposition.
    pub fn from_text(t_s: f64, text: &str) -> Snapshot {
        let (samples, _) = parse_text(text);
        let m = sums(&samples);
        let get = |names: &[&str]| names.iter().find_map(|n| m.get(n).copied());
        let mut s = Snapshot {
            t_s,
            ..Snapshot::default()
        };
        if m.keys().any(|k| k.starts_with("vllm:")) {
            s.family = Some("vllm");
            s.prompt_tokens_total = get(&["vllm:prompt_tokens_total", "vllm:prompt_tokens"]);
            s.generation_tokens_total = get(&["vllm:generation_tokens_total", "vllm:generation_tokens"]);
            s.running = get(&["vllm:num_requests_running"]);
            s.waiting = get(&["vllm:num_requests_waiting"]);
            s.prefix_cache_queries_total = get(&["vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"]);
            s.prefix_cache_hits_total = get(&["vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"]);
            s.cache_hit_rate = get(&["vllm:gpu_prefix_cache_hit_rate"]);
            s.kv_cache_usage = get(&["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]);
            s.preemptions_total = get(&["vllm:num_preemptions_total", "vllm:num_preemptions"]);
            s.spec_drafts_total = get(&["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts"]);
            s.spec_draft_tokens_total = get(&[
                "vllm:spec_decode_num_draft_tokens_total",
                "vllm:spec_decode_num_draft_tokens",
            ]);
            s.spec_accepted_tokens_total = get(&[
                "vllm:spec_decode_num_accepted_tokens_total",
                "vllm:spec_decode_num_accepted_tokens",
            ]);
        } else if m.keys().any(|k| k.starts_with("sglang:")) {
            s.family = Some("sglang");
            s.prompt_tokens_total = get(&["sglang:prompt_tokens_total"]);
            s.generation_tokens_total = get(&["sglang:generation_tokens_total"]);
            s.running = get(&["sglang:num_running_reqs"]);
            s.waiting = get(&["sglang:num_queue_reqs"]);
            s.cache_hit_rate = get(&["sglang:cache_hit_rate"]);
            s.kv_cache_usage = get(&["sglang:token_usage"]);
            s.preemptions_total = get(&["sglang:num_retracted_requests_total"]);
            s.requests_total = get(&["sglang:num_requests_total"]);
            // Read once the server speculates (its gauges are 0, or NaN, and its steps counter 0 otherwise), so a
            // run on an SGLang that does not keeps its report as it was.
            let length = get(&["sglang:spec_accept_length"]).filter(|&l| l > 0.0);
            let steps = get(&["sglang:spec_verify_calls_total"]).filter(|&n| n > 0.0);
            if length.is_some() || steps.is_some() {
                s.spec_accept_length = length;
                s.spec_accept_rate = get(&["sglang:spec_accept_rate"]);
                s.spec_drafts_total = steps;
            }
        } else if m.keys().any(|k| k.starts_with("llamacpp:")) {
            s.family = Some("llamacpp");
            s.prompt_tokens_total = get(&["llamacpp:prompt_tokens_total"]);
            s.generation_tokens_total = get(&["llamacpp:tokens_predicted_total"]);
            s.running = get(&["llamacpp:requests_processing"]);
            s.waiting = get(&["llamacpp:requests_deferred"]);
            s.kv_cache_usage = get(&["llamacpp:kv_cache_usage_ratio"]);
            // llama-server lists its speculative counters with or without a draft model: they are read once it
            // has drafted (the first scrape of a run then counts from 0, as sim-server's), so a server that does
            // not speculate reports as before.
            let drafted = get(&["llamacpp:spec_decode_num_draft_tokens_total"]).filter(|&d| d > 0.0);
            if drafted.is_some() {
                s.spec_drafts_total = get(&["llamacpp:spec_decode_num_drafts_total"]);
                s.spec_draft_tokens_total = drafted;
                s.spec_accepted_tokens_total = get(&["llamacpp:spec_decode_num_accepted_tokens_total"]);
            }
        }
        s
    }
}

/// Server-side figures over a run, from its scrapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ServerReport {
    pub scrapes: usize,
    pub failed_scrapes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Seconds between the first and the last good scrape.
    pub window_s: f64,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub prompt_throughput_tok_s: Option<f64>,
    pub generation_throughput_tok_s: Option<f64>,
    /// Prefix-cache hits / queries over the run (counters), else the mean of a hit-rate gauge.
    pub prefix_cache_hit_rate: Option<f64>,
    pub running_mean: Option<f64>,
    pub running_max: Option<f64>,
    pub waiting_mean: Option<f64>,
    pub waiting_max: Option<f64>,
    /// The highest KV-cache use (a fraction) any scrape saw; absent when the server does not report it. A peak
    /// of samples `interval_s` apart, so a shorter spike can be missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage_max: Option<f64>,
    /// Requests preempted between the first and the last scrape (counter delta); absent when the server does
    /// not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// Speculative decoding between the first and the last scrape (counter deltas; vLLM, llama.cpp): drafts, draft
    /// tokens, accepted tokens; absent when the server does not report them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_drafts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_tokens: Option<f64>,
}

impl ServerReport {
    pub fn from_snapshots(snaps: &[Snapshot]) -> ServerReport {
        let good: Vec<&Snapshot> = snaps.iter().filter(|s| s.error.is_none()).collect();
        let mut r = ServerReport {
            scrapes: snaps.len(),
            failed_scrapes: snaps.len() - good.len(),
            family: good.iter().find_map(|s| s.family).map(str::to_owned),
            ..ServerReport::default()
        };
        let (Some(first), Some(last)) = (good.first(), good.last()) else {
            return r;
        };
        r.window_s = last.t_s - first.t_s;
        let delta = |f: fn(&Snapshot) -> Option<f64>| match (f(first), f(last)) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        };
        r.prompt_tokens = delta(|s| s.prompt_tokens_total);
        r.generation_tokens = delta(|s| s.generation_tokens_total);
        if r.window_s > 0.0 {
            r.prompt_throughput_tok_s = r.prompt_tokens.map(|d| d / r.window_s);
            r.generation_throughput_tok_s = r.generation_tokens.map(|d| d / r.window_s);
        }
        r.prefix_cache_hit_rate = match (
            delta(|s| s.prefix_cache_hits_total),
            delta(|s| s.prefix_cache_queries_total),
        ) {
            (Some(h), Some(q)) if q > 0.0 => Some(h / q),
            _ => mean(good.iter().filter_map(|s| s.cache_hit_rate)),
        };
        r.running_mean = mean(good.iter().filter_map(|s| s.running));
        r.running_max = good.iter().filter_map(|s| s.running).reduce(f64::max);
        r.waiting_mean = mean(good.iter().filter_map(|s| s.waiting));
        r.waiting_max = good.iter().filter_map(|s| s.waiting).reduce(f64::max);
        r.kv_cache_usage_max = good.iter().filter_map(|s| s.kv_cache_usage).reduce(f64::max);
        r.preemptions = delta(|s| s.preemptions_total);
        // A server that exposes these counters only once it has drafted (sim-server) started them at 0.
        let since_zero = |f: fn(&Snapshot) -> Option<f64>| match (f(first), f(last)) {
            (None, Some(b)) => Some(b),
            _ => delta(f),
        };
        r.spec_drafts = since_zero(|s| s.spec_drafts_total);
        r.spec_draft_tokens = since_zero(|s| s.spec_draft_tokens_total);
        r.spec_accepted_tokens = since_zero(|s| s.spec_accepted_tokens_total);
        if r.family.as_deref() == Some("sglang") {
            // The gauges of the scrapes taken during the run (the first was taken before it).
            let during = if good.len() > 1 { &good[1..] } else { &good[..] };
            let gauge = |f: fn(&Snapshot) -> Option<f64>| mean(during.iter().filter_map(|s| f(s)));
            let counts = sglang_spec_counts(
                r.generation_tokens,
                delta(|s| s.requests_total),
                r.spec_drafts,
                gauge(|s| s.spec_accept_length),
                gauge(|s| s.spec_accept_rate),
            );
            if let Some(c) = counts {
                r.spec_drafts = Some(c.steps);
                r.spec_draft_tokens = Some(c.drafted_tokens);
                r.spec_accepted_tokens = Some(c.accepted_tokens);
            } else {
                r.spec_drafts = None;
            }
        }
        r
    }
}

/// Speculative counts over a run of SGLang, which counts neither draft nor accepted tokens (its Prometheus names:
/// python/sglang/srt/metrics/collector.py in sgl-project/sglang, `sglang:spec_accept_length`,
/// `sglang:spec_accept_rate`, `sglang:spec_verify_calls_total`). From the run's deltas of `generation_tokens`,
/// `requests` (finished) and, where the server has the counter, `steps` (verification steps); and the gauges'
/// means over the run, `length` (tokens per verification step, the bonus included) and `rate` (accepted /
/// drafted):
/// - a request's first token comes from its prefill and each verification step emits one token plus the drafts it
///   accepted, so the tokens after the first, `T = generation_tokens − requests`, are `steps + accepted`;
/// - `steps` from the counter, else `T / length`; `accepted = T − steps`;
/// - `drafted = accepted / rate` (no draft counter; `rate` 0 with nothing accepted leaves it unknown).
///
/// `None` when a part is missing or nothing was verified.
pub fn sglang_spec_counts(
    generation_tokens: Option<f64>,
    requests: Option<f64>,
    steps: Option<f64>,
    length: Option<f64>,
    rate: Option<f64>,
) -> Option<SglangSpecCounts> {
    let after_first = generation_tokens? - requests?;
    let steps = match steps {
        Some(n) => n,
        None => after_first / length.filter(|&l| l >= 1.0)?,
    };
    let verified = steps.is_finite() && steps > 0.0 && after_first >= steps;
    if !verified {
        return None;
    }
    let accepted = after_first - steps;
    let rate = rate.filter(|r| r.is_finite() && *r > 0.0 && *r <= 1.0)?;
    Some(SglangSpecCounts {
        steps,
        drafted_tokens: accepted / rate,
        accepted_tokens: accepted,
    })
}

/// What [`sglang_spec_counts`] derives: verification steps, drafted and accepted tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SglangSpecCounts {
    pub steps: f64,
    pub drafted_tokens: f64,
    pub accepted_tokens: f64,
}

fn mean(it: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = it.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Scrapes one `/metrics` URL and keeps every snapshot.
#[derive(Debug, Clone)]
pub struct Scraper {
    http: reqwest::Client,
    url: String,
    origin: Instant,
    snaps: Arc<Mutex<Vec<Snapshot>>>,
}

impl Scraper {
    pub fn new(http: reqwest::Client, url: String, origin: Instant) -> Self {
        Scraper {
            http,
            url,
            origin,
            snaps: Arc::default(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Time later scrapes from `origin` (a scrape taken before it is stamped 0 s: it was before the run).
    pub fn set_origin(&mut self, origin: Instant) {
        self.origin = origin;
    }

    /// Take one scrape now and keep it.
    pub async fn scrape(&self) -> Snapshot {
        let t_s = self.origin.elapsed().as_secs_f64();
        let got = async {
            let resp = self.http.get(&self.url).timeout(Duration::from_secs(5)).send().await?;
            let resp = resp.error_for_status()?;
            resp.text().await
        }
        .await;
        let snap = match got {
            Ok(text) => Snapshot::from_text(t_s, &text),
            Err(e) => Snapshot {
                t_s,
                error: Some(super::client::error_chain(&e)),
                ..Snapshot::default()
            },
        };
        self.snaps.lock().unwrap_or_else(|p| p.into_inner()).push(snap.clone());
        snap
    }

    /// Scrape every `every` until the returned handle is aborted.
    pub fn spawn_periodic(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                me.scrape().await;
            }
        })
    }

    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.snaps.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="m \"q\" {x}"} 500.0
vllm:generation_tokens_total{engine="0",model_name="m"} 200
vllm:num_requests_running{model_name="m"} 4
vllm:num_requests_waiting{model_name="m"} 1 1700000000000
vllm:prefix_cache_queries_total{model_name="m"} 1000
vllm:prefix_cache_hits_total{model_name="m"} 900
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 3
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:num_preemptions_total{engine="0",model_name="m"} 7
garbage line {
"#;

    #[test]
    fn parses_vllm_exposition() {
        let (samples, skipped) = parse_text(VLLM);
        assert_eq!(skipped, 1);
        assert_eq!(samples[1].labels[1].1, "m \"q\" {x}");
        let s = Snapshot::from_text(0.0, VLLM);
        assert_eq!(s.family, Some("vllm"));
        assert_eq!(s.prompt_tokens_total, Some(1500.0));
        assert_eq!((s.running, s.waiting), (Some(4.0), Some(1.0)));
        assert_eq!(s.prefix_cache_hits_total, Some(900.0));
        assert_eq!((s.kv_cache_usage, s.preemptions_total), (Some(0.42), Some(7.0)));
        // The older names.
        let old = Snapshot::from_text(0.0, "vllm:gpu_cache_usage_perc 0.5\nvllm:num_preemptions 2\n");
        assert_eq!((old.kv_cache_usage, old.preemptions_total), (Some(0.5), Some(2.0)));
    }

    #[test]
    fn sglang_and_llamacpp_names() {
        let sg = "sglang:prompt_tokens_total{model_name=\"m\"} 10\nsglang:num_queue_reqs 2\nsglang:cache_hit_rate 0.5\n\
                  sglang:token_usage 0.3\nsglang:num_retracted_reqs{pid=\"1\"} 1\nsglang:num_retracted_requests_total 4\n";
        let s = Snapshot::from_text(0.0, sg);
        assert_eq!(
            (s.family, s.waiting, s.cache_hit_rate),
            (Some("sglang"), Some(2.0), Some(0.5))
        );
        assert_eq!((s.kv_cache_usage, s.preemptions_total), (Some(0.3), Some(4.0)));
        let lc = "llamacpp:tokens_predicted_total 7\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n";
        let s = Snapshot::from_text(0.0, lc);
        assert_eq!(
            (s.family, s.generation_tokens_total, s.running),
            (Some("llamacpp"), Some(7.0), Some(1.0))
        );
        assert_eq!((s.kv_cache_usage, s.preemptions_total), (None, None));
        let old = Snapshot::from_text(0.0, "llamacpp:kv_cache_usage_ratio 0.25\n");
        assert_eq!(old.kv_cache_usage, Some(0.25));
        // llama-server with a draft model: its speculative counters, the per-position one not mistaken for them.
        let spec = "llamacpp:spec_decode_num_draft_tokens_total 1025\nllamacpp:spec_decode_num_accepted_tokens_total 502\n\
                    llamacpp:spec_decode_num_drafts_total 260\n\
                    llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 166\n";
        let s = Snapshot::from_text(0.0, spec);
        assert_eq!(
            (
                s.spec_drafts_total,
                s.spec_draft_tokens_total,
                s.spec_accepted_tokens_total
            ),
            (Some(260.0), Some(1025.0), Some(502.0))
        );
        // Without a draft model llama-server lists them at 0: not read, so its report is what it was.
        let off = "llamacpp:tokens_predicted_total 7\nllamacpp:spec_decode_num_draft_tokens_total 0\n\
                   llamacpp:spec_decode_num_accepted_tokens_total 0\nllamacpp:spec_decode_num_drafts_total 0\n";
        let s = Snapshot::from_text(0.0, off);
        assert_eq!(
            (
                s.spec_drafts_total,
                s.spec_draft_tokens_total,
                s.spec_accepted_tokens_total
            ),
            (None, None, None)
        );
        let r = ServerReport::from_snapshots(&[s, Snapshot::from_text(1.0, spec)]);
        assert_eq!(
            (r.spec_drafts, r.spec_draft_tokens, r.spec_accepted_tokens),
            (Some(260.0), Some(1025.0), Some(502.0)),
            "a run's first scrape before any draft counts from 0"
        );
        let r = ServerReport::from_snapshots(&[Snapshot::from_text(0.0, off), Snapshot::from_text(1.0, off)]);
        assert_eq!(r.spec_draft_tokens, None);
    }

    /// SGLang speculating: an exposition as its collector writes one (HELP/TYPE lines, its labels), before and after
    /// a run of 10 requests that generated 1,010 tokens in 400 verification steps, half the drafts accepted.
    #[test]
    fn sglang_speculative_counts_from_its_counters_and_gauges() {
        let expo = |requests: u32, generated: u32, steps: Option<u32>, length: f64, rate: f64| {
            let l = r#"{model_name="Qwen/Qwen3-8B",engine_type="unified",tp_rank="0",pp_rank="0"}"#;
            let mut t = format!(
                "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n\
                 sglang:num_running_reqs{l} 0.0\n\
                 # HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n\
                 # TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{l} {length}\n\
                 # HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).\n\
                 # TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{l} {rate}\n\
                 # HELP sglang:generation_tokens_total Number of generation tokens processed.\n\
                 # TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{l} {generated}.0\n\
                 sglang:generation_tokens_created{l} 1.7650e+09\n\
                 # TYPE sglang:num_requests_total counter\nsglang:num_requests_total{l} {requests}.0\n"
            );
            if let Some(n) = steps {
                t.push_str(&format!(
                    "# TYPE sglang:spec_verify_calls_total counter\nsglang:spec_verify_calls_total{l} {n}.0\n"
                ));
            }
            t
        };
        // A fresh server: gauges and steps at 0, nothing read.
        let fresh = Snapshot::from_text(0.0, &expo(0, 0, Some(0), 0.0, 0.0));
        assert_eq!(fresh.family, Some("sglang"));
        assert_eq!(
            (fresh.spec_drafts_total, fresh.spec_accept_length, fresh.requests_total),
            (None, None, Some(0.0))
        );
        let mid = Snapshot::from_text(1.0, &expo(4, 404, Some(160), 2.4, 0.45));
        assert_eq!(
            (
                mid.spec_drafts_total,
                mid.spec_accept_length,
                mid.spec_accept_rate,
                mid.requests_total
            ),
            (Some(160.0), Some(2.4), Some(0.45), Some(4.0))
        );
        let end = Snapshot::from_text(2.0, &expo(10, 1010, Some(400), 2.6, 0.55));
        let r = ServerReport::from_snapshots(&[fresh.clone(), mid.clone(), end.clone()]);
        // T = 1010 − 10 = 1000 tokens after the first ones, 400 of them the steps' own: 600 accepted; the rate's
        // mean over the run's scrapes is 0.5, so 1,200 drafted.
        assert_eq!(
            (r.spec_drafts, r.spec_draft_tokens, r.spec_accepted_tokens),
            (Some(400.0), Some(1200.0), Some(600.0))
        );
        // An older SGLang without the steps counter: the steps from the accept length's mean, 1000 / 2.5.
        let old = |t: f64, req: u32, generated: u32, length: f64, rate: f64| {
            Snapshot::from_text(t, &expo(req, generated, None, length, rate))
        };
        let r = ServerReport::from_snapshots(&[
            old(0.0, 0, 0, 0.0, 0.0),
            old(1.0, 4, 404, 2.4, 0.45),
            old(2.0, 10, 1010, 2.6, 0.55),
        ]);
        assert_eq!(
            (r.spec_drafts, r.spec_draft_tokens, r.spec_accepted_tokens),
            (Some(400.0), Some(1200.0), Some(600.0))
        );
        // An SGLang that does not speculate: no speculative keys.
        let r = ServerReport::from_snapshots(&[
            fresh.clone(),
            Snapshot::from_text(1.0, &expo(10, 1010, Some(0), 0.0, 0.0)),
        ]);
        assert_eq!(
            (r.spec_drafts, r.spec_draft_tokens, r.spec_accepted_tokens),
            (None, None, None)
        );
        assert_eq!(r.generation_tokens, Some(1010.0));
    }

    #[test]
    fn report_from_counter_deltas() {
        let a = Snapshot {
            t_s: 0.0,
            prompt_tokens_total: Some(100.0),
            generation_tokens_total: Some(10.0),
            prefix_cache_queries_total: Some(0.0),
            prefix_cache_hits_total: Some(0.0),
            running: Some(0.0),
            ..Snapshot::default()
        };
        let b = Snapshot {
            t_s: 10.0,
            prompt_tokens_total: Some(1100.0),
            generation_tokens_total: Some(510.0),
            prefix_cache_queries_total: Some(1000.0),
            prefix_cache_hits_total: Some(970.0),
            running: Some(4.0),
            ..Snapshot::default()
        };
        let failed = Snapshot {
            t_s: 5.0,
            error: Some("refused".into()),
            ..Snapshot::default()
        };
        let r = ServerReport::from_snapshots(&[a, failed, b]);
        assert_eq!((r.scrapes, r.failed_scrapes), (3, 1));
        assert_eq!(r.prompt_throughput_tok_s, Some(100.0));
        assert_eq!(r.generation_throughput_tok_s, Some(50.0));
        assert_eq!(r.prefix_cache_hit_rate, Some(0.97));
        assert_eq!((r.running_mean, r.running_max), (Some(2.0), Some(4.0)));
        // Not reported: absent, and left out of the JSON (server.json as before).
        assert_eq!((r.kv_cache_usage_max, r.preemptions), (None, None));
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            !json.contains("kv_cache_usage_max") && !json.contains("preemptions"),
            "{json}"
        );
        let at = |t_s: f64, kv: f64, pre: f64| Snapshot {
            t_s,
            kv_cache_usage: Some(kv),
            preemptions_total: Some(pre),
            ..Snapshot::default()
        };
        let r = ServerReport::from_snapshots(&[at(0.0, 0.1, 5.0), at(2.0, 0.9, 8.0), at(4.0, 0.3, 11.0)]);
        assert_eq!((r.kv_cache_usage_max, r.preemptions), (Some(0.9), Some(6.0)));
    }
}
