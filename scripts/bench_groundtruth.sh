#!/usr/bin/env bash
# Real vLLM runs against the simulator, from the catalog (issue #40 item 6): each run's own arrivals and token
# counts replayed through `loadshape simulate` with the catalog's deployment and the default efficiencies (nothing
# fitted), TTFT/TPOT/E2E mean, p50 and p99 compared (errors as simulated / real - 1). The runs are read from
# `../shared/groundtruth` beside the repository (`LOADSHAPE_GROUNDTRUTH` overrides); without them it says so and
# exits 0. Definitions and conversions: scripts/groundtruth.py; figures: docs/measurements.md.
#
#   bash scripts/bench_groundtruth.sh            # a table: run, metric, real, simulated, error
#   bash scripts/bench_groundtruth.sh --json     # {"runs": [{"run", "errors": {...}, "real", "simulated", ...}]}
#   bash scripts/bench_groundtruth.sh --efficiency '{"mfu": 0.6}'   # a diagnosis: every run takes these efficiencies
#   LOADSHAPE_BIN=OTHER_BUILD/loadshape bash scripts/bench_groundtruth.sh   # another build, not rebuilt
set -eu
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GT="${LOADSHAPE_GROUNDTRUTH:-$ROOT/../shared/groundtruth}"
if [ ! -d "$GT" ]; then
  echo "bench_groundtruth: no real runs at $GT (set LOADSHAPE_GROUNDTRUTH); skipped" >&2
  exit 0
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loadshape-target}"
BIN="${LOADSHAPE_BIN:-$CARGO_TARGET_DIR/release/loadshape}"
if [ -z "${LOADSHAPE_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release -q -p loadshape)
fi
LOADSHAPE_GROUNDTRUTH="$GT" exec python3 "$ROOT/scripts/groundtruth.py" --bin "$BIN" "$@"
