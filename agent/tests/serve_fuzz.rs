//! Fuzzing the agent's parser of websocket messages (`serve::ws::parse_client_msg`, what every text a page sends
//! goes through) with proptest: arbitrary texts, valid messages mutated byte by byte, and valid messages with one
//! structural fault. Every input must give a message or an error, never a panic; an error names what is wrong;
//! and parsing an input of `n` bytes allocates at most [`bound`]`(n)` bytes at its peak, measured by a counting
//! global allocator. The case counts and the time they take are in docs/serve.md ("Fuzzing").

use std::alloc::System;
use std::sync::Mutex;

use loadshape::serve::ws::{Refused, parse_client_msg};
use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use shared::protocol::{ClientMsg, ErrorCode, PROTOCOL_VERSION};

#[global_allocator]
static GLOBAL: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The tests run one at a time, so no other test thread allocates during a measurement.
static SERIAL: Mutex<()> = Mutex::new(());

/// The agent's message limit (`Limits::max_message_bytes`).
const MAX_MESSAGE_BYTES: u64 = 1 << 20;

/// Cases per property; 4 properties. See docs/serve.md for the time this takes.
const CASES: u32 = 512;

/// The most bytes parsing an `n`-byte message may hold at once: 48 bytes per input byte plus 64 KiB. The worst
/// input is an array of one-digit numbers inside `scenario`: each 2-byte `0,` becomes a 32-byte JSON value, and
/// the vector holding them may have grown to twice its length (32 bytes per input byte, measured below).
fn bound(n: usize) -> usize {
    48 * n + 64 * 1024
}

/// Parses `text`, measuring the peak bytes allocated meanwhile (the result included).
fn measured(text: &str) -> (Result<ClientMsg, Refused>, usize) {
    GLOBAL.reset_peak_memory();
    let parsed = parse_client_msg(text, MAX_MESSAGE_BYTES);
    let peak = GLOBAL.get_peak_memory();
    (parsed, peak)
}

/// Any input: no panic, a bounded allocation, and an error that says something.
fn check_any(text: &str) -> Result<Option<Refused>, TestCaseError> {
    let (parsed, peak) = measured(text);
    prop_assert!(
        peak <= bound(text.len()),
        "parsing {} bytes allocated {peak} bytes (bound {})",
        text.len(),
        bound(text.len())
    );
    match parsed {
        Ok(_) => Ok(None),
        Err(r) => {
            prop_assert!(r.message.len() > "cannot parse message: ".len(), "{r:?}");
            if text.len() as u64 > MAX_MESSAGE_BYTES {
                prop_assert_eq!(r.code, ErrorCode::LimitExceeded);
            } else {
                prop_assert_eq!(r.code, ErrorCode::BadMessage);
            }
            Ok(Some(r))
        }
    }
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    })
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-1e300f64..1e300).prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..8)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every kind of page message, with arbitrary ids, names and scenarios.
fn client_msg() -> impl Strategy<Value = ClientMsg> {
    let id = any::<u64>();
    let name = ".{0,24}";
    prop_oneof![
        (id, any::<u32>(), name).prop_map(|(id, protocol, client)| ClientMsg::Hello { id, protocol, client }),
        id.prop_map(|id| ClientMsg::ListTargets { id }),
        (id, json_value()).prop_map(|(id, scenario)| ClientMsg::ValidateScenario { id, scenario }),
        (id, json_value(), name).prop_map(|(id, scenario, target)| ClientMsg::StartRun {
            id,
            scenario,
            target,
            name: None,
        }),
        (id, name).prop_map(|(id, run_id)| ClientMsg::StopRun { id, run_id }),
        id.prop_map(|id| ClientMsg::ListRuns { id }),
        (id, name).prop_map(|(id, run_id)| ClientMsg::FetchRun { id, run_id }),
        (id, name, any::<u64>()).prop_map(|(id, run_id, from_seq)| ClientMsg::FetchRecords { id, run_id, from_seq }),
        (id, name).prop_map(|(id, run_id)| ClientMsg::DeleteRun { id, run_id }),
        (id, name, any::<u64>()).prop_map(|(id, run_id, from_seq)| ClientMsg::Subscribe { id, run_id, from_seq }),
        (id, name).prop_map(|(id, run_id)| ClientMsg::Unsubscribe { id, run_id }),
    ]
}

/// One byte-level edit of a text: delete a range, insert text, overwrite a byte, truncate, or repeat a range.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    Overwrite(usize, u8),
    Truncate(usize),
    Repeat(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..16usize).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), r#"[{}\[\]":,\\ 0-9a-z\-.eE]{1,8}"#).prop_map(|(at, s)| Edit::Insert(at, s)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Overwrite(at, b)),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), 1..32usize, 1..64usize).prop_map(|(at, n, times)| Edit::Repeat(at, n, times)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for e in edits {
        let len = bytes.len().max(1);
        match e {
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(bytes.len());
                if at < end {
                    bytes.drain(at..end);
                }
            }
            Edit::Insert(at, s) => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, s.bytes());
            }
            Edit::Overwrite(at, b) => {
                if !bytes.is_empty() {
                    let at = at % bytes.len();
                    bytes[at] = *b;
                }
            }
            Edit::Truncate(at) => bytes.truncate(at % len),
            Edit::Repeat(at, n, times) => {
                let at = at % len;
                let end = (at + n).min(bytes.len());
                if at < end {
                    let piece = bytes[at..end].to_vec();
                    for _ in 0..*times {
                        bytes.splice(end..end, piece.iter().copied());
                    }
                }
            }
        }
    }
    // A websocket text frame is UTF-8 (the socket layer refuses others): a bad byte stands for its character.
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn arbitrary_texts_never_panic_and_stay_within_the_allocation_bound() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runner()
        .run(&prop_oneof![".{0,256}", "[{}\\[\\]\":,0-9a-z\\\\ ]{0,2048}"], |text| {
            check_any(&text).map(|_| ())
        })
        .unwrap();
}

#[test]
fn valid_messages_parse_back_and_mutated_ones_never_panic() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runner()
        .run(&(client_msg(), prop::collection::vec(edit(), 0..4)), |(msg, edits)| {
            let text = serde_json::to_string(&msg).unwrap();
            let (parsed, peak) = measured(&text);
            prop_assert!(peak <= bound(text.len()), "{peak} bytes for {text}");
            match parsed {
                // Floats may come back one ulp off; the message kind and id always round-trip.
                Ok(back) => prop_assert_eq!(back.id(), msg.id()),
                Err(r) => return Err(TestCaseError::fail(format!("{text}: {r:?}"))),
            }
            check_any(&apply(&text, &edits)).map(|_| ())
        })
        .unwrap();
}

/// One structural fault in a valid message: the error names it (the field, the variant, the type), and carries
/// the request's id when the id itself is intact.
#[test]
fn structural_faults_are_named_in_the_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runner()
        .run(&(client_msg(), 0..4u8, "[a-z]{3,12}"), |(msg, fault, word)| {
            let mut v = serde_json::to_value(&msg).unwrap();
            let data = v["data"].as_object_mut().unwrap();
            let fields: Vec<String> = data.keys().filter(|k| *k != "id").cloned().collect();
            let (expect, keeps_id) = match fault {
                0 if !fields.is_empty() => {
                    let f = &fields[word.len() % fields.len()];
                    data.remove(f);
                    (format!("missing field `{f}`"), true)
                }
                1 => {
                    let extra = format!("x_{word}");
                    data.insert(extra.clone(), serde_json::Value::Null);
                    (format!("unknown field `{extra}`"), true)
                }
                2 => {
                    data.insert("id".into(), serde_json::Value::from(word.clone()));
                    ("invalid type".to_string(), false)
                }
                _ => {
                    let kind = format!("no_{word}");
                    v["type"] = serde_json::Value::from(kind.clone());
                    (format!("unknown variant `{kind}`"), true)
                }
            };
            let text = v.to_string();
            let refused = check_any(&text)?.ok_or_else(|| TestCaseError::fail(format!("{text} parsed")))?;
            prop_assert!(
                refused.message.contains(&expect),
                "{text}: {} (wanted {expect})",
                refused.message
            );
            prop_assert_eq!(refused.id, if keeps_id { msg.id() } else { 0 });
            Ok(())
        })
        .unwrap();
}

/// The shapes that allocate most per byte, at sizes up to the message limit, and one over it.
#[test]
fn worst_case_shapes_stay_within_the_allocation_bound() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let wrap = |scenario: &str| format!(r#"{{"type":"validate_scenario","data":{{"id":1,"scenario":{scenario}}}}}"#);
    let limit = MAX_MESSAGE_BYTES as usize - 100;
    let zeros = format!("[{}0]", "0,".repeat(limit / 2 - 2));
    // Just past a power of two, the vector's capacity is twice its length.
    let zeros_past = format!("[{}0]", "0,".repeat(1 << 18));
    let objects = format!(
        "{{{}\"z\":0}}",
        (0..limit / 13).map(|i| format!("\"k{i:07}\":0,")).collect::<String>()
    );
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let escapes = format!("\"{}\"", "\\u0041".repeat(limit / 6 - 2));
    let strings = format!("[{}\"\"]", "\"a\",".repeat(limit / 4 - 2));
    for (name, scenario) in [
        ("zeros", zeros),
        ("zeros_past_a_power_of_two", zeros_past),
        ("objects", objects),
        ("nested", nested),
        ("escapes", escapes),
        ("strings", strings),
    ] {
        let text = wrap(&scenario);
        let (parsed, peak) = measured(&text);
        // `--nocapture` shows the figures docs/serve.md quotes.
        eprintln!(
            "{name}: {} bytes, peak {peak} bytes ({:.1} per byte), {}",
            text.len(),
            peak as f64 / text.len() as f64,
            if parsed.is_ok() { "parsed" } else { "refused" }
        );
        assert!(
            peak <= bound(text.len()),
            "{name}: {peak} bytes for {} bytes",
            text.len()
        );
    }
    let hello = serde_json::to_string(&ClientMsg::Hello {
        id: 9,
        protocol: PROTOCOL_VERSION,
        client: "x".repeat(MAX_MESSAGE_BYTES as usize),
    })
    .unwrap();
    let (parsed, peak) = measured(&hello);
    assert_eq!(parsed.unwrap_err().code, ErrorCode::LimitExceeded);
    assert!(peak < 4096, "an over-limit message is refused unread ({peak} bytes)");
}
