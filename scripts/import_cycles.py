#!/usr/bin/env python3
"""Finds file-level import loops in a crate: file A uses B and B uses A, directly or around a loop.

A file uses another when it names an item through it: `crate::a::b`, `super::x`, `self::x`, or, in a module
file (lib.rs, mod.rs), a child's `child::x` path (re-exports included). Test modules (`#[cfg(test)] mod tests`) and
comments are ignored. Usage: import_cycles.py CRATE/src [...]; exits 1 and prints each loop when there is one.
"""
import os, re, sys, itertools
def check(root):
    files = {}
    for dp, dn, fn in os.walk(root):
        for f in fn:
            if f.endswith('.rs'):
                p = os.path.join(dp, f)
                rel = os.path.relpath(p, root)[:-3]
                parts = rel.split(os.sep)
                if parts[-1] in ('mod', 'lib', 'main'):
                    parts = parts[:-1]
                files[tuple(parts)] = p
    mods = set(files)
    def resolve(base, path):
        # longest prefix that is a file module
        segs = list(path)
        for n in range(len(segs), 0, -1):
            if tuple(segs[:n]) in mods:
                return tuple(segs[:n])
        return None
    edges = {m: set() for m in mods}
    for m, p in files.items():
        src = open(p).read()
        src = re.sub(r'//[^\n]*', '', src)
        # cut #[cfg(test)] mod tests { ... } roughly: drop everything after '#[cfg(test)]\nmod tests'
        i = src.find('#[cfg(test)]\nmod tests')
        if i >= 0: src = src[:i]
        is_modfile = os.path.basename(p) in ('mod.rs', 'lib.rs', 'main.rs')
        here = m if is_modfile else m[:-1]   # the module whose children are reachable as `x::`
        for mt in re.finditer(r'\b(crate|super|self)((?:::\w+)+)', src):
            kind, rest = mt.group(1), mt.group(2).split('::')[1:]
            if kind == 'crate': base = ()
            elif kind == 'self': base = m
            else:
                base = m[:-1]
                while rest and rest[0] == 'super':
                    base = base[:-1]; rest = rest[1:]
            t = resolve(base, tuple(base) + tuple(rest))
            if t and t != m: edges[m].add(t)
        # bare child paths used from a module file: `child::`
        for child in [c for c in mods if len(c) == len(m) + 1 and c[:-1] == m] if is_modfile else []:
            if re.search(r'(?<![:\w])' + re.escape(child[-1]) + r'::', src):
                edges[m].add(child)
    # find cycles (SCCs)
    index = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
    def strong(v):
        index[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges[v]:
            if w not in index: strong(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index: strong(v)
    for comp in sccs:
        names = sorted('/'.join(x) or 'lib' for x in comp)
        print(root + ': import loop:', ', '.join(names))
        for a in comp:
            for b in edges[a]:
                if b in comp: print('   ', '/'.join(a) or 'lib', '->', '/'.join(b) or 'lib')
    if not sccs: print(root + ': no import loops')
    return bool(sccs)


if __name__ == '__main__':
    bad = [check(r) for r in sys.argv[1:]]
    sys.exit(1 if any(bad) else 0)
