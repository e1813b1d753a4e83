#!/usr/bin/env bash
# dev/bench_wait.sh: one rank's step time with OpenMP threads that sleep while they wait
# (OMP_WAIT_POLICY=passive, ./train's default since #40) against libgomp's own default
# (spin about 3 ms first: GOMP_SPINCOUNT=300000, what libgomp does when told nothing),
# alternating in one run so both see the same load. Prints each run, the share of the machine
# other processes used meanwhile (others %: the load), and the median ratio.
#   bash dev/bench_wait.sh [ROUNDS] [extra ./train flags...]
# e.g. bash dev/bench_wait.sh 5 --model gpt2-124m --seq-len 64 --micro-batch 4 --global-batch 4
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
flags=(--steps 6 --eval-every 0 --sample-len 0 --quiet "$@")
[ -x ./train ] || { echo "error: build ./train first (make train)"; exit 1; }
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
# one run: "STEP_MS OTHERS%", others% = the CPU time other processes used during the run, in
# percent of the machine (all cores): near 0 on a quiet machine
run() {
    local t0 t1 out cpu
    t0=$(busy_ticks)
    out=$( { /usr/bin/time -f "cpu %e %U %S" env "$@" ./train "${flags[@]}"; } 2>&1)
    t1=$(busy_ticks)
    cpu=$(grep '^cpu ' <<<"$out" | tail -1)
    awk -v s="$(sed -n 's/.*; step \([0-9.]*\) ms mean.*/\1/p' <<<"$out")" -v c="$cpu" -v d=$((t1 - t0)) \
        -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" 'BEGIN { split(c, f, " ");
        o = (d / hz - f[3] - f[4]) / (f[2] * n) * 100; printf "%.1f %.0f\n", s, o < 0 ? 0 : o }'
}
echo "$(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg); flags: ${flags[*]}"
ratios=()
for ((i = 1; i <= rounds; i++)); do
    read -r spin spin_o < <(run GOMP_SPINCOUNT=300000)
    read -r passive passive_o < <(run OMP_WAIT_POLICY=passive)
    ratio=$(awk -v a="$spin" -v b="$passive" 'BEGIN { printf "%.2f", a / b }')
    ratios+=("$ratio")
    printf "round %d: spin (libgomp default) %8.1f ms (others %3s%%) | passive %8.1f ms (others %3s%%) | spin/passive %s\n" \
        "$i" "$spin" "$spin_o" "$passive" "$passive_o" "$ratio"
done
median=$(printf "%s\n" "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); median spin/passive step time: $median"
