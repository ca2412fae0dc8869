//! Reading back what a run wrote, for the end-to-end tests (included with `#[path = "common/files.rs"] mod files;`).
// Each test file reads the part it needs.
#![allow(dead_code)]

use std::path::Path;

use loadshape::replay::records::read_records;
use shared::record::RequestRecord;

/// Every record of a JSONL file, which must have no malformed line.
pub fn records(path: &Path) -> Vec<RequestRecord> {
    let (recs, bad) = read_records(path).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty(), "malformed lines: {bad:?}");
    recs
}

/// A JSON file (a summary, a sidecar), parsed.
pub fn json_file(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
