// backend/cpu/simd.h: the SIMD layer every CPU kernel is written in. vec holds VLEN floats
// (AVX-512: 16, AVX2+FMA: 8, plain C: 1, chosen at build time); vexp is exp over a vec;
// ROW_LOOP walks the lanes of a row of n floats (full vectors, then the tail).
#ifndef CPU_SIMD_H
#define CPU_SIMD_H

#include <float.h>
#include "base/common.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

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
static inline vec vloadn(const float* p, int n) {
    return n == VLEN ? vload(p) : _mm512_maskz_loadu_ps(vmask_first(n), p);
}
static inline void vstoren(float* p, vec v, int n) {
    if (n == VLEN)
        vstore(p, v);
    else
        _mm512_mask_storeu_ps(p, vmask_first(n), v);
}
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
#define vscale_pow2(a, n) \
    _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23)))
static inline float vsum(vec v) { return _mm512_reduce_add_ps(v); }
static inline float vmax_all(vec v) { return _mm512_reduce_max_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define VLEN 8
typedef __m256 vec;
#define vzero() _mm256_setzero_ps()
#define vbcast(x) _mm256_set1_ps(x)
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
static inline __m256i vmask_first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vec vloadn(const float* p, int n) { return n == VLEN ? vload(p) : _mm256_maskload_ps(p, vmask_first(n)); }
static inline void vstoren(float* p, vec v, int n) {
    if (n == VLEN)
        vstore(p, v);
    else
        _mm256_maskstore_ps(p, vmask_first(n), v);
}
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
#define vscale_pow2(a, n) \
    _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(a), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)))
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

// The benchmark prints it (inline: the trainers do not use it, so no unused-function warning).
static inline const char* simd_name(void) { return VLEN == 16 ? "AVX-512" : VLEN == 8 ? "AVX2+FMA" : "plain C"; }

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

// Lanes of row[0, n) in the loops below: full vectors, then a tail of n % VLEN.
#define ROW_LOOP(c, w, n) \
    for (int c = 0, w = (n) < VLEN ? (n) : VLEN; c < (n); c += VLEN, w = (n) - c < VLEN ? (n) - c : VLEN)

#endif
