#!/usr/bin/env bash
# bench_overlap.sh: what sync.overlap_steps costs and hides, side by side in one
# invocation: 4 gossip-BMUF nodes (shoal run, conf/brown-4nodes-gossip-bmuf.yaml) with
# tau = 0 and with each tau of TAUS, taking turns, for each seed; per run the wall time,
# the tokens/s of all nodes, rank 0's sync wait per step and the final model's
# validation perplexity; then each tau's mean perplexity and the change against tau = 0.
#
#   bench/bench_overlap.sh [--tau "T..."] [--seeds "1 2"] [--epochs E] [--transport ipc|tcp]
#                          [--set KEY=VALUE]... [--parallel] [--out DIR] [--keep]
#
#   --tau TAUS      the overlapped sides' sync.overlap_steps, one or more (default 2;
#                   each below the configuration's periods, 8 here)
#   --seeds LIST    run.seed values (default "1 2"); one epoch's perplexity moves by
#                   several percent from seed to seed, so compare means
#   --epochs E      train.epochs (default 1: 245 steps of each node)
#   --transport T   default tcp
#   --set KEY=VALUE passed to every run (e.g. --set cluster.emulate.latency_ms=10)
#   --parallel      run the seeds at the same time (each seed's sides still take
#                   turns): perplexity is the same bits, but wall time, tokens/s and
#                   wait then measure a machine the seeds share: compare them only
#                   within a seed
#   --out DIR       run directories and logs (default a temp dir); --keep keeps them
#   -h, --help      this text
#
# Environment: SHOAL (default <repo>/build/shoal), SHOAL_DATA (default ../shared/data).
# Figures only: it never fails on speed or perplexity; it exits non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
tau=2
seeds="1 2"
epochs=1
transport=tcp
sets=()
out=""
keep=0
parallel=0

die() {
    echo "bench_overlap.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
        --tau) [ $# -ge 2 ] || die "--tau needs a value"; tau=$2; shift 2 ;;
        --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; seeds=$2; shift 2 ;;
        --epochs) [ $# -ge 2 ] || die "--epochs needs a value"; epochs=$2; shift 2 ;;
        --transport) [ $# -ge 2 ] || die "--transport needs a value"; transport=$2; shift 2 ;;
        --set) [ $# -ge 2 ] || die "--set needs KEY=VALUE"; sets+=(--set "$2"); shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --parallel) parallel=1; shift ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
for t in $tau; do
    [[ $t =~ ^[1-9][0-9]*$ ]] || die "--tau takes positive integers, not '$t'"
done
[ -n "${tau// /}" ] || die "--tau needs at least one value"
[[ $epochs =~ ^[1-9][0-9]*$ ]] || die "--epochs must be a positive integer, not '$epochs'"
[ -x "$shoal" ] || die "no $shoal: build shoal first or set SHOAL"
[ -r "$data/brown/train.txt" ] || die "no $data/brown/train.txt (set SHOAL_DATA)"
if [ -z "$out" ]; then
    out=$(mktemp -d /tmp/shoal-bench-overlap-XXXXXX)
    [ $keep = 1 ] || trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

# json KEY FILE: a number from summary.json
json() {
    grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | sed 's/.*: *//'
}

echo "# cpu: $(bench_cpu)"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 4 gossip-BMUF nodes, $epochs epoch(s), $transport; tau 0 and $tau taking turns$(
    [ $parallel = 0 ] || echo ", the seeds in parallel")"
printf "%-5s %4s %8s %10s %14s %9s\n" seed tau wall_s tok_per_s wait_ms_step valid_ppl
# one_seed SEED: tau 0 and each tau in turn, a line of the table each
one_seed() {
    local seed=$1 t run start wall tok
    for t in 0 $tau; do
        run=$out/s$seed-t$t
        start=$(date +%s.%N)
        "$shoal" run "$top/conf/brown-4nodes-gossip-bmuf.yaml" --quiet --transport "$transport" \
            --set train.epochs="$epochs" --set sync.overlap_steps="$t" --set run.seed="$seed" \
            --set data.train="$data/brown/train.txt" --set data.valid="$data/brown/valid.txt" \
            --set data.test="$data/brown/test.txt" --set run.dir="$run" "${sets[@]}" \
            >"$run.log" 2>&1 || { tail -5 "$run.log"; die "seed $seed tau $t failed"; }
        wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
        tok=$(grep -o '[0-9]* tokens/s in all' "$run.log" | tail -1 | cut -d' ' -f1)
        awk -v s="$seed" -v t="$t" -v w="$wall" -v k="$tok" \
            -v sync="$(json sync_time_s "$run/summary.json")" \
            -v steps="$(json steps "$run/summary.json")" \
            -v ppl="$(json valid_ppl "$run/summary.json")" 'BEGIN {
            printf "%-5s %4s %8.1f %10s %14.2f %9.2f\n", s, t, w, k, 1000 * sync / steps, ppl }' |
            tee -a "$out/table"
    done
}
pids=()
for seed in $seeds; do
    if [ $parallel = 1 ]; then
        one_seed "$seed" &
        pids+=($!)
    else
        one_seed "$seed"
    fi
done
for p in "${pids[@]}"; do
    wait "$p" || die "a seed's run failed (above)"
done
awk -v taus="$tau" '
    { sum[$2] += $6; n[$2]++ }
    END {
        m0 = sum[0] / n[0]; line = sprintf("# mean valid ppl over %d seeds: tau 0 %.2f", n[0], m0)
        k = split(taus, t, " ")
        for (i = 1; i <= k; i++) {
            m = sum[t[i]] / n[t[i]]
            line = line sprintf(", tau %s %.2f (%+.2f%%)", t[i], m, 100 * (m - m0) / m0)
        }
        print line
    }' "$out/table"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
