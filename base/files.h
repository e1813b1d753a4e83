// files.h: how the program touches the file system. Shared by both builds, the tests and
// the tools.
//
// Inputs (data, tokenizer, checkpoints, the manifest, llm.c weights) go through input_open:
// opened with O_NONBLOCK, so that a FIFO or a device named as a file cannot hang open(),
// read only when fstat says they are regular files, then made blocking again.
// Outputs are checked at start-up, before any step (output_check), and written so that
// nothing but a regular file is ever replaced: logs are opened in place (output_open),
// checkpoints, the manifest, the trace and the llm.c export are written to a new temporary
// file <path>.tmp.XXXXXX (a name no other process or rank can have) and renamed over the
// target (AtomicFile). A directory, device, FIFO, socket or symbolic link at an output's
// path is an error, never overwritten.
// Every path built from a flag goes through path_format, which refuses a path that does not
// fit instead of cutting it. Every write, flush, fsync and close of an output is checked;
// a failure is one error line naming the file.
#ifndef FILES_H
#define FILES_H

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/common.h"

#define PATH_CAP 4096  // bytes of a path with its NUL (Linux PATH_MAX)

// Format a path into buf (PATH_CAP bytes); a path that does not fit is an error naming `what`.
static char* path_format(char* buf, const char* what, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, PATH_CAP, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_CAP)
        fail("%s: path of %d bytes is longer than the limit of %d: %.200s...", what, n, PATH_CAP - 1, buf);
    return buf;
}

static const char* file_kind(mode_t m) {
    return S_ISREG(m)    ? "a regular file"
           : S_ISDIR(m)  ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
                         : "not a regular file";
}

// A file's identity, so that an output can be told apart from an input whatever the path says.
typedef struct { dev_t dev; ino_t ino; } FileId;
static int file_id_of(const char* path, FileId* id) {
    struct stat st;
    if (stat(path, &st)) return 0;
    id->dev = st.st_dev, id->ino = st.st_ino;
    return 1;
}

// Clear O_NONBLOCK on fd (opened with it so that open() itself could not block).
static int fd_make_blocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// ----------------------------------------------------------------------------
// Inputs

// Open path for reading if it is a regular file; else NULL with the reason in why (the
// system's message, or "not a regular file (a FIFO)" and the like). id (may be NULL) gets
// the file's identity.
static FILE* input_open(const char* path, char* why, size_t why_cap, FileId* id) {
    struct stat st;
    memset(&st, 0, sizeof(st));
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {  // no open() at all of a device or FIFO
        snprintf(why, why_cap, "not a regular file (%s)", file_kind(st.st_mode));
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_cap, "%s", strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !fd_make_blocking(fd)) {  // it changed since stat()
        snprintf(why, why_cap, "not a regular file (%s)", file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    FILE* f = fdopen(fd, "rb");
    if (!f) {
        snprintf(why, why_cap, "%s", strerror(errno));
        close(fd);
        return NULL;
    }
    if (id) id->dev = st.st_dev, id->ino = st.st_ino;
    return f;
}

// ----------------------------------------------------------------------------
// Outputs

// The directory part of path ("." when it has none) into dir (PATH_CAP bytes).
static void path_dir(const char* path, char* dir) {
    const char* slash = strrchr(path, '/');
    if (!slash) snprintf(dir, PATH_CAP, ".");
    else if (slash == path) snprintf(dir, PATH_CAP, "/");
    else snprintf(dir, PATH_CAP, "%.*s", (int)(slash - path), path);
}

// At start-up, for an output file written at the end or line by line: path must be absent
// or a regular file, and its directory must take a new file (a probe file of a unique name
// is created and removed, so a missing or read-only directory, or /proc, fails now, not
// after the last step; an AtomicFile's temporary is a mkstemp name there too). what: the
// flag, for the error.
static void output_check(const char* path, const char* what) {
    char probe[PATH_CAP];
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        fail("%s %s: exists and is %s (only a regular file is ever replaced)", what, path, file_kind(st.st_mode));
    int fd = mkstemp(path_format(probe, what, "%s.probe-XXXXXX", path));
    if (fd < 0) fail("%s %s: cannot create a file there: %s", what, path, strerror(errno));
    close(fd);
    unlink(probe);
}

// Open an output in place (a log): created or truncated; never through a symbolic link,
// never blocking, and only a regular file.
static FILE* output_open(const char* path, const char* what) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) fail("%s %s: cannot open for writing: %s", what, path, strerror(errno));
    struct stat st;
    memset(&st, 0, sizeof(st));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !fd_make_blocking(fd)) {
        close(fd);
        fail("%s %s: is %s, not a regular file", what, path, file_kind(st.st_mode));
    }
    FILE* f = fdopen(fd, "w");
    if (!f) fail("%s %s: cannot open for writing: %s", what, path, strerror(errno));
    return f;
}

// Text to an output opened in place, flushed: a full disk is an error now, not a short log.
static void output_write(FILE* f, const char* text, const char* what, const char* path) {
    if (fputs(text, f) < 0 || fflush(f)) fail("%s %s: write failed: %s", what, path, strerror(errno));
}
static void output_close(FILE* f, const char* what, const char* path) {
    if (fclose(f)) fail("%s %s: close failed: %s", what, path, strerror(errno));
}

// fsync a directory, so a rename in it survives a crash. A file system that cannot sync a
// directory says EINVAL; there is nothing to do about that.
static void dir_sync(const char* path_in_dir, const char* what) {
    char dir[PATH_CAP];
    path_dir(path_in_dir, dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("%s: cannot open directory %s to sync it: %s", what, dir, strerror(errno));
    if (fsync(fd) && errno != EINVAL) fail("%s: fsync of directory %s failed: %s", what, dir, strerror(errno));
    close(fd);
}

// An output replaced atomically: written to a temporary file of its own, fsynced, renamed
// over path (only if path is absent or a regular file), the directory fsynced. A run
// killed at any moment leaves the old file or the new one, never a part. The temporary
// name is made by mkstemp (<path>.tmp. and 6 characters, created exclusively), so two
// processes writing one output (two runs, two ranks) never write into each other's file.
typedef struct {
    FILE* f;
    const char* what;  // the flag or the kind of file, for errors
    char path[PATH_CAP], tmp[PATH_CAP];
} AtomicFile;

static void atomic_open(AtomicFile* a, const char* path, const char* what) {
    a->what = what;
    path_format(a->path, what, "%s", path);
    path_format(a->tmp, what, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(a->tmp);
    if (fd < 0) fail("%s: cannot write %s: %s", what, a->tmp, strerror(errno));
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) || fchmod(fd, 0644) || !(a->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd), unlink(a->tmp);
        fail("%s: cannot write %s: %s", what, a->tmp, strerror(e));
    }
}

static void atomic_write(AtomicFile* a, const void* p, size_t n) {
    if (n && fwrite(p, 1, n, a->f) != n) {
        int e = errno;
        fclose(a->f), unlink(a->tmp);
        fail("%s: write to %s failed: %s", a->what, a->tmp, strerror(e));
    }
}

// Remove the temp file: what was being written must not become the output.
static void atomic_abandon(AtomicFile* a) {
    if (a->f) fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
}

static void atomic_commit(AtomicFile* a) {
    struct stat st;
    int failed = ferror(a->f) || fflush(a->f) || fsync(fileno(a->f)), e = errno;
    if (fclose(a->f) && !failed) failed = 1, e = errno;
    a->f = NULL;
    if (failed) {
        unlink(a->tmp);
        fail("%s: write to %s failed: %s", a->what, a->tmp, strerror(e));
    }
    if (lstat(a->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        unlink(a->tmp);
        fail("%s %s: exists and is %s (only a regular file is ever replaced)", a->what, a->path, file_kind(st.st_mode));
    }
    if (rename(a->tmp, a->path)) fail("%s: rename of %s to %s failed: %s", a->what, a->tmp, a->path, strerror(errno));
    dir_sync(a->path, a->what);
}

// The path with its directory resolved (realpath), so that two outputs that are one file
// under different names are told apart before either exists. The directory exists.
static void path_canonical(const char* path, const char* what, char* out) {
    char dir[PATH_CAP], real[PATH_MAX];
    path_dir(path, dir);
    const char* slash = strrchr(path, '/');
    if (!realpath(dir, real)) fail("%s %s: cannot resolve directory %s: %s", what, path, dir, strerror(errno));
    path_format(out, what, "%s/%s", strcmp(real, "/") ? real : "", slash ? slash + 1 : path);
}

#endif
