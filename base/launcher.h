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
#ifndef LAUNCHER_H
#define LAUNCHER_H

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/common.h"

static volatile sig_atomic_t launcher_signal = 0, launcher_second = 0;
static pid_t launcher_mpirun = 0;
static void launcher_pass_on(int sig) {
    if (launcher_signal) kill(launcher_mpirun, SIGTERM), launcher_second = sig;  // the second: abort
    else kill(launcher_mpirun, sig == SIGINT ? SIGUSR1 : SIGUSR2), launcher_signal = sig;
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
    launcher_mpirun = fork();
    if (launcher_mpirun < 0) fail("cannot start mpirun: fork: %s", strerror(errno));
    if (launcher_mpirun == 0) {
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
    setpgid(launcher_mpirun, launcher_mpirun);  // (the child does it too: whichever runs first)
    signal(SIGINT, launcher_pass_on);
    signal(SIGTERM, launcher_pass_on);
    signal(SIGHUP, launcher_pass_on);  // the terminal closed: a stop as SIGTERM (the ranks save), exit 129
    signal(SIGPIPE, SIG_IGN);          // our reader gone: EPIPE in relay_pump
    close(out[1]);
    Relay relay = {out[0], 0, 0};
    // Polled, not a blocking waitpid: signal() restarts an interrupted wait (SA_RESTART), so a
    // stop that came while blocked there was passed on once and never again; a stop before
    // mpirun had started the ranks was then lost and the job ran on. After a stop it is passed
    // on again each second until mpirun ends, so ranks it had not started yet get it too.
    int status = 0, open_out = 1;
    for (double sent = -1;;) {
        pid_t w = waitpid(launcher_mpirun, &status, WNOHANG);
        if (w == launcher_mpirun) break;
        if (w < 0 && errno != EINTR) fail("waiting for mpirun: %s", strerror(errno));
        if (open_out) open_out = relay_pump(&relay, 100) != 1;
        else usleep(100000);
        int stop = launcher_signal == SIGINT ? SIGUSR1 : launcher_signal ? SIGUSR2 : relay.gone ? SIGALRM : 0;
        if (!stop) continue;
        if (sent < 0 && launcher_signal) sent = now_s();  // the handler sent the first
        else if (sent < 0 || now_s() - sent >= 1) kill(launcher_mpirun, stop), sent = now_s();
    }
    fcntl(relay.fd, F_SETFL, O_NONBLOCK);  // what mpirun wrote last, without waiting on a process it left behind
    while (open_out && relay_pump(&relay, 0) == 0) {}
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    // (128 + SIGALRM: mpirun itself, done forwarding as its ranks ended, taken by the resend)
    if (relay.gone && !launcher_signal && (code == 0 || code == 128 + SIGPIPE || code == 128 + SIGALRM))
        exit(128 + SIGPIPE);
    if (relay.err) {
        print_error("standard output: write failed: %s", strerror(relay.err));
        code = code ? code : 1;
    }
    if (launcher_second) {  // (the ranks' own line: ckpt.h ckpt_stop_now)
        fprintf(stderr, "stopped by a second signal %d: the %d ranks ended at once, without saving (the checkpoints "
                "on disk are as they were; mpirun exit %d)\n", (int)launcher_second, world, code);
        code = 128 + launcher_second;
    } else if (launcher_signal) {
        fprintf(stderr, "stopped by signal %d: passed on to the %d ranks (mpirun exit %d)\n", (int)launcher_signal,
                world, code);
        code = 128 + launcher_signal;
    } else if (code > 1) {  // 1: a rank said why in its error line; past it a rank died without a word
        fprintf(stderr, "launcher: a rank of the %d ended with %s %d (mpirun exit %d)\n", world,
                code > 128 ? "signal" : "exit code", code > 128 ? code - 128 : code, code);
    }
    exit(code);
}

#endif
