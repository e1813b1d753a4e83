#!/usr/bin/env bash
# tests/test_gpu_ranks.sh: ranks to GPUs and NCCL's communicators, on the CUDA emulator (emu/):
# the emulated NCCL's checks (communicators split from one parent; ranks that issue one
# communicator's collectives in different orders, or two ranks on one device, refused), the
# device each rank takes under every visibility (all devices visible, one per rank as srun
# --gpus-per-task=1 gives, fewer than the ranks), and the watchdog ending a hang in NCCL's
# start-up with its one line. Output: PASS/FAIL lines, then "N passed, N failed".
#
#   tests/test_gpu_ranks.sh        (make test_nccl_emu train_gpu_emu first)
set -u
cd "$(dirname "$0")/.."
BIN=${GPU_BIN:-./train_gpu_emu}
DIR=${TMPDIR:-/tmp}/test_gpu_ranks.$$
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
PASS=0
FAIL=0
pass() { echo "PASS $*"; PASS=$((PASS + 1)); }
fail() { echo "FAIL $*"; FAIL=$((FAIL + 1)); }
MPIRUN="mpirun --oversubscribe --bind-to none --allow-run-as-root"
RUN="--model tiny --steps 1 --eval-every 0 --sample-len 0 --micro-batch 4 --global-batch 8 --quiet"

# expect NAME WANT_RC PATTERN COMMAND...: runs COMMAND (output in DIR/NAME.log); WANT_RC 0 or
# "fail" (any other code); PATTERN a grep -E that must match the output ("" none); a failure
# must say so in exactly one "error:" line (fail_each: one or more, each rank may say it).
expect() {
  local name=$1 want=$2 pat=$3; shift 3
  timeout 120 "$@" > "$DIR/$name.log" 2>&1
  local rc=$? why=""
  if [ "$want" = 0 ] && [ $rc -ne 0 ]; then why="exit $rc"; fi
  if [ "$want" != 0 ] && { [ $rc -eq 0 ] || [ $rc -eq 124 ]; }; then why="exit $rc, expected a failure"; fi
  if [ -n "$pat" ] && ! grep -qE "$pat" "$DIR/$name.log"; then why="${why:+$why; }no line matches /$pat/"; fi
  local n_err; n_err=$(grep -c '^error:' "$DIR/$name.log")
  if { [ "$want" = fail ] && [ "$n_err" -ne 1 ]; } || { [ "$want" = fail_each ] && [ "$n_err" -lt 1 ]; }; then
    why="${why:+$why; }$n_err error lines"
  fi
  if [ -z "$why" ]; then pass "$name"; else fail "$name: $why"; sed 's/^/    /' "$DIR/$name.log" | tail -8; fi
}

# the emulated NCCL
for t in split order device; do
  case $t in
    split) expect nccl_split 0 "^3 passed, 0 failed" env EMU_DEVICES=4 $MPIRUN -np 3 ./test_nccl_emu split ;;
    order) expect nccl_order_refused fail_each "issue its collectives in different orders" \
             env EMU_DEVICES=4 $MPIRUN -np 3 ./test_nccl_emu order ;;
    device) expect nccl_duplicate_device 0 "Duplicate GPU detected" \
              env EMU_DEVICES=4 $MPIRUN -np 2 ./test_nccl_emu device ;;
  esac
done

# which device: all visible (a rank per device), one visible per rank, too few
expect all_visible_nccl 0 "comm nccl" env EMU_DEVICES=2 "$BIN" $RUN --tp 2
expect one_visible_per_rank 0 "comm nccl" env EMU_DEVICES=2 $MPIRUN -np 2 \
  sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$BIN" $RUN --dp 2
expect same_visible_refused fail "both got GPU 0000:01:00.0" env EMU_DEVICES=2 CUDA_VISIBLE_DEVICES=1 \
  $MPIRUN -np 2 "$BIN" $RUN --dp 2
expect too_few_by_hand fail "2 ranks but 1 GPU\(s\) here" env EMU_DEVICES=1 "$BIN" $RUN --tp 2
expect too_few_launched fail "ranks 0 and 1 of this node \(2 ranks\) both got GPU" env EMU_DEVICES=1 \
  $MPIRUN -np 2 "$BIN" $RUN --tp 2
expect shared_comm_mpi 0 "/ 2 ranks per GPU" env EMU_DEVICES=1 "$BIN" $RUN --tp 2 --comm mpi

# a rank that never returns from ncclCommInitRank (a wrong NCCL_SOCKET_IFNAME): the watchdog
# ends the run with the phase and the variables to check
t0=$(date +%s)
expect init_hang_watchdog fail_each "no progress .* creating NCCL's communicators .*NCCL_SOCKET_IFNAME" \
  env EMU_NCCL_INIT_HANG=1 "$BIN" $RUN --tp 2 --timeout-s 2
echo "    (ended after $(( $(date +%s) - t0 )) s)"

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
