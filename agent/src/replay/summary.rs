//! What a replay leaves beside its record file, as types: [`RunSummary`] is `<out>.summary.json`, [`ServerScrape`]
//! is `<out>.server.json`, and [`Checks`] are the counts a reader of any record file should know about (used by the
//! summary, `loadshape report` and the text report).
//!
//! Both files are written through `serde_json::Value`, whose maps keep their keys sorted (the workspace's
//! `serde_json` has no `preserve_order`): every object in them, nested ones included, lists its keys in
//! alphabetical order, as these files always have. Field names are part of the interface (users' scripts read
//! them): do not rename them.

use std::path::{Path, PathBuf};

use serde::Serialize;
use shared::metrics::{Slo, Summary};
use shared::record::{FrameClock, RequestRecord, UsageSource};

use super::client::{Endpoint, HttpClient};
use super::dialect::Dialect;
use super::prom::{ServerReport, Snapshot};

/// `<out>.<suffix>` beside the record file (`suffix`: `summary.json`, `server.json`).
pub fn sidecar(out: &Path, suffix: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".");
    s.push(suffix);
    PathBuf::from(s)
}

/// `<out>.summary.json`: how a live run was set up, what it did, and its records' summary.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Base URL the requests went to (with the API prefix).
    pub url: String,
    /// Model name sent (given, or the first id on `/v1/models`).
    pub model: String,
    /// Dialect used to force output lengths (resolved, never `auto`).
    pub dialect: Dialect,
    pub endpoint: Endpoint,
    /// Structure seed: session shapes, arrivals, filler word choice.
    pub seed: u64,
    /// Content nonce: makes the text unique per run.
    pub nonce: u64,
    /// Which client carried the streams (`auto` resolved: `hyper` or `reqwest`).
    pub http_client: HttpClient,
    /// Connections the hyper path opened (warm-up plus reconnects); `null` on reqwest.
    pub connections_opened: Option<u64>,
    /// Which clock timed the records' first frames: `kernel`, `user` or `mixed` ([`Checks::rx_clock`]).
    pub rx_clock: &'static str,
    /// How many records had their first frame timed by each clock.
    pub rx_clock_requests: RxClockRequests,
    /// Hyper path: `t_submit` → the request's last `write` returned, microseconds; `null` on reqwest.
    pub send_delay_us: Option<SendDelay>,
    /// One line describing the traffic (the ladder or session draw, or the scenario and its workload kind).
    pub shape: String,
    /// Seconds from the run's origin to the end of the traffic.
    pub wall_s: f64,
    /// Requests started; each has exactly one record.
    pub requests_started: u64,
    /// Record lines this run wrote to the file.
    pub records_written: u64,
    /// What ended the run early: `SIGINT`, `SIGTERM`, `stop requested`; `null` when it ran its course.
    pub interrupted: Option<String>,
    /// True when the fail streak aborted the run (the server stopped answering).
    pub aborted: bool,
    /// The goodput targets the summary used.
    pub slo: Slo,
    /// The records scored by `shared::metrics::summarize`.
    pub summary: Summary,
    /// The server's `/metrics` over the run; `null` when not scraped.
    pub server: Option<ServerReport>,
    pub loadshape_version: &'static str,
}

/// [`RunSummary::rx_clock_requests`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RxClockRequests {
    pub kernel: u64,
    pub user: u64,
}

/// [`RunSummary::send_delay_us`]: count, median, p99 and max, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SendDelay {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// `<out>.server.json`: every `/metrics` scrape of a run and the server-side report computed from them.
#[derive(Debug, Clone, Serialize)]
pub struct ServerScrape {
    pub metrics_url: String,
    /// Seconds between scrapes during the run.
    pub interval_s: f64,
    pub report: ServerReport,
    pub snapshots: Vec<Snapshot>,
}

/// Pretty JSON with every object's keys sorted (see the module docs).
pub fn to_sorted_json<T: Serialize>(value: &T) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec_pretty(&serde_json::to_value(value)?)
}

/// Counts a reader of a record file should know about.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Checks {
    /// Completed records whose `usage` was missing (tokens counted from frames).
    pub usage_missing: u64,
    /// Completed records that produced fewer tokens than asked (length not forced).
    pub short_outputs: u64,
    /// Records cut by the end of the run.
    pub cut: u64,
    /// Step-0 records reporting cached tokens.
    pub step0_records: u64,
    /// Live records whose first content frame (so their TTFT) was timed by the kernel's receive timestamp.
    pub rx_clock_kernel: u64,
    /// Live records whose first content frame was timed when the client read it.
    pub rx_clock_user: u64,
}

impl Checks {
    pub fn of(recs: &[RequestRecord]) -> Checks {
        let mut c = Checks::default();
        for r in recs {
            if r.ok && r.usage_source == UsageSource::Missing {
                c.usage_missing += 1;
            }
            if r.ok && r.gen_tokens < r.asked_tokens {
                c.short_outputs += 1;
            }
            if r.error.as_deref().is_some_and(|e| e.starts_with("cut:")) {
                c.cut += 1;
            }
            if r.step == 0 && r.cached_tokens.is_some() {
                c.step0_records += 1;
            }
            match r.rx_clock {
                Some(FrameClock::Kernel) => c.rx_clock_kernel += 1,
                Some(FrameClock::User) => c.rx_clock_user += 1,
                None => {}
            }
        }
        c
    }

    /// Which clock timed the records' first frames: `"kernel"` (every record with a content frame had its first one
    /// stamped by the kernel), `"user"` (none had), or `"mixed"` (`summary.json`'s `rx_clock`).
    pub fn rx_clock(&self) -> &'static str {
        match (self.rx_clock_kernel, self.rx_clock_user) {
            (k, 0) if k > 0 => "kernel",
            (0, _) => "user",
            _ => "mixed",
        }
    }

    /// [`RunSummary::rx_clock_requests`].
    pub fn rx_clock_requests(&self) -> RxClockRequests {
        RxClockRequests {
            kernel: self.rx_clock_kernel,
            user: self.rx_clock_user,
        }
    }
}
