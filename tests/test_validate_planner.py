#!/usr/bin/env python3
"""tests/test_validate_planner.py: scripts/validate_planner.py's --out, with a runs file and with --published: the
file is written, one row per input row with the predictions, and never over an input; --device-set-on sets a key on
one device's rows only. Needs ./train (make train).
One line per check, "N passed, N failed" last."""
import csv
import os
import subprocess
import sys
import tempfile

from harness import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "validate_planner.py")
check = Checks("validate_planner")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=ROOT)


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def first_rows(src, dst, n):
    """The header and the first n rows of src, written to dst."""
    with open(src, newline="") as f:
        lines = f.readlines()
    with open(dst, "w", newline="") as f:
        f.writelines(lines[:n + 1])


def main():
    if not os.path.exists(os.path.join(ROOT, "train")):
        sys.exit("error: ./train not found: run make train first")
    tmp = tempfile.mkdtemp(prefix="test_validate_planner_")
    # a runs file: the layouts study's schema, four runs of calibration.csv's first sheet
    runs, out = os.path.join(tmp, "runs.csv"), os.path.join(tmp, "runs_pred.csv")
    first_rows(os.path.join(ROOT, "..", "shared", "data", "layouts_study", "calibration.csv"), runs, 4)
    p = run(runs, "--out", out)
    got = rows_of(out) if os.path.exists(out) else []
    ok = p.returncode == 0 and len(got) == 4 and all(r["pred_fits"] in ("0", "1") for r in got)
    check(ok, "out_with_runs_file", "exit %d, %d rows with pred_fits (4 runs)" % (p.returncode, len(got)))

    # --published: three rows of one source; each row's prediction and its leave-one-source-out one
    pub, out = os.path.join(tmp, "published.csv"), os.path.join(tmp, "published_pred.csv")
    first_rows(os.path.join(ROOT, "dev", "published_runs.csv"), pub, 3)
    p = run("--published", pub, "--out", out)
    got = rows_of(out) if os.path.exists(out) else []
    ok = p.returncode == 0 and len(got) == 3 and all(r["pred_mfu_pct"] and r["loso_pred_mfu_pct"] for r in got)
    # the file's leave-one-source-out MFU MAE is the one printed
    mae = sum(abs(float(r["loso_pred_mfu_pct"]) - float(r["mfu_pct"])) for r in got) / len(got) if got else -1
    printed = "leave-one-source-out: 3 runs, MFU MAE %.2f," % mae
    ok = ok and printed in p.stdout
    check(ok, "out_with_published", "exit %d, %d rows with pred_mfu_pct and loso_pred_mfu_pct (3 runs); '%s' %s" % (
          p.returncode, len(got), printed, "printed" if printed in p.stdout else "NOT printed"))

    # --out naming the input: refused in one line, the input kept
    before = open(pub).read()
    p = run("--published", pub, "--out", pub)
    kept = open(pub).read() == before
    line = "error: --out %s: is a file this run reads or writes; it is not overwritten" % pub
    check(p.returncode == 1 and p.stderr.strip() == line and kept, "out_on_input_refused",
          "exit %d, stderr %r, input %s" % (p.returncode, p.stderr.strip(), "kept" if kept else "CHANGED"))
    before = open(runs).read()
    p = run(runs, "--out", runs)
    kept = open(runs).read() == before
    check(p.returncode == 1 and kept, "out_on_runs_file_refused",
          "exit %d, input %s" % (p.returncode, "kept" if kept else "CHANGED"))
    # compared by file identity: a link to the input is the input; --plot on an input refused the same way
    link = os.path.join(tmp, "link.csv")
    os.symlink(pub, link)
    before = open(pub).read()
    p = run("--published", pub, "--out", link)
    kept = open(pub).read() == before and os.path.islink(link)
    check(p.returncode == 1 and p.stderr.strip().startswith("error: --out %s:" % link) and kept,
          "out_on_link_to_input_refused", "exit %d, stderr %r, input %s" % (
              p.returncode, p.stderr.strip(), "kept" if kept else "CHANGED"))
    p = run("--published", pub, "--plot", pub)
    kept = open(pub).read() == before
    check(p.returncode == 1 and p.stderr.strip().startswith("error: --plot %s:" % pub) and kept,
          "plot_on_input_refused", "exit %d, stderr %r, input %s" % (
              p.returncode, p.stderr.strip(), "kept" if kept else "CHANGED"))
    # --device-set-on: a key set on one device's rows moves them and no other row; a malformed spec, a device with no
    # row and a runs file are refused in one line
    two = os.path.join(tmp, "two_devices.csv")
    with open(os.path.join(ROOT, "dev", "published_runs.csv"), newline="") as f:
        lines = f.readlines()
    a100 = next(l for l in lines[1:] if ",a100-80gb," in l)
    h100 = next(l for l in lines[1:] if ",h100-sxm," in l)
    with open(two, "w", newline="") as f:
        f.writelines([lines[0], a100, h100])
    base_out, set_out = os.path.join(tmp, "base_pred.csv"), os.path.join(tmp, "set_pred.csv")
    p0 = run("--published", two, "--out", base_out)
    p1 = run("--published", two, "--out", set_out, "--device-set-on", "h100-sxm:matmul_eff=0.9")
    base, got = (rows_of(o) if os.path.exists(o) else [] for o in (base_out, set_out))
    pair = {r["device"]: (float(b["pred_mfu_pct"]), float(r["pred_mfu_pct"]), float(b["loso_pred_mfu_pct"]),
                          float(r["loso_pred_mfu_pct"])) for b, r in zip(base, got)}
    ok = (p0.returncode == 0 and p1.returncode == 0 and len(pair) == 2 and pair["a100-80gb"][0] == pair["a100-80gb"][1]
          and pair["a100-80gb"][2] == pair["a100-80gb"][3] and pair["h100-sxm"][1] > pair["h100-sxm"][0]
          and pair["h100-sxm"][3] > pair["h100-sxm"][2])
    check(ok, "device_set_on_one_device", "exit %d / %d; MFU without / with (leave-one-source-out too): %s" % (
          p0.returncode, p1.returncode, pair))
    for args, line in ((("--published", two, "--device-set-on", "h100-sxm=matmul_eff"),
                        "error: --device-set-on h100-sxm=matmul_eff: give DEVICES:KEY=VALUE (e.g. "
                        "h100-sxm,h200-sxm:matmul_eff=0.69)"),
                       (("--published", two, "--device-set-on", "h200-sxm:matmul_eff=0.9"),
                        "error: --device-set-on: device 'h200-sxm' has no row in %s (its devices: a100-80gb, "
                        "h100-sxm)" % two),
                       ((runs, "--device-set-on", "a100-80gb:matmul_eff=0.9"),
                        "error: --device-set-on is for --published (a runs file: -- --device-set KEY=VALUE)")):
        p = run(*args)
        check(p.returncode == 1 and p.stderr.strip() == line and not p.stdout, "device_set_on_refused " + args[-1],
              "exit %d, stderr %r" % (p.returncode, p.stderr.strip()))
    # a runs file without the measured columns score() reads, or a run ok with an MFU that is no number: one line
    # (a KeyError and a ValueError traceback before)
    bare, pct = os.path.join(tmp, "bare.csv"), os.path.join(tmp, "pct.csv")
    got = [next(r for r in rows_of(os.path.join(ROOT, "..", "shared", "data", "layouts_study", "calibration.csv"))
                if r["status"] == "ok")]  # a run that ran
    for path, drop, mfu in ((bare, ("status", "mfu_pct", "step_time_s"), None), (pct, (), "41%")):
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, [k for k in got[0] if k not in drop])
            w.writeheader()
            for r in got:
                w.writerow({k: v for k, v in dict(r, mfu_pct=mfu if r["status"] == "ok" and mfu else r["mfu_pct"]
                                                  ).items() if k not in drop})
    for path, line in ((bare, "error: %s: no column status, mfu_pct (the calibration.csv schema: status "
                        "ok|oom|error, mfu_pct of the runs ok)" % bare),
                       (pct, "error: %s: run 1: status ok, but mfu_pct '41%%' is not a number" % pct)):
        p = run(path)
        check(p.returncode == 1 and p.stderr.strip() == line, "measured_columns_refused " + os.path.basename(path),
              "exit %d, stderr %r" % (p.returncode, p.stderr.strip()))
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    sys.exit(check.finish())


if __name__ == "__main__":
    main()
