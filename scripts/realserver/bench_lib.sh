# shellcheck shell=bash
# Sourced by the real-server benchmarks (scripts/bench_fidelity.sh, bench_spec.sh, bench_transfer.sh), after
# scripts/env.sh and with OUT, SLOTS and NICE set: scripts/bench_lib.sh (B, $port and $url, session_scenario), then
# llama-server's paths and a fresh llama-server per run on 127.0.0.1 (ended by its PID when the script exits).
#   llama_start MODEL [FLAGS...]      a fresh llama-server of MODEL on $port ($url), waited for until healthy

source "$LOADSHAPE_ROOT/scripts/bench_lib.sh"
eval "$(bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh" --paths)"
if [ ! -x "$LLAMA_SERVER" ] || [ ! -f "$LLAMA_MODEL" ] || [ ! -f "$LLAMA_DRAFT_MODEL" ]; then
  bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh" >/dev/null
fi

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
