// nompi/mpi.h: MPI for a single process, for machines where Open MPI cannot be installed
// (the lent GPU machine reaches no package registry). `make MPI=none ...` puts this folder
// on the include path instead of Open MPI's. The world is one rank: every collective is a
// copy (or nothing, in place), and a send can only go to this rank itself (pp 1 with
// vpp > 1 does that): it is queued and taken by the receive with the same communicator
// and tag. Layouts of several ranks stop at start-up, where the program looks for mpirun.
// Only the calls this project makes are here, static inline: each build uses some of them.
#ifndef NOMPI_MPI_H
#define NOMPI_MPI_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int MPI_Comm;
typedef int MPI_Datatype;  // its size in bytes
typedef int MPI_Op;
typedef int MPI_Info;
typedef int MPI_Request;
typedef struct { int MPI_SOURCE, MPI_TAG, MPI_ERROR; } MPI_Status;

#define MPI_SUCCESS 0
#define MPI_COMM_NULL 0
#define MPI_COMM_WORLD 1
#define MPI_BYTE 1
#define MPI_INT 4
#define MPI_FLOAT 4
#define MPI_DOUBLE 8
#define MPI_UINT64_T 8
#define MPI_SUM 1
#define MPI_MAX 2
#define MPI_MIN 3
#define MPI_INFO_NULL 0
#define MPI_REQUEST_NULL 0
#define MPI_UNDEFINED (-32766)
#define MPI_COMM_TYPE_SHARED 1
#define MPI_TAG_UB 1
#define MPI_MAX_ERROR_STRING 64
#define MPI_BSEND_OVERHEAD 0
#define MPI_STATUS_IGNORE ((MPI_Status*)0)
#define MPI_STATUSES_IGNORE ((MPI_Status*)0)
#define MPI_IN_PLACE ((void*)1)

static inline void nompi_fail(const char* what, int tag) {
    fprintf(stderr, "error: one-process MPI stand-in (nompi/mpi.h): %s (tag %d)\n", what, tag);
    exit(1);
}

static inline int MPI_Init(int* argc, char*** argv) { return MPI_SUCCESS; }
static inline int MPI_Initialized(int* flag) { *flag = 1; return MPI_SUCCESS; }
static inline int MPI_Finalize(void) { return MPI_SUCCESS; }
static inline int MPI_Abort(MPI_Comm c, int code) { exit(code); }
static inline int MPI_Error_string(int code, char* s, int* len) {
    *len = snprintf(s, MPI_MAX_ERROR_STRING, "MPI error %d", code);
    return MPI_SUCCESS;
}
static inline int MPI_Comm_size(MPI_Comm c, int* n) { *n = 1; return MPI_SUCCESS; }
static inline int MPI_Comm_rank(MPI_Comm c, int* r) { *r = 0; return MPI_SUCCESS; }
static int nompi_comms = MPI_COMM_WORLD;  // communicators made so far: each split is a new one
static inline int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm* out) {
    *out = color == MPI_UNDEFINED ? MPI_COMM_NULL : ++nompi_comms;
    return MPI_SUCCESS;
}
static inline int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm* out) {
    return MPI_Comm_split(c, 0, key, out);
}
static inline int MPI_Comm_free(MPI_Comm* c) { *c = MPI_COMM_NULL; return MPI_SUCCESS; }
static inline int MPI_Comm_get_attr(MPI_Comm c, int key, void* value, int* flag) {
    static int tag_ub = 32767;  // the least the MPI standard guarantees
    *(int**)value = &tag_ub;
    *flag = key == MPI_TAG_UB;
    return MPI_SUCCESS;
}
static inline int MPI_Barrier(MPI_Comm c) { return MPI_SUCCESS; }

// Collectives over one rank: the result is this rank's own data.
static inline int nompi_copy(const void* send, void* recv, int count, MPI_Datatype t) {
    if (send != MPI_IN_PLACE && send != recv && count > 0) memmove(recv, send, (size_t)count * t);
    return MPI_SUCCESS;
}
static inline int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    return nompi_copy(s, r, n, t);
}
static inline int MPI_Reduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
    return nompi_copy(s, r, n, t);
}
static inline int MPI_Reduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    return nompi_copy(s, r, n, t);
}
static inline int MPI_Reduce_scatter(const void* s, void* r, const int* counts, MPI_Datatype t, MPI_Op op,
                                     MPI_Comm c) {
    return nompi_copy(s, r, counts[0], t);
}
static inline int MPI_Bcast(void* buf, int n, MPI_Datatype t, int root, MPI_Comm c) { return MPI_SUCCESS; }
static inline int MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) {
    return nompi_copy(s, r, sn, st);
}
static inline int MPI_Gather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root,
                             MPI_Comm c) {
    return nompi_copy(s, r, sn, st);
}
static inline int MPI_Alltoall(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) {
    return nompi_copy(s, r, sn, st);
}
static inline int MPI_Gatherv(const void* s, int sn, MPI_Datatype st, void* r, const int* counts, const int* displs,
                              MPI_Datatype rt, int root, MPI_Comm c) {
    return nompi_copy(s, (char*)r + (size_t)displs[0] * rt, sn, st);
}
static inline int MPI_Allgatherv(const void* s, int sn, MPI_Datatype st, void* r, const int* counts, const int* displs,
                                 MPI_Datatype rt, MPI_Comm c) {
    return nompi_copy(s, (char*)r + (size_t)displs[0] * rt, sn, st);
}
static inline int MPI_Iallgatherv(const void* s, int sn, MPI_Datatype st, void* r, const int* counts,
                                  const int* displs, MPI_Datatype rt, MPI_Comm c, MPI_Request* req) {
    *req = MPI_REQUEST_NULL;
    return nompi_copy(s, (char*)r + (size_t)displs[0] * rt, sn, st);
}

// Messages to this rank itself, oldest first.
typedef struct NompiMsg { MPI_Comm comm; int tag; size_t bytes; struct NompiMsg* next; } NompiMsg;
static NompiMsg* nompi_queue;
static inline int MPI_Send(const void* buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    if (dest != 0) nompi_fail("send to a rank other than 0", tag);
    NompiMsg* m = (NompiMsg*)malloc(sizeof(NompiMsg) + (size_t)n * t);
    if (!m) nompi_fail("out of memory for a message", tag);
    m->comm = c, m->tag = tag, m->bytes = (size_t)n * t, m->next = NULL;
    memcpy(m + 1, buf, m->bytes);
    NompiMsg** end = &nompi_queue;
    while (*end) end = &(*end)->next;
    *end = m;
    return MPI_SUCCESS;
}
static inline int MPI_Bsend(const void* buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    return MPI_Send(buf, n, t, dest, tag, c);
}
static inline int MPI_Isend(const void* buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* req) {
    *req = MPI_REQUEST_NULL;  // complete: the data is copied
    return MPI_Send(buf, n, t, dest, tag, c);
}
static inline int MPI_Recv(void* buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* st) {
    for (NompiMsg** p = &nompi_queue; *p; p = &(*p)->next) {
        NompiMsg* m = *p;
        if (m->comm != c || m->tag != tag) continue;
        if (m->bytes > (size_t)n * t) nompi_fail("message longer than the receive buffer", tag);
        memcpy(buf, m + 1, m->bytes);
        *p = m->next;
        free(m);
        return MPI_SUCCESS;
    }
    nompi_fail("receive with no matching send (it would wait forever)", tag);
    return 1;
}
// A receive posted before its send (MPI_Irecv): kept under its request, and taken from the
// queue by MPI_Wait, when the send (an MPI_Isend to this rank, which completes at once) is
// there. Sends need no request: their data is copied.
typedef struct { int posted; void* buf; int n; MPI_Datatype type; int tag; MPI_Comm comm; } NompiRecv;
#define NOMPI_MAX_RECVS 64
static NompiRecv nompi_recvs[NOMPI_MAX_RECVS + 1];  // by request; 0 is MPI_REQUEST_NULL
static inline int MPI_Irecv(void* buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* req) {
    if (src != 0) nompi_fail("receive from a rank other than 0", tag);
    for (int i = 1; i <= NOMPI_MAX_RECVS; i++) {
        if (nompi_recvs[i].posted) continue;
        NompiRecv* r = &nompi_recvs[i];
        r->posted = 1, r->buf = buf, r->n = n, r->type = t, r->tag = tag, r->comm = c;
        *req = i;
        return MPI_SUCCESS;
    }
    nompi_fail("more receives in flight than the stand-in keeps", tag);
    return 1;
}
static inline int MPI_Wait(MPI_Request* req, MPI_Status* st) {
    if (*req != MPI_REQUEST_NULL) {
        NompiRecv* r = &nompi_recvs[*req];
        r->posted = 0;
        MPI_Recv(r->buf, r->n, r->type, 0, r->tag, r->comm, st);
    }
    *req = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}
static inline int MPI_Waitall(int n, MPI_Request* reqs, MPI_Status* sts) {
    for (int i = 0; i < n; i++) MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
    return MPI_SUCCESS;
}
static inline int MPI_Buffer_attach(void* buf, int size) { return MPI_SUCCESS; }
static inline int MPI_Buffer_detach(void* buf, int* size) { *size = 0; return MPI_SUCCESS; }

#endif
