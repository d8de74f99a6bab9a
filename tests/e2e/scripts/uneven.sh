#!/bin/sh
# Scenario-matrix worker: runs for $NAP seconds ("done"), or fails with exit 3 halfway
# through when $CRASH is set. Prints its rank so the test can tell the nodes apart.
echo "start RANK=$RANK GROUP_RANK=$GROUP_RANK"
if [ -n "$CRASH" ]; then
  sleep "$(awk "BEGIN { print $NAP / 2 }")"
  echo "crash RANK=$RANK"
  exit 3
fi
sleep "$NAP"
echo "done RANK=$RANK"
