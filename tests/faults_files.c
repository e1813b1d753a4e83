// tests/faults_files.c: test_faults' cases of the files a run writes (issue 39): no output lands
// on an input or on another output, whatever the names (files.h files_check: --import-hf and
// --export-hf directories, symbolic links, the planner's --plan-csv against every input);
// temporaries carry names only this program makes and are gone on every exit path (a refused
// plan, a bad --runs file, a file-size limit); start-up cleanup of --ckpt-dir deletes only
// those; no exit 0 when nothing succeeded (--runs with no row evaluated, stdout on a full
// device); 64-bit loops where a flag bounds one. Run through ./train and ./train_asan.
// Included by tests/test_faults.c after faults_bad_inputs.c (its bad_run and BAD); not built alone.

#define FILES BAD "/files"
#define HF FILES "/hf"  // a 1-step export of the tiny model (files_setup)
#define RUNS_HEADER "model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute," \
                    "attention,rms_kernel,sp"
#define HF_UNCHANGED "cmp -s " HF "/model.safetensors " FILES "/hf_copy.safetensors"

static const BadRun FILES_RUNS[] = {
    // an output named inside the directory --import-hf reads, by any name: refused, the model unchanged
    {{"import_hf_log_onto_model", "--steps 1 --import-hf " HF " --log " HF "/model.safetensors",
      "is a file this run reads (--import-hf)", 1},
     NULL, HF_UNCHANGED},
    {{"import_hf_trace_via_symlinked_dir", "--steps 1 --import-hf " FILES "/hf_link --trace " HF "/model.safetensors",
      "is a file this run reads (--import-hf)", 1},
     "ln -sfn hf " FILES "/hf_link", HF_UNCHANGED},
    {{"import_hf_export_llmc_onto_model", "--steps 1 --import-hf " HF " --export-llmc " HF "/./model.safetensors",
      "is a file this run reads (--import-hf)", 1},
     NULL, HF_UNCHANGED},
    // each file --export-hf writes is an output: the training data there, or a trace at its name
    {{"export_hf_onto_data", "--steps 1 --data " FILES "/hfo/config.json --export-hf " FILES "/hfo",
      "is a file this run reads (--data)", 1},
     "rm -rf " FILES "/hfo && mkdir " FILES "/hfo && cp " BAD "/text_ok.txt " FILES "/hfo/config.json",
     "cmp -s " BAD "/text_ok.txt " FILES "/hfo/config.json"},
    {{"export_hf_and_trace_one_file", "--steps 1 --export-hf " FILES "/hfe --trace " FILES "/hfe/model.safetensors",
      "the same file as --trace", 1},
     "rm -rf " FILES "/hfe", "! test -e " FILES "/hfe"},
    // an export whose tokenizer directory lacks files is refused before the first step, not after the last
    {{"export_hf_incomplete_tokenizer", "--steps 1000000 --tokenizer " FILES "/tk.bin --export-hf " FILES "/hft",
      "tokenizer directory " FILES "/tk_hf is incomplete", 1},
     "rm -rf " FILES "/hft " FILES "/tk_hf && mkdir " FILES "/tk_hf && cp " BAD "/tok_escapes.bin " FILES
     "/tk.bin && echo '{}' > " FILES "/tk_hf/vocab.json",
     "! test -e " FILES "/hft"},
    // a safetensors header written with white space between its tokens (json.dumps(indent=1)) reads
    {{"import_hf_header_with_spaces", "--steps 1 --import-hf " FILES "/hfs", "imported Hugging Face weights", 0},
     "mkdir -p " FILES "/hfs && python3 -c \"import json,struct,sys; b=open('" HF "/model.safetensors','rb').read(); "
     "n=struct.unpack('<Q',b[:8])[0]; h=json.dumps(json.loads(b[8:8+n]),indent=1).encode(); "
     "open('" FILES "/hfs/model.safetensors','wb').write(struct.pack('<Q',len(h))+h+b[8+n:])\"",
     NULL},
    // the planner's CSV against --doc-lengths (and --runs, --device-file)
    {{"plan_csv_onto_doc_lengths", "--plan --doc-lengths " FILES "/dl.txt --plan-csv " FILES "/dl.txt",
      "is a file this run reads (--doc-lengths)", 1},
     "printf '100\\n200\\n' > " FILES "/dl.txt", "grep -qx 200 " FILES "/dl.txt"},
    // start-up cleanup of --ckpt-dir: a killed run's temporaries go, a user's look-alike copies stay
    {{"ckpt_dir_cleanup_spares_user_tmp_names", "--steps 1 --ckpt-dir " FILES "/ckt", "ckpt_00000001.bin (step 1)", 0},
     "rm -rf " FILES "/ckt && mkdir " FILES "/ckt && (cd " FILES "/ckt && touch ckpt_00000001.bin.tmp.abcdef "
     "LATEST.tmp.Ab12Cd ckpt_00000002.bin.tmp.train-77-Xy12Zw)",
     "cd " FILES "/ckt && test -e ckpt_00000001.bin.tmp.abcdef && test -e LATEST.tmp.Ab12Cd && ! ls *.tmp.train-*"},
    // the planner's temporaries on failures after the CSV was opened, and the flag's maximum batch
    // (it was SIGFPE: a 32-bit doubling loop over micro-batch sizes wrapped to 0)
    {{"plan_max_global_batch_no_temp", "--plan --global-batch 1073741824 --plan-csv " FILES "/p1.csv",
      "no valid layout", 1},
     NULL, "! ls " FILES "/p1.csv*"},
    {{"plan_huge_global_batch_tokens", "--plan --global-batch-tokens 2199023255552", "no valid layout", 1}, NULL, NULL},
    {{"plan_bad_runs_no_temp", "--plan --runs " FILES "/runs_x.csv --plan-csv " FILES "/p2.csv",
      "expected an integer", 1},
     "printf '" RUNS_HEADER "\\ngpt2-124m,1024,8,8,x,1f1b,0,1,1,8,1,none,flash2,0,0\\n' > " FILES "/runs_x.csv",
     "! ls " FILES "/p2.csv*"},
    // a file-size limit reached while the CSV is written: SIGXFSZ must not kill the run before it cleans up
    {{"plan_csv_file_size_limit_no_temp",
      "sh -c 'ulimit -f 8; exec {train} --plan --plan-csv " FILES "/p3.csv >/dev/null'",
      "File too large", 1},
     NULL, "! ls " FILES "/p3.csv*"},
    // --runs where no row can be evaluated: one line and exit 1 (it was a line per row and exit 0)
    {{"plan_runs_none_evaluated", "--plan --runs " FILES "/runs_bad.csv", "none of the 3000 runs", 1},
     "{ echo '" RUNS_HEADER "'; yes nosuch,1024,8,8,1048576,1f1b,0,1,1,8,1,none,flash2,0,0 | head -3000; } > " FILES
     "/runs_bad.csv",
     NULL},
    // --runs where some rows can be evaluated and some not: the CSV whole, one line counting the others, exit 2
    // (it was exit 0 and a line per row)
    {{"plan_runs_some_evaluated", "--plan --runs " FILES "/runs_mixed.csv --plan-csv " FILES "/pm.csv",
      "7 of the 8 runs could not be evaluated (row 2: unknown model 'nosuch'; row 3: unknown model 'nosuch'; row 4: "
      "unknown model 'nosuch'; and more); the CSV's pred_reason says why for each", 2},
     "{ echo '" RUNS_HEADER "'; echo gpt2-124m,1024,8,8,1048576,1f1b,0,1,1,8,1,none,flash2,0,0; yes "
     "nosuch,1024,8,8,1048576,1f1b,0,1,1,8,1,none,flash2,0,0 | head -7; } > " FILES "/runs_mixed.csv",
     "test $(grep -c , " FILES "/pm.csv) = 9"},
    // what the run printed could not be written: not exit 0
    {{"stdout_full", "{train} --steps 1 > /dev/full", "standard output: write failed", 1}, NULL, NULL},
};

// A 1-step export of the tiny model to import from (and a copy to compare with afterwards).
static int files_setup(void) {
    sh("rm -rf " FILES " && mkdir -p " FILES);
    int rc = sh(TRAIN "--steps 1 --export-hf " HF " > " FILES "/setup.txt 2>&1 && cp " HF "/model.safetensors " FILES
                "/hf_copy.safetensors");
    check(rc == 0, "files_setup", "the 1-step --export-hf run exited %d (see " FILES "/setup.txt)", rc);
    return rc == 0;
}

static void suite_files(const char* bin) {
    static int ready = -1;
    if (ready < 0) ready = files_setup();
    if (!ready) return;
    for (size_t i = 0; i < sizeof(FILES_RUNS) / sizeof(FILES_RUNS[0]); i++)
        bad_run(bin, &FILES_RUNS[i].k, FILES_RUNS[i].setup, FILES_RUNS[i].check);
}

#undef RUNS_HEADER
#undef HF_UNCHANGED
