#!/usr/bin/env bash
# The newcomer's first command: installs what is missing, builds, fetches the digits data and
# trains an MLP with 2 CPU workers under ddplaunch, then charts the metrics. Ends with the
# global validation accuracy and where the weights and chart were written. It installs only
# what those steps need (scripts/setup.sh --demo) and builds only the two programs it runs
# (ddplaunch finds its own `train` in the build tree). Each step prints its time
# (docs/build_times.md: the measured times on a fresh machine).
# Environment: RUN_DIR (default runs/digits), BUILD_DIR (default build), EPOCHS (default 20),
# BUILD_TYPE (default Release, built at -O2 without debug info: see below), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
RUN_DIR=${RUN_DIR:-runs/digits}
EPOCHS=${EPOCHS:-20}
BUILD_TYPE=${BUILD_TYPE:-Release}
demo_start=$(date +%s.%N)
step_start=$demo_start
step_done() { # "demo.sh: compile took 95.3s (total 2m07s)"
  local now
  now=$(date +%s.%N)
  awk -v s="$1" -v a="$step_start" -v b="$now" -v t0="$demo_start" 'BEGIN {
    printf "demo.sh: %s took %.1fs (total %dm%02ds)\n", s, b - a, int((b - t0) / 60), int(b - t0) % 60 }'
  step_start=$now
}

echo "== 1/5 installing packages (scripts/setup.sh --demo: what the next steps need, no test tools)"
scripts/setup.sh --demo
step_done packages
echo "== 2/5 building ddplaunch and train (scripts/build.sh builds the rest: tests, benchmarks)"
# Release here is -O2 without -g: debug info is a quarter of the compile's CPU time (a third for
# the Asio/Beast sources), and GCC 12's -O3 trips false -Wrestrict warnings. The trainer's
# numeric files and the reduction kernels keep their own -O3 (trainer/, worker_runtime/
# CMakeLists), so training is as fast as in the RelWithDebInfo build. scripts/build.sh
# reconfigures the same tree as RelWithDebInfo. Ninja for a new tree: with Makefiles the two
# targets build one after the other (docs/build_times.md).
. scripts/cmake_tree.sh
tree_generator "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DDDP_WERROR=ON >/dev/null
step_done configure
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target ddplaunch train
step_done compile
echo "== 3/5 fetching the digits data (scripts/fetch_digits.sh)"
scripts/fetch_digits.sh data/digits.csv.gz
step_done data

echo "== 4/5 training: 2 workers under ddplaunch"
# A fresh run each time: an old checkpoint here would make train resume a finished job.
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"
set -x
"$BUILD_DIR/ddplaunch" --standalone --nproc_per_node=2 --max_restarts 3 \
  train --data data/digits.csv.gz --hidden 256,256 --epochs "$EPOCHS" \
  --batch_size 32 --lr 0.003 --warmup_steps 20 --seed 1 --log_every 50 \
  --metrics "$RUN_DIR/metrics.jsonl" --checkpoint_dir "$RUN_DIR/checkpoints" \
  --checkpoint_every 100 --out "$RUN_DIR/weights.safetensors" 2>&1 | tee "$RUN_DIR/train.log"
{ set +x; } 2>/dev/null
step_done training

echo "== 5/5 charting the metrics (scripts/plot_metrics)"
scripts/plot_metrics "$RUN_DIR/metrics.jsonl" "$RUN_DIR/metrics.png"
step_done chart

result=$(grep -o 'global validation accuracy [0-9.]* on [0-9]* samples' "$RUN_DIR/train.log" | tail -n 1)
accuracy=$(echo "$result" | awk '{print $4}')
held_out=$(echo "$result" | awk '{print $6}')
echo
echo "global validation accuracy: $accuracy (2 workers, $EPOCHS epochs, $held_out held-out digits)"
echo "weights: $RUN_DIR/weights.safetensors"
echo "chart:   $RUN_DIR/metrics.png"
echo "metrics: $RUN_DIR/metrics.jsonl   log: $RUN_DIR/train.log"
