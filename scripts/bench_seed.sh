#!/usr/bin/env bash
# Side-by-side benchmark: the Python seed (scenario_sim.py) and `loadshape simulate` on the same 100k-request
# scenario (examples/seed-100k.json). Checks that both print equal summaries; the two commands alternate run by run
# and each pair gives a ratio (median and range printed), beside the medians of RUNS runs of each (whole process,
# wall clock and CPU time); then the compute-only times (Python: trace +
# evaluate inside the interpreter; Rust: `cargo bench --bench seed_model`).
#
#   scripts/bench_seed.sh [SCENARIO]
#   env: RUNS=7, SEED_DIR=../shared/seeds, CARGO_TARGET_DIR, LOADSHAPE_BIN (a release binary; skips the build),
#        SKIP_COMPUTE=1 (whole process only: skips the `cargo bench` of the compute)
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIO="${1:-examples/seed-100k.json}"
RUNS="${RUNS:-7}"
export SEED_DIR="${SEED_DIR:-$(cd .. && pwd)/shared/seeds}"
TARGET="${CARGO_TARGET_DIR:-target}"

if [ -n "${LOADSHAPE_BIN:-}" ]; then
  BIN="$LOADSHAPE_BIN"
else
  cargo build --release -q -p loadshape
  BIN="$TARGET/release/loadshape"
fi

python3 - "$BIN" "$SCENARIO" "$RUNS" <<'PY'
import json, os, resource, statistics, subprocess, sys, time

binary, scenario, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
commands = {
    "python seed": ["python3", "scripts/seed/run_seed_scenario.py", scenario],
    "loadshape  ": [binary, "simulate", "--json", scenario],
}

def timed(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr}")
    compute = None
    for line in p.stderr.splitlines():
        if line.startswith("compute_s="):
            compute = float(line.split("=", 1)[1])
    return json.loads(p.stdout), wall, compute

def cpu_of_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

# The two commands alternate run by run (python, loadshape, python, ...) so a change in the machine's load hits
# both alike; each pair gives one ratio, and the ratios' median and range are reported (not a ratio of medians).
runs_of = {name: {"outs": [], "walls": [], "computes": [], "cpu": 0.0} for name in commands}
pairs = []
for _ in range(runs):
    pair = {}
    for name, cmd in commands.items():
        r = runs_of[name]
        cpu_before = cpu_of_children()
        out, wall, compute = timed(cmd)
        r["cpu"] += cpu_of_children() - cpu_before
        r["outs"].append(out); r["walls"].append(wall)
        if compute is not None:
            r["computes"].append(compute)
        pair[name] = wall
    pairs.append(pair["python seed"] / pair["loadshape  "])
results = {}
for name, r in runs_of.items():
    if any(o != r["outs"][0] for o in r["outs"]):
        sys.exit(f"{name}: output differs between runs")
    # CPU time is accounted in scheduler ticks: the mean over all runs is steadier than any one run.
    results[name] = (r["outs"][0], statistics.median(r["walls"]), min(r["walls"]), r["cpu"] / runs,
                     statistics.median(r["computes"]) if r["computes"] else None)

(py_out, py_wall, py_min, py_cpu, py_compute) = results["python seed"]
(rs_out, rs_wall, rs_min, rs_cpu, _) = results["loadshape  "]
if py_out != rs_out:
    print("MISMATCH between the seed and loadshape:")
    for k in py_out:
        if py_out[k] != rs_out.get(k):
            print(f"  {k}: seed {py_out[k]!r}, loadshape {rs_out.get(k)!r}")
    sys.exit(1)
print(f"scenario: {scenario} ({py_out['total_requests']} requests); outputs equal on all {len(py_out)} fields")
print(f"whole process, {runs} runs:  wall median   wall min   cpu mean")
print(f"  python seed           {py_wall*1e3:9.1f} ms {py_min*1e3:8.1f} ms {py_cpu*1e3:8.1f} ms")
print(f"  loadshape simulate    {rs_wall*1e3:9.1f} ms {rs_min*1e3:8.1f} ms {rs_cpu*1e3:8.1f} ms")
print(f"  ratio of medians      {py_wall/rs_wall:8.1f}x  {py_min/rs_min:8.1f}x  {py_cpu/max(rs_cpu, 1e-4):8.1f}x")
print(f"  ratio pair by pair (python/loadshape, wall): median {statistics.median(pairs):.1f}x, "
      f"range {min(pairs):.1f}x to {max(pairs):.1f}x over {runs} alternated pairs")
if py_compute is not None:
    print(f"python compute only (trace + evaluate, wall): median {py_compute*1e3:.1f} ms")
PY
[ -n "${SKIP_COMPUTE:-}" ] || echo "rust compute only (wall, in-process):"
[ -n "${SKIP_COMPUTE:-}" ] || cargo bench -q -p loadshape-shared --bench seed_model 2>/dev/null
