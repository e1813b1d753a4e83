// backend/gpu/attention_block.cuh: context parallelism's attention blocks (layout/config.h
// AttnBlock): the queries of one segment against the keys of another, merged into the fp32
// running output o (B*Ts x Ha*hd) and log-sum-exp lse (B x Ha x Ts) in registers
// (att_merge); the backward adds into fp32 dq (B*Ts x Ha*hd) and dkv (B*Ts x 2*KVa*hd);
// attention_grad_pack_gpu rounds [dq | dkv] into bf16 dqkv. Kept apart from the
// whole-sequence kernels: templated together they ran 4-7% slower on an H200 (33f14e7).
#ifndef GPU_ATTENTION_BLOCK_CUH
#define GPU_ATTENTION_BLOCK_CUH

#include "backend/gpu/common.cuh"
#include "backend/gpu/attention.cuh"  // AttShape, att_stage, att_abT, att_pv, ...

// Context parallelism's blocks (layout/config.h AttnBlock): attention.cuh's kernels with the
// queries of one segment against the keys of another, key j (of the block) seen by query i
// iff j <= i + diag (diag = q_pos - k_pos: the diagonal block, a block seen whole, or part
// of one), fp32 outputs merged into the running output and lse by log-sum-exp (forward) or
// added (dq, dk, dv), as backend/cpu/attention.h's attention_block_forward / _backward do. Kernels of
// their own: the whole-sequence ones templated on this mode ran 4-7% slower at head size 128
// on an H200 (test_gpu's shapes; the extra geometry pushed the register allocation over).
//
// B sequences (blockIdx.z); in sequence b the query rows [0, nq) start at q + b * q_seq
// (row stride q_ld, query head h at column h * HD), the key rows [0, nk) at k and v + b *
// kv_seq (stride kv_ld, kv head c at column c * HD). o, dq and dout have rows o_ld apart,
// o_seq per sequence; dk, dv rows dkv_ld apart, dkv_seq per sequence; the lse and Dsum of
// query i of head h are at (b * H + h) * l_ld + i. Documents (AttnBlock.doc, on the device;
// NULL: none): query i's first key (of the block) is doc[b * doc_ld + q_pos + i] - k_pos,
// skipped over as attention.cuh's kernels do.
//
// --cp-split doc (AttnBlock.q_at, k_at on the device; always with documents): the rows are
// increasing positions, not consecutive ones, query i at q_at[b * at_ld + i] and key j at
// k_at[b * at_ld + j]. Query i then sees the key rows [first, last] with positions in
// [doc[q_at[i]], q_at[i]], found by bisection over k_at (the CPU's att_keys_before). Both ends
// are nondecreasing in i, as with consecutive rows, so the skipping is the same: a query block
// walks the key tiles from its first row's first key to its last row's last one, a warp skips
// tiles outside its rows' ranges, a key block's query loop starts at the first query at or
// after its first key and stops at the first whose document starts after its last. The kernels
// are compiled a third time for this (AT): the position lookups cost registers the others
// should not pay.
struct AttBlockArgs {
    const bf16 *q, *k, *v, *dout;
    float *o, *dq, *dk, *dv;
    float* lse;                        // merged by the forward, read by the backward
    const float* dsum;
    size_t q_seq, kv_seq, o_seq, dkv_seq;
    int q_ld, kv_ld, o_ld, dkv_ld, l_ld;
    int nq, nk, diag, H, KV;
    int init;                          // the first block of its query rows: their running output starts here
    const int* doc;                    // documents (NULL: none), the query rows' at doc + b * doc_ld + i
    int doc_ld, k_pos;
    const int *q_at, *k_at;            // --cp-split doc: the rows' positions (NULL: consecutive)
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
// AT: the position of query row i of sequence b (a row past nq, a block's padding, reads the
// last row's), and the key rows before position p.
__device__ __forceinline__ int att_q_at(const AttBlockArgs& a, int b, int i) {
    return a.q_at[(size_t)b * a.at_ld + min(i, a.nq - 1)];
}
__device__ __forceinline__ int att_keys_before(const AttBlockArgs& a, int b, int p) {
    return att_rows_before(a.k_at + (size_t)b * a.at_ld, a.nk, p);
}

// The first key (of the block) query row i of sequence b sees: its document's start (0
// without documents, DOC false: attention.cuh's kernels are compiled twice likewise; a row
// past nq, a block's padding, reads the last row's).
template <bool DOC, bool AT>
__device__ __forceinline__ int att_block_first(const AttBlockArgs& a, int b, int i) {
    if (AT) return att_keys_before(a, b, a.doc[(size_t)b * a.doc_ld + att_q_at(a, b, i)]);
    return DOC ? a.doc[(size_t)b * a.doc_ld + min(i, a.nq - 1)] - a.k_pos : 0;
}
// The last key query row i of sequence b sees (< 0: none).
template <bool AT>
__device__ __forceinline__ int att_block_last(const AttBlockArgs& a, int b, int i) {
    return AT ? att_keys_before(a, b, att_q_at(a, b, i) + 1) - 1 : min(i + a.diag, a.nk - 1);
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

// The block's forward merged into the running output a.o and log-sum-exp a.lse of this
// thread's rows q0 + g, q0 + g + 8: the ring's merge (parallel/context_parallel.h; the CPU's lse_merge_row): with
// the block's row max m and sum l (log2 units) and its unnormalized output acc,
//     lse' = log(e^lse + e^(m/log2e) l),  o' = o e^(lse - lse') + acc e^(m/log2e - lse').
// A row that saw no key of the block is left alone (a.init: it becomes o = 0, lse = -inf).
template <int DT>
__device__ void att_merge(const AttBlockArgs& a, int b, int h, int q0, const float (*acc)[4], const float m[2],
                          const float l[2]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, HD = DT * 8;
    float keep[2], add[2], merged[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + g + 8 * r;
        float old = a.init || i >= a.nq ? -INFINITY : a.lse[((size_t)b * a.H + h) * a.l_ld + i];
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
        if (i >= a.nq || (m[r] == -INFINITY && !a.init)) continue;
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

// As attention_forward_kernel, over the keys the block's queries see, then merged.
template <int HD, int BCK, bool DOC, bool AT>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 4)
attention_block_forward_kernel(AttBlockArgs a) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Qs[BR * LD], Ks[BC * LD], Vs[BC * LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    // latest (longest) first
    int b = blockIdx.z, h = blockIdx.y, q_blk = (gridDim.x - 1 - blockIdx.x) * BR, q0 = q_blk + warp * 16;
    int kvh = h / (a.H / a.KV);
    const bf16* k = a.k + b * a.kv_seq + kvh * HD;
    const bf16* v = a.v + b * a.kv_seq + kvh * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);  // scores in log2 units

    att_stage<HD, BR>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, NULL, NULL, 0, q_blk, a.nq);
    float o[DT][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows q0 + g, q0 + g + 8
    int warp_first = att_block_first<DOC, AT>(a, b, q0), warp_last = att_block_last<AT>(a, b, q0 + 15);
    int last[2], first[2];
    for (int r = 0, i = q0 + lane / 4; r < 2; r++, i += 8)
        first[r] = att_block_first<DOC, AT>(a, b, i), last[r] = att_block_last<AT>(a, b, i);
    int k_end = att_block_last<AT>(a, b, q_blk + BR - 1) + 1;  // keys [first of q_blk, k_end) matter to this block
    for (int kt = max(att_block_first<DOC, AT>(a, b, q_blk), 0) / BC * BC; kt < k_end; kt += BC) {
        __syncthreads();  // everyone is done with the previous tiles
        att_stage<HD, BC>(Ks, k, a.kv_ld, Vs, v, a.kv_ld, kt, a.nk);
        __syncthreads();
        // warp-uniform: the whole tile is after this warp's queries, or before their documents (without
        // positions the last row's diagonal, not warp_last: held in a register it spilled at hd 64)
        if (kt > (AT ? warp_last : q0 + 15 + a.diag) || (DOC && kt + BC <= warp_first)) continue;
        float s[NT][4] = {};
        att_abT<HD, LD, NT>(s, Qs + warp * 16 * LD, Ks);
        float mx[2] = {m[0], m[1]};
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2;
                // causal, the block's keys only, and within the document
                s[n][i] = j <= last[i / 2] && (!DOC || j >= first[i / 2]) ? s[n][i] * sl2 : -INFINITY;
                mx[i / 2] = fmaxf(mx[i / 2], s[n][i]);
            }
        float corr[2], shift[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // a row that has seen no key yet: nothing moves (exp2(-inf) = 0)
            shift[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
            corr[r] = exp2f(m[r] - shift[r]);  // 0 on the row's first tile with a key (m = -inf)
            m[r] = mx[r], l[r] *= corr[r];  // l: this lane's part of the row sum
        }
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) s[n][i] = exp2f(s[n][i] - shift[i / 2]), l[i / 2] += s[n][i];
        #pragma unroll
        for (int d = 0; d < DT; d++)
            #pragma unroll
            for (int i = 0; i < 4; i++) o[d][i] *= corr[i / 2];
        uint32_t p[NT / 2][4];
        att_to_a<NT>(p, s);
        att_pv<HD, LD, BC>(o, p, Vs);
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    att_merge<DT>(a, b, h, q0, o, m, l);
}

// As attention_backward_dq_kernel: dq (fp32) += the block's.
template <int HD, int BCK, bool DOC, bool AT>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 3)
attention_block_dq_kernel(AttBlockArgs a) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Qs[BR * LD], dOs[BR * LD], Ks[BC * LD], Vs[BC * LD];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // latest (longest) first
    int b = blockIdx.z, h = blockIdx.y, q_blk = (gridDim.x - 1 - blockIdx.x) * BR, q0 = q_blk + warp * 16;
    int kvh = h / (a.H / a.KV);
    const bf16* k = a.k + b * a.kv_seq + kvh * HD;
    const bf16* v = a.v + b * a.kv_seq + kvh * HD;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);  // sl2 as in the forward

    att_stage<HD, BR>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, dOs, a.dout + b * a.o_seq + h * HD, a.o_ld, q_blk, a.nq);
    float lse2[2], ds[2];  // rows q0 + g, q0 + g + 8; rows >= nq get 0 (their dO is 0, so is their dS)
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int q = q0 + g + 8 * r;
        lse2[r] = q < a.nq ? a.lse[((size_t)b * a.H + h) * a.l_ld + q] * ATT_LOG2E : 0.0f;
        ds[r] = q < a.nq ? a.dsum[((size_t)b * a.H + h) * a.l_ld + q] : 0.0f;
    }
    // as in the forward
    int warp_first = att_block_first<DOC, AT>(a, b, q0), warp_last = att_block_last<AT>(a, b, q0 + 15);
    int last[2], first[2];
    for (int r = 0, i = q0 + g; r < 2; r++, i += 8)
        first[r] = att_block_first<DOC, AT>(a, b, i), last[r] = att_block_last<AT>(a, b, i);
    float dq[DT][4] = {};
    int k_end = att_block_last<AT>(a, b, q_blk + BR - 1) + 1;
    for (int kt = max(att_block_first<DOC, AT>(a, b, q_blk), 0) / BC * BC; kt < k_end; kt += BC) {
        __syncthreads();  // Qs, dOs are staged / the previous tiles are used
        att_stage<HD, BC>(Ks, k, a.kv_ld, Vs, v, a.kv_ld, kt, a.nk);
        __syncthreads();
        if (kt > (AT ? warp_last : q0 + 15 + a.diag) || (DOC && kt + BC <= warp_first)) continue;
        float s[NT][4] = {}, dp[NT][4] = {};
        att_abT<HD, LD, NT>(s, Qs + warp * 16 * LD, Ks);
        att_abT<HD, LD, NT>(dp, dOs + warp * 16 * LD, Vs);
        #pragma unroll
        for (int n = 0; n < NT; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int j = kt + n * 8 + 2 * t + i % 2;
                float p = j <= last[i / 2] && (!DOC || j >= first[i / 2]) ? exp2f(s[n][i] * sl2 - lse2[i / 2]) : 0.0f;
                s[n][i] = p * (dp[n][i] - ds[i / 2]);  // dS
            }
        uint32_t dsa[NT / 2][4];
        att_to_a<NT>(dsa, s);
        att_pv<HD, LD, BC>(dq, dsa, Ks);
    }
    att_add<DT>(a.dq + b * a.o_seq + h * HD, a.o_ld, q0, a.nq, dq, scale);
}

// As attention_backward_dkv_kernel: dk, dv (fp32) += the block's, over the queries that see
// each key.
template <int HD, int BCK, bool DOC, bool AT>
__global__ void __launch_bounds__(AttShape<HD, BCK>::NW * 32, 3)
attention_block_dkv_kernel(AttBlockArgs a) {
    constexpr int BR = AttShape<HD, BCK>::BR, BC = AttShape<HD, BCK>::BC, LD = AttShape<HD, BCK>::LD;
    constexpr int NT = AttShape<HD, BCK>::NT, DT = AttShape<HD, BCK>::DT;
    __shared__ __align__(16) bf16 Kb[BR * LD], Vb[BR * LD], Qs[BC * LD], dOs[BC * LD];
    __shared__ float lses[BC], dss[BC];
    __shared__ int firsts[DOC ? BC : 1], lasts[AT ? BC : 1];  // each query's first key, and last (AT)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int b = blockIdx.z, kvh = blockIdx.y, j_blk = blockIdx.x * BR, j0 = j_blk + warp * 16, group = a.H / a.KV;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD), scale = 1.0f / sqrtf((float)HD);  // sl2 as in the forward

    att_stage<HD, BR>(Kb, a.k + b * a.kv_seq + kvh * HD, a.kv_ld, Vb, a.v + b * a.kv_seq + kvh * HD, a.kv_ld, j_blk,
                      a.nk);
    float dk[DT][4] = {}, dv[DT][4] = {};
    // queries before j_blk's position see none of these keys, nor do those whose documents start after them
    int q_begin = AT ? att_rows_before(a.q_at + (size_t)b * a.at_ld, a.nq, a.k_at[(size_t)b * a.at_ld + j_blk])
                     : max(j_blk - a.diag, 0);
    for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (int qt = q_begin; qt < a.nq && (!DOC || att_block_first<DOC, AT>(a, b, qt) < j_blk + BR); qt += BC) {
            __syncthreads();  // Kb, Vb are staged / the previous tiles are used
            att_stage<HD, BC>(Qs, a.q + b * a.q_seq + h * HD, a.q_ld, dOs, a.dout + b * a.o_seq + h * HD, a.o_ld, qt,
                              a.nq);
            for (int i = threadIdx.x; i < BC; i += blockDim.x) {
                int qi = qt + i;
                lses[i] = qi < a.nq ? a.lse[((size_t)b * a.H + h) * a.l_ld + qi] * ATT_LOG2E : 0.0f;
                dss[i] = qi < a.nq ? a.dsum[((size_t)b * a.H + h) * a.l_ld + qi] : 0.0f;
                if (DOC) firsts[i] = att_block_first<DOC, AT>(a, b, qi);
                if (AT) lasts[i] = att_block_last<AT>(a, b, qi);
            }
            __syncthreads();
            // warp-uniform: the whole tile is before this warp's keys
            if ((AT ? lasts[BC - 1] : qt + BC - 1 + a.diag) < j0) continue;
            float st[NT][4] = {}, dpt[NT][4] = {};
            att_abT<HD, LD, NT>(st, Kb + warp * 16 * LD, Qs);
            att_abT<HD, LD, NT>(dpt, Vb + warp * 16 * LD, dOs);
            #pragma unroll
            for (int n = 0; n < NT; n++)
                #pragma unroll
                for (int i = 0; i < 4; i++) {
                    int c = n * 8 + 2 * t + i % 2, qi = qt + c, j = j0 + g + 8 * (i / 2);
                    int seen = (AT ? lasts[c] : qi + a.diag) >= j && qi < a.nq && (!DOC || j >= firsts[c]);
                    float p = seen ? exp2f(st[n][i] * sl2 - lses[c]) : 0.0f;
                    st[n][i] = p;                        // P^T
                    dpt[n][i] = p * (dpt[n][i] - dss[c]);  // dS^T
                }
            uint32_t pa[NT / 2][4], dsa[NT / 2][4];
            att_to_a<NT>(pa, st);
            att_to_a<NT>(dsa, dpt);
            att_pv<HD, LD, BC>(dv, pa, dOs);
            att_pv<HD, LD, BC>(dk, dsa, Qs);
        }
    att_add<DT>(a.dk + b * a.dkv_seq + kvh * HD, a.dkv_ld, j0, a.nk, dk, scale);
    att_add<DT>(a.dv + b * a.dkv_seq + kvh * HD, a.dkv_ld, j0, a.nk, dv, 1.0f);
}

template <int HD, int BCK, bool DOC, bool AT>
static void attention_block_kernels(int fwd, const AttBlockArgs& a, int B, cudaStream_t s) {
    dim3 block(AttShape<HD>::NW * 32), q_grid(cdiv(a.nq, AttShape<HD>::BR), a.H, B);
    if (fwd) {
        attention_block_forward_kernel<HD, BCK, DOC, AT><<<q_grid, block, 0, s>>>(a);
        launchCheck();
        return;
    }
    attention_block_dq_kernel<HD, BCK, DOC, AT><<<q_grid, block, 0, s>>>(a);
    launchCheck();
    attention_block_dkv_kernel<HD, BCK, DOC, AT><<<dim3(cdiv(a.nk, AttShape<HD>::BR), a.KV, B), block, 0, s>>>(a);
    launchCheck();
}
template <int HD, int BCK>
static void attention_block_launch(int fwd, const AttBlockArgs& a, int B, cudaStream_t s) {
    if (a.q_at) attention_block_kernels<HD, BCK, true, true>(fwd, a, B, s);  // positions come with documents
    else if (a.doc) attention_block_kernels<HD, BCK, true, false>(fwd, a, B, s);
    else attention_block_kernels<HD, BCK, false, false>(fwd, a, B, s);
}
// The kernels of head size hd; fwd: the forward, else the backward.
static void attention_block_run(int fwd, const AttBlockArgs& a, int B, int hd, cudaStream_t s) {
    if (hd == 16) attention_block_launch<16, AttShape<16>::BC>(fwd, a, B, s);
    else if (hd == 32) attention_block_launch<32, AttShape<32>::BC>(fwd, a, B, s);
    else if (hd == 64) attention_block_launch<64, 64>(fwd, a, B, s);
    else attention_block_launch<128, AttShape<128>::BC>(fwd, a, B, s);
}

// The block's operands: q rows hold the query heads from column 0 (stride blk->q_ld), kv
// rows the k heads then the v heads (stride blk->kv_ld); the running output o, dq, dout and
// out are B*Ts x Ha*hd, dkv B*Ts x 2*KVa*hd (dk then dv), lse B x Ha x Ts.
static AttBlockArgs att_block(const AttnBlock* blk, const bf16* q, const bf16* kv) {
    attention_check(blk->Ha, blk->KVa, blk->hd);
    AttBlockArgs a = {};
    int hd = blk->hd;
    a.q = q + (size_t)blk->q_row * blk->q_ld;
    a.k = kv + (size_t)blk->k_row * blk->kv_ld, a.v = a.k + blk->KVa * hd;
    a.q_seq = (size_t)blk->Ts * blk->q_ld, a.kv_seq = (size_t)blk->Ts * blk->kv_ld;
    a.q_ld = blk->q_ld, a.kv_ld = blk->kv_ld;
    a.o_ld = blk->Ha * hd, a.o_seq = (size_t)blk->Ts * a.o_ld;
    a.dkv_ld = 2 * blk->KVa * hd, a.dkv_seq = (size_t)blk->Ts * a.dkv_ld;
    a.l_ld = blk->Ts;
    a.nq = blk->nq, a.nk = blk->nk, a.diag = blk->q_pos - blk->k_pos;
    a.H = blk->Ha, a.KV = blk->KVa, a.init = blk->init;
    // with positions (q_at, k_at) the documents are looked up at them, not at q_pos + i
    if (blk->q_at && (!blk->k_at || !blk->doc)) fail("attention block: row positions need key positions and documents");
    a.doc = blk->doc ? blk->doc + (blk->q_at ? 0 : blk->q_pos) : NULL, a.doc_ld = blk->doc_ld, a.k_pos = blk->k_pos;
    a.q_at = blk->q_at, a.k_at = blk->k_at, a.at_ld = blk->at_ld;
    return a;
}
// o, lse (fp32): the block merged in by log-sum-exp (blk->init: its query rows start here).
static void attention_block_forward_gpu(float* o, float* lse, const bf16* q, const bf16* kv, const AttnBlock* blk,
                                        cudaStream_t s) {
    AttBlockArgs a = att_block(blk, q, kv);
    a.o = o + (size_t)blk->q_row * a.o_ld, a.lse = lse + blk->q_row;
    attention_block_run(1, a, blk->B, blk->hd, s);
}
// dq, dkv (fp32) += the block's gradients, from the final lse and out. Dsum goes to the
// reduction scratch, for all B*Ha*Ts rows (the whole-sequence kernel's, on Ts rows: a pass
// over out and dout, small beside the block).
static void attention_block_backward_gpu(float* dq, float* dkv, const bf16* q, const bf16* kv, const bf16* dout,
                                         const bf16* out, const float* lse, const AttnBlock* blk, cudaStream_t s) {
    AttBlockArgs a = att_block(blk, q, kv);
    size_t rows = (size_t)blk->B * blk->Ts * blk->Ha, q_off = (size_t)blk->q_row * a.o_ld,
           k_off = (size_t)blk->k_row * a.dkv_ld;
    if (rows > gpu_scratch_n)
        fail("attention backward: reduction scratch (%zu floats) < B*Ha*Ts = %zu", gpu_scratch_n, rows);
    attention_dsum_kernel<<<cdiv(rows, 8), 256, 0, s>>>(gpu_scratch, dout, out, blk->B, blk->Ts, blk->Ha, blk->hd);
    launchCheck();
    a.dout = dout + q_off, a.lse = (float*)lse + blk->q_row, a.dsum = gpu_scratch + blk->q_row;
    a.dq = dq + q_off, a.dk = dkv + k_off, a.dv = dkv + k_off + blk->KVa * blk->hd;
    attention_block_run(0, a, blk->B, blk->hd, s);
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
