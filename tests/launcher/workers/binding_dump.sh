#!/bin/sh
# Writes what this worker is bound to into $OUT_DIR/binding_<LOCAL_RANK>.txt: the kernel's
# Cpus_allowed_list and Mems_allowed_list (cpuset), and the memory policy as numa_maps shows
# it for a mapping without a policy of its own ("default", or "bind:0" after set_mempolicy).
{
  grep -E '^(Cpus|Mems)_allowed_list:' /proc/self/status | tr -d '\t'
  echo "Policy:$(head -n 1 /proc/self/numa_maps | cut -d ' ' -f 2)"
} > "$OUT_DIR/binding_$LOCAL_RANK.txt"
