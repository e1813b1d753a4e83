// backend/trace.h: the step's timeline, written where the work is issued (the schedule's ops by
// parallel/pipeline.h and the build's backend, the cp ring's steps, the collectives, the phases)
// and read by runtime/metrics.h: the step's compute time (the log's wait_ms) and, with
// --trace, every event from t0 to t1 on the host's clock (the Chrome trace).
#ifndef TRACE_H
#define TRACE_H

#include "base/common.h"
#include "layout/schedule.h"  // OP_FWD, op_name

#define MAX_TRACE_EVENTS 200000
// Kinds below the schedule's ops (layout/schedule.h OP_*): -1 a collective, -2 a phase of the
// step, and the cp ring (layer_parallel/context_parallel.h): TRACE_RING a ring step's blocks of
// attention, TRACE_RING - 1 the transfer that step overlaps (K,V; in the backward also dK,dV),
// TRACE_RING - 2 the last dK,dV going home after the last step.
#define TRACE_RING (-3)

typedef struct { float t0, t1; int kind, mb, chunk; const char* name; } TraceEvent;
typedef struct Trace {
    double compute_s;     // this step's time in forward, backward and weight-pass ops
    TraceEvent* events;   // --trace: this rank's events
    int n_events;
    double t0;            // the trace's time zero (the first step's start)
    int on;               // recording this step (--trace's first steps)
} Trace;

static void trace_event(Trace* t, const char* name, int kind, int mb, int chunk, double t0, double t1) {
    if (!t || !t->on || t->n_events >= MAX_TRACE_EVENTS) return;
    TraceEvent* e = &t->events[t->n_events++];
    e->t0 = (float)(t0 - t->t0), e->t1 = (float)(t1 - t->t0);
    e->kind = kind, e->mb = mb, e->chunk = chunk, e->name = name;
}
// A schedule op (OP_FWD, OP_BWD, OP_W, a send or receive) of micro-batch mb on global chunk
// `chunk` ran from t0 to t1.
static void trace_op_ran(Trace* t, int kind, int mb, int chunk, double t0, double t1) {
    if (t && (kind == OP_FWD || kind == OP_BWD || kind == OP_W)) t->compute_s += t1 - t0;
    trace_event(t, op_name(kind), kind, mb, chunk, t0, t1);
}
// The cp ring: what 0 = step `step`'s blocks, 1 = the transfer step `step` overlaps, 2 = the
// last dK,dV going home.
static void trace_ring(Trace* t, int what, int step, double t0, double t1) {
    trace_event(t, "ring", TRACE_RING - what, step, -1, t0, t1);
}

#endif
