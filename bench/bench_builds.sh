#!/usr/bin/env bash
# bench_builds.sh: two builds of shoal side by side on this machine, for a change that
# must not move speed (a refactor) or one that should: the ring allreduce and gossip
# (bench_allreduce.sh), one node's training throughput (bench_train.sh, shoal only) and
# a 4-node run's time in sync (bench_lanes.sh), the two builds taking turns ROUNDS
# times, then each figure's median per build beside the other's. The CPU model heads
# the output; every raw table is kept under --out.
#
#   bench/bench_builds.sh --base BUILDDIR [--new BUILDDIR] [--rounds R] [--what LIST]
#                         [--out DIR]
#
#   --base BUILDDIR  the build to compare against (configured and built: its shoal and
#                    libshoal.a), e.g. of the commit before the change in a git worktree
#   --new BUILDDIR   the build under test (default <repo>/build)
#   --rounds R       turns of each build (default 3): base, new, base, new, ...
#   --what LIST      any of: allreduce train lanes (default all three)
#   --out DIR        keep the raw outputs here (default a temporary dir, removed)
#   -h, --help       this text
#
# allreduce runs bench_allreduce.sh --nodes "2 4" --trials 3 (bus bandwidth with lanes
# and over ZeroMQ only); train runs bench_train.sh --models "word sampled" --threads 1
# --steps 60 (PyTorch too where it is installed; only shoal's figures are compared);
# lanes runs bench_lanes.sh on conf/brown-4nodes-allreduce.yaml for 30 steps, with
# and without shared memory.
# Figures only: it never fails on speed; it exits non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
base="" new=$top/build rounds=3 what="allreduce train lanes" out=""

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "bench_builds.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case $1 in
        --base) [ $# -ge 2 ] || die "--base needs a value"; base=$2; shift 2 ;;
        --new) [ $# -ge 2 ] || die "--new needs a value"; new=$2; shift 2 ;;
        --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; rounds=$2; shift 2 ;;
        --what) [ $# -ge 2 ] || die "--what needs a value"; what=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ -n "$base" ] || die "--base BUILDDIR is required (see --help)"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, not '$rounds'"
for w in $what; do
    case $w in allreduce|train|lanes) ;; *) die "--what: unknown '$w'" ;; esac
done
for b in "$base" "$new"; do
    [ -x "$b/shoal" ] && [ -f "$b/libshoal.a" ] || die "$b: no built shoal and libshoal.a"
done
base=$(cd "$base" && pwd) new=$(cd "$new" && pwd)
if [ -z "$out" ]; then
    out=$(mktemp -d /tmp/shoal-bench-builds-XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

echo "# cpu: $(bench_cpu)"
echo "# base: $base"
echo "# new:  $new"
echo "# $rounds rounds, the builds taking turns (base first); medians per build"

# one run of benchmark w with build dir b, raw output to file f
run_one() {
    local w=$1 b=$2 f=$3
    case $w in
        allreduce) "$top/bench/bench_allreduce.sh" --builddir "$b" --nodes "2 4" --trials 3 ;;
        train) SHOAL=$b/shoal "$top/bench/bench_train.sh" \
                   --models "word sampled" --threads 1 --steps 60 ;;
        lanes) SHOAL=$b/shoal "$top/bench/bench_lanes.sh" \
                   --conf "$top/conf/brown-4nodes-allreduce.yaml" --steps 30 --repeat 1 ;;
    esac >"$f" 2>&1 || { cat "$f" >&2; die "$w with $b failed (output above)"; }
}

# "key value" lines of the figures of one raw output of benchmark w
figures() {
    local w=$1 f=$2
    case $w in
        allreduce) awk '/ nodes over /{ for (i = 1; i <= NF; i++) if ($i == "nodes") n = $(i - 1) }
                        /^[0-9]+[KM]iB /{ print n "n/" $1 "/busbw", $3; print n "n/" $1 "/busbw_zmq", $4 }' "$f" ;;
        train) awk '$1 == "word" || $1 == "sampled" { print $1 "/tok_s", $3 }' "$f" ;;
        lanes) awk '$1 == "true" || $1 == "false" { print "lanes=" $1 "/sync_s", $3; print "lanes=" $1 "/tok_s", $5 }' "$f" ;;
    esac
}

for r in $(seq "$rounds"); do
    for w in $what; do
        for side in base new; do
            b=$base; [ "$side" = new ] && b=$new
            run_one "$w" "$b" "$out/$w-$side-$r.txt"
            figures "$w" "$out/$w-$side-$r.txt" | sed "s|^|$w $side |" >>"$out/figures.txt"
        done
    done
    echo "# round $r of $rounds done" >&2
done

printf '%-10s %-26s %12s %12s %7s\n' bench figure base new new/base
awk '{ k = $1 " " $3; v[k, $2] = v[k, $2] " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
     function median(s,    a, n, i, j, t) {
         n = split(s, a, " ")
         for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
             t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
     }
     END { for (i = 1; i <= m; i++) { split(order[i], kk, " "); b = median(v[order[i], "base"])
               nw = median(v[order[i], "new"])
               printf "%-10s %-26s %12.3f %12.3f %7.3f\n", kk[1], kk[2], b, nw, b ? nw / b : 0 } }' \
    "$out/figures.txt"
