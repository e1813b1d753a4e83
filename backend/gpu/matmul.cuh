// backend/gpu/matmul.cuh: matmuls through cuBLASLt, out (N x OC) = inp (N x IC) @ W^T + bias
// with W OC x IC (PyTorch's layout), bf16 in and out, fp32 accumulation; the backward's
// dinp (bf16) and dW, dbias (fp32, +=); the fc layer's GELU fused as an epilogue where it can
// be (matmul_gelu_forward_gpu, matmul_dgelu_backward_gpu). Plans cached per shape.
#ifndef GPU_MATMUL_CUH
#define GPU_MATMUL_CUH

#include "backend/gpu/common.cuh"
#include "backend/gpu/elementwise.cuh"  // column_sum_gpu

// Matmul through cuBLASLt. Row-major X (r x c) is column-major X^T (c x r) with ld c,
// so with PyTorch-layout weights W (OC x IC):
//   forward  out^T (OC x N)  = W (op T of col-major IC x OC) * inp^T (IC x N)
//   dinp     dinp^T (IC x N) = W^T (col-major IC x OC)       * dout^T (OC x N)
//   dweight  dW^T (IC x OC)  = inp^T (IC x N)                 * dout (op T of col-major OC x N)
// bf16 A/B, fp32 compute and scale; D is bf16 (activations) or fp32 (weight gradients).
// Epilogues: BIAS adds a bias over D's rows (bf16: the bias data type defaults to D's type);
// for the GPT-2 MLP, GELU_AUX(_BIAS) writes GELU(fc output) to D and the fc output itself
// to the "aux" matrix (the backward's GELU input), and DGELU multiplies the dinp product by
// GELU'(aux), so the fc layer's GELU never makes a pass of its own over B*T x 4C values
// (llm.c does the same on Hopper). Aux has D's type and layout; its ld must be a multiple
// of 8. cuBLASLt's GELU is the tanh approximation, GPT-2's.
// Descriptors and the algorithm are made once per shape and kept (a step calls the same dozen
// shapes again and again; the heuristic query alone costs tens of microseconds); only the bias
// and aux pointers are set per call. The algorithm: cuBLASLt's heuristic ranks up to LT_ALGOS
// candidates, and the first call of a shape times each on its own operands (lt_choose) and keeps
// the fastest, as llm.c and PyTorch's cublasLt autotuning do (the heuristic's first is not the
// fastest for every shape: its model does not know the card's clocks or the data).

static uint32_t lt_alignment(const void* p, int ld, int elem) {
    uintptr_t a = (uintptr_t)p | (uintptr_t)((size_t)ld * elem);
    uint32_t al = 256;
    while (al > (uint32_t)elem && (a % al)) al >>= 1;
    return al;
}

// Whether a bias can ride on a bias epilogue: we give it one only at 16 bytes of alignment
// (always so for widths that are multiples of 8); the callers add it separately otherwise.
static int lt_bias_aligned(const bf16* bias) { return (uintptr_t)bias % 16 == 0; }

static int lt_is_gelu(int epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_DGELU;
}

// One matmul shape (with the epilogue and the pointer alignments the algorithm was chosen
// for) and its plan.
#define LT_ALGOS 8
typedef struct {
    int key[15];
    int found;  // candidates; 0: cuBLASLt has no algorithm (allowed only for the GELU epilogues: the caller falls back)
    int chosen; // the candidate run: -1 until the shape's first call; 0 until the timing is read
    int timing; // 1: the candidates' times are queued (ev), to be read once the device is past them
    cudaEvent_t ev[2 * LT_ALGOS];  // each candidate's start (after its warm-up) and end
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo[LT_ALGOS];  // the heuristic's, best first
} LtPlan;
#define LT_PLANS 128
static LtPlan gpu_lt_plans[LT_PLANS];
static int gpu_lt_n_plans, gpu_lt_next_evict;

static void lt_plan_destroy(LtPlan* p) {
    if (p->ev[0])
        for (int i = 0; i < 2 * LT_ALGOS; i++) cudaCheck(cudaEventDestroy(p->ev[i]));
    p->ev[0] = NULL, p->timing = 0;
    cublasCheck(cublasLtMatrixLayoutDestroy(p->d));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->b));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->a));
    cublasCheck(cublasLtMatmulDescDestroy(p->op));
}
static void lt_plans_free(void) {
    for (int i = 0; i < gpu_lt_n_plans; i++) lt_plan_destroy(&gpu_lt_plans[i]);
    gpu_lt_n_plans = gpu_lt_next_evict = 0;
}

// Set the per-call pointers of a plan's descriptor (the heuristic reads their alignment,
// which is part of the key, not their data).
static void lt_set_pointers(LtPlan* p, const bf16* bias, const void* aux) {
    if (bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux)
        cublasCheck(
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
}

static LtPlan* lt_plan(const int key[15], const bf16* bias, const void* aux) {
    for (int i = 0; i < gpu_lt_n_plans; i++)
        if (!memcmp(gpu_lt_plans[i].key, key, sizeof(gpu_lt_plans[i].key))) return &gpu_lt_plans[i];
    LtPlan* p;
    if (gpu_lt_n_plans < LT_PLANS) {
        p = &gpu_lt_plans[gpu_lt_n_plans++];
    } else {
        p = &gpu_lt_plans[gpu_lt_next_evict], gpu_lt_next_evict = (gpu_lt_next_evict + 1) % LT_PLANS;
        lt_plan_destroy(p);
    }
    memcpy(p->key, key, sizeof(p->key));
    int m = key[0], n = key[1], k = key[2], transa = key[3], transb = key[4], lda = key[5], ldb = key[6], ldd = key[7];
    cudaDataType_t dtype = (cudaDataType_t)key[8];
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key[9];
    uint32_t a_al = key[10], b_al = key[11], d_al = key[12];
    cublasCheck(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (aux) {
        int64_t aux_ld = ldd;  // aux is laid out as D
        cublasCheck(
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    lt_set_pointers(p, bias, aux);
    // Stored shapes: op N means A is m x k, op T means it is stored k x m.
    cublasCheck(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, transa ? k : m, transa ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, transb ? n : k, transb ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->d, dtype, m, n, ldd));
    cublasLtMatmulPreference_t pref;
    uint64_t ws = GPU_LT_WORKSPACE;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_al, sizeof(a_al)));
    cublasCheck(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_al, sizeof(b_al)));
    cublasCheck(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d_al, sizeof(d_al)));
    cublasCheck(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_al, sizeof(d_al)));
    cublasLtMatmulHeuristicResult_t heur[LT_ALGOS];
    p->found = 0, p->chosen = -1, p->timing = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(gpu_lt, p->op, p->a, p->b, p->d, p->d, pref, LT_ALGOS, heur, &p->found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (lt_is_gelu(epi) && (st != CUBLAS_STATUS_SUCCESS || !p->found)) {  // the caller runs the GELU kernel instead
        p->found = 0;
        return p;
    }
    cublasCheck(st);
    if (!p->found)
        fail("cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d (epilogue %d, D %s)", m, n, k, transa,
             transb, (int)epi, dtype == CUDA_R_32F ? "fp32" : "bf16");
    int usable = 0;
    for (int i = 0; i < p->found; i++)
        if (heur[i].state == CUBLAS_STATUS_SUCCESS) p->algo[usable++] = heur[i].algo;
    if (!usable) fail("cuBLASLt's heuristic returned no usable algorithm for m=%d n=%d k=%d", m, n, k);
    p->found = usable;
    return p;
}

// The shapes whose timing has been read so far, and how many of them took another algorithm
// than the heuristic's first (the trainer prints both after its first step).
static int gpu_lt_timed, gpu_lt_changed;
// One call of candidate i of plan p.
static void lt_run(const LtPlan* p, int i, void* D, const bf16* A, const bf16* B, float beta, cudaStream_t stream) {
    float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(gpu_lt, p->op, &alpha, A, p->a, B, p->b, &beta, D, p->d, D, p->d, &p->algo[i],
                               gpu_lt_workspace, GPU_LT_WORKSPACE, stream));
    gpu_counts.launches++, gpu_counts.matmuls++;
}
// Time every candidate of p on the call's own operands (one warm-up, then LT_TIME_REPS calls
// between two events); lt_timing_read keeps the fastest once the device is past them (a tie
// keeps the heuristic's order), and until then the heuristic's first runs. The host never
// waits for it: a wait in the middle of a pipeline's schedule could wait for a peer's send that
// the peer's host, waiting too, never issues. A product that adds into D (beta != 0, the weight
// gradients) would add once per run: D is copied aside into the reduction scratch and put back
// after (a D larger than the scratch, the head's, keeps the heuristic's first). On the emulator
// the times are the CPU's and say nothing of a GPU: the emulated cuBLASLt gives each candidate
// a modelled cost instead (emu_lt_algo_cost), so the timing path runs and the choice is the same
// on every run.
#ifndef CUDA_EMU_H
#define LT_TIME_REPS 3
#else
#define LT_TIME_REPS 0  // (the emulator's times are modelled: one call each, the emulated GPU tests stay quick)
#endif
static void lt_choose(LtPlan* p, void* D, size_t d_bytes, const bf16* A, const bf16* B, float beta,
                      cudaStream_t stream) {
    p->chosen = 0;
    if (p->found < 2 || (beta != 0.0f && d_bytes > sizeof(float) * gpu_scratch_n)) return;
    if (beta != 0.0f) copyCheck(cudaMemcpyAsync(gpu_scratch, D, d_bytes, cudaMemcpyDeviceToDevice, stream));
    if (!p->ev[0])
        for (int i = 0; i < 2 * LT_ALGOS; i++) cudaCheck(cudaEventCreate(&p->ev[i]));
    for (int i = 0; i < p->found; i++)
        for (int r = 0; r <= LT_TIME_REPS; r++) {
            lt_run(p, i, D, A, B, beta, stream);
            if (r == 0) cudaCheck(cudaEventRecord(p->ev[2 * i], stream));
            if (r == LT_TIME_REPS) cudaCheck(cudaEventRecord(p->ev[2 * i + 1], stream));
        }
    if (beta != 0.0f) copyCheck(cudaMemcpyAsync(D, gpu_scratch, d_bytes, cudaMemcpyDeviceToDevice, stream));
    p->timing = 1;
}
// The timed plans whose last event the device has passed take their fastest candidate.
static void lt_timing_read(void) {
    for (int j = 0; j < gpu_lt_n_plans; j++) {
        LtPlan* p = &gpu_lt_plans[j];
        if (!p->timing) continue;
        cudaError_t e = cudaEventQuery(p->ev[2 * p->found - 1]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();  // not an error: cleared, or the next launch check would report it
            continue;
        }
        cudaCheck(e);
        float best = 0;
        for (int i = 0; i < p->found; i++) {
            float ms;
            cudaCheck(cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]));
#ifdef CUDA_EMU_H
            ms = emu_lt_algo_cost(&p->algo[i]);
#endif
            if (i == 0 || ms < best) best = ms, p->chosen = i;
        }
        p->timing = 0, gpu_lt_timed++, gpu_lt_changed += p->chosen != 0;
    }
}

// D (m x n, column-major, ld ldd, type dtype) = op(A) op(B) + beta * D, then the epilogue
// (bias over rows m; aux: m x n with ld ldd). Returns 0, having done nothing, when a GELU
// epilogue has no algorithm for this shape; 1 when the matmul is queued.
static int lt_matmul(void* D, cudaDataType_t dtype, int ldd, const bf16* A, int transa, int lda, const bf16* B,
                     int transb, int ldb, int m, int n, int k, float beta, cublasLtEpilogue_t epilogue,
                     const bf16* bias, const void* aux, cudaStream_t stream) {
    if (m <= 0 || n <= 0) return 1;
    int delem = dtype == CUDA_R_32F ? 4 : 2;
    int key[15] = {m, n, k, transa, transb, lda, ldb, ldd, (int)dtype, (int)epilogue, (int)lt_alignment(A, lda, 2),
                   (int)lt_alignment(B, ldb, 2), (int)lt_alignment(D, ldd, delem),
                   bias ? (int)lt_alignment(bias, 0, 2) : 0, aux ? (int)lt_alignment(aux, ldd, delem) : 0};
    LtPlan* p = lt_plan(key, bias, aux);
    if (!p->found) return 0;
    lt_set_pointers(p, bias, aux);
    if (p->chosen < 0) lt_choose(p, D, (size_t)ldd * (n - 1) * delem + (size_t)m * delem, A, B, beta, stream);
    else if (p->timing) lt_timing_read();
    lt_run(p, p->chosen, D, A, B, beta, stream);
    return 1;
}

// out (N x OC) = inp (N x IC) @ weight^T (weight OC x IC) + bias (OC, may be NULL). All bf16.
static void matmul_forward_gpu(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int IC, int OC,
                               cudaStream_t s) {
    lt_matmul(out, CUDA_R_16BF, OC, weight, 1, IC, inp, 0, IC, OC, N, IC, 0.0f,
              bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, s);
}

// dinp (N x IC, bf16) (+)= dout @ weight (accumulate_dinp: 1 +=, 0 overwrite; dinp may be NULL);
// dweight (OC x IC, fp32) += dout^T @ inp; dbias (OC, fp32, may be NULL) += column sums of dout.
static void matmul_backward_gpu(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                const bf16* weight, int N, int IC, int OC, int accumulate_dinp, cudaStream_t s) {
    if (dinp) lt_matmul(dinp, CUDA_R_16BF, IC, weight, 0, IC, dout, 0, OC, IC, N, OC, accumulate_dinp ? 1.0f : 0.0f,
                        CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, s);
    if (dweight)
        lt_matmul(dweight, CUDA_R_32F, IC, inp, 0, IC, dout, 1, OC, IC, OC, N, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL,
                  NULL, s);
    if (dbias) column_sum_gpu(dbias, dout, N, OC, s);
}

// The fused GELU matmuls. Each returns 1 when it queued the work, 0 (nothing done) when the
// shape cannot take the epilogue (OC or IC not a multiple of 8, a bias not 16-byte aligned)
// or cuBLASLt has no algorithm for it; the caller then runs the matmul and the GELU kernel.
// act (N x OC) = GELU(pre), pre (N x OC) = inp @ weight^T + bias (bias may be NULL).
static int matmul_gelu_forward_gpu(bf16* act, bf16* pre, const bf16* inp, const bf16* weight, const bf16* bias, int N,
                                   int IC, int OC, cudaStream_t s) {
    if (OC % 8 || (bias && !lt_bias_aligned(bias))) return 0;
    return lt_matmul(act, CUDA_R_16BF, OC, weight, 1, IC, inp, 0, IC, OC, N, IC, 0.0f,
                     bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias, pre, s);
}
// dpre (N x IC) = (dout (N x OC) @ weight (OC x IC)) * GELU'(pre), overwritten: the input
// gradient of a matmul whose input was GELU(pre).
static int matmul_dgelu_backward_gpu(bf16* dpre, const bf16* dout, const bf16* weight, const bf16* pre, int N, int IC,
                                     int OC, cudaStream_t s) {
    if (IC % 8) return 0;
    return lt_matmul(dpre, CUDA_R_16BF, IC, weight, 0, IC, dout, 0, OC, IC, N, OC, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL,
                     pre, s);
}

#endif
