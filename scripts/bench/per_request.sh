#!/usr/bin/env bash
# Client CPU per REQUEST (not per token): the peerbench mock server unpaced, 2-token outputs, so that each
# request's own work (building it, handing it to a connection, reading its head, the record, the next step)
# dominates. Runs the floor client and `loadshape replay` (each --http-client given) round after round and prints
# user+sys CPU seconds and microseconds per request for each run, then the medians.
#
#   LOADSHAPE_BIN=target/release/loadshape bash scripts/bench/per_request.sh
#   knobs: CONC (64), N (20000 requests), TOKENS (2 per request), ROUNDS (3), CLIENTS ("floor hyper reqwest"),
#   PORT (8011), LS_ARGS. A client `NAME@BINARY` runs another loadshape build with --http-client NAME;
#   `hyper-user` is the hyper path with --rx-clock user (frames timed when read, not by the kernel's timestamps).
# Needs the writable peerbench copy that scripts/bench_replay.sh builds ($PEERBENCH, default $HOME/peerbench).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PB=${PEERBENCH:-$HOME/peerbench}
LS_BIN=${LOADSHAPE_BIN:-$ROOT/target/release/loadshape}
CONC=${CONC:-64}
N=${N:-20000}
TOKENS=${TOKENS:-2}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-"floor hyper reqwest"}
PORT=${PORT:-8011}
OUT=${OUT:-$(mktemp -d)}
MOCK="$PB/mockserver/target/release/mockserver"
FLOOR="$PB/mockserver/target/release/floorclient"
[ -x "$MOCK" ] && [ -x "$FLOOR" ] || { echo "build peerbench first (scripts/bench_replay.sh)"; exit 1; }
sed -e "s/\"users\": 0/\"users\": $CONC/" -e "s/\"num_requests\": 0/\"num_requests\": $N/" \
  -e "s/\"tokens\": 256/\"tokens\": $TOKENS/" "$ROOT/scripts/bench/closed_loop.json" > "$OUT/scenario.json"
"$MOCK" --port "$PORT" --itl-ms 0 > "$OUT/mock.log" 2>&1 &
MOCK_PID=$!
trap 'kill $MOCK_PID 2> /dev/null' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.1; done
run() {  # client round -> prints "client round wall cpu us_per_request"
  local cl=$1 r=$2 bin=$LS_BIN hc=${1%%@*} rx=kernel
  [ "$cl" != "$hc" ] && bin=${cl#*@}
  [ "$hc" = hyper-user ] && hc=hyper && rx=user
  local lab; lab=$(printf '%s' "$cl" | tr -c 'A-Za-z0-9_' '_')
  case $cl in
    floor) /usr/bin/time -o "$OUT/${lab}.$r.time" -f "%e %U %S" "$FLOOR" --addr "127.0.0.1:$PORT" \
             --concurrency "$CONC" --requests "$N" --max-tokens "$TOKENS" > "$OUT/${lab}.$r.log" ;;
    *) # shellcheck disable=SC2086
       /usr/bin/time -o "$OUT/${lab}.$r.time" -f "%e %U %S" "$bin" replay --url "http://127.0.0.1:$PORT/v1" \
         --model mock-model --dialect vllm --quiet --metrics-url none --scenario "$OUT/scenario.json" \
         --http-client "$hc" --rx-clock "$rx" --out "$OUT/${lab}.$r.jsonl" ${LS_ARGS:-} > "$OUT/${lab}.$r.log" 2> "$OUT/${lab}.$r.err" ;;
  esac
  echo "$cl $r $(tail -1 "$OUT/${lab}.$r.time")" |
    awk -v n="$N" -v t="$TOKENS" '{cpu=$4+$5; printf "%s %s wall %.2f s cpu %.2f s %.1f us/request %.2f s/1M tokens\n",
      $1, $2, $3, cpu, cpu/n*1e6, cpu/(n*t)*1e6}'
}
for r in $(seq "$ROUNDS"); do for cl in $CLIENTS; do run "$cl" "$r"; done; done | tee "$OUT/runs.txt"
echo "medians (us per request; CPU-s per 1M tokens):"
for cl in $CLIENTS; do
  med() { grep -F "$cl " "$OUT/runs.txt" | grep "^$cl " | awk -v f="$1" '{print $(NF-f)}' | sort -n |
    awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  echo "$cl $(med 4) us/request; $(med 2) s/1M tokens"
done
echo "runs and logs: $OUT"
