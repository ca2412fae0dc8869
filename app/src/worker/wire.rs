//! The messages between the page and its compute worker ([`crate::worker::offload`], [`crate::worker`]): derived serde in
//! [`postcard`]'s binary form, sent as a transferred `Uint8Array`.
//!
//! Exact by construction: postcard writes every `f64` as its 8 bytes, so a result computed in the worker is bit
//! for bit what the main thread (and the CLI) computes, and the scenario arrives as the very `serde_json::Value` the
//! page validated (integers stay integers, `u64` seeds above 2^53 stay exact); the worker reads it with
//! `Scenario::from_value`, as the CLI reads a file. Binary rather than JSON: a result carries CDF points (at most 402
//! per chart) and the engine's timeline (up to 2,048 rows), and as JSON the 10k-session result is 2.6 times the bytes
//! and took 10 to 20 times as long to write and read; exact JSON floats would also need serde_json's `float_roundtrip`,
//! 20 KB of the page's wasm (docs/page.md, "Worker messages").

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::compute::{Outcome, SweepPoint};

/// What the worker is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Job {
    /// Everything the explorer shows for a scenario ([`crate::model::compute::compute`]).
    Compute(#[serde(with = "json_tree")] Value),
    /// One point of the goodput-vs-load sweep ([`crate::model::compute::sweep_point`]).
    SweepPoint(#[serde(with = "json_tree")] Value),
    /// What a scenario's simulation shows over a live run's window ([`crate::model::compute::compute_window`]): the
    /// scenario, the window's end (s), and whether requests running at its end are cut records (the live run has
    /// ended) rather than not yet recorded (it is still going).
    ComputeWindow(#[serde(with = "json_tree")] Value, f64, bool),
    /// The seed band of an engine scenario's CDFs ([`crate::explorer::seed_band::seed_band`]).
    SeedBand(#[serde(with = "json_tree")] Value),
    /// A job whose code loads on demand (`crate::on_demand_job`, a module of its own, in the worker as on the
    /// main thread): which one ([`OnDemand`]), the scenario and its numbers. Its answer comes back as
    /// [`Done::Bytes`], which the card that asked decodes, so neither its code nor its result's type is in the
    /// page's first module.
    OnDemand(OnDemand, #[serde(with = "json_tree")] Value, Vec<f64>),
}

/// The jobs whose code loads on demand ([`Job::OnDemand`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnDemand {
    /// The simulated capacity search ([`crate::capacity::view::capacity_view`]); no numbers.
    Capacity,
    /// The live numbers table's simulated side ([`crate::live::numbers::predicted`]): the scenario over its seeds,
    /// scored over the live run's window (numbers: its end, s; none: the whole run).
    Predict,
    /// A deployment's GPUs at the scenario's load ([`crate::capacity::view::gpus_view`]); no numbers.
    Gpus,
    /// The host tier that keeps a think-time band's prefixes cached ([`crate::model::retention::search`]): the
    /// think time (s) and the cached share to reach.
    HostTier,
}

/// A JSON value in a form postcard can read back (it cannot read a self-describing `serde_json::Value`): the
/// same tree, each number as the `u64`, `i64` or `f64` serde_json holds it in.
#[derive(Serialize, Deserialize)]
enum Json {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl From<&Value> for Json {
    fn from(v: &Value) -> Json {
        match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Json::U64(u),
                (None, Some(i)) => Json::I64(i),
                // serde_json numbers are finite, so `as_f64` is `Some` here.
                (None, None) => Json::F64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Json::Str(s.clone()),
            Value::Array(a) => Json::Array(a.iter().map(Json::from).collect()),
            Value::Object(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), Json::from(v))).collect()),
        }
    }
}

impl TryFrom<Json> for Value {
    type Error = String;

    fn try_from(j: Json) -> Result<Value, String> {
        Ok(match j {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(b),
            Json::U64(u) => Value::from(u),
            Json::I64(i) => Value::from(i),
            Json::F64(x) => Value::Number(serde_json::Number::from_f64(x).ok_or(format!("non-finite number {x}"))?),
            Json::Str(s) => Value::String(s),
            Json::Array(a) => Value::Array(a.into_iter().map(Value::try_from).collect::<Result<_, _>>()?),
            Json::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| Ok((k, Value::try_from(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }
}

/// Serde `with` for a `Value` field: written as [`Json`].
mod json_tree {
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};
    use serde_json::Value;

    use crate::worker::wire::Json;

    pub fn serialize<S: Serializer>(v: &Value, s: S) -> Result<S::Ok, S::Error> {
        Json::from(v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        Value::try_from(Json::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// What the worker answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Done {
    Outcome(Result<Outcome, String>),
    Point(Option<SweepPoint>),
    Band(Result<crate::explorer::seed_band::SeedBand, String>),
    /// A [`Job::OnDemand`]'s answer, postcard bytes of its own type (or why there is none).
    Bytes(Result<Vec<u8>, String>),
}

impl Job {
    /// Run the job here (in the worker, or on the main thread when there is no worker): a [`Job::OnDemand`] loads
    /// its module first, every other job runs at once.
    pub async fn run_async(self) -> Done {
        match self {
            Job::OnDemand(kind, v, numbers) => Done::Bytes(crate::on_demand_job(kind, v, numbers).await),
            job if job.is_seed() => crate::seed_job(job).await,
            job => job.run(),
        }
    }

    /// Whether the job is the seed model's, whose code loads on demand (`crate::seed_job`, [`crate::model::seed`]).
    pub fn is_seed(&self) -> bool {
        match self {
            Job::Compute(v) | Job::SweepPoint(v) | Job::ComputeWindow(v, ..) => {
                v.get("model").and_then(Value::as_str) == Some("seed")
            }
            Job::SeedBand(_) | Job::OnDemand(..) => false,
        }
    }

    /// Run a job that needs no module loaded on demand ([`Job::run_async`] runs every job; a seed model job here
    /// answers [`crate::model::compute::SEED_ON_DEMAND`]).
    pub fn run(&self) -> Done {
        use shared::scenario::Scenario;
        match self {
            Job::OnDemand(..) => Done::Bytes(Err("a job loaded on demand runs through run_async".to_string())),
            Job::Compute(v) => Done::Outcome(
                Scenario::from_value(v.clone())
                    .map_err(|e| e.to_string())
                    .and_then(|sc| crate::model::compute::compute(&sc)),
            ),
            Job::SweepPoint(v) => Done::Point(
                Scenario::from_value(v.clone())
                    .ok()
                    .and_then(|sc| crate::model::compute::sweep_point(&sc)),
            ),
            Job::ComputeWindow(v, end_s, cut) => {
                let in_flight = if *cut {
                    shared::window::InFlight::Cut
                } else {
                    shared::window::InFlight::Drop
                };
                Done::Outcome(
                    Scenario::from_value(v.clone())
                        .map_err(|e| e.to_string())
                        .and_then(|sc| crate::model::compute::compute_window(&sc, *end_s, in_flight)),
                )
            }
            Job::SeedBand(v) => Done::Band(
                Scenario::from_value(v.clone())
                    .map_err(|e| e.to_string())
                    .and_then(|sc| crate::explorer::seed_band::seed_band(&sc)),
            ),
        }
    }

    /// The job as failed (the worker crashed while running it).
    pub fn failed(&self, why: &str) -> Done {
        match self {
            Job::Compute(_) | Job::ComputeWindow(..) => Done::Outcome(Err(why.to_string())),
            Job::SweepPoint(_) => Done::Point(None),
            Job::SeedBand(_) => Done::Band(Err(why.to_string())),
            Job::OnDemand(..) => Done::Bytes(Err(why.to_string())),
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

/// A request for the worker.
#[derive(Serialize, Deserialize)]
struct Request<J> {
    id: u32,
    job: J,
}

/// A reply: the job id, how long the computation took (ms), the worker's wasm memory after it (bytes) and its
/// result.
#[derive(Serialize, Deserialize)]
struct Reply<D> {
    id: u32,
    ms: f64,
    memory_bytes: f64,
    done: D,
}

/// Postcard bytes of a value (a [`Done::Bytes`] answer is written with this, and read with [`from_bytes`]).
pub fn to_bytes(v: &impl Serialize) -> Vec<u8> {
    // Plain data of numbers and strings into a growing buffer: serializing cannot fail.
    postcard::to_allocvec(v).unwrap_or_default()
}

/// A value read back from [`to_bytes`]'s bytes; trailing bytes are an error.
pub fn from_bytes<'a, T: Deserialize<'a>>(buf: &'a [u8]) -> Result<T, WireError> {
    match postcard::take_from_bytes(buf) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(WireError(format!("{} trailing bytes", rest.len()))),
        Err(e) => Err(WireError(format!("{e} ({} bytes)", buf.len()))),
    }
}

/// A request for the worker.
pub fn encode_job(id: u32, job: &Job) -> Vec<u8> {
    to_bytes(&Request { id, job })
}

/// A request read back: (job id, job).
pub fn decode_job(buf: &[u8]) -> Result<(u32, Job), WireError> {
    let r: Request<Job> = from_bytes(buf)?;
    Ok((r.id, r.job))
}

/// A reply: the job id, how long the computation took (ms), the worker's wasm memory after it (bytes) and its
/// result.
pub fn encode_done(id: u32, ms: f64, memory_bytes: f64, done: &Done) -> Vec<u8> {
    to_bytes(&Reply {
        id,
        ms,
        memory_bytes,
        done,
    })
}

/// A reply read back: (job id, compute ms, wasm memory bytes, result).
pub fn decode_done(buf: &[u8]) -> Result<(u32, f64, f64, Done), WireError> {
    let r: Reply<Done> = from_bytes(buf)?;
    Ok((r.id, r.ms, r.memory_bytes, r.done))
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::model::compute::{self, Outcome};

    /// Every float of an outcome, by its bits, in order (so `-0.0` and `0.0` differ, unlike `==`).
    fn bits(o: &Outcome) -> Vec<u64> {
        let mut v: Vec<f64> = o.metrics.iter().map(|m| m.1).collect();
        v.extend(o.ttft_cdf.iter().chain(&o.tpot_cdf).flat_map(|p| [p.0, p.1]));
        for t in &o.timeline {
            v.extend([t.t_s, t.running, t.queued]);
            v.extend(t.kv_use.iter().chain(&t.cache_hit));
        }
        v.extend([o.slo_ttft_ms, o.slo_tpot_ms]);
        v.extend(o.sweep_current);
        v.into_iter().map(f64::to_bits).collect()
    }

    #[test]
    fn a_scenario_value_round_trips_exactly() {
        let v = json!({"seed": u64::MAX, "neg": -3, "x": 0.1 + 0.2, "tiny": 5e-324, "big": 1.7976931348623157e308,
            "third": 1.0 / 3.0, "s": "héllo \"q\" \u{1F600}", "a": [null, true, false, [], {}],
            "o": {"k": {"k": [1, 2.5, -0.0]}}});
        for job in [Job::Compute(v.clone()), Job::SweepPoint(v.clone())] {
            let bytes = encode_job(7, &job);
            assert_eq!(decode_job(&bytes), Ok((7, job)));
        }
        let (_, Job::Compute(back)) = decode_job(&encode_job(1, &Job::Compute(v.clone()))).unwrap() else {
            panic!("compute job")
        };
        for k in ["x", "tiny", "big", "third"] {
            assert_eq!(
                back[k].as_f64().map(f64::to_bits),
                v[k].as_f64().map(f64::to_bits),
                "{k}"
            );
        }
        assert_eq!(
            back["o"]["k"]["k"][2].as_f64().map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        assert_eq!(back["seed"].as_u64(), Some(u64::MAX));
        assert_eq!(back["neg"].as_i64(), Some(-3));
    }

    #[test]
    fn a_seed_model_job_runs_in_its_own_module() {
        let seed = shared::presets::default_scenario().to_value();
        let engine = compute::default_scenario();
        for job in [
            Job::Compute(seed.clone()),
            Job::SweepPoint(seed.clone()),
            Job::ComputeWindow(seed.clone(), 10.0, true),
        ] {
            assert!(job.is_seed(), "{job:?}");
        }
        assert!(!Job::Compute(engine.clone()).is_seed());
        assert!(
            !Job::SeedBand(seed.clone()).is_seed(),
            "the seed band is an engine scenario's"
        );
        // The first module's `run` has no seed model code: it says where the job runs.
        let Done::Outcome(Err(why)) = Job::Compute(seed.clone()).run() else {
            panic!("no seed outcome from the first module")
        };
        assert_eq!(why, compute::SEED_ON_DEMAND);
        // Its module computes it, and runs any other job as `run` does.
        let Done::Outcome(Ok(o)) = crate::model::seed::run(&Job::Compute(seed.clone())) else {
            panic!("the seed module computes it")
        };
        assert_eq!(o.get("ttft_p50_ms"), Some(3915.16));
        let Done::Outcome(Ok(w)) = crate::model::seed::run(&Job::ComputeWindow(seed.clone(), 10.0, true)) else {
            panic!("a live window's figures")
        };
        assert!(
            w.describe
                .ends_with("whole run (the seed model has no per-request times)"),
            "{}",
            w.describe
        );
        let Done::Point(Some(p)) = crate::model::seed::run(&Job::SweepPoint(seed)) else {
            panic!("a sweep point")
        };
        assert_eq!(p.x, 8.5);
        assert_eq!(
            crate::model::seed::run(&Job::Compute(engine.clone())),
            Job::Compute(engine).run()
        );
    }

    #[test]
    fn an_outcome_round_trips_bit_for_bit() {
        for sc in [
            shared::presets::default_scenario(),
            compute::default_sessions_scenario().unwrap(),
        ] {
            let done = crate::model::seed::run(&Job::Compute(sc.to_value()));
            let Done::Outcome(Ok(o)) = &done else {
                panic!("computes")
            };
            assert!(!o.metrics.is_empty());
            let bytes = encode_done(3, 12.5, 65536.0 * 300.0, &done);
            let back = decode_done(&bytes).expect("decodes");
            assert_eq!(back, (3, 12.5, 65536.0 * 300.0, done.clone()));
            let Done::Outcome(Ok(b)) = &back.3 else {
                panic!("an outcome")
            };
            assert_eq!(bits(b), bits(o));
        }
        for done in [
            Done::Outcome(Err("workload.num_requests must be > 0 (got 0)".into())),
            Done::Point(None),
            Done::Point(Some(SweepPoint {
                x: 8.5,
                goodput_rps: 0.1 + 0.2,
                throughput_rps: f64::MIN_POSITIVE,
            })),
            Done::Band(Err("the seed model has no seed band".into())),
            Done::Band(Ok(crate::explorer::seed_band::SeedBand {
                seeds: vec![42, 43],
                ttft: vec![(0.01, 0.1 + 0.2, 1e300), (0.99, f64::MIN_POSITIVE, 3.0)],
                tpot: Vec::new(),
                metrics: vec![("ttft_p50_ms".into(), 0.1 + 0.2, 1e300)],
            })),
            Done::Bytes(Ok(to_bytes(&crate::live::numbers::Predicted {
                seeds: vec![7, 8],
                values: vec![vec![Some(0.1 + 0.2), None], vec![Some(f64::MIN_POSITIVE), Some(1e300)]],
                window_s: Some(12.5),
                fleet: None,
            }))),
            Done::Bytes(Err("the seed model is simulated once, without seeds".into())),
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
        // An unknown job kind, an unknown value tag, a non-finite number in a scenario.
        assert!(decode_job(&[1, 9, 0]).is_err());
        assert!(decode_job(&[1, 0, 9]).is_err());
        let mut nan = vec![1, 0, 4];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert!(decode_job(&nan).is_err());
        // A huge length must not allocate or loop.
        assert!(
            decode_done(&[
                1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f
            ])
            .is_err()
        );
        // A NaN (never expected) survives as a NaN, not as another number.
        let (_, ms, _, _) = decode_done(&encode_done(2, f64::NAN, 0.0, &Done::Point(None))).unwrap();
        assert!(ms.is_nan());
    }
}
