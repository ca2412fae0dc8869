//! Compute-only timing of the seed model on `examples/seed-100k.json` (the trace is generated inside, as the seed
//! does). Run with `cargo bench -p loadshape-shared --bench seed_model`; `scripts/bench_seed.sh` runs it beside the
//! Python seed. Prints the median of 21 runs.

use shared::scenario::Scenario;
use shared::seed_model::evaluate;

const SCENARIO: &str = include_str!("../../examples/seed-100k.json");

#[allow(clippy::disallowed_methods)] // a benchmark reads the clock; the library never does
fn main() {
    let Ok(Scenario::Seed(s)) = Scenario::from_json(SCENARIO) else {
        eprintln!("examples/seed-100k.json is not a seed scenario");
        std::process::exit(1);
    };
    let mut times = Vec::new();
    let mut summary = None;
    for _ in 0..21 {
        let t = std::time::Instant::now();
        summary = Some(std::hint::black_box(evaluate(std::hint::black_box(&s))));
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    if let Some(Ok(summary)) = summary {
        eprintln!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    println!(
        "seed_model evaluate, 100k requests: median {:.3} ms (min {:.3} ms, 21 runs)",
        times[10] * 1e3,
        times[0] * 1e3
    );
}
