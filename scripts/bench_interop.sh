#!/usr/bin/env bash
# Interop check (issue #46): install the peers that come from PyPI (AIPerf, GuideLLM, inference-perf), run each
# against `loadshape sim-server --request-log`, `loadshape import` what it wrote, and check the imported records
# against the server's own per-request log: request counts equal, prompt and output token sums equal, and each
# request's TTFT at least the server's (arrival → first frame handed over) and not far beyond it (every tool times
# TTFT from its send to the first content chunk, as loadshape does). Prints one line per tool with the figures that
# go in docs/measurements.md. A script, not a test: the installs take minutes and 6.5 GB (torch, which GuideLLM
# imports); the files it produces are small, and those committed as fixtures (agent/tests/fixtures/interop/) are
# what the suite reads.
#
#   scripts/bench_interop.sh
#   env: OUT=dir (default ${TMPDIR:-/tmp}/loadshape-interop), VENV=the peers' virtualenv (default ~/.cache/loadshape-peers;
#        kept between runs), VENV_IP=inference-perf's (it pins other versions; default VENV-ip), PY=a python >= 3.12
#        (default python3.12), PORT=sim-server's port (18431), LOADSHAPE_BIN=a built binary, N=requests per tool
#        (8), CALIBRATE=1 also runs the three AIPerf runs against a known profile that
#        agent/tests/interop_cli.rs calibrates from (a few minutes), into OUT/calibrate/, FIXTURES=a folder (e.g.
#        agent/tests/fixtures/interop) to copy the tools' files and the server's logs into, with the absolute path of
#        OUT written as `OUT` in them (the suite's fixtures were made so).
# No hub is reachable here: the peers get a word-level tokenizer made in OUT/tok (every `w123` word one token, as
# the sim-server counts it), also laid out as a Hugging Face cache entry (`local/wordtok`) because AIPerf refuses a
# local tokenizer folder when HF_HUB_OFFLINE is set. GuideLLM's synthetic prompts are made of its tokenizer's
# vocabulary, which a word-level one shrinks, so it reads its prompts from a JSONL file instead.
# The server runs on 127.0.0.1 only and is ended (by its PID) when the script exits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${OUT:-${TMPDIR:-/tmp}/loadshape-interop}"
VENV="${VENV:-$HOME/.cache/loadshape-peers}"
VENV_IP="${VENV_IP:-$VENV-ip}"
PY="${PY:-python3.12}"
PORT="${PORT:-18431}"
N="${N:-8}"
if [ -z "${LOADSHAPE_BIN:-}" ]; then
  cargo build --locked -q -p loadshape
  LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape"
fi
B="$LOADSHAPE_BIN"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

step "install the peers (kept in $VENV, $VENV_IP)"
if [ ! -x "$VENV/bin/aiperf" ] || [ ! -x "$VENV/bin/guidellm" ]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q aiperf==0.13.0
  # GuideLLM 0.8.1 imports torch for its data loader; PyPI's Linux torch brings its CUDA wheels (≈ 5 GB).
  "$VENV/bin/pip" install -q guidellm==0.8.1 torch
fi
if [ ! -x "$VENV_IP/bin/inference-perf" ]; then
  # inference-perf 0.7.0 pins aiofiles >= 25 where AIPerf pins 24: a virtualenv of its own.
  "$PY" -m venv "$VENV_IP"
  "$VENV_IP/bin/pip" install -q inference-perf==0.7.0
fi
AIPERF_V=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aiperf"))')
GUIDELLM_V=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("guidellm"))')
IP_V=$("$VENV_IP/bin/python" -c 'import importlib.metadata as m; print(m.version("inference-perf"))')
echo "aiperf $AIPERF_V, guidellm $GUIDELLM_V, inference-perf $IP_V"

step "word-level tokenizer"
if [ ! -f "$OUT/tok/tokenizer.json" ]; then
  "$VENV/bin/python" - "$OUT/tok" <<'PY'
import json, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
out = sys.argv[1]
vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "<pad>"])}
for i in range(4000):
    vocab[f"w{i}"] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>", model_max_length=1 << 20)
fast.save_pretrained(out)
cfg_path = os.path.join(out, "tokenizer_config.json")
cfg = json.load(open(cfg_path))
cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
json.dump(cfg, open(cfg_path, "w"), indent=2)
PY
  snap="$OUT/hf/hub/models--local--wordtok/snapshots/0000000000000000000000000000000000000000"
  mkdir -p "$snap" "$OUT/hf/hub/models--local--wordtok/refs"
  printf 0000000000000000000000000000000000000000 > "$OUT/hf/hub/models--local--wordtok/refs/main"
  cp "$OUT"/tok/* "$snap/"
fi
export HF_HOME="$OUT/hf" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

SERVER_PID=
stop_server() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; fi; }
trap stop_server EXIT
# start_server LOG [sim-server flags]: a fresh server per run, so that its log holds that run's requests only.
start_server() {
  local log=$1; shift
  stop_server
  "$B" sim-server --port "$PORT" --request-log "$log" "$@" > "$log.out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0; sleep 0.1; done
  echo "sim-server did not start: $(cat "$log.out")" >&2; return 1
}
URL="http://127.0.0.1:$PORT"

# check TOOL RECORDS.jsonl SERVER_LOG: the imported records against the server's log.
check() {
  "$VENV/bin/python" - "$@" <<'PY'
import json, statistics, sys
tool, recs_path, log_path = sys.argv[1:4]
recs = [json.loads(l) for l in open(recs_path) if l.strip()]
log = [json.loads(l) for l in open(log_path) if l.strip()]
ok = sorted((r for r in recs if r["ok"]), key=lambda r: r["t_submit"])
done = sorted((l for l in log if l["completed"]), key=lambda l: l["t_arrival_s"])
problems = []
if len(ok) != len(done):
    problems.append(f"{len(ok)} ok records, {len(done)} completed requests in the server's log")
sp, cp = sum(l["prompt_tokens"] for l in done), sum(r["prompt_tokens"] or 0 for r in ok)
so, co = sum(l["output_tokens"] for l in done), sum(r["gen_tokens"] for r in ok)
if sp != cp: problems.append(f"prompt tokens: records {cp}, server {sp}")
if so != co: problems.append(f"output tokens: records {co}, server {so}")
# Pair by send order, up to two places apart (concurrent streams send at once), and prompt length.
diffs, mismatched, used = [], 0, set()
for i, r in enumerate(ok):
    js = [j for j in range(max(0, i - 2), min(len(done), i + 3)) if j not in used and done[j]["prompt_tokens"] == r["prompt_tokens"]]
    if not js:
        mismatched += 1
        continue
    used.add(js[0])
    l = done[js[0]]
    diffs.append((r["ttft_s"] - (l["t_first_token_s"] - l["t_arrival_s"])) * 1e3)
below = [d for d in diffs if d < -1.0]
if below: problems.append(f"{len(below)} TTFT(s) more than 1 ms below the server's (min {min(below):.2f} ms)")
q = statistics.quantiles(diffs, n=100, method="inclusive") if len(diffs) > 1 else diffs * 99
print(f"{tool}: {len(ok)} requests, prompt tokens {cp}, output tokens {co} (server: {len(done)}, {sp}, {so}); "
      f"TTFT − server's: median {statistics.median(diffs):.2f} ms, p90 {q[89]:.2f} ms, max {max(diffs):.2f} ms "
      f"over {len(diffs)} paired by send order and prompt length ({mismatched} unpaired)"
      + ("" if not problems else "; PROBLEMS: " + "; ".join(problems)))
sys.exit(1 if problems else 0)
PY
}

fail=0
step "AIPerf $AIPERF_V"
start_server "$OUT/aiperf.server.jsonl"
rm -rf "$OUT/aiperf"
"$VENV/bin/aiperf" profile --model sim --url "$URL" --endpoint-type completions --streaming \
  --tokenizer local/wordtok --prompt-corpus random --synthetic-input-tokens-mean 120 --synthetic-input-tokens-stddev 50 \
  --output-tokens-mean 16 --output-tokens-stddev 0 --extra-inputs ignore_eos:true --concurrency 2 --request-count "$N" \
  --artifact-dir "$OUT/aiperf" --ui-type none > "$OUT/aiperf.log" 2>&1
stop_server
"$B" import "$OUT/aiperf/profile_export.jsonl" --out "$OUT/aiperf.jsonl" 2>/dev/null
check "aiperf $AIPERF_V" "$OUT/aiperf.jsonl" "$OUT/aiperf.server.jsonl" || fail=1
# Multi-turn: 3 conversations of 3 turns on the chat endpoint, each turn resending the history (the prefix cache hits).
start_server "$OUT/aiperf-multiturn.server.jsonl"
rm -rf "$OUT/aiperf-multiturn"
"$VENV/bin/aiperf" profile --model sim --url "$URL" --endpoint-type chat --streaming --tokenizer local/wordtok \
  --prompt-corpus random --synthetic-input-tokens-mean 100 --synthetic-input-tokens-stddev 0 --output-tokens-mean 16 \
  --output-tokens-stddev 0 --extra-inputs ignore_eos:true --concurrency 2 --conversation-num 3 \
  --conversation-turn-mean 3 --conversation-turn-stddev 0 --request-count 9 --artifact-dir "$OUT/aiperf-multiturn" \
  --ui-type none > "$OUT/aiperf-multiturn.log" 2>&1
stop_server
"$B" import "$OUT/aiperf-multiturn/profile_export.jsonl" --out "$OUT/aiperf-multiturn.jsonl" 2>/dev/null
check "aiperf $AIPERF_V multi-turn" "$OUT/aiperf-multiturn.jsonl" "$OUT/aiperf-multiturn.server.jsonl" || fail=1

step "GuideLLM $GUIDELLM_V"
"$VENV/bin/python" - "$OUT/prompts.jsonl" "$N" <<'PY'
import json, random, sys
random.seed(46)
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        n = random.randint(40, 200)
        f.write(json.dumps({"prompt": " ".join(f"w{random.randrange(4000)}" for _ in range(n)),
                            "output_tokens_count": 16}) + "\n")
PY
start_server "$OUT/guidellm.server.jsonl"
rm -rf "$OUT/guidellm"
"$VENV/bin/guidellm" run --backend "kind=openai_http,target=$URL,model=sim,request_format=/v1/completions" \
  --profile kind=concurrent,streams=2 --constraint "kind=max_requests,count=$N" \
  --data "kind=json_file,path=$OUT/prompts.jsonl" --tokenizer "kind=huggingface_auto,model=$OUT/tok" \
  --output "kind=json,path=$OUT/guidellm/benchmarks.json" --disable-console-interactive > "$OUT/guidellm.log" 2>&1
stop_server
"$B" import "$OUT/guidellm/benchmarks.json" --out "$OUT/guidellm.jsonl" 2>/dev/null
check "guidellm $GUIDELLM_V" "$OUT/guidellm.jsonl" "$OUT/guidellm.server.jsonl" || fail=1

step "inference-perf $IP_V"
cat > "$OUT/inference-perf.yaml" <<EOF
api: {type: completion, streaming: true}
data:
  type: random
  input_distribution: {min: 40, max: 200, mean: 120, std_dev: 50, total_count: $N}
  output_distribution: {min: 16, max: 16, mean: 16, std_dev: 0, total_count: $N}
load:
  type: concurrent
  stages: [{num_requests: $N, concurrency_level: 2}]
  base_seed: 46
server: {type: vllm, model_name: sim, base_url: "$URL", ignore_eos: true}
tokenizer: {pretrained_model_name_or_path: $OUT/tok}
report:
  request_lifecycle: {summary: true, per_stage: true, per_request: true}
storage:
  local_storage: {path: $OUT/inference-perf}
EOF
start_server "$OUT/inference-perf.server.jsonl"
rm -rf "$OUT/inference-perf"
"$VENV_IP/bin/inference-perf" --config_file "$OUT/inference-perf.yaml" > "$OUT/inference-perf.log" 2>&1
stop_server
"$B" import "$OUT/inference-perf/per_request_lifecycle_metrics.json" --out "$OUT/inference-perf.jsonl" 2>/dev/null
check "inference-perf $IP_V" "$OUT/inference-perf.jsonl" "$OUT/inference-perf.server.jsonl" || fail=1

if [ "${CALIBRATE:-0}" = 1 ]; then
  # The profile of agent/tests/calibrate_sim.rs ("truth"), emulated in real time.
  step "AIPerf against a known profile, for calibrate --from (OUT/calibrate)"
  mkdir -p "$OUT/calibrate"
  cat > "$OUT/calibrate/truth.json" <<'EOF'
{"name": "truth", "basis": "test", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 8,
 "max_num_batched_tokens": 8192, "max_model_len": 8192, "step_fixed_ms": 16.0, "per_seq_ms": 1.5,
 "per_ctx_token_ms": 0.0015, "prefill_tokens_per_ms": 6.0, "prefill_fixed_ms": 8.0, "enable_prefix_caching": true,
 "prefill_ctx_ms_per_ktok": 0.08}
EOF
  start_server "$OUT/calibrate/server.jsonl" --profile-file "$OUT/calibrate/truth.json"
  # Lone prefills of many lengths (one stream), then decoding 4 and 8 at a time; two warm-up requests each (AIPerf
  # marks them, import leaves them out), so that no profiled request pays for a new connection.
  for spec in "c1 1 24 1100 600" "c4 4 20 600 200" "c8 8 24 600 200"; do
    set -- $spec
    rm -rf "$OUT/calibrate/$1"
    "$VENV/bin/aiperf" profile --model sim --url "$URL" --endpoint-type completions --streaming \
      --tokenizer local/wordtok --prompt-corpus random --synthetic-input-tokens-mean "$4" \
      --synthetic-input-tokens-stddev "$5" --output-tokens-mean 32 --output-tokens-stddev 0 \
      --extra-inputs ignore_eos:true --concurrency "$2" --request-count "$3" --random-seed 46 --warmup-request-count 2 \
      --artifact-dir "$OUT/calibrate/$1" --ui-type none > "$OUT/calibrate/$1.log" 2>&1
  done
  stop_server
  "$B" import "$OUT"/calibrate/c{1,4,8}/profile_export.jsonl --out "$OUT/calibrate/runs.jsonl" 2>/dev/null
  "$B" calibrate --from "$OUT/calibrate/runs.jsonl" --out "$OUT/calibrate/cal" --max-num-seqs 8 --batch-kv off \
    --prefill-kv off --reply-share off --tiers off --scheduler vllm > "$OUT/calibrate/calibrate.log" 2>&1 || fail=1
  "$VENV/bin/python" - "$OUT/calibrate/cal/profile.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
truth = {"step_fixed_ms": 16.0, "per_seq_ms": 1.5, "per_ctx_token_ms": 0.0015, "prefill_tokens_per_ms": 6.0,
         "prefill_ctx_ms_per_ktok": 0.08}
scale = {k: 1.0 for k in truth}
print("calibrate --from the AIPerf runs: " + ", ".join(
    f"{k} {p[k] * scale[k]:.5g} ({(p[k] * scale[k] / v - 1) * 100:+.1f} %)" for k, v in truth.items()))
PY
fi

if [ -n "${FIXTURES:-}" ]; then
  step "fixtures into $FIXTURES"
  # fix SRC DEST: a copy with OUT's absolute path written as `OUT`.
  fix() { mkdir -p "$(dirname "$FIXTURES/$2")"; sed "s#$OUT#OUT#g" "$OUT/$1" > "$FIXTURES/$2"; }
  fix aiperf/profile_export.jsonl aiperf/profile_export.jsonl
  fix aiperf/profile_export_aiperf.json aiperf/profile_export_aiperf.json
  fix aiperf.server.jsonl aiperf/server.jsonl
  fix aiperf-multiturn/profile_export.jsonl aiperf-multiturn/profile_export.jsonl
  fix aiperf-multiturn.server.jsonl aiperf-multiturn/server.jsonl
  fix guidellm/benchmarks.json guidellm/benchmarks.json
  fix guidellm.server.jsonl guidellm/server.jsonl
  fix inference-perf/per_request_lifecycle_metrics.json inference-perf/per_request_lifecycle_metrics.json
  fix inference-perf/summary_lifecycle_metrics.json inference-perf/summary_lifecycle_metrics.json
  fix inference-perf/config.yaml inference-perf/config.yaml
  fix inference-perf.server.jsonl inference-perf/server.jsonl
  if [ "${CALIBRATE:-0}" = 1 ]; then
    for c in c1 c4 c8; do fix calibrate/$c/profile_export.jsonl calibrate/$c.profile_export.jsonl; done
    fix calibrate/truth.json calibrate/truth.json
    fix calibrate/server.jsonl calibrate/server.jsonl
  fi
fi
exit $fail
