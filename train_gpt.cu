// train_gpt.cu: the GPU trainer. The same models (GPT-2, LLaMA), optimizer, flags, layouts
// (dp/tp/sp/pp/cp, ZeRO 0/1/2, recomputation), checkpoints and logs as train_gpt.c, the CPU
// reference, on one CUDA device per rank. The model's math (model/model.h) and the
// orchestration (parallel/, runtime/train.h) are shared; this file holds only what differs:
// the operations (backend/gpu/kernels_gpu.cuh, cuBLASLt), where the bytes live, and main.
//
// Precision and state per rank:
//   - fp32 master weights `params` (the params.h layout, one buffer) and a bf16 copy
//     `params_bf16` of the same layout, which every forward and backward reads; AdamW updates
//     the fp32 copy and rewrites the bf16 one (--offload optimizer: the fp32 copy is on the host).
//   - fp32 weight gradients `grads` (same layout), fp32 AdamW moments m, v over this rank's
//     optimizer range (the ZeRO shard with --zero > 0; pinned host memory under the flag).
//   - bf16 activations and activation gradients; norm statistics, softmax, losses and every
//     sum in fp32 (kernels_gpu.cuh). tp reductions of activations are bf16 sums.
// The weights start bitwise equal to the CPU run's: init_params (params.h) fills a host fp32
// buffer that is copied to the device.
//
// Communication: tp, dp and embed collectives and the pipeline's sends and receives run on
// device buffers through NCCL, or with --comm mpi host-staged through MPI (comm_nccl.h;
// several ranks may then share one GPU). No NCCL call makes the host wait. With ZeRO 0 and 1,
// each layer's dp gradient all-reduce starts as soon as the step's last micro-batch has
// left the layer, on NCCL's own stream beside the rest of the backward (parallel/data_parallel.h's
// layer_grads_final); the optimizer waits for them. ZeRO 1/2's all-gathers of the updated weights
// run there too, a unit at a time beside the next forward (parallel/zero3.h zero12_gather_start),
// each layer waiting for its own. Pipeline sends run on streams of their
// own, so a stage goes on computing while its activations travel; so do context
// parallelism's ring exchanges, beside the attention block they overlap. Scalars (loss, gradient
// norm, sampled token, stop flag) and checkpoints use layout/grid.h's MPI calls on host memory,
// as the CPU build does.
//
// Reading order: main() -> model_init() -> train_step() -> run_schedule() ->
// chunk_forward()/chunk_backward() (parallel/pipeline.h) -> layer_forward()/
// layer_backward_input()/layer_backward_weight() (model/model.h, shared with the CPU build) ->
// the op_* operations here -> backend/gpu/kernels_gpu.cuh.
// Every communication point is marked "comm:" below.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // Open MPI's C++ bindings are unused (and warn under nvcc)
#endif
#include "layout/activations.h"
#include "layout/args.h"
#include "layout/grid.h"
#include "layout/params.h"
#include "layout/schedule.h"
#include "data/data.h"
#include "backend/gpu/comm_nccl.h"
#include "backend/gpu/gpu_device.h"
#include "backend/gpu/kernels_gpu.cuh"
#include "backend/gpu/comm.h"
#include "backend/gpu/memory.h"
#include "backend/gpu/ops.h"
#include "backend/gpu/offload_gpu.h"
#include "backend/gpu/zero3_gpu.h"
#include "model/model.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero3.h"
#include "planner/planner.h"
#include "runtime/ckpt.h"
#include "runtime/llmc.h"
#include "runtime/metrics.h"
#include "runtime/run.h"
#include "runtime/train.h"

// ----------------------------------------------------------------------------
static void model_init(Model* m, Args* a, Metrics* met) {
    model_init_layout(m, a, met);  // runtime/train.h
    // The communicators: ncclCommInitRank waits for every rank to reach it over the network NCCL
    // picked; a wrong one waits forever. So the watchdog is armed first, and says what to check.
    if (m->L.world > 1) watchdog_start(a->timeout_s, m->L.rank);
    watchdog_phase =
        "creating NCCL's communicators (ncclCommInitRank, ncclCommSplit): a rank did not start or cannot reach the "
        "others over the network NCCL chose: check NCCL_SOCKET_IFNAME (an interface every node has, e.g. eth0 or "
        "ib0), NCCL_IB_HCA / NCCL_IB_DISABLE=1, NCCL_P2P_DISABLE / NCCL_SHM_DISABLE, and rerun with NCCL_DEBUG=INFO";
    gpu_comms_init(&m->be.G, &m->L, a->comm_mpi ? COMM_MPI : COMM_NCCL);
    watchdog_phase = NULL;
    watchdog_on = 0;  // until the first step (runtime/train.h): loading a checkpoint may take long
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
    // the kernels' reduction scratch: attention backward needs B*n_head_local*T floats (with cp, a
    // block's B*Ha*Ts: as many); 16M covers the column sums of any width in few chunks
    size_t red = (size_t)m->B * m->T * m->n_head_local;
    gpu_kernels_init(red > (16u << 20) ? red : (16u << 20));
    if (a->cfg.zero != 3) m->be.params_bf16 = (bf16*)dev_alloc(sizeof(bf16) * m->P.n_padded);  // else zero3.h's
    model_init_params(m);
    if (!m->zero3_state) m->be.arena = m->params;
    if (a->cfg.offload & OFFLOAD_OPTIMIZER) offload_opt_init(m);
    if (grad_reduce_scratch_bytes(a->grad_reduce_bf16, m->L.replicas)) m->be.grad_bf16 = act_alloc(m, GRAD_BF16_FLOATS);
    model_init_schedule(m);        // the op list, then activations sized by it
    if (m->doc_start) {
        size_t held = (size_t)m->n_micro * m->B * m->T;
        m->be.d_row_pos = (int*)dev_alloc(sizeof(int) * held);
        m->be.d_doc_seq = (int*)dev_alloc(sizeof(int) * held * m->c.cp);
        m->kernel_doc_seq = m->be.d_doc_seq;
        if (m->cp_order) m->kernel_cp_order = m->be.d_cp_order = (int*)dev_alloc(sizeof(int) * held * m->c.cp);
    }
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--plan")) return stdout_exit_code(plan_main(argc, argv));
    wait_policy_passive(argv);  // before any OpenMP region: re-executes once with OMP_WAIT_POLICY=passive
    {
        static Args pre;  // flags first: --help and flag errors need no GPU; run_setup parses them again
        parse_args(&pre, argc, argv);
        if (pre.grad_reduce_bf16 && (pre.cfg.zero > 1 || pre.comm_mpi))
            fail("--grad-reduce bf16: the NCCL all-reduce of --zero 0 and 1 only (ZeRO 2 and 3 reduce-scatter in fp32; "
                 "--comm mpi sums in fp32)");
        if (pre.kernels_ref)
            fail("--kernels ref: the plain-loop reference kernels are the CPU build's (train_cpu); the GPU build runs "
                 "its CUDA kernels, checked against them");
        const ModelConfig* c = &pre.cfg;
        gpu_probe_by_hand((c->dp ? c->dp : 1) * c->tp * c->pp * c->cp, pre.comm_mpi);  // backend/gpu/gpu_device.h
    }
    static Run run;
    run_setup(&run, argc, argv);
    Args* a = &run.args;
    ModelConfig* c = &a->cfg;
    int world = run.world, rank = run.rank, share = 1;
    int dev = gpu_select_device(a->comm_mpi, &share);  // backend/gpu/gpu_device.h
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    // Peak for MFU: --peak-tflops, else the part's datasheet or its properties; ranks sharing a
    // device share its peak.
    static char peak_src[320];
    const char* profile;
    double peak = gpu_peak_flops(dev, &prop, peak_src, sizeof(peak_src), &profile);
    if (a->peak_tflops) peak = a->peak_tflops * 1e12, snprintf(peak_src, sizeof(peak_src), "--peak-tflops");
    if (share > 1) {
        size_t l = strlen(peak_src);
        snprintf(peak_src + l, sizeof(peak_src) - l, " / %d ranks per GPU", share);
        peak /= share;
    }
    Metrics met;
    metrics_init(&met, a, rank, world, peak, peak_src);
    met.profile = profile;  // the planner's model of this device (--pp-split auto, the start-up table)
    Model m;
    model_init(&m, a, &met);
    int start_step = weights_load(&m);
    a->kernels_note = "CUDA: bf16, cuBLASLt, flash attention (backend/gpu/)";
    const char* tile_why;
    const AttFwdTile* tile = attention_tile_choose(a->attn_tile, m.hd, prop.name, "dev/attn_tiles.csv", &tile_why);
    if (rank == 0) {
        print_startup(&m.L, &m.P, c, a, &run.train, &run.val, &met, m.n_micro, start_step);
        printf(
            "gpu: %s (sm_%d%d, %.0f GiB) per rank, comm %s, bf16 activations, "
            "fp32 master weights + bf16 copy, fp32 grads%s and AdamW state%s\n",
            prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0,
            a->comm_mpi ? "mpi (host-staged)" : "nccl", m.be.grad_bf16 ? " (dp all-reduce in bf16)" : "",
            c->offload & OFFLOAD_OPTIMIZER ? " (the master weights and AdamW's m, v pinned on the host)" : "");
        printf("gpu: attention forward tile %s at head size %d (%d query rows x %d keys, Q in %s; %s)\n", tile->name,
               m.hd, tile->bq, tile->bk, tile->q_regs ? "registers" : "shared memory", tile_why);
        fflush(stdout);
    }
    // metrics_predict counts activations in floats; the bf16 buffers are passed as bytes / 4.
    size_t act_bytes = m.scratch_bytes;
    double act_tier_bytes = 0;  // --offload activations: the slots beyond the frames, pinned on the host
    for (int ch = 0; ch < m.L.vpp; ch++) {
        Chunk* k = &m.chunks[ch];
        act_bytes += k->slot_bytes * k->n_frames + k->wg.bytes * k->wg.n + k->heads.bytes * k->heads.n;
        if (k->tier) act_tier_bytes += (double)k->slot_bytes * k->n_slots;
    }
    // weights per parameter on the device: fp32 master + bf16 copy (6), or the bf16 copy alone (2: master_on_host)
    metrics_predict(&met, c, profile, met.peak_flops, 0, &m.P, m.opt_hi - m.opt_lo, act_bytes / 4,
                    master_on_host(&m) ? 2 : 6, act_tier_bytes);

    int code = train_loop(&m, &run, &met, start_step);  // 0, or 128 + a stop signal, or 1: every step skipped
    if (code) {
        MPI_Finalize();
        return code;
    }
    weights_export(&m);
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (rank == 0) {
        char b1[32], b2[32];
        printf("gpu memory (rank 0): %s in use of %s\n", fmt_bytes((double)(total_b - free_b), b1),
               fmt_bytes((double)total_b, b2));
    }
    metrics_finish(&met, &m.L, (double)(m.slots_peak_bytes + m.scratch_bytes));
    gpu_comms_free(&m.be.G);
    MPI_Finalize();
    return stdout_exit_code(0);
}
