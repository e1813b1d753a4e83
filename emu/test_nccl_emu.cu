// emu/test_nccl_emu.cu: the emulated NCCL's own checks, under mpirun on the emulator
// (tests/test_gpu_ranks.sh runs it; on a GPU the wrong cases would hang).
//   ./test_nccl_emu split    communicators split from one parent sum over their groups; PASS/FAIL
//   ./test_nccl_emu order    rank 0 issues an all-reduce then an all-gather, the others the other
//                            way round: the run must fail naming the communicator
//   ./test_nccl_emu device   (every rank on the same device) ncclCommInitRank refuses the duplicate
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
static void check(int ok, const char* what) {
    if (ok) n_pass++, printf("PASS %s\n", what);
    else n_fail++, printf("FAIL %s\n", what);
}

static ncclComm_t world_comm(int rank, int world, ncclResult_t* r) {
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c = NULL;
    *r = ncclCommInitRank(&c, world, id, rank);
    return c;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char* mode = argc > 1 ? argv[1] : "split";
    if (strcmp(mode, "device")) cudaSetDevice(rank);  // a device per rank (EMU_DEVICES >= world)
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *x, h[4];
    cudaMalloc(&x, 4 * sizeof(float));
    ncclResult_t r;
    ncclComm_t parent = world_comm(rank, world, &r);
    if (!strcmp(mode, "device")) {
        check(r == ncclInvalidUsage, "two ranks on one device refused by ncclCommInitRank");
    } else if (!strcmp(mode, "order")) {
        float v = 1;
        cudaMemcpy(x, &v, sizeof(float), cudaMemcpyHostToDevice);
        if (rank == 0) ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, parent, s);
        ncclAllGather(x, x, 1, ncclFloat32, parent, s);  // (x has room for 4 ranks)
        if (rank != 0) ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, parent, s);
        cudaStreamSynchronize(s);
        check(0, "collectives in different orders were not refused");
    } else {
        // even and odd ranks: two groups; each sums its world ranks
        ncclComm_t half = NULL, none = NULL;
        check(ncclCommSplit(parent, rank % 2, rank, &half, NULL) == ncclSuccess, "ncclCommSplit by parity");
        check(ncclCommSplit(parent, rank == 0 ? 0 : NCCL_SPLIT_NOCOLOR, 0, &none, NULL) == ncclSuccess &&
                  (rank == 0) == (none != NULL), "NCCL_SPLIT_NOCOLOR gives no communicator");
        ncclCommDestroy(parent);  // the children live on without it
        h[0] = (float)rank;
        cudaMemcpy(x, h, sizeof(float), cudaMemcpyHostToDevice);
        ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, half, s);
        cudaStreamSynchronize(s);
        cudaMemcpy(h, x, sizeof(float), cudaMemcpyDeviceToHost);
        float want = 0;
        for (int q = rank % 2; q < world; q += 2) want += q;
        check(h[0] == want, "all-reduce over a split communicator sums its group");
        ncclCommDestroy(half);
        if (none) ncclCommDestroy(none);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    MPI_Finalize();
    return n_fail ? 1 : 0;
}
