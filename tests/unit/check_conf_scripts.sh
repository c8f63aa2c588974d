#!/bin/sh
# The Slurm batch scripts of conf/ stay runnable: each parses (bash -n), none exports the
# rendezvous any more (the nodes find it themselves, sl_launcher_env.h), and
# slurm-gpu.sh asks for what its header promises: a GPU per task, a signal before the
# time limit, requeue. A broken rule prints the file and the rule.
# Usage: check_conf_scripts.sh [SRCDIR]   (default $SHOAL_SRCDIR, else the current directory)
top=${1:-${SHOAL_SRCDIR:-.}}
cd "$top" || { echo "check_conf_scripts: $top: no such directory" >&2; exit 99; }
command -v bash >/dev/null 2>&1 || { echo "check_conf_scripts: SKIP: no bash"; exit 77; }
status=0
for f in conf/*.sh; do
    bash -n "$f" || { echo "check_conf_scripts: $f: bash -n fails"; status=1; }
    if grep -n '^[^#]*export SHOAL_MASTER' "$f"; then
        echo "check_conf_scripts: $f: exports the rendezvous, which srun gives"
        status=1
    fi
done
for opt in '--gpus-per-task=1' '--signal=TERM@300' '--requeue' '--open-mode=append'; do
    grep -q "^#SBATCH $opt\$" conf/slurm-gpu.sh ||
        { echo "check_conf_scripts: conf/slurm-gpu.sh: no '#SBATCH $opt'"; status=1; }
done
grep -q 'scontrol requeue' conf/slurm-gpu.sh ||
    { echo "check_conf_scripts: conf/slurm-gpu.sh: never requeues"; status=1; }
exit $status
