// tests/gpu_blocks_loss.cu: test_gpu's context-parallel attention blocks, the embedding,
// cross-entropy, AdamW and the other small kernels, each against kernels_cpu.h.
// Included by tests/test_gpu.cu after its helpers (one test binary); not built alone.
#include "layout/cp_order.h"  // cp_doc_order: --cp-split doc's rows

// Context parallelism's blocks (layout/config.h AttnBlock) on the GPU and the CPU, in the
// order a ring rank runs them: the forward merges each into the running fp32 output and
// log-sum-exp (checked after the first step, which starts them, and after the last), the
// backward adds each block's dq, dk, dv into fp32 buffers that start nonzero (+=). The CPU
// runs the blocks one by one; the GPU runs the consecutive blocks on one source (a ring
// step's) in one launch (attention_step_forward_gpu / _backward_gpu). The
// queries and this rank's own K, V are one qkv buffer [q Ha*hd | k KVa*hd | v KVa*hd], as at
// ring step 0; a block with src[i] = s > 0 reads the separate K, V buffer s (a neighbour's,
// rows 2*KVa*hd) and adds its dk, dv to that buffer's gradient. The backward reads the same
// out (the CPU's, rounded to bf16) and lse on both sides, so it is checked on its own.
// doc (B x doc_ld host ints, NULL: none): the sequences' documents (AttnBlock.doc); order (B x
// doc_ld, NULL: none): the positions the blocks' q_at and k_at point into (--cp-split doc).
static void run_blocks(const char* what, int B, int Ts, int Ha, int KVa, int hd, AttnBlock* blk, const int* src, int n,
                       int n_src, const int* doc = NULL, int doc_ld = 0, const int* order = NULL) {
    char nm[192];
    int q_ld = (Ha + 2 * KVa) * hd, kv_ld = 2 * KVa * hd, o_ld = Ha * hd;
    size_t rows = (size_t)B * Ts, no = rows * o_ld, nl = (size_t)B * Ha * Ts, nkv = rows * kv_ld;
    float* q = hrand(rows * q_ld, 2.0f);
    bf16* d_q = to_bf16(q, rows * q_ld);
    const float* kv[4];
    const bf16* d_kv[4];
    kv[0] = q + Ha * hd, d_kv[0] = d_q + Ha * hd;
    for (int s = 1; s < n_src; s++) kv[s] = hrand(nkv, 2.0f), d_kv[s] = to_bf16(kv[s], nkv);
    float *o = hbuf(no), *lse = hbuf(nl);
    float *d_o = (float*)dbuf(4 * no), *d_lse = (float*)dbuf(4 * nl);
    AttnBlock d_blk[16];  // the same blocks with the device's copy of the documents
    const int* d_doc = doc ? to_dev_ints(doc, (size_t)B * doc_ld) : NULL;
    const int* d_order = order ? to_dev_ints(order, (size_t)B * doc_ld) : NULL;
    for (int i = 0; i < n; i++) {
        blk[i].B = B, blk[i].Ts = Ts, blk[i].Ha = Ha, blk[i].KVa = KVa, blk[i].hd = hd;
        blk[i].q_ld = q_ld, blk[i].kv_ld = src[i] ? kv_ld : q_ld, blk[i].doc = doc, blk[i].doc_ld = doc_ld;
        d_blk[i] = blk[i], d_blk[i].doc = d_doc;
        if (order) d_blk[i].q_at = d_order + (blk[i].q_at - order), d_blk[i].k_at = d_order + (blk[i].k_at - order);
    }
    for (int i = 0, j; i < n; i = j) {  // blocks [i, j): one step
        for (j = i; j < n && src[j] == src[i]; j++) attention_block_forward(o, o_ld, lse, q, kv[src[i]], &blk[j]);
        attention_step_forward_gpu(d_o, d_lse, d_q, d_kv[src[i]], d_blk + i, j - i, st);
        if (i == 0 || j == n) {
            const char* when = i == 0 ? "first step" : "all steps";
            snprintf(nm, sizeof(nm), "attention_block_forward o %s, %s hd=%d", what, when, hd);
            check(nm, from_f32(d_o, no), o, no, TOL_BF16);
            snprintf(nm, sizeof(nm), "attention_block_forward lse %s, %s hd=%d", what, when, hd);
            check(nm, from_f32(d_lse, nl), lse, nl, TOL_F32);
        }
    }
    float* out = hbuf(no);
    for (size_t i = 0; i < no; i++) out[i] = bf16_round(o[i]);
    float* dout = hrand(no, 1.0f);
    float* dq = hrand(no, 1.0f);
    float* dkv[4];
    float* d_dkv[4];
    for (int s = 0; s < n_src; s++) dkv[s] = hrand(nkv, 1.0f), d_dkv[s] = to_f32(dkv[s], nkv);
    bf16 *d_out = to_bf16(out, no), *d_dout = to_bf16(dout, no);
    float *d_dq = to_f32(dq, no), *d_lse_cpu = to_f32(lse, nl);
    attention_buffers_reserve(B, Ts, Ha, KVa, hd);  // the trainer carves it at start-up
    for (int i = 0, j; i < n; i = j) {
        for (j = i; j < n && src[j] == src[i]; j++)
            attention_block_backward(dq, o_ld, dkv[src[i]], kv_ld, q, kv[src[i]], dout, out, o_ld, lse, &blk[j]);
        attention_step_backward_gpu(d_dq, d_dkv[src[i]], d_q, d_kv[src[i]], d_dout, d_out, d_lse_cpu, d_blk + i,
                                    j - i, st);
    }
    snprintf(nm, sizeof(nm), "attention_block_backward dq(+=) %s hd=%d", what, hd);
    check(nm, from_f32(d_dq, no), dq, no, TOL_ATT_BWD);
    for (int s = 0; s < n_src; s++) {
        snprintf(nm, sizeof(nm), "attention_block_backward dkv(+=) of %s %s hd=%d", s ? "a neighbour" : "its own rows",
                 what, hd);
        check(nm, from_f32(d_dkv[s], nkv), dkv[s], nkv, TOL_ATT_BWD);
    }
    free_all();
}

// Ring rank r's blocks at ring step `step` (R ranks, chunks of c rows: Ts = 2c; R = 1: one
// segment of c rows), as layer_parallel/context_parallel.h makes them: a pair of segments unless
// every key is after every query, the diagonal block first. Returns how many (at most 4).
static int zigzag_step_blocks(int R, int r, int c, int step, AttnBlock* blk) {
    int from = (r - step + R) % R, n = 0, nseg = R == 1 ? 1 : 2;
    int qs[2][3], ks[2][3];  // {row, rows, position} of the query and key segments
    for (int i = 0; i < nseg; i++) {
        qs[i][0] = ks[i][0] = i * c, qs[i][1] = ks[i][1] = c;
        qs[i][2] = R == 1 ? 0 : i ? (2 * R - 1 - r) * c : r * c;
        ks[i][2] = R == 1 ? 0 : i ? (2 * R - 1 - from) * c : from * c;
    }
    for (int i = 0; i < nseg; i++)
        for (int j = 0; j < nseg; j++) {
            if (ks[j][2] > qs[i][2] + qs[i][1] - 1) continue;
            AttnBlock a = {0};
            a.q_row = qs[i][0], a.nq = qs[i][1], a.q_pos = qs[i][2];
            a.k_row = ks[j][0], a.nk = ks[j][1], a.k_pos = ks[j][2];
            a.init = from == r && i == j;
            if (a.init) memmove(blk + 1, blk, sizeof(AttnBlock) * n), blk[0] = a;
            else blk[n] = a;
            n++;
        }
    return n;
}

// Ring rank r of R: its blocks over the R ring steps (step 0 on its own K, V; each later step
// on a neighbour's buffer). docs: 1 masks by test_docs' documents (the blocks are not
// skipped here: rows that see no key of a block are the kernels' to leave alone).
static void test_attention_zigzag(int B, int R, int r, int c, int Ha, int KVa, int hd, int docs = 0) {
    int n = 0, src[16];
    AttnBlock blk[16];
    for (int step = 0; step < R; step++) {
        int k = zigzag_step_blocks(R, r, c, step, blk + n);
        for (int i = 0; i < k; i++) src[n++] = step == 0 ? 0 : 1 + (step - 1) % 3;
    }
    char what[96];
    snprintf(what, sizeof(what), "zig-zag R=%d rank %d c=%d B=%d Ha=%d KVa=%d (%d blocks)%s", R, r, c, B, Ha, KVa, n,
             docs ? " documents" : "");
    int T = R == 1 ? c : 2 * R * c;  // the sequence the blocks' positions are in
    run_blocks(what, B, R == 1 ? c : 2 * c, Ha, KVa, hd, blk, src, n, R < 4 ? R : 4, docs ? test_docs(B, T) : NULL, T);
}

// --cp-split doc: ring rank r's blocks over the R ring steps, one a step (all its Ts = T/R rows
// against all of the step's source's), each sequence's rows at the per-document zig-zag positions
// of test_docs' documents (layout/cp_order.h cp_doc_order, as cp_load_by_doc orders them).
// The rows of a block are not consecutive: the kernels find each query's keys by bisection over
// k_at and skip the key tiles outside them; compared with the CPU's kernel on the same rows, with
// the bounds of the other blocks (test_gpu.cu's header; over seeds 1-8 the worst elements: o 0.34,
// lse 0.00, dq 0.16, dk and dv 0.14 of them).
static void test_attention_docsplit(int B, int R, int r, int T, int Ha, int KVa, int hd) {
    int Ts = T / R, src[16];
    int* doc = test_docs(B, T);
    int* order = (int*)hbuf((size_t)B * T);
    for (int b = 0; b < B; b++) cp_doc_order(doc + (size_t)b * T, T, R, order + (size_t)b * T);
    AttnBlock blk[16] = {{0}};
    for (int step = 0; step < R; step++) {
        blk[step].nq = blk[step].nk = Ts, blk[step].init = step == 0;
        blk[step].q_at = order + r * Ts, blk[step].k_at = order + (r - step + R) % R * Ts, blk[step].at_ld = T;
        src[step] = step == 0 ? 0 : 1 + (step - 1) % 3;
    }
    char what[96];
    snprintf(what, sizeof(what), "doc split R=%d rank %d T=%d B=%d Ha=%d KVa=%d", R, r, T, B, Ha, KVa);
    run_blocks(what, B, Ts, Ha, KVa, hd, blk, src, R, R < 4 ? R : 4, doc, T, order);
}

// Blocks no zig-zag split makes: query and key segments of different lengths, a diagonal
// that cuts the tiles anywhere, and an init block whose first queries see none of its keys
// (o = 0, lse = -inf until the next block reaches them).
static void test_attention_blocks_odd(int hd) {
    AttnBlock blk[3] = {{0}};
    int src[3] = {0, 1, 0};
    blk[0].q_row = 0, blk[0].nq = 50, blk[0].q_pos = 100, blk[0].k_row = 20, blk[0].nk = 70, blk[0].k_pos = 110,
    blk[0].init = 1;
    blk[1].q_row = 0, blk[1].nq = 50, blk[1].q_pos = 100, blk[1].k_row = 0, blk[1].nk = 90, blk[1].k_pos = 23;
    blk[2].q_row = 10, blk[2].nq = 37, blk[2].q_pos = 110, blk[2].k_row = 60, blk[2].nk = 30, blk[2].k_pos = 0;
    run_blocks("odd blocks nq 50/37 vs nk 70/90/30, diag -10/77/110, B=2 Ha=4 KVa=2", 2, 90, 4, 2, hd, blk, src, 3, 2);
}

// dqkv = [dq | dk dv] rounded to bf16, row by row.
static void test_attention_grad_pack(size_t rows, int Ha, int KVa, int hd) {
    char nm[128];
    int wq = Ha * hd, wkv = 2 * KVa * hd, w = wq + wkv;
    float* dq = hrand(rows * wq, 1.0f);
    float* dkv = hrand(rows * wkv, 1.0f);
    for (size_t i = 0; i < rows * wq; i++) dq[i] += 1e-3f * rng_uniform(&rng);  // bits below bf16's
    float* ref = hbuf(rows * w);
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < w; c++) ref[i * w + c] = bf16_round(c < wq ? dq[i * wq + c] : dkv[i * wkv + c - wq]);
    bf16* d_dqkv = (bf16*)dbuf(2 * rows * w);
    attention_grad_pack_gpu(d_dqkv, to_f32(dq, rows * wq), to_f32(dkv, rows * wkv), rows, Ha, KVa, hd, st);
    snprintf(nm, sizeof(nm), "attention_grad_pack rows=%zu Ha=%d KVa=%d hd=%d", rows, Ha, KVa, hd);
    check(nm, from_bf16(d_dqkv, rows * w), ref, rows * w, TOL_EXACT);
    free_all();
}

static void test_embedding(int N, int C, int vocab_start, int vocab_local, int vocab, int T, int row0) {
    char nm[128];
    int* tok = (int*)hbuf(N);
    for (int i = 0; i < N; i++)
        tok[i] = i % 5 == 0 ? vocab_start + 3 : (int)(rng_u64(&rng) % vocab);  // repeats on purpose
    if (vocab_start + 3 >= vocab) fail("test_embedding: bad shape");
    float* wte = hrand((size_t)vocab_local * C, 1.0f);
    float* out = hbuf((size_t)N * C);
    embedding_forward(out, tok, wte, N, C, vocab_start, vocab_local);
    int* d_tok = to_i32(tok, N);
    bf16* d_wte = to_bf16(wte, (size_t)vocab_local * C);
    bf16* d_out = (bf16*)dbuf(2 * (size_t)N * C);
    embedding_forward_gpu(d_out, d_tok, d_wte, N, C, vocab_start, vocab_local, st);
    snprintf(nm, sizeof(nm), "embedding_forward N=%d C=%d vocab_start=%d vocab_local=%d", N, C, vocab_start,
             vocab_local);
    check(nm, from_bf16(d_out, (size_t)N * C), out, (size_t)N * C, TOL_EXACT);
    float* dout = hrand((size_t)N * C, 1.0f);
    float* dwte = hrand((size_t)vocab_local * C, 1.0f);
    float* d_dwte = to_f32(dwte, (size_t)vocab_local * C);
    bf16* d_dout = to_bf16(dout, (size_t)N * C);
    embedding_backward(dwte, tok, dout, N, C, vocab_start, vocab_local);
    embedding_backward_gpu(d_dwte, d_tok, d_dout, N, C, vocab_start, vocab_local, st);
    snprintf(nm, sizeof(nm), "embedding_backward N=%d C=%d vocab_start=%d vocab_local=%d", N, C, vocab_start,
             vocab_local);
    check(nm, from_f32(d_dwte, (size_t)vocab_local * C), dwte, (size_t)vocab_local * C, TOL_F32);

    // position embedding of rows [row0, row0+N) of a batch of T rows per sequence, at the
    // zig-zag positions of a 2T-long sequence (wpe: 2T rows)
    int* pos = zigzag_positions(T);
    int* d_pos = to_i32(pos, T);
    float* wpe = hrand((size_t)2 * T * C, 1.0f);
    float* x = hrand((size_t)N * C, 1.0f);
    bf16* d_x = to_bf16(x, (size_t)N * C);
    bf16* d_wpe = to_bf16(wpe, (size_t)2 * T * C);
    position_forward(x, wpe, N, row0, pos, T, C);
    position_forward_gpu(d_x, d_wpe, N, row0, d_pos, T, C, st);
    snprintf(nm, sizeof(nm), "position_forward N=%d row0=%d T=%d C=%d (zig-zag positions)", N, row0, T, C);
    check(nm, from_bf16(d_x, (size_t)N * C), x, (size_t)N * C, TOL_BF16);
    float* dwpe = hrand((size_t)2 * T * C, 1.0f);
    float* d_dwpe = to_f32(dwpe, (size_t)2 * T * C);
    position_backward(dwpe, dout, N, row0, pos, T, C);
    position_backward_gpu(d_dwpe, d_dout, N, row0, d_pos, T, C, st);
    snprintf(nm, sizeof(nm), "position_backward N=%d row0=%d T=%d C=%d (zig-zag positions)", N, row0, T, C);
    check(nm, from_f32(d_dwpe, (size_t)2 * T * C), dwpe, (size_t)2 * T * C, TOL_F32);
    free_all();
}

// One rank's cross-entropy (no reduction in between: the test checks the local kernels, which
// with vocab_start = 0 and vocab_local >= vocab is the whole cross-entropy), and then as a tp rank whose
// rows' maxima over all shards are higher than its own (by 0.5 on every other row): the GPU's
// first pass keeps its own maxima and sums, rescaled to the given maxima by the second step.
static void test_crossentropy(int N, int vocab_local, int vocab_start, int vocab) {
    char nm[128];
    float* logits = hrand((size_t)N * vocab_local, 4.0f);
    int* tgt = (int*)hbuf(N);
    for (int i = 0; i < N; i++) tgt[i] = i % 7 == 3 ? -1 : (int)(rng_u64(&rng) % vocab);  // -1: padding, ignored
    float *maxes = hbuf(N), *sums = hbuf(2 * N), *losses = hbuf(N), *maxes_tp = hbuf(N), *sums_tp = hbuf(2 * N);
    float* dl = hcopy(logits, (size_t)N * vocab_local);
    float scale = 1.0f / N;
    crossentropy_local_max(maxes, logits, N, vocab_local, vocab_start, vocab);
    for (int i = 0; i < N; i++) maxes_tp[i] = maxes[i] + (i % 2 ? 0.5f : 0.0f);
    crossentropy_local_sums(sums_tp, logits, maxes_tp, tgt, N, vocab_local, vocab_start, vocab);
    crossentropy_local_sums(sums, logits, maxes, tgt, N, vocab_local, vocab_start, vocab);
    crossentropy_finish(losses, dl, maxes, sums, tgt, N, vocab_local, vocab_start, vocab, scale);
    bf16* d_logits = to_bf16(logits, (size_t)N * vocab_local);
    int* d_tgt = to_i32(tgt, N);
    float *d_max = (float*)dbuf(4 * N), *d_sums = (float*)dbuf(8 * N), *d_loss = (float*)dbuf(4 * N);
    float *d_stats = (float*)dbuf(8 * N), *d_max_tp = to_f32(maxes_tp, N);
    crossentropy_local_max_gpu(d_max, d_stats, d_logits, N, vocab_local, vocab_start, vocab, st);
    crossentropy_local_sums_gpu(d_sums, d_stats, d_max_tp, d_logits, d_tgt, N, vocab_local, vocab_start, st);
    snprintf(nm, sizeof(nm), "crossentropy_local_sums (tp maxima) N=%d vocab_local=%d vocab_start=%d V=%d", N,
             vocab_local, vocab_start, vocab);
    check(nm, from_f32(d_sums, 2 * N), sums_tp, 2 * N, TOL_F32);
    crossentropy_local_sums_gpu(d_sums, d_stats, d_max, d_logits, d_tgt, N, vocab_local, vocab_start, st);
    crossentropy_finish_gpu(d_loss, d_logits, d_max, d_sums, d_tgt, N, vocab_local, vocab_start, vocab, scale, st);
    snprintf(nm, sizeof(nm), "crossentropy_local_max N=%d vocab_local=%d vocab_start=%d V=%d", N, vocab_local,
             vocab_start, vocab);
    check(nm, from_f32(d_max, N), maxes, N, TOL_EXACT);
    snprintf(nm, sizeof(nm), "crossentropy_local_sums N=%d vocab_local=%d vocab_start=%d V=%d", N, vocab_local,
             vocab_start, vocab);
    check(nm, from_f32(d_sums, 2 * N), sums, 2 * N, TOL_F32);
    snprintf(nm, sizeof(nm), "crossentropy_finish loss N=%d vocab_local=%d vocab_start=%d V=%d", N, vocab_local,
             vocab_start, vocab);
    check(nm, from_f32(d_loss, N), losses, N, TOL_F32);
    snprintf(nm, sizeof(nm), "crossentropy_finish dlogits N=%d vocab_local=%d vocab_start=%d V=%d", N, vocab_local,
             vocab_start, vocab);
    check(nm, from_bf16(d_logits, (size_t)N * vocab_local), dl, (size_t)N * vocab_local, TOL_BF16);
    free_all();
}

// AdamW over a list of tensors in one launch (adamw_mt_gpu), each against the CPU's
// adamw_update: sizes n, 1, 2049 (a chunk and one element) and 7, weight decay on some, one
// without a bf16 copy; off: every array starts off elements into its buffer (off 1: no
// 16-byte alignment, the kernel's one-element-at-a-time path). Two steps with the same list:
// the second finds the list on the device (no upload; neither makes the host wait). Then the list's sum of
// squares (sumsq_mt_gpu) against the CPU's, bitwise the same on a second run, and added up
// over two flushes.
static void test_adamw(size_t n, size_t off) {
    char nm[160];
    const size_t sizes[4] = {n, 1, MT_CHUNK + 1, 7};
    float *p[4], *g[4], *m[4], *v[4], *d_p[4], *d_g[4], *d_m[4], *d_v[4];
    bf16* d_pb[4];
    MtList list = {};
    for (int step = 3; step <= 4; step++) {
        GpuCounts before = gpu_counts;
        for (int j = 0; j < 4; j++) {
            size_t nj = sizes[j] + off;
            if (step == 3) {
                p[j] = hrand(nj, 1.0f), g[j] = hrand(nj, 1.0f), m[j] = hrand(nj, 0.1f);
                v[j] = hrand(nj, 0.01f, 0.011f);  // positive
                d_p[j] = to_f32(p[j], nj), d_g[j] = to_f32(g[j], nj), d_m[j] = to_f32(m[j], nj);
                d_v[j] = to_f32(v[j], nj), d_pb[j] = j == 2 ? NULL : (bf16*)dbuf(2 * nj);
            }
            mt_add(&list, d_p[j] + off, d_pb[j] ? d_pb[j] + off : NULL, d_g[j] + off, d_m[j] + off, d_v[j] + off,
                   sizes[j], j % 2 ? 0.0f : 0.1f);
            adamw_update(p[j] + off, g[j] + off, m[j] + off, v[j] + off, sizes[j], 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                         j % 2 == 0, 0.5f, step);
        }
        adamw_mt_gpu(&list, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f, step, st);
        snprintf(nm, sizeof(nm), "adamw list: one launch, the list uploaded %s (step %d)",
                 step == 3 ? "once" : "before", step);
        long launches = gpu_counts.launches - before.launches, copies = gpu_counts.copies - before.copies;
        float got[3] = {(float)launches, (float)copies, (float)(gpu_counts.waits - before.waits)};
        float want[3] = {1.0f, step == 3 ? 1.0f : 0.0f, 0.0f};  // no host wait either way
        check(nm, got, want, 3, TOL_EXACT);
        for (int j = 0; j < 4; j++) {
            size_t nj = sizes[j] + off;
            snprintf(nm, sizeof(nm), "adamw list step %d tensor %d n=%zu off=%zu: fp32 master, m, v", step, j,
                     sizes[j], off);
            float* got3 = hbuf(3 * sizes[j]);
            float* want3 = hbuf(3 * sizes[j]);
            memcpy(got3, from_f32(d_p[j], nj) + off, 4 * sizes[j]);
            memcpy(got3 + sizes[j], from_f32(d_m[j], nj) + off, 4 * sizes[j]);
            memcpy(got3 + 2 * sizes[j], from_f32(d_v[j], nj) + off, 4 * sizes[j]);
            memcpy(want3, p[j] + off, 4 * sizes[j]);
            memcpy(want3 + sizes[j], m[j] + off, 4 * sizes[j]);
            memcpy(want3 + 2 * sizes[j], v[j] + off, 4 * sizes[j]);
            check(nm, got3, want3, 3 * sizes[j], TOL_ADAM);
            if (!d_pb[j]) continue;
            float* pb = hbuf(sizes[j]);
            for (size_t i = 0; i < sizes[j]; i++) pb[i] = bf16_round(p[j][off + i]);
            snprintf(nm, sizeof(nm), "adamw list step %d tensor %d n=%zu off=%zu: bf16 copy", step, j, sizes[j], off);
            check(nm, from_bf16(d_pb[j], nj) + off, pb, sizes[j], TOL_BF16);
        }
    }
    // the sum of squares: all four in one list (twice: bitwise the same), then in two flushes
    double ref = 0, got[3];
    for (int j = 0; j < 4; j++)
        for (size_t i = 0; i < sizes[j]; i++) ref += (double)g[j][off + i] * g[j][off + i];
    double* d_ss = (double*)dbuf(8);
    for (int run = 0; run < 3; run++) {
        for (int j = 0; j < 4; j++) {
            mt_add(&list, NULL, NULL, d_g[j] + off, NULL, NULL, sizes[j], 0.0f);
            if (run == 2 && j == 1) sumsq_mt_gpu(d_ss, &list, 0, st);
        }
        sumsq_mt_gpu(d_ss, &list, run == 2, st);
        cudaCheck(cudaStreamSynchronize(st));
        cudaCheck(cudaMemcpy(&got[run], d_ss, 8, cudaMemcpyDeviceToHost));
    }
    float gf[3] = {(float)got[0], got[0] == got[1] ? 1.0f : 0.0f, (float)got[2]};
    float rf[3] = {(float)ref, 1.0f, (float)ref};
    snprintf(nm, sizeof(nm), "sum of squares over the list (n=%zu off=%zu): again bitwise, in two flushes", n, off);
    check(nm, gf, rf, 3, TOL_F32);
    free_all();
}

static void test_misc(size_t n) {
    float* a = hrand(n, 1.0f);
    float* b = hrand(n, 1.0f);
    float* r = hbuf(n);
    for (size_t i = 0; i < n; i++) r[i] = bf16_round(a[i] + b[i]);
    bf16 *d_a = to_bf16(a, n), *d_b = to_bf16(b, n);
    residual_forward_gpu(d_a, d_a, d_b, n, st);
    check("residual_forward (in place)", from_bf16(d_a, n), r, n, TOL_EXACT);
    float* d_af = to_f32(a, n);
    bf16* d_c = (bf16*)dbuf(2 * n);
    float* d_back = (float*)dbuf(4 * n);
    f32_to_bf16_gpu(d_c, d_af, n, st);
    bf16_to_f32_gpu(d_back, d_c, n, st);
    check("f32_to_bf16 / bf16_to_f32", from_f32(d_back, n), a, n, TOL_EXACT);
    // residual + bias (train_gpt.cu's row-parallel output), one rounding of the fp32 sum
    int C = 100, N = (int)(n / C);
    float* bias = hrand(C, 1.0f);
    float* rb = hbuf((size_t)N * C);
    for (size_t i = 0; i < (size_t)N * C; i++) rb[i] = bf16_round(a[i] + b[i] + bias[i % C]);
    bf16 *d_a2 = to_bf16(a, n), *d_bias = to_bf16(bias, C), *d_rb = (bf16*)dbuf(2 * n);
    residual_bias_forward_gpu(d_rb, d_a2, d_b, d_bias, N, C, st);
    check("residual_bias_forward", from_bf16(d_rb, (size_t)N * C), rb, (size_t)N * C, TOL_EXACT);
    for (size_t i = 0; i < (size_t)N * C; i++) rb[i] = bf16_round(a[i] + bias[i % C]);
    residual_bias_forward_gpu(d_a2, d_a2, NULL, d_bias, N, C, st);  // the bias add alone, in place
    check("residual_bias_forward (bias only, in place)", from_bf16(d_a2, (size_t)N * C), rb, (size_t)N * C, TOL_EXACT);
    // fp32 accumulate and the fp64 loss sum
    float* fb = hrand(n, 1.0f);
    float* fsum = hbuf(n);
    for (size_t i = 0; i < n; i++) fsum[i] = a[i] + fb[i];
    float* d_fb = to_f32(fb, n);
    float* d_fa = to_f32(a, n);
    add_inplace_f32_gpu(d_fa, d_fb, n, st);
    check("add_inplace_f32", from_f32(d_fa, n), fsum, n, TOL_EXACT);
    double tot = 0.5;  // sum_f64 adds to what the accumulator holds
    for (size_t i = 0; i < n; i++) tot += a[i];
    double* d_tot = (double*)dbuf(sizeof(double));
    double half = 0.5, got = 0;
    cudaCheck(cudaMemcpy(d_tot, &half, sizeof(double), cudaMemcpyHostToDevice));
    sum_f64_gpu(d_tot, d_af, n, st);
    cudaCheck(cudaMemcpy(&got, d_tot, sizeof(double), cudaMemcpyDeviceToHost));
    float gotf = (float)got, totf = (float)tot;
    check("sum_f64", &gotf, &totf, 1, TOL_F32);
    free_all();
}
