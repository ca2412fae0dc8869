//! How big a run is before it starts: [`Estimate`] (requests or session steps, and bytes held), checked against a
//! [`Budget`] — the one rule that the CLI's `simulate`, live replay's planning and the page all apply, so a scenario
//! that cannot fit is refused with its estimate and the limit instead of aborting on a failed allocation.
//!
//! The estimate is deliberately simple and errs high where it cannot know:
//! - **requests**: the workload's request count; for sessions, per slot that starts (slot `i` starts at
//!   `i × stagger_s`, none after `duration_s`): its steps, at most one per step time (`think_s`, plus 10 ms a
//!   generated token, plus 0.5 s: the step time the engine sizes its record vector by) over the run, and with
//!   `respawn` one per step time for the whole run;
//! - **bytes**: `requests × bytes per request` (a kept record, or the scoring state of a streamed one; a queued
//!   request is counted there) plus the prompts admitted at once (at most the profile's `max_num_seqs`), each
//!   holding one 8-byte hash per KV block (`prompt / block_size`, the longest prompt for sessions and users), plus
//!   the session plans drawn for every started slot (12 bytes a step, the whole plan at the session's start);
//! - **a trace's content**: the trace's own hash ids (16 bytes each: the id and its prefix key), and, for each
//!   request that fits the engine (prompt + output within the profile's model length: one that does not fails at
//!   submission and holds nothing), its prompt's engine blocks that the hash ids name, indexed by the prefix cache
//!   for the whole run ([`BYTES_PER_CONTENT_BLOCK`] each), plus the longest request's block hashes while it is
//!   submitted (8 bytes a block).
//!
//! Per-request costs were measured on `examples/engine-10k.json` scaled up (docs/simulator.md, "Size limits").

use crate::engine::EngineScenario;
use crate::scenario::Scenario;
use crate::seed_model::SeedWorkload;
use crate::workload::Workload;

/// Bytes a kept [`crate::record::RequestRecord`] and its share of the run's state take (the page keeps them all;
/// measured ≈ 670 B a request at 2,000,000 requests).
pub const BYTES_PER_KEPT_RECORD: f64 = 700.0;
/// Bytes a request costs when records are scored as they complete and dropped (the CLI; ≈ 80 MB per 1,000,000).
pub const BYTES_PER_STREAMED_RECORD: f64 = 100.0;
/// Bytes a step of a session plan takes (its generation length and think time).
pub const BYTES_PER_PLAN_STEP: f64 = 12.0;
/// Bytes a trace request's engine block of named content takes at most: the prefix cache's index keeps an
/// entry of 16 bytes (a hash, its chain and place) for every block of content the run has seen, in a hash table of
/// 17 bytes a bucket that doubles as it grows (1.14–2.29 buckets an entry), and while it grows the old table and
/// the new one are both held: up to 3.43 buckets, 58 bytes, an entry; rounded up. Measured: 200 Mooncake rows of
/// 10,000 hash ids (512 tokens each) on 16-token blocks asked for one table of 2,281,701,392 bytes (2^27 buckets)
/// while holding the old one of 1.14 GB.
pub const BYTES_PER_CONTENT_BLOCK: f64 = 64.0;

/// The size of a run, estimated from its scenario alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Requests (or session steps) the run sends.
    pub requests: f64,
    /// Peak memory the run holds, bytes (see the module docs for the formula).
    pub bytes: f64,
}

/// The largest run a consumer accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Most requests or session steps.
    pub max_requests: f64,
    /// Most estimated bytes.
    pub max_bytes: f64,
}

impl Budget {
    /// The default for every consumer: 2,000,000 requests or session steps and 4 GiB (a browser tab's whole wasm
    /// memory). The CLI raises it with `--max-requests` / `--max-memory-gib`.
    pub const DEFAULT: Budget = Budget {
        max_requests: 2_000_000.0,
        max_bytes: 4.0 * GIB,
    };

    /// `Ok` when `estimate` fits; otherwise the error states the estimate and the limit it passes.
    pub fn check(&self, estimate: &Estimate) -> Result<(), TooLarge> {
        if estimate.requests > self.max_requests || estimate.bytes > self.max_bytes {
            Err(TooLarge {
                estimate: *estimate,
                budget: *self,
            })
        } else {
            Ok(())
        }
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// A run refused before it starts because its estimate passes the budget.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.message())]
pub struct TooLarge {
    pub estimate: Estimate,
    pub budget: Budget,
}

impl TooLarge {
    fn message(&self) -> String {
        let (e, b) = (&self.estimate, &self.budget);
        let part = |what: String, over: bool, limit: String| {
            if over {
                format!("about {what}, above the limit of {limit}")
            } else {
                format!("about {what} (limit {limit})")
            }
        };
        format!(
            "the scenario is too large to run: {}, and {}",
            part(
                format!("{} requests or session steps", count(e.requests)),
                e.requests > b.max_requests,
                count(b.max_requests)
            ),
            part(
                format!("{} of memory", size(e.bytes)),
                e.bytes > b.max_bytes,
                size(b.max_bytes)
            )
        )
    }
}

/// `1234567.0` → `1,234,567`; beyond 10^15 in scientific notation.
fn count(x: f64) -> String {
    if !(x.is_finite() && x < 1e15) {
        return format!("{x:.3e}");
    }
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn size(bytes: f64) -> String {
    if bytes >= GIB {
        format!("{:.1} GiB", bytes / GIB)
    } else {
        format!("{:.0} MiB", (bytes / (1u64 << 20) as f64).ceil())
    }
}

impl Scenario {
    /// The run's size before it starts; `keep_records`: whether every record stays in memory (the page) or is
    /// scored and dropped as it completes (the CLI).
    pub fn estimate(&self, keep_records: bool) -> Estimate {
        let per_request = if keep_records {
            BYTES_PER_KEPT_RECORD
        } else {
            BYTES_PER_STREAMED_RECORD
        };
        match self {
            Scenario::Seed(s) => {
                let SeedWorkload::Bursty(w) = &s.workload;
                let requests = w.num_requests as f64;
                // The seed model holds its whole trace and every result (no prompt hashes).
                Estimate {
                    requests,
                    bytes: requests * BYTES_PER_KEPT_RECORD,
                }
            }
            Scenario::Engine(e) => engine_estimate(e, per_request),
        }
    }

    /// [`Scenario::estimate`] checked against `budget`: the estimate, or why the run is refused.
    pub fn check_size(&self, keep_records: bool, budget: &Budget) -> Result<Estimate, TooLarge> {
        let e = self.estimate(keep_records);
        budget.check(&e).map(|()| e)
    }
}

fn engine_estimate(e: &EngineScenario, per_request: f64) -> Estimate {
    let s = e.workload.size();
    let hashes_per_prompt = s.held_prompt_tokens / f64::from(e.profile.block_size.max(1));
    // Only admitted requests hold their block hashes: queued ones wait as a few numbers (counted per request).
    let held = s.held_prompts.min(f64::from(e.profile.max_num_seqs));
    Estimate {
        requests: s.requests,
        bytes: s.requests * per_request
            + held * hashes_per_prompt * 8.0
            + s.plan_steps * BYTES_PER_PLAN_STEP
            + trace_content_bytes(e),
    }
}

/// A trace's content (see the module docs); 0 for other workloads and traces without hash ids.
fn trace_content_bytes(e: &EngineScenario) -> f64 {
    let Workload::Trace(t) = &e.workload else {
        return 0.0;
    };
    let (tb, eb) = (
        u64::from(t.hash_block_size().max(1)),
        u64::from(e.profile.block_size.max(1)),
    );
    let model_len = e.profile.model_len();
    let (mut ids, mut blocks, mut longest) = (0u64, 0u64, 0u64);
    for r in &t.requests {
        ids += r.hash_ids.len() as u64;
        if r.prompt_tokens() + u64::from(r.output_tokens) > model_len {
            continue;
        }
        let covered = (r.hash_ids.len() as u64).saturating_mul(tb).min(r.prompt_tokens()) / eb;
        blocks += covered;
        longest = longest.max(covered);
    }
    ids as f64 * 16.0 + blocks as f64 * BYTES_PER_CONTENT_BLOCK + longest as f64 * 8.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(workload: serde_json::Value) -> Scenario {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../../examples/engine-10k.json")).expect("example is JSON");
        v["workload"] = workload;
        Scenario::from_value(v).expect("valid scenario")
    }

    #[test]
    fn the_issues_scenarios_are_over_budget_and_the_examples_within() {
        let ladder = vec!["10000000:100000"; 4096].join(",");
        for (w, requests) in [
            (
                serde_json::json!({"kind": "poisson", "num_requests": 100_000_000u64, "rate_rps": 20.0}),
                1e8,
            ),
            (
                serde_json::json!({"kind": "sessions", "sessions": 1_000_000, "steps": 100_000,
                    "stagger_s": 0.0, "duration_s": 1e8}),
                1e11,
            ),
            (
                serde_json::json!({"kind": "sessions", "ladder": ladder, "stagger_s": 0.0, "duration_s": 1e8}),
                4096.0 * 1e5,
            ),
        ] {
            let sc = engine(w);
            let e = sc.estimate(false);
            assert_eq!(e.requests, requests);
            let err = sc
                .check_size(false, &Budget::DEFAULT)
                .expect_err("over budget")
                .to_string();
            assert!(err.contains("above the limit of 2,000,000"), "{err}");
        }
        for text in [
            include_str!("../../examples/engine-10k.json"),
            include_str!("../../examples/engine-sessions-10k.json"),
            include_str!("../../examples/engine-sessions-1m.json"),
            include_str!("../../examples/seed-100k.json"),
        ] {
            let sc = Scenario::from_json(text).expect("example");
            sc.check_size(false, &Budget::DEFAULT)
                .expect("the CLI runs every example");
        }
    }

    #[test]
    fn sessions_are_bounded_by_their_starts_and_the_run_time() {
        // A step takes 4 s of thought + 700 × 10 ms + 0.5 s = 11.5 s: 261 steps fit in 3,000 s.
        let sc = engine(
            serde_json::json!({"kind": "sessions", "sessions": 50, "steps": 12, "respawn": true,
            "think_s": 4.0, "gen_tokens": 700, "duration_s": 3000.0}),
        );
        assert_eq!(sc.estimate(true).requests, 50.0 * 261.0);
        // Without respawn each slot sends its steps once, and 4 s between starts lets only 226 of a million
        // sessions start in 900 s (the old binary ran this one: 646 requests).
        let sc = engine(serde_json::json!({"kind": "sessions", "sessions": 1_000_000, "steps": 100_000}));
        let by_time = (900.0f64 / 13.5).floor() + 1.0;
        assert_eq!(sc.estimate(false).requests, 226.0 * by_time);
        sc.check_size(false, &Budget::DEFAULT).expect("fits");
        let ladder = Scenario::from_json(include_str!("../../examples/engine-sessions-1m.json")).expect("example");
        let e = ladder.estimate(false);
        assert!((1e6..1.5e6).contains(&e.requests), "{e:?}");
        let e = sc.estimate(true);
        assert!(e.bytes > e.requests * BYTES_PER_KEPT_RECORD);
    }

    #[test]
    fn memory_alone_can_refuse() {
        let ladder = vec!["10000:100000"; 4096].join(",");
        let sc = engine(serde_json::json!({"kind": "sessions", "ladder": ladder, "stagger_s": 0.0}));
        let wide = Budget {
            max_requests: 1e12,
            ..Budget::DEFAULT
        };
        let err = sc.check_size(false, &wide).expect_err("plans of 4.9 GB").to_string();
        assert!(err.contains("of memory, above the limit of 4.0 GiB"), "{err}");
        assert!(!err.contains("requests or session steps, above"), "{err}");
    }

    /// A Mooncake trace of `rows` rows of `input` tokens naming `ids` hash ids each (512-token trace blocks).
    fn mooncake(rows: u64, input: u64, ids: u64) -> Scenario {
        let mut sc = engine(serde_json::json!({"kind": "trace", "path": "t.jsonl"}));
        let text: String = (0..rows)
            .map(|i| {
                let hash_ids: Vec<u64> = (i * ids..(i + 1) * ids).collect();
                format!(
                    "{}\n",
                    serde_json::json!({"timestamp": i * 1000, "input_length": input, "output_length": 10,
                        "hash_ids": hash_ids})
                )
            })
            .collect();
        let Scenario::Engine(e) = &mut sc else { panic!("engine") };
        let Workload::Trace(t) = &mut e.workload else {
            panic!("trace")
        };
        t.load_text(&text).expect("trace");
        sc
    }

    /// The trace that aborted `simulate` on a failed allocation (200 rows of 5,120,000 tokens, 10,000 hash ids
    /// each) is refused by its estimate when its requests fit the engine, and costs little when none does (they
    /// fail at submission, unhashed); an ordinary trace stays well within the budget.
    #[test]
    fn a_trace_counts_its_content() {
        let fits_all = |sc: &mut Scenario| {
            let Scenario::Engine(e) = sc else { panic!("engine") };
            e.profile.num_kv_blocks = 10_000_000;
        };
        let mut big = mooncake(200, 5_120_000, 10_000);
        fits_all(&mut big);
        let err = big
            .check_size(false, &Budget::DEFAULT)
            .expect_err("4 GB of index")
            .to_string();
        assert!(err.contains("of memory, above the limit of 4.0 GiB"), "{err}");
        // 27,000 blocks of 16 tokens: none fits, the content is never indexed.
        let refused = mooncake(200, 5_120_000, 10_000);
        let e = refused.check_size(false, &Budget::DEFAULT).expect("nothing indexed");
        assert!(e.bytes < GIB, "{e:?}");
        let small = mooncake(1000, 4000, 8);
        let e = small.check_size(false, &Budget::DEFAULT).expect("fits");
        assert!(e.bytes > 1000.0 * 250.0 * BYTES_PER_CONTENT_BLOCK, "{e:?}");
    }

    #[test]
    fn counts_read_like_numbers() {
        assert_eq!(count(2_000_000.0), "2,000,000");
        assert_eq!(count(999.0), "999");
        assert_eq!(count(1e20), "1.000e20");
    }
}
