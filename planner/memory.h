// planner/memory.h: memory per GPU: parameters of a pipeline chunk, activations per layer
// by kernel and recomputation (Korthikanti et al. 2022), the zero-bubble weight pass's
// inputs, the loss's temporaries, the model states by ZeRO stage, and for this trainer its
// own activation buffers (layout/activations.h, the lists it allocates from).
#ifndef PLANNER_MEMORY_H
#define PLANNER_MEMORY_H

#include "layout/params.h"
#include "layout/activations.h"
#include "planner/device.h"
#include "planner/software.h"

// How far the memory model of another framework's peak (Korthikanti's activations, the
// temporaries, mem_frag's allocator share) may fall short, as a fraction of the device's
// memory: on the layouts study's 964 runs with a known outcome (dev/PLANNER.md, "Memory"),
// the runs that went out of memory but were predicted to fit were predicted at most this
// far below the device's memory. The search ranks first the layouts that fit with this much
// room. This trainer's own buffers are counted exactly (0 uncertainty beyond mem_overhead).
#define PLAN_MEM_UNCERTAINTY 0.08

// Parameters one GPU holds for n_layers_chunk layers (a chunk, or all chunks of a stage),
// split over tp: matrices and vocabulary rows are divided by tp, norm weights (and GPT-2's
// row-parallel biases and position table) are replicated. has_embed: they include the
// embedding; has_head: the final norm and the head (GPT-2 ties head and embedding; when
// they sit on different stages the head's stage keeps its own copy, as Megatron does and
// params.h builds it; ZB-V puts both on stage 0, which needs one).
static double chunk_params(const ModelConfig* c, int n_layers_chunk, int has_embed, int has_head, int tp) {
    double C = c->d_model, F = c->d_ff, V = c->vocab_padded, t = tp;
    double kv = c->n_kv_head * (C / c->n_head);
    double layer, up = config_mlp_gated(c) ? 2 : 1;  // the MLP's matrices before its activation (SwiGLU: gate, up)
    if (c->arch == ARCH_GPT2)  // split: W, qkv/fc biases; replicated: 2 LN (w,b), 2 row biases
        layer = (4 * C * C + (up + 1) * C * F + 3 * C + up * F) / t + 4 * C + 2 * C;
    else  // two RMSNorm weights replicated
        layer = (2 * C * C + 2 * C * kv + (up + 1) * C * F) / t + 2 * C;
    double p = n_layers_chunk * layer;
    if (has_embed) p += V * C / t + (c->arch == ARCH_GPT2 ? c->seq_len * C : 0);
    if (has_head) {
        p += c->arch == ARCH_GPT2 ? 2 * C : C;
        if (c->arch == ARCH_LLAMA || !has_embed) p += V * C / t;
    }
    return p;
}

// Recomputation policies frameworks define beside the trainer's none / selective (Megatron's:
// the attention core) / full (model/config.h), for --software scaling | framework | foundry (this
// trainer has none of them): named in --runs' recompute column and by --plan --recompute, not
// searched unless asked for.
//   selective_op     torchtitan's selective activation checkpointing with option "op" (its
//                    _save_list policy, models/llama3/infra/parallelize.py): of a layer's matmuls it
//                    saves the outputs of the odd-numbered ones (1st, 3rd, ...: LLaMA wq, wv, w1, w2;
//                    GPT qkv, fc) and the attention kernel's output; everything else (the even
//                    matmuls, norms, RoPE, activations) is recomputed from the layer input in the backward
//   selective_layer  torchtitan's selective option "2": every second layer checkpointed whole (as
//                    full), the others keep everything (as none)
//   full_distributed Megatron-LM's --recompute-granularity full with --distribute-saved-activations: each
//                    tensor-parallel rank keeps only its 1/tp slice of the layer input it recomputes from
//                    (tensor_parallel/random.py CheckpointFunction: split_tensor_into_1d_equal_chunks) and
//                    all-gathers it before the layer's forward runs again (gather_split_1d_tensor); tp > 1,
//                    without SP (whose layer input is already split)
enum { RECOMPUTE_OP = RECOMPUTE_FULL + 1, RECOMPUTE_LAYER, RECOMPUTE_FULL_DIST, N_PLAN_RECOMPUTE };
static const char* plan_recompute_name(int r) {
    return r == RECOMPUTE_OP ? "selective_op" : r == RECOMPUTE_LAYER ? "selective_layer"
           : r == RECOMPUTE_FULL_DIST ? "full_distributed" : recompute_name(r);
}
// Whether each layer runs its whole forward again in the backward (full, full_distributed).
static int plan_recompute_whole(int r) { return r == RECOMPUTE_FULL || r == RECOMPUTE_FULL_DIST; }
static int plan_recompute_from_name(const char* s) {
    for (int r = RECOMPUTE_NONE; r < N_PLAN_RECOMPUTE; r++)
        if (!strcmp(s, plan_recompute_name(r))) return r;
    return -1;
}
#define PLAN_RECOMPUTE_NAMES "none, selective, full, selective_op, selective_layer, full_distributed"

// --mlp and a --runs row's mlp column: the MLP's kind apart from the attention's (layout/config.h MLP_*).
static const char* const MLP_NAMES[N_MLP] = {"arch", "gelu", "relu2", "swiglu"};
static int plan_mlp_from_name(const char* s) {
    for (int m = MLP_GELU; m < N_MLP; m++)
        if (!strcmp(s, MLP_NAMES[m])) return m;
    return -1;
}
#define PLAN_MLP_NAMES "gelu, relu2, swiglu"
// Whether the MLP is the architecture's own (what this trainer runs): GELU with GPT-2, SwiGLU with LLaMA.
static int plan_mlp_is_arch(const ModelConfig* c) {
    return c->mlp == MLP_ARCH || c->mlp == (c->arch == ARCH_LLAMA ? MLP_SWIGLU : MLP_GELU);
}

// Activation bytes one transformer layer keeps for its backward, for one micro-batch
// of b sequences of s tokens, on one GPU of a tp group. Korthikanti et al. 2022, Table 2,
// in units of s*b*h bytes (bf16 = 2 bytes per value, 1-byte dropout masks):
//   GPT:   no parallelism       34 + 5as/h
//          tensor parallel      10 + 24/t + 5as/(ht)    (10 = LN inputs 4, qkv/fc1 inputs 4, dropout masks 2)
//          tp + sequence par.   34/t + 5as/(ht)
//          selective recompute  drops the 5as/h term (softmax 2, its dropout mask 1 and output 2)
//          full recompute       2 (the layer input only)
// LLaMA, derived the same way (no dropout, RMSNorm, RoPE, SwiGLU, GQA with r = kv/h, f = d_ff/h):
//   replicated (not split by tp without SP): 2 norm inputs 2+2, qkv input 2, gate/up input 2 = 8
//   split by tp: q 2, k 2r, v 2r (post-RoPE, RoPE's backward needs no activations), attention
//     output = out-proj input 2, and SwiGLU's silu(gate) * up as framework ops: gate 2f (silu's
//     input), silu(gate) 2f and up 2f (the product's operands), the product 2f (the down-
//     projection's input)   = 4 + 4r + 8f
//   attention s^2 term: the softmax output 2as/h (no dropout)   -> 8 + 4 + 4r + 8f + 2as/h
//   (13B: r = 1, f = 2.7: 37.6 + 2as/h, GPT's is 34 + 5as/h; counting SwiGLU's product as
//   the only saved value, 6f, predicts fit for 4 more of the study's out-of-memory runs).
// By kernel: FlashAttention (1 and 2) keeps no s^2 tensor, only the fp32 log-sum-exp per row
// and head: 4a/h. Torch attention keeps the fp32 softmax output as well as its bf16 copy:
// 4as/h more. An unfused norm keeps its normalized bf16 copy (2) and the fp32 product with
// the fp32 weight (4) as well: 6 more per norm, 12 per layer (the layouts study's out-of-
// memory boundaries with and without the RMSNorm kernel agree). Other dtypes scale by
// dtype_bytes/2. With context parallelism (cp > 1) a rank holds s = T/cp tokens, and its
// attention runs block by block whatever the kernel, keeping only the log-sum-exp
// (context_parallel.h): 4a/h.
// A layer's matmuls in the order its forward runs them (torchtitan's op policy counts them so): each output's
// width per token and whether tp splits it (a row-parallel output is the full width before its reduction), and
// its weight's size. GPT's attention: one fused qkv linear; LLaMA's: wq, wk, wv; then the out-projection; the MLP:
// fc1, fc2, or gated (SwiGLU as w2(silu(w1 x) * w3 x)): w1, w3, w2.
typedef struct {
    double out, weight;
    int split;
} LayerMatmul;
static int layer_matmuls(const ModelConfig* c, LayerMatmul* mm) {
    double h = c->d_model, kv = c->n_kv_head * (h / c->n_head), F = c->d_ff;
    int n = 0;
    if (c->arch == ARCH_GPT2) mm[n++] = (LayerMatmul){h + 2 * kv, h * (h + 2 * kv), 1};
    else
        mm[n++] = (LayerMatmul){h, h * h, 1}, mm[n++] = (LayerMatmul){kv, h * kv, 1},
        mm[n++] = (LayerMatmul){kv, h * kv, 1};
    mm[n++] = (LayerMatmul){h, h * h, 0};
    mm[n++] = (LayerMatmul){F, h * F, 1};
    if (config_mlp_gated(c)) mm[n++] = (LayerMatmul){F, h * F, 1};
    mm[n++] = (LayerMatmul){h, h * F, 0};
    return n;
}

// selective_op keeps the layer input (2, /t with SP), the outputs of the odd-numbered matmuls (layer_matmuls:
// LLaMA wq 2, wv 2r, w1 (gate) 2f split by tp, and w2's output 2 in full; GPT qkv 6 and fc1 2f split) and the
// attention's output with its log-sum-exp (or s^2 term). selective_layer: the mean of none and full over the
// layers. The MLP's own term without recomputation: a gated one as framework ops keeps its gate (silu's input),
// silu(gate) and up (the product's operands) and the product (the down projection's input), 8f; GELU and squared
// ReLU keep fc1's output (the activation's input; relu(x)^2 keeps relu's output instead, as large) and fc2's
// input, 4f (Korthikanti's GPT count: 16 of its 24 at f = 4). Megatron-core's fused SwiGLU (swiglu_fused) keeps only
// its input, the fc1 output [gate | up] 4f, and fc2 its own input 2f: 6f.
static double act_bytes_per_layer(const ModelConfig* c, int b, int tp, int cp, int sp, int recompute,
                                  const PlanSetup* k, int dtype_bytes) {
    double s = (double)c->seq_len / cp, h = c->d_model, a = c->n_head, t = tp;
    double sbh = s * b * h * dtype_bytes / 2.0;
    if (recompute == RECOMPUTE_FULL) return 2 * sbh / (sp ? t : 1);
    if (recompute == RECOMPUTE_FULL_DIST) return 2 * sbh / t;
    if (recompute == RECOMPUTE_LAYER)
        return 0.5 * (act_bytes_per_layer(c, b, tp, cp, sp, RECOMPUTE_NONE, k, dtype_bytes) +
                      act_bytes_per_layer(c, b, tp, cp, sp, RECOMPUTE_FULL, k, dtype_bytes));
    double replicated, split, attn, f = (double)c->d_ff / h;
    double mlp = (config_mlp_gated(c) ? (k->swiglu_fused ? 6 : 8) : 4) * f;  // gated: fused (Megatron-core) or as ops
    int lse_only = attn_is_flash(k->attention) || cp > 1;
    if (c->arch == ARCH_GPT2) {  // at dropout 0 no masks: 2 replicated (tp) or 2 of 24 (tp + SP), as/h
        replicated = k->no_dropout ? 8 : 10, split = 8 + mlp;
        attn = lse_only ? 4 * a / h : (k->no_dropout ? 4 : 5) * a * s / h;
    } else {
        double r = (double)c->n_kv_head / c->n_head;
        replicated = 8, split = 4 + 4 * r + mlp;
        attn = lse_only ? 4 * a / h : 2 * a * s / h;
    }
    // Llama 3's all-gather context parallelism: the attention kernel keeps the gathered K and V of the whole
    // sequence (cp times this rank's) for its backward, not this rank's alone (time.h, "All-gather")
    if (k->cp_allgather && cp > 1 && recompute == RECOMPUTE_NONE) split += 4.0 * c->n_kv_head / c->n_head * (cp - 1);
    if (k->attention == ATTN_TORCH && !lse_only) attn += 4 * a * s / h;
    if (!k->rms_kernel) replicated += 2 * 6;
    if (recompute == RECOMPUTE_SELECTIVE) attn = 0;
    if (recompute == RECOMPUTE_OP) {
        LayerMatmul mm[8];
        double saved_split = 0, saved_full = 0;
        for (int i = 0, n = layer_matmuls(c, mm); i < n; i += 2)
            *(mm[i].split ? &saved_split : &saved_full) += 2 * mm[i].out / h;
        return sbh * ((sp ? 2 / t : 2) + saved_full + (saved_split + 2) / t + attn / t);
    }
    return sbh * ((sp ? replicated / t : replicated) + split / t + attn / t);
}

// The share of a layer's matmul FLOPs selective_op computes again: its even-numbered matmuls' (layer_matmuls;
// LLaMA wk h x kv, wo h x h, w3 h x F of 2h^2 + 2h kv + 3hF; GPT proj h x h and fc2 F x h of 4h^2 + 2hF).
static double op_recompute_share(const ModelConfig* c) {
    LayerMatmul mm[8];
    double again = 0, all = 0;
    for (int i = 0, n = layer_matmuls(c, mm); i < n; i++) all += mm[i].weight, again += i % 2 ? mm[i].weight : 0;
    return again / all;
}

// Bytes per logit the loss holds at its peak (the start of its backward) in a framework that
// computes it from the bf16 logits in fp32 ops (torch's cross_entropy over the vocabulary,
// Megatron's vocabulary-parallel one): the bf16 logits e, their fp32 copy 4, the saved fp32
// log-softmax (or softmax) 4, the incoming fp32 gradient 4 and its exponentials 4, before the
// gradient goes back to bf16: e + 16. At 8k tokens and a 128k vocabulary that is 36 GiB for a
// micro-batch of 2 on the last stage: the term that decides out-of-memory there. A fused
// cross-entropy (LOSS_FUSED: flash-attn's xentropy) keeps the logits (e) and one fp32 log-sum-exp
// per row, and its backward writes the logits' gradient in their dtype (e): 2e. torch's
// F.cross_entropy on the bf16 logits themselves (LOSS_EAGER_BF16; aten/src/ATen/native/LossNLL.cpp
// cross_entropy_loss_symint: log_softmax in the input's dtype, then nll_loss) keeps the logits (e,
// the caller's) and the log-softmax it saves (e); its backward's nll_loss_backward writes a
// gradient of the same shape (e) and _log_softmax_backward_data the logits' (e) before the first
// is freed: 4e (dev/loss_saved_bytes.py measures the saved e and the two).
static double loss_bytes_per_logit(const PlanSetup* k, int dtype_bytes) {
    return k->loss == LOSS_FUSED        ? 2 * dtype_bytes
           : k->loss == LOSS_EAGER_BF16 ? 4 * dtype_bytes
                                        : dtype_bytes + 16;
}

// Bytes one layer's deferred weight pass keeps beyond the activations, for one micro-batch
// on one GPU: under the zero-bubble schedules the input pass B leaves the output gradients
// of the layer's four matmuls for W (model.h's WeightGradIn), over all b*s tokens (gathered
// with SP; T/cp tokens with context parallelism): the two row-parallel outputs (attention and
// MLP projections) h each, the column-parallel fc F/t (SwiGLU's gate|up: 2F/t) and qkv (h + 2kv)/t.
static double w_inputs_per_layer(const ModelConfig* c, int b, int tp, int cp, int dtype_bytes) {
    double h = c->d_model, kv = c->n_kv_head * (h / c->n_head), t = tp;
    double fc = (config_mlp_gated(c) ? 2.0 : 1.0) * c->d_ff / t, qkv = (h + 2 * kv) / t;
    return (double)b * c->seq_len / cp * (2 * h + fc + qkv) * dtype_bytes;
}
// Bytes of the forward's tensors a framework keeps for one layer's deferred weight pass once its B has run, for one
// micro-batch on one GPU: the four matmuls' inputs (qkv's and fc1's the norms' outputs, h each, gathered under SP as
// the Zero Bubble code's WeightGradStore.put keeps total_input; the attention output h/t; fc2's the activation
// d_ff/t), the rest of its activations freed by autograd after B. With w_inputs_per_layer's output gradients that is
// Qi et al. 2023's M_W, 32 sbh a layer at tp 1 with a 4h GELU MLP (Table 1), against Korthikanti's sb(34h + 5as)
// held until B.
static double w_saved_inputs_per_layer(const ModelConfig* c, int b, int tp, int cp, int dtype_bytes) {
    double h = c->d_model;
    return (double)b * c->seq_len / cp * (2 * h + h / tp + (double)c->d_ff / tp) * dtype_bytes;
}

// Bytes per parameter of the model states, bf16 mixed precision (Rajbhandari et al. 2020):
// weight dtype_bytes (2) + gradient grad_bytes (2 or 4) + optimizer 12 (fp32 master 4,
// Adam m 4, v 4); fp32 training has no master copy (4 + 4 + 8); states_bf16 (PlanSetup: the
// parameters themselves bf16, AdamW's m and v in their dtype) none either, m and v 2 each.
// ZeRO-1 divides the optimizer states by dp, ZeRO-2 also the gradients, ZeRO-3 also the weights.
static void state_bytes_per_param(const DeviceProfile* d, int states_bf16, int zero, int dp, double* w, double* g,
                                  double* o) {
    double opt = states_bf16 ? 2 + 2 : (d->dtype_bytes < 4 ? 4 : 0) + 8;
    *w = d->dtype_bytes, *g = d->grad_bytes, *o = opt;
    if (zero >= 1) *o /= dp;
    if (zero >= 2) *g /= dp;
    if (zero >= 3) *w /= dp;
}

// This trainer's model states per parameter (runtime/train.h allocates them; metrics_predict
// shows them at start-up): the fp32 weights (4), with a bf16 copy on the GPU (dtype_bytes 2);
// the fp32 gradients (4; ZeRO-1's optimizer reads its shard of them once all-reduced);
// Adam's m and v in fp32 over the rank's optimizer range (8, or 8/R with ZeRO, R = dp x cp
// replicas). ZeRO-2 keeps
// only the gradient's shard (4/R), ZeRO-3 that and the weights' (4/R); the working buffers
// of both beside (trainer_zero_work_bytes).
static void trainer_state_bytes_per_param(int dtype_bytes, int zero, int replicas, double* w, double* g, double* o) {
    double R = replicas;
    *w = zero == 3 ? 4 / R : 4 + (dtype_bytes < 4 ? dtype_bytes : 0);
    *g = zero >= 2 ? 4 / R : 4;
    *o = zero >= 1 ? 8 / R : 8;
}
// This trainer's --zero 2|3 working buffers on a stage (params.h zero3_work_floats, with
// --reshard-after-forward on): the gradient's, two layers' (one reduce-scattered while the next
// is written) and the model-level tensors' (embeddings; final norm, head), fp32; with ZeRO-3
// also two gathered layers and the model-level tensors the stage holds, fp32 with the GPU's
// bf16 copy; with deferred weight
// passes also the norm gradients held for each of the stage's n_layers (params.h
// zero_held_grad_floats). 0 for ZeRO 0 and 1.
static double trainer_zero_work_bytes(const ModelConfig* c, int dtype_bytes, int has_embed, int has_head, int tp,
                                      int n_layers) {
    double layer = chunk_params(c, 1, 0, 0, tp), ends = chunk_params(c, 0, has_embed, has_head, tp);
    double grads = c->zero >= 2 ? 4 * (2 * layer + ends + (double)zero_held_grad_floats(c, n_layers)) : 0;
    return grads + (c->zero == 3 ? (4 + (dtype_bytes < 4 ? dtype_bytes : 0)) * (2 * layer + ends) : 0);
}

// What this trainer's --offload optimizer holds off the device, for a rank whose stage has
// stage_params parameters (its whole local buffer) and whose optimizer range has range_params
// (all of them, or a 1/R shard with ZeRO). The CPU build (dtype_bytes 4): m and v of the range in
// the --offload-dir tier (backend/cpu/offload.h), 8 B each. The GPU build pins (cudaMallocHost,
// train_gpt.cu params_init, backend/gpu/offload_gpu.h): the fp32 master of the whole stage (4), its
// bf16 staging for the copy up (2; not under ZeRO-3, which uploads its fp32 shard), and of the
// range the gradient's staging (4) and m, v (8). The startup table (runtime/metrics.h) and the
// planner both count it here.
static double offload_host_bytes(int zero, int dtype_bytes, double stage_params, double range_params) {
    if (dtype_bytes >= 4) return 8 * range_params;
    return (4.0 + (zero != 3 ? 2 : 0)) * stage_params + (4.0 + 8) * range_params;
}
// --offload optimizer (ZeRO-Offload, Ren et al. 2021): AdamW's state and the fp32 master leave
// the device. For a framework o holds the master with m and v (state_bytes_per_param). This
// trainer (own) holds its master in w: the GPU build (dtype_bytes < 4) then keeps only the bf16
// copy there, but under ZeRO-3 its fp32 shard stays on the device too (the units are gathered
// from it); the CPU build's fp32 weights are its master and stay. Returns the bytes per
// parameter held on the host: for a framework the state it moved and the fp32 gradient of the
// rank's range staged for the CPU's AdamW (ZeRO-Offload, Ren et al. 2021, sec. 4.1: fp32
// parameters, momentum, variance and gradients, 16 M bytes on the CPU for M parameters, split
// over the data-parallel ranks: 12/R + 4/R); with states_bf16 (no master: the CPU's AdamW updates
// the bf16 parameters themselves; FSDP2's CPUOffloadPolicy keeps the sharded parameters, their
// gradients and AdamW's states on the host, pytorch/pytorch torch/distributed/fsdp/_fully_shard/
// _fsdp_api.py at 05f814f) its bf16 m, v and the range's bf16 weights and gradient: 4/R + 2/R + 2/R;
// for this trainer offload_host_bytes.
static double offload_state_bytes(const ModelConfig* c, int own, int states_bf16, int dtype_bytes, double* w,
                                  double* o) {
    if (!(c->offload & OFFLOAD_OPTIMIZER)) return 0;
    double host = *o, range = c->zero ? 1.0 / (c->dp * c->cp) : 1;
    *o = 0;
    if (!own) return host + (states_bf16 ? 2 + 2 : 4) * range;
    if (dtype_bytes < 4 && c->zero != 3) *w -= 4;
    return offload_host_bytes(c->zero, dtype_bytes, 1, range);
}
// --offload activations: a framework's (micro-batch, chunk) activations held on the device at
// the stage's peak: at most the frames of each chunk (layout/activations.h offload_frames_of).
static int offload_in_flight(const ModelConfig* c, int in_flight) {
    int frames = offload_frames_of(c) * c->vpp;
    return (c->offload & OFFLOAD_ACTIVATIONS) && in_flight > frames ? frames : in_flight;
}

// The counts of the layout's pipeline under its schedule with m micro-batches: for each stage
// its peak (micro-batch, chunk) activations held and peak W's owed (the other frameworks'
// memory, predict.h's plan_memory), and the counts act_chunk_counts gives each of its local
// chunks (this trainer's buffers; the weight passes are deferred when the list has W ops, as
// the trainer defers them by default, or with --weight-pass deferred). A search asks for the
// same pipeline shape many times (once per kernel, recomputation, ZeRO and SP choice, and
// again for every tp and cp that leave the same pp and m), so each thread keeps the counts of
// the last PIPE_COUNTS_KEPT shapes: each schedule is built about once.
#define PIPE_COUNTS_KEPT 8192
typedef struct {
    int schedule, pp, vpp, m;  // the shape (pp 0: an empty entry)
    int defer_weight;          // --weight-pass deferred (c->weight_pass_deferred)
    double* t_build;           // the times its lists were built for (chunk_op_flops; ZB-V only, else NULL)
    int* peaks;                // peaks[2s], peaks[2s+1]: stage s's in flight and W's owed
    int* held_owed;            // lists with W ops: stage s's (F run, B not; B run, W not) pair counts that no other
                               // moment of its list exceeds in both, at held_owed[2 * held_owed_at[s] ...] up to
    int* held_owed_at;         // held_owed_at[s + 1] (pipe_peak_held_owed)
    ActCounts* chunks;         // [pp * vpp]: stage s, local chunk j at s * vpp + j
    long* held;                // [pp]: each stage's layers in flight for the chunk sizes hashed in held_key
    unsigned long long held_key;  // (pipe_layers_held; NULL / 0 until asked)
    long* seen_held;           // [pp * (vpp + 1)]: stage s's most layers in flight while k of its chunks have run a
                               // backward, at s * (vpp + 1) + k, for the chunk sizes hashed in seen_key
    int* seen_order;           // [pp * vpp]: the local chunks of stage s in the order of their first backward
    unsigned long long seen_key;  // (pipe_lazy_summary; NULL / 0 until asked)
} PipeCounts;

static __thread PipeCounts pipe_counts_kept[PIPE_COUNTS_KEPT];  // per thread: a search predicts on all cores

// Free this thread's kept counts (a search's threads do before they end).
static void pipe_counts_release(void) {
    for (int i = 0; i < PIPE_COUNTS_KEPT; i++) {
        PipeCounts* e = &pipe_counts_kept[i];
        free(e->peaks), free(e->chunks), free(e->t_build), free(e->held), free(e->seen_held), free(e->seen_order);
        free(e->held_owed), free(e->held_owed_at);
        memset(e, 0, sizeof(*e));
    }
}

// For each stage's list with W ops, the moments' (pairs whose F ran and B not, pairs whose B ran and W not) counts
// that no other moment exceeds in both (the largest of a * held + b * owed over the list is at one of them, for any
// a, b >= 0), into *pairs (two ints a moment) from (*at)[s] to (*at)[s + 1]; none for a list without W ops.
static void held_owed_frontiers(PipeOp* const* lists, const int* n_ops, int pp, int** pairs, int** at) {
    int cap = 0;
    for (int s = 0; s < pp; s++) cap += n_ops[s] + 1;
    *pairs = (int*)xmalloc(sizeof(int) * 2 * cap), *at = (int*)xmalloc(sizeof(int) * (pp + 1));
    int n = 0;
    for (int s = 0; s < pp; s++) {
        const PipeOp* ops = lists[s];
        (*at)[s] = n;
        int held = 0, owed = 0, first = n, n_w_ops = ops_have_w(ops, n_ops[s]) ? n_ops[s] : 0;
        for (int i = 0; i < n_w_ops; i++) {
            int kind = ops[i].kind;
            if (kind == OP_FWD) held++;
            else if (kind == OP_BWD) held--, owed++;
            else if (kind == OP_W) owed--;
            if (kind != OP_FWD && kind != OP_BWD) continue;  // a peak follows an F or a B
            int dominated = 0;
            for (int k = first; k < n && !dominated; k++)
                dominated = (*pairs)[2 * k] >= held && (*pairs)[2 * k + 1] >= owed;
            if (dominated) continue;
            int kept = first;  // drop the ones this moment exceeds in both
            for (int k = first; k < n; k++)
                if (!((*pairs)[2 * k] <= held && (*pairs)[2 * k + 1] <= owed))
                    (*pairs)[2 * kept] = (*pairs)[2 * k], (*pairs)[2 * kept + 1] = (*pairs)[2 * k + 1], kept++;
            n = kept;
            (*pairs)[2 * n] = held, (*pairs)[2 * n + 1] = owed, n++;
        }
    }
    (*at)[pp] = n;
}

// The kept counts of c's pipeline with m micro-batches, built if not kept (valid until the
// next call).
static const PipeCounts* pipe_counts(const ModelConfig* c, int m) {
    int schedule = c->schedule, pp = c->pp, vpp = c->vpp, n_t = 3 * pp * vpp, defer = c->weight_pass_deferred;
    // the times ZB-V's lists are built for, as in the runtime (only ZB-V's lists depend on them: the
    // others' counts are kept whatever the cut, with no times, NULL); ZB-V's different cuts are kept apart
    double* t_build = NULL;
    unsigned slot =
        (unsigned)schedule * 2654435761u ^ (unsigned)pp * 40503u ^ (unsigned)vpp * 977u ^ (unsigned)m * 2246822519u;
    if (schedule == SCHED_ZBV) {
        t_build = (double*)xmalloc(sizeof(double) * n_t);
        chunk_op_flops(c, pp, vpp, t_build);
        for (int i = 0; i < n_t; i++) {
            unsigned long long bits;
            memcpy(&bits, &t_build[i], sizeof(bits));
            slot = slot * 31u + (unsigned)(bits ^ bits >> 32);
        }
    }
    PipeCounts* e = &pipe_counts_kept[slot % PIPE_COUNTS_KEPT];
    if (e->schedule != schedule || e->pp != pp || e->vpp != vpp || e->m != m || e->defer_weight != defer ||
        (t_build && memcmp(e->t_build, t_build, sizeof(double) * n_t))) {
        PipeOp** lists = (PipeOp**)xmalloc(sizeof(PipeOp*) * pp);
        int* n_ops = (int*)xmalloc(sizeof(int) * pp);
        free(e->peaks), free(e->chunks), free(e->t_build), free(e->held), free(e->seen_held), free(e->seen_order);
        free(e->held_owed), free(e->held_owed_at);
        e->held = NULL, e->held_key = 0, e->seen_held = NULL, e->seen_order = NULL, e->seen_key = 0;
        e->peaks = (int*)xmalloc(sizeof(int) * 2 * pp);
        e->chunks = (ActCounts*)xmalloc(sizeof(ActCounts) * pp * vpp);
        for (int s = 0; s < pp; s++) lists[s] = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m, vpp));
        schedule_build_all(schedule, pp, vpp, m, t_build, lists, n_ops);
        held_owed_frontiers(lists, n_ops, pp, &e->held_owed, &e->held_owed_at);
        for (int s = 0; s < pp; s++) {
            const PipeOp* ops = lists[s];
            e->peaks[2 * s] = schedule_max_in_flight(ops, n_ops[s], -1);
            e->peaks[2 * s + 1] = schedule_max_w_owed(ops, n_ops[s], -1);
            for (int j = 0; j < vpp; j++)
                e->chunks[s * vpp + j] =
                    act_chunk_counts(ops, n_ops[s], j, schedule_slots(schedule, pp, vpp, m, s, j, lists, n_ops, NULL),
                                     chunk_global(schedule, pp, s, j) == pp * vpp - 1,
                                     defer || ops_have_w(ops, n_ops[s]));
        }
        for (int s = 0; s < pp; s++) free(lists[s]);
        free(lists), free(n_ops);
        e->schedule = schedule, e->pp = pp, e->vpp = vpp, e->m = m, e->defer_weight = defer, e->t_build = t_build;
    } else {
        free(t_build);
    }
    return e;
}

// A chunk cut's hash (the key of pipe_layers_held's and pipe_lazy_summary's kept results; never 0).
static unsigned long long pipe_cut_key(const int* layers, int n) {
    unsigned long long key = 1469598103934665603ull;
    for (int g = 0; g < n; g++) key = (key ^ (unsigned)layers[g]) * 1099511628211ull;
    return key | 1;
}

// The most layers' activations each stage of a framework holds at once with m micro-batches under the
// interleaved schedule, for chunks of different sizes (layers[g]: global chunk g's layers): each
// (micro-batch, chunk) pair keeps its chunk's layers from its forward to its backward, the peak taken
// over the stage's op list (schedule_max_in_flight_weighted). The pairs in flight times the largest
// chunk over-count such a stage: Llama 3's first chunk holds the embedding alone (time.h chunk_split,
// SPLIT_ENDS). Kept with the pipeline's counts (pipe_counts) for the chunk sizes last asked: a search
// asks for the same cut of a shape many times. Returns [pp], valid until the next call.
static const long* pipe_layers_held(const ModelConfig* c, int m, const int* layers) {
    int pp = c->pp, vpp = c->vpp;
    PipeCounts* e = (PipeCounts*)pipe_counts(c, m);
    unsigned long long key = pipe_cut_key(layers, pp * vpp);
    if (e->held && e->held_key == key) return e->held;
    free(e->held);
    e->held = (long*)xmalloc(sizeof(long) * pp);
    int* w = (int*)xmalloc(sizeof(int) * vpp);
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m, vpp));
    for (int st = 0; st < pp; st++) {
        for (int j = 0; j < vpp; j++) w[j] = layers[chunk_global(c->schedule, pp, st, j)];
        int n = schedule_build(c->schedule, st, pp, vpp, m, NULL, ops);
        e->held[st] = schedule_max_in_flight_weighted(ops, n, w);
    }
    free(ops), free(w);
    e->held_key = key;
    return e->held;
}

// What a framework's peak of activations and gradients together needs where a chunk's gradients exist only from its
// first backward on (PlanSetup grads_lazy), for every layout of one pipeline shape and cut: walking each stage's op
// list, a forward adds its chunk's layers, a chunk's first backward makes k (the chunks with gradients) one more,
// then a backward frees its pair's layers; kept per stage, the most layers in flight at each k and the order of the
// first backwards (pipe_peak_lazy_grads weighs them). Kept with the pipeline's counts for the cut last asked.
static const PipeCounts* pipe_lazy_summary(const ModelConfig* c, int m, const int* layers) {
    int pp = c->pp, vpp = c->vpp;
    PipeCounts* e = (PipeCounts*)pipe_counts(c, m);
    unsigned long long key = pipe_cut_key(layers, pp * vpp);
    if (e->seen_held && e->seen_key == key) return e;
    free(e->seen_held), free(e->seen_order);
    e->seen_held = (long*)xcalloc((size_t)pp * (vpp + 1), sizeof(long));
    e->seen_order = (int*)xmalloc(sizeof(int) * pp * vpp);
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * schedule_max_ops(m, vpp));
    int* seen = (int*)xmalloc(sizeof(int) * vpp);
    for (int st = 0; st < pp; st++) {
        int n = schedule_build(c->schedule, st, pp, vpp, m, NULL, ops), k = 0;
        long held = 0, *most = e->seen_held + (size_t)st * (vpp + 1);
        memset(seen, 0, sizeof(int) * vpp);
        for (int i = 0; i < n; i++) {
            int j = ops[i].chunk, fwd = ops[i].kind == OP_FWD, bwd = ops[i].kind == OP_BWD;
            if (!fwd && !bwd) continue;
            long pair = layers[chunk_global(c->schedule, pp, st, j)];
            if (bwd && !seen[j]) seen[j] = 1, e->seen_order[st * vpp + k++] = j;
            if (fwd) held += pair;
            if (held > most[k]) most[k] = held;
            if (bwd) held -= pair;
        }
    }
    free(ops), free(seen);
    e->seen_key = key;
    return e;
}

// A framework's peak of activations and gradients together on stage st under grads_lazy (pipe_lazy_summary): the
// most over k of the layers in flight with k chunks' gradients x act_layer plus those chunks' gradients (grad[j]
// bytes for local chunk j, kept to the step's end). Under the interleaved schedule with m = pp every forward runs
// before the first backward, so the peak holds one chunk's gradients, not the stage's; with more micro-batches the
// steady state reaches every chunk's first backward while the pairs in flight stay at their peak. Returns the peak;
// *act_at, *grad_at: its parts.
static double pipe_peak_lazy_grads(const ModelConfig* c, int m, int st, const int* layers, double act_layer,
                                   const double* grad, double* act_at, double* grad_at) {
    const PipeCounts* e = pipe_lazy_summary(c, m, layers);
    const long* most = e->seen_held + (size_t)st * (c->vpp + 1);
    double grads = 0, peak = -1;
    for (int k = 0; k <= c->vpp; k++) {
        if (k > 0) grads += grad[e->seen_order[st * c->vpp + k - 1]];
        if (most[k] * act_layer + grads > peak) peak = most[k] * act_layer + grads, *act_at = most[k] * act_layer,
                                                *grad_at = grads;
    }
    return peak;
}

// This trainer's activation buffers on one rank of layout c, the same on every stage: the bytes of the shared
// scratch (with the CPU build's norm scratch; the GPU build carves every buffer on 256 bytes, and sizes its attention
// backward's dQ buffer by the device's SM count, sms) and of the units a chunk's buffers are made of (*u).
static double trainer_act_scratch_bytes(const ModelConfig* c, int dtype_bytes, int sms, ActUnits* u) {
    ActShape s = act_shape(c, c->micro_batch);
    s.sms = sms;
    int host = dtype_bytes == 4, align = host ? 1 : 256;
    *u = act_units(&s, c->recompute, dtype_bytes, align);
    return act_scratch_bytes(&s, c->recompute, host, dtype_bytes, align);
}

// This trainer's activation memory on stage st: the buffers its build allocates, from the
// same lists (layout/activations.h): the shared scratch (trainer_act_scratch_bytes, with the units u), and for
// each local chunk its slots, weight-pass sets and heads (k[j], pipe_counts' chunks of the stage). layers[g]:
// layers of global chunk g.
static double trainer_stage_act_bytes(const ModelConfig* c, double scratch, const ActUnits* u, int st,
                                      const ActCounts* k, const int* layers) {
    double bytes = scratch;
    for (int j = 0; j < c->vpp; j++) {
        ActCounts on_device = k[j];  // --offload activations: the frames (layout/activations.h)
        on_device.slots = act_device_slots(k[j].slots, c);
        bytes += act_chunk_bytes(u, layers[chunk_global(c->schedule, c->pp, st, j)], on_device);
    }
    return bytes;
}

#endif
