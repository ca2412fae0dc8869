#!/usr/bin/env python3
"""Per request, how much of a client's TTFT the client added: its TTFT minus the server's own part.

bench_replay.sh runs the paced cases against the patched mock server (scripts/bench/mockserver_ttft.patch), which
writes, per stream request, `arrival read first` in ns (CLOCK_REALTIME): the kernel's receive time of the request's
last byte (SO_TIMESTAMPNS), when its one thread read it, and when it produced the first frame. The server's part of a
TTFT is `first - arrival`: the request waiting in the server's socket while the thread serves other streams, plus the
handling. Whatever a client reports above that is what the client added (its sending before the bytes arrived, and
its reading after the frame left: loopback delivery is a few microseconds).

Joining: a client's requests are sorted by start time and the server's by arrival. With one client thread writing
in start order and loopback delivering inside the `write`, the two orders are the same, so the i-th of each is one
request. The join is checked: the gaps between consecutive starts must match the gaps between consecutive arrivals
(`align p99`: the 99th percentile of |(arrival_i - arrival_0) - (start_i - start_0)| after removing the median; a join
off by one request across a quiet gap would show as milliseconds there).

usage: client_added.py RESULTS_DIR  -> a markdown section on stdout
"""

import json
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def pct(xs, q):
    """Nearest-rank percentile as shared::metrics computes it: index ceil(q·n) − 1 in floating point, clamped."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


def client_pairs(client_dir: Path, label: str):
    """(start_s, ttft_s) of every completed request, by start."""
    jsonl = client_dir / f"{label}.jsonl"
    floor = client_dir / f"{label}.client_ttft.txt"
    pairs = []
    if label.startswith("floor"):
        if not floor.exists():
            return None
        for line in floor.read_text().split("\n"):
            if line.strip():
                s, t = line.split()
                pairs.append((float(s), float(t)))
    elif label.startswith("vllm"):
        # vllm bench serve --save-detailed: per request `start_times` (s after its start, monotonic), `ttfts` (s) and
        # `errors` ("" when it succeeded).
        path = client_dir / f"{label}.vllm.json"
        if not path.exists():
            return None
        r = json.loads(path.read_text())
        for s, t, e in zip(r["start_times"], r["ttfts"], r["errors"]):
            if not e and t is not None:
                pairs.append((float(s), float(t)))
    else:
        if not jsonl.exists():
            return None
        for line in jsonl.read_text().split("\n"):
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("ok") and r.get("ttft_s") is not None:
                pairs.append((float(r["t_submit"]), float(r["ttft_s"])))
    pairs.sort()
    return pairs


def analyse(client_dir: Path, label: str):
    server_file = client_dir / f"{label}.server_ttft.txt"
    rows = []
    for line in server_file.read_text().split("\n"):
        if line.strip():
            a, r, f = (int(x) for x in line.split())
            rows.append((a, r, f))
    rows.sort()
    pairs = client_pairs(client_dir, label)
    if pairs is None:
        return {"label": label, "error": "no client per-request file"}
    if len(pairs) != len(rows):
        return {"label": label, "error": f"{len(pairs)} client requests vs {len(rows)} at the server: not joined"}
    if any(a == 0 for a, _, _ in rows):
        return {"label": label, "error": "a request without a kernel receive stamp"}
    a0, s0 = rows[0][0], pairs[0][0]
    drift = [((a - a0) / 1e6) - (s - s0) * 1e3 for (a, _, _), (s, _) in zip(rows, pairs)]
    mid = statistics.median(drift)
    align = [abs(d - mid) for d in drift]
    client = [t * 1e3 for _, t in pairs]
    server = [(f - a) / 1e6 for a, _, f in rows]
    waiting = [(r - a) / 1e6 for a, r, _ in rows]
    added = [c - s for c, s in zip(client, server)]
    return {
        "label": label,
        "n": len(rows),
        "client_p50": pct(client, 0.5),
        "client_p99": pct(client, 0.99),
        "server_p50": pct(server, 0.5),
        "server_p99": pct(server, 0.99),
        "server_max": max(server),
        "waiting_p99": pct(waiting, 0.99),
        "added_p50": pct(added, 0.5),
        "added_p99": pct(added, 0.99),
        "added_max": max(added),
        "added_min": min(added),
        "align_p99": pct(align, 0.99),
    }


def main():
    results = Path(sys.argv[1])
    client_dir = results / "client"
    labels = sorted(p.name[: -len(".server_ttft.txt")] for p in client_dir.glob("*.server_ttft.txt"))
    if not labels:
        return
    print("\n### Client-added TTFT, per request (paced runs; scripts/bench/client_added.py)\n")
    print("Server part = the kernel's receive time of the request → the mock server's first frame out (its own clocks);")
    print("client-added = the client's TTFT − the server part, per request. ms, nearest-rank.\n")
    print("| run | requests | client TTFT p50 / p99 | server part p50 / p99 / max | of it waiting in the socket, p99 "
          "| **client-added p50 / p99** / max (min) | join check: align p99 |")
    print("|---|---:|---|---|---|---|---|")
    groups = defaultdict(list)
    for label in labels:
        r = analyse(client_dir, label)
        if "error" in r:
            print(f"| {label} | – | {r['error']} | | | | |")
            continue
        print(f"| {label} | {r['n']} | {r['client_p50']:.2f} / {r['client_p99']:.2f} "
              f"| {r['server_p50']:.2f} / {r['server_p99']:.2f} / {r['server_max']:.1f} | {r['waiting_p99']:.2f} "
              f"| **{r['added_p50']:.3f} / {r['added_p99']:.3f}** / {r['added_max']:.2f} ({r['added_min']:.3f}) "
              f"| {r['align_p99']:.3f} |")
        groups[re.sub(r"_r\d+$", "", label)].append(r)
    if any(len(v) > 1 for v in groups.values()):
        print("\n| case | runs | client TTFT p99 (median) | server part p99 (median) | **client-added p99 (runs; median)** |")
        print("|---|---:|---:|---:|---|")
        for case, rs in groups.items():
            adds = " / ".join(f"{r['added_p99']:.3f}" for r in rs)
            print(f"| {case} | {len(rs)} | {statistics.median(r['client_p99'] for r in rs):.2f} "
                  f"| {statistics.median(r['server_p99'] for r in rs):.2f} "
                  f"| {adds}; **{statistics.median(r['added_p99'] for r in rs):.3f}** |")


if __name__ == "__main__":
    main()
