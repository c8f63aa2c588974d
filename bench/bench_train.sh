#!/usr/bin/env bash
# bench_train.sh: training throughput and peak memory of shoal against PyTorch on the
# reference models (word: Brown full softmax, sampled: Brown sampled softmax, char:
# tinyshakespeare), at 1 and 2 threads, both sides run here one after the other.
# It prints the CPU model and what each side runs on it: shoal's build of its loops
# (x86-64 level) and OpenBLAS's kernel, PyTorch's ATen CPU capability and OpenBLAS's
# kernel (openblas_get_corename), and the BLAS threads each side really had. Beside
# tokens/s (wall clock) it reports CPU milliseconds per training step, which a loaded
# machine disturbs far less: each side also runs --short-steps steps, and the CPU time
# (user + system, all threads and child processes) of the short run is taken from the
# long one's: what is left is the steps between them, start-up and the end cancelled.
#
#   bench/bench_train.sh [--steps N] [--short-steps S] [--repeat R] [--models LIST]
#                        [--threads LIST] [--isa LIST] [--vocab N] [--out DIR] [--keep]
#   bench/bench_train.sh --epoch [--seed LIST] [--threads T] [--parallel] [--vocab N]
#                        [--out DIR] [--keep]
#
#   --steps N       training steps per run (default 60); tok/s counts training steps
#                   only: shoal's summary tokens_per_s, PyTorch after 3 warm-up steps
#   --short-steps S the short run of each side for CPU ms per step, which is
#                   (CPU s of the N-step run - CPU s of the S-step run) / (N - S);
#                   S < N (default 3: both sides' first, slower steps fall in
#                   both runs; none when N <= 3); 0: no short runs and no CPU table
#   --repeat R      run each side R times, alternating, and report each side's
#                   median run (default 1; the machine is shared, so figures are
#                   noisy; with R even, the lower of the two middle runs); CPU ms
#                   per step: the median of the R long-short pairs, each pair run
#                   one after the other
#   --models LIST   comma/space separated subset of: word sampled char (default all)
#   --threads LIST  thread counts (default "1 2")
#   --isa LIST      shoal once per build of its CPU loops, side by side (SHOAL_CPU_ISA:
#                   baseline, v3, v4; default: the one shoal picks, the highest
#                   this CPU runs); the tok/s ratio is the first one's against
#                   PyTorch, the CPU table has PyTorch's against each
#   --vocab N       the word and sampled models' vocabulary on both sides: the N most
#                   frequent Brown training words (default 10000, the configs'; Brown
#                   has 52,813 distinct words), to see how a larger output layer fares
#   --epoch         instead: one full epoch of the word model on both sides (2 threads
#                   each unless --threads says otherwise), then validation perplexity
#                   side by side (target: shoal within 3% of PyTorch)
#   --seed LIST     run.seed of shoal and --seed of PyTorch (default 1234); with
#                   --epoch a list runs every seed and compares the means: one epoch's
#                   perplexity moves by up to 10% from seed to seed, and even with the
#                   seed and thread count fixed
#   --parallel      with --epoch: both sides of a seed at once (on a 2-core machine,
#                   with --threads 1, about half the time)
#   --out DIR       put run dirs, logs and JSON here (default: a temp dir)
#   --keep          keep the outputs (default: removed at exit)
#   -h, --help      this text
#
# Environment: SHOAL (the binary, default <repo>/build/shoal), SHOAL_DATA (corpora,
# default <repo>/../shared/data), TORCH_PYTHON (default /usr/bin/python3, Debian's
# python3-torch). PyTorch runs with /usr/lib/x86_64-linux-gnu/openblas-pthread first in
# LD_LIBRARY_PATH and must have libopenblas mapped. Both sides run with OMP_NUM_THREADS
# and OPENBLAS_NUM_THREADS set to the thread count and OMP_WAIT_POLICY=PASSIVE (unless
# OMP_WAIT_POLICY is exported: GOMP's spinning workers starve OpenBLAS's threads when
# all cores are in use); a side whose BLAS ran another thread count is flagged. An
# exported OPENBLAS_CORETYPE reaches both sides alike. Figures only: it never fails on speed or perplexity; it exits
# non-zero when a run fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/bench_lib.sh
. "$top/bench/bench_lib.sh"
shoal=${SHOAL:-$top/build/shoal}
data=${SHOAL_DATA:-$top/../shared/data}
torch_py=${TORCH_PYTHON:-/usr/bin/python3}
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread
torch_ld="$openblas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "bench_train.sh: $*" >&2
    exit 1
}

steps=60
short_steps=3
short_given=0
repeat=1
seed=1234
models="word sampled char"
threads_list="1 2"
isas=""
vocab=""
epoch=0
parallel=0
out=""
keep=0
while [ $# -gt 0 ]; do
    case $1 in
        --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
        --steps=*) steps=${1#*=}; shift ;;
        --short-steps) [ $# -ge 2 ] || die "--short-steps needs a value"
                       short_steps=$2; short_given=1; shift 2 ;;
        --short-steps=*) short_steps=${1#*=}; short_given=1; shift ;;
        --repeat) [ $# -ge 2 ] || die "--repeat needs a value"; repeat=$2; shift 2 ;;
        --repeat=*) repeat=${1#*=}; shift ;;
        --models) [ $# -ge 2 ] || die "--models needs a value"; models=$2; shift 2 ;;
        --models=*) models=${1#*=}; shift ;;
        --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads_list=$2; shift 2 ;;
        --threads=*) threads_list=${1#*=}; shift ;;
        --isa) [ $# -ge 2 ] || die "--isa needs a value"; isas=$2; shift 2 ;;
        --isa=*) isas=${1#*=}; shift ;;
        --vocab) [ $# -ge 2 ] || die "--vocab needs a value"; vocab=$2; shift 2 ;;
        --vocab=*) vocab=${1#*=}; shift ;;
        --epoch) epoch=1; shift ;;
        --parallel) parallel=1; shift ;;
        --seed) [ $# -ge 2 ] || die "--seed needs a value"; seed=$2; shift 2 ;;
        --seed=*) seed=${1#*=}; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --keep) keep=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
models=${models//,/ }
threads_list=${threads_list//,/ }
isas=${isas//,/ }
for i in $isas; do
    case $i in baseline|v3|v4) ;; *) die "unknown --isa '$i' (baseline, v3, v4)" ;; esac
done
[ "$epoch" = 0 ] || [ -z "$isas" ] || die "--isa is for the throughput table, not --epoch"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps wants a positive integer, got '$steps'"
[ -z "$vocab" ] || [[ $vocab =~ ^[1-9][0-9]*$ ]] || die "--vocab wants a positive integer, got '$vocab'"
[[ $short_steps =~ ^[0-9]+$ ]] || die "--short-steps wants a non-negative integer, got '$short_steps'"
[ "$epoch" = 0 ] || [ "$short_given" = 0 ] || die "--short-steps is for the throughput table, not --epoch"
if [ "$epoch" = 0 ] && [ "$short_steps" -ge "$steps" ]; then
    [ "$short_given" = 0 ] || die "--short-steps ($short_steps) must be below --steps ($steps)"
    echo "note: --steps $steps leaves no room for the default $short_steps-step short run;" \
         "no CPU ms per step" >&2
    short_steps=0
fi
seeds=${seed//,/ }
for s in $seeds; do
    [[ $s =~ ^[0-9]+$ ]] || die "--seed wants non-negative integers, got '$s'"
done
[ -n "$seeds" ] || die "empty --seed"
seed=${seeds%% *}
[ "$epoch" = 1 ] || [ "$seed" = "$seeds" ] || die "several seeds only with --epoch"
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat wants a positive integer, got '$repeat'"
for m in $models; do
    case $m in word|sampled|char) ;; *) die "unknown model '$m' (word, sampled, char)" ;; esac
done
for t in $threads_list; do
    [[ $t =~ ^[1-9][0-9]*$ ]] || die "--threads wants positive integers, got '$t'"
done
if [ -z "$models" ] || [ -z "$threads_list" ]; then
    die "empty --models or --threads"
fi
[ -d "$data" ] || die "corpus folder $data not found (set SHOAL_DATA)"
data=$(cd "$data" && pwd)

py=$(command -v "$torch_py" || command -v python3) || die "no python3 to read the JSON"

# Output folder: ours to remove at exit unless --keep; in a given --out DIR only what
# this script wrote there is removed.
made_out=0
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/shoal-bench.XXXXXX")
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
        rm -rf "$out"/shoal-* "$out"/torch-* "$out"/cache "$out"/table.txt
    fi
}
trap cleanup EXIT

have_shoal=1
if [ ! -x "$shoal" ]; then
    echo "note: shoal binary not found at $shoal (build it, or set SHOAL); reporting" \
         "PyTorch alone" >&2
    have_shoal=0
fi
have_torch=1
if ! LD_LIBRARY_PATH=$torch_ld "$torch_py" -c 'import torch' >/dev/null 2>&1; then
    echo "note: PyTorch not importable: apt-get install python3-torch" \
         "(tried $torch_py); reporting shoal alone" >&2
    have_torch=0
fi
[ "$have_shoal" = 1 ] || [ "$have_torch" = 1 ] || die "neither shoal nor PyTorch can run"
[ "$have_shoal" = 1 ] || [ -z "$isas" ] || die "--isa needs the shoal binary"

echo "# cpu: $(bench_cpu)"
echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -z "${OPENBLAS_CORETYPE:-}" ] ||
    echo "# OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment: OpenBLAS's kernel is forced on both sides"
[ -z "$vocab" ] ||
    echo "# --vocab $vocab: the word and sampled models' vocabulary on both sides (the configs': 10000)"

# shoal_isa_line LEVEL: shoal's loop build and OpenBLAS kernel with SHOAL_CPU_ISA=LEVEL
# ("" = its own pick), from --version and OpenBLAS's start-up line (OPENBLAS_VERBOSE=2);
# dies with shoal's message on a level this binary or this CPU lacks
shoal_isa_line() {
    local v core
    v=$(SHOAL_CPU_ISA=$1 OPENBLAS_VERBOSE=2 "$shoal" --version 2>&1) ||
        die "shoal --version with SHOAL_CPU_ISA=$1: $(echo "$v" | tail -n 1)"
    core=$(echo "$v" | sed -n 's/^Core: *//p' | head -n 1)
    echo "# shoal${1:+ $1}: loops $(echo "$v" | sed -n 's/^cpu loops: \(.*\) (built:.*/\1/p'), OpenBLAS kernel ${core:-unknown}"
}
if [ "$have_shoal" = 1 ]; then
    for i in ${isas:-""}; do
        shoal_isa_line "$i"
    done
fi
if [ "$have_torch" = 1 ]; then
    echo "# torch: $(LD_LIBRARY_PATH=$torch_ld "$torch_py" -c 'import re, torch
m = re.search(r"CPU capability usage: *(\S+)", torch.__config__.show())
print("PyTorch %s, ATen CPU capability %s" % (torch.__version__, m.group(1) if m else "unknown"))'), OpenBLAS kernel below the table"
fi

conf_of() {
    case $1 in
        word) echo "$top/conf/brown-word.yaml" ;;
        sampled) echo "$top/conf/brown-sampled.yaml" ;;
        char) echo "$top/conf/shakespeare-char.yaml" ;;
    esac
}

# data_sets MODEL [train-only]: the corpus overrides for shoal into the array dsets;
# train-only drops Brown's valid/test files, which shoal would evaluate at the end
# (the char model's validation tail stays: dropping it would change the training text)
data_sets() {
    case $1 in
        word|sampled)
            dsets=(--set "data.train=$data/brown/train.txt")
            [ -z "$vocab" ] || dsets+=(--set "data.vocab_size=$vocab")
            if [ "${2:-}" = train-only ]; then
                dsets+=(--set 'data.valid=""' --set 'data.test=""')
            else
                dsets+=(--set "data.valid=$data/brown/valid.txt"
                        --set "data.test=$data/brown/test.txt")
            fi ;;
        char) dsets=(--set "data.train=$data/tinyshakespeare/input.txt") ;;
    esac
}

failed=0

# run_shoal NAME MODEL THREADS DATA EXTRA...: shoal train into $out/shoal-NAME, its CPU
# seconds into $out/shoal-NAME.cpu; DATA is "all" or "train-only" (see data_sets); 0 if
# it wrote summary.json
run_shoal() {
    local name=$1 model=$2 t=$3 which=$4 dir conf
    shift 4
    dir=$out/shoal-$name
    conf=$(conf_of "$model")
    if [ ! -f "$conf" ]; then
        echo "shoal $name: config $conf missing" >&2
        return 1
    fi
    data_sets "$model" "$which"
    if ! OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t bench_cpu_time "$out/shoal-$name.cpu" \
            "$shoal" train "$conf" \
            "${dsets[@]}" --set "run.threads=$t" --set "run.dir=$dir" \
            --set "data.cache_dir=$out/cache" --set run.checkpoint_every=0 \
            --set "run.seed=$seed" "$@" \
            --no-resume --quiet >"$out/shoal-$name.log" 2>&1 ||
       [ ! -f "$dir/summary.json" ]; then
        echo "shoal $name failed; last lines of $out/shoal-$name.log:" >&2
        tail -n 20 "$out/shoal-$name.log" >&2
        return 1
    fi
    cp "$dir/summary.json" "$out/shoal-$name.json"
    [ "$keep" = 1 ] || rm -rf "$dir"  # checkpoints: tens of MB a run
}

# run_torch NAME MODEL THREADS EXTRA...: bench/torch_lm.py into $out/torch-NAME.json,
# its CPU seconds into $out/torch-NAME.cpu
run_torch() {
    local name=$1 model=$2 t=$3
    shift 3
    case $model in word|sampled) [ -z "$vocab" ] || set -- --vocab "$vocab" "$@" ;; esac
    if ! LD_LIBRARY_PATH=$torch_ld bench_cpu_time "$out/torch-$name.cpu" \
            "$torch_py" "$top/bench/torch_lm.py" --model "$model" \
            --threads "$t" --data "$data" --seed "$seed" --require-openblas \
            --out "$out/torch-$name.json" "$@" >"$out/torch-$name.log" 2>&1; then
        echo "torch $name failed; last lines of $out/torch-$name.log:" >&2
        tail -n 20 "$out/torch-$name.log" >&2
        return 1
    fi
}

# keep_median SIDE NAME R: of SIDE-NAME.r1..rR.json, the median run by tokens/s (the
# lower middle one for R even) becomes SIDE-NAME.json, with every run's figure added
# as runs_tokens_per_s; with short runs, also each pair's CPU ms per step (SIDE-NAME.rK.cpu
# less SIDE-NAME.short.rK.cpu, over the steps between them) as runs_cpu_ms_per_step and
# their median (the same rule) as cpu_ms_per_step
keep_median() {
    "$py" - "$out/$1-$2" "$3" "$((short_steps > 0 ? steps - short_steps : 0))" <<'EOF'
import json, os, sys

base, runs, between = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def cpu_s(name):
    """CPU seconds of a run that finished (its .json written), else None."""
    try:
        with open(name + ".cpu") as f:
            return float(f.read()) if os.path.exists(name + ".json") else None
    except (OSError, ValueError):
        return None


got, cpu_ms = [], []
for k in range(1, runs + 1):
    try:
        with open("%s.r%d.json" % (base, k)) as f:
            d = json.load(f)
    except (OSError, ValueError):
        continue
    if not isinstance(d.get("tokens_per_s"), (int, float)):
        continue
    got.append(d)
    long_s, short_s = cpu_s("%s.r%d" % (base, k)), cpu_s("%s.short.r%d" % (base, k))
    if between > 0 and long_s is not None and short_s is not None:
        cpu_ms.append(1000.0 * (long_s - short_s) / between)
if got:
    mid = sorted(got, key=lambda d: d["tokens_per_s"])[(len(got) - 1) // 2]
    mid["runs_tokens_per_s"] = [d["tokens_per_s"] for d in got]
    if cpu_ms:
        mid["cpu_ms_per_step"] = sorted(cpu_ms)[(len(cpu_ms) - 1) // 2]
        mid["runs_cpu_ms_per_step"] = cpu_ms
    with open(base + ".json", "w") as f:
        json.dump(mid, f)
EOF
}

# report MODE: the table from the JSON files in $out (a missing file shows as "-")
report() {
    "$py" - "$1" "$out" "$models" "$threads_list" "$seeds" "$isas" "$steps" "$short_steps" <<'EOF'
import json, os, re, statistics, sys

mode, out, seeds = sys.argv[1], sys.argv[2], sys.argv[5].split()
models, threads, isas = sys.argv[3].split(), sys.argv[4].split(), sys.argv[6].split()
steps, short_steps = int(sys.argv[7]), int(sys.argv[8])


def load(side, name):
    try:
        with open(os.path.join(out, "%s-%s.json" % (side, name))) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def num(d, key, fmt):
    v = d.get(key) if d else None
    return fmt % v if isinstance(v, (int, float)) else "-"


def mib(d):
    v = d.get("peak_rss_kb") if d else None
    return "%.0f MiB" % (v / 1024) if isinstance(v, (int, float)) else "-"


def short_blas(d):
    s = (d or {}).get("backend") or "-"
    return " ".join(s.split()[:2])


def table(rows, nleft):
    """Aligned columns: the first and the last nleft - 1 left, the numbers right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("  ".join(c.rjust(w) if 0 < i < len(r) - nleft + 1 else c.ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


blas = {}


def note(key, text):
    """Footer: each distinct BLAS description once per side."""
    if text and text not in blas.setdefault(key, []):
        blas[key].append(text)


def blas_threads(d):
    """The BLAS threads a run really had: shoal's "(N threads)", OpenBLAS's threads=N."""
    m = re.search(r"\((\d+) threads?\)|threads=(\d+)", (d or {}).get("backend") or "")
    return (m.group(1) or m.group(2)) if m else None


if mode == "throughput":
    builds = isas or [""]
    names = ["shoal" + (" " + i if i else "") for i in builds]
    rows = [["model", "threads"] + ["%s tok/s" % n for n in names] +
            ["torch tok/s", "ratio", "shoal RSS", "torch RSS", "shoal BLAS", "torch BLAS"]]
    unpinned, runs_lines, cpu_lines = [], [], []
    for m in models:
        for t in threads:
            ss = [load("shoal", "%s%s-t%s" % (i + "-" if i else "", m, t)) for i in builds]
            p = load("torch", "%s-t%s" % (m, t))
            s = ss[0]
            ratio = "-"
            if s and p and p.get("tokens_per_s"):
                ratio = "%.2fx" % (s["tokens_per_s"] / p["tokens_per_s"])
            rows.append([m, t] + [num(d, "tokens_per_s", "%.0f") for d in ss] +
                        [num(p, "tokens_per_s", "%.0f"), ratio, mib(s), mib(p), short_blas(s),
                         short_blas(p)])
            for side, d in list(zip(names, ss)) + [("torch", p)]:
                if not d:
                    continue
                note(side, d.get("backend"))
                if side == "torch":
                    note("torch libs", ", ".join(d.get("blas_libs", [])))
                    note("torch ATen", ", ".join(d.get("torch_blas_info", [])))
                if blas_threads(d) != t or (side == "torch" and d.get("torch_threads") != int(t)):
                    unpinned.append("%s %s at %s threads: %s" % (side, m, t, d.get("backend")))
                runs = d.get("runs_tokens_per_s")
                if runs and len(runs) > 1:
                    runs_lines.append("%s %s t%s: %s" % (side, m, t,
                                                         " ".join("%.0f" % r for r in runs)))
    table(rows, 3)
    print("\nratio = %s tok/s / PyTorch tok/s (target >= 1.5x); RSS = peak resident set"
          % names[0])
    for u in unpinned:
        print("NOT PINNED: " + u)
    if short_steps > 0:
        print()
        rows = [["model", "threads"] + ["%s ms" % n for n in names] + ["torch ms"] +
                ["torch/%s" % n for n in names]]
        for m in models:
            for t in threads:
                ss = [load("shoal", "%s%s-t%s" % (i + "-" if i else "", m, t)) for i in builds]
                p = load("torch", "%s-t%s" % (m, t))
                pm = (p or {}).get("cpu_ms_per_step")
                rows.append([m, t] + [num(d, "cpu_ms_per_step", "%.1f") for d in ss] +
                            [num(p, "cpu_ms_per_step", "%.1f")] +
                            ["%.2fx" % (pm / d["cpu_ms_per_step"])
                             if pm and (d or {}).get("cpu_ms_per_step") else "-" for d in ss])
                for side, d in list(zip(names, ss)) + [("torch", p)]:
                    runs = (d or {}).get("runs_cpu_ms_per_step")
                    if runs and len(runs) > 1:
                        cpu_lines.append("%s %s t%s: %s" % (side, m, t,
                                                            " ".join("%.1f" % r for r in runs)))
        table(rows, 1)
        print("\nCPU ms per training step = (CPU s of the %d-step run - CPU s of the %d-step "
              "run) / %d,\nuser + system, all threads; torch/X = PyTorch's ms / X's (target "
              ">= 1.5x)" % (steps, short_steps, steps - short_steps))
else:
    rows = [["seed", "side", "steps", "tok/s", "train s", "valid loss", "valid ppl", "peak RSS"]]
    ppl = {"shoal": [], "torch": []}
    for seed in seeds:
        for side in ("shoal", "torch"):
            d = load(side, "epoch-" + seed)
            if not d:
                continue
            rows.append([seed, side, num(d, "steps", "%d"), num(d, "tokens_per_s", "%.0f"),
                         num(d, "train_time_s", "%.1f"), num(d, "valid_loss", "%.4f"),
                         num(d, "valid_ppl", "%.2f"), mib(d)])
            note(side, d.get("backend"))
            if isinstance(d.get("valid_ppl"), (int, float)):
                ppl[side].append(d["valid_ppl"])
    table(rows, 1)
    s, p = ppl["shoal"], ppl["torch"]
    if s and p:
        ms, mp = statistics.mean(s), statistics.mean(p)
        diff = 100.0 * (ms - mp) / mp
        print("\nword model, 1 epoch, %s thread(s), %d seed(s): shoal valid ppl %.2f +- %.2f vs "
              "PyTorch %.2f +- %.2f (mean +- sd; %+.2f%%; target within 3%%: %s)"
              % (sys.argv[4], len(s), ms, statistics.stdev(s) if len(s) > 1 else 0.0, mp,
                 statistics.stdev(p) if len(p) > 1 else 0.0, diff,
                 "yes" if abs(diff) <= 3 else "NO"))
print()
for k, texts in blas.items():
    for v in texts:
        print("%-16s %s" % (k + ":", v))
if mode == "throughput" and runs_lines:
    print("\ntokens/s of every run, in order:")
    for r in runs_lines:
        print("  " + r)
if mode == "throughput" and cpu_lines:
    print("\nCPU ms per step of every long-short pair, in order:")
    for r in cpu_lines:
        print("  " + r)
EOF
}

if [ "$epoch" = 1 ]; then
    [ "$threads_list" != "1 2" ] || threads_list=2
    [[ $threads_list =~ ^[1-9][0-9]*$ ]] || die "--epoch takes one --threads value"
    echo "one epoch of the word model at $threads_list thread(s) on each side, seeds" \
         "$seeds (several minutes each)" >&2
    for seed in $seeds; do
        spid=""
        if [ "$have_shoal" = 1 ]; then
            echo "[bench] shoal word epoch, seed $seed" >&2
            run_shoal "epoch-$seed" word "$threads_list" all --set train.epochs=1 \
                --set train.max_steps=0 --set train.eval_every_epoch=true &
            spid=$!
            [ "$parallel" = 1 ] || { wait "$spid" || failed=1; spid=""; }
        fi
        if [ "$have_torch" = 1 ]; then
            echo "[bench] torch word epoch, seed $seed" >&2
            run_torch "epoch-$seed" word "$threads_list" --epochs 1 --log-every 100 || failed=1
        fi
        [ -z "$spid" ] || wait "$spid" || failed=1
    done
    report epoch | tee "$out/table.txt"
else
    for m in $models; do
        for t in $threads_list; do
            for k in $(seq "$repeat"); do
                for i in ${isas:-""}; do
                    [ "$have_shoal" = 1 ] || break
                    for n in $steps $short_steps; do
                        [ "$n" -gt 0 ] || continue
                        [ "$n" = "$steps" ] && kind="" || kind=".short"
                        echo "[bench] shoal${i:+ $i} $m threads=$t steps=$n run $k/$repeat" >&2
                        SHOAL_CPU_ISA=$i run_shoal "${i:+$i-}$m-t$t$kind.r$k" "$m" "$t" \
                            train-only --set "train.max_steps=$n" \
                            --set train.eval_every_epoch=false || failed=1
                    done
                done
                [ "$have_torch" = 1 ] || continue
                for n in $steps $short_steps; do
                    [ "$n" -gt 0 ] || continue
                    [ "$n" = "$steps" ] && kind="" || kind=".short"
                    echo "[bench] torch $m threads=$t steps=$n run $k/$repeat" >&2
                    run_torch "$m-t$t$kind.r$k" "$m" "$t" --steps "$n" --no-eval || failed=1
                done
            done
            for i in ${isas:-""}; do
                keep_median shoal "${i:+$i-}$m-t$t" "$repeat"
            done
            keep_median torch "$m-t$t" "$repeat"
        done
    done
    report throughput | tee "$out/table.txt"
fi
exit "$failed"
