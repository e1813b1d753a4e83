// train_gpt.c: the CPU reference trainer. fp32, OpenMP, MPI for the layout.
//
// GPT-2 (learned positions, pre-LayerNorm, GELU MLP, causal multi-head attention,
// tied embedding) and LLaMA (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied
// head), trained with AdamW on data, tensor, sequence and pipeline parallel layouts.
// It is the oracle every other path is checked against.
//
// Reading order: main() -> model_init() -> train_loop() / train_step() (runtime/train.h) ->
// run_schedule() (parallel/pipeline.h) -> chunk_forward()/chunk_backward() ->
// layer_forward()/layer_backward_input()/layer_backward_weight() (model/model.h) -> the op_*
// operations here -> backend/cpu/kernels_cpu.h. All of that but the operations, memory and main
// is shared with the GPU build. Every communication point is marked "comm:".
#include "layout/activations.h"
#include "layout/args.h"
#include "layout/grid.h"
#include "layout/params.h"
#include "layout/schedule.h"
#include "data/data.h"
#include "backend/cpu/kernels_cpu.h"
#include "backend/cpu/offload.h"
#include "backend/cpu/reference.h"
#include "model/model.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero3.h"
#include "planner/planner.h"
#include "runtime/ckpt.h"
#include "runtime/metrics.h"
#include "runtime/run.h"
#include "runtime/train.h"

// ----------------------------------------------------------------------------
// The operations model.h asks for, on host memory: the fast kernels (backend/cpu/kernels_cpu.h), or
// with --kernels ref the plain loops of backend/cpu/reference.h (be.reference). Both backwards of the
// activations and of attention accumulate (+=); where the contract overwrites, a clear comes first.

static void op_norm_forward(Model* m, float* out, float* mean, float* rstd, const float* x, const float* w,
                            const float* b, int N) {
    int gpt2 = m->c.arch == ARCH_GPT2;
    if (m->be.reference && gpt2) ref_layernorm_forward(out, mean, rstd, x, w, b, N, m->C);
    else if (m->be.reference) ref_rmsnorm_forward(out, rstd, x, w, N, m->C);
    else if (gpt2) layernorm_forward(out, mean, rstd, x, w, b, N, m->C);
    else rmsnorm_forward(out, rstd, x, w, N, m->C);
}
static void op_norm_backward(Model* m, float* dx, float* dw, float* db, const float* dout, const float* x,
                             const float* w, const float* mean, const float* rstd, int N, int accumulate) {
    int gpt2 = m->c.arch == ARCH_GPT2;
    if (!accumulate) memset(dx, 0, sizeof(float) * N * m->C);
    if (m->be.reference && gpt2) ref_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, m->C);
    else if (m->be.reference) ref_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, m->C);
    else if (gpt2) layernorm_backward(dx, dw, db, m->be.norm_scratch, dout, x, w, mean, rstd, N, m->C);
    else rmsnorm_backward(dx, dw, m->be.norm_scratch, dout, x, w, rstd, N, m->C);
}
static void op_matmul_forward(Model* m, float* out, const float* inp, const float* w, const float* b, int N, int IC,
                              int OC) {
    if (m->be.reference) ref_matmul_forward(out, inp, w, b, N, IC, OC);
    else matmul_forward(out, inp, w, b, N, IC, OC);
}
static void op_matmul_backward_input(Model* m, float* dinp, const float* dout, const float* w, int N, int IC, int OC) {
    if (!m->be.reference) { matmul_backward_input(dinp, dout, w, N, IC, OC, 0); return; }
    memset(dinp, 0, sizeof(float) * N * IC);
    ref_matmul_backward_input(dinp, dout, w, N, IC, OC);
}
static void op_matmul_backward_weight(Model* m, float* dw, float* db, const float* dout, const float* inp, int N,
                                      int IC, int OC) {
    if (m->be.reference) ref_matmul_backward_weight(dw, db, dout, inp, N, IC, OC);
    else matmul_backward_weight(dw, db, dout, inp, N, IC, OC);
}
static void op_fc_act_forward(Model* m, float* fch, float* fch_act, const float* inp, const LayerW* w, int N) {
    op_matmul_forward(m, fch, inp, w->fcw, w->fcb, N, m->C, m->fc_dim);
    int gpt2 = m->c.arch == ARCH_GPT2;
    if (m->be.reference && gpt2) ref_gelu_forward(fch_act, fch, (size_t)N * m->Fl);
    else if (m->be.reference) ref_swiglu_forward(fch_act, fch, N, m->Fl);
    else if (gpt2) gelu_forward(fch_act, fch, (size_t)N * m->Fl);
    else swiglu_forward(fch_act, fch, N, m->Fl);
}
static void op_fcproj_act_backward_input(Model* m, float* dfch, const float* dy, const LayerW* w, const float* fch,
                                         int N) {
    op_matmul_backward_input(m, m->dfch_act, dy, w->fcprojw, N, m->Fl, m->C);
    memset(dfch, 0, sizeof(float) * N * m->fc_dim);
    int gpt2 = m->c.arch == ARCH_GPT2;
    if (m->be.reference && gpt2) ref_gelu_backward(dfch, fch, m->dfch_act, (size_t)N * m->Fl);
    else if (m->be.reference) ref_swiglu_backward(dfch, fch, m->dfch_act, N, m->Fl);
    else if (gpt2) gelu_backward(dfch, fch, m->dfch_act, (size_t)N * m->Fl);
    else swiglu_backward(dfch, fch, m->dfch_act, N, m->Fl);
}
static void op_rope(Model* m, float* qkv, int N, float sign) {
    int period;
    const int* pos = mb_positions(m, m->row_pos, m->pos, &period);
    float theta = m->c.rope_theta;
    int n_heads = m->n_head_local + m->n_kv_head_local;  // q and k
    if (m->be.reference) ref_rope(qkv, N, pos, period, m->qkv_dim, n_heads, m->hd, theta, sign);
    else rope_apply(qkv, N, pos, period, m->qkv_dim, n_heads, m->hd, theta, sign);
}
static void op_attention_forward(Model* m, float* out, float* att, const float* qkv, int B) {
    int H = m->n_head_local, KV = m->n_kv_head_local;
    if (m->be.reference) ref_attention_forward(out, att, qkv, B, m->T, H, KV, m->hd, mb_docs(m));
    else attention_forward(out, att, qkv, B, m->T, H, KV, m->hd, mb_docs(m));
}
static void op_attention_backward(Model* m, float* dqkv, const float* dout, const float* qkv, const float* out,
                                  const float* att, int B) {
    int H = m->n_head_local, KV = m->n_kv_head_local;
    if (m->be.reference) ref_attention_backward(dqkv, dout, qkv, out, att, B, m->T, H, KV, m->hd, mb_docs(m));
    else attention_backward(dqkv, dout, qkv, out, att, B, m->T, H, KV, m->hd, mb_docs(m));
}
static void op_attention_block_forward(Model* m, float* o, float* lse, const float* q, const float* kv,
                                       const AttnBlock* a) {
    if (m->be.reference) ref_attention_block_forward(o, a->Ha * a->hd, lse, q, kv, a);
    else attention_block_forward(o, a->Ha * a->hd, lse, q, kv, a);
}
static void op_attention_block_backward(Model* m, float* dq, float* dkv, const float* q, const float* kv,
                                        const float* dout, const float* out, const float* lse, const AttnBlock* a) {
    int dq_ld = a->Ha * a->hd, dkv_ld = 2 * a->KVa * a->hd;
    if (m->be.reference) ref_attention_block_backward(dq, dq_ld, dkv, dkv_ld, q, kv, dout, out, dq_ld, lse, a);
    else attention_block_backward(dq, dq_ld, dkv, dkv_ld, q, kv, dout, out, dq_ld, lse, a);
}
static void op_attention_grad_pack(Model* m, float* dqkv, const float* dq, const float* dkv, size_t rows, int Ha,
                                   int KVa) {
    size_t nq = (size_t)Ha * m->hd, nkv = (size_t)2 * KVa * m->hd;
    for (size_t i = 0; i < rows; i++) {
        memcpy(dqkv + i * (nq + nkv), dq + i * nq, sizeof(float) * nq);
        memcpy(dqkv + i * (nq + nkv) + nq, dkv + i * nkv, sizeof(float) * nkv);
    }
}
static void op_f32_to_act(Model* m, float* dst, const float* src, size_t n) { memcpy(dst, src, sizeof(float) * n); }
static void op_residual(Model* m, float* out, const float* x, const float* y, const float* bias, int N) {
    if (m->be.reference) { ref_residual_forward(out, x, y, bias, N, m->C); return; }
    residual_forward(out, x, y, (size_t)N * m->C);
    if (bias) add_bias(out, bias, N, m->C);
}
static void op_column_sum(Model* m, float* db, const float* d, int N) {
    if (m->be.reference) ref_column_sum(db, d, N, m->C);
    else column_dot_accumulate(db, d, NULL, N, m->C);
}
static void op_embedding_forward(Model* m, float* out, const int* tokens, int N) {
    if (m->be.reference) ref_embedding_forward(out, tokens, m->w.wte, N, m->C, m->vocab_start, m->Vl);
    else embedding_forward(out, tokens, m->w.wte, N, m->C, m->vocab_start, m->Vl);
}
static void op_embedding_backward(Model* m, const int* tokens, const float* dout, int N) {
    if (m->be.reference) ref_embedding_backward(m->g.wte, tokens, dout, N, m->C, m->vocab_start, m->Vl);
    else embedding_backward(m->g.wte, tokens, dout, N, m->C, m->vocab_start, m->Vl);
}
static void op_position_forward(Model* m, float* x, int N, int row0) {
    int period;
    const int* pos = mb_positions(m, m->row_pos, m->pos, &period);
    if (m->be.reference) ref_position_forward(x, m->w.wpe, N, row0, pos, period, m->C);
    else position_forward(x, m->w.wpe, N, row0, pos, period, m->C);
}
static void op_position_backward(Model* m, const float* dx, int N, int row0) {
    int period;
    const int* pos = mb_positions(m, m->row_pos, m->pos, &period);
    if (m->be.reference) ref_position_backward(m->g.wpe, dx, N, row0, pos, period, m->C);
    else position_backward(m->g.wpe, dx, N, row0, pos, period, m->C);
}
static void op_ce_local_max(Model* m, float* max, const float* logits, int N) {
    if (m->be.reference) ref_crossentropy_local_max(max, logits, N, m->Vl, m->vocab_start, m->c.vocab);
    else crossentropy_local_max(max, logits, N, m->Vl, m->vocab_start, m->c.vocab);
}
static void op_ce_local_sums(Model* m, float* sums, const float* logits, const float* max, const int* targets, int N) {
    if (m->be.reference) ref_crossentropy_local_sums(sums, logits, max, targets, N, m->Vl, m->vocab_start, m->c.vocab);
    else crossentropy_local_sums(sums, logits, max, targets, N, m->Vl, m->vocab_start, m->c.vocab);
}
static void op_ce_finish(Model* m, float* losses, float* dlogits, const float* max, const float* sums,
                         const int* targets, int N, float dloss_scale) {
    if (m->be.reference)
        ref_crossentropy_finish(losses, dlogits, max, sums, targets, N, m->Vl, m->vocab_start, m->c.vocab, dloss_scale);
    else crossentropy_finish(losses, dlogits, max, sums, targets, N, m->Vl, m->vocab_start, m->c.vocab, dloss_scale);
}
static void op_loss_accumulate(Model* m, const float* losses, int N) {
    for (int i = 0; i < N; i++) m->loss_sum += losses[i];
}

static Comm* comm_of(Model* m, Group g) { return &m->L.group[g]; }
static void act_allreduce_sum(Model* m, Group g, float* buf, size_t n) { comm_allreduce_sum(comm_of(m, g), buf, n); }
static void act_reduce_scatter(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_reduce_scatter(comm_of(m, g), send, recv, n_per_rank);
}
static void act_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_allgather(comm_of(m, g), send, recv, n_per_rank);
}
static void f32_allreduce_sum(Model* m, Group g, float* buf, size_t n) { comm_allreduce_sum(comm_of(m, g), buf, n); }
static void f32_allreduce_max(Model* m, Group g, float* buf, size_t n) { comm_allreduce_max(comm_of(m, g), buf, n); }
static void act_copy(Model* m, float* dst, const float* src, size_t n) { memcpy(dst, src, sizeof(float) * n); }
static void act_copy_2d(Model* m, float* dst, size_t dst_ld, const float* src, size_t src_ld, size_t rows,
                        size_t cols) {
    for (size_t i = 0; i < rows; i++) memcpy(dst + i * dst_ld, src + i * src_ld, sizeof(float) * cols);
}
static void act_alltoall(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_alltoall(comm_of(m, g), send, recv, n_per_rank);
}
static void ring_start(Model* m, const void* send, void* recv, size_t bytes, int step) {
    comm_ring_start(&m->L.group[GROUP_CP_RING], send, recv, bytes, &m->be.ring);
}
static void ring_wait(Model* m, int step) {
    comm_ring_wait(&m->L.group[GROUP_CP_RING], &m->be.ring);
    metrics_ring_event(m->met, step >= 0 ? 1 : 2, step >= 0 ? step : -1 - step, m->be.ring.t0, now_s());
}
static void trace_ring_blocks(Model* m, int step, double t0) { metrics_ring_event(m->met, 0, step, t0, now_s()); }
static void trace_op(Model* m, int kind, int mb, int chunk, double t0) {
    metrics_op(m->met, kind, mb, chunk, t0, now_s());
}

// ----------------------------------------------------------------------------
// The primitives the shared orchestration (parallel/, runtime/train.h) asks of this build: host
// memory and MPI.

static void f32_copy(Model* m, float* dst, const float* src, size_t n) { memcpy(dst, src, sizeof(float) * n); }
static void f32_free(Model* m, float* p) { free(p); }
static void f32_zero(Model* m, float* p, size_t n) { memset(p, 0, sizeof(float) * n); }
static void f32_add(Model* m, float* dst, const float* src, size_t n) { add_inplace(dst, src, n); }

// A blocking MPI all-reduce at the point the backward reaches (the CPU has no second stream
// to overlap it with); the GPU build runs it on NCCL's own stream.
static void grad_allreduce_dp_async(Model* m, float* buf, size_t n) {
    comm_allreduce_sum(&m->L.group[GROUP_DP], buf, n);
}
static void grad_allreduce_dp_join(Model* m) {}
static void layer_grads_queued(Model* m, size_t lo, size_t hi) {}
static void grad_reduce_scatter(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_reduce_scatter(comm_of(m, g), send, recv, n_per_rank);
}
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    comm_allgather(comm_of(m, g), send, recv, n_per_rank);
}
// --zero 3 (parallel/zero3.h): a unit's all-gather nonblocking (Open MPI moves it on inside
// later MPI calls and at the wait), its reduce-scatter in place (the sum of this replica's part
// lands at the start); the kernels read the fp32 weights where they were gathered.
static void unit_gather_start(Model* m, const float* mine, float* recv, const int* counts, const int* displs, size_t n,
                              GatherWait* w) {
    Comm* c = comm_of(m, GROUP_DP);
    mpiCheck(MPI_Iallgatherv(mine, counts[c->rank], MPI_FLOAT, recv, counts, displs, MPI_FLOAT, c->mpi, w));
}
static void unit_gather_wait(Model* m, GatherWait* w, size_t n) {
    Comm* c = comm_of(m, GROUP_DP);
    double t0 = now_s();
    mpiCheck(MPI_Wait(w, MPI_STATUS_IGNORE));
    c->seconds += now_s() - t0, c->bytes += 4.0 * n;
    watchdog_kick();
}
static float* unit_reduce_scatter(Model* m, float* grad, const int* counts, const int* displs, size_t n) {
    Comm* c = comm_of(m, GROUP_DP);
    COMM_TIMED(c, 4.0 * n, MPI_Reduce_scatter(MPI_IN_PLACE, grad, counts, MPI_FLOAT, MPI_SUM, c->mpi));
    return grad;
}
static void weights_arena(Model* m, float* arena, size_t n) {}
static void unit_weights_ready(Model* m, const float* buf, size_t n) {}

// Pipeline p2p: MPI_Isend straight from the slot's buffer (untouched until the slot's sends
// are waited for), blocking receive into the destination.
// Under --offload activations the slot's frame may be rewritten before the send completes
// (parallel/pipeline.h): the send reads a copy (the slot's own, reused once its last send is done).
static void pp_send(Model* m, Slot* s, int dir, int up, const float* src, size_t n, int peer, int tag) {
    if (m->c.offload & OFFLOAD_ACTIVATIONS) {
        if (!s->sends.copy[dir]) s->sends.copy[dir] = (float*)xmalloc(sizeof(float) * n);
        memcpy(s->sends.copy[dir], src, sizeof(float) * n);
        src = s->sends.copy[dir];
    }
    comm_isend(&m->L.group[GROUP_PP], src, n, peer, tag, &s->sends.req[dir]);
}
static void pp_send_wait(Model* m, Slot* s, int dir) { comm_wait(&m->L.group[GROUP_PP], &s->sends.req[dir]); }
static void pp_recv(Model* m, int dir, int up, float* dst, size_t n, int peer, int tag) {
    comm_recv(&m->L.group[GROUP_PP], dst, n, peer, tag);
}

// The kernels read the host token arrays; head_forward adds to m->loss_sum itself.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index) {
    m->loss_sum = 0;
    if (m->cp_order) { cp_load_by_doc(m, ts, index); return; }  // --cp-split doc (parallel/context_parallel.h)
    load_batch(ts, &m->c, m->L.dp_rank, m->n_micro, index, m->pos, m->T, m->inputs, m->targets, m->doc_start,
               m->doc_seq);
    if (m->doc_start) docs_positions(m, m->n_micro * m->B);
}
static const int* batch_inputs(Model* m) { return m->inputs; }
static const int* batch_targets(Model* m) { return m->targets; }
static const int* window_tokens(Model* m, const int* window, int T) { return window; }
static void loss_fetch(Model* m) {}

// fp64 sums of squares, range after range (each summed in a fixed order: kernels_cpu.h).
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss) {
    *ss += m->be.reference ? ref_sum_squares(x, n) : sum_squares(x, n);
}
static void sumsq_finish(Model* m, int n_ranges, double* ss) {}
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
    op_matmul_forward(m, row + m->vocab_start, lnf_row, m->w.head, NULL, 1, m->C, m->Vl);
    comm_allgather(&m->L.group[GROUP_TP], row + m->vocab_start, row,
                   m->Vl);  // comm: tp all-gather of one row of logits
}
static void device_sync(Model* m) {}

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

// Every activation buffer, sized by layout/activations.h (the planner counts the same lists);
// scratch_bytes and each chunk's slot_bytes, wg.bytes and heads.bytes record what was taken.
static void alloc_activations(Model* m) {
    ActShape s = act_shape(&m->c, m->B);
    int rc = m->c.recompute, e = sizeof(float);
    // scratch for one micro-batch, shared by all layers
    ActBuf b[N_SC];
    float* at[N_SC];
    scratch_bufs(&s, 1, b);
    carve_list(floats_of_bytes(act_bufs_bytes(b, N_SC, e, 1)), b, N_SC, at);
    m->att_scratch = at[SC_LSE], m->x_scratch = at[SC_X], m->partial = at[SC_PARTIAL], m->reduced = at[SC_REDUCED];
    m->dres[0] = at[SC_DRES0], m->dres[1] = at[SC_DRES1], m->dres_after_attn = at[SC_DRES_AFTER_ATTN];
    m->datty = at[SC_DATTY], m->dfch_act = at[SC_DFCH_ACT], m->ce_max = at[SC_CE_MAX], m->ce_sums = at[SC_CE_SUMS];
    m->be.norm_scratch = at[SC_NORM];
    carve_weight_grad_in(m, &m->weight_grad_in, floats_of_bytes(act_weight_grad_in_bytes(&s, e, 1)));
    if (rc == RECOMPUTE_FULL) carve_acts(m, &m->scratch, floats_of_bytes(act_layer_bytes(&s, 0, e, 1)), 0);
    m->scratch_bytes = (size_t)act_scratch_bytes(&s, rc, 1, e, 1);
    cp_alloc(m);
    chunks_init(m);
    for (int c = 0; c < m->L.vpp; c++) {
        Chunk* ch = &m->chunks[c];
        ch->slot_bytes = (size_t)act_slot_bytes(&s, ch->n_layers, rc, e, 1);
        ch->mem = (char*)floats_of_bytes((double)ch->slot_bytes * ch->n_frames);
        chunk_frames_init(m, c);  // parallel/pipeline.h: the slots in their frames, or the tier
        // the pools: weight-pass inputs, and the last chunk's heads
        ch->wg.bytes = (size_t)(ch->n_layers * act_weight_grad_in_bytes(&s, e, 1));
        float* p = floats_of_bytes((double)ch->wg.bytes * ch->wg.n);
        for (int i = 0; i < ch->wg.n * ch->n_layers; i++) p = carve_weight_grad_in(m, &ch->wg_sets[i], p);
        ch->heads.bytes = (size_t)act_head_bytes(&s, e, 1);
        p = floats_of_bytes((double)ch->heads.bytes * ch->heads.n);
        for (int i = 0; i < ch->heads.n; i++) p = carve_head(m, &ch->head_sets[i], p);
    }
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
static float* act_alloc(Model* m, size_t n) { return (float*)xcalloc(n, sizeof(float)); }
// --zero 3: the whole buffer for a moment, then this replica's shard kept (parallel/zero3.h).
static void params_init(Model* m) {
    float* p = m->zero3_state ? f32_alloc(m, m->P.n_padded) : m->params;
    init_params(&m->P, &m->c, m->c.tp, m->L.tp_rank, p);
    if (m->zero3_state) zero3_keep_shard(m, p), f32_free(m, p);
}

static void model_init(Model* m, Args* a, Metrics* met) {
    model_init_layout(m, a, met);  // runtime/train.h
    m->be.reference = a->kernels_ref;
    model_init_params(m);
    model_init_schedule(m);        // the op list, then activations sized by it
}

// A tier that could not be made (backend/cpu/offload.h tier_map) ends the run with one error line,
// the lowest such rank's; every rank exits together.
static void offload_check(void) {
    int world, first, mine;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &mine);
    first = offload_error[0] ? mine : world;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == world) return;
    if (mine == first) print_error("%s", offload_error);
    MPI_Finalize();
    exit(1);
}

// With --offload optimizer: m and v leave the resident set after a checkpoint read or wrote them.
static void opt_state_release(Model* m) {
    if (!(m->c.offload & OFFLOAD_OPTIMIZER)) return;
    tier_release(m->m_state, sizeof(float) * (m->opt_hi - m->opt_lo));
    tier_release(m->v_state, sizeof(float) * (m->opt_hi - m->opt_lo));
}

// Checkpoints: ckpt.h on the fp32 weights and AdamW state as they are (offloaded or not).
// --zero 3 all-gathers the weights for the writer (zero3_full_params).
static void save_checkpoint(Model* m, int step) {
    float* params = m->param_shard ? zero3_full_params(m) : m->params;
    ckpt_save(&m->L, &m->P, &m->c, m->args, params, m->m_state, m->v_state, m->opt_lo, m->opt_hi, step);
    if (params != m->params) free(params);
    opt_state_release(m);
}

// ----------------------------------------------------------------------------

#ifndef TESTING
int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan")) return stdout_exit_code(plan_main(argc, argv));
    wait_policy_passive(argv);  // before any OpenMP region: re-executes once with OMP_WAIT_POLICY=passive
    {
        static Args pre;  // flags first: what this build cannot do is refused before mpirun starts ranks
        parse_args(&pre, argc, argv);
        if (flag_given(&pre, "--comm") && !pre.comm_mpi)
            fail("--comm nccl: the CPU build communicates over MPI; NCCL is the GPU build's (--comm mpi, or leave "
                 "it out)");
        if (pre.grad_reduce_bf16) fail("--grad-reduce bf16: the CPU build reduces its fp32 gradients in fp32");
    }
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    ModelConfig* c = &a->cfg;
    int world = run.world, rank = run.rank;
    // each sampled token is a forward of the whole window: 200 of them at gpt2-124m took 45 s on 2 cores
    if (!flag_given(a, "--sample-len") && config_num_params(c) > 50e6) a->sample_len = 32, a->sample_note = 1;
    char kernels[128];  // the start-up table's row
    if (a->kernels_ref) snprintf(kernels, sizeof(kernels), "ref: plain fp32 loops (backend/cpu/reference.h; slow)");
    else snprintf(kernels, sizeof(kernels), "fast: %s, packed GEMM (backend/cpu/kernels_cpu.h)", simd_name());
    a->kernels_note = kernels;
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
    offload_check();
    int start_step = 0;
    float* params = m.param_shard ? zero3_full_params(&m) : m.params;  // --zero 3: the readers fill it whole
    if (a->import_llmc) llmc_import(a->import_llmc, &m.L, &m.P, c, params);
    if (a->import_hf) hf_import(a->import_hf, &m.L, &m.P, c, params);
    if (a->resume) start_step = ckpt_resume(&m.L, &m.P, c, a, params, m.m_state, m.v_state, m.opt_lo, m.opt_hi);
    if (params != m.params) zero3_keep_shard(&m, params), free(params);
    opt_state_release(&m);
    if (rank == 0) print_startup(&m.L, &m.P, c, a, &run.train, &run.val, &met, m.n_micro, start_step);
    size_t act_bytes = m.scratch_bytes;
    double act_tier_bytes = 0;  // --offload activations: the slots beyond the frames
    for (int ch = 0; ch < m.L.vpp; ch++) {
        Chunk* k = &m.chunks[ch];
        act_bytes += k->slot_bytes * k->n_frames + k->wg.bytes * k->wg.n + k->heads.bytes * k->heads.n;
        if (k->tier) act_tier_bytes += (double)k->slot_bytes * k->n_slots;
    }
    // the planner's view of this machine: ranks time-share the cores, each with cores/world threads
    metrics_predict(&met, c, "cpu", core * (cores / world > 1 ? cores / world : 1), (int)cores, &m.P,
                    m.opt_hi - m.opt_lo, act_bytes / sizeof(float), 4, act_tier_bytes);

    int code = train_loop(&m, &run, &met, start_step);  // 0, or 128 + a stop signal, or 1: every step skipped
    if (code) {
        MPI_Finalize();
        return code;
    }
    params = m.param_shard ? zero3_full_params(&m) : m.params;
    if (a->export_llmc) llmc_export(a->export_llmc, &m.L, &m.P, c, params);
    if (a->export_hf) hf_export(a->export_hf, &m.L, &m.P, c, params, a->eot, a->tokenizer);
    if (params != m.params) free(params);
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    MPI_Finalize();
    return stdout_exit_code(0);
}
#endif
