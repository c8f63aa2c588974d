# Spack recipe for shoal. Copy it into a Spack repository as packages/shoal/package.py
# (spack repo create myrepo; spack repo add myrepo). tests/unit/check_spack.sh checks
# its syntax and the configure arguments it makes.
import os

from spack.package import *


class Shoal(AutotoolsPackage, CudaPackage):
    """Decentralized training of LSTM language models: each node runs local SGD on its
    share of the corpus and averages model components with a few ring neighbours
    (gossip-BMUF) over ZeroMQ, on CPU or CUDA nodes. shoal plot needs gnuplot at run
    time; the tests need the Check library."""

    # No public download yet: `make dist`'s tarball from the directory spack runs in (as
    # for packages downloaded by hand), or a source tree with
    #   spack develop --path /path/to/shoal shoal@0.1.0 && spack install shoal
    url = "file://{0}/shoal-0.1.0.tar.gz".format(os.getcwd())
    manual_download = True

    version("0.1.0")

    variant("werror", default=False, description="Treat compiler warnings as errors (as CI)")

    depends_on("c", type="build")
    depends_on("pkgconfig", type="build")
    # a source tree from git (spack develop) has no configure script yet; a tarball does
    depends_on("autoconf", type="build")
    depends_on("automake", type="build")
    depends_on("m4", type="build")
    depends_on("libzmq@4.3:+libsodium")  # CURVE, the default cluster.security
    depends_on("libsodium@1.0.12:")
    depends_on("libyaml")
    depends_on("blas")  # with a CBLAS interface: OpenBLAS, oneMKL, BLIS, AOCL (amdblis)
    depends_on("check@0.10:", type="test")

    conflicts(
        "cuda_arch=none",
        when="+cuda",
        msg="shoal+cuda needs the GPU architectures: cuda_arch=80 (A100), 90 (H100), ...",
    )

    def autoreconf(self, spec, prefix):
        if not os.path.exists(self.configure_abs_path):
            which("autoreconf", required=True)("-fi")

    def blas_args(self):
        """--with-blas and the flags of the BLAS that Spack chose, for configure's
        link test (pkg-config files are not always there)."""
        blas = self.spec["blas"]
        cflags = blas.headers.cpp_flags
        libs = blas.libs.ld_flags
        if blas.name == "openblas":
            return ["--with-blas=openblas", "OPENBLAS_CFLAGS=" + cflags, "OPENBLAS_LIBS=" + libs]
        if blas.name in ("intel-oneapi-mkl", "intel-mkl"):
            return ["--with-blas=mkl", "MKL_CFLAGS=" + cflags, "MKL_LIBS=" + libs]
        if blas.name == "amdblis":
            return ["--with-blas=aocl", "AOCL_CFLAGS=" + cflags, "AOCL_LIBS=" + libs]
        if blas.name == "blis":
            return ["--with-blas=blis", "BLIS_CFLAGS=" + cflags, "BLIS_LIBS=" + libs]
        return ["--with-blas=auto", "CBLAS_CFLAGS=" + cflags, "CBLAS_LIBS=" + libs]

    def configure_args(self):
        spec = self.spec
        args = self.blas_args()
        if spec.satisfies("+cuda"):
            args.append("--with-cuda={0}".format(spec["cuda"].prefix))
            # the architectures of the fat binary: "80,90" for cuda_arch=80,90
            arches = [a for a in spec.variants["cuda_arch"].value if a != "none"]
            args.append("--with-cuda-arch={0}".format(",".join(arches)))
        else:
            args.append("--without-cuda")
        if spec.satisfies("+werror"):
            args.append("--enable-werror")
        return args
