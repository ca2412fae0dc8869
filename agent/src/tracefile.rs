//! Reading a scenario's trace file: a `"kind": "trace"` workload that names a `path` gets its requests from that
//! file (Mooncake JSONL or agentic Mooncake, parsed by `shared::workload::mooncake`), the path taken relative to the
//! scenario file. `loadshape simulate` and `loadshape replay --scenario` call [`load_traces`] before running.

use std::io::Read as _;
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
    let text = read_trace(&path)
        .with_context(|| format!("reading the trace file {} (workload.path {rel:?})", path.display()))?;
    t.load_text(&text).with_context(|| format!("{}", path.display()))?;
    e.validate()
        .with_context(|| format!("the trace {} as a workload", path.display()))?;
    Ok(())
}

/// Largest trace file read, bytes (1 GiB: the 12,031-request Mooncake conversation trace is 3 MB). A larger file,
/// or one that never ends (`/dev/zero`), is refused at this size instead of filling memory.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// The trace file's text: at most [`MAX_TRACE_BYTES`], UTF-8 (an error names the first line that is not).
fn read_trace(path: &Path) -> anyhow::Result<String> {
    read_limited(path, MAX_TRACE_BYTES)
}

fn read_limited(path: &Path, limit: u64) -> anyhow::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    anyhow::ensure!(
        bytes.len() as u64 <= limit,
        "the file is larger than the {limit} bytes a trace may be"
    );
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        anyhow::anyhow!(
            "trace line {line}: not UTF-8 (byte {} of the line)",
            at - line_start(e.as_bytes(), at) + 1
        )
    })
}

/// Where the line holding byte `at` starts.
fn line_start(bytes: &[u8], at: usize) -> usize {
    bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("loadshape-tracefile-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{e}"));
        p
    }

    #[test]
    fn a_byte_that_is_not_utf8_is_named_by_its_line() {
        let p = scratch("latin1", b"{\"a\": 1}\n{\"b\": \"caf\xe9\"}\n");
        let e = read_trace(&p).expect_err("not UTF-8").to_string();
        let _ = std::fs::remove_file(&p);
        assert_eq!(e, "trace line 2: not UTF-8 (byte 11 of the line)");
    }

    #[test]
    fn an_endless_file_stops_at_the_limit() {
        let e = read_limited(Path::new("/dev/zero"), 1 << 20)
            .expect_err("too large")
            .to_string();
        assert_eq!(e, "the file is larger than the 1048576 bytes a trace may be");
    }
}
