// planner.h: the layout planner. For a model, a number of GPUs and a device profile it
// enumerates every parallel layout (dp x cp x tp x pp, context-parallel kind, virtual
// stages, micro-batch size, recomputation, sequence parallelism, ZeRO stage, schedule) and
// every attention and norm kernel, predicts per-GPU memory and step time for each from
// first principles, and prints them ranked by throughput. It also predicts given runs
// (--runs FILE.csv), which is how it is checked against measured ones
// (scripts/validate_planner.py).
//
//   ./train --plan --model llama-13b --gpus 64 --device a100-80gb --global-batch-tokens 4194304
//
// The model, in one paragraph (dev/PLANNER.md has the long form):
//   memory  = model states (bytes per parameter by ZeRO stage) + activations (Korthikanti
//             et al. 2022, per layer and kernel, of the T/cp tokens a rank holds, times the
//             (micro-batch, chunk) pairs the stage holds at peak under its schedule:
//             schedule_max_in_flight) + under the zero-bubble schedules the weight pass's
//             inputs of the pairs whose W is still owed + the largest temporaries (logits and
//             loss, unfused attention's score matrices, the layer being recomputed, context
//             parallelism's buffers) + allocator fragmentation + a fixed reserve.
//   compute = per op roofline: matmuls max(FLOPs / (peak * eff), bytes / HBM) plus a fixed
//             latency per kernel, attention at its kernel's efficiency plus the passes over
//             the T x T scores unfused kernels make, elementwise ops at HBM bandwidth.
//             Backward = 2x forward for matmuls, split into the input pass B (input
//             gradients, attention, norms) and the weight pass W (weight gradients, the
//             second half of the matmuls); recomputation adds forward work to B.
//   comm    = ring collectives 2(n-1)/n * bytes / bw (+ latency per step) on the link each
//             group lands on (NVLink inside a node, the node's NICs across nodes, given the
//             rank order): tensor parallelism inside the chunk times, pipeline p2p, and the
//             data-parallel gradient reduction (partly hidden under the last backward);
//             context parallelism's ring (overlapped with the attention) and all-to-alls.
//   step    = schedule_simulate() of the real schedule (schedule.h) with those per-chunk
//             F, B and W times + exposed DP communication + the optimizer step.
//
// The files, in the order a reader meets them (each builds on the ones before):
//   device.h    device profiles, device files and --device-set
//   software.h  what the training software does beside the layout: kernels, rank order, pipeline cut
//   memory.h    parameters, activations and model states per GPU
//   time.h      per-op roofline, collectives on links, context parallelism, one layer's times
//   predict.h   one layout: its checks, chunks, per-stage memory, DP, the simulated pipeline, MFU
//   search.h    the model of a search, the enumeration of every layout, the ranking
//   runs.h      --runs FILE.csv: predict the runs of a file
//   cli.h       the command line: flags, usage, the printed table and CSV, plan_main
#ifndef PLANNER_H
#define PLANNER_H

#include <stddef.h>
#include "planner/device.h"
#include "planner/software.h"
#include "planner/memory.h"
#include "planner/time.h"
#include "planner/predict.h"
#include "planner/search.h"
#include "planner/runs.h"
#include "planner/cli.h"

#endif
