// planner/search.h: the search. The model a search predicts (a preset and shape overrides),
// the enumeration of every layout and kernel choice a filter lets through, and their order.
#ifndef PLANNER_SEARCH_H
#define PLANNER_SEARCH_H

#include "planner/predict.h"

// The trainer's limits on a model's shape (args.h); the planner refuses the same.
#define PLAN_SHAPE_FLAGS 7
static const char* const SHAPE_FLAG[PLAN_SHAPE_FLAGS] = {"--n-layer", "--n-head", "--n-kv-head", "--d-model", "--d-ff", "--vocab", "--seq-len"};
static const int SHAPE_MIN[PLAN_SHAPE_FLAGS] = {1, 1, 1, 1, 1, 2, 1};
static const int SHAPE_MAX[PLAN_SHAPE_FLAGS] = {512, 1024, 1024, 65536, 1 << 20, 1 << 20, 1 << 20};

// A model from a preset, the shape overrides and a sequence length (0: the preset's).
// Returns 0, or -1 with the reason in err.
static int plan_model(const char* preset, const int* shape, int seq_len, ModelConfig* c, char* err, size_t err_len) {
    const Preset* p = find_preset(preset);
    if (!p) { snprintf(err, err_len, "unknown model '%s'", preset); return -1; }
    memset(c, 0, sizeof(*c));
    apply_preset(c, p);
    int* dst[PLAN_SHAPE_FLAGS] = {&c->n_layer, &c->n_head, &c->n_kv_head, &c->d_model, &c->d_ff, &c->vocab, &c->seq_len};
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++) if (shape[k] != -1) *dst[k] = shape[k];
    if (seq_len) c->seq_len = seq_len;
    if (shape[1] > 0 && shape[2] < 0) c->n_kv_head = c->n_head;  // --n-head alone: plain multi-head attention
    if (shape[3] > 0 && shape[4] < 0) c->d_ff = 0;             // --d-model alone: the architecture's default d_ff
    config_finalize(c);
    int v[PLAN_SHAPE_FLAGS] = {c->n_layer, c->n_head, c->n_kv_head, c->d_model, c->d_ff, c->vocab, c->seq_len};
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++)
        if (v[k] < SHAPE_MIN[k] || v[k] > SHAPE_MAX[k]) {
            snprintf(err, err_len, "%s %d is out of range (%d .. %d, the trainer's limits)", SHAPE_FLAG[k], v[k], SHAPE_MIN[k], SHAPE_MAX[k]);
            return -1;
        }
    if (c->d_model % c->n_head) { snprintf(err, err_len, "--d-model %d must be a multiple of --n-head %d", c->d_model, c->n_head); return -1; }
    if (c->n_head % c->n_kv_head) { snprintf(err, err_len, "--n-head %d must be a multiple of --n-kv-head %d", c->n_head, c->n_kv_head); return -1; }
    c->dp = c->tp = c->pp = c->vpp = c->micro_batch = c->cp = c->cp_ulysses = 1;
    c->schedule = SCHED_1F1B;
    return 0;
}

typedef struct {
    int tp, pp, dp, vpp, micro_batch, recompute, sp, zero, schedule, attention, rms_kernel;  // -1: any
    int cp, cp_ulysses, cp_kind;  // cp_kind: CPK_*
} PlanFilter;

static int filter_ok(int want, int v) { return want < 0 || want == v; }
static int filter_cp_ok(const PlanFilter* f, int cp, int U) {
    return filter_ok(f->cp, cp) && filter_ok(f->cp_ulysses, U) && filter_ok(f->cp_kind, cp_kind_of(cp, U));
}

// Whether the search tries schedule `sched` for pp stages of vpp chunks each: 1F1B with one
// chunk, interleaved 1F1B with more; on a pipeline also the zero-bubble ones, ZB-H1 with one
// chunk and ZB-V with two (with one stage they are 1F1B holding more memory). GPipe holds
// more activations than 1F1B for the same bubble and is not tried.
static int plan_schedule_tried(int sched, int pp, int vpp) {
    if (sched == SCHED_1F1B) return vpp == 1;
    if (sched == SCHED_INTERLEAVED) return vpp > 1;
    if (sched == SCHED_ZBH1) return vpp == 1 && pp > 1;
    if (sched == SCHED_ZBV) return vpp == 2 && pp > 1;
    return 0;
}

// A growing array of predicted layouts.
typedef struct { PlanResult* r; int n, cap; } PlanList;

// Predict layout lc0 (its grid, pipeline and micro-batch set) under every recomputation, SP,
// ZeRO and kernel choice the filter lets through; keep the valid ones.
static void plan_enumerate_settings(const ModelConfig* lc0, int global_batch, int gpus_per_node, const DeviceProfile* d,
                                    const PlanSetup* base, const PlanFilter* f, PlanList* out) {
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++)
        for (int sp = 0; sp <= (lc0->tp > 1); sp++)
            for (int zero = 0; zero <= 3; zero++)
                for (int attn = 0; attn < N_ATTN; attn++)
                    for (int rms = 0; rms <= 1; rms++) {
                        if (!filter_ok(f->recompute, rc) || !filter_ok(f->sp, sp) || !filter_ok(f->zero, zero) ||
                            !filter_ok(f->attention, attn) || !filter_ok(f->rms_kernel, rms)) continue;
                        if (zero > 0 && lc0->dp * lc0->cp == 1) continue;  // nothing to shard
                        ModelConfig lc = *lc0;
                        lc.recompute = rc, lc.sp = sp, lc.zero = zero;
                        PlanSetup k = *base;
                        k.attention = attn, k.rms_kernel = rms;
                        if (out->n == out->cap) {
                            out->cap *= 2;
                            out->r = (PlanResult*)realloc(out->r, sizeof(PlanResult) * out->cap);
                            if (!out->r) fail("out of memory");
                        }
                        if (plan_predict_ex(&lc, &k, global_batch, gpus_per_node, d, 0, &out->r[out->n]) == 0) out->n++;
                    }
}

// Every valid layout and kernel choice of c on `gpus` GPUs that passes the filter, predicted
// with base's rank order and pipeline cut; returns the count, *out a malloc'ed array the
// caller frees. Context parallelism: cp a power of two, with each power-of-two Ulysses
// degree U <= cp (U = 1: ring, U = cp: Ulysses, between: 2D).
static int plan_enumerate(const ModelConfig* c, int gpus, int global_batch, int gpus_per_node, const DeviceProfile* d,
                          const PlanSetup* base, const PlanFilter* f, PlanResult** out) {
    PlanList list = {(PlanResult*)xmalloc(sizeof(PlanResult) * 1024), 0, 1024};
    double t_start = now_s(), t_said = t_start;
    for (int tp = 1; tp <= gpus; tp++) {
        if (gpus % tp || !filter_ok(f->tp, tp)) continue;
        if (f->tp < 0 && tp > gpus_per_node) continue;  // tensor parallelism stays inside a node unless asked for
        for (int cp = 1; cp <= gpus / tp && (cp == 1 || base->context_parallel); cp *= 2)
            for (int U = 1; U <= cp; U *= 2) {
                if ((gpus / tp) % cp || !filter_cp_ok(f, cp, U)) continue;
                for (int pp = 1; pp <= gpus / (tp * cp); pp++) {
                    if ((gpus / (tp * cp)) % pp || !filter_ok(f->pp, pp) || pp > c->n_layer) continue;
                    int dp = gpus / (tp * cp * pp);
                    if (!filter_ok(f->dp, dp) || global_batch % dp) continue;
                    for (int mb = 1; mb <= global_batch / dp; mb *= 2) {
                        if ((global_batch / dp) % mb || !filter_ok(f->micro_batch, mb)) continue;
                        for (int vpp = 1; vpp * pp <= c->n_layer; vpp++) {
                            if (!filter_ok(f->vpp, vpp) || (vpp > 1 && (pp == 1 || c->n_layer % (pp * vpp)))) continue;
                            for (int sched = 0; sched < N_SCHEDULES; sched++) {
                                if (!plan_schedule_tried(sched, pp, vpp) || !filter_ok(f->schedule, sched)) continue;
                                ModelConfig lc = *c;
                                lc.dp = dp, lc.tp = tp, lc.pp = pp, lc.vpp = vpp, lc.micro_batch = mb, lc.schedule = sched;
                                lc.cp = cp, lc.cp_ulysses = U;
                                plan_enumerate_settings(&lc, global_batch, gpus_per_node, d, base, f, &list);
                                if (now_s() - t_said > 5) {  // big searches say they are alive
                                    t_said = now_s();
                                    fprintf(stderr, "plan: %d layouts evaluated in %.0f s (now at tp %d, cp %d)...\n", list.n,
                                            t_said - t_start, tp, cp);
                                }
                            }
                        }
                    }
                }
            }
    }
    *out = list.r;
    return list.n;
}

// Fitting layouts first, then by throughput; ties go to the simpler layout.
static int plan_compare(const void* pa, const void* pb) {
    const PlanResult *a = (const PlanResult*)pa, *b = (const PlanResult*)pb;
    if (a->fits != b->fits) return b->fits - a->fits;
    double ra = a->tokens_per_s_per_gpu, rb = b->tokens_per_s_per_gpu;
    if (fabs(ra - rb) > 1e-9 * (ra + rb)) return ra < rb ? 1 : -1;
    int ka = a->zero + 4 * a->recompute + 16 * a->sp, kb = b->zero + 4 * b->recompute + 16 * b->sp;
    if (ka != kb) return ka - kb;
    return a->mem_total < b->mem_total ? -1 : a->mem_total > b->mem_total;
}

static void plan_sort(PlanResult* r, int n) { qsort(r, n, sizeof(PlanResult), plan_compare); }

// Index of the best fitting layout satisfying the filter in a sorted array, or -1.
static int plan_best(const PlanResult* r, int n, const PlanFilter* f) {
    for (int i = 0; i < n; i++) {
        const PlanResult* p = &r[i];
        if (!p->fits) return -1;
        if (filter_ok(f->tp, p->tp) && filter_ok(f->pp, p->pp) && filter_ok(f->dp, p->dp) && filter_ok(f->vpp, p->vpp) &&
            filter_ok(f->micro_batch, p->micro_batch) && filter_ok(f->recompute, p->recompute) && filter_ok(f->sp, p->sp) &&
            filter_ok(f->zero, p->zero) && filter_ok(f->schedule, p->schedule) && filter_ok(f->attention, p->setup.attention) &&
            filter_ok(f->rms_kernel, p->setup.rms_kernel) && filter_cp_ok(f, p->cp, p->cp_ulysses)) return i;
    }
    return -1;
}

static PlanFilter plan_filter_any(void) { PlanFilter f = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}; return f; }

// "ring", "ulysses", "2d" with its Ulysses degree ("2d u2"), or "-" without context parallelism.
static const char* cp_kind_str(const PlanResult* p, char* buf, size_t len) {
    int kind = cp_kind_of(p->cp, p->cp_ulysses);
    if (kind == CPK_2D) snprintf(buf, len, "2d u%d", p->cp_ulysses);
    else snprintf(buf, len, "%s", kind == CPK_NONE ? "-" : CPK_NAMES[kind]);
    return buf;
}

#endif
