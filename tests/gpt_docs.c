// tests/gpt_docs.c: test_gpt's documents section: document masking (data/data.h doc_starts,
// layout/config.h AttnBlock.doc). Key k is visible to query q iff doc_start[q] <= k <= q.
//   - doc_starts on tokens with end-of-text ids;
//   - the masked attention against the double reference (backend/cpu/reference.h), its backward
//     against finite differences of that reference;
//   - a packed sequence against each of its documents alone (the attention, then the whole
//     model: per-token losses and the gradient);
//   - context parallelism's blocks (ring zig-zag and contiguous, tests/gpt_kernels.c's
//     test_attention_ring) with documents, and the blocks cp_blocks skips;
//   - the time the masked attention saves: 8 documents of T/8 against one of T.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// doc_start of n positions from the document starts starts[0..n_starts) (ascending; a first
// start above 0 leaves positions before it in a document begun before the sequence: 0).
static void docs_from_starts(int* doc, int n, const int* starts, int n_starts) {
    for (int t = 0, k = 0, cur = 0; t < n; t++) {
        while (k < n_starts && starts[k] <= t) cur = starts[k++];
        doc[t] = cur;
    }
}

typedef struct { int B, T, H, KV, hd; const int* doc; double *qkv, *R; } DocAttCtx;
static double doc_att_obj(void* p) {
    DocAttCtx* c = (DocAttCtx*)p;
    size_t no = (size_t)c->B * c->T * c->H * c->hd;
    double *out = zeros_d(no), *lse = zeros_d((size_t)c->B * c->H * c->T);
    refd_attention_forward(out, lse, c->qkv, c->B, c->T, c->H, c->KV, c->hd, c->doc);
    double L = dot_d(out, c->R, no);
    free(out), free(lse);
    return L;
}

// The masked attention (forward, log-sum-exp, backward by finite differences in double), and
// each document of the packed sequences run alone through the unmasked attention.
static void test_attention_docs(int B, int T, int H, int KV, int hd, const int* doc, const char* what) {
    char name[160];
    int stride = (H + 2 * KV) * hd;
    size_t nq = (size_t)B * T * stride, no = (size_t)B * T * H * hd, nl = (size_t)B * H * T;
    float *qkv = randn_f(nq, 1), *R = randn_f(no, 1), *out = filled_f(no, NAN), *lse = filled_f(nl, NAN);
    float* dqkv = filled_f(nq, NAN);
    attention_forward(out, lse, qkv, B, T, H, KV, hd, doc);
    attention_backward(dqkv, R, qkv, out, lse, B, T, H, KV, hd, doc);
    DocAttCtx ctx = {B, T, H, KV, hd, doc, to_double(qkv, nq), to_double(R, no)};
    double *ref = zeros_d(no), *rlse = zeros_d(nl);
    refd_attention_forward(ref, rlse, ctx.qkv, B, T, H, KV, hd, doc);
    snprintf(name, sizeof(name), "documents/attention %s (T%d): forward vs double reference", what, T);
    check_err(name, rel_err(out, ref, no), TOL_FWD);
    snprintf(name, sizeof(name), "documents/attention %s (T%d): log-sum-exp vs double reference", what, T);
    check_err(name, rel_err(lse, rlse, nl), TOL_FWD);
    snprintf(name, sizeof(name), "documents/attention %s (T%d): backward vs finite differences (double)", what, T);
    check_err(name, fd_err(doc_att_obj, &ctx, ctx.qkv, nq, dqkv), TOL_GRAD);
    // each document alone: its rows of qkv as a sequence of its own, no documents
    double worst_out = 0, worst_grad = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T;) {
            int e = s + 1;
            while (e < T && doc[(size_t)b * T + e] == doc[(size_t)b * T + s]) e++;
            int L = e - s;
            float* q1 = copy_f(qkv + ((size_t)b * T + s) * stride, (size_t)L * stride);
            float* o1 = filled_f((size_t)L * H * hd, NAN);
            float *l1 = filled_f((size_t)H * L, NAN), *d1 = filled_f((size_t)L * stride, NAN);
            attention_forward(o1, l1, q1, 1, L, H, KV, hd, NULL);
            attention_backward(d1, R + ((size_t)b * T + s) * H * hd, q1, o1, l1, 1, L, H, KV, hd, NULL);
            double* po = to_double(out + ((size_t)b * T + s) * H * hd, (size_t)L * H * hd);
            double* pd = to_double(dqkv + ((size_t)b * T + s) * stride, (size_t)L * stride);
            double eo = rel_err(o1, po, (size_t)L * H * hd), ed = rel_err(d1, pd, (size_t)L * stride);
            worst_out = eo > worst_out ? eo : worst_out, worst_grad = ed > worst_grad ? ed : worst_grad;
            free(q1), free(o1), free(l1), free(d1), free(po), free(pd);
            s = e;
        }
    snprintf(name, sizeof(name), "documents/attention %s (T%d): packed = each document alone (output)", what, T);
    check_err(name, worst_out, TOL_FWD);
    snprintf(name, sizeof(name), "documents/attention %s (T%d): packed = each document alone (dqkv)", what, T);
    check_err(name, worst_grad, TOL_FWD);
    free(qkv), free(R), free(out), free(lse), free(dqkv), free(ctx.qkv), free(ctx.R), free(ref), free(rlse);
}

// ----------------------------------------------------------------------------
// The whole model: a packed step against each of its documents alone.

// A test model (gpt_model.c model_from_args) with documents masked or not, as run.h resolves it.
static Model* new_doc_model(const char* flags, int masked) {
    Args* a = new_args(flags);
    a->doc_masked = masked;
    a->eot = EOT_TOKEN;  // byte-level data's end-of-text (run.h eot_resolve)
    return model_from_args(a);
}
static void free_doc_model(Model* m) {  // what the test reads is copied out first; the rest is left to exit
    free(m->args), free(m->met), free(m);
}

// The losses of the step's tokens, as the head kept them (one micro-batch: its first head set).
static const float* step_losses(const Model* m) { return m->chunks[m->L.vpp - 1].head_sets[0].losses; }

// base: the model flags without --seq-len; n_seq sequences of T tokens in one micro-batch, the
// documents of sequence b starting at starts[b][0..n_starts[b]). Each document alone is a
// model of its length (the same weights; GPT-2's wpe: its first rows) without documents. The
// packed step's mean loss is the documents' losses weighted by their lengths, and so is its
// gradient: G = sum over documents of G_doc * L_doc / (n_seq T).
static void test_model_docs(const char* arch, const char* base, int n_seq, int T, const int* const* starts,
                            const int* n_starts) {
    char flags[512], name[160];
    snprintf(flags, sizeof(flags), "%s --seq-len %d --micro-batch %d --global-batch %d", base, T, n_seq, n_seq);
    Model* mp = new_doc_model(flags, 1);
    randomize_params(mp, 11);
    int eot = mp->args->eot;
    Rng r;
    rng_seed(&r, 12);
    for (int i = 0; i < n_seq * T; i++)
        mp->inputs[i] = (int)(rng_u64(&r) % 256), mp->targets[i] = (int)(rng_u64(&r) % mp->c.vocab);
    for (int b = 0; b < n_seq; b++)
        for (int k = 0; k < n_starts[b]; k++) mp->inputs[b * T + starts[b][k]] = eot;
    for (int b = 0; b < n_seq; b++) doc_starts(mp->inputs + b * T, T, eot, mp->doc_seq + b * T);
    memcpy(mp->doc_start, mp->doc_seq, sizeof(int) * n_seq * T);
    docs_positions(mp, n_seq);
    model_loss_and_grads(mp);
    const float* losses = step_losses(mp);
    double* gsum = zeros_d(mp->P.n_local);
    double worst_loss = 0;
    int n_docs = 0;
    for (int b = 0; b < n_seq; b++)
        for (int s = 0; s < T; n_docs++) {
            int e = s + 1;
            while (e < T && mp->doc_seq[b * T + e] == mp->doc_seq[b * T + s]) e++;
            snprintf(flags, sizeof(flags), "%s --seq-len %d --micro-batch 1 --global-batch 1", base, e - s);
            Model* ma = new_doc_model(flags, 0);
            for (int i = 0; i < mp->P.n; i++)  // the same tensors; wpe: its first e - s rows
                memcpy(ma->params + ma->P.t[i].offset, mp->params + mp->P.t[i].offset, sizeof(float) * ma->P.t[i].size);
            memcpy(ma->inputs, mp->inputs + b * T + s, sizeof(int) * (e - s));
            memcpy(ma->targets, mp->targets + b * T + s, sizeof(int) * (e - s));
            model_loss_and_grads(ma);
            for (int t = s; t < e; t++) {
                double d = fabs(step_losses(ma)[t - s] - losses[b * T + t]) / fabs(losses[b * T + t]);
                worst_loss = d > worst_loss ? d : worst_loss;
            }
            for (int i = 0; i < mp->P.n; i++)
                for (size_t k = 0; k < ma->P.t[i].size; k++)
                    gsum[mp->P.t[i].offset + k] += (double)ma->grads[ma->P.t[i].offset + k] * (e - s) / (n_seq * T);
            free_doc_model(ma);
            s = e;
        }
    snprintf(name, sizeof(name), "documents/model %s: %d packed documents = each alone (per-token losses)", arch,
             n_docs);
    check_err(name, worst_loss, TOL_FWD);
    snprintf(name, sizeof(name), "documents/model %s: %d packed documents = each alone (gradient)", arch, n_docs);
    check_err(name, rel_err(mp->grads, gsum, mp->P.n_local), TOL_FWD);
    free(gsum);
    free_doc_model(mp);
}

// The sampler's window (runtime/train.h sample_text): its documents and positions, as
// micro-batch 0's one sequence.
static void test_window_docs(void) {
    Model* m = new_doc_model("--model tiny --n-layer 1 --seq-len 16 --micro-batch 2 --global-batch 4", 1);
    int window[16] = {256, 7, 8, 256, 9, 9, 9, 9, 256, 1}, ok = 1;  // the last 6: not yet sampled (0)
    m->mb = 1;
    docs_of_window(m, window);
    for (int t = 0; t < 16; t++) {
        int doc = t < 3 ? 0 : t < 8 ? 3 : 8;
        ok &= m->doc_seq[t] == doc && m->doc_start[t] == doc && m->row_pos[t] == t - doc;
    }
    int period;
    const int* pos = mb_positions(m, m->row_pos, m->pos, &period);
    ok &= m->mb == 0 && mb_docs(m) == m->doc_seq && pos == m->row_pos && period == 2 * 16;
    check(ok, "documents/the sampler's window: documents at its end-of-text tokens, positions restarting", "");
    free_doc_model(m);
}

// ----------------------------------------------------------------------------
// Context parallelism's blocks, the data side, and the time saved.

// cp_blocks' blocks of ring rank r at each step (counts[step]) for R ring ranks over T.
static void cp_block_counts(int T, int R, int contiguous, const int* doc, int r, int* counts) {
    Model m;
    memset(&m, 0, sizeof(m));
    m.c.seq_len = T, m.c.cp = R, m.c.cp_ulysses = 1, m.c.cp_contiguous = contiguous;
    m.n_head_local = m.n_kv_head_local = 1, m.hd = 1;
    m.T = T / R, m.B = 1, m.L.cp_rank = r;
    m.doc_start = m.doc_seq = (int*)doc, m.kernel_doc_seq = doc;
    CpShape s = cp_shape(&m);
    AttnBlock blk[4];
    for (int step = 0; step < R; step++) counts[step] = cp_blocks(&m, &s, (r - step + R) % R, 1, 3, 2, blk);
}

static void test_docs_data(void) {
    int tokens[] = {5, 256, 7, 8, 256, 256, 9}, want[] = {0, 1, 1, 1, 4, 5, 5}, got[7], ok = 1;
    doc_starts(tokens, 7, 256, got);
    for (int t = 0; t < 7; t++) ok &= got[t] == want[t];
    doc_starts(tokens, 7, -1, got);  // no end-of-text token in this vocabulary
    for (int t = 0; t < 7; t++) ok &= got[t] == 0;
    check(ok, "documents/doc_starts: an end-of-text token opens a document; none: all 0", "");
    // load_batch under cp 2 (zig-zag, rank 1): doc_start of the held rows = doc_seq at their positions
    TokenStream ts;
    memset(&ts, 0, sizeof(ts));
    ts.n_tokens = 400, ts.tokens = (int*)xmalloc(sizeof(int) * ts.n_tokens), ts.eot = 256;
    for (size_t i = 0; i < ts.n_tokens; i++) ts.tokens[i] = i % 7 == 3 ? 256 : (int)(i % 97);
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.seq_len = 16, c.micro_batch = 2, c.global_batch = 4;
    int pos[8], in[32], tg[32], ds[32], seq[64], in_full[64], tg_full[64], want_seq[16];
    cp_positions(pos, 16, 2, 1, 1, 0);
    load_batch(&ts, &c, 0, 2, 3, pos, 8, in, tg, ds, seq);
    stream_batch(&ts, 16, 3 * 4, 4, in_full, tg_full, NULL);
    ok = 1;
    for (int s = 0; s < 4; s++) {
        doc_starts(in_full + s * 16, 16, 256, want_seq);
        for (int t = 0; t < 16; t++) ok &= seq[s * 16 + t] == want_seq[t];
        for (int j = 0; j < 8; j++)
            ok &= ds[s * 8 + j] == seq[s * 16 + pos[j]] && in[s * 8 + j] == in_full[s * 16 + pos[j]];
    }
    check(ok, "documents/load_batch: doc_seq of each sequence, doc_start of the rows cp rank 1 holds", "");
    free(ts.tokens);
    // a document per zig-zag chunk (T 16, R 2: chunks of 4): only the diagonal blocks are left
    int doc[16], starts[] = {0, 4, 8, 12}, with[2], without[2];
    docs_from_starts(doc, 16, starts, 4);
    ok = 1;
    for (int r = 0; r < 2; r++) {
        cp_block_counts(16, 2, 0, doc, r, with);
        cp_block_counts(16, 2, 0, NULL, r, without);
        ok &= with[0] == 2 && with[1] == 0 && without[0] == 3 && without[1] == 2;
    }
    check(ok, "documents/cp_blocks: blocks with no visible pair are skipped (zig-zag R2: 2+0 blocks, 3+2 without)",
          "");
}

// Forward + backward of the attention at T (B 1, 4 heads of 32) with n_docs equal documents.
static double docs_attention_seconds(int T, int n_docs, const float* qkv, const float* dout, float* out, float* lse,
                                     float* dqkv) {
    int* doc = (int*)xmalloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) doc[t] = t / (T / n_docs) * (T / n_docs);
    double t0 = now_s();
    attention_forward(out, lse, qkv, 1, T, 4, 4, 32, n_docs > 1 ? doc : NULL);
    attention_backward(dqkv, dout, qkv, out, lse, 1, T, 4, 4, 32, n_docs > 1 ? doc : NULL);
    free(doc);
    return now_s() - t0;
}
static void test_docs_time(void) {
    int T = 1024;
    size_t nq = (size_t)T * 12 * 32, no = (size_t)T * 4 * 32;
    float *qkv = randn_f(nq, 1), *dout = randn_f(no, 1), *out = filled_f(no, 0), *lse = filled_f(4 * T, 0);
    float* dqkv = filled_f(nq, 0);
    double one = 1e30, eight = 1e30;  // the fastest of 3, taken in turns (a shared machine)
    for (int rep = 0; rep < 3; rep++) {
        double a = docs_attention_seconds(T, 1, qkv, dout, out, lse, dqkv);
        double b = docs_attention_seconds(T, 8, qkv, dout, out, lse, dqkv);
        one = a < one ? a : one, eight = b < eight ? b : eight;
    }
    // 8 documents hold 1/8 of the visible pairs; the diagonal tiles' masked halves add a little
    check(eight / one < 0.35, "documents/attention time: 8 documents of T/8 vs one of T (T 1024, 1 thread)",
          "%.1f ms vs %.1f ms: ratio %.3f (pairs 1/8)", eight * 1e3, one * 1e3, eight / one);
    free(qkv), free(dout), free(out), free(lse), free(dqkv);
}

// MFU with documents (metrics.h step_flops): PaLM's count without them; with 8 documents of
// T/8 in each sequence the attention term holds their visible pairs, (T/8 + 1) / (T + 1) of causal.
static void test_docs_flops(void) {
    Args* a = new_args("--model tiny --seq-len 64 --global-batch 2 --micro-batch 1");
    const ModelConfig* c = &a->cfg;
    int G = c->global_batch, T = c->seq_len, pos[64], doc[128], starts[8];
    for (int j = 0; j < T; j++) pos[j] = j;
    for (int k = 0; k < 8; k++) starts[k] = k * T / 8;
    docs_from_starts(doc, T, starts, 8), docs_from_starts(doc + T, T, starts, 8);
    double tokens = (double)G * T, model, hw, causal = tokens * (T + 1) / 2;
    step_flops(c, tokens, 1.0, &model, &hw);
    double palm = config_flops_per_token(c, T) * tokens;
    check(fabs(model / palm - 1) < 1e-12, "documents/MFU without documents: PaLM's 6N + 12*L*d*T per token",
          "%.6g vs %.6g", model, palm);
    double frac = attention_work(doc, G, T, pos, T) / causal;
    step_flops(c, tokens, frac, &model, &hw);
    double att_full = 12.0 * c->n_layer * c->d_model * T * tokens;
    double want = 6.0 * config_matmul_params(c) * tokens + att_full * (T / 8 + 1) / (T + 1);
    check(fabs(model / want - 1) < 1e-12 && model < palm,
          "documents/MFU with 8 documents: the attention term counts their visible pairs only",
          "%.6g vs %.6g (PaLM %.6g)", model, want, palm);
}

// HFU, one count (layout/config.h config_recompute_flops_per_token): the step line's and the
// planner's HFU / MFU are the same ratio; full recomputation adds each layer's forward again,
// 2 x 12 d^2 + 4 d T a token for GPT-2 (the head is not recomputed), selective 4 d T a layer.
static void test_hfu_one_count(void) {
    const char* policy[2] = {"full", "selective"};
    for (int k = 0; k < 2; k++) {
        char flags[160];
        snprintf(flags, sizeof(flags), "--model gpt2-124m --recompute %s --global-batch 8 --micro-batch 1", policy[k]);
        Args* a = new_args(flags);
        ModelConfig c = a->cfg;
        double tokens = (double)c.global_batch * c.seq_len, model, hw, d = c.d_model, T = c.seq_len;
        step_flops(&c, tokens, 1.0, &model, &hw);
        DeviceProfile dev;
        profile_builtin("a100-80gb", &dev);
        PlanSetup setup = plan_setup_default();
        PlanResult r;
        plan_predict(&c, &setup, c.global_batch, 8, &dev, &r);
        double want = c.n_layer * ((k == 0 ? 2 * 12 * d * d : 0) + 4 * d * T) / config_flops_per_token(&c, c.seq_len);
        char name[120];
        snprintf(name, sizeof(name), "HFU/--recompute %s: the step line's and the planner's HFU / MFU agree", policy[k]);
        check(fabs(hw / model - 1 - want) < 1e-12 && fabs(r.hfu / r.mfu - hw / model) < 1e-12, name,
              "step %.9f, planner %.9f, by hand %.9f", hw / model, r.hfu / r.mfu, 1 + want);
    }
}

static void test_docs(void) {
    rng_seed(&test_rng, 2828);  // this section may run alone
    test_docs_flops();
    test_hfu_one_count();
    test_docs_data();
    int doc2[26], s0[] = {0, 3, 4, 9}, s1[] = {5};
    docs_from_starts(doc2, 13, s0, 4), docs_from_starts(doc2 + 13, 13, s1, 1);
    test_attention_docs(2, 13, 4, 2, 3, doc2, "GQA, 2 sequences, a 1-token document");
    int T = 2 * ATT_ROWS + 11, s2[] = {20, 33, 70};
    int* doc_long = (int*)xmalloc(sizeof(int) * T);
    docs_from_starts(doc_long, T, s2, 3);
    test_attention_docs(1, T, 2, 1, 3, doc_long, "MQA, documents across tiles");
    free(doc_long);
    // the ring's blocks with documents (tests/gpt_kernels.c): zig-zag R2 and R4, contiguous R4
    int d16[32], r0[] = {3, 6, 13}, r1[] = {0, 8};
    docs_from_starts(d16, 16, r0, 3), docs_from_starts(d16 + 16, 16, r1, 2);
    test_attention_ring(2, 16, 4, 2, 8, 2, 0, d16);
    test_attention_ring(1, 16, 2, 2, 4, 4, 0, d16);
    test_attention_ring(1, 16, 2, 1, 4, 4, 1, d16);
    int T4 = 4 * ATT_ROWS + 8, s4[] = {40, 41, 100};
    int* d4 = (int*)xmalloc(sizeof(int) * T4);
    docs_from_starts(d4, T4, s4, 3);
    test_attention_ring(1, T4, 1, 1, 4, 2, 0, d4);
    free(d4);
    // the whole model (2 sequences in one micro-batch; the second begins inside a document)
    int m0[] = {0, 4, 5, 11}, m1[] = {6, 9};
    const int* starts[] = {m0, m1};
    int n_starts[] = {4, 2};
    test_model_docs("gpt2", "--model tiny --n-layer 2 --n-head 2 --d-model 16", 2, 16, starts, n_starts);
    test_model_docs("llama", "--model llama-tiny --n-layer 2 --n-head 4 --n-kv-head 2 --d-model 16 --d-ff 32", 2, 16,
                    starts, n_starts);
    test_window_docs();
    test_docs_time();
}
