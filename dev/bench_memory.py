#!/usr/bin/env python3
"""dev/bench_memory.py: memory per rank and step time of ZeRO and offloading on 4 ranks of the
CPU build (run by hand, not a test), beside the planner's prediction for each run.

One model (GPT-2 shape, --n-layer 8 --d-model 256 by default) trains a few steps under
  dp 4 with --zero 0, 1, 2, 3, each without and with --offload optimizer, and
  pp 4 (1F1B, 8 micro-batches) without and with --offload activations.
Each run's final log line (runtime/metrics.h) gives rank 0's buffers on the device (params,
grads, AdamW state, activations; with pp the activation buffers' maximum over ranks and stage
0's live peak), what it offloaded to the host tier, the peak resident set over the ranks, the
mean step time, and the planner's figures for the same layout (./train --plan's model on the
cpu profile: its worst stage). A --zero 3 run that the trainer refuses is reported as such.

  python3 dev/bench_memory.py [--train ./train] [--steps 6] [--n-layer 8] [--d-model 256] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys

MiB = 1024.0 * 1024.0


def final_line(log):
    last = None
    with open(log) as f:
        for line in f:
            if '"final"' in line:
                last = json.loads(line)
    return last


def run(args, tag, flags):
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, tag + ".jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [args.train, "--n-layer", str(args.n_layer), "--d-model", str(args.d_model), "--steps", str(args.steps),
           "--warmup", "1", "--eval-every", "0", "--sample-len", "0", "--quiet", "--log", log] + flags.split()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        err = [l for l in (p.stdout + p.stderr).splitlines() if l.startswith("error:")]
        return {"tag": tag, "flags": flags, "error": err[0] if err else "exit %d" % p.returncode}
    f = final_line(log)
    f.update({"tag": tag, "flags": flags})
    return f


def row(r):
    if "error" in r:
        return "%-22s %s" % (r["tag"], r["error"])
    dev = r["param_bytes"] + r["grad_bytes"] + r["opt_bytes"] + r["act_buffer_bytes"]
    # the planner's temporaries: this trainer's ZeRO-3 working buffers (the start-up table counts them with params)
    plan = r["plan_weight_bytes"] + r["plan_grad_bytes"] + r["plan_opt_bytes"] + r["plan_act_bytes"] + \
        r["plan_temp_bytes"]
    host = r["opt_host_bytes"] + r["act_host_bytes"]
    return ("%-22s %7.2f %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f | %7.2f %+6.1f%% | %7.2f %7.2f | %8.1f %8.1f" %
            (r["tag"], r["param_bytes"] / MiB, r["grad_bytes"] / MiB, r["opt_bytes"] / MiB,
             r["act_buffer_bytes_max"] / MiB, dev / MiB, r["act_peak_bytes"] / MiB, host / MiB, plan / MiB,
             100 * (plan / dev - 1), r["plan_opt_bytes"] / MiB, r["plan_act_bytes"] / MiB,
             r["rss_peak_bytes_max"] / MiB, r["step_ms_mean"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default="./train", help="the trainer binary (default ./train)")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (default 6)")
    ap.add_argument("--n-layer", type=int, default=8, help="layers (default 8)")
    ap.add_argument("--d-model", type=int, default=256, help="width (default 256)")
    ap.add_argument("--out", default="dev/out/bench_memory",
                    help="folder of the runs' logs (default dev/out/bench_memory)")
    args = ap.parse_args()
    runs = []
    for zero in range(4):
        for off in ("", " --offload optimizer"):
            tag = "dp4_zero%d%s" % (zero, "_offload_opt" if off else "")
            runs.append((tag, "--dp 4 --zero %d --micro-batch 4 --global-batch 16%s" % (zero, off)))
    for tag, off in (("", ""), ("_offload_act", " --offload activations"),
                     ("_offload_act_1frame", " --offload activations --offload-frames 1")):
        runs.append(("pp4_8mb" + tag, "--pp 4 --micro-batch 2 --global-batch 16" + off))
    print("model: --n-layer %d --d-model %d, %d steps, 4 ranks of the CPU build (%s)" %
          (args.n_layer, args.d_model, args.steps, args.train))
    print("MiB per rank (rank 0; activations: buffers, max over ranks) | stage 0's live activation peak, offloaded"
          " to the host tier | planner (worst stage) total, vs the measured device total | planner optimizer,"
          " activations | peak RSS (max over ranks), step ms")
    print("%-22s %7s %7s %7s %7s %7s | %7s %7s | %7s %7s | %7s %7s | %8s %8s" %
          ("run", "params", "grads", "adam", "acts", "device", "act pk", "host", "plan", "diff", "p.adam", "p.acts",
           "RSS", "step ms"))
    results = []
    for tag, flags in runs:
        r = run(args, tag, flags)
        results.append(r)
        print(row(r))
        sys.stdout.flush()
    by = {r["tag"]: r for r in results if "error" not in r}
    for frames, tag in ((2, "pp4_8mb_offload_act"), (1, "pp4_8mb_offload_act_1frame")):
        if "pp4_8mb" in by and tag in by:
            a, b = by["pp4_8mb"], by[tag]
            print("offload activations, pp 4, 8 micro-batches, %d frame(s): stage 0's activation peak %.2f -> %.2f MiB "
                  "(%.0f%%), step %.1f -> %.1f ms" % (frames, a["act_peak_bytes"] / MiB, b["act_peak_bytes"] / MiB,
                                                      100 * b["act_peak_bytes"] / a["act_peak_bytes"],
                                                      a["step_ms_mean"], b["step_ms_mean"]))
    for zero in range(4):
        a, b = by.get("dp4_zero%d" % zero), by.get("dp4_zero%d_offload_opt" % zero)
        if a and b:
            print("offload optimizer, zero %d: device AdamW %.2f -> %.2f MiB, peak RSS %.2f -> %.2f MiB, step %.1f -> "
                  "%.1f ms (%+.0f%%)" % (zero, a["opt_bytes"] / MiB, b["opt_bytes"] / MiB,
                                         a["rss_peak_bytes_max"] / MiB, b["rss_peak_bytes_max"] / MiB,
                                         a["step_ms_mean"], b["step_ms_mean"],
                                         100 * (b["step_ms_mean"] / a["step_ms_mean"] - 1)))


if __name__ == "__main__":
    main()
