# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034 # out, me, keep, child and command_of are the script's; it sets
# bench_failed, out and tmp_out
# bench_lib.sh: what the bench scripts share; each sources it (". bench/bench_lib.sh"),
# none runs it.

# bench_cpu_field NAME: the first /proc/cpuinfo line's value for NAME ("model name",
# "cpu family", ...), empty where there is none.
bench_cpu_field() {
    { grep -m 1 "^$1[[:space:]]*:" /proc/cpuinfo || true; } | cut -d: -f2- | sed 's/^ *//'
}

# bench_cpu_level: the x86-64 level of this CPU from its flags (v3: AVX2, FMA, BMI2; v4:
# AVX-512 F/BW/CD/DQ/VL), what the CPU loops and OpenBLAS can use; the architecture
# elsewhere.
bench_cpu_level() {
    local f

    [ "$(uname -m)" = x86_64 ] || { uname -m; return; }
    f=" $(bench_cpu_field flags) "
    if [[ $f == *" avx512f "* && $f == *" avx512bw "* && $f == *" avx512cd "* &&
          $f == *" avx512dq "* && $f == *" avx512vl "* ]]; then
        echo "x86-64-v4 (AVX-512)"
    elif [[ $f == *" avx2 "* && $f == *" fma "* && $f == *" bmi2 "* ]]; then
        echo "x86-64-v3 (AVX2, FMA)"
    else
        echo "below x86-64-v3"
    fi
}

# bench_cpu: "<model name> (family F, model M), <N> cpus, <level>" of this machine, for
# the heading of every figure: a virtual machine's model name is often generic
# ("Intel(R) Xeon(R) Processor"), which family, model and level tell apart.
bench_cpu() {
    local name

    name=$(bench_cpu_field 'model name')
    echo "${name:-unknown CPU} (family $(bench_cpu_field 'cpu family'), model" \
        "$(bench_cpu_field model)), $(nproc) cpus, $(bench_cpu_level)"
}

# bench_help: the script's --help, its heading comment from line 2 to the first line
# that is not a comment, without the "# ".
bench_help() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
}

# bench_out_dir NAME: makes $out; an empty one becomes a fresh
# /tmp/shoal-bench-NAME-XXXXXX, also named in tmp_out (for the script's cleanup to
# remove) unless keep is 1.
bench_out_dir() {
    if [ -z "$out" ]; then
        out=$(mktemp -d "/tmp/shoal-bench-$1-XXXXXX")
        [ "$keep" = 1 ] || tmp_out=$out
    fi
    mkdir -p "$out"
}

# bench_stop_child: the shoal run in progress ($child; none when empty) stopped and
# waited for.
bench_stop_child() {
    if [ -n "$child" ]; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
    fi
}

# bench_traps CLEANUP: CLEANUP runs at exit, pass or fail; INT and TERM end the script
# with a line that says so (exit 130 and 143).
bench_traps() {
    # shellcheck disable=SC2064 # the name is meant to expand now; the function runs later
    trap "$1" EXIT
    trap 'echo "$me: interrupted" >&2; exit 130' INT
    trap 'echo "$me: terminated" >&2; exit 143' TERM
}

# bench_num KEY FILE: a number of a JSON object written one key a line (summary.json);
# nothing when the file or the key is missing.
bench_num() {
    grep -o "\"$1\": *[0-9.e+-]*" "$2" 2>/dev/null | head -1 | sed 's/.*: *//'
}

# bench_last_step FILE: the last "step" in a metrics.jsonl (0 when none).
bench_last_step() {
    { grep -o '"step": *[0-9]*' "$1" 2>/dev/null || echo '"step": 0'; } | tail -1 | sed 's/.*: *//'
}

# bench_cpu_time FILE CMD...: runs CMD and writes to FILE the CPU seconds it used, user
# plus system, its threads and every process it waited for included (bash's times in a
# subshell of its own: that shell's children are CMD's tree alone); CMD's exit status.
# On a shared machine this is steadier than the wall clock: it counts only the time the
# tree ran, not the time it waited for a core.
bench_cpu_time() {
    local file=$1
    shift
    (
        rc=0
        "$@" || rc=$?
        times >"$file.times"  # not into a pipe: that would run it in a fresh child
        tail -n 1 "$file.times" | tr , . |
            awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
                   printf "%.3f\n", t }' >"$file"
        rm -f "$file.times"
        exit "$rc"
    )
}

# bench_small_model DATA DIR: sets small_model[] to the --set overrides of the small word
# model that lets 8 nodes share 2 cores (Brown from DATA, vocabulary 2000, embedding 64,
# one LSTM of 64, full softmax, 32 x 20 tokens a step on each node, whatever the
# configuration's train.global_batch), its token cache and the run's key file in DIR,
# shoal's progress line off and no per-epoch evaluation.
bench_small_model() {
    small_model=(--quiet --set cluster.key_file="$2/key" --set data.cache_dir="$2/cache"
        --set data.train="$1/brown/train.txt" --set data.valid="$1/brown/valid.txt"
        --set data.test="$1/brown/test.txt" --set data.vocab_size=2000
        --set model.embedding=64 --set "model.layers=[{lstm: 64}]" --set train.global_batch=0
        --set train.batch=32 --set train.bptt=20 --set train.epochs=1000
        --set train.eval_every_epoch=false)
}

# Runs kept for reuse (bench_comm.sh, bench_accuracy.sh): run NAME of seed SEED on
# CORPUS lives in $out/CORPUS/NAME-sSEED, beside its command line (.cmd) and output
# (.log); a later invocation with the same command reuses it. The caller defines
# command_of CORPUS NAME SEED, which sets cmd[] to the run's command, and $out and $me.

# bench_command_line CORPUS NAME SEED: the run's command as one line (its .cmd file).
bench_command_line() {
    local cmd
    command_of "$@"
    printf '%q ' "${cmd[@]}"
}

# bench_same_options CORPUS NAME SEED: whether the run was made by this command.
bench_same_options() {
    local f=$out/$1/$2-s$3.cmd
    [ -f "$f" ] && [ "$(head -n 1 "$f")" = "$(bench_command_line "$@")" ]
}

# bench_run_kept CORPUS NAME SEED: the run, unless one with the same command finished
# before (one made with other options is removed first); a run that fails sets
# bench_failed=1. With bench_drop_models=1 a finished run's model and checkpoint files
# are removed (the table needs only its summary and metrics).
bench_failed=0
bench_drop_models=0
bench_run_kept() {
    local corpus=$1 name=$2 seed=$3 dir=$out/$1/$2-s$3 cmd
    if [ -e "$dir" ] && ! bench_same_options "$@"; then
        echo "== $corpus $name seed $seed: $dir was made with other options; running it again"
        rm -rf "$dir"
    fi
    if [ -f "$dir/summary.json" ]; then
        echo "== $corpus $name seed $seed: done before with the same options"
        return 0
    fi
    mkdir -p "$out/$corpus"
    bench_command_line "$@" >"$dir.cmd"
    echo >>"$dir.cmd"
    command_of "$@"
    echo "== $corpus $name seed $seed: started $(date '+%H:%M:%S')"
    if "${cmd[@]}" >"$dir.log" 2>&1 && [ -f "$dir/summary.json" ]; then
        echo "== $corpus $name seed $seed: finished $(date '+%H:%M:%S'): $(tail -n 1 "$dir.log")"
        [ "$bench_drop_models" = 0 ] || find "$dir" \( -name model.bin -o -name '*.safetensors' \
            -o -name 'checkpoint*' \) -prune -exec rm -rf {} +
    else
        echo "$me: $corpus $name seed $seed failed; see $dir.log" >&2
        bench_failed=1
    fi
}
