#!/usr/bin/env python3
"""dev/bench_torch.py: what a user would run instead, timed on the same card (dev/gpu_check.sh).

  sdpa  the fused attention a framework runs, forward and backward, each back-end forced alone: PyTorch SDPA's
        cuDNN and FlashAttention-2 back-ends, and FlashAttention-3 when `flash_attn_interface` imports (a line
        says so when not); the CUDA kernels each ran are listed once (torch.profiler), with torch's and cuDNN's
        versions. Shapes in this order (a run cut off keeps the first): head dim 128 causal, 1k-16k tokens, then
        without the mask, head dim 192 both ways (2k-16k), then test_gpu --att-sweep's head dim 64 and its
        grouped-query heads (4:1 at 4k); 16k tokens a batch (B x T), hidden 2048, random data. Each pass the
        median of 20 calls queued behind a sleep kernel (CUDA events between calls: the host's launches stay
        out of the timed calls, so a loaded CPU cannot stretch them). Rows in the sweep's CSV format
        (device,pass,hd,B,T,H,KV,tile,ms,tflops_causal; pass forward / backward, -nomask without the mask;
        tile sdpa-cudnn / sdpa-flash / fa3), FLOPs counted as the sweep does (FlashAttention-2's: 4 B H T^2 hd,
        halved under the causal mask, the backward 2.5 times that); then "summary attention" lines: each pass's
        fraction of the card's peak by length, and the causal backward over its tiles against the backward
        without the mask (dev/PLANNER.md, "What the lent GPU's probes feed").
  gpt2  one GPT-2 124M training step (the trainer's model: pre-LayerNorm blocks, GELU (tanh),
        tied embeddings, vocabulary padded to 50304), bf16 autocast, fused AdamW, torch.compile,
        at micro-batch B x T (default 32 x 1024, as dev/bench_gpu.sh runs the trainer): the
        median ms/step of 10 steps after 3 warm-up steps, tokens/s, and MFU by the trainer's
        PaLM count (6N + 12 L d T per token; metrics.h) against the card's peak (--peak-tflops).

  --dry: tiny shapes on the CPU (or whatever device there is), to check the plumbing where
         there is no GPU; the times mean nothing.
Needs PyTorch (pip install torch); says so in one line when it is missing.
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("error: dev/bench_torch.py needs PyTorch (pip install torch)")
    sys.exit(1)


def card_peak(name):
    """Dense bf16 TFLOP/s of a card from its name (the SXM datasheets; PCIe and NVL parts run lower clocks), 0 if
    unknown."""
    for key, peak in (("H100 PCIe", 756), ("H100 NVL", 835), ("H100", 989), ("H200", 989), ("H800", 989),
                      ("A100", 312), ("A800", 312)):
        if key in name:
            return peak
    return 0


def timed(fn, reps, device):
    """Median ms of one call of fn over reps calls (one warm-up call first). On a GPU the calls are queued back to
    back behind a sleep kernel, with an event between each two, so the host's launches (slow while the build loads
    every core) never leave the GPU idle inside a timed call; if the GPU reaches the first event before the last
    call is queued, the sleep doubles and the calls run again."""
    fn()
    if device.type != "cuda":
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    # long enough to queue reps calls at the lesser of one call's wall time (the GPU's included) and 5 ms each; the
    # check below doubles it when it was not
    sleep_s = 0.05 + reps * min(time.perf_counter() - t0, 0.005)
    for _ in range(4):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
        torch.cuda._sleep(int(sleep_s * 2e9))  # cycles: at most 2 GHz, so at least sleep_s long
        events[0].record()
        for e in events[1:]:
            fn()
            e.record()
        queued = not events[0].query()
        torch.cuda.synchronize()
        if queued:
            return statistics.median(a.elapsed_time(b) for a, b in zip(events, events[1:]))
        sleep_s *= 2
    sys.exit("error: the host could not queue %d calls ahead of the GPU (sleep %.2f s)" % (reps, sleep_s))


def sdpa_shapes(dry):
    """(B, T, H, KV, hd, causal) in the order the planner needs them (a stage cut off keeps the first): head dim
    128 causal, then without the mask (the figures' backward), 192, then the sweep's 64 and its grouped-query
    heads. 16k tokens a batch (B x T), hidden 2048 (16 heads of 128, 32 of 64; 10 of 192), as the FA2 / FA3
    papers' benchmarks and test_gpu --att-sweep run them."""
    tokens, hidden, lengths = (256, 512, (128, 256)) if dry else (16384, 2048, (1024, 2048, 4096, 8192, 16384))
    for hd, causal, ts in ((128, True, lengths), (128, False, lengths), (192, True, lengths[1:]),
                           (192, False, lengths[1:]), (64, True, lengths)):
        for T in ts:
            yield tokens // T, T, hidden // hd, hidden // hd, hd, causal
    T = 128 if dry else 4096
    for hd in (64, 128):
        yield tokens // T, T, hidden // hd, hidden // hd // 4, hd, True


def attention_backends(dry):
    """{name: (forward(q, k, v, causal) on (B, H, T, hd) tensors, context manager)}: SDPA with one back-end
    enabled (it fails rather than fall back, so a row is the back-end it names), and FlashAttention-3 when its
    package imports (it takes (B, T, H, hd))."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION}
    if dry:
        sdpa["sdpa-math"] = SDPBackend.MATH
    out = {}
    for name, backend in sdpa.items():
        def fwd(q, k, v, causal, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
        out[name] = fwd
    try:
        import flash_attn_interface  # FlashAttention-3 (Dao-AILab/flash-attention hopper/)
    except Exception as e:
        print(f"note: fa3: flash_attn_interface does not import ({type(e).__name__}: {str(e)[:80]}): "
              "FlashAttention-3 not timed", flush=True)
    else:
        def fa3(q, k, v, causal):
            r = flash_attn_interface.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal)
            return (r[0] if isinstance(r, tuple) else r).transpose(1, 2)
        out["fa3"] = fa3
    return out


def kernel_names(fwd, q, k, v, dout, causal):
    """The CUDA kernels one forward and one backward launch (torch.profiler): what a back-end really ran; a line
    saying why instead if the profiler fails (no CUPTI)."""
    from torch.profiler import profile, ProfilerActivity
    names = []
    for backward in (False, True):
        o = fwd(q, k, v, causal)
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.autograd.grad(o, (q, k, v), dout) if backward else fwd(q, k, v, causal)
                torch.cuda.synchronize()
            kernels = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
        except Exception as e:  # a profiler without CUPTI: the timings stand, the names are unknown
            return ["not listed (torch.profiler: %s: %s)" % (type(e).__name__, str(e)[:80])] * 2
        names.append(", ".join(sorted(n[:70] for n in kernels)) or "none recorded")
    return names


def tile_eff(T, causal):
    """The causal mask's share of 128 x 128 tiles a kernel computes over the FLOPs counted (planner/time.h
    flash_shape_eff): nt / (nt + 1) of nt = T / 128 tiles a row; 1 without the mask."""
    nt = T / 128
    return nt / (nt + 1) if causal else 1.0


def length_list(ts):
    return "/".join("%dk" % (t // 1024) if t >= 1024 else str(t) for t in ts)


def sdpa_summary(rows, peak, name):
    """Lines a planner constant reads (dev/PLANNER.md, "What the lent GPU's probes feed"): per back-end and head
    dim, each pass's fraction of the card's peak by length, the forward's over the mask's tiles (device.h
    fused_fwd's form), and the causal backward's loss beyond the mask (causal over its tiles / no mask)."""
    out = []
    for tile, hd in dict.fromkeys((r["tile"], r["hd"]) for r in rows if r["KV"] == r["H"]):
        sel = {(r["pass"], r["T"]): r["tflops"] for r in rows if (r["tile"], r["hd"]) == (tile, hd)
               and r["KV"] == r["H"]}
        ts = sorted({t for _, t in sel})
        cell = lambda p, t: "%.3f" % (sel[p, t] / peak) if (p, t) in sel else "-"  # noqa: E731
        for mask, f, b in (("causal", "forward", "backward"), ("no mask", "forward-nomask", "backward-nomask")):
            if any(p in (f, b) for p, _ in sel):
                out.append(f"summary attention {tile} hd {hd} {mask} fwd/bwd at {length_list(ts)}: "
                           + " ".join(f"{cell(f, t)}/{cell(b, t)}" for t in ts) + f" of peak ({peak:g}, {name})")
        points = [t for t in ts if all((p, t) in sel for p in ("forward", "backward", "backward-nomask"))]
        if not points:
            continue
        over = " ".join("%.3f/%.3f" % (sel["forward", t] / tile_eff(t, True) / peak,
                                       sel["backward", t] / tile_eff(t, True) / sel["backward-nomask", t])
                        for t in points)
        out.append(f"summary attention {tile} hd {hd} causal fwd over its tiles of peak / causal bwd over its tiles "
                   f"/ bwd without mask, at {length_list(points)}: {over}")
    return out


def bench_sdpa(args, device, out):
    reps = 2 if args.dry else 20
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops or card_peak(name) or 989.0
    print(f"note: sdpa: torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {name}, peak {peak:g} "
          f"TFLOP/s bf16{'' if args.peak_tflops or card_peak(name) else ' (unknown card: 989 assumed)'}", flush=True)
    backends, rows, listed, unavailable = attention_backends(args.dry), [], set(), {}
    dt = torch.bfloat16
    for B, T, H, KV, hd, causal in sdpa_shapes(args.dry):
        q = torch.randn(B, H, T, hd, device=device, dtype=dt, requires_grad=True)
        k = torch.randn(B, KV, T, hd, device=device, dtype=dt, requires_grad=True)
        v = torch.randn(B, KV, T, hd, device=device, dtype=dt, requires_grad=True)
        dout = torch.randn(B, H, T, hd, device=device, dtype=dt)
        flop = 4.0 * B * H * T * T * hd / (2 if causal else 1)  # FA2's count: the causal half under the mask
        suffix = "" if causal else "-nomask"
        for tile, fwd in backends.items():
            try:
                o = fwd(q, k, v, causal)
                ms_f = timed(lambda: fwd(q, k, v, causal), reps, device)
                ms_b = timed(lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True), reps, device)
                if device.type == "cuda" and tile not in listed:
                    listed.add(tile)
                    for pas, kernels in zip(("forward", "backward"), kernel_names(fwd, q, k, v, dout, causal)):
                        print(f"note: {tile} {pas} runs the kernels {kernels}", flush=True)
            except Exception as e:  # this back-end does not take this shape / device (FA3 asserts, SDPA raises)
                why = type(e).__name__ + (": " + str(e).splitlines()[0][:80] if str(e) else "")
                print(f"sdpa {tile:10s} B={B} T={T} H={H} KV={KV} hd={hd} causal={int(causal)}: unavailable ({why})",
                      flush=True)
                unavailable.setdefault(tile, []).append(f"T={T} hd={hd} KV={KV} causal={int(causal)}: {why}")
                continue
            for pas, ms, f in (("forward" + suffix, ms_f, flop), ("backward" + suffix, ms_b, 2.5 * flop)):
                tflops = f / ms / 1e9
                rows.append(dict(tile=tile, hd=hd, T=T, H=H, KV=KV, tflops=tflops, **{"pass": pas}))
                print(f"sdpa {pas:16s} B={B:<3d} T={T:<5d} H={H:<2d} KV={KV:<2d} hd={hd:<3d} {tile:10s} "
                      f"{ms:9.3f} ms {tflops:7.1f} TFLOP/s {tflops / peak:.3f} of peak", flush=True)
                out.write(f"{name},{pas},{hd},{B},{T},{H},{KV},{tile},{ms:.4f},{tflops:.2f}\n")
                out.flush()
        del q, k, v, dout
    for tile, why in unavailable.items():
        print(f"note: {tile} unavailable at {len(why)} shapes, the first {why[0]}", flush=True)
    print("\n".join(sdpa_summary(rows, peak, name)), flush=True)


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fcproj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer, d, n_head, vocab, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def bench_gpt2(args, device, out):
    L, d, n_head, vocab = (2, 64, 4, 256) if args.dry else (12, 768, 12, 50304)
    B, T = (2, 64) if args.dry else (args.batch, args.seq)
    torch.manual_seed(0)
    model = GPT2(L, d, n_head, vocab, T).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=device.type == "cuda")
    step_model = model if args.no_compile else torch.compile(model)
    idx = torch.randint(0, vocab, (B, T), device=device)
    tgt = torch.randint(0, vocab, (B, T), device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    try:
        for _ in range(3):  # warm-up (compilation)
            step()
    except Exception as e:  # torch.compile without Triton or a working compiler: say so in one line, run eager
        if args.no_compile:
            raise
        print(f"note: torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}); "
              "eager mode", flush=True)
        args.no_compile, step_model = True, model
        opt.zero_grad(set_to_none=True)
        for _ in range(3):
            step()
    ms = timed(step, 2 if args.dry else 10, device)
    flop = (6.0 * n_params + 12.0 * L * d * T) * B * T  # the trainer's PaLM count (its N: these parameters)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops or card_peak(name) or 989.0
    mfu = flop / (ms * 1e-3) / (peak * 1e12)
    print(f"torch gpt2 L={L} d={d} B={B} T={T} ({n_params / 1e6:.1f} M parameters, "
          f"{'eager' if args.no_compile else 'torch.compile'}, torch {torch.__version__}): {ms:.1f} ms/step, "
          f"{B * T / ms * 1e3:.0f} tokens/s, {flop / ms / 1e9:.1f} TFLOP/s, MFU {100 * mfu:.1f}% of "
          f"{peak:g} TFLOP/s", flush=True)
    out.write(f"{name},gpt2-step,{d // n_head},{B},{T},{n_head},{n_head},"
              f"torch-{'eager' if args.no_compile else 'compile'},{ms:.4f},{flop / ms / 1e9:.2f}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["sdpa", "gpt2"], help="sdpa: PyTorch's attention alone; gpt2: a GPT-2 step")
    p.add_argument("--csv", required=True, help="append rows here (the header is written when the file is new)")
    p.add_argument("--dry", action="store_true", help="tiny shapes, any device: the plumbing only")
    p.add_argument("--batch", type=int, default=32, help="sequences a step (default 32)")
    p.add_argument("--seq", type=int, default=1024, help="sequence length (default 1024)")
    p.add_argument("--peak-tflops", type=float, default=0,
                   help="dense bf16 peak (default: from the card's name, H100 SXM / H200 989; else 989)")
    p.add_argument("--no-compile", action="store_true", help="gpt2: eager mode")
    args = p.parse_args()
    if args.batch < 1 or args.seq < 1 or args.peak_tflops < 0 or not math.isfinite(args.peak_tflops):
        print("error: --batch and --seq must be positive, --peak-tflops not negative")
        sys.exit(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.dry:
        print("error: no CUDA GPU for PyTorch (use --dry to check the script on the CPU)")
        sys.exit(1)
    try:
        new = open(args.csv).read(1) == ""
    except FileNotFoundError:
        new = True
    with open(args.csv, "a") as out:
        if new:
            out.write("device,pass,hd,B,T,H,KV,tile,ms,tflops_causal\n")
        bench_sdpa(args, device, out) if args.what == "sdpa" else bench_gpt2(args, device, out)


if __name__ == "__main__":
    main()
