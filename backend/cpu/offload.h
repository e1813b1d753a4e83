// backend/cpu/offload.h: the offload tier (--offload optimizer|activations|both), where state that
// the device does not need at every moment waits (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity,
// Rajbhandari et al. 2021; PipeOffload-style activation offload for pipeline stages).
//
// CPU build: the "device" is this process's resident memory and the tier a file-backed mapping
// under --offload-dir (ZeRO-Infinity's NVMe tier): a file made with mkstemp, its blocks reserved
// (posix_fallocate, so a full disk is an error at start-up, not a SIGBUS mid-step), mapped shared
// and unlinked at once (nothing is left behind, even after a kill). Pages written and then
// released (tier_release) leave the process's resident set: the kernel keeps them in the page
// cache or writes them to the file, and a later read faults them back in.
// GPU build: the tier is pinned host memory (cudaMallocHost, backend/gpu/offload_gpu.h).
//
// What goes there:
//   optimizer    AdamW's m and v (and on the GPU the fp32 master weights of the optimizer range,
//                updated on the host; the device keeps the fp32 copy that ZeRO's all-gather and
//                the bf16 copy read; the CPU build's fp32 parameters are its master weights and
//                stay resident: the forward reads them).
//                The CPU build updates them window by window (OFFLOAD_WINDOW_FLOATS) and
//                releases each window after its update, so at most one window is resident.
//   activations  the activation slots of a pipeline chunk (parallel/pipeline.h). The rule: a
//                chunk keeps on the device only the slots of the micro-batches that the current
//                op and the next compute op (forward, backward or weight pass) of the stage's
//                op list touch: the one being produced and the next one a backward consumes.
//                Every other micro-batch in flight waits in the tier, copied out when it stops
//                being needed and brought back one op before its backward needs it.
//                --offload-frames 1 keeps only the current op's: less memory, and the copy in
//                of a backward's activations is waited for instead of prefetched.
#ifndef OFFLOAD_H
#define OFFLOAD_H

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include "base/common.h"
#include "layout/activations.h"  // offload_frames_of, act_device_slots

// The CPU build's optimizer update under --offload optimizer: floats of m (and of v) resident at once.
#define OFFLOAD_WINDOW_FLOATS ((size_t)1 << 18)

static const char* offload_dir_of(const char* dir) {
    if (dir) return dir;
    const char* tmp = getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

// Why this rank's first tier could not be made ("" when all were): the caller reports it once for
// all ranks (train_gpt.c offload_check), so a full disk is one error line, not one per rank.
static char offload_error[8192];

// `bytes` of zeroed tier in a file under dir (NULL: $TMPDIR or /tmp); `what` names it in errors.
// NULL, with offload_error set, when it cannot be made.
static void* tier_map(const char* dir, size_t bytes, const char* what) {
    dir = offload_dir_of(dir);
    if (bytes == 0) bytes = 1;
    char path[4096];
    if (offload_error[0]) return NULL;
    if (snprintf(path, sizeof(path), "%s/train-offload-XXXXXX", dir) >= (int)sizeof(path)) {
        snprintf(offload_error, sizeof(offload_error), "--offload-dir: the path is longer than %d bytes",
                 (int)sizeof(path) - 32);
        return NULL;
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(offload_error, sizeof(offload_error), "--offload-dir %s: cannot create the %s's file there (%s)", dir,
                 what, strerror(errno));
        return NULL;
    }
    unlink(path);  // the mapping keeps the file alive; nothing is left behind after a kill
    // a file-size limit would raise SIGXFSZ and kill the process: let it come back as EFBIG instead
    signal(SIGXFSZ, SIG_IGN);
    int e = posix_fallocate(fd, 0, (off_t)bytes);
    void* p = e ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (e || p == MAP_FAILED)
        snprintf(offload_error, sizeof(offload_error), "--offload-dir %s: cannot %s %.1f MiB for the %s (%s)", dir,
                 e ? "reserve" : "map", bytes / 1048576.0, what, strerror(e ? e : errno));
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

// Drop the whole pages of [p, p + bytes) from the resident set; their contents stay in the tier.
static void tier_release(void* p, size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) / page * page, hi = ((uintptr_t)p + bytes) / page * page;
    if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
}

#endif
