#!/usr/bin/env bash
# bench_allreduce.sh: bus bandwidth of shoal's ring allreduce at 2 and 4 local node
# processes for 256 KiB .. 64 MiB, gossip push/collect and raw ZeroMQ throughput for
# the same payloads, and MPI_Allreduce beside them in the same invocation when mpicc
# exists (Debian's OpenMPI: apt-get install openmpi-bin libopenmpi-dev).
#
#   bench/bench_allreduce.sh [--nodes "2 4"] [--sizes "256K 1M 4M 16M 64M"] [--ipc]
#                            [--chunk FLOATS] [--io-threads N] [--stripes "N[w][@T] ..."]
#                            [--allreduce "auto ring"] [--tcp-only] [--security MODE]
#                            [--trials T]
#                            [--builddir DIR]
#
#   --nodes LIST    node counts (default "2 4")
#   --sizes LIST    payload sizes, K/M suffixes (default "256K 1M 4M 16M 64M")
#   --ipc           shoal over ipc:// instead of tcp://127.0.0.1
#   --chunk FLOATS  allreduce chunk (default the library's: about 8 frames a ring step,
#                   65536 to 262144 floats)
#   --io-threads N  shoal's ZeroMQ I/O threads per node (cluster.io_threads; default 0:
#                   from the machine's cores); each table's first line says how many ran
#   --stripes LIST  shoal's ZeroMQ connections per peer (cluster.stripes; default "0": one
#                   per sending I/O thread); with several counts, "1 2" say, the ZeroMQ-only
#                   run is made once per count, taking turns, and its columns come once per
#                   count (busbw_zmq_s1_GBps, busbw_zmq_s2_GBps, ...); the lanes run takes
#                   the first count. The "# shoal ring" lines name each run's count, the
#                   "messages ... per stripe" lines what rank 0 sent on each (gossip
#                   snapshots of 128 KiB and more go in pieces, one a stripe; 64 to 128
#                   KiB in turn; the allreduce's chunks, of any size, all on stripe 0).
#                   Nw: N stripes, large snapshots whole and in turn, never in pieces
#                   ("1 2 2w" weighs the pieces against whole frames). N@T (or Nw@T):
#                   that run with T I/O threads in place of --io-threads' count, so
#                   that "1@2 2@4" weighs the default thread count against more threads
#                   with more stripes in one invocation
#   --allreduce LIST  how shoal's allreduce moves its segments (cluster.allreduce):
#                   auto (the default: halving and doubling on even counts from 4,
#                   else the ring) or ring; with both, "auto ring", the ZeroMQ-only runs are made
#                   once for each, taking turns, and their busbw columns come once for
#                   each (busbw_zmq_auto_GBps, busbw_zmq_ring_GBps; with several stripe
#                   counts too, busbw_zmq_auto_s1_GBps, ...), and so is the lanes run
#                   (busbw_GBps the first's, then busbw_ring_GBps: the bus bandwidth
#                   through shared memory). The algorithm changes only the allreduce:
#                   the runs of the others time it alone (bench_allreduce --only
#                   allreduce), and the gossip and raw columns are the first's. The
#                   "# shoal" lines say which algorithm each run used
#   --tcp-only      only what crosses hosts: shoal over ZeroMQ, raw ZeroMQ (from the run
#                   of the first stripe count) and MPI over TCP; no shared-memory columns
#   --security MODE shoal's connections under cluster.security MODE: none (the default
#                   here), curve (every byte encrypted on the I/O threads; with --stripes
#                   "1@2 2@4", whether more threads and connections spread the
#                   cryptography) or mac; raw ZeroMQ and MPI stay plain
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
# tcp,self: compare with busbw_zmq_GBps); gossip_zmq_cpu_us and rawzmq_cpu_us, the CPU
# time of one such exchange, every node's process and all its threads together, in
# microseconds (ZeroMQ only, the first stripe count). Each timing moves 256 MiB (5 to
# 1000 repetitions). The machine is shared: the load average is printed before and after
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
stripes="0"
algos="auto"
tcp_only=0
security=""
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
        --stripes) [ $# -ge 2 ] || die "--stripes needs a value"; stripes=$2; shift 2 ;;
        --allreduce) [ $# -ge 2 ] || die "--allreduce needs a value"; algos=$2; shift 2 ;;
        --tcp-only) tcp_only=1; shift ;;
        --security)
            [ $# -ge 2 ] || die "--security needs a value"
            case $2 in
                none) security="" ;;
                curve | mac) security="--$2" ;;
                *) die "--security must be none, curve or mac, not '$2'" ;;
            esac
            shift 2 ;;
        --trials) [ $# -ge 2 ] || die "--trials needs a value"; trials=$2; shift 2 ;;
        --builddir) [ $# -ge 2 ] || die "--builddir needs a value"; builddir=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

[[ $trials =~ ^[1-9][0-9]*$ ]] || die "--trials must be a positive integer, not '$trials'"
read -r -a stripe_list <<<"$stripes"
for s in "${stripe_list[@]}"; do
    count=${s%@*}
    if ! [[ $s =~ ^[0-9]+w?(@[0-9]+)?$ ]] || [ "${count%w}" -gt 16 ]; then
        die "--stripes: '$s' is not a count from 0 to 16 (then w for whole frames only, @T for T I/O threads)"
    fi
done
stripes="${stripe_list[*]}" # one space between the counts
[ -n "$stripes" ] || die "--stripes needs at least one count"
first_stripes=${stripes%% *}
read -r -a algo_list <<<"$algos"
[ ${#algo_list[@]} -gt 0 ] || die "--allreduce needs at least one of auto and ring"
for a in "${algo_list[@]}"; do
    case $a in auto | ring) ;; *) die "--allreduce: '$a' is not auto or ring" ;; esac
done
first_algo=${algo_list[0]}
# the ZeroMQ-only runs: one per algorithm and stripe count, named ALGO_sCOUNT; their
# columns' label drops what does not vary
variants=()
labels=()
for a in "${algo_list[@]}"; do
    for s in $stripes; do
        variants+=("${a}_s$s")
        if [ ${#algo_list[@]} -gt 1 ] && [ "$s" = "$stripes" ]; then
            labels+=("$a")
        elif [ ${#algo_list[@]} -gt 1 ]; then
            labels+=("${a}_s$s")
        else
            labels+=("s$s")
        fi
    done
done

# stripe_args SPEC: bench_allreduce's stripe and I/O thread options for one --stripes item
stripe_args() {
    case $1 in
        *@*) echo "--stripes ${1%@*} --io-threads ${1#*@}" ;;
        *) echo "--stripes $1 $io" ;;
    esac
}
[ -f "$builddir/libshoal.a" ] || die "no $builddir/libshoal.a: build shoal first or pass --builddir"
tmp=$(mktemp -d /tmp/shoal-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cc=${CC:-gcc}
# shellcheck disable=SC2046
"$cc" -std=c11 -D_GNU_SOURCE -O2 -I"$top/src" -I"$top" -I"$builddir" \
    "$top/bench/bench_allreduce.c" "$top/bench/bench_cpu.c" "$builddir/libshoal.a" \
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

# only_for ALGO: what bench_allreduce times for the runs of ALGO: everything for the
# first algorithm, the allreduce alone for the others (gossip and raw do not change)
only_for() {
    [ "$1" = "$first_algo" ] || echo "--only allreduce"
}

echo "# cpu: $(bench_cpu)"
for n in $nodes; do
    for k in $(seq "$trials"); do
        for a in "${algo_list[@]}"; do
            : >"$tmp/shoal_$a.$k"
            [ $tcp_only = 0 ] || continue
            # shellcheck disable=SC2086,SC2046
            "$tmp/bench_allreduce" -n "$n" $ipc $security $chunk $(stripe_args "$first_stripes") \
                --allreduce "$a" $(only_for "$a") --sizes "$sizes" >"$tmp/shoal_$a.$k" \
                || { cat "$tmp/shoal_$a.$k"; die "bench_allreduce -n $n ($a) failed"; }
        done
        for v in "${variants[@]}"; do
            # shellcheck disable=SC2086,SC2046
            "$tmp/bench_allreduce" -n "$n" $ipc $security $chunk $(stripe_args "${v#*_s}") --no-shm \
                --allreduce "${v%%_s*}" $(only_for "${v%%_s*}") --sizes "$sizes" >"$tmp/zmq_$v.$k" \
                || { cat "$tmp/zmq_$v.$k"; die "bench_allreduce -n $n --no-shm ($v) failed"; }
        done
        : >"$tmp/mpi.$k"
        : >"$tmp/mpitcp.$k"
        if [ $have_mpi = 1 ]; then
            if [ $tcp_only = 0 ]; then
                mpi_run "$n" >"$tmp/mpi.$k" || die "mpirun -np $n failed"
            fi
            mpi_run "$n" --mca btl tcp,self --mca pml ob1 >"$tmp/mpitcp.$k" \
                || die "mpirun -np $n (tcp) failed"
        fi
    done
    zfiles=()
    lfiles=() # the lanes runs of the algorithms after the first
    for prog in mpi mpitcp "${algo_list[@]/#/shoal_}" "${variants[@]/#/zmq_}"; do
        median "$tmp/$prog".[0-9]* >"$tmp/$prog.txt"
    done
    for v in "${variants[@]}"; do zfiles+=("$tmp/zmq_$v.txt"); done
    for a in "${algo_list[@]:1}"; do lfiles+=("$tmp/shoal_$a.txt"); done
    if [ $tcp_only = 0 ]; then
        for a in "${algo_list[@]}"; do
            grep '^#' "$tmp/shoal_$a.1" | grep -v 'load after\|^# cpu:' || true
        done
    fi
    for v in "${variants[@]}"; do grep '^#' "$tmp/zmq_$v.1" | grep -v 'load after\|^# cpu:' || true; done
    [ "$trials" = 1 ] || echo "# medians of $trials trials, the programs taking turns"
    # one line per size: shoal's columns (ZeroMQ-only ones per stripe count), then MPI's,
    # joined on the size; the rows follow the lanes run, or the first ZeroMQ run
    main=$tmp/shoal_$first_algo.txt
    [ $tcp_only = 0 ] || { cp "${zfiles[0]}" "$tmp/main.txt"; main=$tmp/main.txt; lfiles=(); }
    awk -v have_mpi=$have_mpi -v lanes=$((1 - tcp_only)) -v nz=${#zfiles[@]} -v names="${labels[*]}" \
        -v nl=${#lfiles[@]} -v algos="${algo_list[*]}" -v stripe_names="$stripes" '
        function col(name, width) { return sprintf(" %" width "s", name) }
        BEGIN { split(names, sn, " "); split(algos, an, " "); ns = split(stripe_names, gn, " ") }
        FILENAME == ARGV[1] { mpi_ms[$1] = $2; mpi_bw[$1] = $3; next }
        FILENAME == ARGV[2] { tcp_ms[$1] = $2; tcp_bw[$1] = $3; next }
        FILENAME != ARGV[ARGC - 1] {
            for (z = 1; z <= nz; z++)
                if (FILENAME == ARGV[2 + z]) {
                    zbw[z, $1] = $3; zgo[z, $1] = $4; zraw[z, $1] = $5; zgocpu[z, $1] = $7; zrawcpu[z, $1] = $8
                }
            for (l = 1; l <= nl; l++)
                if (FILENAME == ARGV[2 + nz + l])
                    lbw[l, $1] = $3
            next
        }
        FNR == 1 {
            wb = nz == 1 ? 14 : 22; wg = ns == 1 ? 15 : 23
            h = sprintf("%-8s", "size")
            if (lanes) h = h col("allreduce_ms", 12) col("busbw_GBps", 10)
            for (l = 1; l <= nl; l++) h = h col("busbw_" an[l + 1] "_GBps", 15)
            for (z = 1; z <= nz; z++) h = h col(nz == 1 ? "busbw_zmq_GBps" : "busbw_zmq_" sn[z] "_GBps", wb)
            if (lanes) h = h col("gossip_GBps", 11)
            # from the runs of the first algorithm, one per stripe count
            for (z = 1; z <= ns; z++) h = h col(ns == 1 ? "gossip_zmq_GBps" : "gossip_zmq_s" gn[z] "_GBps", wg)
            h = h col("rawzmq_GBps", 11)
            if (have_mpi && lanes) h = h col("mpi_ms", 10) col("mpi_GBps", 9)
            if (have_mpi) h = h col("mpitcp_ms", 12) col("mpitcp_GBps", 11)
            h = h col("gossip_zmq_cpu_us", 17) col("rawzmq_cpu_us", 13)
            print h
        }
        {
            r = sprintf("%-8s", $1)
            if (lanes) r = r col($2, 12) col($3, 10)
            for (l = 1; l <= nl; l++) r = r col(lbw[l, $1], 15)
            for (z = 1; z <= nz; z++) r = r col(zbw[z, $1], wb)
            if (lanes) r = r col($4, 11)
            for (z = 1; z <= ns; z++) r = r col(zgo[z, $1], wg)
            r = r col(lanes ? $5 : zraw[1, $1], 11)
            if (have_mpi && lanes) r = r col(mpi_ms[$1], 10) col(mpi_bw[$1], 9)
            if (have_mpi) r = r col(tcp_ms[$1], 12) col(tcp_bw[$1], 11)
            r = r col(sprintf("%.1f", zgocpu[1, $1]), 17) col(sprintf("%.1f", zrawcpu[1, $1]), 13)
            print r
        }' "$tmp/mpi.txt" "$tmp/mpitcp.txt" "${zfiles[@]}" "${lfiles[@]}" "$main"
    echo "# load after each trial: $(grep -h 'load after' "$tmp"/zmq_"${variants[0]}".[0-9]* | awk '{ print $NF }' | tr '\n' ' ')"
    echo
done
