#!/usr/bin/env bash
# NCCL on a GPU machine: init time (ncclCommInitRank included) and all_reduce on device
# buffers, one rank per visible GPU (default 1). Usage:
#   scripts/bench/allreduce_nccl.sh [build-dir] [ranks] [budget-seconds-per-size]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${1:-build}"
RANKS="${2:-1}"
BUDGET="${3:-1.0}"
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pids=()
for rank in $(seq 0 $((RANKS - 1))); do
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$RANKS LOCAL_WORLD_SIZE=$RANKS MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$PORT "$BUILD/allreduce_bench" --backend nccl --budget-s "$BUDGET" \
    --bytes 4096 65536 1048576 16777216 268435456 > "/tmp/allreduce_nccl.$rank.$$" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
cat "/tmp/allreduce_nccl.0.$$"
rm -f /tmp/allreduce_nccl.*.$$
