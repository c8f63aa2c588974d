#!/usr/bin/env bash
# bench_scale.sh: the predictions of the scaling model (shoal-scale) that bench/README.md
# quotes, "Scaling model": the gossip-BMUF paper's setting (its model shape on 4 and 8
# GPUs) and 16..1024 nodes on three links, for allreduce, BMUF and gossip-BMUF. Prints
# Markdown tables. A model, not a measurement: see shoal-scale(1) for what it assumes.
#
#   bench/bench_scale.sh [--step-ms T]
#
#   --step-ms T    compute time of one step of the paper's model on one GPU (default 120,
#                  the estimate for a Tesla M40 that bench/README.md derives)
#   -h, --help     this text
#
# Environment: SHOAL_SCALE (the binary, default <repo>/build/tools/shoal-scale).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
scale=${SHOAL_SCALE:-$top/build/tools/shoal-scale}
step=120
while [ $# -gt 0 ]; do
    case $1 in
    --step-ms) step=$2; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$scale" ] || { echo "bench_scale.sh: $scale is not built (make)" >&2; exit 1; }

# The paper's model in shoal's terms: vocabulary 267,735 (wikitext-103), embedding 512,
# one LSTMP layer 2048/512, sampled softmax (shoal has no adaptive softmax: its output
# embedding is the full V x 512), 128 x 40 = 5120 tokens a step, 8 embedding shards,
# periods (16, 128).
paper=(--config "$top/conf/brown-4nodes-gossip-bmuf-paper.yaml" --set data.vocab_size=267733)

# One row of the text table for n nodes: "speed-up util MB/node/step wait".
row() {
    local n=$1; shift
    "$scale" "${paper[@]}" --step-ms "$step" --nodes "$n" "$@" |
        awk -v n="$n" '$1 == n && NF == 8 { printf "%s | %s | %.1f | %.1f", $5, $6, $7, $8 }'
}

echo "### The paper's setting: step $step ms"
echo
echo "| method | GPUs | k, q | link | speed-up | utilization | MB/node/step | wait ms/step |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for link in "10gbit 0.1 per-link" "10gbit 0.1 shared" "100gbit 0.01 per-link"; do
    set -- $link
    for n in 4 8; do
        k=$((n == 4 ? 1 : 2))
        q=$((n == 4 ? 1 : 2))
        echo "| gossip-BMUF | $n | $k, $q | $1 $2 ms $3 | $(row $n --bandwidth $1 --latency-ms $2 \
            --uplink $3 --set topology.degree=$k --set sync.neighbours=$q) |"
        echo "| BMUF | $n | - | $1 $2 ms $3 | $(row $n --bandwidth $1 --latency-ms $2 --uplink $3 \
            --set sync.algorithm=bmuf) |"
    done
done
echo
echo "### 16 to 1024 nodes: speed-up (utilization), step $step ms, per-link"
for link in "10gbit 0.1" "1gbit 10" "100mbit 50"; do
    set -- $link
    echo
    echo "$1, $2 ms:"
    echo
    echo "| nodes | allreduce | BMUF | gossip-BMUF q=2 | gossip-BMUF q=2, shared uplink |"
    echo "| --- | --- | --- | --- | --- |"
    for n in 16 32 64 128 256 512 1024; do
        cell() { row "$n" --bandwidth "$1" --latency-ms "$2" "${@:3}" |
            awk -F' [|] ' '{ printf "%s (%s)", $1, $2 }'; }
        echo "| $n | $(cell $1 $2 --set sync.algorithm=allreduce) | $(cell $1 $2 \
            --set sync.algorithm=bmuf) | $(cell $1 $2 --set sync.neighbours=2) | $(cell $1 $2 \
            --set sync.neighbours=2 --uplink shared) |"
    done
done
