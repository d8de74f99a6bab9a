#!/bin/bash
# Multi-node training as a SLURM batch job: one ddplaunch agent per node (srun, one task per
# node); ddplaunch takes --nnodes, --node_rank, the store host (first node of the step) and
# the run id (<job id>.<step id>) from SLURM, and spawns one worker per GPU itself.
# No nohup needed: the batch job survives logout, and its output goes to --output.
#
#   sbatch scripts/slurm/sbatch_example.sh
#   sbatch --nodes=4 scripts/slurm/sbatch_example.sh          # any node count
#   ELASTIC=1 sbatch --nodes=4 scripts/slurm/sbatch_example.sh  # tolerate node loss (2..4)
#
# A job secret (docs/security.md) is made per job under SECRET_DIR ($HOME/.ddplaunch, which
# must be on a filesystem every node sees) and removed at the end: only agents and workers of
# this job can use its store.
#
# Preemption: --signal=USR1@120 asks SLURM to send SIGUSR1 to the job step 2 minutes before
# the time limit; ddplaunch forwards it to every worker so they can checkpoint.
#SBATCH --job-name=ddp-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=01:00:00
#SBATCH --signal=USR1@120
#SBATCH --output=%x-%j.out
##SBATCH --gpus-per-node=8
##SBATCH --cpus-per-task=32
set -euo pipefail

root=${DDP_ROOT:-$SLURM_SUBMIT_DIR}
ddplaunch=${DDPLAUNCH:-$root/build/ddplaunch}
program=${PROGRAM:-$root/build/train}
nproc=${NPROC:-gpu}            # one worker per visible GPU; a number for CPU workers
read -r -a program_args <<< "${PROGRAM_ARGS---data digits --epochs 5}"

secret_dir=${SECRET_DIR:-$HOME/.ddplaunch}
secret="$secret_dir/$SLURM_JOB_ID.secret"
(umask 077; mkdir -p "$secret_dir"; head -c 32 /dev/urandom | base64 >"$secret")
trap 'rm -f "$secret"' EXIT

launch=("$ddplaunch" --nproc_per_node "$nproc" --max_restarts "${MAX_RESTARTS:-3}"
        --secret_file "$secret")
if [[ -n "${ELASTIC:-}" ]]; then
  # Elastic: survive the loss of nodes down to MIN; the first node hosts the store.
  launch+=(--nnodes "${MIN_NODES:-2}:$SLURM_NNODES" --rdzv_backend c10d
           --rdzv_conf "join_timeout=600,last_call_timeout=30")
fi

echo "job $SLURM_JOB_ID on $SLURM_NNODES nodes: $SLURM_JOB_NODELIST"
# --kill-on-bad-exit: if one agent gives up, SLURM stops the others.
srun --ntasks-per-node=1 --kill-on-bad-exit=1 "${launch[@]}" "$program" "${program_args[@]}"
