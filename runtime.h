// runtime.h: the parts of a training run that do not depend on where the math runs,
// shared by train_gpt.c (CPU) and train_gpt.cu (GPU): layout validation, the
// learning-rate schedule, batch assignment to data-parallel ranks, pipeline message
// tags and op lists, the optimizer's range under ZeRO, and slot bookkeeping.
#ifndef RUNTIME_H
#define RUNTIME_H

#include "args.h"
#include "ckpt.h"
#include "data.h"
#include "layout.h"
#include "params.h"
#include "schedule.h"

// Why the layout cannot run this model, or NULL. Checked on every rank before anything is allocated.
static const char* layout_check(const ModelConfig* c, int world, char* why) {
    if (c->dp * c->tp * c->pp != world) { sprintf(why, "dp %d x tp %d x pp %d = %d does not match the world of %d ranks", c->dp, c->tp, c->pp, c->dp * c->tp * c->pp, world); return why; }
    if (tp_check(c, c->tp, why)) return why;
    if (c->n_layer < c->pp * c->vpp) { sprintf(why, "n_layer %d < pp %d x vpp %d: every chunk needs a layer", c->n_layer, c->pp, c->vpp); return why; }
    if (c->sp && c->tp == 1) { sprintf(why, "--sp needs --tp > 1"); return why; }
    if (c->sp && (c->micro_batch * c->seq_len) % c->tp) { sprintf(why, "--sp: micro-batch x seq-len %d is not divisible by tp %d", c->micro_batch * c->seq_len, c->tp); return why; }
    if (c->sp && c->seq_len % c->tp) { sprintf(why, "--sp: seq-len %d is not divisible by tp %d", c->seq_len, c->tp); return why; }
    if (c->global_batch % (c->dp * c->micro_batch)) { sprintf(why, "--global-batch %d is not divisible by dp %d x micro-batch %d", c->global_batch, c->dp, c->micro_batch); return why; }
    if (c->zero && c->dp == 1) { sprintf(why, "--zero %d needs dp > 1 (there is nothing to shard over)", c->zero); return why; }
    const char* s = schedule_check(c->schedule, c->pp, c->vpp, c->global_batch / (c->dp * c->micro_batch));
    if (s) { sprintf(why, "%s", s); return why; }
    return NULL;
}

// Learning rate at 0-based step: linear warm-up to lr, then cosine decay to lr * min_lr_frac.
static float lr_at(const ModelConfig* c, int step) {
    if (step < c->warmup) return c->lr * (step + 1) / c->warmup;
    if (c->steps <= c->warmup) return c->lr;
    float progress = (float)(step - c->warmup) / (float)(c->steps - c->warmup);
    float min_lr = c->lr * c->min_lr_frac;
    return min_lr + 0.5f * (c->lr - min_lr) * (1.0f + cosf(3.14159265f * progress));
}


// Tag of the message chunk g sends for micro-batch mb (dir 0: activations, 1: gradients).
static int p2p_tag(int pp, int vpp, int dir, int mb, int g) { return (mb * pp * vpp + g) * 2 + dir; }

// Forward-only op list for evaluation: each micro-batch through the local chunks in order.
static int forward_ops(int stage, int pp, int vpp, int n_micro, PipeOp* ops) {
    int n = 0;
    for (int mb = 0; mb < n_micro; mb++)
        for (int c = 0; c < vpp; c++) n = push_compute(ops, n, OP_FWD, mb, c, stage, pp, vpp);
    return n;
}

// Most micro-batches the op list holds at once on local chunk `chunk` (sizes its slots).
static int chunk_in_flight(const PipeOp* ops, int n_ops, int chunk) {
    int cur = 0, peak = 1;
    for (int k = 0; k < n_ops; k++) {
        if (ops[k].chunk != chunk) continue;
        if (ops[k].kind == OP_FWD && ++cur > peak) peak = cur;
        if (ops[k].kind == OP_BWD) cur--;
    }
    return peak;
}

// This dp rank's part of global batch `index`: n_micro * micro_batch sequences.
static void load_batch(const TokenStream* ts, const ModelConfig* c, int dp_rank, int n_micro, size_t index, int* inputs,
                       int* targets) {
    size_t per_dp = (size_t)n_micro * c->micro_batch;
    size_t first = index * c->global_batch + dp_rank * per_dp;
    stream_batch(ts, c->seq_len, first, (int)per_dp, inputs, targets);
}

// The part [a, b) of tensor t inside the local-buffer range [lo, hi); 0 if empty.
static int clip_range(const Tensor* t, size_t lo, size_t hi, size_t* a, size_t* b) {
    *a = t->offset > lo ? t->offset : lo;
    *b = t->offset + t->size < hi ? t->offset + t->size : hi;
    return *a < *b;
}

// ZeRO shard of the local buffer that this dp rank updates: [lo, hi). Without ZeRO every
// rank updates its whole buffer (the dp replicas do the same update).
static size_t shard_floats(const ParamLayout* P, int dp) { return P->n_padded / dp; }
static void optimizer_range(const ParamLayout* P, const ModelConfig* c, int dp_rank, size_t* lo, size_t* hi) {
    size_t S = shard_floats(P, c->dp);
    *lo = c->zero ? dp_rank * S : 0;
    *hi = c->zero ? *lo + S : P->n_local;
    if (*hi > P->n_local) *hi = P->n_local;
    if (*lo > *hi) *lo = *hi;
}

// Batch defaults that keep every layout's math the same as one rank's: the global batch
// is 16 sequences whatever the layout (unless --global-batch, or --micro-batch alone,
// which means dp*pp*micro-batch), and the micro-batch (unless --micro-batch) is the
// largest <= 16 that gives every pipeline stage pp micro-batches, as 1F1B needs. So
// `./train --tp 4 --pp 2` trains on the same batches as `./train`.
static void resolve_batch(Args* a) {
    ModelConfig* c = &a->cfg;
    int m_min = c->pp > 1 ? c->pp : 1;
    if (!c->global_batch) c->global_batch = a->micro_batch_given ? c->dp * m_min * c->micro_batch : 16;
    if (!a->micro_batch_given) {
        int mb = c->global_batch / (c->dp * m_min);
        c->micro_batch = mb < 1 ? 1 : mb > 16 ? 16 : mb;
    }
}

// Everything before the model: flags, self-launch under mpirun, MPI, the layout check
// (on every rank, before any allocation), data and tokenizer.
typedef struct {
    Args args;
    TokenStream train, val;
    Tokenizer tk;
    int world, rank;
} Run;

static void run_setup(Run* r, int argc, char** argv) {
    parse_args(&r->args, argc, argv);
    ModelConfig* c = &r->args.cfg;
    char why[512];
    int launched = under_launcher();
    if (!launched) {
        // Started by hand: the world is the layout. Check it here, once, then start the
        // ranks under mpirun if there is more than one.
        int need = (c->dp ? c->dp : 1) * c->tp * c->pp;
        if (!c->dp) c->dp = 1;
        resolve_batch(&r->args);
        if (layout_check(c, need, why)) fail("layout: %s", why);
        if (need > 1) relaunch_under_mpirun(need, argc, argv);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &r->world);
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    if (r->world > 1) fail_rank = r->rank, fail_hook = mpi_fail_hook;
    if (!c->dp) c->dp = r->world / (c->tp * c->pp) > 0 ? r->world / (c->tp * c->pp) : 1;
    resolve_batch(&r->args);
    if (layout_check(c, r->world, why)) {
        if (r->rank == 0) fprintf(stderr, "error: layout: %s\n", why);
        MPI_Finalize();
        exit(1);
    }
    int *tag_ub, flag, n_micro = c->global_batch / (c->dp * c->micro_batch);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    if (flag && p2p_tag(c->pp, c->vpp, 1, n_micro, 0) > *tag_ub)
        fail("layout: %d micro-batches x %d chunks exceed the MPI tag range; lower --global-batch", n_micro, c->pp * c->vpp);
    ckpt_install_signals();
    if (r->world > 1) watchdog_start(r->args.timeout_s, r->rank);
    Args* a = &r->args;
    // outputs that can only fail at the end are checked now, before any training
    struct stat st;
    if (a->ckpt_dir && stat(a->ckpt_dir, &st) == 0 && !S_ISDIR(st.st_mode)) fail("--ckpt-dir %s exists and is not a directory", a->ckpt_dir);
    if (a->export_llmc && llmc_check(c, why)) fail("--export-llmc %s: %s", a->export_llmc, why);
    const char* outs[2] = {a->trace, a->export_llmc};
    const char* out_flags[2] = {"--trace", "--export-llmc"};
    for (int i = 0; i < 2; i++) {
        if (!outs[i]) continue;
        char dir[1024];
        snprintf(dir, sizeof(dir), "%s", outs[i]);
        char* slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        if (slash && *dir && (stat(dir, &st) || !S_ISDIR(st.st_mode)))
            fail("%s %s: directory %s does not exist", out_flags[i], outs[i], dir);
    }
    if (a->data) stream_open(&r->train, a->data, c->vocab, "--data");
    else make_builtin_corpus(&r->train, 2000000, 42), snprintf(r->train.source, sizeof(r->train.source), "built-in corpus (2M bytes)");
    if (a->val_data) stream_open(&r->val, a->val_data, c->vocab, "--val-data");
    else stream_split(&r->train, &r->val, 0.05);
    if (stream_n_seq(&r->train, c->seq_len) < 1) fail("--data %s: fewer than seq-len+1 = %d tokens", r->train.source, c->seq_len + 1);
    if (a->eval_every && stream_n_seq(&r->val, c->seq_len) < 1) fail("validation data %s: fewer than seq-len+1 tokens", r->val.source);
    tokenizer_load(&r->tk, a->tokenizer);
}

#endif
