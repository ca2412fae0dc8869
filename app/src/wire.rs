//! The bytes between the page and its compute worker ([`crate::offload`], [`crate::worker`]).
//!
//! A small binary form, not JSON: every `f64` travels as its exact bits, so a result computed in the worker is
//! bit for bit what the main thread would have computed (serde_json's default float parser may be off by one
//! unit in the last place for 17-digit numbers), and a scenario arrives as the very `serde_json::Value` the page
//! validated (integers stay integers, `u64` seeds above 2^53 stay exact).
//!
//! Requests: `[kind u8][job u32][scenario Value]`. Replies: `[kind u8][job u32][compute ms f64][wasm memory bytes
//! f64][payload]`.
//! Integers are little-endian; strings and lists carry a `u32` length first.

use serde_json::{Map, Number, Value};

use crate::compute::{Callout, Outcome, Severity, SweepPoint, TimelineRow};

/// What the worker is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Job {
    /// Everything the explorer shows for a scenario ([`crate::compute::compute`]).
    Compute(Value),
    /// One point of the goodput-vs-load sweep ([`crate::compute::sweep_point`]).
    SweepPoint(Value),
}

/// What the worker answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Outcome(Result<Outcome, String>),
    Point(Option<SweepPoint>),
}

impl Job {
    /// Run the job here (in the worker, or on the main thread when there is no worker).
    pub fn run(&self) -> Done {
        use shared::scenario::Scenario;
        match self {
            Job::Compute(v) => Done::Outcome(
                Scenario::from_value(v.clone())
                    .map_err(|e| e.to_string())
                    .and_then(|sc| crate::compute::compute(&sc)),
            ),
            Job::SweepPoint(v) => Done::Point(
                Scenario::from_value(v.clone())
                    .ok()
                    .and_then(|sc| crate::compute::sweep_point(&sc)),
            ),
        }
    }

    /// The job as failed (the worker crashed while running it).
    pub fn failed(&self, why: &str) -> Done {
        match self {
            Job::Compute(_) => Done::Outcome(Err(why.to_string())),
            Job::SweepPoint(_) => Done::Point(None),
        }
    }
}

/// A malformed message (never expected between two copies of the same build; reported, never a panic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad worker message: {}", self.0)
    }
}

type R<T> = Result<T, WireError>;

/// Nesting limit for values (scenarios are a few levels deep).
const MAX_DEPTH: usize = 64;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }
    fn opt_f64(&mut self, v: Option<f64>) {
        match v {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                self.f64(x);
            }
        }
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn points(&mut self, xs: &[(f64, f64)]) {
        self.len(xs.len());
        self.0.reserve(xs.len() * 16);
        for (x, y) in xs {
            self.f64(*x);
            self.f64(*y);
        }
    }
    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.u8(0),
            Value::Bool(false) => self.u8(1),
            Value::Bool(true) => self.u8(2),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.u8(3);
                    self.u64(u);
                } else if let Some(i) = n.as_i64() {
                    self.u8(4);
                    self.u64(i as u64);
                } else {
                    self.u8(5);
                    self.f64(n.as_f64().unwrap_or(f64::NAN));
                }
            }
            Value::String(s) => {
                self.u8(6);
                self.str(s);
            }
            Value::Array(a) => {
                self.u8(7);
                self.len(a.len());
                for x in a {
                    self.value(x);
                }
            }
            Value::Object(m) => {
                self.u8(8);
                self.len(m.len());
                for (k, x) in m {
                    self.str(k);
                    self.value(x);
                }
            }
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| WireError(format!("{n} bytes wanted at offset {} of {}", self.pos, self.buf.len())))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A length, checked against the bytes left (each element takes at least `min_size` bytes).
    fn len(&mut self, min_size: usize) -> R<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size) > self.buf.len() - self.pos {
            return Err(WireError(format!("length {n} runs past the end")));
        }
        Ok(n)
    }
    fn u64(&mut self) -> R<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn f64(&mut self) -> R<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn opt_f64(&mut self) -> R<Option<f64>> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.f64()?),
        })
    }
    fn str(&mut self) -> R<String> {
        let n = self.len(1)?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|e| WireError(format!("string: {e}")))
    }
    fn points(&mut self) -> R<Vec<(f64, f64)>> {
        let n = self.len(16)?;
        (0..n).map(|_| Ok((self.f64()?, self.f64()?))).collect()
    }
    fn value(&mut self, depth: usize) -> R<Value> {
        if depth > MAX_DEPTH {
            return Err(WireError("value nested too deeply".to_string()));
        }
        Ok(match self.u8()? {
            0 => Value::Null,
            1 => Value::Bool(false),
            2 => Value::Bool(true),
            3 => Value::Number(Number::from(self.u64()?)),
            4 => Value::Number(Number::from(self.u64()? as i64)),
            5 => {
                let x = self.f64()?;
                Value::Number(Number::from_f64(x).ok_or_else(|| WireError(format!("non-finite number {x}")))?)
            }
            6 => Value::String(self.str()?),
            7 => {
                let n = self.len(1)?;
                Value::Array((0..n).map(|_| self.value(depth + 1)).collect::<R<_>>()?)
            }
            8 => {
                let n = self.len(5)?;
                let mut m = Map::new();
                for _ in 0..n {
                    let k = self.str()?;
                    m.insert(k, self.value(depth + 1)?);
                }
                Value::Object(m)
            }
            t => return Err(WireError(format!("unknown value tag {t}"))),
        })
    }
    fn end(&self) -> R<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(WireError(format!("{} trailing bytes", self.buf.len() - self.pos)))
        }
    }
}

const JOB_COMPUTE: u8 = 1;
const JOB_SWEEP_POINT: u8 = 2;
const DONE_OUTCOME: u8 = 1;
const DONE_ERROR: u8 = 2;
const DONE_POINT: u8 = 3;
const DONE_NO_POINT: u8 = 4;

/// A request for the worker.
pub fn encode_job(id: u32, job: &Job) -> Vec<u8> {
    let mut w = Writer::default();
    let (kind, v) = match job {
        Job::Compute(v) => (JOB_COMPUTE, v),
        Job::SweepPoint(v) => (JOB_SWEEP_POINT, v),
    };
    w.u8(kind);
    w.u32(id);
    w.value(v);
    w.0
}

/// A request read back: (job id, job).
pub fn decode_job(buf: &[u8]) -> R<(u32, Job)> {
    let mut r = Reader::new(buf);
    let kind = r.u8()?;
    let id = r.u32()?;
    let v = r.value(0)?;
    r.end()?;
    let job = match kind {
        JOB_COMPUTE => Job::Compute(v),
        JOB_SWEEP_POINT => Job::SweepPoint(v),
        k => return Err(WireError(format!("unknown job kind {k}"))),
    };
    Ok((id, job))
}

/// A reply: the job id, how long the computation took (ms), the worker's wasm memory after it (bytes) and its
/// result.
pub fn encode_done(id: u32, ms: f64, memory_bytes: f64, done: &Done) -> Vec<u8> {
    let mut w = Writer::default();
    let kind = match done {
        Done::Outcome(Ok(_)) => DONE_OUTCOME,
        Done::Outcome(Err(_)) => DONE_ERROR,
        Done::Point(Some(_)) => DONE_POINT,
        Done::Point(None) => DONE_NO_POINT,
    };
    w.u8(kind);
    w.u32(id);
    w.f64(ms);
    w.f64(memory_bytes);
    match done {
        Done::Outcome(Ok(o)) => outcome(&mut w, o),
        Done::Outcome(Err(e)) => w.str(e),
        Done::Point(Some(p)) => {
            w.f64(p.x);
            w.f64(p.goodput_rps);
            w.f64(p.throughput_rps);
        }
        Done::Point(None) => {}
    }
    w.0
}

/// A reply read back: (job id, compute ms, wasm memory bytes, result).
pub fn decode_done(buf: &[u8]) -> R<(u32, f64, f64, Done)> {
    let mut r = Reader::new(buf);
    let kind = r.u8()?;
    let id = r.u32()?;
    let ms = r.f64()?;
    let memory_bytes = r.f64()?;
    let done = match kind {
        DONE_OUTCOME => Done::Outcome(Ok(read_outcome(&mut r)?)),
        DONE_ERROR => Done::Outcome(Err(r.str()?)),
        DONE_POINT => Done::Point(Some(SweepPoint {
            x: r.f64()?,
            goodput_rps: r.f64()?,
            throughput_rps: r.f64()?,
        })),
        DONE_NO_POINT => Done::Point(None),
        k => return Err(WireError(format!("unknown reply kind {k}"))),
    };
    r.end()?;
    Ok((id, ms, memory_bytes, done))
}

fn outcome(w: &mut Writer, o: &Outcome) {
    w.len(o.metrics.len());
    for (k, v) in &o.metrics {
        w.str(k);
        w.f64(*v);
    }
    w.len(o.labels.len());
    for (k, v) in &o.labels {
        w.str(k);
        w.str(v);
    }
    w.u8(u8::from(o.exact));
    w.points(&o.ttft_cdf);
    w.points(&o.tpot_cdf);
    w.len(o.timeline.len());
    for t in &o.timeline {
        w.f64(t.t_s);
        w.f64(t.running);
        w.f64(t.queued);
        w.opt_f64(t.kv_use);
        w.opt_f64(t.cache_hit);
    }
    w.len(o.diagnostics.len());
    for c in &o.diagnostics {
        w.str(&c.id);
        w.u8(match c.severity {
            Severity::Good => 0,
            Severity::Info => 1,
            Severity::Warn => 2,
            Severity::Bad => 3,
        });
        w.str(&c.title);
        w.str(&c.body);
    }
    w.f64(o.slo_ttft_ms);
    w.f64(o.slo_tpot_ms);
    w.str(&o.sweep_label);
    w.opt_f64(o.sweep_current);
    w.str(&o.describe);
}

fn read_outcome(r: &mut Reader) -> R<Outcome> {
    let n = r.len(12)?;
    let metrics = (0..n).map(|_| Ok((r.str()?, r.f64()?))).collect::<R<Vec<_>>>()?;
    let n = r.len(8)?;
    let labels = (0..n).map(|_| Ok((r.str()?, r.str()?))).collect::<R<Vec<_>>>()?;
    let exact = r.u8()? != 0;
    let ttft_cdf = r.points()?;
    let tpot_cdf = r.points()?;
    let n = r.len(26)?;
    let timeline = (0..n)
        .map(|_| {
            Ok(TimelineRow {
                t_s: r.f64()?,
                running: r.f64()?,
                queued: r.f64()?,
                kv_use: r.opt_f64()?,
                cache_hit: r.opt_f64()?,
            })
        })
        .collect::<R<Vec<_>>>()?;
    let n = r.len(13)?;
    let diagnostics = (0..n)
        .map(|_| {
            let id = r.str()?;
            let severity = match r.u8()? {
                0 => Severity::Good,
                1 => Severity::Info,
                2 => Severity::Warn,
                _ => Severity::Bad,
            };
            Ok(Callout {
                id,
                severity,
                title: r.str()?,
                body: r.str()?,
            })
        })
        .collect::<R<Vec<_>>>()?;
    Ok(Outcome {
        metrics,
        labels,
        exact,
        ttft_cdf,
        tpot_cdf,
        timeline,
        diagnostics,
        slo_ttft_ms: r.f64()?,
        slo_tpot_ms: r.f64()?,
        sweep_label: r.str()?,
        sweep_current: r.opt_f64()?,
        describe: r.str()?,
    })
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::compute;

    #[test]
    fn a_scenario_value_round_trips_exactly() {
        let v = json!({"seed": u64::MAX, "neg": -3, "x": 0.1 + 0.2, "tiny": 5e-324, "big": 1.7976931348623157e308,
            "s": "héllo", "a": [null, true, false, [], {}], "o": {"k": {"k": [1, 2.5]}}});
        for job in [Job::Compute(v.clone()), Job::SweepPoint(v.clone())] {
            let bytes = encode_job(7, &job);
            assert_eq!(decode_job(&bytes), Ok((7, job)));
        }
        let (_, Job::Compute(back)) = decode_job(&encode_job(1, &Job::Compute(v.clone()))).unwrap() else {
            panic!("compute job")
        };
        assert_eq!(back["x"].as_f64().map(f64::to_bits), Some((0.1f64 + 0.2).to_bits()));
        assert_eq!(back["seed"].as_u64(), Some(u64::MAX));
    }

    #[test]
    fn an_outcome_round_trips_bit_for_bit() {
        for sc in [
            shared::scenario::Scenario::from_value(compute::default_scenario()).unwrap(),
            compute::default_engine_scenario().unwrap(),
        ] {
            let done = Job::Compute(sc.to_value()).run();
            assert!(matches!(&done, Done::Outcome(Ok(o)) if !o.metrics.is_empty()));
            let bytes = encode_done(3, 12.5, 65536.0 * 300.0, &done);
            assert_eq!(decode_done(&bytes), Ok((3, 12.5, 65536.0 * 300.0, done)));
        }
        for done in [
            Done::Outcome(Err("workload.num_requests must be > 0 (got 0)".into())),
            Done::Point(None),
            Done::Point(Some(SweepPoint {
                x: 8.5,
                goodput_rps: 0.1 + 0.2,
                throughput_rps: f64::MIN_POSITIVE,
            })),
        ] {
            assert_eq!(
                decode_done(&encode_done(9, 0.0, 4294967296.0, &done)),
                Ok((9, 0.0, 4294967296.0, done))
            );
        }
    }

    #[test]
    fn truncated_or_corrupt_messages_are_errors_not_panics() {
        let job = encode_job(1, &Job::Compute(compute::default_scenario()));
        for n in 0..job.len() {
            assert!(decode_job(&job[..n]).is_err(), "prefix of {n} bytes");
        }
        let done = Job::Compute(compute::default_scenario()).run();
        let bytes = encode_done(1, 1.0, 0.0, &done);
        for n in (0..bytes.len()).step_by(7) {
            assert!(decode_done(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_done(&extra).is_err());
        assert!(decode_job(&[9, 0, 0, 0, 0, 0]).is_err());
        // A huge length must not allocate or loop.
        assert!(decode_job(&[1, 0, 0, 0, 0, 7, 255, 255, 255, 255]).is_err());
    }
}
