// runtime/offload_gpu.h: the offload tier of the GPU build (runtime/offload.h): pinned host
// memory (cudaMallocHost), the copies between it and the device, and AdamW on the host.
// Included by train_gpt.cu among its memory functions.
//
// --offload activations: the copies run on the offload stream after the compute queued so far
// (they may overlap the next op's kernels), and the compute stream waits for them (an event: the
// host does not) at act_tier_wait.
//
// --offload optimizer (ZeRO-Offload, Ren et al. 2021). On the host, pinned: AdamW's m and v over
// this rank's optimizer range (m->m_state, m->v_state), the fp32 master weights of that range (the
// range of m->be.h_params, the host copy every run keeps for initialization and checkpoints,
// pinned under the flag) and the gradient of the range as it comes down (m->be.h_grad). On the
// device, as without the flag: the fp32 weights (the stage's, or --zero 3's shard) and the bf16
// copy, because ZeRO's all-gathers send fp32 and the bf16 copy is made from them; the fp32
// gradient. Not on the device: AdamW's state (8 bytes a parameter of the range).
// A tensor's range goes: gradient down (offload stream), AdamW on the host (model/cpu/adamw.h, the
// CPU build's function, OpenMP threads), the updated weights up into the device's fp32 copy
// (compute stream; without ZeRO the bf16 copy of the range follows there).
// What overlaps: the copy up of one tensor with the copy down and the host update of the next.
// What does not: the copies down wait for the step's reduced gradient (the norm needs it whole
// before the clip scale is known), so none runs beside the backward; the next step's forward
// waits for the last copy up.
#ifndef OFFLOAD_GPU_H
#define OFFLOAD_GPU_H

#include "model/cpu/adamw.h"

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
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, m->be.offload));
    cudaCheck(cudaEventRecord(m->be.copied, m->be.offload));
}
static void act_tier_out(Model* m, char* tier, const char* frame, size_t bytes) {
    act_tier_copy(m, tier, frame, bytes, cudaMemcpyDeviceToHost);
}
static void act_tier_in(Model* m, char* frame, char* tier, size_t bytes) {
    act_tier_copy(m, frame, tier, bytes, cudaMemcpyHostToDevice);
}
static void act_tier_wait(Model* m) { cudaCheck(cudaStreamWaitEvent(m->be.stream, m->be.copied, 0)); }

// AdamW on [a, b) of the local buffer with the state on the host (--offload optimizer); t is
// the 1-based step, the same for every range of a step.
static void adamw_range_host(Model* m, size_t a, size_t b, const float* grad, int decay, float lr,
                             float grad_scale, int t) {
    size_t o = a - m->opt_lo, n = b - a;
    float* master = m->be.h_params + a;
    float* dev_w = m->z3 ? m->param_shard + o : m->params + a;
    if (m->be.opt_step != t) {  // the step's first range: the gradient is final once the compute so far is
        m->be.opt_step = t;
        cudaCheck(cudaEventRecord(m->be.computed, m->be.stream));
        cudaCheck(cudaStreamWaitEvent(m->be.offload, m->be.computed, 0));
    }
    // comm: device -> host, the gradient of the range (offload stream)
    cudaCheck(cudaMemcpyAsync(m->be.h_grad + o, grad + o, sizeof(float) * n, cudaMemcpyDeviceToHost, m->be.offload));
    cudaCheck(cudaStreamSynchronize(m->be.offload));
    adamw_update(master, m->be.h_grad + o, m->m_state + o, m->v_state + o, n, lr, m->c.beta1, m->c.beta2, m->c.eps,
                 m->c.weight_decay, decay, grad_scale, t);
    // comm: host -> device, the updated weights (compute stream: the bf16 copy and ZeRO's all-gather follow)
    cudaCheck(cudaMemcpyAsync(dev_w, master, sizeof(float) * n, cudaMemcpyHostToDevice, m->be.stream));
    if (!m->c.zero) f32_to_bf16_gpu(m->be.params_bf16 + a, dev_w, n, m->be.stream);
}

#endif
