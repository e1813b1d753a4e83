// export_hf.h: --export-hf DIR, the final weights as a Hugging Face transformers model:
// DIR/model.safetensors, DIR/config.json and DIR/generation_config.json, which
// AutoModelForCausalLM.from_pretrained(DIR) loads as GPT2LMHeadModel or LlamaForCausalLM
// with no conversion (tests/test_export_hf.py compares its logits with ours). With
// --tokenizer X.bin, the transformers tokenizer data/prepare.py wrote beside it (X_hf/:
// vocab.json, merges.txt, tokenizer_config.json) is copied in too, so AutoTokenizer loads DIR.
//
// What differs between our tensors and theirs:
//   - GPT-2's matrices are Conv1D there, stored [in, out]: ours are [out, in], so transposed.
//     The head is tied to wte (tie_word_embeddings) and not stored.
//   - LLaMA's Linear layers are [out, in] like ours; qkvw is split into q_proj, k_proj,
//     v_proj and fcw [gate | up] into gate_proj, up_proj.
//   - RoPE: we rotate the pairs (2j, 2j+1) of a head (backend/cpu/attention.h rope_apply),
//     transformers the pairs (j, j + hd/2) (rotate_half), both by pos * 10000^(-2j/hd). The
//     rows of each q and k head are permuted so that their row j is our row 2j and their row
//     j + hd/2 our row 2j+1: q.k sums over the same products, and their rotation is ours.
//   - The vocabulary is the real one: the padded rows of wte / lm_head are left out.
//
// safetensors (the format's spec): an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...} (offsets
// into the data that follows, in order and without gaps), then the raw little-endian data.
// Rank 0 writes each tensor as its gather arrives (one full tensor in memory at a time),
// through a temp file renamed into place, and only finite weights.
#ifndef EXPORT_HF_H
#define EXPORT_HF_H

#include <sys/stat.h>
#include "layout/args.h"
#include "runtime/ckpt.h"
#include "base/files.h"
#include "layout/params.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "export_hf.h writes the host's floats as they are: safetensors needs a little-endian host"
#endif

enum { HF_AS_IS, HF_TRANSPOSE, HF_ROPE_ROWS };

// One tensor of the export: rows [row0, row0 + rows) of our full tensor `src` (index in
// the 1-rank layout), all its columns, stored as they are, transposed, or with each head's
// rows in RoPE's half-split order (heads of `hd` rows).
typedef struct {
    char name[64];
    int src, row0, rows, cols, how;
    size_t offset;  // in the data section, bytes
} HfTensor;

static void hf_add(HfTensor* out, int* n, const Tensor* t, int src, int row0, int rows, int how, const char* fmt,
                   int layer) {
    HfTensor* h = &out[(*n)++];
    snprintf(h->name, sizeof(h->name), fmt, layer);
    h->src = src, h->row0 = row0, h->rows = rows, h->cols = t->cols, h->how = how;
}

// The export's tensors in file order (our canonical order), named as transformers' state dict.
static int hf_tensors(const ModelConfig* c, const ParamLayout* full, HfTensor* out) {
    int n = 0, C = c->d_model, F = c->d_ff, K = c->n_kv_head * (c->d_model / c->n_head), gpt2 = c->arch == ARCH_GPT2;
    for (int i = 0; i < full->n; i++) {
        const Tensor* t = &full->t[i];
        int l = t->layer;
        if (l < 0) {
            if (t->kind == P_WTE)
                hf_add(out, &n, t, i, 0, c->vocab, HF_AS_IS,
                       gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", 0);
            if (t->kind == P_WPE) hf_add(out, &n, t, i, 0, t->rows, HF_AS_IS, "transformer.wpe.weight", 0);
            if (t->kind == P_LNFW)
                hf_add(out, &n, t, i, 0, t->rows, HF_AS_IS, gpt2 ? "transformer.ln_f.weight" : "model.norm.weight", 0);
            if (t->kind == P_LNFB) hf_add(out, &n, t, i, 0, t->rows, HF_AS_IS, "transformer.ln_f.bias", 0);
            if (t->kind == P_HEAD) hf_add(out, &n, t, i, 0, c->vocab, HF_AS_IS, "lm_head.weight", 0);
            continue;
        }
        if (gpt2) {
            static const char* names[N_LAYER_KINDS] = {
                "transformer.h.%d.ln_1.weight",        "transformer.h.%d.ln_1.bias",
                "transformer.h.%d.attn.c_attn.weight", "transformer.h.%d.attn.c_attn.bias",
                "transformer.h.%d.attn.c_proj.weight", "transformer.h.%d.attn.c_proj.bias",
                "transformer.h.%d.ln_2.weight",        "transformer.h.%d.ln_2.bias",
                "transformer.h.%d.mlp.c_fc.weight",    "transformer.h.%d.mlp.c_fc.bias",
                "transformer.h.%d.mlp.c_proj.weight",  "transformer.h.%d.mlp.c_proj.bias"};
            hf_add(out, &n, t, i, 0, t->rows, t->cols > 1 ? HF_TRANSPOSE : HF_AS_IS, names[t->kind], l);
        } else if (t->kind == P_QKVW) {
            hf_add(out, &n, t, i, 0, C, HF_ROPE_ROWS, "model.layers.%d.self_attn.q_proj.weight", l);
            hf_add(out, &n, t, i, C, K, HF_ROPE_ROWS, "model.layers.%d.self_attn.k_proj.weight", l);
            hf_add(out, &n, t, i, C + K, K, HF_AS_IS, "model.layers.%d.self_attn.v_proj.weight", l);
        } else if (t->kind == P_FCW) {
            hf_add(out, &n, t, i, 0, F, HF_AS_IS, "model.layers.%d.mlp.gate_proj.weight", l);
            hf_add(out, &n, t, i, F, F, HF_AS_IS, "model.layers.%d.mlp.up_proj.weight", l);
        } else {
            const char* name = t->kind == P_LN1W       ? "model.layers.%d.input_layernorm.weight"
                               : t->kind == P_LN2W     ? "model.layers.%d.post_attention_layernorm.weight"
                               : t->kind == P_ATTPROJW ? "model.layers.%d.self_attn.o_proj.weight"
                                                       : "model.layers.%d.mlp.down_proj.weight";
            hf_add(out, &n, t, i, 0, t->rows, HF_AS_IS, name, l);
        }
    }
    return n;
}

// The safetensors JSON header, padded with spaces to a multiple of 8 bytes (the data then
// starts aligned); fills each tensor's offset.
static void hf_header(HfTensor* ts, int n, Bytes* json) {
    size_t offset = 0;
    char entry[256];
    bytes_append(json, "{", 1);
    for (int i = 0; i < n; i++) {
        HfTensor* h = &ts[i];
        size_t bytes = sizeof(float) * (size_t)h->rows * h->cols;
        int transposed = h->how == HF_TRANSPOSE, vector = h->cols == 1;
        int d0 = transposed ? h->cols : h->rows, d1 = transposed ? h->rows : h->cols;
        int len = vector ? snprintf(entry, sizeof(entry),
                                    "\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},", h->name,
                                    h->rows, offset, offset + bytes)
                         : snprintf(entry, sizeof(entry),
                                    "\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},", h->name,
                                    d0, d1, offset, offset + bytes);
        bytes_append(json, entry, (size_t)len);
        h->offset = offset;
        offset += bytes;
    }
    const char* meta = "\"__metadata__\":{\"format\":\"pt\"}}";
    bytes_append(json, meta, strlen(meta));
    while (json->n % 8) bytes_append(json, " ", 1);
}

// Our row (of h's rows) that is row r of the export: HF_ROPE_ROWS: row j of a head is our
// 2j, row j + hd/2 our 2j+1; otherwise r.
static int hf_our_row(const HfTensor* h, int r, int hd) {
    if (h->how != HF_ROPE_ROWS) return r;
    int head = r / hd, j = r % hd;
    return head * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
}

// One export tensor out of its full tensor `src` (rows x cols, ours), into out.
static void hf_transform(const HfTensor* h, const float* src, int hd, float* out) {
    size_t cols = h->cols;
    const float* s = src + (size_t)h->row0 * cols;
    for (int r = 0; r < h->rows; r++) {
        int from = hf_our_row(h, r, hd);
        for (size_t k = 0; k < cols; k++) {
            if (h->how == HF_TRANSPOSE)
                out[k * h->rows + r] = s[(size_t)r * cols + k];
            else
                out[(size_t)r * cols + k] = s[(size_t)from * cols + k];
        }
    }
}

// One text file of the export, written to its temporary (committed with the others, hf_export).
static void hf_write_text(AtomicFile* f, const char* dir, const char* file, const char* text, size_t n) {
    char path[PATH_CAP];
    atomic_open(f, path_format(path, "--export-hf", "%s/%s", dir, file), "--export-hf");
    atomic_write(f, text, n);
}

// config.json: the shape in transformers' names; eot (the run's end-of-text, run.h eot_resolve;
// -1: none, null) is GPT-2's bos and eos. Dropout 0: the export is for evaluation and generation.
static void hf_write_config(AtomicFile* out, const char* dir, const ModelConfig* c, int eot_id) {
    char* cfg, eot[16] = "null";
    if (eot_id >= 0) snprintf(eot, sizeof(eot), "%d", eot_id);
    if (c->arch == ARCH_GPT2)
        cfg = xstrprintf(
            "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"vocab_size\": %d,\n"
            "  \"n_positions\": %d,\n  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
            "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
            "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
            "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n  \"tie_word_embeddings\": true,\n"
            "  \"torch_dtype\": \"float32\"\n}\n",
            c->vocab, c->seq_len, c->d_model, c->n_layer, c->n_head, c->d_ff, eot, eot);
    else
        cfg = xstrprintf(
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"vocab_size\": %d,\n"
            "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
            "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
            "  \"max_position_embeddings\": %d,\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": 1e-05,\n"
            "  \"rope_theta\": %.1f,\n  \"rope_scaling\": null,\n  \"attention_bias\": false,\n"
            "  \"mlp_bias\": false,\n  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n"
            "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float32\"\n}\n",
            c->vocab, c->d_model, c->d_ff, c->n_layer, c->n_head, c->n_kv_head, c->d_model / c->n_head, c->seq_len,
            (double)c->rope_theta, eot, eot);
    hf_write_text(&out[0], dir, "config.json", cfg, strlen(cfg));
    free(cfg);
    cfg = xstrprintf("{\n  \"bos_token_id\": %s,\n  \"eos_token_id\": %s\n}\n", eot, eot);
    hf_write_text(&out[1], dir, "generation_config.json", cfg, strlen(cfg));
    free(cfg);
}

// The files --export-hf DIR writes (the last three only when the tokenizer has them) and the
// files --import-hf DIR reads: each is an output or input of runtime/run.h's run_files.
#define HF_EXPORT_N 6
static const char* HF_EXPORT_FILES[HF_EXPORT_N] = {"model.safetensors", "config.json", "generation_config.json",
                                                   "vocab.json", "merges.txt", "tokenizer_config.json"};
static const char** HF_TOKENIZER_FILES = HF_EXPORT_FILES + 3;
#define HF_IMPORT_N 2
static const char* HF_IMPORT_FILES[HF_IMPORT_N] = {"model.safetensors", "config.json"};

// The directory of the tokenizer's transformers files beside --tokenizer X.bin (X_hf) into dir.
static const char* hf_tokenizer_dir(const char* tokenizer, char* dir) {
    size_t len = strlen(tokenizer) - (has_suffix(tokenizer, ".bin") ? 4 : 0);
    return path_format(dir, "--tokenizer", "%.*s_hf", (int)len, tokenizer);
}

// The tokenizer files an export copies, as inputs of the run (they must not be outputs).
static void hf_tokenizer_inputs(RunFiles* s, const char* tokenizer) {
    char dir[PATH_CAP], path[PATH_CAP];
    hf_tokenizer_dir(tokenizer, dir);
    for (int i = 0; i < 3; i++) files_input(s, "--tokenizer", path_format(path, "--tokenizer", "%s/%s", dir,
                                                                         HF_TOKENIZER_FILES[i]));
}

// Files transformers' tokenizer loading reads from a model's directory that an export never writes:
// tokenizer.json (the fast tokenizer, read before vocab.json and merges.txt), the special and added tokens.
#define HF_FOREIGN_TOKENIZER_N 3
static const char* HF_FOREIGN_TOKENIZER[HF_FOREIGN_TOKENIZER_N] = {"tokenizer.json", "special_tokens_map.json",
                                                                   "added_tokens.json"};

// A tokenizer file in DIR that this export does not write is refused, never deleted (whoever put it there,
// an earlier export or the user, it is not this run's): beside the new model transformers would load it as
// the model's tokenizer (an earlier export's vocab.json with a model trained on other ids). writes: whether
// this export writes vocab.json, merges.txt and tokenizer_config.json (--tokenizer X.bin with X_hf/).
static void hf_export_stale_tokenizer(const char* dir, int writes) {
    char path[PATH_CAP];
    struct stat st;
    for (int i = 0; i < 3 + HF_FOREIGN_TOKENIZER_N; i++) {
        const char* name = i < 3 ? HF_TOKENIZER_FILES[i] : HF_FOREIGN_TOKENIZER[i - 3];
        if ((i < 3 && writes) || lstat(path_format(path, "--export-hf", "%s/%s", dir, name), &st)) continue;
        fail("--export-hf %s: %s is a tokenizer file this export does not write (%s): transformers would load it "
             "with the new model; remove it or export to another directory", dir, path,
             writes ? "it writes vocab.json, merges.txt and tokenizer_config.json"
                    : "no --tokenizer X.bin with an X_hf directory");
    }
}

// At start-up (rank 0, outputs_check, after files_check): create DIR and check that each
// file can be written, that the tokenizer directory the export copies (if there is one)
// holds all its files now, not after the last step, and that no other tokenizer's file sits
// in DIR (hf_export_stale_tokenizer).
static void hf_export_prepare(const char* dir, const char* tokenizer) {
    char path[PATH_CAP], from[PATH_CAP], why[512];
    struct stat st;
    int writes = tokenizer && !stat(hf_tokenizer_dir(tokenizer, from), &st) && S_ISDIR(st.st_mode);
    if (writes)
        for (int i = 0; i < 3; i++) {
            FILE* f = input_open(path_format(path, "--tokenizer", "%s/%s", from, HF_TOKENIZER_FILES[i]), why,
                                 sizeof(why), NULL);
            if (!f) fail("--export-hf: the tokenizer directory %s is incomplete: %s: %s", from, path, why);
            fclose(f);
        }
    if (mkdir(dir, 0755) && errno != EEXIST) fail("--export-hf %s: cannot create: %s", dir, strerror(errno));
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) fail("--export-hf %s exists and is not a directory", dir);
    hf_export_stale_tokenizer(dir, writes);
    for (int i = 0; i < HF_EXPORT_N; i++)
        output_check(path_format(path, "--export-hf", "%s/%s", dir, HF_EXPORT_FILES[i]), "--export-hf");
}

// The tokenizer's transformers files, when data/prepare.py wrote them beside the --tokenizer
// file (X.bin -> X_hf/): written to their temporaries in dir (out[0..2]). Returns how many (0: none there).
static int hf_copy_tokenizer(AtomicFile* out, const char* dir, const char* tokenizer) {
    char dir_from[PATH_CAP], from[PATH_CAP], why[512];
    struct stat st;
    if (stat(hf_tokenizer_dir(tokenizer, dir_from), &st) || !S_ISDIR(st.st_mode)) return 0;
    for (int i = 0; i < 3; i++) {
        FILE* f = input_open(path_format(from, "--tokenizer", "%s/%s", dir_from, HF_TOKENIZER_FILES[i]), why,
                             sizeof(why), NULL);
        if (!f) fail("--export-hf: cannot read %s: %s", from, why);
        fstat(fileno(f), &st);
        if (st.st_size > (64 << 20)) fail("--export-hf: %s is larger than 64 MiB: not a tokenizer file", from);
        char* text = (char*)xmalloc((size_t)st.st_size + 1);
        if (fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) fail("--export-hf: read of %s failed", from);
        fclose(f);
        hf_write_text(&out[i], dir, HF_TOKENIZER_FILES[i], text, (size_t)st.st_size);
        free(text);
    }
    return 3;
}

// --export-hf DIR at the end of the run: every rank takes part in the gathers, rank 0 writes. A stop
// (SIGINT, SIGTERM, SIGHUP) abandons it within a tensor, the files in DIR as they were; returns that
// signal, or 0 once written.
static int hf_export(const char* dir, const Layout* L, const ParamLayout* P, const ModelConfig* c, const float* params,
                      int eot, const char* tokenizer) {
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    HfTensor* ts = (HfTensor*)xcalloc(3 * (size_t)full->n, sizeof(HfTensor));
    int n = hf_tensors(c, full, ts), hd = c->d_model / c->n_head;
    Bytes json = {NULL, 0, 0};
    hf_header(ts, n, &json);
    size_t max_t = param_layout_max_tensor(full);
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    float* out = (float*)xmalloc(sizeof(float) * max_t);
    AtomicFile f;
    memset(&f, 0, sizeof(f));
    char path[PATH_CAP], why[512];
    if (L->rank == 0) {
        uint64_t len = json.n;  // written as the host holds it: little-endian (checked above)
        atomic_open(&f, path_format(path, "--export-hf", "%s/model.safetensors", dir), "--export-hf");
        atomic_write(&f, &len, sizeof(len));
        atomic_write(&f, json.bytes, json.n);
    }
    int stop = 0;
    for (int i = 0, k = 0; i < full->n && !(stop = ckpt_stop_requested(&L->group[GROUP_WORLD])); i++) {
        const Tensor* ft = &full->t[i];
        gather_full_tensor(L, P, ft, params, buf);
        if (L->rank != 0) continue;
        if (state_values_check(buf, ft->size, 0, ft->name, why, sizeof(why))) {
            atomic_abandon(&f);
            fail("--export-hf %s: not written: %s", dir, why);
        }
        for (; k < n && ts[k].src == i; k++) {
            hf_transform(&ts[k], buf, hd, out);
            atomic_write(&f, out, sizeof(float) * (size_t)ts[k].rows * ts[k].cols);
        }
    }
    AtomicFile files[HF_EXPORT_N];  // all written, then all renamed: a failure leaves the old export whole
    int n_files = 1;
    files[0] = f;
    if (L->rank == 0 && !stop) {
        hf_write_config(files + 1, dir, c, eot);
        n_files = 3 + (tokenizer ? hf_copy_tokenizer(files + 3, dir, tokenizer) : 0);
    }
    if (!stop) stop = ckpt_stop_requested(&L->group[GROUP_WORLD]);  // (one while the last files were written)
    char shown[4 * PATH_CAP];
    if (L->rank == 0 && stop) {
        for (int i = 0; i < n_files; i++) atomic_abandon(&files[i]);
        if (stop != SIGPIPE)
            fprintf(stderr, "stopped by signal %d during --export-hf: %s not written (its files are as they were)\n",
                    stop, printable(dir, shown, sizeof(shown)));
    } else if (L->rank == 0) {
        atomic_commit_all(files, n_files);
        printf("exported a Hugging Face %s model to %s (model.safetensors, config.json%s)\n",
               c->arch == ARCH_GPT2 ? "GPT2LMHeadModel" : "LlamaForCausalLM", printable(dir, shown, sizeof(shown)),
               n_files > 3 ? ", the tokenizer's vocab.json and merges.txt" : "");
    }
    free(json.bytes);
    free(buf);
    free(out);
    free(ts);
    free(full);
    return stop;
}

// ----------------------------------------------------------------------------
// --import-hf DIR: start from DIR/model.safetensors, an export of this model's shape (ours, or
// transformers' own file of the same model: GPT-2's names may also lack "transformer.").
// Every rank reads its own shard: each tensor is found by name in the header, its dtype (F32),
// shape and data offsets checked against this model and the file, read, turned back into our
// layout (hf_transform's inverse) and every value checked finite.

// p past JSON white space (a header written by another tool may have it between tokens).
static const char* hf_skip_space(const char* p, const char* end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

// After the string "key" at p (a key: followed by ':'): where its value starts, or NULL.
static const char* hf_after_key(const char* p, const char* end, const char* key) {
    size_t n = strlen(key);
    if (p + n + 2 > end || p[0] != '"' || strncmp(p + 1, key, n) || p[n + 1] != '"') return NULL;
    p = hf_skip_space(p + n + 2, end);
    return p < end && *p == ':' ? hf_skip_space(p + 1, end) : NULL;
}

// The value after "key": inside one header entry [e, end) (no nesting: the entry is flat).
static const char* hf_field(const char* e, const char* end, const char* key) {
    for (const char* p = e; p < end; p++) {
        const char* v = hf_after_key(p, end, key);
        if (v) return v;
    }
    return NULL;
}

// The numbers of a JSON list "[a,b,...]" at p (at most max); how many, or -1.
static int hf_numbers(const char* p, const char* end, long long* out, int max) {
    if (!p || *p != '[') return -1;
    int n = 0;
    for (p++; p < end && *p != ']'; p++) {
        if (*p == ',' || *p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') continue;
        char* after;
        long long x = strtoll(p, &after, 10);
        if (after == p || n == max || x < 0) return -1;
        out[n++] = x, p = after - 1;
    }
    return p < end ? n : -1;
}

// Read tensor h into out (h's own layout, as exported) from its entry in the header (the '{' of its value at
// the header's top level, hf_header_check's; NULL: not there; the header ends at json_end); the data section
// starts at data0 and holds data_bytes.
static void hf_read_tensor(FILE* f, const char* path, const char* e, const char* json_end, long long data0,
                           long long data_bytes, const HfTensor* h, float* out) {
    if (!e || *e != '{') data_fail("--import-hf %s: no tensor %s", path, h->name);
    const char* end = (const char*)memchr(e, '}', json_end - e);
    if (!end) data_fail("--import-hf %s: %s: malformed header", path, h->name);
    const char* dtype = hf_field(e, end, "dtype");
    if (!dtype || strncmp(dtype, "\"F32\"", 5))
        data_fail("--import-hf %s: %s is not F32 (only fp32 files are read)", path, h->name);
    long long shape[3], off[3];
    int transposed = h->how == HF_TRANSPOSE, dims = hf_numbers(hf_field(e, end, "shape"), end, shape, 3);
    long long want0 = transposed ? h->cols : h->rows, want1 = transposed ? h->rows : h->cols;
    int match = h->cols == 1 ? dims == 1 && shape[0] == h->rows : dims == 2 && shape[0] == want0 && shape[1] == want1;
    if (!match && dims == 2)
        data_fail("--import-hf %s: %s is [%lld, %lld] in the file, [%lld, %lld] in this model (its width, heads and "
                  "vocabulary: config.json and the flags)", path, h->name, shape[0], shape[1], want0, want1);
    if (!match)
        data_fail("--import-hf %s: %s has another shape than this model's [%lld, %lld]", path, h->name, want0, want1);
    size_t bytes = sizeof(float) * (size_t)h->rows * h->cols;
    if (hf_numbers(hf_field(e, end, "data_offsets"), end, off, 3) != 2 || off[1] - off[0] != (long long)bytes ||
        off[1] > data_bytes)
        data_fail("--import-hf %s: %s: data offsets outside the file or of another size", path, h->name);
    if (fseeko(f, data0 + off[0], SEEK_SET) || fread(out, 1, bytes, f) != bytes)
        data_fail("--import-hf %s: read of %s failed", path, h->name);
}

// The inverse of hf_transform: export tensor h (in) back into its rows of our full tensor.
static void hf_untransform(const HfTensor* h, const float* in, int hd, float* full) {
    size_t cols = h->cols;
    float* d = full + (size_t)h->row0 * cols;
    for (int r = 0; r < h->rows; r++) {
        int to = hf_our_row(h, r, hd);
        for (size_t k = 0; k < cols; k++) {
            if (h->how == HF_TRANSPOSE)
                d[(size_t)r * cols + k] = in[k * h->rows + r];
            else
                d[(size_t)to * cols + k] = in[(size_t)r * cols + k];
        }
    }
}

// config.json's fields: what each means for this model. HfField: must equal ours (the JSON text,
// or the number within 1e-6; `null` stands for null_is where that is not NAN: GPT-2's n_inner null
// is 4 x n_embd); HF_FIELDS: an object whose fields are checked the same way (transformers 5's
// rope_parameters); HF_IGNORED: no effect on the weights' math (ids, dtype, dropout and
// initialization of training, generation). Any other field is refused: its effect is unknown.
enum { HF_SAME_INT, HF_SAME_NUM, HF_SAME_TEXT, HF_FIELDS };
typedef struct HfField { const char* key; int kind; double num; const char* text; double null_is; } HfField;
static const char* const HF_IGNORED[] = {
    "architectures", "torch_dtype", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id",
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "initializer_range", "use_cache",
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "pretraining_tp", "dtype"};  // dtype: transformers 5's name for torch_dtype

// The end of the JSON value at v (a string, number, literal, [..] or {..}): the ',' or '}' after it, or NULL.
static const char* hf_json_value_end(const char* v) {
    int depth = 0, in_string = 0;
    for (const char* p = v; *p; p++) {
        if (in_string) { if (*p == '\\' && p[1]) p++; else if (*p == '"') in_string = 0; continue; }
        if (*p == '"') in_string = 1;
        else if (*p == '[' || *p == '{') depth++;
        else if (*p == ']' || *p == '}') { if (depth-- == 0) return p; }
        else if (*p == ',' && depth == 0) return p;
    }
    return NULL;
}

// The fields of the JSON object at obj ('{'), each one of fields[] (its value compared with ours) or
// HF_IGNORED (at the top level only), else refused; an HF_FIELDS field's object against nested[]. Returns
// the object's closing '}'; an object that does not close (a truncated file) is refused.
static const char* hf_check_fields(const char* path, const char* obj, const HfField* fields, int n_fields, int top,
                                   const ModelConfig* c, const HfField* nested, int n_nested) {
    const char* p = obj;
    while (*p != '}') {
        const char* key = p + 1;
        while (*key == ' ' || *key == '\n' || *key == '\t' || *key == '\r') key++;
        if (*key == '}' && p == obj) return key;  // {}
        if (*key != '"') data_fail("--import-hf %s: not a JSON object of fields (truncated?)", path);
        const char* key_end = strchr(key + 1, '"');
        const char* colon = key_end ? strchr(key_end, ':') : NULL;
        if (!colon) data_fail("--import-hf %s: not a JSON object of fields", path);
        const char* v = colon + 1;
        while (*v == ' ' || *v == '\n' || *v == '\t' || *v == '\r') v++;
        const char* end = hf_json_value_end(v);
        if (!end) data_fail("--import-hf %s: not a JSON object of fields", path);
        int vlen = (int)(end - v);
        while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\n' || v[vlen - 1] == '\r')) vlen--;
        int klen = (int)(key_end - key - 1), known = 0;
        for (size_t i = 0; top && i < sizeof(HF_IGNORED) / sizeof(HF_IGNORED[0]); i++)
            known |= (int)strlen(HF_IGNORED[i]) == klen && !strncmp(HF_IGNORED[i], key + 1, klen);
        for (int i = 0; i < n_fields && !known; i++) {
            const HfField* h = &fields[i];
            if ((int)strlen(h->key) != klen || strncmp(h->key, key + 1, klen)) continue;
            known = 1;
            if (h->kind == HF_FIELDS) {
                if (*v != '{') data_fail("--import-hf %s: %s is not a JSON object", path, h->key);
                hf_check_fields(path, v, nested, n_nested, 0, c, NULL, 0);  // (its '}' ends the value: end)
                continue;
            }
            char ours[64];
            // null: a default that stands for a number (null_is), or none
            int is_null = vlen == 4 && !strncmp(v, "null", 4), null_number = is_null && !isnan(h->null_is);
            if (h->kind == HF_SAME_TEXT) snprintf(ours, sizeof(ours), "%s", h->text);
            else snprintf(ours, sizeof(ours), h->kind == HF_SAME_INT ? "%.0f" : "%g", h->num);
            int same = h->kind == HF_SAME_TEXT ? (int)strlen(ours) == vlen && !strncmp(ours, v, vlen)
                       : is_null           ? null_number && fabs(h->null_is - h->num) <= 1e-6 * fabs(h->num)
                                           : fabs(strtod(v, NULL) - h->num) <= 1e-6 * fabs(h->num);
            int shown = vlen < 40 ? vlen : 40;
            if (!same && !strcmp(h->key, "model_type"))
                data_fail("--import-hf %s: model_type %.*s, but this run's architecture is %s (%s)", path, shown, v,
                          arch_name(c->arch),
                          c->arch == ARCH_GPT2 ? "add --arch llama, or a llama --model" : "a gpt2 --model");
            if (!same)
                data_fail("--import-hf %s: %s is %.*s%s, this model's %s (set by --model and the shape flags%s)", path,
                     h->key, shown, v, null_number ? " (the default)" : "", ours,
                     !strcmp(h->key, "rope_theta") ? ", --rope-theta" : "");
        }
        if (!known)
            data_fail("--import-hf %s: field '%.*s' is not one this trainer reads (its effect on the model is "
                      "unknown): refused", path, klen < 60 ? klen : 60, key + 1);
        p = end;
    }
    return p;
}

// --import-hf DIR/config.json, when there: every field honoured (compared with this model's) or
// refused, one error line naming the field (an --arch llama hint when the architecture differs).
// Returns whether there was one.
static int hf_config_check(const char* dir, const ModelConfig* c) {
    char path[PATH_CAP], why[512];
    path_format(path, "--import-hf", "%s/config.json", dir);
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) return 0;  // weights alone (safetensors): their shapes are still checked
    struct stat st;
    if (fstat(fileno(f), &st) || st.st_size >= (1 << 20))
        data_fail("--import-hf %s: larger than 1 MiB: not a model's config.json", path);
    char* text = (char*)xcalloc(1 << 20, 1);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    int gpt2 = c->arch == ARCH_GPT2, hd = c->d_model / c->n_head;
    double no = NAN;
    const HfField fields[] = {
        {"model_type", HF_SAME_TEXT, 0, gpt2 ? "\"gpt2\"" : "\"llama\"", no},
        {"vocab_size", HF_SAME_INT, (double)c->vocab, NULL, no},
        {gpt2 ? "n_embd" : "hidden_size", HF_SAME_INT, (double)c->d_model, NULL, no},
        {gpt2 ? "n_layer" : "num_hidden_layers", HF_SAME_INT, (double)c->n_layer, NULL, no},
        {gpt2 ? "n_head" : "num_attention_heads", HF_SAME_INT, (double)c->n_head, NULL, no},
        {gpt2 ? "n_inner" : "intermediate_size", HF_SAME_INT, (double)c->d_ff, NULL, gpt2 ? 4.0 * c->d_model : no},
        {gpt2 ? "n_positions" : "max_position_embeddings", HF_SAME_INT, (double)c->seq_len, NULL, no},
        {"num_key_value_heads", HF_SAME_INT, (double)c->n_kv_head, NULL, no},
        {"head_dim", HF_SAME_INT, (double)hd, NULL, no},
        {"n_ctx", HF_SAME_INT, (double)c->seq_len, NULL, no},
        {"rope_theta", HF_SAME_NUM, (double)c->rope_theta, NULL, no},
        {"rope_scaling", HF_SAME_TEXT, 0, "null", no},
        {"rope_parameters", HF_FIELDS, 0, NULL, no},
        {gpt2 ? "layer_norm_epsilon" : "rms_norm_eps", HF_SAME_NUM, 1e-5, NULL, no},
        {gpt2 ? "activation_function" : "hidden_act", HF_SAME_TEXT, 0, gpt2 ? "\"gelu_new\"" : "\"silu\"", no},
        {"tie_word_embeddings", HF_SAME_TEXT, 0, gpt2 ? "true" : "false", no},
        {"attention_bias", HF_SAME_TEXT, 0, "false", no},
        {"mlp_bias", HF_SAME_TEXT, 0, "false", no},
        {"scale_attn_weights", HF_SAME_TEXT, 0, "true", no},
        {"scale_attn_by_inverse_layer_idx", HF_SAME_TEXT, 0, "false", no},
        {"reorder_and_upcast_attn", HF_SAME_TEXT, 0, "false", no},
        {"add_cross_attention", HF_SAME_TEXT, 0, "false", no},
    };
    // transformers 5 writes RoPE's settings as one object: {"rope_theta": ..., "rope_type": "default"}
    const HfField rope_fields[] = {
        {"rope_theta", HF_SAME_NUM, (double)c->rope_theta, NULL, no},
        {"rope_type", HF_SAME_TEXT, 0, "\"default\"", no},
    };
    const char* obj = text + strspn(text, " \t\r\n");
    if (strlen(text) != n) data_fail("--import-hf %s: holds a NUL byte (at byte %zu): not JSON", path, strlen(text));
    if (*obj != '{') data_fail("--import-hf %s: not a JSON object (%s)", path, n ? "it must start with '{'" : "empty");
    const char* end = hf_check_fields(path, obj, fields, (int)(sizeof(fields) / sizeof(fields[0])), 1, c, rope_fields,
                                      (int)(sizeof(rope_fields) / sizeof(rope_fields[0])));
    if (end[1 + strspn(end + 1, " \t\r\n")])
        data_fail("--import-hf %s: text after the JSON object's closing '}'", path);
    free(text);
    return 1;
}

// The layer a tensor's name is of ("[transformer.]h.N." or "[model.]layers.N."), or -1.
static int hf_name_layer(const char* name) {
    static const char* prefixes[4] = {"transformer.h.", "h.", "model.layers.", "layers."};
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(name, prefixes[i], n) || name[n] < '0' || name[n] > '9') continue;
        long layer = strtol(name + n, NULL, 10);  // past int: no layer of any model (its name is refused)
        return layer < INT_MAX ? (int)layer : -1;
    }
    return -1;
}

// Every tensor of the file must be one this model reads, in as many layers: a file of more layers
// than config.json and the flags say (its last layers were dropped), fewer, or with a tensor of
// another model is refused, never imported in part. Widths, heads (where they shape a tensor) and
// the vocabulary are each tensor's shape, hf_read_tensor's check. GPT-2's causal-mask buffers of
// older transformers files (h.N.attn.bias, h.N.attn.masked_bias) hold no weights: passed over.
// entry[k]: where tensor ts[k]'s value starts, its key at the header's top level (NULL: not there), so that
// the same name inside another value (__metadata__'s) is never taken for it.
static void hf_header_check(const char* path, const char* json, size_t len, const HfTensor* ts, int n,
                            const ModelConfig* c, int with_config, const char** entry) {
    const char *end = json + len, *p = hf_skip_space(json, end), *closing = NULL;  // closing: the header's '}'
    char name[128], first_other[128] = "", shown[4 * 128];
    int top = -1;
    if (p == end || *p != '{') data_fail("--import-hf %s: malformed header (not a JSON object)", path);
    for (p = hf_skip_space(p + 1, end); p < end && *p == '"';) {
        const char* q = p + 1;
        while (q < end && *q != '"') q += *q == '\\' ? 2 : 1;
        const char* v = q < end ? hf_skip_space(q + 1, end) : end;
        const char* v_end = v < end && *v == ':' ? hf_json_value_end(hf_skip_space(v + 1, end)) : NULL;
        if (!v_end) data_fail("--import-hf %s: malformed header", path);
        snprintf(name, sizeof(name), "%.*s", (int)(q - p - 1 < 127 ? q - p - 1 : 127), p + 1);
        int layer = hf_name_layer(name), known = !strcmp(name, "__metadata__");
        if (layer > top) top = layer;
        if (c->arch == ARCH_GPT2 && layer >= 0 &&
            (has_suffix(name, ".attn.bias") || has_suffix(name, ".attn.masked_bias")))
            known = 1;
        int k = known ? n : 0;  // (GPT-2's names may lack "transformer.")
        while (k < n && strcmp(ts[k].name, name) &&
               (strncmp(ts[k].name, "transformer.", 12) || strcmp(ts[k].name + 12, name)))
            k++;
        if (k < n && entry[k])  // a reader keeps one of the two (ours the first, transformers' the last)
            data_fail("--import-hf %s: tensor %s is in the header twice (under the same name, or with and without "
                      "'transformer.'): which one is the model's is unknown", path, ts[k].name);
        if (k < n) entry[k] = hf_skip_space(v + 1, end);
        known |= k < n;
        if (!known && !first_other[0]) snprintf(first_other, sizeof(first_other), "%s", name);
        if (*v_end == '}') closing = v_end;
        p = *v_end == ',' ? hf_skip_space(v_end + 1, end) : end;
    }
    if (!closing && p < end && *p == '}') closing = p;  // {} (or a last ',')
    if (!closing || hf_skip_space(closing + 1, end) != end)  // past the '}': only the padding's spaces
        data_fail("--import-hf %s: malformed header (not one JSON object%s)", path,
                  closing ? ": text after its closing '}'" : "");
    if (top + 1 != c->n_layer)
        data_fail("--import-hf %s: the file holds %d layers, %s %d (n_layer; --n-layer): not imported in part", path,
                  top + 1, with_config ? "config.json and this model have" : "this model has", c->n_layer);
    if (first_other[0])
        data_fail("--import-hf %s: tensor %s is not one of this model's (%s, %d layers): not imported in part", path,
                  printable(first_other, shown, sizeof(shown)), arch_name(c->arch), c->n_layer);
}

// --import-hf DIR into this rank's shard. Its errors leave by data_fail: hf_import makes them one line.
static void hf_import_shard(const char* dir, const Layout* L, const ParamLayout* P, const ModelConfig* c,
                            float* params, char* path) {
    char why[512];
    int with_config = hf_config_check(dir, c);
    path_format(path, "--import-hf", "%s/model.safetensors", dir);
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) data_fail("--import-hf %s: cannot open: %s", path, why);
    struct stat st;
    fstat(fileno(f), &st);
    uint64_t len = 0;
    if (fread(&len, 8, 1, f) != 1 || len > (100u << 20) || (long long)len + 8 > (long long)st.st_size)
        data_fail("--import-hf %s: not a safetensors file (header length %llu of a %lld-byte file)", path,
             (unsigned long long)len, (long long)st.st_size);
    char* json = (char*)xmalloc(len + 1);
    if (fread(json, 1, len, f) != len) data_fail("--import-hf %s: truncated header", path);
    json[len] = 0;
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    HfTensor* ts = (HfTensor*)xcalloc(3 * (size_t)full->n, sizeof(HfTensor));
    int n = hf_tensors(c, full, ts), hd = c->d_model / c->n_head;
    const char** entry = (const char**)xcalloc((size_t)n, sizeof(char*));
    hf_header_check(path, json, len, ts, n, c, with_config, entry);
    long long data0 = 8 + (long long)len;  // where the data section starts
    size_t max_t = param_layout_max_tensor(full);
    float* in = (float*)xmalloc(sizeof(float) * max_t);
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        int k = 0;
        while (k < n && full->t[ts[k].src].full_offset != t->full_offset) k++;
        memset(buf, 0, sizeof(float) * (size_t)t->rows * t->cols);  // the padded vocabulary rows stay 0
        for (; k < n && full->t[ts[k].src].full_offset == t->full_offset; k++) {
            hf_read_tensor(f, path, entry[k], json + len, data0, (long long)st.st_size - data0, &ts[k], in);
            hf_untransform(&ts[k], in, hd, buf);
        }
        if (state_values_check(buf, (size_t)t->rows * t->cols, 0, t->name, why, sizeof(why)))
            data_fail("--import-hf %s: %s", path, why);
        CopyCtx cc = {params + t->offset, buf, 0};
        tensor_runs(t, L->tp, L->tp_rank, copy_run, &cc);
        stop_if_signalled("reading --import-hf");
    }
    fclose(f);
    free(json);
    free(entry);
    free(full);
    free(ts);
    free(in);
    free(buf);
}

static void hf_import(const char* dir, const Layout* L, const ParamLayout* P, const ModelConfig* c, float* params) {
    char path[PATH_CAP], shown[4 * PATH_CAP];
    import_agree(L, hf_import_shard(dir, L, P, c, params, path));
    if (L->rank == 0) printf("imported Hugging Face weights from %s\n", printable(path, shown, sizeof(shown)));
}

#endif
