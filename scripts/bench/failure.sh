#!/usr/bin/env bash
# Job-wide failures and node loss (issue 14; docs/benchmarks.md, "Job-wide failures and node
# loss"), in one run:
#  1. build/failure_bench: N simulated agents (threads) against one store server: a failure
#     record reaching every node, every node in its next round, a killed agent's loss, a round
#     left alone (false alarms); then restarts back to back, and the lease path with the
#     default last call;
#  2. real ddplaunch agents on loopback (3 nodes, --nproc_per_node 1, the worker
#     bench/failure/node_worker.sh): a worker of node c exits 3 (static and elastic 3:3, --max_restarts 1);
#     agent c SIGKILLed (elastic 2:3); times from the agents' --events_file and the workers';
#  3. a cut link: three hosts from network namespaces on a bridge, elastic 2:3, host b's veth
#     set down (its own end, then the switch's end);
#  4. the reference: torchrun (c10d) on the loopback scenarios, once per PyTorch of
#     TORCH_PYTHONS (scripts/bench/torch_refs.sh; default Debian's 1.13).
# Every wait is bounded; about 10 minutes in all.
#   scripts/bench/failure.sh [build-dir]
#   env: REPEATS=5 (end-to-end runs per row), TORCH_REPEATS=2, NETNS_REPEATS=3,
#        BENCH_ARGS (extra failure_bench flags), SKIP_BENCH=1, SKIP_E2E=1, SKIP_TORCH=1,
#        KEEP=1 (keep the runs' logs and events)
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
. scripts/bench/torch_refs.sh
root=$PWD
build=$(cd "$build" && pwd)
REPEATS=${REPEATS:-5}
TORCH_REPEATS=${TORCH_REPEATS:-2}
NETNS_REPEATS=${NETNS_REPEATS:-3}
PY=/usr/bin/python3
WORKER=$root/bench/failure/node_worker.sh
WORK=$(mktemp -d /tmp/failbench.XXXXXX)
NS_PREFIX=failbench-$$-
NETNS_UP=0
export FB_AFTER=1

# Agents are started in sessions of their own (setsid), so a process group kill reaches an
# agent and what it spawned; each one's pid and, once it ended, its exit status are files.
cleanup() {
  for f in "$WORK"/*/pid.*; do
    [ -f "$f" ] || continue
    kill -9 -- "-$(cat "$f")" 2> /dev/null || true
  done
  if [ "$NETNS_UP" = 1 ]; then netns_teardown; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { echo "$EPOCHREALTIME"; }
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# ms FROM TO: milliseconds between two unix times ("nan" when either is missing).
ms() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "nan"; else printf "%.1f\n", (b - a) * 1000 }'; }
# wait_until SECONDS COMMAND...: polls every 20 ms; false when it never held.
wait_until() {
  local limit=$1
  shift
  local end=$((SECONDS + limit))
  until "$@"; do
    [ $SECONDS -ge $end ] && return 1
    sleep 0.02
  done
}
# start DIR TAG COMMAND...: one agent in a session of its own (bash writes its pid, which is
# the session's id, then becomes setsid, then COMMAND: the pid stays the agent's unless
# COMMAND forks, as ip netns exec does).
start() {
  local dir=$1 tag=$2
  shift 2
  (
    set +e
    NODE_TAG=$tag FB_DIR=$dir bash -c 'echo $$ > "$0"; exec setsid "$@"' "$dir/pid.$tag" "$@" \
      > "$dir/log.$tag" 2>&1
    echo $? > "$dir/rc.$tag"
  ) 2> /dev/null &
  wait_until 10 test -s "$dir/pid.$tag"
}
agent_pid() { cat "$1/pid.$2"; }
ended() { local d=$1 t; shift; for t in "$@"; do [ -f "$d/rc.$t" ] || return 1; done; }
# finish DIR SECONDS TAGS...: waits for those agents to end, then kills whatever is left.
finish() {
  local dir=$1 limit=$2
  shift 2
  wait_until "$limit" ended "$dir" "$@" || true
  for f in "$dir"/pid.*; do kill -9 -- "-$(cat "$f")" 2> /dev/null || true; done
  wait_until 10 ended "$dir" a b c || true
}
lines_at_least() { [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ]; }
# nth_time FILE N: the time on line N of a worker's start or term file.
nth_time() { [ -f "$1" ] && sed -n "${2}p" "$1" | awk '{print $1}'; }
# latest T...: the largest of the times given ("" when one is missing).
latest() {
  local t best=""
  for t in "$@"; do
    [ -z "$t" ] && { echo ""; return; }
    best=$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "" || b > a) ? b : a }')
  done
  echo "$best"
}
# earliest T...: the smallest of the times given that are there ("" when none is).
earliest() {
  local t best=""
  for t in "$@"; do
    [ -z "$t" ] && continue
    best=$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')
  done
  echo "$best"
}
# event DIR TAG EVENT [RESTART_COUNT]: the time of the agent's first such event.
event() {
  local file=$1/events.$2
  [ -f "$file" ] || return 0
  jq -r --arg e "$3" --argjson r "${4:-null}" \
    'select(.event == $e and ($r == null or .restart_count == $r)) | .time' "$file" | head -n 1
}
fail_run() {
  echo "  run $1 gave no timings; agent logs:" >&2
  for f in "$2"/log.*; do echo "  --- $f" >&2; tail -n 8 "$f" | sed 's/^/    /' >&2; done
}
# stats FILE COLUMN: median, min and max of a results column ("nan" runs left out).
stats() {
  [ -f "$1" ] || { echo "-"; return 0; }
  awk -v c="$2" '$c != "nan" {print $c}' "$1" 2> /dev/null | sort -g |
    awk '{a[NR] = $1} END { if (NR == 0) { print "-"; exit }
         m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
         printf "%.1f (%.1f to %.1f)\n", m, a[1], a[NR] }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.0fx\n", a / b; else print "-" }'; }
median_of() { stats "$1" "$2" | awk '{print $1}'; }
runs() { if [ -f "$1" ]; then awk '$1 != "nan"' "$1" | wc -l; else echo 0; fi; }

ddp_elastic() {  # PORT ADDR ID NNODES [rdzv_conf]
  echo --nnodes "$4" --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$1" --rdzv_id "$3" \
    --local_addr "$2" ${5:+--rdzv_conf "$5"}
}

# --- ddplaunch: a worker of node c exits 3 -------------------------------------------------
# columns: every node's job_failure, a/b workers exited, every node's worker_start of the
# restarted group (agents' events); a/b workers got SIGTERM, every restarted worker runs
# (workers' own clocks) - all in ms after the crash.
ddp_crash() {  # static|elastic RUN
  local kind=$1 i=$2 d=$WORK/ddp_crash_${1}_$2 port tag k args
  mkdir -p "$d"
  port=$(free_port)
  for k in 0 1 2; do
    tag=$(echo a b c | cut -d' ' -f$((k + 1)))
    if [ "$kind" = static ]; then
      args="--nnodes 3 --node_rank $k --master_addr 127.0.0.1 --master_port $port --local_addr 127.0.0.$((k + 1))"
    else
      args=$(ddp_elastic "$port" "127.0.0.$((k + 1))" "crash$i" 3:3)
    fi
    # shellcheck disable=SC2086
    start "$d" "$tag" env FB_MODE=crash FB_CRASH_NODE=c FB_NODES=3 \
      "$build/ddplaunch" $args --nproc_per_node 1 --max_restarts 1 \
      --events_file "$d/events.$tag" "$WORKER"
  done
  wait_until 60 lines_at_least "$d/start.a" 2 && wait_until 10 lines_at_least "$d/start.b" 2 &&
    wait_until 10 lines_at_least "$d/start.c" 2 || true
  finish "$d" 20 a b c
  local t0 told stopped restarted wterm wstart
  t0=$(cat "$d/crash" 2> /dev/null || true)
  told=$(latest "$(event "$d" a job_failure)" "$(event "$d" b job_failure)" "$(event "$d" c job_failure)")
  stopped=$(latest "$(event "$d" a worker_exit 0)" "$(event "$d" b worker_exit 0)")
  restarted=$(latest "$(event "$d" a worker_start 1)" "$(event "$d" b worker_start 1)" "$(event "$d" c worker_start 1)")
  wterm=$(latest "$(nth_time "$d/term.a" 1)" "$(nth_time "$d/term.b" 1)")
  wstart=$(latest "$(nth_time "$d/start.a" 2)" "$(nth_time "$d/start.b" 2)" "$(nth_time "$d/start.c" 2)")
  [ -n "$restarted" ] && [ -n "$t0" ] || fail_run "ddp_crash $kind $i" "$d"
  echo "$(ms "$t0" "$told") $(ms "$t0" "$stopped") $(ms "$t0" "$restarted") $(ms "$t0" "$wterm") $(ms "$t0" "$wstart")" \
    >> "$WORK/ddp_crash_$kind"
}

# --- ddplaunch: agent c SIGKILLed (elastic 2:3) ---------------------------------------------
# columns: a/b told (membership_change or job_failure), a/b workers exited, a/b restarted
# (worker_start of round 1), a/b restarted workers run (workers' clocks); ms after the kill;
# then how the loss was seen.
ddp_kill() {  # sleep|peer RUN
  local mode=$1 i=$2 d=$WORK/ddp_kill_${1}_$2 port pport tag k
  mkdir -p "$d"
  port=$(free_port)
  pport=$(free_port)
  for k in 0 1 2; do
    tag=$(echo a b c | cut -d' ' -f$((k + 1)))
    # shellcheck disable=SC2046
    start "$d" "$tag" env FB_MODE="$mode" FB_PEER_NODE=c FB_PEER_PORT="$pport" \
      "$build/ddplaunch" $(ddp_elastic "$port" "127.0.0.$((k + 1))" "kill$i" 2:3) \
      --nproc_per_node 1 --max_restarts 1 --events_file "$d/events.$tag" "$WORKER"
  done
  wait_until 60 test -f "$d/start.a" && wait_until 10 test -f "$d/start.b" &&
    wait_until 10 test -f "$d/start.c" || true
  if [ "$mode" = peer ]; then
    wait_until 20 test -f "$d/connected.a" && wait_until 10 test -f "$d/connected.b" || true
  fi
  sleep 0.5
  local t0
  t0=$(now)
  kill -9 "$(agent_pid "$d" c)"
  wait_until 60 lines_at_least "$d/start.a" 2 && wait_until 10 lines_at_least "$d/start.b" 2 || true
  finish "$d" 20 a b
  local told stopped restarted wstart how
  # Told: whichever came first on each node, the membership change or (a worker of its
  # failed with the peer) the job's failure record.
  told=$(latest "$(earliest "$(event "$d" a membership_change)" "$(event "$d" a job_failure)")" \
    "$(earliest "$(event "$d" b membership_change)" "$(event "$d" b job_failure)")")
  stopped=$(latest "$(event "$d" a worker_exit 0)" "$(event "$d" b worker_exit 0)")
  restarted=$(latest "$(event "$d" a worker_start 1)" "$(event "$d" b worker_start 1)")
  [ -z "$restarted" ] && restarted=$(latest "$(event "$d" a worker_start 2)" "$(event "$d" b worker_start 2)")
  wstart=$(latest "$(nth_time "$d/start.a" 2)" "$(nth_time "$d/start.b" 2)")
  how=other
  if grep -q "is gone (its store connection closed)" "$d/log.a" "$d/log.b"; then
    how=presence
  elif grep -q "stopped heartbeating" "$d/log.a" "$d/log.b"; then
    how=lease
  fi
  # A node loss is a membership change and costs no restart; a survivor that took its
  # worker's failure (the dead peer) for the cause spends one.
  local spent
  spent=$(cat "$d/events.a" "$d/events.b" 2> /dev/null | jq -s '[.[] | select(.event == "restart")] | length')
  [ -n "$restarted" ] || fail_run "ddp_kill $mode $i" "$d"
  echo "$(ms "$t0" "$told") $(ms "$t0" "$stopped") $(ms "$t0" "$restarted") $(ms "$t0" "$wstart") $how $spent" \
    >> "$WORK/ddp_kill_$mode"
}

# --- a cut link: three hosts from network namespaces ----------------------------------------
# As tests/support/netns.cpp makes them: host i is a namespace with lo and eth0
# (10.X.Y.i/24), the other end of its veth a port of a bridge in a switch namespace of its own;
# nothing touches the machine's own interfaces.
NET=10.$((($$ >> 8) & 255)).$(($$ & 255))
netns_setup() {
  local sw=${NS_PREFIX}sw n h
  NETNS_UP=1
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for n in 1 2 3; do
    h=${NS_PREFIX}h$n
    ip netns add "$h" || return 1
    ip -n "$sw" link add "h$n" type veth peer name eth0 netns "$h" || return 1
    ip -n "$sw" link set "h$n" master br0 up || return 1
    ip -n "$h" link set lo up || return 1
    ip -n "$h" addr add "$NET.$n/24" dev eth0 || return 1
    ip -n "$h" link set eth0 up || return 1
  done
  # Does host 3 reach host 1 over the bridge?
  ip netns exec "${NS_PREFIX}h1" "$PY" -c "
import socket; s = socket.socket(); s.bind(('$NET.1', 29399)); s.listen(1); s.settimeout(5); s.accept()" &
  local listener=$!
  sleep 0.3
  ip netns exec "${NS_PREFIX}h3" "$PY" -c "
import socket; socket.create_connection(('$NET.1', 29399), timeout=5)" ||
    { kill $listener 2> /dev/null; return 1; }
  wait $listener
}
netns_teardown() {
  local n
  # The switch first: its veth ends take the hosts' ends with them.
  ip netns del "${NS_PREFIX}sw" 2> /dev/null || true
  for n in 1 2 3; do ip netns del "${NS_PREFIX}h$n" 2> /dev/null || true; done
}

# columns: a/c told (membership_change), a/c restarted (worker_start of round 1), a/c
# restarted workers run; ms after the link went down; then how the loss was seen.
netns_cut() {  # host|switch RUN: which end of host b's cable goes down
  local end=$1 i=$2 d=$WORK/netns_cut_${1}_$2 tag n port=$((29400 + $2))
  mkdir -p "$d"
  for n in 1 2 3; do
    tag=$(echo a b c | cut -d' ' -f$n)
    start "$d" "$tag" ip netns exec "${NS_PREFIX}h$n" env FB_MODE=sleep "$build/ddplaunch" \
      --nnodes 2:3 --rdzv_backend c10d --rdzv_endpoint "$NET.1:$port" --rdzv_id "cut$end$i" \
      --local_addr "$NET.$n" --nproc_per_node 1 --events_file "$d/events.$tag" "$WORKER"
  done
  wait_until 60 test -f "$d/start.a" && wait_until 10 test -f "$d/start.b" &&
    wait_until 10 test -f "$d/start.c" || true
  sleep 1
  local t0
  t0=$(now)
  if [ "$end" = host ]; then
    ip -n "${NS_PREFIX}h2" link set eth0 down
  else
    ip -n "${NS_PREFIX}sw" link set h2 down
  fi
  wait_until 60 lines_at_least "$d/start.a" 2 && wait_until 10 lines_at_least "$d/start.c" 2 || true
  finish "$d" 20 a c
  ip -n "${NS_PREFIX}sw" link set h2 up
  ip -n "${NS_PREFIX}h2" link set eth0 up
  local told restarted wstart how
  told=$(latest "$(event "$d" a membership_change)" "$(event "$d" c membership_change)")
  restarted=$(latest "$(event "$d" a worker_start 1)" "$(event "$d" c worker_start 1)")
  wstart=$(latest "$(nth_time "$d/start.a" 2)" "$(nth_time "$d/start.c" 2)")
  how=other
  if grep -q "is gone (its store connection closed)" "$d/log.a" "$d/log.c"; then
    how=tcp_liveness
  elif grep -q "stopped heartbeating" "$d/log.a" "$d/log.c"; then
    how=lease
  fi
  [ -n "$restarted" ] || fail_run "netns_cut $end $i" "$d"
  echo "$(ms "$t0" "$told") $(ms "$t0" "$restarted") $(ms "$t0" "$wstart") $how" \
    >> "$WORK/netns_cut_$end"
}

# --- torchrun (c10d), the PyTorch of $TPY; result files end in $TSUF -----------------------
TPY=$PY
TSUF=
torch_agent() {  # DIR TAG PORT ID NNODES MODE [torchrun flags...]
  local extra=("${@:7}")
  start "$1" "$2" env FB_MODE="$6" FB_CRASH_NODE=c FB_NODES=3 FB_PEER_NODE=c \
    FB_PEER_PORT="${PEER_PORT:-0}" "$TPY" -m torch.distributed.run -r 1 -t 1 \
    --log_dir "$1/tlogs.$2" --nnodes "$5" --nproc_per_node 1 --rdzv_backend c10d \
    --rdzv_endpoint "127.0.0.1:$3" --rdzv_id "$4" --max_restarts 1 "${extra[@]}" --no_python \
    "$WORKER"
}
store_up() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }

# columns: a/b workers got SIGTERM, every restarted worker runs; ms after the crash.
torch_crash() {  # NAME RUN [torchrun flags...]
  local name=$1$TSUF i=$2 d=$WORK/${1}${TSUF}_$2 port
  shift 2
  mkdir -p "$d"
  port=$(free_port)
  # The first agent up hosts the store (torchrun 1.13 falls back to a client when the port
  # is taken); start it first so it is a, not the crashing node.
  torch_agent "$d" a "$port" "tcrash$i" 3 crash "$@"
  wait_until 60 store_up "$port" || true
  torch_agent "$d" b "$port" "tcrash$i" 3 crash "$@"
  torch_agent "$d" c "$port" "tcrash$i" 3 crash "$@"
  wait_until 90 lines_at_least "$d/start.a" 2 && wait_until 30 lines_at_least "$d/start.b" 2 &&
    wait_until 30 lines_at_least "$d/start.c" 2 || true
  finish "$d" 20 a b c
  local t0 wterm wstart
  t0=$(cat "$d/crash" 2> /dev/null || true)
  wterm=$(latest "$(nth_time "$d/term.a" 1)" "$(nth_time "$d/term.b" 1)")
  wstart=$(latest "$(nth_time "$d/start.a" 2)" "$(nth_time "$d/start.b" 2)" "$(nth_time "$d/start.c" 2)")
  [ -n "$wstart" ] && [ -n "$t0" ] || fail_run "$name $i" "$d"
  echo "$(ms "$t0" "$wterm") $(ms "$t0" "$wstart")" >> "$WORK/$name"
}

# columns: a/b restarted workers run; ms after agent c's session (agent and worker: the
# node) was SIGKILLed. "nan" when they never restarted within the bound.
torch_kill() {  # sleep|peer RUN BOUND_S
  local mode=$1 i=$2 bound=$3 d=$WORK/torch_kill${TSUF}_${1}_$2 port
  mkdir -p "$d"
  port=$(free_port)
  PEER_PORT=$(free_port)
  torch_agent "$d" a "$port" "tkill$i" 2:3 "$mode"
  wait_until 60 store_up "$port" || true
  torch_agent "$d" b "$port" "tkill$i" 2:3 "$mode"
  torch_agent "$d" c "$port" "tkill$i" 2:3 "$mode"
  wait_until 90 test -f "$d/start.a" && wait_until 30 test -f "$d/start.b" &&
    wait_until 30 test -f "$d/start.c" || true
  if [ "$mode" = peer ]; then
    wait_until 20 test -f "$d/connected.a" && wait_until 10 test -f "$d/connected.b" || true
  fi
  sleep 0.5
  local t0
  t0=$(now)
  kill -9 -- "-$(agent_pid "$d" c)"
  wait_until "$bound" lines_at_least "$d/start.a" 2 && wait_until 10 lines_at_least "$d/start.b" 2 || true
  finish "$d" 5 a b
  local wstart
  wstart=$(latest "$(nth_time "$d/start.a" 2)" "$(nth_time "$d/start.b" 2)")
  [ -n "$wstart" ] || echo "  torchrun ($mode workers): survivors not restarted within ${bound} s of the kill" >&2
  echo "$(ms "$t0" "$wstart")" >> "$WORK/torch_kill${TSUF}_$mode"
}

echo "# Job-wide failures and node loss ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD))"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  # shellcheck disable=SC2086
  "$build/failure_bench" ${BENCH_ARGS:-} || echo "(failure_bench: a row failed; see above)"
  echo
  echo "# Restarts back to back (a worker failing again at once): part b, 0 ms between them"
  "$build/failure_bench" --parts b --nodes 8,64 --repeats 6 --restart_gap_ms 0 ||
    echo "(failure_bench: a row failed; see above)"
  echo
  echo "# The lease path with the default last call (30 s), one loss each"
  "$build/failure_bench" --parts c --nodes 8 --loss_repeats 1 --lease_nodes 8 \
    --lease_repeats 1 --lease_last_call_ms 30000 || echo "(failure_bench: a row failed; see above)"
  echo
  echo "load after failure_bench: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [ "${SKIP_E2E:-0}" != 1 ]; then
echo
echo "# End to end: ddplaunch agents on loopback, 3 nodes x 1 worker (node_worker.sh)"
for i in $(seq "$REPEATS"); do
  ddp_crash static "$i"
  ddp_crash elastic "$i"
  ddp_kill sleep "$i"
  ddp_kill peer "$i"
done
echo
echo "A worker of node c exits 3 (--max_restarts 1); ms after its exit, median (min to max):"
echo
echo "| job | runs | every node told | a, b workers exited | every node's workers restarted (agents' events) | a, b workers got SIGTERM | restarted workers running (workers' clocks) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for kind in static elastic; do
  f=$WORK/ddp_crash_$kind
  echo "| ddplaunch $kind | $(runs "$f") | $(stats "$f" 1) | $(stats "$f" 2) | $(stats "$f" 3) | $(stats "$f" 4) | $(stats "$f" 5) |"
done
echo
echo "Agent c SIGKILLed (elastic 2:3); ms after the kill, median (min to max):"
echo
echo "| workers | runs | a, b told | a, b workers exited | a, b restarted (events) | restarted workers running | seen by | runs where a survivor spent a restart |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
for mode in sleep peer; do
  f=$WORK/ddp_kill_$mode
  echo "| $mode | $(runs "$f") | $(stats "$f" 1) | $(stats "$f" 2) | $(stats "$f" 3) | $(stats "$f" 4) | $(awk '{print $5}' "$f" 2> /dev/null | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}') | $(awk '$6 > 0' "$f" 2> /dev/null | wc -l) |"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "# A cut link: 3 hosts (network namespaces on a bridge), elastic 2:3, host b's cable cut"
if netns_setup 2> "$WORK/netns.err"; then
  for i in $(seq "$NETNS_REPEATS"); do
    netns_cut host "$i"
    netns_cut switch "$i"
  done
  echo
  echo "ms after host b's link went down, median (min to max):"
  echo
  echo "| link end set down | runs | a, c told | a, c restarted (events) | restarted workers running | seen by |"
  echo "| --- | ---: | ---: | ---: | ---: | --- |"
  for end in host switch; do
    f=$WORK/netns_cut_$end
    echo "| $end | $(runs "$f") | $(stats "$f" 1) | $(stats "$f" 2) | $(stats "$f" 3) | $(awk '{print $4}' "$f" 2> /dev/null | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}') |"
  done
else
  echo "skipped: could not set up network namespaces ($(head -n 1 "$WORK/netns.err"))"
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [ "${SKIP_TORCH:-0}" != 1 ]; then
for ti in "${!TORCH_PYS[@]}"; do
  TPY=${TORCH_PYS[$ti]}
  TSUF=$ti
  echo
  echo "# Reference: torchrun $(torch_version "$TPY") ($TPY; -r 1 -t 1, --rdzv_backend c10d, defaults otherwise)"
  for i in $(seq "$TORCH_REPEATS"); do
    torch_crash torch_crash "$i"
    torch_crash torch_crash_fast "$i" --monitor_interval 0.1
    torch_kill peer "$i" 90
  done
  torch_kill sleep 1 40
  echo
  echo "| scenario | runs | torchrun $(torch_version "$TPY"), median (min to max), ms | ddplaunch, same scenario, median (ms) | torchrun / ddplaunch |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  for name in torch_crash torch_crash_fast; do
    label="crash on c (3:3)"
    [ "$name" = torch_crash_fast ] && label="crash on c (3:3), --monitor_interval 0.1"
    f=$WORK/$name$TSUF
    t=$(median_of "$f" 1)
    o=$(median_of "$WORK/ddp_crash_elastic" 4)
    echo "| $label: a, b workers got SIGTERM | $(runs "$f") | $(stats "$f" 1) | $o | $(ratio "$t" "$o") |"
    t=$(median_of "$f" 2)
    o=$(median_of "$WORK/ddp_crash_elastic" 5)
    echo "| $label: every restarted worker running | $(runs "$f") | $(stats "$f" 2) | $o | $(ratio "$t" "$o") |"
  done
  f=$WORK/torch_kill${TSUF}_peer
  t=$(median_of "$f" 1)
  o=$(median_of "$WORK/ddp_kill_peer" 4)
  echo "| node c killed (2:3), workers fail with their peer: a, b restarted workers running | $(runs "$f") | $(stats "$f" 1) | $o | $(ratio "$t" "$o") |"
  o=$(median_of "$WORK/ddp_kill_sleep" 4)
  t=$(stats "$WORK/torch_kill${TSUF}_sleep" 1)
  [ "$t" = - ] && t="none within 40 s"
  echo "| node c killed (2:3), sleeping workers: a, b restarted workers running | 1 | $t | $o | - |"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
fi
