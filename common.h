// common.h: error handling, timing, RNG and small helpers shared by train_gpt.c,
// train_gpt.cu, test_gpt.c and the planner. Written so it compiles as C and as C++ (nvcc).
#ifndef COMMON_H
#define COMMON_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ----------------------------------------------------------------------------
// Errors. fail() prints one line "error: ..." and exits non-zero. In a multi-rank
// run the runtime installs a hook that aborts every rank (MPI_Abort), so no rank is
// left waiting in a collective for a peer that has gone.

static void (*fail_hook)(int code) = NULL;
static int fail_rank = -1;  // printed in the error line when >= 0 and world > 1

static void fail(const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (fail_rank >= 0) fprintf(stderr, "error: [rank %d] %s\n", fail_rank, msg);
    else fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    if (fail_hook) fail_hook(1);
    exit(1);
}

static void* xmalloc(size_t n) {
    void* p = malloc(n ? n : 1);
    if (!p) fail("out of memory allocating %.1f MiB", n / 1048576.0);
    return p;
}
static void* xcalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fail("out of memory allocating %.1f MiB", (double)n * size / 1048576.0);
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// ----------------------------------------------------------------------------
// RNG: xorshift64* for data shuffling/sampling, Box-Muller for initialization.
// Every random number in a run comes from a generator seeded from --seed, so runs
// are reproducible and all ranks can draw the same numbers when they must agree.

typedef struct { uint64_t s; } Rng;

static void rng_seed(Rng* r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; if (!r->s) r->s = 1; }
static uint64_t rng_u64(Rng* r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}
static float rng_uniform(Rng* r) { return (rng_u64(r) >> 40) * (1.0f / 16777216.0f); }  // [0,1)
static float rng_normal(Rng* r) {
    float u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307f * u2);
}

// ----------------------------------------------------------------------------
// Parsing numbers from flags and files without trusting them.

static long parse_long(const char* s, const char* what) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) fail("%s: expected an integer, got '%s'", what, s);
    return v;
}
static double parse_double(const char* s, const char* what) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v != v) fail("%s: expected a number, got '%s'", what, s);
    return v;
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Human-readable counts for the start-up table.
static const char* fmt_count(double x, char* buf) {
    if (x >= 1e12) sprintf(buf, "%.2fT", x / 1e12);
    else if (x >= 1e9) sprintf(buf, "%.2fG", x / 1e9);
    else if (x >= 1e6) sprintf(buf, "%.2fM", x / 1e6);
    else if (x >= 1e3) sprintf(buf, "%.1fK", x / 1e3);
    else sprintf(buf, "%.0f", x);
    return buf;
}
static const char* fmt_bytes(double x, char* buf) {
    if (x >= 1024.0 * 1024 * 1024) sprintf(buf, "%.2f GiB", x / (1024.0 * 1024 * 1024));
    else if (x >= 1024.0 * 1024) sprintf(buf, "%.2f MiB", x / (1024.0 * 1024));
    else sprintf(buf, "%.1f KiB", x / 1024.0);
    return buf;
}

#endif
