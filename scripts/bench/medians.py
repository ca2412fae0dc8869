#!/usr/bin/env python3
"""Medians over REPEAT runs of scripts/bench_replay.sh: CPU per 1M streamed tokens (measure.py's in-stream + post-run
figure, start-up excluded) for the floor client and loadshape, their ratio, and the TTFT each reports at the paced
cells (the mock server's true TTFT is ~0, so the measured TTFT is the error the client and the machine add).

    python3 scripts/bench/medians.py RESULTS_DIR > RESULTS_DIR/medians.md

Per cell and client (`loadshape`, and `lsreqwest` = loadshape with --http-client reqwest when it ran) it prints every
run's figure (in run order), the median, and client / floor as the ratio of the medians and the median of the
per-round ratios (round r of each client ran back to back, so the paired ratio sees the
same machine load). `other CPU` is what the rest of the machine used during the run (measure.py), in cores.
TTFT: the floor prints its mean and (patched by bench_replay.sh) its nearest-rank p50 / p99; loadshape's mean / p50 /
p99 are nearest-rank over its own records' `ttft_s`. `p99 ratio` = loadshape p99 / floor p99 per round, median.
`p99 after 2C`: over the requests after the first 2 x concurrency (by start time). A closed loop at concurrency C
starts C requests at the same instant and they stay in step for a while, so the first two waves are a start-up
burst that decides the p99 of a 4,000-request run at C=256 (10 % of its requests); the rest is the steady state.
`server late`: the mock server's own lateness over the run (its final /stats: how late its frames left against their
schedule, mean / max ms) — time a client timing frames by their arrival cannot remove, because it is real.
"""
import glob
import json
import math
import os
import re
import statistics
import sys


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, math.ceil(q * len(xs)) - 1))]


def fmt(x, d=2):
    return "–" if x is None else f"{x:.{d}f}"


def floor_ttft(res, label):
    try:
        for line in open(os.path.join(res, "client", label + ".log")):
            line = line.strip()
            if line.startswith("{") and "mean_ttft_ms" in line:
                r = json.loads(line)
                # p50/p99 only with scripts/bench/floorclient_ttft.patch applied (bench_replay.sh applies it).
                return {"mean": r["mean_ttft_ms"], "p50": r.get("median_ttft_ms"), "p99": r.get("p99_ttft_ms"),
                        "p99s": r.get("p99_ttft_after_2c_ms")}
    except OSError:
        pass
    return None


def server_late(res, label):
    """(mean, max) ms by which the mock server's frames left late, from its final stats line."""
    try:
        for line in open(os.path.join(res, "client", label + ".server.log")):
            if "final stats" in line:
                st = json.loads(line.split("final stats", 1)[1])
                return st.get("server_mean_late_ms"), st.get("server_max_late_ms")
    except (OSError, ValueError):
        pass
    return None


def loadshape_ttft(res, label, conc):
    path = os.path.join(res, "client", label + ".jsonl")
    if not os.path.exists(path):
        return None
    t = []
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("ok") and r.get("ttft_s") is not None:
            t.append((r["t_submit"], r["ttft_s"] * 1000.0))
    if not t:
        return None
    t.sort()
    steady = [x for _, x in t[2 * conc:]]
    t = [x for _, x in t]
    return {"mean": statistics.mean(t), "p50": pct(t, 0.5), "p99": pct(t, 0.99), "p99s": pct(steady, 0.99), "n": len(t)}


def vllm_ttft(res, label, conc):
    """vllm bench serve's per-request TTFTs (--save-detailed), the same figures as loadshape's."""
    path = os.path.join(res, "client", label + ".vllm.json")
    if not os.path.exists(path):
        return None
    r = json.load(open(path))
    t = sorted((s, x * 1000.0) for s, x, e in zip(r["start_times"], r["ttfts"], r["errors"]) if not e and x is not None)
    if not t:
        return None
    steady = [x for _, x in t[2 * conc:]]
    t = [x for _, x in t]
    return {"mean": statistics.mean(t), "p50": pct(t, 0.5), "p99": pct(t, 0.99), "p99s": pct(steady, 0.99), "n": len(t)}


def main():
    res = sys.argv[1] if len(sys.argv) > 1 else "results"
    cells = {}
    for f in sorted(glob.glob(os.path.join(res, "*.json"))):
        if f.endswith("summary.json"):
            continue
        r = json.load(open(f))
        mo = re.match(r"(\w+?)_c(\d+)_itl([\d.]+)(?:_r(\d+))?$", r.get("label", ""))
        if not mo:
            continue
        client, conc, itl, rnd = mo.group(1), int(mo.group(2)), float(mo.group(3)), int(mo.group(4) or 1)
        cpu = r.get("marginal_cpu_s_per_1M_tokens") or r.get("total_cpu_s_per_1M_tokens")
        if client == "floor":
            ttft = floor_ttft(res, r["label"])
        elif client == "vllm":
            ttft = vllm_ttft(res, r["label"], conc)
        else:
            ttft = loadshape_ttft(res, r["label"], conc)
        cells.setdefault((conc, itl), {}).setdefault(client, {})[rnd] = {
            "cpu": cpu, "rc": r.get("rc"), "other": (r.get("other_cpu_s") or 0) / max(r.get("wall_s") or 1, 1e-9),
            "ttft": ttft, "requests": r.get("server_completed_streams"), "late": server_late(res, r["label"]),
        }
    others = sorted({cl for c in cells.values() for cl in c if cl != "floor"},
                    key=lambda cl: (cl != "loadshape", cl))
    print("| case | floor CPU-s/1M tok (runs; median) | client | client CPU (runs; median) | ratio of medians | "
          "median paired ratio | other CPU (cores) |")
    print("|---|---|---|---|---:|---:|---|")
    for (conc, itl) in sorted(cells, key=lambda k: (k[1] > 0, k[0])):
        c = cells[(conc, itl)]
        fl = c.get("floor", {})
        fv = [fl[k]["cpu"] for k in sorted(fl) if fl[k]["cpu"]]
        fm = statistics.median(fv) if fv else None
        name = f"{'zero delay' if itl == 0 else f'{itl:g} ms pacing'}, c={conc}"
        for cl in others:
            ls = c.get(cl, {})
            if not ls:
                continue
            lv = [ls[k]["cpu"] for k in sorted(ls) if ls[k]["cpu"]]
            lm = statistics.median(lv) if lv else None
            paired = [ls[k]["cpu"] / fl[k]["cpu"] for k in sorted(ls) if k in fl and ls[k]["cpu"] and fl[k]["cpu"]]
            other = [v["other"] for d in (fl, ls) for v in d.values()]
            print(f"| {name} | {' / '.join(fmt(x, 1) for x in fv) or '–'}; **{fmt(fm, 1)}** | {cl} | "
                  f"{' / '.join(fmt(x, 1) for x in lv) or '–'}; **{fmt(lm, 1)}** | "
                  f"{fmt(lm / fm) if fm and lm else '–'} | {fmt(statistics.median(paired)) if paired else '–'} | "
                  f"{fmt(min(other), 1) if other else '–'}–{fmt(max(other), 1) if other else '–'} |")
    print()
    print("| paced case | floor mean TTFT ms (runs) | floor p50 | floor p99 (runs; median) | floor p99 after 2C | client | "
          "mean TTFT ms (runs) | p50 | p99 (runs; median) | p99 after 2C | "
          "p99 ratio (median paired) | other CPU, cores (floor / client per round) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (conc, itl) in sorted(k for k in cells if k[1] > 0):
        c = cells[(conc, itl)]
        fl = c.get("floor", {})
        ft = [fl[k]["ttft"] for k in sorted(fl) if fl[k]["ttft"]]
        fp99 = [t["p99"] for t in ft if t.get("p99") is not None]
        fp99s = [t["p99s"] for t in ft if t.get("p99s") is not None]
        runs = lambda xs, key: " / ".join(fmt(t.get(key), 1) for t in xs) or "–"
        med = lambda xs: fmt(statistics.median(xs), 1) if xs else "–"
        for cl in others:
            ls = c.get(cl, {})
            if not ls:
                continue
            lt = [ls[k]["ttft"] for k in sorted(ls) if ls[k]["ttft"]]
            p99 = [t["p99"] for t in lt]
            lp99s = [t["p99s"] for t in lt if t.get("p99s") is not None]
            paired = [ls[k]["ttft"]["p99"] / fl[k]["ttft"]["p99"] for k in sorted(ls)
                      if k in fl and ls[k]["ttft"] and fl[k]["ttft"] and fl[k]["ttft"].get("p99")]
            other = " / ".join(f"{c[x][k]['other']:.1f}" for k in sorted(ls) for x in ("floor", cl)
                               if x in c and k in c[x])
            print(f"| {itl:g} ms, c={conc} | {runs(ft, 'mean')} | {runs(ft, 'p50')} | {runs(ft, 'p99')}; "
                  f"**{med(fp99)}** | {runs(ft, 'p99s')}; **{med(fp99s)}** | {cl} | "
                  f"{runs(lt, 'mean')} | {runs(lt, 'p50')} | {runs(lt, 'p99')}; **{med(p99)}** | "
                  f"{runs(lt, 'p99s')}; **{med(lp99s)}** | "
                  f"{fmt(statistics.median(paired)) if paired else '–'} | {other or '–'} |")
    print()
    print("| paced case | client | server late, mean ms (runs) | server late, max ms (runs) |")
    print("|---|---|---|---|")
    for (conc, itl) in sorted(k for k in cells if k[1] > 0):
        for cl, runs_ in sorted(cells[(conc, itl)].items(), key=lambda kv: (kv[0] != "floor", kv[0])):
            late = [runs_[k]["late"] for k in sorted(runs_) if runs_[k]["late"]]
            print(f"| {itl:g} ms, c={conc} | {cl} | {' / '.join(fmt(m) for m, _ in late) or '–'} | "
                  f"{' / '.join(fmt(x, 1) for _, x in late) or '–'} |")


if __name__ == "__main__":
    main()
