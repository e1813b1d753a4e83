// backend/gpu/zero3_gpu.h: the GPU build's side of parallel/zero3.h (what a build supplies for
// it): a unit's all-gather and its gradient's sum on NCCL's side stream (comm_nccl.h; host-staged
// with --comm mpi, on the compute stream), the gathered fp32 weights in one arena with a
// bf16 copy of the same layout that the kernels read (bf()), a unit's copy made on the side stream
// right after its gather (host-staged: on the compute stream once the gather is in), so the compute
// stream only waits for it.
// Included by train_gpt.cu among its memory functions.
#ifndef ZERO3_GPU_H
#define ZERO3_GPU_H

#include "backend/backend.h"
#include "backend/gpu/alloc.h"  // dev_alloc

static void unit_gather_start(Model* m, const float* mine, float* recv, const int* counts, const int* displs, size_t n,
                              GatherWait* w) {
    GpuComms* G = &m->be.G;
    nccl_allgatherv_start(G, &G->group[GROUP_DP], mine, recv, counts, displs, n, m->be.stream, w);
    if (G->backend != COMM_NCCL) return;
    // the unit's bf16 copy after the gather, on the side stream (the kernels that read the slot's
    // old copy were queued before the gather's start, which waits for them); *w after both
    f32_to_bf16_gpu(m->be.params_bf16 + (recv - m->be.arena), recv, n, G->side);
    cudaCheck(cudaEventRecord(*w, G->side));
}
static void unit_gather_wait(Model* m, GatherWait* w, size_t n) { nccl_event_wait(&m->be.G, m->be.stream, *w); }
static void unit_grad_reduce(Model* m, float* grad, const int* counts, const int* displs, size_t n, float* part,
                             GatherWait* done) {
    nccl_reduce_scatterv_add(&m->be.G, &m->be.G.group[GROUP_DP], grad, counts, displs, n, part, m->be.stream, done);
}
static void unit_grad_wait(Model* m, GatherWait* done) {
    if (*done) nccl_event_wait(&m->be.G, m->be.stream, *done);
}
static void weights_arena(Model* m, float* arena, size_t n) {
    m->be.arena = arena, m->be.params_bf16 = (bf16*)dev_alloc(sizeof(bf16) * n);
}
static void unit_weights_ready(Model* m, const float* buf, size_t n) {
    if (m->be.G.backend != COMM_NCCL) f32_to_bf16_gpu(m->be.params_bf16 + (buf - m->be.arena), buf, n, m->be.stream);
}
#endif
