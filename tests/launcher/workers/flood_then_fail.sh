#!/bin/sh
# Local rank 0 floods stdout (or FLOOD_FD) with FLOOD_LINES lines of 100 bytes, then waits;
# local rank 1 waits for the flood to be written (at most 10 s), notes when it exits, exits 5.
if [ "$LOCAL_RANK" = 0 ]; then
  yes "$(printf '%099d' 0)" | head -n "$FLOOD_LINES" >&"${FLOOD_FD:-1}"
  touch "$OUT_DIR/flooded"
  exec sleep 60
fi
i=0
while [ ! -e "$OUT_DIR/flooded" ] && [ "$i" -lt 200 ]; do
  sleep 0.05
  i=$((i + 1))
done
sleep 1
date +%s.%N > "$OUT_DIR/exit_time_1"
exit 5
