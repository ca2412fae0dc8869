//! [`RooflineCost`]: the step time of a deployment (a model on a GPU at a tensor-parallel degree), priced from what
//! the step does rather than from fitted coefficients. It lives on [`crate::engine::EngineProfile`] as `roofline`
//! and, when present, replaces the profile's linear step-time terms (docs/simulator.md, "Deployments").
//!
//! For a step that schedules `seqs` sequences holding `Σcontext` tokens of KV and computes `tokens` new tokens
//! (one per decoding sequence plus the prefill chunks), every quantity per GPU:
//! - compute, ms = (`flops_per_token`·tokens + `head_flops_per_row`·rows + `attn_flops_per_ctx`·A_decode +
//!   `prefill_attn_flops_per_ctx`·A_prefill) / `flops_per_ms`, where rows are the positions whose logits the step
//!   computes (one per scheduled sequence, plus each verified draft position: engines run the output head only on
//!   a prompt's last token, not on every prefilled one) and A counts, over the step's new tokens, the context
//!   tokens each attends to (with `decode_attn_flops_per_ms` given, the decoders' attention FLOPs run at that rate
//!   instead);
//! - memory, ms = (`weight_bytes` + `expert_bytes`·`moe_layers`·touched(tokens) + `kv_bytes_per_token`·Σcontext +
//!   `window_bytes_per_seq`·seqs) / `bytes_per_ms`, where touched(T) = E·(1 − (1 − k/E)^T) is the expected number
//!   of distinct experts (of `experts`, `active_experts` per token) that T tokens route to;
//! - step, ms = `overhead_ms` + max(compute, memory) + (1 − `overlap`)·min(compute, memory) + `comm_fixed_ms` +
//!   `comm_ms_per_token`·tokens: with `overlap` 1 (a GPU, and the default) the larger of the two hides the other;
//!   with 0 they add up (a CPU, whose cores both compute and wait on the reads).
//!
//! A pure-decode step is then, under each bound, a function linear in Σcontext (the batch is fixed over a stretch),
//! so the engine's closed-form stretches stay exact: [`RooflineCost::decode_stretch`] gives the per-step growth
//! under the bound that holds at the stretch's first step and how many steps it keeps holding.

use serde::{Deserialize, Serialize};

/// Step-time model of a deployment; every quantity per GPU (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RooflineCost {
    /// Fixed cost of every step (scheduling, kernel launches, sampling), milliseconds.
    pub overhead_ms: f64,
    /// Sustained matrix throughput: dense peak at the compute precision × MFU, FLOPs per millisecond.
    pub flops_per_ms: f64,
    /// Sustained memory bandwidth: peak × bandwidth utilization, bytes per millisecond.
    pub bytes_per_ms: f64,
    /// Matrix FLOPs per new token (2 × active parameters but the output head's, split over the TP ranks).
    pub flops_per_token: f64,
    /// Output-head FLOPs per position whose logits a step computes (2 × vocabulary × hidden size, split over the
    /// TP ranks). 0 (the default, left out of the JSON): the head is counted in `flops_per_token`, as rooflines
    /// written before this term were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub head_flops_per_row: f64,
    /// Attention FLOPs per decoded token per context token it attends to.
    pub attn_flops_per_ctx: f64,
    /// Attention FLOPs per prefilled token per context token it attends to.
    pub prefill_attn_flops_per_ctx: f64,
    /// Weights every step reads whole (all but the routed experts), bytes.
    pub weight_bytes: f64,
    /// One routed expert of one layer, bytes (0 for a dense model).
    pub expert_bytes: f64,
    /// Layers with routed experts.
    pub moe_layers: u32,
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Routed experts each token uses.
    pub active_experts: u32,
    /// KV read per context token of every scheduled sequence (full-attention layers), bytes.
    pub kv_bytes_per_token: f64,
    /// KV read per scheduled sequence by sliding-window layers (window × their bytes per token), bytes.
    pub window_bytes_per_seq: f64,
    /// Tensor-parallel all-reduce cost per new token (bytes over the scale-up link), milliseconds.
    pub comm_ms_per_token: f64,
    /// Tensor-parallel all-reduce latency per step, milliseconds.
    pub comm_fixed_ms: f64,
    /// How far compute and memory time overlap, in [0, 1]: the step takes the larger plus (1 − overlap) × the
    /// smaller. 1 (the default, left out of the JSON): a GPU's `max(compute, memory)`.
    #[serde(default = "full_overlap", skip_serializing_if = "is_full_overlap")]
    pub overlap: f64,
    /// Sustained throughput of the decoders' attention (one query against its context), FLOPs per millisecond,
    /// where it differs from the matrix work's (`flops_per_ms`); absent (the default): the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_attn_flops_per_ms: Option<f64>,
}

fn full_overlap() -> f64 {
    1.0
}

fn is_full_overlap(v: &f64) -> bool {
    *v == 1.0
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// What one step does, as [`RooflineCost::step_ms`] prices it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepShape {
    /// Sequences scheduled.
    pub seqs: f64,
    /// New tokens computed (decoders plus prefill chunk tokens).
    pub tokens: f64,
    /// Σ context (KV tokens already computed) of the scheduled sequences.
    pub ctx: f64,
    /// Σ over decoded tokens of the context each attends to.
    pub decode_attended: f64,
    /// Σ over prefilled tokens of the context each attends to.
    pub prefill_attended: f64,
    /// Positions whose logits the step computes: one per scheduled sequence (a prefill chunk's last token, a
    /// decoder's token), plus each drafted token a speculative step verifies.
    pub logit_rows: f64,
}

impl StepShape {
    /// A pure-decode step: `seqs` sequences holding `ctx` tokens of KV, each decoding one token (which attends to
    /// its context and itself).
    pub fn decode(seqs: f64, ctx: f64) -> Self {
        StepShape {
            seqs,
            tokens: seqs,
            ctx,
            decode_attended: ctx + seqs,
            prefill_attended: 0.0,
            logit_rows: seqs,
        }
    }

    /// This step with `drafted` draft tokens verified beside its decoders' tokens, attending to `attended` context
    /// tokens in all: each is one more token computed and one more row of logits.
    pub fn verifying(mut self, drafted: f64, attended: f64) -> Self {
        self.tokens += drafted;
        self.logit_rows += drafted;
        self.decode_attended += attended;
        self
    }

    /// A cold prefill chunk of `tokens` (no context before it).
    pub fn prefill(tokens: f64) -> Self {
        StepShape {
            seqs: 1.0,
            tokens,
            ctx: 0.0,
            decode_attended: 0.0,
            prefill_attended: tokens * (tokens - 1.0) / 2.0,
            logit_rows: 1.0,
        }
    }
}

/// Which side of the roofline a step sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Compute,
    Memory,
}

/// A step's cost, split into its parts, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepCost {
    pub compute_ms: f64,
    pub memory_ms: f64,
    pub comm_ms: f64,
    pub overhead_ms: f64,
    pub step_ms: f64,
    pub bound: Bound,
}

impl RooflineCost {
    /// Expected distinct routed experts per MoE layer that `tokens` tokens touch (0 for a dense model).
    pub fn experts_touched(&self, tokens: f64) -> f64 {
        if self.experts == 0 || self.moe_layers == 0 {
            return 0.0;
        }
        let e = f64::from(self.experts);
        let k = f64::from(self.active_experts.min(self.experts));
        // `powi` (repeated multiplication) rather than `powf`, so native and wasm32 agree to the bit; past a
        // million tokens every expert is touched anyway.
        let t = tokens.clamp(0.0, 1e6) as i32;
        e * (1.0 - (1.0 - k / e).powi(t))
    }

    /// Compute time of a step, milliseconds.
    pub fn compute_ms(&self, s: &StepShape) -> f64 {
        match self.decode_attn_flops_per_ms {
            // Summed in the order the roofline always has, so a GPU's steps stay the same to the bit.
            None => {
                (self.flops_per_token * s.tokens
                    + self.head_flops_per_row * s.logit_rows
                    + self.attn_flops_per_ctx * s.decode_attended
                    + self.prefill_attn_flops_per_ctx * s.prefill_attended)
                    / self.flops_per_ms
            }
            Some(rate) => self.matmul_flops(s) / self.flops_per_ms + self.attn_flops_per_ctx * s.decode_attended / rate,
        }
    }

    /// FLOPs of a step at the matrix rate (all but the decoders' attention): the weights', the output head's and
    /// the prefill chunks' attention.
    pub fn matmul_flops(&self, s: &StepShape) -> f64 {
        self.flops_per_token * s.tokens
            + self.head_flops_per_row * s.logit_rows
            + self.prefill_attn_flops_per_ctx * s.prefill_attended
    }

    /// The decoders' attention throughput, FLOPs per millisecond.
    pub fn decode_attention_rate(&self) -> f64 {
        self.decode_attn_flops_per_ms.unwrap_or(self.flops_per_ms)
    }

    /// Memory time of a step, milliseconds.
    pub fn memory_ms(&self, s: &StepShape) -> f64 {
        let experts = self.expert_bytes * f64::from(self.moe_layers) * self.experts_touched(s.tokens);
        (self.weight_bytes + experts + self.kv_bytes_per_token * s.ctx + self.window_bytes_per_seq * s.seqs)
            / self.bytes_per_ms
    }

    /// Tensor-parallel communication time of a step, milliseconds.
    pub fn comm_ms(&self, s: &StepShape) -> f64 {
        self.comm_fixed_ms + self.comm_ms_per_token * s.tokens
    }

    /// Compute and memory time together: the larger plus the share (1 − `overlap`) of the smaller that does not
    /// overlap it. At `overlap` 1 exactly the larger.
    pub fn combined_ms(&self, compute_ms: f64, memory_ms: f64) -> f64 {
        let (hi, lo) = if compute_ms > memory_ms {
            (compute_ms, memory_ms)
        } else {
            (memory_ms, compute_ms)
        };
        if self.overlap == 1.0 {
            hi
        } else {
            hi + (1.0 - self.overlap) * lo
        }
    }

    /// The step's duration, milliseconds.
    pub fn step_ms(&self, s: &StepShape) -> f64 {
        self.overhead_ms + self.combined_ms(self.compute_ms(s), self.memory_ms(s)) + self.comm_ms(s)
    }

    /// The step's duration with its parts and bound.
    pub fn cost(&self, s: &StepShape) -> StepCost {
        let (compute_ms, memory_ms, comm_ms) = (self.compute_ms(s), self.memory_ms(s), self.comm_ms(s));
        StepCost {
            compute_ms,
            memory_ms,
            comm_ms,
            overhead_ms: self.overhead_ms,
            step_ms: self.step_ms(s),
            bound: if compute_ms > memory_ms {
                Bound::Compute
            } else {
                Bound::Memory
            },
        }
    }

    /// A lower bound on any step's duration (a step reads at least the weights), milliseconds.
    pub fn min_step_ms(&self) -> f64 {
        self.overhead_ms + self.comm_fixed_ms + self.weight_bytes / self.bytes_per_ms
    }

    /// A stretch of pure-decode steps from `seqs` sequences holding `ctx` tokens of KV (Σcontext grows by `seqs`
    /// a step): the growth of the step time per step under the bound that holds at the first step, and how many
    /// steps (≥ 1) that bound keeps holding. The stretch must end there: past it the other bound's growth applies.
    pub fn decode_stretch(&self, seqs: f64, ctx: f64) -> (f64, u64) {
        let s = StepShape::decode(seqs, ctx);
        let (c0, m0) = (self.compute_ms(&s), self.memory_ms(&s));
        let cb = self.attn_flops_per_ctx * seqs / self.decode_attention_rate();
        let mb = self.kv_bytes_per_token * seqs / self.bytes_per_ms;
        // The bound at step 0; at a tie, the one that grows faster (it is the max from step 1 on).
        let compute_bound = c0 > m0 || (c0 == m0 && cb > mb);
        let (b, gap, closing) = if compute_bound {
            (cb, c0 - m0, mb - cb)
        } else {
            (mb, m0 - c0, cb - mb)
        };
        // Under either bound the step also carries (1 − overlap) of the other side's time, and of its growth.
        let other = if compute_bound { mb } else { cb };
        let b = if self.overlap == 1.0 {
            b
        } else {
            b + (1.0 - self.overlap) * other
        };
        if closing <= 0.0 {
            return (b, u64::MAX);
        }
        // Steps i = 0, 1, … with gap − closing·i ≥ 0.
        let steps = gap / closing;
        let held = if steps.is_finite() && steps < 1e15 {
            steps as u64 + 1
        } else {
            u64::MAX
        };
        (b, held.max(1))
    }

    /// Check every number is finite and in range; paths are relative (`flops_per_ms`).
    pub fn validate(&self) -> Result<(), (String, String)> {
        for (name, v, positive) in [
            ("overhead_ms", self.overhead_ms, false),
            ("flops_per_ms", self.flops_per_ms, true),
            ("bytes_per_ms", self.bytes_per_ms, true),
            ("flops_per_token", self.flops_per_token, false),
            ("head_flops_per_row", self.head_flops_per_row, false),
            ("attn_flops_per_ctx", self.attn_flops_per_ctx, false),
            ("prefill_attn_flops_per_ctx", self.prefill_attn_flops_per_ctx, false),
            ("weight_bytes", self.weight_bytes, true),
            ("expert_bytes", self.expert_bytes, false),
            ("kv_bytes_per_token", self.kv_bytes_per_token, false),
            ("window_bytes_per_seq", self.window_bytes_per_seq, false),
            ("comm_ms_per_token", self.comm_ms_per_token, false),
            ("comm_fixed_ms", self.comm_fixed_ms, false),
        ] {
            let ok = v.is_finite() && (0.0..=1e30).contains(&v) && (!positive || v > 0.0);
            if !ok {
                let want = if positive { "> 0" } else { ">= 0" };
                return Err((name.to_string(), format!("must be a finite number {want} (got {v})")));
            }
        }
        if let Some(v) = self.decode_attn_flops_per_ms
            && !(v.is_finite() && v > 0.0 && v <= 1e30)
        {
            return Err((
                "decode_attn_flops_per_ms".to_string(),
                format!("must be a finite number > 0 (got {v})"),
            ));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return Err((
                "overlap".to_string(),
                format!("must be a share in [0, 1] (got {})", self.overlap),
            ));
        }
        if self.active_experts > self.experts {
            return Err((
                "active_experts".to_string(),
                format!(
                    "must be at most experts ({}) (got {})",
                    self.experts, self.active_experts
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost() -> RooflineCost {
        RooflineCost {
            overhead_ms: 1.0,
            flops_per_ms: 1e9,
            bytes_per_ms: 1e9,
            flops_per_token: 1e6,
            head_flops_per_row: 0.0,
            attn_flops_per_ctx: 1000.0,
            prefill_attn_flops_per_ctx: 1000.0,
            weight_bytes: 1e9,
            expert_bytes: 0.0,
            moe_layers: 0,
            experts: 0,
            active_experts: 0,
            kv_bytes_per_token: 100.0,
            window_bytes_per_seq: 0.0,
            comm_ms_per_token: 0.0,
            comm_fixed_ms: 0.0,
            overlap: 1.0,
            decode_attn_flops_per_ms: None,
        }
    }

    #[test]
    fn decode_stretch_ends_where_the_bound_switches() {
        // Memory: 1 + 100·ctx/1e9; compute: (1e6·n + 1000·(ctx + n))/1e9. Compute grows 10× faster per context
        // token, so memory-bound decoding turns compute-bound as the context grows.
        let c = cost();
        let n = 1000.0;
        // Step i has ctx = 1000·i: memory 1 + 1e-4·i, compute 1.001 + 1e-3·i: compute-bound from the start and for
        // good (it also grows faster).
        let (b, held) = c.decode_stretch(n, 0.0);
        assert_eq!(b, 1000.0 * n / 1e9);
        assert_eq!(held, u64::MAX);
        let mut c = cost();
        c.flops_per_token = 0.5e6;
        // compute 0.5 + 1e-3 + 1e-3·i, memory 1 + 1e-4·i: memory holds while 0.499 − 9e-4·i ≥ 0 → i ≤ 554.
        let (b, held) = c.decode_stretch(n, 0.0);
        assert_eq!(b, 100.0 * n / 1e9);
        assert_eq!(held, 555);
        let at = |i: f64| {
            let s = StepShape::decode(n, n * i);
            (c.compute_ms(&s), c.memory_ms(&s))
        };
        let (c554, m554) = at(554.0);
        let (c555, m555) = at(555.0);
        assert!(m554 >= c554 && c555 > m555);
    }

    #[test]
    fn overlap_adds_the_smaller_side() {
        // Decode, 10 sequences at 100 context tokens each (1,000 in all): compute (1e6·10 + 1000·1,010)/1e9 =
        // 0.01101 ms; memory (1e9 + 100·1,000)/1e9 = 1.0001 ms.
        let mut c = cost();
        let s = StepShape::decode(10.0, 1000.0);
        assert!((c.compute_ms(&s) - 0.01101).abs() < 1e-15, "{}", c.compute_ms(&s));
        assert!((c.memory_ms(&s) - 1.0001).abs() < 1e-15, "{}", c.memory_ms(&s));
        // Full overlap: 1 + 1.0001, the memory time exactly.
        assert_eq!(c.step_ms(&s), 1.0 + c.memory_ms(&s));
        // None: 1 + 1.0001 + 0.01101; half: 1 + 1.0001 + 0.005505.
        c.overlap = 0.0;
        assert!((c.step_ms(&s) - 2.01111).abs() < 1e-12, "{}", c.step_ms(&s));
        c.overlap = 0.5;
        assert!((c.step_ms(&s) - 2.005605).abs() < 1e-12, "{}", c.step_ms(&s));
        // The bound is still the larger side.
        assert_eq!(c.cost(&s).bound, Bound::Memory);
        c.overlap = 1.5;
        assert_eq!(c.validate().map_err(|e| e.0), Err("overlap".to_string()));
    }

    #[test]
    fn decode_attention_at_its_own_rate() {
        // Decode, 10 sequences at 100 context tokens each: matrix work 1e6·10 / 1e9 = 0.01 ms; attention
        // 1000·1,010 = 1.01e6 FLOPs, at 1e9 FLOPs/ms 0.00101 ms, at 1e8 0.0101 ms.
        let mut c = cost();
        let s = StepShape::decode(10.0, 1000.0);
        assert!((c.compute_ms(&s) - 0.01101).abs() < 1e-15);
        c.decode_attn_flops_per_ms = Some(1e8);
        assert!((c.compute_ms(&s) - 0.0201).abs() < 1e-15, "{}", c.compute_ms(&s));
        // A prefill's attention stays at the matrix work's rate: 4 tokens, 1e6·4 + 1000·6 pairs, over 1e9.
        let p = StepShape::prefill(4.0);
        assert!((c.compute_ms(&p) - 0.004006).abs() < 1e-15, "{}", c.compute_ms(&p));
        // The decode stretch grows by attention at its rate: compute-bound here (memory is 0), 1000·10/1e8 a step.
        c.weight_bytes = 1e-9;
        c.kv_bytes_per_token = 0.0;
        let (b, held) = c.decode_stretch(10.0, 1000.0);
        assert!((b - 1000.0 * 10.0 / 1e8).abs() < 1e-18, "{b}");
        assert_eq!(held, u64::MAX);
        c.decode_attn_flops_per_ms = Some(0.0);
        assert_eq!(
            c.validate().map_err(|e| e.0),
            Err("decode_attn_flops_per_ms".to_string())
        );
    }

    #[test]
    fn decode_stretch_with_overlap_grows_by_both_sides() {
        // As the second case of `decode_stretch_ends_where_the_bound_switches`, with overlap 0.25: memory-bound
        // for the same 555 steps, each step growing by memory's 100·n/1e9 plus 0.75 of compute's 1000·n/1e9.
        let mut c = cost();
        c.flops_per_token = 0.5e6;
        c.overlap = 0.25;
        let n = 1000.0;
        let (b, held) = c.decode_stretch(n, 0.0);
        assert!((b - (100.0 * n + 0.75 * 1000.0 * n) / 1e9).abs() < 1e-15, "{b}");
        assert_eq!(held, 555);
        // The closed form agrees with pricing the steps one at a time.
        let step = |i: f64| c.step_ms(&StepShape::decode(n, n * i));
        assert!((step(554.0) - step(0.0) - 554.0 * b).abs() < 1e-9);
    }

    #[test]
    fn experts_touched_saturates() {
        let mut c = cost();
        (c.experts, c.active_experts, c.moe_layers) = (128, 8, 48);
        assert!((c.experts_touched(1.0) - 8.0).abs() < 1e-12);
        // Two tokens: 128·(1 − (120/128)²) = 15.5.
        assert!((c.experts_touched(2.0) - 15.5).abs() < 1e-12);
        assert!((c.experts_touched(4096.0) - 128.0).abs() < 1e-9);
    }
}
