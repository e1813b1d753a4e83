// backend/cpu/adamw.h: the optimizer's kernels: AdamW on n fp32 parameters with their
// moments m, v (n each), and the sum of squares of n floats in double (the gradient norm).
#ifndef CPU_ADAMW_H
#define CPU_ADAMW_H

#include "backend/cpu/simd.h"

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
