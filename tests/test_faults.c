// test_faults.c: the fault suite. Runs ./train as a subprocess (like test_layouts.c) and
// breaks it on purpose:
//   1. SIGKILL at several points of a 1-rank run (after a step, in the middle of writing a
//      checkpoint, while the manifest is replaced), then --resume auto: every step after
//      the resume point must print the same loss, bit for bit ("%.9g" strings of the
//      JSON log), as the uninterrupted run; no checkpoint under its final name is ever
//      partial, and the one LATEST names always loads.
//   2. SIGTERM / SIGINT: the run saves, says "stopped by signal", exits 143 / 130 (the same
//      from one rank, from the self-launcher of many, or from one rank of many), and resumes
//      with the same losses (1 rank: bitwise; tp2 x pp2: checkpoint written and resumable);
//      a stop during the end-of-run sample, an evaluation or the reading of the data ends
//      the run at once with the same codes; the watchdog is not armed during start-up.
//   3. Resharding: save under one layout, resume under another; losses within 1e-5
//      relative of the 1-rank run (the layout suite's tolerance), final parameters too.
//   4. A rank of a dp2 x tp2 x pp2 run killed with SIGKILL: the whole job is gone within
//      --timeout-s plus a margin, the launcher exits non-zero, and the last checkpoint
//      (--ckpt-every 1) resumes on one rank. And a rank stopped (SIGSTOP, a hang mpirun
//      cannot see): the others' watchdog ends the job after --timeout-s.
//   5. Bad inputs (data, flags, checkpoints, tokenizer, device file): exit 1 with exactly
//      one "error:" line naming the problem, never a signal; the same corpus through
//      ./train_asan (ASan + UBSan) must produce no sanitizer report. ./train_asan is built
//      here with mpicc when missing (or by `make train_asan`, Makefile.faults). Among them:
//      checksums (a zeroed body, one flipped bit of Adam's v, a changed step field), rotation
//      (only this run's checkpoints go; the resumed one, older runs' and junk stay), the
//      --ckpt-dir lock, sizes past the caps (world, schedule pairs, batch), the JSON log with
//      non-finite values, and the one-process build (nompi/mpi.h) compiling and training.
//
// All runs train the tiny model with the suite's flags below: --warmup 20 keeps every step
// here inside the linear warm-up, where the learning rate of a step does not depend on
// --steps, so a run stopped early and one that goes on see the same schedule; --eps 1e-4
// as in the layout suite (see test_layouts.c for why).
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "tests/harness.h"

#define ROOT "/tmp/test_faults"
#define TOL 1e-5
#define FLAGS "--model tiny --micro-batch 8 --global-batch 32 --eval-every 0 --sample-len 0 --quiet --peak-tflops 1 " \
              "--warmup 20 --lr 2e-2 --eps 1e-4"
#define TRAIN "OMP_NUM_THREADS=1 ./train " FLAGS " "

// ----------------------------------------------------------------------------
// Processes


static int sh(const char* fmt, ...) {
    static char cmd[65536];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(cmd)) fail("test: a command of %d bytes does not fit", n);
    return exit_code(system(cmd));
}


// Start `cmd` in the background (sh -c "exec env cmd", so the pid is ./train itself, or the
// mpirun it turns into); its own process group, so cleanup can end all of it.
static pid_t spawn(const char* cmd, const char* out) {
    char full[8192];
    snprintf(full, sizeof(full), "exec env %s > %s 2>&1", cmd, out);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", full, (char*)NULL);
        _exit(127);
    }
    return pid;
}

// Wait up to timeout_s for pid; its exit code, or -1 if it is still running.
static int wait_for(pid_t pid, double timeout_s) {
    double t0 = now_s();
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return exit_code(status);
        if (r < 0 || now_s() - t0 > timeout_s) return -1;
        usleep(10000);
    }
}

// Whether pid has not exited yet (without reaping it, so wait_for still gets its code).
static int still_running(pid_t pid) {
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_PID, pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

static void kill_group(pid_t pid) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

// Pids of running processes whose command line contains `needle` (not this one).
static int pids_matching(const char* needle, pid_t* out, int max) {
    DIR* d = opendir("/proc");
    struct dirent* e;
    int n = 0;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        FILE* f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++) if (!buf[i]) buf[i] = ' ';
        buf[len] = 0;
        // a zombie has an empty command line, so only live processes count
        if (len && strstr(buf, needle) && n < max) out[n++] = pid;
    }
    if (d) closedir(d);
    return n;
}

// The parent of pid (0 if unknown).
static pid_t parent_of(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = 0;
    char* rp = strrchr(buf, ')');
    int ppid = 0;
    char state;
    return rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 ? ppid : 0;
}

// Processes whose command is ./train under the launcher `parent`: the ranks, children of the
// mpirun it started (parallel/launcher.h).
static int rank_pids(pid_t parent, pid_t* out, int max) {
    DIR* d = opendir("/proc");
    struct dirent* e;
    int n = 0;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        FILE* f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = 0;
        char* rp = strrchr(buf, ')');  // "pid (comm) state ppid ..."
        int ppid = 0;
        char state = 0;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && parent_of(ppid) == parent && strstr(buf, "(train)") && n < max)
            out[n++] = pid;
    }
    if (d) closedir(d);
    return n;
}

// ----------------------------------------------------------------------------
// Logs and checkpoints

#define MAX_STEPS 64
typedef struct { char loss[MAX_STEPS + 1][40]; int first, last, n; } Log;  // loss[step] as printed

static int log_read(const char* path, Log* g) {
    memset(g, 0, sizeof(*g));
    g->first = MAX_STEPS + 1;
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        const char* p = strstr(line, "\"loss\":");
        const char* s = strstr(line, "\"step\":");
        if (!p || !s || strstr(line, "val_loss") || !strchr(line, '\n')) continue;  // a line being written is not a step yet
        int step = atoi(s + 7);
        if (step < 1 || step > MAX_STEPS) continue;
        p += 7;
        size_t n = strcspn(p, ",}");
        if (n >= sizeof(g->loss[0])) n = sizeof(g->loss[0]) - 1;
        memcpy(g->loss[step], p, n);
        g->loss[step][n] = 0;
        if (step < g->first) g->first = step;
        if (step > g->last) g->last = step;
        g->n++;
    }
    fclose(f);
    return g->n;
}

// Wait until the log of a running pid has `steps` step lines; 0 if it ended or timed out first.
static int wait_log(const char* path, int steps, pid_t pid, double timeout_s) {
    double t0 = now_s();
    Log g;
    while (now_s() - t0 < timeout_s) {
        if (log_read(path, &g) >= steps) return 1;
        if (!still_running(pid)) return 0;
        usleep(2000);
    }
    return 0;
}

static int file_has(const char* path, const char* needle) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = 0;
    return strstr(text, needle) != NULL;
}

// Step a run resumed from (its "resumed from ... (step S" line), or -1.
static int resumed_step(const char* out) {
    FILE* f = fopen(out, "r");
    if (!f) return -1;
    char line[4096];
    int s = -1;
    while (fgets(line, sizeof(line), f)) {
        const char* p = strstr(line, "resumed from ");
        if (p && (p = strstr(p, "(step "))) s = atoi(p + 6);
    }
    fclose(f);
    return s;
}

// The model of a flag string (parse_args as ./train does).
static void model_of(const char* flags, ModelConfig* c, ParamLayout* P) {
    Args a;
    char buf[2048];
    snprintf(buf, sizeof(buf), "%s", flags);
    char* argv[128];
    int argc = 0;
    argv[argc++] = (char*)"test";
    for (char* t = strtok(buf, " "); t && argc < 127; t = strtok(NULL, " ")) argv[argc++] = t;
    parse_args(&a, argc, argv);
    *c = a.cfg;
    param_layout_build(P, c, 1, 0, 1, 1, 0, 1);
}

static long long file_size(const char* path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long long)st.st_size;
}

// Every ckpt_*.bin under its final name is complete (size and header); LATEST, when
// present, names one of them. Returns the step LATEST names (0: no LATEST), -1 on a
// violation (why says which).
static int ckpt_dir_check(const char* dir, const char* model_flags, char* why) {
    ModelConfig c;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(model_flags, &c, P);
    size_t n_full = P->n_full;
    free(P);
    DIR* d = opendir(dir);
    struct dirent* e;
    int bad = 0;
    while (d && (e = readdir(d)) && !bad) {
        int s;
        if (sscanf(e->d_name, "ckpt_%d.bin", &s) != 1 || strlen(e->d_name) != 17) continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE* f = fopen(path, "rb");
        int32_t h[256];
        char w[512];
        if (!f || fread(h, 4, 256, f) != 256) sprintf(why, "%s: unreadable header", e->d_name), bad = 1;
        else if (ckpt_header_check(h, &c, n_full, file_size(path), w)) sprintf(why, "%s: %s", e->d_name, w), bad = 1;
        else if (h[CK_STEP] != s) sprintf(why, "%s holds step %d", e->d_name, h[CK_STEP]), bad = 1;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    if (bad) return -1;
    char path[1024], name[256];
    snprintf(path, sizeof(path), "%s/LATEST", dir);
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    int ok = fscanf(f, "%255s", name) == 1;
    fclose(f);
    int s = -1;
    snprintf(path, sizeof(path), "%s/%s", dir, ok ? name : "");
    if (!ok || sscanf(name, "ckpt_%d.bin", &s) != 1 || file_size(path) < 0) {
        sprintf(why, "LATEST names '%s', which is not there", ok ? name : "");
        return -1;
    }
    return s;
}

static int read_ckpt_params(const char* path, float** params, size_t* n) {
    FILE* f = fopen(path, "rb");
    int32_t h[256];
    if (!f || fread(h, 4, 256, f) != 256) { if (f) fclose(f); return 0; }
    *n = ckpt_header_n_full(h);
    *params = (float*)xmalloc(sizeof(float) * *n);
    int ok = fread(*params, sizeof(float), *n, f) == *n;
    fclose(f);
    return ok;
}

// Worst relative difference over tensors of two checkpoints (||a-b|| / ||a||), or 1e30.
static double ckpt_param_diff(const char* a_path, const char* b_path, const char* model_flags) {
    float *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    double worst = 1e30;
    if (read_ckpt_params(a_path, &a, &na) && read_ckpt_params(b_path, &b, &nb) && na == nb) {
        ModelConfig c;
        ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
        model_of(model_flags, &c, P);
        worst = P->n_full == na ? 0 : 1e30;
        for (int i = 0; i < P->n && worst < 1e30; i++) {
            const Tensor* t = &P->t[i];
            double d = 0, nrm = 0;
            for (size_t k = t->full_offset; k < t->full_offset + t->size; k++)
                d += ((double)a[k] - b[k]) * ((double)a[k] - b[k]), nrm += (double)a[k] * a[k];
            double rel = nrm > 0 ? sqrt(d / nrm) : sqrt(d);
            if (rel > worst) worst = rel;
        }
        free(P);
    }
    free(a);
    free(b);
    return worst;
}

// Steps first..last of g against the reference: bitwise (exact) or within TOL. Returns 1
// if all match; why gets the first mismatch.
static int losses_match(const Log* ref, const Log* g, int first, int last, int exact, char* why, double* worst) {
    *worst = 0;
    for (int s = first; s <= last; s++) {
        if (!g->loss[s][0] || !ref->loss[s][0]) { sprintf(why, "step %d missing from a log", s); return 0; }
        if (exact && strcmp(g->loss[s], ref->loss[s])) {
            sprintf(why, "step %d loss %s, uninterrupted run %s", s, g->loss[s], ref->loss[s]);
            return 0;
        }
        double rel = fabs(atof(g->loss[s]) - atof(ref->loss[s])) / fabs(atof(ref->loss[s]));
        if (rel > *worst) *worst = rel;
        if (!exact && !(rel <= TOL)) { sprintf(why, "step %d loss %s vs %s (rel %.1e)", s, g->loss[s], ref->loss[s], rel); return 0; }
    }
    return 1;
}

static void fresh_dir(const char* dir) { sh("rm -rf %s && mkdir -p %s", dir, dir); }

// A fresh directory ROOT/tag for one test run, with the paths of its output and log.
static void run_dir(const char* tag, char dir[256], char out[300], char log[300]) {
    snprintf(dir, 256, ROOT "/%s", tag);
    fresh_dir(dir);
    snprintf(out, 300, "%s/out.txt", dir);
    snprintf(log, 300, "%s/log.jsonl", dir);
}

// ----------------------------------------------------------------------------
// 1. SIGKILL and exact resume (1 rank)

#define REF_STEPS 12
static Log ref;                 // uninterrupted 1-rank gpt2 run, --ckpt-every 2
static Log ref_llama;

static int reference(const char* tag, const char* model_flags, Log* g) {
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "%s --steps %d --ckpt-every 2 --ckpt-keep 100 --log %s --ckpt-dir %s", model_flags,
             REF_STEPS, log, dir);
    double t0 = now_s();
    int rc = run_to_file(cmd, out);
    int ok = rc == 0 && log_read(log, g) == REF_STEPS;
    double drop = ok ? atof(g->loss[1]) - atof(g->loss[REF_STEPS]) : 0;
    ok = ok && drop > 0.05;  // equal losses prove little unless the model learns
    check(ok, tag, "exit %d, loss %s -> %s over %d steps (%.1f s)", rc, g->loss[1], g->loss[REF_STEPS], REF_STEPS, now_s() - t0);
    return ok;
}



// Resume the run in dir with --resume auto; its losses after the resume point must be the
// reference's, bit for bit. expect_step: the step it must resume from (-1: any).
static void resume_and_compare(const char* tag, const char* dir, int expect_step, const char* extra) {
    char cmd[4096], out[300], log[300], why[1024] = "";
    snprintf(out, sizeof(out), "%s/resume_out.txt", dir);
    snprintf(log, sizeof(log), "%s/resume_log.jsonl", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps %d --ckpt-every 2 --log %s --ckpt-dir %s --resume auto %s", REF_STEPS, log, dir, extra);
    int rc = run_to_file(cmd, out);
    int s = resumed_step(out);
    Log g;
    log_read(log, &g);
    double worst;
    int ok = rc == 0 && s >= 0 && (expect_step < 0 || s == expect_step) && g.first == s + 1 && g.last == REF_STEPS &&
             g.n == REF_STEPS - s && losses_match(&ref, &g, s + 1, REF_STEPS, 1, why, &worst);
    check(ok, tag, "resume exit %d from step %d%s, steps %d..%d bitwise equal%s%s", rc, s,
           expect_step >= 0 && s != expect_step ? " (expected another)" : "", s + 1, REF_STEPS, *why ? "; " : "", why);
}

// Resume the newest checkpoint in dir (saved at step `latest`) under `layout` for k more
// steps: it must start from `latest`, log k finite losses, and match the 1-rank reference
// within TOL where the reference has those steps.
static void resume_more(const char* tag, const char* suffix, const char* dir, const char* layout, int latest, int k) {
    char cmd[4096], out[300], log[300], name[160], why[512] = "";
    snprintf(out, sizeof(out), "%s/resume_out.txt", dir);
    snprintf(log, sizeof(log), "%s/resume_log.jsonl", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "%s --steps %d --log %s --ckpt-dir %s --resume auto", layout, latest + k, log, dir);
    int rc = run_to_file(cmd, out);
    Log g;
    log_read(log, &g);
    double worst = 0;
    int finite = 1, compared = latest + k <= REF_STEPS;
    for (int s = latest + 1; s <= latest + k; s++) finite &= isfinite(atof(g.loss[s]));
    int ok = rc == 0 && resumed_step(out) == latest && g.n == k && finite &&
             (!compared || losses_match(&ref, &g, latest + 1, latest + k, 0, why, &worst));
    snprintf(name, sizeof(name), "%s%s", tag, suffix);
    if (compared)
        check(ok, name, "exit %d, steps %d..%d loss rel %.1e vs the 1-rank run%s%s", rc, latest + 1, latest + k, worst,
               *why ? "; " : "", why);
    else
        check(ok, name, "exit %d, steps %d..%d, last loss %s (past the %d-step reference: not compared)", rc, latest + 1,
               latest + k, g.loss[latest + k], REF_STEPS);
}

static void kill_after_step(int k) {
    char tag[64], dir[256], cmd[4096], out[300], log[300], why[512] = "";
    snprintf(tag, sizeof(tag), "sigkill_after_step%d", k);
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps %d --ckpt-every 2 --log %s --ckpt-dir %s", REF_STEPS, log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, k, pid, 60);
    kill(pid, SIGKILL);
    int rc = wait_for(pid, 10);
    Log g;
    log_read(log, &g);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    int ok = reached && rc == 128 + SIGKILL && latest >= 0 && g.last < REF_STEPS;
    check(ok, tag, "killed after step %d (exit %d), LATEST step %d, checkpoints complete%s%s", g.last, rc, latest, *why ? "; " : "", why);
    if (ok) resume_and_compare(tag, dir, latest > 0 ? latest : -1, "");
}

// Kill the run the moment a file named `target` and 7 more characters (mkstemp's ".XXXXXX",
// files.h atomic_open) in dir has grown past min_bytes while being written (inotify), once file
// `after` (in dir, NULL: none) exists: in the middle of a checkpoint or manifest write.
static void kill_during_write(const char* tag, const char* target, long long min_bytes, const char* after, long long full) {
    char dir[256], cmd[4096], out[300], log[300], why[512] = "", tpath[512];
    run_dir(tag, dir, out, log);
    snprintf(tpath, sizeof(tpath), "%s/%s", dir, target);
    char apath[512];
    snprintf(apath, sizeof(apath), "%s/%s", dir, after ? after : "");
    int fd = inotify_init1(IN_NONBLOCK);
    if (fd < 0 || inotify_add_watch(fd, dir, IN_CREATE | IN_MODIFY | IN_MOVED_TO) < 0) { check(0, tag, "inotify: %s", strerror(errno)); return; }
    snprintf(cmd, sizeof(cmd), TRAIN "--steps %d --ckpt-every 2 --log %s --ckpt-dir %s", REF_STEPS, log, dir);
    pid_t pid = spawn(cmd, out);
    int hit = 0, n_partial = 0, n_renamed = 0;
    ModelConfig mc;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(FLAGS, &mc, P);
    long long ckpt_full = ckpt_file_bytes(P->n_full, P->n);
    free(P);
    long long size_at_kill = -1;
    double t0 = now_s();
    char buf[8192] __attribute__((aligned(8)));
    while (!hit && now_s() - t0 < 60) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) {
            if (!still_running(pid)) break;
            continue;
        }
        ssize_t n = read(fd, buf, sizeof(buf));
        for (char* q = buf; n > 0 && q < buf + n && !hit;) {
            struct inotify_event* ev = (struct inotify_event*)q;
            // a final name may only appear by rename, and only complete
            int s;
            if (ev->len && sscanf(ev->name, "ckpt_%d.bin", &s) == 1 && strlen(ev->name) == 17) {
                if (ev->mask & IN_CREATE) n_partial++;
                if (ev->mask & IN_MOVED_TO) {
                    char fpath[600];
                    snprintf(fpath, sizeof(fpath), "%s/%s", dir, ev->name);
                    if (file_size(fpath) >= 0 && file_size(fpath) != ckpt_full) n_partial++;  // (rotation may remove it)
                    n_renamed++;
                }
            }
            int is_target = ev->len && !strncmp(ev->name, target, strlen(target)) && strlen(ev->name) == strlen(target) + 7;
            if (is_target) snprintf(tpath, sizeof(tpath), "%s/%s", dir, ev->name);
            if (is_target && file_size(tpath) >= min_bytes && (!after || file_size(apath) >= 0)) {
                kill(pid, SIGKILL);
                hit = 1;
            }
            q += sizeof(struct inotify_event) + ev->len;
        }
    }
    close(fd);
    if (!hit) kill(pid, SIGKILL);
    int rc = wait_for(pid, 10);
    size_at_kill = file_size(tpath);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    // the write must still have been under way: the temp file left behind
    int ok = hit && rc == 128 + SIGKILL && size_at_kill >= 0 && latest >= 0 && n_partial == 0;
    check(ok, tag, "killed while %s was %lld of %lld bytes (exit %d); LATEST step %d; final names complete (%d renames "
           "seen, %d final names created directly or short)%s%s", target, size_at_kill, full, rc, latest, n_renamed, n_partial, *why ? "; " : "", why);
    if (!ok) return;
    // The directory scan (no manifest) must ignore the .tmp as well: resume a copy without LATEST.
    char copy[300];
    snprintf(copy, sizeof(copy), "%s_nolatest", dir);
    sh("rm -rf %s && cp -r %s %s && rm -f %s/LATEST", copy, dir, copy, copy);
    int highest = 0;
    DIR* d = opendir(copy);
    struct dirent* e;
    while (d && (e = readdir(d))) {
        int s;
        if (sscanf(e->d_name, "ckpt_%d.bin", &s) == 1 && strlen(e->d_name) == 17 && s > highest) highest = s;
    }
    if (d) closedir(d);
    resume_and_compare(tag, dir, latest, "");
    char tag2[128];
    snprintf(tag2, sizeof(tag2), "%s_no_manifest", tag);
    resume_and_compare(tag2, copy, highest, "");
}

static void suite_sigkill(void) {
    if (!reference("ref_gpt2_1rank", "", &ref)) return;
    kill_after_step(3);
    kill_after_step(7);
    // checkpoint 6 half written (ckpt_file_bytes in all)
    ModelConfig c;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(FLAGS, &c, P);
    long long full = ckpt_file_bytes(P->n_full, P->n);
    free(P);
    kill_during_write("sigkill_mid_checkpoint_write", "ckpt_00000006.bin.tmp", 1, NULL, full);
    kill_during_write("sigkill_mid_manifest_write", "LATEST.tmp", 0, "ckpt_00000004.bin", 18);  // 4 renamed, LATEST still 2
}

// ----------------------------------------------------------------------------
// 2. SIGTERM / SIGINT

static void signal_1rank(int sig, const char* name) {
    char tag[64], dir[256], cmd[4096], out[300], log[300], why[512] = "";
    snprintf(tag, sizeof(tag), "%s_1rank", name);
    run_dir(tag, dir, out, log);
    // --steps 200 and no --ckpt-every: only the signal writes a checkpoint before the end
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 200 --log %s --ckpt-dir %s", log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 60);
    kill(pid, sig);
    int rc = wait_for(pid, 30);
    if (rc < 0) kill_group(pid);
    Log g;
    log_read(log, &g);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    char said[64];
    snprintf(said, sizeof(said), "stopped by signal after step %d", g.last);
    int ok = reached && rc == 128 + sig && latest == g.last && file_has(out, said);
    check(ok, tag, "exit %d after step %d, checkpoint step %d, '%s' %s%s%s", rc, g.last, latest, said,
           file_has(out, said) ? "printed" : "missing", *why ? "; " : "", why);
    if (ok && latest < REF_STEPS) resume_and_compare(tag, dir, latest, "");
}

// A multi-rank run stopped: `sig` to the self-launcher's process group (as a terminal's
// Ctrl-C or a scheduler reaches it; the launcher passes it on through mpirun), or to one rank
// only (ckpt_stop_requested is a MAX over the world, so one rank's signal stops all). Every
// way the job exits 128 + sig with a checkpoint and "stopped by signal".
static void signal_ranks(const char* tag, const char* layout, int sig, int to_one_rank) {
    char dir[256], cmd[4096], out[300], log[300], why[512] = "";
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "%s --steps 200 --log %s --ckpt-dir %s", layout, log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 90);
    pid_t ranks[16];
    int nr = rank_pids(pid, ranks, 16);
    if (to_one_rank && nr > 0) kill(ranks[nr - 1], sig);
    else kill(-pid, sig);
    double t0 = now_s();
    int rc = wait_for(pid, 60);
    double dt = now_s() - t0;
    if (rc < 0) kill_group(pid);
    Log g;
    log_read(log, &g);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    int ok = reached && rc == 128 + sig && latest > 0 && latest >= g.last - 1 && file_has(out, "stopped by signal");
    check(ok, tag, "signal %d to %s: exit %d in %.1f s after step %d, checkpoint step %d, 'stopped by signal' %s%s%s", sig,
          to_one_rank ? "one rank" : "the launcher", rc, dt, g.last, latest, file_has(out, "stopped by signal") ? "printed" : "missing",
          *why ? "; " : "", why);
    if (latest <= 0 || strcmp(layout, "--tp 2 --pp 2")) return;
    // resumable: 2 more steps under the same layout
    resume_more(tag, "_resume", dir, layout, latest, 2);
}

// A stop that comes during a long loop other than the steps: the end-of-run sample, an
// evaluation, the reading of the data. The run must end within a few seconds with 128 +
// sig and say so. wait_text: what the output or the log shows once the loop has begun (NULL:
// wait `wait_s` seconds instead).
static void stop_in_loop(const char* tag, const char* args, const char* wait_text, double wait_s, int sig, const char* said) {
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "%s --log %s", args, log);
    pid_t pid = spawn(cmd, out);
    double t0 = now_s();
    int reached = 0;
    while (!reached && now_s() - t0 < 60 && still_running(pid)) {
        usleep(10000);
        reached = wait_text ? file_has(out, wait_text) || file_has(log, wait_text) : now_s() - t0 >= wait_s;
    }
    kill(pid, sig);
    double t1 = now_s();
    int rc = wait_for(pid, 30);
    double dt = now_s() - t1;
    if (rc < 0) kill_group(pid);
    int ok = reached && rc == 128 + sig && dt < 10 && file_has(out, said);
    check(ok, tag, "signal %d once '%s' showed: exit %d after %.1f s, '%s' %s", sig, wait_text ? wait_text : "(start-up)", rc, dt, said,
          file_has(out, said) ? "printed" : "missing");
}

// Bytes pid has read through read() so far (/proc/PID/io's rchar), or -1.
static long long bytes_read_by(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
    FILE* f = fopen(path, "r");
    long long n = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "rchar:", 6)) n = atoll(line + 6);
    if (f) fclose(f);
    return n;
}

// --timeout-s counts from the first step, not during start-up: of two ranks reading a large
// file, one is stopped (SIGSTOP) for 2.5 s once it has read 64 MiB of it, so the other waits
// for it at start-up far past --timeout-s 1; then both train, and no watchdog fires.
static void watchdog_not_in_startup(const char* big) {
    const char* tag = "watchdog_armed_at_first_step_tp2";
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "--tp 2 --timeout-s 1 --steps 2 --data %s --log %s", big, log);
    pid_t pid = spawn(cmd, out), ranks[16];
    double t0 = now_s();
    int nr = 0, stopped = 0;
    while (now_s() - t0 < 60 && still_running(pid) && !stopped) {
        usleep(1000);
        nr = rank_pids(pid, ranks, 16);
        if (nr == 2 && bytes_read_by(ranks[1]) >= (64LL << 20)) stopped = kill(ranks[1], SIGSTOP) == 0;
    }
    if (stopped) usleep(2500000), kill(ranks[1], SIGCONT);
    int rc = wait_for(pid, 60);
    if (rc < 0) kill_group(pid);
    int fired = file_has(out, "no progress for");
    check(stopped && rc == 0 && !fired, tag, "rank 1 %s for 2.5 s while reading the data; exit %d, watchdog %s",
          stopped ? "stopped" : "NOT stopped", rc, fired ? "FIRED" : "quiet");
}

// ----------------------------------------------------------------------------
// 3. Resharding: steps 1..4 under layout A, 5..8 under layout B.

static void reshard(const char* tag, const char* model_flags, const Log* r, const char* ref_dir, const char* from, const char* to) {
    char dir[256], cmd[4096], out[300], log[300], why[512] = "", mflags[1024];
    snprintf(dir, sizeof(dir), ROOT "/reshard_%s", tag);
    fresh_dir(dir);
    snprintf(out, sizeof(out), "%s/out1.txt", dir);
    snprintf(log, sizeof(log), "%s/log1.jsonl", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "%s %s --steps 4 --log %s --ckpt-dir %s", model_flags, from, log, dir);
    double t0 = now_s();
    int rc1 = run_to_file(cmd, out);
    snprintf(out, sizeof(out), "%s/out2.txt", dir);
    snprintf(log, sizeof(log), "%s/log2.jsonl", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "%s %s --steps 8 --log %s --ckpt-dir %s --resume auto", model_flags, to, log, dir);
    int rc2 = rc1 == 0 ? run_to_file(cmd, out) : -1;
    Log g;
    log_read(log, &g);
    double worst_loss = 0;
    int ok = rc1 == 0 && rc2 == 0 && resumed_step(out) == 4 && g.first == 5 && losses_match(r, &g, 5, 8, 0, why, &worst_loss);
    char a[600], b[600];
    snprintf(a, sizeof(a), "%s/ckpt_00000008.bin", ref_dir);
    snprintf(b, sizeof(b), "%s/ckpt_00000008.bin", dir);
    snprintf(mflags, sizeof(mflags), FLAGS " %s", model_flags);
    double worst_param = ok ? ckpt_param_diff(a, b, mflags) : 1e30;
    ok = ok && worst_param <= TOL;
    char name[128];
    snprintf(name, sizeof(name), "reshard_%s", tag);
    check(ok, name, "[%s] -> [%s]: exits %d %d, steps 5..8 loss rel %.1e, params rel %.1e (%.1f s)%s%s", from, to, rc1, rc2,
           worst_loss, worst_param, now_s() - t0, *why ? "; " : "", why);
}

// ----------------------------------------------------------------------------
// 4. One rank of eight killed

static void rank_killed(void) {
    const char* tag = "rank_sigkill_dp2_tp2_pp2";
    char dir[256], cmd[4096], out[300], log[300], why[512] = "";
    run_dir(tag, dir, out, log);
    const double timeout = 20, margin = 15;
    snprintf(cmd, sizeof(cmd), TRAIN "--dp 2 --tp 2 --pp 2 --timeout-s %.0f --steps 1000 --ckpt-every 1 --log %s --ckpt-dir %s",
             timeout, log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 120);
    pid_t ranks[16];
    int nr = rank_pids(pid, ranks, 16);
    usleep(50000);  // into the next step
    pid_t victim = nr > 0 ? ranks[nr / 2] : 0;
    if (victim) kill(victim, SIGKILL);
    double t0 = now_s();
    int rc = wait_for(pid, timeout + margin);
    pid_t left[64];
    int n_left;
    while ((n_left = pids_matching(dir, left, 64)) > 0 && now_s() - t0 < timeout + margin) usleep(50000);
    double gone = now_s() - t0;
    if (rc < 0 || n_left) {
        kill_group(pid);
        for (int i = 0; i < n_left; i++) kill(left[i], SIGKILL);
    }
    int latest = ckpt_dir_check(dir, FLAGS, why);
    int ok = reached && nr == 8 && rc > 0 && n_left == 0 && latest > 0;
    check(ok, tag, "%d ranks, killed pid %d: launcher exit %d, all processes gone after %.1f s (limit %.0f), %d left; LATEST step %d%s%s",
           nr, (int)victim, rc, gone, timeout + margin, n_left, latest, *why ? "; " : "", why);
    if (latest <= 0) return;
    // the last complete checkpoint resumes on one rank and trains a step
    resume_more(tag, "_resume_1rank", dir, "", latest, 1);
}

// A rank that hangs (SIGSTOP) instead of dying: nothing tells mpirun, so only the
// watchdog (--timeout-s) of the ranks waiting on it can end the job.
static void rank_hung(void) {
    const char* tag = "rank_sigstop_watchdog_dp2_tp2";
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    const double timeout = 5, margin = 15;
    snprintf(cmd, sizeof(cmd), TRAIN "--dp 2 --tp 2 --timeout-s %.0f --steps 1000 --log %s --ckpt-dir %s", timeout, log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 120);
    pid_t ranks[16];
    int nr = rank_pids(pid, ranks, 16);
    pid_t victim = nr > 0 ? ranks[nr - 1] : 0;
    if (victim) kill(victim, SIGSTOP);
    double t0 = now_s();
    int rc = wait_for(pid, timeout + margin);
    pid_t left[64];
    int n_left;
    while ((n_left = pids_matching(dir, left, 64)) > 0 && now_s() - t0 < timeout + margin) usleep(50000);
    double gone = now_s() - t0;
    if (rc < 0 || n_left) {
        if (victim) kill(victim, SIGKILL);
        kill_group(pid);
        for (int i = 0; i < n_left; i++) kill(left[i], SIGKILL);
    }
    int said = file_has(out, "no progress for");
    int ok = reached && nr == 4 && rc > 0 && n_left == 0 && gone >= timeout - 1 && said;
    check(ok, tag, "%d ranks, stopped pid %d: launcher exit %d, all processes gone after %.1f s (--timeout-s %.0f, limit %.0f), "
           "%d left, watchdog message %s", nr, (int)victim, rc, gone, timeout, timeout + margin, n_left, said ? "printed" : "missing");
}

// ----------------------------------------------------------------------------
// 5. Bad inputs

#define BAD ROOT "/bad"

static void write_bytes(const char* name, const void* p, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), BAD "/%s", name);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) fail("cannot write %s", path);
}

static void write_shard(const char* name, int magic, int version, int count, int n_tokens, int bad_token) {
    size_t n = 1024 + 2 * (size_t)n_tokens;
    uint8_t* b = (uint8_t*)xcalloc(n, 1);
    int32_t* h = (int32_t*)b;
    h[0] = magic, h[1] = version, h[2] = count;
    uint16_t* t = (uint16_t*)(b + 1024);
    for (int i = 0; i < n_tokens; i++) t[i] = (uint16_t)('a' + i % 26);
    if (bad_token >= 0 && n_tokens > 10) t[10] = (uint16_t)bad_token;
    write_bytes(name, b, n);
    free(b);
}

static void write_tokenizer(const char* name, uint32_t magic, uint32_t version, uint32_t vocab, int entries, int empty_at) {
    size_t n = 1024 + 4 * (size_t)entries;
    uint8_t* b = (uint8_t*)xcalloc(n, 1);
    uint32_t* h = (uint32_t*)b;
    h[0] = magic, h[1] = version, h[2] = vocab, h[3] = 256;
    size_t k = 1024;
    for (int i = 0; i < entries; i++) {
        b[k++] = i == empty_at ? 0 : 3;
        if (i != empty_at) b[k++] = 'x', b[k++] = 'y', b[k++] = 'z';
    }
    write_bytes(name, b, k);
    free(b);
}

// Recompute a checkpoint's checksums in memory (each tensor's in the index, then the
// header's), as a writer that saved these bytes would: the checks behind the checksums (the
// values, the header's fields) then see a change. A file whose counts do not give its size
// is left as it is.
static void ckpt_resign(uint8_t* b, long long n) {
    int32_t* h = (int32_t*)b;
    size_t n_full = ckpt_header_n_full(h);
    int nt = h[CK_N_TENSORS];
    if (ckpt_file_bytes(n_full, nt) != n) return;
    uint8_t* index = b + 1024 + 12 * n_full;
    uint64_t* lens = (uint64_t*)xmalloc(sizeof(uint64_t) * nt);
    uint64_t* sums = (uint64_t*)xmalloc(sizeof(uint64_t) * 3 * nt);
    memcpy(lens, index, sizeof(uint64_t) * nt);
    for (int sec = 0; sec < 3; sec++) {
        size_t at = 0;
        for (int i = 0; i < nt; i++, at += lens[i - 1])
            sums[sec * nt + i] = hash_bytes(b + 1024 + 4 * (sec * n_full + at), 4 * lens[i]);
    }
    memcpy(index + sizeof(uint64_t) * nt, sums, sizeof(uint64_t) * 3 * nt);
    uint64_t sum = ckpt_header_checksum(h, lens, sums, nt);
    h[CK_SUM_LO] = (int32_t)(uint32_t)sum, h[CK_SUM_HI] = (int32_t)(uint32_t)(sum >> 32);
    free(lens);
    free(sums);
}

// Copy the good checkpoint with one header int (index k) set to v (k < 0: unchanged),
// truncated to `size` bytes (< 0: whole), and a NaN at float `nan_at` of the params (< 0:
// none); resign: with its checksums recomputed after the change (ckpt_resign).
static void write_ckpt(const char* name, const char* good, int k, int32_t v, long long size, long long nan_at, int resign) {
    FILE* f = fopen(good, "rb");
    long long n = file_size(good);
    if (!f || n < 1024) fail("no good checkpoint %s", good);
    uint8_t* b = (uint8_t*)xmalloc(n);
    if (fread(b, 1, n, f) != (size_t)n) fail("cannot read %s", good);
    fclose(f);
    if (k >= 0) ((int32_t*)b)[k] = v;
    if (nan_at >= 0) { float x = NAN; memcpy(b + 1024 + 4 * nan_at, &x, 4); }
    if (resign) ckpt_resign(b, n);
    char dirname[512];
    snprintf(dirname, sizeof(dirname), BAD "/%s", name);
    sh("mkdir -p %s", dirname);
    char path[600];
    snprintf(path, sizeof(path), "%s/ckpt.bin", name);
    write_bytes(path, b, size >= 0 && size < n ? size : n);
    free(b);
}

// Copy the good checkpoint with floats [first, first + count) after the header set to
// value (resign: and its checksums recomputed), or with one bit of float `first` flipped
// (count 0; `value`'s bits give the mask).
static void write_ckpt_values(const char* name, const char* good, long long first, long long count, float value, int resign) {
    FILE* f = fopen(good, "rb");
    long long n = file_size(good);
    uint8_t* b = (uint8_t*)xmalloc(n);
    if (!f || fread(b, 1, n, f) != (size_t)n) fail("cannot read %s", good);
    fclose(f);
    float* x = (float*)(b + 1024) + first;
    for (long long i = 0; i < count; i++) x[i] = value;
    uint32_t bits, mask;
    memcpy(&mask, &value, 4), memcpy(&bits, x, 4);
    if (!count) bits ^= mask, memcpy(x, &bits, 4);
    if (resign) ckpt_resign(b, n);
    char path[600];
    sh("mkdir -p " BAD "/%s", name);
    snprintf(path, sizeof(path), "%s/ckpt.bin", name);
    write_bytes(path, b, n);
    free(b);
}

// One hostile input. rc 1: exit 1 with exactly one "error:" line, naming the problem
// (needle). rc 0: a run that must succeed: no "error:" line, needle somewhere in the
// output. Either way: no signal, nothing from a sanitizer, no raw control character or
// ill-formed UTF-8 in the output (it reaches a terminal), and `check` (a shell command,
// may be NULL) exits 0 afterwards. `setup` (may be NULL) runs first in the same shell, so a
// ulimit there applies to the run. args follow the suite's FLAGS, or, where they hold
// "{train}", are the whole command with the binary and FLAGS put in for each {train}.
typedef struct { const char* name; const char* args; const char* needle; int rc; } BadCase;
typedef struct { BadCase k; const char* setup; const char* check; } BadRun;

// Whether a file holds only what a terminal may show: printable UTF-8, newlines and tabs.
static int output_is_clean(const char* path, long long* at) {
    FILE* f = fopen(path, "rb");
    static char buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f) fclose(f);
    for (size_t i = 0; i < n;) {
        int len = buf[i] == '\n' || buf[i] == '\t' ? 1 : utf8_printable_len((const unsigned char*)buf + i, n - i);
        if (!len) { *at = (long long)i; return 0; }
        i += len;
    }
    return 1;
}

// s with every "{train}" replaced by `with`, into out.
static void expand_train(const char* s, const char* with, char* out, size_t cap) {
    size_t o = 0;
    while (*s && o + 1 < cap) {
        if (!strncmp(s, "{train}", 7)) o += snprintf(out + o, cap - o, "%s", with), s += 7;
        else out[o++] = *s++;
    }
    out[o < cap ? o : cap - 1] = 0;
}

static void bad_run(const char* bin, const BadCase* k, const char* setup, const char* post_check) {
    char cmd[32768], run_cmd[16384], out[512], name[160], train[1024];
    snprintf(name, sizeof(name), "%s%s", strstr(bin, "asan") ? "asan_" : "bad_", k->name);
    snprintf(out, sizeof(out), BAD "/out_%s.txt", name);
    snprintf(train, sizeof(train), "%s %s", bin, strncmp(k->args, "--plan", 6) ? FLAGS : "");
    if (strstr(k->args, "{train}")) expand_train(k->args, train, run_cmd, sizeof(run_cmd));
    else snprintf(run_cmd, sizeof(run_cmd), "%s %s", train, k->args);
    // a hang is a failure, not a stuck suite
    snprintf(cmd, sizeof(cmd), "{ %s; } >/dev/null 2>&1; ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 OMP_NUM_THREADS=1 "
             "timeout -s KILL 120 %s", setup ? setup : ":", run_cmd);
    int rc = run_to_file(cmd, out);
    FILE* f = fopen(out, "r");
    char line[4096], first_error[4096] = "";
    int n_error = 0, sanitizer = 0, found = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "error:", 6)) {
            if (!n_error++) snprintf(first_error, sizeof(first_error), "%s", line);
        }
        if (strstr(line, "Sanitizer") || strstr(line, "runtime error:")) sanitizer = 1;
        found |= strstr(line, k->needle) != NULL;
    }
    if (f) fclose(f);
    first_error[strcspn(first_error, "\n")] = 0;
    long long at = 0;
    int clean = output_is_clean(out, &at);
    int named = k->rc ? strstr(first_error, k->needle) != NULL : found;
    int checked = !post_check || sh("%s", post_check) == 0;
    int ok = rc == k->rc && n_error == (k->rc ? 1 : 0) && named && !sanitizer && clean && checked;
    char dirt[96] = "";
    if (!clean) snprintf(dirt, sizeof(dirt), ", a raw control byte or ill-formed UTF-8 at byte %lld of the output", at);
    check(ok, name, "exit %d%s, %d error line%s%s%s%s%s%s%s", rc, rc >= 128 ? " (killed by a signal)" : "", n_error, n_error == 1 ? "" : "s",
           named ? "" : k->rc ? " (expected one naming '" : " (expected output with '", named ? "" : k->needle, named ? "" : "')",
           sanitizer ? ", SANITIZER REPORT (see output)" : "", dirt, checked ? "" : ", check failed");
    if (!ok) printf("     %s\n     -> %s\n%s%s%s", cmd, first_error, checked ? "" : "     check: ", checked ? "" : post_check, checked ? "" : "\n");
}

// A second run on a --ckpt-dir in use is refused at once (rank 0's flock of <dir>/LOCK); once
// the first has gone, even by kill -9, the directory is free again, and temporary files a
// killed run left are removed by the next run.
static void ckpt_dir_lock_test(const char* bin) {
    char tag[64], dir[256], out[300], log[300], cmd[4096], out2[300], out3[300];
    snprintf(tag, sizeof(tag), "%sckpt_dir_in_use", strstr(bin, "asan") ? "asan_" : "bad_");
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 100000 --ckpt-every 1 --log %s --ckpt-dir %s", log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 1, pid, 60);
    snprintf(out2, sizeof(out2), "%s/second.txt", dir);
    snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 %s " FLAGS " --steps 1 --ckpt-dir %s", bin, dir);
    double t0 = now_s();
    int rc2 = run_to_file(cmd, out2);
    double dt = now_s() - t0;
    int refused = rc2 == 1 && file_has(out2, "is in use by another run");
    kill(pid, SIGKILL);
    wait_for(pid, 10);
    sh("touch %s/ckpt_00000009.bin.tmp.Ab12Cd %s/LATEST.tmp.Ef34Gh", dir, dir);  // as a killed run leaves them
    snprintf(out3, sizeof(out3), "%s/third.txt", dir);
    int rc3 = run_to_file(cmd, out3);
    int tmp_left = sh("ls %s/*.tmp.* > /dev/null 2>&1", dir) == 0;
    check(reached && refused && dt < 5 && rc3 == 0 && !tmp_left, tag, "second run: exit %d in %.1f s, %s; after kill -9 of the first: "
          "exit %d, temporary files %s", rc2, dt, refused ? "refused" : "NOT refused", rc3, tmp_left ? "LEFT" : "removed");
}

// The one-process build (make MPI=none: nompi/mpi.h in place of Open MPI) compiles and
// trains, with two chunks on its one stage (messages to itself) and a sample; and its tag
// range, the least MPI promises (32767), refuses a step whose pipeline messages need more.
static void nompi_build(void) {
    double t0 = now_s();
    int rc_build = sh("gcc -O1 -fopenmp -std=gnu11 -I. -Inompi -o " ROOT "/train_nompi train_gpt.c -lm > " ROOT "/nompi_build.txt 2>&1");
    int rc = rc_build ? -1 : run_to_file("OMP_NUM_THREADS=1 " ROOT "/train_nompi " FLAGS " --steps 2 --vpp 2 --sample-len 8", ROOT "/nompi.txt");
    check(rc_build == 0 && rc == 0, "nompi_build_trains", "build exit %d (" ROOT "/nompi_build.txt), 2 steps of pp 1 vpp 2: exit %d (%.1f s)",
          rc_build, rc, now_s() - t0);
    rc = rc_build ? -1 : run_to_file(ROOT "/train_nompi " FLAGS " --n-layer 64 --vpp 64 --micro-batch 1 --global-batch 512", ROOT "/nompi_tags.txt");
    check(rc == 1 && file_has(ROOT "/nompi_tags.txt", "past MPI's 32767"), "nompi_tag_range", "512 micro-batches x 64 chunks: exit %d, %s",
          rc, file_has(ROOT "/nompi_tags.txt", "past MPI's 32767") ? "refused by the tag range" : "NOT refused by the tag range");
}

static double mtime_of(const char* path) {
    struct stat st;
    return stat(path, &st) ? -1 : st.st_mtim.tv_sec + 1e-9 * st.st_mtim.tv_nsec;
}

// ./train_asan, rebuilt when missing or older than train_gpt.c or any header here.
static int build_asan(void) {
    double newest = mtime_of("train_gpt.c"), have = mtime_of("train_asan");
    glob_t g;
    if (glob("*.h", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) if (mtime_of(g.gl_pathv[i]) > newest) newest = mtime_of(g.gl_pathv[i]);
        globfree(&g);
    }
    if (have > 0 && have >= newest) return 1;
    printf("building train_asan (mpicc -O1 -g -fsanitize=address,undefined) ...\n");
    fflush(stdout);
    return sh("mpicc -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fopenmp -std=gnu11 -I. -o train_asan train_gpt.c -lm "
              "> " ROOT "/asan_build.txt 2>&1") == 0;
}

static void suite_bad_inputs(void) {
    fresh_dir(BAD);
    // data files
    write_shard("shard_ok.bin", SHARD_MAGIC, 1, 2000, 2000, -1);
    write_shard("shard_trunc_header.bin", SHARD_MAGIC, 1, 2000, 0, -1);
    sh("head -c 600 " BAD "/shard_ok.bin > " BAD "/shard_short_header.bin");
    sh("head -c 3000 " BAD "/shard_ok.bin > " BAD "/shard_trunc_body.bin");
    write_shard("shard_magic.bin", 12345, 1, 2000, 2000, -1);
    write_shard("shard_version.bin", SHARD_MAGIC, 7, 2000, 2000, -1);
    write_shard("shard_huge_count.bin", SHARD_MAGIC, 1, 0x7fffffff, 2000, -1);
    write_shard("shard_negative_count.bin", SHARD_MAGIC, 1, -5, 2000, -1);
    write_shard("shard_zero_count.bin", SHARD_MAGIC, 1, 0, 0, -1);
    write_shard("shard_token_range.bin", SHARD_MAGIC, 1, 2000, 2000, 300);
    write_shard("shard_too_short.bin", SHARD_MAGIC, 1, 20, 20, -1);
    write_bytes("empty.txt", "", 0);
    write_bytes("short.txt", "hello", 5);
    sh("mkdir -p " BAD "/a_dir.txt");
    // tokenizers
    write_tokenizer("tok_ok.bin", TOKENIZER_MAGIC, 2, 300, 300, -1);
    write_bytes("tok_short_header.bin", "abc", 3);
    write_tokenizer("tok_magic.bin", 99, 2, 300, 300, -1);
    write_tokenizer("tok_version.bin", TOKENIZER_MAGIC, 9, 300, 300, -1);
    write_tokenizer("tok_vocab_zero.bin", TOKENIZER_MAGIC, 2, 0, 300, -1);
    write_tokenizer("tok_vocab_huge.bin", TOKENIZER_MAGIC, 2, 4000000000u, 300, -1);
    write_tokenizer("tok_truncated.bin", TOKENIZER_MAGIC, 2, 300, 100, -1);
    write_tokenizer("tok_empty_entry.bin", TOKENIZER_MAGIC, 2, 300, 300, 5);
    // planner device files
    write_bytes("dev_unknown_key.txt", "warp_speed = 9\n", 15);
    write_bytes("dev_bad_value.txt", "hbm_gbps = fast\n", 16);
    write_bytes("dev_no_equals.txt", "hbm_gbps 3000\n", 14);
    write_bytes("dev_base_late.txt", "hbm_gbps = 3000\nbase = h100-sxm\n", 32);
    write_bytes("dev_base_unknown.txt", "base = abacus\n", 14);
    write_bytes("dev_missing_value.txt", "hbm_gbps =\n", 11);
    {
        char longline[2000];
        memset(longline, 'x', sizeof(longline));
        longline[sizeof(longline) - 1] = '\n';
        write_bytes("dev_long_line.txt", longline, sizeof(longline));
    }
    // checkpoints: a good one from a 1-step run, then corruptions of it
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 1 --ckpt-dir " BAD "/good");
    int rc = run_to_file(cmd, BAD "/good_out.txt");
    const char* good = BAD "/good/ckpt_00000001.bin";
    if (rc != 0 || file_size(good) < 0) { check(0, "bad_inputs_setup", "the good checkpoint run exited %d", rc); return; }
    long long gsize = file_size(good);
    write_ckpt("ck_truncated", good, -1, 0, gsize / 2, -1, 0);
    write_ckpt("ck_short_header", good, -1, 0, 100, -1, 0);
    write_ckpt("ck_magic", good, CK_MAGIC, 1234, -1, -1, 0);
    write_ckpt("ck_version", good, CK_VERSION, 9, -1, -1, 0);
    write_ckpt("ck_version1", good, CK_VERSION, 1, -1, -1, 0);
    write_ckpt("ck_n_full_huge", good, CK_N_FULL_HI, 0x7fffffff, -1, -1, 0);
    write_ckpt("ck_negative_step", good, CK_STEP, -7, -1, -1, 1);
    write_ckpt("ck_nan", good, -1, 0, -1, 1000, 1);
    write_ckpt("ck_grown", good, -1, 0, -1, -1, 0);
    // damage behind the checksums: a changed step field, a zeroed body, one flipped bit
    write_ckpt("ck_step_19", good, CK_STEP, 19, -1, -1, 0);
    write_ckpt("ck_n_tensors", good, CK_N_TENSORS, 27, -1, -1, 0);
    sh("head -c 4 /dev/zero >> " BAD "/ck_grown/ckpt.bin");
    sh("mkdir -p " BAD "/ck_empty_dir " BAD "/ck_dangling && echo ckpt_00000099.bin > " BAD "/ck_dangling/LATEST");
    sh("mkdir -p " BAD "/ck_garbage_latest && cp %s " BAD "/ck_garbage_latest/ckpt_00000001.bin && printf '\\001\\002' > " BAD
       "/ck_garbage_latest/LATEST", good);
    write_bytes("a_file", "x", 1);
    write_bytes("llmc_garbage.bin", "not a checkpoint at all", 23);
    // values: AdamW v below 0 (a mean of squares cannot be); layer 0's qkv weights at 1e30,
    // finite but every step's loss NaN; an llm.c file with a NaN and one with an inf
    ModelConfig mc;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(FLAGS, &mc, P);
    write_ckpt_values("ck_negative_v", good, 2 * (long long)P->n_full + 7, 1, -1.0f, 1);
    for (int i = 0; i < P->n; i++)
        if (P->t[i].kind == P_QKVW && P->t[i].layer == 0) write_ckpt_values("ck_huge_qkvw", good, P->t[i].full_offset, P->t[i].size, 1e30f, 1);
    write_ckpt_values("ck_zeroed_body", good, 0, 3 * (long long)P->n_full, 0.0f, 0);
    float lowest_bit;  // the lowest mantissa bit of one float of Adam's v
    uint32_t one = 1;
    memcpy(&lowest_bit, &one, 4);
    write_ckpt_values("ck_v_bit", good, 2 * (long long)P->n_full + 123, 0, lowest_bit, 0);
    free(P);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 0 --export-llmc " BAD "/llmc_ok.bin");
    if (run_to_file(cmd, BAD "/llmc_ok_out.txt") != 0) { check(0, "bad_inputs_setup", "the llm.c export run failed"); return; }
    sh("cp " BAD "/llmc_ok.bin " BAD "/llmc_nan.bin && printf '\\000\\000\\300\\177' | dd of=" BAD "/llmc_nan.bin bs=1 seek=5000 conv=notrunc");
    sh("cp " BAD "/llmc_ok.bin " BAD "/llmc_inf.bin && printf '\\000\\000\\200\\177' | dd of=" BAD "/llmc_inf.bin bs=1 seek=%lld conv=notrunc",
       file_size(BAD "/llmc_ok.bin") - 40);
    // FIFOs where an input is expected: open() of one blocks until a writer comes
    sh("cd " BAD " && mkfifo fifo.txt fifo.bin fifo_g1.bin fifo.tok fifo.ckpt fifo.llmc && mkdir -p ck_fifo_latest && mkfifo ck_fifo_latest/LATEST");
    // text to train on, under names with glob characters and as a glob of several files
    char text[4000];
    for (size_t i = 0; i < sizeof(text); i++) text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    write_bytes("text_ok.txt", text, sizeof(text));
    write_bytes("notes[1].txt", text, sizeof(text));
    write_bytes("globtext_a.txt", text, 2000), write_bytes("globtext_b.txt", text + 2000, 2000);
    write_bytes("mixed_a.txt", text, 2000);
    write_shard("mixed_b.bin", SHARD_MAGIC, 1, 2000, 2000, -1);
    // tokenizers of the model's vocabulary (257): pieces that are escape sequences and bytes
    // that are not UTF-8 (eot 256); and the 300-entry one of another model (tok_ok.bin above)
    {
        uint8_t b[1024 + 257 * 8];
        uint32_t h[256] = {TOKENIZER_MAGIC, 2, 257, 256};
        memcpy(b, h, sizeof(h));
        size_t k = 1024;
        for (int i = 0; i < 257; i++) {
            const char* piece = i % 3 == 0 ? "\x1b[2J" : i % 3 == 1 ? "\x1b]0;pwned\x07" : "\xff\xc2\x9b";
            b[k++] = (uint8_t)strlen(piece);
            memcpy(b + k, piece, strlen(piece)), k += strlen(piece);
        }
        write_bytes("tok_escapes.bin", b, k);
    }
    // long paths: a checkpoint directory of more than 1000 characters, a --log of 599 (so
    // "<log>.rank0" is 605), and one past PATH_MAX
    char long_dir[1200], log599[700], too_long[5200];
    snprintf(long_dir, sizeof(long_dir), BAD "/%0200d/%0200d/%0200d/%0200d/%0200d/ck", 1, 2, 3, 4, 5);
    snprintf(log599, sizeof(log599), BAD "/%0200d/%0200d/%0*d", 6, 7, 599 - (int)strlen(BAD) - 403, 8);
    sh("mkdir -p $(dirname %s) $(dirname %s)", long_dir, log599);
    snprintf(too_long, sizeof(too_long), BAD "/%05000d", 9);
    char long_ckpt_args[1400], long_ckpt_check[2800], log599_args[800], log599_check[2400], too_long_args[5400];
    snprintf(long_ckpt_args, sizeof(long_ckpt_args), "--steps 2 --ckpt-dir %s", long_dir);
    snprintf(long_ckpt_check, sizeof(long_ckpt_check), "test -f %s/ckpt_00000002.bin && grep -qx ckpt_00000002.bin %s/LATEST", long_dir, long_dir);
    snprintf(log599_args, sizeof(log599_args), "--steps 2 --log %s --log-ranks", log599);
    snprintf(log599_check, sizeof(log599_check), "grep -q '\"step\":2,' %s && ! grep -q '\"rank\"' %s && grep -q '\"rank\":0' %s.rank0", log599,
             log599, log599);
    snprintf(too_long_args, sizeof(too_long_args), "--steps 1000000 --ckpt-dir %s", too_long);

    BadCase cases[] = {
        // data
        {"shard_short_header", "--data " BAD "/shard_short_header.bin", "truncated header", 1},
        {"shard_trunc_body", "--data " BAD "/shard_trunc_body.bin", "header says", 1},
        {"shard_magic", "--data " BAD "/shard_magic.bin", "bad magic", 1},
        {"shard_version", "--data " BAD "/shard_version.bin", "unsupported version", 1},
        {"shard_huge_count", "--data " BAD "/shard_huge_count.bin", "header says 2147483647 tokens", 1},
        {"shard_negative_count", "--data " BAD "/shard_negative_count.bin", "bad token count", 1},
        {"shard_zero_count", "--data " BAD "/shard_zero_count.bin", "bad token count", 1},
        {"shard_token_range", "--data " BAD "/shard_token_range.bin", "token id 300", 1},
        {"shard_too_short", "--data " BAD "/shard_too_short.bin", "fewer than seq-len+1", 1},
        {"shard_glob_no_match", "--data '" BAD "/nothing_*.bin'", "no file matches", 1},
        {"shard_missing", "--data " BAD "/missing.bin", "cannot open data file", 1},
        {"text_missing", "--data " BAD "/missing.txt", "cannot open data file", 1},
        {"text_empty", "--data " BAD "/empty.txt", "is empty", 1},
        {"text_short", "--data " BAD "/short.txt", "fewer than seq-len+1", 1},
        {"text_is_dir", "--data " BAD "/a_dir.txt", "a_dir.txt", 1},
        {"text_small_vocab", "--data " BAD "/short.txt --vocab 100", "needs vocab >= 256", 1},
        {"val_missing", "--val-data " BAD "/missing.bin", "cannot open data file", 1},
        // flags
        {"flag_steps_abc", "--steps abc", "--steps: expected an integer", 1},
        {"flag_steps_trailing", "--steps 12x", "--steps: expected an integer", 1},
        {"flag_steps_overflow", "--steps 99999999999999999999", "--steps: expected an integer", 1},
        {"flag_lr_abc", "--lr fast", "--lr: expected a number", 1},
        {"flag_lr_nan", "--lr nan", "--lr: expected a number", 1},
        {"flag_lr_negative", "--lr -1", "--lr must be in", 1},
        {"flag_micro_batch_negative", "--micro-batch -8", "--micro-batch must be in", 1},
        {"flag_n_layer_zero", "--n-layer 0", "--n-layer must be in", 1},
        {"flag_d_model_negative", "--d-model -64", "--d-model must be in", 1},
        {"flag_d_model_indivisible", "--d-model 66", "not divisible by --n-head", 1},
        {"flag_seed_negative", "--seed -1", "--seed must be >= 0", 1},
        {"flag_no_value", "--steps", "needs a value", 1},
        {"flag_unknown", "--warp 9", "unknown flag --warp", 1},
        {"flag_positional", "stray", "unexpected argument 'stray'", 1},
        {"flag_model_unknown", "--model gpt5", "unknown preset 'gpt5'", 1},
        {"flag_schedule_bad", "--schedule zigzag", "--schedule must be", 1},
        {"flag_timeout_zero", "--timeout-s 0", "--timeout-s must be in", 1},
        {"layout_tp3", "--tp 3", "layout:", 1},
        {"layout_global_batch", "--dp 1 --global-batch 33", "layout:", 1},
        {"layout_zero_no_dp", "--zero 1", "layout:", 1},
        // checkpoints
        {"ckpt_truncated", "--resume " BAD "/ck_truncated/ckpt.bin", "truncated or corrupt", 1},
        {"ckpt_grown", "--resume " BAD "/ck_grown/ckpt.bin", "truncated or corrupt", 1},
        {"ckpt_short_header", "--resume " BAD "/ck_short_header/ckpt.bin", "truncated header", 1},
        {"ckpt_magic", "--resume " BAD "/ck_magic/ckpt.bin", "bad magic 1234", 1},
        {"ckpt_version", "--resume " BAD "/ck_version/ckpt.bin", "unsupported version 9", 1},
        {"ckpt_n_full_huge", "--resume " BAD "/ck_n_full_huge/ckpt.bin", "parameters", 1},
        {"ckpt_negative_step", "--resume " BAD "/ck_negative_step/ckpt.bin", "negative step", 1},
        {"ckpt_nan", "--resume " BAD "/ck_nan/ckpt.bin", "non-finite", 1},
        // checksums: every byte of a checkpoint is verified by the rank that reads it
        {"ckpt_version1", "--resume " BAD "/ck_version1/ckpt.bin", "format version 1 has no checksums", 1},
        {"ckpt_step_changed", "--resume " BAD "/ck_step_19/ckpt.bin", "the header or the index does not match its checksum", 1},
        {"ckpt_n_tensors_changed", "--resume " BAD "/ck_n_tensors/ckpt.bin", "truncated or corrupt", 1},
        {"ckpt_zeroed_body", "--resume " BAD "/ck_zeroed_body/ckpt.bin", "parameters of tensor wte do not match their checksum", 1},
        {"ckpt_zeroed_body_tp2_pp2", "--tp 2 --pp 2 --resume " BAD "/ck_zeroed_body/ckpt.bin", "do not match their checksum", 1},
        {"ckpt_adam_v_bit_flipped", "--resume " BAD "/ck_v_bit/ckpt.bin", "adam v of tensor wte do not match their checksum", 1},
        // sizes from flags past their caps, computed in 64 bits before anything is allocated
        {"schedule_pairs_overflow", "--seq-len 1 --micro-batch 1 --n-layer 64 --vpp 64 --global-batch 9586981", "(micro-batch, chunk) pairs", 1},
        {"schedule_pairs_past_cap", "--pp 2 --vpp 2 --micro-batch 1 --global-batch 1048578", "(micro-batch, chunk) pairs", 1},
        {"world_wraps_to_one", "--dp 411849 --cp 20857 --seq-len 41714 --global-batch 411849 --micro-batch 1", "ranks, more than the 1048576", 1},
        {"world_wraps_to_zero", "--dp 65536 --tp 512 --pp 128", "ranks, more than the 1048576", 1},
        {"cp_contiguous_names_its_split", "--cp 3 --cp-split contiguous --seq-len 46", "(the contiguous split)", 1},
        {"ckpt_other_shape_layers", "--n-layer 3 --resume " BAD "/good/ckpt_00000001.bin", "n_layer is 4 in the checkpoint but 3", 1},
        {"ckpt_other_shape_width", "--d-model 32 --resume " BAD "/good/ckpt_00000001.bin", "d_model", 1},
        {"ckpt_other_arch", "--model llama-tiny --resume " BAD "/good/ckpt_00000001.bin", "arch", 1},
        {"ckpt_other_global_batch", "--global-batch 16 --resume " BAD "/good/ckpt_00000001.bin", "data order", 1},
        {"ckpt_missing", "--resume " BAD "/missing.bin", "cannot open", 1},
        {"ckpt_auto_no_dir", "--resume auto", "needs --ckpt-dir", 1},
        {"ckpt_auto_empty_dir", "--resume auto --ckpt-dir " BAD "/ck_empty_dir", "no checkpoint", 1},
        {"ckpt_auto_missing_dir", "--resume auto --ckpt-dir " BAD "/no_such_dir", "cannot open --ckpt-dir", 1},
        {"ckpt_auto_dangling_latest", "--resume auto --ckpt-dir " BAD "/ck_dangling", "ckpt_00000099.bin", 1},
        {"ckpt_auto_garbage_latest", "--resume auto --ckpt-dir " BAD "/ck_garbage_latest", "LATEST does not name a checkpoint", 1},
        {"ckpt_dir_is_file", "--steps 1 --ckpt-dir " BAD "/a_file", "--ckpt-dir", 1},
        {"log_unwritable", "--steps 1 --log " BAD "/no_such_dir/log.jsonl", "--log", 1},
        {"export_llmc_llama", "--model llama-tiny --steps 1 --export-llmc " BAD "/llama.bin", "GPT-2", 1},
        {"export_llmc_unwritable", "--steps 1 --export-llmc " BAD "/no_such_dir/e.bin", "--export-llmc", 1},
        {"import_llmc_garbage", "--import-llmc " BAD "/llmc_garbage.bin", "llmc_garbage.bin", 1},
        {"import_llmc_missing", "--import-llmc " BAD "/missing.bin", "missing.bin", 1},
        // tokenizer
        {"tok_missing", "--tokenizer " BAD "/missing.tok", "cannot open tokenizer", 1},
        {"tok_short_header", "--tokenizer " BAD "/tok_short_header.bin", "truncated header", 1},
        {"tok_magic", "--tokenizer " BAD "/tok_magic.bin", "bad magic", 1},
        {"tok_version", "--tokenizer " BAD "/tok_version.bin", "unsupported version", 1},
        {"tok_vocab_zero", "--tokenizer " BAD "/tok_vocab_zero.bin", "implausible vocab", 1},
        {"tok_vocab_huge", "--tokenizer " BAD "/tok_vocab_huge.bin", "implausible vocab", 1},
        {"tok_truncated", "--tokenizer " BAD "/tok_truncated.bin", "truncated", 1},
        {"tok_empty_entry", "--tokenizer " BAD "/tok_empty_entry.bin", "empty entry 5", 1},
        // planner device file
        {"plan_device_missing", "--plan --device-file " BAD "/missing.dev", "cannot open device file", 1},
        {"plan_device_unknown_key", "--plan --device-file " BAD "/dev_unknown_key.txt", "unknown key 'warp_speed'", 1},
        {"plan_device_bad_value", "--plan --device-file " BAD "/dev_bad_value.txt", "hbm_gbps", 1},
        {"plan_device_no_equals", "--plan --device-file " BAD "/dev_no_equals.txt", "expected 'key = value'", 1},
        {"plan_device_base_late", "--plan --device-file " BAD "/dev_base_late.txt", "'base' must be the first key", 1},
        {"plan_device_base_unknown", "--plan --device-file " BAD "/dev_base_unknown.txt", "unknown device 'abacus'", 1},
        {"plan_device_missing_value", "--plan --device-file " BAD "/dev_missing_value.txt", "missing value", 1},
        {"plan_device_long_line", "--plan --device-file " BAD "/dev_long_line.txt", "line too long", 1},
        // inputs that are not regular files: refused at once, never opened in a way that blocks
        {"fifo_data_text", "--data " BAD "/fifo.txt", "not a regular file (a FIFO)", 1},
        {"fifo_data_shard", "--data " BAD "/fifo.bin", "not a regular file (a FIFO)", 1},
        {"fifo_data_glob", "--data '" BAD "/fifo_g*.bin'", "not a regular file (a FIFO)", 1},
        {"fifo_val_data", "--val-data " BAD "/fifo.bin", "not a regular file (a FIFO)", 1},
        {"fifo_tokenizer", "--tokenizer " BAD "/fifo.tok", "not a regular file (a FIFO)", 1},
        {"fifo_resume", "--resume " BAD "/fifo.ckpt", "not a regular file (a FIFO)", 1},
        {"fifo_latest", "--resume auto --ckpt-dir " BAD "/ck_fifo_latest", "not a regular file (a FIFO)", 1},
        {"fifo_import_llmc", "--import-llmc " BAD "/fifo.llmc", "not a regular file (a FIFO)", 1},
        {"dir_resume", "--resume " BAD "/a_dir.txt", "not a regular file (a directory)", 1},
        {"device_tokenizer", "--tokenizer /dev/zero", "not a regular file (a character device)", 1},
        // every value that enters the model: token ids against the vocabulary (the built-in
        // corpus too), llm.c weights and checkpoint state finite, AdamW v >= 0
        {"vocab_below_builtin_corpus", "--steps 3 --vocab 2", "needs vocab >= 256", 1},
        {"vocab_below_val_shard", "--val-data " BAD "/shard_token_range.bin", "token id 300", 1},
        {"import_llmc_nan", "--steps 1 --import-llmc " BAD "/llmc_nan.bin", "llmc_nan.bin: parameters of tensor wte: non-finite", 1},
        {"import_llmc_inf", "--steps 0 --import-llmc " BAD "/llmc_inf.bin --export-llmc " BAD "/llmc_out.bin", "llmc_inf.bin: parameters", 1},
        {"ckpt_negative_adam_v", "--resume " BAD "/ck_negative_v/ckpt.bin", "adam v of tensor", 1},
        {"flag_eps_zero", "--eps 0", "--eps must be in", 1},
        {"tokens_per_rank_past_int", "--seq-len 1048576 --micro-batch 2048 --global-batch 2048", "tokens per data-parallel rank", 1},
        {"nan_names_its_step", "--steps 3 --resume " BAD "/ck_huge_qkvw/ckpt.bin", "step 2: loss", 1},
        // a path past PATH_MAX is refused at start-up, not cut
        {"ckpt_dir_past_path_max", too_long_args, "--ckpt-dir", 1},
        // outputs, checked at start-up (--steps 1000000 would run for hours past a late
        // check), never replacing what is not a regular file, never an input, never each other
        {"ckpt_dir_missing_parent", "--steps 1000000 --ckpt-dir " BAD "/no/such/parent", "--ckpt-dir", 1},
        {"trace_in_proc", "--steps 1000000 --trace /proc/self/trace.json", "--trace", 1},
        {"trace_onto_dir", "--steps 1000000 --trace " BAD "/a_dir.txt", "exists and is a directory", 1},
        {"log_onto_full_device", "--steps 1000000 --log /dev/full", "exists and is a character device", 1},
        {"trace_is_the_log", "--steps 1000000 --log " BAD "/same.json --trace " BAD "/same.json", "the same file as --log", 1},
        {"trace_in_ckpt_dir_names", "--steps 1000000 --ckpt-dir " BAD "/ck_names --trace " BAD "/ck_names/LATEST", "a name --ckpt-dir", 1},
        // ranks started with other settings (MPMD) refuse at start-up, naming the setting
        {"ranks_disagree_width", "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 {train} --d-model 64 : -np 1 {train} --d-model 128",
         "ranks disagree on --d-model: rank 0 has 64, rank 1 has 128", 1},
        {"ranks_disagree_lr", "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 {train} --lr 0.01 : -np 1 {train} --lr 0.02",
         "ranks disagree on --lr: rank 0 has 0.01, rank 1 has 0.02", 1},
        // an existing path is one file whatever its name holds; a glob of text files is text
        {"data_name_with_brackets", "--steps 1 --data '" BAD "/notes[1].txt'", "notes[1].txt", 0},
        {"data_glob_of_text", "--steps 1 --data '" BAD "/globtext_*.txt'", "globtext_*.txt", 0},
        {"data_glob_of_both_kinds", "--steps 1 --data '" BAD "/mixed_*'", "matches both .bin shards and text files", 1},
        // the tokenizer against the model's vocabulary; what reaches the terminal is escaped
        {"tok_other_vocab", "--tokenizer " BAD "/tok_ok.bin", "its vocab is 300 but the model's is 257", 1},
        {"tok_pieces_escaped", "--steps 1 --sample-len 60 --tokenizer " BAD "/tok_escapes.bin", "\\x1b[2J", 0},
        {"byte_sample_escaped", "--steps 1 --sample-len 60", "sample:", 0},
        {"error_line_escaped", "--data \"$(printf '" BAD "/\\033[31mred\\nline.txt')\"", "\\x1b[31mred\\x0aline.txt", 1},
    };
    // cases that need files made first, or a look at them after
#define FIFO_AT(path) "rm -f " path " && mkfifo " path
    BadRun runs[] = {
        // --on-nan skip: a run whose every step is skipped saves nothing, so the good
        // checkpoint it resumed beside stays (and LATEST names it), and it exits 1: nothing trained
        {{"on_nan_skip_keeps_good_checkpoint", "--on-nan skip --steps 4 --ckpt-every 1 --ckpt-keep 1 --ckpt-dir " BAD "/skip_dir --resume "
          BAD "/ck_huge_qkvw/ckpt.bin", "every one of the 3 steps was skipped", 1},
         "rm -rf " BAD "/skip_dir && mkdir " BAD "/skip_dir && cp " BAD "/good/ckpt_00000001.bin " BAD "/good/LATEST " BAD "/skip_dir",
         "test -f " BAD "/skip_dir/ckpt_00000001.bin && grep -qx ckpt_00000001.bin " BAD "/skip_dir/LATEST && ! ls " BAD "/skip_dir/ckpt_0000000[234].bin"},
        // --resume auto without a manifest: past a newest file cut short, to the newest complete one
        {{"resume_auto_passes_truncated", "--steps 2 --resume auto --ckpt-dir " BAD "/ck_fallback",
          "resumed from " BAD "/ck_fallback/ckpt_00000001.bin", 0},
         "rm -rf " BAD "/ck_fallback && mkdir " BAD "/ck_fallback && cp " BAD "/good/ckpt_00000001.bin " BAD "/ck_fallback && head -c 5000 "
         BAD "/good/ckpt_00000001.bin > " BAD "/ck_fallback/ckpt_00000002.bin", NULL},
        // rotation deletes only what this run wrote: resumed from 2 of an older run's 1..6 with
        // --ckpt-keep 2, its own 3 and 4 stay (and the older 5, 6), LATEST names 4, auto resumes it
        {{"rotation_keeps_this_runs_newest", "--steps 4 --lr 1e-3 --ckpt-every 1 --ckpt-keep 2 --ckpt-dir " BAD "/rot --resume " BAD
          "/rot/ckpt_00000002.bin", "ckpt_00000004.bin (step 4)", 0},
         "rm -rf " BAD "/rot && OMP_NUM_THREADS=1 ./train " FLAGS " --steps 6 --ckpt-every 1 --ckpt-keep 10 --ckpt-dir " BAD "/rot",
         "(cd " BAD "/rot && ls ckpt_0000000[2-6].bin && grep -qx ckpt_00000004.bin LATEST) && OMP_NUM_THREADS=1 ./train " FLAGS
         " --steps 5 --ckpt-dir " BAD "/rot --resume auto | grep -q 'resumed from " BAD "/rot/ckpt_00000004.bin'"},
        // ... and never the checkpoint it resumed from or junk of higher steps (garbage, a damaged
        // copy); without LATEST, --resume auto passes over both to this run's newest
        {{"rotation_spares_resumed_and_junk", "--steps 4 --ckpt-every 1 --ckpt-keep 1 --ckpt-dir " BAD "/rot_junk --resume " BAD
          "/rot_junk/ckpt_00000001.bin", "ckpt_00000004.bin (step 4)", 0},
         "rm -rf " BAD "/rot_junk && mkdir " BAD "/rot_junk && (cd " BAD "/rot_junk && cp ../good/ckpt_00000001.bin . && head -c 5000 "
         "/dev/urandom > ckpt_00000099.bin && cp ckpt_00000001.bin ckpt_00000050.bin && printf x | dd of=ckpt_00000050.bin bs=1 seek=2000 "
         "conv=notrunc)",
         "(cd " BAD "/rot_junk && ls ckpt_00000001.bin ckpt_00000004.bin ckpt_00000050.bin ckpt_00000099.bin && ! ls ckpt_0000000[23].bin && "
         "grep -qx ckpt_00000004.bin LATEST && rm LATEST) && OMP_NUM_THREADS=1 ./train " FLAGS " --steps 5 --ckpt-dir " BAD
         "/rot_junk --resume auto | grep -q 'resumed from " BAD "/rot_junk/ckpt_00000004.bin'"},
        // the JSON log is JSON when a value is not finite: null, never nan or inf
        {{"json_log_nonfinite_as_null", "--on-nan skip --lr 10 --warmup 1 --grad-clip 0 --beta2 0 --steps 8 --log " BAD "/nan_log.jsonl",
          "skipped:", 0}, NULL, "grep -q null " BAD "/nan_log.jsonl && ! grep -Eq ':[-+]?(nan|inf)' " BAD "/nan_log.jsonl"},
        // long paths are whole: every file where its name says
        {{"ckpt_dir_1028_chars", long_ckpt_args, "ckpt_00000002.bin (step 2)", 0}, NULL, long_ckpt_check},
        {{"log_599_chars_with_rank_logs", log599_args, "measured:", 0}, NULL, log599_check},
        // outputs at start-up: what is not a regular file is never replaced, an input never overwritten
        {{"trace_onto_fifo", "--steps 1000000 --trace " BAD "/out_fifo", "exists and is a FIFO", 1}, FIFO_AT(BAD "/out_fifo"), "test -p " BAD "/out_fifo"},
        {{"export_onto_fifo", "--steps 1000000 --export-llmc " BAD "/out_fifo", "exists and is a FIFO", 1}, FIFO_AT(BAD "/out_fifo"),
         "test -p " BAD "/out_fifo"},
        {{"export_onto_symlink", "--steps 1000000 --export-llmc " BAD "/out_link", "exists and is a symbolic link", 1}, "ln -sfn a_file " BAD "/out_link",
         "test -L " BAD "/out_link"},
        {{"log_onto_fifo", "--steps 1000000 --log " BAD "/out_fifo", "exists and is a FIFO", 1}, FIFO_AT(BAD "/out_fifo"), "test -p " BAD "/out_fifo"},
        {{"ckpt_dir_fifo_latest", "--steps 1000000 --ckpt-dir " BAD "/ck_fifo_out", "LATEST: exists and is a FIFO", 1},
         "mkdir -p " BAD "/ck_fifo_out && " FIFO_AT(BAD "/ck_fifo_out/LATEST"), "test -p " BAD "/ck_fifo_out/LATEST"},
        {{"ckpt_dir_dir_at_ckpt_name", "--steps 1000000 --ckpt-every 1 --ckpt-dir " BAD "/ck_dir_out", "/ck_dir_out/ckpt_00000001.bin is a directory", 1},
         "mkdir -p " BAD "/ck_dir_out/ckpt_00000001.bin", "test -d " BAD "/ck_dir_out/ckpt_00000001.bin"},
        {{"log_is_the_data", "--steps 1000000 --data " BAD "/text_copy.txt --log " BAD "/text_copy.txt", "is a file this run reads", 1},
         "cp " BAD "/text_ok.txt " BAD "/text_copy.txt", "cmp -s " BAD "/text_ok.txt " BAD "/text_copy.txt"},
        // every write of a log, trace or checkpoint is checked: a file-size limit makes one
        // fail mid-run, as a full disk would (PMIx's shared-memory store would not start under
        // the limit: PMIX_MCA_gds=hash keeps it in memory; sh's ulimit -f counts 512-byte
        // blocks, and the run's own output must fit under it)
#define FILE_LIMIT_KB(n) "export PMIX_MCA_gds=hash; trap '' XFSZ; ulimit -f " #n
        {{"log_write_fails", "--steps 40 --global-batch 8 --log " BAD "/big_log.jsonl", "--log " BAD "/big_log.jsonl: write failed", 1}, FILE_LIMIT_KB(8), NULL},
        {{"trace_write_fails", "--steps 3 --micro-batch 1 --trace " BAD "/big_trace.json", "--trace: write to " BAD "/big_trace.json.tmp.", 1},
         FILE_LIMIT_KB(8), "! test -e " BAD "/big_trace.json"},
        {{"ckpt_write_fails", "--steps 2 --ckpt-dir " BAD "/ck_small", "checkpoint: write to", 1}, "rm -rf " BAD "/ck_small; " FILE_LIMIT_KB(64),
         "! ls " BAD "/ck_small/ckpt_*.bin"},
    };
#undef FIFO_AT
#undef FILE_LIMIT_KB
    int n = sizeof(cases) / sizeof(cases[0]), n_runs = sizeof(runs) / sizeof(runs[0]);
    double t0 = now_s();
    for (int i = 0; i < n; i++) bad_run("./train", &cases[i], NULL, NULL);
    for (int i = 0; i < n_runs; i++) bad_run("./train", &runs[i].k, runs[i].setup, runs[i].check);
    ckpt_dir_lock_test("./train");
    nompi_build();
    printf("(bad inputs through ./train: %d cases, %.1f s)\n", n + n_runs + 2, now_s() - t0);
    if (!build_asan()) { check(0, "asan_build", "mpicc -fsanitize=address,undefined failed (see " ROOT "/asan_build.txt)"); return; }
    t0 = now_s();
    for (int i = 0; i < n; i++) bad_run("./train_asan", &cases[i], NULL, NULL);
    for (int i = 0; i < n_runs; i++) bad_run("./train_asan", &runs[i].k, runs[i].setup, runs[i].check);
    ckpt_dir_lock_test("./train_asan");
    // and a clean run under the sanitizers: train a step, checkpoint, resume 1 more
    char out[300];
    snprintf(out, sizeof(out), BAD "/asan_clean.txt");
    snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 ./train_asan " FLAGS " --steps 1 --ckpt-dir " BAD
             "/asan_ck && ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 ./train_asan " FLAGS " --steps 2 --ckpt-dir " BAD
             "/asan_ck --resume auto");
    rc = run_to_file(cmd, out);
    int clean = !file_has(out, "Sanitizer") && !file_has(out, "runtime error:");
    check(rc == 0 && clean, "asan_clean_train_and_resume", "exit %d, %s", rc, clean ? "no sanitizer report" : "SANITIZER REPORT in " BAD "/asan_clean.txt");
    printf("(bad inputs through ./train_asan: %d cases, %.1f s)\n", n + n_runs + 1, now_s() - t0);
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    // ./test_faults [PART...]: parts kill, signal, reshard, rank, bad (default: all)
    int want[5] = {argc == 1, argc == 1, argc == 1, argc == 1, argc == 1};
    static const char* parts[5] = {"kill", "signal", "reshard", "rank", "bad"};
    for (int i = 1; i < argc; i++)
        for (int p = 0; p < 5; p++) if (!strcmp(argv[i], parts[p])) want[p] = 1;
    signal(SIGPIPE, SIG_IGN);
    if (sh("mkdir -p " ROOT)) return 1;
    if (file_size("train") < 0) { printf("FAIL setup: ./train not found (make train)\n0 passed, 1 failed\n"); return 1; }
    double t_all = now_s(), t0;
    // the reference runs are needed by every part but "bad"
    if (want[0] || want[1] || want[2] || want[3]) {
        t0 = now_s();
        if (want[0]) suite_sigkill();
        else reference("ref_gpt2_1rank", "", &ref);
        printf("(kill: %.1f s)\n", now_s() - t0);
    }
    if (want[1] && ref.n) {
        t0 = now_s();
        signal_1rank(SIGTERM, "sigterm");
        signal_1rank(SIGINT, "sigint");
        signal_ranks("sigterm_launcher_tp2_pp2", "--tp 2 --pp 2", SIGTERM, 0);
        signal_ranks("sigterm_one_rank_tp2_pp2", "--tp 2 --pp 2", SIGTERM, 1);
        signal_ranks("sigint_launcher_tp2", "--tp 2", SIGINT, 0);
        // at start-up, before mpirun has started the ranks: the launcher passes the stop on again until it ends
        stop_in_loop("sigterm_launcher_at_startup_tp2", "--tp 2 --steps 1000", NULL, 0.2, SIGTERM, "stopped by signal 15");
        stop_in_loop("sigterm_in_final_sample", "--steps 1 --sample-len 1000000", "sample:", 0, SIGTERM, "stopped by signal during the sample");
        stop_in_loop("sigint_in_evaluation", "--steps 3 --eval-every 1 --val-batches 1000000 --ckpt-dir " ROOT "/sigint_in_evaluation",
                     "\"step\":1,", 0, SIGINT, "stopped by signal after step 1");
        // a text file of 192 MiB: a second or more to read (and 768 MiB of tokens per rank)
        const char* big = ROOT "/big.txt";
        sh("test -s %s || head -c 201326592 /dev/zero | tr '\\000' 'a' > %s", big, big);
        char args[512];
        snprintf(args, sizeof(args), "--steps 1000 --data %s", big);
        stop_in_loop("sigterm_while_reading_data", args, NULL, 0.3, SIGTERM, "stopped by signal");
        watchdog_not_in_startup(big);
        printf("(signal: %.1f s)\n", now_s() - t0);
    }
    if (want[2] && ref.n) {
        t0 = now_s();
        const char* rd = ROOT "/ref_gpt2_1rank";
        reshard("tp2pp2_to_1rank", "", &ref, rd, "--tp 2 --pp 2", "");
        reshard("dp2zero1_to_pp2", "", &ref, rd, "--dp 2 --zero 1", "--pp 2");
        reshard("pp2vpp2_to_tp2", "", &ref, rd, "--pp 2 --vpp 2", "--tp 2");
        // the V placement (stage 0 holds both ends, one wte) to the loop and back
        reshard("zbv_to_1f1b", "", &ref, rd, "--pp 2 --schedule zb-v", "--pp 2 --schedule 1f1b");
        reshard("1f1b_to_zbv", "", &ref, rd, "--pp 2 --schedule 1f1b", "--pp 2 --schedule zb-v");
        // context parallelism: a checkpoint holds whole tensors, whatever split the sequence had
        reshard("cp2_to_1rank", "", &ref, rd, "--cp 2", "");
        reshard("dp2zero1_to_cp4_2d", "", &ref, rd, "--dp 2 --zero 1", "--cp 4 --cp-kind 2d --cp-ulysses 2");
        if (reference("ref_llama_1rank", "--model llama-tiny", &ref_llama)) {
            reshard("llama_tp2sp_to_pp2vpp2", "--model llama-tiny", &ref_llama, ROOT "/ref_llama_1rank", "--tp 2 --sp", "--pp 2 --vpp 2");
            reshard("llama_cp2ulysses_zero1_to_tp2", "--model llama-tiny", &ref_llama, ROOT "/ref_llama_1rank", "--cp 2 --cp-kind ulysses --zero 1",
                    "--tp 2");
        }
        printf("(reshard: %.1f s)\n", now_s() - t0);
    }
    if (want[3] && ref.n) {
        t0 = now_s();
        rank_killed();
        rank_hung();
        printf("(rank: %.1f s)\n", now_s() - t0);
    }
    if (want[4]) {
        t0 = now_s();
        suite_bad_inputs();
        printf("(bad: %.1f s)\n", now_s() - t0);
    }
    printf("(total %.1f s)\n%d passed, %d failed\n", now_s() - t_all, n_pass, n_fail);
    return n_fail ? 1 : 0;
}
