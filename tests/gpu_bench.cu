// tests/gpu_bench.cu: test_gpu's timing of the kernels that dominate a step (informational),
// on random inputs (fill_random: bf16 matmuls run about 13% faster on zeros on an H200).
// Included by tests/test_gpu.cu after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// Timing of the kernels that dominate a step, at GPT-2 124M sizes (informational).

// Uniform [-scale, scale) bf16 from a hash of (seed, index): random data on the device
// without a host copy (bf16 matmuls run faster on zeros; so may attention).
__global__ void fill_random_kernel(bf16* x, size_t n, uint32_t seed, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 2246822519u ^ (uint32_t)(i >> 32);
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    x[i] = f2bf(scale * ((h >> 8) * (2.0f / 16777216.0f) - 1.0f));
}
static void fill_random(bf16* x, size_t n, uint32_t seed, float scale) {
    if (n) fill_random_kernel<<<cdiv(n, 256), 256, 0, st>>>(x, n, seed, scale);
    launchCheck();
}

static float time_ms(void (*fn)(void*), void* arg, int reps) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    fn(arg);  // warm-up
    cudaCheck(cudaEventRecord(e0, st));
    for (int i = 0; i < reps; i++) fn(arg);
    cudaCheck(cudaEventRecord(e1, st));
    cudaCheck(cudaEventSynchronize(e1));
    float ms;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return ms / reps;
}

typedef struct {
    bf16 *x, *w, *b, *y, *qkv, *out, *dout, *dqkv, *logits, *resid;
    float *dw, *lse, *mean, *rstd, *maxes, *stats, *sums, *losses;
    int *targets;
    int N, IC, OC, B, T, H, KV, hd, V;
} BenchArgs;
static void bench_mm_fwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_forward_gpu(a->y, a->x, a->w, a->b, a->N, a->IC, a->OC, st);
}
static void bench_mm_bwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_backward_gpu(a->x, a->dw, NULL, a->y, a->x, a->w, a->N, a->IC, a->OC, 0, st);
}
// fc + GELU of the 124M MLP (x N x 768 -> y N x 3072, pre-GELU in out), fused or as matmul + kernel;
// then the fc projection's input gradient through GELU (dout N x 768 -> N x 3072).
static void bench_fc_gelu_fused(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    if (!matmul_gelu_forward_gpu(a->y, a->out, a->x, a->w, a->b, a->N, a->IC, a->OC, st))
        fail("bench: no fused GELU algorithm");
}
static void bench_fc_gelu_split(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_forward_gpu(a->out, a->x, a->w, a->b, a->N, a->IC, a->OC, st);
    gelu_forward_gpu(a->y, a->out, (size_t)a->N * a->OC, st);
}
static void bench_dgelu_fused(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    if (!matmul_dgelu_backward_gpu(a->y, a->x, a->w, a->out, a->N, a->OC, a->IC, st))
        fail("bench: no fused DGELU algorithm");
}
static void bench_dgelu_split(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    matmul_backward_gpu(a->dout, NULL, NULL, a->x, NULL, a->w, a->N, a->OC, a->IC, 0, st);
    gelu_backward_gpu(a->y, a->out, a->dout, (size_t)a->N * a->OC, 0, st);
}
static void bench_att_fwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    attention_forward_gpu(a->out, a->lse, a->qkv, a->B, a->T, a->H, a->KV, a->hd, NULL, st);
}
static void bench_att_bwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    attention_buffers_reserve(a->B, a->T, a->H, a->KV, a->hd);  // allocates at the warm-up call only
    attention_backward_gpu(a->dqkv, a->dout, a->qkv, a->out, a->lse, a->B, a->T, a->H, a->KV, a->hd, NULL, st);
}
// The memory-bound kernels at 124M sizes (N = 8 x 1024 tokens): x is N x 3072, y N x 3072.
static void bench_gelu_fwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    gelu_forward_gpu(a->y, a->x, (size_t)a->N * 3072, st);
}
static void bench_gelu_bwd(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    gelu_backward_gpu(a->y, a->x, a->y, (size_t)a->N * 3072, 0, st);
}
static void bench_resid_ln(void* p) {
    BenchArgs* a = (BenchArgs*)p;
    residual_layernorm_forward_gpu(a->resid, a->out, a->mean, a->rstd, a->x, a->y, a->w, a->b, a->N, 768, st);
}
static void bench_ce(void* p) {  // a tp-1 cross-entropy (two passes over the logits N x V, in place)
    BenchArgs* a = (BenchArgs*)p;
    crossentropy_local_max_gpu(a->maxes, a->stats, a->logits, a->N, a->V, 0, a->V, st);
    crossentropy_local_sums_gpu(a->sums, a->stats, a->maxes, a->logits, a->targets, a->N, a->V, 0, st);
    crossentropy_finish_gpu(a->losses, a->logits, a->maxes, a->sums, a->targets, a->N, a->V, 0, a->V, 1.0f, st);
}

// Context parallelism's blocks (ring rank 0 of a zig-zag cp 4 split of one T = 8192
// sequence, 12 heads of 64: 2048 query rows) step by step, each step one launch, against the whole-sequence
// kernels on the sequence (the same work as the 4 ranks' blocks together). FLOPs count the
// visible (query, key) pairs only: 4 hd per pair and head forward, 2.5 times that backward.
typedef struct {
    AttnBlock blk[4];
    int n;
    const bf16 *q, *kv, *out, *dout;
    float *o, *lse, *dq, *dkv;
} BlockBench;
static void bench_blocks_fwd(void* p) {
    BlockBench* b = (BlockBench*)p;
    attention_step_forward_gpu(b->o, b->lse, b->q, b->kv, b->blk, b->n, st);
}
static void bench_blocks_bwd(void* p) {
    BlockBench* b = (BlockBench*)p;
    attention_step_backward_gpu(b->dq, b->dkv, b->q, b->kv, b->dout, b->out, b->lse, b->blk, b->n, st);
}
static double block_pairs(const AttnBlock* a) {  // (query, key) pairs where the key is seen
    double n = 0;
    for (int i = 0; i < a->nq; i++) {
        int k = a->q_pos + i - a->k_pos + 1;
        n += k < 0 ? 0 : k > a->nk ? a->nk : k;
    }
    return n;
}
static void bench_blocks(void) {
    int T = 8192, R = 4, H = 12, hd = 64, c = T / (2 * R), Ts = 2 * c, q_ld = 3 * H * hd, kv_ld = 2 * H * hd;
    BlockBench b;
    bf16* q = (bf16*)dbuf(2 * (size_t)Ts * q_ld);
    bf16* kv = (bf16*)dbuf(2 * (size_t)Ts * kv_ld);
    b.q = q, b.out = (bf16*)dbuf(2 * (size_t)Ts * H * hd), b.dout = (bf16*)dbuf(2 * (size_t)Ts * H * hd);
    b.o = (float*)dbuf(4 * (size_t)Ts * H * hd), b.lse = (float*)dbuf(4 * (size_t)Ts * H);
    b.dq = (float*)dbuf(4 * (size_t)Ts * H * hd), b.dkv = (float*)dbuf(4 * (size_t)Ts * kv_ld);
    attention_buffers_reserve(1, Ts, H, H, hd);
    fill_random(q, (size_t)Ts * q_ld, 7, 2.0f), fill_random(kv, (size_t)Ts * kv_ld, 8, 2.0f);
    fill_random((bf16*)b.out, (size_t)Ts * H * hd, 9, 1.0f), fill_random((bf16*)b.dout, (size_t)Ts * H * hd, 10, 1.0f);
    double ms_f = 0, ms_b = 0, all_pairs = 0;
    for (int step = 0; step < R; step++) {
        b.n = zigzag_step_blocks(R, 0, c, step, b.blk);
        b.kv = step == 0 ? q + H * hd : kv;
        double pairs = 0;
        for (int i = 0; i < b.n; i++) {
            AttnBlock* a = &b.blk[i];
            a->B = 1, a->Ts = Ts, a->Ha = H, a->KVa = H, a->hd = hd, a->q_ld = q_ld,
            a->kv_ld = step == 0 ? q_ld : kv_ld;
            pairs += block_pairs(a);
        }
        double fl = 4.0 * hd * H * pairs;
        float tf = time_ms(bench_blocks_fwd, &b, 10), tb = time_ms(bench_blocks_bwd, &b, 10);
        printf(
            "bench attention blocks cp=4 zig-zag T=%d H=%d hd=%d, ring rank 0 step %d (%d blocks): forward %7.3f ms "
            "%6.1f TFLOP/s, "
            "backward %7.3f ms %6.1f TFLOP/s\n",
            T, H, hd, step, b.n, tf, fl / tf / 1e9, tb, 2.5 * fl / tb / 1e9);
        ms_f += tf, ms_b += tb, all_pairs += pairs;
    }
    BenchArgs w;
    memset(&w, 0, sizeof(w));
    w.B = 1, w.T = T, w.H = H, w.KV = H, w.hd = hd;
    w.qkv = (bf16*)dbuf(2 * (size_t)T * q_ld), w.dqkv = (bf16*)dbuf(2 * (size_t)T * q_ld);
    w.out = (bf16*)dbuf(2 * (size_t)T * H * hd), w.dout = (bf16*)dbuf(2 * (size_t)T * H * hd),
    w.lse = (float*)dbuf(4 * (size_t)T * H);
    fill_random(w.qkv, (size_t)T * q_ld, 11, 2.0f), fill_random(w.dout, (size_t)T * H * hd, 12, 1.0f);
    attention_forward_gpu(w.out, w.lse, w.qkv, 1, T, H, H, hd, NULL, st);  // valid lse for the backward
    double fl = 4.0 * hd * H * (double)T * (T + 1) / 2, fl_rank = 4.0 * hd * H * all_pairs;
    float tf = time_ms(bench_att_fwd, &w, 10), tb = time_ms(bench_att_bwd, &w, 10);
    printf(
        "bench attention blocks cp=4 ring rank 0, its 4 steps: forward %7.3f ms %6.1f TFLOP/s, backward %7.3f ms %6.1f "
        "TFLOP/s "
        "(%.3f of the sequence's work)\n",
        ms_f, fl_rank / ms_f / 1e9, ms_b, 2.5 * fl_rank / ms_b / 1e9, fl_rank / fl);
    printf(
        "bench attention whole sequence T=%d H=%d hd=%d (cp=1):   forward %7.3f ms %6.1f TFLOP/s, backward %7.3f ms "
        "%6.1f TFLOP/s\n",
        T, H, hd, tf, fl / tf / 1e9, tb, 2.5 * fl / tb / 1e9);
    free_all();
}

static void bench(void) {
    BenchArgs a;
    memset(&a, 0, sizeof(a));
    a.N = 8 * 1024, a.IC = 768, a.OC = 3072;  // the GPT-2 124M fc layer at 8 x 1024 tokens
    a.x = (bf16*)dbuf(2 * (size_t)a.N * a.IC), a.w = (bf16*)dbuf(2 * (size_t)a.OC * a.IC), a.b = (bf16*)dbuf(2 * a.OC);
    a.y = (bf16*)dbuf(2 * (size_t)a.N * a.OC), a.dw = (float*)dbuf(4 * (size_t)a.OC * a.IC);
    fill_random(a.x, (size_t)a.N * a.IC, 1, 1.0f), fill_random(a.w, (size_t)a.OC * a.IC, 2, 0.05f);
    fill_random(a.b, a.OC, 3, 0.1f), fill_random(a.y, (size_t)a.N * a.OC, 4, 1.0f);  // y: the backward's dout
    double mm = 2.0 * a.N * a.IC * a.OC;
    float t = time_ms(bench_mm_fwd, &a, 20);
    printf("bench matmul_forward  N=%d IC=%d OC=%d: %8.3f ms  %6.1f TFLOP/s\n", a.N, a.IC, a.OC, t, mm / t / 1e9);
    t = time_ms(bench_mm_bwd, &a, 20);
    printf("bench matmul_backward N=%d IC=%d OC=%d: %8.3f ms  %6.1f TFLOP/s\n", a.N, a.IC, a.OC, t, 2 * mm / t / 1e9);
    a.out = (bf16*)dbuf(2 * (size_t)a.N * a.OC), a.dout = (bf16*)dbuf(2 * (size_t)a.N * a.OC);
    if (matmul_gelu_forward_gpu(a.y, a.out, a.x, a.w, a.b, a.N, a.IC, a.OC, st) &&
        matmul_dgelu_backward_gpu(a.y, a.x, a.w, a.out, a.N, a.OC, a.IC, st)) {
        float tf = time_ms(bench_fc_gelu_fused, &a, 20), ts = time_ms(bench_fc_gelu_split, &a, 20);
        printf("bench fc+gelu forward  fused %.3f ms, matmul + kernel %.3f ms: %.2fx\n", tf, ts, ts / tf);
        tf = time_ms(bench_dgelu_fused, &a, 20), ts = time_ms(bench_dgelu_split, &a, 20);
        printf("bench dgelu dinp       fused %.3f ms, matmul + kernel %.3f ms: %.2fx\n", tf, ts, ts / tf);
    } else {
        printf("bench fc+gelu: no fused cuBLASLt algorithm at N=%d IC=%d OC=%d\n", a.N, a.IC, a.OC);
    }
    a.B = 8, a.T = 1024, a.H = 12, a.KV = 12, a.hd = 64;
    size_t rows = (size_t)a.B * a.T;
    a.qkv = (bf16*)dbuf(2 * rows * (a.H + 2 * a.KV) * a.hd), a.dqkv = (bf16*)dbuf(2 * rows * (a.H + 2 * a.KV) * a.hd);
    a.out = (bf16*)dbuf(2 * rows * a.H * a.hd), a.dout = (bf16*)dbuf(2 * rows * a.H * a.hd);
    a.lse = (float*)dbuf(4 * rows * a.H);
    fill_random(a.qkv, rows * (a.H + 2 * a.KV) * a.hd, 5, 2.0f), fill_random(a.dout, rows * a.H * a.hd, 6, 1.0f);
    attention_forward_gpu(a.out, a.lse, a.qkv, a.B, a.T, a.H, a.KV, a.hd, NULL, st);  // valid lse for the backward
    double att = 2.0 * 2.0 * a.B * a.H * (double)a.T * a.T / 2 * a.hd;  // causal: half of QK^T and PV
    t = time_ms(bench_att_fwd, &a, 5);  // the default tiles (test_gpu --att-sweep times them all)
    printf("bench attention_forward  B=%d T=%d H=%d hd=%d tile=%s: %8.3f ms  %6.1f TFLOP/s\n", a.B, a.T, a.H, a.hd,
           attention_fwd_tile(a.hd)->name, t, att / t / 1e9);
    t = time_ms(bench_att_bwd, &a, 5);
    printf("bench attention_backward B=%d T=%d H=%d hd=%d tile=%s: %8.3f ms  %6.1f TFLOP/s\n", a.B, a.T, a.H, a.hd,
           attention_bwd_tile(a.hd)->name, t, 2.5 * att / t / 1e9);
    free_all();
    bench_blocks();

    // Memory-bound kernels: GB/s of the bytes each must move at least (reads + writes once).
    memset(&a, 0, sizeof(a));
    a.N = 8 * 1024, a.V = 50304;
    size_t nf = (size_t)a.N * 3072, nc = (size_t)a.N * 768, nl = (size_t)a.N * a.V;
    a.x = (bf16*)dbuf(2 * nf), a.y = (bf16*)dbuf(2 * nf), a.w = (bf16*)dbuf(2 * 768), a.b = (bf16*)dbuf(2 * 768);
    a.resid = (bf16*)dbuf(2 * nc), a.out = (bf16*)dbuf(2 * nc);
    a.mean = (float*)dbuf(4 * (size_t)a.N), a.rstd = (float*)dbuf(4 * (size_t)a.N);
    a.logits = (bf16*)dbuf(2 * nl), a.maxes = (float*)dbuf(4 * (size_t)a.N), a.sums = (float*)dbuf(8 * (size_t)a.N);
    a.stats = (float*)dbuf(8 * (size_t)a.N);
    a.losses = (float*)dbuf(4 * (size_t)a.N), a.targets = (int*)dbuf(4 * (size_t)a.N);  // zeros: token 0
    fill_random(a.x, nf, 13, 2.0f), fill_random(a.resid, nc, 14, 1.0f), fill_random(a.out, nc, 15, 1.0f);
    fill_random(a.w, 768, 16, 1.0f), fill_random(a.b, 768, 17, 0.1f), fill_random(a.logits, nl, 18, 4.0f);
    t = time_ms(bench_gelu_fwd, &a, 20);
    printf("bench gelu_forward    N=%d C=3072: %8.3f ms  %6.0f GB/s\n", a.N, t, 4.0 * nf / t / 1e6);
    t = time_ms(bench_gelu_bwd, &a, 20);
    printf("bench gelu_backward   N=%d C=3072: %8.3f ms  %6.0f GB/s\n", a.N, t, 6.0 * nf / t / 1e6);
    t = time_ms(bench_resid_ln, &a, 20);
    printf("bench residual_layernorm N=%d C=768: %8.3f ms  %6.0f GB/s\n", a.N, t, 8.0 * nc / t / 1e6);
    t = time_ms(bench_ce, &a, 5);  // the logits become gradients in place; their values do not matter for the time
    printf("bench crossentropy    N=%d V=%d: %8.3f ms  %6.0f GB/s (2 reads + 1 write of the logits)\n", a.N, a.V, t,
           6.0 * nl / t / 1e6);
    free_all();
}
