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
// layout every micro-batch's backward carries it: 8 micro-batches add 8 of it to the step. Each step the buffers are
// clipped and zeroed (predict.h plan_throughput): 16 bytes a parameter and 2 x 99 + 1 kernels: 14.059 ms added to the
// optimizer's step.
static void test_nanotron_grad_accum(void) {
    ModelConfig c = nanotron_model(16, 2048, 32, 8192);
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_NANOTRON), k0 = k;
    double t = fp32_accumulator_time(&c, &k, &d, 16, 1, 1), want = 16106803200.0 / (3.35e12 * 0.58) + 99 * 4e-6;
    c.micro_batch = 1;
    k0.grad_accum_pass = GRAD_ACCUM_NONE;
    PlanResult r, r0;
    int rc = plan_predict(&c, &k, 8, 8, &d, &r) | plan_predict(&c, &k0, 8, 8, &d, &r0);
    double added = r.t_pipeline - r0.t_pipeline;
    check(rc == 0 && fabs(t - want) < 1e-12 && fabs(added - 8 * want) < 1e-9, "nanotron_grad_accum_hand",
          "%.4f ms a micro-batch (want %.4f), 8 micro-batches +%.4f ms (want %.4f)", 1e3 * t, 1e3 * want,
          1e3 * added, 8e3 * want);
    double clip = r.t_optim - r0.t_optim, want_clip = 16 * 1610680320.0 / (3.35e12 * 0.58) + 199 * 4e-6;
    check(rc == 0 && fabs(clip - want_clip) < 1e-12 && fabs(want_clip - 0.0140594509) < 1e-9, "nanotron_clip_hand",
          "%.4f ms a step (want %.4f)", 1e3 * clip, 1e3 * want_clip);
}

// DeepSpeed's BF16_Optimizer (update_hp_grads: hp_grad.add_(lp.grad.to(fp32)) after each micro-batch's backward):
// the same 1610680320 parameters as above, the cast reading bf16 and writing an fp32 copy, the add reading both fp32
// tensors and writing one: 2 + 4 + 4 + 4 + 4 = 18 bytes a parameter (28992245760 bytes) at 3.35 TB/s x 0.58, in 2 x
// 99 kernels of 4 us: 15.7134 ms a micro-batch, 8 of it on 8 micro-batches; the step's clip and zeroing as nanotron's.
static void test_bf16_optimizer_cast_add(void) {
    ModelConfig c = nanotron_model(16, 2048, 32, 8192);
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK), k0 = k;
    char err[256];
    int set = software_set_grad_accum(&k, "grad_accum_pass", "cast_add", err, sizeof(err));
    double t = fp32_accumulator_time(&c, &k, &d, 16, 1, 1), want = 28992245760.0 / (3.35e12 * 0.58) + 198 * 4e-6;
    c.micro_batch = 1;
    PlanResult r, r0;
    int rc = set | plan_predict(&c, &k, 8, 8, &d, &r) | plan_predict(&c, &k0, 8, 8, &d, &r0);
    double added = r.t_pipeline - r0.t_pipeline, clip = r.t_optim - r0.t_optim;
    double want_clip = 16 * 1610680320.0 / (3.35e12 * 0.58) + 199 * 4e-6;
    check(rc == 0 && fabs(t - want) < 1e-12 && fabs(want - 0.0157134) < 1e-7 && fabs(added - 8 * want) < 1e-9 &&
              fabs(clip - want_clip) < 1e-12,
          "bf16_optimizer_cast_add_hand", "%.4f ms a micro-batch (want %.4f), 8 micro-batches +%.4f ms (want %.4f), "
          "step +%.4f ms (want %.4f)", 1e3 * t, 1e3 * want, 1e3 * added, 8e3 * want, 1e3 * clip, 1e3 * want_clip);
}

// nanotron's ZeRO-1 with fp32 accumulation (trainer.py: no DDP; training_step's sync_gradients_across_dp all-reduces
// the fp32 gradient buffer in one collective after the pipeline; optim/zero.py _all_gather_params after the step):
// the 3.57B model (28 layers, untied here: 28 x 6 + 1 + 2 = 171 tensors, 994225152 parameters a GPU) at tp 4 over
// dp 128, as the playbook's 64-node cell. G = 3976900608 fp32 bytes over 128 ranks, 2 a node on 64 p5 nodes (their
// 2 x 4 EFA devices: 2 x 4 x 12.5 x 0.8 = 80 GB/s): NCCL's ring 2 x 127/128 x G / 80e9 = 0.098646 s + 1.4 (the
// plateau) x (8.4 + 126 x 6 + 128 x 14) us = 0.102225 s, under the tree's 2 G / (0.92 x 80e9) + 392 us = 0.108460:
// all of it exposed (nothing hides it: frac 1). The gather's loop 3 x 171 x 128 = 65664 calls at 2 us = 0.131328 s
// beside its copies (3 W, W = 1988450304, in (2 + 171) x 128 = 22144 kernels: 0.094716 s). ZeRO-0 instead all-reduces
// each of the 171 tensors in DDP's hook.
static void test_nanotron_zero1_host(void) {
    ModelConfig c = nanotron_model(28, 3072, 32, 8192);
    c.tp = 4, c.dp = 128, c.micro_batch = 2, c.sp = 1, c.zero = 1;
    DeviceProfile d;
    profile_builtin("aws-p5-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_NANOTRON);
    PlanResult r, z;
    int rc = plan_predict(&c, &k, 256, 8, &d, &r);
    PlanChunks ch = plan_chunks_alloc(1, 1);
    ch.layers[0] = 28, ch.has_embed[0] = ch.has_head[0] = 1, ch.stage_params[0] = 994225152;
    ch.stage_bwd[0] = 0.095;
    double once_b, once_f, frac, G = 3976900608.0, W = G / 2;
    double ag = zero1_gather_host_calls(&c, &ch, 0, 128);
    PlanLinks links = plan_links(&c, &k, &d, 8, &z);
    nanotron_dp_traffic(&c, &d, &ch, 0, 128, G, W, links.dp, &once_b, &once_f, &frac);
    plan_chunks_free(&ch);
    double want_f = dp_gather_time(128, W, 1, links.dp) + 0.131328;
    ModelConfig c0 = c;
    c0.zero = 0;
    rc |= plan_predict(&c0, &k, 256, 8, &d, &z);
    double want0 = dp_allreduce_time(128, chunk_params(&c0, 28, 1, 1, 4) * 4, 171, links.dp);
    check(rc == 0 && ag == 65664 && fabs(once_b - 0.1022247368) < 1e-9 && fabs(once_f - want_f) < 1e-12 &&
              frac == 1 && fabs(r.t_dp_comm - (once_b + once_f)) < 1e-9 && fabs(z.t_dp_comm - want0) < 1e-12 &&
              fabs(list_copy_time(&d, 3 * W, 22144) - 0.0947163509) < 1e-9,
          "nanotron_zero1_host_hand", "gather calls %.0f (want 65664); all-reduce %.6f s (want 0.102225), gather %.4f s "
          "(want %.4f; the plan's dp %.4f); ZeRO-0 %.2f ms, 171 collectives",
          ag, once_b, once_f, want_f, r.t_dp_comm, 1e3 * z.t_dp_comm);
}

// nanotron's DDP buckets (predict.h ddp_bucket_count; 25 MiB, the first 1 MiB), in bf16 bytes, backward order. The
// 1.34B model at tp 2 over pp 2 (the 11 + 5 cut): a layer's down 8388608 elements (16777216 bytes), gate_up 33554432
// bytes, o 4194304, qkv 12582912, the norms 4096 each. Stage 0, from layer 11 down: its down fills the first bucket
// (over 1 MiB), its gate_up a bucket of its own, the rest of the layer (16785408 bytes) waits; each later layer's down
// closes the waiting bucket (33562624 >= 26214400) and its gate_up is one: 1 + 1 + 10 x 2 = 22, and the embedding
// (268435456 bytes) closes the last: 23. Stage 1: the head alone (over 1 MiB), the final norm and layer 16's down wait,
// its gate_up closes them (50335744), then 4 layers of 2: 1 + 1 + 8, and layer 12's rest, 11. The 3.57B at tp 4 on one
// stage: 57 (qkv 14155776, o 4718592, gate_up 25165824 under the cap, down 12582912 bytes).
static void test_nanotron_ddp_buckets(void) {
    ModelConfig c = nanotron_model(16, 2048, 32, 8192), c3 = nanotron_model(28, 3072, 32, 8192);
    c.tp = 2, c.pp = 2, c3.tp = 4;
    PlanChunks ch = plan_chunks_alloc(2, 2), ch3 = plan_chunks_alloc(1, 1);
    chunk_split(&c, 2, SPLIT_COST, ch.layers, ch.has_embed, ch.has_head);
    ch3.layers[0] = 28, ch3.has_embed[0] = ch3.has_head[0] = 1;
    int b0 = ddp_bucket_count(&c, &ch, 0, 2, NANOTRON_DDP_BUCKET_BYTES);
    int b1 = ddp_bucket_count(&c, &ch, 1, 2, NANOTRON_DDP_BUCKET_BYTES);
    int b3 = ddp_bucket_count(&c3, &ch3, 0, 2, NANOTRON_DDP_BUCKET_BYTES);
    plan_chunks_free(&ch), plan_chunks_free(&ch3);
    check(b0 == 23 && b1 == 11 && b3 == 57, "nanotron_ddp_buckets_hand",
          "buckets %d / %d (want 23 / 11), 3.57B tp 4: %d (want 57)", b0, b1, b3);
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
