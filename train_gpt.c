// train_gpt.c: the CPU reference trainer. fp32, OpenMP, MPI for the layout.
//
// GPT-2 (learned positions, pre-LayerNorm, GELU MLP, causal multi-head attention,
// tied embedding) and LLaMA (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied
// head), trained with AdamW on data, tensor, sequence and pipeline parallel layouts.
// It is the oracle every other path is checked against.
//
// Reading order: main() -> model_init() -> train_loop() / train_step() -> run_schedule() ->
// chunk_forward()/chunk_backward() (those four in model_runtime.h, shared with the GPU
// build) -> layer_forward()/layer_backward() here -> kernels_cpu.h.
// Every communication point is a comm_* call (layout.h) marked "comm:".
#include "args.h"
#include "ckpt.h"
#include "data.h"
#include "kernels_cpu.h"
#include "layout.h"
#include "metrics.h"
#include "params.h"
#include "planner.h"
#include "runtime.h"
#include "schedule.h"

// The activation element model_runtime.h works in, and the most floats of one dp all-reduce
// of the gradient (model_runtime.h's reduce_gradients).
typedef float act_t;
#define GRAD_BUCKET_FLOATS ((size_t)1 << 20)

// Activations one layer keeps for its backward (one micro-batch, this rank's part).
// N = rows this rank holds in the norm/residual regions (B*T, or B*T/tp with --sp);
// the matmul regions always see all B*T rows.
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  // ln1 (B*T x C) gathered; mean/rstd for the N local rows
    float *qkv;                        // B*T x (Hl + 2*KVl)*hd (after RoPE for LLaMA)
    float *att;                        // B x Hl x T x T softmax (shared scratch unless --recompute none)
    float *atty;                       // B*T x Hl*hd
    float *res2;                       // N x C residual after attention
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_act;              // B*T x Fl (GELU) or B*T x 2Fl [gate|up] -> B*T x Fl (SwiGLU)
} LayerActs;

// Everything one (micro-batch, chunk) keeps between its forward and its backward.
typedef struct {
    float** x;                         // [n_layers+1] layer inputs (N x C); x[n_layers] is the chunk output
    LayerActs* acts;                   // [n_layers]; unused under --recompute full
    float *lnf, *lnf_mean, *lnf_rstd;  // last chunk: final norm output (B*T x C) and stats
    float *logits, *losses;            // last chunk: B*T x Vl logits, replaced by dlogits; B*T losses
    float *dout, *dinp;                // gradient from the next chunk / to the previous chunk (N x C)
    MPI_Request req[2];                // sends still in flight from this slot
    int mb;                            // micro-batch held, -1 when free
} Slot;

typedef struct {
    int n_layers, layer0;              // layers [layer0, layer0 + n_layers)
    int n_slots;                       // most micro-batches in flight on this chunk (from the schedule)
    Slot* slots;
    float* mem;                        // all slot activations of this chunk, one buffer
    size_t slot_bytes;
} Chunk;

typedef struct {
    Args* args;
    ModelConfig c;
    Layout L;
    ParamLayout P;
    // shapes on this rank
    int B, T, C, hd, Hl, KVl, qkv_dim, Fl, fc_dim, Vl, v0, n_micro;
    // parameters, gradients, AdamW state (this rank's optimizer range [opt_lo, opt_hi))
    float *params, *grads, *grad_shard, *shard_tmp, *wte_acc, *m_state, *v_state;
    size_t opt_lo, opt_hi;
    Weights w, g;
    LayerW *wl, *gl;
    // pipeline
    PipeOp* ops;
    int n_ops;
    Chunk* chunks;                     // [vpp]
    int* slot_of;                      // [vpp * n_micro] slot index of (chunk, mb), -1 none
    // scratch shared by all layers (one micro-batch)
    LayerActs scratch;                 // layer activations under --recompute full
    float *x_scratch, *att_scratch, *partial, *reduced, *gather, *ln_scratch;
    float *dres[2], *dres2, *dqkv, *datt, *datty, *dfch, *dfch_act, *ce_max, *ce_sums;
    float* sp_buf;                     // packing of the sequence-parallel partial gradients
    int* inputs;                       // [n_micro * B * T] this step's tokens for this dp rank
    int* targets;
    // accounting
    double loss_sum;                   // sum of token losses of this step on this rank
    size_t slots_live_bytes, slots_peak_bytes, scratch_bytes;
    Metrics* met;
} Model;

static int row_count(const Model* m, int B) { return m->c.sp ? B * m->T / m->L.tp : B * m->T; }
static int row0_of(const Model* m, int B) { return m->c.sp ? m->L.tp_rank * row_count(m, B) : 0; }

// ----------------------------------------------------------------------------
// Tensor-parallel communication points (Megatron's f/g operators and their
// sequence-parallel forms). Without --sp: all-reduce; with --sp: reduce-scatter to
// the N local rows, and all-gather of the N local rows back to B*T.

// Row-parallel matmul output: partial sums (B*T x C) -> the reduced rows this rank keeps.
static float* tp_reduce_rows(Model* m, float* partial, int B) {
    int N = row_count(m, B), BT = B * m->T;
    if (!m->c.sp) {
        comm_allreduce_sum(&m->L.tp_c, partial, (size_t)BT * m->C);  // comm: tp all-reduce
        return partial;
    }
    comm_reduce_scatter(&m->L.tp_c, partial, m->reduced, (size_t)N * m->C);  // comm: tp reduce-scatter (sp)
    return m->reduced;
}
// full (B*T x C) holds this rank's N rows at their place; fill in the other ranks' rows.
static void sp_gather_rows(Model* m, float* full, int B) {
    if (!m->c.sp) return;
    size_t n = (size_t)row_count(m, B) * m->C;
    comm_allgather(&m->L.tp_c, full + m->L.tp_rank * n, full, n);  // comm: tp all-gather (sp)
}
// Gradient rows (N x C) -> all B*T rows, as the backward of a reduce-scatter.
static const float* sp_gather_grad(Model* m, const float* d, int B) {
    if (!m->c.sp) return d;
    size_t n = (size_t)row_count(m, B) * m->C;
    memcpy(m->gather + m->L.tp_rank * n, d, sizeof(float) * n);
    sp_gather_rows(m, m->gather, B);
    return m->gather;
}
// The norm this rank writes into a B*T x C buffer: its own rows only.
static float* my_rows(Model* m, float* full, int B) { return full + (size_t)row0_of(m, B) * m->C; }

static void norm_forward(Model* m, float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int N) {
    if (m->c.arch == ARCH_GPT2) layernorm_forward(out, mean, rstd, x, w, b, N, m->C);
    else rmsnorm_forward(out, rstd, x, w, N, m->C);
}
static void norm_backward(Model* m, float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                          const float* mean, const float* rstd, int N) {
    if (m->c.arch == ARCH_GPT2) layernorm_backward(dx, dw, db, m->ln_scratch, dout, x, w, mean, rstd, N, m->C);
    else rmsnorm_backward(dx, dw, m->ln_scratch, dout, x, w, rstd, N, m->C);
}

// ----------------------------------------------------------------------------
// One transformer layer on this rank's heads and MLP columns.

static void layer_forward(Model* m, int l, LayerActs* a, const float* x, float* out, int B) {
    const LayerW* w = &m->wl[l];
    int T = m->T, C = m->C, BT = B * T, N = row_count(m, B), Cl = m->Hl * m->hd;
    // attention block: x -> norm -> qkv (column-parallel) -> attention -> proj (row-parallel) -> + x
    norm_forward(m, my_rows(m, a->ln1, B), a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, N);
    sp_gather_rows(m, a->ln1, B);
    matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, BT, C, m->qkv_dim);
    if (m->c.arch == ARCH_LLAMA) rope_apply(a->qkv, BT, T, m->qkv_dim, m->Hl + m->KVl, m->hd, 1.0f);
    attention_forward(a->atty, a->att, a->qkv, B, T, m->Hl, m->KVl, m->hd);
    matmul_forward(m->partial, a->atty, w->attprojw, NULL, BT, Cl, C);
    float* y = tp_reduce_rows(m, m->partial, B);
    residual_forward(a->res2, x, y, (size_t)N * C);
    if (w->attprojb) add_bias(a->res2, w->attprojb, N, C);
    // MLP block: res2 -> norm -> fc (column-parallel) -> GELU / SwiGLU -> proj (row-parallel) -> + res2
    norm_forward(m, my_rows(m, a->ln2, B), a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, N);
    sp_gather_rows(m, a->ln2, B);
    matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, BT, C, m->fc_dim);
    if (m->c.arch == ARCH_GPT2) gelu_forward(a->fch_act, a->fch, (size_t)BT * m->Fl);
    else swiglu_forward(a->fch_act, a->fch, BT, m->Fl);
    matmul_forward(m->partial, a->fch_act, w->fcprojw, NULL, BT, m->Fl, C);
    y = tp_reduce_rows(m, m->partial, B);
    residual_forward(out, a->res2, y, (size_t)N * C);
    if (w->fcprojb) add_bias(out, w->fcprojb, N, C);
}

// dout: gradient of the layer output (N x C); writes the gradient of its input to dx.
static void layer_backward(Model* m, int l, LayerActs* a, const float* x, const float* dout, float* dx, int B) {
    const LayerW* w = &m->wl[l];
    LayerW* g = &m->gl[l];
    int T = m->T, C = m->C, BT = B * T, N = row_count(m, B), Cl = m->Hl * m->hd;
    // MLP block
    if (g->fcprojb) column_dot_accumulate(g->fcprojb, dout, NULL, N, C);
    const float* dy = sp_gather_grad(m, dout, B);
    memset(m->dfch_act, 0, sizeof(float) * BT * m->Fl);
    matmul_backward(m->dfch_act, g->fcprojw, NULL, dy, a->fch_act, w->fcprojw, BT, m->Fl, C);
    memset(m->dfch, 0, sizeof(float) * BT * m->fc_dim);
    if (m->c.arch == ARCH_GPT2) gelu_backward(m->dfch, a->fch, m->dfch_act, (size_t)BT * m->Fl);
    else swiglu_backward(m->dfch, a->fch, m->dfch_act, BT, m->Fl);
    memset(m->partial, 0, sizeof(float) * BT * C);
    matmul_backward(m->partial, g->fcw, g->fcb, m->dfch, a->ln2, w->fcw, BT, C, m->fc_dim);
    float* dln = tp_reduce_rows(m, m->partial, B);
    memcpy(m->dres2, dout, sizeof(float) * N * C);  // the residual path
    norm_backward(m, m->dres2, g->ln2w, g->ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, N);
    // attention block
    if (g->attprojb) column_dot_accumulate(g->attprojb, m->dres2, NULL, N, C);
    dy = sp_gather_grad(m, m->dres2, B);
    memset(m->datty, 0, sizeof(float) * BT * Cl);
    matmul_backward(m->datty, g->attprojw, NULL, dy, a->atty, w->attprojw, BT, Cl, C);
    // selective recomputation (Korthikanti et al. 2022): the softmax was not kept; redo it
    if (m->c.recompute == RECOMPUTE_SELECTIVE) attention_forward(a->atty, a->att, a->qkv, B, T, m->Hl, m->KVl, m->hd);
    memset(m->dqkv, 0, sizeof(float) * BT * m->qkv_dim);
    attention_backward(m->dqkv, m->datt, m->datty, a->qkv, a->att, B, T, m->Hl, m->KVl, m->hd);
    if (m->c.arch == ARCH_LLAMA) rope_apply(m->dqkv, BT, T, m->qkv_dim, m->Hl + m->KVl, m->hd, -1.0f);
    memset(m->partial, 0, sizeof(float) * BT * C);
    matmul_backward(m->partial, g->qkvw, g->qkvb, m->dqkv, a->ln1, w->qkvw, BT, C, m->qkv_dim);
    dln = tp_reduce_rows(m, m->partial, B);
    memcpy(dx, m->dres2, sizeof(float) * N * C);
    norm_backward(m, dx, g->ln1w, g->ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd, N);
}

// ----------------------------------------------------------------------------
// Embedding (first chunk) and head + loss (last chunk).

static void embed_forward(Model* m, float* x0, const int* tokens, int B) {
    int BT = B * m->T, N = row_count(m, B);
    embedding_forward(m->partial, tokens, m->w.wte, BT, m->C, m->v0, m->Vl);  // rows of this rank's vocabulary
    float* y = tp_reduce_rows(m, m->partial, B);
    memcpy(x0, y, sizeof(float) * N * m->C);
    if (m->w.wpe) position_forward(x0, m->w.wpe, N, row0_of(m, B), m->T, m->C);
}
static void embed_backward(Model* m, const float* dx0, const int* tokens, int B) {
    int N = row_count(m, B);
    if (m->g.wpe) position_backward(m->g.wpe, dx0, N, row0_of(m, B), m->T, m->C);
    const float* dy = sp_gather_grad(m, dx0, B);
    embedding_backward(m->g.wte, tokens, dy, B * m->T, m->C, m->v0, m->Vl);
}

// Final norm, logits of this rank's vocabulary columns, vocabulary-parallel cross-entropy.
// dloss_scale > 0: the logits are replaced by dloss/dlogits for the backward.
static void head_forward(Model* m, Slot* s, const float* x, const int* targets, int B, float dloss_scale) {
    int BT = B * m->T, N = row_count(m, B);
    norm_forward(m, my_rows(m, s->lnf, B), s->lnf_mean, s->lnf_rstd, x, m->w.lnfw, m->w.lnfb, N);
    sp_gather_rows(m, s->lnf, B);
    matmul_forward(s->logits, s->lnf, m->w.head, NULL, BT, m->C, m->Vl);
    crossentropy_local_max(m->ce_max, s->logits, BT, m->Vl, m->v0, m->c.vocab);
    comm_allreduce_max(&m->L.tp_c, m->ce_max, BT);  // comm: tp all-reduce (max over vocabulary shards)
    crossentropy_local_sums(m->ce_sums, s->logits, m->ce_max, targets, BT, m->Vl, m->v0, m->c.vocab);
    comm_allreduce_sum(&m->L.tp_c, m->ce_sums, 2 * (size_t)BT);  // comm: tp all-reduce (sum exp, target logit)
    crossentropy_finish(s->losses, dloss_scale > 0 ? s->logits : NULL, m->ce_max, m->ce_sums, targets, BT, m->Vl,
                        m->v0, m->c.vocab, dloss_scale);
    for (int i = 0; i < BT; i++) m->loss_sum += s->losses[i];
}
static void head_backward(Model* m, Slot* s, const float* x, float* dx, int B) {
    int BT = B * m->T, N = row_count(m, B);
    memset(m->partial, 0, sizeof(float) * BT * m->C);
    matmul_backward(m->partial, m->g.head, NULL, s->logits, s->lnf, m->w.head, BT, m->C, m->Vl);
    float* dln = tp_reduce_rows(m, m->partial, B);
    memset(dx, 0, sizeof(float) * N * m->C);
    norm_backward(m, dx, m->g.lnfw, m->g.lnfb, dln, x, m->w.lnfw, s->lnf_mean, s->lnf_rstd, N);
}

// ----------------------------------------------------------------------------
// The rank's orchestration (chunks, slots, the schedule executor, gradient reduction, the
// step, evaluation, sampling, the training loop) is model_runtime.h, shared with
// train_gpt.cu. Below it, the primitives it asks of this build: host memory and MPI.
#include "model_runtime.h"

static void act_copy(Model* m, float* dst, const float* src, size_t n) { memcpy(dst, src, sizeof(float) * n); }
static void f32_copy(Model* m, float* dst, const float* src, size_t n) { memcpy(dst, src, sizeof(float) * n); }
static void f32_zero(Model* m, float* p, size_t n) { memset(p, 0, sizeof(float) * n); }
static void f32_add(Model* m, float* dst, const float* src, size_t n) { add_inplace(dst, src, n); }

static Comm* comm_of(Model* m, Group g) { return g == GROUP_TP ? &m->L.tp_c : g == GROUP_DP ? &m->L.dp_c : &m->L.embed_c; }
static void grad_allreduce(Model* m, Group g, float* buf, size_t n) { comm_allreduce_sum(comm_of(m, g), buf, n); }
// A blocking MPI all-reduce at the point the backward reaches (the CPU has no second stream
// to overlap it with); the GPU build runs it on NCCL's own stream.
static void grad_allreduce_dp_async(Model* m, float* buf, size_t n) { comm_allreduce_sum(&m->L.dp_c, buf, n); }
static void grad_allreduce_dp_join(Model* m) {}
static void grad_reduce_scatter(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_reduce_scatter(comm_of(m, g), send, recv, n_per_rank);
}
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_allgather(comm_of(m, g), send, recv, n_per_rank);
}

// Pipeline p2p: MPI_Isend straight from the slot's buffer (untouched until the slot's sends
// are waited for), blocking receive into the destination.
static void pp_send(Model* m, Slot* s, int dir, const float* src, size_t n, int peer, int tag) {
    comm_isend(&m->L.pp_c, src, n, peer, tag, &s->req[dir]);
}
static void pp_send_wait(Model* m, Slot* s, int dir) { comm_wait(&m->L.pp_c, &s->req[dir]); }
static void pp_recv(Model* m, int dir, float* dst, size_t n, int peer, int tag) { comm_recv(&m->L.pp_c, dst, n, peer, tag); }

// The kernels read the host token arrays; head_forward adds to m->loss_sum itself.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index) {
    load_batch(ts, &m->c, m->L.dp_rank, m->n_micro, index, m->inputs, m->targets);
    m->loss_sum = 0;
}
static const int* batch_inputs(Model* m) { return m->inputs; }
static const int* batch_targets(Model* m) { return m->targets; }
static const int* window_tokens(Model* m, const int* window, int T) { return window; }
static void loss_fetch(Model* m) {}

// fp64 sums of squares, range after range (each summed in a fixed order: kernels_cpu.h).
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss) { *ss += sum_squares(x, n); }
static void sumsq_finish(Model* m, int n_ranges, double* ss) {}
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t) {
    size_t o = a - m->opt_lo;
    adamw_update(m->params + a, grad + o, m->m_state + o, m->v_state + o, b - a, lr, m->c.beta1, m->c.beta2,
                 m->c.eps, m->c.weight_decay, decay, grad_scale, t);
}
static void params_gathered(Model* m) {}  // the fp32 weights are the ones the forward reads

static void row_logits(Model* m, const float* lnf_row, float* row) {
    matmul_forward(row + m->v0, lnf_row, m->w.head, NULL, 1, m->C, m->Vl);
    comm_allgather(&m->L.tp_c, row + m->v0, row, m->Vl);  // comm: tp all-gather of one row of logits
}
static void device_sync(Model* m) {}

// ----------------------------------------------------------------------------
// Set-up.

static size_t layer_act_floats(const Model* m, int with_att, int B) {
    size_t BT = (size_t)B * m->T, N = row_count(m, B), C = m->C;
    size_t n = 2 * (BT * C + 2 * N) + BT * m->qkv_dim + BT * m->Hl * m->hd + N * C + BT * m->fc_dim + BT * m->Fl;
    if (with_att) n += (size_t)B * m->Hl * m->T * m->T;
    return n;
}

// Carve a LayerActs out of a buffer; att from the buffer (with_att) or the shared scratch.
static float* carve_acts(Model* m, LayerActs* a, float* p, int with_att) {
    size_t BT = (size_t)m->B * m->T, N = row_count(m, m->B), C = m->C;
    a->ln1 = p; p += BT * C; a->ln1_mean = p; p += N; a->ln1_rstd = p; p += N;
    a->qkv = p; p += BT * m->qkv_dim;
    if (with_att) { a->att = p; p += (size_t)m->B * m->Hl * m->T * m->T; } else a->att = m->att_scratch;
    a->atty = p; p += BT * m->Hl * m->hd;
    a->res2 = p; p += N * C;
    a->ln2 = p; p += BT * C; a->ln2_mean = p; p += N; a->ln2_rstd = p; p += N;
    a->fch = p; p += BT * m->fc_dim; a->fch_act = p; p += BT * m->Fl;
    return p;
}

static void alloc_activations(Model* m) {
    size_t BT = (size_t)m->B * m->T, N = row_count(m, m->B), C = m->C;
    int keep_att = m->c.recompute == RECOMPUTE_NONE, full = m->c.recompute == RECOMPUTE_FULL;
    // Scratch for one micro-batch, shared by all layers.
    size_t att_n = (size_t)m->B * m->Hl * m->T * m->T;
    m->att_scratch = (float*)xcalloc(att_n, sizeof(float));
    m->datt = (float*)xcalloc(att_n, sizeof(float));
    m->x_scratch = (float*)xcalloc(N * C, sizeof(float));
    m->partial = (float*)xcalloc(BT * C, sizeof(float));
    m->reduced = (float*)xcalloc(N * C, sizeof(float));
    m->gather = (float*)xcalloc(BT * C, sizeof(float));
    m->ln_scratch = (float*)xcalloc(N * C, sizeof(float));
    m->dres[0] = (float*)xcalloc(N * C, sizeof(float));
    m->dres[1] = (float*)xcalloc(N * C, sizeof(float));
    m->dres2 = (float*)xcalloc(N * C, sizeof(float));
    m->dqkv = (float*)xcalloc(BT * m->qkv_dim, sizeof(float));
    m->datty = (float*)xcalloc(BT * m->Hl * m->hd, sizeof(float));
    m->dfch = (float*)xcalloc(BT * m->fc_dim, sizeof(float));
    m->dfch_act = (float*)xcalloc(BT * m->Fl, sizeof(float));
    m->ce_max = (float*)xcalloc(BT, sizeof(float));
    m->ce_sums = (float*)xcalloc(2 * BT, sizeof(float));
    m->scratch_bytes = sizeof(float) * (2 * att_n + N * C * 7 + BT * C * 2 + BT * (m->qkv_dim + m->Hl * m->hd + m->fc_dim + m->Fl) + 3 * BT);
    if (full) {
        float* p = (float*)xcalloc(layer_act_floats(m, 0, m->B), sizeof(float));
        carve_acts(m, &m->scratch, p, 0);
        m->scratch_bytes += sizeof(float) * layer_act_floats(m, 0, m->B);
    }
    chunks_init(m);
    for (int c = 0; c < m->L.vpp; c++) {
        Chunk* ch = &m->chunks[c];
        size_t f = (ch->n_layers + 1) * N * C + 2 * N * C;
        if (!full) f += ch->n_layers * layer_act_floats(m, keep_att, m->B);
        if (is_last_chunk(m, c)) f += BT * C + 2 * N + BT * m->Vl + BT;
        ch->slot_bytes = sizeof(float) * f;
        ch->mem = (float*)xcalloc(f * ch->n_slots, sizeof(float));
        for (int si = 0; si < ch->n_slots; si++) {
            Slot* s = &ch->slots[si];
            float* p = ch->mem + f * si;
            for (int i = 0; i <= ch->n_layers; i++) s->x[i] = p, p += N * C;
            s->dout = p; p += N * C;
            s->dinp = p; p += N * C;
            if (!full)
                for (int i = 0; i < ch->n_layers; i++) p = carve_acts(m, &s->acts[i], p, keep_att);
            if (is_last_chunk(m, c)) {
                s->lnf = p; p += BT * C; s->lnf_mean = p; p += N; s->lnf_rstd = p; p += N;
                s->logits = p; p += BT * m->Vl; s->losses = p; p += BT;
            }
        }
    }
}

static void model_init(Model* m, Args* a, Metrics* met) {
    memset(m, 0, sizeof(*m));
    m->args = a;
    m->c = a->cfg;
    m->met = met;
    ModelConfig* c = &m->c;
    layout_init(&m->L, c->dp, c->tp, c->pp, c->vpp);
    model_shapes(m);
    param_layout_build(&m->P, c, c->tp, m->L.tp_rank, c->pp, c->vpp, m->L.stage, c->dp);
    // parameters and gradients: one buffer each, named views into them
    m->params = (float*)xcalloc(m->P.n_padded, sizeof(float));
    m->grads = (float*)xcalloc(m->P.n_padded, sizeof(float));
    m->wl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    m->gl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    bind_weights(&m->P, c, m->params, &m->w, m->wl);
    bind_weights(&m->P, c, m->grads, &m->g, m->gl);
    init_params(&m->P, c, c->tp, m->L.tp_rank, m->params);
    // optimizer state: the whole local buffer, or this rank's 1/dp shard with ZeRO
    size_t S = shard_floats(&m->P, c->dp);
    optimizer_range(&m->P, c, m->L.dp_rank, &m->opt_lo, &m->opt_hi);
    m->m_state = (float*)xcalloc(m->opt_hi - m->opt_lo, sizeof(float));
    m->v_state = (float*)xcalloc(m->opt_hi - m->opt_lo, sizeof(float));
    if (c->zero) m->grad_shard = (float*)xcalloc(S, sizeof(float));
    if (c->zero == 2) m->shard_tmp = (float*)xcalloc(S, sizeof(float));
    if (c->zero == 2 && m->L.in_embed && c->arch == ARCH_GPT2) m->wte_acc = (float*)xcalloc((size_t)m->Vl * m->C, sizeof(float));
    m->sp_buf = (float*)xcalloc(m->P.n_local, sizeof(float));
    model_init_schedule(m);  // model_runtime.h: the op list, then activations sized by it
}

// Checkpoints: ckpt.h on the fp32 weights and AdamW state as they are.
static void save_checkpoint(Model* m, int step) {
    ckpt_save(&m->L, &m->P, &m->c, m->args, m->params, m->m_state, m->v_state, m->opt_lo, m->opt_hi, step);
}

// ----------------------------------------------------------------------------

#ifndef TESTING
int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan")) return plan_main(argc, argv);
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    ModelConfig* c = &a->cfg;
    int world = run.world, rank = run.rank;
    // Peak for MFU: --peak-tflops, else this machine's cores at the measured FMA rate,
    // shared by the ranks on it (every rank of a CPU run is one share of the machine).
    double peak = a->peak_tflops * 1e12, core = rank == 0 ? measure_core_peak_flops() : 0;
    MPI_Bcast(&core, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char* peak_src = "--peak-tflops";
    if (!peak) peak = core * cores / world, peak_src = "measured fp32 FMA peak x cores / ranks";
    Metrics met;
    metrics_init(&met, a, rank, world, peak, peak_src);
    Model m;
    model_init(&m, a, &met);
    int start_step = 0;
    if (a->import_llmc) llmc_import(a->import_llmc, &m.L, &m.P, c, m.params);
    if (a->resume) start_step = ckpt_resume(&m.L, &m.P, c, a, m.params, m.m_state, m.v_state, m.opt_lo, m.opt_hi);
    if (rank == 0) print_startup(&m.L, &m.P, c, a, &run.train, &run.val, &met, m.n_micro, start_step);
    size_t act_bytes = m.scratch_bytes;
    for (int ch = 0; ch < m.L.vpp; ch++) act_bytes += m.chunks[ch].slot_bytes * m.chunks[ch].n_slots;
    // the planner's view of this machine: ranks time-share the cores, each with cores/world threads
    metrics_predict(&met, c, "cpu", core * (cores / world > 1 ? cores / world : 1), (int)cores, &m.P, m.opt_hi - m.opt_lo,
                    act_bytes / sizeof(float), 4);

    if (train_loop(&m, &run, &met, start_step)) {
        MPI_Finalize();
        return 130;
    }
    if (a->export_llmc) llmc_export(a->export_llmc, &m.L, &m.P, c, m.params);
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    MPI_Finalize();
    return 0;
}
#endif
