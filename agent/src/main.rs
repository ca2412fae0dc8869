//! `loadshape`: the agent binary. Run with `loadshape --help`.
use clap::Parser;

/// mimalloc instead of glibc malloc, built with `no_thp` (no transparent huge pages). With huge pages the kernel
/// zeroed 2 MiB per first touch: `loadshape --version` cost 3.1 ms CPU instead of 2.3, and the 1M-session
/// `simulate` spent 0.15-0.2 s in the kernel (README, "seed model vs the Python seed").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    loadshape::run(loadshape::Cli::parse())
}
