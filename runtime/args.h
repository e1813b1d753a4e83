// args.h: the command line of ./train (both builds): defaults, parsing, --help.
// Every flag has a long name; a preset (--model) sets the shape and shape flags
// override it. Bad values are one-line errors naming the flag.
#ifndef ARGS_H
#define ARGS_H

#include "model/config.h"

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
    int ckpt_every, ckpt_keep;
    int eval_every, val_batches;
    int sample_every, sample_len;
    int log_every, log_ranks;
    int on_nan_skip;          // --on-nan skip|stop
    double timeout_s;         // watchdog for a hung collective
    double peak_tflops;       // per device, for MFU; 0: measured (CPU) or by device name (GPU)
    int comm_mpi;             // GPU build: --comm mpi (host-staged) instead of NCCL
    int gelu_unfused;         // GPU build: --gelu-fusion off (GELU as its own kernel, not in the fc matmul)
    int weight_pass_deferred; // --weight-pass deferred: a chunk's weight gradients after all its input gradients
    int cp_kind, cp_ulysses;  // --cp-kind (CP_RING, CP_ULYSSES, CP_2D), --cp-ulysses (0: not given)
    int micro_batch_given;    // --micro-batch was on the command line
    int quiet;
    // shape flags given explicitly (override the preset)
    int n_layer, n_head, n_kv_head, d_model, d_ff, seq_len, vocab, arch;
} Args;

// The ranges of the flags that size a model and a layout, one table for the trainer (parse_args)
// and the planner (planner/cli.h, planner/runs.h).
typedef struct { const char* flag; long lo, hi; } SizeFlag;
enum { SIZE_N_LAYER, SIZE_N_HEAD, SIZE_N_KV_HEAD, SIZE_D_MODEL, SIZE_D_FF, SIZE_VOCAB, SIZE_SEQ_LEN,  // the shape
       SIZE_MICRO_BATCH, SIZE_GLOBAL_BATCH, SIZE_DP, SIZE_TP, SIZE_PP, SIZE_VPP, SIZE_CP, SIZE_CP_ULYSSES, N_SIZE_FLAGS };
static const SizeFlag SIZE_FLAGS[N_SIZE_FLAGS] = {
    {"--n-layer", 1, 512}, {"--n-head", 1, 1024}, {"--n-kv-head", 1, 1024}, {"--d-model", 1, 65536}, {"--d-ff", 1, 1 << 20},
    {"--vocab", 2, 1 << 20}, {"--seq-len", 1, 1 << 20}, {"--micro-batch", 1, 1 << 20}, {"--global-batch", 1, 1 << 30},
    {"--dp", 1, 1 << 20}, {"--tp", 1, 1024}, {"--pp", 1, 1024}, {"--vpp", 1, 64}, {"--cp", 1, 1 << 16}, {"--cp-ulysses", 1, 1 << 16}};

static void print_help(void) {
    printf(
        "usage: ./train [flags]          (train)\n"
        "       ./train --plan [flags]   (predict memory and speed of layouts; see --plan --help)\n"
        "\nmodel\n"
        "  --model NAME          preset (default small):");
    for (int i = 0; i < N_PRESETS; i++) printf("%s%s", i ? ", " : " ", PRESETS[i].name);
    printf(
        "\n  --arch gpt2|llama     architecture (set by the preset)\n"
        "  --n-layer --n-head --n-kv-head --d-model --d-ff --seq-len --vocab   shape overrides\n"
        "\ndata\n"
        "  --data PATH           a file, or a quoted glob of files: .bin = llm.c shards, any other byte-level\n"
        "                        text; default: built-in corpus\n"
        "  --val-data PATH       validation data; default: the last 5%% of --data\n"
        "  --eval-every N        validation loss every N steps (default 50, 0: never)\n"
        "  --val-batches N       global batches per validation (default 4)\n"
        "  --tokenizer FILE      llm.c tokenizer file for decoding samples (default: bytes; other vocabularies\n"
        "                        print token ids); data/prepare.py writes one beside its shards\n"
        "\ntraining\n"
        "  --steps N             optimizer steps (default 1500)\n"
        "  --micro-batch B       sequences per micro-batch per rank (default: the largest <= 16 that gives\n"
        "                        every pipeline stage pp micro-batches of the global batch)\n"
        "  --global-batch G      sequences per optimizer step over all dp ranks (default 16, or\n"
        "                        dp*pp*micro-batch when --micro-batch is given)\n"
        "  --lr X                peak learning rate (default 2e-3)\n"
        "  --min-lr-frac X       cosine decays to lr*X (default 0.1)\n"
        "  --warmup N            linear warm-up steps (default 50)\n"
        "  --weight-decay X      AdamW decoupled weight decay on matrices (default 0.1)\n"
        "  --beta1 --beta2 --eps AdamW (defaults 0.9, 0.95, 1e-8; eps > 0)\n"
        "  --grad-clip X         clip the global gradient norm to X (default 1.0, 0: off)\n"
        "  --seed N              seed for init and sampling (default 1337)\n"
        "\nparallel layout (world = dp * pp * cp * tp; started under mpirun automatically)\n"
        "  --dp N --tp N --pp N  data / tensor / pipeline parallel sizes (default 1; dp from the world under a launcher)\n"
        "  --vpp N               model chunks per pipeline rank (interleaved 1F1B; zb-v: 2, the default with it)\n"
        "  --schedule S          gpipe | 1f1b | interleaved | zb-h1 | zb-v (default 1f1b, interleaved when\n"
        "                        --vpp > 1); zb-*: zero-bubble, each backward split into B and a deferred W\n"
        "  --sp                  sequence parallelism in the norm/residual regions (needs --tp > 1)\n"
        "  --cp N                context parallelism: each sequence split over N ranks (default 1)\n"
        "  --cp-kind K           ring (zig-zag ring attention, the default) | ulysses (all-to-all to a head\n"
        "                        split; N <= KV heads per tp rank) | 2d (Ulysses inside --cp-ulysses U ranks, ring across)\n"
        "  --cp-ulysses U        the Ulysses degree of --cp-kind 2d (divides N)\n"
        "  --cp-split S          zigzag (default: ring rank r holds chunks r and 2R-1-r of 2R, balanced) |\n"
        "                        contiguous (one piece each: the causal mask leaves early ranks idle; to measure)\n"
        "  --zero 0|1|2          shard optimizer state (1) and gradients (2) over dp\n"
        "  --recompute R         none | selective (attention core) | full (keep layer inputs only)\n"
        "\nlogging and checkpoints\n"
        "  --log FILE            JSON lines: per step and per evaluation\n"
        "  --log-ranks           also write FILE.rankN with each rank's timings\n"
        "  --log-every N         print every N steps (default 1)\n"
        "  --trace FILE          Chrome trace-event JSON of the step (open in Perfetto)\n"
        "  --sample-every N      print a sample every N steps (default 0: at the end only)\n"
        "  --sample-len N        bytes/tokens per sample (default 200)\n"
        "  --ckpt-dir DIR        checkpoint directory, created at start (a final checkpoint is written at the end)\n"
        "  --ckpt-every N        also every N steps\n"
        "  --ckpt-keep N         keep the newest N checkpoints (default 3)\n"
        "  --resume FILE|auto    continue from a checkpoint (any layout)\n"
        "  --import-llmc FILE    start from llm.c GPT-2 weights (gpt2_124M.bin, version 3)\n"
        "  --export-llmc FILE    write the final weights in llm.c's format\n"
        "  --export-hf DIR       write the final weights as a Hugging Face transformers model (safetensors +\n"
        "                        config.json; GPT2LMHeadModel or LlamaForCausalLM), DIR created at start\n"
        "  --import-hf DIR       start from DIR/model.safetensors (fp32, this model's shape: an --export-hf)\n"
        "  --on-nan skip|stop    non-finite loss or gradient: skip the step or stop (default stop)\n"
        "  --timeout-s X         exit if no communication completes for X s: a peer died or hangs (default 600)\n"
        "  --peak-tflops X       device peak for MFU (default: CPU measured FMA peak; GPU by name:\n"
        "                        H100/H200 989, A100 312)\n"
        "  --comm nccl|mpi       GPU build: NCCL (default) or host-staged MPI (ranks can share a GPU)\n"
        "  --gelu-fusion on|off  GPU build: GELU in the fc matmul's cuBLASLt epilogue (default on) or its own kernel\n"
        "  --weight-pass immediate|deferred  each layer's weight gradients right after its input gradient\n"
        "                        (default), or after the whole chunk's input pass (more memory; always so with zb-*)\n"
        "  --quiet               no step lines\n");
}

static void args_defaults(Args* a) {
    memset(a, 0, sizeof(*a));
    a->model = "small";
    a->cfg.steps = 1500, a->cfg.warmup = 50, a->cfg.micro_batch = 16;
    a->cfg.lr = 2e-3f, a->cfg.min_lr_frac = 0.1f, a->cfg.weight_decay = 0.1f;
    a->cfg.beta1 = 0.9f, a->cfg.beta2 = 0.95f, a->cfg.eps = 1e-8f, a->cfg.grad_clip = 1.0f;
    a->cfg.seed = 1337;
    a->cfg.tp = a->cfg.pp = a->cfg.cp = 1;
    a->cfg.vpp = a->cfg.schedule = a->weight_pass_deferred = -1;  // -1: from the schedule
    a->eval_every = 50, a->val_batches = 4, a->sample_len = 200, a->log_every = 1;
    a->ckpt_keep = 3, a->timeout_s = 600;
    a->arch = -1;
}

static int flag_is(const char* arg, const char* name) { return !strcmp(arg, name); }

static void parse_args(Args* a, int argc, char** argv) {
    args_defaults(a);
    ModelConfig* c = &a->cfg;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (flag_is(f, "--help") || flag_is(f, "-h")) { print_help(); exit(0); }
        if (flag_is(f, "--sp")) { c->sp = 1; continue; }
        if (flag_is(f, "--log-ranks")) { a->log_ranks = 1; continue; }
        if (flag_is(f, "--quiet")) { a->quiet = 1; continue; }
        if (strncmp(f, "--", 2)) fail("unexpected argument '%s' (flags start with --; see --help)", f);
        if (i + 1 >= argc) fail("flag %s needs a value", f);
        const char* v = argv[++i];
#define INT_FLAG(name, dst, lo, hi) if (flag_is(f, name)) { long x_ = parse_long(v, name); \
        if (x_ < (lo) || x_ > (hi)) { fail("%s must be in [%ld, %ld], got %ld", name, (long)(lo), (long)(hi), x_); } \
        dst = (int)x_; continue; }
#define FLT_FLAG(name, dst, lo, hi) if (flag_is(f, name)) { double x_ = parse_double(v, name); \
        if (x_ < (lo) || x_ > (hi)) { fail("%s must be in [%g, %g], got %g", name, (double)(lo), (double)(hi), x_); } \
        dst = x_; continue; }
#define STR_FLAG(name, dst) if (flag_is(f, name)) { dst = v; continue; }
#define SIZE_FLAG(k, dst) INT_FLAG(SIZE_FLAGS[k].flag, dst, SIZE_FLAGS[k].lo, SIZE_FLAGS[k].hi)
        STR_FLAG("--model", a->model);
        STR_FLAG("--data", a->data);
        STR_FLAG("--val-data", a->val_data);
        STR_FLAG("--tokenizer", a->tokenizer);
        STR_FLAG("--log", a->log);
        STR_FLAG("--trace", a->trace);
        STR_FLAG("--ckpt-dir", a->ckpt_dir);
        STR_FLAG("--resume", a->resume);
        STR_FLAG("--import-llmc", a->import_llmc);
        STR_FLAG("--export-llmc", a->export_llmc);
        STR_FLAG("--export-hf", a->export_hf);
        STR_FLAG("--import-hf", a->import_hf);
        SIZE_FLAG(SIZE_N_LAYER, a->n_layer);
        SIZE_FLAG(SIZE_N_HEAD, a->n_head);
        SIZE_FLAG(SIZE_N_KV_HEAD, a->n_kv_head);
        SIZE_FLAG(SIZE_D_MODEL, a->d_model);
        SIZE_FLAG(SIZE_D_FF, a->d_ff);
        SIZE_FLAG(SIZE_SEQ_LEN, a->seq_len);
        SIZE_FLAG(SIZE_VOCAB, a->vocab);
        INT_FLAG("--steps", c->steps, 0, 1 << 30);
        INT_FLAG("--warmup", c->warmup, 0, 1 << 30);
        if (flag_is(f, "--micro-batch")) a->micro_batch_given = 1;
        SIZE_FLAG(SIZE_MICRO_BATCH, c->micro_batch);
        SIZE_FLAG(SIZE_GLOBAL_BATCH, c->global_batch);
        FLT_FLAG("--lr", c->lr, 0, 10);
        FLT_FLAG("--min-lr-frac", c->min_lr_frac, 0, 1);
        FLT_FLAG("--weight-decay", c->weight_decay, 0, 10);
        FLT_FLAG("--beta1", c->beta1, 0, 0.999999);
        FLT_FLAG("--beta2", c->beta2, 0, 0.999999);
        FLT_FLAG("--eps", c->eps, 1e-30, 1);  // 0 divides 0 by 0 for a weight whose gradient is 0
        FLT_FLAG("--grad-clip", c->grad_clip, 0, 1e9);
        if (flag_is(f, "--seed")) { long s = parse_long(v, "--seed"); if (s < 0) fail("--seed must be >= 0"); c->seed = (uint64_t)s; continue; }
        SIZE_FLAG(SIZE_DP, c->dp);
        SIZE_FLAG(SIZE_TP, c->tp);
        SIZE_FLAG(SIZE_PP, c->pp);
        SIZE_FLAG(SIZE_VPP, c->vpp);
        INT_FLAG("--zero", c->zero, 0, 2);
        SIZE_FLAG(SIZE_CP, c->cp);
        SIZE_FLAG(SIZE_CP_ULYSSES, a->cp_ulysses);
        if (flag_is(f, "--cp-split")) {
            if (!strcmp(v, "zigzag")) c->cp_contiguous = 0;
            else if (!strcmp(v, "contiguous")) c->cp_contiguous = 1;
            else fail("--cp-split must be zigzag or contiguous, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--cp-kind")) {
            if (!strcmp(v, "ring")) a->cp_kind = CP_RING;
            else if (!strcmp(v, "ulysses")) a->cp_kind = CP_ULYSSES;
            else if (!strcmp(v, "2d")) a->cp_kind = CP_2D;
            else fail("--cp-kind must be ring, ulysses or 2d, got '%s'", v);
            continue;
        }
        INT_FLAG("--eval-every", a->eval_every, 0, 1 << 30);
        INT_FLAG("--val-batches", a->val_batches, 1, 1 << 20);
        INT_FLAG("--sample-every", a->sample_every, 0, 1 << 30);
        INT_FLAG("--sample-len", a->sample_len, 0, 1 << 20);
        INT_FLAG("--log-every", a->log_every, 1, 1 << 30);
        INT_FLAG("--ckpt-every", a->ckpt_every, 0, 1 << 30);
        INT_FLAG("--ckpt-keep", a->ckpt_keep, 1, 1 << 20);
        FLT_FLAG("--timeout-s", a->timeout_s, 1, 1e7);
        FLT_FLAG("--peak-tflops", a->peak_tflops, 1e-6, 1e6);
        if (flag_is(f, "--arch")) {
            if (!strcmp(v, "gpt2")) a->arch = ARCH_GPT2;
            else if (!strcmp(v, "llama")) a->arch = ARCH_LLAMA;
            else fail("--arch must be gpt2 or llama, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--schedule")) {
            if ((c->schedule = schedule_from_name(v)) < 0) fail("--schedule must be gpipe, 1f1b, interleaved, zb-h1 or zb-v, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--recompute")) {
            if (!strcmp(v, "none")) c->recompute = RECOMPUTE_NONE;
            else if (!strcmp(v, "selective")) c->recompute = RECOMPUTE_SELECTIVE;
            else if (!strcmp(v, "full")) c->recompute = RECOMPUTE_FULL;
            else fail("--recompute must be none, selective or full, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--on-nan")) {
            if (!strcmp(v, "skip")) a->on_nan_skip = 1;
            else if (!strcmp(v, "stop")) a->on_nan_skip = 0;
            else fail("--on-nan must be skip or stop, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--comm")) {
            if (!strcmp(v, "nccl")) a->comm_mpi = 0;
            else if (!strcmp(v, "mpi")) a->comm_mpi = 1;
            else fail("--comm must be nccl or mpi, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--weight-pass")) {
            if (!strcmp(v, "immediate")) a->weight_pass_deferred = 0;
            else if (!strcmp(v, "deferred")) a->weight_pass_deferred = 1;
            else fail("--weight-pass must be immediate or deferred, got '%s'", v);
            continue;
        }
        if (flag_is(f, "--gelu-fusion")) {
            if (!strcmp(v, "on")) a->gelu_unfused = 0;
            else if (!strcmp(v, "off")) a->gelu_unfused = 1;
            else fail("--gelu-fusion must be on or off, got '%s'", v);
            continue;
        }
#undef INT_FLAG
#undef FLT_FLAG
#undef STR_FLAG
#undef SIZE_FLAG
        fail("unknown flag %s (see --help)", f);
    }
    // A llama-style arch given without a preset picks the llama default.
    if (a->arch == ARCH_LLAMA && !strcmp(a->model, "small")) a->model = "llama-small";
    const Preset* p = find_preset(a->model);
    if (!p) fail("--model: unknown preset '%s' (see --help)", a->model);
    apply_preset(c, p);
    if (a->arch >= 0) c->arch = a->arch;
    if (a->n_layer) c->n_layer = a->n_layer;
    if (a->n_head) c->n_head = a->n_head, c->n_kv_head = a->n_head;  // plain multi-head unless --n-kv-head
    if (a->n_kv_head) c->n_kv_head = a->n_kv_head;
    if (a->d_model) c->d_model = a->d_model, c->d_ff = 0;  // d_ff follows the width unless --d-ff
    if (a->d_ff) c->d_ff = a->d_ff;
    if (a->seq_len) c->seq_len = a->seq_len;
    if (a->vocab) c->vocab = a->vocab;
    if (c->vpp < 0) c->vpp = c->schedule == SCHED_ZBV ? 2 : 1;
    if (a->cp_ulysses && a->cp_kind != CP_2D) fail("--cp-ulysses %d: only with --cp-kind 2d", a->cp_ulysses);
    if (a->cp_kind == CP_2D && !a->cp_ulysses) fail("--cp-kind 2d needs --cp-ulysses U (the all-to-all degree; the ring is cp / U)");
    if (a->cp_kind == CP_2D && c->cp % a->cp_ulysses) fail("--cp-ulysses %d does not divide --cp %d", a->cp_ulysses, c->cp);
    c->cp_ulysses = a->cp_kind == CP_RING ? 1 : a->cp_kind == CP_ULYSSES ? c->cp : a->cp_ulysses;
    if (c->schedule < 0) c->schedule = c->vpp > 1 ? SCHED_INTERLEAVED : SCHED_1F1B;
    if (c->schedule == SCHED_ZBV && c->vpp != 2) fail("--vpp %d: --schedule zb-v places exactly two chunks per stage (a V); use --vpp 2", c->vpp);
    if (schedule_has_w(c->schedule)) {
        if (a->weight_pass_deferred == 0) fail("--weight-pass immediate: --schedule %s runs each weight pass as its own op (W)", schedule_name(c->schedule));
        if (c->recompute == RECOMPUTE_FULL)
            fail("--recompute full: --schedule %s keeps each layer's activations until its weight pass (W); use --recompute selective", schedule_name(c->schedule));
        a->weight_pass_deferred = 1;
    }
    if (a->weight_pass_deferred < 0) a->weight_pass_deferred = 0;
    if (c->d_model % c->n_head) fail("--d-model %d is not divisible by --n-head %d", c->d_model, c->n_head);
    if (c->n_head % c->n_kv_head) fail("--n-head %d is not divisible by --n-kv-head %d", c->n_head, c->n_kv_head);
    if (c->arch == ARCH_GPT2 && c->n_kv_head != c->n_head) fail("--n-kv-head: grouped-query attention needs --arch llama");
    if (c->arch == ARCH_LLAMA && (c->d_model / c->n_head) % 2) fail("rotary embeddings need an even head size, got %d", c->d_model / c->n_head);
    if (a->weight_pass_deferred && c->recompute == RECOMPUTE_FULL)
        fail("--weight-pass deferred keeps every layer's activations until the chunk's weight passes: not with --recompute full");
    config_finalize(c);
}

#endif
