#!/bin/sh
# Includes follow the layering (../shared/DESIGN.md): every project include names its
# folder from the include root (src/ and the top directory), and no folder includes one
# above it in
#   node -> sync -> {embed, transport, topology, model} -> {data, config} -> kernels -> common
# (tools/ and tests/ stand above node's library part and may include anything but node).
# Each source file is one check; a broken rule prints file:line and the include.
# Usage: check_includes.sh [SRCDIR]   (default $SHOAL_SRCDIR, else the current directory)
top=${1:-${SHOAL_SRCDIR:-.}}
cd "$top" || { echo "check_includes: $top: no such directory" >&2; exit 99; }

# level of a folder: a file may include its own level and the ones below
level() {
    case $1 in
    common) echo 0 ;;
    kernels) echo 1 ;;
    data | config) echo 2 ;;
    embed | transport | topology | model) echo 3 ;;
    sync) echo 4 ;;
    node) echo 5 ;;
    tools | tests | bench) echo 6 ;;
    *) echo "" ;;
    esac
}

checks=0 failures=0
for f in $(find src kernels topology tools tests bench -name '*.[ch]' -o -name '*.cu' | sort); do
    case $f in
    src/*) own=$(echo "$f" | cut -d/ -f2) ;;
    *) own=$(echo "$f" | cut -d/ -f1) ;;
    esac
    mine=$(level "$own")
    checks=$((checks + 1))
    bad=$(grep -n '^#include "' "$f" | while IFS= read -r line; do
        inc=$(echo "$line" | sed 's/^[0-9]*:#include "\([^"]*\)".*/\1/')
        case $inc in
        config.h) continue ;;                                    # autoconf's
        */*) ;;
        *) [ -f "$(dirname "$f")/$inc" ] && [ "$mine" = 6 ] && continue   # a test's helper
           echo "$f:${line%%:*}: \"$inc\" does not name its folder"; continue ;;
        esac
        dir=${inc%%/*}
        lv=$(level "$dir")
        if [ -z "$lv" ]; then
            echo "$f:${line%%:*}: \"$inc\": unknown folder $dir"
        elif [ "$dir" = node ] && { [ "$own" = tools ] || [ "$own" = bench ]; }; then
            echo "$f:${line%%:*}: \"$inc\": $own may not include node"
        elif [ "$lv" -gt "$mine" ]; then
            echo "$f:${line%%:*}: \"$inc\": $own may not include $dir (against the layering)"
        fi
    done)
    if [ -n "$bad" ]; then
        echo "$bad"
        failures=$((failures + 1))
    fi
done
[ "$checks" -gt 0 ] || { echo "check_includes: no source files under $top" >&2; exit 99; }
# Check's summary line, so that setup.sh's tally counts these checks
echo "$(( (checks - failures) * 100 / checks ))%: Checks: $checks, Failures: $failures, Errors: 0"
[ "$failures" -eq 0 ]
