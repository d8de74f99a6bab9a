#!/usr/bin/env bash
# All-reduce benchmark: 2 ranks on Gloo (loopback), ours (build/allreduce_bench) and PyTorch
# 1.13's dist.all_reduce side by side in one run, same sizes, same timing loop; then the
# share of all-reduce time hidden behind a synthetic backward with bucketing.
# Usage: scripts/bench/allreduce.sh [build-dir] [budget-seconds-per-size]
# Prints a markdown table (medians, ratio torch/ours) to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${1:-build}"
BUDGET="${2:-1.5}"
BENCH="$BUILD/allreduce_bench"
[ -x "$BENCH" ] || { echo "missing $BENCH: build target allreduce_bench first" >&2; exit 2; }
SIZES=(4096 65536 1048576 16777216 268435456)
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run_pair NAME CMD...: two ranks of CMD with the env contract; rank 0's stdout to $OUT/NAME.
run_pair() {
  local name=$1; shift
  local port; port=$(free_port)
  local pids=()
  for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port OMP_NUM_THREADS=1 "$@" > "$OUT/$name.$rank" 2> "$OUT/$name.$rank.err" &
    pids+=($!)
  done
  local rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  if [ $rc -ne 0 ]; then cat "$OUT/$name".*.err >&2; exit $rc; fi
  cp "$OUT/$name.0" "$OUT/$name"
}

run_pair ours "$BENCH" --mode sizes --budget-s "$BUDGET" --bytes "${SIZES[@]}"
run_pair torch /usr/bin/python3 scripts/bench/allreduce_torch.py "$BUDGET" "${SIZES[@]}"
run_pair overlap "$BENCH" --mode overlap

echo "| size | ours median (ms) | PyTorch 1.13 median (ms) | ours GB/s | PyTorch GB/s | PyTorch / ours |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
join -t $'\t' -j 1 <(cut -f2,3 "$OUT/ours" | sort -k1,1) <(cut -f2,3 "$OUT/torch" | sort -k1,1) |
  sort -n | awk -F'\t' '{
    b=$1; o=$2; t=$3;
    if (b >= 1048576) s=sprintf("%d MiB", b/1048576); else s=sprintf("%d KiB", b/1024);
    printf "| %s | %.3f | %.3f | %.2f | %.2f | %.2fx |\n", s, o, t, b/o/1e6, b/t/1e6, t/o }'
echo
awk -F'\t' '{ printf "Bucketing overlap (%s buckets): all-reduce alone %.1f ms, synthetic backward alone %.1f ms, both with bucketing %.1f ms: %.0f%% of the all-reduce time hidden.\n", $6, $2, $3, $4, $5*100 }' "$OUT/overlap"
