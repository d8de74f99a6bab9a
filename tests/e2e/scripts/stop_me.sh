#!/bin/sh
# Hang test worker with no progress source: records its pid for the test (which SIGSTOPs
# it) and idles; on a restart (attempt 1) it exits 0 at once.
echo "WORKER RANK=$RANK RESTARTS=$TORCHELASTIC_RESTART_COUNT PYTHONFAULTHANDLER=$PYTHONFAULTHANDLER"
if [ "$TORCHELASTIC_RESTART_COUNT" != "0" ]; then exit 0; fi
echo $$ > "$PID_DIR/$RANK.pid"
i=0
while [ $i -lt ${IDLE_SECONDS:-60} ]; do sleep 1; i=$((i + 1)); done
exit 0
