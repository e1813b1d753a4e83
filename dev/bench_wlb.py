#!/usr/bin/env python3
"""bench_wlb.py: the same long-tailed documents under --packing concat, greedy and wlb, at
pipeline parallelism 2 and 4 (1F1B, 8 micro-batches) and context parallelism 2 (the sequence's
zig-zag, and --cp-split doc), on this
machine's CPU ranks (by hand, not a test). Prints per run the means over the steps after the
first of: the wall step time, the measured bubble, the attention-work spreads across
micro-batches, dp ranks and cp ranks and the attention work (visible pairs) of a step (the
JSON log's attn_spread_*, attn_work), and two step times against greedy's:

  wall: measured. Every rank shares this machine's cores (2 here), so a step takes the whole
        job's CPU work over the cores: the balance between micro-batches cannot show in it.
  crit: the critical path with one core per rank, from the cost model (the log has no time
        per micro-batch and stage): each micro-batch's visible pairs (--trace's documents
        events) priced per (micro-batch, chunk) by layout/packing.h's model and played
        through the runtime's 1F1B op lists by the planner's simulator (./sim_wlb:
        layout/schedule.h schedule_simulate_mb). Under cp ./sim_wlb takes the same --cp and
        --cp-split: a micro-batch's ops take the matmuls of T/2 positions and the attention of its
        heavier cp rank; its cp-rank spread (the sim cp column) must be the log's attn_spread_cp.
        FLOPs become ms at the rate of the concat run of the same layout (its wall time x
        the busy cores over its FLOPs), one rate for the three packings. ./sim_wlb makes the
        batches as the trainer does; the bench stops if a step's spread is not the log's.
  pass: the critical paths summed over one whole pass of the documents (each trained once, so
        the packings do the same work; wlb's delays cannot flatter it as they can a window of
        steps), against greedy's.

    make train sim_wlb && python3 dev/bench_wlb.py [--steps 60] [--seq-len 1024] [--median 78.5]

Documents: --data docs:lognormal:MEDIAN:0.99 (layout/packing.h: FineWeb's log-normal fit,
median 628 of an 8k context, scaled to the sequence length). The model is small and the
sequence long so that attention is a large part of a step, as in long-context training.
wlb delays outliers (pieces of about T) for rounds of one per micro-batch: run enough steps that
each packing sees about the same work (the attn Mpairs column says), or read the pass column.

Measured (60 steps, README's table): micro-batch spread greedy 199%, wlb 12.6%; crit wlb/greedy
0.96 (pp 2), 0.97 (pp 4), 1.00 (cp 2; cp-rank spread 44% / 38%; cp's crit then priced from the
log's spread, before ./sim_wlb took --cp); pass 0.963 (pp 2), 0.962 (pp 4); wall 0.92 / 1.43 / 1.17
(shared cores and other jobs: noise, not balance).
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
    return rows[1:]  # the first step warms up


def pass_critical(flags):
    """One pass over the documents (every one trained once): the sum of the steps' critical
    paths in FLOPs, and the number of steps (./sim_wlb 0)."""
    out = subprocess.run(["./sim_wlb", "0"] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: sim_wlb exited {out.returncode}: {out.stderr[-500:]}")
    spans = [float(f[5]) for f in map(str.split, out.stdout.splitlines())]
    return sum(spans), len(spans)


def critical(flags, steps, rows):
    """Per step of rows: (critical path, all ranks' compute) in FLOPs and the cp-rank spread, from ./sim_wlb
    on the same flags (which makes the same batches: its spreads must be the log's)."""
    out = subprocess.run(["./sim_wlb", str(steps)] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: sim_wlb exited {out.returncode}: {out.stderr[-500:]}")
    # step S spread_mb X makespan Y total Z [spread_cp W]
    sim = {int(f[1]): (float(f[3]), float(f[5]), float(f[7]), float(f[9]) if len(f) > 9 else 0.0)
           for f in map(str.split, out.stdout.splitlines())}
    result = []
    for r in rows:
        spread, span, total, spread_cp = sim[r["step"]]
        for name, ours, key in (("spread", spread, "attn_spread_mb"), ("cp spread", spread_cp, "attn_spread_cp")):
            if abs(ours - r[key]) > 1e-3:
                sys.exit(f"error: sim_wlb's step {r['step']} {name} {ours} is not the log's {r[key]}")
        result.append((span, total, spread_cp))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="steps per run (default 60)")
    ap.add_argument("--seq-len", type=int, default=1024, help="sequence length (default 1024)")
    ap.add_argument("--median", type=float, default=None, help="document median (default 628 x seq-len / 8192)")
    a = ap.parse_args()
    median = a.median or 628.0 * a.seq_len / 8192
    run_flags = ["--model", "tiny", "--n-layer", "4", "--seq-len", str(a.seq_len), "--doc-mask", "on",
                 "--data", f"docs:lognormal:{median:g}:0.99"]
    batch = ["--global-batch", "8", "--micro-batch", "1"]
    layouts = [("pp2", {"pp": 2, "flags": ["--pp", "2", "--schedule", "1f1b"] + batch}),
               ("pp4", {"pp": 4, "flags": ["--pp", "4", "--schedule", "1f1b"] + batch}),
               ("cp2", {"pp": 1, "flags": ["--cp", "2"] + batch}),
               ("cp2doc", {"pp": 1, "flags": ["--cp", "2", "--cp-split", "doc"] + batch})]
    cores = os.cpu_count() or 1
    print(f"tiny model (d 64), 4 layers, seq {a.seq_len}, documents log-normal median {median:g} sigma 0.99, "
          f"global batch 8 x micro-batch 1, {a.steps} steps (means of steps 2..), {cores} cores")
    print(f"{'layout':6} {'packing':7} {'wall ms':>8} {'bubble':>7} {'spread mb':>10} {'dp':>6} {'cp':>6} {'sim cp':>7}"
          f" {'attn Mpairs':>12} {'wall/greedy':>12} {'crit ms':>8} {'crit/greedy':>12} {'pass crit/greedy':>17}")
    with tempfile.TemporaryDirectory() as workdir:
        for name, layout in layouts:
            res, ranks, rate = {}, 2 if name.startswith("cp2") else layout["pp"], None
            for packing in ("concat", "greedy", "wlb"):
                flags = run_flags + layout["flags"] + ["--packing", packing]
                rows = run(flags, a.steps, workdir, f"{name}_{packing}")
                steps = critical(flags, a.steps, rows)
                mean = lambda key: statistics.mean(r.get(key, 0.0) for r in rows)
                res[packing] = r = {k: mean(key) for k, key in (
                    ("ms", "ms"), ("bubble", "bubble"), ("mb", "attn_spread_mb"), ("dp", "attn_spread_dp"),
                    ("cp", "attn_spread_cp"), ("work", "attn_work"))}
                crit, total = statistics.mean(s[0] for s in steps), statistics.mean(s[1] for s in steps)
                r["sim_cp"] = statistics.mean(s[2] for s in steps)
                rate = rate or r["ms"] * min(ranks, cores) / total  # ms per FLOP: concat's run
                r["crit"] = crit * rate
                r["pass"] = pass_critical(flags)[0]
                g = res.get("greedy")
                wall_ratio, crit_ratio, pass_ratio = ((r["ms"] / g["ms"], r["crit"] / g["crit"], r["pass"] / g["pass"])
                                                      if g else (float("nan"),) * 3)
                print(f"{name:6} {packing:7} {r['ms']:8.1f} {r['bubble']:7.2f} {100 * r['mb']:9.1f}% "
                      f"{100 * r['dp']:5.1f}% {100 * r['cp']:5.1f}% {100 * r['sim_cp']:6.1f}% {r['work'] / 1e6:12.2f}"
                      f" {wall_ratio:12.2f}"
                      f" {r['crit']:8.1f} {crit_ratio:12.2f} {pass_ratio:17.3f}", flush=True)


if __name__ == "__main__":
    main()
