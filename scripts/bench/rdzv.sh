#!/usr/bin/env bash
# Rendezvous at scale (docs/benchmarks.md): bench/rdzv (this project's elastic rendezvous,
# 8..16384 simulated nodes against one store server in a child process) and, in the same
# run, PyTorch's own c10d dynamic rendezvous (the reference) on the node counts it can do in
# bounded time, once per PyTorch of TORCH_PYTHONS (scripts/bench/torch_refs.sh; here the torch
# 2.15 venv by default). N nodes need N descriptors in each of the two processes, so NODES
# stops where `ulimit -Hn` does (20,000 here: 65,536 nodes are for a bigger machine).
#   scripts/bench/rdzv.sh [build-dir]
#   env: NODES (this project's node counts), REF_NODES (the reference's: 8 32 64 128 256 512),
#        REPEATS (the reference's, 3), REF_LIMIT_S (300: a reference size not done by then
#        ends the reference's series), SKIP_REFORM=1 (only the agreement)
# Both run in a network namespace of its own (scripts/bench/netns.sh says why; BENCH_NETNS=0:
# the host's).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
. scripts/bench/netns.sh "scripts/bench/$(basename "$0")" "$@"
TORCH_PYTHONS=${TORCH_PYTHONS:-/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python}
. scripts/bench/torch_refs.sh
NODES=${NODES:-8,32,64,128,512,1024,2048,4096,8192,16384}
REF_NODES=${REF_NODES:-8 32 64 128 256 512}
REF_LIMIT_S=${REF_LIMIT_S:-300}
ulimit -n "$(ulimit -Hn)"
echo "# rdzv.sh: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg), ulimit -Hn $(ulimit -Hn), $BENCH_NETWORK"
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
  version=$(torch_version "$py")
  echo "| nodes | torch $version c10d median (s) | min | max |"
  echo "| ---: | ---: | ---: | ---: |"
  for n in $REF_NODES; do
    if ! REPEATS=${REPEATS:-3} timeout "$REF_LIMIT_S" "$py" scripts/bench/rdzv_torch_reference.py \
        --rows "$n"; then
      echo "| $n | not done within ${REF_LIMIT_S} s (all repeats); larger sizes not tried | | |"
      break
    fi
  done
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
