// dev/sim_schedule.c: layout/schedule.h's simulator on the command line, for the
// zero-bubble benchmark (dev/bench_zb.py), which feeds it the op times it measured.
//
//   sim_schedule SCHEDULE PP VPP M T_FWD T_B T_W [MODEL FLAGS]
//
// T_FWD, T_B, T_W: comma-separated seconds per global chunk (one value: every chunk) of a
// micro-batch's forward, input pass (B) and weight pass (W); for a schedule without W ops
// give the whole backward as T_B and 0 as T_W. MODEL FLAGS: the trainer's (--model,
// --n-layer, ...), for the chunk FLOPs ZB-V's lists are built for (chunk_op_flops), so the
// lists are the ones the trainer ran. Prints the makespan and each stage's busy time:
// "makespan S busy S0 S1 ...".
#include "layout/args.h"
#include "layout/schedule.h"

static void parse_times(const char* s, int n, double* out) {
    int k = 0;
    for (const char* p = s; *p && k < n; k++) {
        char* end;
        out[k] = strtod(p, &end);
        if (end == p) fail("sim_schedule: bad time list '%s'", s);
        p = *end == ',' ? end + 1 : end;
    }
    if (k == 0) fail("sim_schedule: empty time list");
    for (int i = k; i < n; i++) out[i] = out[k - 1];  // a short list repeats its last value
}

int main(int argc, char** argv) {
    if (argc < 8)
        fail(
            "usage: sim_schedule SCHEDULE PP VPP M T_FWD T_B T_W [MODEL FLAGS] (times: comma-separated seconds per "
            "global chunk)");
    int kind = schedule_from_name(argv[1]), pp = atoi(argv[2]), vpp = atoi(argv[3]), m = atoi(argv[4]);
    if (kind < 0) fail("sim_schedule: unknown schedule '%s'", argv[1]);
    const char* why = schedule_check(kind, pp, vpp, m);
    if (why) fail("sim_schedule: %s", why);
    int nc = pp * vpp;
    double* tf = (double*)xmalloc(sizeof(double) * nc);
    double* tb = (double*)xmalloc(sizeof(double) * nc);
    double* tw = (double*)xmalloc(sizeof(double) * nc);
    double* busy = (double*)xmalloc(sizeof(double) * pp);
    parse_times(argv[5], nc, tf);
    parse_times(argv[6], nc, tb);
    parse_times(argv[7], nc, tw);
    Args a;
    argv[7] = argv[0];  // the model flags after the times, as a command line of their own
    parse_args(&a, argc - 7, argv + 7);
    double* t_build = (double*)xmalloc(sizeof(double) * 3 * nc);
    chunk_op_flops(&a.cfg, pp, vpp, t_build);
    double span = schedule_simulate(kind, pp, vpp, m, t_build, tf, tb, tw, 0, SENDS_ASYNC, busy);
    if (span < 0) fail("sim_schedule: the schedule deadlocks");
    printf("makespan %.6f busy", span);
    for (int s = 0; s < pp; s++) printf(" %.6f", busy[s]);
    printf("\n");
    return 0;
}
