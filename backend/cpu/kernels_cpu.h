// backend/cpu/kernels_cpu.h: the fp32 CPU layer kernels, one forward/backward pair per layer.
// They are the reference every other path is checked against (the GPU kernels in
// the GPU tests, the finite-difference checks in test_gpt.c). Shapes are in the
// argument lists: N rows (tokens), C channels, OC/IC output/input channels, B batch,
// T sequence, H heads, hd head size. Backward functions accumulate (+=) into their
// weight gradients and input gradients, as llm.c does. C and C++ compatible.
//
// Every kernel is threaded with OpenMP, and no result depends on the thread count: each
// output element is computed by one thread in an order fixed by the shapes alone (the
// bitwise resume of a killed run relies on it; test_gpt.c checks 1 against 2 threads).
//
// One file per op family, under backend/cpu/ (each opens with what it computes and its shapes):
//   simd.h        the vec type (AVX-512 / AVX2+FMA / plain C), vexp, ROW_LOOP
//   elementwise.h residual, bias, column sums, GELU, SwiGLU
//   gemm.h        the packed GEMM and the matmuls on it
//   norm.h        LayerNorm, RMSNorm
//   attention.h   RoPE, causal attention by blocks (FlashAttention's algorithm)
//   embed_loss.h  embeddings, vocabulary-parallel cross-entropy
//   adamw.h       AdamW, the sum of squares of the gradient norm
#ifndef KERNELS_CPU_H
#define KERNELS_CPU_H

#include "backend/cpu/simd.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/embed_loss.h"
#include "backend/cpu/adamw.h"

#endif
