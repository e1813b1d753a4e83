// backend/gpu/alloc.h: the GPU build's allocations: device memory (zeroed; out of memory is one
// error line with what to try) and pinned host memory.
#ifndef GPU_ALLOC_H
#define GPU_ALLOC_H

#include "backend/gpu/common.cuh"  // cudaCheck

static void* dev_alloc(size_t bytes) {
    void* p;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess)
        fail(
            "GPU out of memory allocating %.1f MiB (%s); "
            "try a smaller --micro-batch, --recompute, --zero or more --tp/--pp",
            bytes / 1048576.0, cudaGetErrorString(e));
    // (set-up only: the legacy stream's memset, then a wait, as the compute stream does not wait for it)
    cudaCheck(cudaMemset(p, 0, bytes ? bytes : 16));
    cudaCheck(cudaDeviceSynchronize());
    return p;
}
static float* pinned_floats(size_t n) {
    void* p;
    cudaCheck(cudaMallocHost(&p, sizeof(float) * (n ? n : 1)));
    return (float*)p;
}

#endif
