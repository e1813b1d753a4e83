// params.h: which parameter tensors a rank holds, where they sit in its one buffer,
// and how each maps to the full (unsharded) model. Shared by both builds.
//
// All of a rank's parameters live in one contiguous float buffer (llm.c style), and
// the gradients in a second buffer of the same layout; named views (Weights) point
// into either. The canonical full-model vector (every tensor unsharded, in the order
// of a 1-rank run) is the layout-independent form used by checkpoints and by the
// tests that compare layouts.
//
// Tensor parallelism (Megatron-LM): column-parallel matrices (qkv, fc, the vocabulary
// embedding) are split by output rows; row-parallel ones (attention proj, mlp proj)
// by input columns. A rows-split tensor may be made of blocks split separately: qkv
// is [q | k | v], so tp rank r holds q, k and v of its own heads.
#ifndef PARAMS_H
#define PARAMS_H

#include "layout/config.h"

enum { SHARD_NONE, SHARD_ROWS, SHARD_COLS };

// Per-layer tensor kinds, in the order of LayerW's fields.
enum {
    P_LN1W,
    P_LN1B,
    P_QKVW,
    P_QKVB,
    P_ATTPROJW,
    P_ATTPROJB,
    P_LN2W,
    P_LN2B,
    P_FCW,
    P_FCB,
    P_FCPROJW,
    P_FCPROJB,
    N_LAYER_KINDS
};
// Model-level kinds, in the order of Weights' first fields.
enum { P_WTE, P_WPE, P_LNFW, P_LNFB, P_HEAD, N_MODEL_KINDS };

typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerW;
typedef struct {
    float *wte, *wpe, *lnfw, *lnfb, *head;  // head == wte for GPT-2 (tied); NULL where not on this rank
    LayerW* layer;                          // [n_layer]; pointers NULL for layers on other stages
} Weights;

typedef struct {
    char name[24];
    int layer;               // -1 for model-level tensors
    int kind;                // P_* of its level
    int rows, cols;          // full shape, row-major
    int shard;               // SHARD_*
    int n_blocks, block_rows[3];
    int sp_partial;          // with --sp its gradient is a partial sum over the tp group
    int decay;               // AdamW weight decay applies (matrices only)
    int owner;               // this copy counts for the gradient norm and checkpoints
    size_t full_offset;      // offset in the canonical full-model vector
    size_t offset, size;     // offset and size in this rank's buffer
} Tensor;

typedef struct {
    int n;
    Tensor t[8 + 12 * 512];  // model-level + per-layer tensors (n_layer <= 512)
    size_t n_local;          // floats this rank holds
    size_t n_padded;         // n_local rounded up to a multiple of dp (equal ZeRO shards)
    size_t n_full;           // floats in the full model
    int chunk_layer0[1025];  // chunk g holds layers [chunk_layer0[g], chunk_layer0[g+1])
    int n_chunks;
    int has_embed, has_head; // this rank holds global chunk 0 / the last chunk
} ParamLayout;

// Layers split into pp*vpp chunks as evenly as possible (the first chunks get one
// more layer when it does not divide).
static int chunk_layer_count(int n_layer, int n_chunks, int g) { return n_layer / n_chunks + (g < n_layer % n_chunks); }

// Global index of local chunk c of `stage`. Loop: g = c*pp + stage. V (ZB-V, DualPipe-V; two chunks):
// stage s holds chunks s and 2pp-1-s, so the model goes down the stages and back up, and
// stage 0 holds both the first and the last chunk.
static int chunk_global(int kind, int pp, int stage, int c) {
    if (schedule_is_v(kind)) return c == 0 ? stage : 2 * pp - 1 - stage;
    return c * pp + stage;
}
static int chunk_stage(int kind, int pp, int g) {
    if (schedule_is_v(kind)) return g < pp ? g : 2 * pp - 1 - g;
    return g % pp;
}
static int chunk_local(int kind, int pp, int g) { return schedule_is_v(kind) ? g >= pp : g / pp; }

// What --pp-split auto balances. From the planner's time and memory model (planner/predict.h
// plan_stage_model: the layer, embedding and head times it predicts the step with, the bytes of the
// trainer's own buffers): the seconds of a micro-batch's forward and backward of a layer, of the
// embedding and of the head with its loss on one rank; the bytes a stage holds without layers
// (mem_base[s]: the ends' weights and optimizer state, the buffers every stage allocates) and per
// layer of global chunk g (mem_layer[g]: its weights, gradients and optimizer state, its
// activations in every slot the schedule keeps for the chunk), within mem_limit (0: none).
typedef struct StageModel {
    double layer, embed, head;
    double* mem_base;   // [pp]
    double* mem_layer;  // [pp * vpp]
    double mem_limit;
    const char* measured;  // the trace (--pp-costs) the times come from; NULL: the planner's
    const int* cut;  // counts[pp * vpp] chunk_cut found by this model, kept (the planner's prediction cuts once)
} StageModel;

// Without a StageModel: the cost of a stage's work for one token, forward and backward, in FLOPs
// as PaLM counts them (config_flops_per_token): a layer 6 x its matmul parameters + 12dT of
// attention; the head 6Vd + the loss's softmax and its gradient (about 10 V: max, exp, sum, the
// gradient; memory-bound, so counted at 10 FLOPs an element, the CPU and GPU builds' elementwise
// rate being of that order against their matmul rate); the embedding's gather and scatter-add 4d.
static void cut_costs(const ModelConfig* c, double* layer, double* embed, double* head) {
    const StageModel* sm = c->stage_model;
    if (sm) { *layer = sm->layer, *embed = sm->embed, *head = sm->head; return; }
    double d = c->d_model, V = c->vocab;
    *layer = 6.0 * (config_matmul_params(c) - V * d) / c->n_layer + 12.0 * d * c->seq_len;
    *head = 6.0 * V * d + 10.0 * V, *embed = 4.0 * d;
}
// Stage s's cost (cut_costs' unit) and, with a StageModel, its bytes (mem may be NULL) under the cut
// counts[g] (layers of global chunk g): its chunks' layers, and the embedding and head where chunks 0
// and n-1 sit.
static void stage_cost(const ModelConfig* c, int pp, int vpp, const int* counts, int s, double layer, double embed,
                       double head, double* cost, double* mem) {
    const StageModel* sm = c->stage_model;
    int n = pp * vpp;
    *cost = 0;
    if (mem) *mem = sm ? sm->mem_base[s] : 0;
    for (int j = 0; j < vpp; j++) {  // the stage's chunks, in increasing g
        int g = chunk_global(c->schedule, pp, s, j);
        *cost += counts[g] * layer;
        if (mem && sm) *mem += counts[g] * sm->mem_layer[g];
    }
    if (chunk_stage(c->schedule, pp, 0) == s) *cost += embed;
    if (chunk_stage(c->schedule, pp, n - 1) == s) *cost += head;
}
static void stage_costs(const ModelConfig* c, int pp, int vpp, const int* counts, double* cost, double* mem) {
    double layer, embed, head;
    cut_costs(c, &layer, &embed, &head);
    for (int s = 0; s < pp; s++) stage_cost(c, pp, vpp, counts, s, layer, embed, head, &cost[s], mem ? &mem[s] : NULL);
}
// A cut's score from its stages' costs and bytes: the bytes over the limit summed over the stages, the
// slowest stage's cost, the sum of squares of the costs.
typedef struct { double over, slowest, squares; } CutScore;
static double bytes_over(double mem, double limit) { return limit > 0 && mem > limit ? mem - limit : 0; }
static CutScore cut_score(const ModelConfig* c, int pp, const double* cost, const double* mem) {
    CutScore k = {0, 0, 0};
    double limit = c->stage_model ? c->stage_model->mem_limit : 0;
    for (int s = 0; s < pp; s++) {
        if (cost[s] > k.slowest) k.slowest = cost[s];
        k.squares += cost[s] * cost[s];
        k.over += bytes_over(mem[s], limit);
    }
    return k;
}
// Order of cuts: less memory over the limit first, then the slowest stage, then the sum of squares
// (the others as even as can be); equal within rounding (a trial's score is the cut's, updated).
static int cut_better(CutScore a, CutScore b) {
    if (fabs(a.over - b.over) > 1e-12 * fmax(a.over, b.over)) return a.over < b.over;
    if (a.slowest < b.slowest * (1 - 1e-12)) return 1;
    return a.slowest <= b.slowest * (1 + 1e-12) && a.squares < b.squares * (1 - 1e-12);
}

// Moving a layer from chunk a (on stage sa) to chunk b (on sb), from the cut whose stages cost cost[]
// and hold mem[] (score cur): the move changes those two stages only, by a layer's cost and the two
// chunks' bytes a layer (ml; NULL: none). top[3]: the three slowest stages. The trial's score, in O(1).
static CutScore cut_trial(const ModelConfig* c, const double* cost, const double* mem, const double* ml,
                          const int* top, double layer, CutScore cur, int a, int sa, int b, int sb) {
    double limit = c->stage_model ? c->stage_model->mem_limit : 0;
    double ca = cost[sa], cb = cost[sb], ma = mem[sa] - (ml ? ml[a] : 0), mb = mem[sb] + (ml ? ml[b] : 0);
    if (sa != sb) ca -= layer, cb += layer;
    else ma = mb = ma + (ml ? ml[b] : 0);
    CutScore t = {cur.over - bytes_over(mem[sa], limit) + bytes_over(ma, limit), 0,
                  cur.squares - cost[sa] * cost[sa] + ca * ca};
    if (sa != sb)
        t.over += bytes_over(mb, limit) - bytes_over(mem[sb], limit), t.squares += cb * cb - cost[sb] * cost[sb];
    for (int i = 0; i < 3; i++)  // the slowest stage the move leaves as it is
        if (top[i] >= 0 && top[i] != sa && top[i] != sb) { t.slowest = cost[top[i]]; break; }
    if (ca > t.slowest) t.slowest = ca;
    if (cb > t.slowest) t.slowest = cb;
    return t;
}

// The first best move (in the order a, then b, over the chunks) of one layer from a chunk a to any
// other b, of those cut_better than cur; -1 in *to_a where none is. Between two stages, which chunks
// move changes only the bytes over the limit, the least with the first chunk of the stage that is
// left with the fewest (give[s], one with at least 2 layers; -1: none) and the first that is then
// over by the least (take[s]): only those two are tried, and every pair within a stage.
static void cut_best_move(const ModelConfig* c, int pp, int vpp, const int* counts, const double* cost,
                          const double* mem, const int* top, double layer, CutScore cur, int* to_a, int* to_b) {
    const StageModel* sm = c->stage_model;
    const double* ml = sm ? sm->mem_layer : NULL;
    double limit = sm ? sm->mem_limit : 0;
    int n = pp * vpp, *give = (int*)xmalloc(sizeof(int) * 2 * pp), *take = give + pp;
    for (int s = 0; s < pp; s++) {
        give[s] = take[s] = -1;
        double give_over = 0, take_over = 0;
        for (int j = 0; j < vpp; j++) {  // the stage's chunks, in increasing g
            int g = chunk_global(c->schedule, pp, s, j);
            double per = ml ? ml[g] : 0, o_give = bytes_over(mem[s] - per, limit),
                   o_take = bytes_over(mem[s] + per, limit);
            if (counts[g] >= 2 && (give[s] < 0 || o_give < give_over)) give[s] = g, give_over = o_give;
            if (take[s] < 0 || o_take < take_over) take[s] = g, take_over = o_take;
        }
    }
    CutScore best = cur;
    *to_a = *to_b = -1;
    for (int a = 0; a < n; a++) {
        int sa = chunk_stage(c->schedule, pp, a), over = bytes_over(mem[sa], limit) > 0;
        // from give[sa]: to every chunk in order; from another chunk: to its own stage's (increasing g),
        // and only where that stage is over the limit (within a stage a move changes only its bytes)
        if (counts[a] < 2 || (a != give[sa] && !over)) continue;
        for (int i = 0, n_b = a == give[sa] ? n : vpp; i < n_b; i++) {
            int b = a == give[sa] ? i : chunk_global(c->schedule, pp, sa, i);
            int sb = a == give[sa] ? chunk_stage(c->schedule, pp, b) : sa;
            if (b == a || (sb != sa ? b != take[sb] : !over)) continue;
            CutScore t = cut_trial(c, cost, mem, ml, top, layer, cur, a, sa, b, sb);
            if (cut_better(t, best)) best = t, *to_a = a, *to_b = b;
        }
    }
    free(give);
}

// Layers of each global chunk (counts[pp * vpp]). --pp-split even: as even as possible.
// --pp-split auto: cut by cost (cut_score), so that every stage fits its memory where a cut can, and
// the slowest stage is as fast as it can be with at least one layer a chunk, where chunks sit where
// the schedule puts them (the loop, the V): from the even cut, move one layer from a chunk to any
// other (the cuts between them shift by one) while that makes the cut better. A heavy head on the
// last stage takes two moves to relieve (its neighbour must pass a layer on first), so any pair of
// chunks, not only neighbours (cut_best_move: each trial O(1), and between two stages only the chunks
// that can do best; the planner's search cuts hundreds of thousands of layouts). Every rank computes
// the same cut.
static void chunk_cut(const ModelConfig* c, int pp, int vpp, int* counts) {
    int n = pp * vpp;
    for (int g = 0; g < n; g++) counts[g] = chunk_layer_count(c->n_layer, n, g);
    if (!c->pp_split || n == 1 || pp < 1) return;
    const StageModel* sm = c->stage_model;
    if (sm && sm->cut) {
        memcpy(counts, sm->cut, sizeof(int) * n);
        return;
    }
    double layer, embed, head;
    cut_costs(c, &layer, &embed, &head);
    double* cost = (double*)xmalloc(sizeof(double) * 2 * pp);
    double* mem = cost + pp;
    for (int a, b;; counts[a]--, counts[b]++) {
        stage_costs(c, pp, vpp, counts, cost, mem);
        int top[3] = {-1, -1, -1};
        for (int s = 0; s < pp; s++)
            for (int i = 0; i < 3; i++)
                if (top[i] < 0 || cost[s] > cost[top[i]]) {
                    for (int j = 2; j > i; j--) top[j] = top[j - 1];
                    top[i] = s;
                    break;
                }
        cut_best_move(c, pp, vpp, counts, cost, mem, top, layer, cut_score(c, pp, cost, mem), &a, &b);
        if (a < 0) break;
    }
    free(cost);
}
// Whether some cut of c's layers could fit its stage model's memory limit (a necessary condition,
// in O(pp vpp)): each chunk holds a layer, and the layers left go, a fraction at a time if need be,
// to each stage's chunk of the fewest bytes a layer, up to the limit. No limit, or no model: 1.
static int cut_can_fit(const ModelConfig* c, int pp, int vpp) {
    const StageModel* sm = c->stage_model;
    if (!sm || sm->mem_limit <= 0) return 1;
    double room = -(double)(c->n_layer - pp * vpp);  // the layers left to place, against the room for them
    for (int s = 0; s < pp && room < 0; s++) {
        double mem = sm->mem_base[s], fewest = INFINITY;
        for (int j = 0; j < vpp; j++) {
            double per = sm->mem_layer[chunk_global(c->schedule, pp, s, j)];
            mem += per, fewest = per < fewest ? per : fewest;
        }
        if (mem > sm->mem_limit) return 0;
        room += fewest > 0 ? (sm->mem_limit - mem) / fewest : INFINITY;
    }
    return room >= 0;
}

// Whether chunk_cut cuts c's layers (its pp, vpp, schedule, pp_split and stage model) as the even cut does.
static int cut_is_even(const ModelConfig* c) {
    int n = c->pp * c->vpp, *counts = (int*)xmalloc(sizeof(int) * n), even = 1;
    chunk_cut(c, c->pp, c->vpp, counts);
    for (int g = 0; g < n; g++) even &= counts[g] == chunk_layer_count(c->n_layer, n, g);
    free(counts);
    return even;
}
static void chunk_layers(ParamLayout* P, const ModelConfig* c, int pp, int vpp) {
    int counts[1024];
    if (pp * vpp > 1024) fail("pp %d x vpp %d chunks: more than the 1024 this build supports", pp, vpp);
    P->n_chunks = pp * vpp;
    chunk_cut(c, pp, vpp, counts);
    for (int g = 0, l = 0; g <= P->n_chunks; g++) {
        P->chunk_layer0[g] = l;
        if (g < P->n_chunks) l += counts[g];
    }
}

typedef struct {
    const char* name; int kind, rows, cols, shard, n_blocks, b0, b1, b2, sp_partial, decay;
} TensorSpec;

// The tensors of one layer / of the model ends, by architecture. rows/cols/blocks are
// filled in from the shape: C d_model, F d_ff, Q = n_head*hd, K = n_kv_head*hd.
static int layer_specs(const ModelConfig* c, TensorSpec* s) {
    int C = c->d_model, F = c->d_ff, K = c->n_kv_head * (c->d_model / c->n_head), n = 0;
    if (c->arch == ARCH_GPT2) {
        s[n++] = (TensorSpec){"ln1w", P_LN1W, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"ln1b", P_LN1B, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"qkvw", P_QKVW, 3 * C, C, SHARD_ROWS, 3, C, C, C, 0, 1};
        s[n++] = (TensorSpec){"qkvb", P_QKVB, 3 * C, 1, SHARD_ROWS, 3, C, C, C, 0, 0};
        s[n++] = (TensorSpec){"attprojw", P_ATTPROJW, C, C, SHARD_COLS, 0, 0, 0, 0, 0, 1};
        s[n++] = (TensorSpec){"attprojb", P_ATTPROJB, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"ln2w", P_LN2W, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"ln2b", P_LN2B, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"fcw", P_FCW, F, C, SHARD_ROWS, 1, F, 0, 0, 0, 1};
        s[n++] = (TensorSpec){"fcb", P_FCB, F, 1, SHARD_ROWS, 1, F, 0, 0, 0, 0};
        s[n++] = (TensorSpec){"fcprojw", P_FCPROJW, C, F, SHARD_COLS, 0, 0, 0, 0, 0, 1};
        s[n++] = (TensorSpec){"fcprojb", P_FCPROJB, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
    } else {  // LLaMA: RMSNorm weights, q|k|v with grouped kv heads, SwiGLU [gate | up], no biases
        s[n++] = (TensorSpec){"rms1w", P_LN1W, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"qkvw", P_QKVW, C + 2 * K, C, SHARD_ROWS, 3, C, K, K, 0, 1};
        s[n++] = (TensorSpec){"attprojw", P_ATTPROJW, C, C, SHARD_COLS, 0, 0, 0, 0, 0, 1};
        s[n++] = (TensorSpec){"rms2w", P_LN2W, C, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
        s[n++] = (TensorSpec){"fcw", P_FCW, 2 * F, C, SHARD_ROWS, 2, F, F, 0, 0, 1};
        s[n++] = (TensorSpec){"fcprojw", P_FCPROJW, C, F, SHARD_COLS, 0, 0, 0, 0, 0, 1};
    }
    return n;
}
static int embed_specs(const ModelConfig* c, TensorSpec* s) {
    int n = 0;
    s[n++] = (TensorSpec){"wte", P_WTE, c->vocab_padded, c->d_model, SHARD_ROWS, 1, c->vocab_padded, 0, 0, 0, 1};
    if (c->arch == ARCH_GPT2) s[n++] = (TensorSpec){"wpe", P_WPE, c->seq_len, c->d_model, SHARD_NONE, 0, 0, 0, 0, 1, 1};
    return n;
}
static int head_specs(const ModelConfig* c, TensorSpec* s) {
    int n = 0;
    s[n++] = (TensorSpec){c->arch == ARCH_GPT2 ? "lnfw" : "rmsfw", P_LNFW, c->d_model, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
    if (c->arch == ARCH_GPT2) s[n++] = (TensorSpec){"lnfb", P_LNFB, c->d_model, 1, SHARD_NONE, 0, 0, 0, 0, 1, 0};
    else
        s[n++] =
            (TensorSpec){"lm_head", P_HEAD, c->vocab_padded, c->d_model, SHARD_ROWS, 1, c->vocab_padded, 0, 0, 0, 1};
    return n;
}

static size_t spec_size(const TensorSpec* s) { return (size_t)s->rows * s->cols; }
static size_t spec_local_size(const TensorSpec* s, int tp) {  // its floats on one tp rank
    return s->shard == SHARD_NONE ? spec_size(s) : spec_size(s) / tp;
}

// Why this model cannot be split over tp ranks, or NULL.
static const char* tp_check(const ModelConfig* c, int tp, char* why) {
    TensorSpec s[16];
    int n = layer_specs(c, s);
    n += embed_specs(c, s + n);
    n += head_specs(c, s + n);
    if (c->n_head % tp) { sprintf(why, "n_head %d is not divisible by tp %d", c->n_head, tp); return why; }
    if (c->n_kv_head % tp) { sprintf(why, "n_kv_head %d is not divisible by tp %d", c->n_kv_head, tp); return why; }
    for (int i = 0; i < n; i++) {
        int bad = (s[i].shard == SHARD_COLS && s[i].cols % tp);
        for (int b = 0; b < s[i].n_blocks; b++) bad |= ((&s[i].b0)[b] % tp) != 0;
        if (bad) {
            sprintf(why, "tensor %s (%d x %d) does not split over tp %d", s[i].name, s[i].rows, s[i].cols, tp);
            return why;
        }
    }
    return NULL;
}

static void add_tensor(ParamLayout* P, const TensorSpec* s, int layer, size_t full_offset, int tp, int tp_rank,
                       int owner) {
    Tensor* t = &P->t[P->n++];
    snprintf(t->name, sizeof(t->name), "%s", s->name);
    t->layer = layer, t->kind = s->kind, t->rows = s->rows, t->cols = s->cols, t->shard = s->shard;
    t->n_blocks = s->n_blocks, t->block_rows[0] = s->b0, t->block_rows[1] = s->b1, t->block_rows[2] = s->b2;
    t->sp_partial = s->sp_partial, t->decay = s->decay;
    t->owner = owner && (s->shard != SHARD_NONE || tp_rank == 0);
    t->full_offset = full_offset;
    t->offset = P->n_local;
    t->size = spec_local_size(s, tp);
    P->n_local += t->size;
}

// Build the tensor list of the rank at (stage, tp_rank). Local order: embedding (if
// chunk 0 is here), the layers of the local chunks in order, final norm and head (if
// the last chunk is here). GPT-2 ties the head to wte: when the last chunk sits on another
// stage than the first, that stage holds a second copy (not an owner), kept equal by
// summing gradients over `embed`; in ZB-V's V stage 0 holds both ends and one wte serves.
static void param_layout_build(ParamLayout* P, const ModelConfig* c, int tp, int tp_rank, int pp, int vpp, int stage,
                               int dp) {
    memset(P, 0, sizeof(*P));
    if (c->n_layer > 512) fail("n_layer %d is larger than the 512 this build supports", c->n_layer);
    chunk_layers(P, c, pp, vpp);
    TensorSpec ls[12], es[2], hs[2];
    int nl = layer_specs(c, ls), ne = embed_specs(c, es), nh = head_specs(c, hs);
    size_t layer_full = 0, embed_full = 0;
    for (int i = 0; i < nl; i++) layer_full += spec_size(&ls[i]);
    for (int i = 0; i < ne; i++) embed_full += spec_size(&es[i]);
    size_t head_full0 = embed_full + (size_t)c->n_layer * layer_full;
    P->n_full = head_full0;
    for (int i = 0; i < nh; i++) P->n_full += spec_size(&hs[i]);
    P->has_embed = chunk_stage(c->schedule, pp, 0) == stage;
    P->has_head = chunk_stage(c->schedule, pp, pp * vpp - 1) == stage;
    if (P->has_embed)
        for (size_t i = 0, off = 0; i < (size_t)ne; off += spec_size(&es[i]), i++)
            add_tensor(P, &es[i], -1, off, tp, tp_rank, 1);
    for (int ch = 0; ch < vpp; ch++) {
        int g = chunk_global(c->schedule, pp, stage, ch);
        for (int l = P->chunk_layer0[g]; l < P->chunk_layer0[g + 1]; l++) {
            size_t off = embed_full + (size_t)l * layer_full;
            for (int i = 0; i < nl; off += spec_size(&ls[i]), i++) add_tensor(P, &ls[i], l, off, tp, tp_rank, 1);
        }
    }
    if (P->has_head) {
        size_t off = head_full0;
        for (int i = 0; i < nh; off += spec_size(&hs[i]), i++) add_tensor(P, &hs[i], -1, off, tp, tp_rank, 1);
        if (c->arch == ARCH_GPT2 && !P->has_embed) add_tensor(P, &es[0], -1, 0, tp, tp_rank, 0);  // tied copy
    }
    P->n_padded = round_up(P->n_local, dp);
}

// The floats of P's largest tensor at its full shape (at least 1): the size of a buffer
// that holds any one whole tensor, for the readers and writers that go tensor by tensor.
static size_t param_layout_max_tensor(const ParamLayout* P) {
    size_t max_t = 1;
    for (int i = 0; i < P->n; i++)
        if ((size_t)P->t[i].rows * P->t[i].cols > max_t) max_t = (size_t)P->t[i].rows * P->t[i].cols;
    return max_t;
}

// --zero 3's gathered units (parallel/zero3.h): each local layer, and the model-level tensors
// before the first layer (embeddings) and after the last (final norm, head, the tied copy), each
// a range [lo, lo + n) of P's buffer (param_layout_build lays a layer's tensors out in one run).
typedef struct { size_t lo, n; int layer; } ParamUnit;
static int param_units(const ParamLayout* P, ParamUnit* u) {  // u: room for n_layer + 2
    int n = 0;
    size_t first = P->n_local, last = 0;
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        if (t->layer < 0) continue;
        if (!n || u[n - 1].layer != t->layer) u[n++] = (ParamUnit){t->offset, 0, t->layer};
        u[n - 1].n += t->size;
        if (t->offset < first) first = t->offset;
        if (t->offset + t->size > last) last = t->offset + t->size;
    }
    if (first > 0) u[n++] = (ParamUnit){0, first, -1};
    if (last < P->n_local) u[n++] = (ParamUnit){last, P->n_local - last, -1};
    return n;
}

// --zero 3's working buffers in floats beside the shards: *params the gathered weights (the
// ends, and two layer slots or, keep_gathered, every layer), *grads two layers' gradients (one
// reduce-scattered while the next is written) and the ends' gradients (each reduce-scattered in
// place; --zero 2 has the same *grads).
static void zero3_work_floats(const ParamLayout* P, int keep_gathered, size_t* params, size_t* grads) {
    ParamUnit* u = (ParamUnit*)xmalloc(sizeof(ParamUnit) * (P->n + 2));
    int n = param_units(P, u);
    size_t ends = 0, layers = 0, max_layer = 0;
    for (int i = 0; i < n; i++) {
        if (u[i].layer < 0) ends += u[i].n;
        else layers += u[i].n, max_layer = u[i].n > max_layer ? u[i].n : max_layer;
    }
    free(u);
    *params = ends + (keep_gathered ? layers : 2 * max_layer);
    *grads = ends + 2 * max_layer;
}

// --grad-reduce bf16 (the GPU build's dp all-reduce in bf16, backend/gpu/comm_nccl.h): one bf16
// scratch of GRAD_BF16_FLOATS into which each call's fp32 gradient is rounded, a chunk at a time;
// held when there are replicas to sum over. Its bytes: the start-up table's gradients and the
// planner's working buffers (planner/predict.h plan_memory).
#define GRAD_BF16_FLOATS ((size_t)1 << 24)  // 32 MiB
static size_t grad_reduce_scratch_bytes(int grad_reduce_bf16, int replicas) {
    return grad_reduce_bf16 && replicas > 1 ? 2 * GRAD_BF16_FLOATS : 0;
}

// --zero 2|3 with deferred weight passes (zb-h1, zb-v, --weight-pass deferred): each of the n_layers
// layers' norm gradients in a buffer of its own from its input pass to its unit's collective
// (parallel/zero3.h held_grads): GPT-2's two LayerNorms' weights and biases (4C), LLaMA's two RMSNorm
// weights (2C), whole on every tp rank. Counted by the start-up table and the planner alike.
static size_t zero_held_grad_floats(const ModelConfig* c, int n_layers) {
    if (c->zero < 2 || !(c->weight_pass_deferred || schedule_has_w(c->schedule))) return 0;
    return (size_t)n_layers * (c->arch == ARCH_GPT2 ? 4 : 2) * c->d_model;
}

// The largest unit --zero 1, 2 or 3 gathers on a tp rank (parallel/zero3.h), in floats: a layer,
// the embeddings, or the final norm and head with GPT-2's tied copy of wte (on a stage other than the first). Its
// collectives count in int (MPI's v-forms, NCCL's grouped sends): args.h refuses more than INT_MAX.
static size_t zero3_largest_unit(const ModelConfig* c, int tp) {
    TensorSpec specs[12];
    size_t layer = 0, embed = 0, head = 0, wte = 0;
    for (int i = 0, n = layer_specs(c, specs); i < n; i++) layer += spec_local_size(&specs[i], tp);
    for (int i = 0, n = embed_specs(c, specs); i < n; i++) embed += spec_local_size(&specs[i], tp);
    if (c->arch == ARCH_GPT2) wte = spec_local_size(&specs[0], tp);  // embed_specs' first: wte
    for (int i = 0, n = head_specs(c, specs); i < n; i++) head += spec_local_size(&specs[i], tp);
    size_t largest = layer > embed ? layer : embed;
    return head + wte > largest ? head + wte : largest;
}

// The largest ZeRO 1/2 shard of a stage's buffer over the dp x cp replicas, in floats, on a tp
// rank (grid.h's reduce-scatter and all-gather of it count in int: args.h refuses more than INT_MAX).
static size_t zero_largest_shard(const ModelConfig* c) {
    static ParamLayout P;  // (its tensor list is large for the stack)
    size_t largest = 0;
    for (int stage = 0; stage < c->pp; stage++) {
        param_layout_build(&P, c, c->tp, 0, c->pp, c->vpp, stage, c->dp * c->cp);
        size_t S = P.n_padded / (c->dp * c->cp);
        largest = S > largest ? S : largest;
    }
    return largest;
}

// Point the named views at a buffer laid out by P.
static void bind_weights(const ParamLayout* P, const ModelConfig* c, float* base, Weights* w, LayerW* layers) {
    memset(layers, 0, sizeof(LayerW) * c->n_layer);
    memset(w, 0, sizeof(*w));
    w->layer = layers;
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        float* p = base + t->offset;
        if (t->layer >= 0) ((float**)&layers[t->layer])[t->kind] = p;
        else ((float**)w)[t->kind] = p;
    }
    if (c->arch == ARCH_GPT2) w->head = w->wte;
}

// Walk the local elements of tensor t as runs that are contiguous both locally and in
// the full tensor: fn(local_offset, full_offset, length) relative to the tensor starts.
typedef void (*run_fn)(size_t local, size_t full, size_t len, void* ctx);
static void tensor_runs(const Tensor* t, int tp, int tp_rank, run_fn fn, void* ctx) {
    if (t->shard == SHARD_NONE) { fn(0, 0, t->size, ctx); return; }
    if (t->shard == SHARD_COLS) {
        size_t lc = t->cols / tp;
        for (int r = 0; r < t->rows; r++) fn((size_t)r * lc, (size_t)r * t->cols + tp_rank * lc, lc, ctx);
        return;
    }
    size_t local = 0, block0 = 0;
    for (int b = 0; b < t->n_blocks; b++) {
        size_t lr = t->block_rows[b] / tp;
        fn(local, (block0 + tp_rank * lr) * t->cols, lr * t->cols, ctx);
        local += lr * t->cols;
        block0 += t->block_rows[b];
    }
}

// Deterministic, layout-independent initialization: element i of the full model is a
// function of (seed, i) alone, so every layout starts from the same weights.
static float init_normal(uint64_t seed, size_t i) {
    Rng r;
    rng_seed(&r, seed * 0x100000001B3ull ^ (uint64_t)i);
    return rng_normal(&r);
}

typedef struct { float* dst; const Tensor* t; uint64_t seed; float std; int fill_one; int vocab_rows; } InitCtx;
static void init_run(size_t local, size_t full, size_t len, void* vctx) {
    InitCtx* c = (InitCtx*)vctx;
    for (size_t k = 0; k < len; k++) {
        size_t fi = full + k;  // index within the full tensor
        float v = c->fill_one ? 1.0f : c->std > 0 ? c->std * init_normal(c->seed, c->t->full_offset + fi) : 0.0f;
        if (c->vocab_rows && (int)(fi / c->t->cols) >= c->vocab_rows) v = 0.0f;  // padded vocabulary rows
        c->dst[local + k] = v;
    }
}

// GPT-2 init (Radford et al. 2019, as in llm.c / nanoGPT): N(0, 0.02) matrices and
// embeddings, residual projections scaled by 1/sqrt(2*n_layer), zero biases, unit norms.
static void init_params(const ParamLayout* P, const ModelConfig* c, int tp, int tp_rank, float* params) {
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        InitCtx ctx = {params + t->offset, t, c->seed, 0.0f, 0, 0};
        int k = t->kind;
        if (t->layer >= 0) {
            if (k == P_LN1W || k == P_LN2W) ctx.fill_one = 1;
            else if (k == P_QKVW || k == P_FCW) ctx.std = 0.02f;
            else if (k == P_ATTPROJW || k == P_FCPROJW) ctx.std = 0.02f / sqrtf(2.0f * c->n_layer);
        } else {
            if (k == P_LNFW) ctx.fill_one = 1;
            else if (k == P_WTE || k == P_HEAD) ctx.std = 0.02f, ctx.vocab_rows = c->vocab;
            else if (k == P_WPE) ctx.std = 0.02f;
        }
        tensor_runs(t, tp, tp_rank, init_run, &ctx);
        stop_if_signalled("initializing the weights");  // (llama-7b's: minutes on a CPU)
    }
}


// The part [a, b) of tensor t inside the local-buffer range [lo, hi); 0 if empty.
static int clip_range(const Tensor* t, size_t lo, size_t hi, size_t* a, size_t* b) {
    *a = t->offset > lo ? t->offset : lo;
    *b = t->offset + t->size < hi ? t->offset + t->size : hi;
    return *a < *b;
}

// ZeRO shard of the local buffer that this replica (of dp x cp, grid.h) updates: [lo, hi).
// Without ZeRO every rank updates its whole buffer (the replicas do the same update).
static size_t shard_floats(const ParamLayout* P, int replicas) { return P->n_padded / replicas; }
static void optimizer_range(const ParamLayout* P, const ModelConfig* c, int replica, size_t* lo, size_t* hi) {
    size_t S = shard_floats(P, c->dp * c->cp);
    *lo = c->zero ? replica * S : 0;
    *hi = c->zero ? *lo + S : P->n_local;
    if (*hi > P->n_local) *hi = P->n_local;
    if (*lo > *hi) *lo = *hi;
}

#endif
