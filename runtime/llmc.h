// runtime/llmc.h: llm.c's GPT-2 checkpoint, read (--import-llmc) and written (--export-llmc).
// Shared by both builds.
#ifndef LLMC_H
#define LLMC_H

#include "runtime/ckpt.h"

// llm.c interop: its GPT-2 checkpoint (gpt2_124M.bin and friends, version 3): 256 int32
// header (magic 20240326, version 3, max_seq_len, vocab, n_layer, n_head, d_model,
// padded vocab), then fp32 tensors grouped by kind over all layers: wte, wpe, ln1w,
// ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw,
// lnfb. Our canonical order groups by layer instead; llmc_offset() maps one to the other.

#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3

// Offset in llm.c's file (after the header) of element k of tensor t of the full layout.
static size_t llmc_offset(const ModelConfig* c, const Tensor* t, size_t k) {
    size_t C = c->d_model, L = c->n_layer, V = c->vocab_padded, T = c->seq_len, F = c->d_ff;
    size_t per_kind[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, F * C, F, C * F, C};  // P_LN1W .. P_FCPROJB
    size_t off = V * C + T * C;
    if (t->layer < 0) {
        if (t->kind == P_WTE) return k;
        if (t->kind == P_WPE) return V * C + k;
        for (int i = 0; i < N_LAYER_KINDS; i++) off += L * per_kind[i];
        return off + (t->kind == P_LNFB ? C : 0) + k;
    }
    for (int i = 0; i < t->kind; i++) off += L * per_kind[i];
    return off + (size_t)t->layer * per_kind[t->kind] + k;
}

static const char* llmc_check(const ModelConfig* c, char* why) {
    if (c->arch != ARCH_GPT2) { sprintf(why, "llm.c checkpoints are GPT-2 (use --arch gpt2)"); return why; }
    if (c->d_ff != 4 * c->d_model) { sprintf(why, "llm.c GPT-2 needs d_ff = 4*d_model"); return why; }
    return NULL;
}

// --import-llmc FILE: load llm.c GPT-2 weights into this rank's shard (the shape must match,
// every value must be finite). Its errors leave by data_fail: import_agree makes them one line.
static void llmc_import_shard(const char* path, const Layout* L, const ParamLayout* P, const ModelConfig* c,
                              float* params) {
    char why[512];
    if (llmc_check(c, why)) data_fail("--import-llmc %s: %s", path, why);
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) data_fail("--import-llmc %s: cannot open: %s", path, why);
    int32_t h[256];
    if (fread(h, 4, 256, f) != 256) data_fail("--import-llmc %s: truncated header", path);
    if (h[0] != LLMC_MAGIC)
        data_fail("--import-llmc %s: bad magic %d (expected %d, an llm.c GPT-2 checkpoint)", path, h[0], LLMC_MAGIC);
    if (h[1] != LLMC_VERSION) data_fail("--import-llmc %s: version %d not supported (fp32 version 3 only)", path, h[1]);
    int want[6] = {c->seq_len, c->vocab, c->n_layer, c->n_head, c->d_model, c->vocab_padded};
    const char* names[6] = {"max_seq_len", "vocab", "n_layer", "n_head", "d_model", "padded vocab"};
    for (int i = 0; i < 6; i++)
        if (h[2 + i] != want[i])
            data_fail("--import-llmc %s: %s is %d in the file but %d here (set the shape flags to match)", path,
                      names[i], h[2 + i], want[i]);
    struct stat st;
    fstat(fileno(f), &st);
    size_t full_n = 0;
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    full_n = full->n_full;
    if ((size_t)st.st_size != 1024 + 4 * full_n)
        data_fail("--import-llmc %s: %lld bytes, expected %zu", path, (long long)st.st_size, 1024 + 4 * full_n);
    size_t max_t = param_layout_max_tensor(P);
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        size_t n = (size_t)t->rows * t->cols;  // the full tensor: contiguous in llm.c's file too
        if (fseeko(f, 1024 + 4 * (long long)llmc_offset(c, t, 0), SEEK_SET) || fread(buf, 4, n, f) != n)
            data_fail("--import-llmc %s: read of %s failed", path, t->name);
        if (state_values_check(buf, n, 0, t->name, why, sizeof(why))) data_fail("--import-llmc %s: %s", path, why);
        CopyCtx cc = {params + t->offset, buf, 0};
        tensor_runs(t, L->tp, L->tp_rank, copy_run, &cc);
        stop_if_signalled("reading --import-llmc");
    }
    fclose(f);
    free(buf); free(full);
}

static void llmc_import(const char* path, const Layout* L, const ParamLayout* P, const ModelConfig* c, float* params) {
    import_agree(L, llmc_import_shard(path, L, P, c, params));
    char shown[4 * PATH_CAP];
    if (L->rank == 0) printf("imported llm.c weights from %s\n", printable(path, shown, sizeof(shown)));
}

// --export-llmc FILE: write the current weights as an llm.c GPT-2 checkpoint (rank 0 writes,
// atomically, only finite weights; every rank takes part in the gather).
static int llmc_export(const char* path, const Layout* L, const ParamLayout* P, const ModelConfig* c,
                       const float* params) {
    char why[512];
    if (llmc_check(c, why)) fail("--export-llmc %s: %s", path, why);
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    float* out = L->rank == 0 ? (float*)xmalloc(sizeof(float) * full->n_full) : NULL;
    size_t max_t = param_layout_max_tensor(full);
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    int stop = 0;
    for (int i = 0; i < full->n && !(stop = ckpt_stop_requested(&L->group[GROUP_WORLD])); i++) {
        const Tensor* ft = &full->t[i];
        gather_full_tensor(L, P, ft, params, buf);
        if (!out) continue;
        if (state_values_check(buf, ft->size, 0, ft->name, why, sizeof(why)))
            fail("--export-llmc %s: not written: %s", path, why);
        memcpy(out + llmc_offset(c, ft, 0), buf, sizeof(float) * ft->size);
    }
    AtomicFile f;
    memset(&f, 0, sizeof(f));
    if (out && !stop) {  // rank 0 writes in 64 MiB pieces, each after a look for a stop of its own
        int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION, c->seq_len, c->vocab,
                          c->n_layer, c->n_head,    c->d_model, c->vocab_padded};
        atomic_open(&f, path, "--export-llmc");
        atomic_write(&f, h, sizeof(h));
        for (size_t at = 0, piece = (size_t)1 << 24; at < full->n_full && !stop_signal; at += piece)
            atomic_write(&f, out + at, sizeof(float) * (full->n_full - at < piece ? full->n_full - at : piece));
    }
    if (!stop) stop = ckpt_stop_requested(&L->group[GROUP_WORLD]);  // (the same answer on every rank)
    char shown[4 * PATH_CAP];
    if (out && stop) {
        if (f.f) atomic_abandon(&f);
        if (stop != SIGPIPE)
            fprintf(stderr, "stopped by signal %d during --export-llmc: %s not written (a file there is as it was)\n",
                    stop, printable(path, shown, sizeof(shown)));
    } else if (out) {
        atomic_commit(&f);
        printf("exported llm.c weights to %s\n", printable(path, shown, sizeof(shown)));
    }
    free(out); free(buf); free(full);
    return stop;
}

#endif
