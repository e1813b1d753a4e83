// emu/cublaslt_emu.h: the part of cuBLASLt that kernels_gpu.cuh uses, on the CPU, for the
// CUDA emulator (emu/cuda_emu.h includes it). It follows the documented contract of
// cublasLtMatmul and rejects what the documentation rejects, so a wrong transpose flag,
// leading dimension, type or bias length shows up as a failed call, not as a silently
// different product:
//   D (m x n) = alpha * op(A) op(B) + beta * C (+ bias[i] with CUBLASLT_EPILOGUE_BIAS),
//   column-major, op(A) m x k, op(B) k x n, each matrix described by (type, rows, cols, ld)
//   of how it is stored (rows x cols before op), ld >= rows; C and D the same layout.
//   GELU_AUX(_BIAS): aux = that value (bias added), D = GELU(aux), tanh form; DGELU: D =
//   that value * GELU'(aux). Aux has D's type (the default of EPILOGUE_AUX_DATA_TYPE),
//   D's shape and its own ld (EPILOGUE_AUX_LD, a multiple of 8, >= m).
// Supported types: A, B bf16; C, D bf16 or fp32; compute and scale fp32 (the bias is of D's
// type unless CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says otherwise). Products accumulate in
// fp32 and D is rounded once, as tensor cores do (the summation order differs). The call is
// checked at once and queued on its stream (emu/cuda_emu.h), like a kernel.

struct EmuLtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void* bias;
    int32_t bias_type;  // -1: D's type
    void* aux;
    int64_t aux_ld;
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
#define EMU_LT_ALGOS 3  // candidates the emulated heuristic offers
struct EmuLtPref {
    uint64_t workspace;
    uint32_t align[4];  // A, B, C, D: the least alignment the caller promises
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    static int token;
    *h = (cublasLtHandle_t)&token;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    default: return "CUBLAS_STATUS_(other, cuda emulator)";
    }
}

// Every rejection says why on stderr: the caller's cublasCheck only prints the status.
static cublasStatus_t emu_lt_reject(cublasStatus_t s, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda emulator: cuBLASLt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return s;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    EmuLtDesc* e = (EmuLtDesc*)calloc(1, sizeof(EmuLtDesc));
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    e->compute = compute, e->scale = scale, e->transa = e->transb = CUBLAS_OP_N;
    e->epilogue = CUBLASLT_EPILOGUE_DEFAULT, e->bias_type = -1;
    *d = (cublasLtMatmulDesc_t)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { free(d); return CUBLAS_STATUS_SUCCESS; }

static bool emu_lt_has_bias(uint32_t epi) {
    return epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool emu_lt_has_aux(uint32_t epi) {
    return epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           epi == CUBLASLT_EPILOGUE_DGELU;
}

#define EMU_LT_SET(field, type)                                                                                   \
    do {                                                                                                          \
        if (size != sizeof(type))                                                                                 \
            return emu_lt_reject(CUBLAS_STATUS_INVALID_VALUE, "attribute %d: %zu bytes, expected %zu", (int)attr, \
                                 size, sizeof(type));                                                             \
        memcpy(&field, buf, sizeof(type));                                                                        \
    } while (0)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    EmuLtDesc* e = (EmuLtDesc*)d;
    if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: EMU_LT_SET(e->transa, int32_t); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: EMU_LT_SET(e->transb, int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: EMU_LT_SET(e->epilogue, uint32_t); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: EMU_LT_SET(e->bias, const void*); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: EMU_LT_SET(e->bias_type, int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: EMU_LT_SET(e->aux, void*); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: EMU_LT_SET(e->aux_ld, int64_t); break;
    default: return emu_lt_reject(CUBLAS_STATUS_NOT_SUPPORTED, "matmul attribute %d is not emulated", (int)attr);
    }
    if ((e->transa != CUBLAS_OP_N && e->transa != CUBLAS_OP_T) ||
        (e->transb != CUBLAS_OP_N && e->transb != CUBLAS_OP_T))
        return emu_lt_reject(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_OP_N and CUBLAS_OP_T are emulated");
    if (!emu_lt_has_bias(e->epilogue) && !emu_lt_has_aux(e->epilogue) && e->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        return emu_lt_reject(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u is not emulated", e->epilogue);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    EmuLtLayout* e = (EmuLtLayout*)calloc(1, sizeof(EmuLtLayout));
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    *e = EmuLtLayout{type, rows, cols, ld};
    *l = (cublasLtMatrixLayout_t)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { free(l); return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    EmuLtPref* e = (EmuLtPref*)calloc(1, sizeof(EmuLtPref));
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    for (int i = 0; i < 4; i++) e->align[i] = 256;  // cuBLASLt's default: fully aligned
    *p = (cublasLtMatmulPreference_t)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    EmuLtPref* e = (EmuLtPref*)p;
    if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: EMU_LT_SET(e->workspace, uint64_t); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: EMU_LT_SET(e->align[0], uint32_t); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: EMU_LT_SET(e->align[1], uint32_t); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: EMU_LT_SET(e->align[2], uint32_t); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: EMU_LT_SET(e->align[3], uint32_t); break;
    default: return emu_lt_reject(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d is not emulated", (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

// The shape rules of one call; NULL when they hold, else what is wrong.
static const char* emu_lt_shape_error(const EmuLtDesc* d, const EmuLtLayout* a, const EmuLtLayout* b,
                                      const EmuLtLayout* c, const EmuLtLayout* dl, uint64_t* m, uint64_t* n,
                                      uint64_t* k) {
    static thread_local char why[256];
    *m = dl->rows, *n = dl->cols;
    *k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t am = d->transa == CUBLAS_OP_N ? a->rows : a->cols;
    uint64_t bk = d->transb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return "only fp32 compute and scale are emulated";
    if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF) return "A and B must be bf16";
    if (dl->type != CUDA_R_16BF && dl->type != CUDA_R_32F) return "D must be bf16 or fp32";
    if (c->type != dl->type || c->rows != dl->rows || c->cols != dl->cols || c->ld != dl->ld)
        return "C's layout differs from D's";
    if (am != *m || bn != *n || bk != *k) {
        snprintf(why, sizeof(why), "op(A) is %llu x %llu, op(B) %llu x %llu, D %llu x %llu: the shapes do not chain",
                 (unsigned long long)am, (unsigned long long)*k, (unsigned long long)bk, (unsigned long long)bn,
                 (unsigned long long)*m, (unsigned long long)*n);
        return why;
    }
    if (a->ld < (int64_t)a->rows || b->ld < (int64_t)b->rows || dl->ld < (int64_t)dl->rows || a->ld < 1 || b->ld < 1 ||
        dl->ld < 1)
        return "a leading dimension is smaller than its matrix's rows";
    if (emu_lt_has_bias(d->epilogue) && !d->bias) return "a bias epilogue without a bias pointer";
    int bias_type = d->bias_type >= 0 ? d->bias_type : dl->type;
    if (emu_lt_has_bias(d->epilogue) && bias_type != CUDA_R_16BF && bias_type != CUDA_R_32F)
        return "bias type not emulated";
    if (emu_lt_has_aux(d->epilogue)) {
        if (!d->aux) return "a GELU epilogue without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER";
        if (d->aux_ld < (int64_t)dl->rows || d->aux_ld % 8)
            return "the aux leading dimension must be >= D's rows and a multiple of 8";
    }
    return NULL;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* res, int* found) {
    uint64_t m, n, k;
    *found = 0;
    const char* why = emu_lt_shape_error((EmuLtDesc*)op, (EmuLtLayout*)a, (EmuLtLayout*)b, (EmuLtLayout*)c,
                                         (EmuLtLayout*)d, &m, &n, &k);
    if (why) return emu_lt_reject(CUBLAS_STATUS_NOT_SUPPORTED, "%s", why);
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    // EMU_LT_ALGOS candidates (as many as asked, at most), all computing the same product: the
    // caller's choice among them (timing) runs and cannot change a result
    int offered = requested < EMU_LT_ALGOS ? requested : EMU_LT_ALGOS;
    static_assert(sizeof(EmuLtPref) < sizeof(res[0].algo.data) - sizeof(uint64_t),
                  "the preference travels in the algo");
    for (int i = 0; i < offered; i++) {
        memset(&res[i], 0, sizeof(res[i]));
        memcpy(res[i].algo.data, pref, sizeof(EmuLtPref));  // cublasLtMatmul checks the pointers against it
        res[i].algo.data[7] = (uint64_t)i;                  // the candidate's rank (emu_lt_algo_cost)
        res[i].workspaceSize = 0, res[i].state = CUBLAS_STATUS_SUCCESS, res[i].wavesCount = 1.0f;
    }
    *found = offered;
    return CUBLAS_STATUS_SUCCESS;
}
// A modelled time for a candidate, in place of the emulator's CPU time, which says nothing of a
// GPU: the heuristic's second is the "fastest", so a caller that times candidates is seen to take
// another than the first (matmul.cuh's lt_choose), the same one on every run.
static float emu_lt_algo_cost(const cublasLtMatmulAlgo_t* a) {
    static const float cost[EMU_LT_ALGOS] = {2.0f, 1.0f, 3.0f};
    return cost[a->data[7] % EMU_LT_ALGOS];
}

static float emu_lt_load(const void* p, cudaDataType t, size_t i) {
    return t == CUDA_R_16BF ? __bfloat162float(((const __nv_bfloat16*)p)[i]) : ((const float*)p)[i];
}

static void emu_lt_product(const EmuLtDesc* d, const EmuLtLayout* a, const EmuLtLayout* b, const EmuLtLayout* dd,
                           uint64_t m, uint64_t n, uint64_t k, float alpha, float beta, const void* A, const void* B,
                           const void* C, void* D);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t al, const void* B, cublasLtMatrixLayout_t bl, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t cl, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t s) {
    const EmuLtDesc* d = (const EmuLtDesc*)op;
    const EmuLtLayout *a = (const EmuLtLayout*)al, *b = (const EmuLtLayout*)bl, *dd = (const EmuLtLayout*)dl;
    uint64_t m, n, k;
    const char* why = emu_lt_shape_error(d, a, b, (const EmuLtLayout*)cl, dd, &m, &n, &k);
    if (why) return emu_lt_reject(CUBLAS_STATUS_NOT_SUPPORTED, "%s", why);
    if (!algo) return emu_lt_reject(CUBLAS_STATUS_INVALID_VALUE, "no algo (the emulation expects the heuristic's)");
    EmuLtPref pref;
    memcpy(&pref, algo->data, sizeof(pref));
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % pref.align[i])
            return emu_lt_reject(CUBLAS_STATUS_INVALID_VALUE,
                                 "matrix %c at %p is less aligned than the %u bytes promised to the heuristic",
                                 "ABCD"[i], ptrs[i], pref.align[i]);
    float alpha = *(const float*)alpha_p, beta = *(const float*)beta_p;  // host pointers, read at the call
    // the product runs when the stream gets to it, with the descriptors as they are now
    emu_enqueue(s, [=, desc = *d, la = *a, lb = *b, ld = *dd] {
        emu_lt_product(&desc, &la, &lb, &ld, m, n, k, alpha, beta, A, B, C, D);
    });
    return CUBLAS_STATUS_SUCCESS;
}

// D = alpha op(A) op(B) + beta C (+ bias), in fp32, rounded once to D's type.
static void emu_lt_product(const EmuLtDesc* d, const EmuLtLayout* a, const EmuLtLayout* b, const EmuLtLayout* dd,
                           uint64_t m, uint64_t n, uint64_t k, float alpha, float beta, const void* A, const void* B,
                           const void* C, void* D) {
    int bias_type = d->bias_type >= 0 ? d->bias_type : dd->type;
    // op(A) as m rows of k, op(B)^T as n rows of k, in fp32: every D element is a dot product
    float* af = (float*)malloc(sizeof(float) * (m * k + n * k + 1));
    if (!af)
        emu_fail("cuBLASLt: out of memory for a %llu x %llu x %llu product", (unsigned long long)m,
                 (unsigned long long)n, (unsigned long long)k);
    float* bf = af + m * k;
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t p = 0; p < k; p++)
            af[i * k + p] = emu_lt_load(A, a->type, d->transa == CUBLAS_OP_N ? i + p * a->ld : p + i * a->ld);
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t p = 0; p < k; p++)
            bf[j * k + p] = emu_lt_load(B, b->type, d->transb == CUBLAS_OP_N ? p + j * b->ld : j + p * b->ld);
#pragma omp parallel for schedule(static)
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            for (uint64_t p = 0; p < k; p++) acc += af[i * k + p] * bf[j * k + p];
            size_t at = i + j * dd->ld;
            float v = alpha * acc;
            if (beta != 0.0f) v += beta * emu_lt_load(C, dd->type, at);  // beta 0: C is not read (may hold NaN)
            if (emu_lt_has_bias(d->epilogue)) v += emu_lt_load(d->bias, (cudaDataType)bias_type, i);
            if (emu_lt_has_aux(d->epilogue)) {  // aux: D's type, its own ld
                size_t ax = i + j * d->aux_ld;
                if (d->epilogue == CUBLASLT_EPILOGUE_DGELU) {
                    float x = emu_lt_load(d->aux, dd->type, ax),
                          th = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
                    v *= 0.5f * (1.0f + th) +
                         0.5f * x * (1.0f - th * th) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
                } else {
                    if (dd->type == CUDA_R_16BF) ((__nv_bfloat16*)d->aux)[ax] = __float2bfloat16(v);
                    else ((float*)d->aux)[ax] = v;
                    v = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
                }
            }
            if (dd->type == CUDA_R_16BF) ((__nv_bfloat16*)D)[at] = __float2bfloat16(v);
            else ((float*)D)[at] = v;
        }
    free(af);
}
