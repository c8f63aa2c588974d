#!/usr/bin/env bash
# bench_accuracy.sh: does n-node training end where one node does, on corpora other than
# Brown (issue 17)? Per corpus, one node (the reference model and optimizer of
# conf/brown-word.yaml) against n nodes (conf/brown-4nodes-gossip-bmuf.yaml with -n n
# and sync.algorithm set) for each algorithm, at equal tokens (each node trains on its
# 1/n of the corpus per epoch, with 1/n of the one node's batch: that file's
# train.global_batch), for each seed; one fixed configuration for every corpus.
# Prints the CPU model, a Markdown table of the final model's validation perplexity
# (mean and min-max over the seeds, the gap of the mean to one node's mean) and writes
# a PNG of the validation curves.
#
#   bench/bench_accuracy.sh [--corpora LIST] [--nodes LIST] [--algorithms LIST]
#                           [--seeds N] [--epochs E] [--steps S] [--quick]
#                           [--set KEY=VALUE]... [--set-nodes KEY=VALUE]...
#                           [--variant NAME:KEY=VALUE]...
#                           [--corpus-dir DIR] [--out DIR] [--keep] [--table-only]
#
#   --corpora LIST     comma/space separated, from: brown (../shared/data/brown),
#                      shakespeare-word, brown-half, and the held-out kjv and kjv-nt
#                      (built by bench/accuracy_corpora.sh into --corpus-dir when
#                      missing; --list there says what each is); default the first three
#   --nodes LIST       node counts of the multi-node runs (default 4; e.g. 4,8)
#   --algorithms LIST  sync.algorithm of the multi-node runs (default gossip-bmuf bmuf
#                      allreduce; any of shoal's: local-bmuf, ma, gossip-ma, ...)
#   --seeds N          run.seed 1..N for every run, the single node's too (default 3)
#   --epochs E         train.epochs of every run (default 3)
#   --steps S          train.max_steps of the single node; a run on n nodes gets S / n
#                      per node (n must divide S); 0 = the epochs decide (default 0)
#   --quick            to try the script: 1 seed, 1 epoch of at most 256 single-node
#                      steps (64 per node on 4), the
#                      small corpus (shakespeare-word) unless --corpora says otherwise;
#                      its figures are not the benchmark's
#   --set KEY=VALUE    passed to every run, the single node's too (e.g. a schedule, so
#                      that both sides have it)
#   --set-nodes KEY=VALUE  passed to the multi-node runs only (sync.* keys)
#   --variant NAME:KEY=VALUE  a setting of the multi-node runs of variant NAME (letters,
#                      digits, _; repeat it for more settings of one variant): with
#                      variants, each algorithm and node count runs once per variant,
#                      as ALGORITHM-nN-NAME, so that settings of one algorithm are
#                      compared side by side in one invocation (e.g. --variant
#                      p8:sync.period=8 --variant p16:sync.period=16)
#   --corpus-dir DIR   the built corpora (default accuracy_corpora.sh's)
#   --out DIR          run directories (DIR/CORPUS/RUN-sSEED, RUN = single,
#                      ALGORITHM-nN or ALGORITHM-nN-VARIANT), logs, table.md, curves.dat and curves.png (default
#                      runs/accuracy). A run's command line is kept in its .cmd file: a
#                      finished run is reused only when that line matches this
#                      invocation's; otherwise it is run again
#   --keep             keep every run's model files and checkpoints (default: removed
#                      once the run has finished, as 3 corpora x 3 seeds of 4-node runs
#                      hold gigabytes of them; metrics and summaries always stay)
#   --table-only       only the table and plot, from the finished runs whose command
#                      lines match this invocation's
#   -h, --help         this text
#
# The table's perplexity is the final model's: one node's own, or for n nodes the
# average of their models that shoal writes at the end. The curves are validation
# perplexity after each epoch against the tokens all nodes have seen: one node's model,
# and for n nodes the mean over the nodes' own models (before the final average), each a
# mean over the seeds; the final average is the last point of the n-node curves. No run
# evaluates a test split. Environment: SHOAL (default <repo>/build/shoal), SHOAL_DATA
# (shared corpora, default <repo>/../shared/data). The PNG needs gnuplot (Debian:
# gnuplot-nox). Figures only: it exits non-zero when a run fails (after the others and
# the table), never on the perplexity it finds.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
all_corpora="brown shakespeare-word brown-half kjv kjv-nt"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

me=bench_accuracy.sh
die() {
    echo "$me: $*" >&2
    exit 1
}

corpora=""
node_counts=4
algorithms="gossip-bmuf bmuf allreduce"
seeds=3
epochs=3
steps=0
quick=0
corpus_dir=""
out=$top/runs/accuracy
keep=0
table_only=0
extra=()
extra_nodes=()
variants=""             # variant names, in the order first given
declare -A variant_sets # NAME -> its KEY=VALUE settings, one a line
while [ $# -gt 0 ]; do
    case $1 in
    --corpora) [ $# -ge 2 ] || die "--corpora needs a value"; corpora=${2//,/ }; shift 2 ;;
    --nodes) [ $# -ge 2 ] || die "--nodes needs a value"; node_counts=${2//,/ }; shift 2 ;;
    --algorithms) [ $# -ge 2 ] || die "--algorithms needs a value"; algorithms=${2//,/ }; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; seeds=$2; shift 2 ;;
    --epochs) [ $# -ge 2 ] || die "--epochs needs a value"; epochs=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --set) [ $# -ge 2 ] || die "--set needs KEY=VALUE"; extra+=(--set "$2"); shift 2 ;;
    --set-nodes) [ $# -ge 2 ] || die "--set-nodes needs KEY=VALUE"; extra_nodes+=(--set "$2"); shift 2 ;;
    --variant)
        [ $# -ge 2 ] || die "--variant needs NAME:KEY=VALUE"
        [[ $2 =~ ^([A-Za-z0-9_]+):([^=]+=.*)$ ]] ||
            die "--variant: expected NAME:KEY=VALUE (NAME of letters, digits, _), got '$2'"
        case " $variants " in *" ${BASH_REMATCH[1]} "*) ;; *) variants+=" ${BASH_REMATCH[1]}" ;; esac
        variant_sets[${BASH_REMATCH[1]}]+="${BASH_REMATCH[2]}"$'\n'
        shift 2
        ;;
    --corpus-dir) [ $# -ge 2 ] || die "--corpus-dir needs a directory"; corpus_dir=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --table-only) table_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
if [ "$quick" = 1 ]; then
    seeds=1
    epochs=1
    steps=256
    [ -n "$corpora" ] || corpora=shakespeare-word
fi
[ -n "${corpora// /}" ] || corpora="brown shakespeare-word brown-half"
[[ $seeds =~ ^[1-9][0-9]*$ ]] || die "--seeds: expected a positive integer, got '$seeds'"
[[ $epochs =~ ^[1-9][0-9]*$ ]] || die "--epochs: expected a positive integer, got '$epochs'"
[[ $steps =~ ^[0-9]+$ ]] || die "--steps: expected an integer >= 0, got '$steps'"
[ -n "${node_counts// /}" ] || die "--nodes needs at least one node count"
[ -n "${algorithms// /}" ] || die "--algorithms needs at least one algorithm"
for n in $node_counts; do
    [[ $n =~ ^[0-9]+$ && $n -ge 2 ]] || die "--nodes: expected node counts >= 2, got '$n'"
    [ "$steps" = 0 ] || [ $((steps % n)) = 0 ] || die "--steps $steps: not a multiple of $n nodes"
done
for a in $algorithms; do
    case $a in
    allreduce | ma | bmuf | local-ma | local-bmuf | gossip-ma | gossip-bmuf) ;;
    *) die "--algorithms: unknown algorithm '$a'" ;;
    esac
done
for c in $corpora; do
    case " $all_corpora " in *" $c "*) ;; *) die "--corpora: unknown corpus '$c' (known: $all_corpora)" ;; esac
done
[ "$table_only" = 1 ] || [ -x "$shoal" ] || die "no shoal binary at $shoal (build it, or set SHOAL)"

# The built corpora: made now when one that is asked for is missing.
[ -n "$corpus_dir" ] || corpus_dir=$("$top/bench/accuracy_corpora.sh" --print-dir)
corpus_path() {
    case $1 in
    brown) echo "$data/brown" ;;
    *) echo "$corpus_dir/$1" ;;
    esac
}
for c in $corpora; do
    [ "$c" = brown ] || [ -s "$(corpus_path "$c")/valid.txt" ] || [ "$table_only" = 1 ] ||
        "$top/bench/accuracy_corpora.sh" --dir "$corpus_dir" "$c" >&2 || die "could not build corpus $c"
    [ "$table_only" = 1 ] || [ -r "$(corpus_path "$c")/train.txt" ] ||
        die "$c: cannot read $(corpus_path "$c")/train.txt (set SHOAL_DATA or --corpus-dir)"
done
mkdir -p "$out"
cpu=$(bench_cpu)

# The runs of one corpus and seed: single, then ALGORITHM-nN, or ALGORITHM-nN-VARIANT for
# each variant.
run_names() {
    local n a v
    echo single
    for n in $node_counts; do
        for a in $algorithms; do
            if [ -z "$variants" ]; then
                echo "$a-n$n"
            else
                for v in $variants; do
                    echo "$a-n$n-$v"
                done
            fi
        done
    done
}

# The command of run $2 with seed $3 on corpus $1, into cmd.
command_of() {
    local corpus=$1 name=$2 seed=$3 dir n tail kv common
    dir=$(corpus_path "$corpus")
    common=(--set "data.train=$dir/train.txt" --set "data.valid=$dir/valid.txt" --set data.test=
        --set "train.epochs=$epochs" --set "run.seed=$seed" --set run.threads=1
        --set run.log_every=50)
    if [ "$name" = single ]; then
        cmd=("$shoal" train "$top/conf/brown-word.yaml" "${common[@]}" --set "train.max_steps=$steps"
            ${extra[@]+"${extra[@]}"})
    else
        tail=${name##*-n} # N, or N-VARIANT
        n=${tail%%-*}
        cmd=("$shoal" run "$top/conf/brown-4nodes-gossip-bmuf.yaml" -n "$n" "${common[@]}"
            --set "train.max_steps=$((steps / n))" --set "sync.algorithm=${name%-n"$tail"}"
            ${extra[@]+"${extra[@]}"} ${extra_nodes[@]+"${extra_nodes[@]}"})
        if [ "$tail" != "$n" ]; then
            while IFS= read -r kv; do
                [ -z "$kv" ] || cmd+=(--set "$kv")
            done <<<"${variant_sets[${tail#*-}]}"
        fi
    fi
    cmd+=(--set "run.dir=$out/$corpus/$name-s$seed")
}

# the table needs only the summaries and metrics
[ "$keep" = 1 ] || bench_drop_models=1

echo "# cpu: $cpu"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$table_only" = 0 ]; then
    for c in $corpora; do
        for ((seed = 1; seed <= seeds; seed++)); do
            for r in $(run_names); do
                bench_run_kept "$c" "$r" "$seed"
            done
        done
    done
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The runs the table reads: CORPUS RUN SEED, one a line, this invocation's only.
listing=$out/runs.txt
: >"$listing"
for c in $corpora; do
    for r in $(run_names); do
        for ((seed = 1; seed <= seeds; seed++)); do
            ! bench_same_options "$c" "$r" "$seed" || [ ! -f "$out/$c/$r-s$seed/summary.json" ] ||
                echo "$c $r $seed" >>"$listing"
        done
    done
done
[ -s "$listing" ] || die "no finished run under $out matches these options"

what="$epochs epoch(s), $([ "$steps" = 0 ] && echo "every step of them" ||
    echo "$steps single-node steps"), $seeds seed(s)$([ "$quick" = 0 ] || echo ", --quick")"
opts="${extra[*]+${extra[*]}}${extra_nodes[*]+ nodes only: ${extra_nodes[*]}}"
for v in $variants; do
    opts+="${opts:+; }$v: $(printf '%s' "${variant_sets[$v]}" | tr '\n' ' ' | sed 's/ $//')"
done
python3 - "$out" "$listing" "$cpu" "$what" "$opts" <<'EOF'
import json, math, os, sys

out, listing, cpu, what, opts = sys.argv[1:6]
runs, order = {}, []
names = {}  # run name -> line type, the same in every panel

def ppl(v):
    """A perplexity shoal wrote: null (not finite: the run diverged) is inf."""
    return math.inf if v is None else v

def evals(path):
    """The valid perplexities after each epoch in one metrics.jsonl, by step."""
    pts = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("event") == "eval" and r.get("split") == "valid":
            pts[r["step"]] = ppl(r["ppl"])
    return pts

for line in open(listing):
    corpus, name, seed = line.split()
    d = os.path.join(out, corpus, "%s-s%s" % (name, seed))
    s = json.load(open(os.path.join(d, "summary.json")))
    n = s.get("nodes", 1)
    per_step = s["train_tokens"] / s["steps"] * n if s["steps"] else 0
    # per epoch: one node's model, or the mean over the n nodes' own models
    curves = [evals(os.path.join(d, "metrics.jsonl"))] if n == 1 else [
        evals(os.path.join(d, "node-%d" % r, "metrics.jsonl")) for r in range(n)]
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    pts = [(st * per_step, sum(c[st] for c in curves) / len(curves)) for st in steps]
    if n > 1:
        pts.append((s["steps"] * per_step, ppl(s["valid_ppl"])))
    key = (corpus, name)
    if key not in runs:
        runs[key] = {"ppl": [], "curves": []}
        order.append(key)
    runs[key]["ppl"].append(ppl(s["valid_ppl"]))
    runs[key]["curves"].append(pts)

def mean(v):
    return sum(v) / len(v)

head = ["corpus", "run", "nodes", "seeds", "final valid ppl mean", "min-max", "vs one node"]
lines = ["cpu: %s; %s%s" % (cpu, what, "; " + opts if opts else ""), "",
         "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
blocks, panels = [], []
for corpus in dict.fromkeys(c for c, _ in order):
    single = runs.get((corpus, "single"))
    base = mean(single["ppl"]) if single else None
    first = len(blocks)
    for c, name in order:
        if c != corpus:
            continue
        r = runs[(c, name)]
        p = mean(r["ppl"])
        gap = "%+.1f%%" % (100 * (p / base - 1)) if base and name != "single" else "-"
        nodes = "1" if name == "single" else name.rsplit("-n", 1)[1].split("-")[0]
        lines.append("| " + " | ".join([corpus, name, nodes, str(len(r["ppl"])), "%.2f" % p,
                                        "%.2f-%.2f" % (min(r["ppl"]), max(r["ppl"])), gap]) + " |")
        # the mean curve over the seeds, at the points every seed has
        npts = min(len(cv) for cv in r["curves"])
        pts = [(mean([cv[i][0] for cv in r["curves"]]), mean([cv[i][1] for cv in r["curves"]]))
               for i in range(npts)]
        blocks.append((name, pts, names.setdefault(name, len(names) + 1)))
    panels.append((corpus, first, len(blocks) - first))
with open(os.path.join(out, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
with open(os.path.join(out, "curves.dat"), "w") as f:
    for name, pts, lt in blocks:
        f.write('"%s"\n%s\n\n\n' % (name, "\n".join(
            "%.0f %.4f %d" % (p + (lt,)) for p in pts if math.isfinite(p[1]))))
# curves.env: per panel its corpus, its first block in curves.dat and its block count
with open(os.path.join(out, "curves.env"), "w") as f:
    for corpus, first, count in panels:
        f.write("%s %d %d\n" % (corpus, first, count))
print("\n".join(lines))
EOF

if command -v gnuplot >/dev/null 2>&1; then
    n=0
    plots=""
    while read -r corpus first count; do
        plots+="set title '$corpus'
plot for [i=$first:$((first + count - 1))] '$out/curves.dat' index i using (\$1 / 1e6):2:3 \
with linespoints lc variable pt 7 ps 0.7 title columnheader(1)
"
        n=$((n + 1))
    done <"$out/curves.env"
    gnuplot <<EOF
set terminal pngcairo size $((300 + 500 * n)),560 noenhanced
set output "$out/curves.png"
set multiplot layout 1,$n title "valid ppl after each epoch; n nodes: the mean of\ntheir own models, then (last point) their average.\n$cpu\n$what"
set xlabel "training tokens, all nodes (millions)"
set ylabel "validation perplexity"
set key top right
set grid
# a colour per run (line type = the run's column 3), the same in every panel
colours = "#000000 #1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b #e377c2 #17becf #7f7f7f #bcbd22 #aec7e8"
do for [i=1:12] { set linetype i lc rgb word(colours, i) }
set linetype cycle 12
$plots
unset multiplot
EOF
    echo "bench_accuracy.sh: plot in $out/curves.png"
else
    echo "bench_accuracy.sh: gnuplot not found (Debian: apt-get install gnuplot-nox); no plot" >&2
fi
[ "$bench_failed" = 0 ] || die "a run failed (above); the table has the others"
