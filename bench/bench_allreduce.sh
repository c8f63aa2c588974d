#!/usr/bin/env bash
# bench_allreduce.sh: bus bandwidth of shoal's ring allreduce at 2 and 4 local node
# processes for 256 KiB .. 64 MiB, gossip push/collect and raw ZeroMQ throughput for
# the same payloads, and MPI_Allreduce beside them in the same invocation when mpicc
# exists (Debian's OpenMPI: apt-get install openmpi-bin libopenmpi-dev).
#
#   bench/bench_allreduce.sh [--nodes "2 4"] [--sizes "256K 1M 4M 16M 64M"] [--ipc]
#                            [--chunk FLOATS] [--io-threads N] [--trials T]
#                            [--builddir DIR]
#
#   --nodes LIST    node counts (default "2 4")
#   --sizes LIST    payload sizes, K/M suffixes (default "256K 1M 4M 16M 64M")
#   --ipc           shoal over ipc:// instead of tcp://127.0.0.1
#   --chunk FLOATS  allreduce chunk (default the library's: about 8 frames a ring step,
#                   65536 to 262144 floats)
#   --io-threads N  shoal's ZeroMQ I/O threads per node (cluster.io_threads; default 0:
#                   from the machine's cores); each table's first line says how many ran
#   --trials T      run every program T times, in turn, and print each figure's median
#                   (default 3): a shared machine's noise falls on all columns alike
#   --builddir DIR  a configured, built tree: its libshoal.a is linked
#                   (default $SHOAL_BUILDDIR, else <repo>/build)
#   -h, --help      this text
#
# Columns: allreduce_ms and busbw_GBps = 2(n-1)/n * size / time for shoal as it runs by
# default, with frames of 16 KiB and more going through shared-memory lanes between
# these local processes, and busbw_zmq_GBps with everything over ZeroMQ
# (cluster.shared_memory: false); gossip_GBps (lanes) and gossip_zmq_GBps (ZeroMQ only)
# and rawzmq_GBps = size / time of one push-to-left + collect-from-right exchange per
# node (sl_gossip_exchange, then bare PUSH/PULL; a gossip snapshot over 8 MiB does not
# fit a lane); mpi_* for MPI_Allreduce with OpenMPI's default transports (shared
# memory: compare with busbw_GBps) and mpitcp_* with TCP loopback only (--mca btl
# tcp,self: compare with busbw_zmq_GBps). Each timing moves 256 MiB (5 to 1000
# repetitions). The machine is shared: the load average is printed before and after
# each run. Figures only: it never fails on speed; it exits non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
builddir=${SHOAL_BUILDDIR:-$top/build}
nodes="2 4"
sizes="256K 1M 4M 16M 64M"
ipc=""
chunk=""
io=""
trials=3

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "bench_allreduce.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
        --nodes) [ $# -ge 2 ] || die "--nodes needs a value"; nodes=$2; shift 2 ;;
        --sizes) [ $# -ge 2 ] || die "--sizes needs a value"; sizes=$2; shift 2 ;;
        --ipc) ipc=--ipc; shift ;;
        --chunk) [ $# -ge 2 ] || die "--chunk needs a value"; chunk="--chunk $2"; shift 2 ;;
        --io-threads) [ $# -ge 2 ] || die "--io-threads needs a value"; io="--io-threads $2"; shift 2 ;;
        --trials) [ $# -ge 2 ] || die "--trials needs a value"; trials=$2; shift 2 ;;
        --builddir) [ $# -ge 2 ] || die "--builddir needs a value"; builddir=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

[[ $trials =~ ^[1-9][0-9]*$ ]] || die "--trials must be a positive integer, not '$trials'"
[ -f "$builddir/libshoal.a" ] || die "no $builddir/libshoal.a: build shoal first or pass --builddir"
tmp=$(mktemp -d /tmp/shoal-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cc=${CC:-gcc}
# shellcheck disable=SC2046
"$cc" -std=c11 -D_GNU_SOURCE -O2 -I"$top/src" -I"$top" \
    "$top/bench/bench_allreduce.c" "$builddir/libshoal.a" \
    $(pkg-config --cflags --libs libzmq libsodium yaml-0.1) \
    -lpthread -lm -o "$tmp/bench_allreduce" || die "building bench_allreduce failed"
have_mpi=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    mpicc -O2 "$top/bench/bench_allreduce_mpi.c" -o "$tmp/bench_allreduce_mpi" \
        || die "building the MPI helper failed"
    have_mpi=1
else
    echo "# mpicc not found: MPI columns left out (apt-get install openmpi-bin libopenmpi-dev)"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mpi_run() { # n, extra mpirun args... -> table on stdout
    local n=$1
    shift
    mpirun --oversubscribe -np "$n" "$@" "$tmp/bench_allreduce_mpi" --sizes "$sizes"
}

# median FILES...: the tables of several trials of one program (lines "size v1 v2 ...",
# "#" lines and the header skipped) as one table of each figure's median
median() {
    awk '
        /^#/ || $1 == "size" { next }
        !($1 in seen) { seen[$1] = 1; order[++nsizes] = $1 }
        { k = ++cnt[$1]; for (c = 2; c <= NF; c++) v[$1, c, k] = $c; ncol = NF }
        END {
            for (s = 1; s <= nsizes; s++) {
                size = order[s]; line = size; n = cnt[size]
                for (c = 2; c <= ncol; c++) {
                    for (i = 1; i <= n; i++) a[i] = v[size, c, i] + 0
                    for (i = 2; i <= n; i++)          # insertion sort: a few trials
                        for (j = i; j > 1 && a[j - 1] > a[j]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
                    m = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
                    line = line " " sprintf("%.3f", m)
                }
                print line
            }
        }' "$@"
}

echo "# cpu: $(bench_cpu)"
for n in $nodes; do
    for k in $(seq "$trials"); do
        # shellcheck disable=SC2086
        "$tmp/bench_allreduce" -n "$n" $ipc $chunk $io --sizes "$sizes" >"$tmp/shoal.$k" \
            || { cat "$tmp/shoal.$k"; die "bench_allreduce -n $n failed"; }
        # shellcheck disable=SC2086
        "$tmp/bench_allreduce" -n "$n" $ipc $chunk $io --no-shm --sizes "$sizes" >"$tmp/zmq.$k" \
            || { cat "$tmp/zmq.$k"; die "bench_allreduce -n $n --no-shm failed"; }
        : >"$tmp/mpi.$k"
        : >"$tmp/mpitcp.$k"
        if [ $have_mpi = 1 ]; then
            mpi_run "$n" >"$tmp/mpi.$k" || die "mpirun -np $n failed"
            mpi_run "$n" --mca btl tcp,self --mca pml ob1 >"$tmp/mpitcp.$k" \
                || die "mpirun -np $n (tcp) failed"
        fi
    done
    for prog in shoal zmq mpi mpitcp; do
        median "$tmp/$prog".[0-9]* >"$tmp/$prog.txt"
    done
    grep '^#' "$tmp/shoal.1" | grep -v 'load after' || true
    [ "$trials" = 1 ] || echo "# medians of $trials trials, the programs taking turns"
    # one line per size: shoal's columns, then MPI's (joined on the size)
    awk -v have_mpi=$have_mpi '
        FILENAME == ARGV[1] { mpi_ms[$1] = $2; mpi_bw[$1] = $3; next }
        FILENAME == ARGV[2] { tcp_ms[$1] = $2; tcp_bw[$1] = $3; next }
        FILENAME == ARGV[3] { zmq_bw[$1] = $3; zmq_go[$1] = $4; next }
        FNR == 1 {
            m = have_mpi ? sprintf(" %10s %9s %12s %11s", "mpi_ms", "mpi_GBps", "mpitcp_ms", "mpitcp_GBps") : ""
            printf "%-8s %12s %10s %14s %11s %15s %11s%s\n", "size", "allreduce_ms", "busbw_GBps",
                   "busbw_zmq_GBps", "gossip_GBps", "gossip_zmq_GBps", "rawzmq_GBps", m
        }
        {
            m = have_mpi ? sprintf(" %10s %9s %12s %11s", mpi_ms[$1], mpi_bw[$1], tcp_ms[$1], tcp_bw[$1]) : ""
            printf "%-8s %12s %10s %14s %11s %15s %11s%s\n", $1, $2, $3, zmq_bw[$1], $4, zmq_go[$1], $5, m
        }' "$tmp/mpi.txt" "$tmp/mpitcp.txt" "$tmp/zmq.txt" "$tmp/shoal.txt"
    echo "# load after each trial: $(grep -h 'load after' "$tmp"/shoal.[0-9]* | awk '{ print $NF }' | tr '\n' ' ')"
    echo
done
