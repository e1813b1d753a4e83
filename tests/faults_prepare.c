// tests/faults_prepare.c: test_faults' cases of data/prepare.py (issue 39): temporaries created
// exclusively (a symbolic link planted at the old fixed name is not followed) and never left (a
// SIGTERM too), an output that is the input refused (standard output too), its own stale shards of
// an earlier run removed (and nothing else), outputs replaced together at the end (a full disk half
// way leaves the earlier ones), documents cut at any blank line (CRLF, a lone CR, U+2029, a line of
// a no-break space or form feed), bytes that are not UTF-8 reported, one "error:" line and exit 1
// for every failure (never a traceback; a bad flag; standard output full), --val-frac 0 as its
// printed command says, an empty prefix refused. GPT-2 cases use a small BPE of the 256 bytes and 4
// merges written here (--bpe-file: offline); without tiktoken they are skipped, as in
// tests/test_gpt2_data.py. Included by tests/test_faults.c after faults_files.c; not built alone.

#define PREP BAD "/prep"
#define PREPARE "python3 data/prepare.py "
#define BPE_GPT2 "--tokenizer gpt2 --bpe-file " PREP "/mini.tiktoken "

// name, the arguments of prepare.py, the words of its one error line (or of its output when rc
// is 0), rc, a set-up and a check (shell, may be NULL); gpt2: needs tiktoken.
typedef struct { const char* name; const char* args; const char* needle; int rc; const char* setup, *check; int gpt2; }
PrepCase;

static const PrepCase PREP_CASES[] = {
    // a symbolic link where 72eae09 wrote its fixed temporary name: its target stays as it was
    {"symlink_at_old_temp_name", PREP "/docs.txt " PREP "/s", "train on them", 0,
     "echo precious > " PREP "/victim && ln -sfn victim " PREP "/s_val_000.bin.tmp && ln -sfn victim " PREP
     "/s_train_000.bin.tmp",
     "grep -qx precious " PREP "/victim && test -L " PREP "/s_val_000.bin.tmp", 0},
    {"output_is_the_input", PREP "/w_train_000.bin " PREP "/w", "is the input text", 1,
     "cp " PREP "/docs.txt " PREP "/w_train_000.bin", "cmp -s " PREP "/docs.txt " PREP "/w_train_000.bin", 0},
    // a rerun with fewer shards removes the earlier run's extra ones, and only names it makes
    {"stale_shards_removed", "--shard-tokens 20 " PREP "/docs.txt " PREP "/st", "removed " PREP "/st_train_002.bin", 0,
     PREPARE "--shard-tokens 5 " PREP "/docs.txt " PREP "/st && touch " PREP "/st_train_1.bin " PREP
     "/st_train_009.bin.bak " PREP "/st_train_notes.txt",
     "cd " PREP " && ls st_train_000.bin st_train_001.bin st_train_1.bin st_train_009.bin.bak st_train_notes.txt "
     "&& ! ls st_train_00[2-9].bin",
     0},
    {"val_frac_0_as_printed", "--val-frac 0 " PREP "/docs.txt " PREP "/v0", "--data '" PREP "/v0_train_*.bin'\n", 0,
     "touch " PREP "/v0_val_000.bin", "! test -e " PREP "/v0_val_000.bin", 0},
    {"empty_prefix", PREP "/docs.txt ''", "has no file name part", 1, NULL, NULL, 0},
    {"unwritable_prefix", PREP "/docs.txt /proc/prep_x", "/proc/prep_x", 1, NULL, NULL, 0},
    // GPT-2's BPE: documents at CRLF blank lines and blank lines of spaces (4 of them), bytes not UTF-8
    {"crlf_blank_lines_split_documents", BPE_GPT2 "--val-frac 0 " PREP "/docs.txt " PREP "/d", "train on them", 0, NULL,
     "python3 -c \"import array,sys; t=array.array('H',open('" PREP "/d_train_000.bin','rb').read()[1024:]); "
     "sys.exit(t.count(260) != 4)\"",
     1},
    {"not_utf8_reported", BPE_GPT2 PREP "/bin.txt " PREP "/b", "3 bytes are not UTF-8 (the first at byte offset 2)",
     1, NULL, NULL, 1},
    {"bpe_file_empty", "--tokenizer gpt2 --bpe-file " PREP "/empty.tiktoken " PREP "/docs.txt " PREP "/e",
     "no ranks in it", 1, NULL, NULL, 1},
    {"bpe_file_malformed", "--tokenizer gpt2 --bpe-file " PREP "/docs.txt " PREP "/docs.txt " PREP "/e",
     "not a tiktoken ranks file", 1, NULL, NULL, 1},
    {"bpe_file_missing_bytes", "--tokenizer gpt2 --bpe-file " PREP "/nobyte.tiktoken " PREP "/docs.txt " PREP "/e",
     "1 of the 256 single-byte tokens are missing", 1, NULL, NULL, 1},
    // a ranks file past the cap (read whole into memory: 1 GB of zeros would be), a tar whose member of that name
    // is a directory (tarfile gave None: an AttributeError traceback)
    {"bpe_file_past_cap", "--tokenizer gpt2 --bpe-file " PREP "/huge.tiktoken " PREP "/docs.txt " PREP "/e",
     "--bpe-file " PREP "/huge.tiktoken: larger than 64 MiB: not a ranks file", 1,
     "truncate -s 65M " PREP "/huge.tiktoken", "rm -f " PREP "/huge.tiktoken", 1},
    {"bpe_file_tar_member_a_dir", "--tokenizer gpt2 --bpe-file " PREP "/dir.tar.gz " PREP "/docs.txt " PREP "/e",
     "its ws/whisper/assets/gpt2.tiktoken is not a regular file, not a ranks file", 1,
     "rm -rf " PREP "/ws && mkdir -p " PREP "/ws/whisper/assets/gpt2.tiktoken && tar -czf " PREP "/dir.tar.gz -C " PREP
     " ws", NULL, 1},
    {"token_past_255_bytes_no_temp", "--tokenizer gpt2 --bpe-file " PREP "/long.tiktoken " PREP "/docs.txt " PREP "/l",
     "token 260 is 300 bytes", 1, NULL, "! ls " PREP "/l_*", 1},
    // issue 39's classes in variants the first round did not try (a "sh -c"/"bash -c"/"unshare" case is the
    // whole command). Blank lines of other line ends: a lone CR (3 documents); U+2029, a line of a no-break
    // space, a line of a form feed (4)
    {"cr_only_blank_lines_split_documents", BPE_GPT2 "--val-frac 0 " PREP "/cr.txt " PREP "/cr", "train on them", 0,
     NULL,
     "python3 -c \"import array,sys; t=array.array('H',open('" PREP "/cr_train_000.bin','rb').read()[1024:]); "
     "sys.exit(t.count(260) != 3)\"",
     1},
    {"unicode_blank_lines_split_documents", BPE_GPT2 "--val-frac 0 " PREP "/uni.txt " PREP "/un", "train on them", 0,
     NULL,
     "python3 -c \"import array,sys; t=array.array('H',open('" PREP "/un_train_000.bin','rb').read()[1024:]); "
     "sys.exit(t.count(260) != 4)\"",
     1},
    // a stop while the shards are written: no temporary, nothing half replaced (SIGTERM left its temporary)
    {"sigterm_while_writing", "bash -c '" PREPARE "--shard-tokens 1000000 " PREP "/big.bin " PREP "/t & p=$!; "
     "until ls " PREP "/t_*.tmp.* > /dev/null 2>&1; do sleep 0.01; done; kill -TERM $p; wait $p; echo exit $?'",
     "exit 143", 0, "head -c 30000000 /dev/urandom > " PREP "/big.bin", "! ls " PREP "/t_*", 0},
    // stops at random moments of a run of many small shards: none leaves a temporary (a SIGTERM between a
    // temporary's creation and its registration left it: 9 of 40 such stops at 7c96cda)
    {"sigterm_at_random_moments",
     "bash -c 'n=0; for i in $(seq 20); do rm -rf " PREP "/rs && mkdir " PREP "/rs; " PREPARE "--shard-tokens 500 "
     PREP "/small.bin " PREP "/rs/t > /dev/null 2>&1 & p=$!; sleep 0.$((RANDOM % 30 + 10)); kill -TERM $p; wait $p; "
     "ls " PREP "/rs/*.tmp.* > /dev/null 2>&1 && n=$((n + 1)); done; echo temporaries left by $n of 20 stops'",
     "temporaries left by 0 of 20 stops", 0, "head -c 400000 /dev/urandom > " PREP "/small.bin", NULL, 0},
    // a full disk half way through a rerun: the earlier run's shards stay as they were (they were replaced
    // one by one, so new and old ones were mixed)
    {"full_disk_keeps_earlier_shards",
     "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs " PREP "/full && " PREPARE "--shard-tokens 4000 " PREP
     "/t1.txt " PREP "/full/s > /dev/null && cp " PREP "/full/s_* " PREP "/saved/ && " PREPARE "--shard-tokens 4000 "
     PREP "/t2.txt " PREP "/full/s; r=$?; cd " PREP "/saved && for f in s_*; do cmp -s $f ../full/$f || exit 9; done; "
     "exit $r'",
     "No space left on device", 1,
     "mkdir -p " PREP "/full " PREP "/saved && head -c 10000 " PREP "/big.bin > " PREP "/t1.txt && tail -c 16000 " PREP
     "/big.bin > " PREP "/t2.txt",
     NULL, 0},
    // standard output: full (no outputs, not exit 0), its reader gone (exit 141, quietly), a file of the run
    {"stdout_full_writes_nothing", PREP "/docs.txt " PREP "/f > /dev/full", "standard output: write failed", 1, NULL,
     "! ls " PREP "/f_*", 0},
    {"help_into_full_device", "--help > /dev/full", "standard output: write failed", 1, NULL, NULL, 0},
    {"stdout_reader_gone", "bash -c '" PREPARE PREP "/docs.txt " PREP "/g | (exec <&-); echo exit ${PIPESTATUS[0]}'",
     "exit 141", 0, NULL, NULL, 0},
    {"stdout_appends_to_input", PREP "/in.txt " PREP "/i >> " PREP "/in.txt",
     "standard output is the input text " PREP "/in.txt", 1, "cp " PREP "/docs.txt " PREP "/in.txt",
     "cmp -s " PREP "/docs.txt " PREP "/in.txt", 0},
    // odd arguments: a directory as the text, a bad number (argparse's usage block and exit 2)
    {"directory_as_input", PREP " " PREP "/x", "is a directory: pass a text file", 1, NULL, NULL, 0},
    {"bad_number_one_line", "--shard-tokens 1e3 " PREP "/docs.txt " PREP "/x", "invalid int value: '1e3'", 1, NULL,
     NULL, 0},
    // a shard a token: more shards than three digits name (_train_1000.bin would sort before _101): nothing written
    {"too_many_shards", "--val-frac 0 --shard-tokens 1 " PREP "/many.txt " PREP "/m", "makes 1001 train shards", 1,
     "head -c 1001 /dev/zero | tr '\\0' a > " PREP "/many.txt", "! ls " PREP "/m_*", 0},
};

static void suite_prepare(void) {
    sh("rm -rf " PREP " && mkdir -p " PREP);
    sh("printf 'the cat\\r\\n\\r\\nthe dog\\r\\n \\r\\nthird\\n\\n\\nfourth\\n' > " PREP "/docs.txt && "
       "printf 'ok\\377\\376 text \\303' > " PREP "/bin.txt && : > " PREP "/empty.tiktoken && "
       "printf 'one\\r\\rtwo\\r \\rthree\\r' > " PREP "/cr.txt && "
       "printf 'a\\342\\200\\251b\\n\\302\\240\\nc\\n\\014\\nd' > " PREP "/uni.txt");
    sh("python3 -c \"import base64; t=[bytes([b]) for b in range(256)]+[b'th',b'the',b' t',b'\\n\\n']; "
       "w=lambda p,t: open(p,'w').write(''.join('%%s %%d\\n' %% (base64.b64encode(x).decode(),i) for i,x in "
       "enumerate(t))); w('" PREP "/mini.tiktoken',t); w('" PREP "/nobyte.tiktoken',t[1:]); w('" PREP
       "/long.tiktoken',t+[b'x'*300])\"");
    int have_tiktoken = sh("python3 -c 'import tiktoken' > /dev/null 2>&1") == 0;
    if (!have_tiktoken)
        printf("SKIP prepare's GPT-2 cases: tiktoken is not installed (pip install -r requirements.txt)\n");
    for (size_t i = 0; i < sizeof(PREP_CASES) / sizeof(PREP_CASES[0]); i++) {
        const PrepCase* k = &PREP_CASES[i];
        char name[96], out[256], cmd[4096];
        snprintf(name, sizeof(name), "prepare_%s", k->name);
        if ((bad_filter && !strstr(name, bad_filter)) || (k->gpt2 && !have_tiktoken)) continue;
        snprintf(out, sizeof(out), PREP "/out_%s.txt", k->name);
        if (k->setup) sh("{ %s; } > /dev/null 2>&1", k->setup);
        int whole = !strncmp(k->args, "sh -c", 5) || !strncmp(k->args, "bash -c", 7) || !strncmp(k->args, "unshare", 7);
        snprintf(cmd, sizeof(cmd), "timeout -s KILL 60 %s%s", whole ? "" : PREPARE, k->args);
        int rc = run_to_file(cmd, out);
        char line[4096], first_error[4096] = "";
        int n_error = 0, traceback = 0, found = 0;
        FILE* f = fopen(out, "r");
        while (f && fgets(line, sizeof(line), f)) {
            if (!strncmp(line, "error:", 6) && !n_error++) snprintf(first_error, sizeof(first_error), "%s", line);
            traceback |= strstr(line, "Traceback") != NULL;
            found |= strstr(line, k->needle) != NULL;
        }
        if (f) fclose(f);
        int named = k->rc ? strstr(first_error, k->needle) != NULL : found;
        int temps = sh("ls " PREP "/*.tmp.prepare-* > /dev/null 2>&1") == 0;
        int checked = !k->check || sh("{ %s; } > /dev/null 2>&1", k->check) == 0;
        check(rc == k->rc && n_error == (k->rc ? 1 : 0) && named && !traceback && !temps && checked, name,
              "exit %d, %d error line%s%s%s%s%s", rc, n_error, n_error == 1 ? "" : "s",
              named ? "" : " (needle missing)", traceback ? ", a TRACEBACK" : "", temps ? ", a temporary left" : "",
              checked ? "" : ", check failed");
    }
}

#undef PREP
#undef PREPARE
#undef BPE_GPT2
