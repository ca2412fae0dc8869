# shellcheck shell=bash
# Sourced by the real-server benchmarks (scripts/bench_fidelity.sh, bench_spec.sh, bench_transfer.sh), after
# scripts/env.sh and with OUT, SLOTS and NICE set: llama-server's paths, the release binary, a fresh llama-server per
# run on 127.0.0.1 (ended by its PID when the script exits) and the session scenarios the benchmarks predict.
#   B ARGS...                         loadshape at NICE (LOADSHAPE_BIN, else the release build, built here)
#   llama_start MODEL [FLAGS...]      a fresh llama-server of MODEL on $port ($url), waited for until healthy
#   session_scenario NAME SESSIONS BASE STEPS [GEN]   $OUT/NAME.json on $OUT/cal/profile.json

eval "$(bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh" --paths)"
if [ ! -x "$LLAMA_SERVER" ] || [ ! -f "$LLAMA_MODEL" ] || [ ! -f "$LLAMA_DRAFT_MODEL" ]; then
  bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh" >/dev/null
fi
if [ -z "${LOADSHAPE_BIN:-}" ]; then
  (cd "$LOADSHAPE_ROOT" && cargo build --release --locked -q -p loadshape)
  LOADSHAPE_BIN="$CARGO_TARGET_DIR/release/loadshape"
fi
# NICE < 0 (as root) runs the server and the client ahead of other work on a shared machine: the fit and the live
# runs must see the same machine, and a build running beside one of them but not the other decides the result.
B() { nice -n "$NICE" "$LOADSHAPE_BIN" "$@"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/v1"
llama=""
trap '[ -n "$llama" ] && kill $llama 2>/dev/null || true' EXIT
# A fresh server for the probe and for every live run: the simulator starts from an idle server whose slots have
# never been used, and llama-server gives a request the least recently used free slot and processes prompts in
# slot order, so which slot each of a scenario's first prompts lands on (and so which of them waits for the
# others) depends on what ran before. On a server left by earlier runs the first of four cold 5,000-token prompts
# came first (slot 0) where a fresh one serves it last (slot 3): its TTFT 1.8 s against 6.8 s.
llama_start() { # MODEL [MORE llama-server FLAGS...]
  local model=$1
  shift
  if [ -n "$llama" ]; then kill "$llama" 2>/dev/null || true; wait "$llama" 2>/dev/null || true; fi
  nice -n "$NICE" "$LLAMA_SERVER" -m "$model" --alias tiny --host 127.0.0.1 --port "$port" -c 32768 \
    --parallel "$SLOTS" --threads 1 --threads-batch 1 --metrics --slots "$@" >>"$OUT/llama.log" 2>&1 &
  llama=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    if ! kill -0 "$llama" 2>/dev/null; then
      if grep -q "failed to load draft model" "$OUT/llama.log"; then
        echo "llama-server refused the draft model:" >&2
      else
        echo "llama-server exited:" >&2
      fi
      grep ' E ' "$OUT/llama.log" >&2 || tail -5 "$OUT/llama.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "llama-server did not become healthy (see $OUT/llama.log)" >&2
  exit 1
}

# Sessions of fixed shapes (`ladder`, BASE:STEPS per session): the `sessions` workload's own draw clamps every base
# to >= 4,000 tokens (the seed's agent_replay.py), which would make short and long scenarios alike.
session_scenario() { # NAME SESSIONS BASE STEPS [GEN_TOKENS (64)]
  local ladder
  ladder=$(python3 -c "print(','.join(['$3:$4'] * $2))")
  cat >"$OUT/$1.json" <<JSON
{"model": "engine",
 "workload": {"kind": "sessions", "ladder": "$ladder", "gen_tokens": ${5:-64},
              "tool_tokens": 200, "think_s": 0.5, "stagger_s": 0.5, "duration_s": 600.0},
 "profile": $(cat "$OUT/cal/profile.json"),
 "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 7}
JSON
}
