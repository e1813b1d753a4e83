// data.h: token streams (llm.c .bin shards, byte-level .txt, or a built-in corpus),
// the batch order, and the llm.c tokenizer file for decoding samples. Shared by both builds.
//
// The batch order is a pure function of the step, so any layout reads the same global
// batch and a resumed run continues exactly: sequence s of the run (s = step *
// global_batch + i) starts at a position hashed from s (stream_seq_start), and
// data-parallel rank r reads sequences [r, r+1) * global_batch/dp of each step's batch.
#ifndef DATA_H
#define DATA_H

#include <glob.h>
#include <sys/stat.h>
#include "config.h"

#define SHARD_MAGIC 20240520
#define TOKENIZER_MAGIC 20240328

typedef struct {
    int* tokens;      // the whole stream in memory
    size_t n_tokens;
    char source[512];
} TokenStream;

static int has_suffix(const char* s, const char* suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

// Append one llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
static void read_shard(TokenStream* ts, size_t* cap, const char* path, int vocab) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open data file %s: %s", path, strerror(errno));
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) fail("data file %s: truncated header (need 1024 bytes)", path);
    if (header[0] != SHARD_MAGIC) fail("data file %s: bad magic %d (expected %d, an llm.c token shard)", path, header[0], SHARD_MAGIC);
    if (header[1] != 1) fail("data file %s: unsupported version %d (expected 1)", path, header[1]);
    if (header[2] <= 0) fail("data file %s: bad token count %d", path, header[2]);
    struct stat st;
    fstat(fileno(f), &st);
    size_t n = (size_t)header[2];
    if ((size_t)st.st_size != 1024 + 2 * n)
        fail("data file %s: header says %zu tokens (%zu bytes) but the file has %lld bytes", path, n, 1024 + 2 * n, (long long)st.st_size);
    if (ts->n_tokens + n > *cap) {
        *cap = (ts->n_tokens + n) * 2;
        ts->tokens = (int*)realloc(ts->tokens, *cap * sizeof(int));
        if (!ts->tokens) fail("out of memory reading %s", path);
    }
    uint16_t* buf = (uint16_t*)xmalloc(2 * n);
    if (fread(buf, 2, n, f) != n) fail("data file %s: truncated", path);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        if (buf[i] >= vocab) fail("data file %s: token id %d at position %zu is >= vocab %d", path, buf[i], i, vocab);
        ts->tokens[ts->n_tokens + i] = buf[i];
    }
    ts->n_tokens += n;
    free(buf);
}

static void read_text(TokenStream* ts, const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open data file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) fail("data file %s is not a regular file", path);
    long n = (long)st.st_size;
    if (n <= 0) fail("data file %s is empty", path);
    unsigned char* buf = (unsigned char*)xmalloc(n);
    if (fread(buf, 1, n, f) != (size_t)n) fail("data file %s: read error", path);
    fclose(f);
    ts->tokens = (int*)xmalloc(sizeof(int) * n);
    for (long i = 0; i < n; i++) ts->tokens[i] = buf[i];  // byte-level: token = byte
    ts->n_tokens = n;
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
    ts->tokens = (int*)xmalloc(sizeof(int) * n_bytes);
    ts->n_tokens = 0;
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
}

// Open --data / --val-data (`flag` names which, for errors): a .txt file, a .bin shard,
// or a glob of .bin shards.
static void stream_open(TokenStream* ts, const char* spec, int vocab, const char* flag) {
    memset(ts, 0, sizeof(*ts));
    snprintf(ts->source, sizeof(ts->source), "%s", spec);
    if (!has_suffix(spec, ".bin") && !strpbrk(spec, "*?[")) {
        if (vocab < 256) fail("%s %s: a text file is byte-level and needs vocab >= 256 (got %d)", flag, spec, vocab);
        read_text(ts, spec);
        return;
    }
    glob_t g;
    if (glob(spec, 0, NULL, &g) != 0 || g.gl_pathc == 0) fail("%s %s: no file matches", flag, spec);
    size_t cap = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) read_shard(ts, &cap, g.gl_pathv[i], vocab);
    globfree(&g);
}

// Number of whole sequences of T+1 tokens (inputs and shifted targets) in the stream.
static size_t stream_n_seq(const TokenStream* ts, int T) { return ts->n_tokens > (size_t)T ? (ts->n_tokens - 1) / T : 0; }

// Where sequence s of the run starts: a hash of s, so batches are spread over the whole
// stream (not consecutive windows of one scene) yet fixed by s alone.
static size_t stream_seq_start(const TokenStream* ts, int T, size_t s) {
    uint64_t z = (uint64_t)s + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (size_t)(z % (ts->n_tokens - T));
}

// Fill inputs/targets (n_seq_batch x T) with sequences first_seq.. of the run's order.
static void stream_batch(const TokenStream* ts, int T, size_t first_seq, int n_seq_batch, int* inputs, int* targets) {
    for (int b = 0; b < n_seq_batch; b++) {
        size_t start = stream_seq_start(ts, T, first_seq + b);
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = ts->tokens[start + t];
            targets[b * T + t] = ts->tokens[start + t + 1];
        }
    }
}

// Split the last `frac` of a stream off as validation data (when no --val-data is given).
static void stream_split(TokenStream* train, TokenStream* val, double frac) {
    size_t n_val = (size_t)(train->n_tokens * frac);
    memset(val, 0, sizeof(*val));
    val->tokens = train->tokens + train->n_tokens - n_val;
    val->n_tokens = n_val;
    snprintf(val->source, sizeof(val->source), "last %.0f%% of %.480s", frac * 100, train->source);
    train->n_tokens -= n_val;
}

// ----------------------------------------------------------------------------
// llm.c tokenizer file (for decoding samples): 256 uint32 header (magic 20240328,
// version 1 or 2, vocab size, v2: eot id), then per token a uint8 length and bytes.

typedef struct {
    int vocab;
    char** piece;  // NULL: byte-level decoding
    int eot;
} Tokenizer;

static void tokenizer_load(Tokenizer* tk, const char* path) {
    memset(tk, 0, sizeof(*tk));
    tk->eot = EOT_TOKEN;
    if (!path || !*path) return;
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open tokenizer %s: %s", path, strerror(errno));
    uint32_t h[256];
    if (fread(h, 4, 256, f) != 256) fail("tokenizer %s: truncated header", path);
    if (h[0] != TOKENIZER_MAGIC) fail("tokenizer %s: bad magic %u (expected %d)", path, h[0], TOKENIZER_MAGIC);
    if (h[1] != 1 && h[1] != 2) fail("tokenizer %s: unsupported version %u", path, h[1]);
    if (h[2] == 0 || h[2] > 1000000) fail("tokenizer %s: implausible vocab size %u", path, h[2]);
    tk->vocab = (int)h[2];
    tk->eot = h[1] == 2 ? (int)h[3] : 50256;
    tk->piece = (char**)xcalloc(tk->vocab, sizeof(char*));
    for (int i = 0; i < tk->vocab; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1 || len == 0) fail("tokenizer %s: truncated or empty entry %d", path, i);
        tk->piece[i] = (char*)xmalloc(len + 1);
        if (fread(tk->piece[i], 1, len, f) != len) fail("tokenizer %s: truncated entry %d", path, i);
        tk->piece[i][len] = 0;
    }
    fclose(f);
}

// Write token id's text; unprintable bytes as '?'.
static void tokenizer_print(const Tokenizer* tk, int id, FILE* out) {
    if (tk->piece) {
        if (id >= 0 && id < tk->vocab && id != tk->eot) fputs(tk->piece[id], out);
        return;
    }
    if (id == EOT_TOKEN) fputs("\n", out);
    else if (id < 256) fputc((id >= 32 && id < 127) || id == '\n' ? id : '?', out);
}

#endif
