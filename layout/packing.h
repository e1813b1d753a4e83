// packing.h: documents in a token stream and how they are packed into the sequences of a
// global batch (--packing concat|greedy|wlb). Pure functions of the stream, the batch shape
// and the step: every rank packs the same global batch the same way whatever its layout, and
// a resumed run continues exactly. Shared by both builds and the planner (the cost model).
//
// A document: the tokens from an end-of-text token (which it starts with) up to the next one
// (at the stream's start, from token 0). Its inputs are tokens[start, start+len), its targets
// tokens[start+1, start+len+1): the last target is the next document's end-of-text. One longer
// than a sequence (T) is cut into pieces of T (the last shorter), each packed as a document
// of its own (its own doc_start: positions restart).
//
// Which documents make global batch i: one pass over the document list, made once at start
// (plan_build); global batch i is batch i mod n_batches of the pass (the data repeats).
//   greedy: the walk in document order: each document into the first of the G sequences with
//           room (first-fit); the batch ends at the first document none has room for, and the
//           next batch starts with it. Positions no document fills are padding (target -1,
//           ignored by the loss).
//   wlb:    WLB-LLM (Wang et al., OSDI 2025): balance the micro-batch units' attention work,
//           with outlier delay. The pool of a batch: the documents waiting from earlier batches,
//           then the walk's next documents until it holds WLB_POOL x the batch's positions in
//           documents that are not outliers. The share: a unit's positions x the pairs per
//           position of the pool's documents that are not outliers, an outlier one whose pairs
//           exceed the share (a fixed point of the two). In order: the overdue (waited
//           WLB_MAX_DELAY batches, an outlier WLB_MAX_DELAY_OUTLIER, or all once the walk has
//           ended), longest first into the unit of least work with room; then rounds of
//           outliers, U at a time (one per unit) whose work the rest can level to within
//           WLB_ROUND_TOL of the round's longest (B rounds at most; the other outliers wait);
//           then the rest, longest first (LPT) into the unit of least work with room that stays
//           at or below the level: the least level, at or over the heaviest unit, that fills the
//           batch to WLB_FILL of what no level would (bisection). Then the top-up: the walk's
//           next documents into the least-loaded unit that stays at or below the level (the
//           others wait) until one fits nowhere. The delay's bound: a document waits at most
//           WLB_MAX_DELAY batches (an outlier WLB_MAX_DELAY_OUTLIER), unless the overdue alone
//           overfill a batch. Every position runs through the matmuls, padding too, so the
//           linear cost is the same in every unit: the balance is on the quadratic (attention)
//           term of the cost (doc_cost_model).
// A micro-batch unit: B = --micro-batch sequences; unit u is dp rank u / n_micro's micro-batch
// u % n_micro (data.h load_batch reads sequences [r, r+1) * G/dp of the batch on dp rank r),
// so balanced units balance the dp ranks too.
#ifndef PACKING_H
#define PACKING_H

#include "layout/config.h"

enum { PACK_CONCAT = 0, PACK_GREEDY = 1, PACK_WLB = 2 };
#define WLB_MAX_DELAY 8    // batches a document that is not an outlier may wait (the bound, but see above)
#define WLB_POOL 1.25      // the pool of a batch: its positions x this
#define WLB_OUTLIER 1.0    // an outlier: attention pairs over this x the share (pass_wlb)
#define WLB_MAX_DELAY_OUTLIER 64  // batches an outlier may wait for a round
#define WLB_ROUND_TOL 0.10        // a round's members level to within this of its longest
#define WLB_FILL 0.99             // a batch's level fills it to this of what no level would

// Cost of a document, forward and backward, in FLOPs (PaLM appendix B split by term, as
// config_flops_per_token): 6 N per token for the matmuls, N = config_matmul_params, and
// 12 L d per visible query-key pair (QK^T and AV, 2 d FLOPs each forward, twice that backward).
// A document of len tokens has len (len+1) / 2 visible pairs (causal within the document).
// The planner (planner/documents.h) turns the two terms into time with its device efficiencies.
typedef struct { double per_token, per_pair; } DocCost;
static DocCost doc_cost_model(const ModelConfig* c) {
    DocCost k = {6.0 * config_matmul_params(c), 12.0 * c->n_layer * c->d_model};
    return k;
}
static double doc_pairs(double len) { return 0.5 * len * (len + 1.0); }
static double doc_cost(DocCost k, int len) { return k.per_token * len + k.per_pair * doc_pairs(len); }

typedef struct { size_t start; int len; } Doc;               // a document or a piece of one
// A document at [off, off+len) of sequence seq, after waiting `waited` batches (wlb).
typedef struct { size_t start; int len, seq, off, waited; } Placed;

typedef struct {
    int packing, T, G, B;   // sequences of a global batch, sequences of a micro-batch unit
    int pad;                // padding positions' input token: the end-of-text token (0 without one)
    Placed* placed;         // the pass: batch b is placed[batch_at[b], batch_at[b+1])
    size_t* batch_at;
    size_t n_batches, n_placed;
} DocPlan;

// The documents of tokens[0, n) (n >= 2), cut into pieces of at most T; *n_docs of them.
static Doc* docs_split(const int* tokens, size_t n, int eot, int T, size_t* n_docs) {
    size_t cap = 1024, k = 0, last = n - 1;  // the last token is a target only
    Doc* d = (Doc*)xmalloc(sizeof(Doc) * cap);
    for (size_t s = 0; s < last;) {
        size_t e = s + 1;
        while (e < last && tokens[e] != eot) e++;
        for (size_t p = s; p < e; p += T) {
            d = (Doc*)xgrow(d, sizeof(Doc), k + 1, &cap, "packing documents");
            d[k].start = p, d[k].len = (int)(e - p < (size_t)T ? e - p : (size_t)T), k++;
        }
        s = e;
    }
    *n_docs = k;
    return d;
}

// First-fit: the first of the n_seq sequences (room[s] positions left) that takes len, -1 none.
static int first_fit(const int* room, int n_seq, int len) {
    for (int s = 0; s < n_seq; s++)
        if (room[s] >= len) return s;
    return -1;
}

// ----------------------------------------------------------------------------
// The pass (plan_build).

typedef struct {
    const Doc* docs;
    size_t n_docs, next;        // the walk: the next document
    size_t *wait, *waited_from; // wlb: documents waiting (indices, in walk order), the batch each joined
    size_t n_wait;
    double outlier_pairs;       // wlb: a document with more attention pairs is an outlier (wlb_pool)
    int* room;                  // positions left in each of the G sequences
    Placed* batch;              // the batch being made
    int n;
} PassState;

// Document d at the end of sequence s of the batch being made.
static void pass_put(PassState* ps, const DocPlan* p, size_t d, int s, int waited) {
    Placed pl = {ps->docs[d].start, ps->docs[d].len, s, p->T - ps->room[s], waited};
    ps->batch[ps->n++] = pl;
    ps->room[s] -= pl.len;
}

static void pass_greedy(PassState* ps, const DocPlan* p) {
    for (int s; ps->next < ps->n_docs && (s = first_fit(ps->room, p->G, ps->docs[ps->next].len)) >= 0; ps->next++)
        pass_put(ps, p, ps->next, s, 0);
}

// wlb's order: the overdue first, then the outliers, then the rest; in each the longer (the
// costlier) first, then the earlier.
typedef struct { size_t at; int len, rank; } WlbItem;  // rank: 0 overdue, 1 outlier, 2 the rest
static int wlb_order(const void* x, const void* y) {
    const WlbItem *a = (const WlbItem*)x, *b = (const WlbItem*)y;
    if (a->rank != b->rank) return a->rank - b->rank;
    if (a->len != b->len) return b->len - a->len;
    return a->at < b->at ? -1 : 1;
}

// The walk's next documents into the wait list until it holds WLB_POOL x the batch's positions
// of documents that are not outliers by the last batch's measure (outliers wait for a round and
// must not crowd the others out); the share of a unit (pass_wlb), which sets the outlier measure.
static double wlb_pool(PassState* ps, const DocPlan* p, size_t b) {
    double pool = 0, all = 0, pairs = 0;
    for (size_t i = 0; i < ps->n_wait; i++) {
        int len = ps->docs[ps->wait[i]].len;
        pool += doc_pairs(len) <= ps->outlier_pairs ? len : 0;
    }
    for (; ps->next < ps->n_docs && pool < WLB_POOL * p->G * p->T; ps->next++) {
        int len = ps->docs[ps->next].len;
        ps->waited_from[ps->n_wait] = b, ps->wait[ps->n_wait++] = ps->next;
        pool += doc_pairs(len) <= ps->outlier_pairs ? len : 0;
    }
    // the share a unit reaches with the documents that are not outliers, the outliers those
    // over it: a fixed point, found by a few rounds from the whole pool's
    double share = doc_pairs(p->T);
    for (int iter = 0; iter < 4; iter++) {
        all = 0, pairs = 0;
        for (size_t i = 0; i < ps->n_wait; i++) {
            int len = ps->docs[ps->wait[i]].len;
            if (doc_pairs(len) > WLB_OUTLIER * share) continue;
            all += len, pairs += doc_pairs(len);
        }
        share = all > 0 ? pairs / all * p->B * p->T : share;
    }
    ps->outlier_pairs = WLB_OUTLIER * share;
    return share;
}

// Document d into the unit of least attention work with room, among those `allowed` (NULL:
// all), having waited `waited` batches: the unit, or -1 when none has room.
static int wlb_put(PassState* ps, const DocPlan* p, size_t d, int waited, double* unit, const char* allowed) {
    int len = ps->docs[d].len, best = -1, best_s = -1;
    for (int u = 0; u < p->G / p->B; u++) {
        int s = first_fit(ps->room + u * p->B, p->B, len);
        if (s >= 0 && (!allowed || allowed[u]) && (best < 0 || unit[u] < unit[best])) best = u, best_s = u * p->B + s;
    }
    if (best < 0) return -1;
    pass_put(ps, p, d, best_s, waited);
    unit[best] += doc_pairs(len);
    return best;
}

// The top-up of a wlb batch: the walk's next documents into the least-loaded unit with room
// that stays at or below `heaviest` (the level); the others wait (outliers for their round). The
// first document that fits nowhere ends the batch, and so does a batch's positions' worth walked.
static void wlb_top_up(PassState* ps, const DocPlan* p, size_t b, double* unit, double outlier_pairs, double heaviest) {
    int U = p->G / p->B;
    double walked = 0;
    char* under = (char*)xmalloc(U);
    for (; ps->next < ps->n_docs && walked < (double)p->G * p->T; ps->next++) {
        size_t d = ps->next;
        int fits = 0, len = ps->docs[d].len;
        for (int u = 0; u < U && !fits; u++) fits = first_fit(ps->room + u * p->B, p->B, len) >= 0;
        if (!fits) break;
        walked += len;
        for (int u = 0; u < U; u++) under[u] = unit[u] + doc_pairs(len) <= heaviest;
        if (doc_pairs(len) <= outlier_pairs && wlb_put(ps, p, d, 0, unit, under) >= 0) continue;
        ps->waited_from[ps->n_wait] = b, ps->wait[ps->n_wait++] = d;
    }
    free(under);
}

// Waiting document `at` (of ps->wait) into batch b by wlb_put.
static int wlb_put_waiting(PassState* ps, const DocPlan* p, size_t at, size_t b, double* unit, const char* allowed) {
    return wlb_put(ps, p, ps->wait[at], (int)(b - ps->waited_from[at]), unit, allowed);
}

// Outlier rounds: windows of U outliers, longest first (items[lo, hi) sorted so), one per unit,
// whose work can be levelled: each member's pairs plus the room it leaves filled at the share's
// pairs per position reach (1 - WLB_ROUND_TOL) x the window's longest. Marks the members of a
// released round in round_of; B rounds at most. The outliers not released wait.
static void wlb_rounds(const DocPlan* p, double share, const WlbItem* items, size_t lo, size_t hi, int* round_of) {
    int U = p->G / p->B, C = p->B * p->T, rounds = 0;
    for (size_t i = lo; i + U <= hi && rounds < p->B;) {
        double top = doc_pairs(items[i].len);
        int level = 1;
        for (int k = 0; k < U && level; k++) {
            int len = items[i + k].len;
            level = doc_pairs(len) + (C - len) * share / C >= (1 - WLB_ROUND_TOL) * top;
        }
        if (!level) { i++; continue; }
        for (int k = 0; k < U; k++) round_of[items[i + k].at] = 1;
        i += U, rounds++;
    }
}

// The waiting documents items[from, n_wait) not yet placed, longest first, each into the unit of
// least work with room that stays at or below `level`; the positions they fill. keep 0: a trial,
// undone (the batch, the rooms, the units' work and `placed` as they were).
static double wlb_level(PassState* ps, const DocPlan* p, const WlbItem* items, size_t from, size_t b, double* unit,
                        char* placed, double level, int keep) {
    int U = p->G / p->B, n_before = ps->n;
    int* room = (int*)xmalloc(sizeof(int) * p->G);
    double* work = (double*)xmalloc(sizeof(double) * U);
    char* allowed = (char*)xmalloc(U);
    memcpy(room, ps->room, sizeof(int) * p->G), memcpy(work, unit, sizeof(double) * U);
    double filled = 0;
    for (size_t i = from; i < ps->n_wait; i++) {
        double pairs = doc_pairs(items[i].len);
        for (int u = 0; u < U; u++) allowed[u] = unit[u] + pairs <= level;
        if (wlb_put_waiting(ps, p, items[i].at, b, unit, allowed) < 0) continue;
        filled += items[i].len;
        if (keep) placed[items[i].at] = 1;
    }
    if (!keep) memcpy(ps->room, room, sizeof(int) * p->G), memcpy(unit, work, sizeof(double) * U), ps->n = n_before;
    free(room), free(work), free(allowed);
    return filled;
}

static void pass_wlb(PassState* ps, const DocPlan* p, size_t b) {
    int U = p->G / p->B, ended = ps->next == ps->n_docs;
    double share = wlb_pool(ps, p, b), outlier_pairs = ps->outlier_pairs;
    WlbItem* items = (WlbItem*)xmalloc(sizeof(WlbItem) * ps->n_wait);
    size_t n_out = 0, n_due = 0;
    for (size_t i = 0; i < ps->n_wait; i++) {
        int len = ps->docs[ps->wait[i]].len, outlier = doc_pairs(len) > outlier_pairs;
        size_t waited = b - ps->waited_from[i];
        int due = ended || waited >= (outlier ? WLB_MAX_DELAY_OUTLIER : WLB_MAX_DELAY);
        items[i] = (WlbItem){i, len, due ? 0 : outlier ? 1 : 2};
        n_due += due, n_out += !due && outlier;
    }
    qsort(items, ps->n_wait, sizeof(WlbItem), wlb_order);
    int* round_of = (int*)xcalloc(ps->n_wait, sizeof(int));
    wlb_rounds(p, share, items, n_due, n_due + n_out, round_of);
    double* unit = (double*)xcalloc(U, sizeof(double));
    char *placed = (char*)xcalloc(ps->n_wait, 1), *allowed = (char*)xmalloc(U);
    // the overdue, longest first, into the unit of least work with room
    for (size_t i = 0; i < n_due; i++) placed[items[i].at] = wlb_put_waiting(ps, p, items[i].at, b, unit, NULL) >= 0;
    // the rounds: one outlier of a round per unit, each into the least-loaded unit without one
    for (size_t i = n_due, in_round = 0; i < n_due + n_out; i++) {
        size_t at = items[i].at;
        if (!round_of[at]) continue;
        if (in_round++ % U == 0) memset(allowed, 1, U);
        int u = wlb_put_waiting(ps, p, at, b, unit, allowed);
        if (u >= 0) placed[at] = 1, allowed[u] = 0;
    }
    // the rest, longest first (LPT), into the unit of least work with room that stays at or
    // below the level; the level: the least (at or over the heaviest unit's) that fills the batch
    // to WLB_FILL of what no level would (bisection, placements tried and undone); the others wait
    double lo = share, hi = doc_pairs(p->T) * p->B;
    for (int u = 0; u < U; u++) lo = unit[u] > lo ? unit[u] : lo;
    hi = hi > lo ? hi : lo;
    double full = wlb_level(ps, p, items, n_due + n_out, b, unit, placed, hi, 0);
    for (int iter = 0; iter < 20; iter++) {
        double level = 0.5 * (lo + hi);
        if (wlb_level(ps, p, items, n_due + n_out, b, unit, placed, level, 0) >= WLB_FILL * full) hi = level;
        else lo = level;
    }
    wlb_level(ps, p, items, n_due + n_out, b, unit, placed, hi, 1);
    size_t kept = 0;  // the documents that wait, in walk order
    for (size_t i = 0; i < ps->n_wait; i++)
        if (!placed[i]) ps->waited_from[kept] = ps->waited_from[i], ps->wait[kept++] = ps->wait[i];
    ps->n_wait = kept;
    wlb_top_up(ps, p, b, unit, outlier_pairs, hi);
    free(items), free(unit), free(placed), free(allowed), free(round_of);
}

// Append the batch made to the plan; cap and batch_cap: the capacities of p->placed and p->batch_at, doubled as they
// fill (a realloc a batch copied batch_at whole each time: quadratic, 22 s under ASan for a plan of 0.5 s).
static void plan_append(DocPlan* p, const PassState* ps, size_t* cap, size_t* batch_cap) {
    p->placed = (Placed*)xgrow(p->placed, sizeof(Placed), p->n_placed + ps->n, cap, "packing documents");
    memcpy(p->placed + p->n_placed, ps->batch, sizeof(Placed) * ps->n);
    p->n_placed += ps->n;
    p->batch_at = (size_t*)xgrow(p->batch_at, sizeof(size_t), p->n_batches + 2, batch_cap, "packing documents");
    p->batch_at[++p->n_batches] = p->n_placed;
}

// The plan of one pass over docs[0, n_docs) (each of at most T tokens, in stream order) for
// global batches of G sequences of T in units of B (packing PACK_GREEDY or PACK_WLB); pad: the
// padding positions' input token.
static void plan_build_docs(DocPlan* p, const Doc* docs, size_t n_docs, int pad, int packing, int G, int B, int T) {
    memset(p, 0, sizeof(*p));
    p->packing = packing, p->G = G, p->B = B, p->T = T, p->pad = pad;
    PassState ps;
    memset(&ps, 0, sizeof(ps));
    ps.docs = docs, ps.n_docs = n_docs, ps.outlier_pairs = doc_pairs(T);  // the first batch: none yet
    ps.wait = (size_t*)xmalloc(sizeof(size_t) * 2 * (n_docs + 1));
    ps.waited_from = ps.wait + n_docs + 1;
    ps.room = (int*)xmalloc(sizeof(int) * G);
    ps.batch = (Placed*)xmalloc(sizeof(Placed) * (n_docs + 1));
    p->batch_at = (size_t*)xcalloc(1, sizeof(size_t));
    size_t cap = 0, batch_cap = 1;
    for (size_t b = 0; ps.next < n_docs || ps.n_wait; b++) {
        ps.n = 0;
        for (int s = 0; s < G; s++) ps.room[s] = T;
        if (packing == PACK_WLB) pass_wlb(&ps, p, b);
        else pass_greedy(&ps, p);
        stop_if_signalled("building the --packing plan");  // wlb: 15 s at micro-batch 1 (docs:lognormal, batch 64)
        plan_append(p, &ps, &cap, &batch_cap);
    }
    free(ps.wait), free(ps.room), free(ps.batch);
}

// The plan of the documents of tokens[0, n) (docs_split).
static void plan_build(DocPlan* p, const int* tokens, size_t n, int eot, int packing, int G, int B, int T) {
    size_t n_docs;
    Doc* docs = docs_split(tokens, n, eot, T, &n_docs);
    plan_build_docs(p, docs, n_docs, eot >= 0 ? eot : 0, packing, G, B, T);
    free(docs);
}

// Batch `index` of the run: [*first, *end) of p->placed.
static void plan_batch(const DocPlan* p, size_t index, size_t* first, size_t* end) {
    size_t b = index % p->n_batches;
    *first = p->batch_at[b], *end = p->batch_at[b + 1];
}

// Targets the loss counts in global batch `index`: its documents' tokens.
static double plan_valid_targets(const DocPlan* p, size_t index) {
    size_t a, e;
    plan_batch(p, index, &a, &e);
    double n = 0;
    for (size_t i = a; i < e; i++) n += p->placed[i].len;
    return n;
}

// Inputs, targets and doc_start of sequences [seq0, seq0+n_seq) of global batch `index`, at the
// Tl positions pos[] of each (all T in order without context parallelism), and doc_seq
// (n_seq x T) of all T positions; doc_start, doc_seq NULL: not wanted (data.h load_batch).
// doc_start: the position in its sequence where a token's document starts. Padding: input the
// end-of-text token, target -1 (ignored by the loss), doc_start its own position.
static void plan_fill(const DocPlan* p, const int* tokens, size_t index, int seq0, int n_seq, const int* pos, int Tl,
                      int* inputs, int* targets, int* doc_start, int* doc_seq) {
    int T = p->T;
    int* in = (int*)xmalloc(sizeof(int) * 3 * T);
    int *tg = in + T, *ds = in + 2 * T;
    size_t a, e;
    plan_batch(p, index, &a, &e);
    for (int s = 0; s < n_seq; s++) {
        for (int t = 0; t < T; t++) in[t] = p->pad, tg[t] = -1, ds[t] = t;
        for (size_t i = a; i < e; i++) {
            const Placed* pl = &p->placed[i];
            if (pl->seq != seq0 + s) continue;
            for (int j = 0; j < pl->len; j++) {
                in[pl->off + j] = tokens[pl->start + j];
                tg[pl->off + j] = tokens[pl->start + j + 1];
                ds[pl->off + j] = pl->off;
            }
        }
        for (int j = 0; j < Tl; j++) {
            inputs[(size_t)s * Tl + j] = in[pos[j]];
            targets[(size_t)s * Tl + j] = tg[pos[j]];
            if (doc_start) doc_start[(size_t)s * Tl + j] = ds[pos[j]];
        }
        if (doc_seq) memcpy(doc_seq + (size_t)s * T, ds, sizeof(int) * T);
    }
    free(in);
}

// ----------------------------------------------------------------------------
// Measured imbalance: the attention work of a position is the keys it sees, q - doc_start[q] + 1
// (the causal pairs of its document up to it); a group's work the sum over its positions.

// Work of the positions pos[0, n) of n_seq sequences of T (doc_start: n_seq x T).
static double attention_work(const int* doc_start, int n_seq, int T, const int* pos, int n) {
    double w = 0;
    for (int s = 0; s < n_seq; s++)
        for (int j = 0; j < n; j++) w += pos[j] - doc_start[(size_t)s * T + pos[j]] + 1;
    return w;
}

// (max - min) / mean of x[0, n); 0 for an empty or all-zero set.
static double spread_of(const double* x, int n) {
    double lo = x[0], hi = x[0], sum = 0;
    for (int i = 0; i < n; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi, sum += x[i];
    return sum > 0 ? (hi - lo) / (sum / n) : 0;
}

// ----------------------------------------------------------------------------
// Long-tailed documents: --data docs:lognormal[:MEDIAN[:SIGMA]] cuts the built-in corpus
// (data.h) into documents whose lengths in tokens (the end-of-text token that opens each
// counted) are log-normal, median MEDIAN (default 628), log-space standard deviation SIGMA
// (default 0.99). The defaults fit the quartiles of FineWeb document lengths, 325 / 628.5 /
// 1238 GPT-4 tokens over 50,000 FineWeb documents (the BEE-spoke-data/SaunaWeb-50k dataset
// card): median e^mu = 628.5, sigma = ln(1238 / 325) / (2 x 0.6745) = 0.99 (its mean, 1429,
// says the real tail is heavier still). Scale MEDIAN with the context: 628 of an 8k context
// is 78 of 1024.

// Whether spec names the generator; its parameters into *median, *sigma (an error names a bad one).
static int docs_spec(const char* spec, double* median, double* sigma, const char* flag) {
    if (strncmp(spec, "docs:", 5)) return 0;
    *median = 628, *sigma = 0.99;
    // numbers in decimal only (strtod alone would also take leading blanks, hex, nan and inf), each whole:
    // "0.5e" or "78x" is refused, not read as 0.5 or 78
    const char* p = spec + 14;
    int bad = strncmp(spec + 5, "lognormal", 9) || (*p && *p != ':') ||
              (*p && p[1 + strspn(p + 1, "0123456789.:eE+-")]);
    for (int k = 0; k < 2 && *p == ':' && !bad; k++) {
        char* end;
        *(k ? sigma : median) = strtod(p + 1, &end);
        bad = end == p + 1 || (*end && *end != ':') || (*end == ':' && k == 1);
        p = end;
    }
    if (bad)
        fail("%s %s: the generator is docs:lognormal[:MEDIAN[:SIGMA]] (e.g. docs:lognormal:78:0.99)", flag, spec);
    if (!(*median >= 2 && *median <= 1e7) || !(*sigma >= 0 && *sigma <= 4))
        fail("%s %s: MEDIAN must be in [2, 1e7] tokens and SIGMA in [0, 4]", flag, spec);
    return 1;
}

// Mark document starts in tokens[0, n): an end-of-text token every log-normal(ln median, sigma)
// tokens (at least 2), the first at 0; the same tokens for the same seed.
static void docs_mark(int* tokens, size_t n, int eot, double median, double sigma, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed ^ 0xD0C5);
    for (size_t at = 0; at < n;) {
        tokens[at] = eot;
        double len = median * exp(sigma * rng_normal(&r));
        at += len < 2 ? 2 : len > 1e9 ? (size_t)1e9 : (size_t)len;
    }
}

#endif
