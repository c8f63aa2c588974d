#!/usr/bin/env bash
# bench_scaling.sh: shoal on emulated hosts (issue 15, item 4), and the scaling model
# (shoal-scale) checked against it. For each number of hosts n, each algorithm and each
# seed, the same run with no link limit and then over each link, taking turns: per run
# the aggregate tokens/s, the wall time's cost against the no-limit run, bytes sent per
# node per step, the sync wait per step and the final model's validation perplexity
# (every run of one n trains the same tokens). Then shoal-scale's prediction for every
# cell beside the measured tokens/s, a table and a PNG (gnuplot).
#
#   bench/bench_scaling.sh [--nodes "4 8"] [--links "10gbit/0.1 1gbit/10 100mbit/50"]
#                          [--algos "allreduce bmuf gossip-bmuf gossip-bmuf-overlap"]
#                          [--steps S] [--seeds "1"] [--tau T] [--png FILE]
#                          [--set KEY=VALUE]... [--out DIR] [--keep]
#   bench/bench_scaling.sh --report DIR
#
#   --nodes LIST    numbers of emulated hosts, one shoal node each (default "4 8")
#   --links LIST    RATE/LATENCY_MS pairs (default "10gbit/0.1 1gbit/10 100mbit/50");
#                   every algorithm also runs with no limit ("none"), its baseline
#   --algos LIST    of allreduce, bmuf, gossip-bmuf, gossip-bmuf-overlap (default these
#                   four), allreduce-ring and bmuf-ring (the same with cluster.allreduce:
#                   ring, for halving and doubling against the ring on even counts),
#                   allreduce-unique (allreduce with sync.exchange unique: the Baidu
#                   paper's sparse allreduce of the row shards)
#   --steps S       steps per node, every run (default 256: two embedding syncs)
#   --seeds LIST    run.seed values (default "1"); each seed is a run of every cell
#   --tau T         gossip-bmuf-overlap's sync.overlap_steps (default 4, below 16)
#   --png FILE      the plot (default ./scaling.png); without gnuplot only the tables
#   --set KEY=VALUE passed to every run and to shoal-scale
#   --out DIR       run folders, logs, table (default a temp dir, removed unless --keep)
#   --report DIR    no runs: the tables, the model's comparison and the plot again from
#                   DIR, the --out of an earlier run (e.g. after a change to shoal-scale)
#   -h, --help      this text
#
# How links are made: netlab (tests/net/netlab) gives every node a host of its own (a
# network namespace on a bridge) and limits each host's link to RATE with a tc token
# bucket (tbf) at both ends: one shared uplink and downlink per host, as a NIC. The
# latency is not the kernel's (these machines have no sch_netem): it is shoal's own link
# emulation, cluster.emulate.latency_ms, which holds every frame back LATENCY_MS before
# handing it to TCP (cluster.emulate.bandwidth stays 0: the rate is tbf's alone). The
# no-limit run goes through the same emulated link with no latency and a rate of no
# consequence (cluster.emulate.bandwidth=1tbit), over hosts without tbf.
#
# The runs: a small word model (Brown, vocabulary 2000, embedding 64, one LSTM of 64,
# full softmax, 32 x 20 tokens a step) so that 8 nodes fit on 2 cores, as --set
# overrides of conf/brown-4nodes-<algorithm>.yaml. allreduce: that file's dense
# gradient allreduce every step. bmuf, gossip-bmuf: periods (16, 128) as in the
# gossip-BMUF paper, sync.exchange unique; gossip with q = k (1 on 4 nodes, 2 on 8, the
# paper's p = q); gossip-bmuf-overlap adds sync.overlap_steps T. The default (2 x 4 x 4
# = 32 runs) takes about 15-25 minutes on 2 cores.
#
# Measured: wall = the slowest node's train_time_s; tokens/s = all nodes' tokens / wall;
# cost = wall / the no-limit run's wall - 1; bytes = each component's sent_bytes at the
# last report of metrics.jsonl (frames with headers), summed, mean over nodes, / steps;
# sync wait = summary's sync_time_s / steps, mean over nodes; ppl = the run's model
# (the nodes' average), run.dir/summary.json. Model: shoal-scale with the same YAML and
# --set lines, --uplink shared, --steps S, the link's RATE and LATENCY_MS, --step-ms = the
# no-limit run's wall / steps (its compute and the local cost of its exchanges as the
# machine ran it), --unique-rows = the embedding rows a node touched per sync as
# metrics.jsonl counted them (rows_own / rounds, node 0).
#
# Environment: SHOAL (default <repo>/build/shoal), SHOAL_SCALE (default
# <repo>/build/tools/shoal-scale), SHOAL_DATA (default ../shared/data). Needs root
# (network namespaces). Figures only: it never fails on speed; it exits non-zero when a
# run fails, and removes its hosts and temp files pass or fail.
set -euo pipefail

me=bench_scaling.sh
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
scale=${SHOAL_SCALE:-$top/build/tools/shoal-scale}
data=${SHOAL_DATA:-$top/../shared/data}
netlab=$top/tests/net/netlab
nodes_list="4 8"
links="10gbit/0.1 1gbit/10 100mbit/50"
algos="allreduce bmuf gossip-bmuf gossip-bmuf-overlap"
steps=256
seeds="1"
tau=4
png=""
sets=()
out=""
keep=0
report=""

die() {
    echo "$me: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
    --nodes | --links | --algos | --steps | --seeds | --tau | --png | --set | --out | --report)
        [ $# -ge 2 ] || die "$1 needs a value (see --help)"
        case $1 in
        --nodes) nodes_list=$2 ;;
        --links) links=$2 ;;
        --algos) algos=$2 ;;
        --steps) steps=$2 ;;
        --seeds) seeds=$2 ;;
        --tau) tau=$2 ;;
        --png) png=$2 ;;
        --set) sets+=(--set "$2") ;;
        --out) out=$2 ;;
        --report) report=$2 ;;
        esac
        shift 2
        ;;
    --keep) keep=1; shift ;;
    -h | --help) bench_help; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
for n in $nodes_list; do
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 64 ] || die "--nodes: '$n' is not 2..64"
done
for l in $links; do
    [[ $l =~ ^[0-9.]+[kmgt]?bit/[0-9.]+$ ]] || die "--links: '$l' is not RATE/LATENCY_MS (1gbit/10)"
done
for a in $algos; do
    case $a in allreduce | bmuf | gossip-bmuf | gossip-bmuf-overlap | allreduce-ring | bmuf-ring | \
        allreduce-unique) ;;
    *) die "--algos: '$a' is not allreduce, bmuf, gossip-bmuf, gossip-bmuf-overlap, allreduce-ring, bmuf-ring or allreduce-unique" ;;
    esac
done
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || die "--seeds: '$s' is not a whole number"; done
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, not '$steps'"
[[ $tau =~ ^[1-9][0-9]*$ ]] && [ "$tau" -lt 16 ] || die "--tau must be 1..15 (below the period 16), not '$tau'"
if [ -n "$report" ]; then # the earlier run's settings
    [ -r "$report/settings" ] && [ -r "$report/table" ] ||
        die "$report: no settings and table of a run of $me here"
    # shellcheck disable=SC1091 # written by this script
    . "$report/settings"
    out=$report
fi
[ -x "$shoal" ] || die "no $shoal: build shoal first or set SHOAL"
[ -x "$scale" ] || die "no $scale: build shoal-scale first or set SHOAL_SCALE"
[ -r "$data/brown/train.txt" ] || die "no $data/brown/train.txt (set SHOAL_DATA)"

bench_out_dir scaling
[ -n "$png" ] || png=$PWD/scaling.png
lab="" child=""
# pass or fail: the run in progress is stopped (netlab passes TERM on to its nodes and
# removes its hosts), whatever is left of its hosts removed, then the temp folder
cleanup() {
    bench_stop_child
    [ -z "$lab" ] || "$netlab" down "$lab" 2>/dev/null || true
    [ -z "${tmp_out:-}" ] || rm -rf "$tmp_out"
}
bench_traps cleanup

cpu=$(bench_cpu)

# The model and data every run shares.
common=(--quiet --set cluster.key_file="$out/key" --set data.cache_dir="$out/cache"
    --set data.train="$data/brown/train.txt" --set data.valid="$data/brown/valid.txt"
    --set data.test="$data/brown/test.txt" --set data.vocab_size=2000
    --set model.embedding=64 --set "model.layers=[{lstm: 64}]" --set train.global_batch=0
    --set train.batch=32
    --set train.bptt=20 --set train.epochs=1000 --set train.max_steps="$steps"
    --set train.eval_every_epoch=false --set run.log_every="$steps"
    --set run.checkpoint_every=0)

# algo_args ALGO N: sets conf and args[] for one algorithm on N nodes.
algo_args() {
    local q=$(($2 >= 8 ? 2 : 1))
    case $1 in
    allreduce*)
        conf=$top/conf/brown-4nodes-allreduce.yaml
        args=()
        [ "$1" != allreduce-unique ] || args=(--set sync.exchange=unique)
        ;;
    bmuf*)
        conf=$top/conf/brown-4nodes-bmuf.yaml
        args=(--set sync.period=16 --set sync.embedding_period=128 --set sync.exchange=unique)
        ;;
    gossip-bmuf*)
        conf=$top/conf/brown-4nodes-gossip-bmuf.yaml
        args=(--set sync.period=16 --set sync.embedding_period=128 --set sync.exchange=unique
            --set topology.degree="$q" --set sync.neighbours="$q")
        [ "$1" = gossip-bmuf ] || args+=(--set sync.overlap_steps="$tau")
        ;;
    esac
    case $1 in *-ring) args+=(--set cluster.allreduce=ring) ;; esac
}

# num KEY FILE: a number of a JSON object written one key a line (summary.json)
num() {
    grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | sed 's/.*: *//'
}

# measure DIR N: "wall tok_per_s bytes_per_node_step wait_ms_per_step ppl rows" of a run
measure() {
    local dir=$1 n=$2 r
    for ((r = 0; r < n; r++)); do
        echo "node $(num train_time_s "$dir/node-$r/summary.json") $(num train_tokens \
            "$dir/node-$r/summary.json") $(num sync_time_s "$dir/node-$r/summary.json") \
            $(num steps "$dir/node-$r/summary.json")"
        # each component's last sync line: its totals
        awk -F'[:,]' -v r="$r" '/"event":"sync"/ {
                for (i = 1; i < NF; i++) {
                    if ($i == "\"component\"") c = $(i + 1)
                    if ($i == "\"sent_bytes\"") b[c] = $(i + 1)
                    if ($i == "\"rounds\"") rd[c] = $(i + 1)
                    if ($i == "\"rows_own\"") ro[c] = $(i + 1)
                } }
            END { for (c in b) { print "bytes", b[c]
                    if (r == 0 && c ~ /embedding/ && rd[c] > 0) print "rows", ro[c] / rd[c] } }' \
            "$dir/node-$r/metrics.jsonl"
    done | awk -v n="$n" -v ppl="$(num valid_ppl "$dir/summary.json")" '
        $1 == "node" { if ($2 > wall) wall = $2; tok += $3; wait += $4 / $5; steps = $5 }
        $1 == "bytes" { bytes += $2 }
        $1 == "rows" { rows += $2 }
        END { printf "%.3f %.0f %.0f %.3f %s %.0f\n", wall, tok / wall, bytes / n / steps,
                  1000 * wait / n, ppl, rows }'
}

# The runs, into $out/table: one line per run.
run_all() {
    probe=$("$netlab" up 1 --name "bsc$$-probe" 2>&1) ||
        die "cannot make emulated hosts: $probe"
    "$netlab" down "bsc$$-probe"
    "$shoal" keygen "$out/key" >/dev/null || die "shoal keygen failed"
    nalgos=$(wc -w <<<"$algos")
    total=$(($(wc -w <<<"$nodes_list") * nalgos * $(wc -w <<<"$seeds") * ($(wc -w <<<"$links") + 1)))
    echo "# cpu: $cpu"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $total runs of $steps steps a node; rate by netlab's tbf per host link, latency by cluster.emulate.latency_ms"
    : >"$out/table"
    declare -p nodes_list links algos steps seeds tau sets cpu >"$out/settings"
    i=0
    for n in $nodes_list; do
        for algo in $algos; do
            algo_args "$algo" "$n"
            for seed in $seeds; do
                for link in none $links; do
                    rate=${link%/*} lat=${link#*/} limit=() emu=()
                    # no limit: the same emulated link (a thread hands frames to TCP), at a
                    # rate of no consequence (2 MB in 16 us) and no latency
                    [ "$link" != none ] || { lat=0; emu=(--set cluster.emulate.bandwidth=1tbit); }
                    [ "$link" = none ] || limit=(--rate "$rate")
                    name=n$n-$algo-s$seed-${link//\//-}
                    i=$((i + 1))
                    echo "[$i/$total] n=$n $algo seed $seed link $link ..." >&2
                    lab=bsc$$-$i
                    start=$SECONDS
                    # in the background, so that INT and TERM reach the trap at once
                    SHOAL=$shoal "$netlab" run "$n" "${limit[@]}" --name "$lab" --logs "$out/$name.logs" \
                        -- "$conf" "${common[@]}" "${args[@]}" "${sets[@]}" --set run.seed="$seed" \
                        --set cluster.nodes="$n" --set cluster.emulate.latency_ms="$lat" \
                        --set run.dir="$out/$name" "${emu[@]}" &
                    child=$!
                    wait "$child" ||
                        { tail -n 3 "$out/$name.logs"/host-*.log >&2; die "run $name failed (logs above)"; }
                    child="" lab=""
                    m=$(measure "$out/$name" "$n")
                    echo "[$i/$total] done in $((SECONDS - start)) s: $m" >&2
                    echo "$n $algo $seed $link $m" >>"$out/table"
                done
            done
        done
    done
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
[ -n "$report" ] || run_all

# The table: cost against the no-limit run of the same n, algorithm and seed.
echo
echo "## measured ($cpu; $steps steps a node)"
echo
echo "| n | link | algorithm | seed | wall s | cost | tokens/s | bytes/node/step | sync wait ms/step | valid ppl |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
awk '$4 == "none" { base[$1 " " $2 " " $3] = $5 }
    { b = base[$1 " " $2 " " $3]
      printf "| %s | %s | %s | %s | %.2f | %+.1f%% | %s | %s | %.2f | %.2f |\n",
          $1, $4, $2, $3, $5, 100 * ($5 / b - 1), $6, $7, $8, $9 }' "$out/table"

# The model for every cell: step time from the no-limit run.
echo
echo "## shoal-scale against the measurements (--uplink shared, --step-ms = no-limit wall / $steps)"
echo
echo "| n | link | algorithm | seed | step ms | measured tokens/s | predicted tokens/s | model off by |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
: >"$out/model"
while read -r n algo seed link _ tok _ _ _ rows; do
    base=$(awk -v n="$n" -v a="$algo" -v s="$seed" '$1 == n && $2 == a && $3 == s && $4 == "none" { print $5 }' "$out/table")
    step_ms=$(awk -v w="$base" -v s="$steps" 'BEGIN { printf "%.6f", 1000 * w / s }')
    rate=0 lat=0
    [ "$link" = none ] || { rate=${link%/*}; lat=${link#*/}; }
    algo_args "$algo" "$n"
    uniq=()
    [ "$rows" = 0 ] || uniq=(--unique-rows "$rows")
    pred=$("$scale" --config "$conf" "${args[@]}" "${sets[@]}" --set data.vocab_size=2000 \
        --set model.embedding=64 --set "model.layers=[{lstm: 64}]" --set train.global_batch=0 \
        --set train.batch=32 \
        --set train.bptt=20 --set run.seed="$seed" --nodes "$n" --steps "$steps" \
        --step-ms "$step_ms" --bandwidth "$rate" --latency-ms "$lat" --uplink shared \
        "${uniq[@]}" --json | grep -o '"tokens_per_s": [0-9.e+-]*' | sed 's/.*: //') ||
        die "shoal-scale failed for n=$n $algo $link"
    awk -v n="$n" -v a="$algo" -v s="$seed" -v l="$link" -v t="$step_ms" -v m="$tok" -v p="$pred" \
        'BEGIN { printf "| %s | %s | %s | %s | %.2f | %s | %.0f | %+.1f%% |\n", n, l, a, s, t, m, p,
                     100 * (p / m - 1) }'
    echo "$n $algo $seed $link $tok $pred" >>"$out/model"
done <"$out/table"

# The issue's targets, where the runs have what they need (figures, never a failure).
echo
awk '$4 == "none" { base[$1 " " $2 " " $3] = $5 }
    { wall[$1 " " $2 " " $3 " " $4] = $5; bytes[$1 " " $2] += $7; nb[$1 " " $2]++ }
    END {
        for (key in wall) {
            split(key, f, " ")
            if (f[1] == 8 && f[2] == "gossip-bmuf-overlap" && f[4] == "1gbit/10")
                printf "# target: 8 hosts, 1gbit/10: gossip-bmuf-overlap costs %+.1f%% wall (seed %s; at most 5%%)\n",
                    100 * (wall[key] / base[f[1] " " f[2] " " f[3]] - 1), f[3]
            if (f[1] == 8 && f[2] == "allreduce" && f[4] == "1gbit/10")
                printf "# 8 hosts, 1gbit/10: allreduce costs %+.1f%% wall (seed %s)\n",
                    100 * (wall[key] / base[f[1] " " f[2] " " f[3]] - 1), f[3]
        }
        for (a in nb) {
            split(a, f, " ")
            if (f[1] == 8 && f[2] ~ /^gossip-bmuf/ && nb["8 allreduce"])
                printf "# target: 8 hosts: %s sends %.0fx fewer bytes per node per step than allreduce (at least 10x)\n",
                    f[2], (bytes["8 allreduce"] / nb["8 allreduce"]) / (bytes[a] / nb[a])
        }
    }' "$out/table"
awk '$4 != "none" { m++; e = $6 / $5 - 1; if (e < 0) e = -e; if (e <= 0.15) ok++; if (e > w) w = e }
    END { if (m) printf "# target: the model within 15%% of measured tokens/s in %d of %d cells with a link limit (worst %.1f%%)\n", ok, m, 100 * w }' "$out/model"

# The plot: tokens/s against the link, one line per algorithm, measured (points) and
# predicted (dashed), a panel per n.
colours=("#1f77b4" "#d62728" "#2ca02c" "#ff7f0e" "#9467bd" "#8c564b" "#e377c2" "#17becf"
         "#7f7f7f" "#bcbd22" "#000000" "#aec7e8")
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "# no gnuplot (apt-get install -y gnuplot-nox): no PNG, the tables above are all"
    exit 0
fi
{
    echo "set terminal pngcairo size 1100,450 font ',10'"
    echo "set output '$png'"
    echo "set multiplot layout 1,$(wc -w <<<"$nodes_list") title 'shoal on emulated hosts: aggregate tokens/s ($cpu)'"
    echo "set logscale y; set grid; set ylabel 'tokens/s (all nodes)'; set key bottom left"
    echo "set xtics ($(awk -v l="none $links" 'BEGIN { k = split(l, a, " "); for (i = 1; i <= k; i++) printf "%s\"%s\" %d", (i > 1 ? ", " : ""), a[i], i - 1 }'))"
    echo "set xrange [-0.3:$(wc -w <<<"$links").3]"
    for n in $nodes_list; do
        echo "set title '$n nodes (points: measured, dashed: shoal-scale)'"
        plot="plot"
        c=0
        for algo in $algos; do
            # a colour of its own per algorithm: gnuplot's default cycle repeats after 8
            rgb=${colours[c % ${#colours[@]}]}
            plot+=" '-' using 1:2 with linespoints lc rgb '$rgb' pt 7 title '$algo', '-' using 1:2 with lines lc rgb '$rgb' dt 2 notitle,"
            c=$((c + 1))
        done
        echo "${plot%,}"
        for algo in $algos; do
            for col in 5 6; do
                awk -v n="$n" -v a="$algo" -v c="$col" -v l="none $links" '
                    BEGIN { k = split(l, x, " "); for (i = 1; i <= k; i++) pos[x[i]] = i - 1 }
                    $1 == n && $2 == a { s[$4] += $c; m[$4]++ }
                    END { for (i = 1; i <= k; i++) if (m[x[i]]) print pos[x[i]], s[x[i]] / m[x[i]]
                          print "e" }' "$out/model"
            done
        done
    done
    echo "unset multiplot"
} >"$out/plot.gp"
gnuplot "$out/plot.gp" || die "gnuplot failed ($out/plot.gp)"
echo "# plot: $png"
