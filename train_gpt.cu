// train_gpt.cu: the GPU trainer. The same models (GPT-2, LLaMA), optimizer, flags, layouts
// (dp/tp/sp/pp/cp, ZeRO 0/1/2, recomputation), checkpoints and logs as train_gpt.c, the CPU
// reference, on one CUDA device per rank. The model's math (model/model.h) and the
// orchestration (parallel/, runtime/train.h) are shared; this file holds only what differs:
// the operations (backend/gpu/kernels_gpu.cuh, cuBLASLt), where the bytes live, and main.
//
// Precision and state per rank:
//   - fp32 master weights `params` (the params.h layout, one buffer) and a bf16 copy
//     `params_bf16` of the same layout, which every forward and backward reads; AdamW updates
//     the fp32 copy and rewrites the bf16 one (--offload optimizer: the fp32 copy is on the host).
//   - fp32 weight gradients `grads` (same layout), fp32 AdamW moments m, v over this rank's
//     optimizer range (the ZeRO shard with --zero > 0; pinned host memory under the flag).
//   - bf16 activations and activation gradients; norm statistics, softmax, losses and every
//     sum in fp32 (kernels_gpu.cuh). tp reductions of activations are bf16 sums.
// The weights start bitwise equal to the CPU run's: init_params (params.h) fills a host fp32
// buffer that is copied to the device.
//
// Communication: tp, dp and embed collectives and the pipeline's sends and receives run on
// device buffers through NCCL, or with --comm mpi host-staged through MPI (comm_nccl.h;
// several ranks may then share one GPU). No NCCL call makes the host wait. Without ZeRO,
// each layer's dp gradient all-reduce starts as soon as the step's last micro-batch has
// left the layer, on NCCL's own stream beside the rest of the backward (parallel/data_parallel.h's
// layer_grads_final); the optimizer waits for them. Pipeline sends run on streams of their
// own, so a stage goes on computing while its activations travel; so do context
// parallelism's ring exchanges, beside the attention block they overlap. Scalars (loss, gradient
// norm, sampled token, stop flag) and checkpoints use layout/grid.h's MPI calls on host memory,
// as the CPU build does.
//
// Reading order: main() -> model_init() -> train_step() -> run_schedule() ->
// chunk_forward()/chunk_backward() (parallel/pipeline.h) -> layer_forward()/
// layer_backward_input()/layer_backward_weight() (model/model.h, shared with the CPU build) ->
// the op_* operations here -> backend/gpu/kernels_gpu.cuh.
// Every communication point is marked "comm:" below.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's C++ bindings are unused (and warn under nvcc)
#endif
#include "layout/activations.h"
#include "layout/args.h"
#include "layout/grid.h"
#include "layout/params.h"
#include "layout/schedule.h"
#include "data/data.h"
#include "backend/gpu/comm_nccl.h"
#include "backend/gpu/gpu_device.h"
#include "backend/gpu/kernels_gpu.cuh"
#include "backend/gpu/memory.h"
#include "backend/gpu/offload_gpu.h"
#include "backend/gpu/zero3_gpu.h"
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
// The operations model.h asks for: kernels_gpu.cuh and cuBLASLt on the compute stream,
// reading the bf16 copy of the weights. The kernels take an accumulate flag where the
// contract needs one.

// The bf16 copy of a weight, from its fp32 view (NULL stays NULL).
static const bf16* bf(const Model* m, const float* p) { return p ? m->be.params_bf16 + (p - m->be.arena) : NULL; }

static void op_norm_forward(Model* m, bf16* out, float* mean, float* rstd, const bf16* x, const float* w,
                            const float* b, int N) {
    if (m->c.arch == ARCH_GPT2) layernorm_forward_gpu(out, mean, rstd, x, bf(m, w), bf(m, b), N, m->C, m->be.stream);
    else rmsnorm_forward_gpu(out, rstd, x, bf(m, w), N, m->C, m->be.stream);
}
static void op_norm_backward(Model* m, bf16* dx, float* dw, float* db, const bf16* dout, const bf16* x, const float* w,
                             const float* mean, const float* rstd, int N, int accumulate) {
    cudaStream_t s = m->be.stream;
    if (m->c.arch == ARCH_GPT2)
        layernorm_backward_gpu(dx, dw, db, dout, x, bf(m, w), mean, rstd, N, m->C, accumulate, s);
    else rmsnorm_backward_gpu(dx, dw, dout, x, bf(m, w), rstd, N, m->C, accumulate, s);
}
// The bias rides on cuBLASLt's epilogue when its pointer is 16-byte aligned (always so for
// d_model a multiple of 8, i.e. every preset), else a separate add.
static void op_matmul_forward(Model* m, bf16* out, const bf16* inp, const float* w, const float* b, int N, int IC,
                              int OC) {
    const bf16* bias = bf(m, b);
    int epilogue = bias && lt_bias_aligned(bias);
    matmul_forward_gpu(out, inp, bf(m, w), epilogue ? bias : NULL, N, IC, OC, m->be.stream);
    if (bias && !epilogue) residual_bias_forward_gpu(out, out, NULL, bias, N, OC, m->be.stream);
}
static void op_matmul_backward_input(Model* m, bf16* dinp, const bf16* dout, const float* w, int N, int IC, int OC) {
    matmul_backward_gpu(dinp, NULL, NULL, dout, NULL, bf(m, w), N, IC, OC, 0, m->be.stream);
}
static void op_matmul_backward_weight(Model* m, float* dw, float* db, const bf16* dout, const bf16* inp, int N, int IC,
                                      int OC) {
    matmul_backward_gpu(NULL, dw, db, dout, inp, NULL, N, IC, OC, 0, m->be.stream);
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
    if (m->c.arch == ARCH_GPT2 && !m->args->gelu_unfused &&
        gelu_fused(m, matmul_gelu_forward_gpu(fch_act, fch, inp, bf(m, w->fcw), bf(m, w->fcb), N, m->C, m->Fl, s)))
        return;
    op_matmul_forward(m, fch, inp, w->fcw, w->fcb, N, m->C, m->fc_dim);
    if (m->c.arch == ARCH_GPT2) gelu_forward_gpu(fch_act, fch, (size_t)N * m->Fl, s);
    else swiglu_forward_gpu(fch_act, fch, N, m->Fl, s);
}
static void op_fcproj_act_backward_input(Model* m, bf16* dfch, const bf16* dy, const LayerW* w, const bf16* fch,
                                         int N) {
    cudaStream_t s = m->be.stream;
    if (m->c.arch == ARCH_GPT2 && !m->args->gelu_unfused &&
        gelu_fused(m, matmul_dgelu_backward_gpu(dfch, dy, bf(m, w->fcprojw), fch, N, m->Fl, m->C, s)))
        return;
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
    attention_forward_gpu(out, att, qkv, B, m->T, m->n_head_local, m->n_kv_head_local, m->hd, mb_docs(m), m->be.stream);
}
static void op_attention_backward(Model* m, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                  const float* att, int B) {
    int H = m->n_head_local, KV = m->n_kv_head_local;
    attention_backward_gpu(dqkv, dout, qkv, out, att, B, m->T, H, KV, m->hd, mb_docs(m), m->be.stream);
}
// Context parallelism's blocks (parallel/context_parallel.h): kernels_gpu.cuh's flash
// kernels over two segments of a sequence, with an fp32 running output and fp32 gradients.
static void op_attention_block_forward(Model* m, float* o, float* lse, const bf16* q, const bf16* kv,
                                       const AttnBlock* a) {
    attention_block_forward_gpu(o, lse, q, kv, a, m->be.stream);
}
static void op_attention_block_backward(Model* m, float* dq, float* dkv, const bf16* q, const bf16* kv,
                                        const bf16* dout, const bf16* out, const float* lse, const AttnBlock* a) {
    attention_block_backward_gpu(dq, dkv, q, kv, dout, out, lse, a, m->be.stream);
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
    embedding_forward_gpu(out, tokens, bf(m, m->w.wte), N, m->C, m->vocab_start, m->Vl, m->be.stream);
}
static void op_embedding_backward(Model* m, const int* tokens, const bf16* dout, int N) {
    embedding_backward_gpu(m->g.wte, tokens, dout, N, m->C, m->vocab_start, m->Vl, m->be.stream);
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
static void op_ce_local_max(Model* m, float* max, const bf16* logits, int N) {
    crossentropy_local_max_gpu(max, logits, N, m->Vl, m->vocab_start, m->c.vocab, m->be.stream);
}
static void op_ce_local_sums(Model* m, float* sums, const bf16* logits, const float* max, const int* targets, int N) {
    crossentropy_local_sums_gpu(sums, logits, max, targets, N, m->Vl, m->vocab_start, m->c.vocab, m->be.stream);
}
static void op_ce_finish(Model* m, float* losses, bf16* dlogits, const float* max, const float* sums,
                         const int* targets, int N, float dloss_scale) {
    crossentropy_finish_gpu(losses, dlogits, max, sums, targets, N, m->Vl, m->vocab_start, m->c.vocab, dloss_scale,
                            m->be.stream);
}
static void op_loss_accumulate(Model* m, const float* losses, int N) {
    sum_f64_gpu(m->be.loss_acc, losses, N, m->be.stream);
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
    cudaCheck(cudaMemcpyAsync(dst, src, sizeof(bf16) * n, cudaMemcpyDeviceToDevice, m->be.stream));
}
static void act_copy_2d(Model* m, bf16* dst, size_t dst_ld, const bf16* src, size_t src_ld, size_t rows, size_t cols) {
    if (!rows || !cols) return;
    cudaCheck(cudaMemcpy2DAsync(dst, sizeof(bf16) * dst_ld, src, sizeof(bf16) * src_ld, sizeof(bf16) * cols, rows,
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
    nccl_ring_wait(&m->be.G, group_of(m, GROUP_CP_RING), m->be.stream, m->met && m->met->tracing);
    metrics_ring_event(m->met, step >= 0 ? 1 : 2, step >= 0 ? step : -1 - step, m->be.ring_t0, now_s());
}
static void trace_ring_blocks(Model* m, int step, double t0) { metrics_ring_event(m->met, 0, step, t0, now_s()); }
// An op of the schedule ends: an event on the compute stream marks it, and device_sync turns
// the events into times (the host does not wait for the device op by op).
static void trace_op(Model* m, int kind, int mb, int chunk, double t0) {
    OpTimes* o = &m->be.op_times;
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;  // (a step's op list, at most)
        OpTime* ops = (OpTime*)xcalloc(cap, sizeof(OpTime));
        cudaEvent_t* ends = (cudaEvent_t*)xcalloc(cap, sizeof(cudaEvent_t));
        if (o->n) memcpy(ops, o->ops, sizeof(OpTime) * o->n), memcpy(ends, o->ends, sizeof(cudaEvent_t) * o->n);
        for (int i = o->n; i < cap; i++) cudaCheck(cudaEventCreate(&ends[i]));
        free(o->ops), free(o->ends);
        o->ops = ops, o->ends = ends, o->cap = cap;
    }
    o->ops[o->n] = (OpTime){kind, mb, chunk, t0};
    cudaCheck(cudaEventRecord(o->ends[o->n++], m->be.stream));
}

// ----------------------------------------------------------------------------
// The primitives the shared orchestration (parallel/, runtime/train.h) asks of this build: device
// memory on the one compute stream, NCCL (or host-staged MPI) groups and pipeline p2p.

static void f32_copy(Model* m, float* dst, const float* src, size_t n) {
    cudaCheck(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, m->be.stream));
}
static void f32_zero(Model* m, float* p, size_t n) {
    cudaCheck(cudaMemsetAsync(p, 0, sizeof(float) * n, m->be.stream));
}
static void f32_add(Model* m, float* dst, const float* src, size_t n) {
    add_inplace_f32_gpu(dst, src, n, m->be.stream);
}

static void grad_allreduce_dp_async(Model* m, float* buf, size_t n) {
    if (m->be.grad_bf16)  // --grad-reduce bf16
        nccl_allreduce_sum_async_bf16(&m->be.G, &m->be.G.group[GROUP_DP], buf, n, m->be.grad_bf16, GRAD_BF16_FLOATS,
                                      m->be.stream);
    else nccl_allreduce_sum_async(&m->be.G, &m->be.G.group[GROUP_DP], buf, n, m->be.stream);
}
static void grad_allreduce_dp_join(Model* m) { nccl_async_join(&m->be.G, m->be.stream); }
static void grad_reduce_scatter(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    nccl_reduce_scatter(&m->be.G, group_of(m, g), send, recv, n_per_rank, m->be.stream);
}
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    nccl_allgather(&m->be.G, group_of(m, g), send, recv, n_per_rank, m->be.stream);
}

// Pipeline p2p. With NCCL (pp > 1): straight from the slot's device buffer on the
// send stream of its direction and way (comm_nccl.h: nccl_pp_send), the receive on the compute stream;
// the slot's buffers are rewritten only after the compute stream has waited for the send's
// `sent` event. Otherwise host-staged: device -> this slot's pinned host buffer, MPI_Isend
// (comm_isend), and on the other side MPI_Recv (comm_recv) into a pinned buffer, then host
// -> device. The payload is one bf16 N x C activation or gradient per micro-batch.
// n: bf16 elements, travelling host-staged as ceil(n/2) floats (the pinned buffers have room).
static size_t p2p_floats(size_t n) { return (2 * n + 3) / 4; }
// Under --offload activations a frame may be rewritten before its NCCL send completes (a wait
// for it could close a cycle between stages: parallel/pipeline.h): the send reads a copy, the
// slot's own (alloc_activations).
static void pp_send(Model* m, Slot* s, int dir, int up, const bf16* src, size_t n, int peer, int tag) {
    if (m->be.G.p2p && (m->c.offload & OFFLOAD_ACTIVATIONS)) {
        act_copy(m, s->sends.copy[dir], src, n);
        src = s->sends.copy[dir];
    }
    if (m->be.G.p2p) {
        nccl_pp_send(&m->be.G, dir, up, src, sizeof(bf16) * n, m->be.stream, s->sends.sent[dir]);
        return;
    }
    d2h(s->sends.h_send[dir], src, sizeof(bf16) * n, m->be.stream);  // synchronizes: the data is on the host
    comm_isend(&m->L.group[GROUP_PP], s->sends.h_send[dir], p2p_floats(n), peer, tag, &s->sends.req[dir]);
}
static void pp_send_wait(Model* m, Slot* s, int dir) {
    // the device waits, not the host
    if (m->be.G.p2p) cudaCheck(cudaStreamWaitEvent(m->be.stream, s->sends.sent[dir], 0));
    else comm_wait(&m->L.group[GROUP_PP], &s->sends.req[dir]);
}
static void pp_recv(Model* m, int dir, int up, bf16* dst, size_t n, int peer, int tag) {
    if (m->be.G.p2p) {
        nccl_pp_recv(&m->be.G, dir, up, dst, sizeof(bf16) * n, m->be.stream);
        return;
    }
    comm_recv(&m->L.group[GROUP_PP], m->be.h_recv, p2p_floats(n), peer, tag);
    h2d(dst, m->be.h_recv, sizeof(bf16) * n, m->be.stream);  // synchronizes: h_recv is free again
}

// This dp rank's part of global batch `index`, on the host and the device; the device sum
// of token losses restarts.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index) {
    if (m->cp_order) cp_load_by_doc(m, ts, index);  // --cp-split doc (parallel/context_parallel.h)
    else load_batch(ts, &m->c, m->L.dp_rank, m->n_micro, index, m->pos, m->T, m->inputs, m->targets, m->doc_start,
                    m->doc_seq);
    size_t bytes = sizeof(int) * m->n_micro * m->B * m->T;
    h2d(m->be.d_inputs, m->inputs, bytes, m->be.stream);
    h2d(m->be.d_targets, m->targets, bytes, m->be.stream);
    if (m->doc_start) {
        if (!m->cp_order) docs_positions(m, m->n_micro * m->B);  // (cp_load_by_doc's own)
        h2d(m->be.d_row_pos, m->row_pos, bytes, m->be.stream);
        h2d(m->be.d_doc_seq, m->doc_seq, bytes * m->c.cp, m->be.stream);
        if (m->cp_order) h2d(m->be.d_cp_order, m->cp_order, bytes * m->c.cp, m->be.stream);
    }
    cudaCheck(cudaMemsetAsync(m->be.loss_acc, 0, sizeof(double), m->be.stream));
}
static const int* batch_inputs(Model* m) { return m->be.d_inputs; }
static const int* batch_targets(Model* m) { return m->be.d_targets; }
static const int* window_tokens(Model* m, const int* window, int T) {
    h2d(m->be.d_inputs, window, sizeof(int) * T, m->be.stream);
    if (m->doc_start) {  // docs_of_window's
        h2d(m->be.d_row_pos, m->row_pos, sizeof(int) * T, m->be.stream);
        h2d(m->be.d_doc_seq, m->doc_seq, sizeof(int) * m->c.seq_len, m->be.stream);
    }
    return m->be.d_inputs;
}
static void loss_fetch(Model* m) { d2h(&m->loss_sum, m->be.loss_acc, sizeof(double), m->be.stream); }

// The gradient norm: one deterministic fp32 sum of squares per tensor on the device, added
// up in fp64 on the host.
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss) {
    sumsq_gpu(m->be.norm_parts + k, x, n, m->be.stream);
}
static void sumsq_finish(Model* m, int n_ranges, double* ss) {
    if (n_ranges) d2h(m->be.h_norm_parts, m->be.norm_parts, sizeof(float) * n_ranges, m->be.stream);
    for (int i = 0; i < n_ranges; i++) *ss += m->be.h_norm_parts[i];
}
// AdamW on the fp32 master weights of this rank's range; the bf16 copy follows: written by
// the update without ZeRO, with ZeRO 1/2 refreshed whole from the all-gathered fp32 shards,
// with ZeRO 3 per unit as it is gathered (the shard is param_shard).
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t) {
    if (m->c.offload & OFFLOAD_OPTIMIZER) return adamw_range_host(m, a, b, grad, decay, lr, grad_scale, t);
    size_t o = a - m->opt_lo;
    float* p = m->zero3_state ? m->param_shard + o : m->params + a;
    adamw_update_gpu(p, m->c.zero ? NULL : m->be.params_bf16 + a, grad + o, m->m_state + o, m->v_state + o,
                     b - a, lr, m->c.beta1, m->c.beta2, m->c.eps, m->c.weight_decay, decay, grad_scale, t,
                     m->be.stream);
}
// ZeRO 1/2: the updated shards all-gathered, fp32 and the bf16 copy made from them (--offload optimizer: bf16).
static void param_shards_gather(Model* m) {
    if (m->c.offload & OFFLOAD_OPTIMIZER) return offload_shards_gather(m);
    // comm: dp all-gather of the updated fp32 shards
    param_allgather(m, GROUP_DP, m->params + m->opt_lo, m->params, shard_floats(&m->P, m->L.replicas));
    f32_to_bf16_gpu(m->be.params_bf16, m->params, m->P.n_local, m->be.stream);
}

// Sampling: one bf16 row of logits on the device, all-gathered over tp, then fp32 on the host.
static void row_logits(Model* m, const bf16* lnf_row, float* row) {
    int Vp = m->c.vocab_padded;
    op_matmul_forward(m, m->be.logit_row + m->vocab_start, lnf_row, m->w.head, NULL, 1, m->C, m->Vl);
    // comm: tp all-gather of one row of logits
    nccl_allgather_bf16(&m->be.G, &m->be.G.group[GROUP_TP], m->be.logit_row + m->vocab_start, m->be.logit_row, m->Vl,
                        m->be.stream);
    bf16* row_bf = (bf16*)xmalloc(sizeof(bf16) * Vp);
    d2h(row_bf, m->be.logit_row, sizeof(bf16) * Vp, m->be.stream);
    for (int v = 0; v < Vp; v++) row[v] = __bfloat162float(row_bf[v]);
    free(row_bf);
}
// The device has caught up with the compute stream: the times of the NCCL calls that have
// finished are collected too.
// The ops since the last sync get their device times, mapped onto the host's clock by an
// event recorded now: an op ends at its event and starts where the one before it ended, or when
// the host issued it if the device was idle then.
static void device_sync(Model* m) {
    OpTimes* o = &m->be.op_times;
    if (o->n) cudaCheck(cudaEventRecord(o->now, m->be.stream));
    cudaCheck(cudaStreamSynchronize(m->be.stream));
    double host_now = now_s(), prev_end = 0;
    for (int i = 0; i < o->n; i++) {
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, o->ends[i], o->now));
        double end = host_now - ms / 1e3, start = o->ops[i].t0 > prev_end ? o->ops[i].t0 : prev_end;
        metrics_op(m->met, o->ops[i].kind, o->ops[i].mb, o->ops[i].chunk, start < end ? start : end, end);
        prev_end = end;
    }
    o->n = 0;
    gpu_comms_collect(&m->be.G);
}

// ----------------------------------------------------------------------------
// Set-up. Device buffers of mixed types are carved out of one allocation: a sizing pass
// with base NULL, then the real pass. Every piece starts on a 256-byte boundary (cuBLASLt
// and vector loads like aligned rows).

typedef struct { char* base; size_t off; } Carver;
static void* take(Carver* k, size_t bytes) {
    void* p = k->base ? k->base + k->off : NULL;
    k->off += round_up(bytes ? bytes : 1, 256);
    return p;
}
#define TAKE(k, type, n) ((type*)take((k), sizeof(type) * (size_t)(n)))

// Buffers from layout/activations.h's lists, in order: at[i] gets b[i] (NULL when empty).
static void carve_list(Carver* k, const ActBuf* b, int n, void** at) {
    for (int i = 0; i < n; i++) at[i] = b[i].n ? take(k, b[i].n * (b[i].f32 ? sizeof(float) : sizeof(bf16))) : NULL;
}

// Carve a LayerActs; its att (the log-sum-exp) from the buffer (keep_lse) or the shared scratch.
static void carve_acts(Model* m, LayerActs* a, Carver* k, int keep_lse) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_LA];
    void* at[N_LA];
    layer_act_bufs(&s, keep_lse, b);
    carve_list(k, b, N_LA, at);
    a->ln1 = (bf16*)at[LA_LN1]; a->ln1_mean = (float*)at[LA_LN1_MEAN]; a->ln1_rstd = (float*)at[LA_LN1_RSTD];
    a->qkv = (bf16*)at[LA_QKV];
    a->att = keep_lse ? (float*)at[LA_LSE] : m->att_scratch;
    a->atty = (bf16*)at[LA_ATTY];
    a->res2 = (bf16*)at[LA_RES2];
    a->ln2 = (bf16*)at[LA_LN2]; a->ln2_mean = (float*)at[LA_LN2_MEAN]; a->ln2_rstd = (float*)at[LA_LN2_RSTD];
    a->fch = (bf16*)at[LA_FCH]; a->fch_act = (bf16*)at[LA_FCH_ACT];
}

// The weight pass's inputs of one layer (model.h's WeightGradIn).
static void carve_weight_grad_in(Model* m, WeightGradIn* g, Carver* k) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_WG];
    void* at[N_WG];
    weight_grad_in_bufs(&s, b);
    carve_list(k, b, N_WG, at);
    g->dy_mlp_buf = (bf16*)at[WG_DY_MLP]; g->dy_att_buf = (bf16*)at[WG_DY_ATT];
    g->dfch = (bf16*)at[WG_DFCH]; g->dqkv = (bf16*)at[WG_DQKV];
}

// Scratch for one micro-batch, shared by all layers: activations.h's list, then this build's
// own (a row of logits for sampling, the gradient norm's partial sums, the loss accumulator,
// the step's tokens on the device).
static void carve_scratch(Model* m, Carver* k) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_SC];
    void* at[N_SC];
    scratch_bufs(&s, 0, b);
    carve_list(k, b, N_SC, at);
    m->att_scratch = (float*)at[SC_LSE]; m->x_scratch = (bf16*)at[SC_X];
    m->partial = (bf16*)at[SC_PARTIAL]; m->reduced = (bf16*)at[SC_REDUCED];
    m->dres[0] = (bf16*)at[SC_DRES0]; m->dres[1] = (bf16*)at[SC_DRES1];
    m->dres_after_attn = (bf16*)at[SC_DRES_AFTER_ATTN];
    m->datty = (bf16*)at[SC_DATTY]; m->dfch_act = (bf16*)at[SC_DFCH_ACT];
    m->ce_max = (float*)at[SC_CE_MAX]; m->ce_sums = (float*)at[SC_CE_SUMS];
    carve_weight_grad_in(m, &m->weight_grad_in, k);
    if (m->c.recompute == RECOMPUTE_FULL) carve_acts(m, &m->scratch, k, 0);
    m->be.logit_row = TAKE(k, bf16, m->c.vocab_padded);
    m->be.norm_parts = TAKE(k, float, m->P.n);
    m->be.loss_acc = TAKE(k, double, 1);
    m->be.d_inputs = TAKE(k, int, (size_t)m->n_micro * s.BT);
    m->be.d_targets = TAKE(k, int, (size_t)m->n_micro * s.BT);
}

// The device pointers of one slot of chunk c (s->x and s->acts already allocated).
static void carve_slot(Model* m, int c, Slot* s, Carver* k) {
    Chunk* ch = &m->chunks[c];
    size_t N = row_count(m, m->B), C = m->C;
    int keep_lse = m->c.recompute == RECOMPUTE_NONE;
    for (int i = 0; i <= ch->n_layers; i++) s->x[i] = TAKE(k, bf16, N * C);
    s->dout = TAKE(k, bf16, N * C);
    s->dinp = TAKE(k, bf16, N * C);
    if (m->c.recompute != RECOMPUTE_FULL)
        for (int i = 0; i < ch->n_layers; i++) carve_acts(m, &s->acts[i], k, keep_lse);
}

// The last chunk's head activations of one micro-batch.
static void carve_head(Model* m, HeadActs* h, Carver* k) {
    ActShape s = act_shape(&m->c, m->B);
    ActBuf b[N_HD];
    void* at[N_HD];
    head_bufs(&s, b);
    carve_list(k, b, N_HD, at);
    h->lnf = (bf16*)at[HD_LNF]; h->lnf_mean = (float*)at[HD_LNF_MEAN]; h->lnf_rstd = (float*)at[HD_LNF_RSTD];
    h->logits = (bf16*)at[HD_LOGITS]; h->losses = (float*)at[HD_LOSSES];
}

static void alloc_activations(Model* m) {
    size_t N = row_count(m, m->B), C = m->C;
    Carver k = {NULL, 0};
    carve_scratch(m, &k);
    m->scratch_bytes = k.off;
    m->be.scratch_mem = (char*)dev_alloc(k.off);
    k = (Carver){m->be.scratch_mem, 0};
    carve_scratch(m, &k);
    // stages exchange activations through NCCL, or host-staged (--comm mpi); chunks on one
    // stage hand over by a copy (parallel/pipeline.h)
    int staged = m->L.pp > 1 && !m->be.G.p2p;
    if (staged) m->be.h_recv = pinned_floats(p2p_floats(N * C));
    cp_alloc(m);  // context parallelism's buffers (parallel/context_parallel.h)
    chunks_init(m);
    for (int c = 0; c < m->L.vpp; c++) {
        Chunk* ch = &m->chunks[c];
        for (int si = 0; si < ch->n_slots; si++) {
            Slot* s = &ch->slots[si];
            for (int dir = 0; dir < 2; dir++) {
                if (staged) s->sends.h_send[dir] = pinned_floats(p2p_floats(N * C));
                if (m->be.G.p2p) cudaCheck(cudaEventCreateWithFlags(&s->sends.sent[dir], cudaEventDisableTiming));
                if (m->be.G.p2p && (m->c.offload & OFFLOAD_ACTIVATIONS))
                    s->sends.copy[dir] = (bf16*)dev_alloc(sizeof(bf16) * N * C);
            }
        }
        k = (Carver){NULL, 0};
        carve_slot(m, c, &ch->slots[0], &k);  // sizing pass
        ch->slot_bytes = k.off;
        ch->mem = (char*)dev_alloc(ch->slot_bytes * ch->n_frames);
        chunk_frames_init(m, c);  // parallel/pipeline.h: the slots in their frames, or the tier
        // the pools: weight-pass inputs (deferred weight passes), and the last chunk's heads
        k = (Carver){NULL, 0};
        WeightGradIn wg_sizing;
        for (int i = 0; i < ch->n_layers; i++) carve_weight_grad_in(m, &wg_sizing, &k);
        ch->wg.bytes = k.off;
        char* wg_mem = (char*)dev_alloc(ch->wg.bytes * ch->wg.n);
        for (int j = 0; j < ch->wg.n; j++) {
            k = (Carver){wg_mem + ch->wg.bytes * j, 0};
            for (int i = 0; i < ch->n_layers; i++)
                carve_weight_grad_in(m, &ch->wg_sets[(size_t)j * ch->n_layers + i], &k);
        }
        k = (Carver){NULL, 0};
        HeadActs head_sizing;
        carve_head(m, &head_sizing, &k);
        ch->heads.bytes = k.off;
        char* head_mem = (char*)dev_alloc(ch->heads.bytes * ch->heads.n);
        for (int j = 0; j < ch->heads.n; j++) {
            k = (Carver){head_mem + ch->heads.bytes * j, 0};
            carve_head(m, &ch->head_sets[j], &k);
        }
    }
}

static void slot_bind(Model* m, int c, Slot* s, char* base) {
    Carver k = {base, 0};
    carve_slot(m, c, s, &k);
}

// Copy the host fp32 weights to the device and make the bf16 copy, and back (--zero 3: only
// this replica's shard goes either way, no whole copy on the device; zero3_gpu.h zero3_download).
static void upload_params(Model* m) {
    if (master_on_host(m)) return offload_upload(m);
    size_t lo = m->zero3_state ? m->opt_lo : 0, n = m->zero3_state ? m->opt_hi - m->opt_lo : m->P.n_padded;
    h2d(m->zero3_state ? m->param_shard : m->params, m->be.h_params + lo, sizeof(float) * n, m->be.stream);
    if (m->zero3_state) zero3_params_updated(m);
    else f32_to_bf16_gpu(m->be.params_bf16, m->params, m->P.n_padded, m->be.stream);
}
static void download_params(Model* m) {
    if (master_on_host(m)) offload_download(m);
    else if (m->zero3_state) zero3_download(m, m->be.h_params);
    else d2h(m->be.h_params, m->params, sizeof(float) * m->P.n_padded, m->be.stream);
}

static float* f32_alloc(Model* m, size_t n) { return (float*)dev_alloc(sizeof(float) * n); }
// AdamW's state on the device, or pinned on the host (--offload optimizer: backend/gpu/offload_gpu.h).
static float* opt_state_alloc(Model* m, size_t n, const char* what) {
    if (!(m->c.offload & OFFLOAD_OPTIMIZER)) return f32_alloc(m, n);
    return (float*)host_pinned(sizeof(float) * n, "--offload optimizer");
}
static bf16* act_alloc(Model* m, size_t n) { return (bf16*)dev_alloc(sizeof(bf16) * n); }
// init_params on the host (the CPU build's weights, bit for bit), then up to the device.
static void params_init(Model* m) {
    // --offload optimizer: pinned, the master weights of the optimizer range (backend/gpu/offload_gpu.h)
    m->be.h_params = m->c.offload & OFFLOAD_OPTIMIZER
                         ? (float*)host_pinned(sizeof(float) * m->P.n_padded, "--offload optimizer")
                         : (float*)xcalloc(m->P.n_padded, sizeof(float));
    init_params(&m->P, &m->c, m->c.tp, m->L.tp_rank, m->be.h_params);
    if (master_on_host(m)) offload_weights_init(m);
    upload_params(m);
}

static void model_init(Model* m, Args* a, Metrics* met) {
    model_init_layout(m, a, met);  // runtime/train.h
    // The communicators: ncclCommInitRank waits for every rank to reach it over the network NCCL
    // picked; a wrong one waits forever. So the watchdog is armed first, and says what to check.
    if (m->L.world > 1) watchdog_start(a->timeout_s, m->L.rank);
    watchdog_phase =
        "creating NCCL's communicators (ncclCommInitRank, ncclCommSplit): a rank did not start or cannot reach the "
        "others over the network NCCL chose: check NCCL_SOCKET_IFNAME (an interface every node has, e.g. eth0 or "
        "ib0), NCCL_IB_HCA / NCCL_IB_DISABLE=1, NCCL_P2P_DISABLE / NCCL_SHM_DISABLE, and rerun with NCCL_DEBUG=INFO";
    gpu_comms_init(&m->be.G, &m->L, a->comm_mpi ? COMM_MPI : COMM_NCCL);
    watchdog_phase = NULL;
    watchdog_on = 0;  // until the first step (runtime/train.h): loading a checkpoint may take long
    // non-blocking: the legacy default stream (a library's, or a stray blocking call) never stalls the step
    cudaCheck(cudaStreamCreateWithFlags(&m->be.stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&m->be.offload, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&m->be.computed, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&m->be.copied, cudaEventDisableTiming));
    cudaCheck(cudaEventCreate(&m->be.op_times.now));
    m->be.d_pos = (int*)dev_alloc(sizeof(int) * m->T);
    h2d(m->be.d_pos, m->pos, sizeof(int) * m->T, m->be.stream);
    // the kernels' reduction scratch: attention backward needs B*n_head_local*T floats (with cp, a
    // block's B*Ha*Ts: as many); 16M covers the column sums of any width in few chunks
    size_t red = (size_t)m->B * m->T * m->n_head_local;
    gpu_kernels_init(red > (16u << 20) ? red : (16u << 20));
    if (a->cfg.zero != 3) m->be.params_bf16 = (bf16*)dev_alloc(sizeof(bf16) * m->P.n_padded);  // else zero3.h's
    model_init_params(m);
    if (!m->zero3_state) m->be.arena = m->params;
    if (a->cfg.offload & OFFLOAD_OPTIMIZER) offload_opt_init(m);
    if (a->grad_reduce_bf16 && m->L.replicas > 1) m->be.grad_bf16 = act_alloc(m, GRAD_BF16_FLOATS);
    m->be.h_norm_parts = (float*)xcalloc(m->P.n, sizeof(float));
    model_init_schedule(m);        // the op list, then activations sized by it
    if (m->doc_start) {
        size_t held = (size_t)m->n_micro * m->B * m->T;
        m->be.d_row_pos = (int*)dev_alloc(sizeof(int) * held);
        m->be.d_doc_seq = (int*)dev_alloc(sizeof(int) * held * m->c.cp);
        m->kernel_doc_seq = m->be.d_doc_seq;
        if (m->cp_order) m->kernel_cp_order = m->be.d_cp_order = (int*)dev_alloc(sizeof(int) * held * m->c.cp);
    }
}

// Checkpoints go through ckpt.h on host copies of the fp32 weights and AdamW state (--offload
// optimizer: the state itself, already on the host).
static void save_checkpoint(Model* m, int step) {
    size_t n_opt = m->opt_hi - m->opt_lo;
    int dev = !(m->c.offload & OFFLOAD_OPTIMIZER);
    float* hm = dev ? (float*)xmalloc(sizeof(float) * (n_opt ? n_opt : 1)) : m->m_state;
    float* hv = dev ? (float*)xmalloc(sizeof(float) * (n_opt ? n_opt : 1)) : m->v_state;
    download_params(m);
    if (dev) d2h(hm, m->m_state, sizeof(float) * n_opt, m->be.stream);
    if (dev) d2h(hv, m->v_state, sizeof(float) * n_opt, m->be.stream);
    ckpt_save(&m->L, &m->P, &m->c, m->args, m->be.h_params, hm, hv, m->opt_lo, m->opt_hi, step);
    if (dev) free(hm), free(hv);
}
static int resume_checkpoint(Model* m) {
    size_t n_opt = m->opt_hi - m->opt_lo;
    int dev = !(m->c.offload & OFFLOAD_OPTIMIZER);
    float* hm = dev ? (float*)xcalloc(n_opt ? n_opt : 1, sizeof(float)) : m->m_state;
    float* hv = dev ? (float*)xcalloc(n_opt ? n_opt : 1, sizeof(float)) : m->v_state;
    int step = ckpt_resume(&m->L, &m->P, &m->c, m->args, m->be.h_params, hm, hv, m->opt_lo, m->opt_hi);
    upload_params(m);
    if (dev) h2d(m->m_state, hm, sizeof(float) * n_opt, m->be.stream);
    if (dev) h2d(m->v_state, hv, sizeof(float) * n_opt, m->be.stream);
    if (dev) free(hm), free(hv);
    return step;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan")) return stdout_exit_code(plan_main(argc, argv));
    wait_policy_passive(argv);  // before any OpenMP region: re-executes once with OMP_WAIT_POLICY=passive
    {
        static Args pre;  // flags first: --help and flag errors need no GPU; run_setup parses them again
        parse_args(&pre, argc, argv);
        if (pre.grad_reduce_bf16 && (pre.cfg.zero || pre.comm_mpi))
            fail("--grad-reduce bf16: the NCCL all-reduce of --zero 0 only (ZeRO reduce-scatters in fp32; --comm mpi "
                 "sums in fp32)");
        if (pre.kernels_ref)
            fail("--kernels ref: the plain-loop reference kernels are the CPU build's (train_cpu); the GPU build runs "
                 "its CUDA kernels, checked against them");
        const ModelConfig* c = &pre.cfg;
        gpu_probe_by_hand((c->dp ? c->dp : 1) * c->tp * c->pp * c->cp, pre.comm_mpi);  // backend/gpu/gpu_device.h
    }
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    ModelConfig* c = &a->cfg;
    int world = run.world, rank = run.rank, share = 1;
    int dev = gpu_select_device(a->comm_mpi, &share);  // backend/gpu/gpu_device.h
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    // Peak for MFU: --peak-tflops, else the part's datasheet or its properties; ranks sharing a
    // device share its peak.
    static char peak_src[320];
    const char* profile;
    double peak = gpu_peak_flops(dev, &prop, peak_src, sizeof(peak_src), &profile);
    if (a->peak_tflops) peak = a->peak_tflops * 1e12, snprintf(peak_src, sizeof(peak_src), "--peak-tflops");
    if (share > 1) {
        size_t l = strlen(peak_src);
        snprintf(peak_src + l, sizeof(peak_src) - l, " / %d ranks per GPU", share);
        peak /= share;
    }
    Metrics met;
    metrics_init(&met, a, rank, world, peak, peak_src);
    Model m;
    model_init(&m, a, &met);
    int start_step = 0;
    if (a->import_llmc || a->import_hf) {  // into the host copy, then up to the device
        if (a->import_llmc) llmc_import(a->import_llmc, &m.L, &m.P, c, m.be.h_params);
        if (a->import_hf) hf_import(a->import_hf, &m.L, &m.P, c, m.be.h_params);
        upload_params(&m);
    }
    if (a->resume) start_step = resume_checkpoint(&m);
    a->kernels_note = "CUDA: bf16, cuBLASLt, flash attention (backend/gpu/)";
    const char* tile_why;
    const AttFwdTile* tile = attention_tile_choose(a->attn_tile, m.hd, prop.name, "dev/attn_tiles.csv", &tile_why);
    if (rank == 0) {
        print_startup(&m.L, &m.P, c, a, &run.train, &run.val, &met, m.n_micro, start_step);
        printf(
            "gpu: %s (sm_%d%d, %.0f GiB) per rank, comm %s, bf16 activations, "
            "fp32 master weights + bf16 copy, fp32 grads%s and AdamW state%s\n",
            prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0,
            a->comm_mpi ? "mpi (host-staged)" : "nccl", m.be.grad_bf16 ? " (dp all-reduce in bf16)" : "",
            c->offload & OFFLOAD_OPTIMIZER ? " (the master weights and AdamW's m, v pinned on the host)" : "");
        printf("gpu: attention forward tile %s at head size %d (%d query rows x %d keys, Q in %s; %s)\n", tile->name,
               m.hd, tile->bq, tile->bk, tile->q_regs ? "registers" : "shared memory", tile_why);
        fflush(stdout);
    }
    // metrics_predict counts activations in floats; the bf16 buffers are passed as bytes / 4.
    size_t act_bytes = m.scratch_bytes;
    double act_tier_bytes = 0;  // --offload activations: the slots beyond the frames, pinned on the host
    for (int ch = 0; ch < m.L.vpp; ch++) {
        Chunk* k = &m.chunks[ch];
        act_bytes += k->slot_bytes * k->n_frames + k->wg.bytes * k->wg.n + k->heads.bytes * k->heads.n;
        if (k->tier) act_tier_bytes += (double)k->slot_bytes * k->n_slots;
    }
    // weights per parameter on the device: fp32 master + bf16 copy (6), or the bf16 copy alone (2: master_on_host)
    metrics_predict(&met, c, profile, met.peak_flops, 0, &m.P, m.opt_hi - m.opt_lo, act_bytes / 4,
                    master_on_host(&m) ? 2 : 6, act_tier_bytes);

    int code = train_loop(&m, &run, &met, start_step);  // 0, or 128 + a stop signal, or 1: every step skipped
    if (code) {
        MPI_Finalize();
        return code;
    }
    if (a->export_llmc || a->export_hf) {
        download_params(&m);
        if (a->export_llmc) llmc_export(a->export_llmc, &m.L, &m.P, c, m.be.h_params);
        if (a->export_hf) hf_export(a->export_hf, &m.L, &m.P, c, m.be.h_params, a->eot, a->tokenizer);
    }
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (rank == 0) {
        char b1[32], b2[32];
        printf("gpu memory (rank 0): %s in use of %s\n", fmt_bytes((double)(total_b - free_b), b1),
               fmt_bytes((double)total_b, b2));
    }
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    gpu_comms_free(&m.be.G);
    MPI_Finalize();
    return stdout_exit_code(0);
}
