// emu/cuda_emu.h: CUDA on the CPU, so the GPU build's own code runs where there is no GPU.
//
// The GPU sources (kernels_gpu.cuh, train_gpt.cu, test_gpu.cu) are compiled unchanged by
// g++, with two steps in between (the Makefile's emu/build rule):
//   1. emu/cu2cpp.pl rewrites each launch `k<<<grid, block, smem, stream>>>(args)` into
//      `emu_launch("k", k, emu_cfg(grid, block, smem, stream), args)`;
//   2. this header is force-included first (-include): it takes the real CUDA, cuBLASLt and
//      NCCL headers for their types, turns the CUDA qualifiers into plain C++, and defines
//      the runtime, the device intrinsics the kernels use, cuBLASLt (emu/cublaslt_emu.h)
//      and NCCL over MPI (emu/nccl_emu.h). Nothing from libcudart, libcublasLt or libnccl
//      is linked.
//
// How a kernel runs: every CUDA thread of a block is a fiber (its own stack, switched by
// emu_switch below) and the block's fibers run one at a time, each until it reaches a
// barrier: __syncthreads, or a warp shuffle, which waits for the 32 lanes of its warp.
// So the kernels see what they would see on a GPU that ran their threads in this order.
// Blocks run in parallel on OpenMP threads; __shared__ variables are static thread_local,
// one copy per OpenMP thread, i.e. per block in flight.
//
// What it checks that a GPU would not report: a barrier that some threads never reach
// (deadlock), a shuffle whose warp has lanes that have exited or whose mask is not the full
// warp, a read from a lane that does not exist, an invalid launch configuration (as CUDA
// reports it, through cudaGetLastError), overlapping cudaMemcpy ranges, ldmatrix's row
// alignment, mma or ldmatrix in a partial warp, cudaMalloc beyond the device's memory
// (EMU_DEVICE_MIB), a launch with more than 48 KiB of dynamic shared memory (extern
// __shared__) whose kernel's cudaFuncAttributeMaxDynamicSharedMemorySize was not raised,
// and a thread that exits with cp.async copies it never waited for. cp.async copies land
// at the cp.async.wait_group that completes them, not before, so a missing wait reads
// stale shared memory (emu/test_emu.cu shows it). Device memory starts as all-ones bytes (a NaN in fp32 and bf16), so a
// read of memory nobody wrote shows up as NaN in the results; each buffer is exactly its
// size, so the AddressSanitizer builds (train_gpu_emu_asan, test_gpu_emu_asan) report a
// kernel's access past its end with the kernel's name and line. EMU_ORDER=reverse runs
// each block's threads in the reverse order, which changes what a missing barrier lets a
// thread see. Streams are queues run in an adversarial order (see "Streams and events"
// below; emu/test_emu.cu checks it), so a missing event between two streams shows up as a
// wrong result. EMU_PROFILE=1 prints the emulator's time per kernel at exit.
//
// What it cannot tell: timing, memory-model and bank-conflict effects, whether the real
// cuBLASLt accepts a layout that this emulation accepts (it checks the documented rules),
// and whether the tensor-core register layouts below are read from the PTX ISA rightly
// (test_gpu's mma_layout check tells that on a GPU).
// Speed: tiny models only (~1e6 thread switches per second).
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <nccl.h>
#include <mpi.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>
#include <string>
#include <unordered_map>

// The CUDA qualifiers, for a host compiler.
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __shared__
#define __shared__ static thread_local
#undef __launch_bounds__
#define __launch_bounds__(...)

[[noreturn]] static void emu_fail(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "error: cuda emulator: %s\n", msg);
    fflush(stderr);
    int mpi = 0;
    MPI_Initialized(&mpi);
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

// ----------------------------------------------------------------------------
// Fibers. emu_switch saves the callee-saved registers and the stack pointer of the running
// fiber in *save_sp and resumes the one whose stack pointer is to_sp (System V x86-64 ABI:
// everything else is caller-saved). The SSE and x87 control words are left alone: no
// kernel changes them, so all fibers of an OpenMP thread share that thread's.

#if !defined(__x86_64__)
#error "emu/cuda_emu.h: the fiber switch is written for x86-64"
#endif
extern "C" void emu_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");

enum { EMU_RUN, EMU_WAIT_BLOCK, EMU_WAIT_WARP, EMU_DONE };
static const size_t EMU_STACK = 256u << 10;  // per CUDA thread; a guard page below each
static const int EMU_MAX_THREADS = 1024;

// One cp.async copy issued and not yet waited for: its 16 bytes as read at the issue, landing
// in shared memory at the cp.async.wait_group that completes its group (intrinsics_emu.h).
struct EmuCopy {
    void* dst;
    unsigned char data[16];
    long group;
};
static const int EMU_MAX_ASYNC = 64;  // copies in flight per thread
struct EmuThread {
    void* sp;
    char* stack;  // lowest usable byte (the guard page is below it)
    uint3 idx;
    int lane, warp, state;
    EmuCopy async[EMU_MAX_ASYNC];
    int n_async;       // copies issued, not yet landed
    long async_group;  // the open (uncommitted) group: cp.async.commit_group closes it
};
struct EmuWarp {
    int size, live, arrived;
    uint64_t vals[32];    // shuffle and ldmatrix exchange
    float mma[2][16 * 16];  // mma_16816 exchange: A and B, row-major
};
// One block in flight on this OpenMP thread.
struct EmuBlock {
    EmuThread threads[EMU_MAX_THREADS];
    EmuWarp warps[EMU_MAX_THREADS / 32];
    int n, live, arrived;
    int pos;  // the running thread's place in this pass over the block (emu_thread_at)
    void* sched_sp;
    void (*body)(void*);
    void* arg;
    const char* kernel;
    unsigned char* dyn_smem;  // extern __shared__: the launch's dynamic shared memory, exactly its size
};
static thread_local EmuBlock* emu_blk;
static thread_local EmuThread* emu_self;
static thread_local uint3 emu_block_idx;
static thread_local dim3 emu_block_dim, emu_grid_dim;
static cudaError_t emu_last_error = cudaSuccess;
static int emu_reverse = -1;  // EMU_ORDER=reverse, read at the first launch

#define threadIdx (emu_self->idx)
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

static EmuBlock* emu_block_state(void) {
    if (!emu_blk) {
        emu_blk = (EmuBlock*)calloc(1, sizeof(EmuBlock));
        if (!emu_blk) emu_fail("out of memory for the block state");
    }
    return emu_blk;
}
static char* emu_stack(EmuThread* t) {
    if (!t->stack) {
        long page = 4096;
        char* p = (char*)mmap(NULL, EMU_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) emu_fail("cannot map a %zu KiB thread stack", EMU_STACK >> 10);
        mprotect(p, page, PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
        t->stack = p + page;
    }
    return t->stack;
}

// The k-th thread of a pass over the block: index order, or reversed with EMU_ORDER=reverse.
static EmuThread* emu_thread_at(EmuBlock* b, int k) { return &b->threads[emu_reverse ? b->n - 1 - k : k]; }

// Hand over to the next runnable thread of this pass, or back to the scheduler, which
// starts the next pass (or reports a deadlock) when there is none.
static void emu_yield(void) {
    EmuBlock* b = emu_blk;
    EmuThread* me = emu_self;
    while (++b->pos < b->n) {
        EmuThread* t = emu_thread_at(b, b->pos);
        if (t->state != EMU_RUN) continue;
        emu_self = t;
        emu_switch(&me->sp, t->sp);
        return;
    }
    emu_switch(&me->sp, b->sched_sp);
}

// Everyone waiting at the barrier runs again: the whole block, or this thread's warp.
static void emu_release(int waiting) {
    EmuBlock* b = emu_blk;
    int lo = 0, hi = b->n;
    if (waiting == EMU_WAIT_WARP) lo = emu_self->warp * 32, hi = lo + b->warps[emu_self->warp].size;
    for (int i = lo; i < hi; i++)
        if (b->threads[i].state == waiting) b->threads[i].state = EMU_RUN;
}

static void emu_thread_exit(void) {
    EmuBlock* b = emu_blk;
    EmuWarp* w = &b->warps[emu_self->warp];
    emu_self->state = EMU_DONE;
    b->live--, w->live--;
    if (emu_self->n_async)
        emu_fail("%s: thread %u exited with %d cp.async copies it never waited for (cp.async.wait_group)", b->kernel,
                 emu_self->idx.x, emu_self->n_async);
    if (w->arrived)
        emu_fail("%s: thread %u exited while %d lanes of its warp wait in a shuffle", b->kernel, emu_self->idx.x,
                 w->arrived);
    if (b->arrived && b->arrived == b->live) {  // the exited thread no longer holds the barrier
        b->arrived = 0;
        emu_release(EMU_WAIT_BLOCK);
    }
    emu_yield();  // never resumed
}
static void emu_thread_main(void) {
    emu_blk->body(emu_blk->arg);
    emu_thread_exit();
}

// A fresh stack whose first emu_switch "returns" into emu_thread_main with the stack
// aligned as at a function entry (rsp = 8 mod 16).
static void emu_thread_start(EmuThread* t) {
    uint64_t* sp = (uint64_t*)(emu_stack(t) + EMU_STACK);
    *--sp = 0;                            // emu_thread_main's return address: it never returns
    *--sp = (uint64_t)&emu_thread_main;   // popped by emu_switch's ret
    for (int i = 0; i < 6; i++) *--sp = 0;  // rbp rbx r12 r13 r14 r15
    t->sp = sp;
    t->state = EMU_RUN;
    t->n_async = 0, t->async_group = 0;
}

// The block's dynamic shared memory (extern __shared__, which emu/cu2cpp.pl rewrites to a
// call of this): a fresh allocation of exactly the launch's size per block, all-ones bytes
// like device memory, so a read of what no thread wrote (or a cp.async not yet waited for)
// shows as NaN, and under ASan an access past its end is reported.
static void* emu_dynamic_smem(void) { return emu_blk->dyn_smem; }

static void emu_run_block(const char* kernel, void (*body)(void*), void* arg, size_t smem) {
    EmuBlock* b = emu_block_state();
    dim3 bd = emu_block_dim;
    int n = (int)(bd.x * bd.y * bd.z);
    b->n = b->live = n, b->arrived = 0, b->body = body, b->arg = arg, b->kernel = kernel;
    b->dyn_smem = (unsigned char*)malloc(smem ? smem : 1);
    if (!b->dyn_smem) emu_fail("out of memory for %zu bytes of dynamic shared memory", smem);
    memset(b->dyn_smem, 0xff, smem);
    for (int i = 0; i < n; i++) {
        EmuThread* t = &b->threads[i];
        t->idx = make_uint3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
        t->lane = i % 32, t->warp = i / 32;
        emu_thread_start(t);
    }
    for (int w = 0; w * 32 < n; w++) {
        int size = n - w * 32 < 32 ? n - w * 32 : 32;
        b->warps[w].size = b->warps[w].live = size, b->warps[w].arrived = 0;
    }
    while (b->live) {
        int ran = 0;
        for (b->pos = 0; b->pos < n; b->pos++) {  // the threads move b->pos on as they hand over
            EmuThread* t = emu_thread_at(b, b->pos);
            if (t->state != EMU_RUN) continue;
            emu_self = t;
            emu_switch(&b->sched_sp, t->sp);
            ran = 1;
        }
        if (!ran) {
            int at_block = 0, at_warp = 0;
            for (int i = 0; i < n; i++)
                at_block += b->threads[i].state == EMU_WAIT_BLOCK, at_warp += b->threads[i].state == EMU_WAIT_WARP;
            emu_fail("%s: block (%u,%u,%u) deadlocks: %d threads wait in __syncthreads, %d in warp shuffles, %d exited",
                     kernel, emu_block_idx.x, emu_block_idx.y, emu_block_idx.z, at_block, at_warp, n - b->live);
        }
    }
    emu_self = NULL;
    free(b->dyn_smem);
    b->dyn_smem = NULL;
}

// ----------------------------------------------------------------------------
// Streams and events. Work queued on a stream (kernels, async copies, cuBLASLt, NCCL, event
// records and waits) runs later, when the host synchronizes on something that needs it, in
// stream order and honouring cudaStreamWaitEvent; between streams the order is adversarial:
// the non-blocking streams' work first, as early as its events allow (EMU_STREAMS=compute:
// the other streams first, as late as possible). So a missing event between two streams
// shows up as wrong results, as it could on a GPU. An NCCL call is an op that may take
// several calls to finish (its transfers wait for the peers): meanwhile its stream waits
// and the other streams go on, as concurrent kernels would.

struct EmuEvent {
    double t;       // when its last record ran
    long recorded;  // records queued so far
    long done;      // records that have run
};
struct EmuOp {
    std::function<bool()> run;  // true once done (at the first call but for NCCL's), or, if NULL, a wait:
    EmuEvent* wait;
    long until;                 // ... until wait->done >= until
    long seq;                   // queued as the seq-th op of the process
};
struct EmuStream {
    std::deque<EmuOp> q;
    int non_blocking;
};
static EmuStream emu_legacy_stream;           // stream 0
static std::vector<EmuStream*> emu_stream_list = {&emu_legacy_stream};
static int emu_compute_first = -1;            // EMU_STREAMS=compute

static long emu_op_seq;

static EmuStream* emu_stream(cudaStream_t s) { return s ? (EmuStream*)s : &emu_legacy_stream; }
static void emu_enqueue_op(cudaStream_t s, std::function<bool()> run, EmuEvent* wait, long until) {
    emu_stream(s)->q.push_back(EmuOp{std::move(run), wait, until, ++emu_op_seq});
}
// An op done in one call, and one polled until it says it is done.
static void emu_enqueue(cudaStream_t s, std::function<void()> run) {
    emu_enqueue_op(s, [run] { run(); return true; }, NULL, 0);
}
static void emu_enqueue_poll(cudaStream_t s, std::function<bool()> poll) {
    emu_enqueue_op(s, std::move(poll), NULL, 0);
}

// Whether the op at the front of st may run: its event wait is satisfied, and CUDA's legacy
// default stream (stream 0) is ordered with the blocking streams both ways: its work waits
// for theirs queued before it, and theirs for its.
static int emu_op_ready(const EmuStream* st) {
    const EmuOp& op = st->q.front();
    if (!op.run && op.wait->done < op.until) return 0;
    if (st->non_blocking) return 1;
    if (st != &emu_legacy_stream) return emu_legacy_stream.q.empty() || emu_legacy_stream.q.front().seq > op.seq;
    for (const EmuStream* o : emu_stream_list)
        if (o != st && !o->non_blocking && !o->q.empty() && o->q.front().seq < op.seq) return 0;
    return 1;
}

// Run one op that can run (the preferred kind of stream first); 1 if one finished. *pending
// is set when an unfinished NCCL op was polled.
static int emu_run_one(int* pending) {
    if (emu_compute_first < 0) emu_compute_first = getenv("EMU_STREAMS") && !strcmp(getenv("EMU_STREAMS"), "compute");
    for (int pass = 0; pass < 2; pass++)  // pass 0: the preferred kind of stream
        for (EmuStream* st : emu_stream_list) {
            if (st->q.empty() || (st->non_blocking == emu_compute_first) == (pass == 0) || !emu_op_ready(st)) continue;
            if (st->q.front().run && !st->q.front().run()) {
                *pending = 1;
                continue;
            }
            st->q.pop_front();
            return 1;
        }
    return 0;
}
// Everything that can run now, without waiting; 1 if anything finished.
static int emu_device_progress(void) {
    int pending = 0, any = 0;
    while (emu_run_one(&pending)) any = 1;
    return any;
}

// Run queued work until done() holds. When only unfinished NCCL ops are left, poll them
// (yielding the core to the other ranks), and stop with an error after EMU_STALL_S seconds
// (default 120) without progress: a peer never issued its side.
static void emu_run_until(const std::function<bool()>& done) {
    double stalled_since = 0;
    while (!done()) {
        int pending = 0;
        if (emu_run_one(&pending)) {
            stalled_since = 0;
            continue;
        }
        if (!pending) emu_fail("streams deadlock: the work left waits for events that no stream will record");
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double t = ts.tv_sec + 1e-9 * ts.tv_nsec, limit = getenv("EMU_STALL_S") ? atof(getenv("EMU_STALL_S")) : 120;
        if (!stalled_since) stalled_since = t;
        else if (t - stalled_since > limit)
            emu_fail("NCCL transfers made no progress for %.0f s: a peer never issued its side", limit);
        usleep(50);
    }
}
static void emu_sync_all(void) {
    emu_run_until([] {
        for (EmuStream* st : emu_stream_list)
            if (!st->q.empty()) return false;
        return true;
    });
}

// ----------------------------------------------------------------------------
// Launches.

struct EmuCfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
static EmuCfg emu_cfg(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
    return EmuCfg{grid, block, smem, stream};
}

// EMU_PROFILE=1: seconds and CUDA threads per kernel, printed at exit (where the emulator's
// time goes; says nothing of the kernel's speed on a GPU).
struct EmuProfile { double seconds, threads; long launches; };
static std::unordered_map<std::string, EmuProfile>* emu_profile;
static void emu_profile_print(void) {
    fprintf(stderr, "cuda emulator profile: %-36s %9s %8s %12s\n", "kernel", "seconds", "launches", "threads");
    for (auto& k : *emu_profile)
        fprintf(stderr, "cuda emulator profile: %-36s %9.3f %8ld %12.0f\n", k.first.c_str(), k.second.seconds,
                k.second.launches, k.second.threads);
}

// The emulated card: EMU_ARCH, its compute capability (80: A100, 86: RTX 30, 89: RTX 40 / L40,
// 90: H100 / H200, the default), which sets what it reports and the dynamic shared memory a
// block may opt in to (the CUDA C Programming Guide's table of compute capabilities: 163 KiB on
// 8.0, 99 KiB on 8.6 and 8.9, 227 KiB on 9.0), so a kernel over a card's limit fails here too.
static int emu_arch(void) {
    static const int arch = [] {
        const char* e = getenv("EMU_ARCH");
        int a = e ? atoi(e) : 90;
        if (a != 80 && a != 86 && a != 89 && a != 90) {
            fprintf(stderr, "error: EMU_ARCH=%s: the emulated card is 80, 86, 89 or 90\n", e);
            exit(1);
        }
        return a;
    }();
    return arch;
}
static int emu_smem_optin(void) { return (emu_arch() == 80 ? 163 : emu_arch() == 90 ? 227 : 99) << 10; }

// Dynamic shared memory: up to 48 KiB per block, more (up to emu_smem_optin) only for a kernel
// whose cudaFuncAttributeMaxDynamicSharedMemorySize was raised to it.
static const int EMU_SMEM_DEFAULT = 48 << 10;
static std::mutex emu_func_lock;
static std::unordered_map<const void*, int> emu_func_max_smem;
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return cudaErrorInvalidDeviceFunction;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;  // the one this code sets
    if (value < 0 || value > emu_smem_optin()) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> g(emu_func_lock);
    emu_func_max_smem[func] = value;
    return cudaSuccess;
}
template <typename T>  // cuda_runtime.h's form for a kernel (it declares it for nvcc only)
cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)func, attr, value);
}
static size_t emu_max_smem(const void* func) {
    std::lock_guard<std::mutex> g(emu_func_lock);
    auto it = emu_func_max_smem.find(func);
    return it != emu_func_max_smem.end() && it->second > EMU_SMEM_DEFAULT ? it->second : EMU_SMEM_DEFAULT;
}

// CUDA's limits (compute capability 9.0); a launch outside them fails as on a GPU.
static cudaError_t emu_cfg_check(EmuCfg cfg, const void* func) {
    dim3 g = cfg.grid, bd = cfg.block;
    size_t threads = (size_t)bd.x * bd.y * bd.z, blocks = (size_t)g.x * g.y * g.z;
    if (!(threads && blocks && threads <= 1024 && bd.z <= 64 && g.y <= 65535 && g.z <= 65535))
        return cudaErrorInvalidConfiguration;
    return cfg.smem <= emu_max_smem(func) ? cudaSuccess : cudaErrorInvalidValue;
}

static void emu_grid(const char* kernel, EmuCfg cfg, void (*body)(void*), void* arg) {
    if (emu_reverse < 0) {
        const char* o = getenv("EMU_ORDER");
        emu_reverse = o && !strcmp(o, "reverse");
        if (getenv("EMU_PROFILE"))
            emu_profile = new std::unordered_map<std::string, EmuProfile>, atexit(emu_profile_print);
    }
    double t0 = emu_profile ? omp_get_wtime() : 0;
    dim3 g = cfg.grid, bd = cfg.block;
    size_t threads = (size_t)bd.x * bd.y * bd.z, blocks = (size_t)g.x * g.y * g.z;
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
    for (size_t i = 0; i < blocks; i++) {
        emu_block_idx = make_uint3(i % g.x, (i / g.x) % g.y, i / ((size_t)g.x * g.y));
        emu_block_dim = bd, emu_grid_dim = g;
        emu_run_block(kernel, body, arg, cfg.smem);
    }
    if (emu_profile) {
        EmuProfile& p = (*emu_profile)[kernel];
        p.seconds += omp_get_wtime() - t0, p.threads += (double)threads * blocks, p.launches++;
    }
}

// The launch arguments convert to the kernel's parameter types at the call (P is deduced
// from the kernel alone, so NULL stays a null pointer) and are kept with the queued launch,
// as CUDA does; every thread then calls the kernel with them.
template <typename T> struct emu_same { typedef T type; };
template <typename... P>
static void emu_launch(const char* name, void (*kernel)(P...), EmuCfg cfg, typename emu_same<P>::type... args) {
    cudaError_t e = emu_cfg_check(cfg, (const void*)kernel);
    if (e != cudaSuccess) {
        emu_last_error = e;
        return;
    }
    auto call = [=]() { kernel(args...); };
    emu_enqueue(cfg.stream, [=]() mutable { emu_grid(name, cfg, [](void* f) { (*(decltype(call)*)f)(); }, &call); });
}

// ----------------------------------------------------------------------------
// Device intrinsics: barriers, warp shuffles, the tensor-core instructions, atomics.
#include "intrinsics_emu.h"

// ----------------------------------------------------------------------------
// The runtime: device memory is host memory; streams and events are synchronous.

static std::mutex emu_mem_lock;
static std::unordered_map<void*, size_t> emu_allocs;
static size_t emu_allocated;
// The device memory: EMU_DEVICE_MIB (default 16 GiB); cudaMalloc beyond it fails as on a GPU.
static size_t emu_device_bytes(void) {
    const char* e = getenv("EMU_DEVICE_MIB");
    return (e && atol(e) > 0 ? (size_t)atol(e) : 16384) << 20;
}

// EMU_DEVICES (default 8, a DGX node) devices on the node, all of them this process's memory:
// so a hand-started multi-rank run on one machine gets one "GPU" per rank and uses NCCL
// (emu/nccl_emu.h). CUDA_VISIBLE_DEVICES selects and renumbers them as CUDA does (a list of
// the node's device numbers; the first invalid entry ends it), so a launcher's one device per
// rank is emulated too. Each device has its PCI bus id (0000:NN:00.0, NN its number on the
// node); NCCL refuses two ranks of a communicator on one (emu/nccl_emu.h).
static std::vector<int> emu_visible;  // visible device i is the node's device emu_visible[i]
static int emu_current;               // the node's device this process works on (cudaSetDevice)
static int emu_devices(void) {
    static int done;
    if (!done) {
        done = 1;
        const char* e = getenv("EMU_DEVICES");
        int node = e && atoi(e) > 0 ? atoi(e) : 8;
        const char* v = getenv("CUDA_VISIBLE_DEVICES");
        for (int d = 0; d < node && !v; d++) emu_visible.push_back(d);
        for (const char* p = v; p && *p;) {
            char* end;
            long d = strtol(p, &end, 10);
            if (end == p || d < 0 || d >= node) break;
            emu_visible.push_back((int)d);
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') break;
        }
        if (!emu_visible.empty()) emu_current = emu_visible[0];
    }
    return (int)emu_visible.size();
}
cudaError_t cudaGetDeviceCount(int* n) {
    *n = emu_devices();
    return *n ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int dev) {
    if (dev < 0 || dev >= emu_devices()) return cudaErrorInvalidDevice;
    emu_current = emu_visible[dev];
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) {
    int n = emu_devices();
    *dev = 0;
    for (int i = 0; i < n; i++)
        if (emu_visible[i] == emu_current) *dev = i;
    return n ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int dev) {
    if (dev < 0 || dev >= emu_devices()) return cudaErrorInvalidDevice;
    snprintf(bus, len, "0000:%02x:00.0", emu_visible[dev]);
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
    if (dev < 0 || dev >= emu_devices()) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CUDA emulator on the CPU");
    p->major = emu_arch() / 10, p->minor = emu_arch() % 10;
    p->totalGlobalMem = emu_device_bytes();
    p->multiProcessorCount = 1, p->warpSize = 32, p->maxThreadsPerBlock = 1024, p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = emu_smem_optin();
    p->pciBusID = emu_visible[dev];
    return cudaSuccess;
}
// The clock is 1 GHz (so the peak from the properties is 4.1 TFLOP/s: one SM of sm_90).
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev) {
    if (dev < 0 || dev >= emu_devices()) return cudaErrorInvalidDevice;
    if (attr == cudaDevAttrClockRate) *value = 1000000;
    else if (attr == cudaDevAttrMultiProcessorCount) *value = 1;
    else return cudaErrorInvalidValue;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { emu_sync_all(); return cudaSuccess; }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu_last_error;
    emu_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return emu_last_error; }
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    default: return "unknown error (cuda emulator)";
    }
}

// 256-byte aligned like CUDA's, and exactly `bytes` long: under AddressSanitizer
// (make test_gpu_emu_asan) a kernel's access one element past its buffer is reported.
cudaError_t cudaMalloc(void** p, size_t bytes) {
    {
        std::lock_guard<std::mutex> g(emu_mem_lock);
        if (emu_allocated + bytes > emu_device_bytes()) return cudaErrorMemoryAllocation;
    }
    if (posix_memalign(p, 256, bytes ? bytes : 1)) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, bytes);  // NaN in fp32 and bf16: reads of unwritten memory show
    std::lock_guard<std::mutex> g(emu_mem_lock);
    emu_allocs[*p] = bytes;
    emu_allocated += bytes;
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    emu_sync_all();  // as CUDA's: queued work may still use it
    std::lock_guard<std::mutex> g(emu_mem_lock);
    auto it = emu_allocs.find(p);
    if (it == emu_allocs.end()) return cudaErrorInvalidDevicePointer;
    emu_allocated -= it->second;
    emu_allocs.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void* p) { emu_sync_all(); free(p); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *total_b = emu_device_bytes();
    *free_b = *total_b - emu_allocated;
    return cudaSuccess;
}
static void emu_copy(void* dst, const void* src, size_t bytes) {
    if ((char*)dst < (const char*)src + bytes && (const char*)src < (char*)dst + bytes && dst != src)
        emu_fail("cudaMemcpy of %zu bytes between overlapping ranges", bytes);
    memcpy(dst, src, bytes);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (!bytes) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    emu_enqueue(s, [=] { emu_copy(dst, src, bytes); });
    return cudaSuccess;
}
// height rows of width bytes, dpitch / spitch bytes apart (the rows must not overlap).
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
    if (!width || !height) return cudaSuccess;
    if (!dst || !src || width > dpitch || width > spitch) return cudaErrorInvalidValue;
    emu_enqueue(s, [=] {
        for (size_t r = 0; r < height; r++) emu_copy((char*)dst + r * dpitch, (const char*)src + r * spitch, width);
    });
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
    if (bytes && !p) return cudaErrorInvalidValue;
    emu_enqueue(s, [=] { memset(p, value, bytes); });
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s);
// The blocking forms run on the legacy default stream and return when done: after the work
// queued before them on the blocking streams, not necessarily the non-blocking streams'.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, 0);
    return e != cudaSuccess ? e : cudaStreamSynchronize(0);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    cudaError_t e = cudaMemsetAsync(p, value, bytes, 0);
    return e != cudaSuccess ? e : cudaStreamSynchronize(0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    EmuStream* st = new EmuStream;
    st->non_blocking = (flags & cudaStreamNonBlocking) != 0;
    emu_stream_list.push_back(st);
    *s = (cudaStream_t)st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    EmuStream* st = emu_stream(s);
    emu_run_until([st] { return st->q.empty(); });
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return cudaErrorInvalidValue;
    cudaStreamSynchronize(s);  // its queued work still runs, as in CUDA
    for (size_t i = 0; i < emu_stream_list.size(); i++)
        if (emu_stream_list[i] == (EmuStream*)s) emu_stream_list.erase(emu_stream_list.begin() + i);
    delete (EmuStream*)s;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = (cudaEvent_t) new EmuEvent{0, 0, 0};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    emu_sync_all();  // no queued record or wait may still refer to it
    delete (EmuEvent*)e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    EmuEvent* ev = (EmuEvent*)e;
    long gen = ++ev->recorded;
    emu_enqueue(s, [ev, gen] {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ev->t = ts.tv_sec + 1e-9 * ts.tv_nsec;
        if (gen > ev->done) ev->done = gen;
    });
    return cudaSuccess;
}
// s waits for the event's latest record queued so far (none: nothing to wait for).
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    EmuEvent* ev = (EmuEvent*)e;
    emu_enqueue_op(s, nullptr, ev, ev->recorded);
    return cudaSuccess;
}
// Not ready is reported as an error, and also left for cudaGetLastError, as CUDA does.
cudaError_t cudaEventQuery(cudaEvent_t e) {
    EmuEvent* ev = (EmuEvent*)e;
    if (ev->done >= ev->recorded) return cudaSuccess;
    return emu_last_error = cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    EmuEvent* ev = (EmuEvent*)e;
    emu_run_until([ev] { return ev->done >= ev->recorded; });
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    EmuEvent *ea = (EmuEvent*)a, *eb = (EmuEvent*)b;
    if (!ea->done || !eb->done || ea->done < ea->recorded || eb->done < eb->recorded) return cudaErrorNotReady;
    *ms = (float)((eb->t - ea->t) * 1e3);
    return cudaSuccess;
}

#include "cublaslt_emu.h"
#include "nccl_emu.h"

// ----------------------------------------------------------------------------
// The program's blocking MPI calls. On a GPU the device goes on with its queued work while
// the host waits in MPI (a pipeline send queued before a broadcast reaches its receiver,
// which can then get to the broadcast too); here the streams run only when the host lets
// them. So in the code after this header each blocking call is its non-blocking form and a
// wait that runs the streams meanwhile.
static int emu_mpi_wait(MPI_Request* r, MPI_Status* status) {
    for (;;) {
        int flag = 0, rc = MPI_Test(r, &flag, status);
        if (rc != MPI_SUCCESS || flag) return rc;
        if (!emu_device_progress()) usleep(50);
    }
}
static int emu_mpi_done(int rc, MPI_Request* r, MPI_Status* status = MPI_STATUS_IGNORE) {
    return rc != MPI_SUCCESS ? rc : emu_mpi_wait(r, status);
}
static int emu_MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Iallreduce(s, r, n, t, op, c, &q), &q);
}
static int emu_MPI_Bcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Ibcast(b, n, t, root, c, &q), &q);
}
static int emu_MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Iallgather(s, sn, st, r, rn, rt, c, &q), &q);
}
static int emu_MPI_Reduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Ireduce_scatter_block(s, r, n, t, op, c, &q), &q);
}
static int emu_MPI_Reduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Ireduce(s, r, n, t, op, root, c, &q), &q);
}
static int emu_MPI_Gather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root,
                          MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Igather(s, sn, st, r, rn, rt, root, c, &q), &q);
}
static int emu_MPI_Gatherv(const void* s, int sn, MPI_Datatype st, void* r, const int* rn, const int* displs,
                           MPI_Datatype rt, int root, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Igatherv(s, sn, st, r, rn, displs, rt, root, c, &q), &q);
}
static int emu_MPI_Barrier(MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Ibarrier(c, &q), &q);
}
static int emu_MPI_Send(const void* b, int n, MPI_Datatype t, int dst, int tag, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Isend(b, n, t, dst, tag, c, &q), &q);
}
static int emu_MPI_Recv(void* b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* status) {
    MPI_Request q;
    return emu_mpi_done(MPI_Irecv(b, n, t, src, tag, c, &q), &q, status);
}
static int emu_MPI_Alltoall(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_done(MPI_Ialltoall(s, sn, st, r, rn, rt, c, &q), &q);
}
static int emu_MPI_Waitall(int n, MPI_Request* r, MPI_Status* statuses) {
    for (int i = 0; i < n; i++) {
        int rc = emu_mpi_wait(&r[i], statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i]);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}
#define MPI_Allreduce(...) emu_MPI_Allreduce(__VA_ARGS__)
#define MPI_Bcast(...) emu_MPI_Bcast(__VA_ARGS__)
#define MPI_Allgather(...) emu_MPI_Allgather(__VA_ARGS__)
#define MPI_Reduce_scatter_block(...) emu_MPI_Reduce_scatter_block(__VA_ARGS__)
#define MPI_Reduce(...) emu_MPI_Reduce(__VA_ARGS__)
#define MPI_Gather(...) emu_MPI_Gather(__VA_ARGS__)
#define MPI_Gatherv(...) emu_MPI_Gatherv(__VA_ARGS__)
#define MPI_Barrier(...) emu_MPI_Barrier(__VA_ARGS__)
#define MPI_Send(...) emu_MPI_Send(__VA_ARGS__)
#define MPI_Recv(...) emu_MPI_Recv(__VA_ARGS__)
#define MPI_Alltoall(...) emu_MPI_Alltoall(__VA_ARGS__)
#define MPI_Waitall(...) emu_MPI_Waitall(__VA_ARGS__)
#define MPI_Wait(...) emu_mpi_wait(__VA_ARGS__)

#endif
