#!/usr/bin/env bash
# A/B of two ddplaunch binaries on launch.sh's two timings, interleaved: each repeat measures
# both, the order alternating, so a noisy shared machine loads both alike. Prints every
# repeat and a summary: the median over repeats of each binary's per-repeat median, and the
# median of the per-repeat after/before ratios (above 1: the after binary is slower).
#   scripts/bench/launch_ab.sh BEFORE_DDPLAUNCH AFTER_DDPLAUNCH
#   REPEATS=9 RUNS=10 RESTARTS=10 BUILD_DIR=build (its launch_bench and launch_bench_worker)
# launch: hyperfine -N, 1 warm-up, RUNS runs of --nproc_per_node=8 --standalone /bin/true;
# restart: launch_bench restart, RESTARTS crashes of one of 4 workers (--max_restarts=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -eq 2 ]] || { sed -n 2,9p "$0" >&2; exit 2; }
BEFORE="$1"
AFTER="$2"
BUILD_DIR="${BUILD_DIR:-build}"
REPEATS="${REPEATS:-9}"
RUNS="${RUNS:-10}"
RESTARTS="${RESTARTS:-10}"
BENCH="$BUILD_DIR/launch_bench"
WORKER="$BUILD_DIR/launch_bench_worker"
for bin in "$BENCH" "$WORKER" "$BEFORE" "$AFTER"; do
  [[ -x "$bin" ]] || { echo "launch_ab.sh: $bin is not an executable" >&2; exit 1; }
done
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

launch_ms() {  # median ms of RUNS launches of $1
  hyperfine -N --warmup 1 --runs "$RUNS" --export-json "$OUT/h.json" \
    "$1 --nproc_per_node=8 --standalone /bin/true" >/dev/null 2>&1
  /usr/bin/python3 -c "import json,sys; print('%.2f' % (json.load(open(sys.argv[1]))['results'][0]['median']*1000))" "$OUT/h.json"
}
restart_ms() {  # median ms from a crash to all 4 restarted, over RESTARTS
  "$BENCH" restart "$RESTARTS" 4 -- "$1" --nproc_per_node=4 --standalone --max_restarts=1 "$WORKER" |
    sed -n 's/.*median=\([0-9.]*\).*/\1/p'
}

: >"$OUT/rows"
echo "repeat order launch_before launch_after restart_before restart_after (ms)"
for r in $(seq 1 "$REPEATS"); do
  if ((r % 2)); then order="before after"; else order="after before"; fi
  declare -A L=() R=()
  for which in $order; do
    bin="$BEFORE"
    [[ $which == after ]] && bin="$AFTER"
    L[$which]=$(launch_ms "$bin")
    R[$which]=$(restart_ms "$bin")
  done
  echo "$r ${order// /,} ${L[before]} ${L[after]} ${R[before]} ${R[after]}" | tee -a "$OUT/rows"
done
/usr/bin/python3 - "$OUT/rows" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def col(i): return [float(r[i]) for r in rows]
lb, la, rb, ra = col(2), col(3), col(4), col(5)
med = statistics.median
print()
print("| metric (median of %d repeats) | before | after | after / before (median of per-repeat ratios) |" % len(rows))
print("| --- | --- | --- | --- |")
print("| launch to exit, 8 x /bin/true (ms) | %.2f | %.2f | %.3f |" % (med(lb), med(la), med([a / b for a, b in zip(la, lb)])))
print("| crash to all 4 restarted (ms) | %.2f | %.2f | %.3f |" % (med(rb), med(ra), med([a / b for a, b in zip(ra, rb)])))
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
