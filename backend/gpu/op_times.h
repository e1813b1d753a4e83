// backend/gpu/op_times.h: --op-times, the device time of each op family of a step: two CUDA
// events around each op (ops.h's op_* and the optimizer's launches), read when the host next
// waits for the stream (device_sync), added up per family and per step, and printed at the end
// as the mean over the steps after the first two (dev/gpu_check.sh puts it into its CSV and
// results.md). The events cost the host a few microseconds an op and the device nothing it waits
// for; without the flag nothing is recorded.
#ifndef GPU_OP_TIMES_H
#define GPU_OP_TIMES_H

#include "backend/backend.h"
#include "layout/grid.h"

// The seconds every group of the layout has spent in its collectives so far.
static double comm_seconds_all(const Layout* L) {
    double s = 0;
    for (int g = 0; g < N_GROUPS; g++) s += L->group[g].seconds;
    return s;
}
static const char* const OP_FAMILY_NAMES[N_OP_FAMILIES] = {"matmul", "attention_fwd", "attention_bwd", "norm",
                                                            "loss", "optimizer"};

// An op of family f starts on the compute stream (nested ops count for the outermost).
static void op_family_begin(Model* m, int f) {
    OpFamilyTimes* t = &m->be.families;
    if (!m->args->op_times || t->depth++) return;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        t->ev = (cudaEvent_t*)realloc(t->ev, sizeof(cudaEvent_t) * 2 * cap);
        t->family = (int*)realloc(t->family, sizeof(int) * cap);
        if (!t->ev || !t->family) fail("--op-times: out of host memory");
        for (int i = 2 * t->cap; i < 2 * cap; i++) cudaCheck(cudaEventCreate(&t->ev[i]));
        t->cap = cap;
    }
    t->family[t->n] = f;
    cudaCheck(cudaEventRecord(t->ev[2 * t->n], m->be.stream));
}
static void op_family_end(Model* m) {
    OpFamilyTimes* t = &m->be.families;
    if (!m->args->op_times || --t->depth) return;
    cudaCheck(cudaEventRecord(t->ev[2 * t->n + 1], m->be.stream));
    t->n++;
}
// The host has waited for the compute stream: the recorded ops' times are added to the step's.
static void op_families_collect(Model* m) {
    OpFamilyTimes* t = &m->be.families;
    for (int i = 0; i < t->n; i++) {
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]));
        t->step_ms[t->family[i]] += ms;
    }
    t->n = 0;
}
// A batch is loaded: the step's times restart (ops since the last wait, e.g. a sample's, are dropped).
static void op_families_restart(Model* m) {
    memset(m->be.families.step_ms, 0, sizeof(m->be.families.step_ms));
    m->be.families.n = 0;
}
// Step `nth` (1-based, of this run) has ended after ms of wall time and comm_s seconds in NCCL
// (or MPI) calls: its times join the mean from the third on; the last prints the mean.
static void op_families_step(Model* m, int nth, double ms, double comm_s, int last) {
    OpFamilyTimes* t = &m->be.families;
    if (!m->args->op_times) return;
    if (nth > 2) {
        for (int f = 0; f < N_OP_FAMILIES; f++) t->sum_ms[f] += t->step_ms[f];
        t->sum_step_ms += ms, t->sum_comm_ms += comm_s * 1e3, t->steps++;
    }
    if (!last || m->L.rank) return;
    if (!t->steps) {
        printf("gpu: op times: no step after the first two to average (--steps 3 at least)\n");
        return;
    }
    double n = t->steps, timed = 0;
    printf("gpu: op times per step, mean of %d steps (ms; rank 0):", t->steps);
    for (int f = 0; f < N_OP_FAMILIES; f++)
        printf(" %s %.3f", OP_FAMILY_NAMES[f], t->sum_ms[f] / n), timed += t->sum_ms[f];
    printf(" rest %.3f step %.3f communication %.3f\n", (t->sum_step_ms - timed) / n, t->sum_step_ms / n,
           t->sum_comm_ms / n);
    printf("gpu: (rest: the step's wall time less the families': elementwise kernels, copies, collectives on the "
           "compute stream, the host's waits; communication: the collectives' own time, on any stream)\n");
}

#endif
