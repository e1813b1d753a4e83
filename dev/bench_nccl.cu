// dev/bench_nccl.cu: NCCL's bus bandwidth on this machine, for the collectives the trainer
// uses, one GPU per rank (dev/multi_gpu_check.sh runs it under mpirun). For each operation
// and size: 3 warm-up calls, then ITERS timed by CUDA events on a non-blocking stream, the
// slowest rank's mean time. Bus bandwidth as nccl-tests defines it (its doc/PERFORMANCE.md):
// the bytes each rank's link carries per second, comparable with the link's figure whatever
// the rank count: algbw = S / t (S the buffer each rank holds: the all-reduce's, the
// all-gather's output, the reduce-scatter's input), busbw = algbw x 2(n-1)/n (all-reduce),
// x (n-1)/n (all-gather, reduce-scatter), x 1 (send/recv between rank pairs 2i, 2i+1).
//
//   mpirun -np 8 ./bench_nccl [MAX_MIB]      prints "op bytes time_us algbw_GBps busbw_GBps" rows
// On the CUDA emulator (make bench_nccl_emu) it runs the same calls over MPI: the plumbing, not a speed.
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "error: %s: %s\n", #call, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
    fprintf(stderr, "error: %s: %s\n", #call, ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND_RECV, N_OPS };
static const char* OP_NAMES[N_OPS] = {"all_reduce", "all_gather", "reduce_scatter", "send_recv"};

// One call of op over `bytes` (a multiple of 4 * n) of fp32 data.
static void run_op(int op, float* buf, float* out, size_t bytes, int rank, int n, ncclComm_t c, cudaStream_t s) {
    size_t count = bytes / 4;
    if (op == ALL_REDUCE) NK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c, s));
    if (op == ALL_GATHER) NK(ncclAllGather(buf, out, count / n, ncclFloat32, c, s));
    if (op == REDUCE_SCATTER) NK(ncclReduceScatter(buf, out, count / n, ncclFloat32, ncclSum, c, s));
    if (op == SEND_RECV && (rank ^ 1) < n) {
        NK(ncclGroupStart());
        NK(ncclSend(buf, count, ncclFloat32, rank ^ 1, c, s));
        NK(ncclRecv(out, count, ncclFloat32, rank ^ 1, c, s));
        NK(ncclGroupEnd());
    }
}
static double bus_factor(int op, int n) {
    if (op == ALL_REDUCE) return 2.0 * (n - 1) / n;
    if (op == SEND_RECV) return 1.0;
    return (double)(n - 1) / n;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, n, local;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    int n_dev = 0;
    CK(cudaGetDeviceCount(&n_dev));
    CK(cudaSetDevice(local % n_dev));
    size_t max_bytes = (size_t)(argc > 1 ? atof(argv[1]) : 1024) * (1 << 20);
    int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 10;
    ncclUniqueId id;
    if (rank == 0) NK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    NK(ncclCommInitRank(&comm, n, id, rank));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *buf, *out;
    CK(cudaMalloc(&buf, max_bytes));
    CK(cudaMalloc(&out, max_bytes));
    CK(cudaMemset(buf, 0, max_bytes));
    CK(cudaDeviceSynchronize());
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    if (rank == 0) printf("# %d ranks, %d iterations; op bytes time_us algbw_GBps busbw_GBps\n", n, iters);
    for (int op = 0; op < N_OPS; op++)
        for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
            size_t b = bytes / (4 * n) * (4 * n);
            for (int i = 0; i < 3; i++) run_op(op, buf, out, b, rank, n, comm, s);
            CK(cudaEventRecord(t0, s));
            for (int i = 0; i < iters; i++) run_op(op, buf, out, b, rank, n, comm, s);
            CK(cudaEventRecord(t1, s));
            CK(cudaEventSynchronize(t1));
            float ms;
            CK(cudaEventElapsedTime(&ms, t0, t1));
            double t = ms / 1e3 / iters, slowest;
            MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            double algbw = b / slowest / 1e9;
            if (rank == 0)
                printf("%s %zu %.1f %.2f %.2f\n", OP_NAMES[op], b, slowest * 1e6, algbw, algbw * bus_factor(op, n));
        }
    NK(ncclCommDestroy(comm));
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
