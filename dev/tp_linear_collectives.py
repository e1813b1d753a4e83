#!/usr/bin/env python3
"""The tensor-parallel collectives of one transformer block under KempnerForge's DTensor plan, counted: each of q,
k, v, gate and up its own ColwiseParallel(input_layouts=Shard(1)), o and down RowwiseParallel(output_layouts=
Shard(1)), the norms SequenceParallel (kempnerforge/distributed/tensor_parallel.py _build_block_tp_plan at 01b461a
and 601aba9, with its _rewrap_shard1 hooks), against the two a region that dev/PLANNER.md's layer time counts.

    python3 dev/tp_linear_collectives.py [--plan kempnerforge|torchtitan] [--tp 4] [--d-model 256] [--d-ff 768]
                                         [--seq 80] [--batch 2] [--heads 8]

--plan torchtitan is torchtitan's instead (models/llama3/parallelize_llama.py apply_tp at 820504e): one
PrepareModuleInput before the attention and one before the feed-forward gather the norm's output once for their
ColwiseParallel linears.

Runs on the CPU in one process: torch's fake process group (torch.testing._internal.distributed.fake_pg) stands for
the --tp ranks, so every collective is issued and counted and none moves data. Prints the collectives of the
forward and of the backward, eager (a TorchDispatchMode counting _c10d_functional ops) and under torch.compile (the
AOTAutograd forward and backward graphs, before code generation); the gathered (batch x seq, d_model) inputs autograd
keeps for the weight gradients, eager and compiled; and the forward and backward of the block under full activation
checkpointing (checkpoint_wrapper NO_REENTRANT, KempnerForge's apply_ac 'full'). dev/PLANNER.md "KempnerForge's
gathers per linear (tenth session)" has its output. Needs torch (pip install torch).
"""
import argparse
import collections
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", choices=("kempnerforge", "torchtitan"), default="kempnerforge",
                    help="whose tensor-parallel plan of the block (default kempnerforge)")
    ap.add_argument("--tp", type=int, default=4, help="tensor-parallel ranks (fake), >= 2")
    ap.add_argument("--d-model", type=int, default=256, help="hidden size, a multiple of --heads and of --tp")
    ap.add_argument("--d-ff", type=int, default=768, help="SwiGLU's hidden size, a multiple of --tp")
    ap.add_argument("--seq", type=int, default=80, help="tokens of a sequence, a multiple of --tp")
    ap.add_argument("--batch", type=int, default=2, help="sequences")
    ap.add_argument("--heads", type=int, default=8, help="attention heads, a multiple of --tp")
    a = ap.parse_args()
    if a.tp < 2 or a.seq % a.tp or a.d_ff % a.tp or a.heads % a.tp or a.d_model % a.heads or a.batch < 1:
        sys.exit("error: dev/tp_linear_collectives.py: --tp >= 2 dividing --seq, --d-ff and --heads; --heads "
                 "dividing --d-model; --batch >= 1")
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("error: dev/tp_linear_collectives.py needs torch (pip install torch)")
    run(a)


def run(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch._dynamo.backends.common import aot_autograd
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils._python_dispatch import TorchDispatchMode

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=a.tp)
    mesh = init_device_mesh("cpu", (a.tp,))
    d, head_dim, gathered_numel = a.d_model, a.d_model // a.heads, a.batch * a.seq * a.d_model

    class Attention(nn.Module):  # KempnerForge's model/attention.py: q, k, v, o four nn.Linear
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (p(x).view(b, t, -1, head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    class SwiGLU(nn.Module):  # model/mlp.py SwiGLUMLP
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(d, a.d_ff, bias=False), nn.Linear(d, a.d_ff, bias=False)
            self.down_proj = nn.Linear(a.d_ff, d, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.mlp_norm = nn.RMSNorm(d), nn.RMSNorm(d)
            self.attention, self.mlp = Attention(), SwiGLU()

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x))
            return h + self.mlp(self.mlp_norm(h))

    def kempnerforge_block():
        block = Block()
        col, row = {"input_layouts": Shard(1)}, {"output_layouts": Shard(1)}
        plan = {"attention_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
                "attention.o_proj": RowwiseParallel(**row), "mlp.down_proj": RowwiseParallel(**row)}
        for name in ("attention.q_proj", "attention.k_proj", "attention.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[name] = ColwiseParallel(**col)
        parallelize_module(block, mesh, plan)

        def rewrap_shard1(module, inputs, output):
            return output if isinstance(output, DTensor) else DTensor.from_local(output, mesh, [Shard(1)])
        block.attention.register_forward_hook(rewrap_shard1)
        block.mlp.register_forward_hook(rewrap_shard1)
        return block

    def torchtitan_block():  # its module names are wq ... w3; the roles are the same
        block = Block()
        row = {"output_layouts": Shard(1)}
        plan = {"attention_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "attention.o_proj": RowwiseParallel(**row), "mlp.down_proj": RowwiseParallel(**row)}
        for name in ("attention.q_proj", "attention.k_proj", "attention.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[name] = ColwiseParallel()
        parallelize_module(block, mesh, plan)
        return block

    make_block = kempnerforge_block if a.plan == "kempnerforge" else torchtitan_block

    def block_input():  # the residual stream, sequence-sharded: KempnerForge's a DTensor, torchtitan's local
        x = torch.randn(a.batch, a.seq // a.tp, d, requires_grad=True)
        return DTensor.from_local(x, mesh, [Shard(1)], run_check=False) if a.plan == "kempnerforge" else x

    def loss_of(y):
        return (y.to_local() if isinstance(y, DTensor) else y).sum()

    def collective_name(op):  # "_c10d_functional.all_gather_into_tensor.default" -> its name; "" if another op
        kinds = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
        name = op.split(".")[1] if op.startswith("_c10d_functional.") else ""
        return name if name.startswith(kinds) else ""

    class Collectives(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if collective_name(str(func)):
                self.counts[collective_name(str(func))] += 1
            return func(*args, **(kwargs or {}))

    def counted(counts):
        return ", ".join("%s %d" % kv for kv in sorted(counts.items())) or "none"

    def forward_backward(block, tag):
        x = block_input()
        with Collectives() as fwd:
            y = block(x)
        with Collectives() as bwd:
            loss_of(y).backward()
        print("%s: forward %s; backward %s" % (tag, counted(fwd.counts), counted(bwd.counts)))

    print("%s's plan, torch %s, tp %d (fake group), d_model %d, d_ff %d, %d x %d tokens" % (
        a.plan, torch.__version__, a.tp, d, a.d_ff, a.batch, a.seq))
    forward_backward(make_block(), "eager")
    forward_backward(checkpoint_wrapper(make_block(), checkpoint_impl=CheckpointImpl.NO_REENTRANT),
                     "eager, full checkpointing (the backward recomputes the forward)")

    # the gathered inputs autograd keeps: Replicate DTensors of batch x seq x d_model elements
    kept = set()

    def pack(t):
        if isinstance(t, DTensor) and t.numel() == gathered_numel and t.placements[0].is_replicate():
            kept.add(t._local_tensor.untyped_storage().data_ptr())
        return t
    block = make_block()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(block_input())
    print("eager: gathered (batch x seq, d_model) inputs kept for the backward: %d" % len(kept))

    # under torch.compile: the collectives of AOTAutograd's forward and backward graphs, and what the forward keeps
    def base(node):  # the tensor a chain of views starts from
        while node.op == "call_function" and str(node.target).split(".")[1] in ("view", "_unsafe_view", "reshape",
                                                                                "t", "alias", "expand"):
            node = node.args[0]
        return node

    def graph_counter(tag):
        def compile_graph(gm, example_inputs):
            counts = collections.Counter(collective_name(str(n.target)) for n in gm.graph.nodes
                                         if collective_name(str(n.target)))
            line = "compiled %s graph: %s" % (tag, counted(counts))
            if tag == "forward":  # its outputs past the block's own are what the backward gets
                saved = [o for o in list(gm.graph.nodes)[-1].args[0] if isinstance(o, torch.fx.Node) and
                         isinstance(o.meta.get("val"), torch.Tensor) and
                         tuple(o.meta["val"].shape) == (a.batch * a.seq, d)]
                kept_inputs = len(set(map(base, saved)))  # several views of one gathered tensor count once
                line += "; gathered (batch x seq, d_model) inputs kept for the backward: %d" % kept_inputs
            print(line)
            return gm.forward
        return compile_graph
    compiled = torch.compile(make_block(), backend=aot_autograd(fw_compiler=graph_counter("forward"),
                                                                        bw_compiler=graph_counter("backward")))
    loss_of(compiled(block_input())).backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
