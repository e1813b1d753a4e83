// planner/search.h: the search. The model a search predicts (a preset and shape overrides),
// the enumeration of every layout and kernel choice a filter lets through, and their order.
#ifndef PLANNER_SEARCH_H
#define PLANNER_SEARCH_H

#include <pthread.h>
#include "planner/predict.h"
#include "layout/args.h"

// The trainer's limits on a model's shape and a layout (args.h SIZE_FLAGS, the shape first:
// n_layer n_head n_kv_head d_model d_ff vocab seq_len); the planner refuses the same.
#define PLAN_SHAPE_FLAGS (SIZE_SEQ_LEN + 1)
#define PLAN_MAX_GPUS SIZE_FLAGS[SIZE_DP].hi  // the trainer's most ranks (grid.h MAX_WORLD)
#define PLAN_MAX_TOKENS ((long long)SIZE_FLAGS[SIZE_GLOBAL_BATCH].hi * SIZE_FLAGS[SIZE_SEQ_LEN].hi)
// The most (micro-batch, chunk) pairs the planner plays in one step (m x pp x vpp): the work
// of one layout's schedule lists, capped (a search skips the layouts past it).
#define PLAN_MAX_PAIRS (1 << 18)

// A model from a preset, the shape overrides and a sequence length (0: the preset's).
// Returns 0, or -1 with the reason in err.
static int plan_model(const char* preset, const int* shape, int seq_len, ModelConfig* c, char* err, size_t err_len) {
    const Preset* p = find_preset(preset);
    if (!p) { snprintf(err, err_len, "unknown model '%s'", preset); return -1; }
    memset(c, 0, sizeof(*c));
    apply_preset(c, p);
    int* dst[PLAN_SHAPE_FLAGS] = {&c->n_layer, &c->n_head, &c->n_kv_head, &c->d_model,
                                  &c->d_ff,    &c->vocab,  &c->seq_len};
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++) if (shape[k] != -1) *dst[k] = shape[k];
    if (seq_len) c->seq_len = seq_len;
    if (shape[1] > 0 && shape[2] < 0) c->n_kv_head = c->n_head;  // --n-head alone: plain multi-head attention
    if (shape[3] > 0 && shape[4] < 0) c->d_ff = 0;             // --d-model alone: the architecture's default d_ff
    config_finalize(c);
    int v[PLAN_SHAPE_FLAGS] = {c->n_layer, c->n_head, c->n_kv_head, c->d_model, c->d_ff, c->vocab, c->seq_len};
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++)
        if (v[k] < SIZE_FLAGS[k].lo || v[k] > SIZE_FLAGS[k].hi) {
            snprintf(err, err_len, "%s %d is out of range (%ld .. %ld, the trainer's limits)", SIZE_FLAGS[k].flag, v[k],
                     SIZE_FLAGS[k].lo, SIZE_FLAGS[k].hi);
            return -1;
        }
    if (c->d_model % c->n_head) {
        snprintf(err, err_len, "--d-model %d must be a multiple of --n-head %d", c->d_model, c->n_head);
        return -1;
    }
    if (c->n_head % c->n_kv_head) {
        snprintf(err, err_len, "--n-head %d must be a multiple of --n-kv-head %d", c->n_head, c->n_kv_head);
        return -1;
    }
    c->dp = c->tp = c->pp = c->vpp = c->micro_batch = c->cp = c->cp_ulysses = 1;
    c->schedule = SCHED_1F1B;
    return 0;
}

typedef struct {
    int tp, pp, dp, vpp, micro_batch, recompute, sp, zero, schedule, attention, rms_kernel;  // -1: any
    int cp, cp_ulysses, cp_kind;  // cp_kind: CPK_*
    int pp_split;                 // --pp-split even|auto: 0 | 1
    int pp_ends;                  // --pp-split ends: the software's cut made SPLIT_ENDS (cli.h)
} PlanFilter;

static int filter_ok(int want, int v) { return want < 0 || want == v; }
static int filter_cp_ok(const PlanFilter* f, int cp, int U) {
    // --cp-kind allgather (the software's all-gather, cli.h) runs where a ring would: cp > 1 without Ulysses
    int kind = f->cp_kind == CPK_ALLGATHER && cp > 1 && U == 1 ? CPK_ALLGATHER : cp_kind_of(cp, U);
    return filter_ok(f->cp, cp) && filter_ok(f->cp_ulysses, U) && filter_ok(f->cp_kind, kind);
}

// Whether the search tries schedule `sched` for pp stages of vpp chunks each: 1F1B with one
// chunk, interleaved 1F1B with more; on a pipeline also the zero-bubble ones, ZB-H1 with one
// chunk, ZB-V and DualPipe-V with two (with one stage they are 1F1B holding more memory). GPipe holds
// more activations than 1F1B for the same bubble and is not tried.
static int plan_schedule_tried(int sched, int pp, int vpp) {
    if (sched == SCHED_1F1B) return vpp == 1;
    if (sched == SCHED_INTERLEAVED) return vpp > 1 && pp > 1;
    if (sched == SCHED_ZBH1) return vpp == 1 && pp > 1;
    if (schedule_is_v(sched)) return vpp == 2 && pp > 1;
    return 0;
}

// What the search passes over but the filters name, tried as ./train runs it (layout/args.h, schedule.h): a schedule
// on one stage (--pp 1 with --schedule, or with --vpp above 1: interleaved, the schedule ./train takes for it), and
// interleaved with one chunk a stage (--schedule interleaved --vpp 1). Without them such filters let no layout through,
// where ./train runs the layout.
static int plan_schedule_named(const PlanFilter* f, int sched, int pp, int vpp) {
    if (sched == SCHED_INTERLEAVED && f->schedule == sched && f->vpp == 1) return vpp == 1;
    if (pp > 1 || f->pp != 1) return 0;
    if (f->schedule < 0) return sched == SCHED_INTERLEAVED && f->vpp > 1;
    return schedule_is_v(sched) ? vpp == 2 : sched == SCHED_INTERLEAVED || vpp == 1;
}

// One layout of a search: its grid, pipeline, micro-batch, settings and kernels.
typedef struct {
    int dp, tp, cp, U, pp, mb;
    signed char vpp;  // (<= 64, args.h SIZE_VPP)
    signed char sched, recompute, sp, zero, attention, rms_kernel;
    // --pp-split: 0 even, 1 auto (layout/params.h chunk_cut), 2 auto tried beside the even layout: not
    // a layout of its own where it cuts as even does
    signed char pp_split;
} PlanKey;

// The most layouts one search enumerates (each key is 32 bytes; the exhaustive search keeps
// a PlanResult for each): past it the search asks for filters.
#define PLAN_MAX_LAYOUTS (1 << 23)

typedef struct {
    PlanKey* k;
    int n;
    size_t cap;
} PlanKeys;

static void plan_keys_push(PlanKeys* keys, PlanKey key) {
    if (keys->n == PLAN_MAX_LAYOUTS)
        fail("the search has more than %d layouts: narrow it with filters (--tp, --pp, --micro-batch, --cp, ...)",
             PLAN_MAX_LAYOUTS);
    keys->k = (PlanKey*)xgrow(keys->k, sizeof(PlanKey), (size_t)keys->n + 1, &keys->cap, "listing layouts");
    keys->k[keys->n++] = key;
}

// Every recomputation, SP, ZeRO and kernel choice of one grid and pipeline (key's other
// fields) that the filter lets through. Software with one attention kernel of its own (this
// trainer, own_kernels: its flash kernel) lists it once, as flash2, unless the filter asks
// for another. FlashAttention in Triton is listed only when the filter asks for it. The Scaling
// codebase's options (scaling_options): ZeRO 0/1 and no or full recomputation unless named.
static void plan_keys_settings(PlanKey key, const PlanFilter* f, const PlanSetup* base, PlanKeys* keys) {
    int own_kernels = base->own_kernels;
    for (int rc = RECOMPUTE_NONE; rc < N_PLAN_RECOMPUTE; rc++)
        for (int sp = 0; sp <= (key.tp > 1); sp++)
            for (int zero = 0; zero <= 3; zero++)
                for (int attn = 0; attn < N_ATTN; attn++)
                    for (int rms = 0; rms <= 1; rms++) {
                        if (rc > RECOMPUTE_FULL && f->recompute != rc) continue;  // frameworks' policies: by name only
                        if (!filter_ok(f->recompute, rc) || !filter_ok(f->sp, sp) || !filter_ok(f->zero, zero) ||
                            !filter_ok(f->attention, attn) || !filter_ok(f->rms_kernel, rms)) continue;
                        if (zero > 0 && key.dp * key.cp == 1) continue;  // nothing to shard
                        if (base->scaling_options && ((zero > 1 && f->zero != zero) ||
                                                      (rc == RECOMPUTE_SELECTIVE && f->recompute != rc)))
                            continue;  // not in the Scaling codebase: by name only
                        if (own_kernels && attn != ATTN_FLASH2 && f->attention != attn) continue;
                        if ((attn == ATTN_FLASH_TRITON || attn == ATTN_FLASH3) && f->attention != attn)
                            continue;  // by name only
                        key.recompute = rc, key.sp = sp, key.zero = zero, key.attention = attn, key.rms_kernel = rms;
                        plan_keys_push(keys, key);
                    }
}

// Every layout and kernel choice of c on `gpus` GPUs that passes the filter, in the order
// the search has always listed them. Context parallelism: cp a power of two, with each
// power-of-two Ulysses degree U <= cp (U = 1: ring, U = cp: Ulysses, between: 2D).
static PlanKeys plan_keys(const ModelConfig* c, int gpus, int global_batch, int gpus_per_node, const PlanSetup* base,
                          const PlanFilter* f) {
    PlanKeys keys = {NULL, 0, 0};
    int places = c->n_layer + (base->pipe_split == SPLIT_ENDS ? 2 : 0);  // what the pipeline cut splits
    for (int tp = 1; tp <= gpus; tp++) {
        if (gpus % tp || !filter_ok(f->tp, tp)) continue;
        if (f->tp < 0 && tp > gpus_per_node) continue;  // tensor parallelism stays inside a node unless asked for
        // 64-bit doubling loops: a bound near 2^30 (the flags' maxima) must not overflow to 0
        for (long long cp2 = 1; cp2 <= gpus / tp && (cp2 == 1 || base->context_parallel); cp2 *= 2)
            for (long long U2 = 1; U2 <= cp2; U2 *= 2) {
                int cp = (int)cp2, U = (int)U2;
                if ((gpus / tp) % cp || !filter_cp_ok(f, cp, U)) continue;
                for (int pp = 1; pp <= gpus / (tp * cp); pp++) {
                    if ((gpus / (tp * cp)) % pp || !filter_ok(f->pp, pp) || pp > places) continue;
                    int dp = gpus / (tp * cp * pp);
                    if (!filter_ok(f->dp, dp) || global_batch % dp) continue;
                    for (long long mb2 = 1; mb2 <= global_batch / dp; mb2 *= 2) {
                        int mb = (int)mb2;
                        if ((global_batch / dp) % mb || !filter_ok(f->micro_batch, mb)) continue;
                        for (int vpp = 1; vpp * pp <= places; vpp++) {
                            // (chunks on one stage: only under --pp 1, plan_schedule_named)
                            int one_stage_chunks = vpp > 1 && pp == 1 && f->pp != 1;
                            if (!filter_ok(f->vpp, vpp) || one_stage_chunks || (vpp > 1 && places % (pp * vpp)))
                                continue;
                            if (vpp > SIZE_FLAGS[SIZE_VPP].hi ||
                                (long long)global_batch / dp / mb * pp * vpp > PLAN_MAX_PAIRS)
                                break;
                            for (int sched = 0; sched < N_SCHEDULES; sched++) {
                                if (!filter_ok(f->schedule, sched) ||
                                    !(plan_schedule_tried(sched, pp, vpp) || plan_schedule_named(f, sched, pp, vpp)))
                                    continue;
                                if (base->scaling_options && sched != SCHED_1F1B && f->schedule != sched &&
                                    f->vpp < 0)
                                    continue;  // the Scaling codebase runs 1F1B: another by name only
                                PlanKey key = {dp, tp, cp, U, pp, mb, (signed char)vpp, (signed char)sched,
                                               0,  0,  0,  0, 0,  0};
                                // the even cut; under --pp-split auto a pipeline is cut by cost alone (below: once,
                                // even where that cut is the even one)
                                if (pp == 1 || filter_ok(f->pp_split, 0)) plan_keys_settings(key, f, base, &keys);
                                // the trainer's cut by cost (other software cuts its own way); beside
                                // the even cut, kept only where it differs (PLAN_UNEVEN_ONLY)
                                if (pp > 1 && base->pipe_split == SPLIT_LAYERS && filter_ok(f->pp_split, 1))
                                    key.pp_split = filter_ok(f->pp_split, 0) ? 2 : 1,
                                    plan_keys_settings(key, f, base, &keys);
                            }
                        }
                    }
                }
            }
    }
    return keys;
}

// The search's bound: one this machine would take more than plan_max_search_s for is refused,
// judged by its own pace, not a model of it: after each block, each pass projects its end from
// the share of its layouts done in the time they took (its first blocks' cost says little: a
// prediction is ~0.1 ms when its pipeline's counts are cached and ~20 ms when not, so layouts
// timed apart would misjudge by 100x), added to the time since the search began. A search is
// refused once its projection passes the limit (checked every 20 ms past PLAN_PACE_AFTER_S, so
// the pace is measured over thousands of layouts), so never much past the limit. Measured (2
// cores, loaded): llama-65b --n-layer 512 on 1024 GPUs (2.2M layouts) refused after 5.0 s at a
// projected 20 min (it had not answered in 30 min); on 16 GPUs (136k layouts) it ends in 39 s.
// A stop signal (plan_main installs the handler) ends it at once, exit 128 + the signal, the
// CSV's temporary gone.
#define PLAN_PACE_AFTER_S 5.0
static double plan_max_search_s = 600;  // --max-search-min (default 10)
static double plan_started_s = -1;  // when the search began (plan_main; < 0: no bound, as in the tests)

// A long search says how far it is: a line on stderr every PLAN_PROGRESS_S seconds (only under plan_main, whose
// start sets plan_started_s), naming its phase and the layouts done of the phase's count. Each phase sets
// plan_progress (done_before: what the phase had done before this pass of plan_parallel_for began).
#define PLAN_PROGRESS_S 5.0
static struct {
    const char* phase;  // what is being done to the layouts ("bounded", "timed", ...)
    long done_before, n;
    double last_s;  // when the last line was printed (or the search began)
} plan_progress = {"predicted", 0, 0, -1};

static void plan_progress_set(const char* phase, long done_before, long n) {
    plan_progress.phase = phase, plan_progress.done_before = done_before, plan_progress.n = n;
}

// Print a progress line if PLAN_PROGRESS_S have passed since the last (done: of this pass).
static void plan_progress_tick(long done) {
    double now = now_s();
    if (plan_started_s < 0) return;
    if (plan_progress.last_s < plan_started_s) plan_progress.last_s = plan_started_s;
    if (now - plan_progress.last_s < PLAN_PROGRESS_S) return;
    plan_progress.last_s = now;
    fflush(stdout);  // what the search printed before comes first
    long all = plan_progress.done_before + done, n = plan_progress.n > 0 ? plan_progress.n : 1;
    fprintf(stderr, "plan: %ld of %ld %s (%.0f%%), %.0f s; Ctrl-C stops\n", all, plan_progress.n,
            plan_progress.phase, 100.0 * all / n, now - plan_started_s);
    fflush(stderr);
}

typedef struct {
    void (*body)(int i, void* arg);
    void* arg;
    int n, block, next, done, finished, over, paced;  // paced: over by its projection (else by the time spent)
    double t0, projected_s;
} PlanWork;

// Whether w's projection (the time since the search began, and the rest of this pass at its pace
// so far) passes the limit; the first to see it sets over and projected_s.
// The pace is this pass's own, over PLAN_PACE_AFTER_S of it (a later pass of --tokens' batches was
// judged from its first 20 ms with no layout done: "0 done in 0 s", refused); past the limit in all,
// the search is over whatever the pace.
static int plan_over_limit(PlanWork* w) {
    int done = __atomic_load_n(&w->done, __ATOMIC_RELAXED);
    double now = now_s(), projected = now - plan_started_s + (now - w->t0) * (w->n - done) / (done ? done : 1);
    int paced = done > 0 && now - w->t0 > PLAN_PACE_AFTER_S;
    if (plan_started_s >= 0 && ((paced && projected > plan_max_search_s) || now - plan_started_s > plan_max_search_s) &&
        !__atomic_exchange_n(&w->over, 1, __ATOMIC_RELAXED))
        w->paced = paced && projected > plan_max_search_s, w->projected_s = w->paced ? projected : now - plan_started_s;
    return __atomic_load_n(&w->over, __ATOMIC_RELAXED);
}

static void* plan_worker(void* p) {
    PlanWork* w = (PlanWork*)p;
    for (int start; (start = __atomic_fetch_add(&w->next, w->block, __ATOMIC_RELAXED)) < w->n;)
        for (int i = start; i < w->n && i < start + w->block; i++) {
            if (__atomic_load_n(&w->over, __ATOMIC_RELAXED) || stop_signal) break;
            w->body(i, w->arg);
            __atomic_add_fetch(&w->done, 1, __ATOMIC_RELAXED);
        }
    pipe_counts_release();
    __atomic_add_fetch(&w->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

// Run body(i, arg) for every i in [0, n) on all cores: threads of its own (joined before it
// returns, so a process may fork after a search) take blocks of `block` indices in turn, while
// this one watches: a stop or a projection past the limit ends the search at once, even inside
// a layout that takes seconds (pp 512 over 2048 micro-batches).
static void plan_parallel_for(int n, int block, void (*body)(int i, void* arg), void* arg) {
    PlanWork w = {body, arg, n, block, 0, 0, 0, 0, 0, now_s(), 0};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    if ((long)n_threads * block > n) n_threads = (n + block - 1) / block;
    pthread_t threads[64];
    int started = 0;
    for (; started < n_threads; started++)
        if (pthread_create(&threads[started], NULL, plan_worker, &w)) break;  // fewer threads: the work still gets done
    if (!started) plan_worker(&w);  // no thread at all: this one works
    while (__atomic_load_n(&w.finished, __ATOMIC_ACQUIRE) < started && !stop_signal && !plan_over_limit(&w)) {
        usleep(20000);
        plan_progress_tick(__atomic_load_n(&w.done, __ATOMIC_RELAXED));
    }
    stop_if_signalled("searching layouts");
    if (w.over && w.paced)
        fail("--plan: this search would take about %.3g min on this machine (a pass of %d layouts, %d done in %.0f s, "
             "on %d threads); the limit is %.3g min (--max-search-min): narrow it (--tp, --pp, --micro-batch, ...)",
             w.projected_s / 60, n, w.done, now_s() - w.t0, started, plan_max_search_s / 60);
    if (w.over)  // the limit passed before the pace was measured (a limit of seconds): "would take about 0 min" said
        fail("--plan: this search passed its limit of %.3g min (--max-search-min) after %.1f s, %d of a pass of %d "
             "layouts done on %d threads: narrow it (--tp, --pp, --micro-batch, ...) or raise the limit",
             plan_max_search_s / 60, w.projected_s, w.done, n, started);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
}

// Predict the layout `key` of c (timing: PLAN_TIME_*, predict.h). Returns plan_predict_ex's.
static int plan_predict_key(const ModelConfig* c, const PlanKey* key, int global_batch, int gpus_per_node,
                            const DeviceProfile* d, const PlanSetup* base, int timing, PlanResult* r) {
    ModelConfig lc = *c;
    lc.dp = key->dp, lc.tp = key->tp, lc.cp = key->cp, lc.cp_ulysses = key->U, lc.pp = key->pp, lc.vpp = key->vpp;
    lc.micro_batch = key->mb, lc.schedule = key->sched, lc.recompute = key->recompute, lc.sp = key->sp,
    lc.zero = key->zero, lc.pp_split = key->pp_split != 0;
    PlanSetup k = *base;
    k.attention = key->attention, k.rms_kernel = key->rms_kernel;
    int uneven = key->pp_split == 2 ? PLAN_UNEVEN_ONLY : 0;
    return plan_predict_ex(&lc, &k, global_batch, gpus_per_node, d, timing | uneven, r);
}

// What a parallel pass over a search's layouts needs: the search, and where each result goes.
typedef struct {
    const ModelConfig* c;
    const PlanKeys* keys;
    const int* order;  // the layouts to predict, as indices into keys (NULL: all, in order)
    int global_batch, gpus_per_node, timing;
    const DeviceProfile* d;
    const PlanSetup* base;
    PlanResult* results;  // one per index i of the pass
    char* valid;  // the same; NULL: not wanted
} PlanPass;

static void plan_pass_body(int i, void* arg) {
    PlanPass* p = (PlanPass*)arg;
    const PlanKey* key = &p->keys->k[p->order ? p->order[i] : i];
    int rc = plan_predict_key(p->c, key, p->global_batch, p->gpus_per_node, p->d, p->base, p->timing, &p->results[i]);
    if (p->valid) p->valid[i] = rc == 0;
}

// Every valid layout and kernel choice of c on `gpus` GPUs that passes the filter, predicted
// with base's rank order and pipeline cut (the ones that fit timed); returns the count, *out
// a malloc'ed array the caller frees. All cores predict.
static int plan_enumerate(const ModelConfig* c, int gpus, int global_batch, int gpus_per_node, const DeviceProfile* d,
                          const PlanSetup* base, const PlanFilter* f, PlanResult** out) {
    PlanKeys keys = plan_keys(c, gpus, global_batch, gpus_per_node, base, f);
    enum { BLOCK = 1 << 16 };  // layouts predicted at a time: only the valid ones are kept
    PlanResult* block = (PlanResult*)xmalloc(sizeof(PlanResult) * BLOCK);
    char valid[BLOCK];
    PlanResult* all = NULL;
    int n = 0;
    for (int start = 0; start < keys.n; start += BLOCK) {
        int count = keys.n - start < BLOCK ? keys.n - start : BLOCK, n_valid = 0;
        PlanKeys part = {keys.k + start, count, (size_t)count};
        PlanPass pass = {c, &part, NULL, global_batch, gpus_per_node, PLAN_TIME_FITTING, d, base, block, valid};
        plan_progress_set("layouts predicted", start, keys.n);
        plan_parallel_for(count, 64, plan_pass_body, &pass);
        for (int i = 0; i < count; i++) n_valid += valid[i];
        all = (PlanResult*)realloc(all, sizeof(PlanResult) * (n + n_valid + 1));
        if (!all) fail("out of memory");
        for (int i = 0; i < count; i++)
            if (valid[i]) all[n++] = block[i];
    }
    if (!all) all = (PlanResult*)xmalloc(sizeof(PlanResult));
    free(block), free(keys.k);
    *out = all;
    return n;
}

// Rank class of a layout: 0 fits with room, 1 fits but its predicted peak is within the memory
// model's uncertainty of the device's memory (PLAN_MEM_UNCERTAINTY, memory.h; this trainer's
// own buffers are counted exactly), 2 does not fit.
static int plan_tier(const PlanResult* r) {
    if (!r->fits) return 2;
    return !r->setup.own_buffers && r->mem_margin < PLAN_MEM_UNCERTAINTY * (r->mem_total + r->mem_margin) ? 1 : 0;
}

// The order of the table: layouts that fit with room, then those that fit within the memory
// uncertainty, then the rest; in each by throughput, ties to the simpler layout, then to the
// smaller memory, then by the layout itself (so the order is total: the same rows whatever
// the order they were predicted in).
static int plan_compare(const void* pa, const void* pb) {
    const PlanResult *a = (const PlanResult*)pa, *b = (const PlanResult*)pb;
    int ta = plan_tier(a), tb = plan_tier(b);
    if (ta != tb) return ta - tb;
    double ra = a->tokens_per_s_per_gpu, rb = b->tokens_per_s_per_gpu;
    if (fabs(ra - rb) > 1e-9 * (ra + rb)) return ra < rb ? 1 : -1;
    int ka = a->zero + 4 * a->recompute + 32 * a->sp, kb = b->zero + 4 * b->recompute + 32 * b->sp;
    if (ka != kb) return ka - kb;
    if (a->mem_total != b->mem_total) return a->mem_total < b->mem_total ? -1 : 1;
    int la[] = {a->tp,
                a->cp,
                a->cp_ulysses,
                a->pp,
                a->dp,
                a->micro_batch,
                a->vpp,
                a->schedule,
                a->setup.attention,
                a->setup.rms_kernel};
    int lb[] = {b->tp,
                b->cp,
                b->cp_ulysses,
                b->pp,
                b->dp,
                b->micro_batch,
                b->vpp,
                b->schedule,
                b->setup.attention,
                b->setup.rms_kernel};
    for (int i = 0; i < (int)(sizeof(la) / sizeof(la[0])); i++)
        if (la[i] != lb[i]) return la[i] - lb[i];
    return 0;
}

static void plan_sort(PlanResult* r, int n) { qsort(r, n, sizeof(PlanResult), plan_compare); }

// A layout of the fast search's first pass: its rank class and the most throughput it can
// reach (plan_pipeline_bound).
typedef struct {
    int key, tier;
    double bound;
} PlanCandidate;

static int candidate_compare(const void* pa, const void* pb) {
    const PlanCandidate *a = (const PlanCandidate*)pa, *b = (const PlanCandidate*)pb;
    if (a->tier != b->tier) return a->tier - b->tier;
    if (a->bound != b->bound) return a->bound < b->bound ? 1 : -1;
    return a->key - b->key;
}
// The search's first pass: each layout's rank class (-1: it cannot run) and throughput bound.
typedef struct {
    PlanPass pass;
    PlanCandidate* cand;
} PlanBoundPass;

static void plan_bound_body(int i, void* arg) {
    PlanBoundPass* b = (PlanBoundPass*)arg;
    const PlanPass* p = &b->pass;
    PlanResult r;
    int ok =
        plan_predict_key(p->c, &p->keys->k[i], p->global_batch, p->gpus_per_node, p->d, p->base, p->timing, &r) == 0;
    b->cand[i].key = i, b->cand[i].tier = ok ? plan_tier(&r) : -1,
    b->cand[i].bound = ok && r.fits ? r.tokens_per_s_per_gpu : 0;
}

// Keep the `cap` largest values pushed: a min-heap in h[0..*n).
static void heap_keep_largest(double* h, int* n, int cap, double v) {
    if (*n == cap && v <= h[0]) return;
    int i;
    if (*n < cap) {  // sift up from the end
        for (i = (*n)++; i > 0 && h[(i - 1) / 2] > v; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    } else {  // replace the smallest, sift down
        for (i = 0;;) {
            int l = 2 * i + 1, r = l + 1, m = l < *n && h[l] < v ? l : i;
            if (r < *n && h[r] < (m == i ? v : h[m])) m = r;
            if (m == i) break;
            h[i] = h[m], i = m;
        }
    }
    h[i] = v;
}

// The first `top` rows of the exhaustive search (plan_enumerate, plan_sort), sorted, in *out
// (malloc'ed; returns their count, which may be more than top), and *n_valid, *n_fit as the
// exhaustive search counts them. Without playing every schedule: a first pass predicts every
// layout's memory and an upper bound on its throughput (plan_pipeline_bound: its busiest
// stage never waits); the second plays the schedules of the fitting ones, best bound first
// in each rank class, until no layout left can reach the table: `top` layouts of a better
// class, or that many of its own class faster than the best bound left (by more than
// plan_compare's ties). All cores predict.
static int plan_search(const ModelConfig* c, int gpus, int global_batch, int gpus_per_node, const DeviceProfile* d,
                       const PlanSetup* base, const PlanFilter* f, int top, PlanResult** out, int* n_valid,
                       int* n_fit) {
    PlanKeys keys = plan_keys(c, gpus, global_batch, gpus_per_node, base, f);
    PlanCandidate* cand = (PlanCandidate*)xmalloc(sizeof(PlanCandidate) * (keys.n ? keys.n : 1));
    PlanBoundPass bounds = {{c, &keys, NULL, global_batch, gpus_per_node, PLAN_TIME_BOUND, d, base, NULL, NULL}, cand};
    plan_progress_set("layouts bounded (memory, best throughput)", 0, keys.n);
    plan_parallel_for(keys.n, 64, plan_bound_body, &bounds);
    int valid = 0, fit = 0;
    for (int i = 0; i < keys.n; i++) {
        valid += cand[i].tier >= 0;
        if (cand[i].tier == 0 || cand[i].tier == 1) cand[fit++] = cand[i];
    }
    *n_valid = valid, *n_fit = fit;
    if (fit == 0) {  // the table shows the layouts that do not fit, untimed: the exhaustive search's
        free(cand), free(keys.k);
        int n = plan_enumerate(c, gpus, global_batch, gpus_per_node, d, base, f, out);
        plan_sort(*out, n);
        return n;
    }
    qsort(cand, fit, sizeof(PlanCandidate), candidate_compare);
    PlanResult* rows = (PlanResult*)xmalloc(sizeof(PlanResult) * fit);
    int cap = top < fit ? top : fit;
    double* heap = (double*)xmalloc(sizeof(double) * cap);  // the best throughputs of this class's rows
    int n = 0, above = 0, n_heap = 0, tier = cand[0].tier, order[16];  // above: candidates of better classes
    while (n < fit) {
        if (cand[n].tier != tier) above = n, n_heap = 0, tier = cand[n].tier;  // all of the better class are rows
        if (above >= top) break;
        if (n_heap == top - above && heap[0] * (1 - 1e-6) > cand[n].bound) break;
        int end = n;
        while (end < fit && end < n + 16 && cand[end].tier == tier) end++;
        for (int j = n; j < end; j++) order[j - n] = cand[j].key;
        PlanPass pass = {c, &keys, order, global_batch, gpus_per_node, PLAN_TIME_ALL, d, base, rows + n, NULL};
        plan_progress_set("fitting layouts timed (best bound first; the search ends early)", n, fit);
        plan_parallel_for(end - n, 1, plan_pass_body, &pass);
        for (; n < end; n++) heap_keep_largest(heap, &n_heap, top - above, rows[n].tokens_per_s_per_gpu);
    }
    free(heap), free(cand), free(keys.k);
    plan_sort(rows, n);
    *out = rows;
    return n;
}

// Index of the best fitting layout satisfying the filter in a sorted array, or -1.
static int plan_best(const PlanResult* r, int n, const PlanFilter* f) {
    for (int i = 0; i < n; i++) {
        const PlanResult* p = &r[i];
        if (!p->fits) return -1;
        if (filter_ok(f->tp, p->tp) && filter_ok(f->pp, p->pp) && filter_ok(f->dp, p->dp) &&
            filter_ok(f->pp_split, p->pp_split) && filter_ok(f->vpp, p->vpp) &&
            filter_ok(f->micro_batch, p->micro_batch) &&
            filter_ok(f->recompute, p->recompute) && filter_ok(f->sp, p->sp) && filter_ok(f->zero, p->zero) &&
            filter_ok(f->schedule, p->schedule) && filter_ok(f->attention, p->setup.attention) &&
            filter_ok(f->rms_kernel, p->setup.rms_kernel) && filter_cp_ok(f, p->cp, p->cp_ulysses))
            return i;
    }
    return -1;
}

static PlanFilter plan_filter_any(void) {
    PlanFilter f = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0};
    return f;
}

// "ring", "ulysses", "2d" with its Ulysses degree ("2d u2"), "allgather", or "-" without context parallelism.
static const char* cp_kind_str(const PlanResult* p, char* buf, size_t len) {
    int kind = cp_kind_run(p->cp, p->cp_ulysses, &p->setup);
    if (kind == CPK_2D) snprintf(buf, len, "2d u%d", p->cp_ulysses);
    else snprintf(buf, len, "%s", kind == CPK_NONE ? "-" : CPK_NAMES[kind]);
    return buf;
}

#endif
