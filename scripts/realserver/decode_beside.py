#!/usr/bin/env python3
"""What does a decode step read: each sequence's own KV, or a view as long as the longest one's?
(docs/calibration.md, "Decode views sized to the longest sequence")

Requests decode alone and in pairs on a llama-server at 127.0.0.1:PORT (4 slots, each request pinned to a slot
with `id_slot`: short contexts on slots 0 and 1, long ones on 2 and 3), each case several times in alternation;
prints llama.cpp's own `timings.predicted_per_token_ms`, medians per case. If each sequence reads only its own
KV (vLLM's paged attention, the engine model's `Σcontext`), a short and a long context together cost about the
midpoint of (short, short) and (long, long); if a step's sequences each read a view as long as the longest
(llama.cpp's per-stream KV views: `n_kv` is the largest stream's used cells, padded to 256), they cost as much
as (long, long). That holds for adjacent slots (1 and 2): llama.cpp splits a batch into ubatches of consecutive
sequence ids (`split_equal`), so slots 0 and 3 decode as two ubatches, each over its own view.

    python3 scripts/realserver/decode_beside.py PORT [SHORT LONG]
"""
import json
import random
import statistics as st
import sys
import threading
import urllib.request

port = int(sys.argv[1])
short = int(sys.argv[2]) if len(sys.argv) > 2 else 500
long_ = int(sys.argv[3]) if len(sys.argv) > 3 else 6000
OUT = 300
ROUNDS = 5


def comp(toks, n, slot):
    body = json.dumps(
        {"prompt": toks, "n_predict": n, "cache_prompt": True, "ignore_eos": True, "id_slot": slot}
    ).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())["timings"]


rnd = random.Random(3)


def rt(n):
    return [rnd.randrange(300, 4000) for _ in range(n)]


# One prefix per slot, cached once: each case below re-sends them with 8 new tokens, so its requests prefill 8
# tokens and spend their time decoding.
prefixes = {0: rt(short), 1: rt(short), 2: rt(long_), 3: rt(long_)}
for slot, p in prefixes.items():
    comp(p, 1, slot)


def together(slots):
    res = {}

    def run(slot):
        res[slot] = comp(prefixes[slot] + rt(8), OUT, slot)["predicted_per_token_ms"]

    ts = [threading.Thread(target=run, args=(s,)) for s in slots]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [res[s] for s in slots]


cases = {
    "short alone (slot 1)": (1,),
    "long alone (slot 2)": (2,),
    "short+short (slots 0, 1)": (0, 1),
    "short+long, adjacent (1, 2)": (1, 2),
    "short+long, apart (0, 3)": (0, 3),
    "long+long (slots 2, 3)": (2, 3),
}
got = {k: [] for k in cases}
for _ in range(ROUNDS):
    for k, slots in cases.items():
        got[k].append(together(slots))
print(f"contexts: short {short}, long {long_} tokens; {OUT} tokens decoded per request; {ROUNDS} rounds")
med = {}
for k, v in got.items():
    med[k] = [st.median(x[i] for x in v) for i in range(len(v[0]))]
    print(f"{k:28s} ms per token: " + ", ".join(f"{m:.2f}" for m in med[k]))
ss = med["short+short (slots 0, 1)"][0]
ll = med["long+long (slots 2, 3)"][0]
for k in ("short+long, adjacent (1, 2)", "short+long, apart (0, 3)"):
    print(f"{k}: {(med[k][0] - ss) / (ll - ss) * 100:.0f} % of the way from short+short to long+long "
          "(own KV: about 50 %; views as long as the longest: about 100 %)")
