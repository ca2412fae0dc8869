#!/usr/bin/env bash
# Held-out prediction of the emulated engine (issue #42, goal "against sim-server serving a hidden profile"):
# `sim-server` serves a known profile (no tier), `calibrate --url` fits it as a user would, held-out session
# scenarios run live against the same sim-server, and `predict` simulates them twice: with the fitted profile and
# with the true one. The true profile's errors are what the emulation (sim-server's real-time loop, the client,
# the tokenizer) adds; the fitted profile's errors beyond those are the fit's. A script, not a test: the figures
# go in docs/measurements.md with how they were made.
#
#   scripts/bench_simfit.sh     env: OUT=dir (default ${TMPDIR:-/tmp}/loadshape-simfit), BUDGET=calibrate seconds
#                               (120), REPEAT=live runs each (2), LOADSHAPE_BIN=a release binary, NICE=niceness (0)
# The server runs on 127.0.0.1 only and is ended (by its PID) when the script exits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${OUT:-${TMPDIR:-/tmp}/loadshape-simfit}"
BUDGET="${BUDGET:-120}"
REPEAT="${REPEAT:-2}"
source scripts/bench_lib.sh
rm -rf "$OUT"; mkdir -p "$OUT"

# The hidden profile: agent/tests/calibrate_sim.rs's truth (8 sequences, a 16 ms step floor, 6 prefill tokens/ms).
cat >"$OUT/truth.json" <<'JSON'
{"name": "truth", "basis": "bench_simfit.sh", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 8,
 "max_num_batched_tokens": 8192, "max_model_len": 8192, "step_fixed_ms": 16.0, "per_seq_ms": 1.5,
 "per_ctx_token_ms": 0.0015, "prefill_tokens_per_ms": 6.0, "prefill_fixed_ms": 8.0, "enable_prefix_caching": true,
 "prefill_ctx_ms_per_ktok": 0.08}
JSON
sim_server_start "$OUT/truth.json"

echo "== calibrate (budget ${BUDGET}s; load $(load_now))"
B calibrate --url "$url" --out "$OUT/cal" --budget "$BUDGET" >"$OUT/calibrate.log" 2>&1 \
  || { tail -20 "$OUT/calibrate.log"; exit 1; }

# The held-out scenarios carry the true profile; `predict --profile` gives each side its own.
session_scenario sessions 8 1500 5 64 "$OUT/truth.json"
session_scenario more-sessions 16 1500 5 64 "$OUT/truth.json"
session_scenario longer-context 8 5000 4 64 "$OUT/truth.json"
names="sessions more-sessions longer-context"
for i in $(seq 1 "$REPEAT"); do
  for name in $names; do
    echo "== live: $name run $i (load $(load_now))"
    wait_idle
    B replay --url "$url" --scenario "$OUT/$name.json" --out "$OUT/$name-$i.jsonl" --quiet >/dev/null
  done
done
for name in $names; do
  against=()
  for i in $(seq 1 "$REPEAT"); do against+=(--against "$OUT/$name-$i.jsonl"); done
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" --json >"$OUT/$name-fitted.json"
  B predict "$OUT/$name.json" --profile "$OUT/truth.json" "${against[@]}" --json >"$OUT/$name-truth.json"
done

python3 - "$OUT" "$names" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2].split()
truth = json.load(open(f"{out}/truth.json"))
fit = json.load(open(f"{out}/cal/profile.json"))
keys = ["step_fixed_ms", "per_seq_ms", "per_ctx_token_ms", "prefill_tokens_per_ms", "prefill_fixed_ms",
        "prefill_ctx_ms_per_ktok"]
print("== fitted vs true: " + ", ".join(
    f"{k} {fit.get(k, 0):.4g} ({(fit.get(k, 0) / truth[k] - 1) * 100:+.1f} %)" for k in keys))
fields = ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2el_p50_ms", "e2el_p99_ms"]
print(f"{'scenario':16} {'profile':8} " + " ".join(f"{f:>12}" for f in fields) + "   goals (p50 5 %, p99 10 %)")
for name in names:
    for kind in ["fitted", "truth"]:
        p = json.load(open(f"{out}/{name}-{kind}.json"))
        sim, spread = p["simulated"], p.get("live_spread") or {}
        row, met = [], 0
        for f in fields:
            live = spread[f]["mean"] if f in spread else p["live"].get(f)
            e = sim.get(f) / live - 1 if live else None
            met += e is not None and abs(e) <= (0.05 if "p50" in f else 0.10)
            row.append(f"{e * 100:+11.1f}%" if e is not None else f"{'n/a':>12}")
        print(f"{name:16} {kind:8} " + " ".join(row) + f"   {met} of {len(fields)}")
    if spread:
        print(f"{'  live spread':25} " + " ".join(
            f"{(spread[f]['max'] / spread[f]['min'] - 1) * 100:11.1f}%" if f in spread and spread[f]["min"] > 0
            else f"{'':>12}" for f in fields))
print(f"(errors = simulated / mean of the live runs - 1; truth = the profile sim-server serves; {out})")
PY
