//! `loadshape merge RUN... [--json] [--fast]`: the summary of a run made of several record files — the shards of a
//! `replay --shard I/N` run (docs/scale.md) — computed two ways and labelled:
//!
//! - **exact**: every record of every run, laid on one time line (each run's `t_submit` shifted by its
//!   `origin_unix_s` minus the earliest one's; shards started with one `--start-at` share an origin, so nothing
//!   moves), sorted by `(t_submit, session, inst, step)` and scored by `shared::metrics::summarize` — the figures
//!   one process would report for the same records;
//! - **histogram** (fast: reads no record): each run's `<out>.counters.json` (exact counts, summed, speculative
//!   decoding's drafted, accepted and step counts among them) and
//!   `<out>.{ttft,tpot,itl,e2el}.hdr` (HDR histograms, added), by `shared::metrics::hist` — counts, rates and ratios exact,
//!   latency means and percentiles within `shared::metrics::hist::RELATIVE_BOUND` (+0.5 ns) of the exact ones.
//!
//! A run is `RUN.jsonl` or a folder (its `*.jsonl` files). The merged report says **partial** — and exits 3 — when
//! a shard of the split is missing, a shard was cut short (interrupted or aborted), a shard left no `summary.json`
//! (it did not finish) or a damaged one (or a damaged `server.json`), a record file holds other lines than its
//! summary says it wrote (more, fewer, or others: `records_digest`), a line is unreadable or holds impossible values,
//! a request appears twice, or a run's `counters.json` disagrees with its summary or its records. Runs that are not
//! shards of one plan (different splits, seeds, nonces or SLOs, or one index twice) are refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::json;
use shared::metrics::hist::{self, Counters, Mergeable, Metric};
use shared::metrics::{self, Slo, Summary};
use shared::record::RequestRecord;
use shared::workload::Shard;

use crate::replay::records;
use crate::replay::render::render;
use crate::replay::summary::{Checks, sidecar};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Record files (`RUN.jsonl`, e.g. `run.shard-0-of-4.jsonl`) or folders of them.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Print JSON: the exact summary (as `report --json`), the histogram summary, what each is and its bound.
    #[arg(long)]
    pub json: bool,
    /// Only the histogram summary (reads no record file: counters and histograms only).
    #[arg(long)]
    pub fast: bool,
}

/// What merge reads of a run's `summary.json`.
#[derive(Debug, Clone, Deserialize)]
struct RunInfo {
    seed: u64,
    nonce: u64,
    slo: Slo,
    #[serde(default)]
    shard: Option<Shard>,
    #[serde(default)]
    origin_unix_s: Option<f64>,
    #[serde(default)]
    start_at_unix_s: Option<f64>,
    #[serde(default)]
    interrupted: Option<String>,
    #[serde(default)]
    aborted: bool,
    records_written: u64,
    /// The writer's digest of the lines it wrote (absent in runs written before it existed).
    #[serde(default)]
    records_digest: Option<String>,
}

/// One run as merge found it.
struct Run {
    file: PathBuf,
    info: Option<RunInfo>,
    /// Why its `summary.json` could not be read, when it is there but damaged.
    info_error: Option<String>,
    records: Vec<RequestRecord>,
    bad_lines: usize,
    /// The record file's digest and non-blank lines ([`records::read_records_digest`]); `None` in `--fast`.
    digest: Option<records::FileDigest>,
    /// Why a `server.json` beside it could not be read.
    server_error: Option<String>,
    stats: Option<Mergeable>,
    /// Why its counters or histograms could not be read.
    stats_error: Option<String>,
}

/// The record files a list of runs names (folders expanded to their `*.jsonl`, sorted).
fn record_files(runs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for r in runs {
        if r.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(r)
                .with_context(|| format!("reading the folder {}", r.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && p.is_file())
                .collect();
            inside.sort();
            anyhow::ensure!(!inside.is_empty(), "{} holds no *.jsonl record file", r.display());
            files.extend(inside);
        } else {
            anyhow::ensure!(r.is_file(), "{} is not a record file or a folder", r.display());
            files.push(r.clone());
        }
    }
    Ok(files)
}

fn read_stats(file: &Path) -> anyhow::Result<Mergeable> {
    let path = sidecar(file, "counters.json");
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let counters: Counters = serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let mut hists = Vec::new();
    for m in Metric::ALL {
        let path = sidecar(file, &format!("{}.hdr", m.name()));
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        hists.push(hist::decode(&bytes).with_context(|| format!("{}", path.display()))?);
    }
    let hists: [_; 4] = hists
        .try_into()
        .map_err(|_| anyhow::anyhow!("four histograms expected"))?;
    Mergeable::from_parts(counters, hists).with_context(|| file.display().to_string())
}

/// A sidecar that is there but cannot be read as `T`: why, naming the file. `Ok(None)` when it is not there.
fn read_sidecar<T: serde::de::DeserializeOwned>(file: &Path, suffix: &str) -> Result<Option<T>, String> {
    let path = sidecar(file, suffix);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<T>(&bytes)
            .map(Some)
            .map_err(|e| format!("{} is damaged ({e})", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{} cannot be read ({e})", path.display())),
    }
}

fn read_run(file: &Path, fast: bool) -> anyhow::Result<Run> {
    let (info, info_error) = match read_sidecar::<RunInfo>(file, "summary.json") {
        Ok(info) => (info, None),
        Err(e) => (None, Some(e)),
    };
    // merge uses nothing of server.json, but a damaged one says the run's files were damaged.
    let server_error = read_sidecar::<serde_json::Value>(file, "server.json").err();
    let (records, bad_lines, digest) = if fast {
        (Vec::new(), 0, None)
    } else {
        let (r, bad, digest) = records::read_records_digest(file)?;
        (r, bad.len(), Some(digest))
    };
    let (stats, stats_error) = match &info {
        Some(_) => match read_stats(file) {
            Ok(m) => (Some(m), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        },
        None => (None, None),
    };
    Ok(Run {
        file: file.to_path_buf(),
        info,
        info_error,
        records,
        bad_lines,
        digest,
        server_error,
        stats,
        stats_error,
    })
}

/// The merged result, before printing.
struct Merged {
    partial: Vec<String>,
    notes: Vec<String>,
    slo: Slo,
    exact: Option<(Summary, Checks, usize)>,
    histogram: Option<Summary>,
    records: Vec<RequestRecord>,
    shards: Option<u32>,
}

fn merge(runs: Vec<Run>, fast: bool) -> anyhow::Result<Merged> {
    let mut partial = Vec::new();
    let mut notes = Vec::new();
    let infos: Vec<(&Run, &RunInfo)> = runs.iter().filter_map(|r| r.info.as_ref().map(|i| (r, i))).collect();
    if infos.is_empty() {
        let damaged: Vec<&str> = runs.iter().filter_map(|r| r.info_error.as_deref()).collect();
        anyhow::ensure!(
            damaged.is_empty(),
            "no run has a readable summary.json: nothing says how they were run ({})",
            damaged.join("; ")
        );
        anyhow::bail!(
            "no run has a summary.json beside its records: nothing says how they were run (a shard that did not \
             finish leaves none)"
        );
    }
    let first = infos[0].1.clone();
    let first = &first;
    for (r, i) in &infos {
        let name = r.file.display();
        anyhow::ensure!(
            i.seed == first.seed && i.nonce == first.nonce,
            "{name}: planned with seed {} nonce {}, but {} with seed {} nonce {}: not shards of one plan",
            i.seed,
            i.nonce,
            infos[0].0.file.display(),
            first.seed,
            first.nonce
        );
        anyhow::ensure!(
            i.slo == first.slo,
            "{name}: scored against SLO {:?}, the others against {:?}",
            i.slo,
            first.slo
        );
    }
    // The split: every run a shard of the same N, each index once, all present.
    let counts: Vec<u32> = infos.iter().map(|(_, i)| i.shard.map_or(1, |s| s.count)).collect();
    let shards = if counts.iter().all(|&c| c == counts[0]) && counts[0] > 1 {
        let n = counts[0];
        let mut seen: BTreeMap<u32, &Path> = BTreeMap::new();
        for (r, i) in &infos {
            let index = i.shard.map_or(0, |s| s.index);
            if let Some(other) = seen.insert(index, &r.file) {
                anyhow::bail!(
                    "shard {index}/{n} appears twice: {} and {}",
                    other.display(),
                    r.file.display()
                );
            }
        }
        let missing: Vec<String> = (0..n)
            .filter(|i| !seen.contains_key(i))
            .map(|i| i.to_string())
            .collect();
        if !missing.is_empty() {
            partial.push(format!("missing shard(s) {} of {n}", missing.join(", ")));
        }
        Some(n)
    } else if counts.iter().any(|&c| c > 1) {
        anyhow::bail!("the runs are shards of different splits (counts {counts:?}): merge the shards of one run");
    } else {
        notes.push(format!(
            "{} whole-plan run(s), not shards: merged as one set of records",
            infos.len()
        ));
        None
    };
    for r in &runs {
        partial.extend(run_problems(r, fast));
    }
    if !fast {
        partial.extend(duplicated_requests(&runs, shards.is_some()));
    }
    // One time line: shift each run by its origin's distance from the earliest.
    let origins: Vec<Option<f64>> = runs
        .iter()
        .map(|r| r.info.as_ref().and_then(|i| i.origin_unix_s))
        .collect();
    let base = origins.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let offset = |o: Option<f64>| match o {
        Some(o) if base.is_finite() => o - base,
        _ => 0.0,
    };
    let starts: Vec<Option<f64>> = infos.iter().map(|(_, i)| i.start_at_unix_s).collect();
    let n_infos = infos.len();
    drop(infos);
    if n_infos > 1 && !(starts[0].is_some() && starts.iter().all(|s| *s == starts[0])) {
        notes.push(
            "the runs were not started with one --start-at: laid on one time line by their wall-clock origins \
             (origin_unix_s), as good as the hosts' clocks agree"
                .to_string(),
        );
    }
    let mut histogram: Option<Mergeable> = None;
    for (r, o) in runs.iter().zip(&origins) {
        if let Some(st) = &r.stats {
            match &mut histogram {
                None => {
                    let mut m = Mergeable::of(&[], &first.slo);
                    m.merge(st, offset(*o))?;
                    histogram = Some(m);
                }
                Some(m) => m.merge(st, offset(*o))?,
            }
        }
    }
    let mut all = Vec::new();
    let exact = if fast {
        None
    } else {
        for (r, o) in runs.into_iter().zip(&origins) {
            let off = offset(*o);
            all.extend(r.records.into_iter().map(|mut rec| {
                rec.t_submit += off;
                rec
            }));
        }
        all.sort_by(|a, b| {
            a.t_submit
                .total_cmp(&b.t_submit)
                .then(a.session.cmp(&b.session))
                .then(a.inst.cmp(&b.inst))
                .then(a.step.cmp(&b.step))
        });
        let n = all.len();
        Some((metrics::summarize(&all, &first.slo), Checks::of(&all), n))
    };
    Ok(Merged {
        partial,
        notes,
        slo: first.slo,
        exact,
        histogram: histogram.map(|m| m.summary()),
        records: all,
        shards,
    })
}

/// What makes one run's part of the merge incomplete or untrustworthy, each naming the file: a missing or damaged
/// sidecar, a run cut short, a record file that is not the one its summary describes (more or fewer lines, another
/// digest), counters that disagree with the summary or the records.
fn run_problems(r: &Run, fast: bool) -> Vec<String> {
    let name = r.file.display();
    let mut out = Vec::new();
    match (&r.info, &r.info_error) {
        (None, Some(e)) => out.push(format!(
            "{name}: {e}; its {} record(s) are in the exact summary only",
            r.records.len()
        )),
        (None, None) => out.push(format!(
            "{name}: no summary.json (the shard did not finish); its {} record(s) are in the exact summary only",
            r.records.len()
        )),
        (Some(i), _) => out.extend(summary_problems(r, i, fast)),
    }
    if let Some(e) = &r.server_error {
        out.push(format!("{name}: {e}"));
    }
    if let Some(e) = &r.stats_error {
        out.push(format!(
            "{name}: no histogram statistics ({e}); its records are in the exact summary only"
        ));
    }
    if r.bad_lines > 0 {
        out.push(format!(
            "{name}: {} line(s) unreadable or with impossible values",
            r.bad_lines
        ));
    }
    out
}

/// [`run_problems`] of a run whose `summary.json` was read.
fn summary_problems(r: &Run, i: &RunInfo, fast: bool) -> Vec<String> {
    let name = r.file.display();
    let mut out = Vec::new();
    if let Some(why) = &i.interrupted {
        out.push(format!("{name}: cut short ({why})"));
    }
    if i.aborted {
        out.push(format!("{name}: cut short (aborted: the server stopped answering)"));
    }
    if let Some(records::FileDigest { digest, lines }) = r.digest {
        if lines != i.records_written {
            out.push(format!(
                "{name}: {lines} record line(s), its summary says {} were written",
                i.records_written
            ));
        } else if let Some(want) = &i.records_digest
            && *want != format!("{digest:016x}")
        {
            out.push(format!(
                "{name}: its lines are not the ones its summary.json says were written (digest {digest:016x}, \
                 written {want}): another run's records, or edited"
            ));
        }
    }
    if let Some(st) = &r.stats {
        let c = st.counters();
        if c.records != i.records_written {
            out.push(format!(
                "{}: counts {} record(s), its summary says {} were written",
                sidecar(&r.file, "counters.json").display(),
                c.records,
                i.records_written
            ));
        }
        if c.completed + c.failed != c.records {
            out.push(format!(
                "{}: completed {} + failed {} is not its {} record(s)",
                sidecar(&r.file, "counters.json").display(),
                c.completed,
                c.failed,
                c.records
            ));
        }
        if !fast {
            let ok = r.records.iter().filter(|x| x.ok).count() as u64;
            if ok != c.completed {
                out.push(format!(
                    "{}: completed {}, the record file holds {ok} completed record(s)",
                    sidecar(&r.file, "counters.json").display(),
                    c.completed
                ));
            } else if let Some(field) = counters_differ(c, Mergeable::of(&r.records, &i.slo).counters()) {
                out.push(format!(
                    "{}: {field} is not what the record file counts",
                    sidecar(&r.file, "counters.json").display()
                ));
            }
        }
    }
    out
}

/// The first field in which a run's counters differ from those of its records (the writer made both from the
/// same records, so any difference is damage or an edit).
fn counters_differ(read: &Counters, of_records: &Counters) -> Option<String> {
    if read == of_records {
        return None;
    }
    let (a, b) = (serde_json::to_value(read).ok()?, serde_json::to_value(of_records).ok()?);
    let (serde_json::Value::Object(a), serde_json::Value::Object(b)) = (a, b) else {
        return Some("a field".into());
    };
    Some(
        a.iter()
            .find(|(k, v)| b.get(*k) != Some(*v))
            .map_or_else(|| "a field".to_string(), |(k, _)| k.clone()),
    )
}

/// Requests whose identity `(session, inst, step)` appears more than once in a run, or, with `across` (the runs
/// are shards of one plan), in two runs: each is one request of the plan, so a repeat is a line copied (a file
/// appended to itself, a shard given twice under two names). Whole-plan runs of one plan repeat each other's
/// requests by design: only each file is checked.
fn duplicated_requests(runs: &[Run], across: bool) -> Vec<String> {
    let mut seen: std::collections::HashMap<(u64, u32, u32), usize> = std::collections::HashMap::new();
    let mut dups: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    for (ri, r) in runs.iter().enumerate() {
        if !across {
            seen.clear();
        }
        for rec in &r.records {
            if let Some(&first) = seen.get(&(rec.session, rec.inst, rec.step)) {
                *dups.entry((first, ri)).or_default() += 1;
            } else {
                seen.insert((rec.session, rec.inst, rec.step), ri);
            }
        }
    }
    dups.into_iter()
        .map(|((a, b), n)| {
            let (fa, fb) = (runs[a].file.display(), runs[b].file.display());
            if a == b {
                format!("{fa}: {n} request(s) appear twice (same session, inst and step)")
            } else {
                format!("{fb}: {n} request(s) also in {fa} (same session, inst and step)")
            }
        })
        .collect()
}

/// The figures the two summaries share, `(name, exact, histogram, is a latency figure)`.
fn figures(e: &Summary, h: &Summary) -> Vec<(&'static str, f64, f64, bool)> {
    let o = |x: Option<f64>| x.unwrap_or(f64::NAN);
    let mut rows = vec![
        ("completed", e.completed as f64, h.completed as f64, false),
        ("failed", e.failed as f64, h.failed as f64, false),
        ("sessions", e.sessions as f64, h.sessions as f64, false),
        (
            "total_output_tokens",
            e.total_output_tokens as f64,
            h.total_output_tokens as f64,
            false,
        ),
        ("duration_s", e.duration_s, h.duration_s, false),
        ("goodput_rps", e.goodput_rps, h.goodput_rps, false),
        ("ttft_mean_ms", e.ttft_mean_ms, h.ttft_mean_ms, true),
        ("ttft_p50_ms", e.ttft_p50_ms, h.ttft_p50_ms, true),
        ("ttft_p99_ms", e.ttft_p99_ms, h.ttft_p99_ms, true),
        ("tpot_p50_ms", e.tpot_p50_ms, h.tpot_p50_ms, true),
        ("tpot_p99_ms", e.tpot_p99_ms, h.tpot_p99_ms, true),
        ("itl_p50_ms", o(e.itl_p50_ms), o(h.itl_p50_ms), true),
        ("itl_p99_ms", o(e.itl_p99_ms), o(h.itl_p99_ms), true),
        ("e2el_p50_ms", e.e2el_p50_ms, h.e2el_p50_ms, true),
        ("e2el_p99_ms", e.e2el_p99_ms, h.e2el_p99_ms, true),
    ];
    // Speculative decoding's figures, where either summary has them (exact in both: summed counts).
    if e.spec_acceptance.is_some() || h.spec_acceptance.is_some() {
        rows.push(("spec_acceptance", o(e.spec_acceptance), o(h.spec_acceptance), false));
    }
    if e.spec_accepted_per_step.is_some() || h.spec_accepted_per_step.is_some() {
        rows.push((
            "spec_accepted_per_step",
            o(e.spec_accepted_per_step),
            o(h.spec_accepted_per_step),
            false,
        ));
    }
    rows
}

const EXACT_IS: &str = "exact: every record of every run, on one time line, scored by shared::metrics::summarize";
const HIST_IS: &str = "histogram: counts, rates and ratios exact (summed counters); latency means and percentiles \
from HDR histograms with 3 significant digits: exact p - 0.5 ns <= histogram < p * (1 + 1/1024) + 0.5 ns \
(means within 1/1024 either side); queue and designed/realized prompt medians need the records (absent)";

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let files = record_files(&a.runs)?;
    let runs = files
        .iter()
        .map(|f| read_run(f, a.fast))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let m = merge(runs, a.fast)?;
    if a.json {
        let (summary, checks, n) = match &m.exact {
            Some((s, c, n)) => (Some(s), Some(c), Some(*n)),
            None => (None, None, None),
        };
        let out = json!({
            "runs": files, "shards": m.shards, "records": n,
            "partial": !m.partial.is_empty(), "missing": m.partial, "notes": m.notes,
            "slo": m.slo, "summary": summary, "checks": checks, "histogram_summary": m.histogram,
            "sources": {"summary": EXACT_IS, "histogram_summary": HIST_IS},
            "bound": {"relative": hist::RELATIVE_BOUND, "absolute_ms": hist::ABSOLUTE_BOUND_MS,
                      "significant_digits": hist::SIGNIFICANT_DIGITS},
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the merge")?
        );
    } else {
        if !m.partial.is_empty() {
            println!("PARTIAL: {}", m.partial.join("; "));
        }
        for n in &m.notes {
            println!("note: {n}");
        }
        match &m.exact {
            Some((s, _, n)) => {
                println!("merged {} run(s), {n} records ({EXACT_IS})", files.len());
                println!("{}", render(&m.records, s, &m.slo, None, &[]));
            }
            None => println!("merged {} run(s) from their histograms only (--fast)", files.len()),
        }
        if let Some(h) = &m.histogram {
            println!("\n{HIST_IS}");
            let exact = m.exact.as_ref().map(|e| &e.0);
            println!("{:<24}{:>16}{:>16}  within bound", "figure", "exact", "histogram");
            for (name, e, x, latency) in figures(exact.unwrap_or(h), h) {
                let (e_text, ok) = match exact {
                    Some(_) => (
                        format!("{e:.4}"),
                        if latency {
                            let mean = name.ends_with("mean_ms");
                            if e.is_nan() && x.is_nan() || hist::within_bound(e, x, mean) {
                                "yes"
                            } else {
                                "NO"
                            }
                        } else if e == x || e.is_nan() && x.is_nan() {
                            "equal"
                        } else {
                            "NO"
                        },
                    ),
                    None => ("-".to_string(), ""),
                };
                println!("{name:<24}{e_text:>16}{x:>16.4}  {ok}");
            }
        }
    }
    Ok(if m.partial.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
