#!/usr/bin/env bash
# dev/bench_gpu.sh: the GPU benchmark (`make bench` on a machine with a GPU; dev/gpu_check.sh).
# One rank on one GPU, the shapes of issue #4:
#   gpt2-124m   micro-batch 32, sequence 1024, and again with --gelu-fusion off (the GELU
#               kernel instead of cuBLASLt's epilogue: the ratio of the two says what it pays)
#   gpt2-1558m  the largest micro-batch that fits, tried 32, 16, 8, 4 (an attempt that runs
#               out of GPU memory stops at allocation, in seconds)
# Each row: ms/step, tokens/s, achieved TFLOP/s and MFU averaged over the steps after the
# first two (warm-up), and the GPU memory in use at the end. The gpt2-124m and 1558m rows run
# with --op-times: each op family's device time per step (CUDA events around each op: matmul,
# attention forward and backward, norms, loss, optimizer; the rest of the step; communication)
# goes into $DIR/op_times.csv (the events cost the host microseconds an op, the device nothing). FLOPs are the trainer's PaLM
# count (6N + 12·L·d·T per token, metrics.h); MFU is against the device's dense bf16 peak
# (H100/H200: 989 TFLOP/s), which the trainer prints in its start-up table. PaLM's count takes
# attention as non-causal; the "causal" column is the MFU by the count of the pairs a causal
# model computes (6N + 6·L·d·T per token).
#
#   TRAIN_BIN=./train_gpu_emu BENCH_QUICK=1 EMU_DEVICE_MIB=150 dev/bench_gpu.sh
#   checks this script on the CUDA emulator with small shapes and a 150 MiB "GPU" (so the
#   second model's first micro-batch does not fit); the figures then mean nothing.
set -u
cd "$(dirname "$0")/.."
BIN=${TRAIN_BIN:-./train_gpu}
DIR=${OUT:-dev/out}/bench
mkdir -p "$DIR"
[ -x "$BIN" ] || make "${BIN#./}" > "$DIR/build.log" 2>&1 || { echo "error: cannot build $BIN (see $DIR/build.log)"; exit 1; }
if [ -n "${BENCH_QUICK:-}" ]; then
  SMALL="--model tiny" BIG="--model small" SEQ=32 STEPS=4 MBS="64 8"
else
  SMALL="--model gpt2-124m" BIG="--model gpt2-1558m" SEQ=1024 STEPS=12 MBS="32 16 8 4"
fi
COMMON="--seq-len $SEQ --steps $STEPS --warmup 2 --eval-every 0 --sample-len 0 --quiet"

# bench NAME MB FLAGS...: one run; prints its row and returns the trainer's exit code.
bench() {
  local name=$1 mb=$2; shift 2
  local log="$DIR/$name.log" json="$DIR/$name.json"
  rm -f "$json"
  timeout 300 "$BIN" "$@" --micro-batch "$mb" --global-batch "$mb" $COMMON --log "$json" > "$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    printf "%-18s %4d  failed (rc %d): %s\n" "$name" "$mb" "$rc" "$(grep -m1 'error' "$log" | cut -c1-100)"
    return $rc
  fi
  local mem causal
  mem=$(sed -n 's/^gpu memory (rank 0): \(.*\) in use.*/\1/p' "$log")
  # the causal count's share of PaLM's: attention sees half the pairs, (6N + 6 L d T) / (6N + 12 L d T)
  causal=$(awk -F'|' '/^\| n_layer/ { split($3, a, " "); L = a[1] } /^\| d_model/ { split($3, a, " "); d = a[1] }
                     /^\| seq_len/ { split($3, a, " "); T = a[1] }
                     /^\| FLOPs per token/ { split($3, a, " "); f = a[1]; u = substr(f, length(f)); f += 0
                                            f *= u == "K" ? 1e3 : u == "M" ? 1e6 : u == "G" ? 1e9 : 1 }
                     END { print (f > 0 ? 1 - 6 * L * d * T / f : 0) }' "$log")
  # --op-times' line (the mean per step of each op family, ms) into op_times.csv: model,mb,seq,family,ms
  sed -n 's/^gpu: op times per step, mean of [0-9]* steps (ms; rank 0): //p' "$log" |
    awk -v row="$name,$mb,$SEQ" '{ for (i = 1; i < NF; i += 2) print row "," $i "," $(i + 1) }' >> "$DIR/op_times.csv"
  sed -n 's/^{"step":\([0-9]*\),"loss":[^,]*,"lr":[^,]*,"ms":\([^,]*\),"tok_s":\([^,]*\),"mfu":\([^,]*\),"hfu":[^,]*,"tflops":\([^,]*\),.*/\1 \2 \3 \4 \5/p' "$json" |
    awk -v name="$name" -v mb="$mb" -v mem="$mem" -v causal="$causal" '
      $1 > 2 { n++; ms += $2; tok += $3; mfu += $4; tf += $5 }
      END { if (n) printf "%-18s %4d %9.1f %10.0f %8.1f %6.1f%% %6.1f%%  %s\n", name, mb, ms / n, tok / n, tf / n,
                          100 * mfu / n, 100 * causal * mfu / n, mem
            else printf "%-18s %4d  no steps after warm-up\n", name, mb }'
}

echo "model,mb,seq,family,ms" > "$DIR/op_times.csv"
printf "%-18s %4s %9s %10s %8s %7s %7s  %s\n" "model" "mb" "ms/step" "tokens/s" "TFLOP/s" "MFU" "causal" "GPU memory"
bench "${SMALL#--model }" "${MBS%% *}" $SMALL --op-times
bench "${SMALL#--model }-unfused" "${MBS%% *}" $SMALL --gelu-fusion off
for mb in $MBS; do
  bench "${BIG#--model }" "$mb" $BIG --op-times && break
done
true
