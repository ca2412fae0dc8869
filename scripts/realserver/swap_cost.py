#!/usr/bin/env python3
"""What does llama-server's host prompt cache cost each time a slot changes hands? (docs/calibration.md,
"Slots changing hands")

With more sessions than slots, a session's next step rarely finds its own slot free: the server picks a slot by
prompt similarity, else the least recently used one, and on the LRU path it saves the slot's prompt into the host
cache and loads the best cached prompt for the new request (`get_available_slot`, `prompt_save`, `prompt_load`),
on its main loop, before the next batch. SESSIONS sessions of STEPS steps (a BASE-token first prompt of random
token ids, then +64 generated +200 new per step, think 0–0.3 s) against a llama-server at 127.0.0.1:PORT started
with `-lv 4`, whose log (LOG) prints "selected slot by ..." and "prompt cache update took X ms"; prints how the
slots were chosen and the update's times.

    python3 scripts/realserver/swap_cost.py PORT LOG [SESSIONS BASE STEPS]   (8 1500 5)
"""
import json
import random
import re
import statistics as st
import sys
import threading
import urllib.request

port, log = int(sys.argv[1]), sys.argv[2]
sessions, base, steps = (int(x) for x in (sys.argv[3:6] or ["8", "1500", "5"]))


def complete(tokens):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        json.dumps({"prompt": tokens, "n_predict": 64, "cache_prompt": True, "ignore_eos": True}).encode(),
        {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())["timings"]


def session(s):
    rnd = random.Random(s)
    tokens = [rnd.randrange(300, 4000) for _ in range(base)]
    for _ in range(steps):
        complete(tokens)
        tokens += [rnd.randrange(300, 4000) for _ in range(64 + 200)]
        threading.Event().wait(rnd.uniform(0.0, 0.3))


threads = [threading.Thread(target=session, args=(s,)) for s in range(sessions)]
for t in threads:
    t.start()
for t in threads:
    t.join()
text = open(log, errors="replace").read()
chosen = re.findall(r"selected slot by (\w+)", text)
took = sorted(float(x) for x in re.findall(r"prompt cache update took ([0-9.]+) ms", text))
print("slots chosen:", {k: chosen.count(k) for k in sorted(set(chosen))})
if took:
    print(f"prompt cache updates: {len(took)}, median {st.median(took):.2f} ms, max {took[-1]:.2f} ms, "
          f"sum {sum(took):.0f} ms")
