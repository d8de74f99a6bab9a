#!/usr/bin/env bash
# init_process_group at scale (docs/benchmarks.md): build/init_bench plays N ranks'
# init_process_group + store barrier (bench/init/rank_script.hpp) against ddpstore (io_uring,
# and its epoll fallback) and PyTorch's libuv TCPStore server (TORCH_PYTHON's torch), a fresh
# server per run, the servers alternating within each repeat. Per run: the time until every
# rank is through, each phase's p50/p99, the server's CPU time from the first connect until
# the last rank is through (init_bench --server-pid) and its RSS before the load and at its
# peak (VmHWM). Prints the raw lines, then the tables (scripts/bench/init_report.py).
#   scripts/bench/init.sh [build-dir]
#   env: RANKS ("1024 4096 16384"), REPEATS (3), SERVERS ("ours ours_epoll torch"),
#        TORCH_PYTHON (the torch 2.15 venv's python), INIT_ARGS (more init_bench options),
#        RUN_LIMIT_S (none: a run not done by then is reported as such and the next starts)
# One process may hold `ulimit -Hn` descriptors: N ranks need N in init_bench and N in the
# server, so N stays under that limit (20,000 on the development machine).
# Everything runs in a network namespace of its own (scripts/bench/netns.sh says why;
# BENCH_NETNS=0: the host's).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
. scripts/bench/netns.sh "scripts/bench/$(basename "$0")" "$@"
RANKS=${RANKS:-1024 4096 16384}
REPEATS=${REPEATS:-3}
SERVERS=${SERVERS:-ours ours_epoll torch}
TORCH_PYTHON=${TORCH_PYTHON:-/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python}
for bin in "$build/init_bench" "$build/ddpstore"; do
  [[ -x "$bin" ]] || { echo "init.sh: $bin not built (cmake --build $build --target init_bench ddpstore)" >&2; exit 1; }
done
ulimit -n "$(ulimit -Hn)"
# Every rank comes from loopback: lift ddpstore's per-address connection limit.
export DDPLAUNCH_STORE_MAX_CONNS_PER_PEER=${DDPLAUNCH_STORE_MAX_CONNS_PER_PEER:-1000000}
OUT=$(mktemp -d)
SERVER_PID=""
cleanup() { [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT

server_command() {
  case $1 in
    ours) echo "$build/ddpstore --io auto --host 127.0.0.1 --port 0" ;;
    ours_epoll) echo "$build/ddpstore --io epoll --host 127.0.0.1 --port 0" ;;
    torch) echo "$TORCH_PYTHON scripts/bench/store_torch_server.py" ;;
    *) echo "init.sh: unknown server $1" >&2; exit 2 ;;
  esac
}
start_server() {  # $1 = name; sets SERVER_PID and PORT
  rm -f "$OUT/port"
  local cmd
  read -r -a cmd <<<"$(server_command "$1")"
  "${cmd[@]}" >"$OUT/port" 2>"$OUT/server.log" &
  SERVER_PID=$!
  for _ in $(seq 1 600); do [[ -s "$OUT/port" ]] && break; sleep 0.05; done
  PORT=$(head -1 "$OUT/port")
  [[ -n "$PORT" ]] || { echo "init.sh: $1 did not start" >&2; cat "$OUT/server.log" >&2; exit 1; }
}
status_kib() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$SERVER_PID/status"; }

echo "# init.sh: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg), $BENCH_NETWORK"
for r in $(seq 1 "$REPEATS"); do
  for n in $RANKS; do
    for server in $SERVERS; do
      start_server "$server"
      idle=$(status_kib VmRSS)
      rc=0
      # shellcheck disable=SC2086  # INIT_ARGS is a list of options
      line=$(timeout "${RUN_LIMIT_S:-0}" "$build/init_bench" --port "$PORT" --ranks "$n" \
        --server-pid "$SERVER_PID" ${INIT_ARGS:-} | tail -1) || rc=$?
      if [[ $rc == 124 ]]; then
        echo "run $r $server timeout ranks=$n limit_s=$RUN_LIMIT_S" | tee -a "$OUT/results"
        kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
        continue
      fi
      [[ $rc == 0 ]] || { echo "init.sh: init_bench failed against $server at $n ranks" >&2; exit 1; }
      hwm=$(status_kib VmHWM)
      echo "run $r $server $line server_rss_idle_kib=$idle server_hwm_kib=$hwm" | tee -a "$OUT/results"
      kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    done
  done
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 scripts/bench/init_report.py "$OUT/results"
