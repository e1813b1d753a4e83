// backend/gpu/elementwise.cuh: the element-wise GPU kernels and the column sums.
//   f32_to_bf16 / bf16_to_f32 (n), residual_forward (n; out may alias a or b), add_inplace,
//   residual_bias_forward (N x C + bias C), add_inplace_f32, sum_f64 (*acc += sum of n fp32);
//   column_sum: acc (C, fp32) += column sums of x (N x C bf16), deterministic (two passes);
//   gelu_forward / _backward (n, tanh approximation), swiglu_forward / _backward (N rows
//   of [gate (F) | up (F)] -> N x F); backward: accumulate 1 adds into dinp, 0 overwrites.
#ifndef GPU_ELEMENTWISE_CUH
#define GPU_ELEMENTWISE_CUH

#include "backend/gpu/common.cuh"

__global__ void f32_to_bf16_kernel(bf16* out, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f2bf(inp[i]);
}
__global__ void bf16_to_f32_kernel(float* out, const bf16* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf2f(inp[i]);
}
static void f32_to_bf16_gpu(bf16* out, const float* inp, size_t n, cudaStream_t s) {
    if (!n) return;
    f32_to_bf16_kernel<<<cdiv(n, 256), 256, 0, s>>>(out, inp, n);
    launchCheck();
}
static void bf16_to_f32_gpu(float* out, const bf16* inp, size_t n, cudaStream_t s) {
    if (!n) return;
    bf16_to_f32_kernel<<<cdiv(n, 256), 256, 0, s>>>(out, inp, n);
    launchCheck();
}

// out = a + b (bf16, fp32 add then one rounding). out may alias a or b.
__global__ void residual_forward_kernel(bf16* out, const bf16* a, const bf16* b, size_t n) {
    size_t i = chunk8();
    if (i >= n) return;
    float x[8], y[8];
    load8(x, a + i, n - i);
    load8(y, b + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) x[k] += y[k];
    store8(out + i, x, n - i);
}
static void residual_forward_gpu(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t s) {
    if (!n) return;
    residual_forward_kernel<<<grid8(n), 256, 0, s>>>(out, a, b, n);
    launchCheck();
}
static void add_inplace_gpu(bf16* a, const bf16* b, size_t n, cudaStream_t s) { residual_forward_gpu(a, a, b, n, s); }

// out (N x C) = a + b + bias, summed in fp32 and rounded once; b and bias may be NULL (then
// out = a + bias is the bias add of a row-parallel matmul after its tp reduction). out may alias a.
__global__ void residual_bias_forward_kernel(bf16* out, const bf16* a, const bf16* b, const bf16* bias, int N, int C) {
    size_t i = chunk8(), n = (size_t)N * C;
    if (i >= n) return;
    float x[8], y[8];
    load8(x, a + i, n - i);
    if (b) {
        load8(y, b + i, n - i);
        #pragma unroll
        for (int k = 0; k < 8; k++) x[k] += y[k];
    }
    if (bias)
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (i + k < n) x[k] += bf2f(bias[(i + k) % C]);
    store8(out + i, x, n - i);
}
static void residual_bias_forward_gpu(bf16* out, const bf16* a, const bf16* b, const bf16* bias, int N, int C,
                                      cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    residual_bias_forward_kernel<<<grid8((size_t)N * C), 256, 0, s>>>(out, a, b, bias, N, C);
    launchCheck();
}

// a += b in fp32 (gradient accumulators: ZeRO-2 shards, the tied-embedding copy).
__global__ void add_inplace_f32_kernel(float* a, const float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}
static void add_inplace_f32_gpu(float* a, const float* b, size_t n, cudaStream_t s) {
    if (!n) return;
    add_inplace_f32_kernel<<<cdiv(n, 256), 256, 0, s>>>(a, b, n);
    launchCheck();
}

// *acc (fp64, device) += sum of x (fp32, n), one block, fixed order: deterministic. For the
// per-token losses of a micro-batch (n = B*T), so one block is plenty.
#define SUM_F64_THREADS 512
__global__ void sum_f64_kernel(double* acc, const float* x, size_t n) {
    __shared__ double sh[SUM_F64_THREADS];
    double v = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *acc += sh[0];
}
static void sum_f64_gpu(double* acc, const float* x, size_t n, cudaStream_t s) {
    if (!n) return;
    sum_f64_kernel<<<1, SUM_F64_THREADS, 0, s>>>(acc, x, n);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Column sums, deterministic: pass 1 sums row chunks per column into the scratch
// (partial[chunk][c]), pass 2 adds the chunks in order into the fp32 accumulator.
// Used for the bias gradients; the norm backward (norm.cuh) forms its partials itself.

static int column_chunks(int N, int C, int n_outputs, int rows_wanted, int* rows_per_chunk) {
    int rpc = rows_wanted;
    size_t max_chunks = gpu_scratch_n / ((size_t)C * n_outputs);
    if (max_chunks < 1) fail("reduction scratch (%zu floats) too small for %d columns", gpu_scratch_n, C);
    if ((size_t)cdiv(N, rpc) > max_chunks) rpc = (int)cdiv(N, max_chunks);
    *rows_per_chunk = rpc;
    return (int)cdiv(N, rpc);
}
__global__ void column_partial_kernel(float* partial, const bf16* x, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float s = 0;
    for (int r = r0; r < r1; r++) s += bf2f(x[(size_t)r * C + c]);
    partial[(size_t)chunk * C + c] = s;
}
__global__ void column_finish_kernel(float* acc, const float* partial, int n_chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int k = 0; k < n_chunks; k++) s += partial[(size_t)k * C + c];
    acc[c] += s;
}
// acc (C, fp32) += column sums of x (N x C, bf16).
static void column_sum_gpu(float* acc, const bf16* x, int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    int rpc, chunks = column_chunks(N, C, 1, 64, &rpc);
    column_partial_kernel<<<dim3(cdiv(C, 256), chunks), 256, 0, s>>>(gpu_scratch, x, N, C, rpc);
    launchCheck();
    column_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(acc, gpu_scratch, chunks, C);
    launchCheck();
}

// ----------------------------------------------------------------------------
// GELU (tanh approximation) and SwiGLU, elementwise in fp32.
// Backward may run in place (dinp == dout) with accumulate = 0.

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
__device__ __forceinline__ float gelu_tanh_arg(float x) { return GELU_K * (x + 0.044715f * x * x * x); }
__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, size_t n) {
    size_t i = chunk8();
    if (i >= n) return;
    float x[8];
    load8(x, inp + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) x[k] = 0.5f * x[k] * (1.0f + tanhf(gelu_tanh_arg(x[k])));
    store8(out + i, x, n - i);
}
__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, int accumulate) {
    size_t i = chunk8();
    if (i >= n) return;
    float x[8], d[8], acc[8];
    load8(x, inp + i, n - i);
    load8(d, dout + i, n - i);
    if (accumulate) load8(acc, dinp + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float th = tanhf(gelu_tanh_arg(x[k]));
        float grad =
            0.5f * (1.0f + th) + 0.5f * x[k] * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x[k] * x[k]);
        d[k] *= grad;
        if (accumulate) d[k] += acc[k];
    }
    store8(dinp + i, d, n - i);
}
static void gelu_forward_gpu(bf16* out, const bf16* inp, size_t n, cudaStream_t s) {
    if (!n) return;
    gelu_forward_kernel<<<grid8(n), 256, 0, s>>>(out, inp, n);
    launchCheck();
}
static void gelu_backward_gpu(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, int accumulate, cudaStream_t s) {
    if (!n) return;
    gelu_backward_kernel<<<grid8(n), 256, 0, s>>>(dinp, inp, dout, n, accumulate);
    launchCheck();
}

// inp rows [gate (F) | up (F)], out (N x F) = silu(gate) * up.
__global__ void swiglu_forward_kernel(bf16* out, const bf16* inp, int N, int F) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    size_t i = idx / F, j = idx % F;
    float g = bf2f(inp[i * 2 * F + j]), u = bf2f(inp[i * 2 * F + F + j]);
    out[idx] = f2bf(g / (1.0f + expf(-g)) * u);
}
// dinp (N x 2F) (+)= gradient; must not alias dout (different shapes).
__global__ void swiglu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F, int accumulate) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    size_t i = idx / F, j = idx % F, ig = i * 2 * F + j, iu = ig + F;
    float g = bf2f(inp[ig]), u = bf2f(inp[iu]), d = bf2f(dout[idx]);
    float sig = 1.0f / (1.0f + expf(-g));
    float dg = d * u * sig * (1.0f + g * (1.0f - sig)), du = d * g * sig;
    if (accumulate) dg += bf2f(dinp[ig]), du += bf2f(dinp[iu]);
    dinp[ig] = f2bf(dg);
    dinp[iu] = f2bf(du);
}
static void swiglu_forward_gpu(bf16* out, const bf16* inp, int N, int F, cudaStream_t s) {
    if ((size_t)N * F == 0) return;
    swiglu_forward_kernel<<<cdiv((size_t)N * F, 256), 256, 0, s>>>(out, inp, N, F);
    launchCheck();
}
static void swiglu_backward_gpu(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F, int accumulate,
                                cudaStream_t s) {
    if ((size_t)N * F == 0) return;
    swiglu_backward_kernel<<<cdiv((size_t)N * F, 256), 256, 0, s>>>(dinp, inp, dout, N, F, accumulate);
    launchCheck();
}

#endif
