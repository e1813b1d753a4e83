#!/usr/bin/env python3
"""dev/fsdp_profile.py: where a PyTorch FSDP step's time goes at llm-foundry's MPT-7B shape (issue 35).

The planner predicts llm-foundry's FSDP runs without activation recomputation 4-10 MFU points off on both
A100 and H100 (dev/PLANNER.md, "Why FSDP runs without recomputation look slower"): either the collectives
that FSDP overlaps with compute cost nearly their full time, or the matmuls run at another rate than the
planner's, or both. This measures the three on a lent GPU node, every GPU in one FSDP group:

  1. gemm      the layer's matmuls (qkv, attention projection, fc1, fc2 and their two backward GEMMs) at
               tokens = micro-batch x seq, bf16, alone on the card: TFLOP/s and fraction of --peak-tflops.
  2. overlap   the same matmuls while a second stream all-gathers one layer's bf16 weights over the group
               without pause (FSDP's prefetch): the matmuls' extra time per second of all-gather beside them,
               the planner's comm_interference (planner/device.h); and the all-gather's bus bandwidth alone.
  3. step      one micro-batch's forward + backward under FSDP1 (FULL_SHARD, each block its own unit, bf16
               parameters, reduce dtype --reduce, --prefetch BACKWARD_PRE / BACKWARD_POST, forward prefetch
               and the rate limiter as flags; no optimizer step: the per-micro-batch cost is what is asked),
               under torch.profiler: wall; time compute kernels run; time only NCCL runs (exposed
               communication); time nothing runs (host-bound gaps: hooks, the rate limiter's waits); the
               GEMM kernels' summed time and rate, the attention kernels' and the rest's (elementwise, norms,
               casts, FSDP's copies: what the H100 rows may lose beyond GEMMs).
Then over the micro-batch sizes the line step = a x mb + c: c is the fixed cost per micro-batch
(llm-foundry's own sweep: c = 0.212 s for MPT-7B on 8 A100-80GB, where the planner says 0.060 s).

With --gemm-only it runs 1 alone on one GPU without torch.distributed (dev/gpu_check.sh runs it while the build
loads the CPUs: the matmuls are queued behind a sleep kernel, so the host's launches stay out of the timed span),
then 8192^3 for --clock-s seconds beside nvidia-smi's SM clock and power: the first second's rate and the
sustained one (a power limit shows as the second below the first); rows in fsdp_gemm.csv and a "summary
matmul_eff" line. --dry-run runs that on the CPU at shapes / 64 (no GPU; rows labelled NOT measured).
With --overlap-only it runs 1 and 2 alone (no FSDP model: ~30 s). Run under NCCL_MAX_CTAS=N (NCCL 2.17+;
NCCL_MAX_NCHANNELS before) the all-gather gets N channels, one CTA (SM) each, and their rate: what a ring
across nodes holds (published NCCL_DEBUG logs: 24 channels for 8 A100s / H100s of a node, 16 through the
NICs, 2-8 on a 4-NIC p4d node) at NVLink's rate per channel. The interference at the default and at 8 / 4 / 2
says whether a hidden collective's cost follows its SMs (dev/PLANNER.md, "NCCL's interference: the paper's
setup ..."); the limit is written to the CSV's nccl_max_ctas column.

    python3 dev/fsdp_profile.py [--mb 1,2,4] [--layers N] [--prefetch pre|post] [--reduce bf16|fp32]
                                [--limit-all-gathers 0|1] [--forward-prefetch 0|1] [--overlap-only]
                                [--gemm-only [--clock-s 15] [--dry-run]] [--out FILE.csv]
    NCCL_MAX_CTAS=4 python3 dev/fsdp_profile.py --overlap-only --mb 2 --out ctas4.csv
It starts one process per visible GPU itself (or runs under torchrun). Rows go to --out (default
$OUT/fsdp_profile.csv when $OUT is set, else fsdp_profile.csv) and to stdout. About 2-4 minutes on 8 GPUs.
Needs PyTorch with CUDA and at least one GPU; says so in one line when either is missing.
"""
import argparse
import csv
import os
import sys
import time

# llm-foundry's MPT-7B (mcli/yamls, configuration_mpt.py): 32 blocks of d 4096, 32 heads, expansion 4 (GELU),
# vocabulary 50368 with tied embeddings, no biases, LayerNorm without bias, 2048 tokens
D_MODEL, N_HEAD, N_LAYER, EXPANSION, VOCAB, SEQ = 4096, 32, 32, 4, 50368, 2048
# dense bf16 TFLOP/s by the card's name, the first key it contains (datasheets: SXM 989 / 312; H100 PCIe 756, NVL 835)
PEAKS = {"H100 PCIe": 756, "H100 NVL": 835, "H100": 989, "H200": 989, "H800": 989, "A100": 312, "A800": 312}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", default="1,2,4", help="micro-batch sizes, comma-separated (default 1,2,4)")
    ap.add_argument("--layers", type=int, default=0, help="blocks (default: 32 on 4+ GPUs, else 8: 32 blocks of fp32 "
                    "weights and gradients need 4+ cards to shard)")
    ap.add_argument("--prefetch", choices=["pre", "post"], default="post",
                    help="backward prefetch (default post: Composer's default, the 8-GPU tables' setting)")
    ap.add_argument("--reduce", choices=["bf16", "fp32"], default="bf16", help="gradient reduce-scatter dtype")
    ap.add_argument("--limit-all-gathers", type=int, choices=[0, 1], default=1, help="FSDP1's rate limiter (default 1)")
    ap.add_argument("--forward-prefetch", type=int, choices=[0, 1], default=0, help="FSDP1's forward prefetch")
    ap.add_argument("--steps", type=int, default=3, help="profiled micro-batches per size (after 2 warm-up)")
    ap.add_argument("--overlap-only", action="store_true",
                    help="only the GEMM rate and the all-gather's interference (sections 1 and 2), no FSDP step")
    ap.add_argument("--gemm-only", action="store_true",
                    help="one GPU, no torch.distributed: section 1 at each --mb, then 8192^3 for --clock-s seconds "
                    "beside nvidia-smi's SM clock and power")
    ap.add_argument("--clock-s", type=float, default=15, help="--gemm-only: seconds of 8192^3 (default 15)")
    ap.add_argument("--dry-run", action="store_true",
                    help="--gemm-only's plumbing on the CPU, shapes / 64 (rows labelled NOT measured)")
    ap.add_argument("--peak-tflops", type=float, default=0, help="dense bf16 peak (default: from the GPU's name)")
    ap.add_argument("--out", default="", help="CSV of the results")
    a = ap.parse_args()
    try:
        a.mbs = [int(x) for x in a.mb.split(",")]
    except ValueError:
        ap.error("--mb: comma-separated integers, e.g. 1,2,4")
    if not a.mbs or min(a.mbs) < 1 or max(a.mbs) > 64 or a.steps < 1 or a.layers < 0:
        ap.error("--mb 1..64 and --steps must be positive, --layers not negative")
    if not 0 < a.clock_s <= 600 or a.peak_tflops < 0:
        ap.error("--clock-s 0..600, --peak-tflops not negative")
    if a.dry_run and not a.gemm_only:
        ap.error("--dry-run checks --gemm-only (the FSDP sections need GPUs)")
    return a


def layer_gemms(tokens, d=D_MODEL):
    """(M, N, K) of one block's matmuls, forward and backward (dgrad: M x K from M x N; wgrad: N x K over M)."""
    f = EXPANSION * d
    fwd = [(tokens, 3 * d, d), (tokens, d, d), (tokens, f, d), (tokens, d, f)]
    return fwd + [(m, k, n) for m, n, k in fwd] + [(n, k, m) for m, n, k in fwd]


def gemm_flops(tokens, n_layer):
    """FLOPs of the step's matmuls: the blocks' (24 T d^2 forward) and the tied head's, forward + backward."""
    return 3 * (n_layer * 24 * tokens * D_MODEL ** 2 + 2 * tokens * D_MODEL * VOCAB)


def union_us(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total, end = total + (e - s), e
        elif e > end:
            total, end = total + (e - end), e
    return total


def build_model(torch, n_layer):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = D_MODEL
            self.ln1, self.ln2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.fc1, self.fc2 = nn.Linear(d, EXPANSION * d, bias=False), nn.Linear(EXPANSION * d, d, bias=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, N_HEAD, d // N_HEAD).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Mpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, D_MODEL)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(D_MODEL, bias=False)

        def forward(self, idx, targets):
            x = self.wte(idx)
            for blk in self.blocks:
                x = blk(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)
            return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))

    return Mpt(), Block


def time_gemms(torch, shapes, reps, sleep_s=0.0):
    """Start and end events around reps passes over shapes' matmuls on the current stream. sleep_s > 0: all of them
    queued behind a sleep kernel of at least that long, so the host's launches stay out of the timed span (section 1
    runs while dev/gpu_check.sh's build loads every core); the events are None when the GPU reached the start before
    the last matmul was queued (the caller sleeps longer)."""
    mats = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(k, n, device="cuda",
             dtype=torch.bfloat16)) for m, n, k in shapes]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for a, b in mats:
        a @ b
    if sleep_s:
        torch.cuda._sleep(int(sleep_s * 2e9))  # cycles: at most 2 GHz
    start.record()
    for _ in range(reps):
        for a, b in mats:
            a @ b
    end.record()
    return (None, None) if sleep_s and start.query() else (start, end)


def gemm_alone_ms(torch, shapes, reps):
    """ms of reps passes over shapes' matmuls alone, queued ahead of the GPU (time_gemms' sleep, doubled until the
    queue stays ahead)."""
    sleep_s = 0.05
    while sleep_s < 10:
        s, e = time_gemms(torch, shapes, reps, sleep_s)
        torch.cuda.synchronize()
        if s is not None:
            return s.elapsed_time(e)
        sleep_s *= 2
    sys.exit("error: the host could not queue %d matmuls ahead of the GPU" % (reps * len(shapes)))


def gemm_and_overlap(torch, dist, mb, world, peak):
    """Section 1 and 2 for one micro-batch size: a dict of the row's gemm/overlap columns."""
    shapes, tokens = layer_gemms(mb * SEQ), mb * SEQ
    flops = sum(2 * m * n * k for m, n, k in shapes)
    reps = max(2, int(40 / mb))
    alone = gemm_alone_ms(torch, shapes, reps)
    row = {"gemm_tflops_alone": flops * reps / alone / 1e9, "tokens": tokens}
    row["gemm_frac_peak_alone"] = row["gemm_tflops_alone"] / peak if peak else float("nan")
    if world < 2:
        return row
    layer_params = 12 * D_MODEL ** 2
    shard = torch.empty(layer_params // world, device="cuda", dtype=torch.bfloat16)
    full = torch.empty(shard.numel() * world, device="cuda", dtype=torch.bfloat16)
    comm = torch.cuda.Stream()
    cs, ce = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def gathers(n):
        with torch.cuda.stream(comm):
            cs.record(comm)
            for _ in range(n):
                dist.all_gather_into_tensor(full, shard)
            ce.record(comm)
    gathers(2)
    torch.cuda.synchronize()
    gathers(10)
    torch.cuda.synchronize()
    per_gather = cs.elapsed_time(ce) / 10
    row["allgather_busbw_gbs"] = full.numel() * 2 * (world - 1) / world / per_gather / 1e6
    dist.barrier()
    torch.cuda.synchronize()
    gathers(int(1.5 * alone / per_gather) + 2)  # the gathers outlast the matmuls: every matmul has one beside it
    s, e = time_gemms(torch, shapes, reps)
    torch.cuda.synchronize()
    together = s.elapsed_time(e)
    row["gemm_tflops_beside_allgather"] = flops * reps / together / 1e9
    row["comm_interference"] = (together - alone) / together  # extra compute per second of collective beside it
    return row


def is_gemm(name):
    n = name.lower()
    return any(s in n for s in ("gemm", "xmma", "cutlass", "nvjet", "wgmma")) and "nccl" not in n


def profile_step(torch, model, mb, steps, n_layer):
    """Section 3: forward + backward of `steps` micro-batches under torch.profiler; per-micro-batch ms."""
    from torch.profiler import profile, ProfilerActivity
    idx, targets = (torch.randint(0, VOCAB, (mb, SEQ), device="cuda") for _ in range(2))

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, targets)
        loss.backward()
        model.zero_grad(set_to_none=True)
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:  # kernels only: recording host ops would slow hooks
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        wall_prof = (time.perf_counter() - t0) * 1e3 / steps
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    if not kernels:
        print("warning: the profiler recorded no kernels: the breakdown columns are empty", file=sys.stderr)
    spans = lambda ks: [(k.time_range.start, k.time_range.end) for k in ks]  # noqa: E731
    nccl = [k for k in kernels if "nccl" in k.name.lower()]
    compute = [k for k in kernels if "nccl" not in k.name.lower()]
    gemms = [k for k in compute if is_gemm(k.name)]
    attn = [k for k in compute if not is_gemm(k.name) and any(w in k.name.lower() for w in ("flash", "fmha", "attn"))]
    busy_all, busy_compute = union_us(spans(kernels)) / 1e3, union_us(spans(compute)) / 1e3
    kernel_ms = lambda ks: sum(k.time_range.end - k.time_range.start for k in ks) / 1e3 / steps  # noqa: E731
    gemm_ms, attn_ms = kernel_ms(gemms), kernel_ms(attn)
    return {"step_ms": wall, "step_ms_profiled": wall_prof, "compute_busy_ms": busy_compute / steps,
            "comm_only_ms": (busy_all - busy_compute) / steps,
            "idle_ms": wall_prof - busy_all / steps, "nccl_kernel_ms": union_us(spans(nccl)) / 1e3 / steps,
            "gemm_kernel_ms": gemm_ms, "attn_kernel_ms": attn_ms,
            "other_kernel_ms": kernel_ms(compute) - gemm_ms - attn_ms,
            "gemm_tflops_in_step": gemm_flops(mb * SEQ, n_layer) / gemm_ms / 1e9 if gemm_ms else float("nan")}


def wrap_fsdp(torch, a, n_layer):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy, \
        BackwardPrefetch
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    with torch.device("cuda"):
        model, block = build_model(torch, n_layer)
    red = torch.bfloat16 if a.reduce == "bf16" else torch.float32
    return FSDP(model, auto_wrap_policy=ModuleWrapPolicy({block}), sharding_strategy=ShardingStrategy.FULL_SHARD,
                mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=red,
                                               buffer_dtype=torch.bfloat16),
                backward_prefetch=getattr(BackwardPrefetch, "BACKWARD_" + a.prefetch.upper()),
                forward_prefetch=bool(a.forward_prefetch), limit_all_gathers=bool(a.limit_all_gathers),
                device_id=torch.cuda.current_device())


def report(rows, a, world, n_layer, name):
    cols = ["gpu", "gpus", "layers", "prefetch", "reduce", "limit_all_gathers", "nccl_max_ctas", "mb", "tokens",
            "step_ms",
            "step_ms_profiled", "compute_busy_ms", "comm_only_ms", "idle_ms", "nccl_kernel_ms", "gemm_kernel_ms",
            "attn_kernel_ms", "other_kernel_ms", "gemm_tflops_in_step", "gemm_tflops_alone", "gemm_frac_peak_alone",
            "gemm_tflops_beside_allgather", "comm_interference", "allgather_busbw_gbs"]
    out = a.out or os.path.join(os.environ.get("OUT", "."), "fsdp_profile.csv")
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r.update(gpu=name, gpus=world, layers=n_layer, prefetch=a.prefetch, reduce=a.reduce,
                     limit_all_gathers=a.limit_all_gathers, nccl_max_ctas=max_ctas())
            w.writerow({k: ("%.4g" % v if isinstance(v, float) else v) for k, v in r.items() if k in cols})
    for r in rows:
        print("  ".join("%s %s" % (k, ("%.4g" % r[k]) if isinstance(r.get(k), float) else r.get(k, "-"))
                        for k in cols[7:] if k in r))
    if len(rows) >= 2 and "step_ms" in rows[0]:  # least squares step = a mb + c
        xs, ys = [r["mb"] for r in rows], [r["step_ms"] for r in rows]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        print("step = %.1f ms x mb + %.1f ms (fixed cost per micro-batch; llm-foundry's sweep: 7B on 8 A100-80GB "
              "400 x mb + 212)" % (slope, my - slope * mx))
    print("wrote %s" % out)


def max_ctas():
    """The channel limit NCCL was started under (NCCL_MAX_CTAS, or the older NCCL_MAX_NCHANNELS), else default."""
    return os.environ.get("NCCL_MAX_CTAS") or os.environ.get("NCCL_MAX_NCHANNELS") or "default"


def sample_clocks():
    """nvidia-smi sampling the SM clock (MHz) and board power (W) every 100 ms into a pipe; None without it."""
    import subprocess
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                 "-i", "0", "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
    except OSError:
        return None


def clock_medians(sampler):
    """(median SM clock MHz, median power W) of what sampler read; ('', '') without samples."""
    import statistics
    if sampler is None:
        return "", ""
    sampler.terminate()
    pairs = []
    for line in sampler.communicate()[0].splitlines():
        try:
            pairs.append(tuple(float(x) for x in line.split(",")))
        except ValueError:
            continue
    pairs = [p for p in pairs if len(p) == 2]
    if not pairs:
        return "", ""
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def sustained_ms(torch, shape, seconds, dry):
    """8192^3 back to back for about `seconds`: (ms a call over the first second, ms a call over the rest). Batches
    of calls between events, the next batch queued before the host waits on the last, so the GPU never waits."""
    m, n, k = shape
    dev = "cpu" if dry else "cuda"
    x, w = (torch.randn(r, c, device=dev, dtype=torch.bfloat16) for r, c in ((m, k), (k, n)))
    x @ w
    if dry:
        t0, calls = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            x @ w
            calls += 1
        ms = (time.perf_counter() - t0) * 1e3 / calls
        return ms, ms
    batch, spans = 20, []
    torch.cuda.synchronize()
    torch.cuda._sleep(int(0.05 * 2e9))
    prev = torch.cuda.Event(enable_timing=True)
    prev.record()
    t0, pending = time.perf_counter(), []
    while time.perf_counter() - t0 < seconds or pending:
        if time.perf_counter() - t0 < seconds:
            for _ in range(batch):
                x @ w
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            pending.append((prev, end))
            prev = end
        if len(pending) > 1 or time.perf_counter() - t0 >= seconds:
            a, b = pending.pop(0)
            b.synchronize()
            spans.append(a.elapsed_time(b) / batch)
    first = max(1, int(1000 / spans[0]) // batch)  # the batches of the first second
    rest = spans[first:] or spans[-1:]
    return sum(spans[:first]) / len(spans[:first]), sum(rest) / len(rest)


def shape_eff(m, n, k, sms, k_half=128):
    """planner/time.h matmul_shape_eff: the waves of 128 x 128 tiles on sms SMs (split-K up to 4), K / (K + k_half)
    of the main loop (device.h matmul_k_half, 128 on the H100 / H200): the planner prices a GEMM at
    peak x matmul_eff x this, so a measured rate over it is the matmul_eff it implies."""
    best = 0.0
    for split in range(1, 5):
        tiles = -(-m // 128) * -(-n // 128) * split
        fill = m * n * split / 128 ** 2 / (-(-tiles // sms) * sms)
        best = max(best, fill * (k / split) / (k / split + k_half))
    return best


def gemm_only(a):
    """--gemm-only: section 1 at each --mb on GPU 0, no torch.distributed, then 8192^3 for --clock-s seconds beside
    nvidia-smi's SM clock and power: the framework GEMM rate the planner's matmul_eff reads (dev/PLANNER.md, "What
    the lent GPU's probes feed"). --dry-run: the same on the CPU at shapes / 64, every row labelled."""
    import torch
    if a.dry_run:
        name, peak, scale, sms = "dry-run: the CPU, NOT measured", a.peak_tflops or 989, 64, 132
    else:
        name, sms = torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count
        peak, scale = a.peak_tflops or next((v for k, v in PEAKS.items() if k in name), 0), 1
    out = a.out or os.path.join(os.environ.get("OUT", "."), "fsdp_gemm.csv")
    cols = ["gpu", "peak_tflops", "what", "m_n_k", "tokens", "ms", "tflops", "frac_peak", "matmul_eff", "sm_clock_mhz",
            "power_w"]
    rows, t0 = [], time.perf_counter()
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()

        def put(row):
            row.update(gpu=name, peak_tflops=peak, frac_peak=row["tflops"] / peak if peak else "",
                       matmul_eff=row["tflops"] / row.pop("shape_tflops") if peak else "")
            w.writerow({c: ("%.4g" % v if isinstance(v, float) else v) for c, v in row.items()})
            f.flush()
            rows.append(row)
            print("  ".join("%s %s" % (c, ("%.4g" % row[c]) if isinstance(row[c], float) else row[c])
                            for c in cols[2:]), flush=True)
        for mb in a.mbs:  # MPT-7B's layer: qkv, projection, fc1, fc2 and their dgrad / wgrad GEMMs
            tokens = mb * SEQ // scale
            shapes = layer_gemms(tokens, D_MODEL // scale)
            flops = sum(2.0 * m * n * k for m, n, k in shapes)
            reps = max(2, int(40 / mb))
            if a.dry_run:
                mats = [(torch.randn(m, k), torch.randn(k, n)) for m, n, k in shapes]
                t1 = time.perf_counter()
                for _ in range(reps):
                    for x, y in mats:
                        x @ y
                ms = (time.perf_counter() - t1) * 1e3
            else:
                ms = gemm_alone_ms(torch, shapes, reps)
            # the planner's time for these GEMMs at matmul_eff 1: each at peak x its shape term
            shape_ms = sum(2.0 * m * n * k / (peak * 1e9 * shape_eff(m, n, k, sms)) for m, n, k in shapes) if peak \
                else 0
            put(dict(what="mpt-7b layer, mb %d" % mb, m_n_k="12 GEMMs, d %d" % (D_MODEL // scale), tokens=tokens,
                     ms=ms / reps, tflops=flops * reps / ms / 1e9, shape_tflops=flops / shape_ms / 1e9 if peak else 0,
                     sm_clock_mhz="", power_w=""))
        n = 8192 // scale
        sampler = None if a.dry_run else sample_clocks()
        first, rest = sustained_ms(torch, (n, n, n), a.clock_s, a.dry_run)
        clock, power = clock_medians(sampler)
        for what, ms in (("%d^3, first second" % n, first), ("%d^3, the rest of %g s" % (n, a.clock_s), rest)):
            put(dict(what=what, m_n_k="%dx%dx%d" % (n, n, n), tokens=n, ms=ms, tflops=2.0 * n ** 3 / ms / 1e9,
                     shape_tflops=peak * shape_eff(n, n, n, sms),
                     sm_clock_mhz=clock if "rest" in what else "", power_w=power if "rest" in what else ""))
    fr = lambda r: "%.3f (%.3f)" % (r["frac_peak"], r["matmul_eff"]) if peak else "-"  # noqa: E731
    layer = [r for r in rows if r["what"].startswith("mpt")]
    print("summary matmul_eff, as fraction of the card's peak (over planner/time.h's shape term: the matmul_eff it "
          "implies): MPT-7B's layer GEMMs at mb %s x %d tokens %s; %d^3 %s in the first second, %s sustained, SM "
          "clock %s MHz, %s W (peak %g from the name '%s', %d SMs)" % (
              "/".join(str(m) for m in a.mbs), SEQ // scale, " / ".join(fr(r) for r in layer), n, fr(rows[-2]),
              fr(rows[-1]), rows[-1]["sm_clock_mhz"] or "-", rows[-1]["power_w"] or "-", peak, name, sms), flush=True)
    print("wrote %s (%.0f s)" % (out, time.perf_counter() - t0))


def worker(rank, world, a):
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world)
    name = torch.cuda.get_device_name()
    peak = a.peak_tflops or next((v for k, v in PEAKS.items() if k in name), 0)
    n_layer = a.layers or (N_LAYER if world >= 4 else 8)
    model = None if a.overlap_only else wrap_fsdp(torch, a, n_layer)
    rows = []
    for mb in a.mbs:
        row = dict(mb=mb)
        row.update(gemm_and_overlap(torch, dist, mb, world, peak))
        if model is not None:
            row.update(profile_step(torch, model, mb, a.steps, n_layer))
        rows.append(row)
        if rank == 0 and model is not None:
            print("mb %d done: %.1f ms a micro-batch" % (mb, row["step_ms"]), flush=True)
    if rank == 0:
        report(rows, a, world, n_layer, name)
    dist.destroy_process_group()


def main():
    a = parse_args()
    if a.dry_run:
        try:
            import torch  # noqa: F401
        except ImportError:
            sys.exit("error: dev/fsdp_profile.py --dry-run needs PyTorch (pip install torch)")
        return gemm_only(a)
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        sys.exit("error: dev/fsdp_profile.py needs PyTorch with CUDA (pip install torch)")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        sys.exit("error: dev/fsdp_profile.py needs a GPU (torch.cuda.is_available() is false here)")
    if a.gemm_only:
        return gemm_only(a)
    if "RANK" in os.environ:  # under torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), a)
    else:
        import torch.multiprocessing as mp
        n = torch.cuda.device_count()
        mp.spawn(worker, args=(n, a), nprocs=n, join=True)


if __name__ == "__main__":
    main()
