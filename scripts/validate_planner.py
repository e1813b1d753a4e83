#!/usr/bin/env python3
"""Score the planner against measured runs (the layouts study's, or any file of the same
schema): ./train --plan --runs predicts every run, this script compares.

    python3 scripts/validate_planner.py ../shared/data/layouts_study/calibration.csv
        [--train ./train] [--plot FIGURE.png] [--out predictions.csv]
        [-- extra planner flags, e.g. --device-set mem_frag=0.1]

    python3 scripts/validate_planner.py --published dev/published_runs.csv [--plot FIGURE.png]
        [--out predictions.csv] [--device-set-on h100-sxm,h200-sxm:matmul_eff=0.69]
        [-- --device-set link_eff_nccl=0.5]
        (published runs of other studies, each row with its model's shape and device; then each
        source leave-one-source-out: predicted with the constants FITTED on published rows refit
        without it, or at their sourced prior where its device has no other source; per source
        the MFU MAE and the runs that ran but are predicted not to fit, against the targets)

Per sheet and overall it prints:
  fit accuracy  runs with status ok or oom whose fit the planner predicted right
  MFU MAE       mean |predicted - measured| MFU points over runs that ran and are predicted to fit
  Spearman      rank correlation of predicted vs measured MFU over the runs that ran
  regret        best measured MFU of the sheet minus the measured MFU of the planner's first
                choice (the run it ranks first among those it predicts fit); a first choice
                that did not run costs the whole best
  room regret   the same for the search's order: runs that fit with PLAN_MEM_UNCERTAINTY
                (planner/memory.h) of the device's memory to spare rank above those that fit
                only within it
and for the sheets at 8k tokens whether the first choice ran and is within 3 MFU points of the
best. No figure unless --plot names one (the README's: dev/planner_validation.png for the
study, dev/published_validation.png for --published). For --published: per device the MFU
mean absolute error and mean signed error, and per
(device, sequence length) the Spearman correlation over model size.
and draws predicted vs measured MFU (one colour per sheet, the diagonal, runs predicted not
to fit hollow, runs that went out of memory as crosses on the left edge).

The study's runs (Hagemann et al. 2023) used the Aleph Alpha Scaling codebase, so the
planner is told what that software does (STUDY_FLAGS); the device is the a100-80gb profile.
"""
import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tempfile

# What the study's software did, as planner settings (dev/PLANNER.md, "The study's setting"):
#   --vocab 128000          its LLaMA models use a 128k-token vocabulary: the FLOPs per token
#                           behind its reported MFU (step time x MFU x 312 TFLOP/s) give
#                           6N + 12LhT with N = the LLaMA layers + 2 x 128000 x h for all three
#                           sizes, not the 32000 of Meta's tokenizer
#   --software scaling      the Aleph Alpha Scaling codebase: ranks laid out (pipe, data, model);
#                           the pipeline cut uniformly over [embedding, layers, norm, head]; the
#                           logits gathered over tp and the loss over the full vocabulary; the
#                           gradients reduced in the optimizer step, after the whole backward
#   --nccl-version 2.14.3   NCCL's cost model of the release of the study's date (2023: PyTorch 2.0's wheels bring
#                           2.14.3; the paper and the codebase name none): dev/PLANNER.md "NCCL's latencies by release"
STUDY_FLAGS = ["--device", "a100-80gb", "--vocab", "128000", "--software", "scaling", "--nccl-version", "2.14.3"]

TARGETS = {"fit accuracy": (">=", 0.92), "MFU MAE": ("<=", 3.0), "median Spearman": (">=", 0.9), "max regret": ("<=", 0.0)}
DEVICE_GIB = 80  # the a100-80gb profile's memory


def mem_uncertainty():
    """PLAN_MEM_UNCERTAINTY from planner/memory.h: the search's margin for a layout that fits with room."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "planner", "memory.h")
    m = re.search(r"#define PLAN_MEM_UNCERTAINTY ([0-9.]+)", open(path).read())
    return float(m.group(1))


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(a, b):
    if len(a) < 3:
        return float("nan")
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va > 0 and vb > 0 else float("nan")


def first_choice(rows, room):
    """The run the planner ranks first: the best predicted MFU among the runs predicted to fit
    (room: those with the memory margin first)."""
    fits = [r for r in rows if r["pred_fits"] == "1" and r["pred_mfu_pct"] != ""]
    if room:
        roomy = [r for r in fits if float(r["pred_mem_gib"]) <= (1 - mem_uncertainty()) * DEVICE_GIB]
        fits = roomy or fits
    return max(fits, key=lambda r: float(r["pred_mfu_pct"])) if fits else None


def score(rows):
    """Fit accuracy, MAE, Spearman and regret over rows (dicts with the input and pred_ columns)."""
    judged = [r for r in rows if r["status"] in ("ok", "oom") and r["pred_fits"] != ""]
    fit_acc = sum((r["pred_fits"] == "1") == (r["status"] == "ok") for r in judged) / len(judged) if judged else float("nan")
    ran = [r for r in rows if r["status"] == "ok" and r["pred_mfu_pct"] != ""]
    ran_fit = [r for r in ran if r["pred_fits"] == "1"]
    mae = sum(abs(float(r["pred_mfu_pct"]) - float(r["mfu_pct"])) for r in ran_fit) / len(ran_fit) if ran_fit else float("nan")
    rho = spearman([float(r["pred_mfu_pct"]) for r in ran], [float(r["mfu_pct"]) for r in ran])
    best = max((float(r["mfu_pct"]) for r in rows if r["status"] == "ok"), default=float("nan"))
    first = first_choice(rows, False)
    room = first_choice(rows, True)
    room_regret = (best - float(room["mfu_pct"]) if room["status"] == "ok" else best) if room else best
    if first:
        regret = best - float(first["mfu_pct"]) if first["status"] == "ok" else best
        choice = describe(first)
    else:
        regret, choice = best, "none predicted to fit"
    return dict(n=len(rows), judged=len(judged), fit=fit_acc, n_mae=len(ran_fit), mae=mae, n_rho=len(ran), rho=rho,
                best=best, regret=regret, room_regret=room_regret, choice=choice, first=first, room_first=room)


def describe(r):
    return "tp%s pp%s mb%s %s %s rms%s sp%s (%s)" % (r["tp"], r["pp"], r["micro_batch"], r["recompute"], r["attention"],
                                                    r["rms_kernel"], r["sp"], r["status"])


def plot(rows, sheets, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 7))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, s in enumerate(sheets):
        col = colours[i % len(colours)]
        ran = [r for r in rows if r["sheet"] == s and r["status"] == "ok" and r["pred_mfu_pct"] != ""]
        fit = [r for r in ran if r["pred_fits"] == "1"]
        nofit = [r for r in ran if r["pred_fits"] != "1"]
        ax.scatter([float(r["mfu_pct"]) for r in fit], [float(r["pred_mfu_pct"]) for r in fit], s=18, color=col, label=s)
        ax.scatter([float(r["mfu_pct"]) for r in nofit], [float(r["pred_mfu_pct"]) for r in nofit], s=18, facecolors="none",
                   edgecolors=col)
        oom = [r for r in rows if r["sheet"] == s and r["status"] == "oom" and r["pred_fits"] == "1"]
        ax.scatter([21] * len(oom), [float(r["pred_mfu_pct"]) for r in oom], marker="x", s=25, color=col)
    finish_figure(fig, ax, 80, "measured MFU % (crosses at the left edge: went out of memory, predicted to fit)",
                  "predicted MFU %", "planner vs the layouts study (hollow: predicted not to fit)", path)


def finish_figure(fig, ax, top, xlabel, ylabel, title, path, bottom=20, legend_outside=False):
    """The diagonal on [bottom, top], the labels, the legend (in the upper left, or right of the axes where every
    corner holds points); written to path."""
    ax.plot([bottom, top], [bottom, top], "k-", lw=0.8)
    ax.set_xlim(bottom, top)
    ax.set_ylim(bottom, top)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1) if legend_outside else None)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


SHAPE_COLS = [("n_layer", "--n-layer"), ("n_head", "--n-head"), ("n_kv_head", "--n-kv-head"), ("d_model", "--d-model"),
              ("d_ff", "--d-ff"), ("vocab", "--vocab")]
ARCH_PRESET = {"gpt2": "gpt2-124m", "llama": "llama-7b"}  # a preset of each architecture; the shape flags set the rest


def error_summary(label, rs):
    """One line: runs, MFU mean absolute and signed error of rows with a prediction."""
    err = [float(r["pred_mfu_pct"]) - float(r["mfu_pct"]) for r in rs if r["pred_mfu_pct"]]
    if not err:
        return
    mae = sum(abs(e) for e in err) / len(err)
    print("  %-44s %3d runs, MFU MAE %5.2f points, mean error %+6.2f" % (label, len(err), mae, sum(err) / len(err)))


def source_of(row):
    """A row's source for leave-one-source-out: its sheet without the sequence length (one
    publication's table at 2k and 8k is one source)."""
    return re.sub(r" seq \d+$", "", row["sheet"])


# The constants set by looking at published rows (dev/PLANNER.md says how): leave-one-source-out
# refits each on the other sources of its device (the value of the grid with the least MAE over
# them), or, where no other source of the device has rows, uses its prior: a value sourced
# without those rows.
FITTED = [
    dict(device="a100-80gb", key="nic_eff", set_on=["narayanan2021 table1"], grid=[x / 100 for x in range(50, 101, 10)],
         prior=0.8, why="NCCL's bus bandwidth across nodes over the NICs' line rate, about 0.8 (estimate)"),
]
# (h100-sxm matmul_eff was fitted on llm-foundry's H100 tables until 2026-12-05; it is now the prior
# 0.634 derived from the A100's fit and both GPUs' measured matmul ceilings: planner/device.h)


def read_published(path):
    """The rows of a published-runs file; one whose field count is not the header's is refused (csv.DictReader would
    pad a short row with None and keep a long one's extras aside, silently)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        for fields in reader:
            if fields and len(fields) != len(header):  # (a blank line is no row, as DictReader reads it)
                sys.exit("error: %s: line %d (sheet '%s') has %d fields, the header %d" %
                         (path, reader.line_num, fields[0] if fields else "", len(fields), len(header)))
        f.seek(0)
        rows = list(csv.DictReader(f))
    for r in rows:
        r.setdefault("arch", "gpt2"), r.setdefault("held_out", "0"), r.setdefault("software", "framework")
        known = ("framework", "foundry", "megatron", "deepspeed2021", "nanotron")
        if r["software"] not in known:
            sys.exit("error: %s: software '%s' (known: %s)" % (path, r["software"], ", ".join(known)))
        if not r.get("n_kv_head"):
            r["n_kv_head"] = r["n_head"]
        # the columns added later (a row written before them has none): cp 1, the even cut
        r["cp"], r["pp_split"] = r.get("cp") or "1", r.get("pp_split") or ""
        if r["arch"] not in ARCH_PRESET:
            sys.exit("error: %s: arch '%s' (known: %s)" % (path, r["arch"], ", ".join(ARCH_PRESET)))
    return rows


def with_extra(own, extra):
    """The script's own planner flags (flag, value pairs) with the extra ones after them: a flag extra gives replaces
    the script's (./train refuses a flag given twice), and so does a --device-set of the same key."""
    given, keys = set(), set()
    for i, t in enumerate(extra):
        name, eq, value = t.partition("=")
        if not t.startswith("--"):
            continue
        given.add(name)
        if name == "--device-set":
            keys.add((value if eq else (extra[i + 1] if i + 1 < len(extra) else "")).split("=")[0])
    kept = []
    for flag, value in zip(own[::2], own[1::2]):
        if (flag == "--device-set" and value.split("=")[0] not in keys) or (flag != "--device-set" and flag not in given):
            kept += [flag, value]
    return kept + extra


def planner_status(p, cmd):
    """Ends the script when ./train --plan --runs failed; exit 2 (some rows not evaluated, written with
    pred_fits 0 and the reason) goes on with the planner's line as a warning."""
    if p.returncode == 2:
        print("warning: %s" % p.stderr.strip().replace("error: ", "", 1), file=sys.stderr)
    elif p.returncode != 0:
        sys.exit("error: the planner failed (%s): %s" % (" ".join(cmd), p.stderr.strip()))


def predict_published(train, rows, extra, device_set=None):
    """Each group of one device, software and model shape through ./train --plan --runs with the
    shape's flags; device_set: {device: [KEY=VALUE, ...]} added as --device-set to that device's
    groups. Returns the rows (in their order) with pred_fits, pred_mfu_pct, pred_mem_gib."""
    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["device"], r["arch"], r["software"]) + tuple(r[c] for c, _ in SHAPE_COLS), []).append(i)
    pred = [None] * len(rows)
    for key, idx in groups.items():
        rs = [rows[i] for i in idx]
        tmp_in = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        w = csv.DictWriter(tmp_in, fieldnames=list(rs[0].keys()))
        w.writeheader()
        for r in rs:
            w.writerow(dict(r, model=ARCH_PRESET[key[1]]))
        tmp_in.close()
        out = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
        own = ["--device", key[0], "--software", key[2]]
        for (col, flag) in SHAPE_COLS:
            own += [flag, rs[0][col]]
        for kv in (device_set or {}).get(key[0], []):
            own += ["--device-set", kv]
        cmd = [train, "--plan", "--runs", tmp_in.name] + with_extra(own, extra) + ["--plan-csv", out]
        p = subprocess.run(cmd, capture_output=True, text=True)
        os.unlink(tmp_in.name)
        planner_status(p, cmd)
        with open(out) as f:
            got = list(csv.DictReader(f))
        os.unlink(out)
        for i, r, g in zip(idx, rs, got):
            pred[i] = dict(r, pred_fits=g["pred_fits"], pred_mfu_pct=g["pred_mfu_pct"], pred_mem_gib=g["pred_mem_gib"])
    return pred


def mfu_mae(pred):
    err = [abs(float(r["pred_mfu_pct"]) - float(r["mfu_pct"])) for r in pred if r["pred_mfu_pct"]]
    return sum(err) / len(err) if err else float("nan")


def leave_one_source_out(train, rows, extra, device_set_on=None):
    """Every source predicted with the FITTED constants set without it; device_set_on ({device: [KEY=VALUE, ...]},
    --device-set-on) is added to each device's rows, and a FITTED key it sets is not refit. Returns {source: (rows
    predicted, what was set)}."""
    base = device_set_on or {}
    out = {}
    for src in dict.fromkeys(source_of(r) for r in rows):
        device_set, notes = {dev: list(kvs) for dev, kvs in base.items()}, []
        for fc in FITTED:
            if src not in fc["set_on"]:
                continue
            if any(kv.split("=")[0] == fc["key"] for kv in base.get(fc["device"], [])):
                notes.append("%s %s as --device-set-on sets it" % (fc["device"], fc["key"]))
                continue
            others = [r for r in rows if r["device"] == fc["device"] and source_of(r) not in fc["set_on"] + [src]]
            if others:
                def refit(v):
                    at_v = dict(base, **{fc["device"]: base.get(fc["device"], []) + ["%s=%g" % (fc["key"], v)]})
                    return mfu_mae(predict_published(train, others, extra, at_v))
                scores = [(refit(v), v) for v in fc["grid"]]
                best = min(scores)[1]
                notes.append("%s %s %g (refit on %d runs of other sources)" % (fc["device"], fc["key"], best,
                                                                              len(others)))
            else:
                best = fc["prior"]
                notes.append("%s %s %g (prior: no other source on the device)" % (fc["device"], fc["key"], best))
            device_set.setdefault(fc["device"], []).append("%s=%g" % (fc["key"], best))
        mine = [r for r in rows if source_of(r) == src]
        out[src] = (predict_published(train, mine, extra, device_set), "; ".join(notes) or "no constant set on it")
    return out


LOSO_MAE_TARGET = 3.0


def plot_published(pred, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 7))
    colours = plt.get_cmap("tab20").colors  # 20 colours, then a new marker: every source its own pair
    markers = "os^Dv"
    for i, src in enumerate(dict.fromkeys(source_of(r) for r in pred)):
        col, mark = colours[i % len(colours)], markers[i // len(colours) % len(markers)]
        rs = [r for r in pred if source_of(r) == src and r["pred_mfu_pct"]]
        fit = [r for r in rs if r["pred_fits"] == "1"]
        nofit = [r for r in rs if r["pred_fits"] != "1"]
        ax.scatter([float(r["mfu_pct"]) for r in fit], [float(r["pred_mfu_pct"]) for r in fit], s=20, color=col,
                   marker=mark, label="%s (%d)" % (src, len(rs)))
        ax.scatter([float(r["mfu_pct"]) for r in nofit], [float(r["pred_mfu_pct"]) for r in nofit], s=20,
                   marker=mark, facecolors="none", edgecolors=col)
    ax.fill_between([5, 75], [2, 72], [8, 78], color="0.9", zorder=0)  # from 5: ZeRO-3 at scale ran near 10
    finish_figure(fig, ax, 75, "published MFU %", "predicted MFU %, leave-one-source-out (grey: within 3 points)",
                  "planner vs published runs (hollow: predicted not to fit, though they ran)", path, bottom=5,
                  legend_outside=True)


def write_published_predictions(rows, pred, loso, path):
    """--out with --published: every row as read, its prediction with the committed constants (pred_fits,
    pred_mfu_pct, pred_mem_gib) and its leave-one-source-out one (loso_pred_fits, loso_pred_mfu_pct)."""
    loso_left = {src: list(rs) for src, (rs, _) in loso.items()}  # each source's rows in the file's order
    cols = list(rows[0].keys()) + ["pred_fits", "pred_mfu_pct", "pred_mem_gib", "loso_pred_fits", "loso_pred_mfu_pct"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r, p in zip(rows, pred):
            lp = loso_left[source_of(r)].pop(0)
            w.writerow(dict(p, loso_pred_fits=lp["pred_fits"], loso_pred_mfu_pct=lp["pred_mfu_pct"]))


def published(train, path, extra, plot_path, out_path, device_set_on=None):
    """Predict the published runs of other studies (dev/published_runs.csv): each group of one
    device, software and model shape through ./train --plan --runs with the shape's flags, as the
    row's software (column software: framework, the default, foundry: llm-foundry's dropout 0
    and fused loss, megatron: Megatron-core's tp and dp communication overlap, or deepspeed2021:
    DeepSpeed's ZeRO-3 of 2021, a synchronized collective per weight tensor, or nanotron: nanotron v0.5;
    --software)
    with the row's architecture (column arch: gpt2,
    the default: LayerNorm, GELU MLP of d_ff, learned positions, MPT's ALiBi and missing biases
    differ by < 0.1% of the FLOPs; llama: RMSNorm, SwiGLU, RoPE, GQA with n_kv_head, default
    n_head). Rows with held_out 1 were kept out of every fit and are scored apart; then every
    source again, leave-one-source-out (FITTED). device_set_on: {device: [KEY=VALUE, ...]}, set on
    that device's rows only (--device-set-on)."""
    rows = read_published(path)
    for dev in device_set_on or {}:
        if not any(r["device"] == dev for r in rows):
            sys.exit("error: --device-set-on: device '%s' has no row in %s (its devices: %s)" % (
                     dev, path, ", ".join(dict.fromkeys(r["device"] for r in rows))))
    pred = predict_published(train, rows, extra, device_set_on)
    print("planner on published runs (%s): --software of each row %s%s" % (path, " ".join(extra), "".join(
          "; on %s --device-set %s" % (dev, " ".join(kvs)) for dev, kvs in (device_set_on or {}).items())))
    print("%-40s %-5s %5s %4s %3s %4s %7s %7s %6s %6s" % ("run", "dev", "seq", "gpus", "mb", "ckpt", "MFU", "planner", "diff",
                                                       "GiB"))
    for r in pred:
        d = float(r["pred_mfu_pct"]) - float(r["mfu_pct"]) if r["pred_mfu_pct"] else float("nan")
        print("%-40s %-5s %5s %4s %-9s %3s %4s %7.2f %7s %+6.2f %6s%s%s" % (
              r["model"] + " " + r["sheet"][:24], r["device"][:4], r["seq_len"], r["gpus"],
              "t%sp%sv%s" % (r["tp"], r["pp"], r.get("vpp") or 1), r["micro_batch"], r["recompute"][:4],
              float(r["mfu_pct"]),
              r["pred_mfu_pct"], d, r["pred_mem_gib"], " held out" if r["held_out"] == "1" else "",
              "" if r["pred_fits"] == "1" else " (predicted not to fit)"))
    print("by source (held out: kept out of every fit):")
    for sheet in dict.fromkeys(r["sheet"] for r in pred):
        rs = [r for r in pred if r["sheet"] == sheet]
        error_summary(sheet + (" (held out)" if all(r["held_out"] == "1" for r in rs) else ""), rs)
    for label, keep in (("fitted or checked", "0"), ("held out", "1")):
        for dev in dict.fromkeys(r["device"] for r in pred):
            error_summary("%s, %s" % (dev, label), [r for r in pred if r["device"] == dev and r["held_out"] == keep])
    for dev in dict.fromkeys(r["device"] for r in pred):
        rs = [r for r in pred if r["device"] == dev and r["pred_mfu_pct"]]
        err = [float(r["pred_mfu_pct"]) - float(r["mfu_pct"]) for r in rs]
        print("%s: %d runs, MFU MAE %.2f points, mean error %+.2f" % (dev, len(rs), sum(abs(e) for e in err) / len(err),
                                                                      sum(err) / len(err)))
        for sheet, seq in dict.fromkeys((r["sheet"], r["seq_len"]) for r in rs):
            # one run per model size (the fewest GPUs), ordered by size
            by_size = {}
            same_source = (r for r in rs if (r["sheet"], r["seq_len"]) == (sheet, seq))
            for r in sorted(same_source, key=lambda r: int(r["gpus"])):
                by_size.setdefault(int(r["d_model"]) * int(r["n_layer"]), r)
            xs = [float(r["mfu_pct"]) for r in by_size.values()]
            ys = [float(r["pred_mfu_pct"]) for r in by_size.values()]
            if len(xs) >= 3:
                print("  %s, seq %s: Spearman over %d model sizes %.3f" % (sheet, seq, len(xs), spearman(xs, ys)))


    print("leave-one-source-out (each source predicted with the constants set without it; targets: MFU MAE <= %g on"
          " every source of >= 3 runs, no run that ran predicted not to fit):" % LOSO_MAE_TARGET)
    loso = leave_one_source_out(train, rows, extra, device_set_on)
    missed, all_pred = [], []
    for src, (rs, note) in loso.items():
        all_pred += rs
        err = [float(r["pred_mfu_pct"]) - float(r["mfu_pct"]) for r in rs if r["pred_mfu_pct"]]
        mae = sum(abs(e) for e in err) / len(err) if err else float("nan")
        nofit = sum(r["pred_fits"] != "1" for r in rs)
        ok = (len(rs) < 3 or mae <= LOSO_MAE_TARGET) and nofit == 0
        if not ok:
            missed.append(src)
        print("  %-34s %3d runs, MFU MAE %5.2f, mean %+6.2f, does not fit %d  %s  [%s]" % (
              src, len(rs), mae, sum(err) / len(err) if err else float("nan"), nofit, "met" if ok else "MISSED", note))
    nofit = sum(r["pred_fits"] != "1" for r in all_pred)
    print("leave-one-source-out: %d runs, MFU MAE %.2f, does not fit %d; targets %s" % (
          len(all_pred), mfu_mae(all_pred), nofit, "met" if not missed else "MISSED on " + ", ".join(missed)))
    if plot_path:
        plot_published(all_pred, plot_path)
        print("wrote %s" % plot_path)
    if out_path:
        write_published_predictions(rows, pred, loso, out_path)
        print("wrote %s" % out_path)

def check_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("error: the figure needs matplotlib (pip install -r requirements/plots.txt), or leave out --plot",
              file=sys.stderr)
        sys.exit(2)


def check_measured(path, rows):
    """The measured columns score() reads (a runs file without them was a KeyError, an MFU that is no number a
    ValueError): status, and mfu_pct a finite number on every run that ran (status ok)."""
    missing = [c for c in ("status", "mfu_pct") if rows and c not in rows[0]]
    if missing:
        sys.exit("error: %s: no column %s (the calibration.csv schema: status ok|oom|error, mfu_pct of the runs ok)"
                 % (path, ", ".join(missing)))
    for i, r in enumerate(rows, 1):
        try:
            ok = r["status"] != "ok" or math.isfinite(float(r["mfu_pct"]))
        except ValueError:
            ok = False
        if not ok:
            sys.exit("error: %s: run %d: status ok, but mfu_pct '%s' is not a number" % (path, i, r["mfu_pct"]))


def same_file(a, b):
    """Whether paths a and b name one file: the same path once links are resolved, or one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="?", help="CSV of measured runs (the calibration.csv schema)")
    ap.add_argument("--published", default="", help="score published runs of other studies (dev/published_runs.csv)")
    ap.add_argument("--train", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"),
                    help="the trainer binary (default ./train; make train builds it)")
    ap.add_argument("--plot", default="", help="PNG to write (none by default: the committed figures are made with "
                    "--plot dev/planner_validation.png and, with --published, --plot dev/published_validation.png)")
    ap.add_argument("--out", default="", help="also keep the planner's predictions here (with --published: "
                    "each row's with the committed constants and its leave-one-source-out one)")
    ap.add_argument("--device-set-on", action="append", default=[], metavar="DEVICES:KEY=VALUE",
                    help="with --published: --device-set KEY=VALUE on the rows of these devices only (comma-"
                    "separated, e.g. h100-sxm,h200-sxm:matmul_eff=0.69); repeatable")
    argv = sys.argv[1:]  # everything after -- goes to the planner as it is
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    a.extra = argv[cut + 1:]
    if not os.path.exists(a.train):
        sys.exit("error: %s not found: run make train first (or give --train)" % a.train)
    # no output lands on an input or on the other output: compared by file identity (a link or another spelling of
    # the same path too)
    for flag, written in (("--out", a.out), ("--plot", a.plot)):
        for given in (a.published, a.runs, a.train, a.plot if flag == "--out" else ""):
            if written and given and same_file(written, given):
                sys.exit("error: %s %s: is a file this run reads or writes; it is not overwritten" % (flag, written))
    device_set_on = {}
    for spec in a.device_set_on:
        devices, colon, kv = spec.partition(":")
        if not colon or not devices or "=" not in kv or kv.startswith("="):
            sys.exit("error: --device-set-on %s: give DEVICES:KEY=VALUE (e.g. h100-sxm,h200-sxm:matmul_eff=0.69)"
                     % spec)
        for dev in devices.split(","):
            device_set_on.setdefault(dev, []).append(kv)
    if a.published:
        if a.plot:
            check_matplotlib()
        published(a.train, a.published, a.extra, a.plot, a.out, device_set_on)
        return
    if device_set_on:
        sys.exit("error: --device-set-on is for --published (a runs file: -- --device-set KEY=VALUE)")
    if not a.runs:
        sys.exit("error: give a runs file (the calibration.csv schema) or --published FILE")
    if a.plot:
        check_matplotlib()
    out = a.out or tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    cmd = [a.train, "--plan", "--runs", a.runs] + with_extra(STUDY_FLAGS, a.extra) + ["--plan-csv", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    planner_status(p, cmd)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    if not a.out:
        os.unlink(out)
    check_measured(a.runs, rows)
    sheets = list(dict.fromkeys(r.get("sheet", "all") for r in rows))
    for r in rows:
        r.setdefault("sheet", "all")
    print("planner: %s" % " ".join(cmd[1:-2]))
    print("%-62s %5s %6s %9s %9s %12s %6s  %s" % ("sheet", "runs", "fit", "MFU MAE", "Spearman", "regret", "room", "first choice"))
    per = []
    for s in sheets:
        sc = score([r for r in rows if r["sheet"] == s])
        per.append(sc)
        print("%-62s %5d %6.3f %5.2f(%3d) %5.3f(%3d) %5.2f/%5.2f %6.2f  %s" % (s[:62], sc["n"], sc["fit"], sc["mae"], sc["n_mae"],
              sc["rho"], sc["n_rho"], sc["regret"], sc["best"], sc["room_regret"], sc["choice"]))
    for s, sc in zip(sheets, per):  # the long-sequence sheets: the first choice must have run, near the best
        if any(r["seq_len"] == "8192" for r in rows if r["sheet"] == s):
            ok = sc["first"] is not None and sc["first"]["status"] == "ok" and sc["regret"] <= 3
            print("8k first choice %s: %s, %.2f points below the best (%s)" % (s[:50], sc["choice"], sc["regret"],
                                                                               "met" if ok else "MISSED"))
            room = sc["room_first"]  # what ./train --plan ranks first: room to spare before the rest (plan_tier)
            print("   the search's own first choice (the %g%% memory margin first): %s, %.2f points below the best" % (
                  100 * mem_uncertainty(), describe(room) if room else "none predicted to fit", sc["room_regret"]))
    allsc = score(rows)
    rhos = sorted(sc["rho"] for sc in per if sc["rho"] == sc["rho"])
    median_rho = (rhos[len(rhos) // 2] if len(rhos) % 2 else (rhos[len(rhos) // 2 - 1] + rhos[len(rhos) // 2]) / 2) if rhos else float("nan")
    max_regret = max(sc["regret"] for sc in per)
    print("%-62s %5d %6.3f %5.2f(%3d) %5.3f(%3d)" % ("all runs", allsc["n"], allsc["fit"], allsc["mae"], allsc["n_mae"], allsc["rho"],
                                                   allsc["n_rho"]))
    got = {"fit accuracy": allsc["fit"], "MFU MAE": allsc["mae"], "median Spearman": median_rho, "max regret": max_regret}
    print("targets: " + ", ".join("%s %.3f (%s %g: %s)" % (k, got[k], op, v, "met" if (got[k] >= v if op == ">=" else got[k] <= v) else "MISSED")
                                  for k, (op, v) in TARGETS.items()))
    if a.plot:
        plot(rows, sheets, a.plot)
        print("wrote %s" % a.plot)


if __name__ == "__main__":
    main()
