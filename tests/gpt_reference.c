// tests/gpt_reference.c: test_gpt's reference section: backend/cpu/reference.h's plain fp32 loops
// (what --kernels ref trains with) against the fast kernels (backend/cpu/kernels_cpu.h) on the same
// inputs, forward and backward (relative TOL_FWD: the same fp32 math summed in another order),
// and the reference's own backwards against finite differences of the double reference (TOL_GRAD,
// the objectives of tests/gpt_kernels.c and gpt_docs.c).
// Included by tests/test_gpt.c after gpt_kernels.c and gpt_docs.c (one test binary); not built alone.

// fp32 a against fp32 b, in rel_err's sense.
static double rel_err_ff(const float* a, const float* b, size_t n) {
    double* d = to_double(b, n);
    double e = rel_err(a, d, n);
    free(d);
    return e;
}
static void check_same(const char* op, const char* what, const float* fast, const float* ref, size_t n) {
    char name[160];
    snprintf(name, sizeof(name), "reference/%s/%s: fast kernel = reference", op, what);
    check_err(name, rel_err_ff(fast, ref, n), TOL_FWD);
}

static void reference_matmul(int N, int IC, int OC) {
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = randn_f(ni, 1), *w = randn_f(nw, 1), *b = randn_f(OC, 1), *R = randn_f(no, 1);
    float *out = filled_f(no, NAN), *rout = filled_f(no, NAN);
    matmul_forward(out, inp, w, b, N, IC, OC);
    ref_matmul_forward(rout, inp, w, b, N, IC, OC);
    check_same("matmul", "out", out, rout, no);
    float *di = prefilled(ni), *dw = prefilled(nw), *db = prefilled(OC);
    float *rdi = prefilled(ni), *rdw = prefilled(nw), *rdb = prefilled(OC);
    matmul_backward(di, dw, db, R, inp, w, N, IC, OC);
    ref_matmul_backward_input(rdi, R, w, N, IC, OC);
    ref_matmul_backward_weight(rdw, rdb, R, inp, N, IC, OC);
    check_same("matmul", "dinp", di, rdi, ni);
    check_same("matmul", "dweight", dw, rdw, nw);
    check_same("matmul", "dbias", db, rdb, OC);
    unprefill(rdi, ni), unprefill(rdw, nw), unprefill(rdb, OC);
    MatmulCtx ctx = {N, IC, OC, to_double(inp, ni), to_double(w, nw), to_double(b, OC), to_double(R, no)};
    check_err("reference/fd/matmul/inp", fd_err(matmul_obj, &ctx, ctx.inp, ni, rdi), TOL_GRAD);
    check_err("reference/fd/matmul/weight", fd_err(matmul_obj, &ctx, ctx.w, nw, rdw), TOL_GRAD);
    check_err("reference/fd/matmul/bias", fd_err(matmul_obj, &ctx, ctx.b, OC, rdb), TOL_GRAD);
    free(inp), free(w), free(b), free(R), free(out), free(rout), free(di), free(dw), free(db), free(rdi), free(rdw);
    free(rdb), free(ctx.inp), free(ctx.w), free(ctx.b), free(ctx.R);
}

static void check_bitwise(const char* op, const char* what, const float* a, const float* b, size_t n) {
    char name[160];
    snprintf(name, sizeof(name), "reference/%s/%s: bit for bit", op, what);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(a + i, b + i, sizeof(float)) != 0;
    check_err(name, (double)differ, 0);
}
// The residual add fused with the norm after it: bit for bit the add, the bias, then the norm.
static void reference_residual_norm(int rms, const float* y, const float* w, const float* b, int N, int C) {
    size_t n = (size_t)N * C;
    float *x = randn_f(n, 1), *rbias = randn_f(C, 1), *sum = filled_f(n, NAN), *res = filled_f(n, NAN);
    float *fout = filled_f(n, NAN), *fmean = filled_f(N, NAN), *frstd = filled_f(N, NAN), *uout = filled_f(n, NAN);
    const char* op = rms ? "rmsnorm" : "layernorm";
    // x + (the norm test's input - x): the sum is the norm test's input up to rounding
    for (size_t i = 0; i < n; i++) sum[i] = y[i] - x[i];
    residual_forward(res, x, sum, n);
    add_bias(res, rbias, N, C);
    if (rms) rmsnorm_forward(uout, frstd, res, w, N, C);
    else layernorm_forward(uout, fmean, frstd, res, w, b, N, C);
    float *fres = filled_f(n, NAN), *fm = filled_f(N, NAN), *fr = filled_f(N, NAN);
    if (rms) residual_rmsnorm_forward(fres, fout, fr, x, sum, rbias, w, N, C);
    else residual_layernorm_forward(fres, fout, fm, fr, x, sum, rbias, w, b, N, C);
    check_bitwise(op, "residual fused: sum", fres, res, n);
    check_bitwise(op, "residual fused: out", fout, uout, n);
    check_bitwise(op, "residual fused: rstd", fr, frstd, N);
    if (!rms) check_bitwise(op, "residual fused: mean", fm, fmean, N);
    free(x), free(rbias), free(sum), free(res), free(fout), free(fmean), free(frstd), free(uout), free(fres), free(fm);
    free(fr);
}
static void reference_norm(int rms) {
    int N = 5, C = 20;
    size_t n = (size_t)N * C;
    const char* op = rms ? "rmsnorm" : "layernorm";
    float *x = randn_f(n, 1), *w = randn_f(C, 1), *b = randn_f(C, 1), *R = randn_f(n, 1);
    for (size_t i = 0; i < n; i++) x[i] += 0.7f;
    float *out = filled_f(n, NAN), *mean = filled_f(N, NAN), *rstd = filled_f(N, NAN);
    float *rout = filled_f(n, NAN), *rmean = filled_f(N, NAN), *rrstd = filled_f(N, NAN);
    if (rms) rmsnorm_forward(out, rstd, x, w, N, C), ref_rmsnorm_forward(rout, rrstd, x, w, N, C);
    else layernorm_forward(out, mean, rstd, x, w, b, N, C), ref_layernorm_forward(rout, rmean, rrstd, x, w, b, N, C);
    check_same(op, "out", out, rout, n);
    check_same(op, "rstd", rstd, rrstd, N);
    reference_residual_norm(rms, x, w, b, N, C);
    float *dx = prefilled(n), *dw = prefilled(C), *db = prefilled(C);
    float *rdx = prefilled(n), *rdw = prefilled(C), *rdb = prefilled(C);
    if (rms) {
        rmsnorm_backward(dx, dx, dw, R, x, w, rstd, N, C);  // dx += (in place)
        ref_rmsnorm_backward(rdx, rdw, R, x, w, rrstd, N, C);
    } else {
        layernorm_backward(dx, dx, dw, db, R, x, w, mean, rstd, N, C);  // dx += (in place)
        ref_layernorm_backward(rdx, rdw, rdb, R, x, w, rmean, rrstd, N, C);
    }
    float *ddx = filled_f(n, NAN), *ddw = prefilled(C), *ddb = prefilled(C), *dres = prefilled(n);
    if (rms) rmsnorm_backward(ddx, dres, ddw, R, x, w, rstd, N, C);
    else layernorm_backward(ddx, dres, ddw, ddb, R, x, w, mean, rstd, N, C);
    check_bitwise(op, "backward: dinp = dres + gradient, as in place", ddx, dx, n);
    free(ddx), free(ddw), free(ddb), free(dres);
    check_same(op, "dinp", dx, rdx, n);
    check_same(op, "dweight", dw, rdw, C);
    if (!rms) check_same(op, "dbias", db, rdb, C);
    unprefill(rdx, n), unprefill(rdw, C), unprefill(rdb, C);
    NormCtx ctx = {N, C, rms, to_double(x, n), to_double(w, C), to_double(b, C), to_double(R, n)};
    char name[96];
    snprintf(name, sizeof(name), "reference/fd/%s/inp", op);
    check_err(name, fd_err(norm_obj, &ctx, ctx.x, n, rdx), TOL_GRAD);
    snprintf(name, sizeof(name), "reference/fd/%s/weight", op);
    check_err(name, fd_err(norm_obj, &ctx, ctx.w, C, rdw), TOL_GRAD);
    if (!rms) check_err("reference/fd/layernorm/bias", fd_err(norm_obj, &ctx, ctx.b, C, rdb), TOL_GRAD);
    free(x), free(w), free(b), free(R), free(out), free(mean), free(rstd), free(rout), free(rmean), free(rrstd);
    free(dx), free(dw), free(db), free(rdx), free(rdw), free(rdb);
    free(ctx.x), free(ctx.w), free(ctx.b), free(ctx.R);
}

// Whole-sequence attention with documents (doc NULL: none), grouped-query when KV < H.
static void reference_attention(int B, int T, int H, int KV, int hd, const int* doc, const char* what) {
    size_t nq = (size_t)B * T * (H + 2 * KV) * hd, no = (size_t)B * T * H * hd, nl = (size_t)B * H * T;
    float *qkv = randn_f(nq, 1), *R = randn_f(no, 1);
    float *out = filled_f(no, NAN), *lse = filled_f(nl, NAN), *rout = filled_f(no, NAN), *rlse = filled_f(nl, NAN);
    float *dqkv = filled_f(nq, NAN), *rdqkv = filled_f(nq, NAN);
    attention_forward(out, lse, qkv, B, T, H, KV, hd, doc);
    ref_attention_forward(rout, rlse, qkv, B, T, H, KV, hd, doc);
    attention_backward(dqkv, R, qkv, out, lse, B, T, H, KV, hd, doc);
    ref_attention_backward(rdqkv, R, qkv, rout, rlse, B, T, H, KV, hd, doc);
    char op[96];
    snprintf(op, sizeof(op), "attention %s", what);
    check_same(op, "out", out, rout, no);
    check_same(op, "log-sum-exp", lse, rlse, nl);
    check_same(op, "dqkv", dqkv, rdqkv, nq);
    DocAttCtx ctx = {B, T, H, KV, hd, doc, to_double(qkv, nq), to_double(R, no)};
    char name[160];
    snprintf(name, sizeof(name), "reference/fd/attention %s/qkv", what);
    check_err(name, fd_err(doc_att_obj, &ctx, ctx.qkv, nq, rdqkv), TOL_GRAD);
    free(qkv), free(R), free(out), free(lse), free(rout), free(rlse), free(dqkv), free(rdqkv), free(ctx.qkv);
    free(ctx.R);
}

static void reference_rope(void) {
    int N = 12, T = 6, hd = 4, n_heads = 3, stride = 4 * hd, pos[6] = {3, 4, 5, 6, 7, 8};
    size_t n = (size_t)N * stride;
    float *x = randn_f(n, 1), *y = copy_f(x, n), *ry = copy_f(x, n);
    rope_apply(y, N, pos, T, stride, n_heads, hd, 10000.0f, 1.0f);
    ref_rope(ry, N, pos, T, stride, n_heads, hd, 10000.0f, 1.0f);
    check_same("rope", "out", y, ry, n);
    ref_rope(ry, N, pos, T, stride, n_heads, hd, 10000.0f, -1.0f);  // the backward turns it back
    check_err("reference/rope: sign -1 (the backward) undoes sign 1", rel_err_ff(ry, x, n), TOL_FWD);
    free(x), free(y), free(ry);
}

static void reference_activation(int swiglu) {
    int N = 4, F = 10;
    size_t ni = (size_t)N * F * (swiglu ? 2 : 1), no = (size_t)N * F;
    const char* op = swiglu ? "swiglu" : "gelu";
    float *x = randn_f(ni, 2), *R = randn_f(no, 1), *out = filled_f(no, NAN), *rout = filled_f(no, NAN);
    float *dx = prefilled(ni), *rdx = prefilled(ni);
    if (swiglu) {
        swiglu_forward(out, x, N, F), ref_swiglu_forward(rout, x, N, F);
        swiglu_backward(dx, x, R, N, F), ref_swiglu_backward(rdx, x, R, N, F);
    } else {
        gelu_forward(out, x, no), ref_gelu_forward(rout, x, no);
        gelu_backward(dx, x, R, no), ref_gelu_backward(rdx, x, R, no);
    }
    check_same(op, "out", out, rout, no);
    check_same(op, "dinp", dx, rdx, ni);
    unprefill(rdx, ni);
    ActCtx ctx = {N, F, swiglu, to_double(x, ni), to_double(R, no)};
    char name[96];
    snprintf(name, sizeof(name), "reference/fd/%s/inp", op);
    check_err(name, fd_err(act_obj, &ctx, ctx.x, ni, rdx), TOL_GRAD);
    free(x), free(R), free(out), free(rout), free(dx), free(rdx), free(ctx.x), free(ctx.R);
}

// The residual with a bias, the bias's column sum, the embeddings.
static void reference_residual_embedding(void) {
    int N = 6, C = 20, vocab_start = 4, vocab_local = 6, T = 4, tok[6] = {0, 4, 5, 9, 4, 11}, pos[4] = {2, 0, 3, 1};
    size_t n = (size_t)N * C;
    float *a = randn_f(n, 1), *b = randn_f(n, 1), *bias = randn_f(C, 1), *out = filled_f(n, NAN);
    float *rout = filled_f(n, NAN), *sum = prefilled(C), *rsum = prefilled(C);
    residual_forward(out, a, b, n), add_bias(out, bias, N, C);
    ref_residual_forward(rout, a, b, bias, N, C);
    check_same("residual", "out", out, rout, n);
    column_dot_accumulate(sum, a, NULL, N, C), ref_column_sum(rsum, a, N, C);
    check_same("residual", "column sum", sum, rsum, C);
    float *wte = randn_f((size_t)vocab_local * C, 1), *dwte = prefilled((size_t)vocab_local * C),
          *rdwte = prefilled((size_t)vocab_local * C);
    embedding_forward(out, tok, wte, N, C, vocab_start, vocab_local),
        ref_embedding_forward(rout, tok, wte, N, C, vocab_start, vocab_local);
    check_same("embedding", "out (rows of other ranks 0)", out, rout, n);
    embedding_backward(dwte, tok, a, N, C, vocab_start, vocab_local),
        ref_embedding_backward(rdwte, tok, a, N, C, vocab_start, vocab_local);
    check_same("embedding", "dwte", dwte, rdwte, (size_t)vocab_local * C);
    float *wpe = randn_f((size_t)T * C, 1), *dwpe = prefilled((size_t)T * C), *rdwpe = prefilled((size_t)T * C);
    memcpy(out, a, sizeof(float) * n), memcpy(rout, a, sizeof(float) * n);
    position_forward(out, wpe, N, 5, pos, T, C), ref_position_forward(rout, wpe, N, 5, pos, T, C);
    check_same("position", "out", out, rout, n);
    position_backward(dwpe, b, N, 5, pos, T, C), ref_position_backward(rdwpe, b, N, 5, pos, T, C);
    check_same("position", "dwpe", dwpe, rdwpe, (size_t)T * C);
    free(a), free(b), free(bias), free(out), free(rout), free(sum), free(rsum), free(wte), free(dwte), free(rdwte);
    free(wpe), free(dwpe), free(rdwpe);
}

// The three passes over `ranks` tensor-parallel ranks' columns, the reductions by hand.
static void reference_crossentropy(int N, int Vp, int vocab, int ranks) {
    int vocab_local = Vp / ranks, *targets = (int*)xmalloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) targets[i] = (int)(rng_u64(&test_rng) % vocab);
    targets[N - 1] = -1;  // padding: loss 0, gradient 0
    size_t nl = (size_t)N * Vp;
    float *logits = randn_f(nl, 2), *d = copy_f(logits, nl), *rd = copy_f(logits, nl);
    float *mx = filled_f(N, -FLT_MAX), *sums = filled_f(2 * N, 0), *part = filled_f(2 * N, 0);
    float *losses = filled_f(N, NAN), *rlosses = filled_f(N, NAN);
    // each rank's columns as a matrix of its own (N x vocab_local), as the trainer holds them
    for (int r = 0; r < ranks; r++) {  // pass 1, MAX
        float *cols = (float*)xmalloc(sizeof(float) * N * vocab_local), *m = filled_f(N, NAN);
        for (int i = 0; i < N; i++)
            memcpy(cols + (size_t)i * vocab_local, logits + (size_t)i * Vp + r * vocab_local,
                   sizeof(float) * vocab_local);
        ref_crossentropy_local_max(m, cols, N, vocab_local, r * vocab_local, vocab);
        for (int i = 0; i < N; i++) mx[i] = m[i] > mx[i] ? m[i] : mx[i];
        free(cols), free(m);
    }
    for (int r = 0; r < ranks; r++) {  // pass 2, SUM; then pass 3 on each rank's columns
        float* cols = (float*)xmalloc(sizeof(float) * N * vocab_local);
        for (int i = 0; i < N; i++)
            memcpy(cols + (size_t)i * vocab_local, logits + (size_t)i * Vp + r * vocab_local,
                   sizeof(float) * vocab_local);
        ref_crossentropy_local_sums(part, cols, mx, targets, N, vocab_local, r * vocab_local, vocab);
        for (int i = 0; i < 2 * N; i++) sums[i] += part[i];
        free(cols);
    }
    for (int r = 0; r < ranks; r++) {
        float *cols = (float*)xmalloc(sizeof(float) * N * vocab_local),
              *rcols = (float*)xmalloc(sizeof(float) * N * vocab_local);
        for (int i = 0; i < N; i++)
            memcpy(cols + (size_t)i * vocab_local, logits + (size_t)i * Vp + r * vocab_local,
                   sizeof(float) * vocab_local);
        memcpy(rcols, cols, sizeof(float) * N * vocab_local);
        crossentropy_finish(losses, cols, mx, sums, targets, N, vocab_local, r * vocab_local, vocab, 0.37f);
        ref_crossentropy_finish(rlosses, rcols, mx, sums, targets, N, vocab_local, r * vocab_local, vocab, 0.37f);
        for (int i = 0; i < N; i++) {
            memcpy(d + (size_t)i * Vp + r * vocab_local, cols + (size_t)i * vocab_local, sizeof(float) * vocab_local);
            memcpy(rd + (size_t)i * Vp + r * vocab_local, rcols + (size_t)i * vocab_local, sizeof(float) * vocab_local);
        }
        free(cols), free(rcols);
    }
    char op[64];
    snprintf(op, sizeof(op), "crossentropy vocab %d of %d, %d rank%s", vocab, Vp, ranks, ranks > 1 ? "s" : "");
    check_same(op, "losses", losses, rlosses, N);
    check_same(op, "dlogits", d, rd, (size_t)N * Vp);
    targets[N - 1] = 0;  // the double objective has no padding row: its gradient (0) is left out
    CeCtx ctx = {N - 1, Vp, vocab, targets, to_double(logits, (size_t)N * Vp), 0.37};
    char name[128];
    snprintf(name, sizeof(name), "reference/fd/%s/logits", op);
    check_err(name, fd_err(ce_obj, &ctx, ctx.logits, (size_t)(N - 1) * Vp, rd), TOL_GRAD);
    free(targets), free(logits), free(d), free(rd), free(mx), free(sums), free(part), free(losses), free(rlosses);
    free(ctx.logits);
}

static void reference_adamw(void) {
    size_t n = 37;
    float *p = randn_f(n, 1), *g = randn_f(n, 1), *m = randn_f(n, 0.1f), *v = filled_f(n, 0.02f);
    float *rp = copy_f(p, n), *rm = copy_f(m, n), *rv = copy_f(v, n);
    for (int t = 1; t <= 3; t++) {
        adamw_update(p, g, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t != 2, 0.5f, t);
        ref_adamw_update(rp, g, rm, rv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t != 2, 0.5f, t);
    }
    check_same("adamw", "params after 3 steps", p, rp, n);
    check_same("adamw", "m", m, rm, n);
    check_same("adamw", "v", v, rv, n);
    double ss = sum_squares(g, n), rss = ref_sum_squares(g, n);
    // (the fast kernel adds float lanes over runs of 64 vectors before its double sums)
    check_err("reference/sum of squares: fast kernel = reference", fabs(ss - rss) / rss, TOL_FWD);
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

static void test_reference(void) {
    rng_seed(&test_rng, 4242);
    reference_matmul(5, 7, 9);
    reference_matmul(37, 70, 45);  // past the GEMM's register tiles
    reference_norm(0);
    reference_norm(1);
    int doc[2 * 11];  // two sequences of 11: documents of 4, 6, 1 and 11
    int starts0[3] = {0, 4, 10}, starts1[1] = {0};
    docs_from_starts(doc, 11, starts0, 3), docs_from_starts(doc + 11, 11, starts1, 1);
    reference_attention(2, 5, 4, 2, 3, NULL, "GQA H4 KV2");
    reference_attention(2, 11, 2, 2, 4, doc, "documents H2 KV2");
    reference_attention(1, 2 * ATT_ROWS + 5, 2, 1, 3, NULL, "MQA, past the fast kernel's tiles");
    reference_rope();
    reference_activation(0);
    reference_activation(1);
    reference_residual_embedding();
    reference_crossentropy(6, 16, 11, 1);
    reference_crossentropy(5, 16, 7, 2);
    reference_adamw();
    // context parallelism's blocks, against the fast whole-sequence kernel: the ring's zig-zag,
    // contiguous, and --cp-split doc's each document's zig-zag (GQA, documents across ranks)
    int d16[32], s0[] = {3, 6, 13}, s1[] = {0, 8};
    docs_from_starts(d16, 16, s0, 3), docs_from_starts(d16 + 16, 16, s1, 2);
    ring_blocks_reference = 1;
    test_attention_ring(2, 16, 4, 2, 8, 2, 0, NULL);
    test_attention_ring(1, 16, 2, 1, 4, 4, 1, NULL);
    test_attention_ring(2, 16, 4, 2, 8, 2, 2, d16);
    ring_blocks_reference = 0;
}
