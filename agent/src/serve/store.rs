//! The run store: one folder per run under the data dir, so runs survive a closed tab and an agent restart.
//!
//! ```text
//! <data-dir>/runs/<run_id>/run.json        RunInfo (state, target, start/end, record count)
//!                          scenario.json   the scenario as submitted
//!                          records.jsonl   one RequestRecord per line, appended and flushed as each request ends
//!                          summary.json    the final summary (shared::metrics), once the run ended
//! ```
//! A capacity search (`kind: capacity` in `run.json`) keeps, instead of records in `records.jsonl`, a record file
//! per level (`level-NN-LOAD.jsonl`, each with the `.summary.json` and `.server.json` a replay writes) and its
//! report `capacity.json`, as `loadshape capacity --out` does.
//! A calibration (`kind: calibration`) keeps what `loadshape calibrate --out` writes under `calibration/` (the
//! probe's record files in `probe/`, `profile.json`, `fit.json`) and, once it fitted, `calibration.json` (the
//! profile as sent to the page). The last profile fitted for each target is also kept beside the runs, in
//! `<data-dir>/profiles.json` (target name → `calibration.json`'s contents), so a target keeps its profile across
//! restarts and after its calibration run is deleted.
//! The folder's name is the run's id: a `run_id` inside `run.json` that says otherwise is ignored (with a
//! warning), so a copied or edited `run.json` can neither escape the store nor shadow another run. A run whose
//! `run.json` still says `running` when the store is opened was cut short by a crash: it is marked `interrupted`,
//! keeping every record it wrote. A run folder whose `run.json` is missing or unreadable is listed as `damaged`
//! (with the reason) instead of stopping the agent; its records are still read and it can be deleted.
//!
//! Records are read line by line as bytes ([`RecordCursor`]): a line that does not parse, including one cut
//! inside a multi-byte character by a crash, costs that line only, and a page of a large run is read without
//! loading the rest.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use shared::protocol::{RunInfo, RunState, TargetProfile};
use shared::record::RequestRecord;

#[derive(Debug, Clone)]
pub struct RunStore {
    dir: PathBuf,
}

/// A run's metadata, scenario and summary (its records are read with [`RunStore::records`]).
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub info: RunInfo,
    pub scenario: serde_json::Value,
    pub summary: Option<serde_json::Value>,
    /// A capacity search's report (`capacity.json`), once it ended.
    pub capacity: Option<serde_json::Value>,
    /// A calibration's fitted profile (`calibration.json`), once it fitted one.
    pub calibration: Option<TargetProfile>,
}

/// Longest record line read; a longer one (no record is near this) is skipped as malformed without being held.
pub const MAX_LINE_BYTES: usize = 1 << 20;

impl RunStore {
    /// Opens (creating) `<data_dir>/runs` and marks runs left `running` by a dead agent as `interrupted`. A run
    /// that cannot be read or fixed is logged and left as it is: one bad folder never stops the agent.
    pub fn open(data_dir: &Path) -> anyhow::Result<RunStore> {
        let dir = data_dir.join("runs");
        fs::create_dir_all(&dir).with_context(|| format!("creating run store {}", dir.display()))?;
        let store = RunStore { dir };
        for mut info in store.list()? {
            if info.state == RunState::Running {
                info.state = RunState::Interrupted;
                info.records = store.count_records(&info.run_id);
                info.error = Some("the agent stopped while this run was in progress".into());
                if let Err(e) = store.write_info(&info) {
                    tracing::warn!("run {}: cannot mark it interrupted: {e:#}", info.run_id);
                }
            }
        }
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of `run_id`, after checking the id cannot escape the store.
    pub fn run_dir(&self, run_id: &str) -> anyhow::Result<PathBuf> {
        if !valid_run_id(run_id) {
            bail!("invalid run id `{run_id}`");
        }
        Ok(self.dir.join(run_id))
    }

    /// The folder of an existing run (one with a `run.json`, or at least the files a run writes), else an error.
    fn existing_run_dir(&self, run_id: &str) -> anyhow::Result<PathBuf> {
        let dir = self.run_dir(run_id)?;
        if !is_run_folder(&dir) {
            bail!("no run `{run_id}`");
        }
        Ok(dir)
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

    /// Every run's metadata, newest first, each under its folder's name. Folders whose name is not a run id, and
    /// folders holding none of a run's files, are skipped with a warning; a run whose `run.json` cannot be read
    /// is listed as [`RunState::Damaged`].
    pub fn list(&self) -> anyhow::Result<Vec<RunInfo>> {
        let mut runs = Vec::new();
        for entry in fs::read_dir(&self.dir).with_context(|| format!("reading {}", self.dir.display()))? {
            let Ok(entry) = entry else { continue };
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::warn!("skipping {}: not a run id", path.display());
                continue;
            };
            if !valid_run_id(&name) {
                tracing::warn!("skipping {}: not a run id", path.display());
                continue;
            }
            if !is_run_folder(&path) {
                tracing::warn!("skipping {}: not a run folder", path.display());
                continue;
            }
            runs.push(self.read_info(&name, &path));
        }
        runs.sort_by(|a: &RunInfo, b: &RunInfo| b.started_ms.cmp(&a.started_ms).then(b.run_id.cmp(&a.run_id)));
        Ok(runs)
    }

    /// `run.json` of the run in `dir`, named `run_id` whatever the file says; damaged when it cannot be read.
    fn read_info(&self, run_id: &str, dir: &Path) -> RunInfo {
        match read_json::<RunInfo>(&dir.join("run.json")) {
            Ok(mut info) => {
                if info.run_id != run_id {
                    tracing::warn!(
                        "{}: names run `{}`; the folder's name `{run_id}` is the run's id",
                        dir.join("run.json").display(),
                        info.run_id
                    );
                    info.run_id = run_id.to_string();
                }
                info
            }
            Err(e) => {
                let started_ms = fs::metadata(dir)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as u64);
                RunInfo {
                    run_id: run_id.to_string(),
                    kind: shared::protocol::RunKind::Replay,
                    target: String::new(),
                    state: RunState::Damaged,
                    started_ms,
                    ended_ms: None,
                    records: self.count_records(run_id),
                    error: Some(format!("{e:#}")),
                    name: None,
                    about: None,
                }
            }
        }
    }

    /// One run's metadata, scenario and summary. A scenario or summary that cannot be read is left out (with a
    /// warning) rather than hiding the run.
    pub fn load(&self, run_id: &str) -> anyhow::Result<StoredRun> {
        let dir = self.existing_run_dir(run_id)?;
        let info = self.read_info(run_id, &dir);
        let scenario = read_json(&dir.join("scenario.json")).unwrap_or_else(|e| {
            tracing::warn!("run {run_id}: {e:#}");
            serde_json::Value::Null
        });
        let summary_path = dir.join("summary.json");
        let summary = summary_path
            .exists()
            .then(|| read_json(&summary_path))
            .and_then(|r| r.map_err(|e| tracing::warn!("run {run_id}: {e:#}")).ok());
        let capacity_path = dir.join("capacity.json");
        let capacity = capacity_path
            .exists()
            .then(|| read_json(&capacity_path))
            .and_then(|r| r.map_err(|e| tracing::warn!("run {run_id}: {e:#}")).ok());
        let calibration_path = dir.join("calibration.json");
        let calibration = calibration_path
            .exists()
            .then(|| read_json(&calibration_path))
            .and_then(|r| r.map_err(|e| tracing::warn!("run {run_id}: {e:#}")).ok());
        Ok(StoredRun {
            info,
            scenario,
            summary,
            capacity,
            calibration,
        })
    }

    /// The run's records from seq `from_seq` on (seq = index among the lines that parse).
    pub fn records(&self, run_id: &str, from_seq: u64) -> anyhow::Result<RecordCursor> {
        let dir = self.existing_run_dir(run_id)?;
        let mut cursor = RecordCursor::open(run_id, &dir.join("records.jsonl"))?;
        cursor.skip(from_seq)?;
        Ok(cursor)
    }

    pub fn delete(&self, run_id: &str) -> anyhow::Result<()> {
        let dir = self.existing_run_dir(run_id)?;
        fs::remove_dir_all(&dir).with_context(|| format!("deleting {}", dir.display()))
    }

    /// `<data-dir>/profiles.json`: each target's last calibrated profile.
    fn profiles_path(&self) -> PathBuf {
        self.dir.parent().unwrap_or(&self.dir).join("profiles.json")
    }

    /// Each target's last calibrated profile, by target name; empty when none was kept or the file cannot be read
    /// (logged: a damaged file costs the profiles, never the agent).
    pub fn target_profiles(&self) -> std::collections::BTreeMap<String, TargetProfile> {
        let path = self.profiles_path();
        if !path.exists() {
            return Default::default();
        }
        read_json(&path).unwrap_or_else(|e| {
            tracing::warn!("{e:#}");
            Default::default()
        })
    }

    /// Keeps `calibration` in its run's folder (`calibration.json`) and as its target's profile
    /// (`profiles.json`, replacing the target's previous one).
    pub fn save_calibration(&self, calibration: &TargetProfile) -> anyhow::Result<()> {
        write_json(
            &self.run_dir(&calibration.run_id)?.join("calibration.json"),
            calibration,
        )?;
        // One writer at a time: two calibrations ending together must not lose each other's profile.
        static PROFILES: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = PROFILES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut all = self.target_profiles();
        all.insert(calibration.target.clone(), calibration.clone());
        write_json(&self.profiles_path(), &all)
    }

    pub fn records_path(&self, run_id: &str) -> anyhow::Result<PathBuf> {
        Ok(self.run_dir(run_id)?.join("records.jsonl"))
    }

    fn count_records(&self, run_id: &str) -> u64 {
        let Ok(path) = self.records_path(run_id) else { return 0 };
        let Ok(mut cursor) = RecordCursor::open(run_id, &path) else {
            return 0;
        };
        // A read error ends the count: what was counted so far is what can be read.
        while let Ok(Some(_)) = cursor.next_record() {}
        cursor.next_seq()
    }
}

/// Run ids are what the agent makes (`r<ms>-<hex>`) or anything as tame: letters, digits, `-`, `_`, ≤ 64 bytes.
pub fn valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 64
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn is_run_folder(dir: &Path) -> bool {
    dir.is_dir()
        && ["run.json", "records.jsonl", "scenario.json"]
            .iter()
            .any(|f| dir.join(f).is_file())
}

/// Reads a run's `records.jsonl` forward, one line at a time, as bytes: a line that does not parse (a torn
/// last line after a crash, one cut inside a multi-byte character, one over [`MAX_LINE_BYTES`]) is skipped with
/// a warning naming it, and every other record is returned. A missing file has no records.
#[derive(Debug)]
pub struct RecordCursor {
    run_id: String,
    path: PathBuf,
    reader: Option<BufReader<File>>,
    next_seq: u64,
    line: usize,
    buf: Vec<u8>,
}

impl RecordCursor {
    pub fn open(run_id: &str, path: &Path) -> anyhow::Result<RecordCursor> {
        let reader = match File::open(path) {
            Ok(f) => Some(BufReader::with_capacity(64 * 1024, f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        Ok(RecordCursor {
            run_id: run_id.to_string(),
            path: path.to_path_buf(),
            reader,
            next_seq: 0,
            line: 0,
            buf: Vec::new(),
        })
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The seq of the record [`RecordCursor::next_record`] returns next.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The next record that parses, or `None` at the end of the file.
    pub fn next_record(&mut self) -> anyhow::Result<Option<RequestRecord>> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            let complete = match read_line_bounded(reader, &mut self.buf, MAX_LINE_BYTES)
                .with_context(|| format!("reading {}", self.path.display()))?
            {
                None => return Ok(None),
                Some(complete) => complete,
            };
            self.line += 1;
            if !complete {
                tracing::warn!(
                    "{}:{}: skipping a line over {MAX_LINE_BYTES} bytes",
                    self.path.display(),
                    self.line
                );
                continue;
            }
            let line = self.buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<RequestRecord>(line) {
                Ok(r) => {
                    self.next_seq += 1;
                    return Ok(Some(r));
                }
                Err(e) => tracing::warn!("{}:{}: skipping malformed record: {e}", self.path.display(), self.line),
            }
        }
    }

    /// Skips records until [`RecordCursor::next_seq`] is `seq` (or the file ends).
    pub fn skip(&mut self, seq: u64) -> anyhow::Result<()> {
        while self.next_seq < seq {
            if self.next_record()?.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// The next page: at most `max_records` records, ending after the one that takes their JSON past `max_bytes`;
    /// and whether the file ended.
    pub fn page(&mut self, max_records: usize, max_bytes: usize) -> anyhow::Result<(Vec<RequestRecord>, bool)> {
        let mut records = Vec::new();
        let mut bytes = 0;
        while records.len() < max_records && bytes < max_bytes {
            match self.next_record()? {
                Some(r) => {
                    bytes += self.buf.len();
                    records.push(r);
                }
                None => return Ok((records, true)),
            }
        }
        let at_end = match self.reader.as_mut() {
            Some(r) => r.fill_buf().map(<[u8]>::is_empty).unwrap_or(true),
            None => true,
        };
        Ok((records, at_end))
    }
}

/// Reads one line (without its `\n`) into `buf`, holding at most `max` bytes of it. `None` at the end of the
/// input; `Some(false)` for a line longer than `max` (consumed, not kept).
fn read_line_bounded(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut read_any = false;
    let mut too_long = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(read_any.then_some(!too_long));
        }
        read_any = true;
        let (part, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long {
            if buf.len() + part.len() > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = done.unwrap_or(chunk.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(!too_long));
        }
    }
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

/// A process-unique counter mixed with the clock, for ids and temp names.
pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (NEXT.fetch_add(1, Ordering::Relaxed) << 32) ^ u64::from(nanos) ^ u64::from(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    fn info(id: &str, state: RunState) -> RunInfo {
        RunInfo {
            run_id: id.into(),
            kind: shared::protocol::RunKind::Replay,
            target: "sim".into(),
            state,
            started_ms: 1,
            ended_ms: None,
            records: 0,
            error: None,
            name: None,
            about: None,
        }
    }

    #[test]
    fn rejects_ids_that_escape_the_store() {
        let tmp = Scratch::new("store");
        let store = RunStore::open(&tmp).unwrap();
        for bad in ["", "../x", "a/b", ".", "x y"] {
            assert!(store.run_dir(bad).is_err(), "{bad:?} accepted");
        }
    }

    const REC: &str = r#"{"schema":1,"session":0,"inst":0,"step":0,"steps_asked":3,"base_asked":1000,"ok":true,"t_submit":0.5,"ttft_s":0.2,"wall_s":1.2,"gen_tokens":11,"asked_tokens":11,"prompt_tokens":1000,"cached_tokens":0,"sse_frames":11,"prompt_chars":4000}"#;

    fn all_records(store: &RunStore, run_id: &str) -> Vec<RequestRecord> {
        let mut cursor = store.records(run_id, 0).unwrap();
        let mut out = Vec::new();
        loop {
            let (page, at_end) = cursor.page(2, usize::MAX).unwrap();
            out.extend(page);
            if at_end {
                return out;
            }
        }
    }

    #[test]
    fn a_running_run_is_interrupted_after_restart_with_its_records() {
        let tmp = Scratch::new("store");
        let store = RunStore::open(&tmp).unwrap();
        let mut f = store
            .create(&info("r1", RunState::Running), &serde_json::json!({"model": "seed"}))
            .unwrap();
        f.write_all(format!("{REC}\nnot json\n{REC}\n").as_bytes()).unwrap();
        drop(f);
        let reopened = RunStore::open(&tmp).unwrap();
        let run = reopened.load("r1").unwrap();
        assert_eq!(run.info.state, RunState::Interrupted);
        assert_eq!(run.info.records, 2);
        assert!(run.info.error.is_some());
        assert_eq!(run.scenario["model"], "seed");
        assert_eq!(all_records(&reopened, "r1").len(), 2);
        reopened.delete("r1").unwrap();
        assert!(reopened.list().unwrap().is_empty());
    }

    /// A crash that cut the last line inside a multi-byte character costs that line only (it used to make the
    /// whole file unreadable: "stream did not contain valid UTF-8", `records: 0`).
    #[test]
    fn a_torn_utf8_last_line_costs_that_line_only() {
        let tmp = Scratch::new("store");
        let store = RunStore::open(&tmp).unwrap();
        let mut f = store
            .create(&info("r1", RunState::Running), &serde_json::json!({}))
            .unwrap();
        f.write_all(format!("{REC}\n{REC}\n{REC}\n").as_bytes()).unwrap();
        f.write_all(b"{\"error\":\"caf\xc3").unwrap();
        drop(f);
        let reopened = RunStore::open(&tmp).unwrap();
        let listed = reopened.list().unwrap();
        assert_eq!((listed[0].state, listed[0].records), (RunState::Interrupted, 3));
        assert_eq!(all_records(&reopened, "r1").len(), 3);
        // A bad byte inside an earlier line costs that line only too.
        let path = reopened.records_path("r1").unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let second = REC.len() + 1 + 20;
        bytes[second] = 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(all_records(&reopened, "r1").len(), 2);
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_without_being_held() {
        let text = format!("{}\nshort\n{}", "x".repeat(100), "y".repeat(50));
        let mut reader = std::io::BufReader::with_capacity(16, text.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line_bounded(&mut reader, &mut buf, 64).unwrap(), Some(false));
        assert!(buf.is_empty());
        assert_eq!(read_line_bounded(&mut reader, &mut buf, 64).unwrap(), Some(true));
        assert_eq!(buf, b"short");
        assert_eq!(read_line_bounded(&mut reader, &mut buf, 64).unwrap(), Some(true));
        assert_eq!(buf.len(), 50);
        assert_eq!(read_line_bounded(&mut reader, &mut buf, 64).unwrap(), None);
    }

    fn write_run_json(dir: &Path, json: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("run.json"), json).unwrap();
    }

    /// The folder's name is the run's id: a `run.json` naming an escaping id, a missing folder or another run, or
    /// one that does not parse, never stops the store from opening, never shadows another run, and can be
    /// fetched and deleted (it used to exit 1 at start-up, or list the other run twice).
    #[test]
    fn bad_run_json_entries_are_listed_under_their_folder_and_never_stop_the_store() {
        let tmp = Scratch::new("store");
        let runs = tmp.join("runs");
        let good = r#"{"run_id":"good","target":"sim","state":"finished","started_ms":5,"ended_ms":6,"records":0}"#;
        write_run_json(&runs.join("good"), good);
        write_run_json(
            &runs.join("evil"),
            r#"{"run_id":"../../evil","target":"sim","state":"running","started_ms":4,"ended_ms":null,"records":0}"#,
        );
        write_run_json(
            &runs.join("gone"),
            r#"{"run_id":"no-such-folder","target":"sim","state":"running","started_ms":3,"ended_ms":null,"records":0}"#,
        );
        write_run_json(
            &runs.join("twin"),
            r#"{"run_id":"good","target":"x","state":"stopped","started_ms":2,"ended_ms":null,"records":0}"#,
        );
        write_run_json(&runs.join("broken"), "{\"run_id\": ");
        fs::write(runs.join("broken").join("records.jsonl"), format!("{REC}\n")).unwrap();
        fs::create_dir_all(runs.join("not a run")).unwrap();
        fs::create_dir_all(runs.join("empty")).unwrap();

        let store = RunStore::open(&tmp).unwrap();
        let list = store.list().unwrap();
        let mut ids: Vec<&str> = list.iter().map(|r| r.run_id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            ["broken", "evil", "gone", "good", "twin"],
            "each run once, under its folder's name"
        );
        let state = |id: &str| list.iter().find(|r| r.run_id == id).unwrap().state;
        assert_eq!(state("evil"), RunState::Interrupted);
        assert_eq!(state("gone"), RunState::Interrupted);
        assert_eq!(state("twin"), RunState::Stopped);
        assert_eq!(state("broken"), RunState::Damaged);
        let broken = list.iter().find(|r| r.run_id == "broken").unwrap();
        assert_eq!(broken.records, 1);
        assert!(broken.error.as_deref().unwrap().contains("run.json"), "{broken:?}");
        // The other run's metadata is its own, untouched.
        assert_eq!(fs::read_to_string(runs.join("good/run.json")).unwrap(), good);
        assert!(!tmp.join("evil").exists() && !runs.join("no-such-folder").exists());
        for id in ["evil", "gone", "twin", "broken"] {
            assert_eq!(store.load(id).unwrap().info.run_id, id);
            store.delete(id).unwrap();
        }
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.load("empty").is_err() && store.delete("empty").is_err());
    }
}
