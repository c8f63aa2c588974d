#!/usr/bin/env bash
# bench_table1.sh: the shape of the gossip-BMUF paper's Table 1 on Brown. A single-node
# baseline against 4 nodes with allreduce, ma, bmuf, local-bmuf and gossip-bmuf, same
# model and optimizer (conf/brown-word.yaml: SGD lr 20, clip 0.25), same total tokens
# (each of the 4 nodes sees its quarter of the corpus per epoch), sync periods (16, 128)
# (embeddings every 128 steps, the rest every 16) and (8); then a table of validation
# perplexity and wall time, and a PNG of validation perplexity against tokens.
#
#   bench/bench_table1.sh [--epochs N] [--runs LIST] [--out DIR] [--set KEY=VALUE]...
#                         [--table-only]
#
#   --epochs N     epochs of every run (default 3)
#   --runs LIST    comma/space separated subset of the runs, in this order by default:
#                  single gossip-bmuf ma bmuf local-bmuf allreduce
#                  gossip-bmuf-8 ma-8 bmuf-8 local-bmuf-8
#                  (NAME = periods (16, 128); NAME-8 = period 8 for every component)
#   --out DIR      run directories, logs, table.md, ppl.dat and table1.png
#                  (default runs/table1). Each run's exact command line is kept in
#                  DIR/NAME.cmd: a finished run (summary.json) is reused, and an
#                  interrupted one resumes from its checkpoint, only when that line
#                  matches this invocation's (same binary, corpus, --epochs, --set);
#                  a run made with other options, or before they were recorded, is
#                  deleted and run again
#   --set KEY=VALUE  passed on to every run (e.g. --set data.max_tokens=100000 for a
#                  smoke test, --set device=cuda on a GPU: the 4 nodes share it, or
#                  --set sync.block_momentum=0.9 against the configurations' auto,
#                  1 - 1/m for the m models an average takes)
#   --table-only   only build the table and the plot from every finished run DIR
#                  holds, whatever its options (without it, from the runs whose
#                  options match this invocation's)
#   -h, --help     this text
#
# Perplexity per epoch is node 0's own model (after each epoch's last sync); the final
# row is the model shoal writes at the end: for 4 nodes, the average over all nodes.
# Wall time is shoal's training time (evaluation excluded), on the CPU that DIR/NAME.cpu
# names (the machine the run was last started on; the table lists them). Environment:
# SHOAL (the binary, default <repo>/build/shoal), SHOAL_DATA (corpora, default
# <repo>/../shared/data).
# The PNG needs gnuplot (Debian: gnuplot-nox); without it the table is still written.
# Figures only: it exits non-zero when a run fails, never on the perplexity it finds.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
all_runs="single gossip-bmuf ma bmuf local-bmuf allreduce gossip-bmuf-8 ma-8 bmuf-8 local-bmuf-8"

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "bench_table1.sh: $*" >&2
    exit 1
}

epochs=3
runs=$all_runs
out=$top/runs/table1
table_only=0
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --epochs) [ $# -ge 2 ] || die "--epochs needs a value"; epochs=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] || die "--runs needs a value"; runs=${2//,/ }; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    --set) [ $# -ge 2 ] || die "--set needs KEY=VALUE"; extra+=(--set "$2"); shift 2 ;;
    --table-only) table_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case $epochs in '' | *[!0-9]* | 0) die "--epochs: expected a positive integer, got '$epochs'" ;; esac
for r in $runs; do
    case " $all_runs " in *" $r "*) ;; *) die "--runs: unknown run '$r' (known: $all_runs)" ;; esac
done
[ "$table_only" = 1 ] || [ -x "$shoal" ] || die "no shoal binary at $shoal (run ./setup.sh test, or set SHOAL)"
[ -r "$data/brown/train.txt" ] || die "no Brown corpus under $data (set SHOAL_DATA)"
mkdir -p "$out"

common=(--set "data.train=$data/brown/train.txt" --set "data.valid=$data/brown/valid.txt"
    --set "data.test=$data/brown/test.txt" --set "train.epochs=$epochs" --set run.log_every=50
    ${extra[@]+"${extra[@]}"})

# The command of run $1 into the array cmd.
command_of() {
    local name=$1 algo periods=(--set sync.period=16 --set sync.embedding_period=128)
    case $name in
    *-8) algo=${name%-8}; periods=(--set sync.period=8 --set sync.embedding_period=0) ;;
    *) algo=$name ;;
    esac
    if [ "$name" = single ]; then
        cmd=("$shoal" train "$top/conf/brown-word.yaml" "${common[@]}" --set "run.dir=$out/$name")
    else
        cmd=("$shoal" run "$top/conf/brown-4nodes-$algo.yaml" -n 4 "${common[@]}" "${periods[@]}"
            --set "run.dir=$out/$name")
    fi
}

# Run $1's command as one line: what DIR/NAME.cmd holds for the run in DIR/NAME.
command_line() {
    local cmd
    command_of "$1"
    printf '%q ' "${cmd[@]}"
}

# Whether DIR/NAME was made by this invocation's command.
same_options() {
    [ -f "$out/$1.cmd" ] && [ "$(cat "$out/$1.cmd")" = "$(command_line "$1")" ]
}

run_one() {
    local name=$1 dir=$out/$1 cmd
    if [ -e "$dir" ] && ! same_options "$name"; then
        echo "== $name: $dir was made with other options (see $out/$name.cmd); running it again"
        rm -rf "$dir"
    fi
    if [ -f "$dir/summary.json" ]; then
        echo "== $name: done before with the same options ($dir/summary.json)"
        return 0
    fi
    command_line "$name" >"$out/$name.cmd"
    echo >>"$out/$name.cmd"
    bench_cpu >"$out/$name.cpu"
    command_of "$name"
    echo "== $name: started $(date '+%H:%M:%S')"
    "${cmd[@]}" >"$out/$name.log" 2>&1 || die "$name failed; see $out/$name.log"
    echo "== $name: finished $(date '+%H:%M:%S'): $(tail -n 1 "$out/$name.log")"
}

table_runs=$all_runs
if [ "$table_only" = 0 ]; then
    for r in $runs; do
        run_one "$r"
    done
    table_runs=
    for r in $all_runs; do
        ! same_options "$r" || table_runs="$table_runs $r"
    done
fi

# table.md and ppl.dat (one block per run: tokens, valid ppl) from the run directories.
python3 - "$out" $table_runs <<'EOF'
import json, os, sys

out, names = sys.argv[1], sys.argv[2:]
rows, blocks, cpus = [], [], {}
for name in names:
    d = os.path.join(out, name)
    summ = os.path.join(d, "summary.json")
    if not os.path.exists(summ):
        continue
    s = json.load(open(summ))
    nodes = s.get("nodes", 1)
    mdir = os.path.join(d, "node-0") if nodes > 1 else d
    tokens_per_step = s["train_tokens"] / s["steps"] * nodes if s["steps"] else 0
    pts = []
    for line in open(os.path.join(mdir, "metrics.jsonl")):
        r = json.loads(line)
        if r.get("event") == "eval" and r.get("split") == "valid":
            pts.append((r["step"] * tokens_per_step, r["ppl"]))
    rows.append((name, nodes, s.get("sync", "none"), [p for _, p in pts], s["valid_ppl"],
                 s.get("test_ppl"), s["train_time_s"], s["train_tokens"] * nodes))
    try:
        cpu = open(os.path.join(out, name + ".cpu")).read().strip()
    except OSError:
        cpu = "not recorded"
    cpus.setdefault(cpu, []).append(name)
    blocks.append((name, pts))

if not rows:
    sys.exit("bench_table1.sh: no finished run under " + out)
base = next((r[4] for r in rows if r[0] == "single"), None)
nep = max(len(r[3]) for r in rows)
with open(os.path.join(out, "table.md"), "w") as f:
    head = ["run", "nodes", "periods"] + ["valid ppl ep %d" % (i + 1) for i in range(nep)]
    head += ["final valid", "final test", "vs single", "wall (min)", "tokens"]
    f.write("| " + " | ".join(head) + " |\n" + "|" + " --- |" * len(head) + "\n")
    for name, nodes, sync, eps, fv, ft, wall, tok in rows:
        per = "-" if nodes == 1 or sync == "allreduce" else ("8" if name.endswith("-8") else "16, 128")
        cells = [name, str(nodes), per] + ["%.2f" % p for p in eps] + [""] * (nep - len(eps))
        rel = "%+.1f%%" % (100 * (fv / base - 1)) if base else "-"
        cells += ["%.2f" % fv, "%.2f" % ft if ft else "-", rel, "%.1f" % (wall / 60), str(tok)]
        f.write("| " + " | ".join(cells) + " |\n")
    for cpu, runs in cpus.items():
        f.write("\ncpu: %s%s\n" % (cpu, "" if len(cpus) == 1 else " (" + ", ".join(runs) + ")"))
with open(os.path.join(out, "ppl.dat"), "w") as f:
    for name, pts in blocks:
        f.write('"%s"\n' % name)
        for t, p in pts:
            f.write("%d %.4f\n" % (t, p))
        f.write("\n\n")
print(open(os.path.join(out, "table.md")).read(), end="")
EOF

if command -v gnuplot >/dev/null 2>&1; then
    n=$(grep -c '^"' "$out/ppl.dat")
    gnuplot <<EOF
set terminal pngcairo size 900,600 noenhanced
set output "$out/table1.png"
set title "Brown, 4 nodes vs 1: validation perplexity (node 0's model after each epoch)"
set xlabel "training tokens, all nodes"
set ylabel "validation perplexity"
set key outside right
set grid
# one colour per series (gnuplot's default cycle has 8, fewer than the rows of table 1),
# and a point shape of its own, so that print in grey tells them apart too
colours = "#1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b #e377c2 #17becf #7f7f7f #bcbd22 #000000 #aec7e8"
plot for [i=0:$((n - 1))] "$out/ppl.dat" index i using 1:2 with linespoints \
    lc rgb word(colours, i % 12 + 1) pt (i % 13 + 1) title columnheader(1)
EOF
    echo "bench_table1.sh: plot in $out/table1.png"
else
    echo "bench_table1.sh: gnuplot not found (Debian: apt-get install gnuplot-nox); no plot" >&2
fi
