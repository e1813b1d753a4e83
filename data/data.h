// data.h: token streams (llm.c .bin shards, byte-level text, or a built-in corpus), the
// batch order, and the llm.c tokenizer file for decoding samples. Shared by both builds.
// Every file is opened through files.h's input_open (a FIFO or device is refused, never
// read), and every token id that enters the model is checked against the vocabulary.
//
// The batch order is a pure function of the step, so any layout reads the same global
// batch and a resumed run continues exactly: sequence s of the run (s = step *
// global_batch + i) starts at a position hashed from s (stream_seq_start), and
// data-parallel rank r reads sequences [r, r+1) * global_batch/dp of each step's batch.
//
// Documents: the end-of-text token (run.h eot_resolve: --eot, the tokenizer file's, or the
// data's: GPT-2's <|endoftext|> 50256 in an llm.c shard, 256 in byte-level text) starts a
// document. llm.c's shards (fineweb, tinyshakespeare) put it before each
// document, so it acts as the document's BOS: it belongs to the document it opens, and the
// last token of a document predicts it. Byte-level text (a token is a byte < 256) holds no
// end-of-text token, so it has no boundaries: one document (--doc-mask auto: off). Every
// batch carries beside inputs and targets doc_start, per token: the position within its
// sequence of T where its document starts (0 for a document begun before the sequence).
// Key k is visible to query q iff doc_start[q] <= k <= q; all zeros is plain causal
// attention. With document masking RoPE/wpe positions restart: token q is at q - doc_start[q].
#ifndef DATA_H
#define DATA_H

#include <glob.h>
#include <setjmp.h>
#include <sys/stat.h>
#include "layout/config.h"
#include "base/files.h"
#include "layout/packing.h"

#define SHARD_MAGIC 20240520
#define TOKENIZER_MAGIC 20240328
#define GPT2_VOCAB 50257  // GPT-2's byte-level BPE; its <|endoftext|> is the last id, 50256
#define GPT2_EOT 50256

typedef struct {
    int* tokens;         // the whole stream in memory
    size_t n_tokens, cap;
    const char* source;  // what it was read from (a flag's value, or a description), for messages and the table
    DocPlan* plan;       // --packing greedy|wlb: the documents of each global batch (layout/packing.h); NULL: concat
    ReadFile* files;     // the files read (identity and name), so that no output overwrites one (runtime/run.h)
    int n_files;
    int eot;             // the end-of-text id that starts a document: the format's (stream_open), then the
                         // run's (run.h eot_resolve); -1: none
    size_t n_eot;        // how many the stream holds (stream_count_docs): 0, no document boundaries
    int text;            // byte-level text (files, the built-in corpus): ids 0-255 are bytes; 0: llm.c shards
} TokenStream;

// The stream's documents: eot is the id that starts one (-1: none), n_eot how many it holds.
static void stream_count_docs(TokenStream* ts, int eot) {
    ts->eot = eot, ts->n_eot = 0;
    for (size_t i = 0; i < ts->n_tokens && eot >= 0; i++) ts->n_eot += ts->tokens[i] == eot;
}

// doc_start of each of n tokens of a sequence: the position of the last end-of-text token at
// or before it, 0 when none is (a document begun before the sequence); eot < 0: all 0.
static void doc_starts(const int* tokens, int n, int eot, int* doc_start) {
    int start = 0;
    for (int t = 0; t < n; t++) {
        if (tokens[t] == eot) start = t;
        doc_start[t] = start;
    }
}

// Errors in the data and the tokenizer. Every rank of a run reads the same files and meets an
// error in them alike: while run.h reads them (data_error_at set) data_fail keeps the message
// and jumps back there, where the ranks agree which one prints it, once (run.h
// data_errors_agree; the weight imports likewise, runtime/ckpt.h import_agree); elsewhere (a
// tool, a test) it is fail()'s line.
static jmp_buf* data_error_at = NULL;
static char data_error_msg[8192];
static void data_fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(data_error_msg, sizeof(data_error_msg), fmt, ap);
    va_end(ap);
    if (!data_error_at) fail("%s", data_error_msg);
    longjmp(*data_error_at, 1);
}

// Room for n more tokens.
// Room for n more tokens read from path, whose reading holds a buffer of `buffer` bytes beside them. The whole
// stream is held (4 bytes a token, by each rank on the host): one that cannot fit in this machine's memory is
// refused before anything is allocated (a 4 GiB shard of 2^31 tokens was killed by the kernel mid-read, without a
// word). Grows by half.
static void stream_reserve(TokenStream* ts, size_t n, const char* path, size_t buffer) {
    const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");  // every rank on this host holds its own copy
    int ranks = local && atoi(local) > 1 ? atoi(local) : 1;
    double need = ranks * (4.0 * ((double)ts->n_tokens + (double)n) + (double)buffer),
           mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    char each[64] = "";
    if (ranks > 1) snprintf(each, sizeof(each), " x %d ranks on this host", ranks);
    if (mem > 0 && need > mem)
        data_fail("data file %s: %.3g tokens in all take %.1f GiB in memory (the stream is held whole, 4 bytes a "
                  "token%s), more than this machine's %.1f GiB", path, (double)ts->n_tokens + (double)n,
                  need / 1073741824.0, each, mem / 1073741824.0);
    if (ts->n_tokens + n <= ts->cap) return;
    ts->cap = ts->n_tokens + n > ts->cap / 2 * 3 ? ts->n_tokens + n : ts->cap / 2 * 3;
    ts->tokens = (int*)realloc(ts->tokens, ts->cap * sizeof(int));
    if (!ts->tokens) fail("out of memory reading %s", path);
}
static void stream_add_file(TokenStream* ts, FileId id, const char* path) {
    ts->files = (ReadFile*)realloc(ts->files, (ts->n_files + 1) * sizeof(ReadFile));
    if (!ts->files) fail("out of memory");
    ts->files[ts->n_files++] = (ReadFile){id, xstrprintf("%s", path)};
}

// A shard's ids past the model's vocabulary: the error says which vocabulary its largest id needs.
static void shard_vocab_fail(const char* path, const uint16_t* ids, size_t n, size_t at, int vocab) {
    int top = 0;
    for (size_t i = 0; i < n; i++) top = ids[i] > top ? ids[i] : top;
    const char* gpt2 = top < GPT2_VOCAB
                           ? " (GPT-2 shards of data/prepare.py --tokenizer gpt2: --model gpt2-124m, or --vocab 50257)"
                           : "";
    data_fail("data file %s: token id %d at position %zu is >= vocab %d; its largest id is %d: use --vocab %d or "
              "more%s",
              path, ids[at], at, vocab, top, top + 1, gpt2);
}

// fread of n items of `size` bytes in pieces of 64 MiB, with a look for a stop signal after
// each (a file of GBs takes seconds to read); whether all n came.
static int read_in_pieces(FILE* f, void* buf, size_t size, size_t n) {
    size_t piece = ((size_t)64 << 20) / size;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < piece ? n - done : piece;
        if (fread((char*)buf + done * size, size, k, f) != k) return 0;
        done += k;
        stop_if_signalled("reading the data");
    }
    return 1;
}

// Append one llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
static void read_shard(TokenStream* ts, const char* path, int vocab, const char* flag) {
    char why[256];
    FileId id;
    FILE* f = input_open(path, why, sizeof(why), &id);
    if (!f) data_fail("%s: cannot open data file %s: %s", flag, path, why);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256)
        data_fail("data file %s: truncated header (need 1024 bytes)", path);
    if (header[0] != SHARD_MAGIC)
        data_fail("data file %s: bad magic %d (expected %d, an llm.c token shard)", path, header[0], SHARD_MAGIC);
    if (header[1] != 1) data_fail("data file %s: unsupported version %d (expected 1)", path, header[1]);
    if (header[2] <= 0) data_fail("data file %s: bad token count %d", path, header[2]);
    struct stat st;
    fstat(fileno(f), &st);
    size_t n = (size_t)header[2];
    if ((size_t)st.st_size != 1024 + 2 * n)
        data_fail("data file %s: header says %zu tokens (%zu bytes) but the file has %lld bytes", path, n,
                  1024 + 2 * n, (long long)st.st_size);
    stream_reserve(ts, n, path, 2 * n);
    uint16_t* buf = (uint16_t*)xmalloc(2 * n);
    if (!read_in_pieces(f, buf, 2, n)) data_fail("data file %s: truncated", path);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        if (buf[i] >= vocab) shard_vocab_fail(path, buf, n, i, vocab);
        ts->tokens[ts->n_tokens + i] = buf[i];
    }
    ts->n_tokens += n;
    stream_add_file(ts, id, path);
    free(buf);
}

// Append a text file, byte-level: token = byte.
static void read_text(TokenStream* ts, const char* path, const char* flag) {
    char why[256];
    FileId id;
    FILE* f = input_open(path, why, sizeof(why), &id);
    if (!f) data_fail("%s: cannot open data file %s: %s", flag, path, why);
    struct stat st;
    fstat(fileno(f), &st);
    size_t n = (size_t)st.st_size;
    if (n == 0) data_fail("data file %s is empty", path);
    stream_reserve(ts, n, path, n);
    unsigned char* buf = (unsigned char*)xmalloc(n);
    if (!read_in_pieces(f, buf, 1, n)) data_fail("data file %s: read error", path);
    fclose(f);
    for (size_t i = 0; i < n; i++) ts->tokens[ts->n_tokens + i] = buf[i];
    ts->n_tokens += n;
    stream_add_file(ts, id, path);
    free(buf);
}

// The built-in corpus: deterministic English-like text from a small grammar (names,
// verbs, adjectives, nouns, places; subject-verb-object sentences; a few fixed
// proverbs; small sums "12 plus 7 is 19."). Within-word spelling and the fixed
// phrases are almost deterministic and the sums need attention to earlier tokens,
// so a model can fall far below ln(257) = 5.55 nats: about 1 nat/byte is reachable.
static void make_builtin_corpus(TokenStream* ts, size_t n_bytes, uint64_t seed) {
    static const char* names[] = {"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"};
    static const char* verbs[] = {"sees", "finds", "takes", "paints", "likes", "keeps", "carries", "wants"};
    static const char* adjs[] = {"red", "small", "old", "bright", "quiet", "heavy", "green", "strange"};
    static const char* nouns[] = {"apple", "boat", "lamp", "stone", "letter", "garden", "bird", "river"};
    static const char* places[] = {"near the mill", "in the town", "by the sea", "under the bridge"};
    static const char* proverbs[] = {"a stitch in time saves nine. ", "all that glitters is not gold. ",
                                     "the early bird catches the worm. "};
    Rng r;
    rng_seed(&r, seed ^ 0xC0FFEE);
    memset(ts, 0, sizeof(*ts));
    ts->source = xstrprintf("built-in corpus (%zu bytes)", n_bytes);
    ts->tokens = (int*)xmalloc(sizeof(int) * n_bytes);
    char s[256];
    while (ts->n_tokens < n_bytes) {
        int kind = rng_u64(&r) % 8;
        if (kind < 5)
            snprintf(s, sizeof(s), "%s %s the %s %s %s. ", names[rng_u64(&r) % 8], verbs[rng_u64(&r) % 8],
                     adjs[rng_u64(&r) % 8], nouns[rng_u64(&r) % 8], places[rng_u64(&r) % 4]);
        else if (kind < 7) {
            int a = rng_u64(&r) % 20, b = rng_u64(&r) % 20;
            snprintf(s, sizeof(s), "%d plus %d is %d. ", a, b, a + b);
        } else snprintf(s, sizeof(s), "%s", proverbs[rng_u64(&r) % 3]);
        for (char* p = s; *p && ts->n_tokens < n_bytes; p++) ts->tokens[ts->n_tokens++] = (unsigned char)*p;
    }
    ts->eot = EOT_TOKEN, ts->text = 1;  // byte-level text: it holds none (one document)
}

// Open --data / --val-data (`flag` names which, for errors). A path that exists names one
// file, whatever characters are in its name (notes[1].txt); otherwise a path with glob
// characters (*?[, quoted so the shell leaves them) names every file it matches, read in
// name order. A .bin file is an llm.c shard, any other file byte-level text; one glob does
// not mix the two.
static void stream_open(TokenStream* ts, const char* spec, int vocab, const char* flag) {
    memset(ts, 0, sizeof(*ts));
    ts->source = spec;
    struct stat st;
    glob_t g;
    memset(&g, 0, sizeof(g));
    int literal = lstat(spec, &st) == 0 || !strpbrk(spec, "*?[");
    if (!literal && (glob(spec, 0, NULL, &g) != 0 || g.gl_pathc == 0)) data_fail("%s %s: no file matches", flag, spec);
    size_t n = literal ? 1 : g.gl_pathc, n_shards = 0;
    const char* const* paths = literal ? &spec : (const char* const*)g.gl_pathv;
    for (size_t i = 0; i < n; i++) n_shards += has_suffix(paths[i], ".bin");
    if (n_shards && n_shards < n)
        data_fail("%s %s: matches both .bin shards and text files (%s, %s)", flag, spec, paths[0], paths[n - 1]);
    if (!n_shards && vocab < 256)
        data_fail("%s %s: a text file is byte-level and needs vocab >= 256 (got %d)", flag, spec, vocab);
    for (size_t i = 0; i < n; i++) {
        if (n_shards) read_shard(ts, paths[i], vocab, flag);
        else read_text(ts, paths[i], flag);
    }
    if (!literal) globfree(&g);
    // the end-of-text its format and ids show (run.h eot_resolve): text is bytes (256); llm.c's version-1
    // shards hold GPT-2's tokens (50256) or, all ids <= 256, this trainer's bytes; past 50256, unknown
    int top = 0;
    for (size_t i = 0; i < ts->n_tokens && n_shards; i++) top = ts->tokens[i] > top ? ts->tokens[i] : top;
    ts->eot = !n_shards || top <= EOT_TOKEN ? EOT_TOKEN : top <= GPT2_EOT ? GPT2_EOT : -1;
    ts->text = !n_shards;
}

// Number of whole sequences of T+1 tokens (inputs and shifted targets) in the stream.
static size_t stream_n_seq(const TokenStream* ts, int T) {
    return ts->n_tokens > (size_t)T ? (ts->n_tokens - 1) / T : 0;
}

// Where sequence s of the run starts: a hash of s, so batches are spread over the whole
// stream (not consecutive windows of one scene) yet fixed by s alone.
static size_t stream_seq_start(const TokenStream* ts, int T, size_t s) {
    uint64_t z = (uint64_t)s + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (size_t)(z % (ts->n_tokens - T));
}

// Fill inputs/targets (n_seq_batch x T) with sequences first_seq.. of the run's order, and
// doc_start (the same shape; NULL: not wanted) with their documents (doc_starts).
static void stream_batch(const TokenStream* ts, int T, size_t first_seq, int n_seq_batch, int* inputs, int* targets,
                         int* doc_start) {
    for (int b = 0; b < n_seq_batch; b++) {
        size_t start = stream_seq_start(ts, T, first_seq + b);
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = ts->tokens[start + t];
            targets[b * T + t] = ts->tokens[start + t + 1];
        }
        if (doc_start) doc_starts(inputs + (size_t)b * T, T, ts->eot, doc_start + (size_t)b * T);
    }
}

// Split the last `frac` of a stream off as validation data (when no --val-data is given).
static void stream_split(TokenStream* train, TokenStream* val, double frac) {
    size_t n_val = (size_t)(train->n_tokens * frac);
    memset(val, 0, sizeof(*val));
    val->tokens = train->tokens + train->n_tokens - n_val;
    val->n_tokens = n_val;
    val->source = xstrprintf("last %.0f%% of %s", frac * 100, train->source);
    train->n_tokens -= n_val;
    val->eot = train->eot;
}

// ----------------------------------------------------------------------------
// llm.c tokenizer file (for decoding samples): 256 uint32 header (magic 20240328,
// version 1 or 2, vocab size, v2: eot id), then per token a uint8 length and bytes.

typedef struct {
    int vocab;
    char** piece;                // NULL: no tokenizer file (bytes, or ids for a larger vocabulary)
    unsigned char* piece_len;    // a piece may hold any bytes, NUL too
    int eot;                     // <|endoftext|>: where samples start
} Tokenizer;

// Load the tokenizer file at path for a model whose vocabulary is `vocab`: first the file
// itself (header, every piece present and non-empty, eot inside its vocabulary), then that
// it is this model's (its vocabulary, or that padded to a multiple of 128 as llm.c pads GPT-2's
// 50257 to --vocab 50304). No path:
// byte-level decoding for the byte-level vocabulary, token ids for any larger one; the eot
// is then the run's (run.h eot_resolve).
static void tokenizer_load(Tokenizer* tk, const char* path, int vocab) {
    memset(tk, 0, sizeof(*tk));
    tk->vocab = vocab;
    tk->eot = -1;  // none in the file: run.h eot_resolve sets the run's
    if (!path || !*path) return;
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) data_fail("cannot open tokenizer %s: %s", path, why);
    uint32_t h[256];
    if (fread(h, 4, 256, f) != 256) data_fail("tokenizer %s: truncated header", path);
    if (h[0] != TOKENIZER_MAGIC) data_fail("tokenizer %s: bad magic %u (expected %d)", path, h[0], TOKENIZER_MAGIC);
    if (h[1] != 1 && h[1] != 2) data_fail("tokenizer %s: unsupported version %u", path, h[1]);
    if (h[2] == 0 || h[2] > 1000000) data_fail("tokenizer %s: implausible vocab size %u", path, h[2]);
    uint32_t eot = h[1] == 2 ? h[3] : GPT2_EOT;  // version 1 is GPT-2's (llm.c)
    if (eot >= h[2]) data_fail("tokenizer %s: eot id %u is outside its vocab of %u", path, eot, h[2]);
    tk->vocab = (int)h[2], tk->eot = (int)eot;
    tk->piece = (char**)xcalloc(tk->vocab, sizeof(char*));
    tk->piece_len = (unsigned char*)xcalloc(tk->vocab, 1);
    for (int i = 0; i < tk->vocab; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1 || len == 0) data_fail("tokenizer %s: truncated or empty entry %d", path, i);
        tk->piece[i] = (char*)xmalloc(len + 1);
        if (fread(tk->piece[i], 1, len, f) != len) data_fail("tokenizer %s: truncated entry %d", path, i);
        tk->piece[i][len] = 0, tk->piece_len[i] = len;
    }
    int extra = fgetc(f) != EOF;  // a file of more pieces than its header says: another vocabulary, or damaged
    fclose(f);
    if (extra) data_fail("tokenizer %s: bytes after its %d pieces (the header's vocab size): not one tokenizer", path,
                         tk->vocab);
    int padded = (tk->vocab + 127) / 128 * 128;  // llm.c's padding: GPT-2's 50257 trains as --vocab 50304
    if (tk->vocab > vocab || vocab > padded)
        data_fail("tokenizer %s: its vocab is %d but the model's is %d (--vocab, --model; the model's may be the "
                  "tokenizer's padded up to %d)", path, tk->vocab, vocab, padded);
}

// Append the bytes token id stands for to out: its piece (none for the tokenizer's eot or
// an id outside its vocabulary); without a tokenizer file the id in brackets for a vocabulary
// larger than bytes, or byte-level the byte itself and a newline for <|endoftext|>. They are
// raw bytes: print them through escape_text.
static void tokenizer_decode(const Tokenizer* tk, int id, Bytes* out) {
    if (tk->piece) {
        if (id >= 0 && id < tk->vocab && id != tk->eot) bytes_append(out, tk->piece[id], tk->piece_len[id]);
        return;
    }
    if (tk->vocab > BYTE_VOCAB) {
        char shown[16];
        bytes_append(out, shown, (size_t)snprintf(shown, sizeof(shown), "[%d]", id));
        return;
    }
    char byte = (char)id;
    if (id == EOT_TOKEN) bytes_append(out, "\n", 1);
    else if (id >= 0 && id < 256) bytes_append(out, &byte, 1);
}

// This dp rank's part of global batch `index`: n_micro * micro_batch sequences, of each
// the Tl positions pos[] this rank holds (context parallelism; all T in order without it).
// Documents (NULL: masking off): doc_start (like inputs) of the tokens this rank holds, and
// doc_seq (n_micro * micro_batch x T) of every position of the sequences, which the attention
// of rows other ranks hold needs (Ulysses' head split); their values are sequence positions.
// Both or neither.
static void load_batch(const TokenStream* ts, const ModelConfig* c, int dp_rank, int n_micro, size_t index,
                       const int* pos, int Tl, int* inputs, int* targets, int* doc_start, int* doc_seq) {
    size_t per_dp = (size_t)n_micro * c->micro_batch, T = c->seq_len;
    size_t first = index * c->global_batch + dp_rank * per_dp;
    if (ts->plan) {
        plan_fill(ts->plan, ts->tokens, index, (int)(dp_rank * per_dp), (int)per_dp, pos, Tl, inputs, targets,
                  doc_start, doc_seq);
        return;
    }
    if (Tl == c->seq_len) {
        stream_batch(ts, c->seq_len, first, (int)per_dp, inputs, targets, doc_seq);
        if (doc_start) memcpy(doc_start, doc_seq, sizeof(int) * per_dp * T);
        return;
    }
    int* all = (int*)xmalloc(sizeof(int) * 2 * per_dp * T);
    stream_batch(ts, c->seq_len, first, (int)per_dp, all, all + per_dp * T, doc_seq);
    for (size_t s = 0; s < per_dp; s++)
        for (int j = 0; j < Tl; j++) {
            inputs[s * Tl + j] = all[s * T + pos[j]];
            targets[s * Tl + j] = all[per_dp * T + s * T + pos[j]];
            if (doc_start) doc_start[s * Tl + j] = doc_seq[s * T + pos[j]];
        }
    free(all);
}

#endif
