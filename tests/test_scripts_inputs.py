#!/usr/bin/env python3
"""tests/test_scripts_inputs.py: scripts/plot_layouts.py and scripts/sweep.py given bad input: one error line and a
non-zero exit, never a traceback or a hang, and no output over an input or through a link. The refusals come before
any figure is drawn or run started (no matplotlib needed for them); sweep.py needs ./train to exist (make train).
One line per check, "N passed, N failed" last."""
import os
import subprocess
import sys
import tempfile

from harness import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "scripts", "plot_layouts.py")
SWEEP = os.path.join(ROOT, "scripts", "sweep.py")
# a --plan-csv of two layouts, the columns plot_layouts.py reads
PLAN = ("tp,pp,dp,cp,vpp,micro_batch,recompute,attention,rms_kernel,sp,zero,schedule,fits,mfu_study\n"
        "1,1,8,1,1,1,none,flash2,1,0,1,1f1b,1,0.41\n"
        "2,1,4,1,1,2,none,flash2,1,0,1,1f1b,0,\n")
check = Checks("scripts_inputs")


def run(script, *args):
    try:
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, "timeout", "", "(no answer in 60 s)")


def refused(name, p, rc, says, kept=None):
    """p exited rc with stderr's last line holding says, no traceback; kept: (path, text) the file still holds."""
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    ok = p.returncode == rc and says in last and "Traceback" not in p.stderr
    same = kept is None or open(kept[0], "rb").read() == kept[1].encode()
    check(ok and same, name, "exit %s, last line %r%s" % (p.returncode, last, "" if same else ", the input CHANGED"))


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="test_scripts_inputs_")
    plan = write(os.path.join(tmp, "plan.csv"), PLAN)
    png = os.path.join(tmp, "out.png")
    # plot_layouts.py: the figure through a link to its input (matplotlib wrote a PNG over the CSV), a file it
    # cannot read (a traceback: KeyError, ValueError, FileNotFoundError), a FIFO (hung), an --out not a PNG
    link = os.path.join(tmp, "link.png")
    os.symlink(plan, link)
    refused("plot_out_link_to_input", run(PLOT, plan, "--out", link), 1,
            "error: --out %s: is a file this run reads; it is not overwritten" % link, (plan, PLAN))
    refused("plot_out_on_runs", run(PLOT, plan, "--runs", plan, "--out", plan), 1, "is a file this run reads",
            (plan, PLAN))
    no_mfu = write(os.path.join(tmp, "no_mfu.csv"), PLAN.replace(",mfu_study", ",mfu"))
    refused("plot_column_missing", run(PLOT, no_mfu, "--out", png), 1, "error: %s: no column mfu_study" % no_mfu)
    junk = write(os.path.join(tmp, "junk.csv"), PLAN.replace("1,1,8,", "1,x,8,"))
    refused("plot_not_a_number", run(PLOT, junk, "--out", png), 1, "error: %s: line 2: pp 'x' is not a whole number"
            % junk)
    refused("plot_input_missing", run(PLOT, os.path.join(tmp, "none.csv"), "--out", png), 1, "cannot read it as CSV")
    fifo = os.path.join(tmp, "fifo.csv")
    os.mkfifo(fifo)
    refused("plot_input_fifo", run(PLOT, fifo, "--out", png), 1, "error: %s: not a regular file" % fifo)
    refused("plot_out_not_png", run(PLOT, plan, "--out", tmp), 1, "give a .png file")
    refused("plot_out_dir_missing", run(PLOT, plan, "--out", os.path.join(tmp, "none", "x.png")), 1,
            "its directory does not exist")
    try:
        import matplotlib  # noqa: F401
        p = run(PLOT, plan, "--out", png)
        check(p.returncode == 0 and os.path.getsize(png) > 0, "plot_writes_png", "exit %s" % p.returncode)
    except ImportError:
        print("skipped scripts_inputs/plot_writes_png: no matplotlib")

    # sweep.py: a size of 0 (--steps 0 ended in an IndexError after minutes of runs), an --out that is a file, its
    # sweep.csv a link (written through it) or a hard link (the other name truncated too); refused before any run
    if not os.path.exists(os.path.join(ROOT, "train")):
        sys.exit("error: ./train not found: run make train first")
    refused("sweep_steps_zero", run(SWEEP, "--steps", "0"), 2, "argument --steps: '0' is not a whole number >= 1")
    refused("sweep_micro_batch_zero", run(SWEEP, "--micro-batches", "2,0"), 2, "'0' is not a whole number >= 1")
    refused("sweep_out_a_file", run(SWEEP, "--out", plan), 1, "error: --out %s: exists and is not a folder" % plan,
            (plan, PLAN))
    out = os.path.join(tmp, "sweep")
    os.mkdir(out)
    os.symlink(plan, os.path.join(out, "sweep.csv"))
    refused("sweep_csv_link", run(SWEEP, "--no-plot", "--out", out), 1, "sweep.csv is a symbolic link", (plan, PLAN))
    os.unlink(os.path.join(out, "sweep.csv"))
    os.link(plan, os.path.join(out, "sweep.png"))
    refused("sweep_png_hard_link", run(SWEEP, "--out", out), 1, "sweep.png is a file of 2 names", (plan, PLAN))
    sys.exit(check.finish())


if __name__ == "__main__":
    main()
