//! Workload configs both ways: a peer's config or command line → the nearest loadshape scenario
//! ([`import_config`]), and a scenario → the peer's command line or config file ([`export`]), each with the list of
//! what could not be carried over.
//!
//! Every tool's load is first read into one [`PeerLoad`] (arrivals, request count or duration, prompt and output
//! length distributions as mean/stdev/min/max, a shared prefix, turns), which is what the tools have in common.
//! Read: GuideLLM's `run` command line (`--profile kind=poisson,rate=5 --data kind=synthetic_text,...`, and the
//! older `--rate-type/--rate/--max-requests/--data "prompt_tokens=..."`), its scenario file and the `config.spec`
//! a `benchmarks.json` keeps; AIPerf's `profile` command line and the `input_config` of `profile_export_aiperf.json`;
//! inference-perf's YAML config (as JSON: the caller converts YAML). Written: GuideLLM and AIPerf command lines,
//! an inference-perf config (YAML).

use serde_json::{Map, Value, json};

use super::types::{ImportError, Tool};
use crate::scenario::Scenario;
use crate::workload::Workload;
use crate::workload::open_loop::LengthDist;

/// A config as read: structured (JSON, or YAML converted to JSON) or a command line split into words.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigInput {
    Value(Value),
    Args(Vec<String>),
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    Poisson {
        rate: f64,
    },
    /// Evenly spaced at `rate`.
    Constant {
        rate: f64,
    },
    /// Gamma gaps with coefficient of variation `cv`.
    Gamma {
        rate: f64,
        cv: f64,
    },
    /// `users` closed-loop clients.
    Concurrent {
        users: u32,
    },
}

/// A token-length distribution as the peers describe it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Len {
    pub mean: f64,
    pub stdev: f64,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

/// What the peers' load configs have in common.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerLoad {
    pub arrival: Arrival,
    pub num_requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub prompt: Option<Len>,
    pub output: Option<Len>,
    pub prefix_tokens: u32,
    /// Distinct shared prefixes (1 = one system prompt for all).
    pub prefix_count: u32,
    pub turns: Option<f64>,
    pub url: Option<String>,
    pub model: Option<String>,
}

impl Default for PeerLoad {
    fn default() -> Self {
        PeerLoad {
            arrival: Arrival::Concurrent { users: 1 },
            num_requests: None,
            duration_s: None,
            prompt: None,
            output: None,
            prefix_tokens: 0,
            prefix_count: 1,
            turns: None,
            url: None,
            model: None,
        }
    }
}

/// A config read into a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigImport {
    pub load: PeerLoad,
    /// The scenario (validated), as JSON.
    pub scenario: Value,
    /// What the config said that the scenario does not carry.
    pub lost: Vec<String>,
}

/// A scenario written for a peer.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigExport {
    /// A command line (GuideLLM, AIPerf) or a YAML config (inference-perf).
    pub text: String,
    pub lost: Vec<String>,
}

/// Requests assumed when a config gives neither a count nor a duration.
pub const DEFAULT_REQUESTS: u64 = 1000;

/// Split a command line as a POSIX shell would split words: single and double quotes, backslash escapes,
/// `\`-newline continuations; no expansion. A `#` at a word's start begins a comment to the end of the line.
pub fn split_command_line(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(n) => {
                    cur.push(n);
                    in_word = true;
                }
                None => return Err("a trailing backslash".into()),
            },
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(n) => cur.push(n),
                        None => return Err("an unclosed single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(n @ ('"' | '\\' | '$' | '`')) => cur.push(n),
                            Some('\n') => {}
                            Some(n) => {
                                cur.push('\\');
                                cur.push(n);
                            }
                            None => return Err("an unclosed double quote".into()),
                        },
                        Some(n) => cur.push(n),
                        None => return Err("an unclosed double quote".into()),
                    }
                }
            }
            '#' if !in_word => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Read a peer's config into the nearest scenario.
pub fn import_config(tool: Tool, file: &str, input: &ConfigInput) -> Result<ConfigImport, ImportError> {
    let err = |field: &str, m: String| ImportError {
        file: file.into(),
        tool: Some(tool),
        field: field.into(),
        message: m,
    };
    let mut lost = Vec::new();
    let load = match (tool, input) {
        (Tool::Guidellm, ConfigInput::Args(a)) => guidellm_args(a, &mut lost).map_err(|(f, m)| err(&f, m))?,
        (Tool::Guidellm, ConfigInput::Value(v)) => guidellm_value(v, &mut lost).map_err(|(f, m)| err(&f, m))?,
        (Tool::Aiperf, ConfigInput::Args(a)) => aiperf_args(a, &mut lost).map_err(|(f, m)| err(&f, m))?,
        (Tool::Aiperf, ConfigInput::Value(v)) => aiperf_value(v, &mut lost).map_err(|(f, m)| err(&f, m))?,
        (Tool::InferencePerf, ConfigInput::Value(v)) => ip_value(v, &mut lost).map_err(|(f, m)| err(&f, m))?,
        (Tool::InferencePerf, ConfigInput::Args(_)) => {
            return Err(err(
                "(file)",
                "inference-perf takes its workload from a config file (--config_file): give that file".into(),
            ));
        }
        (Tool::VllmBench, ConfigInput::Args(a)) => vllm_args(a, &mut lost).map_err(|(f, m)| err(&f, m))?,
        (Tool::VllmBench, ConfigInput::Value(v)) => vllm_value(v, &mut lost).map_err(|(f, m)| err(&f, m))?,
    };
    let scenario = scenario_of(&load, &mut lost).map_err(|m| err("(scenario)", m))?;
    Ok(ConfigImport { load, scenario, lost })
}

type R<T> = Result<T, (String, String)>;

fn bad(field: &str, m: impl Into<String>) -> (String, String) {
    (field.to_string(), m.into())
}

fn num(field: &str, s: &str) -> R<f64> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| bad(field, format!("expected a number >= 0, found {s:?}")))
}

/// `kind=poisson,rate=5` → pairs. Values may be lists joined by `,` only where the key repeats.
fn kv_list(field: &str, s: &str) -> R<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, v)) => out.push((k.trim().to_string(), v.trim().to_string())),
            // `streams=1,2,4`: a bare value continues the previous key's list.
            None => match out.last_mut() {
                Some((_, v)) => {
                    v.push(',');
                    v.push_str(part.trim());
                }
                None => return Err(bad(field, format!("expected key=value pairs, found {part:?}"))),
            },
        }
    }
    Ok(out)
}

/// Flags of a command line: `--name value` and `--name=value` pairs (a flag without a value maps to "").
fn flags(args: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some(name) = a
            .strip_prefix("--")
            .or_else(|| a.strip_prefix('-').filter(|n| n.len() == 1))
        {
            if let Some((n, v)) = name.split_once('=') {
                out.push((n.to_string(), v.to_string()));
            } else if i + 1 < args.len() && !args[i + 1].starts_with('-') {
                out.push((name.to_string(), args[i + 1].clone()));
                i += 1;
            } else {
                out.push((name.to_string(), String::new()));
            }
        }
        i += 1;
    }
    out
}

/// The first of a `1,2,4` list, noting the rest.
fn first_of(field: &str, v: &str, lost: &mut Vec<String>) -> String {
    let mut parts = v.split(',');
    let first = parts.next().unwrap_or("").trim().to_string();
    let rest: Vec<&str> = parts.collect();
    if !rest.is_empty() {
        lost.push(format!(
            "{field}: a sweep over {v}: only the first point ({first}) is carried"
        ));
    }
    first
}

fn guidellm_args(args: &[String], lost: &mut Vec<String>) -> R<PeerLoad> {
    let mut spec = Map::new();
    let mut constraints = Vec::new();
    let mut data = Vec::new();
    let (mut rate_type, mut rate) = (None, None);
    for (name, v) in flags(args) {
        match name.as_str() {
            "profile" | "backend" | "tokenizer" => {
                let obj: Map<String, Value> = kv_list(&name, &v)?
                    .into_iter()
                    .map(|(k, x)| (k, Value::String(x)))
                    .collect();
                spec.insert(name, Value::Object(obj));
            }
            "constraint" => constraints.push(Value::Object(
                kv_list(&name, &v)?
                    .into_iter()
                    .map(|(k, x)| (k, Value::String(x)))
                    .collect(),
            )),
            "data" => {
                let pairs = kv_list(&name, &v)?;
                if pairs.iter().any(|(k, _)| k == "kind") || pairs.iter().any(|(k, _)| k == "prompt_tokens") {
                    let mut obj: Map<String, Value> = pairs.into_iter().map(|(k, x)| (k, Value::String(x))).collect();
                    obj.entry("kind")
                        .or_insert_with(|| Value::String("synthetic_text".into()));
                    data.push(Value::Object(obj));
                } else {
                    data.push(json!({"kind": "file", "path": v}));
                }
            }
            // The older `guidellm benchmark` flags.
            "rate-type" => rate_type = Some(v),
            "rate" => rate = Some(v),
            "max-requests" => constraints.push(json!({"kind": "max_requests", "count": v})),
            "max-seconds" => constraints.push(json!({"kind": "max_duration", "duration": v})),
            "target" => {
                spec.insert("backend".into(), json!({"target": v}));
            }
            "model" => {
                let b = spec.entry("backend").or_insert_with(|| json!({}));
                b["model"] = Value::String(v);
            }
            "label" | "output" | "disable-console" | "disable-console-interactive" | "disable-progress" | "seed" => {}
            other => lost.push(format!("--{other} {v}: not carried")),
        }
    }
    if let Some(t) = rate_type {
        let mut p = json!({"kind": t});
        if let Some(r) = rate {
            p[if t == "concurrent" { "streams" } else { "rate" }] = Value::String(r);
        }
        spec.insert("profile".into(), p);
    }
    spec.insert("constraints".into(), Value::Array(constraints));
    spec.insert("data".into(), Value::Array(data));
    guidellm_value(&Value::Object(spec), lost)
}

/// GuideLLM's scenario / `config.spec` object: `profile`, `constraints`, `data`, `backend`. Values may be
/// strings (from a command line) or numbers.
fn guidellm_value(v: &Value, lost: &mut Vec<String>) -> R<PeerLoad> {
    // A benchmarks.json: its config.spec.
    let v = v.get("config").and_then(|c| c.get("spec")).unwrap_or(v);
    let mut load = PeerLoad::default();
    let f = |x: &Value, field: &str| -> R<Option<f64>> {
        match x {
            Value::Null => Ok(None),
            Value::Number(n) => Ok(n.as_f64()),
            Value::String(s) => num(field, s.split(',').next().unwrap_or("")).map(Some),
            Value::Array(a) => match a.first() {
                Some(Value::Number(n)) => Ok(n.as_f64()),
                Some(Value::String(s)) => num(field, s).map(Some),
                _ => Ok(None),
            },
            other => Err(bad(field, format!("expected a number, found {other}"))),
        }
    };
    let sweep = |x: &Value, field: &str, lost: &mut Vec<String>| match x {
        Value::Array(a) if a.len() > 1 => lost.push(format!(
            "{field}: a sweep over {} points: only the first is carried",
            a.len()
        )),
        Value::String(s) if s.contains(',') => {
            lost.push(format!("{field}: a sweep over {s}: only the first point is carried"))
        }
        _ => {}
    };
    let profile = v.get("profile").cloned().unwrap_or(json!({"kind": "synchronous"}));
    let kind = profile
        .get("kind")
        .or(profile.get("type_"))
        .and_then(Value::as_str)
        .unwrap_or("synchronous");
    let rate = profile.get("rate").unwrap_or(&Value::Null);
    let streams = profile.get("streams").unwrap_or(&Value::Null);
    load.arrival = match kind {
        "synchronous" => Arrival::Concurrent { users: 1 },
        "concurrent" => {
            sweep(streams, "profile.streams", lost);
            let users =
                f(streams, "profile.streams")?.ok_or_else(|| bad("profile.streams", "missing for kind=concurrent"))?;
            Arrival::Concurrent {
                users: users.round().max(1.0) as u32,
            }
        }
        "poisson" | "constant" | "async" => {
            sweep(rate, "profile.rate", lost);
            let r = f(rate, "profile.rate")?.ok_or_else(|| bad("profile.rate", format!("missing for kind={kind}")))?;
            if kind == "poisson" {
                Arrival::Poisson { rate: r }
            } else {
                Arrival::Constant { rate: r }
            }
        }
        "throughput" => {
            lost.push("profile kind=throughput (every request at once, to the server's limit): read as closed-loop users = requests".into());
            Arrival::Concurrent { users: 0 }
        }
        "sweep" => {
            lost.push(
                "profile kind=sweep (synchronous, throughput, then rates between): read as one synchronous stream"
                    .into(),
            );
            Arrival::Concurrent { users: 1 }
        }
        other => {
            return Err(bad(
                "profile.kind",
                format!(
                    "{other:?} has no loadshape equivalent (known: synchronous, concurrent, poisson, constant, throughput, sweep)"
                ),
            ));
        }
    };
    for key in ["rampup_duration", "rampup"] {
        if f(profile.get(key).unwrap_or(&Value::Null), key)?.unwrap_or(0.0) > 0.0 {
            lost.push(format!("profile.{key}: ramp-up is not carried"));
        }
    }
    let constraints: Vec<Value> = match v.get("constraints") {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, x)| {
                let mut x = x.clone();
                if x.get("kind").is_none() && x.is_object() {
                    x["kind"] = Value::String(k.clone());
                }
                x
            })
            .collect(),
        _ => Vec::new(),
    };
    for c in &constraints {
        match c.get("kind").and_then(Value::as_str) {
            Some("max_requests") => {
                load.num_requests = f(c.get("count").unwrap_or(&Value::Null), "constraint.count")?.map(|n| n as u64)
            }
            Some("max_duration") => {
                load.duration_s = f(
                    c.get("duration").or(c.get("seconds")).unwrap_or(&Value::Null),
                    "constraint.duration",
                )?
            }
            Some(k) => lost.push(format!("constraint {k}: not carried")),
            None => {}
        }
    }
    if let Arrival::Concurrent { users: 0 } = load.arrival {
        load.arrival = Arrival::Concurrent {
            users: load.num_requests.unwrap_or(DEFAULT_REQUESTS).min(1_000_000) as u32,
        };
    }
    let data = match v.get("data") {
        Some(Value::Array(a)) => a.clone(),
        Some(x @ Value::Object(_)) => vec![x.clone()],
        _ => Vec::new(),
    };
    for d in &data {
        let k = d.get("kind").and_then(Value::as_str).unwrap_or("");
        if k != "synthetic_text" {
            lost.push(format!(
                "data kind={k}: prompts from a dataset are not carried; lengths left at the scenario defaults"
            ));
            continue;
        }
        let g = |key: &str| f(d.get(key).unwrap_or(&Value::Null), &format!("data.{key}"));
        let len = |p: &str| -> R<Option<Len>> {
            Ok(g(&format!("{p}_tokens"))?.map(|mean| Len {
                mean,
                stdev: 0.0,
                min: None,
                max: None,
            }))
        };
        let fill = |l: Option<Len>, p: &str| -> R<Option<Len>> {
            let Some(mut l) = l else { return Ok(None) };
            l.stdev = g(&format!("{p}_tokens_stdev"))?.unwrap_or(0.0);
            l.min = g(&format!("{p}_tokens_min"))?.map(|x| x as u32);
            l.max = g(&format!("{p}_tokens_max"))?.map(|x| x as u32);
            Ok(Some(l))
        };
        load.prompt = fill(len("prompt")?, "prompt")?;
        load.output = fill(len("output")?, "output")?;
        load.prefix_tokens = g("prefix_tokens")?.unwrap_or(0.0) as u32;
        load.prefix_count = g("prefix_count")?.unwrap_or(1.0).max(1.0) as u32;
        load.turns = g("turns")?;
    }
    if let Some(b) = v.get("backend") {
        load.url = b.get("target").and_then(Value::as_str).map(str::to_string);
        load.model = b
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_string);
    }
    Ok(load)
}

fn aiperf_args(args: &[String], lost: &mut Vec<String>) -> R<PeerLoad> {
    let mut load = PeerLoad::default();
    let (mut rate, mut conc, mut pattern, mut smooth) = (None, None, None, None);
    let (mut isl, mut osl) = (Len::default(), Len::default());
    let (mut has_isl, mut has_osl) = (false, false);
    for (name, v) in flags(args) {
        let n = name.as_str();
        match n {
            "request-rate" => rate = Some(num(n, &first_of(n, &v, lost))?),
            "concurrency" => conc = Some(num(n, &first_of(n, &v, lost))?),
            "arrival-pattern" => pattern = Some(v),
            "arrival-smoothness" => smooth = Some(num(n, &v)?),
            "request-count" | "num-requests" => load.num_requests = Some(num(n, &v)? as u64),
            "benchmark-duration" => load.duration_s = Some(num(n, &v)?),
            "synthetic-input-tokens-mean" | "prompt-input-tokens-mean" | "isl" => {
                isl.mean = num(n, &v)?;
                has_isl = true;
            }
            "synthetic-input-tokens-stddev" | "prompt-input-tokens-stddev" | "isl-stddev" => isl.stdev = num(n, &v)?,
            "output-tokens-mean" | "prompt-output-tokens-mean" | "osl" => {
                osl.mean = num(n, &v)?;
                has_osl = true;
            }
            "output-tokens-stddev" | "prompt-output-tokens-stddev" | "osl-stddev" => osl.stdev = num(n, &v)?,
            "prompt-prefix-length" | "prefix-prompt-length" | "shared-system-prompt-length" => load.prefix_tokens = num(n, &v)? as u32,
            "prompt-prefix-pool-size" | "num-prefix-prompts" => load.prefix_count = (num(n, &v)? as u32).max(1),
            "conversation-turn-mean" => load.turns = Some(num(n, &v)?),
            "url" | "u" => load.url = Some(v),
            "model" | "model-names" | "m" => load.model = Some(v),
            "input-file" | "public-dataset" | "custom-dataset-type" => {
                lost.push(format!("--{n} {v}: a dataset or trace file is not carried (replay a Mooncake trace with loadshape's `trace` workload instead)"))
            }
            "streaming" | "endpoint-type" | "tokenizer" | "extra-inputs" | "artifact-dir" | "output-artifact-dir" | "ui-type"
            | "ui" | "prompt-corpus" | "random-seed" | "endpoint" | "api-key" | "header" | "H" => {}
            other => lost.push(format!("--{other} {v}: not carried")),
        }
    }
    load.arrival = arrival(rate, conc, pattern.as_deref(), smooth, lost)?;
    load.prompt = has_isl.then_some(isl);
    load.output = has_osl.then_some(osl);
    Ok(load)
}

fn arrival(
    rate: Option<f64>,
    conc: Option<f64>,
    pattern: Option<&str>,
    smooth: Option<f64>,
    lost: &mut Vec<String>,
) -> R<Arrival> {
    Ok(match (rate, conc) {
        (Some(r), c) => {
            if let Some(c) = c {
                lost.push(format!(
                    "a concurrency cap of {c} beside the request rate: not carried (open-loop arrivals)"
                ));
            }
            match pattern.unwrap_or("poisson") {
                "poisson" => Arrival::Poisson { rate: r },
                "constant" => Arrival::Constant { rate: r },
                "gamma" => {
                    let k = smooth.unwrap_or(1.0);
                    if k.is_nan() || k <= 0.0 {
                        return Err(bad("arrival-smoothness", format!("must be > 0 (got {k})")));
                    }
                    Arrival::Gamma {
                        rate: r,
                        cv: 1.0 / k.sqrt(),
                    }
                }
                other => {
                    lost.push(format!("arrival pattern {other}: read as Poisson"));
                    Arrival::Poisson { rate: r }
                }
            }
        }
        (None, Some(c)) => Arrival::Concurrent {
            users: (c.round() as u32).max(1),
        },
        (None, None) => Arrival::Concurrent { users: 1 },
    })
}

/// AIPerf's `input_config` (in `profile_export_aiperf.json`): `phases[]` (type concurrency / request_rate),
/// `datasets[].prompts.{isl, osl}`, `endpoint.urls`, `models.items`.
fn aiperf_value(v: &Value, lost: &mut Vec<String>) -> R<PeerLoad> {
    let v = v.get("input_config").unwrap_or(v);
    let mut load = PeerLoad::default();
    let phases = v
        .get("phases")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("phases", "missing (an AIPerf input_config has phases[])"))?;
    let phase = phases
        .iter()
        .find(|p| p.get("kind").and_then(Value::as_str) == Some("profiling"))
        .or(phases.first())
        .ok_or_else(|| bad("phases", "empty"))?;
    let g = |k: &str| phase.get(k).and_then(Value::as_f64);
    load.num_requests = g("requests").map(|n| n as u64);
    load.duration_s = g("duration");
    load.arrival = arrival(
        g("request_rate").or(g("rate")),
        g("concurrency"),
        phase.get("arrival_pattern").and_then(Value::as_str),
        g("arrival_smoothness"),
        lost,
    )?;
    if phases.len() > 1 {
        lost.push(format!(
            "{} phases: only the profiling phase is carried (warm-up is not)",
            phases.len()
        ));
    }
    if let Some(ds) = v.get("datasets").and_then(Value::as_array).and_then(|d| d.first()) {
        if ds.get("type").and_then(Value::as_str).is_some_and(|t| t != "synthetic") {
            lost.push("a dataset that is not synthetic: prompts are not carried".into());
        }
        let p = ds.get("prompts");
        let len = |k: &str| {
            p.and_then(|p| p.get(k)).map(|l| Len {
                mean: l.get("mean").and_then(Value::as_f64).unwrap_or(0.0),
                stdev: l.get("stddev").and_then(Value::as_f64).unwrap_or(0.0),
                min: None,
                max: None,
            })
        };
        load.prompt = len("isl");
        load.output = len("osl");
        if let Some(pre) = p.and_then(|p| p.get("prefix_prompt")).or(ds.get("prefix_prompt")) {
            load.prefix_tokens = pre.get("length").and_then(Value::as_u64).unwrap_or(0) as u32;
            load.prefix_count = pre.get("pool_size").and_then(Value::as_u64).unwrap_or(1).max(1) as u32;
        }
        if let Some(t) = ds
            .get("conversation")
            .and_then(|c| c.get("turn"))
            .and_then(|t| t.get("mean"))
            .and_then(Value::as_f64)
        {
            load.turns = Some(t);
        }
    }
    load.url = v
        .get("endpoint")
        .and_then(|e| e.get("urls"))
        .and_then(|u| u.get(0))
        .and_then(Value::as_str)
        .map(str::to_string);
    load.model = v
        .get("models")
        .and_then(|m| m.get("items"))
        .and_then(|i| i.get(0))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(load)
}

/// inference-perf's config: `load.{type, stages[]}`, `data.{type, input_distribution, output_distribution,
/// shared_prefix}`, `server.{base_url, model_name}`.
fn ip_value(v: &Value, lost: &mut Vec<String>) -> R<PeerLoad> {
    let mut load = PeerLoad::default();
    let l = v
        .get("load")
        .ok_or_else(|| bad("load", "missing (an inference-perf config has load.stages)"))?;
    let stages = l
        .get("stages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("load.stages", "missing"))?;
    let st = stages.first().ok_or_else(|| bad("load.stages", "empty"))?;
    if stages.len() > 1 {
        lost.push(format!(
            "load.stages: {} stages: only the first is carried",
            stages.len()
        ));
    }
    let g = |k: &str| st.get(k).and_then(Value::as_f64);
    let kind = l.get("type").and_then(Value::as_str).unwrap_or("constant");
    load.duration_s = g("duration");
    load.num_requests = g("num_requests").map(|n| n as u64);
    load.arrival = match kind {
        "concurrent" => Arrival::Concurrent {
            users: g("concurrency_level")
                .ok_or_else(|| bad("load.stages[0].concurrency_level", "missing for type concurrent"))?
                as u32,
        },
        "poisson" => Arrival::Poisson {
            rate: g("rate").ok_or_else(|| bad("load.stages[0].rate", "missing"))?,
        },
        "constant" => Arrival::Constant {
            rate: g("rate").ok_or_else(|| bad("load.stages[0].rate", "missing"))?,
        },
        other => {
            return Err(bad(
                "load.type",
                format!("{other:?} has no loadshape equivalent (known: constant, poisson, concurrent)"),
            ));
        }
    };
    let data = v.get("data");
    let dist = |k: &str| {
        data.and_then(|d| d.get(k)).filter(|x| x.is_object()).map(|x| Len {
            mean: x.get("mean").and_then(Value::as_f64).unwrap_or(0.0),
            stdev: x.get("std_dev").and_then(Value::as_f64).unwrap_or(0.0),
            min: x.get("min").and_then(Value::as_u64).map(|m| m as u32),
            max: x.get("max").and_then(Value::as_u64).map(|m| m as u32),
        })
    };
    let dtype = data
        .and_then(|d| d.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("random");
    match dtype {
        "random" | "synthetic" => {
            load.prompt = dist("input_distribution");
            load.output = dist("output_distribution");
        }
        "shared_prefix" => {
            let sp = data.and_then(|d| d.get("shared_prefix"));
            let n = |k: &str| sp.and_then(|s| s.get(k)).and_then(Value::as_f64);
            load.prefix_tokens = n("system_prompt_len").unwrap_or(0.0) as u32;
            load.prefix_count = n("num_groups").unwrap_or(1.0).max(1.0) as u32;
            load.prompt = n("question_len").map(|q| Len {
                mean: q,
                ..Len::default()
            });
            load.output = n("output_len").map(|o| Len {
                mean: o,
                ..Len::default()
            });
        }
        other => lost.push(format!("data type {other}: prompts from a dataset are not carried")),
    }
    if let Some(s) = v.get("server") {
        load.url = s.get("base_url").and_then(Value::as_str).map(str::to_string);
        load.model = s.get("model_name").and_then(Value::as_str).map(str::to_string);
    }
    Ok(load)
}

fn vllm_args(args: &[String], lost: &mut Vec<String>) -> R<PeerLoad> {
    let mut load = PeerLoad::default();
    let (mut rate, mut conc, mut burst) = (None, None, None);
    let (mut isl, mut osl, mut range, mut prefix) = (None, None, 0.0, 0.0);
    for (name, v) in flags(args) {
        let n = name.as_str();
        match n {
            "request-rate" => rate = (v != "inf").then(|| num(n, &v)).transpose()?,
            "max-concurrency" => conc = Some(num(n, &v)?),
            "burstiness" => burst = Some(num(n, &v)?),
            "num-prompts" => load.num_requests = Some(num(n, &v)? as u64),
            "random-input-len" | "input-len" => isl = Some(num(n, &v)?),
            "random-output-len" | "output-len" => osl = Some(num(n, &v)?),
            "random-range-ratio" => range = num(n, &v)?,
            "random-prefix-len" => prefix = num(n, &v)?,
            "base-url" => load.url = Some(v),
            "model" => load.model = Some(v),
            "dataset-name" if v != "random" => {
                lost.push(format!("--dataset-name {v}: prompts from a dataset are not carried"))
            }
            "backend" | "endpoint" | "dataset-name" | "save-result" | "save-detailed" | "result-dir"
            | "result-filename" | "tokenizer" | "ignore-eos" | "seed" | "host" | "port" | "percentile-metrics"
            | "metric-percentiles" => {}
            other => lost.push(format!("--{other} {v}: not carried")),
        }
    }
    let pattern = burst.map(|b| if (b - 1.0).abs() < 1e-9 { "poisson" } else { "gamma" });
    load.arrival = match (rate, conc) {
        (None, None) => {
            lost.push(
                "--request-rate inf (all at once) without --max-concurrency: read as closed-loop users = requests"
                    .into(),
            );
            Arrival::Concurrent {
                users: load.num_requests.unwrap_or(DEFAULT_REQUESTS).min(1_000_000) as u32,
            }
        }
        _ => arrival(rate, conc, pattern, burst, lost)?,
    };
    let spread = |m: f64| Len {
        mean: m,
        // Uniform in [m(1−r), m(1+r)]: its standard deviation.
        stdev: 2.0 * m * range / 12f64.sqrt(),
        min: (range > 0.0).then(|| (m * (1.0 - range)).round().max(1.0) as u32),
        max: (range > 0.0).then(|| (m * (1.0 + range)).round() as u32),
    };
    load.prompt = isl.map(spread);
    load.output = osl.map(spread);
    load.prefix_tokens = prefix as u32;
    Ok(load)
}

/// A `--save-result` file's settings: `request_rate`, `max_concurrency`, `burstiness`, `num_prompts`.
fn vllm_value(v: &Value, lost: &mut Vec<String>) -> R<PeerLoad> {
    let mut args = Vec::new();
    let s = |x: &Value| match x {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    for (key, flag) in [
        ("request_rate", "--request-rate"),
        ("max_concurrency", "--max-concurrency"),
        ("burstiness", "--burstiness"),
        ("num_prompts", "--num-prompts"),
    ] {
        if let Some(x) = v.get(key).and_then(s) {
            args.push(flag.to_string());
            args.push(x);
        }
    }
    if let Some(m) = v.get("model_id").and_then(Value::as_str) {
        args.extend(["--model".to_string(), m.to_string()]);
    }
    lost.push(
        "a vllm bench result file keeps no dataset lengths: prompt and output lengths left at the scenario defaults"
            .into(),
    );
    vllm_args(&args, lost)
}

/// Our length distribution nearest to a peer's mean/stdev/min/max.
fn dist_of(l: &Len, what: &str, lost: &mut Vec<String>) -> Value {
    let mean = l.mean.round().max(1.0);
    if l.stdev <= 0.0 || l.stdev < 0.5 {
        return json!({"dist": "fixed", "tokens": mean as u64});
    }
    // A lognormal with the same mean and standard deviation, clamped at the peer's max.
    let sigma = (1.0 + (l.stdev / mean).powi(2)).ln().sqrt().min(5.0);
    let median = (mean / (sigma * sigma / 2.0).exp()).round().max(1.0);
    lost.push(format!(
        "{what}: a normal distribution (mean {mean}, stdev {}) becomes a lognormal of the same mean and spread (median {median}, sigma {sigma:.3})",
        l.stdev
    ));
    if l.min.is_some_and(|m| m > 1) {
        lost.push(format!("{what}: the minimum {} is not carried", l.min.unwrap_or(0)));
    }
    let mut d = json!({"dist": "lognormal", "median": median as u64, "sigma": (sigma * 1000.0).round() / 1000.0});
    if let Some(m) = l.max.filter(|&m| f64::from(m) >= median) {
        d["max"] = json!(m);
    }
    d
}

/// The engine scenario nearest to a peer's load (the default engine profile; replace it with a calibrated one).
fn scenario_of(load: &PeerLoad, lost: &mut Vec<String>) -> Result<Value, String> {
    let n = match (load.num_requests, load.duration_s, load.arrival) {
        (Some(n), _, _) => n,
        (None, Some(d), Arrival::Poisson { rate } | Arrival::Constant { rate } | Arrival::Gamma { rate, .. }) => {
            ((d * rate).round() as u64).max(1)
        }
        (None, Some(d), Arrival::Concurrent { .. }) => {
            lost.push(format!(
                "a duration of {d} s with closed-loop users: loadshape's closed loop counts requests; {DEFAULT_REQUESTS} assumed"
            ));
            DEFAULT_REQUESTS
        }
        (None, None, _) => {
            lost.push(format!(
                "no request count or duration: {DEFAULT_REQUESTS} requests assumed"
            ));
            DEFAULT_REQUESTS
        }
    };
    let mut w = Map::new();
    match load.arrival {
        Arrival::Poisson { rate } => {
            w.insert("kind".into(), json!("poisson"));
            w.insert("rate_rps".into(), json!(rate));
        }
        Arrival::Constant { rate } => {
            lost.push("constant-rate arrivals: gamma arrivals with cv 0.01 (nearly even gaps)".into());
            w.insert("kind".into(), json!("gamma"));
            w.insert("rate_rps".into(), json!(rate));
            w.insert("cv".into(), json!(0.01));
        }
        Arrival::Gamma { rate, cv } => {
            w.insert("kind".into(), json!("gamma"));
            w.insert("rate_rps".into(), json!(rate));
            w.insert("cv".into(), json!(cv.clamp(0.01, 100.0)));
        }
        Arrival::Concurrent { users } => {
            w.insert("kind".into(), json!("closed_loop"));
            w.insert("users".into(), json!(users.max(1)));
        }
    }
    w.insert("num_requests".into(), json!(n));
    if let Some(p) = &load.prompt {
        // Our prompt length counts the unique part after the shared prefix.
        let mut p = *p;
        p.mean = (p.mean - f64::from(load.prefix_tokens)).max(1.0);
        w.insert("prompt".into(), dist_of(&p, "prompt", lost));
    } else {
        lost.push("no prompt length: the scenario default (256 tokens) is used".into());
    }
    if let Some(o) = &load.output {
        w.insert("output".into(), dist_of(o, "output", lost));
    } else {
        lost.push("no output length: the scenario default (256 tokens) is used".into());
    }
    if load.prefix_tokens > 0 {
        w.insert("shared_prefix_tokens".into(), json!(load.prefix_tokens));
        if load.prefix_count > 1 {
            lost.push(format!(
                "{} distinct shared prefixes: loadshape's open-loop workloads share one; one prefix of {} tokens is carried",
                load.prefix_count, load.prefix_tokens
            ));
        }
    }
    if let Some(t) = load.turns.filter(|&t| t > 1.0) {
        lost.push(format!(
            "multi-turn conversations ({t} turns): each turn is carried as an independent request (loadshape's `sessions` workload models conversations)"
        ));
    }
    if let Some(u) = &load.url {
        lost.push(format!(
            "the target {u}{} is not part of a scenario (give it to `replay --url`)",
            load.model.as_ref().map(|m| format!(" (model {m})")).unwrap_or_default()
        ));
    }
    let profile = crate::engine::presets::llama3_8b_h100();
    lost.push(format!(
        "the engine profile is not in the peer's config: the scenario uses the preset {} (replace it with `calibrate`'s profile.json)",
        profile.name
    ));
    let value = json!({
        "model": "engine",
        "workload": Value::Object(w),
        "profile": serde_json::to_value(&profile).map_err(|e| e.to_string())?,
        "seed": 0,
    });
    let scenario = Scenario::from_value(value).map_err(|e| format!("the nearest scenario does not validate: {e}"))?;
    Ok(scenario.to_value())
}

/// The peer's load for a scenario: what an engine scenario's workload becomes in the peers' terms.
pub fn load_of(scenario: &Scenario, lost: &mut Vec<String>) -> Result<PeerLoad, String> {
    let Scenario::Engine(e) = scenario else {
        return Err(
            "a seed-model scenario has no request workload to write; use an engine scenario (\"model\": \"engine\")"
                .into(),
        );
    };
    let len = |d: &LengthDist| match *d {
        LengthDist::Fixed { tokens } => Len {
            mean: f64::from(tokens),
            ..Len::default()
        },
        LengthDist::Uniform { min, max } => Len {
            mean: (f64::from(min) + f64::from(max)) / 2.0,
            stdev: f64::from(max - min) / 12f64.sqrt(),
            min: Some(min),
            max: Some(max),
        },
        LengthDist::Lognormal { sigma, .. } => {
            let mean = d.mean();
            Len {
                mean,
                stdev: mean * ((sigma * sigma).exp() - 1.0).sqrt(),
                min: Some(1),
                max: Some(d.max_value()),
            }
        }
    };
    let mut load = PeerLoad::default();
    let (prompt, output, prefix) = match &e.workload {
        Workload::Poisson(w) => {
            load.arrival = Arrival::Poisson { rate: w.rate_rps };
            load.num_requests = Some(w.num_requests);
            (&w.prompt, &w.output, w.shared_prefix_tokens)
        }
        Workload::Gamma(w) => {
            load.arrival = Arrival::Gamma {
                rate: w.rate_rps,
                cv: w.cv,
            };
            load.num_requests = Some(w.num_requests);
            (&w.prompt, &w.output, w.shared_prefix_tokens)
        }
        Workload::ClosedLoop(w) => {
            load.arrival = Arrival::Concurrent { users: w.users };
            load.num_requests = Some(w.num_requests);
            if w.think_s > 0.0 {
                lost.push(format!(
                    "think_s {} (a pause between a user's requests): the peers' concurrent modes send the next at once",
                    w.think_s
                ));
            }
            (&w.prompt, &w.output, w.shared_prefix_tokens)
        }
        Workload::Sessions(s) => {
            lost.push(format!(
                "agent sessions ({} sessions of {} steps, growing context from {} tokens, {} s think time): written as {} closed-loop users \
                 with the sessions' mean prompt and reply; the growing context, prefix reuse and think times are lost (for AIPerf, \
                 `loadshape report --export mooncake` of a run replays it as a trace)",
                s.sessions, s.steps, s.base_tokens, s.think_s, s.sessions
            ));
            load.arrival = Arrival::Concurrent { users: s.sessions };
            load.num_requests = Some(u64::from(s.sessions) * u64::from(s.steps));
            load.prompt = Some(Len {
                mean: s.base_tokens as f64 + f64::from(s.steps) * f64::from(s.gen_tokens + s.tool_tokens) / 2.0,
                ..Len::default()
            });
            load.output = Some(Len {
                mean: f64::from(s.gen_tokens),
                ..Len::default()
            });
            load.turns = Some(f64::from(s.steps));
            return Ok(load);
        }
        Workload::Bursty(_) | Workload::Trace(_) => {
            return Err(format!(
                "a {} workload has no equivalent in the peers' synthetic loads; export a run of it as a trace with `loadshape report --export mooncake` (AIPerf and GuideLLM replay Mooncake traces)",
                e.workload.kind()
            ));
        }
    };
    load.prefix_tokens = prefix;
    let mut p = len(prompt);
    p.mean += f64::from(prefix);
    p.min = p.min.map(|m| m + prefix);
    p.max = p.max.map(|m| m + prefix);
    load.prompt = Some(p);
    load.output = Some(len(output));
    if matches!(prompt, LengthDist::Lognormal { .. }) || matches!(output, LengthDist::Lognormal { .. }) {
        lost.push(
            "lognormal lengths: written as the peers' normal distribution of the same mean and standard deviation"
                .into(),
        );
    }
    if matches!(prompt, LengthDist::Uniform { .. }) || matches!(output, LengthDist::Uniform { .. }) {
        lost.push("uniform lengths: written as a normal distribution of the same mean and standard deviation (clamped to the range where the tool has min/max)".into());
    }
    lost.push(format!(
        "the engine profile ({}) and SLOs describe the server, not the load: not written",
        e.profile.name
    ));
    Ok(load)
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Write `scenario` for `tool`, aimed at `url` (the OpenAI base, e.g. `http://127.0.0.1:8000`) and `model`.
pub fn export(tool: Tool, scenario: &Scenario, url: &str, model: &str) -> Result<ConfigExport, String> {
    let mut lost = Vec::new();
    let load = load_of(scenario, &mut lost)?;
    let p = load.prompt.unwrap_or_default();
    let o = load.output.unwrap_or_default();
    let n = load.num_requests.unwrap_or(DEFAULT_REQUESTS);
    let url = url.trim_end_matches('/').trim_end_matches("/v1");
    let text = match tool {
        Tool::Guidellm => {
            let profile = match load.arrival {
                Arrival::Poisson { rate } => format!("kind=poisson,rate={}", fmt_num(rate)),
                Arrival::Constant { rate } => format!("kind=constant,rate={}", fmt_num(rate)),
                Arrival::Gamma { rate, cv } => {
                    lost.push(format!(
                        "gamma arrivals (cv {cv}): GuideLLM has none; written as Poisson at the same rate"
                    ));
                    format!("kind=poisson,rate={}", fmt_num(rate))
                }
                Arrival::Concurrent { users } => format!("kind=concurrent,streams={users}"),
            };
            let mut data = format!(
                "kind=synthetic_text,prompt_tokens={},output_tokens={}",
                p.mean.round(),
                o.mean.round()
            );
            for (name, l) in [("prompt", &p), ("output", &o)] {
                if l.stdev > 0.0 {
                    data.push_str(&format!(",{name}_tokens_stdev={}", l.stdev.round()));
                }
                if let Some(m) = l.min {
                    data.push_str(&format!(",{name}_tokens_min={m}"));
                }
                if let Some(m) = l.max {
                    data.push_str(&format!(",{name}_tokens_max={m}"));
                }
            }
            if load.prefix_tokens > 0 {
                data.push_str(&format!(",prefix_count=1,prefix_tokens={}", load.prefix_tokens));
            }
            if let Some(t) = load.turns {
                data.push_str(&format!(",turns={}", t.round()));
            }
            format!(
                "guidellm run \\\n  --backend kind=openai_http,target={url},model={model},request_format=/v1/completions \\\n  --profile {profile} \\\n  --constraint kind=max_requests,count={n} \\\n  --data {data} \\\n  --output kind=json,path=benchmarks.json\n"
            )
        }
        Tool::Aiperf => {
            let arrival = match load.arrival {
                Arrival::Poisson { rate } => format!("--request-rate {} --arrival-pattern poisson", fmt_num(rate)),
                Arrival::Constant { rate } => format!("--request-rate {} --arrival-pattern constant", fmt_num(rate)),
                Arrival::Gamma { rate, cv } => format!(
                    "--request-rate {} --arrival-pattern gamma --arrival-smoothness {}",
                    fmt_num(rate),
                    fmt_num((1.0 / (cv * cv) * 1e4).round() / 1e4)
                ),
                Arrival::Concurrent { users } => format!("--concurrency {users}"),
            };
            for (name, l) in [("prompt", &p), ("output", &o)] {
                if l.min.is_some() || l.max.is_some() {
                    lost.push(format!(
                        "{name} length bounds: AIPerf draws a normal distribution by mean and stddev only"
                    ));
                }
            }
            let mut extra = String::new();
            if load.prefix_tokens > 0 {
                extra.push_str(&format!(" \\\n  --shared-system-prompt-length {}", load.prefix_tokens));
            }
            if let Some(t) = load.turns {
                extra.push_str(&format!(
                    " \\\n  --conversation-num {} --conversation-turn-mean {}",
                    (n as f64 / t).ceil(),
                    t.round()
                ));
            }
            format!(
                "aiperf profile \\\n  --model {model} --url {url} --endpoint-type completions --streaming \\\n  {arrival} --request-count {n} \\\n  --synthetic-input-tokens-mean {} --synthetic-input-tokens-stddev {} \\\n  --output-tokens-mean {} --output-tokens-stddev {} \\\n  --extra-inputs ignore_eos:true --prompt-corpus random{extra}\n",
                p.mean.round(),
                p.stdev.round(),
                o.mean.round(),
                o.stdev.round()
            )
        }
        Tool::InferencePerf => {
            let (kind, stage) = match load.arrival {
                Arrival::Poisson { rate } => (
                    "poisson",
                    format!(
                        "{{rate: {}, duration: {}}}",
                        fmt_num(rate),
                        fmt_num((n as f64 / rate).ceil())
                    ),
                ),
                Arrival::Constant { rate } => (
                    "constant",
                    format!(
                        "{{rate: {}, duration: {}}}",
                        fmt_num(rate),
                        fmt_num((n as f64 / rate).ceil())
                    ),
                ),
                Arrival::Gamma { rate, cv } => {
                    lost.push(format!(
                        "gamma arrivals (cv {cv}): inference-perf has none; written as Poisson at the same rate"
                    ));
                    (
                        "poisson",
                        format!(
                            "{{rate: {}, duration: {}}}",
                            fmt_num(rate),
                            fmt_num((n as f64 / rate).ceil())
                        ),
                    )
                }
                Arrival::Concurrent { users } => (
                    "concurrent",
                    format!("{{num_requests: {n}, concurrency_level: {users}}}"),
                ),
            };
            if !matches!(load.arrival, Arrival::Concurrent { .. }) {
                lost.push(format!(
                    "{n} requests: inference-perf's rate stages run for a duration, written as requests / rate"
                ));
            }
            let d = |l: &Len| {
                format!(
                    "{{min: {}, max: {}, mean: {}, std_dev: {}, total_count: {n}}}",
                    l.min.unwrap_or(if l.stdev > 0.0 { 1 } else { l.mean.round() as u32 }),
                    l.max.unwrap_or(if l.stdev > 0.0 {
                        (l.mean + 4.0 * l.stdev).round() as u32
                    } else {
                        l.mean.round() as u32
                    }),
                    l.mean.round(),
                    l.stdev.round()
                )
            };
            if load.prefix_tokens > 0 {
                lost.push("a shared prefix: inference-perf's random data has none (its shared_prefix data type has fixed lengths)".into());
            }
            if load.turns.is_some() {
                lost.push("multi-turn sessions: written as independent requests".into());
            }
            format!(
                "# inference-perf config written by loadshape export\napi: {{type: completion, streaming: true}}\ndata:\n  type: random\n  input_distribution: {}\n  output_distribution: {}\nload:\n  type: {kind}\n  stages: [{stage}]\nserver: {{type: vllm, model_name: {model}, base_url: \"{url}\", ignore_eos: true}}\nreport:\n  request_lifecycle: {{summary: true, per_stage: true, per_request: true}}\n",
                d(&p),
                d(&o)
            )
        }
        Tool::VllmBench => {
            let (rate, extra) = match load.arrival {
                Arrival::Poisson { rate } => (fmt_num(rate), String::new()),
                Arrival::Constant { rate } => {
                    lost.push(
                        "constant-rate arrivals: vllm bench's nearest is a very smooth gamma (--burstiness 10000)"
                            .into(),
                    );
                    (fmt_num(rate), " --burstiness 10000".into())
                }
                Arrival::Gamma { rate, cv } => (
                    fmt_num(rate),
                    format!(" --burstiness {}", fmt_num((1.0 / (cv * cv) * 1e4).round() / 1e4)),
                ),
                Arrival::Concurrent { users } => ("inf".into(), format!(" --max-concurrency {users}")),
            };
            let range = if p.mean > 0.0 && p.stdev > 0.0 {
                (p.stdev * 12f64.sqrt() / 2.0 / p.mean).min(1.0)
            } else {
                0.0
            };
            if p.stdev > 0.0 || o.stdev > 0.0 {
                lost.push("length spread: vllm bench's random dataset draws uniformly within ±range-ratio of the mean, one ratio for prompt and output".into());
            }
            format!(
                "vllm bench serve --backend vllm --base-url {url} --model {model} --dataset-name random \\\n  --random-input-len {} --random-output-len {} --random-range-ratio {:.3} --random-prefix-len {} \\\n  --num-prompts {n} --request-rate {rate}{extra} --ignore-eos --save-result --save-detailed\n",
                p.mean.round() - f64::from(load.prefix_tokens),
                o.mean.round(),
                range,
                load.prefix_tokens
            )
        }
    };
    Ok(ConfigExport { text, lost })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_as_a_shell_splits_them() {
        let w = split_command_line(
            "guidellm run \\\n --data 'kind=synthetic_text,prompt_tokens=5' --x \"a b\\\"c\" # comment\n--y z",
        )
        .unwrap();
        assert_eq!(
            w,
            [
                "guidellm",
                "run",
                "--data",
                "kind=synthetic_text,prompt_tokens=5",
                "--x",
                "a b\"c",
                "--y",
                "z"
            ]
        );
        assert!(split_command_line("a 'b").unwrap_err().contains("single quote"));
    }

    #[test]
    fn a_guidellm_command_line_becomes_a_closed_loop_scenario() {
        let args = split_command_line(
            "guidellm run --backend kind=openai_http,target=http://h:8000 --profile kind=concurrent,streams=4,8 \
             --constraint kind=max_requests,count=200 --data kind=synthetic_text,prompt_tokens=512,output_tokens=64",
        )
        .unwrap();
        let c = import_config(Tool::Guidellm, "cmd", &ConfigInput::Args(args)).unwrap();
        assert_eq!(c.scenario["workload"]["kind"], "closed_loop");
        assert_eq!(c.scenario["workload"]["users"], 4);
        assert_eq!(c.scenario["workload"]["num_requests"], 200);
        assert_eq!(c.scenario["workload"]["prompt"]["tokens"], 512);
        assert!(c.lost.iter().any(|l| l.contains("sweep")), "{:?}", c.lost);
    }

    #[test]
    fn an_aiperf_command_line_with_a_rate_becomes_poisson_and_a_bad_number_names_the_flag() {
        let args = split_command_line(
            "aiperf profile --request-rate 5 --request-count 100 --isl 300 --isl-stddev 100 --osl 50",
        )
        .unwrap();
        let c = import_config(Tool::Aiperf, "cmd", &ConfigInput::Args(args)).unwrap();
        assert_eq!(c.scenario["workload"]["kind"], "poisson");
        assert_eq!(c.scenario["workload"]["prompt"]["dist"], "lognormal");
        let e = import_config(
            Tool::Aiperf,
            "cmd",
            &ConfigInput::Args(vec!["--request-rate".into(), "fast".into()]),
        )
        .unwrap_err();
        assert_eq!(e.field, "request-rate");
    }

    #[test]
    fn the_older_guidellm_flags_and_an_inference_perf_config_are_read() {
        let args = split_command_line(
            "guidellm benchmark --target http://h:8000 --rate-type poisson --rate 5 --max-requests 100 \
             --data \"prompt_tokens=256,output_tokens=128\"",
        )
        .unwrap();
        let c = import_config(Tool::Guidellm, "cmd", &ConfigInput::Args(args)).unwrap();
        assert_eq!(c.scenario["workload"]["kind"], "poisson");
        assert_eq!(c.scenario["workload"]["rate_rps"], 5.0);
        assert_eq!(c.scenario["workload"]["num_requests"], 100);
        assert_eq!(c.scenario["workload"]["output"]["tokens"], 128);
        let ip = json!({"load": {"type": "constant", "stages": [{"rate": 4, "duration": 30}, {"rate": 8, "duration": 30}]},
                        "data": {"type": "shared_prefix", "shared_prefix": {"num_groups": 3, "system_prompt_len": 400,
                                 "question_len": 100, "output_len": 50}},
                        "server": {"base_url": "http://h:8000", "model_name": "m"}});
        let c = import_config(Tool::InferencePerf, "c.yaml", &ConfigInput::Value(ip)).unwrap();
        let w = &c.scenario["workload"];
        assert_eq!(
            (
                w["kind"].as_str(),
                w["num_requests"].as_u64(),
                w["shared_prefix_tokens"].as_u64()
            ),
            (Some("gamma"), Some(120), Some(400))
        );
        for lost in ["2 stages", "3 distinct shared prefixes", "constant-rate"] {
            assert!(c.lost.iter().any(|l| l.contains(lost)), "{lost}: {:?}", c.lost);
        }
        let e = import_config(
            Tool::InferencePerf,
            "c.yaml",
            &ConfigInput::Value(json!({"load": {"type": "trace", "stages": [{}]}})),
        )
        .unwrap_err();
        assert_eq!(e.field, "load.type");
    }

    #[test]
    fn exports_read_back_to_the_same_load() {
        let s = Scenario::from_value(json!({
            "model": "engine",
            "workload": {"kind": "poisson", "num_requests": 300, "rate_rps": 4.0,
                         "prompt": {"dist": "fixed", "tokens": 700}, "output": {"dist": "fixed", "tokens": 90}},
            "profile": serde_json::to_value(crate::engine::presets::llama3_8b_h100()).unwrap(),
        }))
        .unwrap();
        for tool in [Tool::Guidellm, Tool::Aiperf, Tool::VllmBench] {
            let out = export(tool, &s, "http://127.0.0.1:8000/v1", "m").unwrap();
            let back = import_config(tool, "x", &ConfigInput::Args(split_command_line(&out.text).unwrap())).unwrap();
            assert_eq!(back.scenario["workload"]["kind"], "poisson", "{tool}: {}", out.text);
            assert_eq!(back.scenario["workload"]["rate_rps"], 4.0, "{tool}");
            assert_eq!(back.scenario["workload"]["num_requests"], 300, "{tool}");
            assert_eq!(
                back.scenario["workload"]["prompt"]["tokens"], 700,
                "{tool}: {}",
                out.text
            );
            assert_eq!(back.scenario["workload"]["output"]["tokens"], 90, "{tool}");
        }
    }
}
