use shared::engine::{EngineScenario, presets, simulate};
use shared::workload::{SessionWorkload, Workload};

#[test]
fn smoke_sessions() {
    let sc = EngineScenario {
        workload: Workload::Sessions(SessionWorkload::default()),
        profile: presets::llama3_8b_h100(),
        slo: Default::default(),
        seed: 1,
        counterfactuals: true,
    };
    let r = simulate(&sc).expect("ok");
    println!("{}", serde_json::to_string_pretty(&r.summary).unwrap());
    println!("{}", serde_json::to_string_pretty(&r.diagnostics).unwrap());
    for rec in r.records.iter().take(15) {
        println!("{}", serde_json::to_string(rec).unwrap());
    }
    println!("timeline {}", r.timeline.len());
}
