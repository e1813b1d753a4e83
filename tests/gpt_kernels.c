// tests/gpt_kernels.c: test_gpt's layer kernels (kernels_cpu.h) against a double-precision
// reference: forward outputs, and backward against finite differences.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// 1. Layer kernels: forward against the reference, backward against finite differences.

// --- matmul with bias ---
typedef struct { int N, IC, OC; double *inp, *w, *b, *R; } MatmulCtx;
static double matmul_obj(void* p) {
    MatmulCtx* c = (MatmulCtx*)p;
    double* out = zeros_d((size_t)c->N * c->OC);
    refd_matmul_forward(out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
    double L = dot_d(out, c->R, (size_t)c->N * c->OC);
    free(out);
    return L;
}
static void test_matmul(int N, int IC, int OC, int with_bias) {
    char name[128];
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = randn_f(ni, 1), *w = randn_f(nw, 1), *b = with_bias ? randn_f(OC, 1) : NULL, *R = randn_f(no, 1);
    float* out = filled_f(no, NAN);
    matmul_forward(out, inp, w, b, N, IC, OC);
    MatmulCtx ctx = {N, IC, OC, to_double(inp, ni), to_double(w, nw), b ? to_double(b, OC) : NULL, to_double(R, no)};
    double* ref = zeros_d(no);
    refd_matmul_forward(ref, ctx.inp, ctx.w, ctx.b, N, IC, OC);
    snprintf(name, sizeof(name), "fwd/matmul%s %dx%dx%d", with_bias ? "+bias" : "", N, IC, OC);
    check_err(name, rel_err(out, ref, no), TOL_FWD);
    float *dinp = prefilled(ni), *dw = prefilled(nw), *db = prefilled(OC);
    matmul_backward(dinp, dw, with_bias ? db : NULL, R, inp, w, N, IC, OC);
    unprefill(dinp, ni), unprefill(dw, nw), unprefill(db, OC);
    snprintf(name, sizeof(name), "fd/matmul%s/inp", with_bias ? "+bias" : "");
    check_err(name, fd_err(matmul_obj, &ctx, ctx.inp, ni, dinp), TOL_GRAD);
    snprintf(name, sizeof(name), "fd/matmul%s/weight", with_bias ? "+bias" : "");
    check_err(name, fd_err(matmul_obj, &ctx, ctx.w, nw, dw), TOL_GRAD);
    if (with_bias) check_err("fd/matmul+bias/bias", fd_err(matmul_obj, &ctx, ctx.b, OC, db), TOL_GRAD);
    else {
        int untouched = 1;
        for (int o = 0; o < OC; o++) untouched &= db[o] == 0.0f;
        check(untouched, "matmul/no-bias leaves dbias alone", NULL);
    }
    // dinp == NULL: only the weight gradient (the first layer's input needs none)
    float* dw2 = prefilled(nw);
    matmul_backward(NULL, dw2, NULL, R, inp, w, N, IC, OC);
    unprefill(dw2, nw);
    check(!memcmp(dw, dw2, sizeof(float) * nw),
          with_bias ? "matmul+bias/dinp NULL same dweight" : "matmul/dinp NULL same dweight", NULL);
    free(inp), free(w), free(b), free(R), free(out), free(dinp), free(dw), free(db), free(dw2), free(ref);
    free(ctx.inp), free(ctx.w), free(ctx.b), free(ctx.R);
}

// A matmul over several GEMM panels and KC slices, checked against the closed-form
// gradients in double (finite differences would be too slow): dinp = R W, dW = R^T inp,
// db = column sums of R. Also: bitwise the same on 1 and 2 threads.
static void test_matmul_large(void) {
    int N = 130, IC = 300, OC = 270;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = randn_f(ni, 1), *w = randn_f(nw, 1), *b = randn_f(OC, 1), *R = randn_f(no, 1);
    float* out = filled_f(no, NAN);
    matmul_forward(out, inp, w, b, N, IC, OC);
    double *di = to_double(inp, ni), *dw_ = to_double(w, nw), *dbias = to_double(b, OC), *dR = to_double(R, no);
    double* ref = zeros_d(no);
    refd_matmul_forward(ref, di, dw_, dbias, N, IC, OC);
    check_err("fwd/matmul multi-tile 130x300x270", rel_err(out, ref, no), TOL_FWD);
    float *ginp = prefilled(ni), *gw = prefilled(nw), *gb = prefilled(OC);
    matmul_backward(ginp, gw, gb, R, inp, w, N, IC, OC);
    unprefill(ginp, ni), unprefill(gw, nw), unprefill(gb, OC);
    double *rinp = zeros_d(ni), *rw = zeros_d(nw), *rb = zeros_d(OC);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double r = dR[(size_t)i * OC + o];
            rb[o] += r;
            for (int k = 0; k < IC; k++)
                rinp[(size_t)i * IC + k] += r * dw_[(size_t)o * IC + k],
                    rw[(size_t)o * IC + k] += r * di[(size_t)i * IC + k];
        }
    check_err("bwd/matmul multi-tile/inp (closed form)", rel_err(ginp, rinp, ni), TOL_FWD);
    check_err("bwd/matmul multi-tile/weight (closed form)", rel_err(gw, rw, nw), TOL_FWD);
    check_err("bwd/matmul multi-tile/bias (closed form)", rel_err(gb, rb, OC), TOL_FWD);
#ifdef _OPENMP
    int nt = omp_get_max_threads();
    float* out1 = filled_f(no, 0);
    omp_set_num_threads(1);
    matmul_forward(out1, inp, w, b, N, IC, OC);
    omp_set_num_threads(nt > 1 ? nt : 2);
    float* out2 = filled_f(no, 0);
    matmul_forward(out2, inp, w, b, N, IC, OC);
    omp_set_num_threads(nt);
    check(!memcmp(out1, out2, sizeof(float) * no), "matmul bitwise equal on 1 and 2+ threads", NULL);
    free(out1), free(out2);
#endif
    free(inp), free(w), free(b), free(R), free(out), free(di), free(dw_), free(dbias), free(dR), free(ref);
    free(ginp), free(gw), free(gb), free(rinp), free(rw), free(rb);
}

// --- the GEMM on its own: C = (accumulate ? C : 0) + op(A) op(B) ---
// Against a double reference, for the four transposes with accumulate on and off, on
// shapes that are not multiples of the blocking (MR 6, NR 16 or 32, KC 256 or 128, MC
// 256), one row, one column, K = 1; leading dimensions wider than the matrices, the gaps
// between rows of C left alone, and pointers off the vector alignment (accumulate on).
static double gemm_case_err(int M, int N, int K, int ta, int tb, int accumulate, int* gaps_ok) {
    int off = accumulate;  // floats: 4 bytes off the allocation's alignment
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
    size_t na = (size_t)(ta ? K : M) * lda + off, nb = (size_t)(tb ? N : K) * ldb + off, nc = (size_t)M * ldc + off;
    float *A = randn_f(na, 1), *B = randn_f(nb, 1), *C = randn_f(nc, 1);
    float* C0 = copy_f(C, nc);
    gemm(M, N, K, A + off, lda, ta, B + off, ldb, tb, C + off, ldc, accumulate);
    double* ref = zeros_d((size_t)M * N);
    float* got = (float*)xmalloc(sizeof(float) * M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = accumulate ? C0[off + (size_t)i * ldc + j] : 0.0;
            for (int k = 0; k < K; k++)
                s += (double)A[off + (ta ? (size_t)k * lda + i : (size_t)i * lda + k)] *
                     B[off + (tb ? (size_t)j * ldb + k : (size_t)k * ldb + j)];
            ref[(size_t)i * N + j] = s, got[(size_t)i * N + j] = C[off + (size_t)i * ldc + j];
        }
    for (int i = 0; i < M; i++)
        *gaps_ok &= !memcmp(C + off + (size_t)i * ldc + N, C0 + off + (size_t)i * ldc + N,
                            sizeof(float) * (i < M - 1 ? ldc - N : 0));
    double err = rel_err(got, ref, (size_t)M * N);
    free(A), free(B), free(C), free(C0), free(ref), free(got);
    return err;
}
static void test_gemm(void) {
    // (MC rows: one block, its last panel padded past MC when MR does not divide it)
    int shapes[][3] = {{1, 1, 1},
                       {1, 37, 300},
                       {37, 1, 300},
                       {7, 19, 1},
                       {6, GEMM_NR, GEMM_KC},
                       {13, 70, 2 * GEMM_KC + 1},
                       {GEMM_MC, 2 * GEMM_NR + 1, 40},
                       {GEMM_MC + 7, 3 * GEMM_NR + 5, GEMM_KC + 9}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], gaps_ok = 1;
        double worst = 0;
        char which[64] = "", name[160];
        for (int v = 0; v < 8; v++) {  // transA, transB, accumulate
            int ta = v & 1, tb = (v >> 1) & 1, acc = v >> 2;
            double err = gemm_case_err(M, N, K, ta, tb, acc, &gaps_ok);
            if (!(err <= worst))
                worst = err, snprintf(which, sizeof(which), "transA %d transB %d accumulate %d", ta, tb, acc);
        }
        snprintf(name, sizeof(name), "gemm %dx%dx%d, 4 transposes x accumulate on/off (worst: %s)", M, N, K, which);
        check_err(name, worst, TOL_FWD);
        snprintf(name, sizeof(name), "gemm %dx%dx%d leaves the gaps between rows of C alone", M, N, K);
        check(gaps_ok, name, NULL);
    }
#ifdef _OPENMP
    // the same bits on 1, 2 and 3 threads: several KC slices, MC blocks and panels per thread
    int M = GEMM_MC + 40, N = 9 * GEMM_NR + 3, K = 2 * GEMM_KC + 50, nt = omp_get_max_threads(), same = 1;
    float *A = randn_f((size_t)M * K, 1), *B = randn_f((size_t)K * N, 1), *C0 = randn_f((size_t)M * N, 1), *C[3];
    for (int v = 0; v < 4; v++) {
        int ta = v & 1, tb = v >> 1;
        for (int t = 0; t < 3; t++) {
            omp_set_num_threads(t + 1);
            C[t] = copy_f(C0, (size_t)M * N);
            gemm(M, N, K, A, ta ? M : K, ta, B, tb ? K : N, tb, C[t], N, 1);
        }
        same &= !memcmp(C[0], C[1], sizeof(float) * M * N) && !memcmp(C[0], C[2], sizeof(float) * M * N);
        for (int t = 0; t < 3; t++) free(C[t]);
    }
    omp_set_num_threads(nt);
    char name[160];
    snprintf(name, sizeof(name), "gemm %dx%dx%d bitwise equal on 1, 2 and 3 threads (4 transposes)", M, N, K);
    check(same, name, NULL);
    free(A), free(B), free(C0);
#endif
}

// --- layernorm / rmsnorm ---
typedef struct { int N, C, rms; double *x, *w, *b, *R; } NormCtx;
static double norm_obj(void* p) {
    NormCtx* c = (NormCtx*)p;
    size_t n = (size_t)c->N * c->C;
    double* out = zeros_d(n);
    refd_norm(c->rms, out, c->x, c->w, c->b, c->N, c->C);
    double L = dot_d(out, c->R, n);
    free(out);
    return L;
}
static void test_norm(int rms) {
    int N = 5, C = 20;  // C = 20: a full and a partial 16-column block in column_dot_accumulate
    size_t n = (size_t)N * C;
    const char* nm = rms ? "rmsnorm" : "layernorm";
    char name[128];
    float *x = randn_f(n, 1), *w = randn_f(C, 1), *b = randn_f(C, 1), *R = randn_f(n, 1);
    for (size_t i = 0; i < n; i++) x[i] += 0.7f;  // a non-zero mean to subtract
    float *out = filled_f(n, NAN), *mean = filled_f(N, NAN), *rstd = filled_f(N, NAN);
    if (rms) rmsnorm_forward(out, rstd, x, w, N, C);
    else layernorm_forward(out, mean, rstd, x, w, b, N, C);
    NormCtx ctx = {N, C, rms, to_double(x, n), to_double(w, C), to_double(b, C), to_double(R, n)};
    double *ref = zeros_d(n), *rmean = zeros_d(N), *rrstd = zeros_d(N);
    if (rms) refd_rmsnorm_forward(ref, rrstd, ctx.x, ctx.w, N, C);
    else refd_layernorm_forward(ref, rmean, rrstd, ctx.x, ctx.w, ctx.b, N, C);
    snprintf(name, sizeof(name), "fwd/%s", nm);
    check_err(name, rel_err(out, ref, n), TOL_FWD);
    snprintf(name, sizeof(name), "fwd/%s/rstd", nm);
    check_err(name, rel_err(rstd, rrstd, N), TOL_FWD);
    if (!rms) check_err("fwd/layernorm/mean", rel_err(mean, rmean, N), TOL_FWD);
    float *dx = prefilled(n), *dw = prefilled(C), *db = prefilled(C);
    if (rms) rmsnorm_backward(dx, dx, dw, R, x, w, rstd, N, C);  // dx += (in place)
    else layernorm_backward(dx, dx, dw, db, R, x, w, mean, rstd, N, C);  // dx += (in place)
    unprefill(dx, n), unprefill(dw, C), unprefill(db, C);
    snprintf(name, sizeof(name), "fd/%s/inp", nm);
    check_err(name, fd_err(norm_obj, &ctx, ctx.x, n, dx), TOL_GRAD);
    snprintf(name, sizeof(name), "fd/%s/weight", nm);
    check_err(name, fd_err(norm_obj, &ctx, ctx.w, C, dw), TOL_GRAD);
    if (!rms) check_err("fd/layernorm/bias", fd_err(norm_obj, &ctx, ctx.b, C, db), TOL_GRAD);
    free(x), free(w), free(b), free(R), free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
    free(ctx.x), free(ctx.w), free(ctx.b), free(ctx.R), free(ref), free(rmean), free(rrstd);
}

// --- attention (GQA and plain multi-head) ---
typedef struct { int B, T, H, KV, hd; double *qkv, *R; } AttCtx;
static double att_obj(void* p) {
    AttCtx* c = (AttCtx*)p;
    size_t no = (size_t)c->B * c->T * c->H * c->hd;
    double *out = zeros_d(no), *lse = zeros_d((size_t)c->B * c->H * c->T);
    refd_attention_forward(out, lse, c->qkv, c->B, c->T, c->H, c->KV, c->hd, NULL);
    double L = dot_d(out, c->R, no);
    free(out), free(lse);
    return L;
}
static void test_attention(int B, int T, int H, int KV, int hd) {
    char name[128], tag[48];
    snprintf(tag, sizeof(tag), "%s H%d KV%d T%d", KV < H ? "GQA" : "MHA", H, KV, T);
    size_t nq = (size_t)B * T * (H + 2 * KV) * hd, no = (size_t)B * T * H * hd, nl = (size_t)B * H * T;
    float *qkv = randn_f(nq, 1), *R = randn_f(no, 1), *out = filled_f(no, NAN), *lse = filled_f(nl, NAN);
    attention_forward(out, lse, qkv, B, T, H, KV, hd, NULL);
    AttCtx ctx = {B, T, H, KV, hd, to_double(qkv, nq), to_double(R, no)};
    double *ref = zeros_d(no), *rlse = zeros_d(nl);
    refd_attention_forward(ref, rlse, ctx.qkv, B, T, H, KV, hd, NULL);
    snprintf(name, sizeof(name), "fwd/attention %s", tag);
    check_err(name, rel_err(out, ref, no), TOL_FWD);
    snprintf(name, sizeof(name), "fwd/attention %s/log-sum-exp", tag);
    check_err(name, rel_err(lse, rlse, nl), TOL_FWD);
    float* dqkv = filled_f(nq, NAN);  // overwritten
    attention_backward(dqkv, R, qkv, out, lse, B, T, H, KV, hd, NULL);
    snprintf(name, sizeof(name), "fd/attention %s/qkv", tag);
    check_err(name, fd_err(att_obj, &ctx, ctx.qkv, nq, dqkv), TOL_GRAD);
    free(qkv), free(R), free(out), free(lse), free(dqkv), free(ctx.qkv), free(ctx.R), free(ref), free(rlse);
}

// The position of row i of ring rank r in sequence b: its documents' order (order: B x T), or the
// sequence's zig-zag / contiguous split (order NULL).
static int ring_row_position(const int* order, int b, int r, int i, int R, int T, int contiguous) {
    return order ? order[(size_t)b * T + r * (T / R) + i] : cp_ring_position(i, r, R, T, contiguous);
}

static int ring_blocks_reference;  // 1: the blocks by backend/cpu/reference.h (tests/gpt_reference.c)

// --- attention by blocks, as context parallelism's ring computes it: each ring rank's
// zig-zag rows against every rank's keys (context_parallel.h cp_blocks, in ring order),
// merged by log-sum-exp, against the whole-sequence attention; the backward's dq of each
// rank and dk, dv summed over the ranks that saw each key, against the whole backward.
// doc (B x T, NULL: none): documents (tests/gpt_docs.c), both sides masked by them. split: 0
// the sequence's zig-zag, 1 contiguous, 2 --cp-split doc (each sequence's cp_doc_order). ---
static void test_attention_ring(int B, int T, int H, int KV, int hd, int R, int split, const int* doc) {
    char name[160];
    int stride = (H + 2 * KV) * hd, Ts = T / R, kv_ld = 2 * KV * hd, contiguous = split == 1;
    int* order = split == 2 ? (int*)xmalloc(sizeof(int) * B * T) : NULL;  // sequence b's rows at [b * T]
    for (int b = 0; order && b < B; b++) cp_doc_order(doc ? doc + (size_t)b * T : NULL, T, R, order + (size_t)b * T);
    size_t nq = (size_t)B * T * stride, no = (size_t)B * T * H * hd;
    float *qkv = randn_f(nq, 1), *dout = randn_f(no, 1), *out = filled_f(no, NAN),
          *lse = filled_f((size_t)B * H * T, NAN);
    float* dqkv = filled_f(nq, NAN);
    attention_forward(out, lse, qkv, B, T, H, KV, hd, doc);
    attention_backward(dqkv, dout, qkv, out, lse, B, T, H, KV, hd, doc);
    // each ring rank's rows (B x Ts), gathered by position
    size_t lq = (size_t)B * Ts * stride, lo = (size_t)B * Ts * H * hd, lk = (size_t)B * Ts * kv_ld;
    float *q_r = (float*)xmalloc(sizeof(float) * R * lq), *kv_r = (float*)xmalloc(sizeof(float) * R * lk);
    float *do_r = (float*)xmalloc(sizeof(float) * R * lo), *o_r = filled_f(R * lo, NAN),
          *l_r = filled_f((size_t)R * B * H * Ts, NAN);
    float *dq_r = filled_f(R * lo, 0.0f), *dkv_r = filled_f(R * lk, 0.0f);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < Ts; i++) {
                size_t full = (size_t)b * T + ring_row_position(order, b, r, i, R, T, contiguous);
                size_t row = (size_t)b * Ts + i;
                memcpy(q_r + r * lq + row * stride, qkv + full * stride, sizeof(float) * stride);
                memcpy(kv_r + r * lk + row * kv_ld, qkv + full * stride + H * hd,
                       sizeof(float) * kv_ld);  // as the ring sends it
                memcpy(do_r + r * lo + row * H * hd, dout + full * H * hd, sizeof(float) * H * hd);
            }
    Model m;
    memset(&m, 0, sizeof(m));
    m.c.seq_len = T, m.c.cp = R, m.c.cp_ulysses = 1, m.c.cp_contiguous = contiguous;
    m.n_head_local = H, m.n_kv_head_local = KV, m.hd = hd, m.T = Ts, m.B = B;
    m.doc_start = m.doc_seq = (int*)doc, m.kernel_doc_seq = doc;  // micro-batch m.mb 0: these B sequences
    m.c.cp_doc = split == 2, m.cp_by_doc = split == 2, m.cp_order = order, m.kernel_cp_order = order;
    AttnBlock blk[4];
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < R; r++) {
            m.L.cp_rank = r;
            CpShape s = cp_shape(&m);
            for (int step = 0; step < R; step++) {
                int src = (r - step + R) % R, n = cp_blocks(&m, &s, src, B, stride, kv_ld, blk);
                for (int i = 0; i < n; i++) {
                    float *o = o_r + r * lo, *l = l_r + (size_t)r * B * H * Ts, *q = q_r + r * lq;
                    float* kv = kv_r + src * lk;
                    if (pass == 0 && ring_blocks_reference) ref_attention_block_forward(o, H * hd, l, q, kv, &blk[i]);
                    else if (pass == 0) attention_block_forward(o, H * hd, l, q, kv, &blk[i]);
                    else if (ring_blocks_reference)
                        ref_attention_block_backward(dq_r + r * lo, H * hd, dkv_r + src * lk, kv_ld, q, kv,
                                                     do_r + r * lo, o, H * hd, l, &blk[i]);
                    else
                        attention_block_backward(dq_r + r * lo, H * hd, dkv_r + src * lk, kv_ld, q, kv, do_r + r * lo,
                                                 o, H * hd, l, &blk[i]);
                }
            }
        }
    // the whole-sequence results at each rank's positions
    double *eo = zeros_d(R * lo), *el = zeros_d((size_t)R * B * H * Ts), *edq = zeros_d(R * lo),
           *edkv = zeros_d(R * lk);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < Ts; i++) {
                size_t full = (size_t)b * T + ring_row_position(order, b, r, i, R, T, contiguous);
                size_t row = (size_t)b * Ts + i;
                for (int k = 0; k < H * hd; k++) {
                    eo[r * lo + row * H * hd + k] = out[full * H * hd + k];
                    edq[r * lo + row * H * hd + k] = dqkv[full * stride + k];
                }
                for (int k = 0; k < kv_ld; k++) edkv[r * lk + row * kv_ld + k] = dqkv[full * stride + H * hd + k];
                for (int h = 0; h < H; h++)
                    el[(size_t)r * B * H * Ts + ((size_t)b * H + h) * Ts + i] =
                        lse[((size_t)b * H + h) * T + full - (size_t)b * T];
            }
    const char* tag = KV < H ? "GQA" : "MHA";
    snprintf(name, sizeof(name), "fwd/attention ring R=%d %s%s blocks merged = whole sequence (%s T%d%s)", R,
             ring_blocks_reference ? "reference's " : "",
             split == 2 ? "documents' zig-zag" : contiguous ? "contiguous" : "zig-zag", tag, T,
             doc ? ", documents" : "");
    check_err(name, rel_err(o_r, eo, R * lo), TOL_FWD);
    snprintf(name, sizeof(name), "fwd/attention ring R=%d log-sum-exp = whole sequence", R);
    check_err(name, rel_err(l_r, el, (size_t)R * B * H * Ts), TOL_FWD);
    snprintf(name, sizeof(name), "bwd/attention ring R=%d dq = whole sequence", R);
    check_err(name, rel_err(dq_r, edq, R * lo), TOL_FWD);
    snprintf(name, sizeof(name), "bwd/attention ring R=%d dk, dv summed over the ring = whole sequence", R);
    check_err(name, rel_err(dkv_r, edkv, R * lk), TOL_FWD);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(q_r), free(kv_r), free(do_r), free(o_r), free(l_r);
    free(dq_r), free(dkv_r), free(eo), free(el), free(edq), free(edkv), free(order);
}

// The zig-zag split: ring rank r holds chunks r and 2R-1-r, so every rank's causal work
// (the (query, key) pairs it computes) is the same; positions are a permutation.
static void test_zigzag(int T, int cp, int U, int contiguous) {
    char name[128];
    int R = cp / U, Tl = T / cp, *seen = (int*)xcalloc(T, sizeof(int)), *pos = (int*)xmalloc(sizeof(int) * Tl), ok = 1;
    long long work0 = -1, work_max = 0, work_min = LLONG_MAX;
    for (int r = 0; r < cp; r++) {
        cp_positions(pos, T, cp, U, r, contiguous);
        long long work = 0;
        for (int j = 0; j < Tl; j++) seen[pos[j]]++, work += pos[j] + 1;
        work_max = work > work_max ? work : work_max, work_min = work < work_min ? work : work_min;
        if (work0 < 0) work0 = work;
        Model m;
        memset(&m, 0, sizeof(m));
        m.c.seq_len = T, m.c.cp = cp, m.c.cp_ulysses = U, m.c.cp_contiguous = contiguous, m.T = Tl;
        for (int j = 0; j < Tl; j++) {
            int row, holder = cp_rank_of_position(&m, pos[j], &row);
            ok &= holder == r && row == j;
        }
    }
    for (int p = 0; p < T; p++) ok &= seen[p] == 1;
    const char* split = contiguous ? "contiguous" : "zig-zag";
    snprintf(name, sizeof(name), "cp %s T=%d cp=%d U=%d: every position on one rank, cp_rank_of_position inverts it",
             split, T, cp, U);
    check(ok, name, NULL);
    if (U == 1) {  // the ring's ranks (Ulysses ranks split a ring rank's rows unevenly, but they attend as one)
        snprintf(name, sizeof(name), "cp %s T=%d ring %d: causal work per rank %s (%lld..%lld)", split, T, R,
                 contiguous ? "unequal" : "equal", work_min, work_max);
        check(contiguous ? work_max > 2 * work_min : work_min == work_max, name, NULL);
    }
    free(seen), free(pos);
}

// --- rope: in place on the first n_heads heads of each row; the rest (v) untouched ---
typedef struct { int N, T, stride, n_heads, hd; const int* pos; double *x, *R; } RopeCtx;
static double rope_obj(void* p) {
    RopeCtx* c = (RopeCtx*)p;
    size_t n = (size_t)c->N * c->stride;
    double* y = zeros_d(n);
    memcpy(y, c->x, sizeof(double) * n);
    refd_rope(y, c->N, c->pos, c->T, c->stride, c->n_heads, c->hd, 10000.0, 1.0);
    double L = dot_d(y, c->R, n);
    free(y);
    return L;
}
// pos: the rows' positions (context parallelism's zig-zag rows), or in order.
static void test_rope(int zigzag) {
    int B = 2, T = 6, hd = 4, n_heads = 3, stride = 4 * hd, N = B * T;  // 3 rotated heads + 1 left alone
    int pos[6] = {0, 1, 2, 3, 4, 5};
    if (zigzag) cp_positions(pos, 12, 2, 1, 1, 0);  // ring rank 1 of 2 over 12 positions: 3 4 5 6 7 8
    size_t n = (size_t)N * stride;
    float *x = randn_f(n, 1), *R = randn_f(n, 1);
    float* y = copy_f(x, n);
    rope_apply(y, N, pos, T, stride, n_heads, hd, 10000.0f, 1.0f);
    RopeCtx ctx = {N, T, stride, n_heads, hd, pos, to_double(x, n), to_double(R, n)};
    double* ref = to_double(x, n);
    refd_rope(ref, N, pos, T, stride, n_heads, hd, 10000.0, 1.0);
    check_err(zigzag ? "fwd/rope at positions 3..8" : "fwd/rope", rel_err(y, ref, n), TOL_FWD);
    int v_same = 1;
    for (int i = 0; i < N; i++)
        v_same &=
            !memcmp(y + (size_t)i * stride + n_heads * hd, x + (size_t)i * stride + n_heads * hd, sizeof(float) * hd);
    check(v_same, "fwd/rope leaves the heads past n_heads alone", NULL);
    // backward: the transpose of the rotation is the rotation by -angle
    float* g = copy_f(R, n);
    rope_apply(g, N, pos, T, stride, n_heads, hd, 10000.0f, -1.0f);
    check_err("fd/rope/inp (sign -1 is the backward)", fd_err(rope_obj, &ctx, ctx.x, n, g), TOL_GRAD);
    free(x), free(R), free(y), free(g), free(ctx.x), free(ctx.R), free(ref);
}

// --- gelu, swiglu ---
typedef struct { int N, F, swiglu; double *x, *R; } ActCtx;
static double act_obj(void* p) {
    ActCtx* c = (ActCtx*)p;
    size_t no = (size_t)c->N * c->F;
    double* out = zeros_d(no);
    if (c->swiglu) refd_swiglu_forward(out, c->x, c->N, c->F);
    else refd_gelu_forward(out, c->x, no);
    double L = dot_d(out, c->R, no);
    free(out);
    return L;
}
static void test_activation(int swiglu) {
    int N = 4, F = 10;
    size_t ni = (size_t)N * F * (swiglu ? 2 : 1), no = (size_t)N * F;
    const char* nm = swiglu ? "swiglu" : "gelu";
    char name[64];
    float *x = randn_f(ni, 2), *R = randn_f(no, 1), *out = filled_f(no, NAN);
    if (swiglu) swiglu_forward(out, x, N, F);
    else gelu_forward(out, x, no);
    ActCtx ctx = {N, F, swiglu, to_double(x, ni), to_double(R, no)};
    double* ref = zeros_d(no);
    if (swiglu) refd_swiglu_forward(ref, ctx.x, N, F);
    else refd_gelu_forward(ref, ctx.x, no);
    snprintf(name, sizeof(name), "fwd/%s", nm);
    check_err(name, rel_err(out, ref, no), TOL_FWD);
    float* dx = prefilled(ni);
    if (swiglu) swiglu_backward(dx, x, R, N, F);
    else gelu_backward(dx, x, R, no);
    unprefill(dx, ni);
    snprintf(name, sizeof(name), "fd/%s/inp", nm);
    check_err(name, fd_err(act_obj, &ctx, ctx.x, ni, dx), TOL_GRAD);
    free(x), free(R), free(out), free(dx), free(ctx.x), free(ctx.R), free(ref);
}

// --- residual and row-parallel bias: out = a + b (+ bias per row). The model's backward of
// the residual is the identity (a memcpy of dout), of the bias column_dot_accumulate. ---
typedef struct { int N, C; double *a, *b, *bias, *R; } ResCtx;
static double res_obj(void* p) {
    ResCtx* c = (ResCtx*)p;
    double L = 0;
    for (int i = 0; i < c->N; i++)
        for (int k = 0; k < c->C; k++) {
            size_t j = (size_t)i * c->C + k;
            L += (c->a[j] + c->b[j] + c->bias[k]) * c->R[j];
        }
    return L;
}
static void test_residual(void) {
    int N = 6, C = 20;
    size_t n = (size_t)N * C;
    float *a = randn_f(n, 1), *b = randn_f(n, 1), *bias = randn_f(C, 1), *R = randn_f(n, 1), *out = filled_f(n, NAN);
    residual_forward(out, a, b, n);
    add_bias(out, bias, N, C);
    ResCtx ctx = {N, C, to_double(a, n), to_double(b, n), to_double(bias, C), to_double(R, n)};
    double* ref = zeros_d(n);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C; k++) ref[i * C + k] = ctx.a[i * C + k] + ctx.b[i * C + k] + ctx.bias[k];
    check_err("fwd/residual+bias", rel_err(out, ref, n), TOL_FWD);
    float* acc = copy_f(a, n);
    add_inplace(acc, b, n);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= acc[i] == a[i] + b[i];
    check(same, "fwd/add_inplace exact", NULL);
    float* dbias = prefilled(C);
    column_dot_accumulate(dbias, R, NULL, N, C);
    unprefill(dbias, C);
    check_err("fd/residual/a (identity)", fd_err(res_obj, &ctx, ctx.a, n, R), TOL_GRAD);
    check_err("fd/residual/b (identity)", fd_err(res_obj, &ctx, ctx.b, n, R), TOL_GRAD);
    check_err("fd/residual/bias (column_dot_accumulate)", fd_err(res_obj, &ctx, ctx.bias, C, dbias), TOL_GRAD);
    free(a), free(b), free(bias), free(R), free(out), free(acc), free(dbias), free(ctx.a), free(ctx.b), free(ctx.bias),
        free(ctx.R), free(ref);
}

// --- vocabulary-parallel token embedding and the position embedding ---
typedef struct { int N, C, vocab_start, vocab_local, T, row0; const int* tok; double *wte, *x, *wpe, *R; } EmbCtx;
static double emb_obj(void* p) {
    EmbCtx* c = (EmbCtx*)p;
    size_t n = (size_t)c->N * c->C;
    double* out = zeros_d(n);
    refd_embedding_forward(out, c->tok, c->wte, c->N, c->C, c->vocab_start, c->vocab_local);
    double L = dot_d(out, c->R, n);
    free(out);
    return L;
}
static double pos_obj(void* p) {
    EmbCtx* c = (EmbCtx*)p;
    double L = 0;
    for (int i = 0; i < c->N; i++)
        for (int k = 0; k < c->C; k++)
            L += (c->x[(size_t)i * c->C + k] + c->wpe[(size_t)c->tok[(c->row0 + i) % c->T] * c->C + k]) *
                 c->R[(size_t)i * c->C + k];
    return L;
}
static void test_embedding(void) {
    int N = 12, C = 20, vocab_start = 4, vocab_local = 6;
    int tok[12] = {0, 4, 5, 9, 10, 13,
                   4, 7, 7, 3, 9,  11};  // in range [4, 10): 4 5 9 4 7 7 9; repeats; outside: 0 10 13 3 11
    size_t n = (size_t)N * C, nw = (size_t)vocab_local * C;
    float *wte = randn_f(nw, 1), *R = randn_f(n, 1), *out = filled_f(n, NAN);
    embedding_forward(out, tok, wte, N, C, vocab_start, vocab_local);
    EmbCtx ctx = {N, C, vocab_start, vocab_local, 0, 0, tok, to_double(wte, nw), NULL, NULL, to_double(R, n)};
    double* ref = zeros_d(n);
    refd_embedding_forward(ref, tok, ctx.wte, N, C, vocab_start, vocab_local);
    check_err("fwd/embedding vocab range [4,10) (outside rows 0)", rel_err(out, ref, n), 0.0);
    float* dwte = prefilled(nw);
    embedding_backward(dwte, tok, R, N, C, vocab_start, vocab_local);
    unprefill(dwte, nw);
    check_err("fd/embedding/wte (repeats, tokens outside range)", fd_err(emb_obj, &ctx, ctx.wte, nw, dwte), TOL_GRAD);
    // position embedding of rows [row0, row0+N) of a batch with T rows a sequence (wraps
    // around), row i at position pos[i % T] (context parallelism holds rows out of order)
    int T = 4, row0 = 5, Np = 7, pos[4] = {2, 0, 3, 1};
    size_t np = (size_t)Np * C;
    float *x = randn_f(np, 1), *wpe = randn_f((size_t)T * C, 1), *Rp = randn_f(np, 1);
    float* y = copy_f(x, np);
    position_forward(y, wpe, Np, row0, pos, T, C);
    EmbCtx pc = {Np, C, 0, 0, T, row0, pos, NULL, to_double(x, np), to_double(wpe, (size_t)T * C), to_double(Rp, np)};
    double* pref = zeros_d(np);
    for (int i = 0; i < Np; i++)
        for (int k = 0; k < C; k++) pref[i * C + k] = pc.x[i * C + k] + pc.wpe[pos[(row0 + i) % T] * C + k];
    check_err("fwd/position (row0 5, T 4: wraps; positions permuted)", rel_err(y, pref, np), TOL_FWD);
    float* dwpe = prefilled((size_t)T * C);
    position_backward(dwpe, Rp, Np, row0, pos, T, C);
    unprefill(dwpe, (size_t)T * C);
    check_err("fd/position/wpe", fd_err(pos_obj, &pc, pc.wpe, (size_t)T * C, dwpe), TOL_GRAD);
    check_err("fd/position/inp (identity)", fd_err(pos_obj, &pc, pc.x, np, Rp), TOL_GRAD);
    free(wte), free(R), free(out), free(ctx.wte), free(ctx.R), free(ref), free(dwte);
    free(x), free(wpe), free(Rp), free(y), free(pc.x), free(pc.wpe), free(pc.R), free(pref), free(dwpe);
}

// --- vocabulary-parallel cross-entropy, the 3 passes; objective L = s * sum_i loss_i
// (the fused kernel scales every row by the same dloss_scale s, so here R = s). ---
typedef struct { int N, Vp, vocab; const int* targets; double *logits, s; } CeCtx;
static double ce_obj(void* p) {
    CeCtx* c = (CeCtx*)p;
    double* losses = zeros_d(c->N);
    refd_crossentropy(losses, c->logits, c->targets, c->N, c->Vp, c->vocab);
    double L = 0;
    for (int i = 0; i < c->N; i++) L += c->s * losses[i];
    free(losses);
    return L;
}
// Split the padded vocabulary Vp over `ranks` simulated tp ranks: each runs the local
// passes on its columns, the max and the sums are combined by hand (what the tp
// all-reduces do), and each finishes on its own columns.
static void test_crossentropy(int N, int Vp, int vocab, int ranks) {
    char name[160], tag[64];
    snprintf(tag, sizeof(tag), "vocab %d padded %d, %d rank%s", vocab, Vp, ranks, ranks > 1 ? "s" : "");
    int vocab_local = Vp / ranks;
    float s = 0.37f;
    int* targets = (int*)xmalloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) targets[i] = (int)(rng_u64(&test_rng) % vocab);
    targets[0] = vocab - 1, targets[N - 1] = 0;  // the ends of the real vocabulary
    float* logits = randn_f((size_t)N * Vp, 2);
    for (int i = 0; i < N; i++)
        for (int j = vocab; j < Vp; j++) logits[(size_t)i * Vp + j] = 30.0f;  // padding: must be ignored
    float *maxes = filled_f(N, -FLT_MAX), *sums = filled_f(2 * N, 0), *losses = filled_f((size_t)ranks * N, NAN);
    float** part = (float**)xmalloc(sizeof(float*) * ranks);
    for (int r = 0; r < ranks; r++) {  // each rank's columns [r*vocab_local, (r+1)*vocab_local)
        part[r] = (float*)xmalloc(sizeof(float) * N * vocab_local);
        for (int i = 0; i < N; i++)
            memcpy(part[r] + (size_t)i * vocab_local, logits + (size_t)i * Vp + r * vocab_local,
                   sizeof(float) * vocab_local);
    }
    float *lmax = filled_f(N, NAN), *lsums = filled_f(2 * N, NAN);
    for (int r = 0; r < ranks; r++) {  // pass 1 + "all-reduce MAX"
        crossentropy_local_max(lmax, part[r], N, vocab_local, r * vocab_local, vocab);
        for (int i = 0; i < N; i++) if (lmax[i] > maxes[i]) maxes[i] = lmax[i];
    }
    for (int r = 0; r < ranks; r++) {  // pass 2 + "all-reduce SUM"
        crossentropy_local_sums(lsums, part[r], maxes, targets, N, vocab_local, r * vocab_local, vocab);
        for (int i = 0; i < 2 * N; i++) sums[i] += lsums[i];
    }
    float* dlogits = filled_f((size_t)N * Vp, NAN);
    for (int r = 0; r < ranks; r++) {  // pass 3 on each rank, fused backward in place
        crossentropy_finish(losses + (size_t)r * N, part[r], maxes, sums, targets, N, vocab_local, r * vocab_local,
                            vocab, s);
        for (int i = 0; i < N; i++)
            memcpy(dlogits + (size_t)i * Vp + r * vocab_local, part[r] + (size_t)i * vocab_local,
                   sizeof(float) * vocab_local);
    }
    CeCtx ctx = {N, Vp, vocab, targets, to_double(logits, (size_t)N * Vp), s};
    double* ref = zeros_d(N);
    refd_crossentropy(ref, ctx.logits, targets, N, Vp, vocab);
    snprintf(name, sizeof(name), "fwd/crossentropy %s", tag);
    check_err(name, rel_err(losses, ref, N), TOL_FWD);
    if (ranks > 1) {
        int same = 1;
        for (int r = 1; r < ranks; r++) same &= !memcmp(losses, losses + (size_t)r * N, sizeof(float) * N);
        snprintf(name, sizeof(name), "fwd/crossentropy %s: every rank the same losses", tag);
        check(same, name, NULL);
    }
    // without dlogits (evaluation) the losses are the same
    float* l2 = filled_f(N, NAN);
    crossentropy_finish(l2, NULL, maxes, sums, targets, N, vocab_local, 0, vocab, s);
    snprintf(name, sizeof(name), "fwd/crossentropy %s: forward-only losses equal", tag);
    check(!memcmp(l2, losses, sizeof(float) * N), name, NULL);
    int pad_zero = 1;
    for (int i = 0; i < N; i++) for (int j = vocab; j < Vp; j++) pad_zero &= dlogits[(size_t)i * Vp + j] == 0.0f;
    snprintf(name, sizeof(name), "bwd/crossentropy %s: padded columns get 0", tag);
    check(pad_zero, name, NULL);
    snprintf(name, sizeof(name), "fd/crossentropy %s/logits", tag);
    check_err(name, fd_err(ce_obj, &ctx, ctx.logits, (size_t)N * Vp, dlogits), TOL_GRAD);
    for (int r = 0; r < ranks; r++) free(part[r]);
    free(part), free(targets), free(logits), free(maxes), free(sums), free(losses), free(lmax), free(lsums),
        free(dlogits);
    free(ctx.logits), free(ref), free(l2);
}

static void test_kernels(void) {
    rng_seed(&test_rng, 12345);
    test_matmul(5, 7, 9, 1);
    test_matmul(4, 6, 3, 0);
    test_matmul(7, 19, 2 * GEMM_NR + 5, 1);  // past the register tile and one panel
    test_matmul(1, GEMM_KC + 44, 20, 0);     // one row; the forward over two KC slices
    test_matmul_large();
    test_gemm();
    test_norm(0);
    test_norm(1);
    test_attention(2, 5, 4, 2, 3);  // GQA: 2 query heads per kv head
    test_attention(2, 5, 3, 3, 4);  // plain multi-head
    test_attention(2, 5, 4, 1, 2);  // multi-query
    test_attention(1, 2 * ATT_ROWS + 5, 2, 1, 3);  // three blocks of queries, the last partial
    test_rope(0);
    test_rope(1);
    test_attention_ring(2, 16, 4, 2, 8, 2, 0, NULL);  // GQA, 2 ring ranks: 4 chunks of 4
    test_attention_ring(1, 16, 2, 2, 4, 4, 0, NULL);  // 4 ring ranks: 8 chunks of 2
    test_attention_ring(1, 2 * ATT_ROWS + 6, 2, 1, 3, 1, 0, NULL);  // one rank: one segment, tiles past ATT_ROWS
    test_attention_ring(1, 4 * ATT_ROWS + 8, 1, 1, 4, 2, 0, NULL);  // chunks of more than one tile
    test_attention_ring(1, 16, 2, 1, 4, 4, 1, NULL);  // the contiguous split: later ranks' blocks skipped
    test_zigzag(16, 2, 1, 0);
    test_zigzag(48, 4, 1, 0);
    test_zigzag(32, 4, 2, 0);
    test_zigzag(32, 4, 4, 0);
    test_zigzag(32, 4, 1, 1);
    test_activation(0);
    test_activation(1);
    test_residual();
    test_embedding();
    test_crossentropy(6, 16, 11, 1);  // one rank, padded columns 11..15
    test_crossentropy(6, 16, 13, 2);  // two tp ranks, padding at the end of rank 1
    test_crossentropy(5, 16, 7, 2);   // the real vocabulary inside rank 0: rank 1 all padding
    test_crossentropy(7, 24, 24, 3);  // three ranks, no padding
}
