// common.h: error handling, timing, RNG and small helpers shared by train_gpt.c,
// train_gpt.cu, test_gpt.c and the planner. Written so it compiles as C and as C++ (nvcc).
#ifndef COMMON_H
#define COMMON_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ----------------------------------------------------------------------------
// Text that reaches a terminal. A sample, a tokenizer piece, a path or a file's contents
// may hold any bytes; printed raw, an escape sequence (ESC, CSI) drives the terminal and a
// newline splits an error line in two. escape_text passes printable ASCII and well-formed
// UTF-8 as they are and writes every other byte as \xNN: control characters (C0, DEL and the
// C1 range U+0080..U+009F), bytes of ill-formed UTF-8 (stray continuation bytes, overlong
// forms, surrogates, code points past U+10FFFF, truncated sequences).

// Bytes of the printable character at s[0, n), or 0 if s[0] must be escaped.
static int utf8_printable_len(const unsigned char* s, size_t n) {
    unsigned c = s[0], cp;
    int len;
    if (c < 0x80) return c >= 0x20 && c != 0x7f;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    if (cp < 0xa0 || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

// s[0, n) escaped into out (cap bytes, NUL-terminated; 4*n+1 always fits); keep_lines keeps
// newlines and tabs as they are (samples), else they are escaped too (one-line messages).
// Returns the length written.
static size_t escape_text(char* out, size_t cap, const char* s, size_t n, int keep_lines) {
    const unsigned char* u = (const unsigned char*)s;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 <= cap;) {
        int len = utf8_printable_len(u + i, n - i);
        if (!len && keep_lines && (u[i] == '\n' || u[i] == '\t')) len = 1;
        if (len) memcpy(out + o, u + i, len), o += len, i += len;
        else o += snprintf(out + o, cap - o, "\\x%02x", u[i]), i++;
    }
    if (cap) out[o] = 0;
    return o;
}

// s escaped for one line of output into buf (cap bytes), returned: a path in a progress line.
static const char* printable(const char* s, char* buf, size_t cap) {
    escape_text(buf, cap, s, strlen(s), 0);
    return buf;
}

// ----------------------------------------------------------------------------
// Errors. fail() prints one line "error: ..." and exits non-zero; the message is escaped
// (escape_text), so a path or a file's bytes in it can neither drive the terminal nor break
// the one line in two. In a multi-rank run the runtime installs a hook that aborts every
// rank (MPI_Abort), so no rank is left waiting in a collective for a peer that has gone.

static void (*fail_hook)(int code) = NULL;
static void (*fail_cleanup)(void) = NULL;  // removes this run's temporaries (files.h) before the hook aborts
static int fail_rank = -1;  // printed in the error line when >= 0 and world > 1

static void error_vprint(const char* fmt, va_list ap) {
    char msg[8192], shown[4 * sizeof(msg)];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    escape_text(shown, sizeof(shown), msg, strlen(msg), 0);
    fflush(stdout);  // what was printed before comes first, and the error starts its own line
    if (fail_rank >= 0) fprintf(stderr, "error: [rank %d] %s\n", fail_rank, shown);
    else fprintf(stderr, "error: %s\n", shown);
    fflush(stderr);
}
// The error line alone, for a caller that ends the run itself (every rank at once).
static void print_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vprint(fmt, ap);
    va_end(ap);
}
// fail() without the line: for a rank whose peer prints the run's one line (a decision every rank takes alike).
static void fail_quietly(void) {
    if (fail_cleanup) fail_cleanup();
    if (fail_hook) fail_hook(1);
    exit(1);
}
static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vprint(fmt, ap);
    va_end(ap);
    fail_quietly();
}

// Stop signals (SIGINT, SIGTERM, SIGHUP, SIGPIPE). The handler (ckpt.h) only records which one came; every
// long loop (steps, evaluation, sampling, reading data) looks at stop_signal and ends
// cleanly, and the run exits 128 + the signal: 130 for SIGINT, 143 for SIGTERM, as a shell
// reports a process the signal killed.
static volatile sig_atomic_t stop_signal = 0;
static volatile sig_atomic_t stop_relayed = 0;  // 1: passed on to every rank (runtime/ckpt.h ckpt_on_signal)

// The exit code of a run that would end with `code`: 1 when what it printed could not all be
// written (stdout on a full disk, > /dev/full), so a run whose report was lost does not exit 0.
// A reader that closed the pipe (./train | head) is no error: exit 141 (128 + SIGPIPE) without a word, as
// other Unix tools do (the stop handler, runtime/ckpt.h, has saved with --ckpt-dir).
static int stdout_exit_code(int code) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return code;
    if (stop_signal == SIGPIPE || errno == EPIPE) return code ? code : 128 + SIGPIPE;
    print_error("standard output: write failed: %s", strerror(errno ? errno : EIO));
    return code ? code : 1;
}

// Where no other rank waits on this one (reading the data at start-up): say so and exit now. A stop passed on to
// every rank (by the self-launcher, or by mpirun itself: stop_relayed) is rank 0's to say (one line, not one per
// rank). mpirun ends the job at the first rank's exit (SIGKILL to the others within milliseconds, measured with
// strace: rank 0, mid-tensor, was killed before it said it in 1 of 6 runs), so the other ranks let rank 0 go
// first: they wait to be ended, STOP_WAIT_S at most, then exit.
#define STOP_WAIT_S 2
static void stop_if_signalled(const char* during) {
    if (!stop_signal) return;
    int say = !(stop_relayed && fail_rank > 0);
    if (stop_signal != SIGPIPE) fflush(stdout);  // what was printed before comes first (the line starts its own)
    if (stop_signal != SIGPIPE && say) fprintf(stderr, "stopped by signal %d while %s\n", (int)stop_signal, during);
    fflush(stderr);
    struct timespec wait = {say ? 0 : STOP_WAIT_S, 0};  // (the launcher's repeats of the stop cut it short: go on)
    while (nanosleep(&wait, &wait) && errno == EINTR) {}
    exit(128 + stop_signal);
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

// A growing array (items of item_bytes each) made to hold `need` items: returned as it is while *cap (its capacity in
// items) holds them, else moved by realloc to a capacity doubled from *cap (16 at first) until it does: appends one
// at a time cost O(1) copies each on average. The bytes in 64 bits, capped where they would pass SIZE_MAX; past it,
// or out of memory, one error line naming `what` ("recording the ranks").
static void* xgrow(void* items, size_t item_bytes, size_t need, size_t* cap, const char* what) {
    if (need <= *cap) return items;
    size_t most = SIZE_MAX / item_bytes, grown = *cap ? *cap : 16;
    if (need > most) fail("out of memory %s: %.3g items of %zu bytes", what, (double)need, item_bytes);
    while (grown < need) grown = grown > most / 2 ? most : 2 * grown;
    void* p = realloc(items, grown * item_bytes);
    if (!p) fail("out of memory %s (%.1f MiB)", what, (double)grown * item_bytes / 1048576.0);
    *cap = grown;
    return p;
}

// A string formatted into a new allocation (for text of any length that lives as long as the run).
static char* xstrprintf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char* s = (char*)xmalloc((size_t)(n > 0 ? n : 0) + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    va_end(ap);
    return s;
}

// A growing byte buffer (decoded samples).
typedef struct { char* bytes; size_t n, cap; } Bytes;
static void bytes_append(Bytes* b, const char* p, size_t n) {
    b->bytes = (char*)xgrow(b->bytes, 1, b->n + n, &b->cap, "growing a buffer");
    memcpy(b->bytes + b->n, p, n);
    b->n += n;
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

static void rng_seed(Rng* r, uint64_t seed) {
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (!r->s) r->s = 1;
}
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

// Numbers as a person writes them: decimal only, the whole text (no leading blanks, hex, inf or nan:
// strtod takes all of those, strtol the blanks). Out of range for the type (9223372036854775808,
// 1e400, 1e-400) is said so.
static int decimal_text(const char* s, int fraction) {
    const char* p = s + (*s == '-' || *s == '+');
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (fraction && *p == '.') {
        size_t after = strspn(p + 1, "0123456789");
        digits += after, p += 1 + after;
    }
    if (fraction && digits && (*p == 'e' || *p == 'E')) {
        p += 1 + (p[1] == '-' || p[1] == '+');
        if (!strspn(p, "0123456789")) return 0;
        p += strspn(p, "0123456789");
    }
    return digits && !*p;
}
static long parse_long(const char* s, const char* what) {
    char* end;
    errno = 0;
    long v = decimal_text(s, 0) ? strtol(s, &end, 10) : 0;
    if (!decimal_text(s, 0)) fail("%s: expected an integer, got '%s'", what, s);
    if (errno == ERANGE) fail("%s: %s is out of range", what, s);
    return v;
}
static double parse_double(const char* s, const char* what) {
    char* end;
    errno = 0;
    double v = decimal_text(s, 1) ? strtod(s, &end) : 0;
    if (!decimal_text(s, 1)) fail("%s: expected a number, got '%s'", what, s);
    if (errno == ERANGE) fail("%s: %s is out of range", what, s);
    return v;
}

// A flag given twice is refused: which of the two the user meant is not known. The trainer's parser (layout/args.h)
// and --plan's (planner/cli.h) record each flag they read in their FlagsGiven; `where` begins the line of a flag
// that takes a value ("--plan: "; a switch's line names only the switch, as "--plan given twice").
enum { FLAGS_GIVEN_MAX = 128 };  // more than either parser has flags: an unknown one ends its parse
typedef struct {
    const char* where;
    int n;
    struct { char flag[64]; const char* value; } at[FLAGS_GIVEN_MAX];  // value NULL: a switch
} FlagsGiven;
static void flag_once(FlagsGiven* g, const char* flag, const char* value) {
    for (int k = 0; k < g->n; k++) {
        if (strcmp(g->at[k].flag, flag)) continue;
        if (!value) fail("%s given twice: give each flag once", flag);
        fail("%s%s given twice ('%s', then '%s'): give each flag once", g->where, flag, g->at[k].value, value);
    }
    if (g->n == FLAGS_GIVEN_MAX) fail("%smore than %d flags", g->where, FLAGS_GIVEN_MAX);
    snprintf(g->at[g->n].flag, sizeof(g->at[g->n].flag), "%s", flag);
    g->at[g->n++].value = value;
}

static int has_suffix(const char* s, const char* suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Human-readable counts for the start-up table, into buf of FMT_CAP bytes (any double fits: past
// 1e18 in %g's form).
#define FMT_CAP 32
static const char* fmt_count(double x, char* buf) {
    if (!(x < 1e18)) snprintf(buf, FMT_CAP, "%.3g", x);
    else if (x >= 1e12) snprintf(buf, FMT_CAP, "%.2fT", x / 1e12);
    else if (x >= 1e9) snprintf(buf, FMT_CAP, "%.2fG", x / 1e9);
    else if (x >= 1e6) snprintf(buf, FMT_CAP, "%.2fM", x / 1e6);
    else if (x >= 1e3) snprintf(buf, FMT_CAP, "%.1fK", x / 1e3);
    else snprintf(buf, FMT_CAP, "%.0f", x);
    return buf;
}
static const char* fmt_bytes(double x, char* buf) {
    if (!(x < 1e18)) snprintf(buf, FMT_CAP, "%.3g B", x);
    else if (x >= 1024.0 * 1024 * 1024) snprintf(buf, FMT_CAP, "%.2f GiB", x / (1024.0 * 1024 * 1024));
    else if (x >= 1024.0 * 1024) snprintf(buf, FMT_CAP, "%.2f MiB", x / (1024.0 * 1024));
    else snprintf(buf, FMT_CAP, "%.1f KiB", x / 1024.0);
    return buf;
}

#endif
