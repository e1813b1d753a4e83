// backend/gpu/attention_block.cuh: context parallelism's attention, one ring step a launch
// (the blocks of layout/config.h AttnBlock that the step holds): this rank's queries against
// one source's keys, merged into the fp32 running output o (B*Ts x Ha*hd) and log-sum-exp lse
// (B x Ha x Ts) in registers (att_merge); the backward adds into fp32 dq (B*Ts x Ha*hd) and dkv
// (B*Ts x 2*KVa*hd); attention_grad_pack_gpu rounds [dq | dkv] into bf16 dqkv. Kernels of their
// own beside the whole-sequence ones (whose helpers they use): templated together, the earlier
// design's ran 4-7% slower on an H200 (33f14e7).
#ifndef GPU_ATTENTION_BLOCK_CUH
#define GPU_ATTENTION_BLOCK_CUH

#include "backend/gpu/common.cuh"
#include "backend/gpu/attention.cuh"  // FwdTile, BwdTile, att_load, att_qk, att_softmax, att_bwd_tile, ...

// Context parallelism's ring step (layout/config.h AttnBlock; layer_parallel/context_parallel.h
// cp_blocks): the queries of this rank's rows against the keys of one source's rows, in one
// launch at FlashAttention-2's design (attention.cuh's forward and backward with their
// helpers), fp32 outputs merged into the running output and lse by log-sum-exp (forward) or
// added (dq, dk, dv), as backend/cpu/attention.h's attention_block_forward / _backward do.
//
// One launch for all the step's blocks: a zig-zag split gives a rank two segments of its
// sequence (rows [0, c) and [c, 2c) at two positions), so a step has up to four blocks, one
// per (query segment, key segment) that holds a visible pair. Their rows are contiguous and
// their positions increasing, so the step is one block over all the rows whose positions map
// in two pieces (AttRows): a query tile spanning both segments sees the keys its rows see,
// found by the same arithmetic as within one, and every block's short tiles fill one grid
// (before, one launch a block: at T 8192 and 132 SMs a launch had 192 thread blocks). The
// pairs of the blocks the ring left out have no visible key (cp_block_visible), so the mask
// skips them here too. --cp-split doc's one block gives its rows' positions as arrays (AT):
// query i at q_at[b * at_ld + i], key j at k_at[b * at_ld + j], each increasing; a query's keys
// are then found by bisection over k_at (the CPU's att_keys_before). Documents (doc: B x
// doc_ld device ints, NULL: none) are looked up at a row's position.
//
// Key j of the step is seen by query i iff pos_k(j) <= pos_q(i) and pos_k(j) >= doc[pos_q(i)]:
// the keys [first(i), last(i)] (key rows, both nondecreasing in i), so the tiles skipped and
// the mask are those of the whole-sequence kernels with last(i) for i. B sequences (blockIdx.z);
// in sequence b the query rows start at q + b * q_seq (row stride q_ld, query head h at column
// h * HD), the key rows at k and v + b * kv_seq (stride kv_ld, kv head c at column c * HD). o,
// dq and dout have rows o_ld apart, o_seq per sequence; dk, dv rows dkv_ld apart, dkv_seq per
// sequence; the lse and Dsum of query i of head h are at (b * H + h) * l_ld + i.
struct AttRows {
    int n, n0, pos0, pos1;  // rows [0, n): row i at position pos0 + i (i < n0), else pos1 + i - n0
};
struct AttBlockArgs {
    const bf16 *q, *k, *v, *dout;
    float *o, *dq, *dk, *dv;
    float* lse;  // merged by the forward, read by the backward
    const float* dsum;
    size_t q_seq, kv_seq, o_seq, dkv_seq;
    int q_ld, kv_ld, o_ld, dkv_ld, l_ld;
    AttRows qr, kr;                    // the query and key rows, nq = qr.n, nk = kr.n
    int H, KV;
    int init;                          // the first step of its query rows: their running output starts here
    const int* doc;                    // documents (NULL: none): sequence b's position p starts at doc[b * doc_ld + p]
    int doc_ld;
    const int *q_at, *k_at;            // --cp-split doc: the rows' positions (NULL: qr, kr)
    int at_ld;
};

// The rows of at[0, n) (increasing) at positions before p, by bisection.
__device__ __forceinline__ int att_rows_before(const int* at, int n, int p) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (at[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
// The rows of r at positions before p.
__device__ __forceinline__ int att_rows_before(const AttRows& r, int p) {
    return min(max(p - r.pos0, 0), r.n0) + min(max(p - r.pos1, 0), r.n - r.n0);
}
// The position of query row i (a row past nq, a tile's padding, reads the last row's) and of key row j.
template <bool AT>
__device__ __forceinline__ int att_q_pos(const AttBlockArgs& a, int b, int i) {
    i = min(i, a.qr.n - 1);
    return AT ? a.q_at[(size_t)b * a.at_ld + i] : i < a.qr.n0 ? a.qr.pos0 + i : a.qr.pos1 + i - a.qr.n0;
}
template <bool AT>
__device__ __forceinline__ int att_k_pos(const AttBlockArgs& a, int b, int j) {
    return AT ? a.k_at[(size_t)b * a.at_ld + j] : j < a.kr.n0 ? a.kr.pos0 + j : a.kr.pos1 + j - a.kr.n0;
}
template <bool AT>
__device__ __forceinline__ int att_keys_before(const AttBlockArgs& a, int b, int p) {
    return AT ? att_rows_before(a.k_at + (size_t)b * a.at_ld, a.kr.n, p) : att_rows_before(a.kr, p);
}
template <bool AT>
__device__ __forceinline__ int att_queries_before(const AttBlockArgs& a, int b, int p) {
    return AT ? att_rows_before(a.q_at + (size_t)b * a.at_ld, a.qr.n, p) : att_rows_before(a.qr, p);
}
// The first key row query row i of sequence b sees (its document's start; 0 without
// documents), and the last (< 0: none).
template <bool DOC, bool AT>
__device__ __forceinline__ int att_block_first(const AttBlockArgs& a, int b, int i) {
    return DOC ? att_keys_before<AT>(a, b, a.doc[(size_t)b * a.doc_ld + att_q_pos<AT>(a, b, i)]) : 0;
}
template <bool AT>
__device__ __forceinline__ int att_block_last(const AttBlockArgs& a, int b, int i) {
    return att_keys_before<AT>(a, b, att_q_pos<AT>(a, b, i) + 1) - 1;
}

// Rows r0 + g and r0 + g + 8 (those < n) of the fp32 dst (pitch `pitch`) += acc * scale.
template <int DT>
__device__ __forceinline__ void att_add(float* dst, size_t pitch, int r0, int n, const float (*acc)[4], float scale) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = r0 + g + 8 * h;
        if (row >= n) continue;
        float* d = dst + (size_t)row * pitch + 2 * t;
        #pragma unroll
        for (int c = 0; c < DT; c++) d[c * 8] += acc[c][2 * h] * scale, d[c * 8 + 1] += acc[c][2 * h + 1] * scale;
    }
}

// The step's forward merged into the running output a.o and log-sum-exp a.lse of this
// thread's rows q0 + g, q0 + g + 8: the ring's merge (layer_parallel/context_parallel.h; the CPU's lse_merge_row): with
// the step's row max m and sum l (log2 units) and its unnormalized output acc,
//     lse' = log(e^lse + e^(m/log2e) l),  o' = o e^(lse - lse') + acc e^(m/log2e - lse').
// A row that saw no key of the step is left alone (a.init: it becomes o = 0, lse = -inf).
template <int DT>
__device__ void att_merge(const AttBlockArgs& a, int b, int h, int q0, const float (*acc)[4], const float m[2],
                          const float l[2]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, HD = DT * 8;
    float keep[2], add[2], merged[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + g + 8 * r;
        float old = a.init || i >= a.qr.n ? -INFINITY : a.lse[((size_t)b * a.H + h) * a.l_ld + i];
        keep[r] = add[r] = 0.0f, merged[r] = -INFINITY;
        if (m[r] == -INFINITY) continue;
        float blk = (m[r] + log2f(l[r])) / ATT_LOG2E, top = fmaxf(old, blk);
        merged[r] = top + logf(expf(old - top) + expf(blk - top));
        keep[r] = old == -INFINITY ? 0.0f : expf(old - merged[r]);
        add[r] = exp2f(m[r] - merged[r] * ATT_LOG2E);
    }
    __syncwarp();  // the four lanes of a row have read its old lse before lane 0 rewrites it
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + g + 8 * r;
        if (i >= a.qr.n || (m[r] == -INFINITY && !a.init)) continue;
        if (t == 0) a.lse[((size_t)b * a.H + h) * a.l_ld + i] = merged[r];
        float* o = a.o + b * a.o_seq + (size_t)i * a.o_ld + h * HD + 2 * t;
        #pragma unroll
        for (int c = 0; c < DT; c++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float* p = o + c * 8 + e;
                *p = (keep[r] != 0.0f ? *p * keep[r] : 0.0f) + acc[c][2 * r + e] * add[r];
            }
    }
}

// The mask of one score tile (keys kt ..): score -inf where key j is after query row r's last
// key last[m][r] or before its first first[m][r] (rows 16m + g + 8r of the warp).
template <int MT, int NT, bool DOC>
__device__ __forceinline__ void att_mask_keys(float (*s)[NT][4], int kt, const int (*last)[2], const int (*first)[2]) {
    int t = threadIdx.x % 4;
    #pragma unroll
    for (int m = 0; m < MT; m++)
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2;
                if (j > last[m][i / 2] || (DOC && j < first[m][i / 2])) s[m][n][i] = -INFINITY;
            }
}

// The ring step's tiles: the forward's (MT 16-row tiles a warp, BK keys a tile, Q in registers)
// and the backward's query tile BQ by head size, as the whole-sequence defaults but with room for
// the rows' last keys (docs/GPU.md has their registers).
template <int HD>
struct RingTile {
    static constexpr int MT = HD == 128 ? 1 : 2, BK = HD == 64 ? 32 : 64;
    static constexpr int BQ = HD == 128 ? 16 : HD == 32 ? 32 : 64;
    static constexpr bool KVREG = HD <= 32;
};

// As attention_forward_kernel over the keys the step's queries see, then merged.
template <int HD, bool DOC, bool AT>
__global__ void __launch_bounds__(128)
attention_ring_forward_kernel(AttBlockArgs a) {
    constexpr int MT = RingTile<HD>::MT, BK = RingTile<HD>::BK;
    typedef FwdTile<HD, MT, BK, true> F;
    constexpr int BQ = F::BQ, LD = F::LD, NT = F::NT, DT = F::DT, NW = F::NW;
    extern __shared__ __align__(16) unsigned char att_smem[];
    const auto [Qs, Ks, Vs, warp, lane, g, b, h, q_blk, q0] = att_fwd_place<F>(att_smem);
    int kvh = h / (a.H / a.KV), nk = a.kr.n;
    const bf16 *kg = a.k + b * a.kv_seq + kvh * HD, *vg = a.v + b * a.kv_seq + kvh * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);

    // the key tiles that matter: from the first row's first key to the last row's last
    int kt = max(att_block_first<DOC, AT>(a, b, q_blk), 0) / BK * BK;
    int k_end = att_block_last<AT>(a, b, q_blk + BQ - 1) + 1;
    att_load<HD, BQ, NW>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, q_blk, a.qr.n);
    if (kt < k_end) att_load<HD, BK, NW>(Ks, kg, a.kv_ld, kt, nk);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[MT][HD / 16][4];
    att_q_frags<HD, MT>(qf, Qs + warp * 16 * MT * LD);
    float o[MT][DT][4] = {}, m[MT][2], l[MT][2];
    int first[MT][2], last[MT][2];  // each row's first and last key
    #pragma unroll
    for (int mt = 0; mt < MT; mt++)
        for (int r = 0; r < 2; r++) {
            int i = q0 + 16 * mt + g + 8 * r;
            m[mt][r] = -INFINITY, l[mt][r] = 0.0f;
            first[mt][r] = att_block_first<DOC, AT>(a, b, i), last[mt][r] = att_block_last<AT>(a, b, i);
        }
    int warp_first = att_block_first<DOC, AT>(a, b, q0), warp_last = att_block_last<AT>(a, b, q0 + 16 * MT - 1);
    int warp_min_last = att_block_last<AT>(a, b, q0), warp_max_first = att_block_first<DOC, AT>(a, b, q0 + 16 * MT - 1);
    for (; kt < k_end; kt += BK) {
        att_load<HD, BK, NW>(Vs, vg, a.kv_ld, kt, nk);  // stage 1: V of this tile, during Q K^T
        cp_async_commit();
        // warp-uniform: the tile is after all this warp's rows' keys, or before all their documents
        bool active = kt <= warp_last && !(DOC && kt + BK <= warp_first);
        float s[MT][NT][4];
        if (active) att_qk<HD, MT, NT, true>(s, qf, Qs, Ks);
        cp_async_wait<0>();
        __syncthreads();  // V landed for everyone; every warp is done with K
        if (kt + BK < k_end) att_load<HD, BK, NW>(Ks, kg, a.kv_ld, kt + BK, nk);  // stage 2: the next K
        cp_async_commit();
        if (active) {
            if (kt + BK - 1 > warp_min_last || (DOC && kt < warp_max_first))
                att_mask_keys<MT, NT, DOC>(s, kt, last, first);
            uint32_t p[MT][NT / 2][4];
            att_softmax<HD, MT, NT, true>(p, s, o, m, l, sl2);  // a row may see no key of a tile
            att_pv_mt<HD, MT, BK>(o, p, Vs);
        }
        cp_async_wait<0>();
        __syncthreads();  // the next K landed; every warp is done with V
    }
    #pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float m2[2], sum[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            sum[r] = att_row_sum(l[mt][r]);
            m2[r] = m[mt][r] * sl2;  // the row max in the log2 units of the scaled scores
        }
        att_merge<DT>(a, b, h, q0 + 16 * mt, o[mt], m2, sum);
    }
}

// As attention_bwd_stage_q, with the rows' last keys (the ring's positions), a tile of nq rows.
template <int HD, int BQ, bool DOC, bool AT>
__device__ __forceinline__ void att_ring_stage_q(unsigned char* stage, const AttBlockArgs& a, int b, int h, int qt) {
    const AttBwdStage t = att_bwd_stage<HD, BQ>(stage);
    att_load<HD, BQ, 4>(t.Qs, a.q + b * a.q_seq + h * HD, a.q_ld, qt, a.qr.n);
    for (int i = threadIdx.x; i < BQ; i += 128) {
        int q = qt + i;
        size_t at = ((size_t)b * a.H + h) * a.l_ld + q;
        t.lses[i] = q < a.qr.n ? a.lse[at] * ATT_LOG2E : 0.0f;
        t.dss[i] = q < a.qr.n ? a.dsum[at] : 0.0f;
        t.firsts[i] = att_block_first<DOC, AT>(a, b, q);
        t.lasts[i] = att_block_last<AT>(a, b, q);
    }
}

// As attention_backward_kernel over the step's key blocks: dk, dv (fp32) += the step's, dq
// into this split's fp32 buffer (dq_acc: splits x B x nq x H*HD), added to a.dq afterwards.
// Launch bounds (128, 1): without the 1, ptxas held hd 16 and 32 (with documents) to 128
// registers, 4 blocks an SM, and spilled 24-36 B.
template <int HD, bool DOC, bool AT>
__global__ void __launch_bounds__(128, 1)
attention_ring_backward_kernel(AttBlockArgs a, float* dq_acc) {
    constexpr int BQ = RingTile<HD>::BQ;
    constexpr bool KVREG = RingTile<HD>::KVREG;
    typedef BwdTile<HD, KVREG, BQ> Bt;
    constexpr int BN = Bt::BN, LD = Bt::LD, DT = Bt::DT, NW = Bt::NW;
    extern __shared__ __align__(16) unsigned char att_smem[];
    const auto [Ks, Vs, dSt, stages, warp, split, n_split, kvh, b, B] = att_bwd_place<Bt>(att_smem);
    int group = a.H / a.KV, nq = a.qr.n, nk = a.kr.n, n_kb = (nk + BN - 1) / BN;
    float* dq_b = dq_acc + ((size_t)split * B + b) * nq * a.H * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);
    for (int round = 0;; round++) {
        int kb = round * n_split + (round % 2 ? n_split - 1 - split : split);  // zig-zag over the splits
        if (kb >= n_kb) break;
        int j_blk = kb * BN, j0 = j_blk + warp * 16, j_last = min(j_blk + BN, nk) - 1;
        // the query tiles that see a key of the block: from the first query at or after its first key
        int q_begin = att_queries_before<AT>(a, b, att_k_pos<AT>(a, b, j_blk));
        if (q_begin >= nq || (DOC && att_block_first<DOC, AT>(a, b, q_begin) > j_last)) continue;  // block-uniform
        __syncthreads();  // the previous key block's tiles are used
        att_load<HD, BN, NW>(Ks, a.k + b * a.kv_seq + kvh * HD, a.kv_ld, j_blk, nk);
        att_load<HD, BN, NW>(Vs, a.v + b * a.kv_seq + kvh * HD, a.kv_ld, j_blk, nk);
        int h = kvh * group, qt = q_begin, cur = 0;
        att_ring_stage_q<HD, BQ, DOC, AT>(stages, a, b, h, qt);
        att_load<HD, BQ, NW>(att_bwd_stage<HD, BQ>(stages).dOs, a.dout + b * a.o_seq + h * HD, a.o_ld, qt, nq);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        uint32_t kf[1][HD / 16][4], vf[1][HD / 16][4];  // this warp's keys and values as A fragments (KVREG)
        if (KVREG) att_kv_frags<HD>(kf[0], vf[0], Ks + warp * 16 * LD, Vs + warp * 16 * LD);
        float dk[DT][4] = {}, dv[DT][4] = {};
        for (;;) {
            unsigned char* nst = stages + (cur ^ 1) * Bt::STAGE;
            const auto [Qs, dOs, lses, dss, firsts, lasts] = att_bwd_stage<HD, BQ>(stages + cur * Bt::STAGE);
            int nh = h, nqt = qt + BQ;  // the next tile, as in attention_backward_kernel
            if (nqt >= nq || (DOC && att_block_first<DOC, AT>(a, b, nqt) > j_last)) nh++, nqt = q_begin;
            bool next = nh < (kvh + 1) * group;
            if (next) att_ring_stage_q<HD, BQ, DOC, AT>(nst, a, b, nh, nqt);
            cp_async_commit();
            // warp-uniform: every query's keys end before this warp's, or its document starts after them
            bool active = lasts[BQ - 1] >= j0 && !(DOC && firsts[0] > j0 + 15);
            if (active)
                att_bwd_tile<HD, KVREG, BQ, DOC, true>(dk, dv, kf, vf, Ks + warp * 16 * LD, Vs + warp * 16 * LD, Qs,
                                                       dOs, lses, dss, firsts, lasts,
                                                       dSt + warp * 16 * Bt::LDS, qt, j0, sl2);
            else att_store_a<BQ, Bt::LDS>(dSt + warp * 16 * Bt::LDS, NULL, true);
            if (next)
                att_load<HD, BQ, NW>(att_bwd_stage<HD, BQ>(nst).dOs, a.dout + b * a.o_seq + nh * HD, a.o_ld, nqt, nq);
            cp_async_commit();
            __syncthreads();  // dS^T is whole
            att_bwd_dq<HD, KVREG, BQ>(dq_b + h * HD, a.H * HD, qt, nq, dSt, Ks);
            cp_async_wait<0>();
            __syncthreads();  // the next tile landed; every warp is done with this one and with dS^T
            if (!next) break;
            h = nh, qt = nqt, cur ^= 1;
        }
        att_add<DT>(a.dk + b * a.dkv_seq + kvh * HD, a.dkv_ld, j0, nk, dk, scale);
        att_add<DT>(a.dv + b * a.dkv_seq + kvh * HD, a.dkv_ld, j0, nk, dv, 1.0f);
    }
}

// a.dq (fp32, rows o_ld apart, o_seq a sequence) += scale * the splits' sums, added in split order.
__global__ void attention_ring_dq_finish_kernel(AttBlockArgs a, const float* dq_acc, int n_split, int B, int hd,
                                                float scale) {
    size_t w = (size_t)a.H * hd, n = (size_t)B * a.qr.n * w, e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    float sum = 0.0f;
    for (int k = 0; k < n_split; k++) sum += dq_acc[(size_t)k * n + e];
    size_t row = e / w, b = row / a.qr.n;
    a.dq[b * a.o_seq + (row % a.qr.n) * a.o_ld + e % w] += sum * scale;
}

template <int HD, bool DOC, bool AT>
static void attention_ring_launch(int fwd, const AttBlockArgs& a, int B, cudaStream_t s) {
    typedef FwdTile<HD, RingTile<HD>::MT, RingTile<HD>::BK, true> F;
    typedef BwdTile<HD, RingTile<HD>::KVREG, RingTile<HD>::BQ> Bt;
    static int smem_set;
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(attention_ring_forward_kernel<HD, DOC, AT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F::SMEM));
        cudaCheck(cudaFuncSetAttribute(attention_ring_backward_kernel<HD, DOC, AT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Bt::SMEM));
        smem_set = 1;
    }
    if (fwd) {
        attention_ring_forward_kernel<HD, DOC, AT><<<dim3(cdiv(a.qr.n, F::BQ), a.H, B), 128, F::SMEM, s>>>(a);
        launchCheck();
        return;
    }
    size_t n = (size_t)B * a.qr.n * a.H * HD;
    int n_split = attn_dq_splits(B, a.kr.n, a.KV, att_bwd_blocks / 2);
    if ((size_t)n_split * n > att_dq_acc_n) n_split = (int)(att_dq_acc_n / n);  // what the buffer holds
    if (n_split < 1)
        fail("attention ring backward: the dQ buffer (%zu floats) < B*Ts*Ha*hd = %zu", att_dq_acc_n, n);
    copyCheck(cudaMemsetAsync(att_dq_acc, 0, sizeof(float) * n * n_split, s));
    attention_ring_backward_kernel<HD, DOC, AT><<<dim3(n_split, a.KV, B), 128, Bt::SMEM, s>>>(a, att_dq_acc);
    launchCheck();
    attention_ring_dq_finish_kernel<<<cdiv(n, 256), 256, 0, s>>>(a, att_dq_acc, n_split, B, HD,
                                                                1.0f / sqrtf((float)HD));
    launchCheck();
}
template <int HD>
static void attention_ring_kernels(int fwd, const AttBlockArgs& a, int B, cudaStream_t s) {
    if (a.q_at) attention_ring_launch<HD, true, true>(fwd, a, B, s);  // positions come with documents
    else if (a.doc) attention_ring_launch<HD, true, false>(fwd, a, B, s);
    else attention_ring_launch<HD, false, false>(fwd, a, B, s);
}
// The kernels of head size hd; fwd: the forward, else the backward.
static void attention_block_run(int fwd, const AttBlockArgs& a, int B, int hd, cudaStream_t s) {
    if (hd == 16) attention_ring_kernels<16>(fwd, a, B, s);
    else if (hd == 32) attention_ring_kernels<32>(fwd, a, B, s);
    else if (hd == 64) attention_ring_kernels<64>(fwd, a, B, s);
    else attention_ring_kernels<128>(fwd, a, B, s);
}

// The rows of one side of the blocks blk[0, n) (row, count, position of each block's, at
// stride ints apart from base): at most two segments, contiguous in rows with increasing
// positions (a rank's zig-zag pair), as AttRows from row *row0.
static AttRows att_rows_of(const int* base, int stride, int n, int* row0) {
    int seg[2][3], ns = 0;  // {row, count, position}
    for (int i = 0; i < n; i++) {
        const int* x = base + (size_t)i * stride;
        int k = 0;
        while (k < ns && seg[k][0] != x[0]) k++;
        if (k < ns) {
            if (seg[k][1] != x[1] || seg[k][2] != x[2]) fail("attention blocks: two blocks disagree on rows %d", x[0]);
            continue;
        }
        if (ns == 2) fail("attention blocks: more than two segments a side");
        seg[ns][0] = x[0], seg[ns][1] = x[1], seg[ns][2] = x[2], ns++;
    }
    if (ns == 2 && seg[1][0] < seg[0][0])
        for (int c = 0; c < 3; c++) { int t = seg[0][c]; seg[0][c] = seg[1][c], seg[1][c] = t; }
    if (ns == 2 && (seg[0][0] + seg[0][1] != seg[1][0] || seg[0][2] + seg[0][1] > seg[1][2]))
        fail("attention blocks: segments not contiguous in rows with increasing positions");
    *row0 = seg[0][0];
    AttRows r = {seg[0][1], seg[0][1], seg[0][2], seg[0][2]};
    if (ns == 2) r.n += seg[1][1], r.pos1 = seg[1][2];
    return r;
}

// The step's operands (the blocks blk[0, n) of one ring step: the same q and kv buffers): q
// rows hold the query heads from column 0 (stride q_ld), kv rows the k heads then the v heads
// (stride kv_ld); the running output o, dq, dout and out are B*Ts x Ha*hd, dkv B*Ts x 2*KVa*hd
// (dk then dv), lse B x Ha x Ts. A query segment with an init block starts there: the blocks
// of the ring's first step (all init for their rows) or none.
static AttBlockArgs att_step(const AttnBlock* blk, int n, const bf16* q, const bf16* kv, int* q_row, int* k_row) {
    const AttnBlock* f = &blk[0];
    attention_check(f->Ha, f->KVa, f->hd);
    AttBlockArgs a = {};
    int hd = f->hd, stride = (int)(sizeof(AttnBlock) / sizeof(int)), n_init = 0;
    for (int i = 0; i < n; i++) n_init += blk[i].init;
    if (f->q_at && n != 1) fail("attention blocks: row positions come one block a step");
    a.qr = att_rows_of(&f->q_row, stride, n, q_row), a.kr = att_rows_of(&f->k_row, stride, n, k_row);
    if (n_init && (a.qr.n0 == a.qr.n ? 1 : 2) > n_init)
        fail("attention blocks: some query rows of the step start, some not");
    a.q = q + (size_t)*q_row * f->q_ld;
    a.k = kv + (size_t)*k_row * f->kv_ld, a.v = a.k + f->KVa * hd;
    a.q_seq = (size_t)f->Ts * f->q_ld, a.kv_seq = (size_t)f->Ts * f->kv_ld;
    a.q_ld = f->q_ld, a.kv_ld = f->kv_ld;
    a.o_ld = f->Ha * hd, a.o_seq = (size_t)f->Ts * a.o_ld;
    a.dkv_ld = 2 * f->KVa * hd, a.dkv_seq = (size_t)f->Ts * a.dkv_ld;
    a.l_ld = f->Ts;
    a.H = f->Ha, a.KV = f->KVa, a.init = n_init > 0;
    // with positions (q_at, k_at) the documents are looked up at them
    if (f->q_at && (!f->k_at || !f->doc)) fail("attention block: row positions need key positions and documents");
    a.doc = f->doc, a.doc_ld = f->doc_ld;
    a.q_at = f->q_at, a.k_at = f->k_at, a.at_ld = f->at_ld;
    return a;
}
// o, lse (fp32): the step's blocks blk[0, n) merged in by log-sum-exp, one launch.
static void attention_step_forward_gpu(float* o, float* lse, const bf16* q, const bf16* kv, const AttnBlock* blk, int n,
                                       cudaStream_t s) {
    if (!n) return;
    int q_row, k_row;
    AttBlockArgs a = att_step(blk, n, q, kv, &q_row, &k_row);
    a.o = o + (size_t)q_row * a.o_ld, a.lse = lse + q_row;
    attention_block_run(1, a, blk[0].B, blk[0].hd, s);
}
// dq, dkv (fp32) += the step's gradients, from the final lse and out. Dsum = rowsum(dout * out)
// depends only on this rank's rows, so it is computed once a backward, for all B*Ha*Ts rows,
// at the step that holds the init blocks (the ring's first, on this rank's own keys: layer_parallel/
// context_parallel.h runs it first), into its buffer (att_dsum, carved at start-up), and the later
// steps of the same backward read it.
static void attention_step_backward_gpu(float* dq, float* dkv, const bf16* q, const bf16* kv, const bf16* dout,
                                        const bf16* out, const float* lse, const AttnBlock* blk, int n,
                                        cudaStream_t s) {
    if (!n) return;
    int q_row, k_row;
    AttBlockArgs a = att_step(blk, n, q, kv, &q_row, &k_row);
    const AttnBlock* f = &blk[0];
    size_t q_off = (size_t)q_row * a.o_ld, k_off = (size_t)k_row * a.dkv_ld;
    if (a.init) attention_dsum_gpu(dout, out, f->B, f->Ts, f->Ha, f->hd, s), att_dsum_of = dout;
    else if (att_dsum_of != dout) fail("attention ring backward: a step before the one on its own keys (no Dsum)");
    a.dout = dout + q_off, a.lse = (float*)lse + q_row, a.dsum = att_dsum + q_row;
    a.dq = dq + q_off, a.dk = dkv + k_off, a.dv = dkv + k_off + f->KVa * f->hd;
    attention_block_run(0, a, f->B, f->hd, s);
}

// dqkv (rows x (Ha + 2*KVa)*hd, bf16) = [dq (Ha*hd) | dkv (2*KVa*hd)] rounded: the ring's
// fp32 gradients packed as the qkv rows they belong to.
__global__ void attention_grad_pack_kernel(bf16* dqkv, const float* dq, const float* dkv, size_t rows, int nq,
                                           int nkv) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, w = (size_t)nq + nkv;
    if (idx >= rows * w) return;
    size_t i = idx / w;
    int c = (int)(idx % w);
    dqkv[idx] = f2bf(c < nq ? dq[i * nq + c] : dkv[i * nkv + c - nq]);
}
static void attention_grad_pack_gpu(bf16* dqkv, const float* dq, const float* dkv, size_t rows, int Ha, int KVa, int hd,
                                    cudaStream_t s) {
    size_t n = rows * (Ha + 2 * KVa) * hd;
    if (!n) return;
    attention_grad_pack_kernel<<<cdiv(n, 256), 256, 0, s>>>(dqkv, dq, dkv, rows, Ha * hd, 2 * KVa * hd);
    launchCheck();
}

#endif
