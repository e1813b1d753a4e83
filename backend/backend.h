// backend/backend.h: the contract, everything a build supplies. The model, the pipeline, data
// parallelism and the training run are written once (model/model.h, parallel/, runtime/train.h)
// over the functions declared here; train_gpt.c defines them for the CPU (fp32, kernels_cpu.h,
// MPI), train_gpt.cu for the GPU (bf16, kernels_gpu.cuh, cuBLASLt, NCCL), under the same names,
// argument order and accumulate rules. "+=" accumulates into its output, "=" overwrites it.
// Weights are passed as their fp32 views (m->w, m->wl); the GPU reads its bf16 copy of them.
//
// Each function is declared here before anything calls it or defines it, so every header of the
// model, parallel/ and runtime/ includes what it uses and compiles alone. The build's types
// (act_t, SlotSends, GatherWait, ModelBackend) and the state all of them work on: backend/state.h.
// The tp / cp communication steps the layer math calls are shared code over this contract, in the
// layer above it (layer_parallel/tensor_parallel.h, layer_parallel/context_parallel.h).
#ifndef BACKEND_H
#define BACKEND_H

#include "backend/state.h"

// ----------------------------------------------------------------------------
// Ops: the layer math on this rank's rows (N) and columns.

// out (N x C) = norm(x) (LayerNorm for GPT-2, RMSNorm for LLaMA), mean/rstd kept (fp32).
static void op_norm_forward(Model* m, act_t* out, float* mean, float* rstd, const act_t* x, const float* w,
                            const float* b, int N);
// The residual add and the norm after it in one pass over the rows (llm.c's fused residual):
// res (N x C) = x + y (+ bias, may be NULL), then out = norm(res) as op_norm_forward, bit for bit
// what op_residual and op_norm_forward give one after the other.
static void op_residual_norm_forward(Model* m, act_t* res, act_t* out, float* mean, float* rstd, const act_t* x,
                                     const act_t* y, const float* bias, const float* w, const float* b, int N);
// dx = dres + d norm / dx (dres NULL: 0; dres may be dx, in place; dx must not be dout); dw, db +=.
static void op_norm_backward(Model* m, act_t* dx, const act_t* dres, float* dw, float* db, const act_t* dout,
                             const act_t* x, const float* w, const float* mean, const float* rstd, int N);
// out (N x OC) = inp (N x IC) @ w^T + b (b may be NULL).
static void op_matmul_forward(Model* m, act_t* out, const act_t* inp, const float* w, const float* b, int N, int IC,
                              int OC);
// dinp (N x IC) = dout (N x OC) @ w.
static void op_matmul_backward_input(Model* m, act_t* dinp, const act_t* dout, const float* w, int N, int IC, int OC);
// dw (OC x IC) += dout^T @ inp; db (OC, may be NULL) += column sums of dout.
static void op_matmul_backward_weight(Model* m, float* dw, float* db, const act_t* dout, const act_t* inp, int N,
                                      int IC, int OC);
// The MLP's column-parallel half, a fused pair where the build has one (the GPU's GELU
// epilogue): fch = inp @ fcw^T + fcb, fch_act = GELU(fch) (GPT-2) or SwiGLU(fch) (LLaMA).
static void op_fc_act_forward(Model* m, act_t* fch, act_t* fch_act, const act_t* inp, const LayerW* w, int N);
// The pair's backward through the projection's input: dfch = act'(fch) * (dy @ fcprojw).
static void op_fcproj_act_backward_input(Model* m, act_t* dfch, const act_t* dy, const LayerW* w, const act_t* fch,
                                         int N);
// RoPE on the q and k heads of qkv rows in place (row i at position m->pos[i % T]); sign -1: the backward.
static void op_rope(Model* m, act_t* qkv, int N, float sign);
// Causal attention of this rank's heads (grouped-query) over whole sequences (no cp): out
// (B*T x n_head_local*hd), att its saved state (the log-sum-exp, B x n_head_local x T).
static void op_attention_forward(Model* m, act_t* out, float* att, const act_t* qkv, int B);
// dqkv = the attention's input gradient from dout (out and att as the forward left them).
static void op_attention_backward(Model* m, act_t* dqkv, const act_t* dout, const act_t* qkv, const act_t* out,
                                  const float* att, int B);
// The blocks of attention of one ring step (layout/config.h AttnBlock; context_parallel.h's
// cp_blocks: the same q and kv, every pair they leave out unseen): merged into the running
// fp32 output o (B*Ts x Ha*hd) and log-sum-exp lse (B x Ha x Ts) by log-sum-exp (init: these
// query rows start here). q: query heads at column 0 (stride q_ld); kv: k heads then v heads
// (stride kv_ld). The CPU runs them one after the other, the GPU in one launch.
static void op_attention_blocks_forward(Model* m, float* o, float* lse, const act_t* q, const act_t* kv,
                                        const AttnBlock* blk, int n);
// Their gradient: dq (B*Ts x Ha*hd) +=, dkv (B*Ts x 2*KVa*hd, dk then dv) +=, from the final
// lse and the output out and its gradient dout (B*Ts x Ha*hd).
static void op_attention_blocks_backward(Model* m, float* dq, float* dkv, const act_t* q, const act_t* kv,
                                         const act_t* dout, const act_t* out, const float* lse, const AttnBlock* blk,
                                         int n);
// dqkv (rows x (Ha + 2 KVa)*hd) = [dq | dkv] rounded to act_t.
static void op_attention_grad_pack(Model* m, act_t* dqkv, const float* dq, const float* dkv, size_t rows, int Ha,
                                   int KVa);
static void op_f32_to_act(Model* m, act_t* dst, const float* src, size_t n);
// out (N x C) = x + y (+ bias, may be NULL).
static void op_residual(Model* m, act_t* out, const act_t* x, const act_t* y, const float* bias, int N);
// db (C) += column sums of d (N x C).
static void op_column_sum(Model* m, float* db, const act_t* d, int N);
// Embedding rows of this rank's vocabulary [vocab_start, vocab_start + vocab_local): out (N x C) = wte[token] or 0.
static void op_embedding_forward(Model* m, act_t* out, const int* tokens, int N);
static void op_embedding_backward(Model* m, const int* tokens, const act_t* dout, int N);  // g.wte +=
// GPT-2's positions: x (N rows from row0; row i at position m->pos[i % T]) += wpe[position];
// and g.wpe += the gradient.
static void op_position_forward(Model* m, act_t* x, int N, int row0);
static void op_position_backward(Model* m, const act_t* dx, int N, int row0);
// Vocabulary-parallel cross-entropy over this rank's vocab_local columns: the row maxima, the sums of
// exponentials and the target logits, then the losses (and dloss/dlogits into logits when
// dlogits is not NULL: scale dloss_scale); the step's loss sum accumulates the losses.
static void op_ce_local_max(Model* m, float* max, const act_t* logits, int N);
static void op_ce_local_sums(Model* m, float* sums, const act_t* logits, const float* max, const int* targets, int N);
static void op_ce_finish(Model* m, float* losses, act_t* dlogits, const float* max, const float* sums,
                         const int* targets, int N, float dloss_scale);
static void op_loss_accumulate(Model* m, const float* losses, int N);

// ----------------------------------------------------------------------------
// Collectives, to a process group by kind (layout/grid.h's Group: Layout.group on the CPU,
// GpuComms.group on the GPU). In place unless they take send and recv.

// Of activations (act_t). allgather: send may be recv + rank * n_per_rank.
static void act_allreduce_sum(Model* m, Group g, act_t* buf, size_t n);
static void act_reduce_scatter(Model* m, Group g, const act_t* send, act_t* recv, size_t n_per_rank);
static void act_allgather(Model* m, Group g, const act_t* send, act_t* recv, size_t n_per_rank);
// Block r of send to rank r; recv block r from rank r (n_per_rank each).
static void act_alltoall(Model* m, Group g, const act_t* send, act_t* recv, size_t n_per_rank);
// fp32 (the loss's maxima and sums, gradients).
static void f32_allreduce_sum(Model* m, Group g, float* buf, size_t n);
static void f32_allreduce_max(Model* m, Group g, float* buf, size_t n);
// Data parallelism (parallel/data_parallel.h): the dp all-reduce of a gradient range that may
// run beside the rest of the backward (the GPU build: on NCCL's own stream), and the point
// after which all of them are done; an all-gather (n_per_rank floats per rank: ZeRO 3's whole
// buffer for a checkpoint).
static void grad_allreduce_dp_async(Model* m, float* buf, size_t n);
static void grad_allreduce_dp_join(Model* m);
// ZeRO 0: the layer's gradient [lo, hi) is final once what is queued so far (its all-reduce) is.
static void layer_grads_queued(Model* m, size_t lo, size_t hi);
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank);

// --zero 1, 2 and 3 (parallel/zero3.h). comm: dp all-gather of a unit of n floats: replica r's
// counts[r] (this replica's from mine, which may be recv + displs[r]: in place) into recv + displs[r];
// started here, complete for the compute after unit_gather_wait.
static void unit_gather_start(Model* m, const float* mine, float* recv, const int* counts, const int* displs, size_t n,
                              GatherWait* w);
static void unit_gather_wait(Model* m, GatherWait* w, size_t n);
// comm: dp reduce-scatter of a unit's gradient grad (n floats): this replica's part of the sum
// (counts[replica] floats) added into part (NULL: it has none), then grad cleared. The GPU build
// queues all of it on NCCL's side stream after the compute so far and records *done (done may be
// NULL); the compute waits for it before grad is written again at unit_grad_wait, for all of them
// at grad_allreduce_dp_join.
static void unit_grad_reduce(Model* m, float* grad, const int* counts, const int* displs, size_t n, float* part,
                             GatherWait* done);
static void unit_grad_wait(Model* m, GatherWait* done);
// The gathered weights live in one buffer (arena, n floats), each unit's at its place; a
// unit's weights are ready there for the kernels after unit_weights_ready (the GPU's bf16 copy).
static void weights_arena(Model* m, float* arena, size_t n);
static void unit_weights_ready(Model* m, const float* buf, size_t n);

// ----------------------------------------------------------------------------
// Point-to-point.

// Pipeline (parallel/pipeline.h): n act_t to / from stage `peer`, travelling up the ring of
// stages or down (schedule.h p2p_up). A send from slot s (dir 0 forward, 1 backward) may still
// read src until pp_send_wait(m, s, dir), after which the slot's buffers may be written
// again; a receive returns with the data in dst.
static void pp_send(Model* m, Slot* s, int dir, int up, const act_t* src, size_t n, int peer, int tag);
static void pp_send_wait(Model* m, Slot* s, int dir);
static void pp_recv(Model* m, int dir, int up, act_t* dst, size_t n, int peer, int tag);
// The cp ring (GROUP_CP_RING): bytes to the next rank and as many from the previous, started
// here and finished by ring_wait, so the block computed between them overlaps the transfer.
// One exchange at a time; step names it in the trace (>= 0: the exchange ring step `step`
// overlaps; < 0: the last dK,dV going home after ring step -1-step).
static void ring_start(Model* m, const void* send, void* recv, size_t bytes, int step);
static void ring_wait(Model* m, int step);
// A schedule op (OP_FWD, OP_BWD, OP_W, a send or receive) of micro-batch mb on model chunk
// `chunk` ran from t0 until now (into m->trace, backend/trace.h: the step's timings and --trace;
// parallel/pipeline.h).
static void trace_op(Model* m, int kind, int mb, int chunk, double t0);

// ----------------------------------------------------------------------------
// Memory: activations, and fp32 gradient/parameter buffers, where this build keeps them.

static void act_copy(Model* m, act_t* dst, const act_t* src, size_t n);
// rows x cols elements from src (row stride src_ld) to dst (row stride dst_ld).
static void act_copy_2d(Model* m, act_t* dst, size_t dst_ld, const act_t* src, size_t src_ld, size_t rows, size_t cols);
static act_t* act_alloc(Model* m, size_t n);  // zeroed
static float* f32_alloc(Model* m, size_t n);  // zeroed
// AdamW's m or v (n floats, zeroed): where f32_alloc puts state, or with --offload optimizer in
// the offload tier (backend/cpu/offload.h); what names it in errors.
static float* opt_state_alloc(Model* m, size_t n, const char* what);
static void f32_copy(Model* m, float* dst, const float* src, size_t n);
static void f32_zero(Model* m, float* p, size_t n);
static void f32_add(Model* m, float* dst, const float* src, size_t n);  // dst += src
// The activation buffers (parallel/pipeline.h alloc_activations): the scratch shared by all layers
// (m->scratch_bytes); chunk c's slots, ch->slot_bytes each, in ch->mem's ch->n_frames frames (then
// bound by slot_bind); chunk c's pools of weight-pass inputs and heads (ch->wg, ch->heads).
static void act_scratch_alloc(Model* m);
static void chunk_slots_alloc(Model* m, int c);
static void chunk_pools_alloc(Model* m, int c);
// --offload activations (parallel/pipeline.h): a slot of chunk c carved at base (the device frame
// it is resident in); the chunk's tier of `bytes`; a resident slot's bytes copied out to the tier
// and back in (queued on the GPU's offload stream), and the device waiting for those copies.
static void slot_bind(Model* m, int c, Slot* s, char* base);
static char* act_tier_alloc(Model* m, size_t bytes);
static void act_tier_out(Model* m, char* tier, const char* frame, size_t bytes);
static void act_tier_in(Model* m, char* frame, char* tier, size_t bytes);
static void act_tier_wait(Model* m);

// ----------------------------------------------------------------------------
// Optimizer.

// AdamW on the range [a, b) of the local buffer (grad: the optimizer range's gradient), and
// ZeRO 1/2's dp all-gather of the updated shards, whole, under --offload optimizer (otherwise
// parallel/zero3.h gathers them a unit at a time).
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t);
// The ranges adamw_range queued are updated by now (the GPU build: all in one launch).
static void adamw_finish(Model* m);
static void param_shards_gather(Model* m);
// The gradient norm: sum of squares of the k-th owned range of the gradient, added into *ss
// by sumsq_finish(m, k_total, ss) at the latest. A build may read the ranges as late as the next
// sumsq_flush or sumsq_finish (the GPU build sums all queued ranges in one launch): a caller that
// changes a range before then calls sumsq_flush first.
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss);
static void sumsq_flush(Model* m);
static void sumsq_finish(Model* m, int n_ranges, double* ss);

// ----------------------------------------------------------------------------
// I/O: tokens in, losses, logits and checkpoints out.

// The batch runtime/train.h loaded into m->inputs, m->targets (and the documents' arrays) put
// where the kernels read it, and the step's loss sum restarted; those arrays; one sampling
// window (T tokens) put there.
static void batch_ready(Model* m);
static const int* batch_inputs(Model* m);
static const int* batch_targets(Model* m);
static const int* window_tokens(Model* m, const int* window, int T);
static void loss_fetch(Model* m);  // m->loss_sum holds this step's sum of token losses after it
// The last chunk's logits of one row (lnf_row, C act_t) over the padded vocabulary, fp32 on
// the host on every tp rank.
static void row_logits(Model* m, const act_t* lnf_row, float* row);
// The whole local fp32 weights on the host (n_padded floats, the params.h layout) for
// init_params and the readers and writers that go tensor by tensor (parallel/zero3.h
// params_to_host): a host buffer for them (the CPU: the weights themselves, or with --zero 3 a
// buffer of its own; the GPU: its host copy, made at the first call) and its end; the weights the
// kernels read copied into it, and from it (the GPU: and its bf16 copy made). With --zero 3 only
// this replica's shard [opt_lo, opt_hi) goes either way, at its place.
static float* params_host_take(Model* m);
static void params_host_give(Model* m, float* host);
static void params_down(Model* m, float* host);
static void params_up(Model* m, const float* host);
// AdamW's m or v (state: opt_hi - opt_lo floats) on the host for a checkpoint (fetch: its values
// copied there), and its end (store: what a reader wrote there copied back).
static float* opt_state_host_take(Model* m, float* state, int fetch);
static void opt_state_host_give(Model* m, float* host, float* state, int store);
// Wait for the queued device work (a no-op on the CPU).
static void device_sync(Model* m);
// Training step `step` (0-based) has ended: the GPU build reports what it asked of the device
// in it (kernel launches, host waits); a no-op on the CPU.
static void step_done(Model* m, int step);

// ----------------------------------------------------------------------------
// Set-up and end (runtime/main.h, in this order; backend/cpu/setup.h, backend/gpu/setup.h).

// This rank's device as the run reports and plans it: the peak FLOP/s for MFU and where that
// figure came from; the planner's profile of the device (planner/device.h), the FLOP/s and cores
// it models a rank with.
typedef struct {
    double peak_flops, planner_flops;
    const char* peak_source;
    const char* profile;
    int cores;
} DeviceInfo;
// What this build refuses among the flags, one error line (before any rank starts).
static void backend_check_flags(const Args* a);
// This rank's device and its figures; the build's notes and defaults in a (the kernels' row).
static void backend_start(DeviceInfo* d, Args* a, int rank, int world);
// The build's state before the weights (the GPU: communicators, streams, the kernels' scratch),
// and after the weights and the schedule's buffers (the GPU: optimizer staging, documents on the
// device; the CPU: the offload tier checked on every rank).
static void backend_init(Model* m);
static void backend_init_done(Model* m);
static int weight_bytes_per_param(const Model* m);  // where the kernels read them (the planner's count)
// Of a rank's bytes as the planner counts them (on its device, and --offload's on the host), those this build
// holds in the host's memory, with the host copy of the whole local fp32 weights params_host_take makes beside
// them where it is a buffer of its own (runtime/train.h host_memory_check).
static double host_bytes_of_rank(const Model* m, double device_bytes, double host_bytes);
static void backend_print(const Model* m);          // rank 0: the build's lines of the start-up table
static void backend_finish(Model* m);               // after the run: the GPU's memory line, its communicators

#endif
