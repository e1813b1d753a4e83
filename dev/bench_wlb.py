#!/usr/bin/env python3
"""bench_wlb.py: the same long-tailed documents under --packing concat, greedy and wlb, at
pipeline parallelism 2 and 4 and context parallelism 2, on this machine's CPU ranks (by hand,
not a test). Prints per run the means over the steps after the first of: the step time, the
measured bubble, the attention-work spreads across micro-batches, dp ranks and cp ranks and the
attention work (visible pairs) of a step (the JSON log's attn_spread_*, attn_work), and the
step time against greedy's. wlb's outlier rounds make some steps heavier than others: run
enough steps that each packing sees about the same work (the attn Mpairs column says).

    make train && python3 dev/bench_wlb.py [--steps 40] [--seq-len 1024] [--median 78.5]

Documents: --data docs:lognormal:MEDIAN:0.99 (runtime/packing.h: FineWeb's log-normal fit,
median 628 of an 8k context, scaled to the sequence length). The model is small and the
sequence long so that attention is a large part of a step, as in long-context training.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(flags, steps, workdir, tag):
    log = os.path.join(workdir, tag + ".jsonl")
    cmd = ["./train", "--steps", str(steps), "--eval-every", "0", "--sample-len", "0", "--quiet", "--log", log]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd + flags, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: {' '.join(cmd + flags)} exited {out.returncode}:\n{out.stderr[-2000:]}")
    rows = [json.loads(line) for line in open(log) if '"loss"' in line and '"val_loss"' not in line]
    rows = rows[1:]  # the first step warms up
    mean = lambda key: statistics.mean(r.get(key, 0.0) for r in rows)
    return {k: mean(key) for k, key in (("ms", "ms"), ("bubble", "bubble"), ("mb", "attn_spread_mb"),
                                        ("dp", "attn_spread_dp"), ("cp", "attn_spread_cp"), ("work", "attn_work"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--median", type=float, default=None, help="document median (default 628 x seq-len / 8192)")
    a = ap.parse_args()
    median = a.median or 628.0 * a.seq_len / 8192
    model = ["--model", "tiny", "--n-layer", "4", "--seq-len", str(a.seq_len), "--doc-mask", "on",
             "--data", f"docs:lognormal:{median:g}:0.99"]
    layouts = [("pp2", ["--pp", "2", "--global-batch", "8", "--micro-batch", "1"]),
               ("pp4", ["--pp", "4", "--global-batch", "8", "--micro-batch", "1"]),
               ("cp2", ["--cp", "2", "--global-batch", "8", "--micro-batch", "1"])]
    print(f"tiny model, 4 layers, seq {a.seq_len}, documents log-normal median {median:g} sigma 0.99, "
          f"global batch 8 x micro-batch 1, {a.steps} steps (means of steps 2..)")
    print(f"{'layout':6} {'packing':7} {'step ms':>8} {'bubble':>7} {'spread mb':>10} {'dp':>6} {'cp':>6}"
          f" {'attn Mpairs':>12} {'vs greedy':>10}")
    with tempfile.TemporaryDirectory() as workdir:
        for name, flags in layouts:
            res = {}
            for packing in ("concat", "greedy", "wlb"):
                res[packing] = r = run(model + flags + ["--packing", packing], a.steps, workdir, f"{name}_{packing}")
                ratio = r["ms"] / res["greedy"]["ms"] if "greedy" in res else float("nan")
                print(f"{name:6} {packing:7} {r['ms']:8.1f} {r['bubble']:7.2f} {100 * r['mb']:9.1f}% "
                      f"{100 * r['dp']:5.1f}% {100 * r['cp']:5.1f}% {r['work'] / 1e6:12.2f} {ratio:10.2f}", flush=True)


if __name__ == "__main__":
    main()
