// planner/cli.h: the command line, ./train --plan [flags]: usage, flags, the printed table,
// the profile lines and the CSV of every layout, and plan_main.
#ifndef PLANNER_CLI_H
#define PLANNER_CLI_H

#include "planner/runs.h"
#include "planner/documents.h"
#include "planner/run_plan.h"

static void plan_usage(void) {
    char attn_names[128];
    printf(
        "usage: ./train --plan [flags]            rank every layout and kernel choice\n"
        "       ./train --plan --runs FILE.csv [flags]  predict the runs of a file (see dev/PLANNER.md): its optional\n"
        "                          columns vpp, cp, cp_ulysses, cp_kind, offload, offload_frames, mlp, pp_split,\n"
        "                          reduce_dtype, grad_dtype, dropout, grad_alloc, fsdp_version, loss, loss_vocab,\n"
        "                          nccl, cross_entropy_loss_fusion, tp_async_dgrad as the flags below (nccl:\n"
        "                          --nccl-version; each flag once, but --device-set: once per key)\n"
        "  --model NAME            preset (default llama-13b); shape: --n-layer --n-head --n-kv-head --d-model --d-ff\n"
        "                          --vocab --seq-len (with --runs all but --seq-len override every row's preset)\n"
        "  --mlp gelu|relu2|swiglu the MLP apart from the attention (default: the architecture's: GPT-2 gelu, LLaMA\n"
        "                          swiglu; another only under any --software but trainer)\n"
        "  --gpus N                GPUs in all (default 8)       --gpus-per-node N (default: the device's)\n"
        "  --device NAME           ");
    char devices[512];
    snprintf(devices, sizeof(devices), "%s (default a100-80gb)", PROFILE_NAMES);
    help_wrap(26, 26, devices);  // (args.h)
    printf(
        "  --device-file FILE      'key = value' profile (optional first key 'base = NAME')\n"
        "  --device-set KEY=VALUE  override one profile key (repeatable; docs/PLANNER.md, an unknown key lists them,\n"
        "                          e.g. tensor_clock in (0, 1]: the clock a power limit sustains)\n"
        "  --peak-tflops X         a GPU's dense peak for MFU, TFLOP/s (the profile key peak_tflops)\n"
        "  --global-batch-tokens N or --global-batch N (sequences; default 4194304 tokens)\n"
        "  --tokens N              plan the run: the global batch and layout of the least time to a target that takes\n"
        "                          N tokens at a small batch (planner/run_plan.h), with the noise scale from\n"
        "                          --noise-scale TOKENS, --noise-log FILE (./train --noise-scale --log FILE) or\n"
        "                          --target-loss L (Kaplan et al. 2020's critical batch at loss L, nats/token)\n"
        "  --attention %s, --rms-kernel on|off   evaluate only these kernels\n"
        "                          (flash_triton, FlashAttention in Triton, and flash3, Hopper's fused attention\n"
        "                          (FlashAttention-3, cuDNN's), only when named)\n"
        "  --software trainer|scaling|framework|foundry|megatron|deepspeed2021|nanotron   what runs the layout: this\n"
        "                          trainer (default, its own buffers), the Aleph Alpha Scaling codebase of the\n"
        "                          layouts study (its rank order, pipeline cut, loss and DP reduction; searched: what\n"
        "                          it runs, 1F1B, ZeRO 0/1, recompute none|full; another named is a what-if), or a\n"
        "                          PyTorch framework (Megatron-LM, FSDP: autograd's activations)\n"
        "                          (foundry: as llm-foundry ran it: dropout 0, flash-attn's fused cross-entropy;\n"
        "                          megatron: Megatron-core/NeMo, tp communication under the GEMMs with SP,\n"
        "                          the dp reduce-scatter and gather chunked under the passes;\n"
        "                          deepspeed2021: DeepSpeed's ZeRO-3 of 2021, a synchronized collective per tensor;\n"
        "                          nanotron: nanotron v0.5's Llama, its compute-cost pipeline cut, fp32 gradient\n"
        "                          accumulation a pass per micro-batch)\n"
        "  --dropout P             a framework's GPT trained at dropout P (default: the software's: Megatron-LM's\n"
        "                          0.1; foundry 0): above 0 its masks are kept and its kernels timed, 0 neither\n"
        "  --grad-alloc upfront|lazy  gradients of framework|foundry|megatron|deepspeed2021: allocated before\n"
        "                          the step (default; Megatron-core's buffer, its GEMMs accumulating into it) or\n"
        "                          each chunk's at its first backward, added by a pass of their own (lazy)\n"
        "  --grad-accum-pass none|add|cast_add  how a framework's micro-batch gradients reach fp32 buffers\n"
        "                          built before the step: none (the GEMMs accumulate, or autograd's lazy .grad),\n"
        "                          add (a kernel a weight: nanotron's, its default), cast_add (a cast then the\n"
        "                          add: DeepSpeed's BF16_Optimizer, BLOOM's); each step clipped and zeroed\n"
        "  --states-dtype fp32|bf16  a framework's weights and AdamW states: bf16 weights with an fp32 master\n"
        "                          and fp32 m, v (default), or all bf16, no master (KempnerForge's model.to(bf16))\n"
        "  --grad-sync per_micro_batch|last_micro_batch  a framework's ZeRO 2|3 gradients reduce-scattered\n"
        "                          after every micro-batch (default), or once under the last, each layer's\n"
        "                          unsharded gradient kept in the reduce dtype till then (FSDP2's no-sync)\n"
        "  --fsdp-version 1|2      ZeRO-3 of framework|foundry|megatron as PyTorch FSDP1 (default: gathered into\n"
        "                          its flat parameter) or FSDP2 (fully_shard: each gather copied into the\n"
        "                          parameters on the compute stream)\n"
        "  --loss eager|fused|eager_bf16  what a framework's cross-entropy keeps for its backward (memory only): its\n"
        "                          fp32 ops' e + 16 bytes a logit (eager), one kernel's / a compiled loss's 2e,\n"
        "                          the logits and their gradient (fused), or torch's on the bf16 logits themselves,\n"
        "                          no fp32 copy, 4e (eager_bf16); default: the software's (foundry fused)\n"
        "  --cross-entropy-loss-fusion off|on  Megatron-core's loss (--software megatron) as one kernel per\n"
        "                          function (torch.compile): e + 20 bytes a logit forward, e + 8 backward, where\n"
        "                          its kernel a pass moves e + 36, e + 12 (default off; NeMo's recipes turn it on)\n"
        "  --loss-vocab parallel|gathered  a framework's loss under tp: each rank over its V/tp logits (default),\n"
        "                          or the logits all-gathered over tp and the loss over all V on every rank\n"
        "  --tp-async-dgrad off|on a framework's backward tp collective of each column-parallel linear's input\n"
        "                          gradient under its weight gradient (on: Megatron-LM's asynchronous TP, the\n"
        "                          default) or after it, exposed (off: plain DTensor TP, torchtitan, KempnerForge)\n"
        "  --nccl-version V        price the collectives by NCCL release V's cost model (2.8 .. 2.30, e.g. 2.14.3:\n"
        "                          its latencies by release, dev/PLANNER.md); default: b647562's (v2.20.3)\n"
        "  --grad-reduce fp32|bf16 this trainer's dp all-reduce of the gradient (--zero 0|1; bf16: half the bytes,\n"
        "                          a 32 MiB scratch); under another --software the dtype its gradients are reduced\n"
        "                          in (default bf16; fp32: torchtitan's FSDP2, mixed_precision_reduce)\n"
        "  --tp --pp --dp --vpp --micro-batch N, --sp 0|1, --zero 0..3, --pp-split even|auto (both tried) or ends\n"
        "                          (a framework's: the embedding and the head a layer's place each in the cut),\n"
        "  --recompute none|selective|full|selective_op|selective_layer (the last two: torchtitan's policies, not\n"
        "                          searched unless named; dev/PLANNER.md maps each framework's flag to one),\n"
        "  --schedule 1f1b|interleaved|zb-h1|zb-v|dualpipe-v, --offload none|optimizer|activations|both (every\n"
        "                          layout; planner/time.h), --offload-frames 1|2,\n"
        "  --cp N (ranks per sequence: 1 = no context parallelism; powers of two), --cp-kind ring|ulysses|2d,\n"
        "  --cp-ulysses U (the all-to-all degree inside cp; 2d: the ring is cp / U)   evaluate only these layouts\n"
        "  --cp-kind allgather     a framework's: Llama 3's, K and V all-gathered over cp, nothing overlapped\n"
        "  --cp-split zigzag|contiguous|doc   the ring's rows, as ./train's (default zigzag; contiguous: every\n"
        "                          layout's time; doc: each document zig-zagged, under --doc-lengths)\n"
        "  --max-search-min M      refuse a search projected (from its own pace) to take longer (default 10)\n"
        "  --top N                 rows to print (default 20)    --plan-csv FILE  all layouts (or the runs), every "
        "column\n"
        "                          (--plan-csv -: to standard output, which then carries the CSV alone: the table\n"
        "                          and the lines around it go to standard error)\n"
        "  --doc-lengths FILE|lognormal:MEDIAN[:SIGMA]   document lengths (one a line): the best layout's attention "
        "spread\n"
        "                          and pipeline time under --packing concat, greedy and wlb (planner/documents.h)\n"
        "The table ranks the layouts that fit by throughput. Under --software scaling|framework|foundry one whose\n"
        "predicted peak is within %.0f%% of the device's memory (the memory model's uncertainty for another\n"
        "framework's peak) ranks below every layout with more room; under trainer (the default) no room is kept: its\n"
        "buffers are counted exactly. Columns: rank = position in this ranking (not an MPI rank); free GiB = memory\n"
        "left after the predicted peak; MFU%% = model FLOP/s / peak; bubble%% = the busiest stage's idle share of\n"
        "the schedule's makespan; formula = the textbook bubble (p-1)/(m+p-1), the same share, in %%; cp%% = the\n"
        "step's share in context parallelism's unhidden transfers; rms = RMSNorm as one kernel (1) or not (0);\n"
        "attention = the row's kernel (the header's 'attention eff' is this trainer's, for rows that use it).\n"
        "docs/OUTPUT.md.\n",
        attn_names_joined(attn_names, sizeof(attn_names), "|"), 100 * PLAN_MEM_UNCERTAINTY);
}


typedef struct {
    const char* model;
    int shape[PLAN_SHAPE_FLAGS];  // n_layer n_head n_kv_head d_model d_ff vocab seq_len; -1 = the preset's
    int gpus, gpus_per_node, top;
    long global_batch, global_tokens;
    DeviceProfile dev;
    // the software's rank order, pipeline cut, loss, DP reduction (kernels come from the filter or the row)
    PlanSetup setup;
    PlanFilter filter;
    const char *csv, *runs, *doc_lengths;
    int cp_split;  // --cp-split: CP_SPLIT_ZIGZAG, _CONTIGUOUS, _DOC (ModelConfig's cp_contiguous, cp_doc)
    int offload, offload_frames;  // --offload: OFFLOAD_OPTIMIZER | OFFLOAD_ACTIVATIONS for every layout; its frames
    int mlp;                      // --mlp: MLP_* (MLP_ARCH: the architecture's; --runs: rows without an mlp)
    // --tokens (planner/run_plan.h): E_min; the noise scale from --noise-scale, --noise-log or --target-loss
    double run_tokens, noise_scale, target_loss;
    const char* noise_log;
} PlanArgs;

static int plan_int(const char* v, const char* flag, long lo, long hi) {
    long x = parse_long(v, flag);
    if (x < lo || x > hi) fail("%s must be in [%ld, %ld], got %ld", flag, lo, hi, x);
    return (int)x;
}
// A count of tokens (--tokens, --noise-scale, a log's noise_scale): from one token to 1e18, so that every
// figure of the run's plan (steps, hours) is a finite number.
static double plan_tokens(const char* v, const char* what) {
    double x = parse_double(v, what);
    if (!(x >= 1 && x <= 1e18)) fail("%s: expected a number of tokens in [1, 1e18], got '%s'", what, v);
    return x;
}
// A layout filter whose range is the trainer's (args.h SIZE_FLAGS).
static int plan_size_flag(const char* v, int k) {
    return plan_int(v, SIZE_FLAGS[k].flag, SIZE_FLAGS[k].lo, SIZE_FLAGS[k].hi);
}

// --plan-csv -: the CSV to standard output (as the Unix tools read '-'), which then carries it alone.
static int plan_csv_to_stdout(const char* csv) { return csv && !strcmp(csv, "-"); }

// The CSV and standard output are written over no file the planner reads (--runs, --device-file,
// --doc-lengths, --noise-log, the program itself), nor over each other, whatever the paths say: files.h's one rule
// (files_check), as the trainer checks its outputs.
static void plan_outputs_check(const PlanArgs* a, const char* device_file) {
    RunFiles files = {0};
    files_input(&files, "--runs", a->runs);
    files_input(&files, "--noise-log", a->noise_log);
    files_input(&files, "--device-file", device_file);
    files_input(&files, "--doc-lengths", a->doc_lengths);
    if (!plan_csv_to_stdout(a->csv)) files_output(&files, "--plan-csv", a->csv);  // else: standard output's below
    files_std_streams(&files);
    files_program(&files);
    files_check(&files);
    files_free(&files);
}

// The layout filter's flags (--tp ... --cp-kind) into f; 0 when flag is none of them.
static int plan_filter_flag(const char* flag, const char* v, PlanFilter* f) {
    if (!strcmp(flag, "--tp"))
        f->tp = plan_size_flag(v, SIZE_TP);
    else if (!strcmp(flag, "--pp"))
        f->pp = plan_size_flag(v, SIZE_PP);
    else if (!strcmp(flag, "--dp"))
        f->dp = plan_size_flag(v, SIZE_DP);
    else if (!strcmp(flag, "--vpp"))
        f->vpp = plan_size_flag(v, SIZE_VPP);
    else if (!strcmp(flag, "--micro-batch"))
        f->micro_batch = plan_size_flag(v, SIZE_MICRO_BATCH);
    else if (!strcmp(flag, "--sp"))
        f->sp = plan_int(v, flag, 0, 1);
    else if (!strcmp(flag, "--zero"))
        f->zero = plan_int(v, flag, 0, 3);  // ZeRO-3: parallel/zero3.h
    else if (!strcmp(flag, "--attention")) {
        char names[128];
        if ((f->attention = attn_from_name(v)) < 0)
            fail("--attention: expected one of %s, got '%s'", attn_names_joined(names, sizeof(names), ", "), v);
    } else if (!strcmp(flag, "--rms-kernel")) {
        if (!strcmp(v, "on") || !strcmp(v, "1")) f->rms_kernel = 1;
        else if (!strcmp(v, "off") || !strcmp(v, "0")) f->rms_kernel = 0;
        else fail("--rms-kernel: expected on or off, got '%s'", v);
    } else if (!strcmp(flag, "--recompute")) {
        f->recompute = plan_recompute_from_name(v);
        if (f->recompute < 0) fail("--recompute: expected one of %s, got '%s'", PLAN_RECOMPUTE_NAMES, v);
    } else if (!strcmp(flag, "--pp-split")) {
        if (strcmp(v, "even") && strcmp(v, "auto") && strcmp(v, "ends"))
            fail("--pp-split: expected even, auto or ends, got '%s'", v);
        f->pp_split = !strcmp(v, "auto"), f->pp_ends = !strcmp(v, "ends");
    } else if (!strcmp(flag, "--schedule")) {  // the schedules the search tries (plan_schedule_tried)
        f->schedule = schedule_from_name(v);
        if (f->schedule < 0 || f->schedule == SCHED_GPIPE)
            fail("--schedule: expected 1f1b, interleaved, zb-h1, zb-v or dualpipe-v, got '%s'", v);
    } else if (!strcmp(flag, "--cp"))
        f->cp = plan_size_flag(v, SIZE_CP);
    else if (!strcmp(flag, "--cp-ulysses"))
        f->cp_ulysses = plan_size_flag(v, SIZE_CP_ULYSSES);
    else if (!strcmp(flag, "--cp-kind")) {
        f->cp_kind = -1;
        for (int i = CPK_RING; i < N_CPK; i++)
            if (!strcmp(v, CPK_NAMES[i])) f->cp_kind = i;
        if (f->cp_kind < 0) fail("--cp-kind: expected ring, ulysses, 2d or allgather, got '%s'", v);
    } else
        return 0;
    return 1;
}

// The device: a file or a built-in profile, then --device-set's KEY=VALUE and --peak-tflops over it.
static void plan_device(DeviceProfile* d, const char* device, const char* device_file, const char** sets, int n_sets,
                        const char* peak_tflops) {
    char err[512];
    if (device && device_file)  // the file's profile was planned on, --device dropped without a word
        fail("--device %s and --device-file %s both choose the device: give one (a device file starts from "
             "'base = NAME')", device, device_file);
    if (device_file) { if (profile_parse_file(device_file, d, err, sizeof(err))) fail("--device-file: %s", err); }
    else if (profile_builtin(device ? device : "a100-80gb", d))
        fail("--device: unknown device '%s' (known: %s)", device, PROFILE_NAMES);
    for (int k = 0; k < n_sets; k++) {
        char key[64];
        const char* eq = strchr(sets[k], '=');
        if (!eq || eq == sets[k] || (size_t)(eq - sets[k]) >= sizeof(key))
            fail("--device-set: expected KEY=VALUE, got '%s'", sets[k]);
        memcpy(key, sets[k], eq - sets[k]);
        key[eq - sets[k]] = 0;
        if (!strcmp(key, "base"))  // (profile_set's list of keys names it: a device file's)
            fail("--device-set base=%s: a device file's first key; choose a built-in device with --device %s", eq + 1,
                 eq + 1);
        for (int j = 0; j < k; j++)  // a key set twice, as in a device file: which value was meant is not known
            if (!strncmp(sets[j], sets[k], eq - sets[k] + 1))
                fail("--device-set: key %s given twice ('%s', then '%s'): set each key once", key, sets[j], sets[k]);
        if (peak_tflops && !strcmp(key, "peak_tflops"))
            fail("--device-set peak_tflops and --peak-tflops both set the peak: give one");
        if (profile_set(d, key, eq + 1, err, sizeof(err))) fail("--device-set: %s", err);
    }
    if (peak_tflops && profile_set(d, "peak_tflops", peak_tflops, err, sizeof(err))) fail("--peak-tflops: %s", err);
}

// --cp-kind allgather: the software's context parallelism made Llama 3's (software.h cp_allgather), a framework's.
static void plan_cp_allgather(PlanArgs* a) {
    if (a->setup.own_buffers || !a->setup.context_parallel)
        fail("--cp-kind allgather: Llama 3's context parallelism, a framework's (--software framework, foundry, "
             "megatron or deepspeed2021); %s", a->setup.own_buffers ? "this trainer runs ring, ulysses or 2d"
                                                                     : "this software has no context parallelism");
    if (a->cp_split != CP_SPLIT_ZIGZAG || a->filter.cp_ulysses > 1)
        fail("--cp-kind allgather splits each sequence in 2 x cp chunks, whole heads a rank: not with "
             "--cp-split contiguous or doc, nor --cp-ulysses above 1");
    a->setup.cp_allgather = 1;
}

static void plan_parse_args(int argc, char** argv, PlanArgs* a) {
    memset(a, 0, sizeof(*a));
    a->model = "llama-13b";
    for (int k = 0; k < PLAN_SHAPE_FLAGS; k++) a->shape[k] = -1;
    a->gpus = 8, a->gpus_per_node = -1, a->top = 20;
    a->setup = plan_setup_default();
    a->filter = plan_filter_any();
    PlanFilter* f = &a->filter;
    const char* peak_tflops = NULL;
    const char *device = NULL, *device_file = NULL;  // neither: a100-80gb (plan_device)
    const char* sets[64];
    int n_sets = 0, grad_reduce_bf16 = 0, grad_reduce_given = 0;
    const char *dropout = NULL, *grad_alloc = NULL, *grad_accum = NULL, *fsdp_version = NULL, *loss = NULL,
               *nccl = NULL, *states_dtype = NULL, *grad_sync = NULL, *loss_compiled = NULL,
               *loss_vocab = NULL, *tp_async = NULL;
    FlagsGiven given = {"--plan: ", 0, {}};  // --device-set is repeatable (a key it sets twice: plan_device)
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plan")) { flag_once(&given, argv[i], NULL); continue; }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { plan_usage(); exit(stdout_exit_code(0)); }
        if (strncmp(argv[i], "--", 2))
            fail("--plan: unexpected argument '%s' (flags start with --; see --plan --help)", argv[i]);
        char flag[64];  // --gpus=8 as --gpus 8
        const char* eq = strchr(argv[i], '=');
        snprintf(flag, sizeof(flag), "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]), argv[i]);
        if (!eq && i + 1 >= argc) fail("--plan: flag %s needs a value", flag);
        const char* v = eq ? eq + 1 : argv[++i];
        if (strcmp(flag, "--device-set")) flag_once(&given, flag, v);
        int shape_k = -1;
        for (int k = 0; k < PLAN_SHAPE_FLAGS; k++)
            if (!strcmp(flag, SIZE_FLAGS[k].flag)) shape_k = k;
        if (shape_k >= 0)
            a->shape[shape_k] = plan_size_flag(v, shape_k);
        else if (!strcmp(flag, "--model")) {
            find_preset_or_fail("--model", v);
            a->model = v;
        } else if (!strcmp(flag, "--gpus"))
            a->gpus = plan_int(v, flag, 1, PLAN_MAX_GPUS);
        else if (!strcmp(flag, "--gpus-per-node"))
            a->gpus_per_node = plan_int(v, flag, 1, PLAN_MAX_GPUS);
        else if (!strcmp(flag, "--device")) device = v;
        else if (!strcmp(flag, "--device-file")) device_file = v;
        else if (!strcmp(flag, "--device-set")) {
            if (n_sets == 64) fail("--device-set: at most 64");
            sets[n_sets++] = v;
        } else if (!strcmp(flag, "--peak-tflops"))
            peak_tflops = v;  // the device key peak_tflops, its range
        else if (!strcmp(flag, "--global-batch-tokens")) {
            a->global_tokens = parse_long(v, flag);
            if (a->global_tokens < 1 || a->global_tokens > PLAN_MAX_TOKENS)
                fail("--global-batch-tokens must be in [1, %lld], got %ld", PLAN_MAX_TOKENS, a->global_tokens);
        } else if (!strcmp(flag, "--global-batch"))
            a->global_batch = plan_size_flag(v, SIZE_GLOBAL_BATCH);
        else if (!strcmp(flag, "--max-search-min")) {
            double x = parse_double(v, flag);
            if (!(x > 0 && x <= 1e6)) fail("--max-search-min: expected minutes in (0, 1e6], got '%s'", v);
            plan_max_search_s = 60 * x;
        } else if (!strcmp(flag, "--top"))
            a->top = plan_int(v, flag, 1, 1 << 30);
        else if (!strcmp(flag, "--plan-csv")) a->csv = v;
        else if (!strcmp(flag, "--tokens") || !strcmp(flag, "--noise-scale"))
            *(flag[2] == 't' ? &a->run_tokens : &a->noise_scale) = plan_tokens(v, flag);
        else if (!strcmp(flag, "--target-loss")) {
            a->target_loss = parse_double(v, flag);  // its critical batch within plan_tokens' range (run_plan.h)
            if (!(a->target_loss >= KAPLAN_LOSS_MIN && a->target_loss <= KAPLAN_LOSS_MAX))
                fail("--target-loss: expected a loss in [%g, %g] nats per token, got '%s'", KAPLAN_LOSS_MIN,
                     KAPLAN_LOSS_MAX, v);
        } else if (!strcmp(flag, "--noise-log")) a->noise_log = v;
        else if (!strcmp(flag, "--runs")) a->runs = v;
        else if (!strcmp(flag, "--doc-lengths")) a->doc_lengths = v;
        else if (!strcmp(flag, "--cp-split")) {
            const char* names[] = {"zigzag", "contiguous", "doc"};  // layout/config.h's CP_SPLIT_* order
            a->cp_split = -1;
            for (int k = 0; k < 3; k++)
                if (!strcmp(v, names[k])) a->cp_split = k;
            if (a->cp_split < 0) fail("--cp-split: expected zigzag, contiguous or doc, got '%s'", v);
        } else if (!strcmp(flag, "--offload")) {
            const char* names[] = {"none", "optimizer", "activations", "both"};
            a->offload = -1;
            for (int k = 0; k < 4; k++)
                if (!strcmp(v, names[k])) a->offload = k;  // the bits of layout/config.h's OFFLOAD_*
            if (a->offload < 0) fail("--offload: expected none, optimizer, activations or both, got '%s'", v);
        } else if (!strcmp(flag, "--mlp")) {
            if ((a->mlp = plan_mlp_from_name(v)) < 0) fail("--mlp: expected one of %s, got '%s'", PLAN_MLP_NAMES, v);
        } else if (!strcmp(flag, "--dropout"))
            dropout = v;
        else if (!strcmp(flag, "--grad-alloc"))
            grad_alloc = v;
        else if (!strcmp(flag, "--grad-accum-pass"))
            grad_accum = v;
        else if (!strcmp(flag, "--states-dtype"))
            states_dtype = v;
        else if (!strcmp(flag, "--grad-sync"))
            grad_sync = v;
        else if (!strcmp(flag, "--fsdp-version"))
            fsdp_version = v;
        else if (!strcmp(flag, "--loss"))
            loss = v;
        else if (!strcmp(flag, "--cross-entropy-loss-fusion"))
            loss_compiled = v;
        else if (!strcmp(flag, "--loss-vocab"))
            loss_vocab = v;
        else if (!strcmp(flag, "--tp-async-dgrad"))
            tp_async = v;
        else if (!strcmp(flag, "--nccl-version"))
            nccl = v;
        else if (!strcmp(flag, "--offload-frames"))
            a->offload_frames = plan_int(v, flag, 1, 2);
        else if (!strcmp(flag, "--grad-reduce")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) fail("--grad-reduce: expected fp32 or bf16, got '%s'", v);
            grad_reduce_bf16 = !strcmp(v, "bf16"), grad_reduce_given = 1;
        } else if (!strcmp(flag, "--software")) {
            if (!strcmp(v, "trainer")) a->setup = plan_setup_for(SOFTWARE_TRAINER);
            else if (!strcmp(v, "scaling")) a->setup = plan_setup_for(SOFTWARE_SCALING);
            else if (!strcmp(v, "framework"))
                a->setup = plan_setup_for(SOFTWARE_FRAMEWORK);
            else if (!strcmp(v, "foundry"))
                a->setup = plan_setup_for(SOFTWARE_FOUNDRY);
            else if (!strcmp(v, "megatron"))
                a->setup = plan_setup_for(SOFTWARE_MEGATRON);
            else if (!strcmp(v, "deepspeed2021"))
                a->setup = plan_setup_for(SOFTWARE_DEEPSPEED2021);
            else if (!strcmp(v, "nanotron"))
                a->setup = plan_setup_for(SOFTWARE_NANOTRON);
            else
                fail("--software: expected trainer, scaling, framework, foundry, megatron, deepspeed2021 or nanotron, "
                     "got '%s'", v);
        } else if (!plan_filter_flag(flag, v, f))
            fail("--plan: unknown flag '%s' (see --plan --help)", flag);
    }
    // the chunks a schedule takes, refused as ./train refuses them (layout/schedule.h, layout_check.h); not "no layout"
    if (f->vpp > 1 && (f->schedule == SCHED_1F1B || f->schedule == SCHED_ZBH1))
        fail("--vpp %d: --vpp > 1 needs --schedule interleaved, zb-v or dualpipe-v", f->vpp);
    if (f->vpp >= 1 && f->vpp != 2 && schedule_is_v(f->schedule))
        fail("--vpp %d: --schedule %s places exactly two chunks per stage (a V); use --vpp 2", f->vpp,
             schedule_name(f->schedule));
    if ((f->cp >= 0 && (f->cp < 1 || (f->cp & (f->cp - 1)))) ||
        (f->cp_ulysses >= 0 && (f->cp_ulysses < 1 || (f->cp_ulysses & (f->cp_ulysses - 1)))))
        fail("--cp and --cp-ulysses must be powers of two (1, 2, 4, ...)");
    if (f->cp > 0 && f->cp_ulysses > f->cp) fail("--cp-ulysses %d does not divide --cp %d", f->cp_ulysses, f->cp);
    if (a->cp_split == CP_SPLIT_DOC && f->cp_kind == CPK_ULYSSES)  // as ./train (args.h)
        fail("--cp-split doc: splits the ring's rows; --cp-kind ulysses gives every rank whole sequences (balanced)");
    if (f->cp == 1 && f->cp_kind >= 0)  // (the filter would let no layout through)
        fail("--cp-kind %s: how cp > 1 ranks split a sequence, not with --cp 1", CPK_NAMES[f->cp_kind]);
    if (f->cp > 1 && !a->setup.context_parallel)  // (after --software)
        fail("--cp %d: this software has no context parallelism (--software trainer, framework, foundry, megatron or "
             "deepspeed2021 has)", f->cp);

    if (f->cp_kind == CPK_ALLGATHER) plan_cp_allgather(a);  // (after --software, which it checks)
    if (f->pp_ends) {  // (after --software): a framework's cut, the embedding and the head a layer's place each
        if (a->setup.own_buffers || a->setup.pipe_split != SPLIT_LAYERS)
            fail("--pp-split ends: a framework's cut (--software framework, foundry, megatron or deepspeed2021); "
                 "this trainer needs a layer in every chunk, the Scaling codebase cuts by parameters");
        a->setup.pipe_split = SPLIT_ENDS;
    }
    if (f->pp_split == 1 && a->setup.pipe_split != SPLIT_LAYERS)  // (as a runs row's pp_split auto)
        fail("--pp-split auto: this software cuts its pipeline by %s", pipe_split_name(a->setup.pipe_split));
    char why[256];
    if (dropout && software_set_dropout(&a->setup, dropout, why, sizeof(why))) fail("--%s", why);
    // (after --software, which sets their defaults): a runs row's grad_alloc, fsdp_version and loss columns otherwise
    if (grad_alloc && software_set_grad_alloc(&a->setup, "--grad-alloc", grad_alloc, why, sizeof(why))) fail("%s", why);
    if (grad_accum && software_set_grad_accum(&a->setup, "--grad-accum-pass", grad_accum, why, sizeof(why)))
        fail("%s", why);
    // (after --grad-accum-pass: an fp32 accumulation has an fp32 master)
    if (states_dtype && software_set_states_dtype(&a->setup, "--states-dtype", states_dtype, why, sizeof(why)))
        fail("%s", why);
    // the search's ZeRO 2 and 3 layouts (at ZeRO 0 and 1 the gradients are reduced once a step whatever it says)
    if (grad_sync && software_set_grad_sync(&a->setup, "--grad-sync", grad_sync, f->zero, why, sizeof(why)))
        fail("%s", why);
    // the search's ZeRO-3 layouts as that FSDP runs them
    if (fsdp_version &&
        software_set_fsdp_version(&a->setup, "--fsdp-version", fsdp_version, f->zero, why, sizeof(why)))
        fail("%s", why);
    if (loss && software_set_loss(&a->setup, "--loss", loss, why, sizeof(why))) fail("%s", why);
    if (loss_compiled &&
        software_set_loss_compiled(&a->setup, "--cross-entropy-loss-fusion", loss_compiled, why, sizeof(why)))
        fail("%s", why);
    if (loss_vocab && software_set_loss_vocab(&a->setup, "--loss-vocab", loss_vocab, why, sizeof(why)))
        fail("%s", why);
    if (tp_async && software_set_tp_async_dgrad(&a->setup, "--tp-async-dgrad", tp_async, why, sizeof(why)))
        fail("%s", why);
    if (nccl && software_set_nccl(&a->setup, "--nccl-version", nccl, why, sizeof(why))) fail("%s", why);
    // (after --software, which sets the rest of it): this trainer's bf16 all-reduce, or the dtype another
    // framework reduces its gradients in (FSDP2's reduce_dtype; --runs' reduce_dtype column)
    if (a->setup.own_buffers) a->setup.grad_reduce_bf16 = grad_reduce_bf16;
    else if (grad_reduce_given) a->setup.reduce_bytes = grad_reduce_bf16 ? 2 : 4;
    DeviceProfile* d = &a->dev;
    plan_device(d, device, device_file, sets, n_sets, peak_tflops);
    const char* node_from = a->gpus_per_node == -1 ? "the device's gpus_per_node" : "--gpus-per-node";
    if (a->gpus_per_node == -1) a->gpus_per_node = d->gpus_per_node > 0 ? d->gpus_per_node : a->gpus;
    if (a->gpus_per_node < 1) fail("--gpus-per-node must be >= 1, got %d", a->gpus_per_node);
    if (!a->runs && a->gpus > a->gpus_per_node && a->gpus % a->gpus_per_node)  // (a runs row: plan_run_row)
        fail("--gpus %d is not a whole number of nodes of %d GPUs (%s): the planner places groups on whole nodes",
             a->gpus, a->gpus_per_node, node_from);
    if (a->global_batch && a->global_tokens) fail("give --global-batch or --global-batch-tokens, not both");
    int noise_sources = (a->noise_scale > 0) + (a->noise_log != NULL) + (a->target_loss > 0);
    if (a->run_tokens > 0 && noise_sources != 1)
        fail("--tokens: give the noise scale once: --noise-scale TOKENS, --noise-log FILE or --target-loss L");
    if (!(a->run_tokens > 0) && noise_sources)
        fail("--noise-scale, --noise-log and --target-loss plan the run: with --tokens N");
    PlanFilter searched = *f, any = plan_filter_any();  // a runs row gives its layout: the search's filters ignored
    if (searched.cp_kind == CPK_ALLGATHER) searched.cp_kind = -1;  // (allgather and ends set the software, cli above)
    if (searched.pp_ends) searched.pp_ends = 0, searched.pp_split = -1;
    if (a->runs && memcmp(&searched, &any, sizeof(any)))
        fail("--runs: each row gives its layout and kernels; --tp, --pp, --dp, --vpp, --micro-batch, --sp, --zero, "
             "--recompute, --schedule, --cp, --cp-ulysses, --cp-kind ring|ulysses|2d, --pp-split even|auto, "
             "--attention and --rms-kernel filter a search: not with --runs");
    static const char* const unread_by_runs[] = {"--model", "--seq-len", "--gpus", "--gpus-per-node", "--global-batch",
                                                 "--global-batch-tokens", "--offload", "--offload-frames", "--top",
                                                 "--max-search-min", "--doc-lengths", "--cp-split"};
    for (size_t k = 0; a->runs && k < sizeof(unread_by_runs) / sizeof(unread_by_runs[0]); k++)
        for (int j = 0; j < given.n; j++)  // each was dropped without a word
            if (!strcmp(given.at[j].flag, unread_by_runs[k]))
                fail("--runs: %s %s would not be read: each row gives its model, seq_len, gpus, gpus_per_node, "
                     "global_batch_tokens, offload and offload_frames; --top, --max-search-min, --doc-lengths and "
                     "--cp-split shape a search", given.at[j].flag, given.at[j].value);
    if (a->run_tokens > 0 && (a->global_batch || a->global_tokens || a->csv || a->runs))
        fail("--tokens chooses the global batch: not with --global-batch, --global-batch-tokens, --plan-csv or --runs");
    plan_outputs_check(a, device_file);
}

// ----------------------------------------------------------------------------
// Output

// The schedule column: the schedule, "+auto" where the stages are cut by cost (--pp-split auto).
static const char* plan_schedule_str(const PlanResult* p, char* buf, size_t len) {
    snprintf(buf, len, "%s%s", schedule_name(p->schedule), p->pp_split ? "+auto" : "");
    return buf;
}

static void plan_print_table(const PlanResult* r, int n, int top) {
    int host = 0;  // --offload: a column of the host GiB per GPU
    for (int i = 0; i < n; i++) host |= r[i].mem_host > 0;
    printf("%4s %4s %3s %3s %-8s %3s %3s %3s %-16s %-9s %2s %4s %-13s %3s %7s %8s %4s %8s %10s %6s %7s %7s %6s%s\n",
           "rank", "dp", "tp", "cp", "cp kind", "pp", "vpp", "mb", "schedule", "recompute", "sp", "zero", "attention",
           "rms", "mem GiB", "free GiB", "fits", "step s", "tok/s/GPU", "MFU%", "bubble%", "formula", "cp%",
           host ? " host GiB" : "");
    for (int i = 0; i < n && i < top; i++) {
        const PlanResult* p = &r[i];
        char kind[16], sched[24];
        printf(
            "%4d %4d %3d %3d %-8s %3d %3d %3d %-16s %-9s %2d %4d %-13s %3d %7.1f %8.1f %4s %8.3f %10.0f %6.1f %7.2f "
            "%7.2f %6.1f",
            i + 1, p->dp, p->tp, p->cp, cp_kind_str(p, kind, sizeof(kind)), p->pp, p->vpp, p->micro_batch,
            plan_schedule_str(p, sched, sizeof(sched)), plan_recompute_name(p->recompute), p->sp, p->zero,
            ATTN_NAMES[p->setup.attention], p->setup.rms_kernel, p->mem_total / GiB, p->mem_margin / GiB,
            p->fits ? "yes" : "no", p->t_step,
            p->tokens_per_s_per_gpu, 100 * p->mfu, 100 * p->bubble, 100 * p->bubble_formula,
            p->timed ? 100 * p->t_cp_exposed / p->t_step : 0);
        if (host) printf(" %8.1f", p->mem_host / GiB);
        printf("\n");
    }
}

// MFU with the causal attention counted as run, its visible half: Megatron-LM's count (megatron/training/training.py
// num_floating_point_operations at 001b00c, the core attention's "seq_length / 2  # causal mask": 6N + 6 L d T a
// token). MFU% stays PaLM's (config_flops_per_token: the whole T x T, 12 L d T; torchtitan's get_num_flop_per_token
// at 9fd2b51 likewise, "we follow the convention and do not account for sparsity in causal attention"), as every
// source states its MFU; the planner's kernels run the causal half (time.h layer_time, FlashAttention's backward
// 2.5x its forward: 7 L d T a token), so at efficiencies of 1 PaLM's MFU reaches (6N + 12 L d T) / (6N + 7 L d T)
// of the peak, past 100% where attention is most of the work, and this count stays under it.
static double plan_mfu_causal(const ModelConfig* c, const PlanResult* p) {
    double palm = config_flops_per_token(c, c->seq_len);
    return p->mfu * (palm - 6.0 * c->n_layer * c->d_model * c->seq_len) / palm;
}

// Write every layout to the CSV f (a file opened before the search, so a bad path fails at once, or standard output).
static void plan_write_csv(FILE* f, const ModelConfig* c, const DeviceProfile* d, const PlanResult* r, int n) {
    fprintf(f,
            "dp,tp,pp,cp,cp_ulysses,cp_kind,cp_off_node,vpp,micro_batch,n_micro,schedule,pp_split,recompute,sp,zero,"
            "attention,rms_kernel,"
            "in_flight,w_pending,worst_stage,mem_weights_gib,mem_grads_gib,mem_optim_gib,mem_act_gib,mem_w_inputs_gib,"
            "mem_temp_gib,"
            "mem_overhead_gib,mem_total_gib,mem_margin_gib,fits,t_layer_fwd_s,t_layer_bwd_s,t_layer_w_s,t_tp_comm_s,t_"
            "cp_comm_s,t_cp_exposed_s,cp_gib,"
            "t_p2p_s,t_pipeline_s,t_dp_comm_s,t_dp_exposed_s,t_optim_s,t_step_s,bubble,bubble_formula,tokens_per_s_"
            "per_gpu,"
            "model_tflops_per_gpu,mfu,hfu,mfu_study,mfu_causal\n");
    for (int i = 0; i < n; i++) {
        const PlanResult* p = &r[i];
        fprintf(
            f,
            "%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%s,%s,%s,%d,%d,%s,%d,%d,%d,%d,"
            "%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,",
            p->dp, p->tp, p->pp, p->cp, p->cp_ulysses, CPK_NAMES[cp_kind_run(p->cp, p->cp_ulysses, &p->setup)],
            p->cp_off_node,
            p->vpp, p->micro_batch, p->n_micro, schedule_name(p->schedule),
            p->pp_split ? "auto" : p->setup.pipe_split == SPLIT_ENDS ? "ends" : "even",
            plan_recompute_name(p->recompute), p->sp,
            p->zero, ATTN_NAMES[p->setup.attention], p->setup.rms_kernel, p->in_flight, p->w_pending, p->worst_stage,
            p->mem_weights / GiB, p->mem_grads / GiB, p->mem_optim / GiB, p->mem_act / GiB, p->mem_w_inputs / GiB,
            p->mem_temp / GiB, p->mem_overhead / GiB, p->mem_total / GiB, p->mem_margin / GiB, p->fits);
        if (!p->timed) { fprintf(f, ",,,,,,,,,,,,,,,,,,,,\n"); continue; }  // does not fit: not simulated
        fprintf(f,
                "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.5f,%.5f,%.2f,%.3f,%.5f,%.5f,%.5f,"
                "%.5f\n",
                p->t_layer_fwd, p->t_layer_bwd, p->t_layer_w, p->t_tp_comm, p->t_cp_comm, p->t_cp_exposed,
                p->cp_bytes / GiB, p->t_p2p, p->t_pipeline, p->t_dp_comm, p->t_dp_exposed, p->t_optim, p->t_step,
                p->bubble, p->bubble_formula, p->tokens_per_s_per_gpu, p->model_tflops_per_gpu, p->mfu, p->hfu,
                study_mfu(c, p, d), plan_mfu_causal(c, p));
    }
}

static void plan_print_profile(const DeviceProfile* d, const PlanSetup* k, int gpus_per_node) {
    char name[4 * sizeof(d->name)], kernels[96];
    DeviceProfile sw = plan_software_device(k, d);  // the matmul rate and gradients the prediction uses
    // the rates the software's kernels run at (plan_predict_ex): this trainer's own, or a framework's
    if (k->own_kernels)
        snprintf(kernels, sizeof(kernels), "matmul eff %.2f (+%.0f us), attention eff %.3f (this trainer's kernels)",
                 sw.matmul_eff, d->matmul_latency * 1e6, sw.attn_eff_own);
    else
        snprintf(kernels, sizeof(kernels), "matmul eff %.2f (+%.0f us), attention eff flash2 %.2f flash1 %.2f bmm %.2f",
                 sw.matmul_eff, d->matmul_latency * 1e6, sw.attn_eff_flash2, sw.attn_eff_flash1, sw.bmm_eff);
    char clock[64] = "";
    if (d->tensor_clock != 1) snprintf(clock, sizeof(clock), " at %.3f of its clock (tensor_clock)", d->tensor_clock);
    char pair[64] = "";  // a board with no NVSwitch: a group gets the links among its GPUs (time.h intra_group_bw)
    if (d->intra_pair_bw > 0) snprintf(pair, sizeof(pair), " (no NVSwitch: %.0f a pair)", d->intra_pair_bw / 1e9);
    printf("device %s: %.4g TFLOP/s peak%s, %s, %.0f GiB (reserve %.1f + %.0f%% of activations), "
           "HBM %.0f GB/s x %.2f\n",
           printable(d->name, name, sizeof(name)), d->peak_flops / 1e12, clock, kernels, d->mem_bytes / GiB,
           d->mem_overhead / GiB, k->alloc_share ? 100 * d->mem_frag : 0.0, d->hbm_bw / 1e9, d->hbm_eff);
    printf(
        "links: %d GPUs/node, intra %.0f GB/s/GPU%s, %g NICs/GPU x %.1f GB/s, link eff %.2f (%s; NICs %.2f), "
        "DP overlap %.2f, interference %.2f; %s weights, %d-byte grads\n",
        gpus_per_node, d->intra_bw / 1e9, pair, d->nics_per_gpu, d->nic_bw / 1e9, software_link_eff(k, d),
        k->nccl_links ? "link_eff_nccl: NCCL's measured" : "link_eff: fitted to the study", d->nic_eff,
        k->dp_after_backward ? 0.0 : d->dp_overlap, software_nccl_interference(k, d),
        d->dtype_bytes == 2 ? "bf16" : "fp32", sw.grad_bytes);
    const NcclModel* m = nccl_model_of(k->nccl_release);
    if (m) {  // a named release (--nccl-version): its numbers in place of b647562's (time.h ring_latency)
        // patch 0 is a minor with no row of its own ("2.9", "2.9.0": no NCCL tag has patch 0): any of its releases,
        // "2.9.x", priced by the row before it
        char patch[16] = "x";
        if (k->nccl_release % 100) snprintf(patch, sizeof(patch), "%d", k->nccl_release % 100);
        printf("nccl: %d.%d.%s, by the cost model of %d.%d.%d on: ring network hop %.1f us, tree base %.1f + hops "
               "%.0f / %.0f us, all-reduce plateau %.1f, net overhead %s\n",
               k->nccl_release / 10000, k->nccl_release / 100 % 100, patch, m->from / 10000, m->from / 100 % 100,
               m->from % 100, m->ring_net_hop * 1e6, m->tree_base * 1e6, m->tree_nvlink_hop * 1e6,
               m->tree_net_hop * 1e6, m->plateau, m->net_overhead ? "yes" : "no");
    }
    printf("software: rank order %s, pipeline cut by %s, pipeline sends %s, tp backward collectives %s, %s%s loss, "
           "gradients reduced %s, %s%s\n",
           k->rank_order == ORDER_TP_PP_DP ? "tp-cp-pp-dp" : "tp-cp-dp-pp",
           pipe_split_name(k->pipe_split),
           k->pipe_send_wait == SENDS_WAIT ? "blocking"
           : k->pipe_send_wait == SENDS_WAIT_ENDS
               ? "blocking in warm-up and cool-down (interleaved: a pending receive's 2 SMs under the steady state)"
               : "asynchronous",
           k->tp_comm_overlap  ? "beside the GEMMs (userbuffers) with sp, else under the weight gradients"
           : k->tp_async_dgrad ? "under the weight gradients"
                               : "exposed",
           k->loss == LOSS_FUSED        ? "fused "
           : k->loss == LOSS_EAGER_BF16 ? "bf16 "
           : k->loss_compiled           ? "compiled "
                                        : "",
           k->loss_gathered ? "gathered-vocabulary" : "vocabulary-parallel",
           k->dp_after_backward ? "after the backward" : "during the backward",
           !k->context_parallel ? "no context parallelism"
           : k->cp_allgather    ? "context parallelism all-gather (Llama 3's)"
                                : "context parallelism ring | ulysses | 2d",
           k->gather_copy_out ? ", ZeRO-3 as FSDP2 (each gather copied out on the compute stream)" : "");
}

// A reason that cut layouts, counted; reasons that differ only in their numbers are one (shape: each run of
// digits as #), said in the words of the first layout it cut.
typedef struct {
    char shape[200], first[320];
    int n;
} PlanCut;
enum { PLAN_CUTS = 16, PLAN_CUTS_SAID = 3 };

static void plan_cut_shape(const char* why, char* out, size_t cap) {
    size_t j = 0;
    for (const char* p = why; *p && j + 1 < cap; p++)
        if (!(*p >= '0' && *p <= '9')) out[j++] = *p;
        else if (p == why || !(p[-1] >= '0' && p[-1] <= '9')) out[j++] = '#';
    out[j] = 0;
}

// No layout can run: the reasons that cut the layouts the filters let through, the most common first, each with
// its count and first layout (the trainer's words), in one line; or that the filters let none through.
static void plan_no_layout(const ModelConfig* c, const PlanArgs* a, int global_batch) {
    PlanKeys keys = plan_keys(c, a->gpus, global_batch, a->gpus_per_node, &a->setup, &a->filter);
    if (keys.n == 0)
        fail("no valid layout: none of %d GPUs passes the filters (tp x cp x pp x dp = GPUs, dp divides the global "
             "batch %d, micro-batches and cp powers of two, at most %d (micro-batch, chunk) pairs per step)",
             a->gpus, global_batch, PLAN_MAX_PAIRS);
    PlanCut cuts[PLAN_CUTS];
    int n_cuts = 0, unsaid = 0, past = 0;  // past: cut by reasons beyond the PLAN_CUTS kept
    plan_progress_set("layouts checked for why they cannot run", 0, keys.n);
    for (int i = 0; i < keys.n; i++) {
        if (!(i & 4095)) stop_if_signalled("finding why no layout can run"), plan_progress_tick(i);
        const PlanKey* key = &keys.k[i];
        PlanResult r;
        plan_predict_key(c, key, global_batch, a->gpus_per_node, &a->dev, &a->setup, PLAN_TIME_FITTING, &r);
        char shape[200];
        plan_cut_shape(r.invalid ? r.invalid : "?", shape, sizeof(shape));
        int g = 0;
        while (g < n_cuts && strcmp(cuts[g].shape, shape)) g++;
        if (g == PLAN_CUTS) { unsaid++, past = 1; continue; }
        if (g == n_cuts) {
            n_cuts++, cuts[g].n = 0;
            snprintf(cuts[g].shape, sizeof(cuts[g].shape), "%s", shape);
            snprintf(cuts[g].first, sizeof(cuts[g].first), "dp %d tp %d cp %d pp %d vpp %d micro-batch %d: %s",
                     key->dp, key->tp, key->cp, key->pp, key->vpp, key->mb, r.invalid ? r.invalid : "?");
        }
        cuts[g].n++;
    }
    for (int g = 1; g < n_cuts; g++)  // the most common first (an insertion sort: a few)
        for (int h = g; h > 0 && cuts[h].n > cuts[h - 1].n; h--) {
            PlanCut t = cuts[h];
            cuts[h] = cuts[h - 1], cuts[h - 1] = t;
        }
    char line[1400];
    int used = snprintf(line, sizeof(line), "no valid layout: none of the %d layouts the filters let through can run",
                        keys.n);
    for (int g = 0; g < n_cuts && g < PLAN_CUTS_SAID && used < (int)sizeof(line); g++)
        used += snprintf(line + used, sizeof(line) - used, "%s %d like %s", g ? ";" : ":", cuts[g].n, cuts[g].first);
    for (int g = PLAN_CUTS_SAID; g < n_cuts; g++) unsaid += cuts[g].n;
    int others = n_cuts - PLAN_CUTS_SAID;
    if (unsaid && used < (int)sizeof(line))
        snprintf(line + used, sizeof(line) - used, "; %d more by %s%d other reason%s (narrow the search to see them)",
                 unsaid, past ? "over " : "", others, others == 1 && !past ? "" : "s");
    fail("%s", line);
}

// A stop (Ctrl-C, SIGTERM, SIGHUP, a closed stdout) during a search: recorded, and the search ends
// within a block of layouts, exit 128 + the signal, the CSV's temporary removed (search.h).
static void plan_on_signal(int sig) { stop_signal = sig; }

static int plan_main(int argc, char** argv) {
    PlanArgs a;
    plan_started_s = now_s();
    int stops[4] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (int i = 0; i < 4; i++) signal(stops[i], plan_on_signal);
    plan_parse_args(argc, argv, &a);
    if (a.runs)  // (--plan-csv -: as without it, the CSV to standard output and the summary to stderr)
        return plan_runs(a.runs, plan_csv_to_stdout(a.csv) ? NULL : a.csv, a.shape, a.mlp, &a.setup, &a.dev);
    ModelConfig c;
    char err[512];
    if (plan_model(a.model, a.shape, 0, &c, err, sizeof(err))) fail("%s", err);
    c.offload = a.offload, c.offload_frames = a.offload_frames, c.mlp = a.mlp;
    c.cp_contiguous = a.cp_split == CP_SPLIT_CONTIGUOUS, c.cp_doc = a.cp_split == CP_SPLIT_DOC;
    long global_batch = a.global_batch;
    if (!global_batch) {
        long tokens = a.global_tokens ? a.global_tokens : 4194304;
        if (tokens % c.seq_len)
            fail("--global-batch-tokens %ld is not a multiple of the sequence length %d", tokens, c.seq_len);
        global_batch = tokens / c.seq_len;
    }
    if (global_batch > (1L << 30)) fail("the global batch is too large");
    if (a.run_tokens > 0) {
        char source[256];
        double b_noise = a.noise_scale;
        if (a.noise_log)
            b_noise = noise_scale_from_log(a.noise_log), snprintf(source, sizeof(source), "%s", a.noise_log);
        else if (a.target_loss > 0)
            b_noise = kaplan_critical_batch(a.target_loss),
            snprintf(source, sizeof(source), "Kaplan et al. 2020's critical batch at loss %g", a.target_loss);
        else snprintf(source, sizeof(source), "--noise-scale");
        printf("plan: %s (%s, L=%d h=%d), seq %d, %d GPUs\n", a.model, arch_name(c.arch), c.n_layer, c.d_model,
               c.seq_len, a.gpus);
        plan_print_profile(&a.dev, &a.setup, a.gpus_per_node);
        run_plan(&c, a.gpus, a.gpus_per_node, &a.dev, &a.setup, &a.filter, a.run_tokens, b_noise, source);
        return 0;
    }
    DocLengths docs = {0};  // read before the search: a bad --doc-lengths is its one error line
    if (a.doc_lengths) doc_lengths_load(a.doc_lengths, &docs);
    AtomicFile csv = {0};
    FILE* csv_out = NULL;
    if (plan_csv_to_stdout(a.csv)) {
        // standard output carries the CSV alone: it keeps the CSV's stream, and the table's printf goes to stderr
        int fd = dup(STDOUT_FILENO);
        if (fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0 || !(csv_out = fdopen(fd, "w")))
            fail("--plan-csv -: cannot keep standard output for the CSV: %s", strerror(errno));
        setvbuf(stdout, NULL, _IOLBF, 0);  // each line in its place among stderr's (progress, errors)
    } else if (a.csv) {
        output_check(a.csv, "--plan-csv"), atomic_open(&csv, a.csv, "--plan-csv");
        csv_out = csv.f;
    }

    char b1[32], b2[32];
    printf("plan: %s (%s%s%s, L=%d h=%d heads=%d/%d d_ff=%d vocab=%d), seq %d, %s params, %.4g GFLOP/token (PaLM)\n",
           a.model, arch_name(c.arch), c.mlp ? " with a " : "", c.mlp ? MLP_NAMES[c.mlp] : "", c.n_layer, c.d_model,
           c.n_head, c.n_kv_head, c.d_ff, c.vocab, c.seq_len,
           fmt_count(config_num_params(&c), b1), config_flops_per_token(&c, c.seq_len) / 1e9);
    printf("%d GPUs, global batch %ld sequences = %s tokens\n", a.gpus, global_batch,
           fmt_count((double)global_batch * c.seq_len, b2));
    plan_print_profile(&a.dev, &a.setup, a.gpus_per_node);

    // the CSV holds every layout: the exhaustive search; the table needs only its first rows
    PlanResult* res;
    int n, n_rows, n_fit = 0;
    if (a.csv) {
        n = n_rows = plan_enumerate(&c, a.gpus, (int)global_batch, a.gpus_per_node, &a.dev, &a.setup, &a.filter, &res);
        plan_sort(res, n);
        for (int i = 0; i < n; i++) n_fit += res[i].fits;
    } else {
        n_rows = plan_search(&c, a.gpus, (int)global_batch, a.gpus_per_node, &a.dev, &a.setup, &a.filter, a.top, &res,
                             &n, &n_fit);
    }
    if (n == 0) plan_no_layout(&c, &a, (int)global_batch);
    printf("%d layouts evaluated, %d fit in memory%s\n\n", n, n_fit, n_fit ? "" : " (showing the non-fitting ones)");
    plan_print_table(res, n_fit ? (n_rows < n_fit ? n_rows : n_fit) : n_rows, a.top);
    int shown_unfit = n_fit ? 0 : (n_rows < a.top ? n_rows : a.top);  // nothing fits: the table shows those
    if (n_fit + shown_unfit < n)
        printf("(%d %slayouts that do not fit are not shown%s)\n", n - n_fit - shown_unfit, shown_unfit ? "more " : "",
               a.csv ? "; they are in the CSV" : "; see --plan-csv");
    PlanFilter any = plan_filter_any();
    int best = plan_best(res, n_rows, &any);
    if (best >= 0) {
        const PlanResult* p = &res[best];
        // as ./train flags
        int kind = cp_kind_run(p->cp, p->cp_ulysses, &p->setup);
        char cp_flags[64] = "";
        if (kind == CPK_2D)
            snprintf(cp_flags, sizeof(cp_flags), " --cp %d --cp-kind 2d --cp-ulysses %d", p->cp, p->cp_ulysses);
        else if (kind != CPK_NONE)
            snprintf(cp_flags, sizeof(cp_flags), " --cp %d --cp-kind %s", p->cp, CPK_NAMES[kind]);
        if ((kind == CPK_RING || kind == CPK_2D) && a.cp_split)
            snprintf(cp_flags + strlen(cp_flags), sizeof(cp_flags) - strlen(cp_flags), " --cp-split %s",
                     a.cp_split == CP_SPLIT_DOC ? "doc" : "contiguous");
        char host_note[48] = "";  // --offload: the host memory per GPU
        if (p->mem_host > 0) snprintf(host_note, sizeof(host_note), ", host %.1f GiB", p->mem_host / GiB);
        printf(
            "best: --dp %d --tp %d%s --pp %d --vpp %d --micro-batch %d --recompute %s%s --zero %d --schedule %s%s, %s "
            "attention, rms kernel %s  (%.1f%% MFU, %.1f%% HFU, %.4g TFLOP/s/GPU, %.1f GiB%s)\n",
            p->dp, p->tp, cp_flags, p->pp, p->vpp, p->micro_batch, plan_recompute_name(p->recompute),
            p->sp ? " --sp" : "", p->zero, schedule_name(p->schedule),
            p->pp_split ? " --pp-split auto" : p->setup.pipe_split == SPLIT_ENDS ? " --pp-split ends" : "",
            ATTN_NAMES[p->setup.attention],
            p->setup.rms_kernel ? "on" : "off",
            100 * p->mfu, 100 * p->hfu, p->model_tflops_per_gpu, p->mem_total / GiB, host_note);
        if (p->hfu > 1)  // (plan_mfu_causal)
            printf("note: %s above 100%%: PaLM's count (6N + 12 L d T FLOPs a token) takes the causal attention as "
                   "the whole T x T, of which the kernels run the visible half; counted so (Megatron-LM's "
                   "6N + 6 L d T, the CSV's mfu_causal) this row's MFU is %.1f%%\n", p->mfu > 1 ? "MFU and HFU" : "HFU",
                   100 * plan_mfu_causal(&c, p));
        if (a.doc_lengths) {
            fflush(stdout);  // the table out before the documents' simulation, seconds to minutes
            doc_print_prediction(&docs, &c, p);
        }
    }
    if (a.csv) {
        char shown[4 * 256];
        plan_write_csv(csv_out, &c, &a.dev, res, n);
        if (plan_csv_to_stdout(a.csv)) {  // a reader that closed it ends the run as stdout_exit_code does
            if (fflush(csv_out) || ferror(csv_out)) {
                if (stop_signal == SIGPIPE || errno == EPIPE) exit(128 + SIGPIPE);
                fail("--plan-csv -: writing standard output failed: %s", strerror(errno ? errno : EIO));
            }
            printf("wrote %d layouts to standard output\n", n);
        } else {
            atomic_commit(&csv);
            printf("wrote %d layouts to %s\n", n, printable(a.csv, shown, sizeof(shown)));
        }
    }
    if (!n_fit) {  // no layout to recommend: not a success (the table and the CSV say how far each is)
        double least = res[0].mem_total;
        for (int i = 1; i < n_rows; i++) least = res[i].mem_total < least ? res[i].mem_total : least;
        fail("--plan: none of the %d layouts fits in %.3g GiB per GPU (the least needs %.3g GiB); more GPUs, --zero 3, "
             "--recompute full, --offload, or a device with more memory", n, a.dev.mem_bytes / GiB, least / GiB);
    }
    free(res), free(docs.len);
    return 0;
}

#endif
