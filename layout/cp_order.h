// layout/cp_order.h: which positions of a sequence each context-parallel rank holds
// (layer_parallel/context_parallel.h states the splits): the sequence's zig-zag or contiguous split,
// and --cp-split doc's per-document zig-zag. Pure functions of the shape (and the documents),
// apart from the Model, so the planner (planner/documents.h) and dev/sim_wlb.c order the rows
// as the trainer does and measure the ring ranks' attention work alike (cp_ring_pairs).
#ifndef CP_ORDER_H
#define CP_ORDER_H

#include "base/common.h"   // xcalloc
#include "layout/packing.h"  // attention_work, spread_of (and layout/config.h: ModelConfig)

// The position in the sequence of row i (of Ts) of ring rank r's rows.
static int cp_ring_position(int i, int r, int R, int T, int contiguous) {
    if (contiguous) return r * (T / R) + i;
    int c = T / (2 * R);
    return i < c ? r * c + i : (2 * R - 1 - r) * c + (i - c);
}
// The positions of this rank's T/cp rows (cp ranks of (ring r, ulysses u)).
static void cp_positions(int* pos, int T, int cp, int U, int cp_rank, int contiguous) {
    int R = cp / U, r = cp_rank / U, u = cp_rank % U, Tl = T / cp;
    for (int j = 0; j < Tl; j++) pos[j] = cp_ring_position(u * Tl + j, r, R, T, contiguous);
}

// --cp-split doc: the positions of every ring rank's Ts = T/R rows of one sequence with
// documents doc (doc_starts), ring rank r's at order[r * Ts], increasing. Each document of n
// tokens is cut into 2R chunks (consecutive positions), ring rank r holding chunks r and 2R-1-r.
// A chunk has n / (2R) tokens, and the n % (2R) left over go one each to the chunks next in a
// rotation that runs on through the sequence's documents: T is a multiple of 2R, so chunk index
// k gets T / (2R) tokens over the sequence and every ring rank Ts. A document's ranks differ by
// at most one token per chunk; without documents (doc NULL) this is the sequence's zig-zag.
static void cp_doc_order(const int* doc, int T, int R, int* order) {
    int Ts = T / R, next = 0;  // next: the chunk that takes the next token left over
    int* filled = (int*)xcalloc(R, sizeof(int));
    for (int start = 0, end; start < T; start = end) {
        for (end = start + 1; end < T && doc && doc[end] == doc[start]; end++) {}
        if (!doc) end = T;
        int n = end - start, base = n / (2 * R), extra = n % (2 * R), p = start;
        for (int k = 0; k < 2 * R; k++) {
            int len = base + ((k - next + 2 * R) % (2 * R) < extra), r = k < R ? k : 2 * R - 1 - k;
            for (int i = 0; i < len; i++) order[(size_t)r * Ts + filled[r]++] = p++;
        }
        next = (next + extra) % (2 * R);
    }
    free(filled);
}

// Adds to pairs[r] the visible pairs (attention_work) ring rank r of R holds of one sequence of
// c->seq_len positions whose doc_start is ds, split as the trainer splits it (c->cp_doc,
// c->cp_contiguous); order: room for seq_len ints. The trainer's attn_spread_cp (runtime/train.h
// batch_imbalance), dev/sim_wlb.c and the planner (planner/documents.h) measure by it.
static void cp_ring_pairs(const ModelConfig* c, int R, const int* ds, int* order, double* pairs) {
    int T = c->seq_len, Ts = T / R;
    if (c->cp_doc) cp_doc_order(ds, T, R, order);
    for (int r = 0; r < R; r++) {
        if (!c->cp_doc) cp_positions(order + r * Ts, T, R, 1, r, c->cp_contiguous);
        pairs[r] += attention_work(ds, 1, T, order + r * Ts, Ts);
    }
}

// ring[u * R + r]: ring rank r's pairs of micro-batch u (of U) -> heavy[u], its heaviest rank's (each
// layer's ring waits for it); returns the spread of the ranks' sums over the batch.
static double cp_ring_heaviest(const double* ring, int U, int R, double* heavy) {
    double* rank = (double*)xcalloc(R, sizeof(double));
    for (int u = 0; u < U; u++) {
        heavy[u] = 0;
        for (int r = 0; r < R; r++) {
            double w = ring[(size_t)u * R + r];
            heavy[u] = w > heavy[u] ? w : heavy[u], rank[r] += w;
        }
    }
    double spread = spread_of(rank, R);
    free(rank);
    return spread;
}

#endif
