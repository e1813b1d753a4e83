#!/usr/bin/env python3
"""dev/bench_zb.py: the pipeline bubble of 1F1B, ZB-H1, ZB-V and DualPipe-V, measured on CPU ranks and
predicted by the simulator (layout/schedule.h) from the op times measured in the same run.

For each micro-batch count m and schedule: ./train --pp PP --trace (which records the first
3 steps); from the trace's last two steps (the first warms up):
  step  = the pipeline's window: first rank's first op to the last rank's last op,
  busy  = a rank's time in compute ops (F, B, W) in it,
and the measured bubble = idle over step on the busiest rank, (step - busy) / step. The
prediction plays the same op lists (dev/sim_schedule) with each global chunk's mean F, B and
W times from the trace (1F1B: B is the whole backward) and free messages:
(makespan - busy) / makespan of that rank.

The schedules alternate within each repeat (1F1B, ZB-H1, ZB-V, DualPipe-V, then again), so a
load that comes and goes on a shared machine falls on all of them. DualPipe-V needs m >= 2 pp
(its rows are left out below that).

Usage: python3 dev/bench_zb.py [--pp 4] [--m 4,8] [--steps 3] [--repeat 3] [--flags "MODEL FLAGS"]
On a machine with fewer cores than ranks the ranks share cores: Open MPI's waiting ranks
poll, so every rank keeps about cores/ranks of a core, busy or idle, and the ranks behave
like slower processors of equal speed; the ops are made long (50-250 ms) so the OS's time
slices average out. A rank's ops still run faster while fewer ranks compute, which shortens
the bubble phases: trust pp 2 on 2 cores more than pp 4.
"""
import argparse, json, os, subprocess, sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "--model tiny --n-layer 8 --d-model 512 --n-head 8 --seq-len 128 --micro-batch 2"


def run(cmd):
    p = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"error: `{cmd}` failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def read_trace(trace):
    """A --trace file's traced steps after the first: (their pipeline windows summed, us; each
    rank's compute time in them, us; the compute ops' durations in s by (op letter, global chunk);
    the number of steps traced)."""
    events = json.load(open(trace))["traceEvents"]
    # per step: the pipeline's window, from the first rank's schedule phase start to the last
    # rank's end (a rank that finishes early waits for the others in its next phase, so its
    # own phase would hide that idle time); busy = each rank's compute ops inside it
    phases = defaultdict(list)
    for e in events:
        if e.get("cat") == "phase" and e["name"] == "schedule":
            phases[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    n_steps = min(len(p) for p in phases.values())
    busy, span = defaultdict(float), 0.0
    times = defaultdict(list)  # (op letter, global chunk) -> durations
    for k in range(1, n_steps):  # skip the warm-up step
        t0 = min(sorted(p)[k][0] for p in phases.values())
        t1 = max(sorted(p)[k][1] for p in phases.values())
        span += t1 - t0
        for e in events:
            if e.get("cat") == "compute" and t0 <= e["ts"] <= t1:
                busy[e["tid"]] += e["dur"]
                op, _, chunk = e["name"].split()
                times[(op, int(chunk[1:]))].append(e["dur"] * 1e-6)
    return span, busy, times, n_steps


def measure(sched, pp, m, steps, flags):
    vpp = 2 if sched in ("zb-v", "dualpipe-v") else 1
    trace = f"/tmp/bench_zb_{sched}_m{m}.json"
    run(f"OMP_NUM_THREADS=1 ./train {flags} --pp {pp} --schedule {sched} --global-batch {m * 2} "
        f"--steps {steps} --warmup 1 --eval-every 0 --sample-len 0 --quiet --trace {trace}")
    span, busy, times, n_steps = read_trace(trace)
    rank = max(busy, key=lambda r: busy[r])
    measured = (span - busy[rank]) / span
    mean = lambda op, g: sum(times.get((op, g), [0.0])) / len(times.get((op, g), [0.0]))
    nc = pp * vpp
    tf = ",".join(f"{mean('F', g):.6f}" for g in range(nc))
    tb = ",".join(f"{mean('B', g):.6f}" for g in range(nc))
    tw = ",".join(f"{mean('W', g):.6f}" for g in range(nc))
    out = run(f"./sim_schedule {sched} {pp} {vpp} {m} {tf} {tb} {tw} {flags}").split()
    makespan, sim_busy = float(out[1]), [float(x) for x in out[3:]]
    stage = rank % pp  # dp 1, tp 1: rank = stage
    predicted = (makespan - sim_busy[stage]) / makespan
    f_ms, b_ms, w_ms = (1e3 * sum(mean(op, g) for g in range(nc)) / nc for op in "FBW")
    return dict(sched=sched, m=m, rank=rank, measured=measured, predicted=predicted, step_ms=span / 1e3 / (n_steps - 1),
                f_ms=f_ms, b_ms=b_ms, w_ms=w_ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pp", type=int, default=4, help="pipeline stages (default 4)")
    ap.add_argument("--m", default="4,8", help="micro-batch counts, comma-separated (default 4,8)")
    ap.add_argument("--steps", type=int, default=3, help="steps per run (default 3)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per row; the one with the median measured bubble is shown (default 3)")
    ap.add_argument("--flags", default=MODEL, help=f"model flags (default: {MODEL})")
    a = ap.parse_args()
    run("make -s train sim_schedule")
    print(f"pp {a.pp}, {a.flags}; {os.cpu_count()} cores; bubble = idle / step on the busiest rank, traced steps 2-3; "
          f"median of {a.repeat} runs")
    print("| m | schedule | step ms | F / B / W ms per chunk | measured bubble | simulated | vs 1F1B measured |")
    print("|---|---|---|---|---|---|---|")
    for m in [int(x) for x in a.m.split(",")]:
        base = None
        scheds = ["1f1b", "zb-h1", "zb-v"] + (["dualpipe-v"] if m >= 2 * a.pp else [])
        runs = {s: [] for s in scheds}
        for _ in range(a.repeat):  # alternating: each repeat runs every schedule once
            for sched in scheds:
                runs[sched].append(measure(sched, a.pp, m, a.steps, a.flags))
        for sched in scheds:
            r = sorted(runs[sched], key=lambda r: r["measured"])[a.repeat // 2]
            base = base or r["measured"]
            bw = f"{r['b_ms']:.1f} / {r['w_ms']:.1f}" if r["w_ms"] else f"{r['b_ms']:.1f} (B+W)"
            print(f"| {m} | {sched} | {r['step_ms']:.0f} | {r['f_ms']:.1f} / {bw} | {100 * r['measured']:.1f}% | "
                  f"{100 * r['predicted']:.1f}% | {100 * r['measured'] / base:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
