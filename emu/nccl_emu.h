// emu/nccl_emu.h: the NCCL calls comm_nccl.h makes, over MPI, for the CUDA emulator
// (emu/cuda_emu.h includes it). Device buffers are host memory there, so each NCCL
// collective is the non-blocking MPI collective of the same meaning on the communicator's
// ranks; bf16 sums are done in fp32 and rounded once (real NCCL rounds at every step of
// its ring, so its bf16 sums can differ in the last bit). Each call is queued on its
// stream like a kernel (emu/cuda_emu.h) and reads and writes the buffers when the stream
// gets to it, so a collective that is not ordered after the kernels producing its data
// reads stale data, as on a GPU. The operations of one communicator run one at a time in
// the order they were issued, whatever their streams (NCCL's own rule, and why a send that
// waits for its receiver blocks whatever was issued after it on that communicator); a send
// completes when its receive has started (MPI_Issend), as NCCL's does. The sends and
// receives between ncclGroupStart and ncclGroupEnd are one operation of their communicator
// (NCCL fuses a group, so a send and a receive between the same two ranks do not wait for
// each other); only they are emulated inside a group.
//
// ncclCommInitRank has no MPI communicator to start from, only the ncclUniqueId, so the id
// carries the world rank that made it: every member sends that rank its (rank, world rank),
// the maker answers each with the member list, and the members create the communicator
// with MPI_Comm_create_group, which only they take part in (as only they call ncclCommInitRank).
// ncclCommSplit is MPI_Comm_split of the parent's communicator.
//
// What a GPU would do wrong is refused here, where real NCCL would hang or give garbage:
//   - two ranks of one communicator on one device (emu/cuda_emu.h's devices, by their number on
//     the node): "Duplicate GPU detected", ncclInvalidUsage, as NCCL says;
//   - ranks issuing one communicator's collectives in different orders (a deadlock on a GPU,
//     or a sum of unrelated buffers): each collective first all-reduces its signature (kind,
//     count, type, operation), and the run fails naming the communicator and the call's
//     number when the ranks' differ; a receive that gets another size than its send is
//     refused too.
// EMU_NCCL_INIT_HANG=R: world rank R never returns from ncclCommInitRank (a wrong
// NCCL_SOCKET_IFNAME does that), for the watchdog's test.
#include <memory>
#include <vector>

struct ncclComm {
    MPI_Comm comm;
    int rank, size;
    long issued, finished;  // operations issued on it, and finished (they run in issue order)
    int id;                 // this process's number for it, for messages
};
static int emu_nccl_comms;  // communicators this process has made

static const int EMU_NCCL_MAGIC = 0x4e43434c;
static int emu_nccl_ids;                        // ids made by this process
const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    default: return "NCCL error (cuda emulator)";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    int world_rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int v[3] = {EMU_NCCL_MAGIC, world_rank, emu_nccl_ids++};
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, v, sizeof(v));
    return ncclSuccess;
}

// A communicator over MPI communicator mc, refused (as NCCL does) when two of its ranks are on
// one device.
static ncclResult_t emu_nccl_comm_new(ncclComm_t* comm, MPI_Comm mc) {
    ncclComm* c = new ncclComm;
    c->comm = mc, c->issued = c->finished = 0, c->id = emu_nccl_comms++;
    MPI_Comm_rank(mc, &c->rank);
    MPI_Comm_size(mc, &c->size);
    std::vector<int> dev(c->size);
    emu_devices();
    MPI_Allgather(&emu_current, 1, MPI_INT, dev.data(), 1, MPI_INT, mc);
    for (int a = 0; a < c->size; a++)
        for (int b = a + 1; b < c->size; b++)
            if (dev[a] == dev[b]) {
                if (c->rank == a)
                    fprintf(stderr,
                            "NCCL WARN Duplicate GPU detected : rank %d and rank %d both on CUDA device %02x000 "
                            "(cuda emulator)\n", a, b, dev[a]);
                MPI_Comm_free(&mc);
                delete c;
                return ncclInvalidUsage;
            }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int v[3], world_rank;
    memcpy(v, id.internal, sizeof(v));
    if (v[0] != EMU_NCCL_MAGIC || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int maker = v[1], tag = 20000 + v[2] % 10000;  // one tag per id of its maker
    std::vector<int> members(nranks, -1);
    if (world_rank == maker) {
        members[rank] = world_rank;
        for (int i = 0; i < nranks - 1; i++) {
            int msg[2];
            MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] < 0 || msg[0] >= nranks || members[msg[0]] >= 0) return ncclInvalidArgument;
            members[msg[0]] = msg[1];
        }
        for (int r = 0; r < nranks; r++)
            if (r != rank) MPI_Send(members.data(), nranks, MPI_INT, members[r], tag, MPI_COMM_WORLD);
    } else {
        int msg[2] = {rank, world_rank};
        MPI_Send(msg, 2, MPI_INT, maker, tag, MPI_COMM_WORLD);
        MPI_Recv(members.data(), nranks, MPI_INT, maker, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    MPI_Comm mc;
    MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &mc);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    const char* hang = getenv("EMU_NCCL_INIT_HANG");
    if (hang && atoi(hang) == world_rank)
        for (;;) sleep(1);
    return emu_nccl_comm_new(comm, mc);
}
// MPI_Comm_split of the parent's ranks: NCCL_SPLIT_NOCOLOR gives NULL.
ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t* comm, ncclConfig_t* config) {
    MPI_Comm mc;
    MPI_Comm_split(parent->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mc);
    if (mc == MPI_COMM_NULL) {
        *comm = NULL;
        return ncclSuccess;
    }
    return emu_nccl_comm_new(comm, mc);
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    emu_sync_all();
    MPI_Comm_free(&c->comm);
    delete c;
    return ncclSuccess;
}

static size_t emu_nccl_type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: emu_fail("NCCL data type %d is not emulated", (int)t);
    }
}
static int emu_nccl_count(size_t n) {
    if (n > (size_t)INT32_MAX) emu_fail("an NCCL call of %zu elements is beyond the emulator's MPI counts", n);
    return (int)n;
}
// Reductions run in fp32: fp32 data as it is, bf16 widened (and rounded back by the caller).
static std::vector<float> emu_nccl_widen(const void* buf, size_t n, ncclDataType_t t) {
    std::vector<float> f(n);
    if (t == ncclFloat32) memcpy(f.data(), buf, 4 * n);
    else if (t == ncclBfloat16) for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(((const __nv_bfloat16*)buf)[i]);
    else emu_fail("NCCL reductions of data type %d are not emulated", (int)t);
    return f;
}
static void emu_nccl_narrow(void* buf, const float* f, size_t n, ncclDataType_t t) {
    if (t == ncclFloat32) memcpy(buf, f, 4 * n);
    else for (size_t i = 0; i < n; i++) ((__nv_bfloat16*)buf)[i] = __float2bfloat16(f[i]);
}
static MPI_Op emu_nccl_op(ncclRedOp_t op) {
    if (op == ncclSum) return MPI_SUM;
    if (op == ncclMax) return MPI_MAX;
    emu_fail("NCCL reduction %d is not emulated", (int)op);
}

// Queue one operation of communicator c on stream s: when the stream gets to it and c's
// earlier operations have finished, start() posts its MPI requests; it is done when they
// are, and then finish() runs (copies results out).
struct EmuReqs {  // an operation's MPI requests, and for each receive the bytes its send must have
    std::vector<MPI_Request> r;
    std::vector<int> expect;  // -1: not a receive
};
static int emu_nccl_group_depth;  // open ncclGroupStart calls
static MPI_Request* emu_req(EmuReqs* r, int expect = -1) {
    r->r.emplace_back();
    r->expect.push_back(expect);
    return &r->r.back();
}
// what: a collective's description (kind, count, type, operation), which every rank of c
// must issue as its seq-th operation on c (checked before its data moves: the signatures'
// max and min, all-reduced); empty for sends and receives (their sizes are checked instead).
static void emu_nccl_enqueue(cudaStream_t s, ncclComm* c, std::function<void(EmuReqs*)> start,
                             std::function<void()> finish, std::string what = "") {
    if (emu_nccl_group_depth) emu_fail("only ncclSend and ncclRecv are emulated inside an NCCL group");
    long seq = c->issued++;
    if (getenv("EMU_NCCL_LOG")) {  // each operation's communicator and stream (its index in creation order)
        size_t si = 0;
        while (si < emu_stream_list.size() && emu_stream_list[si] != emu_stream(s)) si++;
        fprintf(stderr, "emu nccl: communicator #%d (%d ranks, rank %d) stream %zu operation %ld: %s\n", c->id, c->size,
                c->rank, si, seq + 1, what.empty() ? "sends and receives" : what.c_str());
    }
    auto reqs = std::make_shared<EmuReqs>();
    auto phase = std::make_shared<int>(what.empty() ? 1 : 0);  // 0: signature not posted, 1: data, 2: data posted
    auto sig = std::make_shared<std::vector<long long>>(2, (long long)(std::hash<std::string>{}(what) >> 2));
    (*sig)[1] = -(*sig)[0];
    emu_enqueue_poll(s, [=] {
        if (*phase == 0) {
            if (c->finished != seq) return false;
            MPI_Iallreduce(MPI_IN_PLACE, sig->data(), 2, MPI_LONG_LONG, MPI_MAX, c->comm, emu_req(reqs.get()));
            *phase = -1;
        }
        int flag = 1;
        if (*phase == -1) {
            MPI_Testall((int)reqs->r.size(), reqs->r.data(), &flag, MPI_STATUSES_IGNORE);
            if (!flag) return false;
            reqs->r.clear(), reqs->expect.clear();
            if ((*sig)[0] != -(*sig)[1])
                emu_fail("NCCL communicator #%d (%d ranks, this rank %d): its operation %ld is %s here but not on "
                         "every rank: the ranks issue its collectives in different orders (a deadlock or wrong sums "
                         "on a GPU; docs/GPU.md, streams and ordering)",
                         c->id, c->size, c->rank, seq + 1, what.c_str());
            *phase = 1;
        }
        if (*phase == 1) {
            if (c->finished != seq) return false;
            start(reqs.get());
            *phase = 2;
        }
        std::vector<MPI_Status> st(reqs->r.size());
        if (!st.empty()) MPI_Testall((int)st.size(), reqs->r.data(), &flag, st.data());
        if (!flag) return false;
        for (size_t i = 0; i < st.size(); i++) {
            int got;
            if (reqs->expect[i] < 0) continue;
            MPI_Get_count(&st[i], MPI_BYTE, &got);
            if (got != reqs->expect[i])
                emu_fail("NCCL communicator #%d: an ncclRecv of %d bytes from rank %d got a send of %d: the two ranks "
                         "issue their sends and receives in different orders", c->id, reqs->expect[i],
                         st[i].MPI_SOURCE, got);
        }
        if (finish) finish();
        c->finished++;
        return true;
    });
}
static std::string emu_nccl_what(const char* kind, size_t count, ncclDataType_t t, int op) {
    char b[96];
    snprintf(b, sizeof(b), "%s of %zu elements of NCCL type %d%s%s", kind, count, (int)t, op < 0 ? "" : ", operation ",
             op < 0 ? "" : std::to_string(op).c_str());
    return b;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
    int n = emu_nccl_count(count);
    MPI_Op mop = emu_nccl_op(op);
    auto f = std::make_shared<std::vector<float>>();
    emu_nccl_enqueue(s, c, [=](EmuReqs* r) {
        *f = emu_nccl_widen(send, count, t);
        MPI_Iallreduce(MPI_IN_PLACE, f->data(), n, MPI_FLOAT, mop, c->comm, emu_req(r));
    }, [=] { emu_nccl_narrow(recv, f->data(), count, t); }, emu_nccl_what("ncclAllReduce", count, t, op));
    return ncclSuccess;
}
// send: size * recvcount elements; rank r gets the reduction of block r.
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s) {
    int n = emu_nccl_count(recvcount);
    MPI_Op mop = emu_nccl_op(op);
    auto f = std::make_shared<std::vector<float>>(), res = std::make_shared<std::vector<float>>(recvcount);
    emu_nccl_enqueue(s, c, [=](EmuReqs* r) {
        *f = emu_nccl_widen(send, recvcount * c->size, t);
        MPI_Ireduce_scatter_block(f->data(), res->data(), n, MPI_FLOAT, mop, c->comm, emu_req(r));
    }, [=] { emu_nccl_narrow(recv, res->data(), recvcount, t); }, emu_nccl_what("ncclReduceScatter", recvcount, t, op));
    return ncclSuccess;
}
// recv: the size blocks of sendcount elements in rank order; send may be recv's own block.
ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t s) {
    size_t bytes = sendcount * emu_nccl_type_bytes(t);
    int n = emu_nccl_count(bytes);
    auto mine = std::make_shared<std::vector<char>>();
    emu_nccl_enqueue(s, c, [=](EmuReqs* r) {
        mine->assign((const char*)send, (const char*)send + bytes);
        MPI_Iallgather(mine->data(), n, MPI_BYTE, recv, n, MPI_BYTE, c->comm, emu_req(r));
    }, nullptr, emu_nccl_what("ncclAllGather", sendcount, t, -1));
    return ncclSuccess;
}
// Point-to-point: each send or receive is an operation of its communicator (inside a group,
// part of the group's operation); a send finishes when its receive has started.
struct EmuP2p { int send; void* buf; int bytes, peer; };
struct EmuGroupPart { ncclComm* c; cudaStream_t s; std::vector<EmuP2p> ops; };  // a group's calls on one communicator
static std::vector<EmuGroupPart> emu_nccl_group;
static void emu_nccl_post(ncclComm* c, const EmuP2p& p, EmuReqs* r) {
    if (p.send) MPI_Issend(p.buf, p.bytes, MPI_BYTE, p.peer, 0, c->comm, emu_req(r));
    else MPI_Irecv(p.buf, p.bytes, MPI_BYTE, p.peer, 0, c->comm, emu_req(r, p.bytes));
}
static ncclResult_t emu_nccl_p2p(int send, void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                                 cudaStream_t s) {
    if (peer < 0 || peer >= c->size) return ncclInvalidArgument;
    EmuP2p p = {send, buf, emu_nccl_count(count * emu_nccl_type_bytes(t)), peer};
    if (emu_nccl_group_depth) {
        for (EmuGroupPart& g : emu_nccl_group)
            if (g.c == c) {
                if (g.s != s) emu_fail("an NCCL group's calls on one communicator on two streams");
                g.ops.push_back(p);
                return ncclSuccess;
            }
        emu_nccl_group.push_back(EmuGroupPart{c, s, {p}});
        return ncclSuccess;
    }
    emu_nccl_enqueue(s, c, [=](EmuReqs* r) { emu_nccl_post(c, p, r); }, nullptr);
    return ncclSuccess;
}
ncclResult_t ncclGroupStart() {
    emu_nccl_group_depth++;
    return ncclSuccess;
}
// The outermost end: each communicator's calls of the group become one operation, their
// receives and sends all posted when its stream gets to it.
ncclResult_t ncclGroupEnd() {
    if (emu_nccl_group_depth <= 0) return ncclInvalidUsage;
    if (--emu_nccl_group_depth) return ncclSuccess;
    for (const EmuGroupPart& g : emu_nccl_group) {
        ncclComm* c = g.c;
        std::vector<EmuP2p> ops = g.ops;
        emu_nccl_enqueue(g.s, c, [=](EmuReqs* r) {
            for (const EmuP2p& p : ops) emu_nccl_post(c, p, r);
        }, nullptr);
    }
    emu_nccl_group.clear();
    return ncclSuccess;
}
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return emu_nccl_p2p(1, (void*)send, count, t, peer, c, s);
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return emu_nccl_p2p(0, recv, count, t, peer, c, s);
}
