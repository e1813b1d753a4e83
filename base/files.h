// files.h: how the program touches the file system. Shared by both builds, the tests and
// the tools.
//
// Inputs (data, tokenizer, checkpoints, the manifest, llm.c weights) go through input_open:
// opened with O_NONBLOCK, so that a FIFO or a device named as a file cannot hang open(),
// read only when fstat says they are regular files, then made blocking again.
// Outputs are checked at start-up, before any step (output_check), and written so that
// nothing but a regular file is ever replaced: logs are opened in place (output_open),
// checkpoints, the manifest, the trace and the llm.c export are written to a new temporary
// file <path>.tmp.train-<pid>-XXXXXX (a name no other process or rank can have) and renamed over the
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
typedef struct { FileId id; char* path; } ReadFile;  // a file read: its identity when opened, its name
static int file_id_same(FileId a, FileId b) { return a.dev == b.dev && a.ino == b.ino; }
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
    if (!*path) fail("%s: expected a file name, got ''", what);  // the probe and the temporary went to the cwd
    if (!strcmp(path, "-"))  // (a file named '-' where a Unix user means standard output, which the run's lines use)
        fail("%s -: standard output carries the run's lines, not this file: give a file name (./- for one named '-')",
             what);
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        fail("%s %s: exists and is %s (only a regular file is ever replaced)", what, path, file_kind(st.st_mode));
    int fd = mkstemp(path_format(probe, what, "%s.probe-XXXXXX", path));
    if (fd < 0) fail("%s %s: cannot create a file there: %s", what, path, strerror(errno));
    close(fd);
    unlink(probe);
}

// Open an output in place (a log): created or truncated; never through a symbolic link,
// never blocking, and only a regular file of no other name: truncating a file with another hard
// link (a checkpoint's, say) would empty that too, where an output replaced by rename leaves it.
// Truncated only once all that is known.
static FILE* output_open(const char* path, const char* what) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) fail("%s %s: cannot open for writing: %s", what, path, strerror(errno));
    struct stat st;
    memset(&st, 0, sizeof(st));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !fd_make_blocking(fd)) {
        close(fd);
        fail("%s %s: is %s, not a regular file", what, path, file_kind(st.st_mode));
    }
    if (st.st_nlink > 1) {
        close(fd);
        fail("%s %s: the file has %lu names (hard links); written in place it would change under the others too",
             what, path, (unsigned long)st.st_nlink);
    }
    if (ftruncate(fd, 0)) {
        int e = errno;
        close(fd);
        fail("%s %s: cannot truncate: %s", what, path, strerror(e));
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

// Temporaries: every temporary file this program makes is named <path>.tmp.train-<pid>-XXXXXX
// (mkstemp's 6 characters): a name no user file and no other process or rank has, which
// start-up cleanup of --ckpt-dir recognises exactly (temp_name_len), so a user's copy named
// "x.tmp.abcdef" is never deleted. Each one is registered while it exists and removed on
// every exit path: fail(), a stop signal's exit, exit() (atexit), a write past a file-size
// limit (SIGXFSZ is ignored, so the write fails with EFBIG and the run ends in fail()).
#define TEMPS_MAX 16
static char temps_live[TEMPS_MAX][PATH_CAP];
static void temps_remove(void) {
    for (int i = 0; i < TEMPS_MAX; i++)
        if (temps_live[i][0]) unlink(temps_live[i]), temps_live[i][0] = 0;
}
static void temp_track(const char* tmp, int on) {
    static int installed = 0;
    if (!installed) atexit(temps_remove), fail_cleanup = temps_remove, signal(SIGXFSZ, SIG_IGN), installed = 1;
    for (int i = 0; i < TEMPS_MAX; i++) {
        if (on && !temps_live[i][0]) { snprintf(temps_live[i], PATH_CAP, "%s", tmp); return; }
        if (!on && !strcmp(temps_live[i], tmp)) { temps_live[i][0] = 0; return; }
    }
}
// The length of name without a temporary suffix this program makes (".tmp.train-<pid>-XXXXXX"),
// or strlen(name) when it has none.
static size_t temp_name_len(const char* name) {
    const char* t = strstr(name, ".tmp.train-");
    if (!t) return strlen(name);
    const char* p = t + 11;
    size_t digits = strspn(p, "0123456789");
    if (!digits || p[digits] != '-' || strlen(p + digits + 1) != 6) return strlen(name);
    return (size_t)(t - name);
}

// An output replaced atomically: written to a temporary file of its own, fsynced, renamed
// over path (only if path is absent or a regular file), the directory fsynced. A run
// killed at any moment leaves the old file or the new one, never a part. The temporary
// (see Temporaries) is created exclusively by mkstemp, so two processes writing one output
// (two runs, two ranks) never write into each other's file.
typedef struct {
    FILE* f;
    const char* what;  // the flag or the kind of file, for errors
    char path[PATH_CAP], tmp[PATH_CAP];
} AtomicFile;

static void atomic_open(AtomicFile* a, const char* path, const char* what) {
    a->what = what;
    path_format(a->path, what, "%s", path);
    path_format(a->tmp, what, "%s.tmp.train-%d-XXXXXX", path, (int)getpid());
    int fd = mkstemp(a->tmp);
    if (fd < 0) fail("%s: cannot write %s: %s", what, a->tmp, strerror(errno));
    temp_track(a->tmp, 1);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) || fchmod(fd, 0644) || !(a->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        fail("%s: cannot write %s: %s", what, a->tmp, strerror(e));
    }
}

static void atomic_write(AtomicFile* a, const void* p, size_t n) {
    if (n && fwrite(p, 1, n, a->f) != n) {
        int e = errno;
        fclose(a->f), a->f = NULL;
        fail("%s: write to %s failed: %s", a->what, a->tmp, strerror(e));
    }
}

// Remove the temp file: what was being written must not become the output.
static void atomic_abandon(AtomicFile* a) {
    if (a->f) fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
    temp_track(a->tmp, 0);
}

// Commit a set of outputs written together (an export's files): every temporary is completed (flushed,
// fsynced, closed) before any is renamed, so a write that fails (a full disk, a file-size limit) leaves
// each output as it was, never new files beside old ones. (A crash between the renames can still.)
static void atomic_commit_all(AtomicFile* a, int n) {
    for (int i = 0; i < n; i++) {
        int failed = ferror(a[i].f) || fflush(a[i].f) || fsync(fileno(a[i].f)), e = errno;
        if (fclose(a[i].f) && !failed) failed = 1, e = errno;
        a[i].f = NULL;
        if (failed) fail("%s: write to %s failed: %s", a[i].what, a[i].tmp, strerror(e));
    }
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (lstat(a[i].path, &st) == 0 && !S_ISREG(st.st_mode))
            fail("%s %s: exists and is %s (only a regular file is ever replaced)", a[i].what, a[i].path,
                 file_kind(st.st_mode));
    }
    for (int i = 0; i < n; i++) {
        if (rename(a[i].tmp, a[i].path))
            fail("%s: rename of %s to %s failed: %s", a[i].what, a[i].tmp, a[i].path, strerror(errno));
        temp_track(a[i].tmp, 0);
    }
    for (int i = 0; i < n; i++) dir_sync(a[i].path, a[i].what);
}
static void atomic_commit(AtomicFile* a) { atomic_commit_all(a, 1); }

// ----------------------------------------------------------------------------
// The one rule: no output lands on an input or on another output

// path resolved (realpath) where it exists; else the longest part of its directory that
// exists resolved and the rest as written; into out (PATH_CAP bytes): two names of one file
// that does not exist yet (a symbolic link to a directory, "./x" and "x") come out equal.
static void path_resolved(const char* path, char* out) {
    char dir[PATH_CAP], real[PATH_MAX];
    size_t cut = strlen(path);
    if (realpath(path, real)) {
        snprintf(out, PATH_CAP, "%s", real);
        return;
    }
    for (;;) {
        while (cut > 0 && path[cut - 1] != '/') cut--;  // path[0, cut) is a directory part ending in '/'
        if (cut == 0) snprintf(dir, PATH_CAP, ".");
        else snprintf(dir, PATH_CAP, "%.*s", cut == 1 ? 1 : (int)(cut - 1), path);
        if (realpath(dir, real)) {
            int n = snprintf(out, PATH_CAP, "%s/%s", strcmp(real, "/") ? real : "", path + cut);
            if (n >= 0 && n < PATH_CAP) return;
            break;  // too long resolved: as written (path_format refuses it where it is opened)
        }
        if (cut <= 1) break;
        cut--;  // past the '/': resolve the directory above
    }
    snprintf(out, PATH_CAP, "%s", path);
}

// Every file a run reads and writes, registered at start-up before any output is opened
// (files_input, files_output, files_output_dir), then compared once (files_check): an output
// that is an input, or another output, is one error line naming both flags. Two entries are
// one file when both exist and have one (device, inode) (hard links, symbolic links, other
// spellings), or when their resolved paths (path_resolved) are equal (files not there yet).
// A directory of outputs (--ckpt-dir) owns the names its `owns` accepts: any other entry
// of such a name there is refused, but for the one input marked `spared` (--resume: a save
// never takes its name, rotation never deletes it).
typedef struct {
    const char* flag;
    char* path;      // resolved; NULL for a stream known by identity alone (standard output)
    FileId id;
    int exists, output, spared, stream;  // stream: standard output or error (files_std_streams)
    int (*owns)(const char* name);  // a directory of outputs: the names written in it
} RunFile;
typedef struct {
    RunFile* f;
    int n;
    size_t cap;
} RunFiles;

static RunFile* files_add(RunFiles* s, const char* flag, const char* path, int output) {
    s->f = (RunFile*)xgrow(s->f, sizeof(RunFile), (size_t)s->n + 1, &s->cap, "listing the run's files");
    RunFile* f = &s->f[s->n++];
    memset(f, 0, sizeof(*f));
    f->flag = flag, f->output = output;
    if (path) {
        char resolved[PATH_CAP];
        path_resolved(path, resolved);
        f->path = xstrprintf("%s", resolved);
        f->exists = file_id_of(path, &f->id);
    }
    return f;
}
static void files_input(RunFiles* s, const char* flag, const char* path) {
    if (path) files_add(s, flag, path, 0);
}
// A file already read (a data shard): the identity it had when opened, and its name (a directory of
// outputs may own the name: a shard named ckpt_00000001.bin in --ckpt-dir).
static void files_input_read(RunFiles* s, const char* flag, const ReadFile* r) {
    RunFile* f = files_add(s, flag, r->path, 0);
    f->id = r->id, f->exists = 1;
}
static void files_output(RunFiles* s, const char* flag, const char* path) {
    if (path) files_add(s, flag, path, 1);
}
static void files_output_dir(RunFiles* s, const char* flag, const char* dir, int (*owns)(const char*)) {
    files_add(s, flag, dir, 1)->owns = owns;
}

static int files_same(const RunFile* x, const RunFile* y) {
    if (x->exists && y->exists && file_id_same(x->id, y->id)) return 1;
    return x->path && y->path && !strcmp(x->path, y->path);
}
// Whether file x has a name that directory d owns.
static int files_owned_by(const RunFile* x, const RunFile* d) {
    size_t n = strlen(d->path);
    return x->path && !strncmp(x->path, d->path, n) && x->path[n] == '/' && !strchr(x->path + n + 1, '/') &&
           d->owns(x->path + n + 1);
}

// Standard output and error where they are regular files (`./train > run.log 2>&1`): outputs of the
// run as the others are (a --log of the same file would be interleaved with them, a --data file given
// with `>>` appended to), though not of each other. Under the self-launcher the ranks' streams are
// mpirun's pipes: the launching process leaves its own in TRAIN_STD_IDS (files_std_streams_export),
// and a rank reads them there.
#define STD_IDS_ENV "TRAIN_STD_IDS"
static void files_std_streams_export(void) {
    char ids[128] = "", *at = ids;
    for (int fd = 1; fd <= 2; fd++) {
        struct stat st;
        if (!fstat(fd, &st) && S_ISREG(st.st_mode))
            at += snprintf(at, sizeof(ids) - (size_t)(at - ids), "%d:%llu:%llu ", fd, (unsigned long long)st.st_dev,
                           (unsigned long long)st.st_ino);
    }
    setenv(STD_IDS_ENV, ids, 1);
}
static void files_std_streams(RunFiles* s) {
    static const char* names[3] = {"", "standard output", "standard error"};
    FileId id[3];
    int regular[3] = {0, 0, 0};
    const char* p = getenv(STD_IDS_ENV);
    for (int fd = 1; fd <= 2 && !p; fd++) {
        struct stat st;
        if (!fstat(fd, &st) && S_ISREG(st.st_mode)) id[fd].dev = st.st_dev, id[fd].ino = st.st_ino, regular[fd] = 1;
    }
    for (int fd, used = 0; p && *p; p += used) {  // "FD:DEV:INO " for each (files_std_streams_export)
        unsigned long long dev, ino;
        if (sscanf(p, "%d:%llu:%llu %n", &fd, &dev, &ino, &used) != 3 || !used || fd < 1 || fd > 2) break;
        id[fd].dev = (dev_t)dev, id[fd].ino = (ino_t)ino, regular[fd] = 1;
    }
    for (int fd = 1; fd <= 2; fd++) {
        if (!regular[fd]) continue;
        RunFile* f = files_add(s, names[fd], NULL, 1);
        f->id = id[fd], f->exists = 1, f->stream = 1;
    }
}

// The program's own file (the ./train this process runs; the self-launcher starts its ranks from it): an input of
// every run, never replaced by an output (--plan-csv train, meant as train.csv, put the CSV where the binary was).
static void files_program(RunFiles* s) { files_input(s, "the program itself", "/proc/self/exe"); }

static void files_check(RunFiles* s) {
    for (int i = 0; i < s->n; i++) {
        RunFile* x = &s->f[i];
        for (int j = 0; j < s->n; j++) {
            RunFile* y = &s->f[j];
            if (i == j || !y->output || (x->stream && y->stream)) continue;
            if (y->owns && !x->spared && !x->owns && files_owned_by(x, y))
                fail("%s %s: a name %s %s uses for its files; it is not %s", x->flag, x->path, y->flag, y->path,
                     x->output ? "written there" : "overwritten");
            if (y->owns || x->owns || (x->output && (x->stream || (j > i && !y->stream)))) continue;  // once a pair
            if (!files_same(x, y)) continue;
            if (y->stream)  // the shell opened it: name the stream and what it is
                fail("%s is the file %s %s %s: send it elsewhere", y->flag, x->flag, x->path,
                     x->output ? "writes" : "reads");
            if (!x->output)
                fail("%s %s: is a file this run reads (%s); it is not overwritten", y->flag, y->path, x->flag);
            fail("%s %s: the same file as %s %s writes", x->flag, x->path, y->flag, y->path);
        }
    }
}
static void files_free(RunFiles* s) {
    for (int i = 0; i < s->n; i++) free(s->f[i].path);
    free(s->f);
    s->f = NULL, s->n = s->cap = 0;
}

#endif
