#!/usr/bin/env python3
"""Sweep parallel layouts on this machine, like the layout studies' figures.

For every layout of a grid (dp x tp x pp = --world ranks; vpp, micro-batch,
recompute, sp, zero) it runs ./train for a few steps, reads its JSON log, asks the
planner (./train --plan --device cpu) for its prediction of the same layout, and
writes one CSV row: measured step time, tokens/s, MFU, bubble, communication time,
peak activation memory, and the predicted step time and memory. Layouts the
trainer rejects are listed with its one-line reason. A PNG plots throughput and
memory per layout.

Calibration: before the sweep, two runs of the same model fix the planner's two
free CPU factors: a 1-rank run the fraction of the measured FMA peak the kernels
reach (matmul_eff), a tp = world run the latency of one collective step between
ranks that time-share the cores. Every other prediction comes from the model
(device profile "cpu" with shared_cores = this machine's cores).

  python3 scripts/sweep.py                      # tiny model, 4 ranks, ~10 minutes
  python3 scripts/sweep.py --quick              # a handful of layouts
  python3 scripts/sweep.py --model small --world 2 --steps 6

It writes sweep.csv, sweep.png and the runs' logs into --out (default dev/out/sweep, which
git ignores); it refuses a folder whose sweep.csv or sweep.png git tracks (dev/sweep holds
the README's calibration of 2026-12-02), or is anything but a regular file of one name (a
link would carry the write elsewhere). Sizes are whole numbers >= 1. The figure needs
matplotlib (pip install -r requirements.txt), or --no-plot.
"""
import argparse, csv, itertools, json, os, re, stat, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "train")


def run(cmd, timeout=600):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, cwd=ROOT)
    return p.returncode, p.stdout


def train_flags(lay, a):
    f = ["--model", a.model, "--seq-len", str(a.seq_len), "--global-batch", str(a.global_batch),
         "--micro-batch", str(lay["mb"]), "--dp", str(lay["dp"]), "--tp", str(lay["tp"]), "--pp", str(lay["pp"]),
         "--vpp", str(lay["vpp"]), "--recompute", lay["recompute"], "--zero", str(lay["zero"])]
    if lay["vpp"] > 1:
        f += ["--schedule", "interleaved"]
    if lay["sp"]:
        f += ["--sp"]
    return f


def measure(lay, a, tag):
    log = os.path.join(a.out, "logs", tag + ".jsonl")
    code, out = run([TRAIN] + train_flags(lay, a) +
                    ["--steps", str(a.steps), "--warmup", "1", "--eval-every", "0", "--sample-len", "0", "--quiet",
                     "--log", log])
    if code != 0:
        err = [l for l in out.splitlines() if l.startswith("error:")]
        return None, (err[0] if err else "exit %d" % code)
    steps, final = [], {}
    for line in open(log):
        d = json.loads(line)
        if "ms" in d:
            steps.append(d)
        if d.get("final"):
            final = d
    timed = steps[1:] if len(steps) > 1 else steps  # the first step is warm-up
    ms = sorted(s["ms"] for s in timed)[len(timed) // 2]
    pick = lambda k: sorted(s[k] for s in timed)[len(timed) // 2]
    return dict(ms=ms, tok_s=pick("tok_s"), mfu=pick("mfu"), bubble=pick("bubble"),
                bubble_formula=timed[0]["bubble_formula"], comm_tp_ms=pick("comm_tp_ms"),
                comm_pp_ms=pick("comm_pp_ms"), comm_dp_ms=pick("comm_dp_ms"),
                act_mib=final.get("act_peak_bytes_max", 0) / 2**20), None


def predict(lay, a, world, core_tflops, cal):
    """The planner's prediction for one layout on this machine (cpu profile, calibrated)."""
    csv_path = os.path.join(a.out, "logs", "plan.csv")
    cores = os.cpu_count()
    per_rank = core_tflops * max(1, cores // world)  # the trainer gives each rank cores/world threads
    cmd = [TRAIN, "--plan", "--model", a.model, "--seq-len", str(a.seq_len), "--gpus", str(world),
           "--gpus-per-node", str(world), "--device", "cpu", "--peak-tflops", "%.6f" % per_rank,
           "--device-set", "shared_cores=%d" % cores,
           "--device-set", "matmul_eff=%.5f" % cal["eff"], "--device-set", "matmul_eff_own=%.5f" % cal["eff"],
           "--device-set", "bmm_eff=%.5f" % cal["eff"],
           "--attention", "torch", "--rms-kernel", "on",  # the CPU trainer's kernels: T x T scores, one-pass norms
           "--device-set", "intra_latency_us=%.3f" % cal["lat_us"],
           "--global-batch", str(a.global_batch), "--dp", str(lay["dp"]), "--tp", str(lay["tp"]), "--pp", str(lay["pp"]),
           "--vpp", str(lay["vpp"]), "--micro-batch", str(lay["mb"]), "--recompute", lay["recompute"],
           "--sp", str(lay["sp"]), "--zero", str(lay["zero"]),
           "--schedule", "interleaved" if lay["vpp"] > 1 else "1f1b", "--plan-csv", csv_path]
    code, out = run(cmd)
    if code != 0 or not os.path.exists(csv_path):
        return None
    rows = list(csv.DictReader(open(csv_path)))
    if not rows:
        return None
    r = rows[0]
    return dict(pred_ms=float(r["t_step_s"]) * 1e3, pred_act_mib=float(r["mem_act_gib"]) * 1024)


def measured_peak_tflops():
    # the trainer measures its FMA peak at start; read it off a 0-step run
    code, out = run([TRAIN, "--model", "tiny", "--steps", "0", "--sample-len", "0", "--eval-every", "0"])
    m = re.search(r"peak per rank\s*\|\s*([0-9.]+) TFLOP/s", out)
    if not m:
        sys.exit("error: could not read the measured peak from ./train")
    return float(m.group(1))


def bisect(f, target, lo, hi, increasing):
    """x in [lo, hi] (geometric bisection) where the monotonic f(x) meets target."""
    for _ in range(24):
        mid = (lo * hi) ** 0.5
        if (f(mid) > target) == increasing:
            hi = mid
        else:
            lo = mid
    return (lo * hi) ** 0.5


def calibrate(a, core_tflops):
    """Two measured runs fix the planner's two free CPU factors: a 1-rank run the fraction of
    the FMA peak the kernels reach (matmul_eff), a tp = world run the latency of one
    collective step between ranks that time-share the cores (intra_latency_us)."""
    cal = dict(eff=0.3, lat_us=10.0)
    mb = min(a.global_batch, 16)
    one = dict(dp=1, tp=1, pp=1, vpp=1, mb=mb, recompute="none", sp=0, zero=0)
    got, err = measure(one, a, "calibration_1rank")
    if err:
        sys.exit("error: the calibration run failed: " + err.replace("error: ", "", 1))
    def pred_eff(x):
        return predict(one, a, 1, core_tflops, dict(cal, eff=x))["pred_ms"]
    cal["eff"] = bisect(pred_eff, got["ms"], 0.005, 1.0, increasing=False)
    tpw = dict(one, tp=a.world, mb=max(1, a.global_batch // 4))
    got_tp, err = measure(tpw, a, "calibration_tp")
    if err:
        sys.exit("error: the calibration run failed: " + err.replace("error: ", "", 1))
    def pred_lat(x):
        return predict(tpw, a, a.world, core_tflops, dict(cal, lat_us=x))["pred_ms"]
    cal["lat_us"] = bisect(pred_lat, got_tp["ms"], 0.1, 1e5, increasing=True)
    print("calibration: 1 rank mb%d %.1f ms -> matmul_eff %.3f of %.3f TFLOP/s per core; tp%d mb%d %.1f ms -> "
          "collective step latency %.0f us" % (mb, got["ms"], cal["eff"], core_tflops, a.world, tpw["mb"], got_tp["ms"],
                                                cal["lat_us"]))
    return cal


def grid(a):
    w = a.world
    facts = [(dp, tp, pp) for dp in range(1, w + 1) for tp in range(1, w + 1) for pp in range(1, w + 1) if dp * tp * pp == w]
    out = []
    for (dp, tp, pp), mb, rc in itertools.product(facts, a.micro_batches, ["none", "selective", "full"]):
        for vpp in ([1, 2] if pp > 1 else [1]):
            for sp in ([0, 1] if tp > 1 else [0]):
                for zero in ([0, 1, 2] if dp > 1 else [0]):
                    out.append(dict(dp=dp, tp=tp, pp=pp, vpp=vpp, mb=mb, recompute=rc, sp=sp, zero=zero))
    if a.quick:
        keep = [l for l in out if l["recompute"] == "none" and l["zero"] in (0,) and l["vpp"] == 1 and l["sp"] == 0]
        out = keep[: 2 * len(facts)]
    return out


def name(l):
    s = "dp%d tp%d pp%d" % (l["dp"], l["tp"], l["pp"])
    if l["vpp"] > 1: s += " v%d" % l["vpp"]
    s += " mb%d" % l["mb"]
    if l["recompute"] != "none": s += " " + l["recompute"][:3]
    if l["sp"]: s += " sp"
    if l["zero"]: s += " z%d" % l["zero"]
    return s


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = sorted(rows, key=lambda r: -r["tok_s"])
    labels = [r["layout"] for r in rows]
    fig, ax = plt.subplots(3, 1, figsize=(max(10, 0.22 * len(rows)), 11), sharex=True)
    x = range(len(rows))
    ax[0].bar(x, [r["tok_s"] for r in rows], color="tab:blue")
    ax[0].set_ylabel("tokens/s (measured)")
    ax[0].set_title("Layouts of %s on %d ranks, sorted by throughput" % (rows[0]["model"], rows[0]["world"]))
    ax[1].bar(x, [r["ms"] for r in rows], color="tab:gray", label="measured")
    ax[1].plot(x, [r["pred_ms"] or 0 for r in rows], "r.", label="planner")
    ax[1].set_ylabel("ms / step")
    ax[1].legend()
    ax[2].bar(x, [r["act_mib"] for r in rows], color="tab:green")
    ax[2].set_ylabel("peak activations\nMiB / rank")
    ax[2].set_xticks(list(x))
    ax[2].set_xticklabels(labels, rotation=90, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def positive(text):
    """A size flag's value: a whole number >= 1 (0 ran no layout, or none but the calibration's)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("'%s' is not a whole number >= 1" % text)
    return int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="./train --model preset (default tiny)")
    ap.add_argument("--seq-len", type=positive, default=64, help="sequence length (default 64)")
    ap.add_argument("--world", type=positive, default=4, help="ranks of every layout: dp x tp x pp (default 4)")
    ap.add_argument("--global-batch", type=positive, default=16, help="sequences per step (default 16)")
    ap.add_argument("--micro-batches", type=lambda s: [positive(x) for x in s.split(",")], default=[2, 4],
                    help="micro-batch sizes, comma-separated (default 2,4)")
    ap.add_argument("--steps", type=positive, default=4, help="steps per layout (default 4)")
    ap.add_argument("--out", default=os.path.join(ROOT, "dev", "out", "sweep"),
                    help="output folder (default dev/out/sweep)")
    ap.add_argument("--quick", action="store_true", help="a handful of layouts instead of the grid")
    ap.add_argument("--no-plot", action="store_true", help="no sweep.png (no matplotlib needed)")
    a = ap.parse_args()
    if not os.path.exists(TRAIN):
        sys.exit("error: build ./train first (make train)")
    if not a.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("error: the figure needs matplotlib (pip install -r requirements/plots.txt), or pass --no-plot",
                  file=sys.stderr)
            sys.exit(2)
    for f in ("sweep.csv", "sweep.png"):
        path = os.path.join(a.out, f)
        tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "--error-unmatch", os.path.abspath(path)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        if tracked:
            sys.exit("error: %s is a tracked file; pass another --out (default dev/out/sweep)" % path)
        st = os.lstat(path) if os.path.lexists(path) else None
        if st and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):  # written in place: through a link to its target
            sys.exit("error: %s is %s; only a regular file of one name is replaced" % (
                path, "a file of %d names (hard links)" % st.st_nlink if stat.S_ISREG(st.st_mode) else
                "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"))
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        sys.exit("error: --out %s: exists and is not a folder" % a.out)
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    t0 = time.time()
    core = measured_peak_tflops() / os.cpu_count()  # a 1-rank run's peak is the whole machine's
    cal = calibrate(a, core)
    rows, skipped = [], []
    layouts = grid(a)
    for i, lay in enumerate(layouts):
        tag = re.sub(r"[^a-z0-9]+", "_", name(lay))
        got, err = measure(lay, a, tag)
        if err:
            skipped.append((name(lay), err))
            print("[%3d/%d] %-34s skipped: %s" % (i + 1, len(layouts), name(lay), err))
            continue
        pred = predict(lay, a, a.world, core, cal) or dict(pred_ms=None, pred_act_mib=None)
        row = dict(model=a.model, world=a.world, layout=name(lay), **lay, **got, **pred)
        row["pred_err"] = (pred["pred_ms"] / got["ms"] - 1) if pred["pred_ms"] else None
        rows.append(row)
        print("[%3d/%d] %-34s %8.1f ms (planner %s) %8.0f tok/s  MFU %5.1f%%  act %6.2f MiB" % (
            i + 1, len(layouts), name(lay), got["ms"], "%.1f" % pred["pred_ms"] if pred["pred_ms"] else "-",
            got["tok_s"], 100 * got["mfu"], got["act_mib"]))
    path = os.path.join(a.out, "sweep.csv")
    keys = list(rows[0].keys()) if rows else ["layout"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys + ["skipped_reason"])
        w.writeheader()
        for r in rows:
            w.writerow(r)
        for n, why in skipped:
            w.writerow(dict(layout=n, skipped_reason=why))
    errs = [abs(r["pred_err"]) for r in rows if r["pred_err"] is not None]
    within = sum(e <= 0.25 for e in errs)
    print("wrote %s (%d layouts run, %d skipped) in %.0f s" % (path, len(rows), len(skipped), time.time() - t0))
    if errs:
        print("planner vs measured step time: %d of %d within 25%%, median |error| %.0f%%"
              % (within, len(errs), 100 * sorted(errs)[len(errs) // 2]))
    if rows and not a.no_plot:
        plot(rows, os.path.join(a.out, "sweep.png"))
        print("wrote " + os.path.join(a.out, "sweep.png"))


if __name__ == "__main__":
    main()
