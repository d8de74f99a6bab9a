#!/bin/sh
# Heavy output: $LINES lines per rank, written by awk in block-buffered chunks so lines
# arrive split across reads.
awk -v r="$RANK" -v n="${LINES:-20000}" 'BEGIN {
  pad = "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz";
  for (i = 0; i < n; i++) printf "rank=%d line=%d %s\n", r, i, pad;
}'
printf "rank=%s tail-without-newline" "$RANK"
