// tests/planner_schedules.c: test_planner's checks of pipeline schedules (bubbles, the zero-bubble
// schedules against a simulation), context parallelism, and layouts the planner refuses.
// Included by tests/test_planner.c after its helpers (one test binary); not built alone.

static void test_bubble(void) {
    // equal stage times, no p2p: the simulated bubble is the textbook one
    int p = 4, m = 8, v = 2;
    double tf[8], tb[8], busy[4];
    for (int g = 0; g < 8; g++) tf[g] = 1.0, tb[g] = 2.0;
    double span = schedule_simulate(SCHED_1F1B, p, 1, m, NULL, tf, tb, NULL, 0, SENDS_ASYNC, busy);
    double bubble = bubble_fraction(span, busy[0]);
    check(fabs(bubble - bubble_formula(SCHED_1F1B, p, 1, m)) < 1e-12 && fabs(bubble - 3.0 / 11) < 1e-12,
          "bubble_1f1b_equals_formula", "simulated %.6f, (p-1)/(m+p-1) = %.6f, want 3/11", bubble,
          bubble_formula(SCHED_1F1B, p, 1, m));
    for (int g = 0; g < 8; g++) tf[g] = 0.5, tb[g] = 1.0;  // a stage's work split in v chunks
    span = schedule_simulate(SCHED_INTERLEAVED, p, v, m, NULL, tf, tb, NULL, 0, SENDS_ASYNC, busy);
    bubble = bubble_fraction(span, busy[0]);
    check(fabs(bubble - bubble_formula(SCHED_INTERLEAVED, p, v, m)) < 1e-12, "bubble_interleaved_equals_formula",
          "simulated %.6f, (p-1)/(v m+p-1) = %.6f", bubble, bubble_formula(SCHED_INTERLEAVED, p, v, m));
    // 1F1B: stage 0 holds pp micro-batches at peak; this is what sizes activation memory
    PipeOp ops[6 * 8];
    int n = schedule_build(SCHED_1F1B, 0, p, 1, m, NULL, ops);
    check(schedule_max_in_flight(ops, n, -1) == p, "in_flight_1f1b_stage0", "%d, want %d",
          schedule_max_in_flight(ops, n, -1), p);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-13b", 0);
    c.pp = 4, c.dp = 16;
    PlanResult r;
    PlanSetup k = plan_setup_default();
    plan_predict(&c, &k, 2048, 8, &d, &r);
    check(r.in_flight == 4 && r.worst_stage == 0, "planner_uses_in_flight", "in flight %d on stage %d", r.in_flight,
          r.worst_stage);
}

// A send that holds its sender (layout/schedule.h SENDS_*), by hand: forward 1, backward 2 a chunk, a message 0.5.
// 1F1B, pp 2, m 2. Stage 0: F0 F1 then B0 B1, stage 1: F0 B0 F1 B1. Free sends: stage 1 gets micro-batch 0 at 1.5,
// runs F0 B0 to 4.5, F1 (its input there since 2.5) to 5.5, B1 to 7.5; stage 0's B0 waits for 4.5 + 0.5 = 5, runs to
// 7, B1 waits for 8: 10. Every send held: stage 0 sends at 1, held to 1.5, F1 1.5-2.5, held to 3; stage 1 F0 1.5-2.5,
// B0 to 4.5, held to 5, F1 5-6, B1 to 8, its gradient at 8.5: stage 0's B0 5-7, B1 8.5-10.5. Warm-up and cool-down
// only: stage 0's two sends are warm-up ones (before its first backward), stage 1's B0 send is not (a forward
// follows it) and its B1 send is held but ends the stage at 8: stage 0 as with free sends, 10.
// Interleaved, pp 2, vpp 2, m 2 (chunks 0, 2 on stage 0; 1, 3 on stage 1): every forward comes before every
// backward, so warm-up and cool-down hold all sends, 19 as every send held; free, 18: stage 0 F(0,0) 0-1, F(1,0)
// 1-2; stage 1 F(0,0) 1.5-2.5, F(1,0) 2.5-3.5; stage 0 F(0,1) 3-4, F(1,1) 4-5; stage 1 F(0,1) 4.5-5.5, F(1,1)
// 5.5-6.5, B(0,1) to 8.5, B(1,1) to 10.5; stage 0 B(0,1) 9-11, B(1,1) 11-13; stage 1 B(0,0) 11.5-13.5, B(1,0)
// 13.5-15.5; stage 0 B(0,0) 14-16, B(1,0) 16-18. Held: stage 0's forwards end at 1, 2.5 (held to 3), 4, 5.5 (held to
// 6); stage 1 F(0,0) 1.5-2.5 (to 3), F(1,0) 3-4 (to 4.5), F(0,1) 4.5-5.5, F(1,1) 6-7, B(0,1) 7-9 (to 9.5), B(1,1)
// 9.5-11.5 (to 12); stage 0 B(0,1) 9.5-11.5 (to 12), B(1,1) 12-14 (to 14.5); stage 1 B(0,0) 12-14 (to 14.5),
// B(1,0) 14.5-16.5, its gradient at 17; stage 0 B(0,0) 14.5-16.5, B(1,0) 17-19.
static void test_pipeline_send_wait(void) {
    double tf[4], tb[4];
    for (int g = 0; g < 4; g++) tf[g] = 1, tb[g] = 2;
    double want_1f1b[3] = {10, 10, 10.5}, want_int[3] = {18, 19, 19};  // SENDS_ASYNC, SENDS_WAIT_ENDS, SENDS_WAIT
    for (int w = SENDS_ASYNC; w <= SENDS_WAIT; w++) {
        double a = schedule_simulate(SCHED_1F1B, 2, 1, 2, NULL, tf, tb, NULL, 0.5, w, NULL);
        double b = schedule_simulate(SCHED_INTERLEAVED, 2, 2, 2, NULL, tf, tb, NULL, 0.5, w, NULL);
        check(fabs(a - want_1f1b[w]) < 1e-12 && fabs(b - want_int[w]) < 1e-12, "pipeline_send_wait_hand",
              "send_wait %d: 1F1B %.3f (want %.1f), interleaved %.3f (want %.1f)", w, a, want_1f1b[w], b, want_int[w]);
    }
    // the profiles: Megatron-LM's and DeepSpeed's blocking exchanges, Megatron-core's overlap_p2p_comm; this
    // trainer's runtime posts its sends non-blocking
    check(plan_setup_for(SOFTWARE_FRAMEWORK).pipe_send_wait == SENDS_WAIT &&
              plan_setup_for(SOFTWARE_DEEPSPEED2021).pipe_send_wait == SENDS_WAIT &&
              plan_setup_for(SOFTWARE_MEGATRON).pipe_send_wait == SENDS_WAIT_ENDS &&
              plan_setup_for(SOFTWARE_TRAINER).pipe_send_wait == SENDS_ASYNC &&
              plan_setup_for(SOFTWARE_SCALING).pipe_send_wait == SENDS_ASYNC,
          "pipeline_send_wait_profiles", NULL);
    // Megatron-core's plain 1F1B has no overlap_p2p_comm: at vpp 1 its sends all wait, as the framework's
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-13b", 0);
    c.pp = 4, c.dp = 2, c.tp = 8;
    PlanSetup ends = plan_setup_for(SOFTWARE_MEGATRON), wait = ends, free = ends;
    wait.pipe_send_wait = SENDS_WAIT, free.pipe_send_wait = SENDS_ASYNC;
    PlanResult r_ends, r_wait, r_free;
    plan_predict(&c, &ends, 64, 8, &d, &r_ends);
    plan_predict(&c, &wait, 64, 8, &d, &r_wait);
    plan_predict(&c, &free, 64, 8, &d, &r_free);
    check(r_ends.t_pipeline == r_wait.t_pipeline && r_free.t_pipeline < r_wait.t_pipeline,
          "pipeline_send_wait_megatron_1f1b", "pipeline %.6f s (ends) vs %.6f s (all), %.6f s free", r_ends.t_pipeline,
          r_wait.t_pipeline, r_free.t_pipeline);
}

// A receive pending under Megatron-core's steady-state passes (predict.h plan_pending_receive), by hand. The steady
// share of stage st's passes is (m vpp - warm-up) / m vpp, Megatron's warm-up (pp - st - 1) 2 + (vpp - 1) pp at most
// m vpp (all of them at m = pp): pp 2, vpp 2, m 4: stage 0 runs 4 of its 8 forwards as warm-up (0.5 steady), stage 1
// 2 (0.75); pp 4, vpp 2, m 8: stage 0 10 of 16, stage 3 4; pp 4, m 4: all 8. A chunk of forward 1, backward 2 and
// weight pass 0.5 on stage st then takes 1 + s f, 2 (1 + s b) and 0.5 (1 + s b), f and b the layer's slowdown on the
// 130 SMs of an H100's 132 that NCCL's 2 receive channels leave (layer_time on each). LLaMA-65B at tp 8 with SP, pp 2
// on H100 nodes (one stage a node), micro-batch 1 at 4096 tokens: its GEMMs' waves on 130 SMs cost 1.1% (at 2048
// tokens, or LLaMA-13B's shapes, the waves fall the same: nothing). Not charged: the framework's blocking pipeline,
// Megatron's 1F1B (vpp 1), stages inside one node.
static void test_pending_receive(void) {
    check(interleaved_warmup(2, 2, 4, 0) == 4 && interleaved_warmup(2, 2, 4, 1) == 2 &&
              interleaved_warmup(4, 2, 8, 0) == 10 && interleaved_warmup(4, 2, 8, 3) == 4 &&
              interleaved_warmup(4, 2, 4, 2) == 8,
          "pending_receive_warmup_hand", NULL);
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-65b", 4096);
    c.tp = 8, c.sp = 1, c.pp = 2, c.vpp = 2, c.schedule = SCHED_INTERLEAVED;
    PlanSetup k = plan_setup_for(SOFTWARE_MEGATRON), fw = plan_setup_for(SOFTWARE_FRAMEWORK);
    PlanResult r;
    PlanLinks links = plan_links(&c, &k, &d, 8, &r);
    DeviceProfile left = d;
    left.sms = d.sms - 2, left.peak_flops = d.peak_flops * left.sms / d.sms;
    LayerTime lt = layer_time(&c, 1, 8, 1, 1, 1, &k, &d, links.tp, links.ring, links.a2a);
    LayerTime held = layer_time(&c, 1, 8, 1, 1, 1, &k, &left, links.tp, links.ring, links.a2a);
    double f = held.fwd / lt.fwd - 1, b = held.bwd / lt.bwd - 1, steady[2] = {0.5, 0.75};
    PlanChunks ch = plan_chunks_alloc(4, 2);
    for (int g = 0; g < 4; g++) ch.t_fwd[g] = 1, ch.t_bwd[g] = 2, ch.t_w[g] = 0.5;
    plan_pending_receive(&c, &k, &d, links, &lt, 4, &ch);
    int ok = links.pp_off_node && f > 0 && b > 0;
    for (int st = 0; st < 2; st++)
        for (int j = 0; j < 2; j++) {
            int g = chunk_global(SCHED_INTERLEAVED, 2, st, j);
            ok &= fabs(ch.t_fwd[g] - (1 + steady[st] * f)) < 1e-12 &&
                  fabs(ch.t_bwd[g] - 2 * (1 + steady[st] * b)) < 1e-12 &&
                  fabs(ch.t_w[g] - 0.5 * (1 + steady[st] * b)) < 1e-12;
        }
    check(ok, "megatron_pending_receive_hand",
          "layer forward %.2f -> %.2f us (f %.5f), backward %.2f -> %.2f us (b %.5f); stage 0 chunk %.6f / %.6f, "
          "stage 1 %.6f / %.6f", lt.fwd * 1e6, held.fwd * 1e6, f, lt.bwd * 1e6, held.bwd * 1e6, b, ch.t_fwd[0],
          ch.t_bwd[0], ch.t_fwd[1], ch.t_bwd[1]);
    // none: the framework's blocking exchange, Megatron's 1F1B, both stages on one node (tp 4: 8 GPUs)
    ModelConfig c1 = c, c_node = c;
    c1.vpp = 1, c1.schedule = SCHED_1F1B, c_node.tp = 4;
    PlanLinks links_node = plan_links(&c_node, &k, &d, 8, &r);
    int none = 1;
    for (int t = 0; t < 3; t++) {
        for (int g = 0; g < 4; g++) ch.t_fwd[g] = 1, ch.t_bwd[g] = 2, ch.t_w[g] = 0.5;
        if (t == 0) plan_pending_receive(&c, &fw, &d, links, &lt, 4, &ch);
        if (t == 1) plan_pending_receive(&c1, &k, &d, links, &lt, 4, &ch);
        if (t == 2) plan_pending_receive(&c_node, &k, &d, links_node, &lt, 4, &ch);
        for (int g = 0; g < 4; g++) none &= ch.t_fwd[g] == 1 && ch.t_bwd[g] == 2 && ch.t_w[g] == 0.5;
    }
    check(none && !links_node.pp_off_node, "megatron_pending_receive_only_overlapped_across_nodes", NULL);
    plan_chunks_free(&ch);
}

// Interleaved 1F1B holds more chunks on the first stages: Megatron-LM's schedule (pipeline_parallel/schedules.py,
// forward_backward_pipelining_with_interleaving) runs num_warmup = (pp - rank - 1) * 2 + (vpp - 1) * pp forwards
// (all m * vpp when m == pp, at most m * vpp) before its first backward, then one forward before each backward: at
// most num_warmup + 1 (micro-batch, chunk) pairs in flight. The planner's count is the trainer's own op lists'
// (schedule_build), which must agree, stage by stage; and a framework's stage-0 activations are that count times a
// chunk's layers: LLaMA-13B pp 4 vpp 2 (5 layers a chunk), m 8: 11 chunks, 55 layers' worth (Korthikanti's
// L (1 + (p - 1)/(p v)) = 40 x 1.375 = 55), 1F1B's 40.
static void test_interleaved_in_flight(void) {
    int shapes[][3] = {{4, 2, 8}, {4, 2, 16}, {4, 4, 16}, {8, 2, 16}, {4, 5, 32}, {2, 2, 8}, {8, 4, 64}, {4, 2, 4}};
    int ok = 1;
    char got[512] = "";
    for (int i = 0; i < 8; i++) {
        int pp = shapes[i][0], vpp = shapes[i][1], m = shapes[i][2];
        PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m, vpp));
        for (int st = 0; st < pp; st++) {
            int n = schedule_build(SCHED_INTERLEAVED, st, pp, vpp, m, NULL, ops);
            int warm = m == pp ? m * vpp : (pp - st - 1) * 2 + (vpp - 1) * pp, total = m * vpp;
            int want = warm >= total ? total : warm + 1, have = schedule_max_in_flight(ops, n, -1);
            if (have != want) ok = 0;
            if (st == 0)
                snprintf(got + strlen(got), sizeof(got) - strlen(got), " pp%d vpp%d m%d: %d (%d)", pp, vpp, m, have,
                         want);
        }
        free(ops);
    }
    check(ok, "interleaved_in_flight_is_megatrons", "stage 0 in flight (Megatron's warmup + 1):%s", got);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-13b", 0);
    c.pp = 4, c.vpp = 2, c.dp = 16, c.schedule = SCHED_INTERLEAVED;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    PlanResult r, r1;
    int rc = plan_predict(&c, &k, 128, 8, &d, &r);
    c.vpp = 1, c.schedule = SCHED_1F1B;
    rc |= plan_predict(&c, &k, 128, 8, &d, &r1);
    double layer = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_NONE, &k, 2);
    check(rc == 0 && r.in_flight == 11 && r.worst_stage == 0 && fabs(r.mem_act - 55 * layer) < 1 &&
              fabs(r1.mem_act - 40 * layer) < 1,
          "interleaved_stage0_activations_hand", "in flight %d on stage %d, %.3f GiB = %.2f layers (want 55); 1F1B "
          "%.2f layers (want 40)", r.in_flight, r.worst_stage, r.mem_act / GiB, r.mem_act / layer, r1.mem_act / layer);
}

// The embedding and the head as a layer's place each (time.h chunk_split SPLIT_ENDS: Megatron-core's
// --account-for-embedding/loss-in-pipeline-split, Llama 3 405B's cut): 14 layers + 2 places over pp 4 x vpp 4
// chunks of one place, the first chunk the embedding alone, the last the head alone. A framework's stage holds
// the layers of its (micro-batch, chunk) pairs in flight (memory.h pipe_layers_held), by hand from
// Megatron's order (forward k runs chunk (k / pp) % vpp, backward k chunk vpp - 1 - (k / pp) % vpp) at m 8:
// stage 0 runs 19 forwards before its first backward, chunk 0 for micro-batches 0-3 and 4-6 (no layer) and
// chunks 1-3 for 0-3 (12 layers); in the steady state each forward of a layer is answered by a backward
// of one: 12 layers at most, where the pairs times the largest chunk gave 19. Stage 1 holds 17 pairs of one
// layer each (17); stage 3 runs chunks 0-2 for micro-batches 0-3 (12 layers), then its head chunk's forward and
// backward for 0-3 free nothing, and the next forward (chunk 0, micro-batch 4) comes before a layer's backward: 13.
static void test_pipeline_ends_cut(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-13b", 0);
    c.n_layer = 14, c.pp = 4, c.vpp = 4, c.dp = 2, c.schedule = SCHED_INTERLEAVED;
    int layers[16], emb[16], head[16], ok = 1;
    chunk_split(&c, 16, SPLIT_ENDS, layers, emb, head);
    for (int g = 0; g < 16; g++) ok &= layers[g] == (g == 0 || g == 15 ? 0 : 1) && emb[g] == (g == 0) &&
                                      head[g] == (g == 15);
    long held[4];
    memcpy(held, pipe_layers_held(&c, 8, layers), sizeof(held));
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    k.pipe_split = SPLIT_ENDS;
    PlanResult r, r_even;
    int rc = plan_predict(&c, &k, 16, 8, &d, &r);
    double layer = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_NONE, &k, 2);
    check(ok && rc == 0 && held[0] == 12 && held[1] == 17 && held[2] == 15 && held[3] == 13 && r.worst_stage == 1 &&
              fabs(r.mem_act - 17 * layer) < 1,
          "pipeline_ends_cut_hand", "cut ok %d; layers held by stage %ld %ld %ld %ld (want 12 17 15 13); worst stage "
          "%d, %.2f layers (want 1, 17)", ok, held[0], held[1], held[2], held[3], r.worst_stage, r.mem_act / layer);
    // the even cut of 16 layers: every chunk one layer, the count as before (19 pairs on stage 0)
    c.n_layer = 16, k.pipe_split = SPLIT_LAYERS;
    rc = plan_predict(&c, &k, 16, 8, &d, &r_even);
    check(rc == 0 && r_even.worst_stage == 0 && r_even.in_flight == 19 && fabs(r_even.mem_act - 19 * layer) < 1,
          "pipeline_even_cut_unchanged", "worst stage %d, %d in flight, %.2f layers (want 0, 19, 19)",
          r_even.worst_stage, r_even.in_flight, r_even.mem_act / layer);
    // the trainer's buffers need a layer in every chunk: refused, and so is 2 + layers < chunks
    PlanSetup own = plan_setup_default();
    own.pipe_split = SPLIT_ENDS;
    c.n_layer = 14;
    int rc_own = plan_predict(&c, &own, 16, 8, &d, &r);
    c.n_layer = 13, k.pipe_split = SPLIT_ENDS;
    int rc_few = plan_predict(&c, &k, 16, 8, &d, &r);
    check(rc_own != 0 && rc_few != 0, "pipeline_ends_cut_refused", "trainer rc %d, 13 layers in 16 chunks rc %d (%s)",
          rc_own, rc_few, r.invalid);
}

// Llama 3 405B's three rows of Table 4 (dev/published_runs.csv `llama3-405b table4`; Dubey et al. 2024, section 3.3.2:
// tp 8 pp 16 vpp 8, the ends cut, SP, no recomputation, micro-batch 1, ZeRO-1 with fp32 gradients made at each chunk's
// first backward), by hand. A unit u = s.b.h/t bytes = 8192 x 16384 / 8 = 2^24 B. A layer keeps, each / t under SP:
// its two norms' inputs and outputs 8, q 2, k and v 4r (r = 8/128), the attention output 2, SwiGLU's gate, silu(gate),
// up and their product 8f (f = 53248/16384), the log-sum-exp 4a/h (a = 128): 38.28125 u. Stage 1's 8 chunks are one
// layer each, 398,491,648 parameters a GPU ((2h^2 + 2h kv + 3hF) / 8 + 2h). At 8,192 GPUs (dp 64, m 32) it holds
// Megatron's warm-up for rank 1, (V - 1) pp + 2 (pp - 2) = 140, plus the steady state's forward: 141 layers, with
// all 8 chunks' fp32 gradients (its first chunk's first backward comes in the steady state); at 16,384 (m = pp) all 128
// forwards run before its first backward, one chunk's gradients; at 131k (cp 16) each layer also keeps the gathered
// K and V, 4r (cp - 1) = 3.75 u, and its temporaries the gathered K and V's gradients (131072 tokens, one kv head of
// 128, bf16). Weights bf16 whole (2 B), Adam and the fp32 master 12 B over dp x cp; the device's 0.5 GiB reserve.
static void test_llama3_405b_memory(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-7b", 8192);
    c.n_layer = 126, c.n_head = 128, c.n_kv_head = 8, c.d_model = 16384, c.d_ff = 53248, c.vocab = 128256;
    config_finalize(&c);
    c.tp = 8, c.pp = 16, c.vpp = 8, c.dp = 64, c.sp = 1, c.zero = 1, c.schedule = SCHED_INTERLEAVED;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    k.pipe_split = SPLIT_ENDS, k.grad_bytes = 4, k.reduce_bytes = 4, k.grads_lazy = 1;
    PlanResult r[3];
    int rc = plan_predict(&c, &k, 2048, 8, &d, &r[0]);
    c.dp = 128;
    rc |= plan_predict(&c, &k, 2048, 8, &d, &r[1]);
    ModelConfig long_ctx = c;
    long_ctx.seq_len = 131072, long_ctx.cp = 16, long_ctx.dp = 8;
    PlanSetup allgather = k;
    allgather.cp_allgather = 1;
    rc |= plan_predict(&long_ctx, &allgather, 128, 8, &d, &r[2]);
    double u = 16777216, layer = 38.28125 * u, params = 3187933184.0, chunk = 398491648.0;
    double want_act[3] = {141 * layer, 128 * layer, 128 * (layer + 3.75 * u)};
    double want_grads[3] = {8 * chunk * 4, chunk * 4, chunk * 4}, replicas[3] = {64, 128, 128};
    double want_temp[3] = {0, 0, 2 * 131072 * 128 * 2};  // at 131k the gathered K and V's gradients, one kv head
    int ok = rc == 0;
    for (int i = 0; i < 3; i++) {
        double states = params * 2 + want_grads[i] + params * 12 / replicas[i];
        ok &= r[i].worst_stage == 1 && r[i].in_flight == (i ? 128 : 141) &&
              close_rel(r[i].mem_act, want_act[i], 1e-12) && close_rel(r[i].mem_grads, want_grads[i], 1e-12) &&
              close_rel(r[i].mem_weights, params * 2, 1e-12) &&
              close_rel(r[i].mem_optim, params * 12 / replicas[i], 1e-12) && r[i].mem_temp == want_temp[i] &&
              close_rel(r[i].mem_total, states + want_act[i] + want_temp[i] + d.mem_overhead, 1e-12) && !r[i].fits;
    }
    check(ok, "llama3_405b_memory_hand",
          "rc %d; stage %d %d %d, in flight %d %d %d (want 1, 141 128 128); activations %.3f %.3f %.3f GiB (want "
          "%.3f %.3f %.3f), gradients %.3f %.3f %.3f (want %.3f %.3f %.3f), total %.3f %.3f %.3f",
          rc, r[0].worst_stage, r[1].worst_stage, r[2].worst_stage, r[0].in_flight, r[1].in_flight, r[2].in_flight,
          r[0].mem_act / GiB, r[1].mem_act / GiB, r[2].mem_act / GiB, want_act[0] / GiB, want_act[1] / GiB,
          want_act[2] / GiB, r[0].mem_grads / GiB, r[1].mem_grads / GiB, r[2].mem_grads / GiB, want_grads[0] / GiB,
          want_grads[1] / GiB, want_grads[2] / GiB, r[0].mem_total / GiB, r[1].mem_total / GiB, r[2].mem_total / GiB);
}

// Gradients created at each chunk's first backward (PlanSetup grads_lazy: PyTorch autograd's .grad, FSDP's unsharded
// gradient; memory.h pipe_peak_lazy_grads), by hand on stage 0 of pp 4 x vpp 2, 4 layers a chunk, a layer's
// activations 1 B and a chunk's gradients 10 B. At m 4 (= pp) Megatron's order runs all 8 forwards first (32 B of
// activations), then chunk 1's backwards: its gradients come at the first (42 B), and when chunk 0's first backward
// adds its own 4 backwards have freed 16 B (36 B): the peak is 42 where gradients counted before the step give 52. At
// m 8 the steady state's first backward comes with 11 pairs in flight (44 B + 10) and chunk 0's first backward 4
// forward-backward pairs later with 11 again (44 + 20 = 64): no saving.
static void test_lazy_grads(void) {
    ModelConfig c = model("llama-13b", 0);
    c.pp = 4, c.vpp = 2, c.schedule = SCHED_INTERLEAVED;
    int layers[8] = {4, 4, 4, 4, 4, 4, 4, 4};
    double grad[2] = {10, 10}, act4, grad4, act8, grad8;
    double p4 = pipe_peak_lazy_grads(&c, 4, 0, layers, 1, grad, &act4, &grad4);
    double p8 = pipe_peak_lazy_grads(&c, 8, 0, layers, 1, grad, &act8, &grad8);
    check(p4 == 42 && act4 == 32 && grad4 == 10 && p8 == 64 && act8 == 44 && grad8 == 20, "lazy_grads_peak_hand",
          "m 4: %.0f B (%.0f activations, %.0f gradients; want 42, 32, 10); m 8: %.0f B (%.0f, %.0f; want 64, 44, 20)",
          p4, act4, grad4, p8, act8, grad8);
    // Their accumulation (time.h grad_accumulate_time): LLaMA-7B on one A100 (pp 1, no data parallelism), 8
    // micro-batches of 2048 tokens, fp32 gradients of bf16 weights: the first backward converts (2 + 4 B a
    // parameter), the 7 others add (2 + 4 + 4): 9.5 B a parameter a micro-batch on average, 6738415616 parameters
    // (test_runs_grad_dtype), at HBM's bandwidth x hbm_eff plus one launch; the step is 8 of them longer. In bf16
    // (autograd keeps the first, adds the others: 2 + 2 + 2) 5.25 B.
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK), lazy;
    k.grad_bytes = 4, lazy = k, lazy.grads_lazy = 1;
    ModelConfig m7 = model("llama-7b", 2048);
    PlanResult up, lz;
    int rc = plan_predict(&m7, &k, 8, 8, &d, &up) | plan_predict(&m7, &lazy, 8, 8, &d, &lz);
    double n = 6738415616.0, bw = d.hbm_bw * d.hbm_eff, want = 8 * (9.5 * n / bw + d.op_latency);
    check(rc == 0 && close_rel(lz.t_pipeline - up.t_pipeline, want, 1e-9) &&
              close_rel(grad_accumulate_time(&d, 2, n, 8), 5.25 * n / bw + d.op_latency, 1e-12),
          "lazy_grads_accumulation_hand", "step %.4f s longer (want %.4f); bf16 %.4f s a micro-batch",
          lz.t_pipeline - up.t_pipeline, want, grad_accumulate_time(&d, 2, n, 8));
}

// The zero-bubble schedules (Qi et al. 2024; layout/schedule.h): bubbles against the
// formulas, the weight pass's memory and time, ZB-V's placement (test_cli_schedules: the
// search and its --schedule filter).
static double sim_bubble(int kind, int p, int vpp, int m, double t_f, double t_b, double t_w) {
    double tf[16], tb[16], tw[16], busy[8];
    for (int g = 0; g < p * vpp; g++) tf[g] = t_f, tb[g] = t_b, tw[g] = t_w;
    double span = schedule_simulate(kind, p, vpp, m, NULL, tf, tb, tw, 0, SENDS_ASYNC, busy);
    return bubble_fraction(span, busy[0]);
}

// One definition of the bubble (layout/schedule.h), the step line's, the log's and the planner's:
// the share of the schedule a stage is idle, in [0, 1) even where p-1 > m; the measured one
// (bubble_fraction) and the textbook one (bubble_formula) agree, GPipe's (p-1)/(m+p-1).
static void test_bubble_definition(void) {
    check(fabs(bubble_fraction(3, 2) - 1.0 / 3) < 1e-15 && bubble_fraction(2, 2) == 0 && bubble_fraction(2, 3) == 0 &&
              bubble_fraction(0, 0) == 0,
          "bubble_fraction_is_idle_over_wall", "3 s wall, 2 s busy: %.6f (want 1/3); busy >= wall: %g, %g; no wall: %g",
          bubble_fraction(3, 2), bubble_fraction(2, 2), bubble_fraction(2, 3), bubble_fraction(0, 0));
    double b_deep = bubble_formula(SCHED_1F1B, 8, 1, 2), b_one = bubble_formula(SCHED_1F1B, 1, 1, 4);
    check(fabs(b_deep - 7.0 / 9) < 1e-15 && b_deep < 1 && b_one == 0 &&
              fabs(bubble_formula(SCHED_GPIPE, 4, 1, 8) - 3.0 / 11) < 1e-15 &&
              fabs(bubble_formula(SCHED_INTERLEAVED, 4, 2, 8) - 3.0 / 19) < 1e-15 &&
              fabs(bubble_formula(SCHED_ZBH1, 4, 1, 8) - 3.0 / 27) < 1e-15 &&
              fabs(bubble_formula(SCHED_DUALPIPEV, 4, 2, 8) - 3.0 / 51) < 1e-15 &&
              bubble_formula(SCHED_ZBV, 4, 2, 8) == 0,
          "bubble_formula_is_a_share_of_the_step", "pp 8 m 2: %.6f (want 7/9, below 1); pp 1: %g", b_deep, b_one);
}

static void test_zero_bubble_schedules(void) {
    // F = B = W, no p2p: ZB-H1's bubble is (p-1)/(3m+p-1) (p = 4, m = 8: 1/9), its idle time a third
    // of 1F1B's for the same work; ZB-V (each stage's work in two chunks of half the time) has less
    int p = 4, m = 8;
    double zbh1 = sim_bubble(SCHED_ZBH1, p, 1, m, 1, 1, 1), zbv = sim_bubble(SCHED_ZBV, p, 2, m, 0.5, 0.5, 0.5);
    double onef1b = sim_bubble(SCHED_1F1B, p, 1, m, 1, 1, 1);
    check(fabs(zbh1 - bubble_formula(SCHED_ZBH1, p, 1, m)) < 1e-12 && fabs(zbh1 - 1.0 / 9) < 1e-12 &&
              fabs(3 * zbh1 / (1 - zbh1) - onef1b / (1 - onef1b)) < 1e-12,
          "bubble_zbh1_equals_formula", "simulated %.6f, (p-1)/(3m+p-1) = %.6f, 1F1B %.6f", zbh1,
          bubble_formula(SCHED_ZBH1, p, 1, m), onef1b);
    check(zbv <= zbh1 && zbv >= 0, "bubble_zbv_at_most_zbh1", "ZB-V %.6f, ZB-H1 %.6f", zbv, zbh1);
    // what sizes ZB-H1's memory: every stage holds p activations, stage s owes s+1 W's at most
    PipeOp ops[7 * 8];
    int ok = 1;
    char got[128] = "";
    for (int s = 0; s < p; s++) {
        int n = schedule_build(SCHED_ZBH1, s, p, 1, m, NULL, ops), held = schedule_max_in_flight(ops, n, -1),
            owed = schedule_max_w_owed(ops, n, -1);
        ok &= held == p && owed == s + 1;
        snprintf(got + strlen(got), sizeof(got) - strlen(got), " stage %d: %d/%d", s, held, owed);
    }
    check(ok, "zbh1_in_flight_and_w_owed", "held/owed:%s", got);

    // The planner, llama-13b, tp 1, pp 4 (10 layers a stage), dp 16, mb 1, 128 micro-batches, a framework: a pair's
    // activations are held from its F to its B, then what its W reads (M_W, Qi et al. 2023 Table 1): per layer and
    // micro-batch the output gradients 2048 tokens x (2 x 5120 + 2 x 13824 + 3 x 5120) x 2 bytes = 218103808 B
    // (w_inputs_per_layer) and the matmuls' inputs 2048 x (3 x 5120 + 13824) x 2 = 119537664 B. With M_W below a
    // layer's activations ZB-H1's peak is 1F1B's, on stage 0 (4 held, none owed: the paper's (p - i + 1) M_B +
    // (i - 1) M_W at i = 1); stage 3 holds 1 and owes 3 (zbh1_framework_memory_hand counts one by hand).
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanSetup k = framework_setup();
    ModelConfig c = model("llama-13b", 0);
    c.pp = 4, c.dp = 16;
    PlanResult r1, rz;
    int rc1 = plan_predict(&c, &k, 2048, 8, &d, &r1);
    c.schedule = SCHED_ZBH1;
    int rcz = plan_predict(&c, &k, 2048, 8, &d, &rz);
    double w_layer = 2048.0 * (2 * 5120 + 2 * 13824 + 3 * 5120) * 2, kept = 2048.0 * (3 * 5120 + 13824) * 2;
    check(rc1 == 0 && rcz == 0 && w_inputs_per_layer(&c, 1, 1, 1, 2) == w_layer &&
              w_saved_inputs_per_layer(&c, 1, 1, 1, 2) == kept && rz.worst_stage == 0 && r1.worst_stage == 0 &&
              rz.mem_w_inputs == 0 && rz.mem_act == r1.mem_act && r1.w_pending == 0 && r1.mem_w_inputs == 0,
          "zbh1_memory_w_inputs",
          "ZB-H1 worst stage %d (1F1B %d): W inputs %.0f B, activations %.0f vs 1F1B %.0f; per layer %.0f + %.0f B "
          "(want %.0f + %.0f)", rz.worst_stage, r1.worst_stage, rz.mem_w_inputs, rz.mem_act, r1.mem_act,
          w_inputs_per_layer(&c, 1, 1, 1, 2), w_saved_inputs_per_layer(&c, 1, 1, 1, 2), w_layer, kept);
    check(rz.mem_total == r1.mem_total, "zbh1_memory_as_1f1b", "ZB-H1 %.2f GiB, 1F1B %.2f GiB", rz.mem_total / GiB,
          r1.mem_total / GiB);
    // time: the same work (W is the weight-gradient half of the layer's backward matmuls, B the
    // rest); the W's ZB-H1 owes fill 1F1B's cool-down: it saves more than half of 1F1B's idle
    // time (makespan - busiest stage's compute)
    double saved = r1.t_pipeline - rz.t_pipeline, bubble_1f1b = r1.bubble * r1.t_pipeline;
    check(rz.t_layer_w > 0 && rz.t_layer_w < rz.t_layer_bwd - rz.t_layer_w && rz.t_layer_bwd == r1.t_layer_bwd &&
              rz.t_step < r1.t_step && saved > 0.5 * bubble_1f1b,
          "zbh1_step_below_1f1b",
          "step ZB-H1 %.3f s, 1F1B %.3f s: saves %.3f s of 1F1B's %.3f s bubble; layer B %.2f ms, W %.2f ms", rz.t_step,
          r1.t_step, saved, bubble_1f1b, 1e3 * (rz.t_layer_bwd - rz.t_layer_w), 1e3 * rz.t_layer_w);
    c.recompute = RECOMPUTE_FULL;
    rcz = plan_predict(&c, &k, 2048, 8, &d, &rz);
    check(rcz == -1 && strstr(rz.invalid, "recompute full"), "zbh1_refuses_full_recompute", "%s",
          rcz ? rz.invalid : "accepted");

    // ZB-V places chunks 0 and 2pp-1 on stage 0: GPT-2 124M (tied head), pp 2, 3 layers a chunk.
    // Stage 0 holds the embedding, 6 layers, the final norm and the head with one wte, and the
    // logits; stage 1 (1F1B's head stage) holds 6 layers only. The planner's stage-0 weights are
    // params.h's stage-0 tensors.
    c = model("gpt2-124m", 0);
    c.pp = 2, c.vpp = 2, c.schedule = SCHED_ZBV;
    PlanResult rv;
    int rcv = plan_predict(&c, &k, 64, 8, &d, &rv);
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout) * 2);
    param_layout_build(&P[0], &c, 1, 0, 2, 2, 0, 1);
    param_layout_build(&P[1], &c, 1, 0, 2, 2, 1, 1);
    double C = c.d_model, n = c.seq_len, logits = n * c.vocab_padded * (2 + 16) + n * C * 2;
    check(
        rcv == 0 && rv.worst_stage == 0 && rv.mem_weights == 2.0 * P[0].n_local && P[0].has_embed && P[0].has_head &&
            !P[1].has_embed && !P[1].has_head && rv.mem_temp == logits,
        "zbv_embedding_and_head_on_stage0",
        "worst stage %d: weights %.0f B (params.h stage 0: 2 x %zu, embed %d head %d; stage 1 embed %d head %d), "
        "temporaries %.0f (logits %.0f)",
        rv.worst_stage, rv.mem_weights, P[0].n_local, P[0].has_embed, P[0].has_head, P[1].has_embed, P[1].has_head,
        rv.mem_temp, logits);
    // the same layout under 1F1B (one chunk a stage): the head's stage 1 keeps a second wte
    c.vpp = 1, c.schedule = SCHED_1F1B;
    PlanResult rl;
    plan_predict(&c, &k, 64, 8, &d, &rl);
    param_layout_build(&P[1], &c, 1, 0, 2, 1, 1, 1);
    check(rl.worst_stage == 1 && rl.mem_weights == 2.0 * P[1].n_local && P[1].has_head && !P[1].has_embed &&
          P[1].n_local == 6 * (12 * C * C + 13 * C) + 2 * C + c.vocab_padded * C, "1f1b_tied_copy_on_last_stage",
          "worst stage %d: weights %.0f B, params.h stage 1: 2 x %zu", rl.worst_stage, rl.mem_weights, P[1].n_local);
    free(P);
}

// Context parallelism (layer_parallel/context_parallel.h): memory per rank, the ring's and the
// all-to-all's volumes and times by hand, 2D as their sum, the KV-heads limit, node placement.

// Context parallelism's memory: activations, states and temporaries by cp, throughput per GPU; the
// cp 1 prediction goes to r1 (the refusals' check compares with it).
static void test_cp_memory(PlanResult* r1_out) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    PlanSetup k = framework_setup();
    // llama-7b at 32k tokens, tp 1, pp 1, dp 16, ZeRO-1, flash2: cp 1, then cp 4 as a ring and as Ulysses
    ModelConfig c = model("llama-7b", 32768);
    c.dp = 16, c.zero = 1;
    PlanResult r1, r4, u4;
    int rc1 = plan_predict(&c, &k, 128, 8, &d, &r1);
    c.cp = 4;
    int rc4 = plan_predict(&c, &k, 128, 8, &d, &r4);
    c.cp_ulysses = 4;
    int rcu = plan_predict(&c, &k, 128, 8, &d, &u4);
    check(rc1 == 0 && rc4 == 0 && rcu == 0 && fabs(r1.mem_act / r4.mem_act - 4) < 1e-12 && u4.mem_act == r4.mem_act,
          "cp_activations_fall_by_cp", "activations cp1 %.3f GiB, ring cp4 %.3f GiB (ratio %.6f), Ulysses cp4 %.3f GiB",
          r1.mem_act / GiB, r4.mem_act / GiB, r1.mem_act / r4.mem_act, u4.mem_act / GiB);
    // weights replicated over cp, optimizer states sharded over dp x cp = 64; the loss's logits fall
    // by cp and the cp buffers come on top: a rank's 8192 tokens give an output of 8192 x 4096 =
    // 33554432 values and K, V of 67108864: the fp32 output and a step's own dK, dV, 4 x (33554432 +
    // 67108864), and two ring buffers of bf16 K, V and fp32 dK, dV, 2 x 67108864 x (2 + 4): 1207959552 B;
    // Ulysses adds the head-split q, k, v (3 x 8192 x 12288 values), output and its gradient
    // (2 x 33554432), all bf16: 738197504 B
    double ring_buf = 1207959552, ulysses_buf = 738197504;
    check(r4.mem_weights == r1.mem_weights && r4.mem_optim * 4 == r1.mem_optim &&
              fabs(r4.mem_temp - ring_buf - r1.mem_temp / 4) < 1 &&
              fabs(u4.mem_temp - ring_buf - ulysses_buf - r1.mem_temp / 4) < 1,
          "cp_states_and_temporaries",
          "weights %.0f / %.0f B, optimizer %.0f / %.0f B, temporaries cp1 %.0f, ring %.0f, Ulysses %.0f B",
          r4.mem_weights, r1.mem_weights, r4.mem_optim, r1.mem_optim, r1.mem_temp, r4.mem_temp, u4.mem_temp);
    check(fabs(r4.tokens_per_s_per_gpu * r4.t_step * 64 - 128 * 32768.0) < 1e-6 * 128 * 32768,
          "cp_throughput_per_gpu_counts_cp", "%.1f tokens/s/GPU x %.3f s x 64 GPUs, want 4194304 tokens",
          r4.tokens_per_s_per_gpu, r4.t_step);
    *r1_out = r1;
}

// The ring's, the all-to-all's and 2D's exchanges by hand.
static void test_cp_exchanges(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    // The ring by hand: llama3-8b (8 KV heads of 128), 32k tokens, tp 2, cp 4: a rank's K and V are
    // 8192 tokens x 2 x 4 heads x 128 = 8388608 values, 16 MiB in bf16 and 32 MiB as fp32 dK, dV.
    // Forward: 3 steps of K, V, each exposed by what its block's compute (a quarter of the
    // attention) does not hide; backward: 4 exchanges hidden the same way (K, V; K, V with dK, dV
    // twice; dK, dV), then dK, dV home with nothing to hide them.
    ModelConfig g = model("llama3-8b", 32768);
    DeviceProfile dq = d;
    dq.comm_interference = 0;
    Link ring = cp_ring_link(&dq, 2, 4, 8), unused = {1, 0, 0, 0, 0, NULL};
    double kv_b = 16777216, dkv_b = 33554432, step_kv = kv_b / ring.bw + ring.lat,
           step_dkv = dkv_b / ring.bw + ring.lat;
    double step_both = (kv_b + dkv_b) / ring.bw + ring.lat;
    CpTime hidden = cp_layer_time(&g, 1, 2, 4, 1, &dq, 1.0, 1.0, ring, unused);  // blocks of 0.25 s hide every exchange
    CpTime bare = cp_layer_time(&g, 1, 2, 4, 1, &dq, 0, 0, ring, unused);
    // blocks of half a K, V step
    CpTime half = cp_layer_time(&g, 1, 2, 4, 1, &dq, 2 * step_kv, 2 * step_kv, ring, unused);
    check(cp_kv_elems(&g, 1, 2, 4) == 8388608 && hidden.bytes_fwd == 3 * kv_b &&
              hidden.bytes_bwd == 3 * kv_b + 4 * dkv_b && close_rel(hidden.comm_fwd, 3 * step_kv, 1e-12) &&
              close_rel(hidden.comm_bwd, step_kv + 2 * step_both + 2 * step_dkv, 1e-12),
          "cp_ring_volume", "%.0f values; forward %.0f B in %.3f ms, backward %.0f B in %.3f ms",
          cp_kv_elems(&g, 1, 2, 4), hidden.bytes_fwd, 1e3 * hidden.comm_fwd, hidden.bytes_bwd, 1e3 * hidden.comm_bwd);
    check(
        hidden.fwd == 0 && close_rel(hidden.bwd, step_dkv, 1e-12) && close_rel(bare.fwd, 3 * step_kv, 1e-12) &&
            close_rel(bare.bwd, step_kv + 2 * step_both + 2 * step_dkv, 1e-12) &&
            close_rel(half.fwd, 1.5 * step_kv, 1e-12) &&
            close_rel(half.bwd, 2 * step_both + 2 * step_dkv - step_kv, 1e-12),
        "cp_ring_overlap",
        "exposed forward / backward: hidden %.3f / %.3f ms, bare %.3f / %.3f ms, half %.3f / %.3f ms (K, V step %.3f "
        "ms, dK, dV %.3f ms)",
        1e3 * hidden.fwd, 1e3 * hidden.bwd, 1e3 * bare.fwd, 1e3 * bare.bwd, 1e3 * half.fwd, 1e3 * half.bwd,
        1e3 * step_kv, 1e3 * step_dkv);

    // The all-to-all by hand: llama-7b, 32k tokens, tp 1, cp = U = 8: 4096 tokens x (q, k, v 3 x 4096
    // and the output 4096) x 2 bytes x 7/8 = 117440512 B forward, twice that backward, none hidden.
    // GQA, llama3-8b, tp 2, cp = U = 4: 8192 tokens x (4096 + 2 x 1024 + 4096) / 2 x 2 x 3/4 = 62914560 B.
    ModelConfig m7 = model("llama-7b", 32768);
    Link a2a = cp_alltoall_link(&d, 1, 8, 8);
    double v = 117440512, two = v / a2a.bw + 2 * a2a.lat;
    CpTime u = cp_layer_time(&m7, 1, 1, 8, 8, &d, 1.0, 1.0, unused, a2a);
    check(cp_alltoall_bytes(&m7, 1, 1, 8, 8, 2) == v && cp_alltoall_bytes(&g, 1, 2, 4, 4, 2) == 62914560 &&
              u.bytes_fwd == v && u.bytes_bwd == 2 * v && close_rel(u.comm_fwd, two, 1e-12) &&
              close_rel(u.fwd, two, 1e-12) && close_rel(u.bwd, 2 * two, 1e-12),
          "cp_alltoall_volume",
          "forward %.0f B (want %.0f), backward %.0f B; exposed %.3f / %.3f ms (want %.3f / %.3f)", u.bytes_fwd, v,
          u.bytes_bwd, 1e3 * u.fwd, 1e3 * u.bwd, 1e3 * two, 2e3 * two);

    // 2D is the sum of its parts: cp 8 = U 2 x R 4 (llama-7b, tp 1, nothing hidden): the ring's K, V
    // (64 MiB) and dK, dV (128 MiB) exchanges as above, and the all-to-all of U = 2 (4096 x 16384 x 2
    // x 1/2 B); at U = 1 it is the ring alone (R = 8), at R = 1 Ulysses alone (the case above)
    Link ring1 = cp_ring_link(&dq, 1, 8, 8), a2a2 = cp_alltoall_link(&dq, 1, 2, 8);
    double kv7 = 67108864, dkv7 = 134217728, s_kv = kv7 / ring1.bw + ring1.lat, s_dkv = dkv7 / ring1.bw + ring1.lat;
    double s_both = (kv7 + dkv7) / ring1.bw + ring1.lat, v2 = 67108864, two2 = v2 / a2a2.bw + 2 * a2a2.lat;
    CpTime t2 = cp_layer_time(&m7, 1, 1, 8, 2, &dq, 0, 0, ring1, a2a2),
           tr = cp_layer_time(&m7, 1, 1, 8, 1, &dq, 0, 0, ring1, a2a2);
    check(t2.bytes_fwd == 3 * kv7 + v2 && t2.bytes_bwd == 3 * kv7 + 4 * dkv7 + 2 * v2 &&
              close_rel(t2.fwd, 3 * s_kv + two2, 1e-12) &&
              close_rel(t2.bwd, s_kv + 2 * s_both + 2 * s_dkv + 2 * two2, 1e-12),
          "cp_2d_is_ring_plus_ulysses", "forward %.0f B, %.3f ms; backward %.0f B, %.3f ms", t2.bytes_fwd, 1e3 * t2.fwd,
          t2.bytes_bwd, 1e3 * t2.bwd);
    check(tr.bytes_fwd == 7 * kv7 && tr.bytes_bwd == 7 * kv7 + 8 * dkv7 && close_rel(tr.fwd, 7 * s_kv, 1e-12) &&
              close_rel(tr.bwd, s_kv + 6 * s_both + 2 * s_dkv, 1e-12) && cp_kind_of(8, 1) == CPK_RING &&
              cp_kind_of(8, 8) == CPK_ULYSSES && cp_kind_of(8, 2) == CPK_2D && cp_kind_of(1, 1) == CPK_NONE,
          "cp_2d_ends_are_ring_and_ulysses", "U 1: forward %.0f B, %.3f ms (want %.3f)", tr.bytes_fwd, 1e3 * tr.fwd,
          7e3 * s_kv);
}

// The attention's work over cp ranks, the KV-heads limit, node placement, recomputation, the
// gradients' reduction and refusals; r1 is test_cp_memory's cp 1 prediction.
static void test_cp_work_and_refusals(const PlanResult* r1) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    PlanSetup k = framework_setup();
    DeviceProfile dq = d;
    dq.comm_interference = 0;
    ModelConfig m7 = model("llama-7b", 32768);
    ModelConfig c;
    // The attention's work is split evenly: each of 4 ring ranks does a quarter (one kernel per block)
    Link fast = {1e30, 0, 0, 0, 0, NULL};
    LayerTime a1 = layer_time(&m7, 1, 1, 0, 1, 1, &k, &dq, fast, fast, fast),
              a4 = layer_time(&m7, 1, 1, 0, 4, 1, &k, &dq, fast, fast, fast);
    check(close_rel(4 * (a4.attn_fwd - 4 * dq.op_latency), a1.attn_fwd - dq.op_latency, 1e-12),
          "cp_attention_split_evenly", "attention forward cp1 %.3f ms, cp4 %.3f ms", 1e3 * a1.attn_fwd,
          1e3 * a4.attn_fwd);
    // --cp-split contiguous (to measure the imbalance): the 4 ring steps wait for 3.5 blocks' work, not 2
    ModelConfig mc = m7;
    mc.cp_contiguous = 1;
    LayerTime ac = layer_time(&mc, 1, 1, 0, 4, 1, &k, &dq, fast, fast, fast),
              au = layer_time(&mc, 1, 1, 0, 4, 4, &k, &dq, fast, fast, fast);
    check(close_rel(ac.attn_fwd - 4 * dq.op_latency, 7.0 / 4 * (a4.attn_fwd - 4 * dq.op_latency), 1e-12) &&
              close_rel(au.attn_fwd - dq.op_latency, (a1.attn_fwd - dq.op_latency) / 4, 1e-12),
          "cp_contiguous_split_imbalance",
          "ring cp4 contiguous %.3f ms vs zig-zag %.3f ms; Ulysses cp4 (no ring) %.3f ms", 1e3 * ac.attn_fwd,
          1e3 * a4.attn_fwd, 1e3 * au.attn_fwd);

    // Ulysses splits the KV heads of a tp rank: llama3-8b has 8
    ModelConfig q = model("llama3-8b", 32768);
    PlanResult rq;
    q.dp = 8, q.cp = q.cp_ulysses = 8;
    int ok8 = plan_predict(&q, &k, 128, 8, &d, &rq) == 0;
    q.dp = 4, q.cp = q.cp_ulysses = 16;
    int no16 = plan_predict(&q, &k, 128, 8, &d, &rq) == -1 && strstr(rq.invalid, "the 8 KV heads");
    q.tp = 2, q.cp = q.cp_ulysses = 8;
    int no_tp2 = plan_predict(&q, &k, 128, 8, &d, &rq) == -1 && strstr(rq.invalid, "the 4 KV heads");
    q.cp_ulysses = 4;
    int ok_2d = plan_predict(&q, &k, 128, 8, &d, &rq) == 0;
    check(ok8 && no16 && no_tp2 && ok_2d, "cp_ulysses_kv_heads_limit",
          "U8 tp1 %d, U16 refused %d, U8 tp2 refused %d, 2D U4 x R2 tp2 %d", ok8, no16, no_tp2, ok_2d);

    // Node placement (8 GPUs a node): tp 2 x cp 4 stays on NVLink, tp 2 x cp 8 crosses nodes; the all-to-all
    // leaves the node once tp x U > 8 (then the 8 of 16 peers off the node go through the GPU's NIC share)
    Link in = cp_ring_link(&d, 2, 4, 8), out = cp_ring_link(&d, 2, 8, 8);
    Link a_in = cp_alltoall_link(&d, 1, 8, 8), a_out = cp_alltoall_link(&d, 1, 16, 8);
    double nic = d.nic_eff * d.nics_per_gpu * d.nic_bw;
    check(in.bw == d.intra_bw * d.link_eff && in.lat == d.intra_latency && out.bw == nic &&
              out.lat == d.inter_latency && a_in.bw == in.bw && close_rel(a_out.bw, nic * 15 / 8, 1e-12),
          "cp_links_by_node", "ring tp2 cp4 %.0f GB/s, tp2 cp8 %.1f GB/s; all-to-all U8 %.0f GB/s, U16 %.1f GB/s",
          in.bw / 1e9, out.bw / 1e9, a_in.bw / 1e9, a_out.bw / 1e9);
    c = model("llama-7b", 32768);
    PlanResult on, off;
    c.tp = 2, c.cp = 4, c.dp = 8;
    plan_predict(&c, &k, 128, 8, &d, &on);
    c.cp = 8, c.dp = 4;
    plan_predict(&c, &k, 128, 8, &d, &off);
    double s_on = on.t_cp_comm / on.cp_bytes, s_off = off.t_cp_comm / off.cp_bytes;
    check(!on.cp_off_node && off.cp_off_node && s_off > 5 * s_on, "cp_over_the_network_when_tp_cp_exceeds_node",
          "tp2 cp4: off node %d, %.2f ms/GB; tp2 cp8: off node %d, %.2f ms/GB", on.cp_off_node, 1e3 * s_on * 1e9,
          off.cp_off_node, 1e3 * s_off * 1e9);

    // Recomputation (selective or full) runs the attention's forward again with its all-to-alls:
    // Ulysses' communication goes from 3 to 4 all-to-all pairs per layer
    PlanResult none_rc, sel;
    q = model("llama3-8b", 32768);
    q.dp = 8, q.cp = q.cp_ulysses = 8;
    plan_predict(&q, &k, 128, 8, &d, &none_rc);
    q.recompute = RECOMPUTE_SELECTIVE;
    plan_predict(&q, &k, 128, 8, &d, &sel);
    check(close_rel(sel.t_cp_comm / none_rc.t_cp_comm, 4.0 / 3, 1e-12) && sel.t_cp_exposed > none_rc.t_cp_exposed,
          "cp_recompute_repeats_the_forward", "cp communication %.3f s, with selective recomputation %.3f s",
          none_rc.t_cp_comm, sel.t_cp_comm);

    // The weights' gradients are reduced over dp x cp (dp 1, cp 8: still an all-reduce); refusals
    c = model("llama-7b", 32768);
    c.cp = 8, c.zero = 1;
    PlanResult dpcp;
    plan_predict(&c, &k, 16, 8, &d, &dpcp);
    c.cp = 32, c.zero = 0, c.seq_len = 96;
    PlanResult z;
    int short_seq = plan_predict(&c, &k, 16, 8, &d, &z) == -1 && strstr(z.invalid, "2 x cp = 64 equal chunks");
    c.cp = 16;
    int ok_seq = plan_predict(&c, &k, 16, 8, &d, &z) == 0;
    c = model("llama-7b", 32768);
    c.cp = 2;
    PlanSetup scaling = plan_setup_for(SOFTWARE_SCALING);
    int no_scaling = plan_predict(&c, &scaling, 16, 8, &d, &z) == -1 && strstr(z.invalid, "no context parallelism");
    check(
        dpcp.t_dp_comm > 0 && dpcp.mem_optim * 8 == r1->mem_optim * 16 && short_seq && ok_seq && no_scaling,
        "cp_gradients_and_refusals",
        "dp1 cp8: DP communication %.3f s, optimizer %.2f GiB; ring cp32 on 96 tokens refused %d, cp16 accepted %d; "
        "Scaling refuses cp %d",
        dpcp.t_dp_comm, dpcp.mem_optim / GiB, short_seq, ok_seq, no_scaling);
}

// Llama 3's all-gather context parallelism (Dubey et al. 2024, section 3.3.2; time.h "All-gather") by hand, on
// test_cp_memory's layout (llama-7b, 32k tokens, tp 1, dp 16, cp 4, ZeRO-1, flash2, 8 micro-batches): a rank's K
// and V are 8192 tokens x 2 x 4096 = 67108864 values; the forward's all-gather sends 3 of those pieces in bf16,
// 402653184 B, over NVLink (cp 4 in a node; the software's link_eff) in NCCL's ring, 3 steps: 402653184 / bw +
// 8.4 us + 3 x the step latency, exposed; the backward's reduce-scatter of dK, dV the same. Per step: 8 micro-
// batches x 32 layers x 2.
// Memory: each layer keeps the gathered K and V, 32768 x 2 x 4096 x 2 B, where the ring keeps its own quarter:
// 402653184 B more a layer, x 32 layers (pp 1: one micro-batch in flight) = 12 GiB; the temporaries: one layer's
// gathered dK, dV (536870912 B) in place of the ring's buffers. The attention runs 2 kernels (a rank's two
// chunks), the ring 4 (its blocks), the same FLOPs. Refused: this trainer, a Ulysses degree, unfused attention.
static void test_cp_allgather(const PlanResult* r1) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    PlanSetup k = framework_setup(), ag = k;
    ag.cp_allgather = 1;
    ModelConfig c = model("llama-7b", 32768);
    c.dp = 16, c.zero = 1, c.cp = 4;
    PlanResult ring, all;
    int rc = plan_predict(&c, &k, 128, 8, &d, &ring) | plan_predict(&c, &ag, 128, 8, &d, &all);
    Link nv = group_link(&d, 4, 1, 8);
    double sent = 402653184, one = sent / (d.intra_bw * software_link_eff(&ag, &d)) + 8.4e-6 + 3 * d.intra_latency;
    check(rc == 0 && nv.nodes == 1 && all.cp_bytes == 8 * 32 * 2 * sent &&
              close_rel(all.t_cp_comm, 8 * 32 * 2 * one, 1e-12) && all.t_cp_exposed == all.t_cp_comm,
          "cp_allgather_volume_exposed", "%.0f B a step (want %.0f), %.4f s, exposed %.4f s (want %.4f)", all.cp_bytes,
          8 * 32 * 2 * sent, all.t_cp_comm, all.t_cp_exposed, 8 * 32 * 2 * one);
    double more = 32 * 402653184.0, temp = r1->mem_temp / 4 + 536870912;
    check(fabs(all.mem_act - ring.mem_act - more) < 1 && fabs(all.mem_temp - temp) < 1,
          "cp_allgather_keeps_gathered_kv",
          "activations %.0f B over the ring's (want %.0f), temporaries %.0f (want %.0f)",
          all.mem_act - ring.mem_act, more, all.mem_temp, temp);
    DeviceProfile dq = d;
    dq.comm_interference = 0;
    Link fast = {1e30, 0, 0, 0, 0, NULL};
    LayerTime a4 = layer_time(&c, 1, 1, 0, 4, 1, &k, &dq, fast, fast, fast),
              g4 = layer_time(&c, 1, 1, 0, 4, 1, &ag, &dq, fast, fast, fast);
    check(close_rel(g4.attn_fwd - g4.cp.fwd - 2 * dq.op_latency, a4.attn_fwd - 4 * dq.op_latency, 1e-12) &&
              close_rel(g4.cp.fwd, 8.4e-6, 1e-9) && a4.cp.fwd == 0,
          "cp_allgather_same_attention_work", "attention forward all-gather %.4f ms (its gather %.4f ms), ring %.4f ms",
          1e3 * g4.attn_fwd, 1e3 * g4.cp.fwd, 1e3 * a4.attn_fwd);
    PlanResult r;
    PlanSetup own = plan_setup_default(), torch = ag;
    own.cp_allgather = 1, torch.attention = ATTN_TORCH;
    int no_own = plan_predict(&c, &own, 128, 8, &d, &r) == -1 && strstr(r.invalid, "not this trainer's");
    int no_torch = plan_predict(&c, &torch, 128, 8, &d, &r) == -1 && strstr(r.invalid, "flash kernel");
    c.cp_ulysses = 2;
    int no_u = plan_predict(&c, &ag, 128, 8, &d, &r) == -1 && strstr(r.invalid, "no Ulysses degree");
    check(no_own && no_torch && no_u, "cp_allgather_refusals", "trainer %d, torch attention %d, Ulysses 2 %d", no_own,
          no_torch, no_u);
}

// FlashAttention-2's backward under GQA (time.h flash2_gqa_sum_time; flash_api.cpp mha_bwd): dK and dV written for
// every query head, then summed into their KV heads, reading 2 x keys x heads x hd and writing 2 x keys x kv_heads x
// hd bf16 values, two kernels a call. Llama 3 405B's 131k row (tp 8, cp 16, all-gather: 16 heads and 1 KV head of 128
// a GPU; the rank's two calls see 2 and 31 of 32 chunks of 4096, or any pair i + 1, 32 - i: 135168 keys): 2 x 135168
// x 17 x 128 x 2 = 1176502272 B and 4 kernels. In layer_time, LLaMA-3 8B at 32k on tp 1, cp 4 (32 heads, 8 KV heads):
// the all-gather's calls see 32768 x 9 / 8 = 36864 keys (754974720 B, 2 calls), the ring's 4 blocks 32768 (671088640 B,
// 4 calls); what else differs between the two backwards is the cp time and the attention's launches (2 and 4).
static void test_flash2_gqa_sum(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    double bw = d.hbm_bw * d.hbm_eff, op = d.op_latency;
    ModelConfig c = model("llama-7b", 131072);
    c.n_layer = 126, c.n_head = 128, c.n_kv_head = 8, c.d_model = 16384, c.d_ff = 53248, c.vocab = 128256;
    config_finalize(&c);
    double row = flash2_gqa_sum_time(&c, &d, 1, 8, 16, 1, 2, 1);
    check(close_rel(row, 1176502272.0 / bw + 4 * op, 1e-12), "flash2_gqa_sum_405b_131k_hand", "%.4f ms (want %.4f)",
          1e3 * row, 1e3 * (1176502272.0 / bw + 4 * op));
    ModelConfig m = model("llama3-8b", 32768);
    m.cp = 4;
    PlanSetup ring = plan_setup_for(SOFTWARE_FRAMEWORK);
    ring.attention = ATTN_FLASH2;
    PlanSetup ag = ring;
    ag.cp_allgather = 1;
    DeviceProfile dq = d;
    dq.comm_interference = 0;
    Link fast = {1e30, 0, 0, 0, 0, NULL};
    LayerTime a = layer_time(&m, 1, 1, 0, 4, 1, &ring, &dq, fast, fast, fast),
              g = layer_time(&m, 1, 1, 0, 4, 1, &ag, &dq, fast, fast, fast);
    double sum_g = 754974720.0 / bw + 4 * op, sum_a = 671088640.0 / bw + 8 * op;
    check(close_rel(g.bwd - g.cp.bwd - 2 * op - sum_g, a.bwd - a.cp.bwd - 4 * op - sum_a, 1e-12),
          "flash2_gqa_sum_in_backward", "all-gather %.4f ms (its sum %.4f), ring %.4f ms (its sum %.4f)", 1e3 * g.bwd,
          1e3 * sum_g, 1e3 * a.bwd, 1e3 * sum_a);
}

static void test_context_parallel(void) {
    PlanResult r1;
    test_cp_memory(&r1);
    test_cp_exchanges();
    test_cp_work_and_refusals(&r1);
    test_cp_allgather(&r1);
    test_flash2_gqa_sum();
}

static void test_invalid_layouts(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanSetup k = framework_setup();
    ModelConfig c = model("llama-13b", 0);
    PlanResult r;
    c.tp = 3;  // 40 heads
    check(plan_predict(&c, &k, 2048, 8, &d, &r) == -1 && r.invalid, "invalid_tp_heads", "accepted tp=3 with 40 heads");
    c = model("llama-13b", 0);
    c.pp = 8, c.dp = 1, c.micro_batch = 1;
    check(plan_predict(&c, &k, 4, 8, &d, &r) == -1, "invalid_1f1b_too_few_micro_batches", "accepted m=4 < pp=8");
    c = model("llama-13b", 0);
    c.sp = 1;
    check(plan_predict(&c, &k, 2048, 8, &d, &r) == -1, "invalid_sp_without_tp", "accepted sp with tp=1");
    c = model("llama-13b", 0);
    c.dp = 64, c.zero = 1, c.micro_batch = 2;
    plan_predict(&c, &k, 2048, 8, &d, &r);
    check(!r.fits, "13b_mb2_without_recompute_does_not_fit", "predicted %.1f GiB fits", r.mem_total / GiB);
    c.recompute = RECOMPUTE_FULL;
    plan_predict(&c, &k, 2048, 8, &d, &r);
    check(r.fits && r.hfu > r.mfu, "13b_mb2_full_recompute_fits", "%.1f GiB, HFU %.3f MFU %.3f", r.mem_total / GiB,
          r.hfu, r.mfu);
    double flops = config_flops_per_token(&c, c.seq_len);
    check(close_rel(r.mfu, flops * r.tokens_per_s_per_gpu / d.peak_flops, 1e-12), "mfu_is_palm_flops_over_peak",
          "mismatch");
}
