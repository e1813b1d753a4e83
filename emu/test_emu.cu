// emu/test_emu.cu: the CUDA emulator's stream semantics, which the GPU build's own tests
// lean on: work queued on a stream runs in stream order, waits for the events it is told
// to wait for and for nothing else, so a missing cudaStreamWaitEvent between two streams
// gives a wrong result on the emulator (as it may on a GPU) rather than passing by luck.
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
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
