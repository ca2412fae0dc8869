#!/usr/bin/env bash
# CPU per streamed token and client-added timing error of `loadshape replay`, beside the peerbench floor client
# (and the seed), on peerbench's mock server. A copy of peerbench's run_all.sh with `loadshape` added as a client;
# peerbench itself (../shared/peerbench) stays untouched: it is copied to $PEERBENCH (default $HOME/peerbench).
#
#   bash scripts/bench_replay.sh                         # CLIENTS="floor loadshape" CONCS="64 256" PACED_CONCS="64 256"
#   CLIENTS="seed floor loadshape" REPEAT=3 bash scripts/bench_replay.sh   # medians of 3 in $RESULTS/medians.md
#   STREAMS=1024 bash scripts/bench_replay.sh            # + one loadshape run at 1,024 concurrent streams
#   RT=1 ...                                             # paced runs at real-time priority (see below)
#   PIN=1 ...                                            # paced runs: mock server on CPU 0, client on CPU 1
#   LS_ARGS="--threads 2" ...                            # extra arguments for loadshape replay
#   CLIENTS="floor loadshape lsreqwest" ...              # lsreqwest: loadshape with --http-client reqwest
#   CLIENTS="floor loadshape lsuser" ...                 # lsuser: loadshape with --rx-clock user (frames timed when
#                                                        # the task reads them, not by the kernel's receive time)
#   CLIENTS="floor vllm loadshape" ...                   # vllm: `vllm bench serve` from PyPI's vllm, installed by
#                                                        # peerbench's install_peers.sh (a ~9 GB virtualenv, once)
#
# Peers come from a package registry only. The figures of vLLM's Rust client `vllm-bench`, built from a source
# tarball, are kept as a dated measurement in docs/measurements.md.
#
# loadshape runs a closed-loop scenario (scripts/bench/closed_loop.json with users/num_requests filled in): fixed
# 32-token prompts and 256 output tokens, like the floor client. Results: $PEERBENCH/$RESULTS/summary.md.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PB="${PEERBENCH:-$HOME/peerbench}"
SRC="${PEERBENCH_SRC:-$ROOT/../shared/peerbench}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loadshape-target}"
LS_BIN="${LOADSHAPE_BIN:-$CARGO_TARGET_DIR/release/loadshape}"
if [ ! -d "$PB" ]; then cp -r "$SRC" "$PB" && chmod -R u+w "$PB"; fi
(cd "$ROOT" && cargo build --release -q -p loadshape) || { echo "loadshape release build failed"; exit 1; }
cd "$PB"
ulimit -n 20000
PORT=${PORT:-8000}
RESULTS=${RESULTS:-results}
CLIENTS=${CLIENTS:-"floor loadshape"}
CONCS=${CONCS:-"64 256"}
PACED_CONCS=${PACED_CONCS:-"64 256"}
ITL_MS=${ITL_MS:-5}
REPEAT=${REPEAT:-1}
SEED="${SEED_CLIENT:-$ROOT/../shared/seeds/agent_replay.py}"
BASE=http://127.0.0.1:$PORT
mkdir -p "$RESULTS"/client logs configs
CMDLOG="$RESULTS/commands.txt"

# Two small patches, applied to the writable copy only (fresh from $SRC each time; files rewritten only when they
# change, so cargo rebuilds only then):
# - scripts/bench/floorclient_ttft.patch: the floor client prints only its mean TTFT; the patch adds its p50/p90/p99/
#   max (one f64 per request, collected after the stream ends) and, with FLOOR_TTFT_OUT=PATH, writes every
#   (start, TTFT) pair, so the floor's tail can be shown beside loadshape's;
# - scripts/bench/mockserver_ttft.patch: `mockserver --ttft-log PATH` stamps each request's arrival with the kernel's
#   receive time (SO_TIMESTAMPNS) and writes [arrival, server read, first frame out] per stream request, so each
#   request's TTFT splits into the server's part and the client's (scripts/bench/client_added.py).
patched=$(mktemp -d)
mkdir -p "$patched/mockserver/src/bin"
cp "$SRC/mockserver/src/main.rs" "$patched/mockserver/src/main.rs"
cp "$SRC/mockserver/src/bin/floorclient.rs" "$patched/mockserver/src/bin/floorclient.rs"
(cd "$patched" && patch -s -p1 < "$ROOT/scripts/bench/floorclient_ttft.patch" \
  && patch -s -p1 < "$ROOT/scripts/bench/mockserver_ttft.patch") || { echo "peerbench patches failed"; exit 1; }
for f in main.rs bin/floorclient.rs; do
  cmp -s "$patched/mockserver/src/$f" "mockserver/src/$f" || cp "$patched/mockserver/src/$f" "mockserver/src/$f"
done
rm -rf "$patched"
(cd mockserver && CARGO_TARGET_DIR=target cargo build --release -q) || { echo "mock server build failed"; exit 1; }
# vLLM's `vllm bench serve`, from PyPI, in peerbench's own virtualenv (installed once).
if [[ " $CLIENTS " == *" vllm "* ]] && [ ! -x venvs/vllm/bin/vllm ]; then
  bash install_peers.sh || { echo "installing the peers (install_peers.sh) failed: see logs/"; exit 1; }
fi
# measure.py needs psutil: a small venv unless the system python has it.
if python3 -c 'import psutil' 2> /dev/null; then PY=python3; else
  [ -x venvs/tools/bin/python ] || { python3 -m venv venvs/tools && venvs/tools/bin/pip install -q psutil; }
  PY=venvs/tools/bin/python
fi

# RT=1: the paced runs (mock server and client alike) run under `chrt -f 10` (SCHED_FIFO), so that other work on a
# shared machine cannot delay them: on the 2-core build machine, with other agents compiling, the floor client's
# TTFT p99 at c=256 was 15-30 ms at normal priority and 8-9 ms at real-time priority. It measures what the client
# adds on a machine with nothing else running. Needs CAP_SYS_NICE; the unpaced runs (which saturate the cores) stay
# at normal priority.
RT=${RT:-}
# PIN=1: the paced runs' mock server runs on CPU 0 and the client on CPU 1 (taskset), so neither waits for the
# other's thread; with RT=1 as well, each owns its core against normal-priority work.
PIN=${PIN:-}
prio() {  # itl_ms [server|client] -> the command prefix for that case
  local pre=""
  if [ -n "$RT" ] && [ "$1" != 0 ]; then pre="chrt -f 10"; fi
  if [ -n "$PIN" ] && [ "$1" != 0 ]; then pre="taskset -c $([ "${2:-client}" = server ] && echo 0 || echo 1) $pre"; fi
  echo "$pre"
}

SERVER_PID=""
start_server() {  # itl_ms label
  # Paced runs log each request's server-side times (the mockserver patch above).
  local log=(); [ "$1" != 0 ] && log=(--ttft-log "$RESULTS/client/$2.server_ttft.txt")
  $(prio "$1" server) ./mockserver/target/release/mockserver --port "$PORT" --itl-ms "$1" "${log[@]}" \
    > "$RESULTS/client/$2.server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 50); do curl -sf "$BASE/health" > /dev/null && return 0; sleep 0.1; done
  echo "mock server did not come up"; return 1
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2> /dev/null; wait "$SERVER_PID" 2> /dev/null; SERVER_PID=""; fi
}
trap stop_server EXIT INT TERM

nreq() { case $1 in 1) echo 2000 ;; 1024) echo 8192 ;; *) echo 6000 ;; esac; }
seed_steps() { case $1 in 1) echo 200 ;; 16) echo 60 ;; 64) echo 30 ;; 256) echo 10 ;; 1024) echo 4 ;; *) echo 10 ;; esac; }

scenario() {  # users nreq -> path of a closed-loop scenario file
  local f="configs/loadshape_c$1_n$2.json"
  sed -e "s/\"users\": 0/\"users\": $1/" -e "s/\"num_requests\": 0/\"num_requests\": $2/" \
    "$ROOT/scripts/bench/closed_loop.json" > "$f"
  echo "$f"
}

client_cmd() {  # client conc nreq label -> prints argv, one per line
  local cl=$1 c=$2 n=$3 label=$4
  case $cl in
    seed)
      local s; s=$(seed_steps "$c")
      printf '%s\n' python3 "$SEED" --url "$BASE/v1" --model mock-model --out "$RESULTS/client/$label.jsonl" \
        --sessions "$c" --steps "$s" --think 0 --stagger 0 --gen 256 --tool 10 --base 100 --spread 0 \
        --max-seconds 300 ;;
    floor)
      printf '%s\n' mockserver/target/release/floorclient --addr "127.0.0.1:$PORT" --concurrency "$c" \
        --requests "$n" --max-tokens 256 ;;
    vllm)  # --save-detailed keeps per-request TTFT/ITL/start times (its full records); client_added.py joins them
      # with the server's log. `vllm bench serve` sends one ready-check request first, which the join skips.
      printf '%s\n' venvs/vllm/bin/vllm bench serve --backend openai --base-url "$BASE" --endpoint /v1/completions \
        --model mock-model --tokenizer "$PB/tokenizer" --dataset-name random --random-input-len 32 \
        --random-output-len 256 --ignore-eos --num-prompts "$n" --max-concurrency "$c" --request-rate inf \
        --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --disable-tqdm --seed 42 \
        --save-result --save-detailed --result-dir "$RESULTS/client" --result-filename "$label.vllm.json" ;;
    loadshape|lsreqwest|lsuser)  # full per-request records, usage, ITL summaries, scraping off (the mock has no /metrics)
      printf '%s\n' "$LS_BIN" replay --url "$BASE/v1" --model mock-model --dialect vllm --quiet \
        --metrics-url none --match-tokenizer off --scenario "$(scenario "$c" "$n")" --out "$RESULTS/client/$label.jsonl"
      # lsreqwest: the same through reqwest (`loadshape` uses the default, hyper for http://).
      [ "$cl" = lsreqwest ] && printf '%s\n' --http-client reqwest
      # lsuser: the same binary with user-space frame times (the default is the kernel's receive time).
      [ "$cl" = lsuser ] && printf '%s\n' --rx-clock user
      # shellcheck disable=SC2086
      [ -n "${LS_ARGS:-}" ] && printf '%s\n' ${LS_ARGS} ;;
  esac
}

run_one() {  # client conc itl_ms nreq label
  local cl=$1 c=$2 itl=$3 n=$4 label=$5
  rm -f "$RESULTS/client/$label".*
  start_server "$itl" "$label" || return 1
  mapfile -t argv < <(client_cmd "$cl" "$c" "$n" "$label")
  local pre; read -r -a pre <<< "$(prio "$itl")"
  printf '%s itl=%sms: %s\n' "$label" "$itl" "${pre[*]} ${argv[*]}" >> "$CMDLOG"
  echo "== $label (itl ${itl} ms)"
  FLOOR_TTFT_OUT="$RESULTS/client/$label.client_ttft.txt" $PY tools/measure.py --label "$label" --server "$BASE" --timeout 400 \
    --out "$RESULTS/$label.json" --log "$RESULTS/client/$label.log" -- "${pre[@]}" "${argv[@]}"
  stop_server
  sleep 1
}

: > "$CMDLOG"
for r in $(seq "$REPEAT"); do
  sfx=""; [ "$REPEAT" -gt 1 ] && sfx="_r$r"
  if [ -z "${SKIP_ZERO:-}" ]; then
    for cl in $CLIENTS; do for c in $CONCS; do
      run_one "$cl" "$c" 0 "$(nreq "$c")" "${cl}_c${c}_itl0$sfx"
    done; done
  fi
  if [ -z "${SKIP_PACED:-}" ]; then
    for cl in $CLIENTS; do for c in $PACED_CONCS; do
      n=$(( c == 64 ? 2000 : 4000 ))
      run_one "$cl" "$c" "$ITL_MS" "$n" "${cl}_c${c}_itl${ITL_MS}$sfx"
    done; done
  fi
done
if [ -n "${STREAMS:-}" ]; then
  run_one loadshape "$STREAMS" "$ITL_MS" "$((STREAMS * 4))" "loadshape_c${STREAMS}_itl${ITL_MS}"
fi
# loadshape's own numbers (TTFT/TPOT/ITL from its records, the same scoring module as everything else).
for f in "$RESULTS"/client/loadshape_*.jsonl "$RESULTS"/client/lsreqwest_*.jsonl "$RESULTS"/client/lsuser_*.jsonl; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f" .jsonl): $("$LS_BIN" report "$f" --json | $PY -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print("completed %d failed %d ttft mean %.3f p99 %.3f ms; tpot mean %.4f ms; itl p99 %s ms" % (s["completed"], s["failed"], s["ttft_mean_ms"], s["ttft_p99_ms"], s["tpot_mean_ms"], s["itl_p99_ms"]))')"
done
$PY tools/summarize.py "$RESULTS"
# Medians over the repeats, loadshape / floor ratios and the paced TTFT figures (scripts/bench/medians.py).
$PY "$ROOT/scripts/bench/medians.py" "$RESULTS" | tee "$RESULTS/medians.md"
# Per request: TTFT = the server's part (arrival -> first frame out, by the server's clocks) + the client's part.
$PY "$ROOT/scripts/bench/client_added.py" "$RESULTS" | tee -a "$RESULTS/medians.md"
echo "summary: $PB/$RESULTS/summary.md; medians: $PB/$RESULTS/medians.md"
