// fuzz/fuzz_common.h: what the libFuzzer harnesses share.
//
// Rejected inputs. fail() (common.h) prints one "error: ..." line and exits. A fuzzer must
// see a rejected input as a normal return, so each harness sets the global fail_hook to
// fuzz_fail_jump(), which longjmps back into LLVMFuzzerTestOneInput (FUZZ_TRY below).
// fail() never reaches its exit(1) then.
//
// Leaks. After the jump the reader never reaches its fclose()/free(), and over a million
// inputs that would run out of file descriptors and memory. So every fopen/fclose and
// malloc/calloc/realloc/free of the project headers goes through the trackers below
// (macros defined after the system headers and before the project's; fdopen too, which
// files.h's input_open uses), and fuzz_reset()
// closes and frees whatever an input left behind. An allocation above FUZZ_MAX_ALLOC
// returns NULL, as a real malloc that runs out would, so the readers' own "out of
// memory" error path is exercised instead of libFuzzer's malloc limit.
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

// every system header the project headers include, before the macros
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FUZZ_MAX_ALLOC ((size_t)1 << 30)

// Allocation tracker: a header before each block links it into one list.
typedef struct FzBlock { struct FzBlock *prev, *next; size_t n; max_align_t align[]; } FzBlock;
static FzBlock fz_live = {&fz_live, &fz_live, 0};
static void* fz_malloc(size_t n) {
    if (n > FUZZ_MAX_ALLOC) return NULL;
    FzBlock* b = (FzBlock*)malloc(sizeof(FzBlock) + (n ? n : 1));
    if (!b) return NULL;
    b->n = n, b->next = fz_live.next, b->prev = &fz_live;
    fz_live.next->prev = b, fz_live.next = b;
    return b->align;
}
static void fz_free(void* p) {
    if (!p) return;
    FzBlock* b = (FzBlock*)((char*)p - offsetof(FzBlock, align));
    b->prev->next = b->next, b->next->prev = b->prev;
    free(b);
}
static void* fz_calloc(size_t n, size_t s) {
    if (s && n > FUZZ_MAX_ALLOC / s) return NULL;
    void* p = fz_malloc(n * s);
    if (p) memset(p, 0, n * s);
    return p;
}
static void* fz_realloc(void* p, size_t n) {
    if (!p) return fz_malloc(n);
    FzBlock* b = (FzBlock*)((char*)p - offsetof(FzBlock, align));
    void* q = fz_malloc(n);
    if (!q) return NULL;  // p stays valid, as with realloc
    memcpy(q, p, b->n < n ? b->n : n);
    fz_free(p);
    return q;
}

// FILE tracker: a small table of open streams.
#define FZ_MAX_FILES 64
static FILE* fz_files[FZ_MAX_FILES];
static FILE* fz_fopen(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    for (int i = 0; f && i < FZ_MAX_FILES; i++) if (!fz_files[i]) { fz_files[i] = f; break; }
    return f;
}
static FILE* fz_fdopen(int fd, const char* mode) {
    FILE* f = fdopen(fd, mode);
    for (int i = 0; f && i < FZ_MAX_FILES; i++) if (!fz_files[i]) { fz_files[i] = f; break; }
    return f;
}
static int fz_fclose(FILE* f) {
    for (int i = 0; i < FZ_MAX_FILES; i++) if (fz_files[i] == f) fz_files[i] = NULL;
    return fclose(f);
}

// Free and close what the last input left.
static void fuzz_reset(void) {
    while (fz_live.next != &fz_live) fz_free(fz_live.next->align);
    for (int i = 0; i < FZ_MAX_FILES; i++) if (fz_files[i]) fclose(fz_files[i]), fz_files[i] = NULL;
}

// fail()'s "error:" lines go to /dev/null unless FUZZ_VERBOSE is set (the sanitizers
// and libFuzzer write their reports on their own descriptors, not through stderr).
static FILE* fz_err_stream(void) {
    static FILE* f = NULL;
    if (!f) f = getenv("FUZZ_VERBOSE") ? stderr : fopen("/dev/null", "w");
    return f ? f : stderr;
}

#undef stderr
#define stderr (fz_err_stream())
#define malloc(n) fz_malloc(n)
#define calloc(n, s) fz_calloc(n, s)
#define realloc(p, n) fz_realloc(p, n)
#define free(p) fz_free(p)
#define fopen(p, m) fz_fopen(p, m)
#define fdopen(fd, m) fz_fdopen(fd, m)
#define fclose(f) fz_fclose(f)

// fail() -> fail_hook -> back to the harness.
static jmp_buf fuzz_jump;
static void fuzz_fail_jump(int code) { longjmp(fuzz_jump, code ? code : 1); }

// Write the input to this process's temp file; returns its path.
static const char* fuzz_temp_file(const uint8_t* data, size_t size, const char* suffix) {
    static char path[256];
    snprintf(path, sizeof(path), "/tmp/fuzz_%d%s", (int)getpid(), suffix);
    FILE* f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

#endif
