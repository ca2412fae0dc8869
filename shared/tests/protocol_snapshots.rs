//! One JSON snapshot per protocol message, kept in `docs/protocol.md` so the documentation IS the snapshot:
//! a wire change fails this test until the doc shows the new JSON. Bless with `BLESS=1 cargo test -p
//! loadshape-shared --test protocol_snapshots`, then read the diff.
#![cfg(not(target_arch = "wasm32"))]

use shared::capacity::{CapacityReport, EngineSide, Goal, Knob, Level, LevelRun, LiveLevel, Per, Saturation, Strategy};
use shared::metrics::Summary;
use shared::protocol::*;
use shared::record::{ItlSummary, RECORD_SCHEMA_VERSION, RequestRecord, UsageSource};

fn record() -> RequestRecord {
    RequestRecord {
        schema: RECORD_SCHEMA_VERSION,
        session: 3,
        inst: 1,
        step: 4,
        steps_asked: 9,
        base_asked: 5000,
        ok: true,
        t_submit: 12.5,
        ttft_s: Some(0.081),
        wall_s: 10.9,
        gen_tokens: 700,
        asked_tokens: 700,
        prompt_tokens: Some(15812),
        cached_tokens: Some(13104),
        designed_cached_tokens: Some(13109),
        designed_prompt_tokens: None,
        sse_frames: 700,
        prompt_chars: 61234,
        queue_s: None,
        itl: Some(ItlSummary {
            mean_ms: 15.4,
            p50_ms: 15.1,
            p99_ms: 22.0,
            max_ms: 31.5,
        }),
        finish_reason: Some("length".into()),
        usage_source: UsageSource::FinalFrame,
        rx_clock: None,
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

fn run_info(state: RunState) -> RunInfo {
    RunInfo {
        run_id: "r1764499200000-3f2a".into(),
        kind: RunKind::Replay,
        target: "sim".into(),
        state,
        started_ms: 1_764_499_200_000,
        ended_ms: (state != RunState::Running).then_some(1_764_499_260_000),
        records: 120,
        error: None,
        name: None,
        about: None,
    }
}

fn client_examples() -> Vec<ClientMsg> {
    let scenario = serde_json::json!({"model": "engine", "workload": {"kind": "sessions", "sessions": 4}});
    let run_id = "r1764499200000-3f2a".to_string();
    vec![
        ClientMsg::Hello {
            id: 1,
            protocol: PROTOCOL_VERSION,
            client: "loadshape-page 0.1.0".into(),
        },
        ClientMsg::ListTargets { id: 2 },
        ClientMsg::ValidateScenario {
            id: 3,
            scenario: scenario.clone(),
        },
        ClientMsg::StartRun {
            name: Some("nightly, 4 sessions".into()),
            id: 4,
            scenario,
            target: "sim".into(),
        },
        ClientMsg::StopRun {
            id: 5,
            run_id: run_id.clone(),
        },
        ClientMsg::ListRuns { id: 6 },
        ClientMsg::FetchRun {
            id: 7,
            run_id: run_id.clone(),
        },
        ClientMsg::DeleteRun {
            id: 8,
            run_id: run_id.clone(),
        },
        ClientMsg::Subscribe {
            id: 9,
            run_id: run_id.clone(),
            from_seq: 118,
        },
        ClientMsg::Unsubscribe {
            id: 10,
            run_id: run_id.clone(),
        },
        ClientMsg::FetchRecords {
            id: 11,
            run_id,
            from_seq: 0,
        },
        ClientMsg::StartCapacity {
            name: None,
            id: 12,
            scenario: serde_json::json!({"model": "engine", "workload": {"kind": "closed_loop", "users": 2}}),
            target: "sim".into(),
            options: CapacityOptions {
                goal: Some(goal()),
                duration_s: Some(20.0),
                ..CapacityOptions::default()
            },
        },
        ClientMsg::StartCalibration {
            id: 13,
            target: "sim".into(),
            budget_s: Some(60.0),
        },
    ]
}

fn goal() -> Goal {
    Goal {
        ttft_ms: Some(300.0),
        tpot_ms: None,
        e2e_ms: None,
        attainment: 0.95,
        per: Per::Request,
    }
}

fn level(load: f64, pass: bool) -> Level {
    Level {
        load,
        pass,
        attainment: if pass { 1.0 } else { 0.5 },
        summary: Summary {
            completed: 32,
            ttft_p50_ms: if pass { 81.0 } else { 420.0 },
            slo_attainment_ratio: if pass { 1.0 } else { 0.5 },
            ..Summary::default()
        },
        saturation: Saturation::Stable,
        engine: EngineSide {
            kv_peak_use: Some(0.25),
            preemptions: Some(0),
        },
        scored: 32,
        excluded: 8,
        window_s: (2.0, 10.0),
        stopped_early: false,
    }
}

fn capacity_run() -> RunInfo {
    RunInfo {
        kind: RunKind::Capacity,
        ..run_info(RunState::Running)
    }
}

fn server_examples() -> Vec<ServerMsg> {
    let limits = Limits {
        max_message_bytes: 1_048_576,
        max_concurrent_runs: 2,
        max_sessions_per_run: 256,
        max_concurrent_requests_per_run: 1024,
        max_rate_per_run: 100.0,
        max_run_seconds: 3600.0,
    };
    let run_id = "r1764499200000-3f2a".to_string();
    let summary = serde_json::json!({"completed": 120, "ttft_p50_ms": 81.0});
    vec![
        ServerMsg::answer_hello(1, PROTOCOL_VERSION, limits),
        ServerMsg::Targets {
            id: 2,
            targets: vec![
                TargetInfo {
                    name: "sim".into(),
                    kind: "sim".into(),
                    url: "builtin".into(),
                    model: "sim".into(),
                    dialect: "vllm".into(),
                    fleet: None,
                    profile: None,
                    limits: None,
                },
                // A fleet target: the run spreads its requests over the URLs by the router.
                TargetInfo {
                    name: "gpus".into(),
                    kind: "openai".into(),
                    url: "http://10.0.0.7:8000/v1".into(),
                    model: "llama".into(),
                    dialect: "vllm".into(),
                    fleet: Some(TargetFleetInfo {
                        urls: vec!["http://10.0.0.7:8000/v1".into(), "http://10.0.0.8:8000/v1".into()],
                        router: Some(shared::engine::Router::SessionAffinity),
                        load_cap: None,
                    }),
                    profile: None,
                    // What the target said of its limits when the agent asked.
                    limits: Some(TargetLimits {
                        max_model_len: Some(32768),
                        max_num_seqs: None,
                        sources: vec!["vLLM /v1/models max_model_len".into()],
                    }),
                },
            ],
        },
        ServerMsg::Validated {
            id: 3,
            valid: false,
            error: Some("workload.sessions must be >= 1 (got 0)".into()),
        },
        ServerMsg::RunStarted {
            id: 4,
            run: run_info(RunState::Running),
        },
        ServerMsg::StopRequested {
            id: 5,
            run_id: run_id.clone(),
        },
        ServerMsg::Runs {
            id: 6,
            runs: vec![RunInfo {
                name: Some("nightly, 4 sessions".into()),
                about: Some("4 sessions × ~12 steps".into()),
                ..run_info(RunState::Finished)
            }],
        },
        ServerMsg::Run {
            id: 7,
            run: run_info(RunState::Finished),
            scenario: serde_json::json!({"model": "engine"}),
            summary: Some(summary.clone()),
        },
        ServerMsg::RunRecords {
            id: 11,
            run_id: run_id.clone(),
            from_seq: 0,
            records: vec![record()],
            next_seq: Some(1),
        },
        ServerMsg::RunDeleted {
            id: 8,
            run_id: run_id.clone(),
        },
        ServerMsg::Subscribed {
            id: 9,
            run_id: run_id.clone(),
            from_seq: 118,
        },
        ServerMsg::Unsubscribed {
            id: 10,
            run_id: run_id.clone(),
        },
        ServerMsg::Record {
            run_id: run_id.clone(),
            seq: 118,
            record: record(),
        },
        ServerMsg::RunState {
            run_id: run_id.clone(),
            run: run_info(RunState::Stopped),
            summary: Some(summary),
        },
        ServerMsg::Resync { run_id, next_seq: 119 },
        ServerMsg::error(
            4,
            ErrorCode::UnknownTarget,
            "unknown target `gpu1`; the agent offers: sim, vllm",
        ),
        ServerMsg::CapacityStarted {
            id: 12,
            run: capacity_run(),
            simulated: CapacityReport {
                knob: Knob::Users,
                capacity: Some(4.0),
                resolution: 1.0,
                goal: goal(),
                strategy: Strategy::Doubling { start: 2.0 },
                levels: vec![level(4.0, true)],
                notes: Vec::new(),
            },
            guided: true,
        },
        ServerMsg::CapacityLevel {
            run_id: "r1764499200000-3f2a".into(),
            index: 0,
            level: Box::new(LiveLevel {
                level: level(4.0, true),
                records: vec!["level-01-4.jsonl".into()],
                runs: vec![LevelRun::of("level-01-4.jsonl", &level(4.0, true))],
            }),
        },
        ServerMsg::CapacityResult {
            run_id: "r1764499200000-3f2a".into(),
            report: serde_json::json!({"capacity": 4.0, "knob": "users", "levels_run": 2, "simulated_capacity": 4.0}),
        },
        ServerMsg::CalibrationStarted {
            id: 13,
            run: RunInfo {
                kind: RunKind::Calibration,
                ..run_info(RunState::Running)
            },
            budget_s: 60.0,
        },
        ServerMsg::CalibrationProgress {
            run_id: "r1764499200000-3f2a".into(),
            phase: "decode".into(),
            phase_index: 2,
            phases: 5,
            requests: 37,
            elapsed_s: 14.2,
            budget_s: 60.0,
        },
        ServerMsg::CalibrationResult {
            run_id: "r1764499200000-3f2a".into(),
            calibration: Box::new(target_profile()),
        },
    ]
}

/// A calibrated profile as the agent keeps it (a small one: the fields a fit writes).
fn target_profile() -> TargetProfile {
    TargetProfile {
        target: "sim".into(),
        run_id: "r1764499200000-3f2a".into(),
        calibrated_ms: 1_764_499_262_000,
        budget_s: 60.0,
        profile: shared::engine::EngineProfile {
            name: "sim".into(),
            basis: "measured: loadshape calibrate".into(),
            block_size: 16,
            num_kv_blocks: 20_000,
            max_num_seqs: 8,
            max_num_batched_tokens: 8192,
            max_model_len: Some(8192),
            step_fixed_ms: 16.1,
            per_seq_ms: 1.4,
            per_ctx_token_ms: 0.0015,
            prefill_tokens_per_ms: 6.1,
            prefill_fixed_ms: 8.3,
            ..shared::engine::presets::llama3_8b_h100()
        },
        fit: FitSummary {
            decode_r2: 0.97,
            decode_requests: 52,
            prefill_r2: 0.99,
            prefill_requests: 31,
            decode_spread: 0.012,
            prefill_spread: 0.021,
            unused: 2,
            notes: vec!["batch_kv_ms_per_ktok fixed at 0".into()],
        },
    }
}

#[test]
fn calibration_messages_round_trip_and_bad_ones_name_the_field() {
    // Without a budget: the field is left out and reads back as `None` (the agent's default).
    let plain = ClientMsg::StartCalibration {
        id: 3,
        target: "gpu".into(),
        budget_s: None,
    };
    let json = serde_json::to_string(&plain).unwrap();
    assert_eq!(json, r#"{"type":"start_calibration","data":{"id":3,"target":"gpu"}}"#);
    assert_eq!(serde_json::from_str::<ClientMsg>(&json).unwrap(), plain);
    assert_eq!(plain.id(), 3);
    // A target that was calibrated carries its profile in `targets`; one never calibrated has no `profile` key.
    let mut info = TargetInfo {
        name: "sim".into(),
        kind: "sim".into(),
        url: "builtin".into(),
        model: "sim".into(),
        dialect: "vllm".into(),
        fleet: None,
        profile: None,
        limits: None,
    };
    assert!(!serde_json::to_string(&info).unwrap().contains("profile"));
    assert!(!serde_json::to_string(&info).unwrap().contains("limits"));
    info.profile = Some(Box::new(target_profile()));
    let back: TargetInfo = serde_json::from_str(&serde_json::to_string(&info).unwrap()).unwrap();
    assert_eq!(back, info);
    // A calibration's run reads back with its kind.
    let run = serde_json::json!({"run_id": "r1-0001", "kind": "calibration", "target": "sim", "state": "running",
                                 "started_ms": 1, "ended_ms": null, "records": 0});
    assert_eq!(
        serde_json::from_value::<RunInfo>(run).unwrap().kind,
        RunKind::Calibration
    );
    // Bad messages: the error names what is wrong.
    for (text, needle) in [
        (r#"{"type":"start_calibration","data":{"id":1}}"#, "target"),
        (
            r#"{"type":"start_calibration","data":{"id":1,"target":"sim","budget_s":"long"}}"#,
            "invalid type",
        ),
        (
            r#"{"type":"start_calibration","data":{"id":1,"target":"sim","budget":60}}"#,
            "budget",
        ),
    ] {
        let e = serde_json::from_str::<ClientMsg>(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

/// Exhaustive over the variants, so a new message cannot be added without an example here.
fn client_name(m: &ClientMsg) -> &'static str {
    match m {
        ClientMsg::Hello { .. } => "hello",
        ClientMsg::ListTargets { .. } => "list_targets",
        ClientMsg::ValidateScenario { .. } => "validate_scenario",
        ClientMsg::StartRun { .. } => "start_run",
        ClientMsg::StopRun { .. } => "stop_run",
        ClientMsg::ListRuns { .. } => "list_runs",
        ClientMsg::FetchRun { .. } => "fetch_run",
        ClientMsg::DeleteRun { .. } => "delete_run",
        ClientMsg::Subscribe { .. } => "subscribe",
        ClientMsg::Unsubscribe { .. } => "unsubscribe",
        ClientMsg::FetchRecords { .. } => "fetch_records",
        ClientMsg::StartCapacity { .. } => "start_capacity",
        ClientMsg::StartCalibration { .. } => "start_calibration",
    }
}

fn examples_markdown() -> String {
    let mut out = String::from("<!-- generated by shared/tests/protocol_snapshots.rs; BLESS=1 to update -->\n");
    out.push_str("### Page → agent (`ClientMsg`)\n\n");
    for m in client_examples() {
        let json = serde_json::to_string(&m).unwrap();
        let back: ClientMsg = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m, "round trip of {}", client_name(&m));
        out.push_str(&format!("`{}`\n```json\n{json}\n```\n", client_name(&m)));
    }
    out.push_str("\n### Agent → page (`ServerMsg`)\n\n");
    for m in server_examples() {
        let json = serde_json::to_string(&m).unwrap();
        let back: ServerMsg = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m, "round trip of {}", m.kind());
        let tag: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(tag["type"], m.kind(), "ServerMsg::kind is the tag serde writes");
        out.push_str(&format!("`{}`\n```json\n{json}\n```\n", m.kind()));
    }
    out
}

#[test]
fn every_message_has_an_example_in_docs_protocol_md() {
    assert_eq!(client_examples().len(), 13, "one example per ClientMsg variant");
    assert_eq!(server_examples().len(), 21, "one example per ServerMsg variant");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md");
    let doc = std::fs::read_to_string(path).expect("docs/protocol.md");
    let (head, _) = doc
        .split_once("## Examples\n")
        .expect("docs/protocol.md has an `## Examples` section");
    let wanted = format!("{head}## Examples\n{}", examples_markdown());
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, &wanted).unwrap();
    } else {
        assert!(
            doc == wanted,
            "docs/protocol.md examples are stale: rerun with BLESS=1 and review the diff"
        );
    }
}
