#!/usr/bin/env bash
# The newcomer's first command: installs what is missing, builds, fetches the digits data and
# trains an MLP with 2 CPU workers under ddplaunch, then charts the metrics. Ends with the
# global validation accuracy and where the weights and chart were written. It builds only the
# two programs it runs (ddplaunch finds its own `train` in the build tree).
# Environment: RUN_DIR (default runs/digits), BUILD_DIR (default build), EPOCHS (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
RUN_DIR=${RUN_DIR:-runs/digits}
EPOCHS=${EPOCHS:-20}

echo "== 1/5 installing packages (scripts/setup.sh, without the PyTorch 2.x test venvs)"
DDP_SETUP_TORCH=0 scripts/setup.sh
echo "== 2/5 building ddplaunch and train (scripts/build.sh builds the rest: tests, benchmarks)"
# Only the two programs the demo runs: the tests and benchmarks are most of the build.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} -DDDP_WERROR=ON >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target ddplaunch train
echo "== 3/5 fetching the digits data (scripts/fetch_digits.sh)"
scripts/fetch_digits.sh data/digits.csv.gz

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

echo "== 5/5 charting the metrics (scripts/plot_metrics)"
scripts/plot_metrics "$RUN_DIR/metrics.jsonl" "$RUN_DIR/metrics.png"

result=$(grep -o 'global validation accuracy [0-9.]* on [0-9]* samples' "$RUN_DIR/train.log" | tail -n 1)
accuracy=$(echo "$result" | awk '{print $4}')
held_out=$(echo "$result" | awk '{print $6}')
echo
echo "global validation accuracy: $accuracy (2 workers, $EPOCHS epochs, $held_out held-out digits)"
echo "weights: $RUN_DIR/weights.safetensors"
echo "chart:   $RUN_DIR/metrics.png"
echo "metrics: $RUN_DIR/metrics.jsonl   log: $RUN_DIR/train.log"
