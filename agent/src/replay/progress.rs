//! The live progress line: requests done of those planned and an ETA, failed requests, in-flight streams, request
//! and token rates, e.g. `done 40/111 (36%) failed 0 · ETA 2m13s | streams 4 | 1.2 req/s | 300 tok/s (usage) |
//! 50 frames/s` ([`progress_message`]).
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

/// What the progress line knows of the run before it starts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Plan {
    /// Requests this process plans to send (`Traffic::planned_requests`); `None` when not known (respawning
    /// sessions run until the clock stops them).
    pub planned: Option<u64>,
    /// The run length: no new work starts after it (`--max-seconds`, a scenario's duration).
    pub run_length_s: Option<f64>,
}

/// One redraw's numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tick {
    pub elapsed_s: f64,
    pub in_flight: u64,
    pub completed: u64,
    pub failed: u64,
    /// Rates over the last few seconds.
    pub req_per_s: f64,
    pub tok_per_s: f64,
    pub frames_per_s: f64,
}

/// The seconds left: the sooner of the plan's end at the run's average pace so far (done requests per second since
/// the start) and the run length's end. `None` when neither is known yet (nothing done and no run length).
pub fn eta_s(plan: &Plan, t: &Tick) -> Option<f64> {
    let done = t.completed + t.failed;
    let by_plan = plan.planned.and_then(|p| {
        if done >= p {
            Some(0.0)
        } else if done > 0 && t.elapsed_s > 0.0 {
            Some((p - done) as f64 / (done as f64 / t.elapsed_s))
        } else {
            None
        }
    });
    let by_clock = plan.run_length_s.map(|l| (l - t.elapsed_s).max(0.0));
    match (by_plan, by_clock) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Seconds as `45s`, `2m05s`, `1h02m`.
pub fn short_duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The progress line's text.
pub fn progress_message(plan: &Plan, t: &Tick) -> String {
    let done = t.completed + t.failed;
    let mut out = match plan.planned {
        Some(p) if p > 0 => format!("done {done}/{p} ({:.0}%)", (done as f64 / p as f64 * 100.0).min(100.0)),
        _ => format!("done {done}"),
    };
    out.push_str(&format!(" failed {}", t.failed));
    match eta_s(plan, t) {
        // At the run length with requests still in flight: they are finishing (drain or grace).
        Some(e) if e <= 0.0 && t.in_flight > 0 => out.push_str(" · finishing in-flight requests"),
        Some(e) => out.push_str(&format!(" · ETA {}", short_duration(e))),
        None => {}
    }
    out.push_str(&format!(
        " | streams {} | {:.1} req/s | {:.0} tok/s (usage) | {:.0} frames/s",
        t.in_flight, t.req_per_s, t.tok_per_s, t.frames_per_s
    ));
    out
}

/// A running progress display; [`Progress::finish`] clears it.
pub struct Progress {
    bar: Option<ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Where lines go when there is no display.
    log: LogFn,
}

impl Progress {
    /// Start the display when `shown` and stderr is a terminal; lines go above it, or to `log` without one.
    pub fn start(live: Arc<LiveCounters>, shown: bool, log: LogFn, plan: Plan) -> Progress {
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
                let tick = Tick {
                    elapsed_s: t,
                    in_flight: live.in_flight.load(Ordering::Relaxed),
                    completed: live.completed.load(Ordering::Relaxed),
                    failed: live.failed.load(Ordering::Relaxed),
                    req_per_s: rps,
                    tok_per_s: tps,
                    frames_per_s: fps,
                };
                b.set_message(progress_message(&plan, &tick));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(elapsed_s: f64, completed: u64, failed: u64, in_flight: u64) -> Tick {
        Tick {
            elapsed_s,
            in_flight,
            completed,
            failed,
            req_per_s: 2.0,
            tok_per_s: 300.0,
            frames_per_s: 50.0,
        }
    }

    #[test]
    fn the_line_shows_done_of_planned_and_an_eta() {
        let plan = Plan {
            planned: Some(120),
            run_length_s: None,
        };
        // 40 of 120 in 20 s: 80 left at 2 per second.
        assert_eq!(
            progress_message(&plan, &tick(20.0, 38, 2, 4)),
            "done 40/120 (33%) failed 2 · ETA 40s | streams 4 | 2.0 req/s | 300 tok/s (usage) | 50 frames/s"
        );
        // Nothing done yet and no run length: no ETA to give.
        assert_eq!(eta_s(&plan, &tick(3.0, 0, 0, 4)), None);
        assert_eq!(eta_s(&plan, &tick(60.0, 120, 0, 0)), Some(0.0));
    }

    #[test]
    fn the_run_length_bounds_the_eta() {
        // Respawning sessions: no planned count; the clock alone.
        let plan = Plan {
            planned: None,
            run_length_s: Some(900.0),
        };
        let line = progress_message(&plan, &tick(35.0, 10, 0, 6));
        assert!(line.starts_with("done 10 failed 0 · ETA 14m25s |"), "{line}");
        // The plan would take longer than the run length: the run length wins.
        let both = Plan {
            planned: Some(1000),
            run_length_s: Some(100.0),
        };
        assert_eq!(eta_s(&both, &tick(50.0, 10, 0, 6)), Some(50.0));
        // Past the run length with requests in flight: they are finishing.
        let line = progress_message(&both, &tick(120.0, 300, 0, 3));
        assert!(line.contains("· finishing in-flight requests |"), "{line}");
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(short_duration(44.6), "45s");
        assert_eq!(short_duration(125.0), "2m05s");
        assert_eq!(short_duration(3720.0), "1h02m");
        assert_eq!(short_duration(-3.0), "0s");
    }
}
