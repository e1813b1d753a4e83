// test_layouts.c: the layout suite. Every layout trains the same tiny model on the
// same data with the same seed for 5 optimizer steps, through ./train itself (which
// starts its own ranks under mpirun), and is compared with the single-rank run:
// per-step losses from the JSON log and the final parameters from the checkpoint
// (layout-independent form, so any two runs compare tensor by tensor).
//
// Tolerance: relative 1e-5 on every loss, and on every tensor's parameters as
// ||p - p_ref|| / ||p_ref||. fp32 sums taken in another order (matmuls split over tp,
// gradients summed over dp / micro-batches, sequence shards) differ by a few ulps;
// measured: losses agree to ~1e-8 and parameters to <= 4e-7, so 1e-5 leaves more than
// an order of margin, while a real mistake (a missing reduction, a wrong shard, a
// skipped micro-batch) shows at 1e-3 or more.
// The suite trains with AdamW eps 1e-4 instead of 1e-8: some gradients are zero in
// exact arithmetic (GPT-2's key bias: softmax ignores a constant added to every
// score) and only rounding noise (~1e-9) in fp32; with eps 1e-8 Adam normalizes that
// noise into full-size +-lr updates whose signs depend on the summation order, which
// says nothing about the layout. With eps 1e-4 real gradients (~1e-3) still get Adam's
// normalized step and noise stays noise.
#include <sys/wait.h>
#include "runtime/ckpt.h"
#include "layout/schedule.h"
#include "tests/harness.h"

#define TOL 1e-5
// Every run's training flags (a layout's own --micro-batch or --global-batch replaces these: flags_but)
#define RUN_FLAGS \
    "--warmup 1 --lr 3e-3 --eps 1e-4 --eval-every 0 --sample-len 0 --quiet --micro-batch 8 --global-batch 32"

typedef struct { double loss[64]; int n; float* params; size_t n_full; } RunResult;

static int read_log(const char* path, RunResult* r) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    r->n = 0;
    while (fgets(line, sizeof(line), f)) {
        const char* p = strstr(line, "\"loss\":");
        if (p && r->n < 64 && !strstr(line, "val_loss")) r->loss[r->n++] = atof(p + 7);
    }
    fclose(f);
    return r->n;
}

static int read_ckpt_params(const char* dir, RunResult* r) {
    char path[1024], name[256];
    snprintf(path, sizeof(path), "%s/LATEST", dir);
    FILE* f = fopen(path, "r");
    if (!f || fscanf(f, "%255s", name) != 1) { if (f) fclose(f); return 0; }
    fclose(f);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (!f) return 0;
    int32_t h[256];
    if (fread(h, 4, 256, f) != 256) { fclose(f); return 0; }
    r->n_full = ckpt_header_n_full(h);
    r->params = (float*)xmalloc(sizeof(float) * r->n_full);
    size_t got = fread(r->params, sizeof(float), r->n_full, f);
    fclose(f);
    return got == r->n_full;
}

// The sum over a --log file's lines of the numbers after "key": (the final line's alone for its keys).
static double log_sum(const char* log, const char* key) {
    char k[64], line[4096];
    snprintf(k, sizeof(k), "\"%s\":", key);
    double sum = 0;
    FILE* f = fopen(log, "r");
    for (const char* p; f && fgets(line, sizeof(line), f);) sum += (p = strstr(line, k)) ? atof(p + strlen(k)) : 0;
    if (f) fclose(f);
    return sum;
}

// The run's own planner line against what it allocated: the final log line's activation
// buffers (max over ranks) and the planner's activations for the layout (its worst stage),
// which count the same lists (layout/activations.h): within 2%. With --zero 2|3 on one stage
// (rank 0's is the planner's) and gathered layers resharded: the table's weights and gradients
// (shards, units' buffers, held norm gradients) against the planner's weights, grads and temp.
static void check_planner_memory(const char* tag, const char* flags, const char* log) {
    double measured = log_sum(log, "act_buffer_bytes_max"), planned = log_sum(log, "plan_act_bytes");
    char name[300];
    snprintf(name, sizeof(name), "planner memory %s", tag);
    // with cp the planner sums the buffers cp_alloc allocates (layout/activations.h cp_bufs): to the byte
    double tol = strstr(flags, "--cp") ? 0.5 / measured : 0.02;
    check(measured > 0 && fabs(planned / measured - 1) <= tol, name, "activation buffers %.0f B, planner %.0f B",
          measured, planned);
    int sharded = strstr(flags, "--zero 2") || strstr(flags, "--zero 3");
    if (!sharded || strstr(flags, "--pp") || strstr(flags, "forward off")) return;
    double table = log_sum(log, "param_bytes") + log_sum(log, "grad_bytes");
    double plan = log_sum(log, "plan_weight_bytes") + log_sum(log, "plan_grad_bytes") + log_sum(log, "plan_temp_bytes");
    snprintf(name, sizeof(name), "planner states %s", tag);  // (shards padded to whole floats)
    check(table > 0 && fabs(plan - table) <= 64, name, "weights + grads %.0f B, planner %.0f B", table, plan);
}

// Train with `flags` in a fresh directory; returns 1 on success.
static int train_run(const char* tag, const char* flags, RunResult* r) {
    char dir[512], cmd[4096], out[600], log[600], base[512];
    snprintf(dir, sizeof(dir), "/tmp/test_layouts/%s", tag);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd)) return 0;
    snprintf(out, sizeof(out), "%s/out.txt", dir);
    snprintf(log, sizeof(log), "%s/log.jsonl", dir);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train --steps 5 %s --log %s --ckpt-dir %s %s",
             flags_but(RUN_FLAGS, flags, base, sizeof(base)), log, dir, flags);
    int rc = run_to_file(cmd, out);
    if (rc != 0) {
        printf("FAIL %s: ./train exited %d (see %s)\n", tag, rc, out);
        n_fail++;
        return 0;
    }
    if (read_log(log, r) != 5 || !read_ckpt_params(dir, r)) {
        printf("FAIL %s: missing log lines or checkpoint in %s\n", tag, dir);
        n_fail++;
        return 0;
    }
    check_planner_memory(tag, flags, log);
    return 1;
}

// Compare a run with its reference, tensor by tensor.
static void compare(const char* tag, const char* model_flags, const RunResult* ref, const RunResult* r) {
    double worst_loss = 0;
    for (int i = 0; i < 5; i++) {
        double rel = fabs(r->loss[i] - ref->loss[i]) / fabs(ref->loss[i]);
        if (rel > worst_loss) worst_loss = rel;
    }
    // tensor boundaries from the model's canonical layout
    Args a;
    args_from_flags(&a, model_flags);
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(P, &a.cfg, 1, 0, 1, 1, 0, 1);
    double worst_param = 0;
    char worst_name[32] = "";
    if (r->n_full != ref->n_full || P->n_full != r->n_full)
        worst_param = 1e30, snprintf(worst_name, sizeof(worst_name), "size mismatch");
    else
        for (int i = 0; i < P->n; i++) {
            const Tensor* t = &P->t[i];
            double d = 0, n = 0;
            for (size_t k = t->full_offset; k < t->full_offset + t->size; k++) {
                double x = ref->params[k], y = r->params[k];
                d += (x - y) * (x - y), n += x * x;
            }
            double rel = n > 0 ? sqrt(d / n) : sqrt(d);
            if (rel > worst_param) worst_param = rel, snprintf(worst_name, sizeof(worst_name), "%s", t->name);
        }
    free(P);
    int ok = worst_loss <= TOL && worst_param <= TOL;
    printf("%s %-44s loss rel %.1e, params rel %.1e (worst %s)\n", ok ? "PASS" : "FAIL", tag, worst_loss, worst_param,
           worst_name);
    ok ? n_pass++ : n_fail++;
}

typedef struct { const char* tag; const char* flags; } Layout_;

// ./test_layouts WORD runs only the layouts (and refusals) whose tag holds WORD, with their
// references, and leaves out the rest (the default batch, traces, samples).
static const char* only = NULL;
static int selected(const char* tag) { return !only || strstr(tag, only); }

// Whether layout i of a suite runs: its tag is selected, or it writes the trace (--trace FILE) that a
// selected layout reads (--pp-costs FILE), which then runs after it, as in the suite's order.
static int layout_runs(const Layout_* layouts, int n, int i) {
    if (selected(layouts[i].tag)) return 1;
    const char* trace = strstr(layouts[i].flags, "--trace ");
    if (!trace) return 0;
    char reads[512];
    snprintf(reads, sizeof(reads), "--pp-costs %.*s", (int)strcspn(trace + 8, " "), trace + 8);
    for (int j = i + 1; j < n; j++)
        if (selected(layouts[j].tag) && strstr(layouts[j].flags, reads)) return 1;
    return 0;
}

static void suite(const char* model_tag, const char* model_flags, const Layout_* layouts, int n) {
    RunResult ref = {0};
    char tag[256], flags[1024];
    int any = 0;
    for (int i = 0; i < n; i++) any |= layout_runs(layouts, n, i);
    if (!any) return;
    snprintf(tag, sizeof(tag), "%s_ref", model_tag);
    if (!train_run(tag, model_flags, &ref)) return;
    // the reference itself must learn something, or equal losses prove little
    int falls = ref.loss[4] < ref.loss[0] - 0.05;
    printf("%s %s reference loss falls %.4f -> %.4f\n", falls ? "PASS" : "FAIL", model_tag, ref.loss[0], ref.loss[4]);
    falls ? n_pass++ : n_fail++;
    for (int i = 0; i < n; i++) {
        RunResult r = {0};
        if (!layout_runs(layouts, n, i)) continue;
        snprintf(tag, sizeof(tag), "%s_%s", model_tag, layouts[i].tag);
        snprintf(flags, sizeof(flags), "%s %s", model_flags, layouts[i].flags);
        if (train_run(tag, flags, &r)) compare(tag, model_flags, &ref, &r);
        free(r.params);
    }
    free(ref.params);
}

// ----------------------------------------------------------------------------
// ZeRO-3 checkpoints: each rank holds a shard of the weights, the checkpoint whole tensors.

// Steps up to `steps` with `flags` in dir, as train_run trains, a checkpoint every step.
static int train_in(const char* dir, const char* flags, int steps, int resume) {
    char cmd[4096], out[600], base[512];
    snprintf(out, sizeof(out), "%s/out.txt", dir);
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=1 ./train --steps %d %s --log %s/log.jsonl --ckpt-dir %s --ckpt-every 1 --ckpt-keep 100 "
             "%s %s",
             steps, flags_but(RUN_FLAGS, flags, base, sizeof(base)), dir, dir, resume ? "--resume auto" : "", flags);
    return run_to_file(cmd, out);
}

// A new run directory `to` whose newest checkpoint is from's of `step`.
static int ckpt_copy(const char* from, int step, const char* to) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s && cp %s/ckpt_%08d.bin %s/ && echo ckpt_%08d.bin > %s/LATEST", to, from,
             step, to, step, to);
    return system(cmd);
}

// The newest checkpoint of dir after its 1 KiB header (the weights, Adam m and v); its bytes in *n.
static char* ckpt_body(const char* dir, size_t* n) {
    RunResult r = {0};
    char path[1024], name[256];
    snprintf(path, sizeof(path), "%s/LATEST", dir);
    FILE* f = fopen(path, "r");
    int named = f && fscanf(f, "%255s", name) == 1;
    if (f) fclose(f);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (!named || !read_ckpt_params(dir, &r) || !(f = fopen(path, "rb"))) return free(r.params), NULL;
    *n = sizeof(float) * 3 * r.n_full;
    char* body = (char*)xmalloc(*n);
    int ok = fseek(f, 1024, SEEK_SET) == 0 && fread(body, 1, *n, f) == *n;
    fclose(f);
    free(r.params);
    if (!ok) free(body);
    return ok ? body : NULL;
}

// Steps 1-5 of `flags` in whole, and again in cut resumed from whole's step-3 checkpoint: 1 when
// both end with the same checkpoint, bit for bit (its bytes in *n); the first failing exit in *rc.
static int resumed_bitwise(const char* whole, const char* cut, const char* flags, int* rc, size_t* n) {
    size_t na = 0, nb = 0;
    char *a = NULL, *b = NULL;
    *rc = train_in(whole, flags, 5, 0);
    if (!*rc) *rc = ckpt_copy(whole, 3, cut) ? -1 : train_in(cut, flags, 5, 1);
    if (!*rc) a = ckpt_body(whole, &na), b = ckpt_body(cut, &nb);
    int same = a && b && na == nb && !memcmp(a, b, na);
    free(a), free(b);
    *n = na;
    return same;
}

// Under the same layout a run resumed from its step-3 checkpoint ends with the checkpoint of
// the run that went on, bit for bit; a run that goes dp 2 zero 3 -> pp 2 (no ZeRO) -> dp 2
// tp 2 zero 3 through its checkpoints (steps 1-2, 3-4, 5) matches the 1-rank run (compare: TOL).
static void zero3_checkpoints(void) {
    if (!selected("zero3_ckpt")) return;
    const char *zero3_flags = "--model tiny --dp 2 --zero 3", *root = "/tmp/test_layouts/zero3_ckpt";
    char whole[600], cut[600], pp2[600], back[600], cmd[1400];
    snprintf(whole, sizeof(whole), "%s/whole", root);
    snprintf(cut, sizeof(cut), "%s/cut", root);
    snprintf(pp2, sizeof(pp2), "%s/pp2", root);
    snprintf(back, sizeof(back), "%s/back", root);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", root, whole);
    size_t na = 0;
    int rc = -1, same = system(cmd) ? 0 : resumed_bitwise(whole, cut, zero3_flags, &rc, &na);
    check(same, "zero3_ckpt resume bitwise", "dp 2 zero 3: resumed at step 3 against the run that went on (exit %d, "
          "%zu bytes): %s", rc, na, same ? "identical" : "DIFFER");
    RunResult ref = {0}, r = {0}, part = {0};
    if (!rc) rc = ckpt_copy(whole, 2, pp2) ? -1 : train_in(pp2, "--model tiny --pp 2", 5, 1);
    if (!rc) rc = ckpt_copy(pp2, 4, back) ? -1 : train_in(back, "--model tiny --dp 2 --tp 2 --zero 3", 5, 1);
    // the chain's losses from its three logs: steps 1-2 of whole, 3-4 of pp2, 5 of back
    const char* dirs[3] = {whole, pp2, back};
    static const int take[3] = {2, 2, 1};
    int n = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        snprintf(cmd, sizeof(cmd), "%s/log.jsonl", dirs[k]);
        int got = read_log(cmd, &part);
        for (int i = 0; i < take[k] && i < got; i++) r.loss[n++] = part.loss[i];
    }
    if (rc || n != 5 || !read_ckpt_params(back, &r) || !train_run("zero3_ckpt_ref", "--model tiny", &ref)) {
        printf("FAIL zero3_ckpt reshard: exit %d, %d losses, or no checkpoint in %s\n", rc, n, back);
        n_fail++;
    } else {
        compare("zero3_ckpt_reshard_z3_pp2_tp2z3", "--model tiny", &ref, &r);
    }
    free(ref.params), free(r.params);
}

// A file's text into buf (cap bytes, NUL-terminated; empty when unreadable); its length.
static size_t read_text_file(const char* path, char* buf, size_t cap) {
    FILE* f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    return n;
}

// One step of the tiny model with --trace (its file /tmp/test_layouts/trace_TAG.json read
// into text, its length into *n unless NULL); ./train's exit status.
static int run_trace(const char* tag, const char* flags, char* text, size_t cap, size_t* n) {
    char cmd[1024], path[256], out[256];
    snprintf(path, sizeof(path), "/tmp/test_layouts/trace_%s.json", tag);
    snprintf(out, sizeof(out), "/tmp/test_layouts/trace_%s.txt", tag);
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=1 ./train --model tiny --steps 1 --eval-every 0 --sample-len 0 --quiet %s --trace %s",
             flags, path);
    int rc = run_to_file(cmd, out);
    size_t len = read_text_file(path, text, cap);
    if (n) *n = len;
    return rc;
}

// Run one step with --trace; the compute events (F, B, W) on track `tid` must come in the
// order of schedule_build(sched, stage, pp, 1, m).
static void trace_order(const char* tag, const char* flags, int tid, int sched, int stage, int pp, int m) {
    char tid_key[32];
    static char text[1 << 18];
    int rc = run_trace(tag, flags, text, sizeof(text), NULL);
    snprintf(tid_key, sizeof(tid_key), "\"tid\":%d,", tid);
    char got[512] = "", want[512] = "";
    for (const char* p = text; (p = strstr(p, "{\"name\":\"")); p++) {  // the track's compute events, in order
        char kind;
        int mb;
        const char* t = strstr(p, tid_key);
        if (sscanf(p, "{\"name\":\"%c mb%d", &kind, &mb) == 2 && (kind == 'F' || kind == 'B' || kind == 'W') && t &&
            t < strchr(p, '}') && strlen(got) < 480)
            sprintf(got + strlen(got), "%c%d ", kind, mb);
    }
    PipeOp ops[256];
    int n_ops = schedule_build(sched, stage, pp, 1, m, NULL, ops);
    for (int i = 0; i < n_ops; i++)
        if (ops[i].kind == OP_FWD || ops[i].kind == OP_BWD || ops[i].kind == OP_W)
            sprintf(want + strlen(want), "%c%d ", ops[i].kind == OP_FWD ? 'F' : ops[i].kind == OP_BWD ? 'B' : 'W',
                    ops[i].mb);
    int ok = rc == 0 && !strncmp(text, "{\"displayTimeUnit\"", 18) && strstr(text, "\n]}") && !strcmp(got, want);
    printf("%s trace %s: rank %d runs [%s] (schedule_build: [%s])\n", ok ? "PASS" : "FAIL", tag, tid, got, want);
    ok ? n_pass++ : n_fail++;
}

// --trace with cp R (ring): every rank's track shows each ring step's attention (R per
// layer and pass), the transfers they overlap (R-1 forward, R backward) and the one
// dK,dV transfer home after the backward's last step.
static void trace_ring(int R, int n_layer) {
    char tag[16], flags[32], name[64];
    static char text[1 << 20];
    size_t n;
    snprintf(tag, sizeof(tag), "cp%d", R);
    snprintf(flags, sizeof(flags), "--cp %d", R);
    int rc = run_trace(tag, flags, text, sizeof(text), &n);
    int ok = rc == 0 && n < sizeof(text) - 1, bad_rank = -1, count[3] = {0, 0, 0};
    for (int rank = 0; rank < R && ok; rank++) {
        char tid_key[32];
        snprintf(tid_key, sizeof(tid_key), "\"tid\":%d,", rank);
        count[0] = count[1] = count[2] = 0;
        for (const char* p = text; (p = strstr(p, "{\"name\":\"")); p++) {
            const char* t = strstr(p, tid_key);
            if (!t || t > strchr(p, '}')) continue;
            for (int s = 0; s < R; s++) {
                snprintf(name, sizeof(name), "{\"name\":\"attention ring step %d\"", s),
                    count[0] += !strncmp(p, name, strlen(name));
                snprintf(name, sizeof(name), "{\"name\":\"ring transfer during step %d\"", s),
                    count[1] += !strncmp(p, name, strlen(name));
                snprintf(name, sizeof(name), "{\"name\":\"dK,dV home after step %d\"", s),
                    count[2] += !strncmp(p, name, strlen(name));
            }
        }
        // one micro-batch: per layer R ring steps in the forward and R in the backward
        if (count[0] != 2 * R * n_layer || count[1] != (2 * R - 1) * n_layer || count[2] != n_layer)
            ok = 0, bad_rank = rank;
    }
    printf("%s trace cp%d: each rank shows %d ring-step attentions, %d overlapped transfers and %d dK,dV home",
           ok ? "PASS" : "FAIL", R, 2 * R * n_layer, (2 * R - 1) * n_layer, n_layer);
    if (bad_rank >= 0)
        printf(" (rank %d: %d, %d, %d in /tmp/test_layouts/trace_%s.json)", bad_rank, count[0], count[1], count[2],
               tag);
    printf("\n");
    ok ? n_pass++ : n_fail++;
}

// Sampling under a layout draws the same text as one rank (the same weights after the same
// steps, the same uniform per token on every rank): with cp the token's row is on the rank
// that holds its position, and the window slides past T.
static void sample_matches(const char* tag, const char* flags) {
    if (!selected(tag)) return;
    char cmd[1024], out[256], ref_out[256];
    static char text[2][1 << 14];
    snprintf(ref_out, sizeof(ref_out), "/tmp/test_layouts/sample_1rank.txt");
    snprintf(out, sizeof(out), "/tmp/test_layouts/sample_%s.txt", tag);
    const char* common = "OMP_NUM_THREADS=1 ./train --model tiny --steps 10 --eval-every 0 --sample-len 80 --quiet";
    snprintf(cmd, sizeof(cmd), "%s", common);
    int rc0 = run_to_file(cmd, ref_out);
    snprintf(cmd, sizeof(cmd), "%s %s", common, flags);
    int rc1 = run_to_file(cmd, out);
    for (int k = 0; k < 2; k++) read_text_file(k ? out : ref_out, text[k], sizeof(text[k]));
    char *a = strstr(text[0], "sample:\n"), *b = strstr(text[1], "sample:\n");
    for (int k = 0; k < 2; k++) {  // the sample's line only (the memory report after it differs by layout)
        char* s = k ? b : a;
        if (s && strchr(s + 8, '\n')) *strchr(s + 8, '\n') = 0;
    }
    int ok = rc0 == 0 && rc1 == 0 && a && b && strlen(a) > 60 && !strcmp(a, b);
    printf("%s sample %s draws the 1-rank text (80 tokens, window of 32)\n", ok ? "PASS" : "FAIL", tag);
    ok ? n_pass++ : n_fail++;
}

// A layout that cannot run must say so in one line and exit non-zero.
static void expect_layout_error(const char* tag, const char* flags, const char* needle) {
    if (!selected(tag)) return;
    char cmd[2048], out[512];
    snprintf(out, sizeof(out), "/tmp/test_layouts/err_%s.txt", tag);
    snprintf(cmd, sizeof(cmd), "./train --steps 1 --quiet --sample-len 0 %s", flags);
    int rc = run_to_file(cmd, out);
    char text[8192];
    read_text_file(out, text, sizeof(text));
    int ok = rc != 0 && strstr(text, needle) != NULL;
    printf("%s layout error %-28s exit %d, message has '%s'\n", ok ? "PASS" : "FAIL", tag, rc, needle);
    ok ? n_pass++ : n_fail++;
}

// Every GPT-2 layout against the 1-rank run (tiny: 4 layers), the uneven pipeline cut (3 layers)
// and ZB-V with 4 stages (8 layers).
static void gpt2_suites(void) {
    const char* gpt = "--model tiny";
    static const Layout_ gpt_layouts[] = {
        {"dp2", "--dp 2"},
        {"dp4_grad_accum", "--dp 4"},  // 4 micro-batches on 1 rank == 1 micro-batch on each of 4 ranks
        // --noise-scale: each replica's gradient measured before the dp reduction (ZeRO 0: the layers'
        // reductions wait for it) leaves the math as it was
        {"dp2_noise_scale", "--dp 2 --noise-scale"},
        {"dp2_zero1_pp2_noise_scale", "--dp 2 --zero 1 --pp 2 --noise-scale"},
        {"tp2", "--tp 2"},
        {"tp4", "--tp 4"},
        {"tp2_sp", "--tp 2 --sp"},
        {"tp2_sp_selective", "--tp 2 --sp --recompute selective"},
        {"pp2_gpipe", "--pp 2 --schedule gpipe"},
        {"pp2_1f1b", "--pp 2 --schedule 1f1b"},
        {"pp2_vpp2_interleaved", "--pp 2 --vpp 2"},
        {"pp4_1f1b", "--pp 4"},
        {"pp2_full", "--pp 2 --recompute full"},
        {"pp2_vpp2_selective", "--pp 2 --vpp 2 --recompute selective"},
        {"selective_1rank", "--recompute selective"},
        {"full_1rank", "--recompute full"},
        {"dp2_zero1", "--dp 2 --zero 1"},
        {"dp2_zero2", "--dp 2 --zero 2"},
        {"dp2_zero2_pp2", "--dp 2 --zero 2 --pp 2"},
        // zero 2's gradient a layer at a time (parallel/zero3.h): uneven shards, sp's partial
        // gradients, the tied copy on another stage with two chunks, the weight pass deferred
        {"dp4_zero2", "--dp 4 --zero 2"},
        {"dp2_zero2_tp2_sp", "--dp 2 --zero 2 --tp 2 --sp"},
        {"dp2_zero2_pp2_vpp2", "--dp 2 --zero 2 --pp 2 --vpp 2"},
        {"dp2_zero2_deferred", "--dp 2 --zero 2 --weight-pass deferred"},
        {"dp2_zero2_zbh1", "--dp 2 --zero 2 --schedule zb-h1"},
        {"dp2_zero1_tp2_sp", "--dp 2 --zero 1 --tp 2 --sp"},
        {"tp2_pp2", "--tp 2 --pp 2"},
        {"tp2_pp2_sp_full", "--tp 2 --pp 2 --sp --recompute full"},
        {"dp2_tp2_pp2", "--dp 2 --tp 2 --pp 2"},
        {"dp2_tp2_pp2_vpp2_sp_zero1", "--dp 2 --tp 2 --pp 2 --vpp 2 --sp --zero 1"},
        // ZeRO 0 reduces each layer over dp as the last micro-batch leaves it
        // (layer_grads_final): with chunks interleaved, and with sp's partial gradients
        {"dp2_pp2_vpp2", "--dp 2 --pp 2 --vpp 2"},
        {"dp2_tp2_sp", "--dp 2 --tp 2 --sp"},
        // zero-bubble schedules: W ops, the V placement (stage 0 holds both ends, one wte),
        // dp reduction after each layer's last W, ZeRO-2 after each micro-batch's last W
        {"pp2_zbh1", "--pp 2 --schedule zb-h1"},
        {"pp4_zbh1", "--pp 4 --schedule zb-h1"},
        {"pp2_zbv", "--pp 2 --schedule zb-v"},
        {"tp2_pp2_sp_zbv", "--tp 2 --pp 2 --sp --schedule zb-v"},
        {"tp2_pp2_zbh1_selective", "--tp 2 --pp 2 --schedule zb-h1 --recompute selective"},
        {"dp2_zero1_pp2_zbh1", "--dp 2 --zero 1 --pp 2 --schedule zb-h1"},
        {"dp2_zero2_pp2_zbv", "--dp 2 --zero 2 --pp 2 --schedule zb-v"},
        {"dp2_pp2_zbv", "--dp 2 --pp 2 --schedule zb-v"},
        {"dp2_zero2_pp2_zbh1", "--dp 2 --zero 2 --pp 2 --schedule zb-h1"},
        // DualPipe-V: the V with a fixed order, full backwards (B then W) beside queued W's (2pp micro-batches)
        {"pp2_dualpipev", "--pp 2 --schedule dualpipe-v"},
        {"dp2_zero2_pp2_dualpipev", "--dp 2 --zero 2 --pp 2 --schedule dualpipe-v --micro-batch 4"},
        // context parallelism: the zig-zag ring, Ulysses' all-to-all, both (2D); weights
        // reduced and ZeRO-sharded over dp x cp; positions per row for wpe
        {"cp2_ring", "--cp 2"},
        {"cp4_ring", "--cp 4"},
        {"cp2_ulysses", "--cp 2 --cp-kind ulysses"},
        {"cp4_ulysses", "--cp 4 --cp-kind ulysses"},
        {"cp4_2d_u2", "--cp 4 --cp-kind 2d --cp-ulysses 2"},
        {"cp4_contiguous", "--cp 4 --cp-split contiguous"},
        {"cp2_tp2_sp", "--cp 2 --tp 2 --sp"},
        {"cp2_ulysses_tp2_sp", "--cp 2 --cp-kind ulysses --tp 2 --sp"},
        {"cp2_pp2", "--cp 2 --pp 2"},
        {"cp2_pp2_zbv", "--cp 2 --pp 2 --schedule zb-v"},
        {"dp2_cp2_zero1", "--dp 2 --cp 2 --zero 1"},
        {"cp2_zero2", "--cp 2 --zero 2"},
        {"cp2_selective", "--cp 2 --recompute selective"},
        {"cp2_ulysses_full", "--cp 2 --cp-kind ulysses --recompute full"},
        // ZeRO-3: every weight gathered a layer at a time from the dp x cp shards, gradients
        // reduce-scattered after each layer's backward (after its W when split)
        {"dp2_zero3", "--dp 2 --zero 3"},
        {"dp4_zero3", "--dp 4 --zero 3"},
        {"dp2_zero3_keep", "--dp 2 --zero 3 --reshard-after-forward off"},
        {"dp2_zero3_tp2_sp", "--dp 2 --zero 3 --tp 2 --sp"},
        {"dp2_zero3_pp2_1f1b", "--dp 2 --zero 3 --pp 2 --schedule 1f1b"},
        {"dp2_zero3_pp2_vpp2", "--dp 2 --zero 3 --pp 2 --vpp 2"},
        {"dp2_zero3_pp2_zbv", "--dp 2 --zero 3 --pp 2 --schedule zb-v"},
        {"dp2_zero3_pp2_zbh1", "--dp 2 --zero 3 --pp 2 --schedule zb-h1"},
        {"dp2_cp2_zero3", "--dp 2 --cp 2 --zero 3"},
        {"dp2_zero3_selective", "--dp 2 --zero 3 --recompute selective"},
        {"dp2_zero3_pp2_full", "--dp 2 --zero 3 --pp 2 --recompute full"},
        // the slots across chunk boundaries: interleaved chunks with the forward run again inside
        // the backward, deferred weight passes (a layer's norm gradients held from its B to its
        // W, other layers' backward between), the V with every layer kept
        {"dp2_zero3_pp2_vpp2_full", "--dp 2 --zero 3 --pp 2 --vpp 2 --recompute full"},
        {"dp2_zero3_pp2_vpp2_deferred", "--dp 2 --zero 3 --pp 2 --vpp 2 --weight-pass deferred"},
        {"dp2_zero3_deferred", "--dp 2 --zero 3 --weight-pass deferred"},
        {"dp2_zero3_pp2_zbv_keep", "--dp 2 --zero 3 --pp 2 --schedule zb-v --reshard-after-forward off"},
    };
    suite("gpt2", gpt, gpt_layouts, sizeof(gpt_layouts) / sizeof(gpt_layouts[0]));
}

// GPT-2 shapes other than the tiny preset's: uneven stages, odd sizes, two layers a chunk.
static void gpt2_shape_suites(void) {
    static const Layout_ uneven[] = {{"pp2_uneven_2_1", "--pp 2"}};
    suite("gpt2_3layers", "--model tiny --n-layer 3", uneven, 1);
    // an odd number of weights on a stage (d_ff 255, 3 layers): the shards padded, units cut
    // anywhere by the shard boundaries
    static const Layout_ odd[] = {{"dp4_zero3", "--dp 4 --zero 3"}, {"dp2_zero3_pp2", "--dp 2 --zero 3 --pp 2"}};
    suite("gpt2_odd", "--model tiny --n-layer 3 --d-ff 255", odd, 2);
    // ZeRO-3 with two layers a chunk under vpp and the V: the next layer prefetched inside each
    // chunk, the slots alternating across chunk boundaries and micro-batches
    static const Layout_ deep[] = {
        {"pp4_zbv", "--pp 4 --schedule zb-v"},
        {"pp4_zbv_selective", "--pp 4 --schedule zb-v --recompute selective"},
        {"pp4_dualpipev", "--pp 4 --schedule dualpipe-v --micro-batch 4"},
        {"dp2_zero3_pp2_vpp2", "--dp 2 --zero 3 --pp 2 --vpp 2"},
        {"dp2_zero3_pp2_vpp2_full", "--dp 2 --zero 3 --pp 2 --vpp 2 --recompute full"},
        {"dp2_zero3_pp2_zbv", "--dp 2 --zero 3 --pp 2 --schedule zb-v"},
    };
    suite("gpt2_8layers", "--model tiny --n-layer 8", deep, sizeof(deep) / sizeof(deep[0]));
    // --pp-split auto on a heavy head (vocab 2048: the head and loss cost about 2.5 layers):
    // stages cut by cost, in the loop, interleaved and in the V
    static const Layout_ cut[] = {
        {"pp4_auto", "--pp 4 --pp-split auto"},
        {"pp2_vpp2_auto", "--pp 2 --vpp 2 --pp-split auto"},
        {"pp2_zbv_auto", "--pp 2 --schedule zb-v --pp-split auto"},
        {"pp2_dualpipev_auto", "--pp 2 --schedule dualpipe-v --pp-split auto"},
        // --pp-costs: pp 4 cut by the times a pp 2 run's trace measured (runtime/pp_costs.h); the pp 2
        // run also runs when a filter selects only pp4_auto_costs (layout_runs)
        {"pp2_costs_trace", "--pp 2 --trace /tmp/test_layouts/headheavy_costs_trace.json"},
        {"pp4_auto_costs", "--pp 4 --pp-split auto --pp-costs /tmp/test_layouts/headheavy_costs_trace.json"},
    };
    suite("gpt2_headheavy", "--model tiny --n-layer 8 --vocab 2048", cut, sizeof(cut) / sizeof(cut[0]));
}

// Degrees of 3 (worlds of 3 and 6): 6 heads of 8, T 36 (2 x cp 3 chunks of 6 rows), 7 layers (uneven cuts of
// 3 stages and of 6 chunks), 24 sequences in micro-batches of 4: dp 3 leaves 2 micro-batches a rank, pp 3 six
// (dualpipe-v's minimum 2 pp, interleaved's multiple of pp). ZeRO shards and units cut in three, Ulysses of 3 heads.
static void threes_suites(void) {
    static const Layout_ gpt[] = {
        {"by3_dp3_zero3", "--dp 3 --zero 3"},
        {"by3_dp3_zero2_tp2_sp", "--dp 3 --zero 2 --tp 2 --sp"},
        {"by3_tp3_sp", "--tp 3 --sp"},
        {"by3_pp3_vpp2", "--pp 3 --vpp 2"},
        {"by3_pp3_dualpipev", "--pp 3 --schedule dualpipe-v"},
        {"by3_pp3_zbv_auto", "--pp 3 --schedule zb-v --pp-split auto"},
        {"by3_cp3_ring", "--cp 3"},
        {"by3_cp3_tp2_sp", "--cp 3 --tp 2 --sp"},
        {"by3_dp2_cp3_ulysses_zero3", "--dp 2 --cp 3 --cp-kind ulysses --zero 3"},
    };
    suite("gpt2_threes", "--model tiny --n-head 6 --d-model 48 --seq-len 36 --n-layer 7 --global-batch 24 "
          "--micro-batch 4", gpt, sizeof(gpt) / sizeof(gpt[0]));
    static const Layout_ llama[] = {
        {"by3_tp3_pp2", "--tp 3 --pp 2"},
        {"by3_cp3_ulysses", "--cp 3 --cp-kind ulysses"},
        {"by3_dp3_zero3_pp2_zbh1", "--dp 3 --zero 3 --pp 2 --schedule zb-h1"},  // 2 micro-batches a rank: pp
    };
    suite("llama_threes", "--model llama-tiny --n-head 6 --n-kv-head 3 --d-model 48 --d-ff 144 --seq-len 36 "
          "--n-layer 7 --global-batch 24 --micro-batch 4", llama, sizeof(llama) / sizeof(llama[0]));
}

// The LLaMA layouts (RMSNorm, SwiGLU, RoPE, grouped-query attention) against the 1-rank run.
static void llama_suite(void) {
    static const Layout_ llama_layouts[] = {
        {"dp2", "--dp 2"},
        {"tp2", "--tp 2"},
        {"tp2_sp_selective", "--tp 2 --sp --recompute selective"},
        {"pp2_vpp2", "--pp 2 --vpp 2"},
        {"dp2_zero2_zbh1", "--dp 2 --zero 2 --schedule zb-h1"},  // RMSNorm's held gradients: 2C a layer
        {"dp2_tp2_pp2_full", "--dp 2 --tp 2 --pp 2 --recompute full"},
        {"pp2_zbv", "--pp 2 --schedule zb-v"},
        {"tp2_pp2_zbh1", "--tp 2 --pp 2 --schedule zb-h1"},
        // grouped-query attention under cp: the ring sends the 2 KV heads; Ulysses gives each
        // rank 2 query heads and their KV head
        {"cp2_ring", "--cp 2"},
        {"cp2_ulysses", "--cp 2 --cp-kind ulysses"},
        {"cp4_2d_u2", "--cp 4 --cp-kind 2d --cp-ulysses 2"},
        {"cp2_tp2", "--cp 2 --tp 2"},
        // ZeRO-3 with the untied head and GQA's narrower qkv
        {"dp2_zero3", "--dp 2 --zero 3"},
        {"dp2_zero3_pp2_zbv", "--dp 2 --zero 3 --pp 2 --schedule zb-v"},
        {"dp2_zero3_tp2_keep", "--dp 2 --zero 3 --tp 2 --reshard-after-forward off"},
    };
    suite("llama", "--model llama-tiny", llama_layouts, sizeof(llama_layouts) / sizeof(llama_layouts[0]));

}

// Documents (--doc-mask on) under every kind of layout, against the 1-rank run on the same
// data: an llm.c shard (byte vocabulary, end-of-text 256) of sentences drawn at random, cut
// into documents of 4 to 40 tokens, so each 32-token sequence holds several.
#define DOCS_DATA "/tmp/test_layouts/docs.bin"
static int write_docs_shard(void) {
    static const char* sentences[] = {"the cat sat on the mat. ", "a bird sings in the old tree. ",
                                      "rain falls on the quiet town. ", "bob keeps the red letter. "};
    size_t n_text = 200000, n = 0, next = 0;
    uint16_t* ids = (uint16_t*)xmalloc(sizeof(uint16_t) * 2 * n_text);
    int32_t header[256] = {20240520, 1, 0};  // an llm.c shard: magic, version, token count
    Rng r;
    rng_seed(&r, 8);
    for (size_t i = 0; i < n_text;)
        for (const char* c = sentences[rng_u64(&r) % 4]; *c && i < n_text; c++, i++) {
            if (i == next) ids[n++] = EOT_TOKEN, next = i + 4 + rng_u64(&r) % 37;  // the document's BOS
            ids[n++] = (uint16_t)(unsigned char)*c;
        }
    header[2] = (int32_t)n;
    FILE* f = fopen(DOCS_DATA, "wb");
    int ok = f && fwrite(header, 4, 256, f) == 256 && fwrite(ids, 2, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    free(ids);
    return ok;
}
// Sampling with documents under cp (tag: its layout flags) draws the 1-rank text: each rank
// masks the window by its end-of-text tokens (model.h docs_of_window). 40 steps teach the
// model to end documents: the sample holds several (each printed as a line break).
static void docs_sample_matches(const char* tag, const char* flags) {
    if (!selected(tag)) return;
    static char text[2][1 << 14];
    char cmd[1024], out[2][256];
    for (int k = 0; k < 2; k++) {
        snprintf(out[k], sizeof(out[k]), "/tmp/test_layouts/sample_%s_%d.txt", tag, k);
        snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train --model tiny --steps 40 --warmup 5 --eval-every 0 "
                 "--sample-len 120 --quiet --data %s --doc-mask on %s", DOCS_DATA, k ? flags : "");
        if (run_to_file(cmd, out[k])) text[k][0] = 0;
        else read_text_file(out[k], text[k], sizeof(text[k]));
    }
    char *a = strstr(text[0], "sample:\n"), *b = strstr(text[1], "sample:\n");
    for (int k = 0; k < 2; k++) {  // the sample only (the memory report after it differs by layout)
        char* s = k ? b : a;
        if (s && strstr(s, "\nmeasured:")) *strstr(s, "\nmeasured:") = 0;
    }
    int n_docs = 0;
    for (const char* c = a ? a + 8 : ""; *c; c++) n_docs += *c == '\n';
    int ok = a && b && strlen(a) > 100 && n_docs >= 2 && !strcmp(a, b);
    printf("%s %s: the sample with documents draws the 1-rank text (120 tokens, %d end-of-text)\n",
           ok ? "PASS" : "FAIL", tag, n_docs);
    ok ? n_pass++ : n_fail++;
}

static void doc_suites(void) {
    if (!write_docs_shard()) { printf("FAIL documents: cannot write %s\n", DOCS_DATA); n_fail++; return; }
    static const Layout_ gpt_layouts[] = {
        {"docs_dp2", "--dp 2"},
        {"docs_tp2_sp", "--tp 2 --sp"},
        {"docs_pp2", "--pp 2"},
        {"docs_pp2_vpp2", "--pp 2 --vpp 2"},
        {"docs_pp2_zbv", "--pp 2 --schedule zb-v"},
        {"docs_cp2_ring", "--cp 2"},
        {"docs_cp4_ring", "--cp 4"},
        {"docs_cp2_ulysses", "--cp 2 --cp-kind ulysses"},
        {"docs_cp4_2d_u2", "--cp 4 --cp-kind 2d --cp-ulysses 2"},
        {"docs_cp4_contiguous", "--cp 4 --cp-split contiguous"},
        {"docs_cp2_selective", "--cp 2 --recompute selective"},
        {"docs_cp4_doc", "--cp 4 --cp-split doc"},
        {"docs_dp2_tp2_pp2", "--dp 2 --tp 2 --pp 2"},
    };
    suite("masked_gpt2", "--model tiny --data " DOCS_DATA " --doc-mask on", gpt_layouts,
          sizeof(gpt_layouts) / sizeof(gpt_layouts[0]));
    // the cp spread is the ring ranks' (train.h batch_imbalance): 2D's ring of 2 = cp 2's, Ulysses' none
#define SPREAD_CP(t) log_sum("/tmp/test_layouts/masked_gpt2_docs_" t "/log.jsonl", "attn_spread_cp")
    double ring = SPREAD_CP("cp2_ring"), two_d = SPREAD_CP("cp4_2d_u2"), ulysses = SPREAD_CP("cp2_ulysses");
    if (selected("docs_cp"))
        check(ring > 0 && two_d == ring && ulysses == 0, "docs cp spread of the ring ranks", "sum over 5 steps: cp2 "
              "ring %.4f, cp4 2d (ring of 2) %.4f, cp2 ulysses %.4f", ring, two_d, ulysses);
#undef SPREAD_CP
    static const Layout_ llama_layouts[] = {
        {"docs_tp2", "--tp 2"},
        {"docs_pp2_vpp2", "--pp 2 --vpp 2"},
        {"docs_cp2_ring", "--cp 2"},
        {"docs_cp2_ulysses", "--cp 2 --cp-kind ulysses"},
        {"docs_cp4_2d_u2", "--cp 4 --cp-kind 2d --cp-ulysses 2"},
        {"docs_cp4_doc", "--cp 4 --cp-split doc"},
        {"docs_cp4_2d_doc", "--cp 4 --cp-kind 2d --cp-ulysses 2 --cp-split doc"},
    };
    suite("masked_llama", "--model llama-tiny --data " DOCS_DATA " --doc-mask on", llama_layouts,
          sizeof(llama_layouts) / sizeof(llama_layouts[0]));
    expect_layout_error("docs_mask_text", "--model tiny --data tests/test_layouts.c --doc-mask on",
                        "--doc-mask on: tests/test_layouts.c has no end-of-text token");
    docs_sample_matches("docs_sample_cp2", "--cp 2");
    docs_sample_matches("docs_sample_cp4_2d", "--cp 4 --cp-kind 2d --cp-ulysses 2");
    docs_sample_matches("docs_sample_cp2_doc", "--cp 2 --cp-split doc");  // trained split by documents, sampled zig-zag
    if (!selected("docs_mask_changes")) return;
    // the mask is in force: the same data unmasked trains to other losses
    RunResult on = {0}, off = {0};
    if (train_run("docs_mask_on", "--model tiny --data " DOCS_DATA " --doc-mask on", &on) &&
        train_run("docs_mask_off", "--model tiny --data " DOCS_DATA " --doc-mask off", &off)) {
        double d = fabs(on.loss[4] - off.loss[4]) / off.loss[4];
        printf("%s docs_mask_changes: step 5 loss %.6f masked, %.6f unmasked (rel %.1e > 1e-4)\n",
               d > 1e-4 ? "PASS" : "FAIL", on.loss[4], off.loss[4], d);
        d > 1e-4 ? n_pass++ : n_fail++;
    }
    free(on.params), free(off.params);
}

// --packing greedy and wlb (layout/packing.h) of long-tailed documents, masked: every layout
// equals the 1-rank run of the same packing (each rank packs the same global batch); a wlb run
// resumed at step 3 ends bit for bit as the run that went on; the evaluation loss of the same
// documents (one pass of the validation data, no update: --lr 0) is the same under both packings.
#define PACK_DOCS "--model tiny --data docs:lognormal:10 --doc-mask on"
static double val_loss_of(const char* tag, const char* flags) {
    char dir[256], cmd[2048], line[4096];
    snprintf(dir, sizeof(dir), "/tmp/test_layouts/%s", tag);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s && OMP_NUM_THREADS=1 ./train --steps 1 --lr 0 --eval-every 1 "
             "--val-batches 1000000 --sample-len 0 --quiet --log %s/log.jsonl %s > %s/out.txt 2>&1", dir, dir, dir,
             flags, dir);
    double v = NAN;
    FILE* f = system(cmd) ? NULL : fopen(strcat(dir, "/log.jsonl"), "r");
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, "\"val_loss\":")) v = atof(strstr(line, "\"val_loss\":") + 11);
    if (f) fclose(f);
    return v;
}
static void packing_resume(void) {
    const char *root = "/tmp/test_layouts/packed_resume", *wlb = PACK_DOCS " --packing wlb --pp 2";
    char whole[300], cut[300], cmd[700];
    snprintf(whole, sizeof(whole), "%s/whole", root);
    snprintf(cut, sizeof(cut), "%s/cut", root);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", root, whole);
    size_t na = 0;
    int rc = -1, same = system(cmd) ? 0 : resumed_bitwise(whole, cut, wlb, &rc, &na);
    check(same, "packed_resume wlb bitwise", "pp 2: resumed at step 3 against the run that went on (exit %d): %s", rc,
          same ? "identical" : "DIFFER");
}
static void packing_suites(void) {
    static const Layout_ layouts[] = {
        {"dp2_packed", "--dp 2"}, {"pp2_packed", "--pp 2"}, {"tp2_packed", "--tp 2"}, {"cp2_packed", "--cp 2"},
        // --cp-split doc: each document zig-zagged over the ring ranks, rows differing per sequence
        {"cp2_doc_packed", "--cp 2 --cp-split doc"}, {"cp4_doc_packed", "--cp 4 --cp-split doc"},
        {"cp4_2d_doc_packed", "--cp 4 --cp-kind 2d --cp-ulysses 2 --cp-split doc"},
        {"dp2_cp2_doc_packed", "--dp 2 --cp 2 --cp-split doc --recompute selective"}};
    int n = sizeof(layouts) / sizeof(layouts[0]);
    suite("greedy", PACK_DOCS " --packing greedy", layouts, n);
    suite("wlb", PACK_DOCS " --packing wlb", layouts, n);
    if (selected("packed_resume")) packing_resume();
    if (selected("packed_trace")) {  // --trace names each micro-batch's documents: 4 (pp 2, B 8 of G 32)
        static char trace[1 << 20];
        int rc = run_trace("packed", "--data docs:lognormal:10 --packing wlb --pp 2 --micro-batch 8 "
                           "--global-batch 32", trace, sizeof(trace), NULL);
        int named = !rc && strstr(trace, "\"step 1 mb 3 (dp 0): ") && strstr(trace, "\"cat\":\"documents\"") &&
                    !strstr(trace, "\"step 1 mb 4 ");
        check(named, "packed_trace documents per micro-batch", "exit %d", rc);
    }
    if (!selected("packed_val")) return;
    double g = val_loss_of("packed_val_greedy", PACK_DOCS " --packing greedy"),
           w = val_loss_of("packed_val_wlb", PACK_DOCS " --packing wlb --dp 2");
    check(fabs(g - w) <= 1e-6 * fabs(g), "packed_val same documents, same loss",
          "greedy 1 rank %.9g, wlb dp 2 %.9g", g, w);
    double d = val_loss_of("packed_val_cp2_doc", PACK_DOCS " --packing greedy --cp 2 --cp-split doc");
    check(fabs(g - d) <= 1e-6 * fabs(g), "packed_val cp 2 split by documents, same loss",
          "greedy 1 rank %.9g, cp 2 --cp-split doc %.9g", g, d);
}

// The defaults alone (no batch flags): `./train --tp 2 --pp 2` must train on the same
// batches as `./train` (layout/args.h derive_micro_batch, derive_global_batch), so the losses agree.
static void default_batch_matches(void) {
    RunResult a = {0}, b = {0};
    int ok = 0;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train --model tiny --steps 5 --eval-every 0 --sample-len 0 --quiet "
             "--log /tmp/test_layouts/defaults_1rank.jsonl");
    if (run_to_file(cmd, "/tmp/test_layouts/defaults_1rank.txt") == 0 &&
        read_log("/tmp/test_layouts/defaults_1rank.jsonl", &a) == 5) {
        snprintf(cmd, sizeof(cmd),
                 "OMP_NUM_THREADS=1 ./train --model tiny --steps 5 --eval-every 0 --sample-len 0 --quiet "
                 "--tp 2 --pp 2 --log /tmp/test_layouts/defaults_tp2pp2.jsonl");
        if (run_to_file(cmd, "/tmp/test_layouts/defaults_tp2pp2.txt") == 0 &&
            read_log("/tmp/test_layouts/defaults_tp2pp2.jsonl", &b) == 5) {
            ok = 1;
            for (int i = 0; i < 5; i++) ok &= fabs(a.loss[i] - b.loss[i]) <= TOL * fabs(a.loss[i]);
        }
    }
    printf("%s default batch: ./train --tp 2 --pp 2 matches ./train (%.6f vs %.6f at step 5)\n", ok ? "PASS" : "FAIL",
           a.loss[4], b.loss[4]);
    ok ? n_pass++ : n_fail++;
}

// Layouts the trainer refuses, each with one error line that says why.
static void layout_errors(void) {
    expect_layout_error("tp3", "--model tiny --tp 3", "n_head 4 is not divisible by tp 3");
    expect_layout_error("pp5", "--model tiny --pp 5", "--n-layer 4 < --pp 5");
    expect_layout_error("zbv_pp4_4layers", "--model tiny --pp 4 --schedule zb-v",
                        "--n-layer 4 < --pp 4 x --vpp 2 chunks (zb-v: two per stage)");
    expect_layout_error("zbv_vpp3", "--model tiny --pp 2 --schedule zb-v --vpp 3",
                        "--vpp 3: --schedule zb-v places exactly two chunks per stage");
    expect_layout_error("zbh1_vpp2", "--model tiny --pp 2 --schedule zb-h1 --vpp 2",
                        "--vpp > 1 needs --schedule interleaved, zb-v or dualpipe-v");
    expect_layout_error("zb_recompute_full", "--model tiny --pp 2 --schedule zb-h1 --recompute full",
                        "--recompute full: --schedule zb-h1 keeps");
    expect_layout_error("zb_weight_immediate", "--model tiny --pp 2 --schedule zb-v --weight-pass immediate",
                        "--weight-pass immediate: --schedule zb-v");
    expect_layout_error("zb_few_micro", "--model tiny --pp 4 --schedule zb-h1 --micro-batch 8 --global-batch 16",
                        "zero-bubble schedules need at least pp micro-batches");
    expect_layout_error("sp_without_tp", "--model tiny --sp", "--sp needs --tp > 1");
    expect_layout_error("pp_costs_even", "--model tiny --pp 2 --pp-costs Makefile", "only with --pp-split auto");
    expect_layout_error("pp_costs_no_trace", "--model tiny --pp 2 --pp-split auto --pp-costs Makefile",
                        "--pp-costs Makefile: no chunk_layers in it");
    expect_layout_error("1f1b_few_micro", "--model tiny --pp 2 --micro-batch 8 --global-batch 8",
                        "1F1B needs at least pp micro-batches");
    expect_layout_error("zero_without_dp", "--model tiny --zero 1", "needs dp x cp > 1");
    expect_layout_error("zero3_without_dp", "--model tiny --zero 3", "needs dp x cp > 1");
    expect_layout_error("zero3_reshard_without", "--model tiny --dp 2 --zero 2 --reshard-after-forward off",
                        "--reshard-after-forward: only with --zero 3");
    expect_layout_error("llama_kv_tp4", "--model llama-tiny --tp 4", "n_kv_head 2 is not divisible by tp 4");
    expect_layout_error("cp3_chunks", "--model tiny --cp 3",
                        "--cp 3: --seq-len 32 does not split into 2 x cp = 6 equal chunks");
    expect_layout_error("cp_ulysses_kv", "--model llama-tiny --cp 4 --cp-kind ulysses",
                        "--cp-kind ulysses: Ulysses degree 4 is more than the 2 KV heads");
    expect_layout_error("cp_ulysses_tp_kv", "--model llama-tiny --cp 2 --tp 2 --cp-kind ulysses",
                        "Ulysses degree 2 is more than the 1 KV heads");
    expect_layout_error("cp_2d_kv", "--model llama-tiny --cp 8 --cp-kind 2d --cp-ulysses 4",
                        "--cp-ulysses: Ulysses degree 4 is more than the 2 KV heads");
    expect_layout_error("cp_ulysses_divides", "--model tiny --cp 4 --cp-kind 2d --cp-ulysses 3",
                        "--cp-ulysses 3 does not divide --cp 4");
    expect_layout_error("cp_ulysses_no_2d", "--model tiny --cp 4 --cp-ulysses 2",
                        "--cp-ulysses 2: only with --cp-kind 2d");
    expect_layout_error("cp_2d_no_u", "--model tiny --cp 4 --cp-kind 2d", "--cp-kind 2d needs --cp-ulysses");
    expect_layout_error("cp_kind", "--model tiny --cp 2 --cp-kind zigzag", "--cp-kind must be ring, ulysses or 2d");
    expect_layout_error("cp_sp_rows", "--model tiny --cp 4 --tp 4 --sp --seq-len 24",
                        "--sp with --cp 4: the 6 rows of a sequence per cp rank do not split over tp 4");
}

// --kernels ref (backend/cpu/reference.h's plain fp32 loops) against the fast kernels, the suite's
// reference run: on 1 rank, tp 2 and pp 2 the same losses and weights within TOL (fp32 sums in
// another order, as between layouts). LLaMA on masked documents adds RoPE, SwiGLU, grouped-query
// attention, the document mask and, with cp 2, attention by blocks (zig-zag and --cp-split doc).
static void kernels_suites(void) {
    static const Layout_ gpt_layouts[] = {
        {"ref_1rank", "--kernels ref"},
        {"ref_tp2", "--kernels ref --tp 2"},
        {"ref_pp2", "--kernels ref --pp 2"},
    };
    suite("kernels_gpt2", "--model tiny", gpt_layouts, sizeof(gpt_layouts) / sizeof(gpt_layouts[0]));
    static const Layout_ llama_layouts[] = {
        {"ref_1rank", "--kernels ref"},
        {"ref_tp2", "--kernels ref --tp 2"},
        {"ref_cp2", "--kernels ref --cp 2"},
        {"ref_cp2_doc", "--kernels ref --cp 2 --cp-split doc"},
    };
    suite("kernels_llama_docs", "--model llama-tiny --data " DOCS_DATA " --doc-mask on", llama_layouts,
          sizeof(llama_layouts) / sizeof(llama_layouts[0]));
}

// One figure called bubble (layout/schedule.h bubble_fraction): the step line, the log and the
// start-up table give the share of the schedule a rank waited for its pipeline peers, in [0, 1),
// beside the textbook (p-1)/(m+p-1) (pp 2, m 4: 0.2); the step line prints the log's value, and
// the log's bubble is its pp_wait_ms / schedule_ms. 1F1B on 2 stages must leave stage 0 waiting
// (for the last micro-batches' gradients): > 0, with tp 2 too, whose waits are comm_tp_ms, not
// counted as busy into a bubble of 0 nor as bubble.
static void bubble_is_a_share(const char* tag, const char* flags) {
    const char* dir = "/tmp/test_layouts";
    char cmd[1024], line[4096], out[64], log[64], log_value[32], printed[32] = "", name[128];
    snprintf(log, sizeof(log), "%s/%s.jsonl", dir, tag);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train --model tiny --steps 3 --eval-every 0 --sample-len 0 %s "
             "--micro-batch 8 --global-batch 32 --log %s", flags, log);
    snprintf(out, sizeof(out), "%s/%s.txt", dir, tag);
    int rc = run_to_file(cmd, out), lines = 0, ok = rc == 0, table = 0;
    double b = -1, f = -1, sched = -1, wait = -1;
    FILE* fp = fopen(log, "r");
    for (const char* p; fp && fgets(line, sizeof(line), fp);) {
        if (!(p = strstr(line, "\"bubble\":"))) continue;
        b = atof(p + 9), f = atof(strstr(line, "\"bubble_formula\":") + 17), lines++;
        sched = (p = strstr(line, "\"schedule_ms\":")) ? atof(p + 14) : -1;
        wait = (p = strstr(line, "\"pp_wait_ms\":")) ? atof(p + 13) : -1;
        ok &= b > 0 && b < 1 && fabs(f - 0.2) < 1e-4 && sched > 0 && fabs(wait / sched - b) < 1e-3;
    }
    if (fp) fclose(fp);
    snprintf(log_value, sizeof(log_value), "bubble %.2f (formula 0.20)", b);
    fp = fopen(out, "r");
    for (const char* p; fp && fgets(line, sizeof(line), fp);) {
        table |= strstr(line, "bubble (p-1)/(m+p-1) = 0.200") != NULL;
        if ((p = strstr(line, "| bubble "))) snprintf(printed, sizeof(printed), "%.26s", p + 2);
    }
    if (fp) fclose(fp);
    snprintf(name, sizeof(name), "bubble is the pipeline waits' share of the step (%s, m 4)", flags);
    check(ok && lines == 3 && table && !strcmp(printed, log_value), name,
          "rc %d, %d log lines, last bubble %.4f formula %.4f, pp waits %.3f of %.3f ms; table row %s; step line '%s', "
          "log '%s'", rc, lines, b, f, wait, sched, table ? "found" : "missing", printed, log_value);
}

// The cp buffers' sizes on shapes whose K, V are not whole 256-byte blocks (head size 9, one
// sequence of 8 tokens: the ring buffer's dK, dV part starts at the next block), ring and
// Ulysses, cp 2 and 4: train_run checks the planner's activations against the run's to the byte.
static void cp_odd_shape_memory(void) {
    const Layout_ runs[] = {{"cp2_odd_ring", "--cp 2"},
                            {"cp4_odd_ring", "--cp 4"},
                            {"cp2_odd_ulysses", "--cp 2 --cp-kind ulysses"},
                            {"cp4_odd_ulysses", "--cp 4 --cp-kind ulysses"}};
    for (int i = 0; i < 4; i++) {
        if (!selected(runs[i].tag)) continue;
        char flags[256];
        RunResult r = {0};
        snprintf(flags, sizeof(flags), "--model tiny --d-model 36 --seq-len 8 --micro-batch 1 --global-batch 4 %s",
                 runs[i].flags);
        train_run(runs[i].tag, flags, &r);
        free(r.params);
    }
}

#include "tests/layouts_offload.c"

int main(int argc, char** argv) {
    if (system("mkdir -p /tmp/test_layouts")) return 1;
    only = argc > 1 ? argv[1] : NULL;
    gpt2_suites();
    gpt2_shape_suites();
    threes_suites();
    llama_suite();
    doc_suites();
    kernels_suites();
    packing_suites();
    zero3_checkpoints();
    offload_suites();
    offload_checkpoints();
    offload_planner();
    cp_odd_shape_memory();
    if (selected("bubble_pp2")) bubble_is_a_share("bubble_pp2", "--pp 2");
    if (selected("bubble_tp2_pp2")) bubble_is_a_share("bubble_tp2_pp2", "--tp 2 --pp 2");
    if (!only) {
        default_batch_matches();
        // --trace: valid trace-event JSON whose track of one stage shows the order of
        // schedule_build: 1F1B's forwards and backwards interleaved after the warm-up (tp2 pp2,
        // rank 0), and ZB-H1's last stage (pp 4, rank 3) with the W's it owes filling its cool-down.
        trace_order("tp2_pp2_1f1b", "--tp 2 --pp 2 --micro-batch 8 --global-batch 32", 0, SCHED_1F1B, 0, 2, 4);
        trace_order("pp4_zbh1", "--pp 4 --schedule zb-h1 --micro-batch 4 --global-batch 32", 3, SCHED_ZBH1, 3, 4, 8);
        trace_ring(4, 4);
    }
    sample_matches("cp2", "--cp 2");
    sample_matches("cp4_2d", "--cp 4 --cp-kind 2d --cp-ulysses 2");
    sample_matches("cp2_tp2_pp2", "--cp 2 --tp 2 --pp 2");
    sample_matches("dp2_zero3_pp2", "--dp 2 --zero 3 --pp 2");  // the ends and layers gathered for each token

    layout_errors();
    return tests_done();
}
