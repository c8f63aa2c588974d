#!/usr/bin/env bash
# bench_corpus.sh: what loading a large corpus costs the nodes of a run: Brown's training
# text repeated R times, a small model, 2 steps. Side by side in one invocation:
#   1 node      shoal train: one process that holds the whole training split
#   N nodes     shoal run -n N, first with an empty token cache (one node builds it, the
#               others wait for it), then again with the cache (each node reads its share)
# Per row: wall seconds and each process's peak resident memory (summary.json's
# peak_rss_kb), with the CPU model in the heading.
#
#   bench/bench_corpus.sh [--repeat R] [--nodes N] [--out DIR] [--keep]
#
#   --repeat R   copies of brown/train.txt in the corpus (default 20: 22M tokens, 110 MB)
#   --nodes N    nodes of the run (default 4)
#   --out DIR    corpus, caches and runs (default a temp dir, removed unless --keep)
#   -h, --help   this text
#
# Environment: SHOAL (default <repo>/build/shoal), SHOAL_DATA (default ../shared/data).
set -euo pipefail

me=bench_corpus.sh
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
repeat=20
nodes=4
out=""
keep=0
tmp_out=""
child=""
while [ $# -gt 0 ]; do
    case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) bench_help; exit 0 ;;
    *) echo "$me: unknown argument '$1' (see $me --help)" >&2; exit 2 ;;
    esac
done
case $repeat$nodes in *[!0-9]* | "") echo "$me: --repeat and --nodes take numbers" >&2; exit 2 ;; esac
cleanup() { bench_stop_child; [ -z "$tmp_out" ] || rm -rf "$tmp_out"; }
bench_traps cleanup
bench_out_dir corpus

for _ in $(seq "$repeat"); do cat "$data/brown/train.txt"; done >"$out/train.txt"
sets=(--set "data.train=$out/train.txt" --set "data.valid=$data/brown/valid.txt"
    --set "data.test=$data/brown/test.txt" --set model.embedding=16
    --set "model.layers=[{lstm: 16}]" --set "model.output={type: sampled, samples: 64}"
    --set train.max_steps=2 --set run.keep_best=false --quiet)

# row NAME DIR CMD...: CMD timed, then the peak memory of every summary.json under DIR
row() {
    local name=$1 dir=$2 t0 t1 rss files
    shift 2
    t0=$(date +%s.%N)
    "$@" >"$out/$name.log" 2>&1 || { echo "$me: $name failed; see $out/$name.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    # a run of several nodes: each node's own file (the run's is rank 0's again)
    files=("$dir"/node-*/summary.json)
    [ -f "${files[0]}" ] || files=("$dir/summary.json")
    rss=$(for f in "${files[@]}"; do bench_num peak_rss_kb "$f"; done | sort -n | tr '\n' ' ')
    printf '%-28s %8.2f  %s\n' "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$rss"
}

echo "# $me: $(bench_cpu); $repeat x brown/train.txt ($(wc -c <"$out/train.txt") bytes)"
printf '%-28s %8s  %s\n' "run" "wall_s" "peak_rss_kb (each process)"
row "1 node, cache empty" "$out/one" "$shoal" train "$top/conf/brown-word.yaml" "${sets[@]}" \
    --set "run.dir=$out/one" --set "data.cache_dir=$out/cache-one"
row "1 node, cache" "$out/one" "$shoal" train "$top/conf/brown-word.yaml" "${sets[@]}" \
    --set "run.dir=$out/one" --set "data.cache_dir=$out/cache-one" --no-resume
row "$nodes nodes, cache empty" "$out/many" "$shoal" run "$top/conf/brown-4nodes-gossip-bmuf.yaml" \
    -n "$nodes" "${sets[@]}" --set "run.dir=$out/many" --set "data.cache_dir=$out/cache-many"
row "$nodes nodes, cache" "$out/many" "$shoal" run "$top/conf/brown-4nodes-gossip-bmuf.yaml" \
    -n "$nodes" "${sets[@]}" --set "run.dir=$out/many" --set "data.cache_dir=$out/cache-many" \
    --no-resume
