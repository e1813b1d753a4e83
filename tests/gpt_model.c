// tests/gpt_model.c: test_gpt's test models (new_args, new_model), the whole model against its
// double reference, AdamW, the learning-rate schedule, training and non-finite losses.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// Building models for the tests.

// Args as the command line would give them (the strings are kept: Args points into them).
static Args* new_args(const char* flags) {
    Args* a = (Args*)xcalloc(1, sizeof(Args));
    args_from_flags(a, flags);
    args_derive(a, 1);  // dp and the batch, as run_setup on 1 rank
    a->quiet = 1;
    return a;
}

// A model from set-up arguments, as main() makes one on 1 rank.
static Model* model_from_args(Args* a) {
    char why[512];
    if (layout_check(&a->cfg, 1, why)) fail("test set-up: layout: %s", why);
    Metrics* met = (Metrics*)xcalloc(1, sizeof(Metrics));
    metrics_init(met, a, 0, 1, 1e12, "test");
    Model* m = (Model*)xcalloc(1, sizeof(Model));
    model_init(m, a, met);
    return m;
}
static Model* new_model(const char* flags) { return model_from_args(new_args(flags)); }

static int is_norm_weight(const Tensor* t) {
    return (t->layer >= 0 && (t->kind == P_LN1W || t->kind == P_LN2W)) || (t->layer < 0 && t->kind == P_LNFW);
}
static int is_bias(const Tensor* t) {
    if (t->layer < 0) return t->kind == P_LNFB;
    return t->kind == P_LN1B || t->kind == P_LN2B || t->kind == P_QKVB || t->kind == P_ATTPROJB || t->kind == P_FCB ||
           t->kind == P_FCPROJB;
}

// Replace the init by weights that exercise everything: norms 1 + 0.1 n, biases 0.1 n
// (zero biases would hide a bias applied in the wrong place), matrices and embeddings
// n / sqrt(cols), the padded vocabulary rows included (the loss must ignore them).
static void randomize_params(Model* m, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        float* p = m->params + t->offset;
        for (size_t k = 0; k < t->size; k++) {
            float n = rng_normal(&r);
            p[k] = is_norm_weight(t) ? 1.0f + 0.1f * n : is_bias(t) ? 0.1f * n : n / sqrtf((float)t->cols);
        }
    }
}
static void random_batch(Model* m, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    size_t n = (size_t)m->n_micro * m->B * m->T;
    for (size_t i = 0; i < n; i++)
        m->inputs[i] = (int)(rng_u64(&r) % m->c.vocab), m->targets[i] = (int)(rng_u64(&r) % m->c.vocab);
    m->inputs[0] = m->c.vocab - 1;  // the last real token (<|endoftext|> for 257)
}

// Forward + backward of the whole step through the schedule, no optimizer: fills m->grads
// with the gradient of the mean loss over the global batch and returns that loss.
static double model_loss_and_grads(Model* m) {
    double n_tokens = (double)m->c.global_batch * m->T;
    memset(m->grads, 0, sizeof(float) * m->P.n_padded);
    m->loss_sum = 0;
    run_schedule(m, m->ops, m->n_ops, 1, (float)(1.0 / n_tokens));
    reduce_gradients(m);  // 1 rank: nothing to reduce, but this is the path train_step takes
    return m->loss_sum / n_tokens;
}

// ----------------------------------------------------------------------------
// 2. The whole model in double precision, built from the reference layers. It reads
// the weights through the model's own views (m->w, m->wl) mapped onto a double copy
// `p` of the parameter buffer, so perturbing p[k] is perturbing parameter k.

typedef struct { Model* m; double* p; } RefModel;

static const double* dview(const RefModel* r, const float* w) { return w ? r->p + (w - r->m->params) : NULL; }

static void ref_norm(const Model* m, double* out, const double* x, const double* w, const double* b, int N) {
    refd_norm(m->c.arch == ARCH_LLAMA, out, x, w, b, N, m->C);
}

// Mean cross-entropy over all n_micro * B sequences of this step (real vocabulary only).
static double ref_model_loss(void* ctx) {
    RefModel* r = (RefModel*)ctx;
    Model* m = r->m;
    const ModelConfig* c = &m->c;
    int n_seq = m->n_micro * m->B, T = m->T, C = m->C, BT = n_seq * T, H = c->n_head, KV = c->n_kv_head, hd = C / H;
    int F = c->d_ff, Vp = c->vocab_padded, llama = c->arch == ARCH_LLAMA;
    int qkv_dim = (H + 2 * KV) * hd, fc_dim = llama ? 2 * F : F;
    double *x = zeros_d((size_t)BT * C), *h = zeros_d((size_t)BT * C), *qkv = zeros_d((size_t)BT * qkv_dim);
    double *lse = zeros_d((size_t)n_seq * H * T), *atty = zeros_d((size_t)BT * C), *y = zeros_d((size_t)BT * C);
    double *fch = zeros_d((size_t)BT * fc_dim), *act = zeros_d((size_t)BT * F), *logits = zeros_d((size_t)BT * Vp),
           *losses = zeros_d(BT);
    int* pos = positions_in_order(T);
    refd_embedding_forward(x, m->inputs, dview(r, m->w.wte), BT, C, 0, Vp);
    if (!llama) {
        const double* wpe = dview(r, m->w.wpe);
        for (int i = 0; i < BT; i++) for (int k = 0; k < C; k++) x[(size_t)i * C + k] += wpe[(size_t)(i % T) * C + k];
    }
    for (int l = 0; l < c->n_layer; l++) {
        const LayerW* w = &m->wl[l];
        ref_norm(m, h, x, dview(r, w->ln1w), dview(r, w->ln1b), BT);
        refd_matmul_forward(qkv, h, dview(r, w->qkvw), dview(r, w->qkvb), BT, C, qkv_dim);
        if (llama) refd_rope(qkv, BT, pos, T, qkv_dim, H + KV, hd, m->c.rope_theta, 1.0);  // q and k heads
        refd_attention_forward(atty, lse, qkv, n_seq, T, H, KV, hd, NULL);
        refd_matmul_forward(y, atty, dview(r, w->attprojw), dview(r, w->attprojb), BT, C, C);
        for (size_t i = 0; i < (size_t)BT * C; i++) x[i] += y[i];
        ref_norm(m, h, x, dview(r, w->ln2w), dview(r, w->ln2b), BT);
        refd_matmul_forward(fch, h, dview(r, w->fcw), dview(r, w->fcb), BT, C, fc_dim);
        if (llama) refd_swiglu_forward(act, fch, BT, F);
        else refd_gelu_forward(act, fch, (size_t)BT * F);
        refd_matmul_forward(y, act, dview(r, w->fcprojw), dview(r, w->fcprojb), BT, F, C);
        for (size_t i = 0; i < (size_t)BT * C; i++) x[i] += y[i];
    }
    ref_norm(m, h, x, dview(r, m->w.lnfw), dview(r, m->w.lnfb), BT);
    refd_matmul_forward(logits, h, dview(r, m->w.head), NULL, BT, C, Vp);  // GPT-2: head is wte (tied)
    refd_crossentropy(losses, logits, m->targets, BT, Vp, c->vocab);
    double L = 0;
    for (int i = 0; i < BT; i++) L += losses[i];
    free(x), free(h), free(qkv), free(lse), free(pos), free(atty), free(y), free(fch), free(act), free(logits);
    free(losses);
    return L / BT;
}

#define TOL_MODEL_LOSS 1e-5  // fp32 model loss vs double reference, relative
#define TOL_MODEL_GRAD 1e-3  // fp32 analytic gradient vs finite differences of the double loss

static void test_model_grads(const char* arch, const char* flags) {
    char name[160];
    Model* m = new_model(flags);
    randomize_params(m, 7);
    random_batch(m, 8);
    double loss = model_loss_and_grads(m);
    RefModel r = {m, to_double(m->params, m->P.n_local)};
    double ref = ref_model_loss(&r);
    snprintf(name, sizeof(name), "model/%s/loss vs double reference (%.6f vs %.6f)", arch, loss, ref);
    check_err(name, fabs(loss - ref) / fabs(ref), TOL_MODEL_LOSS);
    // the head and the embedding point where they should
    if (m->c.arch == ARCH_GPT2)
        check(m->w.head == m->w.wte && m->g.head == m->g.wte, "model/gpt2/head tied to wte", NULL);
    else
        check(m->w.head && m->w.head != m->w.wte && !m->w.wpe && !m->wl[0].qkvb,
              "model/llama/untied head, no wpe, no biases", NULL);
    // every tensor: all elements when small, else a random sample (plus, for the
    // vocabulary tensors, rows of tokens that occur and padded rows)
    Rng rs;
    rng_seed(&rs, 99);
    size_t* idx = (size_t*)xmalloc(sizeof(size_t) * 128);
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        size_t n = 0;
        if (t->size <= 64) for (size_t k = 0; k < t->size; k++) idx[n++] = t->offset + k;
        else {
            for (int k = 0; k < 40; k++) idx[n++] = t->offset + rng_u64(&rs) % t->size;
            if (t->layer < 0 && (t->kind == P_WTE || t->kind == P_HEAD)) {  // not layer kinds of the same number
                for (int k = 0; k < 8; k++) idx[n++] = t->offset + (size_t)m->inputs[k] * t->cols + k % t->cols;
                for (int k = 0; k < 4; k++)
                    idx[n++] = t->offset + (size_t)(m->c.vocab + k) * t->cols + k;  // padded rows: 0
            }
        }
        if (t->layer >= 0)
            snprintf(name, sizeof(name), "model/%s/grad/layer%d.%s (%zu of %zu)", arch, t->layer, t->name, n, t->size);
        else snprintf(name, sizeof(name), "model/%s/grad/%s (%zu of %zu)", arch, t->name, n, t->size);
        check_err(name, fd_err_idx(ref_model_loss, &r, r.p, idx, n, m->grads), TOL_MODEL_GRAD);
    }
    // padded vocabulary rows never get a gradient
    int pad_zero = 1;
    for (int i = 0; i < m->P.n; i++) {
        const Tensor* t = &m->P.t[i];
        if (t->layer >= 0 || (t->kind != P_WTE && t->kind != P_HEAD)) continue;
        for (size_t k = (size_t)m->c.vocab * t->cols; k < t->size; k++) pad_zero &= m->grads[t->offset + k] == 0.0f;
    }
    snprintf(name, sizeof(name), "model/%s/padded vocabulary rows get exactly 0 gradient", arch);
    check(pad_zero, name, NULL);
    free(idx), free(r.p);
}

// Recomputation, the schedule and the micro-batch split must not change the gradient on
// 1 rank: recompute and gpipe/1f1b bitwise (same operations in the same order); one
// micro-batch of 4 vs two of 2 only to rounding (the sums are ordered differently).
static void test_model_variants(const char* arch, const char* base) {
    char flags[512], name[160];
    snprintf(flags, sizeof(flags), "%s --recompute none", base);
    Model* ref = new_model(flags);
    randomize_params(ref, 3), random_batch(ref, 4);
    double loss0 = model_loss_and_grads(ref);
    const char* variants[] = {"--recompute selective", "--recompute full", "--schedule gpipe"};
    for (int v = 0; v < 3; v++) {
        snprintf(flags, sizeof(flags), "%s %s", base, variants[v]);
        Model* m = new_model(flags);
        randomize_params(m, 3), random_batch(m, 4);
        double loss = model_loss_and_grads(m);
        snprintf(name, sizeof(name), "model/%s/%s: loss and gradients bitwise equal to recompute none / 1f1b", arch,
                 variants[v]);
        check(loss == loss0 && !memcmp(m->grads, ref->grads, sizeof(float) * m->P.n_local), name, "loss %.9g vs %.9g",
              loss, loss0);
    }
#ifdef _OPENMP
    // the kernels claim results independent of the thread count: the whole step, bitwise
    int nt = omp_get_max_threads();
    omp_set_num_threads(2);
    double loss2 = model_loss_and_grads(ref);
    float* g2 = copy_f(ref->grads, ref->P.n_local);
    omp_set_num_threads(1);
    double loss1 = model_loss_and_grads(ref);
    omp_set_num_threads(nt);
    snprintf(name, sizeof(name), "model/%s/loss and gradients bitwise equal on 1 and 2 threads", arch);
    check(loss1 == loss2 && loss1 == loss0 && !memcmp(g2, ref->grads, sizeof(float) * ref->P.n_local), name,
          "loss %.9g vs %.9g", loss1, loss2);
    free(g2);
#endif
    // one micro-batch of 4 sequences instead of two of 2
    const char* one = "--micro-batch 4 --global-batch 4";
    char kept[256];
    snprintf(flags, sizeof(flags), "%s %s", flags_but(base, one, kept, sizeof(kept)), one);  // (each flag once)
    Model* m = new_model(flags);
    randomize_params(m, 3);
    memcpy(m->inputs, ref->inputs, sizeof(int) * 4 * m->T), memcpy(m->targets, ref->targets, sizeof(int) * 4 * m->T);
    double loss = model_loss_and_grads(m);
    double* g = to_double(ref->grads, ref->P.n_local);
    snprintf(name, sizeof(name), "model/%s/1 micro-batch of 4 = 2 micro-batches of 2 (grads)", arch);
    check_err(name, rel_err(m->grads, g, m->P.n_local), 1e-5);
    snprintf(name, sizeof(name), "model/%s/1 micro-batch of 4 = 2 micro-batches of 2 (loss)", arch);
    check_err(name, fabs(loss - loss0) / loss0, 1e-6);
    free(g);
    // evaluate() on a stream holding exactly this batch gives the training forward's loss
    TokenStream ts;
    memset(&ts, 0, sizeof(ts));
    ts.n_tokens = (size_t)4 * m->T + 1;
    ts.tokens = (int*)xmalloc(sizeof(int) * ts.n_tokens);
    for (size_t i = 0; i < ts.n_tokens; i++) ts.tokens[i] = (int)((i * 7919) % m->c.vocab);
    load_batch(&ts, &m->c, m->L.dp_rank, m->n_micro, 0, m->pos, m->T, m->inputs, m->targets, NULL, NULL);
    double train_loss = model_loss_and_grads(m);
    double eval_loss = 0;
    evaluate(m, &ts, 1, &eval_loss);
    snprintf(name, sizeof(name), "model/%s/evaluate() loss equals the training forward loss", arch);
    check(eval_loss == train_loss, name, "%.9g vs %.9g", eval_loss, train_loss);
    free(ts.tokens);
}

#define GPT2_TINY "--model tiny --n-layer 2 --n-head 2 --d-model 16 --seq-len 8 --micro-batch 2 --global-batch 4"
#define LLAMA_TINY \
    "--model llama-tiny --n-layer 2 --n-head 4 --n-kv-head 2 --d-model 16 --d-ff 32 --seq-len 8 --micro-batch 2 " \
    "--global-batch 4"

static void test_model(void) {
    test_model_grads("gpt2", GPT2_TINY);
    test_model_grads("llama", LLAMA_TINY);
    test_model_grads("llama rope-theta 500000", LLAMA_TINY " --rope-theta 500000");  // Llama 3's base
    test_model_variants("gpt2", GPT2_TINY);
    test_model_variants("llama", LLAMA_TINY);
}

// ----------------------------------------------------------------------------
// 3. AdamW against explicit formulas; 4. the learning-rate schedule.

static void test_adamw(void) {
    enum { n = 4 };
    float p0[n] = {0.5f, -1.0f, 2.0f, 0.0f}, g1[n] = {0.1f, -0.2f, 0.3f, -0.05f}, g2[n] = {-0.3f, 0.1f, 0.2f, 0.4f};
    float lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    for (int decay = 0; decay <= 1; decay++) {
        float p[n], m[n] = {0}, v[n] = {0};
        memcpy(p, p0, sizeof(p));
        double P[n], M[n] = {0}, V[n] = {0};
        for (int i = 0; i < n; i++) P[i] = p0[i];
        double err_t1 = 0, err_t2 = 0, err_sign = 0;
        for (int t = 1; t <= 2; t++) {
            const float* g = t == 1 ? g1 : g2;
            adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, decay, gs, t);
            for (int i = 0; i < n; i++) {  // the explicit step
                double gg = (double)g[i] * gs;
                M[i] = b1 * M[i] + (1 - (double)b1) * gg;
                V[i] = b2 * V[i] + (1 - (double)b2) * gg * gg;
                double mhat = M[i] / (1 - pow(b1, t)), vhat = V[i] / (1 - pow(b2, t));
                double before = P[i];
                P[i] -= lr * (mhat / (sqrt(vhat) + eps) + (decay ? wd : 0) * P[i]);
                if (t == 1) {  // the first step has |mhat| = sqrt(vhat): a step of lr * sign(g) plus decay
                    double sgn = gg > 0 ? 1 : -1;
                    err_sign = fmax(err_sign, fabs(p[i] - (before - lr * (sgn + (decay ? wd : 0) * before))));
                }
                double e = fmax(fabs(p[i] - P[i]), fmax(fabs(m[i] - M[i]) / fmax(fabs(M[i]), 1e-12),
                                                        fabs(v[i] - V[i]) / fmax(fabs(V[i]), 1e-12)));
                if (t == 1) err_t1 = fmax(err_t1, e); else err_t2 = fmax(err_t2, e);
            }
        }
        char name[96];
        snprintf(name, sizeof(name), "adamw/t=1 %s decay, grad_scale 0.5 (param, m, v)", decay ? "with" : "without");
        check_err(name, err_t1, 1e-6);
        snprintf(name, sizeof(name), "adamw/t=2 %s decay, grad_scale 0.5 (param, m, v)", decay ? "with" : "without");
        check_err(name, err_t2, 1e-6);
        snprintf(name, sizeof(name), "adamw/t=1 %s decay is a step of lr*sign(g)", decay ? "with" : "without");
        check_err(name, err_sign, 1e-6);
    }
}

static void test_lr(void) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.lr = 1e-3f, c.warmup = 10, c.steps = 110, c.min_lr_frac = 0.1f;
    struct { int step; double want; const char* what; } cases[] = {
        {0, 1e-4, "warmup first step lr/10"}, {4, 5e-4, "warmup linear"}, {9, 1e-3, "warmup last step = lr"},
        {10, 1e-3, "cosine start = lr"}, {60, 5.5e-4, "cosine midpoint (lr+min)/2"},
        {35, 1e-4 + 0.5 * 9e-4 * (1 + cos(M_PI * 0.25)), "cosine quarter"}, {110, 1e-4, "cosine end = lr*min_lr_frac"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[96];
        snprintf(name, sizeof(name), "lr_at/step %d: %s", cases[i].step, cases[i].what);
        double got = lr_at(&c, cases[i].step);
        check(fabs(got - cases[i].want) <= 1e-6 * cases[i].want, name, "%.8g (want %.8g)", got, cases[i].want);
    }
    float prev = 1e9f;
    int mono = 1;
    for (int s = 10; s < 110; s++) { float l = lr_at(&c, s); mono &= l <= prev; prev = l; }
    check(mono, "lr_at/non-increasing after warmup", NULL);
    c.steps = 5;  // steps <= warmup: warmup then constant
    check(fabs(lr_at(&c, 20) - 1e-3) < 1e-9, "lr_at/steps <= warmup: constant lr after warmup", "%g", lr_at(&c, 20));
    c.warmup = 0, c.steps = 100;
    check(fabs(lr_at(&c, 0) - 1e-3) < 1e-9, "lr_at/no warmup: starts at lr", "%g", lr_at(&c, 0));
}

// ----------------------------------------------------------------------------
// Child processes for the paths that end in fail().

typedef void (*ChildFn)(void* ctx);
// Run fn(ctx) in a child with stdout discarded; returns its exit status (128 + signal if
// it was killed, 0 if fn returned) and its stderr in err.
static int run_child(ChildFn fn, void* ctx, char* err, size_t n) {
    int fd[2];
    if (pipe(fd)) fail("pipe: %s", strerror(errno));
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) fail("fork: %s", strerror(errno));
    if (pid == 0) {
#ifdef _OPENMP
        omp_set_num_threads(1);  // the parent's OpenMP thread pool does not exist in the child
#endif
        close(fd[0]);
        dup2(fd[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(99);
        fn(ctx);
        fflush(stdout), fflush(stderr);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    while ((k = read(fd[0], err + got, n - 1 - got)) > 0) got += (size_t)k;
    err[got] = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
// The child must exit with status 1 and print one error line that contains `file` (the
// file at fault, if given) and `want` (the reason).
static void check_fails_in(const char* name, ChildFn fn, void* ctx, const char* file, const char* want) {
    char err[4096];
    int st = run_child(fn, ctx, err, sizeof(err));
    char* nl = strchr(err, '\n');
    if (nl) *nl = 0;
    int ok = st == 1 && !strncmp(err, "error: ", 7) && (!file || strstr(err, file)) && (!want || strstr(err, want));
    if (ok) check(1, name, "exit 1, \"%.300s\"", err);
    else
        check(0, name, "exit %d, stderr \"%.300s\", want \"%s\"%s%s", st, err, want ? want : "", file ? " naming " : "",
              file ? file : "");
}
static void check_fails(const char* name, ChildFn fn, void* ctx, const char* want) {
    check_fails_in(name, fn, ctx, NULL, want);
}

// Redirect stdout to /dev/null around calls that print progress lines (checkpoints).
static int saved_stdout = -1;
static void quiet_begin(void) {
    fflush(stdout);
    saved_stdout = dup(1);
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1), close(fd);
}
static void quiet_end(void) {
    fflush(stdout);
    dup2(saved_stdout, 1), close(saved_stdout);
}

// ----------------------------------------------------------------------------
// 5. Training learns; non-finite losses are caught.

static void test_training(void) {
    Model* m = new_model("--model tiny --micro-batch 8 --steps 30 --warmup 5 --lr 3e-3");
    TokenStream ts;
    make_builtin_corpus(&ts, 200000, 42);
    double t0 = now_s(), first = 0, last = 0;
    int finite = 1;
    for (int step = 0; step < 30; step++) {
        StepResult r = train_step(m, &ts, step);
        finite &= isfinite(r.loss) && isfinite(r.grad_norm) && !r.skipped;
        if (step == 0) first = r.loss;
        if (step >= 27) last += r.loss / 3;  // mean of the last three
    }
    check(finite, "train/30 steps: finite loss and gradient norm, no skipped step", NULL);
    check(fabs(first - log(257.0)) < 0.1, "train/initial loss near ln(257) = 5.549", "%.4f", first);
    check(last < first - 0.5, "train/loss falls by > 0.5 in 30 steps", "%.4f -> %.4f (%.1f s)", first, last,
          now_s() - t0);
}

// The split backward (model.h): each layer's weight pass right after its input pass, or
// every input pass of a chunk before any weight pass (--weight-pass deferred, the order a
// zero-bubble schedule needs), give the same gradients and the same update bit for bit:
// every gradient tensor still takes its one += per micro-batch in the same order.
static void test_split_backward(void) {
    const char* cases[] = {GPT2_TINY, LLAMA_TINY, GPT2_TINY " --recompute selective",
                           LLAMA_TINY " --recompute selective"};
    const char* names[] = {"gpt2", "llama", "gpt2 selective", "llama selective"};
    TokenStream ts;
    make_builtin_corpus(&ts, 20000, 3);
    for (int k = 0; k < 4; k++) {
        char flags[512];
        Model* a = new_model(cases[k]);
        snprintf(flags, sizeof(flags), "%s --weight-pass deferred", cases[k]);
        Model* b = new_model(flags);
        randomize_params(a, 7), randomize_params(b, 7);
        int same = 1;
        for (int step = 0; step < 2; step++) {
            train_step(a, &ts, step), train_step(b, &ts, step);
            for (size_t i = 0; i < a->P.n_local; i++)
                same &= a->grads[i] == b->grads[i] && a->params[i] == b->params[i];
        }
        char name[96];
        snprintf(name, sizeof(name), "split backward/%s: deferred weight passes = immediate, bitwise", names[k]);
        check(same && b->defer_weight && b->chunks[0].wg.n == 1 && !b->chunks[0].slots[0].weight_grad_in, name,
              NULL);  // one set of W inputs, given back
    }
}

typedef struct { Model* m; TokenStream* ts; } NanCtx;
static void nan_stop_child(void* p) {
    NanCtx* c = (NanCtx*)p;
    c->m->args->on_nan_skip = 0;
    c->m->w.lnfw[0] = NAN;  // every logit reads channel 0 of the final norm
    train_step(c->m, c->ts, 0);
}
static void huge_lr_child(void* p) {
    NanCtx* c = (NanCtx*)p;
    c->m->args->on_nan_skip = 0;
    c->m->c.lr = 1e30f, c->m->c.warmup = 0;
    for (int step = 0; step < 10; step++) train_step(c->m, c->ts, step);
}

static void test_nonfinite(void) {
    TokenStream ts;
    make_builtin_corpus(&ts, 20000, 1);
    Model* m = new_model(GPT2_TINY);
    NanCtx ctx = {m, &ts};
    check_fails("train/NaN in params with --on-nan stop: exits 1", nan_stop_child, &ctx, "not finite (--on-nan stop)");
    check_fails("train/lr 1e30 with --on-nan stop: exits 1", huge_lr_child, &ctx, "not finite");
    // --on-nan skip: the step is skipped and nothing is updated
    m->args->on_nan_skip = 1;
    m->w.lnfw[0] = NAN;
    float* p = copy_f(m->params, m->P.n_local);
    float* mv = copy_f(m->m_state, m->opt_hi - m->opt_lo);
    StepResult r = train_step(m, &ts, 0);
    check(r.skipped && !isfinite(r.loss), "train/NaN with --on-nan skip: step skipped", "skipped %d loss %g", r.skipped,
          r.loss);
    check(!memcmp(p, m->params, sizeof(float) * m->P.n_local) &&
              !memcmp(mv, m->m_state, sizeof(float) * (m->opt_hi - m->opt_lo)),
          "train/skipped step leaves params and AdamW state unchanged", NULL);
    m->w.lnfw[0] = 1.0f;
    r = train_step(m, &ts, 1);
    check(!r.skipped && isfinite(r.loss), "train/after the NaN is gone the next step runs", "loss %g", r.loss);
    free(p), free(mv);
}
