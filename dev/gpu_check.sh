#!/usr/bin/env bash
# dev/gpu_check.sh: the one script to run on a GPU machine. Builds train_gpu and test_gpu,
# runs the kernel tests, then (if train_gpu built) the whole-model GPU vs CPU check
# (dev/check_gpu_vs_cpu.sh) and a few short training benchmarks, and prints tables.
# Designed to finish in under 8 minutes on one H200. Logs go to
# ${OUT:-dev/out}: build.log, test_gpu.log, check_gpu_vs_cpu.log (+ gpu_vs_cpu/), bench_*.log,
# summary.txt.
#
#   dev/gpu_check.sh            everything
#   SKIP_BENCH=1 dev/gpu_check.sh   build and kernel tests only
set -u
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-dev/out}
mkdir -p "$OUTDIR"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# Benchmarks: name|command. Each runs under `timeout 90`; skipped once 6 minutes are gone.
BENCHES=(
  "gpt2-124m b32|./train_gpu --model gpt2-124m --micro-batch 32 --seq-len 1024 --steps 20 --eval-every 0 --sample-len 0"
  "gpt2-1558m b8|./train_gpu --model gpt2-1558m --micro-batch 8 --seq-len 1024 --steps 8 --eval-every 0 --sample-len 0"
  "gpt2-1558m b16 selective|./train_gpu --model gpt2-1558m --micro-batch 16 --seq-len 1024 --steps 8 --eval-every 0 --sample-len 0 --recompute selective"
  "gpt2-124m b16 recompute|./train_gpu --model gpt2-124m --micro-batch 16 --seq-len 1024 --steps 20 --eval-every 0 --sample-len 0 --recompute selective"
  "llama-small b32|./train_gpu --model llama-small --micro-batch 32 --steps 20 --eval-every 0 --sample-len 0"
)

note "== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nvidia-smi > "$OUTDIR/nvidia-smi.txt" 2>&1

# ---------------------------------------------------------------------------- build
NVCC_FLAGS="-O3 -std=c++17 -gencode arch=compute_90,code=[sm_90,compute_90] -Xcompiler -fopenmp,-Wno-unused-function -I. -DOMPI_SKIP_MPICXX=1"
MPI_C="$(mpicc --showme:compile 2>/dev/null)"
MPI_L="$(mpicc --showme:link 2>/dev/null)"
build() {  # build TARGET SOURCE: the Makefile's target when it has one, else nvcc directly
  local target=$1 src=$2
  [ -f "$src" ] || { echo "build: $src not present, skipping $target" >> "$OUTDIR/build.log"; return 1; }
  if [ -f Makefile ] && make -n "$target" >/dev/null 2>&1; then
    make "$target" >> "$OUTDIR/build.log" 2>&1
  else
    echo "nvcc $NVCC_FLAGS $MPI_C -o $target $src ..." >> "$OUTDIR/build.log"
    nvcc $NVCC_FLAGS $MPI_C -o "$target" "$src" -lcublasLt -lcublas -lnccl -lm $MPI_L >> "$OUTDIR/build.log" 2>&1
  fi
}
: > "$OUTDIR/build.log"
build test_gpu test_gpu.cu & P1=$!
build train_gpu train_gpt.cu & P2=$!
wait $P1; RC_TB=$?
wait $P2; RC_TR=$?
note "build: test_gpu rc=$RC_TB, train_gpu rc=$RC_TR ($(elapsed)s)"
[ $RC_TB -ne 0 ] && tail -30 "$OUTDIR/build.log"

# ---------------------------------------------------------------------------- kernel tests
RC_TEST=1
if [ $RC_TB -eq 0 ]; then
  timeout 180 ./test_gpu > "$OUTDIR/test_gpu.log" 2>&1
  RC_TEST=$?
  grep -E "^(FAIL|bench|error)" "$OUTDIR/test_gpu.log" | tee -a "$SUMMARY"
  note "test_gpu: $(tail -1 "$OUTDIR/test_gpu.log") (rc=$RC_TEST, $(elapsed)s)"
fi

# ---------------------------------------------------------------------------- whole model vs CPU
# train_gpu against train_cpu on tiny models, 1 rank and tp/pp/sp/ZeRO layouts (--comm mpi).
RC_GVC=1
if [ $RC_TR -eq 0 ] && [ -x ./train_gpu ]; then
  OUT="$OUTDIR" timeout 300 dev/check_gpu_vs_cpu.sh > "$OUTDIR/check_gpu_vs_cpu.log" 2>&1
  RC_GVC=$?
  grep -E "^(FAIL|error)" "$OUTDIR/check_gpu_vs_cpu.log" | tee -a "$SUMMARY"
  note "gpu_vs_cpu: $(tail -1 "$OUTDIR/check_gpu_vs_cpu.log") (rc=$RC_GVC, $(elapsed)s)"
fi

# ---------------------------------------------------------------------------- benchmarks
if [ $RC_TR -eq 0 ] && [ -x ./train_gpu ] && [ -z "${SKIP_BENCH:-}" ]; then
  printf "\n%-26s %4s %6s  %s\n" "bench" "rc" "wall s" "last step line" | tee -a "$SUMMARY"
  i=0
  for entry in "${BENCHES[@]}"; do
    name=${entry%%|*}; cmd=${entry#*|}; i=$((i + 1))
    if [ "$(elapsed)" -gt 360 ]; then printf "%-26s skipped (time budget)\n" "$name" | tee -a "$SUMMARY"; continue; fi
    log="$OUTDIR/bench_$i.log"
    echo "\$ $cmd" > "$log"
    b0=$(date +%s)
    timeout 90 $cmd >> "$log" 2>&1
    rc=$?
    last=$(grep -E "^step +[0-9]+/" "$log" | tail -1 | sed -E 's/ +/ /g' | cut -c1-150)
    [ -z "$last" ] && last=$(tail -1 "$log" | cut -c1-150)
    printf "%-26s %4d %6d  %s\n" "$name" "$rc" "$(( $(date +%s) - b0 ))" "$last" | tee -a "$SUMMARY"
  done
fi

# ---------------------------------------------------------------------------- test counts
counts() {  # counts LOG: "passed failed" from its last "N passed, N failed" line, "- -" if none
  local line
  line=$(grep -E "^[0-9]+ passed, [0-9]+ failed$" "$1" 2>/dev/null | tail -1)
  [ -n "$line" ] && echo "$line" | awk '{print $1, $3}' || echo "- -"
}
printf "\n%-12s %7s %7s\n" "tests" "passed" "failed" | tee -a "$SUMMARY"
read -r p1 f1 <<< "$(counts "$OUTDIR/test_gpu.log")"
read -r p2 f2 <<< "$(counts "$OUTDIR/check_gpu_vs_cpu.log")"
printf "%-12s %7s %7s\n" "test_gpu" "$p1" "$f1" | tee -a "$SUMMARY"
printf "%-12s %7s %7s\n" "gpu_vs_cpu" "$p2" "$f2" | tee -a "$SUMMARY"

note "total $(elapsed)s; logs in $OUTDIR"
[ $RC_TB -eq 0 ] && [ $RC_TEST -eq 0 ] && [ $RC_TR -eq 0 ] && [ $RC_GVC -eq 0 ]
