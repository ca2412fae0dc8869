//! Reading a scenario's trace file: a `"kind": "trace"` workload that names a `path` gets its requests from that
//! file (Mooncake JSONL or agentic Mooncake, parsed by `shared::workload::mooncake`), the path taken relative to the
//! scenario file. `loadshape simulate` and `loadshape replay --scenario` call [`load_traces`] before running.

use std::path::Path;

use anyhow::Context;
use shared::scenario::Scenario;
use shared::workload::Workload;

/// Fill the requests of `scenario`'s trace workload from its `path` (relative to `scenario_file`'s folder; to the
/// working directory for standard input). Nothing to do for other workloads or inline requests.
pub fn load_traces(scenario: &mut Scenario, scenario_file: Option<&Path>) -> anyhow::Result<()> {
    let Scenario::Engine(e) = scenario else { return Ok(()) };
    let Workload::Trace(t) = &mut e.workload else {
        return Ok(());
    };
    if !t.needs_file() {
        return Ok(());
    }
    let Some(rel) = t.path.clone() else {
        anyhow::bail!(
            "workload.sha256 names a trace file ({}) but workload.path does not say where it is",
            t.sha256.as_deref().unwrap_or_default()
        );
    };
    let dir = scenario_file.and_then(Path::parent).unwrap_or(Path::new(""));
    let path = dir.join(&rel);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the trace file {} (workload.path {rel:?})", path.display()))?;
    t.load_text(&text).with_context(|| format!("{}", path.display()))?;
    e.validate()
        .with_context(|| format!("the trace {} as a workload", path.display()))?;
    Ok(())
}
