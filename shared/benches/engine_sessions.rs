//! Speed of the engine model on the example scenarios (a plain `--release` bench, not a timed test).
//!
//! Run with: `cargo bench -p loadshape-shared --bench engine_sessions [-- [--summary-only] [--no-records] FILE...]`
//! (`--summary-only`: records without their own ITL quantiles, as the page runs it; `--no-records`: no records
//! kept, as `loadshape simulate` runs without `--records`; see `SimOptions`).
//! Default files: examples/engine-sessions-1m.json, engine-sessions-10k.json, engine-10k.json. Prints, per file, the
//! request count and the wall time of `engine::simulate` (three runs, median), single-threaded.

use std::time::Instant;
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use shared::engine::{EngineScenario, SimOptions, simulate_with};

fn load(path: &str) -> EngineScenario {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    if let Some(m) = v.as_object_mut() {
        m.remove("model");
        m.remove("version");
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// This process's user + system CPU time, seconds (Linux `/proc/self/stat`; `None` elsewhere). On a loaded
/// machine CPU time is the fairer single-core figure; wall time is printed too.
fn cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

#[allow(clippy::disallowed_methods)]
fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let flag = |name: &str| std::env::args().any(|a| a == name);
    let opts = SimOptions {
        record_itl_quantiles: !flag("--summary-only") && !flag("--no-records"),
        keep_records: !flag("--no-records"),
    };
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let files = if args.is_empty() {
        vec![
            format!("{root}/examples/engine-sessions-1m.json"),
            format!("{root}/examples/engine-sessions-10k.json"),
            format!("{root}/examples/engine-10k.json"),
        ]
    } else {
        args
    };
    for f in files {
        let sc = load(&f);
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        let mut n = 0;
        for _ in 0..3 {
            let c0 = cpu_s();
            let t0 = Instant::now();
            let r = simulate_with(&sc, opts).unwrap_or_else(|e| panic!("{f}: {e}"));
            times.push(t0.elapsed().as_secs_f64());
            if let (Some(a), Some(b)) = (c0, cpu_s()) {
                cpu.push(b - a);
            }
            n = r.summary.completed + r.summary.failed;
            std::hint::black_box(&r);
        }
        times.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        println!(
            "{f}: {n} requests, simulate wall median {:.3} s (runs {:.3} / {:.3} / {:.3} s), CPU median {:.2} s",
            times[1],
            times[0],
            times[1],
            times[2],
            cpu.get(1).copied().unwrap_or(f64::NAN)
        );
    }
}
