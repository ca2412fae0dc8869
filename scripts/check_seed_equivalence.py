#!/usr/bin/env python3
"""Randomized differential test: `loadshape simulate --json` against the Python seed, field by field.

Generates random seed-model scenarios (seeds up to 2^64, 1-2000 requests, 1-64 slots, cache efficiency 0-1, open
and closed loop, random coefficients and SLOs), runs the seed's own `build_agent_trace` + `evaluate_engine_benchmark`
(imported from scenario_sim.py) and the loadshape binary on the same scenario, and requires every summary field to
be equal (and integers to stay integers). Also checks that inputs the seed rejects, or would crash on, make
loadshape exit non-zero with a message naming the field.

Usage:
    python3 scripts/check_seed_equivalence.py [--cases 300] [--rng-seed 1] [--bin PATH] [--seed-dir DIR]

--bin defaults to $LOADSHAPE_BIN, else $CARGO_TARGET_DIR/debug/loadshape, else target/debug/loadshape.
--seed-dir defaults to $SEED_DIR, else ../shared/seeds relative to the repository root.
Prints `N passed, M failed` last and exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIELDS = [
    "engine", "workload", "total_requests", "duration_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
    "tpot_p99_ms", "raw_output_tokens_per_s", "request_throughput_rps", "slo_goodput_rps", "slo_attainment_ratio",
]


def load_seed(seed_dir: Path):
    path = seed_dir / "scenario_sim.py"
    spec = importlib.util.spec_from_file_location("scenario_sim", path)
    if spec is None or spec.loader is None:
        sys.exit(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["scenario_sim"] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def default_bin() -> Path:
    if os.environ.get("LOADSHAPE_BIN"):
        return Path(os.environ["LOADSHAPE_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "loadshape"


def random_scenario(rng: random.Random, i: int) -> dict:
    seed_kind = rng.random()
    if seed_kind < 0.15:
        seed = rng.choice([0, 1, 42, 2**32 - 1, 2**32, 2**32 + 5, 2**63, 2**64 - 1, 2**64])
    elif seed_kind < 0.55:
        seed = rng.randrange(0, 2**64)
    elif seed_kind < 0.7:
        seed = -rng.randrange(1, 2**63)
    else:
        seed = rng.randrange(0, 100000)
    n_kind = rng.random()
    num_requests = rng.choice([1, 2, 3, 100, 2000]) if n_kind < 0.15 else rng.randint(1, 2000)
    slots = rng.choice([1, 2, 64]) if rng.random() < 0.15 else rng.randint(1, 64)
    eff_kind = rng.random()
    efficiency = rng.choice([0.0, 1.0, 0.5, 0.45, 0.92]) if eff_kind < 0.2 else rng.random()
    mean_rps = rng.choice([8.5, 15.0, 0.05, 1000.0]) if rng.random() < 0.1 else 10 ** rng.uniform(-1.5, 2.5)
    # Round some coefficients to few decimals (as a person writes them) and leave others with full precision.
    tidy = rng.random() < 0.5

    def num(x: float, places: int) -> float:
        return round(x, places) if tidy else x

    profile = {
        "name": rng.choice(["baseline", "prefix_reuse", "faster_decode", f"p{i}", "ünïcode engine"]),
        "prefill_tokens_per_ms": num(rng.uniform(0.5, 120.0), 1),
        "prefix_cache_hit_efficiency": efficiency,
        "base_tpot_ms": num(rng.uniform(1.0, 60.0), 2),
        "batch_tpot_slope_ms": num(rng.choice([0.0, rng.uniform(0.0, 3.0)]), 2),
        "max_batch_slots": slots,
    }
    if rng.random() < 0.2:
        profile["prefill_tokens_per_ms"] = rng.randint(1, 100)  # integers are numbers too
    slo = {"ttft_ms": num(10 ** rng.uniform(1.0, 4.5), 0), "tpot_ms": num(rng.uniform(5.0, 120.0), 1)}
    scenario = {
        "model": "seed",
        "workload": {"kind": "bursty", "num_requests": num_requests, "seed": seed, "mean_rps": mean_rps},
        "profile": profile,
        "slo": slo,
        "closed_loop": rng.random() < 0.35,
        "workload_name": rng.choice(["agent-shared-prefix", "closed-loop-illusion", f"w{i}"]),
    }
    if rng.random() < 0.1:
        del scenario["slo"]  # the seed's defaults: 500 / 35
    if rng.random() < 0.1:
        scenario["version"] = 1
    return scenario


def seed_summary(sim, scenario: dict) -> dict:
    w = scenario["workload"]
    trace = sim.build_agent_trace(num_requests=w["num_requests"], seed=w["seed"], mean_rps=w["mean_rps"])
    profile = sim.EngineProfile(**scenario["profile"])
    slo = scenario.get("slo", {"ttft_ms": 500.0, "tpot_ms": 35.0})
    summary = sim.evaluate_engine_benchmark(
        trace,
        profile,
        workload_name=scenario.get("workload_name", "agent-shared-prefix"),
        ttft_slo_ms=slo["ttft_ms"],
        tpot_slo_ms=slo["tpot_ms"],
        closed_loop=scenario.get("closed_loop", False),
    )
    # Through JSON, as the seed prints it.
    return json.loads(json.dumps(asdict(summary)))


def run_bin(binary: Path, scenario_text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(binary), "simulate", "--json", "-"], input=scenario_text, capture_output=True, text=True, timeout=60
    )


def same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return type(a) is type(b) and a == b
    return a == b


# Inputs the seed rejects (ValueError), or would crash on, each with the field the message must name.
BAD_CASES = [
    (("workload", "mean_rps"), 0, "workload.mean_rps"),
    (("workload", "mean_rps"), -3.0, "workload.mean_rps"),
    (("workload", "num_requests"), 0, "workload.num_requests"),
    (("workload", "num_requests"), 12.5, "workload.num_requests"),
    (("workload", "seed"), 1.5, "workload.seed"),
    (("profile", "max_batch_slots"), 0, "profile.max_batch_slots"),
    (("profile", "max_batch_slots"), -2, "profile.max_batch_slots"),
    (("profile", "prefill_tokens_per_ms"), 0, "profile.prefill_tokens_per_ms"),
    (("profile", "prefill_tokens_per_ms"), -1.5, "profile.prefill_tokens_per_ms"),
    (("profile", "unknown_knob"), 1, "unknown_knob"),
    (("closed_loop_typo",), True, "closed_loop_typo"),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--rng-seed", type=int, default=1)
    p.add_argument("--bin", type=Path, default=None)
    p.add_argument("--seed-dir", type=Path, default=Path(os.environ.get("SEED_DIR", REPO.parent / "shared" / "seeds")))
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    binary = a.bin or default_bin()
    if not binary.exists():
        sys.exit(f"loadshape binary not found at {binary} (build it, or pass --bin / set LOADSHAPE_BIN)")
    sim = load_seed(a.seed_dir)
    rng = random.Random(a.rng_seed)
    passed = failed = 0

    for i in range(a.cases):
        scenario = random_scenario(rng, i)
        text = json.dumps(scenario)
        want = seed_summary(sim, scenario)
        proc = run_bin(binary, text)
        if proc.returncode != 0:
            failed += 1
            print(f"FAIL case {i}: loadshape exited {proc.returncode}: {proc.stderr.strip()}\n  scenario: {text}")
            continue
        got = json.loads(proc.stdout)
        diffs = [f for f in FIELDS if f not in got or not same(got[f], want[f])]
        extra = sorted(set(got) - set(FIELDS))
        if diffs or extra:
            failed += 1
            print(f"FAIL case {i}: scenario {text}")
            for f in diffs:
                print(f"  {f}: seed {want[f]!r}, loadshape {got.get(f)!r}")
            if extra:
                print(f"  extra fields: {extra}")
        else:
            passed += 1
            if a.verbose:
                print(f"ok case {i}: {want}")

    base = json.loads((REPO / "examples" / "seed-baseline.json").read_text())
    for path, value, field in BAD_CASES:
        scenario = json.loads(json.dumps(base))
        target = scenario
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        proc = run_bin(binary, json.dumps(scenario))
        if proc.returncode != 0 and field in proc.stderr and not proc.stdout:
            passed += 1
        else:
            failed += 1
            print(f"FAIL bad input {'.'.join(path)} = {value!r}: exit {proc.returncode}, stderr {proc.stderr.strip()!r}")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
