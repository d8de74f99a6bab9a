#!/bin/sh
# Test worker: prints its identity, records its pid, then exits 0 once the group has
# $EXIT_AT_NODES nodes (or at once when unset); otherwise waits to be restarted.
if [ -n "$PID_DIR" ]; then echo $$ > "$PID_DIR/$NODE_TAG-$LOCAL_RANK.pid"; fi
echo "WORKER RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT RESTARTS=$TORCHELASTIC_RESTART_COUNT RUN_ID=$TORCHELASTIC_RUN_ID"
if [ -z "$EXIT_AT_NODES" ] || [ "$GROUP_WORLD_SIZE" = "$EXIT_AT_NODES" ]; then exit 0; fi
sleep 120 &
wait
