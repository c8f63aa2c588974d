#!/bin/bash
# Slurm batch script: conf/brown-gpu.yaml with one shoal node per GPU. Submit it from
# the source tree's root (the paths in the configuration are relative to it):
#
#   sbatch conf/slurm-gpu.sh                                   # 2 hosts x 4 GPUs: 8 nodes
#   sbatch --nodes=4 --ntasks-per-node=8 conf/slurm-gpu.sh     # 4 hosts x 8 GPUs: 32 nodes
#
# Nothing needs exporting: each node takes its rank and the number of nodes from srun
# (SLURM_PROCID, SLURM_NTASKS; cluster.nodes is auto), its GPU from SLURM_LOCALID among
# those it sees, and rank 0's rendezvous from the job itself: the first host of
# SLURM_STEP_NODELIST at port 20000 + (SLURM_JOB_ID + SLURM_STEP_ID) mod 10000 (below
# the kernel's ephemeral ports; export SHOAL_MASTER_ADDR and SHOAL_MASTER_PORT to
# choose another place when two jobs on one host may collide, e.g. sharing hosts).
#
# Time limit: --signal=TERM@300 has Slurm send every node SIGTERM five minutes before
# the limit; each finishes its step, writes its checkpoint and exits 130, and the end of
# this script requeues the job, which continues from those checkpoints. A node lost, a
# host down or a preemption fails the step or the job; --requeue (and the end of this
# script, up to SHOAL_MAX_REQUEUES times, default 10) start it again the same way.
# SLURM_RESTART_COUNT counts the requeues; the output file is appended to. A
# configuration error (exit status 2) is not retried.
#
# shoal must be on PATH (make install), or set SHOAL to the binary. Hosts with 4 GPUs
# take --ntasks-per-node=4, hosts with 8 take 8; --gpus-per-task=1 gives each node one
# GPU of its own (CUDA_VISIBLE_DEVICES=<it>). Where the site only has --gres=gpu:G,
# ask for --gres=gpu:4 (or 8) and drop --gpus-per-task: every node then sees the
# host's GPUs and takes the one of its SLURM_LOCALID.
#
#SBATCH --job-name=shoal-gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --signal=TERM@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=shoal-gpu-%j.out

set -eu

SHOAL=${SHOAL:-shoal}

# The run's secret (cluster.security: curve): made once, mode 0600, in the home
# directory every host reads; shoal refuses a key file others can read.
KEY=${SHOAL_KEY_FILE:-$HOME/.shoal/brown-gpu.key}
if [ ! -e "$KEY" ]; then
    mkdir -p "$(dirname "$KEY")" && chmod 700 "$(dirname "$KEY")"
    "$SHOAL" keygen "$KEY"
fi

echo "shoal-gpu: job $SLURM_JOB_ID, start $((${SLURM_RESTART_COUNT:-0} + 1)) at $(date -u +%FT%TZ)"
"$SHOAL" --version

# One `shoal node` per task. Rank 0 logs the map of the run (rank, host, pid, GPU,
# shared memory) and, at the end, the tokens/s of all nodes. --kill-on-bad-exit ends
# the step when a node dies without a word (the others get SIGTERM and save a
# checkpoint first); a node that fails tells the others itself.
status=0
srun --kill-on-bad-exit=1 "$SHOAL" node conf/brown-gpu.yaml \
    --set cluster.key_file="$KEY" || status=$?

# 130: stopped by the time limit's signal with a checkpoint; others: a failure.
if [ "$status" -ne 0 ] && [ "$status" -ne 2 ] &&
    [ "${SLURM_RESTART_COUNT:-0}" -lt "${SHOAL_MAX_REQUEUES:-10}" ]; then
    echo "shoal-gpu: step ended with status $status; requeueing the job"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
