// backend/gpu/attention.cuh: RoPE in place on the q and k heads of qkv rows, and causal
// self-attention over whole sequences with grouped-query heads (flash attention on tensor
// cores): qkv (B*T x (H + 2 KV)*hd) -> out (B*T x H*hd, bf16) and lse (B x H x T, fp32);
// the backward overwrites dqkv. Head sizes 16, 32, 64, 128.
#ifndef GPU_ATTENTION_CUH
#define GPU_ATTENTION_CUH

#include "backend/gpu/common.cuh"
#include "layout/activations.h"  // attn_dq_splits: the backward's dQ buffer

// RoPE in place on the first n_heads heads of each row (pass H + KV for q and k of qkv),
// pairs (2j, 2j+1), angle pos * theta^(-2j/hd) (the model's base), pos = positions[row % T] (device ints: the
// sequence position of each of the T rows a sequence has on this rank, which context
// parallelism permutes); sign -1 is the backward (rotation by the opposite angle, applied
// to dqkv). Same float formula as the CPU.
__global__ void rope_kernel(bf16* x, int N, const int* positions, int T, int stride, int n_heads, int hd, float theta,
                            float sign) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int half = hd / 2;
    if (idx >= (size_t)N * n_heads * half) return;
    int j = (int)(idx % half), h = (int)((idx / half) % n_heads);
    size_t i = idx / ((size_t)half * n_heads);
    int pos = positions[i % T];
    float ang = pos * powf(theta, -2.0f * j / hd);
    float c = cosf(ang), s = sign * sinf(ang);
    bf16* p = x + i * stride + (size_t)h * hd + 2 * j;
    float a = bf2f(p[0]), b = bf2f(p[1]);
    p[0] = f2bf(a * c - b * s);
    p[1] = f2bf(a * s + b * c);
}
static void rope_apply_gpu(bf16* qkv, int N, const int* positions, int T, int stride, int n_heads, int hd,
                           float theta, float sign, cudaStream_t s) {
    size_t n = (size_t)N * n_heads * (hd / 2);
    if (!n) return;
    rope_kernel<<<cdiv(n, 256), 256, 0, s>>>(qkv, N, positions, T, stride, n_heads, hd, theta, sign);
    launchCheck();
}

// ----------------------------------------------------------------------------
// Causal self-attention with grouped-query heads, flash-attention style (Dao et al. 2022;
// the loop order of FlashAttention-2): the forward keeps a running max and sum per query
// (online softmax, Milakov & Gimelshein 2018) and stores only the logsumexp lse (B, H, T);
// the backward recomputes each probability as exp(s - lse) tile by tile. No T x T matrix
// exists at any time.
//
// Why our own kernel and not cuDNN's SDPA: it keeps the build to the CUDA toolkit (no
// cuDNN frontend, graph building or version matrix), it reads qkv in this program's
// [q H*hd | k KV*hd | v KV*hd] row layout with GQA directly (no transposes or copies),
// and it is short enough to check against the CPU reference line by line.
//
// The products run on tensor cores through the PTX instructions mma.m16n8k16 (bf16 in,
// fp32 accumulators) and ldmatrix, whose register layouts the PTX ISA documents (the
// emulator's comment on mma_16816 restates them). Because the layout is known, a score
// tile stays in the accumulator registers: the row max and sum of the online softmax are
// two lane shuffles (the 4 lanes g*4 .. g*4+3 share rows g and g + 8), and the
// accumulator of S = Q K^T, rounded to bf16 pairs, is already the A operand of P V (as in
// FlashAttention-2). Scores are kept in log2 units (exp2 is one instruction).
//
// Work split: the forward's is FwdTile's, the backward's BwdTile's (below); context
// parallelism's ring steps (attention_block.cuh) run the same design over the rows of a step.
// qkv row stride is (H + 2*KV) * hd; out / dout rows are H * hd. Head sizes 16, 32, 64, 128.
//
// Documents (doc: B x T device ints, data/data.h; NULL: one document): query q sees keys
// [doc[q], q]. doc is nondecreasing along a sequence, so a query block's first row has the
// smallest first key: its key loop starts at the tile holding it, a warp skips tiles that
// end before its first row's document, and a key block's query loop stops at the first
// query whose document starts after its last key. A tile may hold keys before a row's
// document, so a row can have seen no key yet after a tile (its max stays -inf: nothing
// moves, as in the cp blocks). The kernels are compiled twice, with and without documents
// (DOC): without, they are the unmasked kernels (no registers spent on the documents: at head
// size 64 the masked ones spill a few bytes, which the unmasked ones do not).

#ifndef CUDA_EMU_H  // the emulator runs these as warp exchanges (emu/cuda_emu.h)
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// ldmatrix at a shared-memory address (smem_t, common.cuh): the forward computes each lane's
// address once and adds constant offsets, which ptxas folds into the instruction (from a
// generic pointer it kept one converted address per fragment in registers).
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], smem_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], smem_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
#endif
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16* row) { ldsm_x4(r, smem_addr(row)); }
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16* row) { ldsm_x4_t(r, smem_addr(row)); }
static const float ATT_LOG2E = 1.4426950408889634f;

// The first key query row q of sequence b sees: its document's start (doc: B x T; 0
// without documents); a row past T (a block's padding) reads the last row's.
template <bool DOC>
__device__ __forceinline__ int att_doc(const int* doc, int b, int T, int q) {
    return DOC ? doc[(size_t)b * T + min(q, T - 1)] : 0;
}

// The accumulators s[NT][4] (fp32, 16 x 8 NT) as the bf16 A operands p[NT / 2][4] of the
// next product: the accumulator pair of columns 2t, 2t+1 is the A register of those columns.
template <int NT>
__device__ __forceinline__ void att_to_a(uint32_t (*p)[4], const float (*s)[4]) {
    #pragma unroll
    for (int k = 0; k < NT / 2; k++) {
        p[k][0] = pack_bf16x2(s[2 * k][0], s[2 * k][1]);
        p[k][1] = pack_bf16x2(s[2 * k][2], s[2 * k][3]);
        p[k][2] = pack_bf16x2(s[2 * k + 1][0], s[2 * k + 1][1]);
        p[k][3] = pack_bf16x2(s[2 * k + 1][2], s[2 * k + 1][3]);
    }
}
// Rows r0 + g and r0 + g + 8 (those < T) of dst (pitch `pitch`) = acc * scale[0 | 1] as bf16.
template <int DT>
__device__ __forceinline__ void att_write(bf16* dst, size_t pitch, int r0, int T, const float (*acc)[4],
                                          const float scale[2]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = r0 + g + 8 * h;
        if (row >= T) continue;
        uint32_t* d = (uint32_t*)(dst + (size_t)row * pitch + 2 * t);
        #pragma unroll
        for (int n = 0; n < DT; n++) d[n * 4] = pack_bf16x2(acc[n][2 * h] * scale[h], acc[n][2 * h + 1] * scale[h]);
    }
}

// ----------------------------------------------------------------------------
// The forward at FlashAttention-2's design (Dao 2023, section 3.3), one block per (query
// block, head, sequence), 4 warps:
//   - BQ = 64 MT query rows a block, MT 16-row MMA tiles per warp (MT = 2: 128 rows, the
//     design's size; each K / V fragment read from shared memory then feeds MT products);
//   - key tiles of BK rows (64 or 128); Q, one K tile and one V tile live in dynamic shared
//     memory ((BQ + 2 BK) (HD + 8) bf16: up to 104 KiB, cudaFuncSetAttribute raises the
//     48 KiB default);
//   - the loads are cp.async in FA2's two stages: V of tile j is fetched while S = Q K_j^T
//     runs, K of tile j + 1 while tile j's softmax and P V run (one __syncthreads each);
//   - Q held in registers as MMA A fragments (QREG; at head size 128 with MT 2 the 64
//     registers it needs would push the accumulators into spills, so there Q stays in shared
//     memory, read by ldmatrix per product: a tile parameter);
//   - the causal / document mask is computed only on tiles that need it (those holding a
//     key after one of the warp's rows, or before one of its rows' document starts); other
//     tiles go straight to the softmax;
//   - scores stay raw, the scale is folded into the exponent: p = exp2(s sl2 - m sl2), one
//     FMA and one ex2 per score (sl2 = log2(e) / sqrt(hd)).
// The last query blocks (most key tiles) are launched first, so short ones fill the tail.
template <int HD, int MT_, int BK_, bool QREG>
struct FwdTile {
    static constexpr int MT = MT_, BK = BK_;         // 16-row MMA tiles a warp, keys of a tile
    static constexpr int NW = 4, BQ = 16 * MT * NW;  // warps, query rows of the block
    static constexpr int LD = HD + 8;                // bf16 row pitch in shared memory (16-byte rows, banks skewed)
    static constexpr int NT = BK / 8, DT = HD / 8, KS = HD / 16;  // 8-key column tiles, 8-wide output tiles, k steps
    static constexpr size_t SMEM = (size_t)(BQ + 2 * BK) * LD * sizeof(bf16);
};

// Where a forward block works (the whole-sequence kernel's and the ring step's alike): its
// dynamic shared memory carved into Q [BQ][LD], K [BK][LD], V [BK][LD]; this thread's warp,
// lane and row g of the warp's 16-row tiles (the lane holds rows g and g + 8); the block's
// sequence b, query head h, first query row q_blk (the last query blocks are launched first:
// they have the most keys) and the warp's first row q0.
struct AttFwdPlace {
    bf16 *Qs, *Ks, *Vs;
    int warp, lane, g, b, h, q_blk, q0;
};
template <class F>
__device__ __forceinline__ AttFwdPlace att_fwd_place(unsigned char* smem) {
    AttFwdPlace p;
    p.Qs = (bf16*)smem, p.Ks = p.Qs + F::BQ * F::LD, p.Vs = p.Ks + F::BK * F::LD;
    p.warp = threadIdx.x / 32, p.lane = threadIdx.x % 32, p.g = p.lane / 4;
    p.b = blockIdx.z, p.h = blockIdx.y, p.q_blk = (gridDim.x - 1 - blockIdx.x) * F::BQ;
    p.q0 = p.q_blk + p.warp * 16 * F::MT;
    return p;
}
// This warp's MT 16-row tiles of shared Q (rows from q, pitch HD + 8) as A fragments qf, held in
// registers for every key tile.
template <int HD, int MT>
__device__ __forceinline__ void att_q_frags(uint32_t (*qf)[HD / 16][4], const bf16* q) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int m = 0; m < MT; m++)
        #pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            ldsm_x4(qf[m][ks], q + (m * 16 + lane % 16) * (HD + 8) + ks * 16 + lane / 16 * 8);
}
// The sum of v over the 4 lanes that hold a row of an MMA tile (lanes 4g .. 4g + 3).
__device__ __forceinline__ float att_row_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Rows [r0, r0 + N) of a T-row bf16 matrix (row 0 at a, pitch sa elements) into shared
// dst[N][LD] by cp.async, 16 bytes per copy, the NW warps' threads together; rows >= T
// become zeros. The caller commits and waits.
template <int HD, int N, int NW>
__device__ __forceinline__ void att_load(bf16* dst, const bf16* a, int sa, int r0, int T) {
    constexpr int THREADS = NW * 32, PER = N * HD / 8 / THREADS;
    static_assert(PER * THREADS == N * HD / 8, "attention: a tile is not a whole number of copies per thread");
    #pragma unroll
    for (int i = 0; i < PER; i++) {
        int e = threadIdx.x + i * THREADS, r = e / (HD / 8), c = e % (HD / 8) * 8;
        bool in = r0 + r < T;
        cp_async16(dst + r * (HD + 8) + c, in ? a + (size_t)(r0 + r) * sa + c : a, in);
    }
}

// s[MT][NT][4] = Q K^T for the warp's MT row tiles: Q from registers (qf, QREG) or from
// shared q (pitch LD), the key rows [0, 8 NT) of shared k. Each K fragment serves MT products.
template <int HD, int MT, int NT, bool QREG>
__device__ __forceinline__ void att_qk(float (*s)[NT][4], const uint32_t (*qf)[HD / 16][4], const bf16* q,
                                       const bf16* k) {
    constexpr int LD = HD + 8;
    int lane = threadIdx.x % 32;
    // this lane's row of the ldmatrix matrices: q rows 0-7 | 8-15, cols 0 | 8; k rows 0-7 | 8-15, cols 0 | 8
    smem_t qa = smem_addr(q + (lane % 16) * LD + lane / 16 * 8);
    smem_t ka = smem_addr(k + (lane % 8 + lane / 16 * 8) * LD + lane / 8 % 2 * 8);
    #pragma unroll
    for (int m = 0; m < MT; m++)
        #pragma unroll
        for (int n = 0; n < NT; n++) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
    #pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        uint32_t a[MT][4];
        #pragma unroll
        for (int m = 0; m < MT; m++) {
            if (QREG) a[m][0] = qf[m][ks][0], a[m][1] = qf[m][ks][1], a[m][2] = qf[m][ks][2], a[m][3] = qf[m][ks][3];
            else ldsm_x4(a[m], qa + 2 * (m * 16 * LD + ks * 16));
        }
        #pragma unroll
        for (int n = 0; n < NT; n += 2) {  // matrices: k rows 8n | 8n+8, cols 16ks | 16ks+8
            uint32_t bf[4];
            ldsm_x4(bf, ka + 2 * (n * 8 * LD + ks * 16));
            #pragma unroll
            for (int m = 0; m < MT; m++) mma_16816(s[m][n], a[m], bf), mma_16816(s[m][n + 1], a[m], bf + 2);
        }
    }
}
// o[MT][DT][4] += P V: p the probabilities as A fragments (p[m][kk] for keys 16kk ..), v the
// key rows [0, BK) of shared memory (pitch LD), HD columns read transposed; each V fragment serves MT
// products.
template <int HD, int MT, int BK, int LD = HD + 8>
__device__ __forceinline__ void att_pv_mt(float (*o)[HD / 8][4], const uint32_t (*p)[BK / 16][4], const bf16* v) {
    int lane = threadIdx.x % 32;
    smem_t va = smem_addr(v + (lane % 8 + lane / 8 % 2 * 8) * LD + lane / 16 * 8);  // this lane's row
    #pragma unroll
    for (int kk = 0; kk < BK / 16; kk++)
        #pragma unroll
        for (int d = 0; d < HD / 8; d += 2) {  // transposed matrices: v rows 16kk | 16kk+8, cols 8d | 8d+8
            uint32_t bf[4];
            ldsm_x4_t(bf, va + 2 * (kk * 16 * LD + d * 8));
            #pragma unroll
            for (int m = 0; m < MT; m++) mma_16816(o[m][d], p[m][kk], bf), mma_16816(o[m][d + 1], p[m][kk], bf + 2);
        }
}

// The causal and document mask on one score tile (keys kt ..): score -inf where key j is
// after query q or before q's first key first[m][r] (rows q0 + 16m + g + 8r).
template <int MT, int NT, bool DOC>
__device__ __forceinline__ void att_mask(float (*s)[NT][4], int kt, int q0, const int (*first)[2]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int m = 0; m < MT; m++)
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2, q = q0 + 16 * m + g + 8 * (i / 2);
                if (j > q || (DOC && j < first[m][i / 2])) s[m][n][i] = -INFINITY;
            }
}

// The online softmax of one score tile (raw scores s, rows' running max m and this lane's
// part of their sums l), rescaling the output rows o; s becomes the probabilities as bf16 A
// fragments p. A row that has seen no key yet (with documents only) stays as it is.
template <int HD, int MT, int NT, bool DOC>
__device__ __forceinline__ void att_softmax(uint32_t (*p)[NT / 2][4], float (*s)[NT][4], float (*o)[HD / 8][4],
                                            float (*m)[2], float (*l)[2], float sl2) {
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float mx[2] = {m[mt][0], m[mt][1]}, shift[2];
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) mx[i / 2] = fmaxf(mx[i / 2], s[mt][n][i]);
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));  // the 4 lanes of a row
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            shift[r] = DOC && mx[r] == -INFINITY ? 0.0f : mx[r] * sl2;
            float corr = exp2f(fmaf(m[mt][r], sl2, -shift[r]));  // 0 on the row's first tile with a key
            m[mt][r] = mx[r], l[mt][r] *= corr;
            #pragma unroll
            for (int d = 0; d < HD / 8; d++) o[mt][d][2 * r] *= corr, o[mt][d][2 * r + 1] *= corr;
        }
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                s[mt][n][i] = exp2f(fmaf(s[mt][n][i], sl2, -shift[i / 2]));
                l[mt][i / 2] += s[mt][n][i];
            }
        att_to_a<NT>(p[mt], s[mt]);
    }
}

template <int HD, int MT, int BK, bool QREG, bool DOC>
__global__ void __launch_bounds__(128)
attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int H, int KV, const int* doc) {
    typedef FwdTile<HD, MT, BK, QREG> F;
    constexpr int BQ = F::BQ, LD = F::LD, NT = F::NT, DT = F::DT, NW = F::NW;
    extern __shared__ __align__(16) unsigned char att_smem[];
    const auto [Qs, Ks, Vs, warp, lane, g, b, h, q_blk, q0] = att_fwd_place<F>(att_smem);
    int stride = (H + 2 * KV) * HD, kvh = h / (H / KV);
    const bf16* base = qkv + (size_t)b * T * stride;
    const bf16 *kg = base + (H + kvh) * HD, *vg = base + (H + KV + kvh) * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);

    int kt = att_doc<DOC>(doc, b, T, q_blk) / BK * BK, k_end = min(q_blk + BQ, T);  // the key tiles that matter
    att_load<HD, BQ, NW>(Qs, base + h * HD, stride, q_blk, T);
    att_load<HD, BK, NW>(Ks, kg, stride, kt, T);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[QREG ? MT : 1][HD / 16][4];
    if (QREG) att_q_frags<HD, MT>(qf, Qs + warp * 16 * MT * LD);
    float o[MT][DT][4] = {}, m[MT][2], l[MT][2];
    int first[MT][2];  // each row's first key (its document's start)
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
        for (int r = 0; r < 2; r++)
            m[mt][r] = -INFINITY, l[mt][r] = 0.0f, first[mt][r] = att_doc<DOC>(doc, b, T, q0 + 16 * mt + g + 8 * r);
    int warp_first = att_doc<DOC>(doc, b, T, q0), warp_last_first = att_doc<DOC>(doc, b, T, q0 + 16 * MT - 1);
    for (; kt < k_end; kt += BK) {
        att_load<HD, BK, NW>(Vs, vg, stride, kt, T);  // stage 1: V of this tile, during Q K^T
        cp_async_commit();
        // warp-uniform: the tile is after all this warp's rows, or before all their documents
        bool active = kt <= q0 + 16 * MT - 1 && !(DOC && kt + BK <= warp_first);
        float s[MT][NT][4];
        if (active) att_qk<HD, MT, NT, QREG>(s, qf, Qs + warp * 16 * MT * LD, Ks);
        cp_async_wait<0>();
        __syncthreads();  // V landed for everyone; every warp is done with K
        if (kt + BK < k_end) att_load<HD, BK, NW>(Ks, kg, stride, kt + BK, T);  // stage 2: the next K, during softmax
        cp_async_commit();
        if (active) {
            if (kt + BK - 1 > q0 || (DOC && kt < warp_last_first)) att_mask<MT, NT, DOC>(s, kt, q0, first);
            uint32_t p[MT][NT / 2][4];
            att_softmax<HD, MT, NT, DOC>(p, s, o, m, l, sl2);
            att_pv_mt<HD, MT, BK>(o, p, Vs);
        }
        cp_async_wait<0>();
        __syncthreads();  // the next K landed; every warp is done with V
    }
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float inv[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            float sum = att_row_sum(l[mt][r]);
            inv[r] = 1.0f / sum;
            int q = q0 + 16 * mt + g + 8 * r;
            if (lane % 4 == 0 && q < T) lse[((size_t)b * H + h) * T + q] = m[mt][r] / sqrtf((float)HD) + logf(sum);
        }
        att_write<DT>(out + (size_t)b * T * H * HD + h * HD, (size_t)H * HD, q0 + 16 * mt, T, o[mt], inv);
    }
}

// Dsum[b,h,t] = sum_d dout * out: the softmax-backward term sum_j P_ij dP_ij (FlashAttention-2).
// One thread per 8 elements (16-byte loads, load8), the hd / 8 lanes of a row summed by shuffles.
__global__ void attention_dsum_kernel(float* dsum, const bf16* dout, const bf16* out, int B, int T, int H, int hd) {
    size_t e = chunk8(), n = (size_t)B * T * H * hd, row = e / hd;  // rows (b, t, h) in out's order
    float d[8], o[8], s = 0.0f;
    if (e < n) {
        load8(d, dout + e, n - e), load8(o, out + e, n - e);
        for (int k = 0; k < 8; k++) s += d[k] * o[k];
    }
    for (int lanes = hd / 16; lanes > 0; lanes >>= 1) s += __shfl_xor_sync(0xffffffffu, s, lanes);  // every lane runs it
    if (e < n && e % hd == 0) {
        size_t bt = row / H;
        int h = (int)(row % H), b = (int)(bt / T), t = (int)(bt % T);
        dsum[((size_t)b * H + h) * T + t] = s;
    }
}

// ----------------------------------------------------------------------------
// The backward at FlashAttention-2's design (Dao 2023, algorithm 2): one pass over the key
// blocks, each block of BN = 64 keys of one (sequence, kv head) walking the query tiles of
// BQ rows that see it (from the diagonal on; with documents, until the first query whose
// document starts after its last key), for each of the H / KV query heads sharing the kv
// head. Per query tile, five products on tensor cores, 16 keys per warp:
//   S^T = K Q^T and dP^T = V dO^T (K and V held in registers as A fragments: KVREG; at head
//   size 128 they stay in shared memory), P^T = exp2(S^T sl2 - lse), dS^T = P^T (dP^T - Dsum),
//   dV += P^T dO and dK += dS^T Q (in registers until the key block is done), then
//   dQ_tile += dS K: dS^T goes through shared memory, and the 4 warps split the dQ product
//   into BQ / 16 row groups x 64 / BQ column parts (ldmatrix.trans reads dS^T as dS).
// BQ is 64 up to head size 64 and 32 at 128: there the dK, dV accumulators alone are 128
// registers a thread, and a 64-row tile's S^T, dP^T (64 more) and a whole-width dQ product
// (64 more) spilled; with 32 rows and half-width dQ parts, none does.
// Q, dO, lse, Dsum (and the documents' first keys) come in two stages, as FA2's kernel loads
// them: the next tile's Q (cp.async) with its lse, Dsum at the start of a tile, its dO after
// this tile's dS^T, both landing at the tile's end (one wait, one __syncthreads).
// dQ is summed in fp32, deterministically: the grid is (splits, kv heads, sequences), each
// split owns its own fp32 dQ (dq_acc: splits x B*T x H*hd) and walks its key blocks in a
// fixed order (zig-zag over the splits: s, 2S-1-s, 2S+s, ..., so causal work is even), so
// every dQ element is a fixed sequence of plain adds; attention_dq_finish sums the splits in
// order into bf16 dq. Splits are as many as fill the GPU (2 blocks an SM) up to 8, and at
// most what the dQ buffer sized at start-up holds (attention_buffers_init).
// The mask is evaluated only on tiles that need it.
template <int HD, bool KVREG, int BQ_>
struct BwdTile {
    static constexpr int NW = 4, BN = 64, BQ = BQ_;  // warps, keys of a block, queries of a tile
    static constexpr int LD = HD + 8, LDS = BQ + 8;  // bf16 pitches: K V Q dO rows, dS^T rows
    static constexpr int NT = BQ / 8, DT = HD / 8;
    static constexpr int QROWS = BQ / 16, QCOLS = NW / QROWS;  // the dQ product's warps: row groups x column parts
    // one stage: Q, dO [BQ][LD] bf16, then lse, Dsum (fp32), the first keys and (the ring's) last keys (int) of
    // BQ rows
    static constexpr int STAGE = 2 * BQ * LD * 2 + 4 * BQ * 4;
    static constexpr size_t SMEM = (size_t)2 * BN * LD * 2 + (size_t)BN * LDS * 2 + 2 * STAGE;
    static_assert(QROWS * QCOLS == NW && STAGE % 16 == 0, "attention backward: tile shape");
};

// This warp's dS^T (16 keys x BQ queries, as A fragments d[BQ / 16][4]) into shared dst rows
// [0, 16) (pitch LDS); zero: zeros instead.
template <int BQ, int LDS>
__device__ __forceinline__ void att_store_a(bf16* dst, const uint32_t (*d)[4], bool zero) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)
        #pragma unroll
        for (int r = 0; r < 4; r++)  // a[r]: row g + 8 (r % 2), columns 16 kk + 2t + 8 (r / 2), +1
            *(uint32_t*)(dst + (g + 8 * (r % 2)) * LDS + kk * 16 + 2 * t + 8 * (r / 2)) = zero ? 0u : d[kk][r];
}

// One query tile of the key block (keys j0 .. j0 + 15 of this warp, queries qt ..): S^T, dP^T,
// the probabilities and dS^T, dV and dK, and this warp's dS^T into shared dst. Query c sees
// keys [firsts[c], qt + c], or with LASTS (the ring's) [firsts[c], lasts[c]].
template <int HD, bool KVREG, int BQ, bool DOC, bool LASTS = false>
__device__ __forceinline__ void att_bwd_tile(float (*dk)[4], float (*dv)[4], const uint32_t (*kf)[HD / 16][4],
                                             const uint32_t (*vf)[HD / 16][4], const bf16* Ks, const bf16* Vs, const bf16* Qs,
                                             const bf16* dOs, const float* lses, const float* dss, const int* firsts,
                                             const int* lasts, bf16* dst, int qt, int j0, float sl2) {
    typedef BwdTile<HD, KVREG, BQ> Bt;
    constexpr int NT = Bt::NT;
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    float st[1][NT][4], dpt[1][NT][4];
    att_qk<HD, 1, NT, KVREG>(st, kf, Ks, Qs);    // S^T = K Q^T
    att_qk<HD, 1, NT, KVREG>(dpt, vf, Vs, dOs);  // dP^T = V dO^T
    // a query before a key, or a document start inside
    bool mask = (LASTS ? lasts[0] : qt) < j0 + 15 || (DOC && firsts[BQ - 1] > j0);
    #pragma unroll
    for (int n = 0; n < NT; n++)
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = n * 8 + 2 * t + i % 2, j = j0 + g + 8 * (i / 2);  // query column c, key row j
            bool seen = !mask || ((LASTS ? lasts[c] : qt + c) >= j && (!DOC || j >= firsts[c]));
            float p = seen ? exp2f(fmaf(st[0][n][i], sl2, -lses[c])) : 0.0f;
            st[0][n][i] = p;                              // P^T
            dpt[0][n][i] = p * (dpt[0][n][i] - dss[c]);   // dS^T
        }
    uint32_t pa[1][NT / 2][4], dsa[1][NT / 2][4];
    att_to_a<NT>(pa[0], st[0]);
    att_to_a<NT>(dsa[0], dpt[0]);
    att_pv_mt<HD, 1, BQ>((float(*)[HD / 8][4])dv, pa, dOs);  // dV += P^T dO
    att_pv_mt<HD, 1, BQ>((float(*)[HD / 8][4])dk, dsa, Qs);  // dK += dS^T Q
    att_store_a<BQ, Bt::LDS>(dst, dsa[0], false);
}

// A warp's 16 keys and values (shared rows k, v, pitch HD + 8) as A fragments kf, vf (KVREG).
template <int HD>
__device__ __forceinline__ void att_kv_frags(uint32_t (*kf)[4], uint32_t (*vf)[4], const bf16* k, const bf16* v) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        ldsm_x4(kf[ks], k + (lane % 16) * (HD + 8) + ks * 16 + lane / 16 * 8);
        ldsm_x4(vf[ks], v + (lane % 16) * (HD + 8) + ks * 16 + lane / 16 * 8);
    }
}

// This warp's part of dQ (16 queries of the tile at qt, HD / QCOLS columns) += dS K over the
// block's keys, into this split's fp32 dq (row pitch `pitch`, head h's columns), rows < T.
template <int HD, bool KVREG, int BQ>
__device__ __forceinline__ void att_bwd_dq(float* dq, int pitch, int qt, int T, const bf16* dSt, const bf16* Ks) {
    typedef BwdTile<HD, KVREG, BQ> Bt;
    constexpr int BN = Bt::BN, LDS = Bt::LDS, CW = HD / Bt::QCOLS;  // CW: the columns of a part
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int rg = warp % Bt::QROWS, c0 = warp / Bt::QROWS * CW;  // this warp's row group and first column
    // dS (16 queries x 16 keys) as A fragments: ldmatrix.trans of dS^T's matrices (keys 0-7 | 8-15, queries 0-7 | 8-15)
    uint32_t a[1][BN / 16][4];
    smem_t da = smem_addr(dSt + (lane / 16 * 8 + lane % 8) * LDS + rg * 16 + lane / 8 % 2 * 8);
    #pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) ldsm_x4_t(a[0][kk], da + 2 * kk * 16 * LDS);
    float acc[1][CW / 8][4] = {};
    att_pv_mt<CW, 1, BN, Bt::LD>(acc, a, Ks + c0);
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int q = qt + rg * 16 + g + 8 * h;
        if (q >= T) continue;
        float* d = dq + (size_t)q * pitch + c0 + 2 * t;
        #pragma unroll
        for (int c = 0; c < CW / 8; c++) d[c * 8] += acc[0][c][2 * h], d[c * 8 + 1] += acc[0][c][2 * h + 1];
    }
}

// Where a backward block works (the whole-sequence kernel's and the ring step's alike): its
// dynamic shared memory carved into K, V [BN][LD], dS^T [BN][LDS] and the two stages (BwdTile::
// STAGE bytes each); this thread's warp; the block's dQ split (of n_split), kv head and sequence b
// (of B).
struct AttBwdPlace {
    bf16 *Ks, *Vs, *dSt;
    unsigned char* stages;
    int warp, split, n_split, kvh, b, B;
};
template <class Bt>
__device__ __forceinline__ AttBwdPlace att_bwd_place(unsigned char* smem) {
    AttBwdPlace p;
    p.Ks = (bf16*)smem, p.Vs = p.Ks + Bt::BN * Bt::LD, p.dSt = p.Vs + Bt::BN * Bt::LD;
    p.stages = (unsigned char*)(p.dSt + Bt::BN * Bt::LDS);
    p.warp = threadIdx.x / 32;
    p.split = blockIdx.x, p.n_split = gridDim.x, p.kvh = blockIdx.y, p.b = blockIdx.z, p.B = gridDim.z;
    return p;
}
// One stage (at st): a query tile's Q and dO [BQ][HD + 8] bf16, then its rows' lse (log2 units)
// and Dsum (fp32), first keys and (the ring's) last keys (ints), BQ each.
struct AttBwdStage {
    bf16 *Qs, *dOs;
    float *lses, *dss;
    int *firsts, *lasts;
};
template <int HD, int BQ>
__device__ __forceinline__ AttBwdStage att_bwd_stage(unsigned char* st) {
    AttBwdStage t;
    t.Qs = (bf16*)st, t.dOs = t.Qs + BQ * (HD + 8);
    t.lses = (float*)(t.dOs + BQ * (HD + 8)), t.dss = t.lses + BQ;
    t.firsts = (int*)(t.dss + BQ), t.lasts = t.firsts + BQ;
    return t;
}

// The query tile at qt of head h into a stage (Q by cp.async, which the caller commits; lse in
// log2 units, Dsum and the rows' first keys by plain loads; rows >= T: zeros).
template <int HD, int BQ, bool DOC>
__device__ __forceinline__ void att_bwd_stage_q(unsigned char* stage, const bf16* base, int stride, const float* lse,
                                                const float* dsum, const int* doc, int b, int h, int H, int qt, int T) {
    const AttBwdStage t = att_bwd_stage<HD, BQ>(stage);
    att_load<HD, BQ, 4>(t.Qs, base + h * HD, stride, qt, T);
    for (int i = threadIdx.x; i < BQ; i += 128) {
        int q = qt + i;
        t.lses[i] = q < T ? lse[((size_t)b * H + h) * T + q] * ATT_LOG2E : 0.0f;
        t.dss[i] = q < T ? dsum[((size_t)b * H + h) * T + q] : 0.0f;
        t.firsts[i] = att_doc<DOC>(doc, b, T, q);
    }
}

template <int HD, bool KVREG, int BQ, bool DOC>
__global__ void __launch_bounds__(128)
attention_backward_kernel(bf16* dqkv, float* dq_acc, const bf16* dout, const bf16* qkv, const float* lse,
                          const float* dsum, int T, int H, int KV, const int* doc) {
    typedef BwdTile<HD, KVREG, BQ> Bt;
    constexpr int BN = Bt::BN, LD = Bt::LD, DT = Bt::DT, NW = Bt::NW;
    extern __shared__ __align__(16) unsigned char att_smem[];
    const auto [Ks, Vs, dSt, stages, warp, split, n_split, kvh, b, B] = att_bwd_place<Bt>(att_smem);
    int stride = (H + 2 * KV) * HD, group = H / KV, n_kb = (T + BN - 1) / BN;
    const bf16* base = qkv + (size_t)b * T * stride;
    const bf16* dout_b = dout + (size_t)b * T * H * HD;
    float* dq_b = dq_acc + ((size_t)split * B + b) * T * H * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);
    for (int round = 0;; round++) {
        int kb = round * n_split + (round % 2 ? n_split - 1 - split : split);  // zig-zag over the splits
        if (kb >= n_kb) break;
        int j_blk = kb * BN, j0 = j_blk + warp * 16, j_last = min(j_blk + BN, T) - 1;
        __syncthreads();  // the previous key block's tiles are used
        att_load<HD, BN, NW>(Ks, base + (H + kvh) * HD, stride, j_blk, T);
        att_load<HD, BN, NW>(Vs, base + (H + KV + kvh) * HD, stride, j_blk, T);
        // the first query tile (the diagonal's, of the group's first head: it always sees the block)
        int h = kvh * group, qt = j_blk, cur = 0;
        att_bwd_stage_q<HD, BQ, DOC>(stages, base, stride, lse, dsum, doc, b, h, H, qt, T);
        att_load<HD, BQ, NW>(att_bwd_stage<HD, BQ>(stages).dOs, dout_b + h * HD, H * HD, qt, T);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        uint32_t kf[1][HD / 16][4], vf[1][HD / 16][4];  // this warp's keys and values as A fragments (KVREG)
        if (KVREG) att_kv_frags<HD>(kf[0], vf[0], Ks + warp * 16 * LD, Vs + warp * 16 * LD);
        float dk[DT][4] = {}, dv[DT][4] = {};
        for (;;) {
            unsigned char* nst = stages + (cur ^ 1) * Bt::STAGE;
            const auto [Qs, dOs, lses, dss, firsts, lasts] = att_bwd_stage<HD, BQ>(stages + cur * Bt::STAGE);
            // the next tile: this head's next BQ queries while they see a key of the block, else the next head's
            // diagonal
            int nh = h, nqt = qt + BQ;
            if (nqt >= T || (DOC && att_doc<DOC>(doc, b, T, nqt) > j_last)) nh++, nqt = j_blk;
            bool next = nh < (kvh + 1) * group;
            if (next) att_bwd_stage_q<HD, BQ, DOC>(nst, base, stride, lse, dsum, doc, b, nh, H, nqt, T);
            cp_async_commit();
            // warp-uniform: every query is before this warp's keys, or in a document after them
            bool active = qt + BQ - 1 >= j0 && !(DOC && firsts[0] > j0 + 15);
            if (active)
                att_bwd_tile<HD, KVREG, BQ, DOC>(dk, dv, kf, vf, Ks + warp * 16 * LD, Vs + warp * 16 * LD, Qs, dOs,
                                                 lses, dss, firsts, NULL, dSt + warp * 16 * Bt::LDS, qt, j0, sl2);
            else att_store_a<BQ, Bt::LDS>(dSt + warp * 16 * Bt::LDS, NULL, true);
            if (next)  // the next dO
                att_load<HD, BQ, NW>(att_bwd_stage<HD, BQ>(nst).dOs, dout_b + nh * HD, H * HD, nqt, T);
            cp_async_commit();
            __syncthreads();  // dS^T is whole
            att_bwd_dq<HD, KVREG, BQ>(dq_b + h * HD, H * HD, qt, T, dSt, Ks);
            cp_async_wait<0>();
            __syncthreads();  // the next tile landed; every warp is done with this one and with dS^T
            if (!next) break;
            h = nh, qt = nqt, cur ^= 1;
        }
        const float scales[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
        att_write<DT>(dqkv + (size_t)b * T * stride + (H + kvh) * HD, stride, j0, T, dk, scales);
        att_write<DT>(dqkv + (size_t)b * T * stride + (H + KV + kvh) * HD, stride, j0, T, dv, one);
    }
}

// dq = scale * the splits' fp32 sums, added in split order, as bf16 into dqkv's q columns.
__global__ void attention_dq_finish_kernel(bf16* dqkv, const float* dq_acc, int n_split, int B, int T, int H, int KV,
                                           int hd, float scale) {
    size_t e = chunk8(), n = (size_t)B * T * H * hd, row = e / ((size_t)H * hd);
    if (e >= n) return;
    float s[8] = {}, x[8];
    for (int k = 0; k < n_split; k++) {
        load8(x, dq_acc + (size_t)k * n + e, n - e);
        for (int i = 0; i < 8; i++) s[i] += x[i];
    }
    for (int i = 0; i < 8; i++) s[i] *= scale;
    store8(dqkv + row * (H + 2 * KV) * hd + e % ((size_t)H * hd), s, 8);  // H * hd is a multiple of 8
}

// ----------------------------------------------------------------------------
// The forward's tile registry: each head size has a few configurations compiled in, chosen
// at run time (--attn-tile NAME|auto, test_gpu --att-sweep times them all). The name says
// the query rows of a block and the keys of a tile; q_regs whether Q is held in registers.
typedef void (*AttFwdLaunch)(bf16* out, float* lse, const bf16* qkv, int B, int T, int H, int KV, const int* doc,
                             cudaStream_t s);
struct AttFwdTile {
    const char* name;
    int hd, bq, bk, q_regs;
    AttFwdLaunch launch;
};

// One launch of a configuration, raising its kernels' dynamic shared memory limit at the first.
template <int HD, int MT, int BK, bool QREG>
static void attention_forward_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int H, int KV,
                                     const int* doc, cudaStream_t s) {
    typedef FwdTile<HD, MT, BK, QREG> F;
    static int smem_set;
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(attention_forward_kernel<HD, MT, BK, QREG, true>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F::SMEM));
        cudaCheck(cudaFuncSetAttribute(attention_forward_kernel<HD, MT, BK, QREG, false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F::SMEM));
        smem_set = 1;
    }
    dim3 grid(cdiv(T, F::BQ), H, B), block(F::NW * 32);
    if (doc)
        attention_forward_kernel<HD, MT, BK, QREG, true><<<grid, block, F::SMEM, s>>>(out, lse, qkv, T, H, KV, doc);
    else attention_forward_kernel<HD, MT, BK, QREG, false><<<grid, block, F::SMEM, s>>>(out, lse, qkv, T, H, KV, doc);
    launchCheck();
}
// The first of each head size is its default (what --attn-tile auto takes without a measured
// table). Registers and spills of each: docs/GPU.md (dev/ptxas_attention.py); none spills.
// Left out because they spill: hd 64 q128k128 (Q in registers 472 B, in shared memory
// 160 B), hd 128 q128k64 (Q in shared memory, 208 B), q64k128 (60 B).
static const AttFwdTile ATT_FWD_TILES[] = {
    {"q128k64", 16, 128, 64, 1, attention_forward_launch<16, 2, 64, true>},
    {"q128k64", 32, 128, 64, 1, attention_forward_launch<32, 2, 64, true>},
    {"q128k64", 64, 128, 64, 1, attention_forward_launch<64, 2, 64, true>},
    {"q128k32", 64, 128, 32, 1, attention_forward_launch<64, 2, 32, true>},
    {"q64k64", 64, 64, 64, 1, attention_forward_launch<64, 1, 64, true>},
    {"q128k32", 128, 128, 32, 0, attention_forward_launch<128, 2, 32, false>},
    {"q64k64", 128, 64, 64, 1, attention_forward_launch<128, 1, 64, true>},
};
static const int N_ATT_FWD_TILES = (int)(sizeof(ATT_FWD_TILES) / sizeof(ATT_FWD_TILES[0]));
static const AttFwdTile* att_fwd_pick[129];  // by head size: the chosen tile (NULL: the default)

// The tile called `name` at head size hd (NULL: none); the default where name is NULL.
static const AttFwdTile* attention_fwd_tile_find(const char* name, int hd) {
    for (int i = 0; i < N_ATT_FWD_TILES; i++)
        if (ATT_FWD_TILES[i].hd == hd && (!name || !strcmp(ATT_FWD_TILES[i].name, name))) return &ATT_FWD_TILES[i];
    return NULL;
}
// The forward tile the launches at head size hd use.
static const AttFwdTile* attention_fwd_tile(int hd) {
    return hd >= 0 && hd <= 128 && att_fwd_pick[hd] ? att_fwd_pick[hd] : attention_fwd_tile_find(NULL, hd);
}
// Use tile `name` at head size hd (NULL: the default); 0 if there is none of that name.
static int attention_fwd_tile_set(const char* name, int hd) {
    const AttFwdTile* t = attention_fwd_tile_find(name, hd);
    if (!t || hd < 0 || hd > 128) return 0;
    att_fwd_pick[hd] = t;
    return 1;
}

// The backward's configurations: one design (BwdTile) per head size, K and V in registers
// up to head size 64 (kv_regs), in shared memory at 128; the sweep times them as it does the
// forward's tiles.
typedef void (*AttBwdLaunch)(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum,
                             int B, int T, int H, int KV, const int* doc, cudaStream_t s);
struct AttBwdTile {
    const char* name;
    int hd, kv_regs;
    AttBwdLaunch launch;
};
static int att_bwd_blocks = 264;  // blocks the splits aim at: 2 an SM (attention_buffers_init; 132 SMs until then)
static float* att_dq_acc;         // the splits' fp32 dQ (layout/activations.h SC_DQ_ACC), att_dq_acc_n floats
static size_t att_dq_acc_n;
static float* att_dsum;           // Dsum of the backward's query rows (SC_DSUM), att_dsum_n floats
static size_t att_dsum_n;
static const void* att_dsum_of;   // the output gradient the ring's Dsum was computed from (attention_block.cuh)
static int att_bufs_owned;        // att_dq_acc and att_dsum are attention_buffers_reserve's own allocations
static void attention_buffers_free(void) {
    if (att_bufs_owned) {
        cudaCheck(cudaFree(att_dq_acc));
        cudaCheck(cudaFree(att_dsum));
    }
    att_dq_acc = att_dsum = NULL, att_dq_acc_n = att_dsum_n = 0, att_bufs_owned = 0, att_dsum_of = NULL;
}
// The device's SM count (the backward's splits aim at 2 blocks on each) and the buffers the
// trainer carved with its scratch at start-up: the dQ splits (n_dq floats at dq_acc) and Dsum
// (n_dsum floats at dsum).
static void attention_buffers_init(int sms, float* dq_acc, size_t n_dq, float* dsum, size_t n_dsum) {
    attention_buffers_free();
    att_bwd_blocks = 2 * sms, att_dq_acc = dq_acc, att_dq_acc_n = n_dq, att_dsum = dsum, att_dsum_n = n_dsum;
}
// For callers without the trainer's buffers (tests, benchmarks): buffers of this process's own
// for a backward of B sequences of T rows, H query and KV kv heads.
static void attention_buffers_reserve(int B, int T, int H, int KV, int hd) {
    size_t n = (size_t)attn_dq_splits(B, T, KV, att_bwd_blocks / 2) * B * T * H * hd, rows = (size_t)B * T * H;
    if (n <= att_dq_acc_n && rows <= att_dsum_n) return;
    int blocks = att_bwd_blocks;
    attention_buffers_free();
    cudaCheck(cudaMalloc(&att_dq_acc, sizeof(float) * n));
    cudaCheck(cudaMalloc(&att_dsum, sizeof(float) * rows));
    att_bwd_blocks = blocks, att_dq_acc_n = n, att_dsum_n = rows, att_bufs_owned = 1;
}
// Dsum = rowsum(dout * out) of B*T*H rows (attention_dsum_kernel) into att_dsum.
static void attention_dsum_gpu(const bf16* dout, const bf16* out, int B, int T, int H, int hd, cudaStream_t s) {
    size_t rows = (size_t)B * T * H;
    if (rows > att_dsum_n)
        fail("attention backward: the Dsum buffer (%zu floats) < B*H*T = %zu (sized at start-up for fewer rows)",
             att_dsum_n, rows);
    attention_dsum_kernel<<<grid8(rows * hd), 256, 0, s>>>(att_dsum, dout, out, B, T, H, hd);
    launchCheck();
}

template <int HD, bool KVREG, int BQ>
static void attention_backward_launch(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                      const float* dsum, int B, int T, int H, int KV, const int* doc,
                                      cudaStream_t s) {
    typedef BwdTile<HD, KVREG, BQ> Bt;
    static int smem_set;
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(attention_backward_kernel<HD, KVREG, BQ, true>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Bt::SMEM));
        cudaCheck(cudaFuncSetAttribute(attention_backward_kernel<HD, KVREG, BQ, false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Bt::SMEM));
        smem_set = 1;
    }
    size_t n = (size_t)B * T * H * HD;
    int n_split = attn_dq_splits(B, T, KV, att_bwd_blocks / 2);
    if ((size_t)n_split * n > att_dq_acc_n) n_split = (int)(att_dq_acc_n / n);  // what the buffer holds
    if (n_split < 1)
        fail("attention backward: the dQ buffer (%zu floats) < B*T*H*hd = %zu (sized at start-up for fewer rows)",
             att_dq_acc_n, n);
    copyCheck(cudaMemsetAsync(att_dq_acc, 0, sizeof(float) * n * n_split, s));
    dim3 grid(n_split, KV, B), block(Bt::NW * 32);
    if (doc)
        attention_backward_kernel<HD, KVREG, BQ, true>
            <<<grid, block, Bt::SMEM, s>>>(dqkv, att_dq_acc, dout, qkv, lse, dsum, T, H, KV, doc);
    else
        attention_backward_kernel<HD, KVREG, BQ, false>
            <<<grid, block, Bt::SMEM, s>>>(dqkv, att_dq_acc, dout, qkv, lse, dsum, T, H, KV, doc);
    launchCheck();
    attention_dq_finish_kernel<<<grid8(n), 256, 0, s>>>(dqkv, att_dq_acc, n_split, B, T, H, KV, HD,
                                                        1.0f / sqrtf((float)HD));
    launchCheck();
}
// The first of each head size is the one the trainer runs; name: k<keys of a block>q<queries
// of a tile>, s: K and V in shared memory. Registers and spills of each: docs/GPU.md (written by
// dev/ptxas_attention.py); none spills. Left out because they spill: hd 32 k64q64 (8 B on
// sm_90), hd 128 k64q32s (52 / 96 B) and k64q64s (64 / 80 B).
static const AttBwdTile ATT_BWD_TILES[] = {
    {"k64q64", 16, 1, attention_backward_launch<16, true, 64>},
    {"k64q32", 32, 1, attention_backward_launch<32, true, 32>},
    {"k64q64s", 64, 0, attention_backward_launch<64, false, 64>},
    {"k64q64", 64, 1, attention_backward_launch<64, true, 64>},
    {"k64q16s", 128, 0, attention_backward_launch<128, false, 16>},
};
static const int N_ATT_BWD_TILES = (int)(sizeof(ATT_BWD_TILES) / sizeof(ATT_BWD_TILES[0]));
// The backward tile called `name` at head size hd (NULL: none).
static const AttBwdTile* attention_bwd_tile_find(const char* name, int hd) {
    for (int i = 0; i < N_ATT_BWD_TILES; i++)
        if (ATT_BWD_TILES[i].hd == hd && !strcmp(ATT_BWD_TILES[i].name, name)) return &ATT_BWD_TILES[i];
    return NULL;
}
static const AttBwdTile* att_bwd_pick[129];  // by head size: the backward launches use (NULL: the first)
static const AttBwdTile* attention_bwd_tile(int hd) {
    if (hd >= 0 && hd <= 128 && att_bwd_pick[hd]) return att_bwd_pick[hd];
    for (int i = 0; i < N_ATT_BWD_TILES; i++)
        if (ATT_BWD_TILES[i].hd == hd) return &ATT_BWD_TILES[i];
    return NULL;
}

static void attention_check(int H, int KV, int hd) {
    if (KV <= 0 || H % KV) fail("attention: %d query heads do not group over %d kv heads", H, KV);
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
        fail("attention: head size %d not supported (16, 32, 64, 128)", hd);
}

// --attn-tile: `flag` is a tile's name (it must exist at head size hd) or "auto": the tile
// named for this device and head size in the table at `path` (CSV lines device,hd,tile, as
// test_gpu --att-sweep writes them; the first match), else the default. Picks it for the
// launches and returns it; *why says where it came from.
static const AttFwdTile* attention_tile_choose(const char* flag, int hd, const char* device, const char* path,
                                               const char** why) {
    if (strcmp(flag, "auto")) {
        if (!attention_fwd_tile_set(flag, hd)) fail("--attn-tile %s: no such forward tile at head size %d", flag, hd);
        *why = "--attn-tile";
        return attention_fwd_tile(hd);
    }
    *why = "default: no measured table for this GPU and head size";
    FILE* f = fopen(path, "r");
    char line[512], dev[256], name[64];
    int row_hd;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%255[^,],%d,%63[^,\n]", dev, &row_hd, name) == 3 && row_hd == hd && !strcmp(dev, device) &&
            attention_fwd_tile_set(name, hd)) {
            *why = "auto: measured on this GPU (dev/attn_tiles.csv)";
            break;
        }
    if (f) fclose(f);
    return attention_fwd_tile(hd);
}

// out (B*T, H*hd) bf16, lse (B, H, T) fp32 (logsumexp of the scaled scores, for backward);
// doc (B x T on the device, NULL: none): documents.
static void attention_forward_gpu(bf16* out, float* lse, const bf16* qkv, int B, int T, int H, int KV, int hd,
                                  const int* doc, cudaStream_t s) {
    attention_check(H, KV, hd);
    attention_fwd_tile(hd)->launch(out, lse, qkv, B, T, H, KV, doc, s);
}

// dqkv (B*T, (H+2KV)*hd) bf16 is overwritten: dq, dk, dv of every row. out and lse are the
// forward's. Dsum goes to its buffer (att_dsum, B*H*T floats).
static void attention_backward_gpu(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                                   int B, int T, int H, int KV, int hd, const int* doc, cudaStream_t s) {
    attention_check(H, KV, hd);
    attention_dsum_gpu(dout, out, B, T, H, hd, s);
    att_dsum_of = NULL;  // not a ring's
    attention_bwd_tile(hd)->launch(dqkv, dout, qkv, lse, att_dsum, B, T, H, KV, doc, s);
}

#endif
