// backend/cpu/comm.h: the CPU build's gradient and weight collectives (data parallelism, ZeRO, ZeRO-3's
// units) and the pipeline's point-to-point, over MPI (layout/grid.h's comm_*).
#ifndef CPU_COMM_H
#define CPU_COMM_H

#include "backend/backend.h"
#include "backend/cpu/ops.h"

// A blocking MPI all-reduce at the point the backward reaches (the CPU has no second stream
// to overlap it with); the GPU build runs it on NCCL's own stream.
static void grad_allreduce_dp_async(Model* m, float* buf, size_t n) {
    comm_allreduce_sum(&m->L.group[GROUP_DP], buf, n);
}
static void grad_allreduce_dp_join(Model* m) {}
static void layer_grads_queued(Model* m, size_t lo, size_t hi) {}
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_allgather(comm_of(m, g), send, recv, n_per_rank);
}
// --zero 1, 2 and 3 (parallel/zero3.h): a unit's all-gather nonblocking (Open MPI moves it on
// inside later MPI calls and at the wait), its reduce-scatter blocking, in place (the sum of this
// replica's part lands at the start); the kernels read the fp32 weights where they were gathered.
static void unit_gather_start(Model* m, const float* mine, float* recv, const int* counts, const int* displs, size_t n,
                              GatherWait* w) {
    Comm* c = comm_of(m, GROUP_DP);
    const void* send = mine == recv + displs[c->rank] ? MPI_IN_PLACE : mine;  // --zero 1/2: in place
    mpiCheck(MPI_Iallgatherv(send, counts[c->rank], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, c->mpi, w));
}
static void unit_gather_wait(Model* m, GatherWait* w, size_t n) {
    Comm* c = comm_of(m, GROUP_DP);
    double t0 = now_s();
    mpiCheck(MPI_Wait(w, MPI_STATUS_IGNORE));
    c->seconds += now_s() - t0, c->bytes += 4.0 * n;
    watchdog_kick();
}
static void unit_grad_reduce(Model* m, float* grad, const int* counts, const int* displs, size_t n, float* part,
                             GatherWait* done) {
    Comm* c = comm_of(m, GROUP_DP);
    COMM_TIMED(c, 4.0 * n, MPI_Reduce_scatter(MPI_IN_PLACE, grad, counts, MPI_FLOAT, MPI_SUM, c->mpi));
    if (part) f32_add(m, part, grad, counts[c->rank]);
    f32_zero(m, grad, n);
}
static void unit_grad_wait(Model* m, GatherWait* done) {}  // (done when unit_grad_reduce returned)
static void weights_arena(Model* m, float* arena, size_t n) {}
static void unit_weights_ready(Model* m, const float* buf, size_t n) {}

// Pipeline p2p: MPI_Isend straight from the slot's buffer (untouched until the slot's sends
// are waited for), blocking receive into the destination.
// Under --offload activations the slot's frame may be rewritten before the send completes
// (parallel/pipeline.h): the send reads a copy (the slot's own, reused once its last send is done).
static void pp_send(Model* m, Slot* s, int dir, int up, const float* src, size_t n, int peer, int tag) {
    if (m->c.offload & OFFLOAD_ACTIVATIONS) {
        if (!s->sends.copy[dir]) s->sends.copy[dir] = (float*)xmalloc(sizeof(float) * n);
        memcpy(s->sends.copy[dir], src, sizeof(float) * n);
        src = s->sends.copy[dir];
    }
    comm_isend(&m->L.group[GROUP_PP], src, n, peer, tag, &s->sends.req[dir]);
}
static void pp_send_wait(Model* m, Slot* s, int dir) { comm_wait(&m->L.group[GROUP_PP], &s->sends.req[dir]); }
static void pp_recv(Model* m, int dir, int up, float* dst, size_t n, int peer, int tag) {
    comm_recv(&m->L.group[GROUP_PP], dst, n, peer, tag);
}

#endif
