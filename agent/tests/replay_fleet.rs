//! `loadshape replay --url A --url B … --router POLICY` against two in-process `sim-server`s (127.0.0.1:0): the
//! requests are spread by the simulator's routing policies (`shared::engine::FleetSpec::pick`), every record names
//! its replica, `summary.json` and `report` show each replica's share, `session_affinity` keeps every step of a
//! session on one replica and gets a higher cached share than `round_robin`, and the live per-replica split equals
//! the simulated fleet's for the same scenario.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use loadshape::sim_server::Config;
use shared::engine::{EngineScenario, FleetSpec, Router, SimOptions};
use shared::metrics::replicas::{ReplicaSplit, replica_split, sessions_on_several_replicas};
use shared::record::RequestRecord;
use shared::workload::{SessionDist, SessionWorkload, Workload};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

#[path = "common/files.rs"]
mod files;
#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/sim_server.rs"]
mod sim_server_helper;

use files::{json_file, records};
use scratch::Scratch;
use sim_server_helper::Sim;

async fn sim() -> Sim {
    // Real time: the sessions' first steps are all in flight together, so `least_outstanding` spreads them the
    // way the simulator does.
    sim_server_helper::start(Config::default()).await
}

fn dir(name: &str) -> Scratch {
    Scratch::new(&format!("fleet-{name}"))
}

/// Three identical sessions of 4 steps, all starting at once, behind a fleet of two replicas: a small base and a
/// large tool output per step, so most of a prompt is what the session's previous steps sent (three sessions, so
/// that round robin, sending them in turn, moves each session to the other replica at every step).
fn scenario(router: Router) -> EngineScenario {
    EngineScenario {
        workload: Workload::Sessions(SessionWorkload {
            sessions: 3,
            steps: 4,
            base_tokens: 200,
            gen_tokens: 16,
            tool_tokens: 600,
            think_s: 0.2,
            dist: SessionDist::Uniform,
            spread: 0.0,
            respawn: false,
            stagger_s: 0.0,
            duration_s: 120.0,
            ..SessionWorkload::default()
        }),
        profile: loadshape::sim_server::default_profile(),
        slo: Default::default(),
        seed: 3,
        counterfactuals: false,
        fleet: Some(FleetSpec {
            replicas: 2,
            router,
            load_cap: 1.5,
            profiles: Vec::new(),
        }),
        deployment: None,
        disaggregation: None,
    }
}

fn write_scenario(d: &Path, sc: &EngineScenario) -> PathBuf {
    let mut v = serde_json::to_value(sc).unwrap_or_else(|e| panic!("{e}"));
    v["model"] = "engine".into();
    let p = d.join("scenario.json");
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    p
}

/// `loadshape ARGS`: (exit code, stdout, stderr).
async fn run(args: &[String]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("loadshape {args:?} did not finish in 120 s"))
        .unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Replays `sc` over the two sims (the router from the scenario's fleet, or `--router` when given), with a content
/// nonce of its own (the sims' caches keep earlier runs' text: a run must not hit what another run sent).
async fn replay(sims: &[Sim], d: &Path, name: &str, sc: &EngineScenario, router_flag: Option<&str>) -> PathBuf {
    replay_with(sims, d, name, sc, router_flag, &["--metrics-url", "none"]).await
}

/// [`replay`] with `extra` flags instead of `--metrics-url none`.
async fn replay_with(
    sims: &[Sim],
    d: &Path,
    name: &str,
    sc: &EngineScenario,
    router_flag: Option<&str>,
    extra: &[&str],
) -> PathBuf {
    let path = write_scenario(d, sc);
    let out = d.join(format!("{name}.jsonl"));
    let nonce = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 1_000_000_007;
    let nonce = nonce.to_string();
    let mut args = strings(&[
        "replay",
        "--model",
        "sim",
        "--quiet",
        "--match-tokenizer",
        "off",
        "--nonce",
        &nonce,
    ]);
    for s in sims {
        args.extend(["--url".into(), s.base.clone()]);
    }
    args.extend(["--scenario".into(), path.display().to_string()]);
    args.extend(["--out".into(), out.display().to_string()]);
    args.extend(strings(extra));
    if let Some(r) = router_flag {
        args.extend(["--router".into(), r.into()]);
    }
    let (code, _, err) = run(&args).await;
    assert_eq!(code, 0, "{name}: {err}");
    assert_eq!(
        err.contains("fleet: 2 replicas"),
        sims.len() == 2,
        "{name}: a run over two URLs names its fleet: {err}"
    );
    out
}

fn cached_share(recs: &[RequestRecord]) -> f64 {
    let ok = recs.iter().filter(|r| r.ok);
    let (p, c) = ok.fold((0u64, 0u64), |(p, c), r| {
        (p + r.prompt_tokens.unwrap_or(0), c + r.cached_tokens.unwrap_or(0))
    });
    c as f64 / p.max(1) as f64
}

fn requests_per_replica(split: &[ReplicaSplit]) -> Vec<(u32, u64)> {
    split.iter().map(|x| (x.replica, x.requests)).collect()
}

fn simulated(sc: &EngineScenario) -> Vec<RequestRecord> {
    let r = shared::engine::simulate_with(sc, SimOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let f = r.fleet.as_ref().unwrap_or_else(|| panic!("a fleet report"));
    assert_eq!(f.replicas.len(), 2);
    assert!(
        r.records.iter().all(|x| x.replica.is_some()),
        "simulated fleet records name their replica"
    );
    r.records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_affinity_keeps_sessions_whole_and_beats_round_robin() {
    let sims = [sim().await, sim().await];
    let d = dir("affinity");
    let aff_sc = scenario(Router::SessionAffinity);
    let affinity = replay(&sims, &d, "affinity", &aff_sc, None).await;
    // The same scenario, the router from the flag.
    let rr = replay(&sims, &d, "rr", &aff_sc, Some("round_robin")).await;
    let (a, r) = (records(&affinity), records(&rr));
    for recs in [&a, &r] {
        assert_eq!(recs.len(), 12, "3 sessions x 4 steps");
        assert!(recs.iter().all(|x| x.ok && x.replica.is_some_and(|i| i < 2)));
    }
    // Affinity: every step of a session on the replica of its first.
    assert_eq!(sessions_on_several_replicas(&a), 0);
    for s in 0..3u64 {
        let mine: Vec<u32> = a.iter().filter(|x| x.session == s).filter_map(|x| x.replica).collect();
        assert!(mine.windows(2).all(|w| w[0] == w[1]), "session {s}: {mine:?}");
    }
    // Round robin sends a session's consecutive steps to both replicas: it splits sessions and misses the cache.
    assert!(sessions_on_several_replicas(&r) > 0);
    let (ca, cr) = (cached_share(&a), cached_share(&r));
    assert!(ca > cr + 0.1, "affinity cached share {ca:.3} vs round robin {cr:.3}");

    // The live split equals the simulated fleet's for the same scenario (requests per replica: affinity puts the
    // sessions, all started at once, on the least outstanding replica in turn, 0, 1, 0), and the simulator ranks
    // the routers the same way.
    let rr_sc = scenario(Router::RoundRobin);
    let (sim_a, sim_r) = (simulated(&aff_sc), simulated(&rr_sc));
    assert_eq!(
        requests_per_replica(&replica_split(&a)),
        requests_per_replica(&replica_split(&sim_a))
    );
    assert_eq!(
        requests_per_replica(&replica_split(&r)),
        requests_per_replica(&replica_split(&sim_r))
    );
    assert_eq!(requests_per_replica(&replica_split(&a)), vec![(0, 8), (1, 4)]);
    assert_eq!(sessions_on_several_replicas(&sim_a), 0);
    assert!(cached_share(&sim_a) > cached_share(&sim_r));
    // Each replica's cached share live is the simulated one's (the same sessions on the same replicas; content
    // placement, not timing, decides the hits on these uncrowded replicas): within 5 points.
    for (live, simulated) in [(&a, &sim_a), (&r, &sim_r)] {
        for (l, s) in replica_split(live).iter().zip(&replica_split(simulated)) {
            assert!(
                (l.cached_share - s.cached_share).abs() < 0.05,
                "replica {}: live cached share {:.3}, simulated {:.3}",
                l.replica,
                l.cached_share,
                s.cached_share
            );
        }
    }
    eprintln!(
        "cached share, live: affinity {ca:.3}, round robin {cr:.3}; simulated: affinity {:.3}, round robin {:.3}",
        cached_share(&sim_a),
        cached_share(&sim_r)
    );

    // summary.json carries the fleet: URLs, router, each replica's share from the records.
    let sum = json_file(&PathBuf::from(format!("{}.summary.json", affinity.display())));
    let f = &sum["fleet"];
    assert_eq!(f["router"], "session_affinity");
    assert_eq!(f["urls"], serde_json::json!([sims[0].base, sims[1].base]));
    assert_eq!(f["sessions_on_several_replicas"], 0);
    let split: Vec<ReplicaSplit> = serde_json::from_value(f["replicas"].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(split, replica_split(&a));

    // `report` shows the same per replica, as text and JSON.
    let (code, text, err) = run(&strings(&["report", &affinity.display().to_string()])).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(" Replicas ") && text.contains("Sessions on more than one replica:"),
        "{text}"
    );
    let (code, js, err) = run(&strings(&["report", &affinity.display().to_string(), "--json"])).await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&js).unwrap_or_else(|e| panic!("{e}"));
    let from_report: Vec<ReplicaSplit> =
        serde_json::from_value(v["replicas"].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_report, split);
}

/// `prefix_aware` live: the client's own view of what it sent sends a session's later steps where its prefix went
/// (the load cap aside), so it keeps most sessions whole and caches more than round robin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_aware_follows_what_was_sent() {
    let sims = [sim().await, sim().await];
    let d = dir("prefix");
    let sc = scenario(Router::PrefixAware);
    let out = replay(&sims, &d, "prefix", &sc, None).await;
    let recs = records(&out);
    assert_eq!(recs.len(), 12);
    let rr = replay(&sims, &d, "rr", &sc, Some("round_robin")).await;
    let (cp, cr) = (cached_share(&recs), cached_share(&records(&rr)));
    eprintln!(
        "cached share, live: prefix_aware {cp:.3} (sessions split: {}), round robin {cr:.3}",
        sessions_on_several_replicas(&recs)
    );
    assert!(cp > cr, "prefix_aware {cp:.3} vs round robin {cr:.3}");
    let sum = json_file(&PathBuf::from(format!("{}.summary.json", out.display())));
    assert_eq!(sum["fleet"]["router"], "prefix_aware");
    assert!(sum["fleet"]["prefix_view_tokens"].as_u64().is_some_and(|t| t > 0));
}

/// One URL is today's run: no `replica` in the records, no `fleet` in summary.json; the fleet flags need several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_url_is_unchanged_and_fleet_flags_need_several() {
    let s = sim().await;
    let d = dir("one");
    let out = d.join("one.jsonl");
    let base = strings(&[
        "replay",
        "--url",
        &s.base,
        "--model",
        "sim",
        "--quiet",
        "--match-tokenizer",
        "off",
        "--sessions",
        "2",
        "--steps",
        "2",
        "--base",
        "300",
        "--gen",
        "8",
        "--tool",
        "50",
        "--think",
        "0",
        "--stagger",
        "0",
        "--max-seconds",
        "30",
        "--seed",
        "1",
        "--nonce",
        "1",
        "--metrics-url",
        "none",
    ]);
    let mut args = base.clone();
    args.extend(["--out".into(), out.display().to_string()]);
    let (code, _, err) = run(&args).await;
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(!text.contains("\"replica\""), "{text}");
    let sum = json_file(&PathBuf::from(format!("{}.summary.json", out.display())));
    assert!(sum.get("fleet").is_none());
    for (flags, want) in [
        (
            vec!["--router", "round_robin"],
            "--router spreads requests over several targets",
        ),
        (vec!["--load-cap", "2"], "--load-cap spreads"),
    ] {
        let mut a = base.clone();
        a.extend(["--out".into(), d.join("x.jsonl").display().to_string()]);
        a.extend(flags.iter().map(|x| x.to_string()));
        let (code, _, err) = run(&a).await;
        assert_ne!(code, 0);
        assert!(err.contains(want), "{err}");
    }
    let mut a = base.clone();
    a.extend(["--out".into(), d.join("x.jsonl").display().to_string()]);
    a.extend(strings(&["--url", &s.base, "--router", "round_robin"]));
    let (code, _, err) = run(&a).await;
    assert_ne!(code, 0);
    assert!(err.contains("is given twice"), "{err}");
    let mut a = base;
    a.extend(["--out".into(), d.join("x.jsonl").display().to_string()]);
    a.extend(strings(&["--url", "http://127.0.0.1:9/v1", "--router", "nearest"]));
    let (code, _, err) = run(&a).await;
    assert_ne!(code, 0);
    assert!(err.contains("--router must be one of round_robin"), "{err}");
}

/// With `/metrics` scraped (the default), every replica is scraped at its own URL: `server.json` keeps each
/// replica's scrapes and report under `replicas`, and `summary.json`'s `fleet`, `report` and `report --json` give
/// each replica's server-side figures beside its share of the records. Each replica's server counted exactly the
/// prompt and cached tokens of the records routed to it (so the scrapes are the right replica's, not one server's
/// twice). One URL keeps its files as before: no `replicas` in `server.json`, no `fleet` in `summary.json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_is_scraped_and_reported() {
    let sims = [sim().await, sim().await];
    let d = dir("scrape");
    let sc = scenario(Router::SessionAffinity);
    // Scrapes every 0.2 s: some land while the sessions run.
    let out = replay_with(&sims, &d, "scraped", &sc, None, &["--scrape-interval", "0.2"]).await;
    let recs = records(&out);
    assert_eq!(recs.len(), 12);
    let server = json_file(&PathBuf::from(format!("{}.server.json", out.display())));
    let reps = server["replicas"]
        .as_array()
        .unwrap_or_else(|| panic!("server.json replicas: {server}"));
    assert_eq!(reps.len(), 2);
    for (i, r) in reps.iter().enumerate() {
        assert_eq!(r["replica"], i as u64);
        assert_eq!(r["metrics_url"], format!("{}/metrics", sims[i].origin));
        assert!(r["snapshots"].as_array().is_some_and(|s| s.len() >= 2), "{r}");
        let report = &r["report"];
        assert_eq!(report["failed_scrapes"], 0, "{report}");
        assert_eq!(report["family"], "vllm");
        // What the records routed to replica i carried, as that replica's server counted it.
        let mine = recs.iter().filter(|x| x.replica == Some(i as u32));
        let (prompt, cached) = mine.fold((0u64, 0u64), |(p, c), x| {
            (p + x.prompt_tokens.unwrap_or(0), c + x.cached_tokens.unwrap_or(0))
        });
        assert!(prompt > 0, "replica {i} got requests");
        assert_eq!(
            report["prompt_tokens"].as_f64(),
            Some(prompt as f64),
            "replica {i}: {report}"
        );
        let hit = report["prefix_cache_hit_rate"].as_f64().unwrap_or(f64::NAN);
        assert!(
            (hit - cached as f64 / prompt as f64).abs() < 1e-12,
            "replica {i}: hit rate {hit} vs records {cached}/{prompt}"
        );
        assert!(
            report["kv_cache_usage_max"]
                .as_f64()
                .is_some_and(|u| (0.0..=1.0).contains(&u))
        );
        assert!(report["preemptions"].as_f64().is_some(), "{report}");
    }
    // The top-level report is replica 0's, as with one URL.
    assert_eq!(server["metrics_url"], reps[0]["metrics_url"]);
    assert_eq!(server["report"], reps[0]["report"]);

    // summary.json's fleet rows carry each replica's server report; report --json's replicas the same.
    let sum = json_file(&PathBuf::from(format!("{}.summary.json", out.display())));
    let rows = sum["fleet"]["replicas"].as_array().unwrap_or_else(|| panic!("{sum}"));
    assert_eq!(rows.len(), 2);
    for row in rows {
        let i = row["replica"].as_u64().unwrap_or(99) as usize;
        assert_eq!(row["server"], reps[i]["report"], "summary.json replica {i}");
    }
    let split: Vec<ReplicaSplit> =
        serde_json::from_value(sum["fleet"]["replicas"].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        split,
        replica_split(&recs),
        "the records' split is unchanged beside the server figures"
    );
    let (code, js, err) = run(&strings(&["report", &out.display().to_string(), "--json"])).await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&js).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        v["replicas"], sum["fleet"]["replicas"],
        "report --json rows = summary.json rows"
    );
    let (code, text, err) = run(&strings(&["report", &out.display().to_string()])).await;
    assert_eq!(code, 0, "{err}");
    assert!(text.contains(" Server side per replica (/metrics) "), "{text}");
    assert!(
        text.contains("replica 0)"),
        "the top-level server block says whose it is: {text}"
    );

    // Naming each replica's endpoint: once per --url, or refused by name.
    let m0 = format!("{}/metrics", sims[0].origin);
    let (code, _, err) = {
        let mut args = strings(&["replay", "--model", "sim", "--quiet", "--url", &sims[0].base, "--url"]);
        args.extend(strings(&[&sims[1].base, "--metrics-url", &m0, "--scenario"]));
        args.extend([
            write_scenario(&d, &sc).display().to_string(),
            "--out".into(),
            d.join("bad.jsonl").display().to_string(),
        ]);
        run(&args).await
    };
    assert_ne!(code, 0);
    assert!(err.contains("--metrics-url is given 1 times for 2 --url"), "{err}");

    // One URL, scraped: the files as before.
    let one = replay_with(&sims[..1], &d, "one-scraped", &sc, None, &["--scrape-interval", "0.2"]).await;
    let server = json_file(&PathBuf::from(format!("{}.server.json", one.display())));
    assert!(server.get("replicas").is_none(), "{server}");
    assert_eq!(server["metrics_url"], m0);
    let sum = json_file(&PathBuf::from(format!("{}.summary.json", one.display())));
    assert!(sum.get("fleet").is_none());
    let (code, text, _) = run(&strings(&["report", &one.display().to_string()])).await;
    assert_eq!(code, 0);
    assert!(!text.contains("per replica") && !text.contains("replica 0)"), "{text}");
}
