// kernels_cpu.h: the fp32 CPU layer kernels, one forward/backward pair per layer.
// They are the reference every other path is checked against (the GPU kernels in
// the GPU tests, the finite-difference checks in test_gpt.c). Shapes are in the
// argument lists: N rows (tokens), C channels, OC/IC output/input channels, B batch,
// T sequence, H heads, hd head size. Backward functions accumulate (+=) into their
// weight gradients and input gradients, as llm.c does. C and C++ compatible.
//
// Every kernel is threaded with OpenMP, and no result depends on the thread count: each
// output element is computed by one thread in an order fixed by the shapes alone (the
// bitwise resume of a killed run relies on it; test_gpt.c checks 1 against 2 threads).
#ifndef KERNELS_CPU_H
#define KERNELS_CPU_H

#include <float.h>
#include "model/config.h"  // AttnBlock (and runtime/common.h)
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// ----------------------------------------------------------------------------
// SIMD: a vector of VLEN floats and the operations the kernels use, chosen at build time
// from what the compiler targets: AVX-512 (16 lanes), AVX2+FMA (8 lanes) or plain C (one
// lane: scalar code, left to the compiler). vloadn / vstoren move the first n <= VLEN
// floats (a row's tail; the other lanes load as 0), vfirst keeps the first n lanes and
// zeroes the rest, vsum / vmax_all reduce the lanes in a fixed order.

#if defined(__AVX512F__)
#define VLEN 16
typedef __m512 vec;
#define vzero() _mm512_setzero_ps()
#define vbcast(x) _mm512_set1_ps(x)
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
static inline __mmask16 vmask_first(int n) { return (__mmask16)((1u << n) - 1); }
static inline vec vloadn(const float* p, int n) { return n == VLEN ? vload(p) : _mm512_maskz_loadu_ps(vmask_first(n), p); }
static inline void vstoren(float* p, vec v, int n) { if (n == VLEN) vstore(p, v); else _mm512_mask_storeu_ps(p, vmask_first(n), v); }
static inline vec vfirst(vec v, int n) { return _mm512_maskz_mov_ps(vmask_first(n), v); }
#define vadd(a, b) _mm512_add_ps(a, b)
#define vsub(a, b) _mm512_sub_ps(a, b)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vdiv(a, b) _mm512_div_ps(a, b)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vmax(a, b) _mm512_max_ps(a, b)
#define vmin(a, b) _mm512_min_ps(a, b)
#define vsqrt(a) _mm512_sqrt_ps(a)
#define vround(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vscale_pow2(a, n) _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23)))
static inline float vsum(vec v) { return _mm512_reduce_add_ps(v); }
static inline float vmax_all(vec v) { return _mm512_reduce_max_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define VLEN 8
typedef __m256 vec;
#define vzero() _mm256_setzero_ps()
#define vbcast(x) _mm256_set1_ps(x)
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
static inline __m256i vmask_first(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
static inline vec vloadn(const float* p, int n) { return n == VLEN ? vload(p) : _mm256_maskload_ps(p, vmask_first(n)); }
static inline void vstoren(float* p, vec v, int n) { if (n == VLEN) vstore(p, v); else _mm256_maskstore_ps(p, vmask_first(n), v); }
static inline vec vfirst(vec v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(vmask_first(n))); }
#define vadd(a, b) _mm256_add_ps(a, b)
#define vsub(a, b) _mm256_sub_ps(a, b)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vdiv(a, b) _mm256_div_ps(a, b)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vmax(a, b) _mm256_max_ps(a, b)
#define vmin(a, b) _mm256_min_ps(a, b)
#define vsqrt(a) _mm256_sqrt_ps(a)
#define vround(a) _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vscale_pow2(a, n) _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(a), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)))
static inline float vsum(vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vmax_all(vec v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
#else
#define VLEN 1
typedef float vec;
static inline vec vzero(void) { return 0.0f; }
static inline vec vbcast(float x) { return x; }
static inline vec vload(const float* p) { return *p; }
static inline void vstore(float* p, vec v) { *p = v; }
static inline vec vloadn(const float* p, int n) { return *p; }
static inline void vstoren(float* p, vec v, int n) { *p = v; }
static inline vec vfirst(vec v, int n) { return v; }
static inline vec vadd(vec a, vec b) { return a + b; }
static inline vec vsub(vec a, vec b) { return a - b; }
static inline vec vmul(vec a, vec b) { return a * b; }
static inline vec vdiv(vec a, vec b) { return a / b; }
static inline vec vfma(vec a, vec b, vec c) { return a * b + c; }
static inline vec vmax(vec a, vec b) { return a > b ? a : b; }
static inline vec vmin(vec a, vec b) { return a < b ? a : b; }
static inline vec vsqrt(vec a) { return sqrtf(a); }
static inline vec vround(vec a) { return nearbyintf(a); }
static inline vec vscale_pow2(vec a, vec n) { return ldexpf(a, (int)n); }
static inline float vsum(vec v) { return v; }
static inline float vmax_all(vec v) { return v; }
#endif

static const char* simd_name(void) { return VLEN == 16 ? "AVX-512" : VLEN == 8 ? "AVX2+FMA" : "plain C"; }

// exp(x), relative error ~2e-7: x = n ln2 + r with |r| <= ln2/2, exp(r) by Cephes' expf
// polynomial, times 2^n put into the exponent bits. x is clamped to [-86, 88], so
// exp(-inf) gives ~4e-38 rather than 0 and exp(inf) 1.7e38; a NaN stays NaN (max/min
// return their second operand when one is NaN), so a diverged run is still caught.
static inline vec vexp(vec x) {
    x = vmin(vbcast(88.0f), vmax(vbcast(-86.0f), x));
    vec n = vround(vmul(x, vbcast(1.44269504088896341f)));
    vec r = vfma(n, vbcast(-0.693359375f), x);  // ln2 in two parts: r = x - n ln2 to ~1e-10
    r = vfma(n, vbcast(2.12194440e-4f), r);
    vec p = vbcast(1.9875691500e-4f);
    p = vfma(p, r, vbcast(1.3981999507e-3f));
    p = vfma(p, r, vbcast(8.3334519073e-3f));
    p = vfma(p, r, vbcast(4.1665795894e-2f));
    p = vfma(p, r, vbcast(1.6666665459e-1f));
    p = vfma(p, r, vbcast(5.0000001201e-1f));
    p = vfma(vmul(p, r), r, vadd(r, vbcast(1.0f)));  // 1 + r + r^2 p(r)
    return vscale_pow2(p, n);
}

// ----------------------------------------------------------------------------
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
                for (int i = 0; i < 8; i++) r[i] = i < GEMM_MR ? _mm256_loadu_ps(src + (size_t)i * lda + k) : _mm256_setzero_ps();
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
        int rows = r_hi - r_lo, m_blocks = (rows + GEMM_MC - 1) / GEMM_MC;  // this thread's rows in equal blocks of <= MC
        int mc_max = m_blocks ? (int)round_up((size_t)((rows + m_blocks - 1) / m_blocks), GEMM_MR) : 0;
        if (rows > 0 && !gemm_packed_a) gemm_packed_a = (float*)xmalloc(sizeof(float) * round_up(GEMM_MC, GEMM_MR) * GEMM_KC);
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
                    int p = (int)(u / tiles), t0 = (int)(u % tiles), t1 = u_hi - u < tiles - t0 ? t0 + (int)(u_hi - u) : tiles;
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

static void add_bias(float* out, const float* bias, int N, int C);
static void column_dot_accumulate(float* acc, const float* a, const float* b, int N, int C);

// out (N x OC) = inp (N x IC) @ weight^T (weight is OC x IC, PyTorch layout) + bias (OC, may be NULL).
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC) {
    gemm(N, OC, IC, inp, IC, 0, weight, IC, 1, out, OC, 0);
    if (bias) add_bias(out, bias, N, OC);
}

// The backward in its two passes. dinp (N x IC) = (accumulate ? dinp : 0) + dout @ weight.
static void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int IC, int OC, int accumulate) {
    gemm(N, IC, OC, dout, OC, 0, weight, IC, 0, dinp, IC, accumulate);
}
// dweight (OC x IC) += dout^T @ inp; dbias (OC, may be NULL) += column sums of dout.
static void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N, int IC, int OC) {
    gemm(OC, IC, N, dout, OC, 1, inp, IC, 0, dweight, IC, 1);
    if (dbias) column_dot_accumulate(dbias, dout, NULL, N, OC);
}
// Both: dinp (may be NULL: nothing flows further back) +=, dweight +=, dbias +=.
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
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
        do { for (int r = 0; r < 100000; r++) a = a * 1.0000001f + 0.0000001f; iters += 100000; } while ((t = now_s() - t0) < 0.01);
        double flops = 2.0 * iters / t;
#endif
        if (flops > best) best = flops;
    }
    return best;
}

// ----------------------------------------------------------------------------
// LayerNorm over C channels (GPT-2) with eps 1e-5; mean and rstd are kept for backward.
// Rows are independent (one thread each); within a row the sums run over VLEN lanes.

// Lanes of row[0, n) in the loops below: full vectors, then a tail of n % VLEN.
#define ROW_LOOP(c, w, n) for (int c = 0, w = (n) < VLEN ? (n) : VLEN; c < (n); c += VLEN, w = (n) - c < VLEN ? (n) - c : VLEN)

static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float* o = out + (size_t)i * C;
        vec sum = vzero(), sq = vzero();
        ROW_LOOP(c, w, C) sum = vadd(sum, vloadn(x + c, w));
        float m = vsum(sum) / C;
        ROW_LOOP(c, w, C) {
            vec d = vfirst(vsub(vloadn(x + c, w), vbcast(m)), w);
            sq = vfma(d, d, sq);
        }
        float s = 1.0f / sqrtf(vsum(sq) / C + 1e-5f);
        ROW_LOOP(c, w, C) {
            vec xh = vmul(vsub(vloadn(x + c, w), vbcast(m)), vbcast(s));
            vstoren(o + c, vfma(xh, vloadn(weight + c, w), vloadn(bias + c, w)), w);
        }
        mean[i] = m, rstd[i] = s;
    }
}

// Column sums sum_i a[i*C+c]*b[i*C+c] (b NULL: sum of a) added into acc. One thread per
// block of 2 vectors of columns (a cache line with AVX2), rows in order, so the sum does not
// depend on the thread count.
static void column_dot_accumulate(float* acc, const float* a, const float* b, int N, int C) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 2 * VLEN) {
        int w0 = C - c0 < VLEN ? C - c0 : VLEN, w1 = C - c0 - VLEN < VLEN ? C - c0 - VLEN : VLEN;
        vec s0 = vzero(), s1 = vzero();
        for (int i = 0; i < N; i++) {
            const float* ar = a + (size_t)i * C + c0;
            const float* br = b ? b + (size_t)i * C + c0 : NULL;
            s0 = br ? vfma(vloadn(ar, w0), vloadn(br, w0), s0) : vadd(s0, vloadn(ar, w0));
            if (w1 > 0) s1 = br ? vfma(vloadn(ar + VLEN, w1), vloadn(br + VLEN, w1), s1) : vadd(s1, vloadn(ar + VLEN, w1));
        }
        vstoren(acc + c0, vadd(vloadn(acc + c0, w0), s0), w0);
        if (w1 > 0) vstoren(acc + c0 + VLEN, vadd(vloadn(acc + c0 + VLEN, w1), s1), w1);
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
        float* di = dinp + (size_t)i * C;
        vec m = vbcast(mean[i]), s = vbcast(rstd[i]), dn_sum = vzero(), dn_xh_sum = vzero();
        ROW_LOOP(c, w, C) {
            vec xhat = vmul(vsub(vloadn(x + c, w), m), s), dn = vmul(vloadn(weight + c, w), vloadn(d + c, w));
            vstoren(xh + c, xhat, w);
            dn_sum = vadd(dn_sum, dn);
            dn_xh_sum = vfma(dn, xhat, dn_xh_sum);
        }
        vec dnorm_mean = vbcast(vsum(dn_sum) / C), dnorm_norm_mean = vbcast(vsum(dn_xh_sum) / C);
        ROW_LOOP(c, w, C) {
            vec dn = vmul(vloadn(weight + c, w), vloadn(d + c, w));
            vec g = vmul(vsub(vsub(dn, dnorm_mean), vmul(vloadn(xh + c, w), dnorm_norm_mean)), s);
            vstoren(di + c, vadd(vloadn(di + c, w), g), w);
        }
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
        float* o = out + (size_t)i * C;
        vec sq = vzero();
        ROW_LOOP(c, w, C) {
            vec xv = vloadn(x + c, w);
            sq = vfma(xv, xv, sq);
        }
        float s = 1.0f / sqrtf(vsum(sq) / C + 1e-5f);
        ROW_LOOP(c, w, C) vstoren(o + c, vmul(vmul(vloadn(x + c, w), vbcast(s)), vloadn(weight + c, w)), w);
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
        float* di = dinp + (size_t)i * C;
        vec s = vbcast(rstd[i]), dot = vzero();
        ROW_LOOP(c, w, C) {
            vec xhat = vmul(vloadn(x + c, w), s);
            vstoren(xh + c, xhat, w);
            dot = vfma(vmul(vloadn(weight + c, w), vloadn(d + c, w)), xhat, dot);
        }
        vec dot_mean = vbcast(vsum(dot) / C);
        ROW_LOOP(c, w, C) {
            vec g = vmul(vsub(vmul(vloadn(weight + c, w), vloadn(d + c, w)), vmul(vloadn(xh + c, w), dot_mean)), s);
            vstoren(di + c, vadd(vloadn(di + c, w), g), w);
        }
    }
    column_dot_accumulate(dweight, dout, scratch, N, C);
}

// ----------------------------------------------------------------------------
// Rotary position embeddings (Su et al. 2021), applied in place to the q and k heads of
// qkv rows (N = B*T rows, row stride `stride`, position of row i is pos[i % T]). Pairs are
// (2j, 2j+1) within a head, angle pos * theta^(-2j/hd), theta = 10000.
// The backward is the rotation by the opposite angle (sign = -1).

static void rope_apply(float* qkv, int N, const int* positions, int T, int stride, int n_heads, int hd, float sign) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int pos = positions[i % T];
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
// Causal attention by blocks (FlashAttention's algorithm, Dao et al. 2022): the queries of
// one block of rows against the keys of another (model/config.h AttnBlock), never a T x T
// matrix. The forward merges each block into a running output o (B*Ts rows x Ha*hd,
// normalized) and its log-sum-exp lse (B x Ha x Ts): for a block with row maximum mx, sum
// of exponentials l and unnormalized output y,
//     lse' = log(e^lse + e^(mx + log l)),  o' = o e^(lse - lse') + y e^(mx - lse'),
// so the blocks may come in any order (context parallelism's ring). The backward of a
// block needs only the final lse: P = exp(scale q k^T - lse), D = rowsum(dout * out),
//     dv += P^T dout,  dS = P (dout v^T - D) scale,  dq += dS k,  dk += dS^T q.
// Query head h uses kv head h / (Ha/KVa) (grouped-query attention). The products are
// gemm() calls on the calling thread (one head per thread), over tiles of ATT_ROWS queries
// whose keys end where the tile's last query is; every sum runs in the same order whatever
// the thread count.
#define ATT_ROWS 32

// The keys of the block that query row t (of the block) may see: [0, n).
static int att_keys_seen(const AttnBlock* a, int t) {
    int n = a->q_pos + t - a->k_pos + 1;
    return n < 0 ? 0 : n > a->nk ? a->nk : n;
}

// s[0, n) = exp(scale * s - shift), zero in [n, keys); returns the sum over [0, n).
static float att_exp_row(float* s, int n, int keys, float scale, float shift) {
    vec vscale = vbcast(scale), vshift = vbcast(shift), sum = vzero();
    ROW_LOOP(c, w, n) {
        vec e = vfirst(vexp(vsub(vmul(vloadn(s + c, w), vscale), vshift)), w);
        vstoren(s + c, e, w);
        sum = vadd(sum, e);
    }
    for (int c = n; c < keys; c++) s[c] = 0.0f;
    return vsum(sum);
}

static void attention_block_forward(float* o, int o_ld, float* lse, const float* q, const float* kv, const AttnBlock* a) {
    int Ha = a->Ha, hd = a->hd, group = Ha / a->KVa;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < Ha; h++) {
            size_t q0 = (size_t)b * a->Ts + a->q_row, k0 = (size_t)b * a->Ts + a->k_row;
            const float* qh = q + q0 * a->q_ld + h * hd;
            const float* k = kv + k0 * a->kv_ld + (h / group) * hd;
            const float* v = kv + k0 * a->kv_ld + (a->KVa + h / group) * hd;
            float* oh = o + q0 * o_ld + h * hd;
            float* lh = lse + ((size_t)b * Ha + h) * a->Ts + a->q_row;
            float* S = (float*)xmalloc(sizeof(float) * ATT_ROWS * (a->nk + hd));
            float* Y = S + (size_t)ATT_ROWS * a->nk;
            for (int t0 = 0; t0 < a->nq; t0 += ATT_ROWS) {
                int rows = a->nq - t0 < ATT_ROWS ? a->nq - t0 : ATT_ROWS, keys = att_keys_seen(a, t0 + rows - 1);
                gemm(rows, keys, hd, qh + (size_t)t0 * a->q_ld, a->q_ld, 0, k, a->kv_ld, 1, S, keys, 0);
                float mx[ATT_ROWS], l[ATT_ROWS];
                for (int t = 0; t < rows; t++) {
                    int n = att_keys_seen(a, t0 + t);
                    float* s = S + (size_t)t * keys;
                    mx[t] = -INFINITY;
                    for (int j = 0; j < n; j++) mx[t] = s[j] > mx[t] ? s[j] : mx[t];
                    mx[t] *= scale;
                    l[t] = n ? att_exp_row(s, n, keys, scale, mx[t]) : (att_exp_row(s, 0, keys, scale, 0), 0.0f);
                }
                gemm(rows, hd, keys, S, keys, 0, v, a->kv_ld, 0, Y, hd, 0);  // y = exp(..) v
                for (int t = 0; t < rows; t++) {
                    float* ot = oh + (size_t)(t0 + t) * o_ld;
                    float* yt = Y + (size_t)t * hd;
                    float old = a->init ? -INFINITY : lh[t0 + t];
                    if (l[t] == 0.0f) {  // no key of this block is visible
                        if (a->init) { for (int d = 0; d < hd; d++) ot[d] = 0.0f; lh[t0 + t] = -INFINITY; }
                        continue;
                    }
                    float blk = mx[t] + logf(l[t]);
                    float top = old > blk ? old : blk, merged = top + logf(expf(old - top) + expf(blk - top));
                    float keep = old == -INFINITY ? 0.0f : expf(old - merged), add = expf(mx[t] - merged);
                    for (int d = 0; d < hd; d++) ot[d] = (keep ? ot[d] * keep : 0.0f) + yt[d] * add;
                    lh[t0 + t] = merged;
                }
            }
            free(S);
        }
}

// Parallel over (b, kv head), so the query heads that share a kv head add into dk and dv
// one after the other (in order) and never race. dq, dkv accumulate (+=); dkv rows hold
// dk (KVa heads) then dv, like kv.
static void attention_block_backward(float* dq, int dq_ld, float* dkv, int dkv_ld, const float* q, const float* kv,
                                     const float* dout, const float* out, int o_ld, const float* lse, const AttnBlock* a) {
    int Ha = a->Ha, KVa = a->KVa, hd = a->hd, group = Ha / KVa;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < a->B; b++)
        for (int kvh = 0; kvh < KVa; kvh++) {
            size_t q0 = (size_t)b * a->Ts + a->q_row, k0 = (size_t)b * a->Ts + a->k_row;
            const float* k = kv + k0 * a->kv_ld + kvh * hd;
            const float* v = kv + k0 * a->kv_ld + (KVa + kvh) * hd;
            float* dk = dkv + k0 * dkv_ld + kvh * hd;
            float* dv = dkv + k0 * dkv_ld + (KVa + kvh) * hd;
            float* P = (float*)xmalloc(sizeof(float) * 2 * ATT_ROWS * a->nk);
            float* dS = P + (size_t)ATT_ROWS * a->nk;
            for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                const float* qh = q + q0 * a->q_ld + h * hd;
                const float* doh = dout + q0 * o_ld + h * hd;
                const float* oh = out + q0 * o_ld + h * hd;
                const float* lh = lse + ((size_t)b * Ha + h) * a->Ts + a->q_row;
                float* dqh = dq + q0 * dq_ld + h * hd;
                for (int t0 = 0; t0 < a->nq; t0 += ATT_ROWS) {
                    int rows = a->nq - t0 < ATT_ROWS ? a->nq - t0 : ATT_ROWS, keys = att_keys_seen(a, t0 + rows - 1);
                    if (keys == 0) continue;
                    gemm(rows, keys, hd, qh + (size_t)t0 * a->q_ld, a->q_ld, 0, k, a->kv_ld, 1, P, keys, 0);
                    gemm(rows, keys, hd, doh + (size_t)t0 * o_ld, o_ld, 0, v, a->kv_ld, 1, dS, keys, 0);  // dout v^T
                    for (int t = 0; t < rows; t++) {
                        float* p = P + (size_t)t * keys;
                        float* ds = dS + (size_t)t * keys;
                        const float *dot = doh + (size_t)(t0 + t) * o_ld, *ot = oh + (size_t)(t0 + t) * o_ld;
                        float D = 0.0f;
                        for (int d = 0; d < hd; d++) D += dot[d] * ot[d];
                        att_exp_row(p, att_keys_seen(a, t0 + t), keys, scale, lh[t0 + t]);
                        vec vD = vbcast(D), vscale = vbcast(scale);
                        ROW_LOOP(c, w, keys) vstoren(ds + c, vmul(vmul(vloadn(p + c, w), vsub(vloadn(ds + c, w), vD)), vscale), w);
                    }
                    gemm(rows, hd, keys, dS, keys, 0, k, a->kv_ld, 0, dqh + (size_t)t0 * dq_ld, dq_ld, 1);
                    gemm(keys, hd, rows, dS, keys, 1, qh + (size_t)t0 * a->q_ld, a->q_ld, 0, dk, dkv_ld, 1);
                    gemm(keys, hd, rows, P, keys, 1, doh + (size_t)t0 * o_ld, o_ld, 0, dv, dkv_ld, 1);
                }
            }
            free(P);
        }
}

// The whole causal sequence as one block: qkv rows (B*T) hold [q: H*hd | k: KV*hd | v: KV*hd];
// out (B*T x H*hd), lse (B x H x T); dqkv is overwritten.
static AttnBlock attention_whole(int B, int T, int H, int KV, int hd) {
    AttnBlock a = {B, T, H, KV, hd, (H + 2 * KV) * hd, (H + 2 * KV) * hd, 0, T, 0, 0, T, 0, 1};
    return a;
}
static void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int KV, int hd) {
    AttnBlock a = attention_whole(B, T, H, KV, hd);
    attention_block_forward(out, H * hd, lse, qkv, qkv + H * hd, &a);
}
static void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                               int B, int T, int H, int KV, int hd) {
    AttnBlock a = attention_whole(B, T, H, KV, hd);
    memset(dqkv, 0, sizeof(float) * B * T * a.q_ld);
    attention_block_backward(dqkv, a.q_ld, dqkv + H * hd, a.q_ld, qkv, qkv + H * hd, dout, out, H * hd, lse, &a);
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2), and SwiGLU (LLaMA): out = silu(gate) * up with
// inp rows [gate (F) | up (F)].

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)
// tanh(sqrt(2/pi) (x + 0.044715 x^3)), as 1 - 2 / (exp(2u) + 1): one exp (absolute error ~1e-7)
static inline vec gelu_tanh(vec x) {
    vec u = vmul(vbcast(GELU_SCALE), vfma(vmul(vbcast(0.044715f), x), vmul(x, x), x));
    return vsub(vbcast(1.0f), vdiv(vbcast(2.0f), vadd(vexp(vadd(u, u)), vbcast(1.0f))));
}
// Element-wise loops run over blocks of VLEN elements (the last one partial).
static void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i += VLEN) {
        int w = n - i < VLEN ? (int)(n - i) : VLEN;
        vec x = vloadn(inp + i, w);
        vstoren(out + i, vmul(vmul(vbcast(0.5f), x), vadd(vbcast(1.0f), gelu_tanh(x))), w);
    }
}
// d/dx = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i += VLEN) {
        int w = n - i < VLEN ? (int)(n - i) : VLEN;
        vec x = vloadn(inp + i, w), th = gelu_tanh(x), half = vbcast(0.5f), one = vbcast(1.0f);
        vec sech2 = vsub(one, vmul(th, th));
        vec inner = vmul(vbcast(GELU_SCALE), vfma(vbcast(3.0f * 0.044715f), vmul(x, x), one));
        vec grad = vfma(vmul(vmul(half, x), sech2), inner, vmul(half, vadd(one, th)));
        vstoren(dinp + i, vfma(vloadn(dout + i, w), grad, vloadn(dinp + i, w)), w);
    }
}

static inline vec sigmoid(vec g) { return vdiv(vbcast(1.0f), vadd(vbcast(1.0f), vexp(vsub(vzero(), g)))); }
static void swiglu_forward(float* out, const float* inp, int N, int F) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *gate = inp + (size_t)i * 2 * F, *up = gate + F;
        ROW_LOOP(j, w, F) {
            vec g = vloadn(gate + j, w);
            vstoren(out + (size_t)i * F + j, vmul(vmul(g, sigmoid(g)), vloadn(up + j, w)), w);
        }
    }
}
static void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *gate = inp + (size_t)i * 2 * F, *up = gate + F, *d = dout + (size_t)i * F;
        float *dgate = dinp + (size_t)i * 2 * F, *dup = dgate + F;
        ROW_LOOP(j, w, F) {
            vec g = vloadn(gate + j, w), u = vloadn(up + j, w), dv = vloadn(d + j, w), sig = sigmoid(g), one = vbcast(1.0f);
            // d silu(g) / dg = sig (1 + g (1 - sig))
            vec dsilu = vmul(sig, vfma(g, vsub(one, sig), one));
            vstoren(dgate + j, vfma(vmul(dv, u), dsilu, vloadn(dgate + j, w)), w);
            vstoren(dup + j, vfma(vmul(dv, g), sig, vloadn(dup + j, w)), w);
        }
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
static void position_forward(float* out, const float* wpe, int N, int row0, const int* pos, int T, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] += wpe[(size_t)pos[(row0 + i) % T] * C + c];
}
static void position_backward(float* dwpe, const float* dout, int N, int row0, const int* pos, int T, int C) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 16) {
        int cn = C - c0 < 16 ? C - c0 : 16;
        for (int i = 0; i < N; i++)
            for (int c = 0; c < cn; c++) dwpe[(size_t)pos[(row0 + i) % T] * C + c0 + c] += dout[(size_t)i * C + c0 + c];
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
        const float* l = logits + (size_t)i * Vl;
        vec m = vbcast(-FLT_MAX);
        int j = 0;
        for (; j + VLEN <= vn; j += VLEN) m = vmax(m, vload(l + j));
        float mx = vmax_all(m);
        for (; j < vn; j++) mx = l[j] > mx ? l[j] : mx;
        maxes[i] = mx;
    }
}
// sums[i] = sum_j exp(l_ij - max_i); sums[N + i] = logit of the target if it is here, else 0.
static void crossentropy_local_sums(float* sums, const float* logits, const float* maxes, const int* targets,
                                    int N, int Vl, int v0, int vocab) {
    int vn = vocab - v0 < Vl ? vocab - v0 : Vl;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* l = logits + (size_t)i * Vl;
        vec mx = vbcast(maxes[i]), s = vzero();
        ROW_LOOP(j, w, vn) s = vadd(s, vfirst(vexp(vsub(vloadn(l + j, w), mx)), w));
        int r = targets[i] - v0;
        sums[i] = vsum(s);
        sums[N + i] = (r >= 0 && r < Vl) ? l[r] : 0.0f;
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
        vec mx = vbcast(maxes[i]), scale = vbcast(1.0f / sums[i] * dloss_scale);
        ROW_LOOP(j, w, vn) vstoren(d + j, vmul(vexp(vsub(vloadn(d + j, w), mx)), scale), w);
        for (int j = vn > 0 ? vn : 0; j < Vl; j++) d[j] = 0.0f;
        int r = targets[i] - v0;
        if (r >= 0 && r < Vl) d[r] -= dloss_scale;
    }
}

// ----------------------------------------------------------------------------
// AdamW (Loshchilov & Hutter) with bias correction; t is the 1-based step. Decoupled
// weight decay applies where decay != 0 (matrices), as in GPT-2 / llm.c's GPU build.
// Memory-bound (28 bytes per parameter): one pass, VLEN parameters at a time.

static void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int decay, float grad_scale, int t) {
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    vec b1 = vbcast(beta1), b2 = vbcast(beta2), one_b1 = vbcast(1.0f - beta1), one_b2 = vbcast(1.0f - beta2);
    vec vc1 = vbcast(c1), vc2 = vbcast(c2), veps = vbcast(eps), wd = vbcast(decay ? weight_decay : 0.0f);
    vec neg_lr = vbcast(-lr), gs = vbcast(grad_scale);
#pragma omp parallel for
    for (size_t i = 0; i < n; i += VLEN) {
        int w = n - i < VLEN ? (int)(n - i) : VLEN;
        vec g = vmul(vloadn(grad + i, w), gs), p = vloadn(param + i, w);
        vec mi = vfma(b1, vloadn(m + i, w), vmul(one_b1, g));
        vec vi = vfma(b2, vloadn(v + i, w), vmul(vmul(one_b2, g), g));
        vec step = vdiv(vdiv(mi, vc1), vadd(vsqrt(vdiv(vi, vc2)), veps));  // mhat / (sqrt(vhat) + eps)
        vstoren(m + i, mi, w);
        vstoren(v + i, vi, w);
        vstoren(param + i, vfma(neg_lr, vfma(wd, p, step), p), w);
    }
}

// Sum of x[i]^2 in double (the gradient norm). The sum runs over 64 fixed ranges in
// parallel, each in order over VLEN lanes, and the 64 partial sums are added in order:
// the same arithmetic whatever the thread count.
static double sum_squares(const float* x, size_t n) {
    enum { RANGES = 64 };
    double partial[RANGES];
#pragma omp parallel for
    for (int r = 0; r < RANGES; r++) {
        size_t lo = n * r / RANGES, hi = n * (r + 1) / RANGES, i = lo;
        double s = 0;
        vec acc[4] = {vzero(), vzero(), vzero(), vzero()};  // float lanes over short runs, then double
        while (i < hi) {
            size_t run = hi - i < 64 * VLEN ? hi - i : 64 * VLEN;
            for (size_t j = 0; j < run; j += VLEN) {
                int w = run - j < VLEN ? (int)(run - j) : VLEN;
                vec xv = vloadn(x + i + j, w);
                acc[(j / VLEN) % 4] = vfma(xv, xv, acc[(j / VLEN) % 4]);
            }
            for (int a = 0; a < 4; a++) s += vsum(acc[a]), acc[a] = vzero();
            i += run;
        }
        partial[r] = s;
    }
    double total = 0;
    for (int r = 0; r < RANGES; r++) total += partial[r];
    return total;
}

#endif
