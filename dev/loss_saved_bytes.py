#!/usr/bin/env python3
"""What a framework's cross-entropy keeps for its backward, in bytes per logit: PyTorch's eager ops and the same
ops under torch.compile (the planner's --runs column loss: eager | fused | eager_bf16; memory.h
loss_bytes_per_logit).

    python3 dev/loss_saved_bytes.py [--tokens 256] [--vocab 4096]

The loss is OLMo-core's cross_entropy_loss with its z-loss (allenai/OLMo-core src/olmo_core/nn/functional/
cross_entropy_loss.py at a7de3f65, the ops written out here: the bf16 logits cast to fp32, F.cross_entropy, the
squared logsumexp); its trainer compiles it (trainer.py compile_loss). Every tensor autograd saves for the backward
is recorded once (torch.autograd.graph.saved_tensors_hooks) and summed; the compiled graph's saved tensors are what
AOTAutograd's partitioner kept, the rest it recomputes in the backward. Runs on the CPU: the partition is made
before code generation. The backward then writes the logits' gradient, in the logits' dtype for both.
Then KempnerForge's loss (scripts/train.py at 01b461a: F.cross_entropy on the bf16 logits, no cast): what it saves,
and what its backward's ops allocate (torch.profiler's memory per op), each in bytes per logit.
Needs torch (pip install torch).
"""
import argparse
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("error: dev/loss_saved_bytes.py needs torch (pip install torch)")


def olmo_cross_entropy(logits, labels, ignore_index=-100, z_loss_multiplier=1e-5):
    logits = logits.float()
    loss = F.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="mean")
    mask = labels != ignore_index
    z_squared = (logits.logsumexp(-1).pow(2) * mask).sum() / mask.sum()
    return loss + z_loss_multiplier * z_squared


def saved_bytes(loss_fn, tokens, vocab):
    """Bytes of the distinct tensors autograd saves for the loss's backward, and their dtypes and shapes."""
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    saved = {}

    def pack(t):
        saved[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(logits, labels)
    loss.backward()  # the saved tensors were enough: the backward ran
    return sum(saved.values()), sorted("%s%s" % (str(k[1]).replace("torch.", ""), list(k[2])) for k in saved)


def plain_cross_entropy(logits, labels):
    return F.cross_entropy(logits, labels)


def backward_bytes(loss_fn, tokens, vocab):
    """Bytes each op of the loss's backward allocates (profiler, CPU), per op name."""
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    loss = loss_fn(logits, torch.randint(0, vocab, (tokens,)))
    with torch.profiler.profile(profile_memory=True) as prof:
        loss.backward()
    return [(e.key, e.self_cpu_memory_usage) for e in prof.key_averages() if e.key.startswith("aten::")
            and e.self_cpu_memory_usage > tokens * vocab / 100]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256, help="tokens of the logits (default 256)")
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary of the logits (default 4096)")
    a = ap.parse_args()
    if a.tokens < 1 or a.vocab < 2 or a.tokens * a.vocab > 1 << 28:
        sys.exit("error: --tokens >= 1 and --vocab >= 2, at most 2^28 logits")
    print("torch %s, %d tokens x %d logits (bf16)" % (torch.__version__, a.tokens, a.vocab))
    for name, fn in (("eager", olmo_cross_entropy), ("compiled", torch.compile(olmo_cross_entropy))):
        total, what = saved_bytes(fn, a.tokens, a.vocab)
        print("%-8s saves %.3f bytes per logit: %s" % (name, total / (a.tokens * a.vocab), ", ".join(what)))
    total, what = saved_bytes(plain_cross_entropy, a.tokens, a.vocab)
    print("bf16     saves %.3f bytes per logit: %s" % (total / (a.tokens * a.vocab), ", ".join(what)))
    for op, n in backward_bytes(plain_cross_entropy, a.tokens, a.vocab):
        print("bf16     backward: %s allocates %.3f bytes per logit" % (op, n / (a.tokens * a.vocab)))


if __name__ == "__main__":
    main()
