#!/bin/bash
# Records the first signal it gets in $OUT_DIR/signal_<LOCAL_RANK>, then exits 0.
for sig in TERM INT HUP QUIT USR1 USR2; do
  trap "echo $sig > \"$OUT_DIR/signal_$LOCAL_RANK\"; exit 0" "$sig"
done
touch "$OUT_DIR/ready_$LOCAL_RANK"
# Without a signal, stop when the test says so (or after 60 s).
for _ in $(seq 600); do
  [ -e "$OUT_DIR/go" ] && { echo "rank $RANK done"; exit 0; }
  sleep 0.1 &
  wait $!
done
exit 1
