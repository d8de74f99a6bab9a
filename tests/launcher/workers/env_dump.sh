#!/bin/sh
# Writes this worker's environment to $OUT_DIR/env_<LOCAL_RANK>.txt.
env > "$OUT_DIR/env_$LOCAL_RANK.txt"
