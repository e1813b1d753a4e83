// ckpt.h: checkpoints in a layout-independent form, written atomically and checksummed.
// Shared by both builds.
//
// File ckpt_<step>.bin (all little-endian), format version 3:
//   header: 256 int32 (see CK_* below; magic 20261202, version 3; CK_ROPE_THETA holds the
//           float's bits)
//   params: n_full float32, the full unsharded model in canonical order (params.h)
//   adam m: n_full float32, same order
//   adam v: n_full float32, same order
//   index:  n_tensors uint64, the length in floats of each tensor in canonical order; then
//           3 x n_tensors uint64, the checksum of each tensor's bytes in params, m and v
//   The header's CK_SUM_LO/HI hold the checksum of the header (with those two fields 0) and
//   the index, so a changed header field, index entry or tensor byte is found on loading.
// Version 1 files (no index, no checksums) are refused with a line that says so: a state
// that cannot be verified is not resumed. Version 2 files (the same, without rope_theta) are
// read; a LLaMA one resumes with this run's --rope-theta, and rank 0 says so in a note.
// The data position and RNG state follow from (step, seed, global_batch): the batch
// order and the sampler are pure functions of them, so they are all a run needs to
// continue exactly. Writing: --ckpt-dir is checked and locked at start-up (ckpt_dir_lock,
// ckpt_dir_prepare); rank 0 checks every value (finite, AdamW v >= 0: a state that is not is
// never saved), writes a temporary file of a name unique to the process, fsyncs, renames it
// into place, fsyncs the directory, reads it back against its checksums, then rewrites the
// manifest LATEST (same way) last; a run killed at any point leaves the previous checkpoint
// and manifest intact. Rotation (--ckpt-keep) deletes only checkpoints this run wrote.
// Reading: every rank reads the tensors of its own shard and checks each against its
// checksum and its values (finite, v >= 0), so a checkpoint saved under one layout resumes
// under any other, and every byte of it is verified by the rank that uses it; an error
// names the file and the tensor.
#ifndef CKPT_H
#define CKPT_H

#include <dirent.h>
#include <setjmp.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "layout/args.h"
#include "base/files.h"
#include "data/data.h"
#include "layout/grid.h"
#include "layout/params.h"

#define CKPT_MAGIC 20261202
#define CKPT_VERSION 3
#define CKPT_VERSION_OLDEST 2  // the oldest version this build reads
enum { CK_MAGIC, CK_VERSION, CK_ARCH, CK_N_LAYER, CK_N_HEAD, CK_N_KV_HEAD, CK_D_MODEL, CK_D_FF, CK_SEQ_LEN, CK_VOCAB,
       CK_VOCAB_PADDED, CK_STEP, CK_SEED_LO, CK_SEED_HI, CK_DP, CK_TP, CK_PP, CK_VPP, CK_ZERO, CK_SP, CK_N_FULL_LO,
       CK_N_FULL_HI, CK_GLOBAL_BATCH, CK_MICRO_BATCH, CK_SCHEDULE, CK_RECOMPUTE, CK_STEPS, CK_N_TENSORS, CK_SUM_LO,
       CK_SUM_HI, CK_ROPE_THETA, CK_PACKING };  // CK_PACKING: --packing + 1 (0: a file from before it was recorded)
#define CKPT_MAX_TENSORS ((int)(sizeof(((ParamLayout*)0)->t) / sizeof(Tensor)))

// ----------------------------------------------------------------------------
// SIGTERM / SIGINT: finish the step, save, exit 128 + the signal. SIGUSR1 and SIGUSR2 stand
// for SIGINT and SIGTERM: the self-launcher passes a stop on to the ranks as those, which
// mpirun forwards (base/launcher.h). SIGHUP (the terminal closed) the same, exit 129.
// SIGPIPE (stdout's reader is gone: ./train | head) too, without a word, exit 141; SIGALRM stands
// for it (the self-launcher's reader gone: mpirun forwards SIGALRM, not SIGPIPE).
//
// A second stop (SIGINT, SIGTERM or SIGHUP after any stop) does not wait for the step to end (one
// step may take minutes): the run exits at once, 128 + that signal, without saving. Nothing on disk
// is lost: a checkpoint is written to a temporary and renamed once complete, so one being written
// is abandoned (its temporary removed) and the last complete one and LATEST stay as they were. One
// line says so (under the self-launcher the launcher says it: its second signal aborts mpirun, whose
// SIGTERM is the ranks' second). The launcher's repeats of the first stop (SIGUSR1, SIGUSR2, SIGALRM
// each second) and SIGPIPE (each write to a closed stdout) are not a second stop.
static int ckpt_say_second = 1;  // no line from the ranks under the self-launcher (ckpt_install_signals)
static void ckpt_stop_now(int sig) {
    static const char said[] = "stopped by a second signal: exiting now, without saving (the checkpoints on disk "
                               "are as they were)\n";
    if (ckpt_say_second && fail_rank <= 0) (void)!write(STDERR_FILENO, said, sizeof(said) - 1);
    temps_remove();
    _exit(128 + sig);
}
// A stop passed on to every rank is said once, by rank 0 (stop_if_signalled): the self-launcher's stand-ins, or one
// that came from this rank's parent, the launcher's process that forwards a stop to every rank of the job (a plain
// mpirun or its daemon, slurmstepd); each rank said it under `mpirun -n 2 ./train`. One sent to this rank alone
// (kill PID) it says itself.
static void ckpt_on_signal(int sig, siginfo_t* info, void* context) {
    int repeat = sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGALRM || sig == SIGPIPE;
    if (stop_signal && !repeat) ckpt_stop_now(sig);
    int from_parent = info && info->si_code == SI_USER && info->si_pid == getppid();
    if (!stop_signal) stop_relayed = (repeat || from_parent) && sig != SIGPIPE;
    if (!stop_signal) stop_signal = sig == SIGUSR1 ? SIGINT : sig == SIGUSR2 ? SIGTERM : sig == SIGALRM ? SIGPIPE : sig;
}
static void ckpt_install_signals(void) {
    static const int stops[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGPIPE, SIGALRM};
    struct sigaction on_stop;
    memset(&on_stop, 0, sizeof(on_stop));
    on_stop.sa_sigaction = ckpt_on_signal;
    on_stop.sa_flags = SA_SIGINFO | SA_RESTART;  // (SA_RESTART as signal() sets it)
    sigemptyset(&on_stop.sa_mask);
    ckpt_say_second = !getenv("TRAIN_LAUNCHED");
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) sigaction(stops[i], &on_stop, NULL);
}
// Collective: the signal any rank got (the largest number when ranks got different ones),
// the same on every rank, or 0.
static int ckpt_stop_requested(const Comm* world) {
    int s = stop_signal;
    if (world->size > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_INT, MPI_MAX, world->mpi));
    return s;
}

// ----------------------------------------------------------------------------
// Checksums: a 64-bit hash of a byte stream, 8 bytes per step with xxHash64's round
// (Y. Collet): h = rotl(h + w * P2, 31) * P1 for each little-endian 8-byte word w (the last
// one zero-padded), then the length and a xor-shift-multiply avalanche. For a fixed word
// each step is a bijection of h, and for a fixed h a bijection of the word, so a change
// confined to one 8-byte word (a flipped bit, a changed header field) always changes the
// hash; any other change goes unseen with a chance of about 2^-64. Chosen over CRC-32C for
// its 64 bits and because it needs no table and no CPU instruction: the same plain code in
// gcc and nvcc's host compiler, at several GB/s (a multiply chain per 8 bytes).

typedef struct { uint64_t h, len; unsigned char tail[8]; int n_tail; } Hash64;
#define HASH_P1 0x9E3779B185EBCA87ull
#define HASH_P2 0xC2B2AE3D27D4EB4Full

static void hash_init(Hash64* s) { memset(s, 0, sizeof(*s)), s->h = HASH_P1 ^ 0x27D4EB2F165667C5ull; }
static void hash_word(Hash64* s, uint64_t w) {
    uint64_t x = s->h + w * HASH_P2;
    s->h = ((x << 31) | (x >> 33)) * HASH_P1;
}
static void hash_update(Hash64* s, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    s->len += n;
    while (n && s->n_tail) {  // complete a word left over from the last call
        s->tail[s->n_tail++] = *b++, n--;
        if (s->n_tail == 8) {
            uint64_t w;
            memcpy(&w, s->tail, 8);
            hash_word(s, w), s->n_tail = 0;
        }
    }
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        hash_word(s, w);
    }
    memcpy(s->tail, b, n), s->n_tail = (int)n;
}
static uint64_t hash_final(Hash64* s) {
    if (s->n_tail) {
        uint64_t w = 0;
        memcpy(&w, s->tail, (size_t)s->n_tail);
        hash_word(s, w);
    }
    uint64_t h = s->h ^ s->len;
    h = (h ^ (h >> 33)) * HASH_P2;
    h = (h ^ (h >> 29)) * HASH_P1;
    return h ^ (h >> 32);
}
static uint64_t hash_bytes(const void* p, size_t n) {
    Hash64 s;
    hash_init(&s);
    hash_update(&s, p, n);
    return hash_final(&s);
}

// ----------------------------------------------------------------------------
// The header and the index

static void ckpt_header_fill(int32_t* h, const ModelConfig* c, int step, size_t n_full, int n_tensors) {
    memset(h, 0, 256 * sizeof(int32_t));
    h[CK_MAGIC] = CKPT_MAGIC, h[CK_VERSION] = CKPT_VERSION, h[CK_ARCH] = c->arch;
    h[CK_N_LAYER] = c->n_layer, h[CK_N_HEAD] = c->n_head, h[CK_N_KV_HEAD] = c->n_kv_head, h[CK_D_MODEL] = c->d_model;
    h[CK_D_FF] = c->d_ff, h[CK_SEQ_LEN] = c->seq_len, h[CK_VOCAB] = c->vocab, h[CK_VOCAB_PADDED] = c->vocab_padded;
    h[CK_STEP] = step, h[CK_SEED_LO] = (int32_t)(c->seed & 0xffffffffu), h[CK_SEED_HI] = (int32_t)(c->seed >> 32);
    h[CK_DP] = c->dp, h[CK_TP] = c->tp, h[CK_PP] = c->pp, h[CK_VPP] = c->vpp, h[CK_ZERO] = c->zero, h[CK_SP] = c->sp;
    h[CK_N_FULL_LO] = (int32_t)(n_full & 0xffffffffu), h[CK_N_FULL_HI] = (int32_t)(n_full >> 32);
    h[CK_GLOBAL_BATCH] = c->global_batch, h[CK_MICRO_BATCH] = c->micro_batch;
    h[CK_SCHEDULE] = c->schedule, h[CK_RECOMPUTE] = c->recompute, h[CK_STEPS] = c->steps, h[CK_N_TENSORS] = n_tensors;
    memcpy(&h[CK_ROPE_THETA], &c->rope_theta, sizeof(float));
}

// The header's rope_theta (version 3 on; 0 in version 2, which did not record it).
static float ckpt_header_rope_theta(const int32_t* h) {
    float theta = 0;
    if (h[CK_VERSION] >= 3) memcpy(&theta, &h[CK_ROPE_THETA], sizeof(float));
    return theta;
}

static size_t ckpt_header_n_full(const int32_t* h) {
    return (size_t)(uint32_t)h[CK_N_FULL_LO] | ((size_t)(uint32_t)h[CK_N_FULL_HI] << 32);
}

// Bytes of a version-2 file of n_full floats in n_tensors tensors; -1 past any real file.
static long long ckpt_file_bytes(size_t n_full, long long n_tensors) {
    if (n_full > ((size_t)1 << 58) || n_tensors < 0 || n_tensors > CKPT_MAX_TENSORS) return -1;
    return 1024 + 12LL * (long long)n_full + 32 * n_tensors;
}

// The checksum of the header (its CK_SUM fields taken as 0) and the index (lens, then sums).
static uint64_t ckpt_header_checksum(const int32_t* h, const uint64_t* lens, const uint64_t* sums, int n_tensors) {
    int32_t hz[256];
    memcpy(hz, h, sizeof(hz));
    hz[CK_SUM_LO] = hz[CK_SUM_HI] = 0;
    Hash64 s;
    hash_init(&s);
    hash_update(&s, hz, sizeof(hz));
    hash_update(&s, lens, sizeof(uint64_t) * (size_t)n_tensors);
    hash_update(&s, sums, sizeof(uint64_t) * 3 * (size_t)n_tensors);
    return hash_final(&s);
}
static uint64_t ckpt_header_sum(const int32_t* h) {
    return (uint64_t)(uint32_t)h[CK_SUM_LO] | (uint64_t)(uint32_t)h[CK_SUM_HI] << 32;
}

// Why a header cannot be this model's checkpoint (magic, version, shape, step, the size its
// counts give against file_size), or NULL. The header's own checksum is ckpt_index_read's.
static const char* ckpt_header_check(const int32_t* h, const ModelConfig* c, size_t n_full, long long file_size,
                                     char* why) {
    if (h[CK_MAGIC] != CKPT_MAGIC) { sprintf(why, "bad magic %d (expected %d)", h[CK_MAGIC], CKPT_MAGIC); return why; }
    if (h[CK_VERSION] == 1) {
        sprintf(why, "format version 1 has no checksums and is not read any more (this build reads versions %d to %d): "
                "resume it with the build that wrote it, or start over", CKPT_VERSION_OLDEST, CKPT_VERSION);
        return why;
    }
    if (h[CK_VERSION] < CKPT_VERSION_OLDEST || h[CK_VERSION] > CKPT_VERSION) {
        sprintf(why, "unsupported version %d (this build reads %d to %d%s)", h[CK_VERSION], CKPT_VERSION_OLDEST,
                CKPT_VERSION, h[CK_VERSION] > CKPT_VERSION ? ": a newer build wrote it" : "");
        return why;
    }
    long long want = ckpt_file_bytes(ckpt_header_n_full(h), h[CK_N_TENSORS]);
    if (want < 0) {
        sprintf(why, "its header's counts (%zu parameters in %d tensors) are past any model (corrupt)",
                ckpt_header_n_full(h), h[CK_N_TENSORS]);
        return why;
    }
    if (file_size != want) {
        sprintf(why, "size %lld bytes, but its header's %zu parameters in %d tensors need %lld (truncated or corrupt)",
                file_size, ckpt_header_n_full(h), h[CK_N_TENSORS], want);
        return why;
    }
    struct { int k; int want; const char* name;
    } f[] = {{CK_ARCH, c->arch, "arch"},
             {CK_N_LAYER, c->n_layer, "n_layer"},
             {CK_N_HEAD, c->n_head, "n_head"},
             {CK_N_KV_HEAD, c->n_kv_head, "n_kv_head"},
             {CK_D_MODEL, c->d_model, "d_model"},
             {CK_D_FF, c->d_ff, "d_ff"},
             {CK_SEQ_LEN, c->seq_len, "seq_len"},
             {CK_VOCAB, c->vocab, "vocab"},
             {CK_VOCAB_PADDED, c->vocab_padded, "vocab_padded"}};
    if (h[CK_ARCH] != c->arch && (h[CK_ARCH] == ARCH_GPT2 || h[CK_ARCH] == ARCH_LLAMA)) {
        sprintf(why, "a %s checkpoint, but this run's architecture is %s (%s)", arch_name(h[CK_ARCH]),
                arch_name(c->arch), c->arch == ARCH_GPT2 ? "add --arch llama, or a llama --model" : "a gpt2 --model");
        return why;
    }
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (h[f[i].k] != f[i].want) {
            sprintf(why, "model %s is %d in the checkpoint but %d here", f[i].name, h[f[i].k], f[i].want);
            return why;
        }
    if (ckpt_header_n_full(h) != n_full) {
        sprintf(why, "holds %zu parameters, this model has %zu", ckpt_header_n_full(h), n_full);
        return why;
    }
    float theta = ckpt_header_rope_theta(h);  // RoPE's base changes every attention score (LLaMA)
    if (c->arch == ARCH_LLAMA && theta != 0 && theta != c->rope_theta) {
        sprintf(why, "model rope_theta is %g in the checkpoint but %g here (set --rope-theta %g)", theta,
                c->rope_theta, theta);
        return why;
    }
    if (h[CK_STEP] < 0) { sprintf(why, "negative step %d", h[CK_STEP]); return why; }
    // the fields a resume does not compare (the layout and flags it was saved under, shown when it resumes):
    // within what a run writes, so that a header whose checksum holds but whose writer was not this program is
    // refused, not echoed ("saved with tp -1") or read as another --packing
    struct { int k, lo, hi; const char* name; } r[] = {
        {CK_DP, 1, 1 << 20, "dp"}, {CK_TP, 1, 1 << 20, "tp"}, {CK_PP, 1, 1 << 20, "pp"}, {CK_VPP, 1, 1 << 20, "vpp"},
        {CK_ZERO, 0, 3, "zero"}, {CK_SP, 0, 1, "sp"}, {CK_GLOBAL_BATCH, 1, INT_MAX, "global_batch"},
        {CK_MICRO_BATCH, 1, INT_MAX, "micro_batch"}, {CK_SCHEDULE, 0, N_SCHEDULES - 1, "schedule"},
        {CK_RECOMPUTE, RECOMPUTE_NONE, RECOMPUTE_FULL, "recompute"}, {CK_STEPS, 0, INT_MAX, "steps"},
        {CK_PACKING, 0, 3, "packing"}};
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
        if (h[r[i].k] < r[i].lo || h[r[i].k] > r[i].hi) {
            sprintf(why, "its header's %s is %d, outside [%d, %d] (corrupt, or not written by this program)",
                    r[i].name, h[r[i].k], r[i].lo, r[i].hi);
            return why;
        }
    return NULL;
}

// A checkpoint's header and index, read from an open file and checked against each other.
typedef struct {
    int32_t h[256];
    int n_tensors;
    uint64_t *lens, *sums;  // n_tensors lengths in floats; 3 x n_tensors checksums (params, m, v)
} CkptIndex;

static void ckpt_index_free(CkptIndex* ix) { free(ix->lens), free(ix->sums), ix->lens = ix->sums = NULL; }

// Read f's header and index: NULL if they are whole (magic, version, a size that fits the
// counts) and match the header's checksum, and the lengths add up to n_full; else why not.
// Allocates ix->lens and ix->sums on success only.
static const char* ckpt_index_read(FILE* f, CkptIndex* ix, char* why, size_t cap) {
    struct stat st;
    memset(ix, 0, sizeof(*ix));
    if (fstat(fileno(f), &st) || fseeko(f, 0, SEEK_SET) || fread(ix->h, sizeof(int32_t), 256, f) != 256) {
        snprintf(why, cap, "truncated header");
        return why;
    }
    const int32_t* h = ix->h;
    if (h[CK_MAGIC] != CKPT_MAGIC || h[CK_VERSION] < CKPT_VERSION_OLDEST || h[CK_VERSION] > CKPT_VERSION ||
        ckpt_file_bytes(ckpt_header_n_full(h), h[CK_N_TENSORS]) != st.st_size) {
        char w[512];
        ModelConfig none;
        memset(&none, 0, sizeof(none));
        ckpt_header_check(h, &none, 0, (long long)st.st_size, w);  // says which
        snprintf(why, cap, "%s", w);
        return why;
    }
    int n = ix->n_tensors = h[CK_N_TENSORS];
    uint64_t* lens = (uint64_t*)xmalloc(sizeof(uint64_t) * (n ? n : 1));
    uint64_t* sums = (uint64_t*)xmalloc(sizeof(uint64_t) * 3 * (n ? n : 1));
    long long at = 1024 + 12LL * (long long)ckpt_header_n_full(h);
    int whole = fseeko(f, at, SEEK_SET) == 0 && fread(lens, sizeof(uint64_t), n, f) == (size_t)n &&
                fread(sums, sizeof(uint64_t), 3 * (size_t)n, f) == 3 * (size_t)n;
    uint64_t total = 0, n_full = ckpt_header_n_full(h);  // (stops past n_full: no overflow)
    for (int i = 0; whole && i < n && total <= n_full; i++) total += lens[i] <= n_full ? lens[i] : n_full + 1;
    if (!whole) snprintf(why, cap, "truncated index");
    else if (ckpt_header_checksum(h, lens, sums, n) != ckpt_header_sum(h))
        snprintf(why, cap, "the header or the index does not match its checksum (the file is corrupt)");
    else if (total != ckpt_header_n_full(h))
        snprintf(why, cap, "its index's tensor lengths do not add up to its %zu parameters", ckpt_header_n_full(h));
    else {
        ix->lens = lens, ix->sums = sums;
        return NULL;
    }
    free(lens), free(sums);
    return why;
}

// Read every tensor of the checkpoint at path against its checksum: NULL if all match (and
// the header and index do), else why not. Reads the whole file, 4 MiB at a time.
static const char* ckpt_verify_file(const char* path, char* why, size_t cap) {
    FILE* f = input_open(path, why, cap, NULL);
    if (!f) return why;
    CkptIndex ix;
    if (ckpt_index_read(f, &ix, why, cap)) { fclose(f); return why; }
    const size_t chunk = 1 << 20;
    float* buf = (float*)xmalloc(sizeof(float) * chunk);
    const char* bad = NULL;
    static const char* names[3] = {"parameters", "adam m", "adam v"};
    fseeko(f, 1024, SEEK_SET);
    for (int sec = 0; sec < 3 && !bad; sec++)
        for (int i = 0; i < ix.n_tensors && !bad; i++) {
            Hash64 s;
            hash_init(&s);
            for (uint64_t done = 0; done < ix.lens[i] && !bad;) {
                size_t n = ix.lens[i] - done < chunk ? (size_t)(ix.lens[i] - done) : chunk;
                if (fread(buf, sizeof(float), n, f) != n) snprintf(why, cap, "read failed"), bad = why;
                hash_update(&s, buf, sizeof(float) * n);
                done += n;
            }
            if (!bad && hash_final(&s) != ix.sums[(size_t)sec * ix.n_tensors + i])
                snprintf(why, cap, "%s of tensor %d does not match its checksum (the file is corrupt)", names[sec], i),
                    bad = why;
        }
    free(buf);
    ckpt_index_free(&ix);
    fclose(f);
    return bad;
}

// ----------------------------------------------------------------------------
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
    int n = 0;
    size_t cap = 16;
    *steps = (int*)xmalloc(sizeof(int) * cap);
    struct dirent* e;
    while ((e = readdir(d))) {
        int s = ckpt_name_step(e->d_name);
        if (s < 0) continue;
        *steps = (int*)xgrow(*steps, sizeof(int), (size_t)n + 1, &cap, "listing --ckpt-dir's checkpoints");
        (*steps)[n++] = s;
    }
    closedir(d);
    qsort(*steps, n, sizeof(int), step_newer_first);
    return n;
}

// Whether a file name is one --ckpt-dir writes or replaces: ckpt_<step>.bin, LATEST, their
// temporary files (files.h temp_name_len: only names this program makes), or the lock LOCK.
static int ckpt_dir_owns(const char* name) {
    char base[256];
    snprintf(base, sizeof(base), "%.*s", (int)temp_name_len(name), name);
    return !strcmp(base, "LATEST") || !strcmp(name, "LOCK") || ckpt_name_step(base) >= 0;
}

// --ckpt-dir's lock: rank 0 holds an advisory lock (flock) on <dir>/LOCK for the whole run,
// so a second run on the directory is refused at start-up instead of mixing its
// checkpoints with this one's. The kernel drops the lock when the process ends, however it
// ends (kill -9 too), so a dead run never blocks the next one. The file holds the holder's
// pid, for the message; one that holds anything else, or has other names, is not ours and is
// refused before it is written. Nothing is done for a directory that does not exist yet
// (ckpt_dir_prepare creates it, then locks it).
static int ckpt_lock_fd = -1;
static void ckpt_dir_lock(const char* dir) {
    struct stat st;
    if (ckpt_lock_fd >= 0 || stat(dir, &st) || !S_ISDIR(st.st_mode)) return;
    char path[PATH_CAP], holder[32] = "";
    path_format(path, "--ckpt-dir", "%s/LOCK", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) fail("--ckpt-dir %s: cannot open its lock file %s: %s", dir, path, strerror(errno));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        fail("--ckpt-dir %s: %s is %s, not a lock file", dir, path, file_kind(st.st_mode));
    if (st.st_nlink > 1)  // the pid written below would change the file under its other names
        fail("--ckpt-dir %s: %s has %lu names (hard links), so it is not this program's lock file: move it", dir, path,
             (unsigned long)st.st_nlink);
    int locked = flock(fd, LOCK_EX | LOCK_NB) == 0, e = errno;
    ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    holder[n > 0 ? n : 0] = 0;
    if (!locked && e == EWOULDBLOCK) {
        holder[strcspn(holder, "\n")] = 0;
        fail("--ckpt-dir %s is in use by another run (pid %s holds %s); two runs in one directory would mix their "
             "checkpoints",
             dir, *holder ? holder : "unknown", path);
    }
    if (!locked) fail("--ckpt-dir %s: cannot lock %s: %s", dir, path, strerror(e));
    if (fstat(fd, &st) || st.st_size >= (off_t)sizeof(holder) || n != st.st_size ||
        strspn(holder, "0123456789\n") != (size_t)n)  // (read under the lock: no run of ours writes it now)
        fail("--ckpt-dir %s: %s holds %lld bytes that are not a process id, so it is not this program's lock file (a "
             "file of yours?): move it",
             dir, path, (long long)st.st_size);
    n = snprintf(holder, sizeof(holder), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, holder, (size_t)n, 0) != n)
        fail("--ckpt-dir %s: cannot write %s: %s", dir, path, strerror(errno));
    ckpt_lock_fd = fd;
}

// --ckpt-dir at start-up, on rank 0 (which writes): created if missing (its parent must
// exist), locked (ckpt_dir_lock), a directory that takes new files, with nothing but
// regular files under the names a save replaces (ckpt_<step>.bin, LATEST), and the longest
// path a save writes within PATH_CAP. So a run never finds out after its last step that it
// cannot save. Temporary files that killed runs left behind are removed (the lock says no
// run is writing them now).
static void ckpt_dir_prepare(const Args* a) {
    const char* dir = a->ckpt_dir;
    char path[PATH_CAP];
    struct stat st;
    if (mkdir(dir, 0755) && errno != EEXIST) fail("--ckpt-dir %s: cannot create: %s", dir, strerror(errno));
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) fail("--ckpt-dir %s exists and is not a directory", dir);
    ckpt_dir_lock(dir);
    path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin.tmp.train-%d-XXXXXX", dir, (int)getpid(),
                a->cfg.steps);  // the longest name a save writes fits
    output_check(path_format(path, "--ckpt-dir", "%s/LATEST", dir), "--ckpt-dir");
    DIR* d = opendir(dir);
    if (!d) fail("--ckpt-dir %s: cannot open: %s", dir, strerror(errno));
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!ckpt_dir_owns(e->d_name) || !strcmp(e->d_name, "LOCK")) continue;
        path_format(path, "--ckpt-dir", "%s/%s", dir, e->d_name);
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            closedir(d);  // e is gone with it; path holds the name
            fail("--ckpt-dir %s: %s is %s (a save replaces only regular files)", dir, path, file_kind(st.st_mode));
        }
        if (temp_name_len(e->d_name) < strlen(e->d_name)) unlink(path);  // a killed run's temporary file
    }
    closedir(d);
}

// Why x[0, n) cannot be section `section` of a model state (0 params, 1 AdamW m, 2 AdamW
// v), or NULL: every value must be finite, and v, a mean of squares, >= 0.
static const char* state_values_check(const float* x, size_t n, int section, const char* tensor, char* why,
                                      size_t cap) {
    static const char* names[3] = {"parameters", "adam m", "adam v"};
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            snprintf(why, cap, "%s of tensor %s: non-finite value %g at element %zu", names[section], tensor, x[i], i);
            return why;
        }
        if (section == 2 && x[i] < 0) {
            snprintf(why, cap, "adam v of tensor %s: negative value %g at element %zu (a mean of squares)", tensor,
                     x[i], i);
            return why;
        }
    }
    return NULL;
}

// Up to the 256 int32 of a checkpoint's header from the regular file at path into h: how many were read (0: the
// file cannot be opened as one).
static size_t ckpt_header_read(const char* path, int32_t* h) {
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    size_t n = f ? fread(h, sizeof(int32_t), 256, f) : 0;
    if (f) fclose(f);
    return n;
}

// Whether dir's checkpoint of a step begins with this program's magic: a checkpoint, perhaps damaged
// further on (someone's weights all the same), not a file of another kind under its name.
static int ckpt_file_has_magic(const char* dir, int step) {
    char path[PATH_CAP];
    int32_t h[256];
    return ckpt_header_read(path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin", dir, step), h) >= 1 &&
           h[CK_MAGIC] == CKPT_MAGIC;
}

// At start-up on rank 0: a run that saves into a --ckpt-dir holding checkpoints past its first step
// would replace those of steps it reaches, another run's weights lost without a word (a requeue that
// forgot --resume auto starts again at step 0 over the run it should continue; a rewind, --resume of
// an older checkpoint, over the later ones), and its first save points LATEST behind the rest, where
// a later --resume auto would continue and replace them. Refused, naming the newest. --resume auto is
// not checked: it continues the history the directory holds (what lies past its LATEST is that history's).
static void ckpt_dir_spare_others(const Args* a) {
    int start = 0, *steps, n_past = 0, newest = -1;
    if (a->resume) {  // its step (a file that cannot be read: the resume says why)
        int32_t h[256];
        if (ckpt_header_read(a->resume, h) != 256) return;
        start = h[CK_STEP];
    }
    int n = ckpt_list(a->ckpt_dir, "--ckpt-dir", &steps);
    for (int i = 0; i < n; i++)  // (newest first; a file of that name without our magic is not one)
        if (steps[i] > start && ckpt_file_has_magic(a->ckpt_dir, steps[i]) && !n_past++) newest = steps[i];
    free(steps);
    if (!n_past) return;
    char more[64] = "";
    if (n_past > 1) snprintf(more, sizeof(more), ", the newest, and %d more", n_past - 1);
    if (!a->resume)
        fail("--ckpt-dir %s holds checkpoints of an earlier run (ckpt_%08d.bin%s): this run starts at step 0 and "
             "would replace them or point LATEST behind them; --resume auto continues that run, or give another "
             "--ckpt-dir", a->ckpt_dir, newest, more);
    fail("--ckpt-dir %s holds checkpoints past step %d, the one --resume gives (ckpt_%08d.bin%s): this run would "
         "replace them or point LATEST behind them; move them, or give another --ckpt-dir", a->ckpt_dir, start, newest,
         more);
}

// The checkpoints of this run's history, oldest first: the only ones rotation deletes. Those this
// run wrote, and where it resumed from a checkpoint in its own --ckpt-dir (a job's next launch)
// the older ones of the launches before (ckpt_history_adopt), so --ckpt-keep N bounds the
// directory across resumes: N, and the one resumed from, which the next launch may rotate away.
// Never touched: the checkpoint resumed from, a file of a higher step (another history), of
// another model, seed or global batch, one whose header does not verify, any checkpoint where
// the run resumed from elsewhere or started fresh, and any other name.
static int* ckpt_written = NULL;
static int ckpt_n_written = 0;

// At start-up on rank 0, a run resuming (a->resume) with --ckpt-dir: the history it continues.
static void ckpt_history_adopt(const Args* a) {
    struct stat in_dir, dir;
    char parent[PATH_CAP], path[PATH_CAP], why[256];
    snprintf(parent, sizeof(parent), "%.*s", (int)(strrchr(a->resume, '/') ? strrchr(a->resume, '/') - a->resume : 1),
             strrchr(a->resume, '/') ? a->resume : ".");
    if (stat(parent, &in_dir) || stat(a->ckpt_dir, &dir) || in_dir.st_dev != dir.st_dev || in_dir.st_ino != dir.st_ino)
        return;  // resumed from elsewhere: this directory's files are not its history
    int32_t resumed[256], *steps;
    int n = ckpt_header_read(a->resume, resumed) == 256 ? ckpt_list(a->ckpt_dir, "--ckpt-keep", &steps) : 0;
    ParamLayout* full = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(full, &a->cfg, 1, 0, 1, 1, 0, 1);
    for (int i = n - 1; i >= 0; i--) {  // oldest first
        if (steps[i] >= resumed[CK_STEP]) continue;
        CkptIndex ix;
        FILE* f = fopen(path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin", a->ckpt_dir, steps[i]), "rb");
        if (!f || ckpt_index_read(f, &ix, why, sizeof(why))) { if (f) fclose(f); continue; }
        const int32_t* h = ix.h;
        struct stat st;
        if (!fstat(fileno(f), &st) && !ckpt_header_check(h, &a->cfg, full->n_full, st.st_size, why) &&
            h[CK_STEP] == steps[i] && h[CK_SEED_LO] == resumed[CK_SEED_LO] && h[CK_SEED_HI] == resumed[CK_SEED_HI] &&
            h[CK_GLOBAL_BATCH] == resumed[CK_GLOBAL_BATCH]) {
            ckpt_written = (int*)realloc(ckpt_written, sizeof(int) * (ckpt_n_written + 1));
            if (!ckpt_written) fail("out of memory");
            ckpt_written[ckpt_n_written++] = steps[i];
        }
        fclose(f);
        ckpt_index_free(&ix);
    }
    if (n) free(steps);
    free(full);
}

// After step `step`'s checkpoint and the manifest naming it are in place: keep the newest
// ckpt_keep of this run's history (ckpt_written), deleting the older ones (the newest is never
// deleted: ckpt_keep >= 1).
static void ckpt_rotate(const char* dir, int step, int keep) {
    ckpt_written = (int*)realloc(ckpt_written, sizeof(int) * (ckpt_n_written + 1));
    if (!ckpt_written) fail("out of memory");
    ckpt_written[ckpt_n_written++] = step;
    char path[PATH_CAP];
    struct stat st;
    while (ckpt_n_written > keep) {
        path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin", dir, ckpt_written[0]);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
        memmove(ckpt_written, ckpt_written + 1, sizeof(int) * --ckpt_n_written);
    }
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
    int n_t = full->n;
    size_t max_t = param_layout_max_tensor(full);
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    uint64_t* lens = (uint64_t*)xmalloc(sizeof(uint64_t) * n_t);
    uint64_t* sums = (uint64_t*)xmalloc(sizeof(uint64_t) * 3 * n_t);
    char path[PATH_CAP], why[512];
    int32_t h[256];
    AtomicFile out;
    if (L->rank == 0) {
        atomic_open(&out, path_format(path, "--ckpt-dir", "%s/ckpt_%08d.bin", a->ckpt_dir, step), "checkpoint");
        ckpt_header_fill(h, c, step, full->n_full, n_t);
        h[CK_PACKING] = a->packing + 1;
        atomic_write(&out, h, sizeof(h));  // its checksum is written over it at the end
    }
    for (int sec = 0; sec < 3; sec++) {
        const float* src = sec == 0 ? params : mv[sec - 1];
        for (int i = 0; i < n_t; i++) {
            const Tensor* ft = &full->t[i];
            gather_full_tensor(L, P, ft, src, buf);
            if (L->rank != 0) continue;
            if (state_values_check(buf, ft->size, sec, ft->name, why, sizeof(why))) {
                atomic_abandon(&out);
                fail("checkpoint of step %d not written: %s; the checkpoints on disk are kept", step, why);
            }
            atomic_write(&out, buf, sizeof(float) * ft->size);
            lens[i] = ft->size, sums[(size_t)sec * n_t + i] = hash_bytes(buf, sizeof(float) * ft->size);
        }
    }
    if (L->rank == 0) {
        atomic_write(&out, lens, sizeof(uint64_t) * n_t);
        atomic_write(&out, sums, sizeof(uint64_t) * 3 * n_t);
        uint64_t sum = ckpt_header_checksum(h, lens, sums, n_t);
        h[CK_SUM_LO] = (int32_t)(uint32_t)sum, h[CK_SUM_HI] = (int32_t)(uint32_t)(sum >> 32);
        if (fseeko(out.f, 0, SEEK_SET)) fail("checkpoint: seek in %s failed: %s", out.tmp, strerror(errno));
        atomic_write(&out, h, sizeof(h));
        atomic_commit(&out);
        // the manifest names only a file read back whole against its checksums
        if (ckpt_verify_file(out.path, why, sizeof(why))) fail("checkpoint %s: reading it back: %s", out.path, why);
        char manifest[64];
        snprintf(manifest, sizeof(manifest), "ckpt_%08d.bin\n", step);
        AtomicFile latest;  // the manifest, last
        atomic_open(&latest, path_format(path, "--ckpt-dir", "%s/LATEST", a->ckpt_dir), "checkpoint manifest");
        atomic_write(&latest, manifest, strlen(manifest));
        atomic_commit(&latest);
        ckpt_rotate(a->ckpt_dir, step, a->ckpt_keep);
        char shown[4 * PATH_CAP];
        printf("checkpoint: %s (step %d)\n", printable(out.path, shown, sizeof(shown)), step);
        fflush(stdout);
    }
    free(full); free(buf); free(lens); free(sums); free(mv[0]); free(mv[1]);
}

// The checkpoint --resume auto continues from, into out (PATH_CAP bytes): the one the
// manifest LATEST names; without a manifest, the newest file whose every tensor matches
// its checksum (ckpt_verify_file), past any newer one a crash, a full disk or anything else
// left incomplete or damaged; "" when there is none at all (the directory missing or without
// a ckpt_*.bin: a job's first launch starts at step 0, so one requeue script serves every
// launch). verbose: say which files were passed over, or that there was none.
static void ckpt_find_latest(const char* dir, char* out, int verbose) {
    char path[PATH_CAP], why[256], name[64] = "", shown[4 * PATH_CAP];
    struct stat st;
    path_format(path, "--ckpt-dir", "%s/LATEST", dir);
    if (lstat(path, &st) == 0) {
        // this program writes LATEST as a regular file: a link to elsewhere is not read (nor echoed)
        if (!S_ISREG(st.st_mode))
            fail("--resume auto: manifest %s: not a regular file (%s), not read", path, file_kind(st.st_mode));
        FILE* f = input_open(path, why, sizeof(why), NULL);
        if (!f) fail("--resume auto: manifest %s: %s", path, why);
        size_t n = fread(name, 1, sizeof(name) - 1, f);
        fclose(f);
        name[n] = 0;
        size_t len = strcspn(name, "\n");  // the name, then one newline and nothing else
        int whole = len == n || (len + 1 == n && name[len] == '\n');
        if (memchr(name, 0, n)) fail("--resume auto: manifest %s holds a NUL byte (at byte %zu)", path, strlen(name));
        name[len] = 0;
        if (n && (!whole || ckpt_name_step(name) < 0))
            fail("--resume auto: manifest %s does not name a checkpoint (ckpt_<step>.bin): '%s'%s", path, name,
                 whole ? "" : " and more");
        if (n) {
            path_format(out, "--ckpt-dir", "%s/%s", dir, name);
            return;
        }
    }
    int* steps;
    if (stat(dir, &st) != 0 && errno == ENOENT) {  // run_setup creates it after this
        if (verbose) printf("resume: --ckpt-dir %s does not exist yet: starting at step 0\n",
                            printable(dir, shown, sizeof(shown)));
        *out = 0;
        return;
    }
    int n = ckpt_list(dir, "--resume auto", &steps);
    for (int i = 0; i < n; i++) {
        path_format(out, "--ckpt-dir", "%s/ckpt_%08d.bin", dir, steps[i]);
        if (!ckpt_verify_file(out, why, sizeof(why))) {
            free(steps);
            return;
        }
        if (verbose) printf("resume: passing over %s: %s\n", printable(out, shown, sizeof(shown)), why);
    }
    free(steps);
    if (n) fail("--resume auto: no complete checkpoint in %s (%d incomplete or damaged)", dir, n);
    if (verbose) printf("resume: no checkpoint in %s yet: starting at step 0\n", printable(dir, shown, sizeof(shown)));
    *out = 0;  // a job's first launch: nothing to resume
}

// Read this rank's shard of the checkpoint at path into local[3] (params, m, v over the
// local buffer) and *step: NULL, or the error (msg, cap bytes). The header and index must
// match their checksum, and every tensor this rank reads its own checksum, before its values
// are checked (state_values_check).
static const char* ckpt_read_shard(const Layout* L, const ParamLayout* P, const ModelConfig* c, const char* path,
                                   float** local, int32_t* h, char* msg, size_t cap) {
    char why[512];
    FILE* f = input_open(path, why, sizeof(why), NULL);
    if (!f) { snprintf(msg, cap, "--resume %s: cannot open: %s", path, why); return msg; }
    struct stat st;
    fstat(fileno(f), &st);
    CkptIndex ix;
    if (ckpt_index_read(f, &ix, why, sizeof(why))) {
        fclose(f);
        snprintf(msg, cap, "checkpoint %s: %s", path, why);
        return msg;
    }
    memcpy(h, ix.h, sizeof(ix.h));
    *msg = 0;
    if (ckpt_header_check(h, c, P->n_full, (long long)st.st_size, why))
        snprintf(msg, cap, "checkpoint %s: %s", path, why);
    else if (h[CK_GLOBAL_BATCH] != c->global_batch)
        snprintf(msg, cap,
                 "checkpoint %s: trained with --global-batch %d; resuming with %d would change the data order", path,
                 h[CK_GLOBAL_BATCH], c->global_batch);
    size_t max_t = param_layout_max_tensor(P);
    float* buf = (float*)xmalloc(sizeof(float) * max_t);
    static const char* names[3] = {"parameters", "adam m", "adam v"};
    for (int i = 0; i < P->n && !*msg; i++) {
        const Tensor* t = &P->t[i];
        size_t full_n = (size_t)t->rows * t->cols;
        int k = 0;  // its entry in the index: the tensor that starts at its offset, of its length
        uint64_t at = 0;
        while (k < ix.n_tensors && at < t->full_offset) at += ix.lens[k++];
        if (k == ix.n_tensors || at != t->full_offset || ix.lens[k] != full_n)
            snprintf(msg, cap, "checkpoint %s: tensor %s is not in its index (a checkpoint of another model)", path,
                     t->name);
        for (int sec = 0; sec < 3 && !*msg; sec++) {
            long long off = 1024 + 4LL * ((long long)sec * P->n_full + (long long)t->full_offset);
            if (fseeko(f, off, SEEK_SET) || fread(buf, sizeof(float), full_n, f) != full_n)
                snprintf(msg, cap, "checkpoint %s: read of %s failed", path, t->name);
            else if (hash_bytes(buf, sizeof(float) * full_n) != ix.sums[(size_t)sec * ix.n_tensors + k])
                snprintf(msg, cap, "checkpoint %s: %s of tensor %s do not match their checksum (the file is corrupt)",
                         path, names[sec], t->name);
            else if (state_values_check(buf, full_n, sec, t->name, why, sizeof(why)))
                snprintf(msg, cap, "checkpoint %s: %s", path, why);
            CopyCtx cc = {local[sec] + t->offset, buf, 0};
            if (!*msg) tensor_runs(t, L->tp, L->tp_rank, copy_run, &cc);
            stop_if_signalled("reading the checkpoint");
        }
    }
    fclose(f);
    free(buf);
    ckpt_index_free(&ix);
    return *msg ? msg : NULL;
}

// Collective over the world: the lowest rank whose `bad` is set prints it, the one error line
// of the run, and every rank exits 1. Each rank reads its shard from the same file, so a bad
// file fails them all at once: without this every rank would print the same line.
static void errors_agree(const Layout* L, const char* bad) {
    Comm* world = (Comm*)&L->group[GROUP_WORLD];
    if (world->size <= 1) {  // (a Layout of tools and tests may leave the world's size 0)
        if (bad) fail("%s", bad);
        return;
    }
    int first_bad = bad ? L->rank : INT_MAX;
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, world->mpi));  // comm: world, once
    if (first_bad == INT_MAX) return;
    if (L->rank == first_bad) print_error("%s", bad);
    MPI_Finalize();
    exit(1);
}

// Load the checkpoint a->resume names (a file: run_setup has resolved "auto") into this
// rank's shard; returns the step to continue from. Collective: a problem any rank finds is
// one error line, from the lowest such rank, and every rank exits 1.
static int ckpt_resume(const Layout* L, const ParamLayout* P, const ModelConfig* c, const Args* a, float* params,
                       float* m_state, float* v_state, size_t opt_lo, size_t opt_hi) {
    const char* path = a->resume;
    char msg[1024];
    int32_t h[256];
    float* local[3] = {params, (float*)xcalloc(P->n_padded, sizeof(float)),
                       (float*)xcalloc(P->n_padded, sizeof(float))};
    watchdog_pause();  // (every rank reads its shard)
    const char* bad = ckpt_read_shard(L, P, c, path, local, h, msg, sizeof(msg));
    watchdog_resume("at start-up, after reading the checkpoint, waiting for the other ranks to read it: a rank died or "
                    "hangs there");
    errors_agree(L, bad);
    memcpy(m_state, local[1] + opt_lo, sizeof(float) * (opt_hi - opt_lo));
    memcpy(v_state, local[2] + opt_lo, sizeof(float) * (opt_hi - opt_lo));
    free(local[1]); free(local[2]);
    char shown[4 * PATH_CAP];
    // past --steps: the schedule (warm-up, cosine to --steps) has no step to give; at it, the run is done.
    // Another --packing, or wlb at another --micro-batch (its plan balances the G/B micro-batches of a batch,
    // whatever dp): other sequences in each batch from the step on (the data order changes)
    static const char* packing[3] = {"concat", "greedy", "wlb"};
    int other_packing = h[CK_PACKING] >= 1 && h[CK_PACKING] <= 3 && h[CK_PACKING] != a->packing + 1;
    int other_wlb_units =
        a->packing == PACK_WLB && h[CK_PACKING] == PACK_WLB + 1 && h[CK_MICRO_BATCH] != c->micro_batch;
    if (h[CK_STEP] > c->steps || other_packing || other_wlb_units) {
        if (L->rank == 0 && other_packing)
            print_error("--resume %s: the checkpoint was trained with --packing %s; resuming with --packing %s would "
                        "change the data order", printable(path, shown, sizeof(shown)), packing[h[CK_PACKING] - 1],
                        packing[a->packing]);
        else if (L->rank == 0 && other_wlb_units)
            print_error("--resume %s: the checkpoint was trained with --packing wlb at --micro-batch %d; resuming "
                        "at --micro-batch %d would change the data order (wlb balances the global batch's "
                        "micro-batches)", printable(path, shown, sizeof(shown)), h[CK_MICRO_BATCH], c->micro_batch);
        else if (L->rank == 0)
            print_error("--resume %s: the checkpoint is at step %d, past --steps %d (raise --steps to go on)",
                        printable(path, shown, sizeof(shown)), h[CK_STEP], c->steps);
        MPI_Finalize();
        exit(1);
    }
    if (L->rank == 0)
        printf("resumed from %s (step %d, saved with dp %d tp %d pp %d vpp %d zero %d)%s\n",
               printable(path, shown, sizeof(shown)), h[CK_STEP], h[CK_DP], h[CK_TP], h[CK_PP], h[CK_VPP], h[CK_ZERO],
               h[CK_STEP] == c->steps ? ": the run is complete at --steps, nothing to train (raise --steps to go on)"
                                      : "");
    if (L->rank == 0 && c->arch == ARCH_LLAMA && !ckpt_header_rope_theta(h))
        printf("note: checkpoint format %d does not record rope_theta: resuming with this run's %g (--rope-theta)\n",
               h[CK_VERSION], c->rope_theta);
    return h[CK_STEP];
}

// An import's reader on every rank, its errors (data_fail) collected and agreed on
// (errors_agree): one error line for the run, not one a rank.
#define import_agree(L, read_call)                                                          \
    do {                                                                                    \
        jmp_buf import_error;                                                               \
        data_error_msg[0] = 0;                                                              \
        watchdog_pause();                                                                   \
        if (!setjmp(import_error)) { data_error_at = &import_error; read_call; }            \
        data_error_at = NULL;                                                               \
        watchdog_resume("at start-up, after reading the imported weights, waiting for the other ranks: a rank " \
                        "died or hangs there");                                             \
        errors_agree(L, data_error_msg[0] ? data_error_msg : NULL);                         \
    } while (0)

#endif
