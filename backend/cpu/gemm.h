// backend/cpu/gemm.h: the packed fp32 GEMM, C (M x N) (+)= op(A) (M x K) op(B) (K x N), and
// the matmuls of the layers on it: out (N x OC) = inp (N x IC) @ weight^T + bias with weight
// OC x IC (PyTorch's layout), and its two backward passes (dinp; dweight, dbias +=).
// measure_core_peak_flops: one core's fp32 peak, measured (the MFU's denominator).
#ifndef CPU_GEMM_H
#define CPU_GEMM_H

#include "backend/cpu/simd.h"
#include "backend/cpu/elementwise.h"  // add_bias, column_dot_accumulate

// Matmul: a packed, register-blocked GEMM (the BLIS/Goto structure): C (M x N) +=
// op(A) (M x K) * op(B) (K x N). Blocks of A and B are packed into contiguous panels so
// the micro-kernel streams them, and the micro-kernel keeps an MR x NR tile of C in
// vector registers.
//
// Blocking, for this project's machine (AMD EPYC Zen 2: 32 KiB L1d and 512 KiB L2 per core,
// two 256-bit FMA pipes with 5-cycle latency, 2 loads per cycle):
// - micro-tile MR x NR = 6 x 2 vectors (6 x 16 with AVX2): 12 accumulators, enough to keep
//   both FMA pipes busy (2 x 5 in flight), in 12 of the 16 vector registers; per k it loads
//   2 vectors of B and broadcasts 6 values of A for 12 FMAs, within the 2 loads per cycle.
// - KC = 4096 / NR (256 with AVX2): a packed B micro-panel (KC x NR floats) is 16 KiB and
//   stays in L1 while the micro-kernel sweeps the A block past it.
// - MC = 256: a packed A block (MC x KC floats, 256 KiB; its last panel padded to MR rows)
//   stays in the core's L2. The step's matmuls have M = B*T = 256 rows (forward, input
//   gradient), so the A block is packed once per KC slice and each B micro-panel serves
//   256 / 6 micro-tiles.
// The plain C build uses the same loops with a 6 x 16 tile of scalars.
#define GEMM_MR 6
#define GEMM_NR (VLEN > 1 ? 2 * VLEN : 16)
#define GEMM_KC (4096 / GEMM_NR)
#define GEMM_MC 256

// c (MR x NR, row stride ldc) (+)= ap (kc x MR panel) * bp (kc x NR panel); only the
// top-left mr x nr part of the tile is written. Each element is one chain of FMAs over k.
static void gemm_micro(int kc, const float* ap, const float* bp, float* c, int ldc, int mr, int nr, int accumulate) {
    float tile[GEMM_MR * GEMM_NR];
#if VLEN > 1
    vec acc[GEMM_MR][2];
    for (int i = 0; i < GEMM_MR; i++) {
        acc[i][0] = acc[i][1] = vzero();
        // C is read and written after the k loop: start fetching its tile now
        _mm_prefetch((const char*)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char*)(c + (size_t)i * ldc + GEMM_NR - 1), _MM_HINT_T0);
    }
    for (int k = 0; k < kc; k++) {
        vec b0 = vload(bp + k * GEMM_NR), b1 = vload(bp + k * GEMM_NR + VLEN);
        for (int i = 0; i < GEMM_MR; i++) {
            vec a = vbcast(ap[k * GEMM_MR + i]);
            acc[i][0] = vfma(a, b0, acc[i][0]);
            acc[i][1] = vfma(a, b1, acc[i][1]);
        }
    }
    if (mr == GEMM_MR && nr == GEMM_NR) {  // a full tile straight from the registers
        for (int i = 0; i < GEMM_MR; i++)
            for (int j = 0; j < 2; j++) {
                float* p = c + (size_t)i * ldc + j * VLEN;
                vstore(p, accumulate ? vadd(vload(p), acc[i][j]) : acc[i][j]);
            }
        return;
    }
    for (int i = 0; i < GEMM_MR; i++)
        for (int j = 0; j < 2; j++) vstore(tile + i * GEMM_NR + j * VLEN, acc[i][j]);
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

#if VLEN > 1
// Transpose the 8 x 8 block of floats in r[0..7] in registers (8 unpacks, 8 shuffles, 8 lane swaps).
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}
#endif

// Pack op(A)[i0:i0+mc, k0:k0+kc] as MR-row panels, each k-major (kc x MR), zero padded.
static void pack_a(float* dst, const float* A, int lda, int transA, int i0, int mc, int k0, int kc) {
    if (transA) {  // row k of A holds op(A)[.][k]: read it once, scatter MR floats to each panel
        for (int k = 0; k < kc; k++) {
            const float* src = A + (size_t)(k0 + k) * lda + i0;
            for (int ip = 0; ip < mc; ip += GEMM_MR) {
                float* d = dst + (size_t)ip * kc + k * GEMM_MR;
                if (mc - ip >= GEMM_MR) memcpy(d, src + ip, sizeof(float) * GEMM_MR);
                else for (int i = 0; i < GEMM_MR; i++) d[i] = ip + i < mc ? src[ip + i] : 0.0f;
            }
        }
        return;
    }
    for (int ip = 0; ip < mc; ip += GEMM_MR) {
        int mr = mc - ip < GEMM_MR ? mc - ip : GEMM_MR, k = 0;
        const float* src = A + (size_t)(i0 + ip) * lda + k0;
        float* d = dst + (size_t)ip * kc;
#if VLEN > 1
        if (mr == GEMM_MR)  // 8 k at a time: the 6 rows (and 2 zero rows) transposed in registers
            for (; k + 8 <= kc; k += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] = i < GEMM_MR ? _mm256_loadu_ps(src + (size_t)i * lda + k) : _mm256_setzero_ps();
                transpose8(r);
                for (int q = 0; q < 8; q++, d += GEMM_MR) {
                    _mm_storeu_ps(d, _mm256_castps256_ps128(r[q]));
                    _mm_storel_pi((__m64*)(d + 4), _mm256_extractf128_ps(r[q], 1));
                }
            }
#endif
        for (; k < kc; k++, d += GEMM_MR)
            for (int i = 0; i < GEMM_MR; i++) d[i] = i < mr ? src[(size_t)i * lda + k] : 0.0f;
    }
}

// Pack one NR-column panel of op(B)[k0:k0+kc, j0:j0+nr] (nr <= NR), k-major (kc x NR), zero padded.
static void pack_b(float* dst, const float* B, int ldb, int transB, int k0, int kc, int j0, int nr) {
    int k = 0;
    if (!transB) {  // op(B) rows are contiguous: copy NR floats per k
        for (; k < kc; k++, dst += GEMM_NR) {
            const float* src = B + (size_t)(k0 + k) * ldb + j0;
            if (nr == GEMM_NR) memcpy(dst, src, sizeof(float) * GEMM_NR);
            else for (int j = 0; j < GEMM_NR; j++) dst[j] = j < nr ? src[j] : 0.0f;
        }
        return;
    }
#if VLEN > 1
    if (nr == GEMM_NR)  // 8 k x 8 columns at a time, transposed in registers
        for (; k + 8 <= kc; k += 8, dst += 8 * GEMM_NR)
            for (int j = 0; j < GEMM_NR; j += 8) {
                __m256 r[8];
                for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(B + (size_t)(j0 + j + q) * ldb + k0 + k);
                transpose8(r);
                for (int q = 0; q < 8; q++) _mm256_storeu_ps(dst + q * GEMM_NR + j, r[q]);
            }
#endif
    for (; k < kc; k++, dst += GEMM_NR)
        for (int j = 0; j < GEMM_NR; j++) dst[j] = j < nr ? B[(size_t)(j0 + j) * ldb + k0 + k] : 0.0f;
}

// The packed A block of the calling thread (thread-local, so gemm may also run inside
// another parallel region); allocated on its first use, never inside a step after that.
static __thread float* gemm_packed_a;

// C[M x N] (row stride ldc) = (accumulate ? C : 0) + op(A) op(B), where
// op(A)[i][k] = transA ? A[k*lda + i] : A[i*lda + k] and likewise for B.
//
// The columns of C are cut into panels of NR starting at C's first 64-byte boundary, so
// full panels store whole cache lines, and two narrow ones (the columns after the last
// full panel, and those before the boundary). The work is shared out without barriers,
// each thread packing its own copies of what it reads:
// - M >= N (the weight gradients): each thread owns a run of MR-row tiles, all panels;
// - M < N (forward, input gradient: M = B*T rows): for each block of rows, the
//   (panel, tile) pairs, panel after panel, are cut into equal runs, one per thread.
// Either way no cache line of C is written by two cores when ldc keeps the rows aligned
// alike (the model's widths are multiples of 16; one shared line per row cost 10% of a
// matmul on 2 cores). For each KC slice of K in order and each block of at most MC rows,
// a thread packs the A block, then for each of its panels packs the B micro-panel into L1
// and runs the micro-kernel down its tiles. So each element of C gets one chain of FMAs
// per KC slice, added to C slice after slice, whichever thread owns it: the result does
// not depend on the thread count. Called inside a parallel region, it runs on the calling
// thread alone.
static void gemm(int M, int N, int K, const float* A, int lda, int transA, const float* B, int ldb, int transB,
                 float* C, int ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate) for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    // column panels: full ones from C's first line boundary, then the narrow tail, then the
    // lead before the boundary (a row's tail and the next row's lead share a line: one thread
    // writes both)
    int lead = (int)((64 - (uintptr_t)C % 64) % 64 / sizeof(float));
    lead = lead < N ? lead : 0;
    int n_full = (N - lead) / GEMM_NR, tail = (N - lead) % GEMM_NR;
    int n_panels = n_full + (tail > 0) + (lead > 0), m_tiles = (M + GEMM_MR - 1) / GEMM_MR;
#pragma omp parallel if (!omp_in_parallel())
    {
        int th = 0, n_th = 1;
#ifdef _OPENMP
        th = omp_get_thread_num(), n_th = omp_get_num_threads();
#endif
        int split_rows = M >= N, r_lo = 0, r_hi = M;
        if (split_rows) {
            r_lo = (int)((long)m_tiles * th / n_th) * GEMM_MR, r_hi = (int)((long)m_tiles * (th + 1) / n_th) * GEMM_MR;
            r_hi = r_hi < M ? r_hi : M;
        }
        // this thread's rows in equal blocks of <= MC
        int rows = r_hi - r_lo, m_blocks = (rows + GEMM_MC - 1) / GEMM_MC;
        int mc_max = m_blocks ? (int)round_up((size_t)((rows + m_blocks - 1) / m_blocks), GEMM_MR) : 0;
        if (rows > 0 && !gemm_packed_a)
            gemm_packed_a = (float*)xmalloc(sizeof(float) * round_up(GEMM_MC, GEMM_MR) * GEMM_KC);
        float bp[GEMM_KC * GEMM_NR] __attribute__((aligned(64)));
        for (int k0 = 0; k0 < K && rows > 0; k0 += GEMM_KC) {
            int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC, acc = accumulate || k0 > 0;
            for (int i0 = r_lo; i0 < r_hi; i0 += mc_max) {
                int mc = r_hi - i0 < mc_max ? r_hi - i0 : mc_max, tiles = (mc + GEMM_MR - 1) / GEMM_MR;
                long units = (long)n_panels * tiles;  // (panel, tile) pairs of this block
                long u_lo = split_rows ? 0 : units * th / n_th, u_hi = split_rows ? units : units * (th + 1) / n_th;
                if (u_lo == u_hi) continue;
                pack_a(gemm_packed_a, A, lda, transA, i0, mc, k0, kc);
                for (long u = u_lo; u < u_hi;) {
                    int p = (int)(u / tiles), t0 = (int)(u % tiles),
                        t1 = u_hi - u < tiles - t0 ? t0 + (int)(u_hi - u) : tiles;
                    int is_lead = p == n_full + (tail > 0), jp = is_lead ? 0 : lead + p * GEMM_NR;
                    int nr = is_lead ? lead : p < n_full ? GEMM_NR : tail;
                    pack_b(bp, B, ldb, transB, k0, kc, jp, nr);
                    for (int ip = t0 * GEMM_MR; ip < t1 * GEMM_MR && ip < mc; ip += GEMM_MR)
                        gemm_micro(kc, gemm_packed_a + (size_t)ip * kc, bp, C + (size_t)(i0 + ip) * ldc + jp, ldc,
                                   mc - ip < GEMM_MR ? mc - ip : GEMM_MR, nr, acc);
                    u += t1 - t0;
                }
            }
        }
    }
}

// out (N x OC) = inp (N x IC) @ weight^T (weight is OC x IC, PyTorch layout) + bias (OC, may be NULL).
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                           int OC) {
    gemm(N, OC, IC, inp, IC, 0, weight, IC, 1, out, OC, 0);
    if (bias) add_bias(out, bias, N, OC);
}

// The backward in its two passes. dinp (N x IC) = (accumulate ? dinp : 0) + dout @ weight.
static void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int IC, int OC,
                                  int accumulate) {
    gemm(N, IC, OC, dout, OC, 0, weight, IC, 0, dinp, IC, accumulate);
}
// dweight (OC x IC) += dout^T @ inp; dbias (OC, may be NULL) += column sums of dout.
static void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N, int IC,
                                   int OC) {
    gemm(OC, IC, N, dout, OC, 1, inp, IC, 0, dweight, IC, 1);
    if (dbias) column_dot_accumulate(dbias, dout, NULL, N, OC);
}
// Both: dinp (may be NULL: nothing flows further back) +=, dweight +=, dbias +=. For the
// tests and the benchmark (inline: the trainer runs the two passes apart, so it does not use it).
static inline void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                   const float* weight, int N, int IC, int OC) {
    if (dinp) matmul_backward_input(dinp, dout, weight, N, IC, OC, 1);
    matmul_backward_weight(dweight, dbias, dout, inp, N, IC, OC);
}

// Single-core fp32 peak, measured: independent FMA chains on one thread (as many as
// hide the FMA latency), 2 FLOPs per lane per FMA; the best of 8 short trials, so a
// trial the scheduler interrupts does not count. The machine's peak is this times the cores.
static double measure_core_peak_flops(void) {
    double best = 0;
    for (int trial = 0; trial < 8; trial++) {
        long iters = 0;
        double t0 = now_s(), t;
#if VLEN > 1
        enum { CHAINS = 10 };
        vec acc[CHAINS], x = vbcast(1.0000001f), y = vbcast(0.9999999f);
        for (int i = 0; i < CHAINS; i++) acc[i] = vbcast((float)i);
        do {
            for (int r = 0; r < 2000; r++)
                for (int i = 0; i < CHAINS; i++) acc[i] = vfma(acc[i], x, y);
            iters += 2000;
        } while ((t = now_s() - t0) < 0.01);
        float total = 0;
        for (int i = 0; i < CHAINS; i++) total += vsum(acc[i]);
        if (total == 12345.678f) printf(" ");  // keep the chains alive
        double flops = 2.0 * VLEN * CHAINS * iters / t;
#else
        volatile float a = 1.0f;
        do {
            for (int r = 0; r < 100000; r++) a = a * 1.0000001f + 0.0000001f;
            iters += 100000;
        } while ((t = now_s() - t0) < 0.01);
        double flops = 2.0 * iters / t;
#endif
        if (flops > best) best = flops;
    }
    return best;
}

#endif
