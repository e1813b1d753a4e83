#!/usr/bin/env python3
"""dev/bench_split.py: stages cut by cost (--pp-split auto) against the even cut, measured on
CPU ranks in one alternating run (even, auto, even, auto, ...).

The model has a heavy head (a large vocabulary, few layers), so with the even cut the last
stage (its layers, the head and the loss) sets every stage's pace. For each run: ./train
--pp PP --trace (the first 3 steps); over traced steps 2-3 (the first warms up):
  step = the pipeline's window, the first rank's first op to the last rank's last op;
  busy = each rank's compute ops (F, B, W) in it; idle = step - busy.
Printed: the median over the repeats of the step, the busiest rank's idle and the largest
idle of any rank (ms, and as a share of the step: on a shared machine the load scales every
time of a run, the shares much less), and each rank's busy time (the cut's balance).
Also printed: the ranks computing at once (the busy times summed over the ranks / the step).
Where it reaches the cores of the machine, the cores set the step (it is at least the work
summed over the ranks / the cores, the same for every cut), and a balanced cut cannot shorten
it: measure with a core per rank (pp 2 on 2), or with a head so heavy that the last stage alone
is more than 1/cores of the work (then the even cut's step is that stage's).
The busiest rank's idle is the pipeline's fill and drain (the other stages' first forward and
last backward): a balanced cut makes those stages slower, so it grows; what the cut removes is
the other ranks' wait for the slowest stage (the largest idle).

Usage: python3 dev/bench_split.py [--pp 4] [--repeat 3] [--flags "MODEL FLAGS"]
"""
import argparse, os, statistics
from bench_zb import read_trace, run  # (this folder is on the path: the script's own)

MODEL = "--model tiny --n-layer 12 --d-model 128 --vocab 4096 --seq-len 64 --micro-batch 2 --global-batch 16"


def measure(split, pp, flags):
    trace = f"/tmp/bench_split_{split}.json"
    run(f"OMP_NUM_THREADS=1 ./train {flags} --pp {pp} --pp-split {split} --steps 3 --warmup 1 --eval-every 0 "
        f"--sample-len 0 --quiet --trace {trace}")
    span, busy, _, n_steps = read_trace(trace)
    ranks = sorted(busy)
    busiest = max(ranks, key=lambda r: busy[r])
    ms = 1e-3 / (n_steps - 1)
    idle_max = max(span - busy[r] for r in ranks)
    return dict(step=span * ms, idle_busiest=(span - busy[busiest]) * ms, idle_max=idle_max * ms,
                idle_head=(span - busy[ranks[-1]]) * ms, idle_mean=statistics.mean(span - busy[r] for r in ranks) * ms,
                share_busiest=(span - busy[busiest]) / span, share_max=idle_max / span,
                at_once=sum(busy.values()) / span, busy=[busy[r] * ms for r in ranks])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pp", type=int, default=4, help="pipeline stages (default 4)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each cut, the median shown (default 3)")
    ap.add_argument("--flags", default=MODEL, help=f"model flags (default: {MODEL})")
    a = ap.parse_args()
    run("make -s train")
    runs = {"even": [], "auto": []}
    for _ in range(a.repeat):  # alternating, so a passing load falls on both
        for split in runs:
            runs[split].append(measure(split, a.pp, a.flags))
    print(f"pp {a.pp}, {a.flags}; {os.cpu_count()} cores; traced steps 2-3, median of {a.repeat} alternating runs")
    print("| --pp-split | step ms | busiest rank idle ms (of step) | largest idle ms (of step) | busy ms per rank "
          "| ranks computing at once |")
    print("|---|---|---|---|---|---|")
    med = {}
    keys = ("step", "idle_busiest", "idle_max", "idle_head", "idle_mean", "share_busiest", "share_max", "at_once")
    for split, rs in runs.items():
        med[split] = m = {k: statistics.median(r[k] for r in rs) for k in keys}
        busy = " / ".join(f"{statistics.median(r['busy'][i] for r in rs):.0f}" for i in range(a.pp))
        print(f"| {split} | {m['step']:.0f} | {m['idle_busiest']:.0f} ({100 * m['share_busiest']:.1f}%) | "
              f"{m['idle_max']:.0f} ({100 * m['share_max']:.1f}%) | {busy} | {m['at_once']:.2f} |")
    e, u = med["even"], med["auto"]
    print(f"head stage's rank (the even cut's busiest) idle ms: even {e['idle_head']:.0f}, auto {u['idle_head']:.0f}; "
          f"mean idle over the ranks: even {e['idle_mean']:.0f}, auto {u['idle_mean']:.0f}")
    print(f"auto / even: step {u['step'] / e['step']:.2f}, busiest rank idle {u['idle_busiest'] / e['idle_busiest']:.2f} "
          f"(share {u['share_busiest'] / e['share_busiest']:.2f}), largest idle {u['idle_max'] / e['idle_max']:.2f} "
          f"(share {u['share_max'] / e['share_max']:.2f}), head stage's idle {u['idle_head'] / e['idle_head']:.2f}, "
          f"mean idle {u['idle_mean'] / e['idle_mean']:.2f}")


if __name__ == "__main__":
    main()
