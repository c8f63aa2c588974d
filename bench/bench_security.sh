#!/usr/bin/env bash
# bench_security.sh: what cluster.security: curve and mac cost over tcp, side by side
# with security off, in one invocation: ring allreduce bus bandwidth and gossip throughput
# (bench_allreduce over tcp loopback, ZeroMQ only, so that every byte crosses a CURVE
# connection) at 4, 16 and 64 MiB, and training tokens/s of 4 gossip-BMUF nodes over
# tcp (shoal run, conf/brown-4nodes-gossip-bmuf.yaml, shared memory off).
#
#   bench/bench_security.sh [--nodes "2 4"] [--sizes "4M 16M 64M"] [--trials T]
#                           [--steps N] [--no-train] [--builddir DIR]
#
#   --nodes LIST    node counts of the allreduce runs (default "2 4")
#   --sizes LIST    payload sizes, K/M suffixes (default "4M 16M 64M")
#   --trials T      runs of each side, taking turns; each figure is the median
#                   (default 3)
#   --steps N       training steps of each training run (default 60)
#   --no-train      the allreduce figures only
#   --builddir DIR  a configured, built tree (default $SHOAL_BUILDDIR, else <repo>/build)
#   -h, --help      this text
#
# Columns: none with cluster.security: none, curve with CURVE (every byte encrypted),
# mac with frame MACs (authenticated, not encrypted); -% = how much lower a secure
# side's figure is than none's. Loopback has no wire: the cryptography (XSalsa20-
# Poly1305 on ZeroMQ's I/O thread for CURVE, Poly1305 on the node's own thread for mac)
# competes with the copies for the same cores, which is its worst case. Figures only: it
# never fails on speed; it exits non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
builddir=${SHOAL_BUILDDIR:-$top/build}
nodes="2 4"
sizes="4M 16M 64M"
trials=3
steps=60
train=1

die() {
    echo "bench_security.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
        --nodes) [ $# -ge 2 ] || die "--nodes needs a value"; nodes=$2; shift 2 ;;
        --sizes) [ $# -ge 2 ] || die "--sizes needs a value"; sizes=$2; shift 2 ;;
        --trials) [ $# -ge 2 ] || die "--trials needs a value"; trials=$2; shift 2 ;;
        --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
        --no-train) train=0; shift ;;
        --builddir) [ $# -ge 2 ] || die "--builddir needs a value"; builddir=$2; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $trials =~ ^[1-9][0-9]*$ ]] || die "--trials must be a positive integer, not '$trials'"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, not '$steps'"
[ -f "$builddir/libshoal.a" ] || die "no $builddir/libshoal.a: build shoal first or pass --builddir"
tmp=$(mktemp -d /tmp/shoal-bench-security-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# shellcheck disable=SC2046
"${CC:-gcc}" -std=c11 -D_GNU_SOURCE -O2 -I"$top/src" -I"$top" -I"$builddir" \
    "$top/bench/bench_allreduce.c" "$top/bench/bench_cpu.c" "$builddir/libshoal.a" \
    $(pkg-config --cflags --libs libzmq libsodium) -lpthread -lm -o "$tmp/bench_allreduce" \
    || die "building bench_allreduce failed"

# median of the numbers on stdin
declare -A bw go tok

median() {
    sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

echo "# cpu: $(bench_cpu)"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $nodes; do
    for k in $(seq "$trials"); do
        for side in none curve mac; do
            flag=""
            [ $side != none ] && flag=--$side
            # shellcheck disable=SC2086
            "$tmp/bench_allreduce" -n "$n" --no-shm $flag --sizes "$sizes" >"$tmp/$side.$n.$k" \
                || { cat "$tmp/$side.$n.$k"; die "bench_allreduce -n $n $flag failed"; }
        done
    done
    echo "# $n nodes, tcp loopback, ZeroMQ only; medians of $trials trials, the sides taking turns"
    echo "# busbw_GBps (ring allreduce)               gossip_GBps (push + collect)"
    printf "%-6s %6s %6s %6s %6s %6s   %6s %6s %6s %6s %6s\n" size none curve -% mac -% \
        none curve -% mac -%
    for size in $sizes; do
        label=${size}iB # bench_allreduce prints 4MiB for 4M
        for side in none curve mac; do
            bw[$side]=$(awk -v s="$label" '$1 == s { print $3 }' "$tmp/$side.$n".* | median)
            go[$side]=$(awk -v s="$label" '$1 == s { print $4 }' "$tmp/$side.$n".* | median)
        done
        awk -v s="$size" -v bn="${bw[none]}" -v bc="${bw[curve]}" -v bm="${bw[mac]}" \
            -v gn="${go[none]}" -v gc="${go[curve]}" -v gm="${go[mac]}" '
            function cost(a, b) { return a > 0 ? 100 * (a - b) / a : 0 }
            BEGIN {
                printf "%-6s %6.3f %6.3f %6.1f %6.3f %6.1f   %6.3f %6.3f %6.1f %6.3f %6.1f\n",
                       s, bn, bc, cost(bn, bc), bm, cost(bn, bm), gn, gc, cost(gn, gc), gm,
                       cost(gn, gm)
            }'
    done
    echo
done

if [ $train = 1 ]; then
    shoal=${SHOAL:-$builddir/shoal}
    data=${SHOAL_DATA:-$top/../shared/data}
    echo "# training tokens/s: 4 gossip-BMUF nodes over tcp (shoal run), $steps steps," \
        "shared memory off"
    printf "%-6s %8s %8s %6s %8s %6s\n" trial none curve -% mac -%
    for k in $(seq "$trials"); do
        for side in none curve mac; do
            "$shoal" run "$top/conf/brown-4nodes-gossip-bmuf.yaml" --transport tcp \
                --set cluster.security=$side --set cluster.shared_memory=false \
                --set train.max_steps="$steps" --set train.eval_every_epoch=false \
                --set data.train="$data/brown/train.txt" --set data.valid="$data/brown/valid.txt" \
                --set data.test="$data/brown/test.txt" \
                --set run.dir="$tmp/run-$side-$k" >"$tmp/train-$side-$k.log" 2>&1 \
                || { tail -5 "$tmp/train-$side-$k.log"; die "shoal run ($side) failed"; }
            tok[$side]=$(grep -o '"tokens_per_s": *[0-9.]*' "$tmp/run-$side-$k/summary.json" |
                         head -1 | grep -o '[0-9.]*$')
        done
        awk -v k="$k" -v a="${tok[none]}" -v b="${tok[curve]}" -v c="${tok[mac]}" '
            function cost(x, y) { return x > 0 ? 100 * (x - y) / x : 0 }
            BEGIN { printf "%-6s %8.0f %8.0f %6.1f %8.0f %6.1f\n", k, a, b, cost(a, b), c, cost(a, c) }'
    done
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
