#!/usr/bin/env bash
# Client CPU per 1M streamed tokens over TLS: `loadshape replay` against peerbench's mock server directly (http,
# hyper) and through a socat TLS front with the test certificates (https: hyper, reqwest), ROUNDS rounds alternated.
# Closed loop c=64, 2,000 requests of 256 tokens at 5 ms pacing (scripts/bench/closed_loop.json). Needs socat and a
# built peerbench copy (run scripts/bench_replay.sh once). The front forks per connection, so its TTFTs say nothing
# about the client; only the CPU lines matter.
#
#   ROUNDS=5 bash scripts/bench/tls_cpu.sh
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PB="${PEERBENCH:-$HOME/peerbench}"
FX="$ROOT/agent/tests/fixtures/tls"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/loadshape-target}"
LS="${LOADSHAPE_BIN:-$CARGO_TARGET_DIR/release/loadshape}"
command -v socat > /dev/null || { echo "needs socat (apt-get install socat)"; exit 1; }
(cd "$ROOT" && cargo build --release -q -p loadshape) || exit 1
work=$(mktemp -d)
"$PB/mockserver/target/release/mockserver" --port 8000 --itl-ms 5 > "$work/mock.log" 2>&1 &
mock=$!
socat "OPENSSL-LISTEN:8443,reuseaddr,fork,backlog=1024,cert=$FX/server.pem,key=$FX/server.key,verify=0,nodelay" \
  TCP:127.0.0.1:8000,nodelay 2> "$work/socat.log" &
front=$!
trap 'kill $front $mock 2> /dev/null; rm -rf "$work"' EXIT
sleep 1
sed -e 's/"users": 0/"users": 64/' -e 's/"num_requests": 0/"num_requests": 2000/' \
  "$ROOT/scripts/bench/closed_loop.json" > "$work/sc.json"
for r in $(seq "${ROUNDS:-3}"); do
  for cfg in "http hyper" "https hyper" "https reqwest"; do
    read -r scheme client <<< "$cfg"
    port=8000; [ "$scheme" = https ] && port=8443
    /usr/bin/time -f "%U %S" -o "$work/t.txt" "$LS" replay --url "$scheme://127.0.0.1:$port/v1" --model mock-model \
      --dialect vllm --quiet --metrics-url none --scenario "$work/sc.json" --out "$work/out.jsonl" \
      --http-client "$client" --ca-cert "$FX/ca.pem" > /dev/null 2> "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
    read -r user sys < "$work/t.txt"
    python3 - "$work/out.jsonl" "$user" "$sys" "r$r $scheme $client" <<'PY'
import json, sys
toks = sum(json.loads(l)["gen_tokens"] for l in open(sys.argv[1]) if l.strip())
print(f"{sys.argv[4]}: {toks} tokens, {(float(sys.argv[2]) + float(sys.argv[3])) / toks * 1e6:.1f} CPU-s per 1M tokens")
PY
  done
done
