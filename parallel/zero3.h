// parallel/zero3.h: ZeRO-3 (--zero 3; PyTorch FSDP's full sharding), and the gradient side of
// ZeRO-2, which is ZeRO-3's without the weights (--zero 2 keeps every weight whole, so nothing
// is gathered; its gradient is reduce-scattered layer by layer as below). Each dp x cp replica
// keeps only its shard [opt_lo, opt_hi) of the stage's flat buffer (data_parallel.h's
// optimizer_range (layout/params.h), the same shard ZeRO 1/2 update): the fp32 weights (m->param_shard), the
// gradient (m->grad_shard) and the AdamW state. The weights are brought together per unit
// (params.h param_units): each layer, and the model-level tensors at the two ends of the
// buffer (embeddings; final norm, head, GPT-2's tied copy). A unit's range overlaps one or
// more replicas' shards, so its collectives are the v-forms: replica r adds the part of the
// range inside its shard (zero where there is none); the buffer's padding to a multiple of
// the replicas (params.h n_padded) is in the shards only, never in a unit.
//
// When each collective runs (all over the dp group; comm: marks them below):
//   - all-gather of a layer: started one layer ahead (the chunk's next layer in the order the
//     forward or backward goes: prefetch), waited for just before the layer's forward, and
//     again before its backward: with --reshard-after-forward on (FSDP's default) a layer
//     lives in one of two slots, the one in use and the one being filled, and is dropped when
//     the slot is taken; off, every layer has its own buffer and is gathered once per step.
//     The CPU build starts it nonblocking (MPI_Iallgatherv); what overlaps is what the MPI
//     library progresses while the layer computes (inside the layer's tp / cp collectives,
//     and at the wait), not a second thread. The GPU build runs it on NCCL's side stream
//     after the compute queued so far, and the compute stream waits for its event at use.
//   - all-gather of the ends: at the start of a schedule (or a sample) that finds them stale;
//     they stay until the optimizer step (FSDP keeps its root unit the same way).
//   - reduce-scatter of a layer's gradient: once per micro-batch, after the last pass that
//     writes it: the layer's backward, or its weight pass when that is deferred (zero-bubble's
//     W, --weight-pass deferred); into this replica's grad_shard (added: the micro-batches
//     accumulate in the shard; the GPU build over NCCL all-reduces the unit: NCCL has no
//     reduce-scatter of uneven parts). Layer l's gradient is written into one of two layer
//     buffers, l % 2: the GPU build runs the collective, the add into the shard and the
//     clearing on NCCL's side stream while the backward of the layer below writes the other
//     buffer, and a layer's backward first waits for the collective still reading its buffer
//     (sharded_layer_grads_begin: the one of two layers before). A deferred layer's input pass
//     writes its norms' gradients while other layers' passes run on the layer buffers before
//     its weight pass: they go to the layer's own held_grads and join the unit just before its
//     collective.
//   - the ends' gradient: accumulated over the step, the tied embedding's copies summed
//     (data_parallel.h embed_group_sync), then reduce-scattered once in sharded_reduce_gradients.
//   - after the optimizer step nothing is gathered: every unit is stale until its next use.
// What a build supplies for it (unit_gather_start ... unit_grad_wait, and the type GatherWait):
// backend/backend.h (train_gpt.c; backend/gpu/zero3_gpu.h). data_parallel.h calls it.
#ifndef ZERO3_H
#define ZERO3_H

#include "backend/backend.h"
#include "layer_parallel/tensor_parallel.h"  // sp_partial_sync

enum { Z3_STALE, Z3_GATHERING, Z3_READY };  // a unit's gathered weights (--zero 3)

// A unit of the buffer: its gradient's collective (--zero 2 and 3) and its weights' (--zero 3).
typedef struct {
    ParamUnit r;             // its range of the local buffer, and its layer (-1: an end)
    float *buf, *grad;       // where its weights are gathered (NULL: nowhere now) and its gradient adds up
    int own_buf;             // buf is its own (the ends; every layer with --reshard-after-forward off)
    int state;               // Z3_*
    GatherWait wait;         // its all-gather while Z3_GATHERING
    int *counts, *displs;    // [replicas] each replica's part of the range, and where it starts in the range
} ShardedUnit;

// The state of --zero 2 and 3 (m->sharded; with --zero 3 also m->zero3_state): the units and the buffers
// their weights are gathered into and their gradients add up in.
struct ShardedState {
    ShardedUnit* u;
    int n;
    int* unit_of_layer;      // [n_layer] its unit, -1 when not on this stage
    float* slot[2];          // --reshard-after-forward on: the two layer buffers
    int slot_unit[2];        // the unit each slot holds, -1 none
    int in_use;              // the slot of the layer last made ready
    float* layer_grad[2];    // two layers' gradients: layer l's in [l % 2]
    GatherWait grad_free[2]; // the last reduce-scatter out of each (the GPU build: its event, NULL before any)
    float* held_grads;       // deferred weight passes: every layer's norm gradients from its input pass, else NULL
                             // (params.h zero_held_grad_floats, in the start-up table and the planner)
};

// ----------------------------------------------------------------------------
// A unit's collectives.

// comm: dp all-gather of a unit's weights from the replicas' shards, started (--zero 3: from
// param_shard into the unit's buffer; --zero 1 and 2: in place in m->params, where the update left
// this replica's part)
static void z3_gather_start(Model* m, ShardedUnit* u) {
    int me = m->L.replica;
    const float* mine = !m->zero3_state ? u->buf + u->displs[me]
                        : u->counts[me] ? m->param_shard + (u->r.lo + u->displs[me] - m->opt_lo)
                                        : m->param_shard;
    unit_gather_start(m, mine, u->buf, u->counts, u->displs, u->r.n, &u->wait);
    u->state = Z3_GATHERING;
}
static void z3_gather_wait(Model* m, ShardedUnit* u) {
    if (u->state != Z3_GATHERING) return;
    unit_gather_wait(m, &u->wait, u->r.n);
    unit_weights_ready(m, u->buf, u->r.n);
    u->state = Z3_READY;
}

// comm: dp reduce-scatter of a unit's gradient (grad, the unit's range): this replica's part
// is added into its grad_shard, and the unit's gradient cleared for what comes next; *done
// (done may be NULL) says when its buffer is free again.
static void sharded_reduce_scatter(Model* m, ShardedUnit* u, GatherWait* done) {
    int me = m->L.replica;
    float* part = u->counts[me] ? m->grad_shard + (u->r.lo + u->displs[me] - m->opt_lo) : NULL;
    unit_grad_reduce(m, u->grad, u->counts, u->displs, u->r.n, part, done);
}

// ----------------------------------------------------------------------------
// Views and units.

// Point the views of the tensors in unit r at base (NULL: unbind them).
static void sharded_bind(Model* m, const ParamUnit* r, float* base, Weights* w, LayerW* layers) {
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        if (t->offset < r->lo || t->offset >= r->lo + r->n) continue;
        float* p = base ? base + (t->offset - r->lo) : NULL;
        if (t->layer >= 0) ((float**)&layers[t->layer])[t->kind] = p;
        else ((float**)w)[t->kind] = p;
    }
    if (m->c.arch == ARCH_GPT2) w->head = w->wte;
}

// A stale unit's gather started: into its own buffer, or into slot s (what the slot held is
// dropped, its gather finished first).
static void z3_fetch(Model* m, ShardedUnit* u, int s) {
    struct ShardedState* z = m->zero3_state;
    if (u->state != Z3_STALE) return;
    if (!u->own_buf) {
        if (z->slot_unit[s] >= 0) {
            ShardedUnit* old = &z->u[z->slot_unit[s]];
            z3_gather_wait(m, old);
            old->state = Z3_STALE, old->buf = NULL;
            sharded_bind(m, &old->r, NULL, &m->w, m->wl);
        }
        z->slot_unit[s] = (int)(u - z->u), u->buf = z->slot[s];
        sharded_bind(m, &u->r, u->buf, &m->w, m->wl);
    }
    z3_gather_start(m, u);
}
static int z3_slot_of(const struct ShardedState* z, const ShardedUnit* u) {
    return z->slot_unit[0] == (int)(u - z->u) ? 0 : z->slot_unit[1] == (int)(u - z->u) ? 1 : -1;
}

// Layer l's weights gathered in m->wl[l] (waited for here), and layer `next` (-1: none) started
// into the other slot so its gather can overlap l's compute. Called before a layer's forward
// and before its backward (parallel/pipeline.h). --zero 1 and 2: the layer's all-gather since
// the last update waited for (zero12_gather_start).
static void zero3_layer_ready(Model* m, int l, int next) {
    struct ShardedState* z = m->zero3_state;
    if (!z) {
        if (m->c.zero == 1 || m->c.zero == 2) z3_gather_wait(m, &m->sharded->u[m->sharded->unit_of_layer[l]]);
        return;
    }
    ShardedUnit* u = &z->u[z->unit_of_layer[l]];
    int s = z3_slot_of(z, u);
    if (s < 0) s = 1 - z->in_use;  // the slot not used last: the layer used last is done
    z3_fetch(m, u, s);
    if (!u->own_buf) z->in_use = s;
    if (next >= 0) z3_fetch(m, &z->u[z->unit_of_layer[next]], 1 - z->in_use);
    z3_gather_wait(m, u);
}

// The ends (embeddings, final norm, head) gathered, when stale: at the start of a schedule.
// --zero 1 and 2: their all-gathers since the last update waited for.
static void zero3_ends_ready(Model* m) {
    if (!m->zero3_state) {
        for (int i = 0; m->sharded && m->c.zero < 3 && i < m->sharded->n; i++)
            if (m->sharded->u[i].r.layer < 0) z3_gather_wait(m, &m->sharded->u[i]);
        return;
    }
    for (int i = 0; i < m->zero3_state->n; i++)
        if (m->zero3_state->u[i].r.layer < 0) z3_fetch(m, &m->zero3_state->u[i], 0);
    for (int i = 0; i < m->zero3_state->n; i++)
        if (m->zero3_state->u[i].r.layer < 0) z3_gather_wait(m, &m->zero3_state->u[i]);
}

// The gradients a layer's input pass writes (model.h layer_backward_input): its norms'.
static int grad_of_input_pass(int kind) { return kind == P_LN1W || kind == P_LN1B || kind == P_LN2W || kind == P_LN2B; }

// Layer l's backward (its weight pass, when deferred) is about to write its gradient (--zero 2
// and 3): the compute first waits for the reduce-scatter still reading its buffer.
static void sharded_layer_grads_begin(Model* m, int l) {
    if (m->c.zero >= 2) unit_grad_wait(m, &m->sharded->grad_free[l % 2]);
}

// Layer l's gradient is complete for this micro-batch (after its backward, or its weight pass
// when deferred): reduce-scatter it (--zero 2 and 3), its held norm gradients put in first.
static void sharded_layer_grads_done(Model* m, int l) {
    struct ShardedState* z = m->sharded;
    if (m->c.zero < 2) return;
    ShardedUnit* u = &z->u[z->unit_of_layer[l]];
    for (int i = 0; z->held_grads && i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        if (t->layer != l || !grad_of_input_pass(t->kind)) continue;
        float* held = ((float**)&m->gl[l])[t->kind];
        f32_copy(m, u->grad + (t->offset - u->r.lo), held, t->size);  // its place there is zero (cleared)
        f32_zero(m, held, t->size);
    }
    sharded_reduce_scatter(m, u, &z->grad_free[l % 2]);
}

// After the schedule (data_parallel.h reduce_gradients, --zero 2 and 3, after the tied embedding's
// copies were summed): the ends' gradients; returns the gradient the optimizer reads.
static float* sharded_reduce_gradients(Model* m) {
    for (int i = 0; i < m->sharded->n; i++)
        if (m->sharded->u[i].r.layer < 0) sharded_reduce_scatter(m, &m->sharded->u[i], NULL);
    grad_allreduce_dp_join(m);  // the compute waits for every reduce-scatter
    sp_partial_sync(m, m->grad_shard, m->opt_lo, shard_floats(&m->P, m->L.replicas));
    return m->grad_shard;
}

// --zero 1 and 2 (without --offload optimizer): after the optimizer step each replica holds only
// its shard of the new weights in m->params. Every unit's all-gather starts at once (the GPU
// build: one after the other on NCCL's side stream), the ends first, then the layers in buffer
// order, the order in which the forward takes them; each unit's first use waits for its own
// (zero3_ends_ready, zero3_layer_ready), so the gathers overlap the next step's forward
// (PyTorch FSDP's and Megatron's --overlap-param-gather). The math is the whole all-gather's:
// only copies.
static void zero12_gather_start(Model* m) {
    struct ShardedState* z = m->sharded;
    for (int ends = 1; ends >= 0; ends--)
        for (int i = 0; i < z->n; i++)
            if ((z->u[i].r.layer < 0) == ends) z3_gather_start(m, &z->u[i]);  // comm: dp all-gather of a unit
}
// Everything that reads the whole buffer (a checkpoint, an export, the next update) first waits
// for every gather still in flight.
static void zero12_params_ready(Model* m) {
    for (int i = 0; m->sharded && m->c.zero < 3 && i < m->sharded->n; i++) z3_gather_wait(m, &m->sharded->u[i]);
}

// After the optimizer step: every gathered copy is out of date.
static void zero3_params_updated(Model* m) {
    struct ShardedState* z = m->zero3_state;
    for (int i = 0; i < z->n; i++) {
        z3_gather_wait(m, &z->u[i]);  // a prefetch still in flight
        z->u[i].state = Z3_STALE;
        if (!z->u[i].own_buf) z->u[i].buf = NULL, sharded_bind(m, &z->u[i].r, NULL, &m->w, m->wl);
    }
    z->slot_unit[0] = z->slot_unit[1] = -1;
}

// ----------------------------------------------------------------------------
// Set-up, and the whole local buffer for the readers and writers that go tensor by tensor.

// Every unit's part of each replica's shard [r S, (r + 1) S).
static void sharded_unit_parts(ShardedUnit* u, size_t S, int replicas) {
    // (its n fits an int: args.h refuses a larger unit, zero3_largest_unit)
    u->counts = (int*)xcalloc(replicas, sizeof(int));
    u->displs = (int*)xcalloc(replicas, sizeof(int));
    size_t end = u->r.lo + u->r.n;
    for (int r = 0; r < replicas; r++) {
        size_t a = u->r.lo > r * S ? u->r.lo : r * S, b = end < (r + 1) * S ? end : (r + 1) * S;
        u->displs[r] = (int)(a < b ? a - u->r.lo : 0), u->counts[r] = (int)(a < b ? b - a : 0);
    }
}

// The whole local buffer of weights on the host, current, for a reader or writer of the local
// layout (checkpoints, llm.c and Hugging Face files); params_from_host puts what a reader wrote
// there back where the kernels read it, and ends the buffer. --zero 3: each replica's shard
// is copied down and the shards all-gathered among the hosts; back, only this replica's shard.
static float* params_to_host(Model* m) {
    float* host = params_host_take(m);
    params_down(m, host);
    if (m->zero3_state) {
        size_t S = shard_floats(&m->P, m->L.replicas);
        float* mine = host + (size_t)m->L.replica * S;
        comm_allgather(&m->L.group[GROUP_DP], mine, host, S);  // comm: dp all-gather of the shards (host)
    }
    return host;
}
static void params_from_host(Model* m, float* host) {
    params_up(m, host);
    if (m->zero3_state) zero3_params_updated(m);
    params_host_give(m, host);
}
// The initial weights (layout/params.h init_params: the same on both builds, bit for bit) where
// the kernels read them.
static void params_init(Model* m) {
    float* host = params_host_take(m);
    watchdog_pause();  // (the same work on every rank: its share of the model)
    init_params(&m->P, &m->c, m->c.tp, m->L.tp_rank, host);
    watchdog_resume("at start-up, after initializing the weights, waiting for the other ranks: a rank died or hangs "
                    "there");
    params_from_host(m, host);
}

// Deferred weight passes: each layer's norm gradients bound to its own part of held_grads.
static void sharded_hold_input_grads(Model* m, struct ShardedState* z) {
    size_t n = 0;
    for (int i = 0; i < m->P.n; i++)
        if (m->P.t[i].layer >= 0 && grad_of_input_pass(m->P.t[i].kind)) n += m->P.t[i].size;
    float* held = z->held_grads = f32_alloc(m, n);
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        if (t->layer < 0 || !grad_of_input_pass(t->kind)) continue;
        ((float**)&m->gl[t->layer])[t->kind] = held, held += t->size;
    }
}

// The units and each one's part of the replicas' shards (m->sharded, --zero 1, 2 and 3). With
// --zero 1 and 2 a unit's gathered weights are its range of m->params.
static struct ShardedState* sharded_units_init(Model* m) {
    size_t S = shard_floats(&m->P, m->L.replicas);
    struct ShardedState* z = (struct ShardedState*)xcalloc(1, sizeof(struct ShardedState));
    m->sharded = z;
    ParamUnit* r = (ParamUnit*)xmalloc(sizeof(ParamUnit) * (m->P.n + 2));
    z->n = param_units(&m->P, r);
    z->u = (ShardedUnit*)xcalloc(z->n, sizeof(ShardedUnit));
    z->unit_of_layer = (int*)xmalloc(sizeof(int) * m->c.n_layer);
    for (int l = 0; l < m->c.n_layer; l++) z->unit_of_layer[l] = -1;
    for (int i = 0; i < z->n; i++) {
        ShardedUnit* u = &z->u[i];
        u->r = r[i];
        sharded_unit_parts(u, S, m->L.replicas);
        if (u->r.layer >= 0) z->unit_of_layer[u->r.layer] = i;
        if (m->c.zero < 3) u->buf = m->params + u->r.lo;
    }
    free(r);
    return z;
}

// --zero 2 and 3: the units (sharded_units_init), this replica's gradient shard, two layers'
// gradients and the ends' own, with the views of the gradients bound once (layer l's into layer
// buffer l % 2, the ends' into theirs; with deferred weight passes its norms' into held_grads).
// Optimizer range set first.
static struct ShardedState* sharded_grads_init(Model* m) {
    size_t max_layer = 0;
    struct ShardedState* z = sharded_units_init(m);
    m->g.layer = m->gl;
    m->grad_shard = f32_alloc(m, shard_floats(&m->P, m->L.replicas));
    for (int i = 0; i < z->n; i++)
        if (z->u[i].r.layer >= 0 && z->u[i].r.n > max_layer) max_layer = z->u[i].r.n;
    for (int s = 0; s < 2; s++) z->layer_grad[s] = f32_alloc(m, max_layer);
    for (int i = 0; i < z->n; i++) {
        ShardedUnit* u = &z->u[i];
        u->grad = u->r.layer < 0 ? f32_alloc(m, u->r.n) : z->layer_grad[u->r.layer % 2];
        sharded_bind(m, &u->r, u->grad, &m->g, m->gl);
    }
    if (m->defer_weight) sharded_hold_input_grads(m, z);
    return z;
}

// model_init_params for --zero 3: the gradient side (sharded_grads_init), the weight shard and the
// buffers the units are gathered into, and the initial weights (params_init).
static void zero3_init(Model* m) {
    const ModelConfig* c = &m->c;
    int keep = m->args->reshard_keep;
    size_t S = shard_floats(&m->P, m->L.replicas), max_layer = 0;
    m->wl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    m->gl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    m->w.layer = m->wl;
    optimizer_range(&m->P, c, m->L.replica, &m->opt_lo, &m->opt_hi);
    m->param_shard = f32_alloc(m, S);
    struct ShardedState* z = m->zero3_state = sharded_grads_init(m);
    m->m_state = opt_state_alloc(m, m->opt_hi - m->opt_lo, "AdamW m");  // on the device, or offloaded
    m->v_state = opt_state_alloc(m, m->opt_hi - m->opt_lo, "AdamW v");
    for (int i = 0; i < z->n; i++)
        if (z->u[i].r.layer >= 0 && z->u[i].r.n > max_layer) max_layer = z->u[i].r.n;
    size_t n_arena, n_grads;  // the gathered weights' buffers, carved in order: the own ones, then the slots
    zero3_work_floats(&m->P, keep, &n_arena, &n_grads);
    float* arena = f32_alloc(m, n_arena);
    weights_arena(m, arena, n_arena);
    for (int i = 0; i < z->n; i++) {
        ShardedUnit* u = &z->u[i];
        u->own_buf = u->r.layer < 0 || keep;
        if (u->own_buf) u->buf = arena, arena += u->r.n;
        if (u->own_buf) sharded_bind(m, &u->r, u->buf, &m->w, m->wl);
    }
    for (int s = 0; s < 2; s++) z->slot[s] = keep ? NULL : arena + s * max_layer, z->slot_unit[s] = -1;
    if (c->sp) m->sp_buf = f32_alloc(m, S);
    params_init(m);  // the initial weights into the shard
}

#endif
