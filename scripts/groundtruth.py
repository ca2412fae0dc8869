#!/usr/bin/env python3
"""Real vLLM runs against the simulator, from the catalog (issue #40 item 6; docs/measurements.md).

Each run's own arrivals, prompt and output token counts are replayed through `loadshape simulate` with the
catalog's deployment (the model on the GPU the run used, tp 1, bf16), the server's stated limits
(`max_num_seqs`, `max_num_batched_tokens`, block 16) and the default efficiencies: nothing is fitted to these
runs. TTFT, TPOT and E2E are computed the same way from both sides:

- TTFT: first token - arrival at the engine; E2E: last token - arrival at the engine;
- TPOT (vLLM's): (E2E - TTFT) / (output tokens - 1), per request with 2 or more output tokens;
- mean, p50, p99 over the requests (p: nearest rank, the project's rule); error = simulated / real - 1.

The runs are read from `../shared/groundtruth` (beside the repository; `LOADSHAPE_GROUNDTRUTH` overrides) and are
never copied into the project. Usage:

  python3 scripts/groundtruth.py --bin target/release/loadshape [--json] [--keep DIR]
  python3 scripts/groundtruth.py --bin BIN --efficiency '{"mfu": 0.6}'   # a diagnosis: every run's deployment
                                                # takes these efficiencies (no longer the out-of-the-box comparison)
  python3 scripts/groundtruth.py --selftest     # the converters on synthetic lines, no binary needed
"""

import csv
import io
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "shared", "groundtruth")

# The goals: |error| of the mean within these, out of the box.
GOALS = {"tpot_mean": 0.15, "e2e_mean": 0.20, "ttft_mean": 0.30}
# BLIS's published held-out medians (inference-sim), the reference the issue names.
REFERENCE = {"e2e_mean": 0.067, "ttft_p99": 0.29}

LLAMA_FILE = "llmservingsim_rtxpro6000_llama31_8b_requests.jsonl"
LLAMA_META = "llmservingsim_rtxpro6000_llama31_8b_meta.json"
CODELLAMA_FILE = "blis_jan20_codellama34b_tp1_prefillheavy_requests.csv"
CODELLAMA_LOG = "blis_jan20_codellama34b_tp1_prefillheavy_vllm_log_excerpt.txt"


def read_llmservingsim(text):
    """LLMServingSim's requests.jsonl (vLLM 0.19): one request a line, engine-clock timestamps.

    Arrival = queued_ts (the engine's; TTFT counts from it), so arrivals are ordered by it."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        try:
            q = float(r["queued_ts"])
            rows.append({
                "arrival_s": q,
                "prompt": int(r["input_toks"]),
                "shared_prefix": 0,
                "output": int(r["output_toks"]),
                "ttft_s": float(r["first_token_ts"]) - q,
                "e2e_s": float(r["last_token_ts"]) - q,
                "queue_s": float(r["scheduled_ts"]) - q,
            })
        except (KeyError, TypeError, ValueError) as e:
            raise SystemExit(f"{LLAMA_FILE} line {n}: {e!r}")
    return normalise(rows)


def read_blis_csv(text, shared_prefix):
    """inference-sim's requests.csv (vLLM 0.11 OTEL `llm_request` spans): span start = arrival, and vLLM's own
    ttft and e2e attributes."""
    rows = []
    for n, r in enumerate(csv.DictReader(io.StringIO(text)), 2):
        try:
            prompt = int(r["prompt_tokens"])
            rows.append({
                "arrival_s": int(r["start_unix_ns"]) / 1e9,
                "prompt": prompt,
                "shared_prefix": min(shared_prefix, prompt - 1),
                "output": int(r["completion_tokens"]),
                "ttft_s": float(r["ttft_s"]),
                "e2e_s": float(r["e2e_s"]),
                "queue_s": float(r["queue_s"]),
            })
        except (KeyError, TypeError, ValueError) as e:
            raise SystemExit(f"{CODELLAMA_FILE} line {n}: {e!r}")
    return normalise(rows)


def normalise(rows):
    """Sorted by arrival, the first at t = 0."""
    rows.sort(key=lambda r: r["arrival_s"])
    t0 = rows[0]["arrival_s"] if rows else 0.0
    for r in rows:
        r["arrival_s"] -= t0
    return rows


def log_gpu_blocks(text):
    """`num_gpu_blocks is: N` from a vLLM log, or None."""
    for line in text.splitlines():
        if "num_gpu_blocks is:" in line:
            return int(line.rsplit(":", 1)[1].strip().replace(",", ""))
    return None


def scenario(rows, deployment):
    """An engine scenario: the run's requests inline (trace workload), the deployment."""
    reqs = [{
        "arrival_ms": round(r["arrival_s"] * 1000.0, 6),
        "shared_prefix_tokens": r["shared_prefix"],
        "unique_prompt_tokens": r["prompt"] - r["shared_prefix"],
        "output_tokens": r["output"],
    } for r in rows]
    return {
        "model": "engine",
        "workload": {"kind": "trace", "requests": reqs},
        "deployment": deployment,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50},
        "seed": 1,
    }


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def nearest_rank(xs, q):
    s = sorted(xs)
    if not s:
        return float("nan")
    return s[max(1, math.ceil(q * len(s))) - 1]


def figures(reqs):
    """{ttft,tpot,e2e} x {mean,p50,p99} over [(ttft_s, e2e_s, output)]."""
    ttft = [t for t, _, _ in reqs]
    e2e = [e for _, e, _ in reqs]
    tpot = [(e - t) / (o - 1) for t, e, o in reqs if o > 1]
    out = {}
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        out[name + "_mean"] = mean(xs)
        out[name + "_p50"] = nearest_rank(xs, 0.50)
        out[name + "_p99"] = nearest_rank(xs, 0.99)
    return out


def runs(gt_dir):
    """The runs found in the folder, each (name, description, rows, deployment, notes)."""
    found = []
    path = os.path.join(gt_dir, LLAMA_FILE)
    if os.path.exists(path):
        with open(os.path.join(gt_dir, LLAMA_META)) as f:
            kw = json.load(f)["engine_kwargs"]
        with open(path) as f:
            rows = read_llmservingsim(f.read())
        found.append({
            "run": "llama-3.1-8b/rtx-pro-6000",
            "about": "vLLM 0.19.0, Llama-3.1-8B bf16, 1x RTX PRO 6000, 300 ShareGPT requests at 10 req/s "
                     "(LLMServingSim)",
            "rows": rows,
            "deployment": {
                "model": "llama-3.1-8b", "gpu": "rtx-pro-6000", "tp": 1,
                "weight_dtype": "bf16", "kv_dtype": "bf16",
                "max_num_seqs": int(kw["max_num_seqs"]),
                "max_num_batched_tokens": int(kw["max_num_batched_tokens"]),
                "block_size": 16,
            },
            "kv_blocks": "estimated from memory (the run does not report them)",
        })
    path = os.path.join(gt_dir, CODELLAMA_FILE)
    if os.path.exists(path):
        blocks = None
        log = os.path.join(gt_dir, CODELLAMA_LOG)
        if os.path.exists(log):
            with open(log) as f:
                blocks = log_gpu_blocks(f.read())
        with open(path) as f:
            # profile.yaml: a 1,024-token prefix shared by every prompt (GuideLLM's `prefix_tokens`).
            rows = read_blis_csv(f.read(), 1024)
        dep = {
            "model": "codellama-34b", "gpu": "h100-sxm", "tp": 1,
            "weight_dtype": "bf16", "kv_dtype": "bf16",
            "max_num_seqs": 256, "max_num_batched_tokens": 4096, "block_size": 16,
            "max_model_len": 4096,
        }
        if blocks is not None:
            dep["num_gpu_blocks_override"] = blocks
        found.append({
            "run": "codellama-34b/h100-sxm",
            "about": "vLLM 0.11.0, CodeLlama-34B bf16, 1x 80 GB GPU (H100 cluster), GuideLLM sweep, 197 requests, "
                     "1,024-token shared prefix (inference-sim / BLIS)",
            "rows": rows,
            "deployment": dep,
            "kv_blocks": f"{blocks} from the server's log" if blocks else "estimated from memory",
        })
    return found


def simulate(binary, sc, keep=None, name="run"):
    """Run `loadshape simulate --records` and return (records in submission order, --json output)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = keep or tmp
        os.makedirs(d, exist_ok=True)
        base = name.replace("/", "_")
        sc_path = os.path.join(d, base + ".json")
        rec_path = os.path.join(d, base + ".records.jsonl")
        with open(sc_path, "w") as f:
            json.dump(sc, f)
        p = subprocess.run([binary, "simulate", sc_path, "--json", "--records", rec_path],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"loadshape simulate failed on {name}:\n{p.stderr}")
        report = json.loads(p.stdout)
        with open(rec_path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    recs.sort(key=lambda r: (r["t_submit"], r["session"]))
    return recs, report


def compare(run, binary, keep=None):
    rows = run["rows"]
    recs, report = simulate(binary, scenario(rows, run["deployment"]), keep, run["run"])
    if len(recs) != len(rows):
        raise SystemExit(f"{run['run']}: {len(rows)} requests sent, {len(recs)} records back")
    bad = [r for r in recs if not r["ok"] or r.get("ttft_s") is None]
    if bad:
        raise SystemExit(f"{run['run']}: {len(bad)} simulated requests did not complete")
    real = figures([(r["ttft_s"], r["e2e_s"], r["output"]) for r in rows])
    sim = figures([(r["ttft_s"], r["wall_s"], r["gen_tokens"]) for r in recs])
    errors = {k: sim[k] / real[k] - 1.0 for k in real}
    dep = report.get("deployment", {})
    kv = report.get("diagnostics", {}).get("kv_thrash", {})
    queue = {"real": mean([r["queue_s"] for r in rows]),
             "simulated": mean([r["queue_s"] for r in recs if r.get("queue_s") is not None])}
    return {
        "run": run["run"],
        "about": run["about"],
        "requests": len(rows),
        "kv_blocks": dep.get("kv_blocks"),
        "kv_blocks_basis": run["kv_blocks"],
        "deployment": run["deployment"],
        "unit": "s",
        "real": real,
        "simulated": sim,
        "errors": errors,
        "goals": {k: abs(errors[k]) <= bound for k, bound in GOALS.items()},
        "queue_mean_s": queue,
        "simulated_peak_kv_blocks": kv.get("peak_kv_blocks_used"),
        "simulated_preemptions": kv.get("preemptions"),
        "simulated_cached_share": report.get("summary", {}).get("cached_share_achieved"),
    }


def table(results):
    lines = [f"{'run':<28} {'metric':<10} {'real':>10} {'simulated':>10} {'error':>8}"]
    for res in results:
        for k in ("ttft", "tpot", "e2e"):
            for stat in ("mean", "p50", "p99"):
                key = f"{k}_{stat}"
                unit = 1000.0
                r, s, e = res["real"][key] * unit, res["simulated"][key] * unit, res["errors"][key]
                lines.append(f"{res['run']:<28} {key:<10} {r:>8.1f}ms {s:>8.1f}ms {e * 100:>+7.1f}%")
        met = ", ".join(f"{k} {'met' if ok else 'missed'}" for k, ok in res["goals"].items())
        lines.append(f"{'':<28} goals (TPOT mean 15 %, E2E mean 20 %, TTFT mean 30 %): {met}")
        q = res["queue_mean_s"]
        lines.append(f"{'':<28} ({res['requests']} requests; KV {res['kv_blocks']} blocks, "
                     f"{res['kv_blocks_basis']}; simulated peak {res['simulated_peak_kv_blocks']}, "
                     f"{res['simulated_preemptions']} preemptions; queue mean real {q['real'] * 1000:.0f} ms, "
                     f"simulated {q['simulated'] * 1000:.0f} ms)")
    lines.append("errors are simulated / real - 1; BLIS's published held-out medians: E2E mean 6.7 %, "
                 "TTFT p99 29 %")
    return "\n".join(lines)


def parse_efficiency(text):
    """`--efficiency`'s JSON object (the deployment's `efficiency` field; loadshape checks its keys and values)."""
    try:
        eff = json.loads(text)
    except ValueError as e:
        raise SystemExit(f"--efficiency must be a JSON object, e.g. '{{\"mfu\": 0.6}}' ({e})")
    if not isinstance(eff, dict):
        raise SystemExit(f"--efficiency must be a JSON object, e.g. '{{\"mfu\": 0.6}}' (got {text})")
    return eff


def selftest():
    llama = "\n".join(json.dumps({
        "request_id": f"bench-{i}", "input_toks": 100 + i, "output_toks": 10, "arrival_time": 1000.0 + i,
        "queued_ts": 50.0 + i * 0.5, "scheduled_ts": 50.0 + i * 0.5, "first_token_ts": 50.1 + i * 0.5,
        "last_token_ts": 51.0 + i * 0.5}) for i in (2, 0, 1, 3, 4))
    rows = read_llmservingsim(llama)
    assert [r["prompt"] for r in rows] == [100, 101, 102, 103, 104], rows
    assert rows[0]["arrival_s"] == 0.0 and abs(rows[4]["arrival_s"] - 2.0) < 1e-9
    assert abs(rows[0]["ttft_s"] - 0.1) < 1e-9 and abs(rows[0]["e2e_s"] - 1.0) < 1e-9
    f = figures([(r["ttft_s"], r["e2e_s"], r["output"]) for r in rows])
    assert abs(f["tpot_mean"] - 0.1) < 1e-9, f  # (1.0 - 0.1) / (10 - 1)
    blis = ("start_unix_ns,end_unix_ns,prompt_tokens,completion_tokens,max_tokens,queue_s,ttft_s,prefill_s,"
            "decode_s,e2e_s\n"
            "2000000000,3000000000,3000,11,11,0,0.2,0.2,0.8,1.0\n"
            "1000000000,2000000000,900,1,1,0,0.1,0.1,0,0.1\n")
    rows = read_blis_csv(blis, 1024)
    assert rows[0]["shared_prefix"] == 899 and rows[1]["shared_prefix"] == 1024, rows
    assert rows[1]["arrival_s"] == 1.0
    sc = scenario(rows, {"model": "codellama-34b", "gpu": "h100-sxm"})
    assert sc["workload"]["requests"][1] == {"arrival_ms": 1000.0, "shared_prefix_tokens": 1024,
                                             "unique_prompt_tokens": 1976, "output_tokens": 11}
    f = figures([(r["ttft_s"], r["e2e_s"], r["output"]) for r in rows])
    assert abs(f["tpot_mean"] - 0.08) < 1e-9, f  # the 1-token request has no TPOT
    assert nearest_rank([5, 1, 3, 2, 4], 0.5) == 3 and nearest_rank([5, 1, 3, 2, 4], 0.99) == 5
    assert log_gpu_blocks("x\n... num_gpu_blocks is: 2537\n") == 2537
    assert parse_efficiency('{"mfu": 0.6}') == {"mfu": 0.6}
    for bad in ("0.6", "[1]", "{mfu: 0.6}"):
        try:
            parse_efficiency(bad)
        except SystemExit as e:
            assert "--efficiency must be a JSON object" in str(e), e
        else:
            raise AssertionError(f"--efficiency {bad} was accepted")
    print("groundtruth.py selftest: ok")


def main(argv):
    if "--selftest" in argv:
        selftest()
        return 0
    binary, keep, as_json, eff = None, None, "--json" in argv, None
    it = iter(argv)
    for a in it:
        if a == "--bin":
            binary = next(it)
        elif a == "--keep":
            keep = next(it)
        elif a == "--efficiency":
            eff = parse_efficiency(next(it))
    gt_dir = os.environ.get("LOADSHAPE_GROUNDTRUTH") or DEFAULT_DIR
    found = runs(gt_dir) if os.path.isdir(gt_dir) else []
    if not found:
        print(f"groundtruth: no real runs found in {os.path.normpath(gt_dir)} (set LOADSHAPE_GROUNDTRUTH); "
              "skipped", file=sys.stderr)
        return 0
    if not binary:
        raise SystemExit("--bin PATH is required")
    if eff is not None:
        for r in found:
            r["deployment"]["efficiency"] = eff
    results = [compare(r, binary, keep) for r in found]
    if as_json:
        out = {"runs": results, "reference": REFERENCE}
        if eff is not None:
            out["efficiency_override"] = eff
        print(json.dumps(out, indent=2))
    else:
        print(table(results))
        if eff is not None:
            print(f"efficiencies given: {json.dumps(eff)} (a diagnosis, not the out-of-the-box comparison)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
