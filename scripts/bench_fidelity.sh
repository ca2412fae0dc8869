#!/usr/bin/env bash
# Fidelity benchmark (issues #17, #42): calibrate against a REAL llama.cpp server exactly as a user would (no cache
# flags: the tier below the slots, llama-server's host prompt cache, is found by calibrate's returns phase), then
# predict held-out scenarios and compare with live runs of them. Prints one table of signed errors (sim / mean of
# the live runs − 1) per scenario next to the live runs' own spread. A script, not a test: the numbers go in the README with how they were made.
#
#   scripts/bench_fidelity.sh            (needs scripts/realserver/setup.sh once; builds the release binary)
#   env: OUT=dir (default ${TMPDIR:-/tmp}/loadshape-fidelity), BUDGET=calibrate seconds (180),
#        REPEAT=live runs each (2),
#        SLOTS=llama-server --parallel (4), LOADSHAPE_BIN=a release binary, MAX_PROMPT=calibrate
#        --max-prompt-tokens (default: calibrate's own, 85 % of the slot's context), NICE=niceness of server and
#        client (0; -10 on a busy machine, as root), CAL_ARGS=more calibrate flags (none by default; the published
#        table gives none), CAL_FROM=a probe folder
#        (cal/probe) to fit from instead of probing, SCHEDULER=calibrate --scheduler (auto: llama_cpp from /props;
#        llama-cpp with CAL_FROM; vllm gives the vLLM-like schedule the simulator had before), LIVE_FROM=an earlier
#        OUT whose live runs (NAME-I.jsonl) are predicted again instead of replaying new ones,
#        SERVER_ARGS=more llama-server flags (e.g. -kvu: one unified KV cache for all slots; without it an explicit
#        --parallel gives llama-server one KV stream per slot, kv_unified = false)
# Besides the table for the fitted profile, a second table predicts the same live runs with the same coefficients
# and `reply_cached_share` measured from the fit scenario's live runs (calibrate --from the probe and those runs:
# how much of a session's previous reply the server found cached), and a third with the other `scheduler`
# (vllm <-> llama_cpp): what each mechanism alone changes. The held-out scenarios' runs are not used for either.
# The server runs on 127.0.0.1 only and is ended (by its PID) when the script exits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${OUT:-${TMPDIR:-/tmp}/loadshape-fidelity}"
BUDGET="${BUDGET:-180}"
REPEAT="${REPEAT:-2}"
SLOTS="${SLOTS:-4}"
CAL_ARGS="${CAL_ARGS:-}"
NICE="${NICE:-0}"
source scripts/realserver/bench_lib.sh
rm -rf "$OUT"; mkdir -p "$OUT"

# SERVER_ARGS unquoted: more flags, as the user wrote them.
# shellcheck disable=SC2086
start_server() { llama_start "$LLAMA_MODEL" ${SERVER_ARGS:-}; }
start_server

echo "== calibrate (budget ${BUDGET}s; load $(load_now))"
# Prompts up to calibrate's default (85 % of the slot's 8,192 tokens): the held-out scenarios reach 6,000+ tokens
# of context, measured by the probe rather than extrapolated (prefills longer than n_batch are fitted as chunks).
max_prompt=()
[ -n "${MAX_PROMPT:-}" ] && max_prompt=(--max-prompt-tokens "$MAX_PROMPT")
if [ -n "${CAL_FROM:-}" ]; then
  # Refit from an earlier probe's records (a quiet moment's), with the limits /props gives this server.
  from=()
  for f in "$CAL_FROM"/*.jsonl; do from+=(--from "$f"); done
  B calibrate "${from[@]}" --out "$OUT/cal" --max-num-seqs "$SLOTS" --max-model-len $((32768 / SLOTS)) \
    --num-kv-blocks 2048 --max-num-batched-tokens 2048 --scheduler "${SCHEDULER:-llama-cpp}" $CAL_ARGS
else
  B calibrate --url "$url" --out "$OUT/cal" --budget "$BUDGET" "${max_prompt[@]}" --scheduler "${SCHEDULER:-auto}" \
    $CAL_ARGS
fi

python3 - "$OUT/cal/profile.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
keys = ["step_fixed_ms", "per_seq_ms", "per_ctx_token_ms", "batch_kv_ms_per_ktok", "prefill_tokens_per_ms",
        "prefill_fixed_ms", "prefill_ctx_ms_per_ktok", "prefill_batch_kv_ms_per_ktok"]
print("== fitted: " + ", ".join(f"{k} {p.get(k, 0):.4g}" for k in keys) + f", scheduler {p.get('scheduler', 'vllm')}")
# The tier below the GPU's, as calibrate found it (no cache flags: the probe's returns phase and what the server
# reports; fit.json's tiers says how).
t = json.load(open(sys.argv[1].replace("profile.json", "fit.json"))).get("tiers") or {}
h = p.get("host_cache")
back = [r["outcome"] for r in t.get("returns", [])]
print(f"== tier: {h if h else 'none'}; capacity found by {t.get('capacity_found_by')}"
      f"{' (a lower bound)' if t.get('capacity_lower_bound') else ''}, restore speed by {t.get('restore_found_by')}"
      f"{' (a lower bound)' if t.get('rate_lower_bound') else ''}; returns: "
      + ", ".join(f"{back.count(o)} {o}" for o in ["restored", "partial", "recomputed"]))
PY
grep -h "kv_unified" "$OUT/llama.log" | head -1 || true

# The scenarios: the one the fit is checked on, more sessions than slots, and longer contexts.
session_scenario fit "$SLOTS" 1500 5
session_scenario more-sessions $((SLOTS * 2)) 1500 5
session_scenario longer-context "$SLOTS" 5000 5

python3 - "$OUT/cal/profile.json" "$OUT/cal/profile-alt.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
if p.get("scheduler") == "llama_cpp":
    del p["scheduler"]
else:
    p["scheduler"] = "llama_cpp"
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
for name in fit more-sessions longer-context; do
  for i in $(seq 1 "$REPEAT"); do
    if [ -n "${LIVE_FROM:-}" ]; then
      for f in "$LIVE_FROM/$name-$i.jsonl"*; do cp "$f" "$OUT/"; done
    else
      echo "== live: $name run $i (load $(load_now))"
      start_server
      B replay --url "$url" --scenario "$OUT/$name.json" --out "$OUT/$name-$i.jsonl" --quiet >/dev/null
    fi
  done
done

# The share of a reply the server finds cached when the conversation comes back, from the fit scenario's runs;
# the coefficients stay the probe's.
reply_from=()
for f in "$OUT"/cal/probe/*.jsonl "$OUT"/fit-*.jsonl; do [ -f "$f" ] && reply_from+=(--from "$f"); done
if B calibrate "${reply_from[@]}" --out "$OUT/cal-reply" --scheduler "${SCHEDULER:-llama-cpp}" $CAL_ARGS \
    >"$OUT/cal-reply.log" 2>&1; then
  share=$(python3 -c "import json; print(json.load(open('$OUT/cal-reply/profile.json')).get('reply_cached_share', 1.0))")
else
  echo "   calibrate --from the fit runs failed (see $OUT/cal-reply.log): reply_cached_share left at 1"
  share=1.0
fi
echo "== reply_cached_share from the fit scenario's runs: $share"
python3 - "$OUT/cal/profile.json" "$OUT/cal/profile-reply.json" "$share" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["reply_cached_share"] = float(sys.argv[3])
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY

for name in fit more-sessions longer-context; do
  against=()
  for i in $(seq 1 "$REPEAT"); do against+=(--against "$OUT/$name-$i.jsonl"); done
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" --json >"$OUT/$name-predict.json"
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" >"$OUT/$name-predict.txt"
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile-alt.json" "${against[@]}" --json \
    >"$OUT/$name-predict-alt.json"
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile-reply.json" "${against[@]}" --json \
    >"$OUT/$name-predict-reply.json"
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile-reply.json" "${against[@]}" >"$OUT/$name-predict-reply.txt"
done

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
fields = ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2el_p50_ms", "e2el_p99_ms",
          "cached_share_achieved"]
for suffix in ["", "-reply", "-alt"]:
  prof = json.load(open(f"{out}/cal/profile{suffix}.json"))
  sched = prof.get("scheduler", "vllm")
  what = {"": " (the fitted profile)",
          "-reply": f" and reply_cached_share {prof.get('reply_cached_share', 1.0):.3f} from the fit scenario's runs",
          "-alt": " (same coefficients, other scheduler)"}[suffix]
  print(f"== scheduler {sched}{what}")
  print(f"{'scenario':16} " + " ".join(f"{f:>12}" for f in fields))
  for name in ["fit", "more-sessions", "longer-context"]:
    p = json.load(open(f"{out}/{name}-predict{suffix}.json"))
    sim = p["simulated"]
    spread = p.get("live_spread") or {}
    def err(f):
        # Against the mean of the live runs where there are several, else the one run.
        live = spread[f]["mean"] if f in spread else p["live"].get(f)
        return sim.get(f) / live - 1 if live else None
    row = [f"{e*100:+11.1f}%" if (e := err(f)) is not None else f"{'n/a':>12}" for f in fields]
    print(f"{name:16} " + " ".join(row))
    def width(f):
        s = spread.get(f)
        return f"{(s['max'] / s['min'] - 1) * 100:11.1f}%" if s and s["min"] > 0 else f"{'':>12}"
    if spread:
        print(f"{'  live spread':16} " + " ".join(width(f) for f in fields))
print(f"(errors = simulated / mean of the live runs - 1; live spread = max / min - 1 over the runs;"
      f" details in {out}/*-predict.txt)")
PY
