// backend/gpu/norm.cuh: LayerNorm and RMSNorm (eps 1e-5) over rows of C channels, fused with
// the residual add before them: resid (N x C) = a + b (+ rbias), out = norm(resid), mean / rstd
// (N, fp32) kept; the backward writes dinp = dres + the norm's input gradient (N x C bf16) and
// adds dweight, dbias (C, fp32) from partial sums it forms on the way, summed in a fixed order.
#ifndef GPU_NORM_CUH
#define GPU_NORM_CUH

#include "backend/gpu/common.cuh"
#include "backend/gpu/elementwise.cuh"  // column_chunks

// LayerNorm (eps 1e-5) and RMSNorm, fused with the residual add before them. One warp
// per row, each lane owning chunks of 8 columns (lane * 8 + 256 k, load8/store8); the row
// is read three times (sum, centred sum of squares, output), from L1/L2.
// x = a + b + rbias is rounded to bf16 first (that is the residual stream everyone else reads:
// the same sum and rounding as residual_bias_forward_kernel, (a + b) + rbias), and the
// statistics are taken of the rounded x, so forward and backward agree.
// b == NULL: plain norm of a (resid may then be NULL). resid may alias a (in place).

#define NORM_ROWS_PER_BLOCK 8
__global__ void residual_norm_forward_kernel(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a,
                                             const bf16* b, const bf16* rbias, const bf16* weight, const bf16* bias,
                                             int N, int C, int rms) {
    int lane = threadIdx.x % 32, row = blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* ar = a + (size_t)row * C;
    const bf16* x = ar;
    float sum = 0, v[8], u[8], rb[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, ar + c, C - c);
        if (b) {
            load8(u, b + (size_t)row * C + c, C - c);
            if (rbias) load8(rb, rbias + c, C - c);
            #pragma unroll
            for (int k = 0; k < 8; k++) {
                float t = v[k] + u[k];
                if (rbias) t += rb[k];
                v[k] = bf2f(f2bf(t));  // the residual stream, rounded (0 past the row's end)
            }
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

// resid = a + b + rbias (if b; rbias may be NULL); out = norm(resid or a) * weight (+ bias:
// LayerNorm, mean != NULL; RMSNorm: mean NULL, no bias); mean, rstd (N, fp32).
static void residual_norm_forward_gpu(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a, const bf16* b,
                                      const bf16* rbias, const bf16* weight, const bf16* bias, int N, int C,
                                      cudaStream_t s) {
    if (N <= 0) return;
    if (b && !resid) fail("residual_norm_forward_gpu: b given without a resid output");
    residual_norm_forward_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
        resid, out, mean, rstd, a, b, rbias, weight, mean ? bias : NULL, N, C, mean == NULL);
    launchCheck();
}
static void residual_layernorm_forward_gpu(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a,
                                           const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                           cudaStream_t s) {
    residual_norm_forward_gpu(resid, out, mean, rstd, a, b, NULL, weight, bias, N, C, s);
}
static void layernorm_forward_gpu(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                                  const bf16* bias, int N, int C, cudaStream_t s) {
    residual_norm_forward_gpu(NULL, out, mean, rstd, inp, NULL, NULL, weight, bias, N, C, s);
}
static void residual_rmsnorm_forward_gpu(bf16* resid, bf16* out, float* rstd, const bf16* a, const bf16* b,
                                         const bf16* weight, int N, int C, cudaStream_t s) {
    residual_norm_forward_gpu(resid, out, NULL, rstd, a, b, NULL, weight, NULL, N, C, s);
}
static void rmsnorm_forward_gpu(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int N, int C,
                                cudaStream_t s) {
    residual_norm_forward_gpu(NULL, out, NULL, rstd, inp, NULL, NULL, weight, NULL, N, C, s);
}

// The backward in one kernel and a short finish (mean == NULL: RMSNorm, where the mean terms
// vanish). Each block owns NORM_BWD_ROWS consecutive rows (more when the blocks' partials would
// not fit the reduction scratch); each of its warps takes every warps-th of them, one row at a
// time, lanes owning chunks of 8 columns as in the forward:
//   pass 1 reads the row's x, dout (and weight) once and forms its two sums;
//   pass 2 reads them again, from L1 (the warp has just read the row), with dres, writes
//     dinp = dres + rstd (w dout - mean(w dout) - xhat mean(w dout xhat)), and adds dout xhat
//     and dout into the warp's own dweight / dbias partials in shared memory: a lane owns the
//     same columns in every row, so no two lanes touch one word and no atomics are needed.
// Then the block's warps' partials are summed in warp order into the block's row of partials
// (global scratch), and norm_backward_finish_kernel sums those rows in block order into
// dweight, dbias: deterministic, 2 launches, x and dout read from memory once.
// dinp may alias dres (each lane reads its chunk of dres before writing it), not dout.
#define NORM_BWD_ROWS 32
#define NORM_BWD_WARPS 4
__global__ void norm_backward_kernel(bf16* dinp, float* partials, const bf16* dres, const bf16* dout, const bf16* inp,
                                     const bf16* weight, const float* mean, const float* rstd, int N, int C,
                                     int n_out, int rows_per_block) {
    extern __shared__ float norm_partials[];  // [warps][n_out][C]: dweight (and dbias) partials per warp
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float* pw = norm_partials + (size_t)warp * n_out * C;
    float* pb = pw + C;  // n_out 2 only
    for (int c = lane * 8; c < C; c += 256)
        for (int k = 0; k < 8 && c + k < C; k++) {
            pw[c + k] = 0.0f;
            if (n_out > 1) pb[c + k] = 0.0f;
        }
    int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
    for (int row = r0 + warp; row < r1; row += warps) {
        const bf16 *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
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
        float dn_mean = mean ? warp_sum(dsum) / C : 0.0f, dn_xh_mean = warp_sum(ddot) / C;
        for (int c = lane * 8; c < C; c += 256) {
            load8(xv, x + c, C - c);
            load8(dv, d + c, C - c);
            load8(w, weight + c, C - c);
            if (dres) load8(acc, dres + (size_t)row * C + c, C - c);
            #pragma unroll
            for (int k = 0; k < 8; k++) {
                float xh = (xv[k] - m) * s;
                if (c + k < C) {
                    pw[c + k] += dv[k] * xh;
                    if (n_out > 1) pb[c + k] += dv[k];
                }
                dv[k] = (w[k] * dv[k] - dn_mean - xh * dn_xh_mean) * s + (dres ? acc[k] : 0.0f);
            }
            store8(dinp + (size_t)row * C + c, dv, C - c);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_out * C; i += blockDim.x) {
        float sum = 0;
        for (int k = 0; k < warps; k++) sum += norm_partials[(size_t)k * n_out * C + i];
        partials[(size_t)blockIdx.x * n_out * C + i] = sum;
    }
}
// dweight (and dbias) += the blocks' partials (blocks rows of n_out * C), summed in block order.
__global__ void norm_backward_finish_kernel(float* dweight, float* dbias, const float* partials, int blocks, int C,
                                            int n_out) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0, sb = 0;
    for (int b = 0; b < blocks; b++) {
        sw += partials[(size_t)b * n_out * C + c];
        if (n_out > 1) sb += partials[(size_t)b * n_out * C + C + c];
    }
    dweight[c] += sw;
    if (dbias) dbias[c] += sb;
}
// dinp (bf16) = dres (may be NULL, or dinp) + the input gradient; dweight, dbias (fp32, dbias NULL
// for RMSNorm, mean NULL) +=. The warps of a block share the shared memory's limit: as many as fit
// in 48 KiB (at most 4), and above that (one warp's partials over 48 KiB: C > 6144 with a bias)
// the kernel's limit is raised once to what one warp needs.
static void norm_backward_gpu(bf16* dinp, const bf16* dres, float* dweight, float* dbias, const bf16* dout,
                              const bf16* inp, const bf16* weight, const float* mean, const float* rstd, int N, int C,
                              cudaStream_t s) {
    if (N <= 0) return;
    int n_out = dbias ? 2 : 1, rows, blocks = column_chunks(N, C, n_out, NORM_BWD_ROWS, &rows);
    size_t warp_bytes = sizeof(float) * n_out * C, default_smem = 48 << 10;
    int warps = warp_bytes * NORM_BWD_WARPS <= default_smem ? NORM_BWD_WARPS : (int)(default_smem / warp_bytes);
    static size_t smem_set = default_smem;
    if (warps < 1) {
        warps = 1;
        if (warp_bytes > smem_set) {
            cudaCheck(cudaFuncSetAttribute(norm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)warp_bytes));
            smem_set = warp_bytes;
        }
    }
    norm_backward_kernel<<<blocks, 32 * warps, warps * warp_bytes, s>>>(dinp, gpu_scratch, dres, dout, inp, weight,
                                                                        mean, rstd, N, C, n_out, rows);
    launchCheck();
    norm_backward_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(dweight, dbias, gpu_scratch, blocks, C, n_out);
    launchCheck();
}
static void layernorm_backward_gpu(bf16* dinp, const bf16* dres, float* dweight, float* dbias, const bf16* dout,
                                   const bf16* inp, const bf16* weight, const float* mean, const float* rstd, int N,
                                   int C, cudaStream_t s) {
    norm_backward_gpu(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, N, C, s);
}
static void rmsnorm_backward_gpu(bf16* dinp, const bf16* dres, float* dweight, const bf16* dout, const bf16* inp,
                                 const bf16* weight, const float* rstd, int N, int C, cudaStream_t s) {
    norm_backward_gpu(dinp, dres, dweight, NULL, dout, inp, weight, NULL, rstd, N, C, s);
}

#endif
