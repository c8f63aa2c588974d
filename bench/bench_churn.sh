#!/usr/bin/env bash
# bench_churn.sh: goodput under churn (issue 16, item 4). For each number of nodes n and
# each sync mode: the run without faults, then the same run with one random node
# SIGKILLed every T seconds, which `shoal run` restarts DELAY_MS later (cluster.restart)
# and which comes back to the running job, for each T. Per run: the wall time, the
# tokens trained (every node's steps, less the steps no node trained for a dead one),
# goodput = tokens per second against the fault-free run's of the same trial (each trial
# runs the fault-free run and then the faulty ones, side by side), the seconds from a node's
# restart to its first answered round or its admission (the first of the others' "node
# R joined the run" lines), also in sync rounds of the fault-free run (its node 0's
# training time per step times the period: 16 steps, 1 for allreduce), the final
# model's valid perplexity against the fault-free run's at equal steps and at equal
# tokens, and hangs.
#
#   bench/bench_churn.sh [--nodes "4 8"] [--every "60 20"] [--delay-ms 5000]
#                        [--modes "gossip-bmuf bmuf allreduce"] [--steps S] [--trials K]
#                        [--signal KILL|STOP] [--baseline each|first]
#                        [--equal-tokens yes|no] [--set KEY=VALUE]... [--out DIR] [--keep]
#   bench/bench_churn.sh --report DIR
#
#   --nodes LIST    numbers of nodes, all on this machine (default "4 8")
#   --every LIST    seconds between kills (default "60 20"); 0 is the fault-free run,
#                   always made first
#   --delay-ms D    cluster.restart.delay_ms (default 5000)
#   --modes LIST    of gossip-bmuf, bmuf, allreduce (default all three)
#   --steps S       steps per node (default 3000)
#   --trials K      trials (default 1): each a fault-free run and a faulty run per T,
#                   with other random victims
#   --signal SIG    KILL (default) or STOP: a stopped node is killed by shoal run's
#                   watchdog (cluster.watchdog_timeouts sync timeouts later), then
#                   restarted like a dead one
#   --baseline B    each (default): a fault-free run in every trial; first: only in
#                   trial 1, against which every later trial's goodput and perplexity
#                   are taken (for many trials that count hangs and lost models)
#   --equal-tokens yes|no
#                   yes (default): after each faulty run, the fault-free run again,
#                   stopped (train.max_steps) at the step where its n nodes have
#                   trained the faulty run's tokens, on the full run's learning-rate
#                   schedule (train.schedule.steps S), for the perplexity at equal
#                   tokens (the fault-free run itself when no tokens were lost); no:
#                   those runs are not made (the column shows "-")
#   --set KEY=VALUE passed to every run
#   --out DIR       run folders, logs, table (default a temp dir, removed unless --keep)
#   --report DIR    no runs: the table again from DIR, the --out of an earlier run
#   -h, --help      this text
#
# The runs: a small word model (Brown, vocabulary 2000, embedding 64, one LSTM of 64,
# full softmax, 32 x 20 tokens a step) so that 8 nodes fit on 2 cores, as --set
# overrides of conf/brown-4nodes-<mode>.yaml, with the rate decayed linearly to 0 (at a
# constant rate the final perplexity varies by 10-20% between seeds, too much to
# compare a faulty run with a fault-free one: bench_survivors.sh); bmuf and gossip-bmuf sync every 16 steps
# (embeddings every 128, by their rows), gossip with q = k; sync.timeout_ms 1000 (one
# machine). A node that comes back starts from a live node's state a round or two
# ahead of the others, so the batches of its share from its death to that step are
# never trained: they are subtracted from the tokens (the step a node had reached when
# it was killed is the last step in its metrics.jsonl then), and so are the steps
# from its death to the end of the run when it never came back. A run that takes more than
# 3 x the fault-free run's wall + 120 s is killed and counted as a hang; one that ends
# without the run's model.bin is counted too.
#
# Environment: SHOAL (default <repo>/build/shoal), SHOAL_DATA (default ../shared/data).
# Figures only: it never fails on speed; it exits non-zero when a fault-free run fails,
# and stops its runs and removes its temp files pass or fail.
set -euo pipefail

me=bench_churn.sh
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
nodes_list="4 8"
every="60 20"
delay_ms=5000
modes="gossip-bmuf bmuf allreduce"
steps=3000
trials=1
signal=KILL
baseline=each
equal_tokens=yes
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
    --nodes | --every | --delay-ms | --modes | --steps | --trials | --signal | --baseline | --equal-tokens | --set | --out | --report)
        [ $# -ge 2 ] || die "$1 needs a value (see --help)"
        case $1 in
        --nodes) nodes_list=$2 ;;
        --every) every=$2 ;;
        --delay-ms) delay_ms=$2 ;;
        --modes) modes=$2 ;;
        --steps) steps=$2 ;;
        --trials) trials=$2 ;;
        --baseline) baseline=$2 ;;
        --equal-tokens) equal_tokens=$2 ;;
        --signal) signal=$2 ;;
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
for t in $every; do [[ $t =~ ^[0-9]+$ ]] || die "--every: '$t' is not a whole number of seconds"; done
for m in $modes; do
    case $m in gossip-bmuf | bmuf | allreduce) ;;
    *) die "--modes: '$m' is not gossip-bmuf, bmuf or allreduce" ;;
    esac
done
[[ $delay_ms =~ ^[0-9]+$ ]] || die "--delay-ms must be a whole number, not '$delay_ms'"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, not '$steps'"
[[ $trials =~ ^[1-9][0-9]*$ ]] || die "--trials must be a positive integer, not '$trials'"
case $signal in KILL | STOP) ;; *) die "--signal must be KILL or STOP, not '$signal'" ;; esac
case $baseline in each | first) ;; *) die "--baseline must be each or first, not '$baseline'" ;; esac
case $equal_tokens in yes | no) ;; *) die "--equal-tokens must be yes or no, not '$equal_tokens'" ;; esac
if [ -n "$report" ]; then
    [ -r "$report/settings" ] && [ -r "$report/table" ] ||
        die "$report: no settings and table of a run of $me here"
    # shellcheck disable=SC1091 # written by this script
    . "$report/settings"
    out=$report
fi
[ -x "$shoal" ] || die "no $shoal: build shoal first or set SHOAL"
[ -r "$data/brown/train.txt" ] || die "no $data/brown/train.txt (set SHOAL_DATA)"

bench_out_dir churn
child="" killer=""
# pass or fail: the run in progress and its killer stopped, then the temp folder
cleanup() {
    [ -z "$killer" ] || kill "$killer" 2>/dev/null || true
    bench_stop_child
    [ -z "${tmp_out:-}" ] || rm -rf "$tmp_out"
}
bench_traps cleanup

cpu=$(bench_cpu)
batch=32 bptt=20 # bench_small_model's

bench_small_model "$data" "$out"
# the rate decays over the full run's steps, also in a run stopped early at equal tokens
common=("${small_model[@]}" --set train.schedule.steps="$steps" --set train.schedule.type=linear
    --set run.log_every=10 --set run.checkpoint_every=200
    --set sync.timeout_ms=1000 --set cluster.timeout_ms=5000
    --set cluster.restart.max=1000 --set cluster.restart.delay_ms="$delay_ms")

# mode_args MODE N: sets conf, args[] and the sync period (steps) for one mode on N nodes.
mode_args() {
    local q=$(($2 >= 8 ? 2 : 1))
    conf=$top/conf/brown-4nodes-$1.yaml
    period=16
    case $1 in
    allreduce) args=() period=1 ;;
    bmuf) args=(--set sync.period=16 --set sync.embedding_period=128 --set sync.exchange=unique) ;;
    gossip-bmuf)
        args=(--set sync.period=16 --set sync.embedding_period=128 --set sync.exchange=unique
            --set topology.degree="$q" --set sync.neighbours="$q")
        ;;
    esac
}


# kill_every T N DIR KILLS: every T seconds sends SIG$signal to a random node of the shoal run
# $child and writes "time rank step" to KILLS (step: the node's last reported step)
kill_every() {
    local t=$1 n=$2 dir=$3 kills=$4 r pid
    while sleep "$t"; do
        r=$((RANDOM % n))
        pid=$(pgrep -P "$child" -x "shoal node $r" | head -1) || continue
        [ -n "$pid" ] || continue
        echo "$EPOCHREALTIME $r $(bench_last_step "$dir/node-$r/metrics.jsonl")" >>"$kills"
        kill -"$signal" "$pid" 2>/dev/null || true
    done
}

# run_one NAME N T LIMIT_S [STEPS]: one run of STEPS steps a node (default S; T 0: no
# faults), its stderr timestamped into NAME.log (terse lines: measure reads their fields
# by position); prints "rc wall_s" (rc 124: killed after LIMIT_S, a hang)
run_one() {
    local name=$1 n=$2 t=$3 limit=$4 max=${5:-$steps} start rc=0
    : >"$out/$name.kills"
    start=$EPOCHREALTIME
    SHOAL_LOG=info SHOAL_LOG_FORMAT=terse "$shoal" run "$conf" "${common[@]}" "${args[@]}" "${sets[@]}" \
        --set cluster.nodes="$n" --set train.max_steps="$max" --set run.dir="$out/$name" -n "$n" \
        2> >(while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done >"$out/$name.log") \
        >/dev/null &
    child=$!
    [ "$t" = 0 ] || { kill_every "$t" "$n" "$out/$name" "$out/$name.kills" & killer=$!; }
    while kill -0 "$child" 2>/dev/null; do
        if awk -v s="$start" -v now="$EPOCHREALTIME" -v l="$limit" 'BEGIN { exit !(now - s > l) }'; then
            kill -KILL "$child" 2>/dev/null || true
            pkill -KILL -f "shoal node" -P "$child" 2>/dev/null || true
            rc=124
            break
        fi
        sleep 1
    done
    [ -z "$killer" ] || { kill "$killer" 2>/dev/null || true; wait "$killer" 2>/dev/null || true; killer=""; }
    if [ $rc = 0 ]; then wait "$child" || rc=$?; else wait "$child" 2>/dev/null || true; fi
    child=""
    awk -v s="$start" -v e="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "%d %.1f\n", rc, e - s }'
}

# measure NAME N RC WALL [STEPS]: "kills comebacks tokens ppl model back_median back_max
# round_s" of a run of STEPS steps a node (default S; round_s: node 0's training seconds
# per step times the period)
measure() {
    local name=$1 n=$2 rc=$3 wall=$4 max=${5:-$steps} dir=$out/$1 model=yes round
    round=$(awk -v t="$(bench_num train_time_s "$dir/node-0/summary.json")" \
        -v s="$(bench_num steps "$dir/node-0/summary.json")" -v p="$period" \
        'BEGIN { if (s > 0) printf "%.4f", t / s * p; else print "nan" }')
    [ -s "$dir/model.bin" ] || model=no
    # the steps no node trained: a rank is down from its first kill (a second kill while
    # it is down, of the stopped process or of its restart, changes nothing) to its
    # "came back at step S" line, or to the end of the run; kills and log lines merged
    # by their times
    awk -v n="$n" -v steps="$max" -v tok="$((batch * bptt))" -v kills="$out/$name.kills" -v round="$round" \
        -v ppl="$(bench_num valid_ppl "$dir/summary.json")" -v model="$model" '
        function kills_until(t) {
            while (ki < nk && kt[ki + 1] <= t) { ki++; if (!(kr[ki] in down)) down[kr[ki]] = ks[ki] } }
        BEGIN { while ((getline line < kills) > 0) { split(line, k, " ")
                    nk++; kt[nk] = k[1] + 0; kr[nk] = k[2]; ks[nk] = k[3] } }
        { kills_until($1 + 0) }
        / node [0-9]+: train: info: came back at step / {
            r = $3; sub(":", "", r); s = $0; sub(/.*came back at step /, "", s); s += 0
            if (r in down) { skipped += s - down[r]; delete down[r] }
            nb++ }
        / shoal run: node [0-9]+ restarted/ { r = $5; restarted[r] = $1 }
        / train: info: step [0-9]+: node [0-9]+ joined the run / {
            r = $9; if (restarted[r] != "" && !(r in first)) { first[r] = 1
                d = $1 - restarted[r]; back[++m] = d; delete restarted[r]; delete first[r] } }
        END { kills_until(1e300); for (r in down) skipped += steps - down[r]
              total = n * steps - skipped
              for (i = 2; i <= m; i++) { x = back[i]; for (j = i - 1; j >= 1 && back[j] > x; j--)
                      back[j + 1] = back[j]; back[j + 1] = x }  # sorted, for the median
              med = m ? back[int((m + 1) / 2)] : 0; mx = m ? back[m] : 0
              printf "%d %d %d %s %s %.1f %.1f %s\n", nk, nb, total * tok, ppl == "" ? "nan" : ppl,
                  model, med, mx, round }' "$out/$name.log"
}

# equal_tokens_run NAME N ROW: "ppl steps" of the fault-free run stopped where its N
# nodes have trained the tokens of the faulty run NAME (its table ROW), on the full
# run's schedule; the trial's fault-free run when that is all S steps; "- -" when
# --equal-tokens no or the faulty run left no perplexity
equal_tokens_run() {
    local name=$1-equal n=$2 field rc wall at ppl
    read -ra field <<<"$3"
    if [ "$equal_tokens" = no ] || [ "${field[9]}" = nan ]; then echo "- -"; return; fi
    at=$(awk -v t="${field[8]}" -v d="$((n * batch * bptt))" 'BEGIN { printf "%d", t / d + 0.5 }')
    if [ "$at" -ge "$steps" ]; then echo "${free_ppl:-nan} $steps"; return; fi
    echo "n=$n $mode: fault-free to step $at (the tokens of $1) ..." >&2
    read -r rc wall <<<"$(run_one "$name" "$n" 0 100000 "$at")"
    [ "$rc" = 0 ] || { tail -n 5 "$out/$name.log" >&2; die "the fault-free run $name failed"; }
    ppl=$(bench_num valid_ppl "$out/$name/summary.json")
    echo "${ppl:-nan} $at"
}

run_all() {
    "$shoal" keygen "$out/key" >/dev/null || die "shoal keygen failed"
    echo "# cpu: $cpu"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    : >"$out/table"
    declare -p nodes_list every delay_ms modes steps trials signal baseline equal_tokens sets cpu \
        >"$out/settings"
    for n in $nodes_list; do
        for mode in $modes; do
            mode_args "$mode" "$n"
            # trial k: the fault-free run, then each faulty one, side by side
            for ((k = 1; k <= trials; k++)); do
                if [ "$k" = 1 ] || [ "$baseline" = each ]; then
                    name=n$n-$mode-free-$k
                    echo "n=$n $mode: fault-free, trial $k ..." >&2
                    read -r rc wall <<<"$(run_one "$name" "$n" 0 100000)"
                    [ "$rc" = 0 ] || { tail -n 5 "$out/$name.log" >&2; die "the fault-free run $name failed"; }
                    echo "$n $mode 0 $k $rc $wall $(measure "$name" "$n" "$rc" "$wall") - -" >>"$out/table"
                    free_ppl=$(bench_num valid_ppl "$out/$name/summary.json")
                    limit=$(awk -v w="$wall" 'BEGIN { printf "%d", 3 * w + 120 }')
                fi
                for t in $every; do
                    [ "$t" != 0 ] || continue
                    name=n$n-$mode-every$t-$k
                    echo "n=$n $mode: a kill every $t s, trial $k ..." >&2
                    read -r rc wall <<<"$(run_one "$name" "$n" "$t" "$limit")"
                    row="$n $mode $t $k $rc $wall $(measure "$name" "$n" "$rc" "$wall")"
                    equal=$(equal_tokens_run "$name" "$n" "$row") # not inside echo: its die must stop this
                    echo "$row $equal" >>"$out/table"
                done
            done
        done
    done
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
[ -n "$report" ] || run_all

echo
echo "## churn ($cpu; $steps steps a node, SIG$signal, restart after $delay_ms ms)"
echo
echo "| n | mode | kill every s | trial | exit | wall s | kills | came back | tokens | goodput | back s (median, max) | back, rounds | valid ppl | ppl vs fault-free | vs fault-free, equal tokens | model.bin |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
awk 'NR == FNR { if ($3 == 0) { k = $1 " " $2 " " $4; rate[k] = $9 / $6; ppl[k] = $10; rnd[k] = $14 }
        next }
    { key = $1 " " $2 " " $4; if (!(key in rate)) key = $1 " " $2 " 1"  # --baseline first
      base = rate[key]; bppl = ppl[key]; r = rnd[key] + 0
      g = ($9 / $6) / base; hang = $5 == 124 ? " (hang)" : ""
      rounds = r > 0 ? sprintf("%.1f, %.1f", $12 / r, $13 / r) : "-"
      # $15, $16: perplexity and steps of the fault-free run at equal tokens ("-" for
      # none; absent in tables of older runs)
      equal = $15 + 0 > 0 && $10 + 0 > 0 ? sprintf("%+.2f%% (%d steps)", 100 * ($10 / $15 - 1), $16) : "-"
      printf "| %s | %s | %s | %s | %s%s | %.0f | %s | %s | %s | %.1f%% | %.1f, %.1f | %s | %s | %+.2f%% | %s | %s |\n",
          $1, $2, $3 == 0 ? "none" : $3, $4, $5, hang, $6, $7, $8, $9, 100 * g, $12, $13, rounds,
          $10, 100 * ($10 / bppl - 1), equal, $11 }' "$out/table" "$out/table"
echo
awk '$3 != 0 { runs++; if ($5 == 124) hangs++; if ($11 != "yes") nomodel++ }
    END { printf "# %d faulty runs: %d hangs, %d without the run'"'"'s model.bin\n", runs, hangs, nomodel }' "$out/table"
