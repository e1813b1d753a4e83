// base/launcher.h: the self-launcher. Shared by the CPU and GPU builds.
//
// `./train --tp 4 --pp 2` run by hand re-executes itself under Open MPI's mpirun with the
// right number of ranks. Under mpirun/srun the given world is used.
//
// Stopping (Ctrl-C, SIGTERM from a scheduler): the launcher stays mpirun's parent, and mpirun
// runs in a process group of its own, so the terminal's Ctrl-C reaches the launcher alone. A
// SIGINT or SIGTERM that reached mpirun itself would abort the job and kill the ranks mid-step;
// instead the launcher passes the stop on as SIGUSR1 (for SIGINT) or SIGUSR2 (for SIGTERM),
// which mpirun forwards to every rank, and the ranks take them as the signals they stand for
// (ckpt.h): finish the step, save, exit 130 / 143. The launcher then says so and exits with
// the same code, as a one-rank run does (SIGHUP goes on as SIGTERM). A second signal aborts the
// job (SIGTERM to mpirun: the ranks' second stop, ckpt.h, exit at once without saving).
// mpirun reads no input (--stdin none: a background process group must not read the
// terminal), and ends its job when the launcher dies (PR_SET_PDEATHSIG), kill -9 included.
// mpirun's standard output comes through the launcher (a pipe it relays), so a reader that goes
// away (./train --tp 2 | grep -q step) is the launcher's EPIPE, not mpirun's (which aborted the
// job mid-step with "mpirun: SIGPIPE detected"): the launcher passes it on as SIGALRM, which
// mpirun forwards and the ranks take as a closed stdout (ckpt.h: save, stop, no word), keeps
// draining mpirun's output, and exits 141 quietly, as a one-rank run does.
// A stop goes to mpirun only when mpirun catches that signal (forwards it); one it does not catch
// (Open MPI told to forward none, mpirun starting or ending) would kill it and leave the ranks
// running, so it goes to the ranks directly. And the launcher outlives every process it started:
// it is the subreaper of mpirun's tree (PR_SET_CHILD_SUBREAPER), so the ranks of an mpirun that
// ended before them (kill -9, a crash) become its children; it passes them the stop in force (none
// asked: one as SIGTERM, with no mpirun left to relay their output or end the job; Open MPI aborts
// them within seconds of their mpirun's end, 1-2.5 s measured: a checkpoint then being written is
// abandoned, the last complete one stays) and returns after the last of them. Before, it returned at once and
// `./train --tp 2 | grep -q step` was back while the ranks still trained and saved (dev/RESULTS.md,
// 2026-12-05). What else the tree left (a helper mpirun daemonised, a rank's own child) is stopped once the
// ranks are gone, then killed, then left (launcher_stop_left): the launcher no longer waits on it for ever.
#ifndef LAUNCHER_H
#define LAUNCHER_H

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/common.h"

static volatile sig_atomic_t launcher_signal = 0, launcher_second = 0;
static void launcher_pass_on(int sig) {  // recorded: launcher_wait passes it on (the poll or sleep it cuts short)
    if (launcher_signal) launcher_second = sig;
    else launcher_signal = sig;
}

// mpirun's stdout, relayed to ours. Waits up to timeout_ms for output and copies what came:
// returns 0 when it copied some, -1 when none came, 1 at the pipe's end. After our reader has
// gone (EPIPE: gone set) what comes is read and dropped; another write error is kept in err.
typedef struct { int fd, gone, err; } Relay;
static int relay_pump(Relay* r, int timeout_ms) {
    struct pollfd p = {r->fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return -1;
    char buf[65536];
    ssize_t n = read(r->fd, buf, sizeof(buf)), w;
    if (n < 0) return errno == EINTR || errno == EAGAIN ? -1 : 1;
    if (n == 0) return 1;
    for (ssize_t at = 0; at < n && !r->gone && !r->err; at += w > 0 ? w : 0)
        if ((w = write(STDOUT_FILENO, buf + at, n - at)) < 0 && errno != EINTR) {
            if (errno == EPIPE) r->gone = 1;
            else r->err = errno;
        }
    return 0;
}

// The stop to pass on now, or 0: after a second signal SIGTERM (mpirun aborts the job, the ranks take it as
// their second stop), else the stand-in of the signal the launcher got (ckpt.h), else SIGALRM once our reader
// has gone.
static int launcher_stop(const Relay* r) {
    if (launcher_second) return SIGTERM;
    return launcher_signal == SIGINT ? SIGUSR1 : launcher_signal ? SIGUSR2 : r->gone ? SIGALRM : 0;
}

// The ranks: the processes mpirun started (its children: the self-launcher's mpirun runs on this machine alone and
// starts no daemon), each by process id and start time (a pid the kernel gives out again is another process),
// recorded while mpirun runs (launcher_ranks_record, each poll); once mpirun has ended, those still running are
// the launcher's children (its subreaper). They were the children running this program file (/proc/PID/exe
// against the launcher's own): the ranks of a ./train rebuilt before mpirun started them were not ranks, a stop was
// not passed to them and an ended mpirun's ranks were stopped late as what else it left, with that line.
typedef struct {
    pid_t pid;
    unsigned long long start;
    double stopped_since;  // when it was first seen stopped (SIGSTOP) after mpirun ended; 0: not stopped, -1: killed
} RankProc;
static RankProc* launcher_ranks;
static int launcher_n_ranks;
static size_t launcher_ranks_cap;

// Process pid's start time (/proc/PID/stat's 22nd field, clock ticks after boot); 0 when it has ended (gone, or a
// zombie not yet reaped). *state (may be NULL): its state letter (T: stopped).
static unsigned long long proc_start_time(pid_t pid, char* state) {
    char path[64], stat_line[1024], letter = 0;
    unsigned long long start = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE* f = fopen(path, "r");
    size_t n = f ? fread(stat_line, 1, sizeof(stat_line) - 1, f) : 0;
    if (f) fclose(f);
    stat_line[n] = 0;
    const char* after_name = strrchr(stat_line, ')');  // the command name (field 2) may hold ')' and spaces
    if (after_name && sscanf(after_name + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                             "%*d %llu", &letter, &start) != 2)
        start = 0;
    if (state) *state = letter;
    return letter == 'Z' ? 0 : start;
}

// The children of process `parent` (of each of its threads: /proc/PID/task/TID/children, Linux 3.5) into *pids
// (grown as needed, *cap its capacity); returns how many.
static int proc_children(pid_t parent, pid_t** pids, size_t* cap) {
    char path[320];
    struct dirent* task;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)parent);
    DIR* tasks = opendir(path);
    int n = 0, pid;
    while (tasks && (task = readdir(tasks))) {
        if (task->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)parent, task->d_name);
        FILE* f = fopen(path, "r");
        while (f && fscanf(f, "%d", &pid) == 1) {
            *pids = (pid_t*)xgrow(*pids, sizeof(pid_t), (size_t)n + 1, cap, "listing processes");
            (*pids)[n++] = pid;
        }
        if (f) fclose(f);
    }
    if (tasks) closedir(tasks);
    return n;
}

// Whether process pid, started at `start`, is a rank.
static int launcher_is_rank(pid_t pid, unsigned long long start) {
    for (int i = 0; i < launcher_n_ranks; i++)
        if (launcher_ranks[i].pid == pid && launcher_ranks[i].start == start) return 1;
    return 0;
}

// mpirun's children not yet recorded become ranks, but those still running mpirun's program (forked, not yet
// executed: their exe is mpirun's).
static void launcher_ranks_record(pid_t mpirun) {
    static pid_t* children;
    static size_t children_cap;
    char path[64];
    struct stat launcher_of, exe;
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)mpirun);
    if (stat(path, &launcher_of)) return;  // (mpirun has ended)
    for (int i = 0, n = proc_children(mpirun, &children, &children_cap); i < n; i++) {
        unsigned long long start = proc_start_time(children[i], NULL);
        snprintf(path, sizeof(path), "/proc/%d/exe", (int)children[i]);
        if (!start || launcher_is_rank(children[i], start) || stat(path, &exe) ||
            (exe.st_dev == launcher_of.st_dev && exe.st_ino == launcher_of.st_ino))
            continue;
        launcher_ranks = (RankProc*)xgrow(launcher_ranks, sizeof(RankProc), (size_t)launcher_n_ranks + 1,
                                          &launcher_ranks_cap, "recording the ranks");
        launcher_ranks[launcher_n_ranks++] = (RankProc){children[i], start, 0};
    }
}

// `sig` (0: none) to each running child of process `parent` that is a rank (ranks 1: mpirun's ranks, or those an
// ended mpirun left to the launcher) or that is not (ranks 0: what else an ended mpirun left). Returns how many;
// `names`, when given, gets the first few as "PID COMMAND, ...".
static int launcher_signal_children(pid_t parent, int ranks, int sig, char* names, size_t cap) {
    static pid_t* children;
    static size_t children_cap;
    char path[64], comm[64];
    int n = 0;
    size_t at = 0;
    if (names && cap) names[0] = 0;
    for (int i = 0, n_children = proc_children(parent, &children, &children_cap); i < n_children; i++) {
        pid_t pid = children[i];
        unsigned long long start = proc_start_time(pid, NULL);
        if (!start || launcher_is_rank(pid, start) != ranks) continue;
        if (n++ < 4 && names && at < cap) {  // COMMAND: /proc/PID/comm, its newline dropped
            snprintf(path, sizeof(path), "/proc/%d/comm", pid);
            FILE* c = fopen(path, "r");
            if (!c || !fgets(comm, sizeof(comm), c)) snprintf(comm, sizeof(comm), "?");
            if (c) fclose(c);
            comm[strcspn(comm, "\n")] = 0;
            at += snprintf(names + at, cap - at, "%s%d %s", at ? ", " : "", pid, comm);
        }
        if (sig) kill(pid, sig);
    }
    return n;
}

// A stop to the job: to mpirun when it catches the signal (the SigCgt mask of /proc/PID/status): it forwards
// it to every rank (SIGTERM: aborts the job). One it does not catch (Open MPI told to forward none, mpirun
// starting or ending) would kill it and leave the ranks running: they get it directly (and the abort mpirun).
static void launcher_pass(pid_t mpirun, int stop) {
    char path[64], line[256];
    unsigned long long caught = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)mpirun);
    FILE* f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f) && sscanf(line, "SigCgt: %llx", &caught) != 1) {}
    if (f) fclose(f);
    if (caught >> (stop - 1) & 1 || stop == SIGTERM) kill(mpirun, stop);
    launcher_ranks_record(mpirun);
    if (!(caught >> (stop - 1) & 1)) launcher_signal_children(mpirun, 1, stop, NULL, 0);
}

// Whether a stop is due: a new one at once, the same again each second (a rank not yet at its handler gets it
// too), the abort (SIGTERM) once.
static int launcher_due(int stop, int last, double sent) {
    return stop && (stop != last || (stop != SIGTERM && now_s() - sent >= 1));
}

// What else an ended mpirun left (a helper it daemonised, a rank's own child) once the last rank has gone: after
// LAUNCHER_LEFT_S SIGTERM, LAUNCHER_LEFT_S later SIGKILL, one line each, and LAUNCHER_LEFT_S after that the
// launcher returns (returns 1) with what did not end (uninterruptible sleep) left unreaped, with a line. `stage`:
// what was sent (0 none, 1 SIGTERM, 2 SIGKILL).
#define LAUNCHER_LEFT_S 2
static int launcher_stop_left(int stage) {
    static const int sig[2] = {SIGTERM, SIGKILL};
    static const char* what[3] = {"still ran %d s after the last rank ended: stopping %s (SIGTERM)",
                                  "ignored SIGTERM for %d s: killing %s (SIGKILL)",
                                  "did not end %d s after SIGKILL: not waiting for %s"};
    char names[320], line[256];
    int n = launcher_signal_children(getpid(), 0, stage < 2 ? sig[stage] : 0, names, sizeof(names));
    snprintf(line, sizeof(line), what[stage], LAUNCHER_LEFT_S, n > 1 ? "them" : "it");
    if (n)
        fprintf(stderr, "launcher: %d process%s mpirun left (%s%s) %s\n", n, n > 1 ? "es" : "", names,
                n > 4 ? ", ..." : "", line);
    return stage == 2;
}

// A rank stopped (SIGSTOP) once its mpirun has ended takes no stop and no Open MPI abort, and nothing will
// continue it: the launcher waited for it for ever. One stopped for LAUNCHER_STOPPED_S is killed (SIGKILL), one line.
#define LAUNCHER_STOPPED_S (2 * LAUNCHER_LEFT_S)
static void launcher_kill_stopped(void) {
    for (int i = 0; i < launcher_n_ranks; i++) {
        RankProc* r = &launcher_ranks[i];
        char state = 0;
        if (r->stopped_since < 0) continue;
        if (proc_start_time(r->pid, &state) != r->start || state != 'T') {
            r->stopped_since = 0;
            continue;
        }
        if (!r->stopped_since) r->stopped_since = now_s();
        if (now_s() - r->stopped_since < LAUNCHER_STOPPED_S) continue;
        fprintf(stderr, "launcher: rank process %d stayed stopped (SIGSTOP) %d s after mpirun ended: killing it "
                "(SIGKILL)\n", (int)r->pid, LAUNCHER_STOPPED_S);
        kill(r->pid, SIGKILL);
        r->stopped_since = -1;
    }
}

// mpirun has ended; what of its tree still runs is the launcher's (its subreaper). The ranks among them get the
// stop in force (`unasked` when there is none) as launcher_due says, and every process left is reaped; others are
// waited for while a rank runs, then stopped (launcher_stop_left). Returns the exit code of the first that ended by
// itself with one that is not 0 (as mpirun reports its ranks), 0, or -1 when none was left.
static int launcher_reap_left(const Relay* relay, int unasked) {
    int code = -1, last = 0, stage = 0;
    double ranks_gone = 0;  // when the last rank was seen gone (0: one runs)
    for (double sent = 0;;) {
        int stop = launcher_stop(relay);
        if (!stop) stop = unasked;
        int due = launcher_due(stop, last, sent);
        int ranks = launcher_signal_children(getpid(), 1, due ? stop : 0, NULL, 0);
        if (due) last = stop, sent = now_s();
        launcher_kill_stopped();
        int status;
        pid_t w;
        while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
            int c = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (code <= 0 && !stage) code = c;
        }
        if (w < 0 && errno == ECHILD) return code;
        if (ranks) ranks_gone = 0;
        else if (!ranks_gone) ranks_gone = now_s();
        else if (now_s() - ranks_gone >= LAUNCHER_LEFT_S * (stage + 1) && launcher_stop_left(stage++)) return code;
        usleep(20000);
    }
}

static int under_launcher(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_PROCID") ||
           getenv("TRAIN_LAUNCHED");
}

// OpenMP threads that wait (for the next parallel region, at a barrier) spin on a core by
// default: libgomp spins up to 300000 rounds (about 3 ms) before it sleeps. On a machine
// other jobs keep busy the spinning threads take the cores the working ones need: one rank
// measured 7-14x slower than with OMP_WAIT_POLICY=passive (dev/RESULTS.md). libgomp reads
// the variable once, when it is loaded, before main; so a run that was not told a policy
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT unset) sets passive and re-executes itself, once (the
// variable is then set). One thread waits for nobody: OMP_NUM_THREADS=1 skips it.
// OMP_WAIT_POLICY=active brings the spinning back (a dedicated machine, many small steps).
static void wait_policy_passive(char** argv) {
    const char* threads = getenv("OMP_NUM_THREADS");
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || (threads && !strcmp(threads, "1"))) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // the exec failed: go on with libgomp's default (the start-up table says so)
}

// Relay mpirun's output and pass stops on until it ends, then wait for what it left; exit as the job did.
// Polled, not a blocking waitpid: signal() restarts an interrupted wait (SA_RESTART), so a stop that came
// while blocked there was passed on once and never again; a stop before mpirun had started the ranks was
// then lost and the job ran on. A stop the handler recorded cuts the poll short and is passed on at once,
// then again each second until mpirun ends, so ranks it had not started yet get it too.
static void launcher_wait(int world, pid_t mpirun, int mpirun_out) {
    Relay relay = {mpirun_out, 0, 0};
    int status = 0, open_out = 1, last = 0;
    for (double sent = 0;;) {
        pid_t w = waitpid(mpirun, &status, WNOHANG);
        if (w == mpirun) break;
        if (w < 0 && errno != EINTR) fail("waiting for mpirun: %s", strerror(errno));
        launcher_ranks_record(mpirun);
        if (open_out) open_out = relay_pump(&relay, 100) != 1;
        else usleep(100000);
        int stop = launcher_stop(&relay);
        if (launcher_due(stop, last, sent)) launcher_pass(mpirun, stop), last = stop, sent = now_s();
    }
    fcntl(relay.fd, F_SETFL, O_NONBLOCK);  // what mpirun wrote last, without waiting on a process it left behind
    while (open_out && relay_pump(&relay, 0) == 0) {}
    int mpirun_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), code = mpirun_code;
    int asked = launcher_signal || relay.gone, left = launcher_signal_children(getpid(), 1, 0, NULL, 0);
    if (left && !asked)
        fprintf(stderr, "launcher: mpirun ended by %s %d before its %d ranks: stopping them as by SIGTERM (they save "
                "and exit)\n", WIFEXITED(status) ? "exit code" : "signal", WIFEXITED(status) ? code : code - 128, left);
    // mpirun killed during a stop: its ranks took the stop and ended the job. (One mpirun had not reaped when it
    // exited is reaped here too: mpirun's own code covers it.)
    int left_code = launcher_reap_left(&relay, SIGUSR2);
    if (asked && left_code >= 0 && WIFSIGNALED(status)) code = left_code;
    else if (left && !code) code = left_code;  // (never 0 when ranks outlived their mpirun unasked)
    // (128 + SIGALRM: mpirun itself, taken by a resend as it ended after its ranks: launcher_pass checks, then sends)
    if (relay.gone && !launcher_signal && (code == 0 || code == 128 + SIGPIPE || code == 128 + SIGALRM))
        exit(128 + SIGPIPE);
    if (relay.err) {
        print_error("standard output: write failed: %s", strerror(relay.err));
        code = code ? code : 1;
    }
    if (launcher_second) {  // (the ranks' own line: ckpt.h ckpt_stop_now)
        fprintf(stderr, "stopped by a second signal %d: the %d ranks ended at once, without saving (the checkpoints "
                "on disk are as they were; mpirun exit %d)\n", (int)launcher_second, world, mpirun_code);
        code = 128 + launcher_second;
    } else if (launcher_signal) {
        fprintf(stderr, "stopped by signal %d: passed on to the %d ranks (mpirun exit %d)\n", (int)launcher_signal,
                world, mpirun_code);
        code = 128 + launcher_signal;
    } else if (code > 1 && !left) {  // 1: a rank said why in its error line; past it a rank died without a word
        fprintf(stderr, "launcher: a rank of the %d ended with %s %d (mpirun exit %d)\n", world,
                code > 128 ? "signal" : "exit code", code > 128 ? code - 128 : code, code);
    }
    exit(code);
}

static void relaunch_under_mpirun(int world, int argc, char** argv) {
    char np[24], threads[24];
    snprintf(np, sizeof(np), "%d", world);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(threads, sizeof(threads), "%ld", cores / world > 1 ? cores / world : 1);
    // share the cores among the ranks unless told otherwise (main set OMP_WAIT_POLICY:
    // wait_policy_passive)
    if (!getenv("OMP_NUM_THREADS") || !*getenv("OMP_NUM_THREADS")) setenv("OMP_NUM_THREADS", threads, 1);
    if (!getenv("OMP_WAIT_POLICY")) setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("TRAIN_LAUNCHED", "1", 1);
    // Under a file-size limit (ulimit -f) PMIx's shared-memory store (a file mpirun writes at start) hits it and
    // the job hung in MPI_Init; its in-memory store ("hash") writes no file. (SIGXFSZ is ignored: train_main.)
    struct rlimit fsize;
    if (!getrlimit(RLIMIT_FSIZE, &fsize) && fsize.rlim_cur != RLIM_INFINITY) setenv("PMIX_MCA_gds", "hash", 0);
    char** args = (char**)xcalloc(argc + 20, sizeof(char*));
    int n = 0;
    args[n++] = (char*)"mpirun";
    args[n++] = (char*)"-np"; args[n++] = np;
    args[n++] = (char*)"--oversubscribe";
    args[n++] = (char*)"-q";  // no banners: the ranks' own lines say what happened, and this launcher what mpirun saw
    args[n++] = (char*)"--bind-to"; args[n++] = (char*)"none";
    if (geteuid() == 0) args[n++] = (char*)"--allow-run-as-root";
    args[n++] = (char*)"-x"; args[n++] = (char*)"OMP_NUM_THREADS";
    args[n++] = (char*)"-x"; args[n++] = (char*)"OMP_WAIT_POLICY";
    args[n++] = (char*)"-x"; args[n++] = (char*)"TRAIN_LAUNCHED";
    args[n++] = (char*)"--stdin"; args[n++] = (char*)"none";
    for (int i = 0; i < argc; i++) args[n++] = argv[i];
    fflush(stdout);
    fflush(stderr);
    pid_t launcher = getpid();
    int out[2];
    if (pipe(out)) fail("cannot start mpirun: pipe: %s", strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // the ranks an ended mpirun leaves are ours (launcher_reap_left)
    pid_t mpirun = fork();
    if (mpirun < 0) fail("cannot start mpirun: fork: %s", strerror(errno));
    if (mpirun == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]), close(out[1]);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != launcher) _exit(1);  // the launcher died before prctl
        execvp("mpirun", args);
        print_error("world of %d ranks needs Open MPI's mpirun, which was not found on PATH (install: apt-get install "
                    "openmpi-bin libopenmpi-dev)", world);
        _exit(1);
    }
    setpgid(mpirun, mpirun);  // (the child does it too: whichever runs first)
    signal(SIGINT, launcher_pass_on);
    signal(SIGTERM, launcher_pass_on);
    signal(SIGHUP, launcher_pass_on);  // the terminal closed: a stop as SIGTERM (the ranks save), exit 129
    signal(SIGPIPE, SIG_IGN);          // our reader gone: EPIPE in relay_pump
    close(out[1]);
    launcher_wait(world, mpirun, out[0]);
}

#endif
