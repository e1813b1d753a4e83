// backend/state.h: what a rank holds, for both builds: what one (micro-batch, chunk) keeps between
// its forward and its backward (a slot), a pipeline chunk's slots and buffer pools, and the Model:
// the shapes on this rank, the weights, gradients and AdamW state, the pipeline's op list, the
// scratch every layer shares, documents, and the build's own state (ModelBackend). The element
// types come from the build's one header of types: backend/cpu/types.h (fp32, MPI) or
// backend/gpu/types.h (bf16, CUDA, NCCL), the GPU's when this is compiled as CUDA (nvcc, or the
// emulator's g++).
#ifndef STATE_H
#define STATE_H

#if defined(__CUDACC__) || defined(CUDA_EMU_H)
#include "backend/gpu/types.h"
#else
#include "backend/cpu/types.h"
#endif
#include "layout/args.h"
#include "layout/grid.h"
#include "layout/params.h"
#include "layout/schedule.h"
#include "data/data.h"
#include "backend/trace.h"

struct Metrics;       // runtime/metrics.h
struct ShardedState;  // parallel/zero3.h

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
    act_t* logits;                     // B*T x vocab_local logits, replaced by dlogits
    float* losses;                     // B*T
} HeadActs;

// Everything one (micro-batch, chunk) keeps between its forward and its backward.
typedef struct {
    act_t** x;                         // [n_layers+1] layer inputs (N x C); x[n_layers] is the chunk output
    LayerActs* acts;                   // [n_layers]; unused under --recompute full
    WeightGradIn* weight_grad_in;      // [n_layers] with deferred weight passes, from its B to its W: a set
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
    int n_frames;                      // n_slots, or fewer with --offload activations (backend/cpu/offload.h)
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
    int B, T, C, hd, n_head_local, n_kv_head_local, qkv_dim, Fl, fc_dim, vocab_local, vocab_start, n_micro;
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
    double replica_ss_local;           // (this rank's part of it as its tensors are measured: data_parallel.h)
    int replica_ss_ranges;             // (the ranges measured so far this step: sumsq_range's k)
    Chunk* chunks;                     // [vpp]
    int* slot_of;                      // [vpp * n_micro] slot index of (chunk, mb), -1 none
    int defer_weight;                  // 1: a layer's weight pass may run after the input passes below it
    // scratch shared by all layers (one micro-batch)
    LayerActs scratch;                 // layer activations under --recompute full
    WeightGradIn weight_grad_in;       // the weight pass's inputs when it follows the input pass at once
    float *att_scratch, *ce_max, *ce_sums;
    act_t *x_scratch, *partial, *reduced, *dres[2], *dres_after_attn, *datty, *dfch_act;
    float* sp_buf;                     // packing of the sequence-parallel partial gradients
    // context parallelism (layer_parallel/context_parallel.h): positions of this rank's T rows (host),
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
    // documents (data/data.h; all NULL with --doc-mask off): doc_start of each token this rank
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
    struct SampleRow* sample;          // while the executor samples (runtime/train.h sample_text), else NULL
    struct Metrics* met;               // the run's logs (runtime/metrics.h)
    Trace* trace;                      // the step's timeline (backend/trace.h; met's, or NULL)
    ModelBackend be;
} Model;

// The rows of a B*T x C activation this rank holds: all B*T, or with --sp its B*T/tp from row row0_of
// (layer_parallel/tensor_parallel.h communicates them); my_rows points at them in a full buffer.
static int row_count(const Model* m, int B) { return m->c.sp ? B * m->T / m->L.tp : B * m->T; }
static int row0_of(const Model* m, int B) { return m->c.sp ? m->L.tp_rank * row_count(m, B) : 0; }
static act_t* my_rows(Model* m, act_t* full, int B) { return full + (size_t)row0_of(m, B) * m->C; }

// Sampling through the schedule's executor (parallel/pipeline.h run_schedule; runtime/train.h
// sample_text): one sequence (B 1) of these tokens, and in place of the loss the logits of one row,
// row `row` of cp rank `holder`, over the padded vocabulary into `logits` (fp32, host; filled set
// on the ranks that computed them).
typedef struct SampleRow {
    const int* tokens;
    int holder, row, filled;
    float* logits;
} SampleRow;

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
// Pipeline chunks: which of the model's pp x vpp chunks (layout/schedule.h) this stage's local ones are.

static int global_chunk(const Model* m, int chunk) { return chunk_global(m->L.sched, m->L.pp, m->L.stage, chunk); }
static int is_first_chunk(const Model* m, int chunk) { return global_chunk(m, chunk) == 0; }
static int is_last_chunk(const Model* m, int chunk) { return global_chunk(m, chunk) == m->L.pp * m->L.vpp - 1; }
// The local chunk of global chunk g when it sits on this stage too (then activations and
// gradients are handed over by a copy, not a message), else -1.
static int local_chunk(const Model* m, int g) {
    if (g < 0 || g >= m->L.pp * m->L.vpp || chunk_stage(m->L.sched, m->L.pp, g) != m->L.stage) return -1;
    return chunk_local(m->L.sched, m->L.pp, g);
}

#endif
