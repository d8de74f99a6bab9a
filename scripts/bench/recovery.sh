#!/usr/bin/env bash
# Training time lost per node loss (issue 18; docs/benchmarks.md, "Training time lost per node
# loss"): N simulated nodes on loopback (one agent each, --nproc_per_node 1, c10d rendezvous
# --nnodes N-1:N), one node SIGKILLed whole once the step lines show step 40; the time from
# the kill to the first step a survivor completes without it, on arrival of the step lines
# at the driver (bench/recovery/recovery_bench.py), and the steps redone. Three ways, runs
# interleaved:
#  (a) PyTorch 1.13 DDP (gloo) under Debian's torchrun, --max_restarts, checkpoint resume
#      (bench/recovery/torch_ddp_recovery.py);
#  (b) build/ddplaunch + build/train: process restart + checkpoint reload (the reference);
#  (c) the same with ddplaunch --in_place_recovery (skipped, with a message, while the
#      binary refuses the flag).
# Then (b) and (c) again with build/train's default data size (4,096 rows), since a
# restarted worker's data set-up is part of what (b) loses.
# Both trainers checkpoint every step. About 8 minutes with the defaults (2, 3 and 4 nodes;
# 5 ddplaunch runs and 3 torchrun runs per row: torchrun's re-rendezvous alone takes ~45 s a
# run); --quick: 2 nodes, one run of each (~1 minute).
#   scripts/bench/recovery.sh [--quick] [recovery_bench.py flags: --nodes 2,3,4 --repeats 5
#                             --torch_repeats 3 --variants torch,restart,inplace --keep ...]
#   env: BUILD_DIR=build
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
for bin in ddplaunch train; do
  [ -x "$BUILD_DIR/$bin" ] || { echo "recovery bench: build $BUILD_DIR/$bin first (cmake --build $BUILD_DIR --target ddplaunch train)" >&2; exit 2; }
done
echo "# Training time lost per node loss ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD))"
echo
echo "## 140,000 synthetic rows (as scripts/bench/train.sh), all three ways"
/usr/bin/python3 bench/recovery/recovery_bench.py --build "$BUILD_DIR" "$@"
# A restarted worker regenerates its data (about 270 ms of a solo start at 140,000 rows,
# 80 ms at 4,096): the ddplaunch rows again at build/train's default data size.
echo
echo "## 4,096 synthetic rows (build/train's default), ddplaunch only"
/usr/bin/python3 bench/recovery/recovery_bench.py --build "$BUILD_DIR" "$@" \
  --variants restart,inplace --rows 4096
