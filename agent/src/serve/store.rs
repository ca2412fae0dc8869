//! The run store: one folder per run under the data dir, so runs survive a closed tab and an agent restart.
//!
//! ```text
//! <data-dir>/runs/<run_id>/run.json        RunInfo (state, target, start/end, record count)
//!                          scenario.json   the scenario as submitted
//!                          records.jsonl   one RequestRecord per line, appended and flushed as each request ends
//!                          summary.json    the final summary (shared::metrics), once the run ended
//! ```
//! A run whose `run.json` still says `running` when the store is opened was cut short by a crash: it is marked
//! `interrupted`, keeping every record it wrote.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use shared::protocol::{RunInfo, RunState};
use shared::record::RequestRecord;

#[derive(Debug, Clone)]
pub struct RunStore {
    dir: PathBuf,
}

/// Everything stored for one run.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub info: RunInfo,
    pub scenario: serde_json::Value,
    pub summary: Option<serde_json::Value>,
    pub records: Vec<RequestRecord>,
}

impl RunStore {
    /// Opens (creating) `<data_dir>/runs` and marks runs left `running` by a dead agent as `interrupted`.
    pub fn open(data_dir: &Path) -> anyhow::Result<RunStore> {
        let dir = data_dir.join("runs");
        fs::create_dir_all(&dir).with_context(|| format!("creating run store {}", dir.display()))?;
        let store = RunStore { dir };
        for mut info in store.list()? {
            if info.state == RunState::Running {
                info.state = RunState::Interrupted;
                info.records = store.count_records(&info.run_id);
                info.error = Some("the agent stopped while this run was in progress".into());
                store.write_info(&info)?;
            }
        }
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of `run_id`, after checking the id cannot escape the store.
    pub fn run_dir(&self, run_id: &str) -> anyhow::Result<PathBuf> {
        let valid = !run_id.is_empty()
            && run_id.len() <= 64
            && run_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            bail!("invalid run id `{run_id}`");
        }
        Ok(self.dir.join(run_id))
    }

    /// Creates a new run's folder with its metadata and scenario; returns the records file, opened for appending.
    pub fn create(&self, info: &RunInfo, scenario: &serde_json::Value) -> anyhow::Result<File> {
        let dir = self.run_dir(&info.run_id)?;
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        write_json(&dir.join("scenario.json"), scenario)?;
        self.write_info(info)?;
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("records.jsonl"))
            .with_context(|| format!("creating records for run {}", info.run_id))
    }

    /// Replaces `run.json` atomically (write a temp file, rename).
    pub fn write_info(&self, info: &RunInfo) -> anyhow::Result<()> {
        write_json(&self.run_dir(&info.run_id)?.join("run.json"), info)
    }

    pub fn write_summary(&self, run_id: &str, summary: &serde_json::Value) -> anyhow::Result<()> {
        write_json(&self.run_dir(run_id)?.join("summary.json"), summary)
    }

    /// Every run's metadata, newest first. Folders that are not runs are skipped with a warning.
    pub fn list(&self) -> anyhow::Result<Vec<RunInfo>> {
        let mut runs = Vec::new();
        for entry in fs::read_dir(&self.dir).with_context(|| format!("reading {}", self.dir.display()))? {
            let path = entry?.path().join("run.json");
            match fs::read(&path)
                .map_err(anyhow::Error::from)
                .and_then(|b| Ok(serde_json::from_slice(&b)?))
            {
                Ok(info) => runs.push(info),
                Err(e) => tracing::warn!("skipping {}: {e}", path.display()),
            }
        }
        runs.sort_by(|a: &RunInfo, b: &RunInfo| b.started_ms.cmp(&a.started_ms).then(b.run_id.cmp(&a.run_id)));
        Ok(runs)
    }

    /// Loads one run. Malformed record lines (e.g. a half-written last line after a crash) are skipped with a
    /// warning naming the line; every complete line is returned.
    pub fn load(&self, run_id: &str) -> anyhow::Result<StoredRun> {
        let dir = self.run_dir(run_id)?;
        if !dir.join("run.json").exists() {
            bail!("no run `{run_id}`");
        }
        let info: RunInfo = read_json(&dir.join("run.json"))?;
        let scenario = read_json(&dir.join("scenario.json")).unwrap_or(serde_json::Value::Null);
        let summary = dir
            .join("summary.json")
            .exists()
            .then(|| read_json(&dir.join("summary.json")))
            .transpose()?;
        let records = read_records(&dir.join("records.jsonl"))?;
        Ok(StoredRun {
            info,
            scenario,
            summary,
            records,
        })
    }

    pub fn delete(&self, run_id: &str) -> anyhow::Result<()> {
        let dir = self.run_dir(run_id)?;
        if !dir.join("run.json").exists() {
            bail!("no run `{run_id}`");
        }
        fs::remove_dir_all(&dir).with_context(|| format!("deleting {}", dir.display()))
    }

    pub fn records_path(&self, run_id: &str) -> anyhow::Result<PathBuf> {
        Ok(self.run_dir(run_id)?.join("records.jsonl"))
    }

    fn count_records(&self, run_id: &str) -> u64 {
        self.records_path(run_id)
            .ok()
            .and_then(|p| read_records(&p).ok())
            .map_or(0, |r| r.len() as u64)
    }
}

/// Reads a run's records (the replay's reader), logging lines that do not parse (e.g. a half-written last line
/// after a crash); a run that wrote nothing yet has none.
pub fn read_records(path: &Path) -> anyhow::Result<Vec<RequestRecord>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let (records, bad) = crate::replay::records::read_records(path)?;
    for b in bad {
        tracing::warn!("{}:{}: skipping malformed record: {}", path.display(), b.line, b.error);
    }
    Ok(records)
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut f = File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
    serde_json::to_writer_pretty(&mut f, value)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, state: RunState) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            target: "sim".into(),
            state,
            started_ms: 1,
            ended_ms: None,
            records: 0,
            error: None,
        }
    }

    #[test]
    fn rejects_ids_that_escape_the_store() {
        let tmp = tempdir();
        let store = RunStore::open(&tmp).unwrap();
        for bad in ["", "../x", "a/b", ".", "x y"] {
            assert!(store.run_dir(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_running_run_is_interrupted_after_restart_with_its_records() {
        let tmp = tempdir();
        let store = RunStore::open(&tmp).unwrap();
        let mut f = store
            .create(&info("r1", RunState::Running), &serde_json::json!({"model": "seed"}))
            .unwrap();
        f.write_all(b"not json\n").unwrap();
        drop(f);
        let reopened = RunStore::open(&tmp).unwrap();
        let run = reopened.load("r1").unwrap();
        assert_eq!(run.info.state, RunState::Interrupted);
        assert!(run.info.error.is_some());
        assert_eq!(run.scenario["model"], "seed");
        assert!(run.records.is_empty());
        reopened.delete("r1").unwrap();
        assert!(reopened.list().unwrap().is_empty());
    }

    pub(crate) fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "loadshape-store-{}-{}",
            std::process::id(),
            super::super::unique()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
