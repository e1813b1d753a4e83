// planner.h: the layout planner. For a model, a number of GPUs and a device profile it
// enumerates every parallel layout (dp x tp x pp, virtual stages, micro-batch size,
// recomputation, sequence parallelism, ZeRO stage, schedule), predicts per-GPU memory
// and step time for each from first principles, and prints them ranked by throughput.
//
//   ./train --plan --model llama-13b --gpus 64 --device a100-80gb --global-batch-tokens 4194304
//
// The model, in one paragraph (dev/PLANNER.md has the long form):
//   memory  = model states (bytes per parameter by ZeRO stage) + activations (Korthikanti
//             et al. 2022, per layer, times the (micro-batch, chunk) pairs the stage holds
//             at peak under its schedule: schedule_max_in_flight) + logits + fixed overhead.
//   compute = per op roofline: matmuls max(FLOPs / (peak * eff), bytes / HBM) plus a fixed
//             latency per kernel, attention at its kernel's efficiency, elementwise ops at
//             HBM bandwidth. Backward = 2x forward for matmuls; recomputation adds forward work.
//   comm    = ring collectives 2(n-1)/n * bytes / bw (+ latency per step) for tensor
//             parallelism (inside the chunk times, not overlapped), pipeline p2p, and the
//             data-parallel gradient reduction (partly hidden under the last backward).
//   step    = schedule_simulate() of the real schedule (schedule.h) with those per-chunk
//             times + exposed DP communication + the optimizer step.
// Rank order follows layout.h: tp ranks adjacent, then pipeline stages, then data-parallel.
#ifndef PLANNER_H
#define PLANNER_H

#include <stddef.h>
#include "schedule.h"

// ----------------------------------------------------------------------------
// Device profiles

typedef struct {
    char name[32];
    // compute
    double peak_flops;       // dense FLOP/s in the training dtype (bf16 tensor cores on GPUs)
    double matmul_eff;       // fraction of peak a large matmul reaches (cuBLAS on big GEMMs)
    double matmul_latency;   // s, fixed cost per matmul (launch, last partial wave): a matmul of F
                             // FLOPs runs at eff(F) = matmul_eff * F / (F + F_half), F_half = peak*matmul_eff*latency
    double attn_eff_flash;   // fraction of peak of the fused (flash) attention kernels
    double attn_eff_naive;   // fraction of peak of the batched QK^T / AV matmuls without flash
    // memory
    double mem_bytes;        // device memory
    double mem_overhead;     // bytes never available: CUDA context, NCCL buffers, allocator fragmentation
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
    int flash_attn;          // fused attention without the T x T matrices (FlashAttention-2)
    int fused_norm;          // fused RMSNorm/LayerNorm kernel (one pass in, one out)
    // ranks that time-share cores (the CPU build): 0 for devices of their own, else the
    // number of cores all ranks share; a rank runs at peak_flops when it has a core to itself
    int shared_cores;
} DeviceProfile;

#define GiB (1024.0 * 1024.0 * 1024.0)

// Built-in profiles. Efficiency factors of the A100 are tuned so that the planner
// reproduces Hagemann et al. 2023 (dev/PLANNER.md); the others are the same factors
// on the datasheet numbers. A100 node (DGX A100 / HGX A100 style): 8 GPUs, NVLink3
// 600 GB/s bidirectional = 300 GB/s each way per GPU, and we ASSUME 8 HDR InfiniBand
// HCAs of 200 Gb/s per node (one per GPU); H100/H200: NVLink4 900 GB/s bidirectional,
// 8 NDR 400 Gb/s HCAs per node.
static void profile_a100(DeviceProfile* d) {
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "a100-80gb");
    d->peak_flops = 312e12;       // dense bf16
    d->matmul_eff = 0.75;         // large bf16 GEMMs in a training run: ~235 TFLOP/s (power-capped clocks)
    d->matmul_latency = 8e-6;
    d->attn_eff_flash = 0.55;     // FlashAttention-2 fwd+bwd, causal, head dim 128 (Dao 2023: 50-70%)
    d->attn_eff_naive = 0.50;     // the bmms are mostly bandwidth-bound anyway (roofline)
    d->mem_bytes = 80 * GiB;
    d->mem_overhead = 5 * GiB;
    d->hbm_bw = 2.039e12;
    d->hbm_eff = 0.80;
    d->op_latency = 4e-6;
    d->intra_bw = 300e9;
    d->intra_latency = 5e-6;
    d->nic_bw = 200e9 / 8;        // HDR 200 Gb/s
    d->inter_latency = 10e-6;
    d->link_eff = 0.75;
    d->dp_overlap = 0.5;
    d->comm_interference = 0.2;
    d->nics_per_node = 8;
    d->gpus_per_node = 8;
    d->dtype_bytes = 2;
    d->grad_bytes = 2;            // bf16 gradients: 13B with tp=pp=1 only fits with these (as in the paper)
    d->flash_attn = 1;
    d->fused_norm = 1;
}

static void profile_h100(DeviceProfile* d) {
    profile_a100(d);
    snprintf(d->name, sizeof(d->name), "h100-sxm");
    d->peak_flops = 989e12;       // dense bf16 (SXM5)
    d->matmul_eff = 0.70;         // large GEMMs reach ~700 TFLOP/s
    d->attn_eff_flash = 0.40;     // FlashAttention-2 on Hopper reaches ~35-45% (FA3 more)
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
    d->attn_eff_flash = 0.30;
    d->attn_eff_naive = 0.30;
    d->mem_bytes = 16 * GiB;
    d->mem_overhead = 0.25 * GiB;
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
    d->flash_attn = 0;
    d->fused_norm = 1;
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
    PKEY("attn_eff_flash", attn_eff_flash, 0, 1, 1e-3, 1, "fraction of peak of flash attention"),
    PKEY("attn_eff_naive", attn_eff_naive, 0, 1, 1e-3, 1, "fraction of peak of unfused attention matmuls"),
    PKEY("mem_gib", mem_bytes, 0, GiB, 1e-6, 1e6, "device memory, GiB"),
    PKEY("mem_overhead_gib", mem_overhead, 0, GiB, 0, 1e6, "unusable memory, GiB"),
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
    PKEY("flash_attn", flash_attn, 1, 1, 0, 1, "0 or 1"),
    PKEY("fused_norm", fused_norm, 1, 1, 0, 1, "0 or 1"),
    PKEY("shared_cores", shared_cores, 1, 1, 0, 1 << 20, "cores the ranks time-share (0: a device per rank)"),
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
    FILE* f = fopen(path, "r");
    if (!f) { snprintf(err, err_len, "cannot open device file '%s': %s", path, strerror(errno)); return -1; }
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
// Memory: model states and activations

// Parameters one GPU holds for a chunk of n_layers_chunk layers, split over tp: matrices
// and vocabulary rows are divided by tp, norm weights (and GPT-2's row-parallel biases
// and position table) are replicated. The first chunk holds the embedding, the last the
// final norm and the head (GPT-2 ties head and embedding; with pp > 1 the last stage
// keeps its own copy, as Megatron does).
static double chunk_params(const ModelConfig* c, int n_layers_chunk, int first, int last, int tp) {
    double C = c->d_model, F = c->d_ff, V = c->vocab_padded, t = tp;
    double kv = c->n_kv_head * (C / c->n_head);
    double layer;
    if (c->arch == ARCH_GPT2) layer = (4 * C * C + 2 * C * F + 3 * C + F) / t + 4 * C + 2 * C;  // split: W, qkv/fc biases; replicated: 2 LN (w,b), 2 row biases
    else layer = (2 * C * C + 2 * C * kv + 3 * C * F) / t + 2 * C;                            // two RMSNorm weights replicated
    double p = n_layers_chunk * layer;
    if (first) p += V * C / t + (c->arch == ARCH_GPT2 ? c->seq_len * C : 0);
    if (last) {
        p += c->arch == ARCH_GPT2 ? 2 * C : C;
        if (c->arch == ARCH_LLAMA || !first) p += V * C / t;
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
// FlashAttention keeps no s^2 tensor, only the fp32 log-sum-exp per row and head: 4a/h.
// An unfused norm keeps its fp32 input copy and normalized output as well: 2+4+4 = 10 per norm.
// Other dtypes scale by dtype_bytes/2.
static double act_bytes_per_layer(const ModelConfig* c, int b, int tp, int sp, int recompute, int flash, int fused_norm, int dtype_bytes) {
    double s = c->seq_len, h = c->d_model, a = c->n_head, t = tp;
    double sbh = s * b * h * dtype_bytes / 2.0;
    if (recompute == RECOMPUTE_FULL) return 2 * sbh / (sp ? t : 1);
    double replicated, split, attn;
    if (c->arch == ARCH_GPT2) {
        replicated = 10, split = 24;
        attn = flash ? 4 * a / h : 5 * a * s / h;
        if (!fused_norm) replicated += 2 * 8;
    } else {
        double r = (double)c->n_kv_head / c->n_head, f = (double)c->d_ff / h;
        replicated = 8, split = 4 + 4 * r + 6 * f;
        attn = flash ? 4 * a / h : 2 * a * s / h;
        if (!fused_norm) replicated += 2 * 8;
    }
    if (recompute == RECOMPUTE_SELECTIVE) attn = 0;
    return sbh * ((sp ? replicated / t : replicated) + split / t + attn / t);
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
    double t_compute = flops / (d->peak_flops * d->matmul_eff), t_memory = bytes / (d->hbm_bw * d->hbm_eff);
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

// Bandwidth a group of n ranks, spaced `stride` ranks apart, gets per rank. Inside a node:
// NVLink. Across nodes, ring collectives move the same bytes through every rank, so each
// node pushes them through its NICs; all groups of the node communicate at once (they are
// in lock-step), so a group with k members on a node gets k GPUs' share of the NICs.
static Link group_link(const DeviceProfile* d, int n, int stride, int gpus_per_node) {
    Link l;
    if ((long)n * stride <= gpus_per_node) { l.bw = d->intra_bw * d->link_eff; l.lat = d->intra_latency; return l; }
    int k = gpus_per_node / stride;
    if (k < 1) k = 1;
    double nic_share = (double)d->nics_per_node * d->nic_bw / gpus_per_node;  // per GPU
    l.bw = k * nic_share;
    if (l.bw > d->intra_bw) l.bw = d->intra_bw;
    l.bw *= d->link_eff;
    l.lat = d->inter_latency;
    return l;
}

// Times of one transformer layer for one micro-batch on one GPU.
typedef struct {
    double fwd, bwd;     // bwd without recomputation
    double attn_fwd;     // the core attention forward (what selective recompute redoes)
    double comm_fwd, comm_bwd;  // tensor-parallel part of fwd / bwd
} LayerTime;

static LayerTime layer_time(const ModelConfig* c, int b, int tp, int sp, const DeviceProfile* d, Link tp_link) {
    LayerTime lt;
    double s = c->seq_len, h = c->d_model, a = c->n_head, hd = h / a, t = tp, e = d->dtype_bytes;
    double kv = c->n_kv_head * hd, F = c->d_ff, n = b * s;
    double n_el = sp ? n / t : n;  // tokens of the ops outside the tensor-parallel regions
    int llama = c->arch == ARCH_LLAMA;
    // norms: fused = read + write once; unfused (eager framework) ~ 6 extra fp32 passes
    double norm = elementwise_time(d, n_el * h * (d->fused_norm ? 2 * e : 2 * e + 24));
    double resid = elementwise_time(d, 3 * n_el * h * e);
    double qkv = matmul_time(d, n, (h + 2 * kv) / t, h, 1);
    double rope = llama ? elementwise_time(d, 2 * n * (h + kv) / t * e) : 0;
    double attn, attn_bwd;
    if (d->flash_attn) {
        // QK^T and AV: 4 b s^2 h FLOPs, causal kernels skip half; the backward does 2.5x (5 matmuls vs 2)
        double flops = 4.0 * b * s * s * h / t * 0.5;
        attn = flops / (d->peak_flops * d->attn_eff_flash) + d->op_latency;
        attn_bwd = 2.5 * flops / (d->peak_flops * d->attn_eff_flash) + d->op_latency;
    } else {
        // two batched matmuls over the full T x T scores, softmax reads and writes them
        DeviceProfile dn = *d;
        dn.matmul_eff = d->attn_eff_naive;
        double bmm = matmul_time(&dn, s, s, hd, b * a / t), scores = b * a / t * s * s * e;
        attn = 2 * bmm + elementwise_time(d, 2 * scores);
        attn_bwd = 4 * bmm + elementwise_time(d, 3 * scores);
    }
    double proj = matmul_time(d, n, h, h / t, 1);
    double up = llama ? matmul_time(d, n, 2 * F / t, h, 1) : matmul_time(d, n, F / t, h, 1);
    double act = elementwise_time(d, (llama ? 3 : 2) * n * F / t * e);
    double down = matmul_time(d, n, h, F / t, 1);
    // Megatron: 2 all-reduces of the (s, b, h) activations forward and 2 backward; with SP
    // an all-gather + reduce-scatter pair instead of each, the same bytes (Korthikanti §4.2.2).
    // SP keeps only its 1/t slice of the qkv and fc1 inputs, so the backward all-gathers them
    // again for the weight gradients: 2 more all-gathers, counted as not overlapped.
    double x_bytes = n * h * e, ag = allgather_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    double one = sp ? 2 * ag : allreduce_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    lt.comm_fwd = 2 * one;
    lt.comm_bwd = 2 * one + (sp ? 2 * ag : 0);
    double mm = qkv + proj + up + down;
    lt.attn_fwd = attn;
    lt.fwd = 2 * norm + 2 * resid + rope + act + mm + attn + lt.comm_fwd;
    // backward: each matmul twice (input and weight gradients), elementwise ops ~2x bytes
    double elem = 2 * norm + 2 * resid + rope + act;
    lt.bwd = 2 * elem + 2 * mm + attn_bwd + lt.comm_bwd;
    return lt;
}

// ----------------------------------------------------------------------------
// One layout

typedef struct {
    const char* invalid;     // why this layout cannot run (points into why[]), NULL when it can
    char why[200];
    int dp, tp, pp, vpp, micro_batch, n_micro, recompute, sp, zero, schedule;
    int in_flight;           // peak (micro-batch, chunk) activations held, on the worst stage
    int worst_stage;         // stage with the most memory
    // memory per GPU on the worst stage, bytes
    double mem_weights, mem_grads, mem_optim, mem_act, mem_temp, mem_overhead, mem_total;
    int fits;
    // time, seconds
    double t_layer_fwd, t_layer_bwd;  // one layer, one micro-batch (bwd includes recompute)
    double t_tp_comm;        // tensor-parallel communication per step per GPU (inside the compute)
    double t_p2p;            // one pipeline message
    double t_pipeline;       // schedule_simulate() makespan of forward/backward
    double t_dp_comm;        // data-parallel communication per step (before overlap)
    double t_dp_exposed;     // the part of it not hidden
    double t_optim;          // optimizer step
    double t_step;
    double bubble;           // (makespan - busiest stage's compute) / that compute, from the simulation
    double bubble_formula;   // (p-1)/m or (p-1)/(v m), Narayanan et al. 2021
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

// Predict one layout. layout_cfg: a finalized model config whose dp, tp, pp, vpp, sp,
// zero, schedule, recompute and micro_batch fields give the layout; global_batch in
// sequences of layout_cfg->seq_len tokens. Returns 0, or -1 with out->invalid saying why
// the layout cannot run (memory is not a reason: see out->fits).
static int plan_predict(const ModelConfig* layout_cfg, int global_batch, int gpus_per_node, const DeviceProfile* dev, PlanResult* out) {
    const ModelConfig* c = layout_cfg;
    const DeviceProfile* d = dev;
    PlanResult* r = out;
    memset(r, 0, sizeof(*r));
    r->dp = c->dp, r->tp = c->tp, r->pp = c->pp, r->vpp = c->vpp, r->micro_batch = c->micro_batch;
    r->recompute = c->recompute, r->sp = c->sp, r->zero = c->zero, r->schedule = c->schedule;
    int dp = c->dp, tp = c->tp, pp = c->pp, vpp = c->vpp, mb = c->micro_batch, L = c->n_layer;
    if (dp < 1 || tp < 1 || pp < 1 || vpp < 1 || mb < 1) return plan_invalid(r, "dp, tp, pp, vpp and micro-batch must be >= 1");
    if (global_batch < 1 || global_batch % (dp * mb)) return plan_invalid(r, "global batch %d is not a multiple of dp*micro_batch = %d", global_batch, dp * mb);
    if (c->n_head % tp || c->n_kv_head % tp) return plan_invalid(r, "tp %d does not divide n_head %d and n_kv_head %d (no kv-head replication)", tp, c->n_head, c->n_kv_head);
    if (c->d_ff % tp || c->vocab_padded % tp) return plan_invalid(r, "tp %d does not divide d_ff %d and the padded vocabulary %d", tp, c->d_ff, c->vocab_padded);
    if (pp * vpp > L) return plan_invalid(r, "pp*vpp = %d exceeds n_layer %d", pp * vpp, L);
    if (c->sp && tp == 1) return plan_invalid(r, "sequence parallelism needs tp > 1");
    if (c->zero < 0 || c->zero > 3) return plan_invalid(r, "zero stage must be 0..3");
    if (c->recompute < RECOMPUTE_NONE || c->recompute > RECOMPUTE_FULL) return plan_invalid(r, "bad recompute mode");
    int m = global_batch / (dp * mb);
    r->n_micro = m;
    const char* why = schedule_check(c->schedule, pp, vpp, m);
    if (why) return plan_invalid(r, "%s", why);
    if (gpus_per_node < 1) gpus_per_node = dp * tp * pp;

    // links: tp ranks adjacent, then stages, then data-parallel replicas (layout.h)
    Link tp_link = group_link(d, tp, 1, gpus_per_node);
    Link pp_link = group_link(d, pp, tp, gpus_per_node);
    Link dp_link = group_link(d, dp, tp * pp, gpus_per_node);
    if (pp > 1 && tp * pp > gpus_per_node) {  // some stage boundary crosses nodes: a p2p uses one GPU's NIC share
        pp_link.bw = d->link_eff * d->nics_per_node * d->nic_bw / gpus_per_node;
        pp_link.lat = d->inter_latency;
    }

    LayerTime lt = layer_time(c, mb, tp, c->sp, d, tp_link);
    double recompute_extra = c->recompute == RECOMPUTE_FULL ? lt.fwd : c->recompute == RECOMPUTE_SELECTIVE ? lt.attn_fwd : 0;
    r->t_layer_fwd = lt.fwd, r->t_layer_bwd = lt.bwd + recompute_extra;

    // embedding (chunk 0) and head + loss (last chunk)
    double s = c->seq_len, h = c->d_model, n = (double)mb * s, e = d->dtype_bytes, V = c->vocab_padded, t = tp;
    double n_el = c->sp ? n / t : n, x_bytes = n * h * e;
    double emb_comm = c->sp ? allgather_time(tp, x_bytes, tp_link.bw, tp_link.lat) : allreduce_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    double emb_fwd = elementwise_time(d, 2 * n_el * h * e) + emb_comm;  // vocab-parallel lookup, then reduce over tp
    double emb_bwd = elementwise_time(d, 2 * n * h * e) + elementwise_time(d, 2 * n_el * h * e);
    double head_norm = elementwise_time(d, n_el * h * (d->fused_norm ? 2 * e : 2 * e + 24));
    double head_mm = matmul_time(d, n, V / t, h, 1);
    double loss = elementwise_time(d, n * V / t * (e + 4 * 2));  // read logits, fp32 max/sum-exp passes
    double head_comm = c->sp ? allgather_time(tp, x_bytes, tp_link.bw, tp_link.lat) : allreduce_time(tp, x_bytes, tp_link.bw, tp_link.lat);
    double head_fwd = head_norm + head_mm + loss + head_comm;
    double head_bwd = 2 * head_norm + 2 * head_mm + elementwise_time(d, n * V / t * (4 + e)) + head_comm;

    // per global chunk: layers, parameters, times
    int n_chunks = pp * vpp;
    double* t_fwd = (double*)xcalloc(n_chunks, sizeof(double));
    double* t_bwd = (double*)xcalloc(n_chunks, sizeof(double));
    double* params = (double*)xcalloc(n_chunks, sizeof(double));
    int* layers = (int*)xcalloc(n_chunks, sizeof(int));
    for (int g = 0; g < n_chunks; g++) {
        layers[g] = L / n_chunks + (g < L % n_chunks);  // params.h: the first chunks get the extra layers
        int first = g == 0, last = g == n_chunks - 1;
        params[g] = chunk_params(c, layers[g], first, last, tp);
        t_fwd[g] = layers[g] * lt.fwd + (first ? emb_fwd : 0) + (last ? head_fwd : 0);
        t_bwd[g] = layers[g] * r->t_layer_bwd + (first ? emb_bwd : 0) + (last ? head_bwd : 0);
    }
    r->t_tp_comm = (double)m * (L * (lt.comm_fwd + lt.comm_bwd + (c->recompute == RECOMPUTE_FULL ? lt.comm_fwd : 0)) + 2 * emb_comm + 2 * head_comm) / pp;

    // memory and data-parallel traffic, per stage
    double wb, gb, ob;
    state_bytes_per_param(d, c->zero, dp, &wb, &gb, &ob);
    double act_layer = act_bytes_per_layer(c, mb, tp, c->sp, c->recompute, d->flash_attn, d->fused_norm, d->dtype_bytes);
    double act_full_layer = act_bytes_per_layer(c, mb, tp, c->sp, RECOMPUTE_NONE, d->flash_attn, d->fused_norm, d->dtype_bytes);
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m, vpp));
    double* stage_fwd = (double*)xcalloc(pp, sizeof(double));
    double* stage_bwd = (double*)xcalloc(pp, sizeof(double));
    double* stage_params = (double*)xcalloc(pp, sizeof(double));
    for (int st = 0; st < pp; st++) {
        double p = 0, max_layers = 0;
        int has_head = 0;
        for (int ch = 0; ch < vpp; ch++) {
            int g = ch * pp + st;
            p += params[g];
            stage_fwd[st] += t_fwd[g], stage_bwd[st] += t_bwd[g];
            if (layers[g] > max_layers) max_layers = layers[g];
            if (g == n_chunks - 1) has_head = 1;
        }
        stage_params[st] = p;
        int in_flight = schedule_max_in_flight(ops, schedule_build(c->schedule, st, pp, vpp, m, ops));
        double act = in_flight * max_layers * act_layer;  // (the embedding output is the first norm's input, counted there)
        double temp = 0;
        if (has_head) temp += n * V / t * (e + 4) + n_el * h * e;        // logits + fp32 softmax/grad, final norm input
        if (c->recompute == RECOMPUTE_FULL) temp += act_full_layer;      // the layer being recomputed
        if (c->zero == 3) temp += 2 * chunk_params(c, 1, 0, 0, tp) * d->dtype_bytes;  // two gathered layers (current + prefetch)
        double total = p * (wb + gb + ob) + act + temp + d->mem_overhead;
        if (total > r->mem_total) {
            r->mem_total = total, r->worst_stage = st, r->in_flight = in_flight;
            r->mem_weights = p * wb, r->mem_grads = p * gb, r->mem_optim = p * ob;
            r->mem_act = act, r->mem_temp = temp, r->mem_overhead = d->mem_overhead;
        }
    }
    r->fits = r->mem_total <= d->mem_bytes;

    // Data parallelism. ZeRO-0: all-reduce the gradients once per step; ZeRO-1: reduce-scatter
    // them and all-gather the updated weights; ZeRO-2: reduce-scatter after every micro-batch
    // (gradients are kept sharded); ZeRO-3: also all-gather the weights before each micro-batch's
    // forward and backward. Once-per-step traffic hides under dp_overlap of one micro-batch's
    // backward (gradients) / forward (weights); per-micro-batch traffic likewise, and what is not
    // hidden stretches that micro-batch's compute (so the pipeline simulation sees it).
    double exposed_step = 0, dp_comm = 0;
    for (int st = 0; st < pp; st++) {
        double G = stage_params[st] * d->grad_bytes, W = stage_params[st] * d->dtype_bytes;
        double buckets = 2;  // one bucket per layer, plus the embedding / head
        for (int ch = 0; ch < vpp; ch++) buckets += layers[ch * pp + st];
        double lat = dp_link.lat * buckets;
        double rs = allgather_time(dp, G, dp_link.bw, lat), ag = allgather_time(dp, W, dp_link.bw, lat);
        double win_b = d->dp_overlap * stage_bwd[st], win_f = d->dp_overlap * stage_fwd[st];
        double once_b = 0, once_f = 0, per_mb_f = 0, per_mb_b = 0;
        if (c->zero == 0) once_b = allreduce_time(dp, G, dp_link.bw, lat);
        else if (c->zero == 1) once_b = rs, once_f = ag;
        else if (c->zero == 2) once_f = ag, per_mb_b = rs;
        else per_mb_f = ag, per_mb_b = ag + rs;
        double comm = once_b + once_f + m * (per_mb_f + per_mb_b);
        if (comm > dp_comm) dp_comm = comm;
        double exposed = comm_exposed(once_b, win_b, d->comm_interference) + comm_exposed(once_f, win_f, d->comm_interference);
        if (exposed > exposed_step) exposed_step = exposed;
        // stretch this stage's chunks by the exposed per-micro-batch part, pro rata
        double sf = comm_exposed(per_mb_f, win_f, d->comm_interference), sb = comm_exposed(per_mb_b, win_b, d->comm_interference);
        for (int ch = 0; ch < vpp && (sf > 0 || sb > 0); ch++) {
            int g = ch * pp + st;
            t_fwd[g] += sf * t_fwd[g] / stage_fwd[st];
            t_bwd[g] += sb * t_bwd[g] / stage_bwd[st];
        }
    }
    r->t_dp_comm = dp_comm, r->t_dp_exposed = exposed_step;

    // pipeline: play the real schedule
    r->t_p2p = pp > 1 ? (c->sp || tp > 1 ? x_bytes / t : x_bytes) / pp_link.bw + pp_link.lat : 0;  // scatter-gather: each tp rank sends 1/t
    double* busy = (double*)xcalloc(pp, sizeof(double));
    r->t_pipeline = schedule_simulate(c->schedule, pp, vpp, m, t_fwd, t_bwd, r->t_p2p, busy);
    double max_busy = 0, sum_busy = 0;
    for (int st = 0; st < pp; st++) sum_busy += busy[st], max_busy = busy[st] > max_busy ? busy[st] : max_busy;
    if (d->shared_cores > 0) {
        // Ranks time-sharing K cores: a rank idle in the bubble gives its core to the others,
        // so the step is the longer of the schedule's critical path and the total work of all
        // ranks spread over the K cores (each rank uses max(1, K/world) of them while busy).
        double world = (double)dp * tp * pp, K = d->shared_cores, threads = K / world > 1 ? K / world : 1;
        double spread = dp * tp * sum_busy * threads / K;
        if (spread > r->t_pipeline) r->t_pipeline = spread;
    }
    r->bubble = max_busy > 0 ? (r->t_pipeline - max_busy) / max_busy : 0;
    r->bubble_formula = bubble_formula(c->schedule, pp, vpp, m);

    // optimizer: AdamW over the local shard, bandwidth-bound: read master, m, v, grad;
    // write master, m, v, weight (+ one read of the gradients for the norm)
    double opt_params = 0;
    for (int st = 0; st < pp; st++) if (stage_params[st] > opt_params) opt_params = stage_params[st];
    if (c->zero >= 1) opt_params /= dp;
    double master = d->dtype_bytes < 4 ? 4 : 0;
    double opt_bytes = opt_params * ((master + 8 + 2.0 * d->grad_bytes) + (master + 8 + d->dtype_bytes));
    r->t_optim = elementwise_time(d, opt_bytes) + 10 * d->op_latency;

    r->t_step = r->t_pipeline + r->t_dp_exposed + r->t_optim;
    double gpus = (double)dp * tp * pp, tokens = (double)global_batch * s;
    r->tokens_per_s_per_gpu = tokens / r->t_step / gpus;
    double flops_token = config_flops_per_token(c, c->seq_len);
    // HFU adds the recomputed forward FLOPs: full = a layer's forward (2 x its matmul params + 4 h T
    // for attention, per token); selective = the attention part only
    double layer_mm = (config_matmul_params(c) - (double)c->vocab * h) / L;
    double hw_token = flops_token + (c->recompute == RECOMPUTE_FULL ? L * (2 * layer_mm + 4 * h * s) : c->recompute == RECOMPUTE_SELECTIVE ? L * 4 * h * s : 0);
    r->model_tflops_per_gpu = flops_token * r->tokens_per_s_per_gpu / 1e12;
    r->mfu = flops_token * r->tokens_per_s_per_gpu / d->peak_flops;
    r->hfu = hw_token * r->tokens_per_s_per_gpu / d->peak_flops;
    free(t_fwd); free(t_bwd); free(params); free(layers); free(ops);
    free(stage_fwd); free(stage_bwd); free(stage_params); free(busy);
    return 0;
}

// ----------------------------------------------------------------------------
// Enumeration

typedef struct {
    int tp, pp, dp, vpp, micro_batch, recompute, sp, zero, schedule;  // -1: any
} PlanFilter;

static int filter_ok(int want, int v) { return want < 0 || want == v; }

// Every valid layout of c on `gpus` GPUs that passes the filter, predicted; returns the
// count, *out a malloc'ed array the caller frees.
static int plan_enumerate(const ModelConfig* c, int gpus, int global_batch, int gpus_per_node, const DeviceProfile* d,
                          const PlanFilter* f, PlanResult** out) {
    int cap = 1024, n = 0;
    PlanResult* res = (PlanResult*)xmalloc(sizeof(PlanResult) * cap);
    for (int tp = 1; tp <= gpus; tp++) {
        if (gpus % tp || !filter_ok(f->tp, tp)) continue;
        if (f->tp < 0 && tp > gpus_per_node) continue;  // tensor parallelism stays inside a node unless asked for
        for (int pp = 1; pp <= gpus / tp; pp++) {
            if ((gpus / tp) % pp || !filter_ok(f->pp, pp) || pp > c->n_layer) continue;
            int dp = gpus / (tp * pp);
            if (!filter_ok(f->dp, dp) || global_batch % dp) continue;
            for (int mb = 1; mb <= global_batch / dp; mb *= 2) {
                if ((global_batch / dp) % mb || !filter_ok(f->micro_batch, mb)) continue;
                for (int vpp = 1; vpp * pp <= c->n_layer; vpp++) {
                    if (!filter_ok(f->vpp, vpp) || (vpp > 1 && (pp == 1 || c->n_layer % (pp * vpp)))) continue;
                    int sched = vpp > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
                    if (!filter_ok(f->schedule, sched)) continue;
                    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++)
                        for (int sp = 0; sp <= (tp > 1); sp++)
                            for (int zero = 0; zero <= 3; zero++) {
                                if (!filter_ok(f->recompute, rc) || !filter_ok(f->sp, sp) || !filter_ok(f->zero, zero)) continue;
                                if (zero > 0 && dp == 1) continue;  // nothing to shard
                                ModelConfig lc = *c;
                                lc.dp = dp, lc.tp = tp, lc.pp = pp, lc.vpp = vpp, lc.micro_batch = mb;
                                lc.recompute = rc, lc.sp = sp, lc.zero = zero, lc.schedule = sched;
                                if (n == cap) { cap *= 2; res = (PlanResult*)realloc(res, sizeof(PlanResult) * cap); if (!res) fail("out of memory"); }
                                if (plan_predict(&lc, global_batch, gpus_per_node, d, &res[n]) == 0) n++;
                            }
                }
            }
        }
    }
    *out = res;
    return n;
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
            filter_ok(f->zero, p->zero) && filter_ok(f->schedule, p->schedule)) return i;
    }
    return -1;
}

static PlanFilter plan_filter_any(void) { PlanFilter f = {-1, -1, -1, -1, -1, -1, -1, -1, -1}; return f; }

// ----------------------------------------------------------------------------
// Output

static void plan_print_table(const PlanResult* r, int n, int top) {
    printf("%4s %4s %3s %3s %3s %3s %-9s %2s %4s %7s %4s %8s %10s %6s %7s %7s\n", "rank", "dp", "tp", "pp", "vpp", "mb",
           "recompute", "sp", "zero", "mem GiB", "fits", "step s", "tok/s/GPU", "MFU%", "bubble%", "formula");
    for (int i = 0; i < n && i < top; i++) {
        const PlanResult* p = &r[i];
        printf("%4d %4d %3d %3d %3d %3d %-9s %2d %4d %7.1f %4s %8.3f %10.0f %6.1f %7.2f %7.2f\n", i + 1, p->dp, p->tp, p->pp, p->vpp,
               p->micro_batch, recompute_name(p->recompute), p->sp, p->zero, p->mem_total / GiB, p->fits ? "yes" : "no", p->t_step,
               p->tokens_per_s_per_gpu, 100 * p->mfu, 100 * p->bubble, 100 * p->bubble_formula);
    }
}

static void plan_write_csv(const char* path, const PlanResult* r, int n) {
    FILE* f = fopen(path, "w");
    if (!f) fail("--plan-csv: cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "dp,tp,pp,vpp,micro_batch,n_micro,schedule,recompute,sp,zero,in_flight,worst_stage,mem_weights_gib,mem_grads_gib,"
               "mem_optim_gib,mem_act_gib,mem_temp_gib,mem_overhead_gib,mem_total_gib,fits,t_layer_fwd_s,t_layer_bwd_s,t_tp_comm_s,"
               "t_p2p_s,t_pipeline_s,t_dp_comm_s,t_dp_exposed_s,t_optim_s,t_step_s,bubble,bubble_formula,tokens_per_s_per_gpu,"
               "model_tflops_per_gpu,mfu,hfu\n");
    for (int i = 0; i < n; i++) {
        const PlanResult* p = &r[i];
        fprintf(f, "%d,%d,%d,%d,%d,%d,%s,%s,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,"
                   "%.5f,%.5f,%.2f,%.3f,%.5f,%.5f\n",
                p->dp, p->tp, p->pp, p->vpp, p->micro_batch, p->n_micro, schedule_name(p->schedule), recompute_name(p->recompute), p->sp,
                p->zero, p->in_flight, p->worst_stage, p->mem_weights / GiB, p->mem_grads / GiB, p->mem_optim / GiB, p->mem_act / GiB,
                p->mem_temp / GiB, p->mem_overhead / GiB, p->mem_total / GiB, p->fits, p->t_layer_fwd, p->t_layer_bwd, p->t_tp_comm,
                p->t_p2p, p->t_pipeline, p->t_dp_comm, p->t_dp_exposed, p->t_optim, p->t_step, p->bubble, p->bubble_formula,
                p->tokens_per_s_per_gpu, p->model_tflops_per_gpu, p->mfu, p->hfu);
    }
    fclose(f);
}

static void plan_print_profile(const DeviceProfile* d, int gpus_per_node) {
    printf("device %s: %.4g TFLOP/s peak, matmul eff %.2f (+%.0f us), attention eff %.2f (%s), %.0f GiB (%.1f reserved), "
           "HBM %.0f GB/s x %.2f\n", d->name, d->peak_flops / 1e12, d->matmul_eff, d->matmul_latency * 1e6,
           d->flash_attn ? d->attn_eff_flash : d->attn_eff_naive, d->flash_attn ? "flash" : "unfused", d->mem_bytes / GiB,
           d->mem_overhead / GiB, d->hbm_bw / 1e9, d->hbm_eff);
    printf("links: %d GPUs/node, intra %.0f GB/s/GPU, %d NICs x %.1f GB/s per node, link eff %.2f, DP overlap %.2f; "
           "%s weights, %d-byte grads, %s norm\n", gpus_per_node, d->intra_bw / 1e9, d->nics_per_node, d->nic_bw / 1e9,
           d->link_eff, d->dp_overlap, d->dtype_bytes == 2 ? "bf16" : "fp32", d->grad_bytes, d->fused_norm ? "fused" : "unfused");
}

// ----------------------------------------------------------------------------
// Command line: ./train --plan [flags]

static void plan_usage(void) {
    printf("usage: train --plan [flags]\n"
           "  --model NAME            preset (default llama-13b); shape: --n-layer --n-head --n-kv-head --d-model --d-ff --vocab --seq-len\n"
           "  --gpus N                GPUs in all (default 8)       --gpus-per-node N (default: the device's)\n"
           "  --device NAME           %s (default a100-80gb)\n"
           "  --device-file FILE      'key = value' profile (optional first key 'base = NAME')\n"
           "  --device-set KEY=VALUE  override one profile key (repeatable); --peak-tflops X\n"
           "  --global-batch-tokens N or --global-batch N (sequences; default 4194304 tokens)\n"
           "  --flash-attn 0|1 --fused-norm 0|1   kernels (default: the device's)\n"
           "  --tp --pp --dp --vpp --micro-batch N, --recompute none|selective|full, --sp 0|1, --zero 0..3,\n"
           "  --schedule 1f1b|interleaved   evaluate only these layouts\n"
           "  --top N                 rows to print (default 20)    --plan-csv FILE  all layouts, every column\n", PROFILE_NAMES);
}

static int plan_int(const char* v, const char* flag) {
    long x = parse_long(v, flag);
    if (x < 0 || x > (1L << 30)) fail("%s: %ld is out of range (0 .. 2^30)", flag, x);
    return (int)x;
}

static int plan_main(int argc, char** argv) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    apply_preset(&c, find_preset("llama-13b"));
    int gpus = 8, gpus_per_node = -1, top = 20, flash = -1, fused = -1;
    long global_batch = 0, global_tokens = 0;
    double peak_tflops = 0;
    const char *device = "a100-80gb", *device_file = NULL, *csv = NULL;
    const char* sets[64];
    int n_sets = 0;
    int shape[7] = {-1, -1, -1, -1, -1, -1, -1};  // n_layer n_head n_kv_head d_model d_ff vocab seq_len; -1 = preset
    PlanFilter f = plan_filter_any();
    const char* model = "llama-13b";
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--plan")) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { plan_usage(); return 0; }
        if (strncmp(a, "--", 2)) fail("--plan: unexpected argument '%s' (flags start with --; see --plan --help)", a);
        if (i + 1 >= argc) fail("--plan: flag %s needs a value", a);
        const char* v = argv[++i];
        if (!strcmp(a, "--model")) { if (!find_preset(v)) fail("--model: unknown preset '%s'", v); model = v; apply_preset(&c, find_preset(v)); }
        else if (!strcmp(a, "--n-layer")) shape[0] = plan_int(v, a);
        else if (!strcmp(a, "--n-head")) shape[1] = plan_int(v, a);
        else if (!strcmp(a, "--n-kv-head")) shape[2] = plan_int(v, a);
        else if (!strcmp(a, "--d-model")) shape[3] = plan_int(v, a);
        else if (!strcmp(a, "--d-ff")) shape[4] = plan_int(v, a);
        else if (!strcmp(a, "--vocab")) shape[5] = plan_int(v, a);
        else if (!strcmp(a, "--seq-len")) shape[6] = plan_int(v, a);
        else if (!strcmp(a, "--gpus")) gpus = plan_int(v, a);
        else if (!strcmp(a, "--gpus-per-node")) gpus_per_node = plan_int(v, a);
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--device-file")) device_file = v;
        else if (!strcmp(a, "--device-set")) { if (n_sets == 64) fail("--device-set: at most 64"); sets[n_sets++] = v; }
        else if (!strcmp(a, "--peak-tflops")) peak_tflops = parse_double(v, a);
        else if (!strcmp(a, "--global-batch-tokens")) global_tokens = parse_long(v, a);
        else if (!strcmp(a, "--global-batch")) global_batch = parse_long(v, a);
        else if (!strcmp(a, "--flash-attn")) flash = plan_int(v, a);
        else if (!strcmp(a, "--fused-norm")) fused = plan_int(v, a);
        else if (!strcmp(a, "--top")) top = plan_int(v, a);
        else if (!strcmp(a, "--plan-csv")) csv = v;
        else if (!strcmp(a, "--tp")) f.tp = plan_int(v, a);
        else if (!strcmp(a, "--pp")) f.pp = plan_int(v, a);
        else if (!strcmp(a, "--dp")) f.dp = plan_int(v, a);
        else if (!strcmp(a, "--vpp")) f.vpp = plan_int(v, a);
        else if (!strcmp(a, "--micro-batch")) f.micro_batch = plan_int(v, a);
        else if (!strcmp(a, "--sp")) f.sp = plan_int(v, a);
        else if (!strcmp(a, "--zero")) f.zero = plan_int(v, a);
        else if (!strcmp(a, "--recompute")) {
            if (!strcmp(v, "none")) f.recompute = RECOMPUTE_NONE;
            else if (!strcmp(v, "selective")) f.recompute = RECOMPUTE_SELECTIVE;
            else if (!strcmp(v, "full")) f.recompute = RECOMPUTE_FULL;
            else fail("--recompute: expected none, selective or full, got '%s'", v);
        } else if (!strcmp(a, "--schedule")) {
            if (!strcmp(v, "1f1b")) f.schedule = SCHED_1F1B;
            else if (!strcmp(v, "interleaved")) f.schedule = SCHED_INTERLEAVED;
            else fail("--schedule: expected 1f1b or interleaved, got '%s'", v);
        } else fail("--plan: unknown flag '%s' (see --plan --help)", a);
    }
    // validate
    const char* shape_names[7] = {"--n-layer", "--n-head", "--n-kv-head", "--d-model", "--d-ff", "--vocab", "--seq-len"};
    int* shape_dst[7] = {&c.n_layer, &c.n_head, &c.n_kv_head, &c.d_model, &c.d_ff, &c.vocab, &c.seq_len};
    for (int k = 0; k < 7; k++) {
        if (shape[k] == -1) continue;
        if (shape[k] < 1 || shape[k] > (1 << 24)) fail("%s must be between 1 and %d, got %d", shape_names[k], 1 << 24, shape[k]);
        *shape_dst[k] = shape[k];
    }
    if (shape[1] > 0 && shape[2] < 0) c.n_kv_head = c.n_head;  // --n-head alone: plain multi-head attention
    if (shape[3] > 0 && shape[4] < 0) c.d_ff = 0;             // --d-model alone: the architecture's default d_ff
    config_finalize(&c);
    if (c.d_model % c.n_head) fail("--d-model %d must be a multiple of --n-head %d", c.d_model, c.n_head);
    if (c.n_head % c.n_kv_head) fail("--n-head %d must be a multiple of --n-kv-head %d", c.n_head, c.n_kv_head);
    if (gpus < 1) fail("--gpus must be >= 1, got %d", gpus);
    if (top < 1) fail("--top must be >= 1, got %d", top);
    if (flash != -1 && flash != 0 && flash != 1) fail("--flash-attn: expected 0 or 1, got %d", flash);
    if (fused != -1 && fused != 0 && fused != 1) fail("--fused-norm: expected 0 or 1, got %d", fused);
    if (f.sp != -1 && f.sp != 0 && f.sp != 1) fail("--sp: expected 0 or 1, got %d", f.sp);
    if (f.zero != -1 && (f.zero < 0 || f.zero > 3)) fail("--zero: expected 0..3, got %d", f.zero);
    if ((f.tp != -1 && f.tp < 1) || (f.pp != -1 && f.pp < 1) || (f.dp != -1 && f.dp < 1) || (f.vpp != -1 && f.vpp < 1) ||
        (f.micro_batch != -1 && f.micro_batch < 1)) fail("--tp, --pp, --dp, --vpp and --micro-batch must be >= 1");

    DeviceProfile d;
    char err[512];
    if (device_file) { if (profile_parse_file(device_file, &d, err, sizeof(err))) fail("--device-file: %s", err); }
    else if (profile_builtin(device, &d)) fail("--device: unknown device '%s' (known: %s)", device, PROFILE_NAMES);
    for (int k = 0; k < n_sets; k++) {
        char key[64];
        const char* eq = strchr(sets[k], '=');
        if (!eq || eq == sets[k] || (size_t)(eq - sets[k]) >= sizeof(key)) fail("--device-set: expected KEY=VALUE, got '%s'", sets[k]);
        memcpy(key, sets[k], eq - sets[k]);
        key[eq - sets[k]] = 0;
        if (profile_set(&d, key, eq + 1, err, sizeof(err))) fail("--device-set: %s", err);
    }
    if (peak_tflops != 0) {
        if (!(peak_tflops > 0)) fail("--peak-tflops must be positive, got %g", peak_tflops);
        d.peak_flops = peak_tflops * 1e12;
    }
    if (flash >= 0) d.flash_attn = flash;
    if (fused >= 0) d.fused_norm = fused;
    if (gpus_per_node == -1) gpus_per_node = d.gpus_per_node > 0 ? d.gpus_per_node : gpus;
    if (gpus_per_node < 1) fail("--gpus-per-node must be >= 1, got %d", gpus_per_node);

    if (global_batch && global_tokens) fail("give --global-batch or --global-batch-tokens, not both");
    if (global_batch < 0 || global_tokens < 0) fail("the global batch must be positive");
    if (!global_batch) {
        if (!global_tokens) global_tokens = 4194304;
        if (global_tokens % c.seq_len) fail("--global-batch-tokens %ld is not a multiple of the sequence length %d", global_tokens, c.seq_len);
        global_batch = global_tokens / c.seq_len;
    }
    if (global_batch > (1L << 30)) fail("the global batch is too large");

    char b1[32], b2[32];
    printf("plan: %s (%s, L=%d h=%d heads=%d/%d d_ff=%d vocab=%d), seq %d, %s params, %.4g GFLOP/token (PaLM)\n", model,
           arch_name(c.arch), c.n_layer, c.d_model, c.n_head, c.n_kv_head, c.d_ff, c.vocab, c.seq_len,
           fmt_count(config_num_params(&c), b1), config_flops_per_token(&c, c.seq_len) / 1e9);
    printf("%d GPUs, global batch %ld sequences = %s tokens\n", gpus, global_batch, fmt_count((double)global_batch * c.seq_len, b2));
    plan_print_profile(&d, gpus_per_node);

    PlanResult* res;
    int n = plan_enumerate(&c, gpus, (int)global_batch, gpus_per_node, &d, &f, &res);
    if (n == 0) fail("no valid layout: check --gpus, the global batch and the restrictions (tp must divide the heads, dp*mb the batch)");
    plan_sort(res, n);
    int n_fit = 0;
    for (int i = 0; i < n; i++) n_fit += res[i].fits;
    printf("%d layouts evaluated, %d fit in memory%s\n\n", n, n_fit, n_fit ? "" : " (showing the non-fitting ones)");
    plan_print_table(res, n_fit ? n_fit : n, top);
    if (n_fit < n) printf("(%d layouts that do not fit are not shown%s)\n", n - n_fit, csv ? "; they are in the CSV" : "; see --plan-csv");
    PlanFilter any = plan_filter_any();
    int best = plan_best(res, n, &any);
    if (best >= 0) {
        const PlanResult* p = &res[best];
        // as ./train flags (ZeRO-3 is modelled here but the trainer implements stages 0-2)
        printf("best: --dp %d --tp %d --pp %d --vpp %d --micro-batch %d --recompute %s%s --zero %d --schedule %s"
               "  (%.1f%% MFU, %.1f%% HFU, %.4g TFLOP/s/GPU, %.1f GiB)%s\n", p->dp, p->tp, p->pp, p->vpp, p->micro_batch,
               recompute_name(p->recompute), p->sp ? " --sp" : "", p->zero, schedule_name(p->schedule), 100 * p->mfu,
               100 * p->hfu, p->model_tflops_per_gpu, p->mem_total / GiB, p->zero == 3 ? " [ZeRO-3: planner only]" : "");
    }
    if (csv) { plan_write_csv(csv, res, n); printf("wrote %d layouts to %s\n", n, csv); }
    free(res);
    return 0;
}

#endif
