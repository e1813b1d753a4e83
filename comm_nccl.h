// comm_nccl.h: the GPU backend of the communicator interface of layout.h. Each group of
// the Layout (tp, pp, dp, embed, world) gets an NCCL communicator, made by broadcasting an
// ncclUniqueId over the group's MPI sub-communicator. Every call works on device buffers
// and is stream-ordered on the given stream.
//
// `--comm mpi` selects a host-staged fallback instead: device -> pinned host, the comm_*
// MPI call of layout.h, host -> device. Slow, but several ranks can then share one GPU
// (NCCL refuses two ranks of one communicator on the same device), which is how the
// multi-rank GPU tests run on a single card.
//
// Timing: with `timed` set (the default) each call synchronizes the stream before and
// after, so Comm.seconds is the wall time of the communication itself; bytes are counted
// either way. The MPI backend is synchronous by nature.
//
// Point-to-point: NCCL executes the operations of one communicator in the order they are
// issued, so two stages that each send to the other before receiving would deadlock. A
// send and a receive that happen at the same point of a schedule must go through
// nccl_sendrecv (one ncclGroupStart/End). The MPI backend uses MPI_Bsend, so its sends
// never wait, like comm_isend (buffer attached at init). train_gpt.cu does not use these for
// its pipeline: it stages each send in a pinned buffer of the activation slot and posts it
// with layout.h's comm_isend, which never blocks and so runs the schedule.h op lists as is.
#ifndef COMM_NCCL_H
#define COMM_NCCL_H

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's C++ bindings are unused and warn under nvcc -Wextra
#endif
#include <nccl.h>
#include "layout.h"
#include "kernels_gpu.cuh"

#define ncclCheck(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
    fail("NCCL error at %s:%d: %s (%s)", __FILE__, __LINE__, ncclGetErrorString(r_), #call); } while (0)

enum { COMM_NCCL = 0, COMM_MPI = 1 };

typedef struct {
    Comm* c;           // the MPI group of layout.h: size, rank, timing, and the fallback
    ncclComm_t nccl;   // NULL for groups of size 1, non-members, and the MPI backend
} GpuGroup;

// Collectives that overlap compute (nccl_allreduce_sum_async) run on `side`, NCCL's own
// stream, each timed by a pair of events from a fixed pool.
#define GPU_ASYNC_MAX 1024
typedef struct {
    int backend;  // COMM_NCCL or COMM_MPI
    int timed;
    GpuGroup tp, pp, dp, embed, world;
    void* host;  // pinned staging buffer of the MPI backend, grown on demand (first step only)
    size_t host_bytes;
    void* bsend;  // MPI_Bsend buffer of the MPI backend
    cudaStream_t side;                 // NCCL backend: the stream of the overlapped collectives
    cudaEvent_t ready, done;           // compute -> side, side -> compute
    cudaEvent_t t0[GPU_ASYNC_MAX], t1[GPU_ASYNC_MAX];
    GpuGroup* async_group[GPU_ASYNC_MAX];
    int n_async;                       // collectives queued on side since the last join
} GpuComms;

// One device per local rank: OMPI_COMM_WORLD_LOCAL_RANK (else the rank within this node's
// shared-memory group) modulo the device count. With NCCL a device may hold only one rank;
// with the MPI backend any number may share it. *ranks_per_device (may be NULL): how many
// ranks of this node share each device, for the per-rank peak of the MFU.
static int gpu_select_device(int backend, int* ranks_per_device) {
    MPI_Comm node;
    int local_rank, local_size, n_dev = 0;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    const char* env = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (env) local_rank = atoi(env);
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) fail("no CUDA GPU available (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (backend == COMM_NCCL && local_size > n_dev)
        fail("%d ranks on this node but only %d GPU(s): NCCL needs one GPU per rank (use --comm mpi to share a GPU)", local_size, n_dev);
    int dev = local_rank % n_dev;
    cudaCheck(cudaSetDevice(dev));
    if (ranks_per_device) *ranks_per_device = local_size > n_dev ? (local_size + n_dev - 1) / n_dev : 1;
    return dev;
}

static void gpu_group_init(GpuGroup* g, Comm* c, int member, int backend) {
    g->c = c;
    g->nccl = NULL;
    if (!member || backend != COMM_NCCL || c->size <= 1) return;
    ncclUniqueId id;
    if (c->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    mpiCheck(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, c->mpi));
    ncclCheck(ncclCommInitRank(&g->nccl, c->size, id, c->rank));
}

// Call after layout_init and gpu_select_device, on every rank, in the same order.
// bsend_bytes: room for the pipeline sends that may be in flight at once (MPI backend).
static void gpu_comms_init(GpuComms* G, Layout* L, int backend, size_t bsend_bytes) {
    memset(G, 0, sizeof(*G));
    G->backend = backend;
    G->timed = 1;
    // Every member of a group reaches its init in the same order (tp, pp, dp, embed,
    // world), so the blocking ncclCommInitRank calls cannot wait on each other in a cycle.
    gpu_group_init(&G->tp, &L->tp_c, 1, backend);
    gpu_group_init(&G->pp, &L->pp_c, 1, backend);
    gpu_group_init(&G->dp, &L->dp_c, 1, backend);
    gpu_group_init(&G->embed, &L->embed_c, L->in_embed, backend);
    gpu_group_init(&G->world, &L->world_c, 1, backend);
    if (backend == COMM_NCCL) {
        cudaCheck(cudaStreamCreateWithFlags(&G->side, cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&G->ready, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&G->done, cudaEventDisableTiming));
        for (int i = 0; i < GPU_ASYNC_MAX; i++) {
            cudaCheck(cudaEventCreate(&G->t0[i]));
            cudaCheck(cudaEventCreate(&G->t1[i]));
        }
    }
    if (backend == COMM_MPI && bsend_bytes) {
        int size = (int)(bsend_bytes + 64 * MPI_BSEND_OVERHEAD);
        G->bsend = xmalloc(size);
        mpiCheck(MPI_Buffer_attach(G->bsend, size));
    }
}

static void gpu_comms_free(GpuComms* G) {
    GpuGroup* gs[] = {&G->tp, &G->pp, &G->dp, &G->embed, &G->world};
    for (int i = 0; i < 5; i++)
        if (gs[i]->nccl) ncclCheck(ncclCommDestroy(gs[i]->nccl));
    if (G->host) cudaCheck(cudaFreeHost(G->host));
    if (G->side) {
        for (int i = 0; i < GPU_ASYNC_MAX; i++) {
            cudaCheck(cudaEventDestroy(G->t0[i]));
            cudaCheck(cudaEventDestroy(G->t1[i]));
        }
        cudaCheck(cudaEventDestroy(G->ready));
        cudaCheck(cudaEventDestroy(G->done));
        cudaCheck(cudaStreamDestroy(G->side));
    }
    if (G->bsend) {
        void* b;
        int size;
        MPI_Buffer_detach(&b, &size);  // waits for the buffered sends to go out
        free(G->bsend);
    }
    memset(G, 0, sizeof(*G));
}

static void* host_stage(GpuComms* G, size_t bytes) {
    if (bytes > G->host_bytes) {
        if (G->host) cudaCheck(cudaFreeHost(G->host));
        G->host_bytes = round_up(bytes, 1 << 20);
        cudaCheck(cudaMallocHost(&G->host, G->host_bytes));
    }
    return G->host;
}
static void d2h(void* h, const void* d, size_t bytes, cudaStream_t s) {
    cudaCheck(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
}
static void h2d(void* d, const void* h, size_t bytes, cudaStream_t s) {
    cudaCheck(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
    cudaCheck(cudaStreamSynchronize(s));  // the staging buffer is reused by the next call
}

// Wrap one NCCL call with the group's time and byte counters.
#define NCCL_TIMED(G, g, s, nbytes, call) do { double t0_ = 0; \
    if ((G)->timed) { cudaCheck(cudaStreamSynchronize(s)); t0_ = now_s(); } \
    ncclCheck(call); \
    if ((G)->timed) { cudaCheck(cudaStreamSynchronize(s)); (g)->c->seconds += now_s() - t0_; watchdog_kick(); } \
    (g)->c->bytes += (nbytes); } while (0)

static void nccl_allreduce_sum(GpuComms* G, GpuGroup* g, float* buf, size_t n, cudaStream_t s) {
    if (g->c->size <= 1 || !n) return;
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, g, s, 4.0 * n, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, s));
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
        NCCL_TIMED(G, g, s, 4.0 * n, ncclAllReduce(buf, buf, n, ncclFloat32, ncclMax, g->nccl, s));
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
    if (G->n_async == GPU_ASYNC_MAX) fail("more than %d overlapped collectives in one step", GPU_ASYNC_MAX);
    int i = G->n_async++;
    cudaCheck(cudaEventRecord(G->ready, compute));
    cudaCheck(cudaStreamWaitEvent(G->side, G->ready, 0));
    cudaCheck(cudaEventRecord(G->t0[i], G->side));
    ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, G->side));
    cudaCheck(cudaEventRecord(G->t1[i], G->side));
    G->async_group[i] = g;
    g->c->bytes += 4.0 * n;
}
// compute waits for every overlapped collective; their device times go to their groups'
// counters (the time NCCL's kernels ran, beside the compute, not time the step waited).
static void nccl_async_join(GpuComms* G, cudaStream_t compute) {
    if (!G->n_async) return;
    cudaCheck(cudaEventRecord(G->done, G->side));
    cudaCheck(cudaStreamWaitEvent(compute, G->done, 0));
    cudaCheck(cudaEventSynchronize(G->done));
    for (int i = 0; i < G->n_async; i++) {
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, G->t0[i], G->t1[i]));
        G->async_group[i]->c->seconds += ms / 1e3;
    }
    G->n_async = 0;
    watchdog_kick();
}

// bf16 sum (activations under tp). NCCL reduces in bf16; the MPI fallback converts to fp32,
// sums, and rounds once, so the two backends may differ in the last bf16 bit.
static void nccl_allreduce_sum_bf16(GpuComms* G, GpuGroup* g, bf16* buf, size_t n, cudaStream_t s) {
    if (g->c->size <= 1 || !n) return;
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, g, s, 2.0 * n, ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, g->nccl, s));
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
// send holds size * n_per_rank floats; rank r receives the sum of block r.
static void nccl_reduce_scatter(GpuComms* G, GpuGroup* g, const float* send, float* recv, size_t n_per_rank, cudaStream_t s) {
    size_t n_all = n_per_rank * g->c->size;
    if (g->c->size <= 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, 4 * n_per_rank, cudaMemcpyDeviceToDevice, s));
        return;
    }
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, g, s, 4.0 * n_all, ncclReduceScatter(send, recv, n_per_rank, ncclFloat32, ncclSum, g->nccl, s));
        return;
    }
    float* h = (float*)host_stage(G, 4 * (n_all + n_per_rank));
    d2h(h, send, 4 * n_all, s);
    comm_reduce_scatter(g->c, h, h + n_all, n_per_rank);
    h2d(recv, h + n_all, 4 * n_per_rank, s);
}
// bf16 reduce-scatter (sequence-parallel activations): NCCL sums in bf16; the MPI fallback
// converts to fp32, sums and rounds once, as nccl_allreduce_sum_bf16 does.
static void nccl_reduce_scatter_bf16(GpuComms* G, GpuGroup* g, const bf16* send, bf16* recv, size_t n_per_rank, cudaStream_t s) {
    size_t n_all = n_per_rank * g->c->size;
    if (g->c->size <= 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, 2 * n_per_rank, cudaMemcpyDeviceToDevice, s));
        return;
    }
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, g, s, 2.0 * n_all, ncclReduceScatter(send, recv, n_per_rank, ncclBfloat16, ncclSum, g->nccl, s));
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
static void nccl_allgather_bytes(GpuComms* G, GpuGroup* g, const void* send, void* recv, size_t bytes_per_rank, cudaStream_t s) {
    Comm* c = g->c;
    if (c->size <= 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, bytes_per_rank, cudaMemcpyDeviceToDevice, s));
        return;
    }
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, g, s, (double)bytes_per_rank * c->size,
                   ncclAllGather(send, recv, bytes_per_rank, ncclUint8, g->nccl, s));
        return;
    }
    char* h = (char*)host_stage(G, bytes_per_rank * c->size);
    d2h(h + (size_t)c->rank * bytes_per_rank, send, bytes_per_rank, s);  // also right when in place
    COMM_TIMED(c, (double)bytes_per_rank * c->size,
               MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, h, (int)bytes_per_rank, MPI_BYTE, c->mpi));
    h2d(recv, h, bytes_per_rank * c->size, s);
}
static void nccl_allgather(GpuComms* G, GpuGroup* g, const float* send, float* recv, size_t n_per_rank, cudaStream_t s) {
    nccl_allgather_bytes(G, g, send, recv, 4 * n_per_rank, s);
}
static void nccl_allgather_bf16(GpuComms* G, GpuGroup* g, const bf16* send, bf16* recv, size_t n_per_rank, cudaStream_t s) {
    nccl_allgather_bytes(G, g, send, recv, 2 * n_per_rank, s);
}
static void nccl_broadcast(GpuComms* G, GpuGroup* g, void* buf, size_t bytes, int root, cudaStream_t s) {
    if (g->c->size <= 1 || !bytes) return;
    if (G->backend == COMM_NCCL) {
        NCCL_TIMED(G, g, s, (double)bytes, ncclBroadcast(buf, buf, bytes, ncclUint8, root, g->nccl, s));
        return;
    }
    void* h = host_stage(G, bytes);
    if (g->c->rank == root) d2h(h, buf, bytes, s);
    comm_broadcast(g->c, h, bytes, root);
    h2d(buf, h, bytes, s);
}

// Point-to-point on a group (the pipeline group): send_bytes from send_buf to send_peer and
// recv_bytes into recv_buf from recv_peer, at the same time; either side may be absent
// (NULL buffer or peer < 0). tag is used by the MPI backend only (NCCL matches in order).
static void nccl_sendrecv(GpuComms* G, GpuGroup* g, const void* send_buf, size_t send_bytes, int send_peer,
                          void* recv_buf, size_t recv_bytes, int recv_peer, int tag, cudaStream_t s) {
    int do_send = send_buf && send_peer >= 0, do_recv = recv_buf && recv_peer >= 0;
    if (!do_send && !do_recv) return;
    Comm* c = g->c;
    if (G->backend == COMM_NCCL) {
        double t0 = 0;
        if (G->timed) { cudaCheck(cudaStreamSynchronize(s)); t0 = now_s(); }
        ncclCheck(ncclGroupStart());
        if (do_send) ncclCheck(ncclSend(send_buf, send_bytes, ncclUint8, send_peer, g->nccl, s));
        if (do_recv) ncclCheck(ncclRecv(recv_buf, recv_bytes, ncclUint8, recv_peer, g->nccl, s));
        ncclCheck(ncclGroupEnd());
        if (G->timed) { cudaCheck(cudaStreamSynchronize(s)); c->seconds += now_s() - t0; }
        if (do_send) c->bytes += (double)send_bytes;
        return;
    }
    // MPI: the send is buffered (MPI_Bsend returns at once), then the receive blocks.
    if (do_send) {
        void* h = host_stage(G, send_bytes);
        d2h(h, send_buf, send_bytes, s);
        double t0 = now_s();
        if (G->bsend) mpiCheck(MPI_Bsend(h, (int)send_bytes, MPI_BYTE, send_peer, tag, c->mpi));
        else mpiCheck(MPI_Send(h, (int)send_bytes, MPI_BYTE, send_peer, tag, c->mpi));
        c->seconds += now_s() - t0;
        c->bytes += (double)send_bytes;
    }
    if (do_recv) {
        void* h = host_stage(G, recv_bytes);
        double t0 = now_s();
        mpiCheck(MPI_Recv(h, (int)recv_bytes, MPI_BYTE, recv_peer, tag, c->mpi, MPI_STATUS_IGNORE));
        c->seconds += now_s() - t0;
        h2d(recv_buf, h, recv_bytes, s);
    }
}
static void nccl_send(GpuComms* G, GpuGroup* g, const void* buf, size_t bytes, int peer, int tag, cudaStream_t s) {
    nccl_sendrecv(G, g, buf, bytes, peer, NULL, 0, -1, tag, s);
}
static void nccl_recv(GpuComms* G, GpuGroup* g, void* buf, size_t bytes, int peer, int tag, cudaStream_t s) {
    nccl_sendrecv(G, g, NULL, 0, -1, buf, bytes, peer, tag, s);
}

#endif
