// test_gpt.c: tests of the CPU reference trainer (train_gpt.c and its headers).
//
//   make test_gpt && ./test_gpt
//
// One line per check: "PASS name[: numbers]" or "FAIL name: numbers", then the total
// "N passed, N failed" alone on the last line; the exit status is non-zero on any failure.
//
// What is checked, in order:
//   1. every fp32 layer kernel (kernels_cpu.h) against the reference (backend/cpu/reference.h's
//      plain loops, compiled here once more in double): the forward outputs, and the
//      backward against central finite differences of the double reference (objective
//      L = sum(out * R), fixed random R, the backward fed dout = R; eps 1e-6); then the fp32
//      reference that --kernels ref trains with against the fast kernels, and its backwards
//      against the same finite differences (tests/gpt_reference.c);
//   2. the whole model (GPT-2 and LLaMA, 1 rank): the fp32 loss against a double
//      reference model built from the layer references, the analytic gradient of a
//      sample of every tensor against finite differences of the double loss, and
//      recomputation / schedule choices giving bitwise-identical gradients;
//   3. AdamW and the learning-rate schedule against hand-computed values;
//   4. a short training run that learns, and non-finite losses caught (stop / skip);
//   5. the readers (token shards, text, tokenizer, checkpoints, llm.c GPT-2 weights) on
//      good and corrupt files, and every shard of simulated tp/pp/vpp layouts (init and
//      checkpoint resume) against an index mapping written here; what the host can give a run
//      (MemAvailable, the memory cgroup's headroom);
//   6. the pipeline schedules (schedule.h): completeness, matching send/recv, in-flight
//      bounds, deadlock freedom and the bubble formula;
//   7. flag parsing and layout checks.
//
// This file holds the shared helpers and main; the checks, by concern, are in tests/gpt_kernels.c
// and gpt_reference.c (1), gpt_model.c (2-4 and the test models), gpt_readers.c and gpt_host.c (5),
// gpt_schedules.c (6) and gpt_flags.c (7, with args.h's table), included in that order into the one binary.
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
// The reference in double precision, for finite differences: backend/cpu/reference.h once more (the
// trainer's copy, included by train_gpt.c, is fp32), its float read as double, its math
// functions the double ones, each function renamed refd_*. One source for the math: what the
// fp32 kernels are checked against is the file a learner reads.
#define float double
#define sqrtf sqrt
#define expf exp
#define logf log
#define tanhf tanh
#define powf pow
#define cosf cos
#define sinf sin
#define ref_embedding_forward refd_embedding_forward
#define ref_embedding_backward refd_embedding_backward
#define ref_position_forward refd_position_forward
#define ref_position_backward refd_position_backward
#define ref_layernorm_forward refd_layernorm_forward
#define ref_layernorm_backward refd_layernorm_backward
#define ref_rmsnorm_forward refd_rmsnorm_forward
#define ref_rmsnorm_backward refd_rmsnorm_backward
#define ref_matmul_forward refd_matmul_forward
#define ref_matmul_backward_input refd_matmul_backward_input
#define ref_matmul_backward_weight refd_matmul_backward_weight
#define ref_rope refd_rope
#define ref_block_position refd_block_position
#define ref_visible refd_visible
#define ref_attention_block_forward refd_attention_block_forward
#define ref_attention_block_backward refd_attention_block_backward
#define ref_whole_sequence refd_whole_sequence
#define ref_attention_forward refd_attention_forward
#define ref_attention_backward refd_attention_backward
#define ref_gelu_forward refd_gelu_forward
#define ref_gelu_backward refd_gelu_backward
#define ref_swiglu_forward refd_swiglu_forward
#define ref_swiglu_backward refd_swiglu_backward
#define ref_residual_forward refd_residual_forward
#define ref_column_sum refd_column_sum
#define ref_crossentropy_local_max refd_crossentropy_local_max
#define ref_crossentropy_local_sums refd_crossentropy_local_sums
#define ref_crossentropy_finish refd_crossentropy_finish
#define ref_adamw_update refd_adamw_update
#define ref_sum_squares refd_sum_squares
#undef REFERENCE_H
#include "backend/cpu/reference.h"
#undef float
#undef sqrtf
#undef expf
#undef logf
#undef tanhf
#undef powf
#undef cosf
#undef sinf
#undef ref_embedding_forward
#undef ref_embedding_backward
#undef ref_position_forward
#undef ref_position_backward
#undef ref_layernorm_forward
#undef ref_layernorm_backward
#undef ref_rmsnorm_forward
#undef ref_rmsnorm_backward
#undef ref_matmul_forward
#undef ref_matmul_backward_input
#undef ref_matmul_backward_weight
#undef ref_rope
#undef ref_block_position
#undef ref_visible
#undef ref_attention_block_forward
#undef ref_attention_block_backward
#undef ref_whole_sequence
#undef ref_attention_forward
#undef ref_attention_backward
#undef ref_gelu_forward
#undef ref_gelu_backward
#undef ref_swiglu_forward
#undef ref_swiglu_backward
#undef ref_residual_forward
#undef ref_column_sum
#undef ref_crossentropy_local_max
#undef ref_crossentropy_local_sums
#undef ref_crossentropy_finish
#undef ref_adamw_update
#undef ref_sum_squares

// The double reference's loss of each row over the whole padded vocabulary (one rank: the
// three passes of the cross-entropy back to back); only the first `vocab` columns are real.
static void refd_crossentropy(double* losses, const double* logits, const int* targets, int N, int Vp, int vocab) {
    double *maxes = zeros_d(N), *sums = zeros_d(2 * (size_t)N);
    refd_crossentropy_local_max(maxes, logits, N, Vp, 0, vocab);
    refd_crossentropy_local_sums(sums, logits, maxes, targets, N, Vp, 0, vocab);
    refd_crossentropy_finish(losses, NULL, maxes, sums, targets, N, Vp, 0, vocab, 1.0);
    free(maxes), free(sums);
}
// LayerNorm (GPT-2) or RMSNorm (LLaMA) in double, the row statistics dropped.
static void refd_norm(int rms, double* out, const double* x, const double* w, const double* b, int N, int C) {
    double *mean = zeros_d(N), *rstd = zeros_d(N);
    if (rms) refd_rmsnorm_forward(out, rstd, x, w, N, C);
    else refd_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    free(mean), free(rstd);
}
// Positions 0, 1, ..., T - 1 (rows in order).
static int* positions_in_order(int T) {
    int* pos = (int*)xmalloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) pos[t] = t;
    return pos;
}

// ----------------------------------------------------------------------------
// The tests, by concern, in the order main runs them.
#include "tests/gpt_kernels.c"
#include "tests/gpt_model.c"
#include "tests/gpt_readers.c"
#include "tests/gpt_host.c"
#include "tests/gpt_schedules.c"
#include "tests/gpt_flags.c"
#include "tests/gpt_docs.c"
#include "tests/gpt_packing.c"
#include "tests/gpt_cp_doc.c"
#include "tests/gpt_reference.c"
#include "tests/gpt_noise.c"

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
                    {"reference", test_reference},
                    {"model", test_model},
                    {"escape", test_escape},
                    {"files", test_files},
                    {"host memory", test_host_memory},
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
                    {"cp split", test_cp_doc},
                    {"noise scale", test_noise_scale}};
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
