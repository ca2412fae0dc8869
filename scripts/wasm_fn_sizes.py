#!/usr/bin/env python3
"""Where a wasm module's code bytes are: each function body's size by its (mangled) name, summed by where it comes
from. Reads the code section and the `name` section; no dependencies.

    python3 scripts/wasm_fn_sizes.py $CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/loadshape-app.wasm [TOP]

Use cargo's output (before wasm-bindgen and wasm-opt: those drop the names and shrink the code to about 0.85x,
keeping the proportions). Prints bytes, share and function count per group, then the TOP largest functions.
A generic's instances are named after the generic (serde's, tachys'), not after the crate that instantiated them.
"""
import collections
import re
import sys


def leb(b, i):
    r = s = 0
    while True:
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return r, i


def sections(b):
    """Each section of module `b` as (id, start of the section, start of its contents, contents size)."""
    i, out = 8, []
    while i < len(b):
        sid, start = b[i], i
        size, i = leb(b, i + 1)
        out.append((sid, start, i, size))
        i += size
    return out


def parse(b):
    """Module `b`'s function bodies (bytes, in index order after the imported functions) and their names by
    function index, with the count of imported functions (functions are numbered after them)."""
    imported, bodies, names = 0, [], {}
    for sid, _, i, size in sections(b):
        end = i + size
        if sid == 2:  # imports
            n, j = leb(b, i)
            for _ in range(n):
                for _ in range(2):  # module and field names
                    ln, j = leb(b, j)
                    j += ln
                kind = b[j]
                j += 1
                if kind == 0:
                    _, j = leb(b, j)
                    imported += 1
                elif kind in (1, 2):  # table (reftype first) or memory: limits, with a maximum when flag & 1
                    j += kind == 1
                    flags, j = leb(b, j)
                    _, j = leb(b, j)
                    if flags & 1:
                        _, j = leb(b, j)
                elif kind == 3:
                    j += 2
                else:
                    j += 1
                    _, j = leb(b, j)
        elif sid == 10:
            n, j = leb(b, i)
            for _ in range(n):
                ln, j = leb(b, j)
                bodies.append(b[j:j + ln])
                j += ln
        elif sid == 0:
            ln, j = leb(b, i)
            if b[j:j + ln] == b"name":
                j += ln
                while j < end:
                    sub = b[j]
                    ssz, j = leb(b, j + 1)
                    if sub == 1:
                        n, k = leb(b, j)
                        for _ in range(n):
                            idx, k = leb(b, k)
                            ln, k = leb(b, k)
                            names[idx] = b[k:k + ln].decode("utf8", "replace")
                            k += ln
                    j += ssz
    return imported, bodies, names


def functions(path):
    imported, bodies, names = parse(open(path, "rb").read())
    return [(names.get(imported + k, f"f{k}"), len(body)) for k, body in enumerate(bodies)]


GROUPS = [
    ("sort (core::slice::sort)", r"5slice4sort|slice\.\.sort"),
    ("serde_path_to_error", r"serde_path_to_error"),
    ("postcard", r"postcard"),
    ("serde_json", r"serde_json"),
    ("serde", r"serde"),
    ("leptos (tachys, reactive_graph, ...)", r"tachys|reactive_graph|leptos|any_spawner|or_poisoned|throw_error"),
    ("shared", r"6shared|shared\.\."),
    ("the page (loadshape_app)", r"loadshape_app"),
    ("web-sys, js-sys, wasm-bindgen, gloo", r"web_sys|js_sys|wasm_bindgen|gloo"),
    ("core, alloc, std", r"core|alloc|std|dlmalloc|hashbrown"),
]


def group(name):
    return next((g for g, pattern in GROUPS if re.search(pattern, name)), "other")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    fns = functions(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    size, count = collections.Counter(), collections.Counter()
    for name, s in fns:
        size[group(name)] += s
        count[group(name)] += 1
    total = sum(size.values())
    for g, s in size.most_common():
        print(f"{s:>9} {100 * s / total:5.1f} % {count[g]:>6} fns  {g}")
    print(f"{total:>9} all code, {len(fns)} functions")
    for name, s in sorted(fns, key=lambda f: -f[1])[:top]:
        print(f"{s:>9}  {re.sub(r'17h[0-9a-f]{16}E$', '', name)[:160]}")


if __name__ == "__main__":
    main()
