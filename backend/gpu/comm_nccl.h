// backend/gpu/comm_nccl.h: the GPU backend of the communicator interface of layout/grid.h. The
// groups of the Layout that have more than one rank (tp, dp, embed, context parallelism's
// ulysses and ring) and the pipeline's pairs get NCCL communicators, all split from one made
// over the world (gpu_comms_init). Every call works on device buffers and is stream-ordered on
// the given stream; none makes the host wait for the device. Which stream each group's calls
// use, and why every rank issues them in the same order: docs/GPU.md, "Communicators, streams
// and ordering".
//
// `--comm mpi` selects a host-staged fallback instead: device -> pinned host, the comm_*
// MPI call of layout/grid.h, host -> device. Slow, but several ranks can then share one GPU
// (NCCL refuses two ranks of one communicator on the same device), which is how the
// multi-rank GPU tests run on a single card.
//
// Timing: each collective is bracketed by two events on its stream, and the device time
// between them (the NCCL kernel's run, waiting for its peers included) goes to its group's
// Comm.seconds once gpu_comms_collect finds them done; train_gpt.cu collects where it
// waits for the device anyway (after every forward and backward, at the end of the step).
// A pipeline receive counts the time the stage waits for it, a send none (nobody waits
// for it but the receiver). Bytes are counted at the call. The MPI backend is synchronous
// and timed on the host.
//
// Pipeline p2p (pp > 1): an NCCL send is stream-ordered and waits for its receiver, and a
// communicator runs its operations one at a time in the order they were issued. So the
// sends go on streams of their own (one per direction: activations to the next stage,
// gradients to the previous one) and every direction between two neighbouring stages has
// a two-rank communicator of its own, on which one rank only sends and the other only
// receives. Matching is in order, and schedule.h's op lists issue each direction's
// messages in the same order at both ends (test_gpt checks it), so no tags are needed and
// no send waits behind a receive. Receives run on the compute stream, before the kernels
// that read them.
//
// Context parallelism (layer_parallel/context_parallel.h): the Ulysses all-to-all is grouped sends
// and receives (NCCL has no all-to-all call) on the compute stream, which needs its result at
// once; the ring's exchange (a send to the next rank and a receive from the previous, grouped)
// runs on a stream of its own, after an event on the compute stream, so the attention block
// computed meanwhile overlaps it; at the ring's wait the compute stream waits for an event
// recorded after it. Its time is the transfer's device time, hidden or not. Host-staged, the
// exchange is MPI_Isend / MPI_Irecv of pinned copies, in flight while the device computes.
#ifndef COMM_NCCL_H
#define COMM_NCCL_H

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's C++ bindings are unused and warn under nvcc -Wextra
#endif
#include <nccl.h>
#include "layout/grid.h"
#include "backend/gpu/kernels_gpu.cuh"

#define ncclCheck(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
    fail("NCCL error at %s:%d: %s (%s)", __FILE__, __LINE__, ncclGetErrorString(r_), #call); } while (0)

enum { COMM_NCCL = 0, COMM_MPI = 1 };

typedef struct {
    Comm* c;           // the MPI group of layout/grid.h: size, rank, timing, and the fallback
    ncclComm_t nccl;   // NULL for groups of size 1, non-members, and the MPI backend
} GpuGroup;

// Every NCCL call's pair of timing events waits in a ring of its stream's lane until its
// time is collected.
enum { LANE_COMPUTE, LANE_SIDE, LANE_RING, N_LANES };
#define GPU_TIMED_MAX 1024
typedef struct {
    cudaEvent_t t0[GPU_TIMED_MAX], t1[GPU_TIMED_MAX];
    Comm* comm[GPU_TIMED_MAX];
    int head, n;  // pending calls: [head, head + n) mod GPU_TIMED_MAX, oldest first
} TimedLane;

typedef struct {
    int backend;  // COMM_NCCL or COMM_MPI
    GpuGroup group[N_GROUPS];  // over the layout's groups, by kind
    void* host;  // pinned staging buffer of the MPI backend, grown on demand (first step only)
    size_t host_bytes;
    // NCCL backend
    TimedLane lanes[N_LANES];
    cudaStream_t side;                    // the stream of the collectives that overlap compute
    cudaEvent_t ready, done;              // compute -> side, side -> compute
    int side_pending;                     // collectives queued on side since the last join
    int p2p;                              // pipeline p2p over NCCL (pp > 1)
    // [dir: 0 activations, 1 gradients][up: 1 to stage+1, 0 to stage-1, mod pp], two ranks, the
    // sender is rank 0; NULL where the placement sends nothing that way (schedule.h p2p_up)
    ncclComm_t p2p_send[2][2], p2p_recv[2][2];
    cudaStream_t p2p_stream[2][2];        // the sends of each direction and way
    cudaEvent_t p2p_ready;                // compute -> a send stream
    cudaStream_t ring;                    // the context-parallel ring's exchanges
    cudaEvent_t ring_ready, ring_done;    // compute -> ring, ring -> compute
    // the host-staged ring: pinned copies of what is sent [0] and received [1], the exchange in
    // flight, and where its receive goes on the device
    void* ring_host[2];
    size_t ring_host_bytes;
    RingXfer ring_xfer;
    void* ring_recv;
    size_t ring_bytes;
} GpuComms;

// Communicators. One NCCL communicator over the world is made from an ncclUniqueId that rank 0
// broadcasts over MPI (the only ncclCommInitRank, where a wrong network setting hangs: the
// watchdog is armed before it), and every group's is split from it (ncclCommSplit: a
// collective of the whole parent, so every rank makes every split, in the same order, with
// NCCL_SPLIT_NOCOLOR where it is no member). Only groups of more than one rank get one, and
// the world's is destroyed once split: nothing runs on it.

// The split of group g: color the group's lowest world rank (one per group), key the rank in it.
static ncclComm_t gpu_split(ncclComm_t world, const Comm* c, int member) {
    int me, low = INT_MAX;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (member) mpiCheck(MPI_Allreduce(&me, &low, 1, MPI_INT, MPI_MIN, c->mpi));
    ncclComm_t nc = NULL;
    ncclCheck(ncclCommSplit(world, member ? low : NCCL_SPLIT_NOCOLOR, member ? c->rank : 0, &nc, NULL));
    return nc;
}
// Does any rank have a group of kind g with more than one member? (The same answer on every rank.)
static int gpu_group_used(const Layout* L, int g) {
    int size = L->group[g].size, any = 0;
    if (g == GROUP_EMBED && !L->in_embed) size = 0;
    mpiCheck(MPI_Allreduce(&size, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return any > 1;
}

// The pipeline's two-rank communicators: for each direction, way and stage k, the one of
// k's sends (activations to k+1 and gradients to k-1 in the loop placement, the ends wrapping
// around as interleaved chunks do; in the V of ZB-V and DualPipe-V both directions go both ways). A stream of
// messages of one direction and way between two stages is received in the order it is sent
// (tests/test_gpt.c checks every schedule for it), as NCCL matches them. A stage is in two
// pairs of a direction and way (as sender and as receiver) and a split makes one
// communicator per rank, so the pairs are split in rounds: pairs of even k, of odd k, and
// with an odd pp the pair that wraps around. The sender is rank 0 of its pair.
static int pair_round(int k, int pp) { return pp % 2 && k == pp - 1 ? 2 : k % 2; }
static void gpu_p2p_init(GpuComms* G, Layout* L, ncclComm_t world) {
    int pp = L->pp, me = L->stage;
    for (int dir = 0; dir < 2; dir++)
        for (int up = 0; up < 2; up++) {
            if (!schedule_is_v(L->sched) && up != (dir == 0)) continue;
            // the pair of which I am the sender (k = me), and the one of which I am the receiver
            int k_recv = up ? (me - 1 + pp) % pp : (me + 1) % pp;
            for (int round = 0; round < 2 + pp % 2; round++) {
                int sends = pair_round(me, pp) == round, recvs = pair_round(k_recv, pp) == round;
                int color = sends   ? L->rank  // the pair's color: its sender's world rank
                            : recvs ? layout_rank_of(L, L->dp_rank, k_recv, L->cp_rank, L->tp_rank)
                                    : NCCL_SPLIT_NOCOLOR;
                ncclComm_t nc = NULL;
                ncclCheck(ncclCommSplit(world, color, !sends, &nc, NULL));
                if (sends) G->p2p_send[dir][up] = nc;
                if (recvs) G->p2p_recv[dir][up] = nc;
            }
            cudaCheck(cudaStreamCreateWithFlags(&G->p2p_stream[dir][up], cudaStreamNonBlocking));
        }
    cudaCheck(cudaEventCreateWithFlags(&G->p2p_ready, cudaEventDisableTiming));
    G->p2p = 1;
}

// Call after layout_init and gpu_select_device, on every rank, in the same order.
static void gpu_comms_init(GpuComms* G, Layout* L, int backend) {
    memset(G, 0, sizeof(*G));
    G->backend = backend;
    for (int g = 0; g < N_GROUPS; g++) G->group[g].c = &L->group[g];
    if (backend != COMM_NCCL) return;
    if (L->world > 1) {
        ncclUniqueId id;
        if (L->rank == 0) ncclCheck(ncclGetUniqueId(&id));
        mpiCheck(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
        ncclComm_t world;
        ncclCheck(ncclCommInitRank(&world, L->world, id, L->rank));
        static const int kinds[] = {GROUP_TP, GROUP_CP_ULYSSES, GROUP_CP_RING, GROUP_DP, GROUP_EMBED};
        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
            int g = kinds[i], member = (g != GROUP_EMBED || L->in_embed) && L->group[g].size > 1;
            if (gpu_group_used(L, g)) G->group[g].nccl = gpu_split(world, &L->group[g], member);
        }
        if (L->pp > 1) gpu_p2p_init(G, L, world);
        ncclCheck(ncclCommDestroy(world));
    }
    cudaCheck(cudaStreamCreateWithFlags(&G->side, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&G->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&G->done, cudaEventDisableTiming));
    cudaCheck(cudaStreamCreateWithFlags(&G->ring, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&G->ring_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&G->ring_done, cudaEventDisableTiming));
    for (int l = 0; l < N_LANES; l++)
        for (int i = 0; i < GPU_TIMED_MAX; i++) {
            cudaCheck(cudaEventCreate(&G->lanes[l].t0[i]));
            cudaCheck(cudaEventCreate(&G->lanes[l].t1[i]));
        }
}

static void gpu_comms_free(GpuComms* G) {
    for (int g = 0; g < N_GROUPS; g++)
        if (G->group[g].nccl) ncclCheck(ncclCommDestroy(G->group[g].nccl));
    if (G->host) cudaCheck(cudaFreeHost(G->host));
    for (int i = 0; i < 2; i++)
        if (G->ring_host[i]) cudaCheck(cudaFreeHost(G->ring_host[i]));
    if (G->p2p) {
        for (int dir = 0; dir < 2; dir++)
            for (int up = 0; up < 2; up++) {
                if (G->p2p_send[dir][up]) ncclCheck(ncclCommDestroy(G->p2p_send[dir][up]));
                if (G->p2p_recv[dir][up]) ncclCheck(ncclCommDestroy(G->p2p_recv[dir][up]));
                if (G->p2p_stream[dir][up]) cudaCheck(cudaStreamDestroy(G->p2p_stream[dir][up]));
            }
        cudaCheck(cudaEventDestroy(G->p2p_ready));
    }
    if (G->side) {
        for (int l = 0; l < N_LANES; l++)
            for (int i = 0; i < GPU_TIMED_MAX; i++) {
                cudaCheck(cudaEventDestroy(G->lanes[l].t0[i]));
                cudaCheck(cudaEventDestroy(G->lanes[l].t1[i]));
            }
        cudaCheck(cudaEventDestroy(G->ready));
        cudaCheck(cudaEventDestroy(G->done));
        cudaCheck(cudaStreamDestroy(G->side));
        cudaCheck(cudaEventDestroy(G->ring_ready));
        cudaCheck(cudaEventDestroy(G->ring_done));
        cudaCheck(cudaStreamDestroy(G->ring));
    }
    memset(G, 0, sizeof(*G));
}

// Add the device time of every timed NCCL call that has finished to its group; a kick for
// the watchdog when any has (communication completed).
static void gpu_comms_collect(GpuComms* G) {
    int any = 0;
    for (int l = 0; l < N_LANES; l++) {
        TimedLane* t = &G->lanes[l];
        while (t->n) {
            cudaError_t e = cudaEventQuery(t->t1[t->head]);
            if (e == cudaErrorNotReady) {
                (void)cudaGetLastError();  // not an error: cleared, or the next launch check would report it
                break;
            }
            cudaCheck(e);
            float ms;
            cudaCheck(cudaEventElapsedTime(&ms, t->t0[t->head], t->t1[t->head]));
            t->comm[t->head]->seconds += ms / 1e3;
            t->head = (t->head + 1) % GPU_TIMED_MAX, t->n--, any = 1;
        }
    }
    if (any) watchdog_kick();
}
// One NCCL call on stream s of lane l, timed by the events around it; its bytes counted.
// A full ring first waits for its oldest call (more than GPU_TIMED_MAX calls queued between
// two collections: a chunk of hundreds of layers under tp).
#define NCCL_TIMED(G, l, group_comm, s, nbytes, call) do { \
    TimedLane* t_ = &(G)->lanes[l]; \
    if (t_->n == GPU_TIMED_MAX) { host_wait_event(t_->t1[t_->head]); gpu_comms_collect(G); } \
    int i_ = (t_->head + t_->n++) % GPU_TIMED_MAX; \
    t_->comm[i_] = (group_comm); \
    cudaCheck(cudaEventRecord(t_->t0[i_], s)); \
    ncclCheck(call); \
    gpu_counts.collectives++; \
    cudaCheck(cudaEventRecord(t_->t1[i_], s)); \
    (group_comm)->bytes += (nbytes); } while (0)

static void* host_stage(GpuComms* G, size_t bytes) {
    if (bytes > G->host_bytes) {
        if (G->host) cudaCheck(cudaFreeHost(G->host));
        G->host_bytes = round_up(bytes, 1 << 20);
        cudaCheck(cudaMallocHost(&G->host, G->host_bytes));
    }
    return G->host;
}
static void d2h(void* h, const void* d, size_t bytes, cudaStream_t s) {
    copyCheck(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    host_wait(s);
}
static void h2d(void* d, const void* h, size_t bytes, cudaStream_t s) {
    copyCheck(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
    host_wait(s);  // the staging buffer is reused by the next call
}

static void nccl_allreduce_sum(GpuComms* G, GpuGroup* g, float* buf, size_t n, cudaStream_t s) {
    if (g->c->size <= 1 || !n) return;
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, LANE_COMPUTE, g->c, s, 4.0 * n, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, s));
        return;
    }
    float* h = (float*)host_stage(G, 4 * n);
    d2h(h, buf, 4 * n, s);
    comm_allreduce_sum(g->c, h, n);
    h2d(buf, h, 4 * n, s);
}
static void nccl_allreduce_max(GpuComms* G, GpuGroup* g, float* buf, size_t n, cudaStream_t s) {
    if (g->c->size <= 1 || !n) return;
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, LANE_COMPUTE, g->c, s, 4.0 * n, ncclAllReduce(buf, buf, n, ncclFloat32, ncclMax, g->nccl, s));
        return;
    }
    float* h = (float*)host_stage(G, 4 * n);
    d2h(h, buf, 4 * n, s);
    comm_allreduce_max(g->c, h, n);
    h2d(buf, h, 4 * n, s);
}
// Sum of fp32 buf over the group, overlapping what `compute` runs next: on the side stream,
// after everything queued on compute so far (the event `ready` orders the two). buf must not
// be touched on compute until nccl_async_join. The MPI backend has no side stream: there
// it is nccl_allreduce_sum, done when it returns.
static void nccl_allreduce_sum_async(GpuComms* G, GpuGroup* g, float* buf, size_t n, cudaStream_t compute) {
    if (g->c->size <= 1 || !n) return;
    if (G->backend != COMM_NCCL) {
        nccl_allreduce_sum(G, g, buf, n, compute);
        return;
    }
    cudaCheck(cudaEventRecord(G->ready, compute));
    cudaCheck(cudaStreamWaitEvent(G->side, G->ready, 0));
    NCCL_TIMED(G, LANE_SIDE, g->c, G->side, 4.0 * n,
               ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, G->side));
    G->side_pending = 1;
}
// The same in bf16 (--grad-reduce bf16: half the bytes): on the side stream, a chunk of
// scratch_n at a time, the fp32 buf rounded into the bf16 scratch, summed there by NCCL (in
// bf16, rounding at each step of its ring), and widened back into buf. The side stream runs
// the chunks one after the other, so one scratch serves every call.
static void nccl_allreduce_sum_async_bf16(GpuComms* G, GpuGroup* g, float* buf, size_t n, bf16* scratch,
                                          size_t scratch_n, cudaStream_t compute) {
    if (g->c->size <= 1 || !n) return;
    cudaCheck(cudaEventRecord(G->ready, compute));
    cudaCheck(cudaStreamWaitEvent(G->side, G->ready, 0));
    for (size_t at = 0; at < n; at += scratch_n) {
        size_t k = n - at < scratch_n ? n - at : scratch_n;
        f32_to_bf16_gpu(scratch, buf + at, k, G->side);
        NCCL_TIMED(G, LANE_SIDE, g->c, G->side, 2.0 * k,
                   ncclAllReduce(scratch, scratch, k, ncclBfloat16, ncclSum, g->nccl, G->side));
        bf16_to_f32_gpu(buf + at, scratch, k, G->side);
    }
    G->side_pending = 1;
}
// What compute runs next waits for every overlapped collective (the host does not).
static void nccl_async_join(GpuComms* G, cudaStream_t compute) {
    if (!G->side_pending) return;
    cudaCheck(cudaEventRecord(G->done, G->side));
    cudaCheck(cudaStreamWaitEvent(compute, G->done, 0));
    G->side_pending = 0;
}

// bf16 sum (activations under tp). NCCL reduces in bf16; the MPI fallback converts to fp32,
// sums, and rounds once, so the two backends may differ in the last bf16 bit.
static void nccl_allreduce_sum_bf16(GpuComms* G, GpuGroup* g, bf16* buf, size_t n, cudaStream_t s) {
    if (g->c->size <= 1 || !n) return;
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, LANE_COMPUTE, g->c, s, 2.0 * n, ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, g->nccl, s));
        return;
    }
    size_t off = round_up(2 * n, 16);  // staging: [bf16 n | pad | fp32 n]
    char* h = (char*)host_stage(G, off + 4 * n);
    bf16* hb = (bf16*)h;
    float* hf = (float*)(h + off);
    d2h(hb, buf, 2 * n, s);
    for (size_t i = 0; i < n; i++) hf[i] = __bfloat162float(hb[i]);
    comm_allreduce_sum(g->c, hf, n);
    for (size_t i = 0; i < n; i++) hb[i] = __float2bfloat16(hf[i]);
    h2d(buf, hb, 2 * n, s);
}
// bf16 reduce-scatter (sequence-parallel activations): NCCL sums in bf16; the MPI fallback
// converts to fp32, sums and rounds once, as nccl_allreduce_sum_bf16 does.
static void nccl_reduce_scatter_bf16(GpuComms* G, GpuGroup* g, const bf16* send, bf16* recv, size_t n_per_rank,
                                     cudaStream_t s) {
    size_t n_all = n_per_rank * g->c->size;
    if (g->c->size <= 1) {
        if (recv != send) copyCheck(cudaMemcpyAsync(recv, send, 2 * n_per_rank, cudaMemcpyDeviceToDevice, s));
        return;
    }
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, LANE_COMPUTE, g->c, s, 2.0 * n_all,
                   ncclReduceScatter(send, recv, n_per_rank, ncclBfloat16, ncclSum, g->nccl, s));
        return;
    }
    size_t off = round_up(2 * n_all, 16);  // staging: [bf16 n_all | pad | fp32 n_all | fp32 n_per_rank]
    char* h = (char*)host_stage(G, off + 4 * (n_all + n_per_rank));
    bf16* hb = (bf16*)h;
    float* hf = (float*)(h + off);
    float* hr = hf + n_all;
    d2h(hb, send, 2 * n_all, s);
    for (size_t i = 0; i < n_all; i++) hf[i] = __bfloat162float(hb[i]);
    comm_reduce_scatter(g->c, hf, hr, n_per_rank);
    for (size_t i = 0; i < n_per_rank; i++) hb[i] = __float2bfloat16(hr[i]);
    h2d(recv, hb, 2 * n_per_rank, s);
}
// Every rank contributes elem_bytes * n_per_rank bytes; recv holds the blocks in rank order.
// send may be recv + rank * n_per_rank (in place). Any element type (nothing is reduced).
static void nccl_allgather_bytes(GpuComms* G, GpuGroup* g, const void* send, void* recv, size_t bytes_per_rank,
                                 cudaStream_t s) {
    Comm* c = g->c;
    if (c->size <= 1) {
        if (recv != send) copyCheck(cudaMemcpyAsync(recv, send, bytes_per_rank, cudaMemcpyDeviceToDevice, s));
        return;
    }
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, LANE_COMPUTE, g->c, s, (double)bytes_per_rank * c->size,
                   ncclAllGather(send, recv, bytes_per_rank, ncclUint8, g->nccl, s));
        return;
    }
    char* h = (char*)host_stage(G, bytes_per_rank * c->size);
    d2h(h + (size_t)c->rank * bytes_per_rank, send, bytes_per_rank, s);  // also right when in place
    COMM_TIMED(c, (double)bytes_per_rank * c->size,
               MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, h, (int)bytes_per_rank, MPI_BYTE, c->mpi));
    h2d(recv, h, bytes_per_rank * c->size, s);
}
static void nccl_allgather(GpuComms* G, GpuGroup* g, const float* send, float* recv, size_t n_per_rank,
                           cudaStream_t s) {
    nccl_allgather_bytes(G, g, send, recv, 4 * n_per_rank, s);
}
static void nccl_allgather_bf16(GpuComms* G, GpuGroup* g, const bf16* send, bf16* recv, size_t n_per_rank,
                                cudaStream_t s) {
    nccl_allgather_bytes(G, g, send, recv, 2 * n_per_rank, s);
}
// ZeRO-3's uneven collectives (parallel/zero3.h) over a unit of n floats, of which rank r of
// the group holds counts[r] at displs[r]. The all-gather runs on the side stream after what
// compute has queued so far (the shard's update; kernels still reading the buffer it refills),
// as sends and receives of the parts (NCCL has no all-gather of uneven parts), and records
// *done for compute to wait on (nccl_event_wait); host-staged it is done when it returns.
static ncclResult_t nccl_allgatherv_group(const float* mine, float* recv, const int* counts, const int* displs,
                                          int size, int me, ncclComm_t comm, cudaStream_t s) {
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < size; r++) {
        if (r == me) continue;
        if (counts[me]) ncclCheck(ncclSend(mine, counts[me], ncclFloat32, r, comm, s));
        if (counts[r]) ncclCheck(ncclRecv(recv + displs[r], counts[r], ncclFloat32, r, comm, s));
    }
    return ncclGroupEnd();
}
static void nccl_allgatherv_start(GpuComms* G, GpuGroup* g, const float* mine, float* recv, const int* counts,
                                  const int* displs, size_t n, cudaStream_t compute, cudaEvent_t* done) {
    Comm* c = g->c;
    if (G->backend != COMM_NCCL) {
        float* h = (float*)host_stage(G, 4 * n);
        d2h(h + displs[c->rank], mine, 4 * (size_t)counts[c->rank], compute);
        COMM_TIMED(c, 4.0 * n, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, h, counts, displs, MPI_FLOAT, c->mpi));
        h2d(recv, h, 4 * n, compute);
        return;
    }
    if (!*done) cudaCheck(cudaEventCreateWithFlags(done, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(G->ready, compute));
    cudaCheck(cudaStreamWaitEvent(G->side, G->ready, 0));
    if (mine != recv + displs[c->rank])  // (in place: ZeRO 1/2)
        copyCheck(cudaMemcpyAsync(recv + displs[c->rank], mine, 4 * (size_t)counts[c->rank], cudaMemcpyDeviceToDevice,
                                  G->side));
    NCCL_TIMED(G, LANE_SIDE, c, G->side, 4.0 * n,
               nccl_allgatherv_group(mine, recv, counts, displs, c->size, c->rank, g->nccl, G->side));
    cudaCheck(cudaEventRecord(*done, G->side));
}
static void nccl_event_wait(GpuComms* G, cudaStream_t compute, cudaEvent_t done) {
    if (G->backend == COMM_NCCL) cudaCheck(cudaStreamWaitEvent(compute, done, 0));
}
// The group's sum of a unit's gradient buf (n floats), of which this rank adds its part
// (counts[rank] floats at displs[rank]) into part (NULL: none); buf is cleared after. NCCL: an
// all-reduce in place (no reduce-scatter of uneven parts; twice a reduce-scatter's bytes), the
// add and the clearing after it, all on the side stream after what compute has queued so far,
// and *done (done not NULL) recorded after them: compute waits for it (nccl_event_wait) before
// it writes buf again, and for everything at nccl_async_join. Host-staged: MPI's reduce-scatter,
// done on the compute stream.
static void nccl_reduce_scatterv_add(GpuComms* G, GpuGroup* g, float* buf, const int* counts, const int* displs,
                                     size_t n, float* part, cudaStream_t compute, cudaEvent_t* done) {
    Comm* c = g->c;
    cudaStream_t s = compute;
    if (G->backend == COMM_NCCL) {
        cudaCheck(cudaEventRecord(G->ready, compute));
        cudaCheck(cudaStreamWaitEvent(G->side, G->ready, 0));
        s = G->side, G->side_pending = 1;
        if (c->size > 1)
            NCCL_TIMED(G, LANE_SIDE, c, s, 4.0 * n, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, s));
    } else {
        float* h = (float*)host_stage(G, 4 * n);
        d2h(h, buf, 4 * n, s);
        COMM_TIMED(c, 4.0 * n, MPI_Reduce_scatter(MPI_IN_PLACE, h, counts, MPI_FLOAT, MPI_SUM, c->mpi));
        h2d(buf + displs[c->rank], h, 4 * (size_t)counts[c->rank], s);
    }
    if (part) add_inplace_f32_gpu(part, buf + displs[c->rank], counts[c->rank], s);
    copyCheck(cudaMemsetAsync(buf, 0, sizeof(float) * n, s));
    if (!done) return;
    if (!*done) cudaCheck(cudaEventCreateWithFlags(done, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(*done, s));
}

// Block r of send (bytes_per_rank each) to rank r of the group, block r of recv from rank r.
// send and recv do not overlap. Any element type.
static ncclResult_t nccl_alltoall_group(const void* send, void* recv, size_t bytes_per_rank, int size, ncclComm_t comm,
                                        cudaStream_t s) {
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < size; r++) {
        ncclCheck(ncclSend((const char*)send + r * bytes_per_rank, bytes_per_rank, ncclUint8, r, comm, s));
        ncclCheck(ncclRecv((char*)recv + r * bytes_per_rank, bytes_per_rank, ncclUint8, r, comm, s));
    }
    return ncclGroupEnd();
}
static void nccl_alltoall_bytes(GpuComms* G, GpuGroup* g, const void* send, void* recv, size_t bytes_per_rank,
                                cudaStream_t s) {
    Comm* c = g->c;
    size_t all = bytes_per_rank * c->size;
    if (c->size <= 1) {
        if (recv != send) copyCheck(cudaMemcpyAsync(recv, send, bytes_per_rank, cudaMemcpyDeviceToDevice, s));
        return;
    }
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, LANE_COMPUTE, c, s, (double)bytes_per_rank * (c->size - 1),
                   nccl_alltoall_group(send, recv, bytes_per_rank, c->size, g->nccl, s));
        return;
    }
    if (bytes_per_rank > INT_MAX)
        fail("all-to-all of %zu bytes per rank is more than MPI's %d", bytes_per_rank, INT_MAX);
    char* h = (char*)host_stage(G, 2 * all);
    d2h(h, send, all, s);
    COMM_TIMED(c, (double)bytes_per_rank * (c->size - 1),
               MPI_Alltoall(h, (int)bytes_per_rank, MPI_BYTE, h + all, (int)bytes_per_rank, MPI_BYTE, c->mpi));
    h2d(recv, h + all, all, s);
}
static void nccl_alltoall_bf16(GpuComms* G, GpuGroup* g, const bf16* send, bf16* recv, size_t n_per_rank,
                               cudaStream_t s) {
    nccl_alltoall_bytes(G, g, send, recv, 2 * n_per_rank, s);
}

// The context-parallel ring on group g: bytes from send to the next rank, as many from the
// previous into recv, overlapping what compute runs until nccl_ring_wait; one exchange at a
// time. send and recv are not touched on compute in between.
static ncclResult_t nccl_ring_exchange(const void* send, void* recv, size_t bytes, int next, int prev, ncclComm_t comm,
                                       cudaStream_t s) {
    ncclCheck(ncclGroupStart());
    ncclCheck(ncclSend(send, bytes, ncclUint8, next, comm, s));
    ncclCheck(ncclRecv(recv, bytes, ncclUint8, prev, comm, s));
    return ncclGroupEnd();
}
static void nccl_ring_start(GpuComms* G, GpuGroup* g, const void* send, void* recv, size_t bytes,
                            cudaStream_t compute) {
    Comm* c = g->c;
    if (G->backend == COMM_NCCL) {
        int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
        cudaCheck(cudaEventRecord(G->ring_ready, compute));
        cudaCheck(cudaStreamWaitEvent(G->ring, G->ring_ready, 0));
        NCCL_TIMED(G, LANE_RING, c, G->ring, (double)bytes,
                   nccl_ring_exchange(send, recv, bytes, next, prev, g->nccl, G->ring));
        cudaCheck(cudaEventRecord(G->ring_done, G->ring));
        return;
    }
    if (bytes > G->ring_host_bytes) {  // grown on the first step only
        G->ring_host_bytes = round_up(bytes, 1 << 20);
        for (int i = 0; i < 2; i++) {
            if (G->ring_host[i]) cudaCheck(cudaFreeHost(G->ring_host[i]));
            cudaCheck(cudaMallocHost(&G->ring_host[i], G->ring_host_bytes));
        }
    }
    d2h(G->ring_host[0], send, bytes, compute);  // synchronizes: what the compute stream wrote is there
    comm_ring_start(c, G->ring_host[0], G->ring_host[1], bytes, &G->ring_xfer);
    G->ring_recv = recv, G->ring_bytes = bytes;
}
// What compute runs next waits for the exchange; host_waits: the host too (for a trace).
static void nccl_ring_wait(GpuComms* G, GpuGroup* g, cudaStream_t compute, int host_waits) {
    if (G->backend == COMM_NCCL) {
        cudaCheck(cudaStreamWaitEvent(compute, G->ring_done, 0));
        if (host_waits) host_wait_event(G->ring_done);
        return;
    }
    comm_ring_wait(g->c, &G->ring_xfer);
    h2d(G->ring_recv, G->ring_host[1], G->ring_bytes, compute);
}

// Pipeline p2p over NCCL (G->p2p): bytes from buf to the stage up or down the ring (dir 0
// activations, 1 gradients), once the work queued on compute so far is done; `sent` is
// recorded when the send has finished and buf may be written again.
static void nccl_pp_send(GpuComms* G, int dir, int up, const void* buf, size_t bytes, cudaStream_t compute,
                         cudaEvent_t sent) {
    cudaStream_t st = G->p2p_stream[dir][up];
    cudaCheck(cudaEventRecord(G->p2p_ready, compute));
    cudaCheck(cudaStreamWaitEvent(st, G->p2p_ready, 0));
    ncclCheck(ncclSend(buf, bytes, ncclUint8, 1, G->p2p_send[dir][up], st));
    cudaCheck(cudaEventRecord(sent, st));
    G->group[GROUP_PP].c->bytes +=
        (double)bytes;  // its time is not counted: the stage does not wait for it (the receiver does)
}
// The next message of direction dir from the stage that sends it this way, into buf, queued on
// compute before the kernels that read it; the host does not wait. Its time, timed by events
// like a collective's, is the device's wait for the peer stage and the transfer (the bubble is
// the receive op's time in the trace, as on the CPU build).
static void nccl_pp_recv(GpuComms* G, int dir, int up, void* buf, size_t bytes, cudaStream_t compute) {
    NCCL_TIMED(G, LANE_COMPUTE, G->group[GROUP_PP].c, compute, 0.0,
               ncclRecv(buf, bytes, ncclUint8, 0, G->p2p_recv[dir][up], compute));
}

#endif
