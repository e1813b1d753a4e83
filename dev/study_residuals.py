#!/usr/bin/env python3
"""The planner's step-time error on the layouts study's runs, split into a part per step and a part per micro-batch.

    python3 scripts/validate_planner.py SHEETS.csv --out PRED.csv
    python3 dev/study_residuals.py PRED.csv [SHEET_PREFIX]

For the runs that ran and are predicted to fit, the residual is the measured step minus the predicted one (seconds).
The runs of one layout (sheet, tp, pp, dp, recomputation, attention, RMS kernel, SP) at several micro-batch sizes
share everything but the micro-batch count m a pipeline runs per step (global batch / dp / micro-batch): a least-
squares line residual = a + b m over them gives a part per step (a: the data-parallel reduction, the optimizer) and a
part per micro-batch (b: what each micro-batch costs beyond its tokens' work). Printed per layout with the nodes one
data-parallel group spans (N = dp tp / GPUs a node, the Scaling codebase's order tp, dp, pp) and its ranks on a node
(k), then the mean of a by sheet, N and k, and the median of b by recomputation and RMS kernel. dev/PLANNER.md,
"The study's 256-GPU sheet (issue 35, ninth session)", quotes its output."""
import collections
import csv
import sys


def line_fit(points):
    """Least-squares a, b of y = a + b x over (x, y) points with two distinct x or more; None otherwise."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main():
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python3 dev/study_residuals.py PREDICTIONS.csv [SHEET_PREFIX]")
    prefix = sys.argv[2] if len(sys.argv) == 3 else ""
    try:
        with open(sys.argv[1], newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["sheet"].startswith(prefix)]
    except OSError as e:
        sys.exit("error: %s: %s" % (sys.argv[1], e.strerror))
    ran = [r for r in rows if r["status"] == "ok" and r["pred_fits"] == "1" and r["pred_step_s"]]
    if not ran:
        sys.exit("error: %s: no run that ran and is predicted to fit%s" % (sys.argv[1], " under " + prefix if prefix
                                                                            else ""))
    layouts = collections.defaultdict(list)
    for r in ran:
        key = (r["sheet"], int(r["tp"]), int(r["pp"]), int(r["dp"]), int(r["gpus_per_node"]), r["recompute"],
               r["attention"], r["rms_kernel"], r["sp"])
        m = int(r["global_batch_tokens"]) // int(r["seq_len"]) // int(r["dp"]) // int(r["micro_batch"])
        layouts[key].append((m, float(r["step_time_s"]) - float(r["pred_step_s"])))
    by_span, by_kernels = collections.defaultdict(list), collections.defaultdict(list)
    print("%-44s %3s %3s %4s %3s %2s %-5s %-13s %3s %2s %8s %9s  residual s at m" % (
          "sheet", "tp", "pp", "dp", "N", "k", "recomp", "attention", "rms", "sp", "a s", "b ms"))
    for key, points in sorted(layouts.items()):
        sheet, tp, pp, dp, per_node, recompute, attention, rms, sp = key
        nodes, k = max(1, dp * tp // per_node), min(dp, max(1, per_node // tp))
        fit = line_fit(points)
        if fit:
            by_span[(sheet, nodes, k)].append(fit[0])
            by_kernels[(recompute, rms)].append(fit[1])
        print("%-44s %3d %3d %4d %3d %2d %-5s %-13s %3s %2s %8s %9s  %s" % (
              sheet[:44], tp, pp, dp, nodes, k, recompute[:5], attention[:13], rms, sp,
              "%+.2f" % fit[0] if fit else "-", "%+.1f" % (1e3 * fit[1]) if fit else "-",
              " ".join("%d:%+.2f" % p for p in sorted(points))))
    print("part per step a (s), mean over layouts, by sheet, nodes spanned N and ranks a node k:")
    for (sheet, nodes, k), a in sorted(by_span.items()):
        print("  %-44s N %3d k %d: %+6.2f (%d layouts)" % (sheet[:44], nodes, k, sum(a) / len(a), len(a)))
    print("part per micro-batch b (ms), median over layouts (two-size fits of a run near its memory limit stray), by "
          "recomputation and RMS kernel:")
    for (recompute, rms), b in sorted(by_kernels.items()):
        b = sorted(b)
        median = b[len(b) // 2] if len(b) % 2 else (b[len(b) // 2 - 1] + b[len(b) // 2]) / 2
        print("  recompute %-5s rms %s: %+6.1f (%d layouts)" % (recompute, rms, 1e3 * median, len(b)))


if __name__ == "__main__":
    main()
