// base/watchdog.h: the watchdog thread (--timeout-s). Shared by the CPU and GPU builds.
//
// Every communication that completes, and every step, marks progress (watchdog_kick). If
// none is seen for the timeout (a peer died, or hangs, and this rank waits in a collective
// forever), the rank says so and exits non-zero; the launcher (mpirun, srun) then ends the
// other ranks, so a broken job always ends in bounded time.
//
// Armed from the first collective (runtime/run.h: right after MPI_Init, before the ranks compare
// their settings), so a rank stopped or killed during start-up ends the job too. Start-up has
// phases of this rank's own work that may take long (reading the data, the --packing plan, a
// checkpoint or an import): the clock stops for them (watchdog_pause), and the wait for the
// other ranks that follows (watchdog_resume) may last the phase's own length on top of the
// timeout: every rank does the same work there, and a peer slower at it by more than that, plus
// --timeout-s, is stalled. The line names the phase this rank waits after.
#ifndef WATCHDOG_H
#define WATCHDOG_H

#include <pthread.h>
#include <unistd.h>
#include "base/common.h"

static volatile double watchdog_last = 0;
static volatile double watchdog_grace = 0;  // the last paused phase's length, until the next progress
static double watchdog_timeout = 0, watchdog_paused_at = 0;
// What the rank is doing while it may wait on its peers without marking progress (set through
// start-up, NULL in the steps): said in the line, with what to check.
static const char* volatile watchdog_phase = NULL;
static volatile int watchdog_on = 0;  // armed (watchdog_start), paused (watchdog_pause)
static void watchdog_kick(void) { watchdog_last = now_s(), watchdog_grace = 0; }
static void* watchdog_main(void* arg) {
    int rank = *(int*)arg;
    for (;;) {
        sleep(1);
        // rank r waits r s more (at most 8): the lowest rank that waits says it, and mpirun ends the
        // others before they repeat it
        double idle = now_s() - watchdog_last, grace = watchdog_grace, later = rank < 8 ? rank : 8;
        if (watchdog_on && idle > watchdog_timeout + grace + later) {
            const char* phase = watchdog_phase;
            char extra[96] = "";
            if (grace) snprintf(extra, sizeof(extra), " + %.0f s, the length of that phase here", grace);
            if (phase)
                fprintf(stderr, "error: [rank %d] no progress for %.0f s (--timeout-s %.0f%s) %s; exiting\n", rank,
                        idle, watchdog_timeout, extra, phase);
            else
                fprintf(stderr,
                        "error: [rank %d] no progress for %.0f s (--timeout-s %.0f): a peer rank died or hangs; "
                        "exiting\n", rank, idle, watchdog_timeout);
            fflush(stderr);
            _exit(3);
        }
    }
    return NULL;
}
// Armed (the thread starts on the first call, which sets the timeout and the rank).
static void watchdog_start(double timeout_s, int rank) {
    static int r, started;
    watchdog_kick();
    watchdog_on = 1;
    if (started++) return;
    r = rank;
    watchdog_timeout = timeout_s;
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog_main, &r) == 0) pthread_detach(th);
}
// Progress: this rank goes on to `phase` (start-up's next part; NULL: the steps), which its line names.
static void watchdog_at(const char* phase) {
    watchdog_phase = phase;
    watchdog_kick();
}
// A start-up phase of this rank's own work that may take long: the clock stops (one rank: no-op).
static void watchdog_pause(void) {
    if (!watchdog_timeout) return;
    watchdog_on = 0;
    watchdog_paused_at = now_s();
}
// Its end: the wait for the other ranks after it (what the line then says: `phase`) is timed
// from now, with the phase's length as grace.
static void watchdog_resume(const char* phase) {
    if (!watchdog_timeout) return;
    watchdog_phase = phase;
    watchdog_kick();
    watchdog_grace = now_s() - watchdog_paused_at;
    watchdog_on = 1;
}

#endif
