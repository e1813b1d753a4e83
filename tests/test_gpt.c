// test_gpt.c: tests of the CPU reference trainer (train_gpt.c and its headers).
//
//   make test_gpt && ./test_gpt
//
// One line per check: "PASS name[: numbers]" or "FAIL name: numbers", then the total
// "N passed, N failed" alone on the last line; the exit status is non-zero on any failure.
//
// What is checked, in order:
//   1. every fp32 layer kernel (kernels_cpu.h) against a double-precision reference
//      written here with plain loops: the forward outputs, and the backward against
//      central finite differences of the double reference (objective L = sum(out * R),
//      fixed random R, the backward fed dout = R; eps 1e-6);
//   2. the whole model (GPT-2 and LLaMA, 1 rank): the fp32 loss against a double
//      reference model built from the layer references, the analytic gradient of a
//      sample of every tensor against finite differences of the double loss, and
//      recomputation / schedule choices giving bitwise-identical gradients;
//   3. AdamW and the learning-rate schedule against hand-computed values;
//   4. a short training run that learns, and non-finite losses caught (stop / skip);
//   5. the readers (token shards, text, tokenizer, checkpoints, llm.c GPT-2 weights) on
//      good and corrupt files, and every shard of simulated tp/pp/vpp layouts (init and
//      checkpoint resume) against an index mapping written here;
//   6. the pipeline schedules (schedule.h): completeness, matching send/recv, in-flight
//      bounds, deadlock freedom and the bubble formula;
//   7. flag parsing and layout checks.
//
// This file holds the shared helpers and main; the checks, by concern, are in tests/gpt_kernels.c
// (1), gpt_model.c (2-4 and the test models), gpt_readers.c (5), gpt_schedules.c (6) and
// gpt_flags.c (7, with args.h's table), included in that order into the one binary.
//
// Error paths call fail(), which exits: they run in fork()ed children, and the test
// checks the exit status (1) and that the message on stderr names the culprit.
#define _GNU_SOURCE
#include "train_gpt.c"
#include "tests/harness.h"

// ----------------------------------------------------------------------------
// Bookkeeping.

// A measured error against its tolerance (NaN fails).
static void check_err(const char* name, double err, double tol) {
    check(err <= tol, name, "err %.2e (tol %.0e)", err, tol);
}

static char tmp_dir[256];  // /tmp/test_gpt_XXXXXX, made at start

// ----------------------------------------------------------------------------
// Small numeric helpers.

static Rng test_rng;
static float* randn_f(size_t n, float scale) {
    float* x = (float*)xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&test_rng);
    return x;
}
static float* filled_f(size_t n, float v) {
    float* x = (float*)xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}
static float* copy_f(const float* x, size_t n) {
    float* y = (float*)xmalloc(sizeof(float) * n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}
static double* to_double(const float* x, size_t n) {
    double* y = (double*)xmalloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}
static double* zeros_d(size_t n) { return (double*)xcalloc(n ? n : 1, sizeof(double)); }
static double dot_d(const double* a, const double* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// Backward kernels accumulate (+=): the tests pre-fill every gradient buffer with
// PREFILL and subtract it afterwards, which also checks that nothing overwrites.
#define PREFILL 0.5f
static float* prefilled(size_t n) { return filled_f(n, PREFILL); }
static void unprefill(float* g, size_t n) { for (size_t i = 0; i < n; i++) g[i] -= PREFILL; }

// Error of fp32 values a against double reference b, relative to the largest reference
// value: max_i |a_i - b_i| / max(max_i |b_i|, 1e-6). NaN gives +inf.
static double rel_err(const float* a, const double* b, size_t n) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) d = INFINITY;
        if (d > max_diff) max_diff = d;
        if (fabs(b[i]) > max_ref) max_ref = fabs(b[i]);
    }
    return max_diff / fmax(max_ref, 1e-6);
}

// Finite differences. f(ctx) evaluates the double-precision objective; x[idx[k]] are the
// inputs to differentiate (idx NULL: all n). Returns the error of the analytic gradient
// g (indexed like x) against the central differences, in the rel_err sense.
#define FD_EPS 1e-6
typedef double (*Objective)(void* ctx);
static double fd_err_idx(Objective f, void* ctx, double* x, const size_t* idx, size_t n, const float* g) {
    double max_diff = 0, max_ref = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = idx ? idx[k] : k;
        double save = x[i];
        x[i] = save + FD_EPS;
        double lp = f(ctx);
        x[i] = save - FD_EPS;
        double lm = f(ctx);
        x[i] = save;
        double fd = (lp - lm) / (2 * FD_EPS);
        double d = fabs((double)g[i] - fd);
        if (isnan(d)) d = INFINITY;
        if (d > max_diff) max_diff = d;
        if (fabs(fd) > max_ref) max_ref = fabs(fd);
    }
    return max_diff / fmax(max_ref, 1e-6);
}
static double fd_err(Objective f, void* ctx, double* x, size_t n, const float* g) {
    return fd_err_idx(f, ctx, x, NULL, n, g);
}

// Tolerances of the layer checks: fp32 kernels against the double reference.
#define TOL_FWD 1e-5   // forward outputs
#define TOL_GRAD 1e-4  // backward against finite differences

// ----------------------------------------------------------------------------
// Double-precision reference layers: the textbook formulas, one loop nest each.

static void ref_matmul(double* out, const double* inp, const double* w, const double* b, int N, int IC, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0;
            for (int k = 0; k < IC; k++) s += inp[(size_t)i * IC + k] * w[(size_t)o * IC + k];
            out[(size_t)i * OC + o] = s;
        }
}
static void ref_layernorm(double* out, double* mean, double* rstd, const double* x, const double* w, const double* b,
                          int N, int C) {
    for (int i = 0; i < N; i++) {
        const double* r = x + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += r[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (r[c] - m) * (r[c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (r[c] - m) * s * w[c] + b[c];
        if (mean) mean[i] = m, rstd[i] = s;
    }
}
static void ref_rmsnorm(double* out, double* rstd, const double* x, const double* w, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double* r = x + (size_t)i * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += r[c] * r[c];
        double s = 1.0 / sqrt(ss / C + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = r[c] * s * w[c];
        if (rstd) rstd[i] = s;
    }
}
// Rotate pairs (2j, 2j+1) of the first n_heads heads of each row by pos * 10000^(-2j/hd),
// pos = pos[i % T] (i % T when pos is NULL).
static void ref_rope(double* qkv, int N, const int* pos, int T, int stride, int n_heads, int hd) {
    for (int i = 0; i < N; i++)
        for (int h = 0; h < n_heads; h++) {
            double* x = qkv + (size_t)i * stride + h * hd;
            for (int j = 0; j < hd / 2; j++) {
                double ang = (pos ? pos[i % T] : i % T) * pow(10000.0, -2.0 * j / hd), c = cos(ang), s = sin(ang);
                double a = x[2 * j], b = x[2 * j + 1];
                x[2 * j] = a * c - b * s;
                x[2 * j + 1] = a * s + b * c;
            }
        }
}
// Causal softmax attention; query head h reads kv head h / (H / KV). lse (B x H x T, may be
// NULL): the log-sum-exp of each row's scores.
static void ref_attention(double* out, double* att, double* lse, const double* qkv, int B, int T, int H, int KV,
                          int hd) {
    int stride = (H + 2 * KV) * hd, group = H / KV;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const double* q = qkv + ((size_t)b * T + t) * stride + h * hd;
                double* a = att + (((size_t)b * H + h) * T + t) * T;
                int kvh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double* k = qkv + ((size_t)b * T + t2) * stride + (H + kvh) * hd;
                    a[t2] = dot_d(q, k, hd) / sqrt((double)hd);
                    if (a[t2] > mx) mx = a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) sum += (a[t2] = exp(a[t2] - mx));
                if (lse) lse[((size_t)b * H + h) * T + t] = mx + log(sum);
                for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? a[t2] / sum : 0.0;
                double* o = out + ((size_t)b * T + t) * H * hd + h * hd;
                for (int d = 0; d < hd; d++) {
                    double s = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += a[t2] * qkv[((size_t)b * T + t2) * stride + (H + KV + kvh) * hd + d];
                    o[d] = s;
                }
            }
}
static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static void ref_swiglu(double* out, const double* inp, int N, int F) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double g = inp[(size_t)i * 2 * F + j], u = inp[(size_t)i * 2 * F + F + j];
            out[(size_t)i * F + j] = g / (1.0 + exp(-g)) * u;
        }
}
// Rows [v0, v0+Vl) of the vocabulary: other tokens give zero rows.
static void ref_embedding(double* out, const int* tok, const double* wte, int N, int C, int v0, int Vl) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = (tok[i] >= v0 && tok[i] < v0 + Vl) ? wte[(size_t)(tok[i] - v0) * C + c] : 0.0;
}
// Full rows of Vp logits; only the first `vocab` columns are real.
static void ref_crossentropy(double* losses, const double* logits, const int* targets, int N, int Vp, int vocab) {
    for (int i = 0; i < N; i++) {
        const double* r = logits + (size_t)i * Vp;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < vocab; j++) if (r[j] > mx) mx = r[j];
        for (int j = 0; j < vocab; j++) s += exp(r[j] - mx);
        losses[i] = log(s) + mx - r[targets[i]];
    }
}

// ----------------------------------------------------------------------------
// The tests, by concern, in the order main runs them.
#include "tests/gpt_kernels.c"
#include "tests/gpt_model.c"
#include "tests/gpt_readers.c"
#include "tests/gpt_schedules.c"
#include "tests/gpt_flags.c"
#include "tests/gpt_docs.c"
#include "tests/gpt_packing.c"
#include "tests/gpt_cp_doc.c"

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    double t0 = now_s();
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_gpt_XXXXXX");
    if (!mkdtemp(tmp_dir)) fail("mkdtemp: %s", strerror(errno));
#ifdef _OPENMP
    int default_threads = omp_get_max_threads();
#endif
    struct { const char* name; void (*fn)(void);
    } sections[] = {{"kernels", test_kernels},
                    {"model", test_model},
                    {"escape", test_escape},
                    {"files", test_files},
                    {"data readers", test_data_readers},
                    {"checkpoints", test_checkpoints},
                    {"sharding", test_sharding},
                    {"llmc", test_llmc},
                    {"schedules", test_schedules},
                    {"adamw", test_adamw},
                    {"lr", test_lr},
                    {"flags", test_flags},
                    {"layout_check", test_layout_check},
                    {"training", test_training},
                    {"split backward", test_split_backward},
                    {"non-finite", test_nonfinite},
                    {"packing", test_packing},
                    {"documents", test_docs},
                    {"cp split", test_cp_doc}};
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
        if (argc > 1 && strcmp(argv[1], sections[i].name)) continue;  // ./test_gpt SECTION: that one only
#ifdef _OPENMP
        // The kernel checks run on all threads (races, thread-count independence); the rest
        // on one: tiny shapes are dominated by OpenMP barriers, badly so on a loaded machine.
        omp_set_num_threads(i == 0 ? default_threads : 1);
#endif
        double ts = now_s();
        sections[i].fn();
        fprintf(stderr, "test_gpt: %-12s %.2f s\n", sections[i].name, now_s() - ts);
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", tmp_dir);
    fprintf(stderr, "test_gpt: %.1f s\n", now_s() - t0);
    int rc = tests_done();
    MPI_Finalize();
    return rc;
}
