#!/usr/bin/env python3
"""Does a decoding request slow down beside a chain of prefills, between them? (docs/calibration.md, "The reply
comes back as text", the remaining TPOT misses)

A holder decodes 600 tokens on slot 0 of a llama-server at 127.0.0.1:PORT (streamed: the client's gaps), alone and
then while slot 1 takes warm prefills of 256 new tokens after 1,716 cached, back to back; 3 rounds. Prints the
holder's median gap, mean gap and llama.cpp's `predicted_per_token_ms`, and the prefills' count and `prompt_ms`.

    python3 scripts/realserver/holder_beside.py PORT HOLDER_CONTEXT
"""
import http.client
import json
import random
import statistics as st
import sys
import threading
import time
import urllib.request

port = int(sys.argv[1])
hold = int(sys.argv[2])
rnd = random.Random(9)


def rt(n):
    return [rnd.randrange(300, 4000) for _ in range(n)]


def body(toks, n, slot, stream=False):
    return json.dumps({"prompt": toks, "n_predict": n, "cache_prompt": True, "ignore_eos": True, "id_slot": slot,
                       "stream": stream})


def comp(toks, n, slot):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body(toks, n, slot).encode(),
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())["timings"]


def stream(toks, n, slot):
    """The holder, streamed: (median gap, mean gap, llama.cpp's predicted_per_token_ms), ms."""
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("POST", "/completion", body(toks, n, slot, True), {"Content-Type": "application/json"})
    ts, timings = [], None
    for line in c.getresponse():
        if line.startswith(b"data: "):
            ts.append(time.perf_counter())
            d = json.loads(line[6:])
            if d.get("stop"):
                timings = d.get("timings")
    gaps = [(b - a) * 1000 for a, b in zip(ts[1:-1], ts[2:-1])]
    return st.median(gaps), st.mean(gaps), timings["predicted_per_token_ms"]


H, P = rt(hold), rt(1716)
comp(H, 1, 0)
comp(P, 1, 1)
for _ in range(3):
    print("alone : median, mean gap, server ms/token", ["%.3f" % x for x in stream(H + rt(8), 600, 0)])
    stop, prompt_ms = [False], []

    def chain():
        while not stop[0]:
            prompt_ms.append(comp(P + rt(256), 2, 1)["prompt_ms"])

    th = threading.Thread(target=chain)
    th.start()
    time.sleep(0.2)
    r = stream(H + rt(8), 600, 0)
    stop[0] = True
    th.join()
    print("beside:", ["%.3f" % x for x in r], "prefills", len(prompt_ms), "prompt_ms median %.1f" % st.median(prompt_ms))
