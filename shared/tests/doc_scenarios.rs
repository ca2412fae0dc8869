//! Every ```` ```json scenario ```` block of docs/simulator.md parses, validates and simulates, the way
//! `loadshape simulate FILE` loads and runs a file (`Scenario::from_json`, then the seed model's `evaluate` or the
//! engine's `simulate_with`).

use shared::engine::{self, SimOptions};
use shared::scenario::Scenario;
use shared::seed_model;

const DOC: &str = include_str!("../../docs/simulator.md");

/// The opening fence line of a block the test runs.
const TAG: &str = "```json scenario";

/// Each tagged block: the 1-based line number of its opening fence and its text.
fn scenario_blocks(doc: &str) -> Result<Vec<(usize, String)>, String> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        match &mut open {
            None if line.trim_end() == TAG => open = Some((n, String::new())),
            None => {}
            Some((start, text)) => {
                if line.trim_end() == "```" {
                    blocks.push((*start, std::mem::take(text)));
                    open = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    match open {
        Some((start, _)) => Err(format!(
            "docs/simulator.md line {start}: scenario block is never closed"
        )),
        None => Ok(blocks),
    }
}

/// Load and run one block as `loadshape simulate` does; the error says what failed.
fn run(text: &str) -> Result<String, String> {
    let scenario = Scenario::from_json(text).map_err(|e| format!("does not load: {e}"))?;
    match scenario {
        Scenario::Seed(s) => {
            let summary = seed_model::evaluate(&s).map_err(|e| format!("seed model fails: {e}"))?;
            if summary.total_requests == 0 {
                return Err("seed model ran no request".to_string());
            }
            Ok(format!("seed, {} requests", summary.total_requests))
        }
        Scenario::Engine(s) => {
            let opts = SimOptions {
                record_itl_quantiles: false,
                keep_records: false,
            };
            let report = engine::simulate_with(&s, opts).map_err(|e| format!("engine model fails: {e}"))?;
            if report.summary.completed + report.summary.failed == 0 {
                return Err("engine model ran no request".to_string());
            }
            Ok(format!("engine, {} completed", report.summary.completed))
        }
    }
}

#[test]
fn every_scenario_block_of_the_simulator_doc_loads_and_simulates() {
    let blocks = scenario_blocks(DOC).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        blocks.len() >= 2,
        "docs/simulator.md has {} ```json scenario blocks; expected at least 2",
        blocks.len()
    );
    let mut failures = Vec::new();
    for (line, text) in &blocks {
        match run(text) {
            Ok(what) => eprintln!("docs/simulator.md line {line}: {what}"),
            Err(e) => failures.push(format!("docs/simulator.md line {line}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_block_finder_sees_tagged_blocks_only_and_names_their_lines() {
    let doc = "text\n```json\n{\"not\": 1}\n```\n```json scenario\n{\"a\": 1}\n```\n\n```json scenario\n{}\n```\n";
    let blocks = scenario_blocks(doc).expect("closed blocks");
    assert_eq!(blocks, vec![(5, "{\"a\": 1}\n".to_string()), (9, "{}\n".to_string())]);
    assert!(scenario_blocks("```json scenario\n{}\n").is_err());
    // A block that does not load is reported, not skipped.
    assert!(run("{\"model\": \"engine\"}").is_err());
}
