//! The engine model's full report for one small session scenario, pinned: a fingerprint of the report's JSON
//! (every record, the summary, the timeline and the diagnostics) plus the summary in clear. `tests/wasm.rs`
//! checks the same golden file in Chromium, so native and wasm give identical reports. An intended model change
//! is blessed with `BLESS=1 cargo test -p loadshape-shared --test engine_golden` and the diff reviewed.
#![cfg(not(target_arch = "wasm32"))]

#[path = "common/golden.rs"]
mod golden_common;

#[test]
fn engine_report_matches_the_golden_file() {
    // Compared as text: every float printed shortest-round-trip, so equal text means bit-identical values.
    let actual = golden_common::engine_golden();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/engine_golden.json");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, &actual).unwrap();
    }
    let golden = std::fs::read_to_string(path).unwrap();
    assert!(
        actual == golden,
        "engine report changed; if intended, BLESS=1 and review the diff:\n{actual}"
    );
}
