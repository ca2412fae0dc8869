//! Ladder solver and statistics timing. Run with `cargo bench -p loadshape-shared --bench ladder_solve`
//! (release profile). Prints the median wall time of `solve` on the seed's production problem and on other
//! targets, and of one `stats` evaluation; each solve's result is printed so a regression in quality shows too.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the library never does

use std::time::{Duration, Instant};

use shared::ladder::{CachedDefinition, Ladder, Priority, Shape, SolveOptions, Weighting, solve, stats};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut last = None;
    let times = (0..runs)
        .map(|_| {
            let t = Instant::now();
            last = Some(std::hint::black_box(f()));
            t.elapsed()
        })
        .collect();
    (median(times), last.expect("runs ≥ 1"))
}

fn main() {
    let cases: Vec<(&str, SolveOptions)> = vec![
        ("prod (seed constraints)", SolveOptions::prod()),
        (
            "prod, prefer margins",
            SolveOptions {
                priority: Priority::Margins,
                ..SolveOptions::prod()
            },
        ),
        (
            "prod, single weighting",
            SolveOptions {
                weighting: Weighting::Single,
                ..SolveOptions::prod()
            },
        ),
        (
            "prod, cached by requests 0.95",
            SolveOptions {
                cached_definition: CachedDefinition::Requests,
                cached_share: 0.95,
                ..SolveOptions::prod()
            },
        ),
        (
            "15k/40k, 90 %",
            SolveOptions {
                median_tokens: 15_000,
                p90_tokens: 40_000,
                cached_share: 0.9,
                ..SolveOptions::prod()
            },
        ),
        (
            "50k/90k",
            SolveOptions {
                median_tokens: 50_000,
                p90_tokens: 90_000,
                ..SolveOptions::prod()
            },
        ),
        (
            "16 slots, base step 100",
            SolveOptions {
                slots: 16,
                base_step_tokens: 100,
                min_base_tokens: 1_000,
                ..SolveOptions::prod()
            },
        ),
    ];
    println!("{:<32} {:>10}  result", "solve", "median");
    for (name, o) in &cases {
        let (t, sol) = time(11, || solve(o).expect("solves"));
        println!(
            "{name:<32} {:>8.1}ms  {} → median {} ({:+.3} %), p90 {} ({:+.3} %), cached {:.2} % ({}), margin {:.3} pp",
            t.as_secs_f64() * 1e3,
            sol.ladder,
            sol.stats.median,
            sol.median_error * 100.0,
            sol.stats.p90,
            sol.p90_error * 100.0,
            sol.cached_share * 100.0,
            o.cached_definition,
            sol.min_margin * 100.0
        );
    }
    let ladder = Ladder::prod();
    let (t, _) = time(2001, || {
        stats(&ladder, &Shape::PROD, Weighting::Respawn).expect("stats")
    });
    println!("{:<32} {:>8.2}µs", "stats(LADDER_PROD)", t.as_secs_f64() * 1e6);
}
