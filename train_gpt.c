// train_gpt.c: the CPU reference trainer. fp32, OpenMP, MPI for the layout.
//
// GPT-2 (learned positions, pre-LayerNorm, GELU MLP, causal multi-head attention,
// tied embedding) and LLaMA (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied
// head), trained with AdamW on data, tensor, sequence and pipeline parallel layouts.
// It is the oracle every other path is checked against.
//
// Reading order: main() -> model_init() -> train_loop() / train_step() (runtime/train.h) ->
// run_schedule() (parallel/pipeline.h) -> chunk_forward()/chunk_backward() ->
// layer_forward()/layer_backward_input()/layer_backward_weight() (model/model.h) -> the op_*
// operations here -> backend/cpu/kernels_cpu.h. All of that but the operations, memory and main
// is shared with the GPU build. Every communication point is marked "comm:".
#include "layout/activations.h"
#include "layout/args.h"
#include "layout/grid.h"
#include "layout/params.h"
#include "layout/schedule.h"
#include "data/data.h"
#include "backend/cpu/comm.h"
#include "backend/cpu/memory.h"
#include "backend/cpu/ops.h"
#include "model/model.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero3.h"
#include "planner/planner.h"
#include "runtime/ckpt.h"
#include "runtime/llmc.h"
#include "runtime/metrics.h"
#include "runtime/run.h"
#include "runtime/train.h"
// ----------------------------------------------------------------------------
// What this build supplies beside backend/cpu/ (over parallel/ and runtime/): the ring's and the
// schedule ops' trace (runtime/metrics.h), the step's batch, the activations' allocation, the
// weights' initialization, checkpoints, and main.

static void model_init(Model* m, Args* a, Metrics* met) {
    model_init_layout(m, a, met);  // runtime/train.h
    m->be.reference = a->kernels_ref;
    model_init_params(m);
    model_init_schedule(m);        // the op list, then activations sized by it
}

// A tier that could not be made (backend/cpu/offload.h tier_map) ends the run with one error line,
// the lowest such rank's; every rank exits together.
static void offload_check(void) {
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

// ----------------------------------------------------------------------------

#ifndef TESTING
int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan")) return stdout_exit_code(plan_main(argc, argv));
    wait_policy_passive(argv);  // before any OpenMP region: re-executes once with OMP_WAIT_POLICY=passive
    {
        static Args pre;  // flags first: what this build cannot do is refused before mpirun starts ranks
        parse_args(&pre, argc, argv);
        if (flag_given(&pre, "--comm") && !pre.comm_mpi)
            fail("--comm nccl: the CPU build communicates over MPI; NCCL is the GPU build's (--comm mpi, or leave "
                 "it out)");
        if (pre.grad_reduce_bf16) fail("--grad-reduce bf16: the CPU build reduces its fp32 gradients in fp32");
    }
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    ModelConfig* c = &a->cfg;
    int world = run.world, rank = run.rank;
    // each sampled token is a forward of the whole window: 200 of them at gpt2-124m took 45 s on 2 cores
    if (!flag_given(a, "--sample-len") && config_num_params(c) > 50e6) a->sample_len = 32, a->sample_note = 1;
    char kernels[128];  // the start-up table's row
    if (a->kernels_ref) snprintf(kernels, sizeof(kernels), "ref: plain fp32 loops (backend/cpu/reference.h; slow)");
    else snprintf(kernels, sizeof(kernels), "fast: %s, packed GEMM (backend/cpu/kernels_cpu.h)", simd_name());
    a->kernels_note = kernels;
    // Peak for MFU: --peak-tflops, else this machine's cores at the measured FMA rate,
    // shared by the ranks on it (every rank of a CPU run is one share of the machine).
    double peak = a->peak_tflops * 1e12, core = rank == 0 ? measure_core_peak_flops() : 0;
    MPI_Bcast(&core, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char* peak_src = "--peak-tflops";
    if (!peak) peak = core * cores / world, peak_src = "measured fp32 FMA peak x cores / ranks";
    Metrics met;
    metrics_init(&met, a, rank, world, peak, peak_src);
    Model m;
    model_init(&m, a, &met);
    offload_check();
    int start_step = weights_load(&m);
    if (rank == 0) print_startup(&m.L, &m.P, c, a, &run.train, &run.val, &met, m.n_micro, start_step);
    size_t act_bytes = m.scratch_bytes;
    double act_tier_bytes = 0;  // --offload activations: the slots beyond the frames
    for (int ch = 0; ch < m.L.vpp; ch++) {
        Chunk* k = &m.chunks[ch];
        act_bytes += k->slot_bytes * k->n_frames + k->wg.bytes * k->wg.n + k->heads.bytes * k->heads.n;
        if (k->tier) act_tier_bytes += (double)k->slot_bytes * k->n_slots;
    }
    // the planner's view of this machine: ranks time-share the cores, each with cores/world threads
    metrics_predict(&met, c, "cpu", core * (cores / world > 1 ? cores / world : 1), (int)cores, &m.P,
                    m.opt_hi - m.opt_lo, act_bytes / sizeof(float), 4, act_tier_bytes);

    int code = train_loop(&m, &run, &met, start_step);  // 0, or 128 + a stop signal, or 1: every step skipped
    if (code) {
        MPI_Finalize();
        return code;
    }
    weights_export(&m);
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    MPI_Finalize();
    return stdout_exit_code(0);
}
#endif
