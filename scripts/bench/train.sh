#!/usr/bin/env bash
# Training throughput: build/train under build/ddplaunch vs PyTorch DDP (gloo) under torchrun,
# once per PyTorch of TORCH_PYTHONS (scripts/bench/torch_refs.sh; default Debian's 1.13), same MLP (64-256-256-10), batch 64 per rank, same synthetic data shape,
# AdamW, 1 thread per worker. Runs are interleaved (native, torch, native, ...) so machine
# noise hits both alike. Each run trains --max_steps steps with a progress line every 50;
# a run's rate is the median of its intervals after the first (warm-up); the table gives the
# median over REPEATS runs.
# Usage: scripts/bench/train.sh            (env: BUILD_DIR=build REPEATS=5 STEPS=600
#                                           WORKERS="1 2" LOADERS="index dataloader")
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/torch_refs.sh
BUILD_DIR=${BUILD_DIR:-build}
REPEATS=${REPEATS:-5}
STEPS=${STEPS:-600}
WORKERS=${WORKERS:-1 2}
LOADERS=${LOADERS:-index dataloader}
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

native() {  # nproc
  "$BUILD_DIR/ddplaunch" --standalone --nproc_per_node="$1" "$BUILD_DIR/train" --data synthetic \
    --synthetic_rows 140000 --synthetic_features 64 --synthetic_classes 10 --hidden 256,256 \
    --batch_size 64 --optimizer adamw --max_steps "$STEPS" --log_every 50 --blas_threads 1 2>&1
}
torch_ddp() {  # python nproc loader
  local py=$1
  shift
  "$py" -m torch.distributed.run -r 1 -t 1 --standalone --nproc_per_node="$1" \
    bench/train/torch_ddp_mlp.py --rows 140000 --features 64 --classes 10 --hidden 256,256 \
    --batch_size 64 --max_steps "$STEPS" --log_every 50 --loader "$2" 2>&1
}

# run NAME CMD...: keeps the full output; a run that prints no rate is retried once (a port
# taken between --standalone's probe and its bind, say) and then reported with its output.
run() {
  local name=$1
  shift
  for attempt in 1 2; do
    "$@" > "$OUT/$name.log" 2>&1 || true
    grep -o 'samples/s [0-9.]*' "$OUT/$name.log" | awk '{print $2}' > "$OUT/$name" || true
    if [ "$(wc -l < "$OUT/$name")" -ge 2 ]; then return 0; fi
    echo "train bench: $name attempt $attempt printed no rates:" >&2
    tail -n 20 "$OUT/$name.log" >&2
  done
  exit 1
}

echo "train bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for rep in $(seq 1 "$REPEATS"); do
  for n in $WORKERS; do
    run "native_${n}_$rep" native "$n"
    for i in "${!TORCH_PYS[@]}"; do
      for loader in $LOADERS; do
        run "torch${i}${loader}_${n}_$rep" torch_ddp "${TORCH_PYS[$i]}" "$n" "$loader"
      done
    done
  done
  echo "train bench: repeat $rep/$REPEATS done" >&2
done

echo "train bench: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
versions=()
for py in "${TORCH_PYS[@]}"; do versions+=("$(torch_version "$py")"); done
"$PY" - "$OUT" "$REPEATS" "$WORKERS" "$LOADERS" "${versions[@]}" <<'PYEOF'
import os, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
workers = [int(n) for n in sys.argv[3].split()]
loaders, versions = sys.argv[4].split(), sys.argv[5:]
def rate(kind, n):
    runs = []
    for rep in range(1, repeats + 1):
        vals = [float(v) for v in open(os.path.join(out, f"{kind}_{n}_{rep}")).read().split()]
        if len(vals) < 2:
            sys.exit(f"train bench: {kind} x{n} run {rep} printed {len(vals)} rate lines")
        runs.append(statistics.median(vals[1:]))
    return statistics.median(runs), min(runs), max(runs)
names = {"index": "tensor indexing", "dataloader": "DataLoader"}
rows = [("build/train (ddplaunch)", "native")]
for i, version in enumerate(versions):
    rows += [(f"PyTorch {version} DDP, {names[l]}", f"torch{i}{l}") for l in loaders]
res = {(k, n): rate(k, n) for _, k in rows for n in workers}
print("| trainer | workers | samples/s (median) | min..max of runs | native / this |")
print("| --- | ---: | ---: | ---: | ---: |")
for label, k in rows:
    for n in workers:
        med, lo, hi = res[(k, n)]
        ratio = res[("native", n)][0] / med
        print(f"| {label} | {n} | {med:,.0f} | {lo:,.0f}..{hi:,.0f} | {ratio:.2f}x |")
PYEOF
