// emu/intrinsics_emu.h: the device intrinsics of the CUDA emulator (emu/cuda_emu.h includes it
// after its fibers and launches): __syncthreads and the warp barrier, warp shuffles, the
// tensor-core instructions kernels_gpu.cuh issues as inline PTX, atomics, integer min/max.

static void __syncthreads(void) {
    EmuBlock* b = emu_blk;
    if (++b->arrived == b->live) {
        b->arrived = 0;
        emu_release(EMU_WAIT_BLOCK);
        return;
    }
    emu_self->state = EMU_WAIT_BLOCK;
    emu_yield();
}

// All lanes of the warp meet; only full-warp masks are supported (all this code uses).
static void emu_warp_sync(unsigned mask) {
    EmuBlock* b = emu_blk;
    EmuWarp* w = &b->warps[emu_self->warp];
    unsigned full = w->size == 32 ? 0xffffffffu : (1u << w->size) - 1;
    if (mask != full) emu_fail("%s: warp shuffle with mask %08x, the warp's lanes are %08x", b->kernel, mask, full);
    if (w->live != w->size)
        emu_fail("%s: warp shuffle in warp %d after %d of its lanes exited", b->kernel, emu_self->warp,
                 w->size - w->live);
    if (++w->arrived == w->size) {
        w->arrived = 0;
        emu_release(EMU_WAIT_WARP);
        return;
    }
    emu_self->state = EMU_WAIT_WARP;
    emu_yield();
}
template <typename T>
static T emu_shfl(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    EmuWarp* w = &emu_blk->warps[emu_self->warp];
    memcpy(&w->vals[emu_self->lane], &v, sizeof(T));
    emu_warp_sync(mask);
    if (src < 0 || src >= w->size)
        emu_fail("%s: shuffle reads lane %d of a %d-lane warp", emu_blk->kernel, src, w->size);
    T r;
    memcpy(&r, &w->vals[src], sizeof(T));
    emu_warp_sync(mask);  // nobody overwrites vals before every lane has read
    return r;
}
template <typename T>
static T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = emu_self->lane;
    return emu_shfl(mask, v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <typename T>
static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = emu_self->lane, src = lane ^ lane_mask;
    return emu_shfl(mask, v, src >= ((lane & ~(width - 1)) + width) ? lane : src);
}

static void __syncwarp(unsigned mask = 0xffffffffu) { emu_warp_sync(mask); }

// The tensor-core instructions kernels_gpu.cuh issues as inline PTX, with the register
// layouts of the PTX ISA ("Matrix fragments for mma.m16n8k16", "ldmatrix"); g = lane / 4,
// t = lane % 4, a .bf16x2 register holds its lower-indexed element in its low 16 bits.
//   mma_16816(d, a, b): d (16 x 8, fp32) += A (16 x 16, row) B (16 x 8, col), i.e.
//     mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32. a[r] holds A[g + 8 (r % 2)]
//     [2t + 8 (r / 2) + {0, 1}], b[r] holds B[2t + 8 r + {0, 1}][g], d[i] is
//     D[g + 8 (i / 2)][2t + i % 2].
//   ldsm_x4(r, p) / ldsm_x4_t(r, p): ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16. Lane
//     l gives the address of row l % 8 of 8 x 8 matrix l / 8 (16 bytes, 16-byte aligned);
//     r[j] gets row g, columns 2t, 2t + 1 of matrix j (.trans: of its transpose).
// Each is a warp exchange: all 32 lanes must take part, as on the GPU. Products are summed
// in fp32 in k order here (the tensor cores' summation order differs).
static inline float emu_bf16_half(uint32_t r, int hi) {
    uint16_t h = (uint16_t)(hi ? r >> 16 : r);
    return __bfloat162float(__ushort_as_bfloat16(h));
}
static EmuWarp* emu_full_warp(const char* what) {
    EmuWarp* w = &emu_blk->warps[emu_self->warp];
    if (w->size != 32) emu_fail("%s: %s in a warp of %d lanes (it needs all 32)", emu_blk->kernel, what, w->size);
    return w;
}
static void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    EmuWarp* w = emu_full_warp("mma.m16n8k16");
    float *A = w->mma[0], *B = w->mma[1];  // A 16 x 16 and B 16 x 8, row-major
    int g = emu_self->lane / 4, t = emu_self->lane % 4;
    for (int r = 0; r < 4; r++)
        for (int h = 0; h < 2; h++) A[(g + 8 * (r % 2)) * 16 + 2 * t + 8 * (r / 2) + h] = emu_bf16_half(a[r], h);
    for (int r = 0; r < 2; r++)
        for (int h = 0; h < 2; h++) B[(2 * t + 8 * r + h) * 8 + g] = emu_bf16_half(b[r], h);
    emu_warp_sync(0xffffffffu);
    float out[4];
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float s = d[i];
        for (int k = 0; k < 16; k++) s += A[row * 16 + k] * B[k * 8 + col];
        out[i] = s;
    }
    emu_warp_sync(0xffffffffu);  // every lane has read the exchange before it is reused
    for (int i = 0; i < 4; i++) d[i] = out[i];
}
static void emu_ldsm(uint32_t r[4], const void* row, bool trans) {
    EmuWarp* w = emu_full_warp("ldmatrix");
    if ((uintptr_t)row % 16) emu_fail("%s: ldmatrix row address %p is not 16-byte aligned", emu_blk->kernel, row);
    int l = emu_self->lane, g = l / 4, t = l % 4;
    w->vals[l] = (uint64_t)(uintptr_t)row;
    emu_warp_sync(0xffffffffu);
    for (int j = 0; j < 4; j++) {
        const uint16_t* const* rows = (const uint16_t* const*)&w->vals[8 * j];
        uint16_t lo = trans ? rows[2 * t][g] : rows[g][2 * t], hi = trans ? rows[2 * t + 1][g] : rows[g][2 * t + 1];
        r[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    emu_warp_sync(0xffffffffu);
}
typedef uintptr_t smem_t;  // common.cuh's shared-memory address: here a host pointer
static smem_t smem_addr(const void* p) { return (smem_t)p; }
static void ldsm_x4(uint32_t r[4], smem_t row) { emu_ldsm(r, (const void*)row, false); }
static void ldsm_x4_t(uint32_t r[4], smem_t row) { emu_ldsm(r, (const void*)row, true); }

static float atomicAdd(float* p, float v) {
    float old;
#pragma omp atomic capture
    { old = *p; *p += v; }
    return old;
}
static int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

// CUDA's integer min/max overloads of device code.
static int min(int a, int b) { return a < b ? a : b; }
static int max(int a, int b) { return a > b ? a : b; }
static unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

// cp.async (common.cuh's cp_async16, cp_async_commit, cp_async_wait<N>): a 16-byte copy from
// global to shared memory that runs beside the thread, grouped by cp.async.commit_group and
// completed by cp.async.wait_group N (every committed group but the newest N). Here the
// copy reads its source at the issue and writes shared memory only at the wait that
// completes its group, the latest a GPU may: a read of the destination before that wait
// sees the old bytes (so a missing wait gives wrong data in a test rather than passing by
// luck), and a thread that exits with copies never waited for is an error. valid = false
// is the instruction's src-size 0: 16 zero bytes, nothing read.
static void cp_async16(void* dst, const void* src, bool valid) {
    EmuThread* me = emu_self;
    if ((uintptr_t)dst % 16 || (valid && (uintptr_t)src % 16))
        emu_fail("%s: cp.async of 16 bytes with an address not 16-byte aligned (%p <- %p)", emu_blk->kernel, dst, src);
    if (me->n_async == EMU_MAX_ASYNC)
        emu_fail("%s: more than %d cp.async copies in flight in one thread", emu_blk->kernel, EMU_MAX_ASYNC);
    EmuCopy* c = &me->async[me->n_async++];
    c->dst = dst, c->group = me->async_group;
    if (valid) memcpy(c->data, src, 16);
    else memset(c->data, 0, 16);
}
static void cp_async_commit(void) { emu_self->async_group++; }
template <int N>
static void cp_async_wait(void) {
    EmuThread* me = emu_self;
    int kept = 0;
    for (int i = 0; i < me->n_async; i++) {
        EmuCopy* c = &me->async[i];
        if (c->group < me->async_group - N) memcpy(c->dst, c->data, 16);  // a committed group older than the newest N
        else me->async[kept++] = *c;
    }
    me->n_async = kept;
}
