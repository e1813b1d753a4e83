// schedule.h: pipeline schedules as pure functions, and a simulator over them.
//
// One schedule, two uses: schedule_build() gives the ordered list of operations one
// pipeline stage performs in a step. The runtime (parallel/pipeline.h) executes that
// list; schedule_simulate() plays the lists of all stages against each other with
// per-op durations, which is how the planner predicts step time and bubble.
//
// Model chunks: the layers are cut into pp*vpp chunks; chunk 0 holds the embedding, chunk
// pp*vpp-1 the head. Activations of (micro-batch mb, chunk g) go to chunk g+1, their
// gradients to g-1: a message when g+1 sits on another stage, a copy on the rank when not.
// Where chunks sit (chunk_global): Megatron's loop, global chunk g = c*pp + s is local chunk
// c of stage s (vpp = 1 is the plain one-chunk-per-stage pipeline), or the V of ZB-V and
// DualPipe-V.
#ifndef SCHEDULE_H
#define SCHEDULE_H

#include "layout/params.h"

// OP_BWD is the whole backward of a chunk, or only its input pass (B) in a list that has
// OP_W ops (the zero-bubble schedules), each the weight pass of one (micro-batch, chunk).
enum { OP_RECV_FWD, OP_FWD, OP_SEND_FWD, OP_RECV_BWD, OP_BWD, OP_SEND_BWD, OP_W };

typedef struct {
    int kind;   // OP_*
    int mb;     // micro-batch index 0..n_micro-1
    int chunk;  // local chunk index 0..vpp-1 on this stage
} PipeOp;

static const char* op_name(int k) {
    static const char* names[] = {"recv_fwd", "fwd", "send_fwd", "recv_bwd", "bwd", "send_bwd", "w"};
    return names[k];
}

// The most (micro-batch, chunk) pairs one step may have (n_micro x pp x vpp): the op lists
// (up to 7 ops per pair of a stage), the message tags (2 per pair) and the simulator's
// arrays grow with it. schedule_check refuses more, so what is sized by it fits an int and
// stays within a few hundred MB.
#define SCHEDULE_MAX_PAIRS (1 << 22)

// Upper bound on the number of ops one stage performs in a step.
static int schedule_max_ops(int n_micro, int vpp) { return 7 * n_micro * vpp; }

// Whether the message chunk g sends (dir 0: activations to g+1, 1: gradients to g-1) travels
// up the ring of stages (to stage+1 mod pp) or down. Loop: activations up (the last stage
// wraps to stage 0 for the next chunk), gradients down. V: the first leg (chunks < pp) runs
// up the stages and the second down. With pp 2 both ways reach the same rank, so the GPU
// build keeps a communicator per way (comm_nccl.h).
static int p2p_up(int kind, int pp, int dir, int g) {
    if (!schedule_is_v(kind)) return dir == 0;
    return dir == 0 ? g + 1 < pp : g - 1 >= pp;
}

// Why a schedule cannot run with these sizes, or NULL when it can.
static const char* schedule_check(int kind, int pp, int vpp, int n_micro) {
    if (pp < 1 || vpp < 1 || n_micro < 1) return "pp, vpp and the number of micro-batches must be >= 1";
    if ((long long)n_micro * pp * vpp > SCHEDULE_MAX_PAIRS)
        return "micro-batches x pp x vpp is more than 2^22 (micro-batch, chunk) pairs per step: lower --global-batch "
               "or raise --micro-batch";
    if (kind == SCHED_ZBV && vpp != 2) return "--schedule zb-v places two chunks per stage in a V: it needs --vpp 2";
    if (kind == SCHED_DUALPIPEV && vpp != 2)
        return "--schedule dualpipe-v places two chunks per stage in a V: it needs --vpp 2";
    if (kind != SCHED_INTERLEAVED && !schedule_is_v(kind) && vpp != 1)
        return "--vpp > 1 needs --schedule interleaved, zb-v or dualpipe-v";
    if (kind == SCHED_DUALPIPEV && n_micro < 2 * pp)
        return "dualpipe-v needs at least 2 x pp micro-batches per step (raise --global-batch or lower --micro-batch)";
    if (kind == SCHED_INTERLEAVED && n_micro % pp)
        return "interleaved 1F1B needs the number of micro-batches to be a multiple of pp";
    if ((kind == SCHED_1F1B || schedule_has_w(kind)) && pp > 1 && n_micro < pp)
        return kind == SCHED_1F1B
                   ? "1F1B needs at least pp micro-batches per step (raise --global-batch or lower --micro-batch)"
                   : "zero-bubble schedules need at least pp micro-batches per step (raise --global-batch or lower "
                     "--micro-batch)";
    return NULL;
}

// Whether chunk g's neighbour g+d (d = +1 or -1) exists and sits on another stage: then
// the two exchange messages; on the same stage the runtime copies.
static int p2p_to(int sched, int pp, int vpp, int g, int d) {
    int h = g + d;
    return h >= 0 && h < pp * vpp && chunk_stage(sched, pp, h) != chunk_stage(sched, pp, g);
}

// Append the compute op (op OP_FWD / OP_BWD / OP_W) with its receive before and send after.
static int push_compute(PipeOp* ops, int n, int sched, int op, int mb, int chunk, int stage, int pp, int vpp) {
    int g = chunk_global(sched, pp, stage, chunk);
    if (op == OP_FWD) {
        if (p2p_to(sched, pp, vpp, g, -1)) ops[n++] = (PipeOp){OP_RECV_FWD, mb, chunk};
        ops[n++] = (PipeOp){OP_FWD, mb, chunk};
        if (p2p_to(sched, pp, vpp, g, +1)) ops[n++] = (PipeOp){OP_SEND_FWD, mb, chunk};
    } else if (op == OP_BWD) {
        if (p2p_to(sched, pp, vpp, g, +1)) ops[n++] = (PipeOp){OP_RECV_BWD, mb, chunk};
        ops[n++] = (PipeOp){OP_BWD, mb, chunk};
        if (p2p_to(sched, pp, vpp, g, -1)) ops[n++] = (PipeOp){OP_SEND_BWD, mb, chunk};
    } else {
        ops[n++] = (PipeOp){OP_W, mb, chunk};
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

// Zero-bubble schedules (Qi et al. 2024). A chunk's backward is split into B, the input
// gradient (on the critical path: sent upstream at once), and W, the weight gradient, which
// only has to run before the step ends; until it does, the (micro-batch, chunk) keeps its
// activations.
//
// ZB-H1 (schedule_build): 1F1B's order of F and B, each W right after its B except that
// stage s runs its W's s micro-batches late. Stage s then holds p activations at most (its
// p-s-1 warm-up forwards, the one in flight, s W's owed): 1F1B's peak, that of its stage 0.
// The W's owed fill the cool-down, where 1F1B's stage s waits for gradients: with
// F = B = W the bubble is (p-1)(F+B-W), a third of 1F1B's.
//
// ZB-V (zbv_play): two chunks per stage in a V (chunk_global); found by playing the whole
// pipeline with the op times t_build (F, B and W of each global chunk; NULL: all equal) and
// free messages. Whenever a stage is free it starts the first ready op of
//   1. B of its oldest micro-batch whose output gradient has arrived, deepest chunk first;
//   2. F of the next micro-batch whose input has arrived, deepest chunk first, if the stage
//      then holds at most 2p chunk activations (p micro-batches of a whole stage: 1F1B's
//      peak again), one kept back for its second chunk so the V can always turn;
//   3. W of the oldest B done;
// else it waits for the next arrival. Played with equal times, the order stalls in the
// steady state once B takes longer than F (a stage runs a W just before the B it waits for
// arrives); played with times in the right proportions it does not, and it stays good when
// the real times differ from them by 20%. The runtime and the planner play it with each
// chunk's FLOPs (chunk_op_flops), so both see the same list whatever the device.
// One play gives every stage's list: into lists[s] (room for schedule_max_ops; NULL: not wanted), n_ops[s] ops.
static void zbv_play(int pp, int n_micro, const double* t_build, PipeOp* const* lists, int* n_ops) {
    int kind = SCHED_ZBV, vpp = 2, n_chunks = 2 * pp, limit = 2 * pp;
    const double INF = 1e300;
    // per global chunk: next micro-batch to run F / B on; when each (mb, g) finished F / B
    int* next_f = (int*)xcalloc(n_chunks, sizeof(int));
    int* next_b = (int*)xcalloc(n_chunks, sizeof(int));
    double* f_end = (double*)xmalloc(sizeof(double) * n_chunks * n_micro);
    double* b_end = (double*)xmalloc(sizeof(double) * n_chunks * n_micro);
    for (int i = 0; i < n_chunks * n_micro; i++) f_end[i] = b_end[i] = INF;
    // per stage: when it is free, activations held, and the W's waiting (FIFO of (mb, local chunk), in B order)
    double* free_at = (double*)xcalloc(pp, sizeof(double));
    int* held = (int*)xcalloc(pp, sizeof(int));
    int* w_mb = (int*)xmalloc(sizeof(int) * pp * vpp *
                              n_micro);  // stage s's FIFO: its vpp x n_micro B's, from s * vpp * n_micro
    int* w_chunk = (int*)xmalloc(sizeof(int) * pp * vpp * n_micro);
    int* w_head = (int*)xcalloc(pp, sizeof(int));
    int* w_tail = (int*)xcalloc(pp, sizeof(int));
    int left = 3 * n_chunks * n_micro;
    for (int k = 0; k < pp; k++) n_ops[k] = 0;
#define F_END(mb, g) f_end[(g) * n_micro + (mb)]
#define B_END(mb, g) b_end[(g) * n_micro + (mb)]
    while (left > 0) {
        int s = 0;  // the stage free first (the lowest on a tie)
        for (int k = 1; k < pp; k++)
            if (free_at[k] < free_at[s]) s = k;
        double t = free_at[s], next = INF;  // next: the earliest input of this stage not yet here
        int op = -1, mb = 0, c = 0;
        for (int ci = vpp - 1; ci >= 0 && op < 0; ci--) {  // 1. B, deepest chunk first
            int g = chunk_global(kind, pp, s, ci), k = next_b[g];
            if (k >= n_micro) continue;
            double ready = F_END(k, g);
            if (g < n_chunks - 1 && B_END(k, g + 1) > ready) ready = B_END(k, g + 1);
            if (ready <= t) op = OP_BWD, mb = k, c = ci;
            else if (ready < next) next = ready;
        }
        for (int ci = vpp - 1; ci >= 0 && op < 0; ci--) {  // 2. F, deepest chunk first
            int g = chunk_global(kind, pp, s, ci), k = next_f[g], later = 0;
            for (int cj = 0; cj < vpp; cj++) later += chunk_global(kind, pp, s, cj) > g;
            if (k >= n_micro || held[s] + 1 + later > limit) continue;
            double ready = g == 0 ? 0 : F_END(k, g - 1);
            if (ready <= t) op = OP_FWD, mb = k, c = ci;
            else if (ready < next) next = ready;
        }
        if (op < 0 && w_head[s] < w_tail[s]) {  // 3. W, oldest first
            int i = s * vpp * n_micro + w_head[s]++;
            op = OP_W, mb = w_mb[i], c = w_chunk[i];
        }
        if (op < 0) {  // idle: until an input arrives or another stage finishes an op (or, when the
                       // others free now are still to choose, just after them)
            int tied = 0;
            for (int k = 0; k < pp; k++) {
                if (free_at[k] > t && free_at[k] < next) next = free_at[k];
                tied |= k != s && free_at[k] == t;
            }
            if (next == INF && tied) next = nextafter(t, INF);
            if (next == INF) fail("internal: the zb-v play of pp %d, %d micro-batches is stuck", pp, n_micro);
            free_at[s] = next;
            continue;
        }
        int g = chunk_global(kind, pp, s, c);
        free_at[s] = t + (t_build ? t_build[(op == OP_FWD ? 0 : op == OP_BWD ? 1 : 2) * n_chunks + g] : 1.0);
        if (op == OP_FWD) F_END(mb, g) = free_at[s], next_f[g]++, held[s]++;
        if (op == OP_BWD) {
            B_END(mb, g) = free_at[s], next_b[g]++;
            int i = s * vpp * n_micro + w_tail[s]++;
            w_mb[i] = mb, w_chunk[i] = c;
        }
        if (op == OP_W) held[s]--;
        if (lists[s]) n_ops[s] = push_compute(lists[s], n_ops[s], kind, op, mb, c, s, pp, vpp);
        left--;
    }
#undef F_END
#undef B_END
    free(next_f);
    free(next_b);
    free(f_end);
    free(b_end);
    free(free_at);
    free(held);
    free(w_mb);
    free(w_chunk);
    free(w_head);
    free(w_tail);
}

// DualPipe-V (DeepSeek-AI 2024, DeepSeek-V3 report section 3.2.1; the V-shaped "cut-in-half"
// of Sea AI Lab as deepseek-ai/DualPipe's dualpipev.py orders it): ZB-V's placement, a fixed
// order in eight phases for stage r of p with m >= 2p micro-batches. Fn / Bn: F / B of local
// chunk n (0: the leg down the stages, 1: the leg back); "full" B runs its W at once (B then
// W), a zero-bubble B queues its W and each W op runs the oldest queued.
//   1. 2(p-r-1) x F0            2. r+1 x (F0 F1)            3. p-r-1 x (B1 W F1), zero-bubble
//   4. m-2p+r+1 x (F0 B1 F1 B0), full backwards             5. p-r-1 x (B1 F1 B0), full
//   6. r+1 x (B1 B0): full, zero-bubble from the middle one 7. p-r-1 x (W B0), zero-bubble
//   8. r+1 x W
// DualPipe runs each "F B" pair of phases 4-5 overlapped (one's compute under the other's
// all-to-all, its F&B); this runtime runs them one after the other. With F = B = W the
// simulator gives every stage p-1 idle chunk ops against the 6m it computes, (p-1)/(6m)
// (bubble_formula; DualPipe's table bounds it by (p-1)(F&B + B + W - 3W) = 2(p-1) ops), and
// 2p+1 chunk activations held (its table's PP + 1 of PP = 2p stages).
typedef struct {
    PipeOp* ops;
    int n, stage, pp, next_f[2], next_b[2];
    int *w_mb, *w_chunk, w_head, w_tail;  // the queued W's, oldest at w_head
} DualPipeV;

static void dpv_f(DualPipeV* d, int c) {
    d->n = push_compute(d->ops, d->n, SCHED_DUALPIPEV, OP_FWD, d->next_f[c]++, c, d->stage, d->pp, 2);
}
static void dpv_b(DualPipeV* d, int c, int zero_bubble) {
    int mb = d->next_b[c]++;
    d->n = push_compute(d->ops, d->n, SCHED_DUALPIPEV, OP_BWD, mb, c, d->stage, d->pp, 2);
    if (!zero_bubble) {
        d->n = push_compute(d->ops, d->n, SCHED_DUALPIPEV, OP_W, mb, c, d->stage, d->pp, 2);
        return;
    }
    d->w_mb[d->w_tail] = mb, d->w_chunk[d->w_tail] = c, d->w_tail++;
}
static void dpv_w(DualPipeV* d) {
    int i = d->w_head++;
    d->n = push_compute(d->ops, d->n, SCHED_DUALPIPEV, OP_W, d->w_mb[i], d->w_chunk[i], d->stage, d->pp, 2);
}

static int dualpipev_build(int stage, int pp, int n_micro, PipeOp* ops) {
    DualPipeV s = {ops, 0, stage, pp, {0, 0}, {0, 0}, NULL, NULL, 0, 0}, *d = &s;
    d->w_mb = (int*)xmalloc(sizeof(int) * 2 * n_micro), d->w_chunk = (int*)xmalloc(sizeof(int) * 2 * n_micro);
    int r = stage, p = pp, m = n_micro;
    for (int i = 0; i < 2 * (p - r - 1); i++) dpv_f(d, 0);
    for (int i = 0; i < r + 1; i++) dpv_f(d, 0), dpv_f(d, 1);
    for (int i = 0; i < p - r - 1; i++) dpv_b(d, 1, 1), dpv_w(d), dpv_f(d, 1);
    for (int i = 0; i < m - 2 * p + r + 1; i++) dpv_f(d, 0), dpv_b(d, 1, 0), dpv_f(d, 1), dpv_b(d, 0, 0);
    for (int i = 0; i < p - r - 1; i++) dpv_b(d, 1, 0), dpv_f(d, 1), dpv_b(d, 0, 0);
    int zb = 0;
    for (int i = 0; i < r + 1; i++) {
        if (i == (r + 1) / 2 && r % 2 == 1) zb = 1;
        dpv_b(d, 1, zb);
        if (i == (r + 1) / 2 && r % 2 == 0) zb = 1;
        dpv_b(d, 0, zb);
    }
    for (int i = 0; i < p - r - 1; i++) dpv_w(d), dpv_b(d, 0, 1);
    while (d->w_head < d->w_tail) dpv_w(d);
    free(d->w_mb), free(d->w_chunk);
    return d->n;
}

// The op times ZB-V's list is built for (zbv_play), the same in the runtime and the
// planner: t[0..n), t[n..2n), t[2n..3n) (n = pp*vpp global chunks) the FLOPs per token of
// each chunk's F, B and W. A layer's matmuls (N parameters) cost 2N in each of F, B (input
// gradients) and W (weight gradients), its attention 4dT forward and 8dT backward (PaLM's
// count, config_flops_per_token); the last chunk adds the head, 2Vd forward and 4Vd in B
// (its weight pass is not deferred).
static void chunk_op_flops(const ModelConfig* c, int pp, int vpp, double* t) {
    int n = pp * vpp, *counts = (int*)xmalloc(sizeof(int) * n);
    double d = c->d_model, head = (double)c->vocab * d;
    double layer_mm = (config_matmul_params(c) - head) / c->n_layer, att = 4.0 * d * c->seq_len;
    chunk_cut(c, pp, vpp, counts);  // the layers of each chunk (--pp-split)
    for (int g = 0; g < n; g++) {
        double layers = counts[g], last = g == n - 1;
        t[g] = layers * (2 * layer_mm + att) + last * 2 * head;
        t[n + g] = layers * (2 * layer_mm + 2 * att) + last * 4 * head;
        t[2 * n + g] = layers * 2 * layer_mm;
    }
    free(counts);
}

// The forwards stage `stage` runs before its first backward in Megatron's interleaved 1F1B (schedules.py
// forward_backward_pipelining_with_interleaving: num_warmup = (pp - rank - 1) * 2 + (vpp - 1) * pp, all m * vpp when
// m == pp), at most the m * vpp it runs; the steady state after it pairs each further forward with a backward.
static int interleaved_warmup(int pp, int vpp, int n_micro, int stage) {
    int total = n_micro * vpp, warmup = n_micro == pp ? total : (pp - stage - 1) * 2 + (vpp - 1) * pp;
    return warmup < total ? warmup : total;
}

// The ordered operations of `stage` for one step of n_micro micro-batches (t_build: the op
// times ZB-V's list is built for, chunk_op_flops, or NULL for equal times; the other
// schedules do not depend on times). Returns the number of ops written to ops[] (room for
// schedule_max_ops()).
static int schedule_build(int kind, int stage, int pp, int vpp, int n_micro, const double* t_build, PipeOp* ops) {
    if (kind == SCHED_ZBV) {  // the play of every stage, this one's list kept
        PipeOp** lists = (PipeOp**)xcalloc(pp, sizeof(PipeOp*));
        int* n_ops = (int*)xmalloc(sizeof(int) * pp), n;
        lists[stage] = ops;
        zbv_play(pp, n_micro, t_build, lists, n_ops);
        n = n_ops[stage];
        free(lists), free(n_ops);
        return n;
    }
    if (kind == SCHED_DUALPIPEV) return dualpipev_build(stage, pp, n_micro, ops);
    int n = 0;
    if (kind == SCHED_GPIPE) {  // all forwards, then all backwards
        for (int mb = 0; mb < n_micro; mb++) n = push_compute(ops, n, kind, OP_FWD, mb, 0, stage, pp, 1);
        for (int mb = 0; mb < n_micro; mb++) n = push_compute(ops, n, kind, OP_BWD, mb, 0, stage, pp, 1);
        return n;
    }
    if (kind == SCHED_1F1B) {  // warm-up forwards, steady one-forward-one-backward, cool-down backwards
        int warmup = pp - stage - 1;
        if (warmup > n_micro) warmup = n_micro;
        int steady = n_micro - warmup;
        for (int i = 0; i < warmup; i++) n = push_compute(ops, n, kind, OP_FWD, i, 0, stage, pp, 1);
        for (int i = 0; i < steady; i++) {
            n = push_compute(ops, n, kind, OP_FWD, warmup + i, 0, stage, pp, 1);
            n = push_compute(ops, n, kind, OP_BWD, i, 0, stage, pp, 1);
        }
        for (int i = steady; i < n_micro; i++) n = push_compute(ops, n, kind, OP_BWD, i, 0, stage, pp, 1);
        return n;
    }
    if (kind == SCHED_ZBH1) {  // 1F1B's order, W's `stage` micro-batches late
        int warmup = pp - stage - 1, delay = stage, n_w = 0;
        if (warmup > n_micro) warmup = n_micro;
        int steady = n_micro - warmup;
        for (int i = 0; i < warmup; i++) n = push_compute(ops, n, kind, OP_FWD, i, 0, stage, pp, 1);
        for (int i = 0; i < n_micro; i++) {
            if (i < steady) n = push_compute(ops, n, kind, OP_FWD, warmup + i, 0, stage, pp, 1);
            n = push_compute(ops, n, kind, OP_BWD, i, 0, stage, pp, 1);
            if (i >= delay) n = push_compute(ops, n, kind, OP_W, n_w++, 0, stage, pp, 1);
        }
        while (n_w < n_micro) n = push_compute(ops, n, kind, OP_W, n_w++, 0, stage, pp, 1);
        return n;
    }
    // interleaved
    int total = n_micro * vpp, warmup = interleaved_warmup(pp, vpp, n_micro, stage);
    int steady = total - warmup, mb, chunk;
    for (int k = 0; k < warmup; k++) {
        interleaved_slot(k, pp, vpp, 1, &mb, &chunk);
        n = push_compute(ops, n, kind, OP_FWD, mb, chunk, stage, pp, vpp);
    }
    for (int i = 0; i < steady; i++) {
        interleaved_slot(warmup + i, pp, vpp, 1, &mb, &chunk);
        n = push_compute(ops, n, kind, OP_FWD, mb, chunk, stage, pp, vpp);
        interleaved_slot(i, pp, vpp, 0, &mb, &chunk);
        n = push_compute(ops, n, kind, OP_BWD, mb, chunk, stage, pp, vpp);
    }
    for (int i = steady; i < total; i++) {
        interleaved_slot(i, pp, vpp, 0, &mb, &chunk);
        n = push_compute(ops, n, kind, OP_BWD, mb, chunk, stage, pp, vpp);
    }
    return n;
}

// Every stage's list, into lists[s] (room for schedule_max_ops each), n_ops[s] ops: ZB-V's from one play.
static void schedule_build_all(int kind, int pp, int vpp, int n_micro, const double* t_build, PipeOp* const* lists,
                               int* n_ops) {
    if (kind == SCHED_ZBV) zbv_play(pp, n_micro, t_build, lists, n_ops);
    else
        for (int s = 0; s < pp; s++) n_ops[s] = schedule_build(kind, s, pp, vpp, n_micro, t_build, lists[s]);
}

// Whether a list has W ops (then a (micro-batch, chunk) holds its activations until its W).
static int ops_have_w(const PipeOp* ops, int n_ops) {
    for (int i = 0; i < n_ops; i++)
        if (ops[i].kind == OP_W) return 1;
    return 0;
}

// Largest number of (micro-batch, chunk) pairs of a stage between an op of kind `from` and
// their op of kind `to`, of local chunk `chunk` only or of all (chunk < 0).
static int schedule_max_between(const PipeOp* ops, int n_ops, int chunk, int from, int to) {
    int cur = 0, peak = 0;
    for (int i = 0; i < n_ops; i++) {
        if (chunk >= 0 && ops[i].chunk != chunk) continue;
        if (ops[i].kind == from && ++cur > peak) peak = cur;
        if (ops[i].kind == to) cur--;
    }
    return peak;
}

// Largest sum of weight[chunk] over the (micro-batch, chunk) pairs a stage holds at once, counted
// as schedule_max_in_flight counts them: with each local chunk's layers as its weight, the most
// layers' activations the stage holds (the planner's framework memory where its chunks differ).
static long schedule_max_in_flight_weighted(const PipeOp* ops, int n_ops, const int* weight) {
    int to = ops_have_w(ops, n_ops) ? OP_W : OP_BWD;
    long cur = 0, peak = 0;
    for (int i = 0; i < n_ops; i++) {
        if (ops[i].kind == OP_FWD && (cur += weight[ops[i].chunk]) > peak) peak = cur;
        if (ops[i].kind == to) cur -= weight[ops[i].chunk];
    }
    return peak;
}

// Largest number of (micro-batch, chunk) activations a stage holds at once: forwards done
// whose backward (its W, in a list with W's) has not run. This sizes the activation memory of
// the stage (the planner) and the slots of each chunk (the runtime).
static int schedule_max_in_flight(const PipeOp* ops, int n_ops, int chunk) {
    return schedule_max_between(ops, n_ops, chunk, OP_FWD, ops_have_w(ops, n_ops) ? OP_W : OP_BWD);
}

// Largest number of W's a stage owes at once (its B has run, its W not yet), of local chunk
// `chunk` only or of all (chunk < 0): each keeps its layers' weight-pass inputs (model.h's
// WeightGradIn). 0 for a list without W ops (its backward runs both passes at once).
static int schedule_max_w_owed(const PipeOp* ops, int n_ops, int chunk) {
    return ops_have_w(ops, n_ops) ? schedule_max_between(ops, n_ops, chunk, OP_BWD, OP_W) : 0;
}

// Where in each stage's list the message (dir, mb, sending global chunk g) is received:
// at[(dir * n_micro + mb) * n_chunks + g] (-1: not in this list).
static void recv_index(int kind, int pp, int vpp, int n_micro, int stage, const PipeOp* ops, int n_ops, int* at) {
    int nc = pp * vpp;
    for (int i = 0; i < 2 * n_micro * nc; i++) at[i] = -1;
    for (int k = 0; k < n_ops; k++) {
        if (ops[k].kind != OP_RECV_FWD && ops[k].kind != OP_RECV_BWD) continue;
        int dir = ops[k].kind == OP_RECV_BWD, g = chunk_global(kind, pp, stage, ops[k].chunk) + (dir ? 1 : -1);
        at[((size_t)dir * n_micro + ops[k].mb) * nc + g] = k;
    }
}

// The activation slots local chunk `chunk` of `stage` needs so that reusing one never waits
// on a peer (schedule_slots for DualPipe-V). A slot's sends must be done before another
// micro-batch takes it (the runtime waits for them), and a send is done only once the peer
// has received it: a wait there, before this stage posts a receive the peer itself waits for,
// is a cycle (DualPipe-V's full backward frees its slot right after sending its gradient; on
// pp 2 both stages wait so at their fourth forward). So a (micro-batch, chunk) holds its slot
// from its first op to the later of its last op and, for each message it sends, the receive
// here of the first message the peer sends after receiving it (then it has). lists[pp]: every
// stage's list. Returns the most held at once; free_after ([n_micro]): the op index after
// which each micro-batch's slot may be taken again (n_ops: not this step).
static int slots_past_sends(int kind, int pp, int vpp, int n_micro, int stage, int chunk, PipeOp* const* lists,
                            const int* n_ops, int* free_after) {
    int nc = pp * vpp, n = n_ops[stage], peak = 0;
    const PipeOp* ops = lists[stage];
    int* at = (int*)xmalloc(sizeof(int) * 2 * n_micro * nc * 3);  // receives here, on the stage below, above
    int* first = (int*)xmalloc(sizeof(int) * n_micro);
    int* last = (int*)xmalloc(sizeof(int) * n_micro);
    int peer_of[3] = {stage, (stage - 1 + pp) % pp, (stage + 1) % pp};
    for (int i = 0; i < 3; i++)
        recv_index(kind, pp, vpp, n_micro, peer_of[i], lists[peer_of[i]], n_ops[peer_of[i]], at + i * 2 * n_micro * nc);
    for (int mb = 0; mb < n_micro; mb++) first[mb] = n, last[mb] = -1;
    for (int k = 0; k < n; k++) {
        if (ops[k].chunk != chunk) continue;
        int mb = ops[k].mb, end = k;
        if (first[mb] == n) first[mb] = k;
        if (ops[k].kind == OP_SEND_FWD || ops[k].kind == OP_SEND_BWD) {
            int dir = ops[k].kind == OP_SEND_BWD, g = chunk_global(kind, pp, stage, chunk);
            int q = chunk_stage(kind, pp, dir ? g - 1 : g + 1), iq = q == peer_of[1] ? 1 : 2;
            const PipeOp* qops = lists[q];
            end = n;
            for (int j = at[(iq * 2 * n_micro + dir * n_micro + mb) * nc + g] + 1; j < n_ops[q]; j++) {
                if (qops[j].kind != OP_SEND_FWD && qops[j].kind != OP_SEND_BWD) continue;
                int d2 = qops[j].kind == OP_SEND_BWD, g2 = chunk_global(kind, pp, q, qops[j].chunk);
                if (chunk_stage(kind, pp, d2 ? g2 - 1 : g2 + 1) != stage) continue;
                end = at[((size_t)d2 * n_micro + qops[j].mb) * nc + g2];
                break;
            }
        }
        if (end > last[mb]) last[mb] = end;
    }
    int* change = (int*)xcalloc(n + 2, sizeof(int));  // held at op k: taken at or before it, free only after it
    for (int mb = 0; mb < n_micro; mb++)
        if (last[mb] >= 0) change[first[mb]]++, change[last[mb] + 1]--;
    for (int k = 0, held = 0; k <= n; k++)
        if ((held += change[k]) > peak) peak = held;
    free(change);
    for (int mb = 0; mb < n_micro; mb++) free_after[mb] = last[mb];
    free(at), free(first), free(last);
    return peak;
}

// The activation slots of local chunk `chunk` of `stage` (at least 1: sampling runs a
// micro-batch through every chunk), and in free_after (optional, [n_micro]) the op index of
// the stage's list after which each micro-batch's slot may be taken by another (-1: at once).
// The schedules whose slot is held until the peer has its messages (1F1B's and the others'
// layouts tests run them) need the most (micro-batch, chunk) pairs in flight; DualPipe-V
// frees a slot right after its gradient leaves and holds it past its sends (slots_past_sends),
// 2 or 3 slots more a chunk. lists[pp]: every stage's list (schedule_build).
static int schedule_slots(int kind, int pp, int vpp, int n_micro, int stage, int chunk, PipeOp* const* lists,
                          const int* n_ops, int* free_after) {
    int slots;
    if (kind == SCHED_DUALPIPEV) {
        int* after = (int*)xmalloc(sizeof(int) * n_micro);
        slots = slots_past_sends(kind, pp, vpp, n_micro, stage, chunk, lists, n_ops, after);
        if (free_after) memcpy(free_after, after, sizeof(int) * n_micro);
        free(after);
    } else {
        slots = schedule_max_in_flight(lists[stage], n_ops[stage], chunk);
        if (free_after)
            for (int mb = 0; mb < n_micro; mb++) free_after[mb] = -1;
    }
    return slots < 1 ? 1 : slots;
}

// Forward-only op list for evaluation: each micro-batch through the local chunks in order
// (in both placements a stage's local chunks are in model order).
static int forward_ops(int kind, int stage, int pp, int vpp, int n_micro, PipeOp* ops) {
    int n = 0;
    for (int mb = 0; mb < n_micro; mb++)
        for (int c = 0; c < vpp; c++) n = push_compute(ops, n, kind, OP_FWD, mb, c, stage, pp, vpp);
    return n;
}

// Tag of the message chunk g sends for micro-batch mb (dir 0: activations, 1: gradients).
static int p2p_tag(int pp, int vpp, int dir, int mb, int g) { return (mb * pp * vpp + g) * 2 + dir; }

// Whether a send holds its sender until the message has travelled (the receiver's readiness is not waited for):
// never (this trainer's runtime posts its sends non-blocking), in the warm-up and cool-down (the sends of the
// forwards before a stage's first backward and of the backwards after its last forward: Megatron-core's
// overlap_p2p_comm, where the steady state's sends run under the next op), or always (a blocking exchange).
enum { SENDS_ASYNC, SENDS_WAIT_ENDS, SENDS_WAIT };

// Play all stages' op lists against each other. A send holds its stage t_p2p seconds where
// send_wait (SENDS_*) says, else none; a receive waits until its peer has sent and the message has
// travelled t_p2p seconds; a hand-over between chunks of one stage follows the list's
// order. Per global chunk g and micro-batch: t_fwd[g] the forward, t_bwd[g] the input
// pass (B), t_w[g] the weight pass (W; NULL: none); an OP_BWD of a list without W ops
// runs both passes. t_build: the times the lists are built for (schedule_build). Returns
// the step's makespan, or -1 if the schedules deadlock. busy[s] (optional) receives the
// compute time of stage s. mb_stride 0: every micro-batch takes the same times; n_chunks:
// micro-batch mb's times are t_fwd[mb * n_chunks + g] and so on (documents make them differ:
// dev/sim_wlb.c).
static double schedule_simulate_mb(int kind, int pp, int vpp, int n_micro, const double* t_build, const double* t_fwd,
                                   const double* t_bwd, const double* t_w, int mb_stride, double t_p2p, int send_wait,
                                   double* busy) {
    int max_ops = schedule_max_ops(n_micro, vpp), n_chunks = pp * vpp, split = schedule_has_w(kind);
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * max_ops * pp);
    int* n_ops = (int*)xcalloc(pp, sizeof(int));
    int* pc = (int*)xcalloc(pp, sizeof(int));
    double* clock = (double*)xcalloc(pp, sizeof(double));
    // arrival[dir][mb][g]: time the message sent by chunk g (dir 0: activation, 1: gradient) arrives; -1 not yet sent
    double* arrival = (double*)xmalloc(sizeof(double) * 2 * n_micro * n_chunks);
    for (int i = 0; i < 2 * n_micro * n_chunks; i++) arrival[i] = -1;
    PipeOp** lists = (PipeOp**)xmalloc(sizeof(PipeOp*) * pp);
    for (int s = 0; s < pp; s++) {
        lists[s] = ops + (size_t)s * max_ops;
        if (busy) busy[s] = 0;
    }
    schedule_build_all(kind, pp, vpp, n_micro, t_build, lists, n_ops);
    free(lists);
    int done = 0, total = 0;
    for (int s = 0; s < pp; s++) total += n_ops[s];
    // per stage: the index of its first backward and of its last forward (the warm-up ends at the one, the
    // cool-down starts after the other)
    int* first_bwd = (int*)xmalloc(sizeof(int) * pp);
    int* last_fwd = (int*)xmalloc(sizeof(int) * pp);
    for (int s = 0; s < pp; s++) {
        first_bwd[s] = n_ops[s], last_fwd[s] = -1;
        for (int i = 0; i < n_ops[s]; i++) {
            int kind_i = ops[(size_t)s * max_ops + i].kind;
            if (kind_i == OP_BWD && first_bwd[s] == n_ops[s]) first_bwd[s] = i;
            if (kind_i == OP_FWD) last_fwd[s] = i;
        }
    }
    while (done < total) {
        int progressed = 0;
        for (int s = 0; s < pp; s++) {
            while (pc[s] < n_ops[s]) {
                PipeOp op = ops[(size_t)s * max_ops + pc[s]];
                int g = chunk_global(kind, pp, s, op.chunk);
                if (op.kind == OP_RECV_FWD || op.kind == OP_RECV_BWD) {
                    int dir = op.kind == OP_RECV_BWD, src = dir ? g + 1 : g - 1;
                    double t = arrival[((size_t)dir * n_micro + op.mb) * n_chunks + src];
                    if (t < 0) break;  // peer has not sent yet
                    if (t > clock[s]) clock[s] = t;
                } else if (op.kind == OP_SEND_FWD || op.kind == OP_SEND_BWD) {
                    int dir = op.kind == OP_SEND_BWD;
                    arrival[((size_t)dir * n_micro + op.mb) * n_chunks + g] = clock[s] + t_p2p;
                    int at_end = dir ? pc[s] > last_fwd[s] : pc[s] < first_bwd[s];
                    if (send_wait == SENDS_WAIT || (send_wait == SENDS_WAIT_ENDS && at_end)) clock[s] += t_p2p;
                } else {
                    int at = op.mb * mb_stride + g;
                    double w = t_w ? t_w[at] : 0;
                    double t = op.kind == OP_FWD ? t_fwd[at] : op.kind == OP_W ? w : split ? t_bwd[at] : t_bwd[at] + w;
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
    free(ops); free(n_ops); free(pc); free(clock); free(arrival); free(first_bwd); free(last_fwd);
    return makespan;
}

// schedule_simulate_mb with the same times for every micro-batch.
static double schedule_simulate(int kind, int pp, int vpp, int n_micro, const double* t_build, const double* t_fwd,
                                const double* t_bwd, const double* t_w, double t_p2p, int send_wait, double* busy) {
    return schedule_simulate_mb(kind, pp, vpp, n_micro, t_build, t_fwd, t_bwd, t_w, 0, t_p2p, send_wait, busy);
}

// The pipeline bubble, the one definition behind every "bubble" this program prints (the
// step line, --log, the start-up table, the planner, docs/OUTPUT.md): the share of the
// schedule's wall time a stage waits for its pipeline peers, (wall - busy) / wall, in [0, 1),
// busy being all else (its ops, their tp, cp and dp collectives included: runtime/metrics.h
// metrics_step_end measures the waits in the pipeline's receives and sends). It is
// the fraction of the step a rank is idle, the "bubble overhead" of GPipe (Huang et al.
// 2019) and the "bubble rate" of the zero-bubble paper (Qi et al. 2024); Narayanan et al.
// 2021's (p-1)/m is idle / busy instead (it can exceed 1), which is b / (1 - b) of this one.
static double bubble_fraction(double wall_s, double busy_s) {
    if (!(wall_s > 0) || busy_s >= wall_s) return 0;
    return (wall_s - busy_s) / wall_s;
}

// The textbook bubble (bubble_fraction of a stage with equal op times): p-1 idle op slots of
// the m (GPipe, 1F1B), v*m (interleaved 1F1B), 3m (ZB-H1 at F = B = W: idle (p-1)(F+B-W)
// against m(F+B+W) busy) or 6m (DualPipe-V: p-1 idle chunk ops of the 6m a stage computes,
// dualpipev_build) busy ones: (p-1) / (m + p-1), (p-1) / (v*m + p-1), ...; 0 for ZB-V (Qi et
// al. 2024). Reported beside the measured one.
static double bubble_formula(int kind, int pp, int vpp, int n_micro) {
    double idle = pp - 1, busy = n_micro;
    if (kind == SCHED_INTERLEAVED) busy = (double)vpp * n_micro;
    if (kind == SCHED_ZBH1) busy = 3.0 * n_micro;
    if (kind == SCHED_DUALPIPEV) busy = 6.0 * n_micro;
    if (kind == SCHED_ZBV) idle = 0;
    return idle > 0 ? idle / (busy + idle) : 0;
}

#endif
