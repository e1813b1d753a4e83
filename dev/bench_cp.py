#!/usr/bin/env python3
"""dev/bench_cp.py: what context parallelism buys and how even the ring's work is, on CPU ranks.

Memory: a tiny GPT-2 at a long sequence (one sequence per step) under --cp 1, 2, 4 (ring,
zig-zag) and 4 (Ulysses, 2D): the measured peak of activation buffers per rank (the run's
final JSON line, act_peak_bytes_max: slots at the schedule's peak plus the shared scratch,
the ring's buffers included), against cp 1.

Balance: --cp R --trace, zig-zag and contiguous splits in the same run: each rank's time in
the ring's attention blocks ("attention ring step" events) over the recorded steps after
the first; imbalance = (slowest - fastest) / slowest. With the contiguous split ring rank 0
attends to its own chunk only and the last rank to the whole sequence.

Usage: python3 dev/bench_cp.py [--seq-len 4096] [--ranks 2,4] [--repeat 3]
Each rank runs one thread (OMP_NUM_THREADS=1). With more ranks than cores the ranks share
cores and the attention times are each rank's share of the machine; trust the ratios of
one run more than the absolute times.
"""
import argparse, json, os, statistics, subprocess, sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    p = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"error: `{cmd}` failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def base(seq_len):
    return (f"OMP_NUM_THREADS=1 ./train --model tiny --seq-len {seq_len} --micro-batch 1 --global-batch 1 "
            f"--warmup 1 --eval-every 0 --sample-len 0 --quiet")


def memory(seq_len, flags):
    log = "/tmp/bench_cp_mem.jsonl"
    run(f"{base(seq_len)} --steps 2 --log {log} {flags}")
    final = [json.loads(l) for l in open(log) if '"final"' in l][-1]
    return final["act_peak_bytes_max"] / 2**20, final["step_ms_mean"]


def attention_times(seq_len, cp, split):
    trace = f"/tmp/bench_cp_{split}_{cp}.json"
    run(f"{base(seq_len)} --steps 3 --cp {cp} --cp-split {split} --trace {trace}")
    events = json.load(open(trace))["traceEvents"]
    steps = defaultdict(list)  # per rank, its schedule phases (the steps)
    for e in events:
        if e.get("cat") == "phase" and e["name"] == "schedule":
            steps[e["tid"]].append(e["ts"])
    t = defaultdict(float)
    for e in events:
        if e.get("cat") == "cp attention" and e["ts"] >= sorted(steps[e["tid"]])[1]:  # after the warm-up step
            t[e["tid"]] += e["dur"] * 1e-3
    return [t[r] for r in sorted(t)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, default=4096, help="tokens of the one sequence a step (default 4096)")
    ap.add_argument("--ranks", default="2,4", help="cp sizes, comma-separated (default 2,4)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row, the median shown (default 3)")
    a = ap.parse_args()
    commit = subprocess.run("git rev-parse --short HEAD", shell=True, cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"# tiny GPT-2 (4 layers, d 64, 4 heads), 1 sequence of {a.seq_len} tokens per step, commit {commit}\n")
    print("| layout | activations per rank (MiB) | vs cp 1 | step ms |")
    print("|---|---|---|---|")
    ref = None
    for name, flags in [("cp 1", ""), ("cp 2 ring", "--cp 2"), ("cp 4 ring", "--cp 4"), ("cp 4 Ulysses", "--cp 4 --cp-kind ulysses"),
                        ("cp 4 2D (2 x 2)", "--cp 4 --cp-kind 2d --cp-ulysses 2")]:
        mib, ms = memory(a.seq_len, flags)
        ref = ref or mib
        print(f"| {name} | {mib:.2f} | {100 * mib / ref:.1f}% | {ms:.0f} |")
    print("\n| ring ranks | split | attention ms per rank (median of runs) | imbalance (slowest - fastest) / slowest |")
    print("|---|---|---|---|")
    for cp in [int(x) for x in a.ranks.split(",")]:
        for split in ["zigzag", "contiguous"]:
            runs = [attention_times(a.seq_len, cp, split) for _ in range(a.repeat)]
            per_rank = [statistics.median(r[i] for r in runs) for i in range(cp)]
            imb = [(max(r) - min(r)) / max(r) for r in runs]
            print(f"| {cp} | {split} | {' / '.join(f'{t:.0f}' for t in per_rank)} | {100 * statistics.median(imb):.1f}% "
                  f"(runs {', '.join(f'{100 * x:.1f}' for x in imb)}) |")


if __name__ == "__main__":
    main()
