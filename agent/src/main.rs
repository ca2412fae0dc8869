//! `loadshape`: the agent binary. Run with `loadshape --help`.
use clap::Parser;

/// mimalloc instead of glibc malloc: the engine's prefix-cache tables grow by reallocation, and glibc maps each large
/// table afresh from the kernel (a page fault and a zeroed page per 4 KiB) and unmaps it when freed, where mimalloc
/// keeps the memory for the next simulation. One `simulate` of the Mooncake trace is at parity, but a capacity search
/// on it (a simulation per level) is a fifth slower with glibc, and so are serve's simulated searches. glibc starts
/// 0.5 ms faster, which only the shortest commands notice. Built with `no_thp` (no transparent huge pages), else the
/// kernel zeroes 2 MiB at each first touch (docs/measurements.md, "seed model vs the Python seed").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    loadshape::quiet_on_broken_pipe();
    loadshape::run(loadshape::Cli::parse())
}
