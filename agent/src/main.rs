//! `loadshape`: the agent binary. Run with `loadshape --help`.
use clap::Parser;

/// mimalloc instead of glibc malloc: `loadshape simulate` of a million requests holds ~250 MB of records, and glibc
/// maps such vectors fresh, page by page (≈ 15 % of the run in page faults); mimalloc's arenas avoid most of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    loadshape::run(loadshape::Cli::parse())
}
