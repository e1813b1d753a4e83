#!/usr/bin/env python3
"""dev/interference_probe.py: what a collective's channels cost a GEMM beside them, on ONE GPU (issue 35).

The planner charges a hidden NCCL collective `comm_interference_nccl` 0.61 s of compute per second of itself
(planner/device.h; dev/PLANNER.md "NCCL's interference"). Two physical readings compete: the SMs its channels
hold (one CTA a channel: 24 over NVLink, 16 through the NICs, 2-8 on a p4d node) and the HBM bytes it moves a
second (a NIC's 25-50 GB/s, NVLink's 150-450). A ring channel is a resident CTA of 512 threads
(NCCL_SIMPLE_MAX_NTHREADS) that polls flags and copies a step of its buffer (4 MiB / 8 steps = 512 KiB) each
time the link delivers one. This stands one in without a second GPU or NCCL:

  GEMM loop  bf16 torch.mm of each --shapes (M x N x K) back to back on one stream, ~--gemm-ms long;
  copier     a Triton kernel of N CTAs (--ctas) on another stream: a "collective" of --collective-ms (a 7B
             layer's 0.2 GB all-gather at 100 GB/s takes 2 ms), launched again and again until the GEMM stream
             sets a stop flag (0: one kernel resident for the whole loop); CTA p copies chunk c = k N + p
             (--chunk-kib) once the global timer passes c x chunk / rate after its start: a total copied rate
             (--rates, GB/s: each byte read and written once, 2x that in HBM traffic), `max` unthrottled,
             `hold` resident and polling but copying nothing (the SMs alone);
  priority   the copier's stream at normal and at high priority (--priorities): a relaunched collective's CTAs
             wait for SMs the GEMM's CTAs free; at high priority they are scheduled first.

For each (shape, priority, N, rate), --repeats times alternately: the GEMM loop alone and beside the copier
(CUDA events), medians. Columns: the loop's ms alone and beside, TFLOP/s alone, the copier's achieved GB/s alone
(a 10 ms window, no GEMM) and beside the GEMMs (its own global-timer window, which covers the loop: the stop flag
follows the loop on its stream), the SMs its CTAs ran on, copier_timeouts (repeats in which the copier ran its
whole span, 3 loops + 20 ms, before the GEMMs ended: their CTAs waited for its SMs; such a point's interference
is its timeout's, not a rate), and
  interference = (beside - alone) / beside: extra GEMM seconds per second of copier activity (the copier runs for
                 the whole loop; fsdp_profile.py's comm_interference is the same ratio);
  interference_planner = interference x copier GB/s alone / beside: extra GEMM seconds per second the copied bytes
                 take the copier alone, the planner's comm_interference_nccl (a hidden collective of X s alone
                 costs the compute that times X); the two differ where the GEMMs slow the copier;
  extra_s_per_gb = interference / copier GB/s beside: extra GEMM seconds per GB copied (the per-byte constant);
  sm_share N / SMs and waves_pred (the GEMM on SMs - N SMs, planner/time.h's wave model as ub_gemm_time uses
                 it): what the SMs-held reading predicts.
The summary (stdout and FILE.txt beside the CSV) gives, from a torch.profiler trace taken after the timings,
each kernel's grid, block, registers and shared memory (a GEMM of a grid of ~SMs CTAs is persistent: a CTA kept
off its SM by the copier keeps its tiles until it runs, the NVIDIA forum's ~2x case; CTAs that fill an SM's
registers cannot share it with a copier CTA), and fits interference = a + b x GB/s at each N.

    python3 dev/interference_probe.py [--shapes 8192x8192x8192,8192x11008x4096] [--ctas 2,4,8,16,24,32]
        [--rates hold,25,50,150,450,max] [--priorities normal,high] [--repeats 5] [--gemm-ms 20]
        [--collective-ms 2] [--chunk-kib 512] [--budget 120] [--out FILE.csv] [--dry-run]
An estimated 60-105 s on one H100 with the defaults (not yet timed; each loop waits 10 ms behind a sleep
kernel while the host queues it); stops the sweep (rows so far kept, a line says so) at --budget seconds.
--dry-run needs no GPU, PyTorch or Triton: the plan, the pacing arithmetic (each rate's chunk period, checked on
a host model of the kernel's schedule), and CSV rows and a summary from a synthetic GEMM (labelled so in every
row: numbers that are NOT measured) to check the writer and the fit.
Without it the probe needs PyTorch with CUDA, a GPU and Triton, and says which is missing in one line (exit 1).
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys
import tempfile
import time

try:
    import torch
except ImportError as e:
    torch, TORCH_ERR = None, str(e)
try:
    import triton
    import triton.language as tl
except Exception as e:  # ImportError, or a Triton that cannot load its backend
    triton, TRITON_ERR = None, str(e)

COLS = ["device", "sms", "shape", "priority", "ctas", "rate_target_gbs", "collective_ms", "chunk_kib", "repeats",
        "gemm_ms_alone", "gemm_ms_beside", "gemm_tflops_alone", "copier_gbs_alone", "copier_gbs_beside", "copier_sms",
        "copier_window_ratio", "copier_timeouts", "interference", "interference_min", "interference_max",
        "interference_planner", "extra_s_per_gb",
        "sm_share", "waves_pred", "sm_clock_mhz_alone", "sm_clock_mhz_beside"]
BLOCK = 4096  # int32 elements a copy step of the copier's 512 threads (16 KiB: two 16-byte vectors a thread)
THREADS = 512
HOLD, MAX = "hold", "max"
DRY_PER_GBS = 2e-4  # --dry-run's synthetic interference a copied GB/s (not a measurement)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8192x8192x8192,8192x11008x4096",
                    help="GEMMs M x N x K (default: 8192^3 and LLaMA-7B's gate/up projection at 8192 tokens)")
    ap.add_argument("--ctas", default="2,4,8,16,24,32", help="copier CTAs (NCCL channels), comma-separated")
    ap.add_argument("--rates", default="hold,25,50,150,450,max",
                    help="copied GB/s (all CTAs together), 'max' unthrottled, 'hold' no copying")
    ap.add_argument("--priorities", default="normal,high", help="the copier stream's priority: normal, high")
    ap.add_argument("--repeats", type=int, default=5, help="alone / beside pairs a point (medians)")
    ap.add_argument("--gemm-ms", type=float, default=20, help="length of one GEMM loop alone (ms)")
    ap.add_argument("--collective-ms", type=float, default=2,
                    help="one copier kernel's length, relaunched until the GEMMs end (0: one resident kernel)")
    ap.add_argument("--chunk-kib", type=int, default=512, help="bytes a copier step (NCCL's 4 MiB buffer / 8 steps)")
    ap.add_argument("--buffer-mib", type=int, default=512, help="copier source and destination, each (>> L2)")
    ap.add_argument("--k-half", type=float, default=128, help="planner matmul_k_half for waves_pred (h100-sxm 128)")
    ap.add_argument("--budget", type=float, default=120, help="seconds for the whole probe (the sweep stops early)")
    ap.add_argument("--out", default="", help="CSV (default $OUT/interference_probe.csv, else ./...)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: plan, pacing check, synthetic rows")
    a = ap.parse_args()
    try:
        a.shape_list = [tuple(int(x) for x in s.lower().split("x")) for s in a.shapes.split(",")]
        a.cta_list = [int(x) for x in a.ctas.split(",")]
        a.rate_list = [r if r in (HOLD, MAX) else float(r) for r in a.rates.split(",")]
    except ValueError:
        ap.error("--shapes MxNxK,..., --ctas integers, --rates numbers (GB/s), 'hold' or 'max'")
    a.prio_list = a.priorities.split(",")
    if any(len(s) != 3 or min(s) < 1 or max(s) > 65536 for s in a.shape_list):
        ap.error("--shapes: three positive sizes up to 65536 each, e.g. 8192x8192x8192")
    if min(a.cta_list) < 1 or max(a.cta_list) > 64 or any(isinstance(r, float) and not 0 < r <= 1e5
                                                          for r in a.rate_list):
        ap.error("--ctas 1..64, --rates > 0 and <= 100000 GB/s")
    if any(p not in ("normal", "high") for p in a.prio_list):
        ap.error("--priorities: normal, high")
    chunk = a.chunk_kib * 1024
    if (a.repeats < 1 or not 0 < a.gemm_ms <= 1000 or a.budget <= 0 or not 0 <= a.collective_ms <= 1000
            or chunk % (BLOCK * 4) or not 0 < chunk <= 64 << 20):
        ap.error("--repeats, --budget positive; --gemm-ms 0..1000, --collective-ms 0..1000; "
                 "--chunk-kib a multiple of 16, at most 65536")
    if not chunk <= a.buffer_mib << 20 <= 8 << 30:
        ap.error("--buffer-mib: at least one chunk, at most 8192")
    a.out = a.out or os.path.join(os.environ.get("OUT") or ".", "interference_probe.csv")
    return a


def chunk_step_ns(rate, chunk_bytes):
    """Nanoseconds between consecutive chunks' due times over all CTAs: chunk / rate (1 GB/s = 1 byte/ns);
    0 unthrottled, None for hold. CTA p's k-th chunk (number c = k N + p) is due c steps after its start, so
    each CTA copies one chunk every N steps (a period of N x chunk / rate) and the CTAs take turns."""
    if rate == HOLD:
        return None
    return 0 if rate == MAX else int(round(chunk_bytes / rate))


def simulate_pacing(n_ctas, step_ns, chunk_bytes, copy_ns, window_ns):
    """The copier's schedule on the host (the kernel's loop, each CTA alone on its SM taking copy_ns a chunk):
    copied bytes a second over window_ns. A check of the pacing arithmetic, not of the GPU."""
    if step_ns is None:
        return 0.0
    chunks = 0
    for p in range(n_ctas):
        t, k = 0, 0
        while t < window_ns:
            due = (k * n_ctas + p) * step_ns
            t = max(t, due) + copy_ns
            if t <= window_ns:
                chunks, k = chunks + 1, k + 1
    return chunks * chunk_bytes / window_ns  # bytes / ns = GB/s


def wave_interference(m, n, k, sms, held, k_half):
    """planner/time.h's wave model (128 x 128 tiles, split-K <= 4, k_half of K a tile): the GEMM's time on
    sms - held SMs (at that share of the peak) over its time on all; returned as (slow - fast) / slow."""
    def t(s):
        best = 0.0
        for split in range(1, 5):
            tiles = math.ceil(m / 128) * math.ceil(n / 128) * split
            fill = m * n * split / 128 ** 2 / (math.ceil(tiles / s) * s)
            best = max(best, fill * (k / split) / (k / split + k_half))
        return 1 / (s * best)
    return 1 - t(sms) / t(sms - held) if held < sms else 1.0


def kernel_attrs(label, events):
    """Lines from a Chrome trace's events (torch.profiler): each kernel's name, grid, block, registers a thread
    and shared memory: whether the GEMM's CTAs can share an SM with the copier's at all, and whether the GEMM is
    a persistent kernel (a grid of about the SMs)."""
    seen, out = set(), []
    for e in events:
        args = e.get("args") or {}
        key = (e.get("name"), str(args.get("grid")))
        if e.get("cat") != "kernel" or key in seen:
            continue
        seen.add(key)
        out.append("%s kernel %s: grid %s, block %s, %s registers a thread, %s B shared" % (
            label, str(e.get("name"))[:90], args.get("grid"), args.get("block"), args.get("registers per thread"),
            args.get("shared memory")))
    return out or ["%s: no kernel in the profiler's trace" % label]


def plan(a):
    """The sweep in run order: priorities outermost (normal first), then shapes, CTAs, rates."""
    return [(p, s, n, r) for p in a.prio_list for s in a.shape_list for n in a.cta_list for r in a.rate_list]


class CsvOut:
    """The CSV, a row flushed as soon as it is measured (a probe stopped by its caller keeps what it did)."""
    def __init__(self, path):
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=COLS, extrasaction="ignore")
        self.w.writeheader()
        self.f.flush()
        self.rows = []

    def write(self, row):
        self.rows.append(row)
        self.w.writerow({k: ("%.4g" % v if isinstance(v, float) else v) for k, v in row.items()})
        self.f.flush()

    def close(self):
        self.f.close()


def fit_line(xs, ys):
    """Least squares y = a + b x; (a, b), or (mean, nan) with fewer than two distinct x."""
    if len(set(xs)) < 2:
        return (statistics.fmean(ys) if ys else float("nan")), float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def summarize(rows):
    """Lines: per shape and priority, the interference at each N and rate, then what each reading predicts."""
    out = []
    for key in dict.fromkeys((r["shape"], r["priority"]) for r in rows):
        sel = [r for r in rows if (r["shape"], r["priority"]) == key]
        out.append("shape %s, copier priority %s (%s, %d SMs): interference [copier GB/s beside] by CTAs x rate"
                   % (key[0], key[1], sel[0]["device"], sel[0]["sms"]))
        for n in dict.fromkeys(r["ctas"] for r in sel):
            rn = [r for r in sel if r["ctas"] == n]
            cells = " | ".join("%s %.3f [%.0f]" % (r["rate_target_gbs"], r["interference"], r["copier_gbs_beside"])
                               for r in rn)
            moving = [r for r in rn if r["rate_target_gbs"] != HOLD and r["copier_gbs_beside"] > 0]
            a0, b = fit_line([r["copier_gbs_beside"] for r in moving], [r["interference"] for r in moving])
            hold = [r["interference"] for r in rn if r["rate_target_gbs"] == HOLD]
            out.append("  N %2d: %s" % (n, cells))
            out.append("        SMs held: hold %s, N/SMs %.3f, waves %.3f; bytes: a + b GB/s with a %.3f, "
                       "b %.4f per 100 GB/s" % ("%.3f" % hold[0] if hold else "-", rn[0]["sm_share"],
                                               rn[0]["waves_pred"], a0, 100 * b))
    for key in dict.fromkeys((r["shape"], r["priority"]) for r in rows):  # one line each: what the planner reads
        sel = [r for r in rows if (r["shape"], r["priority"]) == key]
        rates = list(dict.fromkeys(r["rate_target_gbs"] for r in sel))
        cells = {(r["ctas"], r["rate_target_gbs"]): r["interference_planner"] for r in sel}
        out.append("summary comm_interference_nccl (GEMM seconds lost a second of copier alone) at %s, copier priority "
                   "%s, by CTAs at %s GB/s: %s" % (key[0], key[1], " / ".join(rates), "; ".join(
                       "%d: %s" % (n, " / ".join("%.3f" % cells[n, t] if (n, t) in cells else "-" for t in rates))
                       for n in dict.fromkeys(r["ctas"] for r in sel))))
    out.append("readings: SMs held -> hold ~ N/SMs or waves, b ~ 0; per byte -> hold ~ 0, b the same at every N;")
    out.append("          both -> a ~ hold ~ N/SMs and b > 0 (dev/PLANNER.md, 'A one-GPU probe of the readings')")
    return out


def dry_rows(a, sink):
    """Synthetic rows (every row's device says so): GEMMs at 700 TFLOP/s slowed by N/SMs plus DRY_PER_GBS a GB/s;
    the copier's rates from simulate_pacing with a chunk copied at 50 GB/s by one CTA. Then the fit must give
    back a = N/SMs and b = DRY_PER_GBS: a check of the summary's arithmetic, not a measurement."""
    sms, chunk = 132, a.chunk_kib * 1024
    copy_ns = chunk / 50.0
    for prio, (m, n, k), ctas, rate in plan(a):
        step = chunk_step_ns(rate, chunk)
        gbs = simulate_pacing(ctas, step, chunk, copy_ns, 2e6)
        if isinstance(rate, float) and gbs < min(rate, ctas * 50) * 0.97:
            sys.exit("error: dry run: pacing gives %.1f GB/s for %.0f GB/s on %d CTAs" % (gbs, rate, ctas))
        alone = 2 * m * n * k / 700e12 * 1e3
        inter = ctas / sms + DRY_PER_GBS * gbs
        sink.write(dict(device="dry-run: synthetic, NOT measured", sms=sms, shape="%dx%dx%d" % (m, n, k),
                        priority=prio, ctas=ctas, rate_target_gbs=rate if isinstance(rate, str) else "%g" % rate,
                        collective_ms=a.collective_ms, chunk_kib=a.chunk_kib, repeats=0, gemm_ms_alone=alone,
                        gemm_ms_beside=alone / (1 - inter),
                        gemm_tflops_alone=700.0, copier_gbs_alone=gbs, copier_gbs_beside=gbs, copier_sms=ctas,
                        copier_window_ratio=1.0, copier_timeouts=0, interference=inter, interference_min=inter,
                        interference_max=inter,
                        interference_planner=inter, extra_s_per_gb=inter / gbs if gbs else "", sm_share=ctas / sms,
                        waves_pred=wave_interference(m, n, k, sms, ctas, a.k_half), sm_clock_mhz_alone="",
                        sm_clock_mhz_beside=""))
    for r in sink.rows:
        key = (r["shape"], r["priority"], r["ctas"])
        moving = [x for x in sink.rows if (x["shape"], x["priority"], x["ctas"]) == key and x["copier_gbs_beside"]]
        a0, b = fit_line([x["copier_gbs_beside"] for x in moving], [x["interference"] for x in moving])
        if abs(a0 - r["ctas"] / sms) > 1e-9 or abs(b - DRY_PER_GBS) > 1e-12:
            sys.exit("error: dry run: the fit gives a %.6f b %.6f for %.6f %g" % (a0, b, r["ctas"] / sms, DRY_PER_GBS))


if triton is not None:
    @triton.jit
    def _globaltimer():
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)

    @triton.jit
    def _smid():
        return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit(do_not_specialize=["n_chunks_buf", "step_ns", "max_ns"])
    def paced_copy(src, dst, stop, stats, n_chunks_buf, step_ns, max_ns,
                   CHUNK: tl.constexpr, BLOCK: tl.constexpr, COPY: tl.constexpr):
        """One ring channel a program: polls the stop flag and the global timer (as NCCL's CTAs poll their
        connection's flags) until the flag is set or max_ns have passed; copies its k-th chunk (number
        c = k N + p of the buffer's, CHUNK int32s) once c x step_ns have passed since its start. Adds to its
        stats row (first start, last end, chunks copied, SM) across launches."""
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        offs = tl.arange(0, BLOCK)
        t0 = _globaltimer()
        t = t0
        k = pid * 0
        flag = tl.load(stop, volatile=True)
        while (flag == 0) & (t - t0 < max_ns):
            if COPY:
                c = k * nprog + pid
                if t - t0 >= c.to(tl.int64) * step_ns:
                    base = (c % n_chunks_buf).to(tl.int64) * CHUNK
                    for i in range(0, CHUNK, BLOCK):
                        tl.store(dst + base + i + offs, tl.load(src + base + i + offs))
                    k += 1
            t = _globaltimer()
            flag = tl.load(stop, volatile=True)
        tl.atomic_min(stats + pid * 4, t0)
        tl.atomic_max(stats + pid * 4 + 1, t)
        tl.atomic_add(stats + pid * 4 + 2, k.to(tl.int64))
        tl.store(stats + pid * 4 + 3, _smid().to(tl.int64))


def missing_requirements():
    """'' when the probe can run here, else what is missing (one phrase)."""
    if torch is None:
        return "PyTorch (pip install torch: %s)" % TORCH_ERR
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "a CUDA GPU (torch.cuda.is_available() is false here)"
    if triton is None:
        return "Triton for its copy kernel (pip install triton: %s)" % TRITON_ERR
    return ""


class Probe:
    """The GEMM loop and the copier on one GPU, and the sweep over (priority, shape, N, rate)."""
    def __init__(self, a, t_start):
        self.a, self.t_start = a, t_start
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.name = torch.cuda.get_device_name()
        self.chunk = a.chunk_kib * 1024
        self.src = torch.ones((a.buffer_mib << 20) // 4, dtype=torch.int32, device="cuda")
        self.dst = torch.empty_like(self.src)
        self.n_chunks_buf = (a.buffer_mib << 20) // self.chunk
        self.stop = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.stats = torch.zeros(4 * max(a.cta_list), dtype=torch.int64, device="cuda")
        self.gemm_stream = torch.cuda.Stream()
        self.copy_streams = {"normal": torch.cuda.Stream(priority=0), "high": torch.cuda.Stream(priority=-1)}
        self.copier_alone = {}
        self.sleep_s = 0.01  # the GPU's wait before each loop while the host queues it (gemm_loop)
        try:
            torch.cuda.clock_rate()
            self.clock = torch.cuda.clock_rate
        except Exception:  # no pynvml: the clock columns stay empty
            self.clock = lambda: ""

    def enqueue_copier(self, stream, ctas, rate, window_ms):
        """Copier launches covering window_ms on stream: one of window_ms, or one a --collective-ms."""
        step = chunk_step_ns(rate, self.chunk)
        each = self.a.collective_ms or window_ms
        self.copier_span_ms = math.ceil(window_ms / each) * each
        with torch.cuda.stream(stream):
            for _ in range(math.ceil(window_ms / each)):
                paced_copy[(ctas,)](self.src, self.dst, self.stop, self.stats, self.n_chunks_buf, step or 0,
                                    int(min(each * 1e6, 2e9)), CHUNK=self.chunk // 4, BLOCK=BLOCK,
                                    COPY=step is not None, num_warps=THREADS // 32)

    def reset(self, ctas):
        self.stop.zero_()
        self.stats.view(-1, 4)[:, 0] = 2 ** 62
        self.stats.view(-1, 4)[:, 1:] = 0
        torch.cuda.synchronize()

    def copier_result(self, ctas):
        """(GB/s copied over the copier's window, the window in ms, distinct SMs of the last launch's CTAs)."""
        s = self.stats[:4 * ctas].view(ctas, 4).cpu().tolist()
        start, end = min(r[0] for r in s), max(r[1] for r in s)
        return sum(r[2] for r in s) * self.chunk / max(end - start, 1), (end - start) / 1e6, len({r[3] for r in s})

    def set_shape(self, shape):
        m, n, k = shape
        self.mats = (torch.randn(m, k, dtype=torch.bfloat16, device="cuda"),
                     torch.randn(k, n, dtype=torch.bfloat16, device="cuda"),
                     torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        self.reps, self.loop_ms = 3, 0.0
        for _ in range(2):
            ms = self.gemm_loop(None)[0]
        self.reps = max(2, round(self.a.gemm_ms / (ms / self.reps)))
        for _ in range(10):  # ~10 loops (200 ms) at the shape first: the clocks settle under its power
            self.loop_ms = self.gemm_loop(None)[0]

    def kernel_notes(self):
        """After the timings (a profiler attached before them could slow them): the copier's and each GEMM's
        kernel attributes, one line each."""
        self.reset(1)
        notes = self.kernels("copier", lambda: self.enqueue_copier(self.copy_streams["normal"], 1, MAX, 1))
        for m, n, k in self.a.shape_list:
            x, w = torch.randn(m, k, dtype=torch.bfloat16, device="cuda"), torch.randn(k, n, dtype=torch.bfloat16,
                                                                                      device="cuda")
            notes += self.kernels("GEMM %dx%dx%d" % (m, n, k), lambda: torch.mm(x, w))
        return notes

    def kernels(self, label, launch):
        """kernel_attrs of what launch() runs, from a torch.profiler trace (a line saying so if it fails)."""
        from torch.profiler import profile, ProfilerActivity
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                launch()
                torch.cuda.synchronize()
            with tempfile.TemporaryDirectory() as d:
                prof.export_chrome_trace(os.path.join(d, "trace.json"))
                with open(os.path.join(d, "trace.json")) as f:
                    return kernel_attrs(label, json.load(f).get("traceEvents", []))
        except Exception as e:  # a profiler without CUPTI, a trace of another shape
            return ["%s: kernel attributes unavailable (%s)" % (label, str(e)[:100])]

    def gemm_loop(self, copier):
        """ms of self.reps GEMMs on the GEMM stream, alone (copier None) or beside (priority, ctas, rate), and
        the SM clock sampled halfway. Both streams wait behind a sleep kernel until every launch is queued, so the
        host (slow while dev/gpu_check.sh's build loads the CPUs) never leaves a gap in the loop; the sleep doubles
        and the loop runs again if the GPU reached the loop's start first."""
        x, w, y = self.mats
        while True:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            go = torch.cuda.Event()
            if copier:
                prio, ctas, rate = copier
                self.reset(ctas)  # it synchronizes: before the sleep
            with torch.cuda.stream(self.gemm_stream):
                torch.cuda._sleep(int(self.sleep_s * 2e9))  # cycles: at most 2 GHz
                go.record()
            if copier:
                self.copy_streams[prio].wait_event(go)
                self.enqueue_copier(self.copy_streams[prio], ctas, rate, 3 * self.loop_ms + 20)
            with torch.cuda.stream(self.gemm_stream):
                start.record()
                for _ in range(self.reps):
                    torch.mm(x, w, out=y)
                end.record()
                self.stop.fill_(1)
            queued = not start.query()
            time.sleep(self.sleep_s + self.loop_ms / 2e3)
            clock = self.clock()
            torch.cuda.synchronize()
            if queued:
                return start.elapsed_time(end), clock
            self.sleep_s *= 2
            if self.sleep_s > 1:
                sys.exit("error: the host could not queue %d GEMMs ahead of the GPU" % self.reps)

    def copier_rate_alone(self, ctas, rate):
        """Median GB/s of the copier alone over a 10 ms window (no stop flag), cached per (N, rate)."""
        if (ctas, rate) not in self.copier_alone:
            gbs = []
            for _ in range(3):
                self.reset(ctas)
                with torch.cuda.stream(self.copy_streams["normal"]):  # the relaunches queued before the first ends
                    torch.cuda._sleep(int(self.sleep_s * 2e9))
                self.enqueue_copier(self.copy_streams["normal"], ctas, rate, 10)
                torch.cuda.synchronize()
                gbs.append(self.copier_result(ctas)[0])
            self.copier_alone[(ctas, rate)] = statistics.median(gbs)
        return self.copier_alone[(ctas, rate)]

    def point(self, prio, shape, ctas, rate):
        """One row: --repeats alternating alone / beside loops, medians."""
        alone, beside, inter, gbs, window, nsm, clk_a, clk_b = [], [], [], [], [], [], [], []
        timeouts = 0  # the copier ran its whole span: the GEMMs outlasted it (e.g. their CTAs waited for its SMs)
        for _ in range(self.a.repeats):
            t_a, c_a = self.gemm_loop(None)
            t_b, c_b = self.gemm_loop((prio, ctas, rate))
            g, win, n = self.copier_result(ctas)
            timeouts += win >= 0.98 * self.copier_span_ms
            alone.append(t_a), beside.append(t_b), inter.append((t_b - t_a) / t_b), gbs.append(g)
            window.append(win / t_b), nsm.append(n), clk_a.append(c_a), clk_b.append(c_b)
        med = statistics.median
        m, n, k = shape
        i, g_b, g_a = med(inter), med(gbs), self.copier_rate_alone(ctas, rate)
        clock = lambda c: med(c) if all(isinstance(v, (int, float)) for v in c) else ""  # noqa: E731
        return dict(device=self.name, sms=self.sms, shape="%dx%dx%d" % shape, priority=prio, ctas=ctas,
                    rate_target_gbs=rate if isinstance(rate, str) else "%g" % rate,
                    collective_ms=self.a.collective_ms, chunk_kib=self.a.chunk_kib, repeats=self.a.repeats,
                    gemm_ms_alone=med(alone), gemm_ms_beside=med(beside),
                    gemm_tflops_alone=2.0 * m * n * k * self.reps / med(alone) / 1e9, copier_gbs_alone=g_a,
                    copier_gbs_beside=g_b, copier_sms=min(nsm), copier_window_ratio=med(window),
                    copier_timeouts=timeouts, interference=i,
                    interference_min=min(inter), interference_max=max(inter),
                    interference_planner=i * g_a / g_b if g_b > 0 else i, extra_s_per_gb=i / g_b if g_b else "",
                    sm_share=ctas / self.sms, waves_pred=wave_interference(m, n, k, self.sms, ctas, self.a.k_half),
                    sm_clock_mhz_alone=clock(clk_a), sm_clock_mhz_beside=clock(clk_b))

    def sweep(self, sink):
        for copy in (False, True):  # Triton's compiles, before anything is timed
            self.reset(1)
            self.enqueue_copier(self.copy_streams["normal"], 1, MAX if copy else HOLD, 1)
        torch.cuda.synchronize()
        points, shape = plan(self.a), None
        for done, (prio, s, ctas, rate) in enumerate(points):
            if s != shape:
                shape = s
                self.set_shape(s)
            cost = (self.a.repeats * (3 * self.loop_ms + 30 + 2e3 * self.sleep_s) / 1e3
                    + 0.1 * ((ctas, rate) not in self.copier_alone))
            if time.monotonic() - self.t_start + cost + 5 > self.a.budget:  # 5 s for kernel_notes
                print("budget: %.0f s spent, stopped after %d of %d points" % (time.monotonic() - self.t_start, done,
                                                                             len(points)), flush=True)
                return
            row = self.point(prio, s, ctas, rate)
            sink.write(row)
            out = row["copier_timeouts"]
            print("%s %s N %d rate %s: GEMMs %.2f ms alone, %.2f beside, interference %.3f, copier %.0f GB/s "
                  "(alone %.0f)%s" % (prio, row["shape"], ctas, row["rate_target_gbs"], row["gemm_ms_alone"],
                                      row["gemm_ms_beside"], row["interference"], row["copier_gbs_beside"],
                                      row["copier_gbs_alone"], ", copier ran out %d times" % out if out else ""),
                  flush=True)


def main():
    a = parse_args()
    t_start = time.monotonic()
    if not a.dry_run:
        missing = missing_requirements()
        if missing:
            sys.exit("error: dev/interference_probe.py needs %s; --dry-run checks it without" % missing)
    try:
        sink = CsvOut(a.out)
    except OSError as e:
        sys.exit("error: cannot write --out %s: %s" % (a.out, e.strerror))
    if a.dry_run:
        dry_rows(a, sink)
        print("dry run: %d points planned; pacing checked on the host model, the fit gives back the synthetic "
              "a = N/SMs and b; rows are synthetic, not measured" % len(sink.rows))
        notes = []
    else:
        probe = Probe(a, t_start)
        probe.sweep(sink)
        notes = probe.kernel_notes()
    sink.close()
    lines = ["dev/interference_probe.py: %s" % ("--dry-run" if a.dry_run else "torch %s, triton %s, %s" % (
        torch.__version__, triton.__version__, " ".join(sys.argv[1:]) or "defaults"))]
    lines += notes + (summarize(sink.rows) if sink.rows else ["no points measured (budget %g s)" % a.budget])
    root, ext = os.path.splitext(a.out)
    summary = root + ".txt" if ext != ".txt" else a.out + ".summary.txt"
    with open(summary, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("wrote %s and %s (%.0f s)" % (a.out, summary, time.monotonic() - t_start))
    return 0 if sink.rows else 1


if __name__ == "__main__":
    sys.exit(main())
