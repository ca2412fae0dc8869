//! The production [`Driver`]: a live run is [`replay::run()`] called in-process with [`ReplaySettings`] resolved
//! from the chosen target and the submitted scenario (no command line is built or parsed). The replay writes the
//! run's `records.jsonl` itself, hands each record to the run's viewers, and logs its notes through `tracing`
//! (nothing on stdout). The run's one summary is the store's `summary.json`, from `shared::metrics::summarize`,
//! exactly as `loadshape replay` and `loadshape report` score; the replay writes no `records.jsonl.summary.json`.
//!
//! A live capacity search is [`crate::capacity::run`] called the same way: its levels' record files and
//! `capacity.json` go to the run's folder, each finished level to the run's viewers.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use shared::metrics::summarize;
use shared::protocol::Limits;
use shared::record::RequestRecord;
use shared::scenario::Scenario;
use tokio::sync::watch;

use super::runs::{BoxFuture, CapacityJob, Driver, RunSink, Target};
use crate::capacity;
use crate::replay::fleet::{LiveFleet, default_metrics_urls};
use crate::replay::{self, Hooks, ReplaySettings, ScenarioOptions, TargetSettings, Verdict};

/// Runs scenarios with the replay client.
#[derive(Debug, Default)]
pub struct ReplayDriver {
    /// Longest a run may last, seconds.
    pub max_run_seconds: Option<f64>,
    /// Most requests in flight at once in a run (`--max-concurrent-requests-per-run`): admission checks the plan's
    /// estimate, and open-loop runs are held to it while they run (`ReplaySettings::max_concurrency`).
    pub max_in_flight: Option<u32>,
}

/// The settings of a live run of `scenario` against `target`, writing `records` (the run's `records.jsonl`), for
/// at most `max_run_seconds`: the scenario's traffic, seed and SLO; the target's URL, model, dialect, API key (read
/// from its variable now) and CA certificates; every other setting at `loadshape replay`'s defaults; no progress
/// line and no `<records>.summary.json`.
pub fn settings_for(
    target: &Target,
    scenario: &Scenario,
    records: &Path,
    max_run_seconds: Option<f64>,
) -> anyhow::Result<ReplaySettings> {
    let connect = target_settings(target)?;
    let source = records.with_file_name("scenario.json");
    let opts = ScenarioOptions {
        seed: None,
        max_seconds: max_run_seconds,
    };
    let mut s = ReplaySettings::for_scenario(
        connect,
        records.to_path_buf(),
        scenario,
        &source.display().to_string(),
        opts,
    )?;
    s.progress = false;
    s.write_summary = false;
    s.fleet = live_fleet(target, scenario)?;
    if let Some(f) = &s.fleet {
        s.metrics_url = f.metrics_urls.first().cloned();
    }
    Ok(s)
}

/// A fleet target's [`LiveFleet`] for `scenario`, as `replay --url A --url B ...` resolves it: the target's router
/// and load cap, else the scenario's `fleet`, else `round_robin` and 1.5; the client-side prefix view as large as
/// the scenario profile's KV cache (else `llama-3-8b-1xh100`'s); every replica scraped at its origin's `/metrics`.
/// `None` for a one-URL target.
pub fn live_fleet(target: &Target, scenario: &Scenario) -> anyhow::Result<Option<LiveFleet>> {
    use shared::engine::{FleetSpec, Router};
    let Some(tf) = &target.fleet else {
        return Ok(None);
    };
    let (scenario_fleet, scenario_kv) = match scenario {
        Scenario::Engine(e) => (
            e.fleet.clone(),
            Some(e.profile.num_kv_blocks.saturating_mul(u64::from(e.profile.block_size))),
        ),
        Scenario::Seed(_) => (None, None),
    };
    let spec = FleetSpec {
        replicas: tf.urls.len() as u32,
        router: tf
            .router
            .or(scenario_fleet.as_ref().map(|f| f.router))
            .unwrap_or(Router::RoundRobin),
        load_cap: tf
            .load_cap
            .or(scenario_fleet.as_ref().map(|f| f.load_cap))
            .unwrap_or(1.5),
        profiles: Vec::new(),
    };
    spec.validate()
        .map_err(|e| anyhow::anyhow!("target {}: fleet: {e}", target.name))?;
    let cache_tokens = scenario_kv.filter(|&t| t > 0).unwrap_or_else(|| {
        let p = shared::engine::presets::llama3_8b_h100();
        p.num_kv_blocks.saturating_mul(u64::from(p.block_size))
    });
    Ok(Some(LiveFleet {
        urls: tf.urls.clone(),
        spec,
        cache_tokens,
        metrics_urls: default_metrics_urls(&tf.urls).with_context(|| format!("target {}", target.name))?,
    }))
}

/// Where a configured target's requests go: its URL, model, dialect, API key (read from its variable now) and CA
/// certificates.
pub fn target_settings(target: &Target) -> anyhow::Result<TargetSettings> {
    let name = &target.name;
    let api_key = match &target.api_key_env {
        Some(var) => Some(std::env::var(var).with_context(|| format!("target {name}: ${var} is not set"))?),
        None => None,
    };
    let dialect = match target.dialect.as_str() {
        "" => replay::dialect::Dialect::Auto,
        d => d.parse().map_err(|e: String| anyhow::anyhow!("target {name}: {e}"))?,
    };
    let ca_certs = match &target.ca_cert {
        Some(path) => replay::tls::load_ca_certs(Path::new(path)).with_context(|| format!("target {name}"))?,
        None => Vec::new(),
    };
    Ok(TargetSettings {
        url: target.url.clone(),
        model: (!target.model.is_empty()).then(|| target.model.clone()),
        dialect,
        api_key,
        ca_certs,
    })
}

/// Concurrency a workload asks for ([`shared::workload::Workload::concurrency`]: session slots or closed-loop
/// users); 0 for open-loop arrivals, whose concurrency the server's speed sets (bounded by their rate).
fn concurrency(scenario: &Scenario) -> u32 {
    match scenario {
        Scenario::Seed(_) => 0,
        Scenario::Engine(e) => e.workload.concurrency().unwrap_or(0),
    }
}

/// The built-in `sim` target's engine for a run whose scenario is a fleet (more than one replica, or
/// `disaggregation`): the scenario's fleet of its profile behind one loopback endpoint, as `sim-server --fleet FILE`
/// serves it ([`crate::sim_server::fleet_engine`]), started for the run and stopped when this is dropped. Its
/// responses say the replica each request went to (`x-replica`) and, disaggregated, its KV transfer
/// (`x-kv-transfer-ms`), so the run's records carry `replica` and `kv_transfer_ms` as the simulated ones do.
pub struct SimFleet {
    /// Its `/v1` base.
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for SimFleet {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// [`SimFleet`] for a run of `scenario` on `target`: `None` unless the target is the built-in `sim` (one URL) and
/// the scenario's engine is a fleet. Every other run on `sim` keeps its shared engine.
pub async fn sim_fleet_for(target: &Target, scenario: &Scenario) -> anyhow::Result<Option<SimFleet>> {
    if !target.builtin || target.fleet.is_some() {
        return Ok(None);
    }
    let Scenario::Engine(e) = scenario else {
        return Ok(None);
    };
    let Some(fleet) = &e.fleet else {
        return Ok(None);
    };
    if !e.is_fleet() {
        return Ok(None);
    }
    shared::engine::validate_fleet(&e.profile, Some(fleet), e.disaggregation.as_ref())
        .map_err(|err| anyhow::anyhow!("the scenario's fleet: {err}"))?;
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .context("binding the sim target's fleet")?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let config = crate::sim_server::Config {
        engine: crate::sim_server::EngineChoice::Fleet {
            profile: Box::new(e.profile.clone()),
            fleet: fleet.clone(),
            disaggregation: e.disaggregation.clone(),
        },
        ..crate::sim_server::Config::default()
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let stopped = async {
            let _ = rx.await;
        };
        if let Err(e) = crate::sim_server::serve(listener, config, stopped).await {
            tracing::error!("the sim target's fleet stopped: {e}");
        }
    });
    Ok(Some(SimFleet { url, stop: Some(tx) }))
}

impl Driver for ReplayDriver {
    fn run(
        &self,
        target: Target,
        scenario: serde_json::Value,
        sink: RunSink,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<()>> {
        let (max_seconds, max_in_flight) = (self.max_run_seconds, self.max_in_flight);
        Box::pin(async move {
            let scenario = Scenario::from_value(scenario).map_err(|e| anyhow::anyhow!("the scenario: {e}"))?;
            // `sim` with a fleet scenario: that fleet, for this run (kept until the run ends).
            let sim_fleet = sim_fleet_for(&target, &scenario).await?;
            let target = match &sim_fleet {
                Some(f) => Target {
                    url: f.url.clone(),
                    ..target
                },
                None => target,
            };
            let mut settings = settings_for(&target, &scenario, sink.records_path(), max_seconds)
                .context("building the replay for this run")?;
            settings.max_concurrency = max_in_flight;
            let run_id = sink
                .run_dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let observer_sink = sink.clone();
            let hooks = Hooks {
                on_record: Some(Arc::new(move |r: &RequestRecord| observer_sink.push(r.clone()))),
                stop: Some(stop),
                interrupts: None,
                log: Some(Arc::new(move |m: &str| tracing::info!("run {run_id}: {m}"))),
            };
            let outcome = replay::run(settings, hooks).await?;
            drop(sim_fleet);
            match outcome.verdict() {
                Verdict::Measured => Ok(()),
                Verdict::Aborted => {
                    anyhow::bail!("the target stopped answering; this run did not measure anything (records kept)")
                }
                Verdict::NothingCompleted => {
                    anyhow::bail!("no request completed; this run did not measure anything (records kept)")
                }
            }
        })
    }

    fn validate(&self, scenario: &serde_json::Value, limits: &Limits) -> Result<(), String> {
        let scenario = Scenario::from_value(scenario.clone()).map_err(|e| e.to_string())?;
        let n = concurrency(&scenario);
        if n > limits.max_sessions_per_run {
            // Sessions with sub-agents: their children count (issue #44).
            let children = match &scenario {
                Scenario::Engine(e) => match &e.workload {
                    shared::workload::Workload::Sessions(w) => w.subagents.map(|a| (w.slot_count(), a.count)),
                    _ => None,
                },
                Scenario::Seed(_) => None,
            };
            let with = children.map_or(String::new(), |(slots, count)| {
                format!(" ({slots} sessions with {count} sub-agents each)")
            });
            return Err(format!(
                "the workload asks for {n} concurrent sessions/users{with}; this agent allows at most {} per run",
                limits.max_sessions_per_run
            ));
        }
        Ok(())
    }

    fn summarize(&self, scenario: &serde_json::Value, records: &[RequestRecord]) -> Option<serde_json::Value> {
        let slo = Scenario::from_value(scenario.clone())
            .map(|s| s.slo())
            .unwrap_or_default();
        serde_json::to_value(summarize(records, &slo)).ok()
    }

    fn writes_records(&self) -> bool {
        true
    }

    fn capacity(
        &self,
        target: Target,
        job: CapacityJob,
        sink: RunSink,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<serde_json::Value>> {
        let max_in_flight = self.max_in_flight;
        Box::pin(async move {
            if let Some(f) = &target.fleet {
                anyhow::bail!(
                    "target {} is a fleet of {} URLs: the live capacity search runs against one URL (pick a one-URL \
                     target; a fleet's live run lays over its simulation with start_run)",
                    target.name,
                    f.urls.len()
                );
            }
            let connect = target_settings(&target).context("building the capacity search for this run")?;
            let dir = sink.run_dir().to_path_buf();
            let run_id = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut options = job.options;
            options.max_concurrency = max_in_flight;
            let settings = capacity::Settings {
                plan: job.plan,
                target: connect,
                source: dir.join("scenario.json").display().to_string(),
                dir,
                options,
            };
            let (level_sink, record_sink) = (sink.clone(), sink);
            let hooks = capacity::CapacityHooks {
                on_level: Some(Arc::new(move |i, l| level_sink.level(i, l))),
                on_record: Some(Arc::new(move |_r: &RequestRecord| record_sink.count_record())),
                interrupt: Some(stop),
                admit: Some(job.admit),
                log: Some(Arc::new(move |m: &str| tracing::info!("capacity search {run_id}: {m}"))),
            };
            capacity::run(settings, hooks).await
        })
    }

    fn calibrate(
        &self,
        target: Target,
        budget_s: f64,
        sink: RunSink,
    ) -> BoxFuture<anyhow::Result<shared::calibrate::Fit>> {
        Box::pin(async move {
            let mut a = calibrate_args(&target, budget_s, &sink.run_dir().join("calibration"))?;
            a.progress = Some(crate::cmd::calibrate::ProbeProgress(Arc::new(move |s| {
                sink.calibration_progress(s, budget_s)
            })));
            crate::cmd::calibrate::calibrate(&a).await
        })
    }
}

/// The arguments of `loadshape calibrate --url` for a calibration of `target` started from the page: the
/// command's defaults, the target's URL, model, dialect and API key (read from its variable now), the page's
/// budget, files under `out`.
pub fn calibrate_args(target: &Target, budget_s: f64, out: &Path) -> anyhow::Result<crate::cmd::calibrate::Args> {
    use clap::Parser as _;
    let connect = target_settings(target)?;
    let argv = [
        "loadshape".to_string(),
        "calibrate".into(),
        "--url".into(),
        target.url.clone(),
        "--out".into(),
        out.display().to_string(),
        "--budget".into(),
        budget_s.to_string(),
    ];
    let mut a = match crate::Cli::try_parse_from(argv)
        .context("building the calibration's arguments")?
        .command
    {
        crate::Command::Calibrate(a) => a,
        _ => anyhow::bail!("building the calibration's arguments: not a calibrate command"),
    };
    a.model = connect.model.filter(|m| !m.is_empty());
    a.dialect = connect.dialect;
    a.api_key = connect.api_key;
    a.name = format!("{} (calibrated)", target.name);
    Ok(a)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::replay::Traffic;
    use crate::replay::dialect::Dialect;

    fn scenario() -> Scenario {
        Scenario::from_value(serde_json::json!({
            "model": "engine",
            "workload": {"kind": "sessions", "sessions": 2, "steps": 3, "base_tokens": 4000, "gen_tokens": 32,
                         "tool_tokens": 64, "think_s": 0.05, "stagger_s": 0.05, "spread": 0.0, "duration_s": 600.0},
            "profile": {"name": "toy", "block_size": 16, "num_kv_blocks": 4000, "max_num_seqs": 16,
                        "max_num_batched_tokens": 2048, "step_fixed_ms": 5.0, "per_seq_ms": 0.1,
                        "per_ctx_token_ms": 0.00001, "prefill_tokens_per_ms": 40.0, "prefill_fixed_ms": 1.0},
            "slo": {"ttft_ms": 2000.0, "tpot_ms": 100.0},
            "seed": 3
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Sub-agents count toward the run's session limit: 2 sessions with 3 children each are 8.
    #[test]
    fn sub_agents_count_toward_the_session_limit() {
        let limits = shared::protocol::Limits {
            max_message_bytes: 1 << 20,
            max_concurrent_runs: 1,
            max_sessions_per_run: 6,
            max_concurrent_requests_per_run: 1000,
            max_rate_per_run: 100.0,
            max_run_seconds: 600.0,
        };
        let driver = ReplayDriver {
            max_run_seconds: None,
            max_in_flight: None,
        };
        let mut v = serde_json::to_value(scenario()).unwrap_or_else(|e| panic!("{e}"));
        driver.validate(&v, &limits).unwrap_or_else(|e| panic!("{e}"));
        v["workload"]["subagents"] = serde_json::json!({"every_steps": 1, "count": 3, "steps": 1,
            "gen_tokens": 8, "tool_tokens": 8});
        let e = driver.validate(&v, &limits).expect_err("8 > 6");
        assert!(
            e.contains("8 concurrent sessions/users (2 sessions with 3 sub-agents each)"),
            "{e}"
        );
    }

    #[test]
    fn settings_come_from_the_target_and_the_scenario_without_a_command_line() {
        let records = Path::new("/runs/r1/records.jsonl");
        let s = settings_for(&Target::sim("http://127.0.0.1:9/v1"), &scenario(), records, Some(30.0))
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(s.target.url, "http://127.0.0.1:9/v1");
        assert_eq!(s.target.model.as_deref(), Some("sim"));
        assert_eq!(s.target.dialect, Dialect::Vllm);
        assert_eq!(s.out, records);
        assert!(matches!(&s.traffic, Traffic::Sessions(w) if w.sessions == 2 && w.steps == 3));
        assert_eq!((s.seed, s.slo.ttft_ms, s.slo.tpot_ms), (3, 2000.0, 100.0));
        assert_eq!(
            s.max_duration,
            Some(Duration::from_secs(30)),
            "capped by the agent's limit"
        );
        assert_eq!(s.metrics_url.as_deref(), Some("http://127.0.0.1:9/metrics"));
        assert_eq!(s.shape, "scenario /runs/r1/scenario.json (sessions)");
        assert!(!s.write_summary, "the store's summary.json is the run's one summary");
        assert!(!s.progress);
        // Without a limit the scenario's own duration holds.
        let s = settings_for(&Target::sim("http://127.0.0.1:9/v1"), &scenario(), records, None)
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(s.max_duration, Some(Duration::from_secs(600)));
    }

    #[test]
    fn a_fleet_target_runs_over_its_urls_with_its_router_else_the_scenarios() {
        use shared::engine::Router;
        let records = Path::new("/runs/r1/records.jsonl");
        let mut t = Target::sim("http://127.0.0.1:9/v1");
        t.fleet = Some(crate::serve::runs::TargetFleet {
            urls: vec!["http://127.0.0.1:9/v1".into(), "http://127.0.0.1:10/v1".into()],
            router: None,
            load_cap: None,
        });
        let s = settings_for(&t, &scenario(), records, None).unwrap_or_else(|e| panic!("{e:#}"));
        let f = s.fleet.as_ref().unwrap_or_else(|| panic!("a fleet"));
        assert_eq!(
            (f.spec.replicas, f.spec.router, f.spec.load_cap),
            (2, Router::RoundRobin, 1.5)
        );
        assert_eq!(f.cache_tokens, 4000 * 16, "the scenario profile's KV cache");
        assert_eq!(
            f.metrics_urls,
            ["http://127.0.0.1:9/metrics", "http://127.0.0.1:10/metrics"]
        );
        assert_eq!(s.metrics_url.as_deref(), Some("http://127.0.0.1:9/metrics"));
        // The scenario's fleet gives the router when the target names none; the target's wins when it does.
        let mut sc = scenario();
        if let Scenario::Engine(e) = &mut sc {
            e.fleet = Some(shared::engine::FleetSpec {
                replicas: 4,
                router: Router::PrefixAware,
                load_cap: 2.0,
                profiles: Vec::new(),
            });
        }
        let s = settings_for(&t, &sc, records, None).unwrap_or_else(|e| panic!("{e:#}"));
        let f = s.fleet.unwrap_or_else(|| panic!("a fleet"));
        assert_eq!(
            (f.spec.replicas, f.spec.router, f.spec.load_cap),
            (2, Router::PrefixAware, 2.0)
        );
        if let Some(tf) = &mut t.fleet {
            tf.router = Some(Router::SessionAffinity);
        }
        let s = settings_for(&t, &sc, records, None).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(s.fleet.map(|f| f.spec.router), Some(Router::SessionAffinity));
        // A one-URL target is no fleet, whatever the scenario says.
        let s =
            settings_for(&Target::sim("http://127.0.0.1:9/v1"), &sc, records, None).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(s.fleet.is_none());
    }

    #[test]
    fn a_bad_target_setting_is_named() {
        let records = Path::new("/runs/r1/records.jsonl");
        let mut t = Target::sim("http://127.0.0.1:9/v1");
        t.name = "gpu".into();
        t.dialect = "vllmm".into();
        let e = format!("{:#}", settings_for(&t, &scenario(), records, None).unwrap_err());
        assert!(e.contains("target gpu") && e.contains("vllmm"), "{e}");
        t.dialect = String::new();
        t.api_key_env = Some("LOADSHAPE_TEST_UNSET_KEY_VAR".into());
        let e = format!("{:#}", settings_for(&t, &scenario(), records, None).unwrap_err());
        assert!(e.contains("$LOADSHAPE_TEST_UNSET_KEY_VAR is not set"), "{e}");
        t.api_key_env = None;
        let e = format!("{:#}", settings_for(&t, &scenario(), records, Some(0.0)).unwrap_err());
        assert!(e.contains("> 0"), "{e}");
    }
}
