// backend/cpu/ops.h: the CPU build's operations (backend/backend.h's ops) on host memory, and the
// activation collectives over MPI (layout/grid.h's comm_*).
#ifndef CPU_OPS_H
#define CPU_OPS_H

#include "backend/backend.h"
#include "backend/cpu/kernels_cpu.h"
#include "backend/cpu/reference.h"

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
static void op_residual_norm_forward(Model* m, float* res, float* out, float* mean, float* rstd, const float* x,
                                     const float* y, const float* bias, const float* w, const float* b, int N) {
    if (m->be.reference) {  // the plain loops, one after the other
        op_residual(m, res, x, y, bias, N);
        op_norm_forward(m, out, mean, rstd, res, w, b, N);
    } else if (m->c.arch == ARCH_GPT2) {
        residual_layernorm_forward(res, out, mean, rstd, x, y, bias, w, b, N, m->C);
    } else {
        residual_rmsnorm_forward(res, out, rstd, x, y, bias, w, N, m->C);
    }
}
static void op_norm_backward(Model* m, float* dx, const float* dres, float* dw, float* db, const float* dout,
                             const float* x, const float* w, const float* mean, const float* rstd, int N) {
    int gpt2 = m->c.arch == ARCH_GPT2;
    if (!m->be.reference) {
        if (gpt2) layernorm_backward(dx, dres, dw, db, dout, x, w, mean, rstd, N, m->C);
        else rmsnorm_backward(dx, dres, dw, dout, x, w, rstd, N, m->C);
        return;
    }
    // the reference loops add into dx
    if (!dres) memset(dx, 0, sizeof(float) * N * m->C);
    else if (dres != dx) memcpy(dx, dres, sizeof(float) * N * m->C);
    if (gpt2) ref_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, m->C);
    else ref_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, m->C);
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
static void op_attention_blocks_forward(Model* m, float* o, float* lse, const float* q, const float* kv,
                                        const AttnBlock* blk, int n) {
    for (const AttnBlock* a = blk; a < blk + n; a++) {
        if (m->be.reference) ref_attention_block_forward(o, a->Ha * a->hd, lse, q, kv, a);
        else attention_block_forward(o, a->Ha * a->hd, lse, q, kv, a);
    }
}
static void op_attention_blocks_backward(Model* m, float* dq, float* dkv, const float* q, const float* kv,
                                         const float* dout, const float* out, const float* lse, const AttnBlock* blk,
                                         int n) {
    for (const AttnBlock* a = blk; a < blk + n; a++) {
        int dq_ld = a->Ha * a->hd, dkv_ld = 2 * a->KVa * a->hd;
        if (m->be.reference) ref_attention_block_backward(dq, dq_ld, dkv, dkv_ld, q, kv, dout, out, dq_ld, lse, a);
        else attention_block_backward(dq, dq_ld, dkv, dkv_ld, q, kv, dout, out, dq_ld, lse, a);
    }
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
    if (m->be.reference) ref_embedding_forward(out, tokens, m->w.wte, N, m->C, m->vocab_start, m->vocab_local);
    else embedding_forward(out, tokens, m->w.wte, N, m->C, m->vocab_start, m->vocab_local);
}
static void op_embedding_backward(Model* m, const int* tokens, const float* dout, int N) {
    if (m->be.reference) ref_embedding_backward(m->g.wte, tokens, dout, N, m->C, m->vocab_start, m->vocab_local);
    else embedding_backward(m->g.wte, tokens, dout, N, m->C, m->vocab_start, m->vocab_local);
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
    if (m->be.reference) ref_crossentropy_local_max(max, logits, N, m->vocab_local, m->vocab_start, m->c.vocab);
    else crossentropy_local_max(max, logits, N, m->vocab_local, m->vocab_start, m->c.vocab);
}
static void op_ce_local_sums(Model* m, float* sums, const float* logits, const float* max, const int* targets, int N) {
    if (m->be.reference)
        ref_crossentropy_local_sums(sums, logits, max, targets, N, m->vocab_local, m->vocab_start, m->c.vocab);
    else crossentropy_local_sums(sums, logits, max, targets, N, m->vocab_local, m->vocab_start, m->c.vocab);
}
static void op_ce_finish(Model* m, float* losses, float* dlogits, const float* max, const float* sums,
                         const int* targets, int N, float dloss_scale) {
    if (m->be.reference)
        ref_crossentropy_finish(losses, dlogits, max, sums, targets, N, m->vocab_local, m->vocab_start, m->c.vocab,
                                dloss_scale);
    else
        crossentropy_finish(losses, dlogits, max, sums, targets, N, m->vocab_local, m->vocab_start, m->c.vocab,
                            dloss_scale);
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
    trace_ring(m->trace, step >= 0 ? 1 : 2, step >= 0 ? step : -1 - step, m->be.ring.t0, now_s());
}

#endif
