#!/usr/bin/env bash
# Store benchmark: ddpstore (io_uring, and its epoll fallback) vs PyTorch's own TCPStore server
# (TORCH_PYTHON's torch: the 2.15 venv by default, its libuv server; /usr/bin/python3 for
# Debian's 1.13 and its legacy server), with the same load generator in the dialect that
# server speaks (2.2+ with VALIDATE, or 1.13's), at CLIENTS connections; medians of REPEATS
# runs, the servers alternating. store_floor_server (canned replies, no store) measures the
# floor of each I/O engine: the most a server built on it can serve on this machine under this
# load. Prints the tables (scripts/bench/store_report.py), with each server's CPU time per
# request: a server's capacity when it has a core to itself, whatever shares the machine.
#   scripts/bench/store.sh                # BUILD_DIR=build REPEATS=3 CLIENTS="1 64 1024" STORE_NICE=-15
set -euo pipefail
cd "$(dirname "$0")/../.."
# In a network namespace of its own (scripts/bench/netns.sh; BENCH_NETNS=0: the host's):
# PyTorch's server looks up every client's name when it connects, and 1024 clients met this
# machine's resolver's 5 s timeouts for minutes before the clock even started.
. scripts/bench/netns.sh "scripts/bench/$(basename "$0")" "$@"
BUILD_DIR="${BUILD_DIR:-build}"
REPEATS="${REPEATS:-3}"
# Servers and load generator run at nice -15 (a fallback to 0 where that is not allowed), so
# other work on the machine disturbs them less. Not SCHED_FIFO: with the load generator and
# a server each keeping a core busy, real-time throttling (sched_rt_runtime_us, 950 ms in
# every second) stops both for 50 ms a second, which lands in every p99.
# STORE_NICE=0 keeps the caller's priority (a shared machine: `nice -n 10 scripts/bench/store.sh`).
STORE_NICE=${STORE_NICE:--15}
if [[ $STORE_NICE != 0 ]] && nice -n "$STORE_NICE" true 2>/dev/null; then
  RUN=(nice -n "$STORE_NICE"); PRIORITY="nice $STORE_NICE"
else
  RUN=(); PRIORITY="nice $(nice)"
fi
TORCH_PYTHON=${TORCH_PYTHON:-/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python}
[[ -x "$TORCH_PYTHON" ]] || TORCH_PYTHON=/usr/bin/python3
TORCH_VERSION=$("$TORCH_PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')
# PyTorch 2.2 and later speak the VALIDATE dialect only; 1.13 only the legacy one.
case $TORCH_VERSION in 1.*|2.0.*|2.1.*) DIALECT=legacy ;; *) DIALECT=v2 ;; esac
CLIENTS=${CLIENTS:-1 64 1024}
BENCH="$BUILD_DIR/store_bench"
DDPSTORE="$BUILD_DIR/ddpstore"
FLOOR="$BUILD_DIR/store_floor_server"
for bin in "$BENCH" "$DDPSTORE" "$FLOOR"; do
  [[ -x "$bin" ]] || { echo "store.sh: $bin not built (cmake --build $BUILD_DIR --target store_bench ddpstore store_floor_server)" >&2; exit 1; }
done
ulimit -n "$(ulimit -Hn)"
# Every simulated client comes from 127.0.0.1: lift the per-address connection limit.
export DDPLAUNCH_STORE_MAX_CONNS_PER_PEER=${DDPLAUNCH_STORE_MAX_CONNS_PER_PEER:-1000000}

# Requests per client; REQS_1=... REQS_64=... REQS_1024=... shorten a trial run.
declare -A REQS=([1]=${REQS_1:-20000} [64]=${REQS_64:-10000} [1024]=${REQS_1024:-1000})
# name: server command | load generator engine | client counts
CONFIGS=(
  "ours|$DDPSTORE --io auto --host 127.0.0.1 --port 0|io_uring|$CLIENTS"
  "ours_epoll|$DDPSTORE --io epoll --host 127.0.0.1 --port 0|io_uring|$CLIENTS"
  "torch|$TORCH_PYTHON scripts/bench/store_torch_server.py|io_uring|$CLIENTS"
  "floor|$FLOOR --io io_uring --dialect $DIALECT|io_uring|$CLIENTS"
  "floor_epoll|$FLOOR --io epoll --dialect $DIALECT|io_uring|$CLIENTS"
)
if [[ " $CLIENTS " == *" 64 "* ]]; then
  CONFIGS+=("ours_epoll_load|$DDPSTORE --io auto --host 127.0.0.1 --port 0|epoll|64"
            "torch_epoll_load|$TORCH_PYTHON scripts/bench/store_torch_server.py|epoll|64")
fi
OUT="$(mktemp -d)"
SERVER_PID=""
cleanup() { [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT

start_server() {  # $1 = command line; sets SERVER_PID and PORT
  local portfile="$OUT/port"
  rm -f "$portfile"
  # shellcheck disable=SC2086  # the command line is split on purpose
  "${RUN[@]}" $1 >"$portfile" 2>"$OUT/server.log" &
  SERVER_PID=$!
  for _ in $(seq 1 600); do [[ -s "$portfile" ]] && break; sleep 0.05; done
  PORT="$(head -1 "$portfile")"
  [[ -n "$PORT" ]] || { echo "store.sh: '$1' did not start" >&2; cat "$OUT/server.log" >&2; exit 1; }
}
# utime + stime of the server process (all threads), in clock ticks.
server_cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
stop_server() { kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; }

echo "# store.sh: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg), PyTorch $TORCH_VERSION ($DIALECT dialect), $BENCH_NETWORK"
for r in $(seq 1 "$REPEATS"); do
  for config in "${CONFIGS[@]}"; do
    IFS='|' read -r name command load clients <<<"$config"
    start_server "$command"
    for c in $clients; do
      cpu_before="$(server_cpu_ticks)"
      line="$("${RUN[@]}" "$BENCH" --port "$PORT" --clients "$c" --requests "${REQS[$c]}" \
              --dialect "$DIALECT" --io "$load")"
      cpu_ticks=$(( $(server_cpu_ticks) - cpu_before ))
      echo "run $r $name $line server_cpu_ticks=$cpu_ticks" | tee -a "$OUT/results"
    done
    stop_server
    [[ $name == torch ]] && cp "$OUT/server.log" "$OUT/torch.log"
  done
done

echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
COMMAND="BUILD_DIR=$BUILD_DIR REPEATS=$REPEATS CLIENTS=\"$CLIENTS\" scripts/bench/store.sh"
python3 scripts/bench/store_report.py "$OUT/results" "$COMMAND" "$PRIORITY" \
  "PyTorch $TORCH_VERSION ($(grep -o '[a-z]* server' "$OUT/torch.log" | head -1 || echo server))" \
  "$DIALECT"
