#!/usr/bin/env bash
# Runs COMMAND [ARGS...] in a network namespace of its own, loopback only and up: `ip` where
# there is one, else lo_up.py (the GPU machine's image has no iproute2). Callers check first
# that `unshare -n` works here (scripts/bench/netns.sh, scripts/gpu/run.sh, scripts/test.sh).
#   netns_exec.sh COMMAND [ARGS...]
set -euo pipefail
lo_up_py="$(cd "$(dirname "$0")" && pwd)/lo_up.py"
# shellcheck disable=SC2016  # expanded by the inner bash ($0: lo_up.py, $@: the command)
exec unshare -n bash -c '{ ip link set lo up 2>/dev/null || python3 "$0"; } && exec "$@"' \
  "$lo_up_py" "$@"
