#!/usr/bin/env bash
# accuracy_corpora.sh: builds the word-level corpora that bench_accuracy.sh trains on
# besides Brown, with train/valid/test splits, into a cache directory outside the tree
# (the text comes from ../shared/data; nothing is copied into the repository). Each
# corpus is DIR/NAME/{train,valid,test}.txt in Brown's format: tokens separated by
# single spaces, one sentence (or line) a line.
#
#   bench/accuracy_corpora.sh [--dir DIR] [--list] [--print-dir]
#
#   --dir DIR   where the corpora go (default $XDG_CACHE_HOME/shoal/corpora, else
#               ~/.cache/shoal/corpora, else /tmp/shoal-corpora); a corpus whose three
#               files are there already is kept
#   --list      print the corpora and what they are, and exit
#   --print-dir print the directory the corpora go to, and exit
#   -h, --help  this text
#
# The corpora (contiguous splits: the first 90% of the lines train, the next 5% are
# valid, the last 5% test; whole scenes and documents are held out, not random lines):
#   shakespeare-word  tinyshakespeare (the char-rnn text) at word level: words (with
#                     inner apostrophes: "tis", "o'er") and each punctuation mark are
#                     tokens, every non-blank line is a sentence; about 0.26M training
#                     tokens, the small corpus
#   brown-half        the second half of Brown's training documents (lines 26071 to
#                     52141 of brown/train.txt) on its own, as a corpus of a different
#                     size (about 0.47M training tokens) and genre mix than Brown's
#                     whole 450 documents; not held out from Brown's training split, so
#                     use it to compare runs on it, not to test models trained on Brown
# Environment: SHOAL_DATA (the shared corpora, default <repo>/../shared/data).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
data=${SHOAL_DATA:-$top/../shared/data}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "accuracy_corpora.sh: $*" >&2
    exit 1
}

default_dir() {
    if [ -n "${XDG_CACHE_HOME:-}" ]; then
        echo "$XDG_CACHE_HOME/shoal/corpora"
    elif [ -n "${HOME:-}" ] && [ -d "$HOME" ] && [ -w "$HOME" ]; then
        echo "$HOME/.cache/shoal/corpora"
    else
        echo /tmp/shoal-corpora
    fi
}

dir=$(default_dir)
print_dir=0
while [ $# -gt 0 ]; do
    case $1 in
    --dir) [ $# -ge 2 ] || die "--dir needs a directory"; dir=$2; shift 2 ;;
    --list) sed -n '/^# The corpora/,/^# Environment/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --print-dir) print_dir=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[ "$print_dir" = 0 ] || { echo "$dir"; exit 0; }
case $(cd "$(dirname "$dir")" 2>/dev/null && pwd)/ in
"$top"/*) die "--dir $dir is inside the repository; the corpora go outside it" ;;
esac

# Splits the lines of stdin into $1/{train,valid,test}.txt: the first 90% to train, then
# 5% valid, the rest test. Writes to temporaries first, so a stopped build leaves none.
split_lines() {
    local out=$1 tmp
    tmp=$(mktemp -d "$dir/.split.XXXXXX")
    cat >"$tmp/all.txt"
    awk -v d="$tmp" '{ line[NR] = $0 }
        END {
            a = int(NR * 0.9); b = int(NR * 0.95)
            for (i = 1; i <= NR; i++)
                print line[i] > (d "/" (i <= a ? "train" : i <= b ? "valid" : "test") ".txt")
        }' "$tmp/all.txt"
    rm -f "$tmp/all.txt"
    mkdir -p "$out"
    mv "$tmp"/train.txt "$tmp"/valid.txt "$tmp"/test.txt "$out"/
    rmdir "$tmp"
}

# Words with their inner apostrophes, and each other non-space character, as tokens.
shakespeare_word() {
    local src=$data/tinyshakespeare/input.txt
    [ -r "$src" ] || die "cannot read $src (set SHOAL_DATA)"
    python3 -c '
import re, sys
tok = re.compile(r"[A-Za-z0-9]+(?:'"'"'[A-Za-z]+)*|[^\sA-Za-z0-9]")
for line in sys.stdin:
    t = tok.findall(line)
    if t:
        print(" ".join(t))
' <"$src"
}

brown_half() {
    local src=$data/brown/train.txt
    [ -r "$src" ] || die "cannot read $src (set SHOAL_DATA)"
    sed -n '26071,52141p' "$src"
}

mkdir -p "$dir"
for name in shakespeare-word brown-half; do
    if [ -s "$dir/$name/train.txt" ] && [ -s "$dir/$name/valid.txt" ] && [ -s "$dir/$name/test.txt" ]; then
        echo "$name: kept $dir/$name"
        continue
    fi
    case $name in
    shakespeare-word) shakespeare_word | split_lines "$dir/$name" ;;
    brown-half) brown_half | split_lines "$dir/$name" ;;
    esac
    printf '%s:' "$name"
    for s in train valid test; do
        printf ' %s %s tokens,' "$s" "$(wc -w <"$dir/$name/$s.txt")"
    done
    echo " in $dir/$name"
done
