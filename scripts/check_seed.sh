#!/usr/bin/env bash
# Differential check of the seed model: loadshape vs the Python seed on random scenarios, then the seed's own
# client against `loadshape sim-server`. Both need ../shared/seeds (or SEED_DIR); CI has it beside the clone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
SEED_DIR="${SEED_DIR:-$LOADSHAPE_ROOT/../shared/seeds}"
if [ ! -f "$SEED_DIR/scenario_sim.py" ]; then
  echo "seed checks need the seeds at $SEED_DIR (set SEED_DIR); not found" >&2
  exit 1
fi
export SEED_DIR
cargo build --locked -p loadshape
python3 scripts/check_seed_equivalence.py --cases "${SEED_CASES:-300}" --bin "$CARGO_TARGET_DIR/debug/loadshape"
LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape" bash tests/seed_client_compat.sh
