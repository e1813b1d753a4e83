// backend/cpu/types.h: the CPU build's types (backend/state.h's Model holds them): the activation
// element, what a slot's pipeline sends hold until done, a --zero 3 gather in flight, the build's
// own state, and the most floats of one dp all-reduce of the gradient (parallel/data_parallel.h's
// reduce_gradients).
#ifndef CPU_TYPES_H
#define CPU_TYPES_H

#include "layout/grid.h"

typedef float act_t;
typedef struct {
    MPI_Request req[2];
    float* copy[2];                    // --offload activations: what is sent, copied out of the frame
} SlotSends;
typedef MPI_Request GatherWait;        // a --zero 3 all-gather in flight (parallel/zero3.h)
typedef struct {
    int reference;                     // --kernels ref: backend/cpu/reference.h's plain loops, not kernels_cpu.h
    RingXfer ring;                     // the context-parallel ring's exchange in flight
} ModelBackend;
#define GRAD_BUCKET_FLOATS ((size_t)1 << 20)

#endif
