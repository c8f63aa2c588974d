#!/bin/sh
# The release tarball holds the whole source: `make distdir` of this build (what
# `make dist` packs, and what Spack and users of a release build from) has every file
# git tracks, but for git's own and m4/.keep, and no built file of ours (.o, .deps).
# A file added without its EXTRA_DIST or _SOURCES line fails here, not on a cluster.
# Skipped (77) outside a git checkout or without git.
# Usage: check_dist.sh   (SHOAL_BUILDDIR: the build folder, default ../..; SHOAL_SRCDIR:
# the source tree, default the build's)
build=${SHOAL_BUILDDIR:-../..}
[ -f "$build/Makefile" ] || { echo "check_dist: $build/Makefile: no build here" >&2; exit 99; }
top=${SHOAL_SRCDIR:-$build/..}
# (make distcheck's unpacked tarball may lie inside a checkout: it is not one itself)
if ! command -v git >/dev/null 2>&1 ||
    [ "$(git -C "$top" rev-parse --show-toplevel 2>/dev/null)" != "$(cd "$top" && pwd -P)" ]; then
    echo "check_dist: $top is not the top of a git checkout (or no git): skipped"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shoal-check-dist-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
if ! make -s -C "$build" distdir distdir="$tmp/shoal" >"$tmp/distdir.log" 2>&1; then
    cat "$tmp/distdir.log"
    echo "check_dist: make distdir failed"
    echo "0%: Checks: 1, Failures: 1, Errors: 0"
    exit 1
fi
git -C "$top" ls-files | grep -vxE '\.gitignore|m4/\.keep' | sort >"$tmp/tracked"
(cd "$tmp/shoal" && find . -type f | sed 's|^\./||' | sort) >"$tmp/packed"
checks=2 failures=0
missing=$(comm -23 "$tmp/tracked" "$tmp/packed")
if [ -n "$missing" ]; then
    failures=$((failures + 1))
    echo "check_dist: FAIL: tracked by git but not in the tarball (EXTRA_DIST?):"
    echo "$missing"
fi
built=$(grep -E '\.(o|a|Po|Plo)$|/\.deps/' "$tmp/packed")
if [ -n "$built" ]; then
    failures=$((failures + 1))
    echo "check_dist: FAIL: built files in the tarball:"
    echo "$built"
fi
echo "$((100 * (checks - failures) / checks))%: Checks: $checks, Failures: $failures, Errors: 0"
[ "$failures" -eq 0 ]
