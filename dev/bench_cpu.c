// dev/bench_cpu.c: CPU benchmark (make bench). A training step of the gpt2-124m shape at
// micro-batch 4, sequence 64 on one rank: ms/step, achieved GFLOP/s (PaLM count
// 6N + 12*L*d*T per token), and the fraction of this machine's fp32 peak measured with
// an FMA loop in the same run. It also times the step's matmuls with naive loops (the
// structure of llm.c's CPU matmul: one dot product per output, parallel over rows) on
// the same shapes, and estimates the step time of a naive-loop trainer as
// step - (our matmul time) + (naive matmul time).
#define TESTING
#include "../train_gpt.c"

// llm.c-style matmul forward/backward: plain loops, OpenMP over rows.
static void naive_forward(float* out, const float* inp, const float* w, int N, int IC, int OC) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            float s = 0;
            for (int k = 0; k < IC; k++) s += inp[(size_t)i * IC + k] * w[(size_t)o * IC + k];
            out[(size_t)i * OC + o] = s;
        }
}
static void naive_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int N, int IC, int OC) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            float d = dout[(size_t)i * OC + o];
            for (int k = 0; k < IC; k++) dinp[(size_t)i * IC + k] += w[(size_t)o * IC + k] * d;
        }
#pragma omp parallel for
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < N; i++) {
            float d = dout[(size_t)i * OC + o];
            for (int k = 0; k < IC; k++) dw[(size_t)o * IC + k] += inp[(size_t)i * IC + k] * d;
        }
}

// Time forward + backward of every matmul of one step (per layer: qkv, attproj, fc, fcproj; head).
static double time_matmuls(const ModelConfig* c, int N, int naive) {
    int C = c->d_model, F = c->d_ff, V = c->vocab_padded;
    int shapes[5][2] = {{C, 3 * C}, {C, C}, {C, F}, {F, C}, {C, V}};
    size_t maxn = (size_t)V * C;
    float *inp = (float*)xcalloc((size_t)N * F, 4), *out = (float*)xcalloc((size_t)N * V, 4);
    float *w = (float*)xcalloc(maxn, 4), *dw = (float*)xcalloc(maxn, 4), *din = (float*)xcalloc((size_t)N * F, 4);
    for (size_t i = 0; i < maxn; i++) w[i] = 0.01f * (float)(i % 13);
    double t0 = now_s();
    for (int s = 0; s < 5; s++) {
        int IC = shapes[s][0], OC = shapes[s][1], reps = s < 4 ? c->n_layer : 1;
        for (int r = 0; r < reps; r++) {
            if (naive) naive_forward(out, inp, w, N, IC, OC), naive_backward(din, dw, out, inp, w, N, IC, OC);
            else matmul_forward(out, inp, w, NULL, N, IC, OC), matmul_backward(din, dw, NULL, out, inp, w, N, IC, OC);
        }
    }
    double t = now_s() - t0;
    free(inp); free(out); free(w); free(dw); free(din);
    return t;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    Args a;
    char* fake[] = {(char*)"bench", (char*)"--model", (char*)"gpt2-124m", (char*)"--micro-batch", (char*)"4",
                    (char*)"--seq-len", (char*)"64", (char*)"--vocab", (char*)"50257"};
    parse_args(&a, 9, fake);
    a.cfg.dp = 1, a.cfg.global_batch = a.cfg.micro_batch;
    ModelConfig* c = &a.cfg;
    TokenStream ts;
    make_builtin_corpus(&ts, 200000, 42);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    double core_peak = measure_core_peak_flops();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double peak = core_peak * (threads < cores ? threads : cores);
    Metrics met;
    metrics_init(&met, &a, 0, 1, peak, "measured");
    Model m;
    model_init(&m, &a, &met);
    int N = c->micro_batch * c->seq_len, warm = 2, steps = 5;
    for (int s = 0; s < warm; s++) train_step(&m, &ts, s);
    double t0 = now_s();
    for (int s = 0; s < steps; s++) train_step(&m, &ts, warm + s);
    double step_s = (now_s() - t0) / steps;
    double flops = config_flops_per_token(c, c->seq_len) * N;
    double ours = time_matmuls(c, N, 0), naive = time_matmuls(c, N, 1);
    double naive_step = step_s - ours + naive;
    printf("bench: gpt2-124m shape (L %d, d %d, vocab %d padded), micro-batch %d, seq %d, 1 rank, %d OpenMP threads, %s\n",
           c->n_layer, c->d_model, c->vocab_padded, c->micro_batch, c->seq_len, threads, simd_name());
    printf("| metric | value |\n|---|---|\n");
    printf("| ms/step | %.1f |\n", step_s * 1e3);
    printf("| tokens/s | %.0f |\n", N / step_s);
    printf("| achieved GFLOP/s (6N + 12LdT) | %.1f |\n", flops / step_s / 1e9);
    printf("| measured fp32 peak (%d cores x %.1f GFLOP/s FMA loop) | %.1f GFLOP/s |\n", threads < cores ? threads : (int)cores, core_peak / 1e9, peak / 1e9);
    printf("| fraction of peak | %.1f%% |\n", 100 * flops / step_s / peak);
    printf("| step matmuls: ours / naive loops | %.1f ms / %.1f ms (%.1fx) |\n", ours * 1e3, naive * 1e3, naive / ours);
    printf("| naive-loop trainer estimate | %.1f ms/step; ours is %.1fx its throughput |\n", naive_step * 1e3, naive_step / step_s);
    MPI_Finalize();
    return 0;
}
