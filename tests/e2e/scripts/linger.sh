#!/bin/sh
# Test worker: prints its identity (and whether it got the job secret), stays up $LINGER
# seconds (default 6) so others can try to disturb the job, then exits 0.
echo "WORKER RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE RESTARTS=$TORCHELASTIC_RESTART_COUNT SECRET=${DDPLAUNCH_SECRET:+set}"
sleep "${LINGER:-6}"
exit 0
