//! The production [`Driver`]: live runs through the replay client (`crate::replay`), scored by
//! `shared::metrics` exactly as `loadshape replay` and `loadshape report` score them.

use shared::protocol::Limits;
use shared::record::RequestRecord;
use tokio::sync::watch;

use super::runs::{BoxFuture, Driver, RecordSink, Target};

/// Runs scenarios with the replay client.
#[derive(Debug, Default)]
pub struct ReplayDriver;

impl Driver for ReplayDriver {
    fn run(
        &self,
        _target: Target,
        _scenario: serde_json::Value,
        _sink: RecordSink,
        _stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<()>> {
        Box::pin(async { anyhow::bail!("live runs are not wired to the replay client yet") })
    }

    fn validate(&self, scenario: &serde_json::Value, _limits: &Limits) -> Result<(), String> {
        if scenario.is_object() {
            Ok(())
        } else {
            Err("a scenario must be a JSON object".into())
        }
    }

    fn summarize(&self, _scenario: &serde_json::Value, _records: &[RequestRecord]) -> Option<serde_json::Value> {
        None
    }
}
