#!/usr/bin/env bash
# Rendezvous at scale (docs/benchmarks.md): bench/rdzv (this project's elastic rendezvous,
# 8..16384 simulated nodes against one store server in a child process) and, in the same
# run, PyTorch's own c10d dynamic rendezvous on the node counts it can do in reasonable time
# (the reference). 16384 nodes need 16.4k descriptors in each of the two processes.
#   scripts/bench/rdzv.sh [build-dir]
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
echo "## this project: agreement, and re-form after a SIGKILL-like loss (defaults)"
"$build/rdzv_bench" --nodes 8,32,64,128,512,1024,2048,4096,8192,16384 --repeats 5 \
  --reform_nodes 8,64,256 --reform_repeats 3
echo
echo "## this project: re-form with heartbeat_interval=0.25 s, lease_timeout=1 s"
"$build/rdzv_bench" --nodes 8 --repeats 1 --reform_nodes 8,64,256 --reform_repeats 3 \
  --heartbeat_ms 250 --lease_ms 1000
echo
echo "## reference: PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') c10d DynamicRendezvousHandler"
REPEATS=3 /usr/bin/python3 scripts/bench/rdzv_torch_reference.py 8 32 64 128
