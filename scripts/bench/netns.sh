# shellcheck shell=bash
# Sourced by the drivers that measure PyTorch's store or rendezvous: runs the calling script
# again in a network namespace of its own, loopback only, unless BENCH_NETNS=0 or the machine
# does not allow one (then it says so and stays on the host network).
# Why: PyTorch looks names up where ddplaunch does not: its libuv TCPStore server calls
# getnameinfo on every client that connects, on its one event-loop thread, and its dynamic
# rendezvous resolves host names. On the development machine the resolver answers such a
# lookup in about 0.1-0.5 ms but drops about 1.5% of them (5 s timeout each): 4096 ranks'
# init took 408 s against PyTorch's server on the host network and 0.37 s in a namespace,
# 128 nodes' rendezvous 55.6 s and 5.3 s. In the namespace a lookup fails at once and the
# numeric address is used, so what is measured is the server and the algorithm.
#   . scripts/bench/netns.sh "scripts/bench/$(basename "$0")" "$@"   (after cd to the root)
# Sets BENCH_NETWORK ("own network namespace" or "host network") for the report's header.
if [[ "${BENCH_NETNS:-1}" == 1 && -z "${BENCH_IN_NETNS:-}" ]]; then
  if unshare -n true 2>/dev/null; then
    exec env BENCH_IN_NETNS=1 "$(dirname "${BASH_SOURCE[0]}")/netns_exec.sh" "$@"
  fi
  echo "netns.sh: no network namespace here (unshare -n failed); on the host network, so" \
    "PyTorch's name lookups go to this machine's resolver" >&2
fi
if [[ -n "${BENCH_IN_NETNS:-}" ]]; then BENCH_NETWORK="own network namespace"; else BENCH_NETWORK="host network"; fi
export BENCH_NETWORK
