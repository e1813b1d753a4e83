// model_runtime.h: the rank's orchestration, written once for both builds: chunks, slots,
// the schedule executor, gradient reduction, the step, evaluation, sampling and the
// training loop. train_gpt.c (CPU, fp32) and train_gpt.cu (GPU, bf16) include it after
// model.h (the model's types and math) and their operations; everything here reads the
// same on both. Besides model.h's contract, a build supplies the small primitives declared
// below (its own memory and communication: host memcpy and MPI on the CPU, CUDA copies and
// NCCL on the GPU).
#pragma once

// Memory: fp32 gradient/parameter buffers where this build keeps them.
static void f32_copy(Model* m, float* dst, const float* src, size_t n);
static void f32_zero(Model* m, float* p, size_t n);
static void f32_add(Model* m, float* dst, const float* src, size_t n);  // dst += src
// The dp all-reduce of a gradient range that may run beside the rest of the backward (the
// GPU build: on NCCL's own stream), and the point after which all of them are done.
static void grad_allreduce_dp_async(Model* m, float* buf, size_t n);
static void grad_allreduce_dp_join(Model* m);
static void grad_reduce_scatter(Model* m, Group g, const float* send, float* recv, size_t n_per_rank);
static void param_allgather(Model* m, Group g, const float* send, float* recv, size_t n_per_rank);
// Pipeline p2p of n act_t: a send from slot s (dir 0 forward, 1 backward) may still read
// src until pp_send_wait(m, s, dir), after which the slot's buffers may be written again; a
// receive returns with the data in dst.
static void pp_send(Model* m, Slot* s, int dir, const act_t* src, size_t n, int peer, int tag);
static void pp_send_wait(Model* m, Slot* s, int dir);
static void pp_recv(Model* m, int dir, act_t* dst, size_t n, int peer, int tag);
// Tokens: this dp rank's part of global batch `index` where the kernels read it (and the
// step's loss sum restarted); those arrays; one sampling window (T tokens) put there.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index);
static const int* batch_inputs(Model* m);
static const int* batch_targets(Model* m);
static const int* window_tokens(Model* m, const int* window, int T);
static void loss_fetch(Model* m);  // m->loss_sum holds this step's sum of token losses after it
// The optimizer: sum of squares of the k-th owned range of the gradient, added into *ss by
// sumsq_finish(m, k_total, ss) at the latest; AdamW on the range [a, b) of the local buffer
// (grad: the optimizer range's gradient); after the ZeRO all-gather of the fp32 weights.
static void sumsq_range(Model* m, int k, const float* x, size_t n, double* ss);
static void sumsq_finish(Model* m, int n_ranges, double* ss);
static void adamw_range(Model* m, size_t a, size_t b, const float* grad, int decay, float lr, float grad_scale, int t);
static void params_gathered(Model* m);
// The last chunk's logits of one row (lnf_row, C act_t) over the padded vocabulary, fp32 on
// the host on every tp rank.
static void row_logits(Model* m, const act_t* lnf_row, float* row);
// Wait for the queued device work (a no-op on the CPU).
static void device_sync(Model* m);
static void save_checkpoint(Model* m, int step);

// ----------------------------------------------------------------------------
// The shapes of this rank's part of the model, from the config and the layout (model_init
// calls it after layout_init).

static void model_shapes(Model* m) {
    const ModelConfig* c = &m->c;
    m->B = c->micro_batch, m->T = c->seq_len, m->C = c->d_model, m->hd = c->d_model / c->n_head;
    m->Hl = c->n_head / c->tp, m->KVl = c->n_kv_head / c->tp;
    m->qkv_dim = (m->Hl + 2 * m->KVl) * m->hd;
    m->Fl = c->d_ff / c->tp;
    m->fc_dim = c->arch == ARCH_GPT2 ? m->Fl : 2 * m->Fl;
    m->Vl = c->vocab_padded / c->tp, m->v0 = m->L.tp_rank * m->Vl;
    m->n_micro = c->global_batch / (c->dp * c->micro_batch);
}

// The first part of model_init: the flags, the grid and this rank's shapes and parameter layout.
static void model_init_layout(Model* m, Args* a, Metrics* met) {
    memset(m, 0, sizeof(*m));
    m->args = a;
    m->c = a->cfg;
    m->met = met;
    ModelConfig* c = &m->c;
    layout_init(&m->L, c->dp, c->tp, c->pp, c->vpp);
    model_shapes(m);
    param_layout_build(&m->P, c, c->tp, m->L.tp_rank, c->pp, c->vpp, m->L.stage, c->dp);
    m->defer_weight = a->weight_pass_deferred;
}

// The fp32 state where the build keeps it (f32_alloc): parameters and gradients, one buffer
// each with named views into them, initialized (params_initialized: the build puts
// init_params' weights where its kernels read them); the optimizer state over the whole
// local buffer, or this rank's 1/dp shard with ZeRO.
static float* f32_alloc(Model* m, size_t n);  // zeroed
static void params_init(Model* m);
static void model_init_params(Model* m) {
    const ModelConfig* c = &m->c;
    m->params = f32_alloc(m, m->P.n_padded);
    m->grads = f32_alloc(m, m->P.n_padded);
    m->wl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    m->gl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    bind_weights(&m->P, c, m->params, &m->w, m->wl);
    bind_weights(&m->P, c, m->grads, &m->g, m->gl);
    params_init(m);
    size_t S = shard_floats(&m->P, c->dp);
    optimizer_range(&m->P, c, m->L.dp_rank, &m->opt_lo, &m->opt_hi);
    m->m_state = f32_alloc(m, m->opt_hi - m->opt_lo);
    m->v_state = f32_alloc(m, m->opt_hi - m->opt_lo);
    if (c->zero) m->grad_shard = f32_alloc(m, S);
    if (c->zero == 2) m->shard_tmp = f32_alloc(m, S);
    if (c->zero == 2 && m->L.in_embed && c->arch == ARCH_GPT2) m->wte_acc = f32_alloc(m, (size_t)m->Vl * m->C);
    if (c->sp) m->sp_buf = f32_alloc(m, m->P.n_local);
}

// ----------------------------------------------------------------------------
// A chunk of layers for one micro-batch.

// The local chunks: their layers, and as many activation slots as the schedule ever has
// in flight on each, empty (mb -1, no sends pending, the layer-input array allocated);
// the build then gives the slots their buffers.
static void chunks_init(Model* m) {
    m->chunks = (Chunk*)xcalloc(m->L.vpp, sizeof(Chunk));
    m->slot_of = (int*)xmalloc(sizeof(int) * m->L.vpp * m->n_micro);
    for (int i = 0; i < m->L.vpp * m->n_micro; i++) m->slot_of[i] = -1;
    for (int c = 0; c < m->L.vpp; c++) {
        Chunk* ch = &m->chunks[c];
        int g = c * m->L.pp + m->L.stage;
        ch->layer0 = m->P.chunk_layer0[g];
        ch->n_layers = m->P.chunk_layer0[g + 1] - ch->layer0;
        ch->n_slots = chunk_in_flight(m->ops, m->n_ops, c);
        ch->slots = (Slot*)xcalloc(ch->n_slots, sizeof(Slot));
        for (int si = 0; si < ch->n_slots; si++) {
            Slot* s = &ch->slots[si];
            s->mb = -1;
            s->sends.req[0] = s->sends.req[1] = MPI_REQUEST_NULL;
            s->x = (act_t**)xcalloc(ch->n_layers + 1, sizeof(act_t*));
            s->acts = (LayerActs*)xcalloc(ch->n_layers, sizeof(LayerActs));
            if (m->defer_weight) s->wgin = (WeightGradIn*)xcalloc(ch->n_layers, sizeof(WeightGradIn));
        }
    }
}

// The stage's op list (schedule.h), then the build's activation slots sized by it, and
// the token buffers of one step.
static void alloc_activations(Model* m);
static void model_init_schedule(Model* m) {
    m->ops = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m->n_micro, m->c.vpp));
    m->n_ops = schedule_build(m->c.schedule, m->L.stage, m->c.pp, m->c.vpp, m->n_micro, m->ops);
    alloc_activations(m);
    m->inputs = (int*)xmalloc(sizeof(int) * m->n_micro * m->B * m->T);
    m->targets = (int*)xmalloc(sizeof(int) * m->n_micro * m->B * m->T);
}

static int is_first_chunk(const Model* m, int chunk) { return chunk * m->L.pp + m->L.stage == 0; }
static int is_last_chunk(const Model* m, int chunk) { return chunk * m->L.pp + m->L.stage == m->L.pp * m->L.vpp - 1; }

static LayerActs* acts_of(Model* m, Slot* s, int i) { return m->c.recompute == RECOMPUTE_FULL ? &m->scratch : &s->acts[i]; }

static void chunk_forward(Model* m, int chunk, Slot* s, const int* tokens, const int* targets, int B, float dloss_scale) {
    Chunk* ch = &m->chunks[chunk];
    if (is_first_chunk(m, chunk)) embed_forward(m, s->x[0], tokens, B);
    for (int i = 0; i < ch->n_layers; i++) layer_forward(m, ch->layer0 + i, acts_of(m, s, i), s->x[i], s->x[i + 1], B);
    if (is_last_chunk(m, chunk)) head_forward(m, s, s->x[ch->n_layers], targets, B, dloss_scale);
}

static void layer_grads_final(Model* m, int layer);

// grads_final: the step's last backward through this chunk, after which each layer's
// gradient is complete on this rank as soon as its weight pass is done. With deferred
// weight passes (--weight-pass deferred) all the chunk's input passes run first (the chunk's
// input gradient is ready for the previous stage sooner), then its weight passes.
static void chunk_backward(Model* m, int chunk, Slot* s, const int* tokens, int B, int grads_final) {
    Chunk* ch = &m->chunks[chunk];
    size_t n = (size_t)row_count(m, B) * m->C;
    act_t *d = m->dres[0], *dnext = m->dres[1];
    if (is_last_chunk(m, chunk)) head_backward(m, s, s->x[ch->n_layers], d, B);
    else act_copy(m, d, s->dout, n);
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        LayerActs* a = acts_of(m, s, i);
        // full recomputation: only the layer input was kept; run the layer again (its tp
        // communication included) to rebuild its activations
        if (m->c.recompute == RECOMPUTE_FULL) layer_forward(m, ch->layer0 + i, a, s->x[i], m->x_scratch, B);
        WeightGradIn* wg = m->defer_weight ? &s->wgin[i] : &m->wgin;
        layer_backward_input(m, ch->layer0 + i, a, wg, s->x[i], d, dnext, B);
        if (!m->defer_weight) {
            layer_backward_weight(m, ch->layer0 + i, a, wg, B);
            if (grads_final) layer_grads_final(m, ch->layer0 + i);
        }
        act_t* t = d; d = dnext; dnext = t;
    }
    if (is_first_chunk(m, chunk)) embed_backward(m, d, tokens, B);
    else act_copy(m, s->dinp, d, n);
    for (int i = ch->n_layers - 1; i >= 0 && m->defer_weight; i--) {
        layer_backward_weight(m, ch->layer0 + i, acts_of(m, s, i), &s->wgin[i], B);
        if (grads_final) layer_grads_final(m, ch->layer0 + i);
    }
}

// ----------------------------------------------------------------------------
// Activation slots: a (chunk, micro-batch) takes a slot at its first op and gives it
// back after its last; the schedule bounds how many are live (1F1B: <= pp).

static Slot* slot_get(Model* m, int chunk, int mb) {
    int* idx = &m->slot_of[chunk * m->n_micro + mb];
    Chunk* ch = &m->chunks[chunk];
    if (*idx >= 0) return &ch->slots[*idx];
    for (int i = 0; i < ch->n_slots; i++) {
        Slot* s = &ch->slots[i];
        if (s->mb >= 0) continue;
        pp_send_wait(m, s, 0);  // its last sends must be done before the buffers (or host copies) are reused
        pp_send_wait(m, s, 1);
        s->mb = mb;
        *idx = i;
        m->slots_live_bytes += ch->slot_bytes;
        if (m->slots_live_bytes > m->slots_peak_bytes) m->slots_peak_bytes = m->slots_live_bytes;
        return s;
    }
    fail("internal: chunk %d has no free activation slot for micro-batch %d", chunk, mb);
    return NULL;
}
static void slot_put(Model* m, int chunk, Slot* s) {
    m->slot_of[chunk * m->n_micro + s->mb] = -1;
    s->mb = -1;
    m->slots_live_bytes -= m->chunks[chunk].slot_bytes;
}

static void zero2_reduce_gradients(Model* m);

// Whether op k is the list's last backward of its chunk.
static int last_backward_of_chunk(const PipeOp* ops, int n_ops, int k) {
    for (int j = k + 1; j < n_ops; j++)
        if (ops[j].kind == OP_BWD && ops[j].chunk == ops[k].chunk) return 0;
    return 1;
}

// Execute this stage's op list. train: forward with loss gradient, then backward;
// otherwise forward only (evaluation) with a list built by forward_ops().
static void run_schedule(Model* m, const PipeOp* ops, int n_ops, int train, float dloss_scale) {
    int pp = m->L.pp, stage = m->L.stage, B = m->B, T = m->T;
    size_t n = (size_t)row_count(m, B) * m->C;
    for (int k = 0; k < n_ops; k++) {
        PipeOp op = ops[k];
        int g = op.chunk * pp + stage;
        Slot* s = slot_get(m, op.chunk, op.mb);
        const int* tokens = batch_inputs(m) + (size_t)op.mb * B * T;
        const int* targets = batch_targets(m) + (size_t)op.mb * B * T;
        double t0 = now_s();
        switch (op.kind) {
        case OP_RECV_FWD:  // comm: pp recv of the previous chunk's output
            pp_recv(m, 0, s->x[0], n, (g - 1) % pp, p2p_tag(m->L.pp, m->L.vpp, 0, op.mb, g - 1));
            break;
        case OP_FWD:
            chunk_forward(m, op.chunk, s, tokens, targets, B, train ? dloss_scale : 0.0f);
            if (!train && is_last_chunk(m, op.chunk)) slot_put(m, op.chunk, s);
            break;
        case OP_SEND_FWD:  // comm: pp send to the next chunk
            pp_send(m, s, 0, s->x[m->chunks[op.chunk].n_layers], n, (g + 1) % pp, p2p_tag(m->L.pp, m->L.vpp, 0, op.mb, g));
            if (!train) slot_put(m, op.chunk, s);
            break;
        case OP_RECV_BWD:  // comm: pp recv of the gradient from the next chunk
            pp_recv(m, 1, s->dout, n, (g + 1) % pp, p2p_tag(m->L.pp, m->L.vpp, 1, op.mb, g + 1));
            break;
        case OP_BWD:
            chunk_backward(m, op.chunk, s, tokens, B, last_backward_of_chunk(ops, n_ops, k));
            if (g == 0) slot_put(m, op.chunk, s);
            if (m->c.zero == 2 && op.chunk == 0) zero2_reduce_gradients(m);  // this micro-batch is done here
            break;
        case OP_SEND_BWD:  // comm: pp send of the input gradient to the previous chunk
            pp_send(m, s, 1, s->dinp, n, (g - 1) % pp, p2p_tag(m->L.pp, m->L.vpp, 1, op.mb, g));
            slot_put(m, op.chunk, s);
            break;
        }
        // Kernels may run asynchronously (GPU): wait for them so the op's time (metrics,
        // --trace, the measured bubble) is device time. Microseconds against a chunk's milliseconds.
        if (op.kind == OP_FWD || op.kind == OP_BWD) device_sync(m);
        metrics_op(m->met, op.kind, op.mb, g, t0, now_s());
    }
    for (int c = 0; c < m->L.vpp; c++)  // all sends of the step complete before it ends
        for (int i = 0; i < m->chunks[c].n_slots; i++) {
            pp_send_wait(m, &m->chunks[c].slots[i], 0);
            pp_send_wait(m, &m->chunks[c].slots[i], 1);
        }
}

// ----------------------------------------------------------------------------
// Gradient reduction, norm, clipping and the AdamW update, on fp32 buffers.

// The tied embedding: first and last stage each hold wte; their gradients are summed so
// both copies take the same update (Megatron's embedding group).
static void embed_group_sync(Model* m, float* wte_grad) {
    if (m->L.in_embed && m->c.arch == ARCH_GPT2)
        f32_allreduce_sum(m, GROUP_EMBED, wte_grad, (size_t)m->Vl * m->C);  // comm: embed all-reduce
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

// ZeRO-2: after each micro-batch, reduce-scatter the gradient into this rank's shard and
// clear the full buffer (it only ever holds one micro-batch's worth). The tied embedding
// copy is kept aside in wte_acc and reduced once at the end of the step.
static void zero2_reduce_gradients(Model* m) {
    size_t S = shard_floats(&m->P, m->L.dp), wte_n = (size_t)m->Vl * m->C;
    if (m->wte_acc) {
        f32_add(m, m->wte_acc, m->g.wte, wte_n);
        f32_zero(m, m->g.wte, wte_n);
    }
    grad_reduce_scatter(m, GROUP_DP, m->grads, m->shard_tmp, S);  // comm: dp reduce-scatter (zero 2)
    f32_add(m, m->grad_shard, m->shard_tmp, S);
    f32_zero(m, m->grads, m->P.n_padded);
}

// Data-parallel reduction overlapped with the backward (ZeRO 0; PyTorch DDP's buckets, a
// layer each): once the step's last micro-batch has gone back through a layer, that
// layer's gradient is final on this rank, and its dp all-reduce starts while the layers
// below are still in their backward. A layer's tensors are contiguous in the buffer.
static void layer_grads_final(Model* m, int layer) {
    if (m->c.zero != 0 || m->L.dp == 1) return;
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        if (t->layer != layer) continue;
        if (t->offset < lo) lo = t->offset;
        if (t->offset + t->size > hi) hi = t->offset + t->size;
    }
    if (lo < hi) grad_allreduce_dp_async(m, m->grads + lo, hi - lo);  // comm: dp all-reduce of one layer (overlapped)
}

// After the schedule: reduce gradients over the groups that share parameters. Returns the
// gradient the optimizer reads for its range [opt_lo, opt_hi).
static float* reduce_gradients(Model* m) {
    size_t S = shard_floats(&m->P, m->L.dp);
    if (m->c.zero == 0) {
        embed_group_sync(m, m->g.wte);
        // comm: dp all-reduce of what layer_grads_final left: the runs of model-level tensors
        // (embeddings at the buffer's start; final norm, head and the tied copy at its end),
        // back to front, GRAD_BUCKET_FLOATS a call
        const Tensor* t = m->P.t;
        for (int i = m->P.n - 1; i >= 0; i--) {
            if (t[i].layer >= 0) continue;
            int j = i;
            while (j > 0 && t[j - 1].layer < 0) j--;
            for (size_t hi = t[i].offset + t[i].size; hi > t[j].offset;) {
                size_t lo = hi - t[j].offset > GRAD_BUCKET_FLOATS ? hi - GRAD_BUCKET_FLOATS : t[j].offset;
                grad_allreduce_dp_async(m, m->grads + lo, hi - lo);
                hi = lo;
            }
            i = j;
        }
        grad_allreduce_dp_join(m);
        sp_partial_sync(m, m->grads, 0, m->P.n_local);
        return m->grads;
    }
    if (m->c.zero == 1) {
        embed_group_sync(m, m->g.wte);
        grad_reduce_scatter(m, GROUP_DP, m->grads, m->grad_shard, S);  // comm: dp reduce-scatter (zero 1)
    } else if (m->wte_acc) {
        // the tied embedding gradient (kept aside during the step): sum the two copies and the
        // dp replicas, then add the part of it inside this rank's shard
        size_t wte_n = (size_t)m->Vl * m->C, wte_off = (size_t)(m->g.wte - m->grads);
        embed_group_sync(m, m->wte_acc);
        f32_allreduce_sum(m, GROUP_DP, m->wte_acc, wte_n);  // comm: dp all-reduce of the tied embedding
        size_t lo = m->opt_lo > wte_off ? m->opt_lo : wte_off;
        size_t hi = m->opt_hi < wte_off + wte_n ? m->opt_hi : wte_off + wte_n;
        if (lo < hi) f32_add(m, m->grad_shard + (lo - m->opt_lo), m->wte_acc + (lo - wte_off), hi - lo);
    }
    sp_partial_sync(m, m->grad_shard, m->opt_lo, S);
    return m->grad_shard;
}

// Global L2 norm of the gradient over the whole model: each element counted once (tp
// replicas and the tied copy only by their owner, dp replicas once without ZeRO).
static double grad_norm(Model* m, const float* grad) {
    double ss = 0;
    int count_dp = m->c.zero > 0 || m->L.dp_rank == 0, k = 0;
    for (int i = 0; i < m->P.n && count_dp; i++) {
        const Tensor* t = &m->P.t[i];
        size_t a, b;
        if (!t->owner || !clip_range(t, m->opt_lo, m->opt_hi, &a, &b)) continue;
        sumsq_range(m, k++, grad + (a - m->opt_lo), b - a, &ss);
    }
    sumsq_finish(m, k, &ss);
    comm_allreduce_sum_f64(&m->L.world_c, &ss, 1);  // comm: world all-reduce of the squared norm
    return sqrt(ss);
}

// AdamW on this rank's range. With ZeRO the updated fp32 shards are all-gathered (fp32, so
// every dp rank holds the exact master weights a checkpoint writes).
static void optimizer_step(Model* m, const float* grad, float lr, float grad_scale, int t) {
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* tn = &m->P.t[i];
        size_t a, b;
        if (!clip_range(tn, m->opt_lo, m->opt_hi, &a, &b)) continue;
        adamw_range(m, a, b, grad, tn->decay, lr, grad_scale, t);
    }
    if (m->c.zero > 0) {  // comm: dp all-gather of the updated parameter shards
        param_allgather(m, GROUP_DP, m->params + m->opt_lo, m->params, shard_floats(&m->P, m->L.dp));
        params_gathered(m);
    }
}

// ----------------------------------------------------------------------------
// A training step and an evaluation.

// Mean loss over the global batch (last stage, tp rank 0 of each dp replica hold it).
static double reduce_loss(Model* m, double n_tokens) {
    loss_fetch(m);
    double l = (m->L.stage == m->L.pp - 1 && m->L.tp_rank == 0) ? m->loss_sum : 0.0;
    comm_allreduce_sum_f64(&m->L.world_c, &l, 1);  // comm: world all-reduce of the loss
    return l / n_tokens;
}

typedef struct { double loss, grad_norm, sched_s; float lr; int skipped; } StepResult;

static StepResult train_step(Model* m, const TokenStream* train, int step) {
    StepResult r = {0, 0, 0, 0, 0};
    double n_tokens = (double)m->c.global_batch * m->T;
    model_load_batch(m, train, (size_t)step);
    f32_zero(m, m->grads, m->P.n_padded);
    if (m->grad_shard) f32_zero(m, m->grad_shard, shard_floats(&m->P, m->L.dp));
    if (m->wte_acc) f32_zero(m, m->wte_acc, (size_t)m->Vl * m->C);
    metrics_phase(m->met, "schedule");
    double t0 = now_s();
    run_schedule(m, m->ops, m->n_ops, 1, (float)(1.0 / n_tokens));
    r.sched_s = now_s() - t0;
    metrics_phase(m->met, "grad_sync");
    float* grad = reduce_gradients(m);
    r.loss = reduce_loss(m, n_tokens);
    r.grad_norm = grad_norm(m, grad);
    r.lr = lr_at(&m->c, step);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        if (!m->args->on_nan_skip) fail("step %d: loss %g, gradient norm %g is not finite (--on-nan stop)", step + 1, r.loss, r.grad_norm);
        r.skipped = 1;
        return r;
    }
    float scale = (m->c.grad_clip > 0 && r.grad_norm > m->c.grad_clip) ? (float)(m->c.grad_clip / r.grad_norm) : 1.0f;
    metrics_phase(m->met, "optimizer");
    optimizer_step(m, grad, r.lr, scale, step + 1);
    device_sync(m);  // the step's time includes the update
    return r;
}

static double evaluate(Model* m, const TokenStream* val, int n_batches) {
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * 3 * m->n_micro * m->L.vpp);
    int n_ops = forward_ops(m->L.stage, m->L.pp, m->L.vpp, m->n_micro, ops);
    double total = 0;
    for (int b = 0; b < n_batches; b++) {
        model_load_batch(m, val, (size_t)b);
        run_schedule(m, ops, n_ops, 0, 0.0f);
        total += reduce_loss(m, (double)m->c.global_batch * m->T);
    }
    free(ops);
    return total / n_batches;
}

// ----------------------------------------------------------------------------
// Sampling: one sequence (batch 1) through the pipeline per generated token. The last
// stage gathers the one row of logits it needs over tp and draws the token on the host;
// every rank then learns it by broadcast.

// Softmax over row[0, vocab) in place, then the inverse-CDF draw (one arithmetic for both
// builds, so they draw alike from close logits).
static int sample_draw(float* row, int vocab, Rng* rng) {
    float maxv = -FLT_MAX, sum = 0;
    for (int v = 0; v < vocab; v++) maxv = row[v] > maxv ? row[v] : maxv;
    for (int v = 0; v < vocab; v++) sum += (row[v] = expf(row[v] - maxv));
    float u = rng_uniform(rng) * sum, acc = 0;
    for (int v = 0; v < vocab; v++)
        if ((acc += row[v]) > u) return v;
    return vocab - 1;
}

// The sample is decoded into bytes and printed once, escaped (escape_text): a piece may hold
// any bytes, and a character may span tokens.
static void sample_text(Model* m, const Tokenizer* tk, int len, uint64_t seed, FILE* out) {
    int T = m->T, B = 1, pp = m->L.pp, last_rank = layout_rank_of(&m->L, 0, pp - 1, 0);
    int* ctx = (int*)xcalloc(T, sizeof(int));
    int* window = (int*)xcalloc(T, sizeof(int));
    float* row = (float*)xmalloc(sizeof(float) * m->c.vocab_padded);
    Rng rng;
    rng_seed(&rng, seed);
    Bytes text = {NULL, 0, 0};
    int n = 0;
    ctx[n++] = m->c.vocab > EOT_TOKEN ? EOT_TOKEN : 0;  // start from <|endoftext|> (or byte 0)
    size_t nrow = (size_t)row_count(m, B) * m->C;
    for (int step = 0; step < len; step++) {
        int start = n > T ? n - T : 0, cur = n - start;  // window of the last T tokens
        memset(window, 0, sizeof(int) * T);
        for (int i = 0; i < cur; i++) window[i] = ctx[(start + i) % T];
        const int* tokens = window_tokens(m, window, T);
        int next = 0;
        for (int c = 0; c < m->L.vpp; c++) {
            int g = c * pp + m->L.stage;
            Slot* s = slot_get(m, c, 0);
            if (g > 0) pp_recv(m, 0, s->x[0], nrow, (g - 1) % pp, p2p_tag(m->L.pp, m->L.vpp, 0, 0, g - 1));  // comm: pp recv
            Chunk* ch = &m->chunks[c];
            if (g == 0) embed_forward(m, s->x[0], tokens, B);
            for (int i = 0; i < ch->n_layers; i++) layer_forward(m, ch->layer0 + i, acts_of(m, s, i), s->x[i], s->x[i + 1], B);
            if (g < pp * m->L.vpp - 1) {
                // comm: pp send; not waited for here: with pp 1 and vpp > 1 the receiver is this
                // rank's next chunk, so the send completes at that receive (slot_get waits for it
                // before the slot is used again)
                pp_send(m, s, 0, s->x[ch->n_layers], nrow, (g + 1) % pp, p2p_tag(m->L.pp, m->L.vpp, 0, 0, g));
            } else {
                // logits of position cur-1 only: final norm of all rows, then one matmul row
                act_t* x = s->x[ch->n_layers];
                norm_forward(m, s->lnf, s->lnf_mean, s->lnf_rstd, x, m->w.lnfw, m->w.lnfb, B);
                row_logits(m, s->lnf + (size_t)(cur - 1) * m->C, row);
                next = sample_draw(row, m->c.vocab, &rng);
            }
            slot_put(m, c, s);
        }
        comm_broadcast(&m->L.world_c, &next, sizeof(int), last_rank);  // comm: world broadcast of the token
        ctx[n % T] = next;  // ring buffer of the last T tokens
        n++;
        if (m->L.rank == 0) tokenizer_decode(tk, next, &text);
    }
    if (m->L.rank == 0) {
        char* shown = (char*)xmalloc(4 * text.n + 1);
        escape_text(shown, 4 * text.n + 1, text.bytes, text.n, 1);
        fprintf(out, "%s\n", shown);
        fflush(out);
        free(shown);
    }
    for (int c = 0; c < m->L.vpp; c++)  // the last token's sends
        for (int i = 0; i < m->chunks[c].n_slots; i++) pp_send_wait(m, &m->chunks[c].slots[i], 0);
    free(ctx); free(window); free(row); free(text.bytes);
}

// ----------------------------------------------------------------------------
// main()'s training loop: steps, evaluation, samples and checkpoints, until --steps or a
// stop signal. Returns 1 when stopped by a signal (main then exits 130), else 0.

static int train_loop(Model* m, Run* run, Metrics* met, int start_step) {
    Args* a = &run->args;
    ModelConfig* c = &a->cfg;
    for (int step = start_step; step < c->steps; step++) {
        watchdog_kick();
        metrics_step_begin(met, step);
        StepResult r = train_step(m, &run->train, step);
        metrics_step_end(met, &m->L, c, step, start_step, m->n_micro, r.loss, r.lr, r.grad_norm, r.skipped, r.sched_s);
        if (a->eval_every && ((step + 1) % a->eval_every == 0 || step + 1 == c->steps))
            metrics_eval(met, step, evaluate(m, &run->val, a->val_batches));
        if (a->sample_every && (step + 1) % a->sample_every == 0) sample_text(m, &run->tk, a->sample_len, c->seed + step, stdout);
        int stop = ckpt_stop_requested(&m->L.world_c);
        if (a->ckpt_dir && ((a->ckpt_every && (step + 1) % a->ckpt_every == 0) || step + 1 == c->steps || stop)) {
            // a skipped step saves nothing, so a run that skips on and on never rotates the
            // last checkpoint of an applied update away
            if (!r.skipped) save_checkpoint(m, step + 1);
            else if (run->rank == 0) printf("checkpoint: none at step %d, which was skipped (non-finite); the newest on disk is kept\n", step + 1);
        }
        if (stop) {
            if (run->rank == 0) fprintf(stderr, "stopped by signal after step %d\n", step + 1);
            return 1;
        }
    }
    if (!a->sample_every && a->sample_len) {
        if (run->rank == 0) printf("sample:\n");
        sample_text(m, &run->tk, a->sample_len, c->seed, stdout);
    }
    return 0;
}
