//! Shared by the black-box CLI tests: run the built `loadshape` binary as a user runs it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `loadshape ARGS` to completion; `stdin` is written to its standard input, which is then closed.
pub fn loadshape(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loadshape"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run loadshape");
    if let Some(text) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    // `wait_with_output` closes a stdin still open before it waits.
    child.wait_with_output().expect("wait for loadshape")
}
