// planner/predict.h: one layout's prediction. Checks that the layout can run, finds the
// links its groups land on, times its chunks, sums each stage's memory, then times the
// data-parallel reduction, plays the pipeline schedule and computes MFU (plan_predict_ex).
#ifndef PLANNER_PREDICT_H
#define PLANNER_PREDICT_H

#include "layout/layout_check.h"
#include "planner/time.h"

typedef struct {
    const char* invalid;     // why this layout cannot run (points into why[]), NULL when it can
    char why[200];
    int dp, tp, pp, vpp, micro_batch, n_micro, recompute, sp, zero, schedule;
    int pp_split;            // --pp-split: 0 even, 1 auto (the layers cut by cost)
    int cp, cp_ulysses;      // context parallelism: ranks per sequence, the Ulysses degree U among them
    PlanSetup setup;         // kernels, rank order, pipeline cut
    int in_flight;           // peak (micro-batch, chunk) activations held, on the worst stage
    int w_pending;           // peak (micro-batch, chunk) pairs whose B ran and whose W has not, there (0 without W ops)
    int worst_stage;         // stage with the most memory
    // memory per GPU on the worst stage, bytes
    double mem_weights, mem_grads, mem_optim, mem_act, mem_temp, mem_overhead, mem_total;
    double mem_w_inputs;     // of mem_act, the weight-pass inputs of the w_pending pairs
    double mem_act_max;      // the most activations of any stage (the worst stage's total may hold fewer: a cut by
                             // cost)
    int fits;                // device memory and, under --offload, host memory hold it
    double mem_host;         // --offload: host bytes per GPU of its worst stage (state and activations moved)
    double mem_host_act;     // of mem_host, the activations moved (--offload activations)
    double host_mem_bytes;   // the host memory per GPU it was checked against (0: not checked)
    double mem_margin;       // device memory left after the predicted peak, bytes (negative: does not fit)
    // the times below were computed (always, unless the enumeration skipped a layout that does not fit)
    int timed;
    // time, seconds
    double t_layer_fwd, t_layer_bwd;  // one layer, one micro-batch (bwd includes recompute)
    double t_layer_w;        // of t_layer_bwd, the weight pass W
    double t_tp_comm;        // tensor-parallel communication per step per GPU (inside the compute)
    double t_cp_comm;        // context-parallel communication per step per GPU (before overlap)
    double t_cp_exposed;     // the part of it the compute does not hide (inside the compute)
    double cp_bytes;         // bytes one GPU sends for context parallelism per step
    // some of it leaves the node (the ring when tp*cp > GPUs per node, the all-to-all when tp*U >)
    int cp_off_node;
    double t_p2p;            // one pipeline message
    double t_pipeline;       // schedule_simulate() makespan of forward/backward
    double t_dp_comm;        // data-parallel communication per step (before overlap)
    double t_dp_exposed;     // the part of it not hidden
    double t_optim;          // optimizer step
    double t_step;
    double bubble;           // bubble_fraction() of the busiest stage: (makespan - its compute) / makespan, in
                             // [0, 1) (time-shared cores are not idle time: see plan_pipeline_time)
    // bubble_formula(): (p-1)/(m+p-1), (p-1)/(v m+p-1), (p-1)/(3m+p-1), 0 (layout/schedule.h)
    double bubble_formula;
    double tokens_per_s_per_gpu, model_tflops_per_gpu, mfu, hfu;
} PlanResult;

static int plan_invalid(PlanResult* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof(r->why), fmt, ap);
    va_end(ap);
    r->invalid = r->why;
    return -1;
}

// What does not fit, for --runs' pred_reason: the components of the worst stage's memory.
static void plan_memory_reason(const PlanResult* r, double mem_bytes, char* buf, size_t len) {
    if (r->fits) { buf[0] = 0; return; }
    if (r->mem_total <= mem_bytes) {  // the device holds it, the host not
        snprintf(buf, len, "needs %.1f GiB of host memory per GPU of %.1f (--offload): state %.1f, activations %.1f",
                 r->mem_host / GiB, r->host_mem_bytes / GiB, (r->mem_host - r->mem_host_act) / GiB,
                 r->mem_host_act / GiB);
        return;
    }
    char w[64] = "";
    if (r->w_pending)
        snprintf(w, sizeof(w), ", W inputs %.1f of them (%d W's owed)", r->mem_w_inputs / GiB, r->w_pending);
    snprintf(
        buf, len,
        "needs %.1f GiB of %.1f on stage %d: states %.1f, activations %.1f (%d in flight%s), temporaries %.1f, "
        "reserve %.1f",
        r->mem_total / GiB, mem_bytes / GiB, r->worst_stage, (r->mem_weights + r->mem_grads + r->mem_optim) / GiB,
        r->mem_act / GiB, r->in_flight, w, r->mem_temp / GiB, r->mem_overhead / GiB);
}


// Whether layout c (dp x cp x tp x pp GPUs) can run global_batch sequences at all; sets
// r->n_micro. Returns 0, or -1 with r->invalid saying why.
static int plan_check_layout(const ModelConfig* c, const PlanSetup* k, int global_batch, PlanResult* r) {
    int dp = c->dp, tp = c->tp, pp = c->pp, vpp = c->vpp, mb = c->micro_batch, cp = c->cp, U = c->cp_ulysses;
    if (dp < 1 || tp < 1 || pp < 1 || vpp < 1 || mb < 1)
        return plan_invalid(r, "dp, tp, pp, vpp and micro-batch must be >= 1");
    if (global_batch < 1) return plan_invalid(r, "the global batch must be >= 1 sequence");
    if (cp < 1 || U < 1 || cp % U)
        return plan_invalid(r, "cp %d: its Ulysses degree %d must be >= 1 and divide it", cp, U);
    if (cp > 1 && !k->context_parallel) return plan_invalid(r, "this software has no context parallelism (cp %d)", cp);
    if (cp > 1 && k->cp_allgather) {  // Llama 3's: its own 2 x cp split, whole heads, a flash kernel per chunk
        if (k->own_buffers)
            return plan_invalid(r, "the all-gather context parallelism is a framework's (Llama 3's), not this "
                                   "trainer's");
        if (U > 1 || c->cp_contiguous || c->cp_doc)
            return plan_invalid(r, "the all-gather context parallelism splits each sequence in 2 x cp chunks: no "
                                   "Ulysses degree, no --cp-split contiguous or doc");
        if (!attn_is_flash(k->attention))
            return plan_invalid(r, "the all-gather context parallelism runs a flash kernel on the gathered K and V");
    }
    // the trainer's own rules, its one function (layout/layout_check.h config_check) on the flags that
    // would run this layout: tp splits every tensor, cp the sequence and the heads, pp*vpp chunks the
    // layers, dp*micro-batch the batch, the schedule its micro-batches and weight passes; ZeRO over one
    // replica shards nothing (the planner predicts it as none)
    ModelConfig t = *c;
    t.global_batch = global_batch;
    if (k->pipe_split == SPLIT_ENDS) {  // the embedding and the head each take a layer's place in the cut
        if (k->own_buffers || c->pp_split)
            return plan_invalid(r, "pp_split ends is a framework's cut (not this trainer's, nor with --pp-split auto)");
        if (c->n_layer + 2 < c->pp * c->vpp)
            return plan_invalid(r, "pp_split ends: %d layers + the embedding and the head < pp %d x vpp %d chunks",
                                c->n_layer, c->pp, c->vpp);
        t.n_layer = c->n_layer + 2;
    }
    if ((long long)dp * cp == 1) t.zero = 0;
    long long ranks = (long long)dp * tp * pp * cp;
    int kind = U == 1 ? CP_RING : U == cp ? CP_ULYSSES : CP_2D;
    FlagRules flags = {kind, kind == CP_2D ? U : 0, 0, 0, 0, 0, 0, 0, 0, 0};
    char why_trainer[WHY_CAP];
    if (config_check(&t, &flags, ranks > INT_MAX ? INT_MAX : (int)ranks, why_trainer))
        return plan_invalid(r, "%s", why_trainer);
    // nanotron's own rules, once the shared ones have passed (they name the root cause: --n-layer under pp, not
    // a stage the cut left empty)
    if (k->nanotron_options &&
        (c->zero > 1 || c->cp > 1 || (c->recompute != RECOMPUTE_NONE && c->recompute != RECOMPUTE_FULL)))
        return plan_invalid(r, "nanotron v0.5 runs ZeRO 0 or 1, no context parallelism, and recomputes no layer or "
                               "every layer (--zero %d, --cp %d, --recompute %s)", c->zero, c->cp,
                            plan_recompute_name(c->recompute));
    if (k->pipe_split == SPLIT_COST && c->pp > 1) {  // nanotron's cut: its engines run one chunk a stage
        if (c->vpp != 1 || (c->schedule != SCHED_1F1B && c->schedule != SCHED_GPIPE) || c->pp_split)
            return plan_invalid(r, "nanotron cuts its pipeline by compute cost, one chunk a stage, under 1F1B or "
                                   "all-forward-all-backward (no --vpp, --pp-split or other schedule)");
        int* layers = (int*)xmalloc(sizeof(int) * c->pp);
        int head = chunk_split_cost(c, c->pp, layers), empty = 0;
        for (int g = 0; g < c->pp - 1; g++) empty |= layers[g] == 0;
        free(layers);
        if (head != c->pp - 1 || empty)
            return plan_invalid(r, "nanotron's compute-cost cut of %d layers and the head leaves a stage empty at "
                                   "pp %d", c->n_layer, c->pp);
    }
    if (c->zero < 0 || c->zero > 3) return plan_invalid(r, "zero stage must be 0..3");
    if (c->recompute < RECOMPUTE_NONE || c->recompute >= N_PLAN_RECOMPUTE) return plan_invalid(r, "bad recompute mode");
    if (c->recompute > RECOMPUTE_FULL && k->own_buffers)
        return plan_invalid(r, "--recompute %s is a framework's policy: not in this trainer (--software framework)",
                            plan_recompute_name(c->recompute));
    if (k->attention < 0 || k->attention >= N_ATTN) return plan_invalid(r, "bad attention kernel");
    r->n_micro = (int)(global_batch / ((long long)dp * mb));  // layout_check: a whole number
    if (!plan_mlp_is_arch(c) && k->own_buffers)
        return plan_invalid(r, "--mlp %s with --arch %s: this trainer runs its architecture's MLP (--software "
                               "framework)", MLP_NAMES[c->mlp], arch_name(c->arch));
    if (c->recompute == RECOMPUTE_FULL_DIST && (c->tp == 1 || c->sp))
        return plan_invalid(r, "--recompute full_distributed splits the saved layer input over tp: tp > 1 without SP "
                               "(with SP it is already split: full)");
    // frameworks' policies that rebuild layers (full: config_check)
    if (schedule_has_w(c->schedule) && (c->recompute == RECOMPUTE_LAYER || c->recompute == RECOMPUTE_FULL_DIST))
        return plan_invalid(
            r, "--schedule %s keeps each layer's activations until its weight pass: not with --recompute %s",
            schedule_name(c->schedule), plan_recompute_name(c->recompute));
    return 0;
}

// The links each group of a layout lands on.
typedef struct {
    Link tp, dp, pp, ring, a2a;
    int pp_off_node;  // some stage boundary crosses nodes (pp is then the GPU's NIC)
} PlanLinks;

// tp ranks are adjacent, cp ranks next (the Ulysses groups inside the ring's); then stages
// and data-parallel replicas in the rank order. The gradients are reduced over the dp x cp
// ranks holding the same weights. Sets r->cp_off_node. NVLink's efficiency is the software's:
// NCCL's measured one (nccl_links) or the one fitted to the layouts study.
static PlanLinks plan_links(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* dev, int gpus_per_node,
                            PlanResult* r) {
    int dp = c->dp, tp = c->tp, pp = c->pp, cp = c->cp, U = c->cp_ulysses;
    DeviceProfile dl = *dev;
    dl.link_eff = software_link_eff(k, dev);
    const DeviceProfile* d = &dl;
    PlanLinks l;
    int pp_stride = k->rank_order == ORDER_TP_PP_DP ? tp * cp : tp * cp * dp;
    int dp_stride = k->rank_order == ORDER_TP_PP_DP ? tp * cp * pp : tp * cp;
    l.tp = group_link(d, tp, 1, gpus_per_node);
    l.dp = group_link_nested(d, cp, tp, dp, dp_stride, gpus_per_node);
    l.pp = group_link(d, pp, pp_stride, gpus_per_node);
    l.pp_off_node = pp > 1 && (long)pp * pp_stride > gpus_per_node;
    if (l.pp_off_node) l.pp = nic_link(d);
    l.ring = k->cp_allgather ? group_link(d, cp, tp, gpus_per_node) : cp_ring_link(d, tp, cp, gpus_per_node);
    l.a2a = cp_alltoall_link(d, tp, U, gpus_per_node);
    r->cp_off_node = (cp / U > 1 && tp * cp > gpus_per_node) || (U > 1 && tp * U > gpus_per_node);
    return l;
}

// Times of the embedding and of the head + loss for one micro-batch, over the T/cp tokens
// of a sequence this rank holds.
typedef struct {
    double emb_fwd, emb_bwd, emb_comm, head_fwd, head_bwd, head_comm;
} EdgeTimes;

static EdgeTimes edge_times(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, Link tp_link) {
    EdgeTimes et;
    int tp = c->tp;
    double s = c->seq_len, h = c->d_model, n = (double)c->micro_batch * s / c->cp, e = d->dtype_bytes,
           V = c->vocab_padded, t = tp;
    double n_el = c->sp ? n / t : n, x_bytes = n * h * e;
    et.emb_comm = c->sp ? link_gather_time(tp, x_bytes, tp_link) : link_allreduce_time(tp, x_bytes, tp_link);
    et.emb_fwd = elementwise_time(d, 2 * n_el * h * e) + et.emb_comm;  // vocab-parallel lookup, then reduce over tp
    et.emb_bwd = elementwise_time(d, 2 * n * h * e) + elementwise_time(d, 2 * n_el * h * e);
    double head_norm_f = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 0));
    double head_norm_b = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 1));
    double head_mm = matmul_time(d, n, V / t, h, 1);
    et.head_comm = c->sp ? link_gather_time(tp, x_bytes, tp_link) : link_allreduce_time(tp, x_bytes, tp_link);
    // the loss runs over V/t logits per rank (vocabulary-parallel), or over all V after an
    // all-gather of the logits over tp (its backward keeps only the rank's slice: no traffic)
    double V_loss = k->loss_gathered ? V : V / t;
    double gather_logits = k->loss_gathered ? link_gather_time(tp, n * V * e, tp_link) : 0;
    et.head_fwd = head_norm_f + head_mm + gather_logits + elementwise_time(d, n * V_loss * loss_bytes(k, e, 0)) +
                  et.head_comm;  // loss: the byte table
    et.head_bwd = head_norm_b + linear_dx_time(d, n, V / t, h) + linear_dw_time(d, n, V / t, h) +
                  elementwise_time(d, n * V_loss * loss_bytes(k, e, 1)) + et.head_comm;
    return et;
}

// The pipeline's global chunks and their stages: what each chunk holds, the times of its F,
// B and W for one micro-batch (schedule_simulate runs B + W as one backward under the
// schedules without W ops), and the sums and parameters of each stage.
typedef struct {
    int n;  // pp * vpp chunks
    int *layers, *has_embed, *has_head;  // per chunk
    double *t_fwd, *t_bwd, *t_w;  // per chunk
    double *stage_fwd, *stage_bwd;  // per stage, the backward B + W
    double* stage_params;  // per stage, on one GPU
    double* stage_mem;     // per stage, its memory per GPU (plan_memory)
    double* stage_host;    // per stage, its host bytes per GPU under --offload (plan_memory)
} PlanChunks;

static void plan_chunks_free(PlanChunks* ch) {
    free(ch->layers), free(ch->has_embed), free(ch->has_head), free(ch->t_fwd), free(ch->t_bwd), free(ch->t_w);
    free(ch->stage_fwd), free(ch->stage_bwd), free(ch->stage_params), free(ch->stage_mem);
    free(ch->stage_host);
}
// n chunks over pp stages, all zero.
static PlanChunks plan_chunks_alloc(int n, int pp) {
    PlanChunks ch;
    ch.n = n;
    ch.t_fwd = (double*)xcalloc(n, sizeof(double));
    ch.t_bwd = (double*)xcalloc(n, sizeof(double));
    ch.t_w = (double*)xcalloc(n, sizeof(double));
    ch.layers = (int*)xcalloc(n, sizeof(int));
    ch.has_embed = (int*)xcalloc(n, sizeof(int));
    ch.has_head = (int*)xcalloc(n, sizeof(int));
    ch.stage_fwd = (double*)xcalloc(pp, sizeof(double));
    ch.stage_bwd = (double*)xcalloc(pp, sizeof(double));
    ch.stage_params = (double*)xcalloc(pp, sizeof(double));
    ch.stage_mem = (double*)xcalloc(pp, sizeof(double));
    ch.stage_host = (double*)xcalloc(pp, sizeof(double));
    return ch;
}

// The chunks of layout c with their times. The embedding's and the head's backward are B's:
// the trainer does not defer their weight gradients. Also sets the layout's tp and cp
// communication totals in r.
static PlanChunks plan_chunks(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, const LayerTime* lt,
                              const EdgeTimes* et, PlanResult* r) {
    int pp = c->pp, vpp = c->vpp, L = c->n_layer, m = r->n_micro;
    PlanChunks ch = plan_chunks_alloc(pp * vpp, pp);
    chunk_split(c, ch.n, k->pipe_split, ch.layers, ch.has_embed, ch.has_head);
    for (int g = 0; g < ch.n; g++) {
        ch.t_fwd[g] =
            ch.layers[g] * lt->fwd + (ch.has_embed[g] ? et->emb_fwd : 0) + (ch.has_head[g] ? et->head_fwd : 0);
        ch.t_bwd[g] = ch.layers[g] * (r->t_layer_bwd - r->t_layer_w) + (ch.has_embed[g] ? et->emb_bwd : 0) +
                      (ch.has_head[g] ? et->head_bwd : 0);
        if (k->grad_accum_pass)
            ch.t_bwd[g] += fp32_accumulator_time(c, k, d, ch.layers[g], ch.has_embed[g], ch.has_head[g]);
        ch.t_w[g] = ch.layers[g] * r->t_layer_w;
    }
    r->t_tp_comm = (double)m *
                   (L * (lt->comm_fwd + lt->comm_bwd + (plan_recompute_whole(c->recompute) ? lt->comm_fwd + lt->regather
                                                          : c->recompute == RECOMPUTE_LAYER ? lt->comm_fwd / 2
                                                                                            : 0)) +
                    2 * et->emb_comm + 2 * et->head_comm) /
                   pp;
    // Megatron's selective and full recomputation run the attention's forward again, its cp
    // communication too; selective_op keeps the attention's output, selective_layer redoes half the layers
    double again = c->recompute == RECOMPUTE_SELECTIVE || plan_recompute_whole(c->recompute) ? 1
                   : c->recompute == RECOMPUTE_LAYER                                    ? 0.5
                                                                                        : 0;
    r->t_cp_comm = (double)m * L * (lt->cp.comm_fwd * (1 + again) + lt->cp.comm_bwd) / pp;
    r->t_cp_exposed = (double)m * L * (lt->cp.fwd * (1 + again) + lt->cp.bwd) / pp;
    r->cp_bytes = (double)m * L * (lt->cp.bytes_fwd * (1 + again) + lt->cp.bytes_bwd) / pp;
    return ch;
}

// Megatron-core's overlap_p2p_comm (its interleaved schedule: pipe_send_wait SENDS_WAIT_ENDS at vpp > 1). In the
// steady state a forward is followed by its send and the receive for the next forward, a backward by its send and the
// receive for the next backward, each waited for only before the next pass of its kind (schedules.py
// forward_backward_pipelining_with_interleaving at Megatron-LM f2e5db40, lines 884-967). So a receive is pending
// through every pass of the steady state: an NCCL kernel that holds a CTA a channel and spins until its peer's data
// arrives (NVIDIA/nccl src/device/prims_simple.h waitPeer at v2.21.5), NCCL_P2P_NET_CHANNELS of them for a peer
// across nodes (src/graph/paths.cc ncclTopoGetNchannels: "start from 2 channels per NIC", not reduced for the 2-rank
// communicator of a pair). Those passes run on the SMs it leaves, by the waves of time.h (as beside TE's
// userbuffers, ub_gemm_time). The warm-up's forwards and the cool-down's backwards wait for their exchanges before
// they start: nothing pending under them. Each stage's chunks are charged their steady share, (m vpp - warm-up) /
// m vpp, of the layer's slowdown (the embedding's and the head's the layer's too). The sends, pending for about a
// message's time, and peers inside a node (NVLink peers get more channels) are not modelled.
#define NCCL_P2P_NET_CHANNELS 2
static void plan_pending_receive(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, PlanLinks links,
                                 const LayerTime* lt, int m, PlanChunks* ch) {
    int pp = c->pp, vpp = c->vpp, total = m * vpp;
    if (k->pipe_send_wait != SENDS_WAIT_ENDS || c->schedule != SCHED_INTERLEAVED || vpp <= 1 || !links.pp_off_node ||
        d->sms <= NCCL_P2P_NET_CHANNELS)
        return;
    DeviceProfile left = *d;
    left.sms = d->sms - NCCL_P2P_NET_CHANNELS, left.peak_flops = d->peak_flops * left.sms / d->sms;
    LayerTime held = layer_time(c, c->micro_batch, c->tp, c->sp, c->cp, c->cp_ulysses, k, &left, links.tp, links.ring,
                                links.a2a);
    double slow_f = held.fwd / lt->fwd - 1, slow_b = held.bwd / lt->bwd - 1;
    for (int st = 0; st < pp; st++) {
        double steady = (double)(total - interleaved_warmup(pp, vpp, m, st)) / total;
        for (int j = 0; j < vpp; j++) {
            int g = chunk_global(c->schedule, pp, st, j);
            ch->t_fwd[g] *= 1 + steady * slow_f, ch->t_bwd[g] *= 1 + steady * slow_b, ch->t_w[g] *= 1 + steady * slow_b;
        }
    }
}

// Whether FSDP's no-sync accumulation runs (grad_sync_last): ZeRO 2 or 3 with more than one micro-batch (at ZeRO 0
// and 1 the gradients are reduced once a step whatever it says).
static int plan_sync_last(const ModelConfig* c, const PlanSetup* k, int m) {
    return k->grad_sync_last && c->zero >= 2 && m > 1;
}
// The bytes of a gradient FSDP2 keeps unsharded across the micro-batches without sync: the reduce dtype's
// (_fsdp_param.py to_accumulated_grad_if_needed casts to it), else the gradient's own (autograd's .grad).
static double held_grad_bytes(const PlanSetup* k, const DeviceProfile* d) {
    return k->reduce_bytes ? k->reduce_bytes : d->grad_bytes;
}

// Where the gradients are autograd's (grads_lazy): each chunk's weight pass adds its accumulation (time.h
// grad_accumulate_time) over the chunk's parameters on a GPU, their 1/(dp cp) shard under ZeRO 2 and 3
// (reduce-scattered every micro-batch, accumulated sharded); without sync (plan_sync_last) all of them, unsharded,
// in held_grad_bytes.
static void plan_grad_accumulate(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, PlanChunks* ch,
                                 int m) {
    int sync_last = plan_sync_last(c, k, m);
    double shard = c->zero >= 2 && !sync_last ? (double)c->dp * c->cp : 1;
    double g_bytes = sync_last ? held_grad_bytes(k, d) : d->grad_bytes;
    for (int g = 0; g < ch->n; g++) {
        double n = chunk_params(c, ch->layers[g], ch->has_embed[g], ch->has_head[g], c->tp) / shard;
        ch->t_w[g] += grad_accumulate_time(d, g_bytes, n, m);
    }
}

// Context parallelism's buffers, shared by the layers: this trainer's (layout/activations.h cp_bufs,
// which context_parallel.h cp_alloc allocates), with activations of e bytes. Llama 3's all-gather: the
// gradients of one layer's gathered K and V before their reduce-scatter (the gathered K and V themselves
// are the layer's activations).
static double cp_buffer_bytes(const ModelConfig* c, const PlanSetup* k, double e) {
    int tp = c->tp, cp = c->cp;
    if (k->cp_allgather && cp > 1) return cp_kv_elems(c, c->micro_batch, tp, cp) * cp * e;
    size_t hd = c->d_model / c->n_head;
    return cp_bufs(c->micro_batch, c->seq_len / cp, c->n_head / tp, c->n_kv_head / tp, hd, cp, c->cp_ulysses, (int)e)
        .bytes;
}

// grads_lazy (a framework's gradients created at each chunk's first backward): the activations at stage st's peak of
// activations and gradients together (memory.h pipe_peak_lazy_grads), the gradients then in *grads; gb: bytes of a
// gradient per parameter (the states' share, sharded or not).
static double plan_lazy_grads(const ModelConfig* c, const PlanChunks* ch, int st, double gb, int m, double act_layer,
                              double* grads) {
    double* grad = (double*)xmalloc(sizeof(double) * c->vpp);
    for (int j = 0; j < c->vpp; j++) {
        int g = chunk_global(c->schedule, c->pp, st, j);
        grad[j] = chunk_params(c, ch->layers[g], ch->has_embed[g], ch->has_head[g], c->tp) * gb;
    }
    double act = 0;
    pipe_peak_lazy_grads(c, m, st, ch->layers, act_layer, grad, &act, grads);
    free(grad);
    return act;
}

// Memory per GPU of every stage; the worst one's goes into r (and r->fits). Also fills the
// stages' times and parameters in ch.
static void plan_memory(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, PlanChunks* ch,
                        PlanResult* r) {
    int dp = c->dp, tp = c->tp, pp = c->pp, vpp = c->vpp, mb = c->micro_batch, cp = c->cp, U = c->cp_ulysses,
        m = r->n_micro;
    double s = c->seq_len, h = c->d_model, n = (double)mb * s / cp, e = d->dtype_bytes, V = c->vocab_padded, t = tp;
    double n_el = c->sp ? n / t : n, V_loss = k->loss_gathered ? V : V / t;
    double wb, gb, ob;
    if (k->own_buffers) trainer_state_bytes_per_param(d->dtype_bytes, c->zero, dp * cp, &wb, &gb, &ob);
    else state_bytes_per_param(d, k->states_bf16, c->zero, dp * cp, &wb, &gb, &ob);
    // without sync (plan_sync_last) every layer's gradient is held unsharded from the first backward to the last
    // one's reduce-scatter, the forwards between them included; the sharded gradients are none until then
    if (plan_sync_last(c, k, m)) gb = held_grad_bytes(k, d);
    double host_per_param = offload_state_bytes(c, k->own_buffers, k->states_bf16, d->dtype_bytes, &wb, &ob);
    ModelConfig all_on_device = *c;  // this trainer's buffers without --offload activations
    all_on_device.offload &= ~OFFLOAD_ACTIVATIONS;
    double act_layer = act_bytes_per_layer(c, mb, tp, cp, c->sp, c->recompute, k, d->dtype_bytes);
    double act_full_layer = act_bytes_per_layer(c, mb, tp, cp, c->sp, RECOMPUTE_NONE, k, d->dtype_bytes);
    double w_in_layer = w_inputs_per_layer(c, mb, tp, cp, d->dtype_bytes);
    double w_keep_layer = w_in_layer + w_saved_inputs_per_layer(c, mb, tp, cp, d->dtype_bytes);  // a framework's M_W
    // The temporaries, which come and go at different moments of the step (the peak holds the
    // larger of them): the loss's at the start of its backward on the last stage (e + 16 bytes
    // per logit: loss_bytes_per_logit) with the final norm's input; a layer's backward under
    // unfused attention, dP and dS over the T x T scores (fp32 and a bf16 copy for torch,
    // bf16 for the fused softmax) for one layer at a time (with cp one ring block's, of
    // a/(t U) heads), with the layer's activations being rebuilt under full recomputation.
    // Besides them, all the time: context parallelism's buffers, shared by the layers
    // (layout/activations.h cp_bufs: the fp32 output (then dq) and a step's own dK, dV, two
    // ring buffers of K, V and fp32 dK, dV, with Ulysses the head-split q, k, v, output and
    // output gradient and the all-to-all's send and receive buffers); under ZeRO-3 two
    // gathered layers (the current one and the prefetched next).
    double loss_temp = n * V_loss * loss_bytes_per_logit(k, d->dtype_bytes) + n_el * h * e;
    double Tb = s / (cp / U), scores = mb * c->n_head / (t * U) * Tb * Tb;
    double attn_work = k->attention == ATTN_TORCH           ? scores * (8 + e)
                       : k->attention == ATTN_FUSED_SOFTMAX ? scores * 2 * e
                                                            : 0;
    int rebuilds = plan_recompute_whole(c->recompute) || c->recompute == RECOMPUTE_LAYER;  // a whole layer again
    double layer_temp = attn_work + (rebuilds ? act_full_layer : 0);
    double cp_buf = cp_buffer_bytes(c, k, e);
    double zero3_buf = c->zero == 3 ? 2 * chunk_params(c, 1, 0, 0, tp) * d->dtype_bytes : 0;
    if (c->zero == 3 && k->zero3_param_sync) {  // DeepSpeed 2021: up to its live limit, plus the module being fetched
        LayerMatmul mm[8];
        double largest = 0, live;
        for (int i = 0, n_mm = layer_matmuls(c, mm); i < n_mm; i++)
            if (mm[i].weight / tp > largest) largest = mm[i].weight / tp;
        live = (DS_MAX_LIVE_PARAMETERS + largest) * d->dtype_bytes;
        if (live < zero3_buf) zero3_buf = live;
    }
    // Each stage's peak (micro-batch, chunk) activations held (in_flight, to its W where the list has W ops) and peak
    // W's owed (w_pending). This trainer keeps a pair's buffers to its W (its own count); a framework's autograd frees
    // them at B but for what W reads (w_keep_layer, Qi et al. 2023's M_W): the largest held x activations + owed x
    // M_W over the list's moments (memory.h held_owed_frontiers; ZB-H1's stage s: p - s held, s owed).
    const PipeCounts* pc = pipe_counts(c, m);
    ActUnits units = {0, 0, 0, 0};  // this trainer's (trainer_act_scratch_bytes)
    double scratch = k->own_buffers ? trainer_act_scratch_bytes(c, d->dtype_bytes, d->sms, &units) : 0;
    for (int st = 0; st < pp; st++) {
        int stage_layers = 0, max_layers = 0, min_layers = INT_MAX, stage_embed = 0, stage_head = 0;
        for (int j = 0; j < vpp; j++) {
            int g = chunk_global(c->schedule, pp, st, j);  // ZB-V: stage 0 holds the first and the last chunk
            stage_layers += ch->layers[g];
            ch->stage_fwd[st] += ch->t_fwd[g], ch->stage_bwd[st] += ch->t_bwd[g] + ch->t_w[g];
            if (ch->layers[g] > max_layers) max_layers = ch->layers[g];
            if (ch->layers[g] < min_layers) min_layers = ch->layers[g];
            stage_embed |= ch->has_embed[g], stage_head |= ch->has_head[g];
        }
        double p = chunk_params(c, stage_layers, stage_embed, stage_head, tp);
        ch->stage_params[st] = p;
        int in_flight = offload_in_flight(c, pc->peaks[2 * st]), w_pending = pc->peaks[2 * st + 1];
        double w_in, act, temp, reserve, host_act;  // host_act: the activations --offload activations moves
        double grads = p * gb;  // the gradients held at the stage's peak: all of them, but under grads_lazy
        if (k->own_buffers) {
            // this trainer: its buffers as allocated (its logits are the head's buffers, its
            // attention keeps no T x T scores), cp's with them; once allocated they stay:
            // no allocator share
            w_in = 0;
            act = trainer_stage_act_bytes(c, scratch, &units, st, pc->chunks + st * vpp, ch->layers) + cp_buf;
            temp = trainer_zero_work_bytes(c, d->dtype_bytes, stage_embed, stage_head, tp, stage_layers) +
                   (c->zero <= 1 ? grad_reduce_scratch_bytes(k->grad_reduce_bf16, dp * cp) : 0);
            host_act = c->offload & OFFLOAD_ACTIVATIONS
                           ? trainer_stage_act_bytes(&all_on_device, scratch, &units, st, pc->chunks + st * vpp,
                                                     ch->layers) + cp_buf - act
                           : 0;
            reserve = d->mem_overhead;
        } else {
            w_in = w_pending * max_layers * w_in_layer;
            // (the embedding output is the first norm's input, counted there); interleaved chunks of different
            // sizes: the layers in flight at the stage's peak, not the pairs times the largest chunk (but for
            // --pp-split auto, whose cut is made by the largest chunk's bound: layout/params.h StageModel)
            double layers_held = (double)in_flight * max_layers;
            if (min_layers < max_layers && c->schedule == SCHED_INTERLEAVED && !c->pp_split &&
                !(c->offload & OFFLOAD_ACTIVATIONS))
                layers_held = (double)pipe_layers_held(c, m, ch->layers)[st];
            act = layers_held * act_layer + w_in;
            if (w_pending && !(c->offload & OFFLOAD_ACTIVATIONS)) {
                // autograd frees a pair's activations at its B but what its deferred W reads (memory.h
                // w_saved_inputs_per_layer and the output gradients): the list's moment of the most held and owed
                double best = 0, owed = 0;
                for (int i = pc->held_owed_at[st]; i < pc->held_owed_at[st + 1]; i++) {
                    double x = pc->held_owed[2 * i] * act_layer + pc->held_owed[2 * i + 1] * w_keep_layer;
                    if (x > best) best = x, owed = pc->held_owed[2 * i + 1];
                }
                act = max_layers * best, w_in = owed * max_layers * w_keep_layer;
            }
            host_act = (pc->peaks[2 * st] - in_flight) * max_layers * act_layer;
            if (k->grads_lazy && !w_pending && !c->pp_split && !(c->offload & OFFLOAD_ACTIVATIONS))
                act = plan_lazy_grads(c, ch, st, gb, m, act_layer, &grads);
            double peak_temp = stage_head && loss_temp > layer_temp ? loss_temp : layer_temp;
            temp = peak_temp + cp_buf + zero3_buf;
            reserve = d->mem_overhead + (k->alloc_share ? d->mem_frag : 0) * act;
        }
        double total = p * (wb + ob) + grads + act + temp + reserve;
        ch->stage_mem[st] = total;
        if (act > r->mem_act_max) r->mem_act_max = act;
        if (total > r->mem_total) {
            r->mem_total = total, r->worst_stage = st, r->in_flight = in_flight, r->w_pending = w_pending;
            r->mem_weights = p * wb, r->mem_grads = grads, r->mem_optim = p * ob;
            r->mem_act = act, r->mem_w_inputs = w_in, r->mem_temp = temp, r->mem_overhead = reserve;
        }
        double host = p * host_per_param + host_act;
        ch->stage_host[st] = host;
        if (host > r->mem_host) r->mem_host = host, r->mem_host_act = host_act;
    }
    // the host's rule beside the device's: what --offload moves must fit the GPU's share of it
    r->host_mem_bytes = d->host_mem_bytes;
    r->fits = r->mem_total <= d->mem_bytes && !(d->host_mem_bytes > 0 && r->mem_host > d->host_mem_bytes);
}

// --pp-split auto's model of layout c's stages (layout/params.h StageModel): a micro-batch's forward
// and backward (B + W) of a layer, the embedding and the head with its loss as plan_chunks adds them
// up, and plan_memory's bytes of each stage, probed with no layers and then with one layer in each
// chunk (this trainer's buffers grow linearly with a chunk's layers: its tensors, its activation
// slots; a framework's activations grow with the stage's largest chunk, for which this is the
// estimate of even chunks), within the device's memory.
static void stage_model_build(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, const EdgeTimes* et,
                              const PlanResult* r, StageModel* sm) {
    int pp = c->pp, n = pp * c->vpp;
    sm->layer = r->t_layer_fwd + r->t_layer_bwd;
    sm->embed = et->emb_fwd + et->emb_bwd, sm->head = et->head_fwd + et->head_bwd;
    sm->mem_limit = d->mem_bytes;
    sm->mem_base = (double*)xcalloc(pp, sizeof(double));
    sm->mem_layer = (double*)xcalloc(n, sizeof(double));
    PlanChunks ch = plan_chunks_alloc(n, pp);
    ch.has_embed[0] = 1, ch.has_head[n - 1] = 1;
    // a stage's memory depends on its own chunks only: probe j puts one layer in the j-th chunk of
    // every stage at once (j -1: none)
    for (int j = -1; j < c->vpp; j++) {
        PlanResult probe;
        memset(&probe, 0, sizeof(probe));
        probe.n_micro = r->n_micro;
        memset(ch.stage_fwd, 0, sizeof(double) * pp), memset(ch.stage_bwd, 0, sizeof(double) * pp);
        for (int g = 0; g < n; g++) ch.layers[g] = chunk_local(c->schedule, pp, g) == j;
        plan_memory(c, k, d, &ch, &probe);
        for (int g = 0; g < n; g++) {
            int st = chunk_stage(c->schedule, pp, g);
            if (j < 0) sm->mem_base[st] = ch.stage_mem[st];
            else if (ch.layers[g]) sm->mem_layer[g] = ch.stage_mem[st] - sm->mem_base[st];
        }
    }
    plan_chunks_free(&ch);
}
static void stage_model_free(StageModel* sm) { free(sm->mem_base), free(sm->mem_layer), free((int*)sm->cut); }

// Data parallelism. ZeRO-0: all-reduce the gradients once per step; ZeRO-1: reduce-scatter
// them (this trainer: all-reduce, a layer at a time) and all-gather the updated weights;
// ZeRO-2: reduce-scatter after every micro-batch (gradients are kept sharded); ZeRO-3: also
// all-gather the weights before each micro-batch's forward and backward. Once-per-step traffic
// hides under dp_overlap of one micro-batch's backward (gradients) / forward (weights);
// per-micro-batch traffic likewise, and what is not hidden stretches that micro-batch's compute
// (so the pipeline simulation sees it). The
// group is the dp x cp ranks that hold the same weights. Sets r->t_dp_comm, r->t_dp_exposed.
// What of data-parallel traffic x is exposed: the part in the chunk no pass is left to hide (frac; 1 unless chunked)
// in full, the rest as far as the window `win` hides it.
static double dp_exposed(double x, double win, double frac, double ci) {
    return frac < 1 ? frac * x + comm_exposed((1 - frac) * x, win, ci) : comm_exposed(x, win, ci);
}

// This trainer's ZeRO 0/1 all-reduce of stage st's gradients (x in all), a layer at a time as
// each layer's gradient is final (parallel/data_parallel.h dp_layer_grads_done, at the step's
// last micro-batch), on one stream in backward order: an untied head's as the last backward
// starts (head_grad_early), each layer's after its backward (its chunk's backward and weight
// times spread evenly over its layers; chunks in backward order, the other stages' work between
// them not counted), the embeddings' (and a tied head's) after the schedule. A layer's share of x
// is its share of the parameters. Exposed: how far the queue runs past the backward's end (at
// least the last layer's reduction: the one nothing is left to hide), plus the interference of
// the hidden rest. Only where the device overlaps at all (dp_overlap > 0: the GPU build's NCCL
// stream; the CPU build's MPI all-reduce blocks).
static double dp_layers_exposed(const ModelConfig* c, double ci, const PlanChunks* ch, int st, double x) {
    int stage_head = 0;
    for (int j = 0; j < c->vpp; j++) stage_head |= ch->has_head[chunk_global(c->schedule, c->pp, st, j)];
    double P = ch->stage_params[st], per_param = P > 0 ? x / P : 0, layer = chunk_params(c, 1, 0, 0, c->tp);
    double head = stage_head && c->arch == ARCH_LLAMA ? chunk_params(c, 0, 0, 1, c->tp) : 0;
    double t = 0, queue = head * per_param, layers_all = 0;  // the head's reduction starts at the backward's start
    for (int j = c->vpp - 1; j >= 0; j--) {  // backward order (chunk_global grows with the local chunk)
        int g = chunk_global(c->schedule, c->pp, st, j), L = ch->layers[g];
        double chunk_b = ch->t_bwd[g] + ch->t_w[g];
        if (L == 0) t += chunk_b;
        for (int l = 0; l < L; l++, layers_all++) {
            t += chunk_b / L;
            queue = (queue > t ? queue : t) + layer * per_param;
        }
    }
    double late = P - head - layers_all * layer;  // the embeddings' (and a tied head's) parameters
    queue = (queue > t ? queue : t) + (late > 0 ? late * per_param : 0);
    double exposed = queue - t;
    return exposed + ci * (x - exposed);
}

// One gather of a weight tensor of S elements (e bytes each) over n ranks as DeepSpeed's ZeRO-3 ran it in 2021
// (zero3_param_sync; partition_parameters.py _allgather_param at v0.3.13-v0.5.x): the full tensor allocated
// zeroed (torch.zeros: S e written), NCCL's ring, then PyTorch's list all_gather (ProcessGroupNCCL::allgather)
// copies each of the n ranks' chunks out of its flat buffer, one copy kernel each (2 S e read and written). A
// gradient's reduce-scatter (_reduce_scatter_gradient) passes a list of n chunks, which PyTorch copies into a flat
// buffer first: the same n copies, no zeroing, after stage3.py average_tensor has divided the whole gradient by the
// group's size in place (tensor.div_ on each tensor of its list, v0.3.13-v0.5.x: S e read and written). That is the
// contiguous-gradients path, which every published ZeRO-3 configuration of 2021 sets (docs/_tutorials/zero.md at
// v0.3.13 and v0.3.16): a weight over reduce_bucket_size (3e6 and 1e7 there) is reduced on its own as
// extra_large_param_to_reduce, the small tensors share the contiguous buffer. Between the torch.cuda.synchronize()
// and the all_gather a gather's Python loop makes one view per rank (flat_tensor.narrow) and asks for the rank
// (get_rank) with the device idle: n turns of DS_GATHER_LOOP_CALLS PyTorch calls on the host, exposed.
// (A reduce-scatter's loop, param.grad.view(-1).narrow per rank, runs in the backward's gradient hook while the device
// still works through the gather and the module's backward queued before it: not counted.)
static double ds_tensor_collective(const DeviceProfile* d, int n, double S, double e, int gather, Link l) {
    if (n <= 1) return 0;
    double zeroed = gather ? S * e / (d->hbm_bw * d->hbm_eff) : 0;
    double host = gather ? n * DS_GATHER_LOOP_CALLS * PYTORCH_CALL_S : 0;
    double divided = gather ? 0 : elementwise_time(d, 2 * S * e);
    return zeroed + host + divided + dp_gather_time(n, S * e, 1, l) + n * elementwise_time(d, 2 * S * e / n);
}
// Stage st's ZeRO-3 traffic per micro-batch under zero3_param_sync: every partitioned weight tensor gathered before
// the forward and again before the backward; every tensor's gradient reduce-scattered after it, each its own
// collective (_reduce_scatter_gradients loops over the bucket's tensors), the small ones kept whole between steps
// (biases, norms: gathered once a step, not counted) too (e_w, e_g: bytes of a weight and of a reduced gradient).
// Under full recomputation the backward runs each layer's forward again first (its modules' forward hooks gather
// them) and then its backward, and every tensor is gathered a third time for the backward: nothing is kept between
// the two. From v0.3.14 (#867, 7 April 2021: setup_zero_stage3_hooks registers the step counter's reset on the model
// after the per-module hooks) the model's own pre-forward hook counts a step before the reset, so each module's step
// is one behind its place in the recorded trace; stage3.py get_reuse_distance_in_numel then finds no match ("Tracing
// failed. Cannot tell if the sub_module is reused") and returns 1e12, over stage3_max_reuse_distance, so
// _keep_for_later releases every module after it runs, and get_params_to_prefetch returns nothing (DeepSpeed #1069,
// May 2021: "this causes the rest of the step ids in the forward pass to be off by 1, which was causing the
// prefetches to be skipped"); unchanged to v0.5.10, rewritten in 2022 (#1453).
// torch.cuda.synchronize() before each gather (DeepSpeed #1188: "the async version is not async at all") waits for
// all the device's work, the reduce-scatters' stream too: none of it overlaps compute.
static void zero3_param_sync_time(const ModelConfig* c, const DeviceProfile* d, const PlanChunks* ch, int st, int n,
                                  Link l, double e_w, double e_g, double* fwd, double* bwd) {
    LayerMatmul mm[8];
    int n_mm = layer_matmuls(c, mm), layers = 0, embed = 0, head = 0;
    for (int j = 0; j < c->vpp; j++) {
        int g = chunk_global(c->schedule, c->pp, st, j);
        layers += ch->layers[g], embed |= ch->has_embed[g], head |= ch->has_head[g];
    }
    double ag = 0, rs = 0, h = c->d_model;
    for (int i = 0; i < n_mm; i++) {  // a layer's weight matrices, each its own collective (tp slices under tp)
        double S = mm[i].weight / c->tp;  // column- and row-parallel alike slice the weight
        rs += layers * ds_tensor_collective(d, n, S, e_g, 0, l);
        if (c->arch == ARCH_GPT2)  // its bias: split with a column-parallel output, whole with a row-parallel one
            rs += layers * ds_tensor_collective(d, n, mm[i].split ? mm[i].out / c->tp : mm[i].out, e_g, 0, l);
        if (S >= DS_PERSISTENCE_THRESHOLD) ag += layers * ds_tensor_collective(d, n, S, e_w, 1, l);
    }
    // the norms' weights (GPT-2: two LayerNorms' weight and bias; LLaMA: two RMSNorm weights), h each
    rs += layers * (c->arch == ARCH_GPT2 ? 4 : 2) * ds_tensor_collective(d, n, h, e_g, 0, l);
    double again = plan_recompute_whole(c->recompute) ? 2 * ag : ag;  // the layers' gathers in the backward
    double ends = chunk_params(c, 0, embed, head, c->tp);  // the embedding (and an untied head): one tensor each,
    int n_ends = embed + (head && (c->arch == ARCH_LLAMA || !embed));  // outside the recomputed layers
    if (n_ends > 0 && ends / n_ends >= DS_PERSISTENCE_THRESHOLD) {
        double one = n_ends * ds_tensor_collective(d, n, ends / n_ends, e_w, 1, l);
        ag += one, again += one, rs += n_ends * ds_tensor_collective(d, n, ends / n_ends, e_g, 0, l);
    }
    *fwd = ag, *bwd = again + rs;
}

// The weight tensors of stage st's chunks (time.h chunk_tensors: nanotron's modules).
static int stage_tensors(const ModelConfig* c, const PlanChunks* ch, int st) {
    int n = 0;
    for (int j = 0; j < c->vpp; j++) {
        int g = chunk_global(c->schedule, c->pp, st, j);
        n += chunk_tensors(ch->layers[g], ch->has_embed[g], ch->has_head[g]);
    }
    return n;
}

// PyTorch DDP's gradient buckets of stage st (DistributedDataParallel(bucket_cap_mb = ddp_bucket_cap_mb), whose
// comm hook nanotron's ZeRO-0 all-reduce is: one all_reduce_coalesced a bucket). After the first step DDP rebuilds its
// buckets in the order the backward makes the gradients (reducer.cpp rebuild_buckets,
// compute_bucket_assignment_by_size at PyTorch 2.1): each bucket takes the next tensors until it holds at least its
// limit of bytes in the weights' dtype (e), the first 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES), every later one
// cap_bytes. The tensors are nanotron's modules (time.h chunk_tensors) in backward order: the head, the final norm,
// each layer's down, gate_up, post-attention norm, o, qkv, input norm from the last layer down, the embedding (a tied
// embedding and head on one stage are one tensor there: one bucket fewer at most).
#define DDP_FIRST_BUCKET_BYTES (1024.0 * 1024)
static int ddp_bucket_count(const ModelConfig* c, const PlanChunks* ch, int st, double e, double cap_bytes) {
    double C = c->d_model, F = c->d_ff, t = c->tp, kv = c->n_kv_head * (C / c->n_head), V = c->vocab_padded;
    double layer[6] = {C * F / t, 2 * C * F / t, C, C * C / t, (C + 2 * kv) * C / t, C};
    double fill = 0, limit = DDP_FIRST_BUCKET_BYTES;
    int buckets = 0;
    for (int j = c->vpp - 1; j >= 0; j--) {
        int g = chunk_global(c->schedule, c->pp, st, j), n_head = 2 * ch->has_head[g], n_layers = 6 * ch->layers[g];
        for (int i = 0; i < n_head + n_layers + ch->has_embed[g]; i++) {
            double w = i < n_head ? (i == 0 ? V * C / t : C) : i < n_head + n_layers ? layer[(i - n_head) % 6]
                                                                                     : V * C / t;
            fill += w * e;
            if (fill >= limit) buckets++, fill = 0, limit = cap_bytes;
        }
    }
    return buckets + (fill > 0);
}

// nanotron's ZeRO-1 host loop on stage st (zero1_list_collectives), in PyTorch calls from Python (PYTORCH_CALL_S
// each), over its n tensors and the dp x cp ranks (replicas): the weights' all-gather at the end of the optimizer's
// step (optim/zero.py _all_gather_params, all_gather_coalesced): a slice of each tensor per rank, the flat copies of
// them (a view(-1) each) and the copies back (a copy_ each): 3 x replicas x n calls. The per-rank cat calls are not
// counted.
static double zero1_gather_host_calls(const ModelConfig* c, const PlanChunks* ch, int st, int replicas) {
    return 3.0 * stage_tensors(c, ch, st) * replicas;
}

// A list collective's copies on the device: `bytes` read and written at HBM's rate, in `kernels` copy kernels.
static double list_copy_time(const DeviceProfile* d, double bytes, double kernels) {
    return 2 * bytes / (d->hbm_bw * d->hbm_eff) + kernels * d->op_latency;
}

// nanotron's data-parallel traffic of stage st (zero1_list_collectives; ZeRO 0 or 1, G and W: the stage's fp32
// gradient and bf16 weight bytes), nothing at dp 1 (sync_gradients_across_dp and _all_gather_params return first).
// ZeRO-0 runs under DDP, whose hook fires a bucket at a time during the last micro-batch's backward
// (ddp_bucket_count) and all-reduces each of the bucket's tensors (all_reduce_coalesced), so all but the last
// bucket's share (*frac) hides under that backward. ZeRO-1 with fp32 accumulation runs without DDP (trainer.py
// init_model: make_ddp = dp > 1 and not (accumulate_grad_in_fp32 and zero_stage > 0), at 67c5ebb6 and c2528430):
// after the pipeline, training_step's sync_gradients_across_dp all-reduces the stage's contiguous fp32 gradient
// buffer in one collective (reduce_scatter=False: "This is too memory hungry, instead we run all_reduce"), nothing
// left to hide it under (*frac 1); the optimizer's step then gathers the weights, waited for (*once_f). The gather's
// list calls copy on the device (PyTorch 2.1): it flattens each rank's slices (a cat per rank), copies NCCL's flat
// output back to the per-rank buffers (ProcessGroupNCCL::allgather's copy per rank) and update_output copies every
// slice into its tensor (a copy_ per tensor and rank): 3 W read and written, beside the host's loop (the slower of the
// two counts).
static void nanotron_dp_traffic(const ModelConfig* c, const DeviceProfile* d, const PlanChunks* ch, int st,
                                int replicas, double G, double W, Link l, double* once_b, double* once_f,
                                double* frac) {
    int buckets = ddp_bucket_count(c, ch, st, d->dtype_bytes, NANOTRON_DDP_BUCKET_BYTES), n = stage_tensors(c, ch, st);
    *once_b = *once_f = 0, *frac = 1.0 / (buckets > 0 ? buckets : 1);
    if (replicas <= 1) return;
    if (c->zero == 0) {
        *once_b = dp_allreduce_time(replicas, G, n, l);
        return;
    }
    *frac = 1, *once_b = dp_allreduce_time(replicas, G, 1, l);
    double gather_copies = list_copy_time(d, 3 * W, (2.0 + n) * replicas);
    *once_f = dp_gather_time(replicas, W, 1, l) +
              fmax(zero1_gather_host_calls(c, ch, st, replicas) * PYTORCH_CALL_S, gather_copies);
}

// Megatron-core's chunked data-parallel traffic under the interleaved schedule (pp > 1, vpp > 1), read from
// its schedule (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving, at
// Megatron-LM f2e5db40): micro-batches run in groups of pp per chunk, so chunk j's gradients are final when the
// last group's backward reaches it, j x pp chunk-backwards before the end, and stage r launches their reduce-
// scatter r backwards later (grad_sync_microbatch_id = microbatch_id - pipeline_parallel_rank); chunk 0's and
// any not yet launched go at the end. Chunks 0 and 1 gather their weights at the start, chunk j >= 2 as the
// forward reaches chunk j - 1's first micro-batch, r forwards early (param_sync_microbatch_id = microbatch_id +
// pipeline_parallel_rank: r0.8 under --delay-param-gather, NeMo 2.0's align_param_gather; r0.8's default chains
// them from the forward pre-hooks instead, at most 0.03 points apart on its README's rows: dev/PLANNER.md); chunk j
// needs them at its first forward, j x pp chunk-forwards in. One communicator:
// the transfers queue. rs, ag: one chunk's transfer; b, f: one chunk's backward and forward of one micro-batch.
// Exposed: the reduce-scatters' queue past the end plus the waits for gathers, and ci (the software's NCCL
// interference, software_nccl_interference) of the rest.
static double dp_interleaved_exposed(double rs, double ag, double b, double f, int pp, int vpp, int r, double ci) {
    double queue = -1e30;  // time the communicator is free, from the end of the last backward (0)
    for (int j = vpp - 1; j >= 0; j--)  // chunk j's reduce-scatter launched (j pp - r) backwards before the end
        queue = fmax(queue, fmin(-(j * pp - r) * b, 0)) + rs;
    double exposed_rs = fmax(queue, 0);
    double free_at = 0, wait = 0;  // from the start of the first forward; wait: the forward's stall so far
    for (int j = 0; j < vpp; j++) {
        double launch = j < 2 ? 0 : fmax((j - 1) * pp - r, 0) * f + wait;
        free_at = fmax(free_at, launch) + ag;
        double need = j * pp * f + wait;
        if (free_at > need) wait += free_at - need;
    }
    double exposed = exposed_rs + wait;
    return exposed + ci * (vpp * (rs + ag) - exposed);
}

// FSDP2's copy-out of one all-gather of a stage's weights (W bytes over `groups` FSDP groups: a layer each, the
// embedding, the head): foreach_all_gather_copy_out waits on the gather, then torch.split_with_sizes_copy copies the
// flat output into each parameter's unsharded tensor on the compute stream (pytorch/pytorch
// torch/distributed/_composable/fsdp/_fsdp_collectives.py at 01d66d21): W read and W written, a kernel a group.
// FSDP1 all-gathers into its flat parameter, whose views the layers use: nothing to copy.
static double gather_copy_out_time(const DeviceProfile* d, double W, double groups) {
    return 2 * W / (d->hbm_bw * d->hbm_eff) + groups * d->op_latency;
}

static void plan_dp_time(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, Link dp_link, PlanChunks* ch,
                         PlanResult* r) {
    int pp = c->pp, vpp = c->vpp, m = r->n_micro;
    double exposed_step = 0, dp_comm = 0;
    int replicas = c->dp * c->cp;
    double ci = software_nccl_interference(k, d);  // what the hidden part of a collective costs the compute under it
    for (int st = 0; st < pp; st++) {
        // the gradients reduced in the software's dtype (reduce_bytes: FSDP2's fp32; this trainer's
        // --grad-reduce bf16 under ZeRO 0|1: 2), else as accumulated
        double G = ch->stage_params[st] * (k->grad_reduce_bf16 && c->zero <= 1 ? 2
                                           : k->reduce_bytes               ? k->reduce_bytes
                                                                           : d->grad_bytes),
               W = ch->stage_params[st] * d->dtype_bytes;
        double buckets = 2;  // one bucket per layer, plus the embedding / head
        for (int j = 0; j < vpp; j++) buckets += ch->layers[chunk_global(c->schedule, pp, st, j)];
        double rs = dp_gather_time(replicas, G, buckets, dp_link), ag = dp_gather_time(replicas, W, buckets, dp_link);
        double overlap = k->dp_after_backward ? 0 : d->dp_overlap;
        double win_b = overlap * ch->stage_bwd[st], win_f = overlap * ch->stage_fwd[st];
        double once_b = 0, once_f = 0, per_mb_f = 0, per_mb_b = 0;
        // chunked (Megatron-core's --overlap-grad-reduce / --overlap-param-gather): one chunk per layer, per
        // virtual stage under pipelining (communication-overlap.md), runs as the pass reaches it; the last
        // chunk of the backward (first of the forward) has nothing left to hide under; nanotron's DDP buckets alike
        double frac = 1;  // (unchunked: the device's dp_overlap window, comm_exposed alone)
        if (k->zero1_list_collectives && c->zero <= 1) {  // nanotron (no window for its gather after the step)
            nanotron_dp_traffic(c, d, ch, st, replicas, G, W, dp_link, &once_b, &once_f, &frac);
            win_b = (1 - frac) * ch->stage_bwd[st], win_f = 0;
        } else if (c->zero == 0)
            once_b = dp_allreduce_time(replicas, G, buckets, dp_link);
        else if (c->zero == 1 && k->own_buffers)  // this trainer all-reduces each layer (data_parallel.h)
            once_b = dp_allreduce_time(replicas, G, buckets, dp_link), once_f = ag;
        else if (c->zero == 1) once_b = rs, once_f = ag;
        else if (c->zero == 2) once_f = ag, per_mb_b = rs;
        else per_mb_f = ag, per_mb_b = ag + rs;
        if (c->zero == 3 && k->zero3_param_sync)
            zero3_param_sync_time(c, d, ch, st, replicas, dp_link, d->dtype_bytes, G / ch->stage_params[st], &per_mb_f,
                                  &per_mb_b);
        // without sync (plan_sync_last) the reduce-scatter runs under the last micro-batch's backward alone
        int sync_last = plan_sync_last(c, k, m);
        double comm = once_b + once_f + m * (per_mb_f + per_mb_b) - (sync_last ? (m - 1) * rs : 0);
        if (comm > dp_comm) dp_comm = comm;
        int stage_layers = 0;
        for (int j = 0; j < vpp; j++) stage_layers += ch->layers[chunk_global(c->schedule, pp, st, j)];
        double layer_frac = 1.0 / (stage_layers > 0 ? stage_layers : 1);
        if (k->dp_overlap_chunked) {
            frac = pp == 1 ? layer_frac : 1.0 / vpp;
            win_b = (1 - frac) * ch->stage_bwd[st], win_f = (1 - frac) * ch->stage_fwd[st];
        }
        int per_layer = k->own_buffers && c->zero <= 1 && d->dp_overlap > 0 && !k->dp_after_backward;
        double exposed = (per_layer ? dp_layers_exposed(c, ci, ch, st, once_b) : dp_exposed(once_b, win_b, frac, ci)) +
                         dp_exposed(once_f, win_f, frac, ci);
        if (k->dp_overlap_chunked && pp > 1 && vpp > 1)
            exposed = dp_interleaved_exposed(once_b / vpp, once_f / vpp, ch->stage_bwd[st] / vpp,
                                             ch->stage_fwd[st] / vpp, pp, vpp, st, ci);
        if (exposed > exposed_step) exposed_step = exposed;
        // ZeRO-3 as FSDP and DeepSpeed run it (zero3_layer_prefetch): a layer's weights are gathered while the layer
        // before it computes, and in the backward the next layer's gather and this one's reduce-scatter (serialized on
        // one communicator: their sum, per_mb_b) run under this layer's backward; only the first layer's chunk of each
        // pass has nothing to hide under. Else the device's dp_overlap window, as the once-per-step traffic.
        double frac_mb = frac, win_mb_f = win_f, win_mb_b = win_b;
        if (c->zero == 3 && k->zero3_layer_prefetch && !k->dp_overlap_chunked && !k->dp_after_backward) {
            frac_mb = layer_frac;
            win_mb_b = (1 - frac_mb) * ch->stage_bwd[st], win_mb_f = (1 - frac_mb) * ch->stage_fwd[st];
        }
        if (c->zero == 3 && k->zero3_param_sync) frac_mb = 1, win_mb_f = win_mb_b = 0;  // all of it exposed
        // stretch this stage's chunks by the exposed per-micro-batch part, pro rata (the
        // backward's over B and W alike)
        double sf = dp_exposed(per_mb_f, win_mb_f, frac_mb, ci), sb = dp_exposed(per_mb_b, win_mb_b, frac_mb, ci);
        // without sync the other m - 1 backwards expose what is left of theirs (ZeRO-3's gather), on average over the
        // micro-batches (one stage: the step's sum; under a pipeline, spread over its backwards)
        if (sync_last) sb = ((m - 1) * dp_exposed(per_mb_b - rs, win_mb_b, frac_mb, ci) + sb) / m;
        if (c->zero == 3 && k->gather_copy_out && replicas > 1) {  // the forward's gather and the backward's again
            double copy = gather_copy_out_time(d, W, buckets);
            sf += copy, sb += copy;
        }
        for (int j = 0; j < vpp && (sf > 0 || sb > 0); j++) {
            int g = chunk_global(c->schedule, pp, st, j);
            ch->t_fwd[g] += sf * ch->t_fwd[g] / ch->stage_fwd[st];
            ch->t_bwd[g] += sb * ch->t_bwd[g] / ch->stage_bwd[st];
            ch->t_w[g] += sb * ch->t_w[g] / ch->stage_bwd[st];
        }
    }
    r->t_dp_comm = dp_comm, r->t_dp_exposed = exposed_step;
}

// The pipeline: play the real schedule. A message is the (s, b, h) activation or its
// gradient; with SP each tp rank sends its 1/t slice; the sends hold their sender as the software's exchange does
// (pipe_send_wait). Sets r->t_p2p, r->t_pipeline and the busiest stage's bubble.
static void plan_pipeline_time(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, Link pp_link,
                               const PlanChunks* ch, PlanResult* r) {
    int dp = c->dp, tp = c->tp, pp = c->pp, vpp = c->vpp, cp = c->cp, m = r->n_micro;
    double x_bytes = (double)c->micro_batch * c->seq_len / cp * c->d_model * d->dtype_bytes;
    r->t_p2p = pp > 1 ? (c->sp ? x_bytes / tp : x_bytes) / pp_link.bw + pp_link.lat : 0;
    double* busy = (double*)xcalloc(pp, sizeof(double));
    double* t_build = (double*)xmalloc(sizeof(double) * 3 * ch->n);
    chunk_op_flops(c, pp, vpp, t_build);  // the lists are the runtime's: built for the chunks' FLOPs
    // Megatron-core overlaps the steady state's sends only under virtual stages: its plain 1F1B waits on each one
    int send_wait = k->pipe_send_wait == SENDS_WAIT_ENDS && vpp == 1 ? SENDS_WAIT : k->pipe_send_wait;
    r->t_pipeline =
        schedule_simulate(c->schedule, pp, vpp, m, t_build, ch->t_fwd, ch->t_bwd, ch->t_w, r->t_p2p, send_wait, busy);
    free(t_build);

    double max_busy = 0, sum_busy = 0;
    for (int st = 0; st < pp; st++) sum_busy += busy[st], max_busy = busy[st] > max_busy ? busy[st] : max_busy;
    r->bubble = bubble_fraction(r->t_pipeline, max_busy);
    if (d->shared_cores > 0) {
        // Ranks time-sharing K cores: a rank idle in the bubble gives its core to the others,
        // so the step is the longer of the schedule's critical path and the total work of all
        // ranks spread over the K cores (each rank uses max(1, K/world) of them while busy).
        double world = (double)dp * cp * tp * pp, K = d->shared_cores, threads = K / world > 1 ? K / world : 1;
        double spread = (double)dp * cp * tp * sum_busy * threads / K;
        if (spread > r->t_pipeline) r->t_pipeline = spread;
    }
    r->bubble_formula = bubble_formula(c->schedule, pp, vpp, m);
    free(busy);
}

enum { PLAN_TIME_FITTING, PLAN_TIME_ALL, PLAN_TIME_BOUND };
// Or'ed into plan_predict_ex's time_oom: a --pp-split auto layout whose cut is the even one is not
// predicted (the search has the even layout beside it)
enum { PLAN_UNEVEN_ONLY = 4 };

// A lower bound on the makespan plan_pipeline_time finds, without playing the schedule: no
// stage finishes before it has computed all its ops (and ranks time-sharing cores no sooner
// than their work spread over the cores). Sets r->t_pipeline to it.
static void plan_pipeline_bound(const ModelConfig* c, const DeviceProfile* d, const PlanChunks* ch, PlanResult* r) {
    int pp = c->pp, m = r->n_micro;
    double max_busy = 0, sum_busy = 0;
    for (int st = 0; st < pp; st++) {
        double busy = 0;
        for (int j = 0; j < c->vpp; j++) {
            int g = chunk_global(c->schedule, pp, st, j);
            busy += m * (ch->t_fwd[g] + ch->t_bwd[g] + ch->t_w[g]);
        }
        sum_busy += busy, max_busy = busy > max_busy ? busy : max_busy;
    }
    r->t_pipeline = max_busy;
    if (d->shared_cores > 0) {  // as plan_pipeline_time
        double world = (double)c->dp * c->cp * c->tp * pp, K = d->shared_cores, threads = K / world > 1 ? K / world : 1;
        double spread = (double)c->dp * c->cp * c->tp * sum_busy * threads / K;
        if (spread > r->t_pipeline) r->t_pipeline = spread;
    }
}

// The optimizer step and the step's totals: throughput, MFU and HFU.
static void plan_throughput(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, int global_batch,
                            const PlanChunks* ch, PlanResult* r) {
    // optimizer: AdamW over the local shard, bandwidth-bound: read master, m, v, grad;
    // write master, m, v, weight (+ one read of the gradients for the norm)
    double opt_params = 0;
    for (int st = 0; st < c->pp; st++) if (ch->stage_params[st] > opt_params) opt_params = ch->stage_params[st];
    if (c->zero >= 1) opt_params /= c->dp * c->cp;
    double master = d->dtype_bytes < 4 && !k->states_bf16 ? 4 : 0, moments = k->states_bf16 ? 2 + 2 : 8;
    double opt_bytes = opt_params * ((master + moments + 2.0 * d->grad_bytes) + (master + moments + d->dtype_bytes));
    r->t_optim = elementwise_time(d, opt_bytes) + 10 * d->op_latency;
    // the software's passes over the stage's whole gradient buffer (grad_buffer_passes), in the buffer's dtype; the
    // 1/dp scaling (a read and a write) only where there is more than one replica
    double stage_params = opt_params * (c->zero >= 1 ? c->dp * c->cp : 1);
    double g = k->reduce_bytes ? k->reduce_bytes : d->grad_bytes;
    int passes = k->grad_buffer_passes - (c->dp * c->cp > 1 ? 0 : 2);
    if (passes > 0) r->t_optim += elementwise_time(d, passes * g * stage_params);
    // fp32 accumulation buffers (grad_accum_pass) each step: clipped by the global norm and zeroed. nanotron's
    // clip_grad_norm (clip_grad 1.0 in the benchmarks' config; optim/clip_grads.py: a vector_norm of every fp32
    // gradient buffer of the stage, ZeRO-1 or not, then a mul_ of each by the clipping coefficient) and its
    // accumulator's zero_grad (the contiguous buffer zeroed); DeepSpeed's BF16_Optimizer.step the same
    // (get_global_norm_of_tensors, clip_tensors_by_global_norm, clear_hp_grads' flat zero_; BLOOM's --clip-grad 1.0):
    // 4 + 8 + 4 bytes a parameter, two kernels a tensor and the zeroing, on the slowest stage
    double clip = 0;
    for (int st = 0; st < c->pp && k->grad_accum_pass; st++)
        clip = fmax(clip, elementwise_time(d, 16 * ch->stage_params[st]) +
                              2.0 * stage_tensors(c, ch, st) * d->op_latency);
    r->t_optim += clip;
    if (c->offload & OFFLOAD_OPTIMIZER) r->t_optim = offload_optimizer_time(d, opt_params, k->states_bf16 ? 6 : 12);
    r->t_optim += offload_activation_time(c, d, r->n_micro, r->n_micro * (ch->stage_fwd[0] + ch->stage_bwd[0]));

    r->t_step = r->t_pipeline + r->t_dp_exposed + r->t_optim;
    double s = c->seq_len, h = c->d_model, L = c->n_layer;
    double gpus = (double)c->dp * c->cp * c->tp * c->pp, tokens = (double)global_batch * s;
    r->tokens_per_s_per_gpu = tokens / r->t_step / gpus;
    double flops_token = config_flops_per_token(c, c->seq_len);
    // HFU adds the recomputed forward FLOPs: full and selective as the runtime counts them
    // (config_recompute_flops_per_token), torchtitan's layer and op policies here
    double layer_mm = (config_matmul_params(c) - (double)c->vocab * h) / L;
    double hw_token = flops_token + (c->recompute == RECOMPUTE_LAYER ? L * (layer_mm + 2 * h * s)
                                     : c->recompute == RECOMPUTE_OP  ? L * 2 * layer_mm * op_recompute_share(c)
                                     : plan_recompute_whole(c->recompute) ? L * (2 * layer_mm + 4 * h * s)
                                                                     : config_recompute_flops_per_token(c, c->seq_len));
    r->model_tflops_per_gpu = flops_token * r->tokens_per_s_per_gpu / 1e12;
    r->mfu = flops_token * r->tokens_per_s_per_gpu / d->peak_flops;
    r->hfu = hw_token * r->tokens_per_s_per_gpu / d->peak_flops;
}

// The matmuls run at the software's rate: this trainer's own cuBLASLt calls were measured
// (matmul_eff_own), the layouts study's codebase's was fitted to its runs (matmul_eff_scaling), a
// framework's is the device's matmul_eff. The gradients are the software's own precision where it
// has one (this trainer's fp32), else the device's. Every tensor-core rate runs at the clock the device's
// power limit sustains (tensor_clock; the memory-bound ops, HBM's, are not the SMs' clock).
static DeviceProfile plan_software_device(const PlanSetup* k, const DeviceProfile* dev) {
    DeviceProfile d = *dev;
    if (k->own_kernels) d.matmul_eff = dev->matmul_eff_own;
    else if (k->matmul_scaling) d.matmul_eff = dev->matmul_eff_scaling;
    if (k->grad_bytes) d.grad_bytes = k->grad_bytes;
    if (k->nccl_release) d.nccl = nccl_model_of(k->nccl_release);  // the run's NCCL release (time.h group_link_nested)
    double* rates[] = {&d.matmul_eff, &d.attn_eff_flash1, &d.attn_eff_flash2, &d.attn_eff_flash3, &d.attn_eff_own,
                       &d.bmm_eff};
    for (int i = 0; i < (int)(sizeof(rates) / sizeof(rates[0])); i++) *rates[i] *= dev->tensor_clock;
    return d;
}

// The first part of a prediction: the layout's check, its links, and the times of one micro-batch
// through a layer and through the ends (into r: n_micro, the layer's times). Returns 0, or -1 with
// r->invalid saying why the layout cannot run.
static int plan_unit_times(const ModelConfig* c, const PlanSetup* k, int global_batch, int gpus_per_node,
                           const DeviceProfile* d, PlanResult* r, PlanLinks* links, LayerTime* lt, EdgeTimes* et) {
    memset(r, 0, sizeof(*r));
    r->dp = c->dp, r->tp = c->tp, r->pp = c->pp, r->vpp = c->vpp, r->micro_batch = c->micro_batch;
    r->recompute = c->recompute, r->sp = c->sp, r->zero = c->zero, r->schedule = c->schedule, r->setup = *k;
    r->pp_split = c->pp_split;
    r->cp = c->cp, r->cp_ulysses = c->cp_ulysses;
    if (plan_check_layout(c, k, global_batch, r)) return -1;
    if (gpus_per_node < 1) gpus_per_node = c->dp * c->cp * c->tp * c->pp;
    *links = plan_links(c, k, d, gpus_per_node, r);
    *lt = layer_time(c, c->micro_batch, c->tp, c->sp, c->cp, c->cp_ulysses, k, d, links->tp, links->ring, links->a2a);
    // selective_op redoes its share of the matmuls with the norms and elementwise ops around them,
    // not the attention nor the tensor-parallel collectives (torchtitan saves their outputs)
    // full_distributed first all-gathers the layer input each rank kept a 1/tp slice of (lt->regather)
    lt->regather = c->recompute == RECOMPUTE_FULL_DIST
                       ? link_gather_time(c->tp, (double)c->micro_batch * c->seq_len / c->cp * c->d_model *
                                                     d->dtype_bytes, links->tp)
                       : 0;
    double recompute_extra = plan_recompute_whole(c->recompute)    ? lt->fwd + lt->regather
                             : c->recompute == RECOMPUTE_SELECTIVE ? lt->attn_fwd
                             : c->recompute == RECOMPUTE_LAYER     ? lt->fwd / 2
                             : c->recompute == RECOMPUTE_OP
                                 ? (lt->fwd - lt->attn_fwd - lt->comm_fwd_charged) * op_recompute_share(c)
                                 : 0;
    // recomputation is B's
    r->t_layer_fwd = lt->fwd, r->t_layer_bwd = lt->bwd + recompute_extra, r->t_layer_w = lt->bwd_w;
    *et = edge_times(c, k, d, links->tp);
    return 0;
}

// Predict one layout. layout_cfg: a finalized model config whose dp, tp, pp, cp, cp_ulysses,
// vpp, sp, zero, schedule, recompute and micro_batch fields give the layout (dp x cp x tp x
// pp GPUs); k: the kernels, rank order and pipeline cut; global_batch in sequences of
// layout_cfg->seq_len tokens.
// time_oom PLAN_TIME_FITTING (0): a layout that does not fit gets its memory only (out->timed
// = 0), which spares the enumeration most of its pipeline simulations; PLAN_TIME_ALL (1):
// every layout is timed; PLAN_TIME_BOUND: no simulation, a fitting layout gets a lower bound
// on its step instead (plan_pipeline_bound; out->timed = 0), what the search prunes with.
// With PLAN_UNEVEN_ONLY or'ed in, an auto layout returns -1 where its cut is the even one (the same
// layout) or where no cut can fit in memory (cut_can_fit: the even layout, also too large, stands for it).
// Returns 0, or -1 with out->invalid saying why the layout cannot run (memory is not a
// reason: see out->fits).
static int plan_predict_ex(const ModelConfig* layout_cfg, const PlanSetup* k, int global_batch, int gpus_per_node,
                           const DeviceProfile* dev, int time_oom, PlanResult* out) {
    const ModelConfig* c = layout_cfg;
    int uneven_only = time_oom & PLAN_UNEVEN_ONLY;
    time_oom &= ~PLAN_UNEVEN_ONLY;
    DeviceProfile dev_sw = plan_software_device(k, dev);
    const DeviceProfile* d = &dev_sw;
    PlanResult* r = out;
    LayerTime lt;
    EdgeTimes et;
    PlanLinks links;
    if (plan_unit_times(c, k, global_batch, gpus_per_node, d, r, &links, &lt, &et)) return -1;
    // --pp-split auto: the stages cut by this layout's own times and memory, unless the trainer gave
    // the model it cut by (runtime/train.h)
    StageModel sm = {0};
    ModelConfig cut_cfg;
    if (c->pp_split && c->pp > 1 && !c->stage_model) {
        stage_model_build(c, k, d, &et, r, &sm);
        cut_cfg = *c, cut_cfg.stage_model = &sm, c = &cut_cfg;
        if (uneven_only && !cut_can_fit(c, c->pp, c->vpp)) {
            stage_model_free(&sm);
            return plan_invalid(r, "no cut fits in memory: the even layout stands for it");
        }
        int* cut = (int*)xmalloc(sizeof(int) * c->pp * c->vpp);
        chunk_cut(c, c->pp, c->vpp, cut);
        sm.cut = cut;  // cut once: plan_chunks and the schedule's lists take it
        if (uneven_only && cut_is_even(c)) {
            stage_model_free(&sm);
            return plan_invalid(r, "--pp-split auto cuts as even does");
        }
    }
    PlanChunks ch = plan_chunks(c, k, d, &lt, &et, r);
    plan_pending_receive(c, k, d, links, &lt, r->n_micro, &ch);
    if (k->grads_lazy || plan_sync_last(c, k, r->n_micro)) plan_grad_accumulate(c, k, d, &ch, r->n_micro);
    plan_memory(c, k, d, &ch, r);
    r->mem_margin = d->mem_bytes - r->mem_total;
    r->timed = time_oom == PLAN_TIME_ALL || (r->fits && time_oom == PLAN_TIME_FITTING);
    if (r->timed || (r->fits && time_oom == PLAN_TIME_BOUND)) {
        plan_dp_time(c, k, d, links.dp, &ch, r);
        if (r->timed) plan_pipeline_time(c, k, d, links.pp, &ch, r);
        else plan_pipeline_bound(c, d, &ch, r);
        plan_throughput(c, k, d, global_batch, &ch, r);
    }
    plan_chunks_free(&ch);
    stage_model_free(&sm);
    return 0;
}

// The model --pp-split auto cuts layout c's stages by (stage_model_build) on dev, for the trainer,
// which cuts its layers by it (runtime/train.h); stage_model_free releases it. Returns 0, or -1
// where the planner cannot model the layout (then sm is empty: the cut falls back to PaLM FLOPs).
static int plan_stage_model(const ModelConfig* c, const PlanSetup* k, int global_batch, const DeviceProfile* dev,
                            StageModel* sm) {
    DeviceProfile d = plan_software_device(k, dev);
    PlanResult r;
    LayerTime lt;
    EdgeTimes et;
    PlanLinks links;
    memset(sm, 0, sizeof(*sm));
    if (plan_unit_times(c, k, global_batch, dev->gpus_per_node, &d, &r, &links, &lt, &et)) return -1;
    stage_model_build(c, k, &d, &et, &r, sm);
    return 0;
}

// What a rank of `stage` holds in layout c on dev under k (this trainer's setup: plan_memory's stage_mem and
// stage_host are its buffers as allocated): *device_bytes on its device, *host_bytes on the host under
// --offload. The trainer checks its ranks against the host's memory with them before it allocates
// (runtime/train.h host_memory_check). Returns 0, or -1 with r->invalid saying why the planner cannot model it.
static int plan_stage_bytes(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* dev, int stage,
                            double* device_bytes, double* host_bytes, PlanResult* r) {
    DeviceProfile d = plan_software_device(k, dev);
    LayerTime lt;
    EdgeTimes et;
    PlanLinks links;
    memset(r, 0, sizeof(*r));
    if (plan_unit_times(c, k, c->global_batch, dev->gpus_per_node, &d, r, &links, &lt, &et)) return -1;
    PlanChunks ch = plan_chunks(c, k, &d, &lt, &et, r);
    plan_memory(c, k, &d, &ch, r);
    *device_bytes = ch.stage_mem[stage], *host_bytes = ch.stage_host[stage];
    plan_chunks_free(&ch);
    return 0;
}

static int plan_predict(const ModelConfig* layout_cfg, const PlanSetup* k, int global_batch, int gpus_per_node,
                        const DeviceProfile* dev, PlanResult* out) {
    return plan_predict_ex(layout_cfg, k, global_batch, gpus_per_node, dev, 1, out);
}

// MFU as the layouts study defines it (Hagemann et al. 2023): 6N + 12 L h T FLOPs per token,
// N = every parameter, the input embedding included (config_flops_per_token counts the
// matmul parameters only, as PaLM does).
static double study_mfu(const ModelConfig* c, const PlanResult* r, const DeviceProfile* d) {
    double flops = 6.0 * config_num_params(c) + 12.0 * c->n_layer * c->d_model * (double)c->seq_len;
    return flops * r->tokens_per_s_per_gpu / d->peak_flops;
}

#endif
