#!/usr/bin/env bash
# Transfer benchmark (issue #40 item 6): calibrate a REAL llama.cpp server running one model, carry the calibration
# over to another model (a deployment: the model's config.json and this machine's numbers), predict held-out
# scenarios on the other model from the transferred efficiencies alone, and compare with live runs of them.
#
#   scripts/bench_transfer.sh            (needs scripts/realserver/setup.sh once; builds the release binary)
#   env: OUT=dir (default ${TMPDIR:-/tmp}/loadshape-transfer), BUDGET=calibrate seconds (180), REPEAT=live runs
#        each (2), SLOTS=llama-server --parallel (4), LOADSHAPE_BIN=a release binary, NICE=niceness of server and
#        client (0; -10 on a busy machine, as root)
#
# The two models are make_model.py's `tiny` (4 layers, width 256: calibrated) and `small` (8 layers, width 512, 4×
# the weights: predicted), random weights, the same tokenizer, both f16. The "GPU" is this machine's CPU as
# llama-server uses it (`--threads 1`): its peak f32 matmul rate and its copy bandwidth on one thread, measured here
# with numpy and written into the deployment as its numbers. calibrate --deployment fits the efficiencies that make
# the roofline price the tiny model's steps as the calibration did; `predict --profile cal/profile.json
# --deployment small.json` runs the same server (its slots, n_batch, host cache, re-tokenized replies) with the small
# model's steps priced by that roofline. Nothing is fitted to the small model's runs. A second table predicts the
# same live runs with the tiny model's profile as it is (no transfer): what the transfer is worth.
# The server runs on 127.0.0.1 only and is ended (by its PID) when the script exits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${OUT:-${TMPDIR:-/tmp}/loadshape-transfer}"
BUDGET="${BUDGET:-180}"
REPEAT="${REPEAT:-2}"
SLOTS="${SLOTS:-4}"
NICE="${NICE:-0}"
source scripts/realserver/bench_lib.sh
llama_dir="${LOADSHAPE_LLAMA_DIR:-$HOME/.cache/loadshape-llama}"
py="$llama_dir/venv/bin/python"
small="$llama_dir/models/small-$(sha256sum scripts/realserver/make_model.py | cut -c1-12).gguf"
if [ ! -f "$small" ]; then
  echo "== make the small model"
  "$py" scripts/realserver/make_model.py "$small.tmp" --size small
  mv "$small.tmp" "$small"
fi
rm -rf "$OUT"; mkdir -p "$OUT"

echo "== this machine as the deployment's GPU (one thread, numpy)"
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$py" - "$OUT" <<'PY'
import json, sys, time
import numpy as np
out = sys.argv[1]
def best(f, n=5):
    t = []
    for _ in range(n):
        s = time.perf_counter(); f(); t.append(time.perf_counter() - s)
    return min(t)
a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
flops = 2 * 1024 ** 3 / best(lambda: a @ a)
src = np.ones(64 * 2 ** 20, dtype=np.float32); dst = np.empty_like(src)
bw = 2 * src.nbytes / best(lambda: np.copyto(dst, src))
import os
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
gpu = {"name": "this-cpu-1-thread", "flops": {"bf16": flops}, "hbm_bytes": mem, "hbm_bytes_per_s": bw}
json.dump(gpu, open(f"{out}/cpu.json", "w"))
print(f"   f32 matmul {flops / 1e9:.1f} GFLOP/s, copy {bw / 1e9:.1f} GB/s, memory {mem / 2**30:.1f} GiB")
# The two models as Hugging Face config.json objects (make_model.py's SIZES; vocab 4,096; context 32,768).
def config(layers, width, heads, kv_heads, ffn):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": layers,
            "hidden_size": width, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "intermediate_size": ffn, "vocab_size": 4096, "max_position_embeddings": 32768,
            "torch_dtype": "float16", "tie_word_embeddings": False}
for name, c in [("tiny", config(4, 256, 4, 2, 768)), ("small", config(8, 512, 8, 4, 1536))]:
    json.dump({"model": c, "gpu": gpu, "kv_dtype": "fp16"}, open(f"{out}/{name}.json", "w"), indent=2)
PY

echo "== calibrate the tiny model (budget ${BUDGET}s), told its deployment (load $(load_now))"
llama_start "$LLAMA_MODEL"
B calibrate --url "$url" --out "$OUT/cal" --budget "$BUDGET" --deployment "$OUT/tiny.json" >"$OUT/calibrate.log" 2>&1 \
  || { tail -20 "$OUT/calibrate.log"; exit 1; }
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
fit = json.load(open(f"{out}/cal/fit.json"))
t = fit.get("deployment_fit") or {}
f = t.get("factors", {})
print("== carried over: " + ", ".join(f"{k} {v['value']:.4g}{'' if v['identified'] else ' (not identified)'}"
                                      for k, v in f.items())
      + f"; roofline vs calibration over {len(t.get('shapes', []))} shapes: largest error "
      f"{t.get('max_error', float('nan')) * 100:.1f} %, RMS {t.get('rms_error', float('nan')) * 100:.1f} %")
# The what-if: the same deployment (the same efficiencies, the same machine) with the small model.
d = json.load(open(f"{out}/cal/deployment.json"))
d["model"] = json.load(open(f"{out}/small.json"))["model"]
json.dump(d, open(f"{out}/small-deployment.json", "w"), indent=2)
PY

# Held-out scenarios on the small model: as many sessions as slots, and twice as many.
session_scenario sessions "$SLOTS" 1500 5
session_scenario more-sessions $((SLOTS * 2)) 1500 5
for name in sessions more-sessions; do
  for i in $(seq 1 "$REPEAT"); do
    echo "== live on the small model: $name run $i (load $(load_now))"
    llama_start "$small"
    B replay --url "$url" --scenario "$OUT/$name.json" --out "$OUT/$name-$i.jsonl" --quiet >/dev/null
  done
done

for name in sessions more-sessions; do
  against=()
  for i in $(seq 1 "$REPEAT"); do against+=(--against "$OUT/$name-$i.jsonl"); done
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" --deployment "$OUT/small-deployment.json" \
    "${against[@]}" --json >"$OUT/$name-transfer.json"
  B predict "$OUT/$name.json" --profile "$OUT/cal/profile.json" "${against[@]}" --json >"$OUT/$name-as-is.json"
done

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
fields = ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2el_p50_ms", "e2el_p99_ms"]
result = {}
for kind, what in [("transfer", "the tiny model's calibration carried over to the small model"),
                   ("as-is", "the tiny model's profile as it is (no transfer)")]:
    print(f"== {what}")
    print(f"{'scenario':16} " + " ".join(f"{f:>12}" for f in fields) + "   goals (p50 15 %, p99 25 % or the spread)")
    for name in ["sessions", "more-sessions"]:
        p = json.load(open(f"{out}/{name}-{kind}.json"))
        sim, spread = p["simulated"], p.get("live_spread") or {}
        errs, met = {}, 0
        for f in fields:
            live = spread[f]["mean"] if f in spread else p["live"].get(f)
            e = sim.get(f) / live - 1 if live else None
            s = spread.get(f)
            width = s["max"] / s["min"] - 1 if s and s["min"] > 0 else 0.0
            goal = max(0.15 if "p50" in f else 0.25, width)
            errs[f] = e
            met += e is not None and abs(e) <= goal
        result.setdefault(kind, {})[name] = errs
        row = [f"{e * 100:+11.1f}%" if e is not None else f"{'n/a':>12}" for e in errs.values()]
        print(f"{name:16} " + " ".join(row) + f"   {met} of {len(fields)}")
        if spread:
            print(f"{'  live spread':16} " + " ".join(
                f"{(spread[f]['max'] / spread[f]['min'] - 1) * 100:11.1f}%" if f in spread and spread[f]["min"] > 0
                else f"{'':>12}" for f in fields))
print(f"(errors = simulated / mean of the live runs - 1; live spread = max / min - 1 over the runs; {out}/errors.json)")
json.dump(result, open(f"{out}/errors.json", "w"), indent=2)
PY
