//! The production [`Driver`]: a live run is `loadshape replay --scenario` run in-process against the chosen
//! target, writing the run's `records.jsonl` itself, with each record also handed to the run's viewers.
//! Summaries come from `shared::metrics::summarize`, exactly as `loadshape replay` and `loadshape report` score.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use shared::metrics::summarize;
use shared::protocol::Limits;
use shared::record::RequestRecord;
use shared::scenario::Scenario;
use shared::workload::Workload;
use tokio::sync::watch;

use super::runs::{BoxFuture, Driver, RecordSink, Target};
use crate::cmd::replay;

/// Runs scenarios with the replay client.
#[derive(Debug, Default)]
pub struct ReplayDriver {
    /// Longest a run may last, seconds (passed as `--max-seconds`).
    pub max_run_seconds: Option<f64>,
}

/// `loadshape replay`'s arguments, parsed the way the command line is.
#[derive(Parser)]
struct ReplayArgs {
    #[command(flatten)]
    args: replay::Args,
}

/// Concurrency a workload asks for: session slots or closed-loop users (open loop: 0, bounded by its rate).
fn concurrency(scenario: &Scenario) -> u32 {
    match scenario {
        Scenario::Seed(_) => 0,
        Scenario::Engine(e) => match &e.workload {
            Workload::Sessions(w) => w.ladder.as_ref().map_or(w.sessions, |l| l.rungs.len() as u32),
            Workload::ClosedLoop(c) => c.users,
            _ => 0,
        },
    }
}

impl Driver for ReplayDriver {
    fn run(
        &self,
        target: Target,
        _scenario: serde_json::Value,
        sink: RecordSink,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<()>> {
        let max_seconds = self.max_run_seconds;
        Box::pin(async move {
            let scenario_path = sink.run_dir().join("scenario.json");
            let mut argv: Vec<String> = vec![
                "replay".into(),
                "--url".into(),
                target.url.clone(),
                "--out".into(),
                sink.records_path().display().to_string(),
                "--scenario".into(),
                scenario_path.display().to_string(),
                "--quiet".into(),
            ];
            if !target.model.is_empty() {
                argv.extend(["--model".into(), target.model.clone()]);
            }
            if !target.dialect.is_empty() {
                argv.extend(["--dialect".into(), target.dialect.clone()]);
            }
            if let Some(ca) = &target.ca_cert {
                argv.extend(["--ca-cert".into(), ca.clone()]);
            }
            if let Some(m) = max_seconds {
                argv.extend(["--max-seconds".into(), m.to_string()]);
            }
            let mut parsed = ReplayArgs::try_parse_from(&argv)
                .context("building the replay for this run")?
                .args;
            if let Some(var) = &target.api_key_env {
                parsed.api_key =
                    Some(std::env::var(var).with_context(|| format!("target {}: ${var} is not set", target.name))?);
            }
            let observer_sink = sink.clone();
            parsed.hooks = replay::Hooks {
                on_record: Some(Arc::new(move |r: &RequestRecord| observer_sink.push(r.clone()))),
                stop: Some(stop),
            };
            let code = replay::run(parsed).await?;
            if code == std::process::ExitCode::from(2) {
                anyhow::bail!("the target stopped answering; this run did not measure anything (records kept)");
            }
            Ok(())
        })
    }

    fn validate(&self, scenario: &serde_json::Value, limits: &Limits) -> Result<(), String> {
        let scenario = Scenario::from_value(scenario.clone()).map_err(|e| e.to_string())?;
        let n = concurrency(&scenario);
        if n > limits.max_sessions_per_run {
            return Err(format!(
                "the workload asks for {n} concurrent sessions/users; this agent allows at most {} per run",
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
}
