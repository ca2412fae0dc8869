//! Embeds the page (Trunk's `dist/`) into release builds, so a copied binary serves it (`loadshape serve` with no
//! `--dist`). Debug builds serve the folder from disk instead: they are built before the page in the test suite,
//! and embedding would tie every debug build to the page's latest build.
//!
//! The page is copied to `$OUT_DIR/page` (what `serve/page.rs` embeds) with a gzip -9 copy (`NAME.gz`) of each file
//! that compresses, made here once rather than per request: compressing the 1.1 MB module per request took 60–100 ms
//! on loopback, where sending it whole takes 1 ms (docs/serve.md, "The page's files").
//!
//! A release build with no page built (`dist/index.html` missing) still succeeds, with a warning; that binary's
//! `serve` says it has no page and asks for `--dist`.

use std::io::Write;
use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(embedded_page)");
    println!("cargo::rerun-if-env-changed=LOADSHAPE_EMBED_PAGE");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    // `LOADSHAPE_EMBED_PAGE=0` builds a release binary without the page (benchmark builds that never serve it).
    let wanted = std::env::var("LOADSHAPE_EMBED_PAGE").as_deref() != Ok("0");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("page");
    // rust-embed's folder must exist even when nothing is embedded.
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("creating OUT_DIR/page");
    if !(release && wanted) {
        return;
    }
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dist = Path::new(&manifest).join("../dist");
    // Watched whether or not it exists: the first `trunk build` after a page-less build re-runs this script.
    println!("cargo::rerun-if-changed={}", dist.display());
    if !dist.join("index.html").is_file() {
        println!(
            "cargo::warning=no page to embed (dist/index.html is missing): run `trunk build --release` first; \
             this binary's `serve` will need --dist"
        );
        return;
    }
    copy_page(&dist, &out).expect("copying the page into OUT_DIR");
    println!("cargo::rustc-cfg=embedded_page");
}

/// Copies every file under `from` to `to`, with a `.gz` beside each one that gzip makes smaller by 10 % or more
/// (not the already-compressed kinds).
fn copy_page(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_page(&src, &dst)?;
            continue;
        }
        let bytes = std::fs::read(&src)?;
        std::fs::write(&dst, &bytes)?;
        let compressed_kind = matches!(
            src.extension().and_then(|e| e.to_str()),
            Some("png" | "jpg" | "jpeg" | "gif" | "webp" | "woff2" | "gz" | "br" | "zst")
        );
        if compressed_kind || bytes.len() < 1024 {
            continue;
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&bytes)?;
        let gz = gz.finish()?;
        if gz.len() * 10 <= bytes.len() * 9 {
            let mut name = dst.into_os_string();
            name.push(".gz");
            std::fs::write(name, gz)?;
        }
    }
    Ok(())
}
