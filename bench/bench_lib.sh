# shellcheck shell=bash
# bench_lib.sh: what the bench scripts share; each sources it (". bench/bench_lib.sh"),
# none runs it.

# bench_cpu: "<model name>, <N> cpus" of this machine, for the heading of every figure.
bench_cpu() {
    echo "$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cpus"
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

# bench_small_model DATA DIR: sets small_model[] to the --set overrides of the small word
# model that lets 8 nodes share 2 cores (Brown from DATA, vocabulary 2000, embedding 64,
# one LSTM of 64, full softmax, 32 x 20 tokens a step), its token cache and the run's
# key file in DIR, shoal's progress line off and no per-epoch evaluation.
# shellcheck disable=SC2034 # for the scripts that source this
bench_small_model() {
    small_model=(--quiet --set cluster.key_file="$2/key" --set data.cache_dir="$2/cache"
        --set data.train="$1/brown/train.txt" --set data.valid="$1/brown/valid.txt"
        --set data.test="$1/brown/test.txt" --set data.vocab_size=2000
        --set model.embedding=64 --set "model.layers=[{lstm: 64}]" --set train.batch=32
        --set train.bptt=20 --set train.epochs=1000 --set train.eval_every_epoch=false)
}
