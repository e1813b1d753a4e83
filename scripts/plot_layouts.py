#!/usr/bin/env python3
"""Draw the layouts study's figures (Hagemann et al. 2023) from the planner's predictions,
beside measured runs where a runs file has them.

    ./train --plan --model llama-13b --gpus 64 --vocab 128000 --software scaling \\
        --schedule 1f1b --zero 1 --cp 1 --plan-csv /tmp/plan.csv
    python3 scripts/plot_layouts.py /tmp/plan.csv --runs ../shared/data/layouts_study/calibration.csv \\
        --model llama-13b --seq-len 2048 --gpus 64 --out dev/plot_layouts_llama13b.png

Four panels, each predicted (filled) beside measured (hollow, from --runs: the rows of the
same model, sequence length and GPU count):
  1. MFU by micro-batch for each tp x pp (those the runs measured, when given), in the study's
     base setting (no recomputation,
     FlashAttention-2 with the RMSNorm kernel, no sequence parallelism);
  2. the best MFU of each attention kernel, with and without the RMSNorm kernel;
  3. the best MFU with no, selective and full recomputation;
  4. the best MFU with and without sequence parallelism, by tp.
A layout the planner predicts not to fit is an x at 0 MFU, one that ran out of memory a +.
MFU is the study's (6N + 12LhT FLOPs per token: the CSV's mfu_study, the runs' mfu_pct).
Needs matplotlib: without it the script says so and exits 2. A file that cannot be read, lacks a column or holds
a field that is not a number, and an --out that is an input or not a .png, are one error line (exit 1).
"""
import argparse
import csv
import os
import sys

from validate_planner import same_file

KERNELS = ["torch", "fused_softmax", "flash1", "flash2"]
RECOMPUTE = ["none", "selective", "full"]
# a layout: the columns both files have
KEY = ("tp", "pp", "dp", "micro_batch", "recompute", "attention", "rms_kernel", "sp", "zero", "schedule")
WHOLE = ("tp", "pp", "dp", "micro_batch", "rms_kernel", "sp", "zero")  # KEY's columns that are whole numbers


def read_csv(path, columns, numbers):
    """The rows of a CSV file that has every one of columns, with the fields of numbers (the row's status
    permitting, see number_fields) numbers: anything else is one error line."""
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would hang the read, a device never end it
        sys.exit(f"error: {path}: not a regular file")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        sys.exit(f"error: {path}: cannot read it as CSV: {e}")
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        sys.exit(f"error: {path}: no column {', '.join(missing)}")
    for line, row in enumerate(rows, 2):
        for c in numbers(row):
            try:
                int(row[c]) if c in WHOLE else float(row[c])
            except (TypeError, ValueError):
                sys.exit(f"error: {path}: line {line}: {c} '{row[c]}' is not a {'whole ' if c in WHOLE else ''}number")
    return rows


def key_of(row):
    return tuple(row[k] for k in KEY)


def load_plan(path):
    """The planner's layouts (cp 1, one virtual stage): key -> MFU in percent, None if it does not fit."""
    plan = {}
    rows = read_csv(path, KEY + ("cp", "vpp", "fits", "mfu_study"),
                    lambda row: WHOLE + (("mfu_study",) if row["fits"] == "1" and row["mfu_study"] else ()))
    for row in rows:
        if row["cp"] != "1" or row["vpp"] != "1":
            continue
        plan[key_of(row)] = 100 * float(row["mfu_study"]) if row["fits"] == "1" and row["mfu_study"] else None
    return plan


def load_runs(path, model, seq_len, gpus):
    """Measured runs of the setting: key -> MFU in percent, None for out of memory (other statuses left out)."""
    runs = {}
    rows = read_csv(path, KEY + ("model", "seq_len", "gpus", "status", "mfu_pct"),
                    lambda row: WHOLE + (("mfu_pct",) if row["status"] == "ok" and row["mfu_pct"] else ()))
    for row in rows:
        if row["model"] != model or row["seq_len"] != str(seq_len) or row["gpus"] != str(gpus):
            continue
        if row["status"] == "oom":
            runs[key_of(row)] = None
        elif row["status"] == "ok" and row.get("mfu_pct"):
            runs[key_of(row)] = float(row["mfu_pct"])
    return runs


def best(table, **want):
    """Best MFU of the layouts matching want (None: all of them out of memory; absent: none)."""
    found = [v for k, v in table.items() if all(k[KEY.index(n)] == str(x) for n, x in want.items())]
    if not found:
        return "absent"
    fitting = [v for v in found if v is not None]
    return max(fitting) if fitting else None


def bars(ax, labels, predicted, measured, title):
    """Predicted and measured side by side per label; None = out of memory (a cross), absent = nothing,
    said in grey ("not run") where runs were given but none matches, so that it never reads as 0."""
    have_runs = any(m != "absent" for m in measured)
    for i, (p, m) in enumerate(zip(predicted, measured)):
        for dx, v, face, oom in ((-0.2, p, "tab:blue", "x"), (0.2, m, "white", "+")):
            if v == "absent":
                if have_runs or face != "white":
                    ax.text(i + dx, 0, "not run" if face == "white" else "not planned", rotation=90, fontsize=6,
                            color="grey", ha="center", va="bottom")
                continue
            if v is None:
                ax.plot(i + dx, 0, oom, color="tab:red", markersize=10, markeredgewidth=2)
            else:
                ax.bar(i + dx, v, width=0.38, color=face, edgecolor="tab:blue")
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("MFU %")
    ax.set_title(title, fontsize=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan_csv", help="a --plan-csv file of ./train --plan")
    ap.add_argument("--runs", help="measured runs (the layouts study's schema, e.g. calibration.csv)")
    ap.add_argument("--model", default="llama-13b", help="the runs' model (default llama-13b)")
    ap.add_argument("--seq-len", type=int, default=2048, help="the runs' sequence length (default 2048)")
    ap.add_argument("--gpus", type=int, default=64, help="the runs' GPU count (default 64)")
    ap.add_argument("--out", default="plot_layouts.png", help="PNG to write (default plot_layouts.png)")
    args = ap.parse_args()
    # the figure never lands on an input (a link or another spelling of one either), and is the PNG it says it wrote
    for given in (args.plan_csv, args.runs):
        if given and same_file(given, args.out):
            sys.exit(f"error: --out {args.out}: is a file this run reads; it is not overwritten")
    if not args.out.endswith(".png"):
        sys.exit(f"error: --out {args.out}: give a .png file (the figure is a PNG)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        sys.exit(f"error: --out {args.out}: its directory does not exist")
    plan = load_plan(args.plan_csv)
    runs = load_runs(args.runs, args.model, args.seq_len, args.gpus) if args.runs else {}
    if not plan:
        sys.exit(f"error: {args.plan_csv}: no layouts with cp 1 and vpp 1")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_layouts.py needs matplotlib (pip install -r requirements/plots.txt)")
        sys.exit(2)
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    base = dict(recompute="none", attention="flash2", rms_kernel=1, sp=0)

    # 1. MFU by micro-batch for each tp x pp
    ax = axes[0][0]
    grids = sorted({(int(k[0]), int(k[1])) for k in (runs or plan)})  # with runs: the grids they measured
    mbs = sorted({int(k[3]) for k in plan})
    for n, (tp, pp) in enumerate(grids):
        color = plt.cm.tab10(n % 10)
        for table, style, face, cross in ((plan, "-o", color, "x"), (runs, "--s", "white", "+")):
            xs, ys, oom = [], [], []
            for mb in mbs:
                v = best(table, tp=tp, pp=pp, micro_batch=mb, **base)
                if v == "absent":
                    continue
                (oom if v is None else xs).append(mb)
                if v is not None:
                    ys.append(v)
            if xs:
                ax.plot(xs, ys, style, color=color, markerfacecolor=face,
                        label=f"tp{tp} pp{pp}" if table is plan else None)
            if oom:
                ax.plot(oom, [0] * len(oom), cross, color=color, markersize=10, markeredgewidth=2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("MFU %")
    ax.set_title("MFU by micro-batch (no recompute, flash2 + RMS kernel, no SP)", fontsize=10)
    ax.legend(fontsize=7, ncol=2)

    # 2. attention kernels, with and without the RMSNorm kernel
    labels = [f"{k}{' +rms' if r else ''}" for k in KERNELS for r in (0, 1)]
    want = [dict(attention=k, rms_kernel=r) for k in KERNELS for r in (0, 1)]
    bars(axes[0][1], labels, [best(plan, **w) for w in want], [best(runs, **w) for w in want],
         "best MFU by attention kernel")

    # 3. recomputation
    bars(axes[1][0], RECOMPUTE, [best(plan, recompute=r) for r in RECOMPUTE],
         [best(runs, recompute=r) for r in RECOMPUTE], "best MFU by activation recomputation")

    # 4. sequence parallelism by tp
    tps = sorted({int(k[0]) for k in plan if int(k[0]) > 1})
    labels = [f"tp{t} {'sp' if s else 'no sp'}" for t in tps for s in (0, 1)]
    want = [dict(tp=t, sp=s) for t in tps for s in (0, 1)]
    bars(axes[1][1], labels, [best(plan, **w) for w in want], [best(runs, **w) for w in want],
         "best MFU with and without sequence parallelism")

    title = f"{args.model}, {args.seq_len} tokens, {args.gpus} GPUs: predicted (filled)"
    title += " vs measured (hollow)" if runs else ""
    fig.suptitle(title + "; x at 0: predicted not to fit, + at 0: ran out of memory")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(plan)} layouts predicted, {len(runs)} runs measured)")


if __name__ == "__main__":
    main()
