// train_gpt.cu: the GPU trainer. The same models (GPT-2, LLaMA), optimizer, flags, layouts
// (dp/tp/sp/pp/cp, ZeRO 0/1/2, recomputation), checkpoints and logs as train_gpt.c, the CPU
// reference, on one CUDA device per rank. The model's math (model/model.h), the orchestration
// (parallel/, runtime/train.h) and main() (runtime/main.h) are shared; this file chooses the
// build's backend, backend/gpu/: the operations (kernels_gpu.cuh, cuBLASLt), NCCL, where the
// bytes live, the device's set-up (setup.h).
//
// Precision and state per rank:
//   - fp32 master weights `params` (the params.h layout, one buffer) and a bf16 copy
//     `params_bf16` of the same layout, which every forward and backward reads; AdamW updates
//     the fp32 copy and rewrites the bf16 one (--offload optimizer: the fp32 copy is on the host).
//   - fp32 weight gradients `grads` (same layout), fp32 AdamW moments m, v over this rank's
//     optimizer range (the ZeRO shard with --zero > 0; pinned host memory under the flag).
//   - bf16 activations and activation gradients; norm statistics, softmax, losses and every
//     sum in fp32 (kernels_gpu.cuh). tp reductions of activations are bf16 sums.
// The weights start bitwise equal to the CPU run's: init_params (params.h) fills a host fp32
// buffer that is copied to the device.
//
// Communication: tp, dp and embed collectives and the pipeline's sends and receives run on
// device buffers through NCCL, or with --comm mpi host-staged through MPI (comm_nccl.h;
// several ranks may then share one GPU). No NCCL call makes the host wait. With ZeRO 0 and 1,
// each layer's dp gradient all-reduce starts as soon as the step's last micro-batch has
// left the layer, on NCCL's own stream beside the rest of the backward (parallel/data_parallel.h's
// dp_layer_grads_done); the optimizer waits for them. ZeRO 1/2's all-gathers of the updated weights
// run there too, a unit at a time beside the next forward (parallel/zero3.h zero12_gather_start),
// each layer waiting for its own. Pipeline sends run on streams of their
// own, so a stage goes on computing while its activations travel; so do context
// parallelism's ring exchanges, beside the attention block they overlap. Scalars (loss, gradient
// norm, sampled token, stop flag) and checkpoints use layout/grid.h's MPI calls on host memory,
// as the CPU build does.
//
// Reading order: train_main() (runtime/main.h) -> model_init() -> train_step() ->
// run_schedule() -> chunk_forward()/chunk_backward() (parallel/pipeline.h) -> layer_forward()/
// layer_backward_input()/layer_backward_weight() (model/model.h, shared with the CPU build) ->
// the op_* operations (backend/gpu/ops.h) -> backend/gpu/kernels_gpu.cuh. Every communication
// point is marked "comm:".
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's C++ bindings are unused (and warn under nvcc)
#endif
#include "backend/gpu/setup.h"
#include "runtime/main.h"

int main(int argc, char** argv) { return train_main(argc, argv); }
