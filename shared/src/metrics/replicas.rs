//! How a run's requests were spread over replicas ([`replica_split`]): from the records' `replica`, so the same
//! function reads a simulated fleet's records and a live `replay` over several URLs, and the two lay over each
//! other.

use serde::{Deserialize, Serialize};

use crate::metrics::percentile_sorted;
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
}
