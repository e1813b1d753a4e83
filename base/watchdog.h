// base/watchdog.h: the watchdog thread (--timeout-s). Shared by the CPU and GPU builds.
//
// Every communication that completes, and every step, marks progress (watchdog_kick). If
// none is seen for the timeout (a peer died, or hangs, and this rank waits in a collective
// forever), the rank says so and exits non-zero; the launcher (mpirun, srun) then ends the
// other ranks, so a broken job always ends in bounded time.
#ifndef WATCHDOG_H
#define WATCHDOG_H

#include <pthread.h>
#include <unistd.h>
#include "base/common.h"

static volatile double watchdog_last = 0;
static double watchdog_timeout = 0;
// What the rank is doing while it may wait on its peers without marking progress (set around
// a start-up phase, NULL in the steps): said in the line, with what to check.
static const char* volatile watchdog_phase = NULL;
static volatile int watchdog_on = 0;  // armed (watchdog_start) or paused (watchdog_pause)
static void watchdog_kick(void) { watchdog_last = now_s(); }
static void* watchdog_main(void* arg) {
    int rank = *(int*)arg;
    for (;;) {
        sleep(1);
        double idle = now_s() - watchdog_last;
        if (watchdog_on && idle > watchdog_timeout) {
            const char* phase = watchdog_phase;
            if (phase)
                fprintf(stderr, "error: [rank %d] no progress for %.0f s (--timeout-s %.0f) %s; exiting\n", rank, idle,
                        watchdog_timeout, phase);
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
// Armed (the thread starts on the first call); watchdog_on = 0 pauses it for a phase it must not end.
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

#endif
