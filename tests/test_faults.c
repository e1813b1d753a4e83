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
//      a second stop during one long step exits at once without saving, the checkpoints on disk
//      untouched; a stop during the end-of-run sample, an evaluation or the reading of the data ends
//      the run at once with the same codes; the watchdog from the first collective: a peer slower at
//      start-up is waited for, one stopped there ends the job with one line naming where (one killed:
//      mpirun ends it at once).
//   3. Resharding: save under one layout, resume under another; losses within 1e-5
//      relative of the 1-rank run (the layout suite's tolerance), final parameters too.
//   4. A rank of a dp2 x tp2 x pp2 run killed with SIGKILL: the whole job is gone within
//      --timeout-s plus a margin, the launcher exits non-zero, and the last checkpoint
//      (--ckpt-every 1) resumes on one rank. And a rank stopped (SIGSTOP, a hang mpirun
//      cannot see): the others' watchdog ends the job after --timeout-s.
//   5. Bad inputs (data, flags, checkpoints, tokenizer, device file): exit 1 with exactly
//      one "error:" line naming the problem, never a signal; the cases that touch memory past
//      start-up again through ./train_asan (ASan + UBSan), which must produce no sanitizer report.
//      The rule (faults_bad_inputs.c asan_reruns): every case runs through ./train; ./train_asan
//      reruns those that name a file (a reader, a writer, a checkpoint), run to the end (exit 0)
//      or have a set-up or a check of their own, but not a command of their own around the binary
//      ("{train}": signals, pipes, mpirun, ulimit, env; what they test is the processes, and the
//      memory they reach the plain cases reach) nor a refusal that names no file (flags, layout
//      and planner checks at start-up: no reader runs, and the ./train pass asserts the line).
//      Measured at 421675f (load 8-15): the ASan pass was 509 of test_faults' 852 s; the cases
//      not rerun took 284 s of it (own commands 35 cases 245 s, refusals naming no file 147
//      cases 38 s). ./train_asan is built
//      here with mpicc when missing (or by `make train_asan`, Makefile.faults). Among them:
//      checksums (a zeroed body, one flipped bit of Adam's v, a changed step field), rotation
//      (only this run's checkpoints go; the resumed one, older runs' and junk stay), the
//      --ckpt-dir lock, sizes past the caps (world, schedule pairs, batch), the JSON log with
//      non-finite values, and the one-process build (nompi/mpi.h) compiling and training.
//
// This file holds the shared helpers and main; the suites are in tests/faults_runs.c (1-4),
// tests/faults_bad_inputs.c (5), tests/faults_files.c (5: the files a run writes, issue 39),
// tests/faults_prepare.c (5: data/prepare.py), tests/faults_polish.c (5: flags, LATEST, stdout's
// reader gone), tests/faults_variants.c (5: the same classes in new variants), tests/faults_plan_inputs.c (5: the
// planner's flags, device keys and --runs columns of issue 35), tests/faults_cli.c (5: the command line) and
// tests/faults_layout.c (5: the layout checks' order), tests/faults_audit.c (5: the trainer's inputs and outputs,
// an adversarial audit) and tests/faults_plan_hostile.c (5: the planner's inputs as a hostile user gives them, long
// --runs and searches), included into the one binary.
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
#include "data/data.h"
#include "tests/harness.h"

#define ROOT "/tmp/test_faults"
#define TOL 1e-5
#define FLAGS_RUN "--micro-batch 8 --global-batch 32 --eval-every 0 --sample-len 0 --quiet --peak-tflops 1 " \
                  "--warmup 20 --lr 2e-2 --eps 1e-4"
#define FLAGS "--model tiny " FLAGS_RUN
#define TRAIN "OMP_NUM_THREADS=1 ./train " FLAGS " "

// FLAGS but the flags args gives, then args: ./train refuses a flag given twice (a run's own value replaces the
// suite's). In a buffer of its own for each of the last 4 calls.
static const char* flags_with(const char* args) {
    static char buf[4][2048];
    static int next;
    char kept[1024], *out = buf[next++ % 4];
    snprintf(out, sizeof(buf[0]), "%s %s", flags_but(FLAGS, args, kept, sizeof(kept)), args);
    return out;
}

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
// mpirun it started (base/launcher.h).
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
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && parent_of(ppid) == parent && strstr(buf, "(train)") &&
            n < max)
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
        if (!p || !s || strstr(line, "val_loss") || !strchr(line, '\n'))
            continue;  // a line being written is not a step yet
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
        if (!exact && !(rel <= TOL)) {
            sprintf(why, "step %d loss %s vs %s (rel %.1e)", s, g->loss[s], ref->loss[s], rel);
            return 0;
        }
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
// The suites, in the files by concern; main runs them in the order above.
#include "tests/faults_runs.c"
#include "tests/faults_bad_inputs.c"
#include "tests/faults_files.c"
#include "tests/faults_prepare.c"
#include "tests/faults_polish.c"
#include "tests/faults_variants.c"
#include "tests/faults_plan_inputs.c"
#include "tests/faults_cli.c"
#include "tests/faults_layout.c"
#include "tests/faults_audit.c"
#include "tests/faults_plan_hostile.c"

// The suites of bad inputs after faults_bad_inputs.c's, each run through ./train, then ./train_asan.
static const struct { const char* name; void (*run)(const char* bin); } BAD_SUITES[] = {
    {"files", suite_files},              // issue 39's classes
    {"polish", suite_polish},            // issue 39's third round
    {"variants", suite_variants},        // issue 39's classes in new variants
    {"plan_inputs", suite_plan_inputs},  // the planner's inputs of issue 35
    {"cli", suite_cli},                  // the command line's small defects of issue 35's sixth session
    {"layout", suite_layout},            // the layout checks' order, the root cause first
    {"audit", suite_audit},              // the seventh session's audit of the trainer's inputs and outputs
    {"plan_hostile", suite_plan_hostile},  // the planner's inputs as a hostile user gives them
};

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    // ./test_faults [PART...] [WORD]: parts kill, signal, reshard, rank, bad (default: all); with bad, WORD
    // runs only the bad inputs whose names hold it (not the set-piece checks beside them)
    int want[5] = {argc == 1, argc == 1, argc == 1, argc == 1, argc == 1};
    static const char* parts[5] = {"kill", "signal", "reshard", "rank", "bad"};
    for (int i = 1; i < argc; i++) {
        int part = 0;
        for (int p = 0; p < 5; p++) if (!strcmp(argv[i], parts[p])) want[p] = 1, part = 1;
        if (!part) bad_filter = argv[i];
    }
    signal(SIGPIPE, SIG_IGN);
    if (sh("mkdir -p " ROOT)) return 1;
    if (file_size("train") < 0) {
        printf("FAIL setup: ./train not found (make train)\n0 passed, 1 failed\n");
        return 1;
    }
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
        stop_in_loop("sigterm_launcher_at_startup_tp2", "--tp 2 --steps 1000", NULL, 0.2, SIGTERM,
                     "stopped by signal 15", 1);
        // once the ranks have read the data, before step 1: nothing trained, nothing saved (it ran step 1)
        stop_before_first_step("sigterm_launcher_before_step_1_tp2", SIGTERM);
        stop_before_first_step("sigint_launcher_before_step_1_tp2", SIGINT);
        stop_in_loop("sigterm_in_final_sample", "--steps 1 --sample-len 1000000", "sample:", 0, SIGTERM,
                     "stopped by signal during the sample", -1);
        // a stop while the final weights are exported: abandoned at once, the earlier export kept (faults_audit.c)
        stop_during_export("sigterm_during_export_hf", "", "--export-hf", SIGTERM);
        stop_during_export("sigint_during_export_hf_launcher_tp2", "--tp 2", "--export-hf", SIGINT);
        stop_during_export("sigterm_during_export_llmc", "", "--export-llmc", SIGTERM);
        stop_during_init("sigterm_during_weight_init", "", SIGTERM);
        stop_during_init("sigterm_during_weight_init_launcher_tp2", "--tp 2", SIGTERM);
        stop_in_loop("sigint_in_evaluation",
                     "--steps 3 --eval-every 1 --val-batches 1000000 --ckpt-dir " ROOT "/sigint_in_evaluation",
                     "\"step\":1,", 0, SIGINT, "stopped by signal after step 1", -1);
        // a text file of 192 MiB: a second or more to read (and 768 MiB of tokens per rank)
        const char* big = ROOT "/big.txt";
        sh("test -s %s || head -c 201326592 /dev/zero | tr '\\000' 'a' > %s", big, big);
        char args[512];
        snprintf(args, sizeof(args), "--steps 1000 --data %s", big);
        stop_in_loop("sigterm_while_reading_data", args, NULL, 0.3, SIGTERM, "stopped by signal", -1);
        // the watchdog from the first collective on: a peer slower at start-up does not end the job; one stopped
        // there does, saying where (it waited for ever: the watchdog armed at the first step). A waiting rank
        // spins in MPI and takes the stopped one's core once it goes on: on 2 loaded cores a 2.5 s stop once
        // cost rank 0 a 7 s wait, so the slow peer's --timeout-s is 3 times its stop
        watchdog_at_startup("watchdog_startup_slow_peer_tp2", big, 15, 5, 0, NULL);
        watchdog_at_startup("watchdog_startup_stalled_reading_tp2", big, 3, 0, 0,
                            "at start-up, after reading the data, waiting for the other ranks");
        watchdog_at_startup("watchdog_startup_stalled_after_data_tp2", big, 3, 0, 1, "at start-up");
        watchdog_at_startup("rank_killed_at_startup_tp2", big, 60, -1, 0, NULL);
        // a second stop during one long step: at once, nothing saved, nothing on disk changed (the first waited)
        second_signal_in_long_step("second_sigterm_long_step_1rank", "", SIGTERM,
                                   "stopped by a second signal: exiting now, without saving");
        second_signal_in_long_step("second_sigint_long_step_launcher_tp2", "--tp 2", SIGINT,
                                   "stopped by a second signal 2: the 2 ranks ended at once, without saving");
        // the terminal closed: saved and stopped as by SIGTERM, exit 129 (it killed the run unsaved)
        stop_in_loop("sighup_saves", "--steps 1000 --ckpt-dir " ROOT "/sighup_saves", "\"step\":1,", 0, SIGHUP,
                     "stopped by signal after step", -1);
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
        // ZeRO-3's shards from and to whole tensors: another dp and level, each way
        reshard("dp2zero1_to_dp4zero3", "", &ref, rd, "--dp 2 --zero 1", "--dp 4 --zero 3");
        reshard("dp2zero3pp2_to_tp2", "", &ref, rd, "--dp 2 --zero 3 --pp 2", "--tp 2");
        if (reference("ref_llama_1rank", "--model llama-tiny", &ref_llama)) {
            reshard("llama_tp2sp_to_pp2vpp2", "--model llama-tiny", &ref_llama, ROOT "/ref_llama_1rank", "--tp 2 --sp",
                    "--pp 2 --vpp 2");
            reshard("llama_cp2ulysses_zero1_to_tp2", "--model llama-tiny", &ref_llama, ROOT "/ref_llama_1rank",
                    "--cp 2 --cp-kind ulysses --zero 1", "--tp 2");
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
        int asan = file_size("train_asan") >= 0;
        for (size_t i = 0; i < sizeof(BAD_SUITES) / sizeof(BAD_SUITES[0]); i++) {
            double t_suite = now_s();
            BAD_SUITES[i].run("./train");
            double t_train = now_s() - t_suite;
            if (asan) BAD_SUITES[i].run("./train_asan");
            printf("(%s: %.1f s through ./train, %.1f s through ./train_asan)\n", BAD_SUITES[i].name, t_train,
                   now_s() - t_suite - t_train);
        }
        suite_prepare();
        printf("(bad: %.1f s; %d cases not rerun through ./train_asan: their own command, or a refusal naming no "
               "file)\n", now_s() - t0, n_asan_not_rerun);
    }
    printf("(total %.1f s)\n%d passed, %d failed\n", now_s() - t_all, n_pass, n_fail);
    return n_fail ? 1 : 0;
}
