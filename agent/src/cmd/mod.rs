//! One module per subcommand: each has a clap `Args` and a `run` that returns the process exit code. `signals` is
//! the SIGINT/SIGTERM stream `replay` and `serve` share.

pub mod calibrate;
pub mod capacity;
pub mod catalog;
pub mod export;
pub mod import;
pub mod ladder;
pub mod link;
pub mod merge;
pub mod predict;
pub mod replay;
pub mod report;
pub mod serve;
pub mod signals;
pub mod sim_server;
pub mod simulate;
