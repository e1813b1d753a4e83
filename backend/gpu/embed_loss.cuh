// backend/gpu/embed_loss.cuh: the vocabulary-parallel embedding (out N x C from this rank's
// rows [vocab_start, vocab_start+vocab_local) of wte; dwte fp32 by atomicAdd), the position embedding (wpe), and the
// vocabulary-parallel cross-entropy over bf16 logits N x vocab_local in two passes (row maxima with
// their sums of exponentials and target logits; losses N and dlogits).
#ifndef GPU_EMBED_LOSS_CUH
#define GPU_EMBED_LOSS_CUH

#include "backend/gpu/common.cuh"

// Vocabulary-parallel embedding (rows [vocab_start, vocab_start+vocab_local) of wte here) and position embedding.

__global__ void embedding_forward_kernel(bf16* out, const int* tokens, const bf16* wte, int N, int C, int vocab_start,
                                         int vocab_local) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    size_t i = idx / C, c = idx % C;
    int r = tokens[i] - vocab_start;
    out[idx] = (r >= 0 && r < vocab_local) ? wte[(size_t)r * C + c] : f2bf(0.0f);
}
// dwte (vocab_local x C, fp32) += dout rows of the tokens in range; fp32 atomics (order-dependent in the last bits).
__global__ void embedding_backward_kernel(float* dwte, const int* tokens, const bf16* dout, int N, int C,
                                          int vocab_start, int vocab_local) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    size_t i = idx / C, c = idx % C;
    int r = tokens[i] - vocab_start;
    if (r >= 0 && r < vocab_local) atomicAdd(&dwte[(size_t)r * C + c], bf2f(dout[idx]));
}
// tokens: device ints (N).
static void embedding_forward_gpu(bf16* out, const int* tokens, const bf16* wte, int N, int C, int vocab_start,
                                  int vocab_local, cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    embedding_forward_kernel<<<cdiv((size_t)N * C, 256), 256, 0, s>>>(out, tokens, wte, N, C, vocab_start, vocab_local);
    launchCheck();
}
static void embedding_backward_gpu(float* dwte, const int* tokens, const bf16* dout, int N, int C, int vocab_start,
                                   int vocab_local, cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    embedding_backward_kernel<<<cdiv((size_t)N * C, 256), 256, 0, s>>>(dwte, tokens, dout, N, C, vocab_start,
                                                                       vocab_local);
    launchCheck();
}

// Rows [row0, row0+N) of a (B*T)-row batch: out += wpe[positions[row % T]] (positions:
// device ints, the sequence position of each of a sequence's T rows on this rank).
__global__ void position_forward_kernel(bf16* out, const bf16* wpe, int N, int row0, const int* positions, int T,
                                        int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    size_t i = idx / C, c = idx % C;
    out[idx] = f2bf(bf2f(out[idx]) + bf2f(wpe[(size_t)positions[(row0 + i) % T] * C + c]));
}
// dwpe (fp32, a row per sequence position) += the sum over the rows at each position, in row
// order (deterministic): one thread per (row t of a sequence, column); the T positions of
// one rank are distinct, so no two threads write one element.
__global__ void position_backward_kernel(float* dwpe, const bf16* dout, int N, int row0, const int* positions, int T,
                                         int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    int t = (int)(idx / C), c = (int)(idx % C);
    int i0 = ((t - row0) % T + T) % T;  // first local row i with (row0 + i) % T == t
    float s = 0.0f;
    for (int i = i0; i < N; i += T) s += bf2f(dout[(size_t)i * C + c]);
    dwpe[(size_t)positions[t] * C + c] += s;
}
static void position_forward_gpu(bf16* out, const bf16* wpe, int N, int row0, const int* positions, int T, int C,
                                 cudaStream_t s) {
    if ((size_t)N * C == 0) return;
    position_forward_kernel<<<cdiv((size_t)N * C, 256), 256, 0, s>>>(out, wpe, N, row0, positions, T, C);
    launchCheck();
}
static void position_backward_gpu(float* dwpe, const bf16* dout, int N, int row0, const int* positions, int T, int C,
                                  cudaStream_t s) {
    if ((size_t)T * C == 0) return;
    position_backward_kernel<<<cdiv((size_t)T * C, 256), 256, 0, s>>>(dwpe, dout, N, row0, positions, T, C);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Vocabulary-parallel cross-entropy in two passes over the logits (they are the step's largest
// tensor: 3.3 GB at gpt2-124m's micro-batch 32). The shared code's three steps (model.h
// head_forward: local maxima, all-reduce MAX over tp, local sums, all-reduce SUM, finish) map to:
//   crossentropy_local_max_gpu   pass 1: per row the local maximum m_l and the sum of exp(x - m_l)
//                                found online (Milakov & Gimelshein 2018: a chunk's new maximum
//                                rescales the sum so far), into stats (2N floats); the maxima out
//   crossentropy_local_sums_gpu  no pass: each row's sum rescaled to the all-reduced maximum M,
//                                sum * exp(m_l - M) (exactly 1 x sum without tp), and the
//                                target's logit (one element a row)
//   crossentropy_finish_gpu      pass 2: losses, and dlogits in place of the logits
// One block per row; logits (N x vocab_local) bf16; columns >= vocab - vocab_start are padding. targets:
// device ints. maxes, sums (2N: [sum exp | target logit]), losses: fp32 device.

#define CE_THREADS 256
// (m, s): a maximum and a sum of exponentials relative to it; two merged.
__device__ __forceinline__ void ce_merge(float& m, float& s, float m2, float s2) {
    float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);  // (-FLT_MAX, 0) is the empty pair: it adds 0
    m = M;
}
// Each thread walks its row in chunks of 8 (load8): row i starts 16-byte aligned when vocab_local
// is a multiple of 8, as the padded vocabulary and its tp shards are.
__device__ __forceinline__ void ce_warp_merge(float& m, float& s) {
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ce_merge(m, s, m2, s2);
    }
}
__global__ void ce_stats_kernel(float* maxes, float* stats, const bf16* logits, int N, int vocab_local, int vn) {
    int i = blockIdx.x;
    const bf16* l = logits + (size_t)i * vocab_local;
    float m = -FLT_MAX, s = 0.0f, x[8];
    for (int j = threadIdx.x * 8; j < vn; j += blockDim.x * 8) {
        load8(x, l + j, vn - j);
        float cm = -FLT_MAX, cs = 0.0f;
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (j + k < vn) cm = fmaxf(cm, x[k]);
        #pragma unroll
        for (int k = 0; k < 8; k++)
            if (j + k < vn) cs += expf(x[k] - cm);
        ce_merge(m, s, cm, cs);
    }
    ce_warp_merge(m, s);
    __shared__ float sm[32], ss[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    if (lane == 0) sm[warp] = m, ss[warp] = s;
    __syncthreads();
    if (warp) return;
    m = lane < nw ? sm[lane] : -FLT_MAX, s = lane < nw ? ss[lane] : 0.0f;
    ce_warp_merge(m, s);
    if (lane == 0) maxes[i] = m, stats[i] = m, stats[N + i] = s;
}
// sums[i] = the local sum rescaled to the row's maximum over the vocabulary shards; sums[N + i]
// the target's logit (nonzero on the shard that holds it).
__global__ void ce_rescale_kernel(float* sums, const float* stats, const float* maxes, const bf16* logits,
                                  const int* targets, int N, int vocab_local, int vocab_start) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int r = targets[i] - vocab_start;
    sums[i] = stats[N + i] * expf(stats[i] - maxes[i]);
    sums[N + i] = (r >= 0 && r < vocab_local) ? bf2f(logits[(size_t)i * vocab_local + r]) : 0.0f;
}
__global__ void ce_finish_kernel(float* losses, bf16* dlogits, const float* maxes, const float* sums,
                                 const int* targets, int N, int vocab_local, int vocab_start, int vn,
                                 float dloss_scale) {
    int i = blockIdx.x, ignored = targets[i] < 0;  // padding (layout/packing.h): loss 0, gradient 0
    float m = maxes[i], inv = 1.0f / sums[i], x[8];
    if (threadIdx.x == 0) losses[i] = ignored ? 0.0f : logf(sums[i]) + m - sums[N + i];
    if (!dlogits) return;
    bf16* d = dlogits + (size_t)i * vocab_local;
    int r = targets[i] - vocab_start;
    for (int j = threadIdx.x * 8; j < vocab_local; j += blockDim.x * 8) {  // each chunk read then written by one thread
        load8(x, d + j, vocab_local - j);
        #pragma unroll
        for (int k = 0; k < 8; k++) {
            x[k] = j + k < vn && !ignored ? expf(x[k] - m) * inv * dloss_scale : 0.0f;
            if (j + k == r) x[k] -= dloss_scale;
        }
        store8(d + j, x, vocab_local - j);
    }
}
static int ce_valid_cols(int vocab_local, int vocab_start, int vocab) {
    return vocab - vocab_start < vocab_local ? vocab - vocab_start : vocab_local;
}
// maxes: N; stats: 2N (this rank's row maxima, and the sums of exponentials relative to them).
static void crossentropy_local_max_gpu(float* maxes, float* stats, const bf16* logits, int N, int vocab_local,
                                       int vocab_start, int vocab, cudaStream_t s) {
    if (N <= 0) return;
    ce_stats_kernel<<<N, CE_THREADS, 0, s>>>(maxes, stats, logits, N, vocab_local,
                                             ce_valid_cols(vocab_local, vocab_start, vocab));
    launchCheck();
}
// sums: 2N floats, from stats (crossentropy_local_max_gpu's), the all-reduced maxes and one
// logit a row (the target's).
static void crossentropy_local_sums_gpu(float* sums, const float* stats, const float* maxes, const bf16* logits,
                                        const int* targets, int N, int vocab_local, int vocab_start, cudaStream_t s) {
    if (N <= 0) return;
    ce_rescale_kernel<<<cdiv(N, 256), 256, 0, s>>>(sums, stats, maxes, logits, targets, N, vocab_local, vocab_start);
    launchCheck();
}
// losses (N); dlogits (the logits, replaced in place by (softmax - onehot) * dloss_scale) or NULL.
static void crossentropy_finish_gpu(float* losses, bf16* dlogits, const float* maxes, const float* sums,
                                    const int* targets, int N, int vocab_local, int vocab_start, int vocab,
                                    float dloss_scale, cudaStream_t s) {
    if (N <= 0) return;
    ce_finish_kernel<<<N, CE_THREADS, 0, s>>>(losses, dlogits, maxes, sums, targets, N, vocab_local, vocab_start,
                                              ce_valid_cols(vocab_local, vocab_start, vocab), dloss_scale);
    launchCheck();
}

#endif
