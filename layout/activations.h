// activations.h: the activation buffers one rank of this trainer allocates, from the layout's
// shapes alone. Both builds carve their buffers from these lists (train_gpt.c, train_gpt.cu)
// and the planner sums the same lists for this trainer (planner/memory.h), so the planner's
// activation memory is the trainer's by construction.
//
// What a rank holds (model.h's structs, parallel/pipeline.h's slots and pools):
//   per (micro-batch, chunk) in flight, a slot: the chunk's layer inputs (n_layers + 1), the
//     gradients from the next chunk and to the previous one, and each layer's LayerActs
//     (none under --recompute full)
//   per weight pass owed (deferred W), a set of WeightGradIn for each layer of the chunk
//   per head between its forward and its backward (last chunk), a HeadActs
//   once, the scratch every layer shares: the backward's gradients in flight, the loss's row
//     statistics, one WeightGradIn, the layer being recomputed under --recompute full
// Sizes are elements of the build's activation type act_t (fp32 on the CPU, bf16 on the GPU)
// unless marked fp32 (norm statistics, the attention's log-sum-exp, per-token losses).
#ifndef ACTIVATIONS_H
#define ACTIVATIONS_H

#include "layout/config.h"
#include "layout/schedule.h"

// Shapes on one rank (runtime/train.h gives the Model the same): B sequences of T = seq_len/cp
// rows; N of them in the norm and residual regions (B*T/tp with --sp), all B*T in the matmuls.
// sms: the GPU's streaming multiprocessors (0: the CPU build, or a GPU not known): the GPU
// backward's dQ buffer depends on them (attn_dq_splits).
typedef struct { size_t B, T, BT, N, C, hd, n_head_local, qkv_dim, Fl, fc_dim, vocab_local; int sms; } ActShape;

static ActShape act_shape(const ModelConfig* c, int micro_batch) {
    ActShape s;
    s.B = micro_batch, s.T = c->seq_len / c->cp, s.BT = s.B * s.T, s.N = c->sp ? s.BT / c->tp : s.BT;
    s.C = c->d_model, s.hd = c->d_model / c->n_head, s.n_head_local = c->n_head / c->tp;
    s.qkv_dim = (s.n_head_local + 2 * (size_t)(c->n_kv_head / c->tp)) * s.hd;
    s.Fl = c->d_ff / c->tp, s.fc_dim = c->arch == ARCH_GPT2 ? s.Fl : 2 * s.Fl;
    s.vocab_local = c->vocab_padded / c->tp;
    s.sms = 0;
    return s;
}

// The GPU attention backward's dQ splits (backend/gpu/attention.cuh): each split is a grid of
// (kv head, sequence) blocks with its own fp32 dQ; as many as put 2 blocks on each of `sms`
// SMs, at most 8 and at most the key blocks of 64 rows. Its buffer is splits x B*T*H*hd fp32.
static int attn_dq_splits(size_t B, size_t T, size_t kv_heads, int sms) {
    size_t per = B * kv_heads > 0 ? B * kv_heads : 1, want = (2 * (size_t)(sms > 0 ? sms : 1) + per - 1) / per;
    size_t key_blocks = (T + 63) / 64;
    if (want > 8) want = 8;
    if (want > key_blocks) want = key_blocks;
    return want < 1 ? 1 : (int)want;
}

// One buffer: its elements, and whether it is fp32 in every build (else act_t). An empty
// buffer (n 0) is not allocated.
typedef struct { size_t n; int f32; } ActBuf;

// One layer's LayerActs, in carving order. keep_lse: the attention's log-sum-exp is kept per
// layer (--recompute none); else the layer reads the shared scratch's and LA_LSE is empty.
enum { LA_LN1, LA_LN1_MEAN, LA_LN1_RSTD, LA_QKV, LA_LSE, LA_ATTY, LA_RES2, LA_LN2, LA_LN2_MEAN, LA_LN2_RSTD, LA_FCH,
       LA_FCH_ACT, N_LA };
static void layer_act_bufs(const ActShape* s, int keep_lse, ActBuf* b) {
    const ActBuf l[N_LA] = {{s->BT * s->C, 0},
                            {s->N, 1},
                            {s->N, 1},
                            {s->BT * s->qkv_dim, 0},
                            {keep_lse ? s->BT * s->n_head_local : 0, 1},
                            {s->BT * s->n_head_local * s->hd, 0},
                            {s->N * s->C, 0},
                            {s->BT * s->C, 0},
                            {s->N, 1},
                            {s->N, 1},
                            {s->BT * s->fc_dim, 0},
                            {s->BT * s->Fl, 0}};
    for (int i = 0; i < N_LA; i++) b[i] = l[i];
}

// One layer's WeightGradIn: the output gradients of its four matmuls over all B*T rows.
enum { WG_DY_MLP, WG_DY_ATT, WG_DFCH, WG_DQKV, N_WG };
static void weight_grad_in_bufs(const ActShape* s, ActBuf* b) {
    const ActBuf l[N_WG] = {{s->BT * s->C, 0}, {s->BT * s->C, 0}, {s->BT * s->fc_dim, 0}, {s->BT * s->qkv_dim, 0}};
    for (int i = 0; i < N_WG; i++) b[i] = l[i];
}

// The last chunk's HeadActs: the final norm's output and statistics, the logits (this rank's
// vocab_local columns, replaced by their gradient) and the per-token losses.
enum { HD_LNF, HD_LNF_MEAN, HD_LNF_RSTD, HD_LOGITS, HD_LOSSES, N_HD };
static void head_bufs(const ActShape* s, ActBuf* b) {
    const ActBuf l[N_HD] = {{s->BT * s->C, 0}, {s->N, 1}, {s->N, 1}, {s->BT * s->vocab_local, 0}, {s->BT, 1}};
    for (int i = 0; i < N_HD; i++) b[i] = l[i];
}

// The scratch all layers of a micro-batch share: the log-sum-exp when layers do not keep
// theirs, a layer input being rebuilt, the row-parallel outputs before and after their
// reduction, the residual gradients (two, alternating) and the one after the attention, the
// attention output's and the activation's gradients, the loss's row maximum and sums. host:
// the CPU build; else the GPU's attention backward sums dQ in fp32 per split (attn_dq_splits;
// with cp, the ring's blocks of Ts rows and Ha heads: as many elements) and keeps Dsum =
// rowsum(dO * O) per query row and head (with cp, computed once a backward and read by every
// ring step).
enum { SC_LSE, SC_X, SC_PARTIAL, SC_REDUCED, SC_DRES0, SC_DRES1, SC_DRES_AFTER_ATTN, SC_DATTY, SC_DFCH_ACT,
       SC_CE_MAX, SC_CE_SUMS, SC_DQ_ACC, SC_DSUM, N_SC };
static void scratch_bufs(const ActShape* s, int host, ActBuf* b) {
    size_t NC = s->N * s->C, kv_heads = (s->qkv_dim / s->hd - s->n_head_local) / 2;
    const ActBuf l[N_SC] = {{s->BT * s->n_head_local, 1},
                            {NC, 0},
                            {s->BT * s->C, 0},
                            {NC, 0},
                            {NC, 0},
                            {NC, 0},
                            {NC, 0},
                            {s->BT * s->n_head_local * s->hd, 0},
                            {s->BT * s->Fl, 0},
                            {s->BT, 1},
                            {2 * s->BT, 1},
                            {host ? 0 : attn_dq_splits(s->B, s->T, kv_heads, s->sms) * s->BT * s->n_head_local * s->hd,
                             1},
                            {host ? 0 : s->BT * s->n_head_local, 1}};
    for (int i = 0; i < N_SC; i++) b[i] = l[i];
}

// Bytes of a list: act_t of act_bytes bytes, each buffer rounded up to `align` bytes (the
// GPU build carves every buffer on a 256-byte boundary; the CPU's are contiguous: 1).
static double act_bufs_bytes(const ActBuf* b, int n, int act_bytes, int align) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!b[i].n) continue;
        double bytes = (double)b[i].n * (b[i].f32 ? 4 : act_bytes);
        sum += ceil(bytes / align) * align;
    }
    return sum;
}

static double act_layer_bytes(const ActShape* s, int keep_lse, int act_bytes, int align) {
    ActBuf b[N_LA];
    layer_act_bufs(s, keep_lse, b);
    return act_bufs_bytes(b, N_LA, act_bytes, align);
}
static double act_weight_grad_in_bytes(const ActShape* s, int act_bytes, int align) {
    ActBuf b[N_WG];
    weight_grad_in_bufs(s, b);
    return act_bufs_bytes(b, N_WG, act_bytes, align);
}
static double act_head_bytes(const ActShape* s, int act_bytes, int align) {
    ActBuf b[N_HD];
    head_bufs(s, b);
    return act_bufs_bytes(b, N_HD, act_bytes, align);
}

// The bytes of what a chunk's buffers are made of, for shape s: one N x C tensor of a slot (x), a layer's
// LayerActs (none under --recompute full), a layer's WeightGradIn set and a head. The planner sums them for
// every chunk of every layout it predicts: computed once a layout.
typedef struct { double x, layer, wg, head; } ActUnits;
static ActUnits act_units(const ActShape* s, int recompute, int act_bytes, int align) {
    ActBuf x = {s->N * s->C, 0};
    ActUnits u = {act_bufs_bytes(&x, 1, act_bytes, align),
                  recompute == RECOMPUTE_FULL ? 0 : act_layer_bytes(s, recompute == RECOMPUTE_NONE, act_bytes, align),
                  act_weight_grad_in_bytes(s, act_bytes, align), act_head_bytes(s, act_bytes, align)};
    return u;
}

// One slot of a chunk of n_layers: its layer inputs and output, dout and dinp (N x C each),
// and the layers' LayerActs unless --recompute full.
static double act_units_slot_bytes(const ActUnits* u, int n_layers) {
    return (n_layers + 3) * u->x + n_layers * u->layer;
}
static double act_slot_bytes(const ActShape* s, int n_layers, int recompute, int act_bytes, int align) {
    ActUnits u = act_units(s, recompute, act_bytes, align);
    return act_units_slot_bytes(&u, n_layers);
}

// The shared scratch with its WeightGradIn and, under --recompute full, the layer being
// recomputed (its log-sum-exp the scratch's).
static double act_scratch_bytes(const ActShape* s, int recompute, int host, int act_bytes, int align) {
    ActBuf b[N_SC];
    scratch_bufs(s, host, b);
    double bytes = act_bufs_bytes(b, N_SC, act_bytes, align) + act_weight_grad_in_bytes(s, act_bytes, align);
    if (recompute == RECOMPUTE_FULL) bytes += act_layer_bytes(s, 0, act_bytes, align);
    return bytes;
}

// How many of each a chunk allocates (parallel/pipeline.h's chunks_init and the planner), from
// the stage's op list: `slots` (schedule.h schedule_slots: the most micro-batches in flight on
// it, or held past their sends), a WeightGradIn set per W owed at once (at least 1
// when weight passes are deferred: B and W in one op), a head per forward whose backward has
// not run (the last chunk only; at least 1: sampling and evaluation use one).
typedef struct { int slots, wg_sets, heads; } ActCounts;
static ActCounts act_chunk_counts(const PipeOp* ops, int n_ops, int chunk, int slots, int last_chunk,
                                  int defer_weight) {
    ActCounts k;
    k.slots = slots;
    k.wg_sets = defer_weight ? schedule_max_w_owed(ops, n_ops, chunk) : 0;
    if (defer_weight && k.wg_sets < 1) k.wg_sets = 1;
    k.heads = last_chunk ? schedule_max_between(ops, n_ops, chunk, OP_FWD, OP_BWD) : 0;
    if (last_chunk && k.heads < 1) k.heads = 1;
    return k;
}

// Everything a chunk of n_layers allocates for its slots and pools (u: act_units of its shape).
static double act_chunk_bytes(const ActUnits* u, int n_layers, ActCounts k) {
    return k.slots * act_units_slot_bytes(u, n_layers) + (k.wg_sets && n_layers ? k.wg_sets * n_layers * u->wg : 0) +
           (k.heads ? k.heads * u->head : 0);
}

// Context parallelism's buffers, shared by the layers: layer_parallel/context_parallel.h cp_alloc
// allocates them with these sizes and the planner sums the same bytes. With cp ranks in groups of
// U (Ulysses), a rank's attention covers rows = B x T U rows (T = seq_len/cp) of n_head_local/U
// heads and n_kv_head_local/U KV heads of hd. Elements: o, the fp32 output (then dq); kv, a step's
// own fp32 dK, dV; two ring transfer buffers of ring_bytes each, [K,V (act_t) | dK,dV (fp32)] so one
// exchange moves both, the dK,dV part at kv_bytes (256-byte aligned); with Ulysses (U > 1) the
// head-split q, k, v (qkv), output and output gradient (o each, act_t) and the all-to-all's send
// and receive buffers (qkv each). bytes: all of them. cp 1: none.
typedef struct { size_t rows, o, kv, qkv, kv_bytes, ring_bytes; double bytes; } CpBufs;
static CpBufs cp_bufs(size_t B, size_t T, size_t n_head_local, size_t n_kv_head_local, size_t hd, int cp, int U,
                      int act_bytes) {
    CpBufs b = {0, 0, 0, 0, 0, 0, 0};
    if (cp == 1) return b;
    size_t Ha = n_head_local / U, KVa = n_kv_head_local / U;
    b.rows = B * T * U, b.o = b.rows * Ha * hd, b.kv = b.rows * 2 * KVa * hd, b.qkv = b.rows * (Ha + 2 * KVa) * hd;
    b.kv_bytes = (act_bytes * b.kv + 255) / 256 * 256;
    b.ring_bytes = b.kv_bytes + sizeof(float) * b.kv;
    b.bytes = (double)sizeof(float) * (b.o + b.kv) + 2.0 * b.ring_bytes;
    if (U > 1) b.bytes += (double)act_bytes * (3 * b.qkv + 2 * b.o);
    return b;
}

// --offload activations (backend/cpu/offload.h, backend/gpu/offload_gpu.h): device-resident activation
// frames per chunk (--offload-frames): 2, an op and the next compute op touch at most one slot of each
// chunk each (parallel/pipeline.h offload_prepare); or 1, the op's own, without the prefetch (its copy
// in is waited for).
#define OFFLOAD_ACT_FRAMES 2
static int offload_frames_of(const ModelConfig* c) {
    return c->offload_frames ? c->offload_frames : OFFLOAD_ACT_FRAMES;
}

// Slots a chunk with `slots` in flight keeps on the device (the rest are in the tier).
static int act_device_slots(int slots, const ModelConfig* c) {
    int frames = offload_frames_of(c);
    return (c->offload & OFFLOAD_ACTIVATIONS) && slots > frames ? frames : slots;
}

#endif
