//! Calibration: the probe that `loadshape calibrate --url` sends, and the fit of an [`EngineProfile`] from the
//! records of any live run(s). Pure: the agent sends the probe and reads the files.
//!
//! - [`plan_probe`]: the designed probe, as [`ProbePhase`]s (one closed-loop run each): cold prefills at several
//!   lengths and warm prefills after cached prefixes, one request at a time; warm prefills of a fixed size while
//!   another request decodes at varied contexts; then decode at several batch sizes and contexts.
//! - [`fit`]: from [`RequestRecord`]s to a [`Fit`]: the step-time coefficients, each with a standard error, R² per
//!   stage, the residuals per request, and the requests it could not use (with why). The method (two robust
//!   linear regressions, Huber loss by IRLS) and its checks are in `docs/calibration.md`.
//!
//! The two stages:
//! 1. **Decode** (TPOT): a request's median inter-token gap (with speculative decoding, where the record carries
//!    the server's draft counts: its mean decode step without the longest gap, [`spec::decode_steps`]) is one
//!    decode step of the batch it ran in:
//!    `gap = step_fixed_ms + per_seq_ms·batch + per_ctx_token_ms·Σcontext + batch_kv_ms_per_ktok·batch·Σcontext/1000`
//!    (the last term only with 3 or more batch sizes, and kept only where it is significant). Batch and Σcontext
//!    are reconstructed from the records themselves (every request's decode interval, its context growing
//!    linearly from its prompt).
//! 2. **Prefill** (TTFT), requests alone on the server during their prefill: `ttft − per_ctx_token_ms·cached =
//!    F + new / prefill_tokens_per_ms + prefill_ctx_ms_per_ktok·(new·cached + new(new−1)/2)/1000`, where
//!    `F = step_fixed_ms + per_seq_ms + prefill_fixed_ms` plus the client's own overhead.
//! 3. **Prefill beside other sequences' KV** (`prefill_batch_kv_ms_per_ktok`), requests whose prefill ran while
//!    others decoded and nobody else prefilled: what stages 1 and 2 predict for that step (and half a decode step
//!    of waiting for the step in progress) is subtracted from the TTFT, and the rest is fitted as
//!    `a + prefill_batch_kv_ms_per_ktok·new·C/1000`, `C` the others' KV context (reconstructed like the decode
//!    batch). Kept only where significant, like `batch_kv_ms_per_ktok`.

pub mod cap;
mod observe;
pub mod spec;
pub mod tiers;

use serde::{Deserialize, Serialize};

use crate::deploy::transfer::Transfer;
use crate::engine::EngineProfile;
use crate::ladder::{Ladder, Rung};
use crate::metrics::{mad, median};
use crate::record::RequestRecord;
use crate::workload::SessionWorkload;
use crate::workload::trace::{TraceRequest, TraceWorkload};

/// One request of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRequest {
    /// Tokens of the run's shared prefix at the start of the prompt (cacheable once one request sent it).
    pub shared_prefix_tokens: u32,
    pub unique_prompt_tokens: u32,
    pub output_tokens: u32,
}

/// One closed-loop run of the probe: `users` at a time, the requests in order, for `budget_share` of the budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbePhase {
    pub name: String,
    pub users: u32,
    pub requests: Vec<ProbeRequest>,
    /// Fraction of the whole budget this phase may take (Σ = 1).
    pub budget_share: f64,
    /// A conversation phase instead of `requests`: agent sessions that resend their growing conversation, the
    /// previous reply included (for `reply_cached_share`). Its duration and drain are the agent's to set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<SessionWorkload>,
    /// A phase of requests whose content is named by hash ids, each sent when the previous one ends (the
    /// `returns` phase: sessions parked and brought back, [`plan_returns`]); replaces `requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceWorkload>,
}

/// What bounds the probe's sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeLimits {
    /// Longest prompt sent, tokens (keep it under the server's per-request context).
    pub max_prompt_tokens: u32,
    /// Largest decode batch probed (the server's `max_num_seqs`, capped).
    pub max_batch: u32,
    /// Output length of the decode probes, tokens.
    pub decode_output_tokens: u32,
    /// Probe prefills beside a decoding request at varied contexts (the `prefill-kv` phase, for
    /// `prefill_batch_kv_ms_per_ktok`). Off: the probe of before that term, phase for phase.
    pub prefill_kv: bool,
    /// Probe a short conversation (the `conversation` phase, for `reply_cached_share`: how much of a reply the
    /// server finds cached when it comes back as text). Off: no such phase.
    pub conversation: bool,
    /// Probe sessions brought back after their KV was evicted (the `returns` phase, for the prefix-cache tiers
    /// below the GPU's): the GPU's KV capacity in tokens, which the parked sessions must outgrow. `None`: no such
    /// phase.
    pub returns: Option<u64>,
    /// Probe the server's `max_num_seqs` with this many requests started together (the `cap` phase, first; see
    /// [`CAP_PROBE_REQUESTS`]). `None`: no such phase (the cap is given or the server reports it).
    pub cap: Option<u32>,
    /// With `returns`, a slot engine's slots (llama.cpp: a slot keeps only its last prompt, so a session leaves the
    /// GPU once as many other sessions as there are slots have come since, whatever their size). `None`: the
    /// parked sessions must outgrow `returns` tokens.
    pub returns_slots: Option<u32>,
}

impl Default for ProbeLimits {
    fn default() -> Self {
        ProbeLimits {
            max_prompt_tokens: 4096,
            max_batch: 8,
            decode_output_tokens: 96,
            prefill_kv: true,
            conversation: true,
            returns: None,
            returns_slots: None,
            cap: None,
        }
    }
}

/// Requests the `cap` phase starts together, to see the server's `max_num_seqs` when it does not report it (vLLM
/// and SGLang do not; llama.cpp's `/props` gives its slots). Above the caps users meet (vLLM's `--max-num-seqs` of
/// 16 to 128, SGLang's `--max-running-requests` alike, the presets' 64), so that 128 too shows as a queue rather
/// than as "at least"; below vLLM's default of 256, which a lower bound keeps. Cheap: [`CAP_PROMPT_TOKENS`]-token
/// prompts and [`CAP_OUTPUT_TOKENS`] output tokens each are one short round of decode on a GPU (160 sequences of
/// 48 tokens: 7,680 tokens of KV), and on a 2-core machine's sim-server a second or two of streaming; a server that
/// admits fewer serves the rest in rounds, and the phase's time share ([`CAP_SHARE`]) cuts them once a few rounds
/// have shown the queue.
pub const CAP_PROBE_REQUESTS: u32 = 160;
/// Prompt tokens of each `cap` request (unique, no shared prefix).
pub const CAP_PROMPT_TOKENS: u32 = 16;
/// Output tokens of each `cap` request: a decode long enough that a round's requests overlap over most of it
/// whatever the jitter of their starts ([`cap::CORE_SHARE`]), short enough for several rounds in the phase's time.
pub const CAP_OUTPUT_TOKENS: u32 = 32;
/// Share of the probe's budget the `cap` phase takes (out of the decode phases').
pub const CAP_SHARE: f64 = 0.04;
/// Least drain of the `cap` phase, seconds: a small budget's share still sees a second round start.
pub const CAP_MIN_DRAIN_S: f64 = 2.0;

/// Errors of planning and fitting; each names what is missing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrateError {
    #[error("probe limits: {0}")]
    Limits(String),
    #[error("cannot fit {stage}: {reason}")]
    Unfit { stage: &'static str, reason: String },
}

/// The designed probe (see the module docs). Cycles are repeated so that whatever prefix of a phase the budget
/// lets through still covers every length.
pub fn plan_probe(l: &ProbeLimits) -> Result<Vec<ProbePhase>, CalibrateError> {
    if l.max_prompt_tokens < 256 {
        return Err(CalibrateError::Limits(format!(
            "max_prompt_tokens must be >= 256 (got {})",
            l.max_prompt_tokens
        )));
    }
    if let Some(c) = l.cap
        && c < 2
    {
        return Err(CalibrateError::Limits(format!("cap must be >= 2 requests (got {c})")));
    }
    if l.max_batch == 0 || l.decode_output_tokens < 8 {
        return Err(CalibrateError::Limits(format!(
            "max_batch must be >= 1 and decode_output_tokens >= 8 (got {}, {})",
            l.max_batch, l.decode_output_tokens
        )));
    }
    let m = l.max_prompt_tokens;
    let cold: Vec<u32> = [1, 2, 4, 8, 16, 24, 32].iter().map(|&k| m * k / 32).collect();
    let prefix = m * 3 / 4;
    let warm: Vec<(u32, u32)> = [(m / 4, 64), (m / 2, 64), (prefix, 64), (m / 4, m / 8), (m / 2, m / 8)]
        .into_iter()
        .filter(|&(c, u)| c + u <= m)
        .collect();
    let mut prefill = vec![ProbeRequest {
        // Puts the shared prefix in the cache; later warm requests hit a prefix of it.
        shared_prefix_tokens: prefix,
        unique_prompt_tokens: 16,
        output_tokens: 2,
    }];
    for _cycle in 0..8 {
        for (i, &n) in cold.iter().enumerate() {
            prefill.push(ProbeRequest {
                shared_prefix_tokens: 0,
                unique_prompt_tokens: n,
                output_tokens: 2,
            });
            if let Some(&(c, u)) = warm.get(i) {
                prefill.push(ProbeRequest {
                    shared_prefix_tokens: c,
                    unique_prompt_tokens: u,
                    output_tokens: 2,
                });
            }
        }
    }
    let mut batches = vec![1u32];
    while batches.last().is_some_and(|&b| b * 2 <= l.max_batch.min(64)) {
        let b = batches.last().copied().unwrap_or(1) * 2;
        batches.push(b);
    }
    if batches.last() != Some(&l.max_batch.min(64)) {
        batches.push(l.max_batch.min(64));
    }
    // Every request of a phase shares all but its last 16 tokens with the others, so after the first ones the
    // server's prefix cache (vLLM's blocks, llama.cpp's slot) leaves a short prefill: the phase's time goes to
    // decoding, not to recomputing its context.
    let contexts = [m / 16, m / 2];
    // The conversation's share comes out of prefill's (whose fits have the most data: robust R² 0.99 here).
    let (prefill_share, kv_share) = match (l.prefill_kv, l.conversation && m >= 1024) {
        (true, true) => (0.25, 0.15),
        (true, false) => (0.3, 0.15),
        (false, true) => (0.35, 0.0),
        (false, false) => (0.4, 0.0),
    };
    // Up to 4 sessions of 5 steps from ⅛ of m, replies of up to 64 tokens and 64 tokens of tool output each step:
    // the steps after the first show what of the previous reply the server found cached. A fixed amount of work
    // (no respawn: the phase ends when the sessions do) under a time cap: 4 steps after the first per session, so
    // that a loaded machine still gets the pairs it needs before the cap (with 2 respawning sessions in 5 % of a
    // 50 s budget, a loaded CI machine finished 2 pairs).
    let conversation = (l.conversation && m >= 1024).then(|| {
        let (sessions, rung) = (
            l.max_batch.clamp(1, 4),
            Rung {
                base_tokens: u64::from(m / 8),
                steps: 5,
            },
        );
        SessionWorkload {
            sessions,
            steps: rung.steps,
            base_tokens: rung.base_tokens,
            gen_tokens: l.decode_output_tokens.min(64),
            tool_tokens: 64,
            think_s: 0.0,
            ladder: Some(Ladder {
                rungs: vec![rung; sessions as usize],
            }),
            respawn: false,
            stagger_s: 0.0,
            ..SessionWorkload::default()
        }
    });
    let conversation_share = if conversation.is_some() { 0.1 } else { 0.0 };
    // The returns phase's share comes out of the decode phases' (which have many more requests than they need).
    let returns = l.returns.and_then(|gpu| plan_returns(m, gpu, l.returns_slots));
    let returns_share = if returns.is_some() { RETURNS_SHARE } else { 0.0 };
    // So is the cap phase's.
    let cap_share = if l.cap.is_some() { CAP_SHARE } else { 0.0 };
    let decode_share = (1.0 - prefill_share - kv_share - conversation_share - returns_share - cap_share)
        / (batches.len() * contexts.len()) as f64;
    let mut phases = Vec::new();
    if let Some(c) = l.cap {
        // First: what it finds sizes the decode phases after it (`max_batch`, the agent plans them again). All
        // `c` requests start at once, one user each.
        phases.push(ProbePhase {
            name: "cap".into(),
            users: c,
            requests: vec![
                ProbeRequest {
                    shared_prefix_tokens: 0,
                    unique_prompt_tokens: CAP_PROMPT_TOKENS,
                    output_tokens: CAP_OUTPUT_TOKENS,
                };
                c as usize
            ],
            budget_share: cap_share,
            conversation: None,
            trace: None,
        });
    }
    phases.push(ProbePhase {
        name: "prefill".into(),
        users: 1,
        requests: prefill,
        budget_share: prefill_share,
        conversation: None,
        trace: None,
    });
    if l.prefill_kv {
        // Two users: one request (the holder) decodes 4 × `decode_output_tokens` at a context set per cycle (½, ⅛,
        // ¾, ¼ of m: the KV another slot holds), while the other user sends 16 warm prefills of a fixed size (256 or
        // m/8 new tokens after m/4 cached, 2 output tokens); whichever user finishes first takes the next holder,
        // the other the next 16 prefills, so one holder decodes beside a chain of prefills most of the time. The
        // prefills' TTFT grows with the holder's context only where a prompt token attends to the other
        // sequences' KV (llama.cpp's unified KV cache).
        let new = (m / 8).clamp(64, 256);
        let cached = m / 4;
        // Contrasting contexts first, so that a short phase still sees a spread of them.
        let holds: Vec<u32> = [m / 2, m / 8, m * 3 / 4, m / 4]
            .into_iter()
            .filter(|&c| c >= 32 && c + 16 <= m)
            .collect();
        let mut requests = Vec::new();
        for _cycle in 0..8 {
            for &c in &holds {
                requests.push(ProbeRequest {
                    shared_prefix_tokens: c - 16,
                    unique_prompt_tokens: 16,
                    output_tokens: l.decode_output_tokens.saturating_mul(4),
                });
                for _ in 0..16 {
                    requests.push(ProbeRequest {
                        shared_prefix_tokens: cached,
                        unique_prompt_tokens: new,
                        output_tokens: 2,
                    });
                }
            }
        }
        phases.push(ProbePhase {
            name: "prefill-kv".into(),
            users: 2.min(l.max_batch.max(1)),
            requests,
            budget_share: kv_share,
            conversation: None,
            trace: None,
        });
    }
    for &b in &batches {
        for &p in &contexts {
            phases.push(ProbePhase {
                name: format!("decode-b{b}-p{p}"),
                users: b,
                requests: vec![
                    ProbeRequest {
                        shared_prefix_tokens: p - 16,
                        unique_prompt_tokens: 16,
                        output_tokens: l.decode_output_tokens,
                    };
                    (b * 40) as usize
                ],
                budget_share: decode_share,
                conversation: None,
                trace: None,
            });
        }
    }
    if let Some(w) = conversation {
        phases.push(ProbePhase {
            name: "conversation".into(),
            users: w.sessions,
            requests: Vec::new(),
            budget_share: conversation_share,
            conversation: Some(w),
            trace: None,
        });
    }
    if let Some(t) = returns {
        phases.push(ProbePhase {
            name: "returns".into(),
            users: 1,
            requests: Vec::new(),
            budget_share: returns_share,
            conversation: None,
            trace: Some(t),
        });
    }
    Ok(phases)
}

/// Seconds phase `i` of `phases` may take once `elapsed_s` of a `budget_s` probe have gone: what is left, shared
/// among the phases not yet run in proportion to their `budget_share` (a phase that ended early leaves its time to
/// the later ones; one that ran over takes it from them), but never less than half the phase's own share of the
/// whole budget, so that a late phase still measures something (the probe then ends after its budget). With every
/// phase on time this is `budget_s × budget_share`.
pub fn phase_seconds(phases: &[ProbePhase], i: usize, budget_s: f64, elapsed_s: f64) -> f64 {
    let Some(ph) = phases.get(i) else { return 0.0 };
    let rest: f64 = phases[i..].iter().map(|p| p.budget_share).sum();
    let left = (budget_s - elapsed_s).max(0.0);
    let fair = if rest > 0.0 { left * ph.budget_share / rest } else { 0.0 };
    fair.max(0.5 * budget_s * ph.budget_share)
}

impl ProbePhase {
    /// Seconds in which the phase starts requests and seconds of its drain, in which the ones in flight finish
    /// (then any still running are cut), given the phase's time `share_s` ([`phase_seconds`]) and the whole
    /// probe's `budget_s`: ⅘ and ⅕ of its time. A decode phase's drain is its whole time and at least a tenth of
    /// the budget: its requests are its data, and at a large batch and context one round of them can outlast a
    /// short share (4 sequences at 3,400 tokens on a loaded 2-core machine completed none within a drain of a
    /// fifth, nor within one of 6 s), so it waits for the round in flight; it ends as soon as that round does, and
    /// the later phases' time is shared out again.
    ///
    /// The `cap` phase starts all its requests at once: half its time for them to start, the other half (at least
    /// [`CAP_MIN_DRAIN_S`]: rounds of a server that queues them) for what it measures, then the rest are cut.
    pub fn start_and_drain(&self, share_s: f64, budget_s: f64) -> (f64, f64) {
        if self.name.starts_with("decode-") {
            (0.8 * share_s, share_s.max(0.1 * budget_s))
        } else if self.name == "cap" {
            (0.5 * share_s, (0.5 * share_s).max(CAP_MIN_DRAIN_S))
        } else {
            (0.8 * share_s, 0.2 * share_s)
        }
    }
}

/// Share of the probe's budget the `returns` phase takes.
pub const RETURNS_SHARE: f64 = 0.2;
/// Most sessions the `returns` phase parks (its time share usually ends it first).
pub const MAX_PARKED_SESSIONS: u32 = 400;
/// Tokens per content block of the `returns` phase, and of what a return adds to its session's prompt.
pub const RETURN_BLOCK_TOKENS: u32 = 64;

/// Tokens of a parked session on a slot engine (`returns_slots`): there a session leaves the GPU after as many other
/// sessions as slots, whatever their size, and prefill cost grows with the prompt (llama.cpp's attention over the
/// context), so shorter sessions park more tokens in the phase's time.
pub const RETURN_SLOT_SESSION_TOKENS: u32 = 1024;

/// The `returns` phase: one request at a time (each sent when the previous ends), sessions of `m / 2` tokens of
/// their own content (on a slot engine [`RETURN_SLOT_SESSION_TOKENS`] at most; session `k` is step 0 of session
/// `k`). Sessions are parked until together they outgrow `gpu_kv_tokens` (the GPU's prefix cache), or, with
/// `slots`, until the oldest has been followed by as many other sessions as slots (llama.cpp's slots no longer
/// hold it); then after every checkpoint the oldest session not yet brought back returns (step 1: its prompt and
/// one more block): restored from a lower tier or recomputed. A return is checked against everything sent after
/// its session was parked, so the checkpoints (each ≈ 6 % more sessions parked since the one checked than the
/// last) bracket the tiers' capacity to ≈ 6 %. `None` when the GPU holds more than [`MAX_PARKED_SESSIONS`] less 8
/// such sessions.
pub fn plan_returns(max_prompt_tokens: u32, gpu_kv_tokens: u64, slots: Option<u32>) -> Option<TraceWorkload> {
    let bt = RETURN_BLOCK_TOKENS;
    let half = match slots {
        Some(_) => (max_prompt_tokens / 2).min(RETURN_SLOT_SESSION_TOKENS),
        None => max_prompt_tokens / 2,
    };
    let blocks = (half / bt).max(2);
    let session_tokens = u64::from(blocks * bt);
    // Too large a GPU cache to outgrow within the phase: no phase.
    let by_tokens = gpu_kv_tokens / session_tokens + 2;
    let first = u32::try_from(slots.map_or(by_tokens, |s| by_tokens.min(u64::from(s) + 1)))
        .ok()
        .filter(|&f| f + 8 <= MAX_PARKED_SESSIONS)?;
    let content = |k: u32, j: u32| (u64::from(k) + 1) << 24 | u64::from(j);
    let mut requests: Vec<TraceRequest> = Vec::new();
    let push = |r: TraceRequest, requests: &mut Vec<TraceRequest>| {
        let after = requests
            .len()
            .checked_sub(1)
            .map(|i| vec![i as u32])
            .unwrap_or_default();
        requests.push(TraceRequest { after, ..r });
    };
    let park = |k: u32| TraceRequest {
        arrival_ms: 0.0,
        shared_prefix_tokens: 0,
        unique_prompt_tokens: blocks * bt,
        output_tokens: 2,
        hash_ids: (0..blocks).map(|j| content(k, j)).collect(),
        after: Vec::new(),
        delay_ms: 0.0,
        session: Some(k),
        prefix_reset: false,
    };
    let (mut parked, mut returned, mut next_check) = (0u32, 0u32, first);
    while parked < MAX_PARKED_SESSIONS {
        push(park(parked), &mut requests);
        parked += 1;
        if parked >= next_check && returned < parked {
            let mut ids: Vec<u64> = (0..blocks).map(|j| content(returned, j)).collect();
            ids.push(content(returned, blocks));
            push(
                TraceRequest {
                    unique_prompt_tokens: (blocks + 1) * bt,
                    hash_ids: ids,
                    ..park(returned)
                },
                &mut requests,
            );
            // The sessions parked from the oldest one still out (what a return is checked against) grow by 6 %
            // (at least one) from one checkpoint to the next.
            let checked = parked - returned;
            returned += 1;
            next_check = returned + (checked + 1).max((f64::from(checked) * 1.06).ceil() as u32);
        }
    }
    Some(TraceWorkload {
        block_size: Some(bt),
        ..TraceWorkload::inline(requests)
    })
}

/// What the fit may assume beyond the records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FitOptions {
    /// Profile the fitted coefficients go into: its name, basis and limits are kept (the limits come from the
    /// server or the command line).
    pub limits: Option<EngineProfile>,
    /// `batch_kv_ms_per_ktok`: `None` lets the data decide (the rules in `docs/calibration.md`), `Some(false)` fixes
    /// it at 0 (an engine known to have no such term, like vLLM), `Some(true)` keeps it wherever it is identified
    /// and not negative.
    pub batch_kv: Option<bool>,
    /// `prefill_batch_kv_ms_per_ktok`, the same three choices as `batch_kv`.
    pub prefill_kv: Option<bool>,
    /// Leave `reply_cached_share` as the limits have it instead of measuring it from session steps.
    pub reply_share_off: bool,
    /// Restore speed of a tier found from returns whose own speed could not be measured (the flag's), tokens/ms.
    pub tier_restore_tokens_per_ms: Option<f64>,
    /// Write no tier found from returns (`calibrate --tiers off`).
    pub tiers_off: bool,
}

/// A fitted coefficient.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Coefficient {
    pub value: f64,
    /// Standard error (from the robust fit's covariance; propagated for derived coefficients).
    pub std_error: f64,
    /// Whether the data determined it (false: fixed, see the notes).
    pub identified: bool,
}

/// One stage's regression quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageFit {
    /// Requests used.
    pub n: usize,
    pub r2: f64,
    /// R² of the bulk: `1 − (MAD(residuals) / MAD(observations))²`, insensitive to the heavy tail a loaded
    /// machine adds (what the checks use).
    #[serde(default)]
    pub r2_robust: f64,
    /// Robust relative spread of the residuals: `1.4826·MAD(residuals) / median(observations)`.
    #[serde(default)]
    pub relative_mad: f64,
    /// Root mean square of the residuals, ms.
    pub rms_ms: f64,
    /// RMS of the residuals relative to the observations' mean.
    pub relative_rms: f64,
}

/// A request's observed and predicted values, ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    /// Index of the record among all records given (in the order given).
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_predicted_ms: Option<f64>,
    /// Per-token decode time of the request (its median inter-token gap per token), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_predicted_ms: Option<f64>,
}

/// A request the fit did not use, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unused {
    pub index: usize,
    pub reason: String,
}

/// The fit report (`fit.json`) and the profile it gives (`profile.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub profile: EngineProfile,
    /// By profile field name.
    pub coefficients: std::collections::BTreeMap<String, Coefficient>,
    pub decode: StageFit,
    pub prefill: StageFit,
    /// Stage 3, prefills beside other sequences' KV (`prefill_batch_kv_ms_per_ktok`); absent when too few.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_kv: Option<StageFit>,
    pub residuals: Vec<Residual>,
    /// Requests usable by neither stage (a request may serve one stage and not the other: not listed).
    pub unused: Vec<Unused>,
    /// What the fit assumed or fixed.
    pub notes: Vec<String>,
    pub method: String,
    /// The measured deployment's efficiencies carried over from this fit (`calibrate --deployment`), with which
    /// factors the data identified; absent without a deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_fit: Option<Transfer>,
    /// The prefix-cache tiers below the GPU's: how they were found (returns after eviction, flags), with the
    /// observations; absent when the records were not looked at for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<tiers::TierFit>,
    /// Speculative decoding, when the records carry its counts ([`spec::fit_speculative`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<spec::SpecFit>,
    /// How the profile's `max_num_seqs` was found (given, reported, measured by the probe's `cap` phase, a lower
    /// bound, or the default); `calibrate` fills it, the fit of records alone leaves it absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<cap::CapFit>,
}

/// Least observations per stage.
pub const MIN_DECODE_REQUESTS: usize = 6;
pub const MIN_PREFILL_REQUESTS: usize = 8;
/// Least distinct new-token counts (to 5 %) among the prefill observations.
pub const MIN_DISTINCT_PROMPTS: usize = 4;
/// A stage whose R² is below this AND whose relative RMS residual is above [`MAX_RELATIVE_RMS`] is refused.
pub const MIN_R2: f64 = 0.5;
pub const MAX_RELATIVE_RMS: f64 = 0.15;
/// Huber's tuning constant (95 % efficiency under normal errors), in robust standard deviations.
const HUBER_K: f64 = 1.345;

/// Robust linear regression: Huber loss by iteratively reweighted least squares, scale by the MAD of the
/// residuals. Returns the coefficients, their standard errors (σ̂²·(XᵀWX)⁻¹) and the final weights.
#[inline]
pub fn huber_fit(x: &[Vec<f64>], y: &[f64]) -> Option<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let n = y.len();
    let p = x.first()?.len();
    if n <= p {
        return None;
    }
    let mut w = vec![1.0; n];
    let mut beta = wls(x, y, &w)?.0;
    for _ in 0..50 {
        let r: Vec<f64> = (0..n).map(|i| y[i] - dot(&x[i], &beta)).collect();
        let s = (mad(&r) / 0.6745).max(1e-12);
        for i in 0..n {
            let u = (r[i] / s).abs();
            w[i] = if u <= HUBER_K { 1.0 } else { HUBER_K / u };
        }
        let next = wls(x, y, &w)?.0;
        let change = next
            .iter()
            .zip(&beta)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1e-9))
            .fold(0.0, f64::max);
        beta = next;
        if change < 1e-9 {
            break;
        }
    }
    let (_, inv) = wls(x, y, &w)?;
    let r: Vec<f64> = (0..n).map(|i| y[i] - dot(&x[i], &beta)).collect();
    let sw: f64 = w.iter().sum();
    let sigma2 = (0..n).map(|i| w[i] * r[i] * r[i]).sum::<f64>() / (sw - p as f64).max(1.0);
    let se = (0..p).map(|j| (sigma2 * inv[j][j]).max(0.0).sqrt()).collect();
    Some((beta, se, w))
}

#[inline]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Weighted least squares by the normal equations (p is at most 3 here), with column scaling for conditioning.
/// Returns β and (XᵀWX)⁻¹.
#[inline]
fn wls(x: &[Vec<f64>], y: &[f64], w: &[f64]) -> Option<(Vec<f64>, Vec<Vec<f64>>)> {
    let p = x[0].len();
    let scale: Vec<f64> = (0..p)
        .map(|j| x.iter().map(|r| r[j].abs()).fold(0.0, f64::max).max(1e-300))
        .collect();
    let mut a = vec![vec![0.0; p]; p];
    let mut b = vec![0.0; p];
    for i in 0..y.len() {
        for j in 0..p {
            let xj = x[i][j] / scale[j];
            b[j] += w[i] * xj * y[i];
            for k in 0..p {
                a[j][k] += w[i] * xj * x[i][k] / scale[k];
            }
        }
    }
    let inv = invert(&a)?;
    let beta = (0..p).map(|j| dot(&inv[j], &b) / scale[j]).collect();
    let inv_unscaled = (0..p)
        .map(|j| (0..p).map(|k| inv[j][k] / (scale[j] * scale[k])).collect())
        .collect();
    Some((beta, inv_unscaled))
}

/// Gauss–Jordan inverse with partial pivoting; `None` when (nearly) singular.
#[inline]
fn invert(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let p = a.len();
    let mut m: Vec<Vec<f64>> = a
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = r.clone();
            row.extend((0..p).map(|j| if i == j { 1.0 } else { 0.0 }));
            row
        })
        .collect();
    let norm = a.iter().flatten().map(|v| v.abs()).fold(0.0, f64::max);
    for c in 0..p {
        let piv = (c..p).max_by(|&i, &j| m[i][c].abs().total_cmp(&m[j][c].abs()))?;
        if m[piv][c].abs() <= 1e-10 * norm.max(1e-300) {
            return None;
        }
        m.swap(c, piv);
        let d = m[c][c];
        for v in m[c].iter_mut() {
            *v /= d;
        }
        for r in 0..p {
            if r != c {
                let f = m[r][c];
                if f != 0.0 {
                    let row_c = m[c].clone();
                    for (v, rc) in m[r].iter_mut().zip(row_c) {
                        *v -= f * rc;
                    }
                }
            }
        }
    }
    Some(m.into_iter().map(|r| r[p..].to_vec()).collect())
}

/// A request's decode observation: its per-token step time and the batch it ran in.
struct DecodeObs {
    index: usize,
    y: f64,
    batch: f64,
    ctx: f64,
    /// Mean of batch·Σcontext over the same points (the `batch_kv_ms_per_ktok` regressor, before /1000).
    batch_ctx: f64,
}

struct PrefillObs {
    index: usize,
    ttft: f64,
    new: f64,
    cached: f64,
}

/// A prefill that ran while others decoded (and nobody else prefilled): the mean number `b` of other decoding
/// requests and their KV context `c` over its prefill interval.
struct BesideObs {
    index: usize,
    ttft: f64,
    new: f64,
    cached: f64,
    b: f64,
    c: f64,
    /// Milliseconds since the last step boundary the records show (another request's end) when it was sent.
    since_boundary_ms: Option<f64>,
}

/// Least prefills beside other sequences for stage 3.
pub const MIN_BESIDE_REQUESTS: usize = 8;
/// The prefill term of the other sequences' KV (stage 3).
const PREFILL_KV_TERM: &str = "prefill_batch_kv_ms_per_ktok";

/// Distinct values to `rel` relative tolerance.
#[inline]
fn distinct(v: &[f64], rel: f64) -> usize {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let mut n = 0;
    let mut last = f64::NEG_INFINITY;
    for x in s {
        if x > last * (1.0 + rel) + 1e-9 {
            n += 1;
            last = x;
        }
    }
    n
}

#[inline]
fn stage_fit(y: &[f64], pred: &[f64]) -> StageFit {
    let res: Vec<f64> = y.iter().zip(pred).map(|(a, b)| a - b).collect();
    let med_y = median(&mut y.to_vec());
    let n = y.len();
    let mean = y.iter().sum::<f64>() / n.max(1) as f64;
    let ss_res: f64 = y.iter().zip(pred).map(|(a, b)| (a - b) * (a - b)).sum();
    let ss_tot: f64 = y.iter().map(|a| (a - mean) * (a - mean)).sum();
    let rms = (ss_res / n.max(1) as f64).sqrt();
    StageFit {
        n,
        r2: if ss_tot > 0.0 { 1.0 - ss_res / ss_tot } else { 0.0 },
        rms_ms: rms,
        relative_rms: if mean > 0.0 { rms / mean } else { f64::INFINITY },
        r2_robust: {
            let my = mad(y);
            if my > 0.0 { 1.0 - (mad(&res) / my).powi(2) } else { 0.0 }
        },
        relative_mad: if med_y > 0.0 {
            1.4826 * mad(&res) / med_y
        } else {
            f64::INFINITY
        },
    }
}

#[inline]
fn check_stage(stage: &'static str, f: &StageFit) -> Result<(), CalibrateError> {
    if !(f.r2.is_finite() && f.rms_ms.is_finite() && f.r2_robust.is_finite()) {
        return Err(CalibrateError::Unfit {
            stage,
            reason: "the residuals are not finite".into(),
        });
    }
    // On the bulk (robust R² and spread): Huber fits the bulk, and a loaded machine's heavy tail would otherwise
    // refuse a fit that describes every phase of the probe.
    if f.r2_robust < MIN_R2 && f.relative_mad > MAX_RELATIVE_RMS {
        return Err(CalibrateError::Unfit {
            stage,
            reason: format!(
                "the model explains too little: robust R² {:.3} < {MIN_R2} with residuals {:.0} % of the median \
                 (> {:.0} %; plain R² {:.3})",
                f.r2_robust,
                f.relative_mad * 100.0,
                MAX_RELATIVE_RMS * 100.0,
                f.r2
            ),
        });
    }
    Ok(())
}

/// Coefficients, standard errors and which were fitted (not fixed at 0), in the order of the names.
type NonnegFit = (Vec<f64>, Vec<f64>, Vec<bool>);

/// The decode term that only some engines have (llama.cpp's attention over the batch's KV): a negative fit means the
/// engine has none, so it is fixed at 0 (noted) however many standard errors it is from 0.
const OPTIONAL_TERM: &str = "batch_kv_ms_per_ktok";
/// The optional term is kept only when its share of the largest observed step is at least this.
const MIN_OPTIONAL_SHARE: f64 = 0.02;
/// ... and only when it narrows the decode residuals' robust spread (MAD) by at least this.
const MIN_OPTIONAL_GAIN: f64 = 0.2;

/// The prefill term that only some engines show: a prompt's attention over its own context. An engine whose prefill
/// cost per token does not grow with context over the lengths probed (the emulated engine's presets, a GPU whose
/// short prompts leave it underused) fits it near 0, and timing noise can put it more than 2 standard errors
/// below: fixed at 0 like [`OPTIONAL_TERM`], never a refusal; what is left must then pass the stage's checks.
const OPTIONAL_PREFILL_TERM: &str = "prefill_ctx_ms_per_ktok";

/// A significantly negative coefficient refuses the fit only when it matters: when at its fitted value it moves
/// some prediction by at least this share of the median observation. Below that, fixing it at 0 changes no
/// prediction by more than the timing noise does: a one-stream run's `per_ctx_token_ms` (a few e-5 ms per token
/// of context, 0.16 ms of a 7 ms step at 4k tokens) comes out below 0 in about one run in three on a loaded
/// machine, and now and then two standard errors below, moving a step by up to 2.4 %.
const MIN_NEGATIVE_SHARE: f64 = 0.05;

/// A coefficient and its standard error for a note: 4 decimals, or 3 significant digits for the per-token terms'
/// small values (`-0.0000 ± 0.0000` said nothing).
fn coef_text(b: f64, se: f64) -> String {
    let one = |v: f64| {
        if v == 0.0 || v.abs() >= 1e-3 {
            format!("{v:.4}")
        } else {
            format!("{v:.2e}")
        }
    };
    format!("{} ± {}", one(b), one(se))
}

/// Fit with nonnegative coefficients: a coefficient that comes out negative but within 2 standard errors of 0, or
/// significantly negative but negligible ([`MIN_NEGATIVE_SHARE`]; not beside [`OPTIONAL_TERM`]), is fixed at 0
/// and the rest refitted (noted); one significantly and materially negative refuses the fit ([`OPTIONAL_TERM`] and
/// [`OPTIONAL_PREFILL_TERM`] excepted: fixed at 0 however far).
#[inline]
fn fit_nonneg(
    stage: &'static str,
    names: &[&str],
    x: &[Vec<f64>],
    y: &[f64],
    notes: &mut Vec<String>,
) -> Result<NonnegFit, CalibrateError> {
    let p = names.len();
    let mut active: Vec<bool> = vec![true; p];
    let typical = median(&mut y.iter().map(|v| v.abs()).collect::<Vec<_>>());
    loop {
        let cols: Vec<usize> = (0..p).filter(|&j| active[j]).collect();
        let xs: Vec<Vec<f64>> = x.iter().map(|r| cols.iter().map(|&j| r[j]).collect()).collect();
        let Some((b, se, _)) = huber_fit(&xs, y) else {
            return Err(CalibrateError::Unfit {
                stage,
                reason: format!(
                    "the observations do not separate {} (too few, or all alike)",
                    cols.iter().map(|&j| names[j]).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        if b.iter().chain(&se).any(|v| !v.is_finite()) {
            return Err(CalibrateError::Unfit {
                stage,
                reason: "a coefficient is not finite".into(),
            });
        }
        let worst = (0..cols.len())
            .filter(|&k| b[k] < 0.0)
            .min_by(|&i, &j| (b[i] / se[i].max(1e-300)).total_cmp(&(b[j] / se[j].max(1e-300))));
        // The most the worst coefficient, at its fitted value, moves any prediction.
        let moved = worst.map_or(0.0, |k| x.iter().map(|r| (b[k] * r[cols[k]]).abs()).fold(0.0, f64::max));
        match worst {
            None => {
                let mut full = vec![0.0; p];
                let mut full_se = vec![0.0; p];
                for (k, &j) in cols.iter().enumerate() {
                    full[j] = b[k];
                    full_se[j] = se[k];
                }
                return Ok((full, full_se, active));
            }
            Some(k) if [OPTIONAL_TERM, OPTIONAL_PREFILL_TERM].contains(&names[cols[k]]) && cols.len() > 1 => {
                notes.push(format!(
                    "{}: fitted {}, negative: fixed at 0 (this server shows no such term)",
                    names[cols[k]],
                    coef_text(b[k], se[k])
                ));
                active[cols[k]] = false;
            }
            Some(k) if b[k] + 2.0 * se[k] >= 0.0 && cols.len() > 1 => {
                notes.push(format!(
                    "{}: fitted {}, not distinguishable from 0: fixed at 0",
                    names[cols[k]],
                    coef_text(b[k], se[k])
                ));
                active[cols[k]] = false;
            }
            // Not beside the optional term: it is nearly collinear with `per_seq_ms` and `per_ctx_token_ms`, so a
            // significant negative next to it is the term taking their cost, for `fit_decode` to refit without it.
            Some(k)
                if moved < MIN_NEGATIVE_SHARE * typical
                    && cols.len() > 1
                    && !cols.iter().any(|&j| names[j] == OPTIONAL_TERM) =>
            {
                notes.push(format!(
                    "{}: fitted {}, negative but negligible (it moves no prediction by more than {moved:.2} ms, \
                     {:.1} % of the median observation): fixed at 0",
                    names[cols[k]],
                    coef_text(b[k], se[k]),
                    100.0 * moved / typical
                ));
                active[cols[k]] = false;
            }
            Some(k) => {
                return Err(CalibrateError::Unfit {
                    stage,
                    reason: format!(
                        "{} came out negative ({}): the model does not describe this server",
                        names[cols[k]],
                        coef_text(b[k], se[k])
                    ),
                });
            }
        }
    }
}

/// The decode stage's [`fit_nonneg`]. With `optional` (the fit decides on [`OPTIONAL_TERM`]): when the fit with the
/// term refuses a significantly negative coefficient, the term is dropped (from `names` and `x`) and the rest is
/// fitted without it. The across-the-batch KV term is nearly collinear with `per_seq_ms` and `per_ctx_token_ms`
/// (batch × Σcontext), and on a probe whose large batches ran a little cheaper per sequence it took more than all
/// of the batch cost, leaving `per_seq_ms` at −0.125 ± 0.016 (2026-12-02, llama-server): the term is optional, the
/// refusal was not about the server.
#[inline]
fn fit_decode(
    names: &mut Vec<&'static str>,
    x: &mut [Vec<f64>],
    y: &[f64],
    optional: bool,
    notes: &mut Vec<String>,
) -> Result<NonnegFit, CalibrateError> {
    let fitted = fit_nonneg("decode", names, x, y, notes);
    let j = match &fitted {
        Err(_) if optional => names.iter().position(|n| *n == OPTIONAL_TERM),
        _ => None,
    };
    let (Some(j), Err(e)) = (j, &fitted) else {
        return fitted;
    };
    let why = match e {
        CalibrateError::Unfit { reason, .. } => reason.clone(),
        other => other.to_string(),
    };
    names.remove(j);
    for r in x.iter_mut() {
        r.remove(j);
    }
    notes.push(format!(
        "{OPTIONAL_TERM}: with it the decode fit is refused ({why}); fitted without it (fixed at 0)"
    ));
    fit_nonneg("decode", names, x, y, notes)
}

/// Fit an engine profile from records (see the module docs and `docs/calibration.md`): the stages' observations,
/// stage 1 (decode), stage 2 (lone prefills), the tiers below the GPU's, stage 3 (prefills beside other
/// sequences' KV), then the profile and the report.
#[inline]
pub fn fit(records: &[RequestRecord], opts: &FitOptions) -> Result<Fit, CalibrateError> {
    let mut notes = Vec::new();
    if !records.iter().any(|r| r.cached_tokens.is_some()) {
        notes.push("no record reports cached_tokens: every prompt taken as uncached".into());
    }
    let observe::Observations {
        dec,
        pre,
        beside,
        unused_decode,
        mut unused_prefill,
    } = observe::observe(records);
    // Sessions that came back after their KV left the GPU: their TTFT holds a restore (or a recompute) that the
    // prefill stage does not model; the restored ones are kept aside for the tier fit.
    let gpu = gpu_of(opts);
    let returns = tiers::find_returns(records, gpu);
    let (pre, aside) = set_aside_returns(pre, &returns, &mut unused_prefill);

    let d = decode_stage(&dec, opts, &mut notes)?;
    let budget = opts
        .limits
        .as_ref()
        .map(|l| f64::from(l.max_num_batched_tokens.max(1)))
        .unwrap_or(f64::INFINITY);
    // A lone prefill step's decode part: one sequence holding `cached` tokens of KV (per chunk: the context so far).
    let kc = d.k.0 + d.bkv.0 / 1000.0;
    let p = prefill_stage(&pre, budget, kc, &mut notes)?;
    let prefill_fixed = prefill_fixed(&d, &p, &mut notes);
    // The tiers below the GPU's: a return's warm TTFT is what stage 2 predicts for it.
    let warm = |index: usize| {
        aside
            .iter()
            .find(|o| o.index == index)
            .map(|o| dot(&prefill_row(o, budget), &p.b) + kc * chunks(o, budget).1)
    };
    let bs = opts.limits.as_ref().map_or(16, |l| l.block_size);
    let mut tier_fit = tiers::fit_tier(returns, records, gpu, bs, warm);
    // Stage 3: prefills beside other sequences' KV.
    let speculative = records.iter().any(|r| r.spec.is_some());
    let (pkv, pkv_se, pkv_id, prefill_kv, beside_pred) = fit_beside(
        &beside,
        opts.prefill_kv,
        speculative,
        budget,
        &p.b,
        kc,
        (d.step_fixed.0, d.per_seq.0, d.k.0, d.bkv.0),
        &mut notes,
    );
    for (o, _) in beside.iter().zip(&beside_pred) {
        unused_prefill[o.index] = None;
    }

    let coefficients = coefficient_table(&d, &p, prefill_fixed, (pkv, pkv_se, pkv_id));
    let mut profile = opts
        .limits
        .clone()
        .unwrap_or_else(|| EngineProfile::linear("calibrated", 1_000_000, 256, 8192, [0.0, 0.0, 0.0, 1.0, 0.0]));
    set_coefficients(&mut profile, &coefficients);
    write_tiers(&mut profile, &mut tier_fit, opts);
    if opts.reply_share_off {
        notes.push("reply_cached_share: not measured, as asked".into());
    } else if let Some(share) = reply_share(
        records,
        profile.block_size,
        &tier_fit.returns.iter().map(|r| r.index).collect(),
        &mut notes,
    ) {
        profile.reply_cached_share = share;
    }
    let method = format!(
        "loadshape calibrate: Huber (k = {HUBER_K}) IRLS fits of {} decode observations (median inter-token gap \
         = step_fixed + per_seq·batch + per_ctx·Σcontext + batch_kv·batch·Σcontext/1000, R² {:.3}) and {} lone prefills (TTFT = F + new/rate + \
         prefill_ctx·attended/1000, R² {:.3}); see docs/calibration.md",
        d.fit.n, d.fit.r2, p.fit.n, p.fit.r2
    );
    profile.basis = if profile.basis.is_empty() {
        format!("measured: {method}")
    } else {
        format!("measured: {method}; limits: {}", profile.basis)
    };
    profile.validate().map_err(|e| CalibrateError::Unfit {
        stage: "profile",
        reason: e.to_string(),
    })?;

    let residuals = residuals(
        pre.iter().map(|o| (o.index, o.ttft)).zip(p.pred.iter().copied()),
        beside
            .iter()
            .map(|o| (o.index, o.ttft))
            .zip(beside_pred.iter().copied()),
        dec.iter().map(|o| (o.index, o.y)).zip(d.pred.iter().copied()),
    );
    Ok(Fit {
        profile,
        coefficients,
        decode: d.fit,
        prefill: p.fit,
        prefill_kv,
        residuals,
        unused: unused(&unused_decode, &unused_prefill),
        notes,
        method,
        deployment_fit: None,
        tiers: Some(tier_fit),
        speculative: None,
        max_num_seqs: None,
    })
}

/// `prefill_fixed_ms` and its standard error: the lone prefill step's fixed part less a decode step's of one
/// sequence (0, with a note, where it comes out below).
fn prefill_fixed(d: &DecodeStage, p: &PrefillStage, notes: &mut Vec<String>) -> (f64, f64) {
    let (s_fixed, s_fixed_se) = d.step_fixed;
    let (q, q_se, _) = d.per_seq;
    let mut prefill_fixed = p.b[0] - s_fixed - q;
    let prefill_fixed_se = (p.se[0] * p.se[0] + s_fixed_se * s_fixed_se + q_se * q_se).sqrt();
    if prefill_fixed < 0.0 {
        notes.push(format!(
            "prefill_fixed_ms: the prefill step's fixed part ({:.3} ms) is below a decode step's ({:.3} ms): set 0",
            p.b[0],
            s_fixed + q
        ));
        prefill_fixed = 0.0;
    }
    (prefill_fixed, prefill_fixed_se)
}

/// The fitted coefficients by profile field name (`fit.json`'s `coefficients`).
fn coefficient_table(
    d: &DecodeStage,
    p: &PrefillStage,
    prefill_fixed: (f64, f64),
    prefill_kv: (f64, f64, bool),
) -> std::collections::BTreeMap<String, Coefficient> {
    let rate = 1.0 / p.b[1];
    let rate_se = p.se[1] / (p.b[1] * p.b[1]);
    [
        ("step_fixed_ms", (d.step_fixed.0, d.step_fixed.1, true)),
        ("per_seq_ms", d.per_seq),
        ("per_ctx_token_ms", d.k),
        ("batch_kv_ms_per_ktok", d.bkv),
        ("prefill_tokens_per_ms", (rate, rate_se, true)),
        ("prefill_fixed_ms", (prefill_fixed.0, prefill_fixed.1, true)),
        ("prefill_ctx_ms_per_ktok", (p.b[2], p.se[2], p.b[2] > 0.0)),
        (PREFILL_KV_TERM, prefill_kv),
    ]
    .into_iter()
    .map(|(name, (value, std_error, identified))| {
        let c = Coefficient {
            value,
            std_error,
            identified,
        };
        (name.to_string(), c)
    })
    .collect()
}

/// Each fitted coefficient into the profile field of its name.
fn set_coefficients(profile: &mut EngineProfile, c: &std::collections::BTreeMap<String, Coefficient>) {
    let v = |name: &str| c[name].value;
    profile.step_fixed_ms = v("step_fixed_ms");
    profile.per_seq_ms = v("per_seq_ms");
    profile.per_ctx_token_ms = v("per_ctx_token_ms");
    profile.batch_kv_ms_per_ktok = v("batch_kv_ms_per_ktok");
    profile.prefill_tokens_per_ms = v("prefill_tokens_per_ms");
    profile.prefill_fixed_ms = v("prefill_fixed_ms");
    profile.prefill_ctx_ms_per_ktok = v("prefill_ctx_ms_per_ktok");
    profile.prefill_batch_kv_ms_per_ktok = v(PREFILL_KV_TERM);
}

/// The GPU's KV capacity and (llama.cpp) slots the limits give, for finding returns after eviction.
fn gpu_of(opts: &FitOptions) -> tiers::Gpu {
    let (blocks, bs, seqs, sched) = opts
        .limits
        .as_ref()
        .map_or((1_000_000, 16, 256, Default::default()), |l| {
            (l.num_kv_blocks, l.block_size, l.max_num_seqs, l.scheduler)
        });
    tiers::Gpu {
        kv_tokens: blocks * u64::from(bs),
        slots: (sched == crate::engine::profile::Scheduler::LlamaCpp).then_some(u64::from(seqs)),
    }
}

/// The lone prefills without the returns whose prefix was restored (not recomputed), and those, set aside for the
/// tier fit.
fn set_aside_returns(
    pre: Vec<PrefillObs>,
    returns: &[tiers::TierReturn],
    unused_prefill: &mut [Option<String>],
) -> (Vec<PrefillObs>, Vec<PrefillObs>) {
    let set: std::collections::BTreeSet<usize> = returns
        .iter()
        .filter(|r| r.outcome != "recomputed")
        .map(|r| r.index)
        .collect();
    let (aside, kept): (Vec<PrefillObs>, Vec<PrefillObs>) = pre.into_iter().partition(|p| set.contains(&p.index));
    for p in &aside {
        unused_prefill[p.index] = Some("a session's return after eviction (the tier fit uses it)".into());
    }
    (kept, aside)
}

/// Stage 1's coefficients, each `(value, standard error, identified)` (`step_fixed_ms` always identified), its
/// predictions of the observations and its quality.
struct DecodeStage {
    step_fixed: (f64, f64),
    per_seq: (f64, f64, bool),
    k: (f64, f64, bool),
    bkv: (f64, f64, bool),
    pred: Vec<f64>,
    fit: StageFit,
}

/// Stage 1 (see the module docs): the terms the batch sizes seen identify, the across-the-batch KV term kept only
/// where the data show it.
fn decode_stage(dec: &[DecodeObs], opts: &FitOptions, notes: &mut Vec<String>) -> Result<DecodeStage, CalibrateError> {
    if dec.len() < MIN_DECODE_REQUESTS {
        return Err(CalibrateError::Unfit {
            stage: "decode",
            reason: format!(
                "{} usable requests (need {MIN_DECODE_REQUESTS}: ok, usage reported, >= 8 output tokens)",
                dec.len()
            ),
        });
    }
    let batches: Vec<f64> = dec.iter().map(|d| d.batch).collect();
    let n_batches = distinct(&batches, 0.3);
    if opts.batch_kv == Some(false) {
        notes.push(format!("{OPTIONAL_TERM}: fixed at 0 as asked"));
    }
    let (mut x, mut names): (Vec<Vec<f64>>, Vec<&str>) = if n_batches >= 3 && opts.batch_kv != Some(false) {
        (
            dec.iter()
                .map(|d| vec![1.0, d.batch, d.ctx, d.batch_ctx / 1000.0])
                .collect(),
            vec![
                "step_fixed_ms",
                "per_seq_ms",
                "per_ctx_token_ms",
                "batch_kv_ms_per_ktok",
            ],
        )
    } else if n_batches >= 2 {
        if opts.batch_kv != Some(false) {
            notes
                .push("two batch sizes only: batch_kv_ms_per_ktok not identified, fixed at 0 (probe 3 or more)".into());
        }
        (
            dec.iter().map(|d| vec![1.0, d.batch, d.ctx]).collect(),
            vec!["step_fixed_ms", "per_seq_ms", "per_ctx_token_ms"],
        )
    } else {
        notes.push("one batch size only: per_seq_ms not identified, fixed at 0 (folded into step_fixed_ms)".into());
        (
            dec.iter().map(|d| vec![1.0, d.ctx]).collect(),
            vec!["step_fixed_ms", "per_ctx_token_ms"],
        )
    };
    let y: Vec<f64> = dec.iter().map(|d| d.y).collect();
    let mut fitted = fit_decode(&mut names, &mut x, &y, opts.batch_kv.is_none(), notes)?;
    if opts.batch_kv.is_none() {
        drop_unneeded_optional(&mut names, &mut x, &y, &mut fitted, notes)?;
    }
    let (b, se, active) = fitted;
    let get = |name: &str| names.iter().position(|n| *n == name).map(|j| (b[j], se[j], active[j]));
    let (s_fixed, s_fixed_se, _) = get("step_fixed_ms").unwrap_or((0.0, 0.0, false));
    let per_seq = get("per_seq_ms").unwrap_or((0.0, 0.0, false));
    if s_fixed + per_seq.0 <= 0.0 {
        return Err(CalibrateError::Unfit {
            stage: "decode",
            reason: "step_fixed_ms + per_seq_ms came out 0: a step would take no time".into(),
        });
    }
    let pred: Vec<f64> = x.iter().map(|r| dot(r, &b)).collect();
    let fit = stage_fit(&y, &pred);
    check_stage("decode", &fit)?;
    Ok(DecodeStage {
        step_fixed: (s_fixed, s_fixed_se),
        per_seq,
        k: get("per_ctx_token_ms").unwrap_or((0.0, 0.0, false)),
        bkv: get("batch_kv_ms_per_ktok").unwrap_or((0.0, 0.0, false)),
        pred,
        fit,
    })
}

/// The across-the-batch KV term is kept only where the data show it (> 2 s.e., and at least 2 % of the largest
/// step observed): an engine without it (vLLM's paged attention) should not pay its noise in the other three.
/// Otherwise the term leaves `names` and `x` and `fitted` becomes the fit without it.
fn drop_unneeded_optional(
    names: &mut Vec<&'static str>,
    x: &mut Vec<Vec<f64>>,
    y: &[f64],
    fitted: &mut NonnegFit,
    notes: &mut Vec<String>,
) -> Result<(), CalibrateError> {
    let Some(j) = names.iter().position(|n| *n == OPTIONAL_TERM) else {
        return Ok(());
    };
    let (b, se, active) = &*fitted;
    if !active[j] {
        return Ok(());
    }
    let top = x.iter().map(|r| r[j]).fold(0.0, f64::max);
    let share = b[j] * top / y.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
    let mut x3 = x.clone();
    for r in x3.iter_mut() {
        r.remove(j);
    }
    let mut names3 = names.clone();
    names3.remove(j);
    let mut notes3 = Vec::new();
    let without = fit_nonneg("decode", &names3, &x3, y, &mut notes3);
    // The residuals' robust spread with and without the term: a term that the bulk does not need (it only moves
    // cost between itself and per_ctx_token_ms, as real-time noise at large batches can) is dropped.
    let spread = |xs: &[Vec<f64>], bs: &[f64]| {
        let r: Vec<f64> = xs.iter().zip(y).map(|(row, yy)| yy - dot(row, bs)).collect();
        mad(&r)
    };
    let gain = match &without {
        Ok((b3, _, _)) => 1.0 - spread(x, b) / spread(&x3, b3).max(1e-300),
        Err(_) => 1.0,
    };
    if b[j] <= 2.0 * se[j] || share < MIN_OPTIONAL_SHARE || gain < MIN_OPTIONAL_GAIN {
        notes.push(format!(
            "{OPTIONAL_TERM}: fitted {:.4} ± {:.4} ({:.1} % of the largest step; it narrows the residuals by \
             {:.0} %), not needed (> 2 s.e., >= {:.0} % and >= {:.0} % are): fixed at 0",
            b[j],
            se[j],
            share * 100.0,
            gain * 100.0,
            MIN_OPTIONAL_SHARE * 100.0,
            MIN_OPTIONAL_GAIN * 100.0
        ));
        (*x, *names) = (x3, names3);
        notes.extend(notes3);
        *fitted = without?;
    }
    Ok(())
}

/// Stage 2's coefficients `(F, ms per new token, context term)` and their standard errors, its predictions of the
/// lone prefills' TTFTs and its quality.
struct PrefillStage {
    b: Vec<f64>,
    se: Vec<f64>,
    pred: Vec<f64>,
    fit: StageFit,
}

/// A prefill longer than the step's token budget runs as several steps (chunks of `budget` tokens), each paying
/// the fixed part and the decode part of one sequence holding the context computed so far: `(chunks, Σ context at
/// each chunk's start)` (`cached` for one chunk).
fn chunks(p: &PrefillObs, budget: f64) -> (f64, f64) {
    if p.new <= budget {
        (1.0, p.cached)
    } else {
        let c = (p.new / budget).ceil();
        (c, c * p.cached + budget * c * (c - 1.0) / 2.0)
    }
}

/// Stage 2's regressors for a prefill: chunks (each paying `F`), new tokens, and the attended context / 1000.
fn prefill_row(p: &PrefillObs, budget: f64) -> [f64; 3] {
    [
        chunks(p, budget).0,
        p.new,
        (p.new * p.cached + p.new * (p.new - 1.0) / 2.0) / 1000.0,
    ]
}

/// Stage 2 (see the module docs), `kc` the per-context-token cost of a lone prefill step stage 1 gives.
fn prefill_stage(
    pre: &[PrefillObs],
    budget: f64,
    kc: f64,
    notes: &mut Vec<String>,
) -> Result<PrefillStage, CalibrateError> {
    if pre.len() < MIN_PREFILL_REQUESTS {
        return Err(CalibrateError::Unfit {
            stage: "prefill",
            reason: format!(
                "{} requests were alone on the server during their prefill (need {MIN_PREFILL_REQUESTS})",
                pre.len()
            ),
        });
    }
    let news: Vec<f64> = pre.iter().map(|p| p.new).collect();
    let nd = distinct(&news, 0.05);
    if nd < MIN_DISTINCT_PROMPTS {
        return Err(CalibrateError::Unfit {
            stage: "prefill",
            reason: format!("{nd} distinct prompt lengths (need {MIN_DISTINCT_PROMPTS})"),
        });
    }
    let n_chunked = pre.iter().filter(|p| chunks(p, budget).0 > 1.0).count();
    if n_chunked > 0 {
        notes.push(format!(
            "prefill: {n_chunked} of {} lone prefills are longer than the step budget ({budget} tokens): each fitted \
             as its chunks, every chunk paying the fixed part",
            pre.len()
        ));
    }
    let px: Vec<Vec<f64>> = pre.iter().map(|p| prefill_row(p, budget).to_vec()).collect();
    let py: Vec<f64> = pre.iter().map(|p| p.ttft - kc * chunks(p, budget).1).collect();
    let pnames = ["prefill_step_ms", "ms_per_new_token", "prefill_ctx_ms_per_ktok"];
    let (b, se, _) = fit_nonneg("prefill", &pnames, &px, &py, notes)?;
    if b[1] <= 0.0 {
        return Err(CalibrateError::Unfit {
            stage: "prefill",
            reason: "the cost per new prompt token came out 0: prefill_tokens_per_ms would be infinite".into(),
        });
    }
    let pred: Vec<f64> = px
        .iter()
        .zip(pre)
        .map(|(r, p)| dot(r, &b) + kc * chunks(p, budget).1)
        .collect();
    let ttfts: Vec<f64> = pre.iter().map(|p| p.ttft).collect();
    let fit = stage_fit(&ttfts, &pred);
    check_stage("prefill", &fit)?;
    Ok(PrefillStage { b, se, pred, fit })
}

/// The tiers the profile gets: the ones it was given (flags) as given, none when asked, else the one the returns
/// measured (with the flag's restore speed where the returns did not measure one).
fn write_tiers(profile: &mut EngineProfile, tier_fit: &mut tiers::TierFit, opts: &FitOptions) {
    if profile.host_cache.is_some() || !profile.kv_tiers.is_empty() {
        tier_fit.source = "flags".into();
        tier_fit.capacity_found_by = Some("flag".into());
        tier_fit.restore_found_by = Some("flag".into());
        tier_fit
            .notes
            .push("the profile's tiers were given (flags): written as given, the measurement above is not used".into());
    } else if opts.tiers_off {
        tier_fit.notes.push("tiers: off as asked, none written".into());
    } else if let (Some(cap), Some(rate)) = (tier_fit.capacity_tokens, tier_fit.restore_tokens_per_ms) {
        profile.host_cache = Some(crate::engine::profile::HostCache {
            capacity_tokens: cap,
            restore_tokens_per_ms: rate.min(1e9),
        });
        tier_fit.capacity_found_by = Some("probe".into());
        tier_fit.restore_found_by = Some("probe".into());
    } else if let (Some(cap), Some(rate)) = (tier_fit.capacity_tokens, opts.tier_restore_tokens_per_ms) {
        tier_fit.restore_tokens_per_ms = Some(rate);
        tier_fit.capacity_found_by = Some("probe".into());
        tier_fit.restore_found_by = Some("flag".into());
        tier_fit
            .notes
            .push(format!("restore speed: {rate} tokens/ms as given (not measured)"));
        profile.host_cache = Some(crate::engine::profile::HostCache {
            capacity_tokens: cap,
            restore_tokens_per_ms: rate,
        });
    }
}

/// Each record's observed and predicted TTFT (a lone prefill's or one beside decoders) and decode step, by index.
fn residuals(
    pre: impl Iterator<Item = ((usize, f64), f64)>,
    beside: impl Iterator<Item = ((usize, f64), f64)>,
    dec: impl Iterator<Item = ((usize, f64), f64)>,
) -> Vec<Residual> {
    type Pair = Option<(f64, f64)>;
    let mut by_index: std::collections::BTreeMap<usize, (Pair, Pair)> = std::collections::BTreeMap::new();
    for ((index, ttft), p) in pre.chain(beside) {
        by_index.entry(index).or_insert((None, None)).0 = Some((ttft, p));
    }
    for ((index, y), p) in dec {
        by_index.entry(index).or_insert((None, None)).1 = Some((y, p));
    }
    by_index
        .into_iter()
        .map(|(index, (t, d))| Residual {
            index,
            ttft_ms: t.map(|v| v.0),
            ttft_predicted_ms: t.map(|v| v.1),
            tpot_ms: d.map(|v| v.0),
            tpot_predicted_ms: d.map(|v| v.1),
        })
        .collect()
}

/// The records neither stage used, with why (one reason when both stages give the same).
fn unused(unused_decode: &[Option<String>], unused_prefill: &[Option<String>]) -> Vec<Unused> {
    unused_decode
        .iter()
        .zip(unused_prefill)
        .enumerate()
        .filter_map(|(i, pair)| match pair {
            (Some(a), Some(b)) if a == b => Some(Unused {
                index: i,
                reason: a.clone(),
            }),
            (Some(a), Some(b)) => Some(Unused {
                index: i,
                reason: format!("decode: {a}; prefill: {b}"),
            }),
            _ => None,
        })
        .collect()
}

/// Least consecutive session steps for `reply_cached_share`.
pub const MIN_REPLY_PAIRS: usize = 4;

/// `reply_cached_share` from consecutive steps of the same session (a sessions run given with `--from`): per pair,
/// the share of the previous reply the server reported cached beyond the previous prompt,
/// `(cached_tokens − previous prompt_tokens) / previous gen_tokens`, clamped to 0..=1; the median of the pairs,
/// taken as 1 (all of it) when within one KV block of the whole reply (a block-granular cache rounds down). `None`
/// (noted) when the records hold fewer than [`MIN_REPLY_PAIRS`] such pairs.
#[inline]
fn reply_share(
    records: &[RequestRecord],
    block_size: u32,
    returns: &std::collections::BTreeSet<usize>,
    notes: &mut Vec<String>,
) -> Option<f64> {
    // A session's return after eviction (the probe's returns phase) adds a block to a prompt whose reply was 2
    // tokens: no conversation, and it says nothing of a reply's share.
    let mut steps: Vec<&RequestRecord> = records
        .iter()
        .enumerate()
        .filter(|(i, r)| !returns.contains(i) && r.ok && r.prompt_tokens.is_some() && r.cached_tokens.is_some())
        .map(|(_, r)| r)
        .collect();
    // By (session, inst, step): stable passes from the last key to the first, through `order`'s one sort.
    crate::order::sort_by_u64_key(&mut steps, |r| u64::from(r.step));
    crate::order::sort_by_u64_key(&mut steps, |r| u64::from(r.inst));
    crate::order::sort_by_u64_key(&mut steps, |r| r.session);
    let mut shares = Vec::new();
    let mut gens = Vec::new();
    for w in steps.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.session != b.session || a.inst != b.inst || b.step != a.step + 1 || a.gen_tokens == 0 {
            continue;
        }
        let (prompt, cached) = (a.prompt_tokens.unwrap_or(0), b.cached_tokens.unwrap_or(0));
        if b.prompt_tokens.unwrap_or(0) < prompt + a.gen_tokens {
            continue; // not a conversation that resends its reply
        }
        shares.push(((cached as f64 - prompt as f64) / a.gen_tokens as f64).clamp(0.0, 1.0));
        gens.push(a.gen_tokens as f64);
    }
    if shares.len() < MIN_REPLY_PAIRS {
        notes.push(format!(
            "reply_cached_share: {} consecutive session steps in the records (need {MIN_REPLY_PAIRS}; give a \
             sessions run with --from to measure it): left as it was",
            shares.len()
        ));
        return None;
    }
    let share = median(&mut shares);
    let reply = median(&mut gens);
    let kept = if (1.0 - share) * reply < f64::from(block_size.max(1)) {
        1.0
    } else {
        share
    };
    notes.push(format!(
        "reply_cached_share: {kept:.3} (median over {} consecutive session steps of the previous reply found cached: \
         {share:.3}, replies of {reply:.0} tokens, KV blocks of {block_size})",
        shares.len()
    ));
    Some(kept)
}

/// What [`fit_beside`] returns: the coefficient, its standard error, whether identified, the stage's quality and
/// the prediction per observation used (empty when none was).
type BesideFit = (f64, f64, bool, Option<StageFit>, Vec<f64>);

/// Stage 3 (see the module docs): `pb` the prefill stage's coefficients (`F`, ms per new token, context term),
/// `kc` the per-context-token cost of a lone prefill step, `dec` the decode stage's `(step_fixed_ms, per_seq_ms,
/// per_ctx_token_ms, batch_kv_ms_per_ktok)`. Observations longer than one step's budget are not used. With
/// `speculative` records (the server's draft counts), the term is fitted only when asked (`choice` `Some(true)`).
#[inline]
#[allow(clippy::too_many_arguments)]
fn fit_beside(
    beside: &[BesideObs],
    choice: Option<bool>,
    speculative: bool,
    budget: f64,
    pb: &[f64],
    kc: f64,
    dec: (f64, f64, f64, f64),
    notes: &mut Vec<String>,
) -> BesideFit {
    let none = |notes: &mut Vec<String>, why: String| {
        notes.push(format!("{PREFILL_KV_TERM}: {why}: fixed at 0"));
        (0.0, 0.0, false, None, Vec::new())
    };
    if choice == Some(false) {
        notes.push(format!("{PREFILL_KV_TERM}: fixed at 0 as asked"));
        return (0.0, 0.0, false, None, Vec::new());
    }
    if speculative && choice != Some(true) {
        // The decoders beside these prefills ran speculative steps, whose length follows each request's own
        // acceptance (0 to 1 per request under greedy decoding) where stage 1 prices the mean: the residuals
        // measure that, not the other slots' KV. Measured: llama-server with a draft model and one KV stream per
        // slot, where the term came out 3.28 from the probe and added 0.6 s to held-out prefills that live took
        // 0.11 s (docs/calibration.md, "Prefill beside other slots' KV").
        return none(
            notes,
            "the records are speculative (draft counts): the decoders' steps beside a prefill vary with each \
             request's acceptance, which the fit cannot tell from this term (--prefill-kv on fits it anyway)"
                .into(),
        );
    }
    let (s_fixed, q, k, bkv) = dec;
    let obs: Vec<&BesideObs> = beside.iter().filter(|o| o.new >= 1.0 && o.new <= budget).collect();
    if obs.len() < MIN_BESIDE_REQUESTS {
        return none(
            notes,
            format!(
                "{} prefills ran beside decoding requests with nobody else prefilling (need {MIN_BESIDE_REQUESTS}; \
                 the probe's prefill-kv phase sends them)",
                obs.len()
            ),
        );
    }
    // What stages 1 and 2 say of the step: the lone prefill, the decoders' share of the step it shares with them,
    // and the rest of the decode step in progress when it arrives: from the last step boundary the records show
    // (another request's end), the holders' steps running back to back since, or half a step where none shows.
    let known = |o: &BesideObs| {
        let lone =
            pb[0] + pb[1] * o.new + pb[2] * (o.new * o.cached + o.new * (o.new - 1.0) / 2.0) / 1000.0 + kc * o.cached;
        let shared = q * o.b + k * o.c + bkv * ((o.b + 1.0) * (o.c + o.cached) - o.cached) / 1000.0;
        let step = s_fixed + q * o.b + k * o.c + bkv * o.b * o.c / 1000.0;
        let wait = match o.since_boundary_ms {
            Some(e) if step > 0.0 && e >= 0.0 => step - e % step,
            _ => 0.5 * step,
        };
        lone + shared + wait
    };
    let y: Vec<f64> = obs.iter().map(|o| o.ttft - known(o)).collect();
    let x: Vec<Vec<f64>> = obs.iter().map(|o| vec![1.0, o.new * o.c / 1000.0]).collect();
    let cs: Vec<f64> = obs.iter().map(|o| o.c).collect();
    if distinct(&cs, 0.1) < 2 {
        return none(notes, "the other sequences' context did not vary (10 %)".into());
    }
    let Some((b, se, _)) = huber_fit(&x, &y) else {
        return none(notes, "the observations do not separate it from the intercept".into());
    };
    if !(b[1].is_finite() && se[1].is_finite()) {
        return none(notes, "not finite".into());
    }
    let ttft: Vec<f64> = obs.iter().map(|o| o.ttft).collect();
    let with_pred: Vec<f64> = obs.iter().zip(&x).map(|(o, r)| known(o) + dot(r, &b)).collect();
    // Without the term: the intercept alone.
    let ones: Vec<Vec<f64>> = obs.iter().map(|_| vec![1.0]).collect();
    let a0 = huber_fit(&ones, &y).map(|f| f.0[0]).unwrap_or(0.0);
    let without_pred: Vec<f64> = obs.iter().map(|o| known(o) + a0).collect();
    let spread = |pred: &[f64]| {
        let r: Vec<f64> = ttft.iter().zip(pred).map(|(a, p)| a - p).collect();
        mad(&r)
    };
    let gain = 1.0 - spread(&with_pred) / spread(&without_pred).max(1e-300);
    let top = x.iter().map(|r| r[1]).fold(0.0, f64::max);
    let share = b[1] * top / ttft.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
    let keep = b[1] > 0.0
        && match choice {
            Some(true) => true,
            _ => b[1] > 2.0 * se[1] && share >= MIN_OPTIONAL_SHARE && gain >= MIN_OPTIONAL_GAIN,
        };
    let line = format!(
        "{PREFILL_KV_TERM}: fitted {:.4} ± {:.4} over {} prefills beside decoding requests (intercept {:.2} ms; \
         {:.1} % of the longest TTFT among them; it narrows their residuals by {:.0} %)",
        b[1],
        se[1],
        obs.len(),
        b[0],
        share * 100.0,
        gain * 100.0
    );
    if keep {
        notes.push(line);
        (b[1], se[1], true, Some(stage_fit(&ttft, &with_pred)), with_pred)
    } else {
        notes.push(format!(
            "{line}: not needed ({}): fixed at 0",
            if b[1] <= 0.0 {
                "negative: this server's prompts attend only to their own context".to_string()
            } else {
                format!(
                    "> 2 s.e., >= {:.0} % and >= {:.0} % are",
                    MIN_OPTIONAL_SHARE * 100.0,
                    MIN_OPTIONAL_GAIN * 100.0
                )
            }
        ));
        (0.0, se[1], false, Some(stage_fit(&ttft, &without_pred)), without_pred)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huber_recovers_a_line_despite_outliers() {
        let x: Vec<Vec<f64>> = (0..40).map(|i| vec![1.0, f64::from(i)]).collect();
        let mut y: Vec<f64> = (0..40).map(|i| 3.0 + 0.5 * f64::from(i)).collect();
        y[5] += 100.0;
        y[17] -= 80.0;
        let (b, se, w) = huber_fit(&x, &y).expect("fit");
        assert!((b[0] - 3.0).abs() < 1e-6 && (b[1] - 0.5).abs() < 1e-6, "{b:?}");
        assert!(se.iter().all(|s| s.is_finite()));
        assert!(w[5] < 0.1 && w[17] < 0.1);
    }

    /// A significantly negative coefficient refuses the fit only when it moves some prediction by 5 % of the median
    /// observation or more: a one-stream run's tiny context term a hair below 0 is fixed at 0 instead (noted, with
    /// numbers that say something at its scale), while the same term ten times larger is still a refusal.
    #[test]
    fn a_negligible_negative_coefficient_is_fixed_at_0_a_material_one_refuses() {
        let design = |slope: f64| -> (Vec<Vec<f64>>, Vec<f64>) {
            (0..40)
                .map(|i| {
                    let c = 200.0 + 95.0 * f64::from(i);
                    (vec![1.0, c], 7.2 + slope * c + f64::from(i % 3) * 0.0005)
                })
                .unzip()
        };
        let names = ["step_fixed_ms", "per_ctx_token_ms"];
        let (x, y) = design(-2e-5);
        let mut notes = Vec::new();
        let (b, _, active) = fit_nonneg("decode", &names, &x, &y, &mut notes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((b[1], active[1]), (0.0, false), "{b:?}");
        assert!(
            (b[0] - 7.16).abs() < 0.05,
            "the step takes the context term's mean: {b:?}"
        );
        assert!(
            notes.iter().any(|n| n.starts_with("per_ctx_token_ms: fitted -2.00e-5 ± ")
                && n.contains("negative but negligible")),
            "{notes:?}"
        );
        let (x, y) = design(-2e-4);
        let refused = fit_nonneg("decode", &names, &x, &y, &mut Vec::new());
        assert!(
            matches!(&refused, Err(CalibrateError::Unfit { reason, .. })
                if reason.starts_with("per_ctx_token_ms came out negative (-2.00e-4 ± ")),
            "{refused:?}"
        );
    }

    /// Large batches a little off the model (cheaper at the short context, dearer at the long one) make the decode
    /// fit with the across-the-batch KV term put all the batch cost into it and refuse a negative `per_seq_ms`; the
    /// term is optional, so the fit drops it and fits the rest, unless the user asked for it (`--batch-kv on`).
    #[test]
    fn the_decode_fit_drops_the_optional_term_rather_than_refuse() {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for b in [1.0f64, 2.0, 4.0, 8.0] {
            for c in [429.0, 3433.0] {
                let mut t = 0.4 + 0.15 * b + 0.0015 * b * c;
                if b == 8.0 {
                    t += if c > 1000.0 { 1.0 } else { -1.0 };
                }
                for i in 0..8 {
                    x.push(vec![1.0, b, b * c, b * b * c / 1000.0]);
                    y.push(t + (((i * 37) % 8) as f64 - 3.5) * 0.004);
                }
            }
        }
        let all = vec!["step_fixed_ms", "per_seq_ms", "per_ctx_token_ms", OPTIONAL_TERM];
        let refused = fit_nonneg("decode", &all, &x, &y, &mut Vec::new());
        assert!(
            matches!(&refused, Err(CalibrateError::Unfit { reason, .. }) if reason.starts_with("per_seq_ms came out negative")),
            "{refused:?}"
        );
        let (mut names, mut xs, mut notes) = (all.clone(), x.clone(), Vec::new());
        let (b, _, _) =
            fit_decode(&mut names, &mut xs, &y, true, &mut notes).unwrap_or_else(|e| panic!("{e}: {notes:?}"));
        assert_eq!(names, ["step_fixed_ms", "per_seq_ms", "per_ctx_token_ms"]);
        assert!(xs.iter().all(|r| r.len() == 3));
        assert!(b.iter().all(|v| *v >= 0.0) && (b[2] - 0.0015).abs() < 2e-4, "{b:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with(OPTIONAL_TERM) && n.contains("fitted without it")),
            "{notes:?}"
        );
        let (mut names, mut xs) = (all.clone(), x.clone());
        assert!(fit_decode(&mut names, &mut xs, &y, false, &mut Vec::new()).is_err());
    }

    #[test]
    fn singular_designs_are_refused() {
        let x: Vec<Vec<f64>> = (0..10).map(|_| vec![1.0, 2.0]).collect();
        assert!(huber_fit(&x, &[1.0; 10]).is_none());
    }

    /// A return after eviction (a 2-token reply, then one block more) is no conversation step: with the returns
    /// left out, no reply share is read from them.
    #[test]
    fn returns_say_nothing_of_the_reply_share() {
        let rec = |session: u64, step: u32, prompt: u64, cached: u64| -> RequestRecord {
            serde_json::from_value(serde_json::json!({
                "schema": crate::record::RECORD_SCHEMA_VERSION, "session": session, "inst": 0, "step": step,
                "steps_asked": 2, "base_asked": prompt, "ok": true, "t_submit": session as f64 + f64::from(step),
                "ttft_s": 0.05, "wall_s": 0.06, "gen_tokens": 2, "asked_tokens": 2, "prompt_tokens": prompt,
                "cached_tokens": cached, "sse_frames": 2, "prompt_chars": 0, "usage_source": "final_frame"}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let n = MIN_REPLY_PAIRS as u64 + 2;
        let records: Vec<RequestRecord> = (0..n)
            .flat_map(|k| [rec(k, 0, 1024, 0), rec(k, 1, 1088, 1023)])
            .collect();
        let mut notes = Vec::new();
        let none = std::collections::BTreeSet::new();
        // Read as conversation steps, their 2-token replies give nothing to measure: 1.
        assert_eq!(reply_share(&records, 16, &none, &mut notes), Some(1.0));
        let returns: std::collections::BTreeSet<usize> = (0..records.len()).filter(|i| i % 2 == 1).collect();
        assert_eq!(reply_share(&records, 16, &returns, &mut notes), None, "{notes:?}");
    }

    /// On a slot engine the first session returns once as many others as slots have come since, in sessions of
    /// at most `RETURN_SLOT_SESSION_TOKENS`; elsewhere once the parked tokens outgrow the GPU's KV.
    #[test]
    fn returns_wait_for_the_slots_on_a_slot_engine() {
        // (index of the first return, the parked sessions' prompt tokens)
        let first = |t: &crate::workload::TraceWorkload| {
            let i = t
                .requests
                .iter()
                .position(|r| r.hash_ids.len() > t.requests[0].hash_ids.len())
                .unwrap_or(usize::MAX);
            (i, t.requests[0].unique_prompt_tokens)
        };
        // llama.cpp, 4 slots of 8,192 tokens (32,768 in all), prompts up to 6,900 tokens.
        let slots = plan_returns(6900, 32_768, Some(4)).expect("a phase");
        assert_eq!(first(&slots), (5, RETURN_SLOT_SESSION_TOKENS));
        // The return is the first parked conversation's prompt and one more block.
        let r = &slots.requests[5];
        assert_eq!(
            (r.session, r.hash_ids[..16].to_vec()),
            (Some(0), slots.requests[0].hash_ids.clone())
        );
        // The same KV without slots: 3,392-token sessions until they outgrow 32,768 tokens.
        let kv = plan_returns(6900, 32_768, None).expect("a phase");
        assert_eq!(first(&kv), (11, 3392));
        // Short prompts keep their half on a slot engine too.
        assert_eq!(first(&plan_returns(1000, 32_768, Some(4)).expect("a phase")).1, 448);
    }

    #[test]
    fn a_phase_gets_what_the_earlier_ones_left_and_at_least_half_its_share() {
        let phases = plan_probe(&ProbeLimits::default()).expect("plan");
        let n = phases.len();
        let on_time: f64 = phases[..3].iter().map(|p| 100.0 * p.budget_share).sum();
        // On time: the nominal share.
        for i in [0, 3, n - 1] {
            let want = 100.0 * phases[i].budget_share;
            let before: f64 = phases[..i].iter().map(|p| 100.0 * p.budget_share).sum();
            assert!(
                (phase_seconds(&phases, i, 100.0, before) - want).abs() < 1e-9,
                "phase {i}"
            );
        }
        // Early: the time left over is shared out by share.
        let early = phase_seconds(&phases, 3, 100.0, on_time - 10.0);
        let rest: f64 = phases[3..].iter().map(|p| p.budget_share).sum();
        assert!((early - 100.0 * phases[3].budget_share - 10.0 * phases[3].budget_share / rest).abs() < 1e-9);
        // Late: less, but never under half the share; the last phase gets what is left.
        let late = phase_seconds(&phases, 3, 100.0, on_time + 5.0);
        assert!(late < 100.0 * phases[3].budget_share && late >= 50.0 * phases[3].budget_share);
        assert_eq!(phase_seconds(&phases, 3, 100.0, 99.0), 50.0 * phases[3].budget_share);
        assert_eq!(phase_seconds(&phases, n, 100.0, 0.0), 0.0);
        // Decode phases wait for the round in flight, at least a tenth of the budget; the others cut it after a
        // fifth of their time.
        for p in &phases {
            assert_eq!(p.start_and_drain(10.0, 180.0).0, 8.0);
            let drain = p.start_and_drain(10.0, 180.0).1;
            assert_eq!(
                drain,
                if p.name.starts_with("decode-") { 18.0 } else { 2.0 },
                "{}",
                p.name
            );
            assert_eq!(
                p.start_and_drain(30.0, 180.0).1,
                if p.name.starts_with("decode-") { 30.0 } else { 6.0 }
            );
        }
    }

    #[test]
    fn the_probe_stays_within_its_limits() {
        let l = ProbeLimits::default();
        let phases = plan_probe(&l).expect("plan");
        let share: f64 = phases.iter().map(|p| p.budget_share).sum();
        assert!((share - 1.0).abs() < 1e-9);
        for p in &phases {
            for r in &p.requests {
                assert!(r.shared_prefix_tokens + r.unique_prompt_tokens <= l.max_prompt_tokens);
            }
            assert!(p.users >= 1 && p.users <= l.max_batch);
        }
        assert!(
            plan_probe(&ProbeLimits {
                max_prompt_tokens: 10,
                ..l
            })
            .is_err()
        );
    }

    /// With the cap unknown, the `cap` phase comes first: every request at once, tiny prompts, exact outputs; its
    /// share comes out of the decode phases', and every other phase is as without it. Its time: half to start,
    /// half (at least [`CAP_MIN_DRAIN_S`]) to measure.
    #[test]
    fn the_cap_phase_comes_first_and_changes_nothing_else() {
        let without = plan_probe(&ProbeLimits::default()).expect("plan");
        let l = ProbeLimits {
            cap: Some(CAP_PROBE_REQUESTS),
            ..ProbeLimits::default()
        };
        let with = plan_probe(&l).expect("plan");
        assert_eq!(with.len(), without.len() + 1);
        let cap = &with[0];
        assert_eq!((cap.name.as_str(), cap.users), ("cap", CAP_PROBE_REQUESTS));
        assert_eq!(cap.requests.len(), CAP_PROBE_REQUESTS as usize);
        assert!(cap.requests.iter().all(|r| *r
            == ProbeRequest {
                shared_prefix_tokens: 0,
                unique_prompt_tokens: CAP_PROMPT_TOKENS,
                output_tokens: CAP_OUTPUT_TOKENS,
            }));
        assert_eq!(cap.budget_share, CAP_SHARE);
        let share: f64 = with.iter().map(|p| p.budget_share).sum();
        assert!((share - 1.0).abs() < 1e-9);
        let decode = |ps: &[ProbePhase]| -> f64 {
            ps.iter()
                .filter(|p| p.name.starts_with("decode-"))
                .map(|p| p.budget_share)
                .sum()
        };
        assert!((decode(&without) - decode(&with) - CAP_SHARE).abs() < 1e-9);
        for (a, b) in without.iter().zip(&with[1..]) {
            assert_eq!((&a.name, a.users, &a.requests), (&b.name, b.users, &b.requests));
        }
        assert_eq!(cap.start_and_drain(6.0, 150.0), (3.0, 3.0));
        assert_eq!(cap.start_and_drain(1.0, 25.0), (0.5, CAP_MIN_DRAIN_S));
        assert!(plan_probe(&ProbeLimits { cap: Some(1), ..l }).is_err());
    }

    /// Stage 3 on prefills beside decoders whose TTFT grows with `new·C` (0.05 ms per ktok·token): fitted from
    /// plain records; with speculative ones fixed at 0 and said why, unless asked for (`--prefill-kv on`).
    #[test]
    fn speculative_records_fit_the_prefill_kv_term_only_when_asked() {
        let (pb, dec) = ([20.0, 0.1, 0.0], (10.0, 1.0, 0.002, 0.0));
        let obs: Vec<BesideObs> = (0..24)
            .map(|i| {
                let (new, c) = (200.0 + 50.0 * f64::from(i % 6), 500.0 + 400.0 * f64::from(i / 6));
                let lone = pb[0] + pb[1] * new;
                let shared = dec.1 + dec.2 * c;
                let wait = 0.5 * (dec.0 + dec.1 + dec.2 * c);
                BesideObs {
                    index: i as usize,
                    ttft: lone + shared + wait + 0.05 * new * c / 1000.0 + f64::from(i % 3) * 0.01,
                    new,
                    cached: 0.0,
                    b: 1.0,
                    c,
                    since_boundary_ms: None,
                }
            })
            .collect();
        let fit = |choice: Option<bool>, speculative: bool| {
            let mut notes = Vec::new();
            let (v, _, kept, _, _) = fit_beside(&obs, choice, speculative, 2048.0, &pb, 0.0, dec, &mut notes);
            (v, kept, notes)
        };
        let (v, kept, _) = fit(None, false);
        assert!(kept && (v - 0.05).abs() < 1e-3, "{v}");
        let (v, kept, notes) = fit(None, true);
        assert!(!kept && v == 0.0, "{v}");
        assert!(notes.iter().any(|n| n.contains("speculative")), "{notes:?}");
        let (v, kept, _) = fit(Some(true), true);
        assert!(kept && (v - 0.05).abs() < 1e-3, "{v}");
    }
}
