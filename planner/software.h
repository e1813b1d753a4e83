// planner/software.h: what the training software does beside the layout: its attention and
// norm kernels (and the bytes they move), where its process groups land and how it cuts the
// pipeline (--software trainer | scaling | framework | foundry | megatron | deepspeed2021 | nanotron).
#ifndef PLANNER_SOFTWARE_H
#define PLANNER_SOFTWARE_H

#include "layout/schedule.h"
#include "planner/device.h"

// Attention kernels (the four the layouts study compared):
//   torch          Q K^T and P V as batched matmuls, scale, mask and an fp32 softmax as
//                  separate framework ops: the T x T scores are written and read several times
//   fused_softmax  the same matmuls, scale + mask + softmax in one kernel (Megatron's)
//   flash1/flash2  FlashAttention 1 / 2: tiles in on-chip memory, no T x T tensor, causal
//                  blocks skipped
//   flash_triton   FlashAttention in Triton (Tri Dao's flash_attn_triton.py; llm-foundry's attn_impl
//                  triton, the default of the runs behind its benchmark tables): the same algorithm and
//                  memory, slower kernels (below). Not searched: given by name (--attention, --runs)
//   flash3         Hopper's fused attention: FlashAttention-3 (wgmma, TMA, warp specialization), the class of
//                  cuDNN's fused attention that Transformer Engine runs in Megatron-core / NeMo: the same
//                  memory as flash2, the device's attn_eff_flash3. Not searched: given by name
enum { ATTN_TORCH, ATTN_FUSED_SOFTMAX, ATTN_FLASH1, ATTN_FLASH2, ATTN_FLASH_TRITON, ATTN_FLASH3, N_ATTN };
static const char* const ATTN_NAMES[N_ATTN] = {"torch", "fused_softmax", "flash1", "flash2", "flash_triton", "flash3"};
// FlashAttention-2 is "around 1.3-1.5x faster than FlashAttention in Triton in the forward pass
// and around 2x faster in the backward pass" (Dao 2023, section 4.1: A100, head size 64 and 128,
// causal and not, 512-16k tokens): the Triton kernel's time over FA2's on the same device, forward
// and backward (1.83x for the pair: the backward does 2.5x the forward's FLOPs). Both kernels issue
// Ampere's mma.sync on an H100 too (FA2 has no wgmma; llm-foundry's Triton is the pre-MLIR compiler),
// so the ratio is taken to hold there.
#define FLASH_TRITON_FWD_SLOWDOWN 1.4
#define FLASH_TRITON_BWD_SLOWDOWN 2.0
static int attn_is_flash(int attention) {
    return attention == ATTN_FLASH1 || attention == ATTN_FLASH2 || attention == ATTN_FLASH_TRITON ||
           attention == ATTN_FLASH3;
}
// Rank order, fastest-varying first: tp-pp-dp is this trainer's (layout/grid.h); tp-dp-pp is
// Megatron-LM's and the Scaling codebase's (pipeline stages furthest apart).
enum { ORDER_TP_PP_DP, ORDER_TP_DP_PP };
// Pipeline cut: `layers` splits the transformer layers evenly (this trainer, params.h: the
// first chunks take the remainder; the embedding rides on the first chunk, the head on the
// last); `params` cuts the list [embedding, layers..., final norm, head] into contiguous
// chunks of balanced parameter counts (DeepSpeed's default "parameters" partition, Scaling's
// "balanced"): the embedding and the head each weigh as much as several layers, so the
// first and last stages get fewer layers, though the embedding costs almost no time; `ends`
// (a framework's, named by a --runs row's pp_split): the embedding and the head with its loss each
// take one layer's place in an even cut of L + 2 places, so the first and last stages hold one layer
// fewer and, where a chunk is one place, the first chunk holds the embedding alone and the last the
// head alone (Megatron-core's --account-for-embedding-in-pipeline-split and
// --account-for-loss-in-pipeline-split: transformer_layer.py get_transformer_layer_offset "Increase the
// number of layers by one if we include the embedding (loss) layer into pipeline parallelism
// partition"; Llama 3 405B, Dubey et al. 2024 section 3.3.2: "we reduce one Transformer layer each
// from the first and the last stages ... the first model chunk on the first stage has only the
// embedding, and the last model chunk on the last stage has only output projection and loss").
// `cost` (nanotron's, huggingface/nanotron models/base.py build_model at c2528430): the blocks [embedding,
// layers..., final norm, head, loss] weigh their matmul parameters (llama.py get_block_compute_costs: a layer
// 4 h heads d_head + 3 h F, the head V h, the others 0), and each block goes to the current stage, which passes
// to the next once the running sum exceeds its share, total x (stage + 1) / pp: a stage ends with the block that
// crosses its share (time.h chunk_split_cost).
enum { SPLIT_LAYERS, SPLIT_PARAMS, SPLIT_ENDS, SPLIT_COST };
// What a cut divides by, as the --plan header and the refusals of another cut say it.
static const char* pipe_split_name(int split) {
    return split == SPLIT_LAYERS ? "layers"
           : split == SPLIT_ENDS ? "layers, the embedding and the head a layer's place each"
           : split == SPLIT_COST ? "compute cost (nanotron's)"
                                 : "parameters";
}

// A framework's cross-entropy (PlanSetup loss; --loss, a --runs row's loss: LOSS_NAMES below).
enum { LOSS_EAGER, LOSS_FUSED, LOSS_EAGER_BF16 };

typedef struct {
    int attention;          // ATTN_*
    int rms_kernel;         // 1: one fused norm kernel; 0: the norm as separate framework ops
    int rank_order;         // ORDER_*
    int pipe_split;         // SPLIT_*
    int loss_gathered;      // 1: the logits are gathered over tp and every tp rank computes the loss over
                            // the whole vocabulary (the Scaling codebase's; --loss-vocab gathered, a --runs row's
                            // loss_vocab); 0: a vocabulary-parallel loss (Megatron, this trainer)
    int dp_after_backward;  // 1: gradients are reduced after the whole backward (in the optimizer step);
                            // 0: the reduction overlaps the backward (dp_overlap of the device)
    int context_parallel;   // 1: it can split sequences over cp ranks (this trainer); 0: cp 1 only
    int grads_lazy;         // 1: a chunk's gradients exist from its first backward on (PyTorch autograd creates a
                            // parameter's .grad the first time a backward computes it; FSDP its unsharded gradient
                            // likewise), kept to the step's reduction (memory.h pipe_peak_lazy_grads; a --runs row's
                            // grad_alloc lazy); 0: allocated before the step (Megatron-core's contiguous grad buffer,
                            // this trainer's), counted with the model states
    int gather_copy_out;    // 1: PyTorch FSDP2's ZeRO-3: each all-gather's flat output copied into the parameters'
                            // own tensors on the compute stream (predict.h gather_copy_out_time; --fsdp 2, a --runs
                            // row's fsdp 2); 0: FSDP1's flat parameter, whose views the layers use, and the others
    int cp_allgather;       // 1: its context parallelism is Llama 3's (Dubey et al. 2024, section 3.3.2): K and V
                            // all-gathered over cp, then the attention of the rank's own queries, nothing overlapped
                            // (time.h cp_layer_time; --cp-kind allgather, a --runs row's cp_kind); 0: ring, Ulysses
                            // or 2D by the layout's Ulysses degree
    int own_buffers;        // 1: activations are this trainer's own buffers (layout/activations.h), allocated
                            // once: counted exactly, no allocator share; 0: a framework's (Korthikanti et al.)
    int own_kernels;        // 1: its flash attention is this trainer's own kernels (the device's attn_eff_own);
                            // 0: FlashAttention 1 / 2 (attn_eff_flash1 / attn_eff_flash2)
    int tp_async_dgrad;     // 1: the backward's tensor-parallel collective of each column-parallel linear's
                            // input gradient runs while that linear's weight gradient is computed (Megatron-LM's
                            // asynchronous tensor-parallel communication); 0: after it, nothing overlapped (this
                            // trainer, the Scaling codebase; plain DTensor TP, --tp-async-dgrad off)
    int swiglu_two_linears;  // 1: SwiGLU's gate and up projections are two column-parallel linears, each
                             // all-reducing its own input gradient over tp (without SP); 0: one fused linear
    int nccl_links;          // 1: its collectives inside a node reach NCCL's measured bus bandwidth (the device's
                             // link_eff_nccl); 0: the device's link_eff, fitted to the layouts study's software
    int no_dropout;          // 1: trained at dropout 0: no 1-byte dropout masks kept (torch's dropout at p 0
                             // returns its input); 0: Korthikanti's masks after attention, its projection and fc2
    int loss;                // what its cross-entropy keeps for the backward (LOSS_*; memory.h loss_bytes_per_logit):
                             // fp32 framework ops on a copy of the logits, one fused kernel, or torch's ops on the
                             // logits in their own dtype
    int grad_buffer_passes;  // passes Megatron-core's DDP makes each step over its whole gradient buffer beside the
                             // backward's kernels (distributed/ at f2e5db40): zero_grad_buffer's zero_() (a write), the
                             // NaN check's norm before each bucket's collective (a read; check_for_nan_in_grad =
                             // --check-for-nan-in-loss-and-grad, on unless fp16 with a dynamic loss scale) and, over
                             // dp > 1, the 1/dp scaling in place (a read and a write): 4 (predict.h plan_throughput)
    int loss_softmax_inplace;  // 1: Megatron-core's vocab_parallel_cross_entropy (tensor_parallel/cross_entropy.py at
                               // Megatron-LM f2e5db40): the fp32 copy of the logits made a softmax in place, pass by
                               // pass (max, subtract, exp, sum, divide: kept for the backward; loss_bytes); 0: torch's
                               // log-softmax
    int loss_compiled;  // 1: that loss under Megatron-core's --cross-entropy-loss-fusion (NeMo's
                        // cross_entropy_loss_fusion; fusions/fused_cross_entropy.py at ee6737da): the same passes
                        // grouped in functions that jit_fuser (torch.compile from PyTorch 2.2, core/jit.py) makes one
                        // kernel each: three forward, one backward (loss_bytes); the same fp32 softmax kept; 0: a
                        // kernel a pass
    int alloc_share;  // 1: the device's mem_frag of the activations on top of the counted tensors: a share fitted
                      // to the layouts study's out-of-memory boundaries, so the Scaling codebase's (what it holds
                      // beyond Korthikanti's count, allocator and autograd alike); 0: the counted tensors alone
                      // (torchtitan's published reserved memory with expandable segments is that within 1.7 GiB;
                      // llm-foundry's runs that ran bound its share below 15.7%: dev/PLANNER.md "The allocator")
    int tp_comm_overlap;  // 1: Megatron-core's --tp-comm-overlap (Transformer Engine v1.7's userbuffers at their
                          // defaults): with SP, each linear's all-gather / reduce-scatter is cut into chunks pipelined
                          // with that linear's GEMM (ring exchange, pipeline, bulk), forward and backward (time.h
                          // ub_*_time, layer_time); 0: the collectives run between GEMMs
    int dp_overlap_chunked;  // 1: Megatron-core's --overlap-grad-reduce / --overlap-param-gather: the gradients are
                             // reduce-scattered layer by layer as the backward produces them (per virtual stage under
                             // pipelining) and the weights gathered as the forward needs them; only the last chunk is
                             // exposed (predict.h plan_dp_time); 0: the device's dp_overlap of one micro-batch
    int zero3_layer_prefetch;  // 1: ZeRO-3 gathers each layer's weights while the layer before it computes and
                               // reduce-scatters each layer's gradients as its backward ends (PyTorch FSDP's forward
                               // and backward prefetch, Zhao et al. 2023; DeepSpeed's ZeRO-3 prefetch): all but one
                               // layer's traffic of a pass hides (predict.h plan_dp_time); 0: the device's dp_overlap
    int reduce_bytes;        // bytes per value of the data-parallel gradient reduction: 4 for FSDP2's reduce_dtype
                             // float32 (torchtitan's mixed_precision_reduce default); 0: the device's grad_bytes
    int swiglu_fused;        // 1: SwiGLU as one autograd function that saves only its input, the fc1 output [gate | up]
                             // (Megatron-core's bias_swiglu_impl, --bias-swiglu-fusion on by default: fusions/
                             // fused_bias_swiglu.py SwiGLUFunction save_for_backward(input)): 4f + fc2's input 2f = 6f
                             // a layer; 0: silu(gate) * up as framework ops, 8f (memory.h act_bytes_per_layer)
    int grad_bytes;          // bytes of an accumulated gradient: 4 for this trainer, which keeps fp32 gradients in
                             // both builds (runtime/train.h; planner/memory.h trainer_state_bytes_per_param);
                             // 0: the device's grad_bytes (a framework's choice, bf16 in the study's runs)
    int zero3_param_sync;    // 1: DeepSpeed's ZeRO-3 as of 2021 (v0.3.13-v0.5.x): a collective per weight tensor, each
                             // gather behind a torch.cuda.synchronize() (nothing overlaps it), PyTorch's list
                             // collectives copying each rank's chunk apart (predict.h zero3_param_sync_time); gathered
                             // weights bounded by stage3_max_live_parameters (predict.h plan_memory)
    int matmul_scaling;      // 1: its matmuls at the device's matmul_eff_scaling, fitted to the layouts study's runs
                             // (the Scaling codebase's own rate, as alloc_share); 0: matmul_eff (a framework's)
    int scaling_options;     // 1: the search lists what the Scaling codebase runs (Aleph-Alpha/scaling at 737f855),
                             // other options only when named (--schedule, --vpp, --zero, --recompute: a what-if): the
                             // 1F1B schedule (pipeline_schedule/train.py, its one training schedule: no virtual
                             // stages, no zero-bubble passes), ZeRO 0 or 1 (optimizer_config.py `zero`, "enable zero
                             // stage 1 optimizer"), activation checkpointing off or every layer (topology_config.py
                             // ActivationCheckpointingType disabled / every_layer; every_pipe_stage is not modelled)
    int grad_accum_pass;     // how a micro-batch's gradients reach the fp32 buffers an optimizer builds before the
                             // step (GRAD_ACCUM_*): NONE, accumulated by the weight-gradient GEMM (Megatron's
                             // gradient_accumulation_fusion, this trainer's) or autograd's .grad (grads_lazy); ADD,
                             // a kernel per weight after each micro-batch's backward reading bf16 and fp32 and
                             // writing fp32 (nanotron's FP32GradientAccumulator at c2528430:
                             // fp32_grad.add_(half_param.grad)); CAST_ADD, a cast to an fp32 copy then the add
                             // (DeepSpeed's BF16_Optimizer.update_hp_grads, 5ea1c60f8 to 38327e07f:
                             // hp_grad.add_(lp.grad.to(fp32)), BLOOM's); time.h fp32_accumulator_time, and each
                             // step the buffers clipped and zeroed (predict.h plan_throughput)
    int zero1_list_collectives;  // 1: the data-parallel step as nanotron runs it (67c5ebb6, c2528430). ZeRO-1 with
                                 // fp32 accumulation has no DDP (trainer.py: make_ddp false): one all-reduce of the
                                 // stage's fp32 gradient buffer after the pipeline (gradient_accumulator.py
                                 // sync_gradients_across_dp, reduce_scatter=False), nothing to hide under; the
                                 // weights gathered in the optimizer's step (optim/zero.py _all_gather_params,
                                 // all_gather_coalesced: per tensor and dp rank a Python view, flattened and copied
                                 // back, host calls at PYTORCH_CALL_S; predict.h zero1_gather_host_calls), waited
                                 // for; ZeRO-0's DDP hook all-reduces each bucket with all_reduce_coalesced, one NCCL
                                 // all-reduce a tensor, under the last backward (NANOTRON_DDP_BUCKET_BYTES)
    int nanotron_options;    // 1: only what nanotron v0.5 runs (predict.h plan_check_layout): ZeRO 0 or 1 (helpers.py
                             // init_optimizer_and_grad_accumulator: zero_stage > 0 builds its ZeroDistributedOptimizer,
                             // the optimizer state sharded), recomputation none or every layer (recompute_layer), no
                             // context parallelism (ParallelismArgs: dp, tp, pp, expert_parallel_size)
    int grad_reduce_bf16;    // 1: this trainer's --grad-reduce bf16 (the GPU build, --zero 0|1): the dp all-reduce
                             // sends bf16 (2 bytes a parameter) through a 32 MiB scratch that plan_memory counts
                             // (layout/params.h grad_reduce_scratch_bytes); 0: fp32
    int states_bf16;         // 1: the parameters themselves bf16 and AdamW's m and v with them (KempnerForge's
                             // build_parallel_model: model.to(dtype=param_dtype) before fully_shard, at 01b461a to
                             // 5666d0d; torch's AdamW keeps its states in the parameter's dtype): 2 + 2 + 2 a weight
                             // beside the gradient, no fp32 master (memory.h state_bytes_per_param, predict.h
                             // plan_throughput); 0: the fp32 master and m, v of Rajbhandari et al. 2020 (4 + 4 + 4)
    int grad_sync_last;      // 1: the accumulation's micro-batches but the last run under FSDP2's
                             // set_requires_gradient_sync(False) (KempnerForge's training/grad.py maybe_no_sync):
                             // each layer's unsharded gradient kept in the reduce dtype from the first backward to
                             // the last (_fsdp_param.py to_accumulated_grad_if_needed, then += each backward), one
                             // reduce-scatter a step under the last backward (_fsdp_param_group.py post_backward);
                             // ZeRO 2 and 3 (predict.h plan_memory, plan_dp_time); 0: one a micro-batch
    int pipe_send_wait;      // how long a pipeline send holds its sender (layout/schedule.h SENDS_*): ASYNC, not at all
                             // (this trainer's non-blocking sends); WAIT_ENDS, until delivered in the warm-up and
                             // cool-down only (Megatron-core's overlap_p2p_comm under virtual stages, schedules.py at
                             // core_r0.9.0: the steady state's sends run under the next pass; its plain 1F1B waits on
                             // every one, predict.h plan_pipeline_time); WAIT, every send (Megatron-LM's
                             // batch_isend_irecv, wait and torch.cuda.synchronize() in p2p_communication.py at aed2f75,
                             // 6aaafee, 285068c8; DeepSpeed's pipeline engine, a blocking broadcast: pipe/p2p.py at
                             // v0.5.8)
    int nccl_release;        // the NCCL release the run's collectives are priced by, 10000 x major + 100 x minor +
                             // patch (--nccl-version, a --runs row's nccl; device.h nccl_release_of); 0: the device's
                             // (b647562's model)
} PlanSetup;

// The software the planner can model (--software): this trainer, and the Aleph Alpha
// Scaling codebase the layouts study ran on (Hagemann et al. 2023), read from its source:
// Topology lays ranks out as (pipe, data, model) with model fastest; the pipeline is cut
// over [embedding, layers, final norm, head] (its "balanced" method: the study's runs fit
// it better than the uniform cut, MFU error 2.0 vs 2.2 points); the head is a column-
// parallel linear with gathered output and the loss is torch's cross_entropy on the full
// vocabulary; the optimizer all-reduces the gradients in its step, after the backward. It
// has no context parallelism. `framework`: a PyTorch framework with this trainer's layout
// rules (Megatron-LM's or FSDP's kind): its activations as autograd keeps them (Korthikanti et
// al.) with no allocator share beyond them, ZeRO-3; the vocabulary-parallel loss and the gradient
// reduction overlapping the backward, as Megatron-LM and FSDP run them. `foundry`: that framework as
// llm-foundry ran its benchmark tables (mosaicml/llm-foundry b2a43a147, FSDP, bf16 autocast): MPT's
// dropouts are 0 (configuration_mpt.py: attn_pdrop, resid_pdrop, emb_pdrop 0.0) and its loss is flash-
// attn's fused cross-entropy (modeling_mpt.py: loss_fn 'fused_crossentropy' by default) over the bf16
// logits of the tied head. `megatron`: Megatron-core as NVIDIA benchmarks it (Megatron-LM README: "fine-grained
// overlapping of data-parallel (--overlap-grad-reduce --overlap-param-gather), tensor-parallel (--tp-comm-overlap)
// and pipeline-parallel communication"; NeMo / Megatron Bridge docs, communication-overlap.md): the framework's
// activations and rates, tp collectives hidden under the GEMMs (with SP: Megatron Bridge refuses tp_comm_overlap
// without sequence parallelism) and the distributed optimizer's reduce-scatter and gather chunked under the
// backward and forward. `deepspeed2021`: the framework's activations and rates with DeepSpeed's ZeRO-3 as it was in
// 2021 (v0.3.13, its first, to v0.5.x; Narayanan et al. 2021 compared against it), read from its source: the weights
// gathered one tensor at a time and never under compute (DeepSpeed #1188: "the async version is not async at all,
// because each all_gather calls torch.cuda.synchronize()"), fixed in 2022 (#1453: batched, *_base collectives).
// `nanotron`: the framework's activations and rates as huggingface/nanotron v0.5 runs a Llama (c2528430, the
// Ultra-Scale Playbook's benchmarks): no dropout, Megatron's in-place loss, its compute-cost pipeline cut (SPLIT_COST),
// its fp32 gradient accumulation, a pass of its own after every micro-batch's backward (grad_accum_pass), and its
// ZeRO-1 and ZeRO-0 collectives as PyTorch's list and coalesced calls (zero1_list_collectives).
enum {
    SOFTWARE_TRAINER, SOFTWARE_SCALING, SOFTWARE_FRAMEWORK, SOFTWARE_FOUNDRY, SOFTWARE_MEGATRON, SOFTWARE_DEEPSPEED2021,
    SOFTWARE_NANOTRON
};
static PlanSetup plan_setup_for(int software) {
    // this trainer's; every field not named is 0 (named, so a field added to PlanSetup needs no count kept here)
    PlanSetup s = {.attention = ATTN_FLASH2, .rms_kernel = 1, .rank_order = ORDER_TP_PP_DP, .pipe_split = SPLIT_LAYERS,
                   .context_parallel = 1, .own_buffers = 1, .own_kernels = 1, .grad_bytes = 4};
    if (software == SOFTWARE_SCALING)
        s.rank_order = ORDER_TP_DP_PP, s.pipe_split = SPLIT_PARAMS, s.loss_gathered = 1, s.dp_after_backward = 1,
        s.context_parallel = 0, s.own_buffers = 0, s.own_kernels = 0, s.swiglu_two_linears = 1, s.grad_bytes = 0;
    // a framework's ranks: tp fastest, then cp, then dp, pp slowest (Megatron-core parallel_state.py
    // initialize_model_parallel order "tp-cp-ep-dp-pp" at d98e8a6, older Megatron's groups the same; DeepSpeed's
    // PipeModelDataParallelTopology axes pipe, data, model; nanotron's ranks reshaped (ep, pp, dp, tp) at c2528430;
    // torchtitan's mesh pp, dp_replicate, dp_shard, cp, tp): a node of 8 at tp 4 holds two dp ranks of one stage
    if (software == SOFTWARE_FRAMEWORK || software == SOFTWARE_FOUNDRY || software == SOFTWARE_MEGATRON ||
        software == SOFTWARE_DEEPSPEED2021 || software == SOFTWARE_NANOTRON)
        s.own_buffers = 0, s.own_kernels = 0, s.tp_async_dgrad = 1, s.nccl_links = 1, s.zero3_layer_prefetch = 1,
        s.grad_bytes = 0, s.rank_order = ORDER_TP_DP_PP;
    if (software == SOFTWARE_DEEPSPEED2021) s.zero3_layer_prefetch = 0, s.zero3_param_sync = 1;
    // the pipelines these stacks ran exchange their messages blocking (pipe_send_wait)
    if (software == SOFTWARE_FRAMEWORK || software == SOFTWARE_DEEPSPEED2021) s.pipe_send_wait = SENDS_WAIT;
    // the share was fitted on the Scaling codebase's runs: its own, not the device's (dev/PLANNER.md)
    if (software == SOFTWARE_SCALING) s.alloc_share = 1, s.matmul_scaling = 1, s.scaling_options = 1;
    if (software == SOFTWARE_MEGATRON)
        s.tp_comm_overlap = 1, s.dp_overlap_chunked = 1, s.swiglu_fused = 1, s.loss_softmax_inplace = 1,
        s.grad_buffer_passes = 4, s.pipe_send_wait = SENDS_WAIT_ENDS;
    if (software == SOFTWARE_FOUNDRY) s.no_dropout = 1, s.loss = LOSS_FUSED;
    // nanotron (huggingface/nanotron at c2528430): no dropout (models/llama.py: flash_attn_varlen_func dropout_p 0.0),
    // Megatron's in-place vocabulary-parallel loss (tensor_parallel/functional.py _ShardedCrossEntropy after the
    // cast_to_fp32 block: max, subtract, exp in place, sum, divide in place), its cost cut, its fp32 accumulation and
    // reduction (accumulate_grad_in_fp32 true in the benchmarks' examples/config_tiny_llama_bench.yaml, branch
    // nouamane/bench2 at 67c5ebb6), its ZeRO-1 collectives
    if (software == SOFTWARE_NANOTRON)
        s.no_dropout = 1, s.loss_softmax_inplace = 1, s.pipe_split = SPLIT_COST, s.grad_accum_pass = 1,
        s.zero1_list_collectives = 1, s.grad_bytes = 4, s.reduce_bytes = 4, s.nanotron_options = 1,
        s.context_parallel = 0;
    return s;
}
// Whether its gradients can be autograd's, made at each chunk's first backward (--grad-alloc lazy, a --runs row's
// grad_alloc lazy): a framework's. Not this trainer's buffers, nor nanotron's FP32GradientAccumulator (its fp32
// buffers built in __init__, gradient_accumulator.py at c2528430, and its add pass already grad_accum_pass: lazy
// would count a second), nor the Scaling codebase (its memory share fitted to its runs as they allocated).
static int software_grads_lazy_ok(const PlanSetup* k) {
    return !k->own_buffers && !k->grad_accum_pass && !k->alloc_share;
}
static const char* software_grads_upfront_why(const PlanSetup* k) {
    return k->own_buffers        ? "this trainer allocates its gradients before the step"
           : k->nanotron_options ? "nanotron accumulates into fp32 buffers it builds before the step"
           : k->grad_accum_pass  ? "grad_accum_pass add or cast_add accumulates into fp32 buffers built before the step"
                                 : "the Scaling codebase's memory is its runs' fitted share";
}
// Whether its ZeRO-3 is PyTorch FSDP's (--fsdp-version, a --runs row's fsdp_version): a framework's; not this
// trainer's, DeepSpeed's (zero3_param_sync), nanotron's (no ZeRO-3) or the Scaling codebase's (ZeRO 0 or 1).
static int software_fsdp_ok(const PlanSetup* k) {
    return !k->own_buffers && !k->zero3_param_sync && !k->nanotron_options && !k->scaling_options;
}

// Six settings a --plan flag (cli.h) and a --runs column (runs.h) give alike: their names here, a table whose index
// is the value, and one parse each for both; `what` names the flag or the column in the error ("--grad-alloc",
// "grad_alloc"). Each returns 0, or -1 with the reason in err.
static const char* const GRAD_ALLOC_NAMES[] = {"upfront", "lazy", NULL};
static const char* const FSDP_VERSION_NAMES[] = {"1", "2", NULL};
static const char* const LOSS_NAMES[] = {"eager", "fused", "eager_bf16", NULL};
enum { GRAD_ACCUM_NONE, GRAD_ACCUM_ADD, GRAD_ACCUM_CAST_ADD };
static const char* const GRAD_ACCUM_NAMES[] = {"none", "add", "cast_add", NULL};
static const char* const STATES_DTYPE_NAMES[] = {"fp32", "bf16", NULL};
static const char* const GRAD_SYNC_NAMES[] = {"per_micro_batch", "last_micro_batch", NULL};
static const char* const OFF_ON_NAMES[] = {"off", "on", NULL};
static const char* const LOSS_VOCAB_NAMES[] = {"parallel", "gathered", NULL};

// v's index in names (NULL-terminated), or -1 with err set ("expected a, b or c").
static int software_choice(const char* what, const char* const names[], const char* v, char* err, size_t err_len) {
    int n = 0;
    for (; names[n]; n++)
        if (!strcmp(v, names[n])) return n;
    int at = snprintf(err, err_len, "%s: expected ", what);
    for (int i = 0; i < n && at >= 0 && (size_t)at < err_len; i++)
        at += snprintf(err + at, err_len - at, "%s%s", names[i], i == n - 1 ? "" : i == n - 2 ? " or " : ", ");
    if (at >= 0 && (size_t)at < err_len) snprintf(err + at, err_len - at, ", got '%s'", v);
    return -1;
}

// Gradients upfront (the states' count), or lazy: each chunk's from its first backward, accumulated by a pass of
// their own (grads_lazy), a framework's.
static int software_set_grad_alloc(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int lazy = software_choice(what, GRAD_ALLOC_NAMES, v, err, err_len);
    if (lazy < 0) return -1;
    if (lazy && !software_grads_lazy_ok(k)) {
        snprintf(err, err_len, "%s lazy: a framework's gradients (--software framework, foundry, megatron or "
                 "deepspeed2021); %s", what, software_grads_upfront_why(k));
        return -1;
    }
    k->grads_lazy = lazy;
    return 0;
}

// How a micro-batch's gradients reach fp32 buffers built before the step (grad_accum_pass: none, add, cast_add): a
// framework's; not this trainer's (its matmuls accumulate into its fp32 gradients) nor the Scaling codebase's (its
// step is its runs' fitted rate), and not beside lazy gradients (autograd's .grad, accumulated by a pass of its own).
static int software_set_grad_accum(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int pass = software_choice(what, GRAD_ACCUM_NAMES, v, err, err_len);
    if (pass < 0) return -1;
    if (pass && (k->own_buffers || k->matmul_scaling)) {
        snprintf(err, err_len, "%s %s: a framework's fp32 accumulation (--software framework, foundry, megatron, "
                 "deepspeed2021 or nanotron); %s", what, v,
                 k->own_buffers ? "this trainer's matmuls accumulate into its fp32 gradients"
                                : "the Scaling codebase's step is its runs' fitted rate");
        return -1;
    }
    if (pass && k->states_bf16) {
        snprintf(err, err_len, "%s %s: fp32 buffers for an fp32 master, not states_dtype bf16 (the parameters "
                 "themselves bf16, no master)", what, v);
        return -1;
    }
    if (pass && k->grads_lazy) {
        snprintf(err, err_len, "%s %s: fp32 buffers built before the step, not lazy gradients (autograd's .grad, "
                 "accumulated by a pass of its own)", what, v);
        return -1;
    }
    k->grad_accum_pass = pass;
    return 0;
}

// The dtype of the weights and AdamW's states (states_dtype: fp32, an fp32 master beside the bf16 weights and fp32
// m, v; bf16, the parameters and the states all bf16, no master): bf16 a framework's; not this trainer's (its fp32
// weights and states), nanotron's or a grad_accum_pass's (an optimizer over fp32 buffers: its fp32 master), nor the
// Scaling codebase's (its memory is its runs' fitted share).
static int software_set_states_dtype(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int bf16 = software_choice(what, STATES_DTYPE_NAMES, v, err, err_len);
    if (bf16 < 0) return -1;
    if (bf16 && (k->own_buffers || k->alloc_share || k->grad_accum_pass)) {
        snprintf(err, err_len, "%s bf16: a framework's bf16 parameters (--software framework, foundry, megatron or "
                 "deepspeed2021); %s", what,
                 k->own_buffers     ? "this trainer keeps fp32 weights and AdamW states"
                 : k->alloc_share   ? "the Scaling codebase's memory is its runs' fitted share"
                                    : "an fp32 accumulation (grad_accum_pass add or cast_add) feeds an fp32 master");
        return -1;
    }
    k->states_bf16 = bf16;
    return 0;
}

// When a framework's data-parallel gradients are reduced over a step's micro-batches (grad_sync: per_micro_batch,
// or last_micro_batch, FSDP2's set_requires_gradient_sync(False) but on the last): PyTorch FSDP's (software_fsdp_ok)
// at ZeRO 2 or 3; ZeRO 0 and 1 reduce once a step already (DDP's no_sync is what they price). zero as
// software_set_fsdp_version's.
static int software_set_grad_sync(PlanSetup* k, const char* what, const char* v, int zero, char* err,
                                  size_t err_len) {
    int last = software_choice(what, GRAD_SYNC_NAMES, v, err, err_len);
    if (last < 0) return -1;
    if (last && !software_fsdp_ok(k)) {
        snprintf(err, err_len, "%s last_micro_batch: PyTorch FSDP's set_requires_gradient_sync, a framework's "
                 "(--software framework, foundry or megatron)", what);
        return -1;
    }
    if (last && zero >= 0 && zero < 2) {
        snprintf(err, err_len, "%s last_micro_batch: FSDP's sharded gradients (%szero 2 or 3); at zero %d the "
                 "gradients are reduced once a step already", what, what[0] == '-' ? "--" : "", zero);
        return -1;
    }
    k->grad_sync_last = last;
    return 0;
}

// PyTorch FSDP's version for a framework's ZeRO-3: 1, its flat parameter, or 2, fully_shard's per-parameter tensors,
// which each gather is copied out into (gather_copy_out). zero: the run's ZeRO level (a row's, or --zero's filter;
// -1: not given), 3 or none; its flag named as `what` is ("--fsdp-version": "--zero", a row's "fsdp_version": "zero").
static int software_set_fsdp_version(PlanSetup* k, const char* what, const char* v, int zero, char* err,
                                     size_t err_len) {
    int version2 = software_choice(what, FSDP_VERSION_NAMES, v, err, err_len);
    if (version2 < 0) return -1;
    if (!software_fsdp_ok(k)) {
        snprintf(err, err_len, "%s %s: PyTorch FSDP's ZeRO-3, a framework's (--software framework, foundry or "
                 "megatron)", what, v);
        return -1;
    }
    if (zero >= 0 && zero != 3) {
        snprintf(err, err_len, "%s %s: how ZeRO-3 layouts gather their weights, not with %szero %d", what, v,
                 what[0] == '-' ? "--" : "", zero);
        return -1;
    }
    k->gather_copy_out = version2;
    return 0;
}
// DeepSpeed's defaults of 2021 (deepspeed/runtime/zero/constants.py at v0.3.16): a tensor below
// stage3_param_persistence_threshold elements stays whole on every rank; gathered weights are released once
// stage3_max_live_parameters elements are live (the module being run is fetched regardless). (Its
// stage3_max_reuse_distance, 1e9, never keeps a module from v0.3.14 to v0.5.x: predict.h zero3_param_sync_time.)
#define DS_PERSISTENCE_THRESHOLD 1e5
#define DS_MAX_LIVE_PARAMETERS 1e9
// The host's cost of one PyTorch call from Python (argument parsing, the dispatcher, a new TensorImpl): "on the
// order of 2 us" for torch functions on torch.Tensor objects (PyTorch's benchmarks/overrides_benchmark/README.md, added
// with pytorch#34645 in March 2020 (PyTorch 1.5): bench.py times torch.add of two one-element tensors, the minimum over
// 1000 x 1000 calls). A view (narrow) takes the same path without a kernel. Not checked on any data set.
#define PYTORCH_CALL_S 2e-6
// One rank's turn in the host loop of DeepSpeed's ZeRO-3 gather (partition_parameters.py _allgather_param,
// v0.3.13-v0.5.x: flat_tensor.narrow, the list's append, torch.distributed.get_rank(group) and the compare), in
// PYTORCH_CALL_S's calls: 2.7 x torch.add of one-element tensors (narrow 1.58-1.68, get_rank 0.76-0.83; min over
// 30 x 2000 calls, seven alternating runs 2.67-2.83; dev/ds_gather_loop.py, torch 2.15 on this project's 2-core
// machine: the ratio carried to 2021's host, not the time). Not checked on any data set.
#define DS_GATHER_LOOP_CALLS 2.7
// nanotron's DDP bucket (trainer.py: DistributedDataParallel(..., bucket_cap_mb=config.model.ddp_bucket_cap_mb),
// PyTorch's cap is bucket_cap_mb x 1024 x 1024 bytes): 25 MiB, the benchmarks' examples/config_tiny_llama_bench.yaml
// (branch nouamane/bench2 at 67c5ebb6) and config.py's default. Its ZeRO-0 hook fires once a bucket (predict.h
// ddp_bucket_count); ZeRO-1 runs without DDP.
#define NANOTRON_DDP_BUCKET_BYTES (25.0 * 1024 * 1024)

static PlanSetup plan_setup_default(void) { return plan_setup_for(SOFTWARE_TRAINER); }
// The fraction of NVLink's bandwidth the software's collectives reach inside a node (nccl_links).
static double software_link_eff(const PlanSetup* k, const DeviceProfile* d) {
    return k->nccl_links ? d->link_eff_nccl : d->link_eff;
}
// What an NCCL collective hidden under compute costs that compute, per second of it: the measured figure for software
// whose collectives are NCCL's kernels (nccl_links), else the device's estimate.
static double software_nccl_interference(const PlanSetup* k, const DeviceProfile* d) {
    return k->nccl_links ? d->comm_interference_nccl : d->comm_interference;
}

// A dropout probability (--dropout, a --runs row's dropout column) as the setup: 0 trains without masks or dropout
// kernels (no_dropout); above 0 a framework's GPT keeps Korthikanti's masks and runs the kernels (time.h layer_time).
// This trainer has no dropout. Returns 0, or -1 with the reason in err.
static int software_set_dropout(PlanSetup* k, const char* text, char* err, size_t err_len) {
    double p = decimal_text(text, 1) ? strtod(text, NULL) : -1;  // as written: no blanks, hex, inf or nan
    if (!(p >= 0 && p < 1)) {
        snprintf(err, err_len, "dropout '%s': expected a probability in [0, 1)", text);
        return -1;
    }
    if (k->own_buffers && p > 0) {
        snprintf(err, err_len, "dropout %s: this trainer has no dropout (a framework's has: --software framework)",
                 text);
        return -1;
    }
    k->no_dropout = p == 0;
    return 0;
}

// The NCCL release v ("2.18.3") whose cost model prices the run's collectives (device.h nccl_release_of); `what` as
// software_choice's.
static int software_set_nccl(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int release = nccl_release_of(v);
    if (!release) {
        snprintf(err, err_len, "%s: expected a release 2.8 .. 2.30 (MAJOR.MINOR[.PATCH], e.g. 2.18.3), got '%s'", what,
                 v);
        return -1;
    }
    k->nccl_release = release;
    return 0;
}

// A framework's loss (--loss, a --runs row's loss column): what its cross-entropy keeps for its backward (memory.h
// loss_bytes_per_logit): eager, torch's fp32 ops (e + 16 bytes a logit); fused, one kernel or a compiled graph that
// keeps the logits and writes their gradient in the training dtype (2e: flash-attn's xentropy, llm-foundry's default;
// OLMo-core's torch.compile'd loss, measured by dev/loss_saved_bytes.py); or eager_bf16, F.cross_entropy on the bf16
// logits themselves, no fp32 copy (4e: KempnerForge's). Memory only: its time stays the software's (loss_bytes).
// Refused: this trainer (its own kernel and buffers), the Scaling codebase (torch's loss over the gathered logits),
// and fused or eager_bf16 where the loss keeps its fp32 softmax whatever runs it: Megatron-core's
// vocab_parallel_cross_entropy, --cross-entropy-loss-fusion too (fusions/fused_cross_entropy.py at f2e5db40 saves
// exp_logits of the logits' .float()), and nanotron's _ShardedCrossEntropy (c2528430: exp_logits of the fp32 cast).
// The name v as LOSS_NAMES says; `what` as software_choice's.
static int software_set_loss(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int loss = software_choice(what, LOSS_NAMES, v, err, err_len);
    if (loss < 0) return -1;
    if (k->own_kernels || k->scaling_options) {
        snprintf(err, err_len, "%s %s: a framework's cross-entropy (%s)", what, v,
                 k->own_kernels ? "this trainer's loss is its own kernel" : "the Scaling codebase's is torch's");
        return -1;
    }
    if (loss != LOSS_EAGER && k->loss_softmax_inplace) {
        snprintf(err, err_len, "%s %s: this software's vocabulary-parallel cross-entropy keeps its fp32 softmax "
                 "for the backward (Megatron-core's, --cross-entropy-loss-fusion too; nanotron's)", what, v);
        return -1;
    }
    k->loss = loss;
    return 0;
}

// Megatron-core's cross-entropy compiled (--cross-entropy-loss-fusion on|off, a --runs row's cross_entropy_loss_fusion
// column: loss_compiled): its vocab_parallel_cross_entropy's, so the software's whose loss that is (megatron); not
// torch's (framework, foundry, deepspeed2021), nanotron's own _ShardedCrossEntropy, the Scaling codebase's or this
// trainer's. `what` as software_choice's.
static int software_set_loss_compiled(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int on = software_choice(what, OFF_ON_NAMES, v, err, err_len);
    if (on < 0) return -1;
    if (on && (!k->loss_softmax_inplace || k->nanotron_options)) {
        snprintf(err, err_len, "%s on: Megatron-core's fused vocabulary-parallel cross-entropy (--software megatron); "
                 "%s", what, k->nanotron_options ? "nanotron's loss is its own _ShardedCrossEntropy"
                            : k->own_kernels      ? "this trainer's loss is its own kernel"
                                                  : "this software's loss is torch's");
        return -1;
    }
    k->loss_compiled = on;
    return 0;
}

// Where a framework's cross-entropy runs under tensor parallelism (loss_gathered): parallel, each tp rank over its
// V / tp logits (Megatron-core's vocab_parallel_cross_entropy, torchtitan's loss_parallel), or gathered, the head's
// column-parallel output all-gathered and the loss over the whole vocabulary on every rank (a DTensor head with
// Replicate output: KempnerForge's ColwiseParallel(output_layouts=Replicate()), distributed/tensor_parallel.py at
// 01b461a); predict.h edge_times prices the gather and the loss over V, plan_memory its logits. Refused: this
// trainer and the Scaling codebase (their own losses: vocabulary-parallel, gathered) and Megatron-core's and
// nanotron's vocabulary-parallel cross-entropy (loss_softmax_inplace).
static int software_set_loss_vocab(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int gathered = software_choice(what, LOSS_VOCAB_NAMES, v, err, err_len);
    if (gathered < 0) return -1;
    if (k->own_kernels || k->scaling_options || k->loss_softmax_inplace) {
        snprintf(err, err_len, "%s %s: a framework's cross-entropy (%s)", what, v,
                 k->own_kernels       ? "this trainer's loss is its own vocabulary-parallel kernel"
                 : k->scaling_options ? "the Scaling codebase gathers the logits"
                                      : "this software's is vocabulary-parallel: Megatron-core's, nanotron's");
        return -1;
    }
    k->loss_gathered = gathered;
    return 0;
}

// A framework's tensor-parallel backward with or without Megatron-LM's asynchronous input-gradient collective
// (--tp-async-dgrad off|on, a --runs row's tp_async_dgrad column: tp_async_dgrad). off is plain DTensor tensor
// parallelism, torch.distributed.tensor.parallel's ColwiseParallel / RowwiseParallel as torchtitan (820504e
// parallelize_llama.py apply_tp without enable_async_tensor_parallel) and KempnerForge (01b461a
// distributed/tensor_parallel.py) run it: autograd's matmul backward gives the input and the weight gradient in one
// node, and the input gradient's collective, the redistribute's backward, runs after it, nothing under it. This
// trainer and the Scaling codebase overlap nothing and have no such choice. `what` as software_choice's.
static int software_set_tp_async_dgrad(PlanSetup* k, const char* what, const char* v, char* err, size_t err_len) {
    int on = software_choice(what, OFF_ON_NAMES, v, err, err_len);
    if (on < 0) return -1;
    if (on && (k->own_kernels || k->scaling_options)) {
        snprintf(err, err_len, "%s on: Megatron-LM's asynchronous tensor-parallel backward (a framework's); %s", what,
                 k->own_kernels ? "this trainer's backward overlaps no tp collective"
                                : "the Scaling codebase's backward overlaps no tp collective");
        return -1;
    }
    k->tp_async_dgrad = on;
    return 0;
}

static int attn_from_name(const char* s) {
    for (int i = 0; i < N_ATTN; i++)
        if (!strcmp(s, ATTN_NAMES[i])) return i;
    return -1;
}
// names[0, n) joined by sep into out, cut at out_len (help and error lines).
static const char* names_joined(char* out, size_t out_len, const char* const names[], int n, const char* sep) {
    out[0] = 0;
    for (int i = 0, used = 0; i < n && used < (int)out_len; i++)
        used += snprintf(out + used, out_len - used, "%s%s", i ? sep : "", names[i]);
    return out;
}
// Every kernel's name from ATTN_NAMES, joined by sep.
static const char* attn_names_joined(char* out, size_t out_len, const char* sep) {
    return names_joined(out, out_len, ATTN_NAMES, N_ATTN, sep);
}

// Bytes the memory-bound ops move per element they touch, forward and backward (e = bytes
// of the training dtype; fp32 intermediates 4). Counted from the kernels' reads and writes:
//   fused norm            fwd read x, write y: 2e            bwd read x, dy, write dx: 3e
//   unfused RMSNorm       x.float() e+4, pow 8, mean 4, mul by rsqrt 8, to(dtype) 4+e, mul by
//                         the weight 2e: 4e + 24 fwd; each op's backward reads its saved
//                         input and the gradient and writes one: about twice that
//   residual add          read 2, write 1: 3e (the backward sums two gradient streams: 3e)
//   RoPE (q and k)        read, write: 2e each way
//   GELU / SwiGLU         read 1 / 2 inputs, write 1: 2e / 3e; backward reads inputs and dy: 3e / 5e
//   softmax, fused        fwd read scores, write P: 2e         bwd read P, dP, write dS: 3e
//   softmax, torch        fwd mask 2e, fp32 softmax e+4, to(dtype) 4+e: 4e + 8
//                         bwd to() e+4, softmax bwd 12, to(dtype) 4+e: 2e + 20
//   cross-entropy         fwd logits to fp32 e+4, max 4, sum of exp 4, log-softmax 8: e + 20
//                         bwd softmax - one-hot 8, to(dtype) 4+e: e + 12
//   Megatron's            fwd logits to fp32 e+4, max 4, subtract the max in place 8, exp in place 8, sum 4,
//   (loss_softmax_inplace)    divide by the sum in place 8: e + 36   bwd (the same) e + 12
//   compiled, its three   fwd the cast with the max e+4 (calculate_logits_max: the fp32 copy returned), the
//   functions and one         subtract, exp and sum 8 (calculate_predicted_logits: read, written back in place),
//   (loss_compiled)           the divide 8 (calculate_cross_entropy_loss): e + 20
//                         bwd calculate_gradients: the softmax read 4, written back in place 4 (torch.compile keeps
//                             an input's mutation), the bf16 gradient e: e + 8
static double norm_bytes(int rms_kernel, double e, int backward) {
    if (rms_kernel) return backward ? 3 * e : 2 * e;
    return (backward ? 2 : 1) * (4 * e + 24);
}
// The loss per logit: a framework's fp32 ops (the table above), or this trainer's fused
// cross-entropy, one kernel for the loss and its gradient that reads the logits three times
// and writes the gradient once (dev/RESULTS.md: N 8192, V 50304 in 0.917 ms on the H200).
static double loss_bytes(const PlanSetup* k, double e, int backward) {
    if (k->own_kernels) return backward ? 0 : 4 * e;
    if (k->loss_compiled) return backward ? e + 8 : e + 20;
    return backward ? e + 12 : k->loss_softmax_inplace ? e + 36 : e + 20;
}
static double softmax_bytes(int attention, double e, int backward) {
    if (attention == ATTN_TORCH) return backward ? 2 * e + 20 : 4 * e + 8;
    return backward ? 3 * e : 2 * e;
}

#endif
