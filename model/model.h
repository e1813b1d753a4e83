// model/model.h: the transformer's math, written once for both builds: one layer's forward and
// its backward in two passes, the embedding and the head with the loss, and the
// tensor/sequence-parallel communication points. The math calls
// operations (op_*) and collectives that each build supplies under the same names,
// argument order and accumulate rules, and the tp / cp communication steps of parallel/: all
// declared in the contract, backend/backend.h; the state they work on is backend/state.h.
//
// The backward of a layer is split as in zero-bubble pipelines (Qi et al. 2024):
//   layer_backward_input   the gradient the layer below needs (critical path): every matmul's
//                          input gradient, attention, norms (their small weight gradients too)
//   layer_backward_weight  the matmul weight and bias gradients, deferrable: it reads the
//                          layer's activations and the output gradients the input pass kept
//                          in the layer's WeightGradIn
// Run one after the other they give the gradients of the unsplit backward bit for bit.
#ifndef MODEL_H
#define MODEL_H

#include "backend/backend.h"
#include "layer_parallel/context_parallel.h"  // cp_attention_forward / backward
#include "layer_parallel/tensor_parallel.h"   // tp_reduce_rows, sp_gather_rows / grad, sp_partial_sync

// ----------------------------------------------------------------------------
// One transformer layer on this rank's heads and MLP columns.

static void norm_forward(Model* m, act_t* out, float* mean, float* rstd, const act_t* x, const float* w, const float* b,
                         int B) {
    op_norm_forward(m, my_rows(m, out, B), mean, rstd, x, w, b, row_count(m, B));
    sp_gather_rows(m, out, B);  // comm: tp all-gather of the normalized rows (--sp only)
}
// res = x + y + bias and out = norm(res), one op (res: this rank's N rows).
static void residual_norm_forward(Model* m, act_t* res, act_t* out, float* mean, float* rstd, const act_t* x,
                                  const act_t* y, const float* bias, const float* w, const float* b, int B) {
    op_residual_norm_forward(m, res, my_rows(m, out, B), mean, rstd, x, y, bias, w, b, row_count(m, B));
    sp_gather_rows(m, out, B);  // comm: tp all-gather of the normalized rows (--sp only)
}

static void layer_forward(Model* m, int l, LayerActs* a, const act_t* x, act_t* out, int B) {
    const LayerW* w = &m->wl[l];
    int BT = B * m->T, N = row_count(m, B), C = m->C, Cl = m->n_head_local * m->hd;
    // attention block: x -> norm -> qkv (column-parallel) -> attention -> proj (row-parallel) -> + x
    norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, B);
    op_matmul_forward(m, a->qkv, a->ln1, w->qkvw, w->qkvb, BT, C, m->qkv_dim);
    if (m->c.arch == ARCH_LLAMA) op_rope(m, a->qkv, BT, 1.0f);
    cp_attention_forward(m, a->atty, a->att, a->qkv, B);  // comm (cp > 1): all-to-all and / or ring
    op_matmul_forward(m, m->partial, a->atty, w->attprojw, NULL, BT, Cl, C);
    // comm: tp all-reduce (reduce-scatter with --sp) of the row-parallel projection's partial sums
    const act_t* attproj = tp_reduce_rows(m, m->partial, B);
    // MLP block: res2 = x + proj -> norm -> fc (column-parallel) -> GELU / SwiGLU -> proj (row-parallel) -> + res2
    residual_norm_forward(m, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x, attproj, w->attprojb, w->ln2w, w->ln2b, B);
    op_fc_act_forward(m, a->fch, a->fch_act, a->ln2, w, BT);
    op_matmul_forward(m, m->partial, a->fch_act, w->fcprojw, NULL, BT, m->Fl, C);
    // comm: tp all-reduce (reduce-scatter with --sp) of the row-parallel projection's partial sums
    const act_t* fcproj = tp_reduce_rows(m, m->partial, B);
    op_residual(m, out, a->res2, fcproj, w->fcprojb, N);
}

// Where the input pass leaves the residual gradient between the layer's two blocks: when the
// weight pass runs later and reads it as it is (no --sp gather), in the weight pass's own
// buffer, so that it outlives the layer without a copy; else in the shared scratch.
static act_t* dres_after_attn_of(Model* m, WeightGradIn* wg) {
    return m->defer_weight && !m->c.sp ? wg->dy_att_buf : m->dres_after_attn;
}

// The input pass. dout: gradient of the layer output (N x C); writes the gradient of its
// input to dx (not dout) and leaves in wg what the weight pass needs (a copy of dout when it
// runs later, unless the caller wrote dout into wg->dy_mlp_buf already).
static void layer_backward_input(Model* m, int l, LayerActs* a, WeightGradIn* wg, const act_t* x, const act_t* dout,
                                 act_t* dx, int B) {
    const LayerW* w = &m->wl[l];
    LayerW* g = &m->gl[l];
    int T = m->T, BT = B * T, N = row_count(m, B), C = m->C, Cl = m->n_head_local * m->hd, keep = m->defer_weight;
    // MLP block
    wg->dy_mlp = sp_gather_grad(m, dout, wg->dy_mlp_buf, B, keep);  // comm: tp all-gather (--sp only)
    op_fcproj_act_backward_input(m, wg->dfch, wg->dy_mlp, w, a->fch, BT);
    op_matmul_backward_input(m, m->partial, wg->dfch, w->fcw, BT, C, m->fc_dim);
    // comm: tp all-reduce (reduce-scatter with --sp) of the column-parallel fc's input gradient
    const act_t* dln2 = tp_reduce_rows(m, m->partial, B);
    act_t* dres = dres_after_attn_of(m, wg);  // the residual path: dout + the norm's input gradient
    op_norm_backward(m, dres, dout, g->ln2w, g->ln2b, dln2, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, N);
    // attention block
    wg->dy_att = sp_gather_grad(m, dres, wg->dy_att_buf, B, keep);  // comm: tp all-gather (--sp only)
    op_matmul_backward_input(m, m->datty, wg->dy_att, w->attprojw, BT, Cl, C);
    // Selective recomputation (Korthikanti et al. 2022): the attention's saved state was
    // not kept; run the attention forward again to rebuild it.
    if (m->c.recompute == RECOMPUTE_SELECTIVE) cp_attention_forward(m, a->atty, a->att, a->qkv, B);
    // comm (cp > 1): all-to-all and / or ring
    cp_attention_backward(m, wg->dqkv, m->datty, a->qkv, a->atty, a->att, B);
    if (m->c.arch == ARCH_LLAMA) op_rope(m, wg->dqkv, BT, -1.0f);
    op_matmul_backward_input(m, m->partial, wg->dqkv, w->qkvw, BT, C, m->qkv_dim);
    // comm: tp all-reduce (reduce-scatter with --sp) of the column-parallel qkv's input gradient
    const act_t* dln1 = tp_reduce_rows(m, m->partial, B);
    op_norm_backward(m, dx, dres, g->ln1w, g->ln1b, dln1, x, w->ln1w, a->ln1_mean, a->ln1_rstd, N);
}

// The weight pass: the four matmuls' weight (and bias) gradients. The row-parallel biases
// see this rank's N rows only (their --sp partial sums meet in sp_partial_sync).
static void layer_backward_weight(Model* m, int l, const LayerActs* a, const WeightGradIn* wg, int B) {
    LayerW* g = &m->gl[l];
    int BT = B * m->T, N = row_count(m, B), C = m->C, Cl = m->n_head_local * m->hd;
    size_t own = (size_t)row0_of(m, B) * C;
    op_matmul_backward_weight(m, g->fcprojw, NULL, wg->dy_mlp, a->fch_act, BT, m->Fl, C);
    if (g->fcprojb) op_column_sum(m, g->fcprojb, wg->dy_mlp + own, N);
    op_matmul_backward_weight(m, g->fcw, g->fcb, wg->dfch, a->ln2, BT, C, m->fc_dim);
    op_matmul_backward_weight(m, g->attprojw, NULL, wg->dy_att, a->atty, BT, Cl, C);
    if (g->attprojb) op_column_sum(m, g->attprojb, wg->dy_att + own, N);
    op_matmul_backward_weight(m, g->qkvw, g->qkvb, wg->dqkv, a->ln1, BT, C, m->qkv_dim);
}

// ----------------------------------------------------------------------------
// Embedding (first chunk) and head + loss (last chunk). tokens, targets: where the build's
// kernels read them (batch_inputs / batch_targets).

static void embed_forward(Model* m, act_t* x0, const int* tokens, int B) {
    int BT = B * m->T, N = row_count(m, B);
    // rows of this rank's vocabulary, zeros elsewhere: into x0 itself, which the sum then
    // overwrites in place (without --sp), or into the scratch that is reduce-scattered into x0
    act_t* rows = m->c.sp ? m->partial : x0;
    op_embedding_forward(m, rows, tokens, BT);
    // comm: tp all-reduce (reduce-scatter with --sp); one nonzero term per row: the sum is exact
    tp_reduce_rows_into(m, rows, x0, B);
    if (m->w.wpe) op_position_forward(m, x0, N, row0_of(m, B));
}
static void embed_backward(Model* m, const act_t* dx0, const int* tokens, int B) {
    if (m->g.wpe) op_position_backward(m, dx0, row_count(m, B), row0_of(m, B));
    const act_t* dembedded = sp_gather_grad(m, dx0, m->partial, B, 0);  // comm: tp all-gather (--sp only)
    op_embedding_backward(m, tokens, dembedded, B * m->T);
}

// Final norm, logits of this rank's vocabulary columns, vocabulary-parallel cross-entropy.
// dloss_scale > 0: the logits are replaced by dloss/dlogits for the backward.
static void head_forward(Model* m, Slot* s, const act_t* x, const int* targets, int B, float dloss_scale) {
    int BT = B * m->T;
    HeadActs* h = s->head;
    norm_forward(m, h->lnf, h->lnf_mean, h->lnf_rstd, x, m->w.lnfw, m->w.lnfb, B);
    op_matmul_forward(m, h->logits, h->lnf, m->w.head, NULL, BT, m->C, m->vocab_local);
    op_ce_local_max(m, m->ce_max, h->logits, BT);
    f32_allreduce_max(m, GROUP_TP, m->ce_max, BT);  // comm: tp all-reduce (max over vocabulary shards)
    op_ce_local_sums(m, m->ce_sums, h->logits, m->ce_max, targets, BT);
    f32_allreduce_sum(m, GROUP_TP, m->ce_sums, 2 * (size_t)BT);  // comm: tp all-reduce (sum exp, target logit)
    op_ce_finish(m, h->losses, dloss_scale > 0 ? h->logits : NULL, m->ce_max, m->ce_sums, targets, BT, dloss_scale);
    op_loss_accumulate(m, h->losses, BT);
}
// Sampling (m->sample): the final norm of the B rows, then the logits of the one row sampled from.
static void head_sample(Model* m, Slot* s, const act_t* x, int B) {
    norm_forward(m, s->head->lnf, s->head->lnf_mean, s->head->lnf_rstd, x, m->w.lnfw, m->w.lnfb, B);
    if (m->L.cp_rank != m->sample->holder) return;
    row_logits(m, s->head->lnf + (size_t)m->sample->row * m->C, m->sample->logits);
    m->sample->filled = 1;
}
// The head's backward, both passes (the head is one matmul; its weight pass is not deferred).
static void head_backward(Model* m, Slot* s, const act_t* x, act_t* dx, int B) {
    int BT = B * m->T;
    HeadActs* h = s->head;
    op_matmul_backward_input(m, m->partial, h->logits, m->w.head, BT, m->C, m->vocab_local);
    op_matmul_backward_weight(m, m->g.head, NULL, h->logits, h->lnf, BT, m->C, m->vocab_local);
    // comm: tp all-reduce (reduce-scatter with --sp) of the vocabulary-parallel head's input gradient
    const act_t* dlnf = tp_reduce_rows(m, m->partial, B);
    op_norm_backward(m, dx, NULL, m->g.lnfw, m->g.lnfb, dlnf, x, m->w.lnfw, h->lnf_mean, h->lnf_rstd, row_count(m, B));
}

#endif
