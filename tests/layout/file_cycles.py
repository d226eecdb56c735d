#!/usr/bin/env python3
"""file_cycles.py - no two source files of a module call each other, directly or through others.

Reads the object files of each module (one list file per module, written by CMake from
$<TARGET_OBJECTS:...>), builds the call graph between its source files from the symbols each
object defines and the ones it needs (nm), and fails naming every cycle with the symbols that
close it. A cycle is two files a reader cannot understand one at a time; docs/ARCHITECTURE.md
states the direction each module's folders depend in.

    file_cycles.py [--nm NM] NAME=LIST_FILE ...

Exit 0 when no module has a cycle, 1 when one has, 2 on bad input (a list with no objects, an
object nm cannot read, no call between any two files at all: the check would prove nothing)."""
import collections
import os
import subprocess
import sys


def source_name(obj):
    """math/blas.c from .../adapterd_engine.dir/math/blas.c.o"""
    parts = obj.replace(os.sep, "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].endswith(".dir"):
            name = "/".join(parts[i + 1:])
            return name[:-2] if name.endswith(".o") else name
    return os.path.basename(obj)


def graph(nm, objects):
    # one nm for all of a module's objects (-A names each line's object): a process per object took most
    # of the check's minute on a loaded machine
    defined, needed = {}, collections.defaultdict(set)
    r = subprocess.run([nm, "-A"] + objects, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"file_cycles: {nm}: {r.stderr.strip()}")
    for line in r.stdout.splitlines():
        obj, sep, rest = line.partition(":")
        if not sep:
            continue
        src = source_name(obj)
        f = rest.split()
        if len(f) == 3 and f[1] in "TDBRCV":
            defined[f[2]] = src
        elif len(f) == 2 and f[0] == "U":
            needed[src].add(f[1])
    edges = collections.defaultdict(dict)  # file -> {file it calls: a symbol}
    for src, syms in needed.items():
        for s in sorted(syms):
            to = defined.get(s)
            if to and to != src:
                edges[src].setdefault(to, s)
    return {source_name(o) for o in objects}, edges


def cycles(nodes, edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(argv):
    nm, modules = "nm", []
    i = 0
    while i < len(argv):
        if argv[i] == "--nm" and i + 1 < len(argv):
            nm = argv[i + 1]
            i += 2
            continue
        name, _, path = argv[i].partition("=")
        if not path:
            print(f"file_cycles: expected NAME=LIST_FILE, got {argv[i]}", file=sys.stderr)
            return 2
        modules.append((name, path))
        i += 1
    if not modules:
        print(__doc__, file=sys.stderr)
        return 2
    bad, total_edges = 0, 0
    for name, path in modules:
        with open(path) as f:
            objects = [line.strip() for line in f if line.strip()]
        if not objects:
            print(f"file_cycles: {name}: {path} lists no object files", file=sys.stderr)
            return 2
        nodes, edges = graph(nm, objects)
        n_edges = sum(len(e) for e in edges.values())
        total_edges += n_edges
        found = cycles(nodes, edges)
        print(f"{name}: {len(objects)} files, {n_edges} file-to-file calls, {len(found)} cycles")
        for comp in found:
            bad = 1
            print(f"  cycle: {' <-> '.join(comp)}")
            for a in comp:
                for b, sym in sorted(edges[a].items()):
                    if b in comp:
                        print(f"    {a} -> {b} ({sym})")
    if total_edges == 0:
        print("file_cycles: no call between any two files was found: the check proved nothing", file=sys.stderr)
        return 2
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
