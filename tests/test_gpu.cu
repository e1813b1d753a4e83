// test_gpu.cu: every GPU kernel of kernels_gpu.cuh against its fp32 CPU reference of
// kernels_cpu.h, forward and backward, on the same random inputs and several shapes (odd
// sizes that are not multiples of the block sizes, GQA with 4 query / 2 kv heads), and
// context parallelism's attention blocks in the order a ring rank runs them.
//
// Inputs are drawn in fp32 and rounded to bf16 once; the CPU reference gets the rounded
// values as floats, so the differences measured are the GPU's own: bf16 rounding of its
// outputs and fp32 summation order. A check passes when for every element
//     |gpu - cpu| <= atol * rms(cpu) + rtol * |cpu|
// (atol is relative to the reference's RMS so one bound fits every scale). The bounds:
//   bf16 outputs (activations, activation gradients):      rtol 2e-2, atol 1e-2
//   attention backward (bf16 dqkv, recomputed softmax):    rtol 3e-2, atol 5e-2
//     (the probabilities and dS enter their tensor-core products as bf16, as in
//     FlashAttention-2, and dS = P (dP - Dsum) cancels where dP ~ Dsum: measured over
//     seeds 1-8, the worst element is 3.8% of the reference's RMS; a wrong mask or a
//     missing term is off by 30-400%)
//   attention blocks (context parallelism): the fp32 running output as a bf16 output (its
//     probabilities enter P V as bf16), its lse as an fp32 one, the fp32 dq, dk, dv as the
//     attention backward (over seeds 1-8 the worst elements: 0.71, 0.00, 0.15 of the bound)
//   fp32 outputs of fp32 math on bf16 inputs (weight/bias
//     gradients, norm statistics, cross-entropy sums):     rtol 1e-3, atol 1e-3
//   exact operations (copies, residual rounding, max):     rtol 1e-6, atol 0
//   AdamW fp32 state:                                       rtol 1e-5, atol 1e-6
// Output: one "PASS name ..." / "FAIL name: ..." line per check, then "N passed, N failed";
// exit 1 on any failure, 2 when there is no GPU. SEED=n draws other random inputs.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90,code=[sm_90,compute_90] -I.
//   $(mpicc --showme:compile) -o test_gpu tests/test_gpu.cu -lcublasLt -lcublas $(mpicc --showme:link) -lnccl
#include "model/kernels_cpu.h"
#include "model/kernels_gpu.cuh"

static int n_pass, n_fail;
static Rng rng;

// ----------------------------------------------------------------------------
// Buffers: host and device allocations of one test, freed together at its end.

static void* host_ptrs[512];
static void* dev_ptrs[512];
static int n_host, n_dev;

static float* hbuf(size_t n) {
    if (n_host == 512) fail("test: too many host buffers");
    return (float*)(host_ptrs[n_host++] = xcalloc(n, sizeof(float)));
}
static void* dbuf(size_t bytes) {
    if (n_dev == 512) fail("test: too many device buffers");
    void* p;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 16));
    cudaCheck(cudaMemset(p, 0, bytes ? bytes : 16));
    return dev_ptrs[n_dev++] = p;
}
static void free_all(void) {
    cudaCheck(cudaDeviceSynchronize());
    for (int i = 0; i < n_host; i++) free(host_ptrs[i]);
    for (int i = 0; i < n_dev; i++) cudaCheck(cudaFree(dev_ptrs[i]));
    n_host = n_dev = 0;
}

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// n values uniform in [offset - scale, offset + scale), rounded to bf16.
static float* hrand(size_t n, float scale, float offset = 0.0f) {
    float* x = hbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(offset + scale * (2.0f * rng_uniform(&rng) - 1.0f));
    return x;
}
static float* hcopy(const float* x, size_t n) {
    float* y = hbuf(n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}
static bf16* to_bf16(const float* x, size_t n) {
    bf16* h = (bf16*)xmalloc(2 * n + 2);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(x[i]);
    bf16* d = (bf16*)dbuf(2 * n);
    cudaCheck(cudaMemcpy(d, h, 2 * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}
static float* to_f32(const float* x, size_t n) {
    float* d = (float*)dbuf(4 * n);
    cudaCheck(cudaMemcpy(d, x, 4 * n, cudaMemcpyHostToDevice));
    return d;
}
static int* to_i32(const int* x, size_t n) {
    int* d = (int*)dbuf(4 * n);
    cudaCheck(cudaMemcpy(d, x, 4 * n, cudaMemcpyHostToDevice));
    return d;
}
static float* from_bf16(const bf16* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    bf16* h = (bf16*)xmalloc(2 * n + 2);
    cudaCheck(cudaMemcpy(h, d, 2 * n, cudaMemcpyDeviceToHost));
    float* x = hbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
    free(h);
    return x;
}
static float* from_f32(const float* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    float* x = hbuf(n);
    cudaCheck(cudaMemcpy(x, d, 4 * n, cudaMemcpyDeviceToHost));
    return x;
}

// ----------------------------------------------------------------------------
// The comparison.

#define TOL_BF16 2e-2f, 1e-2f
#define TOL_ATT_BWD 3e-2f, 5e-2f
#define TOL_F32 1e-3f, 1e-3f
#define TOL_EXACT 1e-6f, 0.0f
#define TOL_ADAM 1e-5f, 1e-6f

static void check(const char* name, const float* gpu, const float* cpu, size_t n, float rtol, float atol_rel) {
    double ss = 0;
    size_t n_finite = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(cpu[i])) ss += (double)cpu[i] * cpu[i], n_finite++;  // -inf: a log-sum-exp over no key
    double rms = n_finite ? sqrt(ss / n_finite) : 0.0;
    double atol = atol_rel * (rms > 0 ? rms : 1.0);
    double worst = 0, max_err = 0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(cpu[i]) || isinf(gpu[i])) {  // only the same infinity matches one
            if (gpu[i] != cpu[i]) { bad = 1, wi = i; break; }
            continue;
        }
        double err = fabs((double)gpu[i] - cpu[i]);
        if (!(err == err)) { bad = 1, wi = i; break; }  // NaN
        double ratio = err / (atol + rtol * fabs(cpu[i]) + 1e-30);
        if (err > max_err) max_err = err;
        if (ratio > worst) worst = ratio, wi = i;
    }
    if (bad || worst > 1.0) {
        n_fail++;
        printf("FAIL %s: %s at %zu of %zu: gpu %.7g cpu %.7g (max |err| %.3g, rms %.3g, rtol %.0e atol %.0e*rms)\n",
               name, bad ? "NaN/inf" : "out of tolerance", wi, n, n ? gpu[wi] : 0.0f, n ? cpu[wi] : 0.0f, max_err, rms,
               rtol, atol_rel);
    } else {
        n_pass++;
        printf("PASS %-44s max|err| %.2e (%.2f of tol; rms %.2e, rtol %.0e atol %.0e*rms)\n", name, max_err, worst, rms,
               rtol, atol_rel);
    }
    fflush(stdout);
}

static cudaStream_t st;

// ----------------------------------------------------------------------------
// The tests, one function per kernel pair.

static void test_matmul(int N, int IC, int OC, int with_bias) {
    char nm[128];
    float* inp = hrand((size_t)N * IC, 1.0f);
    float* w = hrand((size_t)OC * IC, 0.5f);
    float* bias = with_bias ? hrand(OC, 0.5f) : NULL;
    float* out = hbuf((size_t)N * OC);
    matmul_forward(out, inp, w, bias, N, IC, OC);
    bf16 *d_inp = to_bf16(inp, (size_t)N * IC), *d_w = to_bf16(w, (size_t)OC * IC),
         *d_b = bias ? to_bf16(bias, OC) : NULL;
    bf16* d_out = (bf16*)dbuf(2 * (size_t)N * OC);
    matmul_forward_gpu(d_out, d_inp, d_w, d_b, N, IC, OC, st);
    snprintf(nm, sizeof(nm), "matmul_forward N=%d IC=%d OC=%d bias=%d", N, IC, OC, with_bias);
    check(nm, from_bf16(d_out, (size_t)N * OC), out, (size_t)N * OC, TOL_BF16);

    // backward, accumulating into nonzero gradients
    float* dout = hrand((size_t)N * OC, 1.0f);
    float* dinp = hrand((size_t)N * IC, 1.0f);
    float* dw = hrand((size_t)OC * IC, 1.0f);
    float* db = hrand(OC, 1.0f);
    bf16* d_dinp = to_bf16(dinp, (size_t)N * IC);
    float* d_dw = to_f32(dw, (size_t)OC * IC);
    float* d_db = to_f32(db, OC);
    bf16* d_dout = to_bf16(dout, (size_t)N * OC);
    matmul_backward(dinp, dw, with_bias ? db : NULL, dout, inp, w, N, IC, OC);
    matmul_backward_gpu(d_dinp, d_dw, with_bias ? d_db : NULL, d_dout, d_inp, d_w, N, IC, OC, 1, st);
    snprintf(nm, sizeof(nm), "matmul_backward dinp(+=) N=%d IC=%d OC=%d", N, IC, OC);
    check(nm, from_bf16(d_dinp, (size_t)N * IC), dinp, (size_t)N * IC, TOL_BF16);
    snprintf(nm, sizeof(nm), "matmul_backward dweight N=%d IC=%d OC=%d", N, IC, OC);
    check(nm, from_f32(d_dw, (size_t)OC * IC), dw, (size_t)OC * IC, TOL_F32);
    if (with_bias) {
        snprintf(nm, sizeof(nm), "matmul_backward dbias N=%d OC=%d", N, OC);
        check(nm, from_f32(d_db, OC), db, OC, TOL_F32);
    }
    free_all();
}

// GPT-2's fc -> GELU with GELU in the matmul's epilogue (GELU_AUX(_BIAS): act and the GELU
// input pre), and the input gradient of the next matmul through GELU (DGELU), against the
// CPU's matmul and GELU. A shape cuBLASLt cannot fuse is a SKIP line: the trainer then runs
// the separate GELU kernel (checked by test_gelu).
static void test_matmul_gelu(int N, int IC, int OC, int with_bias) {
    char nm[128];
    float* inp = hrand((size_t)N * IC, 1.0f);
    float* w = hrand((size_t)OC * IC, 0.5f);
    float* bias = with_bias ? hrand(OC, 0.5f) : NULL;
    float *pre = hbuf((size_t)N * OC), *act = hbuf((size_t)N * OC);
    matmul_forward(pre, inp, w, bias, N, IC, OC);
    gelu_forward(act, pre, (size_t)N * OC);
    bf16 *d_inp = to_bf16(inp, (size_t)N * IC), *d_w = to_bf16(w, (size_t)OC * IC),
         *d_b = bias ? to_bf16(bias, OC) : NULL;
    bf16 *d_pre = (bf16*)dbuf(2 * (size_t)N * OC), *d_act = (bf16*)dbuf(2 * (size_t)N * OC);
    snprintf(nm, sizeof(nm), "matmul_gelu_forward N=%d IC=%d OC=%d bias=%d", N, IC, OC, with_bias);
    if (!matmul_gelu_forward_gpu(d_act, d_pre, d_inp, d_w, d_b, N, IC, OC, st)) {
        printf("SKIP %s: no fused cuBLASLt algorithm\n", nm);
    } else {
        check(nm, from_bf16(d_act, (size_t)N * OC), act, (size_t)N * OC, TOL_BF16);
        snprintf(nm, sizeof(nm), "matmul_gelu_forward aux (GELU input) N=%d OC=%d", N, OC);
        check(nm, from_bf16(d_pre, (size_t)N * OC), pre, (size_t)N * OC, TOL_BF16);
    }
    // backward: the next layer maps N x IC (= GELU(pre)) to N x OC; dpre = (dout @ w) * GELU'(pre)
    float* pre_in = hrand((size_t)N * IC, 3.0f);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        pre_in[i] = bf16_round(pre_in[i]);  // both sides read the same bf16 values
    float* dout = hrand((size_t)N * OC, 1.0f);
    float *dact = hbuf((size_t)N * IC), *dpre = hbuf((size_t)N * IC), *dw = hbuf((size_t)OC * IC);
    matmul_backward(dact, dw, NULL, dout, inp, w, N, IC, OC);
    gelu_backward(dpre, pre_in, dact, (size_t)N * IC);
    bf16 *d_dout = to_bf16(dout, (size_t)N * OC), *d_pre_in = to_bf16(pre_in, (size_t)N * IC);
    bf16* d_dpre = (bf16*)dbuf(2 * (size_t)N * IC);
    snprintf(nm, sizeof(nm), "matmul_dgelu_backward N=%d IC=%d OC=%d", N, IC, OC);
    if (!matmul_dgelu_backward_gpu(d_dpre, d_dout, d_w, d_pre_in, N, IC, OC, st))
        printf("SKIP %s: no fused cuBLASLt algorithm\n", nm);
    else check(nm, from_bf16(d_dpre, (size_t)N * IC), dpre, (size_t)N * IC, TOL_BF16);
    free_all();
}
// A width that is not a multiple of 8 cannot be an aux matrix: both fused matmuls decline
// (return 0) before calling cuBLASLt, and the trainer falls back to the GELU kernel.
static void test_matmul_gelu_declines(void) {
    bf16 *x = (bf16*)dbuf(2 * 16 * 100), *w = (bf16*)dbuf(2 * 100 * 100), *y = (bf16*)dbuf(2 * 16 * 100),
         *p = (bf16*)dbuf(2 * 16 * 100);
    int fwd = matmul_gelu_forward_gpu(y, p, x, w, NULL, 16, 100, 100, st),
        bwd = matmul_dgelu_backward_gpu(y, x, w, p, 16, 100, 100, st);
    if (fwd || bwd)
        n_fail++, printf("FAIL matmul_gelu with width 100: fused anyway (forward %d, backward %d)\n", fwd, bwd);
    else n_pass++, printf("PASS %-44s\n", "matmul_gelu declines a width of 100 (not 8k)");
    free_all();
}

// The matmul plans (descriptors and algorithm kept per shape): more shapes than the cache
// holds, so plans are evicted and made again, and one shape with two different biases
// (only the bias pointer changes between calls of a plan).
static void test_matmul_plans(void) {
    int IC = 16, OC = 32, n_shapes = LT_PLANS + 12;
    float* inp = hrand((size_t)n_shapes * IC, 1.0f);
    float* w = hrand((size_t)OC * IC, 0.5f);
    float* b1 = hrand(OC, 0.5f);
    float* b2 = hrand(OC, 0.5f);
    bf16 *d_inp = to_bf16(inp, (size_t)n_shapes * IC), *d_w = to_bf16(w, (size_t)OC * IC);
    bf16 *d_b1 = to_bf16(b1, OC), *d_b2 = to_bf16(b2, OC);
    bf16* d_out = (bf16*)dbuf(2 * (size_t)n_shapes * OC);
    float* out = hbuf((size_t)n_shapes * OC);
    float worst = 0;
    int bad = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int N = 1; N <= n_shapes; N++) {
            const float* bias = (N + pass) % 2 ? b1 : b2;
            matmul_forward(out, inp, w, bias, N, IC, OC);
            matmul_forward_gpu(d_out, d_inp, d_w, (N + pass) % 2 ? d_b1 : d_b2, N, IC, OC, st);
            float* got = from_bf16(d_out, (size_t)N * OC);
            for (size_t i = 0; i < (size_t)N * OC; i++) {
                float err = fabsf(got[i] - out[i]) / (2e-2f * fabsf(out[i]) + 1e-2f);
                if (err > worst) worst = err;
                if (err > 1.0f && bad < 0) bad = N;
            }
        }
    if (bad >= 0) n_fail++, printf("FAIL matmul plans: N=%d out of tolerance (%.2f of tol)\n", bad, worst);
    else n_pass++, printf("PASS %-44s %.2f of tol\n", "matmul plans: LT_PLANS + 12 shapes twice, two biases", worst);
    free_all();
}

// GPT-2's fused residual + LayerNorm, or LLaMA's residual + RMSNorm (rms = 1).
static void test_norm(int N, int C, int rms) {
    char nm[128];
    const char* kind = rms ? "rmsnorm" : "layernorm";
    size_t n = (size_t)N * C;
    float* a = hrand(n, 1.0f);
    float* b = hrand(n, 1.0f, 0.3f);
    float* w = hrand(C, 0.2f, 1.0f);
    float* bias = hrand(C, 0.2f);
    float* resid = hbuf(n);
    for (size_t i = 0; i < n; i++) resid[i] = bf16_round(a[i] + b[i]);  // the GPU rounds the residual stream once
    float *out = hbuf(n), *mean = hbuf(N), *rstd = hbuf(N);
    if (rms) rmsnorm_forward(out, rstd, resid, w, N, C);
    else layernorm_forward(out, mean, rstd, resid, w, bias, N, C);
    bf16 *d_a = to_bf16(a, n), *d_b = to_bf16(b, n), *d_w = to_bf16(w, C), *d_bias = to_bf16(bias, C);
    bf16 *d_resid = (bf16*)dbuf(2 * n), *d_out = (bf16*)dbuf(2 * n);
    float *d_mean = (float*)dbuf(4 * N), *d_rstd = (float*)dbuf(4 * N);
    if (rms) residual_rmsnorm_forward_gpu(d_resid, d_out, d_rstd, d_a, d_b, d_w, N, C, st);
    else residual_layernorm_forward_gpu(d_resid, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, st);
    snprintf(nm, sizeof(nm), "residual_%s_forward resid N=%d C=%d", kind, N, C);
    check(nm, from_bf16(d_resid, n), resid, n, TOL_EXACT);
    snprintf(nm, sizeof(nm), "residual_%s_forward out N=%d C=%d", kind, N, C);
    check(nm, from_bf16(d_out, n), out, n, TOL_BF16);
    if (!rms) {
        snprintf(nm, sizeof(nm), "layernorm_forward mean N=%d C=%d", N, C);
        check(nm, from_f32(d_mean, N), mean, N, TOL_F32);
    }
    snprintf(nm, sizeof(nm), "%s_forward rstd N=%d C=%d", kind, N, C);
    check(nm, from_f32(d_rstd, N), rstd, N, TOL_F32);

    float* dout = hrand(n, 1.0f);
    float* dinp = hrand(n, 1.0f);
    float* dw = hrand(C, 1.0f);
    float* db = hrand(C, 1.0f);
    float* scratch = hbuf(n);
    bf16 *d_dout = to_bf16(dout, n), *d_dinp = to_bf16(dinp, n);
    float *d_dw = to_f32(dw, C), *d_db = to_f32(db, C);
    if (rms) {
        rmsnorm_backward(dinp, dw, scratch, dout, resid, w, rstd, N, C);
        rmsnorm_backward_gpu(d_dinp, d_dw, d_dout, d_resid, d_w, d_rstd, N, C, 1, st);
    } else {
        layernorm_backward(dinp, dw, db, scratch, dout, resid, w, mean, rstd, N, C);
        layernorm_backward_gpu(d_dinp, d_dw, d_db, d_dout, d_resid, d_w, d_mean, d_rstd, N, C, 1, st);
    }
    snprintf(nm, sizeof(nm), "%s_backward dinp(+=) N=%d C=%d", kind, N, C);
    check(nm, from_bf16(d_dinp, n), dinp, n, TOL_BF16);
    snprintf(nm, sizeof(nm), "%s_backward dweight N=%d C=%d", kind, N, C);
    check(nm, from_f32(d_dw, C), dw, C, TOL_F32);
    if (!rms) {
        snprintf(nm, sizeof(nm), "layernorm_backward dbias N=%d C=%d", N, C);
        check(nm, from_f32(d_db, C), db, C, TOL_F32);
    }
    free_all();
}

static void test_gelu(size_t n) {
    char nm[128];
    float* x = hrand(n, 4.0f);
    float* out = hbuf(n);
    gelu_forward(out, x, n);
    bf16* d_x = to_bf16(x, n);
    bf16* d_out = (bf16*)dbuf(2 * n);
    gelu_forward_gpu(d_out, d_x, n, st);
    snprintf(nm, sizeof(nm), "gelu_forward n=%zu", n);
    check(nm, from_bf16(d_out, n), out, n, TOL_BF16);
    float* dout = hrand(n, 1.0f);
    float* dinp = hrand(n, 1.0f);
    bf16 *d_dout = to_bf16(dout, n), *d_dinp = to_bf16(dinp, n);
    gelu_backward(dinp, x, dout, n);
    gelu_backward_gpu(d_dinp, d_x, d_dout, n, 1, st);
    snprintf(nm, sizeof(nm), "gelu_backward(+=) n=%zu", n);
    check(nm, from_bf16(d_dinp, n), dinp, n, TOL_BF16);
    // in place over dout, overwriting (how the model uses it)
    float* din2 = hbuf(n);
    gelu_backward(din2, x, dout, n);
    gelu_backward_gpu(d_dout, d_x, d_dout, n, 0, st);
    snprintf(nm, sizeof(nm), "gelu_backward(in place) n=%zu", n);
    check(nm, from_bf16(d_dout, n), din2, n, TOL_BF16);
    free_all();
}

static void test_swiglu(int N, int F) {
    char nm[128];
    size_t n = (size_t)N * F;
    float* inp = hrand(2 * n, 3.0f);
    float* out = hbuf(n);
    swiglu_forward(out, inp, N, F);
    bf16* d_inp = to_bf16(inp, 2 * n);
    bf16* d_out = (bf16*)dbuf(2 * n);
    swiglu_forward_gpu(d_out, d_inp, N, F, st);
    snprintf(nm, sizeof(nm), "swiglu_forward N=%d F=%d", N, F);
    check(nm, from_bf16(d_out, n), out, n, TOL_BF16);
    float* dout = hrand(n, 1.0f);
    float* dinp = hrand(2 * n, 1.0f);
    bf16 *d_dout = to_bf16(dout, n), *d_dinp = to_bf16(dinp, 2 * n);
    swiglu_backward(dinp, inp, dout, N, F);
    swiglu_backward_gpu(d_dinp, d_inp, d_dout, N, F, 1, st);
    snprintf(nm, sizeof(nm), "swiglu_backward(+=) N=%d F=%d", N, F);
    check(nm, from_bf16(d_dinp, 2 * n), dinp, 2 * n, TOL_BF16);
    free_all();
}

// The positions of a sequence's T rows on one rank of a zig-zag context-parallel split
// (parallel/context_parallel.h; ring rank 0 of 2): rows [0, T/2) at positions [0, T/2), the
// rest jumping to [3T/2, 2T) of a 2T-long sequence. Not the identity, so a kernel that takes
// row % T for the position fails.
static int* zigzag_positions(int T) {
    int* pos = (int*)hbuf(T);
    for (int j = 0; j < T; j++) pos[j] = j < T / 2 ? j : T + j;
    return pos;
}

static void test_rope(int B, int T, int H, int KV, int hd) {
    char nm[128];
    int stride = (H + 2 * KV) * hd, N = B * T;
    size_t n = (size_t)N * stride;
    int* pos = zigzag_positions(T);
    int* d_pos = to_i32(pos, T);
    float* x = hrand(n, 1.0f);
    float* ref = hcopy(x, n);
    rope_apply(ref, N, pos, T, stride, H + KV, hd, 1.0f);
    bf16* d_x = to_bf16(x, n);
    rope_apply_gpu(d_x, N, d_pos, T, stride, H + KV, hd, 1.0f, st);
    snprintf(nm, sizeof(nm), "rope_forward B=%d T=%d H=%d KV=%d hd=%d (zig-zag positions)", B, T, H, KV, hd);
    check(nm, from_bf16(d_x, n), ref, n, TOL_BF16);
    float* g = hrand(n, 1.0f);
    float* gref = hcopy(g, n);
    rope_apply(gref, N, pos, T, stride, H + KV, hd, -1.0f);
    bf16* d_g = to_bf16(g, n);
    rope_apply_gpu(d_g, N, d_pos, T, stride, H + KV, hd, -1.0f, st);
    snprintf(nm, sizeof(nm), "rope_backward B=%d T=%d H=%d KV=%d hd=%d (zig-zag positions)", B, T, H, KV, hd);
    check(nm, from_bf16(d_g, n), gref, n, TOL_BF16);
    free_all();
}

// The tensor-core building blocks of the attention kernels on their own, with small
// integers so every product is exact: s = a b^T through ldmatrix and mma (att_abT), then
// o = s v with s turned into A operands (att_to_a) and v read transposed (att_pv), both
// written through the accumulator layout (att_write). A misread PTX register layout gives
// wrong integers here, where the attention checks would only see large errors. (On the
// emulator this holds by construction; it means something on a GPU.)
__global__ void mma_layout_kernel(bf16* s_out, bf16* o_out, const bf16* a, const bf16* b, const bf16* v) {
    constexpr int LD = 24;  // 16 + 8, as AttShape<16>
    __shared__ __align__(16) bf16 as[16 * LD], bs[16 * LD], vs[16 * LD];
    for (int e = threadIdx.x; e < 256; e += 32)
        as[e / 16 * LD + e % 16] = a[e], bs[e / 16 * LD + e % 16] = b[e], vs[e / 16 * LD + e % 16] = v[e];
    __syncthreads();
    float s[2][4] = {}, o[2][4] = {};
    att_abT<16, LD, 2>(s, as, bs);
    uint32_t p[1][4];
    att_to_a<2>(p, s);
    att_pv<16, LD, 16>(o, p, vs);
    const float one[2] = {1.0f, 1.0f};
    att_write<2>(s_out, 16, 0, 16, s, one);
    att_write<2>(o_out, 16, 0, 16, o, one);
}
static void test_mma_layout(void) {
    float *a = hbuf(256), *b = hbuf(256), *v = hbuf(256), *s = hbuf(256), *o = hbuf(256);
    for (int i = 0; i < 256; i++)  // entries in {-1, 0, 1}: |s| <= 16, |o| <= 256, exact in bf16
        a[i] = (float)(rng_u64(&rng) % 3) - 1, b[i] = (float)(rng_u64(&rng) % 3) - 1,
        v[i] = (float)(rng_u64(&rng) % 3) - 1;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float x = 0;
            for (int k = 0; k < 16; k++) x += a[r * 16 + k] * b[c * 16 + k];
            s[r * 16 + c] = x;
        }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float x = 0;
            for (int k = 0; k < 16; k++) x += s[r * 16 + k] * v[k * 16 + c];
            o[r * 16 + c] = x;
        }
    bf16 *d_s = (bf16*)dbuf(512), *d_o = (bf16*)dbuf(512);
    mma_layout_kernel<<<1, 32, 0, st>>>(d_s, d_o, to_bf16(a, 256), to_bf16(b, 256), to_bf16(v, 256));
    launchCheck();
    check("mma_layout s = a b^T (ldmatrix, mma.m16n8k16)", from_bf16(d_s, 256), s, 256, TOL_EXACT);
    check("mma_layout o = s v (accumulators as A, ldmatrix.trans)", from_bf16(d_o, 256), o, 256, TOL_EXACT);
    free_all();
}

static void test_attention(int B, int T, int H, int KV, int hd) {
    char nm[128];
    int stride = (H + 2 * KV) * hd, N = B * T;
    size_t nqkv = (size_t)N * stride, nout = (size_t)N * H * hd, nlse = (size_t)B * H * T;
    float* qkv = hrand(nqkv, 2.0f);  // sharp enough softmax to make the probabilities matter
    float *out = hbuf(nout), *lse = hbuf(nlse);
    attention_forward(out, lse, qkv, B, T, H, KV, hd);
    bf16* d_qkv = to_bf16(qkv, nqkv);
    bf16* d_out = (bf16*)dbuf(2 * nout);
    float* d_lse = (float*)dbuf(4 * nlse);
    attention_forward_gpu(d_out, d_lse, d_qkv, B, T, H, KV, hd, st);
    snprintf(nm, sizeof(nm), "attention_forward B=%d T=%d H=%d KV=%d hd=%d tile=%d", B, T, H, KV, hd,
             attention_tile(hd));
    check(nm, from_bf16(d_out, nout), out, nout, TOL_BF16);
    snprintf(nm, sizeof(nm), "attention_forward lse B=%d T=%d H=%d KV=%d hd=%d tile=%d", B, T, H, KV, hd,
             attention_tile(hd));
    check(nm, from_f32(d_lse, nlse), lse, nlse, TOL_F32);

    float* dout = hrand(nout, 1.0f);
    float* dqkv = hbuf(nqkv);
    attention_backward(dqkv, dout, qkv, out, lse, B, T, H, KV, hd);
    bf16* d_dout = to_bf16(dout, nout);
    bf16* d_dqkv = (bf16*)dbuf(2 * nqkv);
    attention_backward_gpu(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, H, KV, hd, st);
    // check q, k and v parts separately so a failure says which
    float* g = from_bf16(d_dqkv, nqkv);
    const char* part[3] = {"dq", "dk", "dv"};
    int c0[3] = {0, H * hd, (H + KV) * hd}, cw[3] = {H * hd, KV * hd, KV * hd};
    for (int p = 0; p < 3; p++) {
        size_t m = (size_t)N * cw[p];
        float *gp = hbuf(m), *cp = hbuf(m);
        for (int i = 0; i < N; i++)
            for (int c = 0; c < cw[p]; c++) {
                gp[(size_t)i * cw[p] + c] = g[(size_t)i * stride + c0[p] + c];
                cp[(size_t)i * cw[p] + c] = dqkv[(size_t)i * stride + c0[p] + c];
            }
        snprintf(nm, sizeof(nm), "attention_backward %s B=%d T=%d H=%d KV=%d hd=%d tile=%d", part[p], B, T, H, KV, hd,
                 attention_tile(hd));
        check(nm, gp, cp, m, TOL_ATT_BWD);
    }
    free_all();
}

// Context parallelism's blocks (model/config.h AttnBlock) on the GPU and the CPU, in the
// order a ring rank runs them: the forward merges each into the running fp32 output and
// log-sum-exp (checked after the first block, which starts them, and after the last), the
// backward adds each block's dq, dk, dv into fp32 buffers that start nonzero (+=). The
// queries and this rank's own K, V are one qkv buffer [q Ha*hd | k KVa*hd | v KVa*hd], as at
// ring step 0; a block with src[i] = s > 0 reads the separate K, V buffer s (a neighbour's,
// rows 2*KVa*hd) and adds its dk, dv to that buffer's gradient. The backward reads the same
// out (the CPU's, rounded to bf16) and lse on both sides, so it is checked on its own.
static void run_blocks(const char* what, int B, int Ts, int Ha, int KVa, int hd, AttnBlock* blk, const int* src, int n,
                       int n_src) {
    char nm[192];
    int q_ld = (Ha + 2 * KVa) * hd, kv_ld = 2 * KVa * hd, o_ld = Ha * hd;
    size_t rows = (size_t)B * Ts, no = rows * o_ld, nl = (size_t)B * Ha * Ts, nkv = rows * kv_ld;
    float* q = hrand(rows * q_ld, 2.0f);
    bf16* d_q = to_bf16(q, rows * q_ld);
    const float* kv[4];
    const bf16* d_kv[4];
    kv[0] = q + Ha * hd, d_kv[0] = d_q + Ha * hd;
    for (int s = 1; s < n_src; s++) kv[s] = hrand(nkv, 2.0f), d_kv[s] = to_bf16(kv[s], nkv);
    float *o = hbuf(no), *lse = hbuf(nl);
    float *d_o = (float*)dbuf(4 * no), *d_lse = (float*)dbuf(4 * nl);
    for (int i = 0; i < n; i++) {
        blk[i].B = B, blk[i].Ts = Ts, blk[i].Ha = Ha, blk[i].KVa = KVa, blk[i].hd = hd;
        blk[i].q_ld = q_ld, blk[i].kv_ld = src[i] ? kv_ld : q_ld;
        attention_block_forward(o, o_ld, lse, q, kv[src[i]], &blk[i]);
        attention_block_forward_gpu(d_o, d_lse, d_q, d_kv[src[i]], &blk[i], st);
        if (i == 0 || i == n - 1) {
            const char* when = i == 0 ? "first block" : "all blocks";
            snprintf(nm, sizeof(nm), "attention_block_forward o %s, %s hd=%d", what, when, hd);
            check(nm, from_f32(d_o, no), o, no, TOL_BF16);
            snprintf(nm, sizeof(nm), "attention_block_forward lse %s, %s hd=%d", what, when, hd);
            check(nm, from_f32(d_lse, nl), lse, nl, TOL_F32);
        }
    }
    float* out = hbuf(no);
    for (size_t i = 0; i < no; i++) out[i] = bf16_round(o[i]);
    float* dout = hrand(no, 1.0f);
    float* dq = hrand(no, 1.0f);
    float* dkv[4];
    float* d_dkv[4];
    for (int s = 0; s < n_src; s++) dkv[s] = hrand(nkv, 1.0f), d_dkv[s] = to_f32(dkv[s], nkv);
    bf16 *d_out = to_bf16(out, no), *d_dout = to_bf16(dout, no);
    float *d_dq = to_f32(dq, no), *d_lse_cpu = to_f32(lse, nl);
    for (int i = 0; i < n; i++) {
        attention_block_backward(dq, o_ld, dkv[src[i]], kv_ld, q, kv[src[i]], dout, out, o_ld, lse, &blk[i]);
        attention_block_backward_gpu(d_dq, d_dkv[src[i]], d_q, d_kv[src[i]], d_dout, d_out, d_lse_cpu, &blk[i], st);
    }
    snprintf(nm, sizeof(nm), "attention_block_backward dq(+=) %s hd=%d", what, hd);
    check(nm, from_f32(d_dq, no), dq, no, TOL_ATT_BWD);
    for (int s = 0; s < n_src; s++) {
        snprintf(nm, sizeof(nm), "attention_block_backward dkv(+=) of %s %s hd=%d", s ? "a neighbour" : "its own rows",
                 what, hd);
        check(nm, from_f32(d_dkv[s], nkv), dkv[s], nkv, TOL_ATT_BWD);
    }
    free_all();
}

// Ring rank r's blocks at ring step `step` (R ranks, chunks of c rows: Ts = 2c; R = 1: one
// segment of c rows), as parallel/context_parallel.h makes them: a pair of segments unless
// every key is after every query, the diagonal block first. Returns how many (at most 4).
static int zigzag_step_blocks(int R, int r, int c, int step, AttnBlock* blk) {
    int from = (r - step + R) % R, n = 0, nseg = R == 1 ? 1 : 2;
    int qs[2][3], ks[2][3];  // {row, rows, position} of the query and key segments
    for (int i = 0; i < nseg; i++) {
        qs[i][0] = ks[i][0] = i * c, qs[i][1] = ks[i][1] = c;
        qs[i][2] = R == 1 ? 0 : i ? (2 * R - 1 - r) * c : r * c;
        ks[i][2] = R == 1 ? 0 : i ? (2 * R - 1 - from) * c : from * c;
    }
    for (int i = 0; i < nseg; i++)
        for (int j = 0; j < nseg; j++) {
            if (ks[j][2] > qs[i][2] + qs[i][1] - 1) continue;
            AttnBlock a = {0};
            a.q_row = qs[i][0], a.nq = qs[i][1], a.q_pos = qs[i][2];
            a.k_row = ks[j][0], a.nk = ks[j][1], a.k_pos = ks[j][2];
            a.init = from == r && i == j;
            if (a.init) memmove(blk + 1, blk, sizeof(AttnBlock) * n), blk[0] = a;
            else blk[n] = a;
            n++;
        }
    return n;
}

// Ring rank r of R: its blocks over the R ring steps (step 0 on its own K, V; each later step
// on a neighbour's buffer).
static void test_attention_zigzag(int B, int R, int r, int c, int Ha, int KVa, int hd) {
    int n = 0, src[16];
    AttnBlock blk[16];
    for (int step = 0; step < R; step++) {
        int k = zigzag_step_blocks(R, r, c, step, blk + n);
        for (int i = 0; i < k; i++) src[n++] = step == 0 ? 0 : 1 + (step - 1) % 3;
    }
    char what[96];
    snprintf(what, sizeof(what), "zig-zag R=%d rank %d c=%d B=%d Ha=%d KVa=%d (%d blocks)", R, r, c, B, Ha, KVa, n);
    run_blocks(what, B, R == 1 ? c : 2 * c, Ha, KVa, hd, blk, src, n, R < 4 ? R : 4);
}

// Blocks no zig-zag split makes: query and key segments of different lengths, a diagonal
// that cuts the tiles anywhere, and an init block whose first queries see none of its keys
// (o = 0, lse = -inf until the next block reaches them).
static void test_attention_blocks_odd(int hd) {
    AttnBlock blk[3] = {{0}};
    int src[3] = {0, 1, 0};
    blk[0].q_row = 0, blk[0].nq = 50, blk[0].q_pos = 100, blk[0].k_row = 20, blk[0].nk = 70, blk[0].k_pos = 110,
    blk[0].init = 1;
    blk[1].q_row = 0, blk[1].nq = 50, blk[1].q_pos = 100, blk[1].k_row = 0, blk[1].nk = 90, blk[1].k_pos = 23;
    blk[2].q_row = 10, blk[2].nq = 37, blk[2].q_pos = 110, blk[2].k_row = 60, blk[2].nk = 30, blk[2].k_pos = 0;
    run_blocks("odd blocks nq 50/37 vs nk 70/90/30, diag -10/77/110, B=2 Ha=4 KVa=2", 2, 90, 4, 2, hd, blk, src, 3, 2);
}

// dqkv = [dq | dk dv] rounded to bf16, row by row.
static void test_attention_grad_pack(size_t rows, int Ha, int KVa, int hd) {
    char nm[128];
    int wq = Ha * hd, wkv = 2 * KVa * hd, w = wq + wkv;
    float* dq = hrand(rows * wq, 1.0f);
    float* dkv = hrand(rows * wkv, 1.0f);
    for (size_t i = 0; i < rows * wq; i++) dq[i] += 1e-3f * rng_uniform(&rng);  // bits below bf16's
    float* ref = hbuf(rows * w);
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < w; c++) ref[i * w + c] = bf16_round(c < wq ? dq[i * wq + c] : dkv[i * wkv + c - wq]);
    bf16* d_dqkv = (bf16*)dbuf(2 * rows * w);
    attention_grad_pack_gpu(d_dqkv, to_f32(dq, rows * wq), to_f32(dkv, rows * wkv), rows, Ha, KVa, hd, st);
    snprintf(nm, sizeof(nm), "attention_grad_pack rows=%zu Ha=%d KVa=%d hd=%d", rows, Ha, KVa, hd);
    check(nm, from_bf16(d_dqkv, rows * w), ref, rows * w, TOL_EXACT);
    free_all();
}

static void test_embedding(int N, int C, int v0, int Vl, int vocab, int T, int row0) {
    char nm[128];
    int* tok = (int*)hbuf(N);
    for (int i = 0; i < N; i++) tok[i] = i % 5 == 0 ? v0 + 3 : (int)(rng_u64(&rng) % vocab);  // repeats on purpose
    if (v0 + 3 >= vocab) fail("test_embedding: bad shape");
    float* wte = hrand((size_t)Vl * C, 1.0f);
    float* out = hbuf((size_t)N * C);
    embedding_forward(out, tok, wte, N, C, v0, Vl);
    int* d_tok = to_i32(tok, N);
    bf16* d_wte = to_bf16(wte, (size_t)Vl * C);
    bf16* d_out = (bf16*)dbuf(2 * (size_t)N * C);
    embedding_forward_gpu(d_out, d_tok, d_wte, N, C, v0, Vl, st);
    snprintf(nm, sizeof(nm), "embedding_forward N=%d C=%d v0=%d Vl=%d", N, C, v0, Vl);
    check(nm, from_bf16(d_out, (size_t)N * C), out, (size_t)N * C, TOL_EXACT);
    float* dout = hrand((size_t)N * C, 1.0f);
    float* dwte = hrand((size_t)Vl * C, 1.0f);
    float* d_dwte = to_f32(dwte, (size_t)Vl * C);
    bf16* d_dout = to_bf16(dout, (size_t)N * C);
    embedding_backward(dwte, tok, dout, N, C, v0, Vl);
    embedding_backward_gpu(d_dwte, d_tok, d_dout, N, C, v0, Vl, st);
    snprintf(nm, sizeof(nm), "embedding_backward N=%d C=%d v0=%d Vl=%d", N, C, v0, Vl);
    check(nm, from_f32(d_dwte, (size_t)Vl * C), dwte, (size_t)Vl * C, TOL_F32);

    // position embedding of rows [row0, row0+N) of a batch of T rows per sequence, at the
    // zig-zag positions of a 2T-long sequence (wpe: 2T rows)
    int* pos = zigzag_positions(T);
    int* d_pos = to_i32(pos, T);
    float* wpe = hrand((size_t)2 * T * C, 1.0f);
    float* x = hrand((size_t)N * C, 1.0f);
    bf16* d_x = to_bf16(x, (size_t)N * C);
    bf16* d_wpe = to_bf16(wpe, (size_t)2 * T * C);
    position_forward(x, wpe, N, row0, pos, T, C);
    position_forward_gpu(d_x, d_wpe, N, row0, d_pos, T, C, st);
    snprintf(nm, sizeof(nm), "position_forward N=%d row0=%d T=%d C=%d (zig-zag positions)", N, row0, T, C);
    check(nm, from_bf16(d_x, (size_t)N * C), x, (size_t)N * C, TOL_BF16);
    float* dwpe = hrand((size_t)2 * T * C, 1.0f);
    float* d_dwpe = to_f32(dwpe, (size_t)2 * T * C);
    position_backward(dwpe, dout, N, row0, pos, T, C);
    position_backward_gpu(d_dwpe, d_dout, N, row0, d_pos, T, C, st);
    snprintf(nm, sizeof(nm), "position_backward N=%d row0=%d T=%d C=%d (zig-zag positions)", N, row0, T, C);
    check(nm, from_f32(d_dwpe, (size_t)2 * T * C), dwpe, (size_t)2 * T * C, TOL_F32);
    free_all();
}

// One rank's three passes (no reduction in between: the test checks the local kernels,
// which with v0 = 0 and Vl >= vocab is the whole cross-entropy).
static void test_crossentropy(int N, int Vl, int v0, int vocab) {
    char nm[128];
    float* logits = hrand((size_t)N * Vl, 4.0f);
    int* tgt = (int*)hbuf(N);
    for (int i = 0; i < N; i++) tgt[i] = (int)(rng_u64(&rng) % vocab);
    float *maxes = hbuf(N), *sums = hbuf(2 * N), *losses = hbuf(N);
    float* dl = hcopy(logits, (size_t)N * Vl);
    float scale = 1.0f / N;
    crossentropy_local_max(maxes, logits, N, Vl, v0, vocab);
    crossentropy_local_sums(sums, logits, maxes, tgt, N, Vl, v0, vocab);
    crossentropy_finish(losses, dl, maxes, sums, tgt, N, Vl, v0, vocab, scale);
    bf16* d_logits = to_bf16(logits, (size_t)N * Vl);
    int* d_tgt = to_i32(tgt, N);
    float *d_max = (float*)dbuf(4 * N), *d_sums = (float*)dbuf(8 * N), *d_loss = (float*)dbuf(4 * N);
    crossentropy_local_max_gpu(d_max, d_logits, N, Vl, v0, vocab, st);
    crossentropy_local_sums_gpu(d_sums, d_logits, d_max, d_tgt, N, Vl, v0, vocab, st);
    crossentropy_finish_gpu(d_loss, d_logits, d_max, d_sums, d_tgt, N, Vl, v0, vocab, scale, st);
    snprintf(nm, sizeof(nm), "crossentropy_local_max N=%d Vl=%d v0=%d V=%d", N, Vl, v0, vocab);
    check(nm, from_f32(d_max, N), maxes, N, TOL_EXACT);
    snprintf(nm, sizeof(nm), "crossentropy_local_sums N=%d Vl=%d v0=%d V=%d", N, Vl, v0, vocab);
    check(nm, from_f32(d_sums, 2 * N), sums, 2 * N, TOL_F32);
    snprintf(nm, sizeof(nm), "crossentropy_finish loss N=%d Vl=%d v0=%d V=%d", N, Vl, v0, vocab);
    check(nm, from_f32(d_loss, N), losses, N, TOL_F32);
    snprintf(nm, sizeof(nm), "crossentropy_finish dlogits N=%d Vl=%d v0=%d V=%d", N, Vl, v0, vocab);
    check(nm, from_bf16(d_logits, (size_t)N * Vl), dl, (size_t)N * Vl, TOL_BF16);
    free_all();
}

// off: the arrays start off elements into their buffers (off 1: no 16-byte alignment, the
// kernel's one-element-at-a-time path).
static void test_adamw(size_t n, size_t off) {
    char nm[128];
    float* p = hrand(n + off, 1.0f);
    float* g = hrand(n + off, 1.0f);
    float* m = hrand(n + off, 0.1f);
    float* v = hrand(n + off, 0.01f, 0.011f);  // positive
    float *d_p = to_f32(p, n + off), *d_g = to_f32(g, n + off), *d_m = to_f32(m, n + off), *d_v = to_f32(v, n + off);
    bf16* d_pb = (bf16*)dbuf(2 * (n + off));
    adamw_update(p + off, g + off, m + off, v + off, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f, 3);
    adamw_update_gpu(d_p + off, d_pb + off, d_g + off, d_m + off, d_v + off, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1,
                     0.5f, 3, st);
    snprintf(nm, sizeof(nm), "adamw param (fp32 master) n=%zu off=%zu", n, off);
    check(nm, from_f32(d_p, n + off) + off, p + off, n, TOL_ADAM);
    snprintf(nm, sizeof(nm), "adamw m n=%zu off=%zu", n, off);
    check(nm, from_f32(d_m, n + off) + off, m + off, n, TOL_ADAM);
    snprintf(nm, sizeof(nm), "adamw v n=%zu off=%zu", n, off);
    check(nm, from_f32(d_v, n + off) + off, v + off, n, TOL_ADAM);
    float* pb = hbuf(n);
    for (size_t i = 0; i < n; i++) pb[i] = bf16_round(p[off + i]);
    snprintf(nm, sizeof(nm), "adamw param (bf16 copy) n=%zu off=%zu", n, off);
    check(nm, from_bf16(d_pb, n + off) + off, pb, n, TOL_BF16);
    free_all();
}

static void test_misc(size_t n) {
    float* a = hrand(n, 1.0f);
    float* b = hrand(n, 1.0f);
    float* r = hbuf(n);
    for (size_t i = 0; i < n; i++) r[i] = bf16_round(a[i] + b[i]);
    bf16 *d_a = to_bf16(a, n), *d_b = to_bf16(b, n);
    residual_forward_gpu(d_a, d_a, d_b, n, st);
    check("residual_forward (in place)", from_bf16(d_a, n), r, n, TOL_EXACT);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)a[i] * a[i];
    float ref = (float)ss;
    float* d_af = to_f32(a, n);
    float* d_ss = (float*)dbuf(4);
    sumsq_gpu(d_ss, d_af, n, st);
    check("sumsq", from_f32(d_ss, 1), &ref, 1, TOL_F32);
    bf16* d_c = (bf16*)dbuf(2 * n);
    float* d_back = (float*)dbuf(4 * n);
    f32_to_bf16_gpu(d_c, d_af, n, st);
    bf16_to_f32_gpu(d_back, d_c, n, st);
    check("f32_to_bf16 / bf16_to_f32", from_f32(d_back, n), a, n, TOL_EXACT);
    // residual + bias (train_gpt.cu's row-parallel output), one rounding of the fp32 sum
    int C = 100, N = (int)(n / C);
    float* bias = hrand(C, 1.0f);
    float* rb = hbuf((size_t)N * C);
    for (size_t i = 0; i < (size_t)N * C; i++) rb[i] = bf16_round(a[i] + b[i] + bias[i % C]);
    bf16 *d_a2 = to_bf16(a, n), *d_bias = to_bf16(bias, C), *d_rb = (bf16*)dbuf(2 * n);
    residual_bias_forward_gpu(d_rb, d_a2, d_b, d_bias, N, C, st);
    check("residual_bias_forward", from_bf16(d_rb, (size_t)N * C), rb, (size_t)N * C, TOL_EXACT);
    for (size_t i = 0; i < (size_t)N * C; i++) rb[i] = bf16_round(a[i] + bias[i % C]);
    residual_bias_forward_gpu(d_a2, d_a2, NULL, d_bias, N, C, st);  // the bias add alone, in place
    check("residual_bias_forward (bias only, in place)", from_bf16(d_a2, (size_t)N * C), rb, (size_t)N * C, TOL_EXACT);
    // fp32 accumulate and the fp64 loss sum
    float* fb = hrand(n, 1.0f);
    float* fsum = hbuf(n);
    for (size_t i = 0; i < n; i++) fsum[i] = a[i] + fb[i];
    float* d_fb = to_f32(fb, n);
    float* d_fa = to_f32(a, n);
    add_inplace_f32_gpu(d_fa, d_fb, n, st);
    check("add_inplace_f32", from_f32(d_fa, n), fsum, n, TOL_EXACT);
    double tot = 0.5;  // sum_f64 adds to what the accumulator holds
    for (size_t i = 0; i < n; i++) tot += a[i];
    double* d_tot = (double*)dbuf(sizeof(double));
    double half = 0.5, got = 0;
    cudaCheck(cudaMemcpy(d_tot, &half, sizeof(double), cudaMemcpyHostToDevice));
    sum_f64_gpu(d_tot, d_af, n, st);
    cudaCheck(cudaMemcpy(&got, d_tot, sizeof(double), cudaMemcpyDeviceToHost));
    float gotf = (float)got, totf = (float)tot;
    check("sum_f64", &gotf, &totf, 1, TOL_F32);
    free_all();
}

// ----------------------------------------------------------------------------
// Timing of the kernels that dominate a step, at GPT-2 124M sizes (informational).

static float time_ms(void (*fn)(void*), void* arg, int reps) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    fn(arg);  // warm-up
    cudaCheck(cudaEventRecord(e0, st));
    for (int i = 0; i < reps; i++) fn(arg);
    cudaCheck(cudaEventRecord(e1, st));
    cudaCheck(cudaEventSynchronize(e1));
    float ms;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return ms / reps;
}

typedef struct {
    bf16 *x, *w, *b, *y, *qkv, *out, *dout, *dqkv, *logits, *resid;
    float *dw, *lse, *mean, *rstd, *maxes, *sums, *losses;
    int *targets;
    int N, IC, OC, B, T, H, KV, hd, V;
} BenchArgs;
static void bench_mm_fwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_forward_gpu(a->y, a->x, a->w, a->b, a->N, a->IC, a->OC, st);
}
static void bench_mm_bwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_backward_gpu(a->x, a->dw, NULL, a->y, a->x, a->w, a->N, a->IC, a->OC, 0, st);
}
// fc + GELU of the 124M MLP (x N x 768 -> y N x 3072, pre-GELU in out), fused or as matmul + kernel;
// then the fc projection's input gradient through GELU (dout N x 768 -> N x 3072).
static void bench_fc_gelu_fused(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    if (!matmul_gelu_forward_gpu(a->y, a->out, a->x, a->w, a->b, a->N, a->IC, a->OC, st))
        fail("bench: no fused GELU algorithm");
}
static void bench_fc_gelu_split(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_forward_gpu(a->out, a->x, a->w, a->b, a->N, a->IC, a->OC, st);
    gelu_forward_gpu(a->y, a->out, (size_t)a->N * a->OC, st);
}
static void bench_dgelu_fused(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    if (!matmul_dgelu_backward_gpu(a->y, a->x, a->w, a->out, a->N, a->OC, a->IC, st))
        fail("bench: no fused DGELU algorithm");
}
static void bench_dgelu_split(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_backward_gpu(a->dout, NULL, NULL, a->x, NULL, a->w, a->N, a->OC, a->IC, 0, st);
    gelu_backward_gpu(a->y, a->out, a->dout, (size_t)a->N * a->OC, 0, st);
}
static void bench_att_fwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    attention_forward_gpu(a->out, a->lse, a->qkv, a->B, a->T, a->H, a->KV, a->hd, st);
}
static void bench_att_bwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    attention_backward_gpu(a->dqkv, a->dout, a->qkv, a->out, a->lse, a->B, a->T, a->H, a->KV, a->hd, st);
}
// The memory-bound kernels at 124M sizes (N = 8 x 1024 tokens): x is N x 3072, y N x 3072.
static void bench_gelu_fwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    gelu_forward_gpu(a->y, a->x, (size_t)a->N * 3072, st);
}
static void bench_gelu_bwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    gelu_backward_gpu(a->y, a->x, a->y, (size_t)a->N * 3072, 0, st);
}
static void bench_resid_ln(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    residual_layernorm_forward_gpu(a->resid, a->out, a->mean, a->rstd, a->x, a->y, a->w, a->b, a->N, 768, st);
}
static void bench_ce(void* p) {  // the three passes of a tp-1 cross-entropy, logits N x V in place
    BenchArgs* a = (BenchArgs*)p;
    crossentropy_local_max_gpu(a->maxes, a->logits, a->N, a->V, 0, a->V, st);
    crossentropy_local_sums_gpu(a->sums, a->logits, a->maxes, a->targets, a->N, a->V, 0, a->V, st);
    crossentropy_finish_gpu(a->losses, a->logits, a->maxes, a->sums, a->targets, a->N, a->V, 0, a->V, 1.0f, st);
}

// Context parallelism's blocks (ring rank 0 of a zig-zag cp 4 split of one T = 8192
// sequence, 12 heads of 64: 2048 query rows) step by step, against the whole-sequence
// kernels on the sequence (the same work as the 4 ranks' blocks together). FLOPs count the
// visible (query, key) pairs only: 4 hd per pair and head forward, 2.5 times that backward.
typedef struct {
    AttnBlock blk[4];
    int n;
    const bf16 *q, *kv, *out, *dout;
    float *o, *lse, *dq, *dkv;
} BlockBench;
static void bench_blocks_fwd(void* p) {
    BlockBench* b = (BlockBench*)p;
    for (int i = 0; i < b->n; i++) attention_block_forward_gpu(b->o, b->lse, b->q, b->kv, &b->blk[i], st);
}
static void bench_blocks_bwd(void* p) {
    BlockBench* b = (BlockBench*)p;
    for (int i = 0; i < b->n; i++)
        attention_block_backward_gpu(b->dq, b->dkv, b->q, b->kv, b->dout, b->out, b->lse, &b->blk[i], st);
}
static double block_pairs(const AttnBlock* a) {  // (query, key) pairs where the key is seen
    double n = 0;
    for (int i = 0; i < a->nq; i++) {
        int k = a->q_pos + i - a->k_pos + 1;
        n += k < 0 ? 0 : k > a->nk ? a->nk : k;
    }
    return n;
}
static void bench_blocks(void) {
    int T = 8192, R = 4, H = 12, hd = 64, c = T / (2 * R), Ts = 2 * c, q_ld = 3 * H * hd, kv_ld = 2 * H * hd;
    BlockBench b;
    bf16* q = (bf16*)dbuf(2 * (size_t)Ts * q_ld);
    bf16* kv = (bf16*)dbuf(2 * (size_t)Ts * kv_ld);
    b.q = q, b.out = (bf16*)dbuf(2 * (size_t)Ts * H * hd), b.dout = (bf16*)dbuf(2 * (size_t)Ts * H * hd);
    b.o = (float*)dbuf(4 * (size_t)Ts * H * hd), b.lse = (float*)dbuf(4 * (size_t)Ts * H);
    b.dq = (float*)dbuf(4 * (size_t)Ts * H * hd), b.dkv = (float*)dbuf(4 * (size_t)Ts * kv_ld);
    double ms_f = 0, ms_b = 0, all_pairs = 0;
    for (int step = 0; step < R; step++) {
        b.n = zigzag_step_blocks(R, 0, c, step, b.blk);
        b.kv = step == 0 ? q + H * hd : kv;
        double pairs = 0;
        for (int i = 0; i < b.n; i++) {
            AttnBlock* a = &b.blk[i];
            a->B = 1, a->Ts = Ts, a->Ha = H, a->KVa = H, a->hd = hd, a->q_ld = q_ld,
            a->kv_ld = step == 0 ? q_ld : kv_ld;
            pairs += block_pairs(a);
        }
        double fl = 4.0 * hd * H * pairs;
        float tf = time_ms(bench_blocks_fwd, &b, 10), tb = time_ms(bench_blocks_bwd, &b, 10);
        printf(
            "bench attention blocks cp=4 zig-zag T=%d H=%d hd=%d, ring rank 0 step %d (%d blocks): forward %7.3f ms "
            "%6.1f TFLOP/s, "
            "backward %7.3f ms %6.1f TFLOP/s\n",
            T, H, hd, step, b.n, tf, fl / tf / 1e9, tb, 2.5 * fl / tb / 1e9);
        ms_f += tf, ms_b += tb, all_pairs += pairs;
    }
    BenchArgs w;
    memset(&w, 0, sizeof(w));
    w.B = 1, w.T = T, w.H = H, w.KV = H, w.hd = hd;
    w.qkv = (bf16*)dbuf(2 * (size_t)T * q_ld), w.dqkv = (bf16*)dbuf(2 * (size_t)T * q_ld);
    w.out = (bf16*)dbuf(2 * (size_t)T * H * hd), w.dout = (bf16*)dbuf(2 * (size_t)T * H * hd),
    w.lse = (float*)dbuf(4 * (size_t)T * H);
    attention_forward_gpu(w.out, w.lse, w.qkv, 1, T, H, H, hd, st);  // valid lse for the backward
    double fl = 4.0 * hd * H * (double)T * (T + 1) / 2, fl_rank = 4.0 * hd * H * all_pairs;
    float tf = time_ms(bench_att_fwd, &w, 10), tb = time_ms(bench_att_bwd, &w, 10);
    printf(
        "bench attention blocks cp=4 ring rank 0, its 4 steps: forward %7.3f ms %6.1f TFLOP/s, backward %7.3f ms %6.1f "
        "TFLOP/s "
        "(%.3f of the sequence's work)\n",
        ms_f, fl_rank / ms_f / 1e9, ms_b, 2.5 * fl_rank / ms_b / 1e9, fl_rank / fl);
    printf(
        "bench attention whole sequence T=%d H=%d hd=%d (cp=1):   forward %7.3f ms %6.1f TFLOP/s, backward %7.3f ms "
        "%6.1f TFLOP/s\n",
        T, H, hd, tf, fl / tf / 1e9, tb, 2.5 * fl / tb / 1e9);
    free_all();
}

static void bench(void) {
    BenchArgs a;
    memset(&a, 0, sizeof(a));
    a.N = 8 * 1024, a.IC = 768, a.OC = 3072;  // the GPT-2 124M fc layer at 8 x 1024 tokens
    a.x = (bf16*)dbuf(2 * (size_t)a.N * a.IC), a.w = (bf16*)dbuf(2 * (size_t)a.OC * a.IC), a.b = (bf16*)dbuf(2 * a.OC);
    a.y = (bf16*)dbuf(2 * (size_t)a.N * a.OC), a.dw = (float*)dbuf(4 * (size_t)a.OC * a.IC);
    double mm = 2.0 * a.N * a.IC * a.OC;
    float t = time_ms(bench_mm_fwd, &a, 20);
    printf("bench matmul_forward  N=%d IC=%d OC=%d: %8.3f ms  %6.1f TFLOP/s\n", a.N, a.IC, a.OC, t, mm / t / 1e9);
    t = time_ms(bench_mm_bwd, &a, 20);
    printf("bench matmul_backward N=%d IC=%d OC=%d: %8.3f ms  %6.1f TFLOP/s\n", a.N, a.IC, a.OC, t, 2 * mm / t / 1e9);
    a.out = (bf16*)dbuf(2 * (size_t)a.N * a.OC), a.dout = (bf16*)dbuf(2 * (size_t)a.N * a.OC);
    if (matmul_gelu_forward_gpu(a.y, a.out, a.x, a.w, a.b, a.N, a.IC, a.OC, st) &&
        matmul_dgelu_backward_gpu(a.y, a.x, a.w, a.out, a.N, a.OC, a.IC, st)) {
        float tf = time_ms(bench_fc_gelu_fused, &a, 20), ts = time_ms(bench_fc_gelu_split, &a, 20);
        printf("bench fc+gelu forward  fused %.3f ms, matmul + kernel %.3f ms: %.2fx\n", tf, ts, ts / tf);
        tf = time_ms(bench_dgelu_fused, &a, 20), ts = time_ms(bench_dgelu_split, &a, 20);
        printf("bench dgelu dinp       fused %.3f ms, matmul + kernel %.3f ms: %.2fx\n", tf, ts, ts / tf);
    } else {
        printf("bench fc+gelu: no fused cuBLASLt algorithm at N=%d IC=%d OC=%d\n", a.N, a.IC, a.OC);
    }
    a.B = 8, a.T = 1024, a.H = 12, a.KV = 12, a.hd = 64;
    size_t rows = (size_t)a.B * a.T;
    a.qkv = (bf16*)dbuf(2 * rows * (a.H + 2 * a.KV) * a.hd), a.dqkv = (bf16*)dbuf(2 * rows * (a.H + 2 * a.KV) * a.hd);
    a.out = (bf16*)dbuf(2 * rows * a.H * a.hd), a.dout = (bf16*)dbuf(2 * rows * a.H * a.hd);
    a.lse = (float*)dbuf(4 * rows * a.H);
    attention_forward_gpu(a.out, a.lse, a.qkv, a.B, a.T, a.H, a.KV, a.hd, st);  // valid lse for the backward
    double att = 2.0 * 2.0 * a.B * a.H * (double)a.T * a.T / 2 * a.hd;  // causal: half of QK^T and PV
    for (int tile = 64; tile >= 32; tile /= 2) {  // keys per tile: the trainer's 64, and 32
        gpu_att_tile64 = tile;
        t = time_ms(bench_att_fwd, &a, 5);
        printf("bench attention_forward  B=%d T=%d H=%d hd=%d tile=%d: %8.3f ms  %6.1f TFLOP/s\n", a.B, a.T, a.H, a.hd,
               tile, t, att / t / 1e9);
        t = time_ms(bench_att_bwd, &a, 5);
        printf("bench attention_backward B=%d T=%d H=%d hd=%d tile=%d: %8.3f ms  %6.1f TFLOP/s\n", a.B, a.T, a.H, a.hd,
               tile, t, 2.5 * att / t / 1e9);
    }
    gpu_att_tile64 = 64;
    free_all();
    bench_blocks();

    // Memory-bound kernels: GB/s of the bytes each must move at least (reads + writes once).
    memset(&a, 0, sizeof(a));
    a.N = 8 * 1024, a.V = 50304;
    size_t nf = (size_t)a.N * 3072, nc = (size_t)a.N * 768, nl = (size_t)a.N * a.V;
    a.x = (bf16*)dbuf(2 * nf), a.y = (bf16*)dbuf(2 * nf), a.w = (bf16*)dbuf(2 * 768), a.b = (bf16*)dbuf(2 * 768);
    a.resid = (bf16*)dbuf(2 * nc), a.out = (bf16*)dbuf(2 * nc);
    a.mean = (float*)dbuf(4 * (size_t)a.N), a.rstd = (float*)dbuf(4 * (size_t)a.N);
    a.logits = (bf16*)dbuf(2 * nl), a.maxes = (float*)dbuf(4 * (size_t)a.N), a.sums = (float*)dbuf(8 * (size_t)a.N);
    a.losses = (float*)dbuf(4 * (size_t)a.N), a.targets = (int*)dbuf(4 * (size_t)a.N);  // zeros: token 0
    t = time_ms(bench_gelu_fwd, &a, 20);
    printf("bench gelu_forward    N=%d C=3072: %8.3f ms  %6.0f GB/s\n", a.N, t, 4.0 * nf / t / 1e6);
    t = time_ms(bench_gelu_bwd, &a, 20);
    printf("bench gelu_backward   N=%d C=3072: %8.3f ms  %6.0f GB/s\n", a.N, t, 6.0 * nf / t / 1e6);
    t = time_ms(bench_resid_ln, &a, 20);
    printf("bench residual_layernorm N=%d C=768: %8.3f ms  %6.0f GB/s\n", a.N, t, 8.0 * nc / t / 1e6);
    t = time_ms(bench_ce, &a, 5);  // the logits become gradients in place; their values do not matter for the time
    printf("bench crossentropy    N=%d V=%d: %8.3f ms  %6.0f GB/s (3 reads + 1 write of the logits)\n", a.N, a.V, t,
           8.0 * nl / t / 1e6);
    free_all();
}

int main(int argc, char** argv) {
    int do_bench = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-bench")) do_bench = 0;
        else fail("usage: %s [--no-bench]", argv[0]);
    }
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "error: no CUDA GPU available (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 2;
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d, %.0f GiB)\n", prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0);
    cudaCheck(cudaStreamCreate(&st));
    gpu_kernels_init(16u << 20);
    rng_seed(&rng, getenv("SEED") ? atoi(getenv("SEED")) : 1234);

    test_matmul(37, 64, 48, 1);
    test_matmul(130, 256, 200, 1);
    test_matmul(257, 128, 384, 0);
    test_matmul(64, 768, 2304, 1);
    test_matmul_plans();
    test_matmul_gelu(37, 64, 256, 1);   // the tiny model's fc and fc projection
    test_matmul_gelu(130, 96, 200, 0);  // no bias
    test_matmul_gelu(64, 768, 3072, 1); // GPT-2 124M
    test_matmul_gelu_declines();
    for (int rms = 0; rms <= 1; rms++) {
        test_norm(37, 64, rms);
        test_norm(100, 100, rms);
        test_norm(5, 1600, rms);
        test_norm(300, 768, rms);
    }
    test_gelu(1000 + 7);
    test_swiglu(37, 100);
    test_swiglu(5, 384);
    test_rope(2, 40, 4, 2, 16);
    test_rope(1, 33, 4, 4, 64);
    test_mma_layout();
    test_attention(2, 37, 4, 2, 16);   // GQA 4q/2kv, llama-tiny's head size
    test_attention(1, 70, 4, 4, 32);
    test_attention(2, 65, 4, 2, 64);
    test_attention(1, 129, 4, 1, 64);  // multi-query
    test_attention(1, 100, 2, 1, 128);
    gpu_att_tile64 = 32;  // the hd-64 kernels with 32-key tiles (the benchmark times both)
    test_attention(2, 65, 4, 2, 64);
    test_attention(1, 129, 4, 1, 64);
    gpu_att_tile64 = 64;
    // context parallelism's blocks: zig-zag cp2 (both ranks), cp4, Ulysses alone (R = 1), odd shapes
    test_attention_zigzag(2, 2, 0, 40, 4, 2, 16);  // GQA 4q/2kv
    test_attention_zigzag(2, 2, 1, 40, 4, 2, 16);
    test_attention_zigzag(1, 4, 1, 24, 4, 4, 32);
    test_attention_zigzag(1, 4, 3, 33, 2, 1, 64);
    test_attention_zigzag(1, 1, 0, 70, 2, 2, 64);
    test_attention_blocks_odd(32);
    test_attention_blocks_odd(128);
    test_attention_grad_pack(37, 4, 2, 16);
    test_attention_grad_pack(20, 2, 1, 64);
    test_embedding(50, 64, 0, 384, 257, 16, 0);
    test_embedding(77, 100, 128, 128, 257, 32, 45);  // vocab shard with padding rows
    test_crossentropy(37, 384, 0, 257);               // whole padded vocabulary on one rank
    test_crossentropy(20, 200, 100, 257);             // a shard with some padding columns
    test_crossentropy(9, 50304, 0, 50257);            // GPT-2 vocabulary
    test_crossentropy(11, 131, 0, 131);               // rows not 16-byte aligned: the scalar path of load8/store8
    test_adamw(10007, 0);
    test_adamw(1001, 1);
    test_misc(100003);

    // The whole model (train_gpt.cu against train_gpt.c, loss per step and gradient norm,
    // 1 rank and tp/pp/sp/ZeRO layouts) is checked by dev/check_gpu_vs_cpu.sh.

    if (do_bench && n_fail == 0) bench();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    gpu_kernels_free();
    cudaCheck(cudaStreamDestroy(st));
    return n_fail ? 1 : 0;
}
