// layout/grid.h: the grid of ranks, its process groups and the communicator interface over
// MPI. Shared by the CPU and GPU builds. (The checks that a layout can run a model:
// layout/layout_check.h; the self-launcher under mpirun: base/launcher.h; the watchdog:
// base/watchdog.h.)
//
// The grid (Megatron-LM's order): rank = ((dp_rank * pp + stage) * cp + cp_rank) * tp + tp_rank.
// Tensor-parallel ranks are adjacent (they talk every layer, so they share a node);
// context-parallel ranks next (every layer's attention, a ring or all-to-all: in the node
// when tp * cp fits in it); pipeline stages next; data-parallel replicas are the
// outermost, slowest axis. cp_rank = ring_rank * U + ulysses_rank (context_parallel.h).
//
// Groups (Layout.group[kind], each a Comm below):
//   tp      : same (dp_rank, stage, cp_rank)  - all-reduce / all-gather / reduce-scatter of activations
//   pp      : same (dp_rank, cp_rank, tp_rank) - send/recv of activations and their gradients
//   dp      : same (stage, tp_rank), every dp_rank and cp_rank - the ranks holding the same
//             weights: gradient all-reduce (or reduce-scatter + all-gather with ZeRO)
//   embed   : stages 0 and pp-1 of the same (dp_rank, cp_rank, tp_rank) - the tied embedding's gradient
//   world   : all ranks                       - loss, gradient norm, barriers
//   ulysses : same ring rank of one (dp_rank, stage, tp_rank) - cp all-to-all
//   ring    : same ulysses rank of one (dp_rank, stage, tp_rank) - cp ring send/recv
#ifndef GRID_H
#define GRID_H

#include <mpi.h>
#include "layout/params.h"
#include "layout/schedule.h"
#include "layout/layout_check.h"
#include "base/watchdog.h"

#define mpiCheck(call) do { int rc_ = (call); if (rc_ != MPI_SUCCESS) { char s_[MPI_MAX_ERROR_STRING]; int l_; \
    MPI_Error_string(rc_, s_, &l_); fail("MPI error at %s:%d: %s", __FILE__, __LINE__, s_); } } while (0)

// A communicator over one group, with the time and bytes it has spent.
typedef struct {
    MPI_Comm mpi;
    int size, rank;
    const char* name;
    double seconds;  // wall time inside this group's collectives
    double bytes;    // payload bytes sent through it
} Comm;

// The process groups, one table indexed by kind (a new axis adds a row).
typedef enum {
    GROUP_TP,
    GROUP_PP,
    GROUP_DP,
    GROUP_EMBED,
    GROUP_WORLD,
    GROUP_CP_ULYSSES,
    GROUP_CP_RING,
    N_GROUPS
} Group;

typedef struct {
    int world, rank;
    int dp, tp, pp, vpp, cp;
    int sched;     // the pipeline schedule, which also places the chunks (params.h chunk_global)
    int dp_rank, tp_rank, stage, cp_rank;
    int replicas, replica;  // dp x cp ranks hold the same weights: how many, and which one is this (ZeRO's shard)
    Comm group[N_GROUPS];
    int in_embed;  // this rank holds a copy of the tied embedding that must stay in sync
} Layout;

static int layout_rank_of(const Layout* L, int dp_rank, int stage, int cp_rank, int tp_rank) {
    return ((dp_rank * L->pp + stage) * L->cp + cp_rank) * L->tp + tp_rank;
}

static void comm_make(Comm* c, const char* name, int color, int key) {
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c->mpi));
    c->size = 1, c->rank = 0;  // a rank outside the group (MPI_UNDEFINED) sees a group of one
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_size(c->mpi, &c->size), MPI_Comm_rank(c->mpi, &c->rank);
    c->name = name;
    c->seconds = c->bytes = 0;
}

static void mpi_fail_hook(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

// Build the grid. The caller has checked dp * pp * cp * tp == world.
static void layout_init(Layout* L, int dp, int tp, int pp, int vpp, int cp, int cp_ulysses, int sched) {
    MPI_Comm_size(MPI_COMM_WORLD, &L->world);
    MPI_Comm_rank(MPI_COMM_WORLD, &L->rank);
    L->dp = dp, L->tp = tp, L->pp = pp, L->vpp = vpp, L->cp = cp, L->sched = sched;
    L->tp_rank = L->rank % tp;
    L->cp_rank = (L->rank / tp) % cp;
    L->stage = (L->rank / (tp * cp)) % pp;
    L->dp_rank = L->rank / (tp * cp * pp);
    L->replicas = dp * cp, L->replica = L->dp_rank * cp + L->cp_rank;
    int U = cp_ulysses, ring_rank = L->cp_rank / U, ulysses_rank = L->cp_rank % U;
    int tp_line = (L->dp_rank * pp + L->stage) * tp + L->tp_rank;  // one (dp_rank, stage, tp_rank): its cp ranks
    comm_make(&L->group[GROUP_WORLD], "world", 0, L->rank);
    comm_make(&L->group[GROUP_TP], "tp", (L->dp_rank * pp + L->stage) * cp + L->cp_rank, L->tp_rank);
    comm_make(&L->group[GROUP_PP], "pp", (L->dp_rank * cp + L->cp_rank) * tp + L->tp_rank, L->stage);
    comm_make(&L->group[GROUP_DP], "dp", L->stage * tp + L->tp_rank, L->replica);
    comm_make(&L->group[GROUP_CP_ULYSSES], "ulysses", tp_line * (cp / U) + ring_rank, ulysses_rank);
    comm_make(&L->group[GROUP_CP_RING], "ring", tp_line * U + ulysses_rank, ring_rank);
    // the stages of the first and the last chunk, when they differ (not in ZB-V's V)
    int first = chunk_stage(sched, pp, 0), last = chunk_stage(sched, pp, pp * vpp - 1);
    L->in_embed = first != last && (L->stage == first || L->stage == last);
    comm_make(&L->group[GROUP_EMBED], "embed",
              L->in_embed ? (L->dp_rank * cp + L->cp_rank) * tp + L->tp_rank : MPI_UNDEFINED, L->stage);
}

// ----------------------------------------------------------------------------
// The communicator interface. Every communication point of the model is one of
// these calls, so `grep comm_` lists them. A group of size 1 costs nothing.

// Called after every collective when a trace is being recorded (metrics.h sets it).
static void (*comm_trace_hook)(const char* group, double t0, double t1) = NULL;

#define COMM_TIMED(c, nbytes, call)                                    \
    do {                                                               \
        if ((c)->size > 1) {                                           \
            double t0_ = now_s();                                      \
            mpiCheck(call);                                            \
            double t1_ = now_s();                                      \
            (c)->seconds += t1_ - t0_;                                 \
            (c)->bytes += (nbytes);                                    \
            watchdog_kick();                                           \
            if (comm_trace_hook) comm_trace_hook((c)->name, t0_, t1_); \
        }                                                              \
    } while (0)

static void comm_allreduce_sum(Comm* c, float* buf, size_t n) {
    COMM_TIMED(c, 4.0 * n, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->mpi));
}
static void comm_allreduce_sum_f64(Comm* c, double* buf, size_t n) {
    COMM_TIMED(c, 8.0 * n, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, c->mpi));
}
static void comm_allreduce_max(Comm* c, float* buf, size_t n) {
    COMM_TIMED(c, 4.0 * n, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX, c->mpi));
}
// send holds size * n_per_rank floats; rank r receives the sum of block r.
static void comm_reduce_scatter(Comm* c, const float* send, float* recv, size_t n_per_rank) {
    if (c->size == 1) { if (recv != send) memcpy(recv, send, 4 * n_per_rank); return; }
    COMM_TIMED(c, 4.0 * n_per_rank * c->size,
               MPI_Reduce_scatter_block(send, recv, (int)n_per_rank, MPI_FLOAT, MPI_SUM, c->mpi));
}
// Every rank contributes n_per_rank floats; recv holds the blocks in rank order.
static void comm_allgather(Comm* c, const float* send, float* recv, size_t n_per_rank) {
    if (c->size == 1) { if (recv != send) memcpy(recv, send, 4 * n_per_rank); return; }
    const void* s = (send == recv + (size_t)c->rank * n_per_rank) ? MPI_IN_PLACE : send;
    COMM_TIMED(c, 4.0 * n_per_rank * c->size,
               MPI_Allgather(s, (int)n_per_rank, MPI_FLOAT, recv, (int)n_per_rank, MPI_FLOAT, c->mpi));
}
static void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {
    COMM_TIMED(c, (double)bytes, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->mpi));
}
static void comm_reduce_sum_to_root(Comm* c, float* buf, size_t n) {
    if (c->size == 1) return;
    void* s = c->rank == 0 ? MPI_IN_PLACE : (void*)buf;
    COMM_TIMED(c, 4.0 * n, MPI_Reduce(s, buf, (int)n, MPI_FLOAT, MPI_SUM, 0, c->mpi));
}
// Point-to-point on the pipeline group. Sends are non-blocking (the schedule relies on
// it: a send never waits for the receiver); the caller keeps buf alive until comm_wait.
static void comm_isend(Comm* c, const float* buf, size_t n, int peer, int tag, MPI_Request* req) {
    double t0 = now_s();
    mpiCheck(MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, c->mpi, req));
    c->seconds += now_s() - t0; c->bytes += 4.0 * n;
}
static void comm_recv(Comm* c, float* buf, size_t n, int peer, int tag) {
    double t0 = now_s();
    mpiCheck(MPI_Recv(buf, (int)n, MPI_FLOAT, peer, tag, c->mpi, MPI_STATUS_IGNORE));
    c->seconds += now_s() - t0;
    watchdog_kick();
}
static void comm_wait(Comm* c, MPI_Request* req) {
    if (*req == MPI_REQUEST_NULL) return;
    double t0 = now_s();
    mpiCheck(MPI_Wait(req, MPI_STATUS_IGNORE));
    c->seconds += now_s() - t0;
}
// Block r of send to rank r, block r of recv from rank r.
static void comm_alltoall(Comm* c, const float* send, float* recv, size_t n_per_rank) {
    if (c->size == 1) { if (recv != send) memcpy(recv, send, 4 * n_per_rank); return; }
    COMM_TIMED(c, 4.0 * n_per_rank * (c->size - 1),
               MPI_Alltoall(send, (int)n_per_rank, MPI_FLOAT, recv, (int)n_per_rank, MPI_FLOAT, c->mpi));
}
// The context-parallel ring: send to the next rank of the group, receive from the
// previous, one exchange in flight at a time. t0: when it started (for the trace).
typedef struct { MPI_Request req[2]; double t0; } RingXfer;
static void comm_ring_start(Comm* c, const void* send, void* recv, size_t bytes, RingXfer* x) {
    if (bytes > INT_MAX)
        fail("context parallelism: a ring transfer of %zu bytes is more than MPI's %d", bytes, INT_MAX);
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    x->t0 = now_s();
    mpiCheck(MPI_Irecv(recv, (int)bytes, MPI_BYTE, prev, 0, c->mpi, &x->req[0]));
    mpiCheck(MPI_Isend(send, (int)bytes, MPI_BYTE, next, 0, c->mpi, &x->req[1]));
    c->bytes += (double)bytes;
}
static void comm_ring_wait(Comm* c, RingXfer* x) {
    double t0 = now_s();
    mpiCheck(MPI_Waitall(2, x->req, MPI_STATUSES_IGNORE));
    c->seconds += now_s() - t0;  // the part the block's compute did not hide
    watchdog_kick();
}

#endif
