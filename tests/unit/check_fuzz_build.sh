#!/bin/sh
# `make fuzz` builds every libFuzzer target (tests/fuzz/Makemodule.am): each target's
# files exist, compile with clang and the sanitizers, and link, so that a fuzzing
# session starts by fuzzing. Skipped (77) without clang, which libFuzzer comes with.
# Usage: check_fuzz_build.sh   (SHOAL_BUILDDIR: the build folder, default ../..)
build=${SHOAL_BUILDDIR:-../..}
[ -f "$build/Makefile" ] || { echo "check_fuzz_build: $build/Makefile: no build here" >&2; exit 99; }
if ! command -v clang >/dev/null 2>&1; then
    echo "check_fuzz_build: no clang: make fuzz not tried"
    exit 77
fi
log=$(mktemp "${TMPDIR:-/tmp}/shoal-check-fuzz-XXXXXX") || exit 99
trap 'rm -f "$log"' EXIT
if ! make -s -C "$build" fuzz >"$log" 2>&1; then
    tail -n 30 "$log"
    echo "check_fuzz_build: make fuzz failed"
    echo "0%: Checks: 1, Failures: 1, Errors: 0"
    exit 1
fi
echo "100%: Checks: 1, Failures: 0, Errors: 0"
