//! Prefill/decode disaggregation live: `sim-server --fleet` with a P/D fleet (one prefill and one decode instance,
//! a slow link) serves a Poisson run; `replay` records each request's `kv_transfer_ms` from the server's
//! `x-kv-transfer-ms` header; `/metrics` and the request log count the same transfers; and `predict --fleet` of
//! the same fleet matches the live TTFT, while a fleet with a 4× faster link (a wrong transfer model) does not.

use loadshape::replay::records::read_records;
use loadshape::sim_server::{Config, EngineChoice, RequestLogLine};
use serde_json::{Value, json};
use shared::engine::{Disaggregation, EngineProfile, FleetSpec, Router};

mod common;
#[path = "common/sim_server.rs"]
mod sim_server_helper;

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/run_bin.rs"]
mod run_bin;
use scratch::Scratch;

const KV_BYTES: f64 = 131_072.0;
const LINK_BYTES_PER_S: f64 = 2e9;
const LINK_LATENCY_MS: f64 = 20.0;
/// How far predict's TTFT p50 may be from the live one.
const TOLERANCE: f64 = 0.15;

fn profile() -> EngineProfile {
    EngineProfile {
        name: "pd".into(),
        basis: "test".into(),
        block_size: 16,
        num_kv_blocks: 20_000,
        max_num_seqs: 16,
        max_num_batched_tokens: 8192,
        max_model_len: Some(16_384),
        step_fixed_ms: 6.0,
        per_seq_ms: 0.5,
        per_ctx_token_ms: 0.0005,
        prefill_tokens_per_ms: 20.0,
        prefill_fixed_ms: 2.0,
        enable_prefix_caching: true,
        ..shared::engine::presets::laptop_demo()
    }
}

fn fleet_json(link_bytes_per_s: f64) -> Value {
    json!({"replicas": 2, "router": "least_outstanding",
           "disaggregation": {"prefill_instances": 1, "decode_instances": 1, "link_bytes_per_s": link_bytes_per_s,
                              "link_latency_ms": LINK_LATENCY_MS, "kv_bytes_per_token": KV_BYTES}})
}

async fn replay(base: &str, scenario: &std::path::Path, out: &std::path::Path) {
    run_bin::loadshape_ok(
        &[
            "replay",
            "--url",
            base,
            "--model",
            "sim",
            "--out",
            &out.to_string_lossy(),
            "--scenario",
            &scenario.to_string_lossy(),
            "--quiet",
        ],
        120,
    )
    .await;
}

fn ttft_p50_error(v: &Value) -> f64 {
    v["errors"]["ttft_p50_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no ttft_p50_ms error: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pd_sim_server_reports_each_transfer_and_predict_matches_it() {
    let dir = Scratch::new("pd-sim");
    let log = dir.join("server.jsonl");
    let s = sim_server_helper::start(Config {
        engine: EngineChoice::Fleet {
            profile: Box::new(profile()),
            fleet: FleetSpec {
                replicas: 2,
                router: Router::LeastOutstanding,
                load_cap: 1.5,
                profiles: Vec::new(),
            },
            disaggregation: Some(Disaggregation {
                prefill_instances: 1,
                decode_instances: 1,
                link_bytes_per_s: LINK_BYTES_PER_S,
                link_latency_ms: LINK_LATENCY_MS,
                kv_bytes_per_token: Some(KV_BYTES),
            }),
        },
        request_log: Some(log.clone()),
        ..Config::default()
    })
    .await;
    let scenario = json!({
        "model": "engine", "seed": 5, "counterfactuals": false,
        "workload": {"kind": "poisson", "num_requests": 30, "rate_rps": 4.0,
                     "prompt": {"dist": "uniform", "min": 1000, "max": 3000},
                     "output": {"dist": "uniform", "min": 16, "max": 48}},
        "profile": profile(),
        "slo": {"ttft_ms": 1000.0, "tpot_ms": 50.0}
    });
    let scenario_path = dir.join("scenario.json");
    std::fs::write(&scenario_path, scenario.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join("run.jsonl");
    replay(&s.base, &scenario_path, &out).await;
    let (recs, bad) = read_records(&out).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty());
    assert_eq!(recs.len(), 30);
    // Each record's transfer is the link's for its prompt, and part of its TTFT.
    let dg = Disaggregation {
        prefill_instances: 1,
        decode_instances: 1,
        link_bytes_per_s: LINK_BYTES_PER_S,
        link_latency_ms: LINK_LATENCY_MS,
        kv_bytes_per_token: Some(KV_BYTES),
    };
    let mut total_ms = 0.0;
    for r in &recs {
        assert!(r.ok, "{r:?}");
        let prompt = r.prompt_tokens.unwrap_or_else(|| panic!("usage: {r:?}"));
        let want = dg.transfer_ms(prompt, KV_BYTES);
        let got = r.kv_transfer_ms.unwrap_or_else(|| panic!("kv_transfer_ms: {r:?}"));
        assert!((got - want).abs() < 1e-9, "{got} vs {want}: {r:?}");
        let ttft_ms = r.ttft_s.unwrap_or_default() * 1000.0;
        assert!(ttft_ms > got, "TTFT {ttft_ms} ms holds the transfer {got} ms: {r:?}");
        total_ms += got;
    }
    // `summary.json` carries the transfers and the replicas the server named, as the one scorer reads the records.
    let summary: Value = serde_json::from_slice(
        &std::fs::read(dir.join("run.jsonl.summary.json")).unwrap_or_else(|e| panic!("summary.json: {e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let t = shared::metrics::replicas::kv_transfer_summary(&recs).unwrap_or_else(|| panic!("transfers"));
    assert_eq!(t.transfers, 30);
    assert_eq!(
        summary["kv_transfer"],
        serde_json::to_value(t).unwrap_or_default(),
        "{summary}"
    );
    assert_eq!(
        summary["replicas"],
        serde_json::to_value(shared::metrics::replicas::replica_split(&recs)).unwrap_or_default(),
        "{summary}"
    );
    assert_eq!(
        summary["replicas"][0]["requests"], 30,
        "one prefill instance: {summary}"
    );
    assert_eq!(summary["sessions_on_several_replicas"], 0);
    assert!(summary.get("fleet").is_none(), "the client did not route: {summary}");
    // A second run, one request at a time (what calibrate's prefill fit needs: requests alone on the server).
    let alone = json!({
        "model": "engine", "seed": 6, "counterfactuals": false,
        "workload": {"kind": "closed_loop", "users": 1, "num_requests": 12,
                     "prompt": {"dist": "uniform", "min": 300, "max": 4000},
                     "output": {"dist": "uniform", "min": 8, "max": 16}},
        "profile": profile()
    });
    let alone_path = dir.join("alone.json");
    std::fs::write(&alone_path, alone.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let alone_out = dir.join("alone.jsonl");
    replay(&s.base, &alone_path, &alone_out).await;
    let (alone_recs, _) = read_records(&alone_out).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(alone_recs.len(), 12);
    let total_ms = total_ms
        + alone_recs
            .iter()
            .map(|r| r.kv_transfer_ms.unwrap_or_else(|| panic!("kv_transfer_ms: {r:?}")))
            .sum::<f64>();
    // `/metrics` counts the same transfers and time.
    let metrics = reqwest::get(format!("{}/metrics", s.origin))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let value = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b'{'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    assert_eq!(value("loadshape_sim:kv_transfers_total"), 42.0, "{metrics}");
    let secs = value("loadshape_sim:kv_transfer_seconds_total");
    assert!((secs - total_ms / 1000.0).abs() < 1e-3, "{secs} vs {total_ms} ms");
    // The request log's lines carry them too.
    drop(s);
    let lines: Vec<RequestLogLine> = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 42);
    for l in &lines {
        let want = dg.transfer_ms(u64::from(l.prompt_tokens), KV_BYTES);
        assert_eq!(l.kv_transfer_ms, Some(want), "{l:?}");
    }

    // predict with the same P/D fleet matches the live TTFT; with a link 4× as fast it does not.
    let predict = |fleet: Value, name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, fleet.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let o = common::loadshape(
            &[
                "predict",
                &scenario_path.to_string_lossy(),
                "--fleet",
                &path.to_string_lossy(),
                "--against",
                &out.to_string_lossy(),
                "--seeds",
                "3",
                "--json",
            ],
            None,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap_or_else(|e| panic!("{e}"))
    };
    let right = predict(fleet_json(LINK_BYTES_PER_S), "fleet.json");
    let wrong = predict(fleet_json(4.0 * LINK_BYTES_PER_S), "fast-link.json");
    let (e_right, e_wrong) = (ttft_p50_error(&right), ttft_p50_error(&wrong));
    eprintln!(
        "TTFT p50: live {} ms, predicted {} ms ({:+.1} %); with a 4x faster link {} ms ({:+.1} %)",
        right["live"]["ttft_p50_ms"],
        right["simulated"]["ttft_p50_ms"],
        e_right * 100.0,
        wrong["simulated"]["ttft_p50_ms"],
        e_wrong * 100.0
    );
    assert!(e_right.abs() <= TOLERANCE, "TTFT p50 error {e_right}: {right}");
    assert!(e_wrong.abs() > TOLERANCE, "a wrong link still matched: {e_wrong}");
    // `simulate --like` the live run's own requests with the same fleet: its TTFT p50 too.
    let o = common::loadshape(
        &[
            "simulate",
            "--like",
            &out.to_string_lossy(),
            &scenario_path.to_string_lossy(),
            "--fleet",
            &dir.join("fleet.json").to_string_lossy(),
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let like: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    let live_p50 = right["live"]["ttft_p50_ms"].as_f64().unwrap_or(f64::NAN);
    let like_p50 = like["summary"]["ttft_p50_ms"].as_f64().unwrap_or(f64::NAN);
    assert!(
        (like_p50 / live_p50 - 1.0).abs() <= TOLERANCE,
        "simulate --like: TTFT p50 {like_p50} vs live {live_p50}"
    );
    // Decode is the decode instance's in both: TPOT p50 within 10 %.
    let tpot = right["errors"]["tpot_p50_ms"].as_f64().unwrap_or(f64::NAN);
    assert!(tpot.abs() <= 0.10, "TPOT p50 error {tpot}: {right}");

    // calibrate against the P/D run: the records' transfers are taken out of TTFT, so the fitted profile is the
    // instances' own and, predicted with the same fleet, matches the run again.
    let cal = dir.join("cal");
    let o = common::loadshape(
        &[
            "calibrate",
            "--from",
            &out.to_string_lossy(),
            "--from",
            &alone_out.to_string_lossy(),
            "--out",
            &cal.to_string_lossy(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fit: Value = serde_json::from_str(&std::fs::read_to_string(cal.join("fit.json")).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fit["notes"]
            .to_string()
            .contains("prefill/decode disaggregation: 42 records"),
        "{}",
        fit["notes"]
    );
    let fitted = cal.join("profile.json");
    let path = dir.join("fleet.json");
    let o = common::loadshape(
        &[
            "predict",
            &scenario_path.to_string_lossy(),
            "--profile",
            &fitted.to_string_lossy(),
            "--fleet",
            &path.to_string_lossy(),
            "--against",
            &out.to_string_lossy(),
            "--seeds",
            "3",
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    let e = ttft_p50_error(&v);
    eprintln!(
        "calibrated: prefill {} tok/ms (true 20), TTFT p50 predicted {} ms ({:+.1} %)",
        fit["profile"]["prefill_tokens_per_ms"],
        v["simulated"]["ttft_p50_ms"],
        e * 100.0
    );
    assert!(e.abs() <= TOLERANCE, "calibrated TTFT p50 error {e}: {v}");
}

#[test]
fn bad_fleets_are_refused_by_field() {
    let dir = Scratch::new("pd-bad");
    let sc = dir.join("sc.json");
    std::fs::write(
        &sc,
        json!({"model": "engine", "counterfactuals": false,
               "workload": {"kind": "poisson", "num_requests": 5, "rate_rps": 1.0,
                            "prompt": {"dist": "uniform", "min": 100, "max": 200},
                            "output": {"dist": "uniform", "min": 4, "max": 8}},
               "profile": profile()})
        .to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut no_decode = fleet_json(LINK_BYTES_PER_S);
    no_decode["disaggregation"]["decode_instances"] = json!(0);
    let mut no_link = fleet_json(LINK_BYTES_PER_S);
    no_link["disaggregation"]["link_bytes_per_s"] = json!(0.0);
    for (fleet, field) in [
        (no_decode, "fleet.disaggregation.decode_instances"),
        (no_link, "fleet.disaggregation.link_bytes_per_s"),
    ] {
        let path = dir.join("fleet.json");
        std::fs::write(&path, fleet.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let p = path.to_string_lossy().to_string();
        let sc = sc.to_string_lossy().to_string();
        for args in [
            vec!["sim-server", "--port", "0", "--fleet", &p],
            vec!["predict", &sc, "--fleet", &p],
            vec!["simulate", &sc, "--fleet", &p],
        ] {
            let o = common::loadshape(&args, None);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{args:?} accepted {fleet}");
            assert!(err.contains(field), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}
