#!/usr/bin/env bash
# The seed's own client (agent_replay.py, unchanged) against `loadshape sim-server`: it must complete every step of
# every session with correct counts (gen_tokens == asked_tokens: min_tokens is honoured and usage is reported).
# Skips (exit 0, with a message) when python3 or the seed is missing.
#   LOADSHAPE_BIN=path/to/loadshape SEED_DIR=path/to/seeds bash tests/seed_client_compat.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SEED_DIR="${SEED_DIR:-$ROOT/../shared/seeds}"
BIN="${LOADSHAPE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/loadshape}"
if ! command -v python3 > /dev/null; then
  echo "SKIP seed_client_compat: python3 is not installed"; exit 0
fi
if [ ! -f "$SEED_DIR/agent_replay.py" ]; then
  echo "SKIP seed_client_compat: no agent_replay.py in $SEED_DIR (set SEED_DIR)"; exit 0
fi
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (cargo build -p loadshape, or set LOADSHAPE_BIN)"; exit 1; }

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2> /dev/null || true; wait "$SERVER_PID" 2> /dev/null || true; fi; rm -rf "$WORK"; }
trap cleanup EXIT

"$BIN" sim-server --port 0 > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
URL=""
for _ in $(seq 100); do
  URL="$(sed -n 's/.*OpenAI base URL \(http[^)]*\)).*/\1/p' "$WORK/server.log")"
  [ -n "$URL" ] && break
  sleep 0.05
done
[ -n "$URL" ] || { echo "FAIL: sim-server did not start"; cat "$WORK/server.log"; exit 1; }

timeout 120 python3 "$SEED_DIR/agent_replay.py" --url "$URL" --model sim --sessions 2 --steps 3 --think 0.2 \
  --stagger 0.1 --max-seconds 60 --out "$WORK/x.jsonl" --base 4000 --gen 64 --tool 100 > "$WORK/seed.log" 2>&1 \
  || { echo "FAIL: the seed client exited non-zero"; cat "$WORK/seed.log"; exit 1; }

python3 - "$WORK/x.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sessions = {}
for r in recs:
    sessions.setdefault((r["session"], r["inst"]), []).append(r)
errors = []
if len(sessions) != 2:
    errors.append(f"expected 2 sessions, got {len(sessions)}")
for key, rs in sessions.items():
    if len(rs) != rs[0]["steps_asked"]:
        errors.append(f"session {key}: {len(rs)} records for {rs[0]['steps_asked']} steps")
for r in recs:
    if not r["ok"]:
        errors.append(f"failed record {r}")
    elif r["gen_tokens"] != r["asked_tokens"] or r["sse_frames"] != r["asked_tokens"] or not r["prompt_tokens"]:
        errors.append(f"wrong counts {r}")
if errors:
    print("FAIL seed_client_compat:\n  " + "\n  ".join(errors)); sys.exit(1)
print(f"seed_client_compat: {len(recs)} records, {len(sessions)} sessions, gen_tokens == asked_tokens in every one")
print("1 passed, 0 failed")
PY
