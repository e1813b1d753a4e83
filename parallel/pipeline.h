// parallel/pipeline.h: pipeline parallelism at run time. The schedules themselves are pure
// functions in parallel/schedule.h (shared with the planner, which simulates them); here a
// stage executes its op list: activation slots per (chunk, micro-batch) sized by the list,
// a chunk's forward and backward through its layers, and the sends and receives between
// stages (each build's pp_send / pp_recv).
#pragma once

// What a build supplies. Pipeline p2p of n act_t: a send from slot s (dir 0 forward, 1 backward) may still read
// src until pp_send_wait(m, s, dir), after which the slot's buffers may be written again; a
// receive returns with the data in dst.
static void pp_send(Model* m, Slot* s, int dir, const act_t* src, size_t n, int peer, int tag);
static void pp_send_wait(Model* m, Slot* s, int dir);
static void pp_recv(Model* m, int dir, act_t* dst, size_t n, int peer, int tag);

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
        ch->n_slots = schedule_max_in_flight(m->ops, m->n_ops, c);
        if (ch->n_slots < 1) ch->n_slots = 1;  // sampling runs a micro-batch through every chunk
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

