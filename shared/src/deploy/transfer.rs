//! Carrying a calibration over to a deployment: the efficiency factors that make a deployment's roofline price
//! steps as a calibrated profile does (docs/calibration.md, "Carrying a calibration to other hardware").
//!
//! A calibration measures one server and fits an [`EngineProfile`]; told the deployment it measured (model, GPU,
//! TP), [`transfer`] finds the `efficiency` of that deployment whose roofline reproduces the profile's step costs.
//! Edit the model or the GPU of the result and the roofline prices the new hardware with the same efficiencies.
//!
//! Stages:
//! 1. [`grid`]: the shapes that matter: pure-decode steps at batch 1, 2, 4, … up to `max_num_seqs` (at most 64)
//!    with 512, 2,048, 8,192 and 32,768 tokens of context each (where the profile's limits hold them), and cold
//!    prefills of 256 to 8,192 tokens (up to the step's token budget);
//! 2. `parts`: per shape, the calibrated step cost ([`calibrated_ms`]) and the roofline's compute and memory time
//!    at full efficiency and its communication time;
//! 3. `solve`: the step overhead `o`, `x = 1/mfu` and `y = 1/bandwidth_utilization` that minimize
//!    Σ ((o + max(x·C, y·M) + comm − P) / P)² (relative errors, so short and long steps weigh alike): with each
//!    shape's bound fixed the problem is linear least squares; the bounds are re-read from the solution and the
//!    fit repeated until they no longer change (at most [`MAX_ROUNDS`] rounds; the best round is kept). Factors
//!    the data did not identify keep their value (without the prefill rate, the fit uses the decode steps only);
//!    a value out of range (an efficiency above 1, a negative overhead) is held at the range's edge and the
//!    others refitted;
//! 4. `check`: the deployment with the fitted efficiencies (rounded to 4 significant digits) is resolved again
//!    and every shape priced by its roofline: the error per shape, its largest and RMS.
//!
//! `overlap` (how far compute and memory time overlap) keeps its value (1, a GPU's `max`) while the roofline with it
//! expresses the calibration within [`EXPRESSED`] at every shape. Past that, when the calibration identified all
//! three terms (so both decode and prefill shapes, whose compute and memory shares differ, are fitted), `solve`
//! is run at each overlap of a grid (0, 0.05, …, 1, then in steps of 0.005 around the best) and the overlap with
//! the least error is kept: a CPU server, whose decode step adds the matrix work to the weights' read, asks for
//! one near 0.
//!
//! In the same case, the grid is searched a second time with `decode_attention_mfu` a parameter of its own (`z =
//! 1/decode_attention_mfu`; otherwise the decoders' attention runs at `mfu`): a CPU's decode step grows with
//! context far faster than its KV read or its matmul rate allow (one query against the context, a vector product
//! per cached token). The fit with the least error of all is kept.
//!
//! `link_utilization` and `allreduce_latency_us` are not fitted: one TP degree cannot tell them from the step
//! overhead and the compute time (and at TP 1 there are no all-reduces); they keep their value, with that reason.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::roofline::{RooflineCost, StepShape};
use super::{Deployment, Efficiency};
use crate::engine::EngineProfile;
use crate::error::ScenarioError;

/// Most rounds of `solve` (re-reading each shape's bound).
pub const MAX_ROUNDS: usize = 20;

/// The largest error at any shape with which the roofline is said to express a calibration (and beyond which
/// `overlap` is fitted, and a note names the worst shape).
pub const EXPRESSED: f64 = 0.02;

/// Which of the calibrated profile's terms the data determined (`fit.json`'s `coefficients[…].identified`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identified {
    /// `step_fixed_ms`: the batch-1 fixed cost (gives `step_overhead_ms`).
    pub step_fixed: bool,
    /// `per_ctx_token_ms`: the decode slope in context (gives `bandwidth_utilization`).
    pub ctx_slope: bool,
    /// `prefill_tokens_per_ms`: prefill throughput (gives `mfu`).
    pub prefill_rate: bool,
}

impl Identified {
    /// Every term known (a profile taken whole, e.g. one resolved from a deployment).
    pub const ALL: Identified = Identified {
        step_fixed: true,
        ctx_slope: true,
        prefill_rate: true,
    };
}

/// One shape of [`grid`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GridShape {
    /// `decode` or `prefill`.
    pub kind: ShapeKind,
    /// Sequences in the step.
    pub seqs: u32,
    /// Context per sequence, tokens (0 for a cold prefill).
    pub context: u64,
    /// New tokens computed.
    pub tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShapeKind {
    Decode,
    Prefill,
}

impl GridShape {
    /// The step as the roofline prices it.
    pub fn step(&self) -> StepShape {
        match self.kind {
            ShapeKind::Decode => StepShape::decode(f64::from(self.seqs), f64::from(self.seqs) * self.context as f64),
            ShapeKind::Prefill => StepShape::prefill(self.tokens as f64),
        }
    }
}

/// A shape priced both ways.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShapeFit {
    #[serde(flatten)]
    pub shape: GridShape,
    /// The calibrated profile's step, ms.
    pub calibrated_ms: f64,
    /// The deployment's roofline with the fitted efficiencies, ms.
    pub roofline_ms: f64,
    /// `roofline_ms / calibrated_ms − 1`.
    pub error: f64,
}

/// One efficiency factor of the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Factor {
    pub value: f64,
    /// Whether the calibration's data determined it (false: it kept the deployment's or the default value).
    pub identified: bool,
    /// Where the value comes from.
    pub why: String,
}

/// What [`transfer`] found (`fit.json`'s `deployment_fit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    /// The deployment with every efficiency factor written (`deployment.json`).
    pub deployment: Deployment,
    /// By factor name: `mfu`, `bandwidth_utilization`, `step_overhead_ms`, `link_utilization`,
    /// `allreduce_latency_us`.
    pub factors: BTreeMap<String, Factor>,
    /// Fields of the deployment filled from what the measured server said (`max_num_seqs = 4 (…)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filled: Vec<String>,
    /// Largest |error| over the shapes, and the root mean square of the errors.
    pub max_error: f64,
    pub rms_error: f64,
    /// Every shape, calibrated vs roofline.
    pub shapes: Vec<ShapeFit>,
    pub notes: Vec<String>,
}

/// The measured server running another model: `server` (a calibrated profile) with each step priced by
/// `deployment` (a resolved deployment's profile, its roofline and the linear terms that describe it) instead of
/// its own fitted terms. Everything that is the server's and not the model's stays: the scheduler, the limits
/// (`max_num_seqs`, `max_num_batched_tokens`, `max_model_len`), the prefix cache and its tiers,
/// `reply_cached_share`, speculation. The KV capacity stays the server's when it is set in tokens (llama.cpp's
/// `-c`: `scheduler` `llama_cpp`); a vLLM-like server sizes its cache from the memory the weights leave, so there
/// it is the deployment's.
pub fn on_server(server: &EngineProfile, deployment: &EngineProfile) -> EngineProfile {
    use crate::engine::profile::Scheduler;
    let mut p = server.clone();
    p.name = format!("{} on {}", deployment.name, server.name);
    p.basis = format!(
        "{}; the server's scheduling, limits and cache from {}",
        deployment.basis, server.name
    );
    p.take_step_terms(deployment);
    if server.scheduler != Scheduler::LlamaCpp {
        p.block_size = deployment.block_size;
        p.num_kv_blocks = deployment.num_kv_blocks;
    }
    p
}

/// Fit `deployment`'s efficiencies to `calibrated` (see the module docs). Factors the deployment gives and the
/// data did not identify keep the deployment's value, the others their default. Errors: the deployment does not
/// resolve (paths relative to it).
pub fn transfer(
    calibrated: &EngineProfile,
    deployment: &Deployment,
    known: Identified,
) -> Result<Transfer, ScenarioError> {
    let start = start_values(deployment)?;
    let shapes = grid(calibrated);
    let rows = parts(calibrated, deployment, &shapes)?;
    let mut notes = Vec::new();
    let has_prefill = rows.iter().any(|r| r.shape.kind == ShapeKind::Prefill);
    let free = Free {
        overhead: known.step_fixed,
        mfu: known.prefill_rate && has_prefill,
        bandwidth: known.ctx_slope,
        overlap: known.step_fixed && known.ctx_slope && known.prefill_rate && has_prefill,
        attention: known.step_fixed && known.ctx_slope && known.prefill_rate && has_prefill,
    };
    // With the prefill rate unknown, `mfu` keeps its value and the prefills (priced by it) would only pull the
    // overhead off: the decode steps alone give the overhead and the bandwidth.
    let used: Vec<Row> = rows
        .iter()
        .filter(|r| free.mfu || r.shape.kind == ShapeKind::Decode)
        .copied()
        .collect();
    let (sol, held, overlap_fitted, attention_fitted) = solve_with_overlap(&used, start, free, &mut notes);
    let mut d = deployment.clone();
    d.efficiency = Efficiency {
        mfu: Some(sig4(1.0 / sol.x)),
        bandwidth_utilization: Some(sig4(1.0 / sol.y)),
        link_utilization: Some(start.link_utilization),
        step_overhead_ms: Some(sig4(sol.o)),
        allreduce_latency_us: Some(start.allreduce_latency_us),
        // Written when fitted away from the start (or given): a GPU's calibration keeps its JSON as it was.
        overlap: if overlap_fitted {
            Some(sig4(sol.ov))
        } else {
            deployment.efficiency.overlap
        },
        decode_attention_mfu: match sol.z {
            Some(z) if attention_fitted => Some(sig4(1.0 / z)),
            _ => deployment.efficiency.decode_attention_mfu,
        },
    };
    let fits = check(calibrated, &d, &shapes)?;
    let max_error = fits.iter().map(|f| f.error.abs()).fold(0.0, f64::max);
    let rms_error = (fits.iter().map(|f| f.error * f.error).sum::<f64>() / fits.len().max(1) as f64).sqrt();
    if let Some(w) = fits.iter().max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()))
        && w.error.abs() > EXPRESSED
    {
        notes.push(format!(
            "the roofline cannot express the calibrated profile exactly: worst at {} {} seqs x {} context, {} tokens: \
             {:.2} ms calibrated, {:.2} ms roofline ({:+.1} %)",
            match w.shape.kind {
                ShapeKind::Decode => "decode",
                ShapeKind::Prefill => "prefill",
            },
            w.shape.seqs,
            w.shape.context,
            w.shape.tokens,
            w.calibrated_ms,
            w.roofline_ms,
            w.error * 100.0
        ));
    }
    let factors = factors(
        deployment,
        &d.efficiency,
        free,
        held,
        deployment.tp.unwrap_or(1),
        (sol.ov, overlap_fitted),
        attention_fitted,
    );
    Ok(Transfer {
        deployment: d,
        factors,
        filled: Vec::new(),
        max_error,
        rms_error,
        shapes: fits,
        notes,
    })
}

/// The deployment's efficiencies, defaults filled in (and checked by resolving it).
fn start_values(d: &Deployment) -> Result<super::EfficiencyDefaults, ScenarioError> {
    d.resolve()?;
    d.efficiency()
}

/// The shapes that matter (see the module docs), within the calibrated profile's limits.
pub fn grid(p: &EngineProfile) -> Vec<GridShape> {
    let max_len = p.model_len();
    let kv_tokens = p.num_kv_blocks.saturating_mul(u64::from(p.block_size));
    let mut out = Vec::new();
    let mut b = 1u32;
    while b <= p.max_num_seqs.min(64) {
        for c in [512u64, 2048, 8192, 32_768] {
            if c < max_len && u64::from(b) * c <= kv_tokens {
                out.push(GridShape {
                    kind: ShapeKind::Decode,
                    seqs: b,
                    context: c,
                    tokens: u64::from(b),
                });
            }
        }
        b *= 2;
    }
    let budget = u64::from(p.max_num_batched_tokens).min(max_len);
    for n in [256u64, 512, 1024, 2048, 4096, 8192] {
        if n <= budget {
            out.push(GridShape {
                kind: ShapeKind::Prefill,
                seqs: 1,
                context: 0,
                tokens: n,
            });
        }
    }
    out
}

/// A calibrated profile's step at a shape, ms: its roofline when it has one, else its linear terms as the engine
/// adds them (a decode step: fixed + per sequence + per context token + the batch's KV; a cold prefill alone: fixed
/// + one sequence + the prefill's fixed cost, rate and attention over its own tokens).
pub fn calibrated_ms(p: &EngineProfile, s: &GridShape) -> f64 {
    if let Some(r) = &p.roofline {
        return r.step_ms(&s.step());
    }
    match s.kind {
        ShapeKind::Decode => p.decode_step_ms(f64::from(s.seqs), s.context as f64),
        ShapeKind::Prefill => {
            let n = s.tokens as f64;
            p.step_fixed_ms
                + p.per_seq_ms
                + p.prefill_fixed_ms
                + n / p.prefill_tokens_per_ms
                + p.prefill_ctx_ms_per_ktok * (n * (n - 1.0) / 2.0) / 1000.0
        }
    }
}

/// One shape's numbers for `solve`.
#[derive(Debug, Clone, Copy)]
struct Row {
    shape: GridShape,
    /// Calibrated step, ms.
    target: f64,
    /// Compute and memory time at full efficiency, communication time, ms.
    compute: f64,
    memory: f64,
    comm: f64,
    /// The compute time's two parts at full efficiency: the matrix work (with the prefills' attention) and the
    /// decoders' attention, ms.
    matmul: f64,
    attn: f64,
}

/// The roofline of `d` at full efficiency and no overhead (its link and all-reduce latency as given).
fn unit_roofline(d: &Deployment) -> Result<RooflineCost, ScenarioError> {
    let mut unit = d.clone();
    unit.efficiency.mfu = Some(1.0);
    unit.efficiency.bandwidth_utilization = Some(1.0);
    unit.efficiency.step_overhead_ms = Some(0.0);
    unit.efficiency.decode_attention_mfu = None;
    unit.resolve()?
        .profile
        .roofline
        .map(|r| *r)
        .ok_or_else(|| ScenarioError::field("deployment", "resolved without a roofline"))
}

fn parts(p: &EngineProfile, d: &Deployment, shapes: &[GridShape]) -> Result<Vec<Row>, ScenarioError> {
    let r = unit_roofline(d)?;
    Ok(shapes
        .iter()
        .map(|s| {
            let st = s.step();
            Row {
                shape: *s,
                target: calibrated_ms(p, s),
                compute: r.compute_ms(&st),
                memory: r.memory_ms(&st),
                comm: r.comm_ms(&st),
                matmul: r.matmul_flops(&st) / r.flops_per_ms,
                attn: r.attn_flops_per_ctx * st.decode_attended / r.flops_per_ms,
            }
        })
        .collect())
}

/// Which of `o`, `x`, `y`, `z` `solve` may move, and whether the overlap and a separate attention rate may be
/// searched.
#[derive(Debug, Clone, Copy)]
struct Free {
    overhead: bool,
    mfu: bool,
    bandwidth: bool,
    overlap: bool,
    /// `z` (1/decode_attention_mfu) a parameter of its own.
    attention: bool,
}

/// Overhead (ms), `x = 1/mfu`, `y = 1/bandwidth_utilization`, `z = 1/decode_attention_mfu` (`None`: at `x`),
/// and the overlap they were fitted at.
#[derive(Debug, Clone, Copy)]
struct Solution {
    o: f64,
    x: f64,
    y: f64,
    z: Option<f64>,
    ov: f64,
}

/// A row's compute time at `s`'s efficiencies.
fn compute_at(r: &Row, s: &Solution) -> f64 {
    match s.z {
        None => s.x * r.compute,
        Some(z) => s.x * r.matmul + z * r.attn,
    }
}

/// Compute and memory time of a row at `s`'s efficiencies, combined at its overlap.
fn combined(r: &Row, s: &Solution) -> f64 {
    let (c, m) = (compute_at(r, s), s.y * r.memory);
    c.max(m) + (1.0 - s.ov) * c.min(m)
}

/// The largest relative error over `rows` at `s`.
fn worst(rows: &[Row], s: &Solution) -> f64 {
    rows.iter()
        .map(|r| ((s.o + combined(r, s) + r.comm - r.target) / r.target).abs())
        .fold(0.0, f64::max)
}

/// [`solve`] at the start's overlap (and attention rate); if that leaves a shape off by more than [`EXPRESSED`] and
/// the overlap is free, at each overlap of a grid, with attention at the matrix work's rate and, where free, at a
/// rate of its own, keeping the least error. Returns the solution, the held flags and whether the overlap and the
/// attention rate moved from the start.
fn solve_with_overlap(
    rows: &[Row],
    start: super::EfficiencyDefaults,
    free: Free,
    notes: &mut Vec<String>,
) -> (Solution, [bool; 4], bool, bool) {
    let z0 = start.decode_attention_mfu.map(|a| 1.0 / a);
    let tied = Free {
        attention: false,
        ..free
    };
    let mut first_notes = Vec::new();
    let (sol, held) = solve(rows, start, start.overlap, z0, tied, &mut first_notes);
    if !free.overlap || worst(rows, &sol) <= EXPRESSED {
        notes.extend(first_notes);
        return (sol, held, false, false);
    }
    let mut best = (cost(rows, &sol), sol, held, first_notes);
    let try_at = |ov: f64, f: Free, best: &mut (f64, Solution, [bool; 4], Vec<String>)| {
        let mut n = Vec::new();
        let z = if f.attention {
            Some(z0.unwrap_or(1.0 / start.mfu))
        } else {
            z0
        };
        let (s, h) = solve(rows, start, ov, z, f, &mut n);
        let c = cost(rows, &s);
        if c < best.0 {
            *best = (c, s, h, n);
        }
    };
    let kinds: &[Free] = if free.attention { &[tied, free] } else { &[tied] };
    for &f in kinds {
        for i in (0..=20).rev() {
            try_at(f64::from(i) / 20.0, f, &mut best);
        }
    }
    let centre = best.1.ov;
    let f = if best.1.z != z0 { free } else { tied };
    for i in -10..=10 {
        let ov = centre + f64::from(i) * 0.005;
        if (0.0..=1.0).contains(&ov) && i != 0 {
            try_at(ov, f, &mut best);
        }
    }
    let (_, s, h, n) = best;
    notes.extend(n);
    (s, h, s.ov != start.overlap, s.z != z0)
}

/// Largest `1/share` the fit may reach (a share of 0.1 %).
const MAX_INVERSE_SHARE: f64 = 1000.0;

fn cost(rows: &[Row], s: &Solution) -> f64 {
    rows.iter()
        .map(|r| {
            let e = (s.o + combined(r, s) + r.comm - r.target) / r.target;
            e * e
        })
        .sum()
}

/// The least-squares efficiencies at overlap `ov` (see the module docs), and which of `o`, `x`, `y` were held at an
/// edge.
fn solve(
    rows: &[Row],
    start: super::EfficiencyDefaults,
    ov: f64,
    z: Option<f64>,
    free: Free,
    notes: &mut Vec<String>,
) -> (Solution, [bool; 4]) {
    let mut s = Solution {
        o: start.step_overhead_ms,
        x: 1.0 / start.mfu,
        y: 1.0 / start.bandwidth_utilization,
        z,
        ov,
    };
    let mut best = (cost(rows, &s), s);
    let mut bound: Vec<bool> = rows.iter().map(|r| compute_at(r, &s) > s.y * r.memory).collect();
    let mut held = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let (next, at_edge) = least_squares(rows, &bound, s, free);
        s = next;
        held = at_edge;
        let c = cost(rows, &s);
        if c < best.0 {
            best = (c, s);
        }
        let again: Vec<bool> = rows.iter().map(|r| compute_at(r, &s) > s.y * r.memory).collect();
        if again == bound {
            break;
        }
        bound = again;
    }
    let mut at_edge = [false; 4];
    for (i, note) in held {
        at_edge[i] = true;
        notes.push(note);
    }
    (best.1, at_edge)
}

/// One linear least-squares round with each row's bound fixed (`true`: compute). A free parameter that lands out
/// of range is held at the edge and the rest refitted; returns the solution and, per held parameter, its index
/// and a note.
fn least_squares(rows: &[Row], compute_bound: &[bool], s: Solution, free: Free) -> (Solution, Vec<(usize, String)>) {
    // With `z` none, attention goes with the matrix work at `x` (the row's whole compute time) and `z` is no
    // parameter; with it, a given `z` stays unless attention is free.
    let separate = s.z.is_some();
    let mut free = [free.overhead, free.mfu, free.bandwidth, free.attention && separate];
    let mut fixed = [s.o, s.x, s.y, s.z.unwrap_or(0.0)];
    let mut notes = Vec::new();
    loop {
        let idx: Vec<usize> = (0..4).filter(|&i| free[i]).collect();
        // Each row: Σ_j a_j·θ_j = target − Σ fixed parts, scaled by 1/target.
        let mut ata = vec![vec![0.0; idx.len()]; idx.len()];
        let mut atb = vec![0.0; idx.len()];
        for (r, &cb) in rows.iter().zip(compute_bound) {
            // The bound's side whole, the other's share (1 − overlap) that does not hide under it.
            let rest = 1.0 - s.ov;
            let (mm, att) = if separate { (r.matmul, r.attn) } else { (r.compute, 0.0) };
            let coef = if cb {
                [1.0, mm, rest * r.memory, att]
            } else {
                [1.0, rest * mm, r.memory, rest * att]
            };
            let fixed_part: f64 = (0..4).filter(|&i| !free[i]).map(|i| coef[i] * fixed[i]).sum();
            let w = 1.0 / r.target;
            let b = (r.target - r.comm - fixed_part) * w;
            for (a, &i) in idx.iter().enumerate() {
                atb[a] += coef[i] * w * b;
                for (c, &j) in idx.iter().enumerate() {
                    ata[a][c] += coef[i] * w * coef[j] * w;
                }
            }
        }
        let theta = solve_linear(ata, atb).unwrap_or_else(|| idx.iter().map(|&i| fixed[i]).collect());
        let mut out = fixed;
        for (a, &i) in idx.iter().enumerate() {
            out[i] = theta[a];
        }
        // The first free parameter out of range is held at its edge, and the rest refitted.
        let edge = idx.iter().find_map(|&i| {
            let (lo, hi) = if i == 0 { (0.0, 1e6) } else { (1.0, MAX_INVERSE_SHARE) };
            let v = out[i];
            (!(v.is_finite() && v >= lo && v <= hi)).then(|| (i, if v.is_finite() && v > hi { hi } else { lo }, v))
        });
        match edge {
            Some((i, at, v)) => {
                free[i] = false;
                fixed[i] = at;
                notes.push((i, match i {
                    0 => format!("the data ask for a step overhead of {v:.3} ms: held at {at} ms"),
                    1 => format!(
                        "the data ask for mfu {:.3}: held at {:.3} (the calibrated server computes faster than this GPU's \
                         peak allows: check the deployment's GPU and weight precision)",
                        1.0 / v,
                        1.0 / at
                    ),
                    2 => format!(
                        "the data ask for bandwidth_utilization {:.3}: held at {:.3} (the calibrated server reads KV \
                         faster than this GPU's bandwidth allows: check the deployment's GPU, model and kv_dtype)",
                        1.0 / v,
                        1.0 / at
                    ),
                    _ => format!(
                        "the data ask for decode_attention_mfu {:.3}: held at {:.3} (the calibrated server attends faster \
                         than this GPU's peak allows: check the deployment's GPU and model)",
                        1.0 / v,
                        1.0 / at
                    ),
                }));
            }
            None => {
                return (
                    Solution {
                        o: out[0],
                        x: out[1],
                        y: out[2],
                        z: separate.then_some(out[3]),
                        ov: s.ov,
                    },
                    notes,
                );
            }
        }
    }
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve_linear(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (offset, row) in rest.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (v, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *v -= f * p;
            }
            b[col + 1 + offset] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[i][k] * x[k]).sum();
        x[i] = (b[i] - s) / a[i][i];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Round to 4 significant digits (what `deployment.json` holds).
fn sig4(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(3 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// Every shape priced by the resolved deployment's roofline against the calibrated profile.
fn check(p: &EngineProfile, d: &Deployment, shapes: &[GridShape]) -> Result<Vec<ShapeFit>, ScenarioError> {
    let resolved = d.resolve()?;
    let r = resolved
        .profile
        .roofline
        .ok_or_else(|| ScenarioError::field("deployment", "resolved without a roofline"))?;
    Ok(shapes
        .iter()
        .map(|s| {
            let calibrated_ms = calibrated_ms(p, s);
            let roofline_ms = r.step_ms(&s.step());
            ShapeFit {
                shape: *s,
                calibrated_ms,
                roofline_ms,
                error: roofline_ms / calibrated_ms - 1.0,
            }
        })
        .collect())
}

/// Each factor with its value and where it comes from.
fn factors(
    given: &Deployment,
    e: &Efficiency,
    free: Free,
    held: [bool; 4],
    tp: u32,
    (overlap, overlap_fitted): (f64, bool),
    attention_fitted: bool,
) -> BTreeMap<String, Factor> {
    let kept = |v: Option<f64>, what: &str| Factor {
        value: v.unwrap_or(0.0),
        identified: false,
        why: what.to_string(),
    };
    let default_or_given = |g: Option<f64>| {
        if g.is_some() {
            "the deployment's own value"
        } else {
            "the default"
        }
    };
    let mut out = BTreeMap::new();
    let fitted = |v: Option<f64>, from: &str, i: usize| Factor {
        value: v.unwrap_or(0.0),
        identified: true,
        why: if held[i] {
            format!("fitted: {from}; held at the edge of its range (see the notes)")
        } else {
            format!("fitted: {from}")
        },
    };
    let g = &given.efficiency;
    out.insert(
        "step_overhead_ms".to_string(),
        if free.overhead {
            fitted(
                e.step_overhead_ms,
                "the fixed cost of a batch-1 step less the weights' read",
                0,
            )
        } else {
            kept(
                e.step_overhead_ms,
                &format!(
                    "{}: the calibration did not identify step_fixed_ms",
                    default_or_given(g.step_overhead_ms)
                ),
            )
        },
    );
    out.insert(
        "bandwidth_utilization".to_string(),
        if free.bandwidth {
            fitted(
                e.bandwidth_utilization,
                "the decode step's growth with context (KV read per token)",
                2,
            )
        } else {
            kept(
                e.bandwidth_utilization,
                &format!(
                    "{}: the calibration did not identify per_ctx_token_ms (the decode slope in context)",
                    default_or_given(g.bandwidth_utilization)
                ),
            )
        },
    );
    out.insert(
        "mfu".to_string(),
        if free.mfu {
            fitted(e.mfu, "prefill throughput", 1)
        } else {
            kept(
                e.mfu,
                &format!(
                    "{}: the calibration did not identify prefill_tokens_per_ms, or no prefill fits the step budget",
                    default_or_given(g.mfu)
                ),
            )
        },
    );
    let comm_why = |g: Option<f64>| {
        if tp == 1 {
            format!("{}: at tp 1 there are no all-reduces to measure", default_or_given(g))
        } else {
            format!(
                "{}: one TP degree cannot tell it from the step overhead and the compute time",
                default_or_given(g)
            )
        }
    };
    out.insert(
        "overlap".to_string(),
        if !free.overlap {
            kept(
                Some(overlap),
                &format!(
                    "{}: the calibration did not identify all of step_fixed_ms, per_ctx_token_ms and \
                     prefill_tokens_per_ms (or no prefill fits the step budget), so compute and memory time cannot \
                     be told apart",
                    default_or_given(g.overlap)
                ),
            )
        } else if overlap_fitted {
            Factor {
                value: e.overlap.unwrap_or(overlap),
                identified: true,
                why: "fitted: compute and memory time add up in the calibrated steps (the decode step grows with \
                      the batch beside the weights' read) more than max(compute, memory) allows"
                    .to_string(),
            }
        } else {
            Factor {
                value: overlap,
                identified: true,
                why: format!(
                    "{}: with it the roofline expresses every shape within {} %, so nothing asks for another",
                    default_or_given(g.overlap),
                    EXPRESSED * 100.0
                ),
            }
        },
    );
    out.insert(
        "decode_attention_mfu".to_string(),
        if attention_fitted {
            fitted(
                e.decode_attention_mfu,
                "the decode step's growth with context beyond the KV read, beside the prefill's rate (the decoders' \
                 attention at a rate of its own)",
                3,
            )
        } else {
            Factor {
                value: e.decode_attention_mfu.or(e.mfu).unwrap_or(0.0),
                identified: false,
                why: if g.decode_attention_mfu.is_some() {
                    "the deployment's own value".to_string()
                } else {
                    "the default: attention at the matrix work's mfu (fitted on its own only where the roofline with \
                     it misses a shape by more than 2 %)"
                        .to_string()
                },
            }
        },
    );
    out.insert(
        "link_utilization".to_string(),
        kept(e.link_utilization, &comm_why(g.link_utilization)),
    );
    out.insert(
        "allreduce_latency_us".to_string(),
        kept(e.allreduce_latency_us, &comm_why(g.allreduce_latency_us)),
    );
    out
}
