// backend/gpu/ops.h: the GPU build's operations (backend/backend.h's ops): kernels_gpu.cuh and
// cuBLASLt on the compute stream, reading the bf16 copy of the weights; and the activation
// collectives over NCCL, or host-staged MPI (comm_nccl.h).
#ifndef GPU_OPS_H
#define GPU_OPS_H

#include "backend/backend.h"
#include "backend/gpu/comm_nccl.h"
#include "backend/gpu/kernels_gpu.cuh"
#include "backend/gpu/op_times.h"

// The operations model.h asks for: kernels_gpu.cuh and cuBLASLt on the compute stream,
// reading the bf16 copy of the weights. The kernels take an accumulate flag where the
// contract needs one. Each op of a family --op-times reports is between op_family_begin and
// op_family_end (op_times.h).

// The bf16 copy of a weight, from its fp32 view (NULL stays NULL).
static const bf16* bf(const Model* m, const float* p) { return p ? m->be.params_bf16 + (p - m->be.arena) : NULL; }

static void op_norm_forward(Model* m, bf16* out, float* mean, float* rstd, const bf16* x, const float* w,
                            const float* b, int N) {
    op_residual_norm_forward(m, NULL, out, mean, rstd, x, NULL, NULL, w, b, N);
}
// One kernel (norm.cuh): the residual stream's row is summed, rounded, written and normalized
// by one warp; the residual's bias rounds with it as in residual_bias_forward.
static void op_residual_norm_forward(Model* m, bf16* res, bf16* out, float* mean, float* rstd, const bf16* x,
                                     const bf16* y, const float* bias, const float* w, const float* b, int N) {
    op_family_begin(m, OP_NORM);
    int gpt2 = m->c.arch == ARCH_GPT2;
    residual_norm_forward_gpu(res, out, gpt2 ? mean : NULL, rstd, x, y, bf(m, bias), bf(m, w), gpt2 ? bf(m, b) : NULL,
                              N, m->C, m->be.stream);
    op_family_end(m);
}
static void op_norm_backward(Model* m, bf16* dx, const bf16* dres, float* dw, float* db, const bf16* dout,
                             const bf16* x, const float* w, const float* mean, const float* rstd, int N) {
    op_family_begin(m, OP_NORM);
    int gpt2 = m->c.arch == ARCH_GPT2;
    norm_backward_gpu(dx, dres, dw, gpt2 ? db : NULL, dout, x, bf(m, w), gpt2 ? mean : NULL, rstd, N, m->C,
                      m->be.stream);
    op_family_end(m);
}
// The bias rides on cuBLASLt's epilogue when its pointer is 16-byte aligned (always so for
// d_model a multiple of 8, i.e. every preset), else a separate add.
static void op_matmul_forward(Model* m, bf16* out, const bf16* inp, const float* w, const float* b, int N, int IC,
                              int OC) {
    op_family_begin(m, OP_MATMUL);
    const bf16* bias = bf(m, b);
    int epilogue = bias && lt_bias_aligned(bias);
    matmul_forward_gpu(out, inp, bf(m, w), epilogue ? bias : NULL, N, IC, OC, m->be.stream);
    if (bias && !epilogue) residual_bias_forward_gpu(out, out, NULL, bias, N, OC, m->be.stream);
    op_family_end(m);
}
static void op_matmul_backward_input(Model* m, bf16* dinp, const bf16* dout, const float* w, int N, int IC, int OC) {
    op_family_begin(m, OP_MATMUL);
    matmul_backward_gpu(dinp, NULL, NULL, dout, NULL, bf(m, w), N, IC, OC, 0, m->be.stream);
    op_family_end(m);
}
static void op_matmul_backward_weight(Model* m, float* dw, float* db, const bf16* dout, const bf16* inp, int N, int IC,
                                      int OC) {
    op_family_begin(m, OP_MATMUL);
    matmul_backward_gpu(NULL, dw, db, dout, inp, NULL, N, IC, OC, 0, m->be.stream);
    op_family_end(m);
}

// GPT-2's fc -> GELU, and the backward through GELU and the fc projection. With --gelu-fusion
// on (the default) GELU rides on the matmuls' cuBLASLt epilogues (GELU_AUX_BIAS forward, DGELU
// backward: kernels_gpu.cuh); where cuBLASLt has no algorithm for a shape, the matmul and the
// GELU kernel run separately, and rank 0 says so once.
static int gelu_fused(Model* m, int fused) {  // fused: what the fused matmul returned
    static int told;
    if (!fused && !told) {
        told = 1;
        if (m->L.rank == 0) printf("note: no fused cuBLASLt GELU for this shape: GELU runs as its own kernel\n");
    }
    return fused;
}
static void op_fc_act_forward(Model* m, bf16* fch, bf16* fch_act, const bf16* inp, const LayerW* w, int N) {
    cudaStream_t s = m->be.stream;
    if (m->c.arch == ARCH_GPT2 && !m->args->gelu_unfused) {
        op_family_begin(m, OP_MATMUL);
        int fused = matmul_gelu_forward_gpu(fch_act, fch, inp, bf(m, w->fcw), bf(m, w->fcb), N, m->C, m->Fl, s);
        op_family_end(m);
        if (gelu_fused(m, fused)) return;
    }
    op_matmul_forward(m, fch, inp, w->fcw, w->fcb, N, m->C, m->fc_dim);
    if (m->c.arch == ARCH_GPT2) gelu_forward_gpu(fch_act, fch, (size_t)N * m->Fl, s);
    else swiglu_forward_gpu(fch_act, fch, N, m->Fl, s);
}
static void op_fcproj_act_backward_input(Model* m, bf16* dfch, const bf16* dy, const LayerW* w, const bf16* fch,
                                         int N) {
    cudaStream_t s = m->be.stream;
    if (m->c.arch == ARCH_GPT2 && !m->args->gelu_unfused) {
        op_family_begin(m, OP_MATMUL);
        int fused = matmul_dgelu_backward_gpu(dfch, dy, bf(m, w->fcprojw), fch, N, m->Fl, m->C, s);
        op_family_end(m);
        if (gelu_fused(m, fused)) return;
    }
    op_matmul_backward_input(m, m->dfch_act, dy, w->fcprojw, N, m->Fl, m->C);
    if (m->c.arch == ARCH_GPT2) gelu_backward_gpu(dfch, fch, m->dfch_act, (size_t)N * m->Fl, 0, s);
    else swiglu_backward_gpu(dfch, fch, m->dfch_act, N, m->Fl, 0, s);
}
static void op_rope(Model* m, bf16* qkv, int N, float sign) {
    int period;
    const int* pos = mb_positions(m, m->be.d_row_pos, m->be.d_pos, &period);
    int n_heads = m->n_head_local + m->n_kv_head_local;  // q and k
    rope_apply_gpu(qkv, N, pos, period, m->qkv_dim, n_heads, m->hd, m->c.rope_theta, sign, m->be.stream);
}
// Flash attention keeps the fp32 log-sum-exp of the scores (B x n_head_local x T) as its saved state.
// Selective recomputation saves little here (it drops only that), and is kept so the flag
// does what it says and HFU counts the recomputed work the same way on both builds.
static void op_attention_forward(Model* m, bf16* out, float* att, const bf16* qkv, int B) {
    op_family_begin(m, OP_ATT_FWD);
    attention_forward_gpu(out, att, qkv, B, m->T, m->n_head_local, m->n_kv_head_local, m->hd, mb_docs(m), m->be.stream);
    op_family_end(m);
}
static void op_attention_backward(Model* m, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                  const float* att, int B) {
    op_family_begin(m, OP_ATT_BWD);
    int H = m->n_head_local, KV = m->n_kv_head_local;
    attention_backward_gpu(dqkv, dout, qkv, out, att, B, m->T, H, KV, m->hd, mb_docs(m), m->be.stream);
    op_family_end(m);
}
// Context parallelism's ring steps (layer_parallel/context_parallel.h): attention_block.cuh's flash
// kernels, all blocks of a step in one launch, with an fp32 running output and fp32 gradients.
static void op_attention_blocks_forward(Model* m, float* o, float* lse, const bf16* q, const bf16* kv,
                                        const AttnBlock* blk, int n) {
    op_family_begin(m, OP_ATT_FWD);
    attention_step_forward_gpu(o, lse, q, kv, blk, n, m->be.stream);
    op_family_end(m);
}
static void op_attention_blocks_backward(Model* m, float* dq, float* dkv, const bf16* q, const bf16* kv,
                                         const bf16* dout, const bf16* out, const float* lse, const AttnBlock* blk,
                                         int n) {
    op_family_begin(m, OP_ATT_BWD);
    attention_step_backward_gpu(dq, dkv, q, kv, dout, out, lse, blk, n, m->be.stream);
    op_family_end(m);
}
static void op_attention_grad_pack(Model* m, bf16* dqkv, const float* dq, const float* dkv, size_t rows, int Ha,
                                   int KVa) {
    attention_grad_pack_gpu(dqkv, dq, dkv, rows, Ha, KVa, m->hd, m->be.stream);
}
static void op_f32_to_act(Model* m, bf16* dst, const float* src, size_t n) {
    f32_to_bf16_gpu(dst, src, n, m->be.stream);
}
static void op_residual(Model* m, bf16* out, const bf16* x, const bf16* y, const float* bias, int N) {
    residual_bias_forward_gpu(out, x, y, bf(m, bias), N, m->C, m->be.stream);
}
static void op_column_sum(Model* m, float* db, const bf16* d, int N) { column_sum_gpu(db, d, N, m->C, m->be.stream); }
static void op_embedding_forward(Model* m, bf16* out, const int* tokens, int N) {
    embedding_forward_gpu(out, tokens, bf(m, m->w.wte), N, m->C, m->vocab_start, m->vocab_local, m->be.stream);
}
static void op_embedding_backward(Model* m, const int* tokens, const bf16* dout, int N) {
    embedding_backward_gpu(m->g.wte, tokens, dout, N, m->C, m->vocab_start, m->vocab_local, m->be.stream);
}
static void op_position_forward(Model* m, bf16* x, int N, int row0) {
    int period;
    const int* pos = mb_positions(m, m->be.d_row_pos, m->be.d_pos, &period);
    position_forward_gpu(x, bf(m, m->w.wpe), N, row0, pos, period, m->C, m->be.stream);
}
static void op_position_backward(Model* m, const bf16* dx, int N, int row0) {
    int period;
    const int* pos = mb_positions(m, m->be.d_row_pos, m->be.d_pos, &period);
    position_backward_gpu(m->g.wpe, dx, N, row0, pos, period, m->C, m->be.stream);
}
// The cross-entropy in two passes over the logits (embed_loss.cuh): the first keeps each row's
// local maximum and sum in be.ce_stats, from which the second step needs no pass of its own.
static void op_ce_local_max(Model* m, float* max, const bf16* logits, int N) {
    op_family_begin(m, OP_LOSS);
    crossentropy_local_max_gpu(max, m->be.ce_stats, logits, N, m->vocab_local, m->vocab_start, m->c.vocab,
                               m->be.stream);
    op_family_end(m);
}
static void op_ce_local_sums(Model* m, float* sums, const bf16* logits, const float* max, const int* targets, int N) {
    op_family_begin(m, OP_LOSS);
    crossentropy_local_sums_gpu(sums, m->be.ce_stats, max, logits, targets, N, m->vocab_local, m->vocab_start,
                                m->be.stream);
    op_family_end(m);
}
static void op_ce_finish(Model* m, float* losses, bf16* dlogits, const float* max, const float* sums,
                         const int* targets, int N, float dloss_scale) {
    op_family_begin(m, OP_LOSS);
    crossentropy_finish_gpu(losses, dlogits, max, sums, targets, N, m->vocab_local, m->vocab_start, m->c.vocab,
                            dloss_scale, m->be.stream);
    op_family_end(m);
}
static void op_loss_accumulate(Model* m, const float* losses, int N) {
    op_family_begin(m, OP_LOSS);
    sum_f64_gpu(m->be.loss_acc, losses, N, m->be.stream);
    op_family_end(m);
}

static GpuGroup* group_of(Model* m, Group g) { return &m->be.G.group[g]; }
static void act_allreduce_sum(Model* m, Group g, bf16* buf, size_t n) {
    nccl_allreduce_sum_bf16(&m->be.G, group_of(m, g), buf, n, m->be.stream);
}
static void act_reduce_scatter(Model* m, Group g, const bf16* send, bf16* recv, size_t n_per_rank) {
    nccl_reduce_scatter_bf16(&m->be.G, group_of(m, g), send, recv, n_per_rank, m->be.stream);
}
static void act_allgather(Model* m, Group g, const bf16* send, bf16* recv, size_t n_per_rank) {
    nccl_allgather_bf16(&m->be.G, group_of(m, g), send, recv, n_per_rank, m->be.stream);
}
static void f32_allreduce_sum(Model* m, Group g, float* buf, size_t n) {
    nccl_allreduce_sum(&m->be.G, group_of(m, g), buf, n, m->be.stream);
}
static void f32_allreduce_max(Model* m, Group g, float* buf, size_t n) {
    nccl_allreduce_max(&m->be.G, group_of(m, g), buf, n, m->be.stream);
}
static void act_copy(Model* m, bf16* dst, const bf16* src, size_t n) {
    copyCheck(cudaMemcpyAsync(dst, src, sizeof(bf16) * n, cudaMemcpyDeviceToDevice, m->be.stream));
}
static void act_copy_2d(Model* m, bf16* dst, size_t dst_ld, const bf16* src, size_t src_ld, size_t rows, size_t cols) {
    if (!rows || !cols) return;
    copyCheck(cudaMemcpy2DAsync(dst, sizeof(bf16) * dst_ld, src, sizeof(bf16) * src_ld, sizeof(bf16) * cols, rows,
                                cudaMemcpyDeviceToDevice, m->be.stream));
}
static void act_alltoall(Model* m, Group g, const bf16* send, bf16* recv, size_t n_per_rank) {
    nccl_alltoall_bf16(&m->be.G, group_of(m, g), send, recv, n_per_rank, m->be.stream);
}
// The ring's exchange on its own stream (comm_nccl.h). The trace gets host times: from the
// start to the end of the transfer, the host waiting for it at ring_wait while tracing.
static void ring_start(Model* m, const void* send, void* recv, size_t bytes, int step) {
    m->be.ring_t0 = now_s();
    nccl_ring_start(&m->be.G, group_of(m, GROUP_CP_RING), send, recv, bytes, m->be.stream);
}
static void ring_wait(Model* m, int step) {
    nccl_ring_wait(&m->be.G, group_of(m, GROUP_CP_RING), m->be.stream, m->trace && m->trace->on);
    trace_ring(m->trace, step >= 0 ? 1 : 2, step >= 0 ? step : -1 - step, m->be.ring_t0, now_s());
}

#endif
