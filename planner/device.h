// planner/device.h: device profiles. What one GPU (or the CPU) of a cluster can do: peak
// FLOP/s and the fractions of it kernels reach, memory and its bandwidth, the links inside
// and across nodes. Built-in profiles (a100-80gb, h100-sxm, h200-sxm, cpu), the keys of a
// device file and of --device-set, and the device-file reader.
#ifndef PLANNER_DEVICE_H
#define PLANNER_DEVICE_H

#include <stddef.h>  // offsetof
#include "base/files.h"

// NCCL's cost model of its Simple-protocol ring and tree, by release (src/graph/tuning.cc and enqueue.cc's "plateau
// effect of ring", NVIDIA/nccl, read at each tag below; dev/PLANNER.md "NCCL's latencies by release"). The releases
// between two rows share the first one's numbers. A run that names its NCCL (a --runs row's nccl column,
// --nccl-version) is priced by its release's row; one that names none by the device's hops and b647562's (v2.20.3,
// the 2.19.1 row). Every hop is in seconds; the base of the ring (8.4 us) and its NVLink hop (3.4) never changed.
typedef struct NcclModel {
    int from;               // first release of the row, 10000 x major + 100 x minor + patch
    double ring_net_hop;    // hwLat NET Ring Simple: a ring step that crosses nodes
    double tree_base;       // baseLat Tree Simple
    double tree_nvlink_hop, tree_net_hop;  // hwLat NVLINK / NET Tree Simple: a step of the chain in a node / of the
                                           // tree over the nodes
    double plateau;         // the ring all-reduce's latency factor across nodes on sm80 and sm90
    int plateau_per_channel;  // 1: from 64 bytes a channel a rank (2.18 on); 0: from nRanks / 16 x 64 KiB (before)
    int ar_net_steps_less;  // a ring all-reduce's steps across nodes: 2 x (nodes - this), 1 or 0
    int net_overhead;       // 1: a ring that spans nodes floors its steps at 3 x getNetOverhead (2.18.1 on)
    double nvls_lat;        // NVLink SHARP's all-reduce inside a node (NCCL_ALGO_NVLS, 2.17.1 on), its whole latency:
                            // baseLat NVLS Simple (40 us in 2.17.1, 23 in 2.18) or, from 2.19.1 (base 0), hwLat
                            // NVLINK NVLS Simple (23, 25 from 2.21.5); 0: no NVLS, a ring in its place
} NcclModel;
static const NcclModel NCCL_MODELS[] = {
    {20803, 9.6e-6, 0, 28e-6, 28e-6, 1.9, 0, 1, 0, 0},  // 2.8.3 .. 2.11.4
    {21207, 28e-6, 0, 28e-6, 28e-6, 1.9, 0, 1, 0, 0},   // 2.12.7 .. 2.13.4: the network's ring hop 28 us
    {21403, 9.6e-6, 0, 28e-6, 28e-6, 1.9, 0, 0, 0, 0},  // 2.14.3 .. 2.16.5: all-reduce 2 x nodes steps across
    {21701, 9.6e-6, 0, 28e-6, 28e-6, 1.9, 0, 0, 0, 40e-6},  // 2.17.1: NVLS, 40 us (its 1.5 plateau on sm90 is not
                                                            // taken: 1.9)
    {21801, 14e-6, 0, 28e-6, 28e-6, 1.4, 1, 0, 1, 23e-6},  // 2.18.1: the network hop 14, the net overhead, plateau
                                                           // 1.4, NVLS 23 us
    {21803, 14e-6, 0, 4e-6, 14e-6, 1.4, 1, 0, 1, 23e-6},   // 2.18.3 .. 2.18.6: the tree's hops 4 (NVLink), 14 (net)
    {21901, 14e-6, 0, 28e-6, 28e-6, 1.4, 1, 0, 1, 23e-6},  // 2.19.1 .. 2.20.5 (b647562 = 2.20.3): the tree's 28 again
    {22105, 14e-6, 0, 28e-6, 28e-6, 1.4, 1, 0, 1, 25e-6},  // 2.21.5 .. 2.22.3: NVLS 25 us
    {22304, 14e-6, 8.4e-6, 4e-6, 14e-6, 1.4, 1, 1, 1, 25e-6},  // 2.23.4 .. 2.30.7: tree base 8.4, hops 4 / 14;
                                                               // all-reduce 2 x (nodes - 1) steps across
};
#define NCCL_MODEL_DEFAULT (&NCCL_MODELS[6])
#define NCCL_VERSION_MIN 20803
#define NCCL_VERSION_MAX 23099  // read up to v2.30.7-1

// A release "2.18.3" as 10000 x major + 100 x minor + patch ("2.18": that minor's first release the table names,
// 2.18.1), or 0 for a version the table does not hold (before 2.8, after 2.30, or not MAJOR.MINOR[.PATCH] in digits).
static int nccl_release_of(const char* v) {
    int part[3] = {0, -1, -1}, n = 0;
    for (const char* p = v;; p++) {
        if (*p < '0' || *p > '9') return 0;  // a digit starts each part
        int x = 0;
        for (; *p >= '0' && *p <= '9'; p++)
            if ((x = 10 * x + (*p - '0')) > 99) return 0;
        part[n++] = x;
        if (!*p) break;
        if (*p != '.' || n == 3) return 0;
    }
    if (n < 2) return 0;
    int minor = 10000 * part[0] + 100 * part[1], code = minor + (part[2] < 0 ? 0 : part[2]);
    if (minor < NCCL_VERSION_MIN / 100 * 100 || code > NCCL_VERSION_MAX) return 0;
    for (int i = 0; i < (int)(sizeof(NCCL_MODELS) / sizeof(NCCL_MODELS[0])); i++)  // a minor a row starts in: from
        if (NCCL_MODELS[i].from / 100 * 100 == minor) {                         // that row's first release on
            if (part[2] < 0 || code < NCCL_MODELS[i].from) code = NCCL_MODELS[i].from;
            break;
        }
    return code;
}

// The model of release `code` (nccl_release_of's): the last row from at or before it; NULL for 0.
static const NcclModel* nccl_model_of(int code) {
    if (!code) return NULL;
    const NcclModel* m = &NCCL_MODELS[0];
    for (int i = 0; i < (int)(sizeof(NCCL_MODELS) / sizeof(NCCL_MODELS[0])); i++)
        if (code >= NCCL_MODELS[i].from) m = &NCCL_MODELS[i];
    return m;
}

// Attention's rate by sequence length: causal, head dim 128, 16k tokens a batch (batch x length; hidden 2048, 16
// heads), TFLOP/s at 512, 1k, 2k, 4k, 8k and 16k tokens. flash2: FlashAttention-2's forward + backward (Dao 2023,
// arXiv 2307.08691, Figure 4d; Dao-AILab/flash-attention assets/flash2_{a100,h100}_fwd_bwd_benchmark.png at
// 4f285b35; benchmarks/benchmark_flash_attention.py at 60499abc); triton: FlashAttention in Triton, the figure's
// "FlashAttention Triton" (the A100's only: the H100 figure has none, flash2's is taken). fused_fwd, fused_bwd:
// Hopper's fused attention by pass, cuDNN 9.1.1's, the kernel every flash3 source runs (FlashAttention-3, Shah et al.
// 2024, arXiv 2407.08608, the same shapes on an H100 SXM5 at 1,830 MHz, appendix C.1: Figure 5d, the forward with
// the causal mask, the PNG of Dao-AILab/flash-attention assets/flash3_fp16_fwd.png at 7ef24848; Figure 6b, the
// backward without it, the only backward the paper shows). All 0: not benchmarked. anchor: the length the device's
// attn_eff_flash2 and attn_eff_flash3 were set at (time.h flash_length_factor, fused_length_factor).
#define ATTN_LENGTH_POINTS 6
typedef struct {
    double flash2[ATTN_LENGTH_POINTS];
    double triton[ATTN_LENGTH_POINTS];
    double fused_fwd[ATTN_LENGTH_POINTS];
    double fused_bwd[ATTN_LENGTH_POINTS];
    double anchor;
} AttnLengthCurve;
static const double ATTN_LENGTH_TOKENS[ATTN_LENGTH_POINTS] = {512, 1024, 2048, 4096, 8192, 16384};
static const AttnLengthCurve ATTN_LENGTH_A100 = {
    {99, 133, 155, 173, 182, 189}, {50, 61, 68, 74, 78, 80}, {0}, {0}, 2048};
static const AttnLengthCurve ATTN_LENGTH_H100 = {
    {163, 221, 265, 294, 308, 328}, {0}, {315, 410, 484, 518, 529, 539}, {305, 408, 465, 499, 518, 516}, 16384};

typedef struct {
    char name[32];
    // compute
    double peak_flops;       // dense FLOP/s in the training dtype (bf16 tensor cores on GPUs)
    double matmul_eff;       // fraction of peak a large matmul reaches in a framework's training step
    double matmul_eff_scaling;  // the same in the layouts study's software (--software scaling), fitted to its runs
    double matmul_eff_own;   // the same for this trainer's own cuBLASLt calls (backend/gpu/matmul.cuh)
    int sms;                 // streaming multiprocessors a matmul's tiles are spread over (0: none)
    double matmul_k_half;    // a GEMM tile's fixed cost (pipeline fill, epilogue) in elements of K: its main
                             // loop runs at K / (K + k_half) of the large-K rate (time.h, matmul_shape_eff)
    double matmul_latency;   // s, fixed cost per matmul (the launch)
    double attn_eff_flash2;  // fraction of peak of FlashAttention-2 forward + backward (causal FLOPs)
    double attn_eff_flash1;  // the same for FlashAttention 1
    double attn_eff_flash3;  // the same for Hopper's fused attention (FlashAttention-3, cuDNN's; software.h flash3)
    double attn_eff_own;     // the same for this trainer's own flash kernels (backend/gpu: no wgmma, no TMA)
    const AttnLengthCurve* attn_length;  // flash kernels' rates by sequence length (NULL: one rate at every T)
    double bmm_eff;          // fraction of peak of the batched Q K^T and P V matmuls of unfused attention
    double tensor_clock;     // the clock the device's power limit sustains under matmuls, over the clock its peak_flops
                             // is quoted at (1: as quoted); scales every tensor-core rate above, not peak_flops (MFU
                             // stays against the quoted peak) nor memory-bound ops (predict.h plan_software_device)
    // memory
    double mem_bytes;        // device memory
    double mem_overhead;     // bytes never available: CUDA context, cuBLAS workspace, NCCL buffers
    double mem_frag;         // fraction of activations and temporaries lost to allocator fragmentation
    double hbm_bw;           // bytes/s, peak memory bandwidth
    double hbm_eff;          // fraction of hbm_bw elementwise kernels reach
    double op_latency;       // s per elementwise kernel (launch + tail)
    // links
    double intra_bw;         // bytes/s per GPU, one direction, inside a node (NVLink; shared memory on CPU)
    double intra_pair_bw;    // bytes/s, one direction, between two GPUs of a board with no NVSwitch and every pair
                             // wired directly: the NVLinks to that one peer (0: NVSwitches give any group intra_bw;
                             // time.h intra_group_bw)
    double intra_latency;    // s per step of a collective inside a node
    double nic_bw;           // bytes/s per NIC, one direction (InfiniBand HCA)
    double inter_latency;    // s per step of a collective across nodes
    double net_overhead;     // s NCCL's proxy spends posting one network operation, by the host's CPU (tuning.cc
                             // getNetOverhead): a ring that spans nodes pays 3 x it (Simple) on every step, the
                             // steps inside a node too (time.h group_link_nested)
    double link_eff;         // fraction of the NVLink bandwidth collectives reach inside a node (NCCL bus bandwidth)
    double link_eff_nccl;    // the same as NCCL measures it (nccl-tests' bus bandwidth of a ring): what the
                             // collectives of software with nccl_links reach (software.h)
    double nic_eff;          // the same for traffic across nodes, of the NICs' bandwidth
    double dp_overlap;       // fraction of one micro-batch's backward (forward) under which the DP
                             // gradient reduce (parameter all-gather) hides
    double comm_interference;  // slowdown of compute per second of communication it overlaps
    double comm_interference_nccl;  // the same for NCCL's collective kernels (software with nccl_links: framework,
                                    // foundry, megatron): measured
    int nvls;                // 1: the node's NVSwitches reduce (NVLink SHARP): all-reduces inside a node by NVLS
    double nics_per_gpu;     // a node's NICs over its GPUs: each GPU's share (0.5: two GPUs share one), whatever the
                             // node's size (--gpus-per-node), as a node is built of GPUs with their NICs beside them
    int gpus_per_node;       // default for --gpus-per-node (0: all GPUs in one node)
    // the host, for --offload (planner/time.h offload_time)
    double host_up_bw;       // bytes/s per GPU, host -> device (PCIe, effective: an upload)
    double host_down_bw;     // bytes/s per GPU, device -> host (a download; measured faster than the upload on H100)
    double host_mem_bw;      // bytes/s of host memory per GPU's share (the CPU's AdamW streams its state)
    double host_mem_bytes;   // host memory per GPU's share, what --offload may fill (0: not checked)
    // software
    int dtype_bytes;         // 2: bf16 mixed precision with fp32 master weights; 4: fp32 throughout
    int grad_bytes;          // bytes of an accumulated gradient (2: bf16, 4: fp32)
    // ranks that time-share cores (the CPU build): 0 for devices of their own, else the
    // number of cores all ranks share; a rank runs at peak_flops when it has a core to itself
    int shared_cores;
    const NcclModel* nccl;   // NCCL's model (NULL: b647562's with the hops above); a run's release sets it and the hops
} DeviceProfile;

#define GiB (1024.0 * 1024.0 * 1024.0)

// Built-in profiles: a GPU and the node it sits in. A100 node (DGX A100: its datasheet lists
// 8 single-port ConnectX-6 200 Gb/s HDR InfiniBand for the compute fabric, one per GPU, rail-
// optimized, and NVSwitch with NVLink3 600 GB/s bidirectional = 300 GB/s each way per GPU);
// H100/H200 (DGX H100 / H200: NVLink4 900 GB/s bidirectional through NVSwitch 3 with NVLink
// SHARP, 8 ConnectX-7 400 Gb/s NDR, one per GPU); a node with fewer NICs (jean-zay-a100).
// Efficiencies marked "fit" were fitted once to the 334 runs of
// Hagemann et al. 2023 (dev/PLANNER.md, scripts/validate_planner.py); the others are
// datasheet values or published kernel figures. The H100/H200 profiles keep the A100's
// fitted efficiencies except where a published figure says otherwise.
static void profile_a100(DeviceProfile* d) {
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "a100-80gb");
    d->peak_flops = 312e12;       // dense bf16
    d->matmul_eff = 0.743;        // PyTorch's own matmul on an A100 80GB: 230 TFLOP/s at 8192^3 in fp16 (qhduan/
                                  // transformers-benchmarks README and micro_bench.ipynb: `a @ b`, NGC PyTorch
                                  // 22.07, CUDA 11.7); 230 / (312 x matmul_shape_eff 0.992) = 0.743. Not fitted to
                                  // any run (dev/PLANNER.md, "A framework's matmul rate and NCCL's interference")
    d->matmul_eff_scaling = 0.68;  // fit: the layouts study's codebase, the main loop on full 128 x 128 tiles (212
                                   // TFLOP/s; 8192^3: 210)
    d->matmul_eff_own = 0.68;     // assumed the same: not measured on an A100
    d->matmul_latency = 2e-6;     // estimate, no source found: a kernel's start and drain in a busy stream (launches
                                  // overlap the previous kernel). Published launch costs are the host's (5-20 us,
                                  // HolisticTraceAnalysis docs), hidden while the GPU is ahead (dev/PLANNER.md table)
    d->matmul_k_half = 64;        // scanned, the other keys refit at each: 32 / 64 / 128 give MFU MAE 2.11 / 2.08 /
                                  // 2.03, median Spearman 0.916 / 0.914 / 0.874 (the H200 measured 128)
    d->sms = 108;
    d->attn_eff_flash2 = 0.52;    // FlashAttention-2 fwd+bwd, causal, hd 128, 2k-8k tokens (Dao 2023: ~150-175 TFLOP/s,
                                  // 0.50) over flash_shape_eff at its benchmarks' shapes (diagonal tiles: 0.94-0.985);
                                  // its 2k point's 0.528: attn_length's anchor
    d->attn_eff_own = 0.132;      // the H200's fraction (below), assumed: not measured on an A100
    d->attn_length = &ATTN_LENGTH_A100;
    d->attn_eff_flash1 = 0.27;    // fit (FlashAttention 1.0.8, head dim 128)
    d->attn_eff_flash3 = 0.52;    // FlashAttention-3 needs Hopper (wgmma, TMA): an A100 runs FA2-class kernels
    d->tensor_clock = 1;          // the datasheet's peak at the datasheet's power limit (400 W SXM4)
    d->bmm_eff = 0.68;            // unfused attention's batched matmuls: the same tensor-core main loop as the study's
                                  // matmul_eff_scaling (the study is where unfused kernels were measured; the framework
                                  // sources with fused softmax move by <= 0.07 MFU points at 0.743)
                                  // (their shapes and the memory roofline slow them: K = head size for the scores);
                                  // 0.30 was fitted when all four took the scores' shape (dev/PLANNER.md)
    d->mem_bytes = 80 * GiB;
    d->mem_overhead = 0.5 * GiB;  // fit (0.5 in every leave-one-sheet-out fit): CUDA context and cuBLAS/NCCL
                                  // workspaces; the context alone is ~300-400 MB with lazy module loading, CUDA >=
                                  // 11.7 (pytorch/pytorch#107667, #109888), consistent with the fit
    d->mem_frag = 0.22;           // fit (study's out-of-memory boundaries): what a framework holds beyond the counted
                                  // activations: allocator fragmentation, autograd's copies and views (not of the
                                  // loss's and attention's temporaries: blocks of a few GiB, each its own exact-size
                                  // segment)
    d->hbm_bw = 2.039e12;
    d->hbm_eff = 0.58;            // fit: also covers the passes the byte table misses (layout copies, casts)
    d->op_latency = 4e-6;         // estimate, no source found: launch + tail of one elementwise kernel on the GPU (a
                                  // tiny x + y: 1.1-1.3 us a call, pytorch/pytorch#161104; the host's launch, 5-20
                                  // us, is not this)
    d->intra_bw = 300e9;
    d->intra_latency = 3.4e-6;    // NCCL's cost model, a ring step over NVLink, protocol Simple (src/graph/tuning.cc
                                  // hwLat at b647562; time.h ring_latency); was 5 us, unsourced
    d->nic_bw = 200e9 / 8;        // HDR 200 Gb/s
    d->inter_latency = 14e-6;     // the same, a ring step across the network (hwLat NET, Simple); was 10 us
    d->net_overhead = 2e-6;       // NCCL's getNetOverhead on an AMD x86 host (tuning.cc at b647562 and v2.18.3-1):
                                  // DGX A100's two AMD Rome 7742 (its datasheet)
    d->link_eff = 0.47;           // fit: NCCL bus bandwidth over the link, stalls of unoverlapped collectives included
    d->link_eff_nccl = 0.67;      // 8 A100-SXM4-80GB, nccl-tests all_reduce_perf: bus bandwidth ~200 of 300 GB/s
                                  // (NVIDIA/nccl-tests#149, NCCL 2.18); Megatron's runs fit 0.67-0.82 (dev/PLANNER.md)
    d->nic_eff = 0.8;             // estimate: NCCL bus bandwidth across nodes over the NICs' line rate; measured
                                  // 0.86-0.96 for large all-reduces (NVIDIA/nccl-tests#119, nccl#1048: dev/PLANNER.md)
    d->dp_overlap = 0.5;          // estimate, no source found (the share of a micro-batch's backward hiding dp traffic)
    d->comm_interference = 0.2;   // estimate, no source found (this trainer's overlapped reduction, the cp ring;
                                  // Megatron's tp overlap is TE's userbuffers as their code runs: time.h): the
                                  // published overlap slowdowns are worst cases (a one-wave GEMM beside an all-gather
                                  // ~2x) or NCCL's (comm_interference_nccl); dev/PLANNER.md
    d->comm_interference_nccl = 0.61;  // GPT and LLaMA training on 4 A100s / H100s / MI250s / MI210s (Lee et al.
                                       // 2025, arXiv 2507.03114, abstract): compute beside communication 18.9%
                                       // slower on average than alone, serial 10.2% slower than overlapped: if the
                                       // collective hides, serial = 1.102 x 1.189 C = C + X gives X = 0.310 C and
                                       // 0.189 / 0.310 = 0.61 per second of collective (a ratio of their averages)
    d->nics_per_gpu = 1;
    d->gpus_per_node = 8;
    d->dtype_bytes = 2;
    d->grad_bytes = 2;            // bf16 gradients: 13B with tp=pp=1 only fits with these (as in the study)
    d->host_up_bw = 25e9;         // PCIe Gen4 x16: 32 GB/s line rate (A100 datasheet: "PCIe Gen4 64 GB/s" both
    d->host_down_bw = 25e9;       // ways); measured 25.13 GB/s host to device (nvbandwidth host_to_device_memcpy_sm,
                                  // A100-SXM4, NVIDIA/nvbandwidth#42), 25-26 each way by the copy engines
                                  // (nvbandwidth#11): the same both ways
    d->host_mem_bw = 25e9;        // DGX A100: 2 EPYC 7742, 8 DDR4-3200 channels each = 410 GB/s for 8 GPUs, ~half
                                  // of it reached by a streaming AdamW on the cores of one GPU's share (assumed)
    d->host_mem_bytes = 256 * GiB;  // DGX A100 640GB datasheet: 2 TB system memory for 8 GPUs
}

// The 40 GB A100 (SXM4): the 80 GB one's profile with its memory and HBM2 bandwidth (datasheet:
// 40 GB, 1,555 GB/s).
static void profile_a100_40gb(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "a100-40gb");
    d->mem_bytes = 40 * GiB;
    d->hbm_bw = 1.555e12;
    d->host_mem_bytes = 128 * GiB;  // DGX A100 320GB datasheet: 1 TB system memory for 8 GPUs
}

static void profile_h100(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "h100-sxm");
    d->peak_flops = 989e12;       // dense bf16 (SXM5)
    d->matmul_eff_own = 0.855;    // the main loop on full 128 x 128 tiles: with matmul_k_half 128, from this project's
    d->matmul_k_half = 128;       // H200 (dev/RESULTS.md, same GH100 die and clocks): N 8192, 768 -> 3072 forward
                                  // 677 TFLOP/s (as measured; K 768 costs 14%), its backward 711 (measured 750);
                                  // 8192^3: 808 TFLOP/s
    d->matmul_eff = 0.634;        // a PyTorch framework's step (Megatron, FSDP), not fitted to any H100 run: 0.79 of
                                  // the H100's largest measured matmul (792 of 989, ml-engineering's MAMF table), the
                                  // study's A100 fit's ratio (0.68 of 268 TFLOP/s). The A100's own rule (PyTorch's
                                  // measured a @ b over matmul_shape_eff) gives 0.78-0.86 here: bf16 8192^3 797.5
                                  // TFLOP/s in PyTorch 2.7 (zzc0721/torch-performance-test-data#79), bmm 2048 x 8192
                                  // x 8192 742.7 in 2023 (pytorch/pytorch#100850); its ratio to the MAMF carried
                                  // over, 0.69-0.72. At any of them 7-12 met H100 sources miss leave-one-source-out;
                                  // they want 0.55-0.74 (dev/PLANNER.md, tenth session). (Until 2026-12-05 0.56,
                                  // fitted to llm-foundry's H100 tables)
    d->matmul_eff_scaling = 0.634;  // no study run on an H100: the framework's
    d->bmm_eff = 0.634;           // as matmul_eff (the A100's note)
    d->sms = 132;
    d->attn_eff_flash2 = 0.35;    // FlashAttention-2 on the H100: "only 35% utilization" (Shah et al. 2024, FA3), the
                                  // top of its benchmark (16k: 328 TFLOP/s over the tiles, 0.334): attn_length's anchor
    d->attn_length = &ATTN_LENGTH_H100;
    d->attn_eff_flash1 = 0.25;
    d->attn_eff_flash3 = 0.529;   // Hopper's fused attention, cuDNN's forward + backward at attn_length's anchor (16k):
                                  // the forward 539 TFLOP/s over the tiles (128/129), the backward 516, of 989
    d->attn_eff_own = 0.132;      // this trainer's kernels on the H200 (dev/RESULTS.md, B 8, T 1024, 12 heads of 64):
                                  // forward 144, backward 108 TFLOP/s, 116 for the pair = 0.118 of peak, over
                                  // flash_shape_eff there (0.889)
    d->hbm_bw = 3.35e12;
    d->intra_bw = 450e9;          // NVLink4 900 GB/s bidirectional
    d->nic_bw = 400e9 / 8;        // NDR 400 Gb/s
    d->nvls = 1;                  // NVSwitch 3 (HGX H100/H200): NVLink SHARP, NCCL 2.17+ (time.h: what it gains)
    d->link_eff_nccl = 0.82;      // 8 H100 SXM: a ring's bus bandwidth 365-370 of 450 GB/s on 2-8 GPUs
                                  // (NVIDIA/nccl#1455; "370GB/s ... the real target for NCCL BusBW intra-node",
                                  // nccl#1442); link_eff keeps the A100's fit (0.47), the study's software being
                                  // A100-only
    d->host_up_bw = 35.2e9;       // PCIe Gen5 x16: 64 GB/s line rate (H100 SXM datasheet: 128 GB/s both ways);
    d->host_down_bw = 52.8e9;     // measured on 8 H100s of a cluster (nvbandwidth memcpy_sm, NVIDIA/nvbandwidth#24):
                                  // host to device 35.0-35.4 GB/s, device to host 52.8: not the same both ways
    d->host_mem_bw = 38e9;        // DGX H100: 2 Xeon 8480C, 8 DDR5-4800 channels each = 614 GB/s for 8 GPUs, ~half
    d->host_mem_bytes = 256 * GiB;  // DGX H100 (and DGX H200) datasheet: 2 TB system memory for 8 GPUs
    d->net_overhead = 1e-6;       // getNetOverhead on an Intel x86 host: DGX H100's two Xeon 8480C (3 us a step,
                                  // under NVLink's 3.4: no change)
}

// A non-DGX A100 cluster with fewer NICs than GPUs: Jean Zay's A100 partition, where BLOOM-176B
// was trained (bigscience-workshop/bigscience train/tr11-176B-ml/README.md: 8 A100 80GB per node,
// NVLink between them, "4 OmniPath links", Omni-Path Architecture 100 Gb/s each). Two GPUs share
// a NIC: a group with one rank per node gets half a NIC (group_link_nested), a pipeline message
// leaving the node as much.
static void profile_jean_zay_a100(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "jean-zay-a100");
    d->nics_per_gpu = 0.5;        // 4 a node of 8
    d->nic_bw = 100e9 / 8;        // Omni-Path 100 Gb/s
    d->host_mem_bytes = 64 * GiB;  // 512 GB of CPU memory per node (the README above)
    d->net_overhead = 2e-6;       // "CPU: AMD" (the README above): getNetOverhead's AMD value, as the DGX A100's
}

// Meta's Grand Teton hosts as torchtitan benchmarked them (pytorch/torchtitan benchmarks/
// llama3_h100_202412_torchtitan.md): 8 H100 with 96 GB of HBM2e at 2.4 TB/s, NVLink between them,
// 400 Gb/s of RDMA per GPU, at the default 500 W power limit: "the actual peak TFLOPs number is between
// SXM and NVL, and we don't know its exact value" (the page computes MFU against the SXM's, as the
// rows do). The clock at 500 W from NVIDIA's H100 datasheet, whose two parts have the same 132 SMs:
// SXM 989 dense BF16 TFLOP/s at up to 700 W, NVL 835.5 at 350-400 W (1,671 with sparsity): 1830 and
// 1545 MHz of tensor clock. Between the two, linear in power: 835.5 + (989 - 835.5) x (500 - 400) /
// (700 - 400) = 886.8 TFLOP/s, 0.896 of the SXM's (a clock cubic in power, dynamic power ~ f V^2 with V
// ~ f, gives (500 / 700)^(1/3) = 0.894; it puts the NVL at 0.830, the datasheet 0.845). Memory and
// links keep their rates: the power limit lowers the SMs' clock, not HBM's nor NVLink's.
static void profile_grand_teton_h100(DeviceProfile* d) {
    profile_h100(d);
    snprintf(d->name, sizeof(d->name), "grand-teton-h100");
    d->mem_bytes = 96e9;
    d->hbm_bw = 2.4e12;
    d->tensor_clock = (835.5 + (989.0 - 835.5) * (500.0 - 400.0) / (700.0 - 400.0)) / 989.0;  // 0.8967
}

// AWS's A100 and H100 instances, whose fabric is EFA (Elastic Fabric Adapter, 100 Gb/s per device), not
// one InfiniBand NIC per GPU: p4d.24xlarge / p4de.24xlarge have 8 A100 (40 GB / 80 GB) behind 4 EFA devices
// (400 Gb/s per node, a quarter of a DGX A100's 1,600), p5.48xlarge 8 H100 SXM behind 32 (3,200 Gb/s, a DGX
// H100's). Device counts: meta-pytorch/torchx torchx/specs/named_resources_aws.py (EFA_DEVICE 4 / 4 / 32);
// host memory 1,152 GiB (p4) / 2,048 GiB (p5) for 8 GPUs, the same file. nic_eff is kept (0.8, an estimate
// for InfiniBand; not measured on EFA). Hosts: Intel on p4d / p4de, AMD on p5 (aws/karpenter-provider-aws
// website/content/en/preview/reference/instance-types.md at 1d927085: instance-cpu-manufacturer intel for
// p4d.24xlarge, p4de.24xlarge and p5en.48xlarge, amd for p5.48xlarge), which sets NCCL's net overhead.
static void profile_aws_p4d(DeviceProfile* d) {
    profile_a100_40gb(d);
    snprintf(d->name, sizeof(d->name), "aws-p4d-a100");
    d->nics_per_gpu = 0.5;        // 4 EFA devices a node of 8
    d->nic_bw = 100e9 / 8;
    d->host_mem_bytes = 144 * GiB;
    d->net_overhead = 1e-6;       // p4d's host: Intel Xeon Scalable (Cascade Lake), getNetOverhead's Intel value
}
static void profile_aws_p4de(DeviceProfile* d) {  // p4d's node with the 80 GB A100 (a100-80gb's memory and HBM)
    profile_aws_p4d(d);
    snprintf(d->name, sizeof(d->name), "aws-p4de-a100");
    d->mem_bytes = 80 * GiB;
    d->hbm_bw = 2.039e12;
}
static void profile_aws_p5(DeviceProfile* d) {
    profile_h100(d);
    snprintf(d->name, sizeof(d->name), "aws-p5-h100");
    d->nics_per_gpu = 4;          // 32 EFA devices a node of 8
    d->nic_bw = 100e9 / 8;
    d->net_overhead = 2e-6;       // p5's host: AMD (above), getNetOverhead's AMD value, as the DGX A100's
}

static void profile_h200(DeviceProfile* d) {
    profile_h100(d);
    snprintf(d->name, sizeof(d->name), "h200-sxm");
    d->mem_bytes = 143771.0 * 1024 * 1024;  // nvidia-smi's total (141 GB of HBM3e)
    d->hbm_bw = 4.8e12;
    // links as the H100's: 8 H200s measured an all-reduce (NVLS) bus bandwidth of 475 GB/s at its peak
    // (NVIDIA/nccl-tests#272, NCCL 2.20), the H100's 480
}

// A 4-GPU HGX H200 board: no NVSwitch, each GPU's 18 NVLink4 links wired 6 to each of the other three (NVIDIA
// HGX H100 4-GPU; the H200's the same SXM5 part), so a pair of GPUs has 6 x 25 GB/s each way and NVLink SHARP
// has no switch to run on. The Kempner Institute's H200 nodes (kempner_h200: 4 H200 141GB a water-cooled node,
// NVLink between the GPUs: kempner-computing-handbook overview_of_kempner_cluster.md, understanding_slurm.md,
// gpu_types_and_use_cases.md at 330bcb9), one ConnectX-7 NDR a GPU (the h200-sxm profile's) as KempnerForge's
// scripts/slurm/multinode.sh at 5d3e723 lists.
static void profile_h200_hgx4(DeviceProfile* d) {
    profile_h200(d);
    snprintf(d->name, sizeof(d->name), "h200-hgx4");
    d->intra_pair_bw = 150e9;
    d->nvls = 0;
    d->gpus_per_node = 4;
}

// This machine class: ranks are processes on one host, fp32 throughout, the trainer's
// own C kernels (blockwise attention: no T x T matrix), MPI through shared memory.
// Peak: 2 Zen3 cores, AVX2 FMA at ~2.45 GHz: 2 x 2 x 8 x 2 x 2.45 = 157 GFLOP/s (the
// trainer passes its measured peak instead). matmul_eff and intra_latency are what
// scripts/sweep.py's calibration found on 2026-12-02 for the tiny model on 2 cores (0.19,
// 20 us); recalibrate with it, or set them with --device-file / --device-set.
static void profile_cpu(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "cpu");
    d->peak_flops = 157e9;
    d->matmul_eff = d->matmul_eff_own = d->matmul_eff_scaling = 0.19;
    d->matmul_latency = 2e-6;
    d->sms = 0;
    d->attn_eff_flash2 = d->attn_eff_flash1 = d->attn_eff_flash3 = d->attn_eff_own = 0.30;
    d->attn_length = NULL;
    d->bmm_eff = 0.30;
    d->mem_bytes = 16 * GiB;
    d->mem_overhead = 0.25 * GiB;
    d->mem_frag = 0;
    d->hbm_bw = 20e9;
    d->hbm_eff = 0.7;
    d->op_latency = 1e-6;
    d->intra_bw = 5e9;            // MPI p2p through shared memory
    d->intra_latency = 20e-6;     // one collective step between ranks that time-share cores
    d->nic_bw = 10e9 / 8;         // 10 GbE, only used if a run spans hosts
    d->inter_latency = 30e-6;
    d->link_eff = d->link_eff_nccl = d->nic_eff = 1.0;
    d->dp_overlap = 0.0;          // the CPU trainer reduces gradients with blocking MPI calls
    d->comm_interference_nccl = d->comm_interference;  // MPI, no NCCL kernels
    d->nics_per_gpu = 1;
    d->gpus_per_node = 0;
    d->dtype_bytes = 4;
    d->grad_bytes = 4;
    d->shared_cores = 0;          // set to the machine's cores when the ranks share them
    d->host_up_bw = 20e9;         // the "device" is host memory: a copy to the offload tier is a memcpy (page cache)
    d->host_down_bw = 20e9;
    d->host_mem_bw = 20e9;
    d->host_mem_bytes = 0;        // the CPU build's tier is a file in --offload-dir (the page cache, then disk)
}

static const char* PROFILE_NAMES =
    "a100-80gb (dgx-a100), a100-40gb, h100-sxm (dgx-h100), h200-sxm (dgx-h200), h200-hgx4, jean-zay-a100, "
    "grand-teton-h100, aws-p4d-a100, aws-p4de-a100, aws-p5-h100, cpu";

// Fill *d with the built-in profile `name`; -1 if there is none.
static int profile_builtin(const char* name, DeviceProfile* d) {
    if (!strcmp(name, "a100-80gb") || !strcmp(name, "dgx-a100")) profile_a100(d);
    else if (!strcmp(name, "a100-40gb")) profile_a100_40gb(d);
    else if (!strcmp(name, "h100-sxm") || !strcmp(name, "dgx-h100")) profile_h100(d);
    else if (!strcmp(name, "h200-sxm") || !strcmp(name, "dgx-h200")) profile_h200(d);
    else if (!strcmp(name, "h200-hgx4")) profile_h200_hgx4(d);
    else if (!strcmp(name, "jean-zay-a100")) profile_jean_zay_a100(d);
    else if (!strcmp(name, "grand-teton-h100")) profile_grand_teton_h100(d);
    else if (!strcmp(name, "aws-p4d-a100")) profile_aws_p4d(d);
    else if (!strcmp(name, "aws-p4de-a100")) profile_aws_p4de(d);
    else if (!strcmp(name, "aws-p5-h100")) profile_aws_p5(d);
    else if (!strcmp(name, "cpu")) profile_cpu(d);
    else return -1;
    return 0;
}

// The keys of a device file (and of --device-set KEY=VALUE), with units and bounds.
typedef struct {
    const char* key;
    size_t offset;
    int is_int;
    double scale, lo, hi;  // value in the file times scale is stored; lo <= value <= hi
    const char* what;
} ProfileKey;

#define PKEY(k, field, is_int, scale, lo, hi, what) {k, offsetof(DeviceProfile, field), is_int, scale, lo, hi, what}
static const ProfileKey PROFILE_KEYS[] = {
    PKEY("peak_tflops", peak_flops, 0, 1e12, 1e-9, 1e6, "dense peak TFLOP/s"),
    PKEY("matmul_eff", matmul_eff, 0, 1, 1e-3, 1, "fraction of peak of a large matmul in a framework's step"),
    PKEY("matmul_eff_scaling", matmul_eff_scaling, 0, 1, 1e-3, 1, "the same in the layouts study's software"),
    PKEY("matmul_eff_own", matmul_eff_own, 0, 1, 1e-3, 1, "fraction of peak of this trainer's own matmuls"),
    PKEY("matmul_latency_us", matmul_latency, 0, 1e-6, 0, 1e6, "fixed microseconds per matmul"),
    PKEY("attn_eff_flash2", attn_eff_flash2, 0, 1, 1e-3, 1, "fraction of peak of FlashAttention-2"),
    PKEY("attn_eff_flash1", attn_eff_flash1, 0, 1, 1e-3, 1, "fraction of peak of FlashAttention 1"),
    PKEY("attn_eff_flash3", attn_eff_flash3, 0, 1, 1e-3, 1, "fraction of peak of Hopper's fused attention (FA3)"),
    PKEY("attn_eff_own", attn_eff_own, 0, 1, 1e-3, 1, "fraction of peak of this trainer's flash kernels"),
    PKEY("bmm_eff", bmm_eff, 0, 1, 1e-3, 1, "fraction of peak of unfused attention's batched matmuls"),
    PKEY("tensor_clock", tensor_clock, 0, 1, 1e-3, 1, "sustained clock over the peak's (a power limit's)"),
    PKEY("mem_gib", mem_bytes, 0, GiB, 1e-6, 1e6, "device memory, GiB"),
    PKEY("mem_overhead_gib", mem_overhead, 0, GiB, 0, 1e6, "unusable memory, GiB"),
    PKEY("mem_frag", mem_frag, 0, 1, 0, 1, "fraction of activations lost to fragmentation"),
    PKEY("hbm_gbps", hbm_bw, 0, 1e9, 1e-6, 1e6, "memory bandwidth, GB/s"),
    PKEY("hbm_eff", hbm_eff, 0, 1, 1e-3, 1, "fraction of memory bandwidth elementwise ops reach"),
    PKEY("op_latency_us", op_latency, 0, 1e-6, 0, 1e6, "fixed microseconds per elementwise kernel"),
    PKEY("intra_gbps", intra_bw, 0, 1e9, 1e-6, 1e6, "intra-node GB/s per GPU, one direction"),
    PKEY("intra_pair_gbps", intra_pair_bw, 0, 1e9, 0, 1e6, "GB/s one way between 2 GPUs wired directly (0: NVSwitch)"),
    PKEY("intra_latency_us", intra_latency, 0, 1e-6, 0, 1e6, "intra-node latency, microseconds"),
    PKEY("nic_gbits", nic_bw, 0, 1e9 / 8, 1e-6, 1e6, "Gb/s per NIC, one direction"),
    PKEY("nics_per_gpu", nics_per_gpu, 0, 1, 1.0 / 64, 64, "a node's NICs over its GPUs (0.5: 2 GPUs a NIC)"),
    PKEY("inter_latency_us", inter_latency, 0, 1e-6, 0, 1e6, "inter-node latency, microseconds"),
    PKEY("net_overhead_us", net_overhead, 0, 1e-6, 0, 1e6, "NCCL's network post overhead by host CPU, microseconds"),
    PKEY("link_eff", link_eff, 0, 1, 1e-3, 1, "fraction of NVLink bandwidth collectives reach inside a node"),
    PKEY("link_eff_nccl", link_eff_nccl, 0, 1, 1e-3, 1, "the same as NCCL measures it (--software framework)"),
    PKEY("nic_eff", nic_eff, 0, 1, 1e-3, 1, "fraction of NIC bandwidth collectives reach across nodes"),
    PKEY("dp_overlap", dp_overlap, 0, 1, 0, 1, "fraction of a backward that hides the DP reduction"),
    PKEY("comm_interference", comm_interference, 0, 1, 0, 1, "compute slowdown per second of overlapped communication"),
    PKEY("comm_interference_nccl", comm_interference_nccl, 0, 1, 0, 1, "the same for NCCL's kernels (framework)"),
    PKEY("gpus_per_node", gpus_per_node, 1, 1, 0, 1 << 20, "default GPUs per node (0: one node)"),
    PKEY("dtype_bytes", dtype_bytes, 1, 1, 2, 4, "2 (bf16 mixed precision) or 4 (fp32)"),
    PKEY("grad_bytes", grad_bytes, 1, 1, 2, 4, "2 (bf16) or 4 (fp32) gradient bytes"),
    PKEY("shared_cores", shared_cores, 1, 1, 0, 1 << 20, "cores the ranks time-share (0: a device per rank)"),
    PKEY("sms", sms, 1, 1, 0, 1 << 20, "streaming multiprocessors (0: no wave quantization)"),
    PKEY("nvls", nvls, 1, 1, 0, 1, "1: NVSwitches reduce in the switch (all-reduce inside a node)"),
    PKEY("matmul_k_half", matmul_k_half, 0, 1, 0, 1e9, "a GEMM tile's fixed cost in elements of K"),
    PKEY("host_up_gbps", host_up_bw, 0, 1e9, 1e-6, 1e6, "host -> device GB/s per GPU, the uploads (--offload)"),
    PKEY("host_down_gbps", host_down_bw, 0, 1e9, 1e-6, 1e6, "device -> host GB/s per GPU, the downloads (--offload)"),
    PKEY("host_mem_gbps", host_mem_bw, 0, 1e9, 1e-6, 1e6, "host memory GB/s per GPU's share (--offload optimizer)"),
    PKEY("host_mem_gib", host_mem_bytes, 0, GiB, 0, 1e6, "host memory GiB per GPU's share (--offload; 0: unchecked)"),
};
#define N_PROFILE_KEYS ((int)(sizeof(PROFILE_KEYS) / sizeof(PROFILE_KEYS[0])))

// Set one key from its text value. Returns 0, or -1 with a message in err.
static int profile_set(DeviceProfile* d, const char* key, const char* value, char* err, size_t err_len) {
    if (!strcmp(key, "name")) {
        if (!*value || strlen(value) >= sizeof(d->name)) {
            snprintf(err, err_len, "name: expected 1-%d characters", (int)sizeof(d->name) - 1);
            return -1;
        }
        snprintf(d->name, sizeof(d->name), "%s", value);
        return 0;
    }
    for (int i = 0; i < N_PROFILE_KEYS; i++) {
        const ProfileKey* k = &PROFILE_KEYS[i];
        if (strcmp(key, k->key)) continue;
        errno = 0;
        double v = k->is_int ? (double)strtol(value, NULL, 10) : strtod(value, NULL);
        if (errno || !decimal_text(value, !k->is_int)) {  // as written: no blanks, hex, inf or nan
            snprintf(err, err_len, "%s: expected %s, got '%s'", key, k->is_int ? "an integer" : "a number", value);
            return -1;
        }
        if (v < k->lo || v > k->hi ||
            (k->is_int && (!strcmp(key, "dtype_bytes") || !strcmp(key, "grad_bytes")) && v == 3)) {
            snprintf(err, err_len, "%s = %s is out of range (%s; allowed %g .. %g)", key, value, k->what, k->lo, k->hi);
            return -1;
        }
        if (k->is_int) *(int*)((char*)d + k->offset) = (int)v;
        else *(double*)((char*)d + k->offset) = v * k->scale;
        return 0;
    }
    int n = snprintf(err, err_len, "unknown key '%s' (known: name, base", key);
    for (int i = 0; i < N_PROFILE_KEYS && n > 0 && (size_t)n < err_len; i++)
        n += snprintf(err + n, err_len - n, ", %s", PROFILE_KEYS[i].key);
    if (n > 0 && (size_t)n < err_len) snprintf(err + n, err_len - n, ")");
    return -1;
}

// Read a device file: lines "key = value", '#' starts a comment. An optional first key
// "base = NAME" starts from a built-in profile (else from a100-80gb). Returns 0, or -1
// with "FILE:LINE: message" in err.
#define PROFILE_MAX_BYTES (1 << 20)
static int profile_parse_file(const char* path, DeviceProfile* d, char* err, size_t err_len) {
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) { snprintf(err, err_len, "cannot open device file '%s': %s", path, why); return -1; }
    struct stat st;
    if (!fstat(fileno(f), &st) && st.st_size > PROFILE_MAX_BYTES) {  // read whole, line by line, with no stop
        snprintf(err, err_len, "%s: %lld bytes, more than a profile's %d (its keys are a few dozen lines)", path,
                 (long long)st.st_size, PROFILE_MAX_BYTES);
        fclose(f);
        return -1;
    }
    profile_a100(d);
    char line[512], msg[400];
    int line_no = 0, n_keys = 0, rc = 0, seen_line[N_PROFILE_KEYS + 1] = {0};  // the line each key was on (+ name)
    while (fgets(line, sizeof(line), f)) {
        line_no++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, err_len, "%s:%d: line too long", path, line_no);
            rc = -1;
            break;
        }
        char* hash = strchr(line, '#');
        if (hash) *hash = 0;
        char* eq = strchr(line, '=');
        char *key = line, *val = eq ? eq + 1 : NULL;
        if (eq) *eq = 0;
        // trim both
        while (*key == ' ' || *key == '\t') key++;
        for (char* e = key + strlen(key); e > key && strchr(" \t\r\n", e[-1]); ) *--e = 0;
        if (!eq && !*key) continue;  // blank or comment line
        if (!eq || !*key) { snprintf(err, err_len, "%s:%d: expected 'key = value'", path, line_no); rc = -1; break; }
        while (*val == ' ' || *val == '\t') val++;
        for (char* e = val + strlen(val); e > val && strchr(" \t\r\n", e[-1]); ) *--e = 0;
        if (!*val) { snprintf(err, err_len, "%s:%d: %.64s: missing value", path, line_no, key); rc = -1; break; }
        int k = !strcmp(key, "name") ? N_PROFILE_KEYS : -1;  // a key given twice: which one the user meant is not known
        for (int i = 0; i < N_PROFILE_KEYS && k < 0; i++) k = strcmp(key, PROFILE_KEYS[i].key) ? -1 : i;
        if (k >= 0 && seen_line[k]) {
            snprintf(err, err_len, "%s:%d: %s: given on line %d already", path, line_no, key, seen_line[k]);
            rc = -1;
            break;
        }
        if (k >= 0) seen_line[k] = line_no;
        if (!strcmp(key, "base")) {
            if (n_keys > 0) {
                snprintf(err, err_len, "%s:%d: 'base' must be the first key", path, line_no);
                rc = -1;
                break;
            }
            if (profile_builtin(val, d)) {
                snprintf(err, err_len, "%s:%d: base: unknown device '%s' (known: %s)", path, line_no, val,
                         PROFILE_NAMES);
                rc = -1;
                break;
            }
        } else if (profile_set(d, key, val, msg, sizeof(msg))) {
            snprintf(err, err_len, "%s:%d: %s", path, line_no, msg); rc = -1; break;
        }
        n_keys++;
    }
    fclose(f);
    if (!rc && !n_keys) {  // an empty file (a failed export of a profile, say) is not the A100 it would default to
        snprintf(err, err_len, "%s: no 'key = value' line (an empty profile; 'base = NAME' alone names a built-in)",
                 path);
        rc = -1;
    }
    return rc;
}

#endif
