// backend/gpu/adamw.cuh: the optimizer's kernels, each one launch over a list of tensors (the
// optimizer's ranges): the gradient's sum of squares (the norm, deterministic) and AdamW on the
// fp32 master weights with their fp32 moments, writing the bf16 copy the next forward reads.
#ifndef GPU_ADAMW_CUH
#define GPU_ADAMW_CUH

#include "backend/gpu/common.cuh"

// ----------------------------------------------------------------------------
// Multi-tensor lists. A launch walks every tensor of a list in chunks of MT_CHUNK elements,
// 8 per thread of a 256-thread block (load8 / store8). Each tensor starts a chunk of its own
// (so a 16-byte aligned tensor keeps its vector accesses), and a chunk finds its tensor by a
// binary search over the tensors' first chunks. gpt2-124m's 148 tensors thus cost one AdamW
// launch a step instead of 148, and two norm launches instead of 296.
#define MT_THREADS 256
#define MT_CHUNK (8 * MT_THREADS)
typedef struct {
    float* p;         // AdamW: the fp32 master weights
    bf16* pb;         // AdamW: their bf16 copy, or NULL
    const float* g;   // the gradient (the norm: the values squared)
    float *m, *v;     // AdamW's moments
    size_t n;         // elements
    size_t chunk0;    // the list's first chunk of this tensor
    float wd;         // AdamW's weight decay of this tensor (0: not decayed)
} MtTensor;
// The list built on the host (mt_add), and its device copies. A step builds the same lists
// every step (the gradient norm's; --noise-scale's, one a layer), so a list is uploaded once
// and kept: every distinct list stays on the device. The upload makes the host wait for nothing
// (a wait in the middle of a pipeline's schedule could wait for a peer that waits for us).
typedef struct {
    MtTensor *h, *d;
    int n;
} MtKept;
typedef struct {
    MtTensor* h;
    int n, cap;
    size_t chunks;
    MtKept* kept;
    int n_kept, cap_kept;
} MtList;

static void mt_add(MtList* L, float* p, bf16* pb, const float* g, float* m, float* v, size_t n, float wd) {
    if (!n) return;
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        L->h = (MtTensor*)realloc(L->h, sizeof(MtTensor) * L->cap);
        if (!L->h) fail("out of host memory for the optimizer's tensor list");
    }
    MtTensor* t = &L->h[L->n++];
    memset(t, 0, sizeof(*t));  // padding too: mt_device compares lists bytewise
    t->p = p, t->pb = pb, t->g = g, t->m = m, t->v = v, t->n = n, t->chunk0 = L->chunks, t->wd = wd;
    L->chunks += cdiv(n, MT_CHUNK);
}
// The device copy of the list built so far (uploaded when no kept list equals it).
static const MtTensor* mt_device(MtList* L, cudaStream_t s) {
    size_t bytes = sizeof(MtTensor) * L->n;
    for (int i = 0; i < L->n_kept; i++)
        if (L->kept[i].n == L->n && !memcmp(L->kept[i].h, L->h, bytes)) return L->kept[i].d;
    if (L->n_kept == L->cap_kept) {
        L->cap_kept = L->cap_kept ? 2 * L->cap_kept : 16;
        L->kept = (MtKept*)realloc(L->kept, sizeof(MtKept) * L->cap_kept);
        if (!L->kept) fail("out of host memory for the optimizer's tensor lists");
    }
    MtKept* k = &L->kept[L->n_kept++];
    k->n = L->n;
    cudaCheck(cudaMallocHost(&k->h, bytes));  // pinned and never changed: the copy up needs no wait
    memcpy(k->h, L->h, bytes);
    cudaCheck(cudaMalloc(&k->d, bytes));
    copyCheck(cudaMemcpyAsync(k->d, k->h, bytes, cudaMemcpyHostToDevice, s));
    return k->d;
}
static void mt_restart(MtList* L) { L->n = 0, L->chunks = 0; }

// The tensor of chunk c: the last whose first chunk is <= c.
__device__ __forceinline__ const MtTensor* mt_find(const MtTensor* list, int n, size_t c) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (list[mid].chunk0 <= c) lo = mid;
        else hi = mid - 1;
    }
    return &list[lo];
}

// ----------------------------------------------------------------------------
// Sum of squares over a list, deterministic: MT_NORM_BLOCKS blocks, whatever the device,
// block b taking chunks b, b + MT_NORM_BLOCKS, ... in that order (fp32 per thread, then the
// block's tree); one thread then adds the block partials in order, in fp64. So the same
// gradients give the same bits on every run and every card.
#define MT_NORM_BLOCKS 1024
__global__ void sumsq_mt_kernel(float* partial, const MtTensor* list, int n_tensors, size_t chunks) {
    float s = 0.0f, x[8];
    for (size_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const MtTensor* t = mt_find(list, n_tensors, c);
        size_t i = (c - t->chunk0) * MT_CHUNK + threadIdx.x * 8;
        if (i >= t->n) continue;
        load8(x, t->g + i, t->n - i);
        #pragma unroll
        for (int k = 0; k < 8; k++) s += x[k] * x[k];
    }
    s = block_reduce(s, 0);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sum_partials_f64_kernel(double* acc, const float* partial, int n, int add) {
    double s = add ? *acc : 0.0;
    for (int i = 0; i < n; i++) s += partial[i];
    *acc = s;
}
// *acc (device, fp64) = (add ? *acc : 0) + the sum of squares of every tensor of L; the list
// restarts. Two launches (none for an empty list to add).
static void sumsq_mt_gpu(double* acc, MtList* L, int add, cudaStream_t s) {
    if (gpu_scratch_n < MT_NORM_BLOCKS) fail("sumsq_mt_gpu: reduction scratch too small");
    if (!L->n) {
        if (!add) copyCheck(cudaMemsetAsync(acc, 0, sizeof(double), s));
        return;
    }
    const MtTensor* d = mt_device(L, s);
    int blocks = L->chunks < MT_NORM_BLOCKS ? (int)L->chunks : MT_NORM_BLOCKS;
    sumsq_mt_kernel<<<blocks, MT_THREADS, 0, s>>>(gpu_scratch, d, L->n, L->chunks);
    launchCheck();
    sum_partials_f64_kernel<<<1, 1, 0, s>>>(acc, gpu_scratch, blocks, add);
    launchCheck();
    mt_restart(L);
}

// ----------------------------------------------------------------------------
// AdamW over a list, one chunk per block: the fp32 master weights and moments updated, the bf16
// copy written (where the tensor has one). Same formula and bias correction as the CPU.
__global__ void adamw_mt_kernel(const MtTensor* list, int n_tensors, float lr, float beta1, float beta2, float eps,
                                float grad_scale, float c1, float c2) {
    const MtTensor* t = mt_find(list, n_tensors, blockIdx.x);
    size_t n = t->n, i = (blockIdx.x - t->chunk0) * MT_CHUNK + threadIdx.x * 8;
    if (i >= n) return;
    float wd = t->wd, p[8], g[8], mi[8], vi[8];
    load8(p, t->p + i, n - i);
    load8(g, t->g + i, n - i);
    load8(mi, t->m + i, n - i);
    load8(vi, t->v + i, n - i);
    #pragma unroll
    for (int k = 0; k < 8; k++) {
        float gk = g[k] * grad_scale;
        mi[k] = beta1 * mi[k] + (1.0f - beta1) * gk;
        vi[k] = beta2 * vi[k] + (1.0f - beta2) * gk * gk;
        float mhat = mi[k] / c1, vhat = vi[k] / c2;
        p[k] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[k]);
    }
    store8(t->p + i, p, n - i);
    store8(t->m + i, mi, n - i);
    store8(t->v + i, vi, n - i);
    if (t->pb) store8(t->pb + i, p, n - i);
}
// AdamW step t (1-based) on every tensor of L, gradients scaled by grad_scale (clipping); the
// list restarts. One launch.
static void adamw_mt_gpu(MtList* L, float lr, float beta1, float beta2, float eps, float grad_scale, int t,
                         cudaStream_t s) {
    if (!L->n) return;
    if (L->chunks > 0x7fffffffu) fail("adamw_mt_gpu: %zu chunks exceed the grid", L->chunks);
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    const MtTensor* d = mt_device(L, s);
    adamw_mt_kernel<<<(unsigned)L->chunks, MT_THREADS, 0, s>>>(d, L->n, lr, beta1, beta2, eps, grad_scale, c1, c2);
    launchCheck();
    mt_restart(L);
}

#endif
