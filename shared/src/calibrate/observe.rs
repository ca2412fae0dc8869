//! What the records show the stages of [`super::fit`]: every usable request's span on the server, from which the
//! batch and Σcontext around any moment are rebuilt, and from those the decode steps, the lone prefills and the
//! prefills beside decoders the stages fit, with why each record is left out of a stage.

use super::{BesideObs, DecodeObs, PrefillObs, spec};
use crate::record::RequestRecord;

/// A request's span on the server, seconds (submitted, first token, last token), and its prompt and output tokens.
struct Span {
    submit: f64,
    first: f64,
    end: f64,
    prompt: f64,
    generated: f64,
}

impl Span {
    fn of(r: &RequestRecord) -> Option<Span> {
        let ttft = r.ttft_s?;
        // A record with impossible values (a negative TTFT) has no span: it is skipped below.
        r.check().ok()?;
        Some(Span {
            submit: r.t_submit,
            first: r.t_submit + ttft,
            end: r.t_submit + r.wall_s,
            prompt: r.prompt_tokens? as f64,
            generated: r.gen_tokens as f64,
        })
    }

    /// Its context at `t` if it is decoding then (growing linearly from its prompt over its decode interval).
    fn decoding_ctx(&self, t: f64) -> Option<f64> {
        if !(self.first <= t && t < self.end) {
            return None;
        }
        let frac = if self.end > self.first {
            (t - self.first) / (self.end - self.first)
        } else {
            0.0
        };
        Some(self.prompt + self.generated * frac)
    }

    fn prefilling(&self, t: f64) -> bool {
        self.submit <= t && t < self.first
    }

    /// The moment `(q + 0.5) / n` of the way through `[from, to)`.
    fn point(from: f64, to: f64, q: usize, n: usize) -> f64 {
        from + (to - from) * (q as f64 + 0.5) / n as f64
    }
}

/// Every record's span (`None`: unusable), and the spans by submission time with the longest, so that the spans
/// overlapping `[lo, hi)`, among those submitted in `[lo − longest, hi)`, are found by binary search (O(overlap)
/// per request, not O(records)).
struct Spans {
    spans: Vec<Option<Span>>,
    order: Vec<usize>,
    submits: Vec<f64>,
    longest: f64,
}

/// What the requests in `near` do at a moment: how many decode, their Σcontext, whether any prefills.
#[derive(Default)]
struct Load {
    batch: f64,
    ctx: f64,
    prefilling: bool,
}

impl Spans {
    fn new(records: &[RequestRecord]) -> Spans {
        let spans: Vec<Option<Span>> = records.iter().map(Span::of).collect();
        let mut order: Vec<usize> = (0..spans.len()).filter(|&j| spans[j].is_some()).collect();
        crate::order::sort_by_f64_key(&mut order, |&j| spans[j].as_ref().map_or(0.0, |s| s.submit));
        let submits = order
            .iter()
            .filter_map(|&j| spans[j].as_ref().map(|s| s.submit))
            .collect();
        let longest = spans.iter().flatten().map(|s| s.end - s.submit).fold(0.0, f64::max);
        Spans {
            spans,
            order,
            submits,
            longest,
        }
    }

    /// The records whose spans overlap `[lo, hi)`.
    fn overlapping(&self, lo: f64, hi: f64) -> impl Iterator<Item = usize> + '_ {
        let a = self.submits.partition_point(|&t| t < lo - self.longest);
        let b = self.submits.partition_point(|&t| t < hi).max(a);
        self.order[a..b]
            .iter()
            .filter(move |&&j| self.spans[j].as_ref().is_some_and(|o| o.end > lo && o.submit < hi))
            .copied()
    }

    fn load_at(&self, near: &[usize], t: f64) -> Load {
        let mut load = Load::default();
        for o in near.iter().filter_map(|&j| self.spans[j].as_ref()) {
            if let Some(c) = o.decoding_ctx(t) {
                load.batch += 1.0;
                load.ctx += c;
            } else if o.prefilling(t) {
                load.prefilling = true;
            }
        }
        load
    }

    /// Batch, Σcontext and batch·Σcontext over `s`'s decode interval, averaged over 32 points where nobody is
    /// prefilling (the steps its median gap stands for), or over all of them if there is no such moment.
    fn decode_load(&self, s: &Span) -> (f64, f64, f64) {
        let samples = 32;
        let near: Vec<usize> = self.overlapping(s.first, s.end.max(s.first + 1e-9)).collect();
        let (mut nb, mut nc, mut nbc, mut k) = (0.0, 0.0, 0.0, 0.0);
        let (mut ab, mut ac, mut abc) = (0.0, 0.0, 0.0);
        for q in 0..samples {
            let Load {
                batch: b,
                ctx: c,
                prefilling,
            } = self.load_at(&near, Span::point(s.first, s.end, q, samples));
            ab += b;
            ac += c;
            abc += b * c;
            if !prefilling {
                nb += b;
                nc += c;
                nbc += b * c;
                k += 1.0;
            }
        }
        if k > 0.0 {
            (nb / k, nc / k, nbc / k)
        } else {
            let m = samples as f64;
            (ab / m, ac / m, abc / m)
        }
    }
}

/// The stages' observations, and why each record is left out of a stage (`None`: used).
pub(super) struct Observations {
    pub dec: Vec<DecodeObs>,
    pub pre: Vec<PrefillObs>,
    pub beside: Vec<BesideObs>,
    pub unused_decode: Vec<Option<String>>,
    pub unused_prefill: Vec<Option<String>>,
}

/// Every record's observations: its prefill alone on the server, or beside decoders only, and its decode step.
pub(super) fn observe(records: &[RequestRecord]) -> Observations {
    let spans = Spans::new(records);
    let mut o = Observations {
        dec: Vec::new(),
        pre: Vec::new(),
        beside: Vec::new(),
        unused_decode: vec![None; records.len()],
        unused_prefill: vec![None; records.len()],
    };
    for (i, r) in records.iter().enumerate() {
        if let Some(why) = unusable(r) {
            o.unused_decode[i] = Some(why.clone());
            o.unused_prefill[i] = Some(why);
            continue;
        }
        let Some(s) = &spans.spans[i] else { continue };
        o.prefill(i, r, s, &spans);
        match decode_step_ms(r) {
            None => o.unused_decode[i] = Some("fewer than 8 output tokens or no inter-token gaps".into()),
            Some(y) => {
                let (batch, ctx, batch_ctx) = spans.decode_load(s);
                if batch < 1.0 {
                    o.unused_decode[i] = Some("its decode interval is empty".into());
                } else {
                    o.dec.push(DecodeObs {
                        index: i,
                        y,
                        batch,
                        ctx,
                        batch_ctx,
                    });
                }
            }
        }
    }
    o
}

/// Why no stage can use `r`, if so.
fn unusable(r: &RequestRecord) -> Option<String> {
    if let Err(e) = r.check() {
        Some(e)
    } else if !r.ok {
        Some("failed".to_string())
    } else if r.prompt_tokens.is_none() {
        Some("no usage.prompt_tokens (the server did not report usage)".into())
    } else if r.ttft_s.is_none() {
        Some("no first token".into())
    } else {
        None
    }
}

impl Observations {
    /// Request `i`'s prefill: alone on the server from submit to first token (stage 2), or beside requests that
    /// all decode at each of 8 points of it, none prefilling or waiting (stage 3).
    fn prefill(&mut self, i: usize, r: &RequestRecord, s: &Span, spans: &Spans) {
        let alone = spans.overlapping(s.submit, s.first).all(|j| j == i);
        let cached = r.cached_tokens.unwrap_or(0).min(r.prompt_tokens.unwrap_or(0)) as f64;
        let ttft = s.first * 1000.0 - s.submit * 1000.0;
        if alone {
            self.pre.push(PrefillObs {
                index: i,
                ttft,
                new: s.prompt - cached,
                cached,
            });
            return;
        }
        let mut others_prefill = false;
        let (mut sb, mut sc, mut min_b) = (0.0, 0.0, f64::INFINITY);
        let near: Vec<usize> = spans.overlapping(s.submit, s.first).filter(|&j| j != i).collect();
        for q in 0..8 {
            let load = spans.load_at(&near, Span::point(s.submit, s.first, q, 8));
            others_prefill |= load.prefilling;
            sb += load.batch;
            sc += load.ctx;
            min_b = min_b.min(load.batch);
        }
        if !others_prefill && min_b >= 1.0 {
            // The last step boundary the records show before it was sent: another request's end (its last token
            // closed a step) within the last second.
            let last_end = spans
                .overlapping(s.submit - 1.0, s.submit)
                .filter(|&j| j != i)
                .filter_map(|j| spans.spans[j].as_ref().map(|o| o.end))
                .filter(|&e| e <= s.submit)
                .fold(f64::NEG_INFINITY, f64::max);
            self.beside.push(BesideObs {
                index: i,
                ttft,
                new: s.prompt - cached,
                cached,
                b: sb / 8.0,
                c: sc / 8.0,
                since_boundary_ms: last_end.is_finite().then_some((s.submit - last_end) * 1000.0),
            });
        }
        self.unused_prefill[i] = Some("not alone on the server during its prefill".into());
    }
}

/// A request's decode step, ms: its median inter-token gap per token; with speculative decoding, its mean decode
/// step (a step emits one token plus the drafts it accepted, and llama.cpp streams each token as its own frame,
/// the accepted ones right after the step's first: the median gap says nothing of the step) without the longest
/// gap: llama.cpp's draft model prefills the prompt itself in the request's first decode step (a cost the engine
/// does not price, docs/calibration.md), and a step that carried another request's prefill is left out as the
/// median leaves it out. `None` with fewer than 8 output tokens or no inter-token gaps.
fn decode_step_ms(r: &RequestRecord) -> Option<f64> {
    let per_frame = r.gen_tokens as f64 / r.sse_frames.max(1) as f64;
    let spec_steps = spec::decode_steps(r);
    match (&r.itl, r.gen_tokens, r.ttft_s) {
        (_, g, Some(ttft)) if g >= 8 && r.spec.is_some() && spec_steps > 0 && r.wall_s > ttft => {
            let decode_ms = (r.wall_s - ttft) * 1000.0;
            Some(match &r.itl {
                Some(itl) if spec_steps >= 2 && itl.max_ms.is_finite() && itl.max_ms < decode_ms => {
                    (decode_ms - itl.max_ms) / (spec_steps - 1) as f64
                }
                _ => decode_ms / spec_steps as f64,
            })
        }
        (Some(itl), g, _) if g >= 8 && r.spec.is_none() && itl.p50_ms.is_finite() => {
            Some(itl.p50_ms / per_frame.max(1.0))
        }
        _ => None,
    }
}
