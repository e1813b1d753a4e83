#!/usr/bin/env python3
"""dev/bench_torch.py: what a user would run instead, timed on the same card (dev/gpu_check.sh).

  sdpa  PyTorch's scaled_dot_product_attention with its FlashAttention-2 and cuDNN back-ends,
        causal, forward and backward, at test_gpu --att-sweep's shapes (hidden 2048, B*T = 16k
        tokens, head size 64 and 128, T 1k-16k, and grouped-query heads 4:1 at T 4k), random
        data, the median of 20 calls timed by CUDA events; rows in the sweep's CSV format
        (device,pass,hd,B,T,H,KV,tile,ms,tflops_causal; tile = sdpa-flash / sdpa-cudnn),
        FLOPs counted as the sweep does (FlashAttention-2's causal count, 4 B H T^2 hd / 2
        forward, 2.5 times that backward).
  gpt2  one GPT-2 124M training step (the trainer's model: pre-LayerNorm blocks, GELU (tanh),
        tied embeddings, vocabulary padded to 50304), bf16 autocast, fused AdamW, torch.compile,
        at micro-batch B x T (default 32 x 1024, as dev/bench_gpu.sh runs the trainer): the
        median ms/step of 10 steps after 3 warm-up steps, tokens/s, and MFU by the trainer's
        PaLM count (6N + 12 L d T per token; metrics.h) against --peak-tflops (989: H100/H200).

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


def timed(fn, reps, device):
    """Median ms of reps calls of fn (one warm-up call first)."""
    fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def sdpa_shapes(dry):
    tokens, hidden, lo, hi = (256, 512, 128, 256) if dry else (16384, 2048, 1024, 16384)
    for hd in (64, 128):
        T = lo
        while T <= hi:
            yield tokens // T, T, hidden // hd, hidden // hd, hd
            T *= 2
        T = 128 if dry else 4096
        yield tokens // T, T, hidden // hd, hidden // hd // 4, hd


def bench_sdpa(args, device, out):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
    if args.dry:
        backends["sdpa-math"] = SDPBackend.MATH
    reps = 2 if args.dry else 20
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    dt = torch.bfloat16
    for B, T, H, KV, hd in sdpa_shapes(args.dry):
        q = torch.randn(B, H, T, hd, device=device, dtype=dt, requires_grad=True)
        k = torch.randn(B, KV, T, hd, device=device, dtype=dt, requires_grad=True)
        v = torch.randn(B, KV, T, hd, device=device, dtype=dt, requires_grad=True)
        dout = torch.randn(B, H, T, hd, device=device, dtype=dt)
        flop = 4.0 * B * H * T * T / 2 * hd
        for tile, backend in backends.items():
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=KV != H)
                    o = fwd()
                    ms_f = timed(fwd, reps, device)
                    ms_b = timed(lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True), reps, device)
            except RuntimeError as e:  # this back-end does not take this shape / device
                print(f"sdpa {tile:10s} B={B} T={T} H={H} KV={KV} hd={hd}: unavailable ({str(e).splitlines()[0][:80]})")
                continue
            for pas, ms, f in (("forward", ms_f, flop), ("backward", ms_b, 2.5 * flop)):
                print(f"sdpa {pas:8s} B={B:<3d} T={T:<5d} H={H:<2d} KV={KV:<2d} hd={hd:<3d} {tile:10s} "
                      f"{ms:9.3f} ms {f / ms / 1e9:7.1f} TFLOP/s (causal)", flush=True)
                out.write(f"{name},{pas},{hd},{B},{T},{H},{KV},{tile},{ms:.4f},{f / ms / 1e9:.2f}\n")
                out.flush()


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
    mfu = flop / (ms * 1e-3) / (args.peak_tflops * 1e12)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch gpt2 L={L} d={d} B={B} T={T} ({n_params / 1e6:.1f} M parameters, "
          f"{'eager' if args.no_compile else 'torch.compile'}, torch {torch.__version__}): {ms:.1f} ms/step, "
          f"{B * T / ms * 1e3:.0f} tokens/s, {flop / ms / 1e9:.1f} TFLOP/s, MFU {100 * mfu:.1f}% of "
          f"{args.peak_tflops:g} TFLOP/s", flush=True)
    out.write(f"{name},gpt2-step,{d // n_head},{B},{T},{n_head},{n_head},"
              f"torch-{'eager' if args.no_compile else 'compile'},{ms:.4f},{flop / ms / 1e9:.2f}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["sdpa", "gpt2"], help="sdpa: PyTorch's attention alone; gpt2: a GPT-2 step")
    p.add_argument("--csv", required=True, help="append rows here (the header is written when the file is new)")
    p.add_argument("--dry", action="store_true", help="tiny shapes, any device: the plumbing only")
    p.add_argument("--batch", type=int, default=32, help="sequences a step (default 32)")
    p.add_argument("--seq", type=int, default=1024, help="sequence length (default 1024)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the peak for MFU (default 989: H100/H200 bf16)")
    p.add_argument("--no-compile", action="store_true", help="gpt2: eager mode")
    args = p.parse_args()
    if args.batch < 1 or args.seq < 1 or args.peak_tflops <= 0 or not math.isfinite(args.peak_tflops):
        print("error: --batch, --seq and --peak-tflops must be positive")
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
