#!/bin/bash
# Slurm batch script: conf/brown-4nodes.yaml on four hosts, one shoal node per host.
# Submit it from the source tree's root (the paths in the configuration are relative
# to it, and ../shared/data must be on a file system every host sees):
#
#   sbatch conf/slurm-brown.sh
#
# shoal must be on PATH (make install), or set SHOAL to the binary, e.g.
# SHOAL=$PWD/build/shoal sbatch conf/slurm-brown.sh. Submitting again continues
# every node from its checkpoint in runs/brown-4nodes/node-R/ (the newest step all
# nodes have one of).
#
# A job that fails is requeued (--requeue), up to SHOAL_MAX_REQUEUES times (default
# 3), and starts again from those checkpoints: Slurm requeues it by itself when a host
# fails or the job is preempted, and the end of this script asks for it when a node
# died or failed. SLURM_RESTART_COUNT counts the requeues; the output file is appended
# to, not overwritten. A configuration error (exit status 2) is not retried.
#
#SBATCH --job-name=shoal-brown
#SBATCH --nodes=4
#SBATCH --ntasks=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --time=02:00:00
#SBATCH --output=shoal-brown-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue

set -eu

# Nothing to export: rank 0 runs on the first host of the step, and every node finds
# its rendezvous there by itself, at port 20000 + (SLURM_JOB_ID + SLURM_STEP_ID) mod
# 10000 (export SHOAL_MASTER_ADDR and SHOAL_MASTER_PORT to choose another place).

# The run's secret: only processes that hold it can join the run or read its frames
# (cluster.security: curve). Made once, mode 0600, in your home directory, which every
# host of the allocation reads; shoal refuses a key file others can read.
KEY=${SHOAL_KEY_FILE:-$HOME/.shoal/brown.key}
if [ ! -e "$KEY" ]; then
    mkdir -p "$(dirname "$KEY")" && chmod 700 "$(dirname "$KEY")"
    "${SHOAL:-shoal}" keygen "$KEY"
fi

# One `shoal node` per task: each takes its rank and the number of nodes from
# SLURM_PROCID and SLURM_NTASKS (which must equal cluster.nodes). A node that fails
# tells the others, which save a checkpoint and stop; --kill-on-bad-exit ends the
# step if one dies without a word (the others get SIGTERM and save a checkpoint
# first). --label prefixes every output line with the rank.
echo "shoal-brown: job $SLURM_JOB_ID, start $((${SLURM_RESTART_COUNT:-0} + 1)) at $(date)"
status=0
srun --kill-on-bad-exit=1 --label "${SHOAL:-shoal}" node conf/brown-4nodes.yaml \
    --set cluster.key_file="$KEY" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 2 ] &&
    [ "${SLURM_RESTART_COUNT:-0}" -lt "${SHOAL_MAX_REQUEUES:-3}" ]; then
    echo "shoal-brown: step failed (status $status); requeueing the job"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"

# The same with Open MPI instead of srun (mpirun sets OMPI_COMM_WORLD_RANK and
# OMPI_COMM_WORLD_SIZE; rank 0 runs on the job's first host, where this script runs,
# and the nodes find it there from SLURM_JOB_NODELIST and SLURM_JOB_ID):
#
#   mpirun -np 4 --map-by node shoal node conf/brown-4nodes.yaml \
#       --set cluster.key_file="$KEY"
