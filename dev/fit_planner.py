#!/usr/bin/env python3
"""How the a100-80gb profile's fitted efficiencies were found (dev/PLANNER.md, "Fitted").

    python3 dev/fit_planner.py ../shared/data/layouts_study/calibration.csv [--train ./train]
    python3 dev/fit_planner.py --memory RUNS.csv [--train ./train]
    python3 dev/fit_planner.py --loso RUNS.csv [--train ./train]

Minimizes the MFU mean absolute error of ./train --plan --runs (the same flags as
scripts/validate_planner.py) over the runs that ran, by a coordinate search on the device
keys below, starting from the built-in profile. attn_eff_flash2 stays at the published
FlashAttention-2 figure (Dao 2023: ~50% of the A100's peak, causal, head dim 128, 2k-8k
tokens) and the memory keys are not searched here: they were set from the out-of-memory
boundaries (dev/PLANNER.md). Nor is bmm_eff (unfused attention's batched matmuls: the GEMMs'
rate, since their shapes are modelled; the study alone put it at 0.25-0.30 with MAE
2.05-2.06 against 2.22 at 0.68, and Narayanan et al.'s runs at 0.68: dev/PLANNER.md), nor is matmul_k_half (a GEMM tile's fixed cost): it was scanned
by rebuilding with 32, 64 and 128 and running this search at each (dev/PLANNER.md). Prints the error at each improvement and the result as
--device-set flags; copy the values into profile_a100() by hand.

--memory: the memory reserve (mem_frag, mem_overhead_gib) from the out-of-memory boundaries,
leave-one-sheet-out: for every sheet of RUNS.csv, the grid point that misjudges the fewest
runs of the other sheets (OOM_WEIGHT: how much more an out-of-memory run predicted to fit
counts, the error that costs a user a failed launch) is scored on the held-out sheet. Prints each fold's choice
and errors and the pooled leave-one-sheet-out accuracy; the fit on all sheets last.

--loso: the time keys fitted on all sheets but one and scored on that one, for each sheet: a
held-out MAE near the fitted one says the keys describe the hardware, not the sheets' rows.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from validate_planner import STUDY_FLAGS  # noqa: E402

KEYS = {  # key: (start, lower, upper)
    "matmul_eff_scaling": (0.75, 0.3, 1.0),  # the study's codebase's own rate (--software scaling; a framework's
                                             # matmul_eff is PyTorch's measured one: device.h)
    "attn_eff_flash1": (0.35, 0.05, 1.0),
    "hbm_eff": (0.8, 0.2, 1.0),
    "link_eff": (0.75, 0.2, 1.0),
}


def mae(train, runs, values, out, keep=lambda sheet: True):
    """MFU mean absolute error of the runs that ran and are predicted to fit, of the sheets `keep` accepts."""
    cmd = [train, "--plan", "--runs", runs] + STUDY_FLAGS
    for k, v in values.items():
        cmd += ["--device-set", "%s=%.5f" % (k, v)]
    subprocess.run(cmd + ["--plan-csv", out], capture_output=True, check=True)
    with open(out) as f:
        err = [abs(float(r["pred_mfu_pct"]) - float(r["mfu_pct"])) for r in csv.DictReader(f)
               if r["status"] == "ok" and r["pred_mfu_pct"] != "" and r["pred_fits"] == "1" and keep(r["sheet"])]
    return sum(err) / len(err)


def coordinate_search(train, runs, out, keep, verbose):
    """The KEYS minimizing mae() over the sheets `keep` accepts; returns (values, MAE)."""
    x = {k: v[0] for k, v in KEYS.items()}
    best = mae(train, runs, x, out, keep)
    if verbose:
        print("start: MAE %.3f" % best)
    step = 0.1
    while step > 0.002:
        improved = False
        for k, (_, lo, hi) in KEYS.items():
            for sign in (1, -1):
                while True:
                    y = dict(x)
                    y[k] = min(hi, max(lo, x[k] * (1 + sign * step)))
                    e = mae(train, runs, y, out, keep)
                    if e >= best - 1e-6:
                        break
                    x, best, improved = y, e, True
                    if verbose:
                        print("MAE %.3f  %s" % (best, " ".join("%s=%.4f" % kv for kv in x.items())))
        if not improved:
            step /= 2
    return x, best


MEM_FRAG = [0.20 + 0.02 * i for i in range(14)]
OOM_WEIGHT = 1  # what an out-of-memory run predicted to fit costs against a run that fits predicted not to
MEM_OVERHEAD_GIB = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0]


def memory_loso(train, runs):
    out = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    fits = {}  # (frag, overhead) -> [(sheet, status, predicted fit)]
    for frag in MEM_FRAG:
        for ovh in MEM_OVERHEAD_GIB:
            cmd = [train, "--plan", "--runs", runs] + STUDY_FLAGS + ["--device-set", "mem_frag=%.3f" % frag,
                                                                 "--device-set", "mem_overhead_gib=%.2f" % ovh]
            subprocess.run(cmd + ["--plan-csv", out], capture_output=True, check=True)
            with open(out) as f:
                fits[frag, ovh] = [(r["sheet"], r["status"], r["pred_fits"] == "1") for r in csv.DictReader(f)
                                   if r["status"] in ("ok", "oom")]
    os.unlink(out)

    def errors(rows):
        oom_fit = sum(1 for _, st, fit in rows if st == "oom" and fit)
        ok_nofit = sum(1 for _, st, fit in rows if st == "ok" and not fit)
        return oom_fit, ok_nofit

    def best(exclude):
        return min(fits, key=lambda k: (OOM_WEIGHT * errors([x for x in fits[k] if x[0] != exclude])[0] +
                                        errors([x for x in fits[k] if x[0] != exclude])[1], k[1], k[0]))

    sheets = list(dict.fromkeys(x[0] for x in next(iter(fits.values()))))
    wrong = total = 0
    for s in sheets:
        k = best(s)
        held = [x for x in fits[k] if x[0] == s]
        e = errors(held)
        wrong, total = wrong + sum(e), total + len(held)
        print("held out %-62s mem_frag %.2f mem_overhead_gib %.1f: %d runs, %d out of memory predicted to fit, "
              "%d ran predicted not to" % (s[:62], k[0], k[1], len(held), e[0], e[1]))
    k = best(None)
    e = errors(fits[k])
    print("leave-one-sheet-out accuracy %.3f over %d runs; on all sheets: mem_frag %.2f mem_overhead_gib %.1f "
          "(%d out of memory predicted to fit, %d ran predicted not to)" % (1 - wrong / total, total, k[0], k[1], e[0], e[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", help="CSV of measured runs (the calibration.csv schema)")
    ap.add_argument("--train", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"),
                    help="the trainer binary (default ./train)")
    ap.add_argument("--memory", action="store_true", help="fit the memory reserve, leave-one-sheet-out")
    ap.add_argument("--loso", action="store_true", help="fit the time keys on all sheets but one, score that one, for each")
    a = ap.parse_args()
    if a.memory:
        memory_loso(a.train, a.runs)
        return
    out = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    if a.loso:
        with open(a.runs) as f:
            sheets = list(dict.fromkeys(r["sheet"] for r in csv.DictReader(f)))
        for held in sheets:
            x, fitted = coordinate_search(a.train, a.runs, out, lambda s: s != held, False)
            print("held out %-62s MAE %.2f (fitted on the others: %.2f)  %s" % (held[:62], mae(a.train, a.runs, x, out, lambda s: s == held),
                  fitted, " ".join("%s=%.3f" % kv for kv in x.items())))
        os.unlink(out)
        return
    x, best = coordinate_search(a.train, a.runs, out, lambda s: True, True)
    os.unlink(out)
    print("result: MAE %.3f\n%s" % (best, " ".join("--device-set %s=%.4f" % kv for kv in x.items())))

if __name__ == "__main__":
    main()
