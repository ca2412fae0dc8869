#!/usr/bin/env bash
# Capacity benchmark (issue #19): the simulated search's time on the example scenarios, and a live search against
# `loadshape sim-server` emulating the scenario's own profile, guided vs unguided (levels run, capacity, wall time).
# A script, not a test: the numbers go in the README with how they were made.
#
#   scripts/bench_capacity.sh        env: OUT=dir (default ${TMPDIR:-/tmp}/loadshape-capacity),
#                                         RUNS=timed runs each (5),
#                                         LOADSHAPE_BIN=a release binary (default: build one)
# The sim-server runs on 127.0.0.1 only and is ended (by its PID) when the script exits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${OUT:-${TMPDIR:-/tmp}/loadshape-capacity}"
RUNS="${RUNS:-5}"
source scripts/bench_lib.sh
rm -rf "$OUT"; mkdir -p "$OUT"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "== simulated search (median of $RUNS runs, whole process)"
for s in examples/engine-10k.json examples/engine-sessions-10k.json; do
  times=()
  for _ in $(seq 1 "$RUNS"); do
    t0=$(date +%s.%N)
    B capacity --scenario "$s" --simulate --json >"$OUT/sim.json"
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc)")
  done
  med=$(printf '%s\n' "${times[@]}" | median)
  python3 - "$s" "$med" "$OUT/sim.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[3]))
print(f"{sys.argv[1]}: {len(r['levels'])} levels, capacity {r['knob']} = {r['capacity']}, {float(sys.argv[2]):.2f} s")
EOF
done

# The live search: a closed loop on an engine of 4 sequences (a request ≈ 0.65 s, TTFT target 300 ms).
cat >"$OUT/profile.json" <<'EOF'
{"name": "knee", "basis": "bench", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 4,
 "max_num_batched_tokens": 8192, "step_fixed_ms": 15.0, "per_seq_ms": 0.5, "per_ctx_token_ms": 0.0,
 "prefill_tokens_per_ms": 20.0, "prefill_fixed_ms": 5.0}
EOF
python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
profile = json.load(open(f"{out}/profile.json"))
json.dump({"model": "engine",
           "workload": {"kind": "closed_loop", "users": 2, "num_requests": 40,
                        "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 40}},
           "profile": profile, "slo": {"ttft_ms": 300.0, "tpot_ms": 35.0}, "seed": 3, "counterfactuals": False},
          open(f"{out}/scenario.json", "w"))
EOF
sim_server_start "$OUT/profile.json"
echo "== live search against sim-server (closed loop, knob users)"
for mode in guided unguided; do
  flag=(); [ "$mode" = unguided ] && flag=(--no-guide)
  t0=$(date +%s.%N)
  B capacity --scenario "$OUT/scenario.json" --url "$url" --out "$OUT/$mode" "${flag[@]}" --json >"$OUT/$mode.json"
  t1=$(date +%s.%N)
  python3 - "$mode" "$(echo "$t1 - $t0" | bc)" "$OUT/$mode.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[3]))
loads = [l["load"] for l in r["levels"]]
print(f"{sys.argv[1]}: {r['levels_run']} live levels {loads}, capacity {r['capacity']} "
      f"(simulated {r['simulated_capacity']}), {float(sys.argv[2]):.1f} s")
EOF
done
