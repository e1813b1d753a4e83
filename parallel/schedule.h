// schedule.h: pipeline schedules as pure functions, and a simulator over them.
//
// One schedule, two uses: schedule_build() gives the ordered list of operations one
// pipeline stage performs in a step. The runtime (train_gpt.c / .cu) executes that
// list; schedule_simulate() plays the lists of all stages against each other with
// per-op durations, which is how the planner predicts step time and bubble.
//
// Model chunks: the layers are cut into pp*vpp chunks, global chunk g = c*pp + s is
// local chunk c of stage s (Megatron's interleaved assignment; vpp = 1 is the plain
// one-chunk-per-stage pipeline). Chunk 0 holds the embedding, chunk pp*vpp-1 the head.
// Activations of (micro-batch mb, chunk g) go to chunk g+1, their gradients to g-1.
#ifndef SCHEDULE_H
#define SCHEDULE_H

#include "model/config.h"

enum { OP_RECV_FWD, OP_FWD, OP_SEND_FWD, OP_RECV_BWD, OP_BWD, OP_SEND_BWD };

typedef struct {
    int kind;   // OP_*
    int mb;     // micro-batch index 0..n_micro-1
    int chunk;  // local chunk index 0..vpp-1 on this stage
} PipeOp;

static const char* op_name(int k) {
    static const char* names[] = {"recv_fwd", "fwd", "send_fwd", "recv_bwd", "bwd", "send_bwd"};
    return names[k];
}

// Upper bound on the number of ops one stage performs in a step.
static int schedule_max_ops(int n_micro, int vpp) { return 6 * n_micro * vpp; }

// Why a schedule cannot run with these sizes, or NULL when it can.
static const char* schedule_check(int kind, int pp, int vpp, int n_micro) {
    if (pp < 1 || vpp < 1 || n_micro < 1) return "pp, vpp and the number of micro-batches must be >= 1";
    if (kind != SCHED_INTERLEAVED && vpp != 1) return "--vpp > 1 needs --schedule interleaved";
    if (kind == SCHED_INTERLEAVED && n_micro % pp) return "interleaved 1F1B needs the number of micro-batches to be a multiple of pp";
    if (kind == SCHED_1F1B && pp > 1 && n_micro < pp) return "1F1B needs at least pp micro-batches per step (raise --global-batch or lower --micro-batch)";
    return NULL;
}

// Append the compute op (kind OP_FWD / OP_BWD) with its receive before and send after.
static int push_compute(PipeOp* ops, int n, int kind, int mb, int chunk, int stage, int pp, int vpp) {
    int g = chunk * pp + stage, last = pp * vpp - 1;
    if (kind == OP_FWD) {
        if (g > 0) ops[n++] = (PipeOp){OP_RECV_FWD, mb, chunk};
        ops[n++] = (PipeOp){OP_FWD, mb, chunk};
        if (g < last) ops[n++] = (PipeOp){OP_SEND_FWD, mb, chunk};
    } else {
        if (g < last) ops[n++] = (PipeOp){OP_RECV_BWD, mb, chunk};
        ops[n++] = (PipeOp){OP_BWD, mb, chunk};
        if (g > 0) ops[n++] = (PipeOp){OP_SEND_BWD, mb, chunk};
    }
    return n;
}

// Interleaved 1F1B (Narayanan et al. 2021, as in Megatron-LM): the k-th forward of a
// stage runs local chunk (k mod pp*vpp) / pp on micro-batch (k / (pp*vpp))*pp + k mod pp;
// backwards walk the chunks in reverse.
static void interleaved_slot(int k, int pp, int vpp, int forward, int* mb, int* chunk) {
    int in_group = k % (pp * vpp);
    int c = in_group / pp;
    *chunk = forward ? c : vpp - 1 - c;
    *mb = (k / (pp * vpp)) * pp + in_group % pp;
}

// The ordered operations of `stage` for one step of n_micro micro-batches.
// Returns the number of ops written to ops[] (room for schedule_max_ops()).
static int schedule_build(int kind, int stage, int pp, int vpp, int n_micro, PipeOp* ops) {
    int n = 0;
    if (kind == SCHED_GPIPE) {  // all forwards, then all backwards
        for (int mb = 0; mb < n_micro; mb++) n = push_compute(ops, n, OP_FWD, mb, 0, stage, pp, 1);
        for (int mb = 0; mb < n_micro; mb++) n = push_compute(ops, n, OP_BWD, mb, 0, stage, pp, 1);
        return n;
    }
    if (kind == SCHED_1F1B) {  // warm-up forwards, steady one-forward-one-backward, cool-down backwards
        int warmup = pp - stage - 1;
        if (warmup > n_micro) warmup = n_micro;
        int steady = n_micro - warmup;
        for (int i = 0; i < warmup; i++) n = push_compute(ops, n, OP_FWD, i, 0, stage, pp, 1);
        for (int i = 0; i < steady; i++) {
            n = push_compute(ops, n, OP_FWD, warmup + i, 0, stage, pp, 1);
            n = push_compute(ops, n, OP_BWD, i, 0, stage, pp, 1);
        }
        for (int i = steady; i < n_micro; i++) n = push_compute(ops, n, OP_BWD, i, 0, stage, pp, 1);
        return n;
    }
    // interleaved
    int total = n_micro * vpp;
    int warmup = (n_micro == pp) ? total : (pp - stage - 1) * 2 + (vpp - 1) * pp;
    if (warmup > total) warmup = total;
    int steady = total - warmup, mb, chunk;
    for (int k = 0; k < warmup; k++) {
        interleaved_slot(k, pp, vpp, 1, &mb, &chunk);
        n = push_compute(ops, n, OP_FWD, mb, chunk, stage, pp, vpp);
    }
    for (int i = 0; i < steady; i++) {
        interleaved_slot(warmup + i, pp, vpp, 1, &mb, &chunk);
        n = push_compute(ops, n, OP_FWD, mb, chunk, stage, pp, vpp);
        interleaved_slot(i, pp, vpp, 0, &mb, &chunk);
        n = push_compute(ops, n, OP_BWD, mb, chunk, stage, pp, vpp);
    }
    for (int i = steady; i < total; i++) {
        interleaved_slot(i, pp, vpp, 0, &mb, &chunk);
        n = push_compute(ops, n, OP_BWD, mb, chunk, stage, pp, vpp);
    }
    return n;
}

// Largest number of (micro-batch, chunk) activations a stage holds at once: forwards done
// whose backward has not run; of local chunk `chunk` only, or of all (chunk < 0). This sizes
// the activation memory of the stage (the planner) and the slots of each chunk (the runtime).
static int schedule_max_in_flight(const PipeOp* ops, int n_ops, int chunk) {
    int cur = 0, peak = 0;
    for (int i = 0; i < n_ops; i++) {
        if (chunk >= 0 && ops[i].chunk != chunk) continue;
        if (ops[i].kind == OP_FWD && ++cur > peak) peak = cur;
        if (ops[i].kind == OP_BWD) cur--;
    }
    return peak;
}

// Forward-only op list for evaluation: each micro-batch through the local chunks in order.
static int forward_ops(int stage, int pp, int vpp, int n_micro, PipeOp* ops) {
    int n = 0;
    for (int mb = 0; mb < n_micro; mb++)
        for (int c = 0; c < vpp; c++) n = push_compute(ops, n, OP_FWD, mb, c, stage, pp, vpp);
    return n;
}

// Tag of the message chunk g sends for micro-batch mb (dir 0: activations, 1: gradients).
static int p2p_tag(int pp, int vpp, int dir, int mb, int g) { return (mb * pp * vpp + g) * 2 + dir; }

// Play all stages' op lists against each other. Sends never block (the runtime posts
// them non-blocking); a receive waits until its peer has sent and the message has
// travelled t_p2p seconds. t_fwd[g], t_bwd[g]: compute time of global chunk g for one
// micro-batch. Returns the step's makespan, or -1 if the schedules deadlock.
// busy[s] (optional) receives the compute time of stage s.
static double schedule_simulate(int kind, int pp, int vpp, int n_micro,
                                const double* t_fwd, const double* t_bwd, double t_p2p, double* busy) {
    int max_ops = schedule_max_ops(n_micro, vpp), n_chunks = pp * vpp;
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * max_ops * pp);
    int* n_ops = (int*)xcalloc(pp, sizeof(int));
    int* pc = (int*)xcalloc(pp, sizeof(int));
    double* clock = (double*)xcalloc(pp, sizeof(double));
    // arrival[dir][mb][g]: time the message sent by chunk g (dir 0: activation, 1: gradient) arrives; -1 not yet sent
    double* arrival = (double*)xmalloc(sizeof(double) * 2 * n_micro * n_chunks);
    for (int i = 0; i < 2 * n_micro * n_chunks; i++) arrival[i] = -1;
    for (int s = 0; s < pp; s++) {
        n_ops[s] = schedule_build(kind, s, pp, vpp, n_micro, ops + (size_t)s * max_ops);
        if (busy) busy[s] = 0;
    }
    int done = 0, total = 0;
    for (int s = 0; s < pp; s++) total += n_ops[s];
    while (done < total) {
        int progressed = 0;
        for (int s = 0; s < pp; s++) {
            while (pc[s] < n_ops[s]) {
                PipeOp op = ops[(size_t)s * max_ops + pc[s]];
                int g = op.chunk * pp + s;
                if (op.kind == OP_RECV_FWD || op.kind == OP_RECV_BWD) {
                    int dir = op.kind == OP_RECV_BWD, src = dir ? g + 1 : g - 1;
                    double t = arrival[((size_t)dir * n_micro + op.mb) * n_chunks + src];
                    if (t < 0) break;  // peer has not sent yet
                    if (t > clock[s]) clock[s] = t;
                } else if (op.kind == OP_SEND_FWD || op.kind == OP_SEND_BWD) {
                    int dir = op.kind == OP_SEND_BWD;
                    arrival[((size_t)dir * n_micro + op.mb) * n_chunks + g] = clock[s] + t_p2p;
                } else {
                    double t = op.kind == OP_FWD ? t_fwd[g] : t_bwd[g];
                    clock[s] += t;
                    if (busy) busy[s] += t;
                }
                pc[s]++, done++, progressed = 1;
            }
        }
        if (!progressed) break;
    }
    double makespan = -1;
    if (done == total)
        for (int s = 0; s < pp; s++) if (clock[s] > makespan) makespan = clock[s];
    free(ops); free(n_ops); free(pc); free(clock); free(arrival);
    return makespan;
}

// The textbook bubble fraction (Narayanan et al. 2021): (p-1)/m for GPipe and 1F1B,
// (p-1)/(v*m) for interleaved 1F1B. Reported beside the measured one.
static double bubble_formula(int kind, int pp, int vpp, int n_micro) {
    return kind == SCHED_INTERLEAVED ? (double)(pp - 1) / ((double)vpp * n_micro) : (double)(pp - 1) / n_micro;
}

#endif
