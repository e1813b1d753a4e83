// test_planner.c: checks of the layout planner (planner.h) against hand computations,
// Korthikanti et al. 2022, the published LLaMA sizes, and Hagemann et al. 2023.
//   gcc -O2 -Wall -Wextra -o test_planner test_planner.c -lm && ./test_planner
// One line per check, "PASS name" or "FAIL name: details", then "N passed, N failed".

// The shared headers define static helpers (RNG, timers) that this program does not call.
#pragma GCC diagnostic ignored "-Wunused-function"
#include <sys/wait.h>
#include <unistd.h>
#include "planner.h"

static int n_pass = 0, n_fail = 0;

static void check(int ok, const char* name, const char* fmt, ...) {
    if (ok) { printf("PASS %s\n", name); n_pass++; return; }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", name, msg);
    n_fail++;
}

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

static ModelConfig model(const char* preset, int seq_len) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    apply_preset(&c, find_preset(preset));
    if (seq_len) c.seq_len = seq_len;
    config_finalize(&c);
    c.dp = c.tp = c.pp = c.vpp = c.micro_batch = 1;
    c.schedule = SCHED_1F1B;
    return c;
}

// Best fitting layout for a setup, searched in the paper's space (1F1B, ZeRO-1, as the
// Aleph Alpha Scaling codebase supports) or over everything (restrict = 0).
typedef struct { PlanResult* all; int n; PlanResult best; int found; } Search;

static Search search(const char* preset, int seq_len, int gpus, int restrict_to_paper, const PlanFilter* extra) {
    ModelConfig c = model(preset, seq_len);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    PlanFilter f = extra ? *extra : plan_filter_any();
    if (restrict_to_paper) f.schedule = SCHED_1F1B, f.zero = 1;
    Search s;
    s.n = plan_enumerate(&c, gpus, 4194304 / c.seq_len, 8, &d, &f, &s.all);
    plan_sort(s.all, s.n);
    s.found = s.n > 0 && s.all[0].fits;
    if (s.found) s.best = s.all[0];
    return s;
}

static const char* layout_str(const PlanResult* p, char* buf) {
    sprintf(buf, "dp%d tp%d pp%d vpp%d mb%d %s sp%d zero%d (%.1f%% MFU, %.1f GiB)", p->dp, p->tp, p->pp, p->vpp, p->micro_batch,
            recompute_name(p->recompute), p->sp, p->zero, 100 * p->mfu, p->mem_total / GiB);
    return buf;
}

// ----------------------------------------------------------------------------

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

// llama-tiny (L=4, h=64, 4 heads / 2 kv heads of 16, d_ff=192, vocab 257 -> 384), seq 32,
// micro-batch 2, one GPU, bf16 + Adam, flash attention, fused norm. By hand:
//   params: layer = 2*64^2 + 2*64*32 + 3*64*192 + 2*64 = 49280; 4 layers 197120
//           + embedding 384*64 = 24576 + final norm 64 + head 24576 = 246336
//   states: ZeRO-0 16 B/param = 3941376 B; ZeRO-1 on dp=2: 2 + 2 + 12/2 = 10 B/param
//   activations per layer: sbh = 32*2*64 = 4096 B-units; r = 0.5, f = 3:
//           8 + (4 + 4*0.5 + 6*3) + 4a/h (0.25) = 32.25 -> 132096 B; 4 layers = 528384 B
//           (1F1B with pp=1 holds 1 micro-batch)
//   temp: logits 64 * 384 * (2 + 4) = 147456 + final norm input 8192 = 155648 B
static void test_memory_by_hand(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-tiny", 0);
    c.micro_batch = 2;
    PlanResult r;
    int rc = plan_predict(&c, 2, 8, &d, &r);
    double params = 246336;
    check(rc == 0 && r.mem_weights == params * 2 && r.mem_grads == params * 2 && r.mem_optim == params * 12,
          "memory_states_zero0", "weights %.0f grads %.0f optim %.0f (want %.0f, %.0f, %.0f)", r.mem_weights, r.mem_grads,
          r.mem_optim, params * 2, params * 2, params * 12);
    check(r.mem_act == 528384, "memory_activations_hand", "%.0f B, want 528384", r.mem_act);
    check(r.mem_temp == 155648, "memory_logits_hand", "%.0f B, want 155648", r.mem_temp);
    check(r.mem_total == 3941376 + 528384 + 155648 + 5 * GiB, "memory_total_hand", "%.0f B", r.mem_total);
    c.dp = 2, c.zero = 1;
    plan_predict(&c, 4, 8, &d, &r);
    check(r.mem_weights + r.mem_grads + r.mem_optim == params * 10, "memory_zero1_dp2", "%.0f, want %.0f",
          r.mem_weights + r.mem_grads + r.mem_optim, params * 10);
    double w, g, o;
    state_bytes_per_param(&d, 2, 4, &w, &g, &o);
    int ok2 = w == 2 && g == 0.5 && o == 3;
    state_bytes_per_param(&d, 3, 4, &w, &g, &o);
    check(ok2 && w == 0.5 && g == 0.5 && o == 3, "memory_zero2_zero3_bytes", "zero3 on dp=4: %.2f + %.2f + %.2f", w, g, o);
}

// Korthikanti et al. 2022, Table 2, for GPT-3 175B (h=12288, a=96, s=2048), b=1, t=8:
// 5as/h = 80, so per layer in s*b*h bytes: none 114, tp 23, tp+sp 14.25, tp+selective 13,
// tp+sp+selective 4.25, full 2 (and 2/t = 0.25 with sp).
static void test_korthikanti(void) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.arch = ARCH_GPT2, c.n_layer = 96, c.n_head = c.n_kv_head = 96, c.d_model = 12288, c.seq_len = 2048, c.vocab = 51200;
    config_finalize(&c);
    double sbh = 2048.0 * 12288;
    struct { int tp, sp, rc; double want; const char* name; } cases[] = {
        {1, 0, RECOMPUTE_NONE, 114, "korthikanti_no_parallelism"},
        {8, 0, RECOMPUTE_NONE, 23, "korthikanti_tp"},
        {8, 1, RECOMPUTE_NONE, 14.25, "korthikanti_tp_sp"},
        {8, 0, RECOMPUTE_SELECTIVE, 13, "korthikanti_tp_selective"},
        {8, 1, RECOMPUTE_SELECTIVE, 4.25, "korthikanti_tp_sp_selective"},
        {8, 0, RECOMPUTE_FULL, 2, "korthikanti_full_recompute"},
    };
    for (int i = 0; i < 6; i++) {
        double got = act_bytes_per_layer(&c, 1, cases[i].tp, cases[i].sp, cases[i].rc, 0, 1, 2) / sbh;
        check(fabs(got - cases[i].want) < 1e-9, cases[i].name, "%.4f sbh, want %.4f sbh", got, cases[i].want);
    }
    // 175B with t=8, sp + selective: 4.25 * 2048 * 12288 B = 102 MiB per layer
    double mib = act_bytes_per_layer(&c, 1, 8, 1, RECOMPUTE_SELECTIVE, 0, 1, 2) / (1024.0 * 1024.0);
    check(fabs(mib - 102.0) < 1e-9, "korthikanti_175b_layer_mib", "%.3f MiB, want 102", mib);
}

static void test_bubble(void) {
    // equal stage times, no p2p: the simulated bubble is the textbook one
    int p = 4, m = 8, v = 2;
    double tf[8], tb[8], busy[4];
    for (int g = 0; g < 8; g++) tf[g] = 1.0, tb[g] = 2.0;
    double span = schedule_simulate(SCHED_1F1B, p, 1, m, tf, tb, 0, busy);
    double bubble = (span - busy[0]) / busy[0];
    check(fabs(bubble - bubble_formula(SCHED_1F1B, p, 1, m)) < 1e-12, "bubble_1f1b_equals_formula", "simulated %.6f, (p-1)/m = %.6f",
          bubble, bubble_formula(SCHED_1F1B, p, 1, m));
    for (int g = 0; g < 8; g++) tf[g] = 0.5, tb[g] = 1.0;  // a stage's work split in v chunks
    span = schedule_simulate(SCHED_INTERLEAVED, p, v, m, tf, tb, 0, busy);
    bubble = (span - busy[0]) / busy[0];
    check(fabs(bubble - bubble_formula(SCHED_INTERLEAVED, p, v, m)) < 1e-12, "bubble_interleaved_equals_formula",
          "simulated %.6f, (p-1)/(v m) = %.6f", bubble, bubble_formula(SCHED_INTERLEAVED, p, v, m));
    // 1F1B: stage 0 holds pp micro-batches at peak; this is what sizes activation memory
    PipeOp ops[6 * 8];
    int n = schedule_build(SCHED_1F1B, 0, p, 1, m, ops);
    check(schedule_max_in_flight(ops, n) == p, "in_flight_1f1b_stage0", "%d, want %d", schedule_max_in_flight(ops, n), p);
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-13b", 0);
    c.pp = 4, c.dp = 16;
    PlanResult r;
    plan_predict(&c, 2048, 8, &d, &r);
    check(r.in_flight == 4 && r.worst_stage == 0, "planner_uses_in_flight", "in flight %d on stage %d", r.in_flight, r.worst_stage);
}

static void test_invalid_layouts(void) {
    DeviceProfile d;
    profile_builtin("a100-80gb", &d);
    ModelConfig c = model("llama-13b", 0);
    PlanResult r;
    c.tp = 3;  // 40 heads
    check(plan_predict(&c, 2048, 8, &d, &r) == -1 && r.invalid, "invalid_tp_heads", "accepted tp=3 with 40 heads");
    c = model("llama-13b", 0);
    c.pp = 8, c.dp = 1, c.micro_batch = 1;
    check(plan_predict(&c, 4, 8, &d, &r) == -1, "invalid_1f1b_too_few_micro_batches", "accepted m=4 < pp=8");
    c = model("llama-13b", 0);
    c.sp = 1;
    check(plan_predict(&c, 2048, 8, &d, &r) == -1, "invalid_sp_without_tp", "accepted sp with tp=1");
    c = model("llama-13b", 0);
    c.dp = 64, c.zero = 1, c.micro_batch = 2;
    plan_predict(&c, 2048, 8, &d, &r);
    check(!r.fits, "13b_mb2_without_recompute_does_not_fit", "predicted %.1f GiB fits", r.mem_total / GiB);
    c.recompute = RECOMPUTE_FULL;
    plan_predict(&c, 2048, 8, &d, &r);
    check(r.fits && r.hfu > r.mfu, "13b_mb2_full_recompute_fits", "%.1f GiB, HFU %.3f MFU %.3f", r.mem_total / GiB, r.hfu, r.mfu);
    double flops = config_flops_per_token(&c, c.seq_len);
    check(close_rel(r.mfu, flops * r.tokens_per_s_per_gpu / d.peak_flops, 1e-12), "mfu_is_palm_flops_over_peak", "mismatch");
}

// Hagemann et al. 2023: LLaMA 13B, seq 2048, 4M-token batches on A100-80GB, FlashAttention-2 + fused RMSNorm.
static void test_paper_points(void) {
    char buf[200], buf2[200];
    // 64 GPUs: best tp=1 pp=1 dp=64 mb=1, no recomputation, 70.6% MFU
    for (int restrict_to_paper = 1; restrict_to_paper >= 0; restrict_to_paper--) {
        Search s = search("llama-13b", 2048, 64, restrict_to_paper, NULL);
        const PlanResult* b = &s.best;
        int paper_layout = s.found && b->tp == 1 && b->pp == 1 && b->dp == 64 && b->micro_batch == 1 && b->recompute == RECOMPUTE_NONE;
        // else the paper's layout must be within 2 MFU points of the top one
        double paper_mfu = 0;
        for (int i = 0; i < s.n; i++) {
            const PlanResult* p = &s.all[i];
            if (p->fits && p->tp == 1 && p->pp == 1 && p->micro_batch == 1 && p->recompute == RECOMPUTE_NONE && p->zero == 1) { paper_mfu = p->mfu; break; }
        }
        check(paper_layout || (s.found && b->mfu - paper_mfu < 0.02), restrict_to_paper ? "paper_13b_64gpu_top_layout" : "free_13b_64gpu_top_layout",
              "top is %s; paper's layout %.1f%%", layout_str(b, buf), 100 * paper_mfu);
        check(fabs(100 * paper_mfu - 70.6) <= 5, restrict_to_paper ? "paper_13b_64gpu_mfu" : "free_13b_64gpu_mfu",
              "predicted %.1f%%, published 70.6%%", 100 * paper_mfu);
        free(s.all);
    }
    // 32 GPUs: tp=1 pp=1 dp=32 mb=1, no recompute, no sp: 69.7%
    Search s = search("llama-13b", 2048, 32, 1, NULL);
    PlanFilter f = plan_filter_any();
    f.tp = 1, f.pp = 1, f.micro_batch = 1, f.recompute = RECOMPUTE_NONE, f.sp = 0;
    int i = plan_best(s.all, s.n, &f);
    check(i == 0, "paper_13b_32gpu_top_layout", "top is %s, paper's at rank %d", layout_str(&s.all[0], buf), i + 1);
    check(i >= 0 && fabs(100 * s.all[i].mfu - 69.7) <= 5, "paper_13b_32gpu_mfu", "predicted %s, published 69.7%%",
          i >= 0 ? layout_str(&s.all[i], buf2) : "none");
    free(s.all);
}

// The paper's conclusions: micro-batch 1 is best; no recomputation when another layout fits;
// sequence parallelism pays above 30B or beyond 2k tokens, not for 13B at 2k; prefer
// pipeline over tensor parallelism. The setups are the paper's (its data files' names).
static void test_conclusions(void) {
    struct { const char* model; int seq, gpus; } setups[] = {
        {"llama-13b", 2048, 64}, {"llama-13b", 8192, 128}, {"llama-30b", 2048, 256},
        {"llama-30b", 8192, 128}, {"llama-65b", 2048, 128},
    };
    char buf[200], name[96];
    for (int k = 0; k < 5; k++) {
        Search s = search(setups[k].model, setups[k].seq, setups[k].gpus, 1, NULL);
        sprintf(name, "conclusion_mb1_no_recompute_%s_%dk_%dgpu", setups[k].model + 6, setups[k].seq / 1024, setups[k].gpus);
        check(s.found && s.best.micro_batch == 1 && s.best.recompute == RECOMPUTE_NONE, name, "top is %s", layout_str(&s.best, buf));
        free(s.all);
    }
    // sequence parallelism: best layout with SP vs best without (the paper's SP study setups)
    struct { const char* model; int seq, gpus, sp_wins; } sp_setups[] = {
        {"llama-13b", 2048, 32, 0}, {"llama-13b", 8192, 64, 1}, {"llama-30b", 8192, 64, 1}, {"llama-65b", 2048, 64, 1},
    };
    for (int k = 0; k < 4; k++) {
        PlanFilter f = plan_filter_any();
        f.sp = 1;
        Search on = search(sp_setups[k].model, sp_setups[k].seq, sp_setups[k].gpus, 1, &f);
        f.sp = 0;
        Search off = search(sp_setups[k].model, sp_setups[k].seq, sp_setups[k].gpus, 1, &f);
        int sp_wins = on.best.tokens_per_s_per_gpu > off.best.tokens_per_s_per_gpu;
        sprintf(name, "conclusion_sp_%s_%s_%dk", sp_setups[k].sp_wins ? "pays" : "does_not_pay", sp_setups[k].model + 6, sp_setups[k].seq / 1024);
        check(on.found && off.found && sp_wins == sp_setups[k].sp_wins, name, "with sp %.1f%%, without %.1f%%", 100 * on.best.mfu, 100 * off.best.mfu);
        free(on.all);
        free(off.all);
    }
    // pipeline over tensor parallelism: 30B at 2k uses no tp; 65B splits more by pp than tp
    Search s = search("llama-30b", 2048, 64, 1, NULL);
    check(s.found && s.best.tp == 1 && s.best.pp > 1, "conclusion_pp_over_tp_30b", "top is %s", layout_str(&s.best, buf));
    free(s.all);
    s = search("llama-65b", 2048, 128, 1, NULL);
    check(s.found && s.best.pp > s.best.tp, "conclusion_pp_over_tp_65b", "top is %s", layout_str(&s.best, buf));
    free(s.all);
}

// ----------------------------------------------------------------------------
// Device files and the command line

// Write text to /tmp/test_planner_PID_NAME; the path goes to path[256].
static const char* write_file(char* path, const char* name, const char* text) {
    snprintf(path, 256, "/tmp/test_planner_%d_%s", (int)getpid(), name);
    FILE* f = fopen(path, "w");
    if (!f) fail("cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

// Run plan_main(argv) in a child with its output discarded; returns its exit status.
static int run_plan_main(const char** args, int n) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(99);
        char* argv[32];
        argv[0] = (char*)"train";
        for (int i = 0; i < n; i++) argv[i + 1] = (char*)args[i];
        argv[n + 1] = NULL;
        _exit(plan_main(n + 1, argv));
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_device_files(void) {
    char err[512];
    DeviceProfile d;
    char good[256], path[256], bad_path[256], csv[256];
    write_file(good, "good.txt",
        "# calibrated cpu profile\n"
        "base = cpu\n"
        "peak_tflops = 0.2   # 200 GFLOP/s\n"
        "hbm_gbps = 25\n"
        "intra_latency_us = 3\n"
        "flash_attn = 0\n");
    int rc = profile_parse_file(good, &d, err, sizeof(err));
    check(rc == 0 && d.peak_flops == 0.2e12 && d.hbm_bw == 25e9 && fabs(d.intra_latency - 3e-6) < 1e-18 && d.dtype_bytes == 4,
          "device_file_good", "rc %d (%s), peak %g", rc, rc ? err : "", d.peak_flops);
    struct { const char* name; const char* text; const char* want; } bad[] = {
        {"unknown_key", "peak_tflops = 100\nwarp_speed = 9\n", ":2: unknown key 'warp_speed'"},
        {"negative", "hbm_gbps = -5\n", ":1: hbm_gbps = -5 is out of range"},
        {"not_a_number", "matmul_eff = fast\n", ":1: matmul_eff: expected a number"},
        {"no_equals", "\n\npeak_tflops 100\n", ":3: expected 'key = value'"},
        {"empty_value", "mem_gib =\n", ":1: mem_gib: missing value"},
        {"base_not_first", "mem_gib = 40\nbase = h100-sxm\n", ":2: 'base' must be the first key"},
        {"bad_int", "nics_per_node = 2.5\n", ":1: nics_per_node: expected an integer"},
        {"grad_bytes_3", "grad_bytes = 3\n", ":1: grad_bytes = 3 is out of range"},
    };
    for (int i = 0; i < 8; i++) {
        write_file(path, bad[i].name, bad[i].text);
        rc = profile_parse_file(path, &d, err, sizeof(err));
        char name[64];
        sprintf(name, "device_file_rejects_%s", bad[i].name);
        check(rc == -1 && strstr(err, path) && strstr(err, bad[i].want), name, "rc %d, message '%s'", rc, err);
        unlink(path);
    }
    rc = profile_parse_file("/nonexistent/dev.txt", &d, err, sizeof(err));
    check(rc == -1 && strstr(err, "cannot open"), "device_file_missing", "rc %d '%s'", rc, err);
    write_file(bad_path, "bad_cli.txt", "peak_tflops = -1\n");
    const char* a1[] = {"--plan", "--model", "llama-tiny", "--gpus", "2", "--device-file", bad_path};
    check(run_plan_main(a1, 7) != 0, "cli_rejects_bad_device_file", "exit status 0");
    unlink(bad_path);
    const char* a2[] = {"--plan", "--model", "llama-tiny", "--gpus", "2", "--device-file", good, "--global-batch", "8", "--top", "3"};
    check(run_plan_main(a2, 11) == 0, "cli_accepts_good_device_file", "non-zero exit");
    unlink(good);
    const char* a3[] = {"--plan", "--gpus", "2", "--warp", "9"};
    check(run_plan_main(a3, 5) != 0, "cli_rejects_unknown_flag", "exit status 0");
    const char* a4[] = {"--plan", "--gpus", "two"};
    check(run_plan_main(a4, 3) != 0, "cli_rejects_bad_number", "exit status 0");
    const char* a5[] = {"--plan", "--device", "tpu-v9"};
    check(run_plan_main(a5, 3) != 0, "cli_rejects_unknown_device", "exit status 0");
    const char* a6[] = {"--plan", "--model", "llama-13b", "--global-batch-tokens", "1000"};
    check(run_plan_main(a6, 5) != 0, "cli_rejects_batch_not_multiple_of_seq", "exit status 0");
    const char* a7[] = {"--plan", "--device-set", "link_eff=2"};
    check(run_plan_main(a7, 3) != 0, "cli_rejects_bad_device_set", "exit status 0");
    write_file(csv, "plan.csv", "");
    const char* a8[] = {"--plan", "--model", "llama-tiny", "--gpus", "4", "--device", "cpu", "--global-batch", "16", "--plan-csv", csv};
    rc = run_plan_main(a8, 11);
    FILE* f = fopen(csv, "r");
    int lines = 0;
    for (int ch; f && (ch = fgetc(f)) != EOF; ) lines += ch == '\n';
    if (f) fclose(f);
    check(rc == 0 && lines > 10, "cli_writes_csv", "rc %d, %d lines", rc, lines);
    unlink(csv);
}

int main(void) {
    test_params();
    test_memory_by_hand();
    test_korthikanti();
    test_bubble();
    test_invalid_layouts();
    test_paper_points();
    test_conclusions();
    test_device_files();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
