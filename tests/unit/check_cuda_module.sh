#!/bin/sh
# The CUDA backend as a module that shoal loads only for device: cuda
# (kernels/sl_cuda_loader.c): shoal links no CUDA library; without the module it still
# answers --version and trains on the CPU, and a CPU run never maps the module; a
# device: cuda run that cannot use the GPU says why in one line (no module, a library
# the module lacks, not shoal's module, no GPU). In a build without CUDA only the first
# checks apply. SHOAL_EXPECT_GPU=1 (tests/device/run) makes "no GPU" a failure: there
# the run must train on the GPU through the module.
B=${SHOAL_BUILDDIR:-.}
data=${SHOAL_DATA:-../shared/data}
shoal=$B/shoal
[ -x "$shoal" ] || { echo "check_cuda_module: no $shoal (make first)" >&2; exit 99; }
[ -r "$data/brown/train.txt" ] || { echo "check_cuda_module: SKIP: no corpus in $data"; exit 77; }
cuda=0
grep -q '^#define HAVE_CUDA 1' "$B/config.h" && cuda=1
archs=$(sed -n 's/^#define SL_CUDA_ARCHS "\(.*\)"$/\1/p' "$B/config.h")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_cuda_module.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
none=$tmp/none # no module there
checks=0 failures=0

# check WHAT CONDITION...: one check, counted; prints WHAT when the condition fails
check() {
    what=$1
    shift
    checks=$((checks + 1))
    if ! "$@"; then
        echo "FAIL: $what"
        failures=$((failures + 1))
    fi
}
has() { grep -qF -- "$2" "$1"; }
lacks() { ! grep -qE -- "$2" "$1"; }
lines() { [ "$(wc -l <"$1")" -eq "$2" ]; }

cat >"$tmp/tiny.yaml" <<EOT
run: {name: tiny, log_every: 10, checkpoint_every: 0}
data: {train: $data/brown/train.txt, valid: "", test: "", vocab_size: 200, max_tokens: 5000,
       cache_dir: $tmp/cache}
model: {embedding: 8, layers: [{lstm: 8}], output: {type: full}}
train: {batch: 4, bptt: 5, epochs: 1, max_steps: 3}
EOT
# train NAME DEVICE [ENV...]: a tiny run into $tmp/NAME, exit status into $rc, stderr
# into $tmp/NAME.err
train() {
    n=$1 dev=$2
    shift 2
    env "$@" "$shoal" train "$tmp/tiny.yaml" --set "device=$dev" --set "run.dir=$tmp/$n" \
        --no-resume >"$tmp/$n.out" 2>"$tmp/$n.err"
    rc=$?
}

# shoal itself links no CUDA library
if command -v ldd >/dev/null; then
    ldd "$shoal" >"$tmp/ldd" 2>&1
    check "shoal links a CUDA library: $(grep -E 'libcudart|libcublas' "$tmp/ldd")" \
        lacks "$tmp/ldd" 'libcudart|libcublas'
fi

# --version without the module
SHOAL_MODULE_PATH=$none "$shoal" --version >"$tmp/version" 2>&1
check "--version without the module: exit $?" [ $? = 0 ]
head -n 1 "$tmp/version" >"$tmp/version1"
check "--version: $(cat "$tmp/version1")" has "$tmp/version1" "shoal "
if [ "$cuda" = 1 ]; then
    check "--version names the missing module: $(cat "$tmp/version")" \
        has "$tmp/version" "CUDA module: unusable: no CUDA module at $none/shoal-cuda.so"
else
    check "--version says no CUDA: $(cat "$tmp/version")" \
        has "$tmp/version" "CUDA module: none: this shoal was built without CUDA"
fi

# a CPU run without the module, and one with it beside shoal that never maps it
train cpu-none cpu SHOAL_MODULE_PATH="$none"
check "cpu run without the module: exit $rc: $(cat "$tmp/cpu-none.err")" [ "$rc" = 0 ]
check "cpu run without the module: no model.bin" [ -s "$tmp/cpu-none/model.bin" ]
train cpu-maps cpu LD_DEBUG=files
check "cpu run (LD_DEBUG=files): exit $rc" [ "$rc" = 0 ]
check "a cpu run loads CUDA libraries: $(grep -E 'shoal-cuda|libcudart|libcublas' "$tmp/cpu-maps.err" | head -n 2)" \
    lacks "$tmp/cpu-maps.err" 'shoal-cuda|libcudart|libcublas'

if [ "$cuda" = 0 ]; then
    train cuda-none cuda
    check "device cuda without CUDA: exit $rc" [ "$rc" != 0 ]
    check "device cuda without CUDA: $(cat "$tmp/cuda-none.err")" \
        has "$tmp/cuda-none.err" "shoal: device 'cuda:0': this shoal was built without CUDA"
    echo "$(((checks - failures) * 100 / checks))%: Checks: $checks, Failures: $failures, Errors: 0"
    [ "$failures" = 0 ]
    exit
fi

# with CUDA: --version with the module beside shoal
"$shoal" --version >"$tmp/version" 2>&1
check "--version with the module: $(cat "$tmp/version")" \
    has "$tmp/version" "CUDA module: $(cd "$B" && pwd -P)/shoal-cuda.so, GPU code $archs, CUDA runtime "

# no module: one line naming where it was looked for
train cuda-none cuda SHOAL_MODULE_PATH="$none"
check "device cuda without the module: exit $rc" [ "$rc" != 0 ]
check "device cuda without the module, not one line: $(cat "$tmp/cuda-none.err")" lines "$tmp/cuda-none.err" 1
check "device cuda without the module: $(cat "$tmp/cuda-none.err")" has "$tmp/cuda-none.err" \
    "shoal: device 'cuda:0': no CUDA module at $none/shoal-cuda.so (from SHOAL_MODULE_PATH): No such file or directory"

# a module that lacks a library (as a node without libcublas would) and a library that
# is not shoal's module: built here with the C compiler
cc=${CC:-cc}
mkdir -p "$tmp/gone" "$tmp/other"
if echo 'int gone(void) { return 1; }' >"$tmp/g.c" &&
   echo 'int gone(void); int f(void) { return gone(); }' >"$tmp/m.c" &&
   $cc -shared -fPIC -o "$tmp/gone/libshoal_gone.so" "$tmp/g.c" 2>/dev/null &&
   $cc -shared -fPIC -o "$tmp/gone/shoal-cuda.so" "$tmp/m.c" -L"$tmp/gone" -lshoal_gone 2>/dev/null &&
   $cc -shared -fPIC -o "$tmp/other/shoal-cuda.so" "$tmp/g.c" 2>/dev/null; then
    rm -f "$tmp/gone/libshoal_gone.so"
    train cuda-gone cuda SHOAL_MODULE_PATH="$tmp/gone"
    check "a module lacking a library: exit $rc" [ "$rc" != 0 ]
    check "a module lacking a library, not one line: $(cat "$tmp/cuda-gone.err")" lines "$tmp/cuda-gone.err" 1
    check "a module lacking a library: $(cat "$tmp/cuda-gone.err")" has "$tmp/cuda-gone.err" \
        "shoal: device 'cuda:0': the CUDA module $tmp/gone/shoal-cuda.so does not load: libshoal_gone.so: cannot open shared object file"
    train cuda-other cuda SHOAL_MODULE_PATH="$tmp/other"
    check "not shoal's module: exit $rc" [ "$rc" != 0 ]
    check "not shoal's module: $(cat "$tmp/cuda-other.err")" has "$tmp/cuda-other.err" \
        "shoal: device 'cuda:0': $tmp/other/shoal-cuda.so is not shoal's CUDA module (no sl_cuda_module in it)"
else
    echo "no C compiler ($cc): the checks with fake modules are left out"
fi

# the real module: trains on a GPU, or one line that says there is none
train cuda cuda
if [ "$rc" = 0 ]; then
    check "device cuda: no model.bin" [ -s "$tmp/cuda/model.bin" ]
    check "device cuda: not on a GPU: $(grep -m 1 'info' "$tmp/cuda.err")" has "$tmp/cuda.err" "CUDA "
    echo "device cuda: trained on the GPU through $B/shoal-cuda.so"
else
    check "device cuda failed, not one line: $(cat "$tmp/cuda.err")" lines "$tmp/cuda.err" 1
    check "device cuda failed, but not for want of a GPU: $(cat "$tmp/cuda.err")" \
        has "$tmp/cuda.err" "shoal: device 'cuda:0': no GPU: "
    check "SHOAL_EXPECT_GPU=1 and no GPU: $(cat "$tmp/cuda.err")" [ "${SHOAL_EXPECT_GPU:-0}" != 1 ]
    echo "device cuda: $(cat "$tmp/cuda.err")"
fi

echo "$(((checks - failures) * 100 / checks))%: Checks: $checks, Failures: $failures, Errors: 0"
[ "$failures" = 0 ]
