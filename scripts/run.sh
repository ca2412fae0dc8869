#!/usr/bin/env bash
# The README's run command: install what is missing, build the page and the agent, start `loadshape serve`.
# Extra arguments go to `loadshape serve` (e.g. `--port 9000`, `--target NAME=URL`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$LOADSHAPE_ROOT/scripts/setup.sh"
cd "$LOADSHAPE_ROOT"
step "trunk build --release (the page)"
trunk build --release --offline
step "cargo build --release (the agent)"
cargo build --release -p loadshape
step "loadshape serve"
exec "$CARGO_TARGET_DIR/release/loadshape" serve --dist "$LOADSHAPE_ROOT/dist" "$@"
