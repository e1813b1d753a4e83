// train_gpt.c: the CPU reference trainer. fp32, OpenMP, MPI for the layout.
//
// GPT-2 (learned positions, pre-LayerNorm, GELU MLP, causal multi-head attention,
// tied embedding) and LLaMA (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied
// head), trained with AdamW on data, tensor, sequence and pipeline parallel layouts.
// It is the oracle every other path is checked against.
//
// This file is the build's choice of backend: backend/cpu/ (the op_* operations over
// kernels_cpu.h or the plain loops of reference.h, MPI collectives, host memory). Everything
// else is shared with the GPU build, main() included. Reading order: train_main()
// (runtime/main.h) -> model_init() -> train_loop() / train_step() (runtime/train.h) ->
// run_schedule() (parallel/pipeline.h) -> chunk_forward()/chunk_backward() -> layer_forward()/
// layer_backward_input()/layer_backward_weight() (model/model.h) -> the op_* operations
// (backend/cpu/ops.h) -> backend/cpu/kernels_cpu.h. Every communication point is marked "comm:".
#include "backend/cpu/setup.h"
#include "runtime/main.h"

#ifndef TESTING
int main(int argc, char** argv) { return train_main(argc, argv); }
#endif
