# shellcheck shell=bash
# Sourced by the benchmarks after scripts/env.sh, with OUT set: the release binary, the emulated engine on a free
# port, and the session scenarios the fidelity benchmarks predict (scripts/realserver/bench_lib.sh adds a real
# llama-server).
#   B ARGS...                         loadshape at NICE (0 unless set; LOADSHAPE_BIN, else the release build, built here)
#   sim_server_start PROFILE_FILE     `sim-server --profile-file` on $port ($url), ended by its PID when the script exits
#   wait_idle                         until the server at $url reports nothing running or waiting (its /metrics, vLLM's
#                                     or llama.cpp's names), at most 60 s: a request `calibrate` cut at its end is
#                                     still in the engine's step, and a measured run must not start beside it
#   session_scenario NAME SESSIONS BASE STEPS [GEN_TOKENS (64)] [PROFILE_FILE ($OUT/cal/profile.json)]
#                                     $OUT/NAME.json: SESSIONS sessions of BASE tokens and STEPS steps each

NICE="${NICE:-0}"
if [ -z "${LOADSHAPE_BIN:-}" ]; then
  (cd "$LOADSHAPE_ROOT" && cargo build --release --locked -q -p loadshape)
  LOADSHAPE_BIN="$CARGO_TARGET_DIR/release/loadshape"
fi
# NICE < 0 (as root) runs the server and the client ahead of other work on a shared machine: the fit and the live
# runs must see the same machine, and a build running beside one of them but not the other decides the result.
B() { nice -n "$NICE" "$LOADSHAPE_BIN" "$@"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/v1"

sim_server_start() { # PROFILE_FILE
  # Not through B: a function sent to the background is a subshell, and its PID is not the server's to end.
  nice -n "$NICE" "$LOADSHAPE_BIN" sim-server --port "$port" --profile-file "$1" >"$OUT/sim-server.log" 2>&1 &
  sim_server=$!
  trap 'kill $sim_server 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    curl -sf "$url/models" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "sim-server did not answer (see $OUT/sim-server.log)" >&2
  exit 1
}

# The machine's 1-minute load average, printed beside each phase: a build sharing the cores with the probe or the
# live runs (and not the other) moves the results more than the goals allow, so the record says when it happened.
load_now() { cut -d' ' -f1 /proc/loadavg; }

wait_idle() {
  local origin=${url%/v1} busy
  for _ in $(seq 1 600); do
    busy=$(curl -sf "$origin/metrics" | awk '
      $1 ~ /^vllm:num_requests_(running|waiting)[{ ]/ || $1 ~ /^vllm:num_requests_(running|waiting)$/ { n += $2 }
      $1 ~ /^llamacpp:requests_(processing|deferred)$/ { n += $2 }
      END { print n + 0 }') || busy=0
    [ "$busy" = 0 ] && return 0
    sleep 0.1
  done
  echo "the server at $url is still busy after 60 s ($busy requests): going on" >&2
}

# Sessions of fixed shapes (`ladder`, BASE:STEPS per session): the `sessions` workload's own draw clamps every base
# to >= 4,000 tokens (the seed's agent_replay.py), which would make short and long scenarios alike.
session_scenario() { # NAME SESSIONS BASE STEPS [GEN_TOKENS (64)] [PROFILE_FILE]
  local ladder
  ladder=$(python3 -c "print(','.join(['$3:$4'] * $2))")
  cat >"$OUT/$1.json" <<JSON
{"model": "engine",
 "workload": {"kind": "sessions", "ladder": "$ladder", "gen_tokens": ${5:-64},
              "tool_tokens": 200, "think_s": 0.5, "stagger_s": 0.5, "duration_s": 600.0},
 "profile": $(cat "${6:-$OUT/cal/profile.json}"),
 "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "seed": 7}
JSON
}
