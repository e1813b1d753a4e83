// backend/gpu/comm.h: the GPU build's gradient and weight collectives (data parallelism, ZeRO) on NCCL's
// own stream, and the pipeline's point-to-point (NCCL, or host-staged MPI).
#ifndef GPU_COMM_H
#define GPU_COMM_H

#include "backend/backend.h"
#include "backend/gpu/alloc.h"
#include "backend/gpu/ops.h"

static void grad_allreduce_dp_async(Model* m, float* buf, size_t n) {
    if (m->be.grad_bf16)  // --grad-reduce bf16
        nccl_allreduce_sum_async_bf16(&m->be.G, &m->be.G.group[GROUP_DP], buf, n, m->be.grad_bf16, GRAD_BF16_FLOATS,
                                      m->be.stream);
    else nccl_allreduce_sum_async(&m->be.G, &m->be.G.group[GROUP_DP], buf, n, m->be.stream);
}
static void grad_allreduce_dp_join(Model* m) { nccl_async_join(&m->be.G, m->be.stream); }
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    nccl_allgather(&m->be.G, group_of(m, g), send, recv, n_per_rank, m->be.stream);
}

// Pipeline p2p. With NCCL (pp > 1): straight from the slot's device buffer on the
// send stream of its direction and way (comm_nccl.h: nccl_pp_send), the receive on the compute stream;
// the slot's buffers are rewritten only after the compute stream has waited for the send's
// `sent` event. Otherwise host-staged: device -> this slot's pinned host buffer, MPI_Isend
// (comm_isend), and on the other side MPI_Recv (comm_recv) into a pinned buffer, then host
// -> device. The payload is one bf16 N x C activation or gradient per micro-batch.
// n: bf16 elements, travelling host-staged as ceil(n/2) floats (the pinned buffers have room).
static size_t p2p_floats(size_t n) { return (2 * n + 3) / 4; }
// Under --offload activations a frame may be rewritten before its NCCL send completes (a wait
// for it could close a cycle between stages: parallel/pipeline.h): the send reads a copy, the
// slot's own (chunk_slots_alloc).
static void pp_send(Model* m, Slot* s, int dir, int up, const bf16* src, size_t n, int peer, int tag) {
    if (m->be.G.p2p && (m->c.offload & OFFLOAD_ACTIVATIONS)) {
        act_copy(m, s->sends.copy[dir], src, n);
        src = s->sends.copy[dir];
    }
    if (m->be.G.p2p) {
        nccl_pp_send(&m->be.G, dir, up, src, sizeof(bf16) * n, m->be.stream, s->sends.sent[dir]);
        return;
    }
    d2h(s->sends.h_send[dir], src, sizeof(bf16) * n, m->be.stream);  // synchronizes: the data is on the host
    comm_isend(&m->L.group[GROUP_PP], s->sends.h_send[dir], p2p_floats(n), peer, tag, &s->sends.req[dir]);
}
static void pp_send_wait(Model* m, Slot* s, int dir) {
    // the device waits, not the host
    if (m->be.G.p2p) cudaCheck(cudaStreamWaitEvent(m->be.stream, s->sends.sent[dir], 0));
    else comm_wait(&m->L.group[GROUP_PP], &s->sends.req[dir]);
}
static void pp_recv(Model* m, int dir, int up, bf16* dst, size_t n, int peer, int tag) {
    if (m->be.G.p2p) {
        nccl_pp_recv(&m->be.G, dir, up, dst, sizeof(bf16) * n, m->be.stream);
        return;
    }
    comm_recv(&m->L.group[GROUP_PP], m->be.h_recv, p2p_floats(n), peer, tag);
    h2d(dst, m->be.h_recv, sizeof(bf16) * n, m->be.stream);  // synchronizes: h_recv is free again
}

#endif
