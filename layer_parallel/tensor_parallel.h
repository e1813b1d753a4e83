// layer_parallel/tensor_parallel.h: tensor and sequence parallelism, where they communicate.
// Tensor parallelism (Megatron-LM): qkv and fc are column-parallel (each rank has its heads
// and MLP columns), attention proj and MLP proj row-parallel, their partial outputs meet in
// tp_reduce_rows (Megatron's f/g operators). Sequence parallelism (--sp, Korthikanti et
// al. 2022): the norm and residual regions keep only B*T/tp rows; tp_reduce_rows becomes a
// reduce-scatter and sp_gather_rows / sp_gather_grad all-gather the rows before the column-
// parallel matmuls; norm weights, row-parallel biases and wpe then see only their rows, so
// their gradients are summed over tp (sp_partial_sync). model/model.h's layer math calls
// these; each build's act_* collectives carry them.
#ifndef TENSOR_PARALLEL_H
#define TENSOR_PARALLEL_H

#include "backend/backend.h"  // the state (row_count, my_rows), the collectives (act_*)

// Row-parallel matmul output: partial sums (B*T x C) -> the reduced rows this rank keeps: in
// place without --sp, else reduce-scattered into sp_out (N x C); returns where they are.
static act_t* tp_reduce_rows_into(Model* m, act_t* partial, act_t* sp_out, int B) {
    int N = row_count(m, B), BT = B * m->T;
    if (!m->c.sp) {
        act_allreduce_sum(m, GROUP_TP, partial, (size_t)BT * m->C);  // comm: tp all-reduce
        return partial;
    }
    act_reduce_scatter(m, GROUP_TP, partial, sp_out, (size_t)N * m->C);  // comm: tp reduce-scatter (sp)
    return sp_out;
}
static act_t* tp_reduce_rows(Model* m, act_t* partial, int B) { return tp_reduce_rows_into(m, partial, m->reduced, B); }
// full (B*T x C) holds this rank's N rows at their place; fill in the other ranks' rows.
static void sp_gather_rows(Model* m, act_t* full, int B) {
    if (!m->c.sp) return;
    size_t n = (size_t)row_count(m, B) * m->C;
    act_allgather(m, GROUP_TP, full + m->L.tp_rank * n, full, n);  // comm: tp all-gather (sp)
}
// Gradient rows (N x C) -> all B*T rows, as the backward of a reduce-scatter: gathered into
// dst with --sp; without it the rows are all there, and are copied to dst only when they
// must outlive d (keep) and are not there already (d == dst).
static const act_t* sp_gather_grad(Model* m, const act_t* d, act_t* dst, int B, int keep) {
    size_t n = (size_t)row_count(m, B) * m->C;
    if (m->c.sp) act_allgather(m, GROUP_TP, d, dst, n);  // comm: tp all-gather (sp)
    else if (!keep) return d;
    else if (d != dst) act_copy(m, dst, d, n);
    return dst;
}

// With --sp, norm weights, row-parallel biases and wpe saw only this rank's rows: sum
// their gradients over tp. grad covers local buffer range [lo, lo + len). pack 1 copies the
// sp_partial pieces of grad into sp_buf, pack 0 copies them back; returns the floats moved.
static size_t sp_partial_pack(Model* m, float* grad, size_t lo, size_t len, int pack) {
    size_t n = 0;
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        size_t a, b;
        if (!t->sp_partial || !clip_range(t, lo, lo + len, &a, &b)) continue;
        float *dst = pack ? m->sp_buf + n : grad + (a - lo), *src = pack ? grad + (a - lo) : m->sp_buf + n;
        f32_copy(m, dst, src, b - a);
        n += b - a;
    }
    return n;
}
static void sp_partial_sync(Model* m, float* grad, size_t lo, size_t len) {
    if (!m->c.sp || m->L.tp == 1) return;
    size_t n = sp_partial_pack(m, grad, lo, len, 1);
    f32_allreduce_sum(m, GROUP_TP, m->sp_buf, n);  // comm: tp all-reduce of sequence-parallel partial gradients
    sp_partial_pack(m, grad, lo, len, 0);
}

#endif
