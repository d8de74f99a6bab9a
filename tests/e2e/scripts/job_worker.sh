#!/bin/sh
# Worker of the job-wide failure tests (netns_e2e_test.cpp). Prints its identity and records
# its pid in $PID_DIR, then:
#   rank $CRASH_RANK exits 3 after $CRASH_AFTER s (default 0.5) in every attempt below
#   $CRASH_ATTEMPTS (default 1);
#   every other rank sleeps $NAP s (default 300: it blocks, as in a collective waiting for a
#   dead peer) and prints DONE; with $IGNORE_TERM set it ignores SIGTERM too, as a process
#   stuck in a driver call may, so only SIGKILL ends it.
if [ -n "$PID_DIR" ]; then echo $$ > "$PID_DIR/$RANK-$TORCHELASTIC_RESTART_COUNT.pid"; fi
echo "WORKER RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE RESTARTS=$TORCHELASTIC_RESTART_COUNT"
if [ "$RANK" = "$CRASH_RANK" ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt "${CRASH_ATTEMPTS:-1}" ]; then
  sleep "${CRASH_AFTER:-0.5}"
  echo "CRASH RANK=$RANK"
  exit 3
fi
if [ -n "$IGNORE_TERM" ]; then trap '' TERM; fi
sleep "${NAP:-300}"
echo "DONE RANK=$RANK"
