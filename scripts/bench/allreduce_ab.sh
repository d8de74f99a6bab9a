#!/usr/bin/env bash
# A/B of two allreduce_bench binaries (e.g. before and after a change), 2 ranks on loopback,
# alternating A and B for ROUNDS rounds so machine noise hits both alike. Prints per size the
# median over rounds of each round's median, and the median of the per-round ratios B/A.
# Usage: scripts/bench/allreduce_ab.sh A_BENCH B_BENCH [rounds] [budget-seconds-per-size]
set -euo pipefail
cd "$(dirname "$0")/../.."
A=$1
B=$2
ROUNDS=${3:-5}
BUDGET=${4:-0.5}
SIZES=(4096 65536 1048576 16777216 268435456)
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run_pair() {  # name bench
  local port
  port=$(free_port)
  for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port OMP_NUM_THREADS=1 "$2" --mode sizes --budget-s "$BUDGET" \
      --bytes "${SIZES[@]}" > "$OUT/$1.$rank" 2>&1 &
  done
  wait
}
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then run_pair "a.$round" "$A"; run_pair "b.$round" "$B";
  else run_pair "b.$round" "$B"; run_pair "a.$round" "$A"; fi
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name, r):
    per = {}
    for line in open(f"{out}/{name}.{r}.0"):
        f = line.rstrip("\n").split("\t")
        if f[0] == "allreduce":
            per[int(f[1])] = float(f[2])
    return per
a = [load("a", r) for r in range(1, rounds + 1)]
b = [load("b", r) for r in range(1, rounds + 1)]
print("| size | A median (ms) | B median (ms) | B/A (median of per-round ratios) |")
print("| ---: | ---: | ---: | ---: |")
for size in sorted(a[0]):
    ma = statistics.median(x[size] for x in a)
    mb = statistics.median(x[size] for x in b)
    ratio = statistics.median(y[size] / x[size] for x, y in zip(a, b))
    label = f"{size // 1048576} MiB" if size >= 1048576 else f"{size // 1024} KiB"
    print(f"| {label} | {ma:.3f} | {mb:.3f} | {ratio:.2f} |")
PY
