//! Load + simulate time of the public Mooncake conversation trace (12,031 requests): read the file, parse it
//! (`TraceWorkload::load_text`) and run it through the engine model as `loadshape simulate` does (records scored
//! and dropped, no counterfactuals). A plain `--release` bench, not a timed test.
//!
//! Run with: `cargo bench -p loadshape-shared --bench trace_load [-- TRACE.jsonl]` (default
//! `../shared/traces/mooncake_conversation_trace.jsonl` beside the repository). Prints the parse and simulate wall
//! time and this process's CPU time for each of 7 runs, then the medians.

use std::time::Instant;
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use shared::engine::{SimOptions, simulate_with};
use shared::workload::{TraceWorkload, Workload};

fn cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[allow(clippy::disallowed_methods)]
fn main() {
    let default = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/traces/mooncake_conversation_trace.jsonl"
    );
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or(default.to_string());
    let mut sc = shared::presets::default_engine_scenario();
    sc.counterfactuals = false;
    let (mut parse, mut total, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..7 {
        let c0 = cpu_s();
        let t0 = Instant::now();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut w = TraceWorkload::inline(Vec::new());
        w.path = Some(path.clone());
        w.load_text(&text).unwrap_or_else(|e| panic!("{e}"));
        let n = w.requests.len();
        let t_parse = t0.elapsed().as_secs_f64();
        sc.workload = Workload::Trace(Box::new(w));
        let report = simulate_with(&sc, SimOptions::SUMMARY).unwrap_or_else(|e| panic!("{e}"));
        let t_all = t0.elapsed().as_secs_f64();
        let c = cpu_s().zip(c0).map_or(f64::NAN, |(a, b)| a - b);
        println!(
            "run {run}: {n} requests ({} completed), load {:.3} s, load + simulate {:.3} s wall, {c:.2} s CPU",
            report.summary.completed, t_parse, t_all
        );
        parse.push(t_parse);
        total.push(t_all);
        cpu.push(c);
    }
    println!(
        "median of 7: load {:.3} s, load + simulate {:.3} s wall, {:.2} s CPU",
        median(parse),
        median(total),
        median(cpu)
    );
}
