#!/usr/bin/env bash
# netlab's check (issue 15): emulated hosts are what tests/net/netlab says (namespaces,
# hostnames, addresses only inside them, a tbf rate limit on each link, down removes
# them), and a 4-host gossip-BMUF run over TCP under a 200mbit limit trains and
# averages exactly like the same 4 nodes on loopback: the run's model.bin and every
# node's are the same bits (all but the time they took). The nodes' offers of shared-memory lanes between emulated
# hosts are refused as another host's. Nothing is left behind: no namespace, no link
# or address in this machine's namespace, no process. Exit 77 (skip) with the reason
# where network namespaces cannot be made; one Check-style line at the end for
# setup.sh's count.
set -u

me=check_netlab
src=${SHOAL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
shoal=${SHOAL_BUILDDIR:-.}/shoal
data=${SHOAL_DATA:-$src/../shared/data}
netlab=$src/tests/net/netlab
checks=0 failures=0

skip() {
    echo "$me: $*"
    exit 77
}

# One check: $1 says what, the rest is the command that must succeed.
check() {
    local what=$1
    shift
    checks=$((checks + 1))
    if ! "$@"; then
        failures=$((failures + 1))
        echo "$me: FAIL: $what"
    fi
}

[ -x "$shoal" ] || skip "$shoal: not built"
[ -r "$data/brown/train.txt" ] || skip "$data/brown/train.txt: no corpus (SHOAL_DATA)"
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (running as uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no ip command (install iproute2)"
command -v tc >/dev/null 2>&1 || skip "no tc command (install iproute2)"

tmp=$(mktemp -d /tmp/shoal-check-netlab-XXXXXX) || exit 99
prefix=ckn-$$
# whatever happens: our hosts go (netlab down touches no other prefix), then the files
trap '"$netlab" down "$prefix"; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

# What of ours is visible from this machine's namespace: namespaces of our prefix,
# addresses of the benchmarking range, processes whose command line names $tmp.
leftovers() {
    ip netns list | grep -E "^$prefix-" || true
    ip -o addr show | grep -E ' 198\.1[89]\.' || true
    # shellcheck disable=SC2009 # pgrep -f would match this shell's own command line
    ps -eo pid=,args= | grep -F "$tmp/" | grep -v -e grep -e "$me" || true
}
nothing_left() {
    local left
    left=$(leftovers)
    [ -z "$left" ] || { echo "$me: left behind: $left"; return 1; }
}

# ---------------------------------------------------------------- the hosts
probe=$("$netlab" up 1 --name "$prefix-probe" 2>&1)
status=$?
[ $status -ne 77 ] || skip "$probe"
[ $status -eq 0 ] || { echo "$me: netlab up: $probe"; exit 1; }
"$netlab" down "$prefix-probe"

check "nothing of ours before" nothing_left
lab=$("$netlab" up 2 --rate 200mbit --name "$prefix")
check "up prints its prefix" test "$lab" = "$prefix"
check "host 1's hostname" test "$("$netlab" exec "$prefix" 1 hostname)" = "$prefix-h1"
check "the machine's hostname stays" test "$(hostname)" != "$prefix-h1"
check "host 1's address" test "$("$netlab" exec "$prefix" 1 ip -4 -o addr show dev eth0 |
    awk '{print $4}')" = "$("$netlab" addr 1)/15"
check "host 1's link is rate limited" \
    grep -q "tbf .* rate 200Mbit" <<<"$("$netlab" exec "$prefix" 1 tc qdisc show dev eth0)"
# a bucket of a few frames held fast links far below their rate: 1 ms of it, both ends
check "host 1's bucket is 1 ms of the rate" \
    grep -q "rate 200Mbit burst 25000b" <<<"$("$netlab" exec "$prefix" 1 tc qdisc show dev eth0)"
check "host 1's bridge port has that bucket too" \
    grep -q "rate 200Mbit burst 25000b" <<<"$(ip netns exec "$prefix-br" tc qdisc show dev h1)"
# host 0 reaches host 1 through the bridge: refused (nothing listens), not unreachable
check "host 0 reaches host 1" grep -q "Connection refused" <<<"$("$netlab" exec "$prefix" 0 \
    bash -c "exec 3<>/dev/tcp/$("$netlab" addr 1)/9" 2>&1)"
check "no address of the range in this namespace" test -z "$(ip -o addr show | grep ' 198\.1[89]\.')"
check "a prefix taken is refused" test "$("$netlab" up 1 --name "$prefix" 2>&1)" = \
    "netlab: $prefix: hosts of that name exist already (netlab down $prefix)"
"$netlab" down "$prefix"
check "down removes the hosts" nothing_left

# ---------------------------------------------------------------- a run over them
# The tiny model of tests/unit on 4 x 2000 tokens: 1 epoch of 62 steps per node, a
# gossip-BMUF sync every 4 steps. Timeouts far beyond any wait: a peer left out of an
# average would change the bits (a guard, not a timing).
conf=$tmp/lab.yaml
cat >"$conf" <<EOF
run: {name: lab, dir: $tmp/lab, log_every: 10, checkpoint_every: 0}
data: {train: $data/brown/train.txt, vocab_size: 500, max_tokens: 8000,
       cache_dir: $tmp/cache}
model: {embedding: 16, layers: [{lstm: 16}]}
train: {batch: 4, bptt: 8, epochs: 1, eval_every_epoch: false,
        optimizer: {type: adam, lr: 0.01, clip: 1}}
cluster: {nodes: 4, rendezvous_timeout_ms: 60000, timeout_ms: 120000}
sync: {algorithm: gossip-bmuf, period: 4, neighbours: 1}
EOF
key=$tmp/lab.key
"$shoal" keygen "$key" >/dev/null || exit 99

# on loopback: shoal run's 4 nodes over tcp on 127.0.0.1, no shared memory
check "the loopback run (log: $tmp/loop.log)" timeout 300 "$shoal" run "$conf" \
    --transport tcp --quiet --set run.dir="$tmp/loop" --set cluster.shared_memory=false \
    >"$tmp/loop.log" 2>&1
# on 4 emulated hosts, shared memory on as by default: the lanes must be refused
SHOAL=$shoal SHOAL_LOG=debug timeout 300 "$netlab" run 4 --rate 200mbit --name "$prefix" \
    --logs "$tmp/logs" -- "$conf" --quiet --set cluster.key_file="$key" --set run.dir="$tmp/lab"
status=$?
check "the netlab run (status $status, logs above)" test $status -eq 0
[ $status -eq 0 ] || tail -n 5 "$tmp"/logs/host-*.log

# Whether model files $1 and $2 are the same bits but for the wall-clock train time
# (header bytes 184..191, src/node/sl_checkpoint.h) and the checksum that covers it.
same_model() {
    local size
    size=$(stat -c %s "$1" "$2") || return 1
    # shellcheck disable=SC2086 # two sizes, one a line
    set -- "$1" "$2" $size
    [ "$3" -gt 200 ] && [ "$3" -eq "$4" ] &&
        cmp <(head -c 184 "$1") <(head -c 184 "$2") &&
        cmp <(tail -c +193 "$1" | head -c -8) <(tail -c +193 "$2" | head -c -8)
}
for f in model.bin node-0/model.bin node-1/model.bin node-2/model.bin node-3/model.bin; do
    check "$f: the same bits on loopback and on emulated hosts" \
        same_model "$tmp/loop/$f" "$tmp/lab/$f"
done
check "the run's model differs from a node's (it is an average)" \
    bash -c "! cmp -s '$tmp/lab/model.bin' '$tmp/lab/node-0/model.bin'"
check "lane offers refused as another host's" \
    grep -q "another network namespace" "$tmp/logs/host-0.log"
check "nothing of ours after the run" nothing_left

# ---------------------------------------------------------------- teardown, pass or fail
# Nodes that fail (a key netlab passes on that shoal refuses): their status, one line
# each, and nothing left.
out=$(SHOAL=$shoal timeout 120 "$netlab" run 2 --name "$prefix" -- "$conf" \
    --set cluster.nosuchkey=1 2>&1)
status=$?
check "failed nodes: netlab run's status is theirs (2, not $status)" test $status -eq 2
check "failed nodes: one line for each" test "$(grep -c '^netlab: host [01]: shoal node' \
    <<<"$out")" -eq 2
check "nothing of ours after failed nodes" nothing_left
# TERM to netlab run while its nodes train: passed on (each saves a checkpoint and
# stops), then the hosts go. A node whose gossip peer stopped first waits for it up to
# cluster.timeout_ms: a short one here, well within netlab's grace before it kills.
SHOAL=$shoal "$netlab" run 4 --rate 200mbit --name "$prefix" --logs "$tmp/logs-term" -- \
    "$conf" --set train.epochs=100000 --set cluster.timeout_ms=3000 \
    --set cluster.key_file="$key" --set run.dir="$tmp/term" >/dev/null 2>&1 &
lab_pid=$!
# until every node has trained a few steps: its first report is in its metrics.jsonl
# (the deadline is a hang guard, not a timing)
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
    n=0
    for i in 0 1 2 3; do
        grep -qs '"step"' "$tmp/term/node-$i/metrics.jsonl" && n=$((n + 1))
    done
    [ $n -lt 4 ] || break
    sleep 0.05
done
kill -TERM $lab_pid
wait $lab_pid
status=$?
check "TERM: netlab run exits 143 (not $status)" test $status -eq 143
for i in 0 1 2 3; do
    check "TERM: node $i saved its checkpoint" test -s "$tmp/term/node-$i/checkpoint.bin"
done
check "nothing of ours after TERM" nothing_left

echo "$(((checks - failures) * 100 / checks))%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures -eq 0 ]
