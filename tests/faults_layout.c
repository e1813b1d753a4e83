// tests/faults_layout.c: test_faults' cases of the layout checks' order (layout/layout_check.h): the root cause
// first, each check quoting only what the checks before it validated. A tp that does not divide the heads was
// reported after the Ulysses degree against "the 13 heads per tensor-parallel rank" that 40 / 3 made (and "the 0 KV
// heads" of llama-tiny's 2 / 3), in ./train and in --plan (a search's reasons, a --runs row's pred_reason); a global
// batch that dp does not divide after the tokens per dp rank that 4097 / 2 made; ZeRO's unit of 17G / 3 floats per
// tp rank ("raise --tp") before tp 3 not dividing the heads; --sp's micro-batch x seq-len before the seq-len; a dp
// that mpirun's world over tp made ("dp x cp >= 2 (got 1)" of --noise-scale, ZeRO's shard of 3223699456 floats at
// dp 1) before the world that tp does not divide; and the list of the --tp a model splits over put after messages
// that were not tp's. Each case asserts the whole first error line (exit 1, one error line). Run through ./train
// and ./train_asan. Included by tests/test_faults.c after faults_bad_inputs.c (its bad_run and BAD); not built alone.

#define LAYOUT BAD "/layout"
#define LAYOUT_MPIRUN "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 3 {train} "
// A one-row --runs file LAYOUT/N.csv: model M, sequence S, G GPUs, T tokens a step, tp P, dp D, cp C and Ulysses U
#define LAYOUT_RUNS(N, M, S, G, T, P, D, C, U)                                                                       \
    "printf 'model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute,"   \
    "attention,rms_kernel,sp,cp,cp_ulysses\\n" M "," S "," G ",8," T ",1f1b,1," P ",1," D ",1,none,flash2,1,0," C  \
    "," U "\\n' > " LAYOUT "/" N ".csv"

// The same under nanotron's cut (--software nanotron): schedule SCHED, pp PP, vpp V, ZeRO 0, dp 1
#define LAYOUT_RUNS_NANOTRON(N, M, S, G, T, SCHED, P, PP, V)                                                    \
    "printf 'model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute," \
    "attention,rms_kernel,sp,vpp\\n" M "," S "," G ",8," T "," SCHED ",0," P "," PP ",1,1,none,flash2,1,0," V    \
    "\\n' > " LAYOUT "/" N ".csv"

// One case: the run, and its first error line exactly (grep -x; `regex`: an extended regular expression, else
// the fixed text).
typedef struct { const char* name; const char* args; const char* line; int regex; const char* setup; } LayoutCase;

static const LayoutCase LAYOUT_CASES[] = {
    // tp before the heads per tp rank that Ulysses divides: the helper's 40-head model, llama-tiny's 2 KV heads
    {"layout_order_tp_before_ulysses", "--model llama-13b --tp 3 --cp 2 --cp-kind ulysses",
     "error: layout: n_head 40 is not divisible by tp 3 (this model splits over --tp 1, 2, 4, 8)", 0, NULL},
    {"layout_order_tp_before_ulysses_kv", "--model llama-tiny --tp 3 --cp 2 --cp-kind ulysses",
     "error: layout: n_head 4 is not divisible by tp 3 (this model splits over --tp 1, 2)", 0, NULL},
    {"layout_order_tp_before_cp_seq", "--tp 3 --cp 2 --sp --seq-len 6",
     "error: layout: n_head 4 is not divisible by tp 3 (this model splits over --tp 1, 2, 4)", 0, NULL},
    {"layout_order_plan_tp_before_ulysses", "--plan --model llama-13b --gpus 6 --tp 3 --cp 2 --cp-kind ulysses",
     "error: no valid layout: none of the [0-9]+ layouts the filters let through can run: [0-9]+ like dp 1 tp 3 cp 2 "
     "pp 1 vpp 1 micro-batch 1: n_head 40 is not divisible by tp 3", 1, NULL},
    {"layout_order_plan_runs_tp_before_ulysses", "--plan --runs " LAYOUT "/tp3_ulysses.csv",
     "error: --runs " LAYOUT "/tp3_ulysses.csv: none of the 1 runs could be evaluated (row 1: n_head 40 is not "
     "divisible by tp 3)", 0, LAYOUT_RUNS("tp3_ulysses", "llama-13b", "4096", "6", "262144", "3", "1", "2", "2")},
    // the batch over dp before the tokens per dp rank (4097 / 2 = 2048 sequences of 2^20 tokens: 2^31)
    {"layout_order_batch_before_tokens_per_dp", "--dp 2 --seq-len 1048576 --micro-batch 1 --global-batch 4097",
     "error: layout: --global-batch 4097 is not divisible by dp 2 x micro-batch 1", 0, NULL},
    {"layout_order_plan_runs_batch_before_tokens", "--plan --runs " LAYOUT "/batch_4097.csv",
     "error: --runs " LAYOUT "/batch_4097.csv: none of the 1 runs could be evaluated (row 1: --global-batch 4097 is "
     "not divisible by dp 2 x micro-batch 1)", 0,
     LAYOUT_RUNS("batch_4097", "gpt2-124m", "1048576", "2", "4296015872", "1", "2", "1", "1")},
    // tp before ZeRO's unit per tp rank (a 2^20 x 16384 embedding / 3)
    {"layout_order_tp_before_zero_unit", "--tp 3 --dp 2 --zero 1 --vocab 1048576 --d-model 16384",
     "error: layout: n_head 4 is not divisible by tp 3 (this model splits over --tp 1, 2, 4)", 0, NULL},
    // --sp: the seq-len, not the micro-batch's rows (divisible whenever the seq-len is)
    {"layout_order_sp_seq_len", "--tp 2 --sp --seq-len 33 --micro-batch 1 --global-batch 32",
     "error: layout: --sp: seq-len 33 is not divisible by tp 2", 0, NULL},
    // the layout before the rules that read dp: the world 3 over tp 2 made dp 1
    {"layout_order_world_before_noise_dp", LAYOUT_MPIRUN "--tp 2 --noise-scale",
     "error: [rank 0] layout: dp 1 x tp 2 x pp 1 x cp 1 = 2 does not match the world of 3 ranks (the world must be a "
     "multiple of tp x pp x cp = 2: dp is the world / 2 when --dp is not given)", 0, NULL},
    {"layout_order_world_before_zero_shard", LAYOUT_MPIRUN "--tp 2 --zero 1 --d-model 8192 --n-head 64 --n-layer 8",
     "error: [rank 0] layout: dp 1 x tp 2 x pp 1 x cp 1 = 2 does not match the world of 3 ranks (the world must be a "
     "multiple of tp x pp x cp = 2: dp is the world / 2 when --dp is not given)", 0, NULL},
    {"layout_order_tp_before_noise_dp", "--noise-scale --tp 3",
     "error: layout: n_head 4 is not divisible by tp 3 (this model splits over --tp 1, 2, 4)", 0, NULL},
    // nanotron's own rules after the shared ones: --n-layer under pp, not the stage its cost cut left empty; tp not
    // dividing the heads, not its one chunk a stage (a search: its 960 layouts were named by the cut)
    {"layout_order_plan_nanotron_layers_before_cut", "--plan --software nanotron --runs " LAYOUT "/nano_pp16.csv",
     "error: --runs " LAYOUT "/nano_pp16.csv: none of the 1 runs could be evaluated (row 1: --n-layer 12 < --pp 16 x "
     "--vpp 1 chunks: every chunk needs a layer)", 0,
     LAYOUT_RUNS_NANOTRON("nano_pp16", "gpt2-124m", "1024", "16", "16384", "1f1b", "1", "16", "1")},
    {"layout_order_plan_nanotron_tp_before_cut", "--plan --software nanotron --runs " LAYOUT "/nano_tp3.csv",
     "error: --runs " LAYOUT "/nano_tp3.csv: none of the 1 runs could be evaluated (row 1: n_head 40 is not "
     "divisible by tp 3)", 0,
     LAYOUT_RUNS_NANOTRON("nano_tp3", "llama-13b", "4096", "6", "262144", "interleaved", "3", "2", "2")},
    {"layout_order_plan_nanotron_search_tp_first", "--plan --software nanotron --model llama-13b --gpus 6 --tp 3 "
     "--pp 2 --schedule interleaved --recompute none", "error: no valid layout: none of the [0-9]+ layouts the filters "
     "let through can run: [0-9]+ like dp 1 tp 3 cp 1 pp 2 vpp 2 micro-batch 1: n_head 40 is not divisible by tp 3", 1,
     NULL},
    // the --tp a model splits over only after tp's own message
    {"layout_tp_list_only_for_tp", "--noise-scale",
     "error: layout: --noise-scale: needs two batch sizes, each replica's gradient and the step's: dp x cp >= 2 "
     "(got 1)", 0, NULL},
};

static void suite_layout(const char* bin) {
    sh("mkdir -p " LAYOUT);
    for (size_t i = 0; i < sizeof(LAYOUT_CASES) / sizeof(LAYOUT_CASES[0]); i++) {
        const LayoutCase* l = &LAYOUT_CASES[i];
        // bad_run's needle: the line past its last ':' (plain text in every case); the check: the whole line
        const char* tail = strrchr(l->line, ':');
        char quoted[1024], check[2048];
        size_t q = 0;
        for (const char* p = l->line; *p && q + 5 < sizeof(quoted); p++) {  // ' as '\'' inside the shell's quotes
            if (*p == '\'') memcpy(quoted + q, "'\\''", 4), q += 4;
            else quoted[q++] = *p;
        }
        quoted[q] = 0;
        snprintf(check, sizeof(check), "grep -%sxq '%s' " BAD "/out_%s%s.txt", l->regex ? "E" : "F", quoted,
                 strstr(bin, "asan") ? "asan_" : "bad_", l->name);
        BadCase k = {l->name, l->args, tail + 2, 1};
        bad_run(bin, &k, l->setup, check);
    }
}

#undef LAYOUT_RUNS
#undef LAYOUT_RUNS_NANOTRON
#undef LAYOUT_MPIRUN
#undef LAYOUT
