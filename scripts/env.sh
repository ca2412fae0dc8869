# Sourced by the scripts: one place for paths and tool versions.
# shellcheck shell=bash
LOADSHAPE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LOADSHAPE_ROOT
# Cargo's target dir lives outside the clone so repeated CI runs on the same machine stay warm. The native and the
# page's (wasm32, trunk) builds share it, so the host-side crates (proc macros, build scripts) build once.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loadshape-target}"
export PATH="$HOME/.cargo/bin:$LOADSHAPE_ROOT/tools/binaryen/node_modules/.bin:$PATH"
TRUNK_VERSION=0.21.14
# wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock.
WASM_BINDGEN_VERSION="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$LOADSHAPE_ROOT/Cargo.lock")"
# wasm-split-cli (crate wasm_split_cli_support): splits the page at its `#[lazy]` functions (scripts/page_split.sh).
WASM_SPLIT_VERSION=0.2.4
export TRUNK_VERSION WASM_BINDGEN_VERSION WASM_SPLIT_VERSION
# Chromium as root in a sandbox-less container, offline (TOOLCHAIN.md).
export CHROMIUM_FLAGS="--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
