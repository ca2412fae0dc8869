//! Black-box tests of `loadshape catalog` and of `simulate` on a scenario that gives a deployment.

use std::process::Output;

mod common;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const EXAMPLE: &str = include_str!("../../examples/deployment-h100-llama8b.json");

#[test]
fn catalog_lists_gpus_and_models_with_sources() {
    let o = common::loadshape(&["catalog"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for name in [
        "a100-80gb",
        "h100-sxm",
        "h200",
        "b200",
        "l40s",
        "mi300x",
        "rtx-pro-6000",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "qwen3-8b",
        "qwen3-32b",
        "qwen3-30b-a3b",
        "qwen3-coder-480b-a35b",
        "gpt-oss-20b",
        "gpt-oss-120b",
        "deepseek-v3",
        "codellama-34b",
    ] {
        let source = text.lines().find(|l| l.starts_with(&format!("  {name}: ")));
        assert!(
            source.is_some_and(|l| l.contains("https://")),
            "{name} and its source:\n{text}"
        );
    }
    let o = common::loadshape(&["catalog", "gpus", "--json"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert!(v.get("models").is_none());
    let h100 = &v["gpus"][1];
    assert_eq!(h100["name"], "h100-sxm");
    assert_eq!(h100["hbm_bytes_per_s"], 3.35e12);
    // Memory is the total the driver reports (nvidia-smi MiB, rocm-smi bytes), not the datasheet's decimal GB.
    let mib = 1_048_576.0;
    for (name, bytes) in [
        ("a100-80gb", 81_920.0 * mib),
        ("h100-sxm", 81_559.0 * mib),
        ("h200", 143_771.0 * mib),
        ("b200", 183_359.0 * mib),
        ("l40s", 46_068.0 * mib),
        ("mi300x", 206_141_652_992.0),
        ("rtx-pro-6000", 97_887.0 * mib),
    ] {
        let g = v["gpus"]
            .as_array()
            .expect("gpus")
            .iter()
            .find(|g| g["name"] == name)
            .expect("listed");
        assert_eq!(g["hbm_bytes"].as_f64(), Some(bytes), "{name}: {g}");
    }
    let o = common::loadshape(&["catalog", "gpus"], None);
    let text = stdout(&o);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    // name, bf16, fp8, fp4, mem GB, ...
    assert_eq!(row("h200")[4], "151", "{text}");
    assert_eq!(row("b200")[4], "192", "{text}");
    assert_eq!(row("mi300x")[4], "206", "{text}");
    assert_eq!(row("rtx-pro-6000")[4], "103", "{text}");
    let o = common::loadshape(&["catalog", "models", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let ds = v["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["name"] == "deepseek-v3")
        .expect("listed");
    assert_eq!(ds["total_params"], 671_025_397_760u64);
    assert_eq!(ds["shape"]["attention"]["kind"], "mla");
}

#[test]
fn simulate_shows_a_deployments_derived_numbers() {
    let o = common::loadshape(&["simulate", "-"], Some(EXAMPLE));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("deployment: llama-3.1-8b on 1 x h100-sxm"), "{text}");
    assert!(text.contains("KV cache 28089 blocks x 16 = 449424 tokens"), "{text}");
    assert!(
        text.contains("decode batch 64 at 4096 ctx") && text.contains("prefill 2048 tokens"),
        "{text}"
    );
    let o = common::loadshape(&["simulate", "-", "--json"], Some(EXAMPLE));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let d = &v["deployment"];
    assert_eq!(d["kv_blocks"], 28_089);
    assert_eq!(d["samples"][0]["bound"], "memory");
    assert_eq!(d["samples"][3]["bound"], "compute");
    assert!(v["summary"]["completed"].as_u64().unwrap_or(0) > 0, "{v}");
}

#[test]
fn a_bad_deployment_is_named() {
    let bad = EXAMPLE.replace("\"h100-sxm\"", "\"h300\"");
    let o = common::loadshape(&["simulate", "-"], Some(&bad));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("deployment.gpu names no known GPU (got \"h300\"; known: a100-80gb"),
        "{e}"
    );
}
