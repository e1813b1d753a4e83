#!/usr/bin/env python3
"""tests/test_requirements.py: the Python requirements split by use (requirements/*.txt) and
their union (requirements.txt, what .ci/run installs). Checks that requirements.txt includes
every file of requirements/ and names no package itself, and that each Python file's imports
outside the standard library are in the file of its use: data/prepare.py in data.txt, the
scripts' figures in plots.txt, the Hugging Face check in hf.txt (dev/ and tests/ in any).
Needs no package itself. One line per check, "N passed, N failed" last."""
import ast
import glob
import os
import re
import sys

from harness import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# which requirements file a user of each Python file installs (the README says the same)
USE = {"data/prepare.py": "data.txt", "scripts/": "plots.txt", "tests/test_export_hf.py": "hf.txt"}
# modules a file uses only when they import, that no requirements file can name: FlashAttention-3's interface,
# built from Dao-AILab/flash-attention's hopper/ (its README: python setup.py install), not PyPI's flash-attn
# (dev/bench_torch.py times it when it imports, and says so in one line when not)
OPTIONAL = {"flash_attn_interface"}
check = Checks("requirements")


def lines_of(path):
    with open(path) as f:
        return [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()]


def packages(path):  # the names a requirements file installs (following -r)
    names = set()
    for ln in lines_of(path):
        if ln.startswith("-r "):
            names |= packages(os.path.join(os.path.dirname(path), ln[3:].strip()))
        else:
            names.add(re.split(r"[<>=!~\[; ]", ln)[0].lower())
    return names


def third_party_imports(path):  # top-level modules imported anywhere in the file, not stdlib or ours
    ours = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "*", "*.py"))}
    mods = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m not in ours}


def main():
    parts = sorted(glob.glob(os.path.join(ROOT, "requirements", "*.txt")))
    top = lines_of(os.path.join(ROOT, "requirements.txt"))
    included = sorted(os.path.join(ROOT, ln[3:].strip()) for ln in top if ln.startswith("-r "))
    check(included == parts and len(top) == len(parts), "union",
          f"requirements.txt includes {[os.path.relpath(p, ROOT) for p in included]} of "
          f"{[os.path.relpath(p, ROOT) for p in parts]} and names {len(top) - len(included)} package(s) itself")
    every = packages(os.path.join(ROOT, "requirements.txt"))
    for path in sorted(glob.glob(os.path.join(ROOT, "*", "*.py"))):
        rel = os.path.relpath(path, ROOT)
        use = next((f for p, f in USE.items() if rel.startswith(p)), None)
        have = packages(os.path.join(ROOT, "requirements", use)) if use else every
        missing = sorted(third_party_imports(path) - have - OPTIONAL)
        check(not missing, f"imports of {rel}", f"{sorted(third_party_imports(path))} in "
              f"{'requirements/' + use if use else 'requirements.txt'}" + (f"; missing {missing}" if missing else ""))
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
