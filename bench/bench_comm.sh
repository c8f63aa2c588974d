#!/usr/bin/env bash
# bench_comm.sh: perplexity against bytes on the wire (issue 18). Per corpus, one node
# (shoal train) against 4 nodes (shoal run) at equal tokens (each node trains on its
# quarter of the corpus per epoch, with a quarter of the single node's batch: the
# recipe of conf/brown-4nodes-gossip-bmuf.yaml on every corpus), for each sync setting
# of the list below and each seed; the same settings on every corpus, nothing retuned.
# Per setting and corpus: the final model's validation perplexity (mean and min-max
# over the seeds), the bytes each node sent per step (summary.json's
# wire.bytes_per_step, the mean over the 4 nodes), the ratio to allreduce in fp32 (what
# a ring allreduce of fp32 gradients sends per node and step) and the gap to the single
# node's mean perplexity; a Markdown table and a Pareto PNG (perplexity against bytes
# per node per step, log x).
#
#   bench/bench_comm.sh [--corpora LIST] [--settings LIST] [--seeds N] [--epochs E]
#                       [--steps S] [--quick] [--set KEY=VALUE]... [--out DIR]
#                       [--table-only] [--list]
#
#   --corpora LIST   comma/space separated, from: brown (word level, the 4-node Brown
#                    set-up of conf/brown-4nodes-gossip-bmuf.yaml, one node
#                    conf/brown-word.yaml) shakespeare (char level,
#                    conf/shakespeare-char.yaml on 1 and 4 nodes); default both
#   --settings LIST  a subset of the settings (--list prints them); default all
#   --seeds N        run.seed 1..N for every run, the single node's too (default 3)
#   --epochs E       train.epochs of every run (default 3, the issue's setting)
#   --steps S        train.max_steps of every run, the single node's too: the 4 nodes
#                    split one node's batch (train.global_batch), so equal steps are
#                    equal tokens; 0 = the epochs decide (default 0)
#   --quick          a small version to try the script: 1 seed, 1 epoch, 64 steps a
#                    run, so period 64 syncs once; its figures are not the benchmark's
#   --set KEY=VALUE  passed to every run after the settings' keys
#   --out DIR        run directories (DIR/CORPUS/SETTING-sSEED), logs, table.md,
#                    pareto.dat and pareto.png (default runs/comm). A run's command line
#                    is kept in DIR/CORPUS/SETTING-sSEED.cmd: a finished run is reused
#                    and an interrupted one resumes from its checkpoint only when that
#                    line matches this invocation's; otherwise it is run again
#   --table-only     only the table and plot, from the finished runs whose command lines
#                    match this invocation's
#   --list           print the settings and their sync keys, and exit
#   -h, --help       this text
#
# Every 4-node run has sync.block_momentum auto (1 - 1/m for the m models an average
# takes: 0.5 for gossip-bmuf with q = 1), sync.embedding_period 0 and
# the setting's keys; int8 and int4 always carry error feedback (doc/config.md,
# "Quantized deltas"). No run evaluates a test split (data.test is emptied for Brown):
# the table has none. Environment: SHOAL (default <repo>/build/shoal), SHOAL_DATA
# (corpora, default <repo>/../shared/data). The PNG needs gnuplot (Debian: gnuplot-nox).
# Figures only: it exits non-zero when a run fails (after the others and the table),
# never on the perplexity or the bytes it finds.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}

# The settings, one a line: name, then sync keys (sync.KEY=VALUE for every corpus).
# allreduce-fp32 is the bytes reference; add a line to add a setting.
settings_table='
allreduce-fp32        algorithm=allreduce
fp32-p8               algorithm=gossip-bmuf period=8
fp32-p16              algorithm=gossip-bmuf period=16
int8-p8               algorithm=gossip-bmuf period=8 compression=int8
int4-p8               algorithm=gossip-bmuf period=8 compression=int4
int4-b64-p8           algorithm=gossip-bmuf period=8 compression=int4 quant_block=64
int8-top10-p8         algorithm=gossip-bmuf period=8 compression=int8 topk=0.1
int4-top10-p8         algorithm=gossip-bmuf period=8 compression=int4 topk=0.1
int4-p16              algorithm=gossip-bmuf period=16 compression=int4
int4-p32              algorithm=gossip-bmuf period=32 compression=int4
int4-top10-p32        algorithm=gossip-bmuf period=32 compression=int4 topk=0.1
int4-top5-p64         algorithm=gossip-bmuf period=64 compression=int4 topk=0.05
int4-p32-stagger      algorithm=gossip-bmuf period=32 compression=int4 stagger=true
'
all_corpora="brown shakespeare"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

me=bench_comm.sh
die() {
    echo "$me: $*" >&2
    exit 1
}

all_settings=$(awk 'NF { printf "%s%s", sep, $1; sep = " " }' <<<"$settings_table")

# The sync keys of setting $1, as they are written in the table.
keys_of() {
    awk -v n="$1" '$1 == n { $1 = ""; sub(/^ /, ""); print }' <<<"$settings_table"
}

corpora=$all_corpora
settings=$all_settings
seeds=3
epochs=3
steps=0
quick=0
out=$top/runs/comm
table_only=0
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --corpora) [ $# -ge 2 ] || die "--corpora needs a value"; corpora=${2//,/ }; shift 2 ;;
    --settings) [ $# -ge 2 ] || die "--settings needs a value"; settings=${2//,/ }; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; seeds=$2; shift 2 ;;
    --epochs) [ $# -ge 2 ] || die "--epochs needs a value"; epochs=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --set) [ $# -ge 2 ] || die "--set needs KEY=VALUE"; extra+=(--set "$2"); shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --table-only) table_only=1; shift ;;
    --list) awk 'NF' <<<"$settings_table"; exit 0 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[ "$quick" = 0 ] || { seeds=1; epochs=1; steps=64; }
[[ $seeds =~ ^[1-9][0-9]*$ ]] || die "--seeds: expected a positive integer, got '$seeds'"
[[ $epochs =~ ^[1-9][0-9]*$ ]] || die "--epochs: expected a positive integer, got '$epochs'"
[[ $steps =~ ^[0-9]+$ ]] || die "--steps: expected an integer >= 0, got '$steps'"
[ -n "${corpora// /}" ] || die "--corpora needs at least one corpus"
[ -n "${settings// /}" ] || die "--settings needs at least one setting"
for c in $corpora; do
    case " $all_corpora " in *" $c "*) ;; *) die "--corpora: unknown corpus '$c' (known: $all_corpora)" ;; esac
done
for s in $settings; do
    case " $all_settings " in *" $s "*) ;; *) die "--settings: unknown setting '$s' (known: $all_settings)" ;; esac
done
[ "$table_only" = 1 ] || [ -x "$shoal" ] || die "no shoal binary at $shoal (build it, or set SHOAL)"
for c in $corpora; do
    case $c in
    brown) f=$data/brown/train.txt ;;
    shakespeare) f=$data/tinyshakespeare/input.txt ;;
    esac
    [ -r "$f" ] || die "$c: cannot read $f (set SHOAL_DATA)"
done
mkdir -p "$out"
cpu=$(bench_cpu)

# The command of run $2 (a setting or "single") with seed $3 on corpus $1, into cmd.
command_of() {
    local corpus=$1 name=$2 seed=$3 one four k s1=0 s4=0 common split=()
    case $corpus in
    brown)
        one=$top/conf/brown-word.yaml
        four=$top/conf/brown-4nodes-gossip-bmuf.yaml
        common=(--set "data.train=$data/brown/train.txt" --set "data.valid=$data/brown/valid.txt"
            --set data.test=)
        ;;
    shakespeare)
        one=$top/conf/shakespeare-char.yaml
        four=$one
        common=(--set "data.train=$data/tinyshakespeare/input.txt")
        # the Brown 4-node recipe's: one node's batch (that file's 32) split over the
        # nodes, so that the four take as many steps as one node
        split=(--set train.global_batch=32)
        ;;
    esac
    [ "$steps" = 0 ] || { s1=$steps; s4=$steps; }
    common+=(--set "train.epochs=$epochs" --set "run.seed=$seed" --set run.threads=1
        --set run.log_every=50)
    if [ "$name" = single ]; then
        cmd=("$shoal" train "$one" "${common[@]}" --set "train.max_steps=$s1")
    else
        cmd=("$shoal" run "$four" -n 4 "${common[@]}" ${split[@]+"${split[@]}"}
            --set "train.max_steps=$s4"
            --set sync.block_momentum=auto --set sync.embedding_period=0)
        for k in $(keys_of "$name"); do
            cmd+=(--set "sync.$k")
        done
    fi
    cmd+=(${extra[@]+"${extra[@]}"} --set "run.dir=$out/$corpus/$name-s$seed")
}


echo "# cpu: $cpu"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$table_only" = 0 ]; then
    for c in $corpora; do
        for ((seed = 1; seed <= seeds; seed++)); do
            for s in single $settings; do
                bench_run_kept "$c" "$s" "$seed"
            done
        done
    done
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The runs the table reads: CORPUS SETTING SEED KEYS, one a line, this invocation's only.
listing=$out/runs.txt
: >"$listing"
for c in $corpora; do
    for s in single $settings; do
        for ((seed = 1; seed <= seeds; seed++)); do
            ! bench_same_options "$c" "$s" "$seed" || [ ! -f "$out/$c/$s-s$seed/summary.json" ] ||
                echo "$c $s $seed $(keys_of "$s")" >>"$listing"
        done
    done
done
[ -s "$listing" ] || die "no finished run under $out matches these options"

what="$epochs epoch(s), $([ "$steps" = 0 ] && echo "every step of them" ||
    echo "$steps steps a run"), $seeds seed(s)$(
    [ "$quick" = 0 ] || echo ", --quick")"
python3 - "$out" "$listing" "$cpu" "$what" <<'EOF'
import json, os, sys

out, listing, cpu, what = sys.argv[1:5]
runs = {}
order = []
for line in open(listing):
    corpus, name, seed, *keys = line.split()
    d = os.path.join(out, corpus, "%s-s%s" % (name, seed))
    s = json.load(open(os.path.join(d, "summary.json")))
    bps, ref = 0.0, None
    if name != "single":
        nodes = [json.load(open(os.path.join(d, "node-%d" % r, "summary.json")))
                 for r in range(s["nodes"])]
        bps = sum(n["wire"]["bytes_per_step"] for n in nodes) / len(nodes)
        ref = nodes[0]["wire"]["allreduce_fp32_bytes_per_step"]
    key = (corpus, name)
    if key not in runs:
        runs[key] = {"keys": " ".join(keys), "ppl": [], "bps": [], "ref": ref}
        order.append(key)
    runs[key]["ppl"].append(s["valid_ppl"])
    runs[key]["bps"].append(bps)

def mean(v):
    return sum(v) / len(v)

head = ["corpus", "setting", "sync keys", "seeds", "valid ppl mean", "min-max",
        "bytes/node/step", "ratio to allreduce fp32", "x fewer", "vs single"]
lines = ["cpu: %s; %s" % (cpu, what), "",
         "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
dat = []
for corpus in dict.fromkeys(c for c, _ in order):
    single = runs.get((corpus, "single"))
    base = mean(single["ppl"]) if single else None
    block = []
    for c, name in order:
        if c != corpus:
            continue
        r = runs[(c, name)]
        p, b = mean(r["ppl"]), mean(r["bps"])
        ratio = b / r["ref"] if r["ref"] else None
        gap = 100 * (p / base - 1) if base else None
        lines.append("| " + " | ".join([
            corpus, name, r["keys"] or "-", str(len(r["ppl"])), "%.2f" % p,
            "%.2f-%.2f" % (min(r["ppl"]), max(r["ppl"])),
            "%.0f" % b if name != "single" else "-",
            "%.2e" % ratio if ratio is not None else "-",
            "%.0f" % (1 / ratio) if ratio else "-",
            "%+.1f%%" % gap if gap is not None and name != "single" else "-"]) + " |")
        if name != "single" and b > 0:
            block.append('"%s" %.1f %.4f %.4f %.4f' % (name, b, p, min(r["ppl"]), max(r["ppl"])))
    ref = next((runs[k]["ref"] for k in order if k[0] == corpus and runs[k]["ref"]), 0)
    dat.append((corpus, base, ref, block))
with open(os.path.join(out, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
# pareto.dat: one block per corpus with points (setting, bytes, mean, min, max);
# pareto.env: per block its corpus, single-node perplexity (0: none) and allreduce fp32's
# bytes per node per step
with open(os.path.join(out, "pareto.dat"), "w") as f, \
        open(os.path.join(out, "pareto.env"), "w") as g:
    for corpus, base, ref, block in dat:
        if block:
            f.write("# %s\n%s\n\n\n" % (corpus, "\n".join(block)))
            g.write("%s %.4f %.1f\n" % (corpus, base or 0, ref))
print("\n".join(lines))
EOF

if [ ! -s "$out/pareto.env" ]; then
    echo "bench_comm.sh: no 4-node run with bytes on the wire; no plot" >&2
elif command -v gnuplot >/dev/null 2>&1; then
    n=0
    plots=""
    while read -r corpus base ref; do
        line=""
        [ "$base" = 0.0000 ] || line="$base with lines dt 2 lc rgb '#555555' title 'one node', \
$base * 1.02 with lines dt 3 lc rgb '#999999' title 'one node + 2%', "
        plots+="set title '$corpus: valid ppl of the final model (4 nodes: their average)'
unset arrow
set arrow from $ref / 100, graph 0 to $ref / 100, graph 1 nohead dt 4 lc rgb '#d62728'
set label 1 '1/100 of allreduce fp32' at $ref / 100, graph 0.04 left offset 0.5,0 \
textcolor rgb '#d62728' font ',8'
plot $line'$out/pareto.dat' index $n using 2:3:4:5 with yerrorbars pt 7 lc rgb '#1f77b4' \
title 'mean, min-max over seeds', '' index $n using 2:3:1 with labels offset 0,1 \
font ',8' notitle
"
        n=$((n + 1))
    done <"$out/pareto.env"
    gnuplot <<EOF
set terminal pngcairo size $((700 * n)),560 noenhanced
set output "$out/pareto.png"
set multiplot layout 1,$n title "$cpu; $what"
set logscale x
set format x "%.0s %cB"
set xlabel "bytes per node per step (log)"
set ylabel "validation perplexity"
set key below
set grid
set offsets graph 0.08, graph 0.08, graph 0.08, graph 0.05
$plots
unset multiplot
EOF
    echo "bench_comm.sh: plot in $out/pareto.png"
else
    echo "bench_comm.sh: gnuplot not found (Debian: apt-get install gnuplot-nox); no plot" >&2
fi
[ "$bench_failed" = 0 ] || die "a run failed (above); the table has the others"
