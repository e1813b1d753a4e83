// backend/cpu/memory.h: where the CPU build keeps its bytes: fp32 buffers in host memory, the
// activation slots carved from layout/activations.h's lists, the --offload tier (backend/cpu/offload.h);
// the optimizer on them, and the batch and logits as the shared code reads them.
#ifndef CPU_MEMORY_H
#define CPU_MEMORY_H

#include "backend/backend.h"
#include "backend/cpu/kernels_cpu.h"
#include "backend/cpu/offload.h"
#include "backend/cpu/reference.h"
#include "layout/activations.h"

static void f32_copy(Model* m, float* dst, const float* src, size_t n) { memcpy(dst, src, sizeof(float) * n); }
static void f32_free(Model* m, float* p) { free(p); }
static void f32_zero(Model* m, float* p, size_t n) { memset(p, 0, sizeof(float) * n); }
static void f32_add(Model* m, float* dst, const float* src, size_t n) { add_inplace(dst, src, n); }

static void batch_ready(Model* m) { m->loss_sum = 0; }  // the kernels read the host arrays
static const int* batch_inputs(Model* m) { return m->inputs; }
static const int* batch_targets(Model* m) { return m->targets; }
static const int* window_tokens(Model* m, const int* window, int T) { return window; }
static void loss_fetch(Model* m) {}

// fp64 sums of squares, range after range (each summed in a fixed order: kernels_cpu.h).
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss) {
    *ss += m->be.reference ? ref_sum_squares(x, n) : sum_squares(x, n);
}
static void sumsq_flush(Model* m) {}
static void sumsq_finish(Model* m, int n_ranges, double* ss) {}
static void adamw_finish(Model* m) {}
// With --offload optimizer, m and v are in the file-backed tier: updated a window at a time, each
// window released after its update, so at most one is resident (elementwise: the same numbers).
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t) {
    size_t window = m->c.offload & OFFLOAD_OPTIMIZER ? OFFLOAD_WINDOW_FLOATS : b - a;
    for (size_t lo = a; lo < b; lo += window) {
        size_t n = b - lo < window ? b - lo : window, o = lo - m->opt_lo;
        float* p = m->param_shard ? m->param_shard + o : m->params + lo;  // --zero 3 holds its shard only
        (m->be.reference ? ref_adamw_update : adamw_update)(p, grad + o, m->m_state + o, m->v_state + o, n, lr,
                                                             m->c.beta1, m->c.beta2, m->c.eps, m->c.weight_decay,
                                                             decay, grad_scale, t);
        if (m->c.offload & OFFLOAD_OPTIMIZER) tier_release(m->m_state + o, sizeof(float) * n);
        if (m->c.offload & OFFLOAD_OPTIMIZER) tier_release(m->v_state + o, sizeof(float) * n);
    }
}
static void param_shards_gather(Model* m) {  // the fp32 weights are the ones the forward reads
    param_allgather(m, GROUP_DP, m->params + m->opt_lo, m->params, shard_floats(&m->P, m->L.replicas));
}

static void row_logits(Model* m, const float* lnf_row, float* row) {
    op_matmul_forward(m, row + m->vocab_start, lnf_row, m->w.head, NULL, 1, m->C, m->vocab_local);
    comm_allgather(&m->L.group[GROUP_TP], row + m->vocab_start, row,
                   m->vocab_local);  // comm: tp all-gather of one row of logits
}
static void device_sync(Model* m) {}
static void step_done(Model* m, int step) {}
static void trace_op(Model* m, int kind, int mb, int chunk, double t0) {
    trace_op_ran(m->trace, kind, mb, chunk, t0, now_s());
}

// ----------------------------------------------------------------------------
// Set-up.

// Buffers from layout/activations.h's lists, carved in order out of p: at[i] starts b[i] (NULL
// when empty). Returns the end.
static float* carve_list(float* p, const ActBuf* b, int n, float** at) {
    for (int i = 0; i < n; i++) at[i] = b[i].n ? p : NULL, p += b[i].n;
    return p;
}

// Carve a LayerActs out of p; its att (the log-sum-exp) from p (keep_lse) or the shared scratch.
static float* carve_acts(Model* m, LayerActs* a, float* p, int keep_lse) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_LA];
    float* at[N_LA];
    layer_act_bufs(&s, keep_lse, b);
    p = carve_list(p, b, N_LA, at);
    a->ln1 = at[LA_LN1], a->ln1_mean = at[LA_LN1_MEAN], a->ln1_rstd = at[LA_LN1_RSTD];
    a->qkv = at[LA_QKV];
    a->att = keep_lse ? at[LA_LSE] : m->att_scratch;
    a->atty = at[LA_ATTY];
    a->res2 = at[LA_RES2];
    a->ln2 = at[LA_LN2], a->ln2_mean = at[LA_LN2_MEAN], a->ln2_rstd = at[LA_LN2_RSTD];
    a->fch = at[LA_FCH], a->fch_act = at[LA_FCH_ACT];
    return p;
}

// The weight pass's inputs of one layer (model.h's WeightGradIn).
static float* carve_weight_grad_in(Model* m, WeightGradIn* g, float* p) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_WG];
    float* at[N_WG];
    weight_grad_in_bufs(&s, b);
    p = carve_list(p, b, N_WG, at);
    g->dy_mlp_buf = at[WG_DY_MLP], g->dy_att_buf = at[WG_DY_ATT], g->dfch = at[WG_DFCH], g->dqkv = at[WG_DQKV];
    return p;
}

static float* carve_head(Model* m, HeadActs* h, float* p) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_HD];
    float* at[N_HD];
    head_bufs(&s, b);
    p = carve_list(p, b, N_HD, at);
    h->lnf = at[HD_LNF], h->lnf_mean = at[HD_LNF_MEAN], h->lnf_rstd = at[HD_LNF_RSTD];
    h->logits = at[HD_LOGITS], h->losses = at[HD_LOSSES];
    return p;
}

// A zeroed buffer of `bytes` (a multiple of 4) as floats.
static float* floats_of_bytes(double bytes) {
    return (float*)xcalloc((size_t)(bytes / sizeof(float)) + 1, sizeof(float));
}

// The activation buffers, sized by layout/activations.h (the planner counts the same lists):
// the scratch for one micro-batch shared by all layers; a chunk's slots (ch->mem: its frames),
// then its pools of weight-pass inputs and heads. scratch_bytes, slot_bytes, wg.bytes and
// heads.bytes record what was taken.
static void act_scratch_alloc(Model* m) {
    ActShape s = act_shape(&m->c, m->B);
    int e = sizeof(float);
    ActBuf b[N_SC];
    float* at[N_SC];
    scratch_bufs(&s, 1, b);
    carve_list(floats_of_bytes(act_bufs_bytes(b, N_SC, e, 1)), b, N_SC, at);
    m->att_scratch = at[SC_LSE], m->x_scratch = at[SC_X], m->partial = at[SC_PARTIAL], m->reduced = at[SC_REDUCED];
    m->dres[0] = at[SC_DRES0], m->dres[1] = at[SC_DRES1], m->dres_after_attn = at[SC_DRES_AFTER_ATTN];
    m->datty = at[SC_DATTY], m->dfch_act = at[SC_DFCH_ACT], m->ce_max = at[SC_CE_MAX], m->ce_sums = at[SC_CE_SUMS];
    carve_weight_grad_in(m, &m->weight_grad_in, floats_of_bytes(act_weight_grad_in_bytes(&s, e, 1)));
    if (m->c.recompute == RECOMPUTE_FULL) carve_acts(m, &m->scratch, floats_of_bytes(act_layer_bytes(&s, 0, e, 1)), 0);
    m->scratch_bytes = (size_t)act_scratch_bytes(&s, m->c.recompute, 1, e, 1);
}
static void chunk_slots_alloc(Model* m, int c) {
    ActShape s = act_shape(&m->c, m->B);
    Chunk* ch = &m->chunks[c];
    ch->slot_bytes = (size_t)act_slot_bytes(&s, ch->n_layers, m->c.recompute, sizeof(float), 1);
    ch->mem = (char*)floats_of_bytes((double)ch->slot_bytes * ch->n_frames);
}
static void chunk_pools_alloc(Model* m, int c) {
    ActShape s = act_shape(&m->c, m->B);
    Chunk* ch = &m->chunks[c];
    int e = sizeof(float);
    ch->wg.bytes = (size_t)(ch->n_layers * act_weight_grad_in_bytes(&s, e, 1));
    float* p = floats_of_bytes((double)ch->wg.bytes * ch->wg.n);
    for (int i = 0; i < ch->wg.n * ch->n_layers; i++) p = carve_weight_grad_in(m, &ch->wg_sets[i], p);
    ch->heads.bytes = (size_t)act_head_bytes(&s, e, 1);
    p = floats_of_bytes((double)ch->heads.bytes * ch->heads.n);
    for (int i = 0; i < ch->heads.n; i++) p = carve_head(m, &ch->head_sets[i], p);
}

// A slot's buffers carved at base: its layer inputs and output, dout, dinp, the layers' activations.
static void slot_bind(Model* m, int c, Slot* s, char* base) {
    size_t NC = (size_t)row_count(m, m->B) * m->C;
    int rc = m->c.recompute;
    float* p = (float*)base;
    for (int i = 0; i <= m->chunks[c].n_layers; i++) s->x[i] = p, p += NC;
    s->dout = p; p += NC;
    s->dinp = p; p += NC;
    if (rc != RECOMPUTE_FULL)
        for (int i = 0; i < m->chunks[c].n_layers; i++) p = carve_acts(m, &s->acts[i], p, rc == RECOMPUTE_NONE);
}
// --offload activations: the tier is a file-backed mapping (backend/cpu/offload.h); a copy into it
// or out of it leaves its pages released, so only the frames stay in the resident set.
static char* act_tier_alloc(Model* m, size_t bytes) {
    return (char*)tier_map(m->args->offload_dir, bytes, "offloaded activations");
}
static void act_tier_out(Model* m, char* tier, const char* frame, size_t bytes) {
    memcpy(tier, frame, bytes);
    tier_release(tier, bytes);
}
static void act_tier_in(Model* m, char* frame, char* tier, size_t bytes) {
    memcpy(frame, tier, bytes);
    tier_release(tier, bytes);
}
static void act_tier_wait(Model* m) {}  // the copies are done when they return

static float* f32_alloc(Model* m, size_t n) { return (float*)xcalloc(n, sizeof(float)); }
// The master weights are the fp32 params the forward reads: they stay; m and v go to the tier.
static float* opt_state_alloc(Model* m, size_t n, const char* what) {
    if (!(m->c.offload & OFFLOAD_OPTIMIZER)) return f32_alloc(m, n);
    return (float*)tier_map(m->args->offload_dir, sizeof(float) * n, what);
}
// The fp32 weights are where the kernels read them; --zero 3's shard is copied at its place.
static float* params_host_take(Model* m) { return m->param_shard ? f32_alloc(m, m->P.n_padded) : m->params; }
static void params_host_give(Model* m, float* host) {
    if (host != m->params) f32_free(m, host);
}
static void params_down(Model* m, float* host) {
    if (m->param_shard) f32_copy(m, host + m->opt_lo, m->param_shard, m->opt_hi - m->opt_lo);
}
static void params_up(Model* m, const float* host) {
    if (m->param_shard) f32_copy(m, m->param_shard, host + m->opt_lo, m->opt_hi - m->opt_lo);
}
// AdamW's state is on the host; with --offload optimizer it leaves the resident set after a
// checkpoint read or wrote it.
static float* opt_state_host_take(Model* m, float* state, int fetch) { return state; }
static void opt_state_host_give(Model* m, float* host, float* state, int store) {
    if (m->c.offload & OFFLOAD_OPTIMIZER) tier_release(state, sizeof(float) * (m->opt_hi - m->opt_lo));
}
static float* act_alloc(Model* m, size_t n) { return (float*)xcalloc(n, sizeof(float)); }

#endif
