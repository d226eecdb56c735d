#!/usr/bin/env python3
"""header_cycles.py - no two folders of a module include each other's headers, directly or through others.

Reads every .c and .h below ROOT (engine/), and takes each `#include "F/..."` where F is one of ROOT's
folders (core, math, io, model, task, run, tokenizer; a file in math/x86/ belongs to math) as an edge from
the including file's folder to F. A cycle between folders is two layers a reader cannot understand one at a
time, and the direction docs/ARCHITECTURE.md states (core <- math <- io <- model <- task <- run) no longer
holds; the check fails naming every cycle with the includes that close it. Public headers (ROOT/include,
included as "engine/...") are not a folder of the graph: anyone may include them.

    header_cycles.py ROOT [--skip FOLDER]...

Exit 0 when the folders form no cycle, 1 when they do, 2 on bad input (no folder, or no include between
two folders at all: the check would prove nothing)."""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from file_cycles import cycles  # noqa: E402  (Tarjan's strongly connected components)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/([^"]+)"', re.M)


def graph(root, skip):
    folders = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and d not in skip)
    edges = collections.defaultdict(dict)  # folder -> {folder it includes: "file: include"}
    for top in folders:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    to = m.group(1)
                    if to in folders and to != top:
                        rel = os.path.relpath(path, root)
                        edges[top].setdefault(to, f'{rel}: #include "{to}/{m.group(2)}"')
    return set(folders), edges


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    root, skip = argv[0], {"include"}
    i = 1
    while i < len(argv):
        if argv[i] == "--skip" and i + 1 < len(argv):
            skip.add(argv[i + 1])
            i += 2
            continue
        print(f"header_cycles: unknown argument {argv[i]}", file=sys.stderr)
        return 2
    if not os.path.isdir(root):
        print(f"header_cycles: {root} is not a folder", file=sys.stderr)
        return 2
    nodes, edges = graph(root, skip)
    n_edges = sum(len(e) for e in edges.values())
    if not nodes or n_edges == 0:
        print(f"header_cycles: no include between two folders of {root}: the check proved nothing", file=sys.stderr)
        return 2
    found = cycles(nodes, edges)
    print(f"{root}: {len(nodes)} folders, {n_edges} folder-to-folder includes, {len(found)} cycles")
    for comp in found:
        print(f"  cycle: {' <-> '.join(comp)}")
        for a in comp:
            for b, where in sorted(edges[a].items()):
                if b in comp:
                    print(f"    {a} -> {b} ({where})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
