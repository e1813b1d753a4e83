// layer_parallel/context_parallel.h: context parallelism, each sequence split over cp ranks.
// Everything outside the attention works on this rank's T/cp rows of every sequence as if
// they were the sequence (Model.T is T/cp); the attention needs every earlier token, so it
// communicates here. cp = U x R (USP, Fang and Zhao 2024; LoongTrain):
//
//   Ulysses (Jacobs et al. 2023), degree U: an all-to-all inside U adjacent ranks turns
//     the sequence split into a head split (each of the U ranks then holds 1/U of the heads
//     for the U ranks' rows), and back after the attention. U divides the heads and the KV
//     heads of this tp rank.
//   Ring (Liu et al. 2023), degree R: K and V of the R ranks' rows travel around the ring;
//     each rank merges the block it holds into its output by log-sum-exp (below: the ring's
//     merge) while the next block is in flight. The backward sends K and V the same way
//     and dK, dV (fp32) one step behind them, back to their owner after R steps.
//
// Zig-zag split (Megatron-LM's context parallelism, ring-flash-attention): causal masking
// gives late rows more keys, so a contiguous split would leave the first ring rank idle.
// The sequence is cut into 2R chunks of c = T/(2R) rows; ring rank r holds chunks r and
// 2R-1-r (its Ts = 2c rows, in that order), the U Ulysses ranks of it T/cp rows each of
// those. With R = 1 the rows are the sequence in order (one segment). --cp-split
// contiguous gives ring rank r rows [r*Ts, (r+1)*Ts) instead, to measure the imbalance.
// With documents the attention stays within each, so the sequence's zig-zag no longer balances
// the ranks (a long document in one rank's chunks); --cp-split doc zig-zags each document on its
// own instead (WLB-LLM, Wang et al. 2025; cp_doc_order), the rows then differing per sequence.
//
// Rank order (grid.h): cp_rank = ring_rank * U + ulysses_rank, next to tp, so the all-to-
// all stays among the closest ranks. Weights are replicated over cp: their gradients are
// reduced over dp x cp (grid.h's dp group holds both), and ZeRO shards over dp x cp.
#ifndef CONTEXT_PARALLEL_H
#define CONTEXT_PARALLEL_H

#include "backend/backend.h"  // the state, the ring and the blocks (ring_start / ring_wait, op_attention_blocks_*)

#include "layout/activations.h"  // cp_bufs
#include "layout/cp_order.h"  // cp_ring_position, cp_positions, cp_doc_order

// --cp-split doc: micro-batch loading. Every rank reads its dp rank's whole sequences, orders
// each by its documents (m->cp_order) and keeps the rows of its cp rank; RoPE/wpe positions
// follow (docs_positions). Only with documents (m->cp_order; without, the zig-zag is it).
static void cp_load_by_doc(Model* m, const TokenStream* ts, size_t index) {
    int T = m->c.seq_len, Tl = m->T, n_seq = m->n_micro * m->B, first = m->L.cp_rank * Tl;
    int *all = (int*)xmalloc(sizeof(int) * (3 * (size_t)n_seq * T + T)), *pos = all + 3 * (size_t)n_seq * T;
    int *targets = all + (size_t)n_seq * T, *doc_start = targets + (size_t)n_seq * T;
    for (int j = 0; j < T; j++) pos[j] = j;
    load_batch(ts, &m->c, m->L.dp_rank, m->n_micro, index, pos, T, all, targets, doc_start, m->doc_seq);
    for (int s = 0; s < n_seq; s++) {
        int* order = m->cp_order + (size_t)s * T;
        cp_doc_order(m->doc_seq + (size_t)s * T, T, m->c.cp / m->c.cp_ulysses, order);
        for (int j = 0; j < Tl; j++) {
            size_t from = (size_t)s * T + order[first + j], to = (size_t)s * Tl + j;
            m->inputs[to] = all[from], m->targets[to] = targets[from], m->doc_start[to] = doc_start[from];
        }
    }
    free(all);
    m->cp_by_doc = 1;
    docs_positions(m, n_seq);
}

// The cp rank that holds sequence position p, and its row there.
static int cp_rank_of_position(const Model* m, int p, int* row) {
    int T = m->c.seq_len, U = m->c.cp_ulysses, R = m->c.cp / U, c = T / (2 * R), i = p, r = 0;
    if (m->c.cp_contiguous) r = p / (T / R), i = p % (T / R);
    else if (R > 1) {
        int k = p / c;  // the zig-zag chunk
        r = k < R ? k : 2 * R - 1 - k;
        i = k < R ? p - r * c : c + p - (2 * R - 1 - r) * c;
    }
    *row = i % m->T;
    return r * U + i / m->T;
}

// Segments of contiguous positions among a ring rank's Ts rows: two chunks, or one.
typedef struct { int row, n, pos; } CpSegment;
static int cp_segments(int r, int R, int T, int contiguous, CpSegment* seg) {
    if (R == 1 || contiguous) { seg[0] = (CpSegment){0, T / R, r * (T / R)}; return 1; }
    int c = T / (2 * R);
    seg[0] = (CpSegment){0, c, r * c};
    seg[1] = (CpSegment){c, c, (2 * R - 1 - r) * c};
    return 2;
}

// The shapes of this rank's attention after the Ulysses all-to-all.
typedef struct { int U, R, ring_rank, Ha, KVa, Ts, qa_dim; } CpShape;
static CpShape cp_shape(const Model* m) {
    CpShape s;
    s.U = m->c.cp_ulysses, s.R = m->c.cp / s.U, s.ring_rank = m->L.cp_rank / s.U;
    s.Ha = m->n_head_local / s.U, s.KVa = m->n_kv_head_local / s.U, s.Ts = m->T * s.U;
    s.qa_dim = (s.Ha + 2 * s.KVa) * m->hd;
    return s;
}

// This rank's cp buffers' sizes (layout/activations.h cp_bufs: the planner sums the same).
static CpBufs cp_bufs_of(const Model* m) {
    return cp_bufs(m->B, m->T, m->n_head_local, m->n_kv_head_local, m->hd, m->c.cp, m->c.cp_ulysses, sizeof(act_t));
}
// The ring's two transfer buffers hold [K,V (act_t) | dK,dV (fp32)] of one ring rank's rows,
// so one exchange moves both; the dK,dV part starts at kv_bytes (256-byte aligned).
static float* cp_dkv_of(Model* m, int i) { return (float*)((char*)m->cp_kv[i] + cp_bufs_of(m).kv_bytes); }

// Buffers of one layer's attention (shared by all layers).
static void cp_alloc(Model* m) {
    if (m->c.cp == 1) return;
    CpBufs b = cp_bufs_of(m);
    m->cp_o = f32_alloc(m, b.o);
    m->cp_dkv = f32_alloc(m, b.kv);  // this rank's part of a step's dK,dV
    for (int i = 0; i < 2; i++) m->cp_kv[i] = act_alloc(m, (b.ring_bytes + sizeof(act_t) - 1) / sizeof(act_t));
    if (m->c.cp_ulysses > 1) {
        m->cp_qkv = act_alloc(m, b.qkv);
        m->cp_out = act_alloc(m, b.o), m->cp_dout = act_alloc(m, b.o);
        m->cp_send = act_alloc(m, b.qkv), m->cp_recv = act_alloc(m, b.qkv);
    }
    m->scratch_bytes += (size_t)b.bytes;
}

// ----------------------------------------------------------------------------
// Ulysses: sequence split <-> head split. A row of x holds pieces of heads (q, k, v for
// qkv; the heads for the attention's output); each piece splits into U equal parts, part u
// for Ulysses rank u. The head-split buffer holds the U ranks' rows in their order (rank u's
// T/cp rows of sequence b at rows b*Ts + u*T/cp), each row the parts of every piece.

typedef struct { int col, heads; } HeadPiece;

static void ulysses_to_heads(Model* m, act_t* xa, const act_t* x, int ld, const HeadPiece* piece, int n_piece, int B) {
    CpShape s = cp_shape(m);
    int hd = m->hd, Tl = m->T, lda = 0;
    for (int p = 0; p < n_piece; p++) lda += piece[p].heads / s.U * hd;
    size_t rows = (size_t)B * Tl, blk = rows * lda;
    for (int u = 0; u < s.U; u++)
        for (int p = 0, col = 0; p < n_piece; col += piece[p].heads / s.U * hd, p++)
            act_copy_2d(m, m->cp_send + u * blk + col, lda, x + piece[p].col + u * (piece[p].heads / s.U) * hd, ld,
                        rows, piece[p].heads / s.U * hd);
    act_alltoall(m, GROUP_CP_ULYSSES, m->cp_send, m->cp_recv, blk);  // comm: cp all-to-all (Ulysses), to heads
    for (int u = 0; u < s.U; u++)
        for (int b = 0; b < B; b++)
            act_copy(m, xa + ((size_t)b * s.Ts + u * Tl) * lda, m->cp_recv + u * blk + (size_t)b * Tl * lda,
                     (size_t)Tl * lda);
}

static void ulysses_to_rows(Model* m, act_t* x, int ld, const act_t* xa, const HeadPiece* piece, int n_piece, int B) {
    CpShape s = cp_shape(m);
    int hd = m->hd, Tl = m->T, lda = 0;
    for (int p = 0; p < n_piece; p++) lda += piece[p].heads / s.U * hd;
    size_t rows = (size_t)B * Tl, blk = rows * lda;
    for (int u = 0; u < s.U; u++)
        for (int b = 0; b < B; b++)
            act_copy(m, m->cp_send + u * blk + (size_t)b * Tl * lda, xa + ((size_t)b * s.Ts + u * Tl) * lda,
                     (size_t)Tl * lda);
    act_alltoall(m, GROUP_CP_ULYSSES, m->cp_send, m->cp_recv, blk);  // comm: cp all-to-all (Ulysses), to rows
    for (int u = 0; u < s.U; u++)
        for (int p = 0, col = 0; p < n_piece; col += piece[p].heads / s.U * hd, p++)
            act_copy_2d(m, x + piece[p].col + u * (piece[p].heads / s.U) * hd, ld, m->cp_recv + u * blk + col, lda,
                        rows, piece[p].heads / s.U * hd);
}

static int qkv_pieces(const Model* m, HeadPiece* piece) {
    piece[0] = (HeadPiece){0, m->n_head_local};
    piece[1] = (HeadPiece){m->n_head_local * m->hd, m->n_kv_head_local};
    piece[2] = (HeadPiece){(m->n_head_local + m->n_kv_head_local) * m->hd, m->n_kv_head_local};
    return 3;
}

// ----------------------------------------------------------------------------
// Ring attention over the R ring ranks.
//
// The ring's merge. Each ring step brings the keys of one more segment; the attention of a
// query row over a block of keys (max score mx, sum of exponentials l, unnormalized output
// y = sum_j e^(s_j - mx) v_j) is merged into the row's running output o and log-sum-exp lse:
//     blk = mx + log l,  lse' = log(e^lse + e^blk),  o' = o e^(lse - lse') + y e^(mx - lse'),
// so the blocks may come in any order and o is normalized after each. A row's first block
// (AttnBlock.init, the diagonal) starts o and lse; a row that sees no key of a block keeps
// them. The merge runs inside the block kernels, on each row as its block finishes: the
// CPU's lse_merge_row (backend/cpu/attention.h), the GPU's att_merge in registers
// (backend/gpu/attention_block.cuh).

// Whether query positions [q0, q1] see any key in [k0, k1] in some sequence of the micro-batch
// (documents: doc_start is nondecreasing along a sequence, so exactly when k0 <= q1 and k1 >=
// doc_start[q0]; the host's copy decides, the same on every rank).
static int cp_block_visible(const Model* m, int B, int q0, int q1, int k0, int k1) {
    if (k0 > q1) return 0;  // every key after every query: the causal mask
    if (!m->doc_start) return 1;
    const int* doc = m->doc_seq + (size_t)m->mb * m->B * m->c.seq_len;
    for (int b = 0; b < B; b++)
        if (k1 >= doc[(size_t)b * m->c.seq_len + q0]) return 1;
    return 0;  // every key before every query's document
}

// The blocks of (this rank's query segments) x (the key segments of ring rank src) that hold
// a visible pair.
static int cp_blocks(const Model* m, const CpShape* s, int src, int B, int q_ld, int kv_ld, AttnBlock* blk) {
    if (m->cp_by_doc) {  // --cp-split doc: all rows in one block, their positions looked up (the kernels bisect)
        const int* order = m->kernel_cp_order + (size_t)m->mb * m->B * m->c.seq_len;
        AttnBlock a = {B, s->Ts, s->Ha, s->KVa, m->hd, q_ld, kv_ld, 0, s->Ts, 0, 0, s->Ts, 0, src == s->ring_rank,
                       mb_docs(m), m->c.seq_len, order + s->ring_rank * s->Ts, order + src * s->Ts, m->c.seq_len};
        blk[0] = a;
        return 1;
    }
    CpSegment qs[2], ks[2];
    int split = m->c.cp_contiguous, nq = cp_segments(s->ring_rank, s->R, m->c.seq_len, split, qs);
    int nk = cp_segments(src, s->R, m->c.seq_len, split, ks), n = 0;
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < nk; j++) {
            if (!cp_block_visible(m, B, qs[i].pos, qs[i].pos + qs[i].n - 1, ks[j].pos, ks[j].pos + ks[j].n - 1))
                continue;
            // init: its own chunk comes first, every query sees its own key
            AttnBlock a = {B, s->Ts, s->Ha, s->KVa, m->hd, q_ld, kv_ld, qs[i].row, qs[i].n, qs[i].pos,
                           ks[j].row, ks[j].n, ks[j].pos, src == s->ring_rank && i == j, mb_docs(m), m->c.seq_len,
                           NULL, NULL, 0};
            blk[n++] = a;
        }
    // the diagonal blocks (init) before the others of the same query rows
    for (int i = 1; i < n; i++)
        if (blk[i].init) { AttnBlock t = blk[i]; memmove(blk + 1, blk, sizeof(AttnBlock) * i); blk[0] = t; }
    return n;
}

// The gradient of the blocks of one ring step (keys of ring rank src in kv): dq +=, dkv +=.
static void cp_blocks_backward(Model* m, const CpShape* s, int src, int B, const act_t* qa, const act_t* kv, int kv_ld,
                               const act_t* doa, const act_t* oa, const float* lse, float* dq, float* dkv) {
    AttnBlock blk[4];
    int n = cp_blocks(m, s, src, B, s->qa_dim, kv_ld, blk);
    double t0 = now_s();
    op_attention_blocks_backward(m, dq, dkv, qa, kv, doa, oa, lse, blk, n);
    trace_ring(m->trace, 0, (s->ring_rank - src + s->R) % s->R, t0, now_s());
}

// Causal attention of qkv (this rank's rows, B x T/cp) into out; lse (B x Ha x Ts) kept
// for the backward.
static void cp_attention_forward(Model* m, act_t* out, float* lse, const act_t* qkv, int B) {
    if (m->c.cp == 1) { op_attention_forward(m, out, lse, qkv, B); return; }
    CpShape s = cp_shape(m);
    HeadPiece piece[3];
    int n_piece = qkv_pieces(m, piece), hd = m->hd, kv_ld = 2 * s.KVa * hd;
    const act_t* qa = qkv;
    if (s.U > 1) ulysses_to_heads(m, m->cp_qkv, qkv, m->qkv_dim, piece, n_piece, B), qa = m->cp_qkv;
    size_t rows = (size_t)B * s.Ts;
    if (s.R > 1) act_copy_2d(m, m->cp_kv[0], kv_ld, qa + s.Ha * hd, s.qa_dim, rows, kv_ld);  // own K, V to send
    AttnBlock blk[4];
    for (int step = 0; step < s.R; step++) {
        int src = (s.ring_rank - step + s.R) % s.R, cur = step & 1;
        // comm: cp ring (K, V to the next ring rank, from the previous), overlapped with this block
        if (step + 1 < s.R) ring_start(m, m->cp_kv[cur], m->cp_kv[cur ^ 1], sizeof(act_t) * rows * kv_ld, step);
        const act_t* kv = step == 0 ? qa + s.Ha * hd : m->cp_kv[cur];
        int n = cp_blocks(m, &s, src, B, s.qa_dim, step == 0 ? s.qa_dim : kv_ld, blk);
        double t0 = now_s();
        op_attention_blocks_forward(m, m->cp_o, lse, qa, kv, blk, n);
        trace_ring(m->trace, 0, step, t0, now_s());
        if (step + 1 < s.R) ring_wait(m, step);
    }
    if (s.U == 1) op_f32_to_act(m, out, m->cp_o, rows * s.Ha * hd);
    else {
        op_f32_to_act(m, m->cp_out, m->cp_o, rows * s.Ha * hd);
        HeadPiece heads = {0, m->n_head_local};
        ulysses_to_rows(m, out, m->n_head_local * hd, m->cp_out, &heads, 1, B);
    }
}

// dqkv (this rank's rows) from dout; out and lse as the forward left them. With Ulysses
// the head-split qkv, output and output gradient are made again by all-to-alls (only
// this rank's rows of each are kept between forward and backward).
static void cp_attention_backward(Model* m, act_t* dqkv, const act_t* dout, const act_t* qkv, const act_t* out,
                                  const float* lse, int B) {
    if (m->c.cp == 1) { op_attention_backward(m, dqkv, dout, qkv, out, lse, B); return; }
    CpShape s = cp_shape(m);
    HeadPiece piece[3], heads = {0, m->n_head_local};
    int n_piece = qkv_pieces(m, piece), hd = m->hd, kv_ld = 2 * s.KVa * hd;
    const act_t *qa = qkv, *oa = out, *doa = dout;
    if (s.U > 1) {
        ulysses_to_heads(m, m->cp_qkv, qkv, m->qkv_dim, piece, n_piece, B), qa = m->cp_qkv;
        ulysses_to_heads(m, m->cp_out, out, m->n_head_local * hd, &heads, 1, B), oa = m->cp_out;
        ulysses_to_heads(m, m->cp_dout, dout, m->n_head_local * hd, &heads, 1, B), doa = m->cp_dout;
    }
    size_t rows = (size_t)B * s.Ts, nkv = rows * kv_ld, kv_bytes = cp_bufs_of(m).kv_bytes;
    size_t dkv_bytes = sizeof(float) * nkv;
    float* dq = m->cp_o;
    f32_zero(m, dq, rows * s.Ha * hd);
    if (s.R == 1) {  // Ulysses only: every key is here
        f32_zero(m, m->cp_dkv, nkv);
        cp_blocks_backward(m, &s, 0, B, qa, qa + s.Ha * hd, s.qa_dim, doa, oa, lse, dq, m->cp_dkv);
    } else {
        // The ring, one exchange per step, overlapped with the step's blocks: exchange `step`
        // sends [K,V this step uses | dK,dV of the previous step's source, this rank's part
        // added] and receives [K,V for the next step | dK,dV of this step's source so far];
        // this step's part accumulates apart (cp_dkv) and is added once both are here. The
        // first exchange carries no dK,dV, the last no K,V; after the last step one more
        // brings this rank's own dK,dV home (the one transfer not hidden).
        act_copy_2d(m, m->cp_kv[0], kv_ld, qa + s.Ha * hd, s.qa_dim, rows, kv_ld);
        for (int step = 0; step < s.R; step++) {
            int src = (s.ring_rank - step + s.R) % s.R, cur = step & 1, last = step == s.R - 1;
            char *send = (char*)m->cp_kv[cur], *recv = (char*)m->cp_kv[cur ^ 1];
            // step 0's part starts the dK,dV of its source (this rank) right where it is sent from
            float* part = step == 0 ? cp_dkv_of(m, cur ^ 1) : m->cp_dkv;
            // comm: cp ring (K,V onward and/or dK,dV onward), overlapped with this step's blocks
            ring_start(m, send + (step ? (last ? kv_bytes : 0) : 0) , recv + (step && last ? kv_bytes : 0),
                       (last ? 0 : kv_bytes) + (step ? dkv_bytes : 0), step);
            f32_zero(m, part, nkv);
            const act_t* kv = step == 0 ? qa + s.Ha * hd : m->cp_kv[cur];
            cp_blocks_backward(m, &s, src, B, qa, kv, step == 0 ? s.qa_dim : kv_ld, doa, oa, lse, dq, part);
            ring_wait(m, step);
            if (step) f32_add(m, cp_dkv_of(m, cur ^ 1), part, nkv);  // the source's dK,dV so far + this rank's part
        }
        int fin = (s.R - 1) & 1;
        // comm: cp ring (the last step's dK,dV to their owner: this rank receives its own)
        ring_start(m, cp_dkv_of(m, fin ^ 1), cp_dkv_of(m, fin), dkv_bytes, -s.R);
        ring_wait(m, -s.R);
    }
    float* dkv = s.R == 1 ? m->cp_dkv : cp_dkv_of(m, (s.R - 1) & 1);
    act_t* dqkv_a = s.U > 1 ? m->cp_qkv : dqkv;
    op_attention_grad_pack(m, dqkv_a, dq, dkv, rows, s.Ha, s.KVa);
    if (s.U > 1) ulysses_to_rows(m, dqkv, m->qkv_dim, dqkv_a, piece, n_piece, B);
}

#endif
