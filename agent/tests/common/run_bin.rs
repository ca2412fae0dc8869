//! The `loadshape` binary run as a user runs it, for the integration tests (`#[path = "common/run_bin.rs"] mod
//! run_bin;`): no standard input, a time limit, and a panic that carries its output unless it succeeds.

use std::ffi::OsStr;
use std::process::{Output, Stdio};
use std::time::Duration;

/// `loadshape ARGS`, finished within `limit_s` seconds and successful: its output.
pub async fn loadshape_ok<S: AsRef<OsStr>>(args: &[S], limit_s: u64) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadshape"));
    cmd.args(args).stdin(Stdio::null());
    let what = args
        .first()
        .map_or(String::new(), |a| a.as_ref().to_string_lossy().into_owned());
    let out = tokio::time::timeout(Duration::from_secs(limit_s), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("loadshape {what} did not finish in {limit_s} s"))
        .unwrap_or_else(|e| panic!("loadshape {what}: {e}"));
    assert!(
        out.status.success(),
        "loadshape {what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
