// backend/cpu/norm.h: LayerNorm (GPT-2) and RMSNorm (LLaMA) over rows of C channels, eps 1e-5:
// out (N x C), the row statistics mean / rstd (N) kept for the backward (mean NULL: RMSNorm);
// the residual add fused with the norm after it; the backward writes dinp = dres + the norm's
// input gradient and adds into dweight, dbias (C), with no scratch.
#ifndef CPU_NORM_H
#define CPU_NORM_H

#include "backend/cpu/simd.h"

// One row: o = (x - mean) rstd weight + bias (LayerNorm, mean != NULL) or x rstd weight
// (RMSNorm); the row's statistics into *mean, *rstd. The sums run over VLEN lanes.
static inline void norm_row(float* o, float* mean, float* rstd, const float* x, const float* weight,
                            const float* bias, int C) {
    vec sum = vzero(), sq = vzero();
    float m = 0.0f;
    if (mean) {
        ROW_LOOP(c, w, C) sum = vadd(sum, vloadn(x + c, w));
        m = vsum(sum) / C;
        ROW_LOOP(c, w, C) {
            vec d = vfirst(vsub(vloadn(x + c, w), vbcast(m)), w);
            sq = vfma(d, d, sq);
        }
    } else {
        ROW_LOOP(c, w, C) {
            vec xv = vloadn(x + c, w);
            sq = vfma(xv, xv, sq);
        }
    }
    float s = 1.0f / sqrtf(vsum(sq) / C + 1e-5f);
    if (mean) {
        ROW_LOOP(c, w, C) {
            vec xh = vmul(vsub(vloadn(x + c, w), vbcast(m)), vbcast(s));
            vstoren(o + c, vfma(xh, vloadn(weight + c, w), vloadn(bias + c, w)), w);
        }
        *mean = m;
    } else {
        ROW_LOOP(c, w, C) vstoren(o + c, vmul(vmul(vloadn(x + c, w), vbcast(s)), vloadn(weight + c, w)), w);
    }
    *rstd = s;
}

// Rows are independent (one thread each). mean NULL: RMSNorm (bias unused).
static void norm_rows_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        norm_row(out + (size_t)i * C, mean ? mean + i : NULL, rstd + i, inp + (size_t)i * C, weight, bias, C);
}
static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C) {
    norm_rows_forward(out, mean, rstd, inp, weight, bias, N, C);
}
static void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C) {
    norm_rows_forward(out, NULL, rstd, inp, weight, NULL, N, C);
}

// res = a + b (+ rbias, may be NULL), then out = norm(res) as norm_rows_forward: each row's sum is
// written and normalized by one thread while it is in L1, so the residual stream is read from
// memory once instead of twice. Bit for bit the unfused pair: (a + b) + rbias, then norm_row.
static void residual_norm_rows_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                  const float* rbias, const float* weight, const float* bias, int N, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        size_t r0 = (size_t)i * C;
        ROW_LOOP(c, w, C) {
            vec v = vadd(vloadn(a + r0 + c, w), vloadn(b + r0 + c, w));
            vstoren(res + r0 + c, rbias ? vadd(v, vloadn(rbias + c, w)) : v, w);
        }
        norm_row(out + r0, mean ? mean + i : NULL, rstd + i, res + r0, weight, bias, C);
    }
}

static void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                                      const float* b, const float* rbias, const float* weight, const float* bias, int N,
                                      int C) {
    residual_norm_rows_forward(res, out, mean, rstd, a, b, rbias, weight, bias, N, C);
}
static void residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                                     const float* rbias, const float* weight, int N, int C) {
    residual_norm_rows_forward(res, out, NULL, rstd, a, b, rbias, weight, NULL, N, C);
}

// The backward, with xhat = (x - mean) rstd (RMSNorm: x rstd) and dn = weight * dout:
//     dinp = dres + rstd (dn - mean(dn) - xhat mean(dn xhat))   (RMSNorm: no mean(dn) term)
//     dweight += column sums of dout xhat,  dbias += column sums of dout
// dres NULL: 0; it may be dinp (in place). Two passes over each row, one thread per row: its two
// sums, then dinp (the row is still in L1); then one pass over the columns for dweight and dbias
// together, xhat formed again from x, mean and rstd (the same products as the row passes: no
// N x C scratch), rows in order within a column so the sums do not depend on the thread count.
static void norm_rows_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        size_t r0 = (size_t)i * C;
        const float *x = inp + r0, *d = dout + r0;
        vec m = vbcast(mean ? mean[i] : 0.0f), s = vbcast(rstd[i]), dn_sum = vzero(), dn_xh_sum = vzero();
        ROW_LOOP(c, w, C) {
            vec xhat = vmul(vsub(vloadn(x + c, w), m), s), dn = vmul(vloadn(weight + c, w), vloadn(d + c, w));
            dn_sum = vadd(dn_sum, dn);
            dn_xh_sum = vfma(dn, xhat, dn_xh_sum);
        }
        vec dn_mean = vbcast(mean ? vsum(dn_sum) / C : 0.0f), dn_xh_mean = vbcast(vsum(dn_xh_sum) / C);
        ROW_LOOP(c, w, C) {
            vec xhat = vmul(vsub(vloadn(x + c, w), m), s), dn = vmul(vloadn(weight + c, w), vloadn(d + c, w));
            vec t = vsub(vsub(dn, dn_mean), vmul(xhat, dn_xh_mean));  // dinp = t rstd + dres, one rounding
            vstoren(dinp + r0 + c, vfma(t, s, dres ? vloadn(dres + r0 + c, w) : vzero()), w);
        }
    }
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 2 * VLEN) {
        int w0 = C - c0 < VLEN ? C - c0 : VLEN, w1 = C - c0 - VLEN < VLEN ? C - c0 - VLEN : VLEN;
        vec sw0 = vzero(), sw1 = vzero(), sb0 = vzero(), sb1 = vzero();
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C + c0, *d = dout + (size_t)i * C + c0;
            vec m = vbcast(mean ? mean[i] : 0.0f), s = vbcast(rstd[i]), d0 = vloadn(d, w0);
            sw0 = vfma(d0, vmul(vsub(vloadn(x, w0), m), s), sw0);
            sb0 = vadd(sb0, d0);
            if (w1 > 0) {
                vec d1 = vloadn(d + VLEN, w1);
                sw1 = vfma(d1, vmul(vsub(vloadn(x + VLEN, w1), m), s), sw1);
                sb1 = vadd(sb1, d1);
            }
        }
        vstoren(dweight + c0, vadd(vloadn(dweight + c0, w0), sw0), w0);
        if (w1 > 0) vstoren(dweight + c0 + VLEN, vadd(vloadn(dweight + c0 + VLEN, w1), sw1), w1);
        if (dbias) vstoren(dbias + c0, vadd(vloadn(dbias + c0, w0), sb0), w0);
        if (dbias && w1 > 0) vstoren(dbias + c0 + VLEN, vadd(vloadn(dbias + c0 + VLEN, w1), sb1), w1);
    }
}
static void layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C) {
    norm_rows_backward(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
static void rmsnorm_backward(float* dinp, const float* dres, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C) {
    norm_rows_backward(dinp, dres, dweight, NULL, dout, inp, weight, NULL, rstd, N, C);
}

#endif
