// layout/layout_check.h: every rule that involves more than one flag, in one function,
// config_check: the trainer calls it when the flags are parsed (layout/args.h; the world not yet
// known) and on every rank before anything is allocated (runtime/run.h), the planner on every
// layout it predicts (planner/predict.h). Its layout half, layout_check: whether a layout can run
// a model. Pure functions of the config; no MPI.
#ifndef LAYOUT_CHECK_H
#define LAYOUT_CHECK_H

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include "layout/params.h"
#include "layout/schedule.h"

// The size of the `why` buffers these checks write their one line into.
#define WHY_CAP 512

// One line into why (WHY_CAP bytes); returns why.
static const char* why_line(char* why, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static const char* why_line(char* why, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, WHY_CAP, fmt, ap);
    va_end(ap);
    return why;
}

// Why context parallelism cannot split this model, or NULL (U: the Ulysses degree). After tp_check: the heads
// per tensor-parallel rank it quotes are whole (a message never quotes a quantity an invalid divisor made).
static const char* cp_check(const ModelConfig* c, char* why) {
    int cp = c->cp, U = c->cp_ulysses, n_head_local = c->n_head / c->tp, n_kv_head_local = c->n_kv_head / c->tp;
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
    if (U > n_kv_head_local) {
        sprintf(why, "%s: Ulysses degree %d is more than the %d KV heads per tensor-parallel rank", flag, U,
                n_kv_head_local);
        return why;
    }
    if (n_head_local % U || n_kv_head_local % U) {
        sprintf(why, "%s: Ulysses degree %d does not divide the %d heads and %d KV heads per tensor-parallel rank",
                flag, U, n_head_local, n_kv_head_local);
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
        long long replica = (long long)c->tp * c->pp * c->cp;
        sprintf(why, "dp %d x tp %d x pp %d x cp %d = %lld does not match the world of %d ranks (the world must be a "
                "multiple of tp x pp x cp = %lld: dp is the world / %lld when --dp is not given)", c->dp, c->tp, c->pp,
                c->cp, ranks, world, replica, replica);
        return why;
    }
    // the root causes first: each check below quotes only what the ones before it validated (tp divides the
    // heads before cp_check quotes the heads per tp rank; the batch divides over dp before the tokens per dp rank)
    if (tp_check(c, c->tp, why)) return why;
    if (c->sp && c->tp == 1) { sprintf(why, "--sp needs --tp > 1"); return why; }
    if (c->sp && c->seq_len % c->tp) {  // (then every micro-batch's rows split too)
        sprintf(why, "--sp: seq-len %d is not divisible by tp %d", c->seq_len, c->tp);
        return why;
    }
    if (cp_check(c, why)) return why;
    if (c->n_layer < c->pp * c->vpp) {
        char v[48] = "";
        if (schedule_is_v(c->schedule)) snprintf(v, sizeof(v), " (%s: two per stage)", schedule_name(c->schedule));
        sprintf(why, "--n-layer %d < --pp %d x --vpp %d chunks%s: every chunk needs a layer", c->n_layer, c->pp, c->vpp,
                v);
        return why;
    }
    long long per_micro = (long long)c->dp * c->micro_batch;  // sequences per micro-batch over the dp ranks
    if (c->global_batch % per_micro) {
        sprintf(why, "--global-batch %d is not divisible by dp %d x micro-batch %d", c->global_batch, c->dp,
                c->micro_batch);
        return why;
    }
    if ((long long)c->global_batch / c->dp * c->seq_len > INT_MAX) {  // row counts and token indices are int
        sprintf(why,
                "--global-batch %d / dp %d x --seq-len %d = %lld tokens per data-parallel rank per step, more than %d",
                c->global_batch, c->dp, c->seq_len, (long long)c->global_batch / c->dp * c->seq_len, INT_MAX);
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

// ----------------------------------------------------------------------------
// The rules between flags. What they read beyond ModelConfig: the choices that are not the
// model's and which flags the command line named (the trainer fills it from its Args, the planner
// from the layout it predicts).
typedef struct {
    int cp_kind;                 // CP_RING, CP_ULYSSES, CP_2D
    int cp_ulysses_given;        // --cp-ulysses as given; 0: not given
    int weight_pass_immediate;   // 1: --weight-pass immediate was given
    int reshard_given;           // 1: --reshard-after-forward was given
    int offload_frames_given;    // 1: --offload-frames was given
    int offload_dir_given;       // 1: --offload-dir was given
    int packing_wlb;             // 1: --packing wlb
    int int_counts;              // 1: this trainer's collectives, whose counts are int (the planner's other
                                 // software has no such limit: it leaves them out)
    int noise_scale;             // 1: --noise-scale (runtime/noise_scale.h) was given
    int pp_costs_given;          // 1: --pp-costs (runtime/pp_costs.h) was given
} FlagRules;

// Context parallelism's kind and split, the schedule's chunks and weight passes, the offload's
// flags, wlb's batch; c's defaults resolved (cp_ulysses from the kind).
static const char* choices_check(const ModelConfig* c, const FlagRules* f, char* why) {
    int U = f->cp_ulysses_given;
    if (U && f->cp_kind != CP_2D) return why_line(why, "--cp-ulysses %d: only with --cp-kind 2d", U);
    if (f->cp_kind == CP_2D && !U)
        return why_line(why, "--cp-kind 2d needs --cp-ulysses U (the all-to-all degree; the ring is cp / U)");
    if (f->cp_kind == CP_2D && c->cp % U) return why_line(why, "--cp-ulysses %d does not divide --cp %d", U, c->cp);
    // the all-to-all gives each rank whole sequences of its ring rank's rows: nothing to split on a ring of one
    if (c->cp_doc && c->cp > 1 && c->cp == c->cp_ulysses)
        return why_line(why, "--cp-split doc: splits the ring's rows; --cp %d with an all-to-all of %d (--cp-kind %s) "
                        "leaves a ring of one rank: every rank gets whole sequences (balanced)", c->cp, c->cp_ulysses,
                        f->cp_kind == CP_ULYSSES ? "ulysses" : "2d");
    if (schedule_is_v(c->schedule) && c->vpp != 2)
        return why_line(why, "--vpp %d: --schedule %s places exactly two chunks per stage (a V); use --vpp 2", c->vpp,
                        schedule_name(c->schedule));
    if (schedule_has_w(c->schedule) && f->weight_pass_immediate)
        return why_line(why, "--weight-pass immediate: --schedule %s runs each weight pass as its own op (W)",
                        schedule_name(c->schedule));
    if (schedule_has_w(c->schedule) && c->recompute == RECOMPUTE_FULL)
        return why_line(why, "--recompute full: --schedule %s keeps each layer's activations until its weight pass "
                        "(W); use --recompute selective", schedule_name(c->schedule));
    if (f->pp_costs_given && (!c->pp_split || c->pp == 1))
        return why_line(why, "--pp-costs: the times --pp-split auto cuts a pipeline by; only with --pp-split auto "
                        "and --pp > 1");
    if (f->offload_dir_given && !c->offload)
        return why_line(why, "--offload-dir: only with --offload optimizer, activations or both");
    if (f->offload_frames_given && !(c->offload & OFFLOAD_ACTIVATIONS))
        return why_line(why, "--offload-frames: only with --offload activations or both");
    // wlb's plan tries each waiting document on every sequence of the batch, some 20 times (its level's
    // bisection): the start-up grows as sequences x documents (G 4096: 7 s, 65536: 57 s on the built-in corpus)
    if (f->packing_wlb && c->global_batch > 8192)
        return why_line(why, "--packing wlb: --global-batch %d is over the 8192 sequences it balances at start-up; "
                        "use greedy", c->global_batch);
    return NULL;
}

// The shape's own rules, ZeRO's level against the other flags and the int counts of its units.
static const char* shape_zero_check(const ModelConfig* c, const FlagRules* f, char* why) {
    if (c->d_model % c->n_head)
        return why_line(why, "--d-model %d is not divisible by --n-head %d", c->d_model, c->n_head);
    if (c->n_head % c->n_kv_head)
        return why_line(why, "--n-head %d is not divisible by --n-kv-head %d", c->n_head, c->n_kv_head);
    if (c->arch == ARCH_GPT2 && c->n_kv_head != c->n_head)
        return why_line(why, "--n-kv-head: grouped-query attention needs --arch llama");
    if (c->arch == ARCH_LLAMA && (c->d_model / c->n_head) % 2)
        return why_line(why, "rotary embeddings need an even head size, got %d", c->d_model / c->n_head);
    if (f->reshard_given && c->zero != 3)
        return why_line(why, "--reshard-after-forward: only with --zero 3 (the other levels keep every weight)");
    if (c->weight_pass_deferred && c->recompute == RECOMPUTE_FULL)
        return why_line(why, "--weight-pass deferred keeps every layer's activations until the chunk's weight passes: "
                        "not with --recompute full");
    // the units per tp rank once tp splits the model (layout_check names a tp that does not)
    char tp_why[WHY_CAP];
    if (!f->int_counts || tp_check(c, c->tp, tp_why)) return NULL;
    if (c->zero >= 1 && zero3_largest_unit(c, c->tp) > INT_MAX)
        return why_line(why, "--zero %d: a unit (a layer, the embeddings or the head) of %zu floats per tp rank is "
                        "more than the %d a collective's int counts hold; raise --tp",
                        c->zero, zero3_largest_unit(c, c->tp), INT_MAX);
    return NULL;
}

// A rank's shard of a zero 1|2 buffer past its collectives' int counts: once dp is known (given, or the
// world's, after layout_check) and tp splits the model; a chunk without layers is layout_check's.
static const char* zero_shard_check(const ModelConfig* c, const FlagRules* f, char* why) {
    char tp_why[WHY_CAP];
    if (!f->int_counts || (c->zero != 1 && c->zero != 2) || c->dp < 1 || c->n_layer < c->pp * c->vpp ||
        tp_check(c, c->tp, tp_why) || zero_largest_shard(c) <= INT_MAX)
        return NULL;
    return why_line(why, "--zero %d: a rank's shard of %zu floats is more than the %d a collective's int counts hold; "
                    "raise --dp, --tp or --pp", c->zero, zero_largest_shard(c), INT_MAX);
}

// --noise-scale estimates the noise from two batch sizes, each replica's gradient and the step's
// (runtime/noise_scale.h): it needs two replicas or more (dp x cp, once dp is known: world > 0), each
// with its own whole gradient before they are reduced.
static const char* noise_scale_check(const ModelConfig* c, const FlagRules* f, int world, char* why) {
    if (!f->noise_scale) return NULL;
    if (c->zero >= 2 || c->sp)
        return why_line(why, "--noise-scale: needs each replica's own gradient: not with %s", c->sp ? "--sp (partial "
                        "sums over tp)" : c->zero == 2 ? "--zero 2 (reduced as the backward runs)"
                        : "--zero 3 (reduced as the backward runs)");
    if (world > 0 && (long long)c->dp * c->cp < 2)
        return why_line(why, "--noise-scale: needs two batch sizes, each replica's gradient and the step's: "
                        "dp x cp >= 2 (got %lld)", (long long)c->dp * c->cp);
    return NULL;
}

// Why these flags cannot run together, or NULL. world 0: the flags alone (the trainer at parsing,
// where dp may not be known yet); world > 0: the layout too (layout_check), before the rules that read dp (a dp
// derived from a world that tp x pp x cp does not divide is no dp to quote).
static const char* config_check(const ModelConfig* c, const FlagRules* f, int world, char* why) {
    if (choices_check(c, f, why) || shape_zero_check(c, f, why)) return why;
    if (world > 0 && layout_check(c, world, why)) return why;
    return zero_shard_check(c, f, why) ? why : noise_scale_check(c, f, world, why);
}

#endif
