// backend/cpu/embed_loss.h: the vocabulary-parallel embedding (out N x C from this rank's
// rows [vocab_start, vocab_start+vocab_local) of wte), GPT-2's position embedding (wpe, T x C), and the
// vocabulary-parallel cross-entropy over logits N x vocab_local in three passes (row maxima; sums of
// exponentials and target logits; losses N and dlogits).
#ifndef CPU_EMBED_LOSS_H
#define CPU_EMBED_LOSS_H

#include "backend/cpu/simd.h"

// Vocabulary-parallel embedding: this rank holds rows [vocab_start, vocab_start+vocab_local) of wte. Rows of
// tokens outside that range come out 0 here; the tp reduction adds the other ranks'.

static void embedding_forward(float* out, const int* tokens, const float* wte, int N, int C, int vocab_start,
                              int vocab_local) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int r = tokens[i] - vocab_start;
        float* o = out + (size_t)i * C;
        if (r >= 0 && r < vocab_local) memcpy(o, wte + (size_t)r * C, sizeof(float) * C);
        else memset(o, 0, sizeof(float) * C);
    }
}
// Parallel over channel blocks, rows in order: deterministic and race-free when tokens repeat.
static void embedding_backward(float* dwte, const int* tokens, const float* dout, int N, int C, int vocab_start,
                               int vocab_local) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 16) {
        int cn = C - c0 < 16 ? C - c0 : 16;
        for (int i = 0; i < N; i++) {
            int r = tokens[i] - vocab_start;
            if (r < 0 || r >= vocab_local) continue;
            for (int c = 0; c < cn; c++) dwte[(size_t)r * C + c0 + c] += dout[(size_t)i * C + c0 + c];
        }
    }
}

// Position embedding of rows [row0, row0+N) of a (B*T)-row batch: out += wpe[row % T].
static void position_forward(float* out, const float* wpe, int N, int row0, const int* pos, int T, int C) {
#pragma omp parallel for
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] += wpe[(size_t)pos[(row0 + i) % T] * C + c];
}
static void position_backward(float* dwpe, const float* dout, int N, int row0, const int* pos, int T, int C) {
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 16) {
        int cn = C - c0 < 16 ? C - c0 : 16;
        for (int i = 0; i < N; i++)
            for (int c = 0; c < cn; c++) dwpe[(size_t)pos[(row0 + i) % T] * C + c0 + c] += dout[(size_t)i * C + c0 + c];
    }
}

// ----------------------------------------------------------------------------
// Vocabulary-parallel softmax cross-entropy (Megatron-LM): logits (N x vocab_local) are this
// rank's columns [vocab_start, vocab_start+vocab_local) of the padded vocabulary; columns >= vocab are padding
// and never take probability. The caller reduces over the tp group between the
// passes: maxes (MAX), then sums = [sum exp | target logit] (SUM). No rank ever
// holds the full row of logits.

static void crossentropy_local_max(float* maxes, const float* logits, int N, int vocab_local, int vocab_start,
                                   int vocab) {
    int vn = vocab - vocab_start < vocab_local ? vocab - vocab_start : vocab_local;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* l = logits + (size_t)i * vocab_local;
        vec m = vbcast(-FLT_MAX);
        int j = 0;
        for (; j + VLEN <= vn; j += VLEN) m = vmax(m, vload(l + j));
        float mx = vmax_all(m);
        for (; j < vn; j++) mx = l[j] > mx ? l[j] : mx;
        maxes[i] = mx;
    }
}
// sums[i] = sum_j exp(l_ij - max_i); sums[N + i] = logit of the target if it is here, else 0.
static void crossentropy_local_sums(float* sums, const float* logits, const float* maxes, const int* targets,
                                    int N, int vocab_local, int vocab_start, int vocab) {
    int vn = vocab - vocab_start < vocab_local ? vocab - vocab_start : vocab_local;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* l = logits + (size_t)i * vocab_local;
        vec mx = vbcast(maxes[i]), s = vzero();
        ROW_LOOP(j, w, vn) s = vadd(s, vfirst(vexp(vsub(vloadn(l + j, w), mx)), w));
        int r = targets[i] - vocab_start;
        sums[i] = vsum(s);
        sums[N + i] = (r >= 0 && r < vocab_local) ? l[r] : 0.0f;
    }
}
// losses[i] = log(sum) + max - target logit; if dlogits != NULL, logits are replaced in place
// by dloss/dlogit = (softmax - onehot) * dloss_scale (fused forward+backward, as llm.c does).
// A target < 0 (padding, layout/packing.h) is ignored: loss 0, gradient 0.
static void crossentropy_finish(float* losses, float* dlogits, const float* maxes, const float* sums,
                                const int* targets, int N, int vocab_local, int vocab_start, int vocab,
                                float dloss_scale) {
    int vn = vocab - vocab_start < vocab_local ? vocab - vocab_start : vocab_local;
#pragma omp parallel for
    for (int i = 0; i < N; i++) {
        int ignored = targets[i] < 0;
        losses[i] = ignored ? 0.0f : logf(sums[i]) + maxes[i] - sums[N + i];
        if (!dlogits) continue;
        float* d = dlogits + (size_t)i * vocab_local;
        if (ignored) { memset(d, 0, sizeof(float) * vocab_local); continue; }
        vec mx = vbcast(maxes[i]), scale = vbcast(1.0f / sums[i] * dloss_scale);
        ROW_LOOP(j, w, vn) vstoren(d + j, vmul(vexp(vsub(vloadn(d + j, w), mx)), scale), w);
        for (int j = vn > 0 ? vn : 0; j < vocab_local; j++) d[j] = 0.0f;
        int r = targets[i] - vocab_start;
        if (r >= 0 && r < vocab_local) d[r] -= dloss_scale;
    }
}

#endif
