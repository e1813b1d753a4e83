// backend/gpu/adamw.cuh: the optimizer's kernels: the sum of squares of n fp32 (the gradient
// norm, deterministic) and AdamW on n fp32 master weights with their fp32 moments, writing
// the bf16 copy the next forward reads.
#ifndef GPU_ADAMW_CUH
#define GPU_ADAMW_CUH

#include "backend/gpu/common.cuh"

// Sum of squares of x (fp32, e.g. the gradient buffer), deterministic: a grid fixed by n
// (one block per 256 elements, at most SUMSQ_BLOCKS), each block writes a partial, one
// block adds the partials in order. Result in *out (device).
#define SUMSQ_BLOCKS 1024
__global__ void sumsq_partial_kernel(float* partial, const float* x, size_t n) {
    float s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += x[i] * x[i];
    s = block_reduce(s, 0);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sum_partials_kernel(float* out, const float* partial, int n) {
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = block_reduce(s, 0);
    if (threadIdx.x == 0) *out = s;
}
static void sumsq_gpu(float* out, const float* x, size_t n, cudaStream_t s) {
    if (gpu_scratch_n < SUMSQ_BLOCKS) fail("sumsq_gpu: reduction scratch too small");
    // small tensors: few blocks
    int blocks = n >= (size_t)SUMSQ_BLOCKS * 256 ? SUMSQ_BLOCKS : (int)cdiv(n ? n : 1, 256);
    sumsq_partial_kernel<<<blocks, 256, 0, s>>>(gpu_scratch, x, n);
    launchCheck();
    sum_partials_kernel<<<1, 1024, 0, s>>>(out, gpu_scratch, blocks);
    launchCheck();
}

// AdamW on the fp32 master weights and fp32 moments; writes the bf16 copy (param_bf16,
// may be NULL) the next forward reads. Same formula and bias correction as the CPU.

// One chunk of 8 per thread (load8/store8, fp32 and the bf16 copy).
__global__ void adamw_kernel(float* param, bf16* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float grad_scale, float c1, float c2) {
    size_t i = chunk8();
    if (i >= n) return;
    float p[8], g[8], mi[8], vi[8];
    load8(p, param + i, n - i);
    load8(g, grad + i, n - i);
    load8(mi, m + i, n - i);
    load8(vi, v + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float gk = g[k] * grad_scale;
        mi[k] = beta1 * mi[k] + (1.0f - beta1) * gk;
        vi[k] = beta2 * vi[k] + (1.0f - beta2) * gk * gk;
        float mhat = mi[k] / c1, vhat = vi[k] / c2;
        p[k] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[k]);
    }
    store8(param + i, p, n - i);
    store8(m + i, mi, n - i);
    store8(v + i, vi, n - i);
    if (param_bf16) store8(param_bf16 + i, p, n - i);
}
static void adamw_update_gpu(float* param, bf16* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int decay, float grad_scale,
                             int t, cudaStream_t s) {
    if (!n) return;
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<grid8(n), 256, 0, s>>>(param, param_bf16, grad, m, v, n, lr, beta1, beta2, eps,
                                              decay ? weight_decay : 0.0f, grad_scale, c1, c2);
    launchCheck();
}

#endif
