// model.h: the transformer, written once for both builds: what one (micro-batch, chunk)
// keeps, one layer's forward and its backward in two passes, the embedding and the head
// with the loss, and the tensor/sequence-parallel communication points. The math calls
// operations (op_*) and collectives that each build supplies under the same names,
// argument order and accumulate rules (the contract, backend/backend.h: also what a build
// defines before including this header, and the include order): train_gpt.c on the CPU
// (fp32, kernels_cpu.h, MPI), train_gpt.cu on the GPU (bf16, kernels_gpu.cuh, cuBLASLt, NCCL).
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

// ----------------------------------------------------------------------------
// What the model keeps

// Activations one layer keeps for its backward (one micro-batch, this rank's part). N =
// rows this rank holds in the norm/residual regions (B*T, or B*T/tp with --sp); the matmul
// regions always see all B*T rows.
typedef struct {
    act_t* ln1;                        // B*T x C gathered
    float *ln1_mean, *ln1_rstd;        // fp32, the N local rows
    act_t* qkv;                        // B*T x (n_head_local + 2*n_kv_head_local)*hd (after RoPE for LLaMA)
    float* att;                        // the attention's saved state: its B x n_head_local x T log-sum-exp (with cp, as
                                       // context_parallel.h splits it); a shared scratch unless --recompute none
    act_t* atty;                       // B*T x n_head_local*hd
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
    WeightGradIn* weight_grad_in;                // [n_layers] with deferred weight passes, from its B to its W: a set
                                       // of the chunk's pool; else NULL (the shared one serves)
    HeadActs* head;                    // last chunk, from its forward to its backward: a set of the
                                       // chunk's pool; else NULL
    act_t *dout, *dinp;                // gradient from the next chunk / to the previous chunk (N x C)
    SlotSends sends;                   // sends still in flight from this slot
    int mb;                            // micro-batch held, -1 when free
    int frame;                         // the chunk's device frame its buffers are in, -1: none (offloaded)
    int stored;                        // 1: its activations wait in the chunk's tier (--offload activations)
    int free_after;                    // free: another micro-batch may take it after this op of the step's list
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
    char* mem;                         // the device frames of this chunk's slots, one buffer
    size_t slot_bytes;
    int n_frames;                      // n_slots, or fewer with --offload activations (runtime/offload.h)
    int* frame_slot;                   // [n_frames] the slot in each frame, -1 free
    char* tier;                        // --offload activations: n_slots slots' bytes in the offload tier
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
    int B, T, C, hd, n_head_local, n_kv_head_local, qkv_dim, Fl, fc_dim, Vl, vocab_start, n_micro;
    // fp32 parameters, gradients, AdamW state (this rank's optimizer range [opt_lo, opt_hi))
    float *params, *grads, *grad_shard, *m_state, *v_state;
    size_t opt_lo, opt_hi;
    // --zero 3 (parallel/zero3.h): the weights of [opt_lo, opt_hi) only, and the gathered units
    // the views point into (params and grads are NULL); else NULL
    float* param_shard;
    struct ShardedState* zero3_state;
    struct ShardedState* sharded;  // --zero 2 and 3: the units whose gradients the views point into (grads NULL)
    Weights w, g;                      // views into params and grads
    LayerW *wl, *gl;
    // pipeline
    PipeOp* ops;                       // this stage's list (lists[stage])
    int n_ops;
    PipeOp** lists;                    // [pp] the stages' lists while the slots are sized, then this stage's only
    int* n_ops_of;                     // [pp]
    int* slot_free_after;              // [vpp * n_micro] schedule_slots' free_after of (chunk, mb)
    int op_at;                         // index of the op running in m->ops, INT_MAX in another list
    double replica_sumsq;              // --noise-scale: the replicas' own squared gradient norms, summed
    Chunk* chunks;                     // [vpp]
    int* slot_of;                      // [vpp * n_micro] slot index of (chunk, mb), -1 none
    int defer_weight;                  // 1: a layer's weight pass may run after the input passes below it
    // scratch shared by all layers (one micro-batch)
    LayerActs scratch;                 // layer activations under --recompute full
    WeightGradIn weight_grad_in;                 // the weight pass's inputs when it follows the input pass at once
    float *att_scratch, *ce_max, *ce_sums;
    act_t *x_scratch, *partial, *reduced, *dres[2], *dres_after_attn, *datty, *dfch_act;
    float* sp_buf;                     // packing of the sequence-parallel partial gradients
    // context parallelism (parallel/context_parallel.h): positions of this rank's T rows (host),
    // one layer's ring and all-to-all buffers
    int* pos;
    // --cp-split doc with documents: the positions every ring rank holds of each of the step's
    // sequences (cp_doc_order: [n_micro * B * seq_len], cp rank c's T rows at [c * T]); cp_by_doc:
    // whether they are the step's (0: the sampler's window, on the zig-zag of pos); kernel_cp_order:
    // cp_order where the build's kernels read it (AttnBlock.q_at, k_at; the GPU: its device copy)
    int* cp_order;
    const int* kernel_cp_order;
    int cp_by_doc;
    float *cp_o, *cp_dkv;
    act_t *cp_kv[2], *cp_qkv, *cp_out, *cp_dout, *cp_send, *cp_recv;
    int *inputs, *targets;             // host: [n_micro * B * T] this step's tokens for this dp rank
    // documents (runtime/data.h; all NULL with --doc-mask off): doc_start of each token this rank
    // holds (like inputs), of every position of the step's sequences (doc_seq, [n_micro * B *
    // seq_len]), and each row's RoPE/wpe position (row_pos = pos - doc_start, like inputs);
    // mb: the micro-batch whose documents the ops use (run_schedule, the sampler's window: 0);
    // kernel_doc_seq: doc_seq where the build's kernels read it (the GPU: its device copy)
    int *doc_start, *doc_seq, *row_pos;
    const int* kernel_doc_seq;
    int mb;
    // accounting
    double loss_sum;                   // sum of token losses of this step on this rank
    size_t slots_live_bytes, slots_peak_bytes, scratch_bytes;
    Metrics* met;
    ModelBackend be;
} Model;

// What each build supplies (ops, collectives, point-to-point, memory, optimizer, I/O).
#include "backend/backend.h"

// ----------------------------------------------------------------------------
// The communication steps of the layer math, defined in parallel/ (which comes after this
// header: backend/backend.h, the include order). tensor_parallel.h: the rows this rank holds
// (N = row_count of B*T, from row0_of) and the tp / sp collectives of the row- and
// column-parallel matmuls; context_parallel.h: the attention over a sequence split over cp.

static int row_count(const Model* m, int B);
static int row0_of(const Model* m, int B);
static act_t* my_rows(Model* m, act_t* full, int B);
static act_t* tp_reduce_rows(Model* m, act_t* partial, int B);
static void sp_gather_rows(Model* m, act_t* full, int B);
static const act_t* sp_gather_grad(Model* m, const act_t* d, act_t* dst, int B, int keep);
static void cp_attention_forward(Model* m, act_t* out, float* lse, const act_t* qkv, int B);
static void cp_attention_backward(Model* m, act_t* dqkv, const act_t* dout, const act_t* qkv, const act_t* out,
                                  const float* lse, int B);

// ----------------------------------------------------------------------------
// Documents (--doc-mask on): the attention stays within each document, positions restart.

static void docs_alloc(Model* m) {
    if (!m->args->doc_masked) return;
    size_t held = (size_t)m->n_micro * m->B * m->T;
    m->doc_start = (int*)xmalloc(sizeof(int) * held);
    m->row_pos = (int*)xmalloc(sizeof(int) * held);
    m->doc_seq = (int*)xmalloc(sizeof(int) * held * m->c.cp);
    m->kernel_doc_seq = m->doc_seq;
    if (m->c.cp_doc && m->c.cp > 1) m->cp_order = (int*)xmalloc(sizeof(int) * held * m->c.cp);
    m->kernel_cp_order = m->cp_order;
}
// row_pos of n_seq sequences from doc_start (after load_batch).
static void docs_positions(Model* m, int n_seq) {
    for (int s = 0; s < n_seq; s++)
        for (int j = 0; j < m->T; j++) {
            size_t i = (size_t)s * m->T + j;
            int p = m->cp_by_doc ? m->cp_order[(size_t)s * m->c.seq_len + m->L.cp_rank * m->T + j] : m->pos[j];
            m->row_pos[i] = p - m->doc_start[i];
        }
}
// The sampler's window (seq_len tokens, unfilled ones 0) as micro-batch 0's one sequence.
static void docs_of_window(Model* m, const int* window) {
    m->mb = 0, m->cp_by_doc = 0;
    if (!m->doc_start) return;
    doc_starts(window, m->c.seq_len, m->args->eot, m->doc_seq);
    for (int j = 0; j < m->T; j++) m->doc_start[j] = m->doc_seq[m->pos[j]];
    docs_positions(m, 1);
}
// The positions of micro-batch m->mb's rows (RoPE, wpe): from the build's copy of m->row_pos
// (row_pos) or of m->pos (pos, without documents); row i's is at [i % *period].
static const int* mb_positions(const Model* m, const int* row_pos, const int* pos, int* period) {
    if (!m->doc_start) { *period = m->T; return pos; }
    *period = m->B * m->T;
    return row_pos + (size_t)m->mb * m->B * m->T;
}
// Micro-batch m->mb's documents for the attention (AttnBlock.doc, doc_ld seq_len) where the
// build's kernels read them; NULL without documents.
static const int* mb_docs(const Model* m) {
    return m->doc_start ? m->kernel_doc_seq + (size_t)m->mb * m->B * m->c.seq_len : NULL;
}

// ----------------------------------------------------------------------------
// One transformer layer on this rank's heads and MLP columns.

static void norm_forward(Model* m, act_t* out, float* mean, float* rstd, const act_t* x, const float* w, const float* b,
                         int B) {
    op_norm_forward(m, my_rows(m, out, B), mean, rstd, x, w, b, row_count(m, B));
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
    op_residual(m, a->res2, x, attproj, w->attprojb, N);
    // MLP block: res2 -> norm -> fc (column-parallel) -> GELU / SwiGLU -> proj (row-parallel) -> + res2
    norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, B);
    op_fc_act_forward(m, a->fch, a->fch_act, a->ln2, w, BT);
    op_matmul_forward(m, m->partial, a->fch_act, w->fcprojw, NULL, BT, m->Fl, C);
    // comm: tp all-reduce (reduce-scatter with --sp) of the row-parallel projection's partial sums
    const act_t* fcproj = tp_reduce_rows(m, m->partial, B);
    op_residual(m, out, a->res2, fcproj, w->fcprojb, N);
}

// The input pass. dout: gradient of the layer output (N x C); writes the gradient of its
// input to dx and leaves in wg what the weight pass needs (copies when it runs later).
static void layer_backward_input(Model* m, int l, LayerActs* a, WeightGradIn* wg, const act_t* x, const act_t* dout,
                                 act_t* dx, int B) {
    const LayerW* w = &m->wl[l];
    LayerW* g = &m->gl[l];
    int T = m->T, BT = B * T, N = row_count(m, B), C = m->C, Cl = m->n_head_local * m->hd, keep = m->defer_weight;
    // MLP block
    wg->dy_mlp = sp_gather_grad(m, dout, wg->dy_mlp_buf, B, keep);  // comm: tp all-gather (--sp only)
    op_fcproj_act_backward_input(m, wg->dfch, wg->dy_mlp, w, a->fch, BT);
    op_matmul_backward_input(m, m->partial, wg->dfch, w->fcw, BT, C, m->fc_dim);
    act_copy(m, m->dres_after_attn, dout, (size_t)N * C);  // the residual path
    // comm: tp all-reduce (reduce-scatter with --sp) of the column-parallel fc's input gradient
    const act_t* dln2 = tp_reduce_rows(m, m->partial, B);
    op_norm_backward(m, m->dres_after_attn, g->ln2w, g->ln2b, dln2, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, N, 1);
    // attention block
    wg->dy_att = sp_gather_grad(m, m->dres_after_attn, wg->dy_att_buf, B, keep);  // comm: tp all-gather (--sp only)
    op_matmul_backward_input(m, m->datty, wg->dy_att, w->attprojw, BT, Cl, C);
    // Selective recomputation (Korthikanti et al. 2022): the attention's saved state was
    // not kept; run the attention forward again to rebuild it.
    if (m->c.recompute == RECOMPUTE_SELECTIVE) cp_attention_forward(m, a->atty, a->att, a->qkv, B);
    // comm (cp > 1): all-to-all and / or ring
    cp_attention_backward(m, wg->dqkv, m->datty, a->qkv, a->atty, a->att, B);
    if (m->c.arch == ARCH_LLAMA) op_rope(m, wg->dqkv, BT, -1.0f);
    op_matmul_backward_input(m, m->partial, wg->dqkv, w->qkvw, BT, C, m->qkv_dim);
    act_copy(m, dx, m->dres_after_attn, (size_t)N * C);
    // comm: tp all-reduce (reduce-scatter with --sp) of the column-parallel qkv's input gradient
    const act_t* dln1 = tp_reduce_rows(m, m->partial, B);
    op_norm_backward(m, dx, g->ln1w, g->ln1b, dln1, x, w->ln1w, a->ln1_mean, a->ln1_rstd, N, 1);
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
    op_embedding_forward(m, m->partial, tokens, BT);  // rows of this rank's vocabulary, zeros elsewhere
    // comm: tp all-reduce (reduce-scatter with --sp); one nonzero term per row: the sum is exact
    const act_t* embedded = tp_reduce_rows(m, m->partial, B);
    act_copy(m, x0, embedded, (size_t)N * m->C);
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
    // comm: tp all-reduce (reduce-scatter with --sp) of the vocabulary-parallel head's input gradient
    const act_t* dlnf = tp_reduce_rows(m, m->partial, B);
    op_norm_backward(m, dx, m->g.lnfw, m->g.lnfb, dlnf, x, m->w.lnfw, h->lnf_mean, h->lnf_rstd, row_count(m, B), 0);
}

#endif
