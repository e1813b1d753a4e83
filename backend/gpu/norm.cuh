// backend/gpu/norm.cuh: LayerNorm and RMSNorm (eps 1e-5) over rows of C channels, fused with
// the residual add before them: resid (N x C) = a + b, out = norm(resid), mean / rstd (N,
// fp32) kept; the backward writes dinp (N x C bf16, += or =) and adds dweight, dbias (C,
// fp32) by deterministic two-pass column sums.
#ifndef GPU_NORM_CUH
#define GPU_NORM_CUH

#include "backend/gpu/common.cuh"
#include "backend/gpu/elementwise.cuh"  // column_chunks

// LayerNorm (eps 1e-5) and RMSNorm, fused with the residual add before them. One warp
// per row, each lane owning chunks of 8 columns (lane * 8 + 256 k, load8/store8); the row
// is read three times (sum, centred sum of squares, output), from L1/L2.
// x = a + b is rounded to bf16 first (that is the residual stream everyone else reads),
// and the statistics are taken of the rounded x, so forward and backward agree.
// b == NULL: plain norm of a (resid may then be NULL). resid may alias a (in place).

#define NORM_ROWS_PER_BLOCK 8
__global__ void residual_norm_forward_kernel(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a,
                                             const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                             int rms) {
    int lane = threadIdx.x % 32, row = blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* ar = a + (size_t)row * C;
    const bf16* x = ar;
    float sum = 0, v[8], u[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, ar + c, C - c);
        if (b) {
            load8(u, b + (size_t)row * C + c, C - c);
            #pragma unroll
            for (int k = 0; k < 8; k++) v[k] = bf2f(f2bf(v[k] + u[k]));  // the residual stream, rounded
            store8(resid + (size_t)row * C + c, v, C - c);
        }
        #pragma unroll
        for (int k = 0; k < 8; k++) sum += v[k];  // load8 gives 0 past the row's end
    }
    if (b) x = resid + (size_t)row * C;  // each lane re-reads only the chunks it wrote itself
    float m = rms ? 0.0f : warp_sum(sum) / C;
    float var = 0;
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, x + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (c + k < C) var += (v[k] - m) * (v[k] - m);
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    bf16* o = out + (size_t)row * C;
    float w[8], bb[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, x + c, C - c);
        load8(w, weight + c, C - c);
        if (bias) load8(bb, bias + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++) v[k] = (v[k] - m) * s * w[k] + (bias ? bb[k] : 0.0f);
        store8(o + c, v, C - c);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        rstd[row] = s;
    }
}

// resid = a + b (if b); out = layernorm(resid or a) * weight + bias; mean, rstd (N, fp32).
static void residual_layernorm_forward_gpu(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a,
                                           const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                           cudaStream_t s) {
    if (N <= 0) return;
    if (b && !resid) fail("residual_layernorm_forward_gpu: b given without a resid output");
    residual_norm_forward_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
        resid, out, mean, rstd, a, b, weight, bias, N, C, 0);
    launchCheck();
}
static void layernorm_forward_gpu(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                                  const bf16* bias, int N, int C, cudaStream_t s) {
    residual_layernorm_forward_gpu(NULL, out, mean, rstd, inp, NULL, weight, bias, N, C, s);
}
// resid = a + b (if b); out = rmsnorm(resid or a) * weight; rstd (N, fp32).
static void residual_rmsnorm_forward_gpu(bf16* resid, bf16* out, float* rstd, const bf16* a, const bf16* b,
                                         const bf16* weight, int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    if (b && !resid) fail("residual_rmsnorm_forward_gpu: b given without a resid output");
    residual_norm_forward_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
        resid, out, NULL, rstd, a, b, weight, NULL, N, C, 1);
    launchCheck();
}
static void rmsnorm_forward_gpu(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int N, int C,
                                cudaStream_t s) {
    residual_rmsnorm_forward_gpu(NULL, out, rstd, inp, NULL, weight, N, C, s);
}

// Input gradient, one warp per row (mean == NULL: RMSNorm, where the mean terms vanish).
// dinp must not alias dout.
__global__ void norm_backward_dinp_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* weight,
                                          const float* mean, const float* rstd, int N, int C, int accumulate) {
    int lane = threadIdx.x % 32, row = blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* x = inp + (size_t)row * C;
    const bf16* d = dout + (size_t)row * C;
    bf16* di = dinp + (size_t)row * C;
    float m = mean ? mean[row] : 0.0f, s = rstd[row];
    float dsum = 0, ddot = 0, xv[8], dv[8], w[8], acc[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(xv, x + c, C - c);
        load8(dv, d + c, C - c);
        load8(w, weight + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++) {  // past the row's end dv = w = 0, so dn = 0
            float dn = w[k] * dv[k];
            dsum += dn;
            ddot += dn * (xv[k] - m) * s;
        }
    }
    float dnorm_mean = mean ? warp_sum(dsum) / C : 0.0f, dnorm_norm_mean = warp_sum(ddot) / C;
    for (int c = lane * 8; c < C; c += 256) {
        load8(xv, x + c, C - c);
        load8(dv, d + c, C - c);
        load8(w, weight + c, C - c);
        if (accumulate) load8(acc, di + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            float xh = (xv[k] - m) * s;
            dv[k] = (w[k] * dv[k] - dnorm_mean - xh * dnorm_norm_mean) * s + (accumulate ? acc[k] : 0.0f);
        }
        store8(di + c, dv, C - c);
    }
}
// Weight (and bias) gradient partials per row chunk: pw[chunk][c] = sum dout * xhat,
// pb[chunk][c] = sum dout (pb NULL: skipped).
__global__ void norm_backward_partial_kernel(float* pw, float* pb, const bf16* dout, const bf16* inp, const float* mean,
                                             const float* rstd, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float sw = 0, sb = 0;
    for (int r = r0; r < r1; r++) {
        float d = bf2f(dout[(size_t)r * C + c]);
        float xh = (bf2f(inp[(size_t)r * C + c]) - (mean ? mean[r] : 0.0f)) * rstd[r];
        sw += d * xh;
        sb += d;
    }
    pw[(size_t)chunk * C + c] = sw;
    if (pb) pb[(size_t)chunk * C + c] = sb;
}
static void norm_backward_gpu(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                              const bf16* weight, const float* mean, const float* rstd, int N, int C, int accumulate,
                              cudaStream_t s) {
    if (N <= 0) return;
    if (dinp) {
        norm_backward_dinp_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
            dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
        launchCheck();
    }
    int rpc, chunks = column_chunks(N, C, 2, &rpc);
    float* pw = gpu_scratch;
    float* pb = dbias ? gpu_scratch + (size_t)chunks * C : NULL;
    norm_backward_partial_kernel<<<dim3(cdiv(C, 256), chunks), 256, 0, s>>>(pw, pb, dout, inp, mean, rstd, N, C, rpc);
    launchCheck();
    column_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(dweight, pw, chunks, C);
    launchCheck();
    if (dbias) {
        column_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(dbias, pb, chunks, C);
        launchCheck();
    }
}
// dinp (bf16) (+)= LayerNorm input gradient; dweight, dbias (fp32) +=.
static void layernorm_backward_gpu(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                   const bf16* weight, const float* mean, const float* rstd, int N, int C,
                                   int accumulate, cudaStream_t s) {
    norm_backward_gpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate, s);
}
static void rmsnorm_backward_gpu(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                                 const float* rstd, int N, int C, int accumulate, cudaStream_t s) {
    norm_backward_gpu(dinp, dweight, NULL, dout, inp, weight, NULL, rstd, N, C, accumulate, s);
}

#endif
