#!/usr/bin/env python3
"""Each part's share of the page's gzip'd wasm: the bytes a group of functions takes out of `gzip -9` if it went.

Sizes before wasm-opt say little about the bundle's gzip, so this works on the optimized module itself. It needs
the function names, which Trunk's build strips, so build the same module with names kept:

    source scripts/env.sh && trunk build --release --offline      # cargo's wasm for the page, as Trunk builds it
    W=$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/loadshape-app.wasm
    WB=$(mktemp -d)
    wasm-bindgen --target web --no-typescript --out-dir "$WB" "$W"
    wasm-opt -g -Oz <WASM_OPT_FLAGS of scripts/page_split.sh> "$WB"/loadshape-app_bg.wasm -o "$WB"/named.wasm
    python3 scripts/bench/wasm_gzip_share.py "$WB"/named.wasm

For each group (a crate, or a module of `shared` and the page; std's sort instances on their own) the module is
rebuilt with that group's function bodies replaced by `unreachable` and compressed again; the difference from the
whole is the group's share. Groups overlap in gzip's dictionary, so the shares sum to less than the whole. The name
section is left out of every measurement (Trunk's bundle has none). Function names are demangled with c++filt.
"""
import collections
import gzip
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from wasm_fn_sizes import parse, sections  # noqa: E402  (the module reader: scripts/wasm_fn_sizes.py)


def enc(n):
    out = bytearray()
    while True:
        x, n = n & 0x7F, n >> 7
        if n:
            out.append(x | 0x80)
        else:
            out.append(x)
            return bytes(out)


def rebuild(b, bodies, drop):
    out = bytearray(b[:8])
    for sid, start, off, n in sections(b):
        if sid == 0:
            continue
        if sid == 10:
            code = bytearray(enc(len(bodies)))
            for k, body in enumerate(bodies):
                body = b"\x00\x00\x0b" if k in drop else body  # no locals; unreachable; end
                code += enc(len(body)) + body
            out += bytes([10]) + enc(len(code)) + code
        else:
            out += b[start : off + n]
    return bytes(out)


def group(name):
    name = re.sub(r"::h[0-9a-f]{16}$", "", name)
    if "slice::sort" in name:
        return "std sorts"
    if "serde_path_to_error" in name:
        return "serde_path_to_error"
    own = re.search(r"\b(shared|loadshape_app)::([a-z_0-9]+)", name)
    if own:
        return own.group(0)
    crates = re.findall(r"([a-z_][a-z0-9_]*)::", name)
    return crates[0] if crates else "other"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    b = open(sys.argv[1], "rb").read()
    imports, bodies, names = parse(b)
    if not names:
        sys.exit(f"{sys.argv[1]} has no name section: build it with wasm-opt -g (see --help)")
    raw = [names.get(k + imports, "?") for k in range(len(bodies))]
    demangled = subprocess.run(["c++filt"], input="\n".join(raw), capture_output=True, text=True, check=True)
    groups = collections.defaultdict(set)
    for k, name in enumerate(demangled.stdout.split("\n")[: len(bodies)]):
        groups[group(name)].add(k)

    def gz(x):
        return len(gzip.compress(x, 9))

    whole = gz(rebuild(b, bodies, set()))
    print(f"whole module (no names): gzip -9 {whole:,} B")
    rows = []
    for g, ks in groups.items():
        code = sum(len(bodies[k]) for k in ks)
        if code >= 3000:
            rows.append((whole - gz(rebuild(b, bodies, ks)), code, len(ks), g))
    print(f"{'gzip share':>11} {'code':>8} {'fns':>5}  group")
    for share, code, n, g in sorted(rows, reverse=True):
        print(f"{share:>11,} {code:>8,} {n:>5}  {g}")


if __name__ == "__main__":
    main()
