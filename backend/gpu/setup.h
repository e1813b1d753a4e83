// backend/gpu/setup.h: the GPU build's part of the run's set-up and end (runtime/main.h): the
// flags it refuses (before any rank starts, with no GPU needed), this rank's device and its peak,
// the attention tile, the communicators and streams, the device's buffers beside the model's; and
// the whole GPU backend for the main to include (its operations, collectives and memory).
#ifndef GPU_SETUP_H
#define GPU_SETUP_H

#include "backend/backend.h"
#include "backend/gpu/comm.h"
#include "backend/gpu/comm_nccl.h"
#include "backend/gpu/gpu_device.h"
#include "backend/gpu/memory.h"
#include "backend/gpu/offload_gpu.h"
#include "backend/gpu/ops.h"
#include "backend/gpu/zero3_gpu.h"

static struct {
    cudaDeviceProp prop;
    const AttFwdTile* tile;  // the attention forward's tile at this head size
    const char* tile_why;
} gpu_start;

static void backend_check_flags(const Args* a) {
    if (a->grad_reduce_bf16 && (a->cfg.zero > 1 || a->comm_mpi))
        fail("--grad-reduce bf16: the NCCL all-reduce of --zero 0 and 1 only (ZeRO 2 and 3 reduce-scatter in fp32; "
             "--comm mpi sums in fp32)");
    if (a->kernels_ref)
        fail("--kernels ref: the plain-loop reference kernels are the CPU build's (train_cpu); the GPU build runs "
             "its CUDA kernels, checked against them");
    if (a->offload_dir)
        fail("--offload-dir: the CPU build's file-backed tier; the GPU build keeps what it offloads in pinned host "
             "memory (leave it out)");
    const ModelConfig* c = &a->cfg;
    gpu_probe_by_hand((c->dp ? c->dp : 1) * c->tp * c->pp * c->cp, a->comm_mpi);  // backend/gpu/gpu_device.h
}

// Peak for MFU: --peak-tflops, else the part's datasheet or its properties; ranks sharing a
// device share its peak.
static void backend_start(DeviceInfo* d, Args* a, int rank, int world) {
    static char peak_src[320];
    int share = 1, dev = gpu_select_device(a->comm_mpi, &share);  // backend/gpu/gpu_device.h
    cudaCheck(cudaGetDeviceProperties(&gpu_start.prop, dev));
    double peak = gpu_peak_flops(dev, &gpu_start.prop, peak_src, sizeof(peak_src), &d->profile);
    if (a->peak_tflops) peak = a->peak_tflops * 1e12, snprintf(peak_src, sizeof(peak_src), "--peak-tflops");
    if (share > 1) {
        size_t l = strlen(peak_src);
        snprintf(peak_src + l, sizeof(peak_src) - l, " / %d ranks per GPU", share);
        peak /= share;
    }
    d->peak_flops = d->planner_flops = peak, d->peak_source = peak_src, d->cores = 0;
    a->kernels_note = "CUDA: bf16, cuBLASLt, flash attention (backend/gpu/)";
    gpu_start.tile = attention_tile_choose(a->attn_tile, a->cfg.d_model / a->cfg.n_head, gpu_start.prop.name,
                                           "dev/attn_tiles.csv", &gpu_start.tile_why);
}

// Before the weights: the communicators, the streams, the positions and the kernels' scratch.
static void backend_init(Model* m) {
    const Args* a = m->args;
    // The communicators: ncclCommInitRank waits for every rank to reach it over the network NCCL
    // picked; a wrong one waits forever. The watchdog (armed since MPI_Init, runtime/run.h) says what to check.
    const char* phase = watchdog_phase;
    watchdog_at("creating NCCL's communicators (ncclCommInitRank, ncclCommSplit): a rank did not start or cannot "
                "reach the others over the network NCCL chose: check NCCL_SOCKET_IFNAME (an interface every node has, "
                "e.g. eth0 or ib0), NCCL_IB_HCA / NCCL_IB_DISABLE=1, NCCL_P2P_DISABLE / NCCL_SHM_DISABLE, and rerun "
                "with NCCL_DEBUG=INFO");
    gpu_comms_init(&m->be.G, &m->L, a->comm_mpi ? COMM_MPI : COMM_NCCL);
    watchdog_at(phase);
    // non-blocking: the legacy default stream (a library's, or a stray blocking call) never stalls the step
    cudaCheck(cudaStreamCreateWithFlags(&m->be.stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&m->be.offload, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&m->be.computed, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&m->be.copied, cudaEventDisableTiming));
    cudaCheck(cudaEventCreate(&m->be.op_times.now));
    cudaCheck(cudaEventCreateWithFlags(&m->be.batch_copied, cudaEventDisableTiming));
    // batch_ready's staging (backend/gpu/memory.h): inputs, targets; with documents positions, documents, cp order
    size_t batch_ints = (size_t)m->n_micro * m->B * m->T * (3 + 2 * m->c.cp);
    m->be.h_batch = (int*)host_pinned(sizeof(int) * batch_ints, "the batch");
    m->be.d_pos = (int*)dev_alloc(sizeof(int) * m->T);
    h2d(m->be.d_pos, m->pos, sizeof(int) * m->T, m->be.stream);
    // the kernels' reduction scratch: 16M floats cover the column sums of any width in few chunks
    // (the attention backward's buffers are carved with the activations: layout/activations.h)
    gpu_kernels_init(16u << 20);
    if (m->c.zero != 3) m->be.params_bf16 = (bf16*)dev_alloc(sizeof(bf16) * m->P.n_padded);  // else zero3.h's
}

// After the weights and the schedule's buffers: the optimizer's staging, the bf16 gradient
// buffer, and the documents' arrays on the device.
static void backend_init_done(Model* m) {
    if (!m->zero3_state) m->be.arena = m->params;
    if (m->c.offload & OFFLOAD_OPTIMIZER) offload_opt_init(m);
    if (grad_reduce_scratch_bytes(m->args->grad_reduce_bf16, m->L.replicas))
        m->be.grad_bf16 = act_alloc(m, GRAD_BF16_FLOATS);
    if (m->doc_start) {
        size_t held = (size_t)m->n_micro * m->B * m->T;
        m->be.d_row_pos = (int*)dev_alloc(sizeof(int) * held);
        m->be.d_doc_seq = (int*)dev_alloc(sizeof(int) * held * m->c.cp);
        m->kernel_doc_seq = m->be.d_doc_seq;
        if (m->cp_order) m->kernel_cp_order = m->be.d_cp_order = (int*)dev_alloc(sizeof(int) * held * m->c.cp);
    }
}

// The weights on the device per parameter: fp32 master + bf16 copy (6), or the bf16 copy alone
// (2: master_on_host).
static int weight_bytes_per_param(const Model* m) { return master_on_host(m) ? 2 : 6; }
// The host holds the pinned --offload buffers (offload_gpu.h) and, without --offload optimizer, the host copy of
// the whole local fp32 weights (memory.h params_host_take: made for the initial weights, kept for the checkpoints;
// with it that copy is the pinned master, counted in host_bytes); the device's bytes are dev_alloc's to refuse.
static double host_bytes_of_rank(const Model* m, double device_bytes, double host_bytes) {
    return host_bytes + (m->c.offload & OFFLOAD_OPTIMIZER ? 0 : sizeof(float) * (double)m->P.n_padded);
}

static void backend_print(const Model* m) {
    const Args* a = m->args;
    const cudaDeviceProp* p = &gpu_start.prop;
    const AttFwdTile* t = gpu_start.tile;
    printf("gpu: %s (sm_%d%d, %.0f GiB) per rank, comm %s, bf16 activations, fp32 master weights + bf16 copy, fp32 "
           "grads%s and AdamW state%s\n",
           p->name, p->major, p->minor, p->totalGlobalMem / 1073741824.0, a->comm_mpi ? "mpi (host-staged)" : "nccl",
           m->be.grad_bf16 ? " (dp all-reduce in bf16)" : "",
           m->c.offload & OFFLOAD_OPTIMIZER ? " (the master weights and AdamW's m, v pinned on the host)" : "");
    printf("gpu: attention forward tile %s at head size %d (%d query rows x %d keys, Q in %s; %s)\n", t->name, m->hd,
           t->bq, t->bk, t->q_regs ? "registers" : "shared memory", gpu_start.tile_why);
    fflush(stdout);
}

static void backend_finish(Model* m) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (m->L.rank == 0) {
        char b1[32], b2[32];
        printf("gpu memory (rank 0): %s in use of %s\n", fmt_bytes((double)(total_b - free_b), b1),
               fmt_bytes((double)total_b, b2));
    }
    gpu_comms_free(&m->be.G);
}

#endif
