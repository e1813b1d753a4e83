#!/usr/bin/env python3
"""tests/test_help.py: what --help says against what the parsers take.

./train --help: every flag it lists is parsed (`FLAG VALUE --help` exits 0 when the parser knows FLAG and takes
VALUE: the loop stops at --help, before any run), with each name of a choice (a|b|c) and, for the others, a value
of their kind. ./train --plan --help: the same for each flag listed at a line's start and each choice named after
a flag, and every flag planner/cli.h's parser compares against is named in it. The Python scripts of scripts/,
data/ and dev/: --help exits 0 with the docstring's first paragraph whole (not cut at a line's end) and a
description for every argument. Needs ./train (make train). One line per check, "N passed, N failed" last."""
import ast
import glob
import os
import re
import subprocess
import sys

from harness import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train")
check = Checks("help")


def run(args):
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=60)
    return r.returncode, r.stdout, r.stderr


def values_of_kind(flag):
    """Values to try for a flag that is not a choice: one of them is in its range."""
    named = {"--model": "tiny", "--device": "cpu", "--attn-tile": "auto", "--resume": "auto"}
    return [named[flag]] if flag in named else ["1", "2", "0.5"]


def try_flag(prefix, flag, value):
    """(exit code, stderr) of the parser given FLAG [VALUE] then --help."""
    rc, _, err = run([TRAIN] + prefix + [flag] + ([value] if value is not None else []) + ["--help"])
    return rc, err.strip()


def check_train_help():
    rc, out, _ = run([TRAIN, "--help"])
    entries = re.findall(r"^  (--[a-z0-9-]+)(?: (\S+))?", out, re.M)
    check(rc == 0 and len(entries) > 40, "train_lists_flags", f"rc {rc}, {len(entries)} flags")
    refused = []
    for flag, metavar in entries:
        if "|" in metavar:  # a choice: each of its names
            for name in metavar.split("|"):
                rc, err = try_flag([], flag, name)
                if rc != 0:
                    refused.append(f"{flag} {name}: {err}")
            continue
        tries = [try_flag([], flag, v) for v in (values_of_kind(flag) if metavar else [None])]
        if all(rc != 0 for rc, _ in tries):
            refused.append(f"{flag}: {tries[0][1]}")
    check(not refused, "train_every_listed_flag_and_choice_parsed", "; ".join(refused[:5]))


def check_plan_help():
    rc, out, _ = run([TRAIN, "--plan", "--help"])
    check(rc == 0, "plan_help_exits_0", f"rc {rc}")
    refused = []
    for flag, metavar in re.findall(r"^  (--[a-z0-9-]+)(?: (\S+))?", out, re.M):
        if "|" in metavar:
            continue  # its names below
        rc, err = try_flag(["--plan"], flag, values_of_kind(flag)[0])
        if "unknown flag" in err:
            refused.append(f"{flag}: {err}")
    for flag, names in re.findall(r"(--[a-z0-9-]+) ([a-z0-9_.-]+(?:\|[a-z0-9_.-]+)+)", out):
        for name in names.split("|"):
            rc, err = try_flag(["--plan"], flag, name)
            if rc != 0:
                refused.append(f"{flag} {name}: {err}")
    check(not refused, "plan_every_listed_flag_and_choice_parsed", "; ".join(refused[:5]))
    with open(os.path.join(ROOT, "planner", "cli.h")) as f:
        parsed = set(re.findall(r'strcmp\(flag, "(--[a-z0-9-]+)"\)', f.read()))
    listed = set(re.findall(r"--[a-z0-9-]+", out))
    missing = sorted(parsed - listed)
    check(len(parsed) > 40 and not missing, "plan_every_parsed_flag_listed",
          f"{len(parsed)} flags parsed" + (", not in --plan --help: " + " ".join(missing) if missing else ""))


def check_script_help(path):
    name = os.path.relpath(path, ROOT)
    rc, out, err = run([sys.executable, path, "--help"])
    if rc != 0 and "ModuleNotFoundError" in err:
        print(f"SKIP help/{name}: {err.strip().splitlines()[-1]}")
        return
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    first_paragraph = " ".join(doc.split("\n\n")[0].split())
    whole = rc == 0 and first_paragraph in " ".join(out.split())
    check(whole, f"{name}_description_whole",
          "" if whole else f"rc {rc}; the docstring's first paragraph, '...{first_paragraph[-60:]}', not whole")
    # in the argument sections (a header line "...:" to a blank line), a line that is only an argument's names
    # and value (no run of two spaces before a description) with no indented line under it has no description
    bare, in_section = [], False
    lines = out.splitlines() + [""]
    for i, ln in enumerate(lines[:-1]):
        in_section = (in_section and ln != "") or re.match(r"^(options|optional arguments|positional arguments):$", ln)
        if in_section and re.match(r"^  \S", ln) and "  " not in ln.strip() and not lines[i + 1].startswith(" " * 8):
            bare.append(ln.strip())
    check(not bare, f"{name}_every_argument_described", ", ".join(bare))


def main():
    if not os.path.exists(TRAIN):
        sys.exit("error: tests/test_help.py: ./train not found (make train)")
    check_train_help()
    check_plan_help()
    for path in sorted(glob.glob(os.path.join(ROOT, d, "*.py")) for d in ("scripts", "data", "dev")):
        for p in path:
            check_script_help(p)
    sys.exit(check.finish())


if __name__ == "__main__":
    main()
