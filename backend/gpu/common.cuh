// backend/gpu/common.cuh: what every GPU kernel file uses: bf16 and its conversions, the
// CUDA / cuBLAS error checks, warp and block reductions (sum, max), the per-process state
// (cuBLASLt handle and workspace, an fp32 reduction scratch), and load8 / store8, the
// chunks of 8 elements (16 bytes) the memory-bound kernels move per thread.
#ifndef GPU_COMMON_CUH
#define GPU_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <float.h>
#include <stdint.h>
#include "layout/config.h"

typedef __nv_bfloat16 bf16;

#define cudaCheck(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    fail("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__, cudaGetErrorString(e_), #call); } while (0)
#define cublasCheck(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) \
    fail("cuBLAS error at %s:%d: %s (%s)", __FILE__, __LINE__, cublasLtGetStatusString(s_), #call); } while (0)
// What the host asks of the device, counted per process (the trainer prints them per step:
// train_gpt.cu's step_done): kernel launches (launchCheck after each), cuBLASLt matmuls, copies
// and memsets queued on a stream, NCCL calls, and host waits (the host blocked until the device caught up:
// host_wait, host_wait_event). A GPU session checks its launch and sync figures against them.
typedef struct { long launches, matmuls, copies, collectives, waits; } GpuCounts;
static GpuCounts gpu_counts;
#define launchCheck() do { gpu_counts.launches++; cudaCheck(cudaGetLastError()); } while (0)
#define copyCheck(call) do { gpu_counts.copies++; cudaCheck(call); } while (0)  // a queued copy or memset
static void host_wait(cudaStream_t s) {
    gpu_counts.waits++;
    cudaCheck(cudaStreamSynchronize(s));
}
static void host_wait_event(cudaEvent_t e) {
    gpu_counts.waits++;
    cudaCheck(cudaEventSynchronize(e));
}

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

// cp.async (sm_80 on): 16 bytes from global to shared memory without passing through
// registers, beside the thread's other work. Copies are grouped: cp_async_commit closes the
// group issued since the last one, cp_async_wait<N> returns once at most the newest N
// committed groups are still in flight (their data is in shared memory for this thread;
// other threads see it after a __syncthreads). valid = false writes 16 zero bytes and reads
// nothing (src-size 0). The emulator (emu/intrinsics_emu.h) lands each copy at its wait.
// smem_t: an address in shared memory, as the PTX instructions take it (32 bits on the GPU;
// the emulator's is a host pointer).
#ifndef CUDA_EMU_H
typedef unsigned smem_t;
__device__ __forceinline__ smem_t smem_addr(const void* p) { return (smem_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait(void) { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }
#endif

// ----------------------------------------------------------------------------
// Per-process GPU state: the cuBLASLt handle and workspace, and a reduction scratch
// buffer (fp32) used by the two-pass column sums and by attention backward.

static cublasLtHandle_t gpu_lt;
static void* gpu_lt_workspace;
static const size_t GPU_LT_WORKSPACE = 32u << 20;  // 32 MiB, what cuBLAS recommends for Hopper
static float* gpu_scratch;
static size_t gpu_scratch_n;

// scratch_floats: a few C-sized rows for the column sums, the norm's partials, a copy of a matmul's D; 16M is ample.
static void gpu_kernels_init(size_t scratch_floats) {
    cublasCheck(cublasLtCreate(&gpu_lt));
    cudaCheck(cudaMalloc(&gpu_lt_workspace, GPU_LT_WORKSPACE));
    gpu_scratch_n = scratch_floats;
    cudaCheck(cudaMalloc(&gpu_scratch, sizeof(float) * scratch_floats));
}
// The current device's streaming multiprocessors.
static int gpu_sm_count(void) {
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

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
__device__ __forceinline__ float bf16x2_lo(uint32_t w) {
    return bf2f(__ushort_as_bfloat16((unsigned short)(w & 0xffffu)));
}
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
        *(uint4*)p = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]),
                                pack_bf16x2(f[6], f[7]));
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

#endif
