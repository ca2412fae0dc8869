//! `loadshape`: the agent binary. Run with `loadshape --help`.
use clap::Parser;

fn main() -> std::process::ExitCode {
    loadshape::run(loadshape::Cli::parse())
}
