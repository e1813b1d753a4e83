// parallel/cp_order.h: which positions of a sequence each context-parallel rank holds
// (parallel/context_parallel.h states the splits): the sequence's zig-zag or contiguous split,
// and --cp-split doc's per-document zig-zag. Pure functions of the shape (and the documents),
// apart from the Model, so the planner (planner/documents.h) and dev/sim_wlb.c order the rows
// as the trainer does.
#ifndef CP_ORDER_H
#define CP_ORDER_H

#include "runtime/common.h"  // xcalloc

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

#endif
