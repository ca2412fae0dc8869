//! Prefill/decode disaggregation (a fleet's `"disaggregation"`): the prompt prefills on a prefill instance, its KV
//! crosses the link, the decode instance's first step emits the first token. TTFT = queue + prefill + transfer +
//! first decode step, computed by hand; bad input names the field.

use shared::engine::{Disaggregation, EngineProfile, EngineScenario, FleetSpec, Router, simulate};
use shared::metrics::Slo;
use shared::workload::{ClosedLoopWorkload, LengthDist, SessionWorkload, Workload};

fn profile() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        ..EngineProfile::linear("p", 10_000, 8, 8192, [10.0, 1.0, 0.0, 16.0, 0.0])
    }
}

fn disagg(p: u32, d: u32) -> Disaggregation {
    Disaggregation {
        prefill_instances: p,
        decode_instances: d,
        link_bytes_per_s: 1e6,
        link_latency_ms: 2.0,
        kv_bytes_per_token: Some(1000.0),
    }
}

fn scenario(workload: Workload, replicas: u32, dg: Option<Disaggregation>) -> EngineScenario {
    EngineScenario {
        workload,
        profile: profile(),
        slo: Slo::default(),
        seed: 1,
        counterfactuals: false,
        fleet: Some(FleetSpec {
            replicas,
            router: Router::LeastOutstanding,
            load_cap: 1.5,
            profiles: Vec::new(),
        }),
        deployment: None,
        disaggregation: dg,
    }
}

fn one(prompt: u32, output: u32) -> Workload {
    Workload::ClosedLoop(ClosedLoopWorkload {
        users: 1,
        num_requests: 1,
        think_s: 0.0,
        prompt: LengthDist::Fixed { tokens: prompt },
        output: LengthDist::Fixed { tokens: output },
        shared_prefix_tokens: 0,
    })
}

/// A 32-token prompt, 4 output tokens: prefill 10 + 1 + 32/16 = 13 ms; transfer 2 + 32·1000 B / 1e6 B/s = 34 ms
/// (arrives at 47); the decode instance's first step 10 + 1 = 11 ms (first token at 58); three more steps (91).
#[test]
fn ttft_is_prefill_plus_transfer_plus_the_first_decode_step() {
    let r = simulate(&scenario(one(32, 4), 2, Some(disagg(1, 1)))).expect("valid");
    let rec = &r.records[0];
    assert!(rec.ok, "{rec:?}");
    assert_eq!(rec.gen_tokens, 4);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(rec.kv_transfer_ms.expect("transfer"), 34.0), "{rec:?}");
    assert!(close(rec.ttft_s.expect("ttft"), 0.058), "{rec:?}");
    assert!(close(rec.wall_s, 0.091), "{rec:?}");
    assert_eq!(rec.queue_s, Some(0.0));
    // Co-located on the same two GPUs: prefill and first token in one step (13 ms), no transfer.
    let c = simulate(&scenario(one(32, 4), 2, None)).expect("valid");
    let rec = &c.records[0];
    assert!(close(rec.ttft_s.expect("ttft"), 0.013), "{rec:?}");
    assert_eq!(rec.kv_transfer_ms, None);
}

/// Sessions on a 2 + 2 fleet: every request completes through both pools, its TTFT holds its transfer, and the
/// prefix cache works on the prefill side (later steps hit their conversation).
#[test]
fn sessions_run_through_both_pools() {
    let w = Workload::Sessions(SessionWorkload {
        sessions: 6,
        steps: 4,
        base_tokens: 2000,
        gen_tokens: 64,
        tool_tokens: 200,
        think_s: 0.5,
        respawn: false,
        duration_s: 60.0,
        stagger_s: 0.2,
        ..Default::default()
    });
    let r = simulate(&scenario(w, 4, Some(disagg(2, 2)))).expect("valid");
    assert_eq!(r.summary.failed, 0, "{:?}", r.summary);
    assert_eq!(r.summary.completed as usize, r.records.len());
    assert!(r.records.len() >= 18, "{}", r.records.len());
    for rec in &r.records {
        let t = rec.kv_transfer_ms.expect("every request crossed the link");
        assert!(rec.ttft_s.expect("ttft") * 1000.0 > t, "{rec:?}");
        assert!(rec.prompt_tokens.unwrap_or(0) > 0);
    }
    assert!(
        r.summary.cached_share_achieved.unwrap_or(0.0) > 0.3,
        "{:?}",
        r.summary.cached_share_achieved
    );
    let fleet = r.fleet.expect("fleet report");
    // Prefill instances count prompts; decode instances none.
    assert!(fleet.replicas[0].prompt_tokens + fleet.replicas[1].prompt_tokens > 0);
    assert_eq!(fleet.replicas[2].prompt_tokens + fleet.replicas[3].prompt_tokens, 0);
}

#[test]
fn bad_disaggregation_names_the_field() {
    let err = |dg: Disaggregation, replicas: u32| {
        simulate(&scenario(one(32, 4), replicas, Some(dg)))
            .expect_err("refused")
            .to_string()
    };
    let e = err(disagg(2, 0), 2);
    assert!(
        e.contains("fleet.disaggregation.decode_instances") && e.contains("decode instance"),
        "{e}"
    );
    let e = err(disagg(0, 2), 2);
    assert!(e.contains("fleet.disaggregation.prefill_instances"), "{e}");
    let e = err(disagg(1, 2), 2);
    assert!(e.contains("fleet.disaggregation.decode_instances"), "{e}");
    let e = err(
        Disaggregation {
            link_bytes_per_s: 0.0,
            ..disagg(1, 1)
        },
        2,
    );
    assert!(e.contains("fleet.disaggregation.link_bytes_per_s"), "{e}");
    let e = err(
        Disaggregation {
            kv_bytes_per_token: None,
            ..disagg(1, 1)
        },
        2,
    );
    assert!(e.contains("fleet.disaggregation.kv_bytes_per_token"), "{e}");
}

/// In JSON it sits in the fleet, and reads back as written.
#[test]
fn json_in_the_fleet() {
    let sc = scenario(one(32, 4), 2, Some(disagg(1, 1)));
    let v = serde_json::to_value(&sc).expect("json");
    assert_eq!(v["fleet"]["disaggregation"]["decode_instances"], 1, "{v}");
    assert!(v.get("disaggregation").is_none(), "{v}");
    let back: EngineScenario = serde_json::from_value(v).expect("reads back");
    assert_eq!(back, sc);
    // Without it, the JSON is as before.
    let plain = serde_json::to_value(scenario(one(32, 4), 2, None)).expect("json");
    assert!(plain["fleet"].get("disaggregation").is_none(), "{plain}");
}
