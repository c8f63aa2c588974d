#!/usr/bin/env bash
# bench_allreduce.sh: bus bandwidth of shoal's ring allreduce at 2 and 4 local node
# processes for 256 KiB .. 64 MiB, gossip push/collect and raw ZeroMQ throughput for
# the same payloads, and MPI_Allreduce beside them in the same invocation when mpicc
# exists (Debian's OpenMPI: apt-get install openmpi-bin libopenmpi-dev).
#
#   bench/bench_allreduce.sh [--nodes "2 4"] [--sizes "256K 1M 4M 16M 64M"] [--ipc]
#                            [--chunk FLOATS] [--builddir DIR]
#
#   --nodes LIST    node counts (default "2 4")
#   --sizes LIST    payload sizes, K/M suffixes (default "256K 1M 4M 16M 64M")
#   --ipc           shoal over ipc:// instead of tcp://127.0.0.1
#   --chunk FLOATS  allreduce chunk (default the library's, 262144 floats = 1 MiB)
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
# tcp,self: compare with busbw_zmq_GBps). The machine is shared: the load average is
# printed before and after each run. Figures only: it never fails on speed; it exits
# non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
builddir=${SHOAL_BUILDDIR:-$top/build}
nodes="2 4"
sizes="256K 1M 4M 16M 64M"
ipc=""
chunk=""

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
        --builddir) [ $# -ge 2 ] || die "--builddir needs a value"; builddir=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

[ -f "$builddir/libshoal.a" ] || die "no $builddir/libshoal.a: build shoal first or pass --builddir"
tmp=$(mktemp -d /tmp/shoal-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cc=${CC:-gcc}
# shellcheck disable=SC2046
"$cc" -std=c11 -D_GNU_SOURCE -O2 -I"$top/src/common" -I"$top/src/transport" \
    "$top/bench/bench_allreduce.c" "$builddir/libshoal.a" $(pkg-config --cflags --libs libzmq) \
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

for n in $nodes; do
    # shellcheck disable=SC2086
    "$tmp/bench_allreduce" -n "$n" $ipc $chunk --sizes "$sizes" >"$tmp/shoal.txt" \
        || { cat "$tmp/shoal.txt"; die "bench_allreduce -n $n failed"; }
    # shellcheck disable=SC2086
    "$tmp/bench_allreduce" -n "$n" $ipc $chunk --no-shm --sizes "$sizes" >"$tmp/zmq.txt" \
        || { cat "$tmp/zmq.txt"; die "bench_allreduce -n $n --no-shm failed"; }
    : >"$tmp/mpi.txt"
    : >"$tmp/mpitcp.txt"
    if [ $have_mpi = 1 ]; then
        mpi_run "$n" >"$tmp/mpi.txt" || die "mpirun -np $n failed"
        mpi_run "$n" --mca btl tcp,self --mca pml ob1 >"$tmp/mpitcp.txt" \
            || die "mpirun -np $n (tcp) failed"
    fi
    grep '^#' "$tmp/shoal.txt" | grep -v 'load after' || true
    # one line per size: shoal's columns, then MPI's (joined on the size)
    awk -v have_mpi=$have_mpi '
        FILENAME == ARGV[1] && !/^#/ { mpi_ms[$1] = $2; mpi_bw[$1] = $3; next }
        FILENAME == ARGV[2] && !/^#/ { tcp_ms[$1] = $2; tcp_bw[$1] = $3; next }
        FILENAME == ARGV[3] && !/^#/ { zmq_bw[$1] = $3; zmq_go[$1] = $4; next }
        FILENAME == ARGV[4] && /^#/ { next }
        FILENAME == ARGV[4] {
            if ($1 == "size") {
                z1 = "busbw_zmq_GBps"; z2 = "gossip_zmq_GBps"
                m = have_mpi ? sprintf(" %10s %9s %12s %11s", "mpi_ms", "mpi_GBps", "mpitcp_ms", "mpitcp_GBps") : ""
            } else {
                z1 = zmq_bw[$1]; z2 = zmq_go[$1]
                m = have_mpi ? sprintf(" %10s %9s %12s %11s", mpi_ms[$1], mpi_bw[$1], tcp_ms[$1], tcp_bw[$1]) : ""
            }
            printf "%-8s %12s %10s %14s %11s %15s %11s%s\n", $1, $2, $3, z1, $4, z2, $5, m
        }' "$tmp/mpi.txt" "$tmp/mpitcp.txt" "$tmp/zmq.txt" "$tmp/shoal.txt"
    grep 'load after' "$tmp/shoal.txt" || true
    echo
done
