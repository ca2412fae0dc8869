//! How a run's requests were spread over replicas ([`replica_split`]) and what its prompts' KV transfers took
//! ([`kv_transfer_summary`]): from the records' `replica` and `kv_transfer_ms`, so the same functions read a
//! simulated fleet's records and a live run (`replay` over several URLs, or a fleet behind one endpoint that names
//! each request's replica), and the two lay over each other ([`fleet_figures`]).

use serde::{Deserialize, Serialize};

use crate::metrics::{nearest_rank, percentile_sorted};
use crate::record::RequestRecord;

/// What one replica carried, from the records that name it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSplit {
    pub replica: u32,
    /// Records routed to it (completed or not).
    pub requests: u64,
    /// Of those, completed.
    pub completed: u64,
    /// `requests` over all records that name a replica.
    pub request_share: f64,
    /// Σ prompt tokens of its completed requests (as the server counted them).
    pub prompt_tokens: u64,
    /// Σ cached prompt tokens of its completed requests.
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens` (0 without prompt tokens).
    pub cached_share: f64,
    /// Median TTFT of its completed requests, ms (0 without any).
    pub ttft_p50_ms: f64,
    /// Mean requests in flight on it over the run: Σ of its requests' `wall_s` over the run's span (first submit
    /// to last completion of all records).
    pub mean_in_flight: f64,
}

/// Per replica (ascending), what the records routed to it carried; empty when no record names a replica (one
/// engine, one URL). A replica that got no request has no row.
pub fn replica_split(records: &[RequestRecord]) -> Vec<ReplicaSplit> {
    let n = records
        .iter()
        .filter_map(|r| r.replica)
        .max()
        .map_or(0, |m| m as usize + 1);
    if n == 0 {
        return Vec::new();
    }
    let start = records.iter().map(|r| r.t_submit).fold(f64::INFINITY, f64::min);
    let end = records
        .iter()
        .map(|r| r.t_submit + r.wall_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let span = end - start;
    let mut rows: Vec<(ReplicaSplit, Vec<f64>, f64)> = (0..n)
        .map(|i| {
            (
                ReplicaSplit {
                    replica: i as u32,
                    requests: 0,
                    completed: 0,
                    request_share: 0.0,
                    prompt_tokens: 0,
                    cached_tokens: 0,
                    cached_share: 0.0,
                    ttft_p50_ms: 0.0,
                    mean_in_flight: 0.0,
                },
                Vec::new(),
                0.0,
            )
        })
        .collect();
    let mut routed = 0u64;
    for r in records {
        let Some(i) = r.replica else { continue };
        let (row, ttfts, busy) = &mut rows[i as usize];
        routed += 1;
        row.requests += 1;
        *busy += r.wall_s.max(0.0);
        if r.ok {
            row.completed += 1;
            row.prompt_tokens += r.prompt_tokens.unwrap_or(0);
            row.cached_tokens += r.cached_tokens.unwrap_or(0);
            if let Some(t) = r.ttft_s {
                ttfts.push(t * 1000.0);
            }
        }
    }
    rows.into_iter()
        .filter(|(row, _, _)| row.requests > 0)
        .map(|(mut row, mut ttfts, busy)| {
            row.request_share = row.requests as f64 / routed as f64;
            row.cached_share = if row.prompt_tokens > 0 {
                row.cached_tokens as f64 / row.prompt_tokens as f64
            } else {
                0.0
            };
            ttfts.sort_by(f64::total_cmp);
            row.ttft_p50_ms = if ttfts.is_empty() {
                0.0
            } else {
                percentile_sorted(&ttfts, 0.5)
            };
            row.mean_in_flight = if span > 0.0 { busy / span } else { 0.0 };
            row
        })
        .collect()
}

/// The KV transfers of a prefill/decode-disaggregated run: each completed record's `kv_transfer_ms` (the link's
/// time for its prompt's KV, from the prefill to the decode instance).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TransferSummary {
    /// Completed records that carry a transfer.
    pub transfers: u64,
    /// Mean transfer, ms.
    pub mean_ms: f64,
    /// Nearest-rank median and 99th percentile (as the summary's TTFT percentiles), ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// [`TransferSummary`] over the completed records that carry `kv_transfer_ms` (finite); `None` when none does (a
/// co-located fleet, one engine, a server that does not say its transfers).
pub fn kv_transfer_summary(records: &[RequestRecord]) -> Option<TransferSummary> {
    let mut ms: Vec<f64> = records
        .iter()
        .filter(|r| r.ok)
        .filter_map(|r| r.kv_transfer_ms)
        .filter(|m| m.is_finite())
        .collect();
    ms.sort_by(f64::total_cmp);
    Some(TransferSummary {
        transfers: ms.len() as u64,
        mean_ms: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
        p50_ms: nearest_rank(&ms, 0.5)?,
        p99_ms: nearest_rank(&ms, 0.99)?,
    })
}

/// A fleet's figures from its records: per replica ([`replica_split`]) and the KV transfers
/// ([`kv_transfer_summary`]). The page lays a live run's over its simulation's, both computed here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetFigures {
    /// Empty when no record names a replica.
    pub replicas: Vec<ReplicaSplit>,
    /// `None` without transfers.
    pub kv_transfer: Option<TransferSummary>,
}

/// [`FleetFigures`] of `records`; `None` when they name no replica and carry no transfer (one engine, one URL).
pub fn fleet_figures(records: &[RequestRecord]) -> Option<FleetFigures> {
    let f = FleetFigures {
        replicas: replica_split(records),
        kv_transfer: kv_transfer_summary(records),
    };
    (!f.replicas.is_empty() || f.kv_transfer.is_some()).then_some(f)
}

/// Sessions (`(session, inst)` pairs) whose records name more than one replica: with `session_affinity` none.
pub fn sessions_on_several_replicas(records: &[RequestRecord]) -> u64 {
    let mut first: rustc_hash::FxHashMap<(u64, u32), (u32, bool)> = rustc_hash::FxHashMap::default();
    for r in records {
        let Some(rep) = r.replica else { continue };
        let e = first.entry((r.session, r.inst)).or_insert((rep, false));
        if e.0 != rep {
            e.1 = true;
        }
    }
    first.values().filter(|(_, split)| *split).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(session: u64, replica: Option<u32>, ok: bool, prompt: u64, cached: u64, ttft: f64) -> RequestRecord {
        RequestRecord {
            schema: crate::record::RECORD_SCHEMA_VERSION,
            session,
            inst: 0,
            step: 0,
            steps_asked: 1,
            base_asked: prompt,
            ok,
            t_submit: session as f64,
            ttft_s: Some(ttft),
            wall_s: 2.0,
            gen_tokens: 8,
            asked_tokens: 8,
            prompt_tokens: Some(prompt),
            designed_prompt_tokens: None,
            cached_tokens: Some(cached),
            designed_cached_tokens: None,
            sse_frames: 8,
            prompt_chars: 0,
            queue_s: None,
            itl: None,
            finish_reason: None,
            usage_source: crate::record::UsageSource::Simulated,
            rx_clock: None,
            retries: 0,
            retry_statuses: Vec::new(),
            failure: None,
            error: None,
            prompt_block_hashes: Vec::new(),
            replica,
            spec: None,
            kv_transfer_ms: None,
            reasoning_tokens: None,
            ttft_content_s: None,
            parent: None,
        }
    }

    #[test]
    fn splits_by_replica_and_counts_split_sessions() {
        assert!(replica_split(&[rec(0, None, true, 10, 0, 0.1)]).is_empty());
        let recs = [
            rec(0, Some(0), true, 100, 50, 0.1),
            rec(0, Some(0), true, 200, 150, 0.3),
            rec(1, Some(2), true, 100, 0, 0.2),
            rec(1, Some(0), false, 100, 0, 0.2),
        ];
        let s = replica_split(&recs);
        assert_eq!(s.len(), 2, "replica 1 got nothing: no row");
        assert_eq!((s[0].replica, s[0].requests, s[0].completed), (0, 3, 2));
        assert_eq!((s[0].prompt_tokens, s[0].cached_tokens), (300, 200));
        assert!((s[0].cached_share - 2.0 / 3.0).abs() < 1e-12);
        assert!((s[0].request_share - 0.75).abs() < 1e-12);
        assert_eq!(s[0].ttft_p50_ms, 100.0);
        // Span: 0 → 3 s; replica 0 held 3 requests of 2 s each.
        assert!((s[0].mean_in_flight - 2.0).abs() < 1e-12);
        assert_eq!((s[1].replica, s[1].requests, s[1].cached_share), (2, 1, 0.0));
        assert_eq!(sessions_on_several_replicas(&recs), 1);
    }

    #[test]
    fn transfers_are_summarized_over_completed_records() {
        let mut recs: Vec<RequestRecord> = (0..4).map(|i| rec(i, None, true, 100, 0, 0.1)).collect();
        assert_eq!(kv_transfer_summary(&recs), None);
        assert_eq!(fleet_figures(&recs), None, "one engine: no fleet figures");
        for (r, ms) in recs.iter_mut().zip([40.0, 10.0, 30.0, 20.0]) {
            r.kv_transfer_ms = Some(ms);
        }
        // A failed request's transfer is not counted.
        let mut failed = rec(9, None, false, 100, 0, 0.1);
        failed.kv_transfer_ms = Some(1000.0);
        recs.push(failed);
        let t = kv_transfer_summary(&recs).unwrap_or_else(|| panic!("transfers"));
        assert_eq!(t.transfers, 4);
        assert!((t.mean_ms - 25.0).abs() < 1e-12);
        // Nearest rank: ceil(0.5 * 4) = 2nd of 10, 20, 30, 40; ceil(0.99 * 4) = 4th.
        assert_eq!((t.p50_ms, t.p99_ms), (20.0, 40.0));
        let f = fleet_figures(&recs).unwrap_or_else(|| panic!("figures"));
        assert!(f.replicas.is_empty());
        assert_eq!(f.kv_transfer, Some(t));
        recs[0].replica = Some(1);
        let f = fleet_figures(&recs).unwrap_or_else(|| panic!("figures"));
        assert_eq!(f.replicas, replica_split(&recs));
        assert_eq!(f.replicas.len(), 1);
    }
}
