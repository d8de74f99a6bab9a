#!/bin/sh
# A wrapper script that starts a long-lived child of its own, as launch wrappers do.
sleep 300 &
echo $! > "$OUT_DIR/child_$LOCAL_RANK"
echo $$ > "$OUT_DIR/wrapper_$LOCAL_RANK"
if [ "$LOCAL_RANK" = "$FAIL_RANK" ]; then sleep 0.3; exit 1; fi
wait
