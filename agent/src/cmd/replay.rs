//! `loadshape replay` (being built; see the open issue).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`loadshape replay` is not built yet")
}
