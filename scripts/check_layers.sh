#!/usr/bin/env bash
# Fails when a lower layer includes a higher one (docs/architecture.md, "Layers"):
#   common is the lowest layer: it includes nothing of rendezvous/, launcher/,
#   worker_runtime/ or trainer/ (only the standard library and the system);
#   common <- rendezvous/store <- rendezvous/store/server
#   common <- rendezvous/store <- rendezvous/store/etcd (the etcd v3 client and store)
#   common <- rendezvous/store <- rendezvous (algorithms)
#   launcher uses all of the above; worker_runtime uses common, the store and its server;
#   trainer uses worker_runtime (and common) only.
# Inside launcher/, folders by concern, each including only those below it (lowest first):
#   binding < config < process < output, hang, health, rendezvous_setup < agent < the top
#   (main.cpp and launcher.cpp, the composition root). docs/architecture.md says what each owns.
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

# launcher/'s own layers: each folder may include only the folders listed before it.
launcher_layers=(binding config process output hang health rendezvous_setup agent)
launcher_allowed=(
  ''                               # binding: the machine and binding arithmetic
  'binding'                        # config: argv and PET_* in, a validated config out
  'binding|config'                 # process: spawning, signals, exits, argv and env
  'config|process'                 # output: what users read
  'process'                        # hang: detection sources and analysis (/proc via process/)
  'output'                         # health: the endpoint and the metrics view (event names)
  'config'                         # rendezvous_setup: the factory, etcd, the workers' store
  'binding|config|process|output|hang|health|rendezvous_setup'  # agent: the state machine
)
for i in "${!launcher_layers[@]}"; do
  layer=${launcher_layers[$i]}
  [ -d "launcher/$layer" ] || continue
  mapfile -t layer_files < <(files "launcher/$layer")
  others=()
  for other in "${launcher_layers[@]}"; do
    [ "$other" = "$layer" ] && continue
    if [ -n "${launcher_allowed[$i]}" ] && [[ "|${launcher_allowed[$i]}|" == *"|$other|"* ]]; then
      continue
    fi
    others+=("launcher/$other/")
  done
  # Nor the top (the composition root).
  others+=('launcher/[a-z_]+\.hpp')
  forbidden=$(IFS='|'; echo "${others[*]}")
  check "launcher/$layer/ includes a launcher folder it may not (allowed: ${launcher_allowed[$i]:-none})" \
    "$forbidden" "${layer_files[@]}"
done
# No file of launcher/ outside a folder but main.cpp and the composition root.
loose=$(find launcher -maxdepth 1 \( -name '*.cpp' -o -name '*.hpp' \) \
  ! -name main.cpp ! -name launcher.cpp ! -name launcher.hpp | sort)
if [ -n "$loose" ]; then
  echo "check_layers: launcher/ files outside a folder by concern (docs/architecture.md):"
  echo "$loose" | sed 's/^/  /'
  status=1
fi

if [ $status -eq 0 ]; then echo "check_layers: every include points down"; fi
exit $status
