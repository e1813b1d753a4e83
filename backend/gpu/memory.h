// backend/gpu/memory.h: where the GPU build keeps its bytes: device buffers on the compute stream,
// the activation slots carved from layout/activations.h's lists; the optimizer on them, and the
// batch, the loss and the logits as the shared code reads them.
#ifndef GPU_MEMORY_H
#define GPU_MEMORY_H

#include "backend/backend.h"
#include "backend/gpu/alloc.h"
#include "backend/gpu/comm.h"  // p2p_floats
#include "backend/gpu/offload_gpu.h"
#include "backend/gpu/ops.h"
#include "layout/activations.h"

static void f32_copy(Model* m, float* dst, const float* src, size_t n) {
    copyCheck(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, m->be.stream));
}
static void f32_zero(Model* m, float* p, size_t n) {
    copyCheck(cudaMemsetAsync(p, 0, sizeof(float) * n, m->be.stream));
}
static void f32_add(Model* m, float* dst, const float* src, size_t n) {
    add_inplace_f32_gpu(dst, src, n, m->be.stream);
}

// The batch's tokens (and documents) copied to the device; the device sum of token losses
// restarts. The arrays go up through pinned staging without the host waiting: the copies are
// queued on the compute stream, and the staging is rewritten only once the last batch's copies
// are done (by then they are, unless a step queued nothing after its batch).
static void batch_up(Model* m, int* dst, const int* src, size_t n, size_t* at) {
    int* h = m->be.h_batch + *at;
    memcpy(h, src, sizeof(int) * n);
    copyCheck(cudaMemcpyAsync(dst, h, sizeof(int) * n, cudaMemcpyHostToDevice, m->be.stream));
    *at += n;
}
static void batch_ready(Model* m) {
    if (cudaEventQuery(m->be.batch_copied) == cudaErrorNotReady) {
        (void)cudaGetLastError();  // not an error: cleared, or the next launch check would report it
        host_wait_event(m->be.batch_copied);
    }
    m->be.step_start = gpu_counts, m->be.loss_fetched = 0;
    m->be.step_t0 = now_s(), m->be.step_comm_s = comm_seconds_all(&m->L);
    op_families_restart(m);
    size_t n = (size_t)m->n_micro * m->B * m->T, at = 0;
    batch_up(m, m->be.d_inputs, m->inputs, n, &at);
    batch_up(m, m->be.d_targets, m->targets, n, &at);
    if (m->doc_start) {
        batch_up(m, m->be.d_row_pos, m->row_pos, n, &at);
        batch_up(m, m->be.d_doc_seq, m->doc_seq, n * m->c.cp, &at);
        if (m->cp_order) batch_up(m, m->be.d_cp_order, m->cp_order, n * m->c.cp, &at);
    }
    cudaCheck(cudaEventRecord(m->be.batch_copied, m->be.stream));
    copyCheck(cudaMemsetAsync(m->be.loss_acc, 0, sizeof(double), m->be.stream));
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
// The loss sum, unless the norm's fetch brought it already (sumsq_finish, after the schedule).
static void loss_fetch(Model* m) {
    if (!m->be.loss_fetched) d2h(&m->loss_sum, m->be.loss_acc, sizeof(double), m->be.stream);
    m->be.loss_fetched = 0;
}

// The gradient norm: the ranges queued, then one deterministic sum of squares over all of them
// on the device (backend/gpu/adamw.cuh: two launches a flush), fetched once.
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss) {
    mt_add(&m->be.norm_list, NULL, NULL, x, NULL, NULL, n, 0.0f);
}
static void sumsq_flush(Model* m) {
    if (!m->be.norm_list.n && m->be.norm_open) return;
    op_family_begin(m, OP_OPTIMIZER);
    sumsq_mt_gpu(m->be.loss_acc + 1, &m->be.norm_list, m->be.norm_open, m->be.stream);
    op_family_end(m);
    m->be.norm_open = 1;
}
// The sum of squares comes up with the step's loss sum beside it (loss_acc[0] and [1]: two
// doubles in a row), so a step's two scalars cost the host one wait.
static void sumsq_finish(Model* m, int n_ranges, double* ss) {
    double h[2];
    sumsq_flush(m);
    d2h(h, m->be.loss_acc, sizeof(h), m->be.stream);
    m->loss_sum = h[0], m->be.loss_fetched = 1, m->be.norm_open = 0;
    *ss += h[1];
}
// AdamW on the fp32 master weights of this rank's range; the bf16 copy follows: written by
// the update without ZeRO, with ZeRO 1/2/3 per unit as it is gathered (zero3_gpu.h; ZeRO 3's
// shard is param_shard). The ranges are queued and adamw_finish updates them all in one launch.
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t) {
    if (m->c.offload & OFFLOAD_OPTIMIZER) return adamw_range_host(m, a, b, grad, decay, lr, grad_scale, t);
    size_t o = a - m->opt_lo;
    float* p = m->zero3_state ? m->param_shard + o : m->params + a;
    mt_add(&m->be.adam_list, p, m->c.zero ? NULL : m->be.params_bf16 + a, grad + o, m->m_state + o, m->v_state + o,
           b - a, decay ? m->c.weight_decay : 0.0f);
    m->be.adam_lr = lr, m->be.adam_grad_scale = grad_scale, m->be.adam_t = t;
}
static void adamw_finish(Model* m) {
    op_family_begin(m, OP_OPTIMIZER);
    adamw_mt_gpu(&m->be.adam_list, m->be.adam_lr, m->c.beta1, m->c.beta2, m->c.eps, m->be.adam_grad_scale,
                 m->be.adam_t, m->be.stream);
    op_family_end(m);
}
// ZeRO 1/2 under --offload optimizer: the bf16 shards all-gathered (the fp32 master is on the host;
// otherwise parallel/zero3.h gathers the fp32 units and unit_weights_ready makes their bf16 copy).
static void param_shards_gather(Model* m) { offload_shards_gather(m); }

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
// The device has caught up with the compute stream: the times of the NCCL calls that have
// finished are collected too.
// The ops since the last sync get their device times, mapped onto the host's clock by an
// event recorded now: an op ends at its event and starts where the one before it ended, or when
// the host issued it if the device was idle then.
static void device_sync(Model* m) {
    OpTimes* o = &m->be.op_times;
    if (o->n) cudaCheck(cudaEventRecord(o->now, m->be.stream));
    host_wait(m->be.stream);
    double host_now = now_s(), prev_end = 0;
    for (int i = 0; i < o->n; i++) {
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, o->ends[i], o->now));
        double end = host_now - ms / 1e3, start = o->ops[i].t0 > prev_end ? o->ops[i].t0 : prev_end;
        trace_op_ran(m->trace, o->ops[i].kind, o->ops[i].mb, o->ops[i].chunk, start < end ? start : end, end);
        prev_end = end;
    }
    o->n = 0;
    op_families_collect(m);
    lt_timing_read();  // the first step's cuBLASLt timings (matmul.cuh lt_choose)
    gpu_comms_collect(&m->be.G);
}

// What step `step` asked of the device, from its batch's load to its end (the update
// included), on rank 0 after the first two steps (the first makes the cuBLASLt plans) and the
// last: launches (kernels and cuBLASLt matmuls), copies and memsets, NCCL calls, host waits;
// after the first, the cuBLASLt shapes whose algorithms were timed (matmul.cuh's lt_choose).
// --op-times: the step's op families (op_times.h), the mean printed after the last.
static void step_done(Model* m, int step) {
    int nth = ++m->be.steps_done, last = step == m->c.steps - 1;
    op_families_step(m, nth, (now_s() - m->be.step_t0) * 1e3, comm_seconds_all(&m->L) - m->be.step_comm_s, last);
    if (m->L.rank || m->args->quiet || (nth > 2 && !last)) return;
    GpuCounts d = gpu_counts, s = m->be.step_start;
    printf("gpu: step %d asked the device for %ld launches (%ld cuBLASLt matmuls), %ld copies, %ld NCCL calls; "
           "the host waited %ld times\n",
           step + 1, d.launches - s.launches, d.matmuls - s.matmuls, d.copies - s.copies,
           d.collectives - s.collectives, d.waits - s.waits);
    if (nth == 1)
        printf("gpu: cuBLASLt: %d matmul shapes timed (up to %d of the heuristic's algorithms each, in step 1), %d "
               "took another than its first\n",
               gpu_lt_timed, LT_ALGOS, gpu_lt_changed);
}

// Sampling: one bf16 row of logits on the device, all-gathered over tp, then fp32 on the host.
static void row_logits(Model* m, const bf16* lnf_row, float* row) {
    int Vp = m->c.vocab_padded;
    op_matmul_forward(m, m->be.logit_row + m->vocab_start, lnf_row, m->w.head, NULL, 1, m->C, m->vocab_local);
    // comm: tp all-gather of one row of logits
    nccl_allgather_bf16(&m->be.G, &m->be.G.group[GROUP_TP], m->be.logit_row + m->vocab_start, m->be.logit_row,
                        m->vocab_local, m->be.stream);
    bf16* row_bf = (bf16*)xmalloc(sizeof(bf16) * Vp);
    d2h(row_bf, m->be.logit_row, sizeof(bf16) * Vp, m->be.stream);
    for (int v = 0; v < Vp; v++) row[v] = __bfloat162float(row_bf[v]);
    free(row_bf);
}
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
// own (a row of logits for sampling, the loss's row statistics, the loss accumulator with the
// gradient norm's sum, the step's tokens on the device). The attention backward's dQ buffer
// (sized for this device's SM count: attn_dq_splits) and its Dsum are handed to the kernels.
static void carve_scratch(Model* m, Carver* k) {
    ActShape s = act_shape(&m->c, m->B);
    s.sms = gpu_sm_count();
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
    if (k->base)
        attention_buffers_init(s.sms, (float*)at[SC_DQ_ACC], b[SC_DQ_ACC].n, (float*)at[SC_DSUM], b[SC_DSUM].n);
    carve_weight_grad_in(m, &m->weight_grad_in, k);
    if (m->c.recompute == RECOMPUTE_FULL) carve_acts(m, &m->scratch, k, 0);
    m->be.logit_row = TAKE(k, bf16, m->c.vocab_padded);
    m->be.ce_stats = TAKE(k, float, 2 * (size_t)s.BT);
    m->be.loss_acc = TAKE(k, double, 2);  // [the loss sum, the gradient's sum of squares]
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

static void slot_bind(Model* m, int c, Slot* s, char* base) {
    Carver k = {base, 0};
    carve_slot(m, c, s, &k);
}
// The activation buffers on the device, each carved twice (a sizing pass, then into its
// allocation): the scratch for one micro-batch shared by all layers (and, when stages exchange
// activations host-staged (--comm mpi), the pinned receive buffer); a chunk's slots (ch->mem: its
// frames; each slot's send buffers and events); then its pools of weight-pass inputs (deferred
// weight passes) and heads.
static void act_scratch_alloc(Model* m) {
    Carver k = {NULL, 0};
    carve_scratch(m, &k);
    m->scratch_bytes = k.off;
    m->be.scratch_mem = (char*)dev_alloc(k.off);
    k = (Carver){m->be.scratch_mem, 0};
    carve_scratch(m, &k);
    if (m->L.pp > 1 && !m->be.G.p2p) m->be.h_recv = pinned_floats(p2p_floats((size_t)row_count(m, m->B) * m->C));
}
static void chunk_slots_alloc(Model* m, int c) {
    Chunk* ch = &m->chunks[c];
    size_t NC = (size_t)row_count(m, m->B) * m->C;
    for (int si = 0; si < ch->n_slots; si++) {
        Slot* s = &ch->slots[si];
        for (int dir = 0; dir < 2; dir++) {
            if (m->L.pp > 1 && !m->be.G.p2p) s->sends.h_send[dir] = pinned_floats(p2p_floats(NC));
            if (m->be.G.p2p) cudaCheck(cudaEventCreateWithFlags(&s->sends.sent[dir], cudaEventDisableTiming));
            if (m->be.G.p2p && (m->c.offload & OFFLOAD_ACTIVATIONS))
                s->sends.copy[dir] = (bf16*)dev_alloc(sizeof(bf16) * NC);
        }
    }
    Carver k = {NULL, 0};
    carve_slot(m, c, &ch->slots[0], &k);  // sizing pass
    ch->slot_bytes = k.off;
    ch->mem = (char*)dev_alloc(ch->slot_bytes * ch->n_frames);
}
static void chunk_pools_alloc(Model* m, int c) {
    Chunk* ch = &m->chunks[c];
    Carver k = {NULL, 0};
    WeightGradIn wg_sizing;
    for (int i = 0; i < ch->n_layers; i++) carve_weight_grad_in(m, &wg_sizing, &k);
    ch->wg.bytes = k.off;
    char* wg_mem = (char*)dev_alloc(ch->wg.bytes * ch->wg.n);
    for (int j = 0; j < ch->wg.n; j++) {
        k = (Carver){wg_mem + ch->wg.bytes * j, 0};
        for (int i = 0; i < ch->n_layers; i++) carve_weight_grad_in(m, &ch->wg_sets[(size_t)j * ch->n_layers + i], &k);
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

static float* f32_alloc(Model* m, size_t n) { return (float*)dev_alloc(sizeof(float) * n); }
// AdamW's state on the device, or pinned on the host (--offload optimizer: backend/gpu/offload_gpu.h).
static float* opt_state_alloc(Model* m, size_t n, const char* what) {
    if (!(m->c.offload & OFFLOAD_OPTIMIZER)) return f32_alloc(m, n);
    return (float*)host_pinned(sizeof(float) * n, "--offload optimizer");
}
// The host copy of the fp32 weights; under master_on_host (--offload optimizer, zero 0/1/2) it is
// the master itself, pinned, which the weights' views point at (offload_weights_init). Down and up
// (--zero 3: only this replica's shard; no whole copy on the device) with the bf16 copy remade.
static float* params_host_take(Model* m) {
    if (m->be.h_params) return m->be.h_params;
    m->be.h_params = m->c.offload & OFFLOAD_OPTIMIZER
                         ? (float*)host_pinned(sizeof(float) * m->P.n_padded, "--offload optimizer")
                         : (float*)xcalloc(m->P.n_padded, sizeof(float));
    if (master_on_host(m)) offload_weights_init(m);
    return m->be.h_params;
}
static void params_host_give(Model* m, float* host) {}
static void params_down(Model* m, float* host) {
    if (master_on_host(m)) return offload_download(m);
    if (m->param_shard) d2h(host + m->opt_lo, m->param_shard, sizeof(float) * (m->opt_hi - m->opt_lo), m->be.stream);
    else d2h(host, m->params, sizeof(float) * m->P.n_padded, m->be.stream);
}
static void params_up(Model* m, const float* host) {
    if (master_on_host(m)) return offload_upload(m);
    if (m->param_shard) {
        h2d(m->param_shard, host + m->opt_lo, sizeof(float) * (m->opt_hi - m->opt_lo), m->be.stream);
        return;
    }
    h2d(m->params, host, sizeof(float) * m->P.n_padded, m->be.stream);
    f32_to_bf16_gpu(m->be.params_bf16, m->params, m->P.n_padded, m->be.stream);
}
// AdamW's state: a host copy of it (--offload optimizer: the state itself, already there).
static float* opt_state_host_take(Model* m, float* state, int fetch) {
    if (m->c.offload & OFFLOAD_OPTIMIZER) return state;
    size_t n = m->opt_hi - m->opt_lo;
    float* host = (float*)xcalloc(n ? n : 1, sizeof(float));
    if (fetch) d2h(host, state, sizeof(float) * n, m->be.stream);
    return host;
}
static void opt_state_host_give(Model* m, float* host, float* state, int store) {
    if (host == state) return;
    if (store) h2d(state, host, sizeof(float) * (m->opt_hi - m->opt_lo), m->be.stream);
    free(host);
}
static bf16* act_alloc(Model* m, size_t n) { return (bf16*)dev_alloc(sizeof(bf16) * n); }

#endif
