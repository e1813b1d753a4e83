// train_gpt.cu: the GPU trainer. The same models (GPT-2, LLaMA), optimizer, flags, layouts
// (dp/tp/sp/pp, ZeRO 0/1/2, recomputation), checkpoints and logs as train_gpt.c, the CPU
// reference, on one CUDA device per rank. Read the two side by side: the functions have the
// same names and the same order; the differences are the kernels (kernels_gpu.cuh) and
// where the bytes live.
//
// Precision and state per rank:
//   - fp32 master weights `params` (the params.h layout, one buffer) and a bf16 copy
//     `params_bf16` of the same layout, which every forward and backward reads; AdamW updates
//     the fp32 copy and rewrites the bf16 one.
//   - fp32 weight gradients `grads` (same layout), fp32 AdamW moments m, v over this rank's
//     optimizer range (the ZeRO shard with --zero > 0).
//   - bf16 activations and activation gradients; norm statistics, softmax, losses and every
//     sum in fp32 (kernels_gpu.cuh). tp reductions of activations are bf16 sums.
// The weights start bitwise equal to the CPU run's: init_params (params.h) fills a host fp32
// buffer that is copied to the device.
//
// Communication: tp, dp and embed collectives and the pipeline's sends and receives run on
// device buffers through NCCL, or with --comm mpi host-staged through MPI (comm_nccl.h;
// several ranks may then share one GPU). No NCCL call makes the host wait. Without ZeRO,
// each layer's dp gradient all-reduce starts as soon as the step's last micro-batch has
// left the layer, on NCCL's own stream beside the rest of the backward (model_runtime.h's
// layer_grads_final); the optimizer waits for them. Pipeline sends run on streams of their
// own, so a stage goes on computing while its activations travel. Scalars (loss, gradient
// norm, sampled token, stop flag) and checkpoints use layout.h's MPI calls on host memory,
// as the CPU build does.
//
// Reading order: main() -> model_init() -> train_step() -> run_schedule() ->
// chunk_forward()/chunk_backward() -> layer_forward()/layer_backward() -> kernels_gpu.cuh.
// Every communication point is marked "comm:" below.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's C++ bindings are unused (and warn under nvcc)
#endif
#include "args.h"
#include "ckpt.h"
#include "comm_nccl.h"
#include "data.h"
#include "kernels_gpu.cuh"
#include "layout.h"
#include "metrics.h"
#include "params.h"
#include "planner.h"
#include "runtime.h"
#include "schedule.h"

// The activation element model_runtime.h works in, and the most floats of one dp all-reduce
// of the gradient (model_runtime.h's reduce_gradients): one call over the whole buffer,
// NCCL pipelines it internally.
typedef bf16 act_t;
#define GRAD_BUCKET_FLOATS SIZE_MAX

// Activations one layer keeps for its backward (one micro-batch, this rank's part), bf16
// unless noted. N = rows this rank holds in the norm/residual regions (B*T, or B*T/tp with
// --sp); the matmul regions always see all B*T rows.
typedef struct {
    bf16* ln1;                         // B*T x C gathered
    float *ln1_mean, *ln1_rstd;        // fp32, the N local rows
    bf16* qkv;                         // B*T x (Hl + 2*KVl)*hd (after RoPE for LLaMA)
    float* lse;                        // fp32 B x Hl x T logsumexp of the scores (shared scratch unless --recompute none)
    bf16* atty;                        // B*T x Hl*hd
    bf16* res2;                        // N x C residual after attention
    bf16* ln2;
    float *ln2_mean, *ln2_rstd;
    bf16 *fch, *fch_act;               // B*T x Fl (GELU) or B*T x 2Fl [gate|up] -> B*T x Fl (SwiGLU)
} LayerActs;

// Everything one (micro-batch, chunk) keeps between its forward and its backward.
typedef struct {
    bf16** x;                          // [n_layers+1] layer inputs (N x C); x[n_layers] is the chunk output
    LayerActs* acts;                   // [n_layers]; unused under --recompute full
    bf16* lnf;                         // last chunk: final norm output (B*T x C)
    float *lnf_mean, *lnf_rstd;
    bf16* logits;                      // last chunk: B*T x Vl logits, replaced by dlogits
    float* losses;                     // last chunk: B*T
    bf16 *dout, *dinp;                 // gradient from the next chunk / to the previous chunk (N x C)
    cudaEvent_t sent[2];               // NCCL p2p: recorded when this slot's last sends [dir] have finished
    float* h_send[2];                  // host-staged p2p: pinned host copies of this slot's two sends
    MPI_Request req[2];                // host-staged p2p: sends still in flight from this slot
    int mb;                            // micro-batch held, -1 when free
} Slot;

typedef struct {
    int n_layers, layer0;              // layers [layer0, layer0 + n_layers)
    int n_slots;                       // most micro-batches in flight on this chunk (from the schedule)
    Slot* slots;
    char* mem;                         // all slot activations of this chunk, one device buffer
    size_t slot_bytes;
} Chunk;

typedef struct {
    Args* args;
    ModelConfig c;
    Layout L;
    ParamLayout P;
    GpuComms G;                        // NCCL (or host-staged MPI) groups over L's groups
    cudaStream_t stream;               // the one compute stream (kernels_gpu.cuh's shared scratch needs one)
    // shapes on this rank
    int B, T, C, hd, Hl, KVl, qkv_dim, Fl, fc_dim, Vl, v0, n_micro;
    // device: fp32 master weights, gradients, AdamW state (range [opt_lo, opt_hi)); bf16 weight copy
    float *params, *grads, *grad_shard, *shard_tmp, *wte_acc, *m_state, *v_state;
    bf16* params_bf16;
    float* h_params;                   // host fp32 copy: initialization and checkpoints
    size_t opt_lo, opt_hi;
    Weights w, g;                      // views into params (fp32, device) and grads
    LayerW *wl, *gl;
    // pipeline
    PipeOp* ops;
    int n_ops;
    Chunk* chunks;                     // [vpp]
    int* slot_of;                      // [vpp * n_micro] slot index of (chunk, mb), -1 none
    float* h_recv;                     // host-staged p2p: pinned staging of pipeline receives
    // scratch shared by all layers (one micro-batch), one device buffer
    char* scratch_mem;
    LayerActs scratch;                 // layer activations under --recompute full
    float* lse_scratch;
    bf16 *x_scratch, *partial, *reduced, *gather;
    bf16 *dres[2], *dres2, *dqkv, *datty, *dfch, *dfch_act;
    float *ce_max, *ce_sums;
    bf16* logit_row;                   // sampling: one row of logits over the padded vocabulary
    float* sp_buf;                     // packing of the sequence-parallel partial gradients
    float *norm_parts, *h_norm_parts;  // one sum of squares per tensor (grad_norm), device and host
    double* loss_acc;                  // device: sum of token losses of this step on this rank
    int *inputs, *targets;             // host: [n_micro * B * T] this step's tokens for this dp rank
    int *d_inputs, *d_targets;         // device copies
    // accounting
    double loss_sum;
    size_t slots_live_bytes, slots_peak_bytes, scratch_bytes;
    Metrics* met;
} Model;

static int row_count(const Model* m, int B) { return m->c.sp ? B * m->T / m->L.tp : B * m->T; }
static int row0_of(const Model* m, int B) { return m->c.sp ? m->L.tp_rank * row_count(m, B) : 0; }

// The bf16 copy of a weight, from its fp32 view (NULL stays NULL).
static const bf16* bf(const Model* m, const float* p) { return p ? m->params_bf16 + (p - m->params) : NULL; }

static void act_copy(Model* m, bf16* dst, const bf16* src, size_t n) {
    cudaCheck(cudaMemcpyAsync(dst, src, sizeof(bf16) * n, cudaMemcpyDeviceToDevice, m->stream));
}

// ----------------------------------------------------------------------------
// Tensor-parallel communication points (Megatron's f/g operators and their
// sequence-parallel forms). Without --sp: all-reduce; with --sp: reduce-scatter to
// the N local rows, and all-gather of the N local rows back to B*T.

// Row-parallel matmul output: partial sums (B*T x C) -> the reduced rows this rank keeps.
static bf16* tp_reduce_rows(Model* m, bf16* partial, int B) {
    int N = row_count(m, B), BT = B * m->T;
    if (!m->c.sp) {
        nccl_allreduce_sum_bf16(&m->G, &m->G.tp, partial, (size_t)BT * m->C, m->stream);  // comm: tp all-reduce
        return partial;
    }
    nccl_reduce_scatter_bf16(&m->G, &m->G.tp, partial, m->reduced, (size_t)N * m->C, m->stream);  // comm: tp reduce-scatter (sp)
    return m->reduced;
}
// full (B*T x C) holds this rank's N rows at their place; fill in the other ranks' rows.
static void sp_gather_rows(Model* m, bf16* full, int B) {
    if (!m->c.sp) return;
    size_t n = (size_t)row_count(m, B) * m->C;
    nccl_allgather_bf16(&m->G, &m->G.tp, full + m->L.tp_rank * n, full, n, m->stream);  // comm: tp all-gather (sp)
}
// Gradient rows (N x C) -> all B*T rows, as the backward of a reduce-scatter.
static const bf16* sp_gather_grad(Model* m, const bf16* d, int B) {
    if (!m->c.sp) return d;
    nccl_allgather_bf16(&m->G, &m->G.tp, d, m->gather, (size_t)row_count(m, B) * m->C, m->stream);  // comm: tp all-gather (sp)
    return m->gather;
}
// The norm this rank writes into a B*T x C buffer: its own rows only.
static bf16* my_rows(Model* m, bf16* full, int B) { return full + (size_t)row0_of(m, B) * m->C; }

static void norm_forward(Model* m, bf16* out, float* mean, float* rstd, const bf16* x, const float* w, const float* b, int N) {
    if (m->c.arch == ARCH_GPT2) layernorm_forward_gpu(out, mean, rstd, x, bf(m, w), bf(m, b), N, m->C, m->stream);
    else rmsnorm_forward_gpu(out, rstd, x, bf(m, w), N, m->C, m->stream);
}
// dx (+)= the norm's input gradient (accumulate 1: dx holds the residual path's gradient);
// dw, db (fp32) +=.
static void norm_backward(Model* m, bf16* dx, float* dw, float* db, const bf16* dout, const bf16* x, const float* w,
                          const float* mean, const float* rstd, int N, int accumulate) {
    if (m->c.arch == ARCH_GPT2) layernorm_backward_gpu(dx, dw, db, dout, x, bf(m, w), mean, rstd, N, m->C, accumulate, m->stream);
    else rmsnorm_backward_gpu(dx, dw, dout, x, bf(m, w), rstd, N, m->C, accumulate, m->stream);
}

// out = inp @ w^T + b. The bias rides on cuBLASLt's epilogue when its pointer is 16-byte
// aligned (always so for d_model a multiple of 8, i.e. every preset), else a separate add.
static void matmul_forward(Model* m, bf16* out, const bf16* inp, const float* w, const float* b, int N, int IC, int OC) {
    const bf16* bias = bf(m, b);
    int epilogue = bias && lt_bias_aligned(bias);
    matmul_forward_gpu(out, inp, bf(m, w), epilogue ? bias : NULL, N, IC, OC, m->stream);
    if (bias && !epilogue) residual_bias_forward_gpu(out, out, NULL, bias, N, OC, m->stream);
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
static void fc_gelu_forward(Model* m, LayerActs* a, const LayerW* w, int BT) {
    if (!m->args->gelu_unfused &&
        gelu_fused(m, matmul_gelu_forward_gpu(a->fch_act, a->fch, a->ln2, bf(m, w->fcw), bf(m, w->fcb), BT, m->C, m->Fl, m->stream)))
        return;
    matmul_forward(m, a->fch, a->ln2, w->fcw, w->fcb, BT, m->C, m->fc_dim);
    gelu_forward_gpu(a->fch_act, a->fch, (size_t)BT * m->Fl, m->stream);
}
// m->dfch = d(fc output) from dy, the gradient of the fc projection's output; g->fcprojw +=.
static void fcproj_gelu_backward(Model* m, LayerActs* a, const LayerW* w, LayerW* g, const bf16* dy, int BT) {
    cudaStream_t s = m->stream;
    if (!m->args->gelu_unfused && gelu_fused(m, matmul_dgelu_backward_gpu(m->dfch, dy, bf(m, w->fcprojw), a->fch, BT, m->Fl, m->C, s))) {
        matmul_backward_gpu(NULL, g->fcprojw, NULL, dy, a->fch_act, NULL, BT, m->Fl, m->C, 0, s);
        return;
    }
    matmul_backward_gpu(m->dfch_act, g->fcprojw, NULL, dy, a->fch_act, bf(m, w->fcprojw), BT, m->Fl, m->C, 0, s);
    gelu_backward_gpu(m->dfch, a->fch, m->dfch_act, (size_t)BT * m->Fl, 0, s);
}

// ----------------------------------------------------------------------------
// One transformer layer on this rank's heads and MLP columns.

static void layer_forward(Model* m, int l, LayerActs* a, const bf16* x, bf16* out, int B) {
    const LayerW* w = &m->wl[l];
    cudaStream_t s = m->stream;
    int T = m->T, C = m->C, BT = B * T, N = row_count(m, B), Cl = m->Hl * m->hd;
    // attention block: x -> norm -> qkv (column-parallel) -> attention -> proj (row-parallel) -> + x
    norm_forward(m, my_rows(m, a->ln1, B), a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, N);
    sp_gather_rows(m, a->ln1, B);
    matmul_forward(m, a->qkv, a->ln1, w->qkvw, w->qkvb, BT, C, m->qkv_dim);
    if (m->c.arch == ARCH_LLAMA) rope_apply_gpu(a->qkv, BT, T, m->qkv_dim, m->Hl + m->KVl, m->hd, 1.0f, s);
    attention_forward_gpu(a->atty, a->lse, a->qkv, B, T, m->Hl, m->KVl, m->hd, s);
    matmul_forward(m, m->partial, a->atty, w->attprojw, NULL, BT, Cl, C);
    const bf16* y = tp_reduce_rows(m, m->partial, B);
    residual_bias_forward_gpu(a->res2, x, y, bf(m, w->attprojb), N, C, s);
    // MLP block: res2 -> norm -> fc (column-parallel) -> GELU / SwiGLU -> proj (row-parallel) -> + res2
    norm_forward(m, my_rows(m, a->ln2, B), a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, N);
    sp_gather_rows(m, a->ln2, B);
    if (m->c.arch == ARCH_GPT2) fc_gelu_forward(m, a, w, BT);
    else {
        matmul_forward(m, a->fch, a->ln2, w->fcw, w->fcb, BT, C, m->fc_dim);
        swiglu_forward_gpu(a->fch_act, a->fch, BT, m->Fl, s);
    }
    matmul_forward(m, m->partial, a->fch_act, w->fcprojw, NULL, BT, m->Fl, C);
    y = tp_reduce_rows(m, m->partial, B);
    residual_bias_forward_gpu(out, a->res2, y, bf(m, w->fcprojb), N, C, s);
}

// dout: gradient of the layer output (N x C); writes the gradient of its input to dx.
// The matmul and activation backwards overwrite their bf16 input gradients (accumulate 0),
// so no buffer needs clearing first; weight gradients accumulate in fp32.
static void layer_backward(Model* m, int l, LayerActs* a, const bf16* x, const bf16* dout, bf16* dx, int B) {
    const LayerW* w = &m->wl[l];
    LayerW* g = &m->gl[l];
    cudaStream_t s = m->stream;
    int T = m->T, C = m->C, BT = B * T, N = row_count(m, B), Cl = m->Hl * m->hd;
    // MLP block
    if (g->fcprojb) column_sum_gpu(g->fcprojb, dout, N, C, s);
    const bf16* dy = sp_gather_grad(m, dout, B);
    if (m->c.arch == ARCH_GPT2) fcproj_gelu_backward(m, a, w, g, dy, BT);
    else {
        matmul_backward_gpu(m->dfch_act, g->fcprojw, NULL, dy, a->fch_act, bf(m, w->fcprojw), BT, m->Fl, C, 0, s);
        swiglu_backward_gpu(m->dfch, a->fch, m->dfch_act, BT, m->Fl, 0, s);
    }
    matmul_backward_gpu(m->partial, g->fcw, g->fcb, m->dfch, a->ln2, bf(m, w->fcw), BT, C, m->fc_dim, 0, s);
    const bf16* dln = tp_reduce_rows(m, m->partial, B);
    act_copy(m, m->dres2, dout, (size_t)N * C);  // the residual path
    norm_backward(m, m->dres2, g->ln2w, g->ln2b, dln, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd, N, 1);
    // attention block
    if (g->attprojb) column_sum_gpu(g->attprojb, m->dres2, N, C, s);
    dy = sp_gather_grad(m, m->dres2, B);
    matmul_backward_gpu(m->datty, g->attprojw, NULL, dy, a->atty, bf(m, w->attprojw), BT, Cl, C, 0, s);
    // Selective recomputation (Korthikanti et al. 2022) drops the attention core's softmax.
    // Flash attention never holds the T x T matrix, only its logsumexp (B x Hl x T fp32), so
    // what --recompute selective saves here is small: lse lives in a shared scratch and the
    // attention forward (output and lse) runs again before its backward. Kept so the flag
    // does what it says and HFU counts the recomputed work the same way on both builds.
    if (m->c.recompute == RECOMPUTE_SELECTIVE) attention_forward_gpu(a->atty, a->lse, a->qkv, B, T, m->Hl, m->KVl, m->hd, s);
    attention_backward_gpu(m->dqkv, m->datty, a->qkv, a->atty, a->lse, B, T, m->Hl, m->KVl, m->hd, s);
    if (m->c.arch == ARCH_LLAMA) rope_apply_gpu(m->dqkv, BT, T, m->qkv_dim, m->Hl + m->KVl, m->hd, -1.0f, s);
    matmul_backward_gpu(m->partial, g->qkvw, g->qkvb, m->dqkv, a->ln1, bf(m, w->qkvw), BT, C, m->qkv_dim, 0, s);
    dln = tp_reduce_rows(m, m->partial, B);
    act_copy(m, dx, m->dres2, (size_t)N * C);
    norm_backward(m, dx, g->ln1w, g->ln1b, dln, x, w->ln1w, a->ln1_mean, a->ln1_rstd, N, 1);
}

// ----------------------------------------------------------------------------
// Embedding (first chunk) and head + loss (last chunk). tokens, targets: device ints.

static void embed_forward(Model* m, bf16* x0, const int* tokens, int B) {
    int BT = B * m->T, N = row_count(m, B);
    embedding_forward_gpu(m->partial, tokens, bf(m, m->w.wte), BT, m->C, m->v0, m->Vl, m->stream);  // rows of this rank's vocabulary
    const bf16* y = tp_reduce_rows(m, m->partial, B);  // one nonzero term per row: the bf16 sum is exact
    act_copy(m, x0, y, (size_t)N * m->C);
    if (m->w.wpe) position_forward_gpu(x0, bf(m, m->w.wpe), N, row0_of(m, B), m->T, m->C, m->stream);
}
static void embed_backward(Model* m, const bf16* dx0, const int* tokens, int B) {
    int N = row_count(m, B);
    if (m->g.wpe) position_backward_gpu(m->g.wpe, dx0, N, row0_of(m, B), m->T, m->C, m->stream);
    const bf16* dy = sp_gather_grad(m, dx0, B);
    embedding_backward_gpu(m->g.wte, tokens, dy, B * m->T, m->C, m->v0, m->Vl, m->stream);
}

// Final norm, logits of this rank's vocabulary columns, vocabulary-parallel cross-entropy.
// dloss_scale > 0: the logits are replaced by dloss/dlogits for the backward.
static void head_forward(Model* m, Slot* s, const bf16* x, const int* targets, int B, float dloss_scale) {
    int BT = B * m->T, N = row_count(m, B);
    cudaStream_t st = m->stream;
    norm_forward(m, my_rows(m, s->lnf, B), s->lnf_mean, s->lnf_rstd, x, m->w.lnfw, m->w.lnfb, N);
    sp_gather_rows(m, s->lnf, B);
    matmul_forward(m, s->logits, s->lnf, m->w.head, NULL, BT, m->C, m->Vl);
    crossentropy_local_max_gpu(m->ce_max, s->logits, BT, m->Vl, m->v0, m->c.vocab, st);
    nccl_allreduce_max(&m->G, &m->G.tp, m->ce_max, BT, st);  // comm: tp all-reduce (max over vocabulary shards)
    crossentropy_local_sums_gpu(m->ce_sums, s->logits, m->ce_max, targets, BT, m->Vl, m->v0, m->c.vocab, st);
    nccl_allreduce_sum(&m->G, &m->G.tp, m->ce_sums, 2 * (size_t)BT, st);  // comm: tp all-reduce (sum exp, target logit)
    crossentropy_finish_gpu(s->losses, dloss_scale > 0 ? s->logits : NULL, m->ce_max, m->ce_sums, targets, BT, m->Vl,
                            m->v0, m->c.vocab, dloss_scale, st);
    sum_f64_gpu(m->loss_acc, s->losses, BT, st);
}
static void head_backward(Model* m, Slot* s, const bf16* x, bf16* dx, int B) {
    int BT = B * m->T, N = row_count(m, B);
    matmul_backward_gpu(m->partial, m->g.head, NULL, s->logits, s->lnf, bf(m, m->w.head), BT, m->C, m->Vl, 0, m->stream);
    const bf16* dln = tp_reduce_rows(m, m->partial, B);
    norm_backward(m, dx, m->g.lnfw, m->g.lnfb, dln, x, m->w.lnfw, s->lnf_mean, s->lnf_rstd, N, 0);
}

// ----------------------------------------------------------------------------
// The rank's orchestration (chunks, slots, the schedule executor, gradient reduction, the
// step, evaluation, sampling, the training loop) is model_runtime.h, shared with
// train_gpt.c. Below it, the primitives it asks of this build: device memory on the one
// compute stream, NCCL (or host-staged MPI) groups and pipeline p2p.
#include "model_runtime.h"

static void f32_copy(Model* m, float* dst, const float* src, size_t n) {
    cudaCheck(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, m->stream));
}
static void f32_zero(Model* m, float* p, size_t n) { cudaCheck(cudaMemsetAsync(p, 0, sizeof(float) * n, m->stream)); }
static void f32_add(Model* m, float* dst, const float* src, size_t n) { add_inplace_f32_gpu(dst, src, n, m->stream); }

static GpuGroup* group_of(Model* m, Group g) { return g == GROUP_TP ? &m->G.tp : g == GROUP_DP ? &m->G.dp : &m->G.embed; }
static void grad_allreduce(Model* m, Group g, float* buf, size_t n) { nccl_allreduce_sum(&m->G, group_of(m, g), buf, n, m->stream); }
static void grad_allreduce_dp_async(Model* m, float* buf, size_t n) { nccl_allreduce_sum_async(&m->G, &m->G.dp, buf, n, m->stream); }
static void grad_allreduce_dp_join(Model* m) { nccl_async_join(&m->G, m->stream); }
static void grad_reduce_scatter(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    nccl_reduce_scatter(&m->G, group_of(m, g), send, recv, n_per_rank, m->stream);
}
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank) {
    nccl_allgather(&m->G, group_of(m, g), send, recv, n_per_rank, m->stream);
}

// Pipeline p2p. With NCCL (pp > 1): straight from the slot's device buffer on the
// direction's send stream (comm_nccl.h: nccl_pp_send), the receive on the compute stream;
// the slot's buffers are rewritten only after the compute stream has waited for the send's
// `sent` event. Otherwise host-staged: device -> this slot's pinned host buffer, MPI_Isend
// (comm_isend), and on the other side MPI_Recv (comm_recv) into a pinned buffer, then host
// -> device. The payload is one bf16 N x C activation or gradient per micro-batch.
// n: bf16 elements, travelling host-staged as ceil(n/2) floats (the pinned buffers have room).
static size_t p2p_floats(size_t n) { return (2 * n + 3) / 4; }
static void pp_send(Model* m, Slot* s, int dir, const bf16* src, size_t n, int peer, int tag) {
    if (m->G.p2p) {
        nccl_pp_send(&m->G, dir, src, sizeof(bf16) * n, m->stream, s->sent[dir]);
        return;
    }
    d2h(s->h_send[dir], src, sizeof(bf16) * n, m->stream);  // synchronizes: the data is on the host
    comm_isend(&m->L.pp_c, s->h_send[dir], p2p_floats(n), peer, tag, &s->req[dir]);
}
static void pp_send_wait(Model* m, Slot* s, int dir) {
    if (m->G.p2p) cudaCheck(cudaStreamWaitEvent(m->stream, s->sent[dir], 0));  // the device waits, not the host
    else comm_wait(&m->L.pp_c, &s->req[dir]);
}
static void pp_recv(Model* m, int dir, bf16* dst, size_t n, int peer, int tag) {
    if (m->G.p2p) {
        nccl_pp_recv(&m->G, dir, dst, sizeof(bf16) * n, m->stream);
        return;
    }
    comm_recv(&m->L.pp_c, m->h_recv, p2p_floats(n), peer, tag);
    h2d(dst, m->h_recv, sizeof(bf16) * n, m->stream);  // synchronizes: h_recv is free again
}

// This dp rank's part of global batch `index`, on the host and the device; the device sum
// of token losses restarts.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index) {
    load_batch(ts, &m->c, m->L.dp_rank, m->n_micro, index, m->inputs, m->targets);
    size_t bytes = sizeof(int) * m->n_micro * m->B * m->T;
    h2d(m->d_inputs, m->inputs, bytes, m->stream);
    h2d(m->d_targets, m->targets, bytes, m->stream);
    cudaCheck(cudaMemsetAsync(m->loss_acc, 0, sizeof(double), m->stream));
}
static const int* batch_inputs(Model* m) { return m->d_inputs; }
static const int* batch_targets(Model* m) { return m->d_targets; }
static const int* window_tokens(Model* m, const int* window, int T) {
    h2d(m->d_inputs, window, sizeof(int) * T, m->stream);
    return m->d_inputs;
}
static void loss_fetch(Model* m) { d2h(&m->loss_sum, m->loss_acc, sizeof(double), m->stream); }

// The gradient norm: one deterministic fp32 sum of squares per tensor on the device, added
// up in fp64 on the host.
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss) { sumsq_gpu(m->norm_parts + k, x, n, m->stream); }
static void sumsq_finish(Model* m, int n_ranges, double* ss) {
    if (n_ranges) d2h(m->h_norm_parts, m->norm_parts, sizeof(float) * n_ranges, m->stream);
    for (int i = 0; i < n_ranges; i++) *ss += m->h_norm_parts[i];
}
// AdamW on the fp32 master weights of this rank's range; the bf16 copy follows: written by
// the update without ZeRO, with ZeRO refreshed whole from the all-gathered fp32 shards.
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t) {
    size_t o = a - m->opt_lo;
    adamw_update_gpu(m->params + a, m->c.zero ? NULL : m->params_bf16 + a, grad + o, m->m_state + o, m->v_state + o,
                     b - a, lr, m->c.beta1, m->c.beta2, m->c.eps, m->c.weight_decay, decay, grad_scale, t, m->stream);
}
static void params_gathered(Model* m) { f32_to_bf16_gpu(m->params_bf16, m->params, m->P.n_local, m->stream); }

// Sampling: one bf16 row of logits on the device, all-gathered over tp, then fp32 on the host.
static void row_logits(Model* m, const bf16* lnf_row, float* row) {
    int Vp = m->c.vocab_padded;
    matmul_forward(m, m->logit_row + m->v0, lnf_row, m->w.head, NULL, 1, m->C, m->Vl);
    nccl_allgather_bf16(&m->G, &m->G.tp, m->logit_row + m->v0, m->logit_row, m->Vl, m->stream);  // comm: tp all-gather of one row of logits
    bf16* row_bf = (bf16*)xmalloc(sizeof(bf16) * Vp);
    d2h(row_bf, m->logit_row, sizeof(bf16) * Vp, m->stream);
    for (int v = 0; v < Vp; v++) row[v] = __bfloat162float(row_bf[v]);
    free(row_bf);
}
// The device has caught up with the compute stream: the times of the NCCL calls that have
// finished are collected too.
static void device_sync(Model* m) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    gpu_comms_collect(&m->G);
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

// Carve a LayerActs; lse from the buffer (keep_lse) or the shared scratch.
static void carve_acts(Model* m, LayerActs* a, Carver* k, int keep_lse) {
    size_t BT = (size_t)m->B * m->T, N = row_count(m, m->B), C = m->C;
    a->ln1 = TAKE(k, bf16, BT * C); a->ln1_mean = TAKE(k, float, N); a->ln1_rstd = TAKE(k, float, N);
    a->qkv = TAKE(k, bf16, BT * m->qkv_dim);
    a->lse = keep_lse ? TAKE(k, float, BT * m->Hl) : m->lse_scratch;
    a->atty = TAKE(k, bf16, BT * m->Hl * m->hd);
    a->res2 = TAKE(k, bf16, N * C);
    a->ln2 = TAKE(k, bf16, BT * C); a->ln2_mean = TAKE(k, float, N); a->ln2_rstd = TAKE(k, float, N);
    a->fch = TAKE(k, bf16, BT * m->fc_dim); a->fch_act = TAKE(k, bf16, BT * m->Fl);
}

// Scratch for one micro-batch, shared by all layers.
static void carve_scratch(Model* m, Carver* k) {
    size_t BT = (size_t)m->B * m->T, N = row_count(m, m->B), C = m->C;
    m->lse_scratch = TAKE(k, float, BT * m->Hl);
    m->x_scratch = TAKE(k, bf16, N * C);
    m->partial = TAKE(k, bf16, BT * C);
    m->reduced = TAKE(k, bf16, N * C);
    m->gather = TAKE(k, bf16, BT * C);
    m->dres[0] = TAKE(k, bf16, N * C);
    m->dres[1] = TAKE(k, bf16, N * C);
    m->dres2 = TAKE(k, bf16, N * C);
    m->dqkv = TAKE(k, bf16, BT * m->qkv_dim);
    m->datty = TAKE(k, bf16, BT * m->Hl * m->hd);
    m->dfch = TAKE(k, bf16, BT * m->fc_dim);
    m->dfch_act = TAKE(k, bf16, BT * m->Fl);
    m->ce_max = TAKE(k, float, BT);
    m->ce_sums = TAKE(k, float, 2 * BT);
    m->logit_row = TAKE(k, bf16, m->c.vocab_padded);
    m->norm_parts = TAKE(k, float, m->P.n);
    m->loss_acc = TAKE(k, double, 1);
    m->d_inputs = TAKE(k, int, (size_t)m->n_micro * BT);
    m->d_targets = TAKE(k, int, (size_t)m->n_micro * BT);
    if (m->c.recompute == RECOMPUTE_FULL) carve_acts(m, &m->scratch, k, 0);
}

// The device pointers of one slot of chunk c (s->x and s->acts already allocated).
static void carve_slot(Model* m, int c, Slot* s, Carver* k) {
    Chunk* ch = &m->chunks[c];
    size_t BT = (size_t)m->B * m->T, N = row_count(m, m->B), C = m->C;
    int keep_lse = m->c.recompute == RECOMPUTE_NONE;
    for (int i = 0; i <= ch->n_layers; i++) s->x[i] = TAKE(k, bf16, N * C);
    s->dout = TAKE(k, bf16, N * C);
    s->dinp = TAKE(k, bf16, N * C);
    if (m->c.recompute != RECOMPUTE_FULL)
        for (int i = 0; i < ch->n_layers; i++) carve_acts(m, &s->acts[i], k, keep_lse);
    if (is_last_chunk(m, c)) {
        s->lnf = TAKE(k, bf16, BT * C); s->lnf_mean = TAKE(k, float, N); s->lnf_rstd = TAKE(k, float, N);
        s->logits = TAKE(k, bf16, BT * m->Vl); s->losses = TAKE(k, float, BT);
    }
}

static void* dev_alloc(size_t bytes) {
    void* p;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) fail("GPU out of memory allocating %.1f MiB (%s); try a smaller --micro-batch, --recompute, --zero or more --tp/--pp",
                               bytes / 1048576.0, cudaGetErrorString(e));
    cudaCheck(cudaMemset(p, 0, bytes ? bytes : 16));
    return p;
}
static float* pinned_floats(size_t n) {
    void* p;
    cudaCheck(cudaMallocHost(&p, sizeof(float) * (n ? n : 1)));
    return (float*)p;
}

static void alloc_activations(Model* m) {
    size_t N = row_count(m, m->B), C = m->C;
    Carver k = {NULL, 0};
    carve_scratch(m, &k);
    m->scratch_bytes = k.off;
    m->scratch_mem = (char*)dev_alloc(k.off);
    k = (Carver){m->scratch_mem, 0};
    carve_scratch(m, &k);
    // chunks exchange activations through NCCL, or host-staged (--comm mpi; and with pp 1,
    // vpp > 1, where a rank sends to itself)
    int staged = m->L.pp * m->L.vpp > 1 && !m->G.p2p;
    if (staged) m->h_recv = pinned_floats(p2p_floats(N * C));
    chunks_init(m);
    for (int c = 0; c < m->L.vpp; c++) {
        Chunk* ch = &m->chunks[c];
        for (int si = 0; si < ch->n_slots; si++) {
            Slot* s = &ch->slots[si];
            for (int dir = 0; dir < 2; dir++) {
                if (staged) s->h_send[dir] = pinned_floats(p2p_floats(N * C));
                if (m->G.p2p) cudaCheck(cudaEventCreateWithFlags(&s->sent[dir], cudaEventDisableTiming));
            }
        }
        k = (Carver){NULL, 0};
        carve_slot(m, c, &ch->slots[0], &k);  // sizing pass
        ch->slot_bytes = k.off;
        ch->mem = (char*)dev_alloc(ch->slot_bytes * ch->n_slots);
        for (int si = 0; si < ch->n_slots; si++) {
            k = (Carver){ch->mem + ch->slot_bytes * si, 0};
            carve_slot(m, c, &ch->slots[si], &k);
        }
    }
}

// Copy the host fp32 weights to the device and make the bf16 copy.
static void upload_params(Model* m) {
    h2d(m->params, m->h_params, sizeof(float) * m->P.n_padded, m->stream);
    f32_to_bf16_gpu(m->params_bf16, m->params, m->P.n_padded, m->stream);
}

static void model_init(Model* m, Args* a, Metrics* met) {
    memset(m, 0, sizeof(*m));
    m->args = a;
    m->c = a->cfg;
    m->met = met;
    ModelConfig* c = &m->c;
    layout_init(&m->L, c->dp, c->tp, c->pp, c->vpp);
    gpu_comms_init(&m->G, &m->L, a->comm_mpi ? COMM_MPI : COMM_NCCL);
    cudaCheck(cudaStreamCreate(&m->stream));
    model_shapes(m);
    // the kernels' reduction scratch: attention backward needs B*Hl*T floats; 16M covers the
    // column sums of any width in few chunks
    size_t red = (size_t)m->B * m->T * m->Hl;
    gpu_kernels_init(red > (16u << 20) ? red : (16u << 20));
    param_layout_build(&m->P, c, c->tp, m->L.tp_rank, c->pp, c->vpp, m->L.stage, c->dp);
    // parameters and gradients: one device buffer each, named views into them
    m->params = (float*)dev_alloc(sizeof(float) * m->P.n_padded);
    m->params_bf16 = (bf16*)dev_alloc(sizeof(bf16) * m->P.n_padded);
    m->grads = (float*)dev_alloc(sizeof(float) * m->P.n_padded);
    m->wl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    m->gl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    bind_weights(&m->P, c, m->params, &m->w, m->wl);
    bind_weights(&m->P, c, m->grads, &m->g, m->gl);
    m->h_params = (float*)xcalloc(m->P.n_padded, sizeof(float));
    init_params(&m->P, c, c->tp, m->L.tp_rank, m->h_params);  // on the host: the CPU build's weights, bit for bit
    upload_params(m);
    // optimizer state: the whole local buffer, or this rank's 1/dp shard with ZeRO
    size_t S = shard_floats(&m->P, c->dp);
    optimizer_range(&m->P, c, m->L.dp_rank, &m->opt_lo, &m->opt_hi);
    m->m_state = (float*)dev_alloc(sizeof(float) * (m->opt_hi - m->opt_lo));
    m->v_state = (float*)dev_alloc(sizeof(float) * (m->opt_hi - m->opt_lo));
    if (c->zero) m->grad_shard = (float*)dev_alloc(sizeof(float) * S);
    if (c->zero == 2) m->shard_tmp = (float*)dev_alloc(sizeof(float) * S);
    if (c->zero == 2 && m->L.in_embed && c->arch == ARCH_GPT2) m->wte_acc = (float*)dev_alloc(sizeof(float) * m->Vl * m->C);
    if (c->sp) m->sp_buf = (float*)dev_alloc(sizeof(float) * m->P.n_local);
    m->h_norm_parts = (float*)xcalloc(m->P.n, sizeof(float));
    model_init_schedule(m);  // model_runtime.h: the op list, then activations sized by it
}

// Checkpoints go through ckpt.h on host copies of the fp32 weights and AdamW state.
static void save_checkpoint(Model* m, int step) {
    size_t n_opt = m->opt_hi - m->opt_lo;
    float *hm = (float*)xmalloc(sizeof(float) * (n_opt ? n_opt : 1)), *hv = (float*)xmalloc(sizeof(float) * (n_opt ? n_opt : 1));
    d2h(m->h_params, m->params, sizeof(float) * m->P.n_padded, m->stream);
    d2h(hm, m->m_state, sizeof(float) * n_opt, m->stream);
    d2h(hv, m->v_state, sizeof(float) * n_opt, m->stream);
    ckpt_save(&m->L, &m->P, &m->c, m->args, m->h_params, hm, hv, m->opt_lo, m->opt_hi, step);
    free(hm); free(hv);
}
static int resume_checkpoint(Model* m) {
    size_t n_opt = m->opt_hi - m->opt_lo;
    float *hm = (float*)xcalloc(n_opt ? n_opt : 1, sizeof(float)), *hv = (float*)xcalloc(n_opt ? n_opt : 1, sizeof(float));
    int step = ckpt_resume(&m->L, &m->P, &m->c, m->args, m->h_params, hm, hv, m->opt_lo, m->opt_hi);
    upload_params(m);
    h2d(m->m_state, hm, sizeof(float) * n_opt, m->stream);
    h2d(m->v_state, hv, sizeof(float) * n_opt, m->stream);
    free(hm); free(hv);
    return step;
}

// ----------------------------------------------------------------------------
// The device: a usable GPU is checked before anything else starts (after --help and flag
// errors, which need none); the peak for MFU comes from its name.

__global__ void probe_kernel(int* x) { *x = 1; }

// Fails with "no CUDA GPU available (<reason>)" unless this process can run a kernel on
// device (local rank % devices). Run before MPI: a hand-started multi-rank run fails once,
// before mpirun starts the ranks.
static void gpu_probe(const Args* a) {
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess) fail("no CUDA GPU available (%s)", cudaGetErrorString(e));
    if (n_dev == 0) fail("no CUDA GPU available (0 devices)");
    const char* lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int dev = (lr ? atoi(lr) : 0) % n_dev;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        fail("no CUDA GPU available (device %d: %s)", dev, cudaGetErrorString(e));
    int* d = NULL;
    if ((e = cudaMalloc(&d, sizeof(int))) == cudaSuccess) {
        probe_kernel<<<1, 1>>>(d);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        cudaFree(d);
    }
    if (e != cudaSuccess)
        fail("no CUDA GPU available (device %d, %s, sm_%d%d: %s; this build targets sm_90)", dev, prop.name, prop.major,
             prop.minor, cudaGetErrorString(e));
    // A hand-started run puts all its ranks on this machine: NCCL needs a GPU for each.
    const ModelConfig* c = &a->cfg;
    int need = (c->dp ? c->dp : 1) * c->tp * c->pp;
    if (!under_launcher() && !a->comm_mpi && need > n_dev)
        fail("%d ranks but %d GPU(s) here: NCCL needs one GPU per rank (use --comm mpi to share a GPU)", need, n_dev);
}

// Dense bf16 tensor-core peak of the device, FLOP/s (from the vendor data sheets).
static double gpu_peak_flops(const char* name, char* src, size_t n) {
    if (strstr(name, "H100") || strstr(name, "H200")) { snprintf(src, n, "%.40s, bf16 dense", name); return 989e12; }
    if (strstr(name, "A100")) { snprintf(src, n, "%.40s, bf16 dense", name); return 312e12; }
    snprintf(src, n, "%.40s unknown: assumed; set --peak-tflops", name);
    return 100e12;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan")) return plan_main(argc, argv);
    {
        static Args pre;  // flags first: --help and flag errors need no GPU; run_setup parses them again
        parse_args(&pre, argc, argv);
        gpu_probe(&pre);
    }
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    ModelConfig* c = &a->cfg;
    int world = run.world, rank = run.rank, share = 1;
    int dev = gpu_select_device(a->comm_mpi ? COMM_MPI : COMM_NCCL, &share);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    // Peak for MFU: --peak-tflops, else by device name; ranks sharing a device share its peak.
    static char peak_src[256];
    double peak = a->peak_tflops * 1e12;
    if (peak) snprintf(peak_src, sizeof(peak_src), "--peak-tflops");
    else peak = gpu_peak_flops(prop.name, peak_src, sizeof(peak_src));
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
    if (a->import_llmc) {  // into the host copy, then up to the device
        llmc_import(a->import_llmc, &m.L, &m.P, c, m.h_params);
        upload_params(&m);
    }
    if (a->resume) start_step = resume_checkpoint(&m);
    if (rank == 0) {
        print_startup(&m.L, &m.P, c, a, &run.train, &run.val, &met, m.n_micro, start_step);
        printf("gpu: %s (sm_%d%d, %.0f GiB) per rank, comm %s, bf16 activations, "
               "fp32 master weights + bf16 copy, fp32 grads and AdamW state\n",
               prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0, a->comm_mpi ? "mpi (host-staged)" : "nccl");
        fflush(stdout);
    }
    // metrics_predict counts activations in floats; the bf16 buffers are passed as bytes / 4.
    size_t act_bytes = m.scratch_bytes;
    for (int ch = 0; ch < m.L.vpp; ch++) act_bytes += m.chunks[ch].slot_bytes * m.chunks[ch].n_slots;
    metrics_predict(&met, c, strstr(prop.name, "H200") ? "h200-sxm" : strstr(prop.name, "A100") ? "a100-80gb" : "h100-sxm",
                    met.peak_flops, 0, &m.P, m.opt_hi - m.opt_lo, act_bytes / 4, 6);  // 6 bytes/param: fp32 master + bf16 copy

    if (train_loop(&m, &run, &met, start_step)) {
        MPI_Finalize();
        return 130;
    }
    if (a->export_llmc) {
        d2h(m.h_params, m.params, sizeof(float) * m.P.n_padded, m.stream);
        llmc_export(a->export_llmc, &m.L, &m.P, c, m.h_params);
    }
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (rank == 0) {
        char b1[32], b2[32];
        printf("gpu memory (rank 0): %s in use of %s\n", fmt_bytes((double)(total_b - free_b), b1), fmt_bytes((double)total_b, b2));
    }
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    gpu_comms_free(&m.G);
    MPI_Finalize();
    return 0;
}
