#!/usr/bin/env python3
"""scripts/check_headers.py: the folders are layers, and every header stands alone.

Checks, each a PASS/FAIL line, then "N passed, N failed" (make test counts them):
  order   an #include "X" in a file of folder F names a file of F's layer or of a layer listed
          before it (--layers, lowest first; a folder's layer is its first path component, so
          backend/cpu/ and backend/gpu/ are in backend's);
  cycle   no chain of includes leads from a header back to itself;
  alone   each header compiles as the only file of a translation unit: C headers with --cc,
          the GPU ones (.cuh, and the .h of folders named gpu) with --cu (the CUDA emulator's
          g++: the .cuh files as emu/cu2cpp.pl translated them, found first on its -I path).
Usage (the Makefile's check_headers target passes the build's compilers and flags):
  scripts/check_headers.py --layers "base layout data backend layer_parallel model parallel planner runtime" \
      --cc "gcc -std=gnu11 -I. ..." --cu "g++ -std=c++17 -Iemu/build -I. -include emu/cuda_emu.h ..."
"""
import argparse
import concurrent.futures
import os
import re
import shlex
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def headers_of(layers):
    found = []
    for layer in layers:
        for root, _, files in os.walk(layer):
            found += [os.path.join(root, f) for f in files if f.endswith((".h", ".cuh"))]
    return sorted(found)


def includes_of(path):
    with open(path) as f:
        return [inc for inc in INCLUDE.findall(f.read()) if os.path.exists(inc)]


def is_gpu(path):
    return path.endswith(".cuh") or "gpu" in path.split("/")[:-1]


def check_order(headers, rank):
    bad = []
    for h in headers:
        for inc in includes_of(h):
            top = inc.split("/")[0]
            if top in rank and rank[top] > rank[h.split("/")[0]]:
                bad.append(f"{h} includes {inc} ({top} is above {h.split('/')[0]})")
    return bad


def find_cycle(headers):
    graph = {h: includes_of(h) for h in headers}
    state = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for h in headers:
        if h not in state:
            cycle = visit(h, [h])
            if cycle:
                return cycle
    return None


def compile_alone(header, cc, cu):
    if is_gpu(header):
        translated = os.path.join("emu/build", header)
        src = translated if header.endswith(".cuh") or os.path.exists(translated) else header
        cmd = shlex.split(cu) + ["-fsyntax-only", "-x", "c++", src]
    else:
        cmd = shlex.split(cc) + ["-fsyntax-only", "-x", "c", header]
    r = subprocess.run(cmd, capture_output=True, text=True)
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    return header, r.returncode == 0, errors[:3]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", required=True, help="the folders' layers, lowest first")
    ap.add_argument("--cc", required=True, help="the C compiler and flags for the C headers")
    ap.add_argument("--cu", required=True, help="the emulator's C++ compiler and flags for the GPU headers")
    ap.add_argument("--jobs", type=int, default=2, help="compilers run at once (default 2)")
    args = ap.parse_args()
    layers = args.layers.split()
    rank = {layer: i for i, layer in enumerate(layers)}
    headers = headers_of(layers)
    passed = failed = 0

    def report(ok, what, detail=""):
        nonlocal passed, failed
        print(f"{'PASS' if ok else 'FAIL'} headers {what}{': ' + detail if detail else ''}")
        passed, failed = passed + ok, failed + (not ok)

    bad = check_order(headers, rank)
    report(not bad, f"order ({' < '.join(layers)}; {len(headers)} headers)", "; ".join(bad))
    cycle = find_cycle(headers)
    report(cycle is None, "no include cycle", " -> ".join(cycle or []))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for header, ok, errors in pool.map(lambda h: compile_alone(h, args.cc, args.cu), headers):
            report(ok, f"{header} compiles alone", " | ".join(errors))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
