#!/usr/bin/env bash
# dev/gpu_check.sh: the one script to run on a GPU machine, under 8 minutes on one H100/H200
# with the build. Stages, measurements first, each writing its results (and publishing them
# to $OUT) before the next starts, so a run stopped at its time limit returns what it did:
#   build     test_gpu, train_gpu, train_cpu, ckpt_compare (in parallel)
#   test_gpu  every kernel against the CPU (correctness; the kernel timings follow it)
#   sweep     test_gpu --att-sweep: every attention tile checked, then timed at
#             FlashAttention-2's published shapes (B*T 16k, hd 64/128, causal, T 1k-16k, GQA);
#             the fastest forward tile per head size into dev/attn_tiles.csv (--attn-tile auto)
#   sdpa      PyTorch's SDPA (FlashAttention-2 and cuDNN back-ends) at the same shapes
#             (dev/bench_torch.py; skipped in one line without PyTorch)
#   trainer   dev/bench_gpu.sh: gpt2-124m at micro-batch 32 x 1024, gpt2-1558m at the largest
#             that fits (tokens/s, TFLOP/s, MFU by PaLM's count and the causal one), and each
#             step's time per op family (--op-times: matmul, attention fwd/bwd, norms, loss,
#             optimizer, the rest, communication; CSV rows pass=trainer-op:FAMILY)
#   torch     a PyTorch GPT-2 124M step (torch.compile) at the same batch
#   gpu_vs_cpu  dev/check_gpu_vs_cpu.sh: train_gpu against train_cpu (already run on the
#             emulator in make test; before fsdp, so it cannot eat the correctness check's time)
#   fsdp      dev/fsdp_profile.py (issue 35, when time is left): a framework's GEMM rate at
#             MPT-7B's shape on this card, an all-gather's interference beside it (2+ GPUs),
#             one FSDP1 micro-batch's exposed communication (fsdp_profile.csv / .log)
#   ctas      (2+ GPUs) the all-gather's interference again under NCCL_MAX_CTAS 2 / 4 / 8: whether a hidden
#             collective's cost follows the SMs its channels hold (fsdp_ctas.csv / .log)
#   interfere (one GPU is enough) dev/interference_probe.py: bf16 GEMMs beside a copier of N = 2-32 CTAs (NCCL's
#             channels) at a NIC's, NVLink's and HBM's copy rates, normal and high stream priority: whether a
#             hidden collective's cost follows the SMs it holds or the bytes it moves (interference_probe.csv /
#             .txt / .log; DRY: its --dry-run)
# Outputs in dev/out: build.log, test_gpu.log, att_sweep.log, bench_torch.log, bench/, interference_probe.*,
# check_gpu_vs_cpu.log, gpu_check.csv (every timing: the sweep's, SDPA's and the steps' rows,
# device,pass,hd,B,T,H,KV,tile,ms,tflops_causal), summary.txt, and the lines to paste into
# dev/RESULTS.md (results.md). Everything but the timings has already run on the CUDA emulator.
#
#   dev/gpu_check.sh                 everything
#   SKIP_BENCH=1 dev/gpu_check.sh    build and correctness only
#   DRY=1 dev/gpu_check.sh           the plumbing on the CUDA emulator (no GPU: test_gpu_emu,
#                                    train_gpu_emu, tiny shapes, PyTorch on the CPU; the times
#                                    mean nothing), about 10 minutes on 2 cores
#   BUDGET=540 (seconds, the default) the whole run: each stage gets its own limit or what is
#                                    left of BUDGET, whichever is less (15 s kept for the results),
#                                    and a stage with under 20 s left is skipped with a line
#                                    saying so; on the card, call with timeout_s >= BUDGET + 20.
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
# stage NAME SECONDS: true when at least 20 s are left of BUDGET, with the stage's limit (SECONDS,
# or what is left less 15 s for the results if less) in LIMIT; else a line saying NAME is skipped.
stage() {
  local left=$(( BUDGET - $(elapsed) - 15 ))
  LIMIT=$(( left < $2 ? left : $2 ))
  [ "$LIMIT" -ge 20 ] && return 0
  note "$1: skipped, ${left}s left of the ${BUDGET}s budget"
  return 1
}
# results: dev/out/results.md from the CSV and the summary so far (at each publish, so a run
# stopped at its limit still has it). The forward and backward at each shape: the best of our
# tiles beside PyTorch's best back-end (ratio > 1: ours faster), and the lines for dev/RESULTS.md.
results() {
  awk -F, 'NR > 1 && $2 != "gpt2-step" && $2 !~ /^trainer-op:/ {
             key = $2 " hd=" $3 " B=" $4 " T=" $5 " H=" $6 " KV=" $7
             if ($8 ~ /^sdpa/) { if (!(key in th) || $9 < th[key]) { th[key] = $9; tn[key] = $8 } }
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
    echo "| attention (causal, FA2's FLOPs) | ours (best tile) | PyTorch SDPA (best back-end) | PyTorch / ours time |"
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
    # the one-GPU interference probe's summary (issue 35), when it ran
    [ -s "$OUTDIR/interference_probe.txt" ] && echo && echo "dev/interference_probe.py:" &&
      sed 's/^/    /' "$OUTDIR/interference_probe.txt"
  } > "$OUTDIR/results.md"
}
publish() {  # results.md from what there is so far, copied to $OUT (when set) with the logs
  results
  [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" != "$(cd "$OUTDIR" && pwd)" ] || return 0
  cp -f "$SUMMARY" "$CSV" "$OUTDIR"/results.md "$OUTDIR"/test_gpu.log "$OUTDIR"/check_gpu_vs_cpu.log \
    "$OUTDIR"/interference_probe.csv "$OUTDIR"/interference_probe.txt "$OUT"/ 2>/dev/null
  [ -z "$DRY" ] && cp -f dev/attn_tiles.csv "$OUT"/ 2>/dev/null  # what --attn-tile auto reads: commit it
  tar czf "$OUT/logs.tgz" --exclude='*.bin' -C "$OUTDIR" . 2>/dev/null
  return 0
}

note "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null)${DRY:+ (DRY: the CUDA emulator)}"
[ -z "$DRY" ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nvidia-smi > "$OUTDIR/nvidia-smi.txt" 2>&1

# PyTorch (the sdpa and torch stages) and Triton (torch.compile), said in one line each when missing
NO_TORCH=""
if ! python3 -c "import torch" >/dev/null 2>&1; then
  NO_TORCH=1
  note "torch: no PyTorch for python3 here: the sdpa and torch stages are skipped (pip install torch)"
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
# the four in parallel, each within the build's limit (a build cut off leaves no binary: rc 124)
stage build 300
export ARCH; export -f make 2>/dev/null  # the by-hand rules (when there is no make), for the timeouts' shells
for t in "${TEST_BIN#./}" "${TRAIN_BIN#./}" train_cpu ckpt_compare; do
  timeout "$LIMIT" bash -c 'make "$1"' _ "$t" > "$OUTDIR/build_$t.log" 2>&1 &
  PIDS+=($!)
done
wait "${PIDS[0]}"; RC_TB=$?
wait "${PIDS[1]}"; RC_TR=$?
wait "${PIDS[2]}" "${PIDS[3]}"
cat "$OUTDIR"/build_*.log > "$OUTDIR/build.log"
note "build: test_gpu rc=$RC_TB, train_gpu rc=$RC_TR ($(elapsed)s)"
[ $RC_TB -ne 0 ] || [ $RC_TR -ne 0 ] && tail -30 "$OUTDIR/build.log"
publish

# ---------------------------------------------------------------------------- kernel tests
RC_TEST=1
if [ $RC_TB -eq 0 ] && stage test_gpu 120; then
  timeout "$LIMIT" $TEST_BIN $([ -n "$DRY" ] && echo --no-bench) > "$OUTDIR/test_gpu.log" 2>&1
  RC_TEST=$?
  grep -E "^(FAIL|SKIP|bench|error)" "$OUTDIR/test_gpu.log" | tee -a "$SUMMARY"
  note "test_gpu: $(tail -1 "$OUTDIR/test_gpu.log") (rc=$RC_TEST, $(elapsed)s)"
  publish
fi

# ---------------------------------------------------------------------------- measurements
if [ $RC_TB -eq 0 ] && [ -z "${SKIP_BENCH:-}" ]; then
  # the attention sweep: every tile checked, then timed; rows into the CSV, the fastest tiles
  # into dev/attn_tiles.csv (what --attn-tile auto reads; commit it with the results)
  TILES=dev/attn_tiles.csv
  [ -n "$DRY" ] && TILES="$OUTDIR/attn_tiles.csv"
  stage sweep 150 &&
    timeout "$LIMIT" $TEST_BIN --att-sweep $SWEEP_FLAGS --csv "$OUTDIR/att_sweep.csv" --tiles "$TILES" \
      > "$OUTDIR/att_sweep.log" 2>&1
  rc=$?
  note "sweep: $(tail -1 "$OUTDIR/att_sweep.log") (rc=$rc, $(elapsed)s)"
  note "sweep: fastest forward tiles: $(tail -n +2 "$TILES" 2>/dev/null | tr '\n' ' ')"
  tail -n +2 "$OUTDIR/att_sweep.csv" >> "$CSV" 2>/dev/null
  publish
  # PyTorch's SDPA at the same shapes
  if [ -n "$NO_TORCH" ]; then :
  elif stage sdpa 90; then
    timeout "$LIMIT" python3 dev/bench_torch.py sdpa $TORCH_FLAGS --csv "$OUTDIR/torch_sdpa.csv" \
      > "$OUTDIR/bench_torch.log" 2>&1
    rc=$?
    note "sdpa: rc=$rc, $(grep -c '^sdpa \(forward\|backward\)' "$OUTDIR/bench_torch.log") timings ($(elapsed)s)"
    grep -m1 '^error' "$OUTDIR/bench_torch.log" | tee -a "$SUMMARY"
    tail -n +2 "$OUTDIR/torch_sdpa.csv" >> "$CSV" 2>/dev/null
    publish
  fi
fi
if [ $RC_TR -eq 0 ] && [ -x "$TRAIN_BIN" ] && [ -z "${SKIP_BENCH:-}" ]; then
  # the trainer's steps (dev/bench_gpu.sh: gpt2-124m b32, gpt2-1558m at the largest micro-batch that fits)
  echo | tee -a "$SUMMARY"
  if stage trainer 180; then
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
  if [ -z "$NO_TORCH" ] && stage torch 120; then
    timeout "$LIMIT" python3 dev/bench_torch.py gpt2 $TORCH_FLAGS $GPT2_FLAGS --csv "$OUTDIR/torch_gpt2.csv" \
      >> "$OUTDIR/bench_torch.log" 2>&1
    note "$(grep '^torch gpt2\|^error\|^note' "$OUTDIR/bench_torch.log" | tail -2 | tr '\n' ' ')($(elapsed)s)"
    tail -n +2 "$OUTDIR/torch_gpt2.csv" >> "$CSV" 2>/dev/null
    publish
  fi
fi

# ---------------------------------------------------------------------------- whole model vs CPU
# train_gpu against train_cpu on tiny models, 1 rank and tp/pp/sp/ZeRO layouts (--comm mpi).
RC_GVC=1
if [ $RC_TR -eq 0 ] && [ -x "$TRAIN_BIN" ] && stage gpu_vs_cpu 240; then
  OUT="$OUTDIR" GPU_BIN="$TRAIN_BIN" timeout "$LIMIT" dev/check_gpu_vs_cpu.sh > "$OUTDIR/check_gpu_vs_cpu.log" 2>&1
  RC_GVC=$?
  grep -E "^(FAIL|error)" "$OUTDIR/check_gpu_vs_cpu.log" | tee -a "$SUMMARY"
  note "gpu_vs_cpu: $(tail -1 "$OUTDIR/check_gpu_vs_cpu.log") (rc=$RC_GVC, $(elapsed)s)"
  publish
fi

# ---------------------------------------------------------------------------- FSDP's step (issue 35)
# dev/fsdp_profile.py on every visible GPU: a framework's GEMM rate at MPT-7B's shape on this card, the
# interference of an all-gather beside it (2+ GPUs), one FSDP1 micro-batch's exposed communication
if [ -z "$NO_TORCH" ] && [ -z "$DRY" ] && stage fsdp 150; then
  OUT="$OUTDIR" timeout "$LIMIT" python3 dev/fsdp_profile.py --mb 1,2,4 --out "$OUTDIR/fsdp_profile.csv" \
    > "$OUTDIR/fsdp_profile.log" 2>&1
  note "fsdp: rc=$?, $(grep -c . "$OUTDIR/fsdp_profile.csv" 2>/dev/null || echo 0) rows in fsdp_profile.csv ($(elapsed)s)"
  grep -E "^(error|step =)" "$OUTDIR/fsdp_profile.log" | tee -a "$SUMMARY"
  publish
fi

# ---------------------------------------------------------------------------- NCCL's channels (issue 35)
# The all-gather's interference at micro-batch 2 with NCCL limited to 2, 4 and 8 channels (one CTA each): a ring
# across nodes holds 2-16 where 8 GPUs of a node hold 24 (dev/PLANNER.md, "NCCL's interference"); the default's
# row is fsdp_profile.csv's. Each run ~30 s; one CSV row a limit.
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ -z "$NO_TORCH" ] && [ -z "$DRY" ] && [ "$GPUS" -ge 2 ] && stage ctas 120; then
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

# ---------------------------------------------------------------------------- one GPU's interference (issue 35)
# dev/interference_probe.py on one GPU: bf16 GEMMs (8192^3, LLaMA-7B's gate/up) beside a Triton copier of N CTAs
# (2-32, NCCL's channels) paced to 25 / 50 / 150 / 450 GB/s, unthrottled and holding its SMs without copying, at
# normal and high priority; the GEMMs' extra time per second of copier (dev/PLANNER.md, "A one-GPU probe of the
# readings"). It stops its sweep at --budget, keeping the rows so far; ~50-90 s on an H100 (estimated).
if { [ -n "$DRY" ] || [ -z "$NO_TORCH" ]; } && stage interfere 120; then
  rm -f "$OUTDIR"/interference_probe.*
  PROBE_FLAGS="--budget $(( LIMIT - 10 ))"
  [ -n "$DRY" ] && PROBE_FLAGS="--dry-run"
  timeout "$LIMIT" python3 dev/interference_probe.py $PROBE_FLAGS --out "$OUTDIR/interference_probe.csv" \
    > "$OUTDIR/interference_probe.log" 2>&1
  rc=$?
  note "interfere: rc=$rc, $(tail -n +2 "$OUTDIR/interference_probe.csv" 2>/dev/null | grep -c .) rows in" \
       "interference_probe.csv ($(elapsed)s)"
  grep -E "^(error|budget)" "$OUTDIR/interference_probe.log" | tee -a "$SUMMARY"
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
