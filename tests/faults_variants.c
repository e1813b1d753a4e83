// tests/faults_variants.c: test_faults' cases of issue 39's classes in variants the first rounds
// did not try (a fresh sweep as a new user would make it): a data file whose name --ckpt-dir uses
// (a shard named ckpt_00000001.bin there, a --val-data named LATEST); a --log that is a hard link of
// a checkpoint (written in place, it was truncated through the other name); standard output or error
// redirected onto a file the run reads or writes (`> run.log` with --log run.log, `>> data.txt`),
// under the self-launcher too; an --export-hf that fails half way (a full disk at the tokenizer's
// files) leaving the earlier export whole; a write past `ulimit -f` to the --log (SIGXFSZ killed
// the run; under the self-launcher mpirun's PMIx hung in MPI_Init); --help into a full device (exit
// 0); a log, trace or llm.c export inside a --ckpt-dir or --export-hf directory not yet created ("No
// such file"); an export beside tokenizer files it does not write (refused, never deleted, whoever
// wrote them); inputs that are FIFOs (--pp-costs, --noise-log hung
// in open()); the planner's run flags at their extremes (--noise-scale 1e-300 overflowed a stack
// buffer, --target-loss 1e-300 printed nan steps); numbers in hex or with blanks or out of range.
// Run through ./train and ./train_asan. Included by tests/test_faults.c after faults_bad_inputs.c
// (its bad_run and BAD); not built alone.

#define VAR BAD "/variants"
// A 1-step --trace of the tiny model over pp 2 (micro-batch 2, 4 of them), VAR/pc.json, for the --pp-costs cases
#define VAR_TRACE                                                                                                   \
    "(test -s " VAR "/pc.json || OMP_NUM_THREADS=1 ./train --model tiny --steps 1 --pp 2 --micro-batch 2 "          \
    "--global-batch 8 --eval-every 0 --sample-len 0 --quiet --trace " VAR "/pc.json > /dev/null 2>&1)"
#define TOK_HF "cp " BAD "/tok_escapes.bin " VAR "/tk.bin && mkdir -p " VAR "/tk_hf && echo '#version: 0.2' > " VAR \
               "/tk_hf/merges.txt && echo '{}' > " VAR "/tk_hf/tokenizer_config.json && head -c 600000 /dev/zero | " \
               "tr '\\000' x | sed 's/.*/{\"pad\": \"&\"}/' > " VAR "/tk_hf/vocab.json"

static const BadRun VARIANT_RUNS[] = {
    // a data file under a name --ckpt-dir writes: the save would have replaced it (data files were
    // compared by identity alone, not by the names a directory of outputs owns)
    {{"data_shard_named_as_checkpoint", "--steps 1 --data " VAR "/ckd/ckpt_00000001.bin --ckpt-dir " VAR "/ckd",
      "a name --ckpt-dir " VAR "/ckd uses for its files", 1},
     "rm -rf " VAR "/ckd && mkdir " VAR "/ckd && cp " BAD "/shard_ok.bin " VAR "/ckd/ckpt_00000001.bin",
     "cmp -s " BAD "/shard_ok.bin " VAR "/ckd/ckpt_00000001.bin"},
    {{"val_data_named_latest", "--steps 1 --val-data " VAR "/ckl/LATEST --ckpt-dir " VAR "/ckl",
      "a name --ckpt-dir " VAR "/ckl uses for its files", 1},
     "rm -rf " VAR "/ckl && mkdir " VAR "/ckl && cp " BAD "/text_ok.txt " VAR "/ckl/LATEST",
     "cmp -s " BAD "/text_ok.txt " VAR "/ckl/LATEST"},
    // a log (written in place) that is another name of a checkpoint: truncating it emptied the checkpoint
    {{"log_hard_link_to_checkpoint", "--steps 1 --log " VAR "/hl.jsonl", "the file has 2 names (hard links)", 1},
     "cp " BAD "/good/ckpt_00000001.bin " VAR "/hk.bin && ln -f " VAR "/hk.bin " VAR "/hl.jsonl",
     "cmp -s " BAD "/good/ckpt_00000001.bin " VAR "/hk.bin"},
    // standard output onto a file of the run: the log interleaved with the step lines, the data appended to
    {{"stdout_onto_log", "{train} --steps 2 --log " VAR "/same.jsonl > " VAR "/same.jsonl",
      "standard output is the file --log " VAR "/same.jsonl writes", 1},
     NULL, NULL},
    {{"stdout_appends_to_data", "{train} --steps 1 --data " VAR "/d.txt >> " VAR "/d.txt",
      "standard output is the file --data " VAR "/d.txt reads", 1},
     "cp " BAD "/text_ok.txt " VAR "/d.txt", "cmp -s " BAD "/text_ok.txt " VAR "/d.txt"},
    {{"stderr_onto_log_tp2", "{train} --steps 2 --tp 2 --log " VAR "/same2.jsonl 2> " VAR "/same2.jsonl; cat " VAR
      "/same2.jsonl; exit 1",
      "standard error is the file --log " VAR "/same2.jsonl writes", 1},
     NULL, NULL},
    {{"plan_stdout_onto_csv", "{train} --plan --model gpt2-124m --plan-csv " VAR "/p.csv > " VAR "/p.csv",
      "standard output is the file --plan-csv " VAR "/p.csv writes", 1},
     NULL, NULL},
    // an export failing at its last files (a 1.4 MiB disk): the earlier export stays whole, not a new
    // model beside the old tokenizer or config
    {{"export_hf_full_disk_keeps_earlier",
      "unshare -rm sh -c 'mount -t tmpfs -o size=1440k tmpfs " VAR "/full && {train} --steps 1 --n-layer 1 "
      "--export-hf " VAR "/full/e > /dev/null && {train} --steps 1 --tokenizer " VAR "/tk.bin --export-hf " VAR
      "/full/e; r=$?; grep -q \"n_layer.: 1,\" " VAR "/full/e/config.json && ! ls " VAR "/full/e/vocab.json* " VAR
      "/full/e/*.tmp.* || exit 9; exit $r'",
      "No space left on device", 1},
     "mkdir -p " VAR "/full && " TOK_HF, NULL},
    // an export into the directory of an earlier one: a tokenizer file it does not write is refused before the
    // first step, never deleted (an earlier export's vocab.json stayed beside a model of other ids; a
    // tokenizer.json, which transformers reads before vocab.json and merges.txt, beside a new tokenizer)
    {{"export_hf_stale_tokenizer_refused", "--steps 1 --export-hf " VAR "/stale",
      "--export-hf " VAR "/stale: " VAR "/stale/vocab.json is a tokenizer file this export does not write (no "
      "--tokenizer", 1},
     TOK_HF " && rm -rf " VAR "/stale && " TRAIN "--steps 1 --tokenizer " VAR "/tk.bin --export-hf " VAR
     "/stale > /dev/null 2>&1 && cp " VAR "/stale/model.safetensors " VAR "/stale.safetensors",
     "cmp -s " VAR "/stale/model.safetensors " VAR "/stale.safetensors && test -s " VAR "/stale/vocab.json"},
    {{"export_hf_foreign_tokenizer_json_refused", "--steps 1 --tokenizer " VAR "/tk.bin --export-hf " VAR "/stale2",
      "stale2/tokenizer.json is a tokenizer file this export does not write (it writes vocab.json", 1},
     TOK_HF " && rm -rf " VAR "/stale2 && mkdir " VAR "/stale2 && echo '{}' > " VAR "/stale2/tokenizer.json",
     "test -s " VAR "/stale2/tokenizer.json && ! test -e " VAR "/stale2/model.safetensors"},
    // a write past a file-size limit: an error line (it was SIGXFSZ's kill, exit 153)
    {{"log_file_size_limit", "sh -c 'ulimit -f 4; exec {train} --steps 200 --log " VAR "/big.jsonl > /dev/null'",
      "--log " VAR "/big.jsonl: write failed: File too large", 1},
     "rm -f " VAR "/big.jsonl", NULL},
    // under the self-launcher too: mpirun's PMIx wrote its shared-memory store into a file the limit cut (the
    // job hung in MPI_Init); the run trains, and a write past the limit is the rank's one error line
    {{"file_size_limit_launcher_tp2", "sh -c 'ulimit -f 500; exec {train} --tp 2 --steps 2'", "measured:", 0},
     NULL, NULL},
    {{"log_file_size_limit_launcher_tp2",
      "sh -c 'ulimit -f 20; exec {train} --tp 2 --steps 200 --log " VAR "/big2.jsonl > /dev/null'",
      "--log " VAR "/big2.jsonl: write failed: File too large", 1},
     "rm -f " VAR "/big2.jsonl", NULL},
    // a log, trace or llm.c export inside a --ckpt-dir or --export-hf directory the run creates (it was "No
    // such file or directory"); --log-ranks' files on every rank too
    {{"log_in_new_ckpt_dir", "--steps 1 --ckpt-dir " VAR "/newck/a --log " VAR "/newck/a/log.jsonl --trace " VAR
      "/newck/a/trace.json", "checkpoint: " VAR "/newck/a/ckpt_00000001.bin", 0},
     "rm -rf " VAR "/newck && mkdir " VAR "/newck", "test -s " VAR "/newck/a/log.jsonl && test -s " VAR
     "/newck/a/trace.json"},
    {{"log_ranks_in_new_ckpt_dir_tp2", "--tp 2 --steps 1 --ckpt-dir " VAR "/newck2 --log " VAR
      "/newck2/log.jsonl --log-ranks", "checkpoint: " VAR "/newck2/ckpt_00000001.bin", 0},
     "rm -rf " VAR "/newck2", "test -s " VAR "/newck2/log.jsonl.rank1"},
    {{"export_llmc_in_new_export_hf_dir", "--steps 1 --export-hf " VAR "/newhf --export-llmc " VAR
      "/newhf/model.bin", "exported a Hugging Face", 0},
     "rm -rf " VAR "/newhf", "test -s " VAR "/newhf/model.bin"},
    // --help that cannot be written: not exit 0
    {{"help_into_full_device", "{train} --help > /dev/full", "standard output: write failed", 1}, NULL, NULL},
    {{"plan_help_into_full_device", "{train} --plan --help > /dev/full", "standard output: write failed", 1}, NULL,
     NULL},
    // a FIFO where a file is read: refused, not a hang in open()
    // a trace's op time that is not one (atof took '"x"' as 0 and -5 as it was: a cut by them, or "too noisy a run"
    // for inf), and a line past the reader's buffer (the chunk list of a header of 1024 chunks was cut short)
    {{"pp_costs_dur_negative", "--steps 1 --pp 2 --micro-batch 2 --global-batch 8 --pp-split auto --pp-costs " VAR
      "/pc_neg.json", "B mb0 c1's dur '-5' is not a time (microseconds, >= 0)", 1},
     VAR_TRACE " && sed '/\"B mb0 c1\"/s/\"dur\":[0-9.]*/\"dur\":-5/' " VAR "/pc.json > " VAR "/pc_neg.json",
     NULL},
    {{"pp_costs_dur_not_a_number", "--steps 1 --pp 2 --micro-batch 2 --global-batch 8 --pp-split auto --pp-costs "
      VAR "/pc_x.json", "F mb1 c0's dur '\"x\"' is not a time (microseconds, >= 0)", 1},
     VAR_TRACE " && sed '/\"F mb1 c0\"/s/\"dur\":[0-9.]*/\"dur\":\"x\"/' " VAR "/pc.json > " VAR "/pc_x.json",
     NULL},
    {{"pp_costs_line_too_long", "--steps 1 --pp 2 --micro-batch 2 --global-batch 8 --pp-split auto --pp-costs " VAR
      "/pc_long.json", "line 2 is longer than 8190 bytes: not a --trace of this program", 1},
     VAR_TRACE " && (head -1 " VAR "/pc.json; printf '%09000d\n' 0; tail -n +2 " VAR "/pc.json) > " VAR
     "/pc_long.json", NULL},
    {{"pp_costs_fifo", "--steps 1 --pp 2 --pp-split auto --pp-costs " VAR "/fifo", "not a regular file (a FIFO)", 1},
     "rm -f " VAR "/fifo && mkfifo " VAR "/fifo", NULL},
    {{"plan_noise_log_fifo", "--plan --tokens 1e9 --noise-log " VAR "/fifo", "not a regular file (a FIFO)", 1},
     "rm -f " VAR "/fifo && mkfifo " VAR "/fifo", NULL},
    // the run planner's numbers at their extremes: every figure it prints must be finite
    {{"plan_noise_scale_tiny", "--plan --tokens 1 --noise-scale 1e-300", "expected a number of tokens in [1, 1e18]",
      1},
     NULL, NULL},
    {{"plan_target_loss_tiny", "--plan --tokens 1e18 --target-loss 1e-300", "expected a loss in [0.01, 50]", 1},
     NULL, NULL},
    {{"plan_noise_log_tiny", "--plan --tokens 1e9 --noise-log " VAR "/n.jsonl", "no noise_scale of 1 to 1e18 tokens",
      1},
     "echo '{\"step\":1,\"noise_scale\":1e-300}' > " VAR "/n.jsonl", NULL},
    // a config.json that is not one JSON object: truncated (its fields up to the cut were checked, the rest never
    // read), empty, or with text after it: each imported without a word
#define HF_CONFIG(D, TEXT) "rm -rf " VAR "/" D " && cp -r " HF " " VAR "/" D " && printf '" TEXT "' > " VAR "/" D \
                           "/config.json"
    {{"import_hf_config_truncated", "--steps 1 --import-hf " VAR "/hfc1", "not a JSON object of fields (truncated?)",
      1},
     HF_CONFIG("hfc1", "{\"n_layer\": 4,"), NULL},
    {{"import_hf_config_empty", "--steps 1 --import-hf " VAR "/hfc2", "config.json: not a JSON object (empty)", 1},
     HF_CONFIG("hfc2", ""), NULL},
    {{"import_hf_config_text_after", "--steps 1 --import-hf " VAR "/hfc3", "text after the JSON object's closing", 1},
     HF_CONFIG("hfc3", "{\"n_layer\": 4} {\"n_layer\": 9}"), NULL},
    // a tensor named twice in model.safetensors' header (JSON allows it; our reader took the first entry,
    // transformers takes the last): refused
    {{"import_hf_tensor_twice", "--steps 1 --import-hf " VAR "/hfd", "tensor transformer.wte.weight is in the header "
      "twice", 1},
     HF_CONFIG("hfd", "{}") " && python3 -c \"import json,struct; p='" VAR "/hfd/model.safetensors'; b=open(p,'rb')"
     ".read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n]); j=json.dumps(h).encode()[:-1]+b', \\\"wte."
     "weight\\\": '+json.dumps(h['transformer.wte.weight']).encode()+b'}'; j+=b' '*(-len(j)%8); "
     "open(p,'wb').write(struct.pack('<Q',len(j))+j+b[8+n:])\"",
     NULL},
#undef HF_CONFIG
    // the GPU build's settings given to the CPU build: refused as --comm nccl is (each was ignored without a word)
    {{"cpu_gelu_fusion_off", "--steps 1 --gelu-fusion off", "--gelu-fusion off: the GPU build's choice", 1}, NULL,
     NULL},
    {{"cpu_op_times", "--steps 1 --op-times", "--op-times: the GPU build's device time per op family", 1}, NULL, NULL},
    {{"cpu_attn_tile", "--steps 1 --attn-tile q128k64", "--attn-tile q128k64: the GPU build's flash-attention tile",
      1},
     NULL, NULL},
    {{"tokenizer_bytes_after_pieces", "--steps 1 --tokenizer " VAR "/tok_extra.bin",
      "bytes after its 257 pieces (the header's vocab size)", 1},
     NULL, NULL},
    {{"tokenizer_eot_a_byte_of_text", "--steps 1 --tokenizer " VAR "/tok_eot0.bin",
      "its end-of-text is id 0, but built-in corpus", 1},
     NULL, NULL},
    // validation data of another tokenizer's ids than the training data's: a validation loss of nothing trained
    {{"val_data_other_tokenizer", "--steps 1 --vocab 50304 --eval-every 1 --val-data " VAR "/val_gpt2_ids.bin",
      "holds GPT-2's ids, --data built-in corpus", 1},
     NULL, NULL},
    // a search where no layout fits: the table of the closest ones, then one line and exit 1 (it was exit 0 with no
    // "best:" line); the CSV asked for is still written
    {{"plan_nothing_fits", "--plan --model gpt2-124m --gpus 8 --device-set mem_gib=0.001",
      "--plan: none of the 29732 layouts fits in 0.001 GiB per GPU", 1},
     NULL, NULL},
    {{"plan_nothing_fits_csv_written", "--plan --model gpt2-124m --gpus 8 --device-set mem_gib=0.001 --plan-csv " VAR
      "/nf.csv", "--plan: none of the 29732 layouts fits", 1},
     "rm -f " VAR "/nf.csv", "test $(wc -l < " VAR "/nf.csv) = 29733"},
    // data larger than the machine's memory (a sparse 50 GiB text file): refused before it is read (a 4 GiB shard
    // of 2^31 tokens was read, then the process killed without a word)
    {{"data_past_memory", "--steps 1 --data " VAR "/sparse.txt", "tokens in all take 250.0 GiB in memory", 1},
     "truncate -s 50G " VAR "/sparse.txt", "rm -f " VAR "/sparse.txt"},
    // a --device-file with no key: it planned on the A100 profile it starts from, without a word
    {{"plan_device_file_no_keys", "--plan --model gpt2-124m --device-file " VAR "/dev_empty.txt",
      "dev_empty.txt: no 'key = value' line", 1},
     "printf '# only a comment\n\n' > " VAR "/dev_empty.txt", NULL},
    // numbers as a person writes them: no hex float, no leading blank; out of range said so
    {{"flag_hex_float", "--steps 1 --lr 0x1p-3", "--lr: expected a number, got '0x1p-3'", 1}, NULL, NULL},
    {{"flag_leading_blank", "--steps ' 1'", "--steps: expected an integer, got ' 1'", 1}, NULL, NULL},
    {{"flag_out_of_range", "--steps 1 --lr 1e400", "--lr: 1e400 is out of range", 1}, NULL, NULL},
    {{"plan_flag_hex", "--plan --max-search-min 0x1", "--max-search-min: expected a number, got '0x1'", 1}, NULL,
     NULL},
};

// A checkpoint whose checksums hold (re-signed after the change) but whose header records a layout or flags no
// run writes (tp -1, a schedule past the last, --packing 2^31 - 1): refused in one line naming the field. Each was
// resumed, the value shown ("saved with dp 1 tp -1") or, for --packing, taken as "not recorded".
static void ckpt_header_ranges(const char* bin) {
    static const struct { int k, hi; const char* name; } fields[] = {
        {CK_DP, 1 << 20, "dp"}, {CK_TP, 1 << 20, "tp"}, {CK_PP, 1 << 20, "pp"}, {CK_VPP, 1 << 20, "vpp"},
        {CK_ZERO, 3, "zero"}, {CK_SP, 1, "sp"}, {CK_GLOBAL_BATCH, INT_MAX, "global_batch"},
        {CK_MICRO_BATCH, INT_MAX, "micro_batch"}, {CK_SCHEDULE, N_SCHEDULES - 1, "schedule"},
        {CK_RECOMPUTE, RECOMPUTE_FULL, "recompute"}, {CK_STEPS, INT_MAX, "steps"}, {CK_PACKING, 3, "packing"}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        for (int past = 0; past < 2; past++) {
            int32_t v = past ? (fields[i].hi == INT_MAX ? INT_MIN : fields[i].hi + 1) : -1;
            static char name[96], args[256], needle[128];
            snprintf(name, sizeof(name), "ckpt_header_%s_%s", fields[i].name, past ? "past" : "neg");
            if (bad_filter && !strstr(name, bad_filter)) continue;
            write_ckpt(name, BAD "/good/ckpt_00000001.bin", fields[i].k, v, -1, -1, 1);
            snprintf(args, sizeof(args), "--steps 2 --resume " BAD "/%s/ckpt.bin", name);
            snprintf(needle, sizeof(needle), "its header's %s is %d, outside", fields[i].name, v);
            BadCase k = {name, args, needle, 1};
            bad_run(bin, &k, NULL, NULL);
        }
}

static void suite_variants(const char* bin) {
    sh("mkdir -p " VAR);
    // tokenizer files: 3 pieces more than the header's 257 (they were ignored); an end-of-text id 0, a byte of text
    write_tokenizer("variants/tok_extra.bin", TOKENIZER_MAGIC, 2, 257, 260, -1);
    write_tokenizer("variants/tok_eot0.bin", TOKENIZER_MAGIC, 2, 257, 257, -1);
    write_shard("variants/val_gpt2_ids.bin", SHARD_MAGIC, 1, 2000, 2000, 50000);  // one id of GPT-2's: its shards
    FILE* f = fopen(VAR "/tok_eot0.bin", "r+b");
    uint32_t zero = 0;
    if (!f || fseek(f, 12, SEEK_SET) || fwrite(&zero, 4, 1, f) != 1 || fclose(f)) fail("cannot patch tok_eot0.bin");
    bad_runs(bin, VARIANT_RUNS, sizeof(VARIANT_RUNS) / sizeof(VARIANT_RUNS[0]));
    ckpt_header_ranges(bin);
}

#undef TOK_HF
#undef VAR_TRACE
