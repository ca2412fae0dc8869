//! "P/D vs co-located": one click from an engine result with a deployment into Compare. A is the fleet co-located
//! (every replica prefills and decodes), B the same GPUs split into prefill and decode instances with the
//! simulator's prefill/decode disaggregation (`"disaggregation"` in the fleet, docs/simulator.md); the model's KV
//! bytes per token come from the deployment's roofline.

use serde_json::{Value, json};
use shared::scenario::Scenario;

/// The link B assumes between its prefill and decode instances: 50 GB/s (400 Gb/s RDMA) and 0.5 ms per transfer.
pub const LINK_BYTES_PER_S: f64 = 5e10;
pub const LINK_LATENCY_MS: f64 = 0.5;

/// `(A, B, label)` for the scenario `j`: A its fleet co-located on `n` replicas (its own, at least 2: one GPU
/// cannot be split), B the same `n` as ⌊n/2⌋ prefill + ⌈n/2⌉ decode instances; or why not (B is not a valid
/// scenario, say the profile has no roofline to take the KV size from).
pub fn pd_vs_colocated(j: &Value) -> Result<(Value, Value, String), String> {
    let n = j.pointer("/fleet/replicas").and_then(Value::as_u64).unwrap_or(1).max(2);
    let mut a = j.clone();
    match a.get_mut("fleet").and_then(Value::as_object_mut) {
        Some(f) => {
            f.insert("replicas".into(), Value::from(n));
            f.remove("disaggregation");
        }
        None => {
            let mut f = crate::model::compute::default_fleet();
            f["replicas"] = Value::from(n);
            a["fleet"] = f;
        }
    }
    let (p, d) = (n / 2, n - n / 2);
    let mut b = a.clone();
    b["fleet"]["disaggregation"] = json!({
        "prefill_instances": p,
        "decode_instances": d,
        "link_bytes_per_s": LINK_BYTES_PER_S,
        "link_latency_ms": LINK_LATENCY_MS,
    });
    for (side, v) in [("A", &a), ("B", &b)] {
        Scenario::from_value(v.clone()).map_err(|e| format!("{side} is not a valid scenario: {e}"))?;
    }
    Ok((a, b, format!("{n} replicas vs P/D {p} + {d}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment_scenario() -> Value {
        let text = include_str!("../../../examples/deployment-h100-llama8b.json");
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_same_gpus_co_located_and_split() {
        let j = deployment_scenario();
        let (a, b, label) = pd_vs_colocated(&j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(label, "2 replicas vs P/D 1 + 1");
        assert_eq!(a["fleet"]["replicas"], 2);
        assert_eq!(b["fleet"]["replicas"], 2);
        assert!(a["fleet"].get("disaggregation").is_none());
        let dg = &b["fleet"]["disaggregation"];
        assert_eq!(dg["prefill_instances"], 1);
        assert_eq!(dg["decode_instances"], 1);
        // Only the split differs.
        let changes = crate::compare::changed_fields(&a, &b);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].0, "fleet.disaggregation");
        // A fleet of five: 2 prefill + 3 decode on the same five GPUs; a split fleet's own split is undone in A.
        let mut five = b.clone();
        five["fleet"]["replicas"] = Value::from(5);
        five["fleet"]["disaggregation"]["decode_instances"] = Value::from(4);
        let (a, b, label) = pd_vs_colocated(&five).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(label, "5 replicas vs P/D 2 + 3");
        assert!(a["fleet"].get("disaggregation").is_none());
        assert_eq!(b["fleet"]["disaggregation"]["decode_instances"], 3);
    }

    #[test]
    fn a_profile_without_a_roofline_cannot_be_split() {
        let j = json!({"model": "engine", "workload": {"kind": "poisson", "num_requests": 10, "rate_rps": 1.0},
                       "profile": shared::engine::presets::laptop_demo()});
        let err = pd_vs_colocated(&j).err().unwrap_or_default();
        assert!(err.contains("kv_bytes_per_token"), "{err}");
    }
}
