// tests/planner_model.c: test_planner's checks of the planner's formulas by hand: parameters,
// activation memory (Korthikanti et al. 2022), GEMMs and flash kernels by shape, tensor-parallel
// all-reduces by link, and the trainer's measured H200 steps.
// Included by tests/test_planner.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// Parameters and memory

static void test_params(void) {
    // Touvron et al. 2023: 6.7B, 13.0B, 32.5B, 65.2B
    const char* names[4] = {"llama-7b", "llama-13b", "llama-30b", "llama-65b"};
    double published[4] = {6.7e9, 13.0e9, 32.5e9, 65.2e9};
    for (int i = 0; i < 4; i++) {
        ModelConfig c = model(names[i], 0);
        char name[64];
        sprintf(name, "params_%s", names[i]);
        double p = config_num_params(&c);
        check(close_rel(p, published[i], 0.01), name, "%.3fB vs published %.1fB", p / 1e9, published[i] / 1e9);
    }
}

// --pp-split auto by the planner's model (planner/predict.h plan_stage_model, layout/params.h
// chunk_cut). llama3-8b (128k vocabulary) on 8 H100s at pp 8, micro-batch 2, 16 micro-batches of 1F1B:
// stage 0 holds 8 in flight, so the even cut (4 layers a stage) needs more than 80 GiB there, and the
// head makes the last stage the slowest. The auto cut moves layers off both: it fits, and its
// stages' memory from the model (linear in each chunk's layers) is plan_memory's, stage by stage.
static void test_stage_model(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    d.gpus_per_node = 8;
    ModelConfig c = model("llama3-8b", 0);
    c.pp = 8, c.micro_batch = 2;
    PlanSetup k = plan_setup_default();
    PlanResult even, cut;
    int rc = plan_predict(&c, &k, 32, 8, &d, &even);
    c.pp_split = 1;
    rc |= plan_predict(&c, &k, 32, 8, &d, &cut);
    check(rc == 0 && !even.fits && cut.fits && cut.mem_total <= d.mem_bytes, "stage_model/llama3-8b pp 8: auto fits",
          "even %.1f GiB (stage %d), auto %.1f GiB of %.0f", even.mem_total / GiB, even.worst_stage,
          cut.mem_total / GiB, d.mem_bytes / GiB);
    StageModel sm;
    rc = plan_stage_model(&c, &k, 32, &d, &sm);
    c.stage_model = &sm;
    int counts[8];
    double cost[8], mem[8], worst = 0;
    chunk_cut(&c, 8, 1, counts);
    stage_costs(&c, 8, 1, counts, cost, mem);
    for (int s = 0; s < 8; s++) worst = fmax(worst, mem[s]);
    PlanResult given;
    rc |= plan_predict(&c, &k, 32, 8, &d, &given);  // the trainer's way: the model it cut by
    check(rc == 0 && fabs(worst - cut.mem_total) < 1 && fabs(given.mem_total - cut.mem_total) < 1 &&
              given.t_step == cut.t_step && counts[0] < 4 && counts[7] < 4,
          "stage_model/memory: the model's worst stage is plan_memory's", "model %.6f GiB, plan %.6f GiB; layers %d "
          "%d %d %d %d %d %d %d", worst / GiB, cut.mem_total / GiB, counts[0], counts[1], counts[2], counts[3],
          counts[4], counts[5], counts[6], counts[7]);
    stage_model_free(&sm);
    // the heavy-head CPU model of dev/bench_split.py at pp 4: the auto cut's predicted step is shorter
    ModelConfig h = model("tiny", 64);
    h.n_layer = 12, h.d_model = 128, h.vocab = 4096, h.pp = 4, h.micro_batch = 2;
    config_finalize(&h);
    profile_builtin("cpu", &d);
    d.gpus_per_node = 4;
    rc = plan_predict(&h, &k, 16, 4, &d, &even);
    h.pp_split = 1;
    rc |= plan_predict(&h, &k, 16, 4, &d, &cut);
    check(rc == 0 && cut.t_step < 0.85 * even.t_step, "stage_model/heavy head pp 4: auto's step shorter",
          "%.1f ms, even %.1f ms", cut.t_step * 1e3, even.t_step * 1e3);
}

// llama-tiny (L=4, h=64, 4 heads / 2 kv heads of 16, d_ff=192, vocab 257 -> 384), seq 32,
// micro-batch 2, one GPU, bf16, this trainer's own buffers (layout/activations.h on the GPU
// build: bf16 act_t, fp32 statistics, each buffer on 256 bytes). By hand:
//   params: layer = 2*64^2 + 2*64*32 + 3*64*192 + 2*64 = 49280; 4 layers 197120
//           + embedding 384*64 = 24576 + final norm 64 + head 24576 = 246336
//   states: fp32 weights + bf16 copy 6, fp32 gradients 4, Adam 8: 18 B/param; ZeRO-1 on dp=2:
//           6 + (4 + 4/2) + 8/2 = 16 B/param
//   B*T = 64 rows, C = 64, qkv 128, 4 heads of 16, fc 384 (gate|up), Fl 192, vocab_local 384:
//   a layer's LayerActs: ln1, atty, res2, ln2 8192 each, 4 statistics 256 each, qkv 16384,
//           log-sum-exp 64*4*4 = 1024, fch 49152, fch_act 24576 = 124928 B
//   a slot: 4 + 3 rows of x, dout, dinp (8192 each) + 4 layers = 57344 + 499712 = 557056 B
//   the head: lnf 8192, 2 statistics 256, logits 49152, losses 256 = 58112 B
//   the scratch: log-sum-exp 1024, x, partial, reduced, 3 residual gradients, datty 8192 each,
//           dfch_act 24576, ce_max 256, ce_sums 512, the attention backward's fp32 dQ (1 split:
//           the a100's 108 SMs want 54 of 2 x 2 kv heads, but T 32 is one key block of 64)
//           64*4*16*4 = 16384, its Dsum 64*4*4 = 1024 = 101120, + a WeightGradIn 8192 + 8192 + 49152 + 16384
//           = 81920: 183040 B
//   1F1B with pp=1 holds 1 slot and 1 head: 183040 + 557056 + 58112 = 798208 B; no
//   temporaries, no allocator share: reserve 0.5 GiB
static void test_memory_by_hand(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2;
    PlanResult r;
    PlanSetup k = plan_setup_default();
    int rc = plan_predict(&c, &k, 2, 8, &d, &r);
    double params = 246336;
    check(rc == 0 && r.mem_weights == params * 6 && r.mem_grads == params * 4 && r.mem_optim == params * 8,
          "memory_states_zero0", "weights %.0f grads %.0f optim %.0f (want %.0f, %.0f, %.0f)", r.mem_weights,
          r.mem_grads, r.mem_optim, params * 6, params * 4, params * 8);
    check(r.mem_act == 798208, "memory_activations_hand", "%.0f B, want 798208", r.mem_act);
    check(r.mem_temp == 0 && r.mem_overhead == 0.5 * GiB, "memory_trainer_no_temporaries",
          "temporaries %.0f B, reserve %.0f B", r.mem_temp, r.mem_overhead);
    check(fabs(r.mem_total - (params * 18 + 798208 + 0.5 * GiB)) < 1e-3, "memory_total_hand", "%.0f B", r.mem_total);
    // ZeRO-1 on dp=2: weights 4 + 2, the whole fp32 gradient 4 (all-reduced a layer at a time; the
    // optimizer reads its shard of it), m and v 8/2: 14 B/param
    c.dp = 2, c.zero = 1;
    plan_predict(&c, &k, 4, 8, &d, &r);
    check(r.mem_weights + r.mem_grads + r.mem_optim == params * 14, "memory_zero1_dp2", "%.0f, want %.0f",
          r.mem_weights + r.mem_grads + r.mem_optim, params * 14);
    // --grad-reduce bf16: its 32 MiB bf16 scratch among the working buffers, with replicas only
    PlanSetup kb = k;
    kb.grad_reduce_bf16 = 1;
    plan_predict(&c, &kb, 4, 8, &d, &r);
    double with_dp = r.mem_temp;
    c.dp = 1;
    plan_predict(&c, &kb, 2, 8, &d, &r);
    check(with_dp == 32 * 1048576.0 && r.mem_temp == 0, "memory_grad_reduce_bf16_scratch",
          "working buffers dp 2: %.0f B (want 33554432), dp 1: %.0f B (want 0)", with_dp, r.mem_temp);
    c.dp = 2;
    double w, g, o;
    state_bytes_per_param(&d, 0, 2, 4, &w, &g, &o);
    int ok2 = w == 2 && g == 0.5 && o == 3;
    state_bytes_per_param(&d, 0, 3, 4, &w, &g, &o);
    check(ok2 && w == 0.5 && g == 0.5 && o == 3, "memory_zero2_zero3_bytes", "zero3 on dp=4: %.2f + %.2f + %.2f", w, g,
          o);
    // ZeRO-3 on dp=2 (parallel/zero3.h): shards of 4/2 + 4/2 + 8/2 = 8 B/param, and working
    // buffers: 2 layers of 49280 and the ends (embedding 24576 + final norm 64 + head 24576 = 49216)
    // gathered, fp32 + bf16 6 B: 886656; two layers' and the ends' gradient, fp32: 591104 = 1477760 B
    c.zero = 3;
    rc = plan_predict(&c, &k, 4, 8, &d, &r);
    check(rc == 0 && r.mem_weights + r.mem_grads + r.mem_optim == params * 8 && r.mem_temp == 1477760,
          "memory_trainer_zero3_dp2", "states %.0f (want %.0f), working buffers %.0f B (want 1477760)",
          r.mem_weights + r.mem_grads + r.mem_optim, params * 8, r.mem_temp);
}

// An MPT block (GPT-2's layer, llm-foundry's vocabulary 50368, d_ff 4 x d_model) on 8 A100s under ZeRO-3, as
// llm-foundry's benchmark rows run it.
static ModelConfig mpt_on_8_a100(int n_layer, int n_head, int d_model, int seq_len, int micro_batch) {
    ModelConfig c = model("gpt2-124m", seq_len);
    c.n_layer = n_layer, c.n_head = c.n_kv_head = n_head, c.d_model = d_model, c.d_ff = 4 * d_model, c.vocab = 50368;
    config_finalize(&c);
    c.dp = 8, c.zero = 3, c.micro_batch = micro_batch;
    return c;
}

// llm-foundry's mpt-350m on 8 A100s (dev/published_runs.csv: seq 2048, micro-batch 32, FSDP ZeRO-3,
// no checkpointing; it ran) under --software foundry, term by term:
//   params: 24 layers of 4C^2 + 2CF + 3C + F + 6C = 12596224, the embedding 50432 x 1024 (the vocabulary
//           padded to 128), positions 2048 x 1024, final LN 2048: 356050944; x 16/8 B (ZeRO-3) = 712101888 B
//   activations: sbh = 2048 x 32 x 1024; (8 + 24 + 4a/h 0.0625) = 32.0625 sbh a layer (no dropout masks:
//           Korthikanti's 34 less 2), x 24 layers = 51640270848 B
//   temporaries: the fused loss's bf16 logits and gradient, 65536 x 50432 x 4 = 13220446208, the final
//           norm's input 65536 x 1024 x 2, two gathered layers 2 x 12596224 x 2: 13405048832 B
//   reserve: 0.5 GiB (no allocator share: software.h alloc_share): 66297993818 B in all, 61.74 GiB: fits.
//   --software framework counts 34.0625 sbh (masks) and 18 B per logit (fp32 loss): 107.84 GiB.
static void test_memory_foundry_by_hand(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = mpt_on_8_a100(24, 16, 1024, 2048, 32);
    PlanSetup k = plan_setup_for(SOFTWARE_FOUNDRY), fw = plan_setup_for(SOFTWARE_FRAMEWORK);
    k.attention = fw.attention = ATTN_FLASH_TRITON;
    PlanResult r, rf;
    int rc = plan_predict(&c, &k, 256, 8, &d, &r) | plan_predict(&c, &fw, 256, 8, &d, &rf);
    double act = 51640270848.0, states = 712101888, temp = 13405048832.0;
    check(rc == 0 && r.mem_weights + r.mem_grads + r.mem_optim == states && r.mem_act == act && r.mem_temp == temp,
          "foundry_memory_terms_mpt350m", "states %.0f (want %.0f) act %.0f (want %.0f) temp %.0f (want %.0f)",
          r.mem_weights + r.mem_grads + r.mem_optim, states, r.mem_act, act, r.mem_temp, temp);
    double total = states + act + temp + 0.5 * GiB, sbh = 2048.0 * 32 * 1024, logits = 65536.0 * 50432;
    check(fabs(r.mem_total / total - 1) < 1e-12 && r.fits && !rf.fits && rf.mem_act - act == 24 * 2 * sbh &&
              rf.mem_temp - temp == (18 - 4) * logits,
          "foundry_memory_total_mpt350m", "%.2f GiB (want %.2f, fits), framework %.2f GiB (masks %.0f, fp32 loss %.0f)",
          r.mem_total / GiB, total / GiB, rf.mem_total / GiB, rf.mem_act - act, rf.mem_temp - temp);
}

// The two llm-foundry rows that ran but were predicted not to fit (2026-12-05: 83.8 GiB): mpt-3b, 8k
// tokens, micro-batch 3, no checkpointing, 8 GPUs, ZeRO-3 (dev/published_runs.csv), term by term:
//   params: 32 layers of 4C^2 + 2CF + 3C + F + 6C = 78676480 (C 2560, F 10240), the embedding 50432 x 2560,
//           positions 8192 x 2560, final LN 5120: 2667729920; x 16/8 B = 5335459840 B
//   activations: sbh = 8192 x 3 x 2560 = 62914560; 32 + 4a/h (a/h = 20/2560) = 32.03125 sbh a layer,
//           x 32 layers = 64487424000 B
//   temporaries: the fused loss 24576 x 50432 x 4 = 4957667328, the final norm's input 24576 x 2560 x 2 =
//           125829120, two gathered layers 2 x 78676480 x 2 = 314705920: 5398202368 B
//   reserve: 0.5 GiB. In all 75757957120 B = 70.55 GiB: fits on 80 (with the Scaling codebase's fitted
//           share, 22% of the activations more, 83.77: the term that was wrong for this software).
static void test_memory_foundry_mpt3b_8k(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = mpt_on_8_a100(32, 20, 2560, 8192, 3);
    PlanSetup k = plan_setup_for(SOFTWARE_FOUNDRY);
    k.attention = ATTN_FLASH_TRITON;
    PlanResult r;
    int rc = plan_predict(&c, &k, 144, 8, &d, &r);
    double want = 5335459840.0 + 64487424000.0 + 5398202368.0 + 0.5 * GiB;
    check(rc == 0 && r.mem_total == want && r.fits, "foundry_memory_mpt3b_8k_fits", "%.2f GiB (want %.2f, fits %d)",
          r.mem_total / GiB, want / GiB, r.fits);
}

// --offload's copies priced each by its direction (time.h offload_optimizer_time, offload_activation_time), by hand.
// h100-sxm: host -> device 35.2 GB/s, device -> host 52.8 (nvbandwidth#24), host memory 38 GB/s, bf16 gradients
// and weights, dp_overlap 0.5. 1e9 parameters' optimizer on the host: gradients down 2e9 / 52.8e9 = 37.879 ms, half
// hidden = 18.939; AdamW 1e9 x 26 / 38e9 = 684.211 ms; weights up 2e9 / 35.2e9 = 56.818 ms: 759.968 ms (744.211 at
// 50 GB/s both ways). Activations (llama-tiny, pp 2, 1F1B, --offload-frames 1, 4 micro-batches): stage 0's chunk
// moves n_micro x slot each way; under a long compute window only the uploads are waited for: 4 x slot / 35.2e9.
static void test_offload_link_by_direction(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    double t = offload_optimizer_time(&d, 1e9, 12);
    check(fabs(t - 759.968e-3) < 1e-6, "offload_optimizer_link_by_direction_hand", "%.3f ms, want 759.968",
          t * 1e3);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2, c.pp = 2, c.offload = OFFLOAD_ACTIVATIONS, c.offload_frames = 1;
    ActShape s = act_shape(&c, c.micro_batch);
    double slot = act_slot_bytes(&s, 2, c.recompute, 2, 256);
    double waited = offload_activation_time(&c, &d, 4, 1e9), all = offload_activation_time(&c, &d, 4, 0);
    check(slot > 0 && fabs(waited - 4 * slot / 35.2e9) < 1e-15 && fabs(all - 4 * slot * (1 / 35.2e9 + 1 / 52.8e9)) <
              1e-15, "offload_activations_link_by_direction",
          "slot %.0f B: waited %.4f us (want 4 x slot / 35.2e9 = %.4f), no window %.4f us (want %.4f)", slot,
          waited * 1e6, 4 * slot / 35.2e9 * 1e6, all * 1e6, 4 * slot * (1 / 35.2e9 + 1 / 52.8e9) * 1e6);
}

// --offload optimizer under a framework with states_dtype bf16 (no fp32 master): llama-tiny (246336 params) on dp 2,
// ZeRO-1, h100-sxm. The host holds of the half range bf16 m, v and the bf16 weights and gradient the CPU's AdamW
// updates, 2 + 2 + 2 + 2 = 8 B, 4 B/param of the whole (fp32: master, m, v 12 + fp32 gradient 4 = 16, 8 B/param).
// The host step for 123168 parameters: gradients down 2 B at 52.8 GB/s, half hidden; AdamW streams the states in and
// out with the gradient, 6 + 2 + 6 = 14 B (fp32: 12 + 2 + 12 = 26) at 38 GB/s; weights up 2 B at 35.2 GB/s:
// 123168 x (1 / 52.8e9 + 14 / 38e9 + 2 / 35.2e9) = 54.709 us (fp32 93.605 us). It counted 26 B under bf16 states.
static void test_offload_states_bf16_hand(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2, c.dp = 2, c.zero = 1, c.offload = OFFLOAD_OPTIMIZER;
    PlanSetup fp32 = plan_setup_for(SOFTWARE_FRAMEWORK), bf16 = fp32;
    char err[256] = "";
    int rc = software_set_states_dtype(&bf16, "states_dtype", "bf16", err, sizeof(err));
    PlanResult r32, r16;
    rc |= plan_predict(&c, &fp32, 4, 8, &d, &r32) | plan_predict(&c, &bf16, 4, 8, &d, &r16);
    double params = 246336, range = params / 2;
    double want16 = range * (1 / 52.8e9 + 14 / 38e9 + 2 / 35.2e9);
    double want32 = range * (1 / 52.8e9 + 26 / 38e9 + 2 / 35.2e9);
    check(rc == 0 && r16.mem_host == 4 * params && r32.mem_host == 8 * params &&
              fabs(r16.t_optim / want16 - 1) < 1e-9 && fabs(r32.t_optim / want32 - 1) < 1e-9,
          "offload_states_bf16_hand", "host %.0f B (want %.0f), fp32 %.0f (want %.0f); host step %.3f us (want %.3f), "
          "fp32 %.3f (want %.3f) %s", r16.mem_host, 4 * params, r32.mem_host, 8 * params, r16.t_optim * 1e6,
          want16 * 1e6, r32.t_optim * 1e6, want32 * 1e6, err);
}

// --offload: the host bytes per GPU (planner/memory.h offload_state_bytes) and the host's rule.
// llama-tiny (246336 params) on dp 2, ZeRO-1, --offload optimizer: this trainer pins the master
// of the stage (4) and its bf16 staging (2), and of the half range the gradient staging (4) and
// m, v (8): 6 + 12/2 = 12 B/param; a framework the master, m, v and the fp32 gradient of the
// range: 16/2 = 8 B/param. --offload activations --offload-frames 1 on pp 2 (1F1B): a framework's
// stage 0 holds 2 micro-batches in flight, 1 on the device, so one of 2 layers x 156672 B
// (test_memory_framework_by_hand) moves: 313344 B. llama-7b on 8 H100s, dp 8, ZeRO-1, micro-batch
// 4: fits the device only with the optimizer offloaded, 6 + 12/8 B x 6738415616 params on the
// host (47.07 GiB): refused with 40 GiB of host per GPU, the reason saying so.
static void test_offload_host_memory(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2, c.dp = 2, c.zero = 1;
    PlanSetup own = plan_setup_default(), fw = framework_setup();
    PlanResult r, rf, off;
    int rc = plan_predict(&c, &own, 4, 8, &d, &off);
    c.offload = OFFLOAD_OPTIMIZER;
    rc |= plan_predict(&c, &own, 4, 8, &d, &r) | plan_predict(&c, &fw, 4, 8, &d, &rf);
    double params = 246336;
    check(rc == 0 && off.mem_host == 0 && r.mem_host == 12 * params && rf.mem_host == 8 * params &&
              r.mem_host_act == 0 && r.fits,
          "offload_host_bytes_hand", "none %.0f, trainer %.0f (want %.0f), framework %.0f (want %.0f)", off.mem_host,
          r.mem_host, 12 * params, rf.mem_host, 8 * params);
    c = model("llama-tiny", 0);
    c.micro_batch = 2, c.pp = 2, c.offload = OFFLOAD_ACTIVATIONS, c.offload_frames = 1;
    rc = plan_predict(&c, &fw, 8, 8, &d, &rf);
    check(rc == 0 && rf.mem_host == 313344 && rf.mem_host_act == 313344, "offload_host_activations_hand",
          "%.0f B (activations %.0f), want 313344", rf.mem_host, rf.mem_host_act);
    profile_builtin("h100-sxm", &d);
    c = model("llama-7b", 0);
    c.dp = 8, c.zero = 1, c.micro_batch = 4;
    rc = plan_predict(&c, &own, 32, 8, &d, &off);
    c.offload = OFFLOAD_OPTIMIZER;
    rc |= plan_predict(&c, &own, 32, 8, &d, &r);
    double host = 6738415616.0 * (6 + 12.0 / 8);
    char why[256] = "", err[128];
    int set = profile_set(&d, "host_mem_gib", "40", err, sizeof(err));
    rc |= plan_predict(&c, &own, 32, 8, &d, &rf);
    plan_memory_reason(&rf, d.mem_bytes, why, sizeof(why));
    check(rc == 0 && set == 0 && !off.fits && r.fits && fabs(r.mem_host / host - 1) < 1e-12 && !rf.fits &&
              rf.mem_total <= d.mem_bytes && strstr(why, "host memory") && strstr(why, "of 40.0"),
          "offload_host_over_refused",
          "no offload fits %d; host %.2f GiB (want %.2f) fits %d; host 40 GiB: fits %d (%s)",
          off.fits, r.mem_host / GiB, host / GiB, r.fits, rf.fits, why);
    check(profile_set(&d, "host_mem_gib", "-1", err, sizeof(err)) == -1 && strstr(err, "host_mem_gib"),
          "offload_host_mem_key_range", "%s", err);
    test_offload_link_by_direction();
    test_offload_states_bf16_hand();
}

// The loss under tensor parallelism (software.h software_set_loss_vocab), --software framework: llama-tiny at tp 2,
// its 64 tokens' loss over 384 / 2 logits a rank (vocabulary-parallel) or all 384 after the logits' all-gather
// (gathered), with the final norm's input 64 x 64 x 2 = 8192 B beside it: eager (e + 16) 64 x 192 x 18 + 8192 =
// 229376 B and 64 x 384 x 18 + 8192 = 450560 B, eager_bf16 (4e) gathered 64 x 384 x 8 + 8192 = 204800 B. The
// gathered step is longer: the all-gather of 64 x 384 x 2 bytes over tp and the loss's passes over the other 192
// logits (predict.h edge_times). Refused under Megatron-core (its vocab_parallel_cross_entropy).
static void test_loss_vocab_by_hand(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2, c.tp = 2;
    PlanSetup par = plan_setup_for(SOFTWARE_FRAMEWORK), gat = par, gat_bf16 = par;
    PlanSetup mega = plan_setup_for(SOFTWARE_MEGATRON);
    char err[256];
    int rc = software_set_loss_vocab(&gat, "--loss-vocab", "gathered", err, sizeof(err)) +
             software_set_loss_vocab(&gat_bf16, "--loss-vocab", "gathered", err, sizeof(err)) +
             software_set_loss(&gat_bf16, "--loss", "eager_bf16", err, sizeof(err));
    int refused = software_set_loss_vocab(&mega, "--loss-vocab", "gathered", err, sizeof(err)) == -1 &&
                  strstr(err, "vocabulary-parallel") != NULL;
    PlanResult rp, rg, rb;
    rc += plan_predict(&c, &par, 2, 8, &d, &rp) + plan_predict(&c, &gat, 2, 8, &d, &rg) +
          plan_predict(&c, &gat_bf16, 2, 8, &d, &rb);
    check(rc == 0 && refused && rp.mem_temp == 229376 && rg.mem_temp == 450560 && rb.mem_temp == 204800 &&
              rg.t_step > rp.t_step,
          "loss_vocab_gathered_hand", "rc %d; temp parallel %.0f B (want 229376), gathered %.0f (450560), gathered "
          "eager_bf16 %.0f (204800); step %.3f / %.3f ms; megatron refused %d", rc, rp.mem_temp, rg.mem_temp,
          rb.mem_temp, rp.t_step * 1e3, rg.t_step * 1e3, refused);
}

// The same llama-tiny under a framework's memory model (framework_setup), by hand:
//   states: bf16 weights 2 + bf16 gradients 2 + fp32 master, m, v 12 = 16 B/param: 3941376 B
//   activations per layer: sbh = 32*2*64 = 4096 B-units; r = 0.5, f = 3:
//           8 + (4 + 4*0.5 + 8*3) + 4a/h (0.25) = 38.25 -> 156672 B; 4 layers = 626688 B
//   temporaries: the loss's 64 * 384 logits * (2 + 16) = 442368 + the final norm's input
//           8192 = 450560 B (flash attention: no layer temporaries, the loss's are the peak)
//   reserve: 0.5 GiB + 22% of the activations (the allocator fragments them, not the loss's
//           exact-size blocks) = 0.5 GiB + 137871.36 B
static void test_memory_framework_by_hand(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2;
    PlanResult r;
    PlanSetup k = framework_setup();
    int rc = plan_predict(&c, &k, 2, 8, &d, &r);
    check(rc == 0 && r.mem_weights + r.mem_grads + r.mem_optim == 3941376, "framework_memory_states",
          "%.0f B, want 3941376", r.mem_weights + r.mem_grads + r.mem_optim);
    check(r.mem_act == 626688, "framework_memory_activations_hand", "%.0f B, want 626688", r.mem_act);
    check(r.mem_temp == 450560, "framework_memory_loss_hand", "%.0f B, want 450560", r.mem_temp);
    check(fabs(r.mem_total - (3941376 + 626688 + 450560 + 0.5 * GiB + 137871.36)) < 1e-3, "framework_memory_total_hand",
          "%.0f B", r.mem_total);
    // unfused attention: a layer's backward holds dP and dS (torch: fp32 and bf16, 10 B per score)
    // at another moment than the loss: the peak holds the larger. At 32 tokens the scores are
    // 2 x 4 heads x 32^2 = 8192 (81920 B, below the loss's 450560); at 256 tokens 524288 scores
    // (5242880 B) against the loss's 512 x 384 x 18 + 512 x 64 x 2 = 3604480 B
    k.attention = ATTN_TORCH;
    plan_predict(&c, &k, 2, 8, &d, &r);
    double t32 = r.mem_temp;
    c = model("llama-tiny", 256);
    c.micro_batch = 2;
    plan_predict(&c, &k, 2, 8, &d, &r);
    check(t32 == 450560 && r.mem_temp == 5242880, "framework_temporaries_take_the_larger",
          "seq 32: %.0f B (want the loss's 450560), seq 256: %.0f B (want the scores' 5242880)", t32, r.mem_temp);
    test_memory_foundry_by_hand();
    test_memory_foundry_mpt3b_8k();
    test_offload_host_memory();
}

// A framework's ZB-H1 memory (Qi et al. 2023, Table 1): a pair's activations are held from its F to its B, then only
// what its W reads, M_W = 32 sbh a layer at tp 1 with a 4h GELU MLP (the four matmuls' inputs 2h + h + 4h and their
// output gradients 3h + h + 4h + h, 2 bytes each). GPT-2 124M (s 1024, h 768, b 1), pp 4 with 3 layers a stage, 8
// micro-batches, flash2: the lists (held, owed) at their peaks are, by hand from ZB-H1's lists (stage 3: F0 B0 F1 B1
// F2 B2 F3 B3 W0 F4 B4 W1 ...), stage 0 (4, 0) (3, 1), stage 1 (3, 1) (2, 2), stage 2 (2, 2) (1, 3), stage 3 (1, 3)
// (0, 4): the paper's (p - i + 1) M_B + (i - 1) M_W. The worst stage is the last (its loss): one pair's activations
// as 1F1B holds them and three W's, 3 x 3 x 32 x 1024 x 768 = 226,492,416 B more than 1F1B's.
static void test_zbh1_framework_memory_hand(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("gpt2-124m", 0);
    c.pp = 4;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    k.attention = ATTN_FLASH2, k.rms_kernel = 1;
    PlanResult one, zb;
    int rc = plan_predict(&c, &k, 8, 8, &d, &one);
    c.schedule = SCHED_ZBH1;
    rc |= plan_predict(&c, &k, 8, 8, &d, &zb);
    const PipeCounts* pc = pipe_counts(&c, 8);
    static const int want[4][4] = {{4, 0, 3, 1}, {3, 1, 2, 2}, {2, 2, 1, 3}, {1, 3, 0, 4}};
    int pairs_ok = 1;
    for (int s = 0; s < 4; s++) {
        pairs_ok &= pc->held_owed_at[s + 1] - pc->held_owed_at[s] == 2;
        for (int i = 0; i < 4 && pairs_ok; i++) pairs_ok &= pc->held_owed[2 * pc->held_owed_at[s] + i] == want[s][i];
    }
    double w_keep = 9.0 * 32 * 1024 * 768;
    check(rc == 0 && pairs_ok && zb.worst_stage == 3 && one.worst_stage == 3 && zb.mem_w_inputs == w_keep &&
              zb.mem_act - one.mem_act == w_keep && zb.mem_total - one.mem_total == w_keep,
          "zbh1_framework_memory_hand", "rc %d, frontiers %s, worst stage %d / %d, W's inputs %.0f B (want %.0f), "
          "activations %.0f - %.0f, totals %.0f - %.0f B", rc, pairs_ok ? "as by hand" : "differ", zb.worst_stage,
          one.worst_stage, zb.mem_w_inputs, w_keep, zb.mem_act, one.mem_act, zb.mem_total, one.mem_total);
}

// GPT-3 175B's shape (h 12288, 96 heads, 96 layers, 2048 tokens, vocabulary 51200), finalized, no layout set.
static ModelConfig gpt3_175b(void) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.arch = ARCH_GPT2, c.n_layer = 96, c.n_head = c.n_kv_head = 96, c.d_model = 12288, c.seq_len = 2048,
    c.vocab = 51200;
    config_finalize(&c);
    return c;
}

// Korthikanti et al. 2022, Table 2, for GPT-3 175B (h=12288, a=96, s=2048), b=1, t=8:
// 5as/h = 80, so per layer in s*b*h bytes: none 114, tp 23, tp+sp 14.25, tp+selective 13,
// tp+sp+selective 4.25, full 2 (and 2/t = 0.25 with sp).
static void test_korthikanti(void) {
    ModelConfig c = gpt3_175b();
    double sbh = 2048.0 * 12288;
    struct { int tp, sp, rc; double want; const char* name; } cases[] = {
        {1, 0, RECOMPUTE_NONE, 114, "korthikanti_no_parallelism"},
        {8, 0, RECOMPUTE_NONE, 23, "korthikanti_tp"},
        {8, 1, RECOMPUTE_NONE, 14.25, "korthikanti_tp_sp"},
        {8, 0, RECOMPUTE_SELECTIVE, 13, "korthikanti_tp_selective"},
        {8, 1, RECOMPUTE_SELECTIVE, 4.25, "korthikanti_tp_sp_selective"},
        {8, 0, RECOMPUTE_FULL, 2, "korthikanti_full_recompute"},
    };
    PlanSetup k = plan_setup_default();
    k.attention = ATTN_FUSED_SOFTMAX;  // Table 2 counts the softmax output and its dropout
    for (int i = 0; i < 6; i++) {
        double got = act_bytes_per_layer(&c, 1, cases[i].tp, 1, cases[i].sp, cases[i].rc, &k, 2) / sbh;
        check(fabs(got - cases[i].want) < 1e-9, cases[i].name, "%.4f sbh, want %.4f sbh", got, cases[i].want);
    }
    // 175B with t=8, sp + selective: 4.25 * 2048 * 12288 B = 102 MiB per layer
    double mib = act_bytes_per_layer(&c, 1, 8, 1, 1, RECOMPUTE_SELECTIVE, &k, 2) / (1024.0 * 1024.0);
    check(fabs(mib - 102.0) < 1e-9, "korthikanti_175b_layer_mib", "%.3f MiB, want 102", mib);
}

// The frameworks' recomputation policies (planner/memory.h), by hand, per layer in s*b*h bytes:
//   selective_op, LLaMA-13B (r = 1, f = 13824/5120 = 2.7, a = 40, h = 5120), tp 1, FlashAttention-2:
//     layer input 2 + w2's output 2 + wq 2 + wv 2r + w1 2f + attention output 2 + lse 4a/h
//     = 2 + 2 + 2 + 2 + 5.4 + 2 + 0.03125 = 15.43125; tp 8 with SP: 2/8 + 2 + (2 + 2 + 5.4 + 2)/8
//     + 0.03125/8 = 3.67890625
//   selective_op, GPT-3 175B (fused softmax, a s/h = 16): 2 + (6 + 8 + 2)/t + 4as/h... with the
//     fused softmax's bf16 softmax and dropout mask kept (5as/h = 80): tp 8: 2 + 16/8 + 80/8 = 14
//   selective_layer: the mean of none (37.6 + 4a/h = 37.63125) and full (2): 19.815625
//   the share of a LLaMA-13B layer's matmul FLOPs selective_op redoes: wk, wo, w3 =
//     (5120^2 + 5120^2 + 5120 x 13824) / (2 x 5120^2 + 2 x 5120^2 + 3 x 5120 x 13824) = 0.388663...
static void test_recompute_policies(void) {
    ModelConfig c = model("llama-13b", 2048);
    double sbh = 2048.0 * 5120;
    PlanSetup k = framework_setup();
    double op1 = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_OP, &k, 2) / sbh;
    double op8 = act_bytes_per_layer(&c, 1, 8, 1, 1, RECOMPUTE_OP, &k, 2) / sbh;
    double layer = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_LAYER, &k, 2) / sbh;
    check(fabs(op1 - 15.43125) < 1e-9, "recompute_selective_op_llama13b_hand", "%.6f sbh, want 15.43125", op1);
    check(fabs(op8 - 3.67890625) < 1e-9, "recompute_selective_op_tp8_sp_hand", "%.8f sbh, want 3.67890625", op8);
    check(fabs(layer - 19.815625) < 1e-9, "recompute_selective_layer_hand", "%.6f sbh, want 19.815625", layer);
    double share = op_recompute_share(&c), want = (2.0 * 5120 * 5120 + 5120.0 * 13824) /
                                                  (4.0 * 5120 * 5120 + 3.0 * 5120 * 13824);
    check(fabs(share - want) < 1e-12, "recompute_selective_op_share_hand", "%.6f, want %.6f", share, want);
    ModelConfig g = gpt3_175b();
    k.attention = ATTN_FUSED_SOFTMAX;
    double gop = act_bytes_per_layer(&g, 1, 8, 1, 0, RECOMPUTE_OP, &k, 2) / (2048.0 * 12288);
    check(fabs(gop - 14) < 1e-9, "recompute_selective_op_gpt175b_hand", "%.6f sbh, want 14", gop);
    // in a layout: between none and full in memory and in time, refused for this trainer, named
    // in --runs' and the table's names
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    c.micro_batch = 1;
    c.dp = 8;
    PlanResult r[4];
    int rcs[4] = {RECOMPUTE_NONE, RECOMPUTE_OP, RECOMPUTE_LAYER, RECOMPUTE_FULL};
    for (int i = 0; i < 4; i++) {
        c.recompute = rcs[i];
        plan_predict(&c, &k, 64, 8, &d, &r[i]);
    }
    int between = 1;
    for (int i = 1; i <= 2; i++)
        between &= r[0].mem_act > r[i].mem_act && r[i].mem_act > r[3].mem_act && r[0].t_step < r[i].t_step &&
                   r[i].t_step < r[3].t_step;
    check(between,
          "recompute_policies_between_none_and_full", "activations %.2f / %.2f / %.2f / %.2f GiB, step %.3f / %.3f / "
          "%.3f / %.3f s (none, op, layer, full)", r[0].mem_act / GiB, r[1].mem_act / GiB, r[2].mem_act / GiB,
          r[3].mem_act / GiB, r[0].t_step, r[1].t_step, r[2].t_step, r[3].t_step);
    PlanSetup own = plan_setup_default();
    c.recompute = RECOMPUTE_OP;
    int rc = plan_predict(&c, &own, 64, 8, &d, &r[0]);
    check(rc == -1 && r[0].invalid && strstr(r[0].invalid, "selective_op"), "recompute_policy_not_in_trainer", "%s",
          r[0].invalid ? r[0].invalid : "accepted");
    check(plan_recompute_from_name("selective_layer") == RECOMPUTE_LAYER && plan_recompute_from_name("op") == -1 &&
              !strcmp(plan_recompute_name(RECOMPUTE_OP), "selective_op"),
          "recompute_policy_names", "round trip");
}

// The MLP apart from the attention (--mlp, a --runs row's mlp): LLaMA-13B's attention (q, k, v, o of
// 5120 x 5120, two RMSNorm weights) with a non-gated MLP of d_ff 13824 (squared ReLU, as Nemotron's) has two
// 5120 x 13824 matrices a layer, not SwiGLU's three: 40 x (4 x 5120^2 + 2 x 5120 x 13824 + 2 x 5120) + 2 x 32000
// x 5120 + 5120 = 10,184,709,120 parameters; 6N of PaLM's FLOPs count its 40 x (4 x 5120^2 + 2 x 5120 x 13824)
// + 32000 x 5120 = 10,020,454,400 matmul parameters. Its activations (framework, flash2, tp 1): 8 replicated +
// q, k, v, out 2 + 2 + 2 + 2 + the MLP's fc1 output and fc2 input 2 x 2f (f = 2.7) + the log-sum-exp 4a/h =
// 26.83125 s.b.h (SwiGLU: 37.63125). torchtitan's op policy (matmuls wq wk wv wo fc1 fc2) saves wq, wv and fc1:
// 2 + 2 + 2 + 5.4 + 2 + 0.03125 = 13.43125, and recomputes wk, wo, fc2: (5120^2 + 5120^2 + 5120 x 13824) / (4 x
// 5120^2 + 2 x 5120 x 13824) = 1/2 of the matmul FLOPs. GPT-2 124M with a SwiGLU MLP: one more 768 x 3072
// matrix and its 3072 bias a layer, 12 x 2,362,368 = 28,348,416 parameters more. GELU and squared ReLU cost
// the same (one elementwise op of d_ff, two linears); SwiGLU's layer is slower; this trainer refuses another
// MLP than its architecture's.
static void test_mlp_kinds(void) {
    ModelConfig c = model("llama-13b", 2048);
    c.mlp = MLP_RELU2;
    double p = config_num_params(&c), mm = config_matmul_params(&c);
    check(p == 10184709120.0 && mm == 10020454400.0, "mlp_relu2_llama13b_params_hand",
          "%.0f parameters (want 10184709120), %.0f matmul (want 10020454400)", p, mm);
    PlanSetup k = framework_setup();
    double sbh = 2048.0 * 5120, none = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_NONE, &k, 2) / sbh;
    double op = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_OP, &k, 2) / sbh;
    check(fabs(none - 26.83125) < 1e-9 && fabs(op - 13.43125) < 1e-9 && op_recompute_share(&c) == 0.5,
          "mlp_relu2_llama13b_activations_hand", "none %.6f (want 26.83125), op %.6f (want 13.43125), op share %.6f "
          "(want 0.5) s.b.h", none, op, op_recompute_share(&c));
    ModelConfig g = model("gpt2-124m", 0), gs = g;
    gs.mlp = MLP_SWIGLU;
    double more = config_num_params(&gs) - config_num_params(&g);
    check(more == 28348416.0 && chunk_params(&gs, 1, 0, 0, 1) - chunk_params(&g, 1, 0, 0, 1) == 768.0 * 3072 + 3072,
          "mlp_swiglu_gpt2_params_hand", "%.0f more parameters (want 28348416)", more);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    c.dp = 8, c.zero = 1;
    PlanResult r[3];
    int kinds[3] = {MLP_GELU, MLP_RELU2, MLP_SWIGLU}, rc = 0;
    for (int i = 0; i < 3; i++) c.mlp = kinds[i], rc |= plan_predict(&c, &k, 64, 8, &d, &r[i]);
    check(rc == 0 && r[0].t_layer_fwd == r[1].t_layer_fwd && r[0].mem_act == r[1].mem_act &&
              r[2].t_layer_fwd > r[1].t_layer_fwd && r[2].mem_act > r[1].mem_act,
          "mlp_kinds_time_and_memory", "layer forward %.3f / %.3f / %.3f ms, activations %.2f / %.2f / %.2f GiB "
          "(gelu, relu2, swiglu)", 1e3 * r[0].t_layer_fwd, 1e3 * r[1].t_layer_fwd, 1e3 * r[2].t_layer_fwd,
          r[0].mem_act / GiB, r[1].mem_act / GiB, r[2].mem_act / GiB);
    PlanSetup own = plan_setup_default();
    c.mlp = MLP_GELU;
    rc = plan_predict(&c, &own, 64, 8, &d, &r[0]);
    c.mlp = MLP_SWIGLU;  // LLaMA's own, named
    int own_ok = plan_predict(&c, &own, 64, 8, &d, &r[1]);
    check(rc == -1 && r[0].invalid && strstr(r[0].invalid, "--mlp gelu") && own_ok == 0, "mlp_not_in_trainer",
          "%s", r[0].invalid ? r[0].invalid : "accepted");
}

// Megatron-core's fused SwiGLU (--software megatron, swiglu_fused): SwiGLUFunction saves only the fc1 output
// [gate | up] (4f) and fc2 keeps its input (2f), 6f where SwiGLU as framework ops keeps 8f (gate, silu(gate), up,
// the product). LLaMA-13B, tp 1, flash2: 8 + 2 + 2 + 2 + 2 + 6 x 2.7 + 4 x 40 / 5120 = 32.23125 s.b.h (framework:
// 37.63125); at tp 8 with SP (8 + 8 + 16.2 + 0.03125) / 8 = 4.02890625.
static void test_megatron_swiglu_fused(void) {
    ModelConfig c = model("llama-13b", 2048);
    double sbh = 2048.0 * 5120;
    PlanSetup mg = plan_setup_for(SOFTWARE_MEGATRON), fw = plan_setup_for(SOFTWARE_FRAMEWORK);
    double m1 = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_NONE, &mg, 2) / sbh;
    double m8 = act_bytes_per_layer(&c, 1, 8, 1, 1, RECOMPUTE_NONE, &mg, 2) / sbh;
    double f1 = act_bytes_per_layer(&c, 1, 1, 1, 0, RECOMPUTE_NONE, &fw, 2) / sbh;
    check(fabs(m1 - 32.23125) < 1e-9 && fabs(m8 - 4.02890625) < 1e-9 && fabs(f1 - 37.63125) < 1e-9,
          "megatron_swiglu_fused_hand", "megatron %.6f (want 32.23125), tp8 sp %.8f (want 4.02890625), framework "
          "%.6f (want 37.63125) s.b.h", m1, m8, f1);
}

// Megatron-LM's --distribute-saved-activations (full_distributed): each tp rank keeps 1/tp of the layer input
// it recomputes from (2 s.b.h / t: LLaMA-13B at tp 8, 2048 tokens, 40 layers: 40 x 2 x 2048 x 5120 / 8 B =
// 0.09766 GiB, full's 0.78125), and all-gathers it before the layer runs again: 2048 x 5120 x 2 B over 8 ranks
// on an A100 node at NCCL's link (300 GB/s x 0.67): 7/8 x 20971520 / 201e9 + 8.4 + 7 x 3.4 us = 123.5 us a layer, in
// the backward and in the step's tp communication. Refused at tp 1, with SP and with the zero-bubble schedules.
static void test_recompute_full_distributed(void) {
    ModelConfig c = model("llama-13b", 2048);
    c.tp = 8;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanResult full, dist;
    c.recompute = RECOMPUTE_FULL;
    int rc = plan_predict(&c, &k, 64, 8, &d, &full);
    c.recompute = RECOMPUTE_FULL_DIST;
    rc |= plan_predict(&c, &k, 64, 8, &d, &dist);
    double gather = 7.0 / 8 * 2048 * 5120 * 2 / (300e9 * d.link_eff_nccl) + 8.4e-6 + 7 * d.intra_latency;
    check(rc == 0 && fabs(full.mem_act / GiB - 0.78125) < 1e-9 && fabs(dist.mem_act / GiB - 0.09765625) < 1e-9,
          "recompute_full_distributed_memory_hand", "activations %.6f GiB (want 0.09765625), full %.6f (want 0.78125)",
          dist.mem_act / GiB, full.mem_act / GiB);
    check(fabs(dist.t_layer_bwd - full.t_layer_bwd - gather) < 1e-12 &&
              fabs(dist.t_tp_comm - full.t_tp_comm - dist.n_micro * 40 * gather) < 1e-9 && dist.hfu < full.hfu,
          "recompute_full_distributed_time_hand", "layer backward %.1f us longer (want %.1f), tp comm %.4f s more",
          1e6 * (dist.t_layer_bwd - full.t_layer_bwd), 1e6 * gather, dist.t_tp_comm - full.t_tp_comm);
    PlanResult bad[3];
    c.sp = 1;
    int r1 = plan_predict(&c, &k, 64, 8, &d, &bad[0]);
    c.sp = 0, c.tp = 1;
    int r2 = plan_predict(&c, &k, 64, 8, &d, &bad[1]);
    c.tp = 8, c.pp = 2, c.schedule = SCHED_ZBH1;
    int r3 = plan_predict(&c, &k, 64, 8, &d, &bad[2]);
    check(r1 == -1 && r2 == -1 && r3 == -1 && plan_recompute_from_name("full_distributed") == RECOMPUTE_FULL_DIST,
          "recompute_full_distributed_refused", "sp: %s; tp 1: %s; zb-h1: %s", bad[0].invalid, bad[1].invalid,
          bad[2].invalid);
}

// The network profiles: jean-zay-a100 has 4 NICs of 100 Gb/s for 8 GPUs, so a data-parallel
// group with one rank per node (tp 8) gets half a NIC: 12.5 GB/s x 4 / 8 x nic_eff 0.8 = 5 GB/s,
// a DGX A100 (8 x 25 GB/s) 20 GB/s; a group filling the node gets the node's NICs (ring: each
// node sends the buffer once), 40 and 160 GB/s, the latter held to the NVLink hops' rate the
// ring also takes (300 x link_eff 0.47 = 141 GB/s). dgx-a100 is the a100-80gb profile.
static void test_network_profiles(void) {
    DeviceProfile jz, dgx, a100;
    check(profile_builtin("jean-zay-a100", &jz) == 0 && profile_builtin("dgx-a100", &dgx) == 0 &&
              profile_builtin("a100-80gb", &a100) == 0 && dgx.nics_per_gpu == a100.nics_per_gpu &&
              dgx.nic_bw == a100.nic_bw,
          "network_profiles_known", "dgx-a100 = a100-80gb, jean-zay-a100");
    Link one_jz = group_link_nested(&jz, 1, 8, 16, 8, 8), one_dgx = group_link_nested(&dgx, 1, 8, 16, 8, 8);
    Link all_jz = group_link_nested(&jz, 1, 1, 64, 1, 8), all_dgx = group_link_nested(&dgx, 1, 1, 64, 1, 8);
    // the same machine described in a file: a DGX A100's GPUs with Jean Zay's network
    char path[] = "/tmp/test_planner_network_XXXXXX", err[256];
    int fd = mkstemp(path);
    FILE* f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) fputs("base = dgx-a100\nnics_per_gpu = 0.5\nnic_gbits = 100\n", f), fclose(f);
    DeviceProfile mine;
    int rc = f ? profile_parse_file(path, &mine, err, sizeof(err)) : -1;
    unlink(path);
    Link one_mine = group_link_nested(&mine, 1, 8, 16, 8, 8);
    check(rc == 0 && one_mine.bw == one_jz.bw, "network_profile_from_file", "%.2f GB/s, jean-zay-a100 %.2f",
          one_mine.bw / 1e9, one_jz.bw / 1e9);
    check(fabs(one_jz.bw - 5e9) < 1 && fabs(one_dgx.bw - 20e9) < 1 && fabs(all_jz.bw - 40e9) < 1 &&
              fabs(all_dgx.bw - 141e9) < 1,
          "network_nic_share_hand", "jean-zay %.1f / %.1f GB/s, dgx %.1f / %.1f GB/s (want 5 / 40, 20 / 141)",
          one_jz.bw / 1e9, all_jz.bw / 1e9, one_dgx.bw / 1e9, all_dgx.bw / 1e9);
}

// AWS's instances (EFA, 100 Gb/s per device): p4de's 4 devices for 8 A100s give a data-parallel group
// filling the node 4 x 12.5 x nic_eff 0.8 = 40 GB/s across nodes (a DGX A100's 8 HDR NICs 160), p5's 32
// give 320 GB/s (under NVLink's 450 x 0.82 = 369 at NCCL's rate). ZeRO-3 gathers the weights before every
// micro-batch's forward and again before its backward and reduce-scatters the gradients after it: 3 x
// the weights' bytes per micro-batch, so 4 micro-batches move 4 times one's. LLaMA-7B (6,738,415,616
// parameters, bf16 weights and gradients) on 128 p4de GPUs (16 nodes), one micro-batch: each ring moves
// 127/128 of 13.48 GB at 40 GB/s, and each of the 34 buckets (32 layers, embedding, head) costs NCCL's ring
// latency (time.h ring_latency; p4d's Intel host: an NVLink step max(3.4, 3 x 1 us net overhead)): 8.4 us + 112
// NVLink steps of 3.4 + 15 network steps of 14 = 599.2 us:
// 3 x (0.334290 + 0.020373) = 1.063988 s.
// NCCL's net overhead by host (device.h profile_aws_p5): p5's AMD host floors each NVLink step of a ring that spans
// nodes at 3 x 2 us, p4de's Intel host at max(3.4, 3 x 1): an all-gather over 16 ranks on 2 nodes costs
// 8.4 + 14 x 6 + 14 = 106.4 us on p5, 8.4 + 14 x 3.4 + 14 = 70.0 on p4de.
static void test_aws_profiles_zero3_traffic(void) {
    DeviceProfile p4de, p5, dgx;
    profile_builtin("aws-p4de-a100", &p4de), profile_builtin("aws-p5-h100", &p5), profile_builtin("dgx-a100", &dgx);
    p4de.link_eff = p4de.link_eff_nccl, p5.link_eff = p5.link_eff_nccl, dgx.link_eff = dgx.link_eff_nccl;
    Link l4 = group_link_nested(&p4de, 1, 1, 128, 1, 8), l5 = group_link_nested(&p5, 1, 1, 128, 1, 8);
    Link ld = group_link_nested(&dgx, 1, 1, 128, 1, 8);
    check(fabs(l4.bw - 40e9) < 1 && fabs(l5.bw - 320e9) < 1 && fabs(ld.bw - 160e9) < 1 && p4de.mem_bytes == 80 * GiB,
          "network_aws_profiles_hand", "p4de %.1f, p5 %.1f, dgx %.1f GB/s (want 40, 320, 160)", l4.bw / 1e9,
          l5.bw / 1e9, ld.bw / 1e9);
    double ag5 = ring_latency(16, 0, group_link_nested(&p5, 1, 1, 16, 1, 8));
    double ag4 = ring_latency(16, 0, group_link_nested(&p4de, 1, 1, 16, 1, 8));
    check(fabs(ag5 - 106.4e-6) < 1e-12 && fabs(ag4 - 70.0e-6) < 1e-12, "network_aws_host_net_overhead_hand",
          "16 ranks on 2 nodes: p5 (AMD) %.1f us, p4de (Intel) %.1f (want 106.4, 70.0)", ag5 * 1e6, ag4 * 1e6);
    ModelConfig c = model("llama-7b", 4096);
    c.dp = 128, c.zero = 3, c.recompute = RECOMPUTE_FULL;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    PlanResult one, four;
    profile_builtin("aws-p4de-a100", &p4de);
    int rc1 = plan_predict(&c, &k, 128, 8, &p4de, &one), rc4 = plan_predict(&c, &k, 512, 8, &p4de, &four);
    double S = 2 * 6738415616.0, want = 3 * (127.0 / 128 * S / 40e9 + 34 * (8.4 + 112 * 3.4 + 15 * 14) * 1e-6);
    check(rc1 == 0 && rc4 == 0 && fabs(one.t_dp_comm - want) < 1e-6 && fabs(four.t_dp_comm - 4 * want) < 1e-6,
          "zero3_traffic_per_micro_batch_hand", "%.6f s for 1 micro-batch, %.6f for 4 (want %.6f, %.6f)",
          one.t_dp_comm, four.t_dp_comm, want, 4 * want);
}

// NCCL's latency model and algorithm choice (time.h ring_latency, tree_latency, dp_allreduce_time), by hand.
// 1024 ranks filling 128 DGX A100 nodes (8 x 25 GB/s x nic_eff 0.8 = 160 GB/s at NCCL's links; AMD hosts, so a
// ring step inside a node of a ring that spans nodes is max(3.4, 3 x 2) = 6 us, NCCL's net overhead):
//   ring all-gather: 8.4 + (1023 - 127) x 6 + 127 x 14 = 7162.4 us
//   ring all-reduce: 2046 steps, 256 crossing: 8.4 + 1790 x 6 + 256 x 14 = 14332.4 us
//   tree: 2 x ((8 - 1) + log2 128) x 28 = 784 us
//   all-reduce of 64 MiB in one bucket: ring 2 x 1023/1024 x 64 MiB / 160e9 + 14332.4 us = 15170.44 us, tree
//     2 x 64 MiB / (0.92 x 160e9) + 784 us = 1695.81 us: the tree. 1 GiB on 16 ranks (2 nodes): ring 12582.91 +
//     1.4 x (8.4 + 26 x 6 + 4 x 14) = 12891.47 us (NCCL's plateau factor on a Simple ring across nodes, the bucket
//     over 64 x 32 x 16 bytes), tree 14589.43 + 2 x (7 + 1) x 28 = 15037.43 us: the ring. 16 KiB on the same 16
//     ranks (under 32768 bytes: no plateau): ring 0.192 + 220.4 = 220.592 us, tree 0.223 + 448 us: the ring; 32 KiB:
//     0.384 + 1.4 x 220.4 = 308.944 us.
// The same 1024 ranks on DGX H100 nodes (Intel hosts: 3 x 1 = 3 us, under NVLink's 3.4): the all-gather's latency
// 8.4 + 896 x 3.4 + 127 x 14 = 4832.8 us; with --device-set net_overhead_us=3: 8.4 + 896 x 9 + 1778 = 9850.4 us.
// FSDP2's fp32 reduce-scatter (software.h reduce_bytes 4, torchtitan's mixed_precision_reduce): LLaMA-7B on
// 128 p4de GPUs (40 GB/s) moves 127/128 x 2 x 6738415616 B more per micro-batch: 0.334290 s.
static void test_nccl_latency_and_algorithm(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    d.link_eff = d.link_eff_nccl;
    Link l = group_link_nested(&d, 1, 1, 1024, 1, 8), l2 = group_link_nested(&d, 1, 1, 16, 1, 8);
    double ag = ring_latency(1024, 0, l), ar = ring_latency(1024, 1, l), tree = tree_latency(1024, l);
    check(l.nodes == 128 && fabs(l.bw - 160e9) < 1 && fabs(ag - 7162.4e-6) < 1e-12 && fabs(ar - 14332.4e-6) < 1e-12 &&
              fabs(tree - 784e-6) < 1e-12,
          "nccl_ring_tree_latency_hand", "%d nodes, ring all-gather %.1f us (want 7162.4), all-reduce %.1f (want "
          "14332.4), tree %.1f (want 784)", l.nodes, ag * 1e6, ar * 1e6, tree * 1e6);
    double small = dp_allreduce_time(1024, 67108864, 1, l), big = dp_allreduce_time(16, 1073741824, 1, l2);
    check(fabs(small - 1695.81e-6) < 0.01e-6 && fabs(big - 12891.47e-6) < 0.01e-6 && l2.nodes == 2,
          "nccl_algorithm_choice_hand", "64 MiB on 1024: %.2f us (want the tree's 1695.81), 1 GiB on 16: %.2f us "
          "(want the ring's 12891.47)", small * 1e6, big * 1e6);
    double kib16 = dp_allreduce_time(16, 16384, 1, l2), kib32 = dp_allreduce_time(16, 32768, 1, l2);
    check(fabs(kib16 - 220.592e-6) < 1e-12 && fabs(kib32 - 308.944e-6) < 1e-12, "nccl_ring_plateau_hand",
          "16 KiB on 16 ranks over 2 nodes: %.3f us (want 220.592, no plateau), 32 KiB: %.3f (want 308.944)",
          kib16 * 1e6, kib32 * 1e6);
    DeviceProfile h;
    char err[256];
    profile_builtin("dgx-h100", &h);
    double ag_h = ring_latency(1024, 0, group_link_nested(&h, 1, 1, 1024, 1, 8));
    int rc_set = profile_set(&h, "net_overhead_us", "3", err, sizeof(err));
    double ag_h3 = ring_latency(1024, 0, group_link_nested(&h, 1, 1, 1024, 1, 8));
    check(rc_set == 0 && fabs(ag_h - 4832.8e-6) < 1e-12 && fabs(ag_h3 - 9850.4e-6) < 1e-12,
          "nccl_net_overhead_by_host_hand",
          "DGX H100 (Intel) all-gather latency %.1f us (want 4832.8), net_overhead_us 3: %.1f (want 9850.4)",
          ag_h * 1e6, ag_h3 * 1e6);
    ModelConfig c = model("llama-7b", 4096);
    c.dp = 128, c.zero = 3, c.recompute = RECOMPUTE_FULL;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK), k32 = k;
    k32.reduce_bytes = 4;
    DeviceProfile p4de;
    profile_builtin("aws-p4de-a100", &p4de);
    PlanResult bf, fp;
    int rc = plan_predict(&c, &k, 128, 8, &p4de, &bf) | plan_predict(&c, &k32, 128, 8, &p4de, &fp);
    double more = 127.0 / 128 * 2 * 6738415616.0 / 40e9;
    check(rc == 0 && fabs(fp.t_dp_comm - bf.t_dp_comm - more) < 1e-9, "zero3_fp32_reduce_scatter_hand",
          "%.6f s more (want %.6f)", fp.t_dp_comm - bf.t_dp_comm, more);
}

// NCCL's model by release (device.h NCCL_MODELS, nccl_release_of, nccl_model_of; time.h ring_latency,
// tree_latency, dp_allreduce_time), by hand. The same 1024 ranks on 128 DGX A100 nodes as above (AMD hosts, net
// overhead 2 us; 160 GB/s):
//   2.8.3 (network ring hop 9.6 us, no net overhead: NVLink's 3.4 inside a node; all-reduce 2 x (nodes - 1) steps
//     across): all-gather 8.4 + 896 x 3.4 + 127 x 9.6 = 4274.0 us; all-reduce 8.4 + 1792 x 3.4 + 254 x 9.6 = 8539.6
//   2.12.10 (network hop 28): all-gather 8.4 + 896 x 3.4 + 127 x 28 = 6610.8 us
//   2.14.3 (all-reduce 2 x nodes across): 8.4 + 1790 x 3.4 + 256 x 9.6 = 8552.0 us
//   2.18.3 (b647562's ring; tree hops 4 in a node, 14 across): tree 2 x (7 x 4 + 7 x 14) = 252 us (784 at b647562)
//   2.23.4 (tree base 8.4; all-reduce 2 x (nodes - 1) across): ring all-reduce 8.4 + 1792 x 6 + 254 x 14 = 14316.4
//     us, tree 8.4 + 252 = 260.4 us
// The ring's plateau on 16 ranks over 2 nodes under 2.8.3: ring latency 8.4 + 28 x 3.4 + 2 x 9.6 = 122.8 us; x 1.9
// from nRanks / 16 x 64 KiB = 64 KiB (b647562: x 1.4 from 64 x 32 x 16 = 32 KiB): 32 KiB 2 x 15/16 x 32768 / 160e9
// + 122.8 = 123.184 us (the tree 0.445 + 448: the ring), 64 KiB 0.768 + 1.9 x 122.8 = 234.088 us.
static void test_nccl_by_release(void) {
    const char* name[] = {"2.8.3", "2.9.9", "2.12", "2.12.0", "2.18", "2.18.2", "2.18.3", "2.20.3", "2.23.4", "2.30.7",
                          "2.16.5", "2.17", "2.21", "2.22.3"};
    int want[] = {20803, 20803, 21207, 21207, 21801, 21801, 21803, 21901, 22304, 22304, 21403, 21701, 22105, 22105};
    int ok = 1;
    for (int i = 0; i < 14; i++) ok &= nccl_model_of(nccl_release_of(name[i]))->from == want[i];
    const char* bad[] = {"2.7.8", "2.31", "3.0", "2.18.", " 2.18", "2.18.3.1", "2.x", "", "2", "2.100", "+2.18"};
    for (int i = 0; i < 11; i++) ok &= nccl_release_of(bad[i]) == 0;
    check(ok && nccl_model_of(nccl_release_of("2.20.3")) == NCCL_MODEL_DEFAULT && nccl_release_of("2.18") == 21801 &&
              nccl_release_of("2.12.0") == 21207 && nccl_release_of("2.9.9") == 20909 && !nccl_model_of(0),
          "nccl_version_rows", "a release's row by its number, b647562 (2.20.3) the default, others refused");
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    d.link_eff = d.link_eff_nccl;
    d.nccl = nccl_model_of(nccl_release_of("2.8.3"));
    Link l8 = group_link_nested(&d, 1, 1, 1024, 1, 8), l8_2 = group_link_nested(&d, 1, 1, 16, 1, 8);
    d.nccl = nccl_model_of(nccl_release_of("2.12.10"));
    Link l12 = group_link_nested(&d, 1, 1, 1024, 1, 8);
    d.nccl = nccl_model_of(nccl_release_of("2.14.3"));
    Link l14 = group_link_nested(&d, 1, 1, 1024, 1, 8);
    d.nccl = nccl_model_of(nccl_release_of("2.18.3"));
    Link l18 = group_link_nested(&d, 1, 1, 1024, 1, 8);
    d.nccl = nccl_model_of(nccl_release_of("2.23.4"));
    Link l23 = group_link_nested(&d, 1, 1, 1024, 1, 8);
    double ag8 = ring_latency(1024, 0, l8), ar8 = ring_latency(1024, 1, l8), ag12 = ring_latency(1024, 0, l12);
    double ar14 = ring_latency(1024, 1, l14), tree18 = tree_latency(1024, l18), ag18 = ring_latency(1024, 0, l18);
    double ar23 = ring_latency(1024, 1, l23), tree23 = tree_latency(1024, l23);
    check(fabs(ag8 - 4274.0e-6) < 1e-12 && fabs(ar8 - 8539.6e-6) < 1e-12 && fabs(ag12 - 6610.8e-6) < 1e-12 &&
              fabs(ar14 - 8552.0e-6) < 1e-12 && fabs(ag18 - 7162.4e-6) < 1e-12 && fabs(tree18 - 252e-6) < 1e-12 &&
              fabs(ar23 - 14316.4e-6) < 1e-12 && fabs(tree23 - 260.4e-6) < 1e-12,
          "nccl_latency_by_release_hand",
          "2.8.3 all-gather %.1f us (want 4274.0), all-reduce %.1f (8539.6); 2.12.10 all-gather %.1f (6610.8); "
          "2.14.3 all-reduce %.1f (8552.0); 2.18.3 all-gather %.1f (7162.4), tree %.1f (252); 2.23.4 all-reduce %.1f "
          "(14316.4), tree %.1f (260.4)",
          ag8 * 1e6, ar8 * 1e6, ag12 * 1e6, ar14 * 1e6, ag18 * 1e6, tree18 * 1e6, ar23 * 1e6, tree23 * 1e6);
    double kib32 = dp_allreduce_time(16, 32768, 1, l8_2), kib64 = dp_allreduce_time(16, 65536, 1, l8_2);
    check(fabs(kib32 - 123.184e-6) < 1e-12 && fabs(kib64 - 234.088e-6) < 1e-12, "nccl_plateau_by_release_hand",
          "2.8.3, 16 ranks over 2 nodes: 32 KiB %.3f us (want 123.184, no plateau), 64 KiB %.3f (want 234.088)",
          kib32 * 1e6, kib64 * 1e6);
    // NVLS from 2.17.1 on: 8 ranks of an H100 node at NCCL's links (450 x 0.82 = 369 GB/s), an all-reduce of 64 MiB:
    // NVLS 67108864 / (0.74 x 369e9) = 245.77 us + NCCL's NVLS latency (tuning.cc, Simple: baseLat 40 us in 2.17.1, 23
    // in 2.18; from 2.19.1 base 0 and hwLat NVLINK 23, 25 from 2.21.5): b647562 (2.20.3) 268.77 us, 2.17.1 285.77,
    // 2.18.3 268.77, 2.21.5 270.77, 2.30.7 270.77; under 2.14.3 the ring, 2 x 7/8 x 67108864 / 369e9 + 8.4 + 14 x 3.4
    // = 374.27 us
    DeviceProfile h;
    profile_builtin("h100-sxm", &h);
    h.link_eff = h.link_eff_nccl;
    double nvls_now = link_allreduce_time(8, 67108864, group_link(&h, 8, 1, 8));
    h.nccl = nccl_model_of(nccl_release_of("2.14.3"));
    double ring_214 = link_allreduce_time(8, 67108864, group_link(&h, 8, 1, 8));
    const char* nvls_release[] = {"2.17.1", "2.18.3", "2.21.5", "2.30.7"};
    double nvls_want[] = {285.77e-6, 268.77e-6, 270.77e-6, 270.77e-6}, nvls_got[4];
    int nvls_ok = 1;
    for (int i = 0; i < 4; i++) {
        h.nccl = nccl_model_of(nccl_release_of(nvls_release[i]));
        nvls_got[i] = link_allreduce_time(8, 67108864, group_link(&h, 8, 1, 8));
        nvls_ok &= fabs(nvls_got[i] - nvls_want[i]) < 0.01e-6;
    }
    check(nvls_ok && fabs(nvls_now - 268.77e-6) < 0.01e-6 && fabs(ring_214 - 374.27e-6) < 0.01e-6,
          "nccl_nvls_by_release_hand", "64 MiB over 8 H100s: NVLS %.2f us (want 268.77), 2.14.3's ring %.2f (want "
          "374.27); NVLS by release 2.17.1 %.2f (285.77), 2.18.3 %.2f (268.77), 2.21.5 %.2f (270.77), 2.30.7 %.2f "
          "(270.77)", nvls_now * 1e6, ring_214 * 1e6, nvls_got[0] * 1e6, nvls_got[1] * 1e6, nvls_got[2] * 1e6,
          nvls_got[3] * 1e6);
    // a prediction takes the run's release (PlanSetup.nccl_release, plan_software_device) and none leaves b647562's
    ModelConfig c = model("llama-7b", 4096);
    c.dp = 128, c.zero = 3, c.recompute = RECOMPUTE_FULL;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK), k8 = k, k20 = k;
    k8.nccl_release = nccl_release_of("2.8.3"), k20.nccl_release = nccl_release_of("2.20.3");
    DeviceProfile a100;
    profile_builtin("a100-80gb", &a100);
    PlanResult now, r8, r20;
    int rc = plan_predict(&c, &k, 128, 8, &a100, &now) | plan_predict(&c, &k8, 128, 8, &a100, &r8) |
             plan_predict(&c, &k20, 128, 8, &a100, &r20);
    check(rc == 0 && r20.t_step == now.t_step && r8.t_dp_comm < now.t_dp_comm, "nccl_release_in_prediction",
          "2.20.3 step %.6f s (want b647562's %.6f), 2.8.3 dp traffic %.6f s (want under %.6f)", r20.t_step,
          now.t_step, r8.t_dp_comm, now.t_dp_comm);
}

// --software megatron, tensor parallelism (Megatron-core's --tp-comm-overlap, with SP: Transformer Engine v1.7's
// userbuffers at their defaults, time.h): GPT-3 175B's layer at tp 8, micro-batch 1 of 2048 tokens on an H100 node
// (132 SMs; NVLink 450 GB/s x link_eff_nccl 0.82 = 369 GB/s a rank, 3.4 us a step; HBM 3350 GB/s x 0.58 = 1943 GB/s;
// x = 2048 x 12288 x 2 B the gathered activations). The GEMMs' times are matmul_time's (tested above).
// - qkv forward, ring exchange: 8 chunks of 256 rows, each reading the whole 12288 x 4608 weight: 8 x (256 x 12288 +
//   12288 x 4608 + 256 x 4608) x 2 B = 975,175,680 B / 1943 GB/s + 2 us = 503.892 us (memory-bound), + 7 launches
//   x 2 us = 517.892 us; the ring, 7 steps of x / 8 (20.450 us each) and one chunk (64.736 us), is shorter: 517.892.
// - proj forward, pipeline: 4 chunks of 3072 outputs (M 2048, K 1536), 34.936 us each on 132 SMs, 40.675 us on the
//   116 a reduce-scatter's 16 SMs leave; each chunk's reduce-scatter 7/8 x (x / 4) / 369 GB/s + 7 x 3.4 us =
//   53.6375 us, longer than a chunk's GEMM, so they follow each other from the first GEMM's end: 34.936 + 4 x
//   53.6375 = 249.486 us (the whole GEMM 139.744 us).
// - qkv input gradient, bulk: the all-gather of the input (7/8 x / 369 GB/s + 23.8 us = 143.150 us) beside the GEMM
//   (394.041 us on 132 SMs, 454.966 us on 116): 143.150 + (1 - 143.150 / 454.966) x 394.041 = 413.210 us.
// The layer's forward charges the four linears' overlapped times beyond their GEMMs; without SP megatron is the
// framework.
static void test_megatron_tp_comm_overlap(void) {
    ModelConfig g = gpt3_175b();
    g.dp = g.pp = g.vpp = g.micro_batch = g.cp = g.cp_ulysses = 1, g.tp = 8, g.schedule = SCHED_1F1B;
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    d.link_eff = d.link_eff_nccl;
    Link tp = group_link(&d, 8, 1, 8), none = {0, 0, 0, 0, 0, NULL};
    double h = 12288, n = 2048, x = n * h * 2;
    double qkv = ub_ring_exchange_time(&d, n, 3 * h / 8, h, 8, x / 8, tp);
    double proj = ub_pipeline_rs_time(&d, n, h, h / 8, 8, x, tp);
    double ag = 7.0 / 8 * x / 369e9 + 7 * 3.4e-6, bulk = ub_bulk_time(&d, n, h, 3 * h / 8, ag);
    double fc1 = ub_ring_exchange_time(&d, n, 4 * h / 8, h, 8, x / 8, tp);
    double fc2 = ub_pipeline_rs_time(&d, n, h, 4 * h / 8, 8, x, tp);
    double gemms = matmul_time(&d, n, 3 * h / 8, h, 1) + matmul_time(&d, n, h, h / 8, 1) +
                   matmul_time(&d, n, 4 * h / 8, h, 1) + matmul_time(&d, n, h, 4 * h / 8, 1);
    PlanSetup fw = plan_setup_for(SOFTWARE_FRAMEWORK), meg = plan_setup_for(SOFTWARE_MEGATRON);
    LayerTime m_sp = layer_time(&g, 1, 8, 1, 1, 1, &meg, &d, tp, none, none);
    LayerTime f_no = layer_time(&g, 1, 8, 0, 1, 1, &fw, &d, tp, none, none);
    LayerTime m_no = layer_time(&g, 1, 8, 0, 1, 1, &meg, &d, tp, none, none);
    check(fabs(qkv - 517.892e-6) < 5e-10 && fabs(proj - 249.486e-6) < 5e-10 && fabs(bulk - 413.210e-6) < 5e-10 &&
              fabs(m_sp.comm_fwd_charged - (qkv + proj + fc1 + fc2 - gemms)) < 1e-12 && f_no.fwd == m_no.fwd &&
              f_no.bwd == m_no.bwd,
          "megatron_tp_comm_overlap_hand", "qkv ring exchange %.3f us (want 517.892), proj pipeline %.3f (249.486), "
          "qkv dgrad bulk %.3f (413.210); forward charged %.3f us (want %.3f)", qkv * 1e6, proj * 1e6, bulk * 1e6,
          m_sp.comm_fwd_charged * 1e6, (qkv + proj + fc1 + fc2 - gemms) * 1e6);
}

// Dropout (Megatron-LM's GPT defaults, 0.1 and 0.1): GPT-3 175B's layer at tp 8, micro-batch 1 of 2048 tokens, fused
// softmax, on an A100 (HBM 2039 GB/s x hbm_eff 0.58 = 1182.62 GB/s, 4 us a kernel). Attention dropout is a kernel on
// the 12 heads' 2048^2 probabilities, 2e + 1 = 5 bytes an element each way: 251,658,240 B / 1182.62 GB/s + 4 us =
// 216.795 us, once forward, once backward; hidden dropout (bias + dropout + add) writes and reads a 1-byte mask at
// the two residual adds: 2 x 2048 x 12288 B / 1182.62 GB/s = 42.559 us each way. The same layer at dropout 0
// (llm-foundry's) has neither; with FlashAttention only the residual masks count; a LLaMA layer none.
static void test_dropout_time(void) {
    ModelConfig g = gpt3_175b(), l = model("llama-13b", 2048);
    g.dp = g.pp = g.vpp = g.micro_batch = g.cp = g.cp_ulysses = 1, g.tp = 8, g.schedule = SCHED_1F1B;
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    Link tp = group_link(&d, 8, 1, 8), none = {0, 0, 0, 0, 0, NULL};
    PlanSetup drop = plan_setup_for(SOFTWARE_FRAMEWORK), zero = drop;
    drop.attention = zero.attention = ATTN_FUSED_SOFTMAX, zero.no_dropout = 1;
    LayerTime a = layer_time(&g, 1, 8, 0, 1, 1, &drop, &d, tp, none, none);
    LayerTime b = layer_time(&g, 1, 8, 0, 1, 1, &zero, &d, tp, none, none);
    PlanSetup fdrop = drop, fzero = zero;
    fdrop.attention = fzero.attention = ATTN_FLASH2;
    LayerTime fa = layer_time(&g, 1, 8, 0, 1, 1, &fdrop, &d, tp, none, none);
    LayerTime fb = layer_time(&g, 1, 8, 0, 1, 1, &fzero, &d, tp, none, none);
    LayerTime la = layer_time(&l, 1, 1, 0, 1, 1, &fdrop, &d, none, none, none);
    LayerTime lb = layer_time(&l, 1, 1, 0, 1, 1, &fzero, &d, none, none, none);
    double attn = 251658240.0 / 1182.62e9 + 4e-6, resid = 2 * 2048.0 * 12288 / 1182.62e9;
    check(fabs(a.fwd - b.fwd - attn - resid) < 1e-9 && fabs(a.bwd - b.bwd - attn - resid) < 1e-9 &&
              fabs(a.attn_fwd - b.attn_fwd - attn) < 1e-9 && fabs(fa.fwd - fb.fwd - resid) < 1e-9 &&
              fa.attn_fwd == fb.attn_fwd && la.fwd == lb.fwd && la.bwd == lb.bwd,
          "dropout_time_hand", "fused softmax: forward +%.3f us, backward +%.3f us (want %.3f); flash +%.3f us "
          "(want %.3f); llama +%.3f us", (a.fwd - b.fwd) * 1e6, (a.bwd - b.bwd) * 1e6, (attn + resid) * 1e6,
          (fa.fwd - fb.fwd) * 1e6, resid * 1e6, (la.fwd - lb.fwd) * 1e6);
}

// Megatron-core's vocabulary-parallel cross-entropy (--software megatron, loss_softmax_inplace): its forward makes the
// fp32 copy of the logits a softmax in place, pass by pass: 16 bytes a logit more than torch's log-softmax (subtract
// the max in place 8, divide by the sum in place 8; the exp's in-place pass stands for torch's log-softmax write).
// GPT-3 175B's head at tp 8, micro-batch 1 of 2048 tokens, on an H100 (HBM 3350 GB/s x hbm_eff 0.58 = 1943 GB/s):
// 2048 x 51200 / 8 logits x 16 B = 209,715,200 B, 107.934 us more forward; the backward the same.
static void test_megatron_loss_bytes(void) {
    ModelConfig g = gpt3_175b();
    g.dp = g.pp = g.vpp = g.micro_batch = g.cp = g.cp_ulysses = 1, g.tp = 8, g.sp = 1, g.schedule = SCHED_1F1B;
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    Link tp = group_link(&d, 8, 1, 8);
    PlanSetup meg = plan_setup_for(SOFTWARE_MEGATRON), torch_ce = meg;
    torch_ce.loss_softmax_inplace = 0;
    EdgeTimes a = edge_times(&g, &meg, &d, tp), b = edge_times(&g, &torch_ce, &d, tp);
    double want = 209715200.0 / (3.35e12 * 0.58);
    check(meg.loss_softmax_inplace == 1 && fabs(a.head_fwd - b.head_fwd - want) < 1e-12 && a.head_bwd == b.head_bwd,
          "megatron_loss_bytes_hand", "head forward +%.3f us (want %.3f), backward %+.3f us",
          (a.head_fwd - b.head_fwd) * 1e6, want * 1e6, (a.head_bwd - b.head_bwd) * 1e6);
}

// The same loss under --cross-entropy-loss-fusion (loss_compiled: its functions each one torch.compile'd kernel): the
// forward moves e + 20 bytes a logit where the pass-by-pass loss moves e + 36, the backward e + 8 where it moves
// e + 12.
// GPT-3 175B's head at tp 8, 2048 tokens of micro-batch 1 (13,107,200 logits a rank): 16 B less forward,
// 209,715,200 B or 107.934 us at 1943 GB/s; 4 B less backward, 52,428,800 B or 26.984 us. Nothing else moves.
static void test_megatron_loss_compiled(void) {
    ModelConfig g = gpt3_175b();
    g.dp = g.pp = g.vpp = g.micro_batch = g.cp = g.cp_ulysses = 1, g.tp = 8, g.sp = 1, g.schedule = SCHED_1F1B;
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    Link tp = group_link(&d, 8, 1, 8);
    PlanSetup meg = plan_setup_for(SOFTWARE_MEGATRON), compiled = meg;
    compiled.loss_compiled = 1;
    EdgeTimes a = edge_times(&g, &meg, &d, tp), b = edge_times(&g, &compiled, &d, tp);
    double hbm = 3.35e12 * 0.58, want_f = 209715200.0 / hbm, want_b = 52428800.0 / hbm;
    check(fabs(a.head_fwd - b.head_fwd - want_f) < 1e-12 && fabs(a.head_bwd - b.head_bwd - want_b) < 1e-12 &&
              a.emb_fwd == b.emb_fwd && a.emb_bwd == b.emb_bwd,
          "megatron_loss_compiled_hand", "head forward -%.3f us (want %.3f), backward -%.3f us (want %.3f)",
          (a.head_fwd - b.head_fwd) * 1e6, want_f * 1e6, (a.head_bwd - b.head_bwd) * 1e6, want_b * 1e6);
}

// --software megatron, data parallelism (--overlap-grad-reduce / --overlap-param-gather with the distributed
// optimizer, ZeRO-1): the reduce-scatter runs layer by layer under the backward, the gather under the forward;
// only the last layer's chunk (1/32 of LLaMA-7B's) is exposed, the rest costs comm_interference_nccl 0.61 of itself.
// 64 H100 (8 DGX nodes, a group filling them: 8 x 50 GB/s x 0.8 = 320 GB/s): each of the two moves 63/64 of
// 13.48 GB, and each of its 34 buckets costs NCCL's ring latency, 8.4 us + 56 NVLink steps of 3.4 + 7 network
// steps of 14 = 296.8 us: rs = 0.041456 + 0.010091 s; exposed 2 x rs x (1/32 + 0.61 x 31/32) = 1.244375 rs. The
// framework hides each under half a micro-batch's pass (dp_overlap 0.5).
static void test_megatron_dp_chunked(void) {
    ModelConfig c = model("llama-7b", 4096);
    c.dp = 64, c.zero = 1;
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    PlanSetup meg = plan_setup_for(SOFTWARE_MEGATRON);
    PlanResult r;
    int rc = plan_predict(&c, &meg, 64, 8, &d, &r);
    double S = 2 * 6738415616.0, rs = 63.0 / 64 * S / 320e9 + 34 * (8.4 + 56 * 3.4 + 7 * 14) * 1e-6;
    double want = 2 * rs * (1.0 / 32 + 0.61 * 31 / 32);  // 1.244375 rs
    check(rc == 0 && fabs(r.t_dp_exposed - want) < 1e-9, "megatron_dp_chunked_hand", "%.6f s exposed, want %.6f",
          r.t_dp_exposed, want);
}

// PyTorch FSDP2's ZeRO-3 (fsdp_version 2): each all-gather copied out of its flat buffer into the parameters' tensors
// on the compute stream (predict.h gather_copy_out_time). LLaMA-7B (6,738,415,616 parameters) at 2048 tokens on 64
// A100s, dp 64, one stage: a gather is 13,476,831,232 B of bf16 weights, read and written at 2039 GB/s x 0.58
// (22.791 ms), plus a 4 us launch for each of its 34 groups (32 layers, the embedding, the head): 22.927 ms; twice a
// micro-batch (the forward's gather and the backward's again), so the step's pipeline is 2 x 22.927 ms a micro-batch
// longer than FSDP1's; the exposed dp traffic and the memory do not move.
static void test_fsdp2_copy_out(void) {
    ModelConfig c = model("llama-7b", 2048);
    c.dp = 64, c.zero = 3;
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanSetup v1 = plan_setup_for(SOFTWARE_FRAMEWORK), v2 = v1;
    v2.gather_copy_out = 1;
    PlanResult a, b;
    int rc = plan_predict(&c, &v1, 64, 8, &d, &a) | plan_predict(&c, &v2, 64, 8, &d, &b);
    double copy = 2 * 2 * 6738415616.0 / (2.039e12 * 0.58) + 34 * 4e-6;  // 0.022927 s
    check(rc == 0 && b.n_micro == a.n_micro && fabs(b.t_pipeline - a.t_pipeline - 2 * copy * a.n_micro) < 1e-9 &&
              b.t_dp_exposed == a.t_dp_exposed && b.mem_total == a.mem_total && fabs(copy - 0.022927) < 5e-7,
          "fsdp2_copy_out_hand", "%d micro-batches, pipeline +%.6f s (want %.6f), a copy %.6f s", a.n_micro,
          b.t_pipeline - a.t_pipeline, 2 * copy * a.n_micro, copy);
}

// Megatron-core's DDP passes over its whole gradient buffer each step (--software megatron, grad_buffer_passes 4):
// zero_grad_buffer's zero_(), the NaN check's norm before each bucket's collective and the 1/dp scaling in place.
// LLaMA-7B (6,738,415,616 parameters) on 64 H100 with ZeRO-1, 2-byte gradients (the h100-sxm profile's): 4 x 2 B
// a parameter = 53,907,324,928 B at 3350 GB/s x 0.58 = 27.744 ms, + 4 us (one launch) over the same step without
// them; on one GPU (dp 1: no scaling) 2 passes, 13.874 ms + 4 us; a fp32 buffer (--grad-reduce fp32) twice that.
static void test_megatron_grad_buffer_passes(void) {
    ModelConfig c = model("llama-7b", 4096), one = c;
    c.dp = 64, c.zero = 1;
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    PlanSetup meg = plan_setup_for(SOFTWARE_MEGATRON), none = meg, fp32 = meg;
    none.grad_buffer_passes = 0, fp32.reduce_bytes = 4;
    PlanResult a, b, a1, b1, f;
    int rc = plan_predict(&c, &meg, 64, 8, &d, &a) | plan_predict(&c, &none, 64, 8, &d, &b) |
             plan_predict(&one, &meg, 1, 8, &d, &a1) | plan_predict(&one, &none, 1, 8, &d, &b1) |
             plan_predict(&c, &fp32, 64, 8, &d, &f);
    double bw = 3.35e12 * 0.58, want = 8 * 6738415616.0 / bw + 4e-6, want1 = 4 * 6738415616.0 / bw + 4e-6;
    double want32 = 16 * 6738415616.0 / bw + 4e-6;
    check(rc == 0 && fabs(a.t_optim - b.t_optim - want) < 1e-9 && fabs(a1.t_optim - b1.t_optim - want1) < 1e-9 &&
              fabs(f.t_optim - b.t_optim - want32) < 1e-9,
          "megatron_grad_buffer_passes_hand", "dp 64: +%.4f ms (want %.4f), dp 1: +%.4f ms (want %.4f), fp32: +%.4f ms",
          (a.t_optim - b.t_optim) * 1e3, want * 1e3, (a1.t_optim - b1.t_optim) * 1e3, want1 * 1e3,
          (f.t_optim - b.t_optim) * 1e3);
}

// --software megatron under the interleaved schedule (dp_interleaved_exposed, Megatron's schedules.py): chunk j's
// reduce-scatter starts j x pp - r chunk-backwards before the end (chunk 0 at the end), chunk j's gather (j >= 2)
// (j - 1) x pp - r chunk-forwards in and is needed j x pp in; one communicator. pp 2, vpp 3, stage r 1, each
// transfer and each chunk pass 1: reduce-scatters at -3, -1, 0 end at -2, 0, 1 (1 exposed); gathers at 0, 0, 1
// (+ the stall) end at 1, 2, 3 against needs 0, 2 + 1, 4 + 1 (the forward waits 1 for chunk 0's); exposed 2, plus
// comm_interference 0.2 of the other 4 = 2.8. pp 4, vpp 2, stage 0: the gradients of chunk 1 reduce 4 backwards
// before the end, chunk 0's at it: 1 + 1 (chunk 0's gather) exposed, + 0.2 x 2 = 2.4.
static void test_megatron_dp_interleaved(void) {
    double a = dp_interleaved_exposed(1, 1, 1, 1, 2, 3, 1, 0.2), b = dp_interleaved_exposed(1, 1, 1, 1, 4, 2, 0, 0.2);
    check(fabs(a - 2.8) < 1e-12 && fabs(b - 2.4) < 1e-12, "megatron_dp_interleaved_hand",
          "pp 2 vpp 3 stage 1: %.3f (want 2.8), pp 4 vpp 2 stage 0: %.3f (want 2.4)", a, b);
}

// --attention flash3 (Hopper's fused attention): cuDNN's H100 rates by pass from FlashAttention-3's figures (device.h
// fused_fwd, fused_bwd: the causal forward at 4096 tokens 518 TFLOP/s over the tiles' 32/33, the backward without the
// mask 499; attn_eff_flash3 0.529 their pair at the 16k anchor, 539 x 129/128 and 516), by name only; the same memory
// as flash2. LLaMA-13B, 4096 tokens: the forward without its one launch (op_latency) is FA2's times FA2's rate over
// cuDNN's forward (FA2: 0.35 x 294 x 33/32 over 328 x 129/128, flash_length_factor), the backward's FA2's times FA2's
// rate over cuDNN's backward (the shape terms are equal: 128-query forward tiles, 128-key backward tiles at head dim
// 128); on an A100 (no Hopper) the rate is FA2's at 2048 tokens, its anchor (no fused curve).
static void test_attention_flash3(void) {
    ModelConfig c = model("llama-13b", 4096);
    DeviceProfile h, a;
    profile_builtin("h100-sxm", &h), profile_builtin("a100-80gb", &a);
    PlanSetup k2 = plan_setup_for(SOFTWARE_MEGATRON), k3 = k2;
    k3.attention = ATTN_FLASH3;
    Link none = {0, 0, 0, 0, 0, NULL};
    LayerTime f2 = layer_time(&c, 1, 1, 0, 1, 1, &k2, &h, none, none, none);
    LayerTime f3 = layer_time(&c, 1, 1, 0, 1, 1, &k3, &h, none, none, none);
    double fa2 = 0.35 * (294 * 33.0 / 32) / (328 * 129.0 / 128);
    double pair16k = 3.5 / (128.0 / (539 * 129) + 2.5 / 516), fused_f = 0.529 * (518 * 33.0 / 32) / pair16k;
    double fused_b = 0.529 * 499 / pair16k;
    double ratio_f = (f3.attn_fwd - h.op_latency) / (f2.attn_fwd - h.op_latency);
    double attn_b2 = 2.5 * (f2.attn_fwd - h.op_latency);  // FA2's backward: the forward's rate, 2.5x the FLOPs
    double ratio_b = (f3.bwd - f2.bwd + attn_b2) / attn_b2, want_b = fa2 / fused_b;
    ModelConfig c2k = model("llama-13b", 2048);
    LayerTime a2 = layer_time(&c2k, 1, 1, 0, 1, 1, &k2, &a, none, none, none);
    LayerTime a3 = layer_time(&c2k, 1, 1, 0, 1, 1, &k3, &a, none, none, none);
    c.dp = 8;
    PlanResult r2, r3;
    plan_predict(&c, &k2, 8, 8, &h, &r2), plan_predict(&c, &k3, 8, 8, &h, &r3);
    check(fabs(ratio_f - fa2 / fused_f) < 1e-9 && fabs(ratio_b - want_b) < 1e-6 && a2.attn_fwd == a3.attn_fwd &&
              r2.mem_total == r3.mem_total && r3.t_step < r2.t_step,
          "attention_flash3_hand", "H100 attention forward %.4f / %.4f ms (ratio %.6f, want %.6f), backward ratio %.6f "
          "(want %.6f), A100 %.4f / %.4f, memory %.2f / %.2f GiB", f3.attn_fwd * 1e3, f2.attn_fwd * 1e3, ratio_f,
          fa2 / fused_f, ratio_b, want_b, a3.attn_fwd * 1e3, a2.attn_fwd * 1e3, r3.mem_total / GiB, r2.mem_total / GiB);
}

// Allocator: --software framework counts no fragmentation share (software.h alloc_share):
// torchtitan launches with PyTorch's expandable segments and publishes its peak *reserved* memory
// (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3: Llama 3.1 8B,
// FSDP, local batch 2 of 8192 tokens, selective op AC, 82.4 GiB on 8 and 67.0 GiB on 128 H100s of
// 96 GB): the tensors counted and the 0.5 GiB reserve are that within 1.7 GiB. The Scaling
// codebase's runs keep their fitted share (mem_frag of the activations on top).
static void test_allocator_share(void) {
    DeviceProfile d;
    profile_builtin("grand-teton-h100", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    ModelConfig c = model("llama3-8b", 8192);
    c.micro_batch = 2, c.zero = 3, c.recompute = RECOMPUTE_OP;
    double want[2] = {82.4, 67.0};
    int gpus[2] = {8, 128};
    for (int i = 0; i < 2; i++) {
        PlanResult r;
        c.dp = gpus[i];
        int rc = plan_predict(&c, &k, 2 * gpus[i], 8, &d, &r);
        char name[64];
        sprintf(name, "torchtitan_h100_reserved_memory_%d_gpus", gpus[i]);
        check(rc == 0 && r.mem_overhead == d.mem_overhead && fabs(r.mem_total / GiB - want[i]) < 1.7, name,
              "%.2f GiB (reserve %.2f), published %.1f", r.mem_total / GiB, r.mem_overhead / GiB, want[i]);
    }
    check(plan_setup_for(SOFTWARE_SCALING).alloc_share && !plan_setup_for(SOFTWARE_FOUNDRY).alloc_share &&
              !k.alloc_share && !plan_setup_for(SOFTWARE_MEGATRON).alloc_share,
          "allocator_share_by_software", "scaling: mem_frag (fitted on its runs); the others: none");
}

// ----------------------------------------------------------------------------
// Time by shape

// A GEMM's efficiency by its shape (time.h, matmul_shape_eff), by hand. 128 x 128 tiles:
//   h200 (132 SMs, k_half 128), M 8192, N 3072, K 768 (dev/RESULTS.md's forward): 64 x 24 = 1536
//     tiles, 12 waves of 132 = 1584: fill 0.969697; K 768 / 896 = 0.857143 -> 0.831169 (split
//     in 2: 0.969697 x 384 / 512 = 0.727). Time 2 x 8192 x 3072 x 768 / (989e12 x 0.855 (own) x
//     0.831169) + 2 us = 56.998 us: 678 TFLOP/s, as measured (0.057 ms).
//   h200, M 768, N 3072, K 8192 (its weight gradient): 144 tiles fill 2 waves by 0.545 alone;
//     split-K in 4: 576 tiles in 5 waves of 132, fill 0.872727, K 2048 / 2176 -> 0.821390
//   a100 (108 SMs, k_half 64), 13B's out-projection at tp 8, M 8192, N 5120, K 640: 2560 tiles
//     in 24 waves of 108, fill 0.987654, K 640 / 704 -> 0.897868; at tp 1 (K 5120) 0.975461
static void test_gemm_shape_efficiency(void) {
    DeviceProfile h200, a100;
    profile_builtin("h200-sxm", &h200), profile_builtin("a100-80gb", &a100);
    h200.matmul_eff = h200.matmul_eff_own;  // what was measured: this trainer's own matmuls (plan_predict_ex's choice)
    double e = matmul_shape_eff(&h200, 8192, 3072, 768, 1), t = matmul_time(&h200, 8192, 3072, 768, 1);
    check(fabs(e - 0.831169) < 1e-6 && fabs(t - 56.998e-6) < 0.01e-6, "gemm_eff_h200_measured_shape",
          "eff %.6f (want 0.831169), %.3f us (want 56.998; measured 57)", e, t * 1e6);
    e = matmul_shape_eff(&h200, 768, 3072, 8192, 1);
    check(fabs(e - 0.821390) < 1e-6, "gemm_eff_split_k", "eff %.6f, want 0.821390 (split in 4)", e);
    double narrow = matmul_shape_eff(&a100, 8192, 5120, 640, 1), wide = matmul_shape_eff(&a100, 8192, 5120, 5120, 1);
    check(fabs(narrow - 0.897868) < 1e-6 && fabs(wide - 0.975461) < 1e-6, "gemm_eff_narrow_k",
          "K 640: %.6f (want 0.897868), K 5120: %.6f (want 0.975461)", narrow, wide);
    DeviceProfile cpu;
    profile_builtin("cpu", &cpu);
    check(matmul_shape_eff(&cpu, 7, 3, 5, 1) == 1, "gemm_eff_cpu_shapeless", "the CPU has no tiles");
}

// Tensor-parallel all-reduces by message size and link (time.h, link_allreduce_time), by hand.
// An 8-GPU A100 node: 300 GB/s x link_eff 0.47 = 141 GB/s per rank, 3.4 us per ring step (NCCL's NVLink
// ring hop, time.h), 14 steps after NCCL's 8.4 us base (the tp collectives go through NCCL as dp's do):
//   64 KiB: 2 x 7/8 x 65536 / 141e9 = 0.8134 us + 8.4 + 47.6 us = 56.8134 us (latency-bound: 1.2 GB/s)
//   64 MiB: 2 x 7/8 x 67108864 / 141e9 = 832.91 us + 8.4 + 47.6 us = 888.91 us (75 GB/s of the buffer)
// An H100 node reduces in its NVSwitches (NVLS) at 0.74 of what the ring's steps see (NCCL measured
// 273 GB/s of algorithm bandwidth against a ring's 370 of bus bandwidth, nccl#1455): 67108864 /
// (0.74 x 450e9 x 0.47) + 23 us (NCCL's NVLS latency at b647562) = 451.78 us; with NCCL's measured
// links (--software framework, link_eff_nccl 0.82) the 273 GB/s themselves. 4 ranks gain nothing from NVLS: a ring. Across nodes
// (16 ranks, 8 per node) the group is a ring again.
static void test_tp_collectives(void) {
    DeviceProfile a100, h100;
    profile_builtin("a100-80gb", &a100), profile_builtin("h100-sxm", &h100);
    Link la = group_link(&a100, 8, 1, 8), lh = group_link(&h100, 8, 1, 8), lh16 = group_link(&h100, 16, 1, 8);
    double small = link_allreduce_time(8, 65536, la), large = link_allreduce_time(8, 67108864, la);
    check(fabs(small - 56.8134e-6) < 1e-10 && fabs(large - 888.91e-6) < 0.01e-6, "tp_allreduce_by_message_size",
          "64 KiB %.4f us (want 56.8134), 64 MiB %.2f us (want 888.91)", small * 1e6, large * 1e6);
    double nvls = link_allreduce_time(8, 67108864, lh);
    check(lh.nvls && fabs(nvls - 451.78e-6) < 0.01e-6, "tp_allreduce_nvls", "%.2f us, want 451.78", nvls * 1e6);
    DeviceProfile nccl = h100;
    PlanSetup framework = plan_setup_for(SOFTWARE_FRAMEWORK);
    nccl.link_eff = software_link_eff(&framework, &h100);  // as plan_links sets it
    Link ln = group_link(&nccl, 8, 1, 8), l4 = group_link(&h100, 4, 1, 8);
    double algbw = 67108864 / (link_allreduce_time(8, 67108864, ln) - NCCL_MODEL_DEFAULT->nvls_lat);
    double four = link_allreduce_time(4, 67108864, l4);
    check(fabs(algbw - 273.06e9) < 0.01e9 && l4.nvls && four == dp_allreduce_time(4, 67108864, 1, l4),
          "tp_allreduce_nvls_as_nccl_measures", "8 ranks at NCCL's links %.2f GB/s (want 273.06), 4 a ring %.2f us",
          algbw / 1e9, four * 1e6);
    check(!lh16.nvls && !la.nvls && link_allreduce_time(1, 67108864, lh) == 0, "tp_allreduce_ring_across_nodes",
          "nvls across nodes %d, on A100 %d", lh16.nvls, la.nvls);
}

// Attention's rate by sequence length (time.h flash_length_factor), by hand. At the benchmark's shapes (16k tokens,
// 16 heads of 128) every pass is work-bound and its shape nt / (nt + 1), nt = T / 128, so a point's rate over the
// shape is TFLOP/s x (nt + 1) / nt. A100 (anchor 2k: 155 x 17/16 = 164.6875): FA2 at 16k 189 x 129/128 / 164.6875 =
// 1.156594, held at 64k; at 2896 (half-way in log length from 2k to 4k, 173 x 33/32) (164.6875 + 178.40625) / 2 /
// 164.6875 = 1.041651; the Triton kernel's own points at 16k 80 x 129/128 / (68 x 17/16) = 1.115917. H100 (anchor
// 16k: 328 x 129/128): FA2 at 512 163 x 5/4 / 330.5625 = 0.616374, held below; its Triton takes FA2's (no points).
// The CPU has no curve: 1. In layer_time (LLaMA-7B at 32k): the A100's Triton forward without its launch is the flat
// rate's over 1.115917.
static void test_flash_length_factor(void) {
    DeviceProfile a, h, cpu;
    profile_builtin("a100-80gb", &a), profile_builtin("h100-sxm", &h), profile_builtin("cpu", &cpu);
    double a2k = 155 * 17.0 / 16, want16 = 189 * 129.0 / 128 / a2k, want_mid = (a2k + 173 * 33.0 / 32) / 2 / a2k;
    double want_tri = 80 * 129.0 / 128 / (68 * 17.0 / 16), want_h512 = 163 * 5.0 / 4 / (328 * 129.0 / 128);
    double f2k = flash_length_factor(&a, 2048, 0), f16 = flash_length_factor(&a, 16384, 0);
    double f64 = flash_length_factor(&a, 65536, 0), fmid = flash_length_factor(&a, sqrt(2048.0 * 4096), 0);
    double ftri = flash_length_factor(&a, 16384, 1), h512 = flash_length_factor(&h, 512, 0);
    double h256 = flash_length_factor(&h, 256, 1), h16 = flash_length_factor(&h, 16384, 1);
    double fcpu = flash_length_factor(&cpu, 65536, 1);
    ModelConfig c = model("llama-7b", 32768);
    PlanSetup k = plan_setup_for(SOFTWARE_FOUNDRY);
    k.attention = ATTN_FLASH_TRITON;
    Link none = {0, 0, 0, 0, 0, NULL};
    DeviceProfile flat = a;
    flat.attn_length = NULL;
    LayerTime lc = layer_time(&c, 1, 1, 0, 1, 1, &k, &a, none, none, none);
    LayerTime lf = layer_time(&c, 1, 1, 0, 1, 1, &k, &flat, none, none, none);
    double ratio = (lf.attn_fwd - a.op_latency) / (lc.attn_fwd - a.op_latency);
    check(fabs(f2k - 1) < 1e-12 && fabs(f16 - want16) < 1e-12 && f64 == f16 && fabs(fmid - want_mid) < 1e-12 &&
              fabs(ftri - want_tri) < 1e-12 && fabs(h512 - want_h512) < 1e-12 && h256 == h512 &&
              fabs(h16 - 1) < 1e-12 && fcpu == 1 && fabs(ratio - want_tri) < 1e-9,
          "flash_length_factor_hand",
          "A100 FA2 2k %.6f, 16k %.6f (want %.6f), 64k %.6f, 2896 %.6f (want %.6f), Triton 16k %.6f (want %.6f); "
          "H100 512 %.6f (want %.6f), 256 %.6f, Triton 16k %.6f; cpu %.1f; A100 Triton 32k flat / curve %.6f",
          f2k, f16, want16, f64, fmid, want_mid, ftri, want_tri, h512, want_h512, h256, h16, fcpu, ratio);
}

// A causal flash kernel's shape (time.h, flash_shape_eff), by hand, on an A100 (108 SMs):
//   8 sequences x 40 heads of 2048 tokens: nt 16 query tiles, 5440 x 136 = 43520 tiles for
//     43520 x 128 / 136 useful; per SM 403 > 16 tiles: 16 / 17 = 0.941176 (the diagonal alone)
//   13B at tp 8, micro-batch 1: 5 heads, 680 tiles (6.3 per SM) behind the longest block of 16:
//     5 x 128 / (108 x 16) = 0.370370
static void test_flash_shape_efficiency(void) {
    DeviceProfile a100;
    profile_builtin("a100-80gb", &a100);
    double full = flash_shape_eff(&a100, 8, 40, 2048), narrow = flash_shape_eff(&a100, 1, 5, 2048);
    check(fabs(full - 16.0 / 17) < 1e-12 && fabs(narrow - 640.0 / 1728) < 1e-12, "flash_eff_by_shape",
          "full %.6f (want 0.941176), 5 heads %.6f (want 0.370370)", full, narrow);
    // FlashAttention-2's tiles by pass (time.h flash2_shape_eff), the same shapes. Head dim 128: forward 128 x 64,
    // query tile i over 2 (i + 1) key tiles, 16 x 17 = 272 tiles of 8192 for 2048^2 / 2 / 8192 = 256 useful; backward
    // 64 x 128, key tile j over 32 - 2j query tiles, 272 again: both 16 / 17 (the square's), and the 5 heads' longest
    // block (32 tiles of 8192 either way) 5 x 256 / (108 x 32) = 0.370370. Head dim 192: backward 64 x 64, key tile j
    // over 32 - j query tiles, 528 tiles of 4096 for 512 useful: 512 / 528 = 0.969697; 5 heads (24.4 tiles an SM)
    // behind the longest block of 32 tiles of 4096: 5 x 512 / (108 x 32) = 0.740741 (its forward 128 x 64 as at 128)
    double f128 = flash2_shape_eff(&a100, 8, 40, 2048, 128, 0), b128 = flash2_shape_eff(&a100, 8, 40, 2048, 128, 1);
    double n128 = flash2_shape_eff(&a100, 1, 5, 2048, 128, 1), b192 = flash2_shape_eff(&a100, 8, 40, 2048, 192, 1);
    double n192 = flash2_shape_eff(&a100, 1, 5, 2048, 192, 1), f192 = flash2_shape_eff(&a100, 1, 5, 2048, 192, 0);
    check(fabs(f128 - 16.0 / 17) < 1e-12 && fabs(b128 - 16.0 / 17) < 1e-12 && fabs(n128 - 1280.0 / 3456) < 1e-12 &&
              fabs(b192 - 512.0 / 528) < 1e-12 && fabs(n192 - 2560.0 / 3456) < 1e-12 && fabs(f192 - narrow) < 1e-12,
          "flash2_tiles_by_pass_hand",
          "hd 128: forward %.6f, backward %.6f (want 0.941176), 5 heads backward %.6f (0.370370); hd 192 backward "
          "%.6f (0.969697), 5 heads %.6f (0.740741), forward %.6f (0.370370)", f128, b128, n128, b192, n192, f192);
}

// This trainer on the H200 (dev/RESULTS.md, dev/bench_gpu.sh: 1 GPU, seq 1024, micro-batch 32):
// gpt2-124m measured 68.6 ms a step, gpt2-1558m 675.2 ms. The planner with the trainer's own
// attention kernels (attn_eff_own) and its fused cross-entropy (4e bytes per logit) is within
// 5% of both (67.3 and 649.6 ms; with FlashAttention-2's rate and a framework's loss it was 81.0
// and 637.1).
// This trainer keeps fp32 gradients on any device (runtime/train.h): on an h100 profile (bf16
// gradients for a framework) its dp all-reduce sends 4 bytes a parameter, twice --grad-reduce
// bf16's 2 (the ring's latency terms aside), while a framework's reduces as the profile's bf16.
static void test_trainer_fp32_grads(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("gpt2-1558m", 1024);
    c.micro_batch = 4, c.dp = 8;
    PlanSetup k = plan_setup_default(), kb = k, kf = plan_setup_for(SOFTWARE_FRAMEWORK);
    kb.grad_reduce_bf16 = 1;
    PlanResult r, rb, rf;
    int rc = plan_predict(&c, &k, 64, 8, &d, &r) | plan_predict(&c, &kb, 64, 8, &d, &rb);
    rc |= plan_predict(&c, &kf, 64, 8, &d, &rf);
    double ratio = r.t_dp_comm / rb.t_dp_comm;
    check(rc == 0 && d.grad_bytes == 2 && ratio > 1.9 && ratio < 2.01 && r.mem_grads == 4 * rf.mem_grads / 2,
          "trainer_dp_reduce_fp32_grads", "dp all-reduce %.2f ms fp32, %.2f ms --grad-reduce bf16 (ratio %.3f); "
          "gradients %.0f B, framework %.0f B", 1e3 * r.t_dp_comm, 1e3 * rb.t_dp_comm, ratio, r.mem_grads,
          rf.mem_grads);
}

// This trainer's ZeRO-0 dp all-reduce, a layer at a time as each layer's gradient is final
// (predict.h dp_layers_exposed): llama-7b, micro-batch 4 x 4096 tokens, dp 8 on an h100 node.
// A layer's reduction (1/32 of 202M of 6.7B parameters' share) is shorter than a layer's
// backward, so the queue never backs up: the head's hides under the first layers, each layer's
// under the next, and what is exposed is the last layer's and the embedding's (reduced after the
// schedule) in full, the rest at comm_interference. Before: the device's dp_overlap (0.5) of
// the stage's backward, 0.2 of all of it. A framework's is still the device's fraction, at NCCL's
// measured interference (comm_interference_nccl).
static void test_trainer_dp_per_layer(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-7b", 4096);
    c.micro_batch = 4, c.dp = 8;
    PlanSetup k = plan_setup_default(), kf = plan_setup_for(SOFTWARE_FRAMEWORK);
    PlanResult r, rf;
    int rc = plan_predict(&c, &k, 32, 8, &d, &r) | plan_predict(&c, &kf, 32, 8, &d, &rf);
    double C = c.d_model, P = chunk_params(&c, c.n_layer, 1, 1, 1), layer = chunk_params(&c, 1, 0, 0, 1);
    double last = r.t_dp_comm * (layer + c.vocab_padded * C) / P, layer_bwd = r.t_layer_bwd;
    double want = last + d.comm_interference * (r.t_dp_comm - last);
    check(rc == 0 && r.timed && r.t_dp_comm * layer / P < layer_bwd && fabs(r.t_dp_exposed / want - 1) < 1e-9 &&
              fabs(rf.t_dp_exposed - d.comm_interference_nccl * rf.t_dp_comm) < 1e-12,
          "trainer_dp_exposed_per_layer", "exposed %.2f ms of %.2f ms (want %.2f: last layer + embedding %.2f); a "
          "layer's reduction %.2f ms, its backward %.2f ms; framework %.2f of %.2f ms", 1e3 * r.t_dp_exposed,
          1e3 * r.t_dp_comm, 1e3 * want, 1e3 * last, 1e3 * r.t_dp_comm * layer / P, 1e3 * layer_bwd,
          1e3 * rf.t_dp_exposed, 1e3 * rf.t_dp_comm);
}

static void test_h200_trainer_steps(void) {
    DeviceProfile d;
    profile_builtin("h200-sxm", &d);
    const char* names[2] = {"gpt2-124m", "gpt2-1558m"};
    double measured[2] = {68.6e-3, 675.2e-3};
    for (int i = 0; i < 2; i++) {
        ModelConfig c = model(names[i], 1024);
        c.micro_batch = 32;
        PlanSetup k = plan_setup_default();
        PlanResult r;
        int rc = plan_predict(&c, &k, 32, 8, &d, &r);
        const char* name = i ? "h200_trainer_step_1558m" : "h200_trainer_step_124m";
        check(rc == 0 && fabs(r.t_step / measured[i] - 1) < 0.05, name, "%.1f ms, measured %.1f", 1e3 * r.t_step,
              1e3 * measured[i]);
    }
}

// states_dtype bf16 (KempnerForge's model.to(bf16): the parameters themselves bf16, AdamW's m and v in their dtype):
// LLaMA-7B (6738415616 parameters) at ZeRO-3 over dp 8 on one H200 node, under a framework. The optimizer's share
// 12/8 bytes a parameter (fp32 master, m, v) becomes 4/8 (bf16 m, v), the weights' and gradients' stay; AdamW's step
// moves 16 bytes a parameter less (the master read and written, m and v read and written at 2 bytes instead of 4):
// 16 x 6738415616 / 8 bytes at 4.8 TB/s x hbm_eff.
static void test_states_bf16_hand(void) {
    ModelConfig c = model("llama-7b", 4096);
    c.zero = 3, c.dp = 8, c.micro_batch = 1;
    DeviceProfile d;
    profile_builtin("h200-sxm", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK), kb = k;
    char err[256];
    int rc = software_set_states_dtype(&kb, "states_dtype", "bf16", err, sizeof(err));
    PlanResult r, rb;
    rc |= plan_predict(&c, &k, 8, 8, &d, &r) | plan_predict(&c, &kb, 8, 8, &d, &rb);
    double P = 6738415616.0, want_dt = 16 * P / 8 / (d.hbm_bw * d.hbm_eff);
    check(rc == 0 && r.mem_optim == 12 * P / 8 && rb.mem_optim == 4 * P / 8 && rb.mem_weights == r.mem_weights &&
              rb.mem_grads == r.mem_grads && fabs(r.t_optim - rb.t_optim - want_dt) < 1e-12,
          "states_bf16_hand", "optimizer states %.0f -> %.0f B (want %.0f -> %.0f), step's optimizer %.4f -> %.4f ms "
          "(%.4f ms less, want %.4f)", r.mem_optim, rb.mem_optim, 12 * P / 8, 4 * P / 8, 1e3 * r.t_optim,
          1e3 * rb.t_optim, 1e3 * (r.t_optim - rb.t_optim), 1e3 * want_dt);
}

// grad_sync last_micro_batch (FSDP2's set_requires_gradient_sync(False) but on the last micro-batch), FSDP2's fp32
// reduce dtype, the same LLaMA-7B at ZeRO-3 over dp 8: every gradient is held unsharded in fp32 (4 x 6738415616
// bytes, against the 2/8 bytes of the sharded bf16 gradient); one reduce-scatter a step instead of one a micro-batch,
// so the step's data-parallel traffic is (m - 1) reduce-scatters less (3 at 4 micro-batches, 1 at 2); the accumulation
// casts the first micro-batch's bf16 gradient to fp32 (2 + 4 bytes) and adds each later one (2 + 4 + 4): at 4
// micro-batches (6 + 3 x 10) / 4 = 9 bytes a parameter a micro-batch. With one micro-batch nothing changes.
static void test_grad_sync_last_hand(void) {
    ModelConfig c = model("llama-7b", 4096);
    c.zero = 3, c.dp = 8, c.micro_batch = 1;
    DeviceProfile d;
    profile_builtin("h200-sxm", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK), ks;
    k.reduce_bytes = 4, ks = k;
    char err[256];
    int rc = software_set_grad_sync(&ks, "grad_sync", "last_micro_batch", 3, err, sizeof(err));
    PlanResult r[3], rs[3];  // 1, 2 and 4 micro-batches
    for (int i = 0; i < 3; i++)
        rc |= plan_predict(&c, &k, 8 << i, 8, &d, &r[i]) | plan_predict(&c, &ks, 8 << i, 8, &d, &rs[i]);
    double P = 6738415616.0, bw = d.hbm_bw * d.hbm_eff;
    double fewer2 = r[1].t_dp_comm - rs[1].t_dp_comm, fewer4 = r[2].t_dp_comm - rs[2].t_dp_comm;
    double acc = grad_accumulate_time(&d, 4, P, 4), want_acc = 9 * P / bw + d.op_latency;
    check(rc == 0 && r[2].mem_grads == P * d.grad_bytes / 8 && rs[2].mem_grads == 4 * P && fewer2 > 0 &&
              close_rel(fewer4, 3 * fewer2, 1e-9) && fabs(acc - want_acc) < 1e-12 &&
              rs[0].mem_total == r[0].mem_total && rs[0].t_step == r[0].t_step,
          "grad_sync_last_hand", "gradients held %.0f -> %.0f B (want %.0f), traffic %.4f / %.4f ms less at 2 / 4 "
          "micro-batches (want 1:3), accumulation %.4f ms a micro-batch (want %.4f), one micro-batch %.4f / %.4f s",
          r[2].mem_grads, rs[2].mem_grads, 4 * P, 1e3 * fewer2, 1e3 * fewer4, 1e3 * acc, 1e3 * want_acc, r[0].t_step,
          rs[0].t_step);
}
