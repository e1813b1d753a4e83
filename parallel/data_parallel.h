// parallel/data_parallel.h: data parallelism and ZeRO, all of it: the optimizer's range (the ZeRO
// shard, layout/params.h optimizer_range), the gradient reduction (bucketed all-reduce overlapped
// with the backward for ZeRO 0 and 1: ZeRO 1's optimizer then reads its shard of the sum), the tied
// embedding's group, and the optimizer step with the ZeRO all-gather of the updated weights (unit
// by unit, overlapping the next forward: zero3.h zero12_gather_start). Each dp rank reads its own
// slice of every global batch (data/data.h's load_batch), so any dp gives the same batch. ZeRO 2
// (each layer's gradient reduce-scattered after its backward, no whole gradient kept) and ZeRO 3
// (the weights sharded too, gathered a layer at a time): parallel/zero3.h.
// What a build supplies for it (the dp collectives, adamw_range, param_shards_gather):
// backend/backend.h.
#ifndef DATA_PARALLEL_H
#define DATA_PARALLEL_H

#include "backend/backend.h"
#include "layer_parallel/tensor_parallel.h"  // sp_partial_sync
#include "parallel/zero3.h"            // --zero 2 and 3

// The tied embedding: first and last stage each hold wte; their gradients are summed so
// both copies take the same update (Megatron's embedding group).
static void embed_group_sync(Model* m, float* wte_grad) {
    if (m->L.in_embed && m->c.arch == ARCH_GPT2)
        f32_allreduce_sum(m, GROUP_EMBED, wte_grad, (size_t)m->vocab_local * m->C);  // comm: embed all-reduce
}

// --noise-scale (runtime/noise_scale.h): the squared norm of this replica's own gradient, before
// the dp reduction, summed over the replicas (each element once: tp copies by their owner, the
// tied copy not; the stages' parts add up) into m->replica_sumsq. Each tensor is measured once it
// is final and before its reduction starts: under ZeRO 0 and 1 a layer's as its backward ends
// (layer_grads_final) and the head's (head_grads_final), so those reductions keep overlapping the
// backward; the rest in reduce_gradients (replica_sumsq_rest) after the tied embedding's sum (both its
// uses are in the replica's gradient), which then adds up the step's parts.
static void replica_sumsq_of(Model* m, int i) {
    if (m->P.t[i].owner)
        sumsq_range(m, m->replica_ss_ranges++, m->grads + m->P.t[i].offset, m->P.t[i].size, &m->replica_ss_local);
}

// Data-parallel reduction overlapped with the backward (ZeRO 0 and 1; PyTorch DDP's buckets, a
// layer each): once the step's last micro-batch has gone back through a layer, that
// layer's gradient is final on this rank, and its dp all-reduce starts while the layers
// below are still in their backward. A layer's tensors are contiguous in the buffer. ZeRO 1's
// shards are contiguous ranges of the buffer, so a layer lies in one or two replicas' shards and
// a reduce-scatter of it would be uneven (NCCL has none): the layer is all-reduced, twice a
// reduce-scatter's bytes, all of it beside the backward rather than after it. The
// build is told when the layer's reduced gradient is queued (layer_grads_queued: the GPU's
// --offload optimizer starts copying it to the host).
// Under --noise-scale each replica's own gradient is measured first (replica_sumsq_of), on the
// build's stream before the all-reduce that the layer's gradient then joins.
static void layer_grads_final(Model* m, int layer) {
    if (m->c.zero >= 2) return;
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        if (t->layer != layer) continue;
        if (m->args->noise_scale) replica_sumsq_of(m, i);
        if (t->offset < lo) lo = t->offset;
        if (t->offset + t->size > hi) hi = t->offset + t->size;
    }
    if (m->args->noise_scale) sumsq_flush(m);  // measured before the all-reduce changes them
    if (lo >= hi) return;
    if (m->L.replicas > 1) grad_allreduce_dp_async(m, m->grads + lo, hi - lo);  // comm: dp all-reduce of one layer
    layer_grads_queued(m, lo, hi);
}

// The layer hooks of the schedule's executor (parallel/pipeline.h), all that data parallelism
// does beside a layer's compute. Before layer l runs (forward, or backward), its weights are
// gathered (--zero 3: and layer `next`'s gather (-1: none) starts, to overlap l's compute; --zero
// 1 and 2: the all-gather since the last update waited for). Before the pass that writes l's
// gradient (its backward, or its deferred weight pass), the compute waits for the reduce-scatter
// still reading its buffer (--zero 2 and 3). After l's gradient is complete for this micro-batch,
// it is reduce-scattered (--zero 2 and 3); at the step's last one (grads_final) its all-reduce
// starts (ZeRO 0 and 1).
static void dp_layer_begin(Model* m, int l, int next) { zero3_layer_ready(m, l, next); }
static void dp_layer_grads_begin(Model* m, int l) { sharded_layer_grads_begin(m, l); }
static void dp_layer_grads_done(Model* m, int l, int grads_final) {
    sharded_layer_grads_done(m, l);
    if (grads_final) layer_grads_final(m, l);
}

// The head's gradients (the final norm's, and an untied head's) are complete once the step's
// last micro-batch has gone back through the head, at the start of the last chunk's last
// backward: their dp all-reduce (ZeRO 0 and 1) starts then, beside the rest of that backward, instead
// of after the schedule. (A tied head is wte, whose gradient the embedding adds to on the first
// stage and the embed group sums after the schedule: it waits for reduce_gradients.)
static int head_grad_early(const Model* m, int i) {
    int kind = m->P.t[i].kind;
    return m->c.zero <= 1 && m->L.replicas > 1 && m->P.t[i].layer < 0 &&
           local_chunk(m, m->L.pp * m->L.vpp - 1) >= 0 && (kind == P_LNFW || kind == P_LNFB || kind == P_HEAD);
}
static void head_grads_final(Model* m) {
    for (int i = 0; i < m->P.n; i++)
        if (head_grad_early(m, i)) {
            if (m->args->noise_scale) replica_sumsq_of(m, i), sumsq_flush(m);
            grad_allreduce_dp_async(m, m->grads + m->P.t[i].offset, m->P.t[i].size);  // comm: dp all-reduce
        }
}

// --noise-scale: what the backward did not measure (the model-level tensors but the head's), then the
// step's sum.
static void replica_sumsq_rest(Model* m) {
    for (int i = 0; i < m->P.n; i++)
        if (m->P.t[i].layer < 0 && !head_grad_early(m, i)) replica_sumsq_of(m, i);
    double ss = m->replica_ss_local;
    sumsq_finish(m, m->replica_ss_ranges, &ss);
    comm_allreduce_sum_f64(&m->L.group[GROUP_WORLD], &ss, 1);  // comm: world all-reduce of the squared norms
    m->replica_sumsq = ss, m->replica_ss_local = 0, m->replica_ss_ranges = 0;
}

// After the schedule: reduce gradients over the groups that share parameters. Returns the
// gradient the optimizer reads for its range [opt_lo, opt_hi) (ZeRO 0: the whole buffer).
static float* reduce_gradients(Model* m) {
    embed_group_sync(m, m->g.wte);
    if (m->c.zero >= 2) return sharded_reduce_gradients(m);  // the layers' went during the backward
    if (m->args->noise_scale) replica_sumsq_rest(m);
    // comm: dp all-reduce of what layer_grads_final left: the runs of model-level tensors
    // (embeddings at the buffer's start; final norm, head and the tied copy at its end),
    // back to front, GRAD_BUCKET_FLOATS a call
    const Tensor* t = m->P.t;
    for (int i = m->P.n - 1; i >= 0; i--) {
        if (t[i].layer >= 0 || head_grad_early(m, i)) continue;  // (the head's went during the backward)
        int j = i;
        while (j > 0 && t[j - 1].layer < 0 && !head_grad_early(m, j - 1)) j--;
        for (size_t hi = t[i].offset + t[i].size; hi > t[j].offset;) {
            size_t lo = hi - t[j].offset > GRAD_BUCKET_FLOATS ? hi - GRAD_BUCKET_FLOATS : t[j].offset;
            grad_allreduce_dp_async(m, m->grads + lo, hi - lo);
            hi = lo;
        }
        i = j;
    }
    grad_allreduce_dp_join(m);
    sp_partial_sync(m, m->grads + m->opt_lo, m->opt_lo, m->opt_hi - m->opt_lo);
    return m->grads + m->opt_lo;
}

// AdamW on this rank's range. With ZeRO 1/2 the updated fp32 shards are all-gathered (fp32, so
// every dp rank holds the exact master weights a checkpoint writes), a unit at a time beside the
// next forward (under --offload optimizer the bf16 copy, whole); ZeRO 3 keeps its shard and
// gathers each unit at its next use (zero3.h).
static void optimizer_step(Model* m, const float* grad, float lr, float grad_scale, int t) {
    zero12_params_ready(m);  // (the forward waited for each already)
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* tn = &m->P.t[i];
        size_t a, b;
        if (!clip_range(tn, m->opt_lo, m->opt_hi, &a, &b)) continue;
        adamw_range(m, a, b, grad, tn->decay, lr, grad_scale, t);
    }
    adamw_finish(m);
    if (m->c.zero == 3) zero3_params_updated(m);
    else if (m->c.zero > 0 && (m->c.offload & OFFLOAD_OPTIMIZER)) param_shards_gather(m);  // comm: dp all-gather
    else if (m->c.zero > 0) zero12_gather_start(m);  // comm: dp all-gather of each unit's updated shards
}

#endif
