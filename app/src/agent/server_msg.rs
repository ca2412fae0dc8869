//! Reading the agent's [`ServerMsg`]s on the page, field by field from a parsed JSON tree.
//!
//! Why not `serde_json::from_str::<ServerMsg>`: the derived `Deserialize` of an adjacently tagged enum
//! (`{"type": …, "data": …}`) holds every variant twice, once read straight from the text and once from a buffer
//! for a `data` that comes before its `type`, with every nested type's reader twice too (docs/page.md, "Budget").
//! Here the message is parsed into a `serde_json::Value` (code the page has anyway), and each field of the variant
//! named by `type` is read from it with `serde_json::from_value`: the same values, each field type's reader once.
//! As with the derive, a missing `Option` field reads as `None` and unknown fields are ignored. The tests read every
//! example of docs/protocol.md (the protocol's snapshots) both ways and compare.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use shared::protocol::ServerMsg;

/// One message as the agent sends it (`serde_json::to_string(&ServerMsg)`); the error names what is wrong.
pub fn decode(text: &str) -> Result<ServerMsg, String> {
    let Value::Object(mut msg) = serde_json::from_str::<Value>(text).map_err(|e| e.to_string())? else {
        return Err("a message is a JSON object".to_string());
    };
    let kind = match msg.remove("type") {
        Some(Value::String(kind)) => kind,
        _ => return Err("missing field `type`".to_string()),
    };
    let mut data = match msg.remove("data") {
        Some(Value::Object(data)) => data,
        Some(_) => return Err(format!("`{kind}`: `data` is not an object")),
        None => return Err(format!("`{kind}`: missing field `data`")),
    };
    let d = &mut data;
    Ok(match kind.as_str() {
        "hello" => ServerMsg::Hello {
            id: take(d, "id")?,
            protocol: take(d, "protocol")?,
            agent_version: take(d, "agent_version")?,
            limits: take(d, "limits")?,
        },
        "targets" => ServerMsg::Targets {
            id: take(d, "id")?,
            targets: take(d, "targets")?,
        },
        "validated" => ServerMsg::Validated {
            id: take(d, "id")?,
            valid: take(d, "valid")?,
            error: take(d, "error")?,
        },
        "run_started" => ServerMsg::RunStarted {
            id: take(d, "id")?,
            run: take(d, "run")?,
        },
        "stop_requested" => ServerMsg::StopRequested {
            id: take(d, "id")?,
            run_id: take(d, "run_id")?,
        },
        "runs" => ServerMsg::Runs {
            id: take(d, "id")?,
            runs: take(d, "runs")?,
        },
        "run" => ServerMsg::Run {
            id: take(d, "id")?,
            run: take(d, "run")?,
            scenario: take_value(d, "scenario")?,
            summary: take(d, "summary")?,
        },
        "run_records" => ServerMsg::RunRecords {
            id: take(d, "id")?,
            run_id: take(d, "run_id")?,
            from_seq: take(d, "from_seq")?,
            records: take(d, "records")?,
            next_seq: take(d, "next_seq")?,
        },
        "run_deleted" => ServerMsg::RunDeleted {
            id: take(d, "id")?,
            run_id: take(d, "run_id")?,
        },
        "subscribed" => ServerMsg::Subscribed {
            id: take(d, "id")?,
            run_id: take(d, "run_id")?,
            from_seq: take(d, "from_seq")?,
        },
        "unsubscribed" => ServerMsg::Unsubscribed {
            id: take(d, "id")?,
            run_id: take(d, "run_id")?,
        },
        "record" => ServerMsg::Record {
            run_id: take(d, "run_id")?,
            seq: take(d, "seq")?,
            record: take(d, "record")?,
        },
        "run_state" => ServerMsg::RunState {
            run_id: take(d, "run_id")?,
            run: take(d, "run")?,
            summary: take(d, "summary")?,
        },
        "resync" => ServerMsg::Resync {
            run_id: take(d, "run_id")?,
            next_seq: take(d, "next_seq")?,
        },
        "error" => ServerMsg::Error {
            id: take(d, "id")?,
            code: take(d, "code")?,
            message: take(d, "message")?,
        },
        "capacity_started" => ServerMsg::CapacityStarted {
            id: take(d, "id")?,
            run: take(d, "run")?,
            simulated: take(d, "simulated")?,
            guided: take(d, "guided")?,
        },
        "capacity_level" => ServerMsg::CapacityLevel {
            run_id: take(d, "run_id")?,
            index: take(d, "index")?,
            level: take(d, "level")?,
        },
        "capacity_result" => ServerMsg::CapacityResult {
            run_id: take(d, "run_id")?,
            report: take_value(d, "report")?,
        },
        "calibration_started" => ServerMsg::CalibrationStarted {
            id: take(d, "id")?,
            run: take(d, "run")?,
            budget_s: take(d, "budget_s")?,
        },
        "calibration_progress" => ServerMsg::CalibrationProgress {
            run_id: take(d, "run_id")?,
            phase: take(d, "phase")?,
            phase_index: take(d, "phase_index")?,
            phases: take(d, "phases")?,
            requests: take(d, "requests")?,
            elapsed_s: take(d, "elapsed_s")?,
            budget_s: take(d, "budget_s")?,
        },
        "calibration_result" => ServerMsg::CalibrationResult {
            run_id: take(d, "run_id")?,
            calibration: take(d, "calibration")?,
        },
        other => return Err(format!("unknown message type `{other}`")),
    })
}

/// Field `name` of a message's `data`, read as `T` (absent reads as `null`: `None` for an `Option`).
fn take<T: DeserializeOwned>(data: &mut Map<String, Value>, name: &str) -> Result<T, String> {
    serde_json::from_value(data.remove(name).unwrap_or(Value::Null)).map_err(|e| format!("`{name}`: {e}"))
}

/// Field `name` of a message's `data` kept as JSON; it must be there (as the derive requires of a `Value` field).
fn take_value(data: &mut Map<String, Value>, name: &str) -> Result<Value, String> {
    data.remove(name).ok_or_else(|| format!("`{name}`: missing field"))
}

#[cfg(test)]
mod tests {
    use shared::protocol::ServerMsg;
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::decode;

    /// The protocol's snapshots: one example of every `ServerMsg` kind, as the agent writes it
    /// (`shared/tests/protocol_snapshots.rs` keeps them equal to the derive's output).
    fn documented_server_messages() -> Vec<&'static str> {
        let doc = include_str!("../../../docs/protocol.md");
        let (_, agent_to_page) = doc
            .split_once("### Agent → page (`ServerMsg`)")
            .expect("docs/protocol.md lists the agent's messages");
        agent_to_page
            .split("```json\n")
            .skip(1)
            .map(|block| block.split_once("\n```").expect("a closed json block").0)
            .collect()
    }

    /// Every documented message reads back as the derived reader reads it, and every kind is documented.
    #[test]
    fn every_documented_message_reads_as_the_derive_does() {
        let texts = documented_server_messages();
        let mut kinds = Vec::new();
        for text in texts {
            let derived: ServerMsg = serde_json::from_str(text).expect("the derive reads the documented message");
            assert_eq!(decode(text).as_ref(), Ok(&derived), "{text}");
            // The page's own re-serialization reads back too (what the agent writes, field order included).
            let again = serde_json::to_string(&derived).expect("serializes");
            assert_eq!(again, text, "docs/protocol.md holds what serde writes");
            kinds.push(derived.kind());
        }
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), 21, "one documented example per ServerMsg kind: {kinds:?}");
    }

    /// Optional fields may be absent, unknown fields are ignored, and `data` may come before `type`.
    #[test]
    fn absent_options_unknown_fields_and_any_order() {
        for text in [
            r#"{"data": {"id": 3, "valid": true, "extra": [1]}, "type": "validated"}"#,
            r#"{"type": "run_state", "data": {"run_id": "r", "run": {"run_id": "r", "target": "sim", "state": "running", "started_ms": 1, "records": 0}}}"#,
        ] {
            let derived: ServerMsg = serde_json::from_str(text).expect(text);
            assert_eq!(decode(text).as_ref(), Ok(&derived), "{text}");
        }
    }

    /// Bad messages are errors naming what is wrong, not panics.
    #[test]
    fn bad_messages_are_errors() {
        for (text, needle) in [
            ("", "EOF"),
            ("[1]", "JSON object"),
            (r#"{"data": {}}"#, "`type`"),
            (r#"{"type": "nope", "data": {}}"#, "unknown message type `nope`"),
            (r#"{"type": "resync"}"#, "missing field `data`"),
            (r#"{"type": "resync", "data": 3}"#, "not an object"),
            (r#"{"type": "resync", "data": {"run_id": "r"}}"#, "`next_seq`"),
            (
                r#"{"type": "resync", "data": {"run_id": 5, "next_seq": 1}}"#,
                "`run_id`",
            ),
            (r#"{"type": "capacity_result", "data": {"run_id": "r"}}"#, "`report`"),
            (
                r#"{"type": "capacity_level", "data": {"run_id": "r", "index": 0, "level": 1}}"#,
                "`level`",
            ),
        ] {
            let err = decode(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
