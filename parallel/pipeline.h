// parallel/pipeline.h: pipeline parallelism at run time. The schedules themselves are pure
// functions in layout/schedule.h (shared with the planner, which simulates them); here a
// stage executes its op list: activation slots per (chunk, micro-batch) sized by the list,
// a chunk's forward and backward through its layers, and the sends and receives between
// stages (each build's pp_send / pp_recv).
// What a build supplies for it (pp_send, pp_send_wait, pp_recv, the activation buffers):
// backend/backend.h.
#ifndef PIPELINE_H
#define PIPELINE_H

#include "layout/activations.h"  // ActCounts, act_device_slots
#include "model/model.h"
#include "layer_parallel/context_parallel.h"  // cp_alloc
#include "parallel/data_parallel.h"  // dp_layer_begin, dp_layer_grads_begin, dp_layer_grads_done: the layer hooks

// ----------------------------------------------------------------------------
// A chunk of layers for one micro-batch (which chunks are this stage's: backend/state.h global_chunk,
// local_chunk).

// The local chunks: their layers, and as many activation slots as the schedule ever has
// in flight on each, empty (mb -1, no sends pending, the layer-input array allocated);
// the build then gives the slots their buffers.
static void chunks_init(Model* m) {
    m->chunks = (Chunk*)xcalloc(m->L.vpp, sizeof(Chunk));
    m->slot_of = (int*)xmalloc(sizeof(int) * m->L.vpp * m->n_micro);
    for (int i = 0; i < m->L.vpp * m->n_micro; i++) m->slot_of[i] = -1;
    for (int c = 0; c < m->L.vpp; c++) {
        Chunk* ch = &m->chunks[c];
        int g = chunk_global(m->L.sched, m->L.pp, m->L.stage, c);
        ch->layer0 = m->P.chunk_layer0[g];
        ch->n_layers = m->P.chunk_layer0[g + 1] - ch->layer0;
        // slots, W-input sets and heads as layout/activations.h counts them for the planner
        int slots = schedule_slots(m->L.sched, m->L.pp, m->L.vpp, m->n_micro, m->L.stage, c, m->lists, m->n_ops_of,
                                   m->slot_free_after + (size_t)c * m->n_micro);
        ActCounts k = act_chunk_counts(m->ops, m->n_ops, c, slots, is_last_chunk(m, c), m->defer_weight);
        ch->n_slots = k.slots;
        ch->slots = (Slot*)xcalloc(ch->n_slots, sizeof(Slot));
        ch->n_frames = act_device_slots(k.slots, &m->c);
        ch->frame_slot = (int*)xmalloc(sizeof(int) * ch->n_frames);
        for (int f = 0; f < ch->n_frames; f++) ch->frame_slot[f] = -1;
        for (int si = 0; si < ch->n_slots; si++) {
            Slot* s = &ch->slots[si];
            s->mb = -1;
            s->frame = -1;
            s->free_after = -1;
            s->sends.req[0] = s->sends.req[1] = MPI_REQUEST_NULL;
            s->x = (act_t**)xcalloc(ch->n_layers + 1, sizeof(act_t*));
            s->acts = (LayerActs*)xcalloc(ch->n_layers, sizeof(LayerActs));
        }
        ch->wg.n = k.wg_sets;
        ch->heads.n = k.heads;
        ch->wg.used = (char*)xcalloc(ch->wg.n + 1, 1);
        ch->wg_sets = (WeightGradIn*)xcalloc((size_t)ch->wg.n * ch->n_layers + 1, sizeof(WeightGradIn));
        ch->heads.used = (char*)xcalloc(ch->heads.n + 1, 1);
        ch->head_sets = (HeadActs*)xcalloc(ch->heads.n + 1, sizeof(HeadActs));
    }
}

// After the build has allocated chunk c's frames (ch->mem, slot_bytes each): every slot in its
// own frame for good, or with --offload activations the chunk's tier for all its slots.
static void chunk_frames_init(Model* m, int c) {
    Chunk* ch = &m->chunks[c];
    if (ch->n_frames < ch->n_slots) {
        ch->tier = act_tier_alloc(m, ch->slot_bytes * ch->n_slots);
        return;
    }
    for (int si = 0; si < ch->n_slots; si++) {
        slot_bind(m, c, &ch->slots[si], ch->mem + ch->slot_bytes * si);
        ch->frame_slot[si] = si, ch->slots[si].frame = si;
    }
}

// The stage's op list (schedule.h), then the build's activation slots sized by it, and
// the token buffers of one step. DualPipe-V's slots are sized from every stage's list
// (schedule_slots), which stay built until then.
// Every activation buffer: the build's scratch, context parallelism's, and each chunk's slots
// in their frames (or the tier) and its pools.
static void alloc_activations(Model* m) {
    act_scratch_alloc(m);
    cp_alloc(m);
    chunks_init(m);
    for (int c = 0; c < m->L.vpp; c++) {
        chunk_slots_alloc(m, c);
        chunk_frames_init(m, c);
        chunk_pools_alloc(m, c);
    }
}

static void model_init_schedule(Model* m) {
    int pp = m->c.pp, all = m->c.schedule == SCHED_DUALPIPEV;
    double* t_build = (double*)xmalloc(sizeof(double) * 3 * pp * m->c.vpp);
    chunk_op_flops(&m->c, pp, m->c.vpp, t_build);
    m->lists = (PipeOp**)xcalloc(pp, sizeof(PipeOp*));
    m->n_ops_of = (int*)xcalloc(pp, sizeof(int));
    for (int s = 0; s < pp; s++) {
        if (!all && s != m->L.stage) continue;
        m->lists[s] = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m->n_micro, m->c.vpp));
        m->n_ops_of[s] = schedule_build(m->c.schedule, s, pp, m->c.vpp, m->n_micro, t_build, m->lists[s]);
    }
    free(t_build);
    m->ops = m->lists[m->L.stage], m->n_ops = m->n_ops_of[m->L.stage];
    m->slot_free_after = (int*)xmalloc(sizeof(int) * m->c.vpp * m->n_micro);
    alloc_activations(m);
    for (int s = 0; s < pp; s++)
        if (s != m->L.stage) free(m->lists[s]), m->lists[s] = NULL;
    m->inputs = (int*)xmalloc(sizeof(int) * m->n_micro * m->B * m->T);
    m->targets = (int*)xmalloc(sizeof(int) * m->n_micro * m->B * m->T);
    docs_alloc(m);
}

// A free set of a pool (counted with the activations: the measured peak), and back.
static int pool_take(Model* m, Pool* p, const char* what) {
    for (int i = 0; i < p->n; i++)
        if (!p->used[i]) {
            p->used[i] = 1;
            m->slots_live_bytes += p->bytes;
            if (m->slots_live_bytes > m->slots_peak_bytes) m->slots_peak_bytes = m->slots_live_bytes;
            return i;
        }
    fail("internal: more %s at once than the schedule's %d", what, p->n);
    return -1;
}
static void pool_give(Model* m, Pool* p, int i) {
    p->used[i] = 0;
    m->slots_live_bytes -= p->bytes;
}
static void head_take(Model* m, int chunk, Slot* s) {
    Chunk* ch = &m->chunks[chunk];
    s->head = &ch->head_sets[pool_take(m, &ch->heads, "heads")];
}
static void head_give(Model* m, int chunk, Slot* s) {
    Chunk* ch = &m->chunks[chunk];
    pool_give(m, &ch->heads, (int)(s->head - ch->head_sets));
    s->head = NULL;
}

static LayerActs* acts_of(Model* m, Slot* s, int i) {
    return m->c.recompute == RECOMPUTE_FULL ? &m->scratch : &s->acts[i];
}

// Where the backward writes the gradient of layer i's output (layer i + 1's input gradient,
// or the head's): into layer i's weight-pass buffer when its deferred weight pass reads it
// there as it is (no --sp), so it needs no copy; else into the shared residual gradients,
// alternating (*k) so that a layer never writes the gradient it reads.
static act_t* layer_dout_buf(Model* m, Slot* s, int i, int* k) {
    if (m->defer_weight && !m->c.sp && i >= 0) return s->weight_grad_in[i].dy_mlp_buf;
    act_t* d = m->dres[*k];
    *k ^= 1;
    return d;
}

static void chunk_forward(Model* m, int chunk, Slot* s, const int* tokens, const int* targets, int B,
                          float dloss_scale) {
    Chunk* ch = &m->chunks[chunk];
    if (is_first_chunk(m, chunk)) embed_forward(m, s->x[0], tokens, B);
    for (int i = 0; i < ch->n_layers; i++) {
        dp_layer_begin(m, ch->layer0 + i, i + 1 < ch->n_layers ? ch->layer0 + i + 1 : -1);
        layer_forward(m, ch->layer0 + i, acts_of(m, s, i), s->x[i], s->x[i + 1], B);
    }
    if (is_last_chunk(m, chunk)) {
        head_take(m, chunk, s);
        if (m->sample) head_sample(m, s, s->x[ch->n_layers], B);
        else head_forward(m, s, s->x[ch->n_layers], targets, B, dloss_scale);
        if (dloss_scale <= 0) head_give(m, chunk, s);  // forward only: the losses are summed
    }
}

// The chunk's input pass (B): the gradient its input needs, left in dinp (s->dinp, or the
// previous chunk's dout when that chunk is on this stage too; for the first chunk, the
// embedding's gradient). With an immediate weight pass each layer's weight
// gradients follow its input gradient at once (grads_final: the step's last backward through
// this chunk, after which each layer's gradient is complete on this rank); deferred, they
// wait in the slot's WeightGradIn for chunk_backward_weight. last: the step's last backward
// through this chunk (the head's gradients are complete after it, whatever the weight pass).
static void chunk_backward_input(Model* m, int chunk, Slot* s, act_t* dinp, const int* tokens, int B,
                                 int grads_final, int last) {
    Chunk* ch = &m->chunks[chunk];
    if (m->defer_weight)
        s->weight_grad_in = &ch->wg_sets[(size_t)pool_take(m, &ch->wg, "weight passes owed") * ch->n_layers];
    const act_t* d = s->dout;  // the gradient of the output of the layer walked down to
    int k = 0;                 // the next of the two shared residual gradients to write
    if (is_last_chunk(m, chunk)) {
        act_t* dx = layer_dout_buf(m, s, ch->n_layers - 1, &k);
        head_backward(m, s, s->x[ch->n_layers], dx, B);
        head_give(m, chunk, s);
        if (last) head_grads_final(m);
        d = dx;
    }
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        LayerActs* a = acts_of(m, s, i);
        dp_layer_begin(m, ch->layer0 + i, i > 0 ? ch->layer0 + i - 1 : -1);
        // full recomputation: only the layer input was kept; run the layer again (its tp
        // communication included) to rebuild its activations
        if (m->c.recompute == RECOMPUTE_FULL) layer_forward(m, ch->layer0 + i, a, s->x[i], m->x_scratch, B);
        WeightGradIn* wg = m->defer_weight ? &s->weight_grad_in[i] : &m->weight_grad_in;
        if (!m->defer_weight) dp_layer_grads_begin(m, ch->layer0 + i);
        // the input gradient: the previous chunk's, or the layer below's dout
        act_t* dx = i == 0 && !is_first_chunk(m, chunk) ? dinp : layer_dout_buf(m, s, i - 1, &k);
        layer_backward_input(m, ch->layer0 + i, a, wg, s->x[i], d, dx, B);
        if (!m->defer_weight) {
            layer_backward_weight(m, ch->layer0 + i, a, wg, B);
            dp_layer_grads_done(m, ch->layer0 + i, grads_final);
        }
        d = dx;
    }
    if (is_first_chunk(m, chunk)) embed_backward(m, d, tokens, B);
    else if (d != dinp) act_copy(m, dinp, d, (size_t)row_count(m, B) * m->C);  // a chunk of no layers
}

// The chunk's weight pass (W), deferred: every layer's matmul weight and bias gradients.
static void chunk_backward_weight(Model* m, int chunk, Slot* s, int B, int grads_final) {
    Chunk* ch = &m->chunks[chunk];
    for (int i = ch->n_layers - 1; i >= 0; i--) {
        dp_layer_grads_begin(m, ch->layer0 + i);
        layer_backward_weight(m, ch->layer0 + i, acts_of(m, s, i), &s->weight_grad_in[i], B);
        dp_layer_grads_done(m, ch->layer0 + i, grads_final);
    }
    pool_give(m, &ch->wg, (int)((s->weight_grad_in - ch->wg_sets) / ch->n_layers));
    s->weight_grad_in = NULL;
}

// ----------------------------------------------------------------------------
// Activation slots: a (chunk, micro-batch) takes a slot at its first op and gives it
// back after its last; the schedule bounds how many are live (1F1B: <= pp).

static void slot_live_bytes(Model* m, long long delta) {
    m->slots_live_bytes += delta;
    if (m->slots_live_bytes > m->slots_peak_bytes) m->slots_peak_bytes = m->slots_live_bytes;
}

// --offload activations (backend/cpu/offload.h states the rule): a slot's buffers are carved in
// one of the chunk's frames while it is resident; offloaded, its bytes wait in the chunk's tier.
// A frame is rewritten while sends of the slot that left it may still be in flight: the build
// sends from a copy of its own under offload (pp_send), so no frame waits for a peer's receive
// (a wait there can close a cycle: stage s waiting for s+1 to receive a forward while s+1 waits
// for s to receive a backward).
// Slot si of chunk c into a free frame, its stored activations brought back (queued on the GPU).
static void slot_to_frame(Model* m, int c, int si) {
    Chunk* ch = &m->chunks[c];
    Slot* s = &ch->slots[si];
    if (s->frame >= 0) return;
    int f = 0;
    while (f < ch->n_frames && ch->frame_slot[f] >= 0) f++;
    if (f == ch->n_frames) fail("internal: chunk %d has no free activation frame", c);
    char* frame = ch->mem + ch->slot_bytes * f;
    slot_bind(m, c, s, frame);
    ch->frame_slot[f] = si, s->frame = f;
    if (s->stored) {
        act_tier_in(m, frame, ch->tier + ch->slot_bytes * si, ch->slot_bytes);  // comm: tier -> device
        s->stored = 0;
        slot_live_bytes(m, (long long)ch->slot_bytes);
    }
}
static void slot_leave_frame(Chunk* ch, Slot* s) {
    ch->frame_slot[s->frame] = -1;
    s->frame = -1;
}
// Slot si of chunk c out to the tier (its frame free once the copy is done: act_tier_wait).
static void slot_offload(Model* m, int c, int si) {
    Chunk* ch = &m->chunks[c];
    Slot* s = &ch->slots[si];
    // comm: device -> tier
    act_tier_out(m, ch->tier + ch->slot_bytes * si, ch->mem + ch->slot_bytes * s->frame, ch->slot_bytes);
    s->stored = 1;
    slot_leave_frame(ch, s);
    slot_live_bytes(m, -(long long)ch->slot_bytes);
}

// The slot of (chunk, mb), or a free one for it: one free after op m->op_at of the list
// running (schedule_slots: its sends received), else any (they all are).
static Slot* slot_get(Model* m, int chunk, int mb) {
    int* idx = &m->slot_of[chunk * m->n_micro + mb];
    Chunk* ch = &m->chunks[chunk];
    if (*idx >= 0) {
        slot_to_frame(m, chunk, *idx);
        return &ch->slots[*idx];
    }
    int pick = -1;
    for (int i = 0; i < ch->n_slots && pick < 0; i++)
        if (ch->slots[i].mb < 0 && ch->slots[i].free_after < m->op_at) pick = i;
    for (int i = pick < 0 ? 0 : pick; i < ch->n_slots; i++) {
        Slot* s = &ch->slots[i];
        if (s->mb >= 0) continue;
        pp_send_wait(m, s, 0);  // its last sends must be done before the buffers (or host copies) are reused
        pp_send_wait(m, s, 1);
        s->mb = mb;
        *idx = i;
        slot_to_frame(m, chunk, i);
        slot_live_bytes(m, (long long)ch->slot_bytes);
        return s;
    }
    fail("internal: chunk %d has no free activation slot for micro-batch %d", chunk, mb);
    return NULL;
}
static void slot_put(Model* m, int chunk, Slot* s) {
    Chunk* ch = &m->chunks[chunk];
    s->free_after = m->op_at < INT_MAX ? m->slot_free_after[chunk * m->n_micro + s->mb] : -1;
    m->slot_of[chunk * m->n_micro + s->mb] = -1;
    s->mb = -1;
    m->slots_live_bytes -= ch->slot_bytes;
    if (ch->n_frames < ch->n_slots) slot_leave_frame(ch, s);
}

// Whether op touches the activations of (chunk c, micro-batch mb): its own, or the previous
// chunk's on this stage that a forward copies from and a backward writes dout into.
static int op_touches(const Model* m, const PipeOp* op, int c, int mb) {
    if (op->mb != mb) return 0;
    if (op->chunk == c) return 1;
    return (op->kind == OP_FWD || op->kind == OP_BWD) && local_chunk(m, global_chunk(m, op->chunk) - 1) == c;
}
static int is_compute(int kind) { return kind == OP_FWD || kind == OP_BWD || kind == OP_W; }

// Before op k, with --offload activations: offload every resident slot that neither op k nor
// the next compute op on another (chunk, micro-batch) touches; bring op k's slots in and let
// the device wait for the copies; then start bringing in the next compute op's slots (the
// prefetch, one op ahead: on the GPU it overlaps op k). With one frame (--offload-frames 1)
// only op k's slots stay, and nothing is prefetched.
static void offload_prepare(Model* m, const PipeOp* ops, int n_ops, int k) {
    if (!(m->c.offload & OFFLOAD_ACTIVATIONS)) return;
    int next = k + 1, ahead = offload_frames_of(&m->c) > 1;  // a frame for the next op's: the prefetch
    while (next < n_ops && !(is_compute(ops[next].kind) && !op_touches(m, &ops[next], ops[k].chunk, ops[k].mb)))
        next++;
    const PipeOp* after = next < n_ops && ahead ? &ops[next] : NULL;
    for (int c = 0; c < m->L.vpp; c++)
        for (int si = 0; si < m->chunks[c].n_slots; si++) {
            Slot* s = &m->chunks[c].slots[si];
            if (s->frame >= 0 && m->chunks[c].n_frames < m->chunks[c].n_slots && !op_touches(m, &ops[k], c, s->mb) &&
                !(after && op_touches(m, after, c, s->mb)))
                slot_offload(m, c, si);
        }
    for (int pass = 0; pass < 2; pass++) {  // op k's slots, then the next compute op's
        const PipeOp* op = pass ? after : &ops[k];
        for (int c = 0; c < m->L.vpp && op; c++) {
            int si = m->slot_of[c * m->n_micro + op->mb];
            if (si >= 0 && op_touches(m, op, c, op->mb)) slot_to_frame(m, c, si);
        }
        if (!pass) act_tier_wait(m);
    }
}

// Whether op k is the list's last op of kind `kind` among those of its chunk (same_mb 0) or
// of its (micro-batch, chunk) (same_mb 1), or, kind -1, its last op of any kind there.
static int last_of(const PipeOp* ops, int n_ops, int k, int kind, int same_mb) {
    for (int j = k + 1; j < n_ops; j++)
        if ((kind < 0 || ops[j].kind == kind) && ops[j].chunk == ops[k].chunk && (!same_mb || ops[j].mb == ops[k].mb))
            return 0;
    return 1;
}

// Execute this stage's op list. train: forward with loss gradient, then backward;
// otherwise forward only (evaluation; with m->sample set, sampling: one sequence, one row's
// logits) with a list built by forward_ops(). A (chunk,
// micro-batch) holds its slot from its first op to its last. Between two chunks of this
// stage (the turn of ZB-V's V; interleaving on one stage) there are no messages: the forward
// copies its input from the previous chunk's slot, the backward its input gradient into it.
static void run_schedule(Model* m, const PipeOp* ops, int n_ops, int train, float dloss_scale) {
    int pp = m->L.pp, vpp = m->L.vpp, B = m->sample ? 1 : m->B, T = m->T, split = ops_have_w(ops, n_ops);
    size_t n = (size_t)row_count(m, B) * m->C;
    zero3_ends_ready(m);
    for (int k = 0; k < n_ops; k++) {
        PipeOp op = ops[k];
        m->op_at = ops == m->ops ? k : INT_MAX;  // slot_get: the step's list (the evaluation's: every slot free)
        int g = global_chunk(m, op.chunk), prev = local_chunk(m, g - 1), up = 0;
        offload_prepare(m, ops, n_ops, k);
        Slot* s = slot_get(m, op.chunk, op.mb);
        const int* tokens = m->sample ? m->sample->tokens : batch_inputs(m) + (size_t)op.mb * B * T;
        const int* targets = batch_targets(m) + (size_t)op.mb * B * T;
        m->mb = op.mb;  // its documents
        double t0 = now_s();
        switch (op.kind) {
        case OP_RECV_FWD:  // comm: pp recv of the previous chunk's output
            up = p2p_up(m->L.sched, pp, 0, g - 1);
            pp_recv(m, 0, up, s->x[0], n, chunk_stage(m->L.sched, pp, g - 1), p2p_tag(pp, vpp, 0, op.mb, g - 1));
            break;
        case OP_FWD:
            if (prev >= 0) {  // the previous chunk is on this stage: its output, from its slot
                Slot* from = slot_get(m, prev, op.mb);
                act_copy(m, s->x[0], from->x[m->chunks[prev].n_layers], n);
                if (!train) slot_put(m, prev, from);
            }
            chunk_forward(m, op.chunk, s, tokens, targets, B, train ? dloss_scale : 0.0f);
            break;
        case OP_SEND_FWD:  // comm: pp send to the next chunk
            up = p2p_up(m->L.sched, pp, 0, g);
            pp_send(m, s, 0, up, s->x[m->chunks[op.chunk].n_layers], n, chunk_stage(m->L.sched, pp, g + 1),
                    p2p_tag(pp, vpp, 0, op.mb, g));
            break;
        case OP_RECV_BWD:  // comm: pp recv of the gradient from the next chunk
            up = p2p_up(m->L.sched, pp, 1, g + 1);
            pp_recv(m, 1, up, s->dout, n, chunk_stage(m->L.sched, pp, g + 1), p2p_tag(pp, vpp, 1, op.mb, g + 1));
            break;
        case OP_BWD: {  // the whole backward, or its input pass (B) in a list with W's
            // the input gradient goes to the send (s->dinp), or straight to the previous chunk on this stage
            act_t* dinp = prev >= 0 ? slot_get(m, prev, op.mb)->dout : s->dinp;
            chunk_backward_input(m, op.chunk, s, dinp, tokens, B, !split && last_of(ops, n_ops, k, OP_BWD, 0),
                                 last_of(ops, n_ops, k, OP_BWD, 0));
            if (!split && m->defer_weight) chunk_backward_weight(m, op.chunk, s, B, last_of(ops, n_ops, k, OP_BWD, 0));
            break;
        }
        case OP_SEND_BWD:  // comm: pp send of the input gradient to the previous chunk
            up = p2p_up(m->L.sched, pp, 1, g);
            pp_send(m, s, 1, up, s->dinp, n, chunk_stage(m->L.sched, pp, g - 1), p2p_tag(pp, vpp, 1, op.mb, g));
            break;
        case OP_W:  // the weight pass
            chunk_backward_weight(m, op.chunk, s, B, last_of(ops, n_ops, k, OP_W, 0));
            break;
        }
        // a forward whose output the next chunk on this stage will copy keeps its slot until then
        int handed_over = !train && op.kind == OP_FWD && local_chunk(m, g + 1) >= 0;
        if (last_of(ops, n_ops, k, -1, 1) && !handed_over) slot_put(m, op.chunk, s);
        // The op's time (metrics, --trace). The GPU build does not wait
        // for the device here: it times the op by an event, read at the schedule's end.
        trace_op(m, op.kind, op.mb, g, t0);
    }
    for (int c = 0; c < m->L.vpp; c++)  // all sends of the step complete before it ends
        for (int i = 0; i < m->chunks[c].n_slots; i++) {
            pp_send_wait(m, &m->chunks[c].slots[i], 0);
            pp_send_wait(m, &m->chunks[c].slots[i], 1);
            m->chunks[c].slots[i].free_after = -1;
        }
    device_sync(m);  // the schedule's time is the device's; its ops' times are read
}

#endif
