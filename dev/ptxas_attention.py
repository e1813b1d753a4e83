#!/usr/bin/env python3
"""Registers and spills of every attention kernel variant, from nvcc's `-Xptxas -v`.

Compiles backend/gpu/attention.cuh and attention_block.cuh (every variant their registries and
launchers instantiate) for sm_80 and sm_90, reads ptxas's lines per kernel and writes the table
into docs/GPU.md between the markers <!-- ptxas:begin --> and <!-- ptxas:end --> (--print: to
standard output only). Exit 1 when a variant spills (--allow-spills: report only).
Usage: python3 dev/ptxas_attention.py [--print] [--allow-spills] [--nvcc PATH]
"""
import argparse, os, re, shutil, subprocess, sys, tempfile, threading

ARCHS = ["80", "90"]
# template parameters of each kernel, in order (the kernels' own names for them)
PARAMS = {
    "attention_forward_kernel": ["HD", "MT", "BK", "QREG", "DOC"],
    "attention_backward_kernel": ["HD", "KVREG", "BQ", "DOC"],
    "attention_ring_forward_kernel": ["HD", "DOC", "AT"],
    "attention_ring_backward_kernel": ["HD", "DOC", "AT"],
}
SOURCE = """#include "backend/gpu/attention_block.cuh"
// every launcher the registries and the block dispatch name, so every kernel is compiled
void* ptxas_keep[] = {(void*)ATT_FWD_TILES, (void*)ATT_BWD_TILES, (void*)attention_block_run};
"""


def compile_arch(nvcc, root, src, arch, out):
    cmd = [nvcc, "-std=c++17", "-O3", "-I" + root, "-c", "-o", os.devnull, "-Xptxas", "-v",
           "-diag-suppress", "114,177", "-gencode", "arch=compute_%s,code=sm_%s" % (arch, arch), src]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out[arch] = (p.returncode, p.stdout + p.stderr)


def mangled_kernel(name):
    """('attention_forward_kernel', [64, 2, 64, 1, 0]) from an Itanium-mangled template kernel."""
    m = re.match(r"_Z(\d+)", name)
    if not m:
        return None, []
    n = int(m.group(1))
    base = name[m.end():m.end() + n]
    rest = name[m.end() + n:]
    if not rest.startswith("I"):
        return base, []
    args, i = [], 1
    while i < len(rest) and rest[i] == "L":
        a = re.match(r"L([ib])(n?\d+)E", rest[i:])
        if not a:
            break
        v = a.group(2).replace("n", "-")
        args.append(int(v))
        i += a.end()
    return base, args


def parse(text):
    """{kernel: (registers, spill stores, spill loads, stack)} from ptxas -v output."""
    res, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            res[cur] = [0, 0, 0, 0]
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            res[cur][3], res[cur][1], res[cur][2] = int(m.group(1)), int(m.group(2)), int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            res[cur][0] = int(m.group(1))
            cur = None
    return res


def label(base, args):
    names = PARAMS.get(base, [])
    parts = ["%s %d" % (n, v) for n, v in zip(names, args) if n not in ("HD", "DOC")]
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print the table, leave docs/GPU.md alone")
    ap.add_argument("--allow-spills", action="store_true", help="exit 0 even when a variant spills")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc",
                    help="the CUDA compiler (default: nvcc on the PATH, else /usr/local/cuda/bin/nvcc)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(a.nvcc):
        sys.exit("error: nvcc not found (--nvcc PATH)")
    tmp = tempfile.mkdtemp(prefix="ptxas_attention.")
    src = os.path.join(tmp, "attention_ptxas.cu")
    with open(src, "w") as f:
        f.write(SOURCE)
    out = {}
    th = [threading.Thread(target=compile_arch, args=(a.nvcc, root, src, arch, out)) for arch in ARCHS]
    for t in th:
        t.start()
    for t in th:
        t.join()
    shutil.rmtree(tmp)
    for arch in ARCHS:
        if out[arch][0]:
            sys.exit("error: nvcc for sm_%s failed:\n%s" % (arch, out[arch][1][-3000:]))
    ver = subprocess.run([a.nvcc, "--version"], capture_output=True, text=True).stdout
    vm = re.search(r"release ([\d.]+)", ver)
    per_arch = {arch: parse(out[arch][1]) for arch in ARCHS}
    rows, spills = {}, []
    for arch in ARCHS:
        for mangled, (regs, st, ld, stack) in per_arch[arch].items():
            base, args = mangled_kernel(mangled)
            if base not in PARAMS:
                continue
            names = PARAMS[base]
            hd = args[names.index("HD")]
            doc = args[names.index("DOC")]
            key = (base, hd, label(base, args))
            cell = "%d" % regs
            if st or ld:
                cell += " (spills %d/%d B)" % (st, ld)
                spills.append("%s hd %d %s%s sm_%s" % (base, hd, key[2], " docs" if doc else "", arch))
            elif stack:
                cell += " (stack %d B)" % stack
            rows.setdefault(key, {})[(arch, doc)] = cell
    order = list(PARAMS)
    lines = ["Registers a thread (`nvcc -Xptxas -v`, CUDA %s, `python3 dev/ptxas_attention.py`); each cell"
             % (vm.group(1) if vm else "?"),
             "without / with documents (the ring kernels' `AT 1`: `--cp-split doc`'s positions, always with",
             "documents; their tiles: `RingTile`). 255 is the most a thread may have; a spill is written as",
             "stores/loads in bytes.", "",
             "| kernel | hd | variant | sm_80 | sm_90 |", "|---|---|---|---|---|"]
    for key in sorted(rows, key=lambda k: (order.index(k[0]), k[1], k[2])):
        r = rows[key]
        cells = []
        for arch in ARCHS:
            c = [r.get((arch, d)) for d in (0, 1)]
            cells.append(" / ".join(x if x else "–" for x in c))
        lines.append("| %s | %d | %s | %s |" % (key[0].replace("attention_", "").replace("_kernel", ""), key[1],
                                                  key[2], " | ".join(cells)))
    lines.append("")
    lines.append("Spilling: " + ("" if spills else "none."))
    lines += ["- " + x for x in spills]
    table = "\n".join(lines)
    if a.print:
        print(table)
    else:
        path = os.path.join(root, "docs", "GPU.md")
        doc = open(path).read()
        b, e = "<!-- ptxas:begin -->", "<!-- ptxas:end -->"
        if b not in doc or e not in doc:
            sys.exit("error: docs/GPU.md has no %s ... %s markers" % (b, e))
        new = doc[:doc.index(b) + len(b)] + "\n" + table + "\n" + doc[doc.index(e):]
        with open(path + ".tmp", "w") as f:
            f.write(new)
        os.replace(path + ".tmp", path)
        print("docs/GPU.md: %d kernel variants, %d spilling" % (len(rows), len(spills)))
    if spills and not a.allow_spills:
        print("spills: " + "; ".join(spills), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
