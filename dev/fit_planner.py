#!/usr/bin/env python3
"""How the a100-80gb profile's fitted efficiencies were found (dev/PLANNER.md, "Fitted").

    python3 dev/fit_planner.py ../shared/data/layouts_study/calibration.csv [--train ./train]

Minimizes the MFU mean absolute error of ./train --plan --runs (the same flags as
scripts/validate_planner.py) over the runs that ran, by a coordinate search on the device
keys below, starting from the built-in profile. attn_eff_flash2 stays at the published
FlashAttention-2 figure (Dao 2023: ~50% of the A100's peak, causal, head dim 128, 2k-8k
tokens) and the memory keys are not searched here: they were set from the out-of-memory
boundaries (dev/PLANNER.md). Prints the error at each improvement and the result as
--device-set flags; copy the values into profile_a100() by hand.
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
    "matmul_eff": (0.75, 0.3, 1.0),
    "attn_eff_flash1": (0.35, 0.05, 1.0),
    "bmm_eff": (0.5, 0.05, 1.0),
    "hbm_eff": (0.8, 0.2, 1.0),
    "link_eff": (0.75, 0.2, 1.0),
}


def mae(train, runs, values, out):
    cmd = [train, "--plan", "--runs", runs] + STUDY_FLAGS
    for k, v in values.items():
        cmd += ["--device-set", "%s=%.5f" % (k, v)]
    subprocess.run(cmd + ["--plan-csv", out], capture_output=True, check=True)
    with open(out) as f:
        err = [abs(float(r["pred_mfu_pct"]) - float(r["mfu_pct"])) for r in csv.DictReader(f)
               if r["status"] == "ok" and r["pred_mfu_pct"] != "" and r["pred_fits"] == "1"]
    return sum(err) / len(err)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs")
    ap.add_argument("--train", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
    a = ap.parse_args()
    out = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    x = {k: v[0] for k, v in KEYS.items()}
    best = mae(a.train, a.runs, x, out)
    print("start: MAE %.3f" % best)
    step = 0.1
    while step > 0.002:
        improved = False
        for k, (_, lo, hi) in KEYS.items():
            for sign in (1, -1):
                while True:
                    y = dict(x)
                    y[k] = min(hi, max(lo, x[k] * (1 + sign * step)))
                    e = mae(a.train, a.runs, y, out)
                    if e >= best - 1e-6:
                        break
                    x, best, improved = y, e, True
                    print("MAE %.3f  %s" % (best, " ".join("%s=%.4f" % kv for kv in x.items())))
        if not improved:
            step /= 2
    os.unlink(out)
    print("result: MAE %.3f\n%s" % (best, " ".join("--device-set %s=%.4f" % kv for kv in x.items())))


if __name__ == "__main__":
    main()
