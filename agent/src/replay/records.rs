//! The JSONL record file: one [`RequestRecord`] per line, written as each request ends.
//!
//! [`RecordSink::submit`] hands a finished request's record to a writer thread of its own, which looks for new
//! records every [`WRITE_EVERY`] (2 ms), serializes them and hands the lines to the kernel in one `write` on an
//! unbuffered file, each line whole. So a line is on disk (in the page cache) at most a few milliseconds after its
//! request ended, and the thread that reads the streams spends no time on JSON, system calls or thread wake-ups
//! for records (waking the writer for each record cost that thread more than the writing itself): at 256 streams
//! whose requests end together, that work delayed the next requests' first frames (measured, see docs/replay.md).
//! SIGINT and SIGTERM end a run through [`RecordSink::finish`], which writes everything queued before it returns;
//! only a SIGKILL can lose records, those of its last 2 ms. No line is ever half-written or interleaved.
//! [`read_records`] reads any record file back and reports lines that do not parse by line number instead of
//! failing the whole file: a malformed line, or one that is not UTF-8, costs that line only, and so does a last
//! line cut before its newline (even inside a multi-byte character), which [`BadLine::torn`] marks.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use shared::record::RequestRecord;

/// Called with each record right after its line is written (e.g. `loadshape serve` streaming a run to pages). It
/// runs on the writer thread.
pub type RecordObserver = std::sync::Arc<dyn Fn(&RequestRecord) + Send + Sync>;

/// How often the writer thread looks for new records (it is not woken per record: see the module docs).
pub const WRITE_EVERY: Duration = Duration::from_millis(2);

/// What the writer thread hands back when the sink is finished.
struct WriterEnd {
    /// Every record, in the order written (when the sink keeps them).
    kept: Vec<RequestRecord>,
    /// Records whose line could not be written, and the first error.
    failed: u64,
    /// [`line_digest`]s of the lines written, summed.
    digest: u64,
    first_error: Option<String>,
}

/// A record file open for writing, shared by every request task; the writing happens on a thread of its own.
pub struct RecordSink {
    path: PathBuf,
    tx: Mutex<Option<Sender<RequestRecord>>>,
    writer: Mutex<Option<JoinHandle<(WriterEnd, File)>>>,
    written: Arc<AtomicU64>,
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSink")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

/// What [`RecordSink::finish`] returns.
#[derive(Debug)]
pub struct Finished {
    /// Every submitted record (empty unless the sink was created to keep them).
    pub records: Vec<RequestRecord>,
    /// Lines written by this sink.
    pub written: u64,
    /// The [`line_digest`]s of those lines, summed (wrapping): `summary.json`'s `records_digest`, which `merge`
    /// checks against the file it is given.
    pub digest: u64,
    /// Why some records are not in the file (how many, the first error), or why it could not be synced.
    pub error: Option<String>,
}

impl RecordSink {
    /// Create (truncate) the file, or append to it with `append` (the seed always appended), and start the writer.
    /// With `keep`, the writer also keeps every record for [`RecordSink::finish`] (the end-of-run summary).
    pub fn create(path: &Path, append: bool, keep: bool, observer: Option<RecordObserver>) -> anyhow::Result<Self> {
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
        let (tx, rx) = channel();
        let written = Arc::new(AtomicU64::new(0));
        let (w, shown) = (written.clone(), path.display().to_string());
        let writer = std::thread::Builder::new()
            .name("loadshape-records".into())
            .spawn(move || write_loop(rx, file, keep, observer, &w, &shown))
            .context("starting the record writer thread")?;
        Ok(RecordSink {
            path: path.to_path_buf(),
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            written,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines written so far by this sink.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Queue one record; the writer thread writes it within [`WRITE_EVERY`]. After [`RecordSink::finish`] this is
    /// an error (the record is not written).
    pub fn submit(&self, rec: RequestRecord) -> anyhow::Result<()> {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        match tx.as_ref() {
            Some(tx) => tx
                .send(rec)
                .map_err(|_| anyhow::anyhow!("the record writer of {} has stopped", self.path.display())),
            None => anyhow::bail!("{} is already closed", self.path.display()),
        }
    }

    /// Write everything queued, stop the writer, put the file on stable storage and hand back the kept records
    /// (records that could not be written are still kept, and `error` says so). Later calls return no records.
    pub fn finish(&self) -> anyhow::Result<Finished> {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let handle = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(handle) = handle else {
            return Ok(Finished {
                records: Vec::new(),
                written: self.written(),
                digest: 0,
                error: None,
            });
        };
        let (end, file) = handle
            .join()
            .map_err(|_| anyhow::anyhow!("the record writer of {} panicked", self.path.display()))?;
        let error = match end.first_error {
            Some(e) => Some(format!(
                "{} record(s) could not be written to {}: {e}",
                end.failed,
                self.path.display()
            )),
            None => file
                .sync_data()
                .err()
                .map(|e| format!("syncing {}: {e}", self.path.display())),
        };
        Ok(Finished {
            records: end.kept,
            written: self.written(),
            digest: end.digest,
            error,
        })
    }
}

impl Drop for RecordSink {
    fn drop(&mut self) {
        // Without a finish (an early error return): still write what was queued.
        let _ = self.finish();
    }
}

/// The writer thread: every [`WRITE_EVERY`], the records queued since in one `write`; at the end, the rest.
fn write_loop(
    rx: Receiver<RequestRecord>,
    mut file: File,
    keep: bool,
    observer: Option<RecordObserver>,
    written: &AtomicU64,
    shown: &str,
) -> (WriterEnd, File) {
    let mut end = WriterEnd {
        kept: Vec::new(),
        failed: 0,
        digest: 0,
        first_error: None,
    };
    let mut batch: Vec<RequestRecord> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut open = true;
    while open {
        std::thread::sleep(WRITE_EVERY);
        loop {
            match rx.try_recv() {
                Ok(rec) => batch.push(rec),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        buf.clear();
        let mut lines = 0u64;
        let mut digest = 0u64;
        for rec in &batch {
            let start = buf.len();
            match serde_json::to_writer(&mut buf, rec) {
                Ok(()) => {
                    digest = digest.wrapping_add(line_digest(&buf[start..]));
                    buf.push(b'\n');
                    lines += 1;
                }
                Err(e) => {
                    end.failed += 1;
                    note_error(&mut end, format!("serializing a record: {e}"));
                }
            }
        }
        match file.write_all(&buf).and_then(|()| file.flush()) {
            Ok(()) => {
                written.fetch_add(lines, Ordering::Relaxed);
                end.digest = end.digest.wrapping_add(digest);
            }
            Err(e) => {
                end.failed += lines;
                note_error(&mut end, format!("writing to {shown}: {e}"));
            }
        }
        for rec in batch.drain(..) {
            if let Some(observe) = &observer {
                observe(&rec);
            }
            if keep {
                end.kept.push(rec);
            }
        }
    }
    (end, file)
}

/// Keep the first error for [`RecordSink::finish`] and say it at once (later ones are only counted).
fn note_error(end: &mut WriterEnd, e: String) {
    if end.first_error.is_none() {
        eprintln!("could not write a record: {e}");
        end.first_error = Some(e);
    }
}

/// A line of a record file that did not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: usize,
    pub error: String,
    /// The file's last line, cut before its newline (every writer ends each line with one: this is a write that a
    /// crash, a kill or a full disk interrupted). It costs that line only.
    pub torn: bool,
}

/// The digest of one record line (its bytes without the newline): XXH3-64, stable across builds and machines.
/// A file's digest is the wrapping sum over its lines, so it does not depend on their order.
pub fn line_digest(line: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(line)
}

/// What a reader of `path` notes about the lines it skipped: how many, and the first one and why. `None` if none.
pub fn skipped_note(path: &Path, bad: &[BadLine]) -> Option<String> {
    let first = bad.first()?;
    Some(format!(
        "{}: {} unreadable line(s) skipped (line {}: {})",
        path.display(),
        bad.len(),
        first.line,
        first.error
    ))
}

/// Read every record of a JSONL file. Blank lines are skipped; lines that do not parse (bad JSON, bad UTF-8, a
/// torn last line) or hold a record with impossible values ([`RequestRecord::check`]: a negative duration, tokens
/// beyond any context) are returned by line number, not fatal: each costs that line only. Only a file that cannot
/// be read is an error.
pub fn read_records(path: &Path) -> anyhow::Result<(Vec<RequestRecord>, Vec<BadLine>)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    parse_records(BufReader::new(file)).with_context(|| format!("reading {}", path.display()))
}

/// [`read_records`] with the file's digest as its writer computed it ([`Finished::digest`]): the [`line_digest`]s
/// of its non-blank lines (without `\n` or `\r\n`), summed, and how many lines that is; in the same pass.
pub fn read_records_digest(path: &Path) -> anyhow::Result<(Vec<RequestRecord>, Vec<BadLine>, FileDigest)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    parse_all(BufReader::new(file)).with_context(|| format!("reading {}", path.display()))
}

/// A record file's summed [`line_digest`]s and its count of non-blank lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileDigest {
    pub digest: u64,
    pub lines: u64,
}

/// [`read_records`] over any reader.
pub fn parse_records(reader: impl BufRead) -> std::io::Result<(Vec<RequestRecord>, Vec<BadLine>)> {
    parse_all(reader).map(|(records, bad, _)| (records, bad))
}

/// [`parse_records`], and the lines' [`FileDigest`].
fn parse_all(mut reader: impl BufRead) -> std::io::Result<(Vec<RequestRecord>, Vec<BadLine>, FileDigest)> {
    let mut records = Vec::new();
    let mut bad = Vec::new();
    let mut digest = FileDigest::default();
    let mut buf = Vec::new();
    for line_no in 1.. {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        let (line, ended) = match buf.strip_suffix(b"\n") {
            Some(l) => (l.strip_suffix(b"\r").unwrap_or(l), true),
            None => (buf.as_slice(), false),
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        digest.digest = digest.digest.wrapping_add(line_digest(line));
        digest.lines += 1;
        // UTF-8 checked once for the whole line, then parsed as text (faster than `from_slice`, which checks each
        // string it meets on its own).
        let parsed = match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str::<RequestRecord>(text)
                .map_err(|e| e.to_string())
                .and_then(|r| r.check().map(|()| r)),
            Err(e) => Err(format!("not UTF-8: {e}")),
        };
        match parsed {
            Ok(r) => records.push(r),
            Err(error) => bad.push(BadLine {
                line: line_no,
                error,
                // Without its newline this is the last line: nothing follows it.
                torn: !ended,
            }),
        }
    }
    Ok((records, bad, digest))
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
            designed_prompt_tokens: None,
            sse_frames: 64,
            prompt_chars: 20000,
            queue_s: None,
            itl: None,
            finish_reason: Some("length".into()),
            usage_source: UsageSource::FinalFrame,
            rx_clock: None,
            retries: 0,
            retry_statuses: Vec::new(),
            failure: None,
            error: None,
            prompt_block_hashes: Vec::new(),
            replica: None,
            spec: None,
            kv_transfer_ms: None,
            reasoning_tokens: None,
            ttft_content_s: None,
            parent: None,
        }
    }

    #[test]
    fn many_writers_lose_nothing() {
        let dir = crate::scratch::Scratch::new("records-many");
        let path = dir.join("r.jsonl");
        let sink = Arc::new(RecordSink::create(&path, false, false, None).unwrap_or_else(|e| panic!("{e}")));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..2500u32 {
                        let mut r = sample(i);
                        r.inst = t;
                        sink.submit(r).unwrap_or_else(|e| panic!("{e}"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap_or_else(|_| panic!("a writer panicked"));
        }
        let done = sink.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((done.written, done.records.len()), (10_000, 0));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let (recs, bad) = parse_records(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert!(bad.is_empty());
        assert_eq!(recs.len(), 10_000);
        // Each submitter's records are in its own order.
        for t in 0..4u32 {
            let steps: Vec<u32> = recs.iter().filter(|r| r.inst == t).map(|r| r.step).collect();
            assert_eq!(steps, (0..2500).collect::<Vec<_>>());
        }
    }

    #[test]
    fn round_trip_and_bad_lines() {
        let dir = crate::scratch::Scratch::new("records");
        let path = dir.join("r.jsonl");
        let seen = Arc::new(AtomicU64::new(0));
        let s2 = seen.clone();
        let observer: RecordObserver = Arc::new(move |_: &RequestRecord| {
            s2.fetch_add(1, Ordering::Relaxed);
        });
        let sink = RecordSink::create(&path, false, true, Some(observer)).unwrap_or_else(|e| panic!("{e}"));
        sink.submit(sample(0)).unwrap_or_else(|e| panic!("{e}"));
        sink.submit(sample(1)).unwrap_or_else(|e| panic!("{e}"));
        // Written at once, without waiting for the end of the run.
        let t0 = std::time::Instant::now();
        while sink.written() < 2 && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(sink.written(), 2);
        assert_eq!(std::fs::read_to_string(&path).map(|t| t.lines().count()).ok(), Some(2));
        let done = sink.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((done.written, done.records.len(), done.error), (2, 2, None));
        assert_eq!(done.records[1], sample(1));
        assert_eq!(seen.load(Ordering::Relaxed), 2);
        assert!(sink.submit(sample(2)).is_err(), "a finished sink takes no records");
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        text.push_str("\n{not json\n");
        let (recs, bad) = parse_records(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1], sample(1));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].line, 4);
    }

    /// A last line cut inside a multi-byte character (`printf '{"error":"caf\xc3' >> records.jsonl`) costs that line
    /// only; so does a line that is not UTF-8 in the middle. Before, either failed the whole file.
    #[test]
    fn a_torn_or_non_utf8_line_costs_that_line_only() {
        let line = |step| serde_json::to_string(&sample(step)).unwrap_or_else(|e| panic!("{e}"));
        let mut bytes = format!("{}\n{}\n", line(0), line(1)).into_bytes();
        bytes.extend_from_slice(b"{\"error\":\"caf\xc3");
        let (recs, bad) = parse_records(bytes.as_slice()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs, vec![sample(0), sample(1)]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!((bad[0].line, bad[0].torn), (3, true), "{bad:?}");
        assert!(bad[0].error.contains("UTF-8"), "{bad:?}");

        // Bad bytes in the middle: that line is reported (not torn: its newline is there), the others are read.
        let mut bytes = format!("{}\n", line(0)).into_bytes();
        bytes.extend_from_slice(b"{\"error\":\"caf\xc3\"}\r\n");
        bytes.extend_from_slice(format!("{}\r\n\n{}", line(2), line(3)).as_bytes());
        let (recs, bad) = parse_records(bytes.as_slice()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            recs,
            vec![sample(0), sample(2), sample(3)],
            "CRLF and a last line without newline that parses"
        );
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!((bad[0].line, bad[0].torn), (2, false), "{bad:?}");

        // A JSON line cut short (no newline) is torn too.
        let text = format!("{}\n{}", line(0), &line(1)[..40]);
        let (recs, bad) = parse_records(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recs.len(), 1);
        assert_eq!((bad[0].line, bad[0].torn), (2, true), "{bad:?}");
    }
}
