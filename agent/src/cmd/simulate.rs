//! `loadshape simulate` (being built; see the open issue).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`loadshape simulate` is not built yet")
}
