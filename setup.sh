#!/usr/bin/env bash
# shoal quick start: install what the build needs, build out of tree in build/, then
# either run the main job (train on Brown) or run the whole test suite.
#
#   ./setup.sh run  [CORPUS_DIR]   build, then train conf/brown-4nodes-gossip-bmuf.yaml:
#                                  4 gossip-BMUF nodes on this machine, on CORPUS_DIR
#                                  (default ../shared/data/brown)
#   ./setup.sh test                build, then make check (the whole test suite)
#   ./setup.sh build               build only
set -euo pipefail

top=$(cd "$(dirname "$0")" && pwd)
cd "$top"

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
}

# Debian/Ubuntu packages the build and the tests need (gnuplot-nox: shoal plot draws its
# PNG in the tests too, not only its script).
packages=(build-essential autoconf automake pkg-config libzmq3-dev libsodium-dev libyaml-dev check
          libsubunit-dev libopenblas-dev iproute2 gnuplot-nox)

install_packages() {
    local missing=() p
    command -v dpkg-query >/dev/null 2>&1 || return 0   # not Debian: trust configure
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: missing packages; run this, then setup.sh again:" >&2
        echo "  sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "setup.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
}

build() {
    install_packages
    if [ ! -x configure ] || [ configure.ac -nt configure ]; then
        autoreconf -fi
    fi
    mkdir -p build
    if [ ! -f build/Makefile ]; then
        # _FORTIFY_SOURCE: glibc's checks of buffer sizes at run time, which some
        # distributions' compilers turn on by default and Debian's does not
        (cd build && ../configure --enable-werror \
            CFLAGS="${CFLAGS:--g -O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=3}")
    fi
    make -C build -j"$(nproc)"
}

# One closing line over every Check case run: "tests: N passed, N failed, N skipped".
summarize_tests() {
    local checks=0 bad=0 died=0 skipped=0 log line
    for log in build/tests/unit/*.log build/tests/fuzz/*.log build/tests/net/*.log; do
        [ -f "$log" ] || continue
        line=$(grep -E '^[0-9]+%: Checks: ' "$log" | tail -n 1) || true
        if [ -z "$line" ]; then
            # no Check summary: a skipped program (exit 77), or one that died before it
            grep -q '^:test-result: SKIP' "${log%.log}.trs" 2>/dev/null && skipped=$((skipped + 1))
            grep -qE '^:test-result: (FAIL|ERROR)' "${log%.log}.trs" 2>/dev/null && died=$((died + 1))
            continue
        fi
        set -- $(echo "$line" | sed -E 's/.*Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+).*/\1 \2 \3/')
        checks=$((checks + $1)); bad=$((bad + $2 + $3))
    done
    echo "tests: $((checks - bad)) passed, $((bad + died)) failed, $skipped skipped"
}

cmd=${1:-}
case "$cmd" in
run)
    corpus=${2:-../shared/data/brown}
    for f in train valid test; do
        [ -r "$corpus/$f.txt" ] || { echo "setup.sh: $corpus/$f.txt: not readable" >&2; exit 1; }
    done
    build
    exec build/shoal run conf/brown-4nodes-gossip-bmuf.yaml \
        --set data.train="$corpus/train.txt" --set data.valid="$corpus/valid.txt" \
        --set data.test="$corpus/test.txt"
    ;;
test)
    build
    status=0
    make -C build check VERBOSE=1 || status=$?
    summarize_tests
    exit $status
    ;;
build)
    build
    ;;
-h|--help|help)
    usage
    ;;
*)
    usage >&2
    exit 2
    ;;
esac
