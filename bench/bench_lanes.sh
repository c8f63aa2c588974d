#!/usr/bin/env bash
# bench_lanes.sh: what shared-memory lanes (cluster.shared_memory) do to a training run:
# N local nodes of a configuration trained with lanes and without, in turn, and per run
# each node's mean time in sync, the mean peak RSS, the tokens/s of all nodes and the
# final model's validation perplexity (the same with and without: lanes change no bits).
#
#   bench/bench_lanes.sh [--conf CONF] [-n N] [--steps S] [--repeat R] [--out DIR]
#                        [--set KEY=VALUE]...
#
#   --conf CONF    configuration (default conf/brown-4nodes-allreduce.yaml; also e.g.
#                  conf/brown-4nodes-gossip-bmuf.yaml)
#   -n N           nodes (default 4)
#   --steps S      training steps (default 30)
#   --repeat R     runs of each setting, alternating (default 2)
#   --out DIR      run directories (default a temporary one, removed at exit)
#   --set KEY=VALUE  passed on to every run
#   -h, --help     this text
#
# Environment: SHOAL (the binary, default <repo>/build/shoal), SHOAL_DATA (corpora,
# default <repo>/../shared/data). Figures only: it exits non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
conf=$top/conf/brown-4nodes-allreduce.yaml
nodes=4
steps=30
repeat=2
out=""
sets=()

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "bench_lanes.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
        --conf) [ $# -ge 2 ] || die "--conf needs a value"; conf=$2; shift 2 ;;
        -n) [ $# -ge 2 ] || die "-n needs a value"; nodes=$2; shift 2 ;;
        --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
        --repeat) [ $# -ge 2 ] || die "--repeat needs a value"; repeat=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
        --set) [ $# -ge 2 ] || die "--set needs a value"; sets+=(--set "$2"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
for v in nodes steps repeat; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "${v} must be a positive integer, not '${!v}'"
done
[ -x "$shoal" ] || die "no shoal binary at $shoal (build first or set SHOAL)"
[ -r "$conf" ] || die "cannot read $conf"
[ -r "$data/brown/train.txt" ] || die "no Brown corpus under $data (set SHOAL_DATA)"
if [ -z "$out" ]; then
    out=$(mktemp -d /tmp/shoal-bench-lanes-XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

echo "# cpu: $(bench_cpu)"
echo "# $(basename "$conf"), $nodes nodes, $steps steps"
printf '%-6s %-3s %12s %12s %10s %10s\n' lanes run sync_s_node rss_MB_node tok_per_s valid_ppl
for r in $(seq "$repeat"); do
    for shm in true false; do
        dir=$out/$shm-$r
        "$shoal" run "$conf" -n "$nodes" --set "train.max_steps=$steps" \
            --set "cluster.shared_memory=$shm" --set "run.dir=$dir" \
            --set "data.train=$data/brown/train.txt" --set "data.valid=$data/brown/valid.txt" \
            --set "data.test=$data/brown/test.txt" "${sets[@]}" --no-resume \
            >"$dir.log" 2>&1 || { tail -n 5 "$dir.log"; die "the run with lanes $shm failed"; }
        # the nodes' summary.json, then the run's (the final model's perplexity)
        awk -v shm="$shm" -v r="$r" '
            FILENAME ~ /node-[0-9]+\/summary.json$/ {
                if (match($0, /"sync_time_s": *[0-9.eE+-]+/)) {
                    split(substr($0, RSTART, RLENGTH), a, ":"); sync += a[2]; n++ }
                if (match($0, /"peak_rss_kb": *[0-9]+/)) {
                    split(substr($0, RSTART, RLENGTH), a, ":"); rss += a[2] }
                if (match($0, /"tokens_per_s": *[0-9.eE+-]+/)) {
                    split(substr($0, RSTART, RLENGTH), a, ":"); tps += a[2] }
                next
            }
            {
                if (match($0, /"valid_ppl": *[0-9.eE+-]+/)) {
                    split(substr($0, RSTART, RLENGTH), a, ":"); ppl = a[2] }
            }
            END {
                printf "%-6s %-3s %12.2f %12.0f %10.0f %10.2f\n", shm, r, sync / n,
                       rss / n / 1024, tps, ppl
            }' "$dir"/node-*/summary.json "$dir/summary.json"
    done
done
