// test_gpu.cu: every GPU kernel of kernels_gpu.cuh against its fp32 CPU reference of
// kernels_cpu.h, forward and backward, on the same random inputs and several shapes (odd
// sizes that are not multiples of the block sizes, GQA with 4 query / 2 kv heads), and
// context parallelism's attention blocks in the order a ring rank runs them.
//
// Inputs are drawn in fp32 and rounded to bf16 once; the CPU reference gets the rounded
// values as floats, so the differences measured are the GPU's own: bf16 rounding of its
// outputs and fp32 summation order. A check passes when for every element
//     |gpu - cpu| <= atol * rms(cpu) + rtol * |cpu|
// (atol is relative to the reference's RMS so one bound fits every scale). The bounds:
//   bf16 outputs (activations, activation gradients):      rtol 2e-2, atol 1e-2
//   attention backward (bf16 dqkv, recomputed softmax):    rtol 3e-2, atol 5e-2
//     (the probabilities and dS enter their tensor-core products as bf16, as in
//     FlashAttention-2, and dS = P (dP - Dsum) cancels where dP ~ Dsum: measured over
//     seeds 1-8, the worst element is 3.8% of the reference's RMS; a wrong mask or a
//     missing term is off by 30-400%)
//   attention blocks (context parallelism): the fp32 running output as a bf16 output (its
//     probabilities enter P V as bf16), its lse as an fp32 one, the fp32 dq, dk, dv as the
//     attention backward (over seeds 1-8 the worst elements: 0.71, 0.00, 0.15 of the bound)
//   fp32 outputs of fp32 math on bf16 inputs (weight/bias
//     gradients, norm statistics, cross-entropy sums):     rtol 1e-3, atol 1e-3
//   exact operations (copies, residual rounding, max):     rtol 1e-6, atol 0
//   AdamW fp32 state:                                       rtol 1e-5, atol 1e-6
// Output: one "PASS name ..." / "FAIL name: ..." line per check, then "N passed, N failed";
// exit 1 on any failure, 2 when there is no GPU. SEED=n draws other random inputs.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90,code=[sm_90,compute_90] -I.
//   $(mpicc --showme:compile) -o test_gpu tests/test_gpu.cu -lcublasLt -lcublas $(mpicc --showme:link) -lnccl
#include "backend/cpu/kernels_cpu.h"
#include "backend/gpu/kernels_gpu.cuh"

static int n_pass, n_fail;
static Rng rng;

// ----------------------------------------------------------------------------
// Buffers: host and device allocations of one test, freed together at its end.

static void* host_ptrs[512];
static void* dev_ptrs[512];
static int n_host, n_dev;

static float* hbuf(size_t n) {
    if (n_host == 512) fail("test: too many host buffers");
    return (float*)(host_ptrs[n_host++] = xcalloc(n, sizeof(float)));
}
static void* dbuf(size_t bytes) {
    if (n_dev == 512) fail("test: too many device buffers");
    void* p;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 16));
    cudaCheck(cudaMemset(p, 0, bytes ? bytes : 16));
    return dev_ptrs[n_dev++] = p;
}
static void free_all(void) {
    cudaCheck(cudaDeviceSynchronize());
    for (int i = 0; i < n_host; i++) free(host_ptrs[i]);
    for (int i = 0; i < n_dev; i++) cudaCheck(cudaFree(dev_ptrs[i]));
    n_host = n_dev = 0;
}

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// n values uniform in [offset - scale, offset + scale), rounded to bf16.
static float* hrand(size_t n, float scale, float offset = 0.0f) {
    float* x = hbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(offset + scale * (2.0f * rng_uniform(&rng) - 1.0f));
    return x;
}
static float* hcopy(const float* x, size_t n) {
    float* y = hbuf(n);
    memcpy(y, x, sizeof(float) * n);
    return y;
}
static bf16* to_bf16(const float* x, size_t n) {
    bf16* h = (bf16*)xmalloc(2 * n + 2);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(x[i]);
    bf16* d = (bf16*)dbuf(2 * n);
    cudaCheck(cudaMemcpy(d, h, 2 * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}
static float* to_f32(const float* x, size_t n) {
    float* d = (float*)dbuf(4 * n);
    cudaCheck(cudaMemcpy(d, x, 4 * n, cudaMemcpyHostToDevice));
    return d;
}
static int* to_i32(const int* x, size_t n) {
    int* d = (int*)dbuf(4 * n);
    cudaCheck(cudaMemcpy(d, x, 4 * n, cudaMemcpyHostToDevice));
    return d;
}
static float* from_bf16(const bf16* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    bf16* h = (bf16*)xmalloc(2 * n + 2);
    cudaCheck(cudaMemcpy(h, d, 2 * n, cudaMemcpyDeviceToHost));
    float* x = hbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
    free(h);
    return x;
}
static float* from_f32(const float* d, size_t n) {
    cudaCheck(cudaDeviceSynchronize());
    float* x = hbuf(n);
    cudaCheck(cudaMemcpy(x, d, 4 * n, cudaMemcpyDeviceToHost));
    return x;
}

// ----------------------------------------------------------------------------
// The comparison.

#define TOL_BF16 2e-2f, 1e-2f
#define TOL_ATT_BWD 3e-2f, 5e-2f
#define TOL_F32 1e-3f, 1e-3f
#define TOL_EXACT 1e-6f, 0.0f
#define TOL_ADAM 1e-5f, 1e-6f

static void check(const char* name, const float* gpu, const float* cpu, size_t n, float rtol, float atol_rel) {
    double ss = 0;
    size_t n_finite = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(cpu[i])) ss += (double)cpu[i] * cpu[i], n_finite++;  // -inf: a log-sum-exp over no key
    double rms = n_finite ? sqrt(ss / n_finite) : 0.0;
    double atol = atol_rel * (rms > 0 ? rms : 1.0);
    double worst = 0, max_err = 0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(cpu[i]) || isinf(gpu[i])) {  // only the same infinity matches one
            if (gpu[i] != cpu[i]) { bad = 1, wi = i; break; }
            continue;
        }
        double err = fabs((double)gpu[i] - cpu[i]);
        if (!(err == err)) { bad = 1, wi = i; break; }  // NaN
        double ratio = err / (atol + rtol * fabs(cpu[i]) + 1e-30);
        if (err > max_err) max_err = err;
        if (ratio > worst) worst = ratio, wi = i;
    }
    if (bad || worst > 1.0) {
        n_fail++;
        printf("FAIL %s: %s at %zu of %zu: gpu %.7g cpu %.7g (max |err| %.3g, rms %.3g, rtol %.0e atol %.0e*rms)\n",
               name, bad ? "NaN/inf" : "out of tolerance", wi, n, n ? gpu[wi] : 0.0f, n ? cpu[wi] : 0.0f, max_err, rms,
               rtol, atol_rel);
    } else {
        n_pass++;
        printf("PASS %-44s max|err| %.2e (%.2f of tol; rms %.2e, rtol %.0e atol %.0e*rms)\n", name, max_err, worst, rms,
               rtol, atol_rel);
    }
    fflush(stdout);
}

static cudaStream_t st;

// ----------------------------------------------------------------------------
// The tests, one function per kernel pair, in files by concern (one binary; the Makefile has
// the emulator translate each: EMU_SRC).
#include "tests/gpu_layers.cu"
#include "tests/gpu_blocks_loss.cu"
#include "tests/gpu_bench.cu"
#include "tests/gpu_att_sweep.cu"

int main(int argc, char** argv) {
    int do_bench = 1, sweep = 0, dry = 0;
    const char *csv = NULL, *tiles = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-bench")) do_bench = 0;
        else if (!strcmp(argv[i], "--att-sweep")) sweep = 1;
        else if (!strcmp(argv[i], "--dry")) dry = 1;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--tiles") && i + 1 < argc) tiles = argv[++i];
        else fail("usage: %s [--no-bench] | --att-sweep [--dry] [--csv FILE] [--tiles FILE]", argv[0]);
    }
    if (!sweep && (dry || csv || tiles)) fail("--dry, --csv and --tiles go with --att-sweep");
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "error: no CUDA GPU available (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 2;
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d, %.0f GiB)\n", prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0);
    cudaCheck(cudaStreamCreate(&st));
    gpu_kernels_init(16u << 20);
    rng_seed(&rng, getenv("SEED") ? atoi(getenv("SEED")) : 1234);
    if (sweep) {  // the attention variants alone: checked, then timed
        att_sweep(dry, csv, tiles, prop.name);
        printf("%d passed, %d failed\n", n_pass, n_fail);
        gpu_kernels_free();
        cudaCheck(cudaStreamDestroy(st));
        return n_fail ? 1 : 0;
    }

    test_matmul(37, 64, 48, 1);
    test_matmul(130, 256, 200, 1);
    test_matmul(257, 128, 384, 0);
    test_matmul(64, 768, 2304, 1);
    test_matmul_plans();
    test_matmul_gelu(37, 64, 256, 1);   // the tiny model's fc and fc projection
    test_matmul_gelu(130, 96, 200, 0);  // no bias
    test_matmul_gelu(64, 768, 3072, 1); // GPT-2 124M
    test_matmul_gelu_declines();
    for (int rms = 0; rms <= 1; rms++) {
        test_norm(37, 64, rms);
        test_norm(100, 100, rms);
        test_norm(5, 1600, rms);
        test_norm(300, 768, rms);
        test_norm(70, 8192, rms);  // LayerNorm's backward: one warp's partials over 48 KiB of shared memory
    }
    test_gelu(1000 + 7);
    test_swiglu(37, 100);
    test_swiglu(5, 384);
    test_rope(2, 40, 4, 2, 16);
    test_rope(1, 33, 4, 4, 64);
    test_mma_layout();
    test_attention(2, 37, 4, 2, 16);   // GQA 4q/2kv, llama-tiny's head size
    test_attention(1, 70, 4, 4, 32);
    test_attention(2, 65, 4, 2, 64);
    test_attention(1, 129, 4, 1, 64);  // multi-query
    test_attention(1, 100, 2, 1, 128);
    att_bwd_pick[64] = attention_bwd_tile_find("k64q64", 64);  // the hd-64 backward with K, V in registers
    test_attention(2, 65, 4, 2, 64);
    test_attention(1, 129, 4, 1, 64, 1);
    att_bwd_pick[64] = NULL;
    attention_buffers_init(1, NULL, 0, NULL, 0);  // 2 blocks: 2 dQ splits of 5 key blocks each, the zig-zag over rounds
    test_attention(1, 300, 2, 1, 64, 1);
    attention_buffers_init(132, NULL, 0, NULL, 0);
    // every forward tile configuration: several query blocks and key tiles, GQA, documents
    test_attention_tile_choose();
    test_attention(1, 150, 4, 2, 64, 0, 1);
    test_attention(2, 150, 2, 1, 64, 1, 1);
    test_attention(1, 150, 2, 1, 128, 0, 1);
    test_attention(2, 150, 2, 2, 128, 1, 1);
    test_attention(2, 37, 4, 2, 16, 1);  // documents (data/data.h): short ones, ones across tiles
    test_attention(2, 129, 4, 1, 64, 1);
    test_attention(1, 100, 2, 1, 128, 1);
    // context parallelism's blocks: zig-zag cp2 (both ranks), cp4, Ulysses alone (R = 1), odd shapes
    test_attention_zigzag(2, 2, 0, 40, 4, 2, 16);  // GQA 4q/2kv
    test_attention_zigzag(2, 2, 1, 40, 4, 2, 16);
    test_attention_zigzag(1, 4, 1, 24, 4, 4, 32);
    test_attention_zigzag(1, 4, 3, 33, 2, 1, 64);
    test_attention_zigzag(1, 1, 0, 70, 2, 2, 64);
    test_attention_zigzag(2, 2, 1, 40, 4, 2, 16, 1);  // documents
    test_attention_zigzag(2, 4, 0, 33, 2, 1, 64, 1);
    // --cp-split doc: rows at each document's zig-zag positions (cp2 both ranks, cp4; several tiles of each side)
    test_attention_docsplit(2, 2, 0, 200, 4, 2, 16);
    test_attention_docsplit(2, 2, 1, 200, 4, 2, 16);
    test_attention_docsplit(2, 4, 2, 136, 2, 1, 64);
    test_attention_docsplit(2, 2, 1, 200, 2, 1, 128);
    test_attention_blocks_odd(32);
    test_attention_blocks_odd(128);
    test_attention_grad_pack(37, 4, 2, 16);
    test_attention_grad_pack(20, 2, 1, 64);
    test_embedding(50, 64, 0, 384, 257, 16, 0);
    test_embedding(77, 100, 128, 128, 257, 32, 45);  // vocab shard with padding rows
    test_crossentropy(37, 384, 0, 257);               // whole padded vocabulary on one rank
    test_crossentropy(20, 200, 100, 257);             // a shard with some padding columns
    test_crossentropy(9, 50304, 0, 50257);            // GPT-2 vocabulary
    test_crossentropy(11, 131, 0, 131);               // rows not 16-byte aligned: the scalar path of load8/store8
    test_adamw(10007, 0);
    test_adamw(1001, 1);
    test_misc(100003);

    // The whole model (train_gpt.cu against train_gpt.c, loss per step and gradient norm,
    // 1 rank and tp/pp/sp/ZeRO layouts) is checked by dev/check_gpu_vs_cpu.sh.

    if (do_bench && n_fail) printf("bench: timed although %d checks failed (their times mean little)\n", n_fail);
    if (do_bench) bench();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    gpu_kernels_free();
    cudaCheck(cudaStreamDestroy(st));
    return n_fail ? 1 : 0;
}
