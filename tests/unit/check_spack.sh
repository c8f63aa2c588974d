#!/bin/sh
# contrib/spack/package.py is valid Python (python3 -m py_compile) and, loaded against a
# stand-in of spack.package, declares shoal's dependencies and makes the configure
# arguments configure.ac takes: --with-blas for each BLAS provider, --with-cuda and
# --with-cuda-arch from cuda_arch, --without-cuda. Skipped (77) without python3.
top=${1:-${SHOAL_SRCDIR:-.}}
recipe=$top/contrib/spack/package.py
command -v python3 >/dev/null 2>&1 || { echo "check_spack: no python3 on PATH: skipped"; exit 77; }
[ -f "$recipe" ] || { echo "check_spack: $recipe: no such file" >&2; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
# the byte code goes to the temporary folder, never beside the (maybe read-only) recipe
if ! PYTHONPYCACHEPREFIX=$tmp python3 -m py_compile "$recipe"; then
    echo "check_spack: $recipe does not compile"
    echo "0%: Checks: 2, Failures: 2, Errors: 0"
    exit 1
fi
PYTHONDONTWRITEBYTECODE=1 python3 - "$recipe" <<'PY'
import sys, types

calls = []
def record(kind):
    return lambda *a, **k: calls.append((kind, a, k))
pkg = types.ModuleType("spack.package")
class AutotoolsPackage: pass
class CudaPackage: pass
pkg.AutotoolsPackage, pkg.CudaPackage = AutotoolsPackage, CudaPackage
for name in ("version", "variant", "depends_on", "conflicts", "maintainers", "license"):
    setattr(pkg, name, record(name))
pkg.__all__ = [n for n in dir(pkg) if not n.startswith("_")]
sys.modules["spack"] = types.ModuleType("spack")
sys.modules["spack.package"] = pkg
ns = {"__name__": "shoal_recipe"}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), ns)
Shoal = ns["Shoal"]
assert issubclass(Shoal, AutotoolsPackage) and issubclass(Shoal, CudaPackage)
deps = [a[0] for kind, a, k in calls if kind == "depends_on"]
for want in ("libzmq", "libyaml", "blas", "check", "libsodium"):
    assert any(d.split("@")[0].split("+")[0] == want for d in deps), "no depends_on " + want
assert [k.get("type") for kind, a, k in calls if kind == "depends_on" and a[0].startswith("check")] == ["test"]

class Obj:
    def __init__(self, **kw): self.__dict__.update(kw)
class Spec:
    def __init__(self, blas, cuda=False, arch=("none",), werror=False):
        self.deps = {"blas": Obj(name=blas, headers=Obj(cpp_flags="-I/b/include"),
                                 libs=Obj(ld_flags="-L/b/lib -lb")),
                     "cuda": Obj(prefix="/opt/cuda")}
        self.on = {"+cuda": cuda, "+werror": werror}
        self.variants = {"cuda_arch": Obj(value=arch)}
    def __getitem__(self, name): return self.deps[name]
    def satisfies(self, s): return self.on[s]
def args(spec):
    p = Shoal.__new__(Shoal)
    p.spec = spec
    return p.configure_args()

a = args(Spec("openblas"))
assert a[:3] == ["--with-blas=openblas", "OPENBLAS_CFLAGS=-I/b/include", "OPENBLAS_LIBS=-L/b/lib -lb"], a
assert "--without-cuda" in a and "--enable-werror" not in a, a
for blas, flag in (("intel-oneapi-mkl", "mkl"), ("amdblis", "aocl"), ("blis", "blis"),
                   ("netlib-lapack", "auto")):
    assert args(Spec(blas))[0] == "--with-blas=" + flag, (blas, args(Spec(blas)))
a = args(Spec("openblas", cuda=True, arch=("80", "90"), werror=True))
assert "--with-cuda=/opt/cuda" in a and "--with-cuda-arch=80,90" in a, a
assert "--enable-werror" in a and "--without-cuda" not in a, a
print("check_spack: the recipe's dependencies and configure arguments are as configure.ac expects")
PY
st=$?
if [ $st -ne 0 ]; then
    echo "50%: Checks: 2, Failures: 1, Errors: 0"
    exit 1
fi
echo "100%: Checks: 2, Failures: 0, Errors: 0"
