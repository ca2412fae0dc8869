#!/usr/bin/env bash
# Differential check of the seed model: loadshape vs the Python seed on random scenarios, then the seed's own
# client against `loadshape sim-server`. Both need ../shared/seeds (or SEED_DIR); CI has it beside the clone.
# LOADSHAPE_BIN=path uses that binary and builds nothing (scripts/test.sh passes the one `cargo test` built: a
# `cargo build -p loadshape` here would build tokio and its dependents again without the tests' features).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
SEED_DIR="${SEED_DIR:-$LOADSHAPE_ROOT/../shared/seeds}"
if [ ! -f "$SEED_DIR/scenario_sim.py" ]; then
  echo "seed checks need the seeds at $SEED_DIR (set SEED_DIR); not found" >&2
  exit 1
fi
export SEED_DIR
if [ -z "${LOADSHAPE_BIN:-}" ]; then
  cargo build --locked -p loadshape
  LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape"
fi
[ -x "$LOADSHAPE_BIN" ] || { echo "check_seed: LOADSHAPE_BIN=$LOADSHAPE_BIN is not an executable" >&2; exit 1; }
python3 scripts/check_seed_equivalence.py --cases "${SEED_CASES:-300}" --bin "$LOADSHAPE_BIN"
LOADSHAPE_BIN="$LOADSHAPE_BIN" bash tests/seed_client_compat.sh
