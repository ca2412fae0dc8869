//! What a replay leaves beside its record file, as types: [`RunSummary`] is `<out>.summary.json`, [`ServerScrape`]
//! is `<out>.server.json`. [`Checks`] (the counts a reader of any record file should know about, used by the
//! summary, `loadshape report` and the text report) and [`SendDelay`] are computed by `shared::metrics`, the one
//! scorer; they are re-exported here.
//!
//! Both files are written through `serde_json::Value`, whose maps keep their keys sorted (the workspace's
//! `serde_json` has no `preserve_order`): every object in them, nested ones included, lists its keys in
//! alphabetical order, as these files always have. Field names are part of the interface (users' scripts read
//! them): do not rename them.

use std::path::{Path, PathBuf};

use serde::Serialize;
use shared::metrics::replicas::{ReplicaSplit, replica_split, sessions_on_several_replicas};
pub use shared::metrics::{Checks, RxClockRequests, SendDelay};
use shared::metrics::{Slo, Summary};

use super::client::{Endpoint, HttpClient};
use super::conversation::ToolResults;
use super::dialect::Dialect;
use super::limits::ServerLimits;
use super::prom::{ServerReport, Snapshot};
use super::tokenizer::TokenizerReport;

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
    /// How sessions sent their tool outputs on `chat` and `messages` (`--tool-results`: `tool` or `user`).
    pub tool_results: ToolResults,
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
    /// The XXH3-64 digests of those lines, summed (wrapping), as 16 hex digits: `merge` checks that the file it
    /// is given holds these lines (not another run's, not edited).
    pub records_digest: String,
    /// What ended the run early: `SIGINT`, `SIGTERM`, `stop requested`; `null` when it ran its course.
    pub interrupted: Option<String>,
    /// True when the fail streak aborted the run (the server stopped answering).
    pub aborted: bool,
    /// The goodput targets the summary used.
    pub slo: Slo,
    /// The records scored by `shared::metrics::summarize`.
    pub summary: Summary,
    /// The server's prefix reuse against the sessions' design ([`prefix_reuse`]); `null` when the server reports no
    /// cached tokens or the design caches little.
    pub prefix_reuse: Option<PrefixReuse>,
    /// The server's `/metrics` over the run; `null` when not scraped.
    pub server: Option<ServerReport>,
    /// What the run measured of the target's tokenizer and the ratios its filler was sized by
    /// (`--match-tokenizer`): `{source, prose_ratio, code_ratio, endpoint}`.
    pub tokenizer: TokenizerReport,
    /// The run's origin (`t_submit` 0) on the wall clock, Unix seconds: `start_at_unix_s` when given, else when the
    /// traffic began. `loadshape merge` lays runs on one time line by it.
    pub origin_unix_s: f64,
    /// `--start-at`, Unix seconds; absent when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at_unix_s: Option<f64>,
    /// `--shard I/N`: `{index, count}`; absent for a whole-plan run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<shared::workload::Shard>,
    /// Several `--url`s behind a router: the URLs, the policy and each replica's share; absent for one URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetRun>,
    /// One URL whose server routed over a fleet and named each request's replica (`x-replica`: the sim-server's
    /// `--fleet`, `serve`'s `sim` target running a fleet scenario): per replica, the same rows as `fleet.replicas`
    /// (without `server`); absent otherwise (no record names a replica, or the client routed: see `fleet`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaSplit>,
    /// With `replicas`: sessions whose steps went to more than one replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions_on_several_replicas: Option<u64>,
    /// A prefill/decode-disaggregated target: the records' KV transfers (`shared::metrics::replicas::
    /// kv_transfer_summary`: `transfers`, `mean_ms`, `p50_ms`, `p99_ms`); absent when no record carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_transfer: Option<shared::metrics::replicas::TransferSummary>,
    pub loadshape_version: &'static str,
}

/// `summary.json`'s `fleet`: how a run over several URLs was routed and what each replica carried.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRun {
    /// Replica `i`'s base URL is `urls[i]` (the records' `replica`).
    pub urls: Vec<String>,
    pub router: shared::engine::Router,
    /// `prefix_aware`: the load cap; and the client-side prefix view's size per replica, tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_cap: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_view_tokens: Option<u64>,
    /// Per replica, from the records (`shared::metrics::replicas::replica_split`), with what that replica's own
    /// `/metrics` said over the run (`server`, when it was scraped).
    pub replicas: Vec<ReplicaRow>,
    /// Sessions whose steps went to more than one replica (none under `session_affinity`).
    pub sessions_on_several_replicas: u64,
}

/// One replica's row: its share of the records ([`ReplicaSplit`], flattened: the same keys as `simulate`'s and
/// `report --json`'s rows) and the server-side report of its own `/metrics` scrapes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaRow {
    #[serde(flatten)]
    pub split: ReplicaSplit,
    /// What the replica's `/metrics` said over the run (KV-cache use, preemptions, prefix-cache hit rate, ...,
    /// where the server reports them); absent when it was not scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerReport>,
}

/// The per-replica rows: each [`replica_split`] row with `servers[replica]` (the replica's scrape report, `None`
/// where not scraped). `loadshape report` builds the same rows from the records and `server.json`'s `replicas`.
pub fn replica_rows(records: &[shared::record::RequestRecord], servers: &[Option<ServerReport>]) -> Vec<ReplicaRow> {
    replica_split(records)
        .into_iter()
        .map(|split| {
            let server = servers.get(split.replica as usize).cloned().flatten();
            ReplicaRow { split, server }
        })
        .collect()
}

impl FleetRun {
    /// The fleet part of a run's summary, from its settings, records and each replica's scrape report
    /// (`servers[i]`: replica `i`'s; empty when `/metrics` was not scraped).
    pub fn of(
        fleet: &super::fleet::LiveFleet,
        records: &[shared::record::RequestRecord],
        servers: &[Option<ServerReport>],
    ) -> Self {
        let prefix = fleet.router() == shared::engine::Router::PrefixAware;
        FleetRun {
            urls: fleet.urls.clone(),
            router: fleet.router(),
            load_cap: prefix.then_some(fleet.spec.load_cap),
            prefix_view_tokens: prefix.then_some(fleet.cache_tokens),
            replicas: replica_rows(records, servers),
            sessions_on_several_replicas: sessions_on_several_replicas(records),
        }
    }
}

/// A run's prefix reuse beside what its traffic designed ([`prefix_reuse`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefixReuse {
    /// `Summary::cached_share_achieved`: Σ cached_tokens / Σ prompt_tokens (the server's usage).
    pub achieved: f64,
    /// `Summary::cached_share_designed`: Σ designed_cached_tokens / Σ prompt_tokens (each session step's previous
    /// prompt and reply).
    pub designed: f64,
    /// achieved / designed.
    pub ratio: f64,
    /// `ratio` < [`REUSE_FLAG_RATIO`]: the server reused far less than the traffic designed.
    pub below_design: bool,
}

/// Below this share of the designed reuse a run is flagged ([`prefix_reuse`]): more than a fifth of the prompt
/// tokens the sessions resent unchanged were computed again. A template that keeps earlier turns byte-stable
/// loses only a partial block per step (vLLM) or one token (llama.cpp); eviction or a template that re-renders
/// earlier turns loses whole stretches.
pub const REUSE_FLAG_RATIO: f64 = 0.8;

/// A designed cached share below this is not judged (open-loop traffic with little or no shared prefix).
pub const REUSE_MIN_DESIGNED: f64 = 0.10;

/// The prefix-reuse check: the achieved cached share against the designed one, flagged `below_design` when it is
/// under [`REUSE_FLAG_RATIO`] of it. `None` when the server reports no cached tokens, no record carries a designed
/// size, or the designed share is under [`REUSE_MIN_DESIGNED`].
pub fn prefix_reuse(s: &Summary) -> Option<PrefixReuse> {
    let (achieved, designed) = (s.cached_share_achieved?, s.cached_share_designed?);
    if designed.is_nan() || designed < REUSE_MIN_DESIGNED {
        return None;
    }
    let ratio = achieved / designed;
    Some(PrefixReuse {
        achieved,
        designed,
        ratio,
        below_design: ratio < REUSE_FLAG_RATIO,
    })
}

/// `<out>.server.json`: every `/metrics` scrape of a run and the server-side report computed from them.
#[derive(Debug, Clone, Serialize)]
pub struct ServerScrape {
    pub metrics_url: String,
    /// Seconds between scrapes during the run.
    pub interval_s: f64,
    pub report: ServerReport,
    pub snapshots: Vec<Snapshot>,
    /// What the server said about its limits before the run (llama.cpp `/props`, vLLM's `cache_config_info`), for
    /// `loadshape calibrate --from`; absent when it said nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<ServerLimits>,
    /// A run over several URLs (`--url A --url B ...`): every replica's own scrapes, replica `i` at index `i`
    /// (the fields above are replica 0's, as with one URL); absent for one URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaScrape>>,
}

impl ServerScrape {
    /// Each replica's report, replica `i` at index `i`; empty for a run over one URL.
    pub fn replica_reports(&self) -> Vec<Option<ServerReport>> {
        replica_reports_of(self.replicas.iter().flatten().map(|r| (r.replica, r.report.clone())))
    }
}

/// `(replica, report)` pairs as a list indexed by replica (`None` where a replica has none).
pub fn replica_reports_of(pairs: impl Iterator<Item = (u32, ServerReport)>) -> Vec<Option<ServerReport>> {
    let mut out: Vec<Option<ServerReport>> = Vec::new();
    for (i, r) in pairs {
        let i = i as usize;
        if out.len() <= i {
            out.resize(i + 1, None);
        }
        out[i] = Some(r);
    }
    out
}

/// The per-replica reports of a `server.json` read back (its `replicas`, absent for one URL): what `loadshape
/// report` shows beside the records' split. Entries that do not parse are left out.
pub fn replica_reports_in(server_json: &serde_json::Value) -> Vec<Option<ServerReport>> {
    let Some(list) = server_json.get("replicas").and_then(serde_json::Value::as_array) else {
        return Vec::new();
    };
    replica_reports_of(list.iter().filter_map(|e| {
        let i = u32::try_from(e.get("replica")?.as_u64()?).ok()?;
        Some((i, serde_json::from_value(e.get("report")?.clone()).ok()?))
    }))
}

/// `server.json`'s `replicas[i]`: replica `i`'s `/metrics` over the run.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaScrape {
    pub replica: u32,
    pub metrics_url: String,
    pub report: ServerReport,
    pub snapshots: Vec<Snapshot>,
}

/// Pretty JSON with every object's keys sorted (see the module docs).
pub fn to_sorted_json<T: Serialize>(value: &T) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec_pretty(&serde_json::to_value(value)?)
}
