//! The page's wasm is linked with its relocations kept: `scripts/page_split.sh` (wasm-split) reads them to find the
//! code each `#[lazy]` function reaches.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-bins=--emit-relocs");
    }
}
