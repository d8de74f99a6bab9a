#!/usr/bin/env bash
# All-reduce benchmark: 2 ranks on Gloo (loopback), ours (build/allreduce_bench) and PyTorch's
# dist.all_reduce side by side in one run, same sizes, same timing loop, once per PyTorch of
# TORCH_PYTHONS (scripts/bench/torch_refs.sh; default Debian's 1.13); then the share of
# all-reduce time hidden behind a synthetic backward with bucketing.
# Usage: scripts/bench/allreduce.sh [build-dir] [budget-seconds-per-size] [rounds]
#   env: SIZES="4096 65536 ..." (bytes; default 4 KiB .. 256 MiB), SKIP_OVERLAP=1
# Prints a markdown table (medians, ratio torch/ours per PyTorch) to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/torch_refs.sh
BUILD="${1:-build}"
BUDGET="${2:-1.0}"
ROUNDS="${3:-3}"
BENCH="$BUILD/allreduce_bench"
[ -x "$BENCH" ] || { echo "missing $BENCH: build target allreduce_bench first" >&2; exit 2; }
read -r -a SIZES <<< "${SIZES:-4096 65536 1048576 16777216 268435456}"
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

# Alternate ours and PyTorch for ROUNDS rounds so machine noise hits both alike; each cell
# is the median over rounds of each round's median.
for round in $(seq 1 "$ROUNDS"); do
  run_pair "ours.$round" "$BENCH" --mode sizes --budget-s "$BUDGET" --bytes "${SIZES[@]}"
  for i in "${!TORCH_PYS[@]}"; do
    run_pair "torch$i.$round" "${TORCH_PYS[$i]}" scripts/bench/allreduce_torch.py "$BUDGET" "${SIZES[@]}"
  done
done
if [ "${SKIP_OVERLAP:-0}" != 1 ]; then
  run_pair overlap "$BENCH" --mode overlap --bucket-cap-mb 4
  run_pair overlap_gpu_like "$BENCH" --mode overlap --bucket-cap-mb 4 --off-cpu
fi
versions=()
for py in "${TORCH_PYS[@]}"; do versions+=("$(torch_version "$py")"); done

/usr/bin/python3 - "$OUT" "$ROUNDS" "${versions[@]}" <<'PY'
import os, statistics, sys
out, rounds, versions = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(name):
    per, init = {}, []
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{name}.{r}"):
            f = line.rstrip("\n").split("\t")
            if f[0] == "allreduce":
                per.setdefault(int(f[1]), []).append(float(f[2]))
            elif f[0] == "init":
                init.append(float(f[2]))
    return {k: statistics.median(v) for k, v in per.items()}, statistics.median(init)
ours, ours_init = load("ours")
for i, version in enumerate(versions):
    torch, torch_init = load(f"torch{i}")
    print(f"| size | ours median (ms) | PyTorch {version} median (ms) | ours GB/s | PyTorch GB/s | PyTorch {version} / ours |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in sorted(ours):
        size = f"{b // 1048576} MiB" if b >= 1048576 else f"{b // 1024} KiB"
        o, t = ours[b], torch[b]
        print(f"| {size} | {o:.3f} | {t:.3f} | {b / o / 1e6:.2f} | {b / t / 1e6:.2f} | {t / o:.2f}x |")
    print(f"| init (store + Gloo mesh) | {ours_init:.1f} | {torch_init:.1f} | | | {torch_init / ours_init:.2f}x |")
    print()
if not os.path.exists(f"{out}/overlap"):
    sys.exit(0)
print("| synthetic backward | buckets | all-reduce alone (ms) | backward alone (ms) | both, bucketed (ms) | all-reduce time hidden |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name, kind in (("overlap", "busy CPU loop (CPU training)"),
                   ("overlap_gpu_like", "sleep (models GPU kernels)")):
    f = [l for l in open(f"{out}/{name}") if l.startswith("overlap")][0].split("\t")
    print(f"| {kind} | {f[5].strip()} | {float(f[1]):.1f} | {float(f[2]):.1f} | {float(f[3]):.1f} | "
          f"{float(f[4]) * 100:.0f}% |")
PY
