#!/usr/bin/env bash
# bench_survivors.sh: the survivors of a death against a run that had their number of
# nodes from that step on (issue 16: within 2% at equal tokens). Per mode and seed:
#   death      n nodes train S steps each; one node (rank V) is SIGKILLed once it has
#              taken K steps and is not restarted; the n - 1 survivors finish. Its
#              final model's valid perplexity is the figure.
#   reference  n nodes train K steps (the same run up to the death), then n - 1 nodes
#              start from that run's final model (shoal export, then --init) and take
#              S - D steps each, D the step the victim died at (its last metrics
#              record): the same tokens after the death, and the same learning rate
#              (the n nodes to D decay it over S steps, train.schedule.steps, and the
#              n - 1 start where that decay stands at D). Its block
#              momentum and data positions start afresh (shoal cannot resume a run on
#              fewer nodes), and it starts from the average of the n models at D,
#              where the survivors go on from their own; with plain SGD nothing else
#              differs.
#   fault-free n nodes, S steps each, for scale.
# Table: valid perplexity of the three, and the death against the reference.
#
#   bench/bench_survivors.sh [--nodes N] [--modes "gossip-bmuf bmuf"] [--steps S]
#                            [--kill-at K] [--victim V] [--seeds "1 2 3"]
#                            [--set KEY=VALUE]... [--out DIR] [--keep]
#
#   --nodes N       nodes of the run (default 4; the survivors are N - 1)
#   --modes LIST    of gossip-bmuf, bmuf, local-bmuf, gossip-ma, allreduce, ma
#                   (default "gossip-bmuf bmuf")
#   --steps S       steps per node (default 400: under one epoch of each node's share,
#                   so that no run overfits and perplexities compare)
#   --kill-at K     the victim is killed at its first metrics record at or past K
#                   (default 150; records every step)
#   --victim V      its rank (default 2: a node with two live ring neighbours)
#   --seeds LIST    run.seed values (default "1 2 3")
#   --set KEY=VALUE passed to every run
#   --out DIR       run folders, logs, table (default a temp dir, removed unless --keep)
#   -h, --help      this text
#
# The runs: the small word model of bench_churn.sh (Brown, vocabulary 2000, embedding
# 64, one LSTM of 64, full softmax, 32 x 20 tokens a step, SGD lr 20 as in
# conf/brown-4nodes-<mode>.yaml but decayed linearly to 0: at a constant rate the
# models' validation perplexity at the last step varies by 10-20% between seeds and
# nodes, too much for a 2% comparison), every component synced every 8 steps,
# sync.timeout_ms 1000. Environment: SHOAL (default <repo>/build/shoal), SHOAL_DATA (default
# ../shared/data). Figures only: it exits non-zero when a run fails that should not.
set -euo pipefail

me=bench_survivors.sh
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
nodes=4
modes="gossip-bmuf bmuf"
steps=400
kill_at=150
victim=2
seeds="1 2 3"
lr=20
sets=()
out=""
keep=0

die() {
    echo "$me: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
    --nodes | --modes | --steps | --kill-at | --victim | --seeds | --set | --out)
        [ $# -ge 2 ] || die "$1 needs a value (see --help)"
        case $1 in
        --nodes) nodes=$2 ;;
        --modes) modes=$2 ;;
        --steps) steps=$2 ;;
        --kill-at) kill_at=$2 ;;
        --victim) victim=$2 ;;
        --seeds) seeds=$2 ;;
        --set) sets+=(--set "$2") ;;
        --out) out=$2 ;;
        esac
        shift 2
        ;;
    --keep) keep=1; shift ;;
    -h | --help) bench_help; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 3 ] && [ "$nodes" -le 16 ] ||
    die "--nodes must be 3..16, not '$nodes'"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, not '$steps'"
[[ $kill_at =~ ^[1-9][0-9]*$ ]] && [ "$kill_at" -lt "$steps" ] ||
    die "--kill-at must be a positive integer below --steps, not '$kill_at'"
[[ $victim =~ ^[0-9]+$ ]] && [ "$victim" -lt "$nodes" ] ||
    die "--victim must be a rank below --nodes, not '$victim'"
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || die "--seeds: '$s' is not a whole number"; done
for m in $modes; do
    case $m in gossip-bmuf | bmuf | local-bmuf | gossip-ma | allreduce | ma) ;;
    *) die "--modes: '$m' is not one of gossip-bmuf, bmuf, local-bmuf, gossip-ma, allreduce, ma" ;;
    esac
done
[ -x "$shoal" ] || die "no $shoal: build shoal first or set SHOAL"
[ -r "$data/brown/train.txt" ] || die "no $data/brown/train.txt (set SHOAL_DATA)"

bench_out_dir survivors
child=""
# pass or fail: the run in progress stopped, then the temp folder
cleanup() {
    bench_stop_child
    [ -z "${tmp_out:-}" ] || rm -rf "$tmp_out"
}
bench_traps cleanup

cpu=$(bench_cpu)
"$shoal" keygen "$out/key" >/dev/null || die "shoal keygen failed"
bench_small_model "$data" "$out"
common=("${small_model[@]}" --set train.optimizer.lr="$lr" --set train.schedule.type=linear
    --set train.schedule.steps="$steps"
    --set run.log_every=1 --set run.checkpoint_every=0 --set sync.period=8
    --set sync.embedding_period=0 --set sync.timeout_ms=1000 --set cluster.restart.max=0)


# train NAME N STEPS [ARGS...]: one shoal run of N nodes into $out/NAME (log NAME.log);
# its exit status
train() {
    local name=$1 n=$2 s=$3 rc=0
    shift 3
    "$shoal" run "$conf" "${common[@]}" --set run.seed="$seed" "${sets[@]}" "$@" \
        --set cluster.nodes="$n" --set train.max_steps="$s" --set run.dir="$out/$name" -n "$n" \
        >"$out/$name.log" 2>&1 &
    child=$!
    wait "$child" || rc=$?
    child=""
    return $rc
}

# death NAME: the run whose victim is killed at step kill_at; its death step into died
death() {
    local name=$1 metrics=$out/$1/node-$victim/metrics.jsonl rc=0
    "$shoal" run "$conf" "${common[@]}" --set run.seed="$seed" "${sets[@]}" \
        --set cluster.nodes="$nodes" --set train.max_steps="$steps" --set run.dir="$out/$name" \
        -n "$nodes" >"$out/$name.log" 2>&1 &
    child=$!
    until [ "$(bench_last_step "$metrics")" -ge "$kill_at" ]; do
        kill -0 "$child" 2>/dev/null || die "$name ended before its node $victim reached step $kill_at (see $out/$name.log)"
        sleep 0.05
    done
    pkill -KILL -P "$child" -x "shoal node $victim" || die "$name: no node $victim to kill"
    wait "$child" || rc=$?
    child=""
    [ "$rc" = 1 ] || die "$name: shoal run exited $rc, not 1 (a node died) (see $out/$name.log)"
    died=$(bench_last_step "$metrics")
}

echo "# cpu: $cpu"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$out/table"
for mode in $modes; do
    conf=$top/conf/brown-4nodes-$mode.yaml
    for seed in $seeds; do
        echo "$mode, seed $seed: fault-free ..." >&2
        train "$mode-$seed-free" "$nodes" "$steps" || die "$mode-$seed-free failed (see $out/$mode-$seed-free.log)"
        echo "$mode, seed $seed: node $victim killed at step $kill_at ..." >&2
        death "$mode-$seed-death"
        echo "$mode, seed $seed: reference, $nodes nodes to step $kill_at, then $((nodes - 1)) ..." >&2
        train "$mode-$seed-upto" "$nodes" "$died" || die "$mode-$seed-upto failed"
        "$shoal" export "$out/$mode-$seed-upto/model.bin" --format safetensors \
            "$out/$mode-$seed-upto.safetensors" >/dev/null || die "export of $mode-$seed-upto failed"
        train "$mode-$seed-ref" $((nodes - 1)) $((steps - died)) \
            --init "$out/$mode-$seed-upto.safetensors" \
            --set train.optimizer.lr="$(awk -v l="$lr" -v d="$died" -v s="$steps" \
                'BEGIN { printf "%.9g", l * (s - d) / s }')" \
            --set train.schedule.steps=$((steps - died)) || die "$mode-$seed-ref failed"
        echo "$mode $seed $died $(bench_num valid_ppl "$out/$mode-$seed-free/summary.json")" \
            "$(bench_num valid_ppl "$out/$mode-$seed-death/summary.json")" \
            "$(bench_num valid_ppl "$out/$mode-$seed-ref/summary.json")" >>"$out/table"
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "## survivors ($cpu; $nodes nodes, $steps steps a node, node $victim killed at step $kill_at)"
echo
echo "| mode | seed | died at step | fault-free ppl | survivors ppl | reference ($((nodes - 1)) nodes) ppl | survivors vs reference |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk '{ printf "| %s | %s | %s | %s | %s | %s | %+.2f%% |\n", $1, $2, $3, $4, $5, $6, 100 * ($5 / $6 - 1)
       d[$1] += $5 / $6 - 1; n[$1]++; if (!($1 in lo) || $5 / $6 - 1 < lo[$1]) lo[$1] = $5 / $6 - 1
       if (!($1 in hi) || $5 / $6 - 1 > hi[$1]) hi[$1] = $5 / $6 - 1 }
     END { for (m in d) printf "# %s: survivors vs reference, mean %+.2f%% (%+.2f%% to %+.2f%%) over %d seeds\n",
               m, 100 * d[m] / n[m], 100 * lo[m], 100 * hi[m], n[m] }' "$out/table"
