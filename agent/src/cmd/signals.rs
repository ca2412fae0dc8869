//! SIGINT and SIGTERM as one stream, for the commands that end gracefully on them (`replay`, `serve`). Once
//! [`Signals::new`] has installed the handlers, neither signal kills the process outright: each is a request the
//! command answers (replay: drain or cut, then exit 130 / 143; serve: stop the runs, then exit).

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::replay::Interrupt;

pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The next of either: its name and the exit code a process ended by it conventionally has.
    pub async fn recv(&mut self) -> Interrupt {
        tokio::select! {
            _ = self.int.recv() => Interrupt { name: "SIGINT", exit_code: 130 },
            _ = self.term.recv() => Interrupt { name: "SIGTERM", exit_code: 143 },
        }
    }
}
