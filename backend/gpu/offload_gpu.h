// backend/gpu/offload_gpu.h: the offload tier of the GPU build (backend/cpu/offload.h): pinned host
// memory (cudaMallocHost), the copies between it and the device, and AdamW on the host.
// Included by train_gpt.cu after runtime/train.h.
//
// --offload activations: the copies run on the offload stream after the compute queued so far
// (they may overlap the next op's kernels), and the compute stream waits for them (an event: the
// host does not) at act_tier_wait.
//
// --offload optimizer (ZeRO-Offload, Ren et al. 2021). On the host, pinned: the fp32 master
// weights (m->be.h_params, the whole local buffer; this rank updates its optimizer range
// [opt_lo, opt_hi): zero 0 all of it, zero 1/2/3 its 1/R shard), AdamW's m and v over the range
// (m->m_state, m->v_state), the range's gradient as it comes down (h_grad) and the bf16 cast of
// the weights that goes up (h_bf16). On the device: the bf16 weights every kernel reads
// (params_bf16) and the fp32 gradient; no optimizer state and, with zero 0/1/2, no fp32 weights:
// the views m->w, m->wl point into the host master and bf() turns them into bf16 pointers.
// --zero 3 keeps its fp32 shard on the device (parallel/zero3.h gathers the units from it in fp32),
// refreshed from the master after each update.
// The bytes pinned: planner/memory.h offload_host_bytes (the start-up table's host figure).
// The step:
//   - down: each tensor's range of the gradient on the offload stream as soon as it is final, an
//     event after each: with zero 0 and 1 (no --sp) a layer's once its dp all-reduce is queued, during
//     the backward of the layers below (layer_grads_queued); the rest at the step's first
//     adamw_range, after the reduction and the norm's kernels;
//   - per range (optimizer_step's adamw_range calls), the host waits for its event, runs AdamW
//     (backend/cpu/adamw.h, the CPU build's update, OpenMP threads) and casts the range to bf16
//     (nearest even, as the device's cast);
//   - up: the bf16 range on the compute stream (half the bytes of fp32; --zero 3 its fp32 shard);
//     zero 1/2 then all-gather the bf16 shards on the device (param_shards_gather).
// What overlaps: copies down with the backward (zero 0) and with the host's update of earlier
// ranges; copies up with both. What does not: the update waits for the whole gradient's norm (the
// clip scale), and the next step's forward for the last copy up (no one-step delay: the math is
// the non-offloaded run's). ZeRO 2/3's gradients go down after the step's reduction.
#ifndef OFFLOAD_GPU_H
#define OFFLOAD_GPU_H

#include "backend/backend.h"
#include "backend/cpu/adamw.h"

// `bytes` of zeroed pinned host memory for `what` (the flag's name in the error).
static void* host_pinned(size_t bytes, const char* what) {
    void* p;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 16);
    if (e != cudaSuccess)
        fail("%s: cannot pin %.1f MiB of host memory (%s)", what, bytes / 1048576.0, cudaGetErrorString(e));
    memset(p, 0, bytes ? bytes : 16);
    return p;
}

static char* act_tier_alloc(Model* m, size_t bytes) {
    return (char*)host_pinned(bytes, "--offload activations");
}
static void act_tier_copy(Model* m, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    cudaCheck(cudaEventRecord(m->be.computed, m->be.stream));
    cudaCheck(cudaStreamWaitEvent(m->be.offload, m->be.computed, 0));
    copyCheck(cudaMemcpyAsync(dst, src, bytes, kind, m->be.offload));
    cudaCheck(cudaEventRecord(m->be.copied, m->be.offload));
}
static void act_tier_out(Model* m, char* tier, const char* frame, size_t bytes) {
    act_tier_copy(m, tier, frame, bytes, cudaMemcpyDeviceToHost);
}
static void act_tier_in(Model* m, char* frame, char* tier, size_t bytes) {
    act_tier_copy(m, frame, tier, bytes, cudaMemcpyHostToDevice);
}
static void act_tier_wait(Model* m) { cudaCheck(cudaStreamWaitEvent(m->be.stream, m->be.copied, 0)); }

// Under the flag with zero 0/1/2 the fp32 master is the only fp32 copy of the weights.
static int master_on_host(const Model* m) { return (m->c.offload & OFFLOAD_OPTIMIZER) && m->c.zero != 3; }

// The bf16 cast of n floats on the host, rounded as the device's (__float2bfloat16: nearest even).
static void bf16_cast_host(bf16* out, const float* in, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = __float2bfloat16(in[i]);
}

// params_init's part under master_on_host: the bf16 staging, and the weights' views moved onto the
// host master (runtime/train.h allocated the device fp32 weights every other run reads; freed here).
static void offload_weights_init(Model* m) {
    m->be.h_bf16 = (bf16*)host_pinned(sizeof(bf16) * m->P.n_padded, "--offload optimizer");
    cudaCheck(cudaFree(m->params));
    m->params = m->be.h_params;
    bind_weights(&m->P, &m->c, m->params, &m->w, m->wl);
}
// model_init's part (the optimizer range known): the gradient's staging, and per tensor an event
// after its range's copy down and whether that copy is queued for the step.
static void offload_opt_init(Model* m) {
    m->be.h_grad = (float*)host_pinned(sizeof(float) * (m->opt_hi - m->opt_lo), "--offload optimizer");
    m->be.grad_down = (cudaEvent_t*)xcalloc(m->P.n, sizeof(cudaEvent_t));
    m->be.down_queued = (char*)xcalloc(m->P.n, 1);
    for (int i = 0; i < m->P.n; i++) cudaCheck(cudaEventCreateWithFlags(&m->be.grad_down[i], cudaEventDisableTiming));
}

// The weights from the host master to the device (start, resume, import): the whole local buffer's
// bf16 cast (master_on_host).
static void offload_upload(Model* m) {
    bf16_cast_host(m->be.h_bf16, m->be.h_params, m->P.n_padded);
    h2d(m->be.params_bf16, m->be.h_bf16, sizeof(bf16) * m->P.n_padded, m->be.stream);
}
// The whole local buffer of master weights on the host (checkpoints, exports; master_on_host):
// zero 0 holds it; with zero 1/2 each replica's shard is current only on its own host.
static void offload_download(Model* m) {
    if (!m->c.zero) return;
    size_t S = shard_floats(&m->P, m->L.replicas);
    float* mine = m->be.h_params + (size_t)m->L.replica * S;
    comm_allgather(m->be.G.group[GROUP_DP].c, mine, m->be.h_params, S);  // comm: dp all-gather of the shards (host)
}

// ZeRO 1/2 after the update: every replica's bf16 shard from its own (param_shards_gather).
static void offload_shards_gather(Model* m) {
    size_t S = shard_floats(&m->P, m->L.replicas);
    bf16* w = m->be.params_bf16;
    // comm: dp all-gather of the updated bf16 shards (in place)
    nccl_allgather_bf16(&m->be.G, &m->be.G.group[GROUP_DP], w + (size_t)m->L.replica * S, w, S, m->be.stream);
}

// comm: device -> host, tensor i's range of the gradient (offload stream, after what `after` queued so
// far); grad is the optimizer range's.
static void offload_grad_down(Model* m, int i, const float* grad, cudaStream_t after) {
    size_t a, b;
    if (!clip_range(&m->P.t[i], m->opt_lo, m->opt_hi, &a, &b)) return;
    cudaCheck(cudaEventRecord(m->be.computed, after));
    cudaCheck(cudaStreamWaitEvent(m->be.offload, m->be.computed, 0));
    size_t o = a - m->opt_lo;
    copyCheck(cudaMemcpyAsync(m->be.h_grad + o, grad + o, sizeof(float) * (b - a), cudaMemcpyDeviceToHost,
                              m->be.offload));
    cudaCheck(cudaEventRecord(m->be.grad_down[i], m->be.offload));
    m->be.down_queued[i] = 1;
}
// ZeRO 0 and 1 (data_parallel.h layer_grads_final): layer [lo, hi)'s gradient (its part in this
// rank's optimizer range) goes down as soon as it is final, after its dp all-reduce on NCCL's side
// stream (or on the compute stream: host-staged, or one replica), beside the backward of the
// layers below. Not with --sp: sp_partial_sync adds to some of its tensors after the backward.
static void layer_grads_queued(Model* m, size_t lo, size_t hi) {
    if (!(m->c.offload & OFFLOAD_OPTIMIZER) || m->c.sp) return;
    cudaStream_t after = m->be.G.side_pending ? m->be.G.side : m->be.stream;
    for (int i = 0; i < m->P.n; i++)
        if (m->P.t[i].offset >= lo && m->P.t[i].offset < hi) offload_grad_down(m, i, m->grads + m->opt_lo, after);
}

// AdamW on [a, b) of the local buffer with the state on the host (--offload optimizer); t is the
// 1-based step, the same for every range of a step. optimizer_step's calls go in tensor order: the
// first of a step queues the ranges not yet going down, each waits for its own.
static void adamw_range_host(Model* m, size_t a, size_t b, const float* grad, int decay, float lr,
                             float grad_scale, int t) {
    size_t o = a - m->opt_lo, n = b - a, lo, hi;
    float* master = m->be.h_params + a;
    if (m->be.opt_step != t) {
        m->be.opt_step = t, m->be.opt_next = 0;
        for (int i = 0; i < m->P.n; i++)
            if (!m->be.down_queued[i]) offload_grad_down(m, i, grad, m->be.stream);
        memset(m->be.down_queued, 0, m->P.n);  // for the next step (a skipped step's layers go down again)
    }
    int i = m->be.opt_next;  // this range's tensor
    while (i < m->P.n && !(clip_range(&m->P.t[i], m->opt_lo, m->opt_hi, &lo, &hi) && lo == a)) i++;
    if (i == m->P.n) fail("--offload optimizer: no tensor's range starts at %zu", a);
    m->be.opt_next = i + 1;
    host_wait_event(m->be.grad_down[i]);
    adamw_update(master, m->be.h_grad + o, m->m_state + o, m->v_state + o, n, lr, m->c.beta1, m->c.beta2, m->c.eps,
                 m->c.weight_decay, decay, grad_scale, t);
    if (m->c.zero == 3) {  // comm: host -> device, the updated fp32 shard's range (compute stream)
        copyCheck(cudaMemcpyAsync(m->param_shard + o, master, sizeof(float) * n, cudaMemcpyHostToDevice, m->be.stream));
        return;
    }
    bf16_cast_host(m->be.h_bf16 + a, master, n);
    // comm: host -> device, the range's bf16 weights (compute stream: ZeRO's all-gather and the forward follow)
    copyCheck(cudaMemcpyAsync(m->be.params_bf16 + a, m->be.h_bf16 + a, sizeof(bf16) * n, cudaMemcpyHostToDevice,
                              m->be.stream));
}

#endif
