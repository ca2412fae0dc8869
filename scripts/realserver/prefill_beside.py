#!/usr/bin/env python3
"""Does a prompt attend to the other slots' KV? (docs/calibration.md, "Prefill beside other slots' KV")

Times warm prefills of 256 new tokens after a 1,700-token cached prefix on a llama-server at 127.0.0.1:PORT,
alone and while another request (the holder) decodes 1,500 tokens at 1,000 / 3,000 / 6,000 tokens of context,
and prints the server's own `timings.prompt_ms` of each. With one KV stream per slot (`--parallel N`, the
default `kv_unified = false`) the prefills cost the same beside any holder; with `-kvu` (one unified stream)
they grow with the holder's context, which is what `prefill_batch_kv_ms_per_ktok` models.

    python3 scripts/realserver/prefill_beside.py PORT
"""
import json
import random
import statistics as st
import sys
import threading
import time
import urllib.request

port = int(sys.argv[1])


def comp(toks, n=1):
    body = json.dumps({"prompt": toks, "n_predict": n, "cache_prompt": True, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    t = json.loads(urllib.request.urlopen(req).read())["timings"]
    return t["cache_n"], t["prompt_n"], t["prompt_ms"], t.get("predicted_per_token_ms")


rnd = random.Random(2)


def rt(n):
    return [rnd.randrange(300, 4000) for _ in range(n)]


pre = rt(1700)
comp(pre)


def warm(k):
    return [comp(pre + rt(256))[2] for _ in range(k)]


print("alone:", [round(x) for x in warm(6)])
for hold in [1000, 3000, 6000]:
    h = rt(hold)
    comp(h)  # its prefix cached in some slot
    res = {}

    def bg():
        res["bg"] = comp(h + rt(8), 1500)

    th = threading.Thread(target=bg)
    th.start()
    time.sleep(0.3)
    w = warm(6)
    th.join()
    print(f"beside a holder of {hold}:", [round(x) for x in w], "median", round(st.median(w)))
print("alone:", [round(x) for x in warm(6)])
