#!/bin/sh
# The installed shoal, as a user of a cluster meets it: `make install DESTDIR=...` of
# this build, then from another directory: shoal --version, a tiny training of an
# installed example found by its bare name (brown-word.yaml) with --set data paths,
# every installed man page through `man -l` without warnings (where man exists), the
# modulefile (its paths, and read by tclsh where it exists), and `make uninstall`
# leaving no file behind.
# Usage: check_install.sh   (SHOAL_BUILDDIR: the build folder, default ../..)
build=${SHOAL_BUILDDIR:-../..}
[ -f "$build/Makefile" ] || { echo "check_install: $build/Makefile: no build here" >&2; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-check-install-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
checks=0 failures=0
ok() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); failures=$((failures + 1)); echo "check_install: FAIL: $*"; }

dest=$tmp/dest
if ! make -s -C "$build" install DESTDIR="$dest" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "check_install: make install DESTDIR=$dest failed"
    echo "0%: Checks: 1, Failures: 1, Errors: 0"
    exit 1
fi
bin=$(find "$dest" -path '*/bin/shoal' -type f | head -n 1)
[ -x "$bin" ] && ok || fail "no bin/shoal under $dest"
bindir=$(dirname "$bin")
root=$(dirname "$bindir") # DESTDIR + prefix

# another directory, with a small corpus of its own
work=$tmp/elsewhere
mkdir -p "$work" && cd "$work" || exit 99
awk 'BEGIN { for (l = 0; l < 600; l++) { s = ""; for (w = 0; w < 10; w++)
                 s = s (w ? " " : "") "w" ((l * 7 + w * 13) % 50); print s } }' >train.txt
head -n 60 train.txt >valid.txt

v=$("$bin" --version 2>&1)
case $v in "shoal "*) ok ;; *) fail "shoal --version said: $v" ;; esac

[ -f "$root/share/shoal/conf/brown-word.yaml" ] && ok ||
    fail "no example configurations under $root/share/shoal/conf"
"$bin" train brown-word.yaml --set data.train=train.txt --set data.valid=valid.txt \
    --set data.test= --set data.cache_dir="$work/cache" --set run.dir="$work/run" \
    --set model.embedding=8 --set 'model.layers=[{lstm: 8}]' --set train.batch=4 \
    --set data.vocab_size=40 --set train.bptt=5 --set train.max_steps=4 --quiet >"$tmp/train.out" 2>"$tmp/train.err"
st=$?
if [ $st -eq 0 ] && grep -q '^shoal: done: ' "$tmp/train.out" &&
    grep -q "using the installed example .*/share/shoal/conf/brown-word.yaml" "$tmp/train.err"; then
    ok
else
    fail "installed example: exit $st"
    cat "$tmp/train.out" "$tmp/train.err"
fi
[ -f "$work/run/model.bin" ] && ok || fail "no model.bin in $work/run"
"$bin" train no-such-example.yaml >/dev/null 2>"$tmp/missing.err"
st=$?
if [ $st -ne 0 ] && grep -q "no-such-example.yaml: no such file here, nor among the installed examples" "$tmp/missing.err"; then
    ok
else
    fail "a missing example: exit $st, $(cat "$tmp/missing.err")"
fi

# man pages: shoal(1) and the tools', and shoal-config(5) made from doc/config.md
pages=$(find "$root/share/man" -type f -name '*.[1-9]' | sort)
case $pages in *shoal-config.5*) ok ;; *) fail "no shoal-config.5 among: $pages" ;; esac
if command -v man >/dev/null 2>&1; then
    for page in $pages; do
        if MANWIDTH=80 man --warnings -l "$page" >"$tmp/page.txt" 2>"$tmp/page.err" &&
            [ ! -s "$tmp/page.err" ] && [ -s "$tmp/page.txt" ]; then
            ok
        else
            fail "man -l $page:"
            cat "$tmp/page.err"
        fi
    done
else
    echo "check_install: no man on PATH: the pages are not rendered"
fi

# the modulefile: PATH and MANPATH of this prefix
mod=$(find "$root/share/modulefiles/shoal" -type f 2>/dev/null | head -n 1)
if [ -n "$mod" ] && head -n 1 "$mod" | grep -q '^#%Module' &&
    grep -q "prepend-path PATH ${bindir#"$dest"}\$" "$mod"; then
    ok
else
    fail "modulefile ${mod:-missing} under $root/share/modulefiles/shoal"
fi
if [ -n "$mod" ] && command -v tclsh >/dev/null 2>&1; then
    got=$(printf '%s\n' 'proc module-whatis {args} {}' 'proc conflict {args} {}' \
        'proc prepend-path {var val} { puts "$var=$val" }' \
        'proc setenv {var val} { puts "$var=$val" }' "source {$mod}" | tclsh 2>&1)
    case $got in *"PATH=${bindir#"$dest"}"*"MANPATH="*) ok ;; *) fail "tclsh read the modulefile as: $got" ;; esac
fi

# make uninstall takes every file away again
make -s -C "$build" uninstall DESTDIR="$dest" >"$tmp/uninstall.log" 2>&1 || fail "make uninstall"
left=$(find "$dest" -type f | head -n 5)
[ -z "$left" ] && ok || fail "make uninstall left: $left"

echo "$(( (checks - failures) * 100 / checks ))%: Checks: $checks, Failures: $failures, Errors: 0"
[ "$failures" -eq 0 ]
