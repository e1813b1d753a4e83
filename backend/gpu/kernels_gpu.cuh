// backend/gpu/kernels_gpu.cuh: the CUDA layer kernels, one forward/backward pair per CPU kernel of
// kernels_cpu.h, with the same argument order and shapes. Included by train_gpt.cu and
// test_gpu.cu (one translation unit each, so the statics below are per-binary state).
//
// Precision (the choices the model code relies on):
//   - activations and the weights the layers read are bf16 (__nv_bfloat16); every sum,
//     norm statistic, softmax and dot product is accumulated in fp32.
//   - master weights are fp32; the AdamW kernel updates the fp32 master copy and the fp32
//     moments m, v, then writes the bf16 copy the next forward reads. So there is one fp32
//     parameter buffer (params.h layout) plus a bf16 shadow of the same layout.
//   - weight gradients are fp32 (same layout as the parameters): matmul dW is accumulated
//     by cuBLASLt into fp32 (beta = 1), norm and bias gradients by deterministic two-pass
//     column sums, so the tp/dp reductions sum fp32 values and a layout change moves no
//     bf16 rounding around. Activation gradients are bf16, like llm.c.
//   - the embedding gradient uses fp32 atomicAdd (tokens repeat; a sort-based deterministic
//     version is future work), so dwte is deterministic only up to fp32 summation order.
//
// Backward functions accumulate (+=) into fp32 weight gradients, as the CPU ones do. For
// bf16 activation gradients they take `accumulate` (1: +=, 0: overwrite), except attention,
// whose dqkv is always overwritten (it is the only producer of that gradient); its
// context-parallel blocks add into fp32 dq, dk, dv (the ring sums several blocks).
//
// Streams: every launch takes a cudaStream_t. The cuBLASLt workspace and the reduction
// scratch are shared, so all kernels of one rank must run on one compute stream.
//
// One file per op family, under backend/gpu/ (each opens with what it computes and its shapes):
//   common.cuh          bf16, error checks, reductions, per-process state, load8 / store8
//   elementwise.cuh     conversions, residual, sums, column sums, GELU, SwiGLU
//   matmul.cuh          cuBLASLt matmuls (bias and GELU epilogues)
//   norm.cuh            LayerNorm, RMSNorm, fused with the residual add
//   attention.cuh       RoPE, flash attention over whole sequences
//   attention_block.cuh context parallelism's attention blocks (the ring's merge in registers)
//   embed_loss.cuh      embeddings, vocabulary-parallel cross-entropy
//   adamw.cuh           the gradient's sum of squares, AdamW
#ifndef KERNELS_GPU_CUH
#define KERNELS_GPU_CUH

#include "backend/gpu/common.cuh"
#include "backend/gpu/elementwise.cuh"
#include "backend/gpu/matmul.cuh"
#include "backend/gpu/norm.cuh"
#include "backend/gpu/attention.cuh"
#include "backend/gpu/attention_block.cuh"
#include "backend/gpu/embed_loss.cuh"
#include "backend/gpu/adamw.cuh"

// What gpu_kernels_init (common.cuh) and the kernels' own caches allocated: cuBLASLt's plans
// (matmul.cuh), the attention's buffers (attention.cuh), the scratch, the workspace, the handle.
static void gpu_kernels_free(void) {
    lt_plans_free();
    attention_buffers_free();
    cudaCheck(cudaFree(gpu_scratch));
    cudaCheck(cudaFree(gpu_lt_workspace));
    cublasCheck(cublasLtDestroy(gpu_lt));
    gpu_scratch = NULL, gpu_lt_workspace = NULL;
}

#endif
