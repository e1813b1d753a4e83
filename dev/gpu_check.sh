#!/usr/bin/env bash
# dev/gpu_check.sh: the one script to run on a GPU machine. Builds train_gpu and test_gpu,
# runs the kernel tests (and their kernel timings), then (if train_gpu built) the whole-model
# GPU vs CPU check (dev/check_gpu_vs_cpu.sh) and the benchmark (dev/bench_gpu.sh), and
# prints tables. Designed to finish in under 8 minutes on one H200. Logs go to dev/out:
# build.log, test_gpu.log, check_gpu_vs_cpu.log (+ gpu_vs_cpu/), bench/, summary.txt; where
# $OUT is set (the lent GPU machine, which returns at most 8 files from it), summary.txt,
# test_gpu.log, check_gpu_vs_cpu.log and logs.tgz (every log, no checkpoints) are copied
# there after each stage, so a run stopped at its time limit still returns what it did.
# Everything but the timings has already run on the CUDA emulator in make test.
#
#   dev/gpu_check.sh            everything
#   SKIP_BENCH=1 dev/gpu_check.sh   build and kernel tests only
set -u
cd "$(dirname "$0")/.."
OUTDIR=dev/out
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
publish() {  # copy what there is so far to $OUT (when set)
  [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" != "$(cd "$OUTDIR" && pwd)" ] || return 0
  cp -f "$SUMMARY" "$OUTDIR"/test_gpu.log "$OUTDIR"/check_gpu_vs_cpu.log "$OUT"/ 2>/dev/null
  tar czf "$OUT/logs.tgz" --exclude='*.bin' -C "$OUTDIR" . 2>/dev/null
  return 0
}

note "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nvidia-smi > "$OUTDIR/nvidia-smi.txt" 2>&1

# ---------------------------------------------------------------------------- build
# Open MPI where this machine has it; else the one-process stand-in nompi/mpi.h (MPI=none,
# for every make below, those of check_gpu_vs_cpu.sh too): then the multi-rank layouts of
# the GPU vs CPU check are skipped.
if ! command -v mpicc >/dev/null 2>&1; then
  export MAKEFLAGS="${MAKEFLAGS:-} MPI=none"
  note "build: no Open MPI here: MPI=none (one rank per run)"
fi
# No make on the machine: the Makefile's three rules this script needs, by hand.
if ! command -v make >/dev/null 2>&1; then
  note "build: no make here: building with nvcc and gcc directly"
  make() {
    local mpi_c="-Inompi" mpi_l="" cuda
    command -v mpicc >/dev/null 2>&1 && mpi_c="$(mpicc --showme:compile)" && mpi_l="$(mpicc --showme:link)"
    cuda=$(dirname "$(dirname "$(command -v nvcc)")")
    local nv="nvcc -O3 -std=c++17 -DOMPI_SKIP_MPICXX=1 -gencode arch=compute_90,code=[sm_90,compute_90] -Xcompiler -fopenmp,-Wno-unused-function -I$cuda/include -I."
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
make test_gpu >> "$OUTDIR/build.log" 2>&1 & P1=$!
make train_gpu >> "$OUTDIR/build.log" 2>&1 & P2=$!
make train_cpu >> "$OUTDIR/build.log" 2>&1 & P3=$!
make ckpt_compare >> "$OUTDIR/build.log" 2>&1 & P4=$!
wait $P1; RC_TB=$?
wait $P2; RC_TR=$?
wait $P3
wait $P4
note "build: test_gpu rc=$RC_TB, train_gpu rc=$RC_TR ($(elapsed)s)"
[ $RC_TB -ne 0 ] || [ $RC_TR -ne 0 ] && tail -30 "$OUTDIR/build.log"
publish

# ---------------------------------------------------------------------------- kernel tests
RC_TEST=1
if [ $RC_TB -eq 0 ]; then
  timeout 180 ./test_gpu > "$OUTDIR/test_gpu.log" 2>&1
  RC_TEST=$?
  grep -E "^(FAIL|SKIP|bench|error)" "$OUTDIR/test_gpu.log" | tee -a "$SUMMARY"
  note "test_gpu: $(tail -1 "$OUTDIR/test_gpu.log") (rc=$RC_TEST, $(elapsed)s)"
  publish
fi

# ---------------------------------------------------------------------------- whole model vs CPU
# train_gpu against train_cpu on tiny models, 1 rank and tp/pp/sp/ZeRO layouts (--comm mpi).
RC_GVC=1
if [ $RC_TR -eq 0 ] && [ -x ./train_gpu ]; then
  OUT="$OUTDIR" timeout 300 dev/check_gpu_vs_cpu.sh > "$OUTDIR/check_gpu_vs_cpu.log" 2>&1
  RC_GVC=$?
  grep -E "^(FAIL|error)" "$OUTDIR/check_gpu_vs_cpu.log" | tee -a "$SUMMARY"
  note "gpu_vs_cpu: $(tail -1 "$OUTDIR/check_gpu_vs_cpu.log") (rc=$RC_GVC, $(elapsed)s)"
  publish
fi

# ---------------------------------------------------------------------------- benchmarks
# dev/bench_gpu.sh: gpt2-124m at micro-batch 32 x 1024, gpt2-1558m at the largest that fits.
if [ $RC_TR -eq 0 ] && [ -x ./train_gpu ] && [ -z "${SKIP_BENCH:-}" ]; then
  echo | tee -a "$SUMMARY"
  OUT="$OUTDIR" timeout 360 dev/bench_gpu.sh 2>&1 | tee -a "$SUMMARY"
  note "bench: ($(elapsed)s)"
  publish
fi

# ---------------------------------------------------------------------------- test counts
counts() {  # counts LOG: "passed failed" from its last "N passed, N failed[, N skipped]" line, "- -" if none
  local line
  line=$(grep -E "^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$" "$1" 2>/dev/null | tail -1)
  [ -n "$line" ] && echo "$line" | awk '{print $1, $3 + 0}' || echo "- -"
}
printf "\n%-12s %7s %7s\n" "tests" "passed" "failed" | tee -a "$SUMMARY"
read -r p1 f1 <<< "$(counts "$OUTDIR/test_gpu.log")"
read -r p2 f2 <<< "$(counts "$OUTDIR/check_gpu_vs_cpu.log")"
printf "%-12s %7s %7s\n" "test_gpu" "$p1" "$f1" | tee -a "$SUMMARY"
printf "%-12s %7s %7s\n" "gpu_vs_cpu" "$p2" "$f2" | tee -a "$SUMMARY"

note "total $(elapsed)s; logs in $OUTDIR"
publish
[ $RC_TB -eq 0 ] && [ $RC_TEST -eq 0 ] && [ $RC_TR -eq 0 ] && [ $RC_GVC -eq 0 ]
