//! Splits a record file into the files N shards of one run would leave (for `scripts/bench_merge.sh`): record `r`
//! goes to shard `r.session mod N` (the slot or request index, as `replay --shard` splits), and each shard gets
//! the sidecars `loadshape merge` reads — a `summary.json` with the fields merge checks, `counters.json` and the
//! four `.hdr` histograms, made by `shared::metrics::hist` exactly as `replay` makes them.
//!
//! Run with `cargo run --release -p loadshape --example make_shards -- RECORDS.jsonl N OUT_DIR`.

use std::io::Write as _;
use std::path::PathBuf;

use loadshape::replay::records::read_records;
use shared::metrics::Slo;
use shared::metrics::hist::{self, Mergeable};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() == 3, "usage: make_shards RECORDS.jsonl N OUT_DIR");
    let (recs, bad) = read_records(std::path::Path::new(&args[0]))?;
    anyhow::ensure!(bad.is_empty(), "{} malformed lines", bad.len());
    let n: u64 = args[1].parse()?;
    anyhow::ensure!(n >= 1, "N must be at least 1");
    let dir = PathBuf::from(&args[2]);
    std::fs::create_dir_all(&dir)?;
    let slo = Slo::default();
    let mut parts: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
    for r in recs {
        parts[(r.session % n) as usize].push(r);
    }
    for (i, part) in parts.iter().enumerate() {
        let out = dir.join(format!("run.shard-{i}-of-{n}.jsonl"));
        let mut w = std::io::BufWriter::new(std::fs::File::create(&out)?);
        for r in part {
            serde_json::to_writer(&mut w, r)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        let side = |s: &str| PathBuf::from(format!("{}.{s}", out.display()));
        let summary = serde_json::json!({
            "seed": 1, "nonce": 1, "slo": slo, "shard": {"index": i, "count": n},
            "origin_unix_s": 1.0e9, "start_at_unix_s": 1.0e9, "interrupted": null, "aborted": false,
            "records_written": part.len(),
        });
        std::fs::write(side("summary.json"), serde_json::to_vec(&summary)?)?;
        let stats = Mergeable::of(part, &slo);
        std::fs::write(side("counters.json"), serde_json::to_vec(&stats.counters)?)?;
        for (m, h) in stats.histograms() {
            std::fs::write(
                side(&format!("{}.hdr", m.name())),
                hist::encode(h).map_err(anyhow::Error::msg)?,
            )?;
        }
    }
    Ok(())
}
