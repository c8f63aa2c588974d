#!/usr/bin/env bash
# bench_embed_ppl.sh: what the embedding-exchange options cost in accuracy. Four nodes
# train the sampled-softmax word model (conf/brown-sampled.yaml: 1,024 negatives, SGD)
# in allreduce mode with the Zipf-unique exchange (the Baidu paper's set-up) on the same
# tokens, changing one thing at a time, and the validation perplexity of each final
# model is printed beside the reference run's:
#   seed groups   per-node, one, zipf (ceil(4^0.64) = 3 groups), log2 (2 groups), fp32
#   compression   fp16 with the automatic compression-scaling factor, fp16 without
#                 scaling (F = 1), bf16; seed groups zipf
# The reference is zipf in fp32 (the defaults); the same run with another seed shows how
# far perplexity moves by chance alone. The paper finds no loss beyond 1%.
#
#   bench/bench_embed_ppl.sh [--tokens N] [--out DIR]
#
#   --tokens N   training tokens of every run, all nodes together (data.max_tokens;
#                default 0: the whole training text, one epoch, about 5 minutes a run
#                on 2 cores)
#   --out DIR    run directories, logs and table.md (default runs/embed-ppl). Each
#                run's exact command line is kept in DIR/NAME.cmd; a finished run
#                (summary.json) is reused only when that line matches this
#                invocation's (same binary, corpus, --tokens); a run made with other
#                options, or before they were recorded, is deleted and run again
#   -h, --help   this text
#
# Environment: SHOAL (the binary, default <repo>/build/shoal), SHOAL_DATA (corpora,
# default <repo>/../shared/data). Figures only: it exits non-zero when a run fails,
# never on a perplexity.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "bench_embed_ppl.sh: $*" >&2
    exit 1
}

tokens=0
out=$top/runs/embed-ppl
while [ $# -gt 0 ]; do
    case $1 in
    --tokens) [ $# -ge 2 ] || die "--tokens needs a value"; tokens=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case $tokens in '' | *[!0-9]*) die "--tokens: expected a number of tokens, got '$tokens'" ;; esac
[ -x "$shoal" ] || die "no shoal binary at $shoal (run ./setup.sh test, or set SHOAL)"
[ -r "$data/brown/train.txt" ] || die "no Brown corpus under $data (set SHOAL_DATA)"
mkdir -p "$out"

# name | seed groups | compression | compression scale | seed
runs="zipf-fp32|zipf|fp32|0|1234
zipf-fp32-seed2|zipf|fp32|0|2
per-node-fp32|per-node|fp32|0|1234
one-fp32|one|fp32|0|1234
log2-fp32|log2|fp32|0|1234
zipf-fp16-auto|zipf|fp16|0|1234
zipf-fp16-unscaled|zipf|fp16|1|1234
zipf-bf16|zipf|bf16|0|1234"

while IFS='|' read -r name groups comp scale seed; do
    dir=$out/$name
    cmd=("$shoal" run "$top/conf/brown-sampled.yaml" -n 4 --no-resume
        --set "data.train=$data/brown/train.txt" --set "data.valid=$data/brown/valid.txt"
        --set "data.test=$data/brown/test.txt" --set "data.max_tokens=$tokens"
        --set sync.algorithm=allreduce --set sync.exchange=unique
        --set "embedding.seed_groups=$groups" --set "sync.compression=$comp"
        --set "sync.compression_scale=$scale" --set "run.seed=$seed"
        --set sync.keep_node_models=false
        --set train.eval_every_epoch=false --set run.checkpoint_every=0
        --set "run.dir=$dir")
    line=$(printf '%q ' "${cmd[@]}")
    if [ -f "$dir/summary.json" ] && [ -f "$out/$name.cmd" ] &&
        [ "$(cat "$out/$name.cmd")" = "$line" ]; then
        echo "== $name: done before with the same options"
        continue
    fi
    if [ -e "$dir" ]; then
        echo "== $name: $dir is unfinished or was made with other options; running it again"
        rm -rf "$dir"
    fi
    printf '%s\n' "$line" >"$out/$name.cmd"
    echo "== $name: started $(date '+%H:%M:%S')"
    "${cmd[@]}" >"$out/$name.log" 2>&1 || die "$name failed; see $out/$name.log"
    echo "== $name: $(tail -n 1 "$out/$name.log")"
done <<<"$runs"

python3 - "$out" <<'EOF'
import json, os, sys

out = sys.argv[1]
names = ["zipf-fp32", "zipf-fp32-seed2", "per-node-fp32", "one-fp32", "log2-fp32", "zipf-fp16-auto",
         "zipf-fp16-unscaled", "zipf-bf16"]
res = {}
for n in names:
    p = os.path.join(out, n, "summary.json")
    if os.path.exists(p):
        res[n] = json.load(open(p))
ref = res.get("zipf-fp32", {}).get("valid_ppl")
lines = ["| run | seed groups | values | valid ppl | vs zipf fp32 | tokens/s (all nodes) |",
         "| --- | --- | --- | --- | --- | --- |"]
for n in names:
    if n not in res:
        continue
    s = res[n]
    groups, values = n.split("-", 1) if not n.startswith("per-node") else ("per-node", n[9:])
    values = values.replace("-seed2", " (seed 2)")
    rel = "%+.2f%%" % (100 * (s["valid_ppl"] / ref - 1)) if ref else "-"
    tps = s.get("tokens_per_s", 0) * s.get("nodes", 1)
    lines.append("| %s | %s | %s | %.2f | %s | %.0f |" % (n, groups, values, s["valid_ppl"], rel, tps))
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
