// planner/documents.h: --plan --doc-lengths FILE|lognormal:MEDIAN[:SIGMA]: the expected
// imbalance and step time of the best layout under each packing (layout/packing.h) when
// attention is masked by document. The documents: the file's lengths (one a line) in order,
// or log-normal draws (the generator of --data docs:lognormal); enough of them for twice
// DOC_SIM_BATCHES global batches (2^27 tokens at most), cut into pieces of at most T; the figures
// are batches [DOC_SIM_SKIP, DOC_SIM_BATCHES)'s: wlb's first batches fill its wait list, and past
// the end the documents still go on, so no batch measured holds an end's leftovers.
//
// How: the packers themselves place the documents (plan_build_docs; concat: consecutive
// windows of T over the documents end to end). A micro-batch's attention work is its visible
// pairs; its time, relative to a micro-batch of whole causal sequences, is (1 - f) + f x
// pairs / full pairs, where f is the attention's share of that micro-batch's FLOPs (the cost
// model both packings and this file use: doc_cost_model). A dp rank's pipeline: the layout's
// schedule played with those times per micro-batch (doc_pipeline_factor: one schedule, the
// runtime's and the planner's), scaled so a batch of whole sequences takes the planner's own
// t_pipeline; the step waits for the slowest dp rank. Padding runs through
// the matmuls as a document does, so packed batches count all positions in the linear term.
//
// Context parallelism (a ring of R = cp / U ranks; --cp-split zigzag|contiguous|doc: c->cp_doc,
// c->cp_contiguous): each ring rank's pairs of a micro-batch from the positions the trainer gives
// it (layout/cp_order.h), as dev/sim_wlb.c measures them; each layer's ring waits for every
// rank, so a micro-batch's attention takes its heaviest ring rank's pairs, relative to the
// heaviest rank's of whole causal sequences under the same split (the layout's own t_pipeline
// already holds that case; Ulysses' ranks split a ring rank's heads evenly). The cp spread: the
// ring ranks' pairs over the batch, (max - min) / mean, as the trainer's attn_spread_cp.
#ifndef PLANNER_DOCUMENTS_H
#define PLANNER_DOCUMENTS_H

#include "layout/schedule.h"
#include "layout/cp_order.h"
#include "layout/packing.h"
#include "planner/predict.h"  // PlanResult, plan_predict

#define DOC_SIM_BATCHES 24
#define DOC_SIM_SKIP 8  // WLB_MAX_DELAY: by then the wait list of the others is full (outliers may wait longer)
#define DOC_SIM_MAX_TOKENS (1 << 27)
#define DOC_SIM_MAX_TRIES 4e7  // a batch's documents x sequences (llama-7b, 16 GPUs, lognormal: 8.6e6, under a minute)
#define DOC_FILE_MAX (1 << 24)  // lengths read from a file at most

typedef struct { int* len; size_t n; const char* source; } DocLengths;

// The lengths of --doc-lengths: a file of positive integers (one a line, <= 1e9), or
// lognormal:MEDIAN[:SIGMA] (docs_spec's parameters); errors name the flag.
static void doc_lengths_load(const char* spec, DocLengths* d) {
    memset(d, 0, sizeof(*d));
    d->source = spec;
    fflush(stdout);  // the plan's table is printed: an error line starts a line of its own
    double median, sigma;
    char docs[128];
    if (snprintf(docs, sizeof(docs), "docs:%s", spec) >= (int)sizeof(docs) && !strncmp(spec, "lognormal", 9))
        fail("--doc-lengths: the generator's spec is longer than %d characters", (int)sizeof(docs) - 6);
    if (!strncmp(spec, "lognormal", 9) && docs_spec(docs, &median, &sigma, "--doc-lengths")) {
        Rng r;
        rng_seed(&r, 42);
        d->n = 1 << 20;
        d->len = (int*)xmalloc(sizeof(int) * d->n);
        for (size_t i = 0; i < d->n; i++) {
            double len = median * exp(sigma * rng_normal(&r));
            d->len[i] = len < 2 ? 2 : len > 1e9 ? 1000000000 : (int)len;
        }
        return;
    }
    char why[256];
    FILE* f = input_open(spec, why, sizeof(why), NULL);
    if (!f) fail("--doc-lengths: cannot open %s: %s (or lognormal:MEDIAN[:SIGMA])", spec, why);
    size_t cap = 1024, line = 0;
    d->len = (int*)xmalloc(sizeof(int) * cap);
    char text[64];
    for (;;) {
        int len = 0, ch;  // a line stops at a newline, the end, a NUL or the end of text (the last two: no length)
        while ((ch = getc(f)) != EOF && ch != '\n' && ch && len < (int)sizeof(text) - 1) text[len++] = (char)ch;
        if (ch == EOF && !len) break;  // the end, after a final newline or none
        text[len] = 0, line++;
        char* end;
        long v = strtol(text, &end, 10);
        while (*end == ' ' || *end == '\r') end++;
        if ((ch != '\n' && ch != EOF) || end == text || *end || v < 1 || v > 1000000000)
            fail("--doc-lengths %s: line %zu is not a length in [1, 1e9] tokens", spec, line);
        if (d->n == DOC_FILE_MAX) fail("--doc-lengths %s: more than %d lengths", spec, DOC_FILE_MAX);
        d->len = (int*)xgrow(d->len, sizeof(int), d->n + 1, &cap, "reading --doc-lengths");
        d->len[d->n++] = (int)v;
    }
    if (ferror(f)) fail("--doc-lengths %s: cannot read it: %s", spec, strerror(errno));
    fclose(f);
    if (!d->n) fail("--doc-lengths %s: no lengths", spec);
}

// The documents of the simulation: the lengths in order (again from the first when they run
// out), cut into pieces of at most T, until `tokens`.
static Doc* doc_sim_docs(const DocLengths* d, int T, double tokens, size_t* n_docs) {
    size_t cap = 1024, n = 0, at = 0;
    Doc* docs = (Doc*)xmalloc(sizeof(Doc) * cap);
    for (size_t i = 0; at < tokens; i = (i + 1) % d->n)
        for (int left = d->len[i]; left > 0 && at < tokens; left -= T) {
            docs = (Doc*)xgrow(docs, sizeof(Doc), n + 1, &cap, "simulating --doc-lengths");
            docs[n].start = at, docs[n].len = left < T ? left : T;
            at += docs[n++].len;
        }
    *n_docs = n;
    return docs;
}

// sums over n batches
typedef struct { double spread_mb, spread_dp, spread_cp, t_pipeline, tokens; int n; } PackPrediction;

// A dp rank's pipeline time when its micro-batch mb takes rel[mb] x the time of a micro-batch of
// whole causal sequences, over the time when all take 1: the runtime's op lists (schedule_build)
// played by the planner's simulator (schedule_simulate_mb), each (micro-batch, chunk) op its
// chunk's share (chunk_op_flops) x its micro-batch's factor.
static double doc_pipeline_factor(const ModelConfig* c, const PlanResult* best, const double* rel) {
    int m = best->n_micro, nc = best->pp * best->vpp;
    double* t = (double*)xmalloc(sizeof(double) * (3 * nc + 6 * (size_t)m * nc));
    double *tf = t + 3 * nc, *tb = tf + (size_t)m * nc, *tw = tb + (size_t)m * nc, *ones = tw + (size_t)m * nc;
    chunk_op_flops(c, best->pp, best->vpp, t);
    for (int mb = 0; mb < m; mb++)
        for (int g = 0; g < nc; g++) {
            size_t at = (size_t)mb * nc + g;
            tf[at] = rel[mb] * t[g], tb[at] = rel[mb] * t[nc + g], tw[at] = rel[mb] * t[2 * nc + g];
            ones[at] = t[g], ones[(size_t)m * nc + at] = t[nc + g], ones[2 * (size_t)m * nc + at] = t[2 * nc + g];
        }
    double span = schedule_simulate_mb(best->schedule, best->pp, best->vpp, m, t, tf, tb, tw, nc, 0, SENDS_ASYNC, NULL);
    double whole = schedule_simulate_mb(best->schedule, best->pp, best->vpp, m, t, ones, ones + (size_t)m * nc,
                                        ones + 2 * (size_t)m * nc, nc, 0, SENDS_ASYNC, NULL);
    free(t);
    return span / whole;
}

// units[u]: unit u's attention pairs in one batch, heavy[u] the attention that paces it (its pairs,
// or with a ring its heaviest ring rank's), full_heavy that of a unit of whole causal sequences;
// spread_cp the ring ranks' -> the figures of that batch into *pr (summed).
static void doc_batch_figures(const ModelConfig* c, const PlanResult* best, double f_att, const double* units,
                              const double* heavy, double full_heavy, double spread_cp, int U, double tokens,
                              PackPrediction* pr) {
    int m = best->n_micro, dp = U / m;
    double *dp_pairs = (double*)xcalloc(dp, sizeof(double)), *rel = (double*)xmalloc(sizeof(double) * m);
    double slowest = 0;
    for (int r = 0; r < dp; r++) {
        for (int u = r * m; u < (r + 1) * m; u++) {
            rel[u - r * m] = (1 - f_att) + f_att * heavy[u] / full_heavy;
            dp_pairs[r] += units[u];
        }
        double t = doc_pipeline_factor(c, best, rel);
        slowest = t > slowest ? t : slowest;
    }
    pr->spread_mb += spread_of(units, U), pr->spread_dp += spread_of(dp_pairs, dp), pr->spread_cp += spread_cp;
    pr->t_pipeline += slowest * best->t_pipeline, pr->tokens += tokens, pr->n++;
    free(dp_pairs), free(rel);
}

// The ring's figures: R ring ranks (1: no ring, nothing measured), room for a sequence's doc_start
// and order, ring[u * R + r] per batch, each unit's heaviest rank's pairs, and the heaviest of a
// unit of whole causal sequences (without a ring: a unit's pairs, doc_batch_figures' reference).
typedef struct { int R, *ds, *order; double *ring, *heavy, full_heavy; } DocRing;

static DocRing doc_ring_new(const ModelConfig* c, const PlanResult* best, int U) {
    int T = c->seq_len, B = best->micro_batch, U_cp = best->cp_ulysses > 1 ? best->cp_ulysses : 1;
    DocRing g = {best->cp > 1 ? best->cp / U_cp : 1, NULL, NULL, NULL, NULL, B * doc_pairs(T)};
    g.ds = (int*)xcalloc(2 * (size_t)T, sizeof(int)), g.order = g.ds + T;
    g.ring = (double*)xcalloc((size_t)U * (g.R + 1) + g.R, sizeof(double)), g.heavy = g.ring + (size_t)U * g.R;
    if (g.R == 1) return g;
    double* whole = g.heavy + U;
    cp_ring_pairs(c, g.R, g.ds, g.order, whole);  // ds all 0: one document a sequence
    g.full_heavy = 0;
    for (int r = 0; r < g.R; r++) g.full_heavy = B * whole[r] > g.full_heavy ? B * whole[r] : g.full_heavy;
    return g;
}

// The ring pairs of batch b of plan p: each sequence's doc_start from its documents (padding: its
// own position), the sequences taken in order through an index of the batch's documents by sequence.
static void doc_packed_ring(const ModelConfig* c, const DocPlan* p, size_t b, DocRing* g) {
    int T = p->T, G = p->G;
    size_t first = p->batch_at[b], n = p->batch_at[b + 1] - first;
    size_t *at = (size_t*)xcalloc(G + 1 + n, sizeof(size_t)), *idx = at + G + 1;
    for (size_t i = 0; i < n; i++) at[p->placed[first + i].seq + 1]++;
    for (int s = 0; s < G; s++) at[s + 1] += at[s];
    for (size_t i = 0; i < n; i++) idx[at[p->placed[first + i].seq]++] = first + i;  // at[s]: now s's end
    memset(g->ring, 0, sizeof(double) * (G / p->B) * g->R);
    for (int s = 0; s < G; s++) {
        for (int t = 0; t < T; t++) g->ds[t] = t;
        for (size_t i = s ? at[s - 1] : 0; i < at[s]; i++)
            for (int j = 0; j < p->placed[idx[i]].len; j++) g->ds[p->placed[idx[i]].off + j] = p->placed[idx[i]].off;
        cp_ring_pairs(c, g->R, g->ds, g->order, g->ring + (size_t)(s / p->B) * g->R);
    }
    free(at);
}

// The three packings' figures over the simulation, per batch.
static void doc_predict(const ModelConfig* c, const PlanResult* best, const Doc* docs, size_t n_docs,
                        PackPrediction pr[3]) {
    int T = c->seq_len, B = best->micro_batch, G = B * best->n_micro * best->dp, U = G / B;
    DocCost k = doc_cost_model(c);
    double full_pairs = B * doc_pairs(T), f_att = k.per_pair * full_pairs / doc_cost(k, T) / B;
    double* units = (double*)xmalloc(sizeof(double) * U);
    DocRing ring = doc_ring_new(c, best, U);
    double* heavy = ring.R > 1 ? ring.heavy : units;  // what paces each unit's attention
    memset(pr, 0, 3 * sizeof(PackPrediction));
    // concat: windows of T end to end over the documents
    size_t d = 0;
    int used = 0;
    for (int n_batches = 0; d < n_docs && n_batches < DOC_SIM_BATCHES; n_batches++) {
        memset(ring.ring, 0, sizeof(double) * U * ring.R);
        for (int u = 0; u < U; u++) {
            units[u] = 0;
            for (int s = 0; s < B; s++) {
                int room = T;
                while (room > 0 && d < n_docs) {
                    int take = docs[d].len - used < room ? docs[d].len - used : room;
                    units[u] += doc_pairs(take);  // a document begun before the window starts anew in it
                    for (int j = 0; j < take; j++) ring.ds[T - room + j] = T - room;
                    room -= take, used += take;
                    if (used == docs[d].len) d++, used = 0;
                }
                for (int t = T - room; t < T; t++) ring.ds[t] = t;  // past the last document
                if (ring.R > 1) cp_ring_pairs(c, ring.R, ring.ds, ring.order, ring.ring + (size_t)u * ring.R);
            }
        }
        double spread_cp = ring.R > 1 ? cp_ring_heaviest(ring.ring, U, ring.R, ring.heavy) : 0;
        if (n_batches >= DOC_SIM_SKIP)
            doc_batch_figures(c, best, f_att, units, heavy, ring.full_heavy, spread_cp, U, (double)G * T, &pr[0]);
    }
    for (int packing = PACK_GREEDY; packing <= PACK_WLB; packing++) {
        DocPlan p;
        plan_build_docs(&p, docs, n_docs, 0, packing, G, B, T);
        size_t nb = p.n_batches < DOC_SIM_BATCHES ? p.n_batches : DOC_SIM_BATCHES;
        for (size_t b = DOC_SIM_SKIP; b < nb; b++) {
            double tokens = plan_valid_targets(&p, b), spread_cp = 0;
            memset(units, 0, sizeof(double) * U);
            for (size_t i = p.batch_at[b]; i < p.batch_at[b + 1]; i++)
                units[p.placed[i].seq / B] += doc_pairs(p.placed[i].len);
            if (ring.R > 1)
                doc_packed_ring(c, &p, b, &ring), spread_cp = cp_ring_heaviest(ring.ring, U, ring.R, heavy);
            doc_batch_figures(c, best, f_att, units, heavy, ring.full_heavy, spread_cp, U, tokens, &pr[packing]);
        }
        free(p.placed), free(p.batch_at);
    }
    free(units), free(ring.ds), free(ring.ring);
}

// The table of --doc-lengths (doc_lengths_load's d) for the best layout.
static void doc_print_prediction(const DocLengths* lengths, const ModelConfig* c, const PlanResult* best) {
    DocLengths d = *lengths;
    const char* spec = d.source;
    int T = c->seq_len, G = best->micro_batch * best->n_micro * best->dp;
    double want = 2.0 * DOC_SIM_BATCHES * G * T, total = 0, pieces = 0;
    for (size_t i = 0; i < d.n; i++) total += d.len[i], pieces += (d.len[i] + T - 1) / T;
    // wlb tries each document of a batch on every sequence, some 20 times: refused where that is hours
    double tries = (double)G * T * (pieces / total) * G;  // documents (pieces of at most T) a batch x sequences
    if (tries > DOC_SIM_MAX_TRIES)
        fail("--doc-lengths %s: %.3g documents a batch of %d sequences of %d, mean %.1f tokens: wlb's simulation "
             "would take hours (documents x sequences %.2g, at most %.0e); give longer lengths", spec,
             (double)G * T * pieces / total, G, T, total / d.n, tries, DOC_SIM_MAX_TRIES);
    size_t n_docs;
    Doc* docs = doc_sim_docs(&d, T, want < DOC_SIM_MAX_TOKENS ? want : DOC_SIM_MAX_TOKENS, &n_docs);
    int R = best->cp > 1 ? best->cp / (best->cp_ulysses > 1 ? best->cp_ulysses : 1) : 1;
    char ring[96] = "";
    if (R > 1)
        snprintf(ring, sizeof(ring), ", %d %s ranks split %s", R, best->setup.cp_allgather ? "all-gather" : "ring",
                 c->cp_doc ? "by document (--cp-split doc)" : c->cp_contiguous ? "contiguous" : "zig-zag");
    printf("\ndocuments (--doc-lengths %s): %zu lengths, mean %.0f tokens; masked attention, best layout (dp %d, pp %d,"
           " %d micro-batches of %d%s):\n", spec, d.n, total / d.n, best->dp, best->pp, best->n_micro,
           best->micro_batch, ring);
    PackPrediction pr[3];
    doc_predict(c, best, docs, n_docs, pr);
    static const char* names[3] = {"concat", "greedy", "wlb"};
    printf("  packing  attn spread mb     dp      cp  pipeline ms/step  document tokens/step  tok/s vs concat\n");
    for (int i = 0; i < 3; i++) {
        char cp[16] = "      -";
        if (R > 1) snprintf(cp, sizeof(cp), "%6.1f%%", 100 * pr[i].spread_cp / pr[i].n);
        printf("  %-7s  %13.1f%% %5.1f%% %s  %16.2f  %20.0f  %15.2f\n", names[i], 100 * pr[i].spread_mb / pr[i].n,
               100 * pr[i].spread_dp / pr[i].n, cp, 1e3 * pr[i].t_pipeline / pr[i].n, pr[i].tokens / pr[i].n,
               (pr[i].tokens / pr[i].t_pipeline) / (pr[0].tokens / pr[0].t_pipeline));
    }
    free(docs);
}

#endif
