// runtime/main.h: main(), written once for both builds (train_gpt.c, train_gpt.cu): the flags,
// the ranks, this rank's device (the build's backend_start), the model, the weights loaded, the
// start-up table, the training loop and the exports. What a build does at each point is
// declared in backend/backend.h ("Set-up and end").
#ifndef MAIN_H
#define MAIN_H

#include "planner/planner.h"
#include "runtime/train.h"

// The model on this rank: the layout and shapes, its host memory checked, the build's state, the weights and
// optimizer state (initialized), then the schedule's op list with the activations sized by it.
static void model_init(Model* m, Args* a, Metrics* met) {
    model_init_layout(m, a, met);
    host_memory_check(m);
    backend_init(m);
    model_init_params(m);
    model_init_schedule(m);
    backend_init_done(m);
}

// The activation bytes this rank holds (the measured figure the planner is compared with), and
// with --offload activations the bytes of the slots beyond the frames, in the tier.
static size_t activation_bytes(const Model* m, double* tier_bytes) {
    size_t bytes = m->scratch_bytes;
    *tier_bytes = 0;
    for (int ch = 0; ch < m->L.vpp; ch++) {
        const Chunk* k = &m->chunks[ch];
        bytes += k->slot_bytes * k->n_frames + k->wg.bytes * k->wg.n + k->heads.bytes * k->heads.n;
        if (k->tier) *tier_bytes += (double)k->slot_bytes * k->n_slots;
    }
    return bytes;
}

// Returns main()'s exit code: train_loop's (0; 128 + a stop signal; 1: every step skipped).
static int train_main(int argc, char** argv) {
    signal(SIGXFSZ, SIG_IGN);  // a write past a file-size limit (ulimit -f) fails (EFBIG): an error line, not a kill
    if (argc > 1 && !strcmp(argv[1], "--plan")) return stdout_exit_code(plan_main(argc, argv));
    wait_policy_passive(argv);  // before any OpenMP region: re-executes once with OMP_WAIT_POLICY=passive
    {
        static Args pre;  // flags first: what this build cannot do is refused before mpirun starts ranks
        parse_args(&pre, argc, argv);
        backend_check_flags(&pre);
    }
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    DeviceInfo dev;
    watchdog_at("at start-up, setting up the device, the layout and the weights: a rank died or hangs there");
    backend_start(&dev, a, run.rank, run.world);
    Metrics met;
    metrics_init(&met, a, run.rank, run.world, dev.peak_flops, dev.peak_source);
    met.profile = dev.profile;  // the planner's model of this device (--pp-split auto, the start-up table)
    Model m;
    model_init(&m, a, &met);
    int start_step = weights_load(&m);
    watchdog_at("at start-up, before the first step (rank 0 prints the start-up table): a rank died or hangs there");
    if (run.rank == 0) {
        print_startup(&m.L, &m.P, &a->cfg, a, &run.train, &run.val, &met, m.n_micro, start_step);
        backend_print(&m);
    }
    double tier_bytes;
    size_t act_bytes = activation_bytes(&m, &tier_bytes);  // counted in floats (the GPU's bf16: bytes / 4)
    metrics_predict(&met, &a->cfg, dev.profile, dev.planner_flops, dev.cores, &m.P, m.opt_hi - m.opt_lo,
                    act_bytes / sizeof(float), weight_bytes_per_param(&m), tier_bytes);
    int code = train_loop(&m, &run, &met, start_step);
    if (code) {
        MPI_Finalize();
        return code;
    }
    if ((code = weights_export(&m))) {  // 128 + a stop that came during an export
        MPI_Finalize();
        return code;
    }
    backend_finish(&m);
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    MPI_Finalize();
    return stdout_exit_code(0);
}

#endif
