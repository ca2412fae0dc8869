#!/usr/bin/env bash
# The engine model in wasm, timed in node (V8, as in Chromium): 31 runs per scenario, median and minimum.
#
#   bash scripts/bench_wasm.sh                      # examples/engine-sessions-10k.json examples/engine-10k.json
#   bash scripts/bench_wasm.sh my-scenario.json
#
# Builds scripts/bench_wasm (a cdylib over `shared`, opt-level 3 like the page's build of shared) with the
# workspace's Cargo.lock, runs wasm-bindgen --target nodejs, then node. The page's own figure ("computed in your
# browser in X ms") adds the summary, charts' data and call-outs on top.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/env.sh"
DIR="$ROOT/scripts/bench_wasm"
export CARGO_TARGET_DIR="${WASM_BENCH_TARGET:-$HOME/.cache/loadshape-wasm-bench}"
cp "$ROOT/Cargo.lock" "$DIR/Cargo.lock"
(cd "$DIR" && cargo build --release --offline --target wasm32-unknown-unknown -q)
wasm-bindgen --target nodejs --out-dir "$DIR/pkg" "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/loadshape_wasm_bench.wasm"
if [ $# -eq 0 ]; then set -- "$ROOT/examples/engine-sessions-10k.json" "$ROOT/examples/engine-10k.json"; fi
node "$DIR/bench.js" "$@"
