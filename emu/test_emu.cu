// emu/test_emu.cu: the CUDA emulator's stream semantics, which the GPU build's own tests
// lean on: work queued on a stream runs in stream order, waits for the events it is told
// to wait for and for nothing else, so a missing cudaStreamWaitEvent between two streams
// gives a wrong result on the emulator (as it may on a GPU) rather than passing by luck.
// Also the kernel features the attention kernels use: dynamic shared memory (extern
// __shared__, over 48 KiB only after cudaFuncSetAttribute) and cp.async, whose copies land
// at their cp.async.wait_group, so a missing wait reads stale shared memory here.
// Runs on the emulator only (make test_emu_run): on a GPU the unordered cases are races.
// Output: PASS/FAIL lines, then "N passed, N failed".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
static void check(int ok, const char* what, float got, float want) {
    if (ok) n_pass++, printf("PASS %s (%g)\n", what, got);
    else n_fail++, printf("FAIL %s: got %g, expected %g\n", what, got, want);
}
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void fill_kernel(float* x, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

// Each thread copies 16 bytes (4 floats) of x into dynamic shared memory with cp.async, in two
// groups (the first half of the threads' chunks, then the second), waits as `wait` says
// (2: none, 1: all but the newest group, 0: all), then every thread reads a neighbour's
// chunk (after a barrier) into y. With no wait the shared memory still holds its start
// bytes (NaN); with wait 1 the second group's chunks do. valid = 0: zero-fill.
__global__ void cp_async_kernel(float* y, const float* x, int wait, int valid) {
    extern __shared__ __align__(16) float stage[];
    int i = threadIdx.x, n = blockDim.x;
    if (i < n / 2) cp_async16(stage + 4 * i, x + 4 * i, valid);
    cp_async_commit();
    if (i >= n / 2) cp_async16(stage + 4 * i, x + 4 * i, valid);
    cp_async_commit();
    if (wait == 1) cp_async_wait<1>();
    if (wait == 0) cp_async_wait<0>();
    __syncthreads();
    int j = (i + 1) % n;
    for (int k = 0; k < 4; k++) y[4 * i + k] = stage[4 * j + k];
    __syncthreads();     // everyone has read before the copies land below
    cp_async_wait<0>();  // nothing may be left in flight at the exit
}
// The count of y's n * 4 floats equal to x's (the neighbour's chunk), and of NaNs.
static void cp_async_counts(const float* y, const float* x, int n, int* same, int* nans) {
    *same = *nans = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            float v = y[4 * i + k];
            *same += v == x[4 * ((i + 1) % n) + k];
            *nans += v != v;
        }
}
static void test_cp_async(void) {
    const int n = 64;  // threads; the shared memory is n * 16 bytes
    float hx[4 * n], hy[4 * n], *x, *y;
    for (int i = 0; i < 4 * n; i++) hx[i] = 1.0f + i;
    CK(cudaMalloc(&x, sizeof(hx)));
    CK(cudaMalloc(&y, sizeof(hy)));
    CK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
    int same, nans;
    const char* what[3] = {"cp.async.wait_group 0: every chunk landed",
                           "cp.async.wait_group 1: the newest group not yet",
                           "no cp.async.wait_group before the read: no chunk landed (NaN)"};
    // wait 1: the first half's chunks, read by threads n - 1, 0 .. n/2 - 2
    const int want_same[3] = {4 * n, 4 * (n / 2), 0};
    for (int wait = 0; wait <= 2; wait++) {
        cp_async_kernel<<<1, n, n * 16>>>(y, x, wait, 1);
        CK(cudaGetLastError());
        CK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
        cp_async_counts(hy, hx, n, &same, &nans);
        check(same == want_same[wait] && nans == 4 * n - same, what[wait], (float)same, (float)want_same[wait]);
    }
    cp_async_kernel<<<1, n, n * 16>>>(y, x, 0, 0);
    CK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
    float sum = 0;
    for (int i = 0; i < 4 * n; i++) sum += hy[i] == 0.0f;
    check(sum == 4 * n, "cp.async with src-size 0 writes zeros", sum, 4.0f * n);
    CK(cudaFree(x));
    CK(cudaFree(y));
}

// A launch with more than 48 KiB of dynamic shared memory fails until the kernel's
// cudaFuncAttributeMaxDynamicSharedMemorySize allows it, up to the emulated card's limit
// (EMU_ARCH: 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on the RTX cards' sm_86 and sm_89).
__global__ void big_smem_kernel(float* y) {
    extern __shared__ __align__(16) float big[];
    int n = 64 << 10 >> 2;  // 64 KiB of floats
    for (int i = threadIdx.x; i < n; i += blockDim.x) big[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) y[0] = big[n - 1];
}
static void test_dynamic_smem(void) {
    float* y, h = 0;
    CK(cudaMalloc(&y, sizeof(float)));
    big_smem_kernel<<<1, 128, 64 << 10>>>(y);
    cudaError_t e = cudaGetLastError();
    check(e == cudaErrorInvalidValue, "64 KiB of dynamic shared memory without the attribute: invalid argument",
          (float)e, (float)cudaErrorInvalidValue);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int arch = prop.major * 10 + prop.minor, limit = (arch == 90 ? 227 : arch == 80 ? 163 : 99) << 10;
    check((int)prop.sharedMemPerBlockOptin == limit, "the emulated card's opt-in shared memory (KiB)",
          (float)(prop.sharedMemPerBlockOptin >> 10), (float)(limit >> 10));
    e = cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit + 1024);
    check(e == cudaErrorInvalidValue, "cudaFuncSetAttribute beyond the card's opt-in limit is refused", (float)e,
          (float)cudaErrorInvalidValue);
    CK(cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    CK(cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    big_smem_kernel<<<1, 128, 64 << 10>>>(y);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&h, y, sizeof(float), cudaMemcpyDeviceToHost));
    check(h == (float)((64 << 10 >> 2) - 1), "64 KiB of dynamic shared memory after cudaFuncSetAttribute", h,
          (float)((64 << 10 >> 2) - 1));
    CK(cudaFree(y));
}

int main(void) {
    const int n = 1000;
    // EMU_STREAMS=compute turns the order between streams around: non-blocking streams last
    int compute_first = getenv("EMU_STREAMS") && !strcmp(getenv("EMU_STREAMS"), "compute");
    float *x, h = 0;
    cudaStream_t compute, side;  // as train_gpt.cu makes them: a blocking and a non-blocking stream
    cudaEvent_t ready, t0, t1;
    CK(cudaMalloc(&x, sizeof(float) * n));
    CK(cudaStreamCreate(&compute));
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));

    // stream order, then an event between the two streams
    fill_kernel<<<4, 256, 0, compute>>>(x, n, 1.0f);
    CK(cudaEventRecord(ready, compute));
    CK(cudaStreamWaitEvent(side, ready, 0));
    CK(cudaMemcpyAsync(&h, x + n - 1, sizeof(float), cudaMemcpyDeviceToHost, side));
    CK(cudaStreamSynchronize(side));
    check(h == 1.0f, "a copy on the side stream after the event sees the compute stream's kernel", h, 1.0f);

    // no event: the side stream's copy does not wait for the kernel queued before it
    fill_kernel<<<4, 256, 0, compute>>>(x, n, 2.0f);
    CK(cudaMemcpyAsync(&h, x + n - 1, sizeof(float), cudaMemcpyDeviceToHost, side));
    CK(cudaDeviceSynchronize());
    check(h == (compute_first ? 2.0f : 1.0f),
          "without the event the side stream's copy runs before the kernel (after it with EMU_STREAMS=compute)", h,
          compute_first ? 2.0f : 1.0f);

    // the legacy default stream waits for the blocking streams' earlier work...
    fill_kernel<<<4, 256, 0, compute>>>(x, n, 3.0f);
    CK(cudaMemcpy(&h, x, sizeof(float), cudaMemcpyDeviceToHost));
    check(h == 3.0f, "cudaMemcpy (legacy stream) after a kernel on a blocking stream", h, 3.0f);
    // ... and a blocking stream for the legacy stream's
    fill_kernel<<<4, 256, 0, 0>>>(x, n, 4.0f);
    CK(cudaMemcpyAsync(&h, x, sizeof(float), cudaMemcpyDeviceToHost, compute));
    CK(cudaStreamSynchronize(compute));
    check(h == 4.0f, "a blocking stream after a kernel on the legacy stream", h, 4.0f);
    // ... but a non-blocking stream waits for neither
    fill_kernel<<<4, 256, 0, 0>>>(x, n, 5.0f);
    CK(cudaMemcpyAsync(&h, x, sizeof(float), cudaMemcpyDeviceToHost, side));
    CK(cudaDeviceSynchronize());
    check(h == (compute_first ? 5.0f : 4.0f), "a non-blocking stream is not ordered after the legacy stream", h,
          compute_first ? 5.0f : 4.0f);

    // events are times only once they have run
    CK(cudaEventRecord(t0, compute));
    fill_kernel<<<4, 256, 0, compute>>>(x, n, 6.0f);
    CK(cudaEventRecord(t1, compute));
    float ms = -1;
    cudaError_t e = cudaEventElapsedTime(&ms, t0, t1);
    check(e == cudaErrorNotReady, "cudaEventElapsedTime before the events ran is cudaErrorNotReady", (float)e,
          (float)cudaErrorNotReady);
    CK(cudaEventSynchronize(t1));
    e = cudaEventElapsedTime(&ms, t0, t1);
    check(e == cudaSuccess && ms >= 0, "cudaEventElapsedTime after cudaEventSynchronize", ms, 0.0f);

    CK(cudaEventDestroy(ready));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    CK(cudaStreamDestroy(compute));
    CK(cudaStreamDestroy(side));
    CK(cudaFree(x));
    test_cp_async();
    test_dynamic_smem();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
