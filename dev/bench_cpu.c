// dev/bench_cpu.c: CPU benchmark (make bench). For a training step of the gpt2-124m shape
// (micro-batch 4, sequence 64, one rank) and of the default `small` model it prints:
//   - ms/step, achieved GFLOP/s (the PaLM count 6N + 12*L*d*T per token, as the trainer's
//     MFU) and the fraction of this machine's fp32 peak, measured with an FMA loop in the
//     same run;
//   - where the step's time goes: every kernel the step calls is timed (the wrappers
//     below replace them in train_gpt.c), grouped as matmul forward, matmul input gradient,
//     matmul weight gradient, attention, norms, element-wise, cross-entropy and optimizer
//     (with the gradient norm's sum of squares), each with its share of the step and its
//     GFLOP/s (compute-bound kernels) or GB/s (memory-bound ones: the bytes each must read
//     and write once); "other" is what no kernel accounts for (zeroing the gradients,
//     copies, the schedule's bookkeeping);
//   - the matmuls alone at the step's shapes (forward, input gradient, weight gradient of
//     every layer matmul and the head) as a fraction of the peak.
// The machine may be shared: the CPU time other processes used during each measurement
// is printed with it ("other processes: 0.02 cores"), so a figure taken under load shows
// as such.
#include "backend/cpu/kernels_cpu.h"
#include <sys/resource.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// Per-operation timers: wrappers around the kernels, swapped in for train_gpt.c's calls by
// the #defines below (train_gpt.c's own #include of kernels_cpu.h is then a no-op).

enum { OP_MATMUL_FWD, OP_MATMUL_BWD_INPUT, OP_MATMUL_BWD_WEIGHT, OP_ATTENTION, OP_NORMS, OP_ELEMENTWISE,
       OP_CROSSENTROPY, OP_OPTIMIZER, N_OPS };
static const char* op_names[N_OPS] = {"matmul forward", "matmul input gradient", "matmul weight gradient", "attention",
                                      "norms", "element-wise", "cross-entropy", "optimizer (AdamW) + gradient norm"};
static const int op_is_flops[N_OPS] = {1, 1, 1, 1, 0, 0, 0, 0};  // else the work counted is bytes
typedef struct { double seconds, work; } OpTotal;
static OpTotal op_totals[N_OPS];

#define TIMED(op, work_amount, call)                                \
    do {                                                            \
        double t0_ = now_s();                                       \
        call;                                                       \
        op_totals[op].seconds += now_s() - t0_;                     \
        op_totals[op].work += (double)(work_amount);                \
    } while (0)

static void timed_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                                 int OC) {
    TIMED(OP_MATMUL_FWD, 2.0 * N * IC * OC, matmul_forward(out, inp, weight, bias, N, IC, OC));
}
static void timed_matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int IC, int OC,
                                        int acc) {
    TIMED(OP_MATMUL_BWD_INPUT, 2.0 * N * IC * OC, matmul_backward_input(dinp, dout, weight, N, IC, OC, acc));
}
static void timed_matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N,
                                         int IC, int OC) {
    TIMED(OP_MATMUL_BWD_WEIGHT, 2.0 * N * IC * OC, matmul_backward_weight(dweight, dbias, dout, inp, N, IC, OC));
}
// Attention FLOPs as the PaLM count: QK^T and AV over the full T x T, 2 * 2 * B*T*T*H*hd
// forward, twice that backward.
static void timed_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int KV, int hd,
                                    const int* doc) {
    TIMED(OP_ATTENTION, 4.0 * B * T * T * H * hd, attention_forward(out, lse, qkv, B, T, H, KV, hd, doc));
}
static void timed_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                     const float* lse, int B, int T, int H, int KV, int hd, const int* doc) {
    TIMED(OP_ATTENTION, 8.0 * B * T * T * H * hd, attention_backward(dqkv, dout, qkv, out, lse, B, T, H, KV, hd, doc));
}
// Blocks (context parallelism's ring, cp > 1): the pairs a block's queries see, counted alike.
static void timed_attention_block_forward(float* o, int o_ld, float* lse, const float* q, const float* kv,
                                          const AttnBlock* a) {
    TIMED(OP_ATTENTION, 4.0 * a->B * a->nq * a->nk * a->Ha * a->hd, attention_block_forward(o, o_ld, lse, q, kv, a));
}
static void timed_attention_block_backward(float* dq, int dq_ld, float* dkv, int dkv_ld, const float* q,
                                           const float* kv, const float* dout, const float* out, int o_ld,
                                           const float* lse, const AttnBlock* a) {
    TIMED(OP_ATTENTION, 8.0 * a->B * a->nq * a->nk * a->Ha * a->hd,
          attention_block_backward(dq, dq_ld, dkv, dkv_ld, q, kv, dout, out, o_ld, lse, a));
}
// Bytes: each array read once and each output written once (4 bytes a float).
static void timed_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, int N, int C) {
    TIMED(OP_NORMS, 8.0 * N * C, layernorm_forward(out, mean, rstd, inp, weight, bias, N, C));
}
// The residual + norm: a and b read, the sum and the output written; the backward: x, dout
// and dres read in the row passes, x and dout again in the column pass, dinp written.
static void timed_residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                                             const float* b, const float* rbias, const float* weight,
                                             const float* bias, int N, int C) {
    TIMED(OP_NORMS, 16.0 * N * C, residual_layernorm_forward(res, out, mean, rstd, a, b, rbias, weight, bias, N, C));
}
static void timed_residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                                           const float* rbias, const float* weight, int N, int C) {
    TIMED(OP_NORMS, 16.0 * N * C, residual_rmsnorm_forward(res, out, rstd, a, b, rbias, weight, N, C));
}
static void timed_layernorm_backward(float* dinp, const float* dres, float* dweight, float* dbias, const float* dout,
                                     const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                                     int C) {
    TIMED(OP_NORMS, 24.0 * N * C, layernorm_backward(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
}
static void timed_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C) {
    TIMED(OP_NORMS, 8.0 * N * C, rmsnorm_forward(out, rstd, inp, weight, N, C));
}
static void timed_rmsnorm_backward(float* dinp, const float* dres, float* dweight, const float* dout, const float* inp,
                                   const float* weight, const float* rstd, int N, int C) {
    TIMED(OP_NORMS, 24.0 * N * C, rmsnorm_backward(dinp, dres, dweight, dout, inp, weight, rstd, N, C));
}
static void timed_gelu_forward(float* out, const float* inp, size_t n) {
    TIMED(OP_ELEMENTWISE, 8.0 * n, gelu_forward(out, inp, n));
}
static void timed_gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    TIMED(OP_ELEMENTWISE, 16.0 * n, gelu_backward(dinp, inp, dout, n));
}
static void timed_swiglu_forward(float* out, const float* inp, int N, int F) {
    TIMED(OP_ELEMENTWISE, 12.0 * N * F, swiglu_forward(out, inp, N, F));
}
static void timed_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
    TIMED(OP_ELEMENTWISE, 28.0 * N * F, swiglu_backward(dinp, inp, dout, N, F));
}
static void timed_residual_forward(float* out, const float* a, const float* b, size_t n) {
    TIMED(OP_ELEMENTWISE, 12.0 * n, residual_forward(out, a, b, n));
}
static void timed_add_inplace(float* a, const float* b, size_t n) {
    TIMED(OP_ELEMENTWISE, 12.0 * n, add_inplace(a, b, n));
}
static void timed_add_bias(float* out, const float* bias, int N, int C) {
    TIMED(OP_ELEMENTWISE, 8.0 * N * C, add_bias(out, bias, N, C));
}
static void timed_column_dot_accumulate(float* acc, const float* a, const float* b, int N, int C) {
    TIMED(OP_ELEMENTWISE, (b ? 8.0 : 4.0) * N * C, column_dot_accumulate(acc, a, b, N, C));
}
static void timed_rope_apply(float* qkv, int N, const int* pos, int T, int stride, int n_heads, int hd, float theta,
                             float sign) {
    TIMED(OP_ELEMENTWISE, 8.0 * N * n_heads * hd, rope_apply(qkv, N, pos, T, stride, n_heads, hd, theta, sign));
}
static void timed_embedding_forward(float* out, const int* tokens, const float* wte, int N, int C, int vocab_start,
                                    int vocab_local) {
    TIMED(OP_ELEMENTWISE, 8.0 * N * C, embedding_forward(out, tokens, wte, N, C, vocab_start, vocab_local));
}
static void timed_embedding_backward(float* dwte, const int* tokens, const float* dout, int N, int C, int vocab_start,
                                     int vocab_local) {
    TIMED(OP_ELEMENTWISE, 12.0 * N * C, embedding_backward(dwte, tokens, dout, N, C, vocab_start, vocab_local));
}
static void timed_position_forward(float* out, const float* wpe, int N, int row0, const int* pos, int T, int C) {
    TIMED(OP_ELEMENTWISE, 12.0 * N * C, position_forward(out, wpe, N, row0, pos, T, C));
}
static void timed_position_backward(float* dwpe, const float* dout, int N, int row0, const int* pos, int T, int C) {
    TIMED(OP_ELEMENTWISE, 12.0 * N * C, position_backward(dwpe, dout, N, row0, pos, T, C));
}
static void timed_crossentropy_local_max(float* maxes, const float* logits, int N, int vocab_local, int vocab_start,
                                         int vocab) {
    TIMED(OP_CROSSENTROPY, 4.0 * N * vocab_local,
          crossentropy_local_max(maxes, logits, N, vocab_local, vocab_start, vocab));
}
static void timed_crossentropy_local_sums(float* sums, const float* logits, const float* maxes, const int* targets,
                                          int N, int vocab_local, int vocab_start, int vocab) {
    TIMED(OP_CROSSENTROPY, 4.0 * N * vocab_local,
          crossentropy_local_sums(sums, logits, maxes, targets, N, vocab_local, vocab_start, vocab));
}
static void timed_crossentropy_finish(float* losses, float* dlogits, const float* maxes, const float* sums,
                                      const int* targets, int N, int vocab_local, int vocab_start, int vocab,
                                      float dloss_scale) {
    TIMED(OP_CROSSENTROPY, (dlogits ? 8.0 : 0.0) * N * vocab_local,
          crossentropy_finish(losses, dlogits, maxes, sums, targets, N, vocab_local, vocab_start, vocab, dloss_scale));
}
static void timed_adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, int decay, float grad_scale, int t) {
    TIMED(OP_OPTIMIZER, 28.0 * n,
          adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, decay, grad_scale, t));
}
// the gradient norm (runtime/train.h grad_norm): reads the gradient once
static double timed_sum_squares(const float* x, size_t n) {
    double ss = 0;
    TIMED(OP_OPTIMIZER, 4.0 * n, ss = sum_squares(x, n));
    return ss;
}
#define matmul_forward timed_matmul_forward
#define matmul_backward_input timed_matmul_backward_input
#define matmul_backward_weight timed_matmul_backward_weight
#define attention_forward timed_attention_forward
#define attention_backward timed_attention_backward
#define attention_block_forward timed_attention_block_forward
#define attention_block_backward timed_attention_block_backward
#define sum_squares timed_sum_squares
#define layernorm_forward timed_layernorm_forward
#define layernorm_backward timed_layernorm_backward
#define residual_layernorm_forward timed_residual_layernorm_forward
#define residual_rmsnorm_forward timed_residual_rmsnorm_forward
#define rmsnorm_forward timed_rmsnorm_forward
#define rmsnorm_backward timed_rmsnorm_backward
#define gelu_forward timed_gelu_forward
#define gelu_backward timed_gelu_backward
#define swiglu_forward timed_swiglu_forward
#define swiglu_backward timed_swiglu_backward
#define residual_forward timed_residual_forward
#define add_inplace timed_add_inplace
#define add_bias timed_add_bias
#define column_dot_accumulate timed_column_dot_accumulate
#define rope_apply timed_rope_apply
#define embedding_forward timed_embedding_forward
#define embedding_backward timed_embedding_backward
#define position_forward timed_position_forward
#define position_backward timed_position_backward
#define crossentropy_local_max timed_crossentropy_local_max
#define crossentropy_local_sums timed_crossentropy_local_sums
#define crossentropy_finish timed_crossentropy_finish
#define adamw_update timed_adamw_update

#define TESTING
#include "../train_gpt.c"

// ----------------------------------------------------------------------------
// Load from other processes: CPU seconds the whole machine spent busy (/proc/stat) minus
// this process's own, over a wall-clock interval, in cores.

static double machine_busy_s(void) {
    unsigned long long user, nice, sys, idle, iowait, irq, softirq;
    FILE* f = fopen("/proc/stat", "r");
    int ok = f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait, &irq,
                         &softirq) == 7;
    if (f) fclose(f);
    return ok ? (double)(user + nice + sys + irq + softirq) / sysconf(_SC_CLK_TCK) : 0.0;
}
static double self_busy_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + 1e-6 * r.ru_utime.tv_usec + r.ru_stime.tv_sec + 1e-6 * r.ru_stime.tv_usec;
}
typedef struct { double wall, machine, self; } LoadMark;
static LoadMark load_mark(void) { LoadMark l = {now_s(), machine_busy_s(), self_busy_s()}; return l; }
static double others_cores(LoadMark a) {
    LoadMark b = load_mark();
    double o = ((b.machine - a.machine) - (b.self - a.self)) / (b.wall - a.wall);
    return o > 0 ? o : 0;
}

// ----------------------------------------------------------------------------
// The matmuls alone: every GEMM of one step at its shape (gemm() with the arguments
// matmul_forward / matmul_backward pass), best of a few repetitions each. The buffers come
// from malloc, so they sit where the model's do (16 bytes past a cache line).

typedef struct { const char* name; int IC, OC, count; } MatmulShape;

static void bench_matmuls(const Model* m, double peak) {
    int N = m->B * m->T, C = m->C, L = m->c.n_layer;
    MatmulShape shapes[] = {{"qkv", C, m->qkv_dim, L},     {"attn proj", m->n_head_local * m->hd, C, L},
                            {"fc", C, m->fc_dim, L},       {"fc proj", m->Fl, C, L},
                            {"head", C, m->vocab_local, 1}};
    size_t most = 0;
    for (int s = 0; s < 5; s++) {
        size_t w = (size_t)shapes[s].IC * shapes[s].OC,
               io = (size_t)N * (shapes[s].IC > shapes[s].OC ? shapes[s].IC : shapes[s].OC);
        most = w > most ? w : most, most = io > most ? io : most;
    }
    float *x = (float*)xmalloc(sizeof(float) * most), *w = (float*)xmalloc(sizeof(float) * most);
    float *y = (float*)xmalloc(sizeof(float) * most), *g = (float*)xmalloc(sizeof(float) * most);
    for (size_t i = 0; i < most; i++)
        x[i] = 0.01f * (float)(i % 17) - 0.08f, w[i] = 0.01f * (float)(i % 13) - 0.06f, y[i] = g[i] = 0;
    printf("\nmatmuls alone at the step's shapes (gemm: M x N x K, best of 3 runs each):\n\n");
    printf("| matmul | M x N x K | per step | ms each | GFLOP/s | %% of peak |\n|---|---|---|---|---|---|\n");
    double total_flops = 0, total_s = 0, kind_flops[3] = {0, 0, 0}, kind_s[3] = {0, 0, 0};
    static const char* kinds[3] = {"forward", "input grad", "weight grad"};
    LoadMark l = load_mark();
    for (int s = 0; s < 5; s++) {
        const MatmulShape* sh = &shapes[s];
        int IC = sh->IC, OC = sh->OC;
        for (int kind = 0; kind < 3; kind++) {  // forward, input gradient, weight gradient
            int M = kind == 2 ? OC : N, Nc = kind == 0 ? OC : IC, K = kind == 0 ? IC : kind == 1 ? OC : N;
            double best = 1e30;
            for (int r = 0; r < 3; r++) {
                double t0 = now_s();
                if (kind == 0) gemm(N, OC, IC, x, IC, 0, w, IC, 1, y, OC, 0);
                else if (kind == 1) gemm(N, IC, OC, y, OC, 0, w, IC, 0, g, IC, 1);
                else gemm(OC, IC, N, y, OC, 1, x, IC, 0, g, IC, 1);
                double t = now_s() - t0;
                best = t < best ? t : best;
            }
            double flops = 2.0 * M * Nc * K;
            total_flops += flops * sh->count, total_s += best * sh->count;
            kind_flops[kind] += flops * sh->count, kind_s[kind] += best * sh->count;
            printf("| %s %s | %d x %d x %d | %d | %.2f | %.1f | %.1f%% |\n", sh->name, kinds[kind], M, Nc, K, sh->count,
                   best * 1e3, flops / best / 1e9, 100 * flops / best / peak);
        }
    }
    for (int kind = 0; kind < 3; kind++)
        printf("| all %s | | | %.1f ms | %.1f | %.1f%% |\n", kinds[kind], kind_s[kind] * 1e3,
               kind_flops[kind] / kind_s[kind] / 1e9, 100 * kind_flops[kind] / kind_s[kind] / peak);
    printf("| **all of a step** | | | %.1f ms | %.1f | **%.1f%%** |\n", total_s * 1e3, total_flops / total_s / 1e9,
           100 * total_flops / total_s / peak);
    printf("\nother processes during the matmuls: %.2f cores\n", others_cores(l));
    free(x), free(w), free(y), free(g);
}

// ----------------------------------------------------------------------------

static void bench_model(const char* model, int micro_batch, int seq_len, int vocab, int warm, int steps, double peak) {
    char mb[16], sl[16], vb[16];
    snprintf(mb, sizeof(mb), "%d", micro_batch), snprintf(sl, sizeof(sl), "%d", seq_len),
        snprintf(vb, sizeof(vb), "%d", vocab);
    char* argv[] = {(char*)"bench", (char*)"--model", (char*)model, (char*)"--micro-batch", mb, (char*)"--seq-len", sl,
                    (char*)"--quiet", (char*)"--vocab", vb};
    static Args a;  // the model keeps a pointer to it
    parse_args(&a, vocab ? 10 : 8, argv);
    a.cfg.dp = 1, a.cfg.global_batch = a.cfg.micro_batch;
    ModelConfig* c = &a.cfg;
    TokenStream ts;
    make_builtin_corpus(&ts, 200000, 42);
    Metrics met;
    metrics_init(&met, &a, 0, 1, peak, "measured");
    Model m;
    model_init(&m, &a, &met);
    for (int s = 0; s < warm; s++) train_step(&m, &ts, s);
    memset(op_totals, 0, sizeof(op_totals));
    LoadMark l = load_mark();
    double t0 = now_s();
    for (int s = 0; s < steps; s++) train_step(&m, &ts, warm + s);
    double step_s = (now_s() - t0) / steps, others = others_cores(l);
    int N = m.B * m.T;
    double flops = config_flops_per_token(c, c->seq_len) * N;
    printf("\n## %s: L %d, d %d, heads %d, vocab %d padded, micro-batch %d, seq %d, 1 rank\n\n", model, c->n_layer,
           c->d_model, c->n_head, c->vocab_padded, c->micro_batch, c->seq_len);
    printf("| metric | value |\n|---|---|\n");
    printf("| ms/step (mean of %d after %d warm-up) | %.1f |\n", steps, warm, step_s * 1e3);
    printf("| tokens/s | %.0f |\n", N / step_s);
    printf("| achieved GFLOP/s (6N + 12LdT) | %.1f |\n", flops / step_s / 1e9);
    printf("| fraction of the measured peak | **%.1f%%** |\n", 100 * flops / step_s / peak);
    printf("| other processes during the steps | %.2f cores |\n", others);
    printf("\n| operation | ms/step | share | rate |\n|---|---|---|---|\n");
    double accounted = 0;
    for (int op = 0; op < N_OPS; op++) {
        double s = op_totals[op].seconds / steps, work = op_totals[op].work / steps;
        accounted += s;
        if (op_is_flops[op])
            printf("| %s | %.1f | %.1f%% | %.1f GFLOP/s |\n", op_names[op], s * 1e3, 100 * s / step_s, work / s / 1e9);
        else printf("| %s | %.1f | %.1f%% | %.1f GB/s |\n", op_names[op], s * 1e3, 100 * s / step_s, work / s / 1e9);
    }
    printf("| other (zeroing, copies, schedule) | %.1f | %.1f%% | |\n", (step_s - accounted) * 1e3,
           100 * (step_s - accounted) / step_s);
    bench_matmuls(&m, peak);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int used = threads < cores ? threads : (int)cores;
    LoadMark l = load_mark();
    double core_peak = measure_core_peak_flops(), peak = core_peak * used, together = 0;
    // the same loop on every thread at once: the cores keep their clock under load
#pragma omp parallel reduction(+ : together)
    together += measure_core_peak_flops();
    printf("# bench: %d OpenMP threads on %ld cores, %s; GEMM blocking MR %d NR %d KC %d MC %d\n\n", threads, cores,
           simd_name(), GEMM_MR, GEMM_NR, GEMM_KC, GEMM_MC);
    printf(
        "measured fp32 peak: %d cores x %.1f GFLOP/s (FMA loop on one core) = %.1f GFLOP/s; the loop on all %d threads "
        "at once: %.1f GFLOP/s (other processes: %.2f cores)\n",
        used, core_peak / 1e9, peak / 1e9, threads, together / 1e9, others_cores(l));
    bench_model("gpt2-124m", 4, 64, 50257, 2, 5, peak);
    bench_model("small", 16, 128, 0, 3, 20, peak);
    MPI_Finalize();
    return 0;
}
