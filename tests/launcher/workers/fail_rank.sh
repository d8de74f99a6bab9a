#!/bin/sh
# Records each attempt, then: rank $FAIL_RANK fails (exit $FAIL_CODE, or signal $FAIL_SIGNAL,
# after writing an error file when $ERROR_MESSAGE is set) until attempt $SUCCEED_AT; others
# wait to be stopped (or exit 0 on the succeeding attempt).
echo "$TORCHELASTIC_RESTART_COUNT" >> "$OUT_DIR/attempts_$LOCAL_RANK"
if [ -n "$SUCCEED_AT" ] && [ "$TORCHELASTIC_RESTART_COUNT" -ge "$SUCCEED_AT" ]; then
  echo "rank $RANK succeeded"
  exit 0
fi
if [ "$LOCAL_RANK" = "$FAIL_RANK" ]; then
  sleep 0.2  # let the other ranks start
  echo "rank $RANK failing" >&2
  if [ -n "$ERROR_MESSAGE" ]; then
    printf '{"message": {"message": "%s", "extraInfo": {"py_callstack": "Traceback: fail_rank.sh line 15", "timestamp": "%s"}}}' \
      "$ERROR_MESSAGE" "$(date +%s)" > "$TORCHELASTIC_ERROR_FILE"
  fi
  if [ -n "$FAIL_SIGNAL" ]; then kill -s "$FAIL_SIGNAL" $$; fi
  exit "$FAIL_CODE"
fi
sleep 60 &
wait $!
