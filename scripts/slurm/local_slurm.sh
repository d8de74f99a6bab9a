#!/usr/bin/env bash
# Brings up (or tears down) a real single-host SLURM cluster on loopback for tests and
# demos: munged, slurmctld and $DDP_SLURM_NODES (default 2) slurmd daemons, one per
# simulated node n1..nN, from Debian's slurm-wlm; all state in one private directory, ports
# picked by the kernel. Needs root. The node names n1..nN do not resolve, so jobs on this
# cluster pass --master_addr 127.0.0.1 (on a real cluster SLURM's first node is used).
#
#   scripts/slurm/local_slurm.sh start [DIR]   # prints "export SLURM_CONF=DIR/slurm.conf"
#   eval "$(scripts/slurm/local_slurm.sh start /tmp/myslurm)"
#   srun -N2 --ntasks-per-node=1 ddplaunch --nproc_per_node 2 --master_addr 127.0.0.1 \
#        --master_port 29511 build/train ...
#   scripts/slurm/local_slurm.sh stop [DIR]
#
# DIR defaults to $DDP_SLURM_DIR or /tmp/ddp-slurm. Exit status 3: a daemon did not come up
# (its log is printed to stderr).
set -euo pipefail

cmd=${1:-}
dir=${2:-${DDP_SLURM_DIR:-/tmp/ddp-slurm}}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
  for pid_file in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
    if [[ -f "$pid_file" ]]; then
      pid=$(cat "$pid_file")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pid_file"
    fi
  done
}

fail() {
  echo "local_slurm.sh: $1" >&2
  [[ -f "$2" ]] && tail -20 "$2" >&2
  stop
  exit 3
}

start() {
  [[ $(id -u) -eq 0 ]] || { echo "local_slurm.sh: needs root" >&2; exit 2; }
  for tool in munged slurmctld slurmd srun; do
    command -v "$tool" >/dev/null || { echo "local_slurm.sh: $tool not installed (apt-get install slurm-wlm munge)" >&2; exit 2; }
  done
  stop
  mkdir -p "$dir"/{state,munge}
  chmod 700 "$dir/munge"
  local node
  node=$(hostname -s)
  # munge: a private key and socket, so the system's munged (if any) is left alone.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" \
    || fail "munged did not start" "$dir/munged.log"

  local ctld_port nodes=${DDP_SLURM_NODES:-2} cpus node_lines=""
  ctld_port=$(free_port)
  cpus=$(nproc)
  for i in $(seq "$nodes"); do
    node_lines+="NodeName=n$i NodeHostname=$node NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus State=UNKNOWN"$'\n'
  done
  cat > "$dir/slurm.conf" <<CONF
ClusterName=ddplocal
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
PropagateResourceLimitsExcept=ALL
KillWait=5
${node_lines}PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -i -f "$SLURM_CONF" || fail "slurmctld did not start" "$dir/slurmctld.log"
  for i in $(seq "$nodes"); do
    slurmd -f "$SLURM_CONF" -N "n$i" || fail "slurmd n$i did not start" "$dir/slurmd-n$i.log"
  done
  # Ready when every node is idle (each slurmd registered).
  for _ in $(seq 100); do
    if [[ $(sinfo -h -N -t idle -o '%N' 2>/dev/null | wc -l) -ge $nodes ]]; then
      echo "export SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.2
  done
  fail "the slurmd daemons did not register with slurmctld within 20 s" "$dir/slurmctld.log"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
