/* shoal --version (sl_version.h). */
#include "node/sl_version.h"

#include "config.h"
#include "kernels/cpu/sl_cpu_isa.h"
#include "kernels/sl_backend.h"
#include "node/sl_commit.h"

sl_status_t
sl_version_print(FILE *out)
{
    const sl_cpu_isa_t *isa;
    char cuda[1024];

    SL_TRY(sl_cpu_isa_pick(NULL, &isa)); /* SHOAL_CPU_ISA judged as a run would */
    sl_backend_cuda_describe(cuda, sizeof cuda);
    fprintf(out, "shoal %s\n", PACKAGE_VERSION);
    fprintf(out, "commit: %s\n", SL_COMMIT);
    fprintf(out, "BLAS: %s (%s)\n", SL_BLAS_NAME, SL_BLAS_HOW);
    fprintf(out, "cpu loops: %s (built:", isa->desc);
    for (int i = 0; i < sl_cpu_isa_count(); i++)
        fprintf(out, " %s", sl_cpu_isa_at(i)->name);
    fprintf(out, "; SHOAL_CPU_ISA picks a lower one)\n");
    fprintf(out, "CUDA module: %s\n", cuda);
#ifdef SL_CUDNN_FOUND
    fprintf(out, "cuDNN: %s, linked into the CUDA module (device_options.lstm cudnn)\n",
            SL_CUDNN_FOUND);
#else
    fprintf(out, "cuDNN: not linked (not found at build time, or --without-cudnn): "
                 "device_options.lstm fused only\n");
#endif
    return SL_OK;
}
