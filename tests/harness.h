// tests/harness.h: what every test program shares: one PASS/FAIL line per check and the
// closing count ("N passed, N failed", which make test sums), running a command with its
// output to a file, and Args from a line of flags as ./train would parse them.
#ifndef TESTS_HARNESS_H
#define TESTS_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int n_pass = 0, n_fail = 0;

// Record one check: ok -> "PASS name[: details]", else "FAIL name: details".
static void check(int ok, const char* name, const char* fmt, ...) {
    char details[2048] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(details, sizeof(details), fmt, ap);
        va_end(ap);
    }
    if (ok) n_pass++, printf("PASS %s%s%s\n", name, details[0] ? ": " : "", details);
    else n_fail++, printf("FAIL %s: %s\n", name, details[0] ? details : "failed");
    fflush(stdout);
}

// The closing line; the program's exit status.
static int tests_done(void) {
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

// Exit code of a finished child as a shell reports it: 128 + signal when killed.
static int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Run the shell command `cmd` with its stdout and stderr to `out`; returns its exit code.
static int run_to_file(const char* cmd, const char* out) {
    size_t n = strlen(cmd) + strlen(out) + 16;
    char* full = (char*)malloc(n);
    snprintf(full, n, "(%s) > %s 2>&1", cmd, out);
    int rc = exit_code(system(full));
    free(full);
    return rc;
}

// Whether the line of flags `args` gives the flag `name` ("--steps"), as "--steps 3" or "--steps=3".
static int flags_give(const char* args, const char* name) {
    size_t len = strlen(name);
    for (const char* p = strstr(args, name); p; p = strstr(p + 1, name))
        if ((p == args || p[-1] == ' ') && (p[len] == ' ' || p[len] == '=' || !p[len])) return 1;
    return 0;
}

// The suite's line of flags `base` without those `args` gives (a case's own value of the flag): ./train refuses a
// flag given twice. base is "--name [value] ..." (a value never starts with --); the result is in out.
static const char* flags_but(const char* base, const char* args, char* out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (const char* p = base; *p && o < cap;) {
        while (*p == ' ') p++;
        const char* flag = p;
        size_t len = strcspn(p, " ");
        p += len;
        const char* end = p;  // the flag and its value, if one follows
        const char* next = end + strspn(end, " ");
        if (*next && strncmp(next, "--", 2)) end = next + strcspn(next, " "), p = end;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(flag, " ="), flag);
        if (!len || flags_give(args, name)) continue;
        o += snprintf(out + o, cap - o, "%s%.*s", o ? " " : "", (int)(end - flag), flag);
    }
    return out;
}

#ifdef ARGS_H
// Args from a line of flags separated by spaces, through parse_args as ./train does.
static void args_from_flags(Args* a, const char* flags) {
    char* copy = strdup(flags);
    char* argv[128];
    int argc = 0;
    argv[argc++] = (char*)"test";
    for (char* t = strtok(copy, " "); t && argc < 127; t = strtok(NULL, " ")) argv[argc++] = t;
    parse_args(a, argc, argv);  // the Args keep pointers into copy: it lives as long as the program
}
#endif

#endif
