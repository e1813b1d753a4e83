#!/usr/bin/env python3
"""dev/ds_gather_loop.py: the host's cost of one rank's turn in DeepSpeed's ZeRO-3 gather loop (issue 35).

DeepSpeed's ZeRO-3 of 2021 (partition_parameters.py _allgather_param, v0.3.13-v0.5.x) builds the list of the
group's n chunks between its torch.cuda.synchronize() and the all_gather, with the device idle:

    for i in range(self.world_size):
        partitions.append(flat_tensor.narrow(0, partition_size * i, partition_size))
        if i == torch.distributed.get_rank(group=self.ds_process_group): ...

The planner (planner/software.h DS_GATHER_LOOP_CALLS, PYTORCH_CALL_S) prices one turn of it in torch calls: this
times the turn against torch.add of two one-element tensors, the call PyTorch's own figure of "on the order of
2 us" is about (benchmarks/overrides_benchmark), and the reduce-scatter's turn (a view and a narrow per
rank, _reduce_scatter_gradient), in one alternating run (the ratio, not the absolute time, is what
carries to another host). A one-process gloo group stands in for the data-parallel group: get_rank looks the group
up the same way whatever its size. Prints each call's minimum and median over the repeats and the ratios.

    python3 dev/ds_gather_loop.py [--repeats 30] [--calls 2000]
"""
import argparse
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError:
    sys.exit("dev/ds_gather_loop.py needs PyTorch: pip install torch")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30, help="timed repeats of each call (default 30)")
    ap.add_argument("--calls", type=int, default=2000, help="calls a repeat (default 2000)")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=0, world_size=1)
    group = dist.new_group([0])
    a, b, flat = torch.ones(1), torch.ones(1), torch.zeros(1 << 20)
    chunk = 8

    def add(k):
        for _ in range(k):
            torch.add(a, b)

    def narrow(k):
        for i in range(k):
            flat.narrow(0, chunk * (i & 1023), chunk)

    def get_rank(k):
        for _ in range(k):
            torch.distributed.get_rank(group=group)

    def loop_turn(k):  # one rank's turn of _allgather_param's loop
        partitions = []
        for i in range(k):
            partitions.append(flat.narrow(0, chunk * (i & 1023), chunk))
            if i == torch.distributed.get_rank(group=group):
                pass

    def rs_turn(k):  # one rank's turn of _reduce_scatter_gradient's loop (in the gradient hook; not priced)
        inputs, numel = [], flat.numel()
        for i in range(k):
            start = chunk * (i & 1023)
            end = start + chunk
            if start < numel and end <= numel:
                inputs.append(flat.view(-1).narrow(0, start, chunk))

    calls = (add, narrow, get_rank, loop_turn, rs_turn)
    times = {f.__name__: [] for f in calls}
    for _ in range(args.repeats):  # alternate, so load on the machine falls on all of them alike
        for f in calls:
            t0 = time.perf_counter()
            f(args.calls)
            times[f.__name__].append((time.perf_counter() - t0) / args.calls)
    base = min(times["add"])
    print("torch %s, %d repeats of %d calls" % (torch.__version__, args.repeats, args.calls))
    for name, ts in times.items():
        ts.sort()
        print("%-10s min %.3f us  median %.3f us  min / add's min %.2f" %
              (name, ts[0] * 1e6, ts[len(ts) // 2] * 1e6, ts[0] / base))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
