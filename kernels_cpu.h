// kernels_cpu.h: the fp32 CPU layer kernels, one forward/backward pair per layer.
// They are the reference every other path is checked against (the GPU kernels in
// the GPU tests, the finite-difference checks in test_gpt.c). Shapes are in the
// argument lists: N rows (tokens), C channels, OC/IC output/input channels, B batch,
// T sequence, H heads, hd head size. Backward functions accumulate (+=) into their
// weight gradients and input gradients, as llm.c does. C and C++ compatible.
#ifndef KERNELS_CPU_H
#define KERNELS_CPU_H

#include <float.h>
#include "common.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// ----------------------------------------------------------------------------
// Matmul: a packed, register-blocked GEMM (the BLIS/Goto structure): C (M x N) +=
// op(A) (M x K) * op(B) (K x N). Blocks of A and B are packed into contiguous panels
// so the micro-kernel streams them, and the micro-kernel keeps an MR x NR tile of C
// in vector registers: AVX-512 (16 lanes), AVX2+FMA (8 lanes) or plain C.

#if defined(__AVX512F__)
#define VLEN 16
typedef __m512 vec;
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vbcast(x) _mm512_set1_ps(x)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vadd(a, b) _mm512_add_ps(a, b)
#elif defined(__AVX2__) && defined(__FMA__)
#define VLEN 8
typedef __m256 vec;
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vbcast(x) _mm256_set1_ps(x)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vadd(a, b) _mm256_add_ps(a, b)
#else
#define VLEN 0
#endif

#define GEMM_MR 6
#define GEMM_NR 16  // two AVX2 vectors, one AVX-512 vector: 12 / 6 accumulators
#define GEMM_KC 256
#define GEMM_MC 96
#define GEMM_NC 2048
#define GEMM_MAX_THREADS 256

static const char* simd_name(void) { return VLEN == 16 ? "AVX-512" : VLEN == 8 ? "AVX2+FMA" : "plain C"; }

// c (MR x NR, row stride ldc) (+)= ap (kc x MR panel) * bp (kc x NR panel); only the
// top-left mr x nr part of the tile is written.
static void gemm_micro(int kc, const float* ap, const float* bp, float* c, int ldc, int mr, int nr, int accumulate) {
    float tile[GEMM_MR * GEMM_NR];
#if VLEN
    enum { NV = GEMM_NR / VLEN };
    vec acc[GEMM_MR][NV];
    for (int i = 0; i < GEMM_MR; i++)
        for (int j = 0; j < NV; j++) acc[i][j] = vzero();
    for (int k = 0; k < kc; k++) {
        vec b[NV];
        for (int j = 0; j < NV; j++) b[j] = vload(bp + k * GEMM_NR + j * VLEN);
        for (int i = 0; i < GEMM_MR; i++) {
            vec a = vbcast(ap[k * GEMM_MR + i]);
            for (int j = 0; j < NV; j++) acc[i][j] = vfma(a, b[j], acc[i][j]);
        }
    }
    if (mr == GEMM_MR && nr == GEMM_NR) {  // full tile straight from registers
        for (int i = 0; i < GEMM_MR; i++)
            for (int j = 0; j < NV; j++) {
                float* p = c + (size_t)i * ldc + j * VLEN;
                vstore(p, accumulate ? vadd(vload(p), acc[i][j]) : acc[i][j]);
            }
        return;
    }
    for (int i = 0; i < GEMM_MR; i++)
        for (int j = 0; j < NV; j++) vstore(tile + i * GEMM_NR + j * VLEN, acc[i][j]);
#else
    for (int i = 0; i < GEMM_MR * GEMM_NR; i++) tile[i] = 0;
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < GEMM_MR; i++) {
            float a = ap[k * GEMM_MR + i];
            for (int j = 0; j < GEMM_NR; j++) tile[i * GEMM_NR + j] += a * bp[k * GEMM_NR + j];
        }
#endif
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float* p = c + (size_t)i * ldc + j;
            *p = accumulate ? *p + tile[i * GEMM_NR + j] : tile[i * GEMM_NR + j];
        }
}

// Pack op(A)[i0:i0+mc, k0:k0+kc] as MR-row panels, k-major, zero padded.
static void pack_a(float* dst, const float* A, int lda, int transA, int i0, int mc, int k0, int kc) {
    for (int ip = 0; ip < mc; ip += GEMM_MR)
        for (int k = 0; k < kc; k++)
            for (int i = 0; i < GEMM_MR; i++) {
                int r = i0 + ip + i, col = k0 + k;
                *dst++ = ip + i < mc ? (transA ? A[(size_t)col * lda + r] : A[(size_t)r * lda + col]) : 0.0f;
            }
}
// Pack one NR-column panel of op(B)[k0:k0+kc, j0:j0+nc] (nc <= NR), k-major, zero padded.
static void pack_b(float* dst, const float* B, int ldb, int transB, int k0, int kc, int j0, int nc) {
    for (int k = 0; k < kc; k++)
        for (int j = 0; j < GEMM_NR; j++) {
            int col = j0 + j, row = k0 + k;
            *dst++ = j < nc ? (transB ? B[(size_t)col * ldb + row] : B[(size_t)row * ldb + col]) : 0.0f;
        }
}

// Packing buffers: one shared B block, one A block per thread; allocated once on first
// use (never inside a step after that).
static float* gemm_pack_a[GEMM_MAX_THREADS];
static float* gemm_pack_b;

// C[M x N] (row stride ldc) = (accumulate ? C : 0) + op(A) op(B), where
// op(A)[i][k] = transA ? A[k*lda + i] : A[i*lda + k] and likewise for B.
// Loop order (Goto/BLIS): for each NC-wide column block and KC-deep slice, pack the B
// block once (threads split its panels), then threads split the rows: each packs its
// MC x KC block of A and runs the micro-kernel over the tile. Each element of C is
// summed over K in the same order whatever the thread count, so results are bitwise
// reproducible.
static void gemm(int M, int N, int K, const float* A, int lda, int transA, const float* B, int ldb, int transB,
                 float* C, int ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate) for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    if (!gemm_pack_b) gemm_pack_b = (float*)xmalloc(sizeof(float) * GEMM_KC * GEMM_NC);
    // Row tiles of at most MC rows, but at least 4 per thread so small M still balances.
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    int mc_max = (int)round_up((size_t)((M + 4 * threads - 1) / (4 * threads)), GEMM_MR);
    if (mc_max > GEMM_MC) mc_max = GEMM_MC;
    int m_tiles = (M + mc_max - 1) / mc_max;
    for (int j0 = 0; j0 < N; j0 += GEMM_NC) {
        int nc = N - j0 < GEMM_NC ? N - j0 : GEMM_NC, n_panels = (nc + GEMM_NR - 1) / GEMM_NR;
        for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
            int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC, acc = accumulate || k0 > 0;
#pragma omp parallel
            {
#pragma omp for schedule(static)
                for (int p = 0; p < n_panels; p++) {
                    int jp = p * GEMM_NR;
                    pack_b(gemm_pack_b + (size_t)jp * kc, B, ldb, transB, k0, kc, j0 + jp, nc - jp < GEMM_NR ? nc - jp : GEMM_NR);
                }
                int th = 0;
#ifdef _OPENMP
                th = omp_get_thread_num();
#endif
                if (th >= GEMM_MAX_THREADS) fail("gemm: more than %d OpenMP threads", GEMM_MAX_THREADS);
                if (!gemm_pack_a[th]) gemm_pack_a[th] = (float*)xmalloc(sizeof(float) * GEMM_MC * GEMM_KC);
                float* pa = gemm_pack_a[th];
#pragma omp for schedule(dynamic, 1)
                for (int it = 0; it < m_tiles; it++) {
                    int i0 = it * mc_max, mc = M - i0 < mc_max ? M - i0 : mc_max;
                    pack_a(pa, A, lda, transA, i0, mc, k0, kc);
                    for (int jp = 0; jp < nc; jp += GEMM_NR)
                        for (int ip = 0; ip < mc; ip += GEMM_MR) {
                            int mr = mc - ip < GEMM_MR ? mc - ip : GEMM_MR, nr = nc - jp < GEMM_NR ? nc - jp : GEMM_NR;
                            gemm_micro(kc, pa + (size_t)ip * kc, gemm_pack_b + (size_t)jp * kc,
                                       C + (size_t)(i0 + ip) * ldc + j0 + jp, ldc, mr, nr, acc);
                        }
                }
            }
        }
    }
}

// out (N x OC) = inp (N x IC) @ weight^T (weight is OC x IC, PyTorch layout) + bias (OC, may be NULL).
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC) {
    gemm(N, OC, IC, inp, IC, 0, weight, IC, 1, out, OC, 0);
    if (bias) {
#pragma omp parallel for
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) out[(size_t)i * OC + o] += bias[o];
    }
}

// dinp (N x IC) += dout @ weight; dweight (OC x IC) += dout^T @ inp; dbias (OC) += column sums of dout.
// dinp may be NULL (nothing flows further back).
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int IC, int OC) {
    if (dinp) gemm(N, IC, OC, dout, OC, 0, weight, IC, 0, dinp, IC, 1);
    gemm(OC, IC, N, dout, OC, 1, inp, IC, 0, dweight, IC, 1);
    if (dbias) {
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            float s = 0;
            for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o];
            dbias[o] += s;
        }
    }
}

// Single-core fp32 peak, measured: independent FMA chains on one thread (as many as
// hide the FMA latency), 2 FLOPs per lane per FMA; the best of 8 short trials, so a
// trial the scheduler interrupts does not count. The machine's peak is this times the cores.
static double measure_core_peak_flops(void) {
    double best = 0;
    for (int trial = 0; trial < 8; trial++) {
        long iters = 0;
        double t0 = now_s(), t;
#if VLEN
        enum { CHAINS = 10 };
        vec acc[CHAINS], x = vbcast(1.0000001f), y = vbcast(0.9999999f);
        for (int i = 0; i < CHAINS; i++) acc[i] = vbcast((float)i);
        do {
            for (int r = 0; r < 2000; r++)
                for (int i = 0; i < CHAINS; i++) acc[i] = vfma(acc[i], x, y);
            iters += 2000;
        } while ((t = now_s() - t0) < 0.01);
        float sink[VLEN], total = 0;
        for (int i = 0; i < CHAINS; i++) { vstore(sink, acc[i]); total += sink[0]; }
        if (total == 12345.678f) printf(" ");  // keep the chains alive
        double flops = 2.0 * VLEN * CHAINS * iters / t;
#else
        volatile float a = 1.0f;
        do { for (int r = 0; r < 100000; r++) a = a * 1.0000001f + 0.0000001f; iters += 100000; } while ((t = now_s() - t0) < 0.01);
        double flops = 2.0 * iters / t;
#endif
        if (flops > best) best = flops;
    }
    return best;
}

// ----------------------------------------------------------------------------
// LayerNorm over C channels (GPT-2) with eps 1e-5; mean and rstd are kept for backward.

static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(v / C + 1e-5f);
        float* o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m, rstd[i] = s;
    }
}

// Column sums sum_i a[i*C+c]*b[i*C+c] (b NULL: sum of a) added into acc. One thread
// per column block, rows in order, so the sum does not depend on the thread count.
static void column_dot_accumulate(float* acc, const float* a, const float* b, int N, int C) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 16) {
        float s[16] = {0};
        int cn = C - c0 < 16 ? C - c0 : 16;
        for (int i = 0; i < N; i++)
            for (int c = 0; c < cn; c++) s[c] += a[(size_t)i * C + c0 + c] * (b ? b[(size_t)i * C + c0 + c] : 1.0f);
        for (int c = 0; c < cn; c++) acc[c0 + c] += s[c];
    }
}

// xhat[i][c] = (inp - mean) * rstd, written to scratch (N x C), for the weight gradient.
static void layernorm_backward(float* dinp, float* dweight, float* dbias, float* scratch, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        const float* d = dout + (size_t)i * C;
        float* xh = scratch + (size_t)i * C;
        float dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int c = 0; c < C; c++) {
            xh[c] = (x[c] - mean[i]) * rstd[i];
            float dn = weight[c] * d[c];
            dnorm_mean += dn;
            dnorm_norm_mean += dn * xh[c];
        }
        dnorm_mean /= C, dnorm_norm_mean /= C;
        float* di = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) di[c] += (weight[c] * d[c] - dnorm_mean - xh[c] * dnorm_norm_mean) * rstd[i];
    }
    column_dot_accumulate(dweight, dout, scratch, N, C);
    if (dbias) column_dot_accumulate(dbias, dout, NULL, N, C);
}

// ----------------------------------------------------------------------------
// RMSNorm (LLaMA): out = x / sqrt(mean(x^2) + eps) * weight, eps 1e-5.

static void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float ss = 0;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + 1e-5f);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = x[c] * s * weight[c];
        rstd[i] = s;
    }
}

static void rmsnorm_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        const float* d = dout + (size_t)i * C;
        float* xh = scratch + (size_t)i * C;
        float dot = 0;
        for (int c = 0; c < C; c++) {
            xh[c] = x[c] * rstd[i];
            dot += weight[c] * d[c] * xh[c];
        }
        dot /= C;
        for (int c = 0; c < C; c++) dinp[(size_t)i * C + c] += (weight[c] * d[c] - xh[c] * dot) * rstd[i];
    }
    column_dot_accumulate(dweight, dout, scratch, N, C);
}

// ----------------------------------------------------------------------------
// Rotary position embeddings (Su et al. 2021), applied in place to the q and k heads of
// qkv rows (N = B*T rows, row stride `stride`, position of row i is i % T). Pairs are
// (2j, 2j+1) within a head, angle pos * theta^(-2j/hd), theta = 10000.
// The backward is the rotation by the opposite angle (sign = -1).

static void rope_apply(float* qkv, int N, int T, int stride, int n_heads, int hd, float sign) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int pos = i % T;
        for (int h = 0; h < n_heads; h++) {
            float* x = qkv + (size_t)i * stride + h * hd;
            for (int j = 0; j < hd / 2; j++) {
                float ang = pos * powf(10000.0f, -2.0f * j / hd);
                float c = cosf(ang), s = sign * sinf(ang);
                float a = x[2 * j], b = x[2 * j + 1];
                x[2 * j] = a * c - b * s;
                x[2 * j + 1] = a * s + b * c;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// Causal self-attention on this rank's heads. qkv rows (B*T) hold [q: H*hd | k: KV*hd |
// v: KV*hd]; query head h uses kv head h / (H/KV) (grouped-query attention; KV = H is
// plain multi-head). att (B, H, T, T) keeps the softmax probabilities; out (B*T, H*hd).

static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int KV, int hd) {
    int stride = (H + 2 * KV) * hd, group = H / KV;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * stride + h * hd;
                float* a = att + (((size_t)b * H + h) * T + t) * T;
                int kvh = h / group;
                float maxv = -FLT_MAX;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * stride + (H + kvh) * hd;
                    float s = 0;
#pragma omp simd reduction(+ : s)
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0;
                for (int t2 = 0; t2 <= t; t2++) sum += (a[t2] = expf(a[t2] - maxv));
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
                float* o = out + ((size_t)b * T + t) * H * hd + h * hd;
                for (int d = 0; d < hd; d++) o[d] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * stride + (H + KV + kvh) * hd;
#pragma omp simd
                    for (int d = 0; d < hd; d++) o[d] += a[t2] * v[d];
                }
            }
}

// datt: scratch of the shape of att (B, H, T, T).
// Parallel over (b, kv head) so the query heads that share a kv head never race on dk/dv.
static void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                               int B, int T, int H, int KV, int hd) {
    int stride = (H + 2 * KV) * hd, group = H / KV;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int kvh = 0; kvh < KV; kvh++)
            for (int h = kvh * group; h < (kvh + 1) * group; h++)
                for (int t = 0; t < T; t++) {
                    const float* a = att + (((size_t)b * H + h) * T + t) * T;
                    float* da = datt + (((size_t)b * H + h) * T + t) * T;
                    const float* d = dout + ((size_t)b * T + t) * H * hd + h * hd;
                    const float* q = qkv + ((size_t)b * T + t) * stride + h * hd;
                    float* dq = dqkv + ((size_t)b * T + t) * stride + h * hd;
                    // out = att @ v: datt = dout . v, dv += att * dout
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* v = qkv + ((size_t)b * T + t2) * stride + (H + KV + kvh) * hd;
                        float* dv = dqkv + ((size_t)b * T + t2) * stride + (H + KV + kvh) * hd;
                        float s = 0;
#pragma omp simd reduction(+ : s)
                        for (int dd = 0; dd < hd; dd++) s += v[dd] * d[dd], dv[dd] += a[t2] * d[dd];
                        da[t2] = s;
                    }
                    // softmax backward: dpre = att * (datt - sum(att * datt))
                    float dot = 0;
                    for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dpre = a[t2] * (da[t2] - dot) * scale;
                        const float* k = qkv + ((size_t)b * T + t2) * stride + (H + kvh) * hd;
                        float* dk = dqkv + ((size_t)b * T + t2) * stride + (H + kvh) * hd;
#pragma omp simd
                        for (int dd = 0; dd < hd; dd++) dq[dd] += dpre * k[dd], dk[dd] += dpre * q[dd];
                    }
                }
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2), and SwiGLU (LLaMA): out = silu(gate) * up with
// inp rows [gate (F) | up (F)].

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)
// tanh(u) = 1 - 2 / (exp(2u) + 1): one expf instead of libm's slower tanhf (absolute error ~1e-7).
static inline float tanh_fast(float u) { return u > 15.0f ? 1.0f : u < -15.0f ? -1.0f : 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }
static void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}
static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], th = tanh_fast(GELU_SCALE * (x + 0.044715f * x * x * x));
        float sech2 = 1.0f - th * th;
        dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x));
    }
}

static void swiglu_forward(float* out, const float* inp, int N, int F) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            float g = inp[(size_t)i * 2 * F + j], u = inp[(size_t)i * 2 * F + F + j];
            out[(size_t)i * F + j] = g / (1.0f + expf(-g)) * u;
        }
}
static void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            float g = inp[(size_t)i * 2 * F + j], u = inp[(size_t)i * 2 * F + F + j], d = dout[(size_t)i * F + j];
            float sig = 1.0f / (1.0f + expf(-g));
            dinp[(size_t)i * 2 * F + j] += d * u * sig * (1.0f + g * (1.0f - sig));
            dinp[(size_t)i * 2 * F + F + j] += d * g * sig;
        }
}

static void residual_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
static void add_inplace(float* a, const float* b, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) a[i] += b[i];
}
static void add_bias(float* out, const float* bias, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] += bias[c];
}

// ----------------------------------------------------------------------------
// Vocabulary-parallel embedding: this rank holds rows [v0, v0+Vl) of wte. Rows of
// tokens outside that range come out 0 here; the tp reduction adds the other ranks'.

static void embedding_forward(float* out, const int* tokens, const float* wte, int N, int C, int v0, int Vl) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int r = tokens[i] - v0;
        float* o = out + (size_t)i * C;
        if (r >= 0 && r < Vl) memcpy(o, wte + (size_t)r * C, sizeof(float) * C);
        else memset(o, 0, sizeof(float) * C);
    }
}
// Parallel over channel blocks, rows in order: deterministic and race-free when tokens repeat.
static void embedding_backward(float* dwte, const int* tokens, const float* dout, int N, int C, int v0, int Vl) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 16) {
        int cn = C - c0 < 16 ? C - c0 : 16;
        for (int i = 0; i < N; i++) {
            int r = tokens[i] - v0;
            if (r < 0 || r >= Vl) continue;
            for (int c = 0; c < cn; c++) dwte[(size_t)r * C + c0 + c] += dout[(size_t)i * C + c0 + c];
        }
    }
}

// Position embedding of rows [row0, row0+N) of a (B*T)-row batch: out += wpe[row % T].
static void position_forward(float* out, const float* wpe, int N, int row0, int T, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] += wpe[(size_t)((row0 + i) % T) * C + c];
}
static void position_backward(float* dwpe, const float* dout, int N, int row0, int T, int C) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 16) {
        int cn = C - c0 < 16 ? C - c0 : 16;
        for (int i = 0; i < N; i++)
            for (int c = 0; c < cn; c++) dwpe[(size_t)((row0 + i) % T) * C + c0 + c] += dout[(size_t)i * C + c0 + c];
    }
}

// ----------------------------------------------------------------------------
// Vocabulary-parallel softmax cross-entropy (Megatron-LM): logits (N x Vl) are this
// rank's columns [v0, v0+Vl) of the padded vocabulary; columns >= vocab are padding
// and never take probability. The caller reduces over the tp group between the
// passes: maxes (MAX), then sums = [sum exp | target logit] (SUM). No rank ever
// holds the full row of logits.

static void crossentropy_local_max(float* maxes, const float* logits, int N, int Vl, int v0, int vocab) {
    int vn = vocab - v0 < Vl ? vocab - v0 : Vl;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float m = -FLT_MAX;
        for (int j = 0; j < vn; j++) if (logits[(size_t)i * Vl + j] > m) m = logits[(size_t)i * Vl + j];
        maxes[i] = m;
    }
}
// sums[i] = sum_j exp(l_ij - max_i); sums[N + i] = logit of the target if it is here, else 0.
static void crossentropy_local_sums(float* sums, const float* logits, const float* maxes, const int* targets,
                                    int N, int Vl, int v0, int vocab) {
    int vn = vocab - v0 < Vl ? vocab - v0 : Vl;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float s = 0;
        for (int j = 0; j < vn; j++) s += expf(logits[(size_t)i * Vl + j] - maxes[i]);
        int r = targets[i] - v0;
        sums[i] = s;
        sums[N + i] = (r >= 0 && r < Vl) ? logits[(size_t)i * Vl + r] : 0.0f;
    }
}
// losses[i] = log(sum) + max - target logit; if dlogits != NULL, logits are replaced in place
// by dloss/dlogit = (softmax - onehot) * dloss_scale (fused forward+backward, as llm.c does).
static void crossentropy_finish(float* losses, float* dlogits, const float* maxes, const float* sums,
                                const int* targets, int N, int Vl, int v0, int vocab, float dloss_scale) {
    int vn = vocab - v0 < Vl ? vocab - v0 : Vl;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        losses[i] = logf(sums[i]) + maxes[i] - sums[N + i];
        if (!dlogits) continue;
        float* d = dlogits + (size_t)i * Vl;
        float inv = 1.0f / sums[i];
        for (int j = 0; j < Vl; j++) d[j] = j < vn ? expf(d[j] - maxes[i]) * inv * dloss_scale : 0.0f;
        int r = targets[i] - v0;
        if (r >= 0 && r < Vl) d[r] -= dloss_scale;
    }
}

// ----------------------------------------------------------------------------
// AdamW (Loshchilov & Hutter) with bias correction; t is the 1-based step. Decoupled
// weight decay applies where decay != 0 (matrices), as in GPT-2 / llm.c's GPU build.

static void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int decay, float grad_scale, int t) {
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    float wd = decay ? weight_decay : 0.0f;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mhat = m[i] / c1, vhat = v[i] / c2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
    }
}

#endif
