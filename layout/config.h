// config.h: model presets, training/parallel flags, and the formulas derived from
// them (parameter count, FLOPs per token). Shared by both builds, the tests and the
// planner, so every part of the program agrees on what a model is.
#ifndef CONFIG_H
#define CONFIG_H

#include "base/common.h"

enum { ARCH_GPT2 = 0, ARCH_LLAMA = 1 };
enum {
    SCHED_GPIPE = 0,
    SCHED_1F1B = 1,
    SCHED_INTERLEAVED = 2,
    SCHED_ZBH1 = 3,
    SCHED_ZBV = 4,
    SCHED_DUALPIPEV = 5,
    N_SCHEDULES
};
enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1, RECOMPUTE_FULL = 2 };
// The MLP's kind, apart from the attention's (the planner's frameworks: a LLaMA-style attention with a non-gated
// MLP, as Nemotron's squared ReLU): MLP_ARCH the architecture's own (GPT-2 GELU, LLaMA SwiGLU: the trainer runs
// only these); GELU and squared ReLU are two linears of d_ff around one elementwise op, SwiGLU three (gate, up, down)
enum { MLP_ARCH = 0, MLP_GELU = 1, MLP_RELU2 = 2, MLP_SWIGLU = 3, N_MLP };
enum { CP_RING = 0, CP_ULYSSES = 1, CP_2D = 2 };
enum { CP_SPLIT_ZIGZAG = 0, CP_SPLIT_CONTIGUOUS = 1, CP_SPLIT_DOC = 2 };  // --cp-split
// --offload none|optimizer|activations|both parses to 0..3: a bit per kind (backend/cpu/offload.h)
enum { OFFLOAD_OPTIMIZER = 1, OFFLOAD_ACTIVATIONS = 2 };
enum { DOC_MASK_AUTO = 0, DOC_MASK_ON = 1, DOC_MASK_OFF = 2 };

typedef struct {
    // model shape
    int arch;
    float rope_theta;    // RoPE's base (llama): 10000 (RoFormer, LLaMA 1 and 2), 500000 (Llama 3)
    int n_layer, n_head, n_kv_head, d_model, d_ff;
    int seq_len;         // T: context length (positions)
    int vocab;           // real vocabulary size
    int mlp;             // MLP_*: MLP_ARCH (0) but in the planner's --mlp / a --runs row's mlp column
    int vocab_padded;    // padded to a multiple of 128 (llm.c), so it also splits over tp
    // training
    int steps, warmup, micro_batch, global_batch;  // batches in sequences
    float lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
    uint64_t seed;
    // parallel layout
    int dp, tp, pp, vpp, sp, zero, schedule, recompute;
    // context parallelism: cp ranks per sequence, the Ulysses degree U among them (ring R = cp / U)
    int cp, cp_ulysses;
    // 1: each ring rank holds one contiguous piece of the sequence (unbalanced; to measure), 0: zig-zag
    int cp_contiguous;
    // 1 (--cp-split doc): each document zig-zagged over the ring ranks (context_parallel.h cp_doc_order)
    int cp_doc;
    // --offload: OFFLOAD_OPTIMIZER and / or OFFLOAD_ACTIVATIONS, 0 none; --offload-frames (0: the default 2)
    int offload, offload_frames;
    // --weight-pass deferred (always with zb-*): a chunk's weight gradients after all its input gradients
    int weight_pass_deferred;
    // --pp-split: 0 even (layers by count), 1 auto (stages cut by cost: layout/params.h chunk_cut)
    int pp_split;
    // --pp-split auto's costs, from the planner's time and memory model (layout/params.h StageModel;
    // NULL: PaLM FLOPs, no memory limit)
    const struct StageModel* stage_model;
} ModelConfig;

// One block of causal attention: the query rows of one sequence segment against the key
// rows of another (context parallelism's ring, layer_parallel/context_parallel.h; the whole
// sequence is one block). Buffers hold B sequences of Ts rows each; a key attends a query
// iff its position is <= the query's and >= doc[query] (document masking, data/data.h
// doc_starts: the position where the query's document starts; doc NULL: one document).
typedef struct {
    int B, Ts;             // sequences, rows per sequence in q and kv
    int Ha, KVa, hd;       // query and kv heads of this attention, head size
    int q_ld, kv_ld;       // row strides (elements) of q (query heads from column 0) and kv (k heads, then v heads)
    int q_row, nq, q_pos;  // query rows [q_row, q_row + nq) of each sequence, the first at position q_pos
    int k_row, nk, k_pos;  // key rows likewise
    int init;              // 1: the first block of these query rows (the running output starts here)
    const int* doc;        // doc[b * doc_ld + p]: where the document of sequence b's position p starts, or NULL
    int doc_ld;            // (the build's copy: host on the CPU, device on the GPU)
    // --cp-split doc: the positions of sequence b's query rows at q_at[b * at_ld + t] and of its
    // key rows at k_at[b * at_ld + t], each increasing (NULL: q_pos + t, k_pos + t)
    const int *q_at, *k_at;
    int at_ld;
} AttnBlock;

typedef struct {
    const char* name;
    int arch, n_layer, n_head, n_kv_head, d_model, d_ff, seq_len, vocab;
    const char* note;
    float rope_theta;  // RoPE's base (llama; RoFormer's 10000, Llama 3's 500000: its params.json rope_theta)
} Preset;

// Byte-level vocabulary: 256 bytes plus <|endoftext|> (id 256) = 257, padded to 384.
#define BYTE_VOCAB 257
#define EOT_TOKEN 256

// d_ff = 0 means the architecture's default: 4*d for GPT-2; for LLaMA the SwiGLU
// hidden size 2/3*4d rounded up to a multiple of 256 (Touvron et al. 2023).
static const Preset PRESETS[] = {
    {"tiny",        ARCH_GPT2,  4,  4,  4,   64,     0,   32, BYTE_VOCAB, "tests", 10000},
    {"small",       ARCH_GPT2,  4,  4,  4,  128,     0,  128, BYTE_VOCAB, "default: learns in minutes on 2 cores",
     10000},
    {"gpt2-124m",   ARCH_GPT2, 12, 12, 12,  768,     0, 1024, 50257, "GPT-2 small", 10000},
    {"gpt2-350m",   ARCH_GPT2, 24, 16, 16, 1024,     0, 1024, 50257, "GPT-2 medium", 10000},
    {"gpt2-774m",   ARCH_GPT2, 36, 20, 20, 1280,     0, 1024, 50257, "GPT-2 large", 10000},
    {"gpt2-1558m",  ARCH_GPT2, 48, 25, 25, 1600,     0, 1024, 50257, "GPT-2 XL", 10000},
    {"llama-tiny",  ARCH_LLAMA, 4,  4,  2,   64,   192,   32, BYTE_VOCAB, "tests (GQA 4q/2kv)", 10000},
    {"llama-small", ARCH_LLAMA, 4,  4,  2,  128,   384,  128, BYTE_VOCAB, "default LLaMA", 10000},
    {"llama-7b",    ARCH_LLAMA, 32, 32, 32, 4096, 11008, 2048, 32000, "LLaMA 7B", 10000},
    {"llama-13b",   ARCH_LLAMA, 40, 40, 40, 5120, 13824, 2048, 32000, "LLaMA 13B", 10000},
    {"llama-30b",   ARCH_LLAMA, 60, 52, 52, 6656, 17920, 2048, 32000, "LLaMA 30B", 10000},
    {"llama-65b",   ARCH_LLAMA, 80, 64, 64, 8192, 22016, 2048, 32000, "LLaMA 65B", 10000},
    {"llama2-70b",  ARCH_LLAMA, 80, 64,  8, 8192, 28672, 4096, 32000, "Llama 2 70B (GQA)", 10000},
    {"llama3-8b",   ARCH_LLAMA, 32, 32,  8, 4096, 14336, 8192, 128256, "Llama 3 8B (GQA)", 500000},
};
#define N_PRESETS ((int)(sizeof(PRESETS) / sizeof(PRESETS[0])))

static const Preset* find_preset(const char* name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (!strcmp(PRESETS[i].name, name)) return &PRESETS[i];
    return NULL;
}
// The preset a flag names; none: one error line that lists them
static const Preset* find_preset_or_fail(const char* flag, const char* name) {
    const Preset* p = find_preset(name);
    char presets[512] = "";
    for (int i = 0; !p && i < N_PRESETS; i++)
        snprintf(presets + strlen(presets), sizeof(presets) - strlen(presets), "%s%s", i ? ", " : "", PRESETS[i].name);
    if (!p) fail("%s: unknown preset '%s'; the presets: %s", flag, name, presets);
    return p;
}

static void apply_preset(ModelConfig* c, const Preset* p) {
    c->arch = p->arch;
    c->n_layer = p->n_layer; c->n_head = p->n_head; c->n_kv_head = p->n_kv_head;
    c->d_model = p->d_model; c->d_ff = p->d_ff; c->seq_len = p->seq_len; c->vocab = p->vocab;
    c->rope_theta = p->rope_theta;
}

// Fill in derived sizes after presets and shape flags are applied.
static void config_finalize(ModelConfig* c) {
    if (c->n_kv_head <= 0) c->n_kv_head = c->n_head;
    if (c->d_ff <= 0) {
        if (c->arch == ARCH_GPT2) c->d_ff = 4 * c->d_model;
        else c->d_ff = (int)round_up((size_t)(2 * 4 * c->d_model / 3), 256);
    }
    c->vocab_padded = (int)round_up((size_t)c->vocab, 128);
}

// 1: the MLP is gated (SwiGLU: three d x d_ff matrices), 0: two (GELU, squared ReLU).
static int config_mlp_gated(const ModelConfig* c) {
    return c->mlp == MLP_ARCH ? c->arch == ARCH_LLAMA : c->mlp == MLP_SWIGLU;
}

// Parameter count of the full (unsharded) model, counting the tied embedding once
// and excluding the vocabulary padding rows (they are never trained to anything).
static double config_num_params(const ModelConfig* c) {
    double C = c->d_model, L = c->n_layer, F = c->d_ff, V = c->vocab, T = c->seq_len;
    double hd = (double)c->d_model / c->n_head, kv = c->n_kv_head * hd;
    double up = config_mlp_gated(c) ? 2 : 1;  // the matrices (and GPT-2's biases) before the activation
    if (c->arch == ARCH_GPT2) {
        double per_layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + up * (C * F + F) + (F * C + C);
        return V * C + T * C + L * per_layer + 2 * C;
    }
    // LLaMA: no biases, RMSNorm weights only, q/o are C x C, k/v are C x kv, SwiGLU has 3 matrices, untied head.
    double per_layer = C + (C * C + 2 * C * kv + C * C) + C + (up + 1) * C * F;
    return 2 * V * C + L * per_layer + C;
}

// Parameters that take part in the matmuls (what "N" in 6N means in the PaLM formula):
// everything but the position embedding and the norms. For tied GPT-2 the token
// embedding counts once, as the head's matmul.
static double config_matmul_params(const ModelConfig* c) {
    double C = c->d_model, L = c->n_layer, F = c->d_ff, V = c->vocab;
    double hd = (double)c->d_model / c->n_head, kv = c->n_kv_head * hd;
    double mlp = (config_mlp_gated(c) ? 3 : 2) * C * F;
    if (c->arch == ARCH_GPT2) return V * C + L * (3 * C * C + C * C + mlp);
    return V * C + L * (2 * C * C + 2 * C * kv + mlp);
}

// Model FLOPs per token, PaLM appendix B (Chowdhery et al. 2022):
//   6*N (forward 2N + backward 4N for the weight matmuls) + 12*L*d*T (attention QK^T and AV,
//   forward and backward, full T x T with no causal saving).
// N = matmul parameters (config_matmul_params). Recomputation is not model FLOPs (see HFU).
static double config_flops_per_token(const ModelConfig* c, int T) {
    return 6.0 * config_matmul_params(c) + 12.0 * c->n_layer * c->d_model * (double)T;
}

// The recomputed forward's FLOPs per token, what HFU adds to MFU's model FLOPs (the step line,
// the log and the planner count them with this one function): --recompute full runs every
// layer's forward again, 2 x its matmul parameters + 4*d*T of attention (the head and the
// embedding are not recomputed); selective the attention core alone, 4*d*T a layer
// (Korthikanti et al. 2022). Policies only the planner models (planner/) add their own.
static double config_recompute_flops_per_token(const ModelConfig* c, int T) {
    double layer_matmul = (config_matmul_params(c) - (double)c->vocab * c->d_model) / c->n_layer;
    double attention = 4.0 * c->d_model * T;
    if (c->recompute == RECOMPUTE_FULL) return c->n_layer * (2 * layer_matmul + attention);
    if (c->recompute == RECOMPUTE_SELECTIVE) return c->n_layer * attention;
    return 0;
}

static const char* arch_name(int a) { return a == ARCH_LLAMA ? "llama" : "gpt2"; }
static const char* schedule_name(int s) {
    static const char* names[N_SCHEDULES] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe-v"};
    return names[s];
}
// The zero-bubble schedules split each backward into B and W ops (layout/schedule.h).
static int schedule_has_w(int s) { return s == SCHED_ZBH1 || s == SCHED_ZBV || s == SCHED_DUALPIPEV; }
// ZB-V and DualPipe-V place two chunks per stage in a V (layout/params.h chunk_global).
static int schedule_is_v(int s) { return s == SCHED_ZBV || s == SCHED_DUALPIPEV; }
static int schedule_from_name(const char* s) {
    for (int k = 0; k < N_SCHEDULES; k++)
        if (!strcmp(s, schedule_name(k))) return k;
    return -1;
}
static const char* recompute_name(int r) {
    return r == RECOMPUTE_NONE ? "none" : r == RECOMPUTE_SELECTIVE ? "selective" : "full";
}

#endif
