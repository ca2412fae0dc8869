#!/usr/bin/env python3
"""Run the Python seed (scenario_sim.py) on a loadshape seed-model scenario file and print the summary as JSON.

    python3 scripts/seed/run_seed_scenario.py SCENARIO.json [--seed-dir DIR]

The seed is imported from --seed-dir (default $SEED_DIR, else ../shared/seeds relative to the repository).
The time spent in build_agent_trace + evaluate_engine_benchmark (not interpreter start-up or JSON) goes to stderr
as `compute_s=<seconds>`.
"""
import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", type=Path)
    p.add_argument("--seed-dir", type=Path, default=Path(os.environ.get("SEED_DIR", REPO.parent / "shared" / "seeds")))
    a = p.parse_args()
    spec = importlib.util.spec_from_file_location("scenario_sim", a.seed_dir / "scenario_sim.py")
    sim = importlib.util.module_from_spec(spec)
    sys.modules["scenario_sim"] = sim
    spec.loader.exec_module(sim)

    s = json.loads(a.scenario.read_text())
    w, slo = s["workload"], s.get("slo", {"ttft_ms": 500.0, "tpot_ms": 35.0})
    t0 = time.perf_counter()
    trace = sim.build_agent_trace(num_requests=w["num_requests"], seed=w["seed"], mean_rps=w["mean_rps"])
    summary = sim.evaluate_engine_benchmark(
        trace,
        sim.EngineProfile(**s["profile"]),
        workload_name=s.get("workload_name", "agent-shared-prefix"),
        ttft_slo_ms=slo["ttft_ms"],
        tpot_slo_ms=slo["tpot_ms"],
        closed_loop=s.get("closed_loop", False),
    )
    compute_s = time.perf_counter() - t0
    print(json.dumps(asdict(summary), indent=2))
    print(f"compute_s={compute_s:.6f}", file=sys.stderr)


if __name__ == "__main__":
    main()
