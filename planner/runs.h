// planner/runs.h: --runs FILE.csv: predict each run of a file exactly as given, and carry
// its other columns (measured step time, MFU, status) through to the output.
#ifndef PLANNER_RUNS_H
#define PLANNER_RUNS_H

#include <ctype.h>  // tolower: a header name as read
#include "planner/search.h"

// The columns a runs file must have (the layouts study's sheets, converted): the setting and
// the layout of each run. Any other column (sheet, status, step_time_s, mfu_pct, ...) is
// carried through to the output unchanged, but for the optional ones below (RUN_OPT_COLS).
enum { RC_MODEL, RC_SEQ_LEN, RC_GPUS, RC_GPUS_PER_NODE, RC_BATCH_TOKENS, RC_SCHEDULE, RC_ZERO, RC_TP, RC_PP, RC_DP,
       RC_MICRO_BATCH, RC_RECOMPUTE, RC_ATTENTION, RC_RMS_KERNEL, RC_SP, N_RUN_COLS };
static const char* const RUN_COLS[N_RUN_COLS] = {
    "model", "seq_len", "gpus",        "gpus_per_node", "global_batch_tokens", "schedule",   "zero", "tp",
    "pp",    "dp",      "micro_batch", "recompute",     "attention",           "rms_kernel", "sp"};
// which of them are integers
static const int RUN_COL_INT[N_RUN_COLS] = {0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1};
// Optional columns the prediction reads (absent: the value in brackets): vpp (the schedule's
// default), cp (1), cp_ulysses (1: a ring; = cp: Ulysses), offload (none|optimizer|activations|both), offload_frames
// (2), reduce_dtype (bf16|fp32: the dtype the gradients are reduced in; empty or absent: the device's grad_bytes;
// torchtitan's FSDP2 mixed_precision_reduce float32), mlp (gelu|relu2|swiglu; empty or absent: --mlp's, else the
// architecture's), pp_split (even|auto|ends; empty or absent: even: ends gives the embedding and the head a layer's
// place each, a framework's cut: software.h SPLIT_ENDS), grad_dtype (bf16|fp32: the dtype the gradients are
// accumulated in over the micro-batches, the model states' gradient bytes, and reduced in unless reduce_dtype says;
// empty or absent: the software's, else the device's grad_bytes; Llama 3's "FP32 gradient accumulation"), dropout
// (the probability a framework's GPT trained at: 0 keeps no masks and runs no dropout kernels; empty or absent:
// --dropout's, else the software's: software.h software_set_dropout), cp_kind (ring|ulysses|2d, checked against
// cp_ulysses, or allgather: Llama 3's all-gather context parallelism, a framework's, with cp_ulysses 1; empty or
// absent: what cp_ulysses gives), grad_alloc (upfront|lazy: a framework's gradients allocated before the step, or
// each chunk's at its first backward, PyTorch autograd's and FSDP's; empty or absent: upfront), fsdp_version (1|2:
// PyTorch FSDP's, with zero 3; 2 copies each gather out on the compute stream, software.h gather_copy_out; empty or
// absent: 1), loss (eager|fused|eager_bf16: what a framework's cross-entropy keeps, memory.h loss_bytes_per_logit;
// empty or absent: the software's), nccl (the NCCL release the run's collectives ran on, MAJOR.MINOR[.PATCH], 2.8 ..
// 2.30: its cost model, device.h NCCL_MODELS; empty or absent: --nccl-version's, else b647562's), grad_accum_pass
// (none|add|cast_add: how a framework's micro-batch gradients reach fp32 buffers built before the step, software.h
// grad_accum_pass, e.g. BLOOM's DeepSpeed BF16_Optimizer cast_add; empty or absent: --grad-accum-pass's, else the
// software's), states_dtype (fp32|bf16: a framework's weights and AdamW states, bf16 with an fp32 master and fp32 m,
// v, or all bf16, KempnerForge's; software.h states_bf16; empty or absent: --states-dtype's, else fp32), grad_sync
// (per_micro_batch|last_micro_batch: a framework's ZeRO 2|3 gradients reduce-scattered after every micro-batch or
// once a step, FSDP2's set_requires_gradient_sync(False) on the others; software.h grad_sync_last; empty or absent:
// --grad-sync's, else per_micro_batch), cross_entropy_loss_fusion (off|on: Megatron-core's
// --cross-entropy-loss-fusion, NeMo's cross_entropy_loss_fusion, its loss's passes compiled into four kernels,
// software.h loss_compiled; --software megatron; empty or absent: --cross-entropy-loss-fusion's, else off),
// loss_vocab (parallel|gathered: a framework's loss under tp over the rank's V / tp logits or over all V after an
// all-gather, software.h loss_gathered; empty or absent: --loss-vocab's, else the software's), tp_async_dgrad (off|on:
// the backward's input-gradient tp collectives after each column-parallel linear's backward, plain DTensor TP, or
// under its weight gradient, Megatron-LM's; software.h tp_async_dgrad; a framework's; empty or absent:
// --tp-async-dgrad's, else the software's).
// Columns that name a setting the planner does not model are refused, so a row is never predicted as another
// layout than the one that ran.
enum { RO_VPP, RO_CP, RO_CP_ULYSSES, RO_OFFLOAD, RO_OFFLOAD_FRAMES, RO_REDUCE_DTYPE, RO_MLP, RO_PP_SPLIT,
       RO_GRAD_DTYPE, RO_DROPOUT, RO_CP_KIND, RO_GRAD_ALLOC, RO_FSDP_VERSION, RO_LOSS, RO_NCCL,
       RO_GRAD_ACCUM_PASS, RO_STATES_DTYPE, RO_GRAD_SYNC, RO_LOSS_COMPILED, RO_LOSS_VOCAB, RO_TP_ASYNC_DGRAD,
       N_RUN_OPT };
static const char* const RUN_OPT_COLS[N_RUN_OPT] = {"vpp",          "cp",           "cp_ulysses", "offload",
                                                    "offload_frames", "reduce_dtype", "mlp",        "pp_split",
                                                    "grad_dtype",   "dropout",      "cp_kind",    "grad_alloc",
                                                    "fsdp_version", "loss",         "nccl",       "grad_accum_pass",
                                                    "states_dtype", "grad_sync",    "cross_entropy_loss_fusion",
                                                    "loss_vocab",   "tp_async_dgrad"};
static const char* const RUN_UNMODELLED[] = {"ep", "expert_parallel", "moe_experts", "cp_split",
                                             "context_parallel_algo", "fsdp", "hsdp", "offload_dir", "cpu_offload"};

#define CSV_MAX_FIELDS 256
#define CSV_MAX_BYTES (64 << 20)
#define RUNS_MAX_CELLS (1 << 24)  // fields of all runs kept, 4 bytes each (64 MiB): 10^6 runs of 16 columns

// A CSV file read whole (RFC 4180): fields separated by commas, records by LF or CRLF; a field
// in double quotes may hold commas, line breaks and "" for a quote. A UTF-8 byte-order mark
// before the first record is skipped. Refused, with the line and column: a NUL byte, text
// after a closing quote ("x"y), a quote that is never closed, more than CSV_MAX_FIELDS fields,
// a control byte (csv_control_byte: a field is copied to the output CSV, which may be a terminal,
// byte for byte, so it is refused rather than changed, as escaping it would).
typedef struct {
    char* text;  // the file, NUL-terminated; fields are unquoted in place
    size_t len, pos;  // its length; where the next record starts
    int line;  // the line the next record starts on (1-based)
} CsvReader;

// Read path whole into *r. Returns 0, or -1 with the reason in err.
static int csv_open(CsvReader* r, const char* path, char* err, size_t err_len) {
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) {
        snprintf(err, err_len, "cannot open '%s': %s", path, why);
        return -1;
    }
    memset(r, 0, sizeof(*r));
    size_t cap = 1 << 16;
    r->text = (char*)xmalloc(cap + 1);
    for (;;) {  // read until the end, growing the buffer to one byte past the cap at most
        r->len += fread(r->text + r->len, 1, cap - r->len, f);
        if (r->len < cap || cap > CSV_MAX_BYTES) break;
        cap = 2 * cap < CSV_MAX_BYTES + 1 ? 2 * cap : CSV_MAX_BYTES + 1;
        r->text = (char*)realloc(r->text, cap + 1);
        if (!r->text) fail("out of memory");
    }
    int bad = ferror(f);
    fclose(f);
    if (bad || r->len > CSV_MAX_BYTES) {
        snprintf(err, err_len, "%s", bad ? "read error" : "larger than 64 MiB");
        free(r->text), r->text = NULL;
        return -1;
    }
    r->text[r->len] = 0;
    if (r->len >= 3 && !memcmp(r->text, "\xef\xbb\xbf", 3)) r->pos = 3;  // a UTF-8 byte-order mark
    r->line = 1;
    return 0;
}

// Whether the byte at t is a control character a field may not hold: C0 but a tab, a line break (a quoted
// field's LF or CRLF) and the record's own end; DEL; C1 as UTF-8 (U+0080..U+009F). ESC and CSI drive a terminal,
// a lone CR sends its line back over itself.
static int csv_control_byte(const char* t, int quoted) {
    unsigned char b = (unsigned char)t[0], next = (unsigned char)t[1];
    if (b == '\t' || (quoted && (b == '\n' || (b == '\r' && next == '\n')))) return 0;
    return b < 0x20 || b == 0x7f || (b == 0xc2 && next >= 0x80 && next <= 0x9f);
}

static int csv_control_error(const char* t, size_t p, int line, size_t line_start, char* err, size_t err_len) {
    snprintf(err, err_len, "line %d, column %zu: a control byte (0x%02x) in a field (a runs file's text is printable: "
             "a tab, and a line break in quotes, are the only others)", line, p - line_start + 1, (unsigned char)t[p]);
    return -1;
}

// The next record: *n fields (pointers into r->text). Returns 1, 0 at the end of the file,
// or -1 with "line L, column C: ..." in err.
static int csv_next(CsvReader* r, char** fields, int* n, char* err, size_t err_len) {
    if (r->pos >= r->len) return 0;
    char* t = r->text;
    size_t p = r->pos, line_start = p;
    int line = r->line;
    *n = 0;
    for (;;) {  // one field per turn
        if (*n == CSV_MAX_FIELDS) {
            snprintf(err, err_len, "line %d: more than %d fields", line, CSV_MAX_FIELDS);
            return -1;
        }
        char *out = t + p, *start = out;
        fields[(*n)++] = start;
        if (t[p] == '"') {
            size_t open = p++;
            int open_line = line;
            size_t open_col = open - line_start + 1;
            for (;;) {
                if (p >= r->len) {
                    snprintf(err, err_len, "line %d, column %zu: the quote opened here is never closed", open_line,
                             open_col);
                    return -1;
                }
                if (t[p] == '"' && t[p + 1] == '"') {
                    *out++ = '"', p += 2;
                    continue;
                }
                if (t[p] == '"') {
                    p++;
                    break;
                }
                if (!t[p]) break;  // a NUL byte: refused below
                if (csv_control_byte(t + p, 1)) return csv_control_error(t, p, line, line_start, err, err_len);
                if (t[p] == '\n') line++, line_start = p + 1;
                *out++ = t[p++];
            }
            if (p < r->len && t[p] && t[p] != ',' && t[p] != '\n' && !(t[p] == '\r' && t[p + 1] == '\n')) {
                snprintf(err, err_len, "line %d, column %zu: text after the closing quote of a field", line,
                         p - line_start + 1);
                return -1;
            }
        } else {
            while (p < r->len && t[p] && t[p] != ',' && t[p] != '\n' && !(t[p] == '\r' && t[p + 1] == '\n')) {
                if (t[p] == '"') {
                    snprintf(err, err_len, "line %d, column %zu: a quote inside an unquoted field", line,
                             p - line_start + 1);
                    return -1;
                }
                if (csv_control_byte(t + p, 0)) return csv_control_error(t, p, line, line_start, err, err_len);
                *out++ = t[p++];
            }
        }
        if (p < r->len && !t[p]) {
            snprintf(err, err_len, "line %d, column %zu: a NUL byte", line, p - line_start + 1);
            return -1;
        }

        char sep = p < r->len ? t[p] : '\n';
        *out = 0;  // out <= t + p: the field is cut in place after its separator was read
        if (sep == ',') {
            p++;
            continue;
        }
        p += sep == '\r' ? 2 : 1;  // the record's end (or the file's)
        r->pos = p, r->line = line + 1;
        return 1;
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

// A value of an integer column in [lo, hi]: 0, or -1 with the reason in err.
static int run_int(const char* s, const char* col, long lo, long hi, long* v, char* err, size_t err_len) {
    errno = 0;
    *v = strtol(s, NULL, 10);
    if (errno || !decimal_text(s, 0) || *v < lo || *v > hi) {  // decimal_text: no blanks around it
        snprintf(err, err_len, "column %s: expected an integer in [%ld, %ld], got '%s'", col, lo, hi, s);
        return -1;
    }
    return 0;
}

// A row's dtype column (reduce_dtype, grad_dtype): the bytes of a value, 2 for bf16, 4 for fp32; -1 with err set.
static int run_dtype_bytes(const char* col, const char* v, char* err, size_t err_len) {
    if (!strcmp(v, "bf16")) return 2;
    if (!strcmp(v, "fp32")) return 4;
    snprintf(err, err_len, "unknown %s '%s' (bf16, fp32)", col, v);
    return -1;
}

// A row's cp_kind column: ring, ulysses and 2d must be what its cp and cp_ulysses give (a row that names one
// is predicted as it, not as another); allgather makes the software's context parallelism Llama 3's (k). Returns
// 0, or -1 with err set.
static int run_cp_kind(const char* v, const ModelConfig* c, PlanSetup* k, char* err, size_t err_len) {
    int kind = -1;
    for (int i = CPK_RING; i < N_CPK; i++) if (!strcmp(v, CPK_NAMES[i])) kind = i;
    if (kind < 0) {
        snprintf(err, err_len, "unknown cp_kind '%s' (ring, ulysses, 2d, allgather)", v);
        return -1;
    }
    if (kind == CPK_ALLGATHER) {
        if (k->own_buffers || c->cp_ulysses > 1) {
            snprintf(err, err_len, "cp_kind allgather: a framework's (not --software trainer), with cp_ulysses 1");
            return -1;
        }
        k->cp_allgather = 1;
    } else if (c->cp > 1 && kind != cp_kind_of(c->cp, c->cp_ulysses)) {
        snprintf(err, err_len, "cp_kind %s: cp %d with cp_ulysses %d is %s", v, c->cp, c->cp_ulysses,
                 CPK_NAMES[cp_kind_of(c->cp, c->cp_ulysses)]);
        return -1;
    } else
        k->cp_allgather = 0;  // the row's kind, not --cp-kind allgather's
    return 0;
}

// Predict one row (opt: its optional columns' fields, NULL where absent). Returns 0 with *r filled, or -1
// with the reason in err. Every number is range-checked (the trainer's ranges, args.h) and
// every product computed in 64 bits before the schedule code sees it.
static int plan_run_row(const int* shape, int mlp, const PlanSetup* setup, const DeviceProfile* dev, char** col,
                        char** opt, ModelConfig* c, PlanResult* r, char* err, size_t err_len) {
    long v[N_RUN_COLS];
    const SizeFlag* size = SIZE_FLAGS;
    long lo[N_RUN_COLS] = {0,
                           size[SIZE_SEQ_LEN].lo,
                           1,
                           1,
                           1,
                           0,
                           0,
                           size[SIZE_TP].lo,
                           size[SIZE_PP].lo,
                           size[SIZE_DP].lo,
                           size[SIZE_MICRO_BATCH].lo,
                           0,
                           0,
                           0,
                           0};
    long hi[N_RUN_COLS] = {0,
                           size[SIZE_SEQ_LEN].hi,
                           PLAN_MAX_GPUS,
                           PLAN_MAX_GPUS,
                           PLAN_MAX_TOKENS,
                           0,
                           3,
                           size[SIZE_TP].hi,
                           size[SIZE_PP].hi,
                           size[SIZE_DP].hi,
                           size[SIZE_MICRO_BATCH].hi,
                           0,
                           0,
                           1,
                           1};
    for (int k = 0; k < N_RUN_COLS; k++)
        if (RUN_COL_INT[k] && run_int(col[k], RUN_COLS[k], lo[k], hi[k], &v[k], err, err_len)) return -1;
    if (v[RC_GPUS] > v[RC_GPUS_PER_NODE] && v[RC_GPUS] % v[RC_GPUS_PER_NODE]) {
        snprintf(err, err_len, "gpus %ld is not a whole number of nodes of gpus_per_node %ld (the planner places "
                 "groups on whole nodes)", v[RC_GPUS], v[RC_GPUS_PER_NODE]);
        return -1;
    }
    if (plan_model(col[RC_MODEL], shape, 0, c, err, err_len)) return -1;
    c->seq_len = (int)v[RC_SEQ_LEN];
    c->mlp = mlp;
    if (opt[RO_MLP] && opt[RO_MLP][0] && (c->mlp = plan_mlp_from_name(opt[RO_MLP])) < 0) {
        snprintf(err, err_len, "unknown mlp '%s' (%s)", opt[RO_MLP], PLAN_MLP_NAMES);
        return -1;
    }
    if (v[RC_BATCH_TOKENS] % c->seq_len || v[RC_BATCH_TOKENS] / c->seq_len > size[SIZE_GLOBAL_BATCH].hi) {
        snprintf(err, err_len, "global_batch_tokens %ld is not a multiple of seq_len %d of at most %ld sequences",
                 v[RC_BATCH_TOKENS], c->seq_len, size[SIZE_GLOBAL_BATCH].hi);
        return -1;
    }
    long vpp = 0, cp = 1, U = 1, frames = 2;
    const SizeFlag* f = SIZE_FLAGS;
    if ((opt[RO_VPP] && run_int(opt[RO_VPP], "vpp", f[SIZE_VPP].lo, f[SIZE_VPP].hi, &vpp, err, err_len)) ||
        (opt[RO_CP] && run_int(opt[RO_CP], "cp", f[SIZE_CP].lo, f[SIZE_CP].hi, &cp, err, err_len)) ||
        (opt[RO_CP_ULYSSES] && run_int(opt[RO_CP_ULYSSES], "cp_ulysses", 1, cp, &U, err, err_len)) ||
        (opt[RO_OFFLOAD_FRAMES] && run_int(opt[RO_OFFLOAD_FRAMES], "offload_frames", 1, 2, &frames, err, err_len)))
        return -1;
    if (cp % U) {
        snprintf(err, err_len, "cp_ulysses %ld does not divide cp %ld", U, cp);
        return -1;
    }
    static const char* const offload_names[4] = {"none", "optimizer", "activations", "both"};
    c->offload = opt[RO_OFFLOAD] && opt[RO_OFFLOAD][0] ? -1 : 0;
    for (int k = 0; k < 4 && c->offload < 0; k++)
        if (!strcmp(opt[RO_OFFLOAD], offload_names[k])) c->offload = k;  // the bits of config.h's OFFLOAD_*
    if (c->offload < 0) {
        snprintf(err, err_len, "unknown offload '%s' (none, optimizer, activations, both)", opt[RO_OFFLOAD]);
        return -1;
    }
    c->offload_frames = (int)frames, c->cp = (int)cp, c->cp_ulysses = (int)U;
    if (v[RC_TP] * v[RC_PP] * v[RC_DP] * cp != v[RC_GPUS]) {
        snprintf(err, err_len, "tp %ld x pp %ld x dp %ld x cp %ld is not gpus %ld", v[RC_TP], v[RC_PP], v[RC_DP], cp,
                 v[RC_GPUS]);
        return -1;
    }
    c->tp = (int)v[RC_TP], c->pp = (int)v[RC_PP], c->dp = (int)v[RC_DP], c->micro_batch = (int)v[RC_MICRO_BATCH],
    c->zero = (int)v[RC_ZERO];
    // with tp 1 sequence parallelism splits nothing (Megatron and Scaling run it as without)
    c->sp = c->tp > 1 && v[RC_SP];
    const char* s = col[RC_SCHEDULE];
    if ((c->schedule = schedule_from_name(s)) < 0) {
        snprintf(err, err_len, "unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipe-v)", s);
        return -1;
    }
    c->vpp = vpp ? (int)vpp : schedule_is_v(c->schedule) ? 2 : 1;  // without a vpp column: the trainer's default
    long long global_batch = v[RC_BATCH_TOKENS] / c->seq_len,
              pairs = global_batch / (v[RC_DP] * v[RC_MICRO_BATCH]) * c->pp * c->vpp;
    if (pairs > PLAN_MAX_PAIRS) {
        snprintf(err, err_len, "%lld (micro-batch, chunk) pairs per step: the planner plays at most %d", pairs,
                 PLAN_MAX_PAIRS);
        return -1;
    }
    s = col[RC_RECOMPUTE];
    c->recompute = plan_recompute_from_name(s);
    if (c->recompute < 0) {
        snprintf(err, err_len, "unknown recompute '%s' (%s)", s, PLAN_RECOMPUTE_NAMES);
        return -1;
    }
    PlanSetup k = *setup;
    if ((k.attention = attn_from_name(col[RC_ATTENTION])) < 0) {
        char names[128];
        snprintf(err, err_len, "unknown attention '%s' (%s)", col[RC_ATTENTION],
                 attn_names_joined(names, sizeof(names), ", "));
        return -1;
    }
    k.rms_kernel = (int)v[RC_RMS_KERNEL];
    const char* rd = opt[RO_REDUCE_DTYPE];
    if (rd && rd[0] && (k.reduce_bytes = run_dtype_bytes("reduce_dtype", rd, err, err_len)) < 0) return -1;
    const char* gd = opt[RO_GRAD_DTYPE];
    if (gd && gd[0]) {
        if ((k.grad_bytes = run_dtype_bytes("grad_dtype", gd, err, err_len)) < 0) return -1;
        if (k.own_buffers && k.grad_bytes != 4) {  // this trainer keeps fp32 gradients (software.h grad_bytes)
            snprintf(err, err_len, "grad_dtype %s: this trainer accumulates its gradients in fp32", gd);
            return -1;
        }
    }
    if (opt[RO_DROPOUT] && opt[RO_DROPOUT][0] && software_set_dropout(&k, opt[RO_DROPOUT], err, err_len)) return -1;
    const char* kind = opt[RO_CP_KIND];
    if (kind && kind[0] && run_cp_kind(kind, c, &k, err, err_len)) return -1;
    const char* ga = opt[RO_GRAD_ALLOC];  // (--grad-alloc, --fsdp-version, --loss for them all: cli.h)
    if (ga && ga[0] && software_set_grad_alloc(&k, "grad_alloc", ga, err, err_len)) return -1;
    const char* gp = opt[RO_GRAD_ACCUM_PASS];  // (after grad_alloc: lazy gradients have no fp32 buffer apart)
    if (gp && gp[0] && software_set_grad_accum(&k, "grad_accum_pass", gp, err, err_len)) return -1;
    const char* sd = opt[RO_STATES_DTYPE];  // (after grad_accum_pass: an fp32 accumulation has an fp32 master)
    if (sd && sd[0] && software_set_states_dtype(&k, "states_dtype", sd, err, err_len)) return -1;
    const char* gs = opt[RO_GRAD_SYNC];
    if (gs && gs[0] && software_set_grad_sync(&k, "grad_sync", gs, c->zero, err, err_len)) return -1;
    const char* fv = opt[RO_FSDP_VERSION];
    if (fv && fv[0] && software_set_fsdp_version(&k, "fsdp_version", fv, c->zero, err, err_len)) return -1;
    if (opt[RO_LOSS] && opt[RO_LOSS][0] && software_set_loss(&k, "loss", opt[RO_LOSS], err, err_len)) return -1;
    const char* lc = opt[RO_LOSS_COMPILED];
    if (lc && lc[0] && software_set_loss_compiled(&k, "cross_entropy_loss_fusion", lc, err, err_len)) return -1;
    const char* lv = opt[RO_LOSS_VOCAB];
    if (lv && lv[0] && software_set_loss_vocab(&k, "loss_vocab", lv, err, err_len)) return -1;
    const char* ta = opt[RO_TP_ASYNC_DGRAD];
    if (ta && ta[0] && software_set_tp_async_dgrad(&k, "tp_async_dgrad", ta, err, err_len)) return -1;
    if (opt[RO_NCCL] && opt[RO_NCCL][0] && software_set_nccl(&k, "nccl", opt[RO_NCCL], err, err_len)) return -1;
    const char* split = opt[RO_PP_SPLIT];
    if (split && split[0]) {
        if (strcmp(split, "even") && strcmp(split, "auto") && strcmp(split, "ends")) {
            snprintf(err, err_len, "unknown pp_split '%s' (even, auto, ends)", split);
            return -1;
        }
        if (k.pipe_split == SPLIT_ENDS) k.pipe_split = SPLIT_LAYERS;  // the row's cut, not --pp-split ends'
        if (strcmp(split, "even") && k.pipe_split != SPLIT_LAYERS) {
            snprintf(err, err_len, "pp_split %s: this software cuts its pipeline by %s", split,
                     pipe_split_name(k.pipe_split));
            return -1;
        }
        if (!strcmp(split, "auto")) c->pp_split = 1;
        if (!strcmp(split, "ends")) k.pipe_split = SPLIT_ENDS;
    }
    if (plan_predict(c, &k, (int)global_batch, (int)v[RC_GPUS_PER_NODE], dev, r)) {
        snprintf(err, err_len, "%s", r->invalid);
        return -1;
    }
    return 0;
}

// Where name is in cols[0..n), or -1.
static int run_col_index(const char* name, const char* const* cols, int n) {
    for (int k = 0; k < n; k++)
        if (!strcmp(name, cols[k])) return k;
    return -1;
}

// The header's names, before any row is read: a column the prediction reads named twice (which one ran is not
// known); a name that is one of its columns' but for case, blanks or '-' ("VPP", " cp": it was carried through
// unread and the rows predicted without it); a setting the planner does not model.
static void runs_header_check(const char* path, char** names, int n_cols) {
    for (int j = 0; j < n_cols; j++) {
        int reads = run_col_index(names[j], RUN_COLS, N_RUN_COLS) >= 0 ||
                    run_col_index(names[j], RUN_OPT_COLS, N_RUN_OPT) >= 0;
        for (int i = 0; i < j && reads; i++)
            if (!strcmp(names[i], names[j]))
                fail("--runs %s: the header names column '%s' twice (columns %d and %d)", path, names[j], i + 1,
                     j + 1);
        char as_read[64];
        size_t m = 0;
        for (const char* p = names[j] + strspn(names[j], " \t"); *p && m + 1 < sizeof(as_read); p++)
            as_read[m++] = *p == '-' || *p == ' ' || *p == '\t' ? '_' : (char)tolower((unsigned char)*p);
        while (m > 0 && as_read[m - 1] == '_') m--;  // the blanks after the name
        as_read[m] = 0;
        if (!reads && (run_col_index(as_read, RUN_COLS, N_RUN_COLS) >= 0 ||
                       run_col_index(as_read, RUN_OPT_COLS, N_RUN_OPT) >= 0))
            fail("--runs %s: column %d is named '%s', not '%s' (names are lower case, with '_', no blanks): as "
                 "named it would be carried through unread", path, j + 1, names[j], as_read);
        char read_cols[512];
        for (size_t k = 0; k < sizeof(RUN_UNMODELLED) / sizeof(RUN_UNMODELLED[0]); k++)
            if (!strcmp(names[j], RUN_UNMODELLED[k]) || !strcmp(as_read, RUN_UNMODELLED[k]))
                fail("--runs %s: column '%s' names a setting the planner does not model (it reads %s beside the "
                     "required ones): remove it to predict the rows without it", path, names[j],
                     names_joined(read_cols, sizeof(read_cols), RUN_OPT_COLS, N_RUN_OPT, ", "));
    }
}

// The runs after the header, each checked as far as it can be before any is predicted (its count of fields, the
// required integer columns, vpp): their count in *n_rows_out, and the offsets of their fields in in->text (field j of
// run i: in->text + cells[i * n_cols + j]; the text is at most 64 MiB), at most RUNS_MAX_CELLS. malloc'ed.
static uint32_t* runs_read(CsvReader* in, const char* path, int n_cols, const int* idx, int vpp_col, int* n_rows_out) {
    uint32_t* cells = NULL;
    size_t cell_cap = 0;
    int n_rows = 0, n, rc;
    char *col[CSV_MAX_FIELDS], err[512];
    for (int line_no = in->line; (rc = csv_next(in, col, &n, err, sizeof(err))) > 0; line_no = in->line) {
        if (n == 1 && !col[0][0]) continue;  // a blank line (often the last)
        if (n != n_cols) fail("--runs %s: line %d: %d fields where the header has %d", path, line_no, n, n_cols);
        long x;
        for (int k = 0; k < N_RUN_COLS; k++)
            if (RUN_COL_INT[k] && run_int(col[idx[k]], RUN_COLS[k], LONG_MIN, LONG_MAX, &x, err, sizeof(err)))
                fail("--runs %s: line %d: column %s: expected an integer, got '%s'", path, line_no, RUN_COLS[k],
                     col[idx[k]]);
        if (vpp_col >= 0 &&
            run_int(col[vpp_col], "vpp", SIZE_FLAGS[SIZE_VPP].lo, SIZE_FLAGS[SIZE_VPP].hi, &x, err, sizeof(err)))
            fail("--runs %s: line %d: %s", path, line_no, err);
        size_t used = (size_t)n_rows * n_cols;
        if (used + n_cols > RUNS_MAX_CELLS)
            fail("--runs %s: line %d: more than %d fields in all (%d runs of %d columns): split the file", path,
                 line_no, RUNS_MAX_CELLS, n_rows, n_cols);
        if (used + n_cols > cell_cap) {
            cell_cap = cell_cap ? 2 * cell_cap : (size_t)256 * n_cols;
            cell_cap = cell_cap < RUNS_MAX_CELLS ? cell_cap : RUNS_MAX_CELLS;
            cells = (uint32_t*)realloc(cells, sizeof(uint32_t) * cell_cap);
            if (!cells) fail("out of memory");
        }
        for (int j = 0; j < n_cols; j++) cells[used + j] = (uint32_t)(col[j] - in->text);
        n_rows++;
    }
    if (rc < 0) fail("--runs %s: %s", path, err);
    if (n_rows == 0) fail("--runs %s: no runs after the header", path);
    *n_rows_out = n_rows;
    return cells;
}

#define RUN_ERRORS_SHOWN 3  // rows whose error the one error line names; the CSV's pred_reason has every row's

// Predict every run of the file at path (the shape flags override every row's preset), to
// the CSV csv_path or, without one, to stdout. The whole file is read and checked first, so
// a malformed one is refused before anything is written. Returns the exit code: 0; 2 when
// some rows could not be evaluated (one error line counts them and names the first; they are
// written with pred_fits 0 and the reason); none evaluated is an error (exit 1, no CSV).
static int plan_runs(const char* path, const char* csv_path, const int* shape, int mlp, const PlanSetup* setup,
                      const DeviceProfile* dev) {
    char err[512], shown[4 * 256];
    CsvReader in;
    if (csv_open(&in, path, err, sizeof(err))) fail("--runs: %s", err);
    AtomicFile csv;
    if (csv_path) output_check(csv_path, "--plan-csv"), atomic_open(&csv, csv_path, "--plan-csv");
    FILE* out = csv_path ? csv.f : stdout;
    char* names[CSV_MAX_FIELDS];
    int n_cols, rc = csv_next(&in, names, &n_cols, err, sizeof(err));
    if (rc < 0) fail("--runs %s: %s", path, err);
    if (rc == 0) fail("--runs %s: the file is empty (expected a header line and runs)", path);
    runs_header_check(path, names, n_cols);
    int idx[N_RUN_COLS];
    for (int k = 0; k < N_RUN_COLS; k++) {
        idx[k] = -1;
        for (int j = 0; j < n_cols; j++) if (!strcmp(names[j], RUN_COLS[k])) idx[k] = j;
        if (idx[k] < 0)
            fail(
                "--runs %s: the header has no column '%s' (needed: model, seq_len, gpus, gpus_per_node, "
                "global_batch_tokens, schedule, zero, tp, pp, dp, micro_batch, recompute, attention, rms_kernel, sp)",
                path, RUN_COLS[k]);
    }
    int opt_idx[N_RUN_OPT];
    for (int k = 0; k < N_RUN_OPT; k++) {
        opt_idx[k] = -1;
        for (int j = 0; j < n_cols; j++) if (!strcmp(names[j], RUN_OPT_COLS[k])) opt_idx[k] = j;
    }
    int n_rows;
    uint32_t* cells = runs_read(&in, path, n_cols, idx, opt_idx[RO_VPP], &n_rows);

    for (int j = 0; j < n_cols; j++) csv_put(out, names[j], 0);
    fprintf(out, "pred_fits,pred_mem_gib,pred_step_s,pred_mfu_pct,pred_reason\n");
    int n_bad = 0, n_fit = 0;
    char* shown_errors[RUN_ERRORS_SHOWN];  // the first rows' errors, printed once the count is known
    plan_progress_set("runs predicted", 0, n_rows);
    for (int i = 0; i < n_rows; i++) {  // a row takes up to a second (pp 256 over 1024 micro-batches: 40 ms)
        stop_if_signalled("predicting the --runs rows");
        plan_progress_tick(i);
        char *row[CSV_MAX_FIELDS], *run_col[N_RUN_COLS], *opt[N_RUN_OPT];
        for (int j = 0; j < n_cols; j++) row[j] = in.text + cells[(size_t)i * n_cols + j];
        for (int k = 0; k < N_RUN_COLS; k++) run_col[k] = row[idx[k]];
        for (int k = 0; k < N_RUN_OPT; k++) opt[k] = opt_idx[k] >= 0 ? row[opt_idx[k]] : NULL;
        ModelConfig c;
        PlanResult r;
        char reason[512];
        int row_rc = plan_run_row(shape, mlp, setup, dev, run_col, opt, &c, &r, reason, sizeof(reason));
        for (int j = 0; j < n_cols; j++) csv_put(out, row[j], 0);
        if (row_rc) {
            if (n_bad < RUN_ERRORS_SHOWN) shown_errors[n_bad] = xstrprintf("row %d: %s", i + 1, reason);
            n_bad++;
            fprintf(out, "0,,,,");
        } else {
            plan_memory_reason(&r, dev->mem_bytes, reason, sizeof(reason));
            n_fit += r.fits;
            fprintf(out, "%d,%.3f,%.4f,%.3f,", r.fits, r.mem_total / GiB, r.t_step, 100 * study_mfu(&c, &r, dev));
        }
        csv_put(out, reason, 1);
    }
    if (n_bad == n_rows)  // nothing predicted: one line, exit 1, no CSV
        fail("--runs %s: none of the %d runs could be evaluated (%s%s)", path, n_rows, shown_errors[0],
             n_rows > 1 ? "; the others too" : "");
    if (csv_path) atomic_commit(&csv);
    else if (fflush(stdout)) fail("--runs: writing the predictions failed: %s", strerror(errno));
    fprintf(csv_path ? stdout : stderr, "%d runs predicted on %s (%d fit, %d do not), %d could not be evaluated%s%s\n",
            n_rows - n_bad, printable(dev->name, shown, sizeof(shown)), n_fit, n_rows - n_bad - n_fit, n_bad,
            csv_path ? "; wrote " : "",
            csv_path ? printable(csv_path, shown + sizeof(shown) / 2, sizeof(shown) / 2) : "");
    if (n_bad) {  // some predicted, some not: the CSV is whole, the exit says that not all went
        char list[RUN_ERRORS_SHOWN * 600] = "";
        for (int i = 0; i < n_bad && i < RUN_ERRORS_SHOWN; i++) {
            size_t at = strlen(list);
            snprintf(list + at, sizeof(list) - at, "%s%s", i ? "; " : "", shown_errors[i]);
            free(shown_errors[i]);
        }
        print_error("--runs %s: %d of the %d runs could not be evaluated (%s%s); the CSV's pred_reason says why for "
                    "each", path, n_bad, n_rows, list, n_bad > RUN_ERRORS_SHOWN ? "; and more" : "");
    }
    free(cells), free(in.text);
    return n_bad ? 2 : 0;
}

#endif
