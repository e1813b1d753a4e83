// tests/faults_bad_inputs.c: test_faults' bad inputs (data, flags, checkpoints, tokenizer, device
// files, outputs, caps) through ./train and ./train_asan.
// Included by tests/test_faults.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// 5. Bad inputs

#define BAD ROOT "/bad"

static void write_bytes(const char* name, const void* p, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), BAD "/%s", name);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) fail("cannot write %s", path);
}

static void write_shard(const char* name, int magic, int version, int count, int n_tokens, int bad_token) {
    size_t n = 1024 + 2 * (size_t)n_tokens;
    uint8_t* b = (uint8_t*)xcalloc(n, 1);
    int32_t* h = (int32_t*)b;
    h[0] = magic, h[1] = version, h[2] = count;
    uint16_t* t = (uint16_t*)(b + 1024);
    for (int i = 0; i < n_tokens; i++) t[i] = (uint16_t)('a' + i % 26);
    if (bad_token >= 0 && n_tokens > 10) t[10] = (uint16_t)bad_token;
    write_bytes(name, b, n);
    free(b);
}

static void write_tokenizer(const char* name, uint32_t magic, uint32_t version, uint32_t vocab, int entries,
                            int empty_at) {
    size_t n = 1024 + 4 * (size_t)entries;
    uint8_t* b = (uint8_t*)xcalloc(n, 1);
    uint32_t* h = (uint32_t*)b;
    h[0] = magic, h[1] = version, h[2] = vocab, h[3] = 256;
    size_t k = 1024;
    for (int i = 0; i < entries; i++) {
        b[k++] = i == empty_at ? 0 : 3;
        if (i != empty_at) b[k++] = 'x', b[k++] = 'y', b[k++] = 'z';
    }
    write_bytes(name, b, k);
    free(b);
}

// Recompute a checkpoint's checksums in memory (each tensor's in the index, then the
// header's), as a writer that saved these bytes would: the checks behind the checksums (the
// values, the header's fields) then see a change. A file whose counts do not give its size
// is left as it is.
static void ckpt_resign(uint8_t* b, long long n) {
    int32_t* h = (int32_t*)b;
    size_t n_full = ckpt_header_n_full(h);
    int nt = h[CK_N_TENSORS];
    if (ckpt_file_bytes(n_full, nt) != n) return;
    uint8_t* index = b + 1024 + 12 * n_full;
    uint64_t* lens = (uint64_t*)xmalloc(sizeof(uint64_t) * nt);
    uint64_t* sums = (uint64_t*)xmalloc(sizeof(uint64_t) * 3 * nt);
    memcpy(lens, index, sizeof(uint64_t) * nt);
    for (int sec = 0; sec < 3; sec++) {
        size_t at = 0;
        for (int i = 0; i < nt; i++, at += lens[i - 1])
            sums[sec * nt + i] = hash_bytes(b + 1024 + 4 * (sec * n_full + at), 4 * lens[i]);
    }
    memcpy(index + sizeof(uint64_t) * nt, sums, sizeof(uint64_t) * 3 * nt);
    uint64_t sum = ckpt_header_checksum(h, lens, sums, nt);
    h[CK_SUM_LO] = (int32_t)(uint32_t)sum, h[CK_SUM_HI] = (int32_t)(uint32_t)(sum >> 32);
    free(lens);
    free(sums);
}

// Copy the good checkpoint with one header int (index k) set to v (k < 0: unchanged),
// truncated to `size` bytes (< 0: whole), and a NaN at float `nan_at` of the params (< 0:
// none); resign: with its checksums recomputed after the change (ckpt_resign).
static void write_ckpt(const char* name, const char* good, int k, int32_t v, long long size, long long nan_at,
                       int resign) {
    FILE* f = fopen(good, "rb");
    long long n = file_size(good);
    if (!f || n < 1024) fail("no good checkpoint %s", good);
    uint8_t* b = (uint8_t*)xmalloc(n);
    if (fread(b, 1, n, f) != (size_t)n) fail("cannot read %s", good);
    fclose(f);
    if (k >= 0) ((int32_t*)b)[k] = v;
    if (nan_at >= 0) { float x = NAN; memcpy(b + 1024 + 4 * nan_at, &x, 4); }
    if (resign) ckpt_resign(b, n);
    char dirname[512];
    snprintf(dirname, sizeof(dirname), BAD "/%s", name);
    sh("mkdir -p %s", dirname);
    char path[600];
    snprintf(path, sizeof(path), "%s/ckpt.bin", name);
    write_bytes(path, b, size >= 0 && size < n ? size : n);
    free(b);
}

// Copy the good checkpoint with floats [first, first + count) after the header set to
// value (resign: and its checksums recomputed), or with one bit of float `first` flipped
// (count 0; `value`'s bits give the mask).
static void write_ckpt_values(const char* name, const char* good, long long first, long long count, float value,
                              int resign) {
    FILE* f = fopen(good, "rb");
    long long n = file_size(good);
    uint8_t* b = (uint8_t*)xmalloc(n);
    if (!f || fread(b, 1, n, f) != (size_t)n) fail("cannot read %s", good);
    fclose(f);
    float* x = (float*)(b + 1024) + first;
    for (long long i = 0; i < count; i++) x[i] = value;
    uint32_t bits, mask;
    memcpy(&mask, &value, 4), memcpy(&bits, x, 4);
    if (!count) bits ^= mask, memcpy(x, &bits, 4);
    if (resign) ckpt_resign(b, n);
    char path[600];
    sh("mkdir -p " BAD "/%s", name);
    snprintf(path, sizeof(path), "%s/ckpt.bin", name);
    write_bytes(path, b, n);
    free(b);
}

// One hostile input. rc 1: exit 1 with exactly one "error:" line, naming the problem
// (needle). rc 0: a run that must succeed: no "error:" line, needle somewhere in the
// output. Either way: no signal, nothing from a sanitizer, no raw control character or
// ill-formed UTF-8 in the output (it reaches a terminal), and `check` (a shell command,
// may be NULL) exits 0 afterwards. `setup` (may be NULL) runs first in the same shell, so a
// ulimit there applies to the run. args follow the suite's FLAGS, or, where they hold
// "{train}", are the whole command with the binary and FLAGS put in for each {train}; a flag
// args gives is left out of FLAGS (./train refuses a flag given twice).
typedef struct { const char* name; const char* args; const char* needle; int rc; } BadCase;
typedef struct { BadCase k; const char* setup; const char* check; } BadRun;

// Whether a file holds only what a terminal may show: printable UTF-8, newlines and tabs.
static int output_is_clean(const char* path, long long* at) {
    FILE* f = fopen(path, "rb");
    static char buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f) fclose(f);
    for (size_t i = 0; i < n;) {
        int len = buf[i] == '\n' || buf[i] == '\t' ? 1 : utf8_printable_len((const unsigned char*)buf + i, n - i);
        if (!len) { *at = (long long)i; return 0; }
        i += len;
    }
    return 1;
}

// s with every "{train}" replaced by `with`, into out.
static void expand_train(const char* s, const char* with, char* out, size_t cap) {
    size_t o = 0;
    while (*s && o + 1 < cap) {
        if (!strncmp(s, "{train}", 7)) o += snprintf(out + o, cap - o, "%s", with), s += 7;
        else out[o++] = *s++;
    }
    out[o < cap ? o : cap - 1] = 0;
}

static const char* bad_filter;  // ./test_faults bad WORD: only the cases whose names hold WORD
static int n_asan_not_rerun;    // the cases asan_reruns left to the ./train pass

// Whether ./train_asan reruns a case (the rule of tests/test_faults.c's header): not a command of its own around the
// binary ({train}: signals, pipes, mpirun, ulimit, env; its subject is the processes), nor a refusal that names no
// file and leaves nothing to look at (flags, layout and planner checks: no reader runs). Every path a case makes
// holds a '/' (they are under ROOT).
static int asan_reruns(const BadCase* k, const char* setup, const char* post_check) {
    if (strstr(k->args, "{train}")) return 0;
    return k->rc == 0 || strchr(k->args, '/') || setup || post_check;
}

static void bad_run(const char* bin, const BadCase* k, const char* setup, const char* post_check) {
    if (bad_filter && !strstr(k->name, bad_filter)) return;
    if (strstr(bin, "asan") && !asan_reruns(k, setup, post_check)) {
        n_asan_not_rerun++;
        return;
    }
    char cmd[32768], run_cmd[16384], out[512], name[160], train[1024], flags[512];
    snprintf(name, sizeof(name), "%s%s", strstr(bin, "asan") ? "asan_" : "bad_", k->name);
    snprintf(out, sizeof(out), BAD "/out_%s.txt", name);
    int plan = !strncmp(k->args, "--plan", 6) || strstr(k->args, "{train} --plan ");  // the planner: no FLAGS
    snprintf(train, sizeof(train), "%s %s", bin, plan ? "" : flags_but(FLAGS, k->args, flags, sizeof(flags)));
    if (strstr(k->args, "{train}")) expand_train(k->args, train, run_cmd, sizeof(run_cmd));
    else snprintf(run_cmd, sizeof(run_cmd), "%s %s", train, k->args);
    // a hang is a failure, not a stuck suite
    snprintf(cmd, sizeof(cmd),
             "{ %s; } >/dev/null 2>&1; ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 OMP_NUM_THREADS=1 "
             "timeout -s KILL 120 %s",
             setup ? setup : ":", run_cmd);
    int rc = run_to_file(cmd, out);
    FILE* f = fopen(out, "r");
    char line[4096], first_error[4096] = "";
    int n_error = 0, sanitizer = 0, found = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "error:", 6)) {
            if (!n_error++) snprintf(first_error, sizeof(first_error), "%s", line);
        }
        if (strstr(line, "Sanitizer") || strstr(line, "runtime error:")) sanitizer = 1;
        found |= strstr(line, k->needle) != NULL;
    }
    if (f) fclose(f);
    first_error[strcspn(first_error, "\n")] = 0;
    long long at = 0;
    int clean = output_is_clean(out, &at);
    int named = k->rc ? strstr(first_error, k->needle) != NULL : found;
    int checked = !post_check || sh("%s", post_check) == 0;
    int ok = rc == k->rc && n_error == (k->rc ? 1 : 0) && named && !sanitizer && clean && checked;
    char dirt[96] = "";
    if (!clean) snprintf(dirt, sizeof(dirt), ", a raw control byte or ill-formed UTF-8 at byte %lld of the output", at);
    check(ok, name, "exit %d%s, %d error line%s%s%s%s%s%s%s", rc, rc >= 128 ? " (killed by a signal)" : "", n_error,
          n_error == 1 ? "" : "s",
          named   ? ""
          : k->rc ? " (expected one naming '"
                  : " (expected output with '",
          named ? "" : k->needle, named ? "" : "')", sanitizer ? ", SANITIZER REPORT (see output)" : "", dirt,
          checked ? "" : ", check failed");
    if (!ok)
        printf("     %s\n     -> %s\n%s%s%s", cmd, first_error,
               checked ? "" : "     check: ", checked ? "" : post_check, checked ? "" : "\n");
}

// Each of n cases of a table through bin (the later suites' tables: faults_variants.c).
static void bad_runs(const char* bin, const BadRun* runs, size_t n) {
    for (size_t i = 0; i < n; i++) bad_run(bin, &runs[i].k, runs[i].setup, runs[i].check);
}

// A second run on a --ckpt-dir in use is refused at once (rank 0's flock of <dir>/LOCK); once
// the first has gone, even by kill -9, the directory is free again, and temporary files a
// killed run left are removed by the next run.
static void ckpt_dir_lock_test(const char* bin) {
    char tag[64], dir[256], out[300], log[300], cmd[4096], out2[300], out3[300];
    snprintf(tag, sizeof(tag), "%sckpt_dir_in_use", strstr(bin, "asan") ? "asan_" : "bad_");
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 100000 --ckpt-every 1 --log %s --ckpt-dir %s", log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 1, pid, 60);
    snprintf(out2, sizeof(out2), "%s/second.txt", dir);
    snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 %s " FLAGS " --steps 1 --ckpt-dir %s",
             bin, dir);
    double t0 = now_s();
    int rc2 = run_to_file(cmd, out2);
    double dt = now_s() - t0;
    int refused = rc2 == 1 && file_has(out2, "is in use by another run");
    kill(pid, SIGKILL);
    wait_for(pid, 10);
    // the first's checkpoints moved away (a fresh run is refused beside them: ckpt.h ckpt_dir_spare_others), and
    // the temporaries a kill leaves
    sh("rm -f %s/ckpt_*.bin %s/LATEST && touch %s/ckpt_00000009.bin.tmp.train-9-Ab12Cd "
       "%s/LATEST.tmp.train-9-Ef34Gh", dir, dir, dir, dir);
    snprintf(out3, sizeof(out3), "%s/third.txt", dir);
    int rc3 = run_to_file(cmd, out3);
    int tmp_left = sh("ls %s/*.tmp.* > /dev/null 2>&1", dir) == 0;
    check(reached && refused && dt < 5 && rc3 == 0 && !tmp_left, tag,
          "second run: exit %d in %.1f s, %s; after kill -9 of the first: "
          "exit %d, temporary files %s",
          rc2, dt, refused ? "refused" : "NOT refused", rc3, tmp_left ? "LEFT" : "removed");
}

// The one-process build run with the suite's flags and args (env before it).
static const char* nompi_cmd(const char* env, const char* args) {
    static char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s" ROOT "/train_nompi %s", env, flags_with(args));
    return cmd;
}

// The one-process build (make MPI=none: nompi/mpi.h in place of Open MPI) compiles and
// trains, with two chunks on its one stage (messages to itself) and a sample; and its tag
// range, the least MPI promises (32767), refuses a step whose pipeline messages need more.
static void nompi_build(void) {
    double t0 = now_s();
    int rc_build = sh("gcc -O1 -fopenmp -std=gnu11 -I. -Inompi -o " ROOT "/train_nompi train_gpt.c -lm > " ROOT
                      "/nompi_build.txt 2>&1");
    int rc = rc_build ? -1
                      : run_to_file(nompi_cmd("OMP_NUM_THREADS=1 ", "--steps 2 --vpp 2 --sample-len 8"),
                                    ROOT "/nompi.txt");
    check(rc_build == 0 && rc == 0, "nompi_build_trains",
          "build exit %d (" ROOT "/nompi_build.txt), 2 steps of pp 1 vpp 2: exit %d (%.1f s)", rc_build, rc,
          now_s() - t0);
    rc = rc_build ? -1
                  : run_to_file(nompi_cmd("", "--n-layer 64 --vpp 64 --micro-batch 1 --global-batch 512"),
                                ROOT "/nompi_tags.txt");
    check(rc == 1 && file_has(ROOT "/nompi_tags.txt", "past MPI's 32767"), "nompi_tag_range",
          "512 micro-batches x 64 chunks: exit %d, %s", rc,
          file_has(ROOT "/nompi_tags.txt", "past MPI's 32767") ? "refused by the tag range"
                                                               : "NOT refused by the tag range");
}

// ./train_asan, (re)built by make (Makefile.faults: the one build command, rebuilt when a header changed).
static int build_asan(void) {
    return sh("make --no-print-directory -f Makefile.faults train_asan > " ROOT "/asan_build.txt 2>&1") == 0;
}

// The long paths' flags and checks, made by bad_inputs_setup for BAD_RUNS.
static char long_ckpt_args[1400], long_ckpt_setup[1400], long_ckpt_check[2800], log599_args[800], log599_check[2400];
static char too_long_args[5400];
static char too_long_offload_args[5400], too_long_lognormal_args[300];

// The bad inputs' data, text, tokenizer and device files (bad_inputs_setup's first part).
static void bad_inputs_files(void) {
    fresh_dir(BAD);
    // data files
    write_shard("shard_ok.bin", SHARD_MAGIC, 1, 2000, 2000, -1);
    write_shard("shard_trunc_header.bin", SHARD_MAGIC, 1, 2000, 0, -1);
    sh("head -c 600 " BAD "/shard_ok.bin > " BAD "/shard_short_header.bin");
    sh("head -c 3000 " BAD "/shard_ok.bin > " BAD "/shard_trunc_body.bin");
    write_shard("shard_magic.bin", 12345, 1, 2000, 2000, -1);
    write_shard("shard_version.bin", SHARD_MAGIC, 7, 2000, 2000, -1);
    write_shard("shard_huge_count.bin", SHARD_MAGIC, 1, 0x7fffffff, 2000, -1);
    write_shard("shard_negative_count.bin", SHARD_MAGIC, 1, -5, 2000, -1);
    write_shard("shard_zero_count.bin", SHARD_MAGIC, 1, 0, 0, -1);
    sh("mkdir -p " BAD "/full");  // --offload-dir of the full-disk cases (a tmpfs mounted over it there)
    write_shard("shard_token_range.bin", SHARD_MAGIC, 1, 2000, 2000, 300);
    write_shard("shard_too_short.bin", SHARD_MAGIC, 1, 20, 20, -1);
    write_bytes("empty.txt", "", 0);
    write_bytes("short.txt", "hello", 5);
    sh("mkdir -p " BAD "/a_dir.txt");
    // tokenizers
    write_tokenizer("tok_ok.bin", TOKENIZER_MAGIC, 2, 300, 300, -1);
    write_bytes("tok_short_header.bin", "abc", 3);
    write_tokenizer("tok_magic.bin", 99, 2, 300, 300, -1);
    write_tokenizer("tok_version.bin", TOKENIZER_MAGIC, 9, 300, 300, -1);
    write_tokenizer("tok_vocab_zero.bin", TOKENIZER_MAGIC, 2, 0, 300, -1);
    write_tokenizer("tok_vocab_huge.bin", TOKENIZER_MAGIC, 2, 4000000000u, 300, -1);
    write_tokenizer("tok_truncated.bin", TOKENIZER_MAGIC, 2, 300, 100, -1);
    write_tokenizer("tok_empty_entry.bin", TOKENIZER_MAGIC, 2, 300, 300, 5);
    // planner device files
    write_bytes("dev_unknown_key.txt", "warp_speed = 9\n", 15);
    write_bytes("dev_bad_value.txt", "hbm_gbps = fast\n", 16);
    write_bytes("dev_no_equals.txt", "hbm_gbps 3000\n", 14);
    write_bytes("dev_base_late.txt", "hbm_gbps = 3000\nbase = h100-sxm\n", 32);
    write_bytes("dev_base_unknown.txt", "base = abacus\n", 14);
    write_bytes("dev_missing_value.txt", "hbm_gbps =\n", 11);
    {
        char longline[2000];
        memset(longline, 'x', sizeof(longline));
        longline[sizeof(longline) - 1] = '\n';
        write_bytes("dev_long_line.txt", longline, sizeof(longline));
    }
    // --plan --doc-lengths files: a NUL inside a line, a line past 63 characters (it was read as two
    // lengths), a length of 10 G tokens, a negative one, none, a blank line
    write_bytes("dl_nul.txt", "12\0003\n5\n", 7);
    write_bytes("dl_long_line.txt", "00000000000000000000000000000000000000000000000000000000000000055\n", 66);
    write_bytes("dl_10g.txt", "10000000000\n", 12);
    write_bytes("dl_negative.txt", "5\n-5\n", 6);
    write_bytes("dl_blank.txt", "5\n\n6\n", 6);
    write_bytes("dl_short.txt", "5\r\n6", 4);  // CRLF, no final newline: read, then too short to simulate
    // an --offload-dir past PATH_MAX; a generator's spec past its 128-byte buffer (its tail was cut off unread)
    snprintf(too_long_offload_args, sizeof(too_long_offload_args), "--offload optimizer --offload-dir " BAD "/%05000d",
             9);
    snprintf(too_long_lognormal_args, sizeof(too_long_lognormal_args), "--plan --doc-lengths lognormal:78:0.%0120dx",
             9);
}

// The bad inputs' files: data, tokenizers, device files, checkpoints (a good one from a 1-step run,
// then corruptions of it) and long paths. 0 (with a FAIL line) if the good run failed.
static int bad_inputs_setup(void) {
    bad_inputs_files();
    // checkpoints: a good one from a 1-step run, then corruptions of it
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 1 --ckpt-dir " BAD "/good");
    int rc = run_to_file(cmd, BAD "/good_out.txt");
    const char* good = BAD "/good/ckpt_00000001.bin";
    if (rc != 0 || file_size(good) < 0) {
        check(0, "bad_inputs_setup", "the good checkpoint run exited %d", rc);
        return 0;
    }
    long long gsize = file_size(good);
    write_ckpt("ck_truncated", good, -1, 0, gsize / 2, -1, 0);
    write_ckpt("ck_short_header", good, -1, 0, 100, -1, 0);
    write_ckpt("ck_magic", good, CK_MAGIC, 1234, -1, -1, 0);
    write_ckpt("ck_version", good, CK_VERSION, 9, -1, -1, 0);
    write_ckpt("ck_version1", good, CK_VERSION, 1, -1, -1, 0);
    write_ckpt("ck_n_full_huge", good, CK_N_FULL_HI, 0x7fffffff, -1, -1, 0);
    write_ckpt("ck_negative_step", good, CK_STEP, -7, -1, -1, 1);
    write_ckpt("ck_nan", good, -1, 0, -1, 1000, 1);
    write_ckpt("ck_grown", good, -1, 0, -1, -1, 0);
    // damage behind the checksums: a changed step field, a zeroed body, one flipped bit
    write_ckpt("ck_step_19", good, CK_STEP, 19, -1, -1, 0);
    write_ckpt("ck_n_tensors", good, CK_N_TENSORS, 27, -1, -1, 0);
    sh("head -c 4 /dev/zero >> " BAD "/ck_grown/ckpt.bin");
    sh("mkdir -p " BAD "/ck_empty_dir " BAD "/ck_dangling && echo ckpt_00000099.bin > " BAD "/ck_dangling/LATEST");
    sh("mkdir -p " BAD "/ck_garbage_latest && cp %s " BAD
       "/ck_garbage_latest/ckpt_00000001.bin && printf '\\001\\002' > " BAD "/ck_garbage_latest/LATEST",
       good);
    write_bytes("a_file", "x", 1);
    write_bytes("llmc_garbage.bin", "not a checkpoint at all", 23);
    // values: AdamW v below 0 (a mean of squares cannot be); layer 0's qkv weights at 1e30,
    // finite but every step's loss NaN; an llm.c file with a NaN and one with an inf
    ModelConfig mc;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(FLAGS, &mc, P);
    write_ckpt_values("ck_negative_v", good, 2 * (long long)P->n_full + 7, 1, -1.0f, 1);
    for (int i = 0; i < P->n; i++)
        if (P->t[i].kind == P_QKVW && P->t[i].layer == 0)
            write_ckpt_values("ck_huge_qkvw", good, P->t[i].full_offset, P->t[i].size, 1e30f, 1);
    write_ckpt_values("ck_zeroed_body", good, 0, 3 * (long long)P->n_full, 0.0f, 0);
    float lowest_bit;  // the lowest mantissa bit of one float of Adam's v
    uint32_t one = 1;
    memcpy(&lowest_bit, &one, 4);
    write_ckpt_values("ck_v_bit", good, 2 * (long long)P->n_full + 123, 0, lowest_bit, 0);
    free(P);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 0 --export-llmc " BAD "/llmc_ok.bin");
    if (run_to_file(cmd, BAD "/llmc_ok_out.txt") != 0) {
        check(0, "bad_inputs_setup", "the llm.c export run failed");
        return 0;
    }
    sh("cp " BAD "/llmc_ok.bin " BAD "/llmc_nan.bin && printf '\\000\\000\\300\\177' | dd of=" BAD
       "/llmc_nan.bin bs=1 seek=5000 conv=notrunc");
    sh("cp " BAD "/llmc_ok.bin " BAD "/llmc_inf.bin && printf '\\000\\000\\200\\177' | dd of=" BAD
       "/llmc_inf.bin bs=1 seek=%lld conv=notrunc",
       file_size(BAD "/llmc_ok.bin") - 40);
    // FIFOs where an input is expected: open() of one blocks until a writer comes
    sh("cd " BAD
       " && mkfifo fifo.txt fifo.bin fifo_g1.bin fifo.tok fifo.ckpt fifo.llmc && mkdir -p ck_fifo_latest && mkfifo "
       "ck_fifo_latest/LATEST");
    // text to train on, under names with glob characters and as a glob of several files
    char text[4000];
    for (size_t i = 0; i < sizeof(text); i++) text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    write_bytes("text_ok.txt", text, sizeof(text));
    write_bytes("notes[1].txt", text, sizeof(text));
    write_bytes("globtext_a.txt", text, 2000), write_bytes("globtext_b.txt", text + 2000, 2000);
    write_bytes("mixed_a.txt", text, 2000);
    write_shard("mixed_b.bin", SHARD_MAGIC, 1, 2000, 2000, -1);
    // tokenizers of the model's vocabulary (257): pieces that are escape sequences and bytes
    // that are not UTF-8 (eot 256); and the 300-entry one of another model (tok_ok.bin above)
    {
        uint8_t b[1024 + 257 * 8];
        uint32_t h[256] = {TOKENIZER_MAGIC, 2, 257, 256};
        memcpy(b, h, sizeof(h));
        size_t k = 1024;
        for (int i = 0; i < 257; i++) {
            const char* piece = i % 3 == 0 ? "\x1b[2J" : i % 3 == 1 ? "\x1b]0;pwned\x07" : "\xff\xc2\x9b";
            b[k++] = (uint8_t)strlen(piece);
            memcpy(b + k, piece, strlen(piece)), k += strlen(piece);
        }
        write_bytes("tok_escapes.bin", b, k);
    }
    // long paths: a checkpoint directory of more than 1000 characters, a --log of 599 (so
    // "<log>.rank0" is 605), and one past PATH_MAX
    char long_dir[1200], log599[700], too_long[5200];
    snprintf(long_dir, sizeof(long_dir), BAD "/%0200d/%0200d/%0200d/%0200d/%0200d/ck", 1, 2, 3, 4, 5);
    snprintf(log599, sizeof(log599), BAD "/%0200d/%0200d/%0*d", 6, 7, 599 - (int)strlen(BAD) - 403, 8);
    sh("mkdir -p $(dirname %s) $(dirname %s)", long_dir, log599);
    snprintf(too_long, sizeof(too_long), BAD "/%05000d", 9);
    snprintf(long_ckpt_args, sizeof(long_ckpt_args), "--steps 2 --ckpt-dir %s", long_dir);
    snprintf(long_ckpt_setup, sizeof(long_ckpt_setup), "rm -rf %s", long_dir);  // (a fresh run: ./train's is there)
    snprintf(long_ckpt_check, sizeof(long_ckpt_check),
             "test -f %s/ckpt_00000002.bin && grep -qx ckpt_00000002.bin %s/LATEST", long_dir, long_dir);
    snprintf(log599_args, sizeof(log599_args), "--steps 2 --log %s --log-ranks", log599);
    snprintf(log599_check, sizeof(log599_check),
             "grep -q '\"step\":2,' %s && ! grep -q '\"rank\"' %s && grep -q '\"rank\":0' %s.rank0", log599, log599,
             log599);
    snprintf(too_long_args, sizeof(too_long_args), "--steps 1000000 --ckpt-dir %s", too_long);
    return 1;
}

// Each bad input through ./train: its flags, the words its one error line must hold, its exit code.
static const BadCase BAD_CASES[] = {
    // data
    {"shard_short_header", "--data " BAD "/shard_short_header.bin", "truncated header", 1},
    {"shard_trunc_body", "--data " BAD "/shard_trunc_body.bin", "header says", 1},
    {"shard_magic", "--data " BAD "/shard_magic.bin", "bad magic", 1},
    {"shard_version", "--data " BAD "/shard_version.bin", "unsupported version", 1},
    {"shard_huge_count", "--data " BAD "/shard_huge_count.bin", "header says 2147483647 tokens", 1},
    {"shard_negative_count", "--data " BAD "/shard_negative_count.bin", "bad token count", 1},
    {"shard_zero_count", "--data " BAD "/shard_zero_count.bin", "bad token count", 1},
    {"shard_token_range", "--data " BAD "/shard_token_range.bin", "token id 300", 1},
    {"shard_token_range_dp2", "--dp 2 --data " BAD "/shard_token_range.bin", "token id 300", 1},  // rank 0's line alone
    {"shard_too_short", "--data " BAD "/shard_too_short.bin", "fewer than seq-len+1", 1},
    {"shard_glob_no_match", "--data '" BAD "/nothing_*.bin'", "no file matches", 1},
    {"shard_missing", "--data " BAD "/missing.bin", "cannot open data file", 1},
    {"text_missing", "--data " BAD "/missing.txt", "cannot open data file", 1},
    {"text_empty", "--data " BAD "/empty.txt", "is empty", 1},
    {"text_short", "--data " BAD "/short.txt", "fewer than seq-len+1", 1},
    {"text_is_dir", "--data " BAD "/a_dir.txt", "a_dir.txt", 1},
    {"text_small_vocab", "--data " BAD "/short.txt --vocab 100", "needs vocab >= 256", 1},
    // --eot: an ordinary token (a byte of byte-level text) or an id past the vocabulary
    {"eot_byte_of_text", "--eot 101", "--eot 101: built-in corpus (2000000 bytes) is byte-level text, where ids 0-255",
     1},
    {"eot_past_vocab", "--eot 257", "--eot 257: outside the vocabulary of 257", 1},
    {"val_missing", "--val-data " BAD "/missing.bin", "cannot open data file", 1},
    // flags
    {"flag_steps_abc", "--steps abc", "--steps: expected an integer", 1},
    {"flag_steps_trailing", "--steps 12x", "--steps: expected an integer", 1},
    {"flag_steps_overflow", "--steps 99999999999999999999", "--steps: 99999999999999999999 is out of range", 1},
    {"flag_lr_abc", "--lr fast", "--lr: expected a number", 1},
    {"flag_lr_nan", "--lr nan", "--lr: expected a number", 1},
    {"flag_lr_negative", "--lr -1", "--lr must be in", 1},
    {"flag_micro_batch_negative", "--micro-batch -8", "--micro-batch must be in", 1},
    {"flag_n_layer_zero", "--n-layer 0", "--n-layer must be in", 1},
    {"flag_d_model_negative", "--d-model -64", "--d-model must be in", 1},
    {"flag_d_model_indivisible", "--d-model 66", "not divisible by --n-head", 1},
    {"flag_seed_negative", "--seed -1", "--seed must be >= 0", 1},
    {"flag_no_value", "--steps", "needs a value", 1},
    {"flag_unknown", "--warp 9", "unknown flag --warp", 1},
    {"flag_did_you_mean", "--step 9", "unknown flag --step; did you mean --steps?", 1},
    {"flag_positional", "stray", "unexpected argument 'stray'", 1},
    {"flag_model_unknown", "--model gpt5", "unknown preset 'gpt5'; the presets: tiny, small, gpt2-124m", 1},
    {"flag_schedule_bad", "--schedule zigzag", "--schedule must be", 1},
    {"flag_timeout_zero", "--timeout-s 0", "--timeout-s must be in", 1},
    {"layout_tp3", "--tp 3", "layout: n_head 4 is not divisible by tp 3 (this model splits over --tp 1, 2, 4)", 1},
    {"omp_threads_warning_own_mpirun",
     "env -u OMP_NUM_THREADS mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 {train} --steps 1",
     "warning: OMP_NUM_THREADS is not set: 2 ranks on this host x", 0},
    {"layout_world_not_multiple", "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 3 {train} --tp 2",
     "the world must be a multiple of tp x pp x cp = 2", 1},
    {"layout_global_batch", "--dp 1 --global-batch 33", "layout:", 1},
    {"layout_zero_no_dp", "--zero 1", "layout:", 1},
    {"comm_nccl_cpu", "--comm nccl", "--comm nccl: the CPU build communicates over MPI", 1},
    // OpenMP threads sleep while they wait unless told otherwise (base/launcher.h wait_policy_passive)
    {"wait_policy_passive_by_default", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_NUM_THREADS=2 {train} --steps 1",
     "| threads per rank      | 2 (OpenMP), waiting passive ", 0},
    {"wait_policy_user_active_kept", "env OMP_WAIT_POLICY=active OMP_NUM_THREADS=2 {train} --steps 1",
     "2 (OpenMP), waiting active ", 0},
    // --zero 3 (parallel/zero3.h): what it needs, what it does not go with, units past int counts
    {"zero3_level_4", "--zero 4", "--zero must be in [0, 3]", 1},
    {"zero3_no_dp", "--zero 3", "--zero 3 needs dp x cp > 1", 1},
    {"zero3_reshard_without_zero3", "--dp 2 --zero 2 --reshard-after-forward off",
     "--reshard-after-forward: only with --zero 3", 1},
    {"zero3_reshard_choice", "--dp 2 --zero 3 --reshard-after-forward maybe",
     "--reshard-after-forward must be on or off", 1},
    {"zero3_layer_past_int", "--dp 2 --zero 3 --d-model 14000 --n-head 100 --n-layer 2",
     "--zero 3: a unit (a layer, the embeddings or the head) of 2352182000 floats per tp rank", 1},
    // --zero 1|2: a shard, and (zero 2, reduce-scattered a layer at a time) a unit, past int counts
    {"zero2_layer_past_int", "--dp 2 --zero 2 --d-model 14000 --n-head 100 --n-layer 2",
     "--zero 2: a unit (a layer, the embeddings or the head) of 2352182000 floats per tp rank", 1},
    {"zero1_shard_past_int", "--dp 2 --zero 1 --d-model 8192 --n-head 64 --n-layer 8",
     "--zero 1: a rank's shard of 3223363584 floats is more than", 1},
    {"zero2_shard_past_int", "--dp 2 --zero 2 --d-model 8192 --n-head 64 --n-layer 8",
     "--zero 2: a rank's shard of 3223363584 floats is more than", 1},
    {"zero1_shard_past_int_world",  // no --dp: dp is the world mpirun started (it ran out of memory)
     "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 {train} --zero 1 --d-model 8192 --n-head 64 "
     "--n-layer 8", "--zero 1: a rank's shard of 3223363584 floats is more than", 1},
    {"zero3_embedding_past_int", "--dp 2 --zero 3 --vocab 1048576 --d-model 4096 --n-head 64 --n-layer 2 --tp 2",
     "of 2147614720 floats per tp rank", 1},
    // checkpoints
    {"ckpt_truncated", "--resume " BAD "/ck_truncated/ckpt.bin", "truncated or corrupt", 1},
    {"ckpt_grown", "--resume " BAD "/ck_grown/ckpt.bin", "truncated or corrupt", 1},
    {"ckpt_short_header", "--resume " BAD "/ck_short_header/ckpt.bin", "truncated header", 1},
    {"ckpt_magic", "--resume " BAD "/ck_magic/ckpt.bin", "bad magic 1234", 1},
    {"ckpt_version", "--resume " BAD "/ck_version/ckpt.bin", "unsupported version 9", 1},
    {"ckpt_n_full_huge", "--resume " BAD "/ck_n_full_huge/ckpt.bin", "parameters", 1},
    {"ckpt_negative_step", "--resume " BAD "/ck_negative_step/ckpt.bin", "negative step", 1},
    {"ckpt_nan", "--resume " BAD "/ck_nan/ckpt.bin", "non-finite", 1},
    // checksums: every byte of a checkpoint is verified by the rank that reads it
    {"ckpt_version1", "--resume " BAD "/ck_version1/ckpt.bin", "format version 1 has no checksums", 1},
    {"ckpt_step_changed", "--resume " BAD "/ck_step_19/ckpt.bin", "the header or the index does not match its checksum",
     1},
    {"ckpt_n_tensors_changed", "--resume " BAD "/ck_n_tensors/ckpt.bin", "truncated or corrupt", 1},
    {"ckpt_zeroed_body", "--resume " BAD "/ck_zeroed_body/ckpt.bin",
     "parameters of tensor wte do not match their checksum", 1},
    {"ckpt_zeroed_body_tp2_pp2", "--tp 2 --pp 2 --resume " BAD "/ck_zeroed_body/ckpt.bin",
     "do not match their checksum", 1},
    {"ckpt_adam_v_bit_flipped", "--resume " BAD "/ck_v_bit/ckpt.bin",
     "adam v of tensor wte do not match their checksum", 1},
    // sizes from flags past their caps, computed in 64 bits before anything is allocated
    {"schedule_pairs_overflow", "--seq-len 1 --micro-batch 1 --n-layer 64 --vpp 64 --global-batch 9586981",
     "(micro-batch, chunk) pairs", 1},
    {"schedule_pairs_past_cap", "--pp 2 --vpp 2 --micro-batch 1 --global-batch 1048578", "(micro-batch, chunk) pairs",
     1},
    {"world_wraps_to_one", "--dp 411849 --cp 20857 --seq-len 41714 --global-batch 411849 --micro-batch 1",
     "ranks, more than the 1048576", 1},
    {"world_wraps_to_zero", "--dp 65536 --tp 512 --pp 128", "ranks, more than the 1048576", 1},
    {"cp_contiguous_names_its_split", "--cp 3 --cp-split contiguous --seq-len 46", "(the contiguous split)", 1},
    {"ckpt_other_shape_layers", "--n-layer 3 --resume " BAD "/good/ckpt_00000001.bin",
     "n_layer is 4 in the checkpoint but 3", 1},
    {"ckpt_other_shape_width", "--d-model 32 --resume " BAD "/good/ckpt_00000001.bin", "d_model", 1},
    {"ckpt_other_arch", "--model llama-tiny --resume " BAD "/good/ckpt_00000001.bin",
     "a gpt2 checkpoint, but this run's architecture is llama (a gpt2 --model)", 1},
    {"ckpt_other_global_batch", "--global-batch 16 --resume " BAD "/good/ckpt_00000001.bin", "data order", 1},
    {"ckpt_missing", "--resume " BAD "/missing.bin", "cannot open", 1},
    {"ckpt_auto_no_dir", "--resume auto", "needs --ckpt-dir", 1},
    // resuming at --steps: done, nothing trained, exit 0 (a requeued finished job); past it: refused
    {"ckpt_resume_at_steps", "--steps 1 --resume " BAD "/good/ckpt_00000001.bin",
     "the run is complete at --steps, nothing to train", 0},
    {"ckpt_resume_at_steps_no_time", "--steps 1 --resume " BAD "/good/ckpt_00000001.bin",
     "step not measured, no step ran (planner", 0},  // not "step 0.0 ms mean"
    {"ckpt_resume_past_steps", "--steps 0 --resume " BAD "/good/ckpt_00000001.bin",
     "the checkpoint is at step 1, past --steps 0 (raise --steps to go on)", 1},
    {"ckpt_auto_dangling_latest", "--resume auto --ckpt-dir " BAD "/ck_dangling", "ckpt_00000099.bin", 1},
    {"ckpt_auto_garbage_latest", "--resume auto --ckpt-dir " BAD "/ck_garbage_latest",
     "LATEST does not name a checkpoint", 1},
    {"ckpt_dir_is_file", "--steps 1 --ckpt-dir " BAD "/a_file", "--ckpt-dir", 1},
    {"log_unwritable", "--steps 1 --log " BAD "/no_such_dir/log.jsonl", "--log", 1},
    // '-' is a file of that name to open(): a Unix user means standard output, which carries the run's lines
    {"log_dash", "--steps 1 --log -", "--log -: standard output carries the run's lines", 1},
    {"export_llmc_dash", "--steps 1 --export-llmc -", "--export-llmc -: standard output carries", 1},
    {"export_llmc_llama", "--model llama-tiny --steps 1 --export-llmc " BAD "/llama.bin", "GPT-2", 1},
    {"export_llmc_unwritable", "--steps 1 --export-llmc " BAD "/no_such_dir/e.bin", "--export-llmc", 1},
    {"import_llmc_garbage", "--import-llmc " BAD "/llmc_garbage.bin", "llmc_garbage.bin", 1},
    {"import_llmc_missing", "--import-llmc " BAD "/missing.bin", "missing.bin", 1},
    // tokenizer
    {"tok_missing", "--tokenizer " BAD "/missing.tok", "cannot open tokenizer", 1},
    {"tok_short_header", "--tokenizer " BAD "/tok_short_header.bin", "truncated header", 1},
    {"tok_magic", "--tokenizer " BAD "/tok_magic.bin", "bad magic", 1},
    {"tok_version", "--tokenizer " BAD "/tok_version.bin", "unsupported version", 1},
    {"tok_vocab_zero", "--tokenizer " BAD "/tok_vocab_zero.bin", "implausible vocab", 1},
    {"tok_vocab_huge", "--tokenizer " BAD "/tok_vocab_huge.bin", "implausible vocab", 1},
    {"tok_truncated", "--tokenizer " BAD "/tok_truncated.bin", "truncated", 1},
    {"tok_empty_entry", "--tokenizer " BAD "/tok_empty_entry.bin", "empty entry 5", 1},
    // planner device file
    {"plan_device_missing", "--plan --device-file " BAD "/missing.dev", "cannot open device file", 1},
    {"plan_device_unknown_key", "--plan --device-file " BAD "/dev_unknown_key.txt", "unknown key 'warp_speed'", 1},
    {"plan_device_bad_value", "--plan --device-file " BAD "/dev_bad_value.txt", "hbm_gbps", 1},
    {"plan_device_no_equals", "--plan --device-file " BAD "/dev_no_equals.txt", "expected 'key = value'", 1},
    {"plan_device_base_late", "--plan --device-file " BAD "/dev_base_late.txt", "'base' must be the first key", 1},
    {"plan_device_base_unknown", "--plan --device-file " BAD "/dev_base_unknown.txt", "unknown device 'abacus'", 1},
    {"plan_device_missing_value", "--plan --device-file " BAD "/dev_missing_value.txt", "missing value", 1},
    {"plan_device_long_line", "--plan --device-file " BAD "/dev_long_line.txt", "line too long", 1},
    // inputs that are not regular files: refused at once, never opened in a way that blocks
    {"fifo_data_text", "--data " BAD "/fifo.txt", "not a regular file (a FIFO)", 1},
    {"fifo_data_shard", "--data " BAD "/fifo.bin", "not a regular file (a FIFO)", 1},
    {"fifo_data_glob", "--data '" BAD "/fifo_g*.bin'", "not a regular file (a FIFO)", 1},
    {"fifo_val_data", "--val-data " BAD "/fifo.bin", "not a regular file (a FIFO)", 1},
    {"fifo_tokenizer", "--tokenizer " BAD "/fifo.tok", "not a regular file (a FIFO)", 1},
    {"fifo_resume", "--resume " BAD "/fifo.ckpt", "not a regular file (a FIFO)", 1},
    {"fifo_latest", "--resume auto --ckpt-dir " BAD "/ck_fifo_latest", "not a regular file (a FIFO)", 1},
    {"fifo_import_llmc", "--import-llmc " BAD "/fifo.llmc", "not a regular file (a FIFO)", 1},
    {"dir_resume", "--resume " BAD "/a_dir.txt", "not a regular file (a directory)", 1},
    {"device_tokenizer", "--tokenizer /dev/zero", "not a regular file (a character device)", 1},
    // every value that enters the model: token ids against the vocabulary (the built-in
    // corpus too), llm.c weights and checkpoint state finite, AdamW v >= 0
    {"vocab_below_builtin_corpus", "--steps 3 --vocab 2", "needs vocab >= 256", 1},
    {"vocab_below_val_shard", "--val-data " BAD "/shard_token_range.bin", "token id 300", 1},
    {"import_llmc_nan", "--steps 1 --import-llmc " BAD "/llmc_nan.bin",
     "llmc_nan.bin: parameters of tensor wte: non-finite", 1},
    {"import_llmc_inf", "--steps 0 --import-llmc " BAD "/llmc_inf.bin --export-llmc " BAD "/llmc_out.bin",
     "llmc_inf.bin: parameters", 1},
    {"ckpt_negative_adam_v", "--resume " BAD "/ck_negative_v/ckpt.bin", "adam v of tensor", 1},
    {"flag_eps_zero", "--eps 0", "--eps must be in", 1},
    {"tokens_per_rank_past_int", "--seq-len 1048576 --micro-batch 2048 --global-batch 2048",
     "tokens per data-parallel rank", 1},
    {"nan_names_its_step", "--steps 3 --resume " BAD "/ck_huge_qkvw/ckpt.bin", "step 2: loss", 1},
    // a path past PATH_MAX is refused at start-up, not cut
    {"ckpt_dir_past_path_max", too_long_args, "--ckpt-dir", 1},
    // outputs, checked at start-up (--steps 1000000 would run for hours past a late
    // check), never replacing what is not a regular file, never an input, never each other
    {"ckpt_dir_missing_parent", "--steps 1000000 --ckpt-dir " BAD "/no/such/parent", "--ckpt-dir", 1},
    {"trace_in_proc", "--steps 1000000 --trace /proc/self/trace.json", "--trace", 1},
    {"trace_onto_dir", "--steps 1000000 --trace " BAD "/a_dir.txt", "exists and is a directory", 1},
    {"log_onto_full_device", "--steps 1000000 --log /dev/full", "exists and is a character device", 1},
    {"trace_is_the_log", "--steps 1000000 --log " BAD "/same.json --trace " BAD "/same.json", "the same file as --log",
     1},
    {"trace_in_ckpt_dir_names", "--steps 1000000 --ckpt-dir " BAD "/ck_names --trace " BAD "/ck_names/LATEST",
     "a name --ckpt-dir", 1},
    // ranks started with other settings (MPMD) refuse at start-up, naming the setting
    {"ranks_disagree_width",
     "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 {train} --d-model 64 : -np 1 {train} --d-model "
     "128",
     "ranks disagree on --d-model: rank 0 has 64, rank 1 has 128", 1},
    {"ranks_disagree_lr",
     "mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 {train} --lr 0.01 : -np 1 {train} --lr 0.02",
     "ranks disagree on --lr: rank 0 has 0.01, rank 1 has 0.02", 1},
    // an existing path is one file whatever its name holds; a glob of text files is text
    {"data_name_with_brackets", "--steps 1 --data '" BAD "/notes[1].txt'", "notes[1].txt", 0},
    {"data_glob_of_text", "--steps 1 --data '" BAD "/globtext_*.txt'", "globtext_*.txt", 0},
    {"data_glob_of_both_kinds", "--steps 1 --data '" BAD "/mixed_*'", "matches both .bin shards and text files", 1},
    // the tokenizer against the model's vocabulary; what reaches the terminal is escaped
    {"tok_other_vocab", "--tokenizer " BAD "/tok_ok.bin", "its vocab is 300 but the model's is 257", 1},
    {"tok_pieces_escaped", "--steps 1 --sample-len 60 --tokenizer " BAD "/tok_escapes.bin", "\\x1b[2J", 0},
    {"byte_sample_escaped", "--steps 1 --sample-len 60", "sample:", 0},
    {"error_line_escaped", "--data \"$(printf '" BAD "/\\033[31mred\\nline.txt')\"", "\\x1b[31mred\\x0aline.txt", 1},
    // --offload (backend/cpu/offload.h): the tier's directory, and flags that do not go together
    {"offload_choice", "--offload gpu", "--offload must be none, optimizer, activations or both", 1},
    {"offload_dir_without_offload", "--offload-dir /tmp", "--offload-dir: only with --offload", 1},
    {"offload_activations_pp1", "--offload activations", "--offload activations needs --pp > 1", 1},
    {"offload_frames_without_activations", "--offload optimizer --offload-frames 1",
     "--offload-frames: only with --offload activations", 1},
    {"offload_frames_range", "--pp 2 --offload activations --offload-frames 3",
     "--offload-frames must be in [1, 2]", 1},
    {"offload_dir_missing", "--offload optimizer --offload-dir " BAD "/no_such_dir",
     "--offload-dir " BAD "/no_such_dir: not a directory this run can write to (No such file or directory)", 1},
    {"offload_dir_a_file", "--offload both --pp 2 --offload-dir " BAD "/shard_magic.bin", "(Not a directory)", 1},
    {"offload_dir_empty", "--offload optimizer --offload-dir ''", "--offload-dir: empty", 1},
    {"offload_dir_missing_unused",  // checked at start-up, even where no slot needs the tier (pp 2)
     "--offload activations --pp 2 --offload-dir " BAD "/no_such_dir", "not a directory this run can write to", 1},
    {"offload_dir_path_max", too_long_offload_args, "--offload-dir " BAD "/00000", 1},
    // --data docs:lognormal[:MEDIAN[:SIGMA]] (layout/packing.h docs_spec)
    {"docs_no_generator", "--data docs:", "the generator is docs:lognormal", 1},
    {"docs_other_generator", "--data docs:lognormalx", "the generator is docs:lognormal", 1},
    {"docs_empty_median", "--data docs:lognormal:", "the generator is docs:lognormal", 1},
    {"docs_empty_sigma", "--data docs:lognormal:78:", "the generator is docs:lognormal", 1},
    {"docs_trailing_junk_pp2", "--pp 2 --data docs:lognormal:78x", "the generator is docs:lognormal", 1},
    {"docs_third_field", "--data docs:lognormal:78:0.5:3", "the generator is docs:lognormal", 1},
    {"docs_median_nan", "--data docs:lognormal:nan", "the generator is docs:lognormal", 1},
    {"docs_median_hex", "--data docs:lognormal:0x10", "the generator is docs:lognormal", 1},
    {"docs_median_1e300_tp2", "--tp 2 --data docs:lognormal:1e300", "MEDIAN must be in [2, 1e7]", 1},
    {"docs_median_1", "--data docs:lognormal:1", "MEDIAN must be in [2, 1e7]", 1},
    {"docs_sigma_1e9", "--data docs:lognormal:78:1e9", "SIGMA in [0, 4]", 1},
    {"docs_sigma_negative", "--data docs:lognormal:78:-1", "SIGMA in [0, 4]", 1},
    {"docs_sigma_zero_trains", "--steps 1 --data docs:lognormal:78:0", "step", 0},
    {"docs_vocab_256", "--vocab 256 --data docs:lognormal:78", "documents need an end-of-text token", 1},
    {"docs_vocab_256_tp2", "--tp 2 --vocab 256 --data docs:lognormal:78", "documents need an end-of-text token", 1},
    {"doc_mask_on_text_pp2", "--pp 2 --doc-mask on", "--doc-mask on: built-in corpus", 1},  // one line, rank 0's
    {"doc_mask_choice", "--doc-mask yes", "--doc-mask must be auto, on or off", 1},
    // --packing: wlb's plan at start-up grows as sequences x documents; past 8192 sequences refused
    {"packing_choice", "--packing first-fit", "--packing must be concat, greedy or wlb", 1},
    {"packing_wlb_huge_batch", "--packing wlb --micro-batch 1 --global-batch 1048576", "over the 8192 sequences", 1},
    {"packing_wlb_gb1", "--steps 1 --packing wlb --data docs:lognormal:20 --micro-batch 1 --global-batch 1", "step", 0},
    // --plan --doc-lengths FILE|lognormal:MEDIAN[:SIGMA] (planner/documents.h): read before the search
    {"doc_lengths_missing", "--plan --doc-lengths " BAD "/missing.txt", "--doc-lengths: cannot open", 1},
    {"doc_lengths_fifo", "--plan --doc-lengths " BAD "/fifo.txt", "not a regular file (a FIFO)", 1},
    {"doc_lengths_dir", "--plan --doc-lengths " BAD "/a_dir.txt", "not a regular file (a directory)", 1},
    {"doc_lengths_empty", "--plan --doc-lengths " BAD "/empty.txt", "no lengths", 1},
    {"doc_lengths_binary", "--plan --doc-lengths " BAD "/shard_ok.bin", "line 1 is not a length", 1},
    {"doc_lengths_nul", "--plan --doc-lengths " BAD "/dl_nul.txt", "line 1 is not a length", 1},
    {"doc_lengths_long_line", "--plan --doc-lengths " BAD "/dl_long_line.txt", "line 1 is not a length", 1},
    {"doc_lengths_10g", "--plan --doc-lengths " BAD "/dl_10g.txt", "line 1 is not a length in [1, 1e9]", 1},
    {"doc_lengths_negative", "--plan --doc-lengths " BAD "/dl_negative.txt", "line 2 is not a length", 1},
    {"doc_lengths_blank_line", "--plan --doc-lengths " BAD "/dl_blank.txt", "line 2 is not a length", 1},
    {"doc_lengths_lognormal_nan", "--plan --doc-lengths lognormal:nan", "the generator is", 1},
    {"doc_lengths_lognormal_junk", "--plan --doc-lengths lognormal:78:0.99x", "the generator is", 1},
    {"doc_lengths_lognormal_past_cap", too_long_lognormal_args, "spec is longer than 122", 1},
    {"doc_lengths_too_short",  // documents of 5 tokens in batches of 2048 x 2048: it ran past 300 s
     "--plan --model llama-7b --gpus 16 --doc-lengths " BAD "/dl_short.txt", "mean 5.5 tokens: wlb's simulation", 1},
    {"doc_lengths_lognormal_median_2", "--plan --model llama-7b --gpus 16 --doc-lengths lognormal:2:0",
     "wlb's simulation would take hours", 1},
    // a full disk: a 64 KiB tmpfs in a mount namespace of its own (unshare -r: also without root)
    {"offload_dir_full_optimizer",
     "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs " BAD "/full && exec {train} --offload optimizer "
     "--offload-dir " BAD "/full'",
     "--offload-dir " BAD "/full: cannot reserve 0.9 MiB for the AdamW m (No space left on device)", 1},
    {"offload_dir_full_activations",
     "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs " BAD "/full && exec {train} --offload activations --pp 2 "
     "--schedule gpipe --micro-batch 4 --offload-dir " BAD "/full'",
     "cannot reserve", 1},
};
// cases that need files made first, or a look at them after
#define FIFO_AT(path) "rm -f " path " && mkfifo " path

// Runs with a set-up before them and a check of what they left.
#define HF_LLAMA "test -d " BAD "/hf_llama || OMP_NUM_THREADS=1 ./train --model llama-tiny --steps 1 --eval-every 0 " \
                 "--sample-len 0 --quiet --export-hf " BAD "/hf_llama"
static const BadRun BAD_RUNS[] = {
    // the self-launcher's mpirun runs quiet (-q): a rank's error is its one line, no Open MPI banner after it
    {{"launcher_quiet_on_error", "--dp 2 --data " BAD "/shard_token_range.bin", "token id 300", 1}, NULL,
     "! grep -q -e 'Primary job' -e 'mpirun detected' " BAD "/out_bad_launcher_quiet_on_error.txt"},
    // a job's first launch: --resume auto starts at step 0 (one requeue script serves every launch)
    {{"ckpt_auto_empty_dir", "--steps 1 --resume auto --ckpt-dir " BAD "/ck_auto_empty",
      "resume: no checkpoint in " BAD "/ck_auto_empty yet: starting at step 0", 0},
     "rm -rf " BAD "/ck_auto_empty && mkdir " BAD "/ck_auto_empty", "test -f " BAD "/ck_auto_empty/ckpt_00000001.bin"},
    {{"ckpt_auto_missing_dir", "--steps 1 --resume auto --ckpt-dir " BAD "/ck_auto_missing",
      "does not exist yet: starting at step 0", 0},
     "rm -rf " BAD "/ck_auto_missing", "test -f " BAD "/ck_auto_missing/ckpt_00000001.bin"},
    // --import-hf: config.json's fields honoured (the architecture, rope_theta) or refused (one it does not read)
    {{"import_hf_llama_roundtrip", "--model llama-tiny --steps 1 --import-hf " BAD "/hf_llama",
      "imported Hugging Face weights", 0}, HF_LLAMA, NULL},
    {{"import_hf_llama_into_gpt2", "--steps 1 --import-hf " BAD "/hf_llama",
      "model_type \"llama\", but this run's architecture is gpt2 (add --arch llama", 1}, HF_LLAMA, NULL},
    {{"import_hf_rope_theta", "--model llama-tiny --rope-theta 500000 --import-hf " BAD "/hf_llama",
      "rope_theta is 10000.0, this model's 500000", 1}, HF_LLAMA, NULL},
    // every rank reads the file and meets the error: one line for the run (runtime/ckpt.h import_agree)
    {{"import_hf_rope_theta_tp2_one_line", "--model llama-tiny --tp 2 --rope-theta 500000 --import-hf " BAD "/hf_llama",
      "rope_theta is 10000.0, this model's 500000", 1}, HF_LLAMA, NULL},
    {{"import_llmc_garbage_dp2_one_line", "--dp 2 --import-llmc " BAD "/hf_llama/config.json", "truncated header", 1},
     HF_LLAMA, NULL},
    {{"import_hf_unknown_field", "--model llama-tiny --import-hf " BAD "/hf_llama_x",
      "field 'sliding_window' is not one this trainer reads", 1},
     HF_LLAMA " && rm -rf " BAD "/hf_llama_x && cp -r " BAD "/hf_llama " BAD "/hf_llama_x && sed -i "
     "'s/\"torch_dtype\"/\"sliding_window\": 4096, \"torch_dtype\"/' " BAD "/hf_llama_x/config.json", NULL},
    // --on-nan skip: a run whose every step is skipped saves nothing, so the good
    // checkpoint it resumed beside stays (and LATEST names it), and it exits 1: nothing trained
    {{"on_nan_skip_keeps_good_checkpoint",
      "--on-nan skip --steps 4 --ckpt-every 1 --ckpt-keep 1 --ckpt-dir " BAD "/skip_dir --resume " BAD
      "/ck_huge_qkvw/ckpt.bin",
      "every one of the 3 steps was skipped", 1},
     "rm -rf " BAD "/skip_dir && mkdir " BAD "/skip_dir && cp " BAD "/good/ckpt_00000001.bin " BAD "/good/LATEST " BAD
     "/skip_dir",
     "test -f " BAD "/skip_dir/ckpt_00000001.bin && grep -qx ckpt_00000001.bin " BAD "/skip_dir/LATEST && ! ls " BAD
     "/skip_dir/ckpt_0000000[234].bin"},
    // --resume auto without a manifest: past a newest file cut short, to the newest complete one
    {{"resume_auto_passes_truncated", "--steps 2 --resume auto --ckpt-dir " BAD "/ck_fallback",
      "resumed from " BAD "/ck_fallback/ckpt_00000001.bin", 0},
     "rm -rf " BAD "/ck_fallback && mkdir " BAD "/ck_fallback && cp " BAD "/good/ckpt_00000001.bin " BAD
     "/ck_fallback && head -c 5000 " BAD "/good/ckpt_00000001.bin > " BAD "/ck_fallback/ckpt_00000002.bin",
     NULL},
    // rotation deletes only this run's history: resumed from 2 of an older run's 1..6 (its 3 to 6 moved
    // aside: a run never replaces another's nor points LATEST behind them, faults_audit.c) with --ckpt-keep 2,
    // 2 and its own 3 and 4 stay, LATEST names 4, auto resumes it
    {{"rotation_keeps_this_runs_newest",
      "--steps 4 --lr 1e-3 --ckpt-every 1 --ckpt-keep 2 --ckpt-dir " BAD "/rot --resume " BAD "/rot/ckpt_00000002.bin",
      "ckpt_00000004.bin (step 4)", 0},
     "rm -rf " BAD "/rot && OMP_NUM_THREADS=1 ./train " FLAGS " --steps 6 --ckpt-every 1 --ckpt-keep 10 --ckpt-dir " BAD
     "/rot && rm " BAD "/rot/ckpt_0000000[3-6].bin",
     "(cd " BAD
     "/rot && ls ckpt_0000000[2-4].bin && grep -qx ckpt_00000004.bin LATEST) && OMP_NUM_THREADS=1 ./train " FLAGS
     " --steps 5 --ckpt-dir " BAD "/rot --resume auto | grep -q 'resumed from " BAD "/rot/ckpt_00000004.bin'"},
    // ... and never the checkpoint it resumed from or junk of higher steps (garbage, a copy whose magic is
    // damaged: not checkpoints, so the run is not refused for them); without LATEST, --resume auto passes
    // over both to this run's newest
    {{"rotation_spares_resumed_and_junk",
      "--steps 4 --ckpt-every 1 --ckpt-keep 1 --ckpt-dir " BAD "/rot_junk --resume " BAD "/rot_junk/ckpt_00000001.bin",
      "ckpt_00000004.bin (step 4)", 0},
     "rm -rf " BAD "/rot_junk && mkdir " BAD "/rot_junk && (cd " BAD
     "/rot_junk && cp ../good/ckpt_00000001.bin . && head -c 5000 "
     "/dev/urandom > ckpt_00000099.bin && cp ckpt_00000001.bin ckpt_00000050.bin && printf x | dd of=ckpt_00000050.bin "
     "bs=1 seek=0 "
     "conv=notrunc)",
     "(cd " BAD "/rot_junk && ls ckpt_00000001.bin ckpt_00000004.bin ckpt_00000050.bin ckpt_00000099.bin && ! ls "
                "ckpt_0000000[23].bin && "
     "grep -qx ckpt_00000004.bin LATEST && rm LATEST) && OMP_NUM_THREADS=1 ./train " FLAGS " --steps 5 --ckpt-dir " BAD
     "/rot_junk --resume auto | grep -q 'resumed from " BAD "/rot_junk/ckpt_00000004.bin'"},
    // the JSON log is JSON when a value is not finite: null, never nan or inf
    {{"json_log_nonfinite_as_null",
      "--on-nan skip --lr 10 --warmup 1 --grad-clip 0 --beta2 0 --steps 8 --log " BAD "/nan_log.jsonl", "skipped:", 0},
     NULL, "grep -q null " BAD "/nan_log.jsonl && ! grep -Eq ':[-+]?(nan|inf)' " BAD "/nan_log.jsonl"},
    // --on-nan stop under a layout: every rank holds the world's loss and norm and stops at the same step; one line
    // for the run (each of the 4 ranks printed its own)
    {{"nan_stop_one_line_tp2_pp2", "--on-nan stop --lr 10 --warmup 1 --grad-clip 0 --beta2 0 --steps 8 --tp 2 --pp 2",
      "is not finite (--on-nan stop)", 1},
     NULL, NULL},
    // long paths are whole: every file where its name says
    {{"ckpt_dir_1028_chars", long_ckpt_args, "ckpt_00000002.bin (step 2)", 0}, long_ckpt_setup, long_ckpt_check},
    {{"log_599_chars_with_rank_logs", log599_args, "measured:", 0}, NULL, log599_check},
    // outputs at start-up: what is not a regular file is never replaced, an input never overwritten
    {{"trace_onto_fifo", "--steps 1000000 --trace " BAD "/out_fifo", "exists and is a FIFO", 1},
     FIFO_AT(BAD "/out_fifo"), "test -p " BAD "/out_fifo"},
    {{"export_onto_fifo", "--steps 1000000 --export-llmc " BAD "/out_fifo", "exists and is a FIFO", 1},
     FIFO_AT(BAD "/out_fifo"), "test -p " BAD "/out_fifo"},
    {{"export_onto_symlink", "--steps 1000000 --export-llmc " BAD "/out_link", "exists and is a symbolic link", 1},
     "ln -sfn a_file " BAD "/out_link", "test -L " BAD "/out_link"},
    {{"log_onto_fifo", "--steps 1000000 --log " BAD "/out_fifo", "exists and is a FIFO", 1},
     FIFO_AT(BAD "/out_fifo"), "test -p " BAD "/out_fifo"},
    {{"ckpt_dir_fifo_latest", "--steps 1000000 --ckpt-dir " BAD "/ck_fifo_out", "LATEST: exists and is a FIFO", 1},
     "mkdir -p " BAD "/ck_fifo_out && " FIFO_AT(BAD "/ck_fifo_out/LATEST"), "test -p " BAD "/ck_fifo_out/LATEST"},
    {{"ckpt_dir_dir_at_ckpt_name", "--steps 1000000 --ckpt-every 1 --ckpt-dir " BAD "/ck_dir_out",
      "/ck_dir_out/ckpt_00000001.bin is a directory", 1},
     "mkdir -p " BAD "/ck_dir_out/ckpt_00000001.bin", "test -d " BAD "/ck_dir_out/ckpt_00000001.bin"},
    {{"log_is_the_data", "--steps 1000000 --data " BAD "/text_copy.txt --log " BAD "/text_copy.txt",
      "is a file this run reads", 1},
     "cp " BAD "/text_ok.txt " BAD "/text_copy.txt",
     "cmp -s " BAD "/text_ok.txt " BAD "/text_copy.txt"},
// every write of a log, trace or checkpoint is checked: a file-size limit makes one
// fail mid-run, as a full disk would (PMIx's shared-memory store would not start under
// the limit: PMIX_MCA_gds=hash keeps it in memory; sh's ulimit -f counts 512-byte
// blocks, and the run's own output must fit under it)
#define FILE_LIMIT_KB(n) "export PMIX_MCA_gds=hash; trap '' XFSZ; ulimit -f " #n
    {{"log_write_fails", "--steps 40 --global-batch 8 --log " BAD "/big_log.jsonl",
      "--log " BAD "/big_log.jsonl: write failed", 1},
     FILE_LIMIT_KB(8),
     NULL},
    {{"trace_write_fails", "--steps 3 --micro-batch 1 --trace " BAD "/big_trace.json",
      "--trace: write to " BAD "/big_trace.json.tmp.", 1},
     FILE_LIMIT_KB(8),
     "! test -e " BAD "/big_trace.json"},
    {{"ckpt_write_fails", "--steps 2 --ckpt-dir " BAD "/ck_small", "checkpoint: write to", 1},
     "rm -rf " BAD "/ck_small; " FILE_LIMIT_KB(64),
     "! ls " BAD "/ck_small/ckpt_*.bin"},
};
#undef FIFO_AT
#undef HF_LLAMA
#undef FILE_LIMIT_KB

static void suite_bad_inputs(void) {
    if (!bad_inputs_setup()) return;
    char cmd[2048];
    int rc;
    int n = sizeof(BAD_CASES) / sizeof(BAD_CASES[0]), n_runs = sizeof(BAD_RUNS) / sizeof(BAD_RUNS[0]);
    double t0 = now_s();
    for (int i = 0; i < n; i++) bad_run("./train", &BAD_CASES[i], NULL, NULL);
    for (int i = 0; i < n_runs; i++) bad_run("./train", &BAD_RUNS[i].k, BAD_RUNS[i].setup, BAD_RUNS[i].check);
    if (!bad_filter) ckpt_dir_lock_test("./train"), nompi_build();  // a filter: its cases alone
    printf("(bad inputs through ./train: %d cases, %.1f s)\n", n + n_runs + 2, now_s() - t0);
    if (!build_asan()) {
        check(0, "asan_build", "mpicc -fsanitize=address,undefined failed (see " ROOT "/asan_build.txt)");
        return;
    }
    t0 = now_s();
    int checks = n_pass + n_fail;
    for (int i = 0; i < n; i++) bad_run("./train_asan", &BAD_CASES[i], NULL, NULL);
    for (int i = 0; i < n_runs; i++) bad_run("./train_asan", &BAD_RUNS[i].k, BAD_RUNS[i].setup, BAD_RUNS[i].check);
    if (bad_filter) return;
    ckpt_dir_lock_test("./train_asan");
    // and a clean run under the sanitizers: train a step, checkpoint, resume 1 more
    char out[300];
    snprintf(out, sizeof(out), BAD "/asan_clean.txt");
    snprintf(cmd, sizeof(cmd),
             "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 ./train_asan " FLAGS " --steps 1 --ckpt-dir " BAD
             "/asan_ck && ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 ./train_asan " FLAGS
             " --steps 2 --ckpt-dir " BAD "/asan_ck --resume auto");
    rc = run_to_file(cmd, out);
    int clean = !file_has(out, "Sanitizer") && !file_has(out, "runtime error:");
    check(rc == 0 && clean, "asan_clean_train_and_resume", "exit %d, %s", rc,
          clean ? "no sanitizer report" : "SANITIZER REPORT in " BAD "/asan_clean.txt");
    printf("(bad inputs through ./train_asan: %d cases, %.1f s)\n", n_pass + n_fail - checks, now_s() - t0);
}
