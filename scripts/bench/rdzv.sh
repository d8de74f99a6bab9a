#!/usr/bin/env bash
# Rendezvous at scale (docs/benchmarks.md): bench/rdzv (this project's elastic rendezvous,
# 8..16384 simulated nodes against one store server in a child process) and, in the same
# run, PyTorch's own c10d dynamic rendezvous on the node counts it can do in reasonable time
# (the reference), once per PyTorch of TORCH_PYTHONS (scripts/bench/torch_refs.sh; default
# Debian's 1.13). 16384 nodes need 16.4k descriptors in each of the two processes.
#   scripts/bench/rdzv.sh [build-dir]
#   env: NODES (this project's node counts), REF_NODES (the reference's: 8 32 64 128),
#        REPEATS (the reference's, 3), SKIP_REFORM=1 (only the agreement)
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
. scripts/bench/torch_refs.sh
NODES=${NODES:-8,32,64,128,512,1024,2048,4096,8192,16384}
REF_NODES=${REF_NODES:-8 32 64 128}
echo "## this project: agreement, and re-form after a SIGKILL-like loss (defaults)"
if [ "${SKIP_REFORM:-0}" = 1 ]; then
  "$build/rdzv_bench" --nodes "$NODES" --repeats 5 --reform_nodes 0
else
  "$build/rdzv_bench" --nodes "$NODES" --repeats 5 --reform_nodes 8,64,256 --reform_repeats 3
  echo
  echo "## this project: re-form with heartbeat_interval=0.25 s, lease_timeout=1 s"
  "$build/rdzv_bench" --nodes 8 --repeats 1 --reform_nodes 8,64,256 --reform_repeats 3 \
    --heartbeat_ms 250 --lease_ms 1000
fi
for py in "${TORCH_PYS[@]}"; do
  echo
  echo "## reference: PyTorch $(torch_version "$py") c10d DynamicRendezvousHandler ($py)"
  # shellcheck disable=SC2086
  REPEATS=${REPEATS:-3} "$py" scripts/bench/rdzv_torch_reference.py $REF_NODES
done
