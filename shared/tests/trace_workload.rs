//! The `trace` workload over a production trace: the public Mooncake conversation trace (12,031 requests, FAST'25,
//! Apache-2.0) loads and simulates, and the reuse the simulator's prefix cache finds with a cache that never evicts
//! equals, request by request, the reuse computed from the hash ids alone.
//!
//! The trace is read from `$LOADSHAPE_TRACE_DIR` or, by default, `../shared/traces/` beside the repository (where
//! CI and the project checkout have it).

use std::path::PathBuf;

use shared::engine::{self, EngineScenario, SimOptions};
use shared::scenario::Scenario;
use shared::workload::mooncake::{TraceStats, direct_reuse};
use shared::workload::{TraceWorkload, Workload};

fn public_trace() -> String {
    let dir = std::env::var_os("LOADSHAPE_TRACE_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces"),
        PathBuf::from,
    );
    let path = dir.join("mooncake_conversation_trace.jsonl");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the public Mooncake trace; set LOADSHAPE_TRACE_DIR to its folder)",
            path.display()
        )
    })
}

fn scenario_with(json_workload: &str) -> EngineScenario {
    let text = format!(
        r#"{{"model": "engine", "workload": {json_workload}, "profile": {profile}, "counterfactuals": false}}"#,
        profile = serde_json::to_string(&shared::engine::presets::llama3_8b_h100()).unwrap_or_default()
    );
    match Scenario::from_json(&text).unwrap_or_else(|e| panic!("{e}")) {
        Scenario::Engine(e) => e,
        Scenario::Seed(_) => panic!("not an engine scenario"),
    }
}

fn loaded(sc: &mut EngineScenario, text: &str) -> TraceWorkload {
    let Workload::Trace(t) = &mut sc.workload else {
        panic!("not a trace")
    };
    assert!(t.needs_file());
    t.load_text(text).unwrap_or_else(|e| panic!("{e}"));
    (**t).clone()
}

/// The whole public trace: 12,031 requests read, every one simulated, and its statistics.
#[test]
fn public_trace_loads_and_simulates() {
    let text = public_trace();
    let mut sc = scenario_with(r#"{"kind": "trace", "path": "mooncake_conversation_trace.jsonl"}"#);
    let t = loaded(&mut sc, &text);
    assert_eq!(t.requests.len(), 12_031);
    assert_eq!(t.requests[0].hash_ids.len(), 14);
    assert_eq!(t.requests[0].unique_prompt_tokens, 6758);
    let stats = TraceStats::of(&t);
    assert_eq!(stats.requests, 12_031);
    assert!(stats.prompt_median_tokens > 1000.0 && stats.prompt_p90_tokens >= stats.prompt_median_tokens);
    assert!(
        stats.reuse_share > 0.0 && stats.reuse_share < 1.0,
        "{}",
        stats.reuse_share
    );
    // The trace spans about an hour (its last timestamp is 3,536,999 ms).
    assert!((stats.span_s - 3537.0).abs() < 1.0, "{}", stats.span_s);
    let report = engine::simulate_with(&sc, SimOptions::SUMMARY).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.summary.completed + report.summary.failed, 12_031);
    assert!(report.summary.cached_share_achieved.unwrap_or(0.0) > 0.0);
    // A time-scaled window: a minute of the trace twice as fast is the requests of that minute, in 30 s.
    let mut sc =
        scenario_with(r#"{"kind": "trace", "path": "x.jsonl", "start_s": 600, "end_s": 660, "time_scale": 0.5}"#);
    let w = loaded(&mut sc, &text);
    let direct = text
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            let ts = v["timestamp"].as_f64().unwrap_or(-1.0);
            (600_000.0..660_000.0).contains(&ts)
        })
        .count();
    assert_eq!(w.requests.len(), direct);
    assert!(w.requests.iter().all(|r| (0.0..30_000.0).contains(&r.arrival_ms)));
}

/// With a cache that never evicts and requests far enough apart that each completes before the next arrives, the
/// simulator's cached tokens equal the hash ids' reuse exactly, for every request, at engine block sizes that
/// divide the trace's 512 and one that does not.
#[test]
fn unbounded_cache_reuse_equals_the_hash_ids_reuse() {
    let text = public_trace();
    let head: String = text.lines().take(1500).map(|l| format!("{l}\n")).collect();
    for engine_bs in [16u32, 512, 48] {
        let mut sc = scenario_with(r#"{"kind": "trace", "path": "head.jsonl"}"#);
        let mut t = loaded(&mut sc, &head);
        // Ten minutes apart: every request is done long before the next.
        for (i, r) in t.requests.iter_mut().enumerate() {
            r.arrival_ms = i as f64 * 600_000.0;
        }
        sc.workload = Workload::Trace(Box::new(t.clone()));
        sc.profile.block_size = engine_bs;
        // More than every token of the 1,500 requests (about 21 M): nothing is ever evicted.
        sc.profile.num_kv_blocks = 40_000_000 / u64::from(engine_bs);
        sc.profile.max_model_len = Some(1 << 20);
        sc.profile.host_cache = None;
        sc.profile.enable_prefix_caching = true;
        let report = engine::simulate(&sc).unwrap_or_else(|e| panic!("{e}"));
        let want = direct_reuse(&t.requests, 512, engine_bs);
        let got: Vec<u64> = report
            .records
            .iter()
            .map(|r| r.cached_tokens.unwrap_or(u64::MAX))
            .collect();
        assert_eq!(report.diagnostics.kv_thrash.evicted_blocks, 0, "block size {engine_bs}");
        assert_eq!(got.len(), want.len());
        let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(first_diff, None, "block size {engine_bs}: request {first_diff:?}");
        assert!(want.iter().sum::<u64>() > 0);
    }
}

/// Sessions: a later turn is sent its `delay` after the previous turn completes, never before.
#[test]
fn session_turns_wait_for_the_previous_turn() {
    let text = r#"{"timestamp": 0, "session_id": "a", "input_length": 600, "output_length": 40, "hash_ids": [1, 2]}
{"timestamp": 0, "input_length": 300, "output_length": 10, "hash_ids": [9]}
{"session_id": "a", "delay": 2000, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}
{"timestamp": 100, "input_length": 600, "output_length": 10, "hash_ids": [9, 8]}"#;
    let mut sc = scenario_with(r#"{"kind": "trace", "path": "t.jsonl", "block_size": 512}"#);
    loaded(&mut sc, text);
    let report = engine::simulate(&sc).unwrap_or_else(|e| panic!("{e}"));
    let recs = &report.records;
    assert_eq!(recs.len(), 4);
    let first = recs
        .iter()
        .find(|r| r.step == 0 && r.base_asked == 600)
        .expect("turn 1");
    let second = recs.iter().find(|r| r.step == 1).expect("turn 2");
    let done = first.t_submit + first.wall_s;
    assert!(
        (second.t_submit - (done + 2.0)).abs() < 1e-9,
        "{} vs {done}",
        second.t_submit
    );
    assert_eq!(second.session, first.session);
    // The second turn reuses what the first turn computed of its hash blocks: 600 tokens, 592 in whole engine
    // blocks of 16.
    assert_eq!(second.cached_tokens, Some(592));
}

/// A trace saved with a UTF-8 byte-order mark reads as the same trace without one (only its sha256, of the file's
/// bytes, differs).
#[test]
fn a_byte_order_mark_is_not_part_of_the_first_line() {
    let text = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
                {\"timestamp\": 10, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 3]}\n";
    let mut plain = scenario_with(r#"{"kind": "trace", "path": "t.jsonl"}"#);
    let mut marked = scenario_with(r#"{"kind": "trace", "path": "t.jsonl"}"#);
    let a = loaded(&mut plain, text);
    let b = loaded(&mut marked, &format!("\u{feff}{text}"));
    assert_eq!(a.requests, b.requests);
    assert_eq!(b.requests.len(), 2);
}
