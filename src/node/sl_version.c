/* shoal --version (sl_version.h). */
#include "node/sl_version.h"

#include "config.h"
#include "kernels/sl_backend.h"
#include "node/sl_commit.h"

void
sl_version_print(FILE *out)
{
    char cuda[1024];

    sl_backend_cuda_describe(cuda, sizeof cuda);
    fprintf(out, "shoal %s\n", PACKAGE_VERSION);
    fprintf(out, "commit: %s\n", SL_COMMIT);
    fprintf(out, "BLAS: %s (%s)\n", SL_BLAS_NAME, SL_BLAS_HOW);
    fprintf(out, "CUDA module: %s\n", cuda);
#ifdef SL_CUDNN_FOUND
    fprintf(out, "cuDNN: %s at build time, not used yet\n", SL_CUDNN_FOUND);
#else
    fprintf(out, "cuDNN: not found at build time\n");
#endif
}
