#!/usr/bin/env bash
# Hang detection (docs/hangs.md), two measurements:
#  1. Detection latency of torchrun's file timer: rank 1 of 2 arms expires(after=1) around a
#     sleep that never ends (bench/hang/timer_worker.py). "reaped" = deadline -> the worker
#     is gone; "restarted" = deadline -> rank 0 of the restarted group runs. ddplaunch vs
#     Debian's torchrun 1.13 (-r 1 -t 1), interleaved, medians over REPEATS runs.
#  2. The native trainer's samples/s with progress reporting on (--hang_timeout 600: the
#     runtime writes a progress line per step and per collective) and off, interleaved.
# Usage: scripts/bench/hang.sh   (env: BUILD_DIR=build REPEATS=7 STEPS=600)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
REPEATS=${REPEATS:-7}
STEPS=${STEPS:-600}
PY=/usr/bin/python3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }

timer_run() {  # launcher outdir
  local out=$2
  mkdir -p "$out"
  if [ "$1" = ddplaunch ]; then
    OUT=$out TORCHELASTIC_ENABLE_FILE_TIMER=1 PYTHON_EXEC=$PY "$BUILD_DIR/ddplaunch" --standalone \
      --nproc_per_node 2 --max_restarts 1 --stop_timeout 1 bench/hang/timer_worker.py \
      > "$out/log" 2>&1 || true
  else
    OUT=$out TORCHELASTIC_ENABLE_FILE_TIMER=1 "$PY" -m torch.distributed.run -r 1 -t 1 \
      --standalone --nproc_per_node 2 --max_restarts 1 bench/hang/timer_worker.py \
      > "$out/log" 2>&1 || true
  fi
  if [ -f "$out/deadline" ] && [ -f "$out/reaped" ] && [ -f "$out/restarted" ]; then
    awk -v d="$(cat "$out/deadline")" -v r="$(cat "$out/reaped")" -v s="$(cat "$out/restarted")" \
      'BEGIN {printf "%.1f %.1f\n", (r - d) * 1000, (s - d) * 1000}'
  else
    echo "hang bench: $1 run in $out left no timings:" >&2
    tail -n 15 "$out/log" >&2
  fi
}

train_rate() {  # extra ddplaunch args...
  "$BUILD_DIR/ddplaunch" --standalone --nproc_per_node 2 "$@" "$BUILD_DIR/train" --data synthetic \
    --synthetic_rows 140000 --synthetic_features 64 --synthetic_classes 10 --hidden 256,256 \
    --batch_size 64 --optimizer adamw --max_steps "$STEPS" --log_every 50 --blas_threads 1 2>&1 |
    grep -o 'samples/s [0-9.]*' | awk 'NR > 1 {print $2}' | median
}

for i in $(seq "$REPEATS"); do
  timer_run ddplaunch "$WORK/d$i" >> "$WORK/ddplaunch.timer"
  timer_run torchrun "$WORK/t$i" >> "$WORK/torchrun.timer"
  train_rate >> "$WORK/off.rate"
  train_rate --hang_timeout 600 >> "$WORK/on.rate"
done

echo "## file timer: deadline -> reaped / -> restarted group (ms, median of $REPEATS runs)"
echo "| launcher | reaped | restarted | runs |"
echo "|---|---|---|---|"
for l in ddplaunch torchrun; do
  printf '| %s | %s | %s | %s |\n' "$l" "$(awk '{print $1}' "$WORK/$l.timer" | median)" \
    "$(awk '{print $2}' "$WORK/$l.timer" | median)" "$(wc -l < "$WORK/$l.timer")"
done
echo
echo "## native trainer, 2 ranks, progress reporting off vs on (samples/s, median of $REPEATS runs)"
off=$(median < "$WORK/off.rate")
on=$(median < "$WORK/on.rate")
echo "| progress reporting | samples/s |"
echo "|---|---|"
echo "| off | $off |"
echo "| on (--hang_timeout 600) | $on |"
awk -v a="$on" -v b="$off" 'BEGIN {printf "\non/off = %.3f\n", a / b}'
