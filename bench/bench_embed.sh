#!/usr/bin/env bash
# bench_embed.sh: the embedding exchange on Brown: bytes on the wire per step and peak
# resident memory per node for n = 2, 4, 8 nodes and two batch sizes, the Zipf-unique
# exchange (sync.exchange unique) against the dense one, in gossip-BMUF and in
# allreduce mode (where the allgather baseline runs too); then the time per step of
# the 4-node runs of every mode.
#
#   bench/bench_embed.sh [--nodes LIST] [--batches LIST] [--steps N] [--out DIR] [--keep]
#                        [--tables-only]
#
#   --nodes LIST    node counts (default "2 4 8")
#   --batches LIST  B, streams per node (default "8 32"); T = 20, so a node sees
#                   K = 20 B tokens a step
#   --steps N       training steps per run (default 16; gossip syncs the embeddings
#                   every 4)
#   --out DIR       put run dirs and logs here (default: a temp dir)
#   --keep          keep the outputs (default: removed at exit; all of them take
#                   about 5 GB: every node writes its checkpoint and model)
#   --tables-only   run nothing: print the tables of the runs already in --out DIR
#                   (made with --keep and the same --nodes, --batches, --steps)
#   -h, --help      this text
#
# Model: vocabulary 10,000 + <unk> + <eos>, embedding D = 256, one LSTM of 128,
# sampled softmax with 512 negatives (seed groups: the default, zipf), SGD. Figures
# are node 0's sync counters (payload bytes sent, row counts) from metrics.jsonl: the
# trainer must report the touched rows to the sync (sl_sync_note_model) and print the
# per-component lines of allreduce mode (rows; the step's bytes are on its "gradients"
# line, since every shard goes with the rest of the gradient in one exchange). Environment: SHOAL (the binary, default
# <repo>/build/shoal), SHOAL_DATA (corpora, default <repo>/../shared/data). Figures
# only: it never fails on a figure; it exits non-zero when a run fails. The first line
# names the CPU the runs were made on.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "bench_embed.sh: $*" >&2
    exit 1
}

nodes_list="2 4 8"
batches="8 32"
steps=16
out=""
keep=0
tables_only=0
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) [ $# -ge 2 ] || die "--nodes needs a value"; nodes_list=$2; shift 2 ;;
        --nodes=*) nodes_list=${1#*=}; shift ;;
        --batches) [ $# -ge 2 ] || die "--batches needs a value"; batches=$2; shift 2 ;;
        --batches=*) batches=${1#*=}; shift ;;
        --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
        --steps=*) steps=${1#*=}; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --keep) keep=1; shift ;;
        --tables-only) tables_only=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
nodes_list=${nodes_list//,/ }
batches=${batches//,/ }
for v in $nodes_list; do
    [[ $v =~ ^[1-9][0-9]*$ ]] && [ "$v" -ge 2 ] || die "--nodes wants integers >= 2, got '$v'"
done
for v in $batches; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || die "--batches wants positive integers, got '$v'"
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps wants a positive integer, got '$steps'"
[ -n "$nodes_list" ] && [ -n "$batches" ] || die "empty --nodes or --batches"
if [ "$tables_only" = 1 ]; then
    [ -n "$out" ] && [ -d "$out" ] || die "--tables-only needs the --out DIR of a --keep run"
    keep=1
fi
[ "$tables_only" = 1 ] || [ -x "$shoal" ] ||
    die "shoal binary not found at $shoal (build it, or set SHOAL)"
[ -d "$data" ] || die "corpus folder $data not found (set SHOAL_DATA)"
data=$(cd "$data" && pwd)
py=$(command -v python3) || die "python3 is needed to read the JSON"

made_out=0
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/shoal-embed.XXXXXX")
    made_out=1
elif [ ! -d "$out" ]; then
    mkdir -p "$out"
    made_out=1
fi
out=$(cd "$out" && pwd)
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    if [ "$keep" = 1 ]; then
        echo "outputs kept in $out" >&2
    elif [ "$made_out" = 1 ]; then
        rm -rf "$out"
    else
        rm -rf "$out"/embed-* "$out"/cache "$out"/cpu
    fi
}
trap cleanup EXIT

bptt=20
# mode name -> sync settings
modes="gossip-unique gossip-dense allreduce-unique allreduce-allgather allreduce-dense"
sync_of() {
    case $1 in
        gossip-unique) echo "{algorithm: gossip-bmuf, period: 4, embedding_period: 4, exchange: unique}" ;;
        gossip-dense) echo "{algorithm: gossip-bmuf, period: 4, embedding_period: 4, exchange: dense}" ;;
        allreduce-unique) echo "{algorithm: allreduce, exchange: unique}" ;;
        allreduce-allgather) echo "{algorithm: allreduce, exchange: allgather}" ;;
        allreduce-dense) echo "{algorithm: allreduce, exchange: dense}" ;;
    esac
}

run_one() { # n B mode
    local n=$1 b=$2 mode=$3 dir="$out/embed-$3-n$1-b$2"
    rm -rf "$dir"
    if ! "$shoal" run "$top/conf/brown-sampled.yaml" -n "$n" --quiet --no-resume \
        --set "run.dir=$dir" --set run.threads=1 --set run.log_every=$steps \
        --set run.checkpoint_every=0 \
        --set "data.train=$data/brown/train.txt" --set 'data.valid=""' --set 'data.test=""' \
        --set "data.cache_dir=$out/cache" \
        --set "model.layers=[{lstm: 128}]" --set model.output.samples=512 \
        --set "train.batch=$b" --set "train.bptt=$bptt" --set "train.max_steps=$steps" \
        --set train.eval_every_epoch=false \
        --set "sync=$(sync_of "$mode")" >"$dir.log" 2>&1; then
        tail -n 20 "$dir.log" >&2
        die "run $mode n=$n B=$b failed (log: $dir.log)"
    fi
}

# the machine of the runs, for the tables (--tables-only prints the one they were made on)
[ "$tables_only" = 1 ] || bench_cpu >"$out/cpu"
echo "# cpu: $(cat "$out/cpu" 2>/dev/null || echo "not recorded with these runs")"

for n in $nodes_list; do
    [ "$tables_only" = 0 ] || break
    for b in $batches; do
        for mode in $modes; do
            echo "running $mode, $n nodes, B=$b ..." >&2
            run_one "$n" "$b" "$mode"
        done
    done
done

"$py" - "$out" "$bptt" "$steps" "$nodes_list" "$batches" <<'EOF'
import json, os, sys

out, bptt, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nodes = [int(v) for v in sys.argv[4].split()]
batches = [int(v) for v in sys.argv[5].split()]
D = 256  # input embedding width of brown-sampled.yaml

def run_dir(mode, n, b):
    return os.path.join(out, "embed-%s-n%d-b%d" % (mode, n, b))

def sync_lines(mode, n, b, rank=0):
    """Last sync line of each component of a node."""
    last = {}
    with open(os.path.join(run_dir(mode, n, b), "node-%d" % rank, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if d.get("event") == "sync":
                last[d["component"]] = d
    return last

def table(prefix, mode, n, b):
    """bytes sent per step, rows per round of the embedding.* (input) or softmax.*."""
    lines = sync_lines(mode, n, b)
    got = [d for c, d in lines.items() if c.startswith(prefix + ".")]
    if not got:
        return None
    sent = sum(d["sent_bytes"] for d in got)
    rounds = max(d["rounds"] for d in got)
    own = sum(d.get("rows_own", 0) for d in got) / max(rounds, 1)
    merged = sum(d.get("rows_merged", 0) for d in got) / max(rounds, 1)
    return {"sent": sent / steps, "own": own, "merged": merged, "rounds": rounds}

def peak_rss_mb(mode, n, b):
    """The largest peak RSS of nodes 1 .. n-1: node 0 of a gossip run also gathers every
    node's final model, which is not the exchange."""
    most = 0
    for r in range(1, n):
        with open(os.path.join(run_dir(mode, n, b), "node-%d" % r, "summary.json")) as f:
            most = max(most, json.load(f)["peak_rss_kb"])
    return most / 1024.0

def kb(v):
    return "n/a" if v is None else "%.1f" % (v / 1024.0)

def show(rows):
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        print("  ".join(str(c).rjust(w[i]) for i, c in enumerate(r)))
        if j == 0:
            print("  ".join("-" * x for x in w))

def step_bytes(mode, n, b):
    """Bytes node 0 sent per step in allreduce mode: the "gradients" line holds the whole
    step's exchange (by rows, every shard's counts, rows and values with the LSTM's and
    the softmax bias's gradients, in three collectives)."""
    d = sync_lines(mode, n, b).get("gradients")
    return None if d is None else d["sent_bytes"] / steps

# allreduce mode: rows per step of the two shards and the bytes of the whole step
print("\nallreduce mode: rows a step of the input embedding (D = %d, K = B x T tokens a "
      "node) and\nthe output embedding (targets + 512 negatives, d = 128), and KiB sent "
      "per step by node 0\nfor the whole gradient" % D)
rows = [["n", "B", "K", "in U_i", "in U_g", "out U_i", "out U_g", "dense", "allgather",
         "unique", "unique/dense"]]
for n in nodes:
    for b in batches:
        K = b * bptt
        ui = table("embedding", "allreduce-unique", n, b)
        uo = table("softmax", "allreduce-unique", n, b)
        dense, gath, uniq = (step_bytes(m, n, b) for m in
                             ("allreduce-dense", "allreduce-allgather", "allreduce-unique"))
        if ui is None or uo is None:
            rows.append([n, b, K] + ["n/a"] * 8)
            continue
        rows.append([n, b, K, "%.0f" % ui["own"], "%.0f" % ui["merged"], "%.0f" % uo["own"],
                     "%.0f" % uo["merged"], kb(dense), kb(gath), kb(uniq),
                     "%.3f" % (uniq / dense) if uniq and dense else "n/a"])
show(rows)
print("The LSTM's and the softmax bias's gradients go whole in every mode; dense sums the\n"
      "two V x D shards whole too, allgather gathers every node's deduplicated rows (what\n"
      "Horovod and TensorFlow do, less their duplicates), unique sums the union.")

for prefix, what in (("embedding", "input embedding"), ("softmax", "output embedding")):
    print("\n%s, gossip-BMUF (embeddings synced every 4 steps): KiB sent per step by "
          "node 0" % what)
    rows = [["n", "B", "rows/sync own", "rows/sync merged", "dense", "unique",
             "unique/dense"]]
    for n in nodes:
        for b in batches:
            u = table(prefix, "gossip-unique", n, b)
            d = table(prefix, "gossip-dense", n, b)
            if u is None or d is None:
                rows.append([n, b] + ["n/a"] * 5)
                continue
            rows.append([n, b, "%.0f" % u["own"], "%.0f" % u["merged"], kb(d["sent"]),
                         kb(u["sent"]), "%.3f" % (u["sent"] / d["sent"] if d["sent"] else 0)])
    show(rows)

print("\npeak RSS per node (MiB, the largest of nodes 1 .. n-1; node 0 of a gossip run "
      "also gathers\nthe final models)")
modes = ["gossip-dense", "gossip-unique", "allreduce-dense", "allreduce-allgather",
         "allreduce-unique"]
rows = [["n", "B"] + modes]
for n in nodes:
    for b in batches:
        rows.append([n, b] + ["%.0f" % peak_rss_mb(m, n, b) for m in modes])
show(rows)

n4 = 4 if 4 in nodes else nodes[len(nodes) // 2]
b4 = batches[-1]
print("\ntime per step, %d nodes, B=%d (node 0: train time incl. sync / steps; the "
      "machine is shared, so these are noisy)" % (n4, b4))
rows = [["mode", "ms/step", "of which sync"]]
for m in modes:
    with open(os.path.join(run_dir(m, n4, b4), "node-0", "summary.json")) as f:
        s = json.load(f)
    rows.append([m, "%.1f" % (1000 * s["train_time_s"] / s["steps"]),
                 "%.1f" % (1000 * s["sync_time_s"] / s["steps"])])
show(rows)
EOF
