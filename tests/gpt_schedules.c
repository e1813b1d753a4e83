// tests/gpt_schedules.c: test_gpt's pipeline schedules (schedule.h) over every size the
// runtime accepts.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// 7. Pipeline schedules (schedule.h), over every size the runtime accepts.

#define MAX_PP 4
#define MAX_VPP 3
#define MAX_M 12

// Megatron's interleaved warm-up (forwards before the first backward) of a stage, written apart from
// layout/schedule.h's interleaved_warmup (which builds the lists checked here) to check them.
static int megatron_interleaved_warmup(int stage, int pp, int vpp, int m) {
    int total = m * vpp, w = m == pp ? total : 2 * (pp - stage - 1) + (vpp - 1) * pp;
    return w < total ? w : total;
}

// In-order matching: between each ordered pair of stages, the messages of one direction
// (activations forward, gradients backward) and way (up or down the ring, schedule.h
// p2p_up) are sent in the order the peer receives them, so a transport that matches in
// order without tags (the GPU build's NCCL pipeline, one communicator per direction, way
// and pair) delivers each where it belongs. Writes the first mismatch into bad.
#define OPS_CAP (7 * MAX_M * MAX_VPP)
static void p2p_order_check(int kind, PipeOp ops[][OPS_CAP], const int* n_ops, int pp, const char* cfg, char* bad,
                            size_t bad_n) {
    for (int from = 0; from < pp; from++)
        for (int dir = 0; dir < 2; dir++)
            for (int up = 0; up < 2; up++) {
                int to = up ? (from + 1) % pp : (from - 1 + pp) % pp, ns = 0, nr = 0;
                int sent[OPS_CAP][2], got[OPS_CAP][2];  // (mb, sending chunk)
                for (int k = 0; k < n_ops[from]; k++) {
                    PipeOp o = ops[from][k];
                    int g = chunk_global(kind, pp, from, o.chunk);
                    if (o.kind == (dir ? OP_SEND_BWD : OP_SEND_FWD) && p2p_up(kind, pp, dir, g) == up)
                        sent[ns][0] = o.mb, sent[ns++][1] = g;
                }
                for (int k = 0; k < n_ops[to]; k++) {
                    PipeOp o = ops[to][k];
                    int src = chunk_global(kind, pp, to, o.chunk) + (dir ? 1 : -1);
                    if (o.kind == (dir ? OP_RECV_BWD : OP_RECV_FWD) && chunk_stage(kind, pp, src) == from &&
                        p2p_up(kind, pp, dir, src) == up)
                        got[nr][0] = o.mb, got[nr++][1] = src;
                }
                for (int i = 0; i < ns || i < nr; i++)
                    if (i >= ns || i >= nr || sent[i][0] != got[i][0] || sent[i][1] != got[i][1]) {
                        snprintf(bad, bad_n,
                                 "%s: stage %d -> %d dir %d %s: message %d sent as (mb %d, chunk %d), received as (mb "
                                 "%d, chunk %d)",
                                 cfg, from, to, dir, up ? "up" : "down", i, i < ns ? sent[i][0] : -1,
                                 i < ns ? sent[i][1] : -1, i < nr ? got[i][0] : -1, i < nr ? got[i][1] : -1);
                        break;
                    }
            }
}

// DualPipe-V's lists in deepseek-ai/DualPipe's dualpipev.py order, written out by hand from its
// eight phases for pp 2, m 5 ("F1.2": F of local chunk 1, micro-batch 2; a full backward is B W).
static void test_dualpipev_order(PipeOp* ops) {
    const char* want[2] = {
        // stage 0: 2 x F0; 1 x (F0 F1); 1 x (B1 W F1), zero-bubble; 2 x (F0 B1 F1 B0); 1 x (B1 F1 B0);
        // 1 x (B1 B0), zero-bubble from its B0; 1 x (W B0), zero-bubble; 1 x W
        "F0.0 F0.1 F0.2 F1.0 B1.0 W1.0 F1.1 F0.3 B1.1 W1.1 F1.2 B0.0 W0.0 F0.4 B1.2 W1.2 F1.3 B0.1 W0.1 "
        "B1.3 W1.3 F1.4 B0.2 W0.2 B1.4 W1.4 B0.3 W0.3 B0.4 W0.4",
        // stage 1: 2 x (F0 F1); 3 x (F0 B1 F1 B0); 2 x (B1 B0), zero-bubble from the second; 2 x W
        "F0.0 F1.0 F0.1 F1.1 F0.2 B1.0 W1.0 F1.2 B0.0 W0.0 F0.3 B1.1 W1.1 F1.3 B0.1 W0.1 F0.4 B1.2 W1.2 F1.4 "
        "B0.2 W0.2 B1.3 W1.3 B0.3 W0.3 B1.4 B0.4 W1.4 W0.4"};
    for (int s = 0; s < 2; s++) {
        char got[512] = "", name[96];
        int n = schedule_build(SCHED_DUALPIPEV, s, 2, 2, 5, NULL, ops);
        for (int k = 0; k < n; k++)
            if (ops[k].kind == OP_FWD || ops[k].kind == OP_BWD || ops[k].kind == OP_W)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%c%d.%d", got[0] ? " " : "",
                         "?F??B?W"[ops[k].kind], ops[k].chunk, ops[k].mb);
        snprintf(name, sizeof(name), "schedule/dualpipe-v/stage %d of pp 2, m 5: dualpipev.py's order", s);
        check(!strcmp(got, want[s]), name, "%s", got);
    }
}

// --pp-split auto (params.h chunk_cut) on a heavy head, by hand: tiny with 12 layers, d 128,
// --pp-costs (runtime/pp_costs.h) on a trace with known times: chunks of 2, 3 and 1 layers, a layer
// 2 ms (F 0.8 + B 1.2), the head 5 ms (F 2 + B 3), the embedding 0.01 of a layer (the planner's
// share): chunk 0 4.02 ms, chunk 1 6, chunk 2 7, three micro-batches each, one forward 10x slow
// (the medians ignore it). The fit gives back 2 and 5 ms.
static void test_pp_costs(const ModelConfig* c) {
    char path[512], shape[PP_COSTS_SHAPE_CAP];
    snprintf(path, sizeof(path), "%s/costs_trace.json", tmp_dir);
    FILE* f = fopen(path, "w");
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"chunk_layers\":\"2 3 1\",\"shape\":\"%s\"},"
            "\"traceEvents\":[\n", pp_costs_shape(c, shape));
    const double f_ms[3] = {0.8 * 2.01, 0.8 * 3, 0.8 + 2}, b_ms[3] = {1.2 * 2.01, 1.2 * 3, 1.2 + 3};
    for (int g = 0; g < 3; g++)
        for (int mb = 0; mb < 3; mb++)
            fprintf(f, "{\"name\":\"F mb%d c%d\",\"cat\":\"compute\",\"ph\":\"X\",\"dur\":%.3f},\n"
                    "{\"name\":\"B mb%d c%d\",\"cat\":\"compute\",\"ph\":\"X\",\"dur\":%.3f},\n",
                    mb, g, f_ms[g] * 1e3 * (g == 1 && mb == 2 ? 10 : 1), mb, g, b_ms[g] * 1e3);
    fprintf(f, "{}]}\n");
    fclose(f);
    StageModel sm = {1, 0.01, 3, NULL, NULL, 0, NULL, NULL};
    pp_costs_read(path, c, &sm);
    check(fabs(sm.layer - 2e-3) < 1e-9 && fabs(sm.head - 5e-3) < 1e-9 && fabs(sm.embed - 2e-5) < 1e-11 &&
              sm.measured == path,
          "pp_costs/fit: a layer 2 ms, the head 5 ms", "layer %.6f ms, head %.6f ms, embedding %.6f ms",
          sm.layer * 1e3, sm.head * 1e3, sm.embed * 1e3);
}

// vocab 4096, T 32: a layer costs 6 x 12d^2 + 12dT = 1228800 FLOPs a token, the head and loss
// 6Vd + 10V = 3186688 (2.59 layers). pp 4: 14.6 layers' work, so the slowest stage has at
// least 4 layers' (12 layers in whole ones): 3 | 4 | 4 | 1 + head (3.59). The even cut's last
// stage has 3 + 2.59. The V (pp 2, zb-v): stage 0 holds chunks 0 and 3 with the embedding and
// the head: x layers + 2.59 against 12 - x on stage 1, best at x = 5 (7.59 against 7; x = 4: 8).
static void test_pp_split_auto(void) {
    ModelConfig c = {0};
    apply_preset(&c, find_preset("tiny"));
    c.n_layer = 12, c.d_model = 128, c.vocab = 4096, c.pp_split = 1, c.schedule = SCHED_1F1B;
    config_finalize(&c);
    int counts[8];
    chunk_cut(&c, 4, 1, counts);
    check(counts[0] == 3 && counts[1] == 4 && counts[2] == 4 && counts[3] == 1, "pp_split/auto/pp 4: 3 4 4 1",
          "%d %d %d %d", counts[0], counts[1], counts[2], counts[3]);
    c.schedule = SCHED_ZBV;
    chunk_cut(&c, 2, 2, counts);
    double cost[2];
    stage_costs(&c, 2, 2, counts, cost, NULL);
    check(counts[0] + counts[3] == 5 && counts[1] + counts[2] == 7 && counts[0] >= 1 && counts[3] >= 1,
          "pp_split/auto/zb-v pp 2: stage 0 (both ends) 5 layers, stage 1 7", "%d %d %d %d (stage costs %.0f %.0f)",
          counts[0], counts[1], counts[2], counts[3], cost[0], cost[1]);
    c.pp_split = 0;
    chunk_cut(&c, 4, 1, counts);
    check(counts[0] == 3 && counts[1] == 3 && counts[2] == 3 && counts[3] == 3, "pp_split/even/pp 4: 3 3 3 3",
          "%d %d %d %d", counts[0], counts[1], counts[2], counts[3]);
    // A StageModel (the planner's times and memory): 12 layers of 1 s, the head 3 s on the last of 2
    // stages; by time alone 7 | 5 + head (7 s | 8 s; 8 | 4 + head, 8 s | 7 s, is no better). Stage 0's layers hold
    // 10 bytes each over a base of 20, the limit 85: at most 6 layers there, so 6 | 6 + head (9 s),
    // the fastest cut that fits.
    double base[2] = {20, 0}, per_layer[2] = {10, 1};
    StageModel sm = {1, 0, 3, base, per_layer, 0, NULL, NULL};
    c.stage_model = &sm, c.pp_split = 1, c.schedule = SCHED_1F1B;
    chunk_cut(&c, 2, 1, counts);
    check(counts[0] == 7 && counts[1] == 5, "pp_split/auto/stage model times: 7 | 5 + head", "%d %d", counts[0],
          counts[1]);
    sm.mem_limit = 85;
    chunk_cut(&c, 2, 1, counts);
    double mem[2];
    stage_costs(&c, 2, 1, counts, cost, mem);
    check(counts[0] == 6 && counts[1] == 6 && mem[0] == 80 && cost[1] == 9,
          "pp_split/auto/memory limit: 6 | 6 + head, stage 0 80 of 85 bytes",
          "%d %d (stage 0 %.0f bytes, stage 1 %.0f s)", counts[0], counts[1], mem[0], cost[1]);
    test_pp_costs(&c);
    sm.mem_limit = 15;  // nothing fits: the least memory over the limit, 1 layer on stage 0
    chunk_cut(&c, 2, 1, counts);
    check(counts[0] == 1 && counts[1] == 11, "pp_split/auto/no cut fits: the least over the limit", "%d %d",
          counts[0], counts[1]);
}

// The evaluation's forward-only lists, ZB-V under uneven op times, ZB-H1's order and
// schedule_check's refusals (test_schedules' second half).
static void test_schedules_more(void) {
    const int kinds[N_SCHEDULES] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_ZBV, SCHED_DUALPIPEV};
    static PipeOp ops[MAX_PP][OPS_CAP];
    // the evaluation's forward-only lists (layout/schedule.h forward_ops) match in order too
    char bad_eval[256] = "";
    int n_eval = 0;
    for (int ki = 0; ki < N_SCHEDULES; ki++)
        for (int pp = 1; pp <= MAX_PP; pp++)
            for (int vpp = 1; vpp <= MAX_VPP; vpp++)
                for (int m = 1; m <= MAX_M; m++) {
                    if (schedule_check(kinds[ki], pp, vpp, pp)) continue;
                    int n_ops[MAX_PP];
                    char cfg[64];
                    snprintf(cfg, sizeof(cfg), "forward_ops %s pp %d vpp %d m %d", schedule_name(kinds[ki]), pp, vpp,
                             m);
                    for (int s = 0; s < pp; s++) n_ops[s] = forward_ops(kinds[ki], s, pp, vpp, m, ops[s]);
                    p2p_order_check(kinds[ki], ops, n_ops, pp, cfg, bad_eval, sizeof(bad_eval));
                    n_eval++;
                }
    char name[160];
    snprintf(name, sizeof(name),
             "schedule/forward_ops/each direction between two stages received in the order sent (%d layouts)", n_eval);
    check(!bad_eval[0], name, bad_eval[0] ? "%s" : NULL, bad_eval);
    // ZB-V's list built for the op times does not stall when B is longer than F (F : B : W =
    // 1 : 1.25 : 0.9, as our CPU kernels run): its bubble falls with m and stays at most
    // ZB-H1's, where the list built for equal times stays near 16% at pp 4 whatever m
    char bad_timed[256] = "";
    for (int pp = 2; pp <= 4; pp *= 2)
        for (int m = 2 * pp; m <= 8 * pp; m *= 2) {
            double t[3 * 8], tf[8], tb[8], tw[8], busy[4], h_busy[4];
            for (int g = 0; g < 2 * pp; g++)
                t[g] = tf[g] = 1, t[2 * pp + g] = tb[g] = 1.25, t[4 * pp + g] = tw[g] = 0.9;
            double span = schedule_simulate(SCHED_ZBV, pp, 2, m, t, tf, tb, tw, 0, SENDS_ASYNC, busy);
            for (int g = 0; g < pp; g++) tf[g] = 2, tb[g] = 2.5, tw[g] = 1.8;  // ZB-H1: one chunk of twice the layers
            double h_span = schedule_simulate(SCHED_ZBH1, pp, 1, m, NULL, tf, tb, tw, 0, SENDS_ASYNC, h_busy);
            double bubble = bubble_fraction(span, busy[0]), h_bubble = bubble_fraction(h_span, h_busy[0]);
            if (bubble > h_bubble + 1e-9)
                snprintf(bad_timed, sizeof(bad_timed), "pp %d m %d: zb-v %.4f > zb-h1 %.4f", pp, m, bubble, h_bubble);
        }
    check(!bad_timed[0],
          "schedule/zb-v/built for F:B:W = 1:1.25:0.9, its bubble at those times <= ZB-H1's (pp 2, 4; m 2pp..8pp)",
          bad_timed[0] ? "%s" : NULL, bad_timed);
    // ZB-H1 is 1F1B with the W's of stage s running s micro-batches late (pp 4, m 8, stage 3)
    char got[512] = "";
    int n = schedule_build(SCHED_ZBH1, 3, 4, 1, 8, NULL, ops[0]);
    for (int k = 0; k < n; k++)
        if (ops[0][k].kind == OP_FWD || ops[0][k].kind == OP_BWD || ops[0][k].kind == OP_W)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%c%d", got[0] ? " " : "",
                     "?F??B?W"[ops[0][k].kind], ops[0][k].mb);
    const char* want = "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7";
    check(!strcmp(got, want), "schedule/zb-h1/last stage of pp 4, m 8: W's three micro-batches late", "%s", got);
    // schedule_check refuses what cannot run
    check(schedule_check(SCHED_1F1B, 2, 2, 4) != NULL, "schedule_check/vpp > 1 needs interleaved", NULL);
    check(schedule_check(SCHED_INTERLEAVED, 4, 2, 6) != NULL, "schedule_check/interleaved needs m multiple of pp",
          NULL);
    check(schedule_check(SCHED_1F1B, 4, 1, 3) != NULL, "schedule_check/1f1b needs m >= pp", NULL);
    check(schedule_check(SCHED_GPIPE, 4, 1, 3) == NULL, "schedule_check/gpipe accepts m < pp", NULL);
    check(schedule_check(SCHED_1F1B, 1, 1, 0) != NULL, "schedule_check/zero micro-batches refused", NULL);
    check(schedule_check(SCHED_ZBV, 2, 1, 4) != NULL && schedule_check(SCHED_ZBV, 2, 3, 4) != NULL &&
              schedule_check(SCHED_ZBV, 2, 2, 4) == NULL,
          "schedule_check/zb-v needs vpp 2", NULL);
    check(schedule_check(SCHED_ZBH1, 4, 2, 8) != NULL, "schedule_check/zb-h1 needs vpp 1", NULL);
    check(schedule_check(SCHED_DUALPIPEV, 2, 1, 4) != NULL && schedule_check(SCHED_DUALPIPEV, 4, 2, 7) != NULL &&
              schedule_check(SCHED_DUALPIPEV, 4, 2, 8) == NULL,
          "schedule_check/dualpipe-v needs vpp 2 and m >= 2pp", NULL);
    test_dualpipev_order(ops[0]);
    test_pp_split_auto();
    check(schedule_check(SCHED_ZBH1, 4, 1, 3) != NULL && schedule_check(SCHED_ZBV, 4, 2, 3) != NULL,
          "schedule_check/zero-bubble needs m >= pp", NULL);
}

#define SCHED_BAD 256  // test_schedules' "what went wrong" buffers
// Activations in flight on stage s of one layout's lists against what each schedule keeps.
static void schedule_flight_check(int kind, int s, int pp, int vpp, int m, const PipeOp* ops, int n_ops,
                                  const char* cfg, char* bad_flight) {
    int peak = schedule_max_in_flight(ops, n_ops, -1), want = -1;
    if (kind == SCHED_GPIPE) want = m;
    if (kind == SCHED_1F1B) want = pp - s < m ? pp - s : m;
    if (kind == SCHED_INTERLEAVED) {
        int w = megatron_interleaved_warmup(s, pp, vpp, m);
        want = w < m * vpp ? w + 1 : w;
    }
    if (kind == SCHED_ZBH1) want = pp;  // every stage: 1F1B's stage 0
    if (kind == SCHED_ZBV && peak <= 2 * pp) want = peak;  // at most 2pp chunks: pp micro-batches of a stage
    if (kind == SCHED_DUALPIPEV) want = 2 * pp + 1;        // DualPipe's table: PP + 1 of its PP = 2pp stages
    if (peak != want) snprintf(bad_flight, SCHED_BAD, "%s stage %d: %d in flight, expected %d", cfg, s, peak, want);
    if (kind == SCHED_1F1B && peak > pp)
        snprintf(bad_flight, SCHED_BAD, "%s stage %d: %d in flight > pp", cfg, s, peak);
}

typedef int ChunkCounts[MAX_M][MAX_PP * MAX_VPP];  // per (mb, global chunk)
// One stage's list: every (mb, chunk) op once, in order (F, B, W; a hand-over after its source), a
// receive right before its compute op and a send right after; sends and receives counted by sender.
static void schedule_stage_check(int kind, int s, int pp, int vpp, int m, const PipeOp* ops, int n_ops, const char* cfg,
                                 ChunkCounts sends[2], ChunkCounts recvs[2], char* bad_once, char* bad_order,
                                 char* bad_comm) {
    int nc = pp * vpp, split = schedule_has_w(kind);
    int fwd[MAX_M][MAX_VPP] = {{0}}, bwd[MAX_M][MAX_VPP] = {{0}}, wgt[MAX_M][MAX_VPP] = {{0}};
    for (int k = 0; k < n_ops; k++) {
        PipeOp o = ops[k];
        if (o.mb < 0 || o.mb >= m || o.chunk < 0 || o.chunk >= vpp) {
            snprintf(bad_once, SCHED_BAD, "%s: op out of range", cfg);
            continue;
        }
        int g = chunk_global(kind, pp, s, o.chunk);
        if (chunk_stage(kind, pp, g) != s || chunk_local(kind, pp, g) != o.chunk)
            snprintf(bad_once, SCHED_BAD, "%s stage %d chunk %d: placement does not invert",
                     cfg, s, o.chunk);
        if (o.kind == OP_FWD) fwd[o.mb][o.chunk]++;
        if (o.kind == OP_BWD) {
            if (!fwd[o.mb][o.chunk])
                snprintf(bad_order, SCHED_BAD,
                         "%s stage %d: bwd mb %d chunk %d before its fwd", cfg, s, o.mb, o.chunk);
            bwd[o.mb][o.chunk]++;
        }
        if (o.kind == OP_W) {
            if (!bwd[o.mb][o.chunk])
                snprintf(bad_order, SCHED_BAD, "%s stage %d: W mb %d chunk %d before its B",
                         cfg, s, o.mb, o.chunk);
            wgt[o.mb][o.chunk]++;
        }
        // a receive directly precedes its compute op, a send directly follows it; only
        // between chunks on different stages (on one stage the runtime copies)
        int prev = k > 0 ? ops[k - 1].kind : -1,
            next = k + 1 < n_ops ? ops[k + 1].kind : -1;
        int same_prev = k > 0 && ops[k - 1].mb == o.mb && ops[k - 1].chunk == o.chunk;
        int same_next =
            k + 1 < n_ops && ops[k + 1].mb == o.mb && ops[k + 1].chunk == o.chunk;
        int msg_below = g > 0 && chunk_stage(kind, pp, g - 1) != s,
            msg_above = g < nc - 1 && chunk_stage(kind, pp, g + 1) != s;
        if (o.kind == OP_FWD && msg_below != (prev == OP_RECV_FWD && same_prev))
            snprintf(bad_comm, SCHED_BAD,
                     "%s stage %d: fwd mb %d chunk %d without/with recv", cfg, s, o.mb, o.chunk);
        if (o.kind == OP_FWD && msg_above != (next == OP_SEND_FWD && same_next))
            snprintf(bad_comm, SCHED_BAD,
                     "%s stage %d: fwd mb %d chunk %d without/with send", cfg, s, o.mb, o.chunk);
        if (o.kind == OP_BWD && msg_above != (prev == OP_RECV_BWD && same_prev))
            snprintf(bad_comm, SCHED_BAD,
                     "%s stage %d: bwd mb %d chunk %d without/with recv", cfg, s, o.mb, o.chunk);
        if (o.kind == OP_BWD && msg_below != (next == OP_SEND_BWD && same_next))
            snprintf(bad_comm, SCHED_BAD,
                     "%s stage %d: bwd mb %d chunk %d without/with send", cfg, s, o.mb, o.chunk);
        // a hand-over on one stage: the chunk it comes from ran before on this list
        if (o.kind == OP_FWD && g > 0 && !msg_below && !fwd[o.mb][chunk_local(kind, pp, g - 1)])
            snprintf(bad_order, SCHED_BAD,
                     "%s stage %d: fwd mb %d chunk %d before the fwd it copies", cfg, s, o.mb,
                     o.chunk);
        if (o.kind == OP_BWD && g < nc - 1 && !msg_above &&
            !bwd[o.mb][chunk_local(kind, pp, g + 1)])
            snprintf(bad_order, SCHED_BAD,
                     "%s stage %d: bwd mb %d chunk %d before the bwd it copies", cfg, s, o.mb,
                     o.chunk);
        // SEND of chunk g is received by chunk g+1 (activations) / g-1 (gradients): index by sender
        if (o.kind == OP_SEND_FWD) sends[0][o.mb][g]++;
        if (o.kind == OP_SEND_BWD) sends[1][o.mb][g]++;
        if (o.kind == OP_RECV_FWD && g > 0) recvs[0][o.mb][g - 1]++;
        if (o.kind == OP_RECV_BWD && g < nc - 1) recvs[1][o.mb][g + 1]++;
    }
    for (int mb = 0; mb < m; mb++)
        for (int c = 0; c < vpp; c++)
            if (fwd[mb][c] != 1 || bwd[mb][c] != 1 || wgt[mb][c] != split)
                snprintf(bad_once, SCHED_BAD,
                         "%s stage %d mb %d chunk %d: %d fwd, %d bwd, %d W", cfg, s, mb, c,
                         fwd[mb][c], bwd[mb][c], wgt[mb][c]);
}

// The simulator on one layout's lists: no deadlock under unit and uneven times, and the
// bubble at equal times against bubble_formula (worst_bubble: the largest difference seen).
static void schedule_sim_check(int kind, int pp, int vpp, int m, const char* cfg, char* bad_sim, char* bad_bubble,
                               double* worst_bubble) {
    int nc = pp * vpp;
    // the simulator: unit times, then uneven times and a p2p latency, never deadlock
    double tf[MAX_PP * MAX_VPP], tb[MAX_PP * MAX_VPP], tw[MAX_PP * MAX_VPP], busy[MAX_PP];
    for (int g = 0; g < nc; g++) tf[g] = 1, tb[g] = 1, tw[g] = 1;
    double t_unit = schedule_simulate(kind, pp, vpp, m, NULL, tf, tb, tw, 0, SENDS_ASYNC, busy);
    for (int g = 0; g < nc; g++) tf[g] = 1 + 0.37 * (g % 3), tb[g] = 1 + 0.11 * (g % 4), tw[g] = 0.5 + 0.2 * (g % 2);
    double t_rand = schedule_simulate(kind, pp, vpp, m, NULL, tf, tb, tw, 0.05, SENDS_ASYNC, NULL);
    if (t_unit < 0 || t_rand < 0) snprintf(bad_sim, SCHED_BAD, "%s: makespan %g / %g (deadlock)", cfg, t_unit, t_rand);
    // bubble with equal chunk times (F = B = W = 1/vpp, no p2p time):
    // bubble_fraction (makespan - busy) / makespan of stage 0 = bubble_formula; ZB-V (formula 0,
    // which our list does not reach) at most ZB-H1's (p-1)/(3m+p-1)
    for (int g = 0; g < nc; g++) tf[g] = 1.0 / vpp, tb[g] = 1.0 / vpp, tw[g] = 1.0 / vpp;
    double t_eq = schedule_simulate(kind, pp, vpp, m, NULL, tf, tb, tw, 0, SENDS_ASYNC, busy);
    double bubble = bubble_fraction(t_eq, busy[0]), want = bubble_formula(kind, pp, vpp, m);
    if (kind == SCHED_ZBV) {
        double bound = bubble_formula(SCHED_ZBH1, pp, 1, m);
        if (bubble > bound + 1e-9)
            snprintf(bad_bubble, SCHED_BAD, "%s: bubble %.6f > ZB-H1's %.6f", cfg, bubble, bound);
        if (bubble > *worst_bubble) *worst_bubble = bubble;
        return;
    }
    if (fabs(bubble - want) > fabs(*worst_bubble)) *worst_bubble = bubble - want;
    if (fabs(bubble - want) > 1e-9)
        snprintf(bad_bubble, SCHED_BAD, "%s: bubble %.6f, formula %.6f", cfg, bubble, want);
}

static void test_schedules(void) {
    const int kinds[N_SCHEDULES] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_ZBV, SCHED_DUALPIPEV};
    static PipeOp ops[MAX_PP][OPS_CAP];
    for (int ki = 0; ki < N_SCHEDULES; ki++) {
        int kind = kinds[ki], n_cfg = 0, split = schedule_has_w(kind);
        char bad_once[256] = "", bad_order[256] = "", bad_comm[256] = "", bad_fifo[256] = "", bad_flight[256] = "",
             bad_sim[256] = "", bad_bubble[256] = "";
        double worst_bubble = 0;
        for (int pp = 1; pp <= MAX_PP; pp++)
            for (int vpp = 1; vpp <= MAX_VPP; vpp++)
                for (int m = 1; m <= MAX_M; m++) {
                    if (schedule_check(kind, pp, vpp, m)) continue;
                    if (kind == SCHED_INTERLEAVED && vpp == 1) continue;  // that is plain 1F1B, by the CLI default
                    n_cfg++;
                    int n_ops[MAX_PP], nc = pp * vpp;
                    char cfg[64];
                    snprintf(cfg, sizeof(cfg), "pp %d vpp %d m %d", pp, vpp, m);
                    // per (dir, mb, global chunk): sends and receives seen
                    int sends[2][MAX_M][MAX_PP * MAX_VPP] = {{{0}}}, recvs[2][MAX_M][MAX_PP * MAX_VPP] = {{{0}}};
                    for (int s = 0; s < pp; s++) {
                        n_ops[s] = schedule_build(kind, s, pp, vpp, m, NULL, ops[s]);
                        if (n_ops[s] > schedule_max_ops(m, vpp))
                            snprintf(bad_once, sizeof(bad_once), "%s stage %d: %d ops > max", cfg, s, n_ops[s]);
                        schedule_stage_check(kind, s, pp, vpp, m, ops[s], n_ops[s], cfg, sends, recvs, bad_once,
                                             bad_order, bad_comm);
                        schedule_flight_check(kind, s, pp, vpp, m, ops[s], n_ops[s], cfg, bad_flight);
                    }
                    for (int dir = 0; dir < 2; dir++)
                        for (int mb = 0; mb < m; mb++)
                            for (int g = 0; g < nc; g++) {
                                // a message goes to every neighbour chunk on another stage
                                int h = dir == 0 ? g + 1 : g - 1;
                                int want = h >= 0 && h < nc && chunk_stage(kind, pp, h) != chunk_stage(kind, pp, g);
                                if (sends[dir][mb][g] != want || recvs[dir][mb][g] != want)
                                    snprintf(bad_comm, sizeof(bad_comm),
                                             "%s: dir %d mb %d from chunk %d: %d sends, %d recvs", cfg, dir, mb, g,
                                             sends[dir][mb][g], recvs[dir][mb][g]);
                            }
                    p2p_order_check(kind, ops, n_ops, pp, cfg, bad_fifo, sizeof(bad_fifo));
                    schedule_sim_check(kind, pp, vpp, m, cfg, bad_sim, bad_bubble, &worst_bubble);
                }
        const char* kn = schedule_name(kind);
        char name[160];
#define SCHED_CHECK(what, bad) do { snprintf(name, sizeof(name), "schedule/%s/%s (%d layouts)", kn, what, n_cfg); \
        check(!bad[0], name, bad[0] ? "%s" : NULL, bad); } while (0)
        SCHED_CHECK(
            split ? "every (mb, chunk) F, B and W exactly once" : "every (mb, chunk) forward and backward exactly once",
            bad_once);
        SCHED_CHECK(
            split ? "F before B before W, hand-overs after their source" : "forward before backward on every stage",
            bad_order);
        SCHED_CHECK("every send matched by one recv on the peer chunk, recv/send next to compute", bad_comm);
        SCHED_CHECK("each direction and way between two stages received in the order sent (in-order matching)",
                    bad_fifo);
        SCHED_CHECK(kind == SCHED_1F1B    ? "in flight = min(pp - stage, m) <= pp"
                    : kind == SCHED_GPIPE ? "in flight = m"
                    : kind == SCHED_ZBH1  ? "in flight (F to W) = pp on every stage"
                    : kind == SCHED_ZBV   ? "in flight (F to W) <= 2pp chunks"
                    : kind == SCHED_DUALPIPEV ? "in flight (F to W) = 2pp + 1 chunks on every stage"
                                          : "in flight = Megatron warm-up + 1",
                    bad_flight);
        SCHED_CHECK("simulate completes (no deadlock), unit and uneven times", bad_sim);
        SCHED_CHECK(kind == SCHED_ZBV ? "bubble at F=B=W at most ZB-H1's (p-1)/(3m+p-1)"
                                      : "bubble (makespan - busy)/makespan equals bubble_formula within 1e-9",
                    bad_bubble);
#undef SCHED_CHECK
    }
    test_schedules_more();
}
