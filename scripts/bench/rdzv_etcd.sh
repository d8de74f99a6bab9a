#!/usr/bin/env bash
# Rendezvous on etcd v3 (docs/benchmarks.md, docs/etcd.md): bench/rdzv_etcd against one etcd
# member this script starts (Debian's etcd 3.4, free loopback ports, a temp data dir) and our
# TCP store server, in the same run: agreement at 8..1024 simulated nodes, and node-loss
# detection with the default lease.
#   scripts/bench/rdzv_etcd.sh [build-dir] [extra rdzv_etcd_bench flags...]
set -euo pipefail
build=${1:-build}
shift || true
cd "$(dirname "$0")/../.."
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
client=$(free_port)
peer=$(free_port)
dir=$(mktemp -d)
trap 'kill $etcd_pid 2>/dev/null; wait $etcd_pid 2>/dev/null; rm -rf "$dir"' EXIT
etcd --name bench --data-dir "$dir/data" \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "bench=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do
  /usr/bin/python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$client/health', timeout=1)" 2>/dev/null && break
  sleep 0.1
done
echo "etcd $(etcd --version | head -1 | awk '{print $3}') on 127.0.0.1:$client (one member, default settings)"
echo
ulimit -n 65536 2>/dev/null || true
${PERF:-} "$build/rdzv_etcd_bench" --etcd "127.0.0.1:$client" "$@"
