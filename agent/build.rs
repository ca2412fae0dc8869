//! Embeds the page (Trunk's `dist/`) into release builds, so a copied binary serves it (`loadshape serve` with no
//! `--dist`). Debug builds serve the folder from disk instead: they are built before the page in the test suite,
//! and embedding would tie every debug build to the page's latest build.
//!
//! A release build with no page built (`dist/index.html` missing) still succeeds, with a warning; that binary's
//! `serve` says it has no page and asks for `--dist`.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(embedded_page)");
    println!("cargo::rerun-if-env-changed=LOADSHAPE_EMBED_PAGE");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    // `LOADSHAPE_EMBED_PAGE=0` builds a release binary without the page (benchmark builds that never serve it).
    let wanted = std::env::var("LOADSHAPE_EMBED_PAGE").as_deref() != Ok("0");
    if !(release && wanted) {
        return;
    }
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dist = Path::new(&manifest).join("../dist");
    // Watched whether or not it exists: the first `trunk build` after a page-less build re-runs this script.
    println!("cargo::rerun-if-changed={}", dist.display());
    if dist.join("index.html").is_file() {
        println!("cargo::rustc-cfg=embedded_page");
    } else {
        println!(
            "cargo::warning=no page to embed (dist/index.html is missing): run `trunk build --release` first; \
             this binary's `serve` will need --dist"
        );
    }
}
