// planner.h: the layout planner. For a model, a number of GPUs and a device profile it
// enumerates every parallel layout (dp x cp x tp x pp, context-parallel kind, virtual
// stages, micro-batch size, recomputation, sequence parallelism, ZeRO stage, schedule) and
// every attention and norm kernel, predicts per-GPU memory and step time for each from
// first principles, and prints them ranked by throughput. It also predicts given runs
// (--runs FILE.csv), which is how it is checked against measured ones
// (scripts/validate_planner.py).
//
//   ./train --plan --model llama-13b --gpus 64 --device a100-80gb --global-batch-tokens 4194304
//
// The model, in one paragraph (dev/PLANNER.md has the long form):
//   memory  = model states (bytes per parameter by ZeRO stage) + activations (Korthikanti
//             et al. 2022, per layer and kernel, of the T/cp tokens a rank holds, times the
//             (micro-batch, chunk) pairs the stage holds at peak under its schedule:
//             schedule_max_in_flight) + under the zero-bubble schedules the weight pass's
//             inputs of the pairs whose W is still owed + the largest temporaries (logits and
//             loss, unfused attention's score matrices, the layer being recomputed, context
//             parallelism's buffers) + allocator fragmentation + a fixed reserve.
//   compute = per op roofline: matmuls max(FLOPs / (peak * eff), bytes / HBM) plus a fixed
//             latency per kernel, attention at its kernel's efficiency plus the passes over
//             the T x T scores unfused kernels make, elementwise ops at HBM bandwidth.
//             Backward = 2x forward for matmuls, split into the input pass B (input
//             gradients, attention, norms) and the weight pass W (weight gradients, the
//             second half of the matmuls); recomputation adds forward work to B.
//   comm    = ring collectives 2(n-1)/n * bytes / bw (+ latency per step) on the link each
//             group lands on (NVLink inside a node, the node's NICs across nodes, given the
//             rank order): tensor parallelism inside the chunk times, pipeline p2p, and the
//             data-parallel gradient reduction (partly hidden under the last backward);
//             context parallelism's ring (overlapped with the attention) and all-to-alls.
//   step    = schedule_simulate() of the real schedule (schedule.h) with those per-chunk
//             F, B and W times + exposed DP communication + the optimizer step.
#ifndef PLANNER_H
#define PLANNER_H

#include <stddef.h>
#include "runtime/files.h"
#include "parallel/schedule.h"

// ----------------------------------------------------------------------------
// Device profiles

typedef struct {
    char name[32];
    // compute
    double peak_flops;       // dense FLOP/s in the training dtype (bf16 tensor cores on GPUs)
    double matmul_eff;       // fraction of peak a large matmul reaches (cuBLAS on big GEMMs)
    int sms;                 // streaming multiprocessors a matmul's tiles are spread over (0: none)
    double matmul_latency;   // s, fixed cost per matmul (launch, last partial wave): a matmul of F
                             // FLOPs runs at eff(F) = matmul_eff * F / (F + F_half), F_half = peak*matmul_eff*latency
    double attn_eff_flash2;  // fraction of peak of FlashAttention-2 forward + backward (causal FLOPs)
    double attn_eff_flash1;  // the same for FlashAttention 1
    double bmm_eff;          // fraction of peak of the batched Q K^T and P V matmuls of unfused attention
    // memory
    double mem_bytes;        // device memory
    double mem_overhead;     // bytes never available: CUDA context, cuBLAS workspace, NCCL buffers
    double mem_frag;         // fraction of activations and temporaries lost to allocator fragmentation
    double hbm_bw;           // bytes/s, peak memory bandwidth
    double hbm_eff;          // fraction of hbm_bw elementwise kernels reach
    double op_latency;       // s per elementwise kernel (launch + tail)
    // links
    double intra_bw;         // bytes/s per GPU, one direction, inside a node (NVLink; shared memory on CPU)
    double intra_latency;    // s per step of a collective inside a node
    double nic_bw;           // bytes/s per NIC, one direction (InfiniBand HCA)
    double inter_latency;    // s per step of a collective across nodes
    double link_eff;         // fraction of link bandwidth collectives reach (NCCL bus bandwidth / link)
    double dp_overlap;       // fraction of one micro-batch's backward (forward) under which the DP
                             // gradient reduce (parameter all-gather) hides
    double comm_interference;  // slowdown of compute per second of communication it overlaps
    int nics_per_node;       // NICs in a node, shared by its GPUs
    int gpus_per_node;       // default for --gpus-per-node (0: all GPUs in one node)
    // software
    int dtype_bytes;         // 2: bf16 mixed precision with fp32 master weights; 4: fp32 throughout
    int grad_bytes;          // bytes of an accumulated gradient (2: bf16, 4: fp32)
    // ranks that time-share cores (the CPU build): 0 for devices of their own, else the
    // number of cores all ranks share; a rank runs at peak_flops when it has a core to itself
    int shared_cores;
} DeviceProfile;

#define GiB (1024.0 * 1024.0 * 1024.0)

// Built-in profiles. A100 node (DGX A100 / HGX A100 style): 8 GPUs, NVLink3 600 GB/s
// bidirectional = 300 GB/s each way per GPU, and we ASSUME 8 HDR InfiniBand HCAs of
// 200 Gb/s per node (one per GPU); H100/H200: NVLink4 900 GB/s bidirectional, 8 NDR
// 400 Gb/s HCAs per node. Efficiencies marked "fit" were fitted once to the 334 runs of
// Hagemann et al. 2023 (dev/PLANNER.md, scripts/validate_planner.py); the others are
// datasheet values or published kernel figures. The H100/H200 profiles keep the A100's
// fitted efficiencies except where a published figure says otherwise.
static void profile_a100(DeviceProfile* d) {
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "a100-80gb");
    d->peak_flops = 312e12;       // dense bf16
    d->matmul_eff = 0.69;         // fit (large bf16 GEMMs: 215 TFLOP/s in full waves)
    d->matmul_latency = 8e-6;
    d->sms = 108;
    d->attn_eff_flash2 = 0.50;    // FlashAttention-2 fwd+bwd, causal, head dim 128, 2k-8k tokens (Dao 2023: ~150-175 TFLOP/s)
    d->attn_eff_flash1 = 0.26;    // fit (FlashAttention 1.0.8, head dim 128)
    d->bmm_eff = 0.34;            // fit (the batched K=128 score matmuls of unfused attention)
    d->mem_bytes = 80 * GiB;
    d->mem_overhead = 1 * GiB;    // CUDA context ~0.5, cuBLAS workspaces
    d->mem_frag = 0.30;           // fit: allocator fragmentation, communication and pipeline buffers
    d->hbm_bw = 2.039e12;
    d->hbm_eff = 0.49;            // fit: also covers the passes the byte table misses (layout copies, casts)
    d->op_latency = 4e-6;
    d->intra_bw = 300e9;
    d->intra_latency = 5e-6;
    d->nic_bw = 200e9 / 8;        // HDR 200 Gb/s
    d->inter_latency = 10e-6;
    d->link_eff = 0.58;           // fit: NCCL bus bandwidth over the link, stalls of unoverlapped collectives included
    d->dp_overlap = 0.5;
    d->comm_interference = 0.2;
    d->nics_per_node = 8;
    d->gpus_per_node = 8;
    d->dtype_bytes = 2;
    d->grad_bytes = 2;            // bf16 gradients: 13B with tp=pp=1 only fits with these (as in the study)
}

static void profile_h100(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "h100-sxm");
    d->peak_flops = 989e12;       // dense bf16 (SXM5)
    d->matmul_eff = 0.70;         // large GEMMs reach ~700 TFLOP/s
    d->sms = 132;
    d->attn_eff_flash2 = 0.40;    // FlashAttention-2 on Hopper reaches ~35-45% (FA3 more)
    d->attn_eff_flash1 = 0.25;
    d->hbm_bw = 3.35e12;
    d->intra_bw = 450e9;          // NVLink4 900 GB/s bidirectional
    d->nic_bw = 400e9 / 8;        // NDR 400 Gb/s
}

static void profile_h200(DeviceProfile* d) {
    profile_h100(d);
    snprintf(d->name, sizeof(d->name), "h200-sxm");
    d->mem_bytes = 141e9;
    d->hbm_bw = 4.8e12;
}

// This machine class: ranks are processes on one host, fp32 throughout, the trainer's
// own C kernels (attention materializes the T x T matrix), MPI through shared memory.
// Peak: 2 Zen3 cores, AVX2 FMA at ~2.45 GHz: 2 x 2 x 8 x 2 x 2.45 = 157 GFLOP/s (the
// trainer passes its measured peak instead). matmul_eff and intra_latency are what
// scripts/sweep.py's calibration found on 2026-12-02 for the tiny model on 2 cores (0.19,
// 20 us); recalibrate with it, or set them with --device-file / --device-set.
static void profile_cpu(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "cpu");
    d->peak_flops = 157e9;
    d->matmul_eff = 0.19;
    d->matmul_latency = 2e-6;
    d->sms = 0;
    d->attn_eff_flash2 = d->attn_eff_flash1 = 0.30;
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
    d->link_eff = 1.0;
    d->dp_overlap = 0.0;          // the CPU trainer reduces gradients with blocking MPI calls
    d->nics_per_node = 1;
    d->gpus_per_node = 0;
    d->dtype_bytes = 4;
    d->grad_bytes = 4;
    d->shared_cores = 0;          // set to the machine's cores when the ranks share them
}

static const char* PROFILE_NAMES = "a100-80gb, h100-sxm, h200-sxm, cpu";

// Fill *d with the built-in profile `name`; -1 if there is none.
static int profile_builtin(const char* name, DeviceProfile* d) {
    if (!strcmp(name, "a100-80gb")) profile_a100(d);
    else if (!strcmp(name, "h100-sxm")) profile_h100(d);
    else if (!strcmp(name, "h200-sxm")) profile_h200(d);
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
    PKEY("matmul_eff", matmul_eff, 0, 1, 1e-3, 1, "fraction of peak of a large matmul"),
    PKEY("matmul_latency_us", matmul_latency, 0, 1e-6, 0, 1e6, "fixed microseconds per matmul"),
    PKEY("attn_eff_flash2", attn_eff_flash2, 0, 1, 1e-3, 1, "fraction of peak of FlashAttention-2"),
    PKEY("attn_eff_flash1", attn_eff_flash1, 0, 1, 1e-3, 1, "fraction of peak of FlashAttention 1"),
    PKEY("bmm_eff", bmm_eff, 0, 1, 1e-3, 1, "fraction of peak of unfused attention's batched matmuls"),
    PKEY("mem_gib", mem_bytes, 0, GiB, 1e-6, 1e6, "device memory, GiB"),
    PKEY("mem_overhead_gib", mem_overhead, 0, GiB, 0, 1e6, "unusable memory, GiB"),
    PKEY("mem_frag", mem_frag, 0, 1, 0, 1, "fraction of activations lost to fragmentation"),
    PKEY("hbm_gbps", hbm_bw, 0, 1e9, 1e-6, 1e6, "memory bandwidth, GB/s"),
    PKEY("hbm_eff", hbm_eff, 0, 1, 1e-3, 1, "fraction of memory bandwidth elementwise ops reach"),
    PKEY("op_latency_us", op_latency, 0, 1e-6, 0, 1e6, "fixed microseconds per elementwise kernel"),
    PKEY("intra_gbps", intra_bw, 0, 1e9, 1e-6, 1e6, "intra-node GB/s per GPU, one direction"),
    PKEY("intra_latency_us", intra_latency, 0, 1e-6, 0, 1e6, "intra-node latency, microseconds"),
    PKEY("nic_gbits", nic_bw, 0, 1e9 / 8, 1e-6, 1e6, "Gb/s per NIC, one direction"),
    PKEY("nics_per_node", nics_per_node, 1, 1, 1, 1024, "NICs per node"),
    PKEY("inter_latency_us", inter_latency, 0, 1e-6, 0, 1e6, "inter-node latency, microseconds"),
    PKEY("link_eff", link_eff, 0, 1, 1e-3, 1, "fraction of link bandwidth collectives reach"),
    PKEY("dp_overlap", dp_overlap, 0, 1, 0, 1, "fraction of a backward that hides the DP reduction"),
    PKEY("comm_interference", comm_interference, 0, 1, 0, 1, "compute slowdown per second of overlapped communication"),
    PKEY("gpus_per_node", gpus_per_node, 1, 1, 0, 1 << 20, "default GPUs per node (0: one node)"),
    PKEY("dtype_bytes", dtype_bytes, 1, 1, 2, 4, "2 (bf16 mixed precision) or 4 (fp32)"),
    PKEY("grad_bytes", grad_bytes, 1, 1, 2, 4, "2 (bf16) or 4 (fp32) gradient bytes"),
    PKEY("shared_cores", shared_cores, 1, 1, 0, 1 << 20, "cores the ranks time-share (0: a device per rank)"),
    PKEY("sms", sms, 1, 1, 0, 1 << 20, "streaming multiprocessors (0: no wave quantization)"),
};
#define N_PROFILE_KEYS ((int)(sizeof(PROFILE_KEYS) / sizeof(PROFILE_KEYS[0])))

// Set one key from its text value. Returns 0, or -1 with a message in err.
static int profile_set(DeviceProfile* d, const char* key, const char* value, char* err, size_t err_len) {
    if (!strcmp(key, "name")) {
        if (!*value || strlen(value) >= sizeof(d->name)) { snprintf(err, err_len, "name: expected 1-%d characters", (int)sizeof(d->name) - 1); return -1; }
        snprintf(d->name, sizeof(d->name), "%s", value);
        return 0;
    }
    for (int i = 0; i < N_PROFILE_KEYS; i++) {
        const ProfileKey* k = &PROFILE_KEYS[i];
        if (strcmp(key, k->key)) continue;
        char* end;
        errno = 0;
        double v = k->is_int ? (double)strtol(value, &end, 10) : strtod(value, &end);
        if (errno || end == value || *end || v != v) {
            snprintf(err, err_len, "%s: expected %s, got '%s'", key, k->is_int ? "an integer" : "a number", value);
            return -1;
        }
        if (v < k->lo || v > k->hi || (k->is_int && (!strcmp(key, "dtype_bytes") || !strcmp(key, "grad_bytes")) && v == 3)) {
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
static int profile_parse_file(const char* path, DeviceProfile* d, char* err, size_t err_len) {
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) { snprintf(err, err_len, "cannot open device file '%s': %s", path, why); return -1; }
    profile_a100(d);
    char line[512], msg[400];
    int line_no = 0, n_keys = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        line_no++;
        if (!strchr(line, '\n') && !feof(f)) { snprintf(err, err_len, "%s:%d: line too long", path, line_no); rc = -1; break; }
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
        if (!strcmp(key, "base")) {
            if (n_keys > 0) { snprintf(err, err_len, "%s:%d: 'base' must be the first key", path, line_no); rc = -1; break; }
            if (profile_builtin(val, d)) { snprintf(err, err_len, "%s:%d: base: unknown device '%s' (known: %s)", path, line_no, val, PROFILE_NAMES); rc = -1; break; }
        } else if (profile_set(d, key, val, msg, sizeof(msg))) {
            snprintf(err, err_len, "%s:%d: %s", path, line_no, msg); rc = -1; break;
        }
        n_keys++;
    }
    fclose(f);
    return rc;
}

// ----------------------------------------------------------------------------
// What the training software does beside the layout: its kernels, where its process
// groups land and how it cuts the pipeline. The defaults describe this trainer.

// Attention kernels (the four the layouts study compared):
//   torch          Q K^T and P V as batched matmuls, scale, mask and an fp32 softmax as
//                  separate framework ops: the T x T scores are written and read several times
//   fused_softmax  the same matmuls, scale + mask + softmax in one kernel (Megatron's)
//   flash1/flash2  FlashAttention 1 / 2: tiles in on-chip memory, no T x T tensor, causal
//                  blocks skipped
enum { ATTN_TORCH, ATTN_FUSED_SOFTMAX, ATTN_FLASH1, ATTN_FLASH2, N_ATTN };
static const char* const ATTN_NAMES[N_ATTN] = {"torch", "fused_softmax", "flash1", "flash2"};
// Rank order, fastest-varying first: tp-pp-dp is this trainer's (parallel/grid.h); tp-dp-pp is
// Megatron-LM's and the Scaling codebase's (pipeline stages furthest apart).
enum { ORDER_TP_PP_DP, ORDER_TP_DP_PP };
// Pipeline cut: `layers` splits the transformer layers evenly (this trainer, params.h: the
// first chunks take the remainder; the embedding rides on the first chunk, the head on the
// last); `params` cuts the list [embedding, layers..., final norm, head] into contiguous
// chunks of balanced parameter counts (DeepSpeed's default "parameters" partition, Scaling's
// "balanced"): the embedding and the head each weigh as much as several layers, so the
// first and last stages get fewer layers, though the embedding costs almost no time.
enum { SPLIT_LAYERS, SPLIT_PARAMS };

typedef struct {
    int attention;          // ATTN_*
    int rms_kernel;         // 1: one fused norm kernel; 0: the norm as separate framework ops
    int rank_order;         // ORDER_*
    int pipe_split;         // SPLIT_*
    int loss_gathered;      // 1: the logits are gathered over tp and every tp rank computes the loss over
                            // the whole vocabulary; 0: a vocabulary-parallel loss (Megatron, this trainer)
    int dp_after_backward;  // 1: gradients are reduced after the whole backward (in the optimizer step);
                            // 0: the reduction overlaps the backward (dp_overlap of the device)
    int context_parallel;   // 1: it can split sequences over cp ranks (this trainer); 0: cp 1 only
} PlanSetup;

// The software the planner can model (--software): this trainer, and the Aleph Alpha
// Scaling codebase the layouts study ran on (Hagemann et al. 2023), read from its source:
// Topology lays ranks out as (pipe, data, model) with model fastest; the pipeline is cut
// over [embedding, layers, final norm, head] (its "balanced" method: the study's runs fit
// it better than the uniform cut, MFU error 2.0 vs 2.2 points); the head is a column-
// parallel linear with gathered output and the loss is torch's cross_entropy on the full
// vocabulary; the optimizer all-reduces the gradients in its step, after the backward. It
// has no context parallelism.
enum { SOFTWARE_TRAINER, SOFTWARE_SCALING };
static PlanSetup plan_setup_for(int software) {
    PlanSetup s = {ATTN_FLASH2, 1, ORDER_TP_PP_DP, SPLIT_LAYERS, 0, 0, 1};
    if (software == SOFTWARE_SCALING)
        s.rank_order = ORDER_TP_DP_PP, s.pipe_split = SPLIT_PARAMS, s.loss_gathered = 1, s.dp_after_backward = 1, s.context_parallel = 0;
    return s;
}
static PlanSetup plan_setup_default(void) { return plan_setup_for(SOFTWARE_TRAINER); }

static int attn_from_name(const char* s) {
    for (int i = 0; i < N_ATTN; i++)
        if (!strcmp(s, ATTN_NAMES[i])) return i;
    return -1;
}

// Bytes the memory-bound ops move per element they touch, forward and backward (e = bytes
// of the training dtype; fp32 intermediates 4). Counted from the kernels' reads and writes:
//   fused norm            fwd read x, write y: 2e            bwd read x, dy, write dx: 3e
//   unfused RMSNorm       x.float() e+4, pow 8, mean 4, mul by rsqrt 8, to(dtype) 4+e, mul by
//                         the weight 2e: 4e + 24 fwd; each op's backward reads its saved
//                         input and the gradient and writes one: about twice that
//   residual add          read 2, write 1: 3e (the backward sums two gradient streams: 3e)
//   RoPE (q and k)        read, write: 2e each way
//   GELU / SwiGLU         read 1 / 2 inputs, write 1: 2e / 3e; backward reads inputs and dy: 3e / 5e
//   softmax, fused        fwd read scores, write P: 2e         bwd read P, dP, write dS: 3e
//   softmax, torch        fwd mask 2e, fp32 softmax e+4, to(dtype) 4+e: 4e + 8
//                         bwd to() e+4, softmax bwd 12, to(dtype) 4+e: 2e + 20
//   cross-entropy         fwd logits to fp32 e+4, max 4, sum of exp 4, log-softmax 8: e + 20
//                         bwd softmax - one-hot 8, to(dtype) 4+e: e + 12
static double norm_bytes(int rms_kernel, double e, int backward) {
    if (rms_kernel) return backward ? 3 * e : 2 * e;
    return (backward ? 2 : 1) * (4 * e + 24);
}
static double softmax_bytes(int attention, double e, int backward) {
    if (attention == ATTN_TORCH) return backward ? 2 * e + 20 : 4 * e + 8;
    return backward ? 3 * e : 2 * e;
}

// ----------------------------------------------------------------------------
// Memory: model states and activations

// Parameters one GPU holds for n_layers_chunk layers (a chunk, or all chunks of a stage),
// split over tp: matrices and vocabulary rows are divided by tp, norm weights (and GPT-2's
// row-parallel biases and position table) are replicated. has_embed: they include the
// embedding; has_head: the final norm and the head (GPT-2 ties head and embedding; when
// they sit on different stages the head's stage keeps its own copy, as Megatron does and
// params.h builds it; ZB-V puts both on stage 0, which needs one).
static double chunk_params(const ModelConfig* c, int n_layers_chunk, int has_embed, int has_head, int tp) {
    double C = c->d_model, F = c->d_ff, V = c->vocab_padded, t = tp;
    double kv = c->n_kv_head * (C / c->n_head);
    double layer;
    if (c->arch == ARCH_GPT2) layer = (4 * C * C + 2 * C * F + 3 * C + F) / t + 4 * C + 2 * C;  // split: W, qkv/fc biases; replicated: 2 LN (w,b), 2 row biases
    else layer = (2 * C * C + 2 * C * kv + 3 * C * F) / t + 2 * C;                            // two RMSNorm weights replicated
    double p = n_layers_chunk * layer;
    if (has_embed) p += V * C / t + (c->arch == ARCH_GPT2 ? c->seq_len * C : 0);
    if (has_head) {
        p += c->arch == ARCH_GPT2 ? 2 * C : C;
        if (c->arch == ARCH_LLAMA || !has_embed) p += V * C / t;
    }
    return p;
}

// Activation bytes one transformer layer keeps for its backward, for one micro-batch
// of b sequences of s tokens, on one GPU of a tp group. Korthikanti et al. 2022, Table 2,
// in units of s*b*h bytes (bf16 = 2 bytes per value, 1-byte dropout masks):
//   GPT:   no parallelism       34 + 5as/h
//          tensor parallel      10 + 24/t + 5as/(ht)    (10 = LN inputs 4, qkv/fc1 inputs 4, dropout masks 2)
//          tp + sequence par.   34/t + 5as/(ht)
//          selective recompute  drops the 5as/h term (softmax 2, its dropout mask 1 and output 2)
//          full recompute       2 (the layer input only)
// LLaMA, derived the same way (no dropout, RMSNorm, RoPE, SwiGLU, GQA with r = kv/h, f = d_ff/h):
//   replicated (not split by tp without SP): 2 norm inputs 2+2, qkv input 2, gate/up input 2 = 8
//   split by tp: q 2, k 2r, v 2r (post-RoPE, RoPE's backward needs no activations), attention
//     output = out-proj input 2, gate 2f, up 2f, down-proj input 2f   = 4 + 4r + 6f
//   attention s^2 term: the softmax output 2as/h (no dropout)   -> 8 + 4 + 4r + 6f + 2as/h
//   (13B: r = 1, f = 2.7: 32.2 + 2as/h, close to GPT's 34 + 5as/h).
// By kernel: FlashAttention (1 and 2) keeps no s^2 tensor, only the fp32 log-sum-exp per row
// and head: 4a/h. Torch attention keeps the fp32 softmax output as well as its bf16 copy:
// 4as/h more. An unfused norm keeps its normalized bf16 copy (2) and the fp32 product with
// the fp32 weight (4) as well: 6 more per norm, 12 per layer (the layouts study's out-of-
// memory boundaries with and without the RMSNorm kernel agree). Other dtypes scale by
// dtype_bytes/2. With context parallelism (cp > 1) a rank holds s = T/cp tokens, and its
// attention runs block by block whatever the kernel, keeping only the log-sum-exp
// (context_parallel.h): 4a/h.
static double act_bytes_per_layer(const ModelConfig* c, int b, int tp, int cp, int sp, int recompute, const PlanSetup* k, int dtype_bytes) {
    double s = (double)c->seq_len / cp, h = c->d_model, a = c->n_head, t = tp;
    double sbh = s * b * h * dtype_bytes / 2.0;
    if (recompute == RECOMPUTE_FULL) return 2 * sbh / (sp ? t : 1);
    double replicated, split, attn;
    int lse_only = k->attention == ATTN_FLASH1 || k->attention == ATTN_FLASH2 || cp > 1;
    if (c->arch == ARCH_GPT2) {
        replicated = 10, split = 24;
        attn = lse_only ? 4 * a / h : 5 * a * s / h;
    } else {
        double r = (double)c->n_kv_head / c->n_head, f = (double)c->d_ff / h;
        replicated = 8, split = 4 + 4 * r + 6 * f;
        attn = lse_only ? 4 * a / h : 2 * a * s / h;
    }
    if (k->attention == ATTN_TORCH && !lse_only) attn += 4 * a * s / h;
    if (!k->rms_kernel) replicated += 2 * 6;
    if (recompute == RECOMPUTE_SELECTIVE) attn = 0;
    return sbh * ((sp ? replicated / t : replicated) + split / t + attn / t);
}

// Bytes one layer's deferred weight pass keeps beyond the activations, for one micro-batch
// on one GPU: under the zero-bubble schedules the input pass B leaves the output gradients
// of the layer's four matmuls for W (model.h's WeightGradIn), over all b*s tokens (gathered
// with SP; T/cp tokens with context parallelism): the two row-parallel outputs (attention and
// MLP projections) h each, the column-parallel fc F/t (SwiGLU's gate|up: 2F/t) and qkv (h + 2kv)/t.
static double w_inputs_per_layer(const ModelConfig* c, int b, int tp, int cp, int dtype_bytes) {
    double h = c->d_model, kv = c->n_kv_head * (h / c->n_head), t = tp;
    double fc = (c->arch == ARCH_LLAMA ? 2.0 : 1.0) * c->d_ff / t, qkv = (h + 2 * kv) / t;
    return (double)b * c->seq_len / cp * (2 * h + fc + qkv) * dtype_bytes;
}

// Bytes per parameter of the model states, bf16 mixed precision (Rajbhandari et al. 2020):
// weight dtype_bytes (2) + gradient grad_bytes (2 or 4) + optimizer 12 (fp32 master 4,
// Adam m 4, v 4); fp32 training has no master copy (4 + 4 + 8). ZeRO-1 divides the
// optimizer states by dp, ZeRO-2 also the gradients, ZeRO-3 also the weights.
static void state_bytes_per_param(const DeviceProfile* d, int zero, int dp, double* w, double* g, double* o) {
    double opt = (d->dtype_bytes < 4 ? 4 : 0) + 8;
    *w = d->dtype_bytes, *g = d->grad_bytes, *o = opt;
    if (zero >= 1) *o /= dp;
    if (zero >= 2) *g /= dp;
    if (zero >= 3) *w /= dp;
}

// ----------------------------------------------------------------------------
// Time: roofline per op

static double matmul_time(const DeviceProfile* d, double M, double N, double K, double batch) {
    double flops = 2 * M * N * K * batch;
    double bytes = (M * K + K * N + M * N) * batch * d->dtype_bytes;
    // Wave quantization: cuBLAS cuts the output into tiles (256 x 128 for large bf16 GEMMs)
    // and runs them in waves of one tile per SM; a last partial wave leaves SMs idle.
    double wave = 1;
    if (d->sms > 0) {
        double tiles = ceil(M / 256) * ceil(N / 128) * batch;
        wave = tiles / (ceil(tiles / d->sms) * d->sms);
    }
    double t_compute = flops / (d->peak_flops * d->matmul_eff * wave), t_memory = bytes / (d->hbm_bw * d->hbm_eff);
    return (t_compute > t_memory ? t_compute : t_memory) + d->matmul_latency;
}
static double elementwise_time(const DeviceProfile* d, double bytes) { return bytes / (d->hbm_bw * d->hbm_eff) + d->op_latency; }

// Ring collectives over n ranks (Patarasuk & Yuan 2009): an all-reduce moves 2(n-1)/n of
// the buffer through every rank's link in 2(n-1) steps; all-gather and reduce-scatter
// half of that. bw is the achievable bandwidth per rank, one direction.
static double allreduce_time(int n, double bytes, double bw, double lat) { return n <= 1 ? 0 : 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat; }
static double allgather_time(int n, double bytes, double bw, double lat) { return n <= 1 ? 0 : (double)(n - 1) / n * bytes / bw + (n - 1) * lat; }

typedef struct { double bw, lat; } Link;

// Time a communication of duration comm adds when it may overlap a compute window: the
// part beyond the window, plus `interference` of the overlapped part (NCCL kernels take
// SMs and HBM bandwidth from the compute they overlap).
static double comm_exposed(double comm, double window, double interference) {
    double hidden = comm < window ? comm : window;
    return (comm - hidden) + interference * hidden;
}

// Bandwidth a group of ranks gets per rank: n_in ranks stride_in apart, repeated n_out times
// stride_out apart (stride_out >= n_in * stride_in; the dp x cp ranks holding the same
// weights; n_out = 1 for the other groups). Inside a node: NVLink. Across nodes, ring
// collectives move the same bytes through every rank, so each node pushes them through its
// NICs; all groups of the node communicate at once (they are in lock-step), so a group with
// k members on a node gets k GPUs' share of the NICs.
static Link group_link_nested(const DeviceProfile* d, int n_in, int stride_in, int n_out, int stride_out, int gpus_per_node) {
    Link l;
    int k_in = gpus_per_node / stride_in, k_out = stride_out >= gpus_per_node ? 1 : gpus_per_node / stride_out;
    k_in = k_in < 1 ? 1 : k_in > n_in ? n_in : k_in;
    k_out = k_out > n_out ? n_out : k_out;
    if ((long)k_in * k_out == (long)n_in * n_out) { l.bw = d->intra_bw * d->link_eff; l.lat = d->intra_latency; return l; }
    double nic_share = (double)d->nics_per_node * d->nic_bw / gpus_per_node;  // per GPU
    l.bw = (double)k_in * k_out * nic_share;
    if (l.bw > d->intra_bw) l.bw = d->intra_bw;
    l.bw *= d->link_eff;
    l.lat = d->inter_latency;
    return l;
}
static Link group_link(const DeviceProfile* d, int n, int stride, int gpus_per_node) {
    return group_link_nested(d, n, stride, 1, n * stride, gpus_per_node);
}

// One GPU's share of its node's NICs: what a point-to-point message leaving the node gets
// (NCCL sends it through the NIC next to the GPU).
static Link nic_link(const DeviceProfile* d, int gpus_per_node) {
    Link l = {d->link_eff * d->nics_per_node * d->nic_bw / gpus_per_node, d->inter_latency};
    return l;
}

// ----------------------------------------------------------------------------
// Context parallelism (parallel/context_parallel.h): each sequence split over cp = U x R
// ranks. A rank holds T/cp tokens of every sequence, so all outside the attention (matmuls,
// norms, activations, logits, tp and pp messages) shrinks by cp; the weights are replicated
// over cp, their gradients reduced and ZeRO-sharded over dp x cp. The attention needs every
// earlier token:
//   Ulysses (degree U; Jacobs et al. 2023): an all-to-all among U adjacent ranks turns the
//     sequence split into a head split before the attention (q, k, v) and back after it (the
//     output), each rank sending (U-1)/U of the tensor. The backward makes the head-split q,
//     k, v, output and output gradient again and sends dq, dk, dv back: twice the forward's
//     volume. Nothing overlaps them. U divides the KV heads of a tp rank.
//   Ring (degree R = cp/U; Liu et al. 2023, zig-zag split: chunks r and 2R-1-r of 2R, so
//     every rank has the same causal work): R-1 steps per layer forward, each sending this
//     rank's K and V on while the attention of the block in hand runs (cost per step: what
//     the block's compute does not hide). The backward makes R exchanges, each hidden the
//     same way by its step's blocks: the first K, V, the middle ones K, V and the dK, dV
//     (fp32) gathered so far, the last dK, dV; one more brings the last dK, dV home, with
//     nothing to hide it.
//   2D (USP, Fang and Zhao 2024; LoongTrain): both, the all-to-all among U adjacent ranks,
//     the ring across R of those groups. U = 1 is the ring, R = 1 Ulysses.
// Rank order (grid.h): cp next to tp, cp_rank = ring_rank * U + ulysses_rank, so the all-to-
// all stays in a node while tp*U ranks fit in it, the ring while tp*cp do.

// A layout's cp and U are ModelConfig's cp and cp_ulysses (1 and 1 without context parallelism).
enum { CPK_NONE, CPK_RING, CPK_ULYSSES, CPK_2D, N_CPK };
static const char* const CPK_NAMES[N_CPK] = {"none", "ring", "ulysses", "2d"};
static int cp_kind_of(int cp, int U) { return cp == 1 ? CPK_NONE : U == 1 ? CPK_RING : U == cp ? CPK_ULYSSES : CPK_2D; }

// Elements of K and V of one rank's tokens (b sequences of T/cp) on one tp rank: what a
// ring step moves (in 2D a rank holds T/R tokens of kv/(t U) heads after the all-to-all:
// as many).
static double cp_kv_elems(const ModelConfig* c, int b, int tp, int cp) {
    return (double)b * c->seq_len / cp * 2 * c->n_kv_head / tp * ((double)c->d_model / c->n_head);
}

// Bytes one rank sends in one layer's two forward all-to-alls: q, k, v (h + 2kv per token on
// a tp rank's heads) and the output (h), (U-1)/U of each.
static double cp_alltoall_bytes(const ModelConfig* c, int b, int tp, int cp, int U, int dtype_bytes) {
    double h = c->d_model, kv = c->n_kv_head * (h / c->n_head);
    return (double)b * c->seq_len / cp * (2 * h + 2 * kv) / tp * dtype_bytes * (U - 1) / U;
}

// The ring's link: its R ranks are tp*U apart, so it stays in the node iff tp*cp ranks fit
// in one; otherwise its slowest hop leaves the node.
static Link cp_ring_link(const DeviceProfile* d, int tp, int cp, int gpus_per_node) {
    if (tp * cp <= gpus_per_node) { Link l = {d->intra_bw * d->link_eff, d->intra_latency}; return l; }
    return nic_link(d, gpus_per_node);
}

// The all-to-all's: U ranks tp apart. Across nodes, what a rank sends to the U - k ranks off
// its node (k of the group on each node) goes through its share of the NICs, every GPU of
// the node sending at once; given as the bandwidth at which all it sends, (U-1)/U of the
// tensor, takes that time.
static Link cp_alltoall_link(const DeviceProfile* d, int tp, int U, int gpus_per_node) {
    if (tp * U <= gpus_per_node) { Link l = {d->intra_bw * d->link_eff, d->intra_latency}; return l; }
    int k = gpus_per_node / tp;
    if (k < 1) k = 1;
    Link l = nic_link(d, gpus_per_node);
    l.bw *= (double)(U - 1) / (U - k);
    return l;
}

// Context parallelism's part of one layer (one micro-batch, one GPU). attn_f, attn_b: this
// rank's attention compute forward and backward (all its ring blocks), what the ring's K, V
// steps overlap.
typedef struct {
    double fwd, bwd;              // time it adds to the layer's forward and backward
    double comm_fwd, comm_bwd;    // its communication's own time (before overlap)
    double bytes_fwd, bytes_bwd;  // bytes one rank sends
} CpTime;

static CpTime cp_layer_time(const ModelConfig* c, int b, int tp, int cp, int U, const DeviceProfile* d, double attn_f, double attn_b,
                            Link ring, Link a2a) {
    CpTime t;
    memset(&t, 0, sizeof(t));
    int R = cp / U;
    if (U > 1) {  // forward: q, k, v and the output; backward: q, k, v, output, its gradient and dq, dk, dv
        double v = cp_alltoall_bytes(c, b, tp, cp, U, d->dtype_bytes), two = v / a2a.bw + 2 * a2a.lat;
        t.bytes_fwd += v, t.bytes_bwd += 2 * v;
        t.comm_fwd += two, t.comm_bwd += 2 * two;
        t.fwd += two, t.bwd += 2 * two;
    }
    if (R > 1) {
        double kv = cp_kv_elems(c, b, tp, cp), ci = d->comm_interference, block_b = attn_b / R;
        double step_kv = kv * d->dtype_bytes / ring.bw + ring.lat, step_dkv = kv * 4 / ring.bw + ring.lat;
        double step_both = kv * (d->dtype_bytes + 4) / ring.bw + ring.lat;
        t.bytes_fwd += (R - 1) * kv * d->dtype_bytes, t.bytes_bwd += (R - 1) * kv * d->dtype_bytes + R * kv * 4;
        t.comm_fwd += (R - 1) * step_kv, t.comm_bwd += step_kv + (R - 2) * step_both + 2 * step_dkv;
        t.fwd += (R - 1) * comm_exposed(step_kv, attn_f / R, ci);
        t.bwd += comm_exposed(step_kv, block_b, ci) + (R - 2) * comm_exposed(step_both, block_b, ci) + comm_exposed(step_dkv, block_b, ci) +
                 step_dkv;
    }
    return t;
}

// Times of one transformer layer for one micro-batch on one GPU.
typedef struct {
    double fwd, bwd;     // bwd without recomputation
    double bwd_w;        // of bwd, the weight pass W (the zero-bubble schedules defer it); the rest is the input pass B
    double attn_fwd;     // the core attention forward with its cp communication (what selective recompute redoes)
    double comm_fwd, comm_bwd;  // tensor-parallel part of fwd / bwd
    CpTime cp;           // context parallelism's part of fwd / bwd (in them)
} LayerTime;

// cp, U: context parallelism; ring, a2a: its links (unused at cp 1).
static LayerTime layer_time(const ModelConfig* c, int b, int tp, int sp, int cp, int U, const PlanSetup* k, const DeviceProfile* d,
                            Link tp_link, Link ring, Link a2a) {
    LayerTime lt;
    int R = cp / U;
    double T = c->seq_len, s = T / cp, h = c->d_model, a = c->n_head, hd = h / a, t = tp, e = d->dtype_bytes;
    double kv = c->n_kv_head * hd, F = c->d_ff, n = b * s;  // s: the tokens of a sequence this rank holds
    double n_el = sp ? n / t : n;  // tokens of the ops outside the tensor-parallel regions
    int llama = c->arch == ARCH_LLAMA;
    // memory-bound ops, forward and backward (bytes per element: norm_bytes and the table above)
    double norm_f = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 0));
    double norm_b = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 1));
    double resid = elementwise_time(d, 3 * n_el * h * e);
    double rope = llama ? elementwise_time(d, 2 * n * (h + kv) / t * e) : 0;
    double act_f = elementwise_time(d, (llama ? 3 : 2) * n * F / t * e);
    double act_b = elementwise_time(d, (llama ? 5 : 3) * n * F / t * e);
    double attn, attn_bwd;
    // With context parallelism each rank does 1/cp of the attention (the zig-zag split
    // balances the causal work), as R ring blocks: T/R tokens of a/(t U) heads each. With
    // --cp-split contiguous ring rank r holds piece r: every ring step waits for a rank with
    // a whole block (the last has R - 1/2 blocks, the first 1/2), so kernels that skip the
    // masked work take (2R-1)/R of the balanced time.
    double imbalance = c->cp_contiguous && R > 1 ? (2.0 * R - 1) / R : 1;
    if (k->attention == ATTN_FLASH1 || k->attention == ATTN_FLASH2) {
        // QK^T and AV: 4 b T^2 h FLOPs, causal kernels skip half; the backward does 2.5x (5 matmuls vs 2)
        double flops = 4.0 * b * T * T * h / (t * cp) * 0.5 * imbalance;
        double eff = k->attention == ATTN_FLASH2 ? d->attn_eff_flash2 : d->attn_eff_flash1;
        attn = flops / (d->peak_flops * eff) + R * d->op_latency;
        attn_bwd = 2.5 * flops / (d->peak_flops * eff) + R * d->op_latency;
    } else {
        // per block two batched matmuls over the full scores (no causal saving), then the
        // softmax passes over them; the backward has four such matmuls
        DeviceProfile dn = *d;
        dn.matmul_eff = d->bmm_eff;
        double Tb = T / R, bmm = matmul_time(&dn, Tb, Tb, hd, b * a / (t * U)), scores = b * a / (t * U) * Tb * Tb;
        attn = R * (2 * bmm + elementwise_time(d, scores * softmax_bytes(k->attention, e, 0)));
        attn_bwd = R * (4 * bmm + elementwise_time(d, scores * softmax_bytes(k->attention, e, 1)));
    }
    lt.cp = cp_layer_time(c, b, tp, cp, U, d, attn, attn_bwd, ring, a2a);
    double qkv = matmul_time(d, n, (h + 2 * kv) / t, h, 1);
    double proj = matmul_time(d, n, h, h / t, 1);
    double up = llama ? matmul_time(d, n, 2 * F / t, h, 1) : matmul_time(d, n, F / t, h, 1);
    double down = matmul_time(d, n, h, F / t, 1);
    // Megatron: 2 all-reduces of the (s, b, h) activations forward and 2 backward; with SP
    // an all-gather + reduce-scatter pair instead of each, the same bytes (Korthikanti §4.2.2).
    // SP keeps only its 1/t slice of the qkv and fc1 inputs and gathers them again in the
    // backward for the weight gradients; Megatron overlaps that all-gather with the input-
    // gradient matmul, so it adds no time here.
    double x_bytes = n * h * e;
    double one = sp ? 2 * allgather_time(tp, x_bytes, tp_link.bw, tp_link.lat) : allreduce_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    lt.comm_fwd = 2 * one;
    lt.comm_bwd = 2 * one;
    double mm = qkv + proj + up + down;
    lt.attn_fwd = attn + lt.cp.fwd;
    lt.fwd = 2 * norm_f + 2 * resid + rope + act_f + mm + attn + lt.comm_fwd + lt.cp.fwd;
    // backward: each matmul twice, its input gradient in B and its weight gradient (as many
    // FLOPs: 2 x the layer's matmul parameters per token) in W; attention, norms, the
    // elementwise ops and the tensor-parallel and context-parallel communication of the
    // input gradients are B's
    lt.bwd = 2 * norm_b + 2 * resid + rope + act_b + 2 * mm + attn_bwd + lt.comm_bwd + lt.cp.bwd;
    lt.bwd_w = mm;
    return lt;
}

// The pipeline cut: layers, embedding and head of each of the n_chunks global chunks.
static void chunk_split(const ModelConfig* c, int n_chunks, int split, int* layers, int* has_embed, int* has_head) {
    int L = c->n_layer;
    if (split == SPLIT_LAYERS) {
        for (int g = 0; g < n_chunks; g++) {
            layers[g] = L / n_chunks + (g < L % n_chunks);  // params.h: the first chunks get the extra layers
            has_embed[g] = g == 0, has_head[g] = g == n_chunks - 1;
        }
        return;
    }
    // by parameters: items 0 = embedding, 1..L = layers, L+1 = final norm, L+2 = head,
    // each weighing its parameter count
    int items = L + 3;
    double C = c->d_model, V = c->vocab_padded, layer = chunk_params(c, 1, 0, 0, 1);
    double* w = (double*)xmalloc(sizeof(double) * items);
    for (int i = 0; i < items; i++) w[i] = i == 0 || i == L + 2 ? V * C : i == L + 1 ? C : layer;
    // smallest bottleneck (heaviest chunk) a contiguous cut reaches: bisection, each probe
    // filling the chunks greedily up to it
    double lo = 0, hi = 0;
    for (int i = 0; i < items; i++) hi += w[i];
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi), sum = 0;
        int parts = 1;
        for (int i = 0; i < items; i++) {
            if (w[i] > mid) { parts = n_chunks + 1; break; }
            if (sum + w[i] > mid) parts++, sum = 0;
            sum += w[i];
        }
        if (parts <= n_chunks) hi = mid; else lo = mid;
    }
    int start = 0;
    for (int g = 0; g < n_chunks; g++) {
        int end = start;
        double sum = 0;
        // fill up to the bottleneck, leaving at least one item for each later chunk
        while (end < items - (n_chunks - 1 - g) && (end == start || sum + w[end] <= hi * (1 + 1e-12))) sum += w[end++];
        if (g == n_chunks - 1) end = items;
        int l0 = start > 1 ? start : 1, l1 = end < L + 1 ? end : L + 1;
        layers[g] = l1 > l0 ? l1 - l0 : 0;
        has_embed[g] = start == 0, has_head[g] = end == items;
        start = end;
    }
    free(w);
}

// ----------------------------------------------------------------------------
// One layout

typedef struct {
    const char* invalid;     // why this layout cannot run (points into why[]), NULL when it can
    char why[200];
    int dp, tp, pp, vpp, micro_batch, n_micro, recompute, sp, zero, schedule;
    int cp, cp_ulysses;      // context parallelism: ranks per sequence, the Ulysses degree U among them
    PlanSetup setup;         // kernels, rank order, pipeline cut
    int in_flight;           // peak (micro-batch, chunk) activations held, on the worst stage
    int w_pending;           // peak (micro-batch, chunk) pairs whose B ran and whose W has not, there (0 without W ops)
    int worst_stage;         // stage with the most memory
    // memory per GPU on the worst stage, bytes
    double mem_weights, mem_grads, mem_optim, mem_act, mem_temp, mem_overhead, mem_total;
    double mem_w_inputs;     // of mem_act, the weight-pass inputs of the w_pending pairs
    int fits;
    int timed;               // the times below were computed (always, unless the enumeration skipped a layout that does not fit)
    // time, seconds
    double t_layer_fwd, t_layer_bwd;  // one layer, one micro-batch (bwd includes recompute)
    double t_layer_w;        // of t_layer_bwd, the weight pass W
    double t_tp_comm;        // tensor-parallel communication per step per GPU (inside the compute)
    double t_cp_comm;        // context-parallel communication per step per GPU (before overlap)
    double t_cp_exposed;     // the part of it the compute does not hide (inside the compute)
    double cp_bytes;         // bytes one GPU sends for context parallelism per step
    int cp_off_node;         // some of it leaves the node (the ring when tp*cp > GPUs per node, the all-to-all when tp*U >)
    double t_p2p;            // one pipeline message
    double t_pipeline;       // schedule_simulate() makespan of forward/backward
    double t_dp_comm;        // data-parallel communication per step (before overlap)
    double t_dp_exposed;     // the part of it not hidden
    double t_optim;          // optimizer step
    double t_step;
    double bubble;           // (makespan - busiest stage's compute) / that compute, from the simulation
    double bubble_formula;   // bubble_formula(): (p-1)/m, (p-1)/(v m) (Narayanan et al. 2021), (p-1)/(3m), 0 (Qi et al. 2024)
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

// Peak (micro-batch, chunk) activations stage st holds under its schedule (*in_flight), and
// peak W's it owes (*w_pending). The planner adds the memory of both peaks: exact where they
// coincide, as in ZB-H1 (stage s holds p activations and owes s+1 W's right after a B); in
// ZB-V an upper bound, by one W's inputs in most shapes (pp 2-16, m pp-256). The enumeration
// asks this for the same pipeline shape many times (once per kernel, recomputation, ZeRO
// and SP choice), so the counts of the last shape are kept.
static void stage_pipeline_counts(const ModelConfig* c, int schedule, int st, int pp, int vpp, int m, int* in_flight, int* w_pending) {
    static int key[4] = {-1, -1, -1, -1}, *counts = NULL;  // counts[2s], counts[2s+1]: stage s's two peaks
    static double* key_t = NULL;                              // the build times of the kept counts
    int n_t = 3 * pp * vpp;
    double* t_build = (double*)xmalloc(sizeof(double) * n_t);
    chunk_op_flops(c, pp, vpp, t_build);  // the times ZB-V's lists are built for, as in the runtime
    if (key[0] != schedule || key[1] != pp || key[2] != vpp || key[3] != m || memcmp(key_t, t_build, sizeof(double) * n_t)) {
        PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m, vpp));
        free(counts);
        counts = (int*)xmalloc(sizeof(int) * 2 * pp);
        for (int s = 0; s < pp; s++) {
            int n = schedule_build(schedule, s, pp, vpp, m, t_build, ops);
            counts[2 * s] = schedule_max_in_flight(ops, n, -1), counts[2 * s + 1] = schedule_max_w_owed(ops, n, -1);
        }
        free(ops);
        key[0] = schedule, key[1] = pp, key[2] = vpp, key[3] = m;
        free(key_t);
        key_t = t_build;
    } else {
        free(t_build);
    }
    *in_flight = counts[2 * st], *w_pending = counts[2 * st + 1];
}

// What does not fit, for --runs' pred_reason: the components of the worst stage's memory.
static void plan_memory_reason(const PlanResult* r, double mem_bytes, char* buf, size_t len) {
    if (r->fits) { buf[0] = 0; return; }
    char w[64] = "";
    if (r->w_pending) snprintf(w, sizeof(w), ", W inputs %.1f of them (%d W's owed)", r->mem_w_inputs / GiB, r->w_pending);
    snprintf(buf, len, "needs %.1f GiB of %.1f on stage %d: states %.1f, activations %.1f (%d in flight%s), temporaries %.1f, reserve %.1f",
             r->mem_total / GiB, mem_bytes / GiB, r->worst_stage, (r->mem_weights + r->mem_grads + r->mem_optim) / GiB,
             r->mem_act / GiB, r->in_flight, w, r->mem_temp / GiB, r->mem_overhead / GiB);
}

// Predict one layout. layout_cfg: a finalized model config whose dp, tp, pp, cp, cp_ulysses,
// vpp, sp, zero, schedule, recompute and micro_batch fields give the layout (dp x cp x tp x
// pp GPUs); k: the kernels, rank order and pipeline cut; global_batch in sequences of
// layout_cfg->seq_len tokens.
// time_oom 0: a layout that does not fit gets its memory only (out->timed = 0), which
// spares the enumeration most of its pipeline simulations. Returns 0, or -1 with
// out->invalid saying why the layout cannot run (memory is not a reason: see out->fits).
static int plan_predict_ex(const ModelConfig* layout_cfg, const PlanSetup* k, int global_batch, int gpus_per_node,
                           const DeviceProfile* dev, int time_oom, PlanResult* out) {
    const ModelConfig* c = layout_cfg;
    const DeviceProfile* d = dev;
    PlanResult* r = out;
    memset(r, 0, sizeof(*r));
    r->dp = c->dp, r->tp = c->tp, r->pp = c->pp, r->vpp = c->vpp, r->micro_batch = c->micro_batch;
    r->recompute = c->recompute, r->sp = c->sp, r->zero = c->zero, r->schedule = c->schedule, r->setup = *k;
    r->cp = c->cp, r->cp_ulysses = c->cp_ulysses;
    int dp = c->dp, tp = c->tp, pp = c->pp, vpp = c->vpp, mb = c->micro_batch, L = c->n_layer, cp = c->cp, U = c->cp_ulysses;
    if (dp < 1 || tp < 1 || pp < 1 || vpp < 1 || mb < 1) return plan_invalid(r, "dp, tp, pp, vpp and micro-batch must be >= 1");
    if (global_batch < 1 || global_batch % (dp * mb)) return plan_invalid(r, "global batch %d is not a multiple of dp*micro_batch = %d", global_batch, dp * mb);
    if (c->n_head % tp || c->n_kv_head % tp) return plan_invalid(r, "tp %d does not divide n_head %d and n_kv_head %d (no kv-head replication)", tp, c->n_head, c->n_kv_head);
    if (c->d_ff % tp || c->vocab_padded % tp) return plan_invalid(r, "tp %d does not divide d_ff %d and the padded vocabulary %d", tp, c->d_ff, c->vocab_padded);
    if (cp < 1 || U < 1 || cp % U) return plan_invalid(r, "cp %d: its Ulysses degree %d must be >= 1 and divide it", cp, U);
    if (cp > 1 && !k->context_parallel) return plan_invalid(r, "this software has no context parallelism (cp %d)", cp);
    if ((c->n_kv_head / tp) % U)
        return plan_invalid(r, "Ulysses degree %d does not divide the %d KV heads of a tp rank", U, c->n_kv_head / tp);
    int chunks = cp / U > 1 ? 2 * cp : cp;  // the zig-zag ring cuts a sequence into 2R chunks, each split over U ranks
    if (c->seq_len % chunks) return plan_invalid(r, "seq_len %d is not a multiple of %d (cp %d, Ulysses %d)", c->seq_len, chunks, cp, U);
    if (pp * vpp > L) return plan_invalid(r, "pp*vpp = %d exceeds n_layer %d", pp * vpp, L);
    if (c->sp && tp == 1) return plan_invalid(r, "sequence parallelism needs tp > 1");
    if (c->zero < 0 || c->zero > 3) return plan_invalid(r, "zero stage must be 0..3");
    if (c->recompute < RECOMPUTE_NONE || c->recompute > RECOMPUTE_FULL) return plan_invalid(r, "bad recompute mode");
    if (k->attention < 0 || k->attention >= N_ATTN) return plan_invalid(r, "bad attention kernel");
    int m = global_batch / (dp * mb);
    r->n_micro = m;
    const char* why = schedule_check(c->schedule, pp, vpp, m);
    if (why) return plan_invalid(r, "%s", why);
    if (schedule_has_w(c->schedule) && c->recompute == RECOMPUTE_FULL)  // as the trainer refuses it (args.h)
        return plan_invalid(r, "--schedule %s keeps each layer's activations until its weight pass: not with --recompute full",
                            schedule_name(c->schedule));
    if (gpus_per_node < 1) gpus_per_node = dp * cp * tp * pp;

    // links: tp ranks are adjacent, cp ranks next (the Ulysses groups inside the ring's);
    // then stages and data-parallel replicas in the rank order. The gradients are reduced
    // over the dp x cp ranks holding the same weights.
    int pp_stride = k->rank_order == ORDER_TP_PP_DP ? tp * cp : tp * cp * dp;
    int dp_stride = k->rank_order == ORDER_TP_PP_DP ? tp * cp * pp : tp * cp;
    Link tp_link = group_link(d, tp, 1, gpus_per_node);
    Link dp_link = group_link_nested(d, cp, tp, dp, dp_stride, gpus_per_node);
    Link pp_link = group_link(d, pp, pp_stride, gpus_per_node);
    if (pp > 1 && (long)pp * pp_stride > gpus_per_node) pp_link = nic_link(d, gpus_per_node);  // some stage boundary crosses nodes
    Link ring = cp_ring_link(d, tp, cp, gpus_per_node), a2a = cp_alltoall_link(d, tp, U, gpus_per_node);
    r->cp_off_node = (cp / U > 1 && tp * cp > gpus_per_node) || (U > 1 && tp * U > gpus_per_node);

    LayerTime lt = layer_time(c, mb, tp, c->sp, cp, U, k, d, tp_link, ring, a2a);
    double recompute_extra = c->recompute == RECOMPUTE_FULL ? lt.fwd : c->recompute == RECOMPUTE_SELECTIVE ? lt.attn_fwd : 0;
    r->t_layer_fwd = lt.fwd, r->t_layer_bwd = lt.bwd + recompute_extra, r->t_layer_w = lt.bwd_w;  // recomputation is B's

    // embedding and head + loss, over the T/cp tokens of a sequence this rank holds
    double s = c->seq_len, h = c->d_model, n = (double)mb * s / cp, e = d->dtype_bytes, V = c->vocab_padded, t = tp;
    double n_el = c->sp ? n / t : n, x_bytes = n * h * e;
    double emb_comm = c->sp ? allgather_time(tp, x_bytes, tp_link.bw, tp_link.lat) : allreduce_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    double emb_fwd = elementwise_time(d, 2 * n_el * h * e) + emb_comm;  // vocab-parallel lookup, then reduce over tp
    double emb_bwd = elementwise_time(d, 2 * n * h * e) + elementwise_time(d, 2 * n_el * h * e);
    double head_norm_f = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 0));
    double head_norm_b = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 1));
    double head_mm = matmul_time(d, n, V / t, h, 1);
    double head_comm = c->sp ? allgather_time(tp, x_bytes, tp_link.bw, tp_link.lat) : allreduce_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    // the loss runs over V/t logits per rank (vocabulary-parallel), or over all V after an
    // all-gather of the logits over tp (its backward keeps only the rank's slice: no traffic)
    double V_loss = k->loss_gathered ? V : V / t;
    double gather_logits = k->loss_gathered ? allgather_time(tp, n * V * e, tp_link.bw, tp_link.lat) : 0;
    double head_fwd = head_norm_f + head_mm + gather_logits + elementwise_time(d, n * V_loss * (e + 20)) + head_comm;  // loss: the byte table
    double head_bwd = head_norm_b + 2 * head_mm + elementwise_time(d, n * V_loss * (e + 12)) + head_comm;

    // per global chunk: layers and times of F, B and W (schedule_simulate runs B + W as one
    // backward under the schedules without W ops). The embedding's and the head's backward
    // are B's: the trainer does not defer their weight gradients.
    int n_chunks = pp * vpp;
    double* t_fwd = (double*)xcalloc(n_chunks, sizeof(double));
    double* t_bwd = (double*)xcalloc(n_chunks, sizeof(double));
    double* t_w = (double*)xcalloc(n_chunks, sizeof(double));
    int* layers = (int*)xcalloc(n_chunks, sizeof(int));
    int* has_embed = (int*)xcalloc(n_chunks, sizeof(int));
    int* has_head = (int*)xcalloc(n_chunks, sizeof(int));
    chunk_split(c, n_chunks, k->pipe_split, layers, has_embed, has_head);
    for (int g = 0; g < n_chunks; g++) {
        t_fwd[g] = layers[g] * lt.fwd + (has_embed[g] ? emb_fwd : 0) + (has_head[g] ? head_fwd : 0);
        t_bwd[g] = layers[g] * (r->t_layer_bwd - r->t_layer_w) + (has_embed[g] ? emb_bwd : 0) + (has_head[g] ? head_bwd : 0);
        t_w[g] = layers[g] * r->t_layer_w;
    }
    r->t_tp_comm = (double)m * (L * (lt.comm_fwd + lt.comm_bwd + (c->recompute == RECOMPUTE_FULL ? lt.comm_fwd : 0)) + 2 * emb_comm + 2 * head_comm) / pp;
    int again = c->recompute != RECOMPUTE_NONE;  // both recomputations run the attention's forward again, its cp communication too
    r->t_cp_comm = (double)m * L * (lt.cp.comm_fwd * (1 + again) + lt.cp.comm_bwd) / pp;
    r->t_cp_exposed = (double)m * L * (lt.cp.fwd * (1 + again) + lt.cp.bwd) / pp;
    r->cp_bytes = (double)m * L * (lt.cp.bytes_fwd * (1 + again) + lt.cp.bytes_bwd) / pp;

    // memory and data-parallel traffic, per stage
    double wb, gb, ob;
    state_bytes_per_param(d, c->zero, dp * cp, &wb, &gb, &ob);
    double act_layer = act_bytes_per_layer(c, mb, tp, cp, c->sp, c->recompute, k, d->dtype_bytes);
    double act_full_layer = act_bytes_per_layer(c, mb, tp, cp, c->sp, RECOMPUTE_NONE, k, d->dtype_bytes);
    double w_in_layer = w_inputs_per_layer(c, mb, tp, cp, d->dtype_bytes);
    // the largest temporaries: at its peak, in the backward, the loss holds the logits, the
    // fp32 log-softmax it saved, the incoming fp32 gradient and the fp32 exponentials of the
    // softmax backward (e + 12 bytes per logit) on the last stage; the backward of unfused
    // attention holds dP and dS over the T x T scores (fp32 and a bf16 copy for torch,
    // bf16 for the fused softmax) for one layer at a time (with cp one ring block's, of
    // a/(t U) heads); context parallelism's buffers, shared by the layers (context_parallel.h
    // cp_alloc): the fp32 output (then dq) and a step's own dK, dV, two ring buffers of K, V
    // and fp32 dK, dV, with Ulysses the head-split q, k, v, output and output gradient and
    // the all-to-all's send and receive buffers
    double logits = n * V_loss * (e + 12);
    double Tb = s / (cp / U), scores = mb * c->n_head / (t * U) * Tb * Tb;
    double attn_work = k->attention == ATTN_TORCH ? scores * (8 + e) : k->attention == ATTN_FUSED_SOFTMAX ? scores * 2 * e : 0;
    double cp_kv = cp_kv_elems(c, mb, tp, cp), cp_o = n * h / t, qkv_width = h + 2 * c->n_kv_head * (h / c->n_head);
    double cp_buf = cp == 1 ? 0 : 4 * (cp_o + cp_kv) + 2 * (e + 4) * cp_kv + (U > 1 ? e * (3 * n * qkv_width / t + 2 * cp_o) : 0);
    double* stage_fwd = (double*)xcalloc(pp, sizeof(double));
    double* stage_bwd = (double*)xcalloc(pp, sizeof(double));  // B + W
    double* stage_params = (double*)xcalloc(pp, sizeof(double));
    for (int st = 0; st < pp; st++) {
        int stage_layers = 0, max_layers = 0, stage_embed = 0, stage_head = 0;
        for (int ch = 0; ch < vpp; ch++) {
            int g = chunk_global(c->schedule, pp, st, ch);  // ZB-V: stage 0 holds the first and the last chunk
            stage_layers += layers[g];
            stage_fwd[st] += t_fwd[g], stage_bwd[st] += t_bwd[g] + t_w[g];
            if (layers[g] > max_layers) max_layers = layers[g];
            stage_embed |= has_embed[g], stage_head |= has_head[g];
        }
        double p = chunk_params(c, stage_layers, stage_embed, stage_head, tp);
        stage_params[st] = p;
        int in_flight, w_pending;
        stage_pipeline_counts(c, c->schedule, st, pp, vpp, m, &in_flight, &w_pending);
        double w_in = w_pending * max_layers * w_in_layer;
        double act = in_flight * max_layers * act_layer + w_in;  // (the embedding output is the first norm's input, counted there)
        double temp = attn_work + cp_buf;
        if (stage_head) temp += logits + n_el * h * e;                   // and the final norm's input
        if (c->recompute == RECOMPUTE_FULL) temp += act_full_layer;      // the layer being recomputed
        if (c->zero == 3) temp += 2 * chunk_params(c, 1, 0, 0, tp) * d->dtype_bytes;  // two gathered layers (current + prefetch)
        double reserve = d->mem_overhead + d->mem_frag * (act + temp);
        double total = p * (wb + gb + ob) + act + temp + reserve;
        if (total > r->mem_total) {
            r->mem_total = total, r->worst_stage = st, r->in_flight = in_flight, r->w_pending = w_pending;
            r->mem_weights = p * wb, r->mem_grads = p * gb, r->mem_optim = p * ob;
            r->mem_act = act, r->mem_w_inputs = w_in, r->mem_temp = temp, r->mem_overhead = reserve;
        }
    }
    r->fits = r->mem_total <= d->mem_bytes;
    r->timed = r->fits || time_oom;
    if (!r->timed) {
        free(t_fwd); free(t_bwd); free(t_w); free(layers); free(has_embed); free(has_head);
        free(stage_fwd); free(stage_bwd); free(stage_params);
        return 0;
    }

    // Data parallelism. ZeRO-0: all-reduce the gradients once per step; ZeRO-1: reduce-scatter
    // them and all-gather the updated weights; ZeRO-2: reduce-scatter after every micro-batch
    // (gradients are kept sharded); ZeRO-3: also all-gather the weights before each micro-batch's
    // forward and backward. Once-per-step traffic hides under dp_overlap of one micro-batch's
    // backward (gradients) / forward (weights); per-micro-batch traffic likewise, and what is not
    // hidden stretches that micro-batch's compute (so the pipeline simulation sees it). The
    // group is the dp x cp ranks that hold the same weights.
    double exposed_step = 0, dp_comm = 0;
    int replicas = dp * cp;
    for (int st = 0; st < pp; st++) {
        double G = stage_params[st] * d->grad_bytes, W = stage_params[st] * d->dtype_bytes;
        double buckets = 2;  // one bucket per layer, plus the embedding / head
        for (int ch = 0; ch < vpp; ch++) buckets += layers[chunk_global(c->schedule, pp, st, ch)];
        double lat = dp_link.lat * buckets;
        double rs = allgather_time(replicas, G, dp_link.bw, lat), ag = allgather_time(replicas, W, dp_link.bw, lat);
        double overlap = k->dp_after_backward ? 0 : d->dp_overlap;
        double win_b = overlap * stage_bwd[st], win_f = overlap * stage_fwd[st];
        double once_b = 0, once_f = 0, per_mb_f = 0, per_mb_b = 0;
        if (c->zero == 0) once_b = allreduce_time(replicas, G, dp_link.bw, lat);
        else if (c->zero == 1) once_b = rs, once_f = ag;
        else if (c->zero == 2) once_f = ag, per_mb_b = rs;
        else per_mb_f = ag, per_mb_b = ag + rs;
        double comm = once_b + once_f + m * (per_mb_f + per_mb_b);
        if (comm > dp_comm) dp_comm = comm;
        double exposed = comm_exposed(once_b, win_b, d->comm_interference) + comm_exposed(once_f, win_f, d->comm_interference);
        if (exposed > exposed_step) exposed_step = exposed;
        // stretch this stage's chunks by the exposed per-micro-batch part, pro rata (the
        // backward's over B and W alike)
        double sf = comm_exposed(per_mb_f, win_f, d->comm_interference), sb = comm_exposed(per_mb_b, win_b, d->comm_interference);
        for (int ch = 0; ch < vpp && (sf > 0 || sb > 0); ch++) {
            int g = chunk_global(c->schedule, pp, st, ch);
            t_fwd[g] += sf * t_fwd[g] / stage_fwd[st];
            t_bwd[g] += sb * t_bwd[g] / stage_bwd[st];
            t_w[g] += sb * t_w[g] / stage_bwd[st];
        }
    }
    r->t_dp_comm = dp_comm, r->t_dp_exposed = exposed_step;

    // pipeline: play the real schedule. A message is the (s, b, h) activation or its
    // gradient; with SP each tp rank sends its 1/t slice.
    r->t_p2p = pp > 1 ? (c->sp ? x_bytes / t : x_bytes) / pp_link.bw + pp_link.lat : 0;
    double* busy = (double*)xcalloc(pp, sizeof(double));
    double* t_build = (double*)xmalloc(sizeof(double) * 3 * n_chunks);
    chunk_op_flops(c, pp, vpp, t_build);  // the lists are the runtime's: built for the chunks' FLOPs
    r->t_pipeline = schedule_simulate(c->schedule, pp, vpp, m, t_build, t_fwd, t_bwd, t_w, r->t_p2p, busy);
    free(t_build);

    double max_busy = 0, sum_busy = 0;
    for (int st = 0; st < pp; st++) sum_busy += busy[st], max_busy = busy[st] > max_busy ? busy[st] : max_busy;
    if (d->shared_cores > 0) {
        // Ranks time-sharing K cores: a rank idle in the bubble gives its core to the others,
        // so the step is the longer of the schedule's critical path and the total work of all
        // ranks spread over the K cores (each rank uses max(1, K/world) of them while busy).
        double world = (double)dp * cp * tp * pp, K = d->shared_cores, threads = K / world > 1 ? K / world : 1;
        double spread = (double)dp * cp * tp * sum_busy * threads / K;
        if (spread > r->t_pipeline) r->t_pipeline = spread;
    }
    r->bubble = max_busy > 0 ? (r->t_pipeline - max_busy) / max_busy : 0;
    r->bubble_formula = bubble_formula(c->schedule, pp, vpp, m);

    // optimizer: AdamW over the local shard, bandwidth-bound: read master, m, v, grad;
    // write master, m, v, weight (+ one read of the gradients for the norm)
    double opt_params = 0;
    for (int st = 0; st < pp; st++) if (stage_params[st] > opt_params) opt_params = stage_params[st];
    if (c->zero >= 1) opt_params /= replicas;
    double master = d->dtype_bytes < 4 ? 4 : 0;
    double opt_bytes = opt_params * ((master + 8 + 2.0 * d->grad_bytes) + (master + 8 + d->dtype_bytes));
    r->t_optim = elementwise_time(d, opt_bytes) + 10 * d->op_latency;

    r->t_step = r->t_pipeline + r->t_dp_exposed + r->t_optim;
    double gpus = (double)dp * cp * tp * pp, tokens = (double)global_batch * s;
    r->tokens_per_s_per_gpu = tokens / r->t_step / gpus;
    double flops_token = config_flops_per_token(c, c->seq_len);
    // HFU adds the recomputed forward FLOPs: full = a layer's forward (2 x its matmul params + 4 h T
    // for attention, per token); selective = the attention part only
    double layer_mm = (config_matmul_params(c) - (double)c->vocab * h) / L;
    double hw_token = flops_token + (c->recompute == RECOMPUTE_FULL ? L * (2 * layer_mm + 4 * h * s) : c->recompute == RECOMPUTE_SELECTIVE ? L * 4 * h * s : 0);
    r->model_tflops_per_gpu = flops_token * r->tokens_per_s_per_gpu / 1e12;
    r->mfu = flops_token * r->tokens_per_s_per_gpu / d->peak_flops;
    r->hfu = hw_token * r->tokens_per_s_per_gpu / d->peak_flops;
    free(t_fwd); free(t_bwd); free(t_w); free(layers); free(has_embed); free(has_head);
    free(stage_fwd); free(stage_bwd); free(stage_params); free(busy);
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

// ----------------------------------------------------------------------------
// Enumeration

typedef struct {
    int tp, pp, dp, vpp, micro_batch, recompute, sp, zero, schedule, attention, rms_kernel;  // -1: any
    int cp, cp_ulysses, cp_kind;  // cp_kind: CPK_*
} PlanFilter;

static int filter_ok(int want, int v) { return want < 0 || want == v; }
static int filter_cp_ok(const PlanFilter* f, int cp, int U) {
    return filter_ok(f->cp, cp) && filter_ok(f->cp_ulysses, U) && filter_ok(f->cp_kind, cp_kind_of(cp, U));
}

// Whether the search tries schedule `sched` for pp stages of vpp chunks each: 1F1B with one
// chunk, interleaved 1F1B with more; on a pipeline also the zero-bubble ones, ZB-H1 with one
// chunk and ZB-V with two (with one stage they are 1F1B holding more memory). GPipe holds
// more activations than 1F1B for the same bubble and is not tried.
static int plan_schedule_tried(int sched, int pp, int vpp) {
    if (sched == SCHED_1F1B) return vpp == 1;
    if (sched == SCHED_INTERLEAVED) return vpp > 1;
    if (sched == SCHED_ZBH1) return vpp == 1 && pp > 1;
    if (sched == SCHED_ZBV) return vpp == 2 && pp > 1;
    return 0;
}

// A growing array of predicted layouts.
typedef struct { PlanResult* r; int n, cap; } PlanList;

// Predict layout lc0 (its grid, pipeline and micro-batch set) under every recomputation, SP,
// ZeRO and kernel choice the filter lets through; keep the valid ones.
static void plan_enumerate_settings(const ModelConfig* lc0, int global_batch, int gpus_per_node, const DeviceProfile* d,
                                    const PlanSetup* base, const PlanFilter* f, PlanList* out) {
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++)
        for (int sp = 0; sp <= (lc0->tp > 1); sp++)
            for (int zero = 0; zero <= 3; zero++)
                for (int attn = 0; attn < N_ATTN; attn++)
                    for (int rms = 0; rms <= 1; rms++) {
                        if (!filter_ok(f->recompute, rc) || !filter_ok(f->sp, sp) || !filter_ok(f->zero, zero) ||
                            !filter_ok(f->attention, attn) || !filter_ok(f->rms_kernel, rms)) continue;
                        if (zero > 0 && lc0->dp * lc0->cp == 1) continue;  // nothing to shard
                        ModelConfig lc = *lc0;
                        lc.recompute = rc, lc.sp = sp, lc.zero = zero;
                        PlanSetup k = *base;
                        k.attention = attn, k.rms_kernel = rms;
                        if (out->n == out->cap) {
                            out->cap *= 2;
                            out->r = (PlanResult*)realloc(out->r, sizeof(PlanResult) * out->cap);
                            if (!out->r) fail("out of memory");
                        }
                        if (plan_predict_ex(&lc, &k, global_batch, gpus_per_node, d, 0, &out->r[out->n]) == 0) out->n++;
                    }
}

// Every valid layout and kernel choice of c on `gpus` GPUs that passes the filter, predicted
// with base's rank order and pipeline cut; returns the count, *out a malloc'ed array the
// caller frees. Context parallelism: cp a power of two, with each power-of-two Ulysses
// degree U <= cp (U = 1: ring, U = cp: Ulysses, between: 2D).
static int plan_enumerate(const ModelConfig* c, int gpus, int global_batch, int gpus_per_node, const DeviceProfile* d,
                          const PlanSetup* base, const PlanFilter* f, PlanResult** out) {
    PlanList list = {(PlanResult*)xmalloc(sizeof(PlanResult) * 1024), 0, 1024};
    double t_start = now_s(), t_said = t_start;
    for (int tp = 1; tp <= gpus; tp++) {
        if (gpus % tp || !filter_ok(f->tp, tp)) continue;
        if (f->tp < 0 && tp > gpus_per_node) continue;  // tensor parallelism stays inside a node unless asked for
        for (int cp = 1; cp <= gpus / tp && (cp == 1 || base->context_parallel); cp *= 2)
            for (int U = 1; U <= cp; U *= 2) {
                if ((gpus / tp) % cp || !filter_cp_ok(f, cp, U)) continue;
                for (int pp = 1; pp <= gpus / (tp * cp); pp++) {
                    if ((gpus / (tp * cp)) % pp || !filter_ok(f->pp, pp) || pp > c->n_layer) continue;
                    int dp = gpus / (tp * cp * pp);
                    if (!filter_ok(f->dp, dp) || global_batch % dp) continue;
                    for (int mb = 1; mb <= global_batch / dp; mb *= 2) {
                        if ((global_batch / dp) % mb || !filter_ok(f->micro_batch, mb)) continue;
                        for (int vpp = 1; vpp * pp <= c->n_layer; vpp++) {
                            if (!filter_ok(f->vpp, vpp) || (vpp > 1 && (pp == 1 || c->n_layer % (pp * vpp)))) continue;
                            for (int sched = 0; sched < N_SCHEDULES; sched++) {
                                if (!plan_schedule_tried(sched, pp, vpp) || !filter_ok(f->schedule, sched)) continue;
                                ModelConfig lc = *c;
                                lc.dp = dp, lc.tp = tp, lc.pp = pp, lc.vpp = vpp, lc.micro_batch = mb, lc.schedule = sched;
                                lc.cp = cp, lc.cp_ulysses = U;
                                plan_enumerate_settings(&lc, global_batch, gpus_per_node, d, base, f, &list);
                                if (now_s() - t_said > 5) {  // big searches say they are alive
                                    t_said = now_s();
                                    fprintf(stderr, "plan: %d layouts evaluated in %.0f s (now at tp %d, cp %d)...\n", list.n,
                                            t_said - t_start, tp, cp);
                                }
                            }
                        }
                    }
                }
            }
    }
    *out = list.r;
    return list.n;
}

// Fitting layouts first, then by throughput; ties go to the simpler layout.
static int plan_compare(const void* pa, const void* pb) {
    const PlanResult *a = (const PlanResult*)pa, *b = (const PlanResult*)pb;
    if (a->fits != b->fits) return b->fits - a->fits;
    double ra = a->tokens_per_s_per_gpu, rb = b->tokens_per_s_per_gpu;
    if (fabs(ra - rb) > 1e-9 * (ra + rb)) return ra < rb ? 1 : -1;
    int ka = a->zero + 4 * a->recompute + 16 * a->sp, kb = b->zero + 4 * b->recompute + 16 * b->sp;
    if (ka != kb) return ka - kb;
    return a->mem_total < b->mem_total ? -1 : a->mem_total > b->mem_total;
}

static void plan_sort(PlanResult* r, int n) { qsort(r, n, sizeof(PlanResult), plan_compare); }

// Index of the best fitting layout satisfying the filter in a sorted array, or -1.
static int plan_best(const PlanResult* r, int n, const PlanFilter* f) {
    for (int i = 0; i < n; i++) {
        const PlanResult* p = &r[i];
        if (!p->fits) return -1;
        if (filter_ok(f->tp, p->tp) && filter_ok(f->pp, p->pp) && filter_ok(f->dp, p->dp) && filter_ok(f->vpp, p->vpp) &&
            filter_ok(f->micro_batch, p->micro_batch) && filter_ok(f->recompute, p->recompute) && filter_ok(f->sp, p->sp) &&
            filter_ok(f->zero, p->zero) && filter_ok(f->schedule, p->schedule) && filter_ok(f->attention, p->setup.attention) &&
            filter_ok(f->rms_kernel, p->setup.rms_kernel) && filter_cp_ok(f, p->cp, p->cp_ulysses)) return i;
    }
    return -1;
}

static PlanFilter plan_filter_any(void) { PlanFilter f = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}; return f; }

// "ring", "ulysses", "2d" with its Ulysses degree ("2d u2"), or "-" without context parallelism.
static const char* cp_kind_str(const PlanResult* p, char* buf, size_t len) {
    int kind = cp_kind_of(p->cp, p->cp_ulysses);
    if (kind == CPK_2D) snprintf(buf, len, "2d u%d", p->cp_ulysses);
    else snprintf(buf, len, "%s", kind == CPK_NONE ? "-" : CPK_NAMES[kind]);
    return buf;
}

// ----------------------------------------------------------------------------
// Output

static void plan_print_table(const PlanResult* r, int n, int top) {
    printf("%4s %4s %3s %3s %-8s %3s %3s %3s %-11s %-9s %2s %4s %-13s %3s %7s %4s %8s %10s %6s %7s %7s %6s\n", "rank", "dp", "tp", "cp",
           "cp kind", "pp", "vpp", "mb", "schedule", "recompute", "sp", "zero", "attention", "rms", "mem GiB", "fits", "step s", "tok/s/GPU",
           "MFU%", "bubble%", "formula", "cp%");
    for (int i = 0; i < n && i < top; i++) {
        const PlanResult* p = &r[i];
        char kind[16];
        printf("%4d %4d %3d %3d %-8s %3d %3d %3d %-11s %-9s %2d %4d %-13s %3d %7.1f %4s %8.3f %10.0f %6.1f %7.2f %7.2f %6.1f\n", i + 1, p->dp,
               p->tp, p->cp, cp_kind_str(p, kind, sizeof(kind)), p->pp, p->vpp, p->micro_batch, schedule_name(p->schedule),
               recompute_name(p->recompute), p->sp, p->zero, ATTN_NAMES[p->setup.attention], p->setup.rms_kernel, p->mem_total / GiB,
               p->fits ? "yes" : "no", p->t_step, p->tokens_per_s_per_gpu, 100 * p->mfu, 100 * p->bubble, 100 * p->bubble_formula,
               p->timed ? 100 * p->t_cp_exposed / p->t_step : 0);
    }
}

// Write every layout to the CSV (opened before the search, so a bad path fails at once)
// and put it in place.
static void plan_write_csv(AtomicFile* out, const ModelConfig* c, const DeviceProfile* d, const PlanResult* r, int n) {
    FILE* f = out->f;
    fprintf(f, "dp,tp,pp,cp,cp_ulysses,cp_kind,cp_off_node,vpp,micro_batch,n_micro,schedule,recompute,sp,zero,attention,rms_kernel,"
               "in_flight,w_pending,worst_stage,mem_weights_gib,mem_grads_gib,mem_optim_gib,mem_act_gib,mem_w_inputs_gib,mem_temp_gib,"
               "mem_overhead_gib,mem_total_gib,fits,t_layer_fwd_s,t_layer_bwd_s,t_layer_w_s,t_tp_comm_s,t_cp_comm_s,t_cp_exposed_s,cp_gib,"
               "t_p2p_s,t_pipeline_s,t_dp_comm_s,t_dp_exposed_s,t_optim_s,t_step_s,bubble,bubble_formula,tokens_per_s_per_gpu,"
               "model_tflops_per_gpu,mfu,hfu,mfu_study\n");
    for (int i = 0; i < n; i++) {
        const PlanResult* p = &r[i];
        fprintf(f, "%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%s,%s,%d,%d,%s,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,", p->dp, p->tp,
                p->pp, p->cp, p->cp_ulysses, CPK_NAMES[cp_kind_of(p->cp, p->cp_ulysses)], p->cp_off_node, p->vpp,
                p->micro_batch, p->n_micro, schedule_name(p->schedule), recompute_name(p->recompute), p->sp, p->zero,
                ATTN_NAMES[p->setup.attention], p->setup.rms_kernel, p->in_flight, p->w_pending, p->worst_stage, p->mem_weights / GiB,
                p->mem_grads / GiB, p->mem_optim / GiB, p->mem_act / GiB, p->mem_w_inputs / GiB, p->mem_temp / GiB, p->mem_overhead / GiB,
                p->mem_total / GiB, p->fits);
        if (!p->timed) { fprintf(f, ",,,,,,,,,,,,,,,,,,,\n"); continue; }  // does not fit: not simulated
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.5f,%.5f,%.2f,%.3f,%.5f,%.5f,%.5f\n", p->t_layer_fwd,
                p->t_layer_bwd, p->t_layer_w, p->t_tp_comm, p->t_cp_comm, p->t_cp_exposed, p->cp_bytes / GiB, p->t_p2p, p->t_pipeline,
                p->t_dp_comm, p->t_dp_exposed, p->t_optim, p->t_step, p->bubble, p->bubble_formula, p->tokens_per_s_per_gpu,
                p->model_tflops_per_gpu, p->mfu, p->hfu, study_mfu(c, p, d));
    }
    atomic_commit(out);
}

static void plan_print_profile(const DeviceProfile* d, const PlanSetup* k, int gpus_per_node) {
    printf("device %s: %.4g TFLOP/s peak, matmul eff %.2f (+%.0f us), attention eff flash2 %.2f flash1 %.2f bmm %.2f, "
           "%.0f GiB (reserve %.1f + %.0f%% of activations), HBM %.0f GB/s x %.2f\n", d->name, d->peak_flops / 1e12, d->matmul_eff,
           d->matmul_latency * 1e6, d->attn_eff_flash2, d->attn_eff_flash1, d->bmm_eff, d->mem_bytes / GiB, d->mem_overhead / GiB,
           100 * d->mem_frag, d->hbm_bw / 1e9, d->hbm_eff);
    printf("links: %d GPUs/node, intra %.0f GB/s/GPU, %d NICs x %.1f GB/s per node, link eff %.2f, DP overlap %.2f; "
           "%s weights, %d-byte grads\n", gpus_per_node, d->intra_bw / 1e9, d->nics_per_node, d->nic_bw / 1e9, d->link_eff,
           k->dp_after_backward ? 0.0 : d->dp_overlap, d->dtype_bytes == 2 ? "bf16" : "fp32", d->grad_bytes);
    printf("software: rank order %s, pipeline cut by %s, %s loss, gradients reduced %s, %s\n",
           k->rank_order == ORDER_TP_PP_DP ? "tp-cp-pp-dp" : "tp-dp-pp", k->pipe_split == SPLIT_LAYERS ? "layers" : "parameters",
           k->loss_gathered ? "gathered-vocabulary" : "vocabulary-parallel", k->dp_after_backward ? "after the backward" : "during the backward",
           k->context_parallel ? "context parallelism ring | ulysses | 2d" : "no context parallelism");
}

// ----------------------------------------------------------------------------
// Command line: ./train --plan [flags]

static void plan_usage(void) {
    printf("usage: train --plan [flags]              rank every layout and kernel choice\n"
           "       train --plan --runs FILE.csv [flags]  predict the runs of a file (see dev/PLANNER.md)\n"
           "  --model NAME            preset (default llama-13b); shape: --n-layer --n-head --n-kv-head --d-model --d-ff --vocab --seq-len\n"
           "                          (with --runs the shape flags override every row's preset)\n"
           "  --gpus N                GPUs in all (default 8)       --gpus-per-node N (default: the device's)\n"
           "  --device NAME           %s (default a100-80gb)\n"
           "  --device-file FILE      'key = value' profile (optional first key 'base = NAME')\n"
           "  --device-set KEY=VALUE  override one profile key (repeatable); --peak-tflops X\n"
           "  --global-batch-tokens N or --global-batch N (sequences; default 4194304 tokens)\n"
           "  --attention torch|fused_softmax|flash1|flash2, --rms-kernel on|off   evaluate only these kernels\n"
           "  --software trainer|scaling   what runs the layout: this trainer (default), or the Aleph Alpha Scaling\n"
           "                          codebase of the layouts study (its rank order, pipeline cut, loss and DP reduction)\n"
           "  --tp --pp --dp --vpp --micro-batch N, --recompute none|selective|full, --sp 0|1, --zero 0..3,\n"
           "  --schedule 1f1b|interleaved|zb-h1|zb-v,\n"
           "  --cp N (ranks per sequence: 1 = no context parallelism; powers of two), --cp-kind ring|ulysses|2d,\n"
           "  --cp-ulysses U (the all-to-all degree inside cp; 2d: the ring is cp / U)   evaluate only these layouts\n"
           "  --top N                 rows to print (default 20)    --plan-csv FILE  all layouts (or the runs), every column\n", PROFILE_NAMES);
}

// The trainer's limits on a model's shape (args.h); the planner refuses the same.
#define PLAN_SHAPE_FLAGS 7
static const char* const SHAPE_FLAG[PLAN_SHAPE_FLAGS] = {"--n-layer", "--n-head", "--n-kv-head", "--d-model", "--d-ff", "--vocab", "--seq-len"};
static const int SHAPE_MIN[PLAN_SHAPE_FLAGS] = {1, 1, 1, 1, 1, 2, 1};
static const int SHAPE_MAX[PLAN_SHAPE_FLAGS] = {512, 1024, 1024, 65536, 1 << 20, 1 << 20, 1 << 20};

typedef struct {
    const char* model;
    int shape[PLAN_SHAPE_FLAGS];  // n_layer n_head n_kv_head d_model d_ff vocab seq_len; -1 = the preset's
    int gpus, gpus_per_node, top;
    long global_batch, global_tokens;
    DeviceProfile dev;
    PlanSetup setup;              // the software's rank order, pipeline cut, loss, DP reduction (kernels come from the filter or the row)
    PlanFilter filter;
    const char *csv, *runs;
} PlanArgs;

// A model from a preset, the shape overrides and a sequence length (0: the preset's).
// Returns 0, or -1 with the reason in err.
static int plan_model(const char* preset, const int* shape, int seq_len, ModelConfig* c, char* err, size_t err_len) {
    const Preset* p = find_preset(preset);
    if (!p) { snprintf(err, err_len, "unknown model '%s'", preset); return -1; }
    memset(c, 0, sizeof(*c));
    apply_preset(c, p);
    int* dst[PLAN_SHAPE_FLAGS] = {&c->n_layer, &c->n_head, &c->n_kv_head, &c->d_model, &c->d_ff, &c->vocab, &c->seq_len};
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++) if (shape[k] != -1) *dst[k] = shape[k];
    if (seq_len) c->seq_len = seq_len;
    if (shape[1] > 0 && shape[2] < 0) c->n_kv_head = c->n_head;  // --n-head alone: plain multi-head attention
    if (shape[3] > 0 && shape[4] < 0) c->d_ff = 0;             // --d-model alone: the architecture's default d_ff
    config_finalize(c);
    int v[PLAN_SHAPE_FLAGS] = {c->n_layer, c->n_head, c->n_kv_head, c->d_model, c->d_ff, c->vocab, c->seq_len};
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++)
        if (v[k] < SHAPE_MIN[k] || v[k] > SHAPE_MAX[k]) {
            snprintf(err, err_len, "%s %d is out of range (%d .. %d, the trainer's limits)", SHAPE_FLAG[k], v[k], SHAPE_MIN[k], SHAPE_MAX[k]);
            return -1;
        }
    if (c->d_model % c->n_head) { snprintf(err, err_len, "--d-model %d must be a multiple of --n-head %d", c->d_model, c->n_head); return -1; }
    if (c->n_head % c->n_kv_head) { snprintf(err, err_len, "--n-head %d must be a multiple of --n-kv-head %d", c->n_head, c->n_kv_head); return -1; }
    c->dp = c->tp = c->pp = c->vpp = c->micro_batch = c->cp = c->cp_ulysses = 1;
    c->schedule = SCHED_1F1B;
    return 0;
}

static int plan_int(const char* v, const char* flag, int hi) {
    long x = parse_long(v, flag);
    if (x < 0 || x > hi) fail("%s: %ld is out of range (0 .. %d)", flag, x, hi);
    return (int)x;
}

static void plan_parse_args(int argc, char** argv, PlanArgs* a) {
    memset(a, 0, sizeof(*a));
    a->model = "llama-13b";
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++) a->shape[k] = -1;
    a->gpus = 8, a->gpus_per_node = -1, a->top = 20;
    a->setup = plan_setup_default();
    a->filter = plan_filter_any();
    PlanFilter* f = &a->filter;
    double peak_tflops = 0;
    const char *device = "a100-80gb", *device_file = NULL;
    const char* sets[64];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        if (!strcmp(flag, "--plan")) continue;
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) { plan_usage(); exit(0); }
        if (strncmp(flag, "--", 2)) fail("--plan: unexpected argument '%s' (flags start with --; see --plan --help)", flag);
        if (i + 1 >= argc) fail("--plan: flag %s needs a value", flag);
        const char* v = argv[++i];
        int shape_k = -1;
        for (int k = 0; k < PLAN_SHAPE_FLAGS; k++) if (!strcmp(flag, SHAPE_FLAG[k])) shape_k = k;
        if (shape_k >= 0) {
            long x = parse_long(v, flag);
            if (x < SHAPE_MIN[shape_k] || x > SHAPE_MAX[shape_k])
                fail("%s must be between %d and %d (the trainer's limits), got %ld", flag, SHAPE_MIN[shape_k], SHAPE_MAX[shape_k], x);
            a->shape[shape_k] = (int)x;
        } else if (!strcmp(flag, "--model")) { if (!find_preset(v)) fail("--model: unknown preset '%s'", v); a->model = v; }
        else if (!strcmp(flag, "--gpus")) a->gpus = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--gpus-per-node")) a->gpus_per_node = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--device")) device = v;
        else if (!strcmp(flag, "--device-file")) device_file = v;
        else if (!strcmp(flag, "--device-set")) { if (n_sets == 64) fail("--device-set: at most 64"); sets[n_sets++] = v; }
        else if (!strcmp(flag, "--peak-tflops")) peak_tflops = parse_double(v, flag);
        else if (!strcmp(flag, "--global-batch-tokens")) a->global_tokens = parse_long(v, flag);
        else if (!strcmp(flag, "--global-batch")) a->global_batch = parse_long(v, flag);
        else if (!strcmp(flag, "--top")) a->top = plan_int(v, flag, 1 << 30);
        else if (!strcmp(flag, "--plan-csv")) a->csv = v;
        else if (!strcmp(flag, "--runs")) a->runs = v;
        else if (!strcmp(flag, "--tp")) f->tp = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--pp")) f->pp = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--dp")) f->dp = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--vpp")) f->vpp = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--micro-batch")) f->micro_batch = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--sp")) f->sp = plan_int(v, flag, 1);
        else if (!strcmp(flag, "--zero")) f->zero = plan_int(v, flag, 3);
        else if (!strcmp(flag, "--attention")) {
            if ((f->attention = attn_from_name(v)) < 0) fail("--attention: expected torch, fused_softmax, flash1 or flash2, got '%s'", v);
        } else if (!strcmp(flag, "--rms-kernel")) {
            if (!strcmp(v, "on") || !strcmp(v, "1")) f->rms_kernel = 1;
            else if (!strcmp(v, "off") || !strcmp(v, "0")) f->rms_kernel = 0;
            else fail("--rms-kernel: expected on or off, got '%s'", v);
        } else if (!strcmp(flag, "--software")) {
            if (!strcmp(v, "trainer")) a->setup = plan_setup_for(SOFTWARE_TRAINER);
            else if (!strcmp(v, "scaling")) a->setup = plan_setup_for(SOFTWARE_SCALING);
            else fail("--software: expected trainer or scaling, got '%s'", v);
        } else if (!strcmp(flag, "--recompute")) {
            if (!strcmp(v, "none")) f->recompute = RECOMPUTE_NONE;
            else if (!strcmp(v, "selective")) f->recompute = RECOMPUTE_SELECTIVE;
            else if (!strcmp(v, "full")) f->recompute = RECOMPUTE_FULL;
            else fail("--recompute: expected none, selective or full, got '%s'", v);
        } else if (!strcmp(flag, "--schedule")) {  // the schedules the search tries (plan_schedule_tried)
            f->schedule = schedule_from_name(v);
            if (f->schedule < 0 || f->schedule == SCHED_GPIPE) fail("--schedule: expected 1f1b, interleaved, zb-h1 or zb-v, got '%s'", v);
        } else if (!strcmp(flag, "--cp")) f->cp = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--cp-ulysses")) f->cp_ulysses = plan_int(v, flag, 1 << 20);
        else if (!strcmp(flag, "--cp-kind")) {
            if (!strcmp(v, "ring")) f->cp_kind = CPK_RING;
            else if (!strcmp(v, "ulysses")) f->cp_kind = CPK_ULYSSES;
            else if (!strcmp(v, "2d")) f->cp_kind = CPK_2D;
            else fail("--cp-kind: expected ring, ulysses or 2d, got '%s'", v);
        } else fail("--plan: unknown flag '%s' (see --plan --help)", flag);
    }
    if ((f->cp >= 0 && (f->cp < 1 || (f->cp & (f->cp - 1)))) || (f->cp_ulysses >= 0 && (f->cp_ulysses < 1 || (f->cp_ulysses & (f->cp_ulysses - 1)))))
        fail("--cp and --cp-ulysses must be powers of two (1, 2, 4, ...)");
    if (f->cp > 0 && f->cp_ulysses > f->cp) fail("--cp-ulysses %d does not divide --cp %d", f->cp_ulysses, f->cp);
    if (a->gpus < 1) fail("--gpus must be >= 1, got %d", a->gpus);
    if (a->top < 1) fail("--top must be >= 1, got %d", a->top);
    if ((f->tp == 0) || f->pp == 0 || f->dp == 0 || f->vpp == 0 || f->micro_batch == 0)
        fail("--tp, --pp, --dp, --vpp and --micro-batch must be >= 1");

    DeviceProfile* d = &a->dev;
    char err[512];
    if (device_file) { if (profile_parse_file(device_file, d, err, sizeof(err))) fail("--device-file: %s", err); }
    else if (profile_builtin(device, d)) fail("--device: unknown device '%s' (known: %s)", device, PROFILE_NAMES);
    for (int k = 0; k < n_sets; k++) {
        char key[64];
        const char* eq = strchr(sets[k], '=');
        if (!eq || eq == sets[k] || (size_t)(eq - sets[k]) >= sizeof(key)) fail("--device-set: expected KEY=VALUE, got '%s'", sets[k]);
        memcpy(key, sets[k], eq - sets[k]);
        key[eq - sets[k]] = 0;
        if (profile_set(d, key, eq + 1, err, sizeof(err))) fail("--device-set: %s", err);
    }
    if (peak_tflops != 0) {
        if (!(peak_tflops > 0)) fail("--peak-tflops must be positive, got %g", peak_tflops);
        d->peak_flops = peak_tflops * 1e12;
    }
    if (a->gpus_per_node == -1) a->gpus_per_node = d->gpus_per_node > 0 ? d->gpus_per_node : a->gpus;
    if (a->gpus_per_node < 1) fail("--gpus-per-node must be >= 1, got %d", a->gpus_per_node);
    if (a->global_batch && a->global_tokens) fail("give --global-batch or --global-batch-tokens, not both");
    if (a->global_batch < 0 || a->global_tokens < 0) fail("the global batch must be positive");
}

// ----------------------------------------------------------------------------
// --runs FILE.csv: predict each run of a file exactly as given.

// The columns a runs file must have (the layouts study's sheets, converted): the setting and
// the layout of each run. Any other column (sheet, status, step_time_s, mfu_pct, ...) is
// carried through to the output unchanged; an optional vpp column sets virtual stages.
enum { RC_MODEL, RC_SEQ_LEN, RC_GPUS, RC_GPUS_PER_NODE, RC_BATCH_TOKENS, RC_SCHEDULE, RC_ZERO, RC_TP, RC_PP, RC_DP,
       RC_MICRO_BATCH, RC_RECOMPUTE, RC_ATTENTION, RC_RMS_KERNEL, RC_SP, N_RUN_COLS };
static const char* const RUN_COLS[N_RUN_COLS] = {"model", "seq_len", "gpus", "gpus_per_node", "global_batch_tokens", "schedule",
    "zero", "tp", "pp", "dp", "micro_batch", "recompute", "attention", "rms_kernel", "sp"};
// which of them are integers
static const int RUN_COL_INT[N_RUN_COLS] = {0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1};

#define CSV_MAX_FIELDS 256

// Split one CSV line in place (RFC 4180: fields may be quoted, "" is a quote inside
// quotes). Returns the number of fields, or -1 for an unterminated quote or too many fields.
static int csv_split(char* line, char** fields) {
    int n = 0;
    char* p = line;
    for (;;) {
        if (n == CSV_MAX_FIELDS) return -1;
        if (*p == '"') {
            char *out = ++p, *start = out;
            for (;;) {
                if (!*p) return -1;
                if (*p == '"') {
                    if (p[1] == '"') { *out++ = '"'; p += 2; continue; }
                    p++;
                    break;
                }
                *out++ = *p++;
            }
            fields[n++] = start;
            if (*p && *p != ',') return -1;
            *out = 0;
        } else {
            fields[n++] = p;
            while (*p && *p != ',') p++;
        }
        if (!*p) return n;
        *p++ = 0;
    }
}

static void csv_put(FILE* f, const char* s, int last) {
    if (strpbrk(s, ",\"\n\r")) {
        fputc('"', f);
        for (; *s; s++) { if (*s == '"') fputc('"', f); fputc(*s, f); }
        fputc('"', f);
    } else fputs(s, f);
    fputc(last ? '\n' : ',', f);
}

// Read the next line into *buf (without its end of line); 0 at the end of the file.
static int read_line(FILE* f, char** buf, size_t* cap) {
    ssize_t len = getline(buf, cap, f);
    if (len < 0) return 0;
    while (len > 0 && ((*buf)[len - 1] == '\n' || (*buf)[len - 1] == '\r')) (*buf)[--len] = 0;
    return 1;
}

// Predict one row (vpp: its vpp column, 0 without one). Returns 0 with *r filled, or -1
// with the reason in err.
static int plan_run_row(const PlanArgs* a, char** col, int vpp, ModelConfig* c, PlanResult* r, char* err, size_t err_len) {
    long v[N_RUN_COLS];
    for (int k = 0; k < N_RUN_COLS; k++) if (RUN_COL_INT[k]) v[k] = strtol(col[k], NULL, 10);
    if (plan_model(col[RC_MODEL], a->shape, 0, c, err, err_len)) return -1;
    if (v[RC_SEQ_LEN] < SHAPE_MIN[6] || v[RC_SEQ_LEN] > SHAPE_MAX[6]) { snprintf(err, err_len, "seq_len %ld is out of range", v[RC_SEQ_LEN]); return -1; }
    c->seq_len = (int)v[RC_SEQ_LEN];
    if (v[RC_GPUS] < 1 || v[RC_GPUS] > (1 << 20) || v[RC_GPUS_PER_NODE] < 1 || v[RC_GPUS_PER_NODE] > (1 << 20)) {
        snprintf(err, err_len, "gpus %ld and gpus_per_node %ld must be 1 .. 2^20", v[RC_GPUS], v[RC_GPUS_PER_NODE]);
        return -1;
    }
    if (v[RC_BATCH_TOKENS] < 1 || v[RC_BATCH_TOKENS] % c->seq_len || v[RC_BATCH_TOKENS] / c->seq_len > (1L << 30)) {
        snprintf(err, err_len, "global_batch_tokens %ld is not a positive multiple of seq_len %d", v[RC_BATCH_TOKENS], c->seq_len);
        return -1;
    }
    int sizes[5] = {RC_TP, RC_PP, RC_DP, RC_MICRO_BATCH, RC_ZERO};
    for (int k = 0; k < 5; k++)
        if (v[sizes[k]] < (sizes[k] == RC_ZERO ? 0 : 1) || v[sizes[k]] > (1 << 20)) {
            snprintf(err, err_len, "%s %ld is out of range", RUN_COLS[sizes[k]], v[sizes[k]]);
            return -1;
        }
    if (v[RC_TP] * v[RC_PP] * v[RC_DP] != v[RC_GPUS]) {
        snprintf(err, err_len, "tp %ld x pp %ld x dp %ld is not gpus %ld", v[RC_TP], v[RC_PP], v[RC_DP], v[RC_GPUS]);
        return -1;
    }
    c->tp = (int)v[RC_TP], c->pp = (int)v[RC_PP], c->dp = (int)v[RC_DP], c->micro_batch = (int)v[RC_MICRO_BATCH], c->zero = (int)v[RC_ZERO];
    if (v[RC_SP] != 0 && v[RC_SP] != 1) { snprintf(err, err_len, "sp must be 0 or 1, got %ld", v[RC_SP]); return -1; }
    if (v[RC_RMS_KERNEL] != 0 && v[RC_RMS_KERNEL] != 1) { snprintf(err, err_len, "rms_kernel must be 0 or 1, got %ld", v[RC_RMS_KERNEL]); return -1; }
    c->sp = c->tp > 1 && v[RC_SP];  // with tp 1 sequence parallelism splits nothing (Megatron and Scaling run it as without)
    const char* s = col[RC_SCHEDULE];
    if ((c->schedule = schedule_from_name(s)) < 0) { snprintf(err, err_len, "unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1, zb-v)", s); return -1; }
    c->vpp = vpp ? vpp : c->schedule == SCHED_ZBV ? 2 : 1;  // without a vpp column: the trainer's default (args.h)
    s = col[RC_RECOMPUTE];
    c->recompute = !strcmp(s, "none") ? RECOMPUTE_NONE : !strcmp(s, "selective") ? RECOMPUTE_SELECTIVE : !strcmp(s, "full") ? RECOMPUTE_FULL : -1;
    if (c->recompute < 0) { snprintf(err, err_len, "unknown recompute '%s' (none, selective, full)", s); return -1; }
    PlanSetup k = a->setup;
    if ((k.attention = attn_from_name(col[RC_ATTENTION])) < 0) {
        snprintf(err, err_len, "unknown attention '%s' (torch, fused_softmax, flash1, flash2)", col[RC_ATTENTION]);
        return -1;
    }
    k.rms_kernel = (int)v[RC_RMS_KERNEL];
    if (plan_predict(c, &k, (int)(v[RC_BATCH_TOKENS] / c->seq_len), (int)v[RC_GPUS_PER_NODE], &a->dev, r)) {
        snprintf(err, err_len, "%s", r->invalid);
        return -1;
    }
    return 0;
}

static void plan_runs(const PlanArgs* a) {
    const char* path = a->runs;
    char why[256];
    FILE* in = input_open(path, why, sizeof(why), NULL);
    if (!in) fail("--runs: cannot open '%s': %s", path, why);
    AtomicFile csv;
    if (a->csv) output_check(a->csv, "--plan-csv", 1), atomic_open(&csv, a->csv, "--plan-csv");
    FILE* out = a->csv ? csv.f : stdout;
    char *line = NULL, *header = NULL;
    size_t cap = 0;
    if (!read_line(in, &line, &cap)) fail("--runs %s: the file is empty (expected a header line and runs)", path);
    header = strdup(line);
    char* names[CSV_MAX_FIELDS];
    int n_cols = csv_split(header, names);
    if (n_cols < 0) fail("--runs %s: line 1: bad header (an unterminated quote or more than %d columns)", path, CSV_MAX_FIELDS);
    int idx[N_RUN_COLS];
    for (int k = 0; k < N_RUN_COLS; k++) {
        idx[k] = -1;
        for (int j = 0; j < n_cols; j++) if (!strcmp(names[j], RUN_COLS[k])) idx[k] = j;
        if (idx[k] < 0) fail("--runs %s: the header has no column '%s' (needed: model, seq_len, gpus, gpus_per_node, "
                             "global_batch_tokens, schedule, zero, tp, pp, dp, micro_batch, recompute, attention, rms_kernel, sp)", path, RUN_COLS[k]);
    }
    int vpp_col = -1;
    for (int j = 0; j < n_cols; j++) if (!strcmp(names[j], "vpp")) vpp_col = j;
    // Read every row first, so a malformed file is refused before anything is written.
    char** rows = NULL;
    int n_rows = 0, row_cap = 0;
    for (int line_no = 2; read_line(in, &line, &cap); line_no++) {
        if (!line[0]) continue;  // a blank line (often the last)
        if (n_rows == row_cap) { row_cap = row_cap ? 2 * row_cap : 256; rows = (char**)realloc(rows, sizeof(char*) * row_cap); if (!rows) fail("out of memory"); }
        char* copy = strdup(line);
        char* col[CSV_MAX_FIELDS];
        int n = csv_split(copy, col);
        if (n != n_cols) fail("--runs %s: line %d: %d fields where the header has %d", path, line_no, n < 0 ? 0 : n, n_cols);
        for (int k = 0; k < N_RUN_COLS; k++) {
            const char* s = col[idx[k]];
            char* end;
            errno = 0;
            if (RUN_COL_INT[k] && (strtol(s, &end, 10), errno || end == s || *end))
                fail("--runs %s: line %d: column %s: expected an integer, got '%s'", path, line_no, RUN_COLS[k], s);
        }
        if (vpp_col >= 0) {
            char* end;
            errno = 0;
            long x = strtol(col[vpp_col], &end, 10);
            if (errno || end == col[vpp_col] || *end || x < 1 || x > (1 << 20))
                fail("--runs %s: line %d: column vpp: expected an integer >= 1, got '%s'", path, line_no, col[vpp_col]);
        }
        free(copy);
        rows[n_rows++] = strdup(line);
    }
    if (ferror(in)) fail("--runs %s: read error: %s", path, strerror(errno));
    fclose(in);
    if (n_rows == 0) fail("--runs %s: no runs after the header", path);

    for (int j = 0; j < n_cols; j++) csv_put(out, names[j], 0);
    fprintf(out, "pred_fits,pred_mem_gib,pred_step_s,pred_mfu_pct,pred_reason\n");
    int n_bad = 0, n_fit = 0;
    for (int i = 0; i < n_rows; i++) {
        char* col[CSV_MAX_FIELDS];
        csv_split(rows[i], col);
        char* run_col[N_RUN_COLS];
        for (int k = 0; k < N_RUN_COLS; k++) run_col[k] = col[idx[k]];
        ModelConfig c;
        PlanResult r;
        char reason[512];
        int rc = plan_run_row(a, run_col, vpp_col >= 0 ? atoi(col[vpp_col]) : 0, &c, &r, reason, sizeof(reason));
        for (int j = 0; j < n_cols; j++) csv_put(out, col[j], 0);
        if (rc) {
            fprintf(stderr, "error: --runs %s: row %d: %s\n", path, i + 1, reason);
            n_bad++;
            fprintf(out, "0,,,,");
        } else {
            plan_memory_reason(&r, a->dev.mem_bytes, reason, sizeof(reason));
            n_fit += r.fits;
            fprintf(out, "%d,%.3f,%.4f,%.3f,", r.fits, r.mem_total / GiB, r.t_step, 100 * study_mfu(&c, &r, &a->dev));
        }
        csv_put(out, reason, 1);
        free(rows[i]);
    }
    if (a->csv) atomic_commit(&csv);
    else if (fflush(stdout)) fail("--runs: writing the predictions failed: %s", strerror(errno));
    fprintf(a->csv ? stdout : stderr, "%d runs predicted on %s (%d fit, %d do not), %d could not be evaluated%s%s\n",
            n_rows - n_bad, a->dev.name, n_fit, n_rows - n_bad - n_fit, n_bad, a->csv ? "; wrote " : "", a->csv ? a->csv : "");
    free(rows), free(line), free(header);
}

static int plan_main(int argc, char** argv) {
    PlanArgs a;
    plan_parse_args(argc, argv, &a);
    if (a.runs) { plan_runs(&a); return 0; }
    ModelConfig c;
    char err[512];
    if (plan_model(a.model, a.shape, 0, &c, err, sizeof(err))) fail("%s", err);
    long global_batch = a.global_batch;
    if (!global_batch) {
        long tokens = a.global_tokens ? a.global_tokens : 4194304;
        if (tokens % c.seq_len) fail("--global-batch-tokens %ld is not a multiple of the sequence length %d", tokens, c.seq_len);
        global_batch = tokens / c.seq_len;
    }
    if (global_batch > (1L << 30)) fail("the global batch is too large");
    AtomicFile csv;
    if (a.csv) output_check(a.csv, "--plan-csv", 1), atomic_open(&csv, a.csv, "--plan-csv");

    char b1[32], b2[32];
    printf("plan: %s (%s, L=%d h=%d heads=%d/%d d_ff=%d vocab=%d), seq %d, %s params, %.4g GFLOP/token (PaLM)\n", a.model,
           arch_name(c.arch), c.n_layer, c.d_model, c.n_head, c.n_kv_head, c.d_ff, c.vocab, c.seq_len,
           fmt_count(config_num_params(&c), b1), config_flops_per_token(&c, c.seq_len) / 1e9);
    printf("%d GPUs, global batch %ld sequences = %s tokens\n", a.gpus, global_batch, fmt_count((double)global_batch * c.seq_len, b2));
    plan_print_profile(&a.dev, &a.setup, a.gpus_per_node);

    PlanResult* res;
    int n = plan_enumerate(&c, a.gpus, (int)global_batch, a.gpus_per_node, &a.dev, &a.setup, &a.filter, &res);
    if (n == 0)
        fail("no valid layout: check --gpus, the global batch and the restrictions (tp must divide the heads, dp*mb the batch, "
             "tp*U the KV heads; 2D needs cp >= 4; --software scaling has no cp)");
    plan_sort(res, n);
    int n_fit = 0;
    for (int i = 0; i < n; i++) n_fit += res[i].fits;
    printf("%d layouts evaluated, %d fit in memory%s\n\n", n, n_fit, n_fit ? "" : " (showing the non-fitting ones)");
    plan_print_table(res, n_fit ? n_fit : n, a.top);
    if (n_fit < n) printf("(%d layouts that do not fit are not shown%s)\n", n - n_fit, a.csv ? "; they are in the CSV" : "; see --plan-csv");
    PlanFilter any = plan_filter_any();
    int best = plan_best(res, n, &any);
    if (best >= 0) {
        const PlanResult* p = &res[best];
        // as ./train flags (ZeRO-3 is modelled here but the trainer implements stages 0-2)
        int kind = cp_kind_of(p->cp, p->cp_ulysses);
        char cp_flags[64] = "";
        if (kind == CPK_2D) snprintf(cp_flags, sizeof(cp_flags), " --cp %d --cp-kind 2d --cp-ulysses %d", p->cp, p->cp_ulysses);
        else if (kind != CPK_NONE) snprintf(cp_flags, sizeof(cp_flags), " --cp %d --cp-kind %s", p->cp, CPK_NAMES[kind]);
        printf("best: --dp %d --tp %d%s --pp %d --vpp %d --micro-batch %d --recompute %s%s --zero %d --schedule %s, %s attention, "
               "rms kernel %s  (%.1f%% MFU, %.1f%% HFU, %.4g TFLOP/s/GPU, %.1f GiB)%s\n", p->dp, p->tp, cp_flags, p->pp, p->vpp,
               p->micro_batch, recompute_name(p->recompute), p->sp ? " --sp" : "", p->zero, schedule_name(p->schedule),
               ATTN_NAMES[p->setup.attention], p->setup.rms_kernel ? "on" : "off", 100 * p->mfu, 100 * p->hfu, p->model_tflops_per_gpu,
               p->mem_total / GiB, p->zero == 3 ? " [ZeRO-3: planner only]" : "");
    }
    if (a.csv) { plan_write_csv(&csv, &c, &a.dev, res, n); printf("wrote %d layouts to %s\n", n, a.csv); }
    free(res);
    return 0;
}

#endif
