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
static void watchdog_kick(void) { watchdog_last = now_s(); }
static void* watchdog_main(void* arg) {
    int rank = *(int*)arg;
    for (;;) {
        sleep(1);
        double idle = now_s() - watchdog_last;
        if (idle > watchdog_timeout) {
            fprintf(stderr,
                    "error: [rank %d] no progress for %.0f s (--timeout-s %.0f): a peer rank died or hangs; exiting\n",
                    rank, idle, watchdog_timeout);
            fflush(stderr);
            _exit(3);
        }
    }
    return NULL;
}
static void watchdog_start(double timeout_s, int rank) {
    static int r;
    r = rank;
    watchdog_timeout = timeout_s;
    watchdog_kick();
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog_main, &r) == 0) pthread_detach(th);
}

#endif
