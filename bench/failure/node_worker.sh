#!/usr/bin/env bash
# The worker of scripts/bench/failure.sh's end-to-end runs, the same under ddplaunch and
# torchrun. Each start appends "<unix time> <TORCHELASTIC_RESTART_COUNT>" to
# $FB_DIR/start.$NODE_TAG, and SIGTERM appends its arrival time to $FB_DIR/term.$NODE_TAG. The
# first start on a node does what FB_MODE says; later ones (the restarted group) exit 0 after
# FB_AFTER seconds, so the job ends.
#   FB_MODE=sleep  sleep (at most 120 s)
#   FB_MODE=crash  on node $FB_CRASH_NODE: once $FB_NODES nodes' workers run, write the time
#                  to $FB_DIR/crash and exit 3; elsewhere sleep
#   FB_MODE=peer   on node $FB_PEER_NODE: listen on 127.0.0.1:$FB_PEER_PORT; elsewhere connect
#                  to it and exit 1 when that connection ends, as a collective whose peer died
#                  fails (the time goes to $FB_DIR/peer_lost.$NODE_TAG)
set -u
dir=$FB_DIR
tag=$NODE_TAG
echo "$EPOCHREALTIME ${TORCHELASTIC_RESTART_COUNT:-0}" >> "$dir/start.$tag"
generation=$(wc -l < "$dir/start.$tag")
child=
on_term() {
  echo "$EPOCHREALTIME" >> "$dir/term.$tag"
  [ -n "$child" ] && kill "$child" 2> /dev/null
  exit 143
}
trap on_term TERM
if [ "$generation" -gt 1 ]; then
  sleep "${FB_AFTER:-1}" &
  child=$!
  wait "$child"
  exit 0
fi
case "${FB_MODE:-sleep}" in
  crash)
    if [ "$tag" = "$FB_CRASH_NODE" ]; then
      for _ in $(seq 2000); do
        started=$(find "$dir" -maxdepth 1 -name 'start.*' | wc -l)
        [ "$started" -ge "$FB_NODES" ] && break
        sleep 0.01
      done
      sleep 0.3
      echo "$EPOCHREALTIME" > "$dir/crash"
      exit 3
    fi
    ;;
  peer)
    if [ "$tag" = "$FB_PEER_NODE" ]; then
      # exec: the listener is the worker process itself, and dies with its node.
      exec python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
held = []
while True:
    held.append(s.accept()[0])
' "$FB_PEER_PORT"
    fi
    # exec: the worker process itself fails on its dead peer, as a collective would.
    exec python3 -c '
import socket, sys, time
for _ in range(1500):
    try:
        c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        time.sleep(0.02)
else:
    sys.exit(2)
open(sys.argv[2], "w").close()
try:
    while c.recv(1):
        pass
except OSError:
    pass
with open(sys.argv[3], "w") as f:
    f.write("%.6f\n" % time.time())
sys.exit(1)
' "$FB_PEER_PORT" "$dir/connected.$tag" "$dir/peer_lost.$tag"
    ;;
esac
sleep 120 &
child=$!
wait "$child"
