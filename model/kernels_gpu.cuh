// kernels_gpu.cuh: the CUDA layer kernels, one forward/backward pair per CPU kernel of
// kernels_cpu.h, with the same argument order and shapes. Included by train_gpt.cu and
// test_gpu.cu (one translation unit each, so the statics below are per-binary state).
//
// Precision (the choices the model code relies on):
//   - activations and the weights the layers read are bf16 (__nv_bfloat16); every sum,
//     norm statistic, softmax and dot product is accumulated in fp32.
//   - master weights are fp32; the AdamW kernel updates the fp32 master copy and the fp32
//     moments m, v, then writes the bf16 copy the next forward reads. So there is one fp32
//     parameter buffer (params.h layout) plus a bf16 shadow of the same layout.
//   - weight gradients are fp32 (same layout as the parameters): matmul dW is accumulated
//     by cuBLASLt into fp32 (beta = 1), norm and bias gradients by deterministic two-pass
//     column sums, so the tp/dp reductions sum fp32 values and a layout change moves no
//     bf16 rounding around. Activation gradients are bf16, like llm.c.
//   - the embedding gradient uses fp32 atomicAdd (tokens repeat; a sort-based deterministic
//     version is future work), so dwte is deterministic only up to fp32 summation order.
//
// Backward functions accumulate (+=) into fp32 weight gradients, as the CPU ones do. For
// bf16 activation gradients they take `accumulate` (1: +=, 0: overwrite), except attention,
// whose dqkv is always overwritten (it is the only producer of that gradient); its
// context-parallel blocks add into fp32 dq, dk, dv (the ring sums several blocks).
//
// Streams: every launch takes a cudaStream_t. The cuBLASLt workspace and the reduction
// scratch are shared, so all kernels of one rank must run on one compute stream.
#ifndef KERNELS_GPU_CUH
#define KERNELS_GPU_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <float.h>
#include <stdint.h>
#include "model/config.h"

typedef __nv_bfloat16 bf16;

#define cudaCheck(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    fail("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__, cudaGetErrorString(e_), #call); } while (0)
#define cublasCheck(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) \
    fail("cuBLAS error at %s:%d: %s (%s)", __FILE__, __LINE__, cublasLtGetStatusString(s_), #call); } while (0)
#define launchCheck() cudaCheck(cudaGetLastError())

static inline unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

__device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 f2bf(float x) { return __float2bfloat16(x); }  // round to nearest even

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum (or max) over the whole block; every thread gets the result. Call once per kernel
// (the shared array is reused without a barrier before it).
__device__ float block_reduce(float v, int is_max) {
    __shared__ float sh[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (is_max ? -FLT_MAX : 0.0f);
    v = is_max ? warp_max(v) : warp_sum(v);  // every warp reduces the same values
    return v;
}

// ----------------------------------------------------------------------------
// Per-process GPU state: the cuBLASLt handle and workspace, and a reduction scratch
// buffer (fp32) used by the two-pass column sums and by attention backward.

static cublasLtHandle_t gpu_lt;
static void* gpu_lt_workspace;
static const size_t GPU_LT_WORKSPACE = 32u << 20;  // 32 MiB, what cuBLAS recommends for Hopper
static float* gpu_scratch;
static size_t gpu_scratch_n;

// scratch_floats: at least B*H*T (attention backward) and a few C-sized rows; 16M is ample.
static void gpu_kernels_init(size_t scratch_floats) {
    cublasCheck(cublasLtCreate(&gpu_lt));
    cudaCheck(cudaMalloc(&gpu_lt_workspace, GPU_LT_WORKSPACE));
    gpu_scratch_n = scratch_floats;
    cudaCheck(cudaMalloc(&gpu_scratch, sizeof(float) * scratch_floats));
}
static void lt_plans_free(void);
static void gpu_kernels_free(void) {
    lt_plans_free();
    cudaCheck(cudaFree(gpu_scratch));
    cudaCheck(cudaFree(gpu_lt_workspace));
    cublasCheck(cublasLtDestroy(gpu_lt));
    gpu_scratch = NULL, gpu_lt_workspace = NULL;
}

// ----------------------------------------------------------------------------
// Conversions and elementwise helpers.
//
// Memory-bound kernels move bf16 in chunks of 8 (16 bytes, one vector access) per thread:
// load8 / store8 take the chunk at p with `rem` elements left in the array and use one
// 16-byte access when the chunk is whole and 16-byte aligned, else one access per element
// (the tail of an array, or a base that is not aligned: then every chunk is scalar, and
// still right).

// Two bf16 in one 32-bit word, the lower-indexed element in the low half (as in memory and
// in the tensor cores' registers). Bit operations, so no type punning.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(f2bf(lo)) | (uint32_t)__bfloat16_as_ushort(f2bf(hi)) << 16;
}
__device__ __forceinline__ float bf16x2_lo(uint32_t w) { return bf2f(__ushort_as_bfloat16((unsigned short)(w & 0xffffu))); }
__device__ __forceinline__ float bf16x2_hi(uint32_t w) { return bf2f(__ushort_as_bfloat16((unsigned short)(w >> 16))); }

__device__ __forceinline__ void load8(float f[8], const bf16* p, size_t rem) {
    if (rem >= 8 && (uintptr_t)p % 16 == 0) {
        uint4 u = *(const uint4*)p;
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        #pragma unroll
        for (int k = 0; k < 4; k++) f[2 * k] = bf16x2_lo(w[k]), f[2 * k + 1] = bf16x2_hi(w[k]);
    } else {
        #pragma unroll
        for (int k = 0; k < 8; k++) f[k] = (size_t)k < rem ? bf2f(p[k]) : 0.0f;
    }
}
__device__ __forceinline__ void store8(bf16* p, const float f[8], size_t rem) {
    if (rem >= 8 && (uintptr_t)p % 16 == 0) {
        *(uint4*)p = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
    } else {
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if ((size_t)k < rem) p[k] = f2bf(f[k]);
    }
}
// The same for a chunk of 8 fp32 (two 16-byte accesses).
__device__ __forceinline__ void load8(float f[8], const float* p, size_t rem) {
    if (rem >= 8 && (uintptr_t)p % 16 == 0) {
        float4 a = *(const float4*)p, b = *(const float4*)(p + 4);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        #pragma unroll
        for (int k = 0; k < 8; k++) f[k] = (size_t)k < rem ? p[k] : 0.0f;
    }
}
__device__ __forceinline__ void store8(float* p, const float f[8], size_t rem) {
    if (rem >= 8 && (uintptr_t)p % 16 == 0) {
        *(float4*)p = make_float4(f[0], f[1], f[2], f[3]);
        *(float4*)(p + 4) = make_float4(f[4], f[5], f[6], f[7]);
    } else {
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if ((size_t)k < rem) p[k] = f[k];
    }
}
// The first element of this thread's chunk (one chunk of 8 per thread), and the grid for n.
__device__ __forceinline__ size_t chunk8(void) { return ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; }
static inline unsigned grid8(size_t n) { return cdiv(n, 8 * 256); }

__global__ void f32_to_bf16_kernel(bf16* out, const float* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f2bf(inp[i]);
}
__global__ void bf16_to_f32_kernel(float* out, const bf16* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf2f(inp[i]);
}
static void f32_to_bf16_gpu(bf16* out, const float* inp, size_t n, cudaStream_t s) {
    if (!n) return;
    f32_to_bf16_kernel<<<cdiv(n, 256), 256, 0, s>>>(out, inp, n);
    launchCheck();
}
static void bf16_to_f32_gpu(float* out, const bf16* inp, size_t n, cudaStream_t s) {
    if (!n) return;
    bf16_to_f32_kernel<<<cdiv(n, 256), 256, 0, s>>>(out, inp, n);
    launchCheck();
}

// out = a + b (bf16, fp32 add then one rounding). out may alias a or b.
__global__ void residual_forward_kernel(bf16* out, const bf16* a, const bf16* b, size_t n) {
    size_t i = chunk8();
    if (i >= n) return;
    float x[8], y[8];
    load8(x, a + i, n - i);
    load8(y, b + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) x[k] += y[k];
    store8(out + i, x, n - i);
}
static void residual_forward_gpu(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t s) {
    if (!n) return;
    residual_forward_kernel<<<grid8(n), 256, 0, s>>>(out, a, b, n);
    launchCheck();
}
static void add_inplace_gpu(bf16* a, const bf16* b, size_t n, cudaStream_t s) { residual_forward_gpu(a, a, b, n, s); }

// out (N x C) = a + b + bias, summed in fp32 and rounded once; b and bias may be NULL (then
// out = a + bias is the bias add of a row-parallel matmul after its tp reduction). out may alias a.
__global__ void residual_bias_forward_kernel(bf16* out, const bf16* a, const bf16* b, const bf16* bias, int N, int C) {
    size_t i = chunk8(), n = (size_t)N * C;
    if (i >= n) return;
    float x[8], y[8];
    load8(x, a + i, n - i);
    if (b) {
        load8(y, b + i, n - i);
        #pragma unroll
        for (int k = 0; k < 8; k++) x[k] += y[k];
    }
    if (bias)
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (i + k < n) x[k] += bf2f(bias[(i + k) % C]);
    store8(out + i, x, n - i);
}
static void residual_bias_forward_gpu(bf16* out, const bf16* a, const bf16* b, const bf16* bias, int N, int C, cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    residual_bias_forward_kernel<<<grid8((size_t)N * C), 256, 0, s>>>(out, a, b, bias, N, C);
    launchCheck();
}

// a += b in fp32 (gradient accumulators: ZeRO-2 shards, the tied-embedding copy).
__global__ void add_inplace_f32_kernel(float* a, const float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}
static void add_inplace_f32_gpu(float* a, const float* b, size_t n, cudaStream_t s) {
    if (!n) return;
    add_inplace_f32_kernel<<<cdiv(n, 256), 256, 0, s>>>(a, b, n);
    launchCheck();
}

// *acc (fp64, device) += sum of x (fp32, n), one block, fixed order: deterministic. For the
// per-token losses of a micro-batch (n = B*T), so one block is plenty.
#define SUM_F64_THREADS 512
__global__ void sum_f64_kernel(double* acc, const float* x, size_t n) {
    __shared__ double sh[SUM_F64_THREADS];
    double v = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *acc += sh[0];
}
static void sum_f64_gpu(double* acc, const float* x, size_t n, cudaStream_t s) {
    if (!n) return;
    sum_f64_kernel<<<1, SUM_F64_THREADS, 0, s>>>(acc, x, n);
    launchCheck();
}

// Sum of squares of x (fp32, e.g. the gradient buffer), deterministic: a grid fixed by n
// (one block per 256 elements, at most SUMSQ_BLOCKS), each block writes a partial, one
// block adds the partials in order. Result in *out (device).
#define SUMSQ_BLOCKS 1024
__global__ void sumsq_partial_kernel(float* partial, const float* x, size_t n) {
    float s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += x[i] * x[i];
    s = block_reduce(s, 0);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sum_partials_kernel(float* out, const float* partial, int n) {
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = block_reduce(s, 0);
    if (threadIdx.x == 0) *out = s;
}
static void sumsq_gpu(float* out, const float* x, size_t n, cudaStream_t s) {
    if (gpu_scratch_n < SUMSQ_BLOCKS) fail("sumsq_gpu: reduction scratch too small");
    int blocks = n >= (size_t)SUMSQ_BLOCKS * 256 ? SUMSQ_BLOCKS : (int)cdiv(n ? n : 1, 256);  // small tensors: few blocks
    sumsq_partial_kernel<<<blocks, 256, 0, s>>>(gpu_scratch, x, n);
    launchCheck();
    sum_partials_kernel<<<1, 1024, 0, s>>>(out, gpu_scratch, blocks);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Column sums, deterministic: pass 1 sums row chunks per column into the scratch
// (partial[chunk][c]), pass 2 adds the chunks in order into the fp32 accumulator.
// Used for the bias gradients; the norm weight gradients use the same two-pass shape.

static int column_chunks(int N, int C, int n_outputs, int* rows_per_chunk) {
    int rpc = 64;
    size_t max_chunks = gpu_scratch_n / ((size_t)C * n_outputs);
    if (max_chunks < 1) fail("reduction scratch (%zu floats) too small for %d columns", gpu_scratch_n, C);
    if ((size_t)cdiv(N, rpc) > max_chunks) rpc = (int)cdiv(N, max_chunks);
    *rows_per_chunk = rpc;
    return (int)cdiv(N, rpc);
}
__global__ void column_partial_kernel(float* partial, const bf16* x, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float s = 0;
    for (int r = r0; r < r1; r++) s += bf2f(x[(size_t)r * C + c]);
    partial[(size_t)chunk * C + c] = s;
}
__global__ void column_finish_kernel(float* acc, const float* partial, int n_chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int k = 0; k < n_chunks; k++) s += partial[(size_t)k * C + c];
    acc[c] += s;
}
// acc (C, fp32) += column sums of x (N x C, bf16).
static void column_sum_gpu(float* acc, const bf16* x, int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    int rpc, chunks = column_chunks(N, C, 1, &rpc);
    column_partial_kernel<<<dim3(cdiv(C, 256), chunks), 256, 0, s>>>(gpu_scratch, x, N, C, rpc);
    launchCheck();
    column_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(acc, gpu_scratch, chunks, C);
    launchCheck();
}

// ----------------------------------------------------------------------------
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
// Descriptors and the heuristic's algorithm are made once per shape and kept (a step
// calls the same dozen shapes again and again; the heuristic query alone costs tens of
// microseconds); only the bias and aux pointers are set per call.

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
typedef struct {
    int key[15];
    int found;  // 0: cuBLASLt has no algorithm (allowed only for the GELU epilogues: the caller falls back)
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} LtPlan;
#define LT_PLANS 128
static LtPlan gpu_lt_plans[LT_PLANS];
static int gpu_lt_n_plans, gpu_lt_next_evict;

static void lt_plan_destroy(LtPlan* p) {
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
    if (bias) cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
}

static LtPlan* lt_plan(const int key[15], const bf16* bias, const void* aux) {
    for (int i = 0; i < gpu_lt_n_plans; i++)
        if (!memcmp(gpu_lt_plans[i].key, key, sizeof(gpu_lt_plans[i].key))) return &gpu_lt_plans[i];
    LtPlan* p;
    if (gpu_lt_n_plans < LT_PLANS) p = &gpu_lt_plans[gpu_lt_n_plans++];
    else p = &gpu_lt_plans[gpu_lt_next_evict], gpu_lt_next_evict = (gpu_lt_next_evict + 1) % LT_PLANS, lt_plan_destroy(p);
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
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
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
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_al, sizeof(a_al)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_al, sizeof(b_al)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d_al, sizeof(d_al)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_al, sizeof(d_al)));
    cublasLtMatmulHeuristicResult_t heur;
    p->found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(gpu_lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &heur, &p->found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (lt_is_gelu(epi) && (st != CUBLAS_STATUS_SUCCESS || !p->found)) {  // the caller runs the GELU kernel instead
        p->found = 0;
        return p;
    }
    cublasCheck(st);
    if (!p->found) fail("cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d (epilogue %d, D %s)", m, n, k, transa,
                        transb, (int)epi, dtype == CUDA_R_32F ? "fp32" : "bf16");
    p->algo = heur.algo;
    return p;
}

// D (m x n, column-major, ld ldd, type dtype) = op(A) op(B) + beta * D, then the epilogue
// (bias over rows m; aux: m x n with ld ldd). Returns 0, having done nothing, when a GELU
// epilogue has no algorithm for this shape; 1 when the matmul is queued.
static int lt_matmul(void* D, cudaDataType_t dtype, int ldd, const bf16* A, int transa, int lda, const bf16* B, int transb,
                     int ldb, int m, int n, int k, float beta, cublasLtEpilogue_t epilogue, const bf16* bias, const void* aux,
                     cudaStream_t stream) {
    if (m <= 0 || n <= 0) return 1;
    int delem = dtype == CUDA_R_32F ? 4 : 2;
    int key[15] = {m, n, k, transa, transb, lda, ldb, ldd, (int)dtype, (int)epilogue, (int)lt_alignment(A, lda, 2),
                   (int)lt_alignment(B, ldb, 2), (int)lt_alignment(D, ldd, delem), bias ? (int)lt_alignment(bias, 0, 2) : 0,
                   aux ? (int)lt_alignment(aux, ldd, delem) : 0};
    LtPlan* p = lt_plan(key, bias, aux);
    if (!p->found) return 0;
    lt_set_pointers(p, bias, aux);
    float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(gpu_lt, p->op, &alpha, A, p->a, B, p->b, &beta, D, p->d, D, p->d, &p->algo, gpu_lt_workspace,
                               GPU_LT_WORKSPACE, stream));
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
    if (dweight) lt_matmul(dweight, CUDA_R_32F, IC, inp, 0, IC, dout, 1, OC, IC, OC, N, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, s);
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
    return lt_matmul(dpre, CUDA_R_16BF, IC, weight, 0, IC, dout, 0, OC, IC, N, OC, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, pre, s);
}

// ----------------------------------------------------------------------------
// LayerNorm (eps 1e-5) and RMSNorm, fused with the residual add before them. One warp
// per row, each lane owning chunks of 8 columns (lane * 8 + 256 k, load8/store8); the row
// is read three times (sum, centred sum of squares, output), from L1/L2.
// x = a + b is rounded to bf16 first (that is the residual stream everyone else reads),
// and the statistics are taken of the rounded x, so forward and backward agree.
// b == NULL: plain norm of a (resid may then be NULL). resid may alias a (in place).

#define NORM_ROWS_PER_BLOCK 8
__global__ void residual_norm_forward_kernel(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a,
                                             const bf16* b, const bf16* weight, const bf16* bias, int N, int C, int rms) {
    int lane = threadIdx.x % 32, row = blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* ar = a + (size_t)row * C;
    const bf16* x = ar;
    float sum = 0, v[8], u[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, ar + c, C - c);
        if (b) {
            load8(u, b + (size_t)row * C + c, C - c);
            #pragma unroll
            for (int k = 0; k < 8; k++) v[k] = bf2f(f2bf(v[k] + u[k]));  // the residual stream, rounded
            store8(resid + (size_t)row * C + c, v, C - c);
        }
        #pragma unroll
        for (int k = 0; k < 8; k++) sum += v[k];  // load8 gives 0 past the row's end
    }
    if (b) x = resid + (size_t)row * C;  // each lane re-reads only the chunks it wrote itself
    float m = rms ? 0.0f : warp_sum(sum) / C;
    float var = 0;
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, x + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (c + k < C) var += (v[k] - m) * (v[k] - m);
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    bf16* o = out + (size_t)row * C;
    float w[8], bb[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(v, x + c, C - c);
        load8(w, weight + c, C - c);
        if (bias) load8(bb, bias + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++) v[k] = (v[k] - m) * s * w[k] + (bias ? bb[k] : 0.0f);
        store8(o + c, v, C - c);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        rstd[row] = s;
    }
}

// resid = a + b (if b); out = layernorm(resid or a) * weight + bias; mean, rstd (N, fp32).
static void residual_layernorm_forward_gpu(bf16* resid, bf16* out, float* mean, float* rstd, const bf16* a,
                                           const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                           cudaStream_t s) {
    if (N <= 0) return;
    if (b && !resid) fail("residual_layernorm_forward_gpu: b given without a resid output");
    residual_norm_forward_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
        resid, out, mean, rstd, a, b, weight, bias, N, C, 0);
    launchCheck();
}
static void layernorm_forward_gpu(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                                  const bf16* bias, int N, int C, cudaStream_t s) {
    residual_layernorm_forward_gpu(NULL, out, mean, rstd, inp, NULL, weight, bias, N, C, s);
}
// resid = a + b (if b); out = rmsnorm(resid or a) * weight; rstd (N, fp32).
static void residual_rmsnorm_forward_gpu(bf16* resid, bf16* out, float* rstd, const bf16* a, const bf16* b,
                                         const bf16* weight, int N, int C, cudaStream_t s) {
    if (N <= 0) return;
    if (b && !resid) fail("residual_rmsnorm_forward_gpu: b given without a resid output");
    residual_norm_forward_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
        resid, out, NULL, rstd, a, b, weight, NULL, N, C, 1);
    launchCheck();
}
static void rmsnorm_forward_gpu(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int N, int C, cudaStream_t s) {
    residual_rmsnorm_forward_gpu(NULL, out, rstd, inp, NULL, weight, N, C, s);
}

// Input gradient, one warp per row (mean == NULL: RMSNorm, where the mean terms vanish).
// dinp must not alias dout.
__global__ void norm_backward_dinp_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* weight,
                                          const float* mean, const float* rstd, int N, int C, int accumulate) {
    int lane = threadIdx.x % 32, row = blockIdx.x * NORM_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* x = inp + (size_t)row * C;
    const bf16* d = dout + (size_t)row * C;
    bf16* di = dinp + (size_t)row * C;
    float m = mean ? mean[row] : 0.0f, s = rstd[row];
    float dsum = 0, ddot = 0, xv[8], dv[8], w[8], acc[8];
    for (int c = lane * 8; c < C; c += 256) {
        load8(xv, x + c, C - c);
        load8(dv, d + c, C - c);
        load8(w, weight + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++) {  // past the row's end dv = w = 0, so dn = 0
            float dn = w[k] * dv[k];
            dsum += dn;
            ddot += dn * (xv[k] - m) * s;
        }
    }
    float dnorm_mean = mean ? warp_sum(dsum) / C : 0.0f, dnorm_norm_mean = warp_sum(ddot) / C;
    for (int c = lane * 8; c < C; c += 256) {
        load8(xv, x + c, C - c);
        load8(dv, d + c, C - c);
        load8(w, weight + c, C - c);
        if (accumulate) load8(acc, di + c, C - c);
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            float xh = (xv[k] - m) * s;
            dv[k] = (w[k] * dv[k] - dnorm_mean - xh * dnorm_norm_mean) * s + (accumulate ? acc[k] : 0.0f);
        }
        store8(di + c, dv, C - c);
    }
}
// Weight (and bias) gradient partials per row chunk: pw[chunk][c] = sum dout * xhat,
// pb[chunk][c] = sum dout (pb NULL: skipped).
__global__ void norm_backward_partial_kernel(float* pw, float* pb, const bf16* dout, const bf16* inp, const float* mean,
                                             const float* rstd, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float sw = 0, sb = 0;
    for (int r = r0; r < r1; r++) {
        float d = bf2f(dout[(size_t)r * C + c]);
        float xh = (bf2f(inp[(size_t)r * C + c]) - (mean ? mean[r] : 0.0f)) * rstd[r];
        sw += d * xh;
        sb += d;
    }
    pw[(size_t)chunk * C + c] = sw;
    if (pb) pb[(size_t)chunk * C + c] = sb;
}
static void norm_backward_gpu(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                              const bf16* weight, const float* mean, const float* rstd, int N, int C, int accumulate,
                              cudaStream_t s) {
    if (N <= 0) return;
    if (dinp) {
        norm_backward_dinp_kernel<<<cdiv(N, NORM_ROWS_PER_BLOCK), 32 * NORM_ROWS_PER_BLOCK, 0, s>>>(
            dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
        launchCheck();
    }
    int rpc, chunks = column_chunks(N, C, 2, &rpc);
    float* pw = gpu_scratch;
    float* pb = dbias ? gpu_scratch + (size_t)chunks * C : NULL;
    norm_backward_partial_kernel<<<dim3(cdiv(C, 256), chunks), 256, 0, s>>>(pw, pb, dout, inp, mean, rstd, N, C, rpc);
    launchCheck();
    column_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(dweight, pw, chunks, C);
    launchCheck();
    if (dbias) {
        column_finish_kernel<<<cdiv(C, 256), 256, 0, s>>>(dbias, pb, chunks, C);
        launchCheck();
    }
}
// dinp (bf16) (+)= LayerNorm input gradient; dweight, dbias (fp32) +=.
static void layernorm_backward_gpu(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                   const bf16* weight, const float* mean, const float* rstd, int N, int C, int accumulate,
                                   cudaStream_t s) {
    norm_backward_gpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate, s);
}
static void rmsnorm_backward_gpu(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                                 const float* rstd, int N, int C, int accumulate, cudaStream_t s) {
    norm_backward_gpu(dinp, dweight, NULL, dout, inp, weight, NULL, rstd, N, C, accumulate, s);
}

// ----------------------------------------------------------------------------
// GELU (tanh approximation) and SwiGLU, elementwise in fp32.
// Backward may run in place (dinp == dout) with accumulate = 0.

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
__device__ __forceinline__ float gelu_tanh_arg(float x) { return GELU_K * (x + 0.044715f * x * x * x); }
__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, size_t n) {
    size_t i = chunk8();
    if (i >= n) return;
    float x[8];
    load8(x, inp + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) x[k] = 0.5f * x[k] * (1.0f + tanhf(gelu_tanh_arg(x[k])));
    store8(out + i, x, n - i);
}
__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, int accumulate) {
    size_t i = chunk8();
    if (i >= n) return;
    float x[8], d[8], acc[8];
    load8(x, inp + i, n - i);
    load8(d, dout + i, n - i);
    if (accumulate) load8(acc, dinp + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float th = tanhf(gelu_tanh_arg(x[k]));
        float grad = 0.5f * (1.0f + th) + 0.5f * x[k] * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x[k] * x[k]);
        d[k] *= grad;
        if (accumulate) d[k] += acc[k];
    }
    store8(dinp + i, d, n - i);
}
static void gelu_forward_gpu(bf16* out, const bf16* inp, size_t n, cudaStream_t s) {
    if (!n) return;
    gelu_forward_kernel<<<grid8(n), 256, 0, s>>>(out, inp, n);
    launchCheck();
}
static void gelu_backward_gpu(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, int accumulate, cudaStream_t s) {
    if (!n) return;
    gelu_backward_kernel<<<grid8(n), 256, 0, s>>>(dinp, inp, dout, n, accumulate);
    launchCheck();
}

// inp rows [gate (F) | up (F)], out (N x F) = silu(gate) * up.
__global__ void swiglu_forward_kernel(bf16* out, const bf16* inp, int N, int F) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    size_t i = idx / F, j = idx % F;
    float g = bf2f(inp[i * 2 * F + j]), u = bf2f(inp[i * 2 * F + F + j]);
    out[idx] = f2bf(g / (1.0f + expf(-g)) * u);
}
// dinp (N x 2F) (+)= gradient; must not alias dout (different shapes).
__global__ void swiglu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F, int accumulate) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * F) return;
    size_t i = idx / F, j = idx % F, ig = i * 2 * F + j, iu = ig + F;
    float g = bf2f(inp[ig]), u = bf2f(inp[iu]), d = bf2f(dout[idx]);
    float sig = 1.0f / (1.0f + expf(-g));
    float dg = d * u * sig * (1.0f + g * (1.0f - sig)), du = d * g * sig;
    if (accumulate) dg += bf2f(dinp[ig]), du += bf2f(dinp[iu]);
    dinp[ig] = f2bf(dg);
    dinp[iu] = f2bf(du);
}
static void swiglu_forward_gpu(bf16* out, const bf16* inp, int N, int F, cudaStream_t s) {
    if ((size_t)N * F == 0) return;
    swiglu_forward_kernel<<<cdiv((size_t)N * F, 256), 256, 0, s>>>(out, inp, N, F);
    launchCheck();
}
static void swiglu_backward_gpu(bf16* dinp, const bf16* inp, const bf16* dout, int N, int F, int accumulate, cudaStream_t s) {
    if ((size_t)N * F == 0) return;
    swiglu_backward_kernel<<<cdiv((size_t)N * F, 256), 256, 0, s>>>(dinp, inp, dout, N, F, accumulate);
    launchCheck();
}

// ----------------------------------------------------------------------------
// RoPE in place on the first n_heads heads of each row (pass H + KV for q and k of qkv),
// pairs (2j, 2j+1), angle pos * 10000^(-2j/hd), pos = positions[row % T] (device ints: the
// sequence position of each of the T rows a sequence has on this rank, which context
// parallelism permutes); sign -1 is the backward (rotation by the opposite angle, applied
// to dqkv). Same float formula as the CPU.
__global__ void rope_kernel(bf16* x, int N, const int* positions, int T, int stride, int n_heads, int hd, float sign) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int half = hd / 2;
    if (idx >= (size_t)N * n_heads * half) return;
    int j = (int)(idx % half), h = (int)((idx / half) % n_heads);
    size_t i = idx / ((size_t)half * n_heads);
    int pos = positions[i % T];
    float ang = pos * powf(10000.0f, -2.0f * j / hd);
    float c = cosf(ang), s = sign * sinf(ang);
    bf16* p = x + i * stride + (size_t)h * hd + 2 * j;
    float a = bf2f(p[0]), b = bf2f(p[1]);
    p[0] = f2bf(a * c - b * s);
    p[1] = f2bf(a * s + b * c);
}
static void rope_apply_gpu(bf16* qkv, int N, const int* positions, int T, int stride, int n_heads, int hd, float sign,
                           cudaStream_t s) {
    size_t n = (size_t)N * n_heads * (hd / 2);
    if (!n) return;
    rope_kernel<<<cdiv(n, 256), 256, 0, s>>>(qkv, N, positions, T, stride, n_heads, hd, sign);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Causal self-attention with grouped-query heads, flash-attention style (Dao et al. 2022;
// the loop order of FlashAttention-2): the forward keeps a running max and sum per query
// (online softmax, Milakov & Gimelshein 2018) and stores only the logsumexp lse (B, H, T);
// the backward recomputes each probability as exp(s - lse) tile by tile. No T x T matrix
// exists at any time.
//
// Why our own kernel and not cuDNN's SDPA: it keeps the build to the CUDA toolkit (no
// cuDNN frontend, graph building or version matrix), it reads qkv in this program's
// [q H*hd | k KV*hd | v KV*hd] row layout with GQA directly (no transposes or copies),
// and it is short enough to check against the CPU reference line by line.
//
// The products run on tensor cores through the PTX instructions mma.m16n8k16 (bf16 in,
// fp32 accumulators) and ldmatrix, whose register layouts the PTX ISA documents (the
// emulator's comment on mma_16816 restates them). Because the layout is known, a score
// tile stays in the accumulator registers: the row max and sum of the online softmax are
// two lane shuffles (the 4 lanes g*4 .. g*4+3 share rows g and g + 8), and the
// accumulator of S = Q K^T, rounded to bf16 pairs, is already the A operand of P V (as in
// FlashAttention-2). Scores are kept in log2 units (exp2 is one instruction).
//
// Work split: a block holds BR = 16 * NW rows of one (batch, head) side, 16 per warp
// (queries in the forward and dq kernels, keys in the dk/dv kernel), and walks tiles of BC
// rows of the other side staged in shared memory as bf16. The blocks with the most tiles
// start first (the last query blocks; in dk/dv the first key blocks), so short ones fill
// the tail of the grid. The dq and dk/dv kernels are separate, so every gradient is
// written by one warp in a fixed order (deterministic, no atomics); the price is
// recomputing the scores in both. qkv row stride is (H + 2*KV) * hd; out / dout rows are
// H * hd. Head sizes 16, 32, 64, 128. Context parallelism's blocks (below these) are the
// same kernels over two segments of a sequence.

#ifndef CUDA_EMU_H  // the emulator runs these three as warp exchanges (emu/cuda_emu.h)
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16* row) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16* row) {
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
#endif

// BC_: rows of the other side per tile; the trainer uses the default (64 up to head size 64),
// test_gpu also checks and times 32 at head size 64 (gpu_att_tile64 below).
template <int HD, int BC_ = (HD <= 64 ? 64 : 32)>
struct AttShape {
    static constexpr int NW = HD <= 64 ? 4 : 2;   // warps per block: 128-wide heads need the registers
    static constexpr int BR = 16 * NW;            // this block's rows
    static constexpr int BC = BC_;                // rows of the other side per tile
    static constexpr int LD = HD + 8;             // bf16 row pitch in shared memory: 16-byte rows, banks skewed
    static constexpr int NT = BC / 8;             // 8-wide column tiles of a score tile
    static constexpr int DT = HD / 8;             // 8-wide column tiles of an output row
};
static const float ATT_LOG2E = 1.4426950408889634f;

// Rows [r0, r0 + N) of two T-row bf16 matrices (a, b: row 0 at their column offsets,
// pitches sa, sb elements; b may be NULL) into shared da[N][LD], db[N][LD]; rows >= T
// become zeros. 16 bytes per access, every thread of the block (NW warps) takes part, and
// all its loads are issued before its first store, so they are in flight together.
template <int HD, int N>
__device__ __forceinline__ void att_stage(bf16* da, const bf16* a, int sa, bf16* db, const bf16* b, int sb, int r0, int T) {
    constexpr int THREADS = AttShape<HD>::NW * 32, LD = AttShape<HD>::LD, PER = N * HD / 8 / THREADS;
    static_assert(PER * THREADS == N * HD / 8, "attention: a staged tile is not a whole number of accesses per thread");
    uint4 va[PER], vb[PER];
    #pragma unroll
    for (int i = 0; i < PER; i++) {
        int e = threadIdx.x + i * THREADS, r = e / (HD / 8), c = e % (HD / 8) * 8;
        va[i] = vb[i] = make_uint4(0, 0, 0, 0);
        if (r0 + r < T) va[i] = *(const uint4*)(a + (size_t)(r0 + r) * sa + c);
        if (r0 + r < T && b) vb[i] = *(const uint4*)(b + (size_t)(r0 + r) * sb + c);
    }
    #pragma unroll
    for (int i = 0; i < PER; i++) {
        int e = threadIdx.x + i * THREADS, r = e / (HD / 8), c = e % (HD / 8) * 8;
        *(uint4*)(da + r * LD + c) = va[i];
        if (b) *(uint4*)(db + r * LD + c) = vb[i];
    }
}
// s[NT][4] += a . b^T: a is this warp's 16 rows (shared, pitch LD, HD wide), b the rows
// [0, 8 NT) of a shared [.][LD] matrix. s[n] is the 16 x 8 accumulator of b's rows 8n ...
template <int HD, int LD, int NT>
__device__ __forceinline__ void att_abT(float (*s)[4], const bf16* a, const bf16* b) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int k = 0; k < HD; k += 16) {
        uint32_t af[4], bf[4];
        ldsm_x4(af, a + (lane % 16) * LD + k + lane / 16 * 8);  // matrices: rows 0-7 | 8-15, cols k | k+8
        #pragma unroll
        for (int n = 0; n < NT; n += 2) {  // matrices: b rows 8n | 8n+8, cols k | k+8
            ldsm_x4(bf, b + (n * 8 + lane % 8 + lane / 16 * 8) * LD + k + lane / 8 % 2 * 8);
            mma_16816(s[n], af, bf);
            mma_16816(s[n + 1], af, bf + 2);
        }
    }
}
// acc[DT][4] += p . v: p is a 16 x BC bf16 matrix as A operands (p[k] for columns 16k ..),
// v the rows [0, BC) of a shared [.][LD] matrix (HD wide).
template <int HD, int LD, int BC>
__device__ __forceinline__ void att_pv(float (*acc)[4], const uint32_t (*p)[4], const bf16* v) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int k = 0; k < BC / 16; k++)
        #pragma unroll
        for (int d = 0; d < HD / 8; d += 2) {  // transposed matrices: v rows 16k | 16k+8, cols 8d | 8d+8
            uint32_t bf[4];
            ldsm_x4_t(bf, v + (k * 16 + lane % 8 + lane / 8 % 2 * 8) * LD + d * 8 + lane / 16 * 8);
            mma_16816(acc[d], p[k], bf);
            mma_16816(acc[d + 1], p[k], bf + 2);
        }
}
// The accumulators s[NT][4] (fp32, 16 x BC) as the bf16 A operands p[BC / 16][4] of the
// next product: the accumulator pair of columns 2t, 2t+1 is the A register of those columns.
template <int NT>
__device__ __forceinline__ void att_to_a(uint32_t (*p)[4], const float (*s)[4]) {
    #pragma unroll
    for (int k = 0; k < NT / 2; k++) {
        p[k][0] = pack_bf16x2(s[2 * k][0], s[2 * k][1]);
        p[k][1] = pack_bf16x2(s[2 * k][2], s[2 * k][3]);
        p[k][2] = pack_bf16x2(s[2 * k + 1][0], s[2 * k + 1][1]);
        p[k][3] = pack_bf16x2(s[2 * k + 1][2], s[2 * k + 1][3]);
    }
}
// Rows r0 + g and r0 + g + 8 (those < T) of dst (pitch `pitch`) = acc * scale[0 | 1] as bf16.
template <int DT>
__device__ __forceinline__ void att_write(bf16* dst, size_t pitch, int r0, int T, const float (*acc)[4], const float scale[2]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = r0 + g + 8 * h;
        if (row >= T) continue;
        uint32_t* d = (uint32_t*)(dst + (size_t)row * pitch + 2 * t);
        #pragma unroll
        for (int n = 0; n < DT; n++) d[n * 4] = pack_bf16x2(acc[n][2 * h] * scale[h], acc[n][2 * h + 1] * scale[h]);
    }
}

// Forward: one block per (query block, head, batch). The second launch bound (blocks per
// SM) keeps hd-64 registers at 4 forward / 3 backward blocks per SM of 64K registers
// (without it ptxas took 134 / 165 / 190 registers, 3 / 3 / 2 blocks); ptxas -v shows
// no spills with it, for every head size.
template <int HD, int BCK>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 4)
attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int H, int KV) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Qs[BR * LD], Ks[BC * LD], Vs[BC * LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int b = blockIdx.z, h = blockIdx.y, q_blk = (gridDim.x - 1 - blockIdx.x) * BR, q0 = q_blk + warp * 16;  // latest (longest) first
    int stride = (H + 2 * KV) * HD, kvh = h / (H / KV);
    const bf16* base = qkv + (size_t)b * T * stride;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);  // scores in log2 units

    att_stage<HD, BR>(Qs, base + h * HD, stride, NULL, NULL, 0, q_blk, T);
    float o[DT][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows q0 + g, q0 + g + 8
    int k_end = min(q_blk + BR, T);  // keys [0, k_end) matter to this block
    for (int kt = 0; kt < k_end; kt += BC) {
        __syncthreads();  // everyone is done with the previous tiles
        att_stage<HD, BC>(Ks, base + (H + kvh) * HD, stride, Vs, base + (H + KV + kvh) * HD, stride, kt, T);
        __syncthreads();
        if (kt > q0 + 15) continue;  // warp-uniform: the whole tile is after this warp's queries
        float s[NT][4] = {};
        att_abT<HD, LD, NT>(s, Qs + warp * 16 * LD, Ks);
        float mx[2] = {m[0], m[1]};
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2, q = q0 + g + 8 * (i / 2);
                s[n][i] = j <= q ? s[n][i] * sl2 : -INFINITY;  // causal (keys >= T are after every q < T)
                mx[i / 2] = fmaxf(mx[i / 2], s[n][i]);
            }
        float corr[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));  // finite: key 0 is in every row's first tile
            corr[r] = exp2f(m[r] - mx[r]);  // 0 on the first tile (m = -inf)
            m[r] = mx[r], l[r] *= corr[r];  // l: this lane's part of the row sum
        }
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) s[n][i] = exp2f(s[n][i] - m[i / 2]), l[i / 2] += s[n][i];
        #pragma unroll
        for (int d = 0; d < DT; d++)
            #pragma unroll
            for (int i = 0; i < 4; i++) o[d][i] *= corr[i / 2];
        uint32_t p[NT / 2][4];
        att_to_a<NT>(p, s);
        att_pv<HD, LD, BC>(o, p, Vs);
    }
    float inv[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        int q = q0 + g + 8 * r;
        if (t == 0 && q < T) lse[((size_t)b * H + h) * T + q] = (m[r] + log2f(l[r])) / ATT_LOG2E;  // natural log
    }
    att_write<DT>(out + (size_t)b * T * H * HD + h * HD, (size_t)H * HD, q0, T, o, inv);
}

// Dsum[b,h,t] = sum_d dout * out: the softmax-backward term sum_j P_ij dP_ij (FlashAttention-2).
__global__ void attention_dsum_kernel(float* dsum, const bf16* dout, const bf16* out, int B, int T, int H, int hd) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b, t, h) in out's order
    if (row >= (size_t)B * T * H) return;
    size_t bt = row / H;
    int h = (int)(row % H), b = (int)(bt / T), t = (int)(bt % T);
    const bf16* d = dout + row * hd;
    const bf16* o = out + row * hd;
    float s = 0.0f;
    for (int k = lane; k < hd; k += 32) s += bf2f(d[k]) * bf2f(o[k]);
    s = warp_sum(s);
    if (lane == 0) dsum[((size_t)b * H + h) * T + t] = s;
}

// dq = scale * sum_j dS_ij k_j, dS_ij = P_ij (dout_i . v_j - Dsum_i): one block per
// (query block, head, batch), walking the key tiles up to the diagonal.
template <int HD, int BCK>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 3)
attention_backward_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum,
                             int T, int H, int KV) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Qs[BR * LD], dOs[BR * LD], Ks[BC * LD], Vs[BC * LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int b = blockIdx.z, h = blockIdx.y, q_blk = (gridDim.x - 1 - blockIdx.x) * BR, q0 = q_blk + warp * 16;  // latest (longest) first
    int stride = (H + 2 * KV) * HD, kvh = h / (H / KV);
    const bf16* base = qkv + (size_t)b * T * stride;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);  // sl2 as in the forward

    att_stage<HD, BR>(Qs, base + h * HD, stride, dOs, dout + (size_t)b * T * H * HD + h * HD, H * HD, q_blk, T);
    float lse2[2], ds[2];  // rows q0 + g, q0 + g + 8; rows >= T get 0 (their dO is 0, so is their dS)
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int q = q0 + g + 8 * r;
        lse2[r] = q < T ? lse[((size_t)b * H + h) * T + q] * ATT_LOG2E : 0.0f;
        ds[r] = q < T ? dsum[((size_t)b * H + h) * T + q] : 0.0f;
    }
    float dq[DT][4] = {};
    int k_end = min(q_blk + BR, T);
    for (int kt = 0; kt < k_end; kt += BC) {
        __syncthreads();  // Qs, dOs are staged / the previous tiles are used
        att_stage<HD, BC>(Ks, base + (H + kvh) * HD, stride, Vs, base + (H + KV + kvh) * HD, stride, kt, T);
        __syncthreads();
        if (kt > q0 + 15) continue;
        float s[NT][4] = {}, dp[NT][4] = {};
        att_abT<HD, LD, NT>(s, Qs + warp * 16 * LD, Ks);
        att_abT<HD, LD, NT>(dp, dOs + warp * 16 * LD, Vs);
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2, q = q0 + g + 8 * (i / 2);
                float p = j <= q ? exp2f(s[n][i] * sl2 - lse2[i / 2]) : 0.0f;
                s[n][i] = p * (dp[n][i] - ds[i / 2]);  // dS
            }
        uint32_t dsa[NT / 2][4];
        att_to_a<NT>(dsa, s);
        att_pv<HD, LD, BC>(dq, dsa, Ks);
    }
    const float scales[2] = {scale, scale};
    att_write<DT>(dqkv + (size_t)b * T * stride + h * HD, stride, q0, T, dq, scales);
}

// dk = scale * sum_i dS_ij q_i and dv = sum_i P_ij dout_i over the H/KV query heads that
// share kv head kvh and the queries i >= j: one block per (key block, kv head, batch). The
// score tiles are transposed here (rows: keys, columns: queries).
template <int HD, int BCK>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 3)
attention_backward_dkv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum,
                              int T, int H, int KV) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Kb[BR * LD], Vb[BR * LD], Qs[BC * LD], dOs[BC * LD];
    __shared__ float lses[BC], dss[BC];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int b = blockIdx.z, kvh = blockIdx.y, j_blk = blockIdx.x * BR, j0 = j_blk + warp * 16;
    int stride = (H + 2 * KV) * HD, group = H / KV;
    const bf16* base = qkv + (size_t)b * T * stride;
    const bf16* dout_b = dout + (size_t)b * T * H * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);  // sl2 as in the forward

    att_stage<HD, BR>(Kb, base + (H + kvh) * HD, stride, Vb, base + (H + KV + kvh) * HD, stride, j_blk, T);
    float dk[DT][4] = {}, dv[DT][4] = {};
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (int qt = j_blk; qt < T; qt += BC) {  // queries before j_blk see none of these keys
            __syncthreads();  // Kb, Vb are staged / the previous tiles are used
            att_stage<HD, BC>(Qs, base + h * HD, stride, dOs, dout_b + h * HD, H * HD, qt, T);
            for (int i = threadIdx.x; i < BC; i += blockDim.x) {
                int q = qt + i;
                lses[i] = q < T ? lse[((size_t)b * H + h) * T + q] * ATT_LOG2E : 0.0f;
                dss[i] = q < T ? dsum[((size_t)b * H + h) * T + q] : 0.0f;
            }
            __syncthreads();
            if (qt + BC - 1 < j0) continue;  // warp-uniform: the whole tile is before this warp's keys
            float st[NT][4] = {}, dpt[NT][4] = {};
            att_abT<HD, LD, NT>(st, Kb + warp * 16 * LD, Qs);
            att_abT<HD, LD, NT>(dpt, Vb + warp * 16 * LD, dOs);
            #pragma unroll
            for (int n = 0; n < NT; n++)
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    int c = n * 8 + 2 * t + i % 2, q = qt + c, j = j0 + g + 8 * (i / 2);
                    float p = q >= j && q < T ? exp2f(st[n][i] * sl2 - lses[c]) : 0.0f;
                    st[n][i] = p;                        // P^T
                    dpt[n][i] = p * (dpt[n][i] - dss[c]);  // dS^T
                }
            uint32_t pa[NT / 2][4], dsa[NT / 2][4];
            att_to_a<NT>(pa, st);
            att_to_a<NT>(dsa, dpt);
            att_pv<HD, LD, BC>(dv, pa, dOs);
            att_pv<HD, LD, BC>(dk, dsa, Qs);
        }
    const float scales[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
    att_write<DT>(dqkv + (size_t)b * T * stride + (H + kvh) * HD, stride, j0, T, dk, scales);
    att_write<DT>(dqkv + (size_t)b * T * stride + (H + KV + kvh) * HD, stride, j0, T, dv, one);
}

template <int HD, int BCK = AttShape<HD>::BC>
static void attention_forward_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int H, int KV, cudaStream_t s) {
    attention_forward_kernel<HD, BCK><<<dim3(cdiv(T, AttShape<HD>::BR), H, B), AttShape<HD>::NW * 32, 0, s>>>(out, lse, qkv, T, H, KV);
    launchCheck();
}
template <int HD, int BCK = AttShape<HD>::BC>
static void attention_backward_launch(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum,
                                      int B, int T, int H, int KV, cudaStream_t s) {
    dim3 block(AttShape<HD>::NW * 32);
    attention_backward_dq_kernel<HD, BCK><<<dim3(cdiv(T, AttShape<HD>::BR), H, B), block, 0, s>>>(dqkv, dout, qkv, lse, dsum, T, H, KV);
    launchCheck();
    attention_backward_dkv_kernel<HD, BCK><<<dim3(cdiv(T, AttShape<HD>::BR), KV, B), block, 0, s>>>(dqkv, dout, qkv, lse, dsum, T, H, KV);
    launchCheck();
}

// Keys (queries in dk/dv) per tile at head size 64: 64 (the default) or 32. Whether the
// fewer, larger tiles win over more resident blocks is for a GPU to say: test_gpu checks
// both and its benchmark times both.
static int gpu_att_tile64 = 64;
static int attention_tile(int hd) { return hd == 64 ? gpu_att_tile64 : hd == 128 ? AttShape<128>::BC : AttShape<16>::BC; }

static void attention_check(int H, int KV, int hd) {
    if (KV <= 0 || H % KV) fail("attention: %d query heads do not group over %d kv heads", H, KV);
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128) fail("attention: head size %d not supported (16, 32, 64, 128)", hd);
}

// out (B*T, H*hd) bf16, lse (B, H, T) fp32 (logsumexp of the scaled scores, for backward).
static void attention_forward_gpu(bf16* out, float* lse, const bf16* qkv, int B, int T, int H, int KV, int hd, cudaStream_t s) {
    attention_check(H, KV, hd);
    if (hd == 16) attention_forward_launch<16>(out, lse, qkv, B, T, H, KV, s);
    else if (hd == 32) attention_forward_launch<32>(out, lse, qkv, B, T, H, KV, s);
    else if (hd == 64 && gpu_att_tile64 == 32) attention_forward_launch<64, 32>(out, lse, qkv, B, T, H, KV, s);
    else if (hd == 64) attention_forward_launch<64>(out, lse, qkv, B, T, H, KV, s);
    else attention_forward_launch<128>(out, lse, qkv, B, T, H, KV, s);
}

// dqkv (B*T, (H+2KV)*hd) bf16 is overwritten: dq, dk, dv of every row. out and lse are the
// forward's. Uses B*H*T floats of the reduction scratch for Dsum.
static void attention_backward_gpu(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                                   int B, int T, int H, int KV, int hd, cudaStream_t s) {
    attention_check(H, KV, hd);
    size_t rows = (size_t)B * T * H;
    if (rows > gpu_scratch_n) fail("attention backward: reduction scratch (%zu floats) < B*H*T = %zu", gpu_scratch_n, rows);
    float* dsum = gpu_scratch;
    attention_dsum_kernel<<<cdiv(rows, 8), 256, 0, s>>>(dsum, dout, out, B, T, H, hd);
    launchCheck();
    if (hd == 16) attention_backward_launch<16>(dqkv, dout, qkv, lse, dsum, B, T, H, KV, s);
    else if (hd == 32) attention_backward_launch<32>(dqkv, dout, qkv, lse, dsum, B, T, H, KV, s);
    else if (hd == 64 && gpu_att_tile64 == 32) attention_backward_launch<64, 32>(dqkv, dout, qkv, lse, dsum, B, T, H, KV, s);
    else if (hd == 64) attention_backward_launch<64>(dqkv, dout, qkv, lse, dsum, B, T, H, KV, s);
    else attention_backward_launch<128>(dqkv, dout, qkv, lse, dsum, B, T, H, KV, s);
}

// ----------------------------------------------------------------------------
// Context parallelism's blocks (model/config.h AttnBlock): the kernels above with the
// queries of one segment against the keys of another, key j (of the block) seen by query i
// iff j <= i + diag (diag = q_pos - k_pos: the diagonal block, a block seen whole, or part
// of one), fp32 outputs merged into the running output and lse by log-sum-exp (forward) or
// added (dq, dk, dv), as kernels_cpu.h attention_block_forward / _backward do. Kernels of
// their own: the whole-sequence ones templated on this mode ran 4-7% slower at head size 128
// on an H200 (test_gpu's shapes; the extra geometry pushed the register allocation over).
//
// B sequences (blockIdx.z); in sequence b the query rows [0, nq) start at q + b * q_seq
// (row stride q_ld, query head h at column h * HD), the key rows [0, nk) at k and v + b *
// kv_seq (stride kv_ld, kv head c at column c * HD). o, dq and dout have rows o_ld apart,
// o_seq per sequence; dk, dv rows dkv_ld apart, dkv_seq per sequence; the lse and Dsum of
// query i of head h are at (b * H + h) * l_ld + i.
struct AttBlockArgs {
    const bf16 *q, *k, *v, *dout;
    float *o, *dq, *dk, *dv;
    float* lse;                        // merged by the forward, read by the backward
    const float* dsum;
    size_t q_seq, kv_seq, o_seq, dkv_seq;
    int q_ld, kv_ld, o_ld, dkv_ld, l_ld;
    int nq, nk, diag, H, KV;
    int init;                          // the first block of its query rows: their running output starts here
};

// The last key each of this thread's rows q0 + g, q0 + g + 8 sees (< 0: none).
__device__ __forceinline__ void att_last_keys(int last[2], int q0, int diag, int nk) {
    int g = threadIdx.x % 32 / 4;
    #pragma unroll
    for (int r = 0; r < 2; r++) last[r] = min(q0 + g + 8 * r + diag, nk - 1);
}

// Rows r0 + g and r0 + g + 8 (those < n) of the fp32 dst (pitch `pitch`) += acc * scale.
template <int DT>
__device__ __forceinline__ void att_add(float* dst, size_t pitch, int r0, int n, const float (*acc)[4], float scale) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = r0 + g + 8 * h;
        if (row >= n) continue;
        float* d = dst + (size_t)row * pitch + 2 * t;
        #pragma unroll
        for (int c = 0; c < DT; c++) d[c * 8] += acc[c][2 * h] * scale, d[c * 8 + 1] += acc[c][2 * h + 1] * scale;
    }
}

// The block's forward merged into the running output a.o and log-sum-exp a.lse of this
// thread's rows q0 + g, q0 + g + 8 (kernels_cpu.h attention_block_forward's formula): with
// the block's row max m and sum l (log2 units) and its unnormalized output acc,
//     lse' = log(e^lse + e^(m/log2e) l),  o' = o e^(lse - lse') + acc e^(m/log2e - lse').
// A row that saw no key of the block is left alone (a.init: it becomes o = 0, lse = -inf).
template <int DT>
__device__ void att_merge(const AttBlockArgs& a, int b, int h, int q0, const float (*acc)[4], const float m[2], const float l[2]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, HD = DT * 8;
    float keep[2], add[2], merged[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + g + 8 * r;
        float old = a.init || i >= a.nq ? -INFINITY : a.lse[((size_t)b * a.H + h) * a.l_ld + i];
        keep[r] = add[r] = 0.0f, merged[r] = -INFINITY;
        if (m[r] == -INFINITY) continue;
        float blk = (m[r] + log2f(l[r])) / ATT_LOG2E, top = fmaxf(old, blk);
        merged[r] = top + logf(expf(old - top) + expf(blk - top));
        keep[r] = old == -INFINITY ? 0.0f : expf(old - merged[r]);
        add[r] = exp2f(m[r] - merged[r] * ATT_LOG2E);
    }
    __syncwarp();  // the four lanes of a row have read its old lse before lane 0 rewrites it
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + g + 8 * r;
        if (i >= a.nq || (m[r] == -INFINITY && !a.init)) continue;
        if (t == 0) a.lse[((size_t)b * a.H + h) * a.l_ld + i] = merged[r];
        float* o = a.o + b * a.o_seq + (size_t)i * a.o_ld + h * HD + 2 * t;
        #pragma unroll
        for (int c = 0; c < DT; c++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float* p = o + c * 8 + e;
                *p = (keep[r] != 0.0f ? *p * keep[r] : 0.0f) + acc[c][2 * r + e] * add[r];
            }
    }
}

// As attention_forward_kernel, over the keys the block's queries see, then merged.
template <int HD, int BCK>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 4)
attention_block_forward_kernel(AttBlockArgs a) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Qs[BR * LD], Ks[BC * LD], Vs[BC * LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    int b = blockIdx.z, h = blockIdx.y, q_blk = (gridDim.x - 1 - blockIdx.x) * BR, q0 = q_blk + warp * 16;  // latest (longest) first
    int kvh = h / (a.H / a.KV);
    const bf16* k = a.k + b * a.kv_seq + kvh * HD;
    const bf16* v = a.v + b * a.kv_seq + kvh * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);  // scores in log2 units

    att_stage<HD, BR>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, NULL, NULL, 0, q_blk, a.nq);
    float o[DT][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows q0 + g, q0 + g + 8
    int last[2];
    att_last_keys(last, q0, a.diag, a.nk);
    int k_end = min(q_blk + BR + a.diag, a.nk);  // keys [0, k_end) matter to this block
    for (int kt = 0; kt < k_end; kt += BC) {
        __syncthreads();  // everyone is done with the previous tiles
        att_stage<HD, BC>(Ks, k, a.kv_ld, Vs, v, a.kv_ld, kt, a.nk);
        __syncthreads();
        if (kt > q0 + 15 + a.diag) continue;  // warp-uniform: the whole tile is after this warp's queries
        float s[NT][4] = {};
        att_abT<HD, LD, NT>(s, Qs + warp * 16 * LD, Ks);
        float mx[2] = {m[0], m[1]};
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2;
                s[n][i] = j <= last[i / 2] ? s[n][i] * sl2 : -INFINITY;  // causal, and the block's keys only
                mx[i / 2] = fmaxf(mx[i / 2], s[n][i]);
            }
        float corr[2], shift[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            shift[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row that has seen no key yet: nothing moves (exp2(-inf) = 0)
            corr[r] = exp2f(m[r] - shift[r]);  // 0 on the row's first tile with a key (m = -inf)
            m[r] = mx[r], l[r] *= corr[r];  // l: this lane's part of the row sum
        }
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) s[n][i] = exp2f(s[n][i] - shift[i / 2]), l[i / 2] += s[n][i];
        #pragma unroll
        for (int d = 0; d < DT; d++)
            #pragma unroll
            for (int i = 0; i < 4; i++) o[d][i] *= corr[i / 2];
        uint32_t p[NT / 2][4];
        att_to_a<NT>(p, s);
        att_pv<HD, LD, BC>(o, p, Vs);
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    att_merge<DT>(a, b, h, q0, o, m, l);
}

// As attention_backward_dq_kernel: dq (fp32) += the block's.
template <int HD, int BCK>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 3)
attention_block_dq_kernel(AttBlockArgs a) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Qs[BR * LD], dOs[BR * LD], Ks[BC * LD], Vs[BC * LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int b = blockIdx.z, h = blockIdx.y, q_blk = (gridDim.x - 1 - blockIdx.x) * BR, q0 = q_blk + warp * 16;  // latest (longest) first
    int kvh = h / (a.H / a.KV);
    const bf16* k = a.k + b * a.kv_seq + kvh * HD;
    const bf16* v = a.v + b * a.kv_seq + kvh * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);  // sl2 as in the forward

    att_stage<HD, BR>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, dOs, a.dout + b * a.o_seq + h * HD, a.o_ld, q_blk, a.nq);
    float lse2[2], ds[2];  // rows q0 + g, q0 + g + 8; rows >= nq get 0 (their dO is 0, so is their dS)
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int q = q0 + g + 8 * r;
        lse2[r] = q < a.nq ? a.lse[((size_t)b * a.H + h) * a.l_ld + q] * ATT_LOG2E : 0.0f;
        ds[r] = q < a.nq ? a.dsum[((size_t)b * a.H + h) * a.l_ld + q] : 0.0f;
    }
    int last[2];
    att_last_keys(last, q0, a.diag, a.nk);
    float dq[DT][4] = {};
    int k_end = min(q_blk + BR + a.diag, a.nk);
    for (int kt = 0; kt < k_end; kt += BC) {
        __syncthreads();  // Qs, dOs are staged / the previous tiles are used
        att_stage<HD, BC>(Ks, k, a.kv_ld, Vs, v, a.kv_ld, kt, a.nk);
        __syncthreads();
        if (kt > q0 + 15 + a.diag) continue;
        float s[NT][4] = {}, dp[NT][4] = {};
        att_abT<HD, LD, NT>(s, Qs + warp * 16 * LD, Ks);
        att_abT<HD, LD, NT>(dp, dOs + warp * 16 * LD, Vs);
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2;
                float p = j <= last[i / 2] ? exp2f(s[n][i] * sl2 - lse2[i / 2]) : 0.0f;
                s[n][i] = p * (dp[n][i] - ds[i / 2]);  // dS
            }
        uint32_t dsa[NT / 2][4];
        att_to_a<NT>(dsa, s);
        att_pv<HD, LD, BC>(dq, dsa, Ks);
    }
    att_add<DT>(a.dq + b * a.o_seq + h * HD, a.o_ld, q0, a.nq, dq, scale);
}

// As attention_backward_dkv_kernel: dk, dv (fp32) += the block's, over the queries that see
// each key.
template <int HD, int BCK>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 3)
attention_block_dkv_kernel(AttBlockArgs a) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Kb[BR * LD], Vb[BR * LD], Qs[BC * LD], dOs[BC * LD];
    __shared__ float lses[BC], dss[BC];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int b = blockIdx.z, kvh = blockIdx.y, j_blk = blockIdx.x * BR, j0 = j_blk + warp * 16, group = a.H / a.KV;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);  // sl2 as in the forward

    att_stage<HD, BR>(Kb, a.k + b * a.kv_seq + kvh * HD, a.kv_ld, Vb, a.v + b * a.kv_seq + kvh * HD, a.kv_ld, j_blk, a.nk);
    float dk[DT][4] = {}, dv[DT][4] = {};
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (int qt = max(j_blk - a.diag, 0); qt < a.nq; qt += BC) {  // queries before j_blk - diag see none of these keys
            __syncthreads();  // Kb, Vb are staged / the previous tiles are used
            att_stage<HD, BC>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, dOs, a.dout + b * a.o_seq + h * HD, a.o_ld, qt, a.nq);
            for (int i = threadIdx.x; i < BC; i += blockDim.x) {
                int qi = qt + i;
                lses[i] = qi < a.nq ? a.lse[((size_t)b * a.H + h) * a.l_ld + qi] * ATT_LOG2E : 0.0f;
                dss[i] = qi < a.nq ? a.dsum[((size_t)b * a.H + h) * a.l_ld + qi] : 0.0f;
            }
            __syncthreads();
            if (qt + BC - 1 + a.diag < j0) continue;  // warp-uniform: the whole tile is before this warp's keys
            float st[NT][4] = {}, dpt[NT][4] = {};
            att_abT<HD, LD, NT>(st, Kb + warp * 16 * LD, Qs);
            att_abT<HD, LD, NT>(dpt, Vb + warp * 16 * LD, dOs);
            #pragma unroll
            for (int n = 0; n < NT; n++)
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    int c = n * 8 + 2 * t + i % 2, qi = qt + c, j = j0 + g + 8 * (i / 2);
                    float p = qi + a.diag >= j && qi < a.nq ? exp2f(st[n][i] * sl2 - lses[c]) : 0.0f;
                    st[n][i] = p;                        // P^T
                    dpt[n][i] = p * (dpt[n][i] - dss[c]);  // dS^T
                }
            uint32_t pa[NT / 2][4], dsa[NT / 2][4];
            att_to_a<NT>(pa, st);
            att_to_a<NT>(dsa, dpt);
            att_pv<HD, LD, BC>(dv, pa, dOs);
            att_pv<HD, LD, BC>(dk, dsa, Qs);
        }
    att_add<DT>(a.dk + b * a.dkv_seq + kvh * HD, a.dkv_ld, j0, a.nk, dk, scale);
    att_add<DT>(a.dv + b * a.dkv_seq + kvh * HD, a.dkv_ld, j0, a.nk, dv, 1.0f);
}

template <int HD, int BCK>
static void attention_block_launch(int fwd, const AttBlockArgs& a, int B, cudaStream_t s) {
    dim3 block(AttShape<HD>::NW * 32), q_grid(cdiv(a.nq, AttShape<HD>::BR), a.H, B);
    if (fwd) {
        attention_block_forward_kernel<HD, BCK><<<q_grid, block, 0, s>>>(a);
        launchCheck();
        return;
    }
    attention_block_dq_kernel<HD, BCK><<<q_grid, block, 0, s>>>(a);
    launchCheck();
    attention_block_dkv_kernel<HD, BCK><<<dim3(cdiv(a.nk, AttShape<HD>::BR), a.KV, B), block, 0, s>>>(a);
    launchCheck();
}
// The kernels of head size hd (and the hd-64 tile); fwd: the forward, else the backward.
static void attention_block_run(int fwd, const AttBlockArgs& a, int B, int hd, cudaStream_t s) {
    if (hd == 16) attention_block_launch<16, AttShape<16>::BC>(fwd, a, B, s);
    else if (hd == 32) attention_block_launch<32, AttShape<32>::BC>(fwd, a, B, s);
    else if (hd == 64 && gpu_att_tile64 == 32) attention_block_launch<64, 32>(fwd, a, B, s);
    else if (hd == 64) attention_block_launch<64, 64>(fwd, a, B, s);
    else attention_block_launch<128, AttShape<128>::BC>(fwd, a, B, s);
}

// The block's operands: q rows hold the query heads from column 0 (stride blk->q_ld), kv
// rows the k heads then the v heads (stride blk->kv_ld); the running output o, dq, dout and
// out are B*Ts x Ha*hd, dkv B*Ts x 2*KVa*hd (dk then dv), lse B x Ha x Ts.
static AttBlockArgs att_block(const AttnBlock* blk, const bf16* q, const bf16* kv) {
    attention_check(blk->Ha, blk->KVa, blk->hd);
    AttBlockArgs a = {};
    int hd = blk->hd;
    a.q = q + (size_t)blk->q_row * blk->q_ld;
    a.k = kv + (size_t)blk->k_row * blk->kv_ld, a.v = a.k + blk->KVa * hd;
    a.q_seq = (size_t)blk->Ts * blk->q_ld, a.kv_seq = (size_t)blk->Ts * blk->kv_ld, a.q_ld = blk->q_ld, a.kv_ld = blk->kv_ld;
    a.o_ld = blk->Ha * hd, a.o_seq = (size_t)blk->Ts * a.o_ld;
    a.dkv_ld = 2 * blk->KVa * hd, a.dkv_seq = (size_t)blk->Ts * a.dkv_ld;
    a.l_ld = blk->Ts;
    a.nq = blk->nq, a.nk = blk->nk, a.diag = blk->q_pos - blk->k_pos, a.H = blk->Ha, a.KV = blk->KVa, a.init = blk->init;
    return a;
}
// o, lse (fp32): the block merged in by log-sum-exp (blk->init: its query rows start here).
static void attention_block_forward_gpu(float* o, float* lse, const bf16* q, const bf16* kv, const AttnBlock* blk, cudaStream_t s) {
    AttBlockArgs a = att_block(blk, q, kv);
    a.o = o + (size_t)blk->q_row * a.o_ld, a.lse = lse + blk->q_row;
    attention_block_run(1, a, blk->B, blk->hd, s);
}
// dq, dkv (fp32) += the block's gradients, from the final lse and out. Dsum goes to the
// reduction scratch, for all B*Ha*Ts rows (the whole-sequence kernel's, on Ts rows: a pass
// over out and dout, small beside the block).
static void attention_block_backward_gpu(float* dq, float* dkv, const bf16* q, const bf16* kv, const bf16* dout,
                                         const bf16* out, const float* lse, const AttnBlock* blk, cudaStream_t s) {
    AttBlockArgs a = att_block(blk, q, kv);
    size_t rows = (size_t)blk->B * blk->Ts * blk->Ha, q_off = (size_t)blk->q_row * a.o_ld, k_off = (size_t)blk->k_row * a.dkv_ld;
    if (rows > gpu_scratch_n) fail("attention backward: reduction scratch (%zu floats) < B*Ha*Ts = %zu", gpu_scratch_n, rows);
    attention_dsum_kernel<<<cdiv(rows, 8), 256, 0, s>>>(gpu_scratch, dout, out, blk->B, blk->Ts, blk->Ha, blk->hd);
    launchCheck();
    a.dout = dout + q_off, a.lse = (float*)lse + blk->q_row, a.dsum = gpu_scratch + blk->q_row;
    a.dq = dq + q_off, a.dk = dkv + k_off, a.dv = dkv + k_off + blk->KVa * blk->hd;
    attention_block_run(0, a, blk->B, blk->hd, s);
}

// dqkv (rows x (Ha + 2*KVa)*hd, bf16) = [dq (Ha*hd) | dkv (2*KVa*hd)] rounded: the ring's
// fp32 gradients packed as the qkv rows they belong to.
__global__ void attention_grad_pack_kernel(bf16* dqkv, const float* dq, const float* dkv, size_t rows, int nq, int nkv) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, w = (size_t)nq + nkv;
    if (idx >= rows * w) return;
    size_t i = idx / w;
    int c = (int)(idx % w);
    dqkv[idx] = f2bf(c < nq ? dq[i * nq + c] : dkv[i * nkv + c - nq]);
}
static void attention_grad_pack_gpu(bf16* dqkv, const float* dq, const float* dkv, size_t rows, int Ha, int KVa, int hd,
                                    cudaStream_t s) {
    size_t n = rows * (Ha + 2 * KVa) * hd;
    if (!n) return;
    attention_grad_pack_kernel<<<cdiv(n, 256), 256, 0, s>>>(dqkv, dq, dkv, rows, Ha * hd, 2 * KVa * hd);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Vocabulary-parallel embedding (rows [v0, v0+Vl) of wte here) and position embedding.

__global__ void embedding_forward_kernel(bf16* out, const int* tokens, const bf16* wte, int N, int C, int v0, int Vl) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    size_t i = idx / C, c = idx % C;
    int r = tokens[i] - v0;
    out[idx] = (r >= 0 && r < Vl) ? wte[(size_t)r * C + c] : f2bf(0.0f);
}
// dwte (Vl x C, fp32) += dout rows of the tokens in range; fp32 atomics (order-dependent in the last bits).
__global__ void embedding_backward_kernel(float* dwte, const int* tokens, const bf16* dout, int N, int C, int v0, int Vl) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    size_t i = idx / C, c = idx % C;
    int r = tokens[i] - v0;
    if (r >= 0 && r < Vl) atomicAdd(&dwte[(size_t)r * C + c], bf2f(dout[idx]));
}
// tokens: device ints (N).
static void embedding_forward_gpu(bf16* out, const int* tokens, const bf16* wte, int N, int C, int v0, int Vl, cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    embedding_forward_kernel<<<cdiv((size_t)N * C, 256), 256, 0, s>>>(out, tokens, wte, N, C, v0, Vl);
    launchCheck();
}
static void embedding_backward_gpu(float* dwte, const int* tokens, const bf16* dout, int N, int C, int v0, int Vl, cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    embedding_backward_kernel<<<cdiv((size_t)N * C, 256), 256, 0, s>>>(dwte, tokens, dout, N, C, v0, Vl);
    launchCheck();
}

// Rows [row0, row0+N) of a (B*T)-row batch: out += wpe[positions[row % T]] (positions:
// device ints, the sequence position of each of a sequence's T rows on this rank).
__global__ void position_forward_kernel(bf16* out, const bf16* wpe, int N, int row0, const int* positions, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    size_t i = idx / C, c = idx % C;
    out[idx] = f2bf(bf2f(out[idx]) + bf2f(wpe[(size_t)positions[(row0 + i) % T] * C + c]));
}
// dwpe (fp32, a row per sequence position) += the sum over the rows at each position, in row
// order (deterministic): one thread per (row t of a sequence, column); the T positions of
// one rank are distinct, so no two threads write one element.
__global__ void position_backward_kernel(float* dwpe, const bf16* dout, int N, int row0, const int* positions, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    int t = (int)(idx / C), c = (int)(idx % C);
    int i0 = ((t - row0) % T + T) % T;  // first local row i with (row0 + i) % T == t
    float s = 0.0f;
    for (int i = i0; i < N; i += T) s += bf2f(dout[(size_t)i * C + c]);
    dwpe[(size_t)positions[t] * C + c] += s;
}
static void position_forward_gpu(bf16* out, const bf16* wpe, int N, int row0, const int* positions, int T, int C, cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    position_forward_kernel<<<cdiv((size_t)N * C, 256), 256, 0, s>>>(out, wpe, N, row0, positions, T, C);
    launchCheck();
}
static void position_backward_gpu(float* dwpe, const bf16* dout, int N, int row0, const int* positions, int T, int C,
                                  cudaStream_t s) {
    if ((size_t)T * C == 0) return;
    position_backward_kernel<<<cdiv((size_t)T * C, 256), 256, 0, s>>>(dwpe, dout, N, row0, positions, T, C);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Vocabulary-parallel cross-entropy, the same three passes as the CPU: the caller
// all-reduces maxes (MAX) and then sums (2N floats: [sum exp | target logit], SUM) over
// the tp group between the calls. One block per row; logits (N x Vl) bf16; columns
// >= vocab - v0 are padding. targets: device ints. maxes, sums, losses: fp32 device.

#define CE_THREADS 256
// Each thread walks its row in chunks of 8 (load8): row i starts 16-byte aligned when Vl
// is a multiple of 8, as the padded vocabulary and its tp shards are.
__global__ void ce_local_max_kernel(float* maxes, const bf16* logits, int Vl, int vn) {
    const bf16* l = logits + (size_t)blockIdx.x * Vl;
    float m = -FLT_MAX, x[8];
    for (int j = threadIdx.x * 8; j < vn; j += blockDim.x * 8) {
        load8(x, l + j, vn - j);
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (j + k < vn) m = fmaxf(m, x[k]);
    }
    m = block_reduce(m, 1);
    if (threadIdx.x == 0) maxes[blockIdx.x] = m;
}
__global__ void ce_local_sums_kernel(float* sums, const bf16* logits, const float* maxes, const int* targets, int N,
                                     int Vl, int v0, int vn) {
    int i = blockIdx.x;
    const bf16* l = logits + (size_t)i * Vl;
    float m = maxes[i], s = 0.0f, x[8];
    for (int j = threadIdx.x * 8; j < vn; j += blockDim.x * 8) {
        load8(x, l + j, vn - j);
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (j + k < vn) s += expf(x[k] - m);
    }
    s = block_reduce(s, 0);
    if (threadIdx.x == 0) {
        int r = targets[i] - v0;
        sums[i] = s;
        sums[N + i] = (r >= 0 && r < Vl) ? bf2f(l[r]) : 0.0f;
    }
}
__global__ void ce_finish_kernel(float* losses, bf16* dlogits, const float* maxes, const float* sums, const int* targets,
                                 int N, int Vl, int v0, int vn, float dloss_scale) {
    int i = blockIdx.x;
    float m = maxes[i], inv = 1.0f / sums[i], x[8];
    if (threadIdx.x == 0) losses[i] = logf(sums[i]) + m - sums[N + i];
    if (!dlogits) return;
    bf16* d = dlogits + (size_t)i * Vl;
    int r = targets[i] - v0;
    for (int j = threadIdx.x * 8; j < Vl; j += blockDim.x * 8) {  // each chunk read then written by one thread
        load8(x, d + j, Vl - j);
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            x[k] = j + k < vn ? expf(x[k] - m) * inv * dloss_scale : 0.0f;
            if (j + k == r) x[k] -= dloss_scale;
        }
        store8(d + j, x, Vl - j);
    }
}
static int ce_valid_cols(int Vl, int v0, int vocab) { return vocab - v0 < Vl ? vocab - v0 : Vl; }
static void crossentropy_local_max_gpu(float* maxes, const bf16* logits, int N, int Vl, int v0, int vocab, cudaStream_t s) {
    if (N <= 0) return;
    ce_local_max_kernel<<<N, CE_THREADS, 0, s>>>(maxes, logits, Vl, ce_valid_cols(Vl, v0, vocab));
    launchCheck();
}
// sums: 2N floats.
static void crossentropy_local_sums_gpu(float* sums, const bf16* logits, const float* maxes, const int* targets, int N,
                                        int Vl, int v0, int vocab, cudaStream_t s) {
    if (N <= 0) return;
    ce_local_sums_kernel<<<N, CE_THREADS, 0, s>>>(sums, logits, maxes, targets, N, Vl, v0, ce_valid_cols(Vl, v0, vocab));
    launchCheck();
}
// losses (N); dlogits (the logits, replaced in place by (softmax - onehot) * dloss_scale) or NULL.
static void crossentropy_finish_gpu(float* losses, bf16* dlogits, const float* maxes, const float* sums, const int* targets,
                                    int N, int Vl, int v0, int vocab, float dloss_scale, cudaStream_t s) {
    if (N <= 0) return;
    ce_finish_kernel<<<N, CE_THREADS, 0, s>>>(losses, dlogits, maxes, sums, targets, N, Vl, v0,
                                              ce_valid_cols(Vl, v0, vocab), dloss_scale);
    launchCheck();
}

// ----------------------------------------------------------------------------
// AdamW on the fp32 master weights and fp32 moments; writes the bf16 copy (param_bf16,
// may be NULL) the next forward reads. Same formula and bias correction as the CPU.

// One chunk of 8 per thread (load8/store8, fp32 and the bf16 copy).
__global__ void adamw_kernel(float* param, bf16* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, float grad_scale, float c1, float c2) {
    size_t i = chunk8();
    if (i >= n) return;
    float p[8], g[8], mi[8], vi[8];
    load8(p, param + i, n - i);
    load8(g, grad + i, n - i);
    load8(mi, m + i, n - i);
    load8(vi, v + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float gk = g[k] * grad_scale;
        mi[k] = beta1 * mi[k] + (1.0f - beta1) * gk;
        vi[k] = beta2 * vi[k] + (1.0f - beta2) * gk * gk;
        float mhat = mi[k] / c1, vhat = vi[k] / c2;
        p[k] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[k]);
    }
    store8(param + i, p, n - i);
    store8(m + i, mi, n - i);
    store8(v + i, vi, n - i);
    if (param_bf16) store8(param_bf16 + i, p, n - i);
}
static void adamw_update_gpu(float* param, bf16* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int decay, float grad_scale, int t,
                             cudaStream_t s) {
    if (!n) return;
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<grid8(n), 256, 0, s>>>(param, param_bf16, grad, m, v, n, lr, beta1, beta2, eps,
                                              decay ? weight_decay : 0.0f, grad_scale, c1, c2);
    launchCheck();
}

#endif
