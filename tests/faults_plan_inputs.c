// tests/faults_plan_inputs.c: test_faults' cases of the planner's inputs of issue 35's fifth session, as a hostile user
// types them: --cp-kind allgather, --grad-alloc, --fsdp-version, --states-dtype, --grad-sync, --loss, --loss-vocab,
// --cross-entropy-loss-fusion, --tp-async-dgrad and --software nanotron with softwares and layouts that cannot use
// them, empty values and wrong case; the device keys tensor_clock (NaN, inf, negative, zero, above the datasheet's
// clock: 2 gave a 101.8% MFU) and nics_per_gpu in --device-set and a --device-file; the --runs columns cp_kind,
// grad_alloc, grad_accum_pass, states_dtype, grad_sync, fsdp_version, loss, loss_vocab, cross_entropy_loss_fusion,
// tp_async_dgrad, dropout, grad_dtype, reduce_dtype, pp_split, cp and nccl (and --nccl-version) blank, junk, named
// twice in the header (the last was read silently) or refused by the row's software; a device file's key given twice;
// the search's filters beside --runs. Each is one error line and exit 1. Run through ./train and ./train_asan.
// Included by tests/test_faults.c after faults_bad_inputs.c (its bad_run and BAD); not built alone.

#define PI BAD "/plan_inputs"
#define PI_PLAN "--plan --model gpt2-124m "
// A one-row --runs file PI/N.csv: the required columns and H, a 7B on 16 GPUs at ZeRO Z, data-parallel D, and R
#define PI_RUNS(N, H, Z, D, R)                                                                                       \
    "printf 'model,seq_len,gpus,gpus_per_node,global_batch_tokens,schedule,zero,tp,pp,dp,micro_batch,recompute,"   \
    "attention,rms_kernel,sp" H "\\nllama-7b,4096,16,8,262144,1f1b," Z ",1,1," D ",1,none,flash2,1,0" R "\\n' > " PI \
    "/" N ".csv"

static const BadRun PLAN_INPUT_RUNS[] = {
    // --cp-kind: a kind with --cp 1 let no layout through ("none of 8 GPUs passes the filters")
    {{"plan_cp_kind_allgather_cp1", PI_PLAN "--software framework --cp 1 --cp-kind allgather",
      "--cp-kind allgather: how cp > 1 ranks split a sequence, not with --cp 1", 1}, NULL, NULL},
    {{"plan_cp_kind_empty", PI_PLAN "--software framework --cp-kind ''", "--cp-kind: expected ring", 1}, NULL, NULL},
    {{"plan_cp_kind_wrong_case", PI_PLAN "--software framework --cp-kind Allgather", "got 'Allgather'", 1}, NULL,
     NULL},
    {{"plan_cp_allgather_ulysses", PI_PLAN "--software framework --cp 4 --cp-ulysses 2 --cp-kind allgather",
      "nor --cp-ulysses above 1", 1}, NULL, NULL},
    {{"plan_cp_allgather_trainer", PI_PLAN "--cp 2 --cp-kind allgather", "this trainer runs ring, ulysses or 2d", 1},
     NULL, NULL},
    // the Scaling codebase and nanotron have no context parallelism (said "this trainer runs ring ...", or searched
    // every cp > 1 layout to say "none passes the filters")
    {{"plan_cp_allgather_scaling", PI_PLAN "--software scaling --cp-kind allgather",
      "this software has no context parallelism", 1}, NULL, NULL},
    {{"plan_cp_allgather_nanotron", PI_PLAN "--software nanotron --cp-kind allgather",
      "this software has no context parallelism", 1}, NULL, NULL},
    {{"plan_cp_scaling", PI_PLAN "--software scaling --cp 2", "--cp 2: this software has no context parallelism", 1},
     NULL, NULL},
    {{"plan_cp_nanotron", PI_PLAN "--software nanotron --cp 2", "--cp 2: this software has no context parallelism",
      1}, NULL, NULL},
    // --grad-alloc: lazy under nanotron counted a second accumulation pass (62.9 -> 59.7% MFU, silently)
    {{"plan_grad_alloc_empty", PI_PLAN "--software framework --grad-alloc ''", "expected upfront or lazy, got ''", 1},
     NULL, NULL},
    {{"plan_grad_alloc_wrong_case", PI_PLAN "--software framework --grad-alloc LAZY", "got 'LAZY'", 1}, NULL, NULL},
    {{"plan_grad_alloc_lazy_trainer", PI_PLAN "--grad-alloc lazy", "this trainer allocates its gradients", 1}, NULL,
     NULL},
    {{"plan_grad_alloc_lazy_scaling", PI_PLAN "--software scaling --grad-alloc lazy",
      "the Scaling codebase's memory is its runs' fitted share", 1}, NULL, NULL},
    {{"plan_grad_alloc_lazy_nanotron", PI_PLAN "--software nanotron --grad-alloc lazy",
      "nanotron accumulates into fp32 buffers", 1}, NULL, NULL},
    // --grad-accum-pass: a third value in software_choice's message; refused where nothing separate accumulates
    {{"plan_grad_accum_junk", PI_PLAN "--software framework --grad-accum-pass CAST",
      "--grad-accum-pass: expected none, add or cast_add, got 'CAST'", 1}, NULL, NULL},
    {{"plan_grad_accum_trainer", PI_PLAN "--grad-accum-pass add", "this trainer's matmuls accumulate into its fp32", 1},
     NULL, NULL},
    {{"plan_grad_accum_scaling", PI_PLAN "--software scaling --grad-accum-pass cast_add",
      "the Scaling codebase's step is its runs' fitted rate", 1}, NULL, NULL},
    {{"plan_grad_accum_lazy", PI_PLAN "--software framework --grad-alloc lazy --grad-accum-pass cast_add",
      "--grad-accum-pass cast_add: fp32 buffers built before the step, not lazy gradients", 1}, NULL, NULL},
    // --states-dtype: bf16 where the software keeps an fp32 master (this trainer, nanotron's accumulator) or its memory
    // is fitted (Scaling)
    {{"plan_states_dtype_junk", PI_PLAN "--software framework --states-dtype BF16",
      "--states-dtype: expected fp32 or bf16, got 'BF16'", 1}, NULL, NULL},
    {{"plan_states_dtype_trainer", PI_PLAN "--states-dtype bf16", "this trainer keeps fp32 weights and AdamW states",
      1}, NULL, NULL},
    {{"plan_states_dtype_scaling", PI_PLAN "--software scaling --states-dtype bf16",
      "--states-dtype bf16: a framework's bf16 parameters", 1}, NULL, NULL},
    {{"plan_states_dtype_nanotron", PI_PLAN "--software nanotron --states-dtype bf16",
      "an fp32 accumulation (grad_accum_pass add or cast_add) feeds an fp32 master", 1}, NULL, NULL},
    // --grad-sync: FSDP's no-sync; at --zero 0 or 1 it would change nothing, silently
    {{"plan_grad_sync_junk", PI_PLAN "--software framework --grad-sync last",
      "--grad-sync: expected per_micro_batch or last_micro_batch, got 'last'", 1}, NULL, NULL},
    {{"plan_grad_sync_trainer", PI_PLAN "--grad-sync last_micro_batch",
      "--grad-sync last_micro_batch: PyTorch FSDP's set_requires_gradient_sync, a framework's", 1}, NULL, NULL},
    {{"plan_grad_sync_nanotron", PI_PLAN "--software nanotron --grad-sync last_micro_batch",
      "PyTorch FSDP's set_requires_gradient_sync", 1}, NULL, NULL},
    {{"plan_grad_sync_zero1", PI_PLAN "--software framework --zero 1 --grad-sync last_micro_batch",
      "--grad-sync last_micro_batch: FSDP's sharded gradients (--zero 2 or 3); at zero 1 the gradients are reduced "
      "once a step already", 1}, NULL, NULL},
    // --fsdp-version: with --zero 1, or under a software without PyTorch FSDP, it changed nothing, silently
    {{"plan_fsdp_version_3", PI_PLAN "--software framework --fsdp-version 3", "expected 1 or 2, got '3'", 1}, NULL,
     NULL},
    {{"plan_fsdp_version_empty", PI_PLAN "--software framework --fsdp-version ''", "expected 1 or 2, got ''", 1},
     NULL, NULL},
    {{"plan_fsdp_version_zero1", PI_PLAN "--software framework --fsdp-version 2 --zero 1", "not with --zero 1", 1},
     NULL, NULL},
    {{"plan_fsdp_version_trainer", PI_PLAN "--fsdp-version 2", "PyTorch FSDP's ZeRO-3, a framework's", 1}, NULL,
     NULL},
    {{"plan_fsdp_version_deepspeed2021", PI_PLAN "--software deepspeed2021 --fsdp-version 1",
      "PyTorch FSDP's ZeRO-3, a framework's", 1}, NULL, NULL},
    {{"plan_fsdp_version_nanotron", PI_PLAN "--software nanotron --fsdp-version 2",
      "PyTorch FSDP's ZeRO-3, a framework's", 1}, NULL, NULL},
    {{"plan_fsdp_version_scaling", PI_PLAN "--software scaling --fsdp-version 2",
      "PyTorch FSDP's ZeRO-3, a framework's", 1}, NULL, NULL},
    // --loss: a framework's cross-entropy; fused and eager_bf16 refused where the loss keeps its fp32 softmax whatever
    // runs it
    {{"plan_loss_wrong_case", PI_PLAN "--software framework --loss Fused",
      "--loss: expected eager, fused or eager_bf16, got 'Fused'", 1}, NULL, NULL},
    {{"plan_loss_empty", PI_PLAN "--software framework --loss ''", "expected eager, fused or eager_bf16, got ''", 1},
     NULL, NULL},
    {{"plan_loss_bf16_wrong_case", PI_PLAN "--software framework --loss eager_BF16", "got 'eager_BF16'", 1}, NULL,
     NULL},
    {{"plan_loss_bf16_trainer", PI_PLAN "--loss eager_bf16", "--loss eager_bf16: a framework's cross-entropy", 1},
     NULL, NULL},
    {{"plan_loss_bf16_nanotron", PI_PLAN "--software nanotron --loss eager_bf16",
      "--loss eager_bf16: this software's vocabulary-parallel cross-entropy keeps its fp32 softmax", 1}, NULL, NULL},
    {{"plan_runs_loss_bf16_megatron", "--plan --software megatron --runs " PI "/loss_bf16_mega.csv",
      "loss eager_bf16: this software's vocabulary-parallel cross-entropy keeps its fp32 softmax", 1},
     PI_RUNS("loss_bf16_mega", ",loss", "1", "16", ",eager_bf16"), NULL},
    {{"plan_loss_trainer", PI_PLAN "--loss fused", "--loss fused: a framework's cross-entropy (this trainer's loss is",
      1}, NULL, NULL},
    {{"plan_loss_scaling", PI_PLAN "--software scaling --loss eager", "(the Scaling codebase's is torch's)", 1}, NULL,
     NULL},
    {{"plan_loss_fused_megatron", PI_PLAN "--software megatron --loss fused", "keeps its fp32 softmax for the backward",
      1}, NULL, NULL},
    {{"plan_loss_fused_nanotron", PI_PLAN "--software nanotron --loss fused", "keeps its fp32 softmax for the backward",
      1}, NULL, NULL},
    {{"plan_runs_loss_fused_megatron", "--plan --software megatron --runs " PI "/loss_mega.csv",
      "loss fused: this software's vocabulary-parallel cross-entropy keeps its fp32 softmax", 1},
     PI_RUNS("loss_mega", ",loss", "1", "16", ",fused"), NULL},
    // --cross-entropy-loss-fusion: Megatron-core's loss compiled; under any other software's loss it would have cut
    // a loss the software does not run
    {{"plan_loss_compiled_framework", PI_PLAN "--software framework --cross-entropy-loss-fusion on",
      "--cross-entropy-loss-fusion on: Megatron-core's fused vocabulary-parallel cross-entropy (--software megatron); "
      "this software's loss is torch's", 1}, NULL, NULL},
    {{"plan_loss_compiled_nanotron", PI_PLAN "--software nanotron --cross-entropy-loss-fusion on",
      "nanotron's loss is its own _ShardedCrossEntropy", 1}, NULL, NULL},
    {{"plan_loss_compiled_trainer", PI_PLAN "--cross-entropy-loss-fusion on", "this trainer's loss is its own kernel",
      1}, NULL, NULL},
    {{"plan_loss_compiled_wrong_case", PI_PLAN "--software megatron --cross-entropy-loss-fusion On",
      "--cross-entropy-loss-fusion: expected off or on, got 'On'", 1}, NULL, NULL},
    {{"plan_loss_compiled_empty", PI_PLAN "--software megatron --cross-entropy-loss-fusion ''",
      "expected off or on, got ''", 1}, NULL, NULL},
    {{"plan_runs_loss_compiled_framework", "--plan --software framework --runs " PI "/ce_fw.csv",
      "cross_entropy_loss_fusion on: Megatron-core's fused vocabulary-parallel cross-entropy", 1},
     PI_RUNS("ce_fw", ",cross_entropy_loss_fusion", "1", "16", ",on"), NULL},
    {{"plan_runs_loss_compiled_true", "--plan --software megatron --runs " PI "/ce_true.csv",
      "cross_entropy_loss_fusion: expected off or on, got 'true'", 1},
     PI_RUNS("ce_true", ",cross_entropy_loss_fusion", "1", "16", ",true"), NULL},
    // --loss-vocab: a framework's loss under tp, not where the software's own loss decides it
    {{"plan_loss_vocab_wrong_case", PI_PLAN "--software framework --loss-vocab Gathered",
      "--loss-vocab: expected parallel or gathered, got 'Gathered'", 1}, NULL, NULL},
    {{"plan_loss_vocab_empty", PI_PLAN "--software framework --loss-vocab ''", "expected parallel or gathered, got ''",
      1}, NULL, NULL},
    {{"plan_loss_vocab_trainer", PI_PLAN "--loss-vocab gathered", "this trainer's loss is its own vocabulary-parallel",
      1}, NULL, NULL},
    {{"plan_loss_vocab_scaling", PI_PLAN "--software scaling --loss-vocab parallel",
      "the Scaling codebase gathers the logits", 1}, NULL, NULL},
    {{"plan_loss_vocab_megatron", PI_PLAN "--software megatron --loss-vocab gathered",
      "this software's is vocabulary-parallel", 1}, NULL, NULL},
    {{"plan_runs_loss_vocab_junk", "--plan --software framework --runs " PI "/loss_vocab_junk.csv",
      "(row 1: loss_vocab: expected parallel or gathered, got 'all')", 1},
     PI_RUNS("loss_vocab_junk", ",loss_vocab", "1", "16", ",all"), NULL},
    {{"plan_runs_loss_vocab_nanotron", "--plan --software nanotron --runs " PI "/loss_vocab_nano.csv",
      "loss_vocab gathered: a framework's cross-entropy (this software's is vocabulary-parallel", 1},
     PI_RUNS("loss_vocab_nano", ",loss_vocab", "1", "16", ",gathered"), NULL},
    // --tp-async-dgrad: Megatron-LM's asynchronous tp backward is a framework's; this trainer and the Scaling codebase
    // overlap no tp collective, so on would have hidden collectives they expose
    {{"plan_tp_async_trainer", PI_PLAN "--tp-async-dgrad on",
      "--tp-async-dgrad on: Megatron-LM's asynchronous tensor-parallel backward (a framework's); this trainer's "
      "backward overlaps no tp collective", 1}, NULL, NULL},
    {{"plan_tp_async_scaling", PI_PLAN "--software scaling --tp-async-dgrad on",
      "the Scaling codebase's backward overlaps no tp collective", 1}, NULL, NULL},
    {{"plan_tp_async_wrong_case", PI_PLAN "--software framework --tp-async-dgrad Off",
      "--tp-async-dgrad: expected off or on, got 'Off'", 1}, NULL, NULL},
    {{"plan_tp_async_empty", PI_PLAN "--software framework --tp-async-dgrad ''", "expected off or on, got ''", 1},
     NULL, NULL},
    {{"plan_runs_tp_async_scaling", "--plan --software scaling --runs " PI "/ta_sc.csv",
      "tp_async_dgrad on: Megatron-LM's asynchronous tensor-parallel backward", 1},
     PI_RUNS("ta_sc", ",tp_async_dgrad", "1", "16", ",on"), NULL},
    {{"plan_runs_tp_async_true", "--plan --software framework --runs " PI "/ta_true.csv",
      "tp_async_dgrad: expected off or on, got '1'", 1},
     PI_RUNS("ta_true", ",tp_async_dgrad", "1", "16", ",1"), NULL},
    // --software nanotron: what nanotron v0.5 does not run (--pp-split auto was dropped silently)
    {{"plan_software_wrong_case", PI_PLAN "--software Nanotron", "got 'Nanotron'", 1}, NULL, NULL},
    {{"plan_nanotron_zero3", PI_PLAN "--software nanotron --zero 3", "nanotron v0.5 runs ZeRO 0 or 1", 1}, NULL, NULL},
    {{"plan_nanotron_selective", PI_PLAN "--software nanotron --recompute selective",
      "nanotron v0.5 runs ZeRO 0 or 1", 1}, NULL, NULL},
    {{"plan_nanotron_pp_split_ends", PI_PLAN "--software nanotron --pp-split ends", "--pp-split ends: a framework's",
      1}, NULL, NULL},
    {{"plan_nanotron_pp_split_auto", PI_PLAN "--software nanotron --pp-split auto",
      "--pp-split auto: this software cuts its pipeline by compute cost", 1}, NULL, NULL},
    {{"plan_scaling_pp_split_auto", PI_PLAN "--software scaling --pp-split auto",
      "--pp-split auto: this software cuts its pipeline by parameters", 1}, NULL, NULL},
    // tensor_clock: a power limit's clock, at most the datasheet's (2 with matmul_eff 1 gave 101.8% MFU)
    {{"plan_device_tensor_clock_nan", PI_PLAN "--device-set tensor_clock=nan", "tensor_clock: expected a number", 1},
     NULL, NULL},
    {{"plan_device_tensor_clock_empty", PI_PLAN "--device-set tensor_clock=", "tensor_clock: expected a number, got ''",
      1}, NULL, NULL},
    {{"plan_device_tensor_clock_inf", PI_PLAN "--device-set tensor_clock=inf", "tensor_clock: expected a number, got "
      "'inf'", 1}, NULL, NULL},
    {{"plan_device_tensor_clock_negative", PI_PLAN "--device-set tensor_clock=-0.5",
      "tensor_clock = -0.5 is out of range", 1}, NULL, NULL},
    {{"plan_device_tensor_clock_zero", PI_PLAN "--device-set tensor_clock=0", "tensor_clock = 0 is out of range", 1},
     NULL, NULL},
    {{"plan_device_tensor_clock_above_peak", PI_PLAN "--device-set tensor_clock=2 --device-set matmul_eff=1",
      "tensor_clock = 2 is out of range", 1}, NULL, NULL},
    {{"plan_device_tensor_clock_huge", PI_PLAN "--device-set tensor_clock=1e400", "tensor_clock: expected a number",
      1}, NULL, NULL},
    // nics_per_gpu: a GPU's share of its node's NICs (nics_per_node, a count a node, meant the profile's node
    // whatever --gpus-per-node said: renamed, so an old file's key is refused, not read with the other meaning)
    {{"plan_device_nics_per_node_gone", PI_PLAN "--device-set nics_per_node=4", "unknown key 'nics_per_node'", 1},
     NULL, NULL},
    {{"plan_device_nics_per_gpu_zero", PI_PLAN "--device-set nics_per_gpu=0", "nics_per_gpu = 0 is out of range", 1},
     NULL, NULL},
    {{"plan_device_nics_per_gpu_nan", PI_PLAN "--device-set nics_per_gpu=nan", "nics_per_gpu: expected a number", 1},
     NULL, NULL},
    {{"plan_device_file_tensor_clock_above_peak", PI_PLAN "--device-file " PI "/clock.txt",
      "clock.txt:2: tensor_clock = 1.5 is out of range", 1},
     "printf 'base = h100-sxm\\ntensor_clock = 1.5\\n' > " PI "/clock.txt", NULL},
    {{"plan_device_file_tensor_clock_nan", PI_PLAN "--device-file " PI "/clock_nan.txt",
      "clock_nan.txt:1: tensor_clock: expected a number, got 'NaN'", 1},
     "printf 'tensor_clock = NaN\\n' > " PI "/clock_nan.txt", NULL},
    // a device file's key given twice: the last was taken
    {{"plan_device_file_key_twice", PI_PLAN "--device-file " PI "/clock_twice.txt",
      "clock_twice.txt:3: tensor_clock: given on line 2 already", 1},
     "printf 'base = h100-sxm\ntensor_clock = 0.5\ntensor_clock = 0.9\n' > " PI "/clock_twice.txt", NULL},
    // the search's filters beside --runs (whose rows give their layouts) were ignored: --zero 1 predicted zero 3
    {{"plan_runs_with_filter", "--plan --software framework --runs " PI "/ok.csv --zero 1",
      "filter a search: not with --runs", 1}, PI_RUNS("ok", "", "3", "16", ""), NULL},
    {{"plan_runs_with_cp_kind_ring", "--plan --software framework --runs " PI "/ok.csv --cp-kind ring",
      "filter a search: not with --runs", 1}, PI_RUNS("ok", "", "3", "16", ""), NULL},
    // --runs columns: each a row that cannot be evaluated, one line, exit 1
    {{"plan_runs_cp_kind_wrong_case", "--plan --software framework --runs " PI "/ck_case.csv",
      "unknown cp_kind 'ALLGATHER'", 1}, PI_RUNS("ck_case", ",cp,cp_kind", "3", "8", ",2,ALLGATHER"), NULL},
    {{"plan_runs_cp_kind_allgather_ulysses", "--plan --software framework --runs " PI "/ck_uly.csv",
      "cp_kind allgather: a framework's (not --software trainer), with cp_ulysses 1", 1},
     PI_RUNS("ck_uly", ",cp,cp_ulysses,cp_kind", "3", "8", ",2,2,allgather"), NULL},
    {{"plan_runs_cp_kind_ulysses_is_ring", "--plan --software framework --runs " PI "/ck_ring.csv",
      "cp_kind ulysses: cp 2 with cp_ulysses 1 is ring", 1}, PI_RUNS("ck_ring", ",cp,cp_kind", "3", "8", ",2,ulysses"),
     NULL},
    {{"plan_runs_cp_kind_allgather_nanotron", "--plan --software nanotron --runs " PI "/ck_nano.csv",
      "this software has no context parallelism (cp 2)", 1},
     PI_RUNS("ck_nano", ",cp,cp_kind", "1", "8", ",2,allgather"), NULL},
    {{"plan_runs_grad_alloc_wrong_case_trainer", "--plan --runs " PI "/ga_case.csv",
      "--runs " PI "/ga_case.csv: none of the 1 runs could be evaluated (row 1: grad_alloc: expected upfront or lazy, "
      "got 'Lazy')", 1},
     PI_RUNS("ga_case", ",grad_alloc", "1", "16", ",Lazy"), NULL},
    {{"plan_runs_grad_alloc_lazy_nanotron", "--plan --software nanotron --runs " PI "/ga_nano.csv",
      "grad_alloc lazy: a framework's gradients (--software framework, foundry, megatron or deepspeed2021); "
      "nanotron accumulates into fp32 buffers it builds before the step)", 1},
     PI_RUNS("ga_nano", ",grad_alloc", "1", "16", ",lazy"), NULL},
    {{"plan_runs_grad_alloc_lazy_scaling", "--plan --software scaling --runs " PI "/ga_scal.csv",
      "grad_alloc lazy: a framework's gradients (--software framework, foundry, megatron or deepspeed2021); "
      "the Scaling codebase's memory is its runs' fitted share)", 1},
     PI_RUNS("ga_scal", ",grad_alloc", "1", "16", ",lazy"), NULL},
    {{"plan_runs_grad_accum_lazy", "--plan --software framework --runs " PI "/gp_lazy.csv",
      "(row 1: grad_accum_pass add: fp32 buffers built before the step, not lazy gradients", 1},
     PI_RUNS("gp_lazy", ",grad_alloc,grad_accum_pass", "1", "16", ",lazy,add"), NULL},
    {{"plan_runs_grad_accum_lazy_flag", "--plan --software framework --grad-accum-pass add --runs " PI "/gp_flag.csv",
      "grad_alloc lazy: a framework's gradients (--software framework, foundry, megatron or deepspeed2021); "
      "grad_accum_pass add or cast_add accumulates into fp32 buffers built before the step)", 1},
     PI_RUNS("gp_flag", ",grad_alloc", "1", "16", ",lazy"), NULL},
    {{"plan_runs_states_dtype_trainer", "--plan --runs " PI "/sd_own.csv",
      "(row 1: states_dtype bf16: a framework's bf16 parameters (--software framework, foundry, megatron or "
      "deepspeed2021); this trainer keeps fp32 weights and AdamW states)", 1},
     PI_RUNS("sd_own", ",states_dtype", "3", "16", ",bf16"), NULL},
    {{"plan_runs_states_dtype_blank_case", "--plan --software framework --runs " PI "/sd_case.csv",
      "(row 1: states_dtype: expected fp32 or bf16, got ' bf16')", 1},
     PI_RUNS("sd_case", ",states_dtype", "3", "16", ", bf16"), NULL},
    {{"plan_runs_states_dtype_accum", "--plan --software framework --states-dtype bf16 --runs " PI "/sd_acc.csv",
      "(row 1: grad_accum_pass cast_add: fp32 buffers for an fp32 master, not states_dtype bf16", 1},
     PI_RUNS("sd_acc", ",grad_accum_pass", "3", "16", ",cast_add"), NULL},
    {{"plan_runs_grad_sync_zero1", "--plan --software framework --runs " PI "/gs_z1.csv",
      "(row 1: grad_sync last_micro_batch: FSDP's sharded gradients (zero 2 or 3); at zero 1 the gradients are "
      "reduced once a step already)", 1},
     PI_RUNS("gs_z1", ",grad_sync", "1", "16", ",last_micro_batch"), NULL},
    {{"plan_runs_grad_sync_deepspeed", "--plan --software deepspeed2021 --runs " PI "/gs_ds.csv",
      "(row 1: grad_sync last_micro_batch: PyTorch FSDP's set_requires_gradient_sync", 1},
     PI_RUNS("gs_ds", ",grad_sync", "3", "16", ",last_micro_batch"), NULL},
    {{"plan_runs_grad_sync_junk", "--plan --software framework --runs " PI "/gs_junk.csv",
      "(row 1: grad_sync: expected per_micro_batch or last_micro_batch, got 'Last_micro_batch')", 1},
     PI_RUNS("gs_junk", ",grad_sync", "3", "16", ",Last_micro_batch"), NULL},
    {{"plan_runs_fsdp_version_zero1", "--plan --software framework --runs " PI "/fv_z1.csv",
      "(row 1: fsdp_version 2: how ZeRO-3 layouts gather their weights, not with zero 1)", 1},
     PI_RUNS("fv_z1", ",fsdp_version", "1", "16", ",2"), NULL},
    {{"plan_runs_fsdp_version_scaling", "--plan --software scaling --runs " PI "/fv_scal.csv",
      "(row 1: fsdp_version 2: PyTorch FSDP's ZeRO-3, a framework's (--software framework, foundry or megatron))", 1},
     PI_RUNS("fv_scal", ",fsdp_version", "3", "16", ",2"), NULL},
    {{"plan_runs_fsdp_version_junk", "--plan --software framework --runs " PI "/fv_junk.csv",
      "(row 1: fsdp_version: expected 1 or 2, got '2.0')", 1},
     PI_RUNS("fv_junk", ",fsdp_version", "3", "16", ",2.0"), NULL},
    {{"plan_runs_loss_wrong_case", "--plan --software framework --runs " PI "/loss_case.csv",
      "(row 1: loss: expected eager, fused or eager_bf16, got 'Fused')", 1},
     PI_RUNS("loss_case", ",loss", "3", "16", ",Fused"), NULL},
    {{"plan_runs_loss_scaling", "--plan --software scaling --runs " PI "/loss_scal.csv",
      "loss fused: a framework's cross-entropy (the Scaling codebase's is torch's)", 1},
     PI_RUNS("loss_scal", ",loss", "1", "16", ",fused"), NULL},
    // a column read twice: the last was taken (zero 3 predicted as zero 1, fsdp_version 1 as 2)
    {{"plan_runs_duplicate_required_column", "--plan --software framework --runs " PI "/dup_zero.csv",
      "the header names column 'zero' twice (columns 7 and 16)", 1}, PI_RUNS("dup_zero", ",zero", "3", "16", ",1"),
     NULL},
    {{"plan_runs_duplicate_optional_column", "--plan --software framework --runs " PI "/dup_fv.csv",
      "the header names column 'fsdp_version' twice", 1},
     PI_RUNS("dup_fv", ",fsdp_version,fsdp_version", "3", "16", ",1,2"), NULL},
    {{"plan_runs_pp_split_nanotron", "--plan --software nanotron --runs " PI "/ps_nano.csv",
      "pp_split ends: this software cuts its pipeline by compute cost", 1},
     PI_RUNS("ps_nano", ",pp_split", "1", "16", ",ends"), NULL},
    {{"plan_runs_dropout_nan", "--plan --software framework --runs " PI "/do_nan.csv",
      "dropout 'nan': expected a probability in [0, 1)", 1}, PI_RUNS("do_nan", ",dropout", "3", "16", ",nan"), NULL},
    {{"plan_runs_grad_dtype_wrong_case", "--plan --software framework --runs " PI "/gd_case.csv",
      "unknown grad_dtype 'FP32'", 1}, PI_RUNS("gd_case", ",grad_dtype", "3", "16", ",FP32"), NULL},
    {{"plan_runs_reduce_dtype_fp16", "--plan --software framework --runs " PI "/rd_fp16.csv",
      "unknown reduce_dtype 'fp16'", 1}, PI_RUNS("rd_fp16", ",reduce_dtype", "3", "16", ",fp16"), NULL},
    {{"plan_runs_cp_blank", "--plan --software framework --runs " PI "/cp_blank.csv",
      "column cp: expected an integer in [1, 65536], got ''", 1}, PI_RUNS("cp_blank", ",cp", "3", "16", ","), NULL},
    // --nccl-version and a row's nccl: a release outside the table read (2.8 .. 2.30), a blank, junk
    {{"plan_nccl_version_old", PI_PLAN "--nccl-version 2.7.8",
      "error: --nccl-version: expected a release 2.8 .. 2.30 (MAJOR.MINOR[.PATCH], e.g. 2.18.3), got '2.7.8'", 1},
     NULL, NULL},
    {{"plan_nccl_version_blank", PI_PLAN "--nccl-version ' 2.18'",
      "error: --nccl-version: expected a release 2.8 .. 2.30 (MAJOR.MINOR[.PATCH], e.g. 2.18.3), got ' 2.18'", 1},
     NULL, NULL},
    {{"plan_runs_nccl_junk", "--plan --software framework --runs " PI "/nccl_junk.csv",
      "error: --runs " PI "/nccl_junk.csv: none of the 1 runs could be evaluated (row 1: nccl: expected a release "
      "2.8 .. 2.30 (MAJOR.MINOR[.PATCH], e.g. 2.18.3), got '2.x')", 1},
     PI_RUNS("nccl_junk", ",nccl", "3", "16", ",2.x"), NULL},
    {{"plan_runs_with_tokens", "--plan --software framework --runs " PI "/ok.csv --tokens 1e9 --noise-scale 1e6",
      "--tokens chooses the global batch: not with", 1}, PI_RUNS("ok", "", "3", "16", ""), NULL},
};

// scripts/validate_planner.py --published: a row whose field count is not the header's is refused, one line naming
// it (its csv.DictReader padded a short row with None and put a long one's extras aside, silently: the committed
// dev/published_runs.csv had rows of 33-42 fields); every row of the committed file has the header's 48.
static void published_row_fields(void) {
    const char* name = "plan_published_row_fields";
    if (bad_filter && !strstr(name, bad_filter)) return;
    char out[256], cmd[1024];
    snprintf(out, sizeof(out), PI "/out_%s.txt", name);
    sh("printf 'sheet,model,loss\\nwhole,gpt2-124m,\\nshort,gpt2-124m\\n' > " PI "/short_row.csv");
    int rc = run_to_file("python3 scripts/validate_planner.py --published " PI "/short_row.csv", out);
    snprintf(cmd, sizeof(cmd), "grep -qxF \"error: " PI "/short_row.csv: line 3 (sheet 'short') has 2 fields, the "
             "header 3\" %s && test $(wc -l < %s) = 1", out, out);
    int refused = rc == 1 && sh("%s", cmd) == 0;
    int committed = sh("python3 -c \"import sys; sys.path.insert(0, 'scripts'); import validate_planner as v; "
                       "v.read_published('dev/published_runs.csv')\" > /dev/null 2>&1") == 0;
    check(refused && committed, name, "a 2-field row under a 3-field header: exit %d, %s; dev/published_runs.csv: %s",
          rc, refused ? "one line naming line 3" : "NOT the line expected (see output)",
          committed ? "every row as the header" : "REFUSED");
}

static void suite_plan_inputs(const char* bin) {
    sh("mkdir -p " PI);
    for (size_t i = 0; i < sizeof(PLAN_INPUT_RUNS) / sizeof(PLAN_INPUT_RUNS[0]); i++)
        bad_run(bin, &PLAN_INPUT_RUNS[i].k, PLAN_INPUT_RUNS[i].setup, PLAN_INPUT_RUNS[i].check);
    if (!strstr(bin, "asan")) published_row_fields();  // (the script, not the binary: once)
}

#undef PI_RUNS
#undef PI_PLAN
#undef PI
