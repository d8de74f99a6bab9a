#!/usr/bin/env bash
# The NCCL path of ddplaunch_recovery (docs/recovery.md, "PyTorch"), for a machine with 3 or
# more GPUs: three agents on loopback, one GPU each (CUDA_VISIBLE_DEVICES), running train.py
# --device cuda under --in_place_recovery; the node of the last rank kills itself after step 5.
# Passes when the two survivors exit 0 with one in-place recovery each (ProcessGroup.abort(),
# then _abort_process_group(), then a new NCCL group) and their workers were never restarted.
#   examples/pytorch_in_place/nccl_node_loss.sh [BUILD_DIR]   (default build)
#   env: TORCH_PYTHON=/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python
# NCCL refuses two ranks on one GPU, so a single-GPU machine cannot run it (it says so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
python=${TORCH_PYTHON:-/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
if [ "${gpus:-0}" -lt 3 ]; then
  echo "nccl_node_loss: SKIPPED: needs 3 GPUs (found ${gpus:-0}); NCCL allows one rank per GPU"
  exit 0
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
"$build/ddpstore" --host 127.0.0.1 --port 0 >"$work/store.out" 2>&1 &
for _ in $(seq 50); do grep -q '[0-9]' "$work/store.out" && break; sleep 0.1; done
port=$(grep -o '[0-9]\+' "$work/store.out" | head -1)
pids=()
for n in 1 2 3; do
  CUDA_VISIBLE_DEVICES=$((n - 1)) PYTHON_EXEC=$python "$build/ddplaunch" --nnodes 2:3 \
    --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --rdzv_id nccl \
    --rdzv_conf last_call_timeout=0.5,join_timeout=120,heartbeat_interval=0.2,lease_timeout=1,is_host=false \
    --local_addr "127.0.0.$n" --events_file "$work/events.$n" --in_place_recovery \
    "$here/train.py" --device cuda --epochs 2 --workers 1 --fault_kill_node_at_step 5 \
    >"$work/node$n.log" 2>&1 &
  pids+=($!)
done
ok=0 killed=0
for n in 1 2 3; do
  rc=0
  wait "${pids[$((n - 1))]}" || rc=$?
  if [ "$rc" = 0 ] && grep -q '"event":"in_place_recovery"' "$work/events.$n" &&
     [ "$(grep -c '"event":"worker_start"' "$work/events.$n")" = 1 ]; then
    ok=$((ok + 1))
  elif [ "$rc" = 137 ]; then
    killed=$((killed + 1))
  fi
done
tail -n 5 "$work"/node*.log
if [ "$ok" = 2 ] && [ "$killed" = 1 ]; then
  echo "nccl_node_loss: PASS: 2 survivors recovered in place over NCCL, 1 node killed ($work)"
else
  echo "nccl_node_loss: FAIL: $ok survivors in place, $killed killed (want 2 and 1); logs in $work"
  exit 1
fi
