#!/usr/bin/env bash
# The cost of the job secret (docs/store.md, "Our own extension: authentication"): ddpstore
# with and without --secret_file, alternating, CLIENTS connections (64) each proving the
# secret at connect or not; prints store_bench's lines (req_per_s, connect_p50_us, ...).
#   scripts/bench/store_auth.sh           # BUILD_DIR=build REPEATS=3 CLIENTS=64 REQS=3000
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
REPEATS="${REPEATS:-3}"
CLIENTS="${CLIENTS:-64}"
REQS="${REQS:-3000}"
for bin in "$BUILD_DIR/store_bench" "$BUILD_DIR/ddpstore"; do
  [[ -x "$bin" ]] || { echo "store_auth.sh: $bin not built" >&2; exit 1; }
done
OUT="$(mktemp -d)"
SERVER_PID=""
cleanup() { [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT
(umask 077; head -c 32 /dev/urandom | base64 >"$OUT/job.secret")

for r in $(seq 1 "$REPEATS"); do
  for auth in off on; do
    secret=()
    [[ $auth == on ]] && secret=(--secret_file "$OUT/job.secret")
    "$BUILD_DIR/ddpstore" --host 127.0.0.1 --port 0 "${secret[@]}" >"$OUT/port" 2>"$OUT/server.log" &
    SERVER_PID=$!
    for _ in $(seq 1 200); do [[ -s "$OUT/port" ]] && break; sleep 0.05; done
    port="$(head -1 "$OUT/port")"
    echo "run $r $("$BUILD_DIR/store_bench" --port "$port" --clients "$CLIENTS" --requests "$REQS" \
                    "${secret[@]}")"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
  done
done
