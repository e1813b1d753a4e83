// ckpt.h: checkpoints in a layout-independent form, written atomically. Shared by both builds.
//
// File ckpt_<step>.bin (all little-endian):
//   header: 256 int32 (see CK_* below; magic 20261202, version 1)
//   params: n_full float32, the full unsharded model in canonical order (params.h)
//   adam m: n_full float32, same order
//   adam v: n_full float32, same order
// The data position and RNG state follow from (step, seed, global_batch): the batch
// order and the sampler are pure functions of them, so they are all a run needs to
// continue exactly. Writing: --ckpt-dir is checked at start-up (ckpt_dir_prepare); rank 0
// checks every value (finite, AdamW v >= 0: a state that is not is never saved), writes
// <file>.tmp, fsyncs, renames it into place, fsyncs the directory, then rewrites the
// manifest LATEST (same way) last; a run killed at any point leaves the previous
// checkpoint and manifest intact. Reading: every rank reads the pieces of its own shard,
// so a checkpoint saved under one layout resumes under any other; every value is checked
// again, with an error naming the file and tensor.
#ifndef CKPT_H
#define CKPT_H

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/args.h"
#include "runtime/files.h"
#include "parallel/grid.h"
#include "model/params.h"

#define CKPT_MAGIC 20261202
#define CKPT_VERSION 1
enum { CK_MAGIC, CK_VERSION, CK_ARCH, CK_N_LAYER, CK_N_HEAD, CK_N_KV_HEAD, CK_D_MODEL, CK_D_FF, CK_SEQ_LEN, CK_VOCAB,
       CK_VOCAB_PADDED, CK_STEP, CK_SEED_LO, CK_SEED_HI, CK_DP, CK_TP, CK_PP, CK_VPP, CK_ZERO, CK_SP, CK_N_FULL_LO,
       CK_N_FULL_HI, CK_GLOBAL_BATCH, CK_MICRO_BATCH, CK_SCHEDULE, CK_RECOMPUTE, CK_STEPS };

// ----------------------------------------------------------------------------
// SIGTERM / SIGINT: finish the step, save, exit.

static volatile sig_atomic_t ckpt_signal = 0;
static void ckpt_on_signal(int sig) { ckpt_signal = sig; }
static void ckpt_install_signals(void) {
    signal(SIGTERM, ckpt_on_signal);
    signal(SIGINT, ckpt_on_signal);
}
// Collective: true on every rank once any rank got a signal.
static int ckpt_stop_requested(Comm* world) {
    int s = ckpt_signal != 0;
    if (world->size > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_INT, MPI_MAX, world->mpi));
    return s;
}

// ----------------------------------------------------------------------------

static void ckpt_header_fill(int32_t* h, const ModelConfig* c, int step, size_t n_full) {
    memset(h, 0, 256 * sizeof(int32_t));
    h[CK_MAGIC] = CKPT_MAGIC, h[CK_VERSION] = CKPT_VERSION, h[CK_ARCH] = c->arch;
    h[CK_N_LAYER] = c->n_layer, h[CK_N_HEAD] = c->n_head, h[CK_N_KV_HEAD] = c->n_kv_head, h[CK_D_MODEL] = c->d_model;
    h[CK_D_FF] = c->d_ff, h[CK_SEQ_LEN] = c->seq_len, h[CK_VOCAB] = c->vocab, h[CK_VOCAB_PADDED] = c->vocab_padded;
    h[CK_STEP] = step, h[CK_SEED_LO] = (int32_t)(c->seed & 0xffffffffu), h[CK_SEED_HI] = (int32_t)(c->seed >> 32);
    h[CK_DP] = c->dp, h[CK_TP] = c->tp, h[CK_PP] = c->pp, h[CK_VPP] = c->vpp, h[CK_ZERO] = c->zero, h[CK_SP] = c->sp;
    h[CK_N_FULL_LO] = (int32_t)(n_full & 0xffffffffu), h[CK_N_FULL_HI] = (int32_t)(n_full >> 32);
    h[CK_GLOBAL_BATCH] = c->global_batch, h[CK_MICRO_BATCH] = c->micro_batch;
    h[CK_SCHEDULE] = c->schedule, h[CK_RECOMPUTE] = c->recompute, h[CK_STEPS] = c->steps;
}

static size_t ckpt_header_n_full(const int32_t* h) { return (size_t)(uint32_t)h[CK_N_FULL_LO] | ((size_t)(uint32_t)h[CK_N_FULL_HI] << 32); }

// Check a header against the model being trained; NULL if it fits, else why not.
static const char* ckpt_header_check(const int32_t* h, const ModelConfig* c, size_t n_full, long long file_size, char* why) {
    if (h[CK_MAGIC] != CKPT_MAGIC) { sprintf(why, "bad magic %d (expected %d)", h[CK_MAGIC], CKPT_MAGIC); return why; }
    if (h[CK_VERSION] != CKPT_VERSION) { sprintf(why, "unsupported version %d (expected %d)", h[CK_VERSION], CKPT_VERSION); return why; }
    struct { int k; int want; const char* name; } f[] = {
        {CK_ARCH, c->arch, "arch"}, {CK_N_LAYER, c->n_layer, "n_layer"}, {CK_N_HEAD, c->n_head, "n_head"},
        {CK_N_KV_HEAD, c->n_kv_head, "n_kv_head"}, {CK_D_MODEL, c->d_model, "d_model"}, {CK_D_FF, c->d_ff, "d_ff"},
        {CK_SEQ_LEN, c->seq_len, "seq_len"}, {CK_VOCAB, c->vocab, "vocab"}, {CK_VOCAB_PADDED, c->vocab_padded, "vocab_padded"}};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (h[f[i].k] != f[i].want) { sprintf(why, "model %s is %d in the checkpoint but %d here", f[i].name, h[f[i].k], f[i].want); return why; }
    if (ckpt_header_n_full(h) != n_full) { sprintf(why, "holds %zu parameters, this model has %zu", ckpt_header_n_full(h), n_full); return why; }
    if (h[CK_STEP] < 0) { sprintf(why, "negative step %d", h[CK_STEP]); return why; }
    long long want = 1024 + 3LL * 4 * (long long)n_full;
    if (file_size != want) { sprintf(why, "size %lld bytes, expected %lld (truncated or corrupt)", file_size, want); return why; }
    return NULL;
}

// Copy the local pieces of tensor t between a local buffer and a full-tensor buffer.
typedef struct { float* local; float* full; int to_full; } CopyCtx;
static void copy_run(size_t local, size_t full, size_t len, void* vctx) {
    CopyCtx* c = (CopyCtx*)vctx;
    if (c->to_full) memcpy(c->full + full, c->local + local, sizeof(float) * len);
    else memcpy(c->local + local, c->full + full, sizeof(float) * len);
}

// The full tensor ft (of the 1-rank layout) on rank 0: each element is written by exactly
// one rank (its owner in dp replica 0), so the sum over ranks is the tensor, exactly.
static void gather_full_tensor(const Layout* L, const ParamLayout* P, const Tensor* ft, const float* src, float* buf) {
    memset(buf, 0, sizeof(float) * ft->size);
    for (int j = 0; j < P->n; j++) {
        const Tensor* t = &P->t[j];
        if (t->full_offset == ft->full_offset && t->owner && L->replica == 0) {
            CopyCtx cc = {(float*)src + t->offset, buf, 1};
            tensor_runs(t, L->tp, L->tp_rank, copy_run, &cc);
        }
    }
    comm_reduce_sum_to_root((Comm*)&L->group[GROUP_WORLD], buf, ft->size);  // comm: world reduce to rank 0
}

// The step of a checkpoint's file name: exactly "ckpt_%08d.bin" (so ckpt_-0000001.bin,
// ckpt_+0000001.bin or ckpt_1.bin are not ours), or -1.
static int ckpt_name_step(const char* name) {
    if (strncmp(name, "ckpt_", 5)) return -1;
    long long s = 0;
    const char* p = name + 5;
    for (; *p >= '0' && *p <= '9' && s <= INT_MAX; p++) s = s * 10 + (*p - '0');
    char canonical[32];
    if (s > INT_MAX) return -1;
    snprintf(canonical, sizeof(canonical), "ckpt_%08d.bin", (int)s);
    return strcmp(name, canonical) ? -1 : (int)s;
}

static int step_newer_first(const void* x, const void* y) { return *(const int*)y - *(const int*)x; }

// The steps of the checkpoint files in dir (by name), newest first; *steps is allocated.
static int ckpt_list(const char* dir, const char* what, int** steps) {
    DIR* d = opendir(dir);
    if (!d) fail("%s: cannot open --ckpt-dir %s: %s", what, dir, strerror(errno));
    int n = 0, cap = 16;
    *steps = (int*)xmalloc(sizeof(int) * cap);
    struct dirent* e;
    while ((e = readdir(d))) {
        int s = ckpt_name_step(e->d_name);
        if (s < 0) continue;
        if (n == cap) {
            cap *= 2;
            *steps = (int*)realloc(*steps, sizeof(int) * cap);
            if (!*steps) fail("out of memory listing %s", dir);
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    qsort(*steps, n, sizeof(int), step_newer_first);
    return n;
}

// Whether a file name is one --ckpt-dir writes or replaces: ckpt_<step>.bin, LATEST, or their .tmp.
static int ckpt_dir_owns(const char* name) {
    char base[256];
    snprintf(base, sizeof(base), "%s", name);
    if (has_suffix(base, ".tmp")) base[strlen(base) - 4] = 0;
    return !strcmp(base, "LATEST") || ckpt_name_step(base) >= 0;
}

// --ckpt-dir at start-up, on rank 0 (which writes): created if missing (its parent must
// exist), a directory that takes new files, with nothing but regular files under the names
// a save writes or replaces (ckpt_<step>.bin, LATEST and their .tmp), and the longest of those
// paths within PATH_CAP. So a run never finds out after its last step that it cannot save.
static void ckpt_dir_prepare(const Args* a) {
    const char* dir = a->ckpt_dir;
    char path[PATH_CAP];
    struct stat st;
    if (mkdir(dir, 0755) && errno != EEXIST) fail("--ckpt-dir %s: cannot create: %s", dir, strerror(errno));
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) fail("--ckpt-dir %s exists and is not a directory", dir);
    path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin.tmp", dir, a->cfg.steps);  // the longest name a save writes fits
    output_check(path_format(path, "--ckpt-dir", "%s/LATEST", dir), "--ckpt-dir", 1);
    DIR* d = opendir(dir);
    if (!d) fail("--ckpt-dir %s: cannot open: %s", dir, strerror(errno));
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!ckpt_dir_owns(e->d_name)) continue;
        path_format(path, "--ckpt-dir", "%s/%s", dir, e->d_name);
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            closedir(d);  // e is gone with it; path holds the name
            fail("--ckpt-dir %s: %s is %s (a save replaces only regular files)", dir, path, file_kind(st.st_mode));
        }
    }
    closedir(d);
}

// Why x[0, n) cannot be section `section` of a model state (0 params, 1 AdamW m, 2 AdamW
// v), or NULL: every value must be finite, and v, a mean of squares, >= 0.
static const char* state_values_check(const float* x, size_t n, int section, const char* tensor, char* why, size_t cap) {
    static const char* names[3] = {"parameters", "adam m", "adam v"};
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) { snprintf(why, cap, "%s of tensor %s: non-finite value %g at element %zu", names[section], tensor, x[i], i); return why; }
        if (section == 2 && x[i] < 0) { snprintf(why, cap, "adam v of tensor %s: negative value %g at element %zu (a mean of squares)", tensor, x[i], i); return why; }
    }
    return NULL;
}

// Sections of the file: 0 params, 1 adam m, 2 adam v. Local buffers: params covers the
// rank's whole local buffer; m, v cover [opt_lo, opt_hi) (the ZeRO shard or everything).
// Every value is checked before it is written (state_values_check): a state that is not
// finite is never saved, and the checkpoints on disk stay as they are.
static void ckpt_save(const Layout* L, const ParamLayout* P, const ModelConfig* c, const Args* a, const float* params,
                      const float* m_state, const float* v_state, size_t opt_lo, size_t opt_hi, int step) {
    // Local copies of m and v over the whole local buffer (all-gather the ZeRO shards).
    size_t S = P->n_padded / L->replicas;
    float* mv[2];
    for (int k = 0; k < 2; k++) {
        mv[k] = (float*)xcalloc(P->n_padded, sizeof(float));
        const float* src = k ? v_state : m_state;
        if (c->zero) {
            memcpy(mv[k] + L->replica * S, src, sizeof(float) * (opt_hi - opt_lo));
            comm_allgather((Comm*)&L->group[GROUP_DP], mv[k] + L->replica * S, mv[k], S);
        } else memcpy(mv[k], src, sizeof(float) * (opt_hi - opt_lo));
    }
    // The full tensor list in canonical order, from a 1-rank layout.
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    size_t max_t = 0;
    for (int i = 0; i < full->n; i++) if (full->t[i].size > max_t) max_t = full->t[i].size;
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    char path[PATH_CAP], why[512];
    AtomicFile out;
    if (L->rank == 0) {
        atomic_open(&out, path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin", a->ckpt_dir, step), "checkpoint");
        int32_t h[256];
        ckpt_header_fill(h, c, step, full->n_full);
        atomic_write(&out, h, sizeof(h));
    }
    for (int sec = 0; sec < 3; sec++) {
        const float* src = sec == 0 ? params : mv[sec - 1];
        for (int i = 0; i < full->n; i++) {
            const Tensor* ft = &full->t[i];
            gather_full_tensor(L, P, ft, src, buf);
            if (L->rank != 0) continue;
            if (state_values_check(buf, ft->size, sec, ft->name, why, sizeof(why))) {
                atomic_abandon(&out);
                fail("checkpoint of step %d not written: %s; the checkpoints on disk are kept", step, why);
            }
            atomic_write(&out, buf, sizeof(float) * ft->size);
        }
    }
    if (L->rank == 0) {
        atomic_commit(&out);
        char manifest[64];
        snprintf(manifest, sizeof(manifest), "ckpt_%08d.bin\n", step);
        AtomicFile latest;  // the manifest, last
        atomic_open(&latest, path_format(path, "--ckpt-dir", "%s/LATEST", a->ckpt_dir), "checkpoint manifest");
        atomic_write(&latest, manifest, strlen(manifest));
        atomic_commit(&latest);
        // rotation: keep the newest ckpt_keep checkpoints (regular files of our names only)
        int* steps;
        int n = ckpt_list(a->ckpt_dir, "checkpoint rotation", &steps);
        for (int i = a->ckpt_keep; i < n; i++) {
            struct stat st;
            path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin", a->ckpt_dir, steps[i]);
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
        }
        free(steps);
        char shown[4 * PATH_CAP];
        printf("checkpoint: %s (step %d)\n", printable(out.path, shown, sizeof(shown)), step);
        fflush(stdout);
    }
    free(full); free(buf); free(mv[0]); free(mv[1]);
}

// Why the file is not a complete checkpoint by its own header (unreadable, not a
// checkpoint, or a size other than the one its parameter count gives), or NULL.
static const char* ckpt_incomplete(const char* path, char* why, size_t cap) {
    FILE* f = input_open(path, why, cap, NULL);
    if (!f) return why;
    int32_t h[256];
    struct stat st;
    int read_ok = fread(h, sizeof(int32_t), 256, f) == 256 && fstat(fileno(f), &st) == 0;
    fclose(f);
    if (!read_ok) { snprintf(why, cap, "truncated header"); return why; }
    if (h[CK_MAGIC] != CKPT_MAGIC || h[CK_VERSION] != CKPT_VERSION) {
        snprintf(why, cap, "not a checkpoint (magic %d, version %d)", h[CK_MAGIC], h[CK_VERSION]);
        return why;
    }
    size_t n_full = ckpt_header_n_full(h);
    if (n_full > ((size_t)st.st_size - 1024) / 12 || (long long)st.st_size != 1024 + 12LL * (long long)n_full) {
        snprintf(why, cap, "size %lld bytes, not 1024 + 3 x 4 x %zu (truncated)", (long long)st.st_size, n_full);
        return why;
    }
    return NULL;
}

// The checkpoint --resume auto continues from, into out (PATH_CAP bytes): the one the
// manifest LATEST names; without a manifest, the newest file that is complete by its own
// header (ckpt_incomplete), past any newer one a crash or a full disk cut short. verbose:
// say which files were passed over.
static void ckpt_find_latest(const char* dir, char* out, int verbose) {
    char path[PATH_CAP], why[256], name[64] = "", shown[4 * PATH_CAP];
    struct stat st;
    path_format(path, "--ckpt-dir", "%s/LATEST", dir);
    if (lstat(path, &st) == 0) {
        FILE* f = input_open(path, why, sizeof(why), NULL);
        if (!f) fail("--resume auto: manifest %s: %s", path, why);
        size_t n = fread(name, 1, sizeof(name) - 1, f);
        fclose(f);
        name[n] = 0;
        size_t len = strcspn(name, "\n");  // the name, then one newline and nothing else
        int whole = len == n || (len + 1 == n && name[len] == '\n');
        name[len] = 0;
        if (n && (!whole || ckpt_name_step(name) < 0))
            fail("--resume auto: manifest %s does not name a checkpoint (ckpt_<step>.bin): '%s'", path, name);
        if (n) {
            path_format(out, "--ckpt-dir", "%s/%s", dir, name);
            return;
        }
    }
    int* steps;
    int n = ckpt_list(dir, "--resume auto", &steps);
    for (int i = 0; i < n; i++) {
        path_format(out, "--ckpt-dir", "%s/ckpt_%08d.bin", dir, steps[i]);
        if (!ckpt_incomplete(out, why, sizeof(why))) {
            free(steps);
            return;
        }
        if (verbose) printf("resume: passing over %s: %s\n", printable(out, shown, sizeof(shown)), why);
    }
    free(steps);
    if (n) fail("--resume auto: no complete checkpoint in %s (%d incomplete)", dir, n);
    fail("--resume auto: no checkpoint in %s", dir);
}

// Load the checkpoint a->resume names (a file: run_setup has resolved "auto") into this
// rank's shard; returns the step to continue from. Every value read is checked
// (state_values_check) with an error naming the file and tensor.
static int ckpt_resume(const Layout* L, const ParamLayout* P, const ModelConfig* c, const Args* a, float* params,
                       float* m_state, float* v_state, size_t opt_lo, size_t opt_hi) {
    const char* path = a->resume;
    char why[512];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) fail("--resume %s: cannot open: %s", path, why);
    struct stat st;
    fstat(fileno(f), &st);
    int32_t h[256];
    if (fread(h, sizeof(int32_t), 256, f) != 256) fail("checkpoint %s: truncated header", path);
    if (ckpt_header_check(h, c, P->n_full, (long long)st.st_size, why)) fail("checkpoint %s: %s", path, why);
    if (h[CK_GLOBAL_BATCH] != c->global_batch)
        fail("checkpoint %s: trained with --global-batch %d; resuming with %d would change the data order", path,
             h[CK_GLOBAL_BATCH], c->global_batch);
    size_t max_t = 0;
    for (int i = 0; i < P->n; i++) if (P->t[i].rows * (size_t)P->t[i].cols > max_t) max_t = (size_t)P->t[i].rows * P->t[i].cols;
    float* buf = (float*)xmalloc(sizeof(float) * (max_t ? max_t : 1));
    float* local[3] = {params, (float*)xcalloc(P->n_padded, sizeof(float)), (float*)xcalloc(P->n_padded, sizeof(float))};
    for (int sec = 0; sec < 3; sec++)
        for (int i = 0; i < P->n; i++) {
            const Tensor* t = &P->t[i];
            size_t full_n = (size_t)t->rows * t->cols;
            long long off = 1024 + 4LL * ((long long)sec * P->n_full + (long long)t->full_offset);
            if (fseeko(f, off, SEEK_SET) || fread(buf, sizeof(float), full_n, f) != full_n)
                fail("checkpoint %s: read of %s failed", path, t->name);
            if (state_values_check(buf, full_n, sec, t->name, why, sizeof(why))) fail("checkpoint %s: %s", path, why);
            CopyCtx cc = {local[sec] + t->offset, buf, 0};
            tensor_runs(t, L->tp, L->tp_rank, copy_run, &cc);
        }
    fclose(f);
    memcpy(m_state, local[1] + opt_lo, sizeof(float) * (opt_hi - opt_lo));
    memcpy(v_state, local[2] + opt_lo, sizeof(float) * (opt_hi - opt_lo));
    free(local[1]); free(local[2]); free(buf);
    char shown[4 * PATH_CAP];
    if (L->rank == 0) printf("resumed from %s (step %d, saved with dp %d tp %d pp %d vpp %d zero %d)\n", printable(path, shown, sizeof(shown)),
                             h[CK_STEP], h[CK_DP], h[CK_TP], h[CK_PP], h[CK_VPP], h[CK_ZERO]);
    return h[CK_STEP];
}

// ----------------------------------------------------------------------------
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
// every value must be finite).
static void llmc_import(const char* path, const Layout* L, const ParamLayout* P, const ModelConfig* c, float* params) {
    char why[512];
    if (llmc_check(c, why)) fail("--import-llmc %s: %s", path, why);
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) fail("--import-llmc %s: cannot open: %s", path, why);
    int32_t h[256];
    if (fread(h, 4, 256, f) != 256) fail("--import-llmc %s: truncated header", path);
    if (h[0] != LLMC_MAGIC) fail("--import-llmc %s: bad magic %d (expected %d, an llm.c GPT-2 checkpoint)", path, h[0], LLMC_MAGIC);
    if (h[1] != LLMC_VERSION) fail("--import-llmc %s: version %d not supported (fp32 version 3 only)", path, h[1]);
    int want[6] = {c->seq_len, c->vocab, c->n_layer, c->n_head, c->d_model, c->vocab_padded};
    const char* names[6] = {"max_seq_len", "vocab", "n_layer", "n_head", "d_model", "padded vocab"};
    for (int i = 0; i < 6; i++)
        if (h[2 + i] != want[i]) fail("--import-llmc %s: %s is %d in the file but %d here (set the shape flags to match)", path, names[i], h[2 + i], want[i]);
    struct stat st;
    fstat(fileno(f), &st);
    size_t full_n = 0;
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    full_n = full->n_full;
    if ((size_t)st.st_size != 1024 + 4 * full_n) fail("--import-llmc %s: %lld bytes, expected %zu", path, (long long)st.st_size, 1024 + 4 * full_n);
    size_t max_t = 0;
    for (int i = 0; i < P->n; i++) if ((size_t)P->t[i].rows * P->t[i].cols > max_t) max_t = (size_t)P->t[i].rows * P->t[i].cols;
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        size_t n = (size_t)t->rows * t->cols;  // the full tensor: contiguous in llm.c's file too
        if (fseeko(f, 1024 + 4 * (long long)llmc_offset(c, t, 0), SEEK_SET) || fread(buf, 4, n, f) != n)
            fail("--import-llmc %s: read of %s failed", path, t->name);
        if (state_values_check(buf, n, 0, t->name, why, sizeof(why))) fail("--import-llmc %s: %s", path, why);
        CopyCtx cc = {params + t->offset, buf, 0};
        tensor_runs(t, L->tp, L->tp_rank, copy_run, &cc);
    }
    fclose(f);
    free(buf); free(full);
    char shown[4 * PATH_CAP];
    if (L->rank == 0) printf("imported llm.c weights from %s\n", printable(path, shown, sizeof(shown)));
}

// --export-llmc FILE: write the current weights as an llm.c GPT-2 checkpoint (rank 0 writes,
// atomically, only finite weights; every rank takes part in the gather).
static void llmc_export(const char* path, const Layout* L, const ParamLayout* P, const ModelConfig* c, const float* params) {
    char why[512];
    if (llmc_check(c, why)) fail("--export-llmc %s: %s", path, why);
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, c, 1, 0, 1, 1, 0, 1);
    float* out = L->rank == 0 ? (float*)xmalloc(sizeof(float) * full->n_full) : NULL;
    size_t max_t = 0;
    for (int i = 0; i < full->n; i++) if (full->t[i].size > max_t) max_t = full->t[i].size;
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    for (int i = 0; i < full->n; i++) {
        const Tensor* ft = &full->t[i];
        gather_full_tensor(L, P, ft, params, buf);
        if (!out) continue;
        if (state_values_check(buf, ft->size, 0, ft->name, why, sizeof(why))) fail("--export-llmc %s: not written: %s", path, why);
        memcpy(out + llmc_offset(c, ft, 0), buf, sizeof(float) * ft->size);
    }
    if (out) {
        AtomicFile f;
        int32_t h[256] = {LLMC_MAGIC, LLMC_VERSION, c->seq_len, c->vocab, c->n_layer, c->n_head, c->d_model, c->vocab_padded};
        atomic_open(&f, path, "--export-llmc");
        atomic_write(&f, h, sizeof(h));
        atomic_write(&f, out, sizeof(float) * full->n_full);
        atomic_commit(&f);
        char shown[4 * PATH_CAP];
        printf("exported llm.c weights to %s\n", printable(path, shown, sizeof(shown)));
        free(out);
    }
    free(buf); free(full);
}

#endif
