// tests/faults_cli.c: test_faults' cases of the command line's small defects of issue 35's sixth session: a flag
// given twice (./train's and --plan's; the last was taken silently), but for --device-set, which is repeatable (a key
// it sets twice, or peak_tflops beside --peak-tflops, is refused); a number with a blank before it (--dropout ' 0.1'
// was accepted where '0.1 ' was not; a --device-set value, a --runs column); no layout that can run (the error
// named the first layout's reason only: now each reason counted); --pp-split auto (each pipeline was shown twice,
// cut evenly and "+auto" by the same cut); --help lines within 120 columns; from a new user's first hour, the end's
// summary line and --plan's unknown preset (the presets were not listed); a flag without the one that gives it an
// effect (--ckpt-every without --ckpt-dir saved nothing, --rope-theta on GPT-2). Run through ./train and ./train_asan.
// Included by tests/test_faults.c after faults_bad_inputs.c (its bad_run and BAD); not built alone.

#define CLI BAD "/cli"
#define CLI_PLAN "--plan --model gpt2-124m "
// A one-row --runs file CLI/N.csv: a 7B on 16 GPUs, its vpp column V
#define CLI_RUNS(N, V)                                                                                              \
    "printf 'model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute,"   \
    "attention,rms_kernel,sp,vpp\\nllama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0," V "\\n' > " CLI "/" N \
    ".csv"
// The rows of a --plan table whose schedule has no "+auto" (the cut by cost)
#define CLI_EVEN_ROWS "grep -E '^ *[0-9]+ .* (1f1b|interleaved|zb-h1|zb-v|dualpipe-v) ' "

static const BadRun CLI_CASES[] = {
    // the end's summary: the means over the steps after the first, MFU against the peak it names (here given: MFU
    // in % is 1000 x the TFLOP/s), also under --quiet, which has no step lines
    {{"cli_end_summary", "--model tiny --steps 3 --quiet --peak-tflops 0.1",
      "measured: 2 steps after the first: ", 0}, NULL,
     "awk '/^measured: 2 steps after the first: [0-9.]+ ms a step, [0-9]+ tok\\/s, [0-9.]+ TFLOP\\/s, MFU [0-9.]+%, "
     "HFU [0-9.]+% of 0.100 TFLOP\\/s \\(1 rank x 0.100: --peak-tflops\\)$/ "
     "{n++; bad += !($16 + 0 > 0 && ($16 - 1000 * $13) ^ 2 < 0.36)} END {exit !(n && !bad)}' " BAD
     "/out_*cli_end_summary.txt"},
    // --plan's unknown preset lists the presets, as ./train's does
    {{"cli_plan_model_unknown_lists_presets", "--plan --model llama-70b",
      "--model: unknown preset 'llama-70b'; the presets: tiny, small, gpt2-124m", 1}, NULL, NULL},
    // ./train: a flag given twice, in either form; a switch twice
    {{"cli_flag_twice", "--steps 1 --steps 2", "--steps given twice ('1', then '2'): give each flag once", 1}, NULL,
     NULL},
    {{"cli_flag_twice_equals_form", "--steps=1 --lr 0.1 --steps=2", "--steps given twice ('1', then '2')", 1}, NULL,
     NULL},
    {{"cli_switch_twice", "--steps 1 --sp --sp", "--sp given twice: give each flag once", 1}, NULL, NULL},
    // a flag without the one that gives it an effect: --ckpt-every / --ckpt-keep without --ckpt-dir ran to the end
    // and saved nothing, --rope-theta on GPT-2 (no RoPE) changed nothing; all three exited 0 without a word
    {{"cli_ckpt_every_without_dir", "--steps 2 --ckpt-every 1",
      "error: --ckpt-every: checkpoints are written to --ckpt-dir DIR: give it too (without it none is saved)", 1},
     NULL, NULL},
    {{"cli_ckpt_keep_without_dir", "--steps 2 --ckpt-keep 5", "error: --ckpt-keep: checkpoints are written to "
      "--ckpt-dir DIR", 1}, NULL, NULL},
    {{"cli_rope_theta_gpt2", "--steps 1 --rope-theta 500000", "error: --rope-theta: the base of LLaMA's rotary "
      "positions; gpt2's positions are learned (wpe): leave it out, or --arch llama", 1}, NULL, NULL},
    // --plan: a flag given twice; --plan itself; --device-set repeatable, its key once, the peak once
    {{"cli_plan_flag_twice", CLI_PLAN "--tp 2 --tp=4", "--plan: --tp given twice ('2', then '4')", 1}, NULL, NULL},
    {{"cli_plan_model_twice", CLI_PLAN "--model llama-7b", "--plan: --model given twice ('gpt2-124m', then 'llama-7b')",
      1}, NULL, NULL},
    {{"cli_plan_twice", CLI_PLAN "--plan", "--plan given twice: give each flag once", 1}, NULL, NULL},
    {{"cli_plan_device_set_key_twice", CLI_PLAN "--device-set mem_frag=0.1 --device-set mem_frag=0.2",
      "--device-set: key mem_frag given twice ('mem_frag=0.1', then 'mem_frag=0.2')", 1}, NULL, NULL},
    {{"cli_plan_device_set_repeatable", CLI_PLAN "--device-set mem_frag=0.1 --device-set nic_eff=0.6 --tp 1 --pp 1 "
      "--micro-batch 1 --zero 0 --top 1", "best: --dp 8", 0}, NULL, NULL},
    {{"cli_plan_peak_twice", CLI_PLAN "--device-set peak_tflops=300 --peak-tflops 310",
      "--device-set peak_tflops and --peak-tflops both set the peak", 1}, NULL, NULL},
    // a blank before a number, as after it: refused (strtod skipped the leading one)
    {{"cli_plan_dropout_leading_blank", CLI_PLAN "--software framework --dropout ' 0.1'",
      "--dropout ' 0.1': expected a probability in [0, 1)", 1}, NULL, NULL},
    {{"cli_plan_dropout_trailing_blank", CLI_PLAN "--software framework --dropout '0.1 '",
      "--dropout '0.1 ': expected a probability in [0, 1)", 1}, NULL, NULL},
    {{"cli_plan_dropout_hex", CLI_PLAN "--software framework --dropout 0x0.1",
      "--dropout '0x0.1': expected a probability in [0, 1)", 1}, NULL, NULL},
    {{"cli_plan_device_set_leading_blank", CLI_PLAN "--device-set 'mem_frag= 0.1'",
      "--device-set: mem_frag: expected a number, got ' 0.1'", 1}, NULL, NULL},
    {{"cli_plan_runs_leading_blank", "--plan --software framework --runs " CLI "/vpp_blank.csv",
      "column vpp: expected an integer in [1, 64], got ' 1'", 1}, CLI_RUNS("vpp_blank", " 1"), NULL},
    // no layout can run: every reason that cut them, counted, the most common first, in one line
    {{"cli_plan_no_layout_reasons", CLI_PLAN "--gpus 10 --gpus-per-node 10 --tp 5",
      "like dp 2 tp 5 cp 1 pp 1 vpp 1 micro-batch 1: n_head 12 is not divisible by tp 5; ", 1}, NULL,
     "grep -Eq '^error: no valid layout: none of the [0-9]+ layouts the filters let through can run: [0-9]+ like dp 2 "
     "tp 5 .*; [0-9]+ like .*; [0-9]+ like .*; [0-9]+ more by [0-9]+ other reasons?' " BAD
     "/out_*cli_plan_no_layout_reasons.txt"},
    // --pp-split auto: each pipeline once, cut by cost (the even cut was shown beside it, the same row twice)
    {{"cli_plan_pp_split_auto_once", CLI_PLAN "--software framework --pp 2 --tp 1 --micro-batch 1 --zero 0 "
      "--attention flash2 --rms-kernel on --pp-split auto --top 100", "interleaved+auto", 0}, NULL,
     "! " CLI_EVEN_ROWS BAD "/out_*cli_plan_pp_split_auto_once.txt"},
    // --help: no line over 120 columns (--plan's were up to 199)
    {{"cli_help_width", "--help", "usage: ./train", 0}, NULL, "! grep -q '.\\{121\\}' " BAD "/out_*cli_help_width.txt"},
    {{"cli_plan_help_width", "--plan --help", "usage: ./train --plan", 0}, NULL,
     "! grep -q '.\\{121\\}' " BAD "/out_*cli_plan_help_width.txt"},
};

static void suite_cli(const char* bin) {
    sh("mkdir -p " CLI);
    bad_runs(bin, CLI_CASES, sizeof(CLI_CASES) / sizeof(CLI_CASES[0]));
}

#undef CLI_EVEN_ROWS
#undef CLI_RUNS
#undef CLI_PLAN
#undef CLI
