#!/usr/bin/env bash
# A/B of two ddpstore binaries under the same load (store.sh's settings: legacy dialect,
# store_bench's io_uring engine, nice -15), interleaved: each repeat runs both, the order
# alternating, a fresh server each time. Prints every run and a summary: medians and the
# median of the per-repeat after/before ratios. For a machine too noisy for one-off runs.
#   scripts/bench/store_ab.sh BEFORE_DDPSTORE AFTER_DDPSTORE [server args, default --io epoll]
#   REPEATS=15 CLIENTS="1 64 1024" BUILD_DIR=build (its store_bench is the load generator)
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 2 ]] || { sed -n 2,7p "$0" >&2; exit 2; }
BEFORE="$1"
AFTER="$2"
shift 2
SERVER_ARGS=("$@")
[[ ${#SERVER_ARGS[@]} -gt 0 ]] || SERVER_ARGS=(--io epoll)
BUILD_DIR="${BUILD_DIR:-build}"
REPEATS="${REPEATS:-15}"
CLIENTS="${CLIENTS:-1 64 1024}"
BENCH="$BUILD_DIR/store_bench"
for bin in "$BENCH" "$BEFORE" "$AFTER"; do
  [[ -x "$bin" ]] || { echo "store_ab.sh: $bin is not an executable" >&2; exit 1; }
done
if nice -n -15 true 2>/dev/null; then RUN=(nice -n -15); else RUN=(); fi
ulimit -n "$(ulimit -Hn)"
# Every simulated client comes from 127.0.0.1: lift the per-address connection limit.
export DDPLAUNCH_STORE_MAX_CONNS_PER_PEER=${DDPLAUNCH_STORE_MAX_CONNS_PER_PEER:-1000000}
declare -A REQS=([1]=20000 [64]=10000 [1024]=1000)
OUT="$(mktemp -d)"
SERVER_PID=""
cleanup() { [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT

for r in $(seq 1 "$REPEATS"); do
  if ((r % 2)); then order="before after"; else order="after before"; fi
  for which in $order; do
    bin="$BEFORE"
    [[ $which == after ]] && bin="$AFTER"
    rm -f "$OUT/port"
    "${RUN[@]}" "$bin" "${SERVER_ARGS[@]}" --host 127.0.0.1 --port 0 >"$OUT/port" 2>"$OUT/server.log" &
    SERVER_PID=$!
    for _ in $(seq 1 200); do [[ -s "$OUT/port" ]] && break; sleep 0.05; done
    PORT="$(head -1 "$OUT/port")"
    [[ -n "$PORT" ]] || { echo "store_ab.sh: $bin did not start" >&2; cat "$OUT/server.log" >&2; exit 1; }
    for c in $CLIENTS; do
      before_ticks="$(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat")"
      line="$("${RUN[@]}" "$BENCH" --port "$PORT" --clients "$c" --requests "${REQS[$c]:-1000}" \
              --dialect legacy --io io_uring)"
      ticks=$(($(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat") - before_ticks))
      echo "run $r $which $line server_cpu_ticks=$ticks" | tee -a "$OUT/results"
    done
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  done
done

/usr/bin/python3 - "$OUT/results" <<'EOF'
import os, statistics as st, sys
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=") for x in f[3:])
    rows.setdefault((f[2], int(kv["clients"])), {})[int(f[1])] = kv
print("| clients | pairs | before req/s | after req/s | after/before (quartiles) | after faster "
      "| p50 us before / after | p99 us before / after | server CPU us/req before / after |")
for c in sorted({c for _, c in rows}):
    b, a = rows[("before", c)], rows[("after", c)]
    ratios = sorted(float(a[k]["req_per_s"]) / float(b[k]["req_per_s"]) for k in b)
    med = lambda d, key: st.median(float(x[key]) for x in d.values())
    cpu = lambda d: st.median(float(x["server_cpu_ticks"]) * tick_us / float(x["requests"])
                              for x in d.values())
    q = len(ratios) // 4
    print(f"| {c} | {len(ratios)} | {med(b, 'req_per_s'):,.0f} | {med(a, 'req_per_s'):,.0f} "
          f"| {st.median(ratios):.2f} ({ratios[q]:.2f} to {ratios[-1 - q]:.2f}) "
          f"| {sum(x > 1 for x in ratios)}/{len(ratios)} "
          f"| {med(b, 'p50_us'):,.0f} / {med(a, 'p50_us'):,.0f} "
          f"| {med(b, 'p99_us'):,.0f} / {med(a, 'p99_us'):,.0f} | {cpu(b):.1f} / {cpu(a):.1f} |")
EOF
