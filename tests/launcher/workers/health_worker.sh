#!/bin/sh
# A worker for the health endpoint's tests. Each writes its pid to $OUT_DIR/pid_<attempt>_<rank>.
# In attempt 0, rank 0 exits 3 once $OUT_DIR/fail exists; the other ranks, sent SIGTERM, touch
# $OUT_DIR/term_<rank> and exit only once $OUT_DIR/release exists (the agent stays STOPPING
# until the test lets it go). In later attempts every rank sleeps until it is stopped.
out="$OUT_DIR"
attempt="$TORCHELASTIC_RESTART_COUNT"
echo $$ > "$out/pid_${attempt}_${RANK}.tmp" && mv "$out/pid_${attempt}_${RANK}.tmp" "$out/pid_${attempt}_${RANK}"
if [ "$attempt" = 0 ]; then
  if [ "$RANK" = 0 ]; then
    while [ ! -e "$out/fail" ]; do sleep 0.05; done
    exit 3
  fi
  trap 'touch "$out/term_$RANK"; while [ ! -e "$out/release" ]; do sleep 0.05; done; exit 0' TERM
fi
while :; do sleep 0.1; done
