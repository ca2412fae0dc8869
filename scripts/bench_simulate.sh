#!/usr/bin/env bash
# Wall and CPU time of the whole `loadshape simulate` command on a scenario (default: the 1M-request session example),
# as a user runs it: reading the file, simulating, scoring and printing the JSON report. Runs it RUNS times (default
# 7) and prints each run and the median and minimum; on a shared machine the minimum is the figure least disturbed
# by other work, the median the typical one. Extra arguments go after the file: with `--records PATH` each record's
# own ITL p50/p99 are computed too (without it they are skipped: nothing else shows them).
#
#   bash scripts/bench_simulate.sh                                  # examples/engine-sessions-1m.json --json
#   RUNS=5 bash scripts/bench_simulate.sh examples/engine-sessions-10k.json --json
#   LOADSHAPE_BIN=OLD_BUILD/loadshape bash scripts/bench_simulate.sh   # another build, for side-by-side rounds
set -eu
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loadshape-target}"
BIN="${LOADSHAPE_BIN:-$CARGO_TARGET_DIR/release/loadshape}"
RUNS="${RUNS:-7}"
if [ -z "${LOADSHAPE_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release -q -p loadshape)
fi
if [ $# -eq 0 ]; then
  set -- "$ROOT/examples/engine-sessions-1m.json" --json
fi
walls=()
cpus=()
for i in $(seq "$RUNS"); do
  # %e wall, %U user, %S system seconds (GNU time; the report itself goes to /dev/null).
  t=$( { /usr/bin/time -f "%e %U %S" "$BIN" simulate "$@" > /dev/null; } 2>&1 | tail -1)
  read -r wall user sys <<< "$t"
  cpu=$(python3 -c "print(f'{$user + $sys:.2f}')")
  echo "run $i: wall $wall s, CPU $cpu s (user $user, sys $sys)"
  walls+=("$wall")
  cpus+=("$cpu")
done
python3 - "${walls[*]}" "${cpus[*]}" <<'EOF'
import statistics, sys
walls = [float(x) for x in sys.argv[1].split()]
cpus = [float(x) for x in sys.argv[2].split()]
print(f"wall: median {statistics.median(walls):.2f} s, min {min(walls):.2f} s; "
      f"CPU: median {statistics.median(cpus):.2f} s, min {min(cpus):.2f} s ({len(walls)} runs)")
EOF
