// backend/cpu/norm.h: LayerNorm (GPT-2) and RMSNorm (LLaMA) over rows of C channels, eps 1e-5:
// out (N x C), the row statistics mean / rstd (N) kept for the backward; the backward
// writes dinp (N x C) and adds into dweight, dbias (C), with an N x C scratch.
#ifndef CPU_NORM_H
#define CPU_NORM_H

#include "backend/cpu/simd.h"
#include "backend/cpu/elementwise.h"  // column_dot_accumulate

// LayerNorm over C channels (GPT-2) with eps 1e-5; mean and rstd are kept for backward.
// Rows are independent (one thread each); within a row the sums run over VLEN lanes.

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

// xhat[i][c] = (inp - mean) * rstd, written to scratch (N x C), for the weight gradient.
static void layernorm_backward(float* dinp, float* dweight, float* dbias, float* scratch, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C) {
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

#endif
