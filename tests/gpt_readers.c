// tests/gpt_readers.c: test_gpt's readers (escaping, files, token shards, text, tokenizer,
// checkpoints, llm.c weights) on good and corrupt files, and the shards of simulated layouts.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// 6. Readers on good and corrupt files.

static void write_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) fail("test: cannot write %s", path);
}
// An llm.c shard: 256 int32 header (magic, version, count), uint16 tokens; n_write tokens written.
static void write_shard(const char* path, int magic, int version, int count, const uint16_t* tok, size_t n_write,
                        size_t header_bytes) {
    size_t n = 1024 + 2 * n_write;
    char* buf = (char*)xcalloc(n, 1);
    int32_t h[256] = {0};
    h[0] = magic, h[1] = version, h[2] = count;
    memcpy(buf, h, 1024);
    memcpy(buf + 1024, tok, 2 * n_write);
    write_file(path, buf, header_bytes < 1024 ? header_bytes : n);
    free(buf);
}

typedef struct { const char* path; int vocab; } OpenCtx;
static void stream_open_child(void* p) {
    OpenCtx* c = (OpenCtx*)p;
    TokenStream ts;
    stream_open(&ts, c->path, c->vocab, "--data");
}
static void tokenizer_child(void* p) {
    Tokenizer tk;
    tokenizer_load(&tk, ((OpenCtx*)p)->path, ((OpenCtx*)p)->vocab);
}

// The bytes of ids decoded by tk, escaped for printing with newlines kept, into out.
static void decode_shown(const Tokenizer* tk, const int* ids, int n, char* out, size_t cap) {
    Bytes text = {NULL, 0, 0};
    for (int i = 0; i < n; i++) tokenizer_decode(tk, ids[i], &text);
    escape_text(out, cap, text.bytes, text.n, 1);
    free(text.bytes);
}

// escape_text: what a terminal may see as it is, and what becomes \xNN.
static void test_escape(void) {
    struct { const char* in; int keep_lines; const char* want; const char* what;
    } cases[] = {
        {"plain text, 12 + 7.", 0, "plain text, 12 + 7.", "printable ASCII as it is"},
        {"red \x1b[31mX\x1b[0m", 1, "red \\x1b[31mX\\x1b[0m", "ESC (an escape sequence) escaped"},
        {"a\nb\tc\rd", 1, "a\nb\tc\\x0dd", "newline and tab kept in samples, CR escaped"},
        {"a\nb\tc", 0, "a\\x0ab\\x09c", "newline and tab escaped in one-line messages"},
        {"caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x99\x82", 0, "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x99\x82",
         "well-formed UTF-8 (2, 3, 4 bytes) as it is"},
        {"\xc2\x9b"
         "2J",
         0, "\\xc2\\x9b2J", "C1 control (CSI, U+009B) escaped"},
        {"\xff\xfe", 0, "\\xff\\xfe", "bytes that are never UTF-8 escaped"},
        {"\xc0\xaf", 0, "\\xc0\\xaf", "overlong form escaped"},
        {"\xed\xa0\x80", 0, "\\xed\\xa0\\x80", "surrogate escaped"},
        {"\x80x", 0, "\\x80x", "stray continuation byte escaped"},
        {"ok\xe6\xbc", 0, "ok\\xe6\\xbc", "sequence cut at the end escaped"},
        {"\x7f", 0, "\\x7f", "DEL escaped"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[256], name[160];
        escape_text(out, sizeof(out), cases[i].in, strlen(cases[i].in), cases[i].keep_lines);
        snprintf(name, sizeof(name), "escape/%s", cases[i].what);
        check(!strcmp(out, cases[i].want), name, "got \"%s\"", out);
    }
    char small[8];
    size_t n = escape_text(small, sizeof(small), "\x01\x02\x03", 3, 0);
    check(n < sizeof(small) && small[n] == 0, "escape/output cut to its buffer, terminated", "%zu bytes", n);
}

// files.h: inputs only from regular files, outputs never over anything else, paths that
// do not fit refused.
typedef struct { const char* path; const char* flag; } OutputCtx;
static void output_check_child(void* p) { output_check(((OutputCtx*)p)->path, ((OutputCtx*)p)->flag); }
static void atomic_child(void* p) {
    AtomicFile f;
    atomic_open(&f, ((OutputCtx*)p)->path, ((OutputCtx*)p)->flag);
    atomic_write(&f, "x", 1);
    atomic_commit(&f);
}
static void long_path_child(void* p) {
    char buf[PATH_CAP], name[PATH_CAP + 10];
    memset(name, 'a', sizeof(name) - 1), name[sizeof(name) - 1] = 0;
    path_format(buf, "--ckpt-dir", "%s/LATEST", name);
}

static void test_files(void) {
    char fifo[512], dir[512], file[512], why[256];
    snprintf(fifo, sizeof(fifo), "%s/a_fifo", tmp_dir);
    snprintf(dir, sizeof(dir), "%s/a_dir", tmp_dir);
    snprintf(file, sizeof(file), "%s/a_file", tmp_dir);
    mkfifo(fifo, 0644), mkdir(dir, 0755);
    write_file(file, "x", 1);
    FILE* f = input_open(fifo, why, sizeof(why), NULL);
    check(!f && !strcmp(why, "not a regular file (a FIFO)"), "files/input: a FIFO is refused without blocking", "%s",
          why);
    f = input_open(dir, why, sizeof(why), NULL);
    check(!f && !strcmp(why, "not a regular file (a directory)"), "files/input: a directory is refused", "%s", why);
    f = input_open("/dev/zero", why, sizeof(why), NULL);
    check(!f && !strcmp(why, "not a regular file (a character device)"), "files/input: a device is refused", "%s", why);
    FileId id;
    f = input_open(file, why, sizeof(why), &id);
    check(f && fgetc(f) == 'x', "files/input: a regular file opens", NULL);
    if (f) fclose(f);
    OutputCtx of = {fifo, "--trace"}, od = {dir, "--log"};
    check_fails("files/output at a FIFO refused", output_check_child, &of, "--trace");
    check_fails("files/output at a directory refused", output_check_child, &od, "exists and is a directory");
    check_fails("files/atomic replacement of a FIFO refused", atomic_child, &of, "exists and is a FIFO");
    struct stat st;
    check(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "files/the FIFO is still a FIFO", NULL);
    OutputCtx ofile = {file, "--export-llmc"};
    run_child(atomic_child, &ofile, why, sizeof(why));
    check(stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 1, "files/atomic replacement of a regular file",
          NULL);
    check_fails("files/a path longer than PATH_CAP refused, not cut", long_path_child, NULL, "--ckpt-dir: path of");
}

// The tokenizer file (llm.c v2): good, and each kind of corrupt file refused.
static void test_tokenizer_reader(void) {
    char path[512], path2[512], paths[8][512], name[160];
    // tokenizer: v2 with 3 pieces, eot 2
    uint32_t h[256] = {0};
    h[0] = TOKENIZER_MAGIC, h[1] = 2, h[2] = 3, h[3] = 2;
    char body[1024 + 64];
    memcpy(body, h, 1024);
    size_t n = 1024;
    const char* pieces[] = {"a", "bc", "<|eot|>"};
    for (int i = 0; i < 3; i++)
        body[n++] = (char)strlen(pieces[i]), memcpy(body + n, pieces[i], strlen(pieces[i])), n += strlen(pieces[i]);
    snprintf(path, sizeof(path), "%s/tok.bin", tmp_dir);
    write_file(path, body, n);
    Tokenizer tk;
    tokenizer_load(&tk, path, 3);
    char out[64] = "";
    int ids[3] = {0, 1, 2};
    decode_shown(&tk, ids, 3, out, sizeof(out));
    check(tk.vocab == 3 && tk.eot == 2 && !strcmp(tk.piece[1], "bc") && !strcmp(out, "abc"),
          "tokenizer/v2 good: pieces, eot, decoding skips eot", "vocab %d eot %d decoded \"%s\"", tk.vocab, tk.eot,
          out);
    OpenCtx cv = {path, 257};
    check_fails_in("tokenizer/of another vocabulary than the model's rejected", tokenizer_child, &cv, path,
                   "its vocab is 3 but the model's is 257");
    Tokenizer tb;
    tokenizer_load(&tb, NULL, 257);
    char out2[16] = "";
    int bytes[3] = {'h', 7, EOT_TOKEN};
    decode_shown(&tb, bytes, 3, out2, sizeof(out2));
    check(!tb.piece && !strcmp(out2, "h\\x07\n"),
          "tokenizer/none: byte-level decoding ('h', 7 shown as \\x07, eot as a newline)", "\"%s\"", out2);
    // a piece that is an escape sequence, and one that is not UTF-8
    const char* raw[] = {"\x1b[2J", "\xff", "<|eot|>"};
    n = 1024, h[2] = 3;
    memcpy(body, h, 1024);
    for (int i = 0; i < 3; i++)
        body[n++] = (char)strlen(raw[i]), memcpy(body + n, raw[i], strlen(raw[i])), n += strlen(raw[i]);
    snprintf(path2, sizeof(path2), "%s/tok_raw.bin", tmp_dir);
    write_file(path2, body, n);
    Tokenizer tr;
    tokenizer_load(&tr, path2, 3);
    decode_shown(&tr, ids, 3, out, sizeof(out));
    check(!strcmp(out, "\\x1b[2J\\xff"), "tokenizer/pieces with ESC and invalid UTF-8 printed escaped", "\"%s\"", out);
    h[3] = 7;  // eot outside the vocabulary
    memcpy(body, h, 1024);
    write_file(path2, body, n);
    OpenCtx ce7 = {path2, 3};
    check_fails_in("tokenizer/eot outside its vocabulary rejected", tokenizer_child, &ce7, path2,
                   "eot id 7 is outside its vocab of 3");
    h[3] = 2, n = 1024;
    memcpy(body, h, 1024);
    for (int i = 0; i < 3; i++)
        body[n++] = (char)strlen(pieces[i]), memcpy(body + n, pieces[i], strlen(pieces[i])), n += strlen(pieces[i]);
    struct { const char* file; size_t len; uint32_t magic, version; const char* want; const char* what; } tbad[] = {
        {"tok_magic.bin", n, 1234, 2, "bad magic 1234", "bad magic"},
        {"tok_header.bin", 500, TOKENIZER_MAGIC, 2, "truncated header", "truncated header"},
        {"tok_entry.bin", n - 3, TOKENIZER_MAGIC, 2, "truncated entry 2", "truncated entry"},
        {"tok_version.bin", n, TOKENIZER_MAGIC, 3, "unsupported version 3", "wrong version"},
    };
    for (size_t i = 0; i < sizeof(tbad) / sizeof(tbad[0]); i++) {
        ((uint32_t*)body)[0] = tbad[i].magic, ((uint32_t*)body)[1] = tbad[i].version;
        snprintf(paths[i], sizeof(paths[i]), "%s/%s", tmp_dir, tbad[i].file);
        write_file(paths[i], body, tbad[i].len);
        OpenCtx c = {paths[i], 3};
        snprintf(name, sizeof(name), "tokenizer/%s rejected", tbad[i].what);
        check_fails_in(name, tokenizer_child, &c, paths[i], tbad[i].want);
    }
    snprintf(path, sizeof(path), "%s/tok_missing.bin", tmp_dir);
    OpenCtx ctm = {path, 0};
    check_fails_in("tokenizer/missing file rejected", tokenizer_child, &ctm, path, "cannot open");
}

// An existing path is one file, glob characters in its name or not; a glob of text files is
// read as text; a glob of both kinds, or of nothing, is an error (test_data_readers' part).
static void test_data_globs(void) {
    char path[512], glob_spec[512];
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)((i * 37) % 257);
    snprintf(path, sizeof(path), "%s/notes[1].txt", tmp_dir);
    write_file(path, "bracketed", 9);
    TokenStream tl;
    stream_open(&tl, path, 257, "--data");
    check(tl.n_tokens == 9 && tl.tokens[0] == 'b' && tl.n_files == 1,
          "data/an existing path with [1] in its name is that file", "%zu tokens", tl.n_tokens);
    snprintf(path, sizeof(path), "%s/notes_a.txt", tmp_dir);
    write_file(path, "AB", 2);
    snprintf(path, sizeof(path), "%s/notes_b.txt", tmp_dir);
    write_file(path, "CD", 2);
    snprintf(glob_spec, sizeof(glob_spec), "%s/notes_*.txt", tmp_dir);
    TokenStream tx;
    stream_open(&tx, glob_spec, 257, "--data");
    check(tx.n_tokens == 4 && tx.tokens[0] == 'A' && tx.tokens[3] == 'D' && tx.n_files == 2,
          "data/a glob of text files: text, in name order", "%zu tokens", tx.n_tokens);
    snprintf(path, sizeof(path), "%s/mixed_a.bin", tmp_dir);
    write_shard(path, SHARD_MAGIC, 1, 100, tok, 100, 9999);
    snprintf(path, sizeof(path), "%s/mixed_b.txt", tmp_dir);
    write_file(path, "text", 4);
    snprintf(glob_spec, sizeof(glob_spec), "%s/mixed_*", tmp_dir);
    OpenCtx cmix = {glob_spec, 257};
    check_fails_in("data/a glob of shards and text rejected", stream_open_child, &cmix, glob_spec,
                   "matches both .bin shards and text files");
    snprintf(glob_spec, sizeof(glob_spec), "%s/none_*.bin", tmp_dir);
    OpenCtx cnone = {glob_spec, 257};
    check_fails_in("data/a glob that matches nothing rejected", stream_open_child, &cnone, glob_spec,
                   "no file matches");
}

static void test_data_readers(void) {
    char path[512], path2[512], glob_spec[512];
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)((i * 37) % 257);
    // good shard, and a glob of two shards read in name order
    snprintf(path, sizeof(path), "%s/shard_a.bin", tmp_dir);
    write_shard(path, SHARD_MAGIC, 1, 100, tok, 100, 9999);
    TokenStream ts;
    stream_open(&ts, path, 257, "--data");
    int same = ts.n_tokens == 100;
    for (int i = 0; same && i < 100; i++) same &= ts.tokens[i] == tok[i];
    check(same, "data/shard good: tokens read back", "%zu tokens", ts.n_tokens);
    snprintf(path2, sizeof(path2), "%s/shard_b.bin", tmp_dir);
    write_shard(path2, SHARD_MAGIC, 1, 10, tok + 90, 10, 9999);
    snprintf(glob_spec, sizeof(glob_spec), "%s/shard_*.bin", tmp_dir);
    TokenStream tg;
    stream_open(&tg, glob_spec, 257, "--data");
    check(tg.n_tokens == 110 && tg.tokens[100] == tok[90] && tg.tokens[109] == tok[99],
          "data/glob of two shards concatenated in order", "%zu tokens", tg.n_tokens);
    size_t nseq = stream_n_seq(&ts, 8);
    int in[3 * 8], tg_[3 * 8];
    stream_batch(&ts, 8, 5, 3, in, tg_, NULL);  // sequences 5, 6, 7 of the run: hashed start positions
    int ok_batch = nseq == 12;
    for (int b = 0; b < 3; b++) {
        size_t st = stream_seq_start(&ts, 8, 5 + b);
        ok_batch &= st + 8 < ts.n_tokens;
        for (int t = 0; t < 8; t++) ok_batch &= in[b * 8 + t] == tok[st + t] && tg_[b * 8 + t] == tok[st + t + 1];
    }
    check(ok_batch && stream_seq_start(&ts, 8, 5) != stream_seq_start(&ts, 8, 6),
          "data/stream_batch: hashed starts, targets shifted by one, in range", "n_seq %zu", nseq);
    // corrupt shards
    struct {
        const char* file;
        int magic, version, count;
        size_t n_write, header_bytes;
        int vocab;
        const char* want;
        const char* what;
    } bad[] = {
        {"magic.bin", 12345, 1, 100, 100, 9999, 257, "bad magic 12345", "wrong magic"},
        {"version.bin", SHARD_MAGIC, 2, 100, 100, 9999, 257, "unsupported version 2", "wrong version"},
        {"header.bin", SHARD_MAGIC, 1, 100, 100, 100, 257, "truncated header", "truncated header"},
        {"body.bin", SHARD_MAGIC, 1, 100, 50, 9999, 257, "header says 100 tokens", "truncated body"},
        {"count.bin", SHARD_MAGIC, 1, 0, 0, 9999, 257, "bad token count 0", "zero token count"},
        {"vocab.bin", SHARD_MAGIC, 1, 100, 100, 9999, 200, "token id 222 at position 6 is >= vocab 200",
         "token id >= vocab"},
    };
    char paths[8][512], name[160];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/%s", tmp_dir, bad[i].file);
        write_shard(paths[i], bad[i].magic, bad[i].version, bad[i].count, tok, bad[i].n_write, bad[i].header_bytes);
        OpenCtx c = {paths[i], bad[i].vocab};
        snprintf(name, sizeof(name), "data/shard %s rejected", bad[i].what);
        check_fails_in(name, stream_open_child, &c, paths[i], bad[i].want);
    }
    snprintf(path, sizeof(path), "%s/missing.bin", tmp_dir);
    OpenCtx cm = {path, 257};
    check_fails_in("data/shard missing file rejected", stream_open_child, &cm, path, "cannot open data file");
    test_data_globs();
    // text
    snprintf(path, sizeof(path), "%s/text.txt", tmp_dir);
    write_file(path, "hello\n\xff", 7);
    TokenStream tt;
    stream_open(&tt, path, 257, "--data");
    check(tt.n_tokens == 7 && tt.tokens[0] == 'h' && tt.tokens[5] == '\n' && tt.tokens[6] == 255,
          "data/txt read as bytes", "%zu tokens", tt.n_tokens);
    OpenCtx ct = {path, 100};
    check_fails_in("data/txt with vocab < 256 rejected", stream_open_child, &ct, path, "needs vocab >= 256");
    snprintf(path2, sizeof(path2), "%s/empty.txt", tmp_dir);
    write_file(path2, "", 0);
    OpenCtx ce = {path2, 257};
    check_fails_in("data/txt empty rejected", stream_open_child, &ce, path2, "is empty");
    snprintf(path2, sizeof(path2), "%s/missing.txt", tmp_dir);
    OpenCtx cx = {path2, 257};
    check_fails_in("data/txt missing file rejected", stream_open_child, &cx, path2, "cannot open");
    test_tokenizer_reader();
}

// --- checkpoints ---
static int count_tmp_files(const char* dir) {
    DIR* d = opendir(dir);
    int n = 0;
    struct dirent* e;
    while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    return n;
}
static int file_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }
static long long file_size(const char* path) { struct stat st; return stat(path, &st) ? -1 : (long long)st.st_size; }

static int resume_into(Model* m, const char* path) {
    m->args->resume = path;
    return ckpt_resume(&m->L, &m->P, &m->c, m->args, m->params, m->m_state, m->v_state, m->opt_lo, m->opt_hi);
}
typedef struct { Model* m; const char* path; } ResumeCtx;
static void resume_child(void* p) { ResumeCtx* c = (ResumeCtx*)p; resume_into(c->m, c->path); }
typedef struct { Model* m; int step; } SaveCtx;
static void save_child(void* p) {
    Model* m = ((SaveCtx*)p)->m;
    ckpt_save(&m->L, &m->P, &m->c, m->args, m->params, m->m_state, m->v_state, m->opt_lo, m->opt_hi,
              ((SaveCtx*)p)->step);
}
typedef struct { const char* dir; } FindCtx;
static void find_child(void* p) {
    char out[PATH_CAP];
    ckpt_find_latest(((FindCtx*)p)->dir, out, 0);
}

// Copy src to dst with the int32 at `word` replaced (word < 0: unchanged) and the file cut to `len` (-1: whole).
static void corrupt_copy(const char* src, const char* dst, int word, int32_t value, long long len, long long float_at,
                         float fvalue) {
    long long n = file_size(src);
    char* buf = (char*)xmalloc(n);
    FILE* f = fopen(src, "rb");
    if (!f || fread(buf, 1, n, f) != (size_t)n) fail("test: read %s", src);
    fclose(f);
    if (word >= 0) ((int32_t*)buf)[word] = value;
    if (float_at >= 0) memcpy(buf + float_at, &fvalue, 4);
    write_file(dst, buf, len >= 0 ? (size_t)len : (size_t)n);
    free(buf);
}

// --resume auto without LATEST falls back to the newest complete checkpoint; file names;
// nothing temporary left in dir (test_checkpoints' end: p7 is its step-7 file of want_size bytes).
static void test_checkpoint_fallback(const char* dir, const char* p7, long long want_size) {
    char found[PATH_CAP];
    // --resume auto without a manifest: past a newer file cut short, to the newest complete one
    char fb[512], fb_path[600], cut[600];
    snprintf(fb, sizeof(fb), "%s/fallback", tmp_dir);
    mkdir(fb, 0755);
    snprintf(fb_path, sizeof(fb_path), "%s/ckpt_00000007.bin", fb);
    corrupt_copy(p7, fb_path, -1, 0, -1, -1, 0);
    snprintf(cut, sizeof(cut), "%s/ckpt_00000009.bin", fb);
    corrupt_copy(p7, cut, CK_STEP, 9, want_size / 2, -1, 0);
    quiet_begin();
    ckpt_find_latest(fb, found, 1);
    quiet_end();
    check(!strcmp(found, fb_path), "ckpt/resume auto without LATEST passes over a truncated newer file", "chose %s",
          found);
    unlink(fb_path);
    FindCtx fc = {fb};
    check_fails("ckpt/resume auto with only a truncated file rejected", find_child, &fc, "no complete checkpoint in");
    check(ckpt_name_step("ckpt_00000012.bin") == 12 && ckpt_name_step("ckpt_123456789.bin") == 123456789 &&
              ckpt_name_step("ckpt_-0000001.bin") < 0 && ckpt_name_step("ckpt_+0000001.bin") < 0 &&
              ckpt_name_step("ckpt_1.bin") < 0 && ckpt_name_step("ckpt_00000001.bin.tmp") < 0 &&
              ckpt_name_step("ckpt_000000001.bin") < 0,
          "ckpt/file names: exactly ckpt_%08d.bin", NULL);
    check(count_tmp_files(dir) == 0, "ckpt/still no .tmp file after all of it", NULL);
}

// Corrupt copies of the checkpoint p7 (want_size bytes, n_full parameters) refused by a resume into
// `into`, each naming the file (test_checkpoints' part).
static void test_checkpoint_corrupt(Model* into, const char* p7, long long want_size, long long n_full) {
    char name[200];
    struct {
        const char* file; int word; int32_t value; long long len; long long float_at;
        const char* want; const char* what;
    } bad[] = {
        {"trunc.bin", -1, 0, want_size - 4, -1, "(truncated or corrupt)", "truncated body"},
        {"trunc_header.bin", -1, 0, 100, -1, "truncated header", "truncated header"},
        {"magic.bin", CK_MAGIC, 777, -1, -1, "bad magic 777", "bad magic"},
        {"version.bin", CK_VERSION, 4, -1, -1, "unsupported version 4 (this build reads 2 to 3: a newer build",
         "a newer version"},
        {"version1.bin", CK_VERSION, 1, -1, -1, "format version 1 has no checksums", "version 1 (no checksums)"},
        {"shape.bin", CK_D_MODEL, 32, -1, -1, "the header or the index does not match its checksum",
         "changed header field (d_model)"},
        {"step.bin", CK_STEP, 19, -1, -1, "the header or the index does not match its checksum", "changed step"},
        {"nfull.bin", CK_N_FULL_LO, 1000, -1, -1, "header's 1000 parameters", "wrong parameter count"},
        {"batch.bin", CK_GLOBAL_BATCH, 8, -1, -1, "does not match its checksum", "changed global batch"},
        {"nan.bin", -1, 0, -1, 1024 + 4 * (n_full + 3), "adam m of tensor wte do not match their checksum",
         "NaN in adam m"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char bp[600];
        snprintf(bp, sizeof(bp), "%s/%s", tmp_dir, bad[i].file);
        corrupt_copy(p7, bp, bad[i].word, bad[i].value, bad[i].len, bad[i].float_at, NAN);
        ResumeCtx rc = {into, bp};
        snprintf(name, sizeof(name), "ckpt/%s rejected", bad[i].what);
        check_fails_in(name, resume_child, &rc, bp, bad[i].want);
    }
}

// A copy of checkpoint src as format version 2 wrote it (no rope_theta), its header checksum
// recomputed as that writer would have.
static void write_version2_copy(const char* src, const char* dst) {
    long long n = file_size(src);
    uint8_t* b = (uint8_t*)xmalloc(n);
    FILE* f = fopen(src, "rb");
    if (!f || fread(b, 1, n, f) != (size_t)n) fail("test: read %s", src);
    fclose(f);
    int32_t* h = (int32_t*)b;
    h[CK_VERSION] = 2, h[CK_ROPE_THETA] = 0;
    const uint64_t* lens = (const uint64_t*)(b + 1024 + 12 * ckpt_header_n_full(h));
    uint64_t sum = ckpt_header_checksum(h, lens, lens + h[CK_N_TENSORS], h[CK_N_TENSORS]);
    h[CK_SUM_LO] = (int32_t)(uint32_t)sum, h[CK_SUM_HI] = (int32_t)(uint32_t)(sum >> 32);
    write_file(dst, b, (size_t)n);
    free(b);
}
static void resume_child_printing(void* p) {  // resume_child with its stdout on the captured stderr
    fflush(stdout);
    dup2(2, 1);
    resume_child(p);
}

// RoPE's base is part of the model: recorded in the checkpoint (format 3), a resume under
// another --rope-theta is refused; a format-2 file (which did not record it) still resumes,
// with a note that it takes this run's.
static void test_checkpoint_rope_theta(void) {
    char dir[512], path[600], v2[600], out[4096];
    snprintf(dir, sizeof(dir), "%s/ckpt_rope", tmp_dir);
    Model* a = new_model(LLAMA_TINY);
    a->args->ckpt_dir = dir;
    ckpt_dir_prepare(a->args);
    randomize_params(a, 12);
    quiet_begin();
    ckpt_save(&a->L, &a->P, &a->c, a->args, a->params, a->m_state, a->v_state, a->opt_lo, a->opt_hi, 3);
    quiet_end();
    snprintf(path, sizeof(path), "%s/ckpt_00000003.bin", dir);
    Model* b = new_model(LLAMA_TINY " --rope-theta 500000");
    ResumeCtx rb = {b, path};
    check_fails_in("ckpt/rope_theta of the checkpoint (10000) differs from the run's (500000): refused", resume_child,
                   &rb, path, "model rope_theta is 10000 in the checkpoint but 500000 here (set --rope-theta 10000)");
    snprintf(v2, sizeof(v2), "%s/version2.bin", tmp_dir);
    write_version2_copy(path, v2);
    ResumeCtx r2 = {b, v2};
    int st = run_child(resume_child_printing, &r2, out, sizeof(out));
    for (char* nl = strchr(out, '\n'); nl; nl = strchr(nl, '\n')) *nl = ' ';
    check(st == 0 && strstr(out, "note: checkpoint format 2 does not record rope_theta: resuming with this run's 500000"),
          "ckpt/format 2 (no rope_theta) resumes, with a note", "exit %d, \"%.300s\"", st, out);
    quiet_begin();
    int step = resume_into(b, v2);
    quiet_end();
    check(step == 3 && !memcmp(a->params, b->params, sizeof(float) * a->P.n_local), "ckpt/format 2 read whole",
          "step %d", step);
}

static void test_checkpoints(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/ckpt", tmp_dir);
    Model* a = new_model(GPT2_TINY);
    a->args->ckpt_dir = dir, a->args->ckpt_keep = 2;
    ckpt_dir_prepare(a->args);  // at start-up: creates the directory
    randomize_params(a, 11);
    size_t no = a->opt_hi - a->opt_lo;
    for (size_t i = 0; i < no; i++)
        a->m_state[i] = 0.01f * rng_normal(&test_rng), a->v_state[i] = 1e-4f * fabsf(rng_normal(&test_rng));
    quiet_begin();
    ckpt_save(&a->L, &a->P, &a->c, a->args, a->params, a->m_state, a->v_state, a->opt_lo, a->opt_hi, 5);
    quiet_end();
    snprintf(path, sizeof(path), "%s/ckpt_00000005.bin", dir);
    long long want_size = ckpt_file_bytes(a->P.n_full, a->P.n);
    check(file_size(path) == want_size, "ckpt/save writes ckpt_00000005.bin of 1024 + 3*4*n_full + 32*n_tensors bytes",
          "%lld vs %lld", file_size(path), want_size);
    char latest[600], line[256] = "";
    snprintf(latest, sizeof(latest), "%s/LATEST", dir);
    FILE* f = fopen(latest, "r");
    if (f) { if (!fgets(line, sizeof(line), f)) line[0] = 0; fclose(f); }
    check(!strcmp(line, "ckpt_00000005.bin\n"), "ckpt/LATEST names the new checkpoint", "\"%.*s\"",
          (int)strcspn(line, "\n"), line);
    check(count_tmp_files(dir) == 0, "ckpt/no .tmp file left behind", NULL);
    // resume into a fresh model (other seed): identical params and AdamW state
    Model* b = new_model(GPT2_TINY " --seed 99");
    b->c.seed = a->c.seed;  // the header records the seed; the shape is what must match
    quiet_begin();
    int step = resume_into(b, path);
    quiet_end();
    check(step == 5 && !memcmp(a->params, b->params, sizeof(float) * a->P.n_local) &&
              !memcmp(a->m_state, b->m_state, sizeof(float) * no) &&
              !memcmp(a->v_state, b->v_state, sizeof(float) * no),
          "ckpt/resume: step, params, m and v identical", "step %d", step);
    Model* c = new_model(GPT2_TINY);
    char found[PATH_CAP];
    ckpt_find_latest(dir, found, 0);
    quiet_begin();
    step = resume_into(c, found);
    quiet_end();
    check(step == 5 && !memcmp(a->params, c->params, sizeof(float) * a->P.n_local), "ckpt/resume auto via LATEST",
          "step %d", step);
    // rotation: keep the newest 2
    quiet_begin();
    for (int s = 6; s <= 7; s++)
        ckpt_save(&a->L, &a->P, &a->c, a->args, a->params, a->m_state, a->v_state, a->opt_lo, a->opt_hi, s);
    quiet_end();
    char p6[600], p7[600];
    snprintf(p6, sizeof(p6), "%s/ckpt_00000006.bin", dir), snprintf(p7, sizeof(p7), "%s/ckpt_00000007.bin", dir);
    check(!file_exists(path) && file_exists(p6) && file_exists(p7) && count_tmp_files(dir) == 0,
          "ckpt/--ckpt-keep 2 keeps the newest two, no .tmp", NULL);
    // corrupt checkpoints are rejected, naming the file
    long long n_full = (long long)a->P.n_full;
    test_checkpoint_corrupt(b, p7, want_size, n_full);
    // a checkpoint of another shape (3 layers) into this model
    Model* d =
        new_model("--model tiny --n-layer 3 --n-head 2 --d-model 16 --seq-len 8 --micro-batch 2 --global-batch 4");
    ResumeCtx rd = {d, p7};
    check_fails_in("ckpt/checkpoint of a 2-layer model into a 3-layer one rejected", resume_child, &rd, p7,
                   "n_layer is 2 in the checkpoint but 3 here");
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/nope.bin", dir);
    ResumeCtx rm = {b, missing};
    check_fails_in("ckpt/missing file rejected", resume_child, &rm, missing, "cannot open");
    // values: a negative AdamW v is no state (v is a mean of squares); a state that is not
    // finite is never saved, and the checkpoints on disk stay
    char bv[600];
    snprintf(bv, sizeof(bv), "%s/negative_v.bin", tmp_dir);
    corrupt_copy(p7, bv, -1, 0, -1, 1024 + 4 * (2 * n_full + 5), -1.0f);
    ResumeCtx rv = {b, bv};
    check_fails_in("ckpt/negative adam v rejected", resume_child, &rv, bv,
                   "adam v of tensor wte do not match their checksum");
    SaveCtx sc = {a, 8};
    a->params[3] = NAN;
    check_fails("ckpt/save of a non-finite state refused", save_child, &sc,
                "checkpoint of step 8 not written: parameters of tensor wte: non-finite");
    a->params[3] = 0;
    char p8[600];
    snprintf(p8, sizeof(p8), "%s/ckpt_00000008.bin", dir);
    check(!file_exists(p8) && file_exists(p6) && file_exists(p7) && count_tmp_files(dir) == 0,
          "ckpt/after the refused save: no step-8 file, no .tmp, steps 6 and 7 kept", NULL);
    test_checkpoint_fallback(dir, p7, want_size);
    test_checkpoint_rope_theta();
}

// --- llm.c GPT-2 checkpoints (version 3): header, then tensors grouped by kind over all
// layers (wte, wpe, ln1w[L], ln1b[L], qkvw[L], ... fcprojb[L], lnfw, lnfb) ---

// The llm.c file of model m, built here from that description.
static char* llmc_expected(Model* m, size_t* n) {
    const ModelConfig* c = &m->c;
    *n = 1024 + 4 * m->P.n_full;
    char* buf = (char*)xcalloc(*n, 1);
    int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION, c->seq_len, c->vocab,
                      c->n_layer, c->n_head,    c->d_model, c->vocab_padded};
    memcpy(buf, h, 1024);
    char* p = buf + 1024;
#define PUT(ptr, count) do { memcpy(p, ptr, 4 * (size_t)(count)); p += 4 * (size_t)(count); } while (0)
    size_t C = c->d_model, F = c->d_ff;
    PUT(m->w.wte, (size_t)c->vocab_padded * C);
    PUT(m->w.wpe, (size_t)c->seq_len * C);
    size_t sizes[N_LAYER_KINDS] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, F * C, F, C * F, C};
    for (int k = 0; k < N_LAYER_KINDS; k++)
        for (int l = 0; l < c->n_layer; l++) PUT(((float**)&m->wl[l])[k], sizes[k]);
    PUT(m->w.lnfw, C);
    PUT(m->w.lnfb, C);
#undef PUT
    return buf;
}
typedef struct { Model* m; const char* path; int do_export; } LlmcCtx;
static void llmc_child(void* p) {
    LlmcCtx* c = (LlmcCtx*)p;
    if (c->do_export) llmc_export(c->path, &c->m->L, &c->m->P, &c->m->c, c->m->params);
    else llmc_import(c->path, &c->m->L, &c->m->P, &c->m->c, c->m->params);
}

static void test_llmc(void) {
    char path[600], bp[700], name[200];
    Model* a = new_model(GPT2_TINY);
    randomize_params(a, 31);
    snprintf(path, sizeof(path), "%s/gpt2_tiny_llmc.bin", tmp_dir);
    quiet_begin();
    llmc_export(path, &a->L, &a->P, &a->c, a->params);
    quiet_end();
    size_t n;
    char* want = llmc_expected(a, &n);
    char* got = (char*)xcalloc(n + 1, 1);
    FILE* f = fopen(path, "rb");
    size_t got_n = f ? fread(got, 1, n + 1, f) : 0;
    if (f) fclose(f);
    check(got_n == n && !memcmp(got, want, n), "llmc/export byte-identical to llm.c's kind-major layout",
          "%zu bytes, want %zu", got_n, n);
    snprintf(bp, sizeof(bp), "%s.tmp.*", path);  // an AtomicFile's temporary: <path>.tmp.XXXXXX
    glob_t g;
    check(glob(bp, 0, NULL, &g) == GLOB_NOMATCH, "llmc/export leaves no .tmp", NULL);
    globfree(&g);
    Model* b = new_model(GPT2_TINY " --seed 5");
    quiet_begin();
    llmc_import(path, &b->L, &b->P, &b->c, b->params);
    quiet_end();
    check(!memcmp(a->params, b->params, sizeof(float) * a->P.n_local), "llmc/import of the export: identical params",
          NULL);
    struct { const char* file; int word; int32_t value; long long len; const char* want; const char* what; } bad[] = {
        {"llmc_magic.bin", 0, 1, -1, "bad magic 1", "bad magic"},
        {"llmc_version.bin", 1, 5, -1, "version 5 not supported", "wrong version"},
        {"llmc_layers.bin", 4, 3, -1, "n_layer is 3 in the file but 2 here", "wrong n_layer"},
        {"llmc_vp.bin", 7, 512, -1, "padded vocab is 512 in the file but 384 here", "wrong padded vocab"},
        {"llmc_trunc.bin", -1, 0, (long long)n - 4, "expected", "truncated"},
        {"llmc_header.bin", -1, 0, 200, "truncated header", "truncated header"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(bp, sizeof(bp), "%s/%s", tmp_dir, bad[i].file);
        corrupt_copy(path, bp, bad[i].word, bad[i].value, bad[i].len, -1, 0);
        LlmcCtx lc = {b, bp, 0};
        snprintf(name, sizeof(name), "llmc/import %s rejected", bad[i].what);
        check_fails_in(name, llmc_child, &lc, bp, bad[i].want);
    }
    Model* l = new_model(LLAMA_TINY);
    LlmcCtx ll = {l, path, 0}, le = {l, path, 1};
    check_fails_in("llmc/import into a llama model rejected", llmc_child, &ll, path, "GPT-2");
    check_fails_in("llmc/export of a llama model rejected", llmc_child, &le, path, "GPT-2");
    free(want), free(got);
}

// --- sharding: what each (stage, tp rank) holds, checked with an index mapping written
// here from the definitions in params.h (not with tensor_runs) ---

// Index in the full tensor of local element k of tensor t on tp rank r.
static size_t full_index(const Tensor* t, int tp, int r, size_t k) {
    if (t->shard == SHARD_NONE) return k;
    if (t->shard == SHARD_COLS) {  // row-parallel: a slice of the input columns of every row
        size_t lc = t->cols / tp;
        return (k / lc) * t->cols + r * lc + k % lc;
    }
    size_t lrow = k / t->cols, block0 = 0;  // column-parallel: a slice of the rows of every block
    for (int b = 0; b < t->n_blocks; b++) {
        size_t lr = t->block_rows[b] / tp;
        if (lrow < lr) return (block0 + r * lr + lrow) * t->cols + k % t->cols;
        lrow -= lr, block0 += t->block_rows[b];
    }
    return (size_t)-1;
}

// Every rank of a (tp, pp, vpp) layout, simulated in this process: init_params gives each
// element the value of the 1-rank init, ckpt_resume of a 1-rank checkpoint gives each
// element its saved value, and the owners cover the full model exactly once.
static void test_sharding_arch(const char* arch, const char* flags) {
    char dir[512], path[600], name[200];
    Model* m1 = new_model(flags);  // fresh init, 1 rank: the canonical full vector
    float* init_full = copy_f(m1->params, m1->P.n_full);
    snprintf(dir, sizeof(dir), "%s/shard_%s", tmp_dir, arch);
    m1->args->ckpt_dir = dir;
    ckpt_dir_prepare(m1->args);
    randomize_params(m1, 21);
    for (size_t i = 0; i < m1->P.n_local; i++)
        m1->m_state[i] = 0.01f * rng_normal(&test_rng), m1->v_state[i] = 1e-4f * fabsf(rng_normal(&test_rng));
    quiet_begin();
    ckpt_save(&m1->L, &m1->P, &m1->c, m1->args, m1->params, m1->m_state, m1->v_state, 0, m1->P.n_local, 3);
    quiet_end();
    snprintf(path, sizeof(path), "%s/ckpt_00000003.bin", dir);
    const float* full[3] = {m1->params, m1->m_state, m1->v_state};
    int layouts[][3] = {{2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {1, 1, 2}, {2, 1, 2}};
    int* count = (int*)xmalloc(sizeof(int) * m1->P.n_full);
    for (size_t li = 0; li < sizeof(layouts) / sizeof(layouts[0]); li++) {
        int tp = layouts[li][0], pp = layouts[li][1], vpp = layouts[li][2];
        ModelConfig c = m1->c;
        c.tp = tp, c.pp = pp, c.vpp = vpp;
        memset(count, 0, sizeof(int) * m1->P.n_full);
        int init_ok = 1, resume_ok = 1;
        for (int stage = 0; stage < pp; stage++)
            for (int r = 0; r < tp; r++) {
                ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
                param_layout_build(P, &c, tp, r, pp, vpp, stage, 1);
                Layout L;  // only what ckpt_resume reads: no communication on this path
                memset(&L, 0, sizeof(L));
                L.world = tp * pp, L.rank = 1, L.dp = 1, L.tp = tp, L.pp = pp, L.vpp = vpp, L.tp_rank = r,
                L.stage = stage;
                float* params = (float*)xcalloc(P->n_padded, sizeof(float));
                init_params(P, &c, tp, r, params);
                float* local[3] = {(float*)xcalloc(P->n_padded, sizeof(float)),
                                   (float*)xcalloc(P->n_padded, sizeof(float)),
                                   (float*)xcalloc(P->n_padded, sizeof(float))};
                Args a = *m1->args;
                a.resume = path;
                ckpt_resume(&L, P, &c, &a, local[0], local[1], local[2], 0, P->n_local);
                for (int i = 0; i < P->n; i++) {
                    const Tensor* t = &P->t[i];
                    for (size_t k = 0; k < t->size; k++) {
                        size_t f = t->full_offset + full_index(t, tp, r, k);
                        init_ok &= params[t->offset + k] == init_full[f];
                        for (int sec = 0; sec < 3; sec++) resume_ok &= local[sec][t->offset + k] == full[sec][f];
                        if (t->owner) count[f]++;
                    }
                }
                free(params), free(local[0]), free(local[1]), free(local[2]), free(P);
            }
        int once = 1;
        for (size_t f = 0; f < m1->P.n_full; f++) once &= count[f] == 1;
        char tag[64];
        snprintf(tag, sizeof(tag), "tp %d pp %d vpp %d", tp, pp, vpp);
        snprintf(name, sizeof(name), "shard/%s/%s: init of every shard equals the 1-rank init", arch, tag);
        check(init_ok, name, NULL);
        snprintf(name, sizeof(name), "shard/%s/%s: 1-rank checkpoint resumed into every shard (params, m, v)", arch,
                 tag);
        check(resume_ok, name, NULL);
        snprintf(name, sizeof(name), "shard/%s/%s: owners cover every full element exactly once", arch, tag);
        check(once, name, NULL);
    }
    free(count), free(init_full);
}
static void test_sharding(void) {
    test_sharding_arch("gpt2", GPT2_TINY);
    test_sharding_arch("llama", LLAMA_TINY);
}
