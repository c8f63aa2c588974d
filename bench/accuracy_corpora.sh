#!/usr/bin/env bash
# accuracy_corpora.sh: builds the word-level corpora that bench_accuracy.sh trains on
# besides Brown, with train/valid/test splits, into a cache directory outside the tree
# (the text comes from ../shared/data or from a Debian package; nothing is copied into
# the repository). Each corpus is DIR/NAME/{train,valid,test}.txt in Brown's format:
# tokens separated by single spaces, one sentence (or line) a line.
#
#   bench/accuracy_corpora.sh [--dir DIR] [--list] [--print-dir] [NAME]...
#
#   NAME        the corpora to build (default: every one below)
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
#   kjv               the King James Bible, a corpus held out from ../shared: Debian's
#                     bible-kjv-text, read with its `bible` program (package bible-kjv,
#                     installed when missing and run as root), tokenized as
#                     shakespeare-word, one verse a line, in the books' order (valid and
#                     test are the end of the New Testament); about 0.83M training
#                     tokens, the large corpus
#   kjv-nt            its New Testament alone (Matthew to Revelation, split the same
#                     way): about 0.19M training tokens, the smallest, and 6,237
#                     distinct words: bench_accuracy.sh needs --set data.vocab_size=6000
#                     or less there (conf/brown-word.yaml asks for 10,000)
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
names=()
all_names="shakespeare-word brown-half kjv kjv-nt"
while [ $# -gt 0 ]; do
    case $1 in
    --dir) [ $# -ge 2 ] || die "--dir needs a directory"; dir=$2; shift 2 ;;
    --list) sed -n '/^# The corpora/,/^# Environment/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --print-dir) print_dir=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *)
        case " $all_names " in *" $1 "*) ;; *) die "unknown corpus '$1' (known: $all_names)" ;; esac
        names+=("$1"); shift ;;
    esac
done
[ ${#names[@]} -gt 0 ] || read -r -a names <<<"$all_names"
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

# The lines of stdin as tokens: words with their inner apostrophes, and each other
# non-space character; lines with none are dropped.
tokenize_words() {
    python3 -c '
import re, sys
tok = re.compile(r"[A-Za-z0-9]+(?:'"'"'[A-Za-z]+)*|[^\sA-Za-z0-9]")
for line in sys.stdin:
    t = tok.findall(line)
    if t:
        print(" ".join(t))
'
}

shakespeare_word() {
    local src=$data/tinyshakespeare/input.txt
    [ -r "$src" ] || die "cannot read $src (set SHOAL_DATA)"
    tokenize_words <"$src"
}

# The words of the verses $1 (a `bible` range), tokenized as shakespeare-word. The
# Debian package is installed when missing (as root): bench runs only, never the build.
kjv_words() {
    if ! command -v bible >/dev/null 2>&1; then
        [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 ||
            die "kjv needs the 'bible' program: apt-get install bible-kjv"
        echo "accuracy_corpora.sh: installing bible-kjv" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv >/dev/null ||
            die "apt-get install bible-kjv failed"
    fi
    # -l: one verse a line at any width; the verses are "  N text", chapter titles
    # ("Genesis 1") and blank lines come between chapters
    bible -l1000000 "$1" | sed -n 's/^ *[0-9][0-9]* //p' | tokenize_words
}

brown_half() {
    local src=$data/brown/train.txt
    [ -r "$src" ] || die "cannot read $src (set SHOAL_DATA)"
    sed -n '26071,52141p' "$src"
}

mkdir -p "$dir"
for name in "${names[@]}"; do
    if [ -s "$dir/$name/train.txt" ] && [ -s "$dir/$name/valid.txt" ] && [ -s "$dir/$name/test.txt" ]; then
        echo "$name: kept $dir/$name"
        continue
    fi
    case $name in
    shakespeare-word) shakespeare_word | split_lines "$dir/$name" ;;
    brown-half) brown_half | split_lines "$dir/$name" ;;
    kjv) kjv_words gen1:1-rev22:21 | split_lines "$dir/$name" ;;
    kjv-nt) kjv_words mat1:1-rev22:21 | split_lines "$dir/$name" ;;
    esac
    printf '%s:' "$name"
    for s in train valid test; do
        printf ' %s %s tokens,' "$s" "$(wc -w <"$dir/$name/$s.txt")"
    done
    echo " in $dir/$name"
done
