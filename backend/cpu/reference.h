// backend/cpu/reference.h: every operation of the model once, as plain fp32 loops: the math to read
// first. The fast CPU kernels (backend/cpu/kernels_cpu.h: SIMD, packed GEMM, attention by tiles) compute
// the same functions and are checked against these (tests/gpt_kernels.c); `./train --kernels ref`
// trains with these instead (slow: for reading and for checking, on small shapes).
//
// Conventions, as in llm.c's train_gpt2.c: shapes are in the argument lists (N rows = tokens,
// C channels, IC/OC input/output channels of a matmul, B sequences of T positions, H query heads
// and KV key/value heads of hd channels, F the MLP's hidden size); a weight matrix is OC x IC
// (PyTorch's layout); every backward adds (+=) into the gradients it is given. The vocabulary
// ops take this rank's rows [vocab_start, vocab_start + vocab_local) of the padded vocabulary
// (tensor parallelism): with one rank vocab_start = 0 and vocab_local = the padded vocabulary.
// No threads, no SIMD: one loop nest per formula.
//
// In order: embeddings, LayerNorm, RMSNorm, matmul, RoPE, attention, GELU, SwiGLU, residual,
// cross-entropy, AdamW.
#ifndef REFERENCE_H
#define REFERENCE_H

#include <math.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include "layout/config.h"  // AttnBlock

// ----------------------------------------------------------------------------
// Embeddings. out[i] = wte[tokens[i]] for the tokens of this rank's rows, 0 for the others
// (tensor parallelism adds the ranks' outputs). GPT-2 adds a learned position embedding:
// row i of a batch (row0 + i overall) is at position pos[(row0 + i) % T] of its sequence.

static void ref_embedding_forward(float* out, const int* tokens, const float* wte, int N, int C, int vocab_start,
                                  int vocab_local) {
    for (int i = 0; i < N; i++) {
        int row = tokens[i] - vocab_start;
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = row >= 0 && row < vocab_local ? wte[(size_t)row * C + c] : 0.0f;
    }
}
static void ref_embedding_backward(float* dwte, const int* tokens, const float* dout, int N, int C, int vocab_start,
                                   int vocab_local) {
    for (int i = 0; i < N; i++) {
        int row = tokens[i] - vocab_start;
        if (row < 0 || row >= vocab_local) continue;
        for (int c = 0; c < C; c++) dwte[(size_t)row * C + c] += dout[(size_t)i * C + c];
    }
}
static void ref_position_forward(float* out, const float* wpe, int N, int row0, const int* pos, int T, int C) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] += wpe[(size_t)pos[(row0 + i) % T] * C + c];
}
static void ref_position_backward(float* dwpe, const float* dout, int N, int row0, const int* pos, int T, int C) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) dwpe[(size_t)pos[(row0 + i) % T] * C + c] += dout[(size_t)i * C + c];
}

// ----------------------------------------------------------------------------
// LayerNorm (GPT-2): out = (x - mean) / sqrt(var + 1e-5) * weight + bias over each row's C
// channels; the row's mean and rstd = 1 / sqrt(var + 1e-5) are kept for the backward. With
// xhat = (x - mean) rstd and g = weight * dout, the backward is
//     dx = rstd (g - mean(g) - xhat mean(g xhat)),  dweight += dout xhat,  dbias += dout.

static void ref_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                  const float* bias, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float m = 0.0f, var = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(var / C + 1e-5f);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m, rstd[i] = s;
    }
}
static void ref_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                   const float* weight, const float* mean, const float* rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mean[i]) * rstd[i];
            g_mean += weight[c] * d[c];
            gx_mean += weight[c] * d[c] * xhat;
        }
        g_mean /= C, gx_mean /= C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mean[i]) * rstd[i];
            dinp[(size_t)i * C + c] += rstd[i] * (weight[c] * d[c] - g_mean - xhat * gx_mean);
            dweight[c] += d[c] * xhat;
            dbias[c] += d[c];
        }
    }
}

// ----------------------------------------------------------------------------
// RMSNorm (LLaMA): out = x rstd weight, rstd = 1 / sqrt(mean(x^2) + 1e-5). With g = weight *
// dout: dx = rstd g - x rstd^3 mean(g x),  dweight += dout x rstd.

static void ref_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + 1e-5f);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = x[c] * s * weight[c];
        rstd[i] = s;
    }
}
static void ref_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                 const float* rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
        float s = rstd[i], gx_mean = 0.0f;
        for (int c = 0; c < C; c++) gx_mean += weight[c] * d[c] * x[c];
        gx_mean /= C;
        for (int c = 0; c < C; c++) {
            dinp[(size_t)i * C + c] += s * weight[c] * d[c] - x[c] * s * s * s * gx_mean;
            dweight[c] += d[c] * x[c] * s;
        }
    }
}

// ----------------------------------------------------------------------------
// Matmul: out (N x OC) = inp (N x IC) weight^T + bias (bias may be NULL). Its backward in the
// two passes the trainer runs apart (a zero-bubble schedule defers the second):
//     dinp += dout weight,   dweight += dout^T inp,  dbias += column sums of dout.

static void ref_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                               int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            float s = bias ? bias[o] : 0.0f;
            for (int k = 0; k < IC; k++) s += inp[(size_t)i * IC + k] * weight[(size_t)o * IC + k];
            out[(size_t)i * OC + o] = s;
        }
}
static void ref_matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int IC, int OC) {
    for (int i = 0; i < N; i++)
        for (int k = 0; k < IC; k++) {
            float s = 0.0f;
            for (int o = 0; o < OC; o++) s += dout[(size_t)i * OC + o] * weight[(size_t)o * IC + k];
            dinp[(size_t)i * IC + k] += s;
        }
}
static void ref_matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N,
                                       int IC, int OC) {
    for (int o = 0; o < OC; o++) {
        for (int k = 0; k < IC; k++) {
            float s = 0.0f;
            for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o] * inp[(size_t)i * IC + k];
            dweight[(size_t)o * IC + k] += s;
        }
        if (dbias)
            for (int i = 0; i < N; i++) dbias[o] += dout[(size_t)i * OC + o];
    }
}

// ----------------------------------------------------------------------------
// Rotary position embedding (RoPE, Su et al. 2021), in place on the first n_heads heads of each
// row (the q and k heads of a qkv row of `stride` floats): the pair (x[2j], x[2j+1]) of a head
// turns by the angle pos * theta^(-2j/hd) (theta the model's base: 10000, Llama 3's 500000),
// pos = positions[i % T]. A rotation's transpose is the rotation back, so the backward is the
// same call with sign -1.

static void ref_rope(float* qkv, int N, const int* positions, int T, int stride, int n_heads, int hd, float theta,
                     float sign) {
    for (int i = 0; i < N; i++)
        for (int h = 0; h < n_heads; h++)
            for (int j = 0; j < hd / 2; j++) {
                float* x = qkv + (size_t)i * stride + h * hd + 2 * j;
                float angle = positions[i % T] * powf(theta, -2.0f * j / hd);
                float c = cosf(angle), s = sign * sinf(angle), a = x[0], b = x[1];
                x[0] = a * c - b * s;
                x[1] = a * s + b * c;
            }
}

// ----------------------------------------------------------------------------
// Attention, softmax(q k^T / sqrt(hd)) v per head, causal and within documents: query q may see
// key k iff pos(k) <= pos(q) and pos(k) >= doc[pos(q)] (where q's document starts; doc NULL: the
// sequence is one document). Grouped-query attention: query head h reads kv head h / (Ha / KVa).
//
// By blocks (layout/config.h AttnBlock): the query rows of one segment of the sequences against
// the key rows of another, as context parallelism's ring delivers them (the whole sequence is
// one block). Each block's output y and log-sum-exp l of its scores are merged into the running
// output o and lse of each query row:  lse' = log(exp(lse) + exp(l)),
// o' = o exp(lse - lse') + y exp(l - lse'). The backward needs only the final lse:
// P = exp(score - lse), D = dout . out, dv += P dout, dS = P (dout . v - D), dq += dS k / sqrt(hd),
// dk += dS q / sqrt(hd).

// The position of row t of a block's queries (keys: keys = 1) in sequence b.
static int ref_block_position(const AttnBlock* a, int b, int t, int keys) {
    const int* at = keys ? a->k_at : a->q_at;
    if (at) return at[(size_t)b * a->at_ld + t];
    return (keys ? a->k_pos : a->q_pos) + t;
}
static int ref_visible(const AttnBlock* a, int b, int t, int j) {
    int qp = ref_block_position(a, b, t, 0), kp = ref_block_position(a, b, j, 1);
    return kp <= qp && (!a->doc || kp >= a->doc[(size_t)b * a->doc_ld + qp]);
}

// o (rows of o_ld floats, the block's query rows), lse (B x Ha x Ts); q rows of q_ld floats (the
// query heads), kv rows of kv_ld floats (KVa k heads, then KVa v heads).
static void ref_attention_block_forward(float* o, int o_ld, float* lse, const float* q, const float* kv,
                                        const AttnBlock* a) {
    int hd = a->hd, group = a->Ha / a->KVa;
    float scale = 1.0f / sqrtf((float)hd);
    float* score = (float*)malloc(sizeof(float) * (a->nk + hd));
    float* y = score + a->nk;
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->Ha; h++)
            for (int t = 0; t < a->nq; t++) {
                size_t qrow = (size_t)b * a->Ts + a->q_row + t;
                const float* qh = q + qrow * a->q_ld + h * hd;
                float max = -INFINITY, sum = 0.0f;
                for (int j = 0; j < a->nk; j++) {
                    if (!ref_visible(a, b, t, j)) continue;
                    const float* k = kv + ((size_t)b * a->Ts + a->k_row + j) * a->kv_ld + (h / group) * hd;
                    float s = 0.0f;
                    for (int d = 0; d < hd; d++) s += qh[d] * k[d];
                    score[j] = s * scale;
                    if (score[j] > max) max = score[j];
                }
                for (int d = 0; d < hd; d++) y[d] = 0.0f;
                for (int j = 0; j < a->nk; j++) {
                    if (!ref_visible(a, b, t, j)) continue;
                    const float* v = kv + ((size_t)b * a->Ts + a->k_row + j) * a->kv_ld + (a->KVa + h / group) * hd;
                    float p = expf(score[j] - max);
                    sum += p;
                    for (int d = 0; d < hd; d++) y[d] += p * v[d];
                }
                float* oh = o + qrow * o_ld + h * hd;
                float* l = lse + ((size_t)b * a->Ha + h) * a->Ts + a->q_row + t;
                float old = a->init ? -INFINITY : *l, blk = sum > 0.0f ? max + logf(sum) : -INFINITY;
                if (blk == -INFINITY) {  // no key of this block is visible: the row keeps what it has
                    if (a->init) { for (int d = 0; d < hd; d++) oh[d] = 0.0f; *l = -INFINITY; }
                    continue;
                }
                float top = old > blk ? old : blk, merged = top + logf(expf(old - top) + expf(blk - top));
                for (int d = 0; d < hd; d++)
                    oh[d] = (old == -INFINITY ? 0.0f : oh[d] * expf(old - merged)) + y[d] / sum * expf(blk - merged);
                *l = merged;
            }
    free(score);
}
// dq (rows of dq_ld floats) and dkv (rows of dkv_ld floats: dk heads, then dv heads) accumulate.
static void ref_attention_block_backward(float* dq, int dq_ld, float* dkv, int dkv_ld, const float* q, const float* kv,
                                         const float* dout, const float* out, int o_ld, const float* lse,
                                         const AttnBlock* a) {
    int hd = a->hd, group = a->Ha / a->KVa;
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->Ha; h++)
            for (int t = 0; t < a->nq; t++) {
                size_t qrow = (size_t)b * a->Ts + a->q_row + t;
                const float *qh = q + qrow * a->q_ld + h * hd, *doh = dout + qrow * o_ld + h * hd;
                const float* oh = out + qrow * o_ld + h * hd;
                float l = lse[((size_t)b * a->Ha + h) * a->Ts + a->q_row + t], D = 0.0f;
                for (int d = 0; d < hd; d++) D += doh[d] * oh[d];
                for (int j = 0; j < a->nk; j++) {
                    if (!ref_visible(a, b, t, j)) continue;
                    size_t krow = (size_t)b * a->Ts + a->k_row + j;
                    const float* k = kv + krow * a->kv_ld + (h / group) * hd;
                    const float* v = kv + krow * a->kv_ld + (a->KVa + h / group) * hd;
                    float* dk = dkv + krow * dkv_ld + (h / group) * hd;
                    float* dv = dkv + krow * dkv_ld + (a->KVa + h / group) * hd;
                    float s = 0.0f, dp = 0.0f;
                    for (int d = 0; d < hd; d++) s += qh[d] * k[d], dp += doh[d] * v[d];
                    float p = expf(s * scale - l), ds = p * (dp - D) * scale;
                    for (int d = 0; d < hd; d++) {
                        dq[qrow * dq_ld + h * hd + d] += ds * k[d];
                        dk[d] += ds * qh[d];
                        dv[d] += p * doh[d];
                    }
                }
            }
}

// The whole sequence as one block: qkv rows (B*T) hold [q: H*hd | k: KV*hd | v: KV*hd], out is
// B*T x H*hd, lse B x H x T; doc (B x T, NULL: none) as above. The backward overwrites dqkv.
static AttnBlock ref_whole_sequence(int B, int T, int H, int KV, int hd, const int* doc) {
    AttnBlock a = {.B = B, .Ts = T, .Ha = H, .KVa = KV, .hd = hd, .q_ld = (H + 2 * KV) * hd,
                   .kv_ld = (H + 2 * KV) * hd, .nq = T, .nk = T, .init = 1, .doc = doc, .doc_ld = T};
    return a;
}
static void ref_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int KV, int hd,
                                  const int* doc) {
    AttnBlock a = ref_whole_sequence(B, T, H, KV, hd, doc);
    ref_attention_block_forward(out, H * hd, lse, qkv, qkv + H * hd, &a);
}
static void ref_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                   const float* lse, int B, int T, int H, int KV, int hd, const int* doc) {
    AttnBlock a = ref_whole_sequence(B, T, H, KV, hd, doc);
    memset(dqkv, 0, sizeof(float) * B * T * a.q_ld);
    ref_attention_block_backward(dqkv, a.q_ld, dqkv + H * hd, a.q_ld, qkv, qkv + H * hd, dout, out, H * hd, lse, &a);
}

// ----------------------------------------------------------------------------
// GELU, GPT-2's tanh approximation: gelu(x) = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3);
// gelu'(x) = (1 + tanh(u))/2 + x/2 (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).

static void ref_gelu_forward(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], u = sqrtf(2.0f / (float)M_PI) * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}
static void ref_gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], u = sqrtf(2.0f / (float)M_PI) * (x + 0.044715f * x * x * x), th = tanhf(u);
        float du = sqrtf(2.0f / (float)M_PI) * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
}

// SwiGLU (LLaMA): a row of inp holds [gate (F) | up (F)]; out = silu(gate) up, silu(g) = g sigmoid(g),
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).

static void ref_swiglu_forward(float* out, const float* inp, int N, int F) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            float g = inp[(size_t)i * 2 * F + j], up = inp[(size_t)i * 2 * F + F + j];
            out[(size_t)i * F + j] = g / (1.0f + expf(-g)) * up;
        }
}
static void ref_swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            float g = inp[(size_t)i * 2 * F + j], up = inp[(size_t)i * 2 * F + F + j], d = dout[(size_t)i * F + j];
            float sig = 1.0f / (1.0f + expf(-g));
            dinp[(size_t)i * 2 * F + j] += d * up * sig * (1.0f + g * (1.0f - sig));
            dinp[(size_t)i * 2 * F + F + j] += d * g * sig;
        }
}

// ----------------------------------------------------------------------------
// The residual: out = x + y (+ bias per channel: a row-parallel matmul's bias, added once after
// the tensor-parallel sum). Its backward passes dout to both; the bias's is the column sum.

static void ref_residual_forward(float* out, const float* x, const float* y, const float* bias, int N, int C) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = x[(size_t)i * C + c] + y[(size_t)i * C + c] + (bias ? bias[c] : 0.0f);
}
static void ref_column_sum(float* sum, const float* x, int N, int C) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) sum[c] += x[(size_t)i * C + c];
}

// ----------------------------------------------------------------------------
// Softmax cross-entropy over the vocabulary, loss = log(sum_j exp(l_j)) - l_target, split in the
// three passes vocabulary parallelism needs (Megatron-LM): this rank's columns [vocab_start,
// vocab_start + vocab_local) of each row's logits; the columns past `vocab` are padding and take
// no probability. Between the passes the tensor-parallel group takes the MAX of maxes, then the
// SUM of sums.
//   pass 1: maxes[i] = the row's largest logit here;
//   pass 2: sums[i] = sum_j exp(l_j - max), sums[N + i] = the target's logit if it is here, else 0;
//   pass 3: losses[i] = log(sums[i]) + max - target logit; dlogits (the logits, overwritten; NULL:
//           none) = (softmax - onehot(target)) dloss_scale. A target < 0 (padding) has loss 0, gradient 0.

static void ref_crossentropy_local_max(float* maxes, const float* logits, int N, int vocab_local, int vocab_start,
                                       int vocab) {
    for (int i = 0; i < N; i++) {
        maxes[i] = -FLT_MAX;
        for (int j = 0; j < vocab_local && vocab_start + j < vocab; j++)
            if (logits[(size_t)i * vocab_local + j] > maxes[i]) maxes[i] = logits[(size_t)i * vocab_local + j];
    }
}
static void ref_crossentropy_local_sums(float* sums, const float* logits, const float* maxes, const int* targets,
                                        int N, int vocab_local, int vocab_start, int vocab) {
    for (int i = 0; i < N; i++) {
        sums[i] = 0.0f;
        for (int j = 0; j < vocab_local && vocab_start + j < vocab; j++)
            sums[i] += expf(logits[(size_t)i * vocab_local + j] - maxes[i]);
        int here = targets[i] - vocab_start;
        sums[N + i] = here >= 0 && here < vocab_local ? logits[(size_t)i * vocab_local + here] : 0.0f;
    }
}
static void ref_crossentropy_finish(float* losses, float* dlogits, const float* maxes, const float* sums,
                                    const int* targets, int N, int vocab_local, int vocab_start, int vocab,
                                    float dloss_scale) {
    for (int i = 0; i < N; i++) {
        int padding = targets[i] < 0;
        losses[i] = padding ? 0.0f : logf(sums[i]) + maxes[i] - sums[N + i];
        if (!dlogits) continue;
        for (int j = 0; j < vocab_local; j++) {
            float* d = dlogits + (size_t)i * vocab_local + j;
            float p = padding || vocab_start + j >= vocab ? 0.0f : expf(*d - maxes[i]) / sums[i];
            float onehot = !padding && vocab_start + j == targets[i] ? 1.0f : 0.0f;
            *d = (p - onehot) * dloss_scale;
        }
    }
}

// ----------------------------------------------------------------------------
// AdamW (Loshchilov & Hutter) with bias correction, step t from 1; g = grad * grad_scale (the
// gradient clip); weight decay where decay != 0 (the matrices):
//     m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
//     param -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay param).
// And the sum of squares of the gradient, in double, for its norm.

static void ref_adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, int decay, float grad_scale, int t) {
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float m_hat = m[i] / (1.0f - powf(beta1, (float)t)), v_hat = v[i] / (1.0f - powf(beta2, (float)t));
        param[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + (decay ? weight_decay * param[i] : 0.0f));
    }
}
static double ref_sum_squares(const float* x, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    return sum;
}

#endif
