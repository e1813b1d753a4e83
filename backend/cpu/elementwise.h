// backend/cpu/elementwise.h: the element-wise CPU kernels and the column sums.
//   residual_forward, add_inplace (n floats), add_bias (N x C rows += bias (C));
//   column_dot_accumulate: acc (C) += column sums of a (N x C), or of a * b;
//   gelu_forward / _backward (n floats, GPT-2's tanh approximation),
//   swiglu_forward / _backward (N rows of [gate (F) | up (F)] -> N x F, LLaMA).
// Backward functions accumulate (+=) into dinp.
#ifndef CPU_ELEMENTWISE_H
#define CPU_ELEMENTWISE_H

#include "backend/cpu/simd.h"

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
            if (w1 > 0)
                s1 = br ? vfma(vloadn(ar + VLEN, w1), vloadn(br + VLEN, w1), s1) : vadd(s1, vloadn(ar + VLEN, w1));
        }
        vstoren(acc + c0, vadd(vloadn(acc + c0, w0), s0), w0);
        if (w1 > 0) vstoren(acc + c0 + VLEN, vadd(vloadn(acc + c0 + VLEN, w1), s1), w1);
    }
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
            vec g = vloadn(gate + j, w), u = vloadn(up + j, w), dv = vloadn(d + j, w), sig = sigmoid(g),
                one = vbcast(1.0f);
            // d silu(g) / dg = sig (1 + g (1 - sig))
            vec dsilu = vmul(sig, vfma(g, vsub(one, sig), one));
            vstoren(dgate + j, vfma(vmul(dv, u), dsilu, vloadn(dgate + j, w)), w);
            vstoren(dup + j, vfma(vmul(dv, g), sig, vloadn(dup + j, w)), w);
        }
    }
}

#endif
