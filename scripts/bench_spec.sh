#!/usr/bin/env bash
# Speculative-decoding benchmark (issue #43): llama.cpp's llama-server with a draft model (scripts/realserver/
# setup.sh's LLAMA_DRAFT_MODEL, the tiny model perturbed), greedy (`--temp 0`: the random model's flat distribution
# accepts almost nothing when sampled). Calibrate against it exactly as a user would (`calibrate --url`, no base
# profile), compare the acceptance calibrate found with the server's own counters over the probe (`/metrics`), then
# predict held-out scenarios and compare with live runs of them (alternated: run 1 of each, then run 2 of each, so
# that a change in the machine's load falls on all of them). A script, not a test: the numbers go in the README and
# docs/measurements.md with how they were made.
#
#   scripts/bench_spec.sh            (needs scripts/realserver/setup.sh once; builds the release binary)
#   env: OUT=dir (default ${TMPDIR:-/tmp}/loadshape-spec), BUDGET=calibrate seconds (120), REPEAT=live runs each (3),
#        SLOTS=llama-server --parallel (4), K=draft tokens per step (4), LOADSHAPE_BIN=a loadshape binary,
#        NICE=niceness of server and client (0), MAX_PROMPT=calibrate --max-prompt-tokens (2048: a speculative step
#        at 3,400 tokens of context takes ≈ 90 ms on this CPU, so the probe's long-context decode phases completed
#        no request within their share of the budget), CAL_ARGS=more calibrate flags
# The server runs on 127.0.0.1 only and is ended (by its PID) when the script exits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${OUT:-${TMPDIR:-/tmp}/loadshape-spec}"
BUDGET="${BUDGET:-120}"
REPEAT="${REPEAT:-3}"
SLOTS="${SLOTS:-4}"
K="${K:-4}"
CAL_ARGS="${CAL_ARGS:-}"
MAX_PROMPT="${MAX_PROMPT:-2048}"
NICE="${NICE:-0}"
source scripts/realserver/bench_lib.sh
rm -rf "$OUT"; mkdir -p "$OUT"

# A fresh server for the probe and for every live run (scripts/realserver/bench_lib.sh says why).
start_server() {
  llama_start "$LLAMA_MODEL" -md "$LLAMA_DRAFT_MODEL" --spec-type draft-simple --spec-draft-n-max "$K"
}
counters() { # drafted accepted steps, from the server's /metrics
  curl -sf "http://127.0.0.1:$port/metrics" | awk '
    $1 == "llamacpp:spec_decode_num_draft_tokens_total" { d = $2 }
    $1 == "llamacpp:spec_decode_num_accepted_tokens_total" { a = $2 }
    $1 == "llamacpp:spec_decode_num_drafts_total" { s = $2 }
    END { print d + 0, a + 0, s + 0 }'
}
start_server

echo "== calibrate (budget ${BUDGET}s, k = $K, --temp 0; load $(load_now))"
before=$(counters)
B calibrate --url "$url" --out "$OUT/cal" --budget "$BUDGET" --max-prompt-tokens "$MAX_PROMPT" --temp 0 $CAL_ARGS \
  >"$OUT/cal.log"
after=$(counters)
echo "$before $after" >"$OUT/cal-counters.txt"
grep -E "^speculative|^note: speculative" "$OUT/cal.log" || true

session_scenario one-session 1 1000 5 128
session_scenario fit "$SLOTS" 1000 4 96
session_scenario more-sessions $((SLOTS * 2)) 1000 3 96
names="one-session fit more-sessions"
for i in $(seq 1 "$REPEAT"); do
  for name in $names; do
    echo "== live: $name run $i (load $(load_now))"
    start_server
    B replay --url "$url" --scenario "$OUT/$name.json" --out "$OUT/$name-$i.jsonl" --temp 0 --quiet >/dev/null
  done
done
for name in $names; do
  against=()
  for i in $(seq 1 "$REPEAT"); do against+=(--against "$OUT/$name-$i.jsonl"); done
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" --json >"$OUT/$name-predict.json"
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" >"$OUT/$name-predict.txt"
  # The second table: the same profile at the acceptance the live runs had (`predict --live-acceptance`: their
  # share of drafted tokens accepted, as one rate): what the step model alone is worth where the workload accepts
  # otherwise than the probe.
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" --live-acceptance --json \
    >"$OUT/$name-predict-live.json"
done

python3 - "$OUT" "$names" <<'PY'
import json, math, sys
out, names = sys.argv[1], sys.argv[2].split()
d0, a0, s0, d1, a1, s1 = map(float, open(f"{out}/cal-counters.txt").read().split())
fit = json.load(open(f"{out}/cal/fit.json"))
sf = fit["speculative"]
spec = json.load(open(f"{out}/cal/profile.json"))["speculative"]
acc = spec["acceptance"]
k = spec["draft_tokens"]
u = [acc ** i for i in range(1, k + 1)] if isinstance(acc, (int, float)) else acc
tau = spec.get("acceptance_spread", 0.0)


def shifted(u, dz):  # every conditional rate moved by dz in log-odds (docs/simulator.md)
  out, prev, acc_ = [], 1.0, 1.0
  for ui in u:
    c = min(max(ui / prev, 0.0), 1.0) if prev > 0 else 0.0
    prev = ui
    if 0.0 < c < 1.0:
      c = 1.0 / (1.0 + math.exp(-(math.log(c / (1.0 - c)) + dz)))
    acc_ *= c
    out.append(acc_)
  return out


# The share a server pools over requests spread by acceptance_spread (Speculative::pooled_acceptance_rate).
Z = [-1.534120544, -0.887146559, -0.488776411, -0.157310685, 0.157310685, 0.488776411, 0.887146559, 1.534120544]
per_class = [sum(shifted(u, tau * z)) for z in Z] if tau > 0 else [sum(u)]
profile = sum(a / (1 + a) for a in per_class) / sum(k / (1 + a) for a in per_class)
server = (a1 - a0) / (d1 - d0)
print(f"== acceptance: calibrate {sf['accepted_share']:.4f} (records' timings, {sf['requests']} requests), profile "
      f"{profile:.4f} (acceptance {acc}, spread {tau:.3f}, k {k}), server /metrics over the probe {server:.4f} "
      f"({a1 - a0:.0f} of {d1 - d0:.0f} drafted, {s1 - s0:.0f} steps): "
      f"{(profile - server) * 100:+.1f} points; draft_cost_ms {spec['draft_cost_ms']}")
fields = ["tpot_p50_ms", "tpot_p99_ms", "ttft_p50_ms", "e2el_p50_ms"]
for suffix, what in [("", "the calibrated profile"), ("-live", "its acceptance set to the live runs' share")]:
  print(f"== {what}")
  print(f"{'scenario':16} " + " ".join(f"{f:>12}" for f in fields) + f" {'acceptance':>22}")
  for name in names:
    p = json.load(open(f"{out}/{name}-predict{suffix}.json"))
    sim = p["simulated"]
    spread = p.get("live_spread") or {}
    runs = p.get("live_runs") or [p["live"]]
    def err(f):
        live = spread[f]["mean"] if f in spread else p["live"].get(f)
        return sim.get(f) / live - 1 if live else None
    row = [f"{e*100:+11.1f}%" if (e := err(f)) is not None else f"{'n/a':>12}" for f in fields]
    live_acc = [r.get("spec_acceptance") for r in runs]
    live_acc = [a for a in live_acc if a is not None]
    la = sum(live_acc) / len(live_acc) if live_acc else float("nan")
    sa = sim.get("spec_acceptance") or float("nan")
    print(f"{name:16} " + " ".join(row) + f" {sa:.3f} vs {la:.3f} ({(sa - la) * 100:+.1f})")
    def width(f):
        s = spread.get(f)
        return f"{(s['max'] / s['min'] - 1) * 100:11.1f}%" if s and s["min"] > 0 else f"{'':>12}"
    if spread:
        accs = f"{min(live_acc):.3f}-{max(live_acc):.3f}" if live_acc else ""
        print(f"{'  live spread':16} " + " ".join(width(f) for f in fields) + f" {accs:>22}")
print(f"(errors = simulated / mean of the live runs - 1; live spread = max / min - 1 over the runs; acceptance ="
      f" simulated vs mean live share of drafted tokens accepted, points; details in {out}/*-predict.txt)")
PY
