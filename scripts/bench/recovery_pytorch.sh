#!/usr/bin/env bash
# Training time lost per node loss for a PyTorch 2.x DDP script (issue 31; docs/benchmarks.md,
# "PyTorch in place"): examples/pytorch_in_place/train.py (gloo, CPU) on N simulated nodes on
# loopback, one node SIGKILLed at step 40, the time from the kill to the first step a survivor
# completes without it (bench/recovery/recovery_bench.py measures; see its docstring). Three
# ways, runs interleaved, checkpoint every step:
#  (d) the venv's torchrun 2.x: worker restart (--max_restarts) + checkpoint resume;
#  (e) build/ddplaunch: process restart + checkpoint reload;
#  (f) build/ddplaunch --in_place_recovery: ddplaunch_recovery re-forms the group in place.
# And the steps/s of the script with the module and no failure, against the same loop under
# torchrun (the module's cost per step) comes from the "step ms before" column.
#   scripts/bench/recovery_pytorch.sh [recovery_bench.py flags: --nodes 2,3,4 --repeats 2
#                                     --torch_repeats 1 --rows 20000 --keep ...]
#
# With --victim store_host (docs/benchmarks.md, "Losing the store's host"): 3 nodes,
# --nnodes 2:3, the node hosting the job's store SIGKILLed, four cases interleaved:
#  1. --in_place_recovery, a member node lost, c10d (the reference);
#  2. --in_place_recovery, the store's host lost, c10d (the store moves to a successor);
#  3. --in_place_recovery, the workers' store host lost, etcd-v3 (a 30 s lease: the death
#     witness revokes it), against one etcd member the driver starts;
#  4. the venv's torchrun 2.x, the store's host lost, c10d: the job is lost (the survivors'
#     exit codes and the time until the last exits).
#   scripts/bench/recovery_pytorch.sh --victim store_host [--repeats 5 --torch_repeats 3 ...]
#   env: BUILD_DIR=build, TORCH_PYTHON=/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
TORCH_PYTHON=${TORCH_PYTHON:-/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python}
[ -x "$BUILD_DIR/ddplaunch" ] || { echo "recovery_pytorch bench: build $BUILD_DIR/ddplaunch first" >&2; exit 2; }
[ -x "$TORCH_PYTHON" ] || { echo "recovery_pytorch bench: no $TORCH_PYTHON (scripts/setup_torch.sh)" >&2; exit 2; }
title="Training time lost per node loss, PyTorch script"
defaults=(--variants "pt_torchrun,pt_restart,pt_inplace" --nodes "2,3,4" --repeats 2 --torch_repeats 1)
case " $* " in
  *" --victim store_host "* | *" --victim=store_host "*)
    command -v etcd >/dev/null || { echo "recovery_pytorch bench: no etcd (scripts/setup.sh)" >&2; exit 2; }
    title="Losing the store's host, PyTorch script"
    # Ways that name no victim take --victim's (store_host); the reference names its own.
    defaults=(--variants "pt_inplace:member:c10d,pt_inplace:c10d,pt_inplace:etcd-v3,pt_torchrun:c10d"
              --nodes 3 --repeats 5 --torch_repeats 3 --etcd_lease_s 30)
    ;;
esac
echo "# $title ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $("$TORCH_PYTHON" -c 'import torch; print("torch", torch.__version__)'))"
/usr/bin/python3 bench/recovery/recovery_bench.py --build "$BUILD_DIR" --torch_python "$TORCH_PYTHON" \
  "${defaults[@]}" --rows 20000 "$@"
