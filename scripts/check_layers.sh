#!/usr/bin/env bash
# Fails when a lower layer includes a higher one (docs/architecture.md, "Layers"):
#   common is the lowest layer: it includes nothing of rendezvous/, launcher/,
#   worker_runtime/ or trainer/ (only the standard library and the system);
#   common <- rendezvous/store <- rendezvous/store/server
#   common <- rendezvous/store <- rendezvous/store/etcd (the etcd v3 client and store)
#   common <- rendezvous/store <- rendezvous (algorithms)
#   launcher uses all of the above; worker_runtime uses common, the store and its server;
#   trainer uses worker_runtime (and common) only.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
# check NAME FILES... -- FORBIDDEN-REGEX: every #include "..." of FILES must not match.
check() {
  local what=$1 pattern=$2
  shift 2
  local hits
  hits=$(grep -HnE '^#include "('"$pattern"')' "$@" 2>/dev/null || true)
  if [ -n "$hits" ]; then
    echo "check_layers: $what:"
    echo "$hits" | sed 's/^/  /'
    status=1
  fi
}

files() { find "$@" -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' | sort; }
top_rdzv='rendezvous/[a-z_]+\.hpp'  # the algorithms: files directly in rendezvous/

mapfile -t common < <(files common)
mapfile -t store < <(find rendezvous/store -maxdepth 1 \( -name '*.hpp' -o -name '*.cpp' \) | sort)
mapfile -t server < <(files rendezvous/store/server)
mapfile -t etcd < <(files rendezvous/store/etcd)
mapfile -t rdzv < <(find rendezvous -maxdepth 1 \( -name '*.hpp' -o -name '*.cpp' \) | sort)
mapfile -t runtime < <(files worker_runtime)
mapfile -t launcher < <(files launcher)
mapfile -t trainer < <(files trainer)

check "common/ (the lowest layer) includes a module above it" \
  'rendezvous/|launcher/|worker_runtime/|trainer/|bench/|tests/' "${common[@]}"
check "rendezvous/store/ (the clients) includes the server, the algorithms or a module above" \
  "rendezvous/store/server/|$top_rdzv|launcher/|worker_runtime/|trainer/" "${store[@]}"
check "rendezvous/store/etcd/ (a client) includes the server, the algorithms or a module above" \
  "rendezvous/store/server/|$top_rdzv|launcher/|worker_runtime/|trainer/" "${etcd[@]}"
check "rendezvous/store/server/ includes the rendezvous algorithms or a module above" \
  "$top_rdzv|launcher/|worker_runtime/|trainer/" "${server[@]}"
check "rendezvous/ (the algorithms) includes the store server or a module above" \
  'rendezvous/store/server/|launcher/|worker_runtime/|trainer/' "${rdzv[@]}"
check "worker_runtime/ includes the agent, the rendezvous algorithms or the trainer" \
  "launcher/|$top_rdzv|trainer/" "${runtime[@]}"
check "launcher/ includes the worker runtime or the trainer" 'worker_runtime/|trainer/' \
  "${launcher[@]}"
check "trainer/ includes the agent or the store" 'launcher/|rendezvous/' "${trainer[@]}"

if [ $status -eq 0 ]; then echo "check_layers: every include points down"; fi
exit $status
