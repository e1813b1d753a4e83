#!/usr/bin/env bash
# dev/gpu_check.sh: the one script to run on a GPU machine, inside BUDGET (540 s) on one H100/H200 with the
# build. Each stage writes its results (and publishes them to $OUT) before the next starts, so a run stopped at
# its time limit returns what it did. In this order:
#   build + probes   the build (test_gpu, train_gpu, train_cpu, ckpt_compare in parallel) on the CPUs while the
#             GPU runs issue 35's three PyTorch probes, which need no build, one after the other:
#     gemm       dev/fsdp_profile.py --gemm-only: MPT-7B's layer GEMMs at micro-batch 1, 2, 4 x 2048 tokens, then
#                8192^3 for 15 s beside nvidia-smi's SM clock and power (fsdp_gemm.csv; feeds matmul_eff)
#     attention  dev/bench_torch.py sdpa: cuDNN's (SDPA's back-end forced alone), FlashAttention-2's and, when
#                flash_attn_interface imports, FlashAttention-3's fused attention, forward and backward, causal and
#                not, 1k-16k tokens, head dim 128, 192, then 64 and grouped-query heads (torch_sdpa.csv; feeds
#                device.h fused_fwd / fused_bwd and attn_eff_flash3)
#     interfere  dev/interference_probe.py: bf16 GEMMs beside a copier of N = 2-32 CTAs (NCCL's channels) at a
#                NIC's, NVLink's and HBM's copy rates, normal and high stream priority (interference_probe.csv /
#                .txt; feeds comm_interference_nccl)
#             Each probe ends in "summary" lines (in summary.txt and results.md; dev/PLANNER.md, "What the lent
#             GPU's probes feed", says which constant each feeds and how). The CPU load of the build can delay
#             the host's launches (Python, the driver's submissions) and nvidia-smi's samples; it cannot change a
#             kernel's time once queued (these kernels are GPU-bound: HBM, tensor cores, no host memory). So each
#             probe queues its timed kernels behind a sleep kernel and times them with CUDA events between
#             back-to-back kernels; if the GPU reached the first event before the last launch, it sleeps longer
#             and runs again. What the load still reaches: the order of kernels across the interference probe's
#             two streams is the GPU's, not the host's, so nothing; the card's heat and clocks carry from one
#             probe to the next (the gemm probe samples them).
#   test_gpu   every kernel against the CPU (correctness; the kernel timings follow it)
#   gpu_vs_cpu dev/check_gpu_vs_cpu.sh: train_gpu against train_cpu (already run on the emulator in make test)
#   then the remaining timings, with what is left:
#   sweep     test_gpu --att-sweep: every attention tile checked, then timed at FlashAttention-2's published
#             shapes (B*T 16k, hd 64/128, causal, T 1k-16k, GQA); the fastest forward tile per head size into
#             dev/attn_tiles.csv (--attn-tile auto); results.md sets them beside the attention probe's rows
#   trainer   dev/bench_gpu.sh: gpt2-124m at micro-batch 32 x 1024, gpt2-1558m at the largest that fits
#             (tokens/s, TFLOP/s, MFU by PaLM's count and the causal one), and each step's time per op family
#             (--op-times; CSV rows pass=trainer-op:FAMILY)
#   torch     a PyTorch GPT-2 124M step (torch.compile) at the same batch
#   fsdp      dev/fsdp_profile.py: one FSDP1 micro-batch's breakdown, and with 2+ GPUs the all-gather's
#             interference beside the GEMMs and the exposed communication (fsdp_profile.csv / .log)
#   ctas      (2+ GPUs) the all-gather's interference again under NCCL_MAX_CTAS 2 / 4 / 8 (fsdp_ctas.csv / .log)
# Outputs in dev/out: build.log, fsdp_gemm.*, bench_torch.log, torch_sdpa.csv, interference_probe.*,
# test_gpu.log, check_gpu_vs_cpu.log, att_sweep.log, bench/, gpu_check.csv (every timing: the sweep's, the
# attention probe's and the steps' rows, device,pass,hd,B,T,H,KV,tile,ms,tflops_causal), summary.txt, and the
# lines to paste into dev/RESULTS.md (results.md). Everything but the timings has already run on the emulator.
#
#   dev/gpu_check.sh                 everything
#   SKIP_BENCH=1 dev/gpu_check.sh    build and correctness only (no probes, no timings)
#   DRY=1 dev/gpu_check.sh           the plumbing on the CUDA emulator (no GPU: test_gpu_emu, train_gpu_emu,
#                                    tiny shapes, the probes' --dry-run / --dry on the CPU; the times mean
#                                    nothing); BUDGET 1800 by default, about 5-7 minutes on 2 shared cores
#   BUDGET=540 (seconds, the default) the whole run. The plan of limits, printed first, adds up inside it: the
#                                    build's 300 s (the probes' 45 + 120 + 120 inside them, on the GPU), test_gpu
#                                    90, gpu_vs_cpu 120, 15 for the results; the remaining timings get what those
#                                    leave (their own limits: sweep 150, trainer 180, torch 120, fsdp 150, ctas
#                                    120). Each stage's limit is its own or what is left of BUDGET less 15 s,
#                                    whichever is less; a stage with under 20 s left is skipped with a line. On the
#                                    card, call with timeout_s >= BUDGET + 20.
set -u
cd "$(dirname "$0")/.."
OUTDIR=dev/out
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
BUDGET=${BUDGET:-$([ -n "${DRY:-}" ] && echo 1800 || echo 540)}  # DRY: the emulator on 2 cores is slow
SUMMARY="$OUTDIR/summary.txt" CSV="$OUTDIR/gpu_check.csv"
: > "$SUMMARY"
echo "device,pass,hd,B,T,H,KV,tile,ms,tflops_causal" > "$CSV"
DRY=${DRY:-}
TEST_BIN=./test_gpu TRAIN_BIN=./train_gpu SWEEP_FLAGS="" TORCH_FLAGS="" GPT2_FLAGS=""
if [ -n "$DRY" ]; then  # the plumbing on the emulator: its binaries, tiny shapes
  TEST_BIN=./test_gpu_emu TRAIN_BIN=./train_gpu_emu SWEEP_FLAGS="--dry" TORCH_FLAGS="--dry" GPT2_FLAGS="--no-compile"
  export BENCH_QUICK=1 EMU_DEVICE_MIB=150 GPU_BIN=./train_gpu_emu CASES_MATCH=${CASES_MATCH:-'^gpu_gpt2$'}
fi
note() { echo "$*" | tee -a "$SUMMARY"; }
# The plan of limits (s): the build, with the probes on the GPU beside it (their sum inside its limit), the
# correctness stages, the results; the remaining timings share what those leave.
S_BUILD=300 S_GEMM=45 S_ATTENTION=120 S_INTERFERE=120 S_TEST=90 S_GVC=120 S_RESULTS=15
S_SWEEP=150 S_TRAINER=180 S_TORCH=120 S_FSDP=150 S_CTAS=120
[ -n "$DRY" ] && S_BUILD=900 S_TEST=240 S_GVC=400  # the emulator on 2 shared cores (BUDGET 1800)
# stage NAME SECONDS [END]: true when at least 20 s are left of BUDGET, with the stage's limit in LIMIT: SECONDS,
# or what is left less 15 s for the results, or what is left before END (seconds from the start), the least;
# else a line saying NAME is skipped.
stage() {
  local left=$(( BUDGET - $(elapsed) - S_RESULTS ))
  [ -n "${3:-}" ] && [ $(( $3 - $(elapsed) )) -lt "$left" ] && left=$(( $3 - $(elapsed) ))
  LIMIT=$(( left < $2 ? left : $2 ))
  [ "$LIMIT" -ge 20 ] && return 0
  note "$1: skipped, ${left}s left of its budget (BUDGET ${BUDGET}s)"
  return 1
}
# results: dev/out/results.md from the CSV and the summary so far (at each publish, so a run
# stopped at its limit still has it). The forward and backward at each shape: the best of our
# tiles beside PyTorch's best back-end (ratio > 1: ours faster), and the lines for dev/RESULTS.md.
results() {
  awk -F, 'NR > 1 && $2 != "gpt2-step" && $2 !~ /^trainer-op:/ {
             key = $2 " hd=" $3 " B=" $4 " T=" $5 " H=" $6 " KV=" $7
             if ($8 ~ /^(sdpa|fa3)/) { if (!(key in th) || $9 < th[key]) { th[key] = $9; tn[key] = $8 } }
             else if (!(key in us) || $9 < us[key]) { us[key] = $9; un[key] = $8; tf[key] = $10 } }
           END { for (k in us) {
                   torch = k in th ? sprintf("%s %.3f ms", tn[k], th[k]) : "-"
                   ratio = k in th ? sprintf("%.2f", th[k] / us[k]) : "-"
                   printf "| %s | %s %.3f ms, %.1f TFLOP/s | %s | %s |\n", k, un[k], us[k], tf[k], torch, ratio } }' \
    "$CSV" | sort -t'|' -k2,2 -V > "$OUTDIR/att_vs_torch.md"
  CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  {
    echo "### gpu_check $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null), ${CARD:-no GPU}"\
         "${DRY:+(DRY: the emulator, times meaningless)}"
    echo
    echo "| attention (causal, FA2's FLOPs) | ours (best tile) | SDPA / FA3 (best back-end) | theirs / ours time |"
    echo "|---|---|---|---|"
    cat "$OUTDIR/att_vs_torch.md"
    echo
    grep -E "^(gpt2|model|torch gpt2)" "$SUMMARY" | sed 's/^/    /'
    echo
    # the trainer's step by op family (--op-times), ms per step and the share of the step
    echo "| trainer step (ms, share) | matmul | attention fwd | attention bwd | norm | loss | optimizer | rest |"\
         "step | communication |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    tail -n +2 "$OUTDIR/bench/op_times.csv" 2>/dev/null |
      awk -F, '{ k = $1 " mb " $2 " x " $3; if (!(k in seen)) { seen[k] = 1; order[n++] = k } ms[k, $4] = $5 }
               END { split("matmul attention_fwd attention_bwd norm loss optimizer rest", f, " ")
                     for (i = 0; i < n; i++) { k = order[i]; st = ms[k, "step"]; line = "| " k
                       for (j = 1; j <= 7; j++)
                         line = line sprintf(" | %.2f (%.0f%%)", ms[k, f[j]], st > 0 ? 100 * ms[k, f[j]] / st : 0)
                       print line sprintf(" | %.2f | %.2f |", st, ms[k, "communication"]) } }'
    # the probes' lines for the planner (issue 35; dev/PLANNER.md, "What the lent GPU's probes feed"), then the
    # interference probe's whole summary, when they ran
    echo
    grep -h "^summary" "$OUTDIR"/fsdp_gemm.log "$OUTDIR"/bench_torch.log "$OUTDIR"/interference_probe.log \
      2>/dev/null | sed 's/^/    /' | { grep . && echo; }
    [ -s "$OUTDIR/interference_probe.txt" ] && echo "dev/interference_probe.py:" &&
      grep -v "^summary" "$OUTDIR/interference_probe.txt" | sed 's/^/    /'
  } > "$OUTDIR/results.md"
}
publish() {  # results.md from what there is so far, copied to $OUT (when set) with the logs
  results
  [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" != "$(cd "$OUTDIR" && pwd)" ] || return 0
  # at most 8 files come back from the device tool: every other file is in logs.tgz
  cp -f "$SUMMARY" "$CSV" "$OUTDIR"/results.md "$OUTDIR"/test_gpu.log "$OUTDIR"/check_gpu_vs_cpu.log "$OUT"/ \
    2>/dev/null
  [ -z "$DRY" ] && cp -f dev/attn_tiles.csv "$OUT"/ 2>/dev/null  # what --attn-tile auto reads: commit it
  tar czf "$OUT/logs.tgz" --exclude='*.bin' -C "$OUTDIR" . 2>/dev/null
  return 0
}

note "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null)${DRY:+ (DRY: the CUDA emulator)}"
[ -z "$DRY" ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nvidia-smi > "$OUTDIR/nvidia-smi.txt" 2>&1
note "plan of limits (s), BUDGET $BUDGET: build $S_BUILD on the CPUs, beside it on the GPU gemm $S_GEMM +" \
     "attention $S_ATTENTION + interfere $S_INTERFERE; then test_gpu $S_TEST, gpu_vs_cpu $S_GVC, results" \
     "$S_RESULTS (= $(( S_BUILD + S_TEST + S_GVC + S_RESULTS ))); what is left to sweep $S_SWEEP, trainer" \
     "$S_TRAINER, torch $S_TORCH, fsdp $S_FSDP, ctas $S_CTAS (2+ GPUs), each as far as it goes"
(( S_GEMM + S_ATTENTION + S_INTERFERE <= S_BUILD && S_BUILD + S_TEST + S_GVC + S_RESULTS <= BUDGET )) ||
  note "plan: the limits add up to more than BUDGET $BUDGET: the last stages get what is left"

# PyTorch (the probes and the torch stage) and Triton (torch.compile), said in one line each when missing
NO_TORCH=""
if ! python3 -c "import torch" >/dev/null 2>&1; then
  NO_TORCH=1
  note "torch: no PyTorch for python3 here: the probes and the torch stage are skipped (pip install torch)"
elif [ -z "$DRY" ] && ! python3 -c "import triton" >/dev/null 2>&1; then
  note "torch: no Triton here: the PyTorch GPT-2 step runs eager (no torch.compile)"
  GPT2_FLAGS="--no-compile"
fi

# ---------------------------------------------------------------------------- build
# Open MPI where this machine has it; else the one-process stand-in nompi/mpi.h (MPI=none,
# for every make below, those of check_gpu_vs_cpu.sh too): then the multi-rank layouts of
# the GPU vs CPU check are skipped.
if ! command -v mpicc >/dev/null 2>&1; then
  export MAKEFLAGS="${MAKEFLAGS:-} MPI=none"
  note "build: no Open MPI here: MPI=none (one rank per run)"
fi
# Machine code for this card only (its compute capability: 90 on an H100/H200), not the
# Makefile's fat default (80 and 90: twice the compile time).
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
case "$ARCH" in 80|86|87|89|90|100|120) ;; *) ARCH=90 ;; esac
[ -z "$DRY" ] && export MAKEFLAGS="${MAKEFLAGS:-} CUDA_ARCH=$ARCH" && note "build: CUDA_ARCH=$ARCH (this card's)"
# No make on the machine: the Makefile's three rules this script needs, by hand.
if ! command -v make >/dev/null 2>&1; then
  note "build: no make here: building with nvcc and gcc directly"
  make() {
    local mpi_c="-Inompi" mpi_l="" cuda
    command -v mpicc >/dev/null 2>&1 && mpi_c="$(mpicc --showme:compile)" && mpi_l="$(mpicc --showme:link)"
    cuda=$(dirname "$(dirname "$(command -v nvcc)")")
    local nv="nvcc -O3 -std=c++17 -DOMPI_SKIP_MPICXX=1 -gencode arch=compute_$ARCH,code=[sm_$ARCH,compute_$ARCH]"
    nv="$nv -Xcompiler -fopenmp,-Wno-unused-function -I$cuda/include -I."
    case "$1" in
      test_gpu) $nv $mpi_c -o test_gpu tests/test_gpu.cu -L"$cuda/lib64" -lcublasLt -lcublas $(dev/find_nccl.sh "$cuda") -lm $mpi_l ;;
      train_gpu) $nv $mpi_c -o train_gpu train_gpt.cu -L"$cuda/lib64" -lcublasLt -lcublas $(dev/find_nccl.sh "$cuda") -lm $mpi_l ;;
      train_cpu) gcc -O3 -march=native -fopenmp -std=gnu11 $mpi_c -I. -o train_cpu train_gpt.c $mpi_l -lm ;;
      ckpt_compare) gcc -O3 -march=native -fopenmp -std=gnu11 -I. $mpi_c -o ckpt_compare dev/ckpt_compare.c $mpi_l -lm ;;
      *) echo "gpu_check: no make, and no rule here for $1"; return 1 ;;
    esac
  }
fi
: > "$OUTDIR/build.log"
# the four in parallel, each within the build's limit (a build cut off leaves no binary: rc 124), in the
# background while the probes below hold the GPU
stage build "$S_BUILD"
BUILD_END=$(( $(elapsed) + LIMIT ))  # the probes end by then too: the plan's limits add up
export ARCH; export -f make 2>/dev/null  # the by-hand rules (when there is no make), for the timeouts' shells
for t in "${TEST_BIN#./}" "${TRAIN_BIN#./}" train_cpu ckpt_compare; do
  timeout "$LIMIT" bash -c 'make "$1"' _ "$t" > "$OUTDIR/build_$t.log" 2>&1 &
  PIDS+=($!)
done

# ---------------------------------------------------------------------------- probes (issue 35), during the build
# probe NAME SECONDS LOG COMMAND...: COMMAND within the stage's limit (and the build's end), its output in LOG,
# its "summary" lines and first error into summary.txt, then published.
probe() {
  local name=$1 seconds=$2 log=$3
  shift 3
  stage "$name" "$seconds" "$BUILD_END" || return 0
  timeout "$LIMIT" "$@" > "$log" 2>&1
  local rc=$?
  grep -E "^(summary|note)" "$log" | tee -a "$SUMMARY"
  grep -m1 -E "^(error|budget|Traceback)" "$log" | tee -a "$SUMMARY"
  note "$name: rc=$rc ($(elapsed)s)"
  publish
}
if [ -n "${SKIP_BENCH:-}" ]; then :
elif [ -n "$NO_TORCH" ]; then note "probes: skipped, no PyTorch"
else
  GEMM_FLAGS="--clock-s 15" PROBE_FLAGS=""
  [ -n "$DRY" ] && GEMM_FLAGS="--clock-s 2 --dry-run" PROBE_FLAGS="--dry-run"
  probe gemm "$S_GEMM" "$OUTDIR/fsdp_gemm.log" \
    python3 dev/fsdp_profile.py --gemm-only --mb 1,2,4 $GEMM_FLAGS --out "$OUTDIR/fsdp_gemm.csv"
  probe attention "$S_ATTENTION" "$OUTDIR/bench_torch.log" \
    python3 dev/bench_torch.py sdpa $TORCH_FLAGS --csv "$OUTDIR/torch_sdpa.csv"
  tail -n +2 "$OUTDIR/torch_sdpa.csv" >> "$CSV" 2>/dev/null
  # the probe stops its sweep itself 10 s before the limit, keeping its rows and writing its summary
  if stage interfere "$S_INTERFERE" "$BUILD_END"; then
    [ -z "$DRY" ] && PROBE_FLAGS="--budget $(( LIMIT - 10 ))"
    probe interfere "$LIMIT" "$OUTDIR/interference_probe.log" \
      python3 dev/interference_probe.py $PROBE_FLAGS --out "$OUTDIR/interference_probe.csv"
  fi
fi

wait "${PIDS[0]}"; RC_TB=$?
wait "${PIDS[1]}"; RC_TR=$?
wait "${PIDS[2]}" "${PIDS[3]}"
cat "$OUTDIR"/build_*.log > "$OUTDIR/build.log"
note "build: test_gpu rc=$RC_TB, train_gpu rc=$RC_TR ($(elapsed)s)"
[ $RC_TB -ne 0 ] || [ $RC_TR -ne 0 ] && tail -30 "$OUTDIR/build.log"
publish

# ---------------------------------------------------------------------------- correctness
RC_TEST=1
if [ $RC_TB -eq 0 ] && stage test_gpu "$S_TEST"; then
  timeout "$LIMIT" $TEST_BIN $([ -n "$DRY" ] && echo --no-bench) > "$OUTDIR/test_gpu.log" 2>&1
  RC_TEST=$?
  grep -E "^(FAIL|SKIP|bench|error)" "$OUTDIR/test_gpu.log" | tee -a "$SUMMARY"
  note "test_gpu: $(tail -1 "$OUTDIR/test_gpu.log") (rc=$RC_TEST, $(elapsed)s)"
  publish
fi
# train_gpu against train_cpu on tiny models, 1 rank and tp/pp/sp/ZeRO layouts (--comm mpi).
RC_GVC=1
if [ $RC_TR -eq 0 ] && [ -x "$TRAIN_BIN" ] && stage gpu_vs_cpu "$S_GVC"; then
  OUT="$OUTDIR" GPU_BIN="$TRAIN_BIN" timeout "$LIMIT" dev/check_gpu_vs_cpu.sh > "$OUTDIR/check_gpu_vs_cpu.log" 2>&1
  RC_GVC=$?
  grep -E "^(FAIL|error)" "$OUTDIR/check_gpu_vs_cpu.log" | tee -a "$SUMMARY"
  note "gpu_vs_cpu: $(tail -1 "$OUTDIR/check_gpu_vs_cpu.log") (rc=$RC_GVC, $(elapsed)s)"
  publish
fi

# ---------------------------------------------------------------------------- the remaining timings
if [ $RC_TB -eq 0 ] && [ -z "${SKIP_BENCH:-}" ]; then
  # the attention sweep: every tile checked, then timed; rows into the CSV, the fastest tiles
  # into dev/attn_tiles.csv (what --attn-tile auto reads; commit it with the results)
  TILES=dev/attn_tiles.csv
  [ -n "$DRY" ] && TILES="$OUTDIR/attn_tiles.csv"
  if stage sweep "$S_SWEEP"; then
    timeout "$LIMIT" $TEST_BIN --att-sweep $SWEEP_FLAGS --csv "$OUTDIR/att_sweep.csv" --tiles "$TILES" \
      > "$OUTDIR/att_sweep.log" 2>&1
    rc=$?
    note "sweep: $(tail -1 "$OUTDIR/att_sweep.log") (rc=$rc, $(elapsed)s)"
    note "sweep: fastest forward tiles: $(tail -n +2 "$TILES" 2>/dev/null | tr '\n' ' ')"
    tail -n +2 "$OUTDIR/att_sweep.csv" >> "$CSV" 2>/dev/null
    publish
  fi
fi
if [ $RC_TR -eq 0 ] && [ -x "$TRAIN_BIN" ] && [ -z "${SKIP_BENCH:-}" ]; then
  # the trainer's steps (dev/bench_gpu.sh: gpt2-124m b32, gpt2-1558m at the largest micro-batch that fits)
  echo | tee -a "$SUMMARY"
  if stage trainer "$S_TRAINER"; then
    OUT="$OUTDIR" TRAIN_BIN="$TRAIN_BIN" timeout "$LIMIT" dev/bench_gpu.sh 2>&1 | tee -a "$SUMMARY"
    # the per-op breakdown of those steps (--op-times): CSV rows pass=trainer-op:FAMILY, tile=model
    DEVICE=$([ -n "$DRY" ] && echo emulator || nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    tail -n +2 "$OUTDIR/bench/op_times.csv" 2>/dev/null |
      awk -F, -v dev="${DEVICE:-gpu}" '{ printf "%s,trainer-op:%s,-,%s,%s,-,-,%s,%s,-\n", dev, $4, $2, $3, $1, $5 }' \
      >> "$CSV"
    note "trainer: $(grep -c trainer-op "$CSV") op-family times ($(elapsed)s)"
    publish
  fi
  # the PyTorch GPT-2 124M step at the same batch
  if [ -z "$NO_TORCH" ] && stage torch "$S_TORCH"; then
    timeout "$LIMIT" python3 dev/bench_torch.py gpt2 $TORCH_FLAGS $GPT2_FLAGS --csv "$OUTDIR/torch_gpt2.csv" \
      >> "$OUTDIR/bench_torch.log" 2>&1
    note "$(grep '^torch gpt2\|^error\|^note: torch.compile' "$OUTDIR/bench_torch.log" | tail -2 | tr '\n' ' ')"\
         "($(elapsed)s)"
    tail -n +2 "$OUTDIR/torch_gpt2.csv" >> "$CSV" 2>/dev/null
    publish
  fi
fi

# ---------------------------------------------------------------------------- FSDP's step (issue 35)
# dev/fsdp_profile.py on every visible GPU: one FSDP1 micro-batch's breakdown and, with 2+ GPUs, the interference
# of an all-gather beside the GEMMs and the exposed communication
if [ -z "$NO_TORCH" ] && [ -z "$DRY" ] && [ -z "${SKIP_BENCH:-}" ] && stage fsdp "$S_FSDP"; then
  OUT="$OUTDIR" timeout "$LIMIT" python3 dev/fsdp_profile.py --mb 1,2,4 --out "$OUTDIR/fsdp_profile.csv" \
    > "$OUTDIR/fsdp_profile.log" 2>&1
  rc=$?
  note "fsdp: rc=$rc, $(grep -c . "$OUTDIR/fsdp_profile.csv" 2>/dev/null || echo 0) rows in fsdp_profile.csv" \
       "($(elapsed)s)"
  grep -E "^(error|step =)" "$OUTDIR/fsdp_profile.log" | tee -a "$SUMMARY"
  publish
fi

# ---------------------------------------------------------------------------- NCCL's channels (issue 35)
# The all-gather's interference at micro-batch 2 with NCCL limited to 2, 4 and 8 channels (one CTA each): a ring
# across nodes holds 2-16 where 8 GPUs of a node hold 24 (dev/PLANNER.md, "NCCL's interference"); the default's
# row is fsdp_profile.csv's. Each run ~30 s; one CSV row a limit.
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ -z "$NO_TORCH" ] && [ -z "$DRY" ] && [ "$GPUS" -ge 2 ] && stage ctas "$S_CTAS"; then
  rm -f "$OUTDIR/fsdp_ctas.csv"
  END_CTAS=$(( $(elapsed) + LIMIT ))
  for n in 2 4 8; do
    left=$(( END_CTAS - $(elapsed) ))
    [ "$left" -ge 20 ] || break
    NCCL_MAX_CTAS=$n NCCL_MAX_NCHANNELS=$n timeout "$left" python3 dev/fsdp_profile.py --overlap-only --mb 2 \
      --out "$OUTDIR/fsdp_ctas_$n.csv" >> "$OUTDIR/fsdp_ctas.log" 2>&1
    [ -s "$OUTDIR/fsdp_ctas.csv" ] || head -1 "$OUTDIR/fsdp_ctas_$n.csv" > "$OUTDIR/fsdp_ctas.csv" 2>/dev/null
    tail -n +2 "$OUTDIR/fsdp_ctas_$n.csv" >> "$OUTDIR/fsdp_ctas.csv" 2>/dev/null
    rm -f "$OUTDIR/fsdp_ctas_$n.csv"
  done
  note "ctas: $(( $(grep -c . "$OUTDIR/fsdp_ctas.csv" 2>/dev/null || echo 1) - 1 )) rows in fsdp_ctas.csv ($(elapsed)s)"
  grep -E "^error" "$OUTDIR/fsdp_ctas.log" | tee -a "$SUMMARY"
  publish
fi

# ---------------------------------------------------------------------------- results
results
cat "$OUTDIR/results.md" >> "$SUMMARY"

# ---------------------------------------------------------------------------- test counts
counts() {  # counts LOG: "passed failed" from its last "N passed, N failed[, N skipped]" line, "- -" if none
  local line
  line=$(grep -E "^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$" "$1" 2>/dev/null | tail -1)
  [ -n "$line" ] && echo "$line" | awk '{print $1, $3 + 0}' || echo "- -"
}
printf "\n%-12s %7s %7s\n" "tests" "passed" "failed" | tee -a "$SUMMARY"
read -r p1 f1 <<< "$(counts "$OUTDIR/test_gpu.log")"
read -r p3 f3 <<< "$(counts "$OUTDIR/att_sweep.log")"
read -r p2 f2 <<< "$(counts "$OUTDIR/check_gpu_vs_cpu.log")"
printf "%-12s %7s %7s\n" "test_gpu" "$p1" "$f1" | tee -a "$SUMMARY"
printf "%-12s %7s %7s\n" "att_sweep" "$p3" "$f3" | tee -a "$SUMMARY"
printf "%-12s %7s %7s\n" "gpu_vs_cpu" "$p2" "$f2" | tee -a "$SUMMARY"

note "total $(elapsed)s; logs in $OUTDIR; results: $OUTDIR/results.md, $CSV"
publish
[ $RC_TB -eq 0 ] && [ $RC_TEST -eq 0 ] && [ $RC_TR -eq 0 ] && [ $RC_GVC -eq 0 ]
