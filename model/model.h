// model.h: the transformer, written once for both builds: what one (micro-batch, chunk)
// keeps, one layer's forward and its backward in two passes, the embedding and the head
// with the loss, and the tensor/sequence-parallel communication points. The math calls
// operations (op_*) and collectives that each build supplies under the same names,
// argument order and accumulate rules (the contract below): train_gpt.c on the CPU (fp32,
// kernels_cpu.h, MPI), train_gpt.cu on the GPU (bf16, kernels_gpu.cuh, cuBLASLt, NCCL).
//
// What a build defines before including this header:
//   act_t         the activation element (float on the CPU, bf16 on the GPU)
//   SlotSends     what a slot's pipeline sends hold until they are done (MPI requests; on the
//                 GPU also events and pinned host copies)
//   ModelBackend  the build's own state (the GPU's stream, communicators, bf16 weights, ...)
//   GRAD_BUCKET_FLOATS  the most floats of one dp all-reduce of the gradient
//
// The backward of a layer is split as in zero-bubble pipelines (Qi et al. 2024):
//   layer_backward_input   the gradient the layer below needs (critical path): every matmul's
//                          input gradient, attention, norms (their small weight gradients too)
//   layer_backward_weight  the matmul weight and bias gradients, deferrable: it reads the
//                          layer's activations and the output gradients the input pass kept
//                          in the layer's WeightGradIn
// Run one after the other they give the gradients of the unsplit backward bit for bit.
#pragma once

// ----------------------------------------------------------------------------
// What the model keeps

// Activations one layer keeps for its backward (one micro-batch, this rank's part). N =
// rows this rank holds in the norm/residual regions (B*T, or B*T/tp with --sp); the matmul
// regions always see all B*T rows.
typedef struct {
    act_t* ln1;                        // B*T x C gathered
    float *ln1_mean, *ln1_rstd;        // fp32, the N local rows
    act_t* qkv;                        // B*T x (Hl + 2*KVl)*hd (after RoPE for LLaMA)
    float* att;                        // the attention's saved state: its B x Hl x T log-sum-exp (with cp, as
                                       // context_parallel.h splits it); a shared scratch unless --recompute none
    act_t* atty;                       // B*T x Hl*hd
    act_t* res2;                       // N x C residual after attention
    act_t* ln2;
    float *ln2_mean, *ln2_rstd;
    act_t *fch, *fch_act;              // B*T x Fl (GELU) or B*T x 2Fl [gate|up] -> B*T x Fl (SwiGLU)
} LayerActs;

// What a layer's weight pass needs beyond its activations: the output gradients of its four
// matmuls. dy_mlp / dy_att are the gradients of the two row-parallel outputs over all B*T
// rows (gathered with --sp): views of their buffers, or of the gradient the input pass got
// when that is still there for an immediate weight pass; dfch / dqkv those of the two
// column-parallel ones.
typedef struct {
    const act_t *dy_mlp, *dy_att;      // views
    act_t *dy_mlp_buf, *dy_att_buf;    // B*T x C each
    act_t *dfch, *dqkv;                // B*T x fc_dim, B*T x qkv_dim
} WeightGradIn;

// The last chunk's head of one micro-batch, from its forward to its backward.
typedef struct {
    act_t* lnf;                        // final norm output (B*T x C)
    float *lnf_mean, *lnf_rstd;
    act_t* logits;                     // B*T x Vl logits, replaced by dlogits
    float* losses;                     // B*T
} HeadActs;

// Everything one (micro-batch, chunk) keeps between its forward and its backward.
typedef struct {
    act_t** x;                         // [n_layers+1] layer inputs (N x C); x[n_layers] is the chunk output
    LayerActs* acts;                   // [n_layers]; unused under --recompute full
    WeightGradIn* wgin;                // [n_layers] with deferred weight passes, from its B to its W: a set
                                       // of the chunk's pool; else NULL (the shared one serves)
    HeadActs* head;                    // last chunk, from its forward to its backward: a set of the
                                       // chunk's pool; else NULL
    act_t *dout, *dinp;                // gradient from the next chunk / to the previous chunk (N x C)
    SlotSends sends;                   // sends still in flight from this slot
    int mb;                            // micro-batch held, -1 when free
} Slot;

// Buffer sets a (micro-batch, chunk) holds for part of its life only, as many as the
// schedule ever has held at once (parallel/pipeline.h pool_take / pool_give).
typedef struct {
    int n;                             // sets
    char* used;                        // [n]
    size_t bytes;                      // one set
} Pool;

typedef struct {
    int n_layers, layer0;              // layers [layer0, layer0 + n_layers)
    int n_slots;                       // most micro-batches in flight on this chunk (from the schedule)
    Slot* slots;
    char* mem;                         // all slot activations of this chunk, one buffer
    size_t slot_bytes;
    // deferred weight passes: weight-pass inputs from a B to its W, a set ([n_layers]) per
    // W the chunk can owe at once (1 when B and W run in one op)
    Pool wg;
    WeightGradIn* wg_sets;             // [wg.n * n_layers]
    // the last chunk: the head's activations from a forward to its backward
    Pool heads;
    HeadActs* head_sets;               // [heads.n]
} Chunk;

typedef struct {
    Args* args;
    ModelConfig c;
    Layout L;
    ParamLayout P;
    // shapes on this rank
    int B, T, C, hd, Hl, KVl, qkv_dim, Fl, fc_dim, Vl, v0, n_micro;
    // fp32 parameters, gradients, AdamW state (this rank's optimizer range [opt_lo, opt_hi))
    float *params, *grads, *grad_shard, *shard_tmp, *wte_acc, *m_state, *v_state;
    size_t opt_lo, opt_hi;
    Weights w, g;                      // views into params and grads
    LayerW *wl, *gl;
    // pipeline
    PipeOp* ops;
    int n_ops;
    Chunk* chunks;                     // [vpp]
    int* slot_of;                      // [vpp * n_micro] slot index of (chunk, mb), -1 none
    int defer_weight;                  // 1: a layer's weight pass may run after the input passes below it
    // scratch shared by all layers (one micro-batch)
    LayerActs scratch;                 // layer activations under --recompute full
    WeightGradIn wgin;                 // the weight pass's inputs when it follows the input pass at once
    float *att_scratch, *ce_max, *ce_sums;
    act_t *x_scratch, *partial, *reduced, *dres[2], *dres2, *datty, *dfch_act;
    float* sp_buf;                     // packing of the sequence-parallel partial gradients
    // context parallelism (parallel/context_parallel.h): positions of this rank's T rows (host),
    // one layer's ring and all-to-all buffers
    int* pos;
    float *cp_o, *cp_dkv;
    act_t *cp_kv[2], *cp_qkv, *cp_out, *cp_dout, *cp_send, *cp_recv;
    int *inputs, *targets;             // host: [n_micro * B * T] this step's tokens for this dp rank
    // accounting
    double loss_sum;                   // sum of token losses of this step on this rank
    size_t slots_live_bytes, slots_peak_bytes, scratch_bytes;
    Metrics* met;
    ModelBackend be;
} Model;

// ----------------------------------------------------------------------------
// The contract: what each build supplies. Weights are passed as their fp32 views (m->w,
// m->wl); the GPU reads its bf16 copy of them. "+=" accumulates, "=" overwrites.

// out (N x C) = norm(x) (LayerNorm for GPT-2, RMSNorm for LLaMA), mean/rstd kept (fp32).
static void op_norm_forward(Model* m, act_t* out, float* mean, float* rstd, const act_t* x, const float* w, const float* b, int N);
// dx = (accumulate ? dx : 0) + d norm / dx; dw, db +=.
static void op_norm_backward(Model* m, act_t* dx, float* dw, float* db, const act_t* dout, const act_t* x, const float* w,
                             const float* mean, const float* rstd, int N, int accumulate);
// out (N x OC) = inp (N x IC) @ w^T + b (b may be NULL).
static void op_matmul_forward(Model* m, act_t* out, const act_t* inp, const float* w, const float* b, int N, int IC, int OC);
// dinp (N x IC) = dout (N x OC) @ w.
static void op_matmul_backward_input(Model* m, act_t* dinp, const act_t* dout, const float* w, int N, int IC, int OC);
// dw (OC x IC) += dout^T @ inp; db (OC, may be NULL) += column sums of dout.
static void op_matmul_backward_weight(Model* m, float* dw, float* db, const act_t* dout, const act_t* inp, int N, int IC, int OC);
// The MLP's column-parallel half, a fused pair where the build has one (the GPU's GELU
// epilogue): fch = inp @ fcw^T + fcb, fch_act = GELU(fch) (GPT-2) or SwiGLU(fch) (LLaMA).
static void op_fc_act_forward(Model* m, act_t* fch, act_t* fch_act, const act_t* inp, const LayerW* w, int N);
// The pair's backward through the projection's input: dfch = act'(fch) * (dy @ fcprojw).
static void op_fcproj_act_backward_input(Model* m, act_t* dfch, const act_t* dy, const LayerW* w, const act_t* fch, int N);
// RoPE on the q and k heads of qkv rows in place (row i at position m->pos[i % T]); sign -1: the backward.
static void op_rope(Model* m, act_t* qkv, int N, float sign);
// Causal attention of this rank's heads (grouped-query) over whole sequences (no cp): out
// (B*T x Hl*hd), att its saved state (the log-sum-exp, B x Hl x T).
static void op_attention_forward(Model* m, act_t* out, float* att, const act_t* qkv, int B);
// dqkv = the attention's input gradient from dout (out and att as the forward left them).
static void op_attention_backward(Model* m, act_t* dqkv, const act_t* dout, const act_t* qkv, const act_t* out,
                                  const float* att, int B);
// One block of attention (model/config.h AttnBlock; context_parallel.h's ring): merged into
// the running fp32 output o (B*Ts x Ha*hd) and log-sum-exp lse (B x Ha x Ts) by log-sum-exp
// (a->init: these query rows start here). q: query heads at column 0 (stride a->q_ld); kv: k
// heads then v heads (stride a->kv_ld).
static void op_attention_block_forward(Model* m, float* o, float* lse, const act_t* q, const act_t* kv, const AttnBlock* a);
// The block's gradient: dq (B*Ts x Ha*hd) +=, dkv (B*Ts x 2*KVa*hd, dk then dv) +=, from the
// final lse and the output out and its gradient dout (B*Ts x Ha*hd).
static void op_attention_block_backward(Model* m, float* dq, float* dkv, const act_t* q, const act_t* kv, const act_t* dout,
                                        const act_t* out, const float* lse, const AttnBlock* a);
// dqkv (rows x (Ha + 2 KVa)*hd) = [dq | dkv] rounded to act_t.
static void op_attention_grad_pack(Model* m, act_t* dqkv, const float* dq, const float* dkv, size_t rows, int Ha, int KVa);
static void op_f32_to_act(Model* m, act_t* dst, const float* src, size_t n);
// out (N x C) = x + y (+ bias, may be NULL).
static void op_residual(Model* m, act_t* out, const act_t* x, const act_t* y, const float* bias, int N);
// db (C) += column sums of d (N x C).
static void op_column_sum(Model* m, float* db, const act_t* d, int N);
// Embedding rows of this rank's vocabulary [v0, v0 + Vl): out (N x C) = wte[token] or 0.
static void op_embedding_forward(Model* m, act_t* out, const int* tokens, int N);
static void op_embedding_backward(Model* m, const int* tokens, const act_t* dout, int N);  // g.wte +=
// GPT-2's positions: x (N rows from row0; row i at position m->pos[i % T]) += wpe[position]; and g.wpe += the gradient.
static void op_position_forward(Model* m, act_t* x, int N, int row0);
static void op_position_backward(Model* m, const act_t* dx, int N, int row0);
// Vocabulary-parallel cross-entropy over this rank's Vl columns: the row maxima, the sums of
// exponentials and the target logits, then the losses (and dloss/dlogits into logits when
// dlogits is not NULL: scale dloss_scale); the step's loss sum accumulates the losses.
static void op_ce_local_max(Model* m, float* max, const act_t* logits, int N);
static void op_ce_local_sums(Model* m, float* sums, const act_t* logits, const float* max, const int* targets, int N);
static void op_ce_finish(Model* m, float* losses, act_t* dlogits, const float* max, const float* sums, const int* targets, int N,
                         float dloss_scale);
static void op_loss_accumulate(Model* m, const float* losses, int N);

// Collectives go to a process group by kind (parallel/grid.h's Group: Layout.group on the
// CPU, GpuComms.group on the GPU).
// Collectives of activations (act_t). allgather: send may be recv + rank * n_per_rank.
static void act_allreduce_sum(Model* m, Group g, act_t* buf, size_t n);
static void act_reduce_scatter(Model* m, Group g, const act_t* send, act_t* recv, size_t n_per_rank);
static void act_allgather(Model* m, Group g, const act_t* send, act_t* recv, size_t n_per_rank);
// Block r of send to rank r; recv block r from rank r (n_per_rank each).
static void act_alltoall(Model* m, Group g, const act_t* send, act_t* recv, size_t n_per_rank);
// The cp ring (GROUP_CP_RING): bytes to the next rank and as many from the previous, started
// here and finished by ring_wait, so the block computed between them overlaps the transfer.
// One exchange at a time; step names it in the trace (>= 0: the exchange ring step `step`
// overlaps; < 0: the last dK,dV going home after ring step -1-step).
static void ring_start(Model* m, const void* send, void* recv, size_t bytes, int step);
static void ring_wait(Model* m, int step);
// fp32 collectives (the loss's maxima and sums, gradients).
static void f32_allreduce_sum(Model* m, Group g, float* buf, size_t n);
static void f32_allreduce_max(Model* m, Group g, float* buf, size_t n);
// Memory: activations, and fp32 gradient/parameter buffers, where this build keeps them.
static void act_copy(Model* m, act_t* dst, const act_t* src, size_t n);
// rows x cols elements from src (row stride src_ld) to dst (row stride dst_ld).
static void act_copy_2d(Model* m, act_t* dst, size_t dst_ld, const act_t* src, size_t src_ld, size_t rows, size_t cols);
static act_t* act_alloc(Model* m, size_t n);  // zeroed
static float* f32_alloc(Model* m, size_t n);  // zeroed
static void f32_copy(Model* m, float* dst, const float* src, size_t n);
static void f32_zero(Model* m, float* p, size_t n);
static void f32_add(Model* m, float* dst, const float* src, size_t n);  // dst += src
// Tokens: this dp rank's part of global batch `index` where the kernels read it (and the
// step's loss sum restarted); those arrays; one sampling window (T tokens) put there.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index);
static const int* batch_inputs(Model* m);
static const int* batch_targets(Model* m);
static const int* window_tokens(Model* m, const int* window, int T);
static void loss_fetch(Model* m);  // m->loss_sum holds this step's sum of token losses after it
// Wait for the queued device work (a no-op on the CPU).
static void device_sync(Model* m);

// The tensor- and sequence-parallel communication points the math below calls
// (tp_reduce_rows, sp_gather_rows, sp_gather_grad, and the row counts they imply).
#include "parallel/tensor_parallel.h"
// Context parallelism's attention (cp_attention_forward / _backward): the ring and the all-to-all.
#include "parallel/context_parallel.h"

// ----------------------------------------------------------------------------
// One transformer layer on this rank's heads and MLP columns.

static void norm_forward(Model* m, act_t* out, float* mean, float* rstd, const act_t* x, const float* w, const float* b, int B) {
    op_norm_forward(m, my_rows(m, out, B), mean, rstd, x, w, b, row_count(m, B));
    sp_gather_rows(m, out, B);
}

static void layer_forward(Model* m, int l, LayerActs* a, const act_t* x, act_t* out, int B) {
    const LayerW* w = &m->wl[l];
    int BT = B * m->T, N = row_count(m, B), C = m->C, Cl = m->Hl * m->hd;
    // attention block: x -> norm -> qkv (column-parallel) -> attention -> proj (row-parallel) -> + x
    norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, B);
    op_matmul_forward(m, a->qkv, a->ln1, w->qkvw, w->qkvb, BT, C, m->qkv_dim);
    if (m->c.arch == ARCH_LLAMA) op_rope(m, a->qkv, BT, 1.0f);
    cp_attention_forward(m, a->atty, a->att, a->qkv, B);
    op_matmul_forward(m, m->partial, a->atty, w->attprojw, NULL, BT, Cl, C);
    op_residual(m, a->res2, x, tp_reduce_rows(m, m->partial, B), w->attprojb, N);
    // MLP block: res2 -> norm -> fc (column-parallel) -> GELU / SwiGLU -> proj (row-parallel) -> + res2
    norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, B);
    op_fc_act_forward(m, a->fch, a->fch_act, a->ln2, w, BT);
    op_matmul_forward(m, m->partial, a->fch_act, w->fcprojw, NULL, BT, m->Fl, C);
    op_residual(m, out, a->res2, tp_reduce_rows(m, m->partial, B), w->fcprojb, N);
}

// The input pass. dout: gradient of the layer output (N x C); writes the gradient of its
// input to dx and leaves in wg what the weight pass needs (copies when it runs later).
static void layer_backward_input(Model* m, int l, LayerActs* a, WeightGradIn* wg, const act_t* x, const act_t* dout, act_t* dx, int B) {
    const LayerW* w = &m->wl[l];
    LayerW* g = &m->gl[l];
    int T = m->T, BT = B * T, N = row_count(m, B), C = m->C, Cl = m->Hl * m->hd, keep = m->defer_weight;
    // MLP block
    wg->dy_mlp = sp_gather_grad(m, dout, wg->dy_mlp_buf, B, keep);
    op_fcproj_act_backward_input(m, wg->dfch, wg->dy_mlp, w, a->fch, BT);
    op_matmul_backward_input(m, m->partial, wg->dfch, w->fcw, BT, C, m->fc_dim);
    act_copy(m, m->dres2, dout, (size_t)N * C);  // the residual path
    op_norm_backward(m, m->dres2, g->ln2w, g->ln2b, tp_reduce_rows(m, m->partial, B), a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, N, 1);
    // attention block
    wg->dy_att = sp_gather_grad(m, m->dres2, wg->dy_att_buf, B, keep);
    op_matmul_backward_input(m, m->datty, wg->dy_att, w->attprojw, BT, Cl, C);
    // Selective recomputation (Korthikanti et al. 2022): the attention's saved state was
    // not kept; run the attention forward again to rebuild it.
    if (m->c.recompute == RECOMPUTE_SELECTIVE) cp_attention_forward(m, a->atty, a->att, a->qkv, B);
    cp_attention_backward(m, wg->dqkv, m->datty, a->qkv, a->atty, a->att, B);
    if (m->c.arch == ARCH_LLAMA) op_rope(m, wg->dqkv, BT, -1.0f);
    op_matmul_backward_input(m, m->partial, wg->dqkv, w->qkvw, BT, C, m->qkv_dim);
    act_copy(m, dx, m->dres2, (size_t)N * C);
    op_norm_backward(m, dx, g->ln1w, g->ln1b, tp_reduce_rows(m, m->partial, B), x, w->ln1w, a->ln1_mean, a->ln1_rstd, N, 1);
}

// The weight pass: the four matmuls' weight (and bias) gradients. The row-parallel biases
// see this rank's N rows only (their --sp partial sums meet in sp_partial_sync).
static void layer_backward_weight(Model* m, int l, const LayerActs* a, const WeightGradIn* wg, int B) {
    LayerW* g = &m->gl[l];
    int BT = B * m->T, N = row_count(m, B), C = m->C, Cl = m->Hl * m->hd;
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
    op_embedding_forward(m, m->partial, tokens, BT);  // rows of this rank's vocabulary, zeros elsewhere
    act_copy(m, x0, tp_reduce_rows(m, m->partial, B), (size_t)N * m->C);  // one nonzero term per row: the sum is exact
    if (m->w.wpe) op_position_forward(m, x0, N, row0_of(m, B));
}
static void embed_backward(Model* m, const act_t* dx0, const int* tokens, int B) {
    if (m->g.wpe) op_position_backward(m, dx0, row_count(m, B), row0_of(m, B));
    op_embedding_backward(m, tokens, sp_gather_grad(m, dx0, m->partial, B, 0), B * m->T);
}

// Final norm, logits of this rank's vocabulary columns, vocabulary-parallel cross-entropy.
// dloss_scale > 0: the logits are replaced by dloss/dlogits for the backward.
static void head_forward(Model* m, Slot* s, const act_t* x, const int* targets, int B, float dloss_scale) {
    int BT = B * m->T;
    HeadActs* h = s->head;
    norm_forward(m, h->lnf, h->lnf_mean, h->lnf_rstd, x, m->w.lnfw, m->w.lnfb, B);
    op_matmul_forward(m, h->logits, h->lnf, m->w.head, NULL, BT, m->C, m->Vl);
    op_ce_local_max(m, m->ce_max, h->logits, BT);
    f32_allreduce_max(m, GROUP_TP, m->ce_max, BT);  // comm: tp all-reduce (max over vocabulary shards)
    op_ce_local_sums(m, m->ce_sums, h->logits, m->ce_max, targets, BT);
    f32_allreduce_sum(m, GROUP_TP, m->ce_sums, 2 * (size_t)BT);  // comm: tp all-reduce (sum exp, target logit)
    op_ce_finish(m, h->losses, dloss_scale > 0 ? h->logits : NULL, m->ce_max, m->ce_sums, targets, BT, dloss_scale);
    op_loss_accumulate(m, h->losses, BT);
}
// The head's backward, both passes (the head is one matmul; its weight pass is not deferred).
static void head_backward(Model* m, Slot* s, const act_t* x, act_t* dx, int B) {
    int BT = B * m->T;
    HeadActs* h = s->head;
    op_matmul_backward_input(m, m->partial, h->logits, m->w.head, BT, m->C, m->Vl);
    op_matmul_backward_weight(m, m->g.head, NULL, h->logits, h->lnf, BT, m->C, m->Vl);
    op_norm_backward(m, dx, m->g.lnfw, m->g.lnfb, tp_reduce_rows(m, m->partial, B), x, m->w.lnfw, h->lnf_mean, h->lnf_rstd,
                     row_count(m, B), 0);
}
