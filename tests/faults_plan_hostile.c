// tests/faults_plan_hostile.c: test_faults' cases of the planner's inputs as a hostile or careless user gives them
// (the seventh session's audit of `./train --plan`): a --runs file that takes minutes (SIGTERM / SIGINT were
// recorded and never looked at: every row was predicted, exit 0; no word of progress) and one wider than the
// fields kept (a pointer array allocated per row, 8 bytes a field, without a cap); a search of minutes says how
// far it is every 5 s; --gpus that is not a whole number of nodes (16 on nodes of 3 was planned as if each group
// sat in a node); --device beside --device-file (the file's profile was planned on, --device dropped without a
// word); --device-set base=NAME (refused as an unknown key whose list of keys names 'base'); a device file of
// megabytes (read line by line, no stop); --tokens with no batch that fits (exit 0); --runs beside --gpus, --seq-len,
// --top ... (dropped without a word); --plan-csv '' (searched, then failed to rename its temporary to ''); a stop
// line written into the middle of the table (stdout not flushed first); a --runs column named 'VPP' or 'cp-ulysses'
// (carried through unread); a search over a limit of seconds ("would take about 0 min"); --plan-csv - (a file named
// '-'); a schedule named on one stage (--schedule zb-v --pp 1: "no valid layout", where ./train runs it) or with the
// chunks ./train refuses; a --runs field holding a control byte (copied raw to the CSV); MFU past 100% (PaLM's count
// against the causal half the kernels run: a note, and the CSV's mfu_causal); --plan-csv onto the program's own file
// (the CSV replaced the binary). Each asserts the whole
// first error line (but for counts and times) and the exit code. Run through ./train and ./train_asan. Included by
// tests/test_faults.c after faults_bad_inputs.c (its bad_run and BAD); not built alone.

#define HP BAD "/plan_hostile"
#define HP_HEADER "model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute," \
                  "attention,rms_kernel,sp"
// A one-row --runs file HP/N.csv holding ROW; HP_OK: a 7B on 16 GPUs
#define HP_RUNS(N, ROW) "printf '" HP_HEADER "\\n" ROW "\\n' > " HP "/" N ".csv"
#define HP_OK HP_RUNS("ok", "llama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0")
// 768 runs of a 256-stage pipeline over 257..1024 micro-batches (distinct: no row's counts cached for the next),
// 10-40 ms each here: 10-30 s in all, under --n-layer 512
#define HP_SLOW_RUNS                                                                                                 \
    "awk 'BEGIN { print \"" HP_HEADER "\"; for (i = 257; i <= 1024; i++) "                                          \
    "printf \"llama-65b,2048,256,8,%d,1f1b,1,1,256,1,1,none,flash2,1,0\\n\", 2048 * i }' > " HP "/slow.csv"

static const BadRun PLAN_HOSTILE_RUNS[] = {
    // --gpus on nodes that do not divide it: a group across a node's edge was priced as inside it
    {{"plan_gpus_not_whole_nodes", "--plan --model gpt2-124m --gpus 16 --gpus-per-node 3",
      "error: --gpus 16 is not a whole number of nodes of 3 GPUs (--gpus-per-node): the planner places groups on "
      "whole nodes", 1}, NULL, NULL},
    {{"plan_gpus_not_whole_device_nodes", "--plan --model gpt2-124m --gpus 12",
      "error: --gpus 12 is not a whole number of nodes of 8 GPUs (the device's gpus_per_node): the planner places "
      "groups on whole nodes", 1}, NULL, NULL},
    {{"plan_gpus_part_of_a_node", "--plan --model gpt2-124m --gpus 4 --gpus-per-node 8 --tp 1 --pp 1 --micro-batch 1 "
      "--zero 0 --top 1", "best: --dp 4 --tp 1", 0}, NULL, NULL},
    {{"plan_runs_gpus_not_whole_nodes", "--plan --runs " HP "/nodes3.csv",
      "error: --runs " HP "/nodes3.csv: none of the 1 runs could be evaluated (row 1: gpus 16 is not a whole number "
      "of nodes of gpus_per_node 3 (the planner places groups on whole nodes))", 1},
     HP_RUNS("nodes3", "llama-7b,4096,16,3,262144,1f1b,1,1,1,16,1,none,flash2,1,0"), NULL},
    // --tokens where no batch has a layout that fits: the table, then exit 0 with nothing recommended
    {{"plan_tokens_nothing_fits", "--plan --model gpt2-124m --gpus 1 --tokens 1e9 --noise-scale 1e6 --device-set "
      "mem_gib=0.001",
      "error: --tokens: no batch of the 9 tried (128 to 32768 sequences) has a layout that fits in 0.001 GiB per GPU "
      "(see ./train --plan at one batch for why)", 1}, NULL, NULL},
    // --runs beside the flags of a search it does not read (each was dropped without a word: --seq-len 8192 predicted
    // the rows at their seq_len column's 4096)
    {{"plan_runs_with_gpus", "--plan --runs " HP "/ok.csv --gpus 64",
      "error: --runs: --gpus 64 would not be read: each row gives its model, seq_len, gpus, gpus_per_node, "
      "global_batch_tokens, offload and offload_frames; --top, --max-search-min, --doc-lengths and --cp-split shape a "
      "search", 1}, HP_OK, NULL},
    {{"plan_runs_with_seq_len", "--plan --runs " HP "/ok.csv --seq-len 8192", "error: --runs: --seq-len 8192 would "
      "not be read: each row gives its model, seq_len,", 1}, HP_OK, NULL},
    {{"plan_runs_with_top", "--plan --runs " HP "/ok.csv --top 5", "error: --runs: --top 5 would not be read: each row "
      "gives its model, seq_len,", 1}, HP_OK, NULL},
    // a column named as one the prediction reads but for case or '-': carried through unread, the row predicted
    // without it (VPP 2 as the schedule's default, vpp 1)
    {{"plan_runs_column_case", "--plan --runs " HP "/vpp_case.csv",
      "error: --runs " HP "/vpp_case.csv: column 16 is named 'VPP', not 'vpp' (names are lower case, with '_', no "
      "blanks): as named it would be carried through unread", 1},
     "printf '" HP_HEADER ",VPP\\nllama-7b,4096,16,8,262144,interleaved,1,1,2,8,1,none,flash2,1,0,2\\n' > " HP
     "/vpp_case.csv", NULL},
    {{"plan_runs_column_dash", "--plan --runs " HP "/uly_dash.csv",
      "error: --runs " HP "/uly_dash.csv: column 17 is named 'cp-ulysses', not 'cp_ulysses' (names are lower case, "
      "with '_', no blanks): as named it would be carried through unread", 1},
     "printf '" HP_HEADER ",cp,cp-ulysses\\nllama-7b,4096,16,8,262144,1f1b,1,1,1,8,1,none,flash2,1,0,2,2\\n' > " HP
     "/uly_dash.csv", NULL},
    // --plan-csv '': the search ran to its end, then "rename of .tmp.train-... to  failed"
    {{"plan_csv_empty_name", "--plan --model gpt2-124m --plan-csv ''",
      "error: --plan-csv: expected a file name, got ''", 1}, NULL, NULL},
    // the device: chosen twice, base outside a file, a file of megabytes
    {{"plan_device_and_device_file", "--plan --device h100-sxm --device-file " HP "/mem40.txt",
      "error: --device h100-sxm and --device-file " HP "/mem40.txt both choose the device: give one (a device file "
      "starts from 'base = NAME')", 1}, "printf 'mem_gib = 40\\n' > " HP "/mem40.txt", NULL},
    {{"plan_device_set_base", "--plan --device-set base=h100-sxm",
      "error: --device-set base=h100-sxm: a device file's first key; choose a built-in device with --device h100-sxm",
      1}, NULL, NULL},
    {{"plan_device_file_huge", "--plan --device-file " HP "/huge_dev.txt",
      "error: --device-file: " HP "/huge_dev.txt: 2000000 bytes, more than a profile's 1048576 (its keys are a few "
      "dozen lines)", 1}, "yes '# a comment' | head -c 2000000 > " HP "/huge_dev.txt", NULL},
    // --runs wider than the fields kept (65537 runs of 256 columns): refused at the run past the cap
    {{"plan_runs_fields_cap", "--plan --runs " HP "/wide.csv",
      "error: --runs " HP "/wide.csv: line 65538: more than 16777216 fields in all (65536 runs of 256 columns): split "
      "the file", 1},
     "awk 'BEGIN { h = \"" HP_HEADER "\"; r = \"llama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0\"; "
     "for (i = 1; i <= 241; i++) { h = h \",x\" i; r = r \",\" }; print h; for (i = 0; i < 65537; i++) print r }' > "
     HP "/wide.csv", NULL},
    // a --runs file of minutes: progress on stderr every 5 s; SIGTERM ends it, 143, no CSV nor its temporary. The
    // signal waits for the first progress line (up to 120 s), not a fixed 6 s, which a loaded machine outlasted
    {{"plan_runs_progress_then_stopped",
      "sh -c '{train} --plan --n-layer 512 --runs " HP "/slow.csv --plan-csv " HP "/slow_out.csv > " HP
      "/slow.txt 2>&1 & i=0; until grep -q \"^plan: .*Ctrl-C stops$\" " HP "/slow.txt || [ $i -ge 600 ]; do sleep "
      "0.2; i=$((i+1)); done; kill -TERM $!; wait $!; echo exit $?'", "exit 143", 0},
     HP_SLOW_RUNS,
     "grep -Eq '^plan: [0-9]+ of 768 runs predicted \\([0-9]+%\\), [0-9]+ s; Ctrl-C stops$' " HP "/slow.txt && "
     "grep -qx 'stopped by signal 15 while predicting the --runs rows' " HP "/slow.txt && ! ls " HP "/slow_out.csv*"},
    // a search of minutes (4.3M layouts; allowed a week): progress every 5 s, SIGINT ends it, 130; the signal waits
    // for the first progress line as the one above does
    {{"plan_search_progress_then_stopped",
      "sh -c '{train} --plan --model llama-65b --n-layer 512 --gpus 1024 --max-search-min 10000 > " HP
      "/search.txt 2>&1 & i=0; until grep -q \"^plan: .*Ctrl-C stops$\" " HP "/search.txt || [ $i -ge 600 ]; do "
      "sleep 0.2; i=$((i+1)); done; kill -INT $!; wait $!; echo exit $?'", "exit 130", 0},
     NULL,
     "grep -Eq '^plan: [0-9]+ of [0-9]+ layouts bounded \\(memory, best throughput\\) \\([0-9]+%\\), [0-9]+ s; "
     "Ctrl-C stops$' " HP "/search.txt && grep -qx 'stopped by signal 2 while searching layouts' " HP "/search.txt"},
    // a limit of seconds passed before the search's pace is measured (5 s): it said "would take about 0 min" (the
    // time spent, as minutes, with no decimals); a limit past the pace's projection is faults_polish.c's
    {{"plan_search_limit_passed", "--plan --model gpt2-124m --max-search-min 0.0001",
      "error: --plan: this search passed its limit of 0.0001 min (--max-search-min) after ", 1}, NULL, NULL},
    // a stop while --doc-lengths simulates the best layout's batches (after the search's table): its line was written
    // into the middle of the table's last line when stdout was a file (stdout not flushed first). The signal waits
    // for the table's best: line (up to 120 s), not a fixed time: a loaded machine's search outlasted 8 s
    {{"plan_doc_lengths_stopped_own_line",
      "sh -c '{train} --plan --model gpt2-124m --seq-len 2048 --gpus 16 --global-batch 1024 --top 1 --doc-lengths "
      "lognormal:78 > " HP "/docs.txt 2>&1 & i=0; until grep -q ^best: " HP "/docs.txt || [ $i -ge 600 ]; do sleep "
      "0.2; i=$((i+1)); done; sleep 1; kill -INT $!; wait $!; echo exit $?'", "exit 130", 0},
     NULL, "grep -qx 'stopped by signal 2 while building the --packing plan' " HP "/docs.txt"},
    // --plan-csv onto the program's own file (a copy: "$0" is the binary under test): the CSV replaced the binary
    {{"plan_csv_on_the_program",
      "sh -c 'cp \"$0\" " HP "/prog && exec " HP "/prog --plan --model gpt2-124m --top 1 --plan-csv " HP "/prog' "
      "{train}",
      "error: --plan-csv " HP "/prog: is a file this run reads (the program itself); it is not overwritten", 1},
     "rm -f " HP "/prog", "cmp -s ./train " HP "/prog"},
    // --plan-csv -: was a file named '-'; now standard output, which carries the CSV alone (the table on stderr)
    {{"plan_csv_stdout",
      "sh -c '{train} --plan --model gpt2-124m --tp 1 --pp 1 --micro-batch 1 --zero 0 --top 1 --plan-csv - > " HP
      "/stdout.csv; echo exit $?'", "exit 0", 0}, NULL,
     "head -1 " HP "/stdout.csv | grep -q '^dp,tp,pp,cp,' && [ $(wc -l < " HP "/stdout.csv) -gt 1 ] && ! tail -n +2 "
     HP "/stdout.csv | grep -Eqv '^[0-9]+,' && ! grep -q '^best:' " HP "/stdout.csv && grep -Eq '^wrote [0-9]+ "
     "layouts to standard output$' " BAD "/out_*plan_csv_stdout.txt && grep -q '^best: --dp 8' " BAD
     "/out_*plan_csv_stdout.txt && ! test -e ./-"},
    {{"plan_runs_csv_stdout",
      "sh -c '{train} --plan --runs " HP "/ok.csv --plan-csv - > " HP "/runs_stdout.csv; echo exit $?'", "exit 0",
      0}, HP_OK,
     "head -1 " HP "/runs_stdout.csv | grep -q '^model,seq_len,.*,pred_reason$' && grep -q '^1 runs predicted on ' "
     BAD "/out_*plan_runs_csv_stdout.txt && ! test -e ./-"},
    // a schedule named on one stage: "no valid layout: none of 8 GPUs passes the filters", where ./train runs it; now
    // planned as it runs (its own start-up line predicts it so); the chunks ./train refuses, refused in its words
    {{"plan_schedule_zb_v_one_stage", "--plan --model gpt2-124m --schedule zb-v --pp 1 --tp 1 --top 1",
      "--pp 1 --vpp 2 --micro-batch", 0}, NULL, NULL},
    {{"plan_schedule_interleaved_one_stage", "--plan --model gpt2-124m --schedule interleaved --pp 1 --tp 1 --top 1",
      "--schedule interleaved,", 0}, NULL, NULL},
    {{"plan_vpp_one_stage", "--plan --model gpt2-124m --pp 1 --vpp 2 --tp 1 --top 1",
      "--pp 1 --vpp 2 --micro-batch", 0}, NULL, NULL},
    {{"plan_schedule_interleaved_vpp1", "--plan --model gpt2-124m --schedule interleaved --vpp 1 --pp 2 --tp 1 --top 1",
      "--pp 2 --vpp 1 --micro-batch", 0}, NULL, NULL},
    {{"plan_schedule_1f1b_vpp2", "--plan --model gpt2-124m --schedule 1f1b --vpp 2",
      "error: --vpp 2: --vpp > 1 needs --schedule interleaved, zb-v or dualpipe-v", 1}, NULL, NULL},
    {{"plan_schedule_zb_v_vpp3", "--plan --model gpt2-124m --schedule zb-v --vpp 3",
      "error: --vpp 3: --schedule zb-v places exactly two chunks per stage (a V); use --vpp 2", 1}, NULL, NULL},
    // a --runs field holding ESC, a lone CR, or ESC in quotes: was copied raw into the CSV and onto the terminal
    {{"plan_runs_field_escape", "--plan --runs " HP "/esc.csv",
      "error: --runs " HP "/esc.csv: line 2, column 1: a control byte (0x1b) in a field (a runs file's text is "
      "printable: a tab, and a line break in quotes, are the only others)", 1},
     "printf 'sheet," HP_HEADER "\\n\\033]0;x\\007,llama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0\\n' > " HP
     "/esc.csv", NULL},
    {{"plan_runs_field_lone_cr", "--plan --runs " HP "/cr.csv",
      "error: --runs " HP "/cr.csv: line 2, column 3: a control byte (0x0d) in a field", 1},
     "printf 'sheet," HP_HEADER "\\nok\\rFAIL,llama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0\\n' > " HP
     "/cr.csv", NULL},
    {{"plan_runs_quoted_escape", "--plan --runs " HP "/qesc.csv",
      "error: --runs " HP "/qesc.csv: line 3, column 2: a control byte (0x1b) in a field", 1},
     "printf 'sheet," HP_HEADER "\\n\\042a\\nb\\033[31m\\042,llama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0"
     "\\n' > " HP "/qesc.csv", NULL},
    // a tab, and a line break (CRLF) in quotes, are a field's text: carried through, quoted
    {{"plan_runs_quoted_line_break_kept", "--plan --runs " HP "/qlf.csv --plan-csv " HP "/qlf_out.csv",
      "1 runs predicted on ", 0},
     "printf '\\042a\\r\\nb\\tc\\042,' > " HP "/qlf_field && printf 'sheet," HP_HEADER "\\n' > " HP "/qlf.csv && cat "
     HP "/qlf_field >> " HP "/qlf.csv && printf 'llama-7b,4096,16,8,262144,1f1b,1,1,1,16,1,none,flash2,1,0\\n' >> " HP
     "/qlf.csv",
     "tail -n +2 " HP "/qlf_out.csv | head -c 9 | cmp -s - " HP "/qlf_field"},
    // MFU past 100% at efficiencies of 1 (128.3%, said nowhere why): a note with the causal count's 82.0%
    {{"plan_mfu_past_100_note", "--plan --model llama-7b --seq-len 65536 --gpus 8 --global-batch 8 --tp 1 --cp 8 "
      "--device-set matmul_eff=1 --device-set matmul_eff_own=1 --device-set attn_eff_own=1 --device-set hbm_eff=1 "
      "--device-set matmul_latency_us=0 --device-set op_latency_us=0 --top 1",
      "note: MFU and HFU above 100%: PaLM's count (6N + 12 L d T FLOPs a token) takes the causal attention as the "
      "whole T x T", 0}, NULL,
     "grep -q '(12[0-9].[0-9]% MFU, ' " BAD "/out_*plan_mfu_past_100_note.txt && grep -Eq \"this row's MFU is "
     "8[0-9].[0-9]%$\" " BAD "/out_*plan_mfu_past_100_note.txt"},
};

static void suite_plan_hostile(const char* bin) {
    sh("mkdir -p " HP);
    bad_runs(bin, PLAN_HOSTILE_RUNS, sizeof(PLAN_HOSTILE_RUNS) / sizeof(PLAN_HOSTILE_RUNS[0]));
}

#undef HP_SLOW_RUNS
#undef HP_OK
#undef HP_RUNS
#undef HP_HEADER
#undef HP
