#!/usr/bin/env bash
# dev/multi_gpu_check.sh: the one script to run the day a machine with 2, 4 or 8 GPUs is lent.
# Over real NCCL, one GPU per rank:
#   1. layouts: every kind (dp, tp, tp+sp, pp with each schedule, vpp, cp ring / Ulysses / 2d,
#      ZeRO 1-3, --offload optimizer / activations, and the widest layouts N GPUs allow) against
#      the 1-GPU run of the same model, data and seed: the loss at every step within 2e-2
#      relative, the step-1 gradient norm within 5e-2 (dev/check_gpu_vs_cpu.sh's bf16 bounds, and
#      why: there the same layouts are checked on the emulator);
#   2. bus bandwidth of each collective the trainer uses (dev/bench_nccl.cu, nccl-tests' busbw)
#      against the link's figure (LINK_GBPS, else by the GPU's name: NVLink or PCIe);
#   3. scaling: tokens/s of gpt2-1558m and llama-7b steps on 1, 2, 4, ... N GPUs (dp with ZeRO),
#      and the efficiency tok/s(N) / (N x tok/s(1)).
# Each part appends its table to the summary; the whole goes into dev/RESULTS.md (a section
# with the date, commit and machine). Logs in dev/out/multi_gpu/ (and $OUT, when set, gets the
# summary and a tarball of the logs after each part, as the lent machine returns $OUT).
#
#   dev/multi_gpu_check.sh                 on a GPU machine (N = the GPUs nvidia-smi lists)
#   EMU=1 GPUS=4 dev/multi_gpu_check.sh    on the CUDA emulator (emu/): GPUS emulated devices, the
#                                          tiny models, 3 steps; proves the plumbing, measures nothing;
#                                          the results go to dev/out/multi_gpu/RESULTS.md only
#   PARTS="layouts bw scaling" (default all), STEPS (6), LINK_GBPS, MAX_MIB (bench sizes, 1024)
set -u
cd "$(dirname "$0")/.."
EMU=${EMU:-0}
OUTDIR=dev/out/multi_gpu
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
SUMMARY="$OUTDIR/summary.md"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
publish() {
  [ -n "${OUT:-}" ] && [ -d "$OUT" ] || return 0
  cp -f "$SUMMARY" "$OUT"/ 2>/dev/null
  tar czf "$OUT/multi_gpu_logs.tgz" --exclude='*.bin' -C "$OUTDIR" . 2>/dev/null
  return 0
}
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
PARTS=${PARTS:-layouts bw scaling}
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"

if [ "$EMU" = 1 ]; then
  N=${GPUS:-4}
  export EMU_DEVICES=$N
  BIN=./train_gpu_emu BENCH=./bench_nccl_emu
  MODEL="--model tiny" LLAMA="--model llama-tiny" STEPS=${STEPS:-3} MAX_MIB=${MAX_MIB:-4}
  BIG=("gpt2-tiny|--model tiny" "llama-tiny|--model llama-tiny")
  DEVICE="CUDA emulator, $N emulated devices"
  RESULTS="$OUTDIR/RESULTS.md"
else
  N=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
  BIN=./train_gpu BENCH=./bench_nccl
  MODEL="--model gpt2-124m --seq-len 256"
  LLAMA="--model llama-tiny --n-layer 8 --d-model 512 --n-head 8 --seq-len 256"
  STEPS=${STEPS:-6} MAX_MIB=${MAX_MIB:-1024}
  # (llama-7b's 1-GPU row needs --offload optimizer's host memory; where it does not run, the
  # efficiency is against the fewest GPUs that did)
  BIG=("gpt2-1558m|--model gpt2-1558m --zero 1 --recompute selective"
       "llama-7b|--model llama-7b --zero 3 --offload optimizer --recompute full --micro-batch 1")
  DEVICE="$N x $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  RESULTS=dev/RESULTS.md
fi
if [ "$N" -lt 2 ]; then
  echo "error: multi_gpu_check needs 2 or more GPUs (found $N; EMU=1 for the emulator)"; exit 1
fi
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
note "## Multi-GPU check, $(date -u +%Y-%m-%d) at $COMMIT: $DEVICE"
note ""

# ------------------------------------------------------------------------------ build
if [ "$EMU" = 1 ]; then make train_gpu_emu bench_nccl_emu > "$OUTDIR/build.log" 2>&1
else make train_gpu bench_nccl > "$OUTDIR/build.log" 2>&1; fi || { tail -20 "$OUTDIR/build.log"; exit 1; }

# run NAME FLAGS...: STEPS steps with a JSON log; 0 when it logged them all.
BASE="--warmup 2 --eval-every 0 --sample-len 0 --seed 1337 --quiet"
run() {
  local name=$1; shift
  timeout 900 "$BIN" $BASE --steps "$STEPS" "$@" --log "$OUTDIR/$name.json" > "$OUTDIR/$name.log" 2>&1 || return 1
  [ "$(grep -c '^{"step":' "$OUTDIR/$name.json")" -eq "$STEPS" ]
}
# "step loss grad_norm tokens_per_s" rows of a JSON log
steps() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*"grad_norm":\([^,]*\),.*/\1 \2 \3/p' "$1" 2>/dev/null; }
PASS=0 FAIL=0

# ------------------------------------------------------------------------------ 1. layouts
layouts() {
  # name|flags|ranks: the 1-GPU reference of each model first
  local cases=("ref_gpt2|$MODEL|1" "ref_llama|$LLAMA|1"
    "dp2|$MODEL --dp 2|2" "tp2|$MODEL --tp 2|2" "tp2_sp|$MODEL --tp 2 --sp|2"
    "pp2_1f1b|$MODEL --pp 2|2" "pp2_gpipe|$MODEL --pp 2 --schedule gpipe|2"
    "pp2_vpp2|$MODEL --pp 2 --vpp 2|2" "pp2_zbh1|$MODEL --pp 2 --schedule zb-h1|2"
    "pp2_zbv|$MODEL --pp 2 --schedule zb-v|2"
    "cp2_ring|$MODEL --cp 2|2" "cp2_ulysses|$MODEL --cp 2 --cp-kind ulysses|2"
    "dp2_zero1|$MODEL --dp 2 --zero 1|2" "dp2_zero2|$MODEL --dp 2 --zero 2|2" "dp2_zero3|$MODEL --dp 2 --zero 3|2"
    "dp2_offload_opt|$MODEL --dp 2 --zero 1 --offload optimizer|2"
    "pp2_offload_act|$MODEL --pp 2 --offload activations|2"
    "llama_tp2|$LLAMA --tp 2|2" "llama_cp2_ring|$LLAMA --cp 2|2")
  if [ "$N" -ge 4 ]; then
    # (zb-v at pp 4 needs 8 chunks: an 8-layer model, with its own 1-GPU reference)
    cases+=("ref_gpt2_8l|$MODEL --n-layer 8|1"
      "tp2_pp2|$MODEL --tp 2 --pp 2|4" "dp2_tp2_sp_zero1|$MODEL --dp 2 --tp 2 --sp --zero 1|4"
      "pp4_zbv|$MODEL --n-layer 8 --pp 4 --schedule zb-v|4" "cp4_2d|$MODEL --cp 4 --cp-kind 2d --cp-ulysses 2|4"
      "dp4_zero3|$MODEL --dp 4 --zero 3|4" "llama_tp2_pp2|$LLAMA --tp 2 --pp 2|4")
  fi
  if [ "$N" -ge 8 ]; then
    cases+=("dp2_tp2_pp2|$MODEL --dp 2 --tp 2 --pp 2|8" "tp4_pp2_sp|$MODEL --tp 4 --pp 2 --sp|8"
      "dp8_zero1|$MODEL --dp 8 --zero 1|8" "dp2_tp2_cp2|$MODEL --dp 2 --tp 2 --cp 2|8")
  fi
  note "### Layouts against 1 GPU ($STEPS steps; loss rel. <= 2e-2 every step, step-1 grad norm <= 5e-2)"
  note ""
  note "| layout | GPUs | max loss rel. diff | grad norm rel. diff | result |"
  note "|---|---|---|---|---|"
  for c in "${cases[@]}"; do
    IFS='|' read -r name flags ranks <<< "$c"
    local ref=ref_gpt2
    [[ $flags == *llama* ]] && ref=ref_llama
    [[ $flags == *"--n-layer 8"* ]] && ref=ref_gpt2_8l
    if ! run "$name" $flags; then
      note "| $name | $ranks | | | FAIL: the run failed ($OUTDIR/$name.log) |"; FAIL=$((FAIL + 1)); continue
    fi
    [ "$ranks" = 1 ] && { note "| $name (reference) | 1 | | | ran |"; continue; }
    local res
    res=$(awk 'function rel(a, b) { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b; return s > 0 ? d / s : d }
      NR == FNR { l[$1] = $2; g[$1] = $3; next }
      ($1 in l) { n++; r = rel($2, l[$1]); if (r > w) w = r; if ($1 == 1) gn = rel($3, g[1]) }
      END { printf "%d %.3e %.3e %d\n", n, w, gn, (n > 0 && w <= 2e-2 && gn <= 5e-2) }' \
      <(steps "$OUTDIR/$ref.json") <(steps "$OUTDIR/$name.json"))
    read -r n worst gn ok <<< "$res"
    if [ "$ok" = 1 ] && [ "$n" -eq "$STEPS" ]; then note "| $name | $ranks | $worst | $gn | pass |"; PASS=$((PASS + 1))
    else note "| $name | $ranks | $worst | $gn | FAIL |"; FAIL=$((FAIL + 1)); fi
  done
  note ""
}

# ------------------------------------------------------------------------------ 2. bus bandwidth
# The link's one-direction figure per GPU, GB/s (datasheets): NVLink 4 (H100/H200 SXM) 450,
# NVLink 3 (A100 SXM) 300, the H100 NVL pair's bridge 300; else PCIe: Gen5 x16 ~ 64, Gen4 ~ 32.
link_gbps() {
  [ -n "${LINK_GBPS:-}" ] && { echo "$LINK_GBPS LINK_GBPS"; return; }
  [ "$EMU" = 1 ] && { echo "0 emulator: none"; return; }
  local name nvlink
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  nvlink=$(nvidia-smi nvlink -s 2>/dev/null | grep -c GB/s)
  case "$name" in
    *H100*NVL*|*H200*NVL*) echo "300 NVLink bridge (H100/H200 NVL datasheet)" ;;
    *H100*|*H200*|*H800*) [ "$nvlink" -gt 0 ] && echo "450 NVLink 4 (H100 SXM datasheet)" || echo "64 PCIe Gen5 x16" ;;
    *A100*|*A800*) [ "$nvlink" -gt 0 ] && echo "300 NVLink 3 (A100 datasheet)" || echo "32 PCIe Gen4 x16" ;;
    *) echo "32 PCIe Gen4 x16 (assumed: set LINK_GBPS)" ;;
  esac
}
bandwidth() {
  read -r link link_src <<< "$(link_gbps)"
  note "### NCCL bus bandwidth, $N ranks (dev/bench_nccl.cu; link: $link GB/s, $link_src; target >= 80%)"
  note ""
  if ! timeout 600 $MPIRUN -np "$N" "$BENCH" "$MAX_MIB" > "$OUTDIR/bench_nccl.log" 2>&1; then
    note "FAIL: bench_nccl failed ($OUTDIR/bench_nccl.log)"; FAIL=$((FAIL + 1)); note ""; return
  fi
  note "| op | largest size | busbw GB/s | of the link |"
  note "|---|---|---|---|"
  awk -v link="$link" '!/^#/ && NF == 5 {
      best[$1] = $5; size[$1] = $2; if (!($1 in seen)) order[++n] = $1; seen[$1] = 1 }
    END { for (i = 1; i <= n; i++) { o = order[i]; of = link > 0 ? sprintf("%.0f%%", 100 * best[o] / link) : "-"
      printf "| %s | %.0f MiB | %.1f | %s |\n", o, size[o] / 1048576, best[o], of } }' \
    "$OUTDIR/bench_nccl.log" | tee -a "$SUMMARY"
  PASS=$((PASS + 1))
  note ""
}

# ------------------------------------------------------------------------------ 3. scaling
scaling() {
  note "### Scaling, data parallel (tok/s of steps 2..$STEPS; efficiency: tok/s(N) / N over the per-GPU tok/s \
of the fewest GPUs that ran)"
  note ""
  note "| model | GPUs | tok/s | MFU | efficiency |"
  note "|---|---|---|---|---|"
  for b in "${BIG[@]}"; do
    IFS='|' read -r label flags <<< "$b"
    local base=""  # tok/s per GPU of the fewest GPUs that ran (1, unless the model does not fit on one)
    for g in 1 2 4 8; do
      [ "$g" -le "$N" ] || break
      local name="scale_${label}_$g"
      if ! run "$name" $flags --dp "$g" --global-batch $((8 * g)); then
        note "| $label | $g | did not run ($(grep -m1 '^error' "$OUTDIR/$name.log" | cut -c1-80)) | | |"; continue
      fi
      local tps mfu
      tps=$(sed -n 's/.*"tok_s":\([0-9.e+]*\).*/\1/p' "$OUTDIR/$name.json" | tail -n +2 |
            awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
      mfu=$(sed -n 's/.*"mfu":\([0-9.e+-]*\).*/\1/p' "$OUTDIR/$name.json" | tail -1)
      [ -z "$base" ] && base=$(awk -v t="$tps" -v g="$g" 'BEGIN { print t / g }')
      local eff
      eff=$(awk -v t="$tps" -v b="$base" -v g="$g" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * t / (g * b) }')
      note "| $label | $g | $tps | $mfu | $eff |"
    done
  done
  PASS=$((PASS + 1))
  note ""
}

for p in $PARTS; do
  case $p in
    layouts) layouts ;;
    bw) bandwidth ;;
    scaling) scaling ;;
    *) echo "error: PARTS: unknown part $p (layouts, bw, scaling)"; exit 1 ;;
  esac
  publish
done
note "multi_gpu_check: $PASS passed, $FAIL failed in $(elapsed) s"
{ echo; cat "$SUMMARY"; } >> "$RESULTS"
echo "summary appended to $RESULTS"
publish
[ "$FAIL" -eq 0 ]
