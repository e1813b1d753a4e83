// backend/cpu/setup.h: the CPU build's part of the run's set-up and end (runtime/main.h): the
// flags it refuses, this machine's peak, the kernels chosen, the offload tier checked; and the
// whole CPU backend for the main to include (its operations, collectives and memory).
#ifndef CPU_SETUP_H
#define CPU_SETUP_H

#include <unistd.h>  // sysconf
#include "backend/backend.h"
#include "backend/cpu/comm.h"
#include "backend/cpu/memory.h"
#include "backend/cpu/ops.h"

static void backend_check_flags(const Args* a) {
    if (flag_given(a, "--comm") && !a->comm_mpi)
        fail("--comm nccl: the CPU build communicates over MPI; NCCL is the GPU build's (--comm mpi, or leave it out)");
    if (a->grad_reduce_bf16) fail("--grad-reduce bf16: the CPU build reduces its fp32 gradients in fp32");
    // the GPU build's settings: nothing here to set (they were ignored without a word)
    if (a->gelu_unfused)
        fail("--gelu-fusion off: the GPU build's choice (GELU in the fc matmul's cuBLASLt epilogue or its own kernel); "
             "the CPU build has no fused GELU (leave it out)");
    if (a->op_times) fail("--op-times: the GPU build's device time per op family; the CPU build's per-op times are "
                          "--trace FILE's");
    if (strcmp(a->attn_tile, "auto"))
        fail("--attn-tile %s: the GPU build's flash-attention tile; the CPU build has none (leave it out)",
             a->attn_tile);
}

// Peak for MFU: --peak-tflops, else this machine's cores at the measured FMA rate, shared by the
// ranks on it (every rank of a CPU run is one share of the machine). The planner's view: ranks
// time-share the cores, each with cores/world threads.
static void backend_start(DeviceInfo* d, Args* a, int rank, int world) {
    static char kernels[128];  // the start-up table's row
    if (a->kernels_ref) snprintf(kernels, sizeof(kernels), "ref: plain fp32 loops (backend/cpu/reference.h; slow)");
    else snprintf(kernels, sizeof(kernels), "fast: %s, packed GEMM (backend/cpu/kernels_cpu.h)", simd_name());
    a->kernels_note = kernels;
    // each sampled token is a forward of the whole window: 200 of them at gpt2-124m took 45 s on 2 cores
    if (!flag_given(a, "--sample-len") && config_num_params(&a->cfg) > 50e6) a->sample_len = 32, a->sample_note = 1;
    double core = rank == 0 ? measure_core_peak_flops() : 0;
    MPI_Bcast(&core, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    d->peak_flops = a->peak_tflops * 1e12, d->peak_source = "--peak-tflops";
    if (!d->peak_flops) d->peak_flops = core * cores / world, d->peak_source = "measured fp32 FMA peak x cores / ranks";
    d->profile = "cpu";
    d->planner_flops = core * (cores / world > 1 ? cores / world : 1), d->cores = (int)cores;
}

static void backend_init(Model* m) { m->be.reference = m->args->kernels_ref; }

// A tier that could not be made (backend/cpu/offload.h tier_map) ends the run with one error line,
// the lowest such rank's; every rank exits together.
static void backend_init_done(Model* m) {
    int world, first, mine;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &mine);
    first = offload_error[0] ? mine : world;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == world) return;
    if (mine == first) print_error("%s", offload_error);
    MPI_Finalize();
    exit(1);
}

static int weight_bytes_per_param(const Model* m) { return 4; }  // the fp32 weights
// The device is the host; the --offload tier is a file mapping whose pages go back after each use (offload.h).
// With --zero 3 params_host_take's buffer of the whole local weights comes and goes (memory.h) while every other
// buffer is there: the initial weights (parallel/zero3.h zero3_init, after the rest), each checkpoint.
static double host_bytes_of_rank(const Model* m, double device_bytes, double host_bytes) {
    return device_bytes + (m->c.zero == 3 ? sizeof(float) * (double)m->P.n_padded : 0);
}
static void backend_print(const Model* m) {}
static void backend_finish(Model* m) {}

#endif
