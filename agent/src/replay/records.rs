//! The JSONL record file: one [`RequestRecord`] per line, written as each request ends.
//!
//! [`RecordSink::write`] serializes a record and hands the whole line to the kernel in one `write` on an unbuffered
//! file, so a line is on disk (in the page cache) the moment a request ends: a SIGINT, a SIGTERM, a panic elsewhere
//! or even a SIGKILL loses nothing already written, and no line is ever half-written by two writers. [`read_records`]
//! reads any record file back and reports malformed lines by line number instead of failing the whole file.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use shared::record::RequestRecord;

/// Called with each record right after its line is written (e.g. `loadshape serve` streaming a run to pages).
pub type RecordObserver = std::sync::Arc<dyn Fn(&RequestRecord) + Send + Sync>;

/// A record file open for writing, shared by every session task.
pub struct RecordSink {
    path: PathBuf,
    file: Mutex<File>,
    written: AtomicU64,
    observer: Option<RecordObserver>,
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSink")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl RecordSink {
    /// Create (truncate) the file, or append to it with `append` (the seed always appended).
    pub fn create(path: &Path, append: bool) -> anyhow::Result<Self> {
        let mut opts = OpenOptions::new();
        opts.create(true);
        if append {
            opts.append(true);
        } else {
            opts.write(true).truncate(true);
        }
        let file = opts
            .open(path)
            .with_context(|| format!("opening the record file {}", path.display()))?;
        Ok(RecordSink {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            written: AtomicU64::new(0),
            observer: None,
        })
    }

    /// Also hand every written record to `observer`.
    pub fn with_observer(mut self, observer: Option<RecordObserver>) -> Self {
        self.observer = observer;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines written so far by this sink.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Append one record as one line, in one `write_all` on the unbuffered file.
    pub fn write(&self, rec: &RequestRecord) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(rec).context("serializing a record")?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write_all(&line)
            .with_context(|| format!("writing to {}", self.path.display()))?;
        file.flush()
            .with_context(|| format!("flushing {}", self.path.display()))?;
        self.written.fetch_add(1, Ordering::Relaxed);
        drop(file);
        if let Some(observe) = &self.observer {
            observe(rec);
        }
        Ok(())
    }

    /// Ask the OS to put the file on stable storage (at the end of a run).
    pub fn sync(&self) -> anyhow::Result<()> {
        let file = self.file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        file.sync_data()
            .with_context(|| format!("syncing {}", self.path.display()))
    }
}

/// A line of a record file that did not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: usize,
    pub error: String,
}

/// Read every record of a JSONL file. Blank lines are skipped; malformed lines are returned, not fatal.
pub fn read_records(path: &Path) -> anyhow::Result<(Vec<RequestRecord>, Vec<BadLine>)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    parse_records(BufReader::new(file)).with_context(|| format!("reading {}", path.display()))
}

/// [`read_records`] over any reader.
pub fn parse_records(reader: impl BufRead) -> std::io::Result<(Vec<RequestRecord>, Vec<BadLine>)> {
    let mut records = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RequestRecord>(&line) {
            Ok(r) => records.push(r),
            Err(e) => bad.push(BadLine {
                line: i + 1,
                error: e.to_string(),
            }),
        }
    }
    Ok((records, bad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::record::{RECORD_SCHEMA_VERSION, UsageSource};

    pub(crate) fn sample(step: u32) -> RequestRecord {
        RequestRecord {
            schema: RECORD_SCHEMA_VERSION,
            session: 1,
            inst: 0,
            step,
            steps_asked: 3,
            base_asked: 4000,
            ok: true,
            t_submit: 0.5,
            ttft_s: Some(0.1),
            wall_s: 1.0,
            gen_tokens: 64,
            asked_tokens: 64,
            prompt_tokens: Some(4100),
            cached_tokens: Some(0),
            designed_cached_tokens: Some(0),
            sse_frames: 64,
            prompt_chars: 20000,
            queue_s: None,
            itl: None,
            finish_reason: Some("length".into()),
            usage_source: UsageSource::FinalFrame,
            error: None,
        }
    }

    #[test]
    fn round_trip_and_bad_lines() {
        let dir = std::env::temp_dir().join(format!("ls-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("r.jsonl");
        let sink = RecordSink::create(&path, false).unwrap_or_else(|e| panic!("{e}"));
        sink.write(&sample(0)).unwrap_or_else(|e| panic!("{e}"));
        sink.write(&sample(1)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sink.written(), 2);
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        text.push_str("\n{not json\n");
        let (recs, bad) = parse_records(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1], sample(1));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].line, 4);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
