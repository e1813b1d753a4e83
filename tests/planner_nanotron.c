// test_planner: --software nanotron (huggingface/nanotron at c2528430, the Ultra-Scale Playbook's benchmarks), each
// term by hand on the shapes of scripts/scaling_benchmarks.py.

// A LLaMA of nanotron's benchmark shapes: vocabulary 131072, multi-head attention, 4096 tokens.
static ModelConfig nanotron_model(int n_layer, int d_model, int n_head, int d_ff) {
    ModelConfig c = model("llama-7b", 4096);
    c.n_layer = n_layer, c.d_model = d_model, c.n_head = c.n_kv_head = n_head, c.d_ff = d_ff, c.vocab = 131072;
    config_finalize(&c);
    return c;
}

// nanotron's pipeline cut (models/base.py build_model): the 1.34B model (16 layers of 4 x 2048^2 + 3 x 2048 x 8192 =
// 67108864, the head 131072 x 2048 = 268435456, in all 1342177280) over 2 stages: stage 0's share is 671088640, ten
// layers' exactly; the running sum passes it only with the eleventh layer, so stage 0 holds the embedding and 11
// layers, stage 1 5 layers and the head (the even cut: 8 and 8). A head heavier than a stage's share (4 layers of 65536
// under a 64M-parameter head, pp 4) would land on stage 0 with every layer: refused. The cut has one chunk a stage.
static void test_nanotron_cost_cut(void) {
    ModelConfig c = nanotron_model(16, 2048, 32, 8192);
    c.pp = 2, c.dp = 4, c.micro_batch = 4;
    int layers[2], embed[2], head[2];
    chunk_split(&c, 2, SPLIT_COST, layers, embed, head);
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_NANOTRON);
    PlanResult r, rv, rh;
    int ok = plan_predict(&c, &k, 256, 8, &d, &r) == 0;
    ModelConfig v = c;
    v.vpp = 2, v.schedule = SCHED_INTERLEAVED;
    ok &= plan_predict(&v, &k, 256, 8, &d, &rv) != 0 && strstr(rv.invalid, "one chunk a stage") != NULL;
    ModelConfig h = nanotron_model(4, 64, 1, 256);
    h.vocab = 1000000, h.pp = 4;
    config_finalize(&h);
    int hl[4];
    ok &= chunk_split_cost(&h, 4, hl) == 0 && hl[0] == 4;
    ok &= plan_predict(&h, &k, 64, 8, &d, &rh) != 0 && strstr(rh.invalid, "leaves a stage empty") != NULL;
    check(ok && layers[0] == 11 && layers[1] == 5 && embed[0] && !embed[1] && !head[0] && head[1], "nanotron_cost_cut",
          "layers %d + %d (want 11 + 5), embedding on %d, head on %d; vpp 2: %s; heavy head: %s", layers[0],
          layers[1], embed[0] ? 0 : 1, head[1] ? 1 : 0, rv.invalid, rh.invalid);
}

// nanotron's fp32 gradient accumulation (gradient_accumulator.py: fp32_grad.add_(half_param.grad) after every
// micro-batch's backward): the 1.34B model untied on one GPU holds 16 layers of 67112960 parameters (the matrices and
// two norms), the embedding 268435456 and the final norm and head 268437504: 1610680320, each read in bf16 and fp32
// and written in fp32 (10 bytes) at 3.35 TB/s x 0.58, in 16 x 6 + 1 + 2 = 99 kernels of 4 us: 8.686 ms. On a pp 1
// layout every micro-batch's backward carries it: 8 micro-batches add 8 of it to the step.
static void test_nanotron_grad_accum(void) {
    ModelConfig c = nanotron_model(16, 2048, 32, 8192);
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    double t = fp32_accumulator_time(&c, &d, 16, 1, 1), want = 16106803200.0 / (3.35e12 * 0.58) + 99 * 4e-6;
    c.micro_batch = 1;
    PlanSetup k = plan_setup_for(SOFTWARE_NANOTRON), k0 = k;
    k0.grad_accum_pass = 0;
    PlanResult r, r0;
    int rc = plan_predict(&c, &k, 8, 8, &d, &r) | plan_predict(&c, &k0, 8, 8, &d, &r0);
    double added = r.t_pipeline - r0.t_pipeline;
    check(rc == 0 && fabs(t - want) < 1e-12 && fabs(added - 8 * want) < 1e-9, "nanotron_grad_accum_hand",
          "%.4f ms a micro-batch (want %.4f), 8 micro-batches +%.4f ms (want %.4f)", 1e3 * t, 1e3 * want,
          1e3 * added, 8e3 * want);
}

// nanotron's ZeRO-1 host loops (distributed.py reduce_scatter_coalesced / all_gather_coalesced, optim/zero.py): the
// 3.57B model (28 layers, untied here: 28 x 6 + 1 + 2 = 171 tensors) at tp 4 over dp 128, as the playbook's 64-node
// cell: the reduce-scatter's loop 171 x (1 + 128) = 22059 calls (44 ms, under the backward's 95), the gather's 3 x 171
// x 128 = 65664 calls at 2 us = 0.131328 s after the step. ZeRO-0 instead all-reduces each of the 171 tensors (the
// framework counts one bucket a layer and the two ends: 30).
static void test_nanotron_zero1_host(void) {
    ModelConfig c = nanotron_model(28, 3072, 32, 8192);
    c.tp = 4, c.dp = 128, c.micro_batch = 2, c.sp = 1, c.zero = 1;
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_NANOTRON), k0 = k;
    k0.zero1_list_collectives = 0;
    PlanResult r, r0, z, z0;
    int rc = plan_predict(&c, &k, 256, 8, &d, &r) | plan_predict(&c, &k0, 256, 8, &d, &r0);
    PlanChunks ch = plan_chunks_alloc(1, 1);
    ch.layers[0] = 28, ch.has_embed[0] = ch.has_head[0] = 1;
    double rs, ag;
    zero1_list_host_calls(&c, &ch, 0, 128, &rs, &ag);
    plan_chunks_free(&ch);
    double host = r.t_dp_comm - r0.t_dp_comm;
    ModelConfig c0 = c;
    c0.zero = 0;
    rc |= plan_predict(&c0, &k, 256, 8, &d, &z) | plan_predict(&c0, &k0, 256, 8, &d, &z0);
    PlanLinks links = plan_links(&c0, &k, &d, 8, &z);
    double G = chunk_params(&c0, 28, 1, 1, 4) * 4, want0 = dp_allreduce_time(128, G, 171, links.dp);
    check(rc == 0 && rs == 22059 && ag == 65664 && fabs(host - 0.131328) < 1e-9 && fabs(z.t_dp_comm - want0) < 1e-12 &&
              fabs(z0.t_dp_comm - dp_allreduce_time(128, G, 30, links.dp)) < 1e-12,
          "nanotron_zero1_host_hand", "calls %.0f / %.0f (want 22059 / 65664), gather loop %.6f s (want 0.131328); "
          "ZeRO-0 %.2f ms with 171 collectives, %.2f ms with 30", rs, ag, host, 1e3 * z.t_dp_comm, 1e3 * z0.t_dp_comm);
}

// What nanotron v0.5 does not run is refused under --software nanotron: ZeRO-2/3 (helpers.py builds its
// ZeroDistributedOptimizer for any zero_stage > 0: the optimizer state sharded, nothing more), context parallelism
// (ParallelismArgs has dp, tp, pp and the experts' degree), selective recomputation (recompute_layer: every layer).
static void test_nanotron_options(void) {
    ModelConfig c = nanotron_model(16, 2048, 32, 8192);
    c.dp = 8;
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_NANOTRON);
    PlanResult r;
    ModelConfig z = c, p = c, s = c, f = c;
    z.zero = 2, p.cp = 2, p.dp = 4, s.recompute = RECOMPUTE_SELECTIVE, f.recompute = RECOMPUTE_FULL;
    int refused = (plan_predict(&z, &k, 64, 8, &d, &r) != 0) + (plan_predict(&p, &k, 64, 8, &d, &r) != 0) +
                  (plan_predict(&s, &k, 64, 8, &d, &r) != 0);
    int ok = plan_predict(&f, &k, 64, 8, &d, &r) == 0 && plan_predict(&c, &k, 64, 8, &d, &r) == 0;
    check(refused == 3 && ok, "nanotron_options", "%d of 3 refused (ZeRO-2, cp 2, selective); full and none run: %d",
          refused, ok);
}
