//! Shared by the native and wasm golden tests: run the golden engine scenario and fingerprint its report.

/// FNV-1a 64 over bytes: tiny, deterministic, identical on every target.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `{"report_fnv1a64": "...", "records": N, "summary": {...}}` for the golden scenario, pretty-printed.
pub fn engine_golden() -> String {
    let text = include_str!("../data/engine_golden_scenario.json");
    let shared::scenario::Scenario::Engine(scenario) = shared::scenario::Scenario::from_json(text).expect("valid")
    else {
        panic!("the golden scenario is an engine scenario");
    };
    let report = shared::engine::simulate(&scenario).expect("simulates");
    let json = serde_json::to_string(&report).expect("serializes");
    let golden = serde_json::json!({
        "report_fnv1a64": format!("{:016x}", fnv1a64(json.as_bytes())),
        "records": report.records.len(),
        "summary": report.summary,
    });
    serde_json::to_string_pretty(&golden).expect("serializes") + "\n"
}
