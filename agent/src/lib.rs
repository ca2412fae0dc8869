//! The `loadshape` agent: a thin shell of adapters around `shared`.
//!
//! [`Cli`] is the parsed command line and [`run`] executes it, so tests can drive the whole binary in-process.
//! Each subcommand lives in its own module under [`cmd`] with an `Args` struct and a `run` function.

pub mod capacity;
pub mod cmd;
pub mod replay;
pub mod serve;
pub mod sim_server;
pub mod tracefile;

/// The unit tests' scratch folders: the integration tests' helper, one file for both.
#[cfg(test)]
#[path = "../tests/common/scratch.rs"]
pub(crate) mod scratch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Replay and predict agent-shaped load on LLM servers.
#[derive(Debug, Parser)]
#[command(name = "loadshape", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the page, the websocket API and the run store, with the built-in emulated engine as target `sim`.
    Serve(cmd::serve::Args),
    /// Replay agent sessions or open/closed-loop traffic against an OpenAI-compatible server.
    Replay(cmd::replay::Args),
    /// Run the built-in emulated engine as an OpenAI-compatible streaming server.
    SimServer(cmd::sim_server::Args),
    /// Simulate a scenario file (or print the seed's report).
    Simulate(cmd::simulate::Args),
    /// Session ladders: statistics, solver and fitting from a production log.
    Ladder(cmd::ladder::Args),
    /// Encode a scenario file as a share link, or decode a link back to a scenario.
    Link(cmd::link::Args),
    /// Score a JSONL record file with the same module the simulator uses.
    Report(cmd::report::Args),
    /// Merge the shards of a run (`replay --shard I/N`): the exact summary from the records and the fast one from
    /// the histograms, each labelled; "partial" when a shard is missing or cut short.
    Merge(cmd::merge::Args),
    /// Fit an engine profile to a server (a designed probe) or to live runs' records.
    Calibrate(cmd::calibrate::Args),
    /// Simulate a scenario with a profile and compare with live runs.
    Predict(cmd::predict::Args),
    /// The most sessions, users or rate a deployment serves within its SLOs: in the simulator, then live.
    Capacity(cmd::capacity::Args),
    /// The GPUs and models a scenario's deployment may name, with their numbers and sources.
    Catalog(cmd::catalog::Args),
    /// Read the results (or configs) of vllm bench, GuideLLM, AIPerf and inference-perf as loadshape records.
    Import(cmd::import::Args),
    /// Write a scenario's workload as GuideLLM's, AIPerf's or inference-perf's command line or config.
    Export(cmd::export::Args),
}

/// Execute a parsed command line. Errors are printed once, here, with their context chain.
pub fn run(cli: Cli) -> ExitCode {
    init_logging();
    let result = match cli.command {
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Ladder(args) => cmd::ladder::run(args),
        Command::Link(args) => cmd::link::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Merge(args) => cmd::merge::run(args),
        Command::Serve(args) => block_on(cmd::serve::run(args)),
        Command::Replay(args) => block_on(cmd::replay::run(args)),
        Command::SimServer(args) => block_on(cmd::sim_server::run(args)),
        Command::Calibrate(args) => block_on(cmd::calibrate::run(args)),
        Command::Predict(args) => cmd::predict::run(args),
        Command::Capacity(args) => block_on(cmd::capacity::run(args)),
        Command::Catalog(args) => cmd::catalog::run(args),
        Command::Import(args) => cmd::import::run(args),
        Command::Export(args) => cmd::export::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A reader that goes away (`loadshape merge RUN | head -1`) closes standard output, and Rust's `println!` then
/// panics ("failed printing to stdout: Broken pipe"; Rust ignores SIGPIPE, so the write fails instead of killing
/// the process). Every command prints with `println!`: this hook ends such a process quietly with success, as
/// ripgrep does (the output was cut by its reader's choice), and leaves every other panic to the default hook.
/// Called by `main` (not by [`run`], which tests call in-process).
pub fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(fut: F) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(fut)
}

/// Logs go to stderr; `LOADSHAPE_LOG` (e.g. `info`, `loadshape=debug`) picks the level, `warn` by default.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOADSHAPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
