// planner/runs.h: --runs FILE.csv: predict each run of a file exactly as given, and carry
// its other columns (measured step time, MFU, status) through to the output.
#ifndef PLANNER_RUNS_H
#define PLANNER_RUNS_H

#include "planner/search.h"

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
static int plan_run_row(const int* shape, const PlanSetup* setup, const DeviceProfile* dev, char** col, int vpp, ModelConfig* c,
                        PlanResult* r, char* err, size_t err_len) {
    long v[N_RUN_COLS];
    for (int k = 0; k < N_RUN_COLS; k++) if (RUN_COL_INT[k]) v[k] = strtol(col[k], NULL, 10);
    if (plan_model(col[RC_MODEL], shape, 0, c, err, err_len)) return -1;
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
    PlanSetup k = *setup;
    if ((k.attention = attn_from_name(col[RC_ATTENTION])) < 0) {
        snprintf(err, err_len, "unknown attention '%s' (torch, fused_softmax, flash1, flash2)", col[RC_ATTENTION]);
        return -1;
    }
    k.rms_kernel = (int)v[RC_RMS_KERNEL];
    if (plan_predict(c, &k, (int)(v[RC_BATCH_TOKENS] / c->seq_len), (int)v[RC_GPUS_PER_NODE], dev, r)) {
        snprintf(err, err_len, "%s", r->invalid);
        return -1;
    }
    return 0;
}

// Predict every run of the file at path (the shape flags override every row's preset), to
// the CSV csv_path or, without one, to stdout.
static void plan_runs(const char* path, const char* csv_path, const int* shape, const PlanSetup* setup, const DeviceProfile* dev) {
    char why[256];
    FILE* in = input_open(path, why, sizeof(why), NULL);
    if (!in) fail("--runs: cannot open '%s': %s", path, why);
    AtomicFile csv;
    if (csv_path) output_check(csv_path, "--plan-csv", 1), atomic_open(&csv, csv_path, "--plan-csv");
    FILE* out = csv_path ? csv.f : stdout;
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
        int rc = plan_run_row(shape, setup, dev, run_col, vpp_col >= 0 ? atoi(col[vpp_col]) : 0, &c, &r, reason, sizeof(reason));
        for (int j = 0; j < n_cols; j++) csv_put(out, col[j], 0);
        if (rc) {
            fprintf(stderr, "error: --runs %s: row %d: %s\n", path, i + 1, reason);
            n_bad++;
            fprintf(out, "0,,,,");
        } else {
            plan_memory_reason(&r, dev->mem_bytes, reason, sizeof(reason));
            n_fit += r.fits;
            fprintf(out, "%d,%.3f,%.4f,%.3f,", r.fits, r.mem_total / GiB, r.t_step, 100 * study_mfu(&c, &r, dev));
        }
        csv_put(out, reason, 1);
        free(rows[i]);
    }
    if (csv_path) atomic_commit(&csv);
    else if (fflush(stdout)) fail("--runs: writing the predictions failed: %s", strerror(errno));
    fprintf(csv_path ? stdout : stderr, "%d runs predicted on %s (%d fit, %d do not), %d could not be evaluated%s%s\n",
            n_rows - n_bad, dev->name, n_fit, n_rows - n_bad - n_fit, n_bad, csv_path ? "; wrote " : "", csv_path ? csv_path : "");
    free(rows), free(line), free(header);
}

#endif
