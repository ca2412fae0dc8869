//! Fuzzing the inputs users hand to loadshape: scenario JSON ([`Scenario::from_json`]), share links
//! ([`link::decode`]), ladder strings (`"base:steps,..."`) and request logs ([`parse_log_bytes`] + [`fit_targets`]).
//!
//! Inputs are mutated valid ones — every example scenario in `examples/` and every ```` ```json scenario ```` block
//! of docs/simulator.md, their links, the example logs — plus random bytes. Mutations: flipped, deleted and
//! inserted bytes, truncation, a byte order mark, a duplicated key, a dropped key, and a value replaced by a huge or
//! NaN-ish number, a negative, a wrong type, a 100,000-character string or 200 levels of nesting.
//!
//! Each property checks, for every input:
//! - **no panic** (proptest fails the case);
//! - **bounded allocation**: the peak of live heap bytes while the input is handled, measured by the counting
//!   global allocator below (`peakmem-alloc`), stays under [`alloc_bound`] (64 × the input, or the decompressed link, + 1 MiB);
//! - **every error names what is wrong**: non-empty, at most [`MAX_ERROR_CHARS`] characters, and naming a field
//!   path, a line/column, a rung or a line of the log.
//!
//! Budget: [`CASES`] cases per property, 10 properties — about 10 s in a debug build (docs/simulator.md,
//! "Fuzzing"). Raise it locally with `PROPTEST_CASES=20000 cargo test -p loadshape-shared --test fuzz_inputs`.

use std::alloc::System;
use std::sync::Mutex;

use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};

use proptest::prelude::*;
use serde_json::Value;
use shared::error::MAX_MESSAGE_CHARS;
use shared::ladder::Ladder;
use shared::ladder::fit::{fit_targets, parse_log_bytes};
use shared::link;
use shared::record::RequestRecord;
use shared::scenario::{Scenario, ScenarioError};

// ---- the counting allocator ----

/// The system allocator, counting live heap bytes and their peak since the last reset (for the whole test binary:
/// [`serial`] keeps the measured tests apart).
#[global_allocator]
static GLOBAL: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One measured test at a time: the others of this binary would otherwise allocate into the same counters.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `f()` and the peak of heap bytes it held above what was live when it started.
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    GLOBAL.reset_peak_memory();
    let out = f();
    (out, GLOBAL.get_peak_memory())
}

/// The allocation bound every input must respect: 64 bytes per byte of input (a JSON value tree of small numbers
/// costs ≈ 16–32 per byte, doubled while a vector grows) plus 1 MiB.
fn alloc_bound(input_bytes: usize) -> usize {
    64 * input_bytes + (1 << 20)
}

/// Longest error message accepted: each part of a scenario error is cut to `MAX_MESSAGE_CHARS`, a message has a
/// path and a message, plus the fixed wording around them.
const MAX_ERROR_CHARS: usize = 3 * MAX_MESSAGE_CHARS;

/// Cases per property (10 properties; see the module docs for the budget).
const CASES: u32 = 256;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(CASES),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---- the corpus ----

const EXAMPLES: [&str; 5] = [
    include_str!("../../examples/seed-baseline.json"),
    include_str!("../../examples/seed-100k.json"),
    include_str!("../../examples/engine-10k.json"),
    include_str!("../../examples/engine-sessions-10k.json"),
    include_str!("../../examples/engine-sessions-1m.json"),
];
const DOC: &str = include_str!("../../docs/simulator.md");
const LOG_JSONL: &str = include_str!("../../examples/prod-log.jsonl");
const LOG_CSV: &str = include_str!("../../examples/prod-log.csv");

/// The example scenarios and the docs' ```` ```json scenario ```` blocks.
fn corpus() -> Vec<String> {
    let mut out: Vec<String> = EXAMPLES.iter().map(|s| s.to_string()).collect();
    let mut block: Option<String> = None;
    for line in DOC.lines() {
        match &mut block {
            None if line.trim_end() == "```json scenario" => block = Some(String::new()),
            None => {}
            Some(b) if line.trim_end() == "```" => {
                out.push(std::mem::take(b));
                block = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
        }
    }
    out
}

fn valid_corpus() -> &'static [String] {
    static CORPUS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let all = corpus();
        assert!(all.len() >= 8, "the corpus lost its doc blocks: {}", all.len());
        for (i, s) in all.iter().enumerate() {
            Scenario::from_json(s).unwrap_or_else(|e| panic!("corpus entry {i} is invalid: {e}"));
        }
        all
    })
}

// ---- mutations ----

/// Replacement values, as raw JSON text (several are not representable as a `serde_json::Value`).
const ODD_VALUES: [&str; 14] = [
    "1e300",
    "1e999",
    "-1",
    "0",
    "-0.0",
    "18446744073709551616",
    "NaN",
    "Infinity",
    "\"nan\"",
    "null",
    "true",
    "{}",
    "[]",
    "\"\"",
];

/// A byte-level mutation of `text`: kind, position, and a parameter.
fn mutate_bytes(text: &[u8], muts: &[(u8, usize, u8)]) -> Vec<u8> {
    let mut b = text.to_vec();
    for &(kind, pos, x) in muts {
        let at = if b.is_empty() { 0 } else { pos % (b.len() + 1) };
        match kind % 6 {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= x | 1;
            }
            1 => b.truncate(at),
            2 => {
                let end = (at + usize::from(x % 16) + 1).min(b.len());
                b.drain(at.min(end)..end);
            }
            3 => b.insert(at, x),
            4 => b.splice(at..at, *b"\xef\xbb\xbf").for_each(drop),
            _ => {
                let snippet: &[u8] = match x % 5 {
                    0 => b"\"",
                    1 => b"{",
                    2 => b"]",
                    3 => b",",
                    _ => b"\\u",
                };
                b.splice(at..at, snippet.iter().copied()).for_each(drop);
            }
        }
    }
    b
}

/// Every object and leaf of `v` as a JSON pointer, in document order.
fn pointers(v: &Value, at: String, out: &mut Vec<(String, bool)>) {
    match v {
        Value::Object(m) => {
            out.push((at.clone(), true));
            for (k, c) in m {
                pointers(c, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                pointers(c, format!("{at}/{i}"), out);
            }
        }
        _ => out.push((at, false)),
    }
}

const PLACEHOLDER: &str = "\u{1}fuzz-placeholder\u{1}";

/// A structural mutation of a valid scenario: the text and whether it must be refused for a duplicate key.
fn mutate_value(text: &str, kind: u8, pick: usize, odd: usize) -> (String, bool) {
    let mut v: Value = serde_json::from_str(text).expect("corpus is JSON");
    let mut ptrs = Vec::new();
    pointers(&v, String::new(), &mut ptrs);
    let objects: Vec<&String> = ptrs.iter().filter(|p| p.1).map(|p| &p.0).collect();
    let leaves: Vec<&String> = ptrs.iter().filter(|p| !p.1).map(|p| &p.0).collect();
    match kind % 5 {
        // Duplicate a key of a random object: the text must be refused, naming the key.
        0 => {
            let obj = objects[pick % objects.len()].clone();
            let Some(Value::Object(m)) = v.pointer(&obj) else {
                unreachable!()
            };
            let Some((key, val)) = m.iter().next().map(|(k, val)| (k.clone(), val.clone())) else {
                return (text.to_string(), false);
            };
            let Some(Value::Object(m)) = v.pointer_mut(&obj) else {
                unreachable!()
            };
            m.insert(key.clone(), Value::String(PLACEHOLDER.into()));
            let dup = format!(
                "{}, {}: {}",
                serde_json::to_string(&val).unwrap(),
                serde_json::to_string(&key).unwrap(),
                val
            );
            let s = v
                .to_string()
                .replacen(&Value::String(PLACEHOLDER.into()).to_string(), &dup, 1);
            (s, true)
        }
        // Drop a key.
        1 => {
            let leaf = leaves[pick % leaves.len()].clone();
            let (parent, key) = leaf.rsplit_once('/').expect("a leaf has a parent");
            if let Some(Value::Object(m)) = v.pointer_mut(parent) {
                m.remove(&key.replace("~1", "/").replace("~0", "~"));
            }
            (v.to_string(), false)
        }
        // Replace a leaf by an odd value, a long string or deep nesting.
        k => {
            let leaf = leaves[pick % leaves.len()].clone();
            *v.pointer_mut(&leaf).expect("leaf") = Value::String(PLACEHOLDER.into());
            let raw = match k {
                2 => ODD_VALUES[odd % ODD_VALUES.len()].to_string(),
                3 => format!("\"{}\"", "x".repeat(100_000)),
                _ => format!("{}1{}", "[".repeat(200), "]".repeat(200)),
            };
            (
                v.to_string()
                    .replacen(&Value::String(PLACEHOLDER.into()).to_string(), &raw, 1),
                false,
            )
        }
    }
}

// ---- what an error must say ----

/// The message names a field path, a position, or the document as a whole.
fn scenario_error_names_what(e: &ScenarioError) -> bool {
    match e {
        ScenarioError::Field { path, message } => !path.is_empty() && !message.is_empty(),
        ScenarioError::Parse(m) => {
            // A position, a named field (`workload.num_requests: …`, "missing field `model`"), or the whole text.
            let path = m
                .split_once(": ")
                .is_some_and(|(p, _)| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || "._[]".contains(c)));
            path || m.contains(" at line ") || m.contains('`') || m.contains("a scenario is a JSON object")
        }
        ScenarioError::UnsupportedVersion { found } => !found.is_empty(),
    }
}

fn check_scenario(input: &str) -> Result<Result<Scenario, ScenarioError>, TestCaseError> {
    let (result, peak) = measure(|| Scenario::from_json(input));
    prop_assert!(
        peak <= alloc_bound(input.len()),
        "{peak} bytes held for a {}-byte input (bound {})",
        input.len(),
        alloc_bound(input.len())
    );
    if let Err(e) = &result {
        let msg = e.to_string();
        prop_assert!(!msg.is_empty());
        prop_assert!(
            msg.chars().count() <= MAX_ERROR_CHARS,
            "{} chars: {}",
            msg.chars().count(),
            &msg[..200]
        );
        prop_assert!(scenario_error_names_what(e), "names nothing: {msg}");
    }
    Ok(result)
}

/// Runs `property` over [`CASES`] inputs of `strategy` (generation included) while the caller holds [`serial`].
fn run<S: Strategy>(strategy: S, property: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let mut runner = proptest::test_runner::TestRunner::new(config());
    if let Err(e) = runner.run(&strategy, property) {
        panic!("{e}");
    }
}

#[test]
fn scenario_text_mutations() {
    let _g = serial();
    run(
        (
            0usize..64,
            prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
        ),
        |(seed, muts)| {
            let corpus = valid_corpus();
            let bytes = mutate_bytes(corpus[seed % corpus.len()].as_bytes(), &muts);
            let _ = check_scenario(&String::from_utf8_lossy(&bytes))?;
            Ok(())
        },
    );
}

#[test]
fn scenario_structural_mutations() {
    let _g = serial();
    run(
        (0usize..64, any::<u8>(), any::<usize>(), any::<usize>()),
        |(seed, kind, pick, odd)| {
            let corpus = valid_corpus();
            let (text, duplicate) = mutate_value(&corpus[seed % corpus.len()], kind, pick, odd);
            let result = check_scenario(&text)?;
            if duplicate {
                let msg = result.expect_err("a duplicate key must be refused").to_string();
                prop_assert!(msg.contains("duplicate key `"), "{msg}");
            }
            Ok(())
        },
    );
}

#[test]
fn scenario_random_bytes() {
    let _g = serial();
    run(prop::collection::vec(any::<u8>(), 0..512), |bytes| {
        let _ = check_scenario(&String::from_utf8_lossy(&bytes))?;
        Ok(())
    });
}

#[test]
fn scenario_with_a_bom_reads_as_without() {
    let _g = serial();
    run(0usize..64, |seed| {
        let corpus = valid_corpus();
        let text = &corpus[seed % corpus.len()];
        prop_assert_eq!(
            Scenario::from_json(&format!("\u{feff}{text}")),
            Scenario::from_json(text)
        );
        Ok(())
    });
}

#[test]
fn link_mutations() {
    let _g = serial();
    run(
        (
            0usize..64,
            prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..4),
            any::<bool>(),
        ),
        |(seed, muts, doubled)| {
            let corpus = valid_corpus();
            let mut payload = link::encode(&Scenario::from_json(&corpus[seed % corpus.len()]).expect("valid"));
            if doubled {
                let again = payload[2..].to_string();
                payload.push_str(&again);
            }
            let bytes = mutate_bytes(payload.as_bytes(), &muts);
            let text = String::from_utf8_lossy(&bytes);
            let decoded_len = link::find_payload(&text)
                .and_then(|p| link::unpack(p).ok())
                .map_or(0, |j| j.len());
            let (result, peak) = measure(|| link::decode(&text));
            prop_assert!(
                peak <= alloc_bound(text.len() + decoded_len),
                "{peak} bytes for a {}-byte link",
                text.len()
            );
            match result {
                Ok(_) => prop_assert!(
                    !doubled || muts.iter().any(|m| m.0 % 6 == 1 || m.0 % 6 == 2),
                    "a doubled payload decoded"
                ),
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(!msg.is_empty() && msg.chars().count() <= MAX_ERROR_CHARS, "{msg}");
                    prop_assert!(msg.contains("link"), "{msg}");
                    if let link::LinkError::Scenario(inner) = &e {
                        prop_assert!(scenario_error_names_what(inner), "{msg}");
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn link_random_text() {
    let _g = serial();
    run(
        proptest::string::string_regex("(#s=)?[0-9]?\\.?[A-Za-z0-9_=.-]{0,300}").expect("regex"),
        |text| {
            let (result, peak) = measure(|| link::decode(&text));
            prop_assert!(peak <= alloc_bound(text.len() + link::MAX_JSON_BYTES));
            if let Err(e) = result {
                prop_assert!(!e.to_string().is_empty() && e.to_string().chars().count() <= MAX_ERROR_CHARS);
            }
            Ok(())
        },
    );
}

#[test]
fn ladder_strings() {
    let _g = serial();
    run(
        (
            prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..4),
            any::<bool>(),
        ),
        |(muts, long)| {
            let mut text = shared::ladder::LADDER_PROD.to_string();
            if long {
                text = format!("{text},{}:5", "9".repeat(100_000));
            }
            let bytes = mutate_bytes(text.as_bytes(), &muts);
            let text = String::from_utf8_lossy(&bytes);
            let (result, peak) = measure(|| text.parse::<Ladder>());
            prop_assert!(peak <= alloc_bound(text.len()));
            if let Err(e) = result {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("ladder"), "{msg}");
                prop_assert!(msg.chars().count() <= MAX_ERROR_CHARS, "{} chars", msg.chars().count());
            }
            Ok(())
        },
    );
}

#[test]
fn request_logs() {
    let _g = serial();
    run(
        (
            any::<bool>(),
            prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..6),
            prop::collection::vec(any::<u8>(), 0..256),
        ),
        |(csv, muts, random)| {
            let base = if csv { LOG_CSV } else { LOG_JSONL };
            let mut bytes = mutate_bytes(base.as_bytes(), &muts);
            if muts.len() == 5 {
                bytes = random;
            }
            let lines = bytes.split(|&b| b == b'\n').count();
            let ((log, fit), peak) = measure(|| {
                let log = parse_log_bytes(&bytes);
                let fit = fit_targets(&log, true).map(|_| ()).map_err(|e| e.to_string());
                (log, fit)
            });
            prop_assert!(
                peak <= alloc_bound(bytes.len()),
                "{peak} bytes for a {}-byte log",
                bytes.len()
            );
            for b in &log.bad {
                prop_assert!(b.line >= 1 && b.line <= lines, "line {} of {lines}", b.line);
                prop_assert!(
                    !b.reason.is_empty() && b.reason.chars().count() <= MAX_ERROR_CHARS,
                    "{}",
                    b.reason
                );
            }
            for r in &log.rows {
                prop_assert!(r.line >= 1 && r.line <= lines);
            }
            if let Err(msg) = fit {
                prop_assert!(msg.contains("rows") || msg.contains("prompt_tokens"), "{msg}");
            }
            Ok(())
        },
    );
}

/// Every example and doc scenario with each of its keys duplicated in turn is refused, naming that key's path.
#[test]
fn every_duplicated_key_is_named() {
    let _g = serial();
    for text in valid_corpus() {
        let v: Value = serde_json::from_str(text).unwrap();
        let Value::Object(m) = &v else { unreachable!() };
        for (key, val) in m {
            let dup = format!(
                "{{{}: {val}, {}",
                serde_json::to_string(key).unwrap(),
                &v.to_string()[1..]
            );
            let err = Scenario::from_json(&dup).expect_err("duplicate refused").to_string();
            assert!(err.contains(&format!("duplicate key `{key}`")), "{err}");
            assert!(err.contains("line 1 column"), "{err}");
        }
    }
}

/// A 10 MB value in a scenario gives a short message that still says what is wrong and where.
#[test]
fn a_huge_value_gives_a_short_error() {
    let _g = serial();
    let huge = "7".repeat(10_000_000);
    for text in [
        EXAMPLES[0].replace("\"num_requests\": 80", &format!("\"num_requests\": \"{huge}\"")),
        format!("{{\"model\": \"{huge}\"}}"),
        format!("{{\"version\": \"{huge}\", \"model\": \"seed\"}}"),
        format!("{{\"model\": \"seed\", \"{huge}\": 1}}"),
        format!("[\"{huge}\"]"),
    ] {
        let err = Scenario::from_json(&text).expect_err("refused").to_string();
        assert!(err.chars().count() <= MAX_ERROR_CHARS, "{} chars", err.len());
        assert!(err.contains("bytes cut"), "{err}");
    }
}

// ---- record files and traces ----

/// A run's records as a JSONL record file: 48 closed-loop requests of the engine-10k example's engine, with their
/// ITL quantiles (what `simulate --records` and live runs write; `calibrate --from`, `predict --against` and `merge`
/// read).
fn record_file() -> &'static str {
    static FILE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let mut v: Value = serde_json::from_str(EXAMPLES[2]).unwrap();
        v["workload"] = serde_json::json!({"kind": "closed_loop", "users": 4, "num_requests": 48,
            "prompt": {"dist": "uniform", "min": 100, "max": 3000}, "output": {"dist": "uniform", "min": 2, "max": 60}});
        let Scenario::Engine(sc) = Scenario::from_value(v).unwrap() else { unreachable!() };
        let opts = shared::engine::SimOptions {
            record_itl_quantiles: true,
            keep_records: true,
        };
        let recs = shared::engine::simulate_with(&sc, opts).unwrap().records;
        recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
    })
}

/// `text` (JSON lines) with one line per mutation given a dropped key or an odd value ([`mutate_value`]): line
/// `pick + p` for the mutation `(kind, p, o)`. A line an earlier mutation left unparseable (a number out of range)
/// stays as it is.
fn mutate_lines(text: &str, pick: usize, odd: usize, muts: &[(u8, usize, u8)]) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for (k, p, o) in muts {
        let j = pick.wrapping_add(*p) % lines.len();
        if serde_json::from_str::<Value>(&lines[j]).is_ok() {
            lines[j] = mutate_value(&lines[j], 1 + k % 2, *p, odd.wrapping_add(usize::from(*o))).0;
        }
    }
    lines.join("\n")
}

/// Reads a record file as the agent's reader does: each line a record, kept when it parses and passes
/// [`shared::record::RequestRecord::check`]. Returns (kept, every record that parsed).
fn read_record_file(text: &str) -> (Vec<RequestRecord>, Vec<RequestRecord>) {
    let parsed: Vec<RequestRecord> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let kept = parsed.iter().filter(|r| r.check().is_ok()).cloned().collect();
    (kept, parsed)
}

/// Mutated record files (bytes flipped, a field replaced by an odd value — a negative or non-finite duration, a
/// huge count —, dropped, lines duplicated or lost) through everything that reads them: the fit of
/// `calibrate --from`, the scoring of `report`/`predict --against`, merge's counters. No panic, with the checked
/// records and with every record that parsed (the fit and the scoring defend themselves too).
#[test]
fn record_files() {
    let _g = serial();
    run(
        (
            0u8..4,
            any::<usize>(),
            any::<u8>(),
            any::<usize>(),
            prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
        ),
        |(how, pick, kind, odd, muts)| {
            let base = record_file();
            let mut lines: Vec<String> = base.lines().map(String::from).collect();
            let i = pick % lines.len();
            let text = match how {
                0 => String::from_utf8_lossy(&mutate_bytes(base.as_bytes(), &muts)).into_owned(),
                1 => mutate_lines(base, i, odd, &muts),
                2 => {
                    let dup = lines[i].clone();
                    lines.insert(i.wrapping_add(odd) % lines.len(), dup);
                    lines.remove((i + usize::from(kind)) % lines.len());
                    lines.join("\n")
                }
                _ => lines[..i].join("\n"),
            };
            let (kept, parsed) = read_record_file(&text);
            for recs in [&kept, &parsed] {
                let _ = shared::calibrate::fit(recs, &shared::calibrate::FitOptions::default());
                let _ = shared::metrics::summarize(recs, &shared::metrics::Slo::default());
                let _ = shared::metrics::hist::Mergeable::of(recs, &shared::metrics::Slo::default()).summary();
            }
            for r in &kept {
                prop_assert!(r.ttft_s.is_none_or(|t| t >= 0.0 && t <= r.wall_s * (1.0 + 1e-9) + 1e-9));
            }
            Ok(())
        },
    );
}

/// A Mooncake trace of 40 rows: arrivals, lengths and chained hash ids, some shared.
fn mooncake_text() -> String {
    (0..40u64)
        .map(|i| {
            let ids: Vec<u64> = (0..(2 + i % 5)).map(|j| if j < 2 { j } else { 100 * i + j }).collect();
            format!(
                "{}\n",
                serde_json::json!({"timestamp": i * 250, "input_length": 512 * ids.len() as u64 - 17 * i,
                    "output_length": 5 + i % 30, "hash_ids": ids, "session_id": i % 7})
            )
        })
        .collect()
}

/// Mutated Mooncake traces through what `simulate` does with one: read (errors name the line), checked against the
/// size budget, then simulated. No panic, no allocation beyond the budget's reach, every error names its line.
#[test]
fn mooncake_traces() {
    let _g = serial();
    let text = mooncake_text();
    run(
        (
            any::<bool>(),
            any::<usize>(),
            any::<usize>(),
            prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
        ),
        |(bytes, pick, odd, muts)| {
            let mutated = if bytes {
                String::from_utf8_lossy(&mutate_bytes(text.as_bytes(), &muts)).into_owned()
            } else {
                mutate_lines(&text, pick, odd, &muts)
            };
            let mut v: Value = serde_json::from_str(EXAMPLES[2]).unwrap();
            v["workload"] = serde_json::json!({"kind": "trace", "path": "t.jsonl"});
            let Scenario::Engine(mut sc) = Scenario::from_value(v).unwrap() else {
                unreachable!()
            };
            let shared::workload::Workload::Trace(t) = &mut sc.workload else {
                unreachable!()
            };
            match t.load_text(&mutated) {
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(msg.contains("line") || msg.contains("sha256"), "{msg}");
                }
                Ok(()) => {
                    let sc = Scenario::Engine(sc);
                    if sc.check_size(false, &shared::budget::Budget::DEFAULT).is_ok()
                        && let Scenario::Engine(e) = &sc
                        && e.validate().is_ok()
                    {
                        let _ = shared::engine::simulate(e);
                    }
                }
            }
            Ok(())
        },
    );
}
