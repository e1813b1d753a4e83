// backend/cpu/attention.h: RoPE in place on the q and k heads of qkv rows, and causal
// attention with grouped-query heads by blocks (FlashAttention's algorithm): a block of
// query rows against a block of key rows (layout/config.h AttnBlock), merged into a running
// output o (B*Ts x Ha*hd) and log-sum-exp lse (B x Ha x Ts); the whole sequence is one
// block (attention_forward: qkv B*T x (H + 2 KV)*hd -> out B*T x H*hd, lse B x H x T).
#ifndef CPU_ATTENTION_H
#define CPU_ATTENTION_H

#include "layout/config.h"  // AttnBlock
#include "backend/cpu/simd.h"
#include "backend/cpu/gemm.h"

// Rotary position embeddings (Su et al. 2021), applied in place to the q and k heads of
// qkv rows (N = B*T rows, row stride `stride`, position of row i is pos[i % T]). Pairs are
// (2j, 2j+1) within a head, angle pos * theta^(-2j/hd), theta the model's (--rope-theta).
// The backward is the rotation by the opposite angle (sign = -1).

static void rope_apply(float* qkv, int N, const int* positions, int T, int stride, int n_heads, int hd, float theta,
                       float sign) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int pos = positions[i % T];
        for (int h = 0; h < n_heads; h++) {
            float* x = qkv + (size_t)i * stride + h * hd;
            for (int j = 0; j < hd / 2; j++) {
                float ang = pos * powf(theta, -2.0f * j / hd);
                float c = cosf(ang), s = sign * sinf(ang);
                float a = x[2 * j], b = x[2 * j + 1];
                x[2 * j] = a * c - b * s;
                x[2 * j + 1] = a * s + b * c;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// Causal attention by blocks (FlashAttention's algorithm, Dao et al. 2022): the queries of
// one block of rows against the keys of another (layout/config.h AttnBlock), never a T x T
// matrix. The forward merges each block into a running output o (B*Ts rows x Ha*hd,
// normalized) and its log-sum-exp lse (B x Ha x Ts) by lse_merge_row (the ring's merge,
// layer_parallel/context_parallel.h), so the blocks may come in any order. The backward of a
// block needs only the final lse: P = exp(scale q k^T - lse), D = rowsum(dout * out),
//     dv += P^T dout,  dS = P (dout v^T - D) scale,  dq += dS k,  dk += dS^T q.
// Query head h uses kv head h / (Ha/KVa) (grouped-query attention). The products are
// gemm() calls on the calling thread (one head per thread), over tiles of at most ATT_ROWS
// queries whose keys end where the tile's last query is; every sum runs in the same order
// whatever the thread count.
//
// Document masking (a->doc, data/data.h): query q sees keys [doc[q], q], so a row's keys
// in the block are a range [first, n). doc is nondecreasing along a sequence, so a tile's
// first row has the smallest first key and its last row the largest n: the tile's products
// run over the keys [first of its first row, n of its last row) only, and a tile (or, in
// context_parallel.h, a whole block) with no visible pair costs nothing. A tile starts as the
// run of its first row's document (consecutive positions) and takes in the next runs while one
// gemm call costs less than two (att_tile_end), so a long document's tiles see no other
// document's keys and short ones (padding: one a position) share a call.
// With --cp-split doc (k_at, q_at) a block's rows are increasing positions, not consecutive
// (each document's two chunks, one after the other; a run ends where the positions jump); a
// row's keys are still a range of the block's key rows, found by bisection. Tiles of 32 rows
// whatever their documents computed 1.25x / 1.54x / 1.95x the visible pairs at R 1 / 2 / 4 at
// dev/bench_wlb.py's shape, these 1.13x / 1.15x / 1.25x (./test_gpt "cp split": the forward's
// returned count; runs alone would be 1.13x / 1.11x / 1.08x, but slower, in more calls).
#define ATT_ROWS 32

// The key rows of the block at positions before p in sequence b (k_at: increasing, bisected).
static int att_keys_before(const AttnBlock* a, int b, int p) {
    if (!a->k_at) {
        int n = p - a->k_pos;
        return n < 0 ? 0 : n > a->nk ? a->nk : n;
    }
    const int* at = a->k_at + (size_t)b * a->at_ld;
    int lo = 0, hi = a->nk;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (at[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
// The position of query row t (of the block) in sequence b.
static int att_query_position(const AttnBlock* a, int b, int t) {
    return a->q_at ? a->q_at[(size_t)b * a->at_ld + t] : a->q_pos + t;
}
// The keys of the block that query row t of sequence b may see: [0, n).
static int att_keys_seen(const AttnBlock* a, int b, int t) {
    return att_keys_before(a, b, att_query_position(a, b, t) + 1);
}
// The first of them: its document's start (0 without documents).
static int att_keys_first(const AttnBlock* a, int b, int t) {
    if (!a->doc) return 0;
    return att_keys_before(a, b, a->doc[(size_t)b * a->doc_ld + att_query_position(a, b, t)]);
}
// The end of the run of query rows from t (before `end`) at consecutive positions of one document.
static int att_run_end(const AttnBlock* a, int b, int t, int end) {
    if (!a->doc && !a->q_at) return end;
    const int* doc = a->doc ? a->doc + (size_t)b * a->doc_ld : NULL;
    int t0 = t, p0 = att_query_position(a, b, t);
    for (t++; t < end && att_query_position(a, b, t) == p0 + t - t0 && (!doc || doc[p0 + t - t0] == doc[p0]); t++) {}
    return t;
}
// What a tile of query rows [t0, t1) costs, in products: its rows x keys in whole gemm micro-tiles
// (backend/cpu/gemm.h) and a call's fixed cost, ATT_CALL_COST (0 to 1024 measured alike).
#define ATT_CALL_COST 256
static double att_tile_cost(const AttnBlock* a, int b, int t0, int t1) {
    int keys = att_keys_seen(a, b, t1 - 1) - att_keys_first(a, b, t0);
    if (keys <= 0) return 0;
    return (double)((t1 - t0 + GEMM_MR - 1) / GEMM_MR * GEMM_MR) * ((keys + GEMM_NR - 1) / GEMM_NR * GEMM_NR) +
           ATT_CALL_COST;
}
// The end of the tile of query rows from t0 of sequence b: at most ATT_ROWS rows, runs of one
// document's consecutive positions (att_run_end), the next joined while one tile costs less than two.
static int att_tile_end(const AttnBlock* a, int b, int t0) {
    int end = a->nq - t0 < ATT_ROWS ? a->nq : t0 + ATT_ROWS, t1 = att_run_end(a, b, t0, end);
    while (t1 < end) {
        int t2 = att_run_end(a, b, t1, end);
        if (att_tile_cost(a, b, t0, t2) > att_tile_cost(a, b, t0, t1) + att_tile_cost(a, b, t1, t2)) break;
        t1 = t2;
    }
    return t1;
}

// s[lo, hi) = exp(scale * s - shift), zero in [0, lo) and [hi, keys); returns the sum over [lo, hi).
static float att_exp_row(float* s, int lo, int hi, int keys, float scale, float shift) {
    vec vscale = vbcast(scale), vshift = vbcast(shift), sum = vzero();
    for (int c = 0; c < lo; c++) s[c] = 0.0f;
    ROW_LOOP(c, w, hi - lo) {
        vec e = vfirst(vexp(vsub(vmul(vloadn(s + lo + c, w), vscale), vshift)), w);
        vstoren(s + lo + c, e, w);
        sum = vadd(sum, e);
    }
    for (int c = hi > lo ? hi : lo; c < keys; c++) s[c] = 0.0f;
    return vsum(sum);
}

// The ring's merge (layer_parallel/context_parallel.h states it) of one query row: the block's
// unnormalized output y (hd), its row maximum mx and sum of exponentials l, into the row's
// running output o (hd) and log-sum-exp *lse; init: the row's first block (o, *lse unread).
static void lse_merge_row(float* o, float* lse, const float* y, float mx, float l, int hd, int init) {
    float old = init ? -INFINITY : *lse;
    if (l == 0.0f) {  // no key of this block is visible
        if (init) { for (int d = 0; d < hd; d++) o[d] = 0.0f; *lse = -INFINITY; }
        return;
    }
    float blk = mx + logf(l);
    float top = old > blk ? old : blk, merged = top + logf(expf(old - top) + expf(blk - top));
    float keep = old == -INFINITY ? 0.0f : expf(old - merged), add = expf(mx - merged);
    for (int d = 0; d < hd; d++) o[d] = (keep ? o[d] * keep : 0.0f) + y[d] * add;
    *lse = merged;
}

// Returns the query-key pairs it computed (over the sequences and heads): the backward's too,
// which tiles alike.
static double attention_block_forward(float* o, int o_ld, float* lse, const float* q, const float* kv,
                                      const AttnBlock* a) {
    int Ha = a->Ha, hd = a->hd, group = Ha / a->KVa;
    float scale = 1.0f / sqrtf((float)hd);
    double pairs = 0;
#pragma omp parallel for collapse(2) schedule(dynamic) reduction(+ : pairs)
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < Ha; h++) {
            size_t q0 = (size_t)b * a->Ts + a->q_row, k0 = (size_t)b * a->Ts + a->k_row;
            const float* qh = q + q0 * a->q_ld + h * hd;
            const float* k = kv + k0 * a->kv_ld + (h / group) * hd;
            const float* v = kv + k0 * a->kv_ld + (a->KVa + h / group) * hd;
            float* oh = o + q0 * o_ld + h * hd;
            float* lh = lse + ((size_t)b * Ha + h) * a->Ts + a->q_row;
            float* S = (float*)xmalloc(sizeof(float) * ATT_ROWS * (a->nk + hd));
            float* Y = S + (size_t)ATT_ROWS * a->nk;
            for (int t0 = 0, t1; t0 < a->nq; t0 = t1) {
                t1 = att_tile_end(a, b, t0);
                int rows = t1 - t0, k0 = att_keys_first(a, b, t0);
                int keys = att_keys_seen(a, b, t0 + rows - 1) - k0;  // the tile's keys: [k0, k0 + keys)
                float mx[ATT_ROWS], l[ATT_ROWS];
                if (keys <= 0) {  // no visible pair: each row keeps its output (or starts it empty)
                    for (int t = 0; t < rows; t++)
                        lse_merge_row(oh + (size_t)(t0 + t) * o_ld, lh + t0 + t, Y, 0.0f, 0.0f, hd, a->init);
                    continue;
                }
                pairs += (double)rows * keys;
                gemm(rows, keys, hd, qh + (size_t)t0 * a->q_ld, a->q_ld, 0, k + (size_t)k0 * a->kv_ld, a->kv_ld, 1,
                     S, keys, 0);
                for (int t = 0; t < rows; t++) {
                    int lo = att_keys_first(a, b, t0 + t) - k0, n = att_keys_seen(a, b, t0 + t) - k0;
                    float* s = S + (size_t)t * keys;
                    mx[t] = -INFINITY;
                    for (int j = lo; j < n; j++) mx[t] = s[j] > mx[t] ? s[j] : mx[t];
                    mx[t] *= scale;
                    l[t] = n > lo ? att_exp_row(s, lo, n, keys, scale, mx[t])
                                  : (att_exp_row(s, 0, 0, keys, scale, 0), 0.0f);
                }
                gemm(rows, hd, keys, S, keys, 0, v + (size_t)k0 * a->kv_ld, a->kv_ld, 0, Y, hd, 0);  // y = exp(..) v
                for (int t = 0; t < rows; t++)
                    lse_merge_row(oh + (size_t)(t0 + t) * o_ld, lh + t0 + t, Y + (size_t)t * hd, mx[t], l[t], hd,
                                  a->init);
            }
            free(S);
        }
    return pairs;
}

// Parallel over (b, kv head), so the query heads that share a kv head add into dk and dv
// one after the other (in order) and never race. dq, dkv accumulate (+=); dkv rows hold
// dk (KVa heads) then dv, like kv.
static void attention_block_backward(float* dq, int dq_ld, float* dkv, int dkv_ld, const float* q, const float* kv,
                                     const float* dout, const float* out, int o_ld, const float* lse,
                                     const AttnBlock* a) {
    int Ha = a->Ha, KVa = a->KVa, hd = a->hd, group = Ha / KVa;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < a->B; b++)
        for (int kvh = 0; kvh < KVa; kvh++) {
            size_t q0 = (size_t)b * a->Ts + a->q_row, k0 = (size_t)b * a->Ts + a->k_row;
            const float* k = kv + k0 * a->kv_ld + kvh * hd;
            const float* v = kv + k0 * a->kv_ld + (KVa + kvh) * hd;
            float* dk = dkv + k0 * dkv_ld + kvh * hd;
            float* dv = dkv + k0 * dkv_ld + (KVa + kvh) * hd;
            float* P = (float*)xmalloc(sizeof(float) * 2 * ATT_ROWS * a->nk);
            float* dS = P + (size_t)ATT_ROWS * a->nk;
            for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                const float* qh = q + q0 * a->q_ld + h * hd;
                const float* doh = dout + q0 * o_ld + h * hd;
                const float* oh = out + q0 * o_ld + h * hd;
                const float* lh = lse + ((size_t)b * Ha + h) * a->Ts + a->q_row;
                float* dqh = dq + q0 * dq_ld + h * hd;
                for (int t0 = 0, t1; t0 < a->nq; t0 = t1) {
                    t1 = att_tile_end(a, b, t0);
                    int rows = t1 - t0, k0 = att_keys_first(a, b, t0);
                    int keys = att_keys_seen(a, b, t0 + rows - 1) - k0;  // the tile's keys: [k0, k0 + keys)
                    if (keys <= 0) continue;
                    const float *kt = k + (size_t)k0 * a->kv_ld, *vt = v + (size_t)k0 * a->kv_ld;
                    float *dkt = dk + (size_t)k0 * dkv_ld, *dvt = dv + (size_t)k0 * dkv_ld;
                    gemm(rows, keys, hd, qh + (size_t)t0 * a->q_ld, a->q_ld, 0, kt, a->kv_ld, 1, P, keys, 0);
                    gemm(rows, keys, hd, doh + (size_t)t0 * o_ld, o_ld, 0, vt, a->kv_ld, 1, dS, keys, 0);  // dout v^T
                    for (int t = 0; t < rows; t++) {
                        float* p = P + (size_t)t * keys;
                        float* ds = dS + (size_t)t * keys;
                        const float *dot = doh + (size_t)(t0 + t) * o_ld, *ot = oh + (size_t)(t0 + t) * o_ld;
                        float D = 0.0f;
                        for (int d = 0; d < hd; d++) D += dot[d] * ot[d];
                        att_exp_row(p, att_keys_first(a, b, t0 + t) - k0, att_keys_seen(a, b, t0 + t) - k0, keys, scale,
                                    lh[t0 + t]);
                        vec vD = vbcast(D), vscale = vbcast(scale);
                        ROW_LOOP(c, w, keys)
                            vstoren(ds + c, vmul(vmul(vloadn(p + c, w), vsub(vloadn(ds + c, w), vD)), vscale), w);
                    }
                    gemm(rows, hd, keys, dS, keys, 0, kt, a->kv_ld, 0, dqh + (size_t)t0 * dq_ld, dq_ld, 1);
                    gemm(keys, hd, rows, dS, keys, 1, qh + (size_t)t0 * a->q_ld, a->q_ld, 0, dkt, dkv_ld, 1);
                    gemm(keys, hd, rows, P, keys, 1, doh + (size_t)t0 * o_ld, o_ld, 0, dvt, dkv_ld, 1);
                }
            }
            free(P);
        }
}

// The whole causal sequence as one block: qkv rows (B*T) hold [q: H*hd | k: KV*hd | v: KV*hd];
// out (B*T x H*hd), lse (B x H x T); dqkv is overwritten. doc (B x T, NULL: none): documents.
static AttnBlock attention_whole(int B, int T, int H, int KV, int hd, const int* doc) {
    AttnBlock a = {B, T, H, KV, hd, (H + 2 * KV) * hd, (H + 2 * KV) * hd, 0, T, 0, 0, T, 0, 1, doc, T, NULL, NULL, 0};
    return a;
}
static void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int KV, int hd,
                              const int* doc) {
    AttnBlock a = attention_whole(B, T, H, KV, hd, doc);
    attention_block_forward(out, H * hd, lse, qkv, qkv + H * hd, &a);
}
static void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                               int B, int T, int H, int KV, int hd, const int* doc) {
    AttnBlock a = attention_whole(B, T, H, KV, hd, doc);
    memset(dqkv, 0, sizeof(float) * B * T * a.q_ld);
    attention_block_backward(dqkv, a.q_ld, dqkv + H * hd, a.q_ld, qkv, qkv + H * hd, dout, out, H * hd, lse, &a);
}

#endif
