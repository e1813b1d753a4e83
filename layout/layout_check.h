// layout/layout_check.h: whether a layout can run a model: the checks the trainer makes on
// every rank before anything is allocated (grid.h), and the planner on every layout it
// predicts (planner/predict.h). Pure functions of the config; no MPI.
#ifndef LAYOUT_CHECK_H
#define LAYOUT_CHECK_H

#include "layout/params.h"
#include "layout/schedule.h"

// Why context parallelism cannot split this model, or NULL (U: the Ulysses degree).
static const char* cp_check(const ModelConfig* c, char* why) {
    int cp = c->cp, U = c->cp_ulysses, Hl = c->n_head / c->tp, KVl = c->n_kv_head / c->tp;
    if (cp == 1) return NULL;
    const char* flag = U == cp ? "--cp-kind ulysses" : "--cp-ulysses";
    if (c->cp_contiguous && c->seq_len % cp) {
        sprintf(why, "--cp %d: --seq-len %d does not split into cp = %d equal pieces (the contiguous split)", cp,
                c->seq_len, cp);
        return why;
    }
    if (!c->cp_contiguous && c->seq_len % (2 * cp)) {
        sprintf(why, "--cp %d: --seq-len %d does not split into 2 x cp = %d equal chunks (the zig-zag split)", cp,
                c->seq_len, 2 * cp);
        return why;
    }
    if (U > KVl) {
        sprintf(why, "%s: Ulysses degree %d is more than the %d KV heads per tensor-parallel rank", flag, U, KVl);
        return why;
    }
    if (Hl % U || KVl % U) {
        sprintf(why, "%s: Ulysses degree %d does not divide the %d heads and %d KV heads per tensor-parallel rank",
                flag, U, Hl, KVl);
        return why;
    }
    if (c->sp && (c->seq_len / cp) % c->tp) {
        sprintf(why, "--sp with --cp %d: the %d rows of a sequence per cp rank do not split over tp %d", cp,
                c->seq_len / cp, c->tp);
        return why;
    }
    return NULL;
}

// The most ranks a run may have: rank numbers are int in MPI, and the settings check, the
// start-up table and per-rank arrays grow with the world.
#define MAX_WORLD (1 << 20)

// Why the layout cannot run this model, or NULL. Checked on every rank before anything is
// allocated; products of flags in 64 bits.
static const char* layout_check(const ModelConfig* c, int world, char* why) {
    long long ranks = (long long)c->dp * c->tp * c->pp * c->cp;
    if (ranks > MAX_WORLD) {
        sprintf(why, "dp %d x tp %d x pp %d x cp %d = %lld ranks, more than the %d a run may have", c->dp, c->tp, c->pp,
                c->cp, ranks, MAX_WORLD);
        return why;
    }
    if (ranks != world) {
        sprintf(why, "dp %d x tp %d x pp %d x cp %d = %lld does not match the world of %d ranks", c->dp, c->tp, c->pp,
                c->cp, ranks, world);
        return why;
    }
    if (cp_check(c, why)) return why;
    if (tp_check(c, c->tp, why)) return why;
    if (c->n_layer < c->pp * c->vpp) {
        sprintf(why, "--n-layer %d < --pp %d x --vpp %d chunks%s: every chunk needs a layer", c->n_layer, c->pp, c->vpp,
                c->schedule == SCHED_ZBV ? " (zb-v: two per stage)" : "");
        return why;
    }
    if (c->sp && c->tp == 1) { sprintf(why, "--sp needs --tp > 1"); return why; }
    if (c->sp && ((long long)c->micro_batch * c->seq_len) % c->tp) {
        sprintf(why, "--sp: micro-batch x seq-len %lld is not divisible by tp %d",
                (long long)c->micro_batch * c->seq_len, c->tp);
        return why;
    }
    if (c->sp && c->seq_len % c->tp) {
        sprintf(why, "--sp: seq-len %d is not divisible by tp %d", c->seq_len, c->tp);
        return why;
    }
    if ((long long)c->global_batch / c->dp * c->seq_len > INT_MAX) {  // row counts and token indices are int
        sprintf(why,
                "--global-batch %d / dp %d x --seq-len %d = %lld tokens per data-parallel rank per step, more than %d",
                c->global_batch, c->dp, c->seq_len, (long long)c->global_batch / c->dp * c->seq_len, INT_MAX);
        return why;
    }
    long long per_micro = (long long)c->dp * c->micro_batch;  // sequences per micro-batch over the dp ranks
    if (c->global_batch % per_micro) {
        sprintf(why, "--global-batch %d is not divisible by dp %d x micro-batch %d", c->global_batch, c->dp,
                c->micro_batch);
        return why;
    }
    if (c->zero && c->dp * c->cp == 1) {
        sprintf(why, "--zero %d needs dp x cp > 1 (there is nothing to shard over)", c->zero);
        return why;
    }
    if ((c->offload & OFFLOAD_ACTIVATIONS) && c->pp == 1) {
        sprintf(why, "--offload activations needs --pp > 1 (it offloads the micro-batches a stage holds in flight)");
        return why;
    }
    const char* s = schedule_check(c->schedule, c->pp, c->vpp, (int)(c->global_batch / per_micro));
    if (s) { sprintf(why, "%s", s); return why; }
    return NULL;
}

#endif
