// runtime/pp_costs.h: --pp-costs FILE, the times --pp-split auto cuts by, measured: from the trace
// (--trace) of an earlier run of this model with a pipeline. The trace says what it ran (its
// otherData: the layers of each global chunk and the shape that sets an op's time); each chunk's
// time t_g is the median of its forwards plus the median of its backwards (and of its weight
// passes under the zero-bubble schedules) over the traced micro-batches and steps. With L_g layers
// in chunk g, the embedding on chunk 0 and the head with its loss on the last chunk,
//     t_g = (L_g + [g = 0] e) layer + [g = last] head,
// where e is the embedding's share of a layer in the planner's model (a gather: too small beside a
// layer to be told apart in a chunk's time); layer and head by least squares over the chunks. The
// stages' memory stays the planner's (planner/predict.h plan_stage_model).
#ifndef PP_COSTS_H
#define PP_COSTS_H

#include "data/data.h"  // data_fail: the run agrees on one error line (runtime/train.h)
#include "layout/params.h"

#define PP_COSTS_SHAPE_CAP 192
#define PP_COSTS_MAX_CHUNKS 1024

// What sets a pipeline op's time besides its layers: the trace records it, --pp-costs compares it.
static const char* pp_costs_shape(const ModelConfig* c, char* buf) {
    snprintf(buf, PP_COSTS_SHAPE_CAP, "%s d %d heads %d/%d ff %d vocab %d T %d micro-batch %d tp %d cp %d sp %d "
             "recompute %d", arch_name(c->arch), c->d_model, c->n_head, c->n_kv_head, c->d_ff, c->vocab, c->seq_len,
             c->micro_batch, c->tp, c->cp, c->sp, c->recompute);
    return buf;
}

// The median of x[0..n) (sorted in place); n > 0.
static int pp_costs_cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
static double pp_costs_median(double* x, int n) {
    qsort(x, (size_t)n, sizeof(double), pp_costs_cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// The otherData line of a trace: its chunks' layers into layers[] (returns how many; 0: none).
static int pp_costs_header(const char* line, const char* path, const ModelConfig* c, int* layers) {
    const char* at = strstr(line, "\"chunk_layers\":\"");
    const char* shape = strstr(line, "\"shape\":\"");
    if (!at || !shape) return 0;
    char mine[PP_COSTS_SHAPE_CAP], theirs[PP_COSTS_SHAPE_CAP];
    size_t n = strcspn(shape + 9, "\"");
    snprintf(theirs, sizeof(theirs), "%.*s", (int)(n < sizeof(theirs) ? n : sizeof(theirs) - 1), shape + 9);
    if (strcmp(theirs, pp_costs_shape(c, mine)))
        data_fail("--pp-costs %s: traced at %s; this run is %s (an op's time depends on them)", path, theirs, mine);
    int k = 0;
    for (const char* p = at + 16; *p && *p != '"';) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 512 || k == PP_COSTS_MAX_CHUNKS)
            data_fail("--pp-costs %s: its chunk_layers are not a list of layer counts", path);
        layers[k++] = (int)v, p = end;
        while (*p == ' ') p++;
    }
    return k;
}

// Each chunk's time t[g] (seconds, medians of its F, B and W ops) from a trace; returns its chunks.
static int pp_costs_chunk_times(const char* path, const ModelConfig* c, int* layers, double* t) {
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);  // a regular file (a FIFO would hang open())
    if (!f) data_fail("--pp-costs %s: cannot open: %s", path, why);
    int n = 0, cap = 1024, counts[3] = {0, 0, 0}, *n_of = NULL;
    double** dur = NULL;  // dur[op * n + g]: the durations of op (F, B, W) of chunk g, n_of[] of them
    char line[8192];      // a trace's lines are short, but its header's of PP_COSTS_MAX_CHUNKS chunks (4 KiB)
    for (int line_no = 1; fgets(line, sizeof(line), f); line_no++) {
        if (!strchr(line, '\n') && !feof(f))  // (its rest was read as a line of its own: a chunk list cut short)
            data_fail("--pp-costs %s: line %d is longer than %zu bytes: not a --trace of this program", path, line_no,
                      sizeof(line) - 2);
        if (!n && (n = pp_costs_header(line, path, c, layers))) {
            dur = (double**)xcalloc(3 * (size_t)n, sizeof(double*));
            n_of = (int*)xcalloc(3 * (size_t)n, sizeof(int));
            for (int i = 0; i < 3 * n; i++) dur[i] = (double*)xmalloc(sizeof(double) * cap);
            continue;
        }
        const char* name = strstr(line, "{\"name\":\"");
        const char* at = strstr(line, "\"dur\":");
        char op;
        int mb, g;
        if (!n || !name || !at || !strstr(line, "\"cat\":\"compute\"") ||
            sscanf(name + 9, "%c mb%d c%d", &op, &mb, &g) != 3 || g < 0 || g >= n)
            continue;
        int k = op == 'F' ? 0 : op == 'B' ? 1 : op == 'W' ? 2 : -1, i = k * n + g;
        if (k < 0 || n_of[i] == cap) continue;  // (cap a chunk's op: the trace holds the first few steps)
        char* end;
        double us = strtod(at + 6, &end);
        int shown = (int)strcspn(at + 6, ",}\n");
        if (end == at + 6 || !(us >= 0 && us < 1e15) || (*end != ',' && *end != '}'))  // (atof read '"x"' as 0)
            data_fail("--pp-costs %s: line %d: %c mb%d c%d's dur '%.*s' is not a time (microseconds, >= 0)", path,
                      line_no, op, mb, g, shown < 40 ? shown : 40, at + 6);
        dur[i][n_of[i]++] = us * 1e-6, counts[k]++;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) data_fail("--pp-costs %s: cannot read it", path);
    if (!n)
        data_fail("--pp-costs %s: no chunk_layers in it (a --trace of a run with a pipeline, from this version)", path);
    for (int g = 0; g < n; g++) {
        if (!n_of[g] || !n_of[n + g])
            data_fail("--pp-costs %s: chunk %d has no forward or backward op in it (a --trace of a run with --pp > 1)",
                 path, g);
        t[g] = pp_costs_median(dur[g], n_of[g]) + pp_costs_median(dur[n + g], n_of[n + g]) +
               (n_of[2 * n + g] ? pp_costs_median(dur[2 * n + g], n_of[2 * n + g]) : 0);
    }
    for (int i = 0; i < 3 * n; i++) free(dur[i]);
    free(dur), free(n_of);
    return n;
}

// sm's times (the planner's) replaced by the ones the trace at path measured.
static void pp_costs_read(const char* path, const ModelConfig* c, StageModel* sm) {
    int* layers = (int*)xmalloc(sizeof(int) * PP_COSTS_MAX_CHUNKS);
    double* t = (double*)xmalloc(sizeof(double) * PP_COSTS_MAX_CHUNKS);
    int n = pp_costs_chunk_times(path, c, layers, t);
    if (n < 2) data_fail("--pp-costs %s: traced with one chunk; a pipeline's trace tells the head from a layer", path);
    // least squares for (layer, head): t_g = a_g layer + h_g head, a_g = L_g + [g = 0] e, h_g = [g = n-1]
    double e = sm->embed / sm->layer, aa = 0, ah = 0, hh = 0, at = 0, ht = 0;
    for (int g = 0; g < n; g++) {
        double a = layers[g] + (g == 0 ? e : 0), h = g == n - 1;
        aa += a * a, ah += a * h, hh += h * h, at += a * t[g], ht += h * t[g];
    }
    double det = aa * hh - ah * ah, layer = (at * hh - ah * ht) / det, head = (aa * ht - ah * at) / det;
    if (!(layer > 0) || !(head >= 0))
        data_fail("--pp-costs %s: its chunks' times give a layer %.3g ms and the head %.3g ms: not a cost to cut by "
             "(too noisy a run? trace more steps)", path, layer * 1e3, head * 1e3);
    sm->layer = layer, sm->head = head, sm->embed = e * layer, sm->measured = path;
    free(layers), free(t);
}

#endif
