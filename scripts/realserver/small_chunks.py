#!/usr/bin/env python3
"""Warm prefills of few new tokens on llama-server's CPU backend (docs/measurements.md, "llama.cpp's CPU backend:
prompt chunks under 64 tokens per sequence").

Primes slots 0 and 1 of a llama-server at 127.0.0.1:PORT with a cached prefix of about 5,000 tokens, then times
continuations of N new tokens on that prefix, alone (slot 0) and two at once (slots 0 and 1), and prints the
server's own `timings.prompt_ms` of each: median and range over REPEAT rounds. ggml's CPU flash attention runs a
sequence's query rows through its tiled (GEMM) kernel only when a ubatch holds at least 64 of them
(`GGML_FA_TILE_Q`); fewer go through the one-row-at-a-time kernel, each row over the whole cached context, as a
decoding token does. Two prompts at once are split by `split_equal` into ubatches with as many tokens of each
(256 + 256 of 512, then the rest), so two continuations of 257 to 319 tokens end in such a chunk.

    python3 scripts/realserver/small_chunks.py PORT [N ...]   (default N: 20 40 54 64 100 270 300 330)
"""
import json
import random
import statistics as st
import sys
import threading
import urllib.request

port = int(sys.argv[1])
sizes = [int(a) for a in sys.argv[2:]] or [20, 40, 54, 64, 100, 270, 300, 330]
REPEAT = 3
WORDS = "the of and to in is was for on that with as by at from it an be this are have or not which but".split()
rnd = random.Random(1)


def text(n):
    """About `n` tokens of plain words."""
    return " ".join(rnd.choice(WORDS) for _ in range(n))


def complete(prompt, slot, out):
    body = json.dumps({"prompt": prompt, "n_predict": 4, "cache_prompt": True, "id_slot": slot,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    t = json.loads(urllib.request.urlopen(req).read())["timings"]
    out[slot] = (t["prompt_n"], t["prompt_ms"])


prefix = [text(5000), text(5000)]
for slot in (0, 1):
    complete(prefix[slot], slot, {})
print("new tokens | alone: prompt_ms median (range) | two at once: prompt_ms median (range)")
for n in sizes:
    row = []
    for slots in ((0,), (0, 1)):
        ms = []
        for _ in range(REPEAT):
            out = {}
            threads = [threading.Thread(target=complete, args=(prefix[s] + " " + text(n), s, out)) for s in slots]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            ms.extend(v[1] for v in out.values())
        row.append(f"{st.median(ms):7.1f} ({min(ms):.0f}-{max(ms):.0f})")
    print(f"{n:10d} | {row[0]:>28} | {row[1]:>28}", flush=True)
