// parallel/launcher.h: the self-launcher. Shared by the CPU and GPU builds.
//
// `./train --tp 4 --pp 2` run by hand re-executes itself under Open MPI's mpirun with the
// right number of ranks. Under mpirun/srun the given world is used.
#ifndef LAUNCHER_H
#define LAUNCHER_H

#include <stdlib.h>
#include <unistd.h>
#include "runtime/common.h"

static int under_launcher(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_PROCID") ||
           getenv("TRAIN_LAUNCHED");
}

static void relaunch_under_mpirun(int world, int argc, char** argv) {
    char np[24], threads[24];
    snprintf(np, sizeof(np), "%d", world);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(threads, sizeof(threads), "%ld", cores / world > 1 ? cores / world : 1);
    // share the cores among the ranks unless told otherwise; threads that wait for a busy
    // core should sleep, not spin
    if (!getenv("OMP_NUM_THREADS") || !*getenv("OMP_NUM_THREADS")) setenv("OMP_NUM_THREADS", threads, 1);
    if (!getenv("OMP_WAIT_POLICY")) setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("TRAIN_LAUNCHED", "1", 1);
    char** args = (char**)xcalloc(argc + 20, sizeof(char*));
    int n = 0;
    args[n++] = (char*)"mpirun";
    args[n++] = (char*)"-np"; args[n++] = np;
    args[n++] = (char*)"--oversubscribe";
    args[n++] = (char*)"--bind-to"; args[n++] = (char*)"none";
    if (geteuid() == 0) args[n++] = (char*)"--allow-run-as-root";
    args[n++] = (char*)"-x"; args[n++] = (char*)"OMP_NUM_THREADS";
    args[n++] = (char*)"-x"; args[n++] = (char*)"OMP_WAIT_POLICY";
    args[n++] = (char*)"-x"; args[n++] = (char*)"TRAIN_LAUNCHED";
    for (int i = 0; i < argc; i++) args[n++] = argv[i];
    fflush(stdout);
    execvp("mpirun", args);
    fail("world of %d ranks needs Open MPI's mpirun, which was not found on PATH (install: apt-get install openmpi-bin libopenmpi-dev)", world);
}

#endif
