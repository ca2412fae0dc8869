//! The live progress line: in-flight streams, completed/failed requests, request and token rates.
//!
//! Drawn with `indicatif` on stderr, redrawn a few times a second from the [`LiveCounters`] the client bumps. Off
//! when stderr is not a terminal or with `--quiet` (then [`Progress::start`] returns a handle that only passes
//! lines on to the run's log).

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::client::LiveCounters;

/// Where a run's notes go (the header line, warnings, failures, stop reasons).
pub type LogFn = Arc<dyn Fn(&str) + Send + Sync>;

/// A running progress display; [`Progress::finish`] clears it.
pub struct Progress {
    bar: Option<ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Where lines go when there is no display.
    log: LogFn,
}

impl Progress {
    /// Start the display when `shown` and stderr is a terminal; lines go above it, or to `log` without one.
    pub fn start(live: Arc<LiveCounters>, shown: bool, log: LogFn) -> Progress {
        if !shown || !std::io::stderr().is_terminal() {
            return Progress {
                bar: None,
                task: None,
                log,
            };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").unwrap_or_else(|_| {
                // The template is a constant; fall back to the default style rather than panic.
                ProgressStyle::default_spinner()
            }),
        );
        let b = bar.clone();
        let task = tokio::spawn(async move {
            let t0 = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let (mut last_t, mut last_done, mut last_frames, mut last_tok) = (0.0f64, 0u64, 0u64, 0u64);
            let (mut rps, mut fps, mut tps) = (0.0, 0.0, 0.0);
            loop {
                tick.tick().await;
                let t = t0.elapsed().as_secs_f64();
                let done = live.completed.load(Ordering::Relaxed) + live.failed.load(Ordering::Relaxed);
                let frames = live.content_frames.load(Ordering::Relaxed);
                let tok = live.gen_tokens.load(Ordering::Relaxed);
                if t - last_t >= 2.0 {
                    rps = (done - last_done) as f64 / (t - last_t);
                    fps = (frames - last_frames) as f64 / (t - last_t);
                    tps = (tok - last_tok) as f64 / (t - last_t);
                    (last_t, last_done, last_frames, last_tok) = (t, done, frames, tok);
                }
                b.set_message(format!(
                    "streams {} | done {} failed {} | {rps:.1} req/s | {tps:.0} tok/s (usage) | {fps:.0} frames/s",
                    live.in_flight.load(Ordering::Relaxed),
                    live.completed.load(Ordering::Relaxed),
                    live.failed.load(Ordering::Relaxed),
                ));
                b.tick();
            }
        });
        Progress {
            bar: Some(bar),
            task: Some(task),
            log,
        }
    }

    /// A printer that writes above the display, or to the log without one (usable from any task).
    pub fn printer(&self) -> Box<dyn Fn(&str) + Send + Sync> {
        let (bar, log) = (self.bar.clone(), self.log.clone());
        Box::new(move |msg: &str| match &bar {
            Some(b) => b.println(msg),
            None => log(msg),
        })
    }

    pub fn finish(self) {
        if let Some(t) = self.task {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
