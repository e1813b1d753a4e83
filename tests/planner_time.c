// planner_time.c (included by test_planner.c): the step-time terms a framework's software
// and the cluster decide: Megatron-LM's asynchronous tensor-parallel backward, unfused
// attention's batched matmuls by their shapes, and the links across nodes.

// LLaMA-13B at 2048 tokens over tp ranks of an A100 node: *d the device, *l the node's link.
static ModelConfig llama13b_tp_in_a100_node(int tp, DeviceProfile* d, Link* l) {
    profile_builtin("a100-80gb", d);
    ModelConfig c = model("llama-13b", 2048);
    c.tp = tp;
    *l = group_link(d, tp, 1, 8);
    return c;
}

// Megatron-LM's asynchronous tensor-parallel communication (software.h tp_async_dgrad, time.h
// layer_time): a framework's backward runs the input-gradient all-reduce of the qkv and fc
// linears while their weight gradients are computed, so a layer's backward is shorter than
// the unoverlapped one by 2 x one all-reduce minus what the weight gradients leave exposed
// (and comm_interference_nccl, 0.61, of what they hide: NCCL's kernels); the Scaling codebase and
// this trainer overlap nothing, and a schedule with W passes defers the weight gradients the
// collectives would hide under. LLaMA-13B, 2048 tokens, tp 8 in an A100 node: one all-reduce of
// 2048 x 5120 x 2 B (2 x 7/8 x 20.97 MB / 141 GB/s + NCCL's 8.4 + 14 x 3.4 us = 316.3 us) against weight
// gradients of 195.5 (qkv, 5120 x 1920) and 324.4 us (fc, 5120 x 3456; the framework's matmul_eff
// 0.743): qkv's leaves 316.3 - 195.5 + 0.61 x 195.5 = 240.0 us exposed, fc's hides it whole for
// 0.61 x 316.3 = 192.9 us: 199.6 us saved of 632.6.
static void test_tp_async_dgrad(void) {
    DeviceProfile d;
    Link l;
    ModelConfig c = llama13b_tp_in_a100_node(8, &d, &l);
    PlanSetup fw = plan_setup_for(SOFTWARE_FRAMEWORK), plain = fw;
    plain.tp_async_dgrad = 0;
    LayerTime a = layer_time(&c, 1, 8, 0, 1, 1, &fw, &d, l, l, l);
    LayerTime b = layer_time(&c, 1, 8, 0, 1, 1, &plain, &d, l, l, l);
    double n = 2048, h = 5120, one = link_allreduce_time(8, n * h * d.dtype_bytes, l);
    double dw_qkv = linear_dw_time(&d, n, 3 * h / 8, h), dw_fc = linear_dw_time(&d, n, 2.0 * c.d_ff / 8, h);
    double ci = 0.61, want = 2 * one - comm_exposed(one, dw_qkv, ci) - comm_exposed(one, dw_fc, ci);
    check(dw_qkv < one && dw_fc > one && close_rel(b.bwd - a.bwd, want, 1e-9) && fabs(want - 199.6e-6) < 0.05e-6,
          "tp_async_dgrad_hides_the_backward_allreduces", "all-reduce %.1f us, dW qkv %.1f / fc %.1f us, saved %.1f us",
          one * 1e6, dw_qkv * 1e6, dw_fc * 1e6, (b.bwd - a.bwd) * 1e6);
    c.schedule = SCHED_ZBH1;
    a = layer_time(&c, 1, 8, 0, 1, 1, &fw, &d, l, l, l), b = layer_time(&c, 1, 8, 0, 1, 1, &plain, &d, l, l, l);
    check(a.bwd == b.bwd && !plan_setup_for(SOFTWARE_SCALING).tp_async_dgrad && !plan_setup_default().tp_async_dgrad,
          "tp_async_dgrad_only_framework_without_w", "zb-h1 %.1f vs %.1f us", a.bwd * 1e6, b.bwd * 1e6);
}

// Unfused attention's batched matmuls by their shapes (time.h layer_time): the scores Q K^T
// reduce over the head size (M = N = T, K = hd), P V over the keys (M = T, N = hd, K = T), at
// bmm_eff (the GEMMs' rate, 0.68 on an A100); the forward is the two and the softmax's 2e
// bytes per score, then the attention dropout's kernel (a framework's GPT at Megatron's default 0.1: 2e + 1 bytes
// per score; dropout_time_hand). GPT 1.7B (Narayanan et al.'s smallest: 24 heads of 96), 2048 tokens: the
// scores' K = 96 gets 96 / (96 + 64) = 0.6 of the rate (0.599 with the last wave); P V's
// N = 96 fills 0.75 of its tiles but K = 2048 runs at 2048 / 2112 (0.665 with split-K and waves).
static void test_unfused_attention_shapes(void) {
    DeviceProfile d, dn;
    profile_builtin("a100-80gb", &d);
    dn = d, dn.matmul_eff = d.bmm_eff;
    ModelConfig c = model("gpt2-124m", 2048);
    c.n_layer = 24, c.n_head = c.n_kv_head = 24, c.d_model = 2304, c.d_ff = 4 * 2304;
    config_finalize(&c);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    k.attention = ATTN_FUSED_SOFTMAX;
    Link l = group_link(&d, 1, 1, 8);
    LayerTime lt = layer_time(&c, 1, 1, 0, 1, 1, &k, &d, l, l, l);
    double T = 2048, heads = 24, scores = heads * T * T;
    double want = matmul_time(&dn, T, T, 96, heads) + matmul_time(&dn, T, 96, T, heads) +
                  elementwise_time(&d, scores * 2 * d.dtype_bytes) +
                  elementwise_time(&d, scores * (2 * d.dtype_bytes + 1));
    double e_s = matmul_shape_eff(&d, T, T, 96, heads), e_o = matmul_shape_eff(&d, T, 96, T, heads);
    check(close_rel(lt.attn_fwd, want, 1e-12) && fabs(e_s - 0.599) < 5e-4 && fabs(e_o - 0.665) < 5e-4,
          "unfused_attention_by_shape",
          "forward %.1f us (want %.1f), scores' shape %.3f, output's %.3f", lt.attn_fwd * 1e6, want * 1e6, e_s, e_o);
}

// Links across nodes (time.h group_link_nested, nic_link): the NICs' share at nic_eff, NVLink
// at link_eff, the slower bounding a ring that has both. A100 nodes of 8 GPUs with 8 HDR NICs:
// a group of one GPU per node gets 25 GB/s x 0.8 = 20 GB/s; of 8 per node (a 16-rank ring)
// 8 x 20 = 160 GB/s of NICs, held to the NVLink hops' 300 x 0.47 = 141 GB/s.
static void test_links_across_nodes(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    Link one = group_link(&d, 16, 8, 8), eight = group_link(&d, 16, 1, 8), p2p = nic_link(&d);
    check(close_rel(one.bw, 20e9, 1e-12) && close_rel(eight.bw, 141e9, 1e-12) && p2p.bw == one.bw &&
              one.lat == d.inter_latency,
          "links_across_nodes", "1 per node %.1f GB/s, 8 per node %.1f GB/s, p2p %.1f GB/s", one.bw / 1e9,
          eight.bw / 1e9, p2p.bw / 1e9);
}

// A group that straddles a node's edge (time.h group_smallest_share): tp 6 on H100 nodes of 8 (24 GPUs) puts ranks
// 6-11 two on one node and four on the next: their collectives cross the NICs at two GPUs' share, 2 x 8 x 50 GB/s
// / 8 x nic_eff, over 2 nodes; tp 3 leaves one rank of a group alone (ranks 6, 7 | 8): one GPU's share. tp 4 and a
// dp group of 2 ranks 4 apart (blocks of 8) stay on NVLink.
static void test_group_straddles_node(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    double nic = d.nics_per_gpu * d.nic_bw * d.nic_eff;
    Link six = group_link(&d, 6, 1, 8), three = group_link(&d, 3, 1, 8), four = group_link(&d, 4, 1, 8),
         dp = group_link_nested(&d, 1, 4, 2, 4, 8);
    check(close_rel(six.bw, 2 * nic, 1e-12) && six.nodes == 2 && close_rel(three.bw, nic, 1e-12) &&
              three.nodes == 2 && four.nodes == 1 && close_rel(four.bw, d.intra_bw * d.link_eff, 1e-12) &&
              dp.nodes == 1 && group_smallest_share(6, 1, 1, 6, 8) == 2 && group_smallest_share(3, 1, 1, 3, 8) == 1,
          "group_straddles_node", "tp 6 %.1f GB/s on %d nodes, tp 3 %.1f on %d, tp 4 %.1f on %d", six.bw / 1e9,
          six.nodes, three.bw / 1e9, three.nodes, four.bw / 1e9, four.nodes);
}

// A GPU's share of the NICs does not change with the node's size (device.h nics_per_gpu): the h200-sxm profile on
// Kempner's nodes of 4 H200 (4 ConnectX-7 NDR a node, KempnerForge scripts/slurm/multinode.sh at 5d3e723). tp 4 x dp
// 8 on nodes of 4: the dp group has one rank a node, one GPU's NIC, 1 x 400 Gb/s = 50 GB/s x nic_eff 0.8 = 40 GB/s
// over 8 nodes (the profile's 8 NICs kept for a node of 4 gave two a GPU: 80); on nodes of 8 two ranks a node, 80
// GB/s over 4 nodes. A pipeline message leaving the node: one GPU's share, 40 GB/s at either size.
static void test_nics_per_gpu_node_size(void) {
    DeviceProfile d;
    profile_builtin("h200-sxm", &d);
    Link four = group_link_nested(&d, 1, 4, 8, 4, 4), eight = group_link_nested(&d, 1, 4, 8, 4, 8), p2p = nic_link(&d);
    check(d.nics_per_gpu == 1 && close_rel(four.bw, 40e9, 1e-12) && four.nodes == 8 && close_rel(eight.bw, 80e9, 1e-12)
              && eight.nodes == 4 && close_rel(p2p.bw, 40e9, 1e-12),
          "nics_per_gpu_node_size", "dp 8 one rank a node of 4: %.1f GB/s on %d nodes; two a node of 8: %.1f on %d; "
          "p2p %.1f GB/s", four.bw / 1e9, four.nodes, eight.bw / 1e9, eight.nodes, p2p.bw / 1e9);
}

// A 4-GPU board with no NVSwitch (device.h h200-hgx4, time.h intra_group_bw), by hand: each pair of GPUs is wired
// with 6 NVLink4 links, 150 GB/s each way, and a group gets the links among its members. Under a framework (NCCL's
// link_eff_nccl 0.82): tp 2 one pair, 150 x 0.82 = 123 GB/s; tp 4 three pairs a GPU, 450 x 0.82 = 369; tp 2 x dp 2
// on one node: the dp pairs (ranks 0-2, 1-3) are other links than the tp pairs (0-1, 2-3), 123 each; h200-sxm's
// NVSwitches give tp 2 all 369. Across nodes of 4, a dp group of 4 ranks 2 apart has 2 a node: the smaller of 2
// GPUs' NICs (2 x 50 x nic_eff 0.8 = 80) and their pair's NVLink at link_eff 0.47 (70.5); h200-sxm's: 80.
static void test_hgx4_group_links(void) {
    DeviceProfile hgx4, sxm;
    profile_builtin("h200-hgx4", &hgx4);
    profile_builtin("h200-sxm", &sxm);
    PlanSetup fw = plan_setup_for(SOFTWARE_FRAMEWORK);
    PlanResult r;
    ModelConfig c = model("llama3-8b", 4096);
    c.tp = 2, c.dp = 1;
    PlanLinks tp2 = plan_links(&c, &fw, &hgx4, 4, &r), tp2_sxm = plan_links(&c, &fw, &sxm, 8, &r);
    c.tp = 4;
    PlanLinks tp4 = plan_links(&c, &fw, &hgx4, 4, &r);
    c.tp = 2, c.dp = 2;
    PlanLinks tp2dp2 = plan_links(&c, &fw, &hgx4, 4, &r);
    Link across = group_link_nested(&hgx4, 1, 2, 4, 2, 4), across_sxm = group_link_nested(&sxm, 1, 2, 4, 2, 4);
    check(hgx4.gpus_per_node == 4 && !hgx4.nvls && close_rel(tp2.tp.bw, 123e9, 1e-12) &&
              close_rel(tp4.tp.bw, 369e9, 1e-12) && close_rel(tp2dp2.tp.bw, 123e9, 1e-12) &&
              close_rel(tp2dp2.dp.bw, 123e9, 1e-12) && tp2dp2.dp.nodes == 1 && close_rel(tp2_sxm.tp.bw, 369e9, 1e-12) &&
              close_rel(across.bw, 70.5e9, 1e-12) && across.nodes == 2 && close_rel(across_sxm.bw, 80e9, 1e-12),
          "hgx4_group_links", "tp 2 %.1f GB/s, tp 4 %.1f, tp 2 x dp 2: tp %.1f dp %.1f on %d node(s); "
          "h200-sxm tp 2 %.1f; 2 a node across nodes %.1f (h200-sxm %.1f)", tp2.tp.bw / 1e9, tp4.tp.bw / 1e9,
          tp2dp2.tp.bw / 1e9, tp2dp2.dp.bw / 1e9, tp2dp2.dp.nodes, tp2_sxm.tp.bw / 1e9, across.bw / 1e9,
          across_sxm.bw / 1e9);
}

// Where a framework's data-parallel group lands (software.h rank_order, predict.h plan_links): tp fastest, then dp
// (Megatron-core's "tp-cp-ep-dp-pp", DeepSpeed's pipe-data-model, nanotron's, torchtitan's). tp 4 pp 8 dp 4 on
// H100 nodes of 8: a node holds tp groups 0 and 1, two dp ranks of one stage, so the dp ring crosses nodes on 2
// ranks' NICs: 2 x 8 x 50 GB/s / 8 x nic_eff; this trainer's grid (tp-cp-pp-dp) puts two stages on a node and the
// dp group one rank a node: one NIC's share. The pipeline's neighbours are 16 ranks apart (framework) and 4 (trainer):
// both cross nodes at some boundary, one GPU's NIC share.
static void test_framework_rank_order(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    ModelConfig c = model("llama-13b", 2048);
    c.tp = 4, c.pp = 8, c.dp = 4;
    PlanSetup fw = plan_setup_for(SOFTWARE_MEGATRON), own = plan_setup_default();
    PlanResult r;
    PlanLinks lf = plan_links(&c, &fw, &d, 8, &r), lt = plan_links(&c, &own, &d, 8, &r);
    double nic = d.nics_per_gpu * d.nic_bw * d.nic_eff;
    check(fw.rank_order == ORDER_TP_DP_PP && close_rel(lf.dp.bw, 2 * nic, 1e-12) && lf.dp.nodes == 2 &&
              close_rel(lt.dp.bw, nic, 1e-12) && lt.dp.nodes == 4 && close_rel(lf.pp.bw, nic, 1e-12) &&
              close_rel(lt.pp.bw, nic, 1e-12),
          "framework_rank_order", "dp %.1f GB/s on %d nodes (trainer %.1f on %d), pp %.1f / %.1f GB/s", lf.dp.bw / 1e9,
          lf.dp.nodes, lt.dp.bw / 1e9, lt.dp.nodes, lf.pp.bw / 1e9, lt.pp.bw / 1e9);
}

// A tensor-parallel group wider than a node (time.h link_gather_time, link_allreduce_time): NCCL's model, as the
// data-parallel collectives take it (ring_latency: tuning.cc at b647562), by hand. 16 ranks on 2 A100 nodes of 8:
// the ring's bandwidth is the slower of the node's NICs (8 x 25 GB/s x nic_eff 0.8 = 160) and NVLink's hops (300 x
// 0.47 = 141): 141 GB/s. An all-gather of 64 MiB: 15/16 x 67108864 / 141e9 = 446.20 us; its latency 8.4 us, 14 steps
// inside a node at max(3.4, 3 x 2 us AMD net overhead) = 6 and 1 across at 14: 106.4 us; 552.60 us (every step at
// 14 us, as before: 656.20). An all-reduce: ring 892.41 + 1.4 (NCCL's plateau) x (8.4 + 26 x 6 + 4 x 14) = 1200.97
// us, tree 2 x 64 MiB / (0.92 x 141e9) + 2 x (7 + 1) x 28 = 1482.67: the ring (was 1312.41). LLaMA-13B's layer at 2048 tokens, tp 16 with
// SP: 4 all-gathers (reduce-scatters) of 2048 x 5120 x 2 B a forward, 4 x (139.44 + 106.4) = 983.35 us (1397.75).
// 8 ranks in one node take the same model, every step on NVLink: 7/8 x 67108864 / 141e9 = 416.46 us + 8.4 + 7 x
// 3.4 = 448.66 us (416.46 + 23.8 = 440.26 before 2026-12-06: the base was left out inside a node).
static void test_tp_collectives_across_nodes(void) {
    DeviceProfile d;
    Link l8;
    ModelConfig c = llama13b_tp_in_a100_node(8, &d, &l8);
    Link l = group_link(&d, 16, 1, 8);
    double ag = link_gather_time(16, 67108864, l), ar = link_allreduce_time(16, 67108864, l);
    check(l.nodes == 2 && fabs(l.bw - 141e9) < 1 && fabs(ag - 552.60e-6) < 0.01e-6 && fabs(ar - 1200.97e-6) < 0.01e-6,
          "tp_collectives_across_nodes_hand", "%d nodes, all-gather %.2f us (want 552.60), all-reduce %.2f us (want "
          "1200.97)", l.nodes, ag * 1e6, ar * 1e6);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    c.tp = 16, c.sp = 1;
    LayerTime lt = layer_time(&c, 1, 16, 1, 1, 1, &k, &d, l, l, l);
    double in_node = link_gather_time(8, 67108864, l8);
    check(fabs(lt.comm_fwd - 983.35e-6) < 0.01e-6, "tp_layer_across_nodes_hand",
          "forward collectives %.2f us (want 983.35)", lt.comm_fwd * 1e6);
    check(l8.nodes <= 1 && fabs(in_node - 448.66e-6) < 0.01e-6, "tp_collectives_in_node_nccl_base_hand",
          "8 ranks in a node: all-gather of 64 MiB %.2f us (want 448.66)", in_node * 1e6);
}

// The Scaling codebase's SwiGLU (scaling/core/nn/mlp.py, ParallelSwiGLUMLP) is two column-parallel
// linears, dense_in and siglu_weight, each placing its own all-reduce of its input gradient
// (copy_to_tensor_model_parallel_region): without SP a LLaMA layer's backward has three
// all-reduces of s x b x h where Megatron's fused gate|up has two; with SP both reduce-scatter once.
static void test_swiglu_two_linears(void) {
    DeviceProfile d;
    Link l;
    ModelConfig c = llama13b_tp_in_a100_node(4, &d, &l);
    PlanSetup sc = plan_setup_for(SOFTWARE_SCALING), fused = sc;
    fused.swiglu_two_linears = 0;
    double one = link_allreduce_time(4, 2048.0 * 5120 * d.dtype_bytes, l);
    LayerTime a = layer_time(&c, 1, 4, 0, 1, 1, &sc, &d, l, l, l);
    LayerTime b = layer_time(&c, 1, 4, 0, 1, 1, &fused, &d, l, l, l);
    LayerTime a_sp = layer_time(&c, 1, 4, 1, 1, 1, &sc, &d, l, l, l);
    LayerTime b_sp = layer_time(&c, 1, 4, 1, 1, 1, &fused, &d, l, l, l);
    check(close_rel(a.comm_bwd, 3 * one, 1e-12) && close_rel(b.comm_bwd, 2 * one, 1e-12) &&
              close_rel(a.bwd - b.bwd, one, 1e-9) && a_sp.bwd == b_sp.bwd && sc.swiglu_two_linears &&
              !plan_setup_for(SOFTWARE_FRAMEWORK).swiglu_two_linears && !plan_setup_default().swiglu_two_linears,
          "swiglu_two_linears_one_more_allreduce", "all-reduce %.1f us; backward's %.1f (two linears) vs %.1f us",
          one * 1e6, a.comm_bwd * 1e6, b.comm_bwd * 1e6);
}

// FlashAttention in Triton (software.h ATTN_FLASH_TRITON; llm-foundry's attn_impl triton): FA2's
// rate with the forward 1.4x and the backward 2x longer (Dao 2023, section 4.1), FA2's memory
// (the log-sum-exp only), and listed by the search only when asked for by name. MPT-7B's shape
// (32 heads of 128) at 8192 tokens on an H100, kernel latencies off so the ratios are exact.
static void test_flash_triton(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    d.op_latency = 0;
    ModelConfig c = model("gpt2-124m", 8192);
    c.n_layer = 32, c.n_head = c.n_kv_head = 32, c.d_model = 4096, c.d_ff = 4 * 4096;
    config_finalize(&c);
    PlanSetup f2 = plan_setup_for(SOFTWARE_FRAMEWORK), tri = f2;
    tri.attention = ATTN_FLASH_TRITON;
    Link l = group_link(&d, 1, 1, 8);
    LayerTime a = layer_time(&c, 2, 1, 0, 1, 1, &f2, &d, l, l, l), b = layer_time(&c, 2, 1, 0, 1, 1, &tri, &d, l, l, l);
    double extra_bwd = (FLASH_TRITON_BWD_SLOWDOWN - 1) * 2.5 * a.attn_fwd;
    int same_memory = act_bytes_per_layer(&c, 2, 1, 1, 0, RECOMPUTE_NONE, &f2, 2) ==
                      act_bytes_per_layer(&c, 2, 1, 1, 0, RECOMPUTE_NONE, &tri, 2);
    check(close_rel(b.attn_fwd, FLASH_TRITON_FWD_SLOWDOWN * a.attn_fwd, 1e-12) &&
              close_rel(b.bwd - a.bwd, extra_bwd, 1e-9) && same_memory,
          "flash_triton_rate_and_memory", "forward %.1f vs FA2 %.1f us, backward +%.1f us (want +%.1f), same memory %d",
          b.attn_fwd * 1e6, a.attn_fwd * 1e6, (b.bwd - a.bwd) * 1e6, extra_bwd * 1e6, same_memory);
    PlanKey key = {8, 1, 1, 1, 1, 1, 1, SCHED_1F1B, 0, 0, 0, 0, 0, 0};
    PlanFilter any = plan_filter_any(), asked = any;
    asked.attention = ATTN_FLASH_TRITON;
    PlanKeys all = {NULL, 0, 0}, named = {NULL, 0, 0};
    PlanSetup framework = plan_setup_for(SOFTWARE_FRAMEWORK);  // FlashAttention's kernels, not this trainer's
    plan_keys_settings(key, &any, &framework, &all), plan_keys_settings(key, &asked, &framework, &named);
    int listed = 0;
    for (int i = 0; i < all.n; i++) listed += all.k[i].attention == ATTN_FLASH_TRITON;
    check(all.n > 0 && !listed && named.n > 0 && named.k[0].attention == ATTN_FLASH_TRITON, "flash_triton_by_name_only",
          "%d keys without a filter (%d flash_triton), %d when asked", all.n, listed, named.n);
    free(all.k), free(named.k);
}

// The H100's matmul constants (device.h: matmul_eff_own and matmul_k_half from this project's H200)
// against a public measurement of the same die: the largest bf16 matmul rate found on an H100 SXM,
// 792.1 TFLOP/s at 6144 x 17920 x 2816 (ml-engineering's MAMF table, CUDA 12.1). The planner's
// own-kernel rate there: 0.855 x fill 0.998 (6720 tiles in 51 waves of 132) x 2816 / 2944 = 807.
static void test_h100_largest_matmul(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    d.matmul_eff = d.matmul_eff_own, d.matmul_latency = 0;
    double M = 6144, N = 17920, K = 2816, rate = 2 * M * N * K / matmul_time(&d, M, N, K, 1);
    check(fabs(rate / 792.1e12 - 1) < 0.03, "h100_largest_matmul_as_measured", "%.1f TFLOP/s, measured 792.1",
          rate / 1e12);
}

// The H100's GEMM shape term (time.h matmul_shape_eff: tile waves and matmul_k_half) against a published sweep:
// XLA's default matmul performance table (tensorflow/tensorflow 3ddd179, third_party/xla/xla/service/gpu/model/
// default_matmul_perf_table.txtpb, key "sm_90", bf16 x bf16 -> bf16, batch 1), its points with M 4096 (the tokens of
// one 4096-token micro-batch) and N, K 1024-4096: the per-rank GEMMs of Megatron-LM's H100 weak-scaling rows are these
// or larger. Measured 727.5-780.2 TFLOP/s; the planner's own-kernel rate (0.855, k_half 128, 2 us a call) within 3%
// of each, and the spread the README's "larger GEMMs ... are more efficient" refers to (the smallest over the largest
// of these shapes) 0.940 against the measured 0.932. Smaller GEMMs (<= 17 GFLOP: 4096 x 1024 x 1024 measured 497.6,
// the planner 623) run slower than the term says: dev/PLANNER.md.
static void test_h100_gemm_shapes_published(void) {
    DeviceProfile d;
    profile_builtin("h100-sxm", &d);
    d.matmul_eff = d.matmul_eff_own;
    static const double pts[][4] = {{4096, 2048, 2048, 727.5}, {4096, 4096, 2048, 735.6}, {4096, 1024, 4096, 751.7},
                                    {4096, 2048, 4096, 759.4}, {4096, 4096, 4096, 780.2}};
    double worst = 0, rate[5];
    for (int i = 0; i < 5; i++) {
        double M = pts[i][0], N = pts[i][1], K = pts[i][2];
        rate[i] = 2 * M * N * K / matmul_time(&d, M, N, K, 1) / 1e12;
        if (fabs(rate[i] / pts[i][3] - 1) > worst) worst = fabs(rate[i] / pts[i][3] - 1);
    }
    double spread = rate[0] / rate[4], measured = pts[0][3] / pts[4][3];
    check(worst < 0.03 && fabs(spread - measured) < 0.02, "h100_gemm_shapes_published",
          "worst %.1f%% off XLA's sm_90 table; 4096x2048x2048 over 4096^3 %.3f, measured %.3f", 100 * worst, spread,
          measured);
}

// A framework's rates on an A100 (device.h, predict.h plan_software_device, software.h software_nccl_interference):
// its matmuls at the measured PyTorch rate, 230 TFLOP/s at 8192^3 (qhduan/transformers-benchmarks; 0.743 x 312 x
// fill 37.93 / 38 waves of 108 x 8192 / 8256, 2 us a call: 229.5), the layouts study's codebase at its fitted
// 0.68 (210.0), this trainer at its own 0.68; a collective of NCCL's that a framework hides costs 0.61 of itself
// (Lee et al. 2025), this trainer's and the study's 0.2 (an estimate). On an H100 no study ran: both rates 0.634.
static void test_framework_rates_measured(void) {
    DeviceProfile a, h;
    profile_builtin("a100-80gb", &a), profile_builtin("h100-sxm", &h);
    PlanSetup sw[5];
    double n = 8192, rate[5];
    for (int i = 0; i < 5; i++) {
        sw[i] = plan_setup_for(i);
        DeviceProfile d = plan_software_device(&sw[i], &a);
        rate[i] = 2 * n * n * n / matmul_time(&d, n, n, n, 1) / 1e12;
    }
    DeviceProfile hs = plan_software_device(&sw[SOFTWARE_SCALING], &h);
    DeviceProfile hf = plan_software_device(&sw[SOFTWARE_FOUNDRY], &h);
    check(fabs(rate[SOFTWARE_FRAMEWORK] / 230 - 1) < 0.005 && rate[SOFTWARE_FOUNDRY] == rate[SOFTWARE_FRAMEWORK] &&
              rate[SOFTWARE_MEGATRON] == rate[SOFTWARE_FRAMEWORK] && fabs(rate[SOFTWARE_SCALING] - 210.0) < 0.1 &&
              fabs(rate[SOFTWARE_TRAINER] - 210.0) < 0.1 && hs.matmul_eff == 0.634 && hf.matmul_eff == 0.634 &&
              software_nccl_interference(&sw[SOFTWARE_FOUNDRY], &a) == 0.61 &&
              software_nccl_interference(&sw[SOFTWARE_MEGATRON], &h) == 0.61 &&
              software_nccl_interference(&sw[SOFTWARE_SCALING], &a) == 0.2 &&
              software_nccl_interference(&sw[SOFTWARE_TRAINER], &h) == 0.2,
          "framework_rates_measured", "A100 8192^3: framework %.1f TFLOP/s (measured 230), study %.1f, trainer %.1f; "
          "NCCL interference framework %.2f, trainer %.2f", rate[SOFTWARE_FRAMEWORK], rate[SOFTWARE_SCALING],
          rate[SOFTWARE_TRAINER], software_nccl_interference(&sw[SOFTWARE_FRAMEWORK], &a),
          software_nccl_interference(&sw[SOFTWARE_TRAINER], &a));
}

// A power limit below the datasheet's (device.h tensor_clock; predict.h plan_software_device): grand-teton-h100's H100s
// run at 500 W, NVIDIA's datasheet quotes 989 dense BF16 TFLOP/s for the SXM at 700 W and 835.5 for the NVL (the same
// 132 SMs) at 400 W; linear in power, (835.5 + 153.5 x 100 / 300) / 989 = 886.667 / 989 = 0.896528 of the clock. A
// framework's 8192^3 matmul there: 2 x 8192^3 / (989e12 x 0.634 x 0.896528 x fill 0.955238 (split-K 2: 8192 tiles in
// 63 waves of 132, 0.985089, x 4096 / 4224)) + 2 us = 2.049570 ms (536.46 TFLOP/s); the SXM's at 700 W 1.837705 ms
// (598.31). Every tensor-core rate scales (attention, bmm), not the peak MFU is quoted against, nor HBM's ops.
static void test_power_limited_clock(void) {
    DeviceProfile gt, sxm;
    profile_builtin("grand-teton-h100", &gt), profile_builtin("h100-sxm", &sxm);
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    DeviceProfile g = plan_software_device(&k, &gt), s = plan_software_device(&k, &sxm);
    double n = 8192, tg = matmul_time(&g, n, n, n, 1), ts = matmul_time(&s, n, n, n, 1);
    check(fabs(gt.tensor_clock - 0.896528) < 1e-6 && sxm.tensor_clock == 1 && fabs(tg - 2.049570e-3) < 1e-9 &&
              fabs(ts - 1.837705e-3) < 1e-9,
          "power_limited_clock_matmul", "clock %.6f (want 0.896528); 8192^3 %.6f ms (want 2.049570), SXM %.6f (1.837705)",
          gt.tensor_clock, tg * 1e3, ts * 1e3);
    DeviceProfile full = gt;
    full.tensor_clock = 1;
    DeviceProfile f = plan_software_device(&k, &full);
    check(g.peak_flops == 989e12 && fabs(g.attn_eff_flash2 - 0.35 * 0.896528) < 1e-6 &&
              fabs(g.bmm_eff / f.bmm_eff - gt.tensor_clock) < 1e-12 &&
              elementwise_time(&g, 1e9) == elementwise_time(&f, 1e9),
          "power_limited_clock_scope", "peak %.0f TFLOP/s kept, flash2 %.6f, bmm x %.6f, HBM op %.6f ms either way",
          g.peak_flops / 1e12, g.attn_eff_flash2, g.bmm_eff / f.bmm_eff, elementwise_time(&g, 1e9) * 1e3);
    char err[256];
    DeviceProfile set = sxm;
    int rc = profile_set(&set, "tensor_clock", "0.5", err, sizeof(err));
    check(rc == 0 && set.tensor_clock == 0.5 && profile_set(&set, "tensor_clock", "0", err, sizeof(err)) == -1,
          "power_limited_clock_key", "tensor_clock = 0.5 read, 0 refused");
}

// ZeRO-3 / FSDP over whole nodes without model parallelism (predict.h plan_links, time.h group_link_nested,
// dp_gather_time): NCCL's ring enters and leaves each node once per channel, its channels spread over the
// node's NICs, so the ring's bus bandwidth across nodes is the node's NICs together (8 x 25 GB/s x nic_eff 0.8 =
// 160 GB/s on a DGX A100), not one GPU's share (20 GB/s). 128 A100s on 16 nodes, MPT-7B's layer (12 x 4096^2
// parameters, bf16: 402.65 MB) gathered: 127/128 x 402.65 MB / 160 GB/s = 2.497 ms, and NCCL's ring latency
// 8.4 + 112 x 6 + 15 x 14 = 890.4 us (a step inside a node of a ring that spans nodes: 3 x the AMD host's 2 us
// net overhead): 3.387 ms (at one GPU's share of the NICs it would be 19.97 ms + 0.89). llm-foundry's
// A100-40GB table ran such layouts on 16-128 GPUs at flat MFU (7B: 50.4 -> 50.1), which the node's NICs predict
// (49.0 at 16, 48.9 at 128 in 2026-12-06) and one GPU's share does not (dev/PLANNER.md, "ZeRO-3 across nodes").
static void test_zero3_across_nodes_per_rank(void) {
    DeviceProfile d;
    profile_builtin("a100-40gb", &d);
    d.link_eff = software_link_eff(&(PlanSetup){.nccl_links = 1}, &d);
    Link l = group_link_nested(&d, 1, 1, 128, 1, 8);
    double bytes = 12.0 * 4096 * 4096 * 2, t = dp_gather_time(128, bytes, 1, l);
    double want = 127.0 / 128 * bytes / 160e9 + 8.4e-6 + 112 * 6e-6 + 15 * 14e-6;
    check(close_rel(l.bw, 160e9, 1e-12) && l.nodes == 16 && close_rel(t, want, 1e-12) && fabs(t - 3.387e-3) < 1e-6,
          "zero3_allgather_across_nodes_per_rank", "%.1f GB/s per rank over %d nodes, a 7B layer's gather %.3f ms",
          l.bw / 1e9, l.nodes, t * 1e3);
}

// ZeRO-3's per-micro-batch traffic as FSDP prefetches it (software.h zero3_layer_prefetch, predict.h plan_dp_time):
// a pass's gathers (forward) and gathers + reduce-scatters (backward, one communicator: their sum) hide under the
// pass but for one layer's share, the first gather and the last reduce-scatter; the device's dp_overlap window (half
// the pass) without it. 1024 ranks, 32 layers, 6.4G parameters on the stage, 160 GB/s and NCCL's 8.4 us base per
// bucket (34 buckets): a gather of 12.8 GB takes ag = 1023/1024 x 12.8e9 / 160e9 + 34 x 8.4 us = 80.21 ms.
// The hidden part costs comm_interference_nccl (0.61) of itself. Compute-bound (forward 0.5 s, backward 1 s): the
// forward stretches by ag/32 + 0.61 x 31/32 ag = 49.90 ms (48.93 with half the pass as the window), the backward by
// twice that. Comm-bound (1 ms a layer forward, 2 backward): by ag/32 + (31/32 ag - 31/32 F) + 0.61 x 31/32 F =
// 68.12 ms where half the pass hides 16 ms: 73.97 ms.
static double zero3_stretch_fwd(int prefetch, double fwd, double* bwd_stretch) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-7b", 2048);
    c.dp = 1024, c.zero = 3;
    PlanSetup k = plan_setup_for(SOFTWARE_FRAMEWORK);
    k.zero3_layer_prefetch = prefetch;
    PlanChunks ch = plan_chunks_alloc(1, 1);
    ch.layers[0] = 32, ch.stage_params[0] = 6.4e9;
    ch.t_fwd[0] = ch.stage_fwd[0] = fwd, ch.t_bwd[0] = ch.stage_bwd[0] = 2 * fwd;
    PlanResult r;
    memset(&r, 0, sizeof(r));
    r.n_micro = 1;
    Link l = {160e9, 0, 0, 1, 0, NULL};
    plan_dp_time(&c, &k, &d, l, &ch, &r);
    double sf = ch.t_fwd[0] - fwd;
    *bwd_stretch = ch.t_bwd[0] - 2 * fwd;
    plan_chunks_free(&ch);
    return sf;
}
static void test_zero3_layer_prefetch(void) {
    double ag = 1023.0 / 1024 * 12.8e9 / 160e9 + 34 * 8.4e-6, f = 31.0 / 32, sb_on, sb_off, cb_on, cb_off;
    double on = zero3_stretch_fwd(1, 0.5, &sb_on), off = zero3_stretch_fwd(0, 0.5, &sb_off);
    double comm_on = zero3_stretch_fwd(1, 0.032, &cb_on), comm_off = zero3_stretch_fwd(0, 0.032, &cb_off);
    double want_on = ag / 32 + 0.61 * f * ag, want_comm = ag / 32 + (f * ag - f * 0.032) + 0.61 * f * 0.032;
    check(close_rel(on, want_on, 1e-9) && close_rel(sb_on, 2 * want_on, 1e-9) && close_rel(off, 0.61 * ag, 1e-9) &&
              close_rel(comm_on, want_comm, 1e-9) && close_rel(comm_off, ag - 0.016 + 0.61 * 0.016, 1e-9) &&
              fabs(on - 49.90e-3) < 0.01e-3 && fabs(comm_on - 68.12e-3) < 0.01e-3 &&
              plan_setup_for(SOFTWARE_FOUNDRY).zero3_layer_prefetch &&
              !plan_setup_for(SOFTWARE_SCALING).zero3_layer_prefetch,
          "zero3_layer_prefetch_hand", "gather %.2f ms; forward +%.2f ms (window of half the pass: +%.2f), comm-bound "
          "+%.2f (+%.2f)", ag * 1e3, on * 1e3, off * 1e3, comm_on * 1e3, comm_off * 1e3);
}

// DeepSpeed's ZeRO-3 of 2021 (software.h zero3_param_sync, predict.h zero3_param_sync_time), one GPT-3 175B layer
// (h 12288: qkv 3h^2 = 452,984,832, proj h^2, fc1 and fc2 4h^2 elements) on 1536 DGX A100s (192 nodes, 160 GB/s):
// each tensor its own ring, NCCL's latency 8.4 + 1344 x 3.4 + 191 x 14 = 7252 us, and 1536 copy kernels of
// op_latency 4 us (PyTorch's list collectives) = 6.144 ms; a gather of B = 2S bytes also zeroes the tensor and
// copies it out, 3B at HBM's 2.039e12 x 0.58, and its Python loop takes 1536 turns (a view, a rank look-up) of
// DS_GATHER_LOOP_CALLS 2.7 x PYTORCH_CALL_S 2 us on the host (8.2944 ms); a reduce-scatter divides the gradient in
// place first (2B at HBM's rate and a kernel's 4 us) and copies it in, 2B. qkv: gather 29.6472 ms, reduce-scatter
// 22.1229; proj 24.3427 / 16.3076; fc1, fc2 32.2995 / 25.0306. Forward 118.5889 ms (the gathers); backward under
// full recomputation: the gathers twice (for the recomputed forward and for the backward: DeepSpeed v0.3.14-v0.5.x
// keeps no module between them), the four reduce-scatters, and one for each of the 8 small tensors (biases of 3h, h,
// 4h, h; two LayerNorms' weight and bias, h each), about 13.40 ms each, most of it latency and copies: 432.8726 ms
// (357.8392 when fc2, whose reuse distance is 0, was kept, the division not counted and a turn was one call). None
// of it hides (the stage stretches by all of it); the framework's prefetch hides all but a layer's share.
static void test_zero3_param_sync(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("gpt2-124m", 2048);
    c.n_layer = 96, c.n_head = 96, c.n_kv_head = 96, c.d_model = 12288, c.d_ff = 4 * 12288;
    config_finalize(&c);
    c.dp = 1536, c.zero = 3, c.recompute = RECOMPUTE_FULL;
    PlanChunks ch = plan_chunks_alloc(1, 1);
    ch.layers[0] = 1, ch.stage_params[0] = 12.0 * 12288 * 12288;
    Link l = {160e9, 14e-6, 0, 192, 3.4e-6, NULL};
    double fwd, bwd, hbm = 2.039e12 * 0.58, lat = 7252e-6, copies = 1536 * 4e-6, host = 1536 * 2.7 * 2e-6, want_f = 0,
           want_b = 0;
    zero3_param_sync_time(&c, &d, &ch, 0, 1536, l, 2, 2, &fwd, &bwd);
    double S[4] = {3.0 * 12288 * 12288, 12288.0 * 12288, 4.0 * 12288 * 12288, 4.0 * 12288 * 12288};
    double small[8] = {3.0 * 12288, 12288, 4.0 * 12288, 12288, 12288, 12288, 12288, 12288};
    for (int i = 0; i < 4; i++) {
        double B = 2 * S[i], ring = 1535.0 / 1536 * B / 160e9 + lat + copies, ag = 3 * B / hbm + host + ring;
        want_f += ag, want_b += 2 * ag + 4 * B / hbm + 4e-6 + ring;
    }
    for (int i = 0; i < 8; i++)
        want_b += 4 * 2 * small[i] / hbm + 4e-6 + 1535.0 / 1536 * 2 * small[i] / 160e9 + lat + copies;
    PlanSetup ds = plan_setup_for(SOFTWARE_DEEPSPEED2021);
    PlanResult r;
    memset(&r, 0, sizeof(r));
    r.n_micro = 1;
    ch.t_fwd[0] = ch.stage_fwd[0] = 0.1, ch.t_bwd[0] = ch.stage_bwd[0] = 0.2;
    plan_dp_time(&c, &ds, &d, l, &ch, &r);
    check(close_rel(fwd, want_f, 1e-12) && close_rel(bwd, want_b, 1e-12) && fabs(fwd - 118.5889e-3) < 1e-7 &&
              fabs(bwd - 432.8726e-3) < 1e-7 && close_rel(ch.t_fwd[0], 0.1 + fwd, 1e-12) &&
              close_rel(ch.t_bwd[0], 0.2 + bwd, 1e-12) && ds.zero3_param_sync && !ds.zero3_layer_prefetch &&
              !plan_setup_for(SOFTWARE_FRAMEWORK).zero3_param_sync,
          "zero3_param_sync_hand", "forward %.4f ms, backward %.4f ms (want 118.5889, 432.8726); passes %.4f / %.4f s",
          fwd * 1e3, bwd * 1e3, ch.t_fwd[0], ch.t_bwd[0]);
    plan_chunks_free(&ch);
}
// Its gathered weights (predict.h plan_memory): stage3_max_live_parameters (1e9) and the largest tensor, bf16, where
// the framework's FSDP holds two whole layers: a 530B GPT (h 20480, 105 layers) on 640 GPUs at micro-batch 4, 2 x 2 x
// (12h^2 + 13h) = 20.1352 GB against 2 x (1e9 + 4h^2) = 5.3554 GB: 14.7783 GB less, the rest the same.
static void test_zero3_param_sync_memory(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("gpt2-124m", 2048);
    c.n_layer = 105, c.n_head = 128, c.n_kv_head = 128, c.d_model = 20480, c.d_ff = 4 * 20480, c.vocab = 51200;
    config_finalize(&c);
    c.dp = 640, c.zero = 3, c.micro_batch = 4, c.recompute = RECOMPUTE_FULL;
    PlanSetup fw = plan_setup_for(SOFTWARE_FRAMEWORK), ds = plan_setup_for(SOFTWARE_DEEPSPEED2021);
    fw.attention = ds.attention = ATTN_FUSED_SOFTMAX;
    PlanResult rf, rd;
    int rc = plan_predict(&c, &fw, 2560, 8, &d, &rf) | plan_predict(&c, &ds, 2560, 8, &d, &rd);
    double h = 20480, want = 4 * (12 * h * h + 13 * h) - 2 * (1e9 + 4 * h * h);
    check(rc == 0 && fabs(rf.mem_temp - rd.mem_temp - want) < 1 && fabs(want - 14.7783e9) < 1e5,
          "zero3_param_sync_memory_hand", "%.4f GB less (want %.4f): %.2f GiB against %.2f",
          (rf.mem_temp - rd.mem_temp) / 1e9, want / 1e9, rd.mem_total / GiB, rf.mem_total / GiB);
}
