// layout/args.h: the command line of ./train (both builds). One table, FLAGS, has a row per flag
// (name, type, range, default or the function that derives it from other flags, help, group,
// whether the ranks must agree, whether the planner reads it); --help, parsing, every default,
// the ranks' agreement check (run.h settings_of) and the planner's bounds (SIZE_FLAGS) are all
// read from it. A preset (--model) sets the shape and shape flags override it. Bad values are
// one-line errors naming the flag; the rules between flags are layout/layout_check.h's config_check.
#ifndef ARGS_H
#define ARGS_H

#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>
#include "layout/config.h"
#include "layout/layout_check.h"
#include "layout/packing.h"
#include "layout/params.h"

#define MAX_FLAGS 80

typedef struct {
    ModelConfig cfg;
    const char* model;
    const char* data;
    const char* val_data;
    const char* tokenizer;
    const char* log;
    const char* trace;
    const char* ckpt_dir;
    const char* resume;       // checkpoint file, or "auto": newest complete one in ckpt_dir
    const char* import_llmc;  // llm.c GPT-2 weights to start from
    const char* export_llmc;  // write the final weights in llm.c's format
    const char* export_hf;    // write the final weights as a Hugging Face transformers model directory
    const char* import_hf;    // start from such a directory's model.safetensors
    const char* offload_dir;  // --offload: where the CPU build's file-backed tier lives
    const char* pp_costs;     // --pp-costs: a trace whose measured op times --pp-split auto cuts by
    int ckpt_every, ckpt_keep;
    int eval_every, val_batches;
    int sample_every, sample_len;
    int sample_note;           // 1: the CPU build lowered the default --sample-len for a large model
    int log_every, log_ranks;
    int on_nan_skip;           // --on-nan skip|stop
    int noise_scale;           // --noise-scale: estimate B_simple each step (runtime/noise_scale.h)
    double timeout_s;          // watchdog for a hung collective
    double peak_tflops;        // per device, for MFU; 0: measured (CPU) or by device name (GPU)
    int comm_mpi;              // GPU build: --comm mpi (host-staged) instead of NCCL
    int gelu_unfused;          // GPU build: --gelu-fusion off (GELU as its own kernel, not in the fc matmul)
    int grad_reduce_bf16;      // GPU build: --grad-reduce bf16 (the dp all-reduce of the gradient in bf16)
    int kernels_ref;           // CPU build: --kernels ref (backend/cpu/reference.h's plain loops)
    const char* kernels_note;  // the start-up table's line on the kernels (set by each build's main)
    const char* attn_tile;     // GPU build: --attn-tile, the flash-attention forward's tile (a name, or auto)
    int op_times;              // GPU build: --op-times, device time per op family (backend/gpu/op_times.h)
    int reshard_keep;          // --reshard-after-forward off: --zero 3 keeps each gathered layer for the step
    int cp_kind;               // --cp-kind: CP_RING, CP_ULYSSES, CP_2D
    int cp_split;              // --cp-split: CP_SPLIT_ZIGZAG, _CONTIGUOUS, _DOC (config: cp_contiguous, cp_doc)
    int doc_mask;              // --doc-mask: DOC_MASK_AUTO, _ON, _OFF as given; run.h doc_mask_resolve sets doc_masked
    int doc_masked;            // 1: attention within documents, positions restarting at each (data/data.h)
    const char* doc_note;      // the start-up table's line on documents
    int packing;               // --packing: PACK_CONCAT, PACK_GREEDY, PACK_WLB (layout/packing.h)
    int eot;                   // --eot as given; after run.h eot_resolve the run's end-of-text id, -1: none
    const char* eot_note;      // why none is known, for the documents row (NULL: nothing to say)
    int quiet;
    unsigned char given[MAX_FLAGS];  // given[i]: FLAGS[i] was on the command line
} Args;

// ----------------------------------------------------------------------------
// The table. A flag's value goes straight to its place in Args (an int, float, double,
// uint64_t or text, by the size of that place); a choice's names a|b|c are stored as 0, 1, 2.

typedef enum { FLAG_SWITCH, FLAG_INT, FLAG_NUM, FLAG_TEXT, FLAG_CHOICE } FlagType;
enum { HELP_MODEL, HELP_DATA, HELP_TRAINING, HELP_LAYOUT, HELP_OUTPUT, N_HELP_GROUPS };
static const char* const HELP_TITLES[N_HELP_GROUPS] = {
    "model", "data", "training", "parallel layout (world = dp * pp * cp * tp; started under mpirun automatically)",
    "logging and checkpoints"};
// agree: the ranks compare the parsed value at start-up (run.h settings_agree); AGREE_GIVEN:
// the value if given, else 0 (a default resolved from the layout after the check).
// Not compared: what changes only rank 0's printing and the watchdog's --timeout-s.
enum { AGREE_NO, AGREE, AGREE_GIVEN };

typedef struct {
    const char* flag;   // its name on the command line
    FlagType type;
    const char* value;  // how --help shows the value (a choice: its names, a|b|c)
    long lo, hi;        // FLAG_INT: the accepted range (hi LONG_MAX: none above)
    double min, max;    // FLAG_NUM: the accepted range
    const char* def;    // the value before parsing, read as the flag's own value is; NULL: 0. --help shows
                        // "(default DEF)" unless its help says how the default is chosen
    int group;          // the --help section
    int agree;          // AGREE_*
    int planner;        // 1: the planner checks a model or layout against this row's range (SIZE_FLAGS)
    size_t at, size;    // where its value lives in Args
    const char* help;
    // a default that follows other flags (NULL: def): set when the flag is not given, by args_derive,
    // in the table's order; world: the ranks, 0 while not known (at parsing, before mpirun)
    void (*derive)(Args* a, int world);
} Flag;

// ----------------------------------------------------------------------------
// The defaults that follow other flags, each named by its row of the table below.

static int flag_given(const Args* a, const char* name);
// The data-parallel size, given or from the world (0: not known yet).
static int dp_of(const Args* a, int world) {
    const ModelConfig* c = &a->cfg;
    if (c->dp || !world) return c->dp;
    int per_replica = c->tp * c->pp * c->cp;
    return world / per_replica > 0 ? world / per_replica : 1;
}
// The batch keeps every layout's math the same as one rank's: the global batch is 16 sequences
// whatever the layout (unless --global-batch, or --micro-batch alone, which means dp*pp*micro-batch),
// and the micro-batch is the largest <= 16 that gives every pipeline stage pp micro-batches, as 1F1B
// needs (2pp for DualPipe-V). So `./train --tp 4 --pp 2` trains on the same batches as `./train`.
static int batch_min_micro(const ModelConfig* c) {
    return c->schedule == SCHED_DUALPIPEV ? 2 * c->pp : c->pp > 1 ? c->pp : 1;
}
static void derive_micro_batch(Args* a, int world) {
    ModelConfig* c = &a->cfg;
    int dp = dp_of(a, world), m_min = batch_min_micro(c);
    if (!dp) return;
    int global = flag_given(a, "--global-batch") ? c->global_batch : 16, mb = global / (dp * m_min);
    c->micro_batch = mb < 1 ? 1 : mb > 16 ? 16 : mb;
}
static void derive_global_batch(Args* a, int world) {
    ModelConfig* c = &a->cfg;
    int dp = dp_of(a, world), m_min = batch_min_micro(c);
    if (!dp) return;
    long long derived = (long long)dp * m_min * c->micro_batch;  // --micro-batch alone: dp*pp*micro-batch
    if (flag_given(a, "--micro-batch") && derived > (1 << 30))
        fail("--micro-batch %d x dp %d x pp %d = %lld sequences per step, more than 2^30 (give --global-batch)",
             c->micro_batch, dp, m_min, derived);
    c->global_batch = flag_given(a, "--micro-batch") ? (int)derived : 16;
}
static void derive_dp(Args* a, int world) { a->cfg.dp = dp_of(a, world); }
// The shape flags follow the preset (args_resolve), the ones below follow the flags given.
static void derive_n_kv_head(Args* a, int world) {
    if (flag_given(a, "--n-head")) a->cfg.n_kv_head = a->cfg.n_head;  // plain multi-head
}
static void derive_d_ff(Args* a, int world) {
    if (!flag_given(a, "--d-model")) return;
    a->cfg.d_ff = 0;  // follows the width
    config_finalize(&a->cfg);
}
static void derive_vpp(Args* a, int world) { a->cfg.vpp = schedule_is_v(a->cfg.schedule) ? 2 : 1; }
static void derive_cp_ulysses(Args* a, int world) {  // --cp-kind 2d needs it given (config_check)
    a->cfg.cp_ulysses = a->cp_kind == CP_RING ? 1 : a->cp_kind == CP_ULYSSES ? a->cfg.cp : 0;
}
static void derive_schedule(Args* a, int world) {
    a->cfg.schedule = a->cfg.vpp > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
}
static void derive_weight_pass(Args* a, int world) {
    a->cfg.weight_pass_deferred = schedule_has_w(a->cfg.schedule);
}

#define IN_ARGS(field) offsetof(Args, field), sizeof(((Args*)0)->field)
#define IN_CFG(field) IN_ARGS(cfg.field)
#define NO_RANGE 0, 0, 0, 0

// The rows from --n-layer to --cp-ulysses are the planner's, in the order of the SIZE_*
// indices below (planner/cli.h, runs.h, search.h read SIZE_FLAGS[SIZE_*]).
static const Flag FLAGS[] = {
    // model
    {"--model", FLAG_TEXT, "NAME", NO_RANGE, "small", HELP_MODEL, AGREE, 0, IN_ARGS(model),
     "preset (default small), one of:", NULL},
    {"--arch", FLAG_CHOICE, "gpt2|llama", NO_RANGE, NULL, HELP_MODEL, AGREE, 0, IN_CFG(arch),
     "architecture (default: the preset's; llama alone picks llama-small)", NULL},
    {"--n-layer", FLAG_INT, "N", 1, 512, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(n_layer),
     "layers (default: the preset's)", NULL},
    {"--n-head", FLAG_INT, "N", 1, 1024, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(n_head),
     "query heads (default: the preset's; --n-kv-head follows unless given)", NULL},
    {"--n-kv-head", FLAG_INT, "N", 1, 1024, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(n_kv_head),
     "key/value heads: fewer than --n-head is grouped-query attention (llama)", derive_n_kv_head},
    {"--d-model", FLAG_INT, "N", 1, 65536, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(d_model),
     "width (default: the preset's; --d-ff follows unless given)", NULL},
    {"--d-ff", FLAG_INT, "N", 1, 1 << 20, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(d_ff),
     "MLP hidden size (default: the preset's, or 4 x d-model for gpt2, SwiGLU's 2/3 x 4 x d-model to 256 for "
     "llama)", derive_d_ff},
    {"--vocab", FLAG_INT, "N", 2, 1 << 20, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(vocab),
     "vocabulary (default: the preset's; padded to a multiple of 128)", NULL},
    {"--seq-len", FLAG_INT, "N", 1, 1 << 20, 0, 0, NULL, HELP_MODEL, AGREE, 1, IN_CFG(seq_len),
     "context length (default: the preset's)", NULL},
    // training: the batch
    {"--micro-batch", FLAG_INT, "B", 1, 1 << 20, 0, 0, NULL, HELP_TRAINING, AGREE_GIVEN, 1, IN_CFG(micro_batch),
     "sequences per micro-batch per rank (default: the largest <= 16 that gives every pipeline stage pp "
     "micro-batches of the global batch)", derive_micro_batch},
    {"--global-batch", FLAG_INT, "G", 1, 1 << 30, 0, 0, NULL, HELP_TRAINING, AGREE, 1, IN_CFG(global_batch),
     "sequences per optimizer step over all dp ranks (default 16, or dp*pp*micro-batch when --micro-batch is "
     "given)", derive_global_batch},
    // parallel layout: the sizes
    {"--dp", FLAG_INT, "N", 1, 1 << 20, 0, 0, NULL, HELP_LAYOUT, AGREE, 1, IN_CFG(dp),
     "data parallel size (default 1; from the world under a launcher)", derive_dp},
    {"--tp", FLAG_INT, "N", 1, 1024, 0, 0, "1", HELP_LAYOUT, AGREE, 1, IN_CFG(tp), "tensor parallel size", NULL},
    {"--pp", FLAG_INT, "N", 1, 1024, 0, 0, "1", HELP_LAYOUT, AGREE, 1, IN_CFG(pp), "pipeline parallel size", NULL},
    {"--vpp", FLAG_INT, "N", 1, 64, 0, 0, NULL, HELP_LAYOUT, AGREE, 1, IN_CFG(vpp),
     "model chunks per pipeline rank (interleaved 1F1B; default 1, with zb-v and dualpipe-v 2)", derive_vpp},
    {"--cp", FLAG_INT, "N", 1, 1 << 16, 0, 0, "1", HELP_LAYOUT, AGREE, 1, IN_CFG(cp),
     "context parallelism: each sequence split over N ranks", NULL},
    {"--cp-ulysses", FLAG_INT, "U", 1, 1 << 16, 0, 0, NULL, HELP_LAYOUT, AGREE, 1, IN_CFG(cp_ulysses),
     "the Ulysses degree of --cp-kind 2d (divides N)", derive_cp_ulysses},
    // parallel layout: the rest
    {"--cp-kind", FLAG_CHOICE, "ring|ulysses|2d", NO_RANGE, "ring", HELP_LAYOUT, AGREE, 0, IN_ARGS(cp_kind),
     "ring: zig-zag ring attention; ulysses: all-to-all to a head split (N <= KV heads per tp rank); "
     "2d: Ulysses inside --cp-ulysses U ranks, ring across", NULL},
    {"--cp-split", FLAG_CHOICE, "zigzag|contiguous|doc", NO_RANGE, "zigzag", HELP_LAYOUT, AGREE, 0, IN_ARGS(cp_split),
     "zigzag: ring rank r holds chunks r and 2R-1-r of 2R, balanced; contiguous: one piece each (the causal mask "
     "leaves early ranks idle; to measure); doc: the zig-zag of each document (WLB-LLM), balanced under documents "
     "(without masked documents, --doc-mask off or none in the data, the sequence is one: zigzag)", NULL},
    {"--schedule", FLAG_CHOICE, "gpipe|1f1b|interleaved|zb-h1|zb-v|dualpipe-v", NO_RANGE, NULL, HELP_LAYOUT, AGREE, 0,
     IN_CFG(schedule),
     "pipeline schedule (default 1f1b, interleaved when --vpp > 1); zb-*: zero-bubble, each backward split into B "
     "and a deferred W; dualpipe-v: DeepSeek's V-shaped DualPipe (two chunks per stage, >= 2 pp micro-batches)",
     derive_schedule},
    {"--pp-split", FLAG_CHOICE, "even|auto", NO_RANGE, "even", HELP_LAYOUT, AGREE, 0, IN_CFG(pp_split),
     "how layers are cut into pipeline chunks: even (by count) or auto (by cost: the slowest stage as fast as can "
     "be, the embedding, head and loss counted; see the start-up table's stage lines)", NULL},
    {"--pp-costs", FLAG_TEXT, "FILE", NO_RANGE, NULL, HELP_LAYOUT, AGREE, 0, IN_ARGS(pp_costs),
     "--pp-split auto by measured times: FILE is the --trace of an earlier run of this model with a pipeline (the "
     "same width, vocabulary, micro-batch, tp, cp, sp, recompute; any pp): each chunk's ops' times", NULL},
    {"--sp", FLAG_SWITCH, "", NO_RANGE, NULL, HELP_LAYOUT, AGREE, 0, IN_CFG(sp),
     "sequence parallelism in the norm/residual regions (needs --tp > 1)", NULL},
    {"--zero", FLAG_INT, "0|1|2|3", 0, 3, 0, 0, "0", HELP_LAYOUT, AGREE, 0, IN_CFG(zero),
     "shard optimizer state (1), gradients (2) and parameters (3: each layer all-gathered before its forward and "
     "backward, FSDP) over dp x cp", NULL},
    {"--reshard-after-forward", FLAG_CHOICE, "on|off", NO_RANGE, "on", HELP_LAYOUT, AGREE, 0, IN_ARGS(reshard_keep),
     "--zero 3: on drops a layer's gathered weights after its forward and gathers them again for its backward (two "
     "layers' weights held at once); off keeps every layer gathered from its first use to the optimizer step (the "
     "stage's whole weights held, one all-gather a layer a step instead of two per micro-batch)", NULL},
    {"--recompute", FLAG_CHOICE, "none|selective|full", NO_RANGE, "none", HELP_LAYOUT, AGREE, 0, IN_CFG(recompute),
     "selective: the attention core; full: keep layer inputs only", NULL},
    {"--offload", FLAG_CHOICE, "none|optimizer|activations|both", NO_RANGE, "none", HELP_LAYOUT, AGREE, 0,
     IN_CFG(offload),
     "optimizer: AdamW m, v in the --offload-dir tier (CPU build) / with the fp32 master in pinned host memory "
     "(GPU build: the device keeps the bf16 weights); "
     "activations: a pipeline stage keeps 2 micro-batches' activations per chunk on the device, the rest "
     "offloaded", NULL},
    {"--offload-frames", FLAG_INT, "1|2", 1, 2, 0, 0, "2", HELP_LAYOUT, AGREE, 0, IN_CFG(offload_frames),
     "--offload activations: device frames per chunk: 2 (the next backward's prefetched) or 1 (less memory, "
     "waits)", NULL},
    {"--offload-dir", FLAG_TEXT, "DIR", NO_RANGE, NULL, HELP_LAYOUT, AGREE, 0, IN_ARGS(offload_dir),
     "CPU build: the directory of the offload tier's files (mapped, unlinked at once; default $TMPDIR or /tmp)",
     NULL},
    // model: the rest (a shape flag's row, outside the planner's SIZE_FLAGS above)
    {"--rope-theta", FLAG_NUM, "X", 0, 0, 1, 1e9, NULL, HELP_MODEL, AGREE, 0, IN_CFG(rope_theta),
     "RoPE's base (llama; default the preset's: 10000, llama3-8b 500000)", NULL},
    // data
    {"--data", FLAG_TEXT, "PATH", NO_RANGE, NULL, HELP_DATA, AGREE, 0, IN_ARGS(data),
     "a file, or a quoted glob of files: .bin = llm.c shards, any other byte-level text; default: built-in "
     "corpus", NULL},
    {"--val-data", FLAG_TEXT, "PATH", NO_RANGE, NULL, HELP_DATA, AGREE, 0, IN_ARGS(val_data),
     "validation data; default: the last 5% of --data", NULL},
    {"--eval-every", FLAG_INT, "N", 0, 1 << 30, 0, 0, "50", HELP_DATA, AGREE, 0, IN_ARGS(eval_every),
     "validation loss every N steps (0: never)", NULL},
    {"--val-batches", FLAG_INT, "N", 1, 1 << 20, 0, 0, "4", HELP_DATA, AGREE, 0, IN_ARGS(val_batches),
     "global batches per validation", NULL},
    {"--doc-mask", FLAG_CHOICE, "auto|on|off", NO_RANGE, "auto", HELP_DATA, AGREE, 0, IN_ARGS(doc_mask),
     "attention within documents only (an end-of-text token starts one), RoPE/wpe positions restarting at each; "
     "auto: on when the data has end-of-text tokens (llm.c shards), off for byte-level text", NULL},
    {"--packing", FLAG_CHOICE, "concat|greedy|wlb", NO_RANGE, "concat", HELP_DATA, AGREE, 0, IN_ARGS(packing),
     "concat: hashed windows of the stream; greedy: whole documents first-fit into the sequences, the rest padding; "
     "wlb: documents balanced over micro-batches and dp ranks by attention work, outliers delayed (WLB-LLM)", NULL},
    {"--tokenizer", FLAG_TEXT, "FILE", NO_RANGE, NULL, HELP_DATA, AGREE, 0, IN_ARGS(tokenizer),
     "llm.c tokenizer file for decoding samples (default: bytes; other vocabularies print token ids); "
     "data/prepare.py writes one beside its shards", NULL},
    {"--eot", FLAG_INT, "ID", 0, (1 << 20) - 1, 0, 0, NULL, HELP_DATA, AGREE_GIVEN, 0, IN_ARGS(eot),
     "the end-of-text id that starts a document (masks, positions, samples, --export-hf's eos_token_id; default: "
     "the --tokenizer file's, else the data's format: 50256 in llm.c shards (GPT-2's tokens), 256 in byte-level "
     "text); refused where it is an ordinary token of the data", NULL},
    // training: the rest
    {"--steps", FLAG_INT, "N", 0, 1 << 30, 0, 0, "1500", HELP_TRAINING, AGREE, 0, IN_CFG(steps), "optimizer steps",
     NULL},
    {"--lr", FLAG_NUM, "X", 0, 0, 0, 10, "2e-3", HELP_TRAINING, AGREE, 0, IN_CFG(lr), "peak learning rate", NULL},
    {"--min-lr-frac", FLAG_NUM, "X", 0, 0, 0, 1, "0.1", HELP_TRAINING, AGREE, 0, IN_CFG(min_lr_frac),
     "cosine decays to lr*X", NULL},
    {"--warmup", FLAG_INT, "N", 0, 1 << 30, 0, 0, "50", HELP_TRAINING, AGREE, 0, IN_CFG(warmup),
     "linear warm-up steps", NULL},
    {"--weight-decay", FLAG_NUM, "X", 0, 0, 0, 10, "0.1", HELP_TRAINING, AGREE, 0, IN_CFG(weight_decay),
     "AdamW decoupled weight decay on matrices", NULL},
    {"--beta1", FLAG_NUM, "X", 0, 0, 0, 0.999999, "0.9", HELP_TRAINING, AGREE, 0, IN_CFG(beta1), "AdamW beta1", NULL},
    {"--beta2", FLAG_NUM, "X", 0, 0, 0, 0.999999, "0.95", HELP_TRAINING, AGREE, 0, IN_CFG(beta2), "AdamW beta2", NULL},
    // eps 0 divides 0 by 0 for a weight whose gradient is 0
    {"--eps", FLAG_NUM, "X", 0, 0, 1e-30, 1, "1e-8", HELP_TRAINING, AGREE, 0, IN_CFG(eps), "AdamW epsilon (> 0)", NULL},
    {"--grad-clip", FLAG_NUM, "X", 0, 0, 0, 1e9, "1.0", HELP_TRAINING, AGREE, 0, IN_CFG(grad_clip),
     "clip the global gradient norm to X (0: off)", NULL},
    {"--seed", FLAG_INT, "N", 0, LONG_MAX, 0, 0, "1337", HELP_TRAINING, AGREE, 0, IN_CFG(seed),
     "seed for init and sampling", NULL},
    // logging and checkpoints
    {"--log", FLAG_TEXT, "FILE", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(log),
     "JSON lines: per step and per evaluation", NULL},
    {"--log-ranks", FLAG_SWITCH, "", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(log_ranks),
     "also write FILE.rankN with each rank's timings", NULL},
    {"--log-every", FLAG_INT, "N", 1, 1 << 30, 0, 0, "1", HELP_OUTPUT, AGREE_NO, 0, IN_ARGS(log_every),
     "print every N steps", NULL},
    {"--trace", FLAG_TEXT, "FILE", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(trace),
     "Chrome trace-event JSON of the step (open in Perfetto)", NULL},
    {"--sample-every", FLAG_INT, "N", 0, 1 << 30, 0, 0, "0", HELP_OUTPUT, AGREE, 0, IN_ARGS(sample_every),
     "print a sample every N steps (0: at the end only)", NULL},
    {"--sample-len", FLAG_INT, "N", 0, 1 << 20, 0, 0, "200", HELP_OUTPUT, AGREE, 0, IN_ARGS(sample_len),
     "bytes/tokens per sample", NULL},
    {"--ckpt-dir", FLAG_TEXT, "DIR", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(ckpt_dir),
     "checkpoint directory, created at start (a final checkpoint is written at the end, and after the step a "
     "SIGTERM/SIGINT/SIGHUP came in; a second signal exits at once without saving, the checkpoints on disk kept)",
     NULL},
    {"--ckpt-every", FLAG_INT, "N", 0, 1 << 30, 0, 0, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(ckpt_every),
     "also every N steps", NULL},
    {"--ckpt-keep", FLAG_INT, "N", 1, 1 << 20, 0, 0, "3", HELP_OUTPUT, AGREE, 0, IN_ARGS(ckpt_keep),
     "keep the newest N checkpoints of this run and the launches it resumes (and the one resumed from)", NULL},
    {"--resume", FLAG_TEXT, "FILE|auto", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(resume),
     "continue from a checkpoint (any layout)", NULL},
    {"--import-llmc", FLAG_TEXT, "FILE", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(import_llmc),
     "start from llm.c GPT-2 weights (gpt2_124M.bin, version 3)", NULL},
    {"--export-llmc", FLAG_TEXT, "FILE", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(export_llmc),
     "write the final weights in llm.c's format", NULL},
    {"--export-hf", FLAG_TEXT, "DIR", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(export_hf),
     "write the final weights as a Hugging Face transformers model (safetensors + config.json; GPT2LMHeadModel or "
     "LlamaForCausalLM), DIR created at start", NULL},
    {"--import-hf", FLAG_TEXT, "DIR", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(import_hf),
     "start from DIR/model.safetensors (fp32, this model's shape: an --export-hf)", NULL},
    {"--noise-scale", FLAG_SWITCH, "", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(noise_scale),
     "the gradient noise scale B_simple = tr(Sigma)/|G|^2 in tokens (McCandlish et al. 2018), from each dp replica's "
     "gradient norm and the step's, averaged over about 20 steps: in the step line and the log (noise_scale); needs "
     "dp x cp >= 2, --zero 0 or 1, no --sp", NULL},
    {"--on-nan", FLAG_CHOICE, "stop|skip", NO_RANGE, "stop", HELP_OUTPUT, AGREE, 0, IN_ARGS(on_nan_skip),
     "non-finite loss or gradient: stop, or skip the step", NULL},
    {"--timeout-s", FLAG_NUM, "X", 0, 0, 1, 1e7, "600", HELP_OUTPUT, AGREE_NO, 0, IN_ARGS(timeout_s),
     "exit if no communication completes for X s: a peer died or hangs", NULL},
    {"--peak-tflops", FLAG_NUM, "X", 0, 0, 1e-6, 1e6, NULL, HELP_OUTPUT, AGREE_NO, 0, IN_ARGS(peak_tflops),
     "each rank's peak for MFU, TFLOP/s (default: CPU build: the measured FMA peak of a core x cores / ranks; "
     "GPU build: its GPU's, from a table of parts, else SMs x clock; docs/GPU.md)", NULL},
    {"--comm", FLAG_CHOICE, "nccl|mpi", NO_RANGE, "nccl", HELP_OUTPUT, AGREE, 0, IN_ARGS(comm_mpi),
     "GPU build: NCCL or host-staged MPI (ranks can share a GPU)", NULL},
    {"--grad-reduce", FLAG_CHOICE, "fp32|bf16", NO_RANGE, "fp32", HELP_OUTPUT, AGREE, 0, IN_ARGS(grad_reduce_bf16),
     "GPU build, --zero 0 and 1: the dp all-reduce of the gradient in fp32 (default) or bf16 (half the bytes; each "
     "layer's gradient rounded to bf16 and summed in bf16 by NCCL)", NULL},
    {"--gelu-fusion", FLAG_CHOICE, "on|off", NO_RANGE, "on", HELP_OUTPUT, AGREE, 0, IN_ARGS(gelu_unfused),
     "GPU build: GELU in the fc matmul's cuBLASLt epilogue, or its own kernel", NULL},
    {"--kernels", FLAG_CHOICE, "fast|ref", NO_RANGE, "fast", HELP_OUTPUT, AGREE, 0, IN_ARGS(kernels_ref),
     "CPU build: fast (SIMD, packed GEMM: backend/cpu/kernels_cpu.h) or ref (the plain fp32 loops of "
     "backend/cpu/reference.h, the math to read first; slow); the GPU build runs its CUDA kernels and refuses "
     "ref", NULL},
    {"--attn-tile", FLAG_TEXT, "NAME|auto", NO_RANGE, "auto", HELP_OUTPUT, AGREE, 0, IN_ARGS(attn_tile),
     "GPU build: the flash-attention forward's tile (q<query rows>k<keys>, e.g. q128k64; docs/GPU.md lists them), "
     "or auto: the fastest for this GPU and head size in dev/attn_tiles.csv (test_gpu --att-sweep), else the "
     "default", NULL},
    {"--op-times", FLAG_SWITCH, "", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0, IN_ARGS(op_times),
     "GPU build: the device time of each op family (matmul, attention forward and backward, norms, loss, "
     "optimizer; CUDA events around each op), printed per step at the end; the CPU build's per-op times are "
     "--trace's", NULL},
    {"--weight-pass", FLAG_CHOICE, "immediate|deferred", NO_RANGE, NULL, HELP_OUTPUT, AGREE, 0,
     IN_CFG(weight_pass_deferred),
     "each layer's weight gradients right after its input gradient (default), or after the whole chunk's input "
     "pass (more memory; always so with zb-*)", derive_weight_pass},
    {"--quiet", FLAG_SWITCH, "", NO_RANGE, NULL, HELP_OUTPUT, AGREE_NO, 0, IN_ARGS(quiet), "no step lines", NULL},
};
#define N_FLAGS ((int)(sizeof(FLAGS) / sizeof(FLAGS[0])))
typedef char flags_fit_in_args[N_FLAGS <= MAX_FLAGS ? 1 : -1];

// The planner's rows (planner=1), in this order from FLAGS' --n-layer on.
typedef Flag SizeFlag;
// the shape, then the layout
enum { SIZE_N_LAYER, SIZE_N_HEAD, SIZE_N_KV_HEAD, SIZE_D_MODEL, SIZE_D_FF, SIZE_VOCAB, SIZE_SEQ_LEN,
       SIZE_MICRO_BATCH, SIZE_GLOBAL_BATCH, SIZE_DP, SIZE_TP, SIZE_PP, SIZE_VPP, SIZE_CP, SIZE_CP_ULYSSES,
       N_SIZE_FLAGS };
static const Flag* const SIZE_FLAGS = FLAGS + 2;

#undef IN_ARGS
#undef IN_CFG
#undef NO_RANGE

// ----------------------------------------------------------------------------
// --help

// text from column col on, wrapped at 116 columns, continued at column indent.
static void help_wrap(int col, int indent, const char* text) {
    const char* p = text;
    while (*p) {
        int n = (int)strlen(p), room = 116 - col;
        if (n > room) {  // break at the last space that fits
            n = room;
            while (n > 0 && p[n] != ' ') n--;
            if (n == 0) n = room;
        }
        printf("%.*s\n", n, p);
        p += n;
        while (*p == ' ') p++;
        if (*p) col = printf("%*s", indent, "");
    }
}

// "  --name VALUE        help (default DEF)"; a long name and value on a line of their own.
static void help_row(const Flag* f) {
    char left[64], text[512];
    snprintf(left, sizeof(left), "%s%s%s", f->flag, f->value[0] ? " " : "", f->value);
    if (!f->def || strstr(f->help, "default")) snprintf(text, sizeof(text), "%s", f->help);
    else snprintf(text, sizeof(text), "%s (default %s)", f->help, f->def);
    if (strlen(left) > 21) printf("  %s\n%24s", left, "");
    else printf("  %-21s ", left);
    help_wrap(24, 24, text);
}

static void print_help(void) {
    printf("usage: ./train [flags]          (train)\n"
           "       ./train --plan [flags]   (predict memory and speed of layouts; see --plan --help)\n"
           "a flag's value follows it (--steps 100) or an = (--steps=100); each flag is given once\n");
    char presets[512] = "";
    for (int i = 0; i < N_PRESETS; i++)
        snprintf(presets + strlen(presets), sizeof(presets) - strlen(presets), "%s%s", i ? ", " : "", PRESETS[i].name);
    for (int g = 0; g < N_HELP_GROUPS; g++) {
        printf("\n%s\n", HELP_TITLES[g]);
        for (const Flag* f = FLAGS; f < FLAGS + N_FLAGS; f++) {
            if (f->group != g) continue;
            help_row(f);
            if (!strcmp(f->flag, "--model")) printf("%24s", ""), help_wrap(24, 24, presets);
        }
    }
}

// ----------------------------------------------------------------------------
// Parsing

// Edits (insert, delete, replace a character) from a to b, up to 3 (4: more).
static int edit_distance(const char* a, const char* b) {
    size_t n = strlen(b);
    if (n > 62) return 4;
    int row[64];
    for (size_t j = 0; j <= n; j++) row[j] = (int)j;
    for (size_t i = 1; a[i - 1]; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= n; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up, row[j] = best;
        }
    }
    return row[n] > 3 ? 4 : row[n];
}

// ", did you mean --steps?": the nearest flag within 2 edits (or that name starts), or "".
static const char* flag_suggestion(const char* name, char* out, size_t cap) {
    const char* best = NULL;
    int best_d = 3;
    for (int i = 0; i < N_FLAGS; i++) {
        int d = edit_distance(name, FLAGS[i].flag);
        if (d < best_d || (!best && strlen(name) > 3 && !strncmp(FLAGS[i].flag, name, strlen(name))))
            best = FLAGS[i].flag, best_d = d < best_d ? d : best_d;
    }
    if (best) snprintf(out, cap, "; did you mean %s?", best);
    else out[0] = 0;
    return out;
}

static const Flag* find_flag(const char* name) {
    for (const Flag* f = FLAGS; f < FLAGS + N_FLAGS; f++)
        if (!strcmp(f->flag, name)) return f;
    return NULL;
}

static int flag_given(const Args* a, const char* name) {
    const Flag* f = find_flag(name);
    if (!f) fail("internal: no flag %s", name);
    return a->given[f - FLAGS];
}

// The choice v among "a|b|c": its index, or -1.
static int choice_index(const char* choices, const char* v) {
    size_t n = strlen(v);
    int k = 0;
    for (const char* p = choices;; k++) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return k;
        if (!bar) return -1;
        p = bar + 1;
    }
}

// "--name must be a, b or c, got 'v'".
static void choice_fail(const Flag* f, const char* v) {
    char names[256] = "";
    const char* p = f->value;
    while (*p) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%.*s", names[0] ? (bar ? ", " : " or ") : "",
                 (int)len, p);
        p += len + (bar != NULL);
    }
    fail("%s must be %s, got '%s'", f->flag, names, v);
}

// Store the value v (text as on the command line; NULL for a switch) of flag f in a.
static void flag_set(Args* a, const Flag* f, const char* v) {
    void* at = (char*)a + f->at;
    if (f->type == FLAG_SWITCH) *(int*)at = 1;
    else if (f->type == FLAG_TEXT) {
        if (!*v) fail("%s: empty (expected %s; leave the flag out for its default)", f->flag, f->value);
        *(const char**)at = v;
    }
    else if (f->type == FLAG_CHOICE) {
        int k = choice_index(f->value, v);
        if (k < 0) choice_fail(f, v);
        *(int*)at = k;
    } else if (f->type == FLAG_INT) {
        long x = parse_long(v, f->flag);
        if (f->hi == LONG_MAX && x < f->lo) fail("%s must be >= %ld", f->flag, f->lo);
        if (x < f->lo || x > f->hi) fail("%s must be in [%ld, %ld], got %ld", f->flag, f->lo, f->hi, x);
        if (f->size == sizeof(uint64_t)) *(uint64_t*)at = (uint64_t)x;
        else *(int*)at = (int)x;
    } else {
        double x = parse_double(v, f->flag);
        if (x < f->min || x > f->max) fail("%s must be in [%g, %g], got %g", f->flag, f->min, f->max, x);
        if (f->size == sizeof(float)) *(float*)at = (float)x;
        else *(double*)at = x;
    }
}

static void args_defaults(Args* a) {
    memset(a, 0, sizeof(*a));
    for (const Flag* f = FLAGS; f < FLAGS + N_FLAGS; f++)
        if (f->def) flag_set(a, f, f->def);
}

// The settings config_check's rules read beyond the model's config (layout/layout_check.h). The
// values of --cp-ulysses and --weight-pass as given: read before args_resolve derives them (after it,
// for flags that passed the check, they are what was given).
static FlagRules flag_rules(const Args* a) {
    FlagRules f = {a->cp_kind,
                   flag_given(a, "--cp-ulysses") ? a->cfg.cp_ulysses : 0,
                   flag_given(a, "--weight-pass") && !a->cfg.weight_pass_deferred,
                   flag_given(a, "--reshard-after-forward"),
                   flag_given(a, "--offload-frames"),
                   a->offload_dir != NULL,
                   a->packing == PACK_WLB,
                   1,
                   a->noise_scale,
                   a->pp_costs != NULL};
    return f;
}

// The defaults of the flags not given that follow other flags (the rows' derive), in the table's order.
// At parsing world is 0: what needs the world (dp, and the batch when dp is not given) waits for
// runtime/run.h, which calls it again with the world.
static void args_derive(Args* a, int world) {
    for (const Flag* f = FLAGS; f < FLAGS + N_FLAGS; f++)
        if (f->derive && !a->given[f - FLAGS]) f->derive(a, world);
}

// What follows from the flags: the preset under the shape flags, the defaults that follow other
// flags; then every rule between flags that needs no layout (config_check; the layout's are
// checked when the world is known, runtime/run.h).
static void args_resolve(Args* a) {
    ModelConfig* c = &a->cfg;
    // A llama-style arch given without a preset picks the llama default (a --model given is kept: its
    // shape, that arch).
    if (flag_given(a, "--arch") && !flag_given(a, "--model") && c->arch == ARCH_LLAMA) a->model = "llama-small";
    const Preset* p = find_preset_or_fail("--model", a->model);
    Args given = *a;
    apply_preset(c, p);
    for (int i = 0; i < N_FLAGS; i++)  // the shape flags given override the preset
        if (a->given[i] && FLAGS[i].group == HELP_MODEL && FLAGS[i].type != FLAG_TEXT)
            memcpy((char*)a + FLAGS[i].at, (char*)&given + FLAGS[i].at, FLAGS[i].size);
    FlagRules rules = flag_rules(a);  // (before args_derive: what was given)
    args_derive(a, 0);
    c->cp_contiguous = a->cp_split == CP_SPLIT_CONTIGUOUS, c->cp_doc = a->cp_split == CP_SPLIT_DOC;
    config_finalize(c);
    char why[WHY_CAP];
    if (config_check(c, &rules, 0, why)) fail("%s", why);
    if (a->offload_dir) {  // at start-up, even where no tier turns out to be needed (pp 2, 2 micro-batches)
        struct stat dir_stat;
        const char* bad = stat(a->offload_dir, &dir_stat)       ? strerror(errno)
                          : !S_ISDIR(dir_stat.st_mode)          ? strerror(ENOTDIR)
                          : access(a->offload_dir, W_OK | X_OK) ? strerror(errno)
                                                                : NULL;
        if (bad) fail("--offload-dir %s: not a directory this run can write to (%s)", a->offload_dir, bad);
    }
    if (a->log_ranks && !a->log) fail("--log-ranks writes LOG.rankN beside --log LOG: give --log too");
    // flags without the one that gives them an effect: taken without a word, they did nothing (no checkpoint saved)
    if (!a->ckpt_dir && (a->ckpt_every > 0 || flag_given(a, "--ckpt-keep")))
        fail("%s: checkpoints are written to --ckpt-dir DIR: give it too (without it none is saved)",
             a->ckpt_every > 0 ? "--ckpt-every" : "--ckpt-keep");
    if (flag_given(a, "--rope-theta") && c->arch != ARCH_LLAMA)
        fail("--rope-theta: the base of LLaMA's rotary positions; %s's positions are learned (wpe): leave it out, or "
             "--arch llama", arch_name(c->arch));
    // each gives the starting weights: one of them (--resume auto with an import: the import for a job's first launch)
    int explicit_resume = a->resume && strcmp(a->resume, "auto");
    if (a->import_hf && (explicit_resume || a->import_llmc))
        fail("--import-hf and %s both give the starting weights: give one",
             a->import_llmc ? "--import-llmc" : "--resume");
    if (a->import_llmc && explicit_resume) fail("--import-llmc and --resume both give the starting weights: give one");
    double median, sigma;  // a bad generator spec: one error line here, before mpirun, not one per rank
    if (a->data) docs_spec(a->data, &median, &sigma, "--data");
}

static void parse_args(Args* a, int argc, char** argv) {
    args_defaults(a);
    FlagsGiven given = {"", 0, {}};  // none of the trainer's flags is repeatable (base/common.h flag_once)
    for (int i = 1; i < argc; i++) {
        char name[64], hint[64];
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { print_help(); exit(stdout_exit_code(0)); }
        if (strncmp(argv[i], "--", 2)) fail("unexpected argument '%s' (flags start with --; see --help)", argv[i]);
        const char* eq = strchr(argv[i], '=');  // --steps=3 as --steps 3
        snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]), argv[i]);
        const Flag* f = find_flag(name);
        if (!f) fail("unknown flag %s%s (see --help)", name, flag_suggestion(name, hint, sizeof(hint)));
        if (f->type == FLAG_SWITCH && eq) fail("flag %s is a switch and takes no value (got '%s')", name, argv[i]);
        if (f->type != FLAG_SWITCH && !eq && i + 1 >= argc) fail("flag %s needs a value", name);
        const char* v = f->type == FLAG_SWITCH ? NULL : eq ? eq + 1 : argv[++i];
        flag_once(&given, f->flag, v);
        flag_set(a, f, v);
        a->given[f - FLAGS] = 1;
    }
    args_resolve(a);
}

#endif
