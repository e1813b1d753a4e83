// test_planner.c: checks of the layout planner (planner.h) against hand computations,
// Korthikanti et al. 2022, the published LLaMA sizes, and Hagemann et al. 2023 (the
// layouts study: its published points, its conclusions, and measured runs of its sheets).
//   gcc -O2 -I. -Wall -Wextra -o test_planner tests/test_planner.c -lm && ./test_planner   (from the repository root)
// One line per check, "PASS name" or "FAIL name: details", then "N passed, N failed".

// The shared headers define static helpers (RNG, timers) that this program does not call.
#pragma GCC diagnostic ignored "-Wunused-function"
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "planner/planner.h"
#include "tests/harness.h"

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

static ModelConfig model(const char* preset, int seq_len) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    apply_preset(&c, find_preset(preset));
    if (seq_len) c.seq_len = seq_len;
    config_finalize(&c);
    c.dp = c.tp = c.pp = c.vpp = c.micro_batch = c.cp = c.cp_ulysses = 1;
    c.schedule = SCHED_1F1B;
    return c;
}

// The layouts study's setting (scripts/validate_planner.py): its models have a 128k-token
// vocabulary and ran on the Aleph Alpha Scaling codebase, on the a100-80gb profile.
static ModelConfig study_model(const char* preset, int seq_len) {
    ModelConfig c = model(preset, seq_len);
    c.vocab = 128000;
    config_finalize(&c);
    return c;
}

// Best fitting layout for a setup in the study's setting, searched in its space (1F1B,
// ZeRO-1, as the Scaling codebase supports) or over everything (restrict = 0).
typedef struct { PlanResult* all; int n; PlanResult best; int found; } Search;

static Search search(const char* preset, int seq_len, int gpus, int restrict_to_paper, const PlanFilter* extra) {
    ModelConfig c = study_model(preset, seq_len);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanSetup k = plan_setup_for(SOFTWARE_SCALING);
    PlanFilter f = extra ? *extra : plan_filter_any();
    if (restrict_to_paper) f.schedule = SCHED_1F1B, f.zero = 1;
    Search s;
    s.n = plan_enumerate(&c, gpus, 4194304 / c.seq_len, 8, &d, &k, &f, &s.all);
    plan_sort(s.all, s.n);
    s.found = s.n > 0 && s.all[0].fits;
    if (s.found) s.best = s.all[0];
    return s;
}

// This trainer's setup with a framework's memory (Korthikanti's activations, temporaries and
// the allocator's share) instead of its own buffers: what the memory formulas are tested on.
static PlanSetup framework_setup(void) {
    PlanSetup k = plan_setup_default();
    k.own_buffers = 0, k.alloc_share = 1;  // the autograd count with the fitted allocator share (as scaling)
    k.grad_bytes = 0;                      // and the device's gradient bytes, as a framework
    return k;
}

static const char* layout_str(const PlanResult* p, char* buf) {
    sprintf(buf, "dp%d tp%d pp%d vpp%d mb%d %s sp%d zero%d %s rms%d (%.1f%% MFU, %.1f GiB)", p->dp, p->tp, p->pp,
            p->vpp, p->micro_batch, recompute_name(p->recompute), p->sp, p->zero, ATTN_NAMES[p->setup.attention],
            p->setup.rms_kernel, 100 * p->mfu, p->mem_total / GiB);
    return buf;
}

// The study's MFU (6N + 12LhT, N with the embedding) of a result of the study model.
static double mfu_study(const char* preset, int seq_len, const PlanResult* r) {
    ModelConfig c = study_model(preset, seq_len);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    return study_mfu(&c, r, &d);
}

// ----------------------------------------------------------------------------
// The tests, by concern, in the order main runs them.
#include "tests/planner_model.c"
#include "tests/planner_time.c"
#include "tests/planner_schedules.c"
#include "tests/planner_study.c"
#include "tests/planner_cli.c"
#include "tests/planner_run.c"
#include "tests/planner_nanotron.c"
#include "tests/planner_consts.c"

// ----------------------------------------------------------------------------

int main(void) {
    test_params();
    test_memory_by_hand();
    test_stage_model();
    test_memory_framework_by_hand();
    test_loss_vocab_by_hand();
    test_korthikanti();
    test_recompute_policies();
    test_mlp_kinds();
    test_recompute_full_distributed();
    test_megatron_swiglu_fused();
    test_network_profiles();
    test_aws_profiles_zero3_traffic();
    test_nccl_latency_and_algorithm();
    test_nccl_by_release();
    test_megatron_tp_comm_overlap();
    test_dropout_time();
    test_megatron_loss_bytes();
    test_megatron_loss_compiled();
    test_megatron_dp_chunked();
    test_megatron_grad_buffer_passes();
    test_fsdp2_copy_out();
    test_megatron_dp_interleaved();
    test_nanotron_cost_cut();
    test_nanotron_grad_accum();
    test_bf16_optimizer_cast_add();
    test_states_bf16_hand();
    test_grad_sync_last_hand();
    test_nanotron_zero1_host();
    test_nanotron_ddp_buckets();
    test_nanotron_options();
    test_attention_flash3();
    test_flash_length_factor();
    test_allocator_share();
    test_gemm_shape_efficiency();
    test_tp_collectives();
    test_tp_collectives_across_nodes();
    test_flash_shape_efficiency();
    test_tp_async_dgrad();
    test_zero3_across_nodes_per_rank();
    test_zero3_layer_prefetch();
    test_zero3_param_sync();
    test_zero3_param_sync_memory();
    test_unfused_attention_shapes();
    test_links_across_nodes();
    test_framework_rank_order();
    test_group_straddles_node();
    test_nics_per_gpu_node_size();
    test_hgx4_group_links();
    test_swiglu_two_linears();
    test_flash_triton();
    test_h100_largest_matmul();
    test_h100_gemm_shapes_published();
    test_framework_rates_measured();
    test_power_limited_clock();
    test_h200_trainer_steps();
    test_trainer_fp32_grads();
    test_trainer_dp_per_layer();
    test_bubble();
    test_pipeline_send_wait();
    test_pending_receive();
    test_interleaved_in_flight();
    test_pipeline_ends_cut();
    test_lazy_grads();
    test_llama3_405b_memory();
    test_bubble_definition();
    test_zero_bubble_schedules();
    test_context_parallel();
    test_invalid_layouts();
    test_paper_points();
    test_conclusions();
    test_recompute_cost();
    test_device_files();
    test_runs_reduce_dtype();
    test_runs_grad_dtype();
    test_runs_mlp();
    test_runs_pp_split();
    test_runs_cp_kind();
    test_runs_row_over_flag();
    test_runs_grad_alloc();
    test_runs_grad_accum_pass();
    test_runs_states_dtype();
    test_runs_grad_sync();
    test_runs_loss_compiled();
    test_runs_tp_async_dgrad();
    test_runs_fsdp_version();
    test_runs_loss();
    test_zbh1_framework_memory_hand();
    test_plan_loss_flag();
    test_runs_dropout();
    test_cli_pp_split_ends();
    test_grad_reduce_other_software();
    test_runs();
    test_cli_kernel_names();
    test_cli_schedules();
    test_mfu_causal_count();
    test_run_plan();
    test_cli_context_parallel();
    test_calibration_runs();
    test_search_pruning();
    test_trainer_one_kernel();
    test_hostile_inputs();
    test_constants_have_rows();
    return tests_done();
}
